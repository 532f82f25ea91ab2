"""Index kinds and per-layer symbols."""

from __future__ import annotations

import pytest
import sympy as sp

from effth.algebra.indices import (
    LayerSymbol,
    alpha,
    beta,
    c_b,
    c_w,
    ell,
    lambda_w,
    neuron,
    sample_indices,
    width,
)


def test_sample_and_neuron_indices():
    assert alpha(1) == sp.Symbol("alpha_1")
    assert sample_indices("beta", 3) == (beta(1), beta(2), beta(3))
    assert neuron("i", 1).is_integer


def test_layer_symbols_substitute_and_compare():
    n = width(ell - 1)
    assert n.subs(ell, 3) == width(2)
    assert n != width(ell)
    assert c_w(ell).is_positive
    assert (c_w(ell) * 2).subs(c_w(ell), 3) == 6
    assert n.func(*n.args) == n


def test_layer_symbol_rejects_bad_style():
    with pytest.raises(ValueError):
        LayerSymbol("n", ell, "middle")


def test_layer_symbols_str():
    assert str(c_b(ell + 1)) == "C_b[ell + 1]"
    assert str(lambda_w(ell)) == "\\lambda_W[ell]"
