"""Learning at infinite width (PDLT ch. 6.3, 7, 10): Bayes posterior, GD ensemble, evidence.

Independent sources (no number comes from the code under test):

* the worked examples of our chapter notes (ReLU, L = 3): the book prints the formulas of §6.3 and
  §10.2.4 but no numerical example, so these vectors were computed by the note writer from the
  arc-cosine kernel and direct Gaussian algebra;
* this file's own arc-cosine recursion for ReLU kernels and NTKs (PDLT (10.44)-(10.45)), its own
  Gaussian-process algebra (``np.linalg.solve``), its own step-by-step gradient-descent map and a
  Monte-Carlo ensemble of initial outputs;
* exact statements of the book: deep linear networks *-polate linearly (10.103)-(10.104) with the
  robustness cos(zeta) of (10.96)-(10.98); GD = Bayes when only the last layer learns with
  lambda = C (10.46)-(10.49); algorithm independence (10.35); the finite-angle ReLU limits
  (10.94)-(10.95); the two-input evidence (6.48) (with (6.46) corrected).
"""

import math
import warnings

import numpy as np
import pytest

import effth as et
from effth.errors import AccuracyWarning, DomainError
from effth.pdlt import (evidence_scan, log_bayes_factor, log_evidence,
                                 log_evidence_two_inputs, output_kernels, predict)


# ------------------------------------------------------------------ the test's own kernels
def relu_kernels(X, depth, c_w=2.0, c_b=0.0, lambda_b=1.0, lambda_w=1.0):
    """K^(L), Theta^(L) of a ReLU MLP from the arc-cosine formulas (independent of effth)."""
    X = np.asarray(X, float)
    G = X @ X.T / X.shape[1]
    lb = np.broadcast_to(np.asarray(lambda_b, float), (depth,))
    lw = np.broadcast_to(np.asarray(lambda_w, float), (depth,))
    K = c_b + c_w * G
    T = lb[0] + lw[0] * G
    for layer in range(1, depth):
        d = np.sqrt(np.outer(np.diag(K), np.diag(K)))
        cos = np.clip(K / d, -1.0, 1.0)
        th = np.arccos(cos)
        ss = d * (np.sin(th) + (np.pi - th) * cos) / (2 * np.pi)
        dd = (np.pi - th) / (2 * np.pi)
        T = lb[layer] + lw[layer] * ss + c_w * dd * T
        K = c_b + c_w * ss
    return K, T


def gp_posterior(K, P, y, noise=0.0):
    KA = K[:P, :P] + noise * np.eye(P)
    mean = K[P:, :P] @ np.linalg.solve(KA, y)
    cov = K[P:, P:] - K[P:, :P] @ np.linalg.solve(KA, K[:P, P:])
    Y = y.reshape(P, -1)
    sign, logdet = np.linalg.slogdet(2 * np.pi * KA)
    logp = -0.5 * Y.shape[1] * logdet - 0.5 * np.sum(Y * np.linalg.solve(KA, Y))
    return mean, cov, logp


def gd_map(K, T, P, eta, steps):
    """(Pm, S): z_B(t) = z_B - Pm (z_A - y), z_A(t) - y = S (z_A - y), by iterating the steps."""
    N = K.shape[0]
    TA, TB = T[:P, :P], T[P:, :P]
    S = np.eye(P)
    Pm = np.zeros((N - P, P))
    for _ in range(steps):
        Pm = Pm + eta * TB @ S
        S = S - eta * TA @ S
    return Pm, S


# --------------------------------------------------------------------------------- fixtures
XA_NNGP = [[1.0, 0.0], [0.0, 1.0]]
XB_NNGP = [[math.sqrt(0.5), math.sqrt(0.5)], [0.6, -0.8]]


def _data(rng, P=5, Q=3, n0=4):
    return rng.normal(size=(P, n0)), rng.normal(size=P), rng.normal(size=(Q, n0))


# ==================================================================== published / worked values
def test_nngp_worked_example_relu():
    """ReLU L=3, C_W=2, C_b=0 NNGP example of our ch. 6 notes (§6.3 formulas (6.34), (6.57),
    (6.64)): K^(3), posterior mean and covariance, log evidence -2.198197934."""
    net = et.MLP("relu", depth=3, c_w=2.0, c_b=0.0)
    p = predict(net, XA_NNGP, [1.0, 0.5], XB_NNGP, method="bayes")
    K = p.value("K")
    np.testing.assert_allclose(K[0, 1], 0.49373109, atol=5e-9)
    np.testing.assert_allclose(K[0, 2:], [0.79217394, 0.73343379], atol=5e-9)
    np.testing.assert_allclose(K[1, 2:], [0.79217394, 0.33198681], atol=5e-9)
    np.testing.assert_allclose(K[2, 3], 0.45376715, atol=5e-9)
    np.testing.assert_allclose(p.value("mean"), [0.79549854, 0.73318400], atol=5e-9)
    np.testing.assert_allclose(p.value("covariance"), [[0.15976905, -0.11125987],
                                                       [-0.11125987, 0.46087425]], atol=5e-9)
    assert abs(p.value("log_evidence") - (-2.198197934)) < 5e-10
    assert abs(log_evidence(net, XA_NNGP, [1.0, 0.5]) - (-2.198197934)) < 5e-10


def test_nngp_test_point_on_training_point():
    """A test input equal to a training input: posterior mean = label, variance 0 (§6.3.2)."""
    net = et.MLP("relu", depth=3, c_w=2.0)
    p = predict(net, XA_NNGP, [1.0, 0.5], [XA_NNGP[1]], method="bayes")
    assert abs(p.value("mean")[0] - 0.5) < 1e-12
    assert abs(p.value("covariance")[0, 0]) < 1e-12


def test_kernel_prediction_reference_example():
    """§10.2.4 (10.40)-(10.41) example of our ch. 10 notes: ReLU L=3, lambda = 1/3 (equivalence
    principle, lambda~=1), y = (1, -1)."""
    net = et.MLP("relu", depth=3, c_w=2.0, c_b=0.0)
    XB = [[1 / math.sqrt(2), 1 / math.sqrt(2)], [2.0, 0.5]]
    p = predict(net, XA_NNGP, [1.0, -1.0], XB, lambda_b=1 / 3, lambda_w=1 / 3)
    K, T = p.value("K"), p.value("Theta")
    np.testing.assert_allclose(np.diag(K), [1, 1, 1, 4.25], atol=1e-12)
    np.testing.assert_allclose([K[0, 1], K[0, 2], K[0, 3], K[1, 3], K[2, 3]],
                               [0.493731, 0.792174, 2.006147, 1.186345, 1.829223], atol=5e-7)
    np.testing.assert_allclose(np.diag(T), [1.5, 1.5, 1.5, 3.125], atol=1e-12)
    np.testing.assert_allclose([T[0, 1], T[0, 2], T[0, 3], T[1, 3], T[2, 3]],
                               [0.749176, 1.081576, 1.852254, 1.003234, 1.605198], atol=5e-7)
    np.testing.assert_allclose(p.value("mean"), [0.0, 1.130784], atol=5e-7)
    np.testing.assert_allclose(p.value("covariance"), [[0.167076, 0.200241],
                                                       [0.200241, 0.797366]], atol=5e-7)


def test_two_input_evidence_closed_form_and_erratum():
    """(6.48) with the notes' vector, = the general (6.34) on the corrected (6.46) matrix; the
    matrix as printed in (6.46) (+K1 in both diagonal entries) gives another value."""
    K0, K1, K2 = 1.2, 0.3, 0.4
    yp, ym = np.array([1.0, 0.5]), np.array([0.2, -0.3])
    val = log_evidence_two_inputs(K0, K1, K2, yp, ym)
    assert abs(val - (-4.769687586011)) < 1e-11
    corrected = np.array([[K0 + K1 + K2, K0 - K2], [K0 - K2, K0 - K1 + K2]])
    Y = np.stack([yp, ym])                         # (P=2 samples, n_L=2 components)
    assert abs(log_evidence(K=corrected, y_train=Y) - val) < 1e-12
    printed = np.array([[K0 + K1 + K2, K0 - K2], [K0 - K2, K0 + K1 + K2]])
    assert abs(log_evidence(K=printed, y_train=Y) - val) > 0.05
    # equal norms (K1 = 0): the factorized form (6.45)
    Y0, Y2 = np.sum(((yp + ym) / 2) ** 2), np.sum(((yp - ym) / 2) ** 2)
    f645 = (-np.log(4 * np.pi * K0) - Y0 / (2 * K0)) + (-np.log(4 * np.pi * K2) - Y2 / (2 * K2))
    assert abs(log_evidence_two_inputs(K0, 0.0, K2, yp, ym) - f645) < 1e-12


def test_deep_linear_starpolation_is_linear():
    """(10.103)-(10.104): deep linear nets interpolate and extrapolate linearly, exactly, with
    zero variance on the line through the two training inputs."""
    net = et.MLP("linear", depth=5, c_w=1.0, c_b=0.3)
    xp, xm = np.array([1.0, 0.2, -0.5]), np.array([0.3, 1.1, 0.4])
    s = np.array([-0.7, 0.0, 0.25, 0.5, 1.0, 1.6])
    XB = s[:, None] * xp + (1 - s)[:, None] * xm
    p = predict(net, [xp, xm], [0.8, -0.4], XB, lambda_b=0.7, lambda_w=1.3)
    np.testing.assert_allclose(p.value("mean"), s * 0.8 + (1 - s) * (-0.4), atol=1e-12)
    assert np.max(np.abs(p.value("covariance"))) < 1e-10


def test_deep_linear_robustness_cos_zeta():
    """(10.96)-(10.98), our notes: cos(zeta) = 0.843228 for lambda_b=1, lambda_W=2, psi=0.7
    (equal norms, linear, uniform rates) at every depth; mean = cos(zeta) y_+ (10.56)."""
    for depth in (2, 4, 9):
        net = et.MLP("linear", depth=depth, c_w=1.0)
        psi = 0.7
        xp = np.array([1.0, 0.0]) * math.sqrt(2)
        xm = np.array([math.cos(psi), math.sin(psi)]) * math.sqrt(2)
        p = predict(net, [xp], [1.0], [xm], lambda_b=1.0, lambda_w=2.0)
        assert abs(p.value("mean")[0] - 0.843228) < 5e-7


def test_relu_finite_angle_robustness_limits():
    """(10.94)-(10.95): ReLU with lambda = lambda~/L, one training point, a test point at a
    finite angle: Theta_-+/Theta_++ -> 1/4 and Cov/K_d -> 9/16 as L grows (approach ~1/L; our
    notes: 0.2504-0.2512 and 0.5608-0.5619 at L = 10^4)."""
    L = 2000
    net = et.MLP("relu", depth=L, c_w=2.0)
    xp, xm = np.array([1.0, 0.0]), np.array([math.cos(1.0), math.sin(1.0)])
    p = predict(net, [xp], [1.0], [xm], lambda_b=1.0 / L, lambda_w=1.0 / L)
    T, K = p.value("Theta"), p.value("K")
    ratio = T[1, 0] / T[0, 0]
    assert abs(ratio - 0.25) < 0.01
    assert abs(p.value("covariance")[0, 0] / K[0, 0] - 9 / 16) < 0.01
    assert abs(p.value("mean")[0] - ratio) < 1e-12             # (10.56) with y_+ = 1


# =============================================================== derived vs independent algebra
def test_output_kernels_match_the_flows():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(3, 3))
    for act in ("relu", "tanh"):
        net = et.MLP(act, depth=3, c_w=1.5, c_b=0.1)
        K, T = output_kernels(net, X, lambda_b=0.5, lambda_w=0.7)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", AccuracyWarning)
            fl = et.flow(net, X)
            nf = et.ntk_flow(net, X, lambda_b=0.5, lambda_w=0.7, statistics=("Theta",))
        np.testing.assert_allclose(K, fl.value("K", layer=3), rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(T, nf.value("Theta", layer=3), rtol=1e-8, atol=1e-10)


def test_relu_kernels_against_own_arccos():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(6, 4))
    net = et.MLP("relu", depth=6, c_w=1.7, c_b=0.2)
    K, T = output_kernels(net, X, lambda_b=[0.1, 0.2, 0.3, 0.4, 0.5, 0.6], lambda_w=0.9)
    Kr, Tr = relu_kernels(X, 6, 1.7, 0.2, [0.1, 0.2, 0.3, 0.4, 0.5, 0.6], 0.9)
    np.testing.assert_allclose(K, Kr, rtol=1e-12)
    np.testing.assert_allclose(T, Tr, rtol=1e-12)


@pytest.mark.parametrize("noise", [0.0, 0.3])
def test_bayes_against_direct_gp_algebra(noise):
    rng = np.random.default_rng(3)
    XA, _, XB = _data(rng)
    Y = rng.normal(size=(5, 2))
    net = et.MLP("relu", depth=4, c_w=2.0, c_b=0.1, n_out=2)
    p = predict(net, XA, Y, XB, method="bayes", noise=noise)
    K, _ = relu_kernels(np.vstack([XA, XB]), 4, 2.0, 0.1)
    mean, cov, logp = gp_posterior(K, 5, Y, noise)
    assert p.value("mean").shape == (3, 2) and p.value("covariance").shape == (3, 3)
    np.testing.assert_allclose(p.value("mean"), mean, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(p.value("covariance"), cov, rtol=1e-10, atol=1e-12)
    assert abs(p.value("log_evidence") - logp) < 1e-10
    assert abs(log_evidence(net, XA, Y, noise=noise) - logp) < 1e-10


def test_gd_ensemble_monte_carlo():
    """(10.39): draw z ~ N(0, K) on train+test, apply the trained map, average; the predicted
    mean (10.40) and covariance (10.41) agree within standard errors; a covariance without the
    initialization-fluctuation term, or a mean scaled by 0.9, is rejected."""
    rng = np.random.default_rng(4)
    XA, y, XB = _data(rng, P=4, Q=3)
    net = et.MLP("relu", depth=3, c_w=2.0, c_b=0.0)
    p = predict(net, XA, y, XB, lambda_b=0.5, lambda_w=1.0)
    K, T = relu_kernels(np.vstack([XA, XB]), 3, 2.0, 0.0, 0.5, 1.0)
    S = 100_000
    z = rng.multivariate_normal(np.zeros(7), K, size=S, method="eigh")
    zB = z[:, 4:] - (z[:, :4] - y) @ np.linalg.solve(T[:4, :4], T[:4, 4:])
    m_mc, c_mc = zB.mean(0), np.cov(zB.T)
    m_se = np.sqrt(np.diag(c_mc) / S)
    c_se = np.sqrt((np.outer(np.diag(c_mc), np.diag(c_mc)) + c_mc ** 2) / S)
    assert np.max(np.abs(p.value("mean") - m_mc) / m_se) < 5
    assert np.max(np.abs(p.value("covariance") - c_mc) / c_se) < 5
    assert np.max(np.abs(0.9 * p.value("mean") - m_mc) / m_se) > 10
    M = T[4:, :4] @ np.linalg.inv(T[:4, :4])
    no_init = K[4:, 4:] - M @ K[:4, 4:] - K[4:, :4] @ M.T        # drops M K_AA M^T
    assert np.max(np.abs(no_init - c_mc) / c_se) > 10


def test_gd_converged_against_own_formula_and_bias_variance():
    rng = np.random.default_rng(5)
    XA, y, XB = _data(rng)
    yt = rng.normal(size=3)
    net = et.MLP("relu", depth=4, c_w=2.0, c_b=0.05)
    p = predict(net, XA, y, XB, y_test=yt, lambda_b=0.3, lambda_w=0.8)
    K, T = relu_kernels(np.vstack([XA, XB]), 4, 2.0, 0.05, 0.3, 0.8)
    M = np.linalg.solve(T[:5, :5], T[:5, 5:]).T
    mean = M @ y
    cov = K[5:, 5:] - M @ K[:5, 5:] - K[5:, :5] @ M.T + M @ K[:5, :5] @ M.T
    np.testing.assert_allclose(p.value("mean"), mean, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(p.value("covariance"), cov, rtol=1e-9, atol=1e-11)
    assert abs(p.value("bias") - 0.5 * np.sum((mean - yt) ** 2)) < 1e-10       # (10.52)
    assert abs(p.value("variance") - 0.5 * np.trace(cov)) < 1e-10
    assert abs(p.value("test_loss") - p.value("bias") - p.value("variance")) < 1e-12


@pytest.mark.parametrize("eta_frac, steps", [(0.3, 1), (0.3, 7), (0.9, 25), (1.7, 40)])
def test_finite_time_gd_against_step_by_step_map(eta_frac, steps):
    """(∞.85)-(∞.92) at infinite width: the eigenbasis solution equals iterating the steps (also
    with 1 < eta lambda_max < 2, where the slowest... fastest mode oscillates)."""
    rng = np.random.default_rng(6)
    XA, y, XB = _data(rng)
    net = et.MLP("relu", depth=3, c_w=2.0)
    K, T = relu_kernels(np.vstack([XA, XB]), 3)
    eta = eta_frac / np.linalg.eigvalsh(T[:5, :5])[-1]
    p = predict(net, XA, y, XB, eta=eta, updates=steps)
    Pm, S = gd_map(K, T, 5, eta, steps)
    np.testing.assert_allclose(p.value("mean"), Pm @ y, rtol=1e-9, atol=1e-12)
    cov = K[5:, 5:] - Pm @ K[:5, 5:] - K[5:, :5] @ Pm.T + Pm @ K[:5, :5] @ Pm.T
    np.testing.assert_allclose(p.value("covariance"), cov, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(p.value("train_mean"), y - S @ y, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(p.value("train_covariance"), S @ K[:5, :5] @ S.T, rtol=1e-9, atol=1e-12)


def test_finite_time_tends_to_converged_and_zero_steps_is_prior():
    rng = np.random.default_rng(7)
    XA, y, XB = _data(rng)
    net = et.MLP("tanh", depth=3, c_w=1.0)
    conv = predict(net, XA, y, XB)
    lam = np.linalg.eigvalsh(conv.value("Theta")[:5, :5])
    eta = 1.0 / lam[-1]
    long = predict(net, XA, y, XB, eta=eta, updates=int(60 * lam[-1] / lam[0]))
    np.testing.assert_allclose(long.value("mean"), conv.value("mean"), atol=1e-9)
    np.testing.assert_allclose(long.value("covariance"), conv.value("covariance"), atol=1e-9)
    zero = predict(net, XA, y, XB, eta=eta, updates=0)
    np.testing.assert_allclose(zero.value("mean"), 0.0, atol=1e-15)
    np.testing.assert_allclose(zero.value("covariance"), conv.value("K")[5:, 5:], atol=1e-15)


def test_newton_equals_converged_gd_algorithm_independence():
    """(10.31), (10.35): a Newton step (after any GD steps) lands on the converged prediction."""
    rng = np.random.default_rng(8)
    XA, y, XB = _data(rng)
    net = et.MLP("relu", depth=4, c_w=2.0, c_b=0.1)
    conv = predict(net, XA, y, XB, lambda_b=0.2, lambda_w=1.0)
    eta = 0.5 / np.linalg.eigvalsh(conv.value("Theta")[:5, :5])[-1]
    for steps in (None, 3):
        kw = {} if steps is None else dict(eta=eta, updates=steps)
        newton = predict(net, XA, y, XB, method="newton", lambda_b=0.2, lambda_w=1.0, **kw)
        np.testing.assert_allclose(newton.value("mean"), conv.value("mean"), rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(newton.value("covariance"), conv.value("covariance"),
                                   rtol=1e-8, atol=1e-11)
    partial = predict(net, XA, y, XB, eta=eta, updates=3, lambda_b=0.2, lambda_w=1.0)
    assert np.max(np.abs(partial.value("mean") - conv.value("mean"))) > 1e-3


def test_gd_last_layer_only_equals_bayes():
    """(10.46)-(10.49): lambda^(L) = C^(L), lambda^(l<L) = 0 gives Theta = K and the GD ensemble
    equals the Bayesian posterior."""
    rng = np.random.default_rng(9)
    XA, y, XB = _data(rng)
    L, c_w, c_b = 4, 1.8, 0.2
    net = et.MLP("tanh", depth=L, c_w=c_w, c_b=c_b)
    gd = predict(net, XA, y, XB, lambda_b=[0, 0, 0, c_b], lambda_w=[0, 0, 0, c_w])
    bayes = predict(net, XA, y, XB, method="bayes")
    np.testing.assert_allclose(gd.value("Theta"), gd.value("K"), rtol=1e-12)
    np.testing.assert_allclose(gd.value("mean"), bayes.value("mean"), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(gd.value("covariance"), bayes.value("covariance"), rtol=1e-8, atol=1e-11)


def test_precomputed_kernels_path():
    rng = np.random.default_rng(10)
    XA, y, XB = _data(rng)
    K, T = relu_kernels(np.vstack([XA, XB]), 3)
    net = et.MLP("relu", depth=3, c_w=2.0)
    a = predict(net, XA, y, XB)
    b = predict(K=K, Theta=T, y_train=y, n_train=5)
    np.testing.assert_allclose(a.value("mean"), b.value("mean"), rtol=1e-12)
    np.testing.assert_allclose(a.value("covariance"), b.value("covariance"), rtol=1e-10, atol=1e-13)
    c = predict(K=K, y_train=y, n_train=5, method="bayes")
    np.testing.assert_allclose(c.value("mean"), gp_posterior(K, 5, y)[0], rtol=1e-10)


# ========================================================================= evidence and scans
def test_log_bayes_factor_and_relu_evidence_peak_tends_to_criticality():
    """§6.3.1: for ReLU with C_b = 0, K^(L)(C_W) = (C_W/2)^L K^(L)(2) (same angles), so the
    evidence peaks at C_W* = 2 (y^T K_2^{-1} y / N_A)^{1/L}.  What is true: the peak lies above
    the critical C_W = 2 (chi = 1) and approaches it as L grows, slowly: y^T K_2^{-1} y grows
    like L^2 (the angles close as 1/L), so C_W*/2 - 1 ~ 2 log(L)/L."""
    X = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
    y = np.array([0.9, -0.4, 1.3])
    for L, tol in ((3, 0.03), (20, 0.003)):
        K2, _ = relu_kernels(X, L, 2.0)
        s = y @ np.linalg.solve(K2, y) / 3
        expected = 2 * s ** (1 / L)
        net = et.MLP("relu", depth=L, c_w=2.0)
        scan = evidence_scan(net, X, y, c_w=np.linspace(1.0, 5.0, 401))
        assert abs(scan.c_w_best - expected) < tol
        assert scan.value("log_evidence").shape == (401,)
    stars = []
    for L in (20, 100, 400, 2000):
        K2, _ = relu_kernels(X, L, 2.0)
        stars.append(2 * (y @ np.linalg.solve(K2, y) / 3) ** (1 / L))
    assert all(a > b > 2.0 for a, b in zip(stars, stars[1:]))
    assert stars[-1] - 2.0 < 0.02
    # Bayes factor of critical against a vanishing-kernel hypothesis, from the test's own GP algebra
    net_c, net_v = et.MLP("relu", depth=20, c_w=2.0), et.MLP("relu", depth=20, c_w=1.2)
    lc = gp_posterior(relu_kernels(X, 20, 2.0)[0], 3, y)[2]
    lv = gp_posterior(relu_kernels(X, 20, 1.2)[0], 3, y)[2]
    assert abs(log_bayes_factor(net_c, net_v, X, y) - (lc - lv)) < 1e-10 * abs(lc - lv)
    assert lc - lv > 100


# ==================================================================================== bad input
def test_bad_input():
    net = et.MLP("relu", depth=3, c_w=2.0)
    XA, XB, y = np.eye(2), [[0.5, 0.5]], [1.0, 0.0]
    with pytest.raises(DomainError, match="method"):
        predict(net, XA, y, XB, method="sgd")
    with pytest.raises(DomainError, match="rows"):
        predict(net, XA, [1.0, 2.0, 3.0], XB)
    with pytest.raises(DomainError, match="features"):
        predict(net, XA, y, [[0.5, 0.5, 0.5]])
    with pytest.raises(DomainError, match="NaN"):
        predict(net, XA, [1.0, np.nan], XB)
    with pytest.raises(DomainError, match="complex"):
        predict(net, XA, np.array([1.0, 1j]), XB)
    with pytest.raises(DomainError, match="n_out"):
        predict(net, XA, np.ones((2, 3)), XB)
    with pytest.raises(DomainError, match="eta"):
        predict(net, XA, y, XB, updates=3)
    with pytest.raises(DomainError, match="noise"):
        predict(net, XA, y, XB, noise=0.1)
    with pytest.raises(DomainError, match="noise"):
        predict(net, XA, y, XB, method="bayes", noise=-1.0)
    with pytest.raises(DomainError, match=r"2/lambda_max"):
        predict(net, XA, y, XB, eta=10.0, updates=5)
    with pytest.raises(DomainError, match="y_test"):
        predict(net, XA, y, XB, y_test=[1.0, 2.0])
    # singular training block: duplicated inputs; explicit jitter works with a warning
    Xd = [[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]]
    for method in ("gd", "bayes", "newton"):
        with pytest.raises(DomainError, match="singular"):
            predict(net, Xd, [1.0, 1.0, 0.0], XB, method=method)
    with pytest.warns(AccuracyWarning, match="jitter"):
        p = predict(net, Xd, [1.0, 1.0, 0.0], XB, jitter=1e-9)
    assert np.all(np.isfinite(p.value("mean")))
    # precomputed kernels: non-PSD, non-symmetric, shapes
    bad = np.array([[1.0, 2.0, 0.0], [2.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    with pytest.raises(DomainError, match="positive semi-definite"):
        predict(K=bad, Theta=np.eye(3), y_train=[1.0, 0.0], n_train=2, method="bayes")
    with pytest.raises(DomainError, match="symmetric"):
        predict(K=np.triu(np.ones((3, 3))), y_train=[1.0, 0.0], n_train=2, method="bayes")
    with pytest.raises(DomainError, match="Theta"):
        predict(K=np.eye(3), y_train=[1.0, 0.0], n_train=2)
    with pytest.raises(DomainError, match="n_train"):
        predict(K=np.eye(3), Theta=np.eye(3), y_train=[1.0, 0.0, 1.0], n_train=3)
    with pytest.raises(DomainError, match="shape"):
        predict(K=np.eye(3), Theta=np.eye(4), y_train=[1.0, 0.0], n_train=2)
    with pytest.raises(DomainError, match="singular"):
        log_evidence(K=np.ones((2, 2)), y_train=[1.0, 1.0])
    with pytest.raises(DomainError, match="positive definite"):
        log_evidence_two_inputs(1.0, 3.0, 1.0, 1.0, 0.0)
    with pytest.raises(DomainError, match="increasing"):
        evidence_scan(net, XA, y, c_w=[2.0, 1.0])


# ============================================================================== result protocol
def test_result_protocol_latex_and_compare():
    rng = np.random.default_rng(11)
    XA, y, XB = _data(rng)
    net = et.MLP("relu", depth=3, c_w=2.0)
    p = predict(net, XA, y, XB)
    assert "\n" not in repr(p) and repr(p).startswith("Prediction(")
    assert "<table>" in p._repr_html_()
    assert p.stderr("mean") is None and p.layers == ()
    assert p.value("mean").shape == (3,) and p.value("covariance").shape == (3, 3)
    assert p.value("K").shape == p.value("Theta").shape == (8, 8)
    tex = p._repr_latex_()
    assert r"\widetilde{\Theta}_{(L)}^{\tilde{\alpha}_{1}\tilde{\alpha}_{2}}" in tex
    assert r"\delta_{i_{1} i_{2}}" in tex and "K^{(L)}" in tex
    b = predict(net, XA, y, XB, method="bayes", noise=0.1)
    assert r"\widetilde{K}_{(L)}^{\tilde{\alpha}_{1}\tilde{\alpha}_{2}}" in b.latex()
    assert r"\sigma_{\varepsilon}^{2}" in b.latex() and r"\log p" in b.latex()
    f = predict(net, XA, y, XB, eta=0.01, updates=5)
    assert r"\left(\mathbb{I} - \eta \widetilde{\Theta}\right)^{t}" in f.latex()
    with pytest.raises(DomainError, match="widths="):
        p.value("mean1")
    with pytest.raises(DomainError, match="widths="):
        p.value("covariance1")
    with pytest.raises(DomainError, match="y_test"):
        p.value("bias")
    with pytest.raises(DomainError, match="bayes"):
        p.value("log_evidence")
    with pytest.raises(DomainError, match="layer"):
        p.value("mean", layer=1)
    cmp = et.compare(p, p.value("mean"), "mean", stderr=np.full(3, 0.1))
    assert cmp.max_abs_z == 0.0


def test_cross_entropy_bias_variance_10_53_to_10_55():
    """E[L_B] for the softmax cross-entropy over the Gaussian ensemble of outputs, by a 3-D
    Gauss-Hermite rule written here, against bias + variance of (10.53)-(10.55): the remainder is
    second order in the covariance (slope ~2 when K, hence Cov, is scaled down), while dropping
    the variance term leaves a first-order error (slope ~1)."""
    import itertools

    rng = np.random.default_rng(4)
    X = rng.normal(size=(6, 3))
    net = et.MLP("tanh", depth=3, c_w=1.0, c_b=0.1)
    K, T = et.output_kernels(net, X)
    yA = rng.normal(size=(4, 3))
    p = rng.dirichlet(np.ones(3), size=2)
    x, w = np.polynomial.hermite_e.hermegauss(24)
    w = w / w.sum()
    errs, errs_bias = [], []
    scales = np.array([0.2, 0.1, 0.05])
    for s in scales:
        pr = et.predict(K=s * K, Theta=T, y_train=yA, n_train=4, y_test=p, test_loss="cross_entropy")
        m, v = pr.value("mean"), np.diag(pr.value("covariance"))
        exact = 0.0
        for b in range(2):
            for idx in itertools.product(range(len(x)), repeat=3):
                z = m[b] + np.sqrt(v[b]) * x[list(idx)]
                lse = np.log(np.sum(np.exp(z - z.max()))) + z.max()
                exact += np.prod(w[list(idx)]) * -(p[b] @ (z - lse))
        errs.append(abs(pr.value("test_loss") - exact))
        errs_bias.append(abs(pr.value("bias") - exact))
    slope = np.polyfit(np.log(scales), np.log(errs), 1)[0]
    slope_bias = np.polyfit(np.log(scales), np.log(errs_bias), 1)[0]
    assert slope > 1.8 and abs(slope_bias - 1.0) < 0.15, (errs, errs_bias)
    with pytest.raises(DomainError, match="probability"):
        et.predict(K=K, Theta=T, y_train=yA, n_train=4, y_test=p * 2, test_loss="cross_entropy")
    with pytest.raises(DomainError, match="test_loss"):
        et.predict(K=K, Theta=T, y_train=yA, n_train=4, y_test=p, test_loss="hinge")


def test_repeated_training_inputs_are_refused_naming_the_rows():
    """Repeated inputs: conflicting targets have no interpolant, equal ones a singular block (for
    tanh the quadrature kernel only hides it behind round-off); a regularized block or finite-time
    GD is fine."""
    import effth as et
    X = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])
    net = et.MLP("tanh", depth=3)
    with pytest.raises(et.DomainError, match=r"different targets \(rows 1, 3"):
        et.predict(net, X, np.array([1.0, 0.0, 2.0]), X[:1] * 0.3, method="gd")
    with pytest.raises(et.DomainError, match=r"repeat \(rows 1, 3"):
        et.predict(net, X, np.array([1.0, 0.0, 1.0]), X[:1] * 0.3, method="bayes")
    p = et.predict(net, X, np.array([1.0, 0.0, 2.0]), X[:1] * 0.3, method="bayes", noise=0.1)
    assert np.all(np.isfinite(p.value("mean")))
    p = et.predict(net, X, np.array([1.0, 0.0, 2.0]), X[:1] * 0.3, method="gd", eta=0.1, updates=5)
    assert np.all(np.isfinite(p.value("mean")))
