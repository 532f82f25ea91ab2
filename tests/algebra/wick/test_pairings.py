"""Wick pairings: counts (2m-1)!!, the explicit 3- and 15-term expansions, numeric Wick (PDLT (1.45))."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from effth.algebra.wick import count_pairings, double_factorial, enumerate_pairings


@pytest.mark.parametrize("two_m, expected", [(0, 1), (2, 1), (4, 3), (6, 15), (8, 105), (10, 945), (12, 10395)])
def test_counts(two_m, expected):
    assert count_pairings(two_m) == expected
    if two_m <= 10:
        pairings = list(enumerate_pairings(range(two_m)))
        assert len(pairings) == expected
        assert len({frozenset(map(frozenset, p)) for p in pairings}) == expected  # all distinct
        for p in pairings:  # perfect matchings
            assert sorted(x for pair in p for x in pair) == list(range(two_m))


def test_odd_and_double_factorial():
    assert list(enumerate_pairings("abc")) == []
    assert count_pairings(5) == 0
    assert [double_factorial(k) for k in (-1, 0, 1, 5, 6)] == [1, 1, 1, 15, 48]
    with pytest.raises(ValueError):
        double_factorial(-3)
    with pytest.raises(ValueError):
        count_pairings(-2)


def test_four_and_six_point_terms():
    # PDLT (1.44): K12 K34 + K13 K24 + K14 K23
    assert list(enumerate_pairings([1, 2, 3, 4])) == [((1, 2), (3, 4)), ((1, 3), (2, 4)), ((1, 4), (2, 3))]
    six = list(enumerate_pairings([1, 2, 3, 4, 5, 6]))
    assert len(six) == 15
    assert six[0] == ((1, 2), (3, 4), (5, 6)) and six[-1] == ((1, 6), (2, 5), (3, 4))


def _wick(K, idx):
    return sum(np.prod([K[idx[a], idx[b]] for a, b in p]) for p in enumerate_pairings(range(len(idx))))


def test_numeric_wick_spec_values():
    K = np.array([[2.0, 1.0, 0.0], [1.0, 3.0, 1.0], [0.0, 1.0, 1.0]])
    assert _wick(K, [0, 0, 1, 1]) == 8
    assert _wick(K, [0, 0, 1, 2]) == 2
    assert _wick(K, [0, 1, 2, 2]) == 1
    assert _wick(np.array([[2.0]]), [0] * 6) == 120  # E[z^6] = 15 K^3


def test_four_point_wick_matches_1_44_for_all_index_patterns():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3, 5))
    K = x @ x.T
    for idx in itertools.product(range(3), repeat=4):
        direct = K[idx[0], idx[1]] * K[idx[2], idx[3]] + K[idx[0], idx[2]] * K[idx[1], idx[3]] \
            + K[idx[0], idx[3]] * K[idx[1], idx[2]]
        assert _wick(K, list(idx)) == pytest.approx(direct)
