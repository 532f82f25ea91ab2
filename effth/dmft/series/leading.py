r"""Leading :math:`O(\gamma_0^2)` corrections in closed form: symbolic, printable, compiled.

Two results of Bordelon & Pehlevan (2022), §5.2, App. P are built here as SymPy expressions in effth's algebra (sample tensors
:class:`~effth.algebra.tensors.Kernel` for :math:`K^x`, Gaussian-expectation atoms, sample sums)
and in the lazy time functions of Bordelon & Pehlevan (2022), §5.2, App. P.1-P.4,

.. math:: v_\alpha(t)=\int_0^t\Delta^0_\alpha,\qquad
          v_{\alpha\beta}(t)=\int_0^tds\,\Delta^0_\alpha(s)\int_0^sds'\,\Delta^0_\beta(s'),
          \qquad \Delta^0(t)=e^{-K_0t}y,

1. **Deep linear, any depth** (Bordelon & Pehlevan (2022), eqs. (144)-(147), corrected here).  The lazy responses do not vanish,
   :math:`A^\ell_0=C^\ell_0`, so the field drivers obey :math:`C^{\ell+1}_0=C^\ell_0+c` and
   :math:`D^{\ell-1}_0=D^\ell_0+d`, i.e. :math:`C^\ell_0=\ell c`, :math:`D^\ell_0=(L+1-\ell)d`
   (gradient independence: :math:`C^\ell_0=c`, :math:`D^\ell_0=d`).  The :math:`O(\gamma_0^2)`
   part of (71) adds per layer :math:`C_0D_0H_0+(\cdot)^\top` (weight
   :math:`k(L+1-k)`) and :math:`C_0\mathbf 1\mathbf 1^\top C_0^\top` (weight :math:`k^2`); the layer
   coefficients :math:`a_\ell,b_\ell,c_\ell,d_\ell` and the NTK prefactor are the sums of these
   weights, done here by ``sympy.summation`` with symbolic :math:`L,\ell`.
2. **Two-layer nonlinear** (Bordelon & Pehlevan (2022), App. P (two-layer, derived here)): the equal-time :math:`\Phi_2,G_2,K_2` as sums of
   four-point Gaussian atoms :math:`\langle\phi^{(a)}_\mu\phi^{(b)}_\nu\phi^{(c)}_\alpha\phi^{(d)}_\beta\rangle`
   contracted with :math:`K^x`, :math:`v`, :math:`v_{\alpha\beta}` -- the published form with the
   errata of corrected here applied; it is checked against the field-level expansion
   (:mod:`effth.dmft.series.two_layer`) and Bordelon & Pehlevan (2022), our reference checks.
"""

from __future__ import annotations

from effth._signature import public

from functools import cache

import numpy as np
import sympy as sp

from effth.algebra.expectation import GaussianExpectation, sigma
from effth.algebra.tensors import Kernel, KernelMatrix, SampleSum

__all__ = [
    "LazyErrorDoubleIntegral",
    "LazyErrorIntegral",
    "deep_linear_layer_coefficients",
    "deep_linear_ntk_prefactor",
    "deep_linear_order2_exprs",
    "lazy_time_functions",
    "lazy_time_functions_discrete",
    "two_layer_order2_exprs",
]

L_sym = sp.Symbol("L", positive=True, integer=True)
ell_sym = sp.Symbol("ell", positive=True, integer=True)
t_sym, s_sym = sp.symbols("t s", nonnegative=True)
mu, nu = sp.symbols("mu nu", integer=True)
KX = KernelMatrix(Kernel)


class LazyErrorIntegral(sp.Function):
    r""":math:`v_\alpha(t)=\int_0^t\Delta^0_\alpha(s)\,ds` (Bordelon & Pehlevan (2022), §5.2, App. P.1-P.4); args ``(alpha, t)``."""

    nargs = 2

    def _latex(self, printer, exp=None):
        a, t = (printer._print(x) for x in self.args)
        base = rf"v_{{{a}}}({t})"
        return base if exp is None else rf"{{{base}}}^{{{exp}}}"


class LazyErrorDoubleIntegral(sp.Function):
    r""":math:`v_{\alpha\beta}(t)=\int_0^tds\,\Delta^0_\alpha(s)v_\beta(s)` (Bordelon & Pehlevan (2022), §5.2, App. P.1-P.4); args ``(alpha, beta, t)``."""

    nargs = 3

    def _latex(self, printer, exp=None):
        a, b, t = (printer._print(x) for x in self.args)
        base = rf"v_{{{a}{b}}}({t})"
        return base if exp is None else rf"{{{base}}}^{{{exp}}}"


V1, V2 = LazyErrorIntegral, LazyErrorDoubleIntegral


# ------------------------------------------------------------------ lazy time functions
@public
def lazy_time_functions(ntk0: np.ndarray, y: np.ndarray, times: np.ndarray):
    r"""Continuous-time :math:`\Delta^0, v_\alpha, v_{\alpha\beta}` in closed form (Bordelon & Pehlevan (2022), §5.2, App. P.1-P.4).

    With :math:`K_0=Q\,\mathrm{diag}(\lambda)Q^\top`, :math:`c=Q^\top y`:
    :math:`v=K_0^{-1}(1-e^{-K_0t})y` and
    :math:`v_{\alpha\beta}=\sum_{ij}Q_{\alpha i}Q_{\beta j}\frac{c_ic_j}{\lambda_j}
    [\frac{1-e^{-\lambda_it}}{\lambda_i}-\frac{1-e^{-(\lambda_i+\lambda_j)t}}{\lambda_i+\lambda_j}]`.

    Parameters
    ----------
    ntk0 : ndarray, shape (P, P)
        Lazy NTK on the training points (positive definite).
    y : ndarray, shape (P,)
    times : ndarray, shape (T,)

    Returns
    -------
    delta0 : (T, P);  v : (T, P);  vv : (T, P, P)
    """
    lam, Q = np.linalg.eigh(ntk0)
    c = Q.T @ y
    t = np.asarray(times, dtype=float)[:, None]
    e = np.exp(-lam[None, :] * t)                                         # (T, P)
    delta0 = (e * c) @ Q.T
    v = (((1 - e) / lam) * c) @ Q.T
    li, lj = lam[:, None], lam[None, :]
    tt = t[:, :, None]
    inner = (1 - np.exp(-li * tt)) / li - (1 - np.exp(-(li + lj) * tt)) / (li + lj)
    M = inner * (c[:, None] * c[None, :] / lj)                           # (T, i, j)
    vv = np.einsum("ai,tij,bj->tab", Q, M, Q)
    return delta0, v, vv


@public
def lazy_time_functions_discrete(ntk0: np.ndarray, y: np.ndarray, eta: float, steps: int):
    r"""Discrete-GD :math:`\Delta^0(t_{i+1})=(1-\eta K_0)\Delta^0(t_i)`,
    :math:`v_\alpha(t_i)=\eta\sum_{j<i}\Delta^0_\alpha(t_j)`,
    :math:`v_{\alpha\beta}(t_i)=\eta\sum_{j<i}\Delta^0_\alpha(t_j)v_\beta(t_j)` (Bordelon & Pehlevan (2022), §5.2, App. P.1-P.4)."""
    P = y.size
    delta0 = np.zeros((steps, P))
    v = np.zeros((steps, P))
    vv = np.zeros((steps, P, P))
    delta0[0] = y
    for i in range(1, steps):
        delta0[i] = delta0[i - 1] - eta * ntk0 @ delta0[i - 1]
        v[i] = v[i - 1] + eta * delta0[i - 1]
        vv[i] = vv[i - 1] + eta * np.outer(delta0[i - 1], v[i - 1])
    return delta0, v, vv


# ------------------------------------------------------------------ deep linear, symbolic
@public
@cache
def deep_linear_layer_coefficients(gradient_independent: bool = False):
    r"""Layer coefficients :math:`(a_\ell,b_\ell,c_\ell,d_\ell)` of Bordelon & Pehlevan (2022), eqs. (144)-(147), corrected here as SymPy in ``L, ell``.

    Derived by summing the per-layer :math:`O(\gamma_0^2)` increments of (71): layer :math:`k`
    adds :math:`w_1(k)\,[C_0D_0H_0+(\cdot)^\top]` and :math:`w_2(k)\,C_0\mathbf 1\mathbf 1^\top C_0^\top`
    with :math:`w_1=k(L+1-k)`, :math:`w_2=k^2` (DMFT: :math:`C^k_0=kc`, :math:`D^k_0=(L+1-k)d`), or
    :math:`w_1=w_2=1` under gradient independence (:math:`A=B=0`).  The :math:`G` coefficients
    follow from the layer-reversal duality :math:`\ell\leftrightarrow L+1-\ell` (Bordelon & Pehlevan (2022), §5.2, App. P.1).
    """
    k = sp.Symbol("k", positive=True, integer=True)
    w1, w2 = (sp.Integer(1), sp.Integer(1)) if gradient_independent else (k * (L_sym + 1 - k), k ** 2)
    a = sp.factor(sp.summation(w1, (k, 1, ell_sym)))
    b = sp.factor(sp.summation(w2, (k, 1, ell_sym)))
    rev = {ell_sym: L_sym + 1 - ell_sym}
    c = sp.factor(a.subs(rev))
    d = sp.factor(b.subs(rev))
    return a, b, c, d


@public
@cache
def deep_linear_ntk_prefactor(gradient_independent: bool = False) -> sp.Expr:
    r"""Prefactor of :math:`K_2` in Bordelon & Pehlevan (2022), eqs. (144)-(147), corrected here: :math:`\sum_\ell a_\ell` (checked equal to
    :math:`\sum_\ell b_\ell=\sum_\ell c_\ell=\sum_\ell d_\ell`); :math:`L(L+1)^2(L+2)/12` for the
    DMFT, :math:`L(L+1)/2` for gradient independence (Bordelon & Pehlevan (2022), eq. (12))."""
    sums = [sp.factor(sp.summation(x, (ell_sym, 1, L_sym)))
            for x in deep_linear_layer_coefficients(gradient_independent)]
    if any(sp.simplify(x - sums[0]) != 0 for x in sums[1:]):      # pragma: no cover
        raise AssertionError(f"layer sums differ: {sums}")
    return sums[0]


@public
def deep_linear_order2_exprs(hidden_layers=None, layer=None, gradient_independent: bool = False) -> dict:
    r"""SymPy expressions of :math:`H^\ell_2(t,s)`, :math:`G^\ell_2(t,s)` and :math:`K_2(t,s)` (Bordelon & Pehlevan (2022), eqs. (144)-(147), corrected here).

    ``depth`` and ``layer`` default to the symbols :math:`L` and :math:`\ell`.  :math:`K` stands for
    :math:`K^x=\Phi^0`.  Returns ``{'H': ..., 'G': ..., 'ntk': ...}``.
    """
    a, b, c, d = deep_linear_layer_coefficients(gradient_independent)
    pref = deep_linear_ntk_prefactor(gradient_independent)
    sub = {}
    if hidden_layers is not None:
        sub[L_sym] = sp.Integer(hidden_layers)
    if layer is not None:
        sub[ell_sym] = sp.Integer(layer)
    a, b, c, d, pref = (sp.factor(x.subs(sub)) for x in (a, b, c, d, pref))
    al, be = sp.Symbol("alpha", integer=True), sp.Symbol("beta", integer=True)
    t, s = t_sym, s_sym
    bracket_t_s = V2(al, be, t) + V2(be, al, s)
    H2 = a * SampleSum(Kernel(mu, al) * Kernel(nu, be) * bracket_t_s, al, be) \
        + b * SampleSum(Kernel(mu, al) * V1(al, t) * Kernel(nu, be) * V1(be, s), al, be)
    G2 = c * SampleSum(Kernel(al, be) * bracket_t_s, al, be) \
        + d * SampleSum(V1(al, t) * Kernel(al, be) * V1(be, s), al, be)
    full = bracket_t_s + V1(al, t) * V1(be, s)
    K2 = pref * (Kernel(mu, nu) * SampleSum(Kernel(al, be) * full, al, be)
                 + SampleSum(Kernel(mu, al) * Kernel(nu, be) * full, al, be))
    return {"H": H2, "G": G2, "ntk": K2}


def deep_linear_order2_numeric(kx, v_t, vv_t, v_s, vv_s, *, hidden_layers: int,
                               gradient_independent: bool = False):
    r"""Evaluate Bordelon & Pehlevan (2022), eqs. (144)-(147), corrected here on arrays: ``H2 (..., L, n, n)``, ``G2 (..., L)``, ``K2 (..., n, n)``.

    ``v_t (..., P)``, ``vv_t (..., P, P)`` at time ``t`` (and ``_s`` at ``s``); ``kx (n, n)`` with the
    ``P`` training points first (test points ride along in the sample axes ``mu, nu``).
    """
    a, b, c, d = deep_linear_layer_coefficients(gradient_independent)
    depth = int(hidden_layers)
    pref = float(deep_linear_ntk_prefactor(gradient_independent).subs(L_sym, depth))
    P = v_t.shape[-1]
    K = kx[:, :P]
    Kpp = kx[:P, :P]
    S_ts = vv_t + np.swapaxes(vv_s, -1, -2)                     # v_ab(t) + v_ba(s)
    A = np.einsum("ma,...ab,nb->...mn", K, S_ts, K)
    Bm = np.einsum("ma,...a,nb,...b->...mn", K, v_t, K, v_s)
    Ga = np.einsum("ab,...ab->...", Kpp, S_ts)
    Gb = np.einsum("...a,ab,...b->...", v_t, Kpp, v_s)
    H2, G2 = [], []
    for ell in range(1, depth + 1):
        sub = {L_sym: depth, ell_sym: ell}
        H2.append(float(a.subs(sub)) * A + float(b.subs(sub)) * Bm)
        G2.append(float(c.subs(sub)) * Ga + float(d.subs(sub)) * Gb)
    K2 = pref * (kx[..., :, :] * (Ga + Gb)[..., None, None] + A + Bm)
    return np.stack(H2, axis=-3), np.stack(G2, axis=-1), K2


# ------------------------------------------------------------------ two-layer, atoms
class _Counter:
    k = 0


def _fresh(stem):
    _Counter.k += 1
    return sp.Symbol(f"{stem}_{_Counter.k}", integer=True)


def _terms(coef, sig, dummies):
    return [(sp.sympify(coef), sp.sympify(sig), tuple(dummies))]


def _vec(name, m, t):
    """The random vectors of Bordelon & Pehlevan (2022), App. P (two-layer, derived here) as lists of (coefficient, sigma-product, dummies)."""
    a, b = _fresh("alpha"), _fresh("beta")
    if name == "a":
        return _terms(Kernel(m, a) * V1(a, t), sigma(a, 1), (a,))
    if name == "b":
        return _terms(Kernel(m, a) * Kernel(a, b) * V2(a, b, t), sigma(a, 2) * sigma(b, 1), (a, b))
    if name == "c":
        return _terms(Kernel(m, a) * V2(a, b, t), sigma(a, 1) * sigma(b, 0), (a, b))
    if name == "e":
        return _terms(V1(a, t), sigma(a, 0), (a,))
    if name == "k":
        return _terms(Kernel(a, b) * V2(a, b, t), sigma(a, 1) * sigma(b, 1), (a, b))
    raise KeyError(name)                                          # pragma: no cover


def _mul(*factors):
    out = [(sp.Integer(1), sp.Integer(1), ())]
    for fac in factors:
        if not isinstance(fac, list):
            fac = _terms(1, fac, ())
        out = [(c1 * c2, s1 * s2, d1 + d2) for c1, s1, d1 in out for c2, s2, d2 in fac]
    return out


def _scale(x, terms):
    return [(x * c, s, d) for c, s, d in terms]


def _expect(terms) -> sp.Expr:
    """Sum of sample sums; each term's dummies renamed ``alpha, beta, gamma, delta`` in order."""
    names = [sp.Symbol(x, integer=True) for x in ("alpha", "beta", "gamma", "delta")]
    out = []
    for c, s, d in terms:
        ren = dict(zip(d, names))
        out.append(SampleSum((c * GaussianExpectation(s, KX)).xreplace(ren), *[ren[x] for x in d]))
    return sp.Add(*out)


@public
def two_layer_order2_exprs(t=t_sym) -> dict:
    r"""Bordelon & Pehlevan (2022), App. P (two-layer, derived here): equal-time :math:`\Phi_2,G_2,K_2` of the two-layer network as Gaussian atoms.

    Sample labels ``mu, nu``; the atoms are over :math:`K=K^x` (``KernelMatrix(Kernel)``); time
    functions :class:`LazyErrorIntegral`, :class:`LazyErrorDoubleIntegral` at ``t``.
    Returns ``{'phi': ..., 'g': ..., 'ntk': ...}``.
    """
    s = sigma
    swap = {mu: nu, nu: mu}
    _Counter.k = 0                      # deterministic dummy names: alpha_1, beta_2, ...

    def sym(terms):
        return terms + [(c.xreplace(swap), sg.xreplace(swap), d) for c, sg, d in terms]

    phi = _mul(s(mu, 1), _vec("a", mu, t), s(nu, 1), _vec("a", nu, t))
    part = _mul(s(mu, 1), _vec("b", mu, t), s(nu, 0)) + _mul(s(mu, 1), _vec("c", mu, t), s(nu, 0)) \
        + _scale(sp.Rational(1, 2), _mul(s(mu, 2), _vec("a", mu, t), _vec("a", mu, t), s(nu, 0)))
    phi = phi + sym(part)
    g = _mul(_vec("e", mu, t), _vec("e", mu, t), s(mu, 1), s(nu, 1)) \
        + _scale(2, _mul(_vec("k", mu, t), s(mu, 1), s(nu, 1))) \
        + _scale(2, _mul(_vec("e", mu, t), s(mu, 2), _vec("a", mu, t), s(nu, 1))) \
        + _scale(2, _mul(_vec("e", mu, t), s(mu, 1), s(nu, 2), _vec("a", nu, t)))
    part = _scale(3, _mul(s(mu, 1), s(nu, 2), _vec("b", nu, t))) \
        + _mul(s(mu, 1), s(nu, 2), _vec("c", nu, t)) \
        + _scale(sp.Rational(3, 2), _mul(s(mu, 1), s(nu, 3), _vec("a", nu, t), _vec("a", nu, t)))
    g = g + sym(part) + _scale(3, _mul(s(mu, 2), s(nu, 2), _vec("a", mu, t), _vec("a", nu, t)))
    Phi2, G2 = _expect(phi), _expect(g)
    return {"phi": Phi2, "g": G2, "ntk": Phi2 + G2 * Kernel(mu, nu)}


def evaluate_two_layer_order2(expr: sp.Expr, kx: np.ndarray, v: np.ndarray, vv: np.ndarray,
                              activation: str) -> np.ndarray:
    r"""Compile and evaluate a :func:`two_layer_order2_exprs` entry on a time grid.

    The sample sums are expanded over the ``P`` training points, every :math:`(\mu,\nu)` entry is
    compiled once with :func:`effth.codegen.compile_expression` (atoms by closed form or
    quadrature) with the time functions as array parameters.

    Parameters
    ----------
    expr : sympy expression in ``mu, nu``.
    kx : ndarray (P, P)
    v : ndarray (T, P);  vv : ndarray (T, P, P)
    activation : str

    Returns
    -------
    ndarray, shape (T, P, P)
    """
    from effth.codegen import compile_expression
    from effth.dmft.solvers.lazy import require_smooth, resolve_activation

    require_smooth(resolve_activation(activation), "the gamma0-expansion")
    P = kx.shape[0]
    T = v.shape[0]
    labels = list(range(P))
    vs = {(i,): sp.Symbol(f"v_{i}") for i in labels}
    vvs = {(i, j): sp.Symbol(f"vv_{i}_{j}") for i in labels for j in labels}
    out = np.zeros((T, P, P))
    params = list(vs.values()) + list(vvs.values())
    kwargs = {str(k): None for k in params}
    for i in labels:
        kwargs[f"v_{i}"] = v[:, i]
        for j in labels:
            kwargs[f"vv_{i}_{j}"] = vv[:, i, j]
    for m in labels:
        for n_ in labels:
            e = expr.xreplace({mu: sp.Integer(m), nu: sp.Integer(n_)})
            e = e.replace(lambda x: isinstance(x, SampleSum), lambda x: x.expand_over(labels))
            e = e.replace(lambda x: isinstance(x, V1) and x.args[0].is_Integer,
                          lambda x: vs[(int(x.args[0]),)])
            e = e.replace(lambda x: isinstance(x, V2) and x.args[0].is_Integer,
                          lambda x: vvs[(int(x.args[0]), int(x.args[1]))])
            e = e.subs(t_sym, 0)
            fn = compile_expression(e, kernel=KX, activation=activation, params=params)
            out[:, m, n_] = np.broadcast_to(fn(kx, **kwargs), (T,))
    return out
