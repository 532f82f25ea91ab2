"""Activation registry: names, parameters, identity semantics, errors."""

from __future__ import annotations

import dataclasses

import math

import numpy as np
import pytest
import sympy as sp

from effth.activations import Activation, Z, available_activations, get_activation, register_activation
from effth.errors import DomainError, UnknownActivationError

REQUIRED = ["linear", "identity", "relu", "leaky_relu", "abs", "scale_invariant", "step", "perceptron",
            "sign", "tanh", "sin", "cos", "erf", "sigmoid", "softplus", "swish", "silu", "gelu",
            "monomial", "polynomial"]


def test_available_names():
    names = available_activations()
    for n in REQUIRED:
        assert n in names


def test_unknown_name_lists_available():
    with pytest.raises(UnknownActivationError, match="tanh") as ei:
        get_activation("tanhh")
    assert "relu" in str(ei.value)
    with pytest.raises(UnknownActivationError):
        get_activation(3.0)


@pytest.mark.parametrize("name,params", [
    ("leaky_relu", {"slope": "x"}), ("leaky_relu", {"slope": float("nan")}), ("monomial", {"degree": -1}),
    ("monomial", {"degree": 1.5}), ("polynomial", {"coeffs": ()}), ("polynomial", {}),
    ("scale_invariant", {"a_plus": 1.0}), ("tanh", {"foo": 1}),
])
def test_bad_parameters(name, params):
    with pytest.raises(DomainError):
        get_activation(name, **params)


def test_aliases_and_identity():
    assert get_activation("identity") == get_activation("linear")
    assert get_activation("perceptron") == get_activation("step")
    assert get_activation("silu") == get_activation("swish")
    a = get_activation("relu")
    assert get_activation(a) is a
    assert hash(a) == hash(get_activation("RELU"))
    assert get_activation("leaky_relu", slope=0.1) != get_activation("leaky_relu", slope=0.2)
    assert get_activation("leaky_relu", slope=0.1) == get_activation("leaky_relu", slope=0.1)
    assert len({get_activation("tanh"), get_activation("tanh"), get_activation("sin")}) == 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.name = "x"  # frozen


def test_params_and_families():
    a = get_activation("leaky_relu", slope=0.1)
    assert a.family == "piecewise_linear" and a.param("a_plus") == 1 and a.param("a_minus") == 0.1
    assert get_activation("relu").param("a_minus") == 0
    assert get_activation("abs").param("a_minus") == -1
    s = get_activation("sign")
    assert s.family == "step" and (s.param("low"), s.param("high")) == (-1, 1)
    assert get_activation("sin").param("kind") == "sin"
    assert get_activation("linear").param("coeffs") == (0, 1)
    assert get_activation("monomial", degree=3).expr == Z ** 3
    p = get_activation("polynomial", coeffs=(1, 0, 2))
    assert p.is_polynomial and p.polynomial_degree == 2 and p.is_smooth
    with pytest.raises(KeyError):
        p.param("nope")
    assert dict(get_activation("leaky_relu", slope=0.1).params) == {"a_plus": 1, "a_minus": 0.1}


def test_strips_and_kinks():
    assert get_activation("tanh").strip == pytest.approx(math.pi / 2)
    for n in ("sigmoid", "softplus", "swish"):
        assert get_activation(n).strip == pytest.approx(math.pi)
    for n in ("erf", "gelu", "sin", "cos", "linear"):
        assert math.isinf(get_activation(n).strip)
    for n in ("relu", "abs", "step", "sign", "leaky_relu"):
        a = get_activation(n)
        assert a.strip == 0.0 and a.kinks == (0.0,) and not a.is_smooth


def test_step_convention_sigma0_is_one():
    st = get_activation("step")
    assert float(st.numpy(0)(0.0)) == 1.0
    assert st.expr.subs(Z, 0) == 1


def test_register_custom():
    def factory(**kw):
        base = get_activation("tanh")
        return Activation(name="mytanh", family="tanh", params=(), expr=base.expr, kinks=(),
                          strip=base.strip, _numpy_impl=base._numpy_impl, _jump_impl=base._jump_impl)
    register_activation("mytanh_test", factory, overwrite=True)
    assert get_activation("mytanh_test").name == "mytanh"
    with pytest.raises(DomainError):
        register_activation("tanh", factory)


def test_user_expression():
    x = sp.Symbol("x")
    u = get_activation(sp.Max(x, 0) + x / 10)
    assert u.family == "user" and u.kinks == (0.0,)
    assert u.singular_part(2) == ((0.0, 1, 0),)
    np.testing.assert_allclose(u.numpy(1)(np.array([-1.0, 1.0])), [0.1, 1.1])
    np.testing.assert_allclose(u.numpy(0)(np.array([-2.0, 3.0])), [-0.2, 3.3])
    assert u == get_activation(sp.Max(x, 0) + x / 10)
    v = get_activation(sp.tanh(x) + x ** 2)
    assert v.is_smooth and v.taylor_coefficients(3) == (0, 1, 2, -2)
    w = get_activation(sp.Piecewise((x, x > 1), (1, True)))
    assert w.kinks == (1.0,)
    assert w.jumps(2) == ((1.0, (0, 1, 0)),)
    clip = get_activation(sp.Min(sp.Max(x, -1), 1))
    assert clip.kinks == (-1.0, 1.0)
    assert clip.singular_part(2) == ((-1.0, 1, 0), (1.0, -1, 0))
    with pytest.raises(DomainError):
        get_activation(sp.Symbol("a") * sp.Symbol("b"))
    assert get_activation(Z ** 3 + 1).is_polynomial


def test_scale_invariant_with_equal_slopes_is_the_linear_activation():
    """a_plus = a_minus = a is a z: no kink, and the flows treat it as the linear activation
    with C_W scaled by a^2 (it used to raise a SymPy PolynomialError)."""
    import numpy as np
    import effth as et
    a = et.get_activation("scale_invariant", a_plus=1.5, a_minus=1.5)
    assert not a.kinks
    K1 = [[1.0, 0.2], [0.2, 0.7]]
    f = et.flow(K1=K1, depth=3, activation=a)
    g = et.flow(K1=K1, depth=3, activation="linear", c_w=2.25)
    np.testing.assert_allclose(f.K, g.K, rtol=1e-12)
    np.testing.assert_allclose(f.V, g.V, rtol=1e-10, atol=1e-14)
