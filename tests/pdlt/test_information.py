"""App. A: the NLO entropy, mutual information and tripartite information derived by the
variational method, against the printed (A.52), (A.53), (A.66), (A.67), (A.75), and against the
exact mutual information of a two-neuron quartic-action distribution (numerical quadrature).
"""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp
from scipy.special import logsumexp

from effth.pdlt.information import (EPSILON_V, entropy_expansion, mutual_information_expansion,
                                    tripartite_information_expansion)
from effth.pdlt.residual import mutual_information

e = EPSILON_V
m, m1, m2, m3 = sp.symbols("m m_1 m_2 m_3", positive=True)


def test_entropy_matches_A52_and_A66():
    S2 = entropy_expansion(order=2)
    assert sp.expand(S2 - (-(m**2 + 2 * m) / 16 * e**2)) == 0            # (A.52); no eps^1 term
    S3 = entropy_expansion(order=3)
    assert sp.expand(S3 - (-(m**2 + 2 * m) / 16 * e**2 + (m**3 + 10 * m**2 + 16 * m) / 48 * e**3)) == 0


def test_mutual_and_tripartite_information_match_A67_A75():
    I = mutual_information_expansion(order=3)
    assert sp.expand(I - (m1 * m2 / 8 * e**2 - m1 * m2 * (20 + 3 * m1 + 3 * m2) / 48 * e**3)) == 0
    assert sp.expand(tripartite_information_expansion(order=3) - m1 * m2 * m3 / 8 * e**3) == 0
    # the closed form behind optimal_aspect_ratio, (A.71), is this expansion
    val = mutual_information_expansion(2, 3, order=3).subs(e, 0.05)
    assert float(val) == pytest.approx(mutual_information(0.05, m1=2, m2=3), rel=1e-13)


_X, _W = np.polynomial.hermite_e.hermegauss(120)


def _exact_two_neurons(lam):
    """p(z1, z2) ∝ exp(-rho/2 - lam rho^2): eps = E[z1^2 z2^2]/G^2 - 1 and I = 2 S_1 - S_12 by quadrature."""
    X1, X2 = np.meshgrid(_X, _X, indexing="ij")
    W = np.outer(_W, _W)
    rho = X1**2 + X2**2
    h = np.exp(-lam * rho**2)
    Z = (W * h).sum()
    E = lambda f: (W * h * f).sum() / Z
    eps = E(X1**2 * X2**2) / E(X1**2) ** 2 - 1
    S12 = np.log(Z) + E(rho) / 2 + lam * E(rho**2)
    logh1 = logsumexp(np.log(_W)[None, :] - lam * rho**2, axis=1)
    S1 = -(_W * np.exp(logh1) * (logh1 - _X**2 / 2 - np.log(Z))).sum() / Z
    return eps, 2 * S1 - S12


def test_nlo_mutual_information_against_an_exact_distribution():
    """The residual of (A.67) at m1 = m2 = 1 shrinks like eps^4 (fitted slope); the LO (A.53) and
    a 0.9 x eps^3 coefficient leave an eps^3 residual."""
    I_nlo = sp.lambdify(e, mutual_information_expansion(1, 1, order=3))
    rows = [_exact_two_neurons(lam) for lam in (0.0005, 0.001, 0.002)]
    eps = np.abs([r[0] for r in rows])
    res = lambda f: np.abs([I - f(ep) for ep, I in rows])
    slope = lambda r: np.polyfit(np.log(eps), np.log(r), 1)[0]
    assert slope(res(I_nlo)) == pytest.approx(4.0, abs=0.3)
    assert slope(res(lambda x: x**2 / 8)) == pytest.approx(3.0, abs=0.3)
    assert slope(res(lambda x: x**2 / 8 - 0.9 * 26 / 48 * x**3)) == pytest.approx(3.0, abs=0.3)


def test_bad_order():
    from effth.errors import DomainError
    with pytest.raises(DomainError, match="order"):
        entropy_expansion(order=0)
