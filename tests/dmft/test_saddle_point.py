"""The scalar 1/N saddle-point expansion of B&P rules app. H.1 (table C5 of our notes): derived
by Laplace's method, checked against exact Gamma moments and against quadrature."""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp
from scipy.integrate import quad

from effth.errors import DomainError
from effth.dmft.solvers.saddle_point import saddle_point_coefficients, saddle_point_nlo

N = sp.Symbol("N", positive=True)


def test_coefficient_is_the_published_form():
    S2, S3, O1, O2 = sp.symbols("S2 S3 O1 O2")
    assert sp.simplify(saddle_point_coefficients() - (O2 / (2 * S2) - O1 * S3 / (2 * S2 ** 2))) == 0


def test_gamma_moments():
    """S = q - log q: the Gibbs measure is Gamma(N + 1, rate N), <q> = (N+1)/N,
    <q^2> = (N+1)(N+2)/N^2; NLO 1 + 1/N and 1 + 3/N leave O(1/N^2) (and a coefficient x 0.9
    leaves O(1/N)). For <q> the NLO result is exact."""
    q = sp.Symbol("q", positive=True)
    S = q - sp.log(q)
    for O, exact, n2 in ((q, (N + 1) / N, 0), (q ** 2, (N + 1) * (N + 2) / N ** 2, 2)):
        nlo = saddle_point_nlo(S, O, q)
        assert sp.limit(N ** 2 * (exact - nlo), N, sp.oo) == n2      # the O(1/N^2) remainder
        wrong = 1 + sp.Rational(9, 10) * (nlo - 1)
        assert sp.limit(N * (exact - wrong), N, sp.oo) != 0


def test_against_quadrature_with_a_cubic_and_quartic_action():
    """S = q^2/2 + 0.1 q^3 + q^4/4, O = sin q + q^2: the NLO error falls like 1/N^2 (slope < -1.8),
    the effect like 1/N; without the O' S''' term the error is O(1/N)."""
    q = sp.Symbol("q", real=True)
    S = q ** 2 / 2 + sp.Rational(1, 10) * q ** 3 + q ** 4 / 4
    O = sp.sin(q) + q ** 2
    c = sp.simplify((saddle_point_nlo(S, O, q, q_star=0) - O.subs(q, 0)) * N)
    assert float(c) == pytest.approx((2 - 1 * 0.6) / 2)
    fS, fO = sp.lambdify(q, S), sp.lambdify(q, O)
    ns = np.array([20, 40, 80, 160])
    err, effect, no_cubic = [], [], []
    for n in ns:
        w = lambda x: np.exp(-n * fS(x))  # noqa: E731
        exact = quad(lambda x: w(x) * fO(x), -3, 3, epsabs=1e-14, epsrel=1e-13)[0] / \
            quad(w, -3, 3, epsabs=1e-14, epsrel=1e-13)[0]
        err.append(abs(exact - float(c) / n))
        effect.append(abs(exact))
        no_cubic.append(abs(exact - 1.0 / n))                 # O''/(2 S'') alone
    slope = np.polyfit(np.log(ns), np.log(err), 1)[0]
    assert slope < -1.8 and np.polyfit(np.log(ns), np.log(effect), 1)[0] > -1.2
    assert np.polyfit(np.log(ns), np.log(no_cubic), 1)[0] > -1.2


def test_degenerate_or_missing_minimum():
    q = sp.Symbol("q", real=True)
    with pytest.raises(DomainError):
        saddle_point_nlo(q ** 4, q, q)            # S''(0) = 0
    with pytest.raises(DomainError):
        saddle_point_nlo(q ** 3, q, q)
