r"""Printed formulas: a derived equation laid out the way a paper prints it.

A :class:`Formula` holds the left-hand side, the structured right-hand side
(:func:`effth.printing.simplify.structure`) and what a reader needs to read it: the definitions of
named random variables (the book's :math:`\widehat\Omega`), the conventions of the notation and
the provenance. It prints

* :meth:`Formula.latex` — the equation, in one line or in an ``align`` environment broken at term
  boundaries (and inside a long product only where a term is wider than a line), with the
  definitions after it;
* :meth:`Formula.text` — plain Unicode text, no LaTeX;
* :func:`document` — a standalone ``.tex`` file of one or several formulas that compiles with
  ``pdflatex`` (packages ``amsmath``, ``amssymb``, ``geometry``).

Three honest forms of the same derivation are chosen with ``form``:

``"edgeworth"`` (default)
    derivative expectations :math:`\langle\partial_{\beta_1}\partial_{\beta_2}F\rangle`, no
    inverse kernel (the Gaussian integration by parts of PDLT (4.115), (4.119));
``"book"``
    the book's raised-index form, :math:`\sum_{\beta}V^{(\beta_1\beta_2)(\beta_3\beta_4)}
    \langle F(z_{\beta_1}z_{\beta_2}-K_{\beta_1\beta_2})\rangle` (Stein's identity);
``"compact"``
    the Edgeworth form with the layer labels dropped and stated once
    (:math:`C_W\equiv C_W^{(\ell+1)}`, :math:`\langle\cdot\rangle\equiv\langle\cdot\rangle_{K^{(\ell)}}`,
    tensors at layer :math:`\ell`).

Every form is a SymPy expression that expands back to the derivation (:meth:`Formula.check`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Sequence

import sympy as sp

from effth.algebra.expectation import GaussianExpectation
from effth.algebra.tensors import InverseKernel, SampleSum, SampleTensor

from .latex import EffthLatexPrinter
from .simplify import Structured
from .structured import (BlockFunction, Connected, DerivativeExpectation, HermiteExpectation,
                         expanded_terms, term_dict)

__all__ = ["Formula", "document", "rendered_width", "FORMS", "LINE_WIDTH"]

#: The printed forms of a derivation.
FORMS = ("edgeworth", "book", "compact")

#: Default line width of ``env="align"``, in :func:`rendered_width` units: one unit is about 7 pt
#: of 10 pt math, so 66 units fill the 17 cm text width of :func:`document` (checked by pdflatex).
LINE_WIDTH = 66

_key = sp.default_sort_key


class _Printer(EffthLatexPrinter):
    r"""The book-notation printer of formulas: :math:`\langle\cdot\rangle` without ``\left``/``\right``
    (the book's own LaTeX), derivative expectations and connected brackets likewise."""

    def _print(self, expr, **kwargs):
        if isinstance(expr, GaussianExpectation):
            from effth.algebra.expectation.atom import _latex_integrand
            return (rf"\langle {_latex_integrand(expr.integrand, self)} \rangle_{{{self._print(expr.kernel)}}}")
        if isinstance(expr, DerivativeExpectation):
            body = self._print(expr.integrand)
            if expr.betas:
                d = "".join(rf"\partial_{{{self._print(b)}}}" for b in expr.betas)
                many = isinstance(expr.integrand, (sp.Mul, sp.Add, sp.Pow))
                body = rf"{d}({body})" if many else f"{d} {body}"
            return rf"\langle {body} \rangle_{{{self._print(expr.kernel)}}}"
        if isinstance(expr, Connected):
            X, Y, K = expr.args
            k, x, y = self._print(K), self._print(X), self._print(Y)
            return (rf"\big[\langle {x}\, {y} \rangle_{{{k}}} - \langle {x} \rangle_{{{k}}}"
                    rf"\langle {y} \rangle_{{{k}}}\big]")
        if isinstance(expr, HermiteExpectation):
            body = self._print(expr.integrand)
            b, K = expr.betas, expr.kernel
            if len(b) == 1:
                tail = rf"z_{{{self._print(b[0])}}}"
            elif len(b) == 2:
                tail = (rf"(z_{{{self._print(b[0])}}}z_{{{self._print(b[1])}}} - "
                        rf"{self._print(K.entry(b[0], b[1]))})")
            else:
                tail = "{:}" + "".join(rf"z_{{{self._print(x)}}}" for x in b) + "{:}"
            return rf"\langle {body}\, {tail} \rangle_{{{self._print(K)}}}"
        return super()._print(expr, **kwargs)


# ========================================================================== rendered width
_COMMANDS_ZERO = ("left", "right", "big", "Big", "bigg", "Bigg", "!", ",", ";", ":", "quad",
                  "qquad", "displaystyle", "textstyle", "mathrm", "mathcal", "widehat", "hat",
                  "tilde", "widetilde", "bar", "operatorname", "text", "begin", "end")


def minify(tex: str) -> str:
    r"""Drop braces LaTeX does not need: ``_{1}`` → ``_1`` for one character, ``(\ell + 1)`` →
    ``(\ell+1)``; the output typesets identically."""
    tex = re.sub(r"([_^])\{([A-Za-z0-9])\}", r"\1\2", tex)
    tex = tex.replace(r"\ell + 1", r"\ell+1").replace(r"\ell - 1", r"\ell-1")
    return tex


def rendered_width(tex: str) -> float:
    r"""An estimate of the printed width of a LaTeX math string, in characters of body text.

    Commands that draw nothing (``\left``, spacing) count 0, a Greek letter or symbol 1, ``\sum``
    1.5, sub- and superscripts 0.7 per character, a fraction the wider of its two parts.  The
    layout uses it to break lines; the test suite checks the result with a real TeX run.
    """

    def group(s: str, i: int) -> tuple[str, int]:
        if i < len(s) and s[i] == "{":
            depth, j = 0, i
            while j < len(s):
                if s[j] == "{":
                    depth += 1
                elif s[j] == "}":
                    depth -= 1
                    if depth == 0:
                        return s[i + 1:j], j + 1
                j += 1
            return s[i + 1:], len(s)
        if i < len(s) and s[i] == "\\":
            m = re.match(r"\\[A-Za-z]+|\\.", s[i:])
            return m.group(0), i + len(m.group(0))
        return s[i:i + 1], i + 1

    def width(s: str, scale: float = 1.0) -> float:
        w, i = 0.0, 0
        while i < len(s):
            c = s[i]
            if c in " &{}":
                i += 1
                if c == "{" or c == "}":
                    continue
                continue
            if c in "^_":
                g, i = group(s, i + 1)
                w += width(g, scale * 0.7)
                continue
            if c == "\\":
                m = re.match(r"\\([A-Za-z]+|.)", s[i:])
                name = m.group(1)
                i += len(m.group(0))
                if name == "frac":
                    a, i = group(s, i)
                    b, i = group(s, i)
                    w += max(width(a, scale * 0.8), width(b, scale * 0.8)) + 0.3 * scale
                elif name in _COMMANDS_ZERO or name == "\\":
                    continue
                elif name in ("sum", "prod"):
                    w += 1.5 * scale
                else:
                    w += 1.0 * scale
                continue
            w += scale * (0.5 if c in "()[],.;'" else 1.0)
            i += 1
        return w

    return width(tex)


# ============================================================================= term printing
def _is_coupling(f) -> bool:
    return not isinstance(f, (SampleTensor, GaussianExpectation, DerivativeExpectation,
                              HermiteExpectation, Connected, SampleSum, BlockFunction)) and \
        not f.is_Number and not f.is_Add


def _coupling_key(f) -> tuple:
    s = str(f.base if f.is_Pow else f)
    order = ["C_W", "\\lambda_W", "\\lambda_b", "C_b"]
    for k, name in enumerate(order):
        if s.startswith(name):
            return (k, s)
    return (len(order) + (1 if "frac" in s else 0), s)


def _factor_chunks(factors: list, printer) -> list:
    """Chunks (printed pieces) of a product: tensors, then expectations, in a fixed order."""
    tensors = [f for f in factors if isinstance(f.base if f.is_Pow else f, (SampleTensor, BlockFunction))]
    atoms = [f for f in factors if isinstance(f.base if f.is_Pow else f,
                                              (GaussianExpectation, DerivativeExpectation,
                                               HermiteExpectation, Connected))]
    other = [f for f in factors if f not in tensors and f not in atoms]
    out = []
    sums = [f for f in other if f.is_Add]
    other = [f for f in other if not f.is_Add]
    if other:
        out.append(printer._print(sp.Mul(*other)))
    # a factored sum (a common prefactor taken out) in brackets, couplings first inside
    out.extend(rf"\big[{_plain_sum(f, printer)}\big]" for f in sorted(sums, key=_key))
    # inverse kernels next to the tensor they raise
    out.extend(printer._print(t) for t in sorted(tensors, key=lambda t: (
        isinstance(t, InverseKernel), _key(t))))

    def atom_key(a):
        base = a.base if a.is_Pow else a
        labels = sorted((x for x in base.free_symbols if not str(x).startswith(("beta", "gamma"))
                         and isinstance(x, sp.Symbol)), key=_key)
        return (_key(labels), _key(base))

    out.extend(printer._print(a) for a in sorted(atoms, key=atom_key))
    return out


def _term_chunks(term: sp.Expr, printer) -> tuple[str, list]:
    """``(sign, chunks)`` of one top-level term: the coefficient, the sum sign, then factors."""
    c, rest = term.as_coeff_Mul()
    sign = "-" if c < 0 else "+"
    c = abs(c)
    factors = list(sp.Mul.make_args(rest))
    couplings = sorted([f for f in factors if _is_coupling(f)], key=_coupling_key)
    sums = [f for f in factors if isinstance(f, SampleSum)]
    others = [f for f in factors if f not in couplings and f not in sums]
    chunks = []
    # inverse powers (1/C_W, 1/K^2) go into one fraction with the number: \frac{4 \lambda_W}{C_W}
    inverse = [f for f in factors if f.is_Pow and f.exp.is_negative and f not in sums]
    couplings = [f for f in couplings if f not in inverse]
    others = [f for f in others if f not in inverse]
    num = [printer._print(f) for f in couplings]
    if inverse:
        # the fraction holds the number and the hyperparameters; named functions and the width
        # ratio follow it
        hyper = [printer._print(f) for f in couplings if _coupling_key(f)[0] < 4]
        rest = [printer._print(f) for f in couplings if _coupling_key(f)[0] >= 4]
        den = ([str(c.q)] if c.q != 1 else []) + [printer._print(1 / f) for f in
                                                  sorted(inverse, key=_coupling_key)]
        top = " ".join(([str(c.p)] if c.p != 1 or not hyper else []) + hyper)
        chunks.append(" ".join([rf"\frac{{{top}}}{{{' '.join(den)}}}"] + rest))
    else:
        head = []
        if c != 1:
            head.append(printer._print(c) if c.q == 1 else rf"\frac{{{c.p}}}{{{c.q}}}")
        head.extend(num)
        if head:
            chunks.append(" ".join(head))
    # coefficient tensors outside the sums come before them
    chunks.extend(_factor_chunks([f for f in others if isinstance(f, SampleTensor)], printer))
    for s in sums:
        d = ",".join(printer._print(x) for x in s.dummies)
        chunks.append(rf"\sum_{{{d}\in\mathcal{{D}}}}")
        chunks.extend(_factor_chunks(list(sp.Mul.make_args(s.summand)), printer))
    chunks.extend(_factor_chunks([f for f in others if not isinstance(f, SampleTensor)], printer))
    if not chunks:
        chunks = ["1"]
    return sign, chunks


def _split_wide(chunk: str) -> list:
    r"""A factor wider than a line, e.g. :math:`\langle(a+b+\dots)\,\sigma\rangle`, cut before the
    ``+``/``-`` of its sums: ``\left(``/``\right)`` become ``\bigl(``/``\bigr)`` (which TeX may
    break between) and the cuts are at brace depth 0.  Pieces after the first start with their
    sign."""
    text = chunk.replace(r"\left(", r"\bigl(").replace(r"\right)", r"\bigr)")
    text = text.replace(r"\left[", r"\bigl[").replace(r"\right]", r"\bigr]")
    if r"\left" in text or r"\right" in text:
        return [chunk]                       # other delimiters: keep the factor whole
    out, cur, depth = [], "", 0
    for k, ch in enumerate(text):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if depth == 0 and ch in "+-" and k > 0 and text[k - 1] == " " and cur.strip() \
                and not cur.rstrip().endswith(("(", "[", "=")):
            out.append(cur.rstrip())
            cur = ""
        cur += ch
    out.append(cur.strip())
    return out if len(out) > 1 else [chunk]


def _lines(pieces: list, width: float) -> list:
    """Greedy line breaking of ``[(sign, chunks), ...]``: breaks at term boundaries, and inside a
    term (before a factor, continued with ``\\times``) only when one term is wider than a line."""
    lines: list = [[]]
    cur = 0.0
    for k, (sign, chunks) in enumerate(pieces):
        text = " ".join(chunks)
        lead = ("- " if sign == "-" else "") if k == 0 else f"{sign} "
        w = rendered_width(lead + text)
        if lines[-1] and cur + w > width:
            lines.append([])
            cur = 0.0
        if w <= width or len(chunks) == 1:
            lines[-1].append(lead + text)
            cur += w
            continue
        # a term wider than a line: break between its factors (a factor wider than a line
        # inside its sums, continued without the times sign)
        chunks = [p for ch in chunks for p in (_split_wide(ch) if rendered_width(ch) > width - 2 else [ch])]
        part, pw = lead, rendered_width(lead)
        for ch in chunks:
            cw = rendered_width(ch)
            if pw + cw > width and part.strip() not in ("", "-", "+"):
                lines[-1].append(part)
                lines.append([r"\qquad" if ch[:1] in "+-" else r"\qquad\times"])
                part, pw = "", 1.0
            part += (" " if part and not part.endswith(" ") else "") + ch
            pw += cw
        lines[-1].append(part)
        cur = pw
    return [" ".join(x) for x in lines if x]


# ================================================================================== Formula
@dataclass
class Formula:
    r"""A derived equation ``lhs = rhs`` with the definitions and conventions it needs.

    Parameters
    ----------
    lhs : sympy expression
    structured : Structured
        The right-hand side (:func:`~effth.printing.simplify.structure`).
    provenance : str
        Where it comes from and what it must equal (e.g. "PDLT (4.119)").
    conventions : sequence of str
        LaTeX sentences stating the notation (printed after the definitions).
    transforms : mapping form -> callable, optional
        ``expr -> expr`` for the forms other than ``"edgeworth"``, supplied by the theory that
        knows its kernel and layers: ``"book"`` (raise the contracted indices with inverse
        kernels) and ``"compact"`` (drop the layer labels; :attr:`conventions` say so).
    """

    lhs: sp.Expr
    structured: Structured
    provenance: str = ""
    conventions: Sequence[str] = ()
    transforms: dict = field(default_factory=dict)
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    # -- the forms ------------------------------------------------------------------------
    def rhs(self, form: str = "edgeworth") -> sp.Expr:
        """The right-hand side in ``form`` (a SymPy expression)."""
        if form not in FORMS:
            from effth.errors import DomainError
            raise DomainError(f"form must be one of {FORMS}, got {form!r}")
        if form == "edgeworth" or form not in self.transforms:
            return self.structured.rhs
        if form not in self._cache:
            self._cache[form] = self.transforms[form](self.structured.rhs)
        return self._cache[form]

    def check(self) -> bool:
        """Exact symbolic equality of the Edgeworth (and so of the compact) form with the
        derivation, term by term. The book form differs from it by Stein's identity, which needs
        the inverse kernel of the whole dataset: it is checked numerically (``evaluate``)."""
        return expanded_terms(self.structured.rhs, self.structured.samples) == \
            term_dict(self.structured.original)

    # -- printing -------------------------------------------------------------------------
    def _printer(self, form: str) -> _Printer:
        return _Printer()

    def pieces(self, form: str = "edgeworth") -> list:
        """The right-hand side as ``[(sign, chunks), ...]`` in print order."""
        p = self._printer(form)
        rhs = self.rhs(form)
        if rhs == 0:
            return [("+", ["0"])]
        terms = list(rhs.args) if isinstance(rhs, sp.Add) else [rhs]
        pieces = [_term_chunks(t, p) for t in terms]
        order = sorted(range(len(terms)), key=lambda k: _term_order(terms[k]))
        return [pieces[k] for k in order]

    def latex(self, form: str = "edgeworth", *, env: str | None = None,
              width: float = LINE_WIDTH, definitions: bool = True,
              conventions: bool = True) -> str:
        r"""LaTeX of the equation.

        Parameters
        ----------
        form : {"edgeworth", "book", "compact"}
        env : {None, "align", "align*", "aligned"}
            ``None``: one line, ``lhs = rhs`` (for inline use and for ``_repr_latex_``); the
            environments break lines at term boundaries with ``&=`` and ``\\``, each line at
            most ``width`` rendered characters (:func:`rendered_width`).
        definitions : bool
            Append the definitions of named random variables (``\text{where } ...``).
        conventions : bool
            With ``form="compact"``, also state the dropped layer labels (a document states
            them once).
        """
        return minify(self._latex(form, env, width, definitions, conventions))

    def _latex(self, form, env, width, definitions, conventions) -> str:
        lhs = _Printer()._print(self.lhs)
        pieces = self.pieces(form)
        defs = self.definition_lines(form, conventions) if definitions else []
        if env is None:
            body = " ".join((("- " if s == "-" else "") if k == 0 else f"{s} ") + " ".join(c)
                            for k, (s, c) in enumerate(pieces))
            out = f"{lhs} = {body}"
            if defs:
                out += r",\quad \text{where } " + r",\ ".join(defs)
            return out
        if env not in ("align", "align*", "aligned"):
            from effth.errors import DomainError
            raise DomainError(f"env must be None, 'align', 'align*' or 'aligned', got {env!r}")
        first = width - rendered_width(lhs) - 2
        lines = _lines(pieces, max(first, width * 0.6))
        rows = [f"{lhs} &= {lines[0]}"] + [rf"&\quad {ln}" for ln in lines[1:]]
        for d in defs:
            rows.append(rf"&\text{{where }} {d}" if d is defs[0] else rf"&\phantom{{\text{{where }}}} {d}")
        body = " \\\\\n".join(rows)
        return f"\\begin{{{env}}}\n{body}\n\\end{{{env}}}"

    def definition_lines(self, form: str = "edgeworth", conventions: bool = True) -> list:
        """LaTeX of each definition and of the notation (the lines after the equation)."""
        p = self._printer(form)
        out = []
        tr = self.transforms.get(form, lambda e: e) if form != "edgeworth" else (lambda e: e)
        for b, d in self.structured.definitions():
            out.append(f"{p._print(tr(b))} \\equiv {_plain_sum(tr(d), p)}")
        rhs = self.rhs(form)
        if rhs.has(DerivativeExpectation):
            out.append(r"\partial_{\beta} \equiv \partial/\partial z_{\beta}")
        if rhs.has(HermiteExpectation) and any(len(h.betas) > 2 for h in rhs.atoms(HermiteExpectation)):
            out.append(r"{:}z_{\beta_1}\cdots z_{\beta_r}{:} \text{ the Wick-ordered product w.r.t. } K^{(\ell)}")
        if form == "compact" and conventions:
            out.extend(self.conventions)
        return out

    def __str__(self) -> str:
        return self.text()

    def text(self, form: str = "edgeworth") -> str:
        """The equation as plain Unicode text (no LaTeX)."""
        from .text import text
        rhs = self.rhs(form)
        terms = list(rhs.args) if isinstance(rhs, sp.Add) else [rhs]
        terms = [terms[k] for k in sorted(range(len(terms)), key=lambda k: _term_order(terms[k]))]
        body = ""
        for k, t in enumerate(terms):
            c, rest = t.as_coeff_Mul()
            piece = text(-t if c < 0 else t)
            body += (("- " if c < 0 else "") if k == 0 else (" - " if c < 0 else " + ")) + piece
        defs = [f"{text(b)} := {text(d)}" for b, d in self.structured.definitions()]
        out = f"{text(self.lhs)} = {body}"
        if rhs.has(DerivativeExpectation):
            defs.append("∂_β := ∂/∂z_β")
        if defs:
            out += "\n  where " + "\n        ".join(defs)
        return out

    def length(self, form: str = "edgeworth") -> int:
        """Characters of LaTeX of the default print (equation and definitions, ``env=None``)."""
        return len(self.latex(form))

    def _repr_latex_(self) -> str:
        return "$$" + self.latex() + "$$"

    def document(self, title: str | None = None, form: str = "edgeworth") -> str:
        """A standalone, compilable ``.tex`` file with this formula (see :func:`document`)."""
        return document([self], title=title, form=form)


def _term_order(t: sp.Expr) -> tuple:
    """Book order: Gaussian part first, then the terms with cumulant tensors, by tensor."""
    tensors = sorted({type(x).__name__ for x in sp.preorder_traversal(t) if isinstance(x, SampleTensor)
                      and type(x).__name__ not in ("Kernel", "FrozenNTK", "InverseKernel")})
    ratio = any("frac{n" in str(x) for x in t.free_symbols)
    has_sum = t.has(SampleSum)
    return (ratio, has_sum, len(tensors), tensors, t.could_extract_minus_sign(), -len(str(t)))


def _plain_sum(d: sp.Expr, p) -> str:
    """A definition's right-hand side: a sum of coefficient × monomial, couplings first."""
    parts = []
    d = sp.expand(d)
    common = sp.factor_terms(d)
    if common.is_Mul and any(f.is_Add for f in common.args) and d.is_Add:
        # a prefactor common to every term is printed once: C_W (<s's'> + <s s''>)
        outer = sp.Mul(*[f for f in common.args if not f.is_Add])
        inner = sp.Mul(*[f for f in common.args if f.is_Add])
        if inner.is_Add:
            s, chunks = _term_chunks(outer, p)
            chunks = [c for c in chunks if c != "1"] + [rf"\big({_plain_sum(inner, p)}\big)"]
            return ("- " if s == "-" else "") + " ".join(chunks)
    terms = sorted(sp.Add.make_args(d), key=lambda t: t.could_extract_minus_sign())
    for k, t in enumerate(terms):
        s, chunks = _term_chunks(t, p)
        lead = ("- " if s == "-" else "") if k == 0 else f"{s} "
        parts.append(lead + " ".join(chunks))
    return " ".join(parts)


def document(formulas: Sequence, *, title: str | None = None, form: str = "edgeworth",
             width: float = LINE_WIDTH) -> str:
    r"""A standalone ``.tex`` document of ``formulas`` (objects with ``.latex(env=...)`` and a
    ``provenance``), each in an ``align*`` environment, that compiles with ``pdflatex``.

    Uses only ``amsmath``, ``amssymb`` and ``geometry`` (a4, 2 cm margins, 10 pt).
    """
    head = [r"\documentclass[10pt]{article}", r"\usepackage[a4paper,margin=2cm]{geometry}",
            r"\usepackage{amsmath,amssymb}", r"\allowdisplaybreaks", r"\begin{document}"]
    if title:
        head.append(rf"\section*{{{title}}}")
    body = []
    conv = [c for f in formulas for c in getattr(f, "conventions", ())] if form == "compact" else []
    if conv:
        # the compact form's notation, said once for the whole document
        seen = list(dict.fromkeys(conv))
        body.append(r"\noindent Notation: $" + r"$; $".join(seen) + "$.")
    for f in formulas:
        prov = getattr(f, "provenance", "")
        if prov:
            body.append(r"\noindent " + _tex_text(prov) + r"\nopagebreak")
        kw = {"conventions": False} if conv and isinstance(f, Formula) else {}
        body.append(f.latex(form, env="align*", width=width, **kw))
    return "\n".join(head + body + [r"\end{document}", ""])


def _tex_text(s: str) -> str:
    """Plain text made safe for LaTeX text mode."""
    rep = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
           "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}
    out = "".join(rep.get(c, c) for c in s)
    return out.replace("∞", r"$\infty$").replace("→", r"$\to$").replace("−", "-")
