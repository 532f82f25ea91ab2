r"""Exact finite-width statistics of deep linear networks (PDLT chapter 3, with biases).

A deep linear network is the MLP (3.1) with :math:`\sigma(z)=z`,

.. math:: z^{(\ell+1)}_{i;\alpha}=b^{(\ell+1)}_i+\sum_j W^{(\ell+1)}_{ij}z^{(\ell)}_{j;\alpha},\qquad
          b\sim\mathcal N(0,C_b^{(\ell)}),\quad W\sim\mathcal N(0,C_W^{(\ell)}/n_{\ell-1})\quad(3.4).

Everything here is **exact at any width** (no :math:`1/n` truncation): the results are rational
functions of the hidden widths :math:`n_1,\dots,n_{L-1}` (SymPy symbols or integers) and the
hyperparameters.  They are *derived*, not typed in, from one exact fact and the Wick engine:

* conditioned on layer :math:`\ell`, the layer-:math:`(\ell+1)` preactivations are Gaussian,
  i.i.d. over neurons, with covariance the **stochastic metric**
  :math:`\widehat G^{(\ell+1)}_{\alpha\beta}=C_b^{(\ell+1)}+\frac{C_W^{(\ell+1)}}{n_\ell}
  \sum_j z^{(\ell)}_{j;\alpha}z^{(\ell)}_{j;\beta}` (the same Wick contraction of the weights as
  (3.11), (3.20), (3.36), kept inside the expectation); :math:`\widehat G^{(1)}=K^{(1)}` is
  deterministic;
* so a moment of :math:`\widehat G^{(\ell+1)}` is a sum over Wick pairings of the summed
  neuron slots, each weighted by :math:`n_\ell^{\,\mathrm{cyc}(\pi\cup\pi_0)-m}`
  (:func:`effth.algebra.wick.cycle_count`, the counting of (3.23), (3.39)–(3.41)) times a
  moment of :math:`\widehat G^{(\ell)}`; iterating down to layer 1 gives every moment exactly;
* a moment of the preactivations is the Wick sum (over pairings with equal neuron indices,
  the :math:`\delta_{i_{k_1}i_{k_2}}` of (3.34), (3.44)) of moments of :math:`\widehat G^{(\ell)}`.

For one input and :math:`C_b=0` every moment of :math:`\widehat G` is a single power and this
reduces to the book's closed forms (3.24), (3.25), (3.42), (3.43), (3.45)–(3.47), with the
per-layer factor :math:`c_{2m}(n)` obtained by cycle counting (:func:`layer_factor`).  With
several inputs and biases it gives the exact kernel and four-point-vertex recursions
(derived here: the book treats only the single input, PDLT §3.3–§3.4; its chapter-4 recursion (4.119) with
:math:`\sigma(z)=z` is their large-width part)

.. math:: K^{(\ell+1)}_{\alpha_1\alpha_2}=C_b^{(\ell+1)}+C_W^{(\ell+1)}K^{(\ell)}_{\alpha_1\alpha_2},

.. math:: V^{(\ell+1)}_{(\alpha_1\alpha_2)(\alpha_3\alpha_4)}={C_W^{(\ell+1)}}^2\Big[
          K_{\alpha_1\alpha_3}K_{\alpha_2\alpha_4}+K_{\alpha_1\alpha_4}K_{\alpha_2\alpha_3}
          +\frac{n_\ell}{n_{\ell-1}}V_{(\alpha_1\alpha_2)(\alpha_3\alpha_4)}
          +\frac1{n_{\ell-1}}\big(V_{(\alpha_1\alpha_3)(\alpha_2\alpha_4)}+V_{(\alpha_1\alpha_4)(\alpha_2\alpha_3)}\big)
          \Big]^{(\ell)},

with :math:`V^{(\ell)}\equiv n_{\ell-1}\mathrm{Cov}(\widehat G^{(\ell)},\widehat G^{(\ell)})`
(PDLT (4.76)) and :math:`K^{(\ell)}=\mathbb E[\widehat G^{(\ell)}]` (the metric :math:`G^{(\ell)}`
equals the kernel exactly: :math:`G^{\{1\}}=0`).

What is exact and what is not
-----------------------------
* Exact at any widths: every moment returned here; :math:`K^{(\ell)}`; :math:`V^{(\ell)}` from
  the recursion above (``exact=True``); the connected four-point function
  :math:`\mathbb E[z_{i_1}z_{i_2}z_{i_3}z_{i_4}]|_c=\frac1{n_{\ell-1}}[\delta_{i_1i_2}\delta_{i_3i_4}
  V_{(12)(34)}+\delta_{i_1i_3}\delta_{i_2i_4}V_{(13)(24)}+\delta_{i_1i_4}\delta_{i_2i_3}V_{(14)(23)}]`
  (PDLT (4.77)) holds *exactly*, with no :math:`O(1/n^2)` remainder.
* :math:`V^{(\ell)}` itself is a polynomial in :math:`1/n` (degree :math:`\ell-2` in the inverse
  widths): the book's leading recursion (4.119) (``exact=False``) drops the last term above,
  i.e. :math:`V^{\{1\}}/n` and beyond; at one input, :math:`C_b=0`, equal widths,
  :math:`V^{(\ell)}/(n K^2)=(1+2/n)^{\ell-1}-1` exactly, whose leading term is the book's
  :math:`2(\ell-1)/n` (3.28).
* The double-scaling form :math:`e^{m(m-1)r}` (3.55) is a limit, not exact
  (:func:`double_scaling_limit`).

Examples
--------
>>> import sympy as sp
>>> n = sp.Symbol("n", positive=True)
>>> sp.factor(single_input_moment(2, 3, n))          # E[z^4] at layer 3, C_W = G^{(0)} = 1
3*(n + 2)**2/n**2
>>> single_input_correlator(3, 4, (4, 8, 16))         # PDLT §3.4: G_6 = 3 * 1.875 * 1.40625
2025/256
"""

from __future__ import annotations

from effth._signature import public

import itertools
import math
import numbers
from collections import defaultdict
from collections.abc import Sequence
from functools import cache
from typing import Any

import numpy as np
import sympy as sp

from effth.algebra.indices import alpha, ell, width
from effth.algebra.indices import c_b as _cb_sym
from effth.algebra.indices import c_w as _cw_sym
from effth.algebra.tensors import FourPointVertex, Kernel
from effth.algebra.wick import (
    c2m,
    cycle_count,
    cycle_polynomial,
    enumerate_pairings,
    trace_matching,
)
from effth.errors import DomainError

__all__ = [
    "deep_linear_flow",
    "double_scaling_limit",
    "exact_vertex",
    "kernel_recursion",
    "layer_factor",
    "metric_moment",
    "observable_variance",
    "preactivation_moment",
    "single_input_correlator",
    "single_input_cumulants",
    "single_input_moment",
    "single_input_vertex",
    "vertex_recursion",
]

#: Largest :math:`m` for which :func:`layer_factor` enumerates the :math:`(2m-1)!!` pairings
#: (m = 7 is 135135 pairings); beyond it the product form (3.46) is used (equal, see tests).
MAX_ENUMERATED_M = 6

#: Default width and depth-to-width-ratio symbols :math:`n`, :math:`r` (PDLT (3.52)).
_N = sp.Symbol("n", positive=True)
_R = sp.Symbol("r", positive=True)

# ------------------------------------------------------------------------------ validation


def _exact(x: Any, name: str, *, positive: bool = False, allow_zero: bool = True,
           signed: bool = False) -> sp.Expr:
    """A hyperparameter as an exact SymPy number or symbol; floats via their decimal repr."""
    if isinstance(x, bool):
        raise DomainError(f"{name} must be a number or a SymPy expression, got {x!r}")
    if isinstance(x, sp.Basic):
        e = x
    elif isinstance(x, numbers.Integral):
        e = sp.Integer(int(x))
    elif isinstance(x, numbers.Rational):
        e = sp.Rational(x.numerator, x.denominator)
    elif isinstance(x, numbers.Real):
        if not math.isfinite(float(x)):
            raise DomainError(f"{name} must be finite, got {x!r}")
        e = sp.Rational(repr(float(x)))
    else:
        raise DomainError(f"{name} must be a number or a SymPy expression, got {type(x).__name__}")
    if e.is_number:
        if not e.is_real or not e.is_finite:
            raise DomainError(f"{name} must be a finite real number, got {e}")
        if signed:
            return e
        if e.is_negative or (positive and e.is_zero) or (not allow_zero and e.is_zero):
            raise DomainError(f"{name} must be {'positive' if positive else 'non-negative'}, got {e}"
                              + (" (a variance cannot be negative)" if e.is_negative else ""))
    elif e.is_negative and not signed:
        raise DomainError(f"{name} must be non-negative, got the negative symbol {e}")
    return e


def _layer(layer: Any, name: str = "layer", *, symbolic_ok: bool = False) -> Any:
    if isinstance(layer, sp.Basic) and not layer.is_number:
        if not symbolic_ok:
            raise DomainError(f"{name} must be a concrete int >= 1 here (a symbolic layer needs "
                              f"equal widths given as one scalar), got {layer}")
        if layer.is_integer is False or layer.is_integer is None and not layer.is_Symbol:
            raise DomainError(f"{name} must be an integer, got {layer}")
        return layer
    if isinstance(layer, bool) or not isinstance(layer, (numbers.Integral, sp.Integer)):
        if isinstance(layer, (numbers.Real, sp.Number)) and float(layer) == int(float(layer)) \
                and not isinstance(layer, bool):
            raise DomainError(f"{name} must be an int, got the non-integer type {type(layer).__name__} "
                              f"{layer!r}; pass int({layer!r})")
        raise DomainError(f"{name} must be an int >= 1 (depth counts weight layers), got {layer!r}")
    if int(layer) < 1:
        raise DomainError(f"{name} must be >= 1 (layer 1 is the first weight layer), got {layer}")
    return int(layer)


def _width(w: Any) -> sp.Expr:
    if isinstance(w, sp.Basic) and not w.is_number:
        if w.is_positive is False:
            raise DomainError(f"a symbolic width must be positive, got {w}")
        return w
    if isinstance(w, bool) or not isinstance(w, (numbers.Integral, sp.Integer)):
        raise DomainError(f"widths must be ints >= 1 or SymPy symbols, got {w!r}")
    if int(w) < 1:
        raise DomainError(f"widths must be >= 1 (a layer needs at least one neuron), got {w}")
    return sp.Integer(int(w))


def _widths(widths: Any, layer: int) -> tuple:
    """Hidden widths ``(n_1, ..., n_{layer-1})`` (a scalar means all equal)."""
    if isinstance(widths, (numbers.Integral, sp.Basic)) and not isinstance(widths, bool):
        return (_width(widths),) * (layer - 1)
    try:
        ws = tuple(widths)
    except TypeError:
        raise DomainError(f"widths must be an int, a SymPy symbol or a sequence of them, got {widths!r}") from None
    if len(ws) < layer - 1:
        raise DomainError(f"layer {layer} needs the {layer - 1} hidden widths n_1..n_{layer - 1}, "
                          f"got {len(ws)}")
    return tuple(_width(w) for w in ws[: layer - 1])


def _per_layer(value: Any, count: int, name: str, *, positive: bool) -> tuple:
    """One exact value per weight layer 1..count (a scalar is repeated)."""
    if isinstance(value, (numbers.Number, sp.Basic)):
        vals = (value,) * count
    else:
        try:
            vals = tuple(value)
        except TypeError:
            raise DomainError(f"{name} must be a number or one value per weight layer, got {value!r}") from None
        if len(vals) < count:
            raise DomainError(f"{name} needs one value per weight layer 1..{count}, got {len(vals)}")
        vals = vals[:count]
    return tuple(_exact(v, name, positive=positive) for v in vals)


def _kernel(K: Any, name: str) -> sp.Matrix:
    """An exact symmetric PSD kernel (numeric entries are checked with validate_covariance)."""
    if isinstance(K, sp.MatrixBase):
        M = sp.Matrix(K)
    else:
        arr = np.asarray(K, dtype=object)
        if arr.ndim == 0:
            arr = arr.reshape(1, 1)
        if arr.ndim != 2 or arr.shape[0] != arr.shape[1]:
            raise DomainError(f"{name} must be a square (N, N) matrix, got shape {arr.shape}")
        M = sp.Matrix([[_exact(v, name, signed=True) if not isinstance(v, sp.Basic) else v for v in row]
                       for row in arr.tolist()]) if arr.size else sp.zeros(0, 0)
    if M.rows != M.cols or M.rows < 1:
        raise DomainError(f"{name} must be a non-empty square matrix, got shape {M.shape}")
    if M.is_symbolic():
        if M != M.T:
            raise DomainError(f"{name} must be symmetric")
        return M
    from effth.numerics import validate_covariance

    validate_covariance(np.array(M.tolist(), dtype=float))
    if M != M.T:
        raise DomainError(f"{name} must be exactly symmetric for the exact theory")
    return M


def _first_kernel(K1: Any, gram: Any, cw1: sp.Expr, cb1: sp.Expr) -> sp.Matrix:
    if (K1 is None) == (gram is None):
        raise DomainError("give exactly one of K1 (first-layer kernel) and gram (G^{(0)} = X X^T / n_0)")
    if K1 is not None:
        return _kernel(K1, "K1")
    G0 = _kernel(gram, "gram")
    return G0.applyfunc(lambda g: cb1 + cw1 * g)


# ------------------------------------------------------------------------------ Wick engine


@cache
def _pairings_with_cycles(m: int) -> tuple:
    """All Wick pairings of 2m summed slots with their cycle count against the trace (3.23)."""
    trace = trace_matching(m)
    return tuple((p, cycle_count(p, trace)) for p in enumerate_pairings(range(2 * m)))


def _mono(pairs) -> tuple:
    return tuple(sorted((min(a, b), max(a, b)) for a, b in pairs))


@cache
def _step(mono: tuple, n: sp.Expr, cw: sp.Expr, cb: sp.Expr) -> tuple:
    r"""One exact layer step: :math:`\mathbb E[\prod_k\widehat G^{(\ell+1)}_{p_k}\,|\,\widehat G^{(\ell)}]`.

    Each factor is :math:`C_b+C_W\,n^{-1}\sum_j z_{j;a}z_{j;b}`; the product of the chosen
    :math:`C_W` parts is Wick-contracted given :math:`\widehat G^{(\ell)}` (neurons i.i.d.), each
    pairing weighted by :math:`n^{\mathrm{cyc}-|A|}`.  Returns ``((monomial, coeff), ...)``.
    """
    m = len(mono)
    out: dict = defaultdict(lambda: sp.S.Zero)
    for size in range(m + 1):
        for A in itertools.combinations(range(m), size):
            pref = cb ** (m - size) * cw ** size
            if size == 0:
                out[()] += pref
                continue
            labels = [lab for k in A for lab in mono[k]]
            for pairing, cyc in _pairings_with_cycles(size):
                key = _mono((labels[s], labels[t]) for s, t in pairing)
                out[key] += pref * n ** (cyc - size)
    return tuple((k, v) for k, v in out.items() if v != 0)


def _metric_poly(mono: tuple, layer: int, widths: tuple, cws: tuple, cbs: tuple) -> dict:
    """Expected monomial of layer-``layer`` metrics as a polynomial in layer-1 metrics."""
    poly: dict = {mono: sp.S.One}
    for lay in range(layer, 1, -1):     # from layer lay-1 to lay: width n_{lay-1}, C^{(lay)}
        new: dict = defaultdict(lambda: sp.S.Zero)
        for mo, c in poly.items():
            for mo2, c2 in _step(mo, widths[lay - 2], cws[lay - 1], cbs[lay - 1]):
                new[mo2] += c * c2
        poly = dict(new)
    return poly


def _evaluate(poly: dict, K1: sp.Matrix) -> sp.Expr:
    total = sp.S.Zero
    for mo, c in poly.items():
        total += c * sp.Mul(*[K1[a, b] for a, b in mo])
    return sp.factor(sp.together(total)) if total.free_symbols else sp.nsimplify(total)


def _setup(layer, widths, c_w, c_b, K1, gram):
    layer = _layer(layer)
    ws = _widths(widths, layer)
    cws = _per_layer(c_w, layer, "c_w", positive=True)
    cbs = _per_layer(c_b, layer, "c_b", positive=False)
    K = _first_kernel(K1, gram, cws[0], cbs[0])
    return layer, ws, cws, cbs, K


# ------------------------------------------------------------------------------ single input


@public
def layer_factor(m: int, n: Any = None) -> sp.Expr:
    r"""Per-layer factor :math:`c_{2m}(n)` of the :math:`2m`-point correlator, by cycle counting.

    .. math:: c_{2m}(n)=\frac1{n^m}\sum_{j_1..j_m}\sum_\pi\prod\delta=\sum_\pi n^{\mathrm{cyc}(\pi\cup\pi_0)-m}
              \quad\text{PDLT (3.23), (3.38)–(3.41), (3.45)},

    derived from :func:`effth.algebra.wick.cycle_polynomial` (enumeration of the
    :math:`(2m-1)!!` pairings) for ``m <= MAX_ENUMERATED_M``; it equals the printed product
    :math:`\prod_{s=1}^{m-1}(1+2s/n)` (3.46) (checked in the tests), which is used beyond.

    Parameters
    ----------
    m : int
        Half the number of points, ``m >= 0``.
    n : int or sympy expression, optional
        Width of the layer the sum runs over (default the positive symbol :math:`n`).

    Returns
    -------
    sympy expression
        Expanded polynomial in :math:`1/n`.

    Raises
    ------
    DomainError
        ``m`` not a non-negative int, or a bad width.

    Examples
    --------
    >>> layer_factor(3, 4)                  # (1 + 2/4)(1 + 4/4)
    3
    """
    if isinstance(m, bool) or not isinstance(m, numbers.Integral) or m < 0:
        raise DomainError(f"m must be an int >= 0, got {m!r}")
    n = _width(_N if n is None else n)
    if m <= MAX_ENUMERATED_M:
        return sp.expand(cycle_polynomial(int(m), n))
    return sp.expand(c2m(int(m), n))


@public
def single_input_correlator(m: int, layer: Any, widths: Any, *, c_w: Any = 1, G0: Any = 1) -> sp.Expr:
    r""":math:`G^{(\ell)}_{2m}` of one input, zero biases, exactly (PDLT (3.44)–(3.47)).

    :math:`\mathbb E[z_{i_1}\cdots z_{i_{2m}}]=(\sum_{\rm pairings}\prod\delta)\,G_{2m}^{(\ell)}`
    (3.44) with

    .. math:: G_{2m}^{(\ell)}=\Big[\prod_{\ell'=1}^{\ell-1}c_{2m}(n_{\ell'})\Big]\big(G_2^{(\ell)}\big)^m,
              \qquad G_2^{(\ell)}=\Big[\prod_{\ell'=1}^{\ell}C_W^{(\ell')}\Big]G_2^{(0)}
              \quad(3.15),\ (3.47),

    obtained by iterating the derived one-layer step (3.45)
    :math:`G_{2m}^{(\ell+1)}=c_{2m}(n_\ell)C_W^mG_{2m}^{(\ell)}` from the Gaussian first layer
    (3.34), :math:`G_{2m}^{(1)}=(G_2^{(1)})^m`.  Exact at any widths.

    Parameters
    ----------
    m : int
        ``m >= 0`` (``m = 1`` gives :math:`G_2`).
    layer : int or sympy integer symbol
        :math:`\ell\ge1`.  A symbol (e.g. :data:`effth.algebra.indices.ell`) is allowed when
        ``widths`` is one scalar (equal widths) and ``c_w`` a scalar: then the result is
        :math:`c_{2m}(n)^{\ell-1}C_W^{m\ell}(G_2^{(0)})^m` (3.50).
    widths : int, sympy symbol or sequence
        Hidden widths :math:`n_1..n_{\ell-1}` (a scalar means all equal).
    c_w : number, symbol or sequence, default 1
        :math:`C_W^{(\ell')}` per weight layer (:math:`C_W=1` is criticality, §3.2).
    G0 : number or symbol, default 1
        :math:`G_2^{(0)}=\frac1{n_0}\sum_j x_j^2` (3.19).

    Returns
    -------
    sympy expression

    Raises
    ------
    DomainError
        Bad ``m``, layer, widths or negative ``c_w``/``G0``.

    Examples
    --------
    >>> single_input_correlator(2, 4, (4, 8, 16))     # PDLT §3.3: 1.5 * 1.25 * 1.125
    135/64
    >>> single_input_correlator(2, ell, 10)
    (6/5)**(ell - 1)
    """
    if isinstance(m, bool) or not isinstance(m, numbers.Integral) or m < 0:
        raise DomainError(f"m must be an int >= 0, got {m!r}")
    G0 = _exact(G0, "G0")
    if isinstance(layer, sp.Basic) and not layer.is_number:
        layer = _layer(layer, symbolic_ok=True)
        if not isinstance(widths, (numbers.Integral, sp.Basic)) or isinstance(widths, bool):
            raise DomainError("a symbolic layer needs equal widths given as one scalar")
        n = _width(widths)
        cw = _exact(c_w, "c_w", positive=True)
        return layer_factor(m, n) ** (layer - 1) * cw ** (m * layer) * G0 ** m
    layer = _layer(layer)
    ws = _widths(widths, layer)
    cws = _per_layer(c_w, layer, "c_w", positive=True)
    G = (cws[0] * G0) ** m                    # first layer: Gaussian (3.34)
    for lay in range(1, layer):               # (3.45): layer lay -> lay + 1 sums over n_lay
        G = layer_factor(m, ws[lay - 1]) * cws[lay] ** m * G
    return sp.factor(G) if G.free_symbols else G


@public
def single_input_moment(m: int, layer: Any, widths: Any, *, c_w: Any = 1, c_b: Any = 0,
                        G0: Any = 1) -> sp.Expr:
    r"""Exact single-neuron moment :math:`\mathbb E[(z^{(\ell)}_i)^{2m}]` for one input.

    With ``c_b = 0`` this is :math:`(2m-1)!!\,G_{2m}^{(\ell)}` ((3.44) with all indices equal:
    every one of the :math:`(2m-1)!!` pairings contributes, e.g. :math:`\mathbb E[z^4]=3G_4`),
    from :func:`single_input_correlator`; a symbolic layer is allowed as there.  With
    :math:`C_b\neq0` (outside the book's chapter 3) it is computed by the exact Wick engine,
    :func:`preactivation_moment`, from :math:`K^{(1)}=C_b^{(1)}+C_W^{(1)}G_2^{(0)}`.  For
    ``m = 2`` this is the finite-width four-point function at all orders in :math:`1/n`:
    :math:`\mathbb E[z^4]=3[(K^{(\ell)})^2+V^{(\ell)}/n_{\ell-1}]`.

    Parameters
    ----------
    m, layer, widths, c_w, G0
        As in :func:`single_input_correlator`.
    c_b : number, symbol or sequence, default 0
        :math:`C_b^{(\ell')}` per weight layer.

    Returns
    -------
    sympy expression

    Examples
    --------
    >>> single_input_moment(2, 4, (4, 8, 16))        # PDLT §3.3: 3 G_4 = 6.328125
    405/64
    >>> single_input_moment(1, 3, 5, c_w=1, c_b=1)   # K^{(3)} = (C_b + G0) + 2 C_b
    4
    """
    zero_bias = isinstance(c_b, (numbers.Number, sp.Basic)) and _exact(c_b, "c_b") == 0
    if not zero_bias and not isinstance(c_b, (numbers.Number, sp.Basic)):
        zero_bias = all(_exact(v, "c_b") == 0 for v in c_b)
    if zero_bias:
        return math.prod(range(2 * m - 1, 0, -2)) * single_input_correlator(m, layer, widths, c_w=c_w, G0=G0)
    layer = _layer(layer)
    cws = _per_layer(c_w, layer, "c_w", positive=True)
    cbs = _per_layer(c_b, layer, "c_b", positive=False)
    K1 = sp.Matrix([[cbs[0] + cws[0] * _exact(G0, "G0")]])
    return preactivation_moment([0] * (2 * m), layer=layer, widths=widths, c_w=c_w, c_b=c_b, K1=K1)


@public
def single_input_cumulants(layer: Any, widths: Any, *, c_w: Any = 1, G0: Any = 1) -> dict:
    r"""Exact connected correlators of one neuron, one input, zero biases (PDLT (3.29), (3.57)).

    Returns the single-neuron cumulants built from (3.47),

    * ``"kappa4"`` :math:`=\mathbb E[z^4]|_c=3\,(G_4-G_2^2)` (3.29), :math:`=3[\prod c_4-1]G_2^2`;
    * ``"kappa6"`` :math:`=15\,(G_6-3G_2G_4+2G_2^3)` (1.61) with (3.57)'s combination;
    * ``"G4_minus_G2sq"`` :math:`=G_4-G_2^2` (3.28), which is also the intralayer correlation
      (3.30) and :math:`V^{(\ell)}/n_{\ell-1}`;
    * ``"G6_connected"`` :math:`=G_6-3G_2G_4+2G_2^3` (3.57).

    All exact at any width (the book's :math:`2(\ell-1)/n` and :math:`12r^2` are their leading
    terms).  Arguments as in :func:`single_input_correlator` (a symbolic layer is allowed).

    Returns
    -------
    dict of str -> sympy expression

    Examples
    --------
    >>> single_input_cumulants(5, 10)["G4_minus_G2sq"]        # PDLT §3.3: 1.2^4 - 1
    671/625
    """
    G = {k: single_input_correlator(k, layer, widths, c_w=c_w, G0=G0) for k in (1, 2, 3)}
    g4c = G[2] - G[1] ** 2
    g6c = G[3] - 3 * G[1] * G[2] + 2 * G[1] ** 3
    simp = (lambda e: sp.factor(e)) if any(v.free_symbols for v in G.values()) else (lambda e: e)
    return {"kappa4": simp(3 * g4c), "kappa6": simp(15 * g6c), "G4_minus_G2sq": simp(g4c),
            "G6_connected": simp(g6c)}


@public
def observable_variance(layer: Any, widths: Any, *, c_w: Any = 1, G0: Any = 1) -> sp.Expr:
    r"""Exact :math:`\mathrm{Var}[\mathcal O^{(\ell)}]`, :math:`\mathcal O^{(\ell)}=\frac1{n_\ell}\sum_jz_j^{(\ell)}z_j^{(\ell)}` (PDLT (3.31)–(3.33)).

    .. math:: \mathrm{Var}[\mathcal O^{(\ell)}]=\frac2{n_\ell}G_4^{(\ell)}+\big[G_4^{(\ell)}-(G_2^{(\ell)})^2\big]
              =\Big[\prod_{\ell'=1}^{\ell}c_4(n_{\ell'})-1\Big](G_2^{(\ell)})^2,

    the second line of (3.33) (the book's :math:`\frac{2\ell}n` is its leading term).  Derived
    as :math:`\mathbb E[\widehat G^{(\ell+1)2}]/C_W^2-(G_2^{(\ell)})^2` by the Wick engine (the sum
    over :math:`j,k` of (3.33) is the layer step).

    Parameters
    ----------
    layer : int
        :math:`\ell\ge1`; the observable lives in layer :math:`\ell` of width :math:`n_\ell`.
    widths : int, symbol or sequence
        :math:`n_1..n_\ell` (note: *including* :math:`n_\ell`).
    c_w, G0
        As in :func:`single_input_correlator`.

    Returns
    -------
    sympy expression

    Examples
    --------
    >>> observable_variance(5, 10)                     # PDLT §3.3: 1.2^5 - 1
    4651/3125
    """
    layer = _layer(layer)
    ws = _widths(widths, layer + 1)
    cws = _per_layer(c_w, layer, "c_w", positive=True)
    cws = cws + (sp.S.One,)                 # a unit C_W in a fictitious layer l+1: G_hat = O
    G2 = single_input_correlator(1, layer, ws, c_w=cws[:layer], G0=G0)
    K1 = sp.Matrix([[cws[0] * _exact(G0, "G0")]])
    second = _evaluate(_metric_poly(((0, 0), (0, 0)), layer + 1, ws, cws, (sp.S.Zero,) * (layer + 1)), K1)
    out = second - G2 ** 2
    return sp.factor(out) if out.free_symbols else out


@public
def double_scaling_limit(m: int, r: Any = None, *, G2: Any = 1) -> sp.Expr:
    r"""The interpolating (double-scaling) limit :math:`G_{2m}^{(L)}\to e^{m(m-1)r}(G_2^{(L)})^m` (PDLT (3.55)).

    The limit :math:`n,L\to\infty` at fixed :math:`r=L/n` (3.52) of (3.50), from
    :math:`c_{2m}=1+m(m-1)/n+O(1/n^2)` (3.53), derived here as
    :math:`\lim_{n\to\infty}n\,[c_{2m}(n)-1]` of :func:`layer_factor`.  **Not exact** at finite
    :math:`n, L`; it fails at fixed :math:`n,L` once :math:`m` is large (footnote 8).

    Parameters
    ----------
    m : int
    r : number or sympy expression, optional
        Depth-to-width ratio :math:`L/n` (default the positive symbol :math:`r`).
    G2 : number or sympy expression
        :math:`G_2^{(L)}`.

    Returns
    -------
    sympy expression

    Examples
    --------
    >>> double_scaling_limit(2)
    exp(2*r)
    """
    r = _R if r is None else sp.sympify(r)
    slope = sp.limit(_N * (layer_factor(m, _N) - 1), _N, sp.oo)
    return sp.exp(slope * r) * sp.sympify(G2) ** m


# ------------------------------------------------------------------------------ general engine


@public
def metric_moment(pairs: Sequence[tuple[int, int]], *, layer: int, widths: Any, c_w: Any = 1,
                  c_b: Any = 0, K1: Any = None, gram: Any = None) -> sp.Expr:
    r"""Exact :math:`\mathbb E\big[\prod_k\widehat G^{(\ell)}_{a_kb_k}\big]` of the stochastic metric.

    :math:`\widehat G^{(\ell)}_{\alpha\beta}=C_b^{(\ell)}+\frac{C_W^{(\ell)}}{n_{\ell-1}}\sum_j
    z^{(\ell-1)}_{j;\alpha}z^{(\ell-1)}_{j;\beta}` is the conditional covariance of layer
    :math:`\ell` (the bracket of (3.11), (3.20), (3.36) before the expectation).  Iterates the
    derived exact step (Wick pairings of the summed slots weighted by
    :math:`n^{\mathrm{cyc}-m}`, PDLT (3.23), (3.39)–(3.41), plus the bias terms) down to
    :math:`\widehat G^{(1)}=K^{(1)}`.  Exact for any widths, biases and inputs.

    Parameters
    ----------
    pairs : sequence of (int, int)
        Sample positions :math:`(a_k, b_k)` of each factor.
    layer : int
        :math:`\ell\ge1`.
    widths : int, symbol or sequence
        Hidden widths :math:`n_1..n_{\ell-1}`.
    c_w, c_b : number, symbol or sequence
        :math:`C_W^{(\ell')}>0`, :math:`C_b^{(\ell')}\ge0` per weight layer ``1..layer``.
    K1, gram : (N, N) array_like or sympy Matrix
        Exactly one: the first-layer kernel :math:`K^{(1)}`, or the input Gram matrix
        :math:`G^{(0)}=XX^T/n_0` with :math:`K^{(1)}=C_b^{(1)}+C_W^{(1)}G^{(0)}` (3.9).
        Numeric kernels must be PSD (:func:`effth.numerics.validate_covariance`).

    Returns
    -------
    sympy expression

    Raises
    ------
    DomainError
        Non-PSD or non-square kernel, sample positions out of range, bad widths, layer or
        variances.

    Examples
    --------
    >>> metric_moment([(0, 0), (0, 0)], layer=3, widths=4, K1=[[1]])     # (1 + 2/4)^2
    9/4
    """
    layer, ws, cws, cbs, K = _setup(layer, widths, c_w, c_b, K1, gram)
    mono = _mono(_check_pairs(pairs, K.rows))
    return _evaluate(_metric_poly(mono, layer, ws, cws, cbs), K)


def _check_pairs(pairs, N):
    try:
        out = [(int(a), int(b)) for a, b in pairs]
    except (TypeError, ValueError):
        raise DomainError(f"pairs must be a sequence of (int, int) sample positions, got {pairs!r}") from None
    for a, b in out:
        if not (0 <= a < N and 0 <= b < N):
            raise DomainError(f"sample position out of range 0..{N - 1}: {(a, b)}")
    return out


@public
def preactivation_moment(neurons: Sequence[Any], samples: Sequence[int] | None = None, *, layer: int,
                         widths: Any, c_w: Any = 1, c_b: Any = 0, K1: Any = None,
                         gram: Any = None) -> sp.Expr:
    r"""Exact :math:`\mathbb E\big[z^{(\ell)}_{i_1;\alpha_1}\cdots z^{(\ell)}_{i_{M};\alpha_{M}}\big]`, any neurons, inputs, biases.

    Wick's theorem for the conditionally Gaussian layer (3.34), (3.44): a sum over pairings
    of the :math:`M` slots with :math:`\delta_{i_{k_1}i_{k_2}}` (only pairings joining equal
    neuron labels survive) of :func:`metric_moment` of the paired samples.  Odd :math:`M` give 0
    (3.6).  For one input and :math:`C_b=0` this is
    :math:`(\sum_{\rm pairings}\prod\delta)\,G_{2m}^{(\ell)}` (3.44), e.g.
    :math:`\mathbb E[z_1^2z_2^2]=G_4`, :math:`\mathbb E[z_1^4]=3G_4`.

    Parameters
    ----------
    neurons : sequence of hashable
        Neuron label :math:`i_k` of each slot (only equality matters).
    samples : sequence of int, optional
        Sample position :math:`\alpha_k` of each slot (default all 0: a single input).
    layer, widths, c_w, c_b, K1, gram
        As in :func:`metric_moment`.

    Returns
    -------
    sympy expression

    Raises
    ------
    DomainError
        Mismatched lengths, bad kernel or hyperparameters.

    Examples
    --------
    >>> preactivation_moment([0, 0, 1, 1], layer=3, widths=4, K1=[[1]])   # G_4 = (3/2)^2
    9/4
    """
    layer, ws, cws, cbs, K = _setup(layer, widths, c_w, c_b, K1, gram)
    neurons = list(neurons)
    samples = [0] * len(neurons) if samples is None else [int(s) for s in samples]
    if len(samples) != len(neurons):
        raise DomainError(f"neurons and samples need equal lengths, got {len(neurons)} and {len(samples)}")
    for s in samples:
        if not 0 <= s < K.rows:
            raise DomainError(f"sample position {s} out of range 0..{K.rows - 1}")
    if len(neurons) % 2:
        return sp.S.Zero
    counts: dict = defaultdict(int)
    for pairing in enumerate_pairings(range(len(neurons))):
        if all(neurons[s] == neurons[t] for s, t in pairing):
            counts[_mono((samples[s], samples[t]) for s, t in pairing)] += 1
    total = sp.S.Zero
    for mono, c in counts.items():
        total += c * _evaluate(_metric_poly(mono, layer, ws, cws, cbs), K)
    return sp.factor(total) if total.free_symbols else total


@public
def exact_vertex(*, layer: int, widths: Any, c_w: Any = 1, c_b: Any = 0, K1: Any = None,
                 gram: Any = None) -> sp.Array:
    r"""Exact :math:`V^{(\ell)}_{(\alpha_1\alpha_2)(\alpha_3\alpha_4)}=n_{\ell-1}\mathrm{Cov}(\widehat G_{\alpha_1\alpha_2},\widehat G_{\alpha_3\alpha_4})` (PDLT (4.76)).

    From :func:`metric_moment` (no recursion, no truncation); :math:`V^{(1)}=0`.  The
    connected four-point function is then exactly PDLT (4.77) (see the module docstring).

    Parameters
    ----------
    layer, widths, c_w, c_b, K1, gram
        As in :func:`metric_moment`.

    Returns
    -------
    sympy.Array of shape (N, N, N, N)

    Examples
    --------
    >>> exact_vertex(layer=2, widths=3, K1=[[2]])[0, 0, 0, 0]         # C_W^2 (K13 K24 + K14 K23)
    8
    """
    layer, ws, cws, cbs, K = _setup(layer, widths, c_w, c_b, K1, gram)
    N = K.rows
    out = sp.MutableDenseNDimArray.zeros(N, N, N, N)
    if layer == 1:
        return sp.ImmutableDenseNDimArray(out)
    n_prev = ws[layer - 2]
    mean = {}
    for a, b in itertools.combinations_with_replacement(range(N), 2):
        mean[(a, b)] = _evaluate(_metric_poly(((a, b),), layer, ws, cws, cbs), K)
    done: dict = {}
    for a, b, c, d in itertools.product(range(N), repeat=4):
        p, q = _mono([(a, b)])[0], _mono([(c, d)])[0]
        key = tuple(sorted((p, q)))
        if key not in done:
            second = _evaluate(_metric_poly(_mono([p, q]), layer, ws, cws, cbs), K)
            v = n_prev * (second - mean[p] * mean[q])
            done[key] = sp.factor(v) if v.free_symbols else v
        out[a, b, c, d] = done[key]
    return sp.ImmutableDenseNDimArray(out)


# ------------------------------------------------------------------------------ recursions


def _layer_symbols():
    a = [alpha(k) for k in range(1, 5)]
    return a, width(ell), width(ell - 1), _cw_sym(ell + 1), _cb_sym(ell + 1)


@public
def kernel_recursion() -> sp.Eq:
    r"""Derived :math:`K^{(\ell+1)}_{\alpha_1\alpha_2}=C_b^{(\ell+1)}+C_W^{(\ell+1)}K^{(\ell)}_{\alpha_1\alpha_2}` (PDLT (3.14) with biases; (4.118) at :math:`\sigma=z`).

    Derived from the exact one-layer step of :func:`metric_moment` for one factor
    (:math:`\mathbb E[\widehat G^{(\ell+1)}]`); exact at any width (no :math:`G^{\{1\}}`).

    Returns
    -------
    sympy.Eq
        Print with :func:`effth.printing.latex`.

    Examples
    --------
    >>> from effth.printing import latex
    >>> latex(kernel_recursion())
    '{K^{(\\ell + 1)}_{\\alpha_{1}\\alpha_{2}}} = {K^{(\\ell)}_{\\alpha_{1}\\alpha_{2}}} {C_{W}^{(\\ell + 1)}} + {C_{b}^{(\\ell + 1)}}'
    """
    a, n_l, _, cw, cb = _layer_symbols()
    rhs = sp.S.Zero
    for mono, coeff in _step(((0, 1),), n_l, cw, cb):
        rhs += coeff * sp.Mul(*[Kernel(a[x], a[y], ell) for x, y in mono])
    return sp.Eq(Kernel(a[0], a[1], ell + 1), rhs, evaluate=False)


@public
def vertex_recursion(exact: bool = True) -> sp.Eq:
    r"""Derived four-point-vertex recursion of deep linear networks with biases.

    :math:`V^{(\ell+1)}_{(12)(34)}=n_\ell\big(\mathbb E[\widehat G'_{12}\widehat G'_{34}]
    -\mathbb E[\widehat G'_{12}]\mathbb E[\widehat G'_{34}]\big)` (PDLT (4.76)) with the exact
    two-factor layer step (three Wick pairings of the summed slots, weights
    :math:`n_\ell^0, n_\ell^{-1}, n_\ell^{-1}` by cycle counting, plus bias terms) and the
    inductive hypothesis :math:`\mathbb E[\widehat G_{ab}\widehat G_{cd}]=K_{ab}K_{cd}+V_{(ab)(cd)}/n_{\ell-1}`:

    .. math:: V^{(\ell+1)}_{(12)(34)}={C_W^{(\ell+1)}}^2\Big[K_{13}K_{24}+K_{14}K_{23}
              +\frac{n_\ell}{n_{\ell-1}}V_{(12)(34)}+\frac{1}{n_{\ell-1}}\big(V_{(13)(24)}+V_{(14)(23)}\big)\Big].

    The biases drop out (they only shift :math:`K`).  ``exact=True`` is exact at any width
    (derived here; checked against 4·10⁶ simulated networks).  ``exact=False`` keeps the leading order of the :math:`1/n`
    expansion at fixed :math:`n_\ell/n_{\ell-1}`, which is PDLT (4.119) with
    :math:`\sigma(z)=z` (the dropped term is part of :math:`V^{\{1\}}`).  Single input,
    :math:`C_b=0`: :math:`V'=C_W^2[2K^2+(n_\ell+2)V/n_{\ell-1}]`, i.e. (3.24).

    Parameters
    ----------
    exact : bool, default True

    Returns
    -------
    sympy.Eq
        Print with :func:`effth.printing.latex`.
    """
    a, n_l, n_p, cw, cb = _layer_symbols()
    eps = sp.Symbol("epsilon", positive=True)       # order counting: 1/n_{l-1} -> eps / n_{l-1}

    def expect(mono):
        # E[prod G_hat^{(l)}] for one or two factors, exactly through V (4.76)
        if len(mono) == 0:
            return sp.S.One
        if len(mono) == 1:
            (x, y), = mono
            return Kernel(a[x], a[y], ell)
        (x, y), (u, v) = mono
        return (Kernel(a[x], a[y], ell) * Kernel(a[u], a[v], ell)
                + eps * FourPointVertex(a[x], a[y], a[u], a[v], ell) / n_p)

    second = sum(c * expect(mo) for mo, c in _step(((0, 1), (2, 3)), n_l, cw, cb))
    first = [sum(c * expect(mo) for mo, c in _step((p,), n_l, cw, cb)) for p in ((0, 1), (2, 3))]
    rhs = sp.expand(n_l * (second - first[0] * first[1]))
    if not exact:
        # leading order at fixed ratio n_l / n_{l-1}: substitute n_l = rho * n_{l-1} / eps
        rho = sp.Symbol("rho", positive=True)
        lead = sp.expand(rhs.subs(n_l, rho * n_p / eps))
        lead = sp.limit(lead, eps, 0)
        rhs = sp.expand(lead.subs(rho, n_l / n_p))
    rhs = sp.expand(rhs.subs(eps, 1))
    return sp.Eq(FourPointVertex(a[0], a[1], a[2], a[3], ell + 1), sp.factor_terms(rhs), evaluate=False)


# ------------------------------------------------------------------------------ numerics


def _float_per_layer(value, count, name, positive):
    return np.array([float(v) for v in _per_layer(value, count, name, positive=positive)])


@public
def deep_linear_flow(gram: Any = None, *, K1: Any = None, depth: int, widths: Any, c_w: Any = 1.0,
                     c_b: Any = 0.0, exact: bool = True) -> dict:
    r"""Numeric kernel and four-point vertex of every layer :math:`1..L` (float64).

    Iterates the derived recursions (:func:`kernel_recursion`, :func:`vertex_recursion`):
    :math:`K^{(\ell+1)}=C_b^{(\ell+1)}+C_W^{(\ell+1)}K^{(\ell)}` (3.14)/(4.118) and the exact
    (``exact=True``) or leading-order ((4.119), ``exact=False``) vertex recursion, from
    :math:`K^{(1)}=C_b^{(1)}+C_W^{(1)}G^{(0)}` (3.9)–(3.10) and :math:`V^{(1)}=0`.
    With ``exact=True`` the result equals :func:`exact_vertex` (tested) and the simulator's
    :math:`n_{\ell-1}\mathrm{Cov}(\widehat G)` without any :math:`1/n` truncation.

    Parameters
    ----------
    gram : (N, N) array_like, optional
        Input Gram matrix :math:`G^{(0)}_{\alpha\beta}=\frac1{n_0}\sum_ix_{i;\alpha}x_{i;\beta}`.
    K1 : (N, N) array_like, optional
        First-layer kernel instead of ``gram`` (exactly one of the two).
    depth : int
        Number of weight layers :math:`L\ge1`.
    widths : int or sequence of int
        Hidden widths :math:`n_1..n_{L-1}`.
    c_w, c_b : float or sequence of float
        Per weight layer ``1..L`` (as in :class:`effth.MLP`); ``c_w > 0``, ``c_b >= 0``.
    exact : bool, default True

    Returns
    -------
    dict
        ``"K"``: ndarray (L, N, N), ``"V"``: ndarray (L, N, N, N, N), index ``[l - 1]`` for
        layer ``l``; ``"V_over_n"``: :math:`V^{(\ell)}/n_{\ell-1}` (the connected 4-pt scale,
        0 at layer 1).

    Raises
    ------
    DomainError
        Non-PSD kernel, negative or zero ``c_w``, negative ``c_b``, widths < 1, non-int depth.

    Examples
    --------
    >>> out = deep_linear_flow(K1=[[1.0]], depth=3, widths=4)
    >>> float(out["V"][2, 0, 0, 0, 0])                       # 4 [(1 + 2/4)^2 - 1]
    5.0
    """
    depth = _layer(depth, "depth")
    if isinstance(widths, (numbers.Integral,)) and not isinstance(widths, bool):
        ws = (_width(widths),) * (depth - 1)
    else:
        ws = _widths(widths, depth)
    if any(not w.is_number for w in ws):
        raise DomainError("deep_linear_flow is numeric: widths must be ints (use exact_vertex for symbols)")
    nw = [float(w) for w in ws]
    cw = _float_per_layer(c_w, depth, "c_w", True)
    cb = _float_per_layer(c_b, depth, "c_b", False)
    from effth.numerics import validate_covariance

    if (K1 is None) == (gram is None):
        raise DomainError("give exactly one of gram (G^{(0)} = X X^T / n_0) and K1")
    if K1 is not None:
        K = validate_covariance(K1)
    else:
        K = cb[0] + cw[0] * validate_covariance(gram)
    if K.ndim != 2:
        raise DomainError(f"the kernel must be one (N, N) matrix, got shape {K.shape}")
    N = K.shape[0]
    Ks, Vs = [K], [np.zeros((N,) * 4)]
    V = Vs[0]
    for lay in range(1, depth):          # layer lay -> lay + 1
        n_l = nw[lay - 1]
        KK = np.einsum("ac,bd->abcd", K, K) + np.einsum("ad,bc->abcd", K, K)
        if lay == 1:
            V = cw[lay] ** 2 * KK          # V^{(1)} = 0: no n_0 enters
        else:
            n_p = nw[lay - 2]
            V = cw[lay] ** 2 * (KK + n_l / n_p * V + (exact / n_p) * (
                np.einsum("acbd->abcd", V) + np.einsum("adbc->abcd", V)))
        K = cb[lay] + cw[lay] * K
        Ks.append(K)
        Vs.append(V)
    V_over_n = np.stack([np.zeros((N,) * 4)] + [Vs[k] / nw[k - 1] for k in range(1, depth)])
    return {"K": np.stack(Ks), "V": np.stack(Vs), "V_over_n": V_over_n}


@public
def single_input_vertex(layer: Any, widths: Any, *, c_w: Any = 1, c_b: Any = 0, K1: Any = 1) -> sp.Expr:
    r"""Exact single-input :math:`V^{(\ell)}` (PDLT (4.76)) as a function of :math:`\ell`, with biases.

    Solves the exact recursion (:func:`vertex_recursion`) for one input,
    :math:`V^{(\ell+1)}=C_W^2\big[2(K^{(\ell)})^2+\frac{n_\ell+2}{n_{\ell-1}}V^{(\ell)}\big]`,
    :math:`V^{(1)}=0`, :math:`K^{(\ell+1)}=C_b+C_WK^{(\ell)}`.  For a symbolic layer (equal widths
    :math:`n`, constant :math:`C_W, C_b`) the solution is

    .. math:: V^{(\ell)}=2C_W^2\sum_{k=1}^{\ell-1}(K^{(k)})^2\big[C_W^2(1+2/n)\big]^{\ell-1-k},

    summed in closed form by SymPy when :math:`C_b=0` or :math:`C_W=1` (otherwise returned as
    an unevaluated :class:`sympy.Sum`; call ``.doit()`` for SymPy's large piecewise form).
    At :math:`C_b=0`:
    :math:`V^{(\ell)}=n[(1+2/n)^{\ell-1}-1](K^{(\ell)})^2` (equivalent to (3.25), (3.28)); at
    criticality :math:`V/(nK^2)=2(\ell-1)/n+O(1/n^2)`.

    Parameters
    ----------
    layer : int or sympy integer symbol
    widths : int, symbol, or sequence (a symbolic layer needs one scalar)
    c_w, c_b : number or symbol (sequence allowed for a concrete layer)
    K1 : number or symbol
        :math:`K^{(1)}`.

    Returns
    -------
    sympy expression

    Examples
    --------
    >>> import sympy as sp
    >>> n = sp.Symbol("n", positive=True)
    >>> sp.simplify(single_input_vertex(ell, n) - n*((1 + 2/n)**(ell - 1) - 1)) == 0
    True
    """
    K1 = _exact(K1, "K1")
    if isinstance(layer, sp.Basic) and not layer.is_number:
        layer = _layer(layer, symbolic_ok=True)
        if not isinstance(widths, (numbers.Integral, sp.Basic)) or isinstance(widths, bool):
            raise DomainError("a symbolic layer needs equal widths given as one scalar")
        n = _width(widths)
        cw = _exact(c_w, "c_w", positive=True)
        cb = _exact(c_b, "c_b")
        k = sp.Dummy("k", integer=True, positive=True)
        # K^{(k)} solved from the derived kernel recursion (rsolve-free: geometric series)
        Kk = _kernel_closed(k, K1, cw, cb)
        b = sp.Dummy("b", positive=True)            # b = c_4(n) = 1 + 2/n, kept whole
        summand = sp.expand(Kk ** 2 * cw ** (2 * (layer - 1 - k)) * b ** (layer - 1 - k))
        if cb != 0 and cw != 1:         # closed form exists but is a large Piecewise: keep the sum
            return 2 * cw ** 2 * sp.Sum(summand.subs(b, 1 + 2 / n), (k, 1, layer - 1))
        V = sp.simplify(2 * cw ** 2 * sp.summation(summand, (k, 1, layer - 1)))
        return sp.simplify(V.subs(b, 1 + 2 / n))
    layer = _layer(layer)
    ws = _widths(widths, layer)
    cws = _per_layer(c_w, layer, "c_w", positive=True)
    cbs = _per_layer(c_b, layer, "c_b", positive=False)
    K, V = K1, sp.S.Zero
    for lay in range(1, layer):
        n_l = ws[lay - 1]
        V = cws[lay] ** 2 * (2 * K ** 2 + ((n_l + 2) / ws[lay - 2] * V if lay > 1 else 0))
        K = cbs[lay] + cws[lay] * K
    return sp.factor(V) if V.free_symbols else V


def _kernel_closed(k, K1, cw, cb):
    r""":math:`K^{(k)}` from :math:`K^{(k+1)}=C_b+C_WK^{(k)}` (3.14 with biases), closed in :math:`k`."""
    if cw == 1:
        return K1 + cb * (k - 1)
    return cw ** (k - 1) * K1 + cb * (cw ** (k - 1) - 1) / (cw - 1)
