"""Slow, independent reference values for Gaussian expectations (``method='mpmath'``).

* 1-2 effective dimensions: nested ``mpmath.quad`` (tanh-sinh) at ``dps``
  digits in the conditional (pivoted-Cholesky) parametrization
  ``z = mu + A u``, with breakpoints wherever a slot crosses a kink.
* 3-4 effective dimensions (smooth integrands only): tensor-product
  Gauss-Hermite in the Cholesky basis (not the eigenbasis or trapezoidal rule of
  :mod:`effth.numerics.quadrature`), at high degree, accepted only when two
  degrees agree to ``tol``.  Evaluated in float64 (mpmath would take hours at
  the needed degrees), so its accuracy is ~1e-14 relative, not ``dps`` digits.
"""

from __future__ import annotations

from effth._signature import public

import math
from typing import Any, Sequence

import mpmath
import numpy as np

from ..errors import ConvergenceError, DomainError, NotDerivedError
from ._rules import eval_product, factor_degrees, gauss_hermite, group_factors

__all__ = ["reference_expectation"]


def _mp_pivoted_cholesky(K: Any, k: int, tol: Any) -> tuple[list, int]:
    """Columns A[s][j] (mp) with z = A u; returns (A, rank)."""
    R = [[mpmath.mpf(K[i][j]) for j in range(k)] for i in range(k)]
    A = [[mpmath.mpf(0)] * k for _ in range(k)]
    used = [False] * k
    d0 = max(R[i][i] for i in range(k))
    r = 0
    for j in range(k):
        cand = [(R[i][i], i) for i in range(k) if not used[i]]
        if not cand:
            break
        dp, p = max(cand)
        if dp <= tol * d0 or dp <= 0:
            break
        sq = mpmath.sqrt(dp)
        col = [R[i][p] / sq if not used[i] else mpmath.mpf(0) for i in range(k)]
        col[p] = sq
        for a in range(k):
            A[a][j] = col[a]
            for b in range(k):
                R[a][b] -= col[a] * col[b]
        used[p] = True
        r += 1
    return A, r


_MP_DEGREE_START = 6   # mpmath Gauss-Legendre degree m uses 3*2**(m-1) nodes per interval
_MP_DEGREE_MAX = 10


def _one(factors: Sequence, K: np.ndarray, mean: np.ndarray | None, act: Any, dps: int) -> tuple:
    k = K.shape[-1]
    with mpmath.workdps(dps):
        A, r = _mp_pivoted_cholesky(K.tolist(), k, mpmath.mpf(10) ** (-(dps - 5)))
        mu = [mpmath.mpf(0)] * k if mean is None else [mpmath.mpf(float(x)) for x in mean]
        funcs = []
        for s, kind, o in factors:
            if kind == "z":
                funcs.append((s, (lambda z, o=o: z ** o)))
            else:
                funcs.append((s, act._mp(o)))
        kinks = [mpmath.mpf(c) for c in (act.kinks if act is not None else ())]
        sig_slots = {s for s, kind, _ in factors if kind == "sigma"}
        level = [max([j for j in range(r) if A[s][j] != 0], default=-1) for s in range(k)]
        norm = 1 / mpmath.sqrt(2 * mpmath.pi)

        growth = factor_degrees(factors, act)[1]
        T = mpmath.sqrt(2 * dps * mpmath.log(10) + 2 * growth * mpmath.log(3 * dps)) + 1

        def zval(s: int, us: list) -> Any:
            return mu[s] + mpmath.fsum(A[s][j] * us[j] for j in range(len(us)))

        def prod_level(j: int, us: list) -> Any:
            out = mpmath.mpf(1)
            for s, f in funcs:
                if level[s] == j:
                    out *= f(zval(s, us))
            return out

        def breaks(j: int, us: list) -> list:
            pts = []
            for s in sig_slots:
                if level[s] == j and A[s][j] != 0:
                    part = mu[s] + mpmath.fsum(A[s][i] * us[i] for i in range(j))
                    pts.extend((c - part) / A[s][j] for c in kinks)
            pts = sorted(p for p in pts if -T < p < T)
            return [-T] + pts + [T]

        target = mpmath.mpf(10) ** (-(dps - 8))
        worst = [mpmath.mpf(0)]  # largest relative error estimate of any quad call

        def nest(j: int, us: list) -> Any:
            if j == r:
                return mpmath.mpf(1)

            def g(u: Any) -> Any:
                uu = us + [u]
                return norm * mpmath.exp(-u * u / 2) * prod_level(j, uu) * nest(j + 1, uu)

            pts = breaks(j, us)
            # mpmath.quad returns its best value silently when it does not converge: check its
            # error estimate and raise the degree (each step doubles the nodes) until it does.
            for degree in range(_MP_DEGREE_START, _MP_DEGREE_MAX + 1):
                v, e = mpmath.quad(g, pts, method="gauss-legendre", error=True, maxdegree=degree)
                rel = e / max(abs(v), target)
                if rel <= target:
                    break
            else:
                raise ConvergenceError(
                    f"mpmath reference did not converge: relative error estimate {float(rel):.2g} "
                    f"at Gauss-Legendre degree {_MP_DEGREE_MAX} (target {float(target):.1g}); lower dps")
            worst[0] = max(worst[0], rel)
            return v

        val = prod_level(-1, []) * nest(0, [])
        return val, max(worst[0], mpmath.mpf(10) ** (-(dps - 5))) * abs(val)


def _gh_cholesky(factors: Sequence, K: np.ndarray, mean: np.ndarray | None, act: Any,
                 tol: float, max_nodes: int) -> tuple[float, float]:
    k = K.shape[-1]
    L = np.zeros((k, k))
    R = K.copy()
    used = np.zeros(k, bool)
    for j in range(k):
        d = np.where(used, -np.inf, np.diag(R))
        p = int(np.argmax(d))
        if d[p] <= 1e-14 * np.max(np.diag(K)):
            break
        col = np.where(used, 0.0, R[:, p] / math.sqrt(d[p]))
        L[:, j] = col
        R = R - np.outer(col, col)
        used[p] = True
    by_slot = group_factors(factors, k)
    poly, _, m = factor_degrees(factors, act)
    scales = np.max(np.abs(L), axis=0)
    strip = act.strip if act is not None else math.inf
    Lg = math.log(1.0 / tol) + 2.0

    def degrees(mult: float) -> list[int]:
        out = []
        for j in range(k):
            if scales[j] == 0:
                out.append(1)
            elif poly is not None:
                out.append(poly // 2 + 1)
            elif math.isinf(strip):
                out.append(int(mult * min(400, 16 + 10 * max(m, 1) * scales[j] ** 2 * Lg / 28)))
            else:
                d = strip / scales[j]
                out.append(int(mult * min(600, (Lg / (1.25 * d)) ** 2 + 10)))
        return out

    def run(ns: list[int]) -> tuple[float, float]:
        rules = [gauss_hermite(n) for n in ns]
        total = 0.0
        tabs = 0.0
        xs0, ws0 = rules[0]
        rest = rules[1:]
        grids = np.meshgrid(*[r[0] for r in rest], indexing="ij") if rest else []
        wrest = np.ones(1)
        for r_ in rest:
            wrest = np.multiply.outer(wrest, r_[1]) if wrest.ndim else r_[1]
        wrest = wrest.reshape(-1) if rest else np.ones(1)
        flat = [g.reshape(-1) for g in grids]
        for a in range(len(xs0)):
            zs = []
            for s in range(k):
                z = (0.0 if mean is None else mean[s]) + L[s, 0] * xs0[a]
                for j in range(1, k):
                    z = z + L[s, j] * flat[j - 1]
                zs.append(np.broadcast_to(z, wrest.shape))
            f = np.broadcast_to(eval_product(by_slot, act, zs), wrest.shape)
            total += ws0[a] * float(f @ wrest)
            tabs += ws0[a] * float(np.abs(f) @ wrest)
        return total, tabs

    mult = 1.0
    prev = None
    for _ in range(6):
        ns = degrees(mult)
        if int(np.prod(ns)) > max_nodes:
            break
        v, va = run(ns)
        if poly is not None:
            return v, 1e-16 * abs(v)
        if prev is not None and abs(v - prev) <= tol * max(abs(v), 1e-3 * va, 1e-300):
            return v, abs(v - prev)
        prev = v
        mult *= 1.3
    raise ConvergenceError(f"reference Gauss-Hermite did not self-converge to {tol:g} within {max_nodes} nodes "
                           f"(last value {prev!r}); use fewer slots or a better-conditioned kernel")


#: Smallest working precision: below it the pivot tolerance 10^-(dps-5) exceeds the kernel's scale
#: and every atom collapsed to 0 with "error" 0.
_MIN_DPS = 15


@public
def reference_expectation(factors: Sequence[tuple], K: np.ndarray, activation: Any, *,
                          mean: np.ndarray | None = None, dps: int = 30, return_error: bool = False,
                          as_mpf: bool = False, tol: float = 1e-12, max_nodes: int = 2 * 10 ** 8) -> Any:
    """High-accuracy reference for a regular atom (loops over the batch; slow).

    Parameters
    ----------
    factors : sequence of ``(slot, kind, order)`` tuples
        Regular factors, slots ``0..k-1``.
    K : ndarray, shape (..., k, k)
    activation : Activation or None
    mean : ndarray, shape (..., k), optional
    dps : int
        mpmath working precision (1-2 effective dimensions), at least 15.
    return_error : bool
        Also return an error estimate.
    as_mpf : bool
        Return an object array of ``mpmath.mpf`` (1-2 dimensions only).
    tol : float
        Self-consistency tolerance for the 3-4-dimensional Gauss-Hermite path.
    max_nodes : int
        Node cap for that path.

    Returns
    -------
    ndarray, shape (...)  (float64, or object array of mpf)

    Raises
    ------
    DomainError
        ``dps < 15``.
    NotDerivedError
        Kinked activation with 3-4 effective dimensions.
    ConvergenceError
        The Gauss-Hermite self-consistency check failed.
    """
    if isinstance(dps, bool) or not isinstance(dps, (int, np.integer)) or dps < _MIN_DPS:
        raise DomainError(f"dps must be an integer >= {_MIN_DPS} (the reference's pivot and "
                          f"convergence tolerances are 10^-(dps-5) and 10^-(dps-8)), got {dps!r}")
    K = np.asarray(K, dtype=np.float64)
    batch, k = K.shape[:-2], K.shape[-1]
    Kf = K.reshape((-1, k, k))
    mf = None if mean is None else np.asarray(mean, dtype=np.float64).reshape((-1, k))
    vals, errs = [], []
    for b in range(Kf.shape[0]):
        mb = None if mf is None else mf[b]
        rank = int(np.sum(np.linalg.eigvalsh(Kf[b]) > 1e-14 * max(np.max(np.diag(Kf[b])), 1e-300)))
        if rank <= 2:
            v, e = _one(factors, Kf[b], mb, activation, dps)
            vals.append(v if as_mpf else float(v))
            errs.append(float(e))
        else:
            if activation is not None and activation.kinks and any(kd == "sigma" for _, kd, _ in factors):
                raise NotDerivedError(
                    f"the mpmath reference handles kinked activations ({activation!r}) only with <= 2 "
                    "effective dimensions; use closed forms or method='quadrature'")
            v, e = _gh_cholesky(factors, Kf[b], mb, activation, tol, max_nodes)
            vals.append(mpmath.mpf(v) if as_mpf else v)
            errs.append(e)
    out = np.array(vals, dtype=object if as_mpf else np.float64).reshape(batch)
    if return_error:
        return out, np.array(errs).reshape(batch)
    return out
