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


def _skip_layer_oracle(sig, g, cw, n):
    """S - S_gauss of z = g a + sqrt(cw (R + s(a)) / n) eps, a ~ N(0, G1), s = sig^2, with R the
    other n - 1 neurons' sum taken Gaussian with its exact mean and variance (its skewness enters
    at O(n^-3)): Gauss-Hermite in R, Gauss-Legendre in a, trapezoid in z, to ~1e-15."""
    from scipy import integrate, special

    G1 = cw * 1.34 / 3                                    # x = (1, -0.5, 0.3), C_b = 0
    s = lambda z: sig(z) ** 2  # noqa: E731

    def gauss(f):
        return sum(integrate.quad(lambda e: f(np.sqrt(G1) * e) * np.exp(-0.5 * e * e) / np.sqrt(2 * np.pi),
                                  lo, hi, epsabs=1e-16, epsrel=1e-14, limit=400)[0]
                   for lo, hi in ((-14, 0), (0, 14)))

    ms = gauss(s)
    vs = gauss(lambda z: s(z) ** 2) - ms ** 2
    u, w = np.polynomial.legendre.leggauss(80)
    e = np.concatenate([-7 * (u[::-1] + 1), 7 * (u + 1)])
    we = np.concatenate([w[::-1], w]) * np.exp(-0.5 * e * e)
    a = np.sqrt(G1) * e
    xr, wr = special.roots_hermitenorm(30)
    R = (n - 1) * ms + np.sqrt((n - 1) * vs) * xr
    v = cw * (R[:, None] + s(a)[None, :]) / n
    W = (wr / wr.sum())[:, None] * (we / we.sum())[None, :]
    mu = g * a
    edge = g * 7 * np.sqrt(G1) + 10 * np.sqrt(v.max())
    z = np.linspace(-edge, edge, int(6 * edge / np.sqrt(v.min())) + 1)
    P = sum((W[i][:, None] * np.exp(-0.5 * (z[None, :] - mu[:, None]) ** 2 / v[i][:, None])
             / np.sqrt(2 * np.pi * v[i][:, None])).sum(0) for i in range(R.size))
    h = z[1] - z[0]
    assert abs(h * P.sum() - 1) < 1e-13
    var = float((W * (mu[None, :] ** 2 + v)).sum())
    return -h * float(np.sum(P * np.log(P))) - 0.5 * np.log(2 * np.pi * np.e * var)


@pytest.mark.parametrize("act,g,cw", [("relu", 0.9, 0.38), ("gelu", 0.5, 0.75)])
def test_skip_layer_entropy_is_the_1_over_n2_coefficient_of_the_exact_entropy(act, g, cw):
    """The deterministic entropy of one layer-2 neuron at n = 1e3, 1e4, Richardson-extrapolated
    (c0 + c1/n), equals skip_layer_entropy's total to 2e-4 relative; (A.52) at the residual V,
    (A.52) + the third cumulant, and 0.9 x total are off by > 1 %."""
    import effth as et
    from scipy import special
    from effth.pdlt.information import skip_layer_entropy

    sig = {"relu": lambda z: np.maximum(z, 0.0),
           "gelu": lambda z: 0.5 * z * (1 + special.erf(z / np.sqrt(2)))}[act]
    y = {n: n * n * _skip_layer_oracle(sig, g, cw, n) for n in (1000, 10000)}
    c0 = (10 * y[10000] - y[1000]) / 9
    th = skip_layer_entropy(et.MLP(act, depth=3, widths=8, c_w=cw, gamma=g), np.array([[1.0, -0.5, 0.3]]))
    assert c0 == pytest.approx(th.total, rel=2e-4), (c0, th.total)
    flow = et.pdlt.mlp_flow(et.MLP(act, depth=3, widths=8, c_w=cw, gamma=g), np.array([[1.0, -0.5, 0.3]]))
    assert th.V2 == pytest.approx(float(flow["V"][1].ravel()[0]), rel=1e-10)   # kappa_4 = 3V/n
    assert th.T2 == pytest.approx(float(flow["T"][1].ravel()[0]), rel=1e-10)   # kappa_3 = 3T/n
    assert th.G == pytest.approx(float(flow["K"][1].ravel()[0]), rel=1e-12)
    for wrong in (th.V, th.V + th.T, 0.9 * th.total):
        assert abs(c0 - wrong) > 0.01 * abs(c0)
