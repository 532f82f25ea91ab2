"""Random finite-channel CNNs (effth.simulation.cnn) against the infinite-channel kernels.

Three corners: (a) effth.pdlt.cnn_kernels; (b) exact statements at any width -- the
preactivations of layer 1 are Gaussian, so the mean of the layer-2 kernel, and of the output
kernel and NTK of a network with one convolution, equal the infinite-width values exactly; the
backpropagated NTK equals finite differences of the network function; (c) measured: ensembles of
random CNNs, within 5 standard errors, a wrong theory (x0.9) rejected, and the mean squared
deviation of one network's kernels from the theory falling like 1/width (fitted slope).
"""

from __future__ import annotations

import numpy as np
import pytest

import effth as et
from effth.arch import CNN
from effth.errors import DomainError
from effth.simulation import simulate_cnn_ensemble
from effth.simulation import cnn as sc


def _fd_ntk(net, X, seed=1, eps=1e-6):
    """Empirical NTK of one network from central finite differences of f in every NTK-normalized
    parameter (omega, beta), times gamma^2 for 'mup' (rates in units of eta)."""
    Xa = net.images(X)
    shapes = net.spatial_shapes(Xa.shape[1:-1])
    fns = (np.tanh, lambda z: 1 - np.tanh(z) ** 2)
    r = np.random.default_rng(seed)
    params = sc._init(net, Xa.shape[-1], 1, r)
    ro = sc._readout_init(net, int(np.prod(shapes[-1])), 1, r)
    f, _, fw = sc._forward(net, params, ro, Xa, fns, True)
    H = sc._ntk(net, params, ro, fw, fns)[0]
    flat = [p for pair in params for p in pair] + list(ro)
    J = []
    for k, p in enumerate(flat):
        if k % 2 == 1 and net.c_b_at(k // 2 + 1) == 0:
            continue                      # no bias in this layer
        for idx in np.ndindex(p.shape):
            old = p[idx]
            p[idx] = old + eps
            fp = sc._forward(net, params, ro, Xa, fns, False)[0]
            p[idx] = old - eps
            fm = sc._forward(net, params, ro, Xa, fns, False)[0]
            p[idx] = old
            J.append(((fp - fm) / (2 * eps))[0])
    J = np.array(J)
    g2 = 1.0 if net.parameterization == "ntk" else net.gamma0 ** 2 * net.widths[-1]
    return H, np.einsum("kpo,kqo->pq", J, J) / net.n_out * g2


@pytest.mark.parametrize("dims, shape, filt, padding, readout, par", [
    (1, (6,), 3, "circular", "gap", "ntk"),
    (1, (7,), 2, "same", "flatten", "mup"),
    (2, (5, 4), (3, 2), "valid", "gap", "mup"),
    (2, (4, 4), 3, "same", "gap", "ntk"),
    (2, (3, 4), (2, 3), "circular", "flatten", "ntk"),
])
def test_backpropagated_ntk_equals_finite_differences(dims, shape, filt, padding, readout, par):
    X = np.random.default_rng(0).standard_normal((3, *shape, 2))
    net = CNN("tanh", depth=3, widths=3, filter_size=filt, dims=dims, padding=padding,
              readout=readout, c_w=1.5, c_b=0.1, parameterization=par,
              gamma0=0.7 if par == "mup" else None, n_out=2)
    H, Hfd = _fd_ntk(net, X)
    np.testing.assert_allclose(H, Hfd, rtol=1e-7, atol=1e-9 * np.abs(Hfd).max())


def test_mup_is_the_ntk_network_with_output_over_gamma():
    X = np.random.default_rng(0).standard_normal((3, 5))
    kw = dict(depth=3, widths=8, filter_size=3, dims=1, c_w=1.2, c_b=0.1)
    a = simulate_cnn_ensemble(CNN("erf", **kw), X, networks=8, seed=3, keep=True)
    b = simulate_cnn_ensemble(CNN("erf", parameterization="mup", gamma0=0.5, **kw), X,
                              networks=8, seed=3, keep=True)
    gamma2 = 0.25 * 8
    np.testing.assert_allclose(b.value("K") * gamma2, a.value("K"), rtol=1e-12)
    np.testing.assert_allclose(b.samples["Theta", 3], a.samples["Theta", 3], rtol=1e-12)
    np.testing.assert_allclose(b.value("K", layer=2), a.value("K", layer=2), rtol=1e-12)


def _max_z(theory, sim, name, layer, scale=1.0):
    c = et.compare(scale * theory.value(name, layer=layer), sim.value(name, layer=layer), name,
                   stderr=sim.stderr(name, layer=layer))
    return float(np.max(np.abs(c.z)))


@pytest.mark.parametrize("act, dims, shape, filt, padding, readout", [
    ("erf", 1, (6,), 3, "circular", "gap"),
    ("relu", 2, (4, 4), 3, "same", "flatten"),
    ("tanh", 2, (5, 6), (2, 3), "valid", "gap"),
])
def test_exact_means_at_small_width(act, dims, shape, filt, padding, readout):
    """Layer 1 is Gaussian at any width: the means of K^(2), and of the output K and Theta of a
    one-convolution network, are the infinite-width values at n = 4 channels."""
    X = np.random.default_rng(1).standard_normal((3, *shape))
    kw = dict(filter_size=filt, dims=dims, padding=padding, readout=readout, c_w=1.6, c_b=0.1)
    deep = CNN(act, depth=3, widths=4, **kw)
    shallow = CNN(act, depth=2, widths=4, **kw)
    sim_d = simulate_cnn_ensemble(deep, X, networks=3000, seed=10, ntk=False)
    sim_s = simulate_cnn_ensemble(shallow, X, networks=20000, seed=11)
    th_d, th_s = et.cnn_kernels(deep, X, ntk=False), et.cnn_kernels(shallow, X)
    checks = [(th_d, sim_d, "K", 1), (th_d, sim_d, "K", 2), (th_s, sim_s, "K", 2),
              (th_s, sim_s, "Theta", 2)]
    for th, sim, name, layer in checks:
        assert _max_z(th, sim, name, layer) < 5.0, (name, layer)
    # the wrong theory (x0.9) is rejected by the same data
    for th, sim, name, layer in checks[1:]:
        assert _max_z(th, sim, name, layer, scale=0.9) > 8.0, (name, layer)


def test_deep_network_agrees_at_large_width():
    X = np.random.default_rng(2).standard_normal((2, 6, 2))
    net = CNN("tanh", depth=4, widths=64, filter_size=3, dims=1, c_w=1.5, c_b=0.1)
    sim = simulate_cnn_ensemble(net, X, networks=300, seed=5)
    th = et.cnn_kernels(net, X)
    for name, layer in (("K", 3), ("K", 4), ("Theta", 4)):
        assert _max_z(th, sim, name, layer) < 5.0, (name, layer)
    assert _max_z(th, sim, "Theta", 4, scale=0.9) > 8.0


def _mse(sample, theory):
    d = ((sample - theory[None]) ** 2).reshape(sample.shape[0], -1).mean(axis=1)
    return d.mean(), d.std(ddof=1) / np.sqrt(d.size)


def test_single_network_kernels_concentrate_like_one_over_width():
    """E|Theta_hat - Theta|^2 and E|G_hat^(3) - K^(3)|^2 over one network fall like 1/n
    (variance 1/n, squared bias 1/n^2): fitted slope -1 within 0.3 and 4 standard errors.  The
    same ensembles reject the wrong theory (x0.9) at the largest width (z-test of the mean) and
    accept the right one."""
    X = np.random.default_rng(3).standard_normal((2, 6))
    widths = (8, 16, 32, 64, 128)
    base = CNN("tanh", depth=4, filter_size=3, dims=1, c_w=1.5, c_b=0.1)
    th = et.cnn_kernels(base, X)
    keys = (("Theta", 4), ("K", 3))
    comps = {key: [] for key in keys}
    for n in widths:
        sim = simulate_cnn_ensemble(base.with_widths(n), X, networks=100, seed=n, keep=True)
        for key in keys:
            m, se = _mse(sim.samples[key], th.value(*key))
            comps[key].append(et.compare(np.zeros(1), np.array([m]), "mse", stderr=np.array([se])))
    for key in keys:
        fit = et.scaling_fit(comps[key], widths)
        assert abs(fit.slope + 1.0) < 0.3 and abs(fit.slope + 1.0) < 4 * fit.slope_stderr, (key, fit)
        assert _max_z(th, sim, *key) < 5.0, key
        assert _max_z(th, sim, *key, scale=0.9) > 8.0, key


def test_bad_calls():
    X = np.ones((2, 5))
    with pytest.raises(DomainError, match="widths"):
        simulate_cnn_ensemble(CNN("relu", depth=2, dims=1), X, networks=4)
    with pytest.raises(DomainError, match="networks"):
        simulate_cnn_ensemble(CNN("relu", depth=2, widths=3, dims=1), X, networks=1)
    with pytest.raises(DomainError, match="batch"):
        simulate_cnn_ensemble(CNN("relu", depth=2, widths=3, dims=1), X, networks=4, batch=0)
    with pytest.raises(DomainError, match="CNN"):
        simulate_cnn_ensemble(et.MLP("relu", depth=2, widths=3), X, networks=4)
    with pytest.raises(DomainError, match="larger than"):
        simulate_cnn_ensemble(CNN("relu", depth=2, widths=3, dims=1, filter_size=7), X, networks=4)
    with pytest.raises(DomainError, match="jump"):
        simulate_cnn_ensemble(CNN("step", depth=2, widths=3, dims=1), X, networks=4)
    sim = simulate_cnn_ensemble(CNN("step", depth=2, widths=3, dims=1), X, networks=4, ntk=False)
    with pytest.raises(DomainError, match="not measured"):
        sim.value("Theta")
    assert "CNNEnsembleStatistics" in repr(sim) and sim.layers == (1, 2)
