r"""Closed-form zero-mean Gaussian expectations of activation atoms.

An atom is a product of factors ``(slot, kind, order)``: ``(s, 'sigma', a)`` is the REGULAR
(classical, away from kinks) part of :math:`\sigma^{(a)}(z_s)` and ``(s, 'z', p)`` is
:math:`z_s^p`; :math:`z\sim\mathcal N(0,K)`. :func:`closed_form` returns
:math:`\mathbb E[\prod\text{factors}]` for a batch ``K[..., k, k]`` or ``None`` when no
closed form applies to the (family, factors) combination. The decision depends on the
activation family and the factors only, never on the values of ``K``.

Available closed forms (see ``docs/closed_forms.md`` for the full table):

* any activation, only ``'z'`` factors: Isserlis/Wick, any number of slots;
* ``polynomial``: expansion + Isserlis, any number of slots;
* ``trig`` (sin, cos): characteristic function, any slots / derivative orders / z powers;
* ``piecewise_linear`` and ``step``: half-Gaussian moments (1 slot), bivariate orthant
  moments :math:`\mathbb E[\Theta(\pm z_1)\Theta(\pm z_2)z_1^pz_2^q]` (2 slots, generalizing
  the arc-cosine kernels of Cho & Saul 2009), Stein reduction to the trivariate orthant
  probability (3 slots, any powers; 4 slots when the total degree is odd); regular parts of
  :math:`\sigma^{(a\ge2)}` (pw-linear) and :math:`\sigma^{(a\ge1)}` (step) vanish identically;
* ``erf`` and ``gelu``: :math:`\mathrm{erf}(z)=2\mathbb E_\eta\Theta(z+\eta)-1`,
  :math:`\Phi(z)=\mathbb E_\eta\Theta(z+\eta)` (auxiliary independent Gaussian noise), Gaussian
  derivative factors absorbed into the covariance, then the orthant machinery; available
  whenever at most three Heaviside-bearing factors (erf; gelu, gelu') appear.

Zero-variance convention: internally a Heaviside factor evaluated on a zero-variance variable
counts as :math:`\Theta(0)=1/2` (the limit :math:`K_{ss}\to0^+`).  The dispatcher
(:func:`effth.numerics.gaussian_expectation`) does not call these closed forms for such
batches: at exactly zero variance the expectation is the point-mass value
:math:`\sigma(0)` (PDLT (2.9): :math:`\Theta(0)=1`), which quadrature evaluates.

Accuracy (``docs/closed_forms.md``, "Accuracy notes"): absolute error about 1e-16 times the
atom's scale everywhere; relative error about 1e-15 where the atom is of the size of its scale.
Atoms odd in the correlation :math:`\rho` (e.g. :math:`\langle\mathrm{erf}\,\mathrm{erf}\rangle`,
:math:`\langle\sin\sin\rangle`, :math:`\langle\mathrm{sign}\,\mathrm{sign}\rangle`) near
:math:`\rho=0` keep only the absolute bound (relative error :math:`\sim\epsilon/|\rho|`); atoms
with Heaviside factors near :math:`\rho=\pm1` have absolute error
:math:`\lesssim8\epsilon/\sqrt{1-\rho^2}`, the conditioning of the angle.
"""

from __future__ import annotations

from effth._signature import public

from typing import Any, Callable, Sequence

import numpy as np

from ..errors import DomainError
from ._closed import _families as fam

__all__ = ["closed_form", "has_closed_form"]

_KINDS = ("sigma", "z")


def _normalize(factors: Sequence) -> tuple[list[int], list[tuple[tuple[int, ...], int]]]:
    """Validate factors; return (used slots sorted, groups per used slot)."""
    try:
        facs = [tuple(f) for f in factors]
    except TypeError as exc:
        raise DomainError(f"factors must be a sequence of (slot, kind, order) tuples, got {factors!r}") from exc
    orders: dict[int, list[int]] = {}
    zpow: dict[int, int] = {}
    for f in facs:
        if len(f) != 3:
            raise DomainError(f"factor {f!r} is not a (slot, kind, order) triple")
        s, kind, o = f
        if kind not in _KINDS:
            raise DomainError(f"factor kind {kind!r} in {f!r}; expected 'sigma' or 'z'")
        if isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 0:
            raise DomainError(f"factor slot {s!r} in {f!r}; expected a non-negative int")
        if isinstance(o, bool) or not isinstance(o, (int, np.integer)) or o < 0:
            raise DomainError(f"factor order {o!r} in {f!r}; expected a non-negative int")
        s, o = int(s), int(o)
        orders.setdefault(s, [])
        zpow.setdefault(s, 0)
        if kind == "sigma":
            orders[s].append(o)
        else:
            zpow[s] += o
    used = sorted(orders)
    groups = [(tuple(sorted(orders[s])), zpow[s]) for s in used]
    return used, groups


def _param(activation: Any, key: str):
    return activation.param(key)


def _poly_coeffs(activation: Any) -> list[float]:
    """Ascending coefficients of a polynomial activation (``coeffs``, ``degree`` or ``expr``)."""
    try:
        return [float(c) for c in _param(activation, "coeffs")]
    except (KeyError, AttributeError, TypeError):
        pass
    try:
        d = int(_param(activation, "degree"))
        return [0.0] * d + [1.0]
    except (KeyError, AttributeError, TypeError):
        pass
    import sympy as sp

    expr = activation.expr
    syms = sorted(expr.free_symbols, key=str)
    if not syms:
        return [float(expr)]
    return [float(c) for c in reversed(sp.Poly(expr, syms[0]).all_coeffs())]


_PLAN_CACHE: dict = {}
_PLAN_CACHE_MAX = 4096


def _plan(activation: Any, factors: Sequence) -> tuple[list[int], Callable[[np.ndarray], np.ndarray] | None]:
    used, groups = _normalize(factors)
    try:
        key = (getattr(activation, "family", None), getattr(activation, "params", None), tuple(groups))
        hash(key)
    except TypeError:
        return used, _plan_groups(activation, groups)
    if key not in _PLAN_CACHE:
        if len(_PLAN_CACHE) >= _PLAN_CACHE_MAX:
            _PLAN_CACHE.clear()
        _PLAN_CACHE[key] = _plan_groups(activation, groups)
    return used, _PLAN_CACHE[key]


def _plan_groups(activation: Any, groups: list) -> Callable[[np.ndarray], np.ndarray] | None:
    if not groups:  # empty product: E[1] = 1
        return lambda K: np.ones(K.shape[:-2])
    if all(not orders for orders, _ in groups):
        return fam.plan_z_only(groups)
    family = getattr(activation, "family", None)
    if family == "polynomial":
        return fam.plan_polynomial(_poly_coeffs(activation), groups)
    if family == "piecewise_linear":
        return fam.plan_piecewise_linear(
            float(_param(activation, "a_plus")), float(_param(activation, "a_minus")), groups
        )
    if family == "step":
        return fam.plan_step(float(_param(activation, "low")), float(_param(activation, "high")), groups)
    if family == "trig":
        kind = str(_param(activation, "kind"))
        if kind not in ("sin", "cos"):
            return None
        return fam.plan_trig(kind, groups)
    if family == "erf":
        if not fam.n_theta_ok("erf", groups):
            return None
        return fam.plan_pieces(fam.erf_pieces, groups)
    if family == "gelu":
        if not fam.n_theta_ok("gelu", groups):
            return None
        return fam.plan_pieces(fam.gelu_pieces, groups)
    return None


@public
def has_closed_form(activation: Any, factors: Sequence) -> bool:
    """Whether :func:`closed_form` has a closed form for this (activation family, factors).

    Parameters
    ----------
    activation : Activation
        Only ``activation.family`` and ``activation.param(key)`` are used.
    factors : sequence of ``(slot, kind, order)`` tuples
        The atom.

    Returns
    -------
    bool
    """
    return _plan(activation, factors)[1] is not None


#: families whose closed forms beat the shared-node quadrature of the atom tables at four samples
#: (GELU's four-Heaviside expansions do not: 79 s against 35 s for the NTK hierarchy on 16
#: inputs at depth 5, measured)
_FAST_FAMILIES = frozenset({"erf", "trig", "polynomial", "piecewise_linear", "step"})


def fast_closed_form(activation: Any, factors: Sequence) -> bool:
    """Whether the atom has a closed form that is also the fastest way to evaluate it in bulk
    (the families :data:`_FAST_FAMILIES`); the layer flows' tables use closed forms then."""
    return getattr(activation, "family", None) in _FAST_FAMILIES and has_closed_form(activation, factors)


def closed_form_resolves(activation: Any, factors: Sequence, diag: np.ndarray, rtol: float) -> np.ndarray:
    r"""Whether the closed form keeps relative accuracy ``rtol`` at kernels with these diagonals
    ``diag (..., k)`` (slots as in ``factors``): a boolean per batch entry.

    erf's and sin/cos's closed forms are sums of :math:`O(1)` terms (Heaviside probabilities,
    exponentials), so their error is absolute, about :math:`\epsilon`; an atom whose factors
    vanish at :math:`z=0` (:math:`\mathrm{erf}^{(2j)}`, :math:`\sin^{(2j)}`,
    :math:`\cos^{(2j+1)}`) is as small as :math:`\prod\sqrt{K_{ss}}` over those factors at small
    kernels (:math:`\langle\mathrm{erf}^4\rangle\sim K^2`): measured relative error
    :math:`5\times10^{-7}` at :math:`K=10^{-5}`, :math:`10^{-10}` at :math:`10^{-3}`.  Accepted
    where :math:`100\,\epsilon\le\mathrm{rtol}\prod\sqrt{K_{ss}}`.  The other families are
    exact in relative terms (polynomials: Isserlis; piecewise-linear: homogeneous)."""
    diag = np.asarray(diag, dtype=float)
    family = getattr(activation, "family", None)
    if family not in ("erf", "trig"):
        return np.ones(diag.shape[:-1], dtype=bool)
    cos = family == "trig" and str(_param(activation, "kind")) == "cos"
    size = np.ones(diag.shape[:-1])
    for s, kind, order in factors:
        vanishes = kind == "z" or (order % 2 == (1 if cos else 0))
        if kind == "z" and order == 0:
            continue
        if vanishes:
            size = size * np.sqrt(np.clip(diag[..., s], 0.0, None)) ** (order if kind == "z" else 1)
    return 100 * np.finfo(float).eps <= rtol * size


@public
def closed_form(activation: Any, factors: Sequence, K: Any) -> np.ndarray | None:
    r"""Closed-form zero-mean Gaussian expectation of an atom, batched over covariances.

    .. math::
        \mathbb E_{z\sim\mathcal N(0,K)}\Big[\prod_{(s,\sigma,a)}\sigma^{(a)}_{\rm reg}(z_s)
        \prod_{(s,z,p)}z_s^p\Big]

    Parameters
    ----------
    activation : Activation
        Only ``activation.family`` and ``activation.param(key)`` are used.
    factors : sequence of ``(slot, kind, order)`` tuples
        ``(s, 'sigma', a)``: regular part of :math:`\sigma^{(a)}(z_s)`; ``(s, 'z', p)``: :math:`z_s^p`.
    K : array_like, shape (..., k, k)
        Zero-mean covariances (symmetric PSD, possibly singular), ``k > max(slot)``.
        Slots not used by any factor are marginalized out.

    Returns
    -------
    numpy.ndarray of shape ``K.shape[:-2]`` (float64), or None
        ``None`` when no closed form applies (decided from family and factors only).

    Raises
    ------
    DomainError
        Malformed factors, or ``K`` of the wrong shape.

    References
    ----------
    Isserlis (1918); Cho & Saul, "Kernel methods for deep learning" (NIPS 2009);
    Williams, "Computing with infinite networks" (NIPS 1996) for erf; Sheppard (1899) for
    orthant probabilities. See ``docs/closed_forms.md``.
    """
    used, fn = _plan(activation, factors)
    if fn is None:
        return None
    Karr = np.asarray(K, dtype=np.float64)
    if Karr.ndim < 2 or Karr.shape[-1] != Karr.shape[-2]:
        raise DomainError(f"K must have shape (..., k, k); got {Karr.shape}")
    if used and used[-1] >= Karr.shape[-1]:
        raise DomainError(
            f"factor slot {used[-1]} needs a covariance with k > {used[-1]}, got k={Karr.shape[-1]}"
        )
    if used == list(range(Karr.shape[-1])):
        Ku = Karr              # the caller's object: shared_terms() keys its sub-expressions on it
    else:
        Ku = Karr[..., used, :][..., :, used] if used else Karr[..., :0, :0]
    out = fn(Ku)
    return np.asarray(np.broadcast_to(out, Karr.shape[:-2]), dtype=np.float64).copy()
