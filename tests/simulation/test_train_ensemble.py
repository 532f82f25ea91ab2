"""Ground truth of kernel learning: ensembles trained in the book's parameterization
(:func:`effth.simulation.train_ensemble`, PDLT ch. 7 and 10).

Every expected number is computed here from the definitions: the test's own forward pass with
complex-step derivatives, the test's own frozen-NTK formulas for linear networks, the exact
Gaussian law of a linear model after a Newton step (10.39)-(10.41), and the independent
simulator :func:`empirical_ntk`.
"""

from __future__ import annotations

import numpy as np
import pytest

import effth as et
from effth.errors import DomainError
from effth.simulation import TrainedEnsemble, empirical_ntk, init_params, train_ensemble

X = np.array([[1.0, 0.2, -0.4, 0.3], [0.3, -1.1, 0.5, 0.0], [-0.7, 0.4, 0.9, -0.5]])
XT = np.array([[0.5, 0.5, 0.1, 0.9], [-0.2, 0.8, -0.6, -0.4]])
Y = np.array([1.5, -2.0, 3.0])


# ------------------------------------------------------------------ the test's own network
def _forward(params, X, act):
    z = X @ params[0][0].T + params[0][1]
    for W, b in params[1:]:
        z = act(z) @ W.T + b
    return z


def _flat(params):
    return np.concatenate([np.concatenate([W.ravel(), b.ravel()]) for W, b in params])


def _unflat(theta, shapes):
    out, i = [], 0
    for sw, sb in shapes:
        W = theta[i:i + np.prod(sw)].reshape(sw)
        i += np.prod(sw)
        b = theta[i:i + np.prod(sb)].reshape(sb)
        i += np.prod(sb)
        out.append((W, b))
    return out


def _rates(params, lb, lw):
    """Diagonal learning-rate tensor (8.6): lambda_b per bias, lambda_W / n_{l-1} per weight."""
    return np.concatenate([np.concatenate([np.full(W.size, lw[k] / W.shape[1]),
                                           np.full(b.size, lb[k])])
                           for k, (W, b) in enumerate(params)])


def _complex_step(fun, theta, h=1e-30):
    """d fun / d theta by the complex step (exact to rounding for analytic fun)."""
    cols = []
    for k in range(theta.size):
        e = np.zeros(theta.size, dtype=complex)
        e[k] = 1j * h
        cols.append(np.imag(fun(theta + e)) / h)
    return np.stack(cols, axis=-1)


def _mse(z, y):
    return 0.5 * np.sum((z - y) ** 2)


def _ce(z, p):
    return -np.sum(p * (z - np.log(np.sum(np.exp(z), axis=1, keepdims=True))))


# ------------------------------------------------------------------ (1) NTK
@pytest.mark.parametrize("n_out", [1, 2])
def test_ntk_equals_empirical_ntk(n_out):
    """The NTK of the trained networks, H = sum lambda dz dz with lambda_W / n_{l-1} per weight
    (8.6)-(8.7), equals the independent simulator empirical_ntk with the same lambdas."""
    net = et.MLP("tanh", depth=3, widths=(5, 7), c_w=(1.2, 1.5, 0.9), c_b=0.1, n_out=n_out)
    lb, lw = (0.5, 1.0, 2.0), (1.5, 0.7, 1.1)
    params = init_params(net, 4, seed=1, networks=4)
    y = Y if n_out == 1 else np.stack([Y, -Y], axis=1)
    r = train_ensemble(net, X, y, X_test=XT, params=params, eta=1e-3, updates=1, lambda_b=lb,
                       lambda_w=lw, record_ntk=True)
    ref = empirical_ntk(params, np.vstack([X, XT]), net, lambda_b=lb, lambda_w=lw,
                        outputs=range(n_out), order=1).H        # (S, C, C, n, n)
    ref = ref.transpose(0, 3, 4, 1, 2)
    if n_out == 1:
        ref = ref[..., 0, 0]
    assert r.ntk.shape == (4, 2) + ref.shape[1:]
    np.testing.assert_allclose(r.ntk[:, 0], ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(r.value("ntk", step=0), ref.mean(axis=0), rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------------ (2) one step by hand
@pytest.mark.parametrize("loss,method", [("mse", "gd"), ("cross_entropy", "gd"), ("mse", "newton")])
def test_one_step_by_hand(loss, method):
    """One update of a tiny network recomputed from the definitions: the loss gradient by the
    complex step, theta <- theta - eta lambda dL/dtheta (7.11), (8.6); Newton (10.19), (10.25):
    theta <- theta - eta lambda J^T H^{-1} eps with H = J lambda J^T over all P n_out outputs."""
    net = et.MLP("tanh", depth=3, widths=(3, 4), c_w=1.4, c_b=0.2, n_out=2)
    lb, lw = (0.3, 0.8, 1.7), (1.2, 0.6, 2.0)
    params = init_params(net, 4, seed=5)                         # one network, no batch axis
    shapes = [(W.shape, b.shape) for W, b in params]
    act = np.tanh
    theta0 = _flat(params)
    lam = _rates(params, lb, lw)
    eta = 0.05 if method == "gd" else 0.7
    if loss == "mse":
        y = np.stack([Y, 0.5 * Y], axis=1)
        L = lambda th: _mse(_forward(_unflat(th, shapes), X, act), y)     # noqa: E731
    else:
        y = np.array([[0.2, 0.8], [0.6, 0.4], [1.0, 0.0]])
        L = lambda th: _ce(_forward(_unflat(th, shapes), X, act), y)      # noqa: E731
    if method == "gd":
        theta1 = theta0 - eta * lam * _complex_step(L, theta0)
    else:
        J = _complex_step(lambda th: _forward(_unflat(th, shapes), X, act).ravel(), theta0)
        eps = (_forward(params, X, act) - y).ravel()
        H = (J * lam) @ J.T
        theta1 = theta0 - eta * lam * (J.T @ np.linalg.solve(H, eps))
    p1 = _unflat(theta1, shapes)
    r = train_ensemble(net, X, y, X_test=XT, params=params, eta=eta, updates=1, lambda_b=lb,
                       lambda_w=lw, loss=loss, method=method)
    np.testing.assert_allclose(r.f_train[0, 0], _forward(params, X, act), rtol=0, atol=1e-13)
    np.testing.assert_allclose(r.f_train[0, 1], _forward(p1, X, act), rtol=0, atol=1e-10)
    np.testing.assert_allclose(r.f_test[0, 1], _forward(p1, XT, act), rtol=0, atol=1e-10)
    np.testing.assert_allclose(r.loss[0], [L(theta0), L(theta1)], rtol=1e-12, atol=1e-12)
    # the step matters: a rate of lambda_W (not lambda_W / n_{l-1}) would move the outputs
    assert np.max(np.abs(r.f_train[0, 1] - r.f_train[0, 0])) > 1e-3


# ------------------------------------------------------------------ (3) kernel regression
def _linear_kernels(G0, c_w, c_b, lb, lw):
    """Frozen NTK and kernel of a deep linear network, from (4.118) and (8.12)/(9.5) with
    sigma(z) = z (so <sigma sigma>_K = K, <sigma' sigma'>_K = 1):
    K^(1) = C_b + C_W G0, Theta^(1) = lb + lw G0,
    K^(l+1) = C_b + C_W K^(l), Theta^(l+1) = lb + lw K^(l) + C_W Theta^(l)."""
    K = c_b[0] + c_w[0] * G0
    T = lb[0] + lw[0] * G0
    for ell in range(1, len(c_w)):
        K, T = c_b[ell] + c_w[ell] * K, lb[ell] + lw[ell] * K + c_w[ell] * T
    return K, T


def _kernel_prediction(K, T, y, P):
    """Mean (10.40) and covariance (10.41) of the trained test outputs."""
    TA = T[:P, :P]
    TBA, KBA = T[P:, :P], K[P:, :P]
    m = TBA @ np.linalg.solve(TA, y)
    M = TBA @ np.linalg.inv(TA)
    cov = K[P:, P:] - KBA @ M.T - M @ KBA.T + M @ K[:P, :P] @ M.T
    return m, cov


def test_wide_linear_net_trained_long_gives_kernel_regression():
    """Depth 2 (one hidden layer), linear activation, width 256, 500 networks trained by GD to
    convergence: the ensemble mean of the test outputs equals kernel regression with the frozen
    NTK, m = Theta_BA Theta_AA^{-1} y (10.40), within 4.5 standard errors (the O(1/n) correction
    is below one), and 0.9 m is rejected; the covariance matches (10.41) within 5 jackknife SEs."""
    c_w, c_b, lb, lw = (1.3, 0.8), (0.2, 0.1), (0.5, 1.0), (1.2, 0.7)
    net = et.MLP("linear", depth=2, widths=256, c_w=c_w, c_b=c_b)
    Xall = np.vstack([X, XT])
    K, T = _linear_kernels(Xall @ Xall.T / X.shape[1], c_w, c_b, lb, lw)
    m, cov = _kernel_prediction(K, T, Y, 3)
    eta = 1.0 / np.linalg.eigvalsh(T[:3, :3])[-1]
    r = train_ensemble(net, X, Y, X_test=XT, eta=eta, updates=150, networks=500, seed=11,
                       lambda_b=lb, lambda_w=lw, record_every=50)
    assert list(r.recorded) == [0, 50, 100, 150]
    assert r.value("loss")[-1] < 1e-8 * r.value("loss")[0]
    z = (r.value("mean") - m) / r.stderr("mean")
    assert np.max(np.abs(z)) < 4.5, z
    assert np.max(np.abs((r.value("mean") - 0.9 * m) / r.stderr("mean"))) > 10
    zc = (r.value("covariance") - cov) / r.stderr("covariance")
    assert np.max(np.abs(zc)) < 5, zc
    # at step 0 the outputs are the NNGP prior: mean 0, covariance K^(2) on the test points
    z0 = (r.value("covariance", step=0) - K[3:, 3:]) / r.stderr("covariance", step=0)
    assert np.max(np.abs(z0)) < 5 and np.max(np.abs(r.value("mean", step=0) / r.stderr("mean", step=0))) < 5


# ------------------------------------------------------------------ (4) Newton on a linear model
@pytest.mark.parametrize("n_out", [1, 2])
def test_newton_step_fits_linear_model_exactly(n_out):
    """depth = 1 (z = b + W x) is linear in its parameters: one Newton step at eta = 1 (10.25)
    lands on the training targets exactly (10.30), for every network and output."""
    net = et.MLP("tanh", depth=1, c_w=1.5, c_b=0.3, n_out=n_out)
    y = Y if n_out == 1 else np.stack([Y, -0.5 * Y], axis=1)
    r = train_ensemble(net, X, y, X_test=XT, eta=1.0, updates=2, networks=7, seed=0, method="newton",
                       lambda_b=0.4, lambda_w=2.0)
    assert np.max(np.abs(r.loss[:, 0])) > 0.1
    np.testing.assert_allclose(r.f_train[:, 1], np.broadcast_to(y, r.f_train[:, 1].shape),
                               rtol=0, atol=1e-10)
    np.testing.assert_allclose(r.f_test[:, 2], r.f_test[:, 1], rtol=0, atol=1e-10)


def test_newton_linear_model_ensemble_is_exact_and_stderr_covers():
    """After the Newton step the depth-1 ensemble is exactly Gaussian with mean (10.40) and
    covariance (10.41), Theta = lb + lw G0 (8.23), K = C_b + C_W G0: over 150 independent
    ensembles of 64 networks the z-scores of 'mean' and 'covariance' (jackknife) cover 95%."""
    c_w, c_b, lb, lw = 1.5, 0.3, 0.4, 2.0
    net = et.MLP("linear", depth=1, c_w=c_w, c_b=c_b)
    Xall = np.vstack([X, XT])
    K, T = _linear_kernels(Xall @ Xall.T / X.shape[1], (c_w,), (c_b,), (lb,), (lw,))
    m, cov = _kernel_prediction(K, T, Y, 3)
    zs = []
    for s in range(150):
        r = train_ensemble(net, X, Y, X_test=XT, eta=1.0, updates=1, networks=64, seed=s,
                           method="newton", lambda_b=lb, lambda_w=lw)
        zs.append((r.value("mean") - m) / r.stderr("mean"))
        iu = np.triu_indices(2)
        zs.append(((r.value("covariance") - cov) / r.stderr("covariance"))[iu])
    z = np.concatenate(zs)
    cover = np.mean(np.abs(z) < 1.96)
    assert 0.90 < cover < 0.985, cover
    assert 0.75 < np.mean(z * z) < 1.35


# ------------------------------------------------------------------ result protocol
def test_result_protocol_shapes_and_reprs():
    net = et.MLP("gelu", depth=3, widths=6, c_w=1.2, n_out=3)
    labels = np.array([0, 2, 1])
    r = train_ensemble(net, X, labels, X_test=XT, eta=0.3, updates=5, networks=9, seed=2,
                       loss="cross_entropy", record_every=2, batch=4)
    assert isinstance(r, TrainedEnsemble) and r.layers == () and r.networks == 9
    assert list(r.recorded) == [0, 2, 4, 5]
    assert r.f_train.shape == (9, 4, 3, 3) and r.f_test.shape == (9, 4, 2, 3)
    assert r.loss.shape == (9, 4) and r.value("loss").shape == (4,)
    assert r.value("f").shape == (4, 5, 3) and r.stderr("f").shape == (4, 5, 3)
    np.testing.assert_array_equal(r.value("f")[:, 3:], r.f_test.mean(axis=0))
    assert r.value("mean").shape == (2, 3) and r.stderr("mean").shape == (2, 3)
    cov = r.value("covariance")
    assert cov.shape == (2, 2, 3, 3) and r.stderr("covariance").shape == (2, 2, 3, 3)
    d = r.f_test[:, -1] - r.f_test[:, -1].mean(axis=0)
    np.testing.assert_allclose(cov[0, 1, 2, 0], np.sum(d[:, 0, 2] * d[:, 1, 0]) / 8, rtol=1e-12)
    np.testing.assert_array_equal(r.value("mean", step=0), r.f_test[:, 0].mean(axis=0))
    assert r.value("loss")[-1] < r.value("loss")[0]
    text = repr(r)
    assert "\n" not in text and text.startswith("TrainedEnsemble(networks=9, depth=3")
    assert "<table>" in r._repr_html_()
    # chunking does not change the networks (one generator per network)
    r2 = train_ensemble(net, X, labels, X_test=XT, eta=0.3, updates=5, networks=9, seed=2,
                        loss="cross_entropy", record_every=2)
    np.testing.assert_allclose(r2.f_test, r.f_test, rtol=0, atol=1e-13)


# ------------------------------------------------------------------ (5) bad input
NET = et.MLP("tanh", depth=2, widths=4)


@pytest.mark.parametrize("bad,match", [
    (dict(X=np.where(np.eye(3, 4, dtype=bool), np.nan, X)), "X contains NaN"),
    (dict(X=X + 1j), "X must be real"),
    (dict(y=Y + 0j), "y must be real"),
    (dict(y=np.ones(4)), "y must have shape"),
    (dict(y=np.ones((3, 2))), "y must have shape"),
    (dict(X_test=XT[:, :2]), "X_test must be 2-D"),
    (dict(X_test=[[np.inf, 0, 0, 0]]), "X_test contains NaN"),
    (dict(X=X[0]), "X must be a 2-D"),
    (dict(eta=-0.1), "eta"), (dict(eta=np.nan), "eta"), (dict(eta=1j), "eta"),
    (dict(updates=0), "updates"), (dict(updates=2.0), "updates"),
    (dict(networks=0), "networks"), (dict(networks=None), "networks"),
    (dict(record_every=0), "record_every"), (dict(batch=0), "batch"),
    (dict(lambda_b=(1.0, 2.0, 3.0)), "lambda_b"), (dict(lambda_w=-1.0), "lambda_w"),
    (dict(lambda_w=1j), "lambda_w"),
    (dict(loss="hinge"), "loss"), (dict(method="adam"), "method"),
    (dict(loss="cross_entropy"), "n_out >= 2"),
    (dict(method="newton", eta=2.5), "0 < eta < 2"),
    (dict(net=et.MLP("tanh", depth=2)), "symbolic widths"),
    (dict(net="tanh"), "net must be"),
    (dict(net=et.MLP("step", depth=2, widths=4)), "jump"),
    (dict(seed=-1), "seed"),
])
def test_bad_input_names_the_argument(bad, match):
    kw = dict(net=NET, X=X, y=Y, eta=0.01, updates=2, networks=3, seed=0, X_test=XT)
    kw.update(bad)
    with pytest.raises(DomainError, match=match):
        train_ensemble(kw.pop("net"), kw.pop("X"), kw.pop("y"), **kw)


def test_eta_beyond_the_stability_bound_is_refused_with_the_bound():
    """eta >= 2 / lambda_max of the first network's training NTK (computed here with the
    independent empirical_ntk) is refused, naming the bound; just below it the run is accepted."""
    net = et.MLP("tanh", depth=3, widths=16, c_w=1.0, c_b=0.1)
    params = init_params(net, 4, seed=4, networks=3)
    H = empirical_ntk([(W[0], b[0]) for W, b in params], X, net, order=1).H[0, 0]
    bound = 2.0 / np.linalg.eigvalsh(H)[-1]
    with pytest.raises(DomainError, match="stability bound") as info:
        train_ensemble(net, X, Y, params=params, eta=1.01 * bound, updates=3)
    assert f"{bound:.4g}" in str(info.value)
    train_ensemble(net, X, Y, params=params, eta=0.99 * bound, updates=1)


def test_divergence_names_the_step_and_the_network():
    """Network 1 has 30x larger output weights, so its NTK is ~900x stiffer than network 0's,
    whose bound eta is well inside: network 1 diverges and the error names it and the step."""
    net = et.MLP("linear", depth=2, widths=8)
    params = init_params(net, 4, seed=0, networks=2)
    params[1][0][1] *= 30.0
    with pytest.raises(DomainError, match=r"diverged at step \d+ \(network 1\)"):
        train_ensemble(net, X, Y, params=params, eta=0.05, updates=200)


def test_reading_errors():
    r = train_ensemble(NET, X, Y, eta=0.01, updates=2, networks=3, seed=0)
    for name, kw, match in [("covariance", {}, "X_test"), ("ntk", {}, "record_ntk"),
                            ("f", dict(layer=1), "layer"), ("loss", dict(step=7), "not recorded"),
                            ("G", {}, "unknown")]:
        with pytest.raises(DomainError, match=match):
            r.value(name, **kw)
    assert r.stderr("f").shape == (3, 3)
    assert train_ensemble(NET, X, Y, eta=0.01, updates=1, networks=1, seed=0).stderr("f") is None
