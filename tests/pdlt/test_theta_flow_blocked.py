"""K and Theta alone (PDLT (4.118), (9.5)) from direct closed forms: the fused row-block path of
ntk_flow equals the general path (closed-form tables, then the compiled steps on whole arrays),
is exactly symmetric and independent of the thread count, and hands over to the general path
where the closed forms do not apply."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import effth
import effth.pdlt.ntk.ntk_flow  # noqa: F401  (the module, not the function)

nfm = sys.modules["effth.pdlt.ntk.ntk_flow"]


def _inputs(N=70, seed=0):
    X = np.random.default_rng(seed).normal(size=(N, 6))
    X[5] = X[3]                    # a duplicated input
    X[9] = -0.5 * X[2]             # a collinear one
    return X


def _both(net, X, monkeypatch):
    fast = effth.ntk_flow(net, X, statistics=["Theta"])
    with monkeypatch.context() as m:
        m.setattr(nfm, "_theta_flow_blocked", lambda *a, **k: None)
        general = effth.ntk_flow(net, X, statistics=["Theta"])
    return fast, general


@pytest.mark.parametrize("act, c_w, c_b", [("erf", 1.0, 0.1), ("relu", 2.0, 0.1),
                                           ("leaky_relu", 1.9, 0.05), ("sin", 1.0, 0.2)])
def test_blocked_equals_general(act, c_w, c_b, monkeypatch):
    net = effth.MLP(act, depth=7, c_w=c_w, c_b=c_b)
    X = _inputs()
    L = net.depth
    lb = nfm._per_layer(1.0, L, "lambda_b")
    Th1 = lb[0] + (X @ X.T) / X.shape[1]
    assert nfm._theta_flow_blocked({"net": net, "X": X}, Th1, lb, lb, False) is not None
    fast, general = _both(net, X, monkeypatch)
    for name in ("K", "Theta"):
        for layer in range(1, L + 1):
            A, B = fast.value(name, layer=layer), general.value(name, layer=layer)
            assert np.max(np.abs(A - B)) <= 1e-13 * np.abs(B).max(), (name, layer)
            assert np.array_equal(A, A.T), (name, layer)       # whole rows: symmetric to the bit


def test_thread_count_does_not_change_the_flow(monkeypatch):
    net = effth.MLP("erf", depth=5, c_w=1.0, c_b=0.1)
    X = np.random.default_rng(1).normal(size=(300, 4))       # several row blocks
    out = []
    for n in ("1", "2"):
        monkeypatch.setenv("EFFTH_THREADS", n)
        out.append(effth.ntk_flow(net, X, statistics=["Theta"]).value("Theta", layer=5))
    assert np.array_equal(out[0], out[1])


def test_zero_input_hands_over_to_the_general_path(monkeypatch):
    """ReLU at a zero-variance input (C_b = 0, a zero input) has a point mass (PDLT (2.9)): the
    closed forms do not apply, the general path runs and gives the same K as before."""
    net = effth.MLP("relu", depth=3, c_w=2.0, c_b=0.0)
    X = _inputs(12)
    X[7] = 0.0
    lb = nfm._per_layer(1.0, 3, "lambda_b")
    assert nfm._theta_flow_blocked({"net": net, "X": X}, lb[0] + X @ X.T / 6, lb, lb, False) is None
    fast, general = _both(net, X, monkeypatch)
    assert np.array_equal(fast.value("Theta", layer=3), general.value("Theta", layer=3))


@pytest.mark.filterwarnings("ignore::effth.pdlt.initialization.kernel_flow.KernelScaleWarning")
def test_blocked_path_reports_overflow():
    net = effth.MLP("relu", depth=40, c_w=1e8, c_b=0.0)
    with pytest.raises(effth.errors.DomainError, match="overflow"):
        effth.ntk_flow(net, _inputs(20), statistics=["Theta"])


def test_per_layer_hyperparameters(monkeypatch):
    """Per-layer C_W, C_b and learning rates enter the fused path at the same layers as the
    general one."""
    net = effth.MLP("erf", depth=5, c_w=[1.0, 1.2, 0.9, 1.1, 1.0], c_b=[0.0, 0.1, 0.2, 0.05, 0.1])
    X = _inputs(40)
    kw = dict(statistics=["Theta"], lambda_b=[0.3, 0.5, 0.7, 0.2, 0.9], lambda_w=[1.0, 0.4, 2.0, 0.8, 1.5])
    fast = effth.ntk_flow(net, X, **kw)
    with monkeypatch.context() as m:
        m.setattr(nfm, "_theta_flow_blocked", lambda *a, **k: None)
        general = effth.ntk_flow(net, X, **kw)
    for layer in range(1, 6):
        for name in ("K", "Theta"):
            A, B = fast.value(name, layer=layer), general.value(name, layer=layer)
            assert np.max(np.abs(A - B)) <= 1e-13 * np.abs(B).max(), (name, layer)


@pytest.mark.parametrize("act, c_w", [("erf", 1.0), ("relu", 2.0)])
def test_last_layer_pass_equals_the_flow(act, c_w, monkeypatch):
    """output_kernels' two-layers-at-a-time pass iterates only the row blocks on and above the
    diagonal and mirrors once at the end: it equals the general path's last layer (several row
    blocks, a duplicated and a collinear input), exactly symmetric; a wrong mirror (the stale
    lower triangle kept) is seen."""
    net = effth.MLP(act, depth=6, c_w=c_w, c_b=0.1)
    X = np.random.default_rng(2).normal(size=(300, 5))
    X[7], X[11] = X[4], -0.5 * X[2]
    K, T = effth.output_kernels(net, X)
    _, general = _both(net, X, monkeypatch)
    for A, B in ((K, general.value("K", layer=6)), (T, general.value("Theta", layer=6))):
        assert np.max(np.abs(A - B)) <= 1e-13 * np.abs(B).max()
        assert np.array_equal(A, A.T)
        assert np.max(np.abs(np.tril(A, -1) - np.tril(general.value("K", layer=5), -1))) > 1e-3
