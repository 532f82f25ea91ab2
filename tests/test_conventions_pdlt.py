"""docs/conventions.md on the PDLT side: the network spec, c_w/c_b order, Flow/NTKFlow results.

Every expected value here is fixed by the convention or computed independently of the code under
test (e.g. the first-layer kernel C_b + C_W x.x/n_0, PDLT (4.8)).
"""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

import effth as et
from effth.arch import MLP
from effth.errors import DomainError
from effth.pdlt import NTKFlow, flow, ntk_flow
from effth.pdlt.criticality import (check_critical, chi_parallel, chi_perp, find_criticality,
                                             iterate_single_input, j_function, kernel_map)


# ------------------------------------------------------------------------ MLP coercions
def test_mlp_accepts_numpy_and_sympy_numbers():
    net = MLP("tanh", depth=np.int64(3), widths=np.array([64, 32]), c_w=sp.Rational(3, 2),
              c_b=sp.Float(0.25))
    assert net.depth == 3 and type(net.depth) is int
    assert net.widths == (64, 32) and all(type(n) is int for n in net.widths)
    assert net.c_w == (1.5, 1.5, 1.5) and net.c_b == (0.25, 0.25, 0.25)
    assert all(type(v) is float for v in net.c_w + net.c_b)
    assert MLP("tanh", depth=3, widths=np.int32(8)).widths == (8, 8)
    assert MLP("tanh", depth=sp.Integer(2), widths=[sp.Integer(5)], c_w=np.float32(2.0)).c_w == (2.0, 2.0)
    assert MLP("tanh", depth=3, c_w=np.array([1.0, 2.0, 3.0])).c_w == (1.0, 2.0, 3.0)
    assert MLP("tanh", depth=2, c_w=sp.pi / 4).c_w == (float(sp.pi / 4),) * 2


@pytest.mark.parametrize("kwargs, word", [
    (dict(depth=3.0), "depth"),
    (dict(depth=True), "depth"),
    (dict(depth=np.float64(3)), "depth"),
    (dict(depth=3, widths=[64.5, 3]), "widths"),
    (dict(depth=3, widths=np.array([64.0, 64.0])), "widths"),
    (dict(depth=3, widths=[True, 3]), "widths"),
    (dict(depth=3, widths=[4, 4, 4]), "widths"),
    (dict(depth=3, c_w=[1.0, 2.0]), "c_w"),
    (dict(depth=3, c_b=[0.0] * 4), "c_b"),
    (dict(depth=3, c_w=sp.Symbol("x")), "c_w"),
    (dict(depth=3, c_w=sp.I), "c_w"),
    (dict(depth=3, c_w=True), "c_w"),
    (dict(depth=3, c_w="1.0"), "c_w"),
    (dict(depth=2, n_out=1.0), "n_out"),
])
def test_mlp_rejects_ambiguous_input(kwargs, word):
    with pytest.raises(DomainError, match=word):
        MLP("tanh", **kwargs)


# ------------------------------------------------------------------ c_w, c_b keyword order
@pytest.mark.parametrize("call", [
    lambda: kernel_map("tanh", 1.0, 0.0),
    lambda: chi_parallel("tanh", 1.0, 0.5),
    lambda: chi_perp("tanh", 1.0, 0.5),
    lambda: j_function("tanh", 1.0, 0.5),
    lambda: check_critical("tanh", 1.0, 0.0),
    lambda: iterate_single_input("tanh", 1.0, 0.0, 1.0, 10),
])
def test_c_w_c_b_are_keyword_only(call):
    with pytest.raises(TypeError):
        call()


def test_keyword_order_values():
    # K -> C_b + C_W g(K) for the linear activation: g(K) = K exactly
    assert float(kernel_map("linear", c_w=2.0, c_b=0.5)(1.5)) == pytest.approx(0.5 + 2.0 * 1.5)
    fl = iterate_single_input("linear", c_w=1.0, c_b=0.25, K1=1.0, depth=4)
    np.testing.assert_allclose(fl.K, [1.0, 1.25, 1.5, 1.75])       # semi-critical: K1 + (l-1) C_b
    assert fl.layers == (1, 2, 3, 4)
    assert iterate_single_input("linear", c_w=1.0, c_b=0.0, K1=1.0, hidden_layers=3).K.shape == (4,)


@pytest.mark.parametrize("name, c_w, c_b", [("tanh", 1, 0), ("relu", 2, 0), ("erf", sp.pi / 4, 0)])
def test_find_criticality_is_weights_first_and_usable(name, c_w, c_b):
    crit = find_criticality(name)
    assert crit.c_w == c_w and crit.c_b == c_b
    r = repr(crit)
    assert r.index("c_w=") < r.index("c_b=") and len(r) < 300
    assert "(C_W,C_b)" in crit.latex()
    net = MLP(name, 3, widths=16, c_w=crit.c_w, c_b=crit.c_b)
    assert net.c_w == (float(c_w),) * 3 and net.c_b == (float(c_b),) * 3
    assert check_critical(name, c_w=crit.c_w, c_b=crit.c_b).is_critical


def test_half_stable_criticality_feeds_mlp():
    crit = find_criticality("gelu")
    net = MLP("gelu", 4, c_w=crit.c_w, c_b=crit.c_b)
    assert net.c_w_at(2) == pytest.approx(1.983058257, rel=1e-8)      # PDLT §5.3.4
    assert net.c_b_at(2) == pytest.approx(0.1729223908, rel=1e-8)


# ------------------------------------------------------------------------ flow lengths
def test_flow_per_layer_lengths():
    K1 = [[1.0]]
    base = dict(K1=K1, depth=4, activation="tanh")
    a = flow(**base, c_w=[1.0, 1.1, 0.9], c_b=[0.0, 0.1, 0.2])             # steps l = 2..4
    b = flow(**base, c_w=[7.0, 1.0, 1.1, 0.9], c_b=[3.0, 0.0, 0.1, 0.2])   # l = 1..4, first unused
    np.testing.assert_array_equal(a.K, b.K)
    for bad in (dict(c_w=[1.0, 1.0]), dict(c_w=[1.0] * 5), dict(c_b=[0.0] * 2),
                dict(ratios=[1.0, 1.0]), dict(ratios=[1.0] * 4)):
        with pytest.raises(DomainError):
            flow(**base, **bad)
    with pytest.raises(DomainError, match="lambda_b"):
        ntk_flow(K1=K1, Theta1=K1, depth=4, activation="tanh", lambda_b=[1.0] * 5)
    with pytest.raises(DomainError):
        ntk_flow(K1=K1, Theta1=K1, depth=4, activation="tanh", c_w=[1.0] * 5)
    with pytest.raises(DomainError, match="depth"):
        flow(K1=K1, depth=4, hidden_layers=3, activation="tanh")
    assert flow(K1=K1, hidden_layers=3, activation="tanh").depth == 4
    c = find_criticality("tanh")
    np.testing.assert_array_equal(flow(**base, c_w=c.c_w, c_b=c.c_b).K, flow(**base).K)


# --------------------------------------------------------------------- results protocol
X = np.array([[1.0, 0.0, 0.5], [0.2, 1.0, -0.3]])


@pytest.fixture(scope="module")
def kernel_flow():
    return flow(MLP("tanh", 3, widths=(8, 16), c_w=1.0, c_b=0.1), X)


def test_flow_value_stderr_layers(kernel_flow):
    fl = kernel_flow
    assert fl.layers == (1, 2, 3) and fl.depth == 3 and fl.hidden_layers == 2
    K1 = 0.1 + 1.0 * X @ X.T / 3                                     # PDLT (4.8)
    np.testing.assert_allclose(fl.value("K", layer=1), K1, rtol=1e-15)
    np.testing.assert_allclose(fl.value("G", layer=1), K1, rtol=1e-15)   # layer 1 is Gaussian
    for name, shape in [("K", (2, 2)), ("G1", (2, 2)), ("G", (2, 2)), ("V", (2, 2, 2, 2))]:
        for layer in fl.layers:
            assert fl.value(name, layer=layer).shape == shape
            assert fl.stderr(name, layer=layer) is None
        with pytest.raises(DomainError, match="ambiguous"):
            fl.value(name)
    np.testing.assert_array_equal(fl.value("K", layer=2), fl.K[1])
    np.testing.assert_allclose(fl.value("G", layer=3), fl.K[2] + fl.G1[2] / 16)
    np.testing.assert_allclose(fl.value("G", layer=3, widths=100), fl.K[2] + fl.G1[2] / 100)
    with pytest.raises(DomainError, match=r"\[1, 2, 3\]"):
        fl.value("K", layer=4)
    with pytest.raises(DomainError, match=r"\[1, 2, 3\]"):
        fl.value("K", layer=0)
    with pytest.raises(DomainError):
        fl.value("Theta", layer=2)
    with pytest.raises(DomainError):
        fl.stderr("K", layer=5)
    with pytest.raises(DomainError, match="widths"):
        fl.value("G", layer=3, widths=(8, 16, 32))
    with pytest.raises(DomainError, match="widths"):
        flow(K1=[[1.0]], depth=3, activation="tanh").value("G", layer=3)
    assert fl["K"].shape == (3, 2, 2)                                 # old access keeps working


def test_ntk_flow_value_stderr_layers():
    nf = ntk_flow(MLP("tanh", 3, widths=(8, 16)), X, statistics=("Theta", "H1", "A", "B"))
    assert isinstance(nf, NTKFlow) and nf.layers == (1, 2, 3)
    Th1 = 1.0 + 1.0 * X @ X.T / 3                                    # PDLT (8.23), lambda = 1
    np.testing.assert_allclose(nf.value("Theta", layer=1), Th1, rtol=1e-15)
    for name, shape in [("Theta", (2, 2)), ("H1", (2, 2)), ("H", (2, 2)), ("A", (2,) * 4),
                        ("B", (2,) * 4), ("K", (2, 2)), ("G", (2, 2)), ("V", (2,) * 4)]:
        assert nf.value(name, layer=2).shape == shape
        assert nf.stderr(name, layer=2) is None
    np.testing.assert_allclose(nf.value("H", layer=3), nf.tensors["Theta"][2] + nf.tensors["H1"][2] / 16)
    with pytest.raises(DomainError, match=r"\[1, 2, 3\]"):
        nf.value("Theta", layer=7)
    with pytest.raises(DomainError, match="statistics"):
        nf.value("P", layer=2)


def test_reprs_are_short(kernel_flow):
    nf = ntk_flow(K1=[[1.0]], Theta1=[[1.0]], depth=3, activation="tanh", statistics=("Theta",))
    objs = [kernel_flow, nf, find_criticality("tanh"), find_criticality("gelu"),
            check_critical("tanh", c_w=1.0, c_b=0.0),
            iterate_single_input("tanh", c_w=1.0, c_b=0.0, K1=1.0, depth=50),
            MLP("tanh", 40, widths=list(range(1, 40)), c_w=[1.0] * 39 + [2.0]),
            et.pdlt.derive_initialization("V"), et.pdlt.derive_ntk("Theta"),
            et.pdlt.second_layer("K"), et.pdlt.single_input("G1")]
    for obj in objs:
        r = repr(obj)
        assert "\n" not in r and len(r) < 300, r
        assert "array(" not in r
    for obj in objs[:6]:
        assert obj._repr_html_().startswith("<table>")
    for obj in objs[7:]:
        assert obj._repr_latex_().startswith("$")
