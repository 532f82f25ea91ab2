"""Quadrature rules (one-dimensional, and tensor rules for a Gaussian vector) and integrand
evaluation (private helpers)."""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any, Sequence

import numpy as np
from scipy.special import roots_hermitenorm, roots_legendre

from ..errors import DomainError

INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


@lru_cache(maxsize=128)
def gauss_hermite(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights for E[f(x)], x ~ N(0, 1) (exact for deg <= 2n-1)."""
    if n == 1:
        return np.zeros(1), np.ones(1)
    x, w = roots_hermitenorm(n)
    w = w / w.sum()
    return x, w


def covariance_root(cov: np.ndarray, rtol: float = 1e-12) -> np.ndarray:
    """``R`` of shape ``(n, rank)`` with ``R R^T = cov`` (eigenvalues below ``rtol * max`` dropped)."""
    cov = 0.5 * (np.asarray(cov, dtype=float) + np.asarray(cov, dtype=float).T)
    lam, V = np.linalg.eigh(cov)
    keep = lam > rtol * max(1.0, float(lam[-1]))
    return V[:, keep] * np.sqrt(lam[keep])


@lru_cache(maxsize=128)
def gauss_trapezoid(n: int, X: float = 8.5) -> tuple[np.ndarray, np.ndarray]:
    """``n`` equispaced nodes on ``[-X, X]`` with weights ``~ exp(-x^2/2)`` summing to one.

    For integrands analytic in a strip ``|Im x| < d`` (tanh, sigmoid: poles at ``i pi / (2 s)``
    for ``u = s x``) the error falls like ``exp(-2 pi d / h)``, ``h = 2X / (n - 1)``: geometric in
    ``n``, against ``exp(-d sqrt(2 n))`` for Gauss-Hermite (E[tanh''(u)^2], ``u ~ N(0, 1.2)``:
    Gauss-Hermite is off by 2e-3 at 40 nodes, this rule by < 1e-12 at 60)."""
    if n == 1:
        return np.zeros(1), np.ones(1)
    x = np.linspace(-X, X, int(n))
    w = np.exp(-0.5 * x * x)
    return x, w / w.sum()


def gaussian_tensor_rule(cov: np.ndarray, nodes: int, extra: int = 0,
                         extra_nodes: int | None = None, max_points: int = 5_000_000,
                         kind: str = "hermite"):
    """Tensor rule for ``u ~ N(0, cov)`` and ``extra`` independent ``N(0, 1)``.

    ``u`` lives on the range of ``cov`` (``rank(cov)`` coordinates with ``nodes`` points each):
    Gauss-Hermite (``kind='hermite'``, exact for polynomials of degree ``2 nodes - 1``) or the
    truncated trapezoid rule (``kind='trapezoid'``, :func:`gauss_trapezoid`; far better for
    activations with complex poles such as tanh); the extra coordinates always use Gauss-Hermite
    with ``extra_nodes`` (default ``nodes``).  Returns ``u (S, n)``, ``xi (S, extra)`` and weights
    ``w (S,)`` summing to one (points of weight below 1e-300 dropped).  Raises ``DomainError``
    above ``max_points``.
    """
    if kind not in ("hermite", "trapezoid"):
        raise DomainError(f"kind={kind!r} must be 'hermite' or 'trapezoid'")
    root = covariance_root(cov)
    k = root.shape[1]
    sizes = [int(nodes)] * k + [int(extra_nodes or nodes)] * int(extra)
    total = int(np.prod(sizes)) if sizes else 1
    if total > max_points:
        raise DomainError(f"{total} quadrature points (rank {k} + {extra} dimensions) exceed "
                         f"{max_points}")
    first = gauss_trapezoid if kind == "trapezoid" else gauss_hermite
    rules = [first(m) for m in sizes[:k]] + [gauss_hermite(m) for m in sizes[k:]]
    grids = np.meshgrid(*[x for x, _ in rules], indexing="ij")
    pts = np.stack([g.ravel() for g in grids], axis=1) if sizes else np.zeros((1, 0))
    w = np.ones(pts.shape[0])
    for g in np.meshgrid(*[wx for _, wx in rules], indexing="ij"):
        w = w * g.ravel()
    good = w > 1e-300
    pts, w = pts[good], w[good]
    return pts[:, :k] @ root.T, pts[:, k:], w / w.sum()


@lru_cache(maxsize=256)
def trapezoid(h: float, X: float) -> tuple[np.ndarray, np.ndarray]:
    """Truncated trapezoidal rule for E[f(x)], x ~ N(0, 1): nodes i*h, |i*h| <= X."""
    m = int(math.floor(X / h))
    x = h * np.arange(-m, m + 1, dtype=np.float64)
    w = h * INV_SQRT_2PI * np.exp(-0.5 * x * x)
    return x, w


@lru_cache(maxsize=64)
def gauss_legendre(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Legendre nodes/weights on [-1, 1]."""
    t, w = roots_legendre(n)
    return t, w


def log_inv_tol(rtol: float) -> float:
    """L = ln(1/rtol) + ln 10 (one digit of margin)."""
    return math.log(1.0 / max(rtol, 1e-16)) + math.log(10.0)


def truncation(rtol: float, growth: int) -> float:
    """Half-width X in standard-normal units with X^growth phi(X) <~ rtol/10."""
    L = log_inv_tol(rtol) + 2.0
    X = math.sqrt(2.0 * L)
    for _ in range(8):
        X = math.sqrt(2.0 * (L + max(growth - 1, 0) * math.log(max(X, 1.0))))
    return X + 0.25


def group_factors(factors: Sequence[tuple], k: int) -> list[list[tuple[str, int]]]:
    """[(kind, order), ...] per slot."""
    out: list[list[tuple[str, int]]] = [[] for _ in range(k)]
    for s, kind, order in factors:
        out[s].append((kind, order))
    return out


def eval_product(by_slot: list, activation: Any, z: Sequence) -> np.ndarray:
    """Product of the (regular) factors; z[s] is the (broadcastable) array of slot s."""
    out: np.ndarray | None = None
    for s, facs in enumerate(by_slot):
        if not facs:
            continue
        zs = z[s]
        for kind, order in facs:
            if kind == "z":
                if order == 0:
                    continue
                v = zs ** order
            else:
                v = activation.numpy(order)(zs)
            out = v if out is None else out * v
    if out is None:
        shapes = [np.shape(v) for v in z if v is not None]
        return np.ones(np.broadcast_shapes(*shapes) if shapes else ())
    return out


def factor_degrees(factors: Sequence[tuple], activation: Any) -> tuple[int | None, int, int]:
    """(polynomial degree or None, growth degree, number of non-polynomial sigma factors)."""
    poly_deg: int | None = 0
    growth = 0
    m = 0
    pdeg = activation.polynomial_degree if activation is not None else None
    linear_growth = activation is not None and activation.family in (
        "piecewise_linear", "softplus", "swish", "gelu", "user")
    for _, kind, order in factors:
        if kind == "z":
            poly_deg = None if poly_deg is None else poly_deg + order
            growth += order
        elif pdeg is not None:
            d = max(pdeg - order, 0)
            poly_deg = None if poly_deg is None else poly_deg + d
            growth += d
        else:
            poly_deg = None
            m += 1
            growth += 1 if (linear_growth and order == 0) else 0
    return poly_deg, growth, m


def smolyak_gauss_hermite(dim: int, degree: int, max_points: int = 2_000_000):
    """Sparse (Smolyak) rule for ``E[p(x)]``, ``x ~ N(0, I_dim)``, exact for total degree <= ``degree``.

    The combination technique over one-dimensional Gauss-Hermite rules with ``i`` points (exact to
    degree ``2i - 1``) at level ``q = dim + k``, ``k = ceil((degree - 1) / 2)``: every monomial
    :math:`x^\\alpha` with :math:`|\\alpha|\\le 2k+1` lies in a tensor space
    :math:`\\otimes_j P_{2i_j-1}` with :math:`\\sum_j i_j\\le q`.  Coinciding points are merged; the
    weights sum to one and may be negative (the rule is for polynomials, not for general
    integrands).  Returns ``x (S, dim)``, ``w (S,)``.
    """
    from itertools import combinations_with_replacement

    dim, degree = int(dim), int(degree)
    if dim < 0 or degree < 0:
        raise DomainError(f"dim={dim}, degree={degree}: both must be >= 0")
    if dim == 0:
        return np.zeros((1, 0)), np.ones(1)
    k = max(0, -(-(degree - 1) // 2))
    pts, wts = [], []
    for extra in range(max(0, k - dim + 1), k + 1):           # |i| = dim + extra
        coef = (-1) ** (k - extra) * math.comb(dim - 1, k - extra)
        for combo in combinations_with_replacement(range(dim), extra):
            level = np.ones(dim, dtype=int)
            for j in combo:
                level[j] += 1
            rules = [gauss_hermite(int(m)) for m in level]
            grids = np.meshgrid(*[x for x, _ in rules], indexing="ij")
            p = np.stack([g.ravel() for g in grids], axis=1)
            w = np.full(p.shape[0], float(coef))
            for g in np.meshgrid(*[wx for _, wx in rules], indexing="ij"):
                w = w * g.ravel()
            pts.append(p)
            wts.append(w)
            if sum(a.shape[0] for a in pts) > max_points:
                raise DomainError(f"Smolyak rule (dim {dim}, degree {degree}) exceeds "
                                  f"{max_points} points")
    x = np.concatenate(pts)
    w = np.concatenate(wts)
    keys, inv = np.unique(np.round(x, 12), axis=0, return_inverse=True)
    wm = np.zeros(keys.shape[0])
    np.add.at(wm, inv.ravel(), w)
    keep = np.abs(wm) > 1e-15
    return keys[keep], wm[keep] / wm[keep].sum()
