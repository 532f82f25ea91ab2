r"""Entropy and mutual information of preactivations measured on ensembles of finite networks.

For one input :math:`x` and a plain MLP, the :math:`n_\ell` preactivations of layer :math:`\ell`
are, given the layer below, i.i.d. Gaussians of variance the stochastic metric
:math:`\widehat G^{(\ell)}=C_b+\frac{C_W}{n_{\ell-1}}\sum_j\sigma(z^{(\ell-1)}_j)^2` (PDLT §4.3,
eq. (4.70)).  The joint density of any :math:`m` of them is therefore the exact scale mixture

.. math::
    p(z_1,\dots,z_m)=\mathbb E_{\widehat G}\Big[(2\pi\widehat G)^{-m/2}
    e^{-\rho/(2\widehat G)}\Big],\qquad \rho=\textstyle\sum_{i\le m}z_i^2,

so its differential entropy :math:`\mathcal S_m=-\mathbb E[\log p]` is a one-dimensional integral
over :math:`\rho` once the distribution of :math:`\widehat G` is known.  The functions here draw
:math:`\widehat G^{(\ell)}` from literal random networks (:func:`simulate_ensemble`), use the
empirical mixture as :math:`p` (an unbiased density estimate), integrate in :math:`\log\rho` with
the trapezoid rule (spectrally accurate for this smooth, exponentially decaying integrand) and
give delete-one-group jackknife errors.  Nothing from effth's theory enters: these are the
measured side of PDLT app. A, to be compared with
:func:`effth.pdlt.information.entropy_expansion` and
:func:`effth.pdlt.information.mutual_information_expansion` at
:math:`\epsilon_V=V^{(\ell)}/(n_{\ell-1}G^{(\ell)2})` (eqs. (A.52)–(A.53), (A.66)–(A.67)).

Residual MLPs (PDLT (B.4)).  At a skip layer the neurons are, given the layer below, independent
:math:`\mathcal N(\gamma z^{(\ell-1)}_i,\ \xi^2\widehat G^{(\ell)})`: each carries its own history
through the skip term, so the marginal is *not* a scale mixture in :math:`\widehat G` alone.  It is
the exact mixture of shifted Gaussians :math:`p(z)=\mathbb E\big[\prod_{i\le m}\mathcal
N(z_i;\gamma z^{(\ell-1)}_i,\xi^2\widehat G^{(\ell)})\big]`, but used with the sampled
:math:`z^{(\ell-1)}_i` as its empirical version it carries an :math:`O(1)` scatter of the means
whose sample skewness and kurtosis add an :math:`O(1/N)` bias and noise to the entropy — as large
as the :math:`O(1/n^2)` signal at any useful :math:`N`.  At the first skip layer, :math:`\ell=2`,
the chosen neuron's own history is integrated out exactly instead: :math:`z^{(1)}_1=a` is
:math:`\mathcal N(0,G^{(1)})` independently of the other neurons, and with
:math:`R=\sum_{j>1}\sigma(z^{(1)}_j)^2` read from each network,

.. math::
    p(z)=\mathbb E_R\int da\,\mathcal N(a;0,G^{(1)})\,
    \mathcal N\big(z;\gamma a,\ \xi^2[C_b+\tfrac{C_W}{n_1}(R+\sigma(a)^2)]\big),

the :math:`a` integral by Gauss–Legendre on :math:`[-10,0]` and :math:`[0,10]` standard deviations
(spectrally accurate also for kinked :math:`\sigma`) and the entropy by the trapezoid rule in
:math:`z`.  Only the :math:`O(1/\sqrt{n})` fluctuation of :math:`R` is sampled.  The reference is
the Gaussian of the mixture's own variance (so the value is :math:`-D_{\rm KL}(p\|\mathcal N)`),
one neuron only, and ``epsilon`` is not measured (NaN): compare ``value`` with the theory at the
derived :math:`V^{(2)}`, :math:`T^{(2)}` — at this order the third cumulant adds
:math:`-\tfrac{m(m+2)}4\,T^2/(n^2G^3)` to (A.52) (the Edgeworth negentropy
:math:`\tfrac1{12}\sum\tilde\kappa_{ijk}^2+\tfrac1{48}\sum\tilde\kappa_{ijkl}^2` with
:math:`\kappa_{ijk}=\frac Tn(\delta_{ij}+\delta_{ik}+\delta_{jk})`, a term of the same order
:math:`1/n^2` as :math:`\epsilon_V^2`).  Deeper skip layers, and more than one neuron there, are
refused (the own history is then not Gaussian, and the plain conditional mixture is too noisy).
At a layer without a skip (the output layer) a residual MLP is again a scale mixture in
:math:`\xi^2\widehat G`, handled as for a plain MLP.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import special, stats

from effth._signature import public
from effth._validate import input_matrix, integer, real_array
from effth.errors import ConvergenceError, DomainError

from ._jackknife import jackknife_error

__all__ = ["InformationEstimate", "mixture_entropy", "sampled_entropy",
           "sampled_mutual_information"]

_TAIL = 1e-15          # chi^2_m quantiles that bound the rho grid (mass outside < 2e-15)
_GRID = 401            # trapezoid nodes in log rho (doubled until the mass is 1 to 1e-11)
_trapezoid = getattr(np, "trapezoid", None) or np.trapz


@dataclass(frozen=True)
class InformationEstimate:
    r"""An entropy or mutual information measured on an ensemble (nats).

    Attributes
    ----------
    value, stderr : float
        The estimate and its delete-one-group jackknife standard error.  For an entropy the value
        is the *deviation from the Gaussian* :math:`\mathcal S_m-\frac m2\log(2\pi e\,\bar G)`
        (the quantity of PDLT (A.52)); for a mutual information it is
        :math:`\mathcal S_{m_1}+\mathcal S_{m_2}-\mathcal S_{m_1+m_2}` (A.53).
    epsilon, epsilon_stderr : float
        The measured expansion parameter :math:`\epsilon_V=\mathrm{Var}[\widehat G]/\bar G^2`
        (:math:`V/(nG^2)` of app. A) with its jackknife error.
    G : float
        :math:`\bar G`, the mean of the stochastic metric.
    neurons : tuple of int
        ``(m,)`` or ``(m1, m2)``.
    layer, networks : int
        Book layer number and ensemble size.
    """

    value: float
    stderr: float
    epsilon: float
    epsilon_stderr: float
    G: float
    neurons: tuple
    layer: int
    networks: int
    loo_value: np.ndarray = field(default=None, repr=False, compare=False)
    loo_epsilon: np.ndarray = field(default=None, repr=False, compare=False)

    def residual(self, theory) -> tuple[float, float]:
        r"""``value - theory(epsilon)`` and its jackknife standard error.

        ``theory`` is a function of :math:`\epsilon_V` (e.g. ``sympy.lambdify`` of
        :func:`effth.pdlt.information.mutual_information_expansion`).  Evaluating it at the
        *measured* :math:`\epsilon_V` of the same networks, group by group, cancels the
        fluctuation of :math:`\epsilon_V` that dominates ``stderr``: the error of the residual is
        that of the theory's functional form alone.
        """
        if not callable(theory):
            raise DomainError("theory must be a function of epsilon_V")
        if not np.isfinite(self.epsilon):
            raise DomainError("epsilon_V is not measured for this estimate (a skip layer of a "
                              "residual MLP): compare value with the theory at the derived V, T")
        return self.statistic(lambda value, eps: value - float(theory(eps)))

    def statistic(self, fn) -> tuple[float, float]:
        r"""``fn(value, epsilon)`` and its delete-one-group jackknife error, ``fn`` evaluated on
        every group's estimates — e.g. ``lambda I, e: (I - e**2 / 8) / e**3``, the measured
        :math:`\epsilon_V^3` coefficient of the mutual information."""
        if not callable(fn):
            raise DomainError("fn must be a function of (value, epsilon)")
        full = float(fn(self.value, self.epsilon))
        loo = np.array([float(fn(v, e)) for v, e in zip(self.loo_value, self.loo_epsilon)])
        return full, float(jackknife_error(loo[:, None])[0])

    def __repr__(self) -> str:
        what = "S - S_gauss" if len(self.neurons) == 1 else "I"
        return (f"InformationEstimate({what} = {self.value:.6g} ± {self.stderr:.2g} nats, "
                f"neurons={self.neurons}, layer={self.layer}, epsilon_V={self.epsilon:.4g} "
                f"± {self.epsilon_stderr:.2g}, networks={self.networks})")


def _grid(G: np.ndarray, m: int, nodes: int) -> np.ndarray:
    lo = np.log(G.min() * stats.chi2.ppf(_TAIL, m))
    hi = np.log(G.max() * stats.chi2.isf(_TAIL, m))
    return np.linspace(lo, hi, nodes)


def _log_mixture_sums(G: np.ndarray, bounds: np.ndarray, m: int, t: np.ndarray):
    r"""Per group k (the contiguous samples ``bounds[k]:bounds[k+1]``) and node
    :math:`t=\log\rho`: :math:`\sum_{j\in k}(\widehat G_j/G_*)^{-m/2}
    e^{-\rho/(2\widehat G_j)+\rho/(2G_*)}` with :math:`G_*=\max\widehat G` (every exponent is
    bounded above by a few tens, so nothing overflows)."""
    rho = np.exp(t)
    Gs = G.max()
    a = -0.5 * m * np.log(G / Gs)
    b = 0.5 / G - 0.5 / Gs
    K = bounds.size - 1
    out = np.zeros((K, t.size))
    step = max(1, int(2 ** 20 // t.size))
    for k in range(K):
        for s in range(int(bounds[k]), int(bounds[k + 1]), step):
            e = min(s + step, int(bounds[k + 1]))
            out[k] += np.exp(a[s:e, None] - b[s:e, None] * rho[None, :]).sum(axis=0)
    return out, Gs


def _entropy_from_sums(sums: np.ndarray, count: float, Gs: float, m: int, t: np.ndarray):
    r""":math:`\mathcal S_m` of the mixture whose summed kernel is ``sums`` over ``count`` samples.

    With :math:`g(\rho)=p(z)`, the density of :math:`\rho` is
    :math:`f=\frac{\pi^{m/2}}{\Gamma(m/2)}\rho^{m/2-1}g` and :math:`\mathcal S=-\int f\log g\,d\rho`,
    integrated in :math:`t=\log\rho` (:math:`d\rho=\rho\,dt`).
    """
    rho = np.exp(t)
    with np.errstate(divide="ignore"):
        log_g = (np.log(sums / count) - 0.5 * m * np.log(2 * np.pi * Gs) - rho / (2 * Gs))
    log_w = 0.5 * m * np.log(np.pi) - special.gammaln(0.5 * m) + 0.5 * m * t
    f_rho = np.exp(log_w + log_g)                       # f(rho) * rho
    integrand = np.where(f_rho > 0, -f_rho * log_g, 0.0)
    return float(_trapezoid(integrand, t)), float(_trapezoid(f_rho, t))


def _check_samples(G_hat: Any) -> np.ndarray:
    G = real_array(G_hat, "G_hat").ravel()
    if G.size < 4:
        raise DomainError("G_hat must be an array of at least 4 samples of the stochastic metric")
    if not np.all(np.isfinite(G)):
        raise DomainError("G_hat must hold finite samples of the stochastic metric")
    if np.any(G <= 0):
        raise DomainError(f"{int(np.sum(G <= 0))} of the {G.size} samples of the stochastic metric "
                          "are <= 0: the preactivations then have an atom at z = 0 (for ReLU "
                          "with C_b = 0, a network whose previous layer is all inactive), and "
                          "their differential entropy is -inf; use wider layers or C_b > 0")
    return G


def _groups(size: int) -> tuple[int, np.ndarray, np.ndarray]:
    """32 (or size // 2) contiguous groups: their count, per-sample labels and bounds."""
    K = min(32, size // 2)
    labels = (np.arange(size) * K) // size
    return K, labels, np.searchsorted(labels, np.arange(K + 1))


def _estimate(G: np.ndarray, neurons: tuple, layer: int, networks: int) -> InformationEstimate:
    K, groups, bounds = _groups(G.size)
    counts = np.bincount(groups, minlength=K).astype(float)
    n = float(G.size)
    # the entropy combination sum_m c_m S_m (each distinct m evaluated once: I(1;1) = 2 S_1 - S_2)
    combo: dict = {}
    for m, c in ((neurons[0], 1.0),) if len(neurons) == 1 else (
            (neurons[0], 1.0), (neurons[1], 1.0), (neurons[0] + neurons[1], -1.0)):
        combo[m] = combo.get(m, 0.0) + c
    full, loo = 0.0, np.zeros(K)
    for m, sign in combo.items():
        for nodes in (_GRID, 2 * _GRID, 4 * _GRID, 8 * _GRID):
            t = _grid(G, m, nodes)
            sums, Gs = _log_mixture_sums(G, bounds, m, t)
            total = sums.sum(axis=0)
            S, mass = _entropy_from_sums(total, n, Gs, m, t)
            if abs(mass - 1.0) < 1e-11:
                break
        else:
            raise ConvergenceError(f"the rho quadrature of the m = {m} mixture entropy did not "
                                   f"reach unit mass (off by {abs(mass - 1):.2g} at {nodes} nodes); "
                                   "the samples of G_hat spread over too many decades")
        full += sign * S
        loo += sign * np.array([_entropy_from_sums(total - sums[k], n - counts[k], Gs, m, t)[0]
                                for k in range(K)])
    sum_k = np.bincount(groups, weights=G, minlength=K)
    if len(neurons) == 1:                        # deviation from the Gaussian of the same G
        m = neurons[0]
        ref = lambda mean: 0.5 * m * np.log(2 * np.pi * np.e * mean)  # noqa: E731
        full -= ref(G.mean())
        loo -= ref((G.sum() - sum_k) / (n - counts))
    sq_k = np.bincount(groups, weights=G * G, minlength=K)

    def eps(s, q, c):
        mean = s / c
        return (q / c - mean ** 2) * c / (c - 1) / mean ** 2

    e_full = eps(G.sum(), (G * G).sum(), n)
    e_loo = eps(G.sum() - sum_k, (G * G).sum() - sq_k, n - counts)
    return InformationEstimate(float(full), float(jackknife_error(loo[:, None])[0]), float(e_full),
                               float(jackknife_error(e_loo[:, None])[0]), float(G.mean()),
                               tuple(int(v) for v in neurons), int(layer), int(networks),
                               loo, e_loo)


def _neurons(m: Any, name: str) -> int:
    return integer(m, name, minimum=1)


@public
def mixture_entropy(G_hat: Any, m: int = 1) -> InformationEstimate:
    r"""Entropy of :math:`m` preactivations whose variance is drawn from the samples ``G_hat``.

    The density is the empirical scale mixture
    :math:`p(z)=\frac1N\sum_j(2\pi\widehat G_j)^{-m/2}e^{-|z|^2/(2\widehat G_j)}`; the returned
    ``value`` is :math:`\mathcal S_m-\frac m2\log(2\pi e\bar G)` (nats, :math:`\le 0`), with a
    jackknife error over 32 groups of samples.

    Parameters
    ----------
    G_hat : array_like
        Samples (>= 4) of the stochastic metric :math:`\widehat G` of one input, positive.
    m : int
        Number of neurons (>= 1).

    Examples
    --------
    >>> r = mixture_entropy(np.full(8, 2.0), m=3)     # no fluctuation: exactly Gaussian
    >>> abs(r.value) < 1e-12
    True
    """
    G = _check_samples(G_hat)
    return _estimate(G, (_neurons(m, "m"),), 0, G.size)


def _metric_samples(net: Any, x: Any, layer: Any, networks: Any, seed: Any, batch: Any,
                    progress: Any, need: int) -> tuple[np.ndarray, int]:
    from .ensemble import simulate_ensemble

    X = input_matrix(x, "x")
    if X.shape[0] != 1:
        raise DomainError(f"x must be one input (app. A treats a single input), got {X.shape[0]}")
    depth = integer(getattr(net, "depth", None), "net.depth", minimum=1)
    if depth < 2:
        raise DomainError("a network of depth 1 has no fluctuating metric: sampled entropies "
                          "need depth >= 2")
    layer = max(depth - 1, 2) if layer is None else integer(layer, "layer", minimum=2)
    if layer > depth:
        raise DomainError(f"layer={layer} exceeds the network's depth {depth}")
    width = net.hidden_widths[layer - 1] if layer < depth else net.n_out
    if need > width:
        raise DomainError(f"{need} neurons asked for but layer {layer} has width {width}")
    networks = integer(networks, "networks", minimum=64)
    if net.gamma_at(layer) != 0.0:
        if layer != 2 or need != 1:
            raise DomainError(
                f"sampled entropies of a residual MLP at a skip layer need layer 2 and one neuron "
                f"(got layer {layer}, {need} neurons): there the neuron's own history z^(1)_i is "
                "Gaussian and is integrated out exactly; deeper, or for several neurons, the "
                "mixture over the sampled conditional means gamma z^(l-1)_i is dominated by their "
                "O(1/networks) sample skewness (PDLT (B.4); module docstring)")
        ens = simulate_ensemble(net, X, networks=networks, seed=seed, batch=batch,
                                method="conditional", layers=[1], keep_samples=True,
                                progress=progress)
        return ens.samples[1][:, 0, :], layer
    ens = simulate_ensemble(net, X, networks=networks, seed=seed, batch=batch,
                            method="conditional", layers=[layer], keep_samples=True,
                            progress=progress)
    return _check_samples(np.ascontiguousarray(ens.G_hat_samples[layer][:, 0, 0])), layer


@public
def sampled_entropy(net: Any, x: Any, *, m: int = 1, layer: int | None = None,
                    networks: int = 20000, seed: Any = 0, batch: int | None = None,
                    progress: bool | None = None) -> InformationEstimate:
    r"""Entropy of :math:`m` preactivations of layer ``layer`` measured on random networks.

    Draws ``networks`` random networks (:func:`simulate_ensemble` with its exactly equivalent
    ``method="conditional"`` sampling, up to ``layer``), reads the stochastic metric
    :math:`\widehat G^{(\ell)}` of the input, and returns
    :math:`\mathcal S_m-\frac m2\log(2\pi e\,\bar G)` (nats) of the exact scale mixture (module
    docstring) with its jackknife error — the measured counterpart of PDLT (A.52), (A.66):
    :math:`-\frac{m(m+2)}{16}\epsilon_V^2+O(\epsilon_V^3)`.

    Parameters
    ----------
    net : MLP
        An MLP with numeric widths.  A residual MLP (PDLT (B.4)) is accepted at its first skip
        layer (``layer=2``, ``m=1``; the neuron's own history integrated out exactly, ``epsilon``
        NaN: compare with :func:`effth.pdlt.information.skip_layer_entropy`, module docstring)
        and at layers without a skip (a scale mixture in :math:`\xi^2\widehat G` as for a plain
        MLP); deeper skip layers are refused.
    x : array_like (1, n_0) or (n_0,)
        One input.
    m : int
        Neurons of the layer (1 .. its width).
    layer : int, optional
        Book layer (2 .. depth; layer 1 has no fluctuation), default the last hidden layer
        (layer 2 for depth 2).
    networks : int
        Ensemble size (>= 64).
    seed, batch, progress
        As in :func:`simulate_ensemble`.
    """
    m = _neurons(m, "m")
    G, layer = _metric_samples(net, x, layer, networks, seed, batch, progress, m)
    if G.ndim == 2:                                  # residual MLP, skip layer 2: z^(1) samples
        return _residual_estimate(net, x, G, layer)
    return _estimate(G, (m,), layer, G.size)


_GL = 48               # Gauss-Legendre nodes on each half line of the own-history integral
_A_RANGE = 10.0        # ... which spans +- this many standard deviations of z^(1)


def _residual_estimate(net: Any, x: Any, z1: np.ndarray, layer: int) -> InformationEstimate:
    r"""One neuron of skip layer 2 (module docstring): the exact mixture over the sampled
    :math:`R=\sum_{j>1}\sigma(z^{(1)}_j)^2`, the neuron's own :math:`z^{(1)}_1` integrated out."""
    X = input_matrix(x, "x")
    n1 = z1.shape[1]
    G1 = net.c_b_at(1) + net.c_w_at(1) * float(X[0] @ X[0]) / X.shape[1]
    g, xi, cw, cb = net.gamma_at(layer), net.xi_at(layer), net.c_w_at(layer), net.c_b_at(layer)
    sigma = net.act.numpy(0)
    with np.errstate(over="ignore", invalid="ignore"):
        R = np.sum(np.asarray(sigma(z1[:, 1:]), dtype=float) ** 2, axis=1)
    if not np.all(np.isfinite(R)):
        raise DomainError("the activations of layer 1 overflow: sampled entropy undefined")
    u, w = np.polynomial.legendre.leggauss(_GL)
    half = 0.5 * _A_RANGE * (u + 1.0)
    a = np.sqrt(G1) * np.concatenate([-half[::-1], half])
    wa = np.concatenate([w[::-1], w]) * 0.5 * _A_RANGE * np.exp(-0.5 * (a * a) / G1) / np.sqrt(2 * np.pi)
    wa = wa / wa.sum()                       # the exact normalisation, to 1e-22 before this
    with np.errstate(over="ignore", invalid="ignore"):
        own = np.asarray(sigma(a), dtype=float) ** 2
    v = xi * xi * (cb + cw * (R[:, None] + own[None, :]) / n1)          # (networks, nodes)
    if not np.all(np.isfinite(v)) or np.any(v <= 0):
        raise DomainError("the conditional variance xi^2 G_hat^(2) is <= 0 or not finite for some "
                          "network (for ReLU with C_b = 0, a dead layer 1): the entropy is -inf; "
                          "use wider layers or C_b > 0")
    mu = g * a
    s_min, s_max = np.sqrt(v.min()), np.sqrt(v.max())
    edge = abs(g) * _A_RANGE * np.sqrt(G1) + 9.0 * s_max
    size = z1.shape[0]
    K, groups, bounds = _groups(size)
    counts = np.diff(bounds).astype(float)
    for h_ratio in (2.0, 3.0, 4.0):
        nodes = int(np.ceil(2 * edge / (s_min / h_ratio))) + 1
        zg = np.linspace(-edge, edge, nodes)
        h = zg[1] - zg[0]
        sums = np.zeros((K, nodes))
        step = max(1, int(2 ** 22 // (nodes * a.size)))
        for k in range(K):
            for s0 in range(int(bounds[k]), int(bounds[k + 1]), step):
                e = min(s0 + step, int(bounds[k + 1]))
                vv = v[s0:e, :, None]
                dens = np.exp(-0.5 * (zg[None, None, :] - mu[None, :, None]) ** 2 / vv) / np.sqrt(
                    2 * np.pi * vv)
                sums[k] += np.einsum("q,jqz->z", wa, dens)
        mass = h * sums.sum() / size
        if abs(mass - 1.0) < 1e-11:
            break
    else:
        raise ConvergenceError(f"the z quadrature of the residual mixture entropy did not reach "
                               f"unit mass (off by {abs(mass - 1):.2g} at {nodes} nodes)")
    # the mixture's own second moment, per group: sum_q w_q (mu_q^2 + v_jq)
    m2 = (wa * mu * mu).sum() + v @ wa
    m2_k = np.bincount(groups, weights=m2, minlength=K)

    def dev(p_sum, c, second):
        p = p_sum / c
        with np.errstate(divide="ignore"):
            lp = np.where(p > 0, np.log(np.where(p > 0, p, 1.0)), 0.0)
        S = -h * float(np.sum(p * lp))
        return S - 0.5 * np.log(2 * np.pi * np.e * second / c)

    total = sums.sum(axis=0)
    full = dev(total, size, m2.sum())
    loo = np.array([dev(total - sums[k], size - counts[k], m2.sum() - m2_k[k]) for k in range(K)])
    nan = np.full(K, np.nan)
    return InformationEstimate(float(full), float(jackknife_error(loo[:, None])[0]), float("nan"),
                               float("nan"), float(m2.mean()), (1,), int(layer), int(size), loo, nan)


@public
def sampled_mutual_information(net: Any, x: Any, *, m1: int = 1, m2: int = 1,
                               layer: int | None = None, networks: int = 20000, seed: Any = 0,
                               batch: int | None = None,
                               progress: bool | None = None) -> InformationEstimate:
    r"""Mutual information between two disjoint groups of ``m1`` and ``m2`` preactivations of
    one layer, measured on random networks (nats, with a jackknife error).

    :math:`\mathcal I=\mathcal S_{m_1}+\mathcal S_{m_2}-\mathcal S_{m_1+m_2}` of the exact scale
    mixture (module docstring); the measured counterpart of PDLT (A.53), (A.67):
    :math:`\frac{m_1m_2}{8}\epsilon_V^2+O(\epsilon_V^3)`.  Arguments as in
    :func:`sampled_entropy`; ``m1 + m2`` must not exceed the layer's width.
    """
    m1, m2 = _neurons(m1, "m1"), _neurons(m2, "m2")
    G, layer = _metric_samples(net, x, layer, networks, seed, batch, progress, m1 + m2)
    return _estimate(G, (m1, m2), layer, G.size)
