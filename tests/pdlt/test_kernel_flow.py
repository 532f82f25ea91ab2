"""effth.flow: the derived K, V, G1 recursions compiled over all inputs and layers.

Corners: the per-entry evaluation of the same derived recursions (``initialization_flow``,
independent numerics), reference tables (two-input tanh and ReLU, PDLT §4.3 and §5.2–§5.4; ReLU
and linear criticality), the exact
deep linear theory (``deep_linear_flow``), and bad input.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import effth as et
from effth.errors import DomainError
from effth.pdlt import KernelScaleWarning, WidthWarning, initialization_flow
from effth.pdlt.criticality import NonCriticalWarning

from .test_initialization import K1_2, SEQ, TABLE


def _K1(N, seed):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N, 5))
    return X @ X.T / 5 + 0.1


@pytest.mark.parametrize("act", ["tanh", "gelu", "sin"])
def test_equals_per_entry_evaluation(act):
    K1 = _K1(3, 0)
    kw = dict(c_w=[1.3, 0.9, 1.1], c_b=[0.1, 0.0, 0.2], ratios=[1.0, 2.0, 0.5])
    fl = et.flow(K1=K1, depth=4, activation=act, rtol=1e-10, **kw)
    ref = initialization_flow(K1, 4, act, rtol=1e-11, **kw)
    for k in ("K", "V", "G1"):
        r = np.asarray(ref[k])
        np.testing.assert_allclose(getattr(fl, k), r, rtol=0, atol=1e-8 * np.abs(r).max())
    assert fl.V.shape == (4, 3, 3, 3, 3)
    for p in [(1, 0, 2, 3), (2, 3, 0, 1), (0, 1, 3, 2)]:               # the 8-element group
        np.testing.assert_allclose(fl.V, fl.V.transpose(0, *(1 + np.array(p))), rtol=1e-13, atol=1e-16)


@pytest.mark.parametrize("act", ["relu", "tanh"])
def test_two_input_tables(act):
    t = TABLE[act]
    fl = et.flow(K1=K1_2, depth=3, activation=act, c_w=t["cw"], c_b=0.0, rtol=1e-10)
    tol = dict(rel=t["tol"], abs=1e-9)
    assert [fl.K[1][0, 0], fl.K[1][0, 1]] == pytest.approx(t["K2"], **tol)
    assert [fl.K[2][0, 0], fl.K[2][0, 1]] == pytest.approx(t["K3"], **tol)
    assert [fl.G1[2][0, 0], fl.G1[2][0, 1]] == pytest.approx(t["G3"], **tol)
    V3 = fl.V[2]
    # table order: (11)(11), (11)(22), (12)(12), (11)(12) (independent reference values)
    assert [V3[0, 0, 0, 0], V3[0, 0, 1, 1], V3[0, 1, 0, 1], V3[0, 0, 0, 1]] == pytest.approx(t["V3"], **tol)
    np.testing.assert_allclose(
        V3, np.asarray(initialization_flow(K1_2, 3, act, c_w=t["cw"], c_b=0.0)["V"][2]), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("case", ["a", "b"])
def test_single_input_tanh_sequences(case):
    cw, cb, K1, rows = SEQ[case]
    fl = et.flow(K1=[[K1]], depth=len(rows) + 1, activation="tanh", c_w=cw, c_b=cb, rtol=1e-11)
    for layer, (K, V, G) in enumerate(rows, start=2):
        assert fl.K[layer - 1, 0, 0] == pytest.approx(K, rel=1e-9)
        assert fl.V[layer - 1, 0, 0, 0, 0] == pytest.approx(V, rel=1e-9)
        assert fl.G1[layer - 1, 0, 0] == pytest.approx(G, rel=1e-8, abs=1e-12)


def test_relu_and_linear_criticality():
    """V^{(l)}/K^2 = 5(l-1) (ReLU, C_W = 2) and 2(l-1) (linear, C_W = 1), G1 = 0 (PDLT ch. 5, 3)."""
    fl = et.flow(K1=[[1.0]], depth=8, activation="relu", c_w=2.0, c_b=0.0)
    np.testing.assert_allclose(fl.V[:, 0, 0, 0, 0], 5.0 * np.arange(8), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(fl.G1[:, 0, 0], 0.0, atol=1e-10)
    fl = et.flow(K1=[[1.3]], depth=8, activation="linear", c_w=1.0, c_b=0.0)
    np.testing.assert_allclose(fl.V[:, 0, 0, 0, 0], 2.0 * np.arange(8) * 1.3**2, rtol=1e-13)  # Gauss-Hermite: exact


def test_deep_linear_multi_input_with_biases():
    """sigma = z: the compiled generic flow equals the deep linear module's leading-order V."""
    from effth.pdlt import deep_linear_flow

    K1 = _K1(3, 5)
    fl = et.flow(K1=K1, depth=5, activation="linear", c_w=1.2, c_b=0.3, rtol=1e-10)
    dl = deep_linear_flow(K1=K1, depth=5, widths=1000, c_w=1.2, c_b=0.3, exact=False)
    Kd = np.asarray(dl["K"] if isinstance(dl, dict) else dl.K, dtype=float)
    Vd = np.asarray(dl["V"] if isinstance(dl, dict) else dl.V, dtype=float)
    np.testing.assert_allclose(fl.K, Kd, rtol=1e-9)
    np.testing.assert_allclose(fl.V, Vd, rtol=1e-8, atol=1e-10)


def test_mlp_interface_and_widths():
    X = np.array([[1.0, 0.0], [0.5, np.sqrt(0.75)]]) * np.sqrt(2.0)
    net = et.MLP("tanh", depth=3, widths=(10, 20), c_w=1.0, c_b=0.0)
    fl = et.flow(net, X)
    V3 = fl.V[2]
    assert [V3[0, 0, 0, 0], V3[0, 0, 1, 1]] == pytest.approx(TABLE["tanh"]["ratio2"][:2], rel=1e-7)
    G = fl.kernel_at_width()
    np.testing.assert_allclose(G[2], fl.K[2] + fl.G1[2] / 20)
    np.testing.assert_array_equal(G[0], fl.K[0])
    assert "tanh" in repr(fl)


def test_bad_input():
    with pytest.raises(DomainError, match="PSD|positive"):
        et.flow(K1=[[1.0, 2.0], [2.0, 1.0]], depth=3, activation="tanh")
    with pytest.raises(DomainError, match="C_W"):
        et.flow(K1=[[1.0]], depth=3, activation="tanh", c_w=-1.0)
    with pytest.raises(DomainError, match="depth"):
        et.flow(K1=[[1.0]], depth=2.5, activation="tanh")
    with pytest.raises(DomainError, match="inputs X"):
        et.flow(et.MLP("tanh", 3, 10))
    with pytest.raises(DomainError, match="overflows at layer 2"):
        et.flow(K1=[[1.0]], depth=6, activation="linear", c_w=1e200)
    # K^(l) = 11^(l-1): first above 1e6 x K^(1) at layer 7 (10^6 itself is the threshold, which
    # the exact closed form of the linear activation does not exceed)
    with pytest.warns(KernelScaleWarning, match="blows up.*layer 7"):
        et.flow(K1=[[1.0]], depth=10, activation="linear", c_w=11.0)
    with pytest.warns(KernelScaleWarning, match="vanishes"):
        et.flow(K1=[[1.0]], depth=10, activation="linear", c_w=0.1)
    with pytest.warns(WidthWarning, match="L/n"):
        et.flow(et.MLP("tanh", 6, 8), np.ones((1, 3)))
    with pytest.warns(NonCriticalWarning):
        et.flow(K1=[[1.0]], depth=3, activation="tanh", c_w=1.5, require_critical=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        et.flow(K1=[[1.0]], depth=3, activation="tanh", c_w=1.0, require_critical=True)


def test_kinked_tables_by_stein_equal_book_form():
    """Kinked sigma: G1 from Stein-reduced pair tables (symmetric diagonal split) equals the
    book-form (K^-1) evaluation entry by entry."""
    K1 = _K1(2, 3)
    kw = dict(c_w=[1.3, 0.9], c_b=[0.1, 0.05], ratios=[1.0, 2.0])
    fl = et.flow(K1=K1, depth=3, activation="leaky_relu", rtol=1e-10, **kw)
    ref = initialization_flow(K1, 3, "leaky_relu", rtol=1e-11, **kw)
    for k in ("K", "V", "G1"):
        r = np.asarray(ref[k])
        np.testing.assert_allclose(fl[k], r, rtol=0, atol=1e-9 * np.abs(r).max())


def test_erf_four_point_table_is_closed_and_matches_quadrature():
    """The flow's four-point table for erf comes from closed forms (four Heaviside factors: the
    quadrivariate orthant probability), with no quadrature error; against the shared-node
    four_point_table on 6 inputs at rtol 1e-11."""
    from effth.activations import get_activation
    from effth.numerics.sample_tables import four_point_table
    from effth.pdlt.initialization.kernel_flow import _tables

    X = np.random.default_rng(3).standard_normal((6, 4))
    K = 1.3 * X @ X.T / 4 + 0.1
    act = get_activation("erf")
    tabs, err = _tables(K, act, {(0, 0)}, True, 1e-11)
    F, FE = four_point_table(K, act, rtol=1e-11)
    assert np.all(FE <= 1e-11 * np.abs(F).max())
    np.testing.assert_allclose(tabs["four"], F, rtol=0, atol=2e-11 * np.abs(F).max())
    assert err < 1e-11


def test_erf_four_point_table_small_kernels_stay_relative():
    """At kernels of 1e-6 the closed forms' absolute error (~eps) would be 1e-4 of <erf^4> ~ K^2;
    the flow's table falls back to quadrature there and keeps relative accuracy."""
    from effth.activations import get_activation
    from effth.pdlt.initialization.kernel_flow import _tables

    X = np.random.default_rng(3).standard_normal((5, 4))
    K = 1e-6 * X @ X.T / 4
    act = get_activation("erf")
    tabs, _ = _tables(K, act, {(0, 0)}, True, 1e-10)
    ref = et.gaussian_expectation([(i, "sigma", 0) for i in range(4)], K[:4, :4], act,
                                  method="quadrature", rtol=1e-12)
    assert tabs["four"][0, 1, 2, 3] == pytest.approx(float(ref), rel=1e-8)
