"""The array backends of the simulators (``backend="numpy"`` default, ``backend="jax"``).

With ``draws="host"`` the JAX backend runs the same networks as NumPy (the Gaussian draws come
from the same NumPy generator calls), so every statistic must agree to round-off; with
``draws="device"`` (``jax.random``) the networks differ and the statistics are held to exact
layer-2 values of PDLT (4.76) within standard errors, with a wrong value (x0.9) rejected.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

from effth.arch import MLP
from effth.errors import DomainError
from effth.simulation import simulate_ensemble
from effth.simulation.ensemble import STAT_NAMES

X3 = np.array([[0.3, -1.1, 0.7, 0.2], [1.2, 0.4, -0.5, 0.9], [-0.8, 0.6, 0.1, -0.3]])


def _rel(a, b) -> float:
    """Largest difference relative to the largest magnitude (NaN entries must match)."""
    a, b = np.asarray(a), np.asarray(b)
    assert np.array_equal(np.isnan(a), np.isnan(b))
    ok = ~np.isnan(a)
    scale = max(float(np.abs(a[ok]).max(initial=0.0)), 1e-300)
    return float(np.abs(a[ok] - b[ok]).max(initial=0.0)) / scale


def _jax():
    return pytest.importorskip("jax", reason="the JAX backend needs the optional extra "
                                             "`pip install effth[jax]`")


# ----------------------------------------------------------------------------- validation
def test_bad_backend_and_draws():
    net = MLP("tanh", depth=2, widths=4)
    with pytest.raises(DomainError, match="backend='torch'"):
        simulate_ensemble(net, X3, networks=4, backend="torch")
    with pytest.raises(DomainError, match="needs backend='jax'"):
        simulate_ensemble(net, X3, networks=4, draws="device")
    with pytest.raises(DomainError, match="draws='gpu'"):
        simulate_ensemble(net, X3, networks=4, backend="jax", draws="gpu")


def test_missing_jax_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "jax", None)          # `import jax` raises ImportError
    monkeypatch.setitem(sys.modules, "jax.numpy", None)
    with pytest.raises(DomainError, match=r"pip install effth\[jax\]"):
        simulate_ensemble(MLP("tanh", depth=2, widths=4), X3, networks=4, backend="jax")


# ------------------------------------------------------------- same networks: round-off
@pytest.mark.parametrize("net, method", [
    (MLP("tanh", depth=3, widths=[12, 9], c_w=1.5, c_b=0.2), "weights"),
    (MLP("relu", depth=3, widths=10, c_w=2.0, c_b=0.1), "conditional"),
    (MLP("erf", depth=3, widths=8, c_w=1.2, c_b=0.1, gamma=0.5, xi=1.0), "weights"),
], ids=["tanh-weights", "relu-conditional", "erf-residual"])
def test_jax_equals_numpy_same_seed(net, method):
    _jax()
    kw = dict(networks=90, seed=7, batch=25, method=method, keep_samples=True)
    a = simulate_ensemble(net, X3, **kw)
    b = simulate_ensemble(net, X3, backend="jax", **kw)
    assert b.layers == a.layers and b.n_groups == a.n_groups
    for layer in a.layers:
        assert _rel(a.samples[layer], b.samples[layer]) <= 1e-12
        for name in STAT_NAMES:
            assert _rel(a.value(name, layer), b.value(name, layer)) <= 1e-12, (name, layer)
            assert _rel(a.stderr(name, layer), b.stderr(name, layer)) <= 1e-10, (name, layer)
    # and the comparison can fail: another seed gives other networks
    c = simulate_ensemble(net, X3, **{**kw, "seed": 8})
    assert _rel(a.value("V", a.layers[-1]), c.value("V", a.layers[-1])) > 1e-3


# --------------------------------------------------------- device draws: the statistics
def test_device_draws_exact_layer2_relu():
    r"""ReLU with C_W = 2, C_b = 0: E[G_hat^(2)] = G^(1) and V^(2) = 5 (G^(1))^2 on the diagonal,
    exactly at any width (PDLT (4.76) with E[relu(z)^2] = G/2, E[relu(z)^4] = 3 G^2 / 2)."""
    _jax()
    X = np.array([[0.9, -0.4]])
    G1 = 2.0 * float((X @ X.T)[0, 0]) / 2
    st = simulate_ensemble(MLP("relu", depth=2, widths=6, c_w=2.0, c_b=0.0), X, networks=6000,
                           seed=11, backend="jax", draws="device", layers=[2])
    G, Ge = st.value("G_rb", 2)[0, 0], st.stderr("G_rb", 2)[0, 0]
    V, Ve = st.value("V", 2)[0, 0, 0, 0], st.stderr("V", 2)[0, 0, 0, 0]
    assert abs(G - G1) <= 3 * Ge and abs(V - 5 * G1 ** 2) <= 3 * Ve
    assert abs(G - 0.9 * G1) > 3 * Ge and abs(V - 0.9 * 5 * G1 ** 2) > 3 * Ve   # x0.9 rejected
    host = simulate_ensemble(MLP("relu", depth=2, widths=6, c_w=2.0, c_b=0.0), X, networks=6000,
                             seed=11, backend="jax", layers=[2])
    assert host.value("V", 2)[0, 0, 0, 0] != V                                   # other networks
    # reproducible for a fixed seed, and other networks than the host draws
    again = simulate_ensemble(MLP("relu", depth=2, widths=6, c_w=2.0, c_b=0.0), X, networks=6000,
                              seed=11, backend="jax", draws="device", layers=[2])
    assert again.value("V", 2)[0, 0, 0, 0] == V


def test_jax_overflow_names_the_layer():
    _jax()
    from effth.activations import get_activation
    net = MLP(get_activation("monomial", degree=5), depth=4, widths=4, c_w=50.0, c_b=0.0)
    with pytest.raises(DomainError, match="non-finite .* at layer"):
        simulate_ensemble(net, 30 * X3, networks=8, backend="jax")


# ------------------------------------------------------------------ NTK ensemble, trainer
def test_ntk_ensemble_jax_equals_numpy_order3():
    """The whole hierarchy (NTK, dNTK, both ddNTKs) through the compiled pass, same networks."""
    _jax()
    from effth.simulation import simulate_ntk_ensemble
    net = MLP("tanh", depth=3, widths=5, n_out=2)
    kw = dict(networks=24, seed=2, order=3, batch=7)
    a = simulate_ntk_ensemble(net, X3[:2, :3], **kw)
    b = simulate_ntk_ensemble(net, X3[:2, :3], backend="jax", **kw)
    for k in a.stats:
        assert _rel(a.stats[k], b.stats[k]) <= 1e-12, k
        assert _rel(a.err[k], b.err[k]) <= 1e-10, k
    other = simulate_ntk_ensemble(net, X3[:2, :3], **{**kw, "seed": 3})
    assert _rel(a.stats["A"], other.stats["A"]) > 1e-3


def test_ntk_ensemble_device_draws_frozen_ntk():
    r"""Depth 1 (z = b + W x): the NTK is exactly lambda_b + lambda_w x.x / n_0 for every network,
    so the device-drawn ensemble mean is exact and its A, B vanish; with depth 2 the mean of
    H agrees with the host-drawn ensemble within standard errors."""
    _jax()
    from effth.simulation import simulate_ntk_ensemble
    X = X3[:2]
    lin = simulate_ntk_ensemble(MLP("tanh", depth=1, widths=(), n_out=2), X, networks=64, seed=1, order=1,
                                backend="jax", draws="device")
    assert np.allclose(lin.value("Theta"), 1.0 + X @ X.T / X.shape[1], rtol=1e-13, atol=0)
    net = MLP("erf", depth=2, widths=16, n_out=2, c_w=1.5, c_b=0.1)
    dev = simulate_ntk_ensemble(net, X, networks=3000, seed=4, order=1, backend="jax",
                                draws="device")
    host = simulate_ntk_ensemble(net, X, networks=3000, seed=4, order=1)
    diff = dev.value("Theta") - host.value("Theta")
    se = np.hypot(dev.stderr("Theta"), host.stderr("Theta"))
    assert np.all(np.abs(diff) <= 3 * se)
    assert np.any(np.abs(0.9 * dev.value("Theta") - host.value("Theta")) > 3 * se)  # x0.9 seen


@pytest.mark.parametrize("kw", [dict(method="gd", eta=0.1, record_ntk=True),
                                dict(method="newton", eta=0.5)], ids=["gd", "newton"])
def test_train_ensemble_jax_equals_numpy(kw):
    _jax()
    from effth.simulation import train_ensemble
    net = MLP("tanh", depth=3, widths=10)
    y = np.array([0.5, -0.3, 0.1])
    args = dict(updates=12, networks=6, seed=4, X_test=0.5 * X3[:2], record_every=4, **kw)
    a = train_ensemble(net, X3, y, **args)
    b = train_ensemble(net, X3, y, backend="jax", batch=4, **args)     # other chunks: same nets
    for name in ("f_train", "f_test", "loss") + (("ntk",) if kw.get("record_ntk") else ()):
        assert _rel(getattr(a, name), getattr(b, name)) <= 1e-12, name
    assert _rel(a.f_train[:, 0], a.f_train[:, -1]) > 1e-2           # the networks did move


def test_train_ensemble_jax_singular_newton():
    _jax()
    from effth.simulation import train_ensemble
    X = np.array([[1.0, 0.5], [1.0, 0.5], [0.2, -0.3]])            # duplicate inputs
    with pytest.raises(DomainError, match="singular"):
        train_ensemble(MLP("tanh", depth=2, widths=4), X, np.array([0.1, 0.2, 0.3]), updates=2,
                       networks=3, eta=0.5, method="newton", backend="jax")


# ------------------------------------------------------------------- memory of the chunks
def test_chunk_memory_bound_and_the_million_network_plan(monkeypatch):
    """The per-chunk memory estimate bounds XLA's own analysis of the compiled chunk (arguments +
    temporaries) for width 512 at depth 5, and it grows linearly in the chunk; so 10^6 such
    networks on a 139 GiB accelerator run in chunks that each fit a quarter of its memory."""
    _jax()
    import jax
    from effth.simulation import _kernels as K
    from effth.simulation._backend import Backend, resolve
    from effth.simulation._jackknife import group_units
    from effth.simulation.ensemble import _chunk_size
    net = MLP("tanh", depth=5, widths=512)
    X = np.random.default_rng(0).standard_normal((4, 16))
    widths = net.layer_widths(16)
    c_w = tuple(net.c_w_at(k) for k in range(1, 6))
    c_b = tuple(net.c_b_at(k) for k in range(1, 6))
    plan = K.Plan(widths=widths, c_w=c_w, c_b=c_b, sigma=None, X=X,
                  G1=c_b[0] + c_w[0] * X @ X.T / 16, last=5, layers=frozenset(range(1, 6)),
                  method="weights", keep=False, gamma=(0.0,) * 5, xi=(1.0,) * 5)
    used = {}
    for draws, m in (("host", 8), ("device", 8), ("device", 16)):
        be = resolve("jax", draws)
        with be.scope():
            fn = K.device_chunk(plan, be, net.act, m)
            src = ([jax.ShapeDtypeStruct(s, np.float64) for s in K.draw_shapes(plan, m)]
                   if draws == "host" else be.key(np.random.default_rng(0)))
            ma = fn.lower(be.put(X), be.put(plan.G1), be.put(np.zeros((1, 1))), src,
                          be.put(np.ones(m))).compile().memory_analysis()
        used[draws, m] = ma.argument_size_in_bytes + ma.temp_size_in_bytes
        assert used[draws, m] <= K.chunk_bytes(plan, m, draws == "device"), (draws, m)
        assert used[draws, m] >= 0.3 * K.chunk_bytes(plan, m, draws == "device")   # not vacuous
    assert used["device", 16] <= 2.1 * used["device", 8]                        # linear in m
    budget = 0.25 * 139 * 2 ** 30
    monkeypatch.setattr(Backend, "chunk_bytes", lambda self: budget)
    for draws in ("host", "device"):
        be = resolve("jax", draws)
        bsz = _chunk_size(plan, be, None)
        _, units = group_units(10 ** 6, bsz)
        m_pad = max(u[2] for u in units)
        assert K.chunk_bytes(plan, m_pad, draws == "device") <= budget
        assert K.chunk_elements(plan, m_pad) <= 2 ** 31 - 1
        assert sum(u[2] for u in units) == 10 ** 6 and len(units) <= 2000
