r"""Ensembles of finite-channel random CNNs: empirical kernels and the exact empirical NTK.

The ground truth of :func:`effth.pdlt.cnn_kernels`.  Networks are the :class:`effth.arch.CNN`
of the module docstring there (NTK-normalized weights :math:`\omega\sim\mathcal N(0,1)`,
multipliers :math:`\sqrt{C_W/\mathrm{fan\,in}}`, fan-in = channels times filter size, biases
:math:`\sqrt{C_b}\,\beta`), pushed through in chunks of independent networks with a leading
network axis (im2col: the patches of a layer are stacked along an offset axis and contracted with
the filters in one batched matrix product).

Measured per network and averaged over the ensemble:

* ``"K"`` at hidden layer :math:`\ell`: the channel-averaged second moment
  :math:`\hat G^{(\ell)}_{\alpha i,\beta j}=n_\ell^{-1}\sum_c z^{(\ell)}_{\alpha c i}z^{(\ell)}_{\beta c j}`,
  whose mean is :math:`K^{(\ell)}+O(1/n)` (exact at layers 1 and 2: :math:`z^{(1)}` is Gaussian);
* ``"K"`` at the output: :math:`f_\alpha f_\beta` averaged over the outputs;
* ``"Theta"`` (output): the exact empirical NTK
  :math:`\hat\Theta_{\alpha\beta}=\sum_p\lambda_p\,\partial_pf_\alpha\,\partial_pf_\beta` by
  backpropagation (:math:`\lambda_p=1` for every :math:`\omega,\beta` in the ``'ntk'``
  parameterization; ``'mup'``: the output is divided by :math:`\gamma=\gamma_0\sqrt{n_{L-1}}` and
  every NTK-normalized parameter has rate :math:`\gamma^2` in units of :math:`\eta`, Bordelon &
  Pehlevan 2022, app. N), averaged over the outputs.

Standard errors: delete-one-group jackknife over up to 32 disjoint groups of networks (the same
grouping as :func:`~effth.simulation.simulate_ensemble`).  NumPy only: this module never imports
effth's theory.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._progress import progress_bar
from .._results import WeightLayers
from effth._signature import public
from effth.arch.cnn import CNN, unpad
from effth.arch.cnn import padding_widths as _pads
from ..errors import DomainError
from ._inputs import as_generator
from ._jackknife import group_units, jackknife_error
from .training import _resolve_callables

__all__ = ["CNNEnsembleStatistics", "simulate_cnn_ensemble"]


# ------------------------------------------------------------------------- im2col and its adjoint
def _patches(s: np.ndarray, filt: tuple, padding: str) -> np.ndarray:
    """``s (m, P, *sp, C)`` -> patches ``(m, P, *out, q, C)`` (offsets in C order)."""
    dims = len(filt)
    sp = s.shape[2:2 + dims]
    if padding != "valid":
        width = [(0, 0), (0, 0)] + [_pads(f, padding) for f in filt] + [(0, 0)]
        s = np.pad(s, width, mode="wrap" if padding == "circular" else "constant")
    out = tuple(n if padding != "valid" else n - f + 1 for n, f in zip(sp, filt))
    blocks = [s[(slice(None), slice(None)) + tuple(slice(d, d + o) for d, o in zip(off, out))]
              for off in itertools.product(*(range(f) for f in filt))]
    return np.stack(blocks, axis=-2)


def _fold(dp: np.ndarray, filt: tuple, padding: str, sp: tuple) -> np.ndarray:
    """Adjoint of :func:`_patches`: ``(m, P, *out, q, C)`` -> ``(m, P, *sp, C)``."""
    dims = len(filt)
    out = dp.shape[2:2 + dims]
    pads = [_pads(f, padding) for f in filt]
    padded = tuple(o + f - 1 for o, f in zip(out, filt))
    acc = np.zeros(dp.shape[:2] + padded + dp.shape[-1:])
    for k, off in enumerate(itertools.product(*(range(f) for f in filt))):
        sl = (slice(None), slice(None)) + tuple(slice(d, d + o) for d, o in zip(off, out))
        acc[sl] += dp[..., k, :]
    if padding == "valid":
        return acc
    return unpad(acc, pads, sp, padding, 2)


# ------------------------------------------------------------------------- one chunk of networks
def _init(net: CNN, C0: int, m: int, rng: np.random.Generator) -> list:
    """NTK-normalized parameters ``[(omega (m, fan_in, n), beta (m, n)), ...]`` per weight layer."""
    params, c_in = [], C0
    for ell in range(1, net.depth):
        q = int(np.prod(net.filter_shapes[ell - 1]))
        n = net.widths[ell - 1]
        params.append((rng.standard_normal((m, q * c_in, n)), rng.standard_normal((m, n))))
        c_in = n
    return params


def _readout_init(net: CNN, S: int, m: int, rng: np.random.Generator) -> tuple:
    n = net.widths[-1]
    fan = n if net.readout == "gap" else n * S
    return rng.standard_normal((m, fan, net.n_out)), rng.standard_normal((m, net.n_out))


def _forward(net: CNN, params: list, readout: tuple, X: np.ndarray, fns: tuple, keep: bool):
    """Forward pass; returns (f (m, P, n_out), hidden z list, cache for the backward pass)."""
    act, dact = fns
    m = params[0][0].shape[0]
    s = np.broadcast_to(X, (m,) + X.shape)
    zs, cache = [], []
    for ell, (om, be) in enumerate(params, start=1):
        filt = net.filter_shapes[ell - 1]
        Pi = _patches(s, filt, net.padding)                      # (m, P, *out, q, C)
        shp = Pi.shape
        flat = Pi.reshape(m, -1, shp[-2] * shp[-1])              # (m, P*S, q*C)
        a = np.sqrt(net.c_w_at(ell) / flat.shape[-1])
        z = a * np.matmul(flat, om)
        cb = net.c_b_at(ell)
        if cb > 0:
            z = z + np.sqrt(cb) * be[:, None, :]
        z = z.reshape(shp[:-2] + (om.shape[-1],))                # (m, P, *out, n)
        zs.append(z)
        if keep:
            cache.append((flat, a, s.shape[2:-1], z))
        s = act(z)
    L = net.depth
    P = X.shape[0]
    n = s.shape[-1]
    if net.readout == "gap":
        phi = s.reshape(m, P, -1, n).mean(axis=2)
    else:
        phi = s.reshape(m, P, -1)
    om, be = readout
    aL = np.sqrt(net.c_w_at(L) / phi.shape[-1])
    f = aL * np.matmul(phi, om)
    if net.c_b_at(L) > 0:
        f = f + np.sqrt(net.c_b_at(L)) * be[:, None, :]
    if net.parameterization == "mup":
        f = f / _gamma(net)
    return f, zs, (cache, phi, aL, s.shape)


def _gamma(net: CNN) -> float:
    return 1.0 if net.parameterization == "ntk" else net.gamma0 * np.sqrt(net.widths[-1])


def _readout_signal(net: CNN, readout: tuple, fw: tuple, E: np.ndarray) -> np.ndarray:
    """``sum_k E_{mu k} df_{mu k} / d sigma(z^{(L-1)})`` ``(m, P, *sp, n)`` for an output co-vector
    ``E`` ``(m, P, n_out)`` (per sample: the Jacobian of output ``k`` is ``E = e_k``)."""
    cache, phi, aL, s_shape = fw
    m, P = phi.shape[:2]
    w = aL / _gamma(net) * np.matmul(E, np.swapaxes(readout[0], -1, -2))   # (m, P, fan)
    if net.readout == "gap":
        S = int(np.prod(s_shape[2:-1]))
        n = s_shape[-1]
        return np.broadcast_to((w / S)[:, :, None, :], (m, P, S, n)).reshape(s_shape)
    return w.reshape(s_shape)


def _backprop(net: CNN, params: list, fw: tuple, fns: tuple, ds: np.ndarray):
    r"""Pull the signal ``ds = dF/d sigma(z^{(L-1)})`` back through the convolutions (the adjoint
    of im2col, :func:`_fold`); yields ``(ell, patches (m, P, S, qC), a_ell, dF/dz^{(ell)}
    (m, P, S, n))`` for ``ell = L-1 .. 1``, from which the filter gradients
    :math:`a_\ell\sum_i\mathrm{patch}_i\otimes\partial F/\partial z_i` follow (per sample for
    the NTK, summed over samples for gradient descent)."""
    act, dact = fns
    cache = fw[0]
    m, P = ds.shape[:2]
    for ell in range(net.depth - 1, 0, -1):
        flat, a, sp_in, z = cache[ell - 1]
        dz = ds * dact(z)                                        # (m, P, *out, n)
        dzf = dz.reshape(m, P, -1, dz.shape[-1])                 # (m, P, S, n)
        Pf = flat.reshape(m, P, dzf.shape[2], -1)                # (m, P, S, qC)
        yield ell, Pf, a, dzf
        if ell > 1:
            om = params[ell - 1][0]
            dflat = a * np.matmul(dzf.reshape(m, -1, dzf.shape[-1]), np.swapaxes(om, -1, -2))
            q = int(np.prod(net.filter_shapes[ell - 1]))
            c_in = om.shape[1] // q
            dp = dflat.reshape(z.shape[:-1] + (q, c_in))
            ds = _fold(dp, net.filter_shapes[ell - 1], net.padding, tuple(sp_in))


def _ntk(net: CNN, params: list, readout: tuple, fw: tuple, fns: tuple) -> np.ndarray:
    """Exact empirical NTK ``(m, P, P)`` averaged over the outputs, by backpropagation."""
    cache, phi, aL, s_shape = fw
    m, P = phi.shape[:2]
    L = net.depth
    inv_g = 1.0 / _gamma(net)                  # 'mup': f / gamma; rates gamma^2 (units of eta)
    rate = 1.0 / inv_g ** 2
    H = np.zeros((m, P, P))
    base = (aL ** 2) * np.matmul(phi, np.swapaxes(phi, -1, -2)) + net.c_b_at(L)
    for k in range(net.n_out):
        Hk = base * inv_g ** 2
        E = np.zeros((m, P, net.n_out))
        E[..., k] = 1.0
        ds = _readout_signal(net, readout, fw, E)                   # dF_k/ds^{L-1}
        for ell, Pf, a, dzf in _backprop(net, params, fw, fns, ds):
            J = a * np.einsum("mpsk,mpsn->mpkn", Pf, dzf, optimize=True)
            Jf = J.reshape(m, P, -1)
            Hk = Hk + np.matmul(Jf, np.swapaxes(Jf, -1, -2))
            if net.c_b_at(ell) > 0:
                gb = dzf.sum(axis=2)
                Hk = Hk + net.c_b_at(ell) * np.matmul(gb, np.swapaxes(gb, -1, -2))
        H += rate * Hk
    return H / net.n_out


# ------------------------------------------------------------------------------------ results
@public
@dataclass(repr=False)
class CNNEnsembleStatistics(WeightLayers):
    r"""Ensemble means (and jackknife errors) of the empirical kernels of random finite CNNs.

    Read it like :class:`~effth.pdlt.CNNKernels` (same names and shapes): ``value("K",
    layer=ℓ)`` (hidden: ``(P, S, P, S)`` over image-pixel pairs; output ``(P, P)``),
    ``value("Theta")`` (output NTK, ``(P, P)``), ``stderr(...)`` the standard errors.

    Attributes
    ----------
    mean, err : dict
        ``(name, layer) -> ndarray``.
    net : CNN
    networks : int
    spatial_shapes : tuple
    seed : Any
    samples : dict or None
        ``(name, layer) -> (networks, ...)`` per-network kernels with ``keep=True``: hidden
        ``"K"`` (:math:`\hat G^{(\ell)}`) and the output ``"Theta"`` (the output's
        :math:`f_\alpha f_\beta` does not concentrate and is not kept).
    """

    mean: dict
    err: dict
    net: CNN
    networks: int
    spatial_shapes: tuple
    seed: Any = None
    samples: dict | None = None

    @property
    def depth(self) -> int:
        return self.net.depth

    @property
    def layers(self) -> tuple:
        return tuple(range(1, self.net.depth + 1))

    def _key(self, name: str, layer: Any) -> tuple:
        ell = self.depth if layer is None else layer
        if isinstance(ell, bool) or not isinstance(ell, (int, np.integer)) or not 1 <= ell <= self.depth:
            raise DomainError(f"layer must be an int in 1..{self.depth}, got {layer!r}")
        if (name, int(ell)) not in self.mean:
            held = sorted({k[0] for k in self.mean})
            raise DomainError(f"{name!r} at layer {ell} was not measured; held: {held} "
                              "('Theta' at the output only, with ntk=True)")
        return name, int(ell)

    def value(self, name: str, layer: int | None = None) -> np.ndarray:
        """Ensemble mean of ``name`` at book layer ``layer`` (``None``: the output)."""
        return self.mean[self._key(name, layer)]

    def stderr(self, name: str, layer: int | None = None) -> np.ndarray:
        """Jackknife standard error of :meth:`value`."""
        return self.err[self._key(name, layer)]

    def __repr__(self) -> str:
        P = self.mean["K", self.depth].shape[0]
        return (f"CNNEnsembleStatistics({self.networks} networks, channels={self.net.widths}, "
                f"{P} images of shape {self.spatial_shapes[0]}, depth={self.depth})")


def _check_count(v: Any, name: str, minimum: int, allow_none: bool = False) -> int | None:
    if v is None and allow_none:
        return None
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or v < minimum:
        raise DomainError(f"{name} must be an int >= {minimum}, got {v!r}")
    return int(v)


@public
def simulate_cnn_ensemble(net: CNN, X: Any, *, networks: int, seed: Any = 0,
                          batch: int | None = None, ntk: bool = True, keep: bool = False,
                          progress: bool | None = None) -> CNNEnsembleStatistics:
    r"""Draw ``networks`` random CNNs and average their empirical kernels (module docstring).

    Parameters
    ----------
    net : CNN
        With finite ``widths`` (the channels).
    X : array_like, shape (P, *spatial) or (P, *spatial, C_0)
        Images (channels last).
    networks : int
        Ensemble size (>= 2).
    seed : int, SeedSequence, Generator or None
    batch : int, optional
        Networks per chunk (default: chunks of about 32 MB of activations).
    ntk : bool
        Also measure the exact empirical NTK of the output (backpropagation).
    keep : bool
        Keep the per-network kernels (``samples``: :math:`\hat G^{(\ell)}` of the hidden layers
        and :math:`\hat\Theta` of the output, leading network axis), e.g. to measure how a single
        network's kernel concentrates around the infinite-width one (mean squared deviation
        :math:`\propto1/n`).
    progress : bool, optional
        Progress bar over the chunks.

    Returns
    -------
    CNNEnsembleStatistics
    """
    if not isinstance(net, CNN):
        raise DomainError(f"net must be an effth.arch.CNN, got {type(net).__name__}")
    if net.widths is None:
        raise DomainError("the CNN has infinite channels (widths=None); pass widths=... to simulate")
    networks = _check_count(networks, "networks", 2)
    batch = _check_count(batch, "batch", 1, allow_none=True)
    Xa = net.images(X)
    shapes = net.spatial_shapes(Xa.shape[1:-1])
    fns = (_resolve_callables(net.activation)[1] if ntk else (net.act.numpy(0), None))
    P, C0 = Xa.shape[0], Xa.shape[-1]
    if batch is None:
        per = P * max(int(np.prod(s)) for s in shapes) * max(
            [C0 * int(np.prod(net.filter_shapes[0]))] + [n * int(np.prod(f)) for n, f in
                                                         zip(net.widths, net.filter_shapes)])
        batch = max(1, min(networks, int(4e6 // max(per, 1))))
    rng = as_generator(seed)
    K, units = group_units(networks, batch)
    L = net.depth
    sums = [dict() for _ in range(K)]
    counts = np.zeros(K)
    kept: dict | None = {} if keep else None
    with np.errstate(over="ignore", invalid="ignore"), \
            progress_bar(len(units), "CNN ensemble", progress=progress, unit="chunk") as bar:
        for g, _, m in units:
            params = _init(net, C0, m, rng)
            readout = _readout_init(net, int(np.prod(shapes[-1])), m, rng)
            f, zs, fw = _forward(net, params, readout, Xa, fns, keep=ntk)
            per = {}
            for ell, z in enumerate(zs, start=1):
                zf = z.reshape(m, -1, z.shape[-1])
                per["K", ell] = np.matmul(zf, np.swapaxes(zf, -1, -2)) / z.shape[-1]
            per["K", L] = np.matmul(f, np.swapaxes(f, -1, -2)) / net.n_out
            if ntk:
                per["Theta", L] = _ntk(net, params, readout, fw, fns)
            if kept is not None:
                for key, v in per.items():
                    if key != ("K", L):
                        kept.setdefault(key, []).append(v)
            out = {key: v.sum(axis=0) for key, v in per.items()}
            for key, v in out.items():
                if not np.all(np.isfinite(v)):
                    raise DomainError(f"non-finite {key[0]} at layer {key[1]} (overflow); reduce "
                                      "c_w, c_b, the depth or the input scale")
                sums[g][key] = sums[g].get(key, 0.0) + v
            counts[g] += m
            bar.update()
    tot = {k: sum(s[k] for s in sums) for k in sums[0]}
    M = counts.sum()
    mean, err = {}, {}
    for key, v in tot.items():
        mu = v / M
        if K >= 2:
            loo = np.stack([(v - s[key]) / (M - c) for s, c in zip(sums, counts)])
            se = jackknife_error(loo)
        else:
            se = np.full_like(mu, np.nan)
        if key[1] < L:
            S = int(np.prod(shapes[key[1]]))
            mu, se = mu.reshape(P, S, P, S), se.reshape(P, S, P, S)
        mean[key], err[key] = mu, se
    samples = None
    if kept is not None:
        samples = {}
        for key, v in kept.items():
            arr = np.concatenate(v)
            if key[1] < L:
                S = int(np.prod(shapes[key[1]]))
                arr = arr.reshape(-1, P, S, P, S)
            samples[key] = arr
    return CNNEnsembleStatistics(mean=mean, err=err, net=net, networks=networks,
                                 spatial_shapes=shapes, seed=seed, samples=samples)
