"""predict(cnn, X_train, y_train, X_test): the infinite-channel lazy prediction of a CNN in the
NTK parameterization, from cnn_kernels' NNGP kernel and NTK (PDLT (10.39)-(10.41) for GD, (6.57),
(6.64) for Bayes, with the CNN's kernels in place of the MLP's)."""
import numpy as np
import pytest

import effth as et
from effth.arch import CNN
from effth.errors import DomainError, NotDerivedError
from effth.simulation import train_cnn

P = 4
Y = np.array([1.0, -1.0, 0.5, -0.5])
NET = CNN("tanh", depth=3, filter_size=3, dims=1, c_w=1.5, c_b=0.1)


@pytest.fixture(scope="module")
def images():
    return np.random.default_rng(4).standard_normal((6, 6, 2))     # 1-D, 6 pixels, 2 channels


@pytest.fixture(scope="module")
def kernels(images):
    ks = et.cnn_kernels(NET, images)
    return ks.value("K"), ks.value("Theta")


def test_gd_and_bayes_are_the_kernel_formulas(images, kernels):
    K, Th = kernels
    Xa, Xb = images[:P], images[P:]
    eta, T = 1.2 / np.linalg.eigvalsh(Th[:P, :P])[-1], 25
    f = np.zeros(len(K))                       # GD steps on the frozen NTK, written out
    for _ in range(T):
        f = f + eta * Th[:, :P] @ (Y - f[:P])
    pt = et.predict(NET, Xa, Y, Xb, method="gd", updates=T, eta=eta)
    np.testing.assert_allclose(pt.value("mean"), f[P:], rtol=1e-12)
    pg = et.predict(NET, Xa, Y, Xb)
    np.testing.assert_allclose(pg.value("mean"), Th[P:, :P] @ np.linalg.solve(Th[:P, :P], Y),
                               rtol=1e-12)
    pb = et.predict(NET, Xa, Y, Xb, method="bayes")
    W = np.linalg.solve(K[:P, :P], K[:P, P:])
    np.testing.assert_allclose(pb.value("mean"), W.T @ Y, rtol=1e-12)
    np.testing.assert_allclose(pb.value("covariance"), K[P:, P:] - K[P:, :P] @ W, rtol=1e-10)


def test_trained_cnns_follow_the_finite_time_prediction(images, kernels):
    """NTK-parameterized CNNs of 128 channels after 8 GD steps.  Centred (f - f(θ0), 200
    networks): the ensemble mean within 4.5 SE of predict(updates=8), the NTK x0.9 (> 5.5 SE) and the
    converged prediction (> 8 SE) rejected.  Uncentred (200 networks): the variance of the test
    outputs within 4.5 SE of the predicted covariance's diagonal, which the covariance of the
    converged prediction misses."""
    K, Th = kernels
    Xa, Xb = images[:P], images[P:]
    eta, T = 1.2 / np.linalg.eigvalsh(Th[:P, :P])[-1], 8
    pr = et.predict(NET, Xa, Y, Xb, method="gd", updates=T, eta=eta)
    net = NET.with_widths(128)
    f = train_cnn(net, Xa, Y, X_test=Xb, eta=eta, updates=T, networks=200, seed=3,
                  center=True).f_test[:, -1]
    m, se = f.mean(axis=0), f.std(axis=0, ddof=1) / np.sqrt(len(f))
    assert np.max(np.abs(m - pr.value("mean")) / se) < 4.5
    wrong = et.predict(K=K, Theta=0.9 * Th, y_train=Y, n_train=P, method="gd", updates=T, eta=eta)
    assert np.max(np.abs(m - wrong.value("mean")) / se) > 5.5
    assert np.max(np.abs(m - et.predict(NET, Xa, Y, Xb).value("mean")) / se) > 8
    f = train_cnn(net, Xa, Y, X_test=Xb, eta=eta, updates=T, networks=200, seed=4,
                  center=False).f_test[:, -1]
    v = f.var(axis=0, ddof=1)
    vse = v * np.sqrt(2.0 / (len(f) - 1))
    assert np.max(np.abs(v - np.diag(pr.value("covariance"))) / vse) < 4.5


@pytest.mark.parametrize("call, exc, match", [
    (lambda X: et.predict(CNN("tanh", depth=3, dims=1, parameterization="mup", gamma0=1.0),
                          X[:P], Y, X[P:]), DomainError, "solve_cnn_monte_carlo"),
    (lambda X: et.predict(NET, X[:P], Y, X[P:], lambda_w=2.0), DomainError, "lambda"),
    (lambda X: et.predict(NET, X[:P], Y, X[P:], widths=64), NotDerivedError, "CNN"),
    (lambda X: et.predict(NET, X[:P], Y, X[P:, :5]), DomainError, "shape"),
    (lambda X: et.predict(NET, X[:P], np.ones((P, 2)), X[P:]), DomainError, "n_out"),
])
def test_bad_input(images, call, exc, match):
    with pytest.raises(exc, match=match):
        call(images)
