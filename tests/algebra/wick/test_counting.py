"""Neuron-index counting: cycle histograms, c_{2m}(n), deep-linear values (PDLT (3.18)–(3.47))."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import sympy as sp

from effth.algebra.wick import (
    c2m,
    c2m_gamma,
    collapse_neurons,
    cycle_count,
    cycle_histogram,
    cycle_polynomial,
    deep_linear_layer_factor,
    enumerate_pairings,
    trace_matching,
)

n = sp.Symbol("n", positive=True)

SPEC_HISTOGRAMS = {2: (1, 2), 3: (1, 6, 8), 4: (1, 12, 44, 48), 5: (1, 20, 140, 400, 384)}


@pytest.mark.parametrize("m", sorted(SPEC_HISTOGRAMS))
def test_histograms_spec_table(m):
    hist = cycle_histogram(m)
    assert tuple(hist) == tuple(range(m, 0, -1))
    assert tuple(hist.values()) == SPEC_HISTOGRAMS[m]


@pytest.mark.parametrize("m", range(1, 7))
def test_c2m_equals_cycle_polynomial_and_gamma(m):
    assert sp.expand(cycle_polynomial(m, n) - c2m(m, n)) == 0
    assert sp.simplify(c2m_gamma(m, n) - c2m(m, n)) == 0
    for nv in (1, 3, 5, 7):  # odd n: Gamma form (PDLT (3.46))
        assert c2m_gamma(m, nv) == c2m(m, nv)


def _brute_force_c2m(m: int, nv: int) -> sp.Rational:
    """(1/n^m) sum_{j_1..j_m} sum_pi prod delta, with explicit neuron indices (no cycle counting)."""
    js = np.array(list(itertools.product(range(nv), repeat=m)), dtype=int).reshape(-1, m)
    slot_index = js[:, [k // 2 for k in range(2 * m)]]  # slot s carries j_{s//2}
    total = 0
    for p in enumerate_pairings(range(2 * m)):
        ok = np.ones(len(js), dtype=bool)
        for a, b in p:
            ok &= slot_index[:, a] == slot_index[:, b]
        total += int(ok.sum())
    return sp.Rational(total, nv**m)


@pytest.mark.parametrize("m", range(1, 7))
@pytest.mark.parametrize("nv", [1, 2, 3])
def test_c2m_by_explicit_delta_sums(m, nv):
    assert _brute_force_c2m(m, nv) == c2m(m, nv)


def test_c2m_first_terms():
    assert c2m(1, n) == 1
    assert sp.expand(c2m(2, n)) == 1 + 2 / n  # (3.23)
    assert sp.expand(c2m(3, n)) == 1 + 6 / n + 8 / n**2  # (3.42)
    assert sp.series(c2m(5, n).subs(n, 1 / sp.Symbol("x")), sp.Symbol("x"), 0, 2).removeO() == 1 + 20 * sp.Symbol("x")


def test_deep_linear_spec_3_6():
    widths = (4, 8, 16)
    g4 = deep_linear_layer_factor(2, widths)
    g6 = deep_linear_layer_factor(3, widths)
    g8 = deep_linear_layer_factor(4, widths)
    assert g4 == sp.Rational(2109375, 10**6)
    assert g6 == sp.Rational(791015625, 10**8)
    assert float(g8) == pytest.approx(47.58453369, abs=5e-9)
    assert (float(3 * g4), float(15 * g6), float(105 * g8)) == pytest.approx((6.328125, 118.6523438, 4996.376038), abs=5e-7)
    assert 3 * (g4 - 1) == sp.Rational(3328125, 10**6)
    assert g6 - 3 * g4 + 2 == sp.Rational(358203125, 10**8)
    # equal n = 10, layer 5: G4 = 1.2^4, G6 = 1.68^4
    assert deep_linear_layer_factor(2, (10,) * 4) == sp.Rational(12, 10) ** 4
    assert deep_linear_layer_factor(3, (10,) * 4) == sp.Rational(168, 100) ** 4


def test_cycle_count_and_collapse():
    assert cycle_count([(0, 1), (2, 3)], trace_matching(2)) == 2
    assert cycle_count([(0, 3), (1, 2)], trace_matching(2)) == 1
    i1, i2, i3, i4 = sp.symbols("i1:5", integer=True)
    # E[z_i1 z_i2 (sum_j z_j z_j)]-type term: external i1 -> j -> i2 and a closed loop
    f = collapse_neurons([("a", "x"), ("b", "y"), ("u", "w")], [("x", "y"), ("u", "w")], {"a": i1, "b": i2}, n)
    assert f == n * sp.KroneckerDelta(i1, i2)
    # free indices contracted directly
    assert collapse_neurons([("a", "b"), ("c", "d")], [], {"a": i1, "b": i2, "c": i3, "d": i4}, n) == \
        sp.KroneckerDelta(i1, i2) * sp.KroneckerDelta(i3, i4)
    # pure traces: sum over pairings of n^cycles / n^m equals c_{2m}
    tot = sum(collapse_neurons(p, trace_matching(3), {}, n) for p in enumerate_pairings(range(6)))
    assert sp.expand(tot / n**3 - c2m(3, n)) == 0
