r"""Special cases of the derived recursions: the exact second layer and the single-input forms.

Both are obtained from :func:`~effth.pdlt.derive_initialization` by substitution, so
they inherit its derivation:

* :func:`second_layer` sets :math:`V^{(1)}=G^{\{1\}(1)}=0` (the first layer is exactly Gaussian,
  PDLT (4.8)): :math:`K^{(2)}=C_b+C_W\langle\sigma\sigma\rangle_{K^{(1)}}`,
  :math:`V^{(2)}=C_W^2(\langle\sigma\sigma\sigma\sigma\rangle-\langle\sigma\sigma\rangle\langle\sigma\sigma\rangle)`,
  :math:`G^{\{1\}(2)}=0` — exact at any width (PDLT (4.23)–(4.36)).
* :func:`single_input` sets all sample labels equal and rewrites the derivative atoms through the
  parallel susceptibility :math:`\chi_\parallel=C_W\langle\sigma'\sigma'+\sigma\sigma''\rangle_K
  =\frac{C_W}{2K^2}\langle\sigma\sigma(z^2-K)\rangle_K` (PDLT (5.50)) and
  :math:`j/K^2 = C_W\langle(\sigma^2)''''\rangle_K=\frac{C_W}{K^2}\langle\sigma\sigma(z^4-6z^2K+3K^2)\rangle_K`
  (Stein), giving PDLT (5.x)/(4.x) single-input recursions
  :math:`V'=\rho\,\chi_\parallel^2V+C_W^2(\langle\sigma^4\rangle-\langle\sigma^2\rangle^2)`,
  :math:`G^{\{1\}\prime}=\rho\,(\chi_\parallel G^{\{1\}}+\tfrac{j}{8K^2}V)`.
"""

from __future__ import annotations

from effth._signature import public

from dataclasses import dataclass

import sympy as sp

from effth.algebra.expectation import GaussianExpectation, sigma
from effth.algebra.indices import alpha, ell
from effth.algebra.tensors import FourPointVertex, NLOMetric

from effth.pdlt.derivation.pipeline import CW, KMAT
from effth.pdlt.initialization.recursions import derive_initialization

__all__ = ["derive", "second_layer", "single_input", "Reduction", "CHI_PARALLEL", "J_OVER_K2"]

#: :math:`\chi_\parallel^{(\ell)}`
CHI_PARALLEL = sp.Symbol(r"\chi_{\parallel}^{(\ell)}")
#: :math:`j^{(\ell)}/(K^{(\ell)})^2`
J_OVER_K2 = sp.Symbol(r"\frac{j^{(\ell)}}{\left(K^{(\ell)}\right)^{2}}")


@public
@dataclass(frozen=True)
class Reduction:
    """A special case of a derived recursion: ``lhs = expr`` with its provenance."""

    statistic: str
    lhs: sp.Expr
    expr: sp.Expr
    provenance: str
    #: the derivation it prints from (labels set equal for a single input; at layer l for the
    #: second layer, printed at l = 1)
    source: sp.Expr | None = None
    special: str | None = None

    def formula(self):
        """The printed :class:`~effth.printing.formula.Formula` (checked equal to ``source``)."""
        from effth.pdlt.derivation.formulas import at_layer, recursion_formula, single_input_formula

        if self.special == "single-input":
            return single_input_formula(self.lhs, self.source, alpha(1), self.provenance)
        # the second layer: the general form with V = G1 = 0, printed at l = 1
        lhs = derive_initialization(self.statistic).lhs()
        return at_layer(recursion_formula(lhs, self.source, self.provenance), 1)

    def latex(self, form: str = "edgeworth", *, env: str | None = None,
              definitions: bool = True) -> str:
        r"""LaTeX of ``lhs = expr``: for a single input in the book's :math:`g,\chi_\parallel,
        \chi_\perp, h, j` (PDLT (5.49)–(5.52), (5.111)) without sample labels."""
        return self.formula().latex(form, env=env, definitions=definitions)

    def text(self, form: str = "edgeworth") -> str:
        """The equation in plain Unicode text."""
        return self.formula().text(form)

    def document(self, form: str = "edgeworth", title: str | None = None) -> str:
        """A standalone ``.tex`` file with this recursion (compiles with ``pdflatex``)."""
        return self.formula().document(title=title, form=form)

    def _repr_latex_(self) -> str:
        return f"$${self.latex(env='aligned')}$$"

    def __repr__(self) -> str:
        from effth.pdlt.initialization.recursions import derivation_repr

        return derivation_repr("Reduction", self.statistic, self.expr, self.provenance)

    def _repr_html_(self) -> str:
        from effth.pdlt.initialization.recursions import derivation_html

        return derivation_html("Reduction", self.statistic, self.expr, self.provenance, [])


@public
def second_layer(statistic: str) -> Reduction:
    r"""The exact layer-2 form: the derived recursion at :math:`\ell=1` with :math:`V^{(1)}=G^{\{1\}(1)}=0`.

    Parameters
    ----------
    statistic : {"K", "V", "G1"}

    Examples
    --------
    >>> second_layer("G1").expr
    0
    """
    rec = derive_initialization(statistic)
    e = rec.expr
    zero = {t: 0 for t in e.atoms(FourPointVertex) | e.atoms(NLOMetric)}
    general = sp.expand(e.xreplace(zero))
    return Reduction(statistic, rec.lhs().subs(ell, 1), general.subs(ell, 1),
                     f"{rec.provenance}; at l = 1 with V(1) = G1(1) = 0 (exact: layer 1 is Gaussian)",
                     source=general, special="second-layer")


@public
def single_input(statistic: str) -> Reduction:
    r"""The single-input form in terms of :math:`\chi_\parallel` and :math:`j/K^2`.

    Parameters
    ----------
    statistic : {"K", "V", "G1"}

    Returns
    -------
    Reduction
        ``expr`` contains :data:`CHI_PARALLEL`, :data:`J_OVER_K2`, the scalars
        :math:`V^{(\ell)}_{(\alpha\alpha)(\alpha\alpha)}`, :math:`G^{\{1\}(\ell)}_{\alpha\alpha}`,
        remaining single-sample atoms and :math:`n_\ell/n_{\ell-1}`.
    """
    rec = derive_initialization(statistic)
    a = alpha(1)
    e = sp.expand(rec.expr.xreplace({lab: a for lab in rec.labels}))

    def atom(p: int, q: int) -> sp.Expr:
        return GaussianExpectation(sigma(a, p) * sigma(a, q), KMAT)

    # sigma sigma'' -> chi/C_W - sigma'^2 ;  sigma sigma'''' -> (J/C_W - 8 s's''' - 6 s''^2)/2
    subs = {atom(0, 2): CHI_PARALLEL / CW - atom(1, 1),
            atom(0, 4): (J_OVER_K2 / CW - 8 * atom(1, 3) - 6 * atom(2, 2)) / 2}
    out = sp.expand(e.xreplace(subs))
    lhs = rec.lhs().xreplace({lab: a for lab in rec.labels})
    return Reduction(statistic, lhs, sp.collect(out, [CHI_PARALLEL, J_OVER_K2]),
                     f"{rec.provenance}; single input, Stein: chi_par = C_W<s's' + s s''>, "
                     f"j/K^2 = C_W<(s^2)''''>", source=e, special="single-input")


@public
def derive(statistic: str, *, special: str | None = None, form: str = "edgeworth", net=None):
    r"""Derive a layer recursion of the initialization ensemble (``effth.derive``).

    Parameters
    ----------
    statistic : {"K", "V", "G1"}
        Kernel (PDLT (4.118)), four-point vertex (4.119), NLO metric (4.115).
    special : {None, "second-layer", "single-input"}
        The general recursion, the exact layer-2 form, or the single-input
        :math:`\chi_\parallel` form.
    form : {"edgeworth", "book"}
        For the general recursion: derivative atoms or the book's :math:`K^{-1}` form.
    net : effth.MLP, optional
        Default activation for :meth:`Recursion.evaluate`; a residual ``net`` (PDLT (B.4)) selects
        the residual recursions (``"T"`` too).

    Returns
    -------
    Recursion or Reduction
        Both print LaTeX (``.latex()``, ``_repr_latex_``); a ``Recursion`` compiles and evaluates
        (``.evaluate``; all layers at once with :func:`effth.flow`).

    Examples
    --------
    >>> import effth as et
    >>> print(et.derive("G1", special="second-layer").expr)
    0
    """
    from effth.arch import MLP
    from effth.errors import DomainError

    if net is not None and not isinstance(net, MLP):
        raise DomainError(f"net must be an effth.MLP (or None), got {type(net).__name__}: "
                          "describe the network with et.MLP(activation, depth=..., ...)")
    if special is None:
        return derive_initialization(statistic, net=net, form=form)
    if getattr(net, "residual", False):
        raise DomainError(f"special={special!r} is a plain-MLP form; for a residual net use "
                          "derive(statistic, net=net) (the residual recursion, PDLT (B.4))")
    if special == "second-layer":
        return second_layer(statistic)
    if special == "single-input":
        return single_input(statistic)
    raise DomainError(f"special must be None, 'second-layer' or 'single-input', got {special!r}")
