"""Deep nonlinear gamma0-series to any order (formal-source expansion, ``_series_deep_jets``).

Derived corner: the engine against three independent computations -- the closed-form lazy atoms
of the O(gamma0^2) module, the exact deep linear series (phi = id, to gamma0^6) and the
field-level two-layer series (hidden_layers 1, to gamma0^6).  The measured corner (the Monte-Carlo DMFT
solver) is in ``test_gamma_series_deep_mc.py``.
"""

import itertools
import math

import numpy as np
import pytest

from effth.errors import DomainError
from effth.numerics._rules import smolyak_gauss_hermite
from effth.dmft.series.deep_jets import _formal_root, deep_nonlinear_series_arrays
from effth.dmft.series.deep_linear import deep_linear_series_arrays
from effth.dmft.series.deep_nonlinear import deep_nonlinear_order2_arrays
from effth.dmft.series.two_layer import two_layer_series_arrays

KX1 = np.array([[1.2]])
Y1 = np.array([1.0])
KX2 = np.array([[1.0, 0.4], [0.4, 1.0]])
Y2 = np.array([1.0, -0.5])


def _gauss_moment(alpha):
    return math.prod(0 if a % 2 else math.prod(range(a - 1, 0, -2)) for a in alpha)


@pytest.mark.parametrize("dim,degree", [(1, 3), (3, 5), (6, 4), (4, 7)])
def test_smolyak_rule_is_exact_to_its_degree(dim, degree):
    x, w = smolyak_gauss_hermite(dim, degree)
    assert abs(w.sum() - 1) < 1e-13
    for alpha in itertools.product(range(degree + 1), repeat=dim):
        if sum(alpha) > degree:
            continue
        val = np.sum(w * np.prod(x ** np.array(alpha), axis=1))
        assert abs(val - _gauss_moment(alpha)) < 1e-10, alpha
    # one degree more is not integrated exactly (the rule is not wastefully large)
    x, w = smolyak_gauss_hermite(2, 3)
    assert abs(np.sum(w * x[:, 0] ** 4) - 3) > 0.5


def test_formal_root_of_an_indefinite_kernel():
    rng = np.random.default_rng(0)
    v = rng.standard_normal((6, 3))
    cov = v @ np.diag([2.0, -1.0, 0.5]) @ v.T
    b = _formal_root(cov, 1e-12)
    assert b.shape == (6, 3) and np.iscomplexobj(b)
    assert np.max(np.abs(b @ b.T - cov)) < 1e-12
    assert not np.iscomplexobj(_formal_root(v @ v.T, 1e-12))


@pytest.mark.parametrize("kx,y,L", [(KX1, Y1, 3), (KX2, Y2, 2)])
def test_order_two_equals_the_closed_form_lazy_atoms(kx, y, L):
    """Responses by forward tangents and kernels by quadrature over the sources agree with the
    closed-form lazy responses and Price terms of the O(gamma0^2) module."""
    a = deep_nonlinear_order2_arrays(kx, y, hidden_layers=L, activation="tanh", eta=0.1, steps=8,
                                     nodes=20)
    b = deep_nonlinear_series_arrays(kx, y, hidden_layers=L, activation="tanh", eta=0.1, steps=8,
                                     order=2, nodes=20)
    for name in ("phi", "g", "ntk", "f", "delta"):
        x, z = getattr(a, name), getattr(b, name)
        assert np.max(np.abs(x - z)) < 1e-13 * max(1.0, np.max(np.abs(x))), name
    assert np.max(np.abs(a.A - b.A[0])) < 1e-13
    assert np.max(np.abs(a.B - b.B[0])) < 1e-13


@pytest.mark.parametrize("kx,y,L,order,T", [(KX1, Y1, 2, 6, 8), (KX1, Y1, 3, 4, 10),
                                             (KX2, Y2, 2, 4, 6)])
def test_identity_activation_gives_the_exact_deep_linear_series(kx, y, L, order, T):
    """phi = id through the nonlinear machinery (formal sources, sparse rules, tangents, Price
    tops) against the deep linear series marched in closed form."""
    a = deep_linear_series_arrays(kx, y, hidden_layers=L, eta=0.1, steps=T, order=order // 2,
                                  closure="ntk")
    b = deep_nonlinear_series_arrays(kx, y, hidden_layers=L, activation="linear", eta=0.1, steps=T,
                                     order=order, nodes=3)
    for name, ref in (("f", a.f), ("ntk", a.ntk), ("phi", a.H)):
        got = getattr(b, name)
        for k in range(1, order // 2 + 1):
            scale = np.max(np.abs(ref[k]))
            assert scale > 1e-6
            assert np.max(np.abs(ref[k] - got[k])) < 1e-11 * max(1.0, scale), (name, k)
    assert b.odd_residual < 1e-14 and b.imag_residual < 1e-14


def test_depth_one_gives_the_two_layer_series():
    """tanh, one hidden layer, through gamma0^6 against the field-level two-layer expansion with
    the same (NTK) closure."""
    T, order = 8, 6
    a = two_layer_series_arrays(KX1, Y1, activation="tanh", eta=0.1, steps=T, order=order,
                                nodes=480, closure="ntk")   # Gauss-Hermite: f_6 off by 3e-7 at 320
    b = deep_nonlinear_series_arrays(KX1, Y1, hidden_layers=1, activation="tanh", eta=0.1, steps=T,
                                     order=order, nodes=160)  # trapezoid: converged to 1e-17
    idx = np.arange(T)
    for name in ("f", "ntk", "phi", "g"):
        ref, got = getattr(a, name)[::2], getattr(b, name)
        if name in ("phi", "g"):
            got = got[:, 0][:, idx, :, idx, :].transpose(1, 0, 2, 3)
        for k in range(order // 2 + 1):
            assert np.max(np.abs(ref[k] - got[k])) < 3e-8 * max(1.0, np.max(np.abs(ref[k]))), \
                (name, k)                # the Gauss-Hermite reference: ~1e-8 at 480 nodes


def test_exact_closure_against_two_layer_and_deep_linear_series():
    """The exact discrete-GD closure (readout response one order above f): hidden_layers-1 tanh against
    the two-layer field expansion, and phi = id at L = 3 against the deep linear series, both with
    their own exact closures."""
    T = 6
    a = two_layer_series_arrays(KX1, Y1, activation="tanh", eta=0.1, steps=T, order=4, nodes=480,
                                closure="exact")
    b = deep_nonlinear_series_arrays(KX1, Y1, hidden_layers=1, activation="tanh", eta=0.1, steps=T,
                                     order=4, nodes=120, closure="exact")
    for k in range(3):
        assert np.max(np.abs(a.f[2 * k] - b.f[k])) < 1e-9, k      # Gauss-Hermite reference
    lin = deep_linear_series_arrays(KX1, Y1, hidden_layers=3, eta=0.1, steps=T, order=2, closure="exact")
    ntk = deep_linear_series_arrays(KX1, Y1, hidden_layers=3, eta=0.1, steps=T, order=2, closure="ntk")
    b = deep_nonlinear_series_arrays(KX1, Y1, hidden_layers=3, activation="linear", eta=0.1, steps=T,
                                     order=4, nodes=3, closure="exact")
    assert np.max(np.abs(lin.f[2] - ntk.f[2])) > 1e-4           # the closures differ at gamma0^4
    for k in range(3):
        assert np.max(np.abs(lin.f[k] - b.f[k])) < 1e-13, k


def test_deep_tanh_fourth_order_is_even_real_and_causal():
    b = deep_nonlinear_series_arrays(KX1, Y1, hidden_layers=3, activation="tanh", eta=0.2, steps=6,
                                     order=4, nodes=40)
    assert b.odd_residual < 1e-13 and b.imag_residual < 1e-13
    assert np.all(b.f[1:, 0] == 0) and np.max(np.abs(b.f[2])) > 1e-3
    # kernels are symmetric under (t, mu) <-> (s, nu)
    phi = b.phi[2].reshape(3, 6, 6)
    assert np.max(np.abs(phi - phi.transpose(0, 2, 1))) < 1e-12
    # responses are causal (B keeps its equal-time block)
    A = b.A[1].reshape(2, 6, 6)
    assert np.max(np.abs(np.triu(A[0]))) == 0


def test_bad_input():
    with pytest.raises(DomainError, match="kinks"):
        deep_nonlinear_series_arrays(KX1, Y1, hidden_layers=2, activation="relu", eta=0.1, steps=4,
                                     order=4)
    with pytest.raises(DomainError, match="even"):
        deep_nonlinear_series_arrays(KX1, Y1, hidden_layers=2, activation="tanh", eta=0.1, steps=4,
                                     order=3)
    with pytest.raises(DomainError, match="max_points"):
        deep_nonlinear_series_arrays(KX2, Y2, hidden_layers=3, activation="tanh", eta=0.1, steps=3,
                                     order=4, nodes=8, max_points=20_000)
