r"""Finite-time gradient descent at finite width: the projectors after ``t`` steps (PDLT §∞.2.2).

After ``t`` steps of gradient descent with a global rate :math:`\eta` the output of one network
is, to order :math:`1/n`, :math:`z(t)=z^F(t)+z^I(t)`.  The free part (∞.91)–(∞.92) uses the
instance NTK, :math:`z^F_\delta(t)=z_\delta-\widehat H_{\delta\tilde\alpha}\varphi_t(\widehat H)
e` with :math:`\varphi_t(\lambda)=[1-(1-\eta\lambda)^t]/\lambda`; the interacting part solves
(∞.118) with the damping force (∞.119), the interaction NTK (∞.117) and the dynamical dNTK
(∞.102), all driven by the free error :math:`\epsilon^F(s)=(1-\eta\widetilde H)^se` (PDLT
(∞.88)).  Solved for general inputs (∞.124),

.. math::
    z^I_\delta(t)=\big[G(t)\big]_\delta+H_{\delta\tilde\alpha_1}\widetilde H^{\tilde\alpha_1
    \tilde\alpha_2}z^I_{\tilde\alpha_2}(t),\qquad G_\delta(t)=\eta\sum_{s<t}\mathbb F_\delta(s),
    \qquad z^I_{\tilde\alpha}(t)=\eta\sum_{s<t}\big[(1-\eta\widetilde H)^{t-1-s}\mathbb F(s)
    \big]_{\tilde\alpha},

with :math:`[\cdot]_\delta` the training-set subtraction of (∞.141).  In the eigenbasis of the
training NTK every quantity is a sum of geometric sequences :math:`X^s` in monomials
:math:`X=\prod_k(1-\eta\lambda_k)^{e_k}`, so the sums over steps close: :math:`\sum_{s<t}X^s=
(1-X^t)/(1-X)` for :math:`G`, and the convolution :math:`\eta\sum_{s<t}u_o^{t-1-s}X^s=
\eta(X^t-u_o^t)/(X-u_o)` for the training-set part, with :math:`u_o=1-\eta\lambda_o` of the
output slot.  :math:`G(t)` has exactly the tensor-slot structure of (∞.141), with *finite-time
projectors* :math:`Z_A(t)\dots Z_{IIB}(t)` whose coefficient functions are derived here in
SymPy (:func:`finite_time_expressions`); the training-set part has coefficient functions with
one more eigenvalue, :math:`\lambda_o`.  As :math:`t\to\infty`, :math:`X^t\to0`: the
training-set part vanishes and :math:`Z(t)` tends to the projectors of (∞.142)–(∞.147).

The powers are evaluated in log space, :math:`X^t=\exp(t\sum_ke_k\,\mathrm{log1p}(-\eta
\lambda_k))`, and the divided differences :math:`(X^t-Y^t)/(X-Y)` as
:math:`Y^{t-1}\mathrm{expm1}(t\,d)/\mathrm{expm1}(d)` with :math:`d=\log X-\log Y`, so huge
``t`` with tiny ``eta`` and coinciding eigenvalues stay exact to rounding.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import sympy as sp

__all__ = ["finite_time_expressions", "FiniteTimeProjectors", "finite_time_projectors",
           "power_t", "divided_power", "phi_divided"]

_ETA = sp.Symbol("eta", nonnegative=True)
_LABELS = ("x", "y", "w")
_LAMS = {k: sp.Symbol(f"lambda_{k}", positive=True) for k in _LABELS}
_CANON = ("p", "q", "r")
_CLAM = {k: sp.Symbol(f"lambda_{k}", positive=True) for k in _CANON}


# ------------------------------------------------------------------ geometric sums in s
# A quantity g(s) = sum_X kappa_X X^s is a dict {exponents: kappa}; the exponents tuple holds
# the power of u_k = 1 - eta lambda_k for k in _LABELS.

def _one_minus(ex: tuple) -> sp.Expr:
    """1 - X for X = prod_k (1 - eta lambda_k)^{e_k}, expanded (exact in eta)."""
    X = sp.Integer(1)
    for k, e in zip(_LABELS, ex):
        X *= (1 - _ETA * _LAMS[k]) ** e
    return sp.expand(1 - X)


def _geo(label: str, coeff=1) -> dict:
    return {tuple(int(k == label) for k in _LABELS): sp.sympify(coeff)}


def _mul(a: dict, b: dict) -> dict:
    out: dict = {}
    for ea, ca in a.items():
        for eb, cb in b.items():
            e = tuple(i + j for i, j in zip(ea, eb))
            out[e] = out.get(e, 0) + ca * cb
    return out


def _scale(a: dict, c) -> dict:
    return {e: c * v for e, v in a.items()}


def _partial(a: dict) -> dict:
    r""":math:`\sum_{s'<s}g(s')` as a geometric sum in ``s`` (no constant term may be summed)."""
    out: dict = {}
    zero = (0,) * len(_LABELS)
    for e, c in a.items():
        if e == zero:
            raise AssertionError("a constant summed over steps (a bug in the derivation)")
        d = c / _one_minus(e)
        out[zero] = out.get(zero, 0) + d
        out[e] = out.get(e, 0) - d
    return out


def _eps(label):                   # eps^F_label(s) = u^s e
    return _geo(label)


def _a(label):                     # a(s) = eta sum_{s'<s} eps^F(s'), (∞.92)
    return _partial(_scale(_eps(label), _ETA))


def _canonical(tensor: str, slots: tuple) -> tuple:
    """(projector, labels at its slots) of a tensor term, by the tensor's symmetries: dH is
    symmetric in its last two slots, ddI in its last three, ddII under (0 1)(2 3)."""
    nd = tuple(s for s in slots if s != "D")
    k = slots.index("D")
    if tensor == "dH":
        return ("B", nd) if k == 0 else ("A", (slots[0],) + tuple(s for s in slots[1:] if s != "D"))
    if tensor == "ddI":
        return ("IB", nd) if k == 0 else ("IA", (slots[0],) + tuple(s for s in slots[1:] if s != "D"))
    s0, s1, s2, s3 = slots
    if k == 0:
        return "IIB", (s1, s2, s3)
    if k == 1:                     # [s0, D, s2, s3] = [D, s0, s3, s2]
        return "IIB", (s0, s3, s2)
    if k == 2:
        return "IIA", (s0, s1, s3)
    return "IIA", (s1, s0, s2)     # [s0, s1, s2, D] = [s1, s0, D, s2]


def _force_terms() -> list:
    r"""The damping force (∞.119) at step ``s`` as ``(tensor, slots, g(s))``: ``slots`` place
    the free sample ``D`` and the error labels ``x, y, w`` in the tensor's slots, ``g`` is the
    coefficient of :math:`e_xe_y(e_w)` (eigen-components of the initial error), from the
    difference equations (∞.81)–(∞.83) with the interaction NTK (∞.117) and the dynamical dNTK
    (∞.102) (the mean NTK :math:`\delta_{ij}H` inside the interaction)."""
    eta = _ETA
    x, y, w = _eps("x"), _eps("y"), _eps("w")
    terms = []
    # -H^I eps: the dNTK part of H^I, -(dH_{ijk;D x y} + dH_{jik;x D y}) a_y
    for slots in (("D", "x", "y"), ("x", "D", "y")):
        terms.append(("dH", slots, _mul(x, _a("y"))))
    # (eta/2) dHhat eps eps
    terms.append(("dH", ("D", "x", "y"), _scale(_mul(x, y), eta / 2)))
    # -H^I eps, the ddNTK part from the dynamical dNTK in (∞.82): C a eps summed over s' < s,
    # C[s0 s1 s2 s3] = ddI[s0 s1 s2 s3] + ddII[s0 s1 s2 s3] + ddII[s0 s2 s1 s3] (∞.83)
    inner = _partial(_scale(_mul(_a("w"), y), eta))
    g3 = _scale(_mul(x, inner), -1)
    for slots0 in (("D", "x", "y", "w"), ("x", "D", "y", "w")):
        s0, s1, s2, s3 = slots0
        for tensor, slots in (("ddI", (s0, s1, s2, s3)), ("ddII", (s0, s1, s2, s3)),
                              ("ddII", (s0, s2, s1, s3))):
            terms.append((tensor, slots, g3))
    # -H^I eps, the eta^2/2 (ddI + ddI^T + 2 ddII) eps eps part of (∞.82)
    g4 = _scale(_mul(x, _partial(_scale(_mul(y, w), eta ** 2 / 2))), -1)
    terms += [("ddI", ("D", "x", "y", "w"), g4), ("ddI", ("x", "D", "y", "w"), g4),
              ("ddII", ("D", "x", "y", "w"), _scale(g4, 2))]
    # (eta/2) dH(s) eps eps with dH(s) = dHhat - C a(s)
    g5 = _scale(_mul(_mul(x, y), _a("w")), -eta / 2)
    for tensor, slots in (("ddI", ("D", "x", "y", "w")), ("ddII", ("D", "x", "y", "w")),
                          ("ddII", ("D", "y", "x", "w"))):
        terms.append((tensor, slots, g5))
    # -(eta^2/6) ddI eps eps eps
    terms.append(("ddI", ("D", "x", "y", "w"), _scale(_mul(_mul(x, y), w), -eta ** 2 / 6)))
    return terms


@lru_cache(maxsize=None)
def finite_time_expressions() -> dict:
    r"""The finite-time projectors of gradient descent, derived from (∞.81)–(∞.83).

    Returns
    -------
    dict
        ``{"bracket": {name: [(exponents, coefficient)]}, "train": {...}}`` for ``name`` in
        ``("A", "B", "IA", "IB", "IIA", "IIB")``.  A coefficient is a SymPy expression in
        ``lambda_p, lambda_q, lambda_r`` (eigenvalues of the training NTK at the projector's
        slots, in order) and ``eta``; ``exponents`` give the monomial
        :math:`X=\prod_k(1-\eta\lambda_k)^{e_k}` over ``(p, q, r)``.  The bracket part is
        :math:`Z(t)=\sum_X c_X\,(1-X^t)/(1-X)`; the training-set part, with the output slot's
        eigenvalue :math:`\lambda_o`, is :math:`\sum_X c_X\,(X^t-u_o^t)/(X-u_o)`, both already
        multiplied by :math:`\eta`.

    Examples
    --------
    >>> ex = finite_time_expressions()
    >>> sorted(ex["bracket"])
    ['A', 'B', 'IA', 'IB', 'IIA', 'IIB']
    """
    out = {"bracket": {}, "train": {}}
    for tensor, slots, g in _force_terms():
        proj, labels = _canonical(tensor, slots)
        sub = {_LAMS[lab]: _CLAM[c] for lab, c in zip(labels, _CANON)}
        order = [_LABELS.index(lab) for lab in labels]
        unused = [i for i in range(len(_LABELS)) if i not in order]
        acc = out["bracket"].setdefault(proj, {})
        for e, c in g.items():
            if any(e[i] for i in unused):
                raise AssertionError("an error label outside the tensor's slots (a bug)")
            ce = tuple(e[i] for i in order)
            acc[ce] = acc.get(ce, 0) + _ETA * c.xreplace(sub)
    for proj, acc in out["bracket"].items():
        terms = [(e, sp.cancel(sp.together(c))) for e, c in sorted(acc.items())]
        out["bracket"][proj] = [(e, c) for e, c in terms if c != 0]
        out["train"][proj] = out["bracket"][proj]
    return out


@lru_cache(maxsize=None)
def _compiled() -> dict:
    args = (*_CLAM.values(), _ETA)
    return {proj: [(e, sp.lambdify(args, c, modules="numpy")) for e, c in terms]
            for proj, terms in finite_time_expressions()["bracket"].items()}


# ------------------------------------------------------------------ exact powers in log space
def _log_u(lam: np.ndarray, eta: float) -> tuple:
    """(sign, log|u|) of u = 1 - eta lambda, log1p for |eta lambda| < 1 (exact for tiny eta)."""
    e = eta * np.asarray(lam, float)
    u = 1.0 - e
    with np.errstate(divide="ignore"):
        small = np.abs(e) < 1.0
        lg = np.where(small, np.log1p(-np.where(small, e, 0.0)), np.log(np.abs(u)))
    return np.sign(u), lg


def _signed_power(sign: np.ndarray, lg: np.ndarray, t: int) -> np.ndarray:
    """X^t from (sign, log|X|), t an integer >= 0."""
    mag = np.exp(t * lg) if t else np.ones_like(lg)
    return mag * (sign ** (t % 2) if t else 1.0)


def power_t(lam, eta: float, t: int) -> np.ndarray:
    r""":math:`(1-\eta\lambda)^t` as :math:`\exp(t\,\mathrm{log1p}(-\eta\lambda))` (sign-correct
    for :math:`1\le\eta\lambda<2`)."""
    s, lg = _log_u(lam, eta)
    return _signed_power(s, lg, int(t))


def _geom(sx, lx, t: int) -> np.ndarray:
    r""":math:`(1-X^t)/(1-X)` from (sign, log|X|), |X| < 1."""
    pos = sx > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        num = np.where(pos, -np.expm1(t * lx), 1.0 - _signed_power(sx, lx, t))
        den = np.where(pos, -np.expm1(lx), 1.0 - sx * np.exp(lx))
    return num / den


def _dd_log(sx, lx, sy, ly, t: int) -> np.ndarray:
    r""":math:`(X^t-Y^t)/(X-Y)` from signs and logs; :math:`tX^{t-1}` at :math:`X=Y`."""
    t = int(t)
    if t == 0:
        return np.zeros(np.broadcast(lx, ly).shape)
    same = (sx == sy) & (sx != 0)
    hi = np.maximum(lx, ly)
    d = np.minimum(lx, ly) - hi                    # <= 0
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        ratio = np.where(d == 0, float(t), np.expm1(t * d) / np.expm1(d))
        s_same = np.where(sx < 0, (-1.0) ** ((t - 1) % 2), 1.0)
        v_same = s_same * np.exp((t - 1) * hi) * ratio
        X, Y = sx * np.exp(lx), sy * np.exp(ly)
        v_diff = (_signed_power(sx, lx, t) - _signed_power(sy, ly, t)) / (X - Y)
    return np.where(same, v_same, np.nan_to_num(v_diff))


def divided_power(lam_a, lam_b, eta: float, t: int) -> np.ndarray:
    r"""First divided difference of :math:`u\mapsto u^t` at :math:`u=1-\eta\lambda_a,
    1-\eta\lambda_b`: :math:`(u_a^t-u_b^t)/(u_a-u_b)`, exact at coinciding points."""
    sa, la = _log_u(lam_a, eta)
    sb, lb = _log_u(lam_b, eta)
    return _dd_log(sa, la, sb, lb, t)


def _divided_power2(l1, l2, l3, eta: float, t: int) -> np.ndarray:
    r"""Second divided difference of :math:`u^t` at three points :math:`u_k=1-\eta\lambda_k`:
    the recursion where the points are apart, a Taylor series around the middle one where
    they are within :math:`10^{-3}|u|/t` (the recursion would lose the digits there), for either
    sign of :math:`u` (:math:`1<\eta\lambda<2` gives :math:`u<0`)."""
    L = np.sort(np.stack(np.broadcast_arrays(l1, l2, l3)), axis=0)   # lambda ascending: u descending
    la, lb, lc = L
    u2 = 1.0 - eta * lb
    spread = eta * (lc - la)
    rec = (divided_power(la, lb, eta, t) - divided_power(lb, lc, eta, t))
    with np.errstate(invalid="ignore", divide="ignore"):
        rec = rec / spread
    near = (spread * t <= 1e-3 * np.abs(u2)) & (u2 != 0)
    if np.any(near):
        alpha = eta * (lb - la)           # u1 - u2
        gamma = -eta * (lc - lb)          # u3 - u2
        sg, lg = _log_u(lb, eta)
        tay = np.zeros_like(u2)
        binom = t * (t - 1) / 2.0                      # C(t, k) from k = 2
        for k in range(2, 8):
            if t - k < 0:
                break
            j = k - 2
            hj = sum(alpha ** i * gamma ** (j - i) for i in range(j + 1))
            tay = tay + binom * _signed_power(sg, lg, t - k) * hj
            binom = binom * (t - k) / (k + 1)
        rec = np.where(near, tay, rec)
    # u = 0 exactly (eta lambda = 1) at three coinciding points: C(t, 2) 0^{t-2}
    return np.where((spread == 0) & (u2 == 0), float(t == 2), rec)


def phi_divided(lam: np.ndarray, eta: float, t: int) -> tuple:
    r""":math:`\varphi_t(\lambda)=[1-(1-\eta\lambda)^t]/\lambda` and its first and second divided
    differences on the eigenvalues (the Daleckii–Krein coefficients of its Fréchet
    derivatives), by the Leibniz rule on :math:`u^t\cdot\lambda^{-1}`:
    :math:`\varphi[p,q]=-(1-u_p^t)/(\lambda_p\lambda_q)+\eta D_1(p,q)/\lambda_q`,
    :math:`\varphi[p,q,r]=(1-u_p^t)/(\lambda_p\lambda_q\lambda_r)-\eta D_1(p,q)/(\lambda_q
    \lambda_r)-\eta^2D_2(p,q,r)/\lambda_r` with :math:`D_k` the divided differences of
    :math:`u^t`."""
    lam = np.asarray(lam, float)
    ut = power_t(lam, eta, t)
    lp, lq = lam[:, None], lam[None, :]
    one = 1.0 - ut
    phi = one / lam
    D1 = divided_power(lp, lq, eta, t)
    phi1 = -one[:, None] / (lp * lq) + eta * D1 / lq
    p3, q3, r3 = lam[:, None, None], lam[None, :, None], lam[None, None, :]
    D2 = _divided_power2(p3, q3, r3, eta, t)
    phi2 = (one[:, None, None] / (p3 * q3 * r3) - eta * D1[:, :, None] / (q3 * r3)
            - eta ** 2 * D2 / r3)
    return phi, phi1, phi2


# ------------------------------------------------------------------ numerical projectors
@dataclass(frozen=True, repr=False)
class FiniteTimeProjectors:
    r"""The projectors of gradient descent after ``updates`` steps, in the training NTK's eigenbasis.

    Attributes
    ----------
    eta : float
    updates : int
    eigenvalues, eigenvectors : ndarray
        Of the training NTK :math:`\widetilde H`.
    coefficients : dict
        ``name -> ndarray``: the bracket-part coefficient :math:`z(p,q[,r];t)`.
    train_coefficients : dict
        ``name -> ndarray``: the training-set part, :math:`z(o,p,q[,r];t)` (leading axis: the
        output slot's eigen-index).
    phi, phi1, phi2 : ndarray
        :math:`\varphi_t` and its divided differences (:func:`phi_divided`).
    """

    algorithm: str
    eta: float
    updates: int
    eigenvalues: np.ndarray
    eigenvectors: np.ndarray
    coefficients: dict
    train_coefficients: dict
    phi: np.ndarray
    phi1: np.ndarray
    phi2: np.ndarray

    @property
    def n_train(self) -> int:
        return len(self.eigenvalues)

    def inverse(self) -> np.ndarray:
        U, lam = self.eigenvectors, self.eigenvalues
        return (U / lam) @ U.T

    def to_eigenbasis(self, T: np.ndarray, axes: tuple) -> np.ndarray:
        for ax in axes:
            T = np.moveaxis(np.tensordot(T, self.eigenvectors, axes=([ax], [0])), -1, ax)
        return T

    def __repr__(self) -> str:
        return (f"FiniteTimeProjectors(eta={self.eta:.6g}, updates={self.updates}, "
                f"N_A={self.n_train})")


def finite_time_projectors(lam: np.ndarray, U: np.ndarray, eta: float, updates: int
                           ) -> FiniteTimeProjectors:
    """Evaluate :func:`finite_time_expressions` on the eigenvalues ``lam`` (eigenvectors ``U``)
    of the training NTK after ``updates`` steps of size ``eta``."""
    t = int(updates)
    lam = np.asarray(lam, float)
    n = len(lam)
    fns = _compiled()
    s1, l1 = _log_u(lam, eta)
    coeffs, train = {}, {}
    for proj, terms in fns.items():
        rank = 2 if proj in ("A", "B") else 3
        shape = (n,) * rank
        grids = np.meshgrid(*([lam] * rank), indexing="ij")
        args = tuple(grids) + (grids[0],) * (3 - rank) + (eta,)
        sg = np.meshgrid(*([s1] * rank), indexing="ij")
        lg = np.meshgrid(*([l1] * rank), indexing="ij")
        zb = np.zeros(shape)
        zt = np.zeros((n,) + shape)
        so = s1.reshape((n,) + (1,) * rank)
        lo = l1.reshape((n,) + (1,) * rank)
        for e, fn in terms:
            c = np.broadcast_to(np.asarray(fn(*args), float), shape)
            sx = np.ones(shape)
            lx = np.zeros(shape)
            for k in range(rank):
                if e[k]:
                    sx = sx * sg[k] ** e[k]
                    lx = lx + e[k] * lg[k]
            zb += c * _geom(sx, lx, t)
            zt += c[None] * _dd_log(sx[None], lx[None], so, lo, t)
        coeffs[proj], train[proj] = zb, zt
    phi, phi1, phi2 = phi_divided(lam, eta, t)
    return FiniteTimeProjectors("gd", float(eta), t, lam, U, coeffs, train, phi, phi1, phi2)
