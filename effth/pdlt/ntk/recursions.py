r"""Derived layer recursions of the NTK hierarchy: :math:`\Theta, H^{\{1\}}, A, B, D, F, P, Q, R, S, T, U`.

:func:`derive_ntk` runs the pipeline of :mod:`effth.pdlt.derivation.ntk_pipeline` (forward equations → Wick over
:math:`W^{(\ell+1)}, b^{(\ell+1)}` → coincidence split → cumulant rules of layer :math:`\ell` →
derivative atoms) on the statistic that *defines* each tensor (output neurons 1 ≠ 2):

=========  ======================================================================  ================
statistic  defining statistic of layer :math:`\ell+1`                              book
=========  ======================================================================  ================
Theta      :math:`\mathbb E[\hat H_{11;\delta_1\delta_2}]` at :math:`O(1)`         (8.63), (9.5)
H1         :math:`n_\ell\times` the :math:`O(1/n)` part of the same mean             new (not in the book)
A          :math:`n_\ell\,\mathrm{Cov}[\hat H_{11;\alpha_1\alpha_2},\hat H_{22;\alpha_3\alpha_4}]`  (8.97)
B          :math:`n_\ell\,\mathbb E[\hat H_{12;\alpha_1\alpha_2}\hat H_{12;\alpha_3\alpha_4}]\to B_{\alpha_1\alpha_3\alpha_2\alpha_4}`  (8.89)
D          :math:`n_\ell\,\kappa(z_{1;\alpha_1},z_{1;\alpha_2},\hat H_{22;\alpha_3\alpha_4})`  (8.77)
F          :math:`n_\ell\,\mathbb E[z_{1;\alpha_1}z_{2;\alpha_2}\hat H_{12;\alpha_3\alpha_4}]\to F_{\alpha_1\alpha_3\alpha_2\alpha_4}`  (8.79)
P          :math:`n_\ell\,\mathbb E[\widehat{dH}_{122;\delta_0\delta_1\delta_2}z_{1;\delta_3}]`  (11.49) corrected
Q          :math:`n_\ell\,\mathbb E[\widehat{dH}_{112;\delta_0\delta_1\delta_2}z_{2;\delta_3}]`  (11.52)
R          :math:`n_\ell\,\mathbb E[\widehat{dd_IH}_{1122;\delta_0\ldots\delta_3}]`    (∞.172)
S, T, U    :math:`n_\ell\,\mathbb E[\widehat{dd_{II}H}_{1122}]`, :math:`_{1212}\to T_{\delta_1\delta_3\delta_4\delta_2}`, :math:`_{1221}\to U_{\delta_1\delta_4\delta_2\delta_3}`  (∞.174)–(∞.176)
=========  ======================================================================  ================

**Residual MLPs** (PDLT app. B, ``residual=True``): the same statistics, derived from the
residual forward equations of :math:`z` and :math:`\hat H` (PDLT (B.4) and its derivative,
:func:`~effth.pdlt.derivation.ntk_forward.forward_terms`), for :data:`RESIDUAL_NTK_STATISTICS`:
:math:`\Theta, H^{\{1\}}, A, B, D, F` and the two odd NTK–preactivation tensors the skip
connection creates for non-odd activations, ``"Y"`` (:math:`n_\ell\,\mathbb E[\hat H_{11;
\alpha_1\alpha_2}z_{2;\alpha_3}]`) and ``"X"`` (:math:`n_\ell\,\mathbb E[\hat H_{12;\alpha_1
\alpha_2}z_{1;\alpha_3}]\to X_{\alpha_1\alpha_3\alpha_2}`).  The recursions hold
:math:`\xi^{(\ell+1)}, \gamma^{(\ell+1)}` and read the kernel sector's three-point vertex
:math:`T` (:func:`~effth.pdlt.initialization.recursions.derive_initialization` with
``residual=True``); at :math:`\gamma=0`, :math:`\xi=1` and zero odd tensors they are the plain
recursions.  The book prints no residual NTK recursion beyond the remark that the block's
learning rates become :math:`\xi^2\lambda` (§B.1).

Each result is an :class:`NTKRecursion`: the layer-:math:`(\ell+1)` component in layer-:math:`\ell`
tensors (:mod:`effth.algebra.ntk_tensors`, :math:`K, V, G^{\{1\}}`), derivative atoms
:math:`\langle\sigma^{(p)}_{\delta}\cdots\rangle_{K^{(\ell)}}`, :math:`C_W^{(\ell+1)},
C_b^{(\ell+1)}, \lambda_b^{(\ell+1)}, \lambda_W^{(\ell+1)}` and :data:`~effth.pdlt.initialization.recursions.RATIO`
:math:`=n_\ell/n_{\ell-1}`.  ``special="single-input"`` sets all sample labels equal;
``special="second-layer"`` sets every layer-1 finite-width tensor to zero (the first layer is
Gaussian with a deterministic NTK, PDLT (8.23)), which makes the result exact at any width.
"""

from __future__ import annotations

from effth._signature import public

from dataclasses import dataclass, replace

import numpy as np
import sympy as sp

from effth._cache import disk_cached
from effth.algebra.indices import alpha, ell
from effth.algebra.ntk_tensors import NTK_TENSORS, NLONTK
from effth.algebra.tensors import FourPointVertex, Kernel, NLOMetric, SampleTensor, ThreePointVertex
from effth.errors import DomainError

from effth.pdlt.derivation.pipeline import N_L, order_coefficient
from effth.pdlt.derivation.ntk_pipeline import NTKLeg, NTKOddX, NTKOddY, cached_moment
from effth.pdlt.derivation.formulas import PrintedRecursion
from effth.pdlt.initialization.recursions import _ratio_form

__all__ = ["NTKRecursion", "derive_ntk", "NTK_STATISTICS", "RESIDUAL_NTK_STATISTICS",
           "RESIDUAL_NTK_TENSORS"]

#: Statistics :func:`derive_ntk` knows, in the order a layer step computes them.
NTK_STATISTICS = ("Theta", "H1", "B", "D", "F", "A", "P", "Q", "R", "S", "T", "U")

#: Statistics of the residual MLP (PDLT (B.4)) :func:`derive_ntk` knows (``residual=True``).
RESIDUAL_NTK_STATISTICS = ("Theta", "H1", "B", "D", "F", "A", "Y", "X")

#: Tensor classes of the residual statistics.
RESIDUAL_NTK_TENSORS = {**{k: NTK_TENSORS[k] for k in RESIDUAL_NTK_STATISTICS[:6]},
                        "Y": NTKOddY, "X": NTKOddX}

_BOOK = {"Theta": "PDLT (8.63)/(9.5)", "H1": "no printed form (new)", "A": "PDLT (8.97)",
         "B": "PDLT (8.89)", "D": "PDLT (8.77)", "F": "PDLT (8.79)", "P": "PDLT (11.49), corrected",
         "Q": "PDLT (11.52)", "R": "PDLT (∞.172)", "S": "PDLT (∞.174)", "T": "PDLT (∞.175)",
         "U": "PDLT (∞.176)"}
_BOOK_RESIDUAL = {"Theta": "PDLT §B.1 (learning rates xi^2 lambda) and (9.5)", "H1": "no printed form",
                  "A": "no printed form", "B": "no printed form", "D": "no printed form",
                  "F": "no printed form", "Y": "no printed form (zero for odd activations)",
                  "X": "no printed form (zero for odd activations)"}


#: The book's sample labels of each tensor's slots (PDLT (8.89), (8.79): :math:`B_{\alpha_1\alpha_3
#: \alpha_2\alpha_4}`; ch. 11 and ∞ write :math:`\delta` labels): the printed forms use them.
BOOK_LABELS = {
    "B": ("alpha_1", "alpha_3", "alpha_2", "alpha_4"),
    "F": ("alpha_1", "alpha_3", "alpha_2", "alpha_4"),
    "P": ("delta_0", "delta_1", "delta_2", "delta_3"),
    "Q": ("delta_0", "delta_1", "delta_2", "delta_3"),
    "R": ("delta_0", "delta_1", "delta_2", "delta_3"),
    "S": ("delta_1", "delta_2", "delta_3", "delta_4"),
    "T": ("delta_1", "delta_3", "delta_4", "delta_2"),
    "U": ("delta_1", "delta_4", "delta_2", "delta_3"),
}


@public
@dataclass(frozen=True)
class NTKRecursion(PrintedRecursion):
    r"""A derived recursion :math:`T^{(\ell+1)}_{\ldots}=\mathcal R[\text{layer-}\ell\text{ tensors}]`.

    Attributes
    ----------
    statistic : str
        One of :data:`NTK_STATISTICS`.
    expr : sympy expression
        The component with free labels :attr:`labels`.
    labels : tuple of sympy symbols
        The tensor's sample indices in its slot order.
    tensor : type
        The :mod:`~effth.algebra.ntk_tensors` class of the left-hand side.
    provenance : str
    special : str or None
    """

    statistic: str
    expr: sp.Expr
    labels: tuple
    tensor: type
    provenance: str
    special: str | None = None

    def lhs(self) -> sp.Expr:
        return self.tensor(*self.labels, ell + 1)

    def _book_labels(self) -> dict:
        names = BOOK_LABELS.get(self.statistic) if self.special is None else None
        return {} if names is None else dict(zip(self.labels, map(sp.Symbol, names)))

    def formula(self):
        """The printed :class:`~effth.printing.formula.Formula`, in the book's sample labels."""
        from effth.pdlt.derivation.formulas import recursion_formula, single_input_formula

        if self.special == "single-input":
            return single_input_formula(self.lhs(), self.expr, self.labels[0], self.provenance)
        ren = self._book_labels()
        return recursion_formula(self.lhs().xreplace(ren), self.expr.xreplace(ren), self.provenance)

    def _edgeworth(self) -> sp.Expr:
        return self.expr

    def __repr__(self) -> str:
        from effth.pdlt.initialization.recursions import derivation_repr

        extra = f"special={self.special!r}" if self.special else ""
        return derivation_repr("NTKRecursion", self.statistic, self.expr, self.provenance, extra)

    def _repr_html_(self) -> str:
        from effth.pdlt.initialization.recursions import derivation_html

        return derivation_html("NTKRecursion", self.statistic, self.expr, self.provenance,
                               [("special", self.special or "general"), ("labels", len(self.labels))])

    def tensors(self) -> set:
        """Layer-ℓ tensor classes the recursion reads."""
        return {type(t) for t in self.expr.atoms(SampleTensor) if not isinstance(t, Kernel)}


@disk_cached
def _derive(statistic: str) -> tuple:
    a = tuple(alpha(k) for k in range(1, 5))
    H = lambda n, s: NTKLeg("H", n, s)  # noqa: E731
    Z = lambda n, s: NTKLeg("z", (n,), (s,))  # noqa: E731
    moment = lambda legs: cached_moment(tuple(legs))  # noqa: E731
    if statistic in ("Theta", "H1"):
        m = moment([H((1, 1), a[:2])])
        if statistic == "Theta":
            return order_coefficient(m, 0), a[:2]
        return _ratio_form(N_L * order_coefficient(m, 1), statistic), a[:2]
    if statistic == "A":
        kappa = (moment([H((1, 1), a[:2]), H((2, 2), a[2:])])
                 - moment([H((1, 1), a[:2])]) * moment([H((2, 2), a[2:])]))
        lab = a
    elif statistic == "B":      # E[H_12;a1a2 H_12;a3a4] = B_{a1 a3 a2 a4}/n
        kappa = moment([H((1, 2), (a[0], a[2])), H((1, 2), (a[1], a[3]))])
        lab = a
    elif statistic == "D":
        kappa = (moment([Z(1, a[0]), Z(1, a[1]), H((2, 2), a[2:])])
                 - moment([Z(1, a[0]), Z(1, a[1])]) * moment([H((2, 2), a[2:])]))
        lab = a
    elif statistic == "F":      # E[z_1;a1 z_2;a2 H_12;a3a4] = F_{a1 a3 a2 a4}/n
        kappa = moment([Z(1, a[0]), Z(2, a[2]), H((1, 2), (a[1], a[3]))])
        lab = a
    elif statistic == "P":
        kappa = moment([NTKLeg("dH", (1, 2, 2), a[:3]), Z(1, a[3])])
        lab = a
    elif statistic == "Q":
        kappa = moment([NTKLeg("dH", (1, 1, 2), a[:3]), Z(2, a[3])])
        lab = a
    elif statistic == "R":
        kappa = moment([NTKLeg("ddI", (1, 1, 2, 2), a)])
        lab = a
    elif statistic == "S":
        kappa = moment([NTKLeg("ddII", (1, 1, 2, 2), a)])
        lab = a
    elif statistic == "T":      # E[ddII_1212;d1d2d3d4] = T_{d1 d3 d4 d2}/n
        kappa = moment([NTKLeg("ddII", (1, 2, 1, 2), (a[0], a[3], a[1], a[2]))])
        lab = a
    elif statistic == "U":      # E[ddII_1221;d1d2d3d4] = U_{d1 d4 d2 d3}/n
        kappa = moment([NTKLeg("ddII", (1, 2, 2, 1), (a[0], a[2], a[3], a[1]))])
        lab = a
    else:
        raise DomainError(f"unknown NTK statistic {statistic!r}; expected one of {NTK_STATISTICS}")
    if order_coefficient(kappa, 0) != 0:
        raise AssertionError(f"{statistic}: the defining connected statistic has an O(1) part")
    return _ratio_form(N_L * order_coefficient(kappa, 1), statistic), lab


@disk_cached
def _derive_residual(statistic: str) -> tuple:
    r"""The residual MLP's NTK recursions (PDLT (B.4)): the defining statistics of :func:`_derive`
    with the residual forward equations, plus ``Y`` and ``X`` (odd, zero mean of z removes the
    disconnected parts)."""
    a = tuple(alpha(k) for k in range(1, 5))
    H = lambda n, s: NTKLeg("H", n, s)  # noqa: E731
    Z = lambda n, s: NTKLeg("z", (n,), (s,))  # noqa: E731
    moment = lambda legs: cached_moment(tuple(legs), 1, True)  # noqa: E731
    if statistic in ("Theta", "H1"):
        m = moment([H((1, 1), a[:2])])
        if statistic == "Theta":
            return order_coefficient(m, 0), a[:2]
        return _ratio_form(N_L * order_coefficient(m, 1), statistic), a[:2]
    if statistic == "A":
        kappa = (moment([H((1, 1), a[:2]), H((2, 2), a[2:])])
                 - moment([H((1, 1), a[:2])]) * moment([H((2, 2), a[2:])]))
    elif statistic == "B":
        kappa = moment([H((1, 2), (a[0], a[2])), H((1, 2), (a[1], a[3]))])
    elif statistic == "D":     # E[z_1] = 0: the cumulant is the moment less E[zz]E[H]
        kappa = (moment([Z(1, a[0]), Z(1, a[1]), H((2, 2), a[2:])])
                 - moment([Z(1, a[0]), Z(1, a[1])]) * moment([H((2, 2), a[2:])]))
    elif statistic == "F":
        kappa = moment([Z(1, a[0]), Z(2, a[2]), H((1, 2), (a[1], a[3]))])
    elif statistic == "Y":     # E[H_11;a1a2 z_2;a3] = Y_{a1a2a3}/n
        kappa = moment([H((1, 1), a[:2]), Z(2, a[2])])
    elif statistic == "X":     # E[H_12;a1a2 z_1;a3] = X_{a1a3a2}/n
        kappa = moment([H((1, 2), (a[0], a[2])), Z(1, a[1])])
    else:
        raise DomainError(f"unknown residual NTK statistic {statistic!r}; expected one of "
                          f"{RESIDUAL_NTK_STATISTICS}")
    lab = a[:3] if statistic in ("Y", "X") else a
    if order_coefficient(kappa, 0) != 0:
        raise AssertionError(f"{statistic}: the defining connected statistic has an O(1) part")
    return _ratio_form(N_L * order_coefficient(kappa, 1), statistic), lab


def _second_layer(expr: sp.Expr) -> sp.Expr:
    r"""Set every layer-1 finite-width tensor to zero (PDLT (8.23), (11.26), (∞.11))."""
    zero = {t: 0 for t in expr.atoms(SampleTensor)
            if isinstance(t, (FourPointVertex, NLOMetric, NLONTK, ThreePointVertex, NTKOddX, NTKOddY)) or
            (type(t) in NTK_TENSORS.values() and type(t) is not NTK_TENSORS["Theta"])}
    return sp.expand(expr.xreplace(zero))


def _single_input(expr: sp.Expr, labels: tuple) -> sp.Expr:
    a = labels[0]
    return sp.expand(expr.xreplace({lab: a for lab in labels[1:]}))


@public
def derive_ntk(statistic: str, special: str | None = None, *, residual: bool = False) -> NTKRecursion:
    r"""Derive the layer recursion of an NTK-hierarchy tensor from the forward equations.

    Parameters
    ----------
    statistic : str
        One of :data:`NTK_STATISTICS`: ``"Theta"`` (frozen NTK), ``"H1"`` (its :math:`1/n`
        correction), ``"A"``, ``"B"`` (NTK variance), ``"D"``, ``"F"`` (NTK–preactivation),
        ``"P"``, ``"Q"`` (dNTK–preactivation), ``"R"``, ``"S"``, ``"T"``, ``"U"`` (ddNTK means).
    special : {None, "single-input", "second-layer"}
        Substitutions applied to the general result.
    residual : bool
        Derive for the residual MLP of PDLT (B.4) (statistics :data:`RESIDUAL_NTK_STATISTICS`).

    Returns
    -------
    NTKRecursion

    Examples
    --------
    >>> rec = derive_ntk("B")
    >>> sorted(t.__name__ for t in rec.tensors())
    ['FrozenNTK', 'NTKVarianceB']
    """
    if not isinstance(residual, (bool, np.bool_)):
        raise DomainError(f"residual must be True or False, got {residual!r}")
    known = RESIDUAL_NTK_STATISTICS if residual else NTK_STATISTICS
    if statistic not in known:
        more = (" (the dNTK and ddNTK of residual MLPs are not derived)"
                if residual and statistic in NTK_STATISTICS else "")
        raise DomainError(f"unknown {'residual ' if residual else ''}NTK statistic {statistic!r}; "
                          f"expected one of {known}{more}")
    if special not in (None, "single-input", "second-layer"):
        raise DomainError(f"special must be None, 'single-input' or 'second-layer', got {special!r}")
    if residual:
        expr, labels = _derive_residual(statistic)
        prov = (f"derived: residual forward equations (B.4), Wick over W and b, coincidence split "
                f"with the skip neurons, cumulant rules of layer l (odd ones included) to O(1/n); "
                f"compare {_BOOK_RESIDUAL[statistic]}")
        rec = NTKRecursion(statistic, expr, labels, RESIDUAL_NTK_TENSORS[statistic], prov)
    else:
        expr, labels = _derive(statistic)
        prov = (f"derived: forward equations, Wick over W and b, coincidence split, cumulant rules of "
                f"layer l to O(1/n); compare {_BOOK[statistic]}")
        rec = NTKRecursion(statistic, expr, labels, NTK_TENSORS[statistic], prov)
    if special == "second-layer":
        rec = replace(rec, expr=_second_layer(rec.expr), special=special)
    elif special == "single-input":
        rec = replace(rec, expr=_single_input(rec.expr, labels), labels=labels[:1] * len(labels),
                      special=special)
    return rec
