"""Derivatives (regular parts), jumps, singular parts, Taylor coefficients."""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp

from effth.activations import Z, get_activation
from effth.errors import DomainError

SMOOTH = ["tanh", "sigmoid", "softplus", "swish", "erf", "gelu", "sin", "cos", "linear"]
KINKED = ["relu", "leaky_relu", "abs", "step", "sign"]


@pytest.mark.parametrize("name", SMOOTH + KINKED)
def test_numpy_matches_sympy(name):
    act = get_activation(name)
    z = np.array([-3.7, -1.3, -0.4, 0.3, 0.9, 2.2, 4.1])
    for order in range(6):
        f = sp.lambdify(Z, act.derivative_expr(order), modules=["numpy", "scipy"])
        ref = np.broadcast_to(np.asarray(f(z), dtype=float), z.shape)
        np.testing.assert_allclose(act.numpy(order)(z), ref, rtol=1e-11, atol=1e-13,
                                   err_msg=f"{name} order {order}")


def test_polynomial_and_monomial_numpy():
    p = get_activation("polynomial", coeffs=(1, -2, 0, 3))
    z = np.linspace(-2, 2, 9)
    np.testing.assert_allclose(p.numpy(0)(z), 1 - 2 * z + 3 * z ** 3)
    np.testing.assert_allclose(p.numpy(2)(z), 18 * z)
    np.testing.assert_allclose(p.numpy(5)(z), 0 * z)
    m = get_activation("monomial", degree=4)
    np.testing.assert_allclose(m.numpy(1)(z), 4 * z ** 3)


@pytest.mark.parametrize("name", SMOOTH + KINKED)
def test_no_overflow_large_z(name):
    act = get_activation(name)
    z = np.array([-1e300, -1e5, -745.0, -50.0, 50.0, 745.0, 1e5, 1e300])
    for order in range(5):
        v = act.numpy(order)(z)          # RuntimeWarning is an error in this suite
        assert v.shape == z.shape and v.dtype == np.float64 and np.all(np.isfinite(v))


def test_asymptotics():
    z = np.array([-800.0, 800.0])
    np.testing.assert_allclose(get_activation("softplus").numpy(0)(z), [0.0, 800.0])
    np.testing.assert_allclose(get_activation("sigmoid").numpy(0)(z), [0.0, 1.0])
    np.testing.assert_allclose(get_activation("swish").numpy(0)(z), [0.0, 800.0])
    np.testing.assert_allclose(get_activation("gelu").numpy(1)(z), [0.0, 1.0])


def test_singular_parts():
    relu = get_activation("relu")
    assert relu.singular_part(0) == () and relu.singular_part(1) == ()
    assert relu.singular_part(2) == ((0.0, 1, 0),)
    assert relu.singular_part(3) == ((0.0, 1, 1),)
    assert get_activation("step").singular_part(1) == ((0.0, 1, 0),)
    assert get_activation("step").singular_part(2) == ((0.0, 1, 1),)
    assert get_activation("abs").singular_part(2) == ((0.0, 2, 0),)
    assert get_activation("sign").singular_part(1) == ((0.0, 2, 0),)
    lk = get_activation("leaky_relu", slope=0.25)
    ((c, coeff, kd),) = lk.singular_part(2)
    assert c == 0.0 and kd == 0 and float(coeff) == pytest.approx(0.75)
    assert get_activation("tanh").singular_part(3) == ()
    assert relu.jumps(2) == ((0.0, (0, 1, 0)),)


def test_taylor_coefficients():
    assert get_activation("tanh").taylor_coefficients(5) == (0, 1, 0, -2, 0, 16)
    assert get_activation("sigmoid").taylor_coefficients(3) == (sp.Rational(1, 2), sp.Rational(1, 4), 0,
                                                                  -sp.Rational(1, 8))
    sp_c = get_activation("softplus").taylor_coefficients(4)
    assert sp_c[0] == sp.log(2) and sp_c[1:] == (sp.Rational(1, 2), sp.Rational(1, 4), 0, -sp.Rational(1, 8))
    g = get_activation("gelu").taylor_coefficients(3)
    assert sp.simplify(g[2] - sp.sqrt(2 / sp.pi)) == 0 and g[1] == sp.Rational(1, 2)
    assert get_activation("erf").taylor_coefficients(1)[1] == 2 / sp.sqrt(sp.pi)
    assert get_activation("sin").taylor_coefficients(3) == (0, 1, 0, -1)
    assert get_activation("polynomial", coeffs=(1, 2, 3)).taylor_coefficients(3) == (1, 2, 6, 0)
    for n in KINKED:
        with pytest.raises(DomainError):
            get_activation(n).taylor_coefficients(2)


def test_derivative_expr_is_classical():
    e = get_activation("relu").derivative_expr(2)
    assert not e.has(sp.DiracDelta)
    assert sp.simplify(get_activation("tanh").derivative_expr(1) - (1 - sp.tanh(Z) ** 2)) == 0
    with pytest.raises(DomainError):
        get_activation("tanh").numpy(-1)
    assert math.isclose(float(get_activation("sigmoid").numpy(1)(0.0)), 0.25)
