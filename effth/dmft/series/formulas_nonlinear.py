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

__all__ = ["NonlinearSeriesFormulas", "deep_nonlinear_formulas"]

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
    """

    hidden_layers: int | None = None
    activation: str = r"\phi"

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
            ]
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
        ]

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
        from effth.dmft.solvers.lazy import require_smooth, resolve_activation

        L = self.hidden_layers if hidden_layers is None else int(hidden_layers)
        if L is None or L < 1:
            raise DomainError("evaluate() needs hidden_layers >= 1")
        kx = np.atleast_2d(np.asarray(kx, dtype=float))
        y = np.atleast_1d(np.asarray(y, dtype=float))
        if kx.shape != (1, 1) or y.shape != (1,):
            raise DomainError(f"these formulas are for one input: kx (1, 1) and y (1,), got "
                              f"{kx.shape}, {y.shape}")
        act = resolve_activation(activation)
        require_smooth(act, "the gamma0-series")
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
def deep_nonlinear_formulas(hidden_layers: int | None = None, *, activation: str = r"\phi"
                            ) -> NonlinearSeriesFormulas:
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
    return NonlinearSeriesFormulas(None if hidden_layers is None else int(hidden_layers), str(activation))
