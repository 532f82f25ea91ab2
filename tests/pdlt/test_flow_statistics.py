"""``statistics=`` of the layer flows: subsets compute only what their recursions read.

``flow(..., statistics=("K",))`` iterates PDLT (4.118) alone and ``ntk_flow(...,
statistics=("Theta",))`` adds (9.5); the values must be those of the full flows (same tables),
what was not requested is absent, and memory stays O(N^2).
"""

import tracemalloc
import warnings

import numpy as np
import pytest

import effth as et
from effth.errors import AccuracyWarning, DomainError
from effth.numerics import gaussian_expectation
from effth.numerics.sample_tables import closed_pair_tables
from effth.activations import get_activation


def _X(n, seed=0):
    return np.random.default_rng(seed).normal(size=(n, 3))


def _rel(a, b):
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


@pytest.mark.parametrize("act", ["tanh", "relu", "erf", "gelu"])
def test_subsets_agree_with_the_full_flows(act):
    net = et.MLP(act, depth=4, c_w=1.3, c_b=0.1, widths=50)
    X = _X(3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AccuracyWarning)
        full = et.flow(net, X)
        k = et.flow(net, X, statistics=("K",))
        kv = et.flow(net, X, statistics="V")
        nf = et.ntk_flow(net, X, lambda_b=0.5, lambda_w=0.7, statistics=("Theta", "B"))
        th = et.ntk_flow(net, X, lambda_b=0.5, lambda_w=0.7, statistics=["Theta"])
    assert _rel(k.K, full.K) <= 1e-12 and _rel(kv.V, full.V) <= 1e-12
    assert _rel(th["Theta"], nf["Theta"]) <= 1e-12
    assert _rel(th.value("K", layer=4), full.value("K", layer=4)) <= 1e-12
    assert k.statistics == ("K",) and kv.statistics == ("K", "V") and full.statistics == ("K", "V", "G1")
    assert th.kernel.statistics == ("K",)


def test_not_requested_raises_and_repr_says_what_is_held():
    net = et.MLP("erf", depth=3, c_w=1.0, widths=20)
    fl = et.flow(net, _X(4), statistics=("K",))
    assert fl.V is None and fl.G1 is None and fl.names == ("K",)
    for name in ("V", "G1", "G"):
        with pytest.raises(DomainError, match="not requested"):
            fl.value(name, layer=2)
    with pytest.raises(DomainError, match="not requested"):
        fl.kernel_at_width()
    assert "statistics=K" in repr(fl) and "K, V" not in fl._repr_html_().split("names")[1]
    nf = et.ntk_flow(net, _X(4), statistics="Theta")
    with pytest.raises(DomainError, match="not requested"):
        nf.value("V", layer=2)
    assert nf.value("Theta", layer=3).shape == (4, 4) and "Theta K" in repr(nf)
    with pytest.raises(DomainError, match="unknown statistic"):
        et.flow(net, _X(4), statistics=("Theta",))


@pytest.mark.parametrize("act", ["erf", "relu", "leaky_relu", "abs", "sin", "cos", "gelu"])
def test_closed_pair_tables_are_the_expectations(act):
    a = get_activation(act)
    X = _X(7, 1)
    X[3] = X[2]                                    # a duplicated input (rho = 1)
    K = X @ X.T / 3 + 0.1
    T = closed_pair_tables(K, a, {(0, 0), (1, 1)}, rows=10)     # several blocks
    assert set(T) == {(0, 0), (1, 1)}
    for (p, q), tab in T.items():
        ref = np.empty_like(tab)
        for i in range(7):
            for j in range(7):
                idx = [i] if i == j else [i, j]
                fac = [(0, "sigma", p), (0 if i == j else 1, "sigma", q)]
                ref[i, j] = gaussian_expectation(fac, K[np.ix_(idx, idx)], a)
        assert np.max(np.abs(tab - ref)) <= 1e-13 * np.max(np.abs(ref))


def test_relu_theta_against_the_arc_cosine_recursion():
    X = _X(30, 2)
    L, cw, cb, lb, lw = 6, 2.0, 0.1, 0.3, 0.8
    nf = et.ntk_flow(et.MLP("relu", depth=L, c_w=cw, c_b=cb), X, lambda_b=lb, lambda_w=lw,
                     statistics=("Theta",))
    K = cb + cw * X @ X.T / 3
    T = lb + lw * X @ X.T / 3
    for _ in range(L - 1):
        d = np.sqrt(np.diag(K))
        rho = np.clip(K / np.outer(d, d), -1, 1)
        np.fill_diagonal(rho, 1.0)        # exactly: arccos(1 - 1e-16) = 1.5e-8
        t = np.arccos(rho)
        ss = np.outer(d, d) * (np.sin(t) + (np.pi - t) * rho) / (2 * np.pi)
        dd = (np.pi - t) / (2 * np.pi)
        K, T = cb + cw * ss, lb + lw * ss + cw * dd * T
    np.testing.assert_allclose(nf.value("K", layer=L), K, rtol=1e-12)
    np.testing.assert_allclose(nf.value("Theta", layer=L), T, rtol=1e-12)


def test_k_theta_memory_is_bounded():
    """N = 300, K + Theta: peak allocation a few N x N arrays (no N^4 tensor, no N^2 x nodes
    quadrature grid: 14 GB for tanh before chunking), i.e. well under 40 MB (one N^2 table is
    0.72 MB).  tanh goes through the Mehler series (chunked over pairs), erf through closed forms."""
    X = _X(300, 3)
    for act, depth in (("tanh", 2), ("erf", 4)):
        tracemalloc.start()
        nf = et.ntk_flow(et.MLP(act, depth=depth, c_w=1.0), X, statistics=("Theta",), rtol=1e-6)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert nf["Theta"].shape == (depth, 300, 300)
        assert peak < 40e6, (act, peak / 1e6)
