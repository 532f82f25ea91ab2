"""Moments <-> cumulants via set partitions (PDLT (1.54), (1.56), (1.61))."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest
import sympy as sp

from effth.algebra.cumulants import (
    Cumulant,
    Moment,
    bell_number,
    cumulants_to_moments,
    moments_to_cumulants,
    set_partitions,
)
from effth.printing import latex


@pytest.mark.parametrize("m", range(0, 9))
def test_set_partitions_bell(m):
    parts = list(set_partitions(list(range(m))))
    assert len(parts) == bell_number(m) == [1, 1, 2, 5, 15, 52, 203, 877, 4140][m]
    canon = {frozenset(frozenset(b) for b in p) for p in parts}
    assert len(canon) == len(parts)
    for p in parts:
        assert sorted(x for b in p for x in b) == list(range(m))


def test_four_point_154():
    z = sp.symbols("z1:5")
    k4 = moments_to_cumulants(z, parity_even=True)
    M = Moment
    assert k4 == M(*z) - M(z[0], z[1]) * M(z[2], z[3]) - M(z[0], z[2]) * M(z[1], z[3]) - M(z[0], z[3]) * M(z[1], z[2])
    full = moments_to_cumulants(z)
    assert len(full.args) == 15


def test_six_point_161_and_kappa6():
    z = sp.symbols("z1:7")
    k6 = moments_to_cumulants(z, parity_even=True)
    coeffs = sorted(sp.Poly(k6, *k6.atoms(Moment)).coeffs())
    assert coeffs.count(-1) == 15 and coeffs.count(2) == 15 and coeffs.count(1) == 1
    m = sp.Symbol("z")
    single = moments_to_cumulants((m,) * 6, parity_even=True)
    m2, m4, m6 = Moment(m, m), Moment(*(m,) * 4), Moment(*(m,) * 6)
    assert single == m6 - 15 * m4 * m2 + 30 * m2**3
    assert moments_to_cumulants((m,) * 5, parity_even=True) == 0
    assert cumulants_to_moments((m,) * 3, parity_even=True) == 0


def _substitute(expr, values: dict):
    return expr.xreplace(values)


@pytest.mark.parametrize("order", range(1, 7))
def test_round_trip_symbolic(order):
    labels = list(range(1, order + 1))
    moments_in_cumulants = {}
    for sub in _subsets(labels):
        moments_in_cumulants[Moment(*sub)] = cumulants_to_moments(sub)
    k = moments_to_cumulants(labels)
    assert sp.expand(_substitute(k, moments_in_cumulants)) == Cumulant(*labels)


def _subsets(labels):
    for r in range(1, len(labels) + 1):
        yield from itertools.combinations(labels, r)


@pytest.mark.parametrize("order, parity", [(7, False), (8, True)])
def test_round_trip_numeric(order, parity):
    rng = np.random.default_rng(order)
    labels = list(range(1, order + 1))
    kvals = {Cumulant(*s): sp.Rational(int(rng.integers(-9, 10)), 7) for s in _subsets(labels)}
    mvals = {Moment(*s): cumulants_to_moments(s, parity).xreplace(kvals) for s in _subsets(labels)}
    back = moments_to_cumulants(labels, parity).xreplace(mvals)
    assert back == (kvals[Cumulant(*labels)] if not (parity and order % 2) else 0)


def test_numeric_discrete_distribution():
    """Exact moments of a discrete distribution vs. derivatives of its cumulant generating function."""
    rng = np.random.default_rng(3)
    points = rng.integers(-3, 4, size=(5, 3))
    probs = [Fraction(int(w), 15) for w in (1, 2, 3, 4, 5)]
    t = sp.symbols("t0:3")
    cgf = sp.log(sum(sp.Rational(p.numerator, p.denominator) * sp.exp(sum(int(x) * ti for x, ti in zip(pt, t)))
                     for p, pt in zip(probs, points)))

    def moment(idx):
        return sum(sp.Rational(p.numerator, p.denominator) * sp.Mul(*[int(pt[i]) for i in idx])
                   for p, pt in zip(probs, points))

    for idx in [(0, 1), (0, 1, 2), (0, 0, 1, 2), (0, 1, 1, 2, 2)]:
        expr = moments_to_cumulants(idx)
        value = expr.xreplace({mo: moment(mo.labels) for mo in expr.atoms(Moment)})
        deriv = sp.diff(cgf, *[t[i] for i in idx]).subs({ti: 0 for ti in t})
        assert sp.nsimplify(sp.simplify(deriv - value)) == 0


def test_kappa6_single_variable_discrete():
    xs, ps = [-2, -1, 0, 1, 3], [sp.Rational(k, 15) for k in (1, 2, 3, 4, 5)]
    t = sp.Symbol("t")
    cgf = sp.log(sum(p * sp.exp(x * t) for x, p in zip(xs, ps)))
    kappa6 = sp.diff(cgf, t, 6).subs(t, 0)
    z = sp.Symbol("z")
    expr = moments_to_cumulants((z,) * 6)
    value = expr.xreplace({mo: sum(p * sp.Integer(x) ** len(mo.labels) for x, p in zip(xs, ps))
                           for mo in expr.atoms(Moment)})
    assert sp.simplify(kappa6 - value) == 0


def test_labels_sorted_and_latex():
    assert Moment(3, 1, 2).labels == (1, 2, 3)
    assert Cumulant(2, 1) == Cumulant(1, 2)
    assert latex(Moment(2, 1)) == r"\mathbb{E}\left[z_{1} z_{2}\right]"
    assert latex(Cumulant(1, 2, 3, 4)) == r"\mathbb{E}\left[z_{1} z_{2} z_{3} z_{4}\right]\big|_{c}"
    mu = sp.Symbol("mu_1")
    assert latex(Moment(mu)) == r"\mathbb{E}\left[z_{\mu_{1}}\right]"
    with pytest.raises(ValueError):
        Moment()
    assert str(Moment(1, 2)) == "Moment(1, 2)"
