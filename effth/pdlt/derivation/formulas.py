r"""The printed forms of the derived PDLT recursions (one mechanism for every object).

:func:`recursion_formula` takes a derived layer recursion (the Edgeworth expansion of the
pipeline: atoms of σ-derivatives over :math:`K^{(\ell)}`) and returns a
:class:`~effth.printing.formula.Formula`: the canonical simplifier of :mod:`effth.printing.simplify`
finds the cumulant contractions, the book's stochastic tensor :math:`\widehat\Omega` (PDLT (8.34))
and the connected parts, and checks the result equal to the derivation; this module adds what
only the theory knows:

* the name :math:`\widehat\Omega^{(\ell+1)}_{\alpha_1\alpha_2}\equiv\lambda_W^{(\ell+1)}
  \sigma_{\alpha_1}\sigma_{\alpha_2}+C_W^{(\ell+1)}\Theta^{(\ell)}_{\alpha_1\alpha_2}
  \sigma'_{\alpha_1}\sigma'_{\alpha_2}` (the NTK mean :math:`H^{(\ell)}` of (8.34) at leading
  order);
* the book's raised-index form (``form="book"``): every derivative contraction
  :math:`\sum_\beta T_{\beta_1\beta_2\cdots}\langle\partial_{\beta_1}\partial_{\beta_2}F\rangle`
  becomes :math:`\sum_{\beta,\gamma}T_{\beta_1\beta_2\cdots}K^{\beta_1\gamma_1}K^{\beta_2\gamma_2}
  \langle F(z_{\gamma_1}z_{\gamma_2}-K_{\gamma_1\gamma_2})\rangle` (Stein's identity), with the
  inverse kernels absorbed into :math:`V^{(\beta_1\beta_2)(\beta_3\beta_4)}_{(\ell)}` where all four
  indices are raised, as in (4.119);
* the compact form (``form="compact"``): the layer labels dropped, stated once.
"""

from __future__ import annotations

from functools import lru_cache

import sympy as sp

from effth.algebra.expectation import sigma
from effth.algebra.indices import LayerSymbol, ell
from effth.algebra.ntk_tensors import FrozenNTK
from effth.algebra.tensors import (FourPointVertex, InverseKernel, KernelMatrix,
                                   RaisedFourPointVertex, SampleSum, SampleTensor)
from effth.printing.formula import Formula
from effth.printing.simplify import NamedPattern, register_name, structure
from effth.printing.structured import (BlockFunction, DerivativeExpectation,
                                       HermiteExpectation)

from effth.pdlt.derivation.ntk_forward import LAMBDA_W
from effth.pdlt.derivation.pipeline import CW, KMAT

__all__ = ["OMEGA", "CONVENTIONS", "PrintedRecursion", "at_layer", "book_form", "evaluate_formula",
           "recursion_formula", "single_input_formula", "SingleInputFormula"]

#: The book's stochastic tensor of the NTK forward equation, PDLT (8.34) (with the NTK mean at
#: leading order, :math:`H\to\Theta`).
OMEGA = NamedPattern(r"\widehat{\Omega}^{(\ell+1)}",
                     lambda a, b: LAMBDA_W * sigma(a) * sigma(b)
                     + CW * FrozenNTK(a, b, ell) * sigma(a, 1) * sigma(b, 1), "PDLT (8.34)")
register_name(OMEGA)

#: What ``form="compact"`` leaves out, said once.
CONVENTIONS = (r"C_W, C_b, \lambda_W, \lambda_b \text{ at layer } \ell+1;\ \text{all tensors and } "
               r"\langle\cdot\rangle_K \equiv \langle\cdot\rangle_{K^{(\ell)}} \text{ at layer } \ell",
               r"\rho \equiv n_{\ell}/n_{\ell-1}")


def _ratio():
    from effth.pdlt.derivation.pipeline import RATIO
    return RATIO


@lru_cache(maxsize=256)
def _structured(expr: sp.Expr):
    return structure(expr, KMAT, separate=(_ratio(),))


def recursion_formula(lhs: sp.Expr, expr: sp.Expr, provenance: str = "") -> Formula:
    """The :class:`~effth.printing.formula.Formula` of a derived layer recursion ``lhs = expr``."""
    return Formula(lhs, _structured(expr), provenance, CONVENTIONS,
                   {"book": raise_indices, "compact": compact})


def book_form(expr: sp.Expr) -> sp.Expr:
    r"""The book's raised-index form of a derived (Edgeworth) recursion: the structured form with
    every derivative contraction written with :math:`K^{-1}` (Stein's identity)."""
    return raise_indices(_structured(expr).rhs)


class PrintedRecursion:
    r"""The printed forms of a derived recursion (a mixin for :class:`Recursion`,
    :class:`NTKRecursion`): it needs ``lhs()``, ``provenance``, ``form`` and ``_edgeworth()``
    (the Edgeworth derivation the forms are built from)."""

    def formula(self) -> Formula:
        """The :class:`~effth.printing.formula.Formula` (structured, checked equal to the
        derivation)."""
        labels = tuple(getattr(self, "labels", ()))
        if labels and len(set(labels)) == 1 and len(labels) > 1:
            # one input: the book's single-input helpers (PDLT (5.49)-(5.52), (5.111))
            return single_input_formula(self.lhs(), self._edgeworth(), labels[0], self.provenance)
        return recursion_formula(self.lhs(), self._edgeworth(), self.provenance)

    def _form(self, form):
        return form or getattr(self, "form", "edgeworth")

    def latex(self, form: str | None = None, *, env: str | None = None, width: float | None = None,
              definitions: bool = True) -> str:
        r"""LaTeX of ``lhs = rhs`` in the book's notation.

        Parameters
        ----------
        form : {"edgeworth", "book", "compact"}, optional
            Derivative expectations (default for an Edgeworth derivation), the book's raised-index
            form (default for ``form="book"`` derivations), or the Edgeworth form with the layer
            labels stated once (:mod:`effth.printing.formula`). All are the same derivation.
        env : {None, "align", "align*", "aligned"}
            One line, or an environment broken at term boundaries.
        width : float, optional
            Line width of an environment (:data:`~effth.printing.formula.LINE_WIDTH`).
        definitions : bool
            Print the definitions of :math:`\widehat\Omega` and of :math:`\partial_eta` too.
        """
        from effth.printing.formula import LINE_WIDTH

        return self.formula().latex(self._form(form), env=env, width=width or LINE_WIDTH,
                                    definitions=definitions)

    def text(self, form: str | None = None) -> str:
        """The equation in plain Unicode text (no LaTeX)."""
        return self.formula().text(self._form(form))

    def document(self, form: str | None = None, title: str | None = None) -> str:
        """A standalone ``.tex`` file with this recursion (compiles with ``pdflatex``)."""
        return self.formula().document(title=title, form=self._form(form))

    def _repr_latex_(self) -> str:
        return "$$" + self.latex(env="aligned") + "$$"


# ============================================================================ single input
def _single_input_helpers(a):
    """The book's single-input helper functions at label ``a`` (PDLT (5.49)–(5.52), (5.111))."""
    from effth.algebra.expectation import GaussianExpectation as GE
    from effth.algebra.tensors import Kernel
    from effth.printing.helpers import Helper

    def at(*orders):
        return GE(sp.Mul(*[sigma(a, k) for k in orders]), KMAT)

    K = Kernel(a, a, ell)
    return [
        Helper(r"g^{(\ell)}", at(0, 0), at(0, 0), "PDLT (5.49)"),
        Helper(r"\chi_{\perp}^{(\ell)}", CW * at(1, 1), at(1, 1), "PDLT (5.51)"),
        Helper(r"\chi_{\parallel}^{(\ell)}", CW * (at(1, 1) + at(0, 2)), at(0, 2), "PDLT (5.50)"),
        Helper(r"h^{(\ell)}", CW * (at(2, 2) + at(1, 3)) / 2, at(1, 3), "PDLT (5.52)"),
        Helper(r"j^{(\ell)}", CW * K ** 2 * (2 * at(0, 4) + 8 * at(1, 3) + 6 * at(2, 2)), at(0, 4),
               "PDLT (5.111)"),
    ]


def at_layer(formula: Formula, layer: int) -> Formula:
    r"""``formula`` (a recursion from layer :math:`\ell` to :math:`\ell+1`) printed at
    :math:`\ell=` ``layer`` (the exact second layer, PDLT (4.63), (8.23))."""
    from effth.printing.simplify import Structured

    st = formula.structured
    sub = {ell: layer}
    shadow = Structured(rhs=st.rhs.subs(sub), original=st.original.subs(sub), samples=st.samples)
    return Formula(formula.lhs.subs(sub), shadow, formula.provenance, (), {})


#: The printed sample label of a single-input formula: none (PDLT §5.1 writes :math:`K^{(\ell)}`,
#: :math:`\langle\sigma'\sigma'\rangle_{K^{(\ell)}}`, :math:`V^{(\ell)}`).
_BLANK = sp.Symbol("")


def _drop_empty_subscripts(tex: str) -> str:
    """Remove the subscripts a blank sample label leaves: ``_{}``, ``_{()()}``."""
    import re
    return re.sub(r"_\{(?:\(\))*\}", "", tex)


class SingleInputFormula(Formula):
    r"""A single-input recursion in the book's helper functions, printed without sample labels.

    ``form="edgeworth"`` (and ``"book"``, which coincides with it for one input) keeps the layer
    labels; ``form="compact"`` drops them as for the general recursions."""

    @property
    def label(self) -> sp.Symbol:
        """The one sample label (dropped when printed)."""
        return self.structured.samples[0]

    def _shadow(self, form: str) -> Formula:
        """The formula with the label blanked (and the layer labels dropped for ``compact``)."""
        from effth.printing.simplify import Structured

        rhs = self.structured.rhs
        if form == "compact":
            rhs = compact(rhs)
        blank = {self.label: _BLANK}
        st = Structured(rhs=rhs.xreplace(blank), original=self.structured.original.xreplace(blank),
                        samples=(_BLANK,))
        lhs = compact(self.lhs) if form == "compact" else self.lhs
        # the compact shadow is already compact: its transform is the identity, so the base
        # printer states the conventions as it does for every compact form
        return Formula(lhs.xreplace(blank), st, self.provenance, self.conventions,
                       {"compact": lambda e: e})

    def rhs(self, form: str = "edgeworth") -> sp.Expr:
        if form == "compact":
            return compact(self.structured.rhs)
        return super().rhs("edgeworth" if form == "book" else form)

    def latex(self, form: str = "edgeworth", **kw) -> str:
        self.rhs(form)  # validates form
        shadow_form = "compact" if form == "compact" else "edgeworth"
        return _drop_empty_subscripts(self._shadow(form).latex(shadow_form, **kw))

    def text(self, form: str = "edgeworth") -> str:
        import re
        return re.sub(r"_(?=[ ,)\]]|$)", "", self._shadow(form).text("edgeworth"), flags=re.M)


@lru_cache(maxsize=128)
def single_input_formula(lhs: sp.Expr, expr: sp.Expr, label, provenance: str = "") -> Formula:
    r"""The single-input :class:`~effth.printing.formula.Formula` of a recursion whose labels are
    all ``label``: rewritten in :math:`g, \chi_\parallel, \chi_\perp, h, j` where that is shorter
    (:func:`effth.printing.helpers.in_helpers`)."""
    from effth.printing import latex
    from effth.printing.helpers import in_helpers
    from effth.printing.simplify import Structured

    best, _ = in_helpers(expr, _single_input_helpers(label), lambda e: len(latex(e)))
    st = Structured(rhs=best, original=sp.expand(expr), samples=(label,))
    return SingleInputFormula(lhs, st, provenance, CONVENTIONS, {})


# ================================================================================= the forms
def compact(expr: sp.Expr) -> sp.Expr:
    r"""``expr`` with layer labels dropped: tensors at layer :math:`\ell` and the kernel of the
    expectations layer-less, couplings of layer :math:`\ell+1` bare, :math:`\rho` for the ratio."""
    rep = {}
    for a in sp.preorder_traversal(expr):
        if isinstance(a, SampleTensor) and a.layer == ell:
            rep[a] = type(a)(*a.indices)
        elif isinstance(a, KernelMatrix) and a.layer == ell:
            rep[a] = KernelMatrix(a.tensor)
        elif isinstance(a, LayerSymbol) and a.layer == ell + 1:
            rep[a] = sp.Symbol(a.stem)
        elif isinstance(a, BlockFunction):
            rep[a] = BlockFunction(a.name.replace("^{(\\ell+1)}", ""), a.labels, compact(a.definition))
    rep[_ratio()] = sp.Symbol(r"\rho")
    return expr.xreplace(rep)


def _gamma(b: sp.Symbol) -> sp.Symbol:
    return sp.Symbol("gamma_" + str(b).split("_")[-1])


def raise_indices(expr: sp.Expr) -> sp.Expr:
    r"""The book's raised-index form of a structured right-hand side (Stein's identity)."""
    terms = sp.Add.make_args(expr)
    return sp.Add(*[_raise_term(t) for t in terms], evaluate=False)


def _raise_term(t: sp.Expr) -> sp.Expr:
    out = sp.S.One
    for f in sp.Mul.make_args(t):
        out *= _raise_sum(f) if isinstance(f, SampleSum) else f
    return out


def _raise_sum(s: SampleSum) -> sp.Expr:
    factors = list(sp.Mul.make_args(s.summand))
    inv, new_dummies, rebuilt = [], [], []
    for f in factors:
        if isinstance(f, DerivativeExpectation) and f.betas:
            gs = [_gamma(b) for b in f.betas]
            inv.extend(InverseKernel(b, g, ell) for b, g in zip(f.betas, gs))
            new_dummies.extend(gs)
            rebuilt.append(HermiteExpectation(f.integrand, gs, f.kernel))
        else:
            rebuilt.append(f)
    # absorb K^{beta gamma} into a four-point vertex whose four indices are all raised
    dummies = list(s.dummies) + new_dummies
    final = []
    for f in rebuilt:
        if isinstance(f, FourPointVertex) and all(any(k.has(i) for k in inv) for i in f.indices):
            ks = [k for k in inv if any(k.has(i) for i in f.indices)]
            if len(ks) == 4 and all(i in s.dummies for i in f.indices):
                gmap = {}
                for k in ks:
                    b, g = (k.indices if k.indices[0] in f.indices else k.indices[::-1])
                    gmap[b] = g
                for k in ks:
                    inv.remove(k)
                for b in f.indices:
                    dummies.remove(b)
                # V_{(b1 b2)(b3 b4)} K^{b1 g1}... = V^{(g1 g2)(g3 g4)}: keep the slot order of f
                order = [i for i in f.args[:4]]
                final.append(RaisedFourPointVertex(*[gmap[b] for b in order], ell))
                continue
        final.append(f)
    body = sp.Mul(*final) * sp.Mul(*inv)
    # name the dummies beta_1.. in order of appearance
    ren = {d: sp.Symbol(f"beta_{k + 1}") for k, d in enumerate(_appearance(body, dummies))}
    tmp = {d: sp.Dummy() for d in ren}
    body = body.xreplace(tmp).xreplace({tmp[d]: ren[d] for d in ren})
    return SampleSum(body, *sorted(ren.values(), key=sp.default_sort_key))


def _appearance(body, dummies) -> list:
    seen = []
    for a in sp.preorder_traversal(body):
        if a in dummies and a not in seen:
            seen.append(a)
    return seen + [d for d in dummies if d not in seen]


# ============================================================================ numeric check
def evaluate_formula(formula: Formula, form: str, *, labels: dict, K, tensors: dict, params: dict,
                     activation, rtol: float = 1e-11) -> float:
    r"""One component of a printed form, evaluated numerically (the check of every form).

    Parameters
    ----------
    formula : Formula
    form : {"derivation", "edgeworth", "book", "compact"}
        ``"derivation"`` evaluates the expanded atoms the formula was built from.
    labels : mapping label symbol -> sample index
        The component (e.g. :math:`\alpha_1\to0, \alpha_2\to1`).
    K : ndarray (N, N)
        :math:`K^{(\ell)}`; the dummies run over its ``N`` samples.
    tensors : mapping tensor class -> ndarray
        Every layer-:math:`\ell` tensor the formula reads (a four-point vertex with its pair
        symmetry, which the raised form contracts with :math:`K^{-1}` entry by entry).
    params : mapping
        ``C_W``, ``C_b``, ``lambda_W``, ``lambda_b``, ``ratio``.
    """
    import numpy as np

    from effth.codegen import compile_step
    from effth.printing.structured import expand_structured

    if form == "derivation":
        expr = formula.structured.original
    else:
        expr = formula.rhs(form)
        if form == "compact":          # the compact form is the Edgeworth one with labels dropped
            expr = formula.rhs("edgeworth")
    N = np.asarray(K).shape[0]
    from effth.printing.structured import NamedScalar
    expr = expr.replace(lambda x: isinstance(x, NamedScalar), lambda x: x.definition)
    expr = expr.xreplace({k: sp.Integer(v) for k, v in labels.items()})
    expr = expand_structured(expr, range(N))
    Ki = np.linalg.inv(K)
    arrays = {"K": np.asarray(K, float), "Kinv": Ki}
    inputs = {KMAT: "K", InverseKernel: "Kinv"}
    for cls, arr in tensors.items():
        inputs[cls] = cls.__name__
        arrays[cls.__name__] = np.asarray(arr, float)
        if cls is FourPointVertex:
            inputs[RaisedFourPointVertex] = "Vup"
            arrays["Vup"] = np.einsum("ai,bj,ck,dl,ijkl->abcd", Ki, Ki, Ki, Ki, arrays[cls.__name__])
    names = {"C_W": CW, "C_b": _cb(), "lambda_W": LAMBDA_W, "lambda_b": _lb(), "ratio": _ratio()}
    step = compile_step({"out": [expr]}, inputs, activation=activation,
                        params={k: names[k] for k in params}, rtol=rtol)
    return float(np.asarray(step(**arrays, **params)["out"]).reshape(-1)[0])


def _cb():
    from effth.pdlt.derivation.pipeline import CB
    return CB


def _lb():
    from effth.pdlt.derivation.ntk_forward import LAMBDA_B
    return LAMBDA_B
