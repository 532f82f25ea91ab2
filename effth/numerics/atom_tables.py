r"""Gaussian expectations of products of activation derivatives over a dataset, on shared nodes.

The NTK-hierarchy recursions (PDLT ch. 8, 11, ∞) need atoms
:math:`\langle\prod_k\sigma^{(p_k)}(z_{\delta_k})\rangle_K` with up to four factors, arbitrary
derivative orders and repeated samples, for *every* assignment of the samples :math:`\delta_k` to
the :math:`N` inputs.  An entry is a product :math:`\prod_{v=1}^k F_v(z_{s_v})` over its
:math:`k` distinct samples, each :math:`F_v` a product of derivatives :math:`\sigma^{(p)}`; a
table over label assignments is symmetric under permutations of the labels with the same factor
pattern, so :class:`AtomTables` evaluates every subset :math:`\{s_1<\dots<s_k\}` of samples once,
for all the factor assignments ("combos") the requested tables need on it, and gathers the tables
from those values.

Each subset is integrated as the initialization tables are
(:func:`effth.numerics.sample_tables.four_point_table`): the variable with the largest conditional
variance :math:`s^2` is written :math:`z_k=\mu(x)+s\,y` and integrated out through the smoothed
functions :math:`S_F(m;s)=\mathbb E_y[F(m+sy)]`; the outer :math:`(k-1)`-dimensional Gaussian is
rotated so that :math:`\mu` depends on its first coordinate only and :math:`z_1` on the first two.
A four-sample atom costs a 3-D grid (instead of a 4-D one), and on that grid the activation
derivatives are evaluated once for all combos (tanh and GELU: one transcendental evaluation for
all orders): the innermost sum :math:`T_{fg}(x_1,x_2)=\sum_{x_3}w_3F_f(z_2)F_g(z_3)` is taken once
per pair of factor functions, the next one once per triple (for tanh, these sums and the
smoothed line run in compiled kernels, :mod:`effth.numerics._tanh_fused`: the same nodes,
weights and error estimate at about 4 ns per node instead of 50).  The geometry is computed
backward-stably (:func:`effth.numerics.sample_tables._split`: nearly collinear inputs keep all their digits).  The subsets of
one size are batched in vectorized NumPy: sorted into buckets of similar node counts per
direction (as the four-point table's, :func:`effth.numerics.sample_tables._buckets`), each
bucket with the rules of its largest scales (so an entry does not depend on the chunking or the
thread count), cut into chunks of bounded memory (:data:`_ELEMS` grid elements) that run on
:func:`effth._threads.thread_map`'s threads; for odd or even :math:`\sigma` and integrands even
under :math:`z\to-z` only half of the :math:`x_1` line is used.

Rules: truncated trapezoids in standard-normal coordinates with the step from the activation's
strip of analyticity (:func:`effth.numerics.sample_tables._step`), an error estimate from the
same nodes at step :math:`2h` (:func:`effth.numerics.sample_tables._finish`) relative to
:math:`\langle|\prod_k\sigma^{(p_k)}|\rangle`, and refinement of the subsets whose estimate
exceeds ``rtol``; polynomial activations use exact Gauss–Hermite rules.  Activations whose atoms
have fast closed forms (:func:`effth.numerics.closed_forms.fast_closed_form`: erf, sin/cos,
polynomials) skip the quadrature: each combo is one batched closed-form call over all subsets of
a size (erf's four-Heaviside atoms through the quadrivariate orthant probability).  Singular sub-kernels
(duplicated or collinear inputs, a zero input) are exact limits: a direction of zero variance gets
one node.  Kinked activations are not handled (their derivatives are distributions): callers must
reject them or override :meth:`AtomTables._group` (subsets of up to four samples) and
:meth:`AtomTables._evaluate` (more).

``method="grid"`` keeps the reference evaluator: one tensor-product grid per subset of samples,
one memoized integral per distinct integrand, limited to :data:`_MAX_NODES` nodes per subset.
"""

from __future__ import annotations

from effth._signature import public

import itertools
import math
import warnings
from collections.abc import Iterable
from functools import cache, lru_cache
from typing import Any

import numpy as np

from .._threads import thread_map
from ..activations import get_activation
from ..errors import AccuracyWarning, DomainError
from ._rules import gauss_hermite, truncation
from ._tanh_fused import applies as fused_applies
from ._tanh_fused import fused_smoothed, fused_sums
from ._tanh_fused import in_range as fused_in_range
from .sample_blocks import SampleRestriction
from .sample_tables import (
    _buckets,
    _check_grid,
    _coarse,
    _finish,
    _fold,
    _growth,
    _order,
    _rule,
    _rules_for,
    _split,
    _step,
    parity,
    real_kernel,
)

__all__ = ["AtomTables"]

_MAX_NODES = 1 << 21     # per subset grid (method="grid")
_MAX_REFINE = 3
_ELEMS = 1 << 19         # grid elements (subsets x nodes) of one chunk: bounds the memory (chunks run on two
                         # threads: 2^16 and 2^18 were 1.45x and 1.07x slower, 2^20 1.2x)
_BLOCK = 1 << 18         # table entries decomposed at once
_SUBSETS = 1 << 14       # subsets whose geometry is computed at once
_LAYOUT = 1 << 23        # table entries whose gather layout is kept (two int64 per entry)


# ------------------------------------------------------------------ activation derivatives
@cache
def _tanh_coeffs(order: int) -> np.ndarray:
    """sigma^(order) of tanh as a polynomial in t = tanh z (t' = 1 - t^2), highest power first."""
    P = np.polynomial.polynomial
    c = np.array([0.0, 1.0])
    for _ in range(order):
        c = P.polymul(P.polyder(c), np.array([1.0, 0.0, -1.0]))
    return c[::-1].copy()


def _derivatives(act: Any, orders: Iterable[int], z: np.ndarray, out: dict | None = None) -> dict:
    r"""``{p: sigma^(p)(z)}`` for the given orders, sharing the transcendental evaluation where the
    family allows it (tanh: :math:`t=\tanh z`, :math:`\sigma'=1-t^2`, :math:`\sigma''=-2t\sigma'`,
    :math:`\sigma^{(3)}=(6t^2-2)\sigma'`, higher orders as polynomials in :math:`t`; GELU:
    :math:`z\Phi^{(p)}+p\Phi^{(p-1)}` with :math:`\Phi^{(p)}=(-1)^{p-1}He_{p-1}\varphi`); otherwise
    one call of :meth:`~effth.activations.Activation.numpy` per order.  ``out`` maps orders to
    arrays to write into (the others are allocated)."""
    orders = sorted(set(orders))
    dst = {p: (out or {}).get(p) for p in orders}
    res: dict = {}

    def put(p: int, v: np.ndarray) -> None:
        if dst[p] is not None:
            dst[p][...] = v
            v = dst[p]
        res[p] = v

    fam = getattr(act, "family", None)
    if fam == "tanh" and len(orders) > 1:
        t = np.tanh(z, out=dst[0]) if 0 in orders else np.tanh(z)
        res[0] = t
        u = t * t
        d1 = np.subtract(1.0, u, out=dst.get(1))
        res[1] = d1
        if 2 in orders:
            d2 = np.multiply(t, d1, out=dst[2])
            d2 *= -2.0
            res[2] = d2
        if 3 in orders:
            u *= 6.0
            u -= 2.0
            res[3] = np.multiply(u, d1, out=dst[3])
        for p in orders:
            if p > 3:
                c = _tanh_coeffs(p)
                v = np.full_like(t, c[0])
                for ci in c[1:]:
                    v *= t
                    v += ci
                put(p, v)
        return {p: res[p] for p in orders}
    if fam == "gelu" and len(orders) > 1:
        from scipy.special import ndtr

        with np.errstate(under="ignore"):
            phi = np.exp(-0.5 * z * z)
        phi *= 1.0 / math.sqrt(2.0 * math.pi)
        phi[np.abs(z) > 80.0] = 0.0
        Phi = ndtr(z) if (0 in orders or 1 in orders) else None
        u = z * z if any(p in (2, 3) for p in orders) else None
        for p in orders:
            if p == 0:
                res[p] = np.multiply(z, Phi, out=dst[p])
            elif p == 1:
                v = np.multiply(z, phi, out=dst[p])
                v += Phi
                res[p] = v
            elif p == 2:                      # (2 - z^2) phi
                v = np.subtract(2.0, u, out=dst[p])
                v *= phi
                res[p] = v
            elif p == 3:                      # (z^3 - 4 z) phi
                v = np.subtract(u, 4.0, out=dst[p])
                v *= z
                v *= phi
                res[p] = v
            else:   # z Phi^(p) + p Phi^(p-1), Phi^(n) = (-1)^(n-1) He_{n-1} phi
                he = [np.ones_like(z), z]
                for n in range(2, p):
                    he.append(z * he[n - 1] - (n - 1) * he[n - 2])
                v = z * he[p - 1]
                v -= p * he[p - 2]
                v *= phi
                if p % 2 == 0:
                    np.negative(v, out=v)
                put(p, v)
        return {p: res[p] for p in orders}
    for p in orders:
        put(p, act.numpy(p)(z))
    return res


def _functions(act: Any, fns: list, z: np.ndarray, axis: int,
               weight: np.ndarray | None = None) -> np.ndarray:
    """The factor functions ``F_f(z) = prod_{p in f} sigma^(p)(z)`` stacked along ``axis`` (times
    ``weight``, broadcast against ``z``, if given)."""
    res = np.empty(z.shape[:axis] + (len(fns),) + z.shape[axis:])
    slot = [res[(slice(None),) * axis + (i,)] for i in range(len(fns))]
    direct = {} if weight is not None else {f[0]: slot[i] for i, f in enumerate(fns) if len(f) == 1}
    D = _derivatives(act, {p for f in fns for p in f}, z, out=direct)
    for i, f in enumerate(fns):
        if len(f) == 1 and weight is None:
            continue                                  # written in place
        v = D[f[0]]
        for p in f[1:]:
            v = v * D[p]
        if weight is None:
            slot[i][...] = v
        else:
            np.multiply(v, weight, out=slot[i])
    return res


# ------------------------------------------------------------------ table bookkeeping
@lru_cache(maxsize=64)
def _binomials(N: int, kmax: int) -> np.ndarray:
    """C(n, j) for n < N + 1, j <= kmax (combinatorial number system of the subsets)."""
    out = np.zeros((N + 1, kmax + 1), dtype=np.int64)
    for n in range(N + 1):
        for j in range(kmax + 1):
            out[n, j] = math.comb(n, j)
    return out


def _subset_ids(D: np.ndarray, N: int) -> np.ndarray:
    """Colex rank sum_v C(s_v, v + 1) of sorted subsets ``D`` (B, k)."""
    k = D.shape[1]
    C = _binomials(N, max(k, 1))
    return sum(C[D[:, v], v + 1] for v in range(k)) if k else np.zeros(len(D), dtype=np.int64)


def _close(combos: Iterable[tuple]) -> list:
    """The combos and all their permutations (a full table needs every ordering), sorted."""
    out = set()
    for c in combos:
        out.update(itertools.permutations(c))
    return sorted(out)


def _nfac(combos: Iterable[tuple], act: Any) -> int:
    """Pole order (strip-analytic sigma: factors plus derivatives) or number of factors."""
    strip = math.isfinite(act.strip)
    return max(sum(len(f) + (sum(f) if strip else 0) for f in c) for c in combos)


class _Store:
    """Values of every (subset of k samples, combo) computed so far: dense columns over the
    C(N, k) subsets (NaN: not computed)."""

    def __init__(self, nsub: int) -> None:
        self.nsub = nsub
        self.col: dict = {}
        self.vals: list = []

    def column(self, combo: tuple) -> int:
        if combo not in self.col:
            self.col[combo] = len(self.vals)
            self.vals.append(np.full(self.nsub, np.nan))
        return self.col[combo]


# ------------------------------------------------------------------ the shared-node evaluator
def _combo_factors(combo: tuple) -> list:
    """``gaussian_expectation`` factors of a combo (per-sample tuples of derivative orders)."""
    return [(pos, "sigma", o) for pos, orders in enumerate(combo) for o in orders]


def dispatched_group(K: np.ndarray, S: np.ndarray, combos: list, act: Any, rtol: float,
                     closed_only: bool = True) -> tuple | None:
    """:func:`_atoms_group` by :func:`effth.gaussian_expectation`, one batched call per combo
    over all subsets (closed forms: zero error estimate).  With ``closed_only``, None when some
    combo has no closed form that is faster than quadrature
    (:func:`~effth.numerics.closed_forms.fast_closed_form`)."""
    from ._closed._orthant import shared_terms
    from .closed_forms import fast_closed_form

    facs = [_combo_factors(cb) for cb in combos]
    if closed_only and not all(fast_closed_form(act, f) for f in facs if f):
        return None
    Kb = K[S[:, :, None], S[:, None, :]]
    v = np.empty((len(S), len(combos)))
    with shared_terms():             # the combos share absorbed kernels and orthant moments
        _dispatched_combos(Kb, facs, act, rtol, closed_only, v)
    return v, np.zeros_like(v), np.abs(v)


def _dispatched_combos(Kb: np.ndarray, facs: list, act: Any, rtol: float, closed_only: bool,
                       v: np.ndarray) -> None:
    from .dispatch import _try_closed, gaussian_expectation

    for c, f in enumerate(facs):
        if not f:
            v[:, c] = 1.0
            continue
        # smooth sigma: no point masses; the sub-kernels of a checked kernel need no new check
        val = _try_closed(act, f, Kb) if closed_only and act.is_smooth else None
        v[:, c] = gaussian_expectation(f, Kb, act, rtol=rtol) if val is None else val


def _atoms_group(K: np.ndarray, S: np.ndarray, combos: list, act: Any, rtol: float,
                 mult: float) -> tuple:
    r"""(value, error, E|f|), each (B, len(combos)): :math:`\mathbb E[\prod_v F_{c_v}(z_{S_v})]`
    for the subsets ``S`` (B, k) of distinct samples and the permutation-closed ``combos``."""
    B, k = S.shape
    Kb = K[S[:, :, None], S[:, None, :]]
    w = np.linalg.eigvalsh(Kb)
    bad = w[:, 0] < -1e-9 * np.maximum(1.0, np.abs(w).max(axis=1))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise DomainError(f"kernel restricted to samples {tuple(int(v) for v in S[i])} is not PSD "
                          f"(eigenvalue {w[i, 0]:.3g})")
    nfac = _nfac(combos, act)
    X = truncation(rtol, _growth(act, nfac))
    fold = _even(combos, act)
    nc = len(combos)
    val, err, ab = np.empty((B, nc)), np.empty((B, nc)), np.empty((B, nc))
    if k == 1:
        fns = [c[0] for c in combos]
        sd = np.sqrt(np.clip(Kb[:, 0, 0], 0.0, None))
        for sl, top, rules in _chunks([sd], act, rtol, nfac, mult, X):
            x, wf, wc = rules[0]
            if fold:
                x, wf, wc = _fold(x, wf)
            F = _functions(act, fns, sd[sl, None] * x, axis=1)          # (b, nc, n)
            val[sl], err[sl], ab[sl] = _finish(F @ wf, F @ wc, np.abs(F) @ wf,
                                               _order(top, act, rtol, nfac))
        return val, err, ab
    order, A, c, s = _split(Kb)
    r = k - 1
    scales = [np.maximum(np.abs(A[:, :, 0]).max(axis=1), np.abs(c))] + \
        [np.abs(A[:, :, j]).max(axis=1) for j in range(1, r)] + [s]
    # rotated combo of sorted combo C[i] for each subset: C[i][order] (one map per choice of order)
    cidx = {cb: i for i, cb in enumerate(combos)}
    code = order @ (k ** np.arange(k))
    _, first, inv = np.unique(code, return_index=True, return_inverse=True)
    maps = np.array([[cidx[tuple(cb[j] for j in order[i])] for cb in combos] for i in first])
    pm = maps[inv.ravel()]

    def chunk(item: tuple) -> tuple:
        sl, top, rules = item
        rules, yrule = list(rules[:-1]), rules[-1]
        if fold:              # f(-x) = f(x) for every combo: half of the x_1 line
            rules[0] = _fold(*rules[0][:2])
        _check_grid([len(rule[0]) for rule in rules], max(top), "atom tables")
        _check_grid([len(rules[0][0]), len(yrule[0])], max(top), "atom tables")
        # the x_1 line in blocks (of even length: the step-2h nodes keep their parity), so that
        # no temporary exceeds about _ELEMS elements (large ones cost page faults per chunk)
        x1, w1, c1 = rules[0]
        inner = len(sl) * math.prod(len(rule[0]) for rule in rules[1:]) * (1 if k > 2 else len(yrule[0]))
        whole = fused and fused_in_range(A[sl], [rule[0] for rule in rules])   # no grid temporaries
        nb = len(x1) if whole else max(2, (_ELEMS // max(inner, 1)) // 2 * 2)
        v = e = a = 0.0
        for i0 in range(0, len(x1), nb):
            blk = slice(i0, i0 + nb)
            part = _rotated(act, A[sl], c[sl], s[sl], combos, [(x1[blk], w1[blk], c1[blk])] + rules[1:],
                            yrule)
            v, e, a = v + part[0], e + part[1], a + part[2]
        return _finish(v, e, a, _order(top, act, rtol, nfac))

    # the compiled kernels keep no grid temporaries: their chunks are bounded by the smoothed
    # line only, and bucketed by the outer directions' node counts only
    fused = fused_applies(act, _function_indices(tuple(combos))[0], k - 1)
    items = list(_chunks(scales, act, rtol, nfac, mult, X, fused))
    for (sl, _, _), (v, e, a) in zip(items, thread_map(chunk, items)):
        rows = np.arange(len(sl))[:, None]
        val[sl], err[sl], ab[sl] = v[rows, pm[sl]], e[rows, pm[sl]], a[rows, pm[sl]]
    return val, err, ab


def _even(combos: list, act: Any) -> bool:
    """Whether every integrand is even under z -> -z (sigma odd or even; not for polynomials,
    whose Gauss-Hermite rules are exact and small anyway)."""
    if act.is_polynomial:
        return False
    par = parity(act)
    if par == 0:
        return False
    odd = 1 if par == -1 else 0           # sigma^(p) has parity (-1)^(p + odd)
    return all(sum(p + odd for f in cb for p in f) % 2 == 0 for cb in combos)


def _chunks(scales: list, act: Any, rtol: float, nfac: int, mult: float, X: float,
            fused: bool = False):
    """Yield (index array, per-direction max scale, per-direction rules) for chunks of subsets
    of bounded grid size: the subsets sorted into buckets of similar node counts per direction
    (:func:`effth.numerics.sample_tables._buckets`, the four-point table's mechanism), each bucket
    with the rules (:func:`effth.numerics.sample_tables._rules_for`) of its largest scales, cut
    into chunks of about :data:`_ELEMS` grid elements (outer grid, or the smoothed line's
    ``n1 * ny`` nodes where larger).  ``fused`` (the compiled three- and four-sample kernels,
    whose memory does not grow with the outer grid): buckets by the outer directions only (the
    smoothed line takes its bucket's largest scale; it costs O(n1 ny) per subset) and chunks of
    about :data:`_ELEMS` smoothed-line elements."""
    S = np.stack(scales, axis=1)                        # (B, d): outer directions, then y
    d = S.shape[1]
    for members in _buckets(S[:, :-1] if fused else S, act, rtol, nfac, mult, X):
        top = [float(v) for v in S[members].max(axis=0)]
        rules = [_rules_for(v, act, rtol, nfac, mult, X) for v in top]
        cnt = [len(r[0]) for r in rules]
        if fused:
            size = cnt[0] * cnt[-1]
        else:
            size = cnt[0] if d == 1 else max(math.prod(cnt[:d - 1]), cnt[0] * cnt[-1])
        step = max(1, _ELEMS // size)
        members = np.sort(members)
        for i in range(0, len(members), step):      # the bucket's rules: values do not depend
            yield members[i:i + step], top, rules      # on the chunking


def _sub(w: np.ndarray, c: np.ndarray) -> tuple:
    """(slice, factor): the step-2h rule's nodes and its weights' ratio to the fine ones -- every
    other node with twice the weight for a trapezoid rule, all nodes with the same weight for an
    exact (Gauss-Hermite) or one-node rule."""
    if c.shape == w.shape and np.array_equal(c, w):
        return slice(None), 1.0
    nz = np.flatnonzero(c)                  # every other node (from 1 on a folded odd-centred line)
    return (slice(int(nz[0]), None, 2) if len(nz) else slice(0, 0)), 2.0


if hasattr(np, "vecdot"):
    def _dot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Sum over the last axis of a * b (no temporary)."""
        return np.vecdot(a, b)
else:                                              # NumPy < 2
    def _dot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Sum over the last axis of a * b (no temporary)."""
        return np.einsum("...k,...k->...", a, b)


@lru_cache(maxsize=256)
def _function_indices(combos: tuple) -> tuple:
    """(sorted factor functions, each combo as indices into them): computed once per combo set."""
    fns = sorted({f for cb in combos for f in cb})
    fi = {f: i for i, f in enumerate(fns)}
    return fns, [tuple(fi[f] for f in cb) for cb in combos]


def _rotated(act: Any, A: np.ndarray, c: np.ndarray, s: np.ndarray, combos: list, rules: list,
             yrule: tuple) -> tuple:
    """(fine, coarse, E|f|) of combos in the rotated variable order (outer variables, then the
    smoothed one), each (B, len(combos)); E|f| from the step-2h nodes.

    Every factor function is evaluated once per node (one contiguous array each); the sums over
    the inner outer coordinates are taken per pair (r = 2) or per pair and then per triple
    (r = 3) of factor functions that the combos contain."""
    r = len(rules)
    fns, ci = _function_indices(tuple(combos))
    x1, w1, c1 = rules[0]
    y, wy, wyc = yrule
    e1, g1 = _sub(w1, c1)
    # the smoothed functions S_F(c x_1; s) = E_y[F(c x_1 + s y)], for the last slot's functions
    last = sorted({cb[-1] for cb in ci})
    fused = _fused(act, A, rules, fns, ci, e1) if r > 1 else None
    line = fused_smoothed(act, c, s, x1, yrule, [fns[i] for i in last], e1) if fused else None
    if line is not None:
        Sm, Sc, Sa = line[0], line[1][:, :, e1], line[2][:, :, e1]
    else:
        Fy = _functions(act, [fns[i] for i in last], c[:, None, None] * x1[:, None] + s[:, None, None] * y,
                        axis=0)                                   # (nl, B, n1, ny)
        Sm, Sc = Fy @ wy, (Fy @ wyc)[:, :, e1]                    # (nl, B, n1), (nl, B, n1e)
        Sa = (np.abs(Fy[:, :, e1]) @ wy)                          # E_y|F|: the scale E|f|
        del Fy
    lpos = {f: i for i, f in enumerate(last)}
    if fused is not None:
        U, Uc, Ua, upos = fused
    elif r == 1:
        F0 = _functions(act, fns, A[:, 0, 0, None] * x1, axis=0)          # (nf, B, n1)
        U, Uc = F0, F0[:, :, e1]
        Ua = np.abs(Uc)
        upos = {(f,): f for f in range(len(fns))}
    else:
        x2, w2, c2 = rules[1]
        e2, g2 = _sub(w2, c2)
        z0 = A[:, 0, 0, None, None] * x1[:, None] + A[:, 0, 1, None, None] * x2   # (B, n1, n2)
        F0 = _functions(act, fns, z0, axis=0)                                     # (nf, B, n1, n2)
        F0 *= w2
        F0e = F0[:, :, e1, e2]
        A0e = np.abs(F0e)
        if r == 2:
            z1 = A[:, 1, 0, None, None] * x1[:, None] + A[:, 1, 1, None, None] * x2
            F1 = _functions(act, fns, z1, axis=0)
            F1e = F1[:, :, e1, e2]
            pairs = sorted({cb[:2] for cb in ci})
            p0, p1 = (list(v) for v in zip(*pairs))
            U = np.einsum("pbij,pbij->pbi", F0[p0], F1[p1])
            Uc = g2 * np.einsum("pbij,pbij->pbi", F0e[p0], F1e[p1])
            Ua = g2 * np.einsum("pbij,pbij->pbi", A0e[p0], np.abs(F1e[p1]))
            upos = {pq: i for i, pq in enumerate(pairs)}
        else:
            x3, w3, c3 = rules[2]
            e3, g3 = _sub(w3, c3)
            base = A[:, 1:, 0, None, None] * x1[:, None] + A[:, 1:, 1, None, None] * x2  # (B, 2, n1, n2)
            F1 = _functions(act, fns, base[:, 0, ..., None] + A[:, 1, 2, None, None, None] * x3,
                            axis=0)                                # (nf, B, n1, n2, n3)
            F2 = _functions(act, fns, base[:, 1, ..., None] + A[:, 2, 2, None, None, None] * x3,
                            axis=0)
            del base
            F2 *= w3
            F1e, F2e = F1[:, :, e1, e2][..., e3], F2[:, :, e1, e2][..., e3]
            A1e, A2e = np.abs(F1e), np.abs(F2e)
            # T_fg(x1, x2) = sum_x3 w3 F_f(z_1) F_g(z_2) for the pairs the combos contain
            pairs = sorted({cb[1:3] for cb in ci})
            T = np.empty((3, len(pairs)) + F0.shape[1:])
            Tc, Ta = T[1][..., e1, e2], T[2][..., e1, e2]
            for i, (f1, f2) in enumerate(pairs):
                T[0, i] = _dot(F1[f1], F2[f2])
                Tc[i] = _dot(F1e[f1], F2e[f2])
                Ta[i] = _dot(A1e[f1], A2e[f2])
            del F1, F2, F1e, F2e, A1e, A2e
            # U_(f0, f1, f2)(x1) = sum_x2 w2 F_f0(z_0) T_f1f2, every triple at once
            ppos = {pq: i for i, pq in enumerate(pairs)}
            trip = sorted({cb[:3] for cb in ci})
            t0 = [t[0] for t in trip]
            tp = [ppos[t[1:]] for t in trip]
            U = np.einsum("tbij,tbij->tbi", F0[t0], T[0][tp])
            Uc = (g2 * g3) * np.einsum("tbij,tbij->tbi", F0e[t0], Tc[tp])
            Ua = (g2 * g3) * np.einsum("tbij,tbij->tbi", A0e[t0], Ta[tp])
            upos = {t: i for i, t in enumerate(trip)}
    # the combos: sum_x1 w1 U_(outer functions) S_(last function)
    cu = [upos[cb[:-1]] for cb in ci]
    cl = [lpos[cb[-1]] for cb in ci]
    ce1 = g1 * w1[e1]
    fine = np.einsum("cbi,cbi,i->bc", U[cu], Sm[cl], w1)
    coarse = np.einsum("cbi,cbi,i->bc", Uc[cu], Sc[cl], ce1)
    absval = np.einsum("cbi,cbi,i->bc", Ua[cu], Sa[cl], ce1)
    return fine, coarse, absval


def _fused(act: Any, A: np.ndarray, rules: list, fns: list, ci: list, e1: Any) -> tuple | None:
    """(U, Uc, Ua, upos) of :func:`_rotated` for r = 2 or 3 by the compiled kernels
    (:mod:`effth.numerics._tanh_fused`), or None where they do not apply."""
    r = len(rules)
    subs, g = [e1], 1.0
    for rule in rules[1:]:
        e, f = _sub(rule[1], rule[2])
        subs.append(e)
        g *= f
    tuples = sorted({cb[:r] for cb in ci})
    out = fused_sums(act, A, rules, fns, tuples, tuple(subs))
    if out is None:
        return None
    U, Uc, Ua = out
    return U, g * Uc[:, :, e1], g * Ua[:, :, e1], {t: i for i, t in enumerate(tuples)}


# ------------------------------------------------------------------ the tables
@public
class AtomTables:
    r"""Memoized Gaussian expectations of activation-derivative products over one kernel matrix.

    Parameters
    ----------
    K : ndarray (N, N)
        PSD kernel over the dataset.
    activation : str or Activation
        Smooth (or polynomial) activation.
    rtol : float
        Target relative accuracy (relative to :math:`\langle|\prod_k\sigma^{(p_k)}|\rangle`, the
        scale of the integrand's absolute value).
    method : {"shared", "grid"}
        ``"shared"`` (default): all subsets of samples batched on shared rotated nodes, one
        variable integrated out (see the module docstring); ``"grid"``: the reference path, one
        tensor-product grid per subset (at most :data:`_MAX_NODES` nodes: four distinct samples
        of unit-scale inputs exceed it).
    restrict : SampleRestriction, optional
        Evaluate only the subsets of samples with at most ``restrict.max_test`` test samples;
        table entries on other subsets are NaN (:mod:`effth.numerics.sample_blocks`).

    Examples
    --------
    >>> import numpy as np
    >>> t = AtomTables(np.array([[1.0, 0.3], [0.3, 0.8]]), "tanh", rtol=1e-10)
    >>> v = t.table(((0, 1), (1, 1)))        # <sigma'_a sigma'_b> for all a, b
    >>> v.shape
    (2, 2)
    """

    #: Subclasses that evaluate integrands another way (e.g. closed forms for kinked sigma) set False.
    smooth_only = True

    def __init__(self, K: Any, activation: Any, rtol: float = 1e-8, *, method: str = "shared",
                 restrict: SampleRestriction | None = None) -> None:
        K = real_kernel(K)
        self.K = K
        self.N = K.shape[0]
        self.act = get_activation(activation)
        if self.smooth_only and not (self.act.is_smooth or self.act.is_polynomial):
            raise DomainError(f"{self.act!r} is kinked: its higher derivatives are distributions; "
                              "atom tables need a smooth activation")
        if method not in ("shared", "grid"):
            raise DomainError(f"method must be 'shared' or 'grid', got {method!r}")
        self.rtol = float(rtol)
        self.method = method
        if restrict is not None:
            if method != "shared":
                raise DomainError("restrict= needs method='shared'")
            restrict.check(self.N)
        self.restrict = restrict
        self._keyed = method == "grid"
        self._cache: dict = {}
        self._tables: dict = {}
        self._fns: dict = {}
        self._store: dict = {}
        self.max_error = 0.0

    # ------------------------------------------------------------------ reference evaluation
    def _f(self, order: int):
        if order not in self._fns:
            self._fns[order] = self.act.numpy(order)
        return self._fns[order]

    def _grid(self, S: tuple, nfac: int, mult: float):
        KS = self.K[np.ix_(S, S)]
        w_, V = np.linalg.eigh(KS)
        if w_.min() < -1e-9 * max(1.0, abs(w_).max()):
            raise DomainError(f"kernel restricted to samples {S} is not PSD (eigenvalue {w_.min():.3g})")
        w_ = np.clip(w_, 0.0, None)
        keep = w_ > 1e-14 * max(w_.max(), 1e-300)
        L = V[:, keep] * np.sqrt(w_[keep])          # z = L x, x standard normal
        scales = np.sqrt(w_[keep])
        act = self.act
        if act.is_polynomial:
            x, w = gauss_hermite(act.polynomial_degree * nfac // 2 + 1)
            rules = [(x, w, w)] * L.shape[1]
        else:
            X = truncation(self.rtol, _growth(act, nfac))
            rules = []
            for sc in scales:
                x, w = _rule(_step(float(sc), act, self.rtol, nfac) / mult, X)
                rules.append((x, w, _coarse(w)))
        if not rules:                                # all-zero sub-kernel: a point mass at z = 0
            return np.zeros((len(S), 1)), np.ones(1), np.ones(1)
        size = math.prod(len(r[0]) for r in rules)
        if size > _MAX_NODES:
            raise DomainError(f"{len(S)}-D expectation needs {size} nodes (> {_MAX_NODES}) on one "
                              "tensor-product grid (method='grid', or more than four distinct "
                              "samples in one atom); method='shared' integrates one variable out "
                              "of atoms with up to four distinct samples, without this limit")
        xs = np.meshgrid(*[r[0] for r in rules], indexing="ij")
        W = np.ones(())
        Wc = np.ones(())
        for r in rules:
            W = np.multiply.outer(W, r[1])
            Wc = np.multiply.outer(Wc, r[2])
        Z = L @ np.stack([x.ravel() for x in xs])    # (|S|, nodes)
        return Z, W.ravel(), Wc.ravel()

    def _evaluate(self, S: tuple, keys: list) -> None:
        """Fill the cache for integrand keys living on the subset ``S`` of samples (the
        per-subset tensor-grid path, ``method="grid"``)."""
        # pole order for strip-analytic sigma (derivatives raise it); growth factors for entire sigma
        nfac = max(len(k) + (sum(o for _, o in k) if math.isfinite(self.act.strip) else 0) for k in keys)
        pending = list(keys)
        mult = 1.0
        for attempt in range(_MAX_REFINE + 1):
            Z, W, Wc = self._grid(S, nfac, mult)
            pos = {s: i for i, s in enumerate(S)}
            vals: dict = {}
            fails = []
            for key in pending:
                prod = np.ones(Z.shape[1])
                for s, o in key:
                    fk = (s, o)
                    if fk not in vals:
                        vals[fk] = self._f(o)(Z[pos[s]])
                    prod = prod * vals[fk]
                fine = float(W @ prod)
                coarse = float(Wc @ prod)
                scale = float(W @ np.abs(prod))
                err = abs(fine - coarse) ** 2 / max(scale, 1e-300) if not self.act.is_polynomial else 0.0
                if err > self.rtol * max(scale, 1e-300) and attempt < _MAX_REFINE:
                    fails.append(key)
                else:
                    self.max_error = max(self.max_error, err / max(scale, 1e-300))
                self._cache[key] = fine
            if not fails:
                return
            pending = fails
            mult *= 2.0
        warnings.warn(f"atom tables: relative error estimate {self.max_error:.2g} above rtol "
                      f"{self.rtol:.2g} on samples {S}", AccuracyWarning, stacklevel=3)

    # ------------------------------------------------------------------ shared evaluation
    def _compute(self, k: int, ids: np.ndarray, samples: np.ndarray, combos: list) -> None:
        """Fill the store of k-sample subsets for the subsets ``ids`` (their samples (B, k)) and
        the permutation-closed ``combos``, refining subsets whose error estimate exceeds rtol."""
        store = self._store.setdefault(k, _Store(math.comb(self.N, k)))
        cols = [store.column(cb) for cb in combos]
        have = np.all([~np.isnan(store.vals[j][ids]) for j in cols], axis=0)
        todo = np.flatnonzero(~have)
        if not len(todo):
            return
        ids, samples = ids[todo], samples[todo]
        if k > 4:        # beyond the recursions' needs: the per-subset tensor grids
            for sid, S in zip(ids, samples.tolist()):
                keys = [tuple(sorted((s, p) for s, f in zip(S, cb) for p in f)) for cb in combos]
                self._evaluate(tuple(S), sorted(set(keys)))
                for col, key in zip(cols, keys):
                    store.vals[col][sid] = self._cache[key]
            return
        mult = 1.0
        worst = 0.0
        for attempt in range(_MAX_REFINE + 1):
            # subsets in blocks: the per-subset geometry (k x k factors) stays O(_SUBSETS)
            parts = [self._group(samples[i:i + _SUBSETS], combos, mult)
                     for i in range(0, len(samples), _SUBSETS)]
            v, e, a = (np.concatenate(x) for x in zip(*parts))
            scale = np.maximum(np.maximum(a, np.abs(v)), 1e-300)
            rel = e / scale
            for j, col in enumerate(cols):
                store.vals[col][ids] = v[:, j]
            bad = np.any(rel > self.rtol, axis=1)
            if not bad.any() or attempt == _MAX_REFINE:
                worst = float(rel.max(initial=0.0))
                self.max_error = max(self.max_error, worst)
                break
            self.max_error = max(self.max_error, float(rel[~bad].max(initial=0.0)))
            ids, samples = ids[bad], samples[bad]
            mult *= 1.5
        if worst > self.rtol:
            warnings.warn(f"atom tables: relative error estimate {worst:.2g} above rtol "
                          f"{self.rtol:.2g} on {len(ids)} subsets of {k} samples (e.g. samples "
                          f"{tuple(int(x) for x in samples[0])}) after {_MAX_REFINE} refinements",
                          AccuracyWarning, stacklevel=3)

    def _group(self, samples: np.ndarray, combos: list, mult: float) -> tuple:
        """Values, error estimates and absolute scales, each (subsets, combos), of the combos on
        the subsets ``samples (B, k)`` of at most four samples: closed forms where every combo
        has a fast one (:mod:`effth.numerics.closed_forms`: erf, sin/cos, polynomials, the
        piecewise-linear family), else the shared-node integrator."""
        from .closed_forms import closed_form_resolves

        diag = np.diagonal(self.K)[samples]
        ok = np.all([closed_form_resolves(self.act, _combo_factors(cb), diag, self.rtol)
                     for cb in combos], axis=0) if combos else np.ones(len(samples), dtype=bool)
        closed = dispatched_group(self.K, samples[ok], combos, self.act, self.rtol) if ok.any() else None
        if closed is None:
            return _atoms_group(self.K, samples, combos, self.act, self.rtol, mult)
        if ok.all():
            return closed
        # kernels too small for the closed forms' absolute accuracy: quadrature there
        quad = _atoms_group(self.K, samples[~ok], combos, self.act, self.rtol, mult)
        out = tuple(np.empty((len(samples), len(combos))) for _ in range(3))
        for o, c, q in zip(out, closed, quad):
            o[ok], o[~ok] = c, q
        return out

    def snapshot(self) -> dict:
        """The values computed so far, compact (only the subsets evaluated): what :meth:`restore`
        takes to spare another table over the same kernel their integrals."""
        stores = {}
        for k, store in self._store.items():
            if not store.vals:
                continue
            done = np.flatnonzero(np.any([~np.isnan(v) for v in store.vals], axis=0))
            stores[k] = (done, dict(store.col), np.stack([v[done] for v in store.vals], axis=1))
        nbytes = sum(d.nbytes + v.nbytes for d, _, v in stores.values())
        return {"K": self.K, "act": self.act, "rtol": self.rtol, "max_error": self.max_error,
                "stores": stores, "nbytes": nbytes}

    def restore(self, snap: dict) -> bool:
        """Take over the subsets another table evaluated (:meth:`snapshot`): they are not
        integrated again.  Only from a table over the same kernel and activation at a target
        accuracy at least as tight; returns whether the values were taken."""
        if (snap["act"] != self.act or snap["rtol"] > self.rtol or snap["K"].shape != self.K.shape
                or not np.array_equal(snap["K"], self.K)):
            return False
        for k, (done, cols, vals) in snap["stores"].items():
            store = self._store.setdefault(k, _Store(math.comb(self.N, k)))
            for combo, j in cols.items():
                store.vals[store.column(combo)][done] = vals[:, j]
        self.max_error = max(self.max_error, snap["max_error"])
        return True

    def _lookup(self, k: int, ids: np.ndarray, combo_col: np.ndarray) -> np.ndarray:
        store = self._store[k]
        out = np.empty(len(ids))
        for col in np.unique(combo_col):
            m = combo_col == col
            out[m] = store.vals[col][ids[m]]
        return out

    # ------------------------------------------------------------------ public surface
    def values(self, keys: Iterable[tuple]) -> np.ndarray:
        r"""Expectations for integrand keys, each a tuple of ``(sample index, derivative order)``."""
        keys = [tuple(sorted(k)) for k in keys]
        if self._keyed:
            missing: dict = {}
            for k in keys:
                if k not in self._cache:
                    S = tuple(sorted({s for s, _ in k}))
                    missing.setdefault(S, set()).add(k)
            for S, ks in missing.items():
                self._evaluate(S, sorted(ks))
            return np.array([self._cache[k] for k in keys])
        # group by number of distinct samples: (subset, combo) of each key
        by_k: dict = {}
        for i, key in enumerate(keys):
            S = tuple(sorted({s for s, _ in key}))
            combo = tuple(tuple(sorted(o for s_, o in key if s_ == s)) for s in S)
            by_k.setdefault(len(S), []).append((i, S, combo))
        out = np.empty(len(keys))
        for k, items in by_k.items():
            idx = np.array([i for i, _, _ in items])
            samples = np.array([S for _, S, _ in items], dtype=np.intp).reshape(len(items), k)
            sid = _subset_ids(samples, self.N)
            combos = _close({cb for _, _, cb in items})
            self._compute(k, sid, samples, combos)
            store = self._store[k]
            out[idx] = [store.vals[store.col[cb]][s] for (_, _, cb), s in zip(items, sid)]
        return out

    def table(self, factors: tuple) -> np.ndarray:
        r"""The atom over all label assignments.

        Parameters
        ----------
        factors : tuple of (label position, order)
            E.g. ``((0, 2), (0, 1), (1, 0))`` is :math:`\langle\sigma''_a\sigma'_a\sigma_b\rangle`;
            the result has one axis per distinct label position, in increasing order.
        """
        return self.tables([factors])[0]

    def tables(self, patterns: Iterable[tuple]) -> list:
        r"""Several atoms over all label assignments (:meth:`table` each), evaluated together: the
        integrals of every subset of samples are shared by all the patterns that need them."""
        patterns = [tuple(f) for f in patterns]
        new = [f for f in dict.fromkeys(patterns) if f not in self._tables]
        if new and self._keyed:
            for f in new:
                self._tables[f] = self._keyed_table(f)
        elif new:
            plans = {f: self._plan(f) for f in new}
            # every subset size: the union of the combos of all patterns, computed once
            need: dict = {}
            for plan in plans.values():
                for k, combos in plan[1].items():
                    need.setdefault(k, set()).update(combos)
            for k, combos in sorted(need.items()):
                combos = _close(combos)
                ids, samples = _all_subsets(self.N, k)
                if self.restrict is not None:
                    keep = self.restrict.subsets(samples)
                    ids, samples = ids[keep], samples[keep]
                self._compute(k, ids, samples, combos)
            for f, plan in plans.items():
                self._tables[f] = self._gather(*plan)
        return [self._tables[f] for f in patterns]

    # ------------------------------------------------------------------ table decomposition
    def _plan(self, factors: tuple) -> tuple:
        """(label orders, {k: combos}) of a pattern: each label's orders, and for every way the
        labels can coincide the per-sample factor functions."""
        labels = sorted({p for p, _ in factors})
        lab_orders = [tuple(sorted(o for p, o in factors if p == lab)) for lab in labels]
        m = len(labels)
        combos: dict = {}
        for rank in _rank_vectors(m, self.N):
            k = max(rank) + 1
            combos.setdefault(k, set()).add(_combo(rank, lab_orders))
        return lab_orders, combos

    def _gather(self, lab_orders: list, _combos: dict) -> np.ndarray:
        """The table (N,)*m from the stores (entries on subsets never computed: NaN)."""
        N, m = self.N, len(lab_orders)
        out = np.full(N ** m, np.nan)
        for rv, kk, pos, sid in self._layout(m):
            store = self._store[kk]
            out[pos] = store.vals[store.col[_combo(rv, lab_orders)]][sid]
        return out.reshape((N,) * m)

    def _layout(self, m: int):
        """Where each entry of an m-label table comes from (:func:`_layout`), kept while it has
        at most :data:`_LAYOUT` entries, else recomputed in blocks."""
        if self.N ** m > _LAYOUT:
            return _layout_blocks(self.N, m, self.restrict)
        return _layout(self.N, m, self.restrict)

    def _keyed_table(self, factors: tuple) -> np.ndarray:
        labels = sorted({p for p, _ in factors})
        keys = []
        for idx in itertools.product(range(self.N), repeat=len(labels)):
            mp = dict(zip(labels, idx))
            keys.append(tuple((mp[p], o) for p, o in factors))
        return self.values(keys).reshape((self.N,) * len(labels))


def _combo(rank: tuple, lab_orders: list) -> tuple:
    """Per-sample factor functions when label j sits on the rank[j]-th smallest sample."""
    k = max(rank) + 1
    return tuple(tuple(sorted(o for j, r in enumerate(rank) if r == v for o in lab_orders[j]))
                 for v in range(k))


@lru_cache(maxsize=3)
def _layout(N: int, m: int, restrict: SampleRestriction | None) -> list:
    """Where each entry of an m-label table comes from, the same for every pattern of m labels
    and every kernel of N samples (so every layer of a flow): ``(rank vector, k, flat
    positions, subset ids)`` per way the labels coincide, skipping subsets outside the
    restriction (read-only arrays; decomposing the index tuples cost half the NTK-hierarchy time
    when it was redone for every table, and a second at 20 + 20 inputs when redone per layer)."""
    parts: dict = {}
    for rv, kk, pos, sid in _layout_blocks(N, m, restrict):
        parts.setdefault((rv, kk), []).append((pos, sid))
    lay = []
    for (rv, kk), v in parts.items():
        pos, sid = np.concatenate([p for p, _ in v]), np.concatenate([q for _, q in v])
        pos.setflags(write=False)
        sid.setflags(write=False)
        lay.append((rv, kk, pos, sid))
    return lay


def _layout_blocks(N: int, m: int, restrict: SampleRestriction | None):
    """:func:`_layout` in blocks of about :data:`_BLOCK` entries (for tables too large to keep)."""
    per = N ** (m - 1) if m > 1 else 1
    step = max(1, _BLOCK // max(per, 1))
    for a0 in range(0, N if m else 1, step):
        a1 = min(N, a0 + step)
        if m == 0:
            idx = np.zeros((1, 0), dtype=np.intp)
        else:
            idx = np.indices((a1 - a0,) + (N,) * (m - 1)).reshape(m, -1).T
            idx[:, 0] += a0
        rank, _ = _ranks(idx)
        code = rank @ (m ** np.arange(m)) if m else np.zeros(len(idx), dtype=np.int64)
        lo = a0 * per
        order = np.argsort(code, kind="stable")
        bounds = np.flatnonzero(np.diff(code[order])) + 1
        for sel in np.split(order, bounds):
            rv = tuple(int(x) for x in rank[sel[0]])
            kk = max(rv) + 1
            D = np.empty((len(sel), kk), dtype=np.intp)
            D[:, list(rv)] = idx[sel]
            if restrict is not None:
                keep = restrict.subsets(D)
                sel, D = sel[keep], D[keep]
            yield rv, kk, lo + sel, _subset_ids(D, N)


@lru_cache(maxsize=64)
def _rank_vectors(m: int, N: int) -> tuple:
    """Every rank vector of m labels over N >= k samples (label j on the rank[j]-th distinct)."""
    out = set()
    for idx in itertools.product(range(min(m, N)), repeat=m):
        srt = sorted(set(idx))
        out.add(tuple(srt.index(v) for v in idx))
    return tuple(sorted(out))


def _ranks(idx: np.ndarray) -> tuple:
    """Rank of each label's sample among the row's distinct samples, and the number of those."""
    E, m = idx.shape
    first = np.ones((E, m), dtype=bool)
    for l in range(1, m):
        for l2 in range(l):
            first[:, l] &= idx[:, l2] != idx[:, l]
    rank = np.zeros((E, m), dtype=np.int64)
    for j in range(m):
        for l in range(m):
            rank[:, j] += first[:, l] & (idx[:, l] < idx[:, j])
    return rank, first.sum(axis=1)


@lru_cache(maxsize=16)
def _all_subsets(N: int, k: int) -> tuple:
    """(colex ids, samples (C(N, k), k)) of every k-subset of range(N)."""
    S = np.array(list(itertools.combinations(range(N), k)), dtype=np.intp).reshape(-1, k)
    ids = _subset_ids(S, N)
    S.setflags(write=False)
    ids.setflags(write=False)
    return ids, S
