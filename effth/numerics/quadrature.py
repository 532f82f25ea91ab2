"""Deterministic quadrature for Gaussian expectations of products of regular factors.

Two kernels, both vectorized over a batch of covariances:

* **smooth** integrands (smooth activation, or z powers only): integrate in the
  eigenbasis of K, ``z = mu + V sqrt(Lambda) x`` with ``x ~ N(0, I)``.  Each
  eigen-direction gets its own 1-D rule: a single node if the direction does
  not enter the integrand (rank-deficient K), Gauss-Hermite (exact) if the
  integrand is polynomial in it, otherwise a truncated trapezoidal rule whose
  step is chosen from the activation's strip of analyticity and the scale of
  the direction.  Convergence is verified by comparing with a coarser rule.
* **piecewise-smooth** integrands (kinked activation): nested conditional
  integration in a pivoted-Cholesky basis, ``z = mu + A u``; at each level the
  integrand has kinks only at the points where a slot that *ends* at this level
  crosses a kink, so the truncated line is split there and Gauss-Legendre is
  used on each piece (spectral convergence on each piece).

Factors ``(s, 'sigma', a)`` here mean the REGULAR part of sigma^(a); Dirac parts
are handled by :mod:`effth.numerics.dispatch`.
"""

from __future__ import annotations

from effth._signature import public

import math
import warnings
from typing import Any, Sequence

import numpy as np

from ..errors import AccuracyWarning, ConvergenceError, DomainError
from ._rules import (INV_SQRT_2PI, eval_product, factor_degrees, gauss_hermite, gauss_legendre,
                     group_factors, log_inv_tol, trapezoid, truncation)

__all__ = ["quadrature_expectation", "DEFAULT_MAX_NODES"]

DEFAULT_MAX_NODES = 2 ** 24          # per kernel, tensor-product nodes
_CHUNK = 2 ** 20                      # elements of (batch x nodes) evaluated at once
_EIG_DROP = 1e-14                     # eigenvalues <= this * lambda_max are treated as 0
_PIVOT_DROP = 1e-13                   # conditional variances <= this * max diag are treated as 0
_REFINE = 1.5                         # bandwidth growth per refinement round
_COARSE = 1.3                         # coarse/fine step ratio used for the error estimate


def _accept(fine: np.ndarray, err: np.ndarray, absval: np.ndarray, rtol: float) -> np.ndarray:
    scale = np.maximum(np.abs(fine), 1e-3 * absval)
    return err <= rtol * scale + 1e-300


def _extrapolated_error(fine: np.ndarray, coarse: np.ndarray, absval: np.ndarray) -> np.ndarray:
    """Error estimate of the fine rule from |fine - coarse|.

    Both rules converge like exp(-c/h) (trapezoid) or exp(-c n) (Gauss-Legendre
    pieces); with the coarse step 1.3x the fine one, e_fine ~ e_coarse**1.3.
    A safety factor 10 is applied, and the plain difference is an upper bound.
    """
    scale = np.maximum(np.maximum(np.abs(fine), 1e-3 * absval), 1e-300)
    rel = np.abs(fine - coarse) / scale
    return scale * np.minimum(rel, 10.0 * rel ** _COARSE) + 1e-15 * absval


def _check_finite(absf: np.ndarray, K: np.ndarray, mean: np.ndarray | None, factors: Sequence) -> None:
    """Refuse an integrand that overflows float64 (refining the rule cannot help: it would only
    grow the grid until max_nodes, which takes minutes)."""
    bad = ~np.isfinite(absf)
    if np.any(bad):
        b = int(np.argmax(bad))
        scale = float(np.max(np.abs(np.diagonal(K[b])))) if K.shape[-1] else 0.0
        where = "" if mean is None else f" and mean up to {float(np.max(np.abs(mean[b]))):.3g}"
        raise DomainError(
            f"the integrand {list(factors)} overflows float64 (or is undefined) at kernel entry {b} "
            f"(variance up to {scale:.3g}{where}): its expectation is not representable; rescale the "
            "inputs or the kernel")


# ---------------------------------------------------------------- smooth path
def _scales(A: np.ndarray, slots: np.ndarray) -> np.ndarray:
    """(B, k): max_s |A[b, s, j]| over the given slots (0 if none)."""
    if not slots.any():
        return np.zeros((A.shape[0], A.shape[-1]))
    return np.max(np.abs(A[:, slots, :]), axis=1)


def _quantize(x: np.ndarray) -> np.ndarray:
    """Round positive scales UP to a geometric grid (ratio 1.12) so kernels can share rules."""
    with np.errstate(divide="ignore"):
        q = np.where(x > 0, 1.12 ** np.ceil(np.log(np.where(x > 0, x, 1.0)) / math.log(1.12)), 0.0)
    return q


def _direction_rules(s_vec: np.ndarray, t_vec: np.ndarray, q_vec: np.ndarray, activation: Any,
                     factors: Sequence, rtol: float, mult: float, max_nodes: float = math.inf) -> tuple:
    """One 1-D rule per eigen-direction, each a pair (fine, coarse).

    ``s_vec[j]``/``t_vec[j]``: scale of direction j in the sigma slots / in all used slots;
    ``q_vec[j]``: sum over sigma factors of the squared scale (bandwidths of entire
    activations add in quadrature).  Returns ``(rules, None)``, or ``(None, nodes)`` when one
    direction alone would need more than ``max_nodes`` nodes (nothing is allocated then).
    """
    poly_deg, growth, m = factor_degrees(factors, activation)
    k = len(s_vec)
    L = log_inv_tol(rtol)
    X = truncation(rtol, growth)
    rules = []
    zdeg = sum(o for _, kind, o in factors if kind == "z")
    for j in range(k):
        t_j = float(t_vec[j])
        s_j = float(s_vec[j])
        if t_j == 0.0:
            node = gauss_hermite(1)
            rules.append((node, node))
            continue
        if poly_deg is not None or s_j == 0.0:
            deg = poly_deg if poly_deg is not None else zdeg
            node = gauss_hermite(deg // 2 + 1)
            rules.append((node, node))
            continue
        strip = activation.strip
        base = math.sqrt(2.0 * L)
        if math.isinf(strip):
            W = math.sqrt(2.0 * L / _COARSE * (1.0 + 2.0 * float(q_vec[j]))) + 1.0
        else:
            W = max(1.25 * (L / _COARSE + 3.0) * s_j / strip, base) + 1.0
        W *= mult
        h = 2.0 * math.pi / W
        if not (2.0 * X / h + 1.0 <= max_nodes):        # bound the grid before allocating it
            return None, 2.0 * X / h + 1.0
        rules.append((trapezoid(h, X), trapezoid(min(h * _COARSE, X), X)))
    return rules, None


def _tensor_sum(rules: list, which: int, A: np.ndarray, mean: np.ndarray | None, by_slot: list,
                activation: Any) -> tuple[np.ndarray, np.ndarray]:
    """Sum_w f(mu + A x) over the tensor grid of the chosen rules; returns (value, E|f|).

    z_s is formed as an outer sum of the 1-D arrays A_sj x_j (broadcasting), so
    the cost per node is a few additions plus the factor evaluations.
    """
    xs = [r[which][0] for r in rules]
    ws = [r[which][1] for r in rules]
    k = len(xs)
    sizes = [len(x) for x in xs]
    P = int(np.prod(sizes))
    B = A.shape[0]
    val = np.zeros(B)
    absval = np.zeros(B)
    if P <= _CHUNK:
        b_chunk, d0_chunk = max(1, _CHUNK // P), sizes[0]
    else:
        b_chunk, d0_chunk = 1, max(1, _CHUNK // (P // sizes[0]))
    axes = tuple(range(1, k + 1))

    def shaped(v: np.ndarray, j: int) -> np.ndarray:
        shp = [1] * (k + 1)
        shp[j + 1] = v.shape[-1]
        shp[0] = v.shape[0] if v.ndim == 2 else 1
        return v.reshape(shp)

    for b0 in range(0, B, b_chunk):
        b1 = min(B, b0 + b_chunk)
        Ab = A[b0:b1]
        for i0 in range(0, sizes[0], d0_chunk):
            i1 = min(sizes[0], i0 + d0_chunk)
            xj = [xs[0][i0:i1]] + xs[1:]
            wgt = shaped(ws[0][i0:i1], 0)
            for j in range(1, k):
                wgt = wgt * shaped(ws[j], j)
            zs = []
            for sl in range(k):
                if not by_slot[sl]:
                    zs.append(None)
                    continue
                z = 0.0 if mean is None else mean[b0:b1, sl].reshape((-1,) + (1,) * k)
                for j in range(k):
                    z = z + shaped(Ab[:, sl, j:j + 1] * xj[j][None, :], j)
                zs.append(z)
            f = eval_product(by_slot, activation, zs)
            f = np.broadcast_to(f, (b1 - b0,) + f.shape[1:])
            val[b0:b1] += np.sum(f * wgt, axis=axes)
            absval[b0:b1] += np.sum(np.abs(f) * wgt, axis=axes)
    return val, absval


def _smooth(factors: Sequence, K: np.ndarray, mean: np.ndarray | None, activation: Any, rtol: float,
            max_nodes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    B, k = K.shape[0], K.shape[-1]
    d, R = _correlation(K)
    w, V = np.linalg.eigh(R)
    w, V = w[:, ::-1], V[:, :, ::-1]
    wmax = np.maximum(w[:, :1], 0.0)
    w = np.where(w > _EIG_DROP * wmax, w, 0.0)
    A = d[:, :, None] * (V * np.sqrt(w)[:, None, :])
    by_slot = group_factors(factors, k)
    sig_slots = np.array([any(kd == "sigma" for kd, _ in fs) for fs in by_slot])
    used = np.array([any(not (kd == "z" and o == 0) for kd, o in fs) for fs in by_slot])
    s_all = _quantize(_scales(A, sig_slots))
    t_all = _quantize(_scales(A, used))
    q_all = np.zeros((B, k))
    for s_, kd, _ in factors:
        if kd == "sigma":
            q_all += A[:, s_, :] ** 2
    q_all = _quantize(q_all)
    value = np.zeros(B)
    absval = np.zeros(B)
    err = np.full(B, np.inf)
    nodes = np.zeros(B, dtype=np.int64)
    keys, inverse = np.unique(np.concatenate([s_all, t_all, q_all], axis=1), axis=0, return_inverse=True)
    inverse = np.asarray(inverse).reshape(-1)
    for g in range(keys.shape[0]):
        todo = np.nonzero(inverse == g)[0]
        s_vec, t_vec, q_vec = keys[g, :k], keys[g, k:2 * k], keys[g, 2 * k:]
        mult = 1.0
        while todo.size:
            Asub = A[todo]
            msub = None if mean is None else mean[todo]
            rules, too_many = _direction_rules(s_vec, t_vec, q_vec, activation, factors, rtol, mult, max_nodes)
            if rules is None:
                nodes[todo] = int(min(too_many, 2 ** 62))
                break
            n_fine = int(np.prod([len(r[0][0]) for r in rules]))
            exact = all(r[0] is r[1] for r in rules)
            if n_fine > max_nodes:
                nodes[todo] = n_fine
                break
            fine, absf = _tensor_sum(rules, 0, Asub, msub, by_slot, activation)
            _check_finite(absf, K[todo], msub, factors)
            if exact:
                e = np.abs(fine) * 1e-16
            else:
                coarse, _ = _tensor_sum(rules, 1, Asub, msub, by_slot, activation)
                e = _extrapolated_error(fine, coarse, absf)
            value[todo], err[todo], nodes[todo], absval[todo] = fine, e, n_fine, absf
            ok = _accept(fine, e, absf, rtol)
            todo = todo[~ok]
            mult *= _REFINE
    return value, err, nodes, absval


def _correlation(K: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-slot standard deviations d (B, k) and the correlation matrix R (B, k, k).

    Rank decisions (dropped eigenvalues, dead pivots) are made on R, so they do not depend on
    how different the slots' scales are: K = diag(1e-8, 1e8) with correlation 0.25 once lost
    its small direction relative to lambda_max.  Zero-variance slots get a zero row in R.
    """
    d = np.sqrt(np.clip(np.diagonal(K, axis1=-2, axis2=-1), 0.0, None))
    dz = np.where(d > 0.0, d, 1.0)
    R = K / (dz[:, :, None] * dz[:, None, :])
    return d, R


# ------------------------------------------------------- piecewise-smooth path
def _pivoted_cholesky(K: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """z = A u with A (B, k, r<=k) columns from pivoted Cholesky; returns (A, level per slot)."""
    B, k = K.shape[0], K.shape[-1]
    R = K.copy()
    A = np.zeros((B, k, k))
    used = np.zeros((B, k), dtype=bool)
    level = np.full((B, k), -1)
    d0 = np.max(np.diagonal(K, axis1=1, axis2=2), axis=1)
    bidx = np.arange(B)
    for j in range(k):
        d = np.where(used, -np.inf, np.diagonal(R, axis1=1, axis2=2))
        p = np.argmax(d, axis=1)
        dp = d[bidx, p]
        alive = dp > _PIVOT_DROP * d0
        col = np.where(alive[:, None], R[bidx, :, p] / np.sqrt(np.where(alive, dp, 1.0))[:, None], 0.0)
        col[bidx, p] = np.where(alive, np.sqrt(np.where(alive, dp, 0.0)), 0.0)
        col = np.where(used, 0.0, col)
        A[:, :, j] = col
        R -= col[:, :, None] * col[:, None, :]
        used[bidx, p] |= alive
        R[bidx, p, :] = np.where(alive[:, None], 0.0, R[bidx, p, :])
        R[bidx, :, p] = np.where(alive[:, None], 0.0, R[bidx, :, p])
        dead = np.diagonal(R, axis1=1, axis2=2) <= _PIVOT_DROP * d0[:, None]
        R = np.where(dead[:, :, None] | dead[:, None, :], 0.0, R)
    nz = np.abs(A) > 0.0
    for j in range(k):
        level = np.where(nz[:, :, j], j, level)
    return A, level


def _grading_depth(A_R: np.ndarray, level: np.ndarray) -> int:
    """Decades of geometric grading needed at split points for nearly singular kernels.

    A slot introduced at level j >= 1 has conditional standard deviation (in correlation units)
    equal to its own entry in column j.  After the inner integrals, the outer integrand has a
    feature of that width at the split point; Gauss-Legendre on [0, X] resolves widths down to
    about 1e-2, so finer ones get sub-intervals at distances X*10^-m, m = 1..M.
    """
    B, k, r = A_R.shape
    widths = [np.abs(A_R[:, :, j])[level == j] for j in range(1, r)]
    widths = [w[w > 0.0] for w in widths if w.size]
    if not widths or not any(w.size for w in widths):
        return 0
    smallest = float(min(w.min() for w in widths if w.size))
    return int(np.clip(np.ceil(np.log10(1e-2 / smallest)), 0, 10))


def _nested(A: np.ndarray, level: np.ndarray, mean: np.ndarray | None, by_slot: list, activation: Any,
            kink_slots: np.ndarray, n_gl: int, X: float, grade: int = 0) -> tuple[np.ndarray, np.ndarray, int]:
    B, k = A.shape[0], A.shape[1]
    kinks = np.asarray(activation.kinks, dtype=np.float64) if activation is not None else np.zeros(0)
    r = int(np.max(level)) + 1 if level.size else 0
    t, wt = gauss_legendre(n_gl)
    mu = np.zeros((B, k)) if mean is None else mean
    total = np.zeros(B)
    total_abs = np.zeros(B)
    nodes_per_kernel = [1]

    def rec(j: int, b: np.ndarray, zpart: np.ndarray, wgt: np.ndarray) -> None:
        # zpart: (Bc, P, k) partial z (mean + sum_{i<j} A_si u_i); wgt: (Bc, P)
        if j == r:
            f = eval_product(by_slot, activation, [zpart[..., q] for q in range(k)])
            total[b] += np.sum(f * wgt, axis=1)
            total_abs[b] += np.sum(np.abs(f) * wgt, axis=1)
            return
        Ab = A[b][:, :, j]                                             # (Bc, k)
        ends = (level[b] == j) & kink_slots[None, :] & (Ab != 0.0)     # (Bc, k)
        nsplit = int(ends.sum(axis=1).max()) * len(kinks)
        if nsplit:
            safeA = np.where(ends, Ab, 1.0)
            sp = (kinks[None, None, None, :] - zpart[:, :, :, None]) / safeA[:, None, :, None]
            sp = np.where(ends[:, None, :, None], sp, np.inf).reshape(zpart.shape[0], zpart.shape[1], -1)
            sp = np.sort(sp, axis=-1)[..., :nsplit]
            sp = np.clip(sp, -X, X)
            if grade:
                offs = X * 10.0 ** -np.arange(1, grade + 1)
                offs = np.concatenate([-offs, offs])
                graded = (sp[..., :, None] + offs).reshape(sp.shape[:2] + (-1,))
                sp = np.sort(np.clip(np.concatenate([sp, graded], axis=-1), -X, X), axis=-1)
        else:
            sp = np.zeros(zpart.shape[:2] + (1,))
        edges = np.concatenate([np.full(sp.shape[:2] + (1,), -X), sp, np.full(sp.shape[:2] + (1,), X)], axis=-1)
        lo, hi = edges[..., :-1], edges[..., 1:]                        # (Bc, P, npc)
        mid, half = 0.5 * (lo + hi), 0.5 * (hi - lo)
        u = mid[..., None] + half[..., None] * t                        # (Bc, P, npc, n)
        wu = half[..., None] * wt * INV_SQRT_2PI * np.exp(-0.5 * u * u)
        Bc, P = zpart.shape[:2]
        N = u.shape[2] * u.shape[3]
        if len(nodes_per_kernel) <= j + 1:
            nodes_per_kernel.append(nodes_per_kernel[-1] * N)
        u = u.reshape(Bc, P * N)
        wnew = (wgt[:, :, None] * wu.reshape(Bc, P, N)).reshape(Bc, P * N)
        znew = np.repeat(zpart, N, axis=1) + u[:, :, None] * Ab[:, None, :]
        rec_chunked(j + 1, b, znew, wnew)

    def rec_chunked(j: int, b: np.ndarray, zpart: np.ndarray, wgt: np.ndarray) -> None:
        Bc, P = zpart.shape[:2]
        grow = (2 + len(kinks)) * n_gl if j < r else 1
        if Bc * P * grow * (k + 4) <= 4 * _CHUNK or P <= 1 and Bc == 1:
            rec(j, b, zpart, wgt)
            return
        if Bc > 1:
            step = max(1, (4 * _CHUNK) // max(P * grow * (k + 4), 1))
            for b0 in range(0, Bc, step):
                rec_chunked(j, b[b0:b0 + step], zpart[b0:b0 + step], wgt[b0:b0 + step])
            return
        step = max(1, (4 * _CHUNK) // (grow * (k + 4)))
        for p0 in range(0, P, step):
            rec(j, b, zpart[:, p0:p0 + step], wgt[:, p0:p0 + step])

    rec_chunked(0, np.arange(B), mu[:, None, :].copy(), np.ones((B, 1)))
    return total, total_abs, nodes_per_kernel[-1]


def _kinked(factors: Sequence, K: np.ndarray, mean: np.ndarray | None, activation: Any, rtol: float,
            max_nodes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    B, k = K.shape[0], K.shape[-1]
    d, R = _correlation(K)
    A_R, level = _pivoted_cholesky(R)
    A = d[:, :, None] * A_R
    grade = _grading_depth(A_R, level)
    by_slot = group_factors(factors, k)
    kink_slots = np.array([any(kd == "sigma" for kd, _ in fs) for fs in by_slot])
    _, growth, _ = factor_degrees(factors, activation)
    X = truncation(rtol, growth)
    L = log_inv_tol(rtol)
    n = int(math.ceil(12 + 0.7 * L))
    value = np.zeros(B)
    absval = np.zeros(B)
    err = np.full(B, np.inf)
    nodes = np.zeros(B, dtype=np.int64)
    todo = np.arange(B)
    r = int(np.max(level)) + 1
    per_level = 1 + len(activation.kinks)
    n = max(8, min(n, int((max_nodes ** (1.0 / max(r, 1))) / per_level)))
    first = True
    while todo.size:
        est = (per_level * n) ** r
        if est > max_nodes and not first:
            break
        first = False
        mean_t = None if mean is None else mean[todo]
        fine, absf, nf = _nested(A[todo], level[todo], mean_t, by_slot, activation, kink_slots, n, X,
                                 grade)
        _check_finite(absf, K[todo], mean_t, factors)
        coarse, _, _ = _nested(A[todo], level[todo], mean_t, by_slot, activation, kink_slots,
                               max(2, int(round(n / _COARSE))), X, grade)
        e = _extrapolated_error(fine, coarse, absf)
        value[todo], err[todo], nodes[todo], absval[todo] = fine, e, nf, absf
        ok = _accept(fine, e, absf, rtol)
        todo = todo[~ok]
        if est > max_nodes:
            break
        n = int(math.ceil(n * _REFINE))
    return value, err, nodes, absval


# ---------------------------------------------------------------------- driver
@public
def quadrature_expectation(factors: Sequence[tuple], K: np.ndarray, activation: Any, *,
                           mean: np.ndarray | None = None, rtol: float = 1e-10,
                           max_nodes: int = DEFAULT_MAX_NODES, return_info: bool = False) -> Any:
    """Gaussian expectation of a product of REGULAR factors by deterministic quadrature.

    Parameters
    ----------
    factors : sequence of ``(slot, kind, order)`` tuples
        Validated factors (slots exactly ``0..k-1``, ``k <= 4``).
    K : ndarray, shape (..., k, k)
        Validated PSD covariances.
    activation : Activation or None
        Needed if any factor has kind ``'sigma'``.
    mean : ndarray, shape (..., k), optional
        Mean of z (default 0).
    rtol : float
        Target relative accuracy.
    max_nodes : int
        Cap on tensor-product nodes per kernel.
    return_info : bool
        Also return ``(error_estimate, nodes_used)``.

    Returns
    -------
    value : ndarray, shape (...)
    err, nodes : ndarray, shape (...)
        Only with ``return_info=True``.

    Raises
    ------
    ConvergenceError
        rtol not met within ``max_nodes`` (message gives the achieved estimate).

    Warns
    -----
    AccuracyWarning
        The error estimate exceeds rtol by at most a factor 100.

    Notes
    -----
    The smooth kernel evaluates ``E f(z) = E f(mu + V Lambda^{1/2} x)``; the
    trapezoidal step ``h = 2 pi / W`` uses the bandwidth ``W ~ 1.25 (L + 3) s / a``
    for an activation analytic in ``|Im z| < a`` (``s`` = scale of the
    direction, ``L = ln(10/rtol)``), or ``W ~ sqrt(2L(1 + 2 m s^2))`` for entire
    activations with ``m`` sigma factors; the error estimate is the difference
    with a rule of step ``1.3 h``.

    Examples
    --------
    >>> import numpy as np
    >>> from effth.activations import get_activation
    >>> v = quadrature_expectation([(0, 'sigma', 0), (0, 'sigma', 0)], np.array([[1.0]]),
    ...                            get_activation('sin'))
    >>> bool(abs(float(v) - (1 - np.exp(-2.0)) / 2) < 1e-12)
    True
    """
    K = np.asarray(K, dtype=np.float64)
    batch = K.shape[:-2]
    k = K.shape[-1]
    Kf = K.reshape((-1, k, k))
    mf = None if mean is None else np.asarray(mean, dtype=np.float64).reshape((-1, k))
    if k > 4:
        raise ConvergenceError(f"quadrature supports at most 4 distinct slots, got {k}; "
                               "use method='mc' or a closed form")
    kinked = activation is not None and bool(activation.kinks) and any(kd == "sigma" for _, kd, _ in factors)
    with np.errstate(over="ignore", under="ignore"):
        if kinked:
            val, err, nodes, absval = _kinked(factors, Kf, mf, activation, rtol, max_nodes)
        else:
            val, err, nodes, absval = _smooth(factors, Kf, mf, activation, rtol, max_nodes)
    ok = _accept(val, err, absval, rtol)
    if not np.all(ok):
        rel = np.where(ok, 0.0, err / np.maximum(np.maximum(np.abs(val), 1e-3 * absval), 1e-300))
        worst = int(np.argmax(np.where(np.isfinite(rel), rel, np.inf)))
        if np.isfinite(rel[worst]):
            msg = (f"worst batch entry {worst}: estimate {float(val[worst]):.16g}, relative error "
                   f"~{float(rel[worst]):.2g} with {int(nodes[worst])} nodes")
        else:
            msg = f"batch entry {worst} needs a rule of {int(nodes[worst])} nodes"

        if not np.all(np.isfinite(rel)) or np.max(rel) > 100 * rtol:
            raise ConvergenceError(
                f"quadrature did not reach rtol={rtol:g} within max_nodes={max_nodes} per kernel ({msg}); "
                "loosen rtol, raise max_nodes, or use method='mpmath' (slow, exact) or 'mc'")
        warnings.warn(f"quadrature error estimate exceeds rtol={rtol:g} ({msg})", AccuracyWarning,
                      stacklevel=3)
    out = val.reshape(batch)
    if return_info:
        return out, err.reshape(batch), nodes.reshape(batch)
    return out
