"""The CNN DMFT (effth.dmft.solve_cnn_monte_carlo, B&P 2022 app. G): exact reductions (the patch
adjoint, the initial NTK = cnn_kernels' Theta, 1x1 filters on one-pixel images = the MLP
Monte-Carlo DMFT), the lazy limit, and trained CNNs (train_cnn) as ground truth."""

import numpy as np
import pytest

import effth as et
from effth.arch import CNN
from effth.dmft import solve_cnn_monte_carlo
from effth.dmft.solvers.cnn import _initial_state, _Ops, patch_adjoint
from effth.dmft.solvers.lazy import static_ntk_dynamics
from effth.errors import DomainError
from effth.pdlt.cnn import patch_average
from effth.simulation import train_cnn

P = 4
Y = np.array([1.0, -1.0, 0.5, -0.5])


def _images(seed=4):
    return np.random.default_rng(seed).standard_normal((6, 6, 2))     # 1-D, 6 pixels, 2 channels


def _net(gamma0, **kw):
    return CNN("tanh", depth=3, filter_size=3, dims=1, c_w=1.5, c_b=0.1,
               parameterization="mup", gamma0=gamma0, **kw)


@pytest.mark.parametrize("padding", ["circular", "same", "valid"])
@pytest.mark.parametrize("filt, shape", [((3,), (6,)), ((2,), (5,)), ((4,), (6,)), ((3, 2), (5, 4))])
def test_patch_adjoint_is_the_adjoint(padding, filt, shape):
    rng = np.random.default_rng(0)
    A = rng.standard_normal((2, *shape, 2, *shape))
    out = patch_average(A, filt, padding).shape[1:1 + len(shape)]        # 'valid' shrinks
    B = rng.standard_normal((2, *out, 2, *out))
    assert patch_adjoint(B, filt, padding).shape == A.shape
    lhs = np.sum(patch_average(A, filt, padding) * B)
    rhs = np.sum(A * patch_adjoint(B, filt, padding))
    assert abs(lhs - rhs) < 1e-12 * np.sqrt(np.sum(A ** 2) * np.sum(B ** 2))
    assert abs(lhs - 0.9 * rhs) > 1e-6 * abs(lhs)


@pytest.mark.parametrize("readout", ["gap", "flatten"])
@pytest.mark.parametrize("padding", ["circular", "same", "valid"])
@pytest.mark.parametrize("act", ["tanh", "relu"])
def test_initial_ntk_is_the_cntk(readout, padding, act):
    """Phi_out + sum_l sum_ij G^l K^l_in at initialization (G^l from the adjoint patch operator,
    top down) equals cnn_kernels' Theta (the forward CNTK recursion) to 1e-12."""
    X = np.random.default_rng(1).standard_normal((3, 7, 2))        # 'valid': 7 -> 5 -> 3 -> 1
    net = CNN(act, depth=4, filter_size=3, dims=1, padding=padding, readout=readout, c_w=1.5,
              c_b=0.1, parameterization="mup", gamma0=1.0)
    _, _, ntk = _initial_state(net, X, _Ops(net, (7,), 3, 2))
    Th = et.cnn_kernels(net, X).value("Theta")
    assert np.max(np.abs(ntk - Th)) < 1e-12 * np.max(np.abs(Th))


@pytest.mark.parametrize("readout", ["gap", "flatten"])
def test_one_by_one_filters_on_one_pixel_images_are_the_mlp_dmft(readout):
    """1x1 filters on one-pixel images with C_0 channels are an MLP on C_0 inputs: the CNN solver
    reproduces solve_monte_carlo (Stein responses, one replica, the same seed, its eigh
    sampler) draw for draw."""
    X = np.random.default_rng(0).standard_normal((4, 3))
    net = CNN("erf", depth=3, filter_size=1, dims=1, readout=readout, parameterization="mup",
              gamma0=1.0)
    kw = dict(eta=0.2, steps=8, samples=400, iterations=6, replicas=1, seed=3)
    a = solve_cnn_monte_carlo(net, X[:, None, :], Y, sampler="eigh", **kw)
    b = et.dmft.solve_monte_carlo(X, Y, depth=3, gamma0=1.0, activation="erf",
                                  responses="stein", **kw)
    for name in ("f", "phi", "g", "ntk"):
        assert np.allclose(a.value(name), b.value(name), rtol=0, atol=1e-7), name
    assert np.allclose(a.A, b.A, atol=1e-7) and np.allclose(a.B, b.B, atol=1e-7)
    assert np.abs(a.f - static_ntk_dynamics(b.ntk[0], Y, 0.2, 8)).max() > 1e-3  # features move


@pytest.fixture(scope="module")
def setup():
    X = _images()
    Th = et.cnn_kernels(_net(1.0), X).value("Theta")
    eta, T = 0.6 / np.linalg.eigvalsh(Th[:P, :P])[-1], 10      # eta lambda_max(K(t, t)) <= 1.3
    return X, Th, eta, T


def test_small_gamma0_is_the_lazy_cntk_dynamics(setup):
    """gamma0 = 0.02: the solution is lazy GD on cnn_kernels' Theta within 4.5 Monte-Carlo
    standard errors (replicas); Theta x0.9 is rejected.  (The eigh sampler: the draws of the
    seed this test was set with; the Cholesky sampler is checked against it below.)"""
    X, Th, eta, T = setup
    r = solve_cnn_monte_carlo(_net(0.02), X[:P], Y, X_test=X[P:], eta=eta, steps=T,
                              samples=2000, iterations=4, replicas=4, seed=1, sampler="eigh")
    se = r.stderr("f")[1:]
    z = np.abs(r.f - static_ntk_dynamics(Th, Y, eta, T))[1:] / se
    assert z.max() < 4.5, z.max()
    assert (np.abs(r.f - static_ntk_dynamics(0.9 * Th, Y, eta, T))[1:] / se).max() > 6
    assert np.allclose(r.ntk[0], Th, rtol=0.05)


@pytest.mark.slow
def test_cholesky_sampler_agrees_with_the_eigh_sampler(setup, opt_in_slow):
    """Opt-in (about a minute; the draws' covariance test below carries the power against a
    wrong law, this one only against effects the size of feature learning).  The default sampler (layer 1's source repeated in time, the readout's source from its
    one number, pivoted Cholesky factors) and the eigh square roots draw the same law: at
    gamma0 = 1 the two solutions agree within 4.5 combined standard errors (8 replicas each,
    independent seeds) on every image and step, while both reject the lazy CNTK dynamics."""
    X, Th, eta, T = setup
    kw = dict(X_test=X[P:], eta=eta, steps=T, samples=1600, iterations=6, replicas=8)
    a = solve_cnn_monte_carlo(_net(1.0), X[:P], Y, seed=11, **kw)
    b = solve_cnn_monte_carlo(_net(1.0), X[:P], Y, seed=12, sampler="eigh", **kw)
    se = np.sqrt(a.stderr("f") ** 2 + b.stderr("f") ** 2)[1:]
    assert (np.abs(a.f - b.f)[1:] / se).max() < 4.5
    lazy = static_ntk_dynamics(Th, Y, eta, T)
    for r in (a, b):
        assert (np.abs(r.f - lazy)[1:] / r.stderr("f")[1:]).max() > 6
    with pytest.raises(DomainError, match="sampler"):
        solve_cnn_monte_carlo(_net(1.0), X[:P], Y, sampler="svd", **kw)


def test_source_draws_have_the_source_covariances(setup):
    """The draws of every source (layer 1 repeated in time, the readout's number, the pivoted
    Cholesky factor of the singular time-constant initial kernels, the plain Cholesky factor of
    a definite one) have the kernel as covariance within 5.5 standard errors of each entry, and
    0.9 times the kernel is rejected."""
    from effth.dmft.solvers.cnn import _draw, _factor
    X, _, _, _ = setup
    net = _net(1.0)
    ops = _Ops(net, (6,), 6, 3)
    Phi0, G0, _ = _initial_state(net, X, ops)
    K2, G1 = ops.k_in(Phi0[0], 2), ops.g_in(G0[1], 1)
    rng = np.random.default_rng(7)
    n = 20000
    cases = [(ops.draw_k_in(rng, 1, None, n), np.tile(ops.k_in1, (3, 3))),
             (ops.draw_k_in(rng, 2, K2, n), K2), (ops.draw_g_in(rng, 1, G1, n), G1),
             (ops.draw_g_in(rng, 2, None, n), ops.g_top)]
    Kpd = K2 + 0.3 * np.eye(K2.shape[0])
    cases.append((_draw(rng, _factor(Kpd), n), Kpd))
    for x, K in cases:
        C = x.T @ x / n
        d = np.diag(K)
        se = np.sqrt((np.outer(d, d) + K ** 2) / n)
        assert np.max(np.abs(C - K) / se) < 5.5
        assert np.max(np.abs(C - 0.9 * K) / se) > 6


def test_solver_patch_operators_are_patch_average_and_its_adjoint():
    """The solver applies A and A^T axis by axis as matrix products: equal to patch_average and
    patch_adjoint (offset by offset) to rounding, for every padding, 1-D and 2-D filters."""
    rng = np.random.default_rng(0)
    for padding in ("circular", "same", "valid"):
        for filt, shape in (((3,), (6,)), ((2,), (5,)), ((3, 2), (5, 4))):
            net = CNN("tanh", depth=3, filter_size=filt, dims=len(shape), padding=padding,
                      parameterization="mup", gamma0=1.0)
            ops = _Ops(net, shape, 3, 2)
            for ell in (1, 2):
                M = rng.standard_normal((2 * ops.ms[ell - 1],) * 2)
                ref = patch_average(ops._pix(M, ell - 1), filt, padding)
                assert np.abs(ops.patch(M, ell) - ref.reshape(ops.patch(M, ell).shape)).max() < 1e-13
                N = rng.standard_normal((2 * ops.ms[ell],) * 2)
                ref = patch_adjoint(ops._pix(N, ell), filt, padding).reshape(M.shape)
                assert np.abs(ops.adjoint(N, ell) - ref).max() < 1e-13
                assert np.abs(ops.adjoint(N, ell) - 0.9 * ref).max() > 1e-3


def test_trained_cnns_agree_with_the_dmft(setup):
    """gamma0 = 1: 64 trained CNNs of 64 channels agree with the DMFT within 4.5 combined standard
    errors on every image and step, while the lazy CNTK dynamics are rejected by both."""
    X, Th, eta, T = setup
    r = solve_cnn_monte_carlo(_net(1.0), X[:P], Y, X_test=X[P:], eta=eta, steps=T,
                              samples=1200, iterations=8, replicas=4, seed=2)
    run = train_cnn(_net(1.0, widths=64), X[:P], Y, X_test=X[P:], eta=eta, updates=T - 1,
                    networks=64, seed=5)
    f = np.concatenate([run.f_train, run.f_test], axis=2)
    se = np.sqrt(r.stderr("f") ** 2 + (f.std(axis=0, ddof=1) / np.sqrt(f.shape[0])) ** 2)[1:]
    assert (np.abs(f.mean(axis=0) - r.f)[1:] / se).max() < 4.5
    lazy = static_ntk_dynamics(Th, Y, eta, T)
    assert (np.abs(f.mean(axis=0) - lazy)[1:] / se).max() > 6
    assert (np.abs(r.f - lazy)[1:] / r.stderr("f")[1:]).max() > 6


def test_valid_padding_agrees_with_trained_cnns(setup):
    """'valid' padding (6 -> 4 -> 2 pixels), gamma0 = 1: 64 trained CNNs of 64 channels agree
    with the DMFT within 4.5 combined standard errors on every image and step, the lazy CNTK
    dynamics are rejected; the layers' kernels keep their own pixel grids."""
    X, _, _, T = setup
    net = _net(1.0, padding="valid")
    Th = et.cnn_kernels(net, X).value("Theta")
    eta = 0.6 / np.linalg.eigvalsh(Th[:P, :P])[-1]
    r = solve_cnn_monte_carlo(net, X[:P], Y, X_test=X[P:], eta=eta, steps=T, samples=1200,
                              iterations=8, replicas=4, seed=2)
    assert r.layer_shapes == ((4,), (2,))
    assert r.value("phi", layer=2, pixels=True).shape == (T, 6, 2, T, 6, 2)
    assert r.stderr("phi", layer=1).shape == r.value("phi", layer=1).shape == (T, 24, T, 24)
    run = train_cnn(_net(1.0, padding="valid", widths=64), X[:P], Y, X_test=X[P:], eta=eta,
                    updates=T - 1, networks=64, seed=5)
    f = np.concatenate([run.f_train, run.f_test], axis=2)
    se = np.sqrt(r.stderr("f") ** 2 + (f.std(axis=0, ddof=1) / np.sqrt(f.shape[0])) ** 2)[1:]
    assert (np.abs(f.mean(axis=0) - r.f)[1:] / se).max() < 4.5
    lazy = static_ntk_dynamics(Th, Y, eta, T)
    assert (np.abs(f.mean(axis=0) - lazy)[1:] / se).max() > 6
    assert (np.abs(r.f - lazy)[1:] / r.stderr("f")[1:]).max() > 6


def test_bad_input():
    X = _images()[:P]
    with pytest.raises(DomainError, match="parameterization='mup'"):
        solve_cnn_monte_carlo(CNN("tanh", depth=3, dims=1), X, Y, eta=0.1, steps=3)
    with pytest.raises(DomainError, match="one output"):
        solve_cnn_monte_carlo(_net(1.0, n_out=2), X, Y, eta=0.1, steps=3)
    with pytest.raises(DomainError, match="equal shapes"):
        solve_cnn_monte_carlo(_net(1.0), X, Y, X_test=np.ones((2, 5, 2)), eta=0.1, steps=3)
    with pytest.raises(DomainError, match="larger than"):
        solve_cnn_monte_carlo(_net(1.0), X[:, :2], Y, eta=0.1, steps=3)
    with pytest.raises(DomainError, match="y must have shape"):
        solve_cnn_monte_carlo(_net(1.0), X, Y[:3], eta=0.1, steps=3)
    with pytest.raises(DomainError, match="stability"):
        solve_cnn_monte_carlo(_net(1.0), X, Y, eta=100.0, steps=3)
    with pytest.raises(DomainError, match="effth.CNN"):
        solve_cnn_monte_carlo(et.MLP("tanh", depth=3), X, Y, eta=0.1, steps=3)
    with pytest.raises(DomainError, match="padding"):
        patch_adjoint(np.ones((1, 3, 1, 3)), (3,), "reflect")
    with pytest.raises(DomainError, match="larger than"):
        solve_cnn_monte_carlo(CNN("tanh", depth=4, filter_size=3, dims=1, padding="valid",
                                  parameterization="mup", gamma0=1.0), X[:, :4], Y, eta=0.1,
                              steps=3)


def test_trained_cnns_approach_the_dmft_like_one_over_width(opt_in_slow, setup):
    """Trained CNNs (gamma0 = 1, 256 networks per width, n = 16..256 channels) against a precise
    DMFT solve (32000 draws in 16 replicas), with a step that keeps GD stable along the run.
    D(n), one network's mean squared deviation of its outputs from the DMFT (every image and
    step, the DMFT's own variance removed), falls like 1/n (finite-width fluctuations; the
    measure of tests/dmft/test_vs_simulation.py): fitted slope -1 within 0.3 and 4 standard
    errors (measured -0.95 +- 0.02).  The squared ensemble-mean gap, noise removed, falls more
    than 10-fold and is within 4.5 standard errors of zero at n = 256."""
    X, Th, eta, T = setup
    r = solve_cnn_monte_carlo(_net(1.0), X[:P], Y, X_test=X[P:], eta=eta, steps=T,
                              samples=32000, iterations=10, replicas=16, seed=7)
    v_th = (r.stderr("f") ** 2)[1:]
    widths, D, D_se, gaps, gap_se = (16, 32, 64, 128, 256), [], [], [], []
    for n in widths:
        run = train_cnn(_net(1.0, widths=n), X[:P], Y, X_test=X[P:], eta=eta, updates=T - 1,
                        networks=256, seed=n)
        f = np.concatenate([run.f_train, run.f_test], axis=2)[:, 1:]
        per = np.mean((f - r.f[None, 1:]) ** 2, axis=(1, 2)) - np.mean(v_th)
        D.append(per.mean())
        D_se.append(per.std(ddof=1) / np.sqrt(per.size))
        d = f.mean(axis=0) - r.f[1:]
        v = f.var(axis=0, ddof=1) / f.shape[0] + v_th
        gaps.append(np.mean(d ** 2 - v))
        gap_se.append(np.sqrt(np.sum(4 * d ** 2 * v + 2 * v ** 2)) / d.size)
        print(f"n={n}: D = {D[-1]:.3e} +- {D_se[-1]:.2e}; squared ensemble-mean gap "
              f"{gaps[-1]:.3e} +- {gap_se[-1]:.2e}")

    def slope(y, se):
        lx, ly, w = np.log(widths), np.log(y), (np.asarray(y) / np.asarray(se)) ** 2
        A = np.stack([np.ones_like(lx), lx], axis=1)
        cov = np.linalg.inv(A.T @ (A * w[:, None]))
        return (cov @ A.T @ (w * ly))[1], np.sqrt(cov[1, 1])

    sD, eD = slope(D, D_se)
    print(f"D(n) ~ n^({sD:.2f} +- {eD:.2f})")
    assert abs(sD + 1) < 0.3 and abs(sD + 1) < 4 * eD
    if all(g > 3 * e for g, e in zip(gaps, gap_se)):
        sg, eg = slope(gaps, gap_se)
        print(f"squared ensemble-mean gap ~ n^({sg:.2f} +- {eg:.2f})")
    assert gaps[-1] < gaps[0] / 10 and gaps[-1] < 4.5 * gap_se[-1]


def test_adaptive_sweeps_use_the_mlp_drift_test():
    """``iterations=None`` drives the replicas with the drift test of ``solve_monte_carlo``
    (shared code); ``iterations=15`` stays the default here."""
    X = _images()
    kw = dict(eta=0.2, steps=3, samples=200, seed=1)
    r = solve_cnn_monte_carlo(_net(1.0), X[:P], Y, iterations=None, **kw)
    d = r.diagnostics
    assert d.converged is True and d.iterations == len(d.drift) >= 12
    assert d.drift[-1] < d.drift_z == 2.5 and "standard errors" in d.criterion
    assert solve_cnn_monte_carlo(_net(1.0), X[:P], Y, **kw).diagnostics.iterations == 15
    with pytest.raises(DomainError, match="replicas >= 2"):
        solve_cnn_monte_carlo(_net(1.0), X[:P], Y, iterations=None, replicas=1, **kw)
    with pytest.raises(DomainError, match="max_iterations"):
        solve_cnn_monte_carlo(_net(1.0), X[:P], Y, iterations=None, max_iterations=11, **kw)
