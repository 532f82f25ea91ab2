r"""Plain-text (Unicode) printing of effth expressions: no LaTeX, no SymPy class names.

``text(expr)`` writes :math:`K^{(\ell)}_{\alpha_1\alpha_2}` as ``K^(ℓ)_α1α2``,
:math:`\langle\sigma'_{\alpha_1}\sigma'_{\alpha_2}\rangle_{K^{(\ell)}}` as ``⟨σ'_α1 σ'_α2⟩``,
:math:`C_W^{(\ell+1)}` as ``C_W^(ℓ+1)`` and sums over dummies as ``Σ_{β1,β2 ∈ D}``.

Examples
--------
>>> from effth.algebra.indices import alpha, ell, c_w
>>> from effth.algebra.tensors import Kernel
>>> text(c_w(ell + 1) * Kernel(alpha(1), alpha(2), ell))
'C_W^(ℓ+1) K^(ℓ)_α1α2'
"""

from __future__ import annotations

import re

import sympy as sp
from sympy.printing.str import StrPrinter

__all__ = ["TextPrinter", "text"]

_GREEK = {"alpha": "α", "beta": "β", "gamma": "γ", "delta": "δ", "epsilon": "ε", "ell": "ℓ",
          "sigma": "σ", "lambda": "λ", "Theta": "Θ", "Omega": "Ω", "phi": "φ", "mu": "μ",
          "nu": "ν", "chi": "χ", "Delta": "Δ", "kappa": "κ", "eta": "η", "rho": "ρ", "tau": "τ",
          "psi": "ψ", "zeta": "ζ", "xi": "ξ", "Phi": "Φ", "Gamma": "Γ", "parallel": "∥",
          "perp": "⊥"}
_PRIMES = {0: "", 1: "'", 2: "''", 3: "'''"}


def _tex_to_text(s: str) -> str:
    """A LaTeX stem (``\\lambda_{W}``, ``\\widehat{\\Omega}^{(\\ell+1)}``) as Unicode text."""
    s = re.sub(r"\\widehat\{\\?([A-Za-z]+)\}", lambda m: _GREEK.get(m.group(1), m.group(1)) + "\u0302", s)
    s = re.sub(r"\\frac\{([^{}]*(?:\{[^{}]*\}[^{}]*)*)\}\{([^{}]*(?:\{[^{}]*\}[^{}]*)*)\}",
               lambda m: f"({_tex_to_text(m.group(1))}/{_tex_to_text(m.group(2))})", s)
    s = re.sub(r"_\{([^{}]*[-+][^{}]*)\}", r"_(\1)", s)
    s = re.sub(r"\\([A-Za-z]+)", lambda m: _GREEK.get(m.group(1), m.group(1)), s)
    s = s.replace("\\{", "{").replace("\\}", "}")
    s = re.sub(r"_\{([^{}]*)\}", r"_\1", s)
    s = re.sub(r"\^\{\(([^{}]*)\)\}", r"^(\1)", s)
    s = s.replace("{", "").replace("}", "").replace(" ", "")
    return s


def _label(x) -> str:
    s = str(x)
    m = re.fullmatch(r"([A-Za-z]+)_?(\d*)", s)
    if m and m.group(1) in _GREEK:
        return _GREEK[m.group(1)] + m.group(2)
    return s.replace("ell", "ℓ").replace(" ", "")


class TextPrinter(StrPrinter):
    """SymPy's ``str`` printer with effth's objects written in the book's symbols."""

    printmethod = "_effth_text"

    def _print_Symbol(self, expr):
        name = expr.name
        if "\\" in name or "{" in name:
            return _tex_to_text(name)
        return _label(expr)

    def _print_LayerSymbol(self, expr):
        stem = _tex_to_text(expr.stem)
        layer = self._print(expr.layer).replace(" ", "")
        return f"{stem}_{layer}" if str(expr.args[2]) == "sub" else f"{stem}^({layer})"

    def _print_SampleTensor(self, expr):
        idx = [_label(i) for i in expr.indices]
        sub = f"({idx[0]}{idx[1]})({idx[2]}{idx[3]})" if expr.symmetry == "pairpair" else "".join(idx)
        if sub.strip("()") == "":       # one input, label dropped (PDLT §5.1)
            sub = ""
        stem = _tex_to_text(expr.stem)
        prefix = _tex_to_text(expr.layer_prefix)
        mark = ("^" if expr.raised else "_") if sub else ""
        if expr.layer is None:
            return f"{stem}{mark}{sub}"
        layer = f"{prefix}({self._print(expr.layer).replace(' ', '')})"
        if expr.raised:
            return f"{stem}_{layer}{mark}{sub}"
        return f"{stem}^{layer}{mark}{sub}"

    def _print_KernelMatrix(self, expr):
        t = expr.tensor
        layer = "" if expr.layer is None else f"({self._print(expr.layer).replace(' ', '')})"
        return f"{_tex_to_text(t.stem)}^{_tex_to_text(t.layer_prefix)}{layer}"

    def _print_GaussianVariable(self, expr):
        lab = _label(expr.label)
        return f"z_{lab}" if lab else "z"

    def _print_ActivationFactor(self, expr):
        a = expr.order
        head = _GREEK.get(expr.name, expr.name) + (_PRIMES[a] if a in _PRIMES else f"^({a})")
        lab = _label(expr.label)
        return f"{head}_{lab}" if lab else head

    def _print_NamedScalar(self, expr):
        return _tex_to_text(expr.name)

    def _integrand(self, F) -> str:
        return " ".join(self._print(f) for f in sp.Mul.make_args(F)) if isinstance(F, sp.Mul) \
            else self._print(F)

    def _print_GaussianExpectation(self, expr):
        return f"⟨{self._integrand(expr.integrand)}⟩"

    def _print_DerivativeExpectation(self, expr):
        d = " ".join(f"∂_{_label(b)}" for b in expr.betas)
        F = expr.integrand
        body = f"({self._print(F)})" if isinstance(F, (sp.Add, sp.Mul)) else self._print(F)
        return f"⟨{d} {body}⟩" if d else f"⟨{body}⟩"

    def _print_HermiteExpectation(self, expr):
        zs = " ".join(f"z_{_label(b)}" for b in expr.betas)
        return f"⟨{self._integrand(expr.integrand)} :{zs}:⟩"

    def _print_Connected(self, expr):
        X, Y = (self._integrand(a) for a in expr.args[:2])
        return f"[⟨{X} {Y}⟩ - ⟨{X}⟩⟨{Y}⟩]"

    def _print_DerivedBlock(self, expr):
        d = "".join(f"∂_{_label(x)} " for x in expr.derivative_labels)
        return d + self._print(expr.base)

    def _print_BlockFunction(self, expr):
        return f"{_tex_to_text(expr.name)}_{''.join(_label(a) for a in expr.labels)}"

    def _print_Moment(self, expr):
        return "E[" + " ".join(f"z_{_label(a)}" for a in expr.args) + "]"

    def _print_Cumulant(self, expr):
        return "κ[" + ", ".join(f"z_{_label(a)}" for a in expr.args) + "]"

    def _print_SampleSum(self, expr):
        d = ",".join(_label(x) for x in expr.dummies)
        body = self._print(expr.summand)
        if isinstance(expr.summand, sp.Add):
            body = f"({body})"
        return f"Σ_{{{d} ∈ D}} {body}"

    def _print_Mul(self, expr):
        c, rest = expr.as_coeff_Mul()
        args = sp.Mul.make_args(rest)
        den = [f for f in args if f.is_Pow and f.exp.is_negative]
        factors = [self.parenthesize(f, 45) for f in args if f not in den]
        body = " ".join(factors) or "1"
        if den:
            d = " ".join(self.parenthesize(1 / f, 45) for f in den)
            body += f" / {d}" if len(den) == 1 and " " not in d else f" / ({d})"
        if c == 1:
            return body
        if c == -1:
            return "-" + body
        return f"{self._print(c)} {body}"

    def _print_Rational(self, expr):
        return f"{expr.p}/{expr.q}" if expr.q != 1 else str(expr.p)

    def _print_Pow(self, expr, rational=False):
        if expr.exp.is_Integer and expr.exp > 0:
            b = self.parenthesize(expr.base, 60)
            if "^" in b and not b.startswith("("):
                b = f"({b})"
            return f"{b}^{expr.exp}"
        return super()._print_Pow(expr, rational)


def text(expr) -> str:
    """``expr`` as plain Unicode text (:class:`TextPrinter`)."""
    return TextPrinter().doprint(expr)
