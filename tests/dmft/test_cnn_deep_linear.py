"""The closed form of deep linear CNNs (effth.dmft.solve_cnn_deep_linear, B&P 2022 app. G with
phi(h) = h): the pixel-resolved dense solution equals, for circular pooled CNNs, the deep linear
MLP on pixel-mean images (solve_deep_linear, an independent derivation) to round-off; it agrees
with the Monte-Carlo CNN DMFT with a linear activation within its standard errors; trained linear
CNNs approach it like 1/width."""

import numpy as np
import pytest

import effth as et
from effth.arch import CNN
from effth.dmft import solve_cnn_deep_linear, solve_cnn_monte_carlo
from effth.dmft.solvers.lazy import static_ntk_dynamics
from effth.errors import DomainError
from effth.simulation import train_cnn

Y = np.array([1.0, -1.0, 0.5, -0.5])


def _x():
    return np.random.default_rng(4).standard_normal((5, 6, 2))       # 1-D, 6 pixels, 2 channels


def _net(gamma0=2.0, **kw):
    return CNN("linear", depth=3, filter_size=3, dims=1, parameterization="mup", gamma0=gamma0,
               **kw)


def _eta(net, X):
    return 0.8 / np.linalg.eigvalsh(et.cnn_kernels(net, X).value("Theta")[:4, :4])[-1]


def test_circular_pooled_linear_cnn_is_the_deep_linear_mlp_on_pixel_means():
    """Dense pixel-resolved solve vs solve_deep_linear on xbar xbar^T / C_0: f, the NTK, the
    pixel-mean Phi and |P|^2 G agree to 1e-12; at 0.9 gamma0 they do not."""
    X, T = _x(), 10
    net = _net(1.0)
    eta = _eta(net, X)
    a = solve_cnn_deep_linear(net, X[:4], Y, X_test=X[4:], eta=eta, steps=T)
    b = solve_cnn_deep_linear(net, X[:4], Y, X_test=X[4:], eta=eta, steps=T, reduce=True)
    assert a.method == "deep_linear" and a.diagnostics.residuals[-1] < 1e-11
    scale = np.abs(b.f).max()
    assert np.abs(a.f - b.f).max() < 1e-12 * scale
    assert np.abs(a.ntk - b.ntk).max() < 1e-12 * np.abs(b.ntk).max()
    phi = a.phi.reshape(2, T, 5, 6, T, 5, 6).mean(axis=(3, 6))
    assert np.abs(phi - b.phi).max() < 1e-12 * np.abs(b.phi).max()
    g = 36 * a.g.reshape(2, T, 5, 6, T, 5, 6)
    assert np.abs(g - b.g[:, :, :, None, :, :, None]).max() < 1e-12 * np.abs(b.g).max()
    c = solve_cnn_deep_linear(_net(0.9), X[:4], Y, X_test=X[4:], eta=eta, steps=T, reduce=True)
    assert np.abs(c.f - b.f).max() > 1e-4 * scale
    assert np.abs(b.f - static_ntk_dynamics(b.ntk[0], Y, eta, T)).max() > 1e-2 * scale


@pytest.mark.parametrize("padding", ["same", "valid"])
def test_closed_form_is_the_linear_monte_carlo_cnn_dmft(padding):
    """'same' or 'valid' padding and flatten (no reduction): the Monte-Carlo CNN DMFT with a
    linear activation agrees with the closed form within 4.5 standard errors (replicas) on every
    image and step; the lazy CNTK dynamics are rejected."""
    X, T = _x(), 6
    net = _net(2.0, padding=padding, readout="flatten", c_w=1.5, c_b=0.1)
    eta = _eta(net, X)
    a = solve_cnn_deep_linear(net, X[:4], Y, X_test=X[4:], eta=eta, steps=T)
    r = solve_cnn_monte_carlo(net, X[:4], Y, X_test=X[4:], eta=eta, steps=T, samples=1600,
                              iterations=20, replicas=6, seed=1)
    print(f"|z| <= {(np.abs(a.f - r.f)[1:] / r.stderr('f')[1:]).max():.2f}")
    se = r.stderr("f")[1:]
    assert (np.abs(a.f - r.f)[1:] / se).max() < 4.5
    lazy = static_ntk_dynamics(et.cnn_kernels(net, X).value("Theta"), Y, eta, T)
    assert (np.abs(lazy - r.f)[1:] / se).max() > 6
    assert np.abs(a.ntk - r.ntk).max() < 0.05 * np.abs(a.ntk).max()


def test_bad_input():
    X = _x()
    with pytest.raises(DomainError, match="identity activation"):
        solve_cnn_deep_linear(CNN("tanh", depth=3, dims=1, parameterization="mup", gamma0=1.0),
                              X[:4], Y, eta=0.1, steps=3)
    with pytest.raises(DomainError, match="reduce=True is exact"):
        solve_cnn_deep_linear(_net(padding="same"), X[:4], Y, eta=0.1, steps=3, reduce=True)
    with pytest.raises(DomainError, match="reduce=True is exact"):
        solve_cnn_deep_linear(_net(c_w=2.0), X[:4], Y, eta=0.1, steps=3, reduce=True)
    with pytest.raises(DomainError, match="one output"):
        solve_cnn_deep_linear(_net(n_out=2), X[:4], Y, eta=0.1, steps=3)
    with pytest.raises(DomainError, match="tol"):
        solve_cnn_deep_linear(_net(), X[:4], Y, eta=0.1, steps=3, tol=0.0)


def test_trained_linear_cnns_approach_the_closed_form_like_one_over_width(opt_in_slow):
    """'same' padding, flatten readout, gamma0 = 2: D(n), one trained network's mean squared
    deviation of its outputs from the closed form (every image and step), falls like 1/n:
    fitted slope -1 within 0.3 and 4 standard errors."""
    X, T = _x(), 8
    net = _net(2.0, padding="same", readout="flatten", c_w=1.5, c_b=0.1)
    eta = _eta(net, X)
    a = solve_cnn_deep_linear(net, X[:4], Y, X_test=X[4:], eta=eta, steps=T)
    widths, D, D_se = (32, 64, 128, 256), [], []
    for n in widths:
        run = train_cnn(_net(2.0, padding="same", readout="flatten", c_w=1.5, c_b=0.1, widths=n),
                        X[:4], Y, X_test=X[4:], eta=eta, updates=T - 1, networks=256, seed=n)
        f = np.concatenate([run.f_train, run.f_test], axis=2)[:, 1:]
        per = np.mean((f - a.f[None, 1:]) ** 2, axis=(1, 2))
        D.append(per.mean())
        D_se.append(per.std(ddof=1) / np.sqrt(per.size))
        print(f"n={n}: D = {D[-1]:.3e} +- {D_se[-1]:.2e}; ensemble-mean gap "
              f"{np.abs(f.mean(axis=0) - a.f[1:]).max():.2e}")
    lx, ly, w = np.log(widths), np.log(D), (np.asarray(D) / np.asarray(D_se)) ** 2
    A = np.stack([np.ones_like(lx), lx], axis=1)
    cov = np.linalg.inv(A.T @ (A * w[:, None]))
    s, e = (cov @ A.T @ (w * ly))[1], np.sqrt(cov[1, 1])
    print(f"D(n) ~ n^({s:.2f} +- {e:.2f})")
    assert abs(s + 1) < 0.3 and abs(s + 1) < 4 * e
