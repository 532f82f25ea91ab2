r"""Per-family closed-form planners.

Each planner takes the activation and a normalized factor description and returns either
``None`` (no closed form) or a function ``K -> ndarray`` evaluating the expectation for a
batch of covariances ``K[..., k, k]`` over the *used* slots ``0..k-1``.

Normalized factors: ``groups`` is a list (one entry per used slot) of
``(sigma_orders: tuple[int, ...], z_power: int)``.
"""

from __future__ import annotations

import itertools
import math
from typing import Callable

import numpy as np

from ._orthant import (
    half_gaussian_moment,
    orthant2_moment,
    orthant_closed,
    orthant_moment,
    shared_memo,
    theta_poly_expectation,
)
from ._poly import poly_expectation, poly_mul, shifted_moment

Groups = list  # list[tuple[tuple[int, ...], int]]
Evaluator = Callable[[np.ndarray], np.ndarray]

SQRT_PI = math.sqrt(math.pi)
SQRT_2PI = math.sqrt(2 * math.pi)


def _zeros(K: np.ndarray) -> np.ndarray:
    return np.zeros(K.shape[:-2])


def _mono(k: int, s: int, p: int) -> tuple[int, ...]:
    e = [0] * k
    e[s] = p
    return tuple(e)


def _univariate_to_multi(coeffs: list[float], k: int, s: int) -> dict:
    return {_mono(k, s, p): c for p, c in enumerate(coeffs) if c != 0.0}


def _upoly_mul(a: list[float], b: list[float]) -> list[float]:
    out = [0.0] * (len(a) + len(b) - 1)
    for i, x in enumerate(a):
        if x == 0.0:
            continue
        for j, y in enumerate(b):
            out[i + j] += x * y
    return out


def _upoly_deriv(a: list[float]) -> list[float]:
    return [i * a[i] for i in range(1, len(a))] or [0.0]


# ----------------------------------------------------------------------------- z only
def plan_z_only(groups: Groups) -> Evaluator:
    r"""Pure moments :math:`\mathbb E[\prod_s z_s^{p_s}]` by Isserlis' theorem."""
    e = tuple(p for _, p in groups)
    poly = {e: 1.0}
    return lambda K: poly_expectation(poly, K)


# ----------------------------------------------------------------------------- polynomial
def plan_polynomial(coeffs: list[float], groups: Groups) -> Evaluator:
    r"""Polynomial activation :math:`\sigma=\sum_kc_kz^k`: expand and apply Isserlis."""
    k = len(groups)
    derivs = [list(coeffs)]

    def deriv(a: int) -> list[float]:
        while len(derivs) <= a:
            derivs.append(_upoly_deriv(derivs[-1]))
        return derivs[a]

    total: dict = {(0,) * k: 1.0}
    for s, (orders, p) in enumerate(groups):
        u = [0.0] * p + [1.0]
        for a in orders:
            u = _upoly_mul(u, deriv(a))
        total = poly_mul(total, _univariate_to_multi(u, k, s))
    total = {e: c for e, c in total.items() if c != 0.0}
    return lambda K: poly_expectation(total, K)


# ----------------------------------------------------------------------------- piecewise
def _plan_sided(groups: Groups, side_coef: list[tuple[float, float]], side_pow: list[int]) -> Evaluator | None:
    r"""Sum over sign patterns of orthant moments.

    Slot ``s`` contributes ``c_+ Θ(z) z^{n} + c_- Θ(-z) z^{n}``; for a sign pattern
    :math:`e`, :math:`\mathbb E[\prod\Theta(e_sz_s)z_s^{n_s}]=\prod e_s^{n_s}\,
    \mathbb E[\prod\Theta(y_s)y_s^{n_s}]` with :math:`y=\mathrm{diag}(e)z`.
    """
    k = len(groups)
    if not orthant_closed(k, sum(side_pow)):
        return None

    def ev(K: np.ndarray) -> np.ndarray:
        res = _zeros(K)
        for signs in itertools.product((1, -1), repeat=k):
            coef = 1.0
            for s, e in enumerate(signs):
                coef *= side_coef[s][0 if e > 0 else 1] * (e ** side_pow[s])
            if coef == 0.0:
                continue
            if k == 1:
                val = half_gaussian_moment(K[..., 0, 0], side_pow[0])
            elif k == 2:
                val = orthant2_moment(
                    K[..., 0, 0], signs[0] * signs[1] * K[..., 0, 1], K[..., 1, 1], side_pow[0], side_pow[1]
                )
            else:
                d = np.asarray(signs, dtype=float)
                val = orthant_moment(K * d[:, None] * d[None, :], tuple(side_pow))
            res = res + coef * val
        return res

    return ev


def plan_piecewise_linear(a_plus: float, a_minus: float, groups: Groups) -> Evaluator | None:
    r"""Piecewise-linear :math:`\sigma=a_+z\Theta(z)+a_-z\Theta(-z)`.

    Regular parts: :math:`\sigma'=a_+\Theta(z)+a_-\Theta(-z)`, :math:`\sigma^{(a\ge2)}=0`.
    """
    if any(a >= 2 for orders, _ in groups for a in orders):
        return _zeros
    coefs, pows = [], []
    for orders, p in groups:
        cp = math.prod([a_plus] * len(orders))
        cm = math.prod([a_minus] * len(orders))
        coefs.append((cp, cm))
        pows.append(p + sum(1 for a in orders if a == 0))
    return _plan_sided(groups, coefs, pows)


def plan_step(low: float, high: float, groups: Groups) -> Evaluator | None:
    r"""Step :math:`\sigma=h\,\Theta(z)+l\,\Theta(-z)`; regular parts of all derivatives vanish."""
    if any(a >= 1 for orders, _ in groups for a in orders):
        return _zeros
    coefs = [(high ** len(orders), low ** len(orders)) for orders, _ in groups]
    pows = [p for _, p in groups]
    return _plan_sided(groups, coefs, pows)


# ----------------------------------------------------------------------------- trig
def plan_trig(kind: str, groups: Groups) -> Evaluator:
    r"""sin / cos, exact for any slots, derivative orders and z powers.

    :math:`\sigma^{(a)}(z)=\sin(z+\phi_a)` with :math:`\phi_a=a\pi/2` (+:math:`\pi/2` for cos),
    :math:`\sin x=\sum_{\epsilon=\pm1}\frac{\epsilon}{2i}e^{i\epsilon x}`, and

    .. math::
        \mathbb E\Big[\prod_sz_s^{n_s}e^{it^\top z}\Big]=e^{-\frac12t^\top Kt}\,
        \mathbb E\Big[\prod_s(w_s+i(Kt)_s)^{n_s}\Big],\quad w\sim\mathcal N(0,K)

    (complex shift of the Gaussian; the remaining moment is done by Isserlis).
    """
    k = len(groups)
    shift = 0.5 * math.pi if kind == "cos" else 0.0
    facs = [(s, a * 0.5 * math.pi + shift) for s, (orders, _) in enumerate(groups) for a in orders]
    n = tuple(p for _, p in groups)
    # merge sign patterns by frequency vector t
    waves: dict = {}
    for eps in itertools.product((1, -1), repeat=len(facs)):
        t = [0] * k
        c = 1.0 + 0.0j
        for (s, ph), e in zip(facs, eps):
            t[s] += e
            c *= e * np.exp(1j * e * ph) / 2j
        t = tuple(t)
        waves[t] = waves.get(t, 0.0) + c

    def ev(K: np.ndarray) -> np.ndarray:
        res = np.zeros(K.shape[:-2], dtype=complex)
        for t, c in waves.items():
            if abs(c) < 1e-300:
                continue
            tv = np.asarray(t, dtype=float)
            Kt = K @ tv
            quad = Kt @ tv
            damp = np.exp(-0.5 * quad)
            if any(n):
                mom = shifted_moment(n, K, 1j * Kt)
            else:
                mom = 1.0
            res = res + c * damp * mom
        return np.real(res)

    return ev


# ----------------------------------------------------------------------------- erf / gelu
# A "piece" of a factor: (coefficient, univariate poly coeffs, gaussian exponent c, theta noise or None)
# meaning coefficient * poly(z_s) * exp(-c z_s^2) * [Theta(z_s + eta), eta ~ N(0, noise)].


def _hermite_phys(n: int) -> list[float]:
    """Physicists' Hermite polynomial H_n as coefficient list (ascending)."""
    h0, h1 = [1.0], [0.0, 2.0]
    if n == 0:
        return h0
    for m in range(1, n):
        # H_{m+1} = 2z H_m - 2m H_{m-1}
        a = [0.0] + [2.0 * x for x in h1]
        b = [2.0 * m * x for x in h0] + [0.0, 0.0]
        h0, h1 = h1, [x - y for x, y in zip(a, b[: len(a)])]
    return h1


def erf_pieces(a: int) -> list[tuple]:
    r"""Pieces of :math:`\mathrm{erf}^{(a)}`.

    :math:`\mathrm{erf}(z)=2\,\mathbb E_\eta[\Theta(z+\eta)]-1` with :math:`\eta\sim\mathcal N(0,\tfrac12)`;
    :math:`\mathrm{erf}^{(a)}(z)=\frac{2}{\sqrt\pi}(-1)^{a-1}H_{a-1}(z)e^{-z^2}` for :math:`a\ge1`.
    """
    if a == 0:
        return [(2.0, [1.0], 0.0, 0.5), (-1.0, [1.0], 0.0, None)]
    h = _hermite_phys(a - 1)
    sgn = -1.0 if (a - 1) % 2 else 1.0
    return [(2.0 / SQRT_PI * sgn, h, 1.0, None)]


def gelu_pieces(a: int) -> list[tuple]:
    r"""Pieces of :math:`\mathrm{gelu}^{(a)}`, :math:`\mathrm{gelu}(z)=z\Phi(z)`.

    :math:`\Phi(z)=\mathbb E_\eta[\Theta(z+\eta)]`, :math:`\eta\sim\mathcal N(0,1)`;
    :math:`\sigma'=\Phi+z\varphi`; :math:`\sigma^{(a)}=P_a\varphi` for :math:`a\ge2` with
    :math:`P_2=2-z^2`, :math:`P_{a+1}=P_a'-zP_a`.
    """
    if a == 0:
        return [(1.0, [0.0, 1.0], 0.0, 1.0)]
    if a == 1:
        return [(1.0, [1.0], 0.0, 1.0), (1.0 / SQRT_2PI, [0.0, 1.0], 0.5, None)]
    P = [2.0, 0.0, -1.0]
    for _ in range(a - 2):
        dP = _upoly_deriv(P)
        zP = [0.0] + P
        P = [(dP[i] if i < len(dP) else 0.0) - zP[i] for i in range(len(zP))]
    return [(1.0 / SQRT_2PI, P, 0.5, None)]


def n_theta_ok(family: str, groups: Groups) -> bool:
    """Whether every term of the expansion has at most 4 Heaviside factors (orthant moments of up
    to four variables are closed, :func:`orthant_moment`)."""
    thetas = [a for orders, _ in groups for a in orders if (a == 0 if family == "erf" else a <= 1)]
    return len(thetas) <= 4


def _absorb(K: np.ndarray, c: tuple[float, ...]) -> tuple[np.ndarray, np.ndarray]:
    r"""Absorb :math:`e^{-\sum_sc_sz_s^2}` into the Gaussian.

    :math:`\mathbb E_K[f(z)e^{-z^\top Cz}]=\det(I+2KC)^{-1/2}\,\mathbb E_{K'}[f]`,
    :math:`K'=(I+2KC)^{-1}K`, valid for singular :math:`K`.
    """
    cv = np.asarray(c, dtype=float)
    k = K.shape[-1]
    M = np.eye(k) + 2.0 * K * cv[None, :]
    pref = 1.0 / np.sqrt(np.linalg.det(M))
    Kp = np.linalg.solve(M, K)
    Kp = 0.5 * (Kp + np.swapaxes(Kp, -1, -2))
    return pref, Kp


def plan_pieces(pieces_of: Callable[[int], list], groups: Groups) -> Evaluator:
    """Expand the product of pieces and evaluate every term (Gaussian absorption + Heaviside engine)."""
    k = len(groups)
    facs = []
    for s, (orders, p) in enumerate(groups):
        for a in orders:
            facs.append([(s,) + pc for pc in pieces_of(a)])
        if p:
            facs.append([(s, 1.0, [0.0] * p + [1.0], 0.0, None)])
    # group terms by (c vector, theta tuple)
    terms: dict = {}
    for combo in itertools.product(*facs):
        coef = 1.0
        c = [0.0] * k
        th = []
        poly: dict = {(0,) * k: 1.0}
        for (s, cf, up, cg, noise) in combo:
            coef *= cf
            c[s] += cg
            if noise is not None:
                th.append((s, noise))
            poly = poly_mul(poly, _univariate_to_multi(up, k, s))
        key = (tuple(c), tuple(sorted(th)))
        acc = terms.setdefault(key, {})
        for e, v in poly.items():
            acc[e] = acc.get(e, 0.0) + coef * v

    def ev(K: np.ndarray) -> np.ndarray:
        res = _zeros(K)
        shared = shared_memo()
        absorbed: dict = {}
        for (c, th), poly in terms.items():
            poly = {e: v for e, v in poly.items() if v != 0.0}
            if not poly:
                continue
            if c not in absorbed:
                key = ("absorb", id(K), c)
                if shared is not None and key in shared:
                    absorbed[c] = shared[key][1]
                else:
                    absorbed[c] = _absorb(K, c) if any(c) else (1.0, K)
                    if shared is not None:
                        shared[key] = (K, absorbed[c])
            pref, Kp = absorbed[c]
            val = theta_poly_expectation(Kp, tuple(s for s, _ in th), tuple(v for _, v in th), poly)
            res = res + pref * val
        return res

    return ev
