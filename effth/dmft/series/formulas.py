r"""The :math:`\gamma_0`-series of deep linear networks as printed formulas, order by order.

The deep linear DMFT on the discrete gradient-descent grid (Bordelon & Pehlevan (2022), §4.1,
App. F, eqs. (68)-(71), the closed equations of :mod:`effth.dmft.series.deep_linear`) is a set of
matrix equations on (time, sample) pairs.  Expanding every order parameter as
:math:`X=\sum_m\gamma_0^{2m}X_{2m}` turns each product into a Cauchy product and each factor
:math:`\gamma_0^2` into a shift, so the coefficient of :math:`\gamma_0^{2m}` of layer
:math:`\ell` is an explicit sum over the lower orders and the neighbouring layers
:math:`\ell\pm1`:

.. math::
   C^\ell_{2m} = A^{\ell-1}_{2m}+\textstyle\sum_{j\le m}\mathcal C[H^{\ell-1}_{2j},\Delta_{2m-2j}],\quad
   D^\ell_{2m} = B^{\ell}_{2m}+\textstyle\sum_{j\le m}\mathcal D[G^{\ell+1}_{2j},\Delta_{2m-2j}],

   M^\ell_{2m} = \textstyle\sum_{a+b=m-1}D^\ell_{2a}A^\ell_{2b},\quad
   A^\ell_{2m}=\textstyle\sum_{a+b=m}C^\ell_{2a}M^\ell_{2b},\quad
   B^{\ell-1}_{2m}=\textstyle\sum_{a+b=m}M^\ell_{2a}D^\ell_{2b},

   G^\ell_{2m}=\textstyle\sum_{a+b+c=m}M^\ell_{2a}Z^\ell_{2b}M^{\ell\top}_{2c},\quad
   Z^\ell_{2m}=G^{\ell+1}_{2m}+\textstyle\sum_{a+b+c=m-1}D^\ell_{2a}H^{\ell-1}_{2b}D^{\ell\top}_{2c},

   H^\ell_{2m}=H^{\ell-1}_{2m}+\textstyle\sum_{a+b=m-1}\big[C^\ell_{2a}Y^\ell_{2b}+(\cdot)^\top\big],\quad
   Y^\ell_{2m}=\textstyle\sum_{a+b=m}\big[B^{\ell-1}_{2a}H^{\ell-1}_{2b}+\tfrac12G^\ell_{2a}C^{\ell\top}_{2b}\big],

with the drivers :math:`\mathcal C[X,\delta]_{(t\mu),s}=\eta\Theta(t>s)\sum_\nu X_{(t\mu),(s\nu)}
\delta_\nu(s)`, :math:`\mathcal D[X,\delta]_{t,(s\nu)}=\eta\Theta(t>s)X_{ts}\delta_\nu(s)`, the
boundary values :math:`H^0=K^x`, :math:`G^{L+1}=\mathbf 1`, :math:`A^0=B^L=0`, the NTK
:math:`K(t)=G^1(t,t)K^x+\sum_\ell G^{\ell+1}(t,t)H^\ell(t,t)` and the predictions of the exact
closure :math:`f(t)=[B^{L-1}H^{L-1}]_{t,(t\cdot)}+[C^LG^L]_{(t\cdot),t}` or of NTK-Euler.  At
order 0 these reduce to closed forms rational in :math:`L` and :math:`\ell`
(:math:`C^\ell_0=\ell\,\mathcal C[K^x,\Delta_0]`, :math:`D^\ell_0=(L+1-\ell)\,\mathcal D[\mathbf 1,\Delta_0]`),
and at order 2 the whole system sums to Bordelon & Pehlevan (2022), eqs. (144)-(147) with the
corrected prefactor :math:`L(L+1)^2(L+2)/12` (:mod:`effth.dmft.series.leading`).

:func:`deep_linear_formulas` writes the equations of every order up to the requested one with the
sums spelled out and the vanishing terms (:math:`M_0=I` products, ...) dropped;
:class:`SeriesFormulas` prints them (:meth:`~SeriesFormulas.latex`, :meth:`~SeriesFormulas.text`,
with every symbol defined) and *evaluates the printed equations* (:meth:`~SeriesFormulas.evaluate`)
by whole-grid matrix algebra -- an independent implementation of the time-stepping engine
:func:`~effth.dmft.series.deep_linear.deep_linear_series_arrays`, which it must reproduce to
round-off.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
import sympy as sp

from effth._signature import public
from effth.errors import DomainError
from effth.printing import latex as _latex
from effth.printing.formula import LINE_WIDTH, rendered_width

__all__ = ["SeriesFormulas", "deep_linear_formulas"]

# ---------------------------------------------------------------------- factors


@dataclass(frozen=True)
class Sym:
    """A coefficient matrix :math:`X^{\\ell+\\mathrm{shift}}_{2m}` (optionally transposed)."""

    base: str
    shift: int
    m: int
    T: bool = False

    def t(self) -> "Sym":
        return Sym(self.base, self.shift, self.m, not self.T)

    def layer_tex(self) -> str:
        return {0: r"\ell", 1: r"\ell+1", -1: r"\ell-1"}[self.shift]

    def layer_text(self) -> str:
        return {0: "l", 1: "(l+1)", -1: "(l-1)"}[self.shift]

    def latex(self) -> str:
        s = f"{self.base}^{{{self.layer_tex()}}}_{{{2 * self.m}}}"
        return f"{{{s}}}^{{\\top}}" if self.T else s

    def text(self) -> str:
        s = f"{self.base}^{self.layer_text()}_{2 * self.m}"
        return f"{s}'" if self.T else s


@dataclass(frozen=True)
class Const:
    """``Kx`` (:math:`K^x` on every time pair, ``Tn x Tn``) or ``one`` (all-ones ``T x T``)."""

    name: str
    T: bool = False

    def t(self) -> "Const":
        return self

    def latex(self) -> str:
        return {"Kx": "K^{x}", "one": r"\mathbf{1}"}[self.name]

    def text(self) -> str:
        return {"Kx": "Kx", "one": "1"}[self.name]


@dataclass(frozen=True)
class Drive:
    r"""``kind='C'``: :math:`\mathcal C[X,\Delta_{2j}]` (``Tn x T``); ``'D'``: :math:`\mathcal D[X,\Delta_{2j}]` (``T x Tn``)."""

    kind: str
    arg: object
    j: int
    T: bool = False

    def t(self) -> "Drive":
        return Drive(self.kind, self.arg, self.j, not self.T)

    def latex(self) -> str:
        s = rf"\mathcal{{{self.kind}}}[{self.arg.latex()},\Delta_{{{2 * self.j}}}]"
        return f"{s}^{{\\top}}" if self.T else s

    def text(self) -> str:
        s = f"{self.kind}drive[{self.arg.text()}, Delta_{2 * self.j}]"
        return f"{s}'" if self.T else s


@dataclass(frozen=True)
class Term:
    """``coef * f1 f2 ...`` (``transpose``: the transpose of that product is added too)."""

    coef: Fraction
    factors: tuple
    transpose: bool = False


@dataclass(frozen=True)
class Equation:
    """``lhs = sum(terms)`` for every hidden layer :math:`\\ell` (or once, ``layer_free``)."""

    lhs: Sym
    terms: tuple
    note: str = ""


# ---------------------------------------------------------------------- layout
def _chunks(line: str) -> list:
    """Split a LaTeX line at its top-level term boundaries (``+``, ``-``, ``,\\quad``, ``;\\ ``)."""
    out, cur, depth, i = [], "", 0, 0
    while i < len(line):
        ch = line[i]
        if line.startswith(r"\big[", i) or line.startswith(r"\big(", i):
            cur += line[i:i + 5]
            depth += 1
            i += 5
            continue
        if line.startswith(r"\big]", i) or line.startswith(r"\big)", i):
            cur += line[i:i + 5]
            depth -= 1
            i += 5
            continue
        if ch in "{[(":
            depth += 1
        elif ch in "}])":
            depth -= 1
        if depth == 0 and ch in "+-" and cur and not cur.endswith(("=", "(", "{")):
            out.append(cur)
            cur = ""
        for sep in (r",\quad ", r";\ "):
            if depth == 0 and line.startswith(sep, i):
                out.append(cur + sep)
                cur = ""
                i += len(sep)
                break
        else:
            cur += ch
            i += 1
    out.append(cur)
    return [c for c in out if c]


def _wrap_raw(row: str, width: float) -> list:
    """A definitions row ``&...`` split at its ``,\\ `` separators into rows of at most ``width``."""
    rows, cur = [], ""
    for piece in row[1:].split(r",\ "):
        cand = f"{cur},\\ {piece}" if cur else piece
        if cur and rendered_width(cand) > width:
            rows.append(cur + ",")
            cur = r"\quad " + piece
        else:
            cur = cand
    rows.append(cur)
    return ["&" + r for r in rows]


def _layout(line: str, width: float) -> list:
    """``lhs &= ...`` rows of at most ``width`` (continuations ``&\\quad ...``)."""
    k = line.find("=")
    lhs, rhs = (line[:k], line[k + 1:]) if k > 0 else ("", line)
    rows, cur = [], ""
    budget = width - rendered_width(lhs)
    for c in _chunks(rhs):
        if cur and rendered_width(cur + c) > budget:
            rows.append(cur)
            cur = ""
        cur += c
    rows.append(cur)
    head = f"{lhs}&=" if k > 0 else "&"
    return [head + rows[0]] + [r"&\quad " + r for r in rows[1:]]


def align_rows(lines, width: float = LINE_WIDTH, env: str | None = None) -> str:
    r"""Lay printed lines out for ``align*``: equations ``lhs &= ...`` broken at term boundaries,
    headings ``\text{...}`` and raw rows ``&...`` (broken at ``,\ ``); ``env`` wraps the body."""
    rows = []
    for ln in lines:
        if ln.startswith(r"\text{"):
            rows.append("&" + ln)
        elif ln.startswith("&"):
            rows.extend(_wrap_raw(ln, width))
        else:
            rows.extend(_layout(ln, width))
    body = " \\\\\n".join(rows)
    return body if env is None else f"\\begin{{{env}}}\n{body}\n\\end{{{env}}}"


# ---------------------------------------------------------------------- building the system
def _compositions(total: int, parts: int):
    """All ``parts``-tuples of non-negative integers summing to ``total``."""
    if parts == 1:
        yield (total,)
        return
    for a in range(total + 1):
        for rest in _compositions(total - a, parts - 1):
            yield (a,) + rest


def _sub0(f):
    """Replace order-0 objects by their closed forms (``H_0 = K^x``, ``G_0 = 1``, ``A_0 = C_0``,
    ``B_0 = D_0``, ``Z_0 = 1``); ``None`` for the identity ``M_0 = I``."""
    if isinstance(f, Sym) and f.m == 0:
        if f.base == "M":
            return None
        if f.base == "H":
            return Const("Kx")
        if f.base in ("G", "Z"):
            return Const("one")
        if f.base == "A":
            return Sym("C", f.shift, 0, f.T)
        if f.base == "B":
            return Sym("D", f.shift + 1, 0, f.T)
    if isinstance(f, Drive):
        return Drive(f.kind, _sub0(f.arg), f.j, f.T)
    return f


def _term(coef, *factors, transpose=False) -> Term | None:
    out = []
    for f in factors:
        g = _sub0(f)
        if g is not None:
            out.append(g)
    return Term(Fraction(coef), tuple(out), transpose)


def _order_equations(m: int, gi: bool) -> list:
    """The equations of order :math:`\\gamma_0^{2m}`, ``m >= 1``."""
    S = Sym
    eqs = []
    # upward: M, C, A
    eqs.append(Equation(S("M", 0, m), tuple(
        _term(1, S("D", 0, a), S("A", 0, b)) for a, b in _compositions(m - 1, 2))))
    terms = [] if gi else [_term(1, S("A", -1, m))]
    terms += [_term(1, Drive("C", S("H", -1, j), m - j)) for j in range(m + 1)]
    eqs.append(Equation(S("C", 0, m), tuple(terms)))
    eqs.append(Equation(S("A", 0, m), tuple(
        _term(1, S("C", 0, a), S("M", 0, b)) for a, b in _compositions(m, 2))))
    # downward: D, B, Z, G
    terms = [] if gi else [_term(1, S("B", 0, m))]
    terms += [_term(1, Drive("D", S("G", 1, j), m - j)) for j in range(m + 1)]
    eqs.append(Equation(S("D", 0, m), tuple(terms)))
    eqs.append(Equation(S("B", -1, m), tuple(
        _term(1, S("M", 0, a), S("D", 0, b)) for a, b in _compositions(m, 2))))
    terms = [_term(1, S("G", 1, m))]
    terms += [_term(1, S("D", 0, a), S("H", -1, b), S("D", 0, c, True))
              for a, b, c in _compositions(m - 1, 3)]
    eqs.append(Equation(S("Z", 0, m), tuple(terms)))
    eqs.append(Equation(S("G", 0, m), tuple(
        _term(1, S("M", 0, a), S("Z", 0, b), S("M", 0, c, True)) for a, b, c in _compositions(m, 3))))
    # upward again: H, Y
    terms = [_term(1, S("H", -1, m))]
    terms += [_term(1, S("C", 0, a), S("Y", 0, b), transpose=True) for a, b in _compositions(m - 1, 2)]
    eqs.append(Equation(S("H", 0, m), tuple(terms)))
    terms = [_term(1, S("B", -1, a), S("H", -1, b)) for a, b in _compositions(m, 2)]
    terms += [_term(Fraction(1, 2), S("G", 0, a), S("C", 0, b, True)) for a, b in _compositions(m, 2)]
    eqs.append(Equation(S("Y", 0, m), tuple(terms)))
    return eqs


def _merge(terms) -> tuple:
    """Add the coefficients of equal products (``G_0 = 1`` makes some coincide)."""
    acc: dict = {}
    for t in terms:
        key = (t.factors, t.transpose)
        acc[key] = acc.get(key, Fraction(0)) + t.coef
    return tuple(Term(c, f, tr) for (f, tr), c in acc.items() if c != 0)


@public
@dataclass
class SeriesFormulas:
    r"""The printed order-by-order equations of the deep linear :math:`\gamma_0`-series.

    Attributes
    ----------
    order : int
        Highest power of :math:`\gamma_0` (even).
    hidden_layers : int or None
        :math:`L` (``None``: symbolic; :meth:`evaluate` needs a number).
    closure : {'exact', 'ntk'}
    gradient_independent : bool
        The expansion of the gradient-independence ansatz :math:`A=B=0`.
    equations : dict
        ``m -> list of Equation`` for ``m = 1 .. order/2`` (order 0: closed forms, printed).
    """

    order: int
    hidden_layers: int | None
    closure: str
    gradient_independent: bool
    equations: dict = field(repr=False)

    # ------------------------------------------------------------------ printing
    def _coef_latex(self, c: Fraction, first: bool) -> str:
        sign = "-" if c < 0 else ("" if first else "+")
        a = abs(c)
        body = "" if a == 1 else _latex(sp.Rational(a.numerator, a.denominator)) + r"\,"
        return f"{sign}{body}"

    def _coef_text(self, c: Fraction, first: bool) -> str:
        sign = "- " if c < 0 else ("" if first else "+ ")
        a = abs(c)
        return f"{sign}{'' if a == 1 else str(a) + ' '}"

    def _rhs(self, terms, tex: bool) -> str:
        parts = []
        for i, t in enumerate(terms):
            fs = [f.latex() if tex else f.text() for f in t.factors]
            body = ("\\," if tex else " ").join(fs)
            if t.transpose:
                body = (rf"\big[{body}+({body})^{{\top}}\big]" if tex
                        else f"[{body} + ({body})']")
            coef = self._coef_latex(t.coef, i == 0) if tex else self._coef_text(t.coef, i == 0)
            parts.append(coef + body)
        if not parts:
            return "0"
        return "".join(parts) if tex else " ".join(parts)

    def _lazy_lines(self, tex: bool) -> list:
        gi = self.gradient_independent
        if tex:
            c0 = r"\mathcal{C}[K^{x},\Delta_{0}]" if gi else r"\ell\,\mathcal{C}[K^{x},\Delta_{0}]"
            d0 = r"\mathcal{D}[\mathbf{1},\Delta_{0}]" if gi else r"(L+1-\ell)\,\mathcal{D}[\mathbf{1},\Delta_{0}]"
            return [r"H^{\ell}_{0}=K^{x},\quad G^{\ell}_{0}=\mathbf{1},\quad M^{\ell}_{0}=I,\quad "
                    r"A^{\ell}_{0}=C^{\ell}_{0},\quad B^{\ell-1}_{0}=D^{\ell}_{0}",
                    rf"C^{{\ell}}_{{0}}={c0},\quad D^{{\ell}}_{{0}}={d0}",
                    r"Y^{\ell}_{0}=D^{\ell}_{0}\,K^{x}+\tfrac12\,\mathbf{1}\,{C^{\ell}_{0}}^{\top}",
                    r"\Delta_{0}(t_{i+1})=(1-\eta K_{0})\Delta_{0}(t_{i}),\quad "
                    r"\Delta_{0}(t_{0})=y,\quad K_{0}=" + self._k0(True)]
        c0 = "Cdrive[Kx, Delta_0]" if gi else "l Cdrive[Kx, Delta_0]"
        d0 = "Ddrive[1, Delta_0]" if gi else "(L+1-l) Ddrive[1, Delta_0]"
        return ["H^l_0 = Kx,  G^l_0 = 1,  M^l_0 = I,  A^l_0 = C^l_0,  B^(l-1)_0 = D^l_0",
                f"C^l_0 = {c0},  D^l_0 = {d0}",
                "Y^l_0 = D^l_0 Kx + 1/2 1 C^l_0'",
                "Delta_0(t_(i+1)) = (1 - eta K_0) Delta_0(t_i),  Delta_0(t_0) = y,  K_0 = " + self._k0(False)]

    def _k0(self, tex: bool) -> str:
        """The lazy error's kernel: the NTK :math:`(L+1)K^x`; the gradient-independence ansatz
        with the exact closure (``f = D^L H^{L-1} + C^L G^L`` with :math:`C^L_0, D^L_0` of one layer
        each) drives it with :math:`2K^x`."""
        two = self.gradient_independent and self.closure == "exact"
        if tex:
            return r"2\,K^{x}" if two else r"(L+1)\,K^{x}"
        return "2 Kx" if two else "(L+1) Kx"

    def _closing_lines(self, m: int, tex: bool) -> list:
        L = r"L" if tex else "L"
        k = 2 * m
        pairs = list(_compositions(m, 2))
        if tex:
            def gh(a, b):
                g = r"\mathbf{1}" if a == 0 else f"G^{{\\ell+1}}_{{{2 * a}}}(t,t)"
                h = "K^{x}" if b == 0 else f"H^{{\\ell}}_{{{2 * b}}}(t,t)"
                return h if a == 0 else f"{g}\\,{h}"
            ntk = (rf"K_{{{k}}}(t)=G^{{1}}_{{{k}}}(t,t)\,K^{{x}}+\sum_{{\ell=1}}^{{{L}}}\big["
                   + "+".join(gh(a, b) for a, b in pairs) + r"\big]")
            if self.closure == "exact":
                f = (rf"f_{{{k}}}(t)_{{\mu}}=\big[" + "+".join(
                    (f"B^{{L-1}}_{{{2 * a}}}" if a else "D^{L}_{0}") + (
                        f"\\,H^{{L-1}}_{{{2 * b}}}" if b else r"\,K^{x}")
                    for a, b in pairs) + r"\big]_{t,(t\mu)}+\big[" + "+".join(
                    f"C^{{L}}_{{{2 * a}}}" + (f"\\,G^{{L}}_{{{2 * b}}}" if b else r"\,\mathbf{1}")
                    for a, b in pairs) + r"\big]_{(t\mu),t}")
            else:
                f = (rf"f_{{{k}}}(t_{{i+1}})=f_{{{k}}}(t_i)+\eta\big["
                     + "+".join(f"K_{{{2 * a}}}(t_i)\\,\\Delta_{{{2 * b}}}(t_i)" for a, b in pairs)
                     + rf"\big],\quad f_{{{k}}}(t_0)=0")
            loss = (rf"\mathcal{{L}}_{{{k}}}(t)=\tfrac12\big["
                    + "+".join(rf"\Delta_{{{2 * a}}}(t)\cdot\Delta_{{{2 * b}}}(t)" for a, b in pairs)
                    + r"\big]")
            return [ntk, f, rf"\Delta_{{{k}}}=-f_{{{k}}}\ (\text{{training points}})", loss]

        def ght(a, b):
            g = f"G^(l+1)_{2 * a}(t,t)"
            h = "Kx" if b == 0 else f"H^l_{2 * b}(t,t)"
            return h if a == 0 else f"{g} {h}"
        ntk = (f"K_{k}(t) = G^1_{k}(t,t) Kx + sum_(l=1..L) [" + " + ".join(ght(a, b) for a, b in pairs)
               + "]")
        if self.closure == "exact":
            f = (f"f_{k}(t)_mu = [" + " + ".join(
                (f"B^(L-1)_{2 * a}" if a else "D^L_0") + (f" H^(L-1)_{2 * b}" if b else " Kx")
                for a, b in pairs) + "]_(t,(t mu)) + [" + " + ".join(
                f"C^L_{2 * a}" + (f" G^L_{2 * b}" if b else " 1") for a, b in pairs) + "]_((t mu),t)")
        else:
            f = (f"f_{k}(t_(i+1)) = f_{k}(t_i) + eta [" + " + ".join(
                f"K_{2 * a}(t_i) Delta_{2 * b}(t_i)" for a, b in pairs) + f"],  f_{k}(t_0) = 0")
        loss = (f"loss_{k}(t) = 1/2 [" + " + ".join(f"Delta_{2 * a}(t).Delta_{2 * b}(t)" for a, b in pairs)
                + "]")
        return [ntk, f, f"Delta_{k} = -f_{k} (training points)", loss]

    def _definitions(self, tex: bool) -> list:
        Ln = "" if self.hidden_layers is None else f", L={self.hidden_layers}"
        L = "L"
        if tex:
            return [
                r"&X^{\ell}_{2m}:\ \text{coefficient of }\gamma_0^{2m}\text{ of }X\text{ in hidden layer }"
                rf"\ell=1..L{Ln},\ \text{{on (time, sample) pairs }}a=(t_i,\mu),\ t_i=i\eta",
                r"&H^{\ell}_{ab}:\ \text{feature kernel},\ G^{\ell}_{ts}:\ \text{gradient kernel},\ "
                r"A^{\ell}_{(t\mu),s},\ B^{\ell}_{t,(s\nu)}:\ \text{responses (scaled)}",
                r"&C^{\ell},D^{\ell}:\ \text{field drivers},\ M^{\ell}=(I-\gamma_0^2D^{\ell}C^{\ell})^{-1},\ "
                r"Y^{\ell},Z^{\ell}:\ \text{intermediates}",
                r"&\mathcal{C}[X,\delta]_{(t\mu),s}=\eta\,\Theta(t>s)\sum_{\nu}X_{(t\mu),(s\nu)}\delta_{\nu}(s),\quad "
                r"\mathcal{D}[X,\delta]_{t,(s\nu)}=\eta\,\Theta(t>s)\,X_{ts}\,\delta_{\nu}(s)",
                r"&K^{x}_{(t\mu),(s\nu)}=K^{x}_{\mu\nu}\ \text{(input kernel)},\ \mathbf{1}_{ts}=1,\ "
                r"y:\ \text{targets},\ \Delta_{2m}(t)_{\nu}:\ \text{error on training point }\nu",
                r"&\text{boundaries: }H^{0}=K^{x},\ G^{L+1}=\mathbf{1},\ A^{0}=0,\ B^{L}=0"
                + (r";\ \text{gradient independence: } A=B=0" if self.gradient_independent else ""),
            ]
        return [
            f"X^l_2m: coefficient of gamma0^(2m) of X in hidden layer l = 1..L{Ln.replace('=', ' = ')}; matrices on "
            "(time, sample) pairs a = (t_i, mu), t_i = i eta; X' is the transpose",
            "H: feature kernel, G: gradient kernel, A, B: responses (scaled), C, D: field drivers, "
            "M = (I - gamma0^2 D C)^(-1), Y, Z: intermediates",
            "Cdrive[X, d]_((t mu), s) = eta Theta(t>s) sum_nu X_((t mu),(s nu)) d_nu(s);  "
            "Ddrive[X, d]_(t, (s nu)) = eta Theta(t>s) X_(t s) d_nu(s)",
            "Kx_((t mu),(s nu)) = Kx_(mu nu) (input kernel), 1_(t s) = 1, Delta_2m(t)_nu: error "
            "coefficient on training point nu, y: targets",
            f"boundaries: H^0 = Kx, G^({L}+1) = 1, A^0 = 0, B^{L} = 0"
            + ("; gradient independence: A = B = 0" if self.gradient_independent else ""),
        ]

    def lines(self, tex: bool = True) -> list:
        """Every printed line: order 0, each order's equations, the NTK and closure, definitions."""
        out = [r"\text{order }\gamma_0^{0}:" if tex else "order gamma0^0:"]
        out += self._lazy_lines(tex)
        for m in range(1, self.order // 2 + 1):
            out.append(rf"\text{{order }}\gamma_0^{{{2 * m}}}:" if tex else f"order gamma0^{2 * m}:")
            for eq in self.equations[m]:
                lhs = eq.lhs.latex() if tex else eq.lhs.text()
                out.append(f"{lhs}={self._rhs(eq.terms, True)}" if tex
                           else f"{lhs} = {self._rhs(eq.terms, False)}")
            out += self._closing_lines(m, tex)
        out.append(r"\text{where}" if tex else "where")
        out += self._definitions(tex)
        return out

    def latex(self, form=None, env: str | None = None, width: float = LINE_WIDTH) -> str:
        r"""The equations in LaTeX, one a line, long ones broken at term boundaries.

        ``env=None``: the body of an ``align*`` (``&=`` and ``\\``); ``env='align*'`` or
        ``'aligned'`` wraps it.  ``width`` is in :func:`~effth.printing.formula.rendered_width`
        units (the default fills the text width of :func:`effth.printing.formula.document`).
        ``form`` is accepted for :func:`~effth.printing.formula.document` and ignored.
        """
        return align_rows(self.lines(True), width, env)

    @property
    def provenance(self) -> str:
        """What the equations are (a heading for :func:`~effth.printing.formula.document`)."""
        what = "gradient-independence ansatz" if self.gradient_independent else "DMFT"
        return (f"Deep linear {what}, gamma0-series through gamma0^{self.order}, {self.closure} "
                "closure (Bordelon & Pehlevan (2022), eqs. (68)-(71), App. M)")

    def text(self) -> str:
        """Plain text (no backslash): the same equations, one a line."""
        return "\n".join(self.lines(False))

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, kx, y, *, eta: float, steps: int, hidden_layers: int | None = None) -> dict:
        r"""Evaluate the printed equations on a grid by whole-matrix algebra.

        Returns ``{'H': (K+1, L, T, n, T, n), 'G': (K+1, L, T, T), 'ntk': (K+1, T, n, n),
        'f': (K+1, T, n), 'delta': (K+1, T, P), 'loss': (K+1, T)}`` (``K = order/2``), the layout of
        :class:`~effth.dmft.series.deep_linear.DeepLinearSeriesArrays`.
        """
        L = self.hidden_layers if hidden_layers is None else int(hidden_layers)
        if L is None or L < 1:
            raise DomainError("evaluate() needs a number of hidden layers >= 1 (the formulas were "
                              "printed with symbolic L): pass hidden_layers=")
        kx = np.asarray(kx, dtype=float)
        y = np.asarray(y, dtype=float)
        T, n, P, K = int(steps), kx.shape[0], y.shape[0], self.order // 2
        if kx.shape != (n, n) or P > n:
            raise DomainError(f"kx must be square (n, n) with n >= len(y); got {kx.shape}, {y.shape}")
        Tn = T * n
        mask = np.tril(np.ones((T, T)), -1)                              # Theta(t > s)
        KX = np.tile(kx, (T, T))
        ONE = np.ones((T, T))
        gi = self.gradient_independent
        val: dict = {}
        delta = np.zeros((K + 1, T, n))

        def drive(kind, X, d):                                           # d: (T, n)
            if kind == "C":
                blk = X.reshape(Tn, T, n)
                return eta * mask.repeat(n, axis=0) * np.einsum("asn,sn->as", blk, d)
            return (eta * (mask * X)[:, :, None] * d[None, :, :]).reshape(T, Tn)

        def get(f, ell):
            if isinstance(f, Const):
                return KX if f.name == "Kx" else ONE
            if isinstance(f, Drive):
                return drive(f.kind, get(f.arg, ell), delta[f.j])
            lay = ell + f.shift
            x = _boundary(f.base, lay, f.m)
            if x is None:
                x = val[(f.base, lay, f.m)]
            return x.T if f.T else x

        def _boundary(base, lay, m):
            if base == "H" and lay == 0:
                return KX if m == 0 else np.zeros((Tn, Tn))
            if base == "G" and lay == L + 1:
                return ONE if m == 0 else np.zeros((T, T))
            if base == "A" and lay == 0:
                return np.zeros((Tn, T))
            if base == "B" and lay == L:
                return np.zeros((T, Tn))
            if base == "M" and m == 0:
                return np.eye(T)
            return None

        def rhs(eq, ell):
            acc = 0.0
            for t in eq.terms:
                p = get(t.factors[0], ell)
                for f in t.factors[1:]:
                    p = p @ get(f, ell)
                if t.transpose:
                    p = p + p.T
                acc = acc + float(t.coef) * p
            return acc

        def order0():
            for ell in range(1, L + 1):
                c0 = (1 if gi else ell) * drive("C", KX, delta[0])
                d0 = (1 if gi else L + 1 - ell) * drive("D", ONE, delta[0])
                val.update({("H", ell, 0): KX, ("G", ell, 0): ONE, ("C", ell, 0): c0,
                            ("A", ell, 0): c0, ("D", ell, 0): d0, ("B", ell - 1, 0): d0,
                            ("Y", ell, 0): d0 @ KX + 0.5 * ONE @ c0.T})

        def stage(m):
            eqs = {eq.lhs.base: eq for eq in self.equations[m]}
            for ell in range(1, L + 1):
                for b in ("H", "M", "C", "A"):
                    val[(b, ell, m)] = rhs(eqs[b], ell)
            for ell in range(L, 0, -1):
                val[("D", ell, m)] = rhs(eqs["D"], ell)
                val[("B", ell - 1, m)] = rhs(eqs["B"], ell)
                val[("Z", ell, m)] = rhs(eqs["Z"], ell)
                val[("G", ell, m)] = rhs(eqs["G"], ell)
            for ell in range(1, L + 1):
                val[("Y", ell, m)] = rhs(eqs["Y"], ell)

        def diag_t(X):                                                   # (Tn, Tn) -> (T, n, n)
            return np.einsum("tmtn->tmn", X.reshape(T, n, T, n))

        def ntk_f(m, ntk):
            Ht = lambda ell, b: diag_t(KX if b == 0 else get(Sym("H", 0, b), ell))  # noqa: E731
            Gt = lambda lay, a: np.diag(_boundary("G", lay, a) if lay == L + 1 else val[("G", lay, a)])  # noqa: E731
            k = Gt(1, m)[:, None, None] * kx[None]
            for ell in range(1, L + 1):
                for a, b in _compositions(m, 2):
                    k = k + Gt(ell + 1, a)[:, None, None] * Ht(ell, b)
            ntk[m] = k
            f = np.zeros((T, n))
            if self.closure == "exact":
                for a, b in _compositions(m, 2):
                    Bm = val[("B", L - 1, a)]
                    Hm = KX if b == 0 else (val[("H", L - 1, b)] if L > 1 else np.zeros((Tn, Tn)))
                    row = (Bm @ Hm).reshape(T, T, n)
                    col = (val[("C", L, a)] @ (ONE if b == 0 else val[("G", L, b)])).reshape(T, n, T)
                    f += np.einsum("ttn->tn", row) + np.einsum("tnt->tn", col)
            else:
                for i in range(1, T):
                    f[i] = f[i - 1] + eta * sum(ntk[a][i - 1][:, :P] @ delta[b][i - 1, :P]
                                                for a, b in _compositions(m, 2))
            return f

        ntk = np.zeros((K + 1, T, n, n))
        fs = np.zeros((K + 1, T, n))
        # order 0: the lazy Euler error, then the closed values
        K0 = (2 if gi and self.closure == "exact" else L + 1) * kx[:P, :P]
        delta[0, 0, :P] = y
        for i in range(1, T):
            delta[0, i, :P] = delta[0, i - 1, :P] - eta * K0 @ delta[0, i - 1, :P]
        order0()
        fs[0] = ntk_f(0, ntk)
        for m in range(1, K + 1):
            # the order-m error enters its own drivers strictly earlier in time: T sweeps are exact
            for _ in range(T + 1):
                stage(m)
                fs[m] = ntk_f(m, ntk)
                delta[m, :, :P] = -fs[m][:, :P]
        H = np.stack([np.stack([val[("H", ell, m)].reshape(T, n, T, n) for ell in range(1, L + 1)])
                      for m in range(K + 1)])
        G = np.stack([np.stack([val[("G", ell, m)] for ell in range(1, L + 1)]) for m in range(K + 1)])
        loss = np.stack([0.5 * sum((delta[a][:, :P] * delta[b][:, :P]).sum(axis=-1)
                                   for a, b in _compositions(m, 2)) for m in range(K + 1)])
        return {"H": H, "G": G, "ntk": ntk, "f": fs, "delta": delta[:, :, :P], "loss": loss}


@public
def deep_linear_formulas(order: int, *, hidden_layers: int | None = None, closure: str = "exact",
                         gradient_independent: bool = False) -> SeriesFormulas:
    r"""The deep linear :math:`\gamma_0`-series through :math:`\gamma_0^{\mathrm{order}}` as equations.

    Parameters
    ----------
    order : int
        Highest power of :math:`\gamma_0` (even, ``>= 2``).
    hidden_layers : int, optional
        :math:`L`; ``None`` keeps it symbolic (the equations hold for every :math:`\ell` with the
        boundary values; only :meth:`SeriesFormulas.evaluate` needs a number).
    closure : {'exact', 'ntk'}
        Predictions of the exact single-site closure or NTK-Euler (Bordelon & Pehlevan (2022), App. M).
    gradient_independent : bool
        The gradient-independence ansatz :math:`A=B=0` (Bordelon & Pehlevan (2022), §5).

    Examples
    --------
    >>> fm = deep_linear_formulas(4, hidden_layers=3)
    >>> print(fm.text().splitlines()[6])
    M^l_2 = D^l_0 C^l_0
    """
    if int(order) != order or order < 2 or order % 2:
        raise DomainError(f"order={order!r} must be an even integer >= 2 (odd orders vanish; "
                          "order 0 is the lazy limit)")
    if closure not in ("exact", "ntk"):
        raise DomainError(f"closure={closure!r} must be 'exact' or 'ntk'")
    if hidden_layers is not None and (int(hidden_layers) != hidden_layers or hidden_layers < 1):
        raise DomainError(f"hidden_layers={hidden_layers!r} must be a positive integer")
    eqs = {}
    for m in range(1, int(order) // 2 + 1):
        eqs[m] = [Equation(e.lhs, _merge(e.terms)) for e in _order_equations(m, bool(gradient_independent))]
    return SeriesFormulas(order=int(order), hidden_layers=None if hidden_layers is None else int(hidden_layers),
                          closure=closure, gradient_independent=bool(gradient_independent),
                          equations=eqs)
