r"""LaTeX in the notation of *The Principles of Deep Learning Theory* (PDLT).

effth objects (tensors, layer symbols, Gaussian-expectation atoms) implement ``_latex``
themselves, so this module never imports theory modules (the SymPy pattern of
``sympy.physics.vector.printing``).  :class:`EffthLatexPrinter` adds what must be handled at
printer level:

* powers of objects whose LaTeX already carries sub- or superscripts are braced,
  ``{C_{W}^{(\ell + 1)}}^{2}``, never a double superscript;
* a power of a symbol printed as a fraction (the width ratio :math:`n_\ell/n_{\ell-1}`) is
  parenthesised, ``\left(\frac{n_{\ell}}{n_{\ell-1}}\right)^{2}``;
* Kronecker deltas of neuron indices print :math:`\delta_{i_{1} i_{2}}`;
* sample symbols ``alpha_1`` print :math:`\alpha_{1}` and ``ell`` prints :math:`\ell`
  (SymPy's defaults, kept).

The output depends only on the expression (SymPy's canonical term order, via
``default_sort_key``), never on ``PYTHONHASHSEED``.

Examples
--------
>>> import sympy as sp
>>> from effth.algebra.indices import ell, c_w, width
>>> latex(c_w(ell + 1)**2 / width(ell - 1))
'\\frac{{C_{W}^{(\\ell + 1)}}^{2}}{n_{\\ell - 1}}'
>>> latex(sp.KroneckerDelta(sp.Symbol('i_1', integer=True), sp.Symbol('i_2', integer=True)))
'\\delta_{i_{1} i_{2}}'
"""

from __future__ import annotations

from effth._signature import public

from typing import Any

import sympy as sp
from sympy.printing.latex import LatexPrinter

__all__ = ["EffthLatexPrinter", "latex", "init_printing"]


def _needs_braces(s: str) -> bool:
    """Whether a base's LaTeX needs braces before ``^{p}``: a superscript or prime at top level."""
    depth = 0
    for ch in s:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif depth == 0 and ch in "^'":
            return True
    return False


def _is_fraction(s: str) -> bool:
    r"""Whether ``s`` is one ``\frac{..}{..}`` (or a ``\tfrac``/``\dfrac``) with nothing after it."""
    for head in (r"\frac", r"\tfrac", r"\dfrac"):
        if s.startswith(head + "{"):
            i, groups = len(head), 0
            while i < len(s) and s[i] == "{" and groups < 2:
                depth = 0
                for j in range(i, len(s)):
                    depth += {"{": 1, "}": -1}.get(s[j], 0)
                    if depth == 0:
                        break
                i, groups = j + 1, groups + 1
            return groups == 2 and i == len(s)
    return False


def _is_atom_factor(f) -> bool:
    """A Gaussian-expectation atom or a power of one (printed after its coefficient)."""
    base = f.base if f.is_Pow else f
    return type(base).__name__ == "GaussianExpectation"


@public
class EffthLatexPrinter(LatexPrinter):
    r"""SymPy's LaTeX printer with effth's book-notation conventions.

    Examples
    --------
    >>> from effth.algebra.tensors import Kernel
    >>> from effth.algebra.indices import alpha, ell
    >>> EffthLatexPrinter().doprint(Kernel(alpha(1), alpha(2), ell)**2)
    '{K^{(\\ell)}_{\\alpha_{1}\\alpha_{2}}}^{2}'
    """

    printmethod = "_latex"

    def _print_KroneckerDelta(self, expr, exp=None):
        i, j = (self._print(a) for a in expr.args[:2])
        tex = rf"\delta_{{{i} {j}}}"
        if exp is not None:
            tex = rf"\left({tex}\right)^{{{exp}}}"
        return tex

    def _print_Mul(self, expr):
        # the book writes coefficients first: C_W <σσ>_K, \frac{1}{8} V <...>
        args = expr.args
        atoms = [a for a in args if _is_atom_factor(a)]
        if not atoms or len(atoms) == len(args):
            return super()._print_Mul(expr)
        sign = ""
        if expr.could_extract_minus_sign():
            expr, sign = -expr, "- "
            args = expr.args if expr.is_Mul else (expr,)
            atoms = [a for a in args if _is_atom_factor(a)]
        coeff = sp.Mul(*[a for a in args if not _is_atom_factor(a)])
        atom_tex = " ".join(self._print(a) for a in sorted(atoms, key=sp.default_sort_key))
        if coeff == 1:
            return sign + atom_tex
        coeff_tex = self._print(coeff)
        if coeff.is_Add:
            coeff_tex = rf"\left({coeff_tex}\right)"
        return f"{sign}{coeff_tex} {atom_tex}"

    def _print_Pow(self, expr):
        base, e = expr.base, expr.exp
        if base.is_Symbol and e.is_Rational and not (e.q == 2 and self._settings.get("root_notation", True)):
            b = self._print(base)
            if _is_fraction(b):
                # a symbol printed as a fraction, n_l/n_{l-1}: (\frac{a}{b})^{2}, never \frac{a}{b}^{2}
                if e.is_negative:
                    return super()._print_Pow(expr)
                return rf"\left({b}\right)^{{{self._print(e)}}}"
        if (
            isinstance(base, sp.Basic)
            and hasattr(type(base), "_latex")
            and not base.is_Symbol
            and e.is_Rational
            and e.is_positive
            and not (e.q == 2 and self._settings.get("root_notation", True))
        ):
            b = self._print(base)
            if _needs_braces(b):
                b = f"{{{b}}}"
            return f"{b}^{{{self._print(e)}}}"
        return super()._print_Pow(expr)


@public
def latex(expr: Any, **settings: Any) -> str:
    r"""LaTeX of ``expr`` in PDLT notation (settings as for :func:`sympy.latex`).

    Examples
    --------
    >>> from effth.algebra.indices import ell, width
    >>> latex(width(ell - 1))
    'n_{\\ell - 1}'
    """
    return EffthLatexPrinter(settings).doprint(expr)


@public
def init_printing(**kwargs: Any) -> None:
    """Make notebooks render SymPy/effth expressions with :func:`latex` (wraps :func:`sympy.init_printing`)."""
    kwargs.setdefault("latex_printer", latex)
    sp.init_printing(**kwargs)
