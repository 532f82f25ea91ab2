r"""Gaussian expectations over *every* subset of samples of one kernel matrix, on shared nodes.

A layer step of the initialization recursions needs, for one kernel :math:`K` (:math:`N\times N`):

* the two-point derivative atoms :math:`\langle\sigma^{(p)}_{\alpha}\sigma^{(q)}_{\beta}\rangle_K`
  for all ordered pairs and a few :math:`(p,q)` (:func:`pair_tables`);
* the four-point atom :math:`\langle\sigma_{\alpha_1}\sigma_{\alpha_2}\sigma_{\alpha_3}\sigma_{\alpha_4}\rangle_K`
  for all :math:`\binom{N+3}{4}` multisets (:func:`four_point_table`).

Calling :func:`effth.gaussian_expectation` once per entry costs a full 4-D tensor grid per
multiset.  Here one dimension is integrated out first: of the :math:`k` distinct variables of a
multiset, the one with the largest conditional variance :math:`s^2` given the others is written
:math:`z_k=\mu(x)+s\,y` with :math:`y\perp x`, so

.. math::
    \Big\langle \prod_{i<k}\sigma(z_i)^{p_i}\,\sigma(z_k)^{p_k}\Big\rangle
    = \mathbb E_x\Big[\prod_{i<k}\sigma(z_i(x))^{p_i}\; S_{p_k}(\mu(x); s)\Big],\qquad
    S_p(m;s)=\mathbb E_y\big[\sigma(m+sy)^p\big].

The outer :math:`(k-1)`-dimensional Gaussian is rotated so that :math:`\mu` depends on the first
coordinate only and :math:`z_1` on the first two; then :math:`S_p` is needed at :math:`n_1`
points only and :math:`\sigma(z_1)` at :math:`n_1n_2`.  A 4-D integral costs about two
activation evaluations per node of a 3-D grid instead of one per node of a 4-D grid.

The geometry (which variable is integrated out, the rotation) is computed backward-stably from an
eigen-factor of each sub-kernel (:func:`_split`), so duplicated,
collinear and zero inputs are exact limits (a direction of zero variance gets one node).

All rules are truncated trapezoids in standard-normal coordinates (spectrally convergent for
activations analytic in a strip, like the smooth path of :mod:`effth.numerics.quadrature`); the
error is estimated from the same nodes with every other node dropped (step :math:`2h`), using
:math:`e(h)\approx e(2h)^2/\lvert I\rvert`, and the step is refined until the estimate is below
``rtol``.  For the four-point table each direction's step follows its own scale: the subsets are
sorted into buckets of node counts within 20 % (:func:`_buckets`), each bucket with the rules of
its largest scales (one set of rules for all subsets would cost every subset the worst one's
grid); the buckets are cut into chunks of bounded memory that run on
:func:`effth._threads.thread_map`'s threads (an entry depends on its bucket only, so the tables do
not depend on the thread count), and the first refinement divides the step by the factor the
error model asks for (:func:`_first_refinement`).  Kinked activations are not handled here (their
integrands are not smooth in the rotated coordinates): callers fall back to
:func:`effth.gaussian_expectation`.
"""

from __future__ import annotations

from effth._signature import public

import itertools
import math
import warnings
from functools import lru_cache
from typing import Any

import numpy as np

from .._threads import blas_threads, thread_map
from ..errors import AccuracyWarning, DomainError
from . import _fastmath
from ._rules import INV_SQRT_2PI, gauss_hermite, log_inv_tol, truncation

__all__ = ["pair_tables", "four_point_table", "kinked_pair_tables", "leibniz_pair_tables", "closed_pair_tables", "pair_plans", "multiset_index",
           "multiset_groups", "parity"]

_MAX_REFINE = 4
_DROP = 1e-13          # conditional variances <= this * max diagonal are zero
_CHUNK = 2 ** 19       # four-point integrand elements per chunk (4 MiB: larger chunks thread better)
_PAIR_NODES = 2 ** 19  # pair_tables: integrand elements per chunk of pairs (bounds its memory)
_SPLIT = 1 << 12       # four_point_table: subsets whose geometry is computed at once


# ------------------------------------------------------------------------------------ rules
def _step(scale: float, activation: Any, rtol: float, nfac: int) -> float:
    r"""Trapezoid step in standard-normal units for a direction of the given scale.

    For an activation analytic in a strip of half-width ``strip``, the factors of the integrand
    have poles at distance :math:`a=\mathrm{strip}/\mathrm{scale}` from the real axis; up to ``nfac``
    of them can coincide (nearly collinear samples), giving a pole of that order.  With the
    Gaussian weight the trapezoid error is about :math:`W^{p-1}e^{-aW+a^2/2}` for
    :math:`W=2\pi/h`, as long as the pole lies inside the saddle :math:`a<W`; beyond it the
    Gaussian term :math:`e^{-W^2/2}` dominates.
    """
    return float(_steps(np.float64(scale), activation, rtol, nfac))


def _growth(activation: Any, nfac: int) -> int:
    """Polynomial growth degree of a product of nfac activations (linear-growth families)."""
    if activation.family in ("piecewise_linear", "softplus", "swish", "gelu", "user"):
        return nfac
    if activation.is_polynomial:
        return nfac * activation.polynomial_degree
    return 0


def _order(scales: Any, activation: Any, rtol: float, nfac: int = 2) -> tuple[int, float]:
    """Error model of the step-2h comparison: e(h) ~ f * e(2h)^q / |I|^(q-1); returns (q, f).

    A pole at distance a inside the saddle gives e(h) ~ exp(-aW + a^2/2), so
    e(h) = e(2h)^2 exp(-a^2/2) / C (q = 2, f = exp(-a^2/2) for the nearest pole); a direction set
    by the Gaussian term (or an entire activation) converges like exp(-W^2/2) (q = 4, f = 1).
    """
    if math.isinf(activation.strip):
        return 4, 1.0
    L = log_inv_tol(rtol) + 2.0 * _growth(activation, nfac) + 3.0 + 2.0 * (nfac - 1)
    W_gauss = math.sqrt(2.0 * L) + 1.0
    dist = [activation.strip / float(sc) for sc in scales if float(sc) > 0]
    inside = [a for a in dist if a < W_gauss]
    if not inside:
        return 4, 1.0
    return 2, math.exp(-0.5 * min(inside) ** 2)


def _rules_for(scale: float, act: Any, rtol: float, nfac: int, mult: float,
               X: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(nodes, fine weights, coarse weights) for one direction.

    Polynomial activations get the exact Gauss-Hermite rule (coarse = fine: no error).
    """
    if act.is_polynomial:
        x, w = gauss_hermite(act.polynomial_degree * nfac // 2 + 1)
        return x, w, w
    x, w = _rule(_step(scale, act, rtol, nfac) / mult, X)
    return x, w, _coarse(w)


_MAX_LINE = 1 << 22        # nodes of one 1-D rule
_MAX_ENTRY = 1 << 25       # nodes of the grid of one table entry (pairs: n1 * ny; four-point: n1 n2 n3, n1 ny)


def _too_big(nodes: float, scale: float, what: str) -> DomainError:
    return DomainError(
        f"{what}: the kernel scale {scale * scale:.3g} (standard deviation {scale:.3g}) needs about "
        f"{nodes:.3g} quadrature nodes per entry (limit {_MAX_ENTRY}): a smooth activation with "
        "complex singularities must be resolved on its own scale, which is far below the kernel's "
        "here (the activation is saturated). Rescale the inputs or lower C_W / C_b so that the "
        "kernel stays moderate (the tables are accurate for kernels up to about 1e3-1e4)")


def _check_grid(sizes: list, scale: float, what: str) -> None:
    """Refuse a grid of more than _MAX_ENTRY nodes per entry before allocating it."""
    n = float(np.prod([float(v) for v in sizes]))
    if n > _MAX_ENTRY:
        raise _too_big(n, scale, what)


@lru_cache(maxsize=256)
def _rule(h: float, X: float) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights (fine); 1 node if h is infinite (direction absent)."""
    if math.isinf(h):
        return np.zeros(1), np.ones(1)
    if not (X / h <= _MAX_LINE):
        raise DomainError(f"a 1-D quadrature rule of step {h:.3g} on |x| <= {X:.3g} needs "
                          f"{2 * X / h:.3g} nodes (limit {2 * _MAX_LINE}): the kernel scale is too "
                          "large for this smooth activation; rescale the inputs or lower C_W / C_b")
    m = max(int(math.floor(X / h)), 1)
    x = h * np.arange(-m, m + 1, dtype=np.float64)
    w = h * INV_SQRT_2PI * np.exp(-0.5 * x * x)
    return x, w


@public
@lru_cache(maxsize=64)
def parity(activation: Any) -> int:
    """+1 if sigma is even, -1 if odd, 0 otherwise (exact, from the SymPy expression)."""
    import sympy as sp

    from ..activations.registry import Z

    e = activation.expr
    if sp.simplify(e.subs(Z, -Z) - e) == 0:
        return 1
    if sp.simplify(e.subs(Z, -Z) + e) == 0:
        return -1
    return 0


def _fold(x: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Half rule (x >= 0) for integrands even in x: nodes, fine and coarse weights."""
    wc = _coarse(w)
    m = x.size // 2
    xf, wf, wcf = x[m:].copy(), 2.0 * w[m:], 2.0 * wc[m:]
    wf[0], wcf[0] = w[m], wc[m]
    return xf, wf, wcf


def _coarse(w: np.ndarray) -> np.ndarray:
    """Weights of the step-2h rule on the same nodes (zeros on the dropped ones)."""
    if w.size == 1:
        return w.copy()
    c = np.zeros_like(w)
    c[::2] = 2.0 * w[::2]
    return c


# ---------------------------------------------------------------------- geometry of a subset
def _split(K: np.ndarray) -> tuple:
    r"""For a batch of k x k kernels, choose the variable to integrate out: ``order`` (B, k) with
    the variable of largest conditional variance last, the outer factor ``A`` (B, k-1, k-1) with
    ``z_outer = A x`` rotated so that ``mu = c x_1`` (``z_outer[0]`` in span(x_1, x_2)), ``c``
    (B,) and ``s`` (B,), the conditional standard deviation of the last variable; computed
    backward-stably for nearly singular kernels.

    From the eigen-factor :math:`K=FF^\top` (rows: variables), a Householder QR of the outer rows'
    transpose :math:`F_o^\top=QR` gives :math:`F_oQ=R^\top` (last column zero), so
    :math:`z_{last}=(F_lQ)_{<k}\,x+(F_lQ)_k\,y`.  These are the exact conditional quantities of a
    kernel within rounding of :math:`K` (the Schur complement :math:`K_{ll}-k^\top K_o^{+}k`
    loses all digits when :math:`K_o` is nearly singular, e.g. nearly collinear inputs)."""
    B, k = K.shape[0], K.shape[-1]
    w, V = np.linalg.eigh(K)
    w = np.where(w > _DROP * np.maximum(w[:, -1:], 1e-300), w, 0.0)
    F = V * np.sqrt(w)[:, None, :]                               # K = F F^T
    dmax = np.max(np.diagonal(K, axis1=1, axis2=2), axis=1)
    best = None
    for v in range(k):
        rest = [u for u in range(k) if u != v]
        Q, R = np.linalg.qr(np.swapaxes(F[:, rest, :], 1, 2), mode="complete")   # (B,k,k), (B,k,k-1)
        g = np.einsum("bj,bjk->bk", F[:, v, :], Q)
        sv = np.abs(g[:, -1])
        sv = np.where(sv * sv > _DROP * dmax, sv, 0.0)
        cand = (sv, np.swapaxes(R[:, :k - 1, :], 1, 2), g[:, :k - 1])
        if best is None:
            best, last = list(cand), np.zeros(B, dtype=np.intp)
        else:
            take = sv > best[0] * (1.0 + 1e-12)
            for old, new in zip(best, cand):
                old[take] = new[take]
            last[take] = v
    s, A0, cvec = best
    by_last = np.array([[u for u in range(k) if u != l] + [l] for l in range(k)], dtype=np.intp)
    order = by_last[last].reshape(B, k)
    A, cnorm = _rotate(A0, cvec)
    return order, A, cnorm, s


def _rotate(A: np.ndarray, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rotate x so that c -> c_1 e_1 and row 0 of A lies in span(e_1, e_2); returns (A Q, c_1).

    Q is the orthogonal factor of the QR decomposition of [c, A_0, A_1, ...] (Householder: Q is
    orthogonal even when the columns are dependent, e.g. c = 0).
    """
    B, r = c.shape
    if r == 1:
        return A, c[:, 0]
    M = np.concatenate([c[:, :, None], np.swapaxes(A, 1, 2)], axis=2)[:, :, :r]
    Q, _ = np.linalg.qr(M)
    return np.einsum("bij,bjk->bik", A, Q), np.einsum("bj,bj->b", Q[:, :, 0], c)


# ------------------------------------------------------------------------------- integrands
def _steps(scales: np.ndarray, activation: Any, rtol: float, nfac: int) -> np.ndarray:
    """:func:`_step` elementwise over an array of scales (the one implementation of the formula;
    used to sort subsets into buckets of similar grids, whose rules then come from
    :func:`_rules_for`)."""
    sc = np.asarray(scales, dtype=np.float64)
    L = log_inv_tol(rtol) + 2.0 * _growth(activation, nfac) + 3.0
    strip = activation.strip
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if math.isinf(strip):
            g = 1.0 if activation.family == "gelu" else 2.0
            h = 2.0 * math.pi / (np.sqrt(2.0 * L * (1.0 + g * nfac * sc * sc)) + 1.0)
        else:
            L += 2.0 * (nfac - 1)
            W_gauss = math.sqrt(2.0 * L) + 1.0
            a = strip / sc
            W = np.where(a >= W_gauss, W_gauss, np.maximum(W_gauss, L / a + a / 2.0 + 1.0))
            h = 2.0 * math.pi / W
    return np.where(sc > 0.0, h, np.inf)


_LEVEL = math.log(1.2)   # bucket width: node counts of one bucket's members within about 20 %


def _buckets(scales: np.ndarray, act: Any, rtol: float, nfac: int, mult: float,
             X: float) -> list:
    """Index arrays of subsets with similar rules: each direction's node count (from its own
    scale, :func:`_steps`) rounded up to a geometric ladder of ratio 1.2, so that the rules of a
    bucket -- set by its largest scales -- cost its members at most about 20 % more nodes per
    direction than their own (one set of rules for all subsets costs the worst one's)."""
    B = scales.shape[0]
    if act.is_polynomial:
        return [np.arange(B)]
    h = _steps(scales, act, rtol, nfac) / mult
    with np.errstate(divide="ignore", invalid="ignore"):
        m = np.where(np.isinf(h), 0.0, np.floor(X / h))
    lev = np.ceil(np.log(np.maximum(m, 1.0)) / _LEVEL).astype(np.int64) + 1
    lev[m == 0] = 0
    # one integer key per subset (levels are below 2^10: a line has at most 2^23 nodes)
    key = lev @ (np.int64(1) << (10 * np.arange(lev.shape[1], dtype=np.int64)))
    order = np.argsort(key, kind="stable")
    cuts = np.flatnonzero(np.diff(key[order])) + 1
    return np.split(order, cuts)


def _elements(rules: list, y: np.ndarray) -> int:
    """Integrand elements per subset on the given rules (the 3-D grid's two factors, or the
    smoothed line's n1 x ny nodes)."""
    return 2 * max(math.prod(len(rule[0]) for rule in rules), len(rules[0][0]) * len(y))


def _four_point_group(K: np.ndarray, P: np.ndarray, act: Any, rtol: float,
                      mult: float) -> tuple:
    """E[prod_i sigma(z_i)^{P_i}] for a batch of k x k kernels (k = 1..4); (value, error, E|f|).

    The subsets are sorted into buckets of similar node counts (:func:`_buckets`), each with its
    own rules from its largest scales, and the buckets cut into chunks of about :data:`_CHUNK`
    integrand elements; the chunks run on :func:`effth._threads.thread_map`'s threads (an entry's
    value depends on its bucket's rules only, not on the chunking or the thread count).
    """
    B, k = P.shape
    nfac = int(P.sum(axis=1).max())
    X = truncation(rtol, _growth(act, nfac))
    even = parity(act) != 0 and np.all(P.sum(axis=1) % 2 == 0) or parity(act) == 1
    if k == 1:
        sd = np.sqrt(np.clip(K[:, 0, 0], 0.0, None))
        x, w, wc = _rules_for(float(sd.max()), act, rtol, nfac, mult, X)
        if even and not act.is_polynomial:
            x, w, wc = _fold(x, w)
        f = _ipow(act.numpy(0)(sd[:, None] * x), P[:, 0])
        return _finish(f @ w, f @ wc, np.abs(f) @ w, _order([sd.max()], act, rtol, nfac))
    # the geometry in blocks of subsets (LAPACK per 4 x 4 kernel: the blocking does not change it)
    parts = thread_map(lambda i: _split(K[i:i + _SPLIT]), range(0, B, _SPLIT))
    order, A, c, s = (np.concatenate(v) for v in zip(*parts))
    Po = np.take_along_axis(P, order, axis=1)
    r = k - 1
    # per-subset scale of each direction: x_1 carries row 0 of A and mu = c x_1
    sc = np.empty((B, r + 1))
    sc[:, 0] = np.maximum(np.max(np.abs(A[:, :, 0]), axis=1), np.abs(c))
    for j in range(1, r):
        sc[:, j] = np.max(np.abs(A[:, :, j]), axis=1)
    sc[:, r] = s
    tasks = []
    for members in _buckets(sc, act, rtol, nfac, mult, X):
        top = [float(v) for v in sc[members].max(axis=0)]
        rules = [_rules_for(v, act, rtol, nfac, mult, X) for v in top[:r]]
        if even and not act.is_polynomial:     # f(-x) = f(x): half of the x_1 line
            rules[0] = _fold(*rules[0][:2])
        y, wy, wyc = _rules_for(top[r], act, rtol, nfac, mult, X)
        _check_grid([len(rule[0]) for rule in rules], max(top), "four-point table")
        _check_grid([len(rules[0][0]), len(y)], max(top), "four-point table")
        chunk = max(1, _CHUNK // _elements(rules, y))
        q = _order(top, act, rtol, nfac)
        for i in range(0, len(members), chunk):
            tasks.append((members[i:i + chunk], rules, (y, wy, wyc), q))

    def run(task: tuple) -> tuple:
        idx, rules, (y, wy, wyc), q = task
        return _finish(*_outer_sum(A[idx], c[idx], s[idx], Po[idx], act, rules, y, wy, wyc), q)

    val, err, ab = np.empty(B), np.empty(B), np.empty(B)
    # largest chunks first (the threads finish together); small groups serially (starting threads
    # costs more than it saves); the same chunks either way
    size = [len(t[0]) * _elements(t[1], t[2][0]) for t in tasks]
    tasks = [tasks[i] for i in np.argsort(size, kind="stable")[::-1]]
    for (idx, *_), (v, e, a) in zip(tasks, thread_map(run, tasks, 1 if sum(size) < 4 * _CHUNK else None)):
        val[idx], err[idx], ab[idx] = v, e, a
    return val, err, ab


def _ipow(f: np.ndarray, p: np.ndarray) -> np.ndarray:
    """f ** p for small integer powers p >= 1 per leading index (f (B, ...), p (B,)), by repeated
    multiplication (a power with an integer-array exponent costs about 60 ns per element)."""
    p = np.asarray(p)
    if np.all(p == 1):
        return f
    out = np.empty_like(f)
    for q in np.unique(p):
        m = p == q
        g = f if m.all() else f[m]
        v = g.copy()
        for _ in range(int(q) - 1):
            v *= g
        if m.all():
            return v
        out[m] = v
    return out


def _sigma_(act: Any, z: np.ndarray) -> np.ndarray:
    """sigma(z), in place where the family has a NumPy ufunc (tanh: no temporary)."""
    if getattr(act, "family", None) == "tanh":
        return np.tanh(z, out=z)
    return act.numpy(0)(z)


def _fused_four(A: np.ndarray, Po: np.ndarray, act: Any, rules: list) -> tuple | None:
    """The inner sums of :func:`_outer_sum` for four distinct samples of tanh by the compiled
    kernel (:func:`effth.numerics._tanh_kernels._four_cube`: the same nodes and weights, tanh
    from per-coordinate exponentials, the x_3 line one vectorized loop), or None where it does
    not apply (another activation, a power above 1, numba missing or ``EFFTH_FUSED=0``, an
    exponent out of range)."""
    from . import _tanh_fused as tf
    if (getattr(act, "family", None) != "tanh" or len(rules) != 3 or not np.all(Po == 1)
            or not tf.available()):
        return None
    x = [np.ascontiguousarray(rule[0], dtype=np.float64) for rule in rules]
    A = np.ascontiguousarray(A, dtype=np.float64)
    if not tf.in_range(A, x):
        return None
    from . import _tanh_kernels as kern
    (_, _, _), (_, w2, c2), (_, w3, c3) = rules
    B, n1 = A.shape[0], len(x[0])
    inner, inner_c, inner_a = (np.empty((B, n1)) for _ in range(3))
    kern._four_cube(A, x[0], x[1], np.ascontiguousarray(w2), np.ascontiguousarray(c2), x[2],
                    np.ascontiguousarray(w3), np.ascontiguousarray(c3), inner, inner_c, inner_a)
    return inner, inner_c, inner_a


def _outer_sum(A: np.ndarray, c: np.ndarray, s: np.ndarray, Po: np.ndarray, act: Any, rules: list,
               y: np.ndarray, wy: np.ndarray, wyc: np.ndarray) -> tuple:
    """(fine, coarse, E|f|) of E_x[prod_i sigma(z_i)^p_i S(c x_1)] on the given rules."""
    r = len(rules)
    B = len(A)
    x1, w1, c1 = rules[0]
    n1 = len(x1)
    # S(c x_1; s) with the fine and the step-2h y-rule from one evaluation of sigma
    arg = c[:, None, None] * x1[:, None] + s[:, None, None] * y                # (B, n1, ny)
    fy = _ipow(_sigma_(act, arg), Po[:, -1])
    SS = fy.reshape(-1, len(y)) @ np.stack([wy, wyc], axis=1)
    S, Sc = SS[:, 0].reshape(B, n1), SS[:, 1].reshape(B, n1)
    del arg, fy
    if r == 1:
        f1 = _ipow(_sigma_(act, A[:, 0, 0][:, None] * x1), Po[:, 0])
        inner, inner_c, inner_a = f1, f1, np.abs(f1)
    elif r == 2:
        x2, w2, c2 = rules[1]
        z0 = A[:, 0, 0][:, None, None] * x1[:, None] + A[:, 0, 1][:, None, None] * x2
        z1 = A[:, 1, 0][:, None, None] * x1[:, None] + A[:, 1, 1][:, None, None] * x2
        f = _ipow(_sigma_(act, z0), Po[:, 0])
        f *= _ipow(_sigma_(act, z1), Po[:, 1])
        inner, inner_c, inner_a = f @ w2, f @ c2, np.abs(f) @ w2
    elif (fused := _fused_four(A, Po, act, rules)) is not None:
        inner, inner_c, inner_a = fused
    else:
        (x2, w2, c2), (x3, w3, c3) = rules[1], rules[2]
        n2, n3 = len(x2), len(x3)
        z0 = A[:, 0, 0][:, None, None] * x1[:, None] + A[:, 0, 1][:, None, None] * x2   # (B,n1,n2)
        g = _ipow(_sigma_(act, z0), Po[:, 0])
        # z_2, z_3 on the 3-D grid, one contiguous (B, n1, n2, n3) array each
        v = np.empty((2, B, n1, n2, n3))
        for j in (0, 1):
            base = A[:, 1 + j, 0, None, None] * x1[:, None] + A[:, 1 + j, 1, None, None] * x2
            vj = v[j]
            np.add(base[..., None], (A[:, 1 + j, 2, None] * x3)[:, None, None, :], out=vj)
            val = _sigma_(act, vj)                       # in place for tanh
            if val is not vj:
                vj[...] = val
            if np.any(Po[:, 1 + j] != 1):
                vj[...] = _ipow(vj, Po[:, 1 + j])
        prod = v[0]
        prod *= v[1]
        # fine and coarse x_3 sums in one product
        tt = prod.reshape(-1, n3) @ np.stack([w3, c3], axis=1)
        t, tc = tt[:, 0].reshape(B, n1, n2), tt[:, 1].reshape(B, n1, n2)
        del v, prod
        # E|f| is bounded below by |E_x3 f| (a smaller scale only makes the estimate stricter)
        gt = g * t
        inner, inner_c, inner_a = gt @ w2, (g * tc) @ c2, np.abs(gt) @ w2
    return (inner * S) @ w1, (inner_c * Sc) @ c1, (inner_a * np.abs(S)) @ w1


def _finish(fine: np.ndarray, coarse: np.ndarray, absval: np.ndarray, model: tuple = (2, 1.0)) -> tuple:
    """(value, error estimate, E|integrand|) from the fine and step-2h sums (see :func:`_order`)."""
    q, f = model
    scale = np.maximum(absval, 1e-300)
    d = np.abs(fine - coarse)
    err = np.minimum(d, f * scale * (d / scale) ** q) + 1e-15 * absval
    return fine, err, absval


# ---------------------------------------------------------------------------- public tables
@public
@lru_cache(maxsize=32)
def multiset_index(N: int) -> tuple[np.ndarray, list]:
    """(index tensor (N,)*4 -> multiset id, list of sorted multisets) for N samples."""
    sets = list(itertools.combinations_with_replacement(range(N), 4))
    # rank of a sorted multiset a <= b <= c <= d in that (lexicographic) order, by counting:
    # pos[a, b, c, d] for the sorted tuples, gathered for all N^4 tuples in blocks of the first index
    pos = np.zeros((N,) * 4, dtype=np.intp)
    S = np.array(sets, dtype=np.intp).reshape(-1, 4)
    pos[S[:, 0], S[:, 1], S[:, 2], S[:, 3]] = np.arange(len(sets))
    idx = np.empty((N,) * 4, dtype=np.intp)
    rest = np.indices((N,) * 3).reshape(3, -1)
    for a in range(N):
        T = np.sort(np.vstack([np.full(rest.shape[1], a), rest]), axis=0)
        idx[a] = pos[T[0], T[1], T[2], T[3]].reshape((N,) * 3)
    idx.setflags(write=False)
    return idx, sets


@public
@lru_cache(maxsize=32)
def multiset_groups(N: int) -> dict:
    """Multisets of 4 sample indices grouped by multiplicity pattern.

    ``{pattern: (ids, samples)}``: ``pattern`` the multiplicities of the distinct samples (in
    increasing sample order), ``ids`` positions in :func:`multiset_index`'s list, ``samples``
    (B, k) the distinct samples of each multiset.
    """
    _, sets = multiset_index(N)
    groups: dict = {}
    for i, m in enumerate(sets):
        distinct = sorted(set(m))
        groups.setdefault(tuple(m.count(d) for d in distinct), []).append((i, distinct))
    return {p: (np.array([i for i, _ in g]), np.array([d for _, d in g])) for p, g in groups.items()}


def real_kernel(K: Any) -> np.ndarray:
    """K as a real, finite float (N, N) array, or DomainError (complex input is not truncated)."""
    raw = np.asarray(K)
    if np.iscomplexobj(raw):
        raise DomainError("K must be real; got a complex array (a covariance of real preactivations "
                          "is real symmetric): pass K.real if the imaginary part is rounding noise")
    try:
        K = np.asarray(raw, dtype=float)
    except (TypeError, ValueError) as exc:
        raise DomainError(f"K must be a real (N, N) matrix of numbers: {exc}") from None
    if K.ndim != 2 or K.shape[0] != K.shape[1]:
        raise DomainError(f"K must be a square (N, N) matrix, got shape {K.shape}")
    if not np.all(np.isfinite(K)):
        raise DomainError("K has non-finite entries (the kernel overflowed or is undefined)")
    return K


def _check(K: Any, activation: Any) -> np.ndarray:
    K = real_kernel(K)
    if not activation.is_smooth:
        raise DomainError(f"shared-node tables need a smooth activation; {activation.name!r} has kinks")
    return K


def _refined(fn, n: int, rtol: float, what: str, scale: float = 0.0,
             adaptive: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Run ``fn(mult, members)`` on all n entries, then again with finer steps on those whose
    error estimate is above rtol (relative to max(|value|, 1e-3 E|f|, 1e-3 scale), where
    ``scale`` bounds the table's entries: an entry that vanishes by symmetry is not an accuracy
    failure because its absolute error is 1e-18).

    Each refinement divides the steps by 1.5.  With ``adaptive``, the first one divides them by
    the factor the error model asks for instead (:func:`_first_refinement`: 1.1, 1.2, 1.35 or
    1.5, the failing entries refined in one batch per factor), and one more refinement is allowed
    (so the finest steps are never coarser than without)."""
    val, err = np.empty(n), np.empty(n)
    work = [(np.arange(n), 1.0, 0)]
    failed = False
    while work:
        todo, mult, attempt = work.pop(0)
        v, e, a = fn(mult, todo)
        val[todo], err[todo] = v, e
        scale = max(scale, float(np.max(np.abs(v), initial=0.0)))
        # an entry that vanishes (by symmetry, e.g. an odd moment) is judged against the
        # table's scale: an absolute error of 1e-18 on an exact 0 is not an accuracy failure
        floor = np.maximum(1e-3 * a, 1e-3 * scale)
        target = rtol * np.maximum(np.abs(v), floor) + 1e-300
        bad = e > target
        if not bad.any():
            continue
        if attempt == _MAX_REFINE + bool(adaptive):
            failed = True
            continue
        if adaptive and attempt == 0:
            m = _first_refinement(e[bad], target[bad], a[bad])
            for f in np.unique(m):
                work.append((todo[bad][m == f], mult * float(f), attempt + 1))
        else:
            work.append((todo[bad], mult * 1.5, attempt + 1))
    if failed:
        warnings.warn(f"{what}: estimated error {float(np.max(err)):.2e} above rtol={rtol:g} after "
                      f"{_MAX_REFINE} refinements", AccuracyWarning, stacklevel=3)
    return val, err


_LADDER = np.array([1.1, 1.2, 1.35, 1.5])


def _first_refinement(err: np.ndarray, target: np.ndarray, absval: np.ndarray) -> np.ndarray:
    r"""Per entry, a step divisor that brings the estimated error to half its target.

    The error of a trapezoid rule with step :math:`h/m` falls like :math:`e^{-m\beta/h}` (a pole
    in the strip; a Gaussian-limited direction falls faster, like :math:`e^{-m^2\beta'/h^2}`), so
    relative to :math:`I=\langle|f|\rangle` the divisor :math:`m=\ln(t/2I)/\ln(e/I)` suffices;
    with 2 % margin, rounded up to 1.1, 1.2, 1.35 or 1.5 (1.5, the fixed factor, when an error
    is not below :math:`I` or more is needed)."""
    I = np.maximum(absval, 1e-300)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        lt, le = np.log(0.5 * target / I), np.log(err / I)
        m = 1.02 * lt / le
    m = np.where(np.isfinite(m) & (le < 0.0) & (lt < 0.0), m, np.inf)
    return _LADDER[np.minimum(np.searchsorted(_LADDER, m), len(_LADDER) - 1)]


@public
def four_point_table(K: Any, activation: Any, *, rtol: float = 1e-9) -> tuple[np.ndarray, np.ndarray]:
    r""":math:`\langle\sigma_{\alpha_1}\sigma_{\alpha_2}\sigma_{\alpha_3}\sigma_{\alpha_4}\rangle_K` for all index 4-tuples.

    Parameters
    ----------
    K : ndarray (N, N)
        Symmetric PSD kernel (validated by the caller).
    activation : Activation
        Smooth activation.
    rtol : float
        Target relative accuracy of each entry (floor :math:`10^{-3}\langle|\cdot|\rangle`).

    Returns
    -------
    (ndarray (N, N, N, N), ndarray (N, N, N, N))
        Values and estimated absolute errors (symmetric under all permutations).
    """
    K = _check(K, activation)
    N = K.shape[0]
    idx, sets = multiset_index(N)
    vals = np.empty(len(sets))
    errs = np.empty(len(sets))
    # the one-sample group <sigma_a^4> first: by Hoelder every entry is at most max_a <sigma_a^4>,
    # the scale against which entries that vanish by symmetry are judged
    groups = sorted(multiset_groups(N).items(), key=lambda kv: len(kv[0]))
    scale = 0.0
    with blas_threads():            # the chunks run on effth's threads: one BLAS thread each
        for pattern, (ids, var) in groups:
            P = np.tile(pattern, (len(ids), 1))
            Kb = K[var[:, :, None], var[:, None, :]]

            def run(mult: float, sel: np.ndarray, Kb=Kb, P=P) -> tuple:
                return _four_point_group(Kb[sel], P[sel], activation, rtol, mult)

            v, e = _refined(run, len(ids), rtol, f"four-point table (multiplicities {pattern})",
                            scale, adaptive=True)
            vals[ids], errs[ids] = v, e
            scale = max(scale, float(np.max(np.abs(v), initial=0.0)))
    return vals[idx], errs[idx]


@public
def pair_tables(K: Any, activation: Any, orders: Any, *, rtol: float = 1e-10,
                mehler: bool = True) -> tuple[dict, dict]:
    r""":math:`T_{pq}[\alpha,\beta]=\langle\sigma^{(p)}_{\alpha}\sigma^{(q)}_{\beta}\rangle_K` for all ordered pairs.

    By default the off-diagonal entries come from Mehler's expansion (:func:`_mehler_pair_tables`:
    one 1-D Hermite projection per input, then a power series in the correlation, with a rigorous
    truncation bound); the pairs whose bound is not below ``rtol`` -- and every pair when
    ``mehler=False`` -- are integrated by shared-node quadrature on a 2-D grid.

    Parameters
    ----------
    K : ndarray (N, N)
    activation : Activation
        Smooth activation.
    orders : iterable of (p, q)
        Derivative orders wanted; :math:`T_{qp}=T_{pq}^\top` is returned too.
    rtol : float
    mehler : bool
        Use the Mehler expansion where its bound allows (default); ``False`` forces quadrature.

    Returns
    -------
    (dict, dict)
        ``{(p, q): (N, N) values}`` and the estimated absolute errors.
    """
    K = _check(K, activation)
    orders = sorted({tuple(o) for o in orders} | {tuple(o)[::-1] for o in orders})
    if mehler and K.shape[0] > 2:
        return _mehler_pair_tables(K, activation, orders, rtol)
    return _quadrature_pair_tables(K, activation, orders, rtol)


def _quadrature_pair_tables(K: np.ndarray, activation: Any, orders: list, rtol: float,
                            only: np.ndarray | None = None) -> tuple[dict, dict]:
    """:func:`pair_tables` by shared-node quadrature (the reference path).

    ``only``, a boolean mask over the upper-triangle pairs ``np.triu_indices(N, 1)``, restricts
    the 2-D integrals to those pairs (the others are left 0); the rules are still those of the
    whole kernel, so an entry's value does not depend on which other entries are computed."""
    N = K.shape[0]
    R = max(max(o) for o in orders)
    X = truncation(rtol, _growth(activation, 2))
    iu = np.triu_indices(N, 1)
    diag = np.clip(np.diag(K), 0.0, None)

    def run(mult: float, sel: np.ndarray) -> tuple:
        return tuple(x.ravel()[sel] for x in run_all(mult))

    def run_all(mult: float) -> tuple:
        out, crs, ab = {}, {}, {}
        # diagonal: 1-D
        sd = np.sqrt(diag)
        x, w, wc = _rules_for(float(sd.max()), activation, rtol, 2, mult, X)
        D = [activation.numpy(r)(sd[:, None] * x) for r in range(R + 1)]
        for (p, q) in orders:
            f = D[p] * D[q]
            out[p, q] = np.zeros((N, N))
            crs[p, q] = np.zeros((N, N))
            ab[p, q] = np.zeros((N, N))
            out[p, q][np.diag_indices(N)] = f @ w
            crs[p, q][np.diag_indices(N)] = f @ wc
            ab[p, q][np.diag_indices(N)] = np.abs(f) @ w
        if N > 1:
            a, b = iu
            Kb = np.stack([np.stack([K[a, a], K[a, b]], -1), np.stack([K[a, b], K[b, b]], -1)], -2)
            order, A, c, s = _split(Kb)
            sc1 = float(np.max(np.maximum(np.abs(A[:, 0, 0]), np.abs(c))))
            x1, w1, w1c = _rules_for(sc1, activation, rtol, 2, mult, X)
            s_max = float(s.max())
            y, wy, wyc = _rules_for(s_max, activation, rtol, 2, mult, X)
            _check_grid([len(x1), len(y)], max(sc1, s_max), "pair tables")
            first = np.where(order[:, 0] == 0, a, b)
            second = np.where(first == a, b, a)
            if only is not None:
                A, c, s, first, second = A[only], c[only], s[only], first[only], second[only]
            # the same rules for every pair; the pairs in chunks (memory O(_PAIR_NODES), not
            # O(N^2 x nodes): 14 GB at N = 300 unchunked)
            B = len(first)
            step = max(1, _PAIR_NODES // (len(x1) * len(y)))
            res = {(o, t): np.empty(B) for o in orders for t in range(3)}
            for i0 in range(0, B, step):
                sl = slice(i0, min(B, i0 + step))
                z = A[sl, 0, 0][:, None] * x1
                m = c[sl, None] * x1
                Z = [activation.numpy(r)(z) for r in range(R + 1)]
                arg = m[..., None] + s[sl, None, None] * y
                Sm = [activation.numpy(r)(arg) for r in range(R + 1)]
                S, Sc = [v @ wy for v in Sm], [v @ wyc for v in Sm]
                del arg, Sm
                for (p, q) in orders:
                    f = Z[p] * S[q]
                    fc = Z[p] * Sc[q]
                    res[(p, q), 0][sl] = f @ w1
                    res[(p, q), 1][sl] = fc @ w1c
                    res[(p, q), 2][sl] = np.abs(f) @ w1
            for (p, q) in orders:
                out[p, q][first, second] = res[(p, q), 0]
                crs[p, q][first, second] = res[(p, q), 1]
                ab[p, q][first, second] = res[(p, q), 2]
            for (p, q) in orders:      # the transposed entries: (second, first) of (p, q) = (q, p)
                out[p, q][second, first] = out[q, p][first, second]
                crs[p, q][second, first] = crs[q, p][first, second]
                ab[p, q][second, first] = ab[q, p][first, second]
        keys = list(out)
        fine = np.stack([out[o] for o in keys])
        q = _order([sd.max(), sc1, s_max] if N > 1 else [sd.max()], activation, rtol)
        return _finish(fine, np.stack([crs[o] for o in keys]), np.stack([ab[o] for o in keys]), q)

    shape = (len(orders), N, N)
    fine, errs = _refined(run, int(np.prod(shape)), rtol, "pair tables")
    fine, errs = fine.reshape(shape), errs.reshape(shape)
    return ({o: fine[i] for i, o in enumerate(orders)}, {o: errs[i] for i, o in enumerate(orders)})


# ------------------------------------------------------------------ Mehler expansion
_MEHLER_DEGREES = (48, 112, 240)   # truncation degrees M tried in turn


@lru_cache(maxsize=8)
def _hermite_functions(M: int, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""Gauss-Hermite nodes :math:`x_i`, :math:`\sqrt{w_i}` and :math:`\psi_k(x_i)=\sqrt{w_i}\,h_k(x_i)`
    for :math:`k\le M`, with :math:`h_k=He_k/\sqrt{k!}` orthonormal under :math:`\mathcal N(0,1)`.

    The three-term recurrence is run on the weighted functions, which stay bounded (the
    unweighted :math:`h_k` overflow at the outer nodes)."""
    x, w = gauss_hermite(n)
    sw = np.sqrt(w)
    psi = np.empty((M + 1, n))
    psi[0] = sw
    if M:
        psi[1] = x * sw
    for k in range(1, M):
        psi[k + 1] = (x * psi[k] - math.sqrt(k) * psi[k - 1]) / math.sqrt(k + 1)
    return x, sw, psi


def _hermite_projection(act: Any, r: int, sd: np.ndarray, M: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    r"""Hermite coefficients :math:`c_k=\mathbb E[\sigma^{(r)}(s x)h_k(x)]` (:math:`k\le M`) and the
    second moments :math:`\mathbb E[\sigma^{(r)}(sx)^2]`, for every standard deviation in ``sd``,
    by an ``n``-node Gauss-Hermite rule."""
    x, sw, psi = _hermite_functions(M, n)
    f = act.numpy(r)(sd[:, None] * x) * sw
    return f @ psi.T, np.einsum("ij,ij->i", f, f)


def _mehler_pair_tables(K: np.ndarray, act: Any, orders: list, rtol: float) -> tuple[dict, dict]:
    r"""Pair tables from Mehler's formula, quadrature only where its bound is not met.

    With :math:`u_\alpha=s_\alpha x_\alpha`, :math:`s_\alpha^2=K_{\alpha\alpha}` and
    :math:`\rho_{\alpha\beta}=K_{\alpha\beta}/(s_\alpha s_\beta)`,

    .. math::
        \langle\sigma^{(p)}_\alpha\sigma^{(q)}_\beta\rangle_K=\sum_{k\ge0}c^{(p)}_{\alpha,k}
        c^{(q)}_{\beta,k}\,\rho_{\alpha\beta}^k,\qquad c^{(r)}_{\alpha,k}=\mathbb E\bigl[\sigma^{(r)}
        (s_\alpha x)\,h_k(x)\bigr],

    since :math:`\mathbb E[h_j(x_\alpha)h_k(x_\beta)]=\delta_{jk}\rho^k` (Mehler). The series is
    summed to degree :math:`M` by Horner's rule (:math:`O(MN^2)` flops, no 2-D grid); by
    Cauchy-Schwarz and Parseval its remainder is at most
    :math:`|\rho|^{M+1}\sqrt{t^{(p)}_\alpha t^{(q)}_\beta}` with
    :math:`t^{(r)}_\alpha=\mathbb E[\sigma^{(r)}(u_\alpha)^2]-\sum_{k\le M}(c^{(r)}_{\alpha,k})^2`.
    The coefficients are computed with two Gauss-Hermite rules (:math:`2M+64` and :math:`3M+96`
    nodes); their difference bounds the projection error, which is added to the estimate. The
    diagonal is the 1-D expectation itself. :math:`M` is raised through ``_MEHLER_DEGREES``; pairs
    whose estimate stays above ``rtol`` (relative, floor :math:`10^{-3}\sqrt{\mathbb E[(\sigma^{(p)}_\alpha)^2]
    \mathbb E[(\sigma^{(q)}_\beta)^2]}`) -- saturated activations on large kernels, nearly collinear
    inputs -- go to :func:`_quadrature_pair_tables`.
    """
    N = K.shape[0]
    R = max(max(o) for o in orders)
    d = np.clip(np.diag(K), 0.0, None)
    sd = np.sqrt(d)
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = K / np.sqrt(np.outer(d, d))
    rho = np.clip(np.where(np.isfinite(rho), rho, 0.0), -1.0, 1.0)
    # every decision below is taken order by order, so that an entry's value does not depend on
    # which other orders were requested
    X = truncation(rtol, _growth(act, 2))
    out: dict = {}
    err: dict = {}
    for (p, q) in orders:      # the diagonal: the trapezoid rule of the quadrature path, refined
        for i in range(_MAX_REFINE + 1):
            xd, wd, wdc = _rules_for(float(sd.max()), act, rtol, 2, 1.5 ** i, X)
            f = act.numpy(p)(sd[:, None] * xd) * act.numpy(q)(sd[:, None] * xd)
            v, e, a = _finish(f @ wd, f @ wdc, np.abs(f) @ wd, _order([sd.max()], act, rtol))
            if np.all(e <= rtol * np.maximum(np.abs(v), 1e-3 * a) + 1e-300):
                break
        else:
            return _quadrature_pair_tables(K, act, orders, rtol)
        out[p, q], err[p, q] = np.diag(v), np.diag(e)
    # the off-diagonal entries on the upper-triangle pairs (a < b); entry (b, a) of (p, q) is
    # entry (a, b) of (q, p). Each pass sums the series only over the pairs still uncertified.
    ia, ib = np.triu_indices(N, 1)
    pending = {o: np.arange(len(ia)) for o in orders}
    for M in _MEHLER_DEGREES:
        if not any(len(v) for v in pending.values()):
            break
        proj = {}
        for r in range(R + 1):
            c1, m1 = _hermite_projection(act, r, sd, M, 2 * M + 64)
            c2, m2 = _hermite_projection(act, r, sd, M, 3 * M + 96)
            s2 = np.einsum("ij,ij->i", c2, c2)
            tail = np.maximum(m2 - s2, 0.0) + np.abs(m2 - m1) + np.abs(s2 - np.einsum("ij,ij->i", c1, c1))
            proj[r] = (c2, np.sqrt(tail), np.abs(c2 - c1), np.sqrt(m2))
        chunk = max(256, _PAIR_NODES // (8 * (M + 1)))    # ~8 arrays of chunk x (M + 1)
        for (p, q) in orders:
            sel = pending[p, q]
            if not len(sel):
                continue
            cp, tp, dp, np_ = proj[p]
            cq, tq, dq, nq = proj[q]
            keep = np.zeros(len(sel), dtype=bool)
            for c0 in range(0, len(sel), chunk):
                a, b = ia[sel[c0:c0 + chunk]], ib[sel[c0:c0 + chunk]]
                r = rho[a, b]
                ar = np.abs(r)
                A, B = cp[a].T.copy(), cq[b].T.copy()          # (M + 1, pairs), rows contiguous
                dA, dB = dp[a].T.copy(), dq[b].T.copy()
                aA, aB = np.abs(A), np.abs(B)
                acc = np.zeros(len(a))
                est = np.zeros(len(a))
                for k in range(M, -1, -1):
                    acc *= r
                    acc += A[k] * B[k]
                    # the projections' error: sum_k |rho|^k (|da_k| |b_k| + |a_k| |db_k|)
                    est *= ar
                    est += dA[k] * aB[k] + aA[k] * dB[k]
                est += ar ** (M + 1) * tp[a] * tq[b]
                ok = est <= rtol * np.maximum(np.abs(acc), 1e-3 * np_[a] * nq[b])
                out[p, q][a[ok], b[ok]] = acc[ok]
                err[p, q][a[ok], b[ok]] = est[ok]
                keep[c0:c0 + len(a)] = ~ok
            pending[p, q] = sel[keep]
    # the pairs the series could not certify: quadrature on those pairs, the rules of the whole K
    for (p, q) in orders:
        if p > q or not (len(pending[p, q]) or len(pending[q, p])):
            continue
        both = sorted({(p, q), (q, p)})
        mask = np.zeros(len(ia), dtype=bool)
        for o in both:
            mask[pending[o]] = True
        sub, sub_err = _quadrature_pair_tables(K, act, both, rtol, only=mask)
        for o in both:
            a, b = ia[pending[o]], ib[pending[o]]
            out[o][a, b], err[o][a, b] = sub[o][a, b], sub_err[o][a, b]
    for (p, q) in orders:                  # the lower triangle: T_pq[b, a] = T_qp[a, b]
        out[p, q][ib, ia] = out[q, p][ia, ib]
        err[p, q][ib, ia] = err[q, p][ia, ib]
    return out, err


# ------------------------------------------------------------------ kinked pairs (any rank)
_COLLINEAR = 1e-12     # pairs with 1 - |rho| <= this are one Gaussian variable up to a factor


def _hermite_coeffs(m: int) -> list[list[float]]:
    r"""Coefficients of the probabilists' Hermite polynomials :math:`He_n(z;k)` (variance k) as
    ``[[c_0, ..., c_n] for n = 0..m]``, with :math:`c_j` multiplying :math:`z^j k^{(n-j)/2}`."""
    H = [[1.0], [0.0, 1.0]]
    for n in range(1, m):
        nxt = [0.0] + H[n]                       # z He_n
        for j, c in enumerate(H[n - 1]):
            nxt[j] -= n * c                      # - n k He_{n-1}
        H.append(nxt)
    return H[:m + 1]


def _stein(E: Any, sigma_factors: list, slot: int, m: int, k: np.ndarray) -> np.ndarray:
    r""":math:`\langle \prod\sigma\cdot He_m(z_{slot};k)\rangle/k^m` — the m-th derivative in
    :math:`z_{slot}` moved onto the Gaussian weight (Stein / Price), computed without derivatives
    of :math:`\sigma` (``k`` is the variance of :math:`z_{slot}`, > 0)."""
    out = 0.0
    for j, c in enumerate(_hermite_coeffs(m)[m]):
        if c:
            extra = [(slot, "z", j)] if j else []
            out = out + c * k ** ((m - j) / 2) * E(sigma_factors + extra)
    return out / k ** m


def regular_order(activation: Any) -> int:
    r"""The highest :math:`r` such that :math:`\sigma,\dots,\sigma^{(r)}` have no Dirac part
    (ReLU, leaky ReLU, |z|: 1; a jump: 0; a smooth activation: a large number)."""
    from ..activations import get_activation

    act = get_activation(activation)
    if act.is_smooth or act.is_polynomial:
        return 64
    for k in range(1, 8):
        if act.singular_part(k):
            return k - 1
    return 64


def _leibniz_diagonal(E: Any, d: np.ndarray, orders: set, r: int) -> dict:
    r"""Single-sample values :math:`T_{pq}` that satisfy every Leibniz identity of a regular base.

    For each level :math:`M=p+q` the unknowns are :math:`T_{p,M-p}`, :math:`p=0..M`; the equations
    are, for every base :math:`(p_0,q_0)` with :math:`p_0,q_0\le r` (so that
    :math:`\sigma^{(p_0)}\sigma^{(q_0)}` is a function) and :math:`k=M-p_0-q_0\ge0`,

    .. math:: \sum_{j=0}^k\binom kj T_{p_0+j,\,q_0+k-j}
              =\langle\partial_z^k[\sigma^{(p_0)}\sigma^{(q_0)}]\rangle_K
              =\langle\sigma^{(p_0)}\sigma^{(q_0)}He_k(z;K)\rangle_K/K^k

    (Stein, no derivative of :math:`\sigma` beyond order :math:`r`), plus :math:`T_{pq}=T_{qp}`.
    Single atoms such as :math:`\langle\delta(z)\delta(z)\rangle` diverge, but every combination
    a derived recursion forms at coincident labels is such a Leibniz sum (the derivatives come from
    Stein's identity acting on a product of :math:`\sigma,\sigma'`, PDLT (8.70)–(8.71)), so any
    solution gives the exact value; the minimum-norm one is returned.  Raises
    :class:`~effth.errors.NotDerivedError` when the identities are inconsistent."""
    from ..errors import NotDerivedError

    out: dict = {}
    ref = np.abs(np.asarray(E([(0, "sigma", 0), (0, "sigma", 0)]), float))     # <sigma sigma>, the scale
    for M in sorted({p + q for p, q in orders}):
        idx = {(p, M - p): i for i, p in enumerate(range(M + 1))}
        rows, rhs = [], []
        for p0 in range(min(r, M) + 1):
            for q0 in range(p0, min(r, M - p0) + 1):
                k = M - p0 - q0
                row = np.zeros(M + 1)
                for j in range(k + 1):
                    row[idx[p0 + j, q0 + k - j]] += math.comb(k, j)
                base = [(0, "sigma", p0), (0, "sigma", q0)]
                val = E(base) if k == 0 else _stein(E, base, 0, k, d)
                rows.append(row)
                rhs.append(np.broadcast_to(np.asarray(val, float), d.shape))
        for p in range(M + 1):
            if p < M - p:
                row = np.zeros(M + 1)
                row[idx[p, M - p]], row[idx[M - p, p]] = 1.0, -1.0
                rows.append(row)
                rhs.append(np.zeros(d.shape))
        A, B = np.array(rows), np.array(rhs)
        T = np.linalg.pinv(A) @ B
        res = A @ T - B
        scale = np.maximum(np.max(np.abs(B), axis=0), ref / d ** (M / 2))       # per sample
        if np.any(np.max(np.abs(res), axis=0) > 1e-8 * scale):
            raise NotDerivedError(f"the Leibniz identities of level {M} are inconsistent "
                                  f"(residual {float(np.max(np.abs(res))):.3g})")
        for (p, q) in orders:
            if p + q == M:
                out[p, q] = T[idx[p, q]]
    return out


@public
def leibniz_pair_tables(K: Any, activation: Any, orders: Any, rtol: float = 1e-10) -> dict:
    r"""Pair tables :math:`T_{pq}[\alpha,\beta]=\langle\sigma^{(p)}_\alpha\sigma^{(q)}_\beta\rangle_K`
    of a kinked activation for the derived NTK-hierarchy recursions (PDLT (8.77), (8.79), (8.97)
    and the :math:`1/n` NTK mean), whose atoms at coincident labels enter only through the
    Leibniz sums of derivatives of a product of :math:`\sigma` and :math:`\sigma'`.

    * **distinct samples** (:math:`|\rho|<1`): exact, by Gaussian conditioning on the Dirac parts
      of :math:`\sigma^{(p)}` (point masses, e.g. :math:`\langle\delta(z_\alpha)\delta(z_\beta)\rangle
      =1/(2\pi\sqrt{\det K})`) or Stein's identity (:func:`kinked_pair_tables`);
    * **the diagonal**: the minimum-norm values satisfying every Leibniz identity of a regular base
      :math:`(p_0,q_0)`, :math:`p_0,q_0\le r` (:func:`regular_order`); the regular atoms
      (:math:`p,q\le r`, e.g. :math:`\langle\sigma'\sigma'\rangle`) come out exact.

    Collinear distinct samples (:math:`|\rho|=1`, duplicated inputs) raise
    :class:`~effth.errors.DomainError`: pass distinct inputs.

    Parameters
    ----------
    K : ndarray (N, N)
        Symmetric PSD kernel with a positive diagonal.
    activation : str or Activation
        Kinked, with :math:`\sigma'` a function (:func:`regular_order` >= 1).
    orders : iterable of (p, q)
    rtol : float

    Returns
    -------
    dict
        ``{(p, q): (N, N) table}`` for every requested order and its transpose.
    """
    from ..activations import get_activation
    from ..errors import DomainError
    from .dispatch import gaussian_expectation

    act = get_activation(activation)
    K = real_kernel(K)
    N = K.shape[0]
    orders = sorted({tuple(o) for o in orders} | {tuple(o)[::-1] for o in orders})
    r = regular_order(act)
    if r < 1:
        raise DomainError(f"{act!r}: sigma' has a Dirac part (a jump), so <sigma' sigma'> diverges "
                          "at coincident samples; no NTK statistics")
    d = np.diag(K).copy()
    if np.any(d <= 0):
        raise DomainError(f"leibniz_pair_tables needs every input variance > 0, got diag(K) = {d} "
                          "(a zero input with C_b = 0 sits on the kink: pass x != 0 or C_b > 0)")
    a, b = np.triu_indices(N, 1)
    rho = K[a, b] / np.sqrt(d[a] * d[b])
    if np.any(1.0 - np.abs(rho) <= _COLLINEAR):
        i = int(np.flatnonzero(1.0 - np.abs(rho) <= _COLLINEAR)[0])
        raise DomainError(f"inputs {int(a[i])} and {int(b[i])} are collinear (correlation {rho[i]:+.15g}): "
                          f"the NTK statistics of kinked {act!r} need distinct, non-collinear inputs")
    out = kinked_pair_tables(K, act, orders, rtol) if N > 1 else {o: np.zeros((1, 1)) for o in orders}

    def E(factors: list) -> np.ndarray:
        return np.asarray(gaussian_expectation(factors, d[:, None, None], act, rtol=rtol), dtype=float)

    diag = _leibniz_diagonal(E, d, set(orders), r)
    ii = np.arange(N)
    for o in orders:
        out[o] = np.array(out[o], dtype=float)
        out[o][ii, ii] = diag[o]
    return out


@public
def kinked_pair_tables(K: Any, activation: Any, orders: Any, rtol: float = 1e-10) -> dict:
    r"""Pair tables :math:`T_{pq}[\alpha,\beta]` for the Edgeworth-form recursions, for any
    activation (kinked ones included) and any PSD kernel, singular ones included.

    The recursions (PDLT (4.115), (4.118), (4.119) with the inverse kernel integrated away) use a table
    entry :math:`T_{pq}[\alpha,\beta]` only in Leibniz combinations
    :math:`\sum_p\binom mp T_{p,m-p}[\alpha,\beta]\,X_{\alpha^p\beta^{m-p}}`, where the tensor
    entry :math:`X` (of :math:`V` or :math:`G^{\{1\}}`) carries one label per derivative.  The
    entries are:

    * **regular pairs** (:math:`|\rho|<1`, both variances > 0): :math:`\langle\sigma^{(p)}_\alpha
      \sigma^{(q)}_\beta\rangle_K` by :func:`effth.gaussian_expectation`; where that product of
      distributions is not reduced (e.g. :math:`\delta''` of ReLU), two derivatives on the slot
      with the higher order are traded for the Hermite weight of the pair (Stein's identity).
    * **the diagonal** and **collinear pairs** (:math:`z_\beta=c\,z_\alpha` exactly: duplicated
      inputs, :math:`\rho=\pm1`): there every :math:`X_{\alpha^p\beta^{m-p}}=c^{m-p}X_{\alpha^m}`,
      so only :math:`\sum_p\binom mp c^{m-p}T_{p,m-p}=\langle\partial^m_z[\sigma(z)\sigma(cz)]\rangle`
      is used; it is computed by Stein without derivatives of :math:`\sigma`,
      :math:`\langle\sigma(z)\sigma(cz)He_m(z;K_{\alpha\alpha})\rangle/K_{\alpha\alpha}^m`, and
      :math:`T_{p,m-p}` is set to that value times :math:`c^{m-p}/(1+c^2)^m` (for a kinked
      :math:`\sigma` the single terms, e.g. :math:`\langle\delta(z)\delta(z)\rangle`, diverge;
      their combination does not).  For :math:`m=0` the entry is exact.
    * **zero-variance inputs** (:math:`z_\beta\equiv0`): entries without a derivative on
      :math:`\beta` are exact (:math:`\sigma(0)\langle\sigma^{(p)}_\alpha\rangle`); entries with
      one are set to 0 — they multiply tensor entries carrying the label :math:`\beta`, which
      vanish identically.

    So the tables are exact Gaussian expectations wherever those are finite and the recursions'
    results are exact limits elsewhere; they are **not** a general-purpose table of
    :math:`\langle\sigma^{(p)}\sigma^{(q)}\rangle` on singular kernels.

    Parameters
    ----------
    K : ndarray (N, N)
        Symmetric PSD kernel.
    activation : str or Activation
    orders : iterable of (p, q)
    rtol : float

    Returns
    -------
    dict
        ``{(p, q): (N, N) table}`` for every requested order (and its transpose).
    """
    from ..activations import get_activation
    from .dispatch import gaussian_expectation
    from ..errors import NotDerivedError

    act = get_activation(activation)
    K = real_kernel(K)
    N = K.shape[0]
    orders = sorted({tuple(o) for o in orders} | {tuple(o)[::-1] for o in orders})
    d = np.clip(np.diag(K).copy(), 0.0, None)
    h = act.homogeneity
    if h is not None and d.max(initial=0.0) > 0:
        # positively homogeneous sigma: T_pq(2^e K) = 2^(e (2h - p - q) / 2) T_pq(K) exactly, so a
        # decaying (1e-300) or growing kernel is computed at unit scale (no k^4 underflow)
        e = int(round(math.log2(float(d.max()))))
        if abs(e) > 16:
            base = kinked_pair_tables(np.ldexp(K, -e), act, orders, rtol)
            out = {}
            with np.errstate(over="ignore", under="ignore"):
                for (p, q), T in base.items():
                    half, odd = divmod(e * (2 * h - p - q), 2)
                    out[p, q] = np.ldexp(T * (math.sqrt(2.0) if odd else 1.0), half)
            return out
    zero = d <= _DROP * max(float(d.max(initial=0.0)), 1e-300)
    zero |= d == 0.0
    sigma0 = float(act.numpy(0)(np.array(0.0)))

    def E(factors: list, kern: np.ndarray) -> np.ndarray:
        if kern.shape[0] == 0:
            return np.zeros(0)
        return np.asarray(gaussian_expectation(factors, kern, act, rtol=rtol), dtype=float)

    def single(p: int, var: np.ndarray) -> np.ndarray:
        """<sigma^(p)(z)> for z ~ N(0, var), var > 0 (Stein for p >= 2)."""
        kern = var[:, None, None]
        if p < 2 or act.is_smooth:
            return E([(0, "sigma", p)], kern)
        return _stein(lambda f: E(f, kern), [(0, "sigma", 0)], 0, p, var)

    # ------------------------------------------------------------------ classify the pairs
    a, b = np.triu_indices(N, 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = K[a, b] / np.sqrt(d[a] * d[b])
    zp = zero[a] | zero[b]
    coll = ~zp & (1.0 - np.abs(rho) <= _COLLINEAR)
    reg = ~zp & ~coll
    out = {o: np.zeros((N, N)) for o in orders}

    # ------------------------------------------------------------------ diagonal
    nz = np.flatnonzero(~zero)
    dk = d[nz]
    diag_cache: dict = {}

    def diag_m(m: int) -> np.ndarray:
        """<(sigma^2)^(m)> on the nonzero-variance diagonal."""
        if m not in diag_cache:
            kern = dk[:, None, None]
            s2 = [(0, "sigma", 0), (0, "sigma", 0)]
            diag_cache[m] = E(s2, kern) if m == 0 else _stein(lambda f: E(f, kern), s2, 0, m, dk)
        return diag_cache[m]

    for (p, q) in orders:
        T = out[p, q]
        if act.is_smooth or p + q == 0:
            T[nz, nz] = E([(0, "sigma", p), (0, "sigma", q)], dk[:, None, None])
        else:
            T[nz, nz] = diag_m(p + q) / 2 ** (p + q)
        zi = np.flatnonzero(zero)
        T[zi, zi] = sigma0 ** 2 if p + q == 0 else 0.0

    if N == 1:
        return out

    # ------------------------------------------------------------------ regular pairs
    ra, rb = a[reg], b[reg]
    Kr = np.stack([np.stack([K[ra, ra], K[ra, rb]], -1), np.stack([K[ra, rb], K[rb, rb]], -1)], -2)
    Kinv = None

    def off(p: int, q: int) -> np.ndarray:
        nonlocal Kinv
        try:
            return E([(0, "sigma", p), (1, "sigma", q)], Kr)
        except NotDerivedError:
            if act.is_smooth or max(p, q) < 2:
                raise
        if Kinv is None:
            Kinv = np.linalg.inv(Kr)
        t, u = (0, 1) if p >= q else (1, 0)
        A, B = Kinv[:, t, t], Kinv[:, t, u]
        o = {0: p, 1: q}
        o[t] -= 2
        base = [(0, "sigma", o[0]), (1, "sigma", o[1])]
        return (A * A * E(base + [(t, "z", 2)], Kr) + 2 * A * B * E(base + [(0, "z", 1), (1, "z", 1)], Kr)
                + B * B * E(base + [(u, "z", 2)], Kr) - A * E(base, Kr))

    for (p, q) in orders:
        if len(ra):
            out[p, q][ra, rb] = off(p, q)
            out[p, q][rb, ra] = off(q, p)

    # ------------------------------------------------------------------ collinear pairs
    ca, cb = a[coll], b[coll]
    if len(ca):
        Kc = np.stack([np.stack([K[ca, ca], K[ca, cb]], -1), np.stack([K[ca, cb], K[cb, cb]], -1)], -2)
        c = K[ca, cb] / d[ca]                       # z_b = c z_a
        s2 = [(0, "sigma", 0), (1, "sigma", 0)]
        cache: dict = {}
        for (p, q) in orders:
            m = p + q
            if m == 0:
                val = E(s2, Kc)
                out[p, q][ca, cb] = out[p, q][cb, ca] = val
                continue
            if m not in cache:
                cache[m] = _stein(lambda f: E(f, Kc), s2, 0, m, d[ca])
            out[p, q][ca, cb] = cache[m] * c ** q / (1 + c * c) ** m
            out[p, q][cb, ca] = cache[m] * c ** p / (1 + c * c) ** m

    # ------------------------------------------------------------------ zero-variance pairs
    for i in np.flatnonzero(zp):
        x, y = int(a[i]), int(b[i])
        for (p, q) in orders:
            for s, t, ps, pt in ((x, y, p, q), (y, x, q, p)):   # entry [s, t] = <sigma^(ps)_s sigma^(pt)_t>
                if (zero[s] and ps) or (zero[t] and pt):
                    v = 0.0
                elif zero[s] and zero[t]:
                    v = sigma0 ** 2
                elif zero[t]:
                    v = sigma0 * float(single(ps, d[[s]])[0])
                else:
                    v = sigma0 * float(single(pt, d[[t]])[0])
                out[p, q][s, t] = v
    return out


# ------------------------------------------------------------ closed-form pair tables (fast path)
_ROWS = 1 << 16        # pair entries evaluated at once by closed_pair_tables (memory O(_ROWS), not O(N^2))


def _pl_angle(rho: np.ndarray, ws: Any = None) -> tuple[np.ndarray, np.ndarray]:
    r""":math:`\pi-\theta`, :math:`\theta=\arccos\rho`, and :math:`\sin\theta=\sqrt{(1-\rho)(1+\rho)}`
    (a determinant below :math:`8\epsilon` is zero, as in :mod:`effth.numerics._closed._orthant`:
    duplicated samples give the exact :math:`\rho=\pm1` limit, :math:`\theta` exactly 0 or
    :math:`\pi`).  The angle by :func:`effth.numerics._fastmath.acos` (whole-array arithmetic,
    within 2 ulp; ``np.arctan2`` costs several times more); ``ws`` a scratch pool."""
    rho = np.asarray(rho, dtype=float)
    ws = _fastmath.Scratch() if ws is None else ws
    det = np.subtract(1.0, rho, out=ws.take(rho.shape))
    keep = np.add(1.0, rho, out=ws.take(rho.shape))
    det *= keep
    np.greater(det, 8 * np.finfo(float).eps, out=keep)        # 1.0, or 0.0 for a zero determinant
    det *= keep
    st = np.sqrt(det, out=det)
    return _fastmath.acos(rho, keep, complement=True, ws=ws), st


# The arc-cosine kernels (Cho & Saul 2009) of sigma = a+ z Theta(z) + a- z Theta(-z), with
# s2 = a+^2 + a-^2, x = a+ a-:  <sigma sigma> = s2 M11(rho) - 2 x M11(-rho),
# M11(rho) = sqrt(da db) (sin t + (pi - t) cos t) / (2 pi), and
# <sigma' sigma'> = (s2 (pi - t) + 2 x t) / (2 pi), t = arccos rho; phi = pi - t below.
# The a+ a- terms vanish for ReLU (x = 0) and are then not evaluated.
def _pl00(s2: float, x: float, sab: np.ndarray, rho: np.ndarray, phi: np.ndarray, st: np.ndarray,
          out: np.ndarray | None = None, tmp: np.ndarray | None = None) -> np.ndarray:
    r = np.multiply(phi, rho, out=out)
    r += st
    r *= s2
    if x:
        t = np.subtract(np.pi, phi, out=tmp)             # theta
        t *= rho
        np.subtract(st, t, out=t)
        t *= 2.0 * x
        r -= t
    r *= sab
    r /= 2.0 * np.pi
    return r


def _pl11(s2: float, x: float, phi: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    if not x:
        return np.multiply(phi, s2 / (2.0 * np.pi), out=out)
    r = np.multiply(phi, s2 - 2.0 * x, out=out)          # s2 phi + 2 x (pi - phi)
    r += 2.0 * x * np.pi
    r /= 2.0 * np.pi
    return r


def _erf_u(d: np.ndarray) -> np.ndarray:
    """:math:`u=(1+2K)^{-1/2}` per sample."""
    return 1.0 / np.sqrt(1.0 + 2.0 * d)


def _erf_uu(da: np.ndarray, db: np.ndarray) -> np.ndarray:
    """:math:`u_au_b`, :math:`u=(1+2K)^{-1/2}`: symmetric in (a, b) to the last bit."""
    return np.multiply(_erf_u(da), _erf_u(db))


def _erf00_into(t: np.ndarray) -> np.ndarray:
    r""":math:`\langle\mathrm{erf}\,\mathrm{erf}\rangle=\tfrac2\pi\arcsin t` in place on
    ``t`` = :math:`2K_{ab}u_au_b` (clipped)."""
    np.clip(t, -1.0, 1.0, out=t)
    np.arcsin(t, out=t)
    t *= 2.0 / np.pi
    return t


def fast_pair_joint(act: Any):
    r"""``f(da, db, k, ws=None) -> {(0, 0): <sigma_a sigma_b>, (1, 1): <sigma'_a sigma'_b>}``
    sharing their common pieces (erf: :math:`t=2K_{ab}u_au_b`, :math:`u=(1+2K_{aa})^{-1/2}`, with
    :math:`\langle\sigma'\sigma'\rangle=\frac4\pi u_au_b/\sqrt{1-t^2}`; the arc-cosine family:
    :math:`\rho`, :math:`\theta` and :math:`\sin\theta=\sqrt{1-\rho^2}`), or None.  The same
    formulas as :func:`_fast_pair`, symmetric in the two samples to the last bit; ``ws`` an
    :class:`effth.numerics._fastmath.Scratch` pool the results and temporaries are taken from
    (no new block-sized arrays)."""
    fam = getattr(act, "family", None)
    if fam == "erf":
        def erf_joint(da, db, k, ws=None):
            ws = _fastmath.Scratch() if ws is None else ws
            shape = np.broadcast(da, db, k).shape
            uu = np.multiply(2.0 * _erf_u(da), _erf_u(db), out=ws.take(shape))    # 2 u_a u_b
            t = np.multiply(uu, k, out=ws.take(shape))
            np.minimum(t, 1.0, out=t)                  # clipped (the ufuncs: no wrapper call)
            np.maximum(t, -1.0, out=t)
            w = np.multiply(t, t, out=ws.take(shape))  # (4/pi) u_a u_b / sqrt(1 - t^2)
            np.subtract(1.0, w, out=w)
            np.sqrt(w, out=w)
            np.divide(uu, w, out=w)
            w *= 2.0 / np.pi
            np.arcsin(t, out=t)                        # libm's: faster here than _fastmath.asin
            t *= 2.0 / np.pi
            return {(0, 0): t, (1, 1): w}
        return erf_joint
    if fam == "piecewise_linear":
        ap, am = float(act.param("a_plus")), float(act.param("a_minus"))
        s2, x = ap * ap + am * am, ap * am

        def pl_joint(da, db, k, ws=None):
            ws = _fastmath.Scratch() if ws is None else ws
            shape = np.broadcast(da, db, k).shape
            sab = np.multiply(np.sqrt(da), np.sqrt(db), out=ws.take(shape))
            rho = np.divide(k, sab, out=ws.take(shape))
            np.minimum(rho, 1.0, out=rho)
            np.maximum(rho, -1.0, out=rho)
            phi, st = _pl_angle(rho, ws)
            e11 = _pl11(s2, x, phi, out=ws.take(shape))
            e00 = _pl00(s2, x, sab, rho, phi, st, out=ws.take(shape), tmp=ws.take(shape) if x else None)
            return {(0, 0): e00, (1, 1): e11}
        return pl_joint
    return None


def _fast_pair(act: Any, p: int, q: int):
    r"""Direct NumPy formula ``f(da, db, k) -> <sigma^(p)(z_a) sigma^(q)(z_b)>`` (elementwise,
    broadcast; ``da, db`` the variances, ``k`` the covariance) and its one-sample form
    ``g(d) -> <sigma^(p)(z) sigma^(q)(z)>``, or None.

    The same closed forms as :func:`effth.numerics.closed_forms.closed_form` (tested to agree to
    1e-13), without its plan/orthant machinery: arc-cosine kernels (Cho & Saul 2009) for
    :math:`\sigma=a_+z\Theta(z)+a_-z\Theta(-z)`, Williams (1996) for erf, the characteristic
    function for sin/cos.
    """
    fam = getattr(act, "family", None)
    if (p, q) not in ((0, 0), (1, 1)):
        return None
    if fam == "piecewise_linear":
        ap, am = float(act.param("a_plus")), float(act.param("a_minus"))
        s2, x = ap * ap + am * am, ap * am
        if p == 0:
            def f(da, db, k):
                sab = np.sqrt(da) * np.sqrt(db)
                rho = np.clip(k / sab, -1.0, 1.0)
                return _pl00(s2, x, sab, rho, *_pl_angle(rho))

            return f, lambda d: 0.5 * s2 * d

        def f1(da, db, k):
            rho = np.clip(k / (np.sqrt(da) * np.sqrt(db)), -1.0, 1.0)
            return _pl11(s2, x, _pl_angle(rho)[0])

        return f1, lambda d: np.full(np.shape(d), 0.5 * s2)
    if fam == "erf":
        # in place on one block-sized array: the per-sample factors are vectors (no temporaries
        # of the block's size besides the result)
        if p == 0:
            def erf00(da, db, k):
                t = _erf_uu(da, db)                  # 2 k u_a u_b
                t *= k
                t *= 2.0
                return _erf00_into(t)
            return erf00, lambda d: (2.0 / np.pi) * np.arcsin(2.0 * d / (1.0 + 2.0 * d))

        def erf11(da, db, k):
            t = np.multiply(k, k)
            t *= -4.0
            t += (1.0 + 2.0 * da) * (1.0 + 2.0 * db)
            np.sqrt(t, out=t)
            np.divide(4.0 / np.pi, t, out=t)
            return t
        return erf11, lambda d: (4.0 / np.pi) / np.sqrt(1.0 + 4.0 * d)
    if fam == "trig":
        kind = str(act.param("kind"))
        if kind not in ("sin", "cos"):
            return None
        # E[sin z_a sin z_b] = (e^{-(da+db-2k)/2} - e^{-(da+db+2k)/2}) / 2, cos: the sum;
        # sigma' of sin is cos, of cos is -sin
        sign = -1.0 if (kind == "sin") == (p == 0) else 1.0
        return (lambda da, db, k: 0.5 * (np.exp(-0.5 * (da + db - 2.0 * k)) + sign * np.exp(-0.5 * (da + db + 2.0 * k))),
                lambda d: 0.5 * (1.0 + sign * np.exp(-2.0 * d)))
    return None


@public
def pair_plans(act: Any, orders: Any, d: np.ndarray, *, direct_only: bool = False) -> dict:
    r"""The closed forms of :func:`closed_pair_tables` for a kernel with diagonal ``d``:
    ``{(p, q): (pair(da, db, k), one(d))}``, ``pair`` the two-sample expectation
    :math:`\langle\sigma^{(p)}_a\sigma^{(q)}_b\rangle` on broadcast arrays of
    :math:`K_{aa}, K_{bb}, K_{ab}` and ``one`` the one-sample :math:`\langle\sigma^{(p)}\sigma^{(q)}\rangle`
    on :math:`K_{aa}`; only orders whose transpose has one too, none where a kinked activation
    meets a zero-variance input or a scale outside :math:`2^{\pm16}` (see
    :func:`closed_pair_tables`).  ``direct_only``: only the direct NumPy formulas (erf, sin/cos,
    the arc-cosine family), which are symmetric in the two samples to the last bit."""
    from .closed_forms import closed_form, has_closed_form

    kinked = bool(getattr(act, "kinks", ()))
    if kinked:
        if np.any(d <= 0.0):
            return {}
        if act.homogeneity is not None:
            with np.errstate(divide="ignore"):
                e = np.round(np.log2(d))
            if np.any(np.abs(e) > 16):
                return {}
    want = sorted({tuple(o) for o in orders} | {tuple(o)[::-1] for o in orders})
    plans: dict = {}
    for (p, q) in want:
        if (p and act.singular_part(p)) or (q and act.singular_part(q)):
            continue
        fast = _fast_pair(act, p, q)
        if fast is not None:
            plans[p, q] = fast
            continue
        if direct_only:
            continue
        f2 = [(0, "sigma", p), (1, "sigma", q)]
        f1 = [(0, "sigma", p), (0, "sigma", q)]
        if has_closed_form(act, f2) and has_closed_form(act, f1):
            def pair(da, db, k, f2=f2):
                B = np.empty(np.broadcast(da, db, k).shape + (2, 2))
                B[..., 0, 0], B[..., 1, 1] = da, db
                B[..., 0, 1] = B[..., 1, 0] = k
                return closed_form(act, f2, B)

            plans[p, q] = (pair, lambda dd, f1=f1: closed_form(act, f1, dd.reshape(-1, 1, 1)))
    # keep an order only with its transpose (the lower triangle of (p, q) is (q, p) transposed)
    return {o: v for o, v in plans.items() if o[::-1] in plans}


@public
def closed_pair_tables(K: Any, activation: Any, orders: Any, *, rows: int = _ROWS) -> dict:
    r"""Exact tables :math:`T_{pq}[\alpha,\beta]=\langle\sigma^{(p)}_\alpha\sigma^{(q)}_\beta\rangle_K`
    from closed forms, for the orders that have one.

    The fast path of the layer flows for :math:`K` and :math:`\Theta` (PDLT (4.118), (9.5)):
    :math:`(0,0)` and :math:`(1,1)` of erf, sin/cos and the piecewise-linear family (ReLU, leaky
    ReLU, abs: the arc-cosine kernels) by direct NumPy formulas; every other order and family
    with a closed form (GELU, polynomials, ...) through
    :func:`effth.numerics.closed_forms.closed_form` (no per-call validation: the kernel is
    checked once here).  Only the upper triangle is evaluated, in blocks of about ``rows`` entries
    (memory :math:`O(\text{rows})` per thread besides the :math:`N\times N` results) on
    :func:`effth._threads.thread_map`'s threads, and mirrored (:math:`T_{qp}=T_{pq}^\top`); the
    diagonal is the one-sample expectation.

    The values are the Gaussian expectations with their distributional parts: an order is
    omitted (the caller falls back to :func:`effth.gaussian_expectation` or quadrature) when
    :math:`\sigma^{(p)}` has a Dirac part, when a kinked activation meets a zero-variance input
    (its point mass, PDLT (2.9)) or a kernel scale outside :math:`2^{\pm16}` (where the
    dispatcher rescales a homogeneous integrand), or when a value is not finite.

    Parameters
    ----------
    K : ndarray (N, N)
        Symmetric PSD kernel (validated by the caller).
    activation : Activation
    orders : iterable of (p, q)
    rows : int
        Pair entries per block.

    Returns
    -------
    dict
        ``{(p, q): (N, N) table}`` for the orders (and transposes) that have a closed form.
    """
    act = activation
    K = np.asarray(K, dtype=np.float64)
    N = K.shape[0]
    d = np.diag(K).copy()
    if N == 0:
        return {}
    plans = pair_plans(act, orders, d)
    out = {o: np.empty((N, N)) for o in plans}
    step = max(1, rows // max(N, 1))

    def block(i0: int) -> dict:
        # rows i0:i1 of the upper triangle and their mirror: the blocks write disjoint parts;
        # returns whether each order's off-diagonal entries of the block are finite
        i1 = min(N, i0 + step)
        da, db, k = d[i0:i1, None], d[None, i0:], K[i0:i1, i0:]
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            blocks = {o: plans[o][0](da, db, k) for o in plans}
        r = np.arange(i1 - i0)
        finite = {}
        for (p, q), B in blocks.items():
            B[r, r] = 0.0                      # the diagonal: the one-sample values, set below
            finite[p, q] = bool(np.isfinite(B).all())
            T = out[p, q]
            T[i0:i1, i0:] = B
            T[i1:, i0:i1] = blocks[q, p][:, i1 - i0:].T
        return finite

    # on the worker threads (fixed blocks: the tables do not depend on the thread count); with
    # one pool per process this is about 10 % faster on two cores (erf, 1000 inputs), with a pool
    # per call it was slower
    finite = thread_map(block, range(0, N, step))
    ok = {}
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        for (p, q), T in out.items():
            diag = plans[p, q][1](d)
            T[np.diag_indices(N)] = diag
            ok[p, q] = all(f[p, q] for f in finite) and bool(np.isfinite(diag).all())
    return {o: T for o, T in out.items() if ok[o] and ok[o[::-1]]}
