r"""Derived layer recursions of the initialization ensemble: :math:`K`, :math:`V`, :math:`G^{\{1\}}`.

:func:`derive_initialization` runs the generic pipeline of :mod:`effth.pdlt.derivation.pipeline`
(forward equation → Wick over :math:`W^{(\ell+1)}, b^{(\ell+1)}` → coincidence split of the
neuron sums → cumulant (Edgeworth) expansion of the layer-:math:`\ell` expectations →
factorization into single-neuron atoms) on the statistic that *defines* each object:

=========  ==========================================================================  ==========
statistic  defining statistic of layer :math:`\ell+1`                                   book
=========  ==========================================================================  ==========
``"K"``    :math:`\mathbb E[z_{i;\alpha_1}z_{i;\alpha_2}]` at :math:`O(1)`             (4.118)
``"G1"``   :math:`n_\ell\times` the :math:`O(1/n)` part of the same moment (PDLT (4.104))  (4.115)
``"V"``    :math:`n_\ell\,\mathbb E[z_{i;\alpha_1}z_{i;\alpha_2}z_{k;\alpha_3}z_{k;\alpha_4}]\big|_c`,
           :math:`i\ne k` (PDLT (4.76)–(4.77)), at :math:`O(1)`                            (4.119)
=========  ==========================================================================  ==========

The result is a :class:`Recursion`: the layer-:math:`(\ell+1)` component as a SymPy expression
in layer-:math:`\ell` tensors (``Kernel``, ``FourPointVertex``, ``NLOMetric`` at layer
:math:`\ell`), derivative atoms :math:`\langle\sigma^{(a)}_{\alpha}\cdots\rangle_{K^{(\ell)}}`
and the hyperparameters :math:`C_W^{(\ell+1)}, C_b^{(\ell+1)}`.  The Edgeworth form has no
inverse kernel (the book's (4.115), (4.118), (4.119) after Gaussian integration by parts); the derivative sums :math:`\sum_\gamma` collapse onto the external
labels, so the components carry no dummy indices.

**Spectator check.**  The widths enter only as :math:`n_\ell/n_{\ell-1}`; the derivation checks
this (after :math:`n_\ell\to\rho\,n_{\ell-1}` no :math:`n_{\ell-1}` survives) and stores the
ratio as the symbol :data:`RATIO` :math:`=n_\ell/n_{\ell-1}`.
"""

from __future__ import annotations

from effth._signature import public

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np
import sympy as sp

from effth._cache import disk_cached
from effth.algebra.indices import alpha, ell
from effth.algebra.tensors import (FourPointVertex, InverseKernel, Kernel, NLOMetric,
                                   RaisedFourPointVertex, ThreePointVertex)
from effth.printing.structured import expand_structured
from effth.codegen import compile_step
from effth.errors import DomainError, NotDerivedError

from effth.pdlt.derivation.formulas import PrintedRecursion, book_form
from effth.pdlt.derivation.pipeline import (CB, CW, GAMMA, KMAT, N_L, N_PREV, RATIO, XI, Leg,
                                            forward_cumulant, forward_moment, order_coefficient)

__all__ = ["Recursion", "derive_initialization", "RATIO", "initialization_flow", "mlp_flow"]

_TARGET = {"K": (Kernel, 2, "PDLT (4.118)"), "G1": (NLOMetric, 2, "PDLT (4.115)"),
           "V": (FourPointVertex, 4, "PDLT (4.119)")}

#: The residual MLP (PDLT (B.4)): the book's (B.11) and (B.24); G1 and the third cumulant T are
#: derived here with no printed counterpart (T = 0 for odd activations and for gamma = 0).
_RESIDUAL_TARGET = {"K": (Kernel, 2, "PDLT (B.11)"), "G1": (NLOMetric, 2, "the residual (4.115)"),
                    "V": (FourPointVertex, 4, "PDLT (B.24) (plus third-cumulant terms)"),
                    "T": (ThreePointVertex, 3, "no book equation (zero for odd activations)")}


@public
@dataclass(frozen=True)
class Recursion(PrintedRecursion):
    r"""A derived layer recursion :math:`T^{(\ell+1)}_{\alpha_1\ldots}=\mathcal R[K^{(\ell)},V^{(\ell)},G^{\{1\}(\ell)}]`.

    Attributes
    ----------
    statistic : {"K", "V", "G1"}
    expr : sympy expression
        The component with free labels :attr:`labels`; widths only through :data:`RATIO`.
    labels : tuple of sympy symbols
        :math:`(\alpha_1,\alpha_2)` or :math:`(\alpha_1,\ldots,\alpha_4)`.
    tensor : type
        Layer-:math:`(\ell+1)` tensor class of the left-hand side.
    provenance : str
        The book equation this must equal and how it was obtained.
    activation : optional
        Default activation for :meth:`evaluate` (from the ``MLP`` given to the derivation).
    form : {"edgeworth", "book"}
        Derivative atoms without inverse kernel (Gaussian integration by parts), or the book's
        raised-index form (:math:`K^{-1}`, sums over dummies :math:`\beta\in\mathcal D`), obtained
        from the same derivation by Stein's identity; both print in every form
        (:meth:`latex`, ``form=``).
    """

    statistic: str
    expr: sp.Expr
    labels: tuple
    tensor: type
    provenance: str
    activation: Any = None
    form: str = "edgeworth"
    residual: bool = False

    # -- printing ----------------------------------------------------------------------------
    def lhs(self) -> sp.Expr:
        return self.tensor(*self.labels, ell + 1)

    def _edgeworth(self) -> sp.Expr:
        if self.form == "edgeworth":
            return self.expr
        return (_derive_residual if self.residual else _derive)(self.statistic, "edgeworth")[0]

    def __repr__(self) -> str:
        return derivation_repr("Recursion", self.statistic, self.expr, self.provenance,
                               f"form={self.form!r}")

    def _repr_html_(self) -> str:
        return derivation_html("Recursion", self.statistic, self.expr, self.provenance,
                               [("form", self.form), ("labels", len(self.labels))])

    # -- numerics ----------------------------------------------------------------------------
    def components(self, n_samples: int) -> list[tuple]:
        """Canonical index tuples over ``range(n_samples)`` (one per symmetry orbit)."""
        seen, out = set(), []
        for idx in itertools.product(range(n_samples), repeat=len(self.labels)):
            key = self.tensor(*idx).args
            if key not in seen:
                seen.add(key)
                out.append(idx)
        return out

    def _step(self, n_samples: int, activation, method: str, rtol: float):
        comps = self.components(n_samples)
        exprs = [self.expr.xreplace(dict(zip(self.labels, map(sp.Integer, idx)))) for idx in comps]
        if self.form == "book":      # sums over the dataset, the normal-ordered atoms expanded
            exprs = [expand_structured(e, range(n_samples)) for e in exprs]
        inputs = {KMAT: "K", FourPointVertex: "V", NLOMetric: "G1"}
        if self.form == "book":
            inputs[InverseKernel] = "Kinv"
            inputs[RaisedFourPointVertex] = "Vup"
        params = {"C_W": CW, "C_b": CB, "ratio": RATIO}
        if self.residual:
            inputs[ThreePointVertex] = "T"
            params.update(xi=XI, gamma=GAMMA)
        return comps, compile_step({"out": exprs}, inputs, activation=activation,
                                   params=params, method=method, rtol=rtol)

    def evaluate(self, K, V=None, G1=None, T=None, *, activation=None, c_w: float = 1.0,
                 c_b: float = 0.0, ratio: float = 1.0, xi: float = 1.0, gamma: float = 0.0,
                 method: str = "auto", rtol: float = 1e-10) -> np.ndarray:
        r"""Evaluate the layer-:math:`(\ell+1)` tensor on concrete samples.

        Parameters
        ----------
        K : ndarray (N, N)
            :math:`K^{(\ell)}`.
        V : ndarray (N, N, N, N), optional
            :math:`V^{(\ell)}` (zeros if omitted).
        G1 : ndarray (N, N), optional
            :math:`G^{\{1\}(\ell)}` (zeros if omitted).
        T : ndarray (N, N, N), optional
            Residual recursions only: the three-point vertex
            :math:`T^{(\ell)}_{(\alpha_1\alpha_2)\alpha_3}` (zeros if omitted).
        activation : str or Activation, optional
            Defaults to the one given at derivation.
        c_w, c_b, ratio : float
            :math:`C_W^{(\ell+1)}`, :math:`C_b^{(\ell+1)}`, :math:`n_\ell/n_{\ell-1}`.
        xi, gamma : float
            Residual recursions only: :math:`\xi^{(\ell+1)}`, :math:`\gamma^{(\ell+1)}` (PDLT (B.4)).

        Returns
        -------
        ndarray (N, N) or (N, N, N, N)
        """
        K = np.asarray(K, dtype=float)
        N = K.shape[-1]
        V = np.zeros((N,) * 4) if V is None else np.asarray(V, dtype=float)
        G1 = np.zeros((N, N)) if G1 is None else np.asarray(G1, dtype=float)
        T = np.zeros((N,) * 3) if T is None else np.asarray(T, dtype=float)
        if not self.residual and (xi != 1.0 or gamma != 0.0 or np.any(T != 0)):
            raise DomainError("xi=, gamma= and T= belong to the residual recursions: derive them "
                              "with derive_initialization(statistic, residual=True)")
        act = activation if activation is not None else self.activation
        if act is None:
            raise DomainError("no activation given (pass activation= or derive with an MLP)")
        try:
            comps, step = self._step(N, act, method, rtol)
            arrays = dict(K=K, V=V, G1=G1)
            extra = {}
            if self.residual:
                arrays["T"] = T
                extra = dict(xi=xi, gamma=gamma)
            if self.form == "book":
                Ki = np.linalg.inv(K)
                arrays["Kinv"] = Ki
                arrays["Vup"] = np.einsum("ai,bj,ck,dl,ijkl->abcd", Ki, Ki, Ki, Ki, V)
            vals = step(**arrays, C_W=c_w, C_b=c_b, ratio=ratio, **extra)["out"]
        except NotDerivedError:
            if self.form == "book":
                raise
            # kinked σ: σ^{(k)} with k > 2 are not functions; use the Stein-equivalent book form
            book = derive_initialization(self.statistic, form="book", residual=self.residual)
            kw = dict(T=T, xi=xi, gamma=gamma) if self.residual else {}
            return book.evaluate(K, V, G1, activation=act, c_w=c_w, c_b=c_b, ratio=ratio,
                                 method=method, rtol=rtol, **kw)
        out = np.empty((N,) * len(self.labels))
        canon = {self.tensor(*idx).args: v for idx, v in zip(comps, np.asarray(vals).reshape(-1))}
        for idx in itertools.product(range(N), repeat=len(self.labels)):
            out[idx] = canon[self.tensor(*idx).args]
        return out


def _terms(expr: sp.Expr) -> int:
    return len(sp.Add.make_args(sp.expand(expr))) if expr != 0 else 0


def _clip(text: str, n: int = 90) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[:n - 3] + "..."


def derivation_repr(kind: str, statistic: str, expr: sp.Expr, provenance: str, extra: str = "") -> str:
    """One-line summary of a derived recursion (never the expression itself)."""
    more = f", {extra}" if extra else ""
    return f"{kind}({statistic!r}, {_terms(expr)} terms{more}, {_clip(provenance)!r})"


def derivation_html(kind: str, statistic: str, expr: sp.Expr, provenance: str, rows: list) -> str:
    """A small HTML table for a derived recursion (the equation itself is ``_repr_latex_``)."""
    from effth._display import html_table

    rows = [("statistic", statistic), ("terms", _terms(expr))] + list(rows) + [("provenance", provenance)]
    return html_table(kind, rows)


def ratio_latex(lhs: sp.Expr, expr: sp.Expr) -> str:
    r"""``lhs = rhs`` as LaTeX with the :math:`n_\ell/n_{\ell-1}` terms grouped in one bracket."""
    from effth.printing import latex

    e = sp.expand(expr)
    lead = e.subs(RATIO, 0)
    rest = sp.expand((e - lead) / RATIO)
    parts = [latex(lead)] if lead != 0 else []
    if rest != 0:
        parts.append(rf"\frac{{n_{{\ell}}}}{{n_{{\ell-1}}}}\Big[{latex(rest)}\Big]")
    return f"{latex(lhs)} = {' + '.join(parts) or '0'}"


def _ratio_form(expr: sp.Expr, statistic: str) -> sp.Expr:
    r"""Rewrite with :math:`n_\ell=\rho\,n_{\ell-1}` and check that no width survives (spectators)."""
    e = sp.expand(sp.expand(expr).subs(N_L, RATIO * N_PREV))
    if e.has(N_PREV) or e.has(N_L):
        raise AssertionError(f"{statistic}: widths do not cancel into n_l/n_(l-1): {e}")
    return e


@disk_cached
def _derive(statistic: str, form: str = "edgeworth") -> tuple:
    if form == "book":        # the same derivation, contracted indices raised (Stein)
        expr, labels = _derive(statistic, "edgeworth")
        return book_form(expr), labels
    a = tuple(alpha(k) for k in range(1, 5))
    if statistic in ("K", "G1"):
        m = forward_moment([Leg(1, a[0]), Leg(1, a[1])], order=1, form=form)
        if statistic == "K":
            return order_coefficient(m, 0), a[:2]
        return _ratio_form(N_L * order_coefficient(m, 1), "G1"), a[:2]
    kappa = forward_cumulant([Leg(1, a[0]), Leg(1, a[1]), Leg(2, a[2]), Leg(2, a[3])], order=1, form=form)
    if order_coefficient(kappa, 0) != 0:
        raise AssertionError("the cross-neuron connected 4-pt function has an O(1) part")
    return _ratio_form(N_L * order_coefficient(kappa, 1), "V"), a


@disk_cached
def _derive_residual(statistic: str, form: str = "edgeworth") -> tuple:
    r"""The residual MLP's recursions (PDLT (B.4)) from the same pipeline, skip legs included."""
    if form == "book":
        expr, labels = _derive_residual(statistic, "edgeworth")
        return book_form(expr), labels
    a = tuple(alpha(k) for k in range(1, 5))
    if statistic in ("K", "G1"):
        m = forward_moment([Leg(1, a[0]), Leg(1, a[1])], order=1, form=form, residual=True)
        if statistic == "K":
            return order_coefficient(m, 0), a[:2]
        return _ratio_form(N_L * order_coefficient(m, 1), "G1"), a[:2]
    if statistic == "T":
        # E[z_{1;a1} z_{1;a2} z_{2;a3}] (distinct neurons): the mean vanishes, so this moment
        # is the connected three-point function, O(1/n)
        m = forward_moment([Leg(1, a[0]), Leg(1, a[1]), Leg(2, a[2])], order=1, form=form,
                           residual=True)
        if order_coefficient(m, 0) != 0:
            raise AssertionError("the cross-neuron connected 3-pt function has an O(1) part")
        return _ratio_form(N_L * order_coefficient(m, 1), "T"), a[:3]
    kappa = forward_cumulant([Leg(1, a[0]), Leg(1, a[1]), Leg(2, a[2]), Leg(2, a[3])], order=1,
                             form=form, residual=True)
    if order_coefficient(kappa, 0) != 0:
        raise AssertionError("the cross-neuron connected 4-pt function has an O(1) part")
    return _ratio_form(N_L * order_coefficient(kappa, 1), "V"), a


@public
def derive_initialization(statistic: str, net: Any = None, form: str = "edgeworth", *,
                          residual: bool | None = None) -> Recursion:
    r"""Derive the layer recursion of ``statistic`` from the forward equation.

    Parameters
    ----------
    statistic : {"K", "V", "G1"}
        Kernel (PDLT (4.118)), four-point vertex (4.119), NLO metric (4.115).
    net : effth.MLP, optional
        Only its activation is used (as the default for :meth:`Recursion.evaluate`); the
        derivation is activation-independent.
    form : {"edgeworth", "book"}
        Derivative atoms (default; Gaussian integration by parts) or the raised-index book form (same derivation,
        derivative atoms converted by Stein's identity).
    residual : bool, optional
        Derive for the residual MLP of PDLT (B.4) (default: whether ``net`` is residual).  The
        recursions then hold :math:`\xi^{(\ell+1)}`, :math:`\gamma^{(\ell+1)}`, and ``"T"`` (the
        three-point vertex :class:`~effth.algebra.tensors.ThreePointVertex`, nonzero for skip
        connections with activations that are not odd) is available; :math:`K` must equal
        (B.11), :math:`V` equals (B.24) plus the terms of :math:`T`.

    Returns
    -------
    Recursion

    Examples
    --------
    >>> rec = derive_initialization("K")
    >>> print(rec.expr)
    GaussianExpectation(sigma(alpha_1)*sigma(alpha_2), KernelMatrix(Kernel, ell))*C_W[ell + 1] + C_b[ell + 1]
    """
    if residual is None:
        residual = bool(getattr(net, "residual", False))
    if not isinstance(residual, (bool, np.bool_)):
        raise DomainError(f"residual must be True or False, got {residual!r}")
    targets = _RESIDUAL_TARGET if residual else _TARGET
    if statistic not in targets:
        hint = " (T exists for residual=True only)" if statistic == "T" else ""
        raise DomainError(f"statistic must be one of {sorted(targets)}, got {statistic!r}{hint}")
    tensor, _, book = targets[statistic]
    if form not in ("edgeworth", "book"):
        raise DomainError(f"form must be 'edgeworth' or 'book', got {form!r}")
    expr, labels = (_derive_residual if residual else _derive)(statistic, form)
    what = "residual forward equation (B.4)" if residual else "forward equation"
    prov = (f"derived: {what}, Wick over W and b, coincidence split, Edgeworth "
            f"expansion to O(1/n); must equal {book}")
    act = getattr(net, "act", None) if net is not None else None
    return Recursion(statistic, expr, labels, tensor, prov, act, form, bool(residual))


@public
def initialization_flow(K1, depth: int, activation, c_w=1.0, c_b=0.0, ratios=1.0,
                        method: str = "auto", rtol: float = 1e-10, *, gamma=None,
                        xi=None) -> dict:
    r"""Iterate the derived recursions from layer 1 (:math:`V^{(1)}=G^{\{1\}(1)}=0`, PDLT §4.1–§4.2).

    Parameters
    ----------
    K1 : ndarray (N, N)
        First-layer kernel (PDLT (4.8)).
    depth : int
        Last layer :math:`L`; layers ``1..L`` are returned.
    activation : str or Activation
    c_w, c_b : float or sequence indexed by layer ``2..L``
        :math:`C_W^{(\ell+1)}`, :math:`C_b^{(\ell+1)}`.
    ratios : float or sequence
        :math:`n_\ell/n_{\ell-1}` for :math:`\ell=1..L-1` (:math:`\ell=1` never matters since
        :math:`V^{(1)}=G^{\{1\}(1)}=0`).
    gamma, xi : float or sequence indexed by layer ``2..L``, optional
        Residual MLP (PDLT (B.4)): skip and branch gains :math:`\gamma^{(\ell+1)}`,
        :math:`\xi^{(\ell+1)}`.  Given either, the residual recursions
        (``derive_initialization(..., residual=True)``) are iterated, with the three-point
        vertex :math:`T^{(1)}=0` (the first layer is exactly Gaussian) carried along.

    Returns
    -------
    dict
        ``{"K": [...], "V": [...], "G1": [...]}`` (and ``"T"`` for a residual network), lists
        indexed by ``layer - 1``.
    """
    residual = gamma is not None or xi is not None
    stats = ("K", "V", "G1", "T") if residual else ("K", "V", "G1")
    recs = {s: derive_initialization(s, residual=residual) for s in stats}
    from effth._validate import kernel_matrix
    K = kernel_matrix(K1, "K1")
    N = K.shape[-1]
    V, G1, T = np.zeros((N,) * 4), np.zeros((N, N)), np.zeros((N,) * 3)
    out = {"K": [K], "V": [V], "G1": [G1]}
    if residual:
        out["T"] = [T]

    def at(x, layer, default):
        if x is None:
            return default
        return float(x) if np.isscalar(x) else float(x[layer])

    for layer in range(1, depth):
        kw = dict(activation=activation, c_w=at(c_w, layer - 1, 1.0), c_b=at(c_b, layer - 1, 0.0),
                  ratio=at(ratios, layer - 1, 1.0), method=method, rtol=rtol)
        if residual:
            kw.update(T=T, xi=at(xi, layer - 1, 1.0), gamma=at(gamma, layer - 1, 0.0))
        new = {s: recs[s].evaluate(K, V, G1, **kw) for s in stats}
        K, V, G1 = new["K"], new["V"], new["G1"]
        T = new.get("T", T)
        for k in stats:
            out[k].append(new[k])
    return out


def _residual_skips(net: Any) -> list:
    """Layers 2..L-1 with a skip connection (gamma != 0): those whose one-neuron history reaches V, G1."""
    return [k for k in range(2, net.depth) if float(net.gamma_at(k)) != 0]


def _warn_residual_history(net: Any) -> None:
    """:class:`AccuracyWarning` when a residual net's V rests partly on the single-layer cumulant
    closure that drops one neuron's history (a skip before the last layer, sigma^2 not quadratic):
    three or more inputs, where the components V_(ab)(cd) with three or four distinct inputs are
    the closure's (the exact recursion is implemented for pairs of inputs)."""
    import warnings

    from effth.errors import AccuracyWarning

    act = net.act
    affine = act.is_polynomial and (act.polynomial_degree or 0) <= 1
    skips = _residual_skips(net)
    if skips and not affine:
        where = (", ".join(map(str, skips)) if len(skips) <= 4
                 else f"{skips[0]}, {skips[1]}, ..., {skips[-1]}")
        warnings.warn(
            f"V of a residual net with {act!r} (skips at layers {where}) on three or more inputs: "
            "the components V_(ab)(cd) with three or four distinct inputs come from the "
            "single-layer cumulant closure, which, like PDLT (B.24), keeps only the Mehler terms "
            "m <= 2 of the covariance between one neuron's sigma^2 at different layers (1-6 % of V "
            "at layers 3-9 for tanh, ReLU, GELU at gamma = 0.9 on one input).  K, T, G1 and every "
            "component on one or two distinct inputs are the exact history recursion, pair by "
            "pair (docs/residual.md, Erratum 2)",
            AccuracyWarning, stacklevel=3)


def _pairwise_history(K1, L: int, act, closure_flow: dict, **kw) -> dict:
    """P >= 3 inputs: the closure's flow with G1 and the V components on at most two distinct
    inputs replaced by the exact two-input history recursion of every pair (the law of a
    network restricted to two inputs does not depend on the others); K and T are the closure's,
    which are exact (they read Mehler orders <= 2 only)."""
    from effth.pdlt.residual_history import residual_history_flow

    P = K1.shape[0]
    out = {k: [np.array(x, dtype=float, copy=True) for x in v] for k, v in closure_flow.items()}
    for a, b in itertools.combinations(range(P), 2):
        idx = [a, b]
        f = residual_history_flow(K1[np.ix_(idx, idx)], L, act, **kw)
        for layer in range(L):
            out["G1"][layer][np.ix_(idx, idx)] = f["G1"][layer]
            out["V"][layer][np.ix_(idx, idx, idx, idx)] = f["V"][layer]
    return out


def mlp_flow(net: Any, X, method: str = "auto", rtol: float = 1e-10, *,
             closure: str | None = None) -> dict:
    r"""The derived :math:`K, V, G^{\{1\}}` of every layer of an ``MLP`` on inputs ``X``.

    :math:`K^{(1)}=C_b^{(1)}+C_W^{(1)}XX^\top/n_0` (PDLT (4.8)); the per-layer :math:`C_W, C_b`
    (and, for a residual ``net``, :math:`\gamma`, :math:`\xi` of PDLT (B.4)) come from ``net``; the width ratios :math:`n_\ell/n_{\ell-1}` from ``net.widths`` when they
    are numeric (equal widths otherwise; :math:`n_0` never enters since :math:`V^{(1)}=0`).

    Parameters
    ----------
    net : effth.MLP
    X : array_like (N_D, n_0)
    closure : {None, "history", "cumulant"}
        For a residual ``net`` with a skip before the last layer (PDLT (B.4)).  ``"history"``
        (the same as ``None``, the default): the exact :math:`O(1/n)` recursion over one neuron's
        history (:func:`~effth.pdlt.residual_history.residual_history_flow`) on one or two
        inputs; on three or more, every pair's exact recursion gives :math:`G^{\{1\}}` and the
        components of :math:`V` on at most two distinct inputs, and the components with three
        or four distinct inputs are the cumulant closure's (with an ``AccuracyWarning``).
        ``"cumulant"``: the derived single-layer cumulant closure, which like the book's (B.24)
        keeps only the Mehler orders :math:`m\le2` of the covariance of a neuron's
        :math:`\sigma^2` at different layers (exact for affine :math:`\sigma`).  :math:`K` and
        :math:`T` are the same either way; plain nets ignore it.

    Returns
    -------
    dict
        As :func:`initialization_flow`, layers ``1..net.depth``.

    Raises
    ------
    DomainError
        An unknown ``closure``.

    Warns
    -----
    AccuracyWarning
        For a residual net on three or more inputs (not ``closure="cumulant"``) with a skip
        before the last layer and a non-affine activation: its components
        :math:`V_{(\alpha_1\alpha_2)(\alpha_3\alpha_4)}` with three or four distinct inputs are
        the truncated cumulant closure (``docs/residual.md``, Erratum 2).
    """
    from effth._validate import input_matrix, network
    from effth.arch import MLP

    if not isinstance(network(net), MLP):
        raise DomainError(f"mlp_flow takes an effth.MLP, got {type(net).__name__}; for a CNN use "
                          "effth.pdlt.cnn_kernels")
    X = input_matrix(X)
    n0 = X.shape[1]
    K1 = net.c_b_at(1) + net.c_w_at(1) * (X @ X.T) / n0
    L = net.depth
    widths = net.hidden_widths
    if widths is None:
        ratios = [1.0] * max(L - 1, 1)
    else:
        full = (n0, *widths)
        ratios = [full[k] / full[k - 1] for k in range(1, len(full))]
    c_w = [net.c_w_at(k) for k in range(2, L + 1)] or [1.0]
    c_b = [net.c_b_at(k) for k in range(2, L + 1)] or [0.0]
    if closure not in (None, "history", "cumulant"):
        raise DomainError(f"closure must be None, 'history' or 'cumulant', got {closure!r}")
    res = {}
    if getattr(net, "residual", False):
        res = dict(gamma=[net.gamma_at(k) for k in range(2, L + 1)] or [0.0],
                   xi=[net.xi_at(k) for k in range(2, L + 1)] or [1.0])
        if _residual_skips(net) and closure != "cumulant":
            from effth.pdlt.residual_history import residual_history_flow

            if X.shape[0] <= 2:
                return residual_history_flow(K1, L, net.act, c_w=c_w, c_b=c_b, ratios=ratios, **res)
            _warn_residual_history(net)
            base = initialization_flow(K1, L, net.act, c_w=c_w, c_b=c_b, ratios=ratios,
                                       method=method, rtol=rtol, **res)
            return _pairwise_history(K1, L, net.act, base, c_w=c_w, c_b=c_b, ratios=ratios, **res)
    return initialization_flow(K1, L, net.act, c_w=c_w, c_b=c_b, ratios=ratios,
                               method=method, rtol=rtol, **res)
