r"""The :math:`O(\gamma_0^2)` coefficients of a deep nonlinear network with one input, as formulas
in one-dimensional Gaussian moments of the activation.

With one input every lazy source is a scalar Gaussian, :math:`u\sim\mathcal N(0,\Phi^{\ell-1}_0)`,
:math:`r\sim\mathcal N(0,G^{\ell+1}_0)`, so each average of the field expansion of
:mod:`effth.dmft.series.deep_nonlinear` (Bordelon & Pehlevan (2022), §5.2, App. P.2-P.6; the
expansion :math:`h^{(1)}=\tilde C(\dot\phi r)`, :math:`z^{(1)}=\tilde D\phi`,
:math:`h^{(2)}=\tilde Cg^{(1)}`, :math:`z^{(2)}=\tilde D(\dot\phi h^{(1)})`) factorises into a
moment :math:`\langle\phi^{(a)}\phi^{(b)}\cdots\rangle_\ell` over :math:`u`, a Gaussian moment of
:math:`r` (:math:`\langle r^2\rangle=G^{\ell+1}_0`, :math:`\langle r^4\rangle=3(G^{\ell+1}_0)^2`) and a
function of the two times built from the vectors :math:`c^\ell=\tilde C^\ell\mathbf 1`,
:math:`d^\ell=\tilde D^\ell\mathbf 1` (the lazy drivers summed over their second time):

.. math::
   \Phi^\ell_2(t,s) &= G\langle\phi'^4\rangle c_tc_s
     + G\langle\phi\phi'^2\phi''\rangle\big[(\tilde Cc)_t+(\tilde Cc)_s+\tfrac12(c_t^2+c_s^2)\big]
     + \langle\phi^2\phi'^2\rangle\big[(\tilde Cd)_t+(\tilde Cd)_s\big] + \text{Price},

with :math:`G=G^{\ell+1}_0`, and likewise :math:`G^\ell_2` (six moments).  The Price terms carry
the :math:`O(\gamma_0^2)` change of the source covariances (paper (155)-(157)) up and down the
network; the NTK and the NTK-Euler error close the system.  :func:`deep_nonlinear_formulas`
builds the printed system (:meth:`NonlinearSeriesFormulas.latex`, ``.text()``) and
:meth:`NonlinearSeriesFormulas.evaluate` evaluates it with the moments from adaptive quadrature
(:func:`scipy.integrate.quad`) -- independent of the engine's tensor rules, which it reproduces.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import sympy as sp

from effth._signature import public
from effth.errors import DomainError
from effth.printing import latex as _latex
from effth.printing.formula import LINE_WIDTH

__all__ = ["NonlinearSeriesFormulas", "deep_nonlinear_formulas", "evaluate_several_inputs"]

# a moment is a tuple of derivative orders, e.g. (0, 1, 1, 2) = <phi phi'^2 phi''>
# a structure is (kind, x, y): 'outer' x_t y_s; 'sym' x_t y_s + y_t x_s; 'col' x_t + x_s;
# 'col2' x_t y_t + x_s y_s; 'mat' a matrix (the lower layer's Phi_2 or the upper G_2);
# 'diag' diag(P)_t + diag(P)_s
_SELF_PHI = (
    (Fraction(1), 1, (1, 1, 1, 1), ("outer", "c", "c")),
    (Fraction(1), 1, (0, 1, 1, 2), ("col", "Cc", None)),
    (Fraction(1, 2), 1, (0, 1, 1, 2), ("col2", "c", "c")),
    (Fraction(1), 0, (0, 0, 1, 1), ("col", "Cd", None)),
)
_SELF_G = (
    (Fraction(3), 2, (1, 1, 2, 2), ("outer", "c", "c")),
    (Fraction(3), 2, (1, 1, 2, 2), ("col", "Cc", None)),
    (Fraction(1), 1, (0, 1, 1, 2), ("sym", "c", "d")),
    (Fraction(1), 1, (0, 1, 1, 2), ("col", "Cd", None)),
    (Fraction(1), 1, (0, 1, 1, 2), ("col2", "c", "d")),
    (Fraction(1), 0, (0, 0, 1, 1), ("outer", "d", "d")),
    (Fraction(3, 2), 2, (1, 1, 1, 3), ("col2", "c", "c")),
    (Fraction(1), 1, (1, 1, 1, 1), ("col", "Dc", None)),
)
_PRICE_PHI = (
    (Fraction(1, 2), 0, (0, 2), ("diag", "Phi", None)),
    (Fraction(1), 0, (1, 1), ("mat", "Phi", None)),
)
_PRICE_G = (
    (Fraction(1, 2), 1, (1, 3), ("diag", "Phi", None)),
    (Fraction(1), 1, (2, 2), ("mat", "Phi", None)),
    (Fraction(1), 0, (1, 1), ("mat", "G", None)),
)

_PRIMES_TEX = {0: r"\phi", 1: r"\phi'", 2: r"\phi''", 3: r"\phi'''"}
_PRIMES_TXT = {0: "phi", 1: "phi'", 2: "phi''", 3: "phi'''"}
_VEC_TEX = {"c": "c^{\\ell}", "d": "d^{\\ell}", "Cc": r"(\tilde C^{\ell}c^{\ell})",
            "Cd": r"(\tilde C^{\ell}d^{\ell})", "Dc": r"(\tilde D^{\ell}c^{\ell})"}
_VEC_TXT = {"c": "c", "d": "d", "Cc": "(C~ c)", "Cd": "(C~ d)", "Dc": "(D~ c)"}


def _moment_tex(m) -> str:
    out = []
    for k in sorted(set(m)):
        p = m.count(k)
        out.append(_PRIMES_TEX[k] + (f"^{{{p}}}" if p > 1 else ""))
    return r"\langle " + r"\,".join(out) + r"\rangle_{\ell}"


def _moment_txt(m) -> str:
    out = []
    for k in sorted(set(m)):
        p = m.count(k)
        out.append(_PRIMES_TXT[k] + (f"^{p}" if p > 1 else ""))
    return "<" + " ".join(out) + ">_l"


def _struct_tex(st) -> str:
    kind, x, y = st
    if kind == "mat":
        return {"Phi": r"\Phi^{\ell-1}_{2}(t,s)", "G": r"G^{\ell+1}_{2}(t,s)"}[x]
    if kind == "diag":
        return r"\big[\Phi^{\ell-1}_{2}(t,t)+\Phi^{\ell-1}_{2}(s,s)\big]"
    X = _VEC_TEX[x]
    if kind == "col":
        return rf"\big[{X}_{{t}}+{X}_{{s}}\big]"
    Y = _VEC_TEX[y]
    if kind == "outer":
        return f"{X}_{{t}}{Y}_{{s}}" if x != y else f"{X}_{{t}}{X}_{{s}}"
    if kind == "sym":
        return rf"\big[{X}_{{t}}{Y}_{{s}}+{Y}_{{t}}{X}_{{s}}\big]"
    if x == y:
        return rf"\big[({X}_{{t}})^{{2}}+({X}_{{s}})^{{2}}\big]"
    return rf"\big[{X}_{{t}}{Y}_{{t}}+{X}_{{s}}{Y}_{{s}}\big]"


def _struct_txt(st) -> str:
    kind, x, y = st
    if kind == "mat":
        return {"Phi": "Phi^(l-1)_2(t,s)", "G": "G^(l+1)_2(t,s)"}[x]
    if kind == "diag":
        return "[Phi^(l-1)_2(t,t) + Phi^(l-1)_2(s,s)]"
    X = _VEC_TXT[x]
    if kind == "col":
        return f"[{X}_t + {X}_s]"
    Y = _VEC_TXT[y]
    if kind == "outer":
        return f"{X}_t {Y}_s"
    if kind == "sym":
        return f"[{X}_t {Y}_s + {Y}_t {X}_s]"
    return f"[{X}_t {Y}_t + {X}_s {Y}_s]"


def _group(terms):
    """Group terms by (moment, power of G): ``[(moment, gpow, [(coef, structure), ...]), ...]``."""
    groups: dict = {}
    for coef, gp, mom, st in terms:
        groups.setdefault((mom, gp), []).append((coef, st))
    return [(m, g, v) for (m, g), v in groups.items()]


def _terms_tex(terms) -> list:
    parts = []
    for mom, gp, inner in _group(terms):
        gtex = {0: "", 1: r"G^{\ell+1}_{0}\,", 2: r"(G^{\ell+1}_{0})^{2}\,"}[gp]
        common = inner[0][0] if all(c == inner[0][0] for c, _ in inner) else Fraction(1)
        lead = "" if common == 1 else _latex(sp.Rational(common.numerator, common.denominator)) + r"\,"
        body = "+".join(("" if c / common == 1 else
                         _latex(sp.Rational((c / common).numerator, (c / common).denominator)) + r"\,")
                        + _struct_tex(st) for c, st in inner)
        if len(inner) > 1:
            body = rf"\big\{{{body}\big\}}"
        parts.append(f"{lead}{gtex}{_moment_tex(mom)}\\,{body}")
    return parts


def _terms_txt(terms) -> list:
    parts = []
    for mom, gp, inner in _group(terms):
        gtxt = {0: "", 1: "G^(l+1)_0 ", 2: "(G^(l+1)_0)^2 "}[gp]
        common = inner[0][0] if all(c == inner[0][0] for c, _ in inner) else Fraction(1)
        body = " + ".join(("" if c / common == 1 else f"{c / common} ") + _struct_txt(st)
                          for c, st in inner)
        lead = "" if common == 1 else f"{common} "
        parts.append(f"{lead}{gtxt}{_moment_txt(mom)} " + (body if len(inner) == 1 else "{" + body + "}"))
    return parts


@public
@dataclass
class NonlinearSeriesFormulas:
    r"""The printed :math:`O(\gamma_0^2)` system of a deep nonlinear network with one input.

    Attributes
    ----------
    hidden_layers : int or None
        :math:`L` (``None``: symbolic).
    activation : str
        Name printed in the heading (the formulas hold for any smooth activation).
    several_inputs : bool
        Also print the same system with sample indices (four-point atoms), evaluated by
        :func:`evaluate_several_inputs`.
    """

    hidden_layers: int | None = None
    activation: str = r"\phi"
    several_inputs: bool = True

    def lines(self, tex: bool = True) -> list:
        """Every printed line (LaTeX rows with ``=`` or raw rows starting ``&``; or plain text)."""
        if tex:
            return [
                r"\text{order }\gamma_0^{0}:",
                r"\Phi^{\ell}_{0}=\langle\phi^{2}\rangle_{\ell},\quad "
                r"G^{\ell}_{0}=G^{\ell+1}_{0}\langle\phi'^{2}\rangle_{\ell},\quad \Phi^{0}_{0}=K^{x},"
                r"\quad G^{L+1}_{0}=1",
                r"K_{0}=\sum_{\ell=0}^{L}G^{\ell+1}_{0}\Phi^{\ell}_{0},\quad "
                r"\Delta_{0}(t_{i+1})=(1-\eta K_{0})\Delta_{0}(t_{i}),\quad \Delta_{0}(t_{0})=y",
                r"\tilde C^{\ell}_{ts}=A^{\ell-1}_{0,ts}+\eta\,\Theta(t>s)\,\Delta_{0}(s)\,\Phi^{\ell-1}_{0},"
                r"\quad A^{\ell}_{0}=\langle\phi'^{2}\rangle_{\ell}\,\tilde C^{\ell},\quad A^{0}_{0}=0",
                r"\tilde D^{\ell}_{ts}=B^{\ell}_{0,ts}+\eta\,\Theta(t>s)\,\Delta_{0}(s)\,G^{\ell+1}_{0},"
                r"\quad B^{L}_{0}=0",
                r"B^{\ell-1}_{0}=G^{\ell+1}_{0}\langle\phi''^{2}\rangle_{\ell}\,\tilde C^{\ell}"
                r"+\langle\phi'^{2}\rangle_{\ell}\,\tilde D^{\ell}"
                r"+\mathrm{diag}\big(G^{\ell+1}_{0}\langle\phi'\,\phi'''\rangle_{\ell}\,c^{\ell}"
                r"+\langle\phi\,\phi''\rangle_{\ell}\,d^{\ell}\big)",
                r"\text{order }\gamma_0^{2}:",
                r"\Phi^{\ell}_{2}(t,s)=" + "+".join(_terms_tex(_SELF_PHI + _PRICE_PHI)),
                r"G^{\ell}_{2}(t,s)=" + "+".join(_terms_tex(_SELF_G + _PRICE_G)),
                r"K_{2}(t)=G^{1}_{2}(t,t)\,K^{x}+\sum_{\ell=1}^{L-1}\big[G^{\ell+1}_{2}(t,t)\,"
                r"\Phi^{\ell}_{0}+G^{\ell+1}_{0}\,\Phi^{\ell}_{2}(t,t)\big]+\Phi^{L}_{2}(t,t)",
                r"\Delta_{2}(t_{i+1})=(1-\eta K_{0})\Delta_{2}(t_{i})-\eta K_{2}(t_{i})\Delta_{0}(t_{i}),"
                r"\quad \Delta_{2}(t_{0})=0,\quad f_{2}=-\Delta_{2}",
                r"\text{where}",
                r"&\text{one input; hidden layers }\ell=1..L"
                + ("" if self.hidden_layers is None else f",\\ L={self.hidden_layers}")
                + r",\ \text{times } t_i=i\eta,\ \text{NTK closure}"
                + ("" if self.activation == r"\phi" else rf",\ \phi=\mathrm{{{self.activation}}}"),
                r"&\langle F(\phi,\phi',\dots)\rangle_{\ell}=\int\!\frac{du\,e^{-u^2/2\Phi^{\ell-1}_{0}}}"
                r"{\sqrt{2\pi\Phi^{\ell-1}_{0}}}\,F(\phi(u),\phi'(u),\dots),\ "
                r"\phi^{(k)}:\ \text{derivatives of the activation}",
                r"&c^{\ell}_{t}=\textstyle\sum_{s}\tilde C^{\ell}_{ts},\ d^{\ell}_{t}=\textstyle\sum_{s}"
                r"\tilde D^{\ell}_{ts},\ (\tilde Cx)_t=\textstyle\sum_s\tilde C^{\ell}_{ts}x_s,\ "
                r"\Phi^{0}_{2}=0,\ G^{L+1}_{2}=0",
                r"&X_{2}:\ \text{coefficient of }\gamma_0^{2},\ \Phi,G:\ \text{kernels},\ A,B:\ "
                r"\text{lazy responses},\ K^{x}:\ \text{input kernel},\ y:\ \text{target}",
            ] + (_multi_lines(True) if self.several_inputs else [])
        return [
            "order gamma0^0:",
            "Phi^l_0 = <phi^2>_l,  G^l_0 = G^(l+1)_0 <phi'^2>_l,  Phi^0_0 = Kx,  G^(L+1)_0 = 1",
            "K_0 = sum_(l=0..L) G^(l+1)_0 Phi^l_0,  Delta_0(t_(i+1)) = (1 - eta K_0) Delta_0(t_i),  "
            "Delta_0(t_0) = y",
            "C~^l_(ts) = A^(l-1)_0(t,s) + eta Theta(t>s) Delta_0(s) Phi^(l-1)_0,  "
            "A^l_0 = <phi'^2>_l C~^l,  A^0_0 = 0",
            "D~^l_(ts) = B^l_0(t,s) + eta Theta(t>s) Delta_0(s) G^(l+1)_0,  B^L_0 = 0",
            "B^(l-1)_0 = G^(l+1)_0 <phi''^2>_l C~^l + <phi'^2>_l D~^l + "
            "diag(G^(l+1)_0 <phi' phi'''>_l c + <phi phi''>_l d)",
            "order gamma0^2:",
            "Phi^l_2(t,s) = " + " + ".join(_terms_txt(_SELF_PHI + _PRICE_PHI)),
            "G^l_2(t,s) = " + " + ".join(_terms_txt(_SELF_G + _PRICE_G)),
            "K_2(t) = G^1_2(t,t) Kx + sum_(l=1..L-1) [G^(l+1)_2(t,t) Phi^l_0 + G^(l+1)_0 Phi^l_2(t,t)] "
            "+ Phi^L_2(t,t)",
            "Delta_2(t_(i+1)) = (1 - eta K_0) Delta_2(t_i) - eta K_2(t_i) Delta_0(t_i),  "
            "Delta_2(t_0) = 0,  f_2 = -Delta_2",
            "where",
            "one input; hidden layers l = 1..L"
            + ("" if self.hidden_layers is None else f", L = {self.hidden_layers}")
            + ", times t_i = i eta, NTK closure"
            + ("" if self.activation == r"\phi" else f", phi = {self.activation}"),
            "<F>_l = E[F(phi(u), phi'(u), ...)], u ~ N(0, Phi^(l-1)_0); phi^(k): derivatives of the "
            "activation",
            "c_t = sum_s C~^l_(ts), d_t = sum_s D~^l_(ts), (C~ x)_t = sum_s C~^l_(ts) x_s, "
            "Phi^0_2 = 0, G^(L+1)_2 = 0",
            "X_2: coefficient of gamma0^2, Phi, G: kernels, A, B: lazy responses, Kx: input kernel, "
            "y: target",
        ] + (_multi_lines(False) if self.several_inputs else [])

    def latex(self, form=None, env: str | None = None, width: float = LINE_WIDTH) -> str:
        """LaTeX rows (``align*`` body; ``env`` wraps it), broken at term boundaries."""
        from effth.dmft.series.formulas import align_rows

        return align_rows(self.lines(True), width, env)

    def text(self) -> str:
        """Plain text, no backslash."""
        return "\n".join(self.lines(False))

    @property
    def provenance(self) -> str:
        return ("Deep nonlinear network, one input: the gamma0^2 coefficients in Gaussian moments "
                "(Bordelon & Pehlevan (2022), App. P.2-P.6, NTK closure)")

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, kx, y, *, activation, eta: float, steps: int,
                 hidden_layers: int | None = None, moment=None) -> dict:
        r"""Evaluate the printed system: ``{'phi', 'g': (2, L, T, T), 'ntk': (2, T), 'f', 'delta': (2, T)}``.

        ``moment(derivs, variance)`` computes :math:`\langle\prod_k\phi^{(k)}\rangle` (default:
        a dense trapezoid rule, step 0.02 standard deviations; ``moment='quad'``: adaptive
        :func:`scipy.integrate.quad`).
        """
        L, kx, y, act = _one_input_arguments(self.hidden_layers, hidden_layers, kx, y, activation)
        fns = [act.numpy(k) for k in range(4)]
        if moment == "quad":
            moment = lambda ds, var: _quad_moment(fns, ds, var)             # noqa: E731
        mom = moment or (lambda ds, var: _trapezoid_moment(fns, ds, var))
        T = int(steps)
        mask = np.tril(np.ones((T, T)), -1)
        # lazy kernels
        phi0 = [float(kx[0, 0])]
        for ell in range(1, L + 1):
            phi0.append(mom((0, 0), phi0[ell - 1]))
        g0 = [0.0] * (L + 2)
        g0[L + 1] = 1.0
        for ell in range(L, 0, -1):
            g0[ell] = g0[ell + 1] * mom((1, 1), phi0[ell - 1])
        K0 = sum(g0[ell + 1] * phi0[ell] for ell in range(L + 1))
        d0 = np.zeros(T)
        d0[0] = y[0]
        for i in range(1, T):
            d0[i] = (1 - eta * K0) * d0[i - 1]
        M = {}                                                     # moments of layer ell
        for ell in range(1, L + 1):
            for terms in (_SELF_PHI, _SELF_G, _PRICE_PHI, _PRICE_G, ((0, 0, (1, 1), 0),
                          (0, 0, (2, 2), 0), (0, 0, (1, 3), 0), (0, 0, (0, 2), 0))):
                for t in terms:
                    M.setdefault((ell, t[2]), mom(t[2], phi0[ell - 1]))
        drive = eta * mask * d0[None, :]
        Ct, Dt = {}, {}
        A = {0: np.zeros((T, T))}
        for ell in range(1, L + 1):
            Ct[ell] = A[ell - 1] + drive * phi0[ell - 1]
            A[ell] = M[(ell, (1, 1))] * Ct[ell]
        B = {L: np.zeros((T, T))}
        for ell in range(L, 0, -1):
            Dt[ell] = B[ell] + drive * g0[ell + 1]
            c, d = Ct[ell].sum(axis=1), Dt[ell].sum(axis=1)
            B[ell - 1] = (g0[ell + 1] * M[(ell, (2, 2))] * Ct[ell] + M[(ell, (1, 1))] * Dt[ell]
                          + np.diag(g0[ell + 1] * M[(ell, (1, 3))] * c + M[(ell, (0, 2))] * d))

        def vecs(ell):
            c, d = Ct[ell].sum(axis=1), Dt[ell].sum(axis=1)
            return {"c": c, "d": d, "Cc": Ct[ell] @ c, "Cd": Ct[ell] @ d, "Dc": Dt[ell] @ c}

        def struct(st, v, mats):
            kind, x, yk = st
            if kind == "mat":
                return mats[x]
            if kind == "diag":
                dg = np.diag(mats[x])
                return dg[:, None] + dg[None, :]
            X = v[x]
            if kind == "col":
                return X[:, None] + X[None, :]
            Y = v[yk]
            if kind == "outer":
                return np.outer(X, Y)
            if kind == "sym":
                return np.outer(X, Y) + np.outer(Y, X)
            return (X * Y)[:, None] + (X * Y)[None, :]

        def total(terms, ell, mats):
            v = vecs(ell)
            return sum(float(c) * g0[ell + 1] ** gp * M[(ell, m)] * struct(st, v, mats)
                       for c, gp, m, st in terms)

        phi2 = {0: np.zeros((T, T))}
        for ell in range(1, L + 1):
            phi2[ell] = total(_SELF_PHI + _PRICE_PHI, ell, {"Phi": phi2[ell - 1]})
        g2 = {L + 1: np.zeros((T, T))}
        for ell in range(L, 0, -1):
            g2[ell] = total(_SELF_G + _PRICE_G, ell, {"Phi": phi2[ell - 1], "G": g2[ell + 1]})
        K2 = np.diag(g2[1]) * kx[0, 0] + np.diag(phi2[L])
        for ell in range(1, L):
            K2 = K2 + np.diag(g2[ell + 1]) * phi0[ell] + g0[ell + 1] * np.diag(phi2[ell])
        d2 = np.zeros(T)
        for i in range(1, T):
            d2[i] = (1 - eta * K0) * d2[i - 1] - eta * K2[i - 1] * d0[i - 1]
        st = lambda a, b: np.stack([a, b])                               # noqa: E731
        ones = np.ones((T, T))
        return {"phi": st(np.stack([phi0[ell] * ones for ell in range(1, L + 1)]),
                          np.stack([phi2[ell] for ell in range(1, L + 1)])),
                "g": st(np.stack([g0[ell] * ones for ell in range(1, L + 1)]),
                        np.stack([g2[ell] for ell in range(1, L + 1)])),
                "ntk": st(np.full(T, K0), K2), "delta": st(d0, d2), "f": st(y[0] - d0, -d2)}


_X = np.linspace(-14.0, 14.0, 1401)                   # step 0.02 in units of the standard deviation
_W = np.full(_X.size, _X[1] - _X[0]) * np.exp(-0.5 * _X ** 2) / np.sqrt(2 * np.pi)


def _trapezoid_moment(fns, derivs, var) -> float:
    """The moment by the trapezoid rule of step 0.02 sd on [-14, 14] sd: for an integrand analytic
    in a strip of half-width w (sd units) its error is ~exp(-2 pi w / 0.02) (tanh, w = pi/(2 sd):
    far below round-off for sd < 10) plus the Gaussian tail e^{-98}."""
    u = np.sqrt(float(var)) * _X
    p = _W.copy()
    for d in derivs:
        p = p * fns[d](u)
    return float(np.sum(p))


def _quad_moment(fns, derivs, var) -> float:
    """:math:`\\langle\\prod_k\\phi^{(d_k)}(u)\\rangle`, :math:`u\\sim\\mathcal N(0,\\mathrm{var})`, by
    :func:`scipy.integrate.quad` on :math:`(-\\infty,\\infty)`."""
    from scipy.integrate import quad

    sd = float(np.sqrt(var))

    def f(x):
        u = np.array([sd * x])
        p = np.exp(-0.5 * x * x) / np.sqrt(2 * np.pi)
        for d in derivs:
            p = p * fns[d](u)[0]
        return p

    with warnings.catch_warnings():                  # round-off at 1e-14 relative is expected
        warnings.simplefilter("ignore")
        val = quad(f, -np.inf, np.inf, epsabs=1e-15, epsrel=1e-13, limit=200)[0]
    return float(val)


@public
def deep_nonlinear_formulas(hidden_layers: int | None = None, *, activation: str = r"\phi",
                            several_inputs: bool = True) -> NonlinearSeriesFormulas:
    r"""The one-input :math:`O(\gamma_0^2)` system of a deep nonlinear network (any smooth
    activation; Bordelon & Pehlevan (2022), App. P.2-P.6 with the responses kept).

    Examples
    --------
    >>> fm = deep_nonlinear_formulas(2)
    >>> "\\\\" in fm.text()
    False
    """
    if hidden_layers is not None and (int(hidden_layers) != hidden_layers or hidden_layers < 1):
        raise DomainError(f"hidden_layers={hidden_layers!r} must be a positive integer")
    return NonlinearSeriesFormulas(None if hidden_layers is None else int(hidden_layers), str(activation),
                                   bool(several_inputs))


# ---------------------------------------------------------------------- several inputs
# Composite indices a=(t,mu), b=(s,nu), c=(t',gamma), d=(s',delta), e=(t'',epsilon).  A term is
# (coef, drivers, r-moment, atom, symmetrise): drivers ((X, row, col), ...) with X in {C, D}; the
# r-moment None, ("G", i, j) = G^{l+1}_{0,ij} or ("I4", i, j, k, l) = <r_i r_j r_k r_l>; the atom
# ((derivative, label), ...) = <phi^(d1)_{i1} ...> over u ~ N(0, Phi^{l-1}_0); symmetrise adds a<->b.
_SAMPLE = {"a": "m", "b": "n", "c": "g", "d": "h", "e": "e"}
_TIME = {"a": "t", "b": "s", "c": "u", "d": "v", "e": "w"}
_SAMPLE_TEX = {"a": r"\mu", "b": r"\nu", "c": r"\gamma", "d": r"\delta", "e": r"\epsilon"}

_MULTI_PHI = (
    (Fraction(1), (("C", "a", "c"), ("C", "b", "d")), ("G", "c", "d"),
     ((1, "a"), (1, "c"), (1, "b"), (1, "d")), False),
    (Fraction(1), (("C", "b", "c"), ("C", "c", "e")), ("G", "c", "e"),
     ((0, "a"), (1, "b"), (2, "c"), (1, "e")), True),
    (Fraction(1), (("C", "b", "c"), ("D", "c", "e")), None,
     ((0, "a"), (1, "b"), (1, "c"), (0, "e")), True),
    (Fraction(1, 2), (("C", "b", "c"), ("C", "b", "e")), ("G", "c", "e"),
     ((0, "a"), (2, "b"), (1, "c"), (1, "e")), True),
)
_MULTI_G = (
    (Fraction(1), (("C", "a", "c"), ("C", "b", "d")), ("I4", "a", "c", "b", "d"),
     ((2, "a"), (1, "c"), (2, "b"), (1, "d")), False),
    (Fraction(1), (("C", "a", "c"), ("D", "b", "d")), ("G", "a", "c"),
     ((2, "a"), (1, "c"), (1, "b"), (0, "d")), True),
    (Fraction(1), (("D", "a", "c"), ("D", "b", "d")), None,
     ((1, "a"), (0, "c"), (1, "b"), (0, "d")), False),
    (Fraction(1), (("C", "b", "c"), ("C", "c", "e")), ("I4", "a", "b", "c", "e"),
     ((1, "a"), (2, "b"), (2, "c"), (1, "e")), True),
    (Fraction(1), (("C", "b", "c"), ("D", "c", "e")), ("G", "a", "b"),
     ((1, "a"), (2, "b"), (1, "c"), (0, "e")), True),
    (Fraction(1, 2), (("C", "b", "c"), ("C", "b", "e")), ("I4", "a", "b", "c", "e"),
     ((1, "a"), (3, "b"), (1, "c"), (1, "e")), True),
    (Fraction(1), (("C", "b", "c"), ("D", "b", "e")), ("G", "a", "c"),
     ((1, "a"), (2, "b"), (1, "c"), (0, "e")), True),
    (Fraction(1), (("D", "b", "c"), ("C", "c", "e")), ("G", "a", "e"),
     ((1, "a"), (1, "b"), (1, "c"), (1, "e")), True),
)


def _multi_term_tex(term) -> str:
    coef, drivers, rm, atom, sym = term
    dummies = sorted({x for _, r, c in drivers for x in (r, c)} - {"a", "b"})
    c = "" if coef == 1 else _latex(sp.Rational(coef.numerator, coef.denominator)) + r"\,"
    drv = "".join(rf"\tilde {X}^{{\ell}}_{{{r}{col}}}" for X, r, col in drivers)
    if rm is None:
        rt = ""
    elif rm[0] == "G":
        rt = rf"G^{{\ell+1}}_{{0,{_SAMPLE_TEX[rm[1]]}{_SAMPLE_TEX[rm[2]]}}}"
    else:
        rt = "I_{" + "".join(_SAMPLE_TEX[x] for x in rm[1:]) + "}"
    at = r"\langle " + r"\,".join(_PRIMES_TEX[k] + f"_{{{_SAMPLE_TEX[x]}}}" for k, x in atom) + r"\rangle"
    body = rf"\sum_{{{','.join(dummies)}}}{drv}\,{rt}\,{at}"
    return c + (rf"\big[{body}+(a\leftrightarrow b)\big]" if sym else body)


def _multi_term_txt(term) -> str:
    coef, drivers, rm, atom, sym = term
    dummies = sorted({x for _, r, c in drivers for x in (r, c)} - {"a", "b"})
    c = "" if coef == 1 else f"{coef} "
    drv = " ".join(f"{X}~_({r}{col})" for X, r, col in drivers)
    names = {"a": "mu", "b": "nu", "c": "gam", "d": "del", "e": "eps"}
    if rm is None:
        rt = ""
    elif rm[0] == "G":
        rt = f" G^(l+1)_0({names[rm[1]]},{names[rm[2]]})"
    else:
        rt = " I(" + ",".join(names[x] for x in rm[1:]) + ")"
    at = "<" + " ".join(f"{_PRIMES_TXT[k]}_{names[x]}" for k, x in atom) + ">"
    body = f"sum_({','.join(dummies)}) {drv}{rt} {at}"
    return c + (f"[{body} + (a<->b)]" if sym else body)


def _multi_lines(tex: bool) -> list:
    if tex:
        return [
            r"\text{several inputs, order }\gamma_0^{2}\text{ (the same system with sample indices):}",
            r"\Phi^{\ell}_{2,ab}=" + "+".join(_multi_term_tex(t) for t in _MULTI_PHI)
            + r"+\tfrac12\Phi^{\ell-1}_{2,aa}\langle\phi''_\mu\phi_\nu\rangle+\Phi^{\ell-1}_{2,ab}"
              r"\langle\phi'_\mu\phi'_\nu\rangle+\tfrac12\Phi^{\ell-1}_{2,bb}\langle\phi_\mu\phi''_\nu\rangle",
            r"G^{\ell}_{2,ab}=" + "+".join(_multi_term_tex(t) for t in _MULTI_G)
            + r"+G^{\ell+1}_{0,\mu\nu}\big[\tfrac12\Phi^{\ell-1}_{2,aa}\langle\phi'''_\mu\phi'_\nu\rangle"
              r"+\Phi^{\ell-1}_{2,ab}\langle\phi''_\mu\phi''_\nu\rangle+\tfrac12\Phi^{\ell-1}_{2,bb}"
              r"\langle\phi'_\mu\phi'''_\nu\rangle\big]+G^{\ell+1}_{2,ab}\langle\phi'_\mu\phi'_\nu\rangle",
            r"K_{2,\mu\nu}(t)=G^{1}_{2,(t\mu)(t\nu)}K^{x}_{\mu\nu}+\sum_{\ell=1}^{L-1}\big[G^{\ell+1}_{2,(t\mu)(t\nu)}"
            r"\Phi^{\ell}_{0,\mu\nu}+G^{\ell+1}_{0,\mu\nu}\Phi^{\ell}_{2,(t\mu)(t\nu)}\big]+\Phi^{L}_{2,(t\mu)(t\nu)},\quad "
            r"\Delta_{2}\ \text{as above with matrices}",
            r"&a=(t,\mu),\ b=(s,\nu),\ c=(t',\gamma),\ d=(s',\delta),\ e=(t'',\epsilon),\ "
            r"\langle\cdot\rangle\ \text{over }u\sim\mathcal N(0,\Phi^{\ell-1}_{0})",
            r"&I_{\alpha\beta\gamma\delta}=G^{\ell+1}_{0,\alpha\beta}G^{\ell+1}_{0,\gamma\delta}"
            r"+G^{\ell+1}_{0,\alpha\gamma}G^{\ell+1}_{0,\beta\delta}+G^{\ell+1}_{0,\alpha\delta}"
            r"G^{\ell+1}_{0,\beta\gamma},\ \tilde C^{\ell}_{ab},\tilde D^{\ell}_{ab}\ \text{as above with }"
            r"\Phi^{\ell-1}_{0,\mu\nu},G^{\ell+1}_{0,\mu\nu},\Delta_{0,\nu}",
        ]
    return [
        "several inputs, order gamma0^2 (the same system with sample indices):",
        "Phi^l_2(a,b) = " + " + ".join(_multi_term_txt(t) for t in _MULTI_PHI)
        + " + 1/2 Phi^(l-1)_2(a,a) <phi''_mu phi_nu> + Phi^(l-1)_2(a,b) <phi'_mu phi'_nu> "
          "+ 1/2 Phi^(l-1)_2(b,b) <phi_mu phi''_nu>",
        "G^l_2(a,b) = " + " + ".join(_multi_term_txt(t) for t in _MULTI_G)
        + " + G^(l+1)_0(mu,nu) [1/2 Phi^(l-1)_2(a,a) <phi'''_mu phi'_nu> + Phi^(l-1)_2(a,b) "
          "<phi''_mu phi''_nu> + 1/2 Phi^(l-1)_2(b,b) <phi'_mu phi'''_nu>] + G^(l+1)_2(a,b) <phi'_mu phi'_nu>",
        "K_2(t)_(mu nu) = G^1_2((t mu),(t nu)) Kx_(mu nu) + sum_(l=1..L-1) [G^(l+1)_2((t mu),(t nu)) "
        "Phi^l_0(mu,nu) + G^(l+1)_0(mu,nu) Phi^l_2((t mu),(t nu))] + Phi^L_2((t mu),(t nu)); Delta_2 as above "
        "with matrices",
        "a = (t,mu), b = (s,nu), c = (t',gam), d = (s',del), e = (t'',eps); <.> over u ~ N(0, Phi^(l-1)_0)",
        "I(al,be,ga,de) = G_(al be) G_(ga de) + G_(al ga) G_(be de) + G_(al de) G_(be ga), G = G^(l+1)_0",
    ]


def _multi_self(terms, Ct, Dt, G0, atom_of, T, n):
    """Evaluate self-part terms: ``(T n, T n)``."""
    out = np.zeros((T, n, T, n))
    mats = {"C": Ct.reshape(T, n, T, n), "D": Dt.reshape(T, n, T, n)}
    for coef, drivers, rm, atom, sym in terms:
        ops, subs = [], []
        for X, r, c in drivers:
            ops.append(mats[X])
            subs.append(_TIME[r] + _SAMPLE[r] + _TIME[c] + _SAMPLE[c])
        if rm is not None and rm[0] == "G":
            ops.append(G0)
            subs.append(_SAMPLE[rm[1]] + _SAMPLE[rm[2]])
        elif rm is not None:
            ops.append(np.einsum("ij,kl->ijkl", G0, G0) + np.einsum("ik,jl->ijkl", G0, G0)
                       + np.einsum("il,jk->ijkl", G0, G0))
            subs.append("".join(_SAMPLE[x] for x in rm[1:]))
        ops.append(atom_of(tuple(k for k, _ in atom)))
        subs.append("".join(_SAMPLE[x] for _, x in atom))
        present = set("".join(subs))
        outs = "".join(x for x in "tmsn" if x in present)
        val = np.einsum(",".join(subs) + "->" + outs, *ops, optimize=True)
        # broadcast the missing output axes (a time-constant factor phi_mu has no t)
        full = val.reshape([T if x in "ts" else n for x in outs])
        idx = [slice(None) if x in outs else None for x in "tmsn"]
        order = sorted(range(len(outs)), key=lambda i: "tmsn".index(outs[i]))
        full = np.transpose(full, order)[tuple(idx)]
        full = np.broadcast_to(full, (T, n, T, n)) * float(coef)
        out += full
        if sym:
            out += np.transpose(full, (2, 3, 0, 1))
    return out.reshape(T * n, T * n)


@public
def evaluate_several_inputs(kx, y, *, activation, eta: float, steps: int, hidden_layers: int,
                            nodes: int = 120) -> dict:
    r"""Evaluate the several-input printed system (four-point atoms on an ``nodes``-point
    trapezoid rule per dimension): ``{'phi', 'g': (L, T n, T n), 'ntk': (T, n, n)}``, the
    :math:`\gamma_0^2` coefficients (NTK closure)."""
    from effth.dmft.series.deep_nonlinear import price_g, price_phi
    from effth.dmft.solvers.lazy import lazy_kernels, resolve_activation, static_ntk_dynamics
    from effth.dmft.grid import causal_mask
    from effth.numerics._rules import gaussian_tensor_rule

    act = resolve_activation(activation)
    fns = [act.numpy(k) for k in range(4)]
    kx = np.asarray(kx, dtype=float)
    y = np.asarray(y, dtype=float)
    L, T, n, P = int(hidden_layers), int(steps), kx.shape[0], y.size
    Tn = T * n
    phi0, _, g0, ntk0 = lazy_kernels(kx, act, hidden_layers=L)
    delta0 = y[None] - static_ntk_dynamics(ntk0, y, eta, T)[:, :P]
    dpad = np.zeros((T, n))
    dpad[:, :P] = delta0
    drive = eta * np.kron(causal_mask(T), np.ones((n, n))) * np.tile(dpad.reshape(1, Tn), (Tn, 1))
    tile = lambda m: np.tile(m, (T, T))                              # noqa: E731
    prev = [kx] + [phi0[ell] for ell in range(L - 1)]
    nxt = [g0[ell + 1] for ell in range(L - 1)] + [np.ones((n, n))]
    rules = [gaussian_tensor_rule(prev[ell], nodes, kind="trapezoid") for ell in range(L)]

    def atoms_of(ell):
        u, _, w = rules[ell]
        vals = [f(u) for f in fns]
        cache = {}

        def atom(ds):
            if ds not in cache:
                if len(ds) == 2:
                    cache[ds] = np.einsum("s,sa,sb->ab", w, vals[ds[0]], vals[ds[1]])
                else:
                    cache[ds] = np.einsum("s,sa,sb,sc,sd->abcd", w, *(vals[d] for d in ds),
                                          optimize=True)
            return cache[ds]
        return atom

    atoms = [atoms_of(ell) for ell in range(L)]
    at2 = [[[atoms[ell]((i, j)) for j in range(4)] for i in range(4)] for ell in range(L)]
    Ct, A0 = [], [None] * L
    for ell in range(L):
        c = drive * tile(prev[ell]) + (A0[ell - 1] if ell >= 1 else 0)
        Ct.append(c)
        A0[ell] = c * tile(at2[ell][1][1])
    Dt, B0 = [None] * L, [None] * L
    for ell in range(L - 1, -1, -1):
        d = drive * tile(nxt[ell]) + (B0[ell] if ell <= L - 2 else 0)
        Dt[ell] = d
        Gn = tile(nxt[ell])
        b = np.sum(Ct[ell] * Gn * tile(at2[ell][3][1]), axis=1) + np.sum(d * tile(at2[ell][2][0]), axis=1)
        if ell >= 1:
            B0[ell - 1] = Ct[ell] * tile(at2[ell][2][2]) * Gn + d * tile(at2[ell][1][1]) + np.diag(b)
    phi2, g2 = [None] * L, [None] * L
    for ell in range(L):
        phi2[ell] = _multi_self(_MULTI_PHI, Ct[ell], Dt[ell], nxt[ell], atoms[ell], T, n)
        if ell >= 1:
            phi2[ell] = phi2[ell] + price_phi(phi2[ell - 1], at2[ell], tile)
    for ell in range(L - 1, -1, -1):
        g2[ell] = _multi_self(_MULTI_G, Ct[ell], Dt[ell], nxt[ell], atoms[ell], T, n)
        if ell >= 1:
            g2[ell] = g2[ell] + price_g(phi2[ell - 1], at2[ell], tile(nxt[ell]), tile)
        if ell <= L - 2:
            g2[ell] = g2[ell] + g2[ell + 1] * tile(at2[ell][1][1])
    K2 = g2[0] * tile(kx) + phi2[L - 1]
    for ell in range(1, L):
        K2 = K2 + g2[ell] * tile(phi0[ell - 1]) + tile(g0[ell]) * phi2[ell - 1]
    idx = np.arange(T)
    return {"phi": np.stack(phi2), "g": np.stack(g2),
            "ntk": K2.reshape(T, n, T, n)[idx, :, idx, :]}


def _one_input_arguments(own_layers, hidden_layers, kx, y, activation) -> tuple:
    """``(L, kx (1, 1), y (1,), activation)`` checked for the one-input formulas' ``evaluate``
    (smooth activation, one input, ``L >= 1``)."""
    from effth.dmft.solvers.lazy import require_smooth, resolve_activation

    L = own_layers if hidden_layers is None else int(hidden_layers)
    if L is None or L < 1:
        raise DomainError("evaluate() needs hidden_layers >= 1")
    kx = np.atleast_2d(np.asarray(kx, dtype=float))
    y = np.atleast_1d(np.asarray(y, dtype=float))
    if kx.shape != (1, 1) or y.shape != (1,):
        raise DomainError(f"these formulas are for one input: kx (1, 1) and y (1,), got "
                          f"{kx.shape}, {y.shape}")
    act = resolve_activation(activation)
    require_smooth(act, "the gamma0-series")
    return L, kx, y, act
