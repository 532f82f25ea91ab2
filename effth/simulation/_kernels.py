r"""Forward passes over a chunk of independent random networks and their running sums.

Private helpers of :mod:`effth.simulation.ensemble`.  NumPy only; nothing here may import a
theory module of effth (this is the ground truth the theory is checked against).

Layout conventions (all float64):

* ``z`` : preactivations of one layer for a chunk of ``m`` networks, shape ``(m, N_D, n_l)``
  (network, input, neuron).
* ``G_hat`` : stochastic metric of that layer, shape ``(m, N_D, N_D)`` (or ``(N_D, N_D)`` for
  layer 1, where it is deterministic).
* Sample pairs ``(a, b)`` with ``a <= b`` are packed into ``p = N_D (N_D + 1) / 2`` slots
  (row-major upper triangle, :func:`pair_index`); four-index sums are stored as ``(p, p)``
  matrices over (pair, pair) and unpacked at the end.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..errors import DomainError

__all__ = ["Plan", "LayerSums", "pair_index", "run_chunk"]


def pair_index(n_inputs: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Packing of symmetric sample pairs.

    Returns
    -------
    iu, ju : ndarray (p,)
        Row/column of each packed pair (``iu <= ju``).
    pid : ndarray (N_D, N_D)
        Packed slot of pair ``(a, b)``; symmetric.
    """
    iu, ju = np.triu_indices(n_inputs)
    pid = np.empty((n_inputs, n_inputs), dtype=np.intp)
    pid[iu, ju] = np.arange(iu.size)
    pid[ju, iu] = np.arange(iu.size)
    return iu, ju, pid


@dataclass(frozen=True)
class Plan:
    r"""Everything a worker needs to simulate a chunk (immutable, shared by threads).

    Attributes
    ----------
    widths : tuple of int
        ``(n_0, n_1, ..., n_L)``.
    c_w, c_b : tuple of float
        Per weight layer ``1..L``.
    sigma : callable
        Float64 activation, ``ndarray (...) -> ndarray (...)``.
    X : ndarray (N_D, n_0)
        Inputs.
    G1 : ndarray (N_D, N_D)
        First-layer metric ``C_b + C_W X X^T / n_0`` (deterministic).
    last : int
        Deepest layer simulated.
    layers : frozenset of int
        Layers whose statistics are accumulated.
    method : str
        ``"weights"`` or ``"conditional"``.
    keep : bool
        Whether to return the raw samples.
    gamma, xi : tuple of float
        Residual gains per weight layer ``1..L`` (PDLT (B.4)):
        :math:`z^{(\ell)}=\xi^{(\ell)}[b+W\sigma(z^{(\ell-1)})]+\gamma^{(\ell)}z^{(\ell-1)}`;
        all ``0`` and ``1`` for a plain MLP.
    """

    widths: tuple[int, ...]
    c_w: tuple[float, ...]
    c_b: tuple[float, ...]
    sigma: Callable[[np.ndarray], np.ndarray]
    X: np.ndarray
    G1: np.ndarray
    last: int
    layers: frozenset
    method: str
    keep: bool
    gamma: tuple = ()
    xi: tuple = ()

    def skip(self, layer: int) -> float:
        return self.gamma[layer - 1] if self.gamma else 0.0

    def branch(self, layer: int) -> float:
        return self.xi[layer - 1] if self.xi else 1.0


@dataclass
class LayerSums:
    """Sums over ``count`` networks of per-network statistics of one layer (packed pairs).

    Attributes
    ----------
    count : int
        Number of networks summed.
    sG : ndarray (p,)
        :math:`\\sum_m \\hat G_m` (stochastic metric).
    sGG : ndarray (p, p)
        :math:`\\sum_m \\hat G_m \\otimes \\hat G_m`.
    sg : ndarray (p,)
        :math:`\\sum_m O_m` with :math:`O_{m;ab} = n_\\ell^{-1}\\sum_i z_{i;a} z_{i;b}`.
    sgg : ndarray (p, p)
        :math:`\\sum_m O_m \\otimes O_m`.
    sq : ndarray (p, p)
        :math:`\\sum_m n_\\ell^{-1}\\sum_i z_{i;a} z_{i;b} z_{i;c} z_{i;d}` (same neuron).
    s3 : ndarray (p, N)
        :math:`\\sum_m n_\\ell^{-1}\\sum_i z_{i;a} z_{i;b} z_{i;c}` (same neuron).
    s3x : ndarray (p, N)
        :math:`\\sum_m [n_\\ell(n_\\ell-1)]^{-1}\\sum_{i\\ne k} z_{i;a} z_{i;b} z_{k;c}`
        (distinct neurons; zero if :math:`n_\\ell=1`).
    """

    count: int
    sG: np.ndarray
    sGG: np.ndarray
    sg: np.ndarray
    sgg: np.ndarray
    sq: np.ndarray
    s3: np.ndarray
    s3x: np.ndarray

    @classmethod
    def zeros(cls, p: int, N: int) -> "LayerSums":
        return cls(0, np.zeros(p), np.zeros((p, p)), np.zeros(p), np.zeros((p, p)), np.zeros((p, p)),
                   np.zeros((p, N)), np.zeros((p, N)))

    def add(self, other: "LayerSums") -> None:
        """In-place ``self += other``."""
        self.count += other.count
        self.sG += other.sG
        self.sGG += other.sGG
        self.sg += other.sg
        self.sgg += other.sgg
        self.sq += other.sq
        self.s3 += other.s3
        self.s3x += other.s3x


def _check_finite(arr: np.ndarray, layer: int, what: str) -> None:
    if not np.isfinite(arr).all():
        raise DomainError(
            f"non-finite {what} at layer {layer} (overflow); reduce c_w/c_b, the depth or the "
            "input scale, or use a bounded activation")


def _layer_sums(z: np.ndarray, G_hat: np.ndarray, iu: np.ndarray, ju: np.ndarray) -> LayerSums:
    """Per-chunk sums for one layer; ``z (m, N, n)``, ``G_hat (m, N, N)`` or ``(N, N)``."""
    m, _, n = z.shape
    p = iu.size
    zt = np.ascontiguousarray(z.transpose(1, 0, 2))      # (N, m, n)
    zp = np.empty((p, m, n))                             # (p, m, n): z_a z_b per neuron
    start = 0
    for a in range(zt.shape[0]):                         # row-major upper triangle = iu, ju
        np.multiply(zt[a], zt[a:], out=zp[start:start + zt.shape[0] - a])
        start += zt.shape[0] - a
    gp = zp.mean(axis=2).T                               # (m, p): O_m packed
    if G_hat.ndim == 2:
        Gp1 = G_hat[iu, ju]
        sG = m * Gp1
        sGG = m * np.outer(Gp1, Gp1)
    else:
        Gp = G_hat[:, iu, ju]                            # (m, p)
        sG = Gp.sum(axis=0)
        sGG = Gp.T @ Gp
    flat = zp.reshape(p, m * n)
    sq = (flat @ flat.T) / n
    zc = zt.reshape(zt.shape[0], m * n)                  # (N, m n)
    s3 = (flat @ zc.T) / n                               # (p, N): same-neuron third moments
    if n >= 2:                                           # sum_{i != k} = (sum_i)(sum_k) - sum_i
        s3x = (np.einsum("pmi,cmi->pc", zp.sum(axis=2, keepdims=True),
                         zt.sum(axis=2, keepdims=True)) - n * s3) / (n * (n - 1))
    else:
        s3x = np.zeros_like(s3)
    return LayerSums(m, sG, sGG, gp.sum(axis=0), gp.T @ gp, sq, s3, s3x)


def _factor(G_hat: np.ndarray) -> np.ndarray:
    """Square root ``A`` with ``A A^T = G_hat`` for a batch ``(..., N, N)`` of PSD matrices.

    Symmetric eigendecomposition with negative (round-off) eigenvalues clipped to zero, so
    singular and rank-deficient metrics are handled exactly.
    """
    sym = 0.5 * (G_hat + np.swapaxes(G_hat, -1, -2))
    lam, U = np.linalg.eigh(sym)
    return U * np.sqrt(np.clip(lam, 0.0, None))[..., None, :]


def run_chunk(plan: Plan, rng: np.random.Generator, m: int
              ) -> tuple[dict[int, LayerSums], dict[int, tuple[np.ndarray, np.ndarray]] | None]:
    """Simulate ``m`` independent networks and accumulate the per-layer sums.

    Parameters
    ----------
    plan : Plan
    rng : numpy.random.Generator
        Source of every random draw of this chunk.
    m : int
        Number of networks.

    Returns
    -------
    sums : dict int -> LayerSums
        For every layer in ``plan.layers``.
    samples : dict int -> (z (m, N_D, n_l), G_hat (m, N_D, N_D)) or None
        Raw samples if ``plan.keep``.

    Raises
    ------
    DomainError
        If preactivations or activations overflow to non-finite values (names the layer).
    """
    with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
        return _run_chunk(plan, rng, m)


def _run_chunk(plan: Plan, rng: np.random.Generator, m: int):
    widths, X = plan.widths, plan.X
    N = X.shape[0]
    iu, ju, _ = pair_index(N)
    sums: dict[int, LayerSums] = {}
    samples: dict[int, tuple[np.ndarray, np.ndarray]] | None = {} if plan.keep else None

    # one reusable weight buffer per chunk (avoids page faults of fresh large allocations)
    wbuf = (np.empty(m * max(widths[k - 1] * widths[k] for k in range(2, plan.last + 1)))
            if plan.method == "weights" and plan.last >= 2 else None)

    # ---- layer 1 (exactly Gaussian; G_hat^(1) = G^(1) is deterministic)
    n0, n1 = widths[0], widths[1]
    G_hat: np.ndarray = plan.G1
    if plan.method == "weights":
        W = rng.standard_normal((m, n0, n1))
        W *= np.sqrt(plan.c_w[0] / n0)
        z = np.matmul(X, W)                              # (m, N, n1)
        if plan.c_b[0] > 0.0:
            z += np.sqrt(plan.c_b[0]) * rng.standard_normal((m, 1, n1))
    else:
        A = _factor(plan.G1)
        z = np.matmul(A, rng.standard_normal((m, N, n1)))
    _check_finite(z, 1, "preactivations")

    for layer in range(1, plan.last + 1):
        if layer > 1:
            n_prev, n_cur = widths[layer - 1], widths[layer]
            cw, cb = plan.c_w[layer - 1], plan.c_b[layer - 1]
            g, x = plan.skip(layer), plan.branch(layer)
            s = plan.sigma(z)
            _check_finite(s, layer - 1, "activations")
            G_hat = np.matmul(s, np.swapaxes(s, 1, 2))
            G_hat *= cw / n_prev
            G_hat += cb
            if x != 1.0:
                G_hat *= x * x
            _check_finite(G_hat, layer, "stochastic metric")
            if plan.method == "weights":
                W = wbuf[:m * n_prev * n_cur].reshape(m, n_prev, n_cur)
                rng.standard_normal(out=W)               # W / sqrt(C_W / n_prev)
                s = s * (x * np.sqrt(cw / n_prev))      # scale the small factor, not W
                z_new = np.matmul(s, W)                  # (m, N, n_cur)
                if cb > 0.0:
                    z_new += (x * np.sqrt(cb)) * rng.standard_normal((m, 1, n_cur))
            else:
                z_new = np.matmul(_factor(G_hat), rng.standard_normal((m, N, n_cur)))
            if g != 0.0:
                # residual block (PDLT (B.4)): the skip term is the conditional mean of z^(l);
                # the metric the estimators use is the neuron average of the conditional second
                # moment, xi^2 G_hat + gamma^2 z z^T / n (unbiased for G^(l), not (4.76)'s G_hat)
                G_hat = G_hat + (g * g / n_prev) * np.matmul(z, np.swapaxes(z, 1, 2))
                z_new += g * z
            z = z_new
            del s, z_new
            _check_finite(z, layer, "preactivations")
        if layer in plan.layers:
            sums[layer] = _layer_sums(z, G_hat, iu, ju)
            if samples is not None:
                Gk = np.broadcast_to(G_hat, (m, N, N)).copy()
                samples[layer] = (z.copy(), Gk)
    return sums, samples


# ------------------------------------------------------------------ array-backend chunk (JAX)
def draw_shapes(plan: Plan, m: int) -> list[tuple[int, ...]]:
    """Shapes of the standard normal draws of one chunk of ``m`` networks, in the order
    :func:`run_chunk` makes them (so a NumPy generator fills them with the same numbers)."""
    widths, N = plan.widths, plan.X.shape[0]
    shapes = []
    for layer in range(1, plan.last + 1):
        n_prev, n_cur = widths[layer - 1], widths[layer]
        if plan.method == "weights":
            shapes.append((m, n_prev, n_cur))
            if plan.c_b[layer - 1] > 0.0:
                shapes.append((m, 1, n_cur))
        else:
            shapes.append((m, N, n_cur))
    return shapes


def chunk_bytes(plan: Plan, m: int, device_draws: bool = False) -> float:
    """Estimated peak device memory (bytes) of a compiled chunk (:func:`device_chunk`) of ``m``
    networks: every layer's draws (four times over when drawn on the device: the random bits,
    their intermediate transforms and the normals of the one draw are live together, per XLA's
    memory analysis), a layer's preactivations, activations and metric,
    and the packed pair products of the sums.  Tests hold it against XLA's own memory analysis
    of the compiled chunk."""
    widths, N = plan.widths, plan.X.shape[0]
    p = N * (N + 1) // 2
    draws = sum(int(np.prod(s[1:])) for s in draw_shapes(plan, 1))
    n = max(widths[1:plan.last + 1])
    per_layer = 4 * N * n + 3 * N * N + 2 * p * n
    return 8.0 * m * ((4 if device_draws else 1) * draws + per_layer)


def chunk_elements(plan: Plan, m: int) -> int:
    """Elements of the largest single array of a compiled chunk of ``m`` networks (the one draw
    of every layer's normals with ``draws="device"``, or the packed pair products)."""
    widths, N = plan.widths, plan.X.shape[0]
    p = N * (N + 1) // 2
    draws = sum(int(np.prod(s[1:])) for s in draw_shapes(plan, 1))
    return m * max(draws, p * max(widths[1:plan.last + 1]))


_COMPILED: dict = {}


def device_chunk(plan: Plan, be, act, m: int) -> Callable:
    r"""The forward pass and per-layer sums of :func:`run_chunk` as one compiled function of the
    backend ``be`` (``jax.jit``) for chunks of ``m`` networks with a 0/1 mask over them (padding
    networks contribute exactly zero, so every chunk of a run shares one compilation; the
    compilation is kept for later runs of the same architecture, widths and number of inputs).

    Returns ``fn(X, G1, A1, source, mask) -> (sums, finite, samples)``: ``sums[layer]`` the seven
    arrays of :class:`LayerSums` (count excluded), ``finite`` the flags of the checks of
    :func:`run_chunk` in its order (:func:`finite_checks`), ``samples[layer] = (z, G_hat)`` if
    ``plan.keep``.  ``source`` is the list of standard normal arrays of :func:`draw_shapes`
    (``draws="host"``) or a ``jax.random`` key (``draws="device"``: one draw of every layer's
    normals at once, split by slicing).
    """
    sig = (plan.widths, plan.c_w, plan.c_b, plan.gamma, plan.xi, plan.last, plan.layers,
           plan.method, plan.keep, plan.X.shape, be.name, be.draws, act, m)
    fn = _COMPILED.get(sig)
    if fn is None:
        if len(_COMPILED) >= 32:
            _COMPILED.clear()
        from ._backend import activation
        fn = _COMPILED[sig] = be.jit(_chunk_program(plan, be, activation(act, 0, be)))
    return fn


def _chunk_program(plan: Plan, be, sigma) -> Callable:
    xp = be.xp
    widths = plan.widths
    N = plan.X.shape[0]
    iu, ju, _ = pair_index(N)
    device_rng = be.draws == "device"

    def factor(G):
        sym = 0.5 * (G + xp.swapaxes(G, -1, -2))
        lam, U = xp.linalg.eigh(sym)
        return U * xp.sqrt(xp.clip(lam, 0.0, None))[..., None, :]

    def fn(X, G1, A1, source, mask):
        m = mask.shape[0]
        shapes = draw_shapes(plan, m)
        if device_rng:
            import jax
            sizes = [int(np.prod(sh[1:])) for sh in shapes]
            flat = jax.random.normal(source, (m, sum(sizes)), dtype=xp.float64)
            offs = np.concatenate([[0], np.cumsum(sizes)])
            draws = iter(flat[:, offs[i]:offs[i + 1]].reshape(sh) for i, sh in enumerate(shapes))
        else:
            draws = iter(source)
        live = mask > 0.5
        flags = []

        def finite(a):
            return xp.all(xp.isfinite(xp.where(live.reshape((m,) + (1,) * (a.ndim - 1)), a, 0.0)))

        sums, samples = {}, {}
        G_hat = G1
        n0 = widths[0]
        if plan.method == "weights":
            W = next(draws) * np.sqrt(plan.c_w[0] / n0)
            z = xp.matmul(X, W)
            if plan.c_b[0] > 0.0:
                z = z + np.sqrt(plan.c_b[0]) * next(draws)
        else:
            z = xp.matmul(A1, next(draws))
        flags.append(finite(z))
        for layer in range(1, plan.last + 1):
            if layer > 1:
                n_prev = widths[layer - 1]
                cw, cb = plan.c_w[layer - 1], plan.c_b[layer - 1]
                g, x = plan.skip(layer), plan.branch(layer)
                s = sigma(z)
                flags.append(finite(s))
                G_hat = xp.matmul(s, xp.swapaxes(s, 1, 2)) * (cw / n_prev) + cb
                if x != 1.0:
                    G_hat = G_hat * (x * x)
                flags.append(finite(G_hat))
                if plan.method == "weights":
                    z_new = xp.matmul(s * (x * np.sqrt(cw / n_prev)), next(draws))
                    if cb > 0.0:
                        z_new = z_new + (x * np.sqrt(cb)) * next(draws)
                else:
                    z_new = xp.matmul(factor(G_hat), next(draws))
                if g != 0.0:
                    G_hat = G_hat + (g * g / n_prev) * xp.matmul(z, xp.swapaxes(z, 1, 2))
                    z_new = z_new + g * z
                z = z_new
                flags.append(finite(z))
            if layer in plan.layers:
                zm = xp.where(live[:, None, None], z, 0.0)
                sums[layer] = _layer_sums_xp(xp, zm, G_hat, mask, iu, ju)
                if plan.keep:
                    samples[layer] = (zm, xp.broadcast_to(G_hat, (m, N, N)))
        return sums, xp.stack(flags), samples

    return fn


def finite_checks(plan: Plan) -> list[tuple[int, str]]:
    """``(layer, what)`` of every finiteness check of :func:`run_chunk`, in its order."""
    out = [(1, "preactivations")]
    for layer in range(2, plan.last + 1):
        out += [(layer - 1, "activations"), (layer, "stochastic metric"), (layer, "preactivations")]
    return out


def _layer_sums_xp(xp, z, G_hat, mask, iu, ju):
    """:func:`_layer_sums` in the namespace ``xp``, for ``z`` with zeros on masked networks;
    returns ``(sG, sGG, sg, sgg, sq, s3, s3x)``."""
    m, _, n = z.shape
    p = iu.size
    zt = xp.swapaxes(z, 0, 1)                            # (N, m, n)
    zp = zt[iu] * zt[ju]                                 # (p, m, n): z_a z_b per neuron
    gp = zp.mean(axis=2).T                               # (m, p)
    if G_hat.ndim == 2:
        Gp1 = G_hat[iu, ju]
        count = mask.sum()
        sG = count * Gp1
        sGG = count * xp.outer(Gp1, Gp1)
    else:
        Gp = G_hat[:, iu, ju] * mask[:, None]           # (m, p), masked rows zero
        sG = Gp.sum(axis=0)
        sGG = Gp.T @ Gp
    flat = zp.reshape(p, m * n)
    sq = (flat @ flat.T) / n
    zc = zt.reshape(zt.shape[0], m * n)
    s3 = (flat @ zc.T) / n
    if n >= 2:
        s3x = (zp.sum(axis=2) @ zt.sum(axis=2).T - n * s3) / (n * (n - 1))
    else:
        s3x = xp.zeros_like(s3)
    return sG, sGG, gp.sum(axis=0), gp.T @ gp, sq, s3, s3x
