r"""Hand-derived O(1/n) NTK statistics at the output of a depth-3 residual MLP, one input.

Independent of the derivation pipeline: typed from the forward equations of PDLT (B.4) with one
skip layer (layer 2; layer 1 and the output layer 3 have none),

    z2_k = xi (b_k + sum_l W_kl sigma(z1_l)) + gamma z1_k,
    H2_km = delta_km xi^2 (lambda_b + lambda_W/n sum_l sigma_l^2) + Theta1 sum_l J_kl J_ml,
    J_kl = xi W_kl sigma'(z1_l) + gamma delta_kl,

by Gaussian integration by parts over single weights.  A neuron's own history enters through
joint expectations E_J[f(z2) h(z1)] over the Gaussian pair (z1, z2) with variances K1, K2 and
covariance c = gamma K1 (Mehler: sum_p c^p/p! <f^(p)>_K2 <h^(p)>_K1).  ``orders`` truncates those
series the way a single-layer cumulant closure does (the derived recursions); ``None`` is exact.

C_W = 1, C_b = 0, lambda_b = lambda_W = 1 at every layer, xi = 1, |x|^2/n_0 = ``x2``.
"""

from __future__ import annotations

import math

import numpy as np

from effth.activations import get_activation

_X, _W = np.polynomial.hermite_e.hermegauss(120)
_W = _W / _W.sum()
_U, _V = np.meshgrid(_X, _X, indexing="ij")
_W2 = np.outer(_W, _W)


def _setup(act, gamma, x2):
    a = get_activation(act)
    s = [a.numpy(k) for k in range(4)]
    E = lambda f, K: _W @ f(np.sqrt(K) * _X)  # noqa: E731

    def D(f, K, p):                          # <f^(p)>_K = <f He_p(z/sqrt K)>_K / K^(p/2)
        return (_W @ (f(np.sqrt(K) * _X) * np.polynomial.hermite_e.hermeval(_X, [0] * p + [1]))) / K ** (p / 2)
    K1, Th1 = x2, 1.0 + x2
    sq = lambda z: s[0](z) ** 2             # noqa: E731
    dsq = lambda z: s[1](z) ** 2            # noqa: E731
    K2 = E(sq, K1) + gamma**2 * K1
    Th2 = 1.0 + E(sq, K1) + Th1 * (gamma**2 + E(dsq, K1))
    c = gamma * K1
    z1 = np.sqrt(K1) * _U
    z2 = c / np.sqrt(K1) * _U + np.sqrt(K2 - c * c / K1) * _V

    def EJ(f, h, pmax):
        if pmax is None:
            return float((_W2 * f(z2) * h(z1)).sum())
        return sum(c**p / math.factorial(p) * D(f, K2, p) * D(h, K1, p) for p in range(pmax + 1))
    return s, E, D, K1, K2, Th1, Th2, EJ, sq, dsq


def depth3_statistics(act, gamma, x2=0.625, truncate=False):
    """Theta, H1, B, F at layer 3; ``truncate``: the cumulant closure's Mehler orders."""
    s, E, D, K1, K2, Th1, Th2, EJ, sq, dsq = _setup(act, gamma, x2)
    pB, pF, pe, pn, po = (0, 1, 2, 2, 1) if truncate else (None,) * 5
    phi = lambda z: s[0](z) * s[1](z)                          # noqa: E731
    dphi = lambda z: s[1](z) ** 2 + s[0](z) * s[2](z)           # noqa: E731
    g2 = gamma**2
    B = (E(lambda z: s[1](z) ** 4, K2) * Th2**2
         + E(dsq, K2) ** 2 * Th1**2 * E(lambda z: s[1](z) ** 4, K1)
         + 2 * g2 * Th1**2 * E(dsq, K2) * EJ(dsq, dsq, pB))
    F = (E(lambda z: phi(z) ** 2, K2) * Th2 + Th1 * E(lambda z: phi(z) ** 2, K1) * E(dphi, K2) ** 2
         + 2 * gamma * Th1 * E(dphi, K2) * EJ(phi, phi, pF))
    # H1 = n (E[H3_ii] - Theta3), E[H3_ii] = 1 + E[s(z2)^2] + E[s'(z2_k)^2 H2_kk]
    var_s = E(lambda z: s[0](z) ** 4, K1) - E(sq, K1) ** 2
    cov_ds = E(lambda z: s[1](z) ** 2 * s[0](z) ** 2, K1) - E(dsq, K1) * E(sq, K1)

    def e1(f, f2):                    # n (E[f(z2)] - <f>_K2), f2 = f''
        return (EJ(f2, sq, pe) - E(f2, K2) * E(sq, K1)) / 2 + var_s * D(f, K2, 4) / 8
    f, f1 = dsq, (lambda z: 2 * s[1](z) * s[2](z))
    f2 = lambda z: 2 * s[2](z) ** 2 + 2 * s[1](z) * s[3](z)    # noqa: E731
    q2 = lambda z: 2 * s[1](z) ** 2 + 2 * s[0](z) * s[2](z)    # noqa: E731
    mf, mf2 = E(f, K2), E(f2, K2)
    H1 = (e1(sq, q2) + Th2 * e1(f, f2)
          + (-E(sq, K1) * mf + var_s * mf2 / 2 + EJ(f, sq, pn))
          + Th1 * (-E(dsq, K1) * mf + cov_ds * mf2 / 2 + E(lambda z: s[0](z) ** 2 * s[1](z) ** 2, K1) * mf2
                   + EJ(f, dsq, pn))
          + 2 * Th1 * gamma * EJ(f1, phi, po))
    Theta = 1.0 + E(sq, K2) + mf * Th2
    return {"Theta": Theta, "H1": H1, "B": B, "F": F}


def depth3_vertex(act, gamma, c_w=1.0, K1=1.0, truncate=False):
    r"""V at layer 3 (no skip there) of a depth-3 net with a skip at layer 2, one input, C_b = 0.

    V3 = C^2 [Var(sigma^2)_K2 + C^2 Var(sigma^2)_K1 <(sigma^2)''>_K2^2 / 4
              + C <(sigma^2)''>_K2 Cov_J(sigma^2(z2), sigma^2(z1))]:
    the last term is z2_m's xi W_mk sigma(z1_k), whose variance correlates with z2_k (c = gamma K1);
    ``truncate`` keeps its Mehler orders p = 1, 2 (the T and V channels of the closure).
    """
    a = get_activation(act)
    s = a.numpy(0)
    E = lambda f, K: _W @ f(np.sqrt(K) * _X)  # noqa: E731

    def D(f, K, p):
        return (_W @ (f(np.sqrt(K) * _X) * np.polynomial.hermite_e.hermeval(_X, [0] * p + [1]))) / K ** (p / 2)
    C = c_w
    sq = lambda z: s(z) ** 2                 # noqa: E731
    K2 = C * E(sq, K1) + gamma**2 * K1
    c = gamma * K1
    z1 = np.sqrt(K1) * _U
    z2 = c / np.sqrt(K1) * _U + np.sqrt(K2 - c * c / K1) * _V
    if truncate:
        cov = sum(c**p / math.factorial(p) * D(sq, K2, p) * D(sq, K1, p) for p in (1, 2))
    else:
        cov = float((_W2 * sq(z2) * sq(z1)).sum()) - E(sq, K2) * E(sq, K1)
    var = lambda K: E(lambda z: s(z) ** 4, K) - E(sq, K) ** 2   # noqa: E731
    d2 = D(sq, K2, 2)
    return C * C * (var(K2) + C * C * var(K1) * d2**2 / 4 + C * d2 * cov)
