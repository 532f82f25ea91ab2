r"""The measured corner of kernel learning: trained finite-width ensembles converge to the
infinite-width prediction (PDLT ch. 6.3, 7, 10) as :math:`1/n`.

* **Newton step** (PDLT (10.25), (10.30)): one step at ``eta = 1`` with each network's own NTK
  lands, at infinite width, exactly on the converged kernel prediction (10.40)–(10.41).  At width
  :math:`n` the ensemble's mean and covariance differ by :math:`O(1/n)` (NTK fluctuations and the
  dNTK, PDLT §11.4).  The RMS error is fitted against :math:`n` with
  :func:`effth.compare.scaling_fit`; the slope must be :math:`-1` within
  :math:`\max(4\,\mathrm{SE}, 0.3)`, and wrong theories (the mean :math:`\times0.9`, the covariance
  without the initialization-fluctuation term of (10.41)) must fail the same criterion.
* **Bayes** (PDLT §6.3): the exact posterior of a one-hidden-layer network, by importance-weighting
  a large prior ensemble with the likelihood (6.10), converges to the NNGP posterior
  (6.57), (6.64) with output noise as :math:`1/n`.

Inputs are normalized, :math:`x\cdot x/n_0=1`, as in the book.  Every tolerance comes from
standard errors (or the issue's ±0.3 on a slope); no expected number comes from the code under
test.  Diagnosis behind the choices (finite-time GD, unnormalized inputs): ``docs/learning.md``,
"Checked against trained networks".
"""

from __future__ import annotations

import numpy as np
import pytest

import effth as et
from effth.compare import compare, scaling_fit
from effth.pdlt import predict

N0 = 3
Y = np.array([1.0, -1.0, 0.5, 0.0])


def _inputs():
    """4 training + 3 test inputs on the sphere x.x/n0 = 1 (directions from rng seed 0)."""
    X = np.random.default_rng(0).standard_normal((7, N0))
    X *= np.sqrt(N0) / np.linalg.norm(X, axis=1, keepdims=True)
    return X[:4], X[4:]


def _critical(act):
    if act == "gelu":
        from effth.pdlt.criticality import find_criticality

        c = find_criticality("gelu")
        return float(c.c_w), float(c.c_b)
    return {"tanh": (1.0, 0.0), "relu": (2.0, 0.0)}[act]


def _slope_ok(fit, target, tol=0.3):
    """The issue's criterion: |slope - target| within 4 standard errors or ``tol``."""
    return abs(fit.slope - target) <= max(4.0 * fit.slope_stderr, tol)


def _newton_study(act, widths, sizes, *, control=False):
    r"""Theory and, per width, the trained ensemble after one Newton step at eta = 1.

    ``control=True`` measures the mean with the control variate
    :math:`z_\mathcal B(1)-z_\mathcal B(0)+M z_\mathcal A(0)` (any fixed ``M``; here the theory's
    :math:`\Theta_{\mathcal{BA}}\widetilde\Theta^{-1}`): the initial outputs have mean exactly
    zero, so the estimate of :math:`\mathbb E[z_\mathcal B(1)]` stays unbiased whatever ``M`` is,
    and its noise drops to the :math:`O(1/\sqrt n)` spread of the finite-width deviations."""
    XA, XB = _inputs()
    cw, cb = _critical(act)
    theory = predict(et.MLP(act, depth=3, c_w=cw, c_b=cb), XA, Y, XB, method="newton")
    T = theory.value("Theta")
    M = np.linalg.solve(T[:4, :4], T[:4, 4:]).T
    runs, means = [], []
    for n, S in zip(widths, sizes):
        run = et.train_ensemble(et.MLP(act, depth=3, widths=n, c_w=cw, c_b=cb), XA, Y,
                                X_test=XB, method="newton", eta=1.0, updates=1, networks=S, seed=n)
        runs.append(run)
        if control:
            r = run.f_test[:, 1] - run.f_test[:, 0] + run.f_train[:, 0] @ M.T
            means.append((r.mean(0), r.std(0, ddof=1) / np.sqrt(S)))
        else:
            means.append((run.value("mean"), run.stderr("mean")))
    return theory, runs, means


@pytest.fixture(scope="module")
def tanh_newton():
    # n >= 32: at n = 16 the covariance still carries a visible O(1/n^2) term (slope -1.4
    # between 16 and 32, -1.1 between 32 and 64)
    return _newton_study("tanh", (32, 64, 128), (8000, 8000, 4000), control=True)


def test_newton_step_tanh_mean_and_covariance_converge_like_one_over_n(tanh_newton):
    theory, runs, means = tanh_newton
    widths = [r.widths[0] for r in runs]
    cm = [compare(theory.value("mean"), m, "mean", stderr=s) for m, s in means]
    cc = [compare(theory, r, "covariance") for r in runs]
    fm, fc = scaling_fit(cm, widths), scaling_fit(cc, widths)
    assert _slope_ok(fm, -1.0), fm
    assert _slope_ok(fc, -1.0), fc
    # the errors are real O(1/n) effects, resolved at the smallest width
    assert cm[0].max_abs_z > 5 and cc[0].max_abs_z > 5


def test_wrong_theories_are_rejected_by_the_same_fit(tanh_newton):
    theory, runs, means = tanh_newton
    widths = [r.widths[0] for r in runs]
    wrong_mean = 0.9 * theory.value("mean")
    fm = scaling_fit([compare(wrong_mean, m, "mean", stderr=s) for m, s in means], widths)
    assert not _slope_ok(fm, -1.0), fm
    # (10.41) without its last term Theta_BA Theta~^-1 K~ Theta~^-1 Theta_AB: the spread of the
    # initial training outputs propagated to the test outputs
    K, T = theory.value("K"), theory.value("Theta")
    M = np.linalg.solve(T[:4, :4], T[:4, 4:]).T
    wrong_cov = K[4:, 4:] - M @ K[:4, 4:] - K[4:, :4] @ M.T
    fc = scaling_fit([compare(wrong_cov, r, "covariance") for r in runs], widths)
    assert not _slope_ok(fc, -1.0), fc


# ----------------------------------------------------------------------------- Bayes
_BX = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]]) * np.sqrt(2.0)     # x.x/n0 = 1
_BY = np.array([1.0, -0.6])
_NOISE = 0.3
_BCW, _BCB = 1.5, 0.1


def _posterior_by_importance_weights(n, size, seed, chunk=200_000):
    r"""Exact posterior mean and variance at the test input of a one-hidden-layer tanh network
    of width ``n``: prior networks (2.19)–(2.20) drawn here, weighted by the likelihood (6.10)
    :math:`\exp[-\sum_{\tilde\alpha}(z_{\tilde\alpha}-y_{\tilde\alpha})^2/2\sigma^2]`.  Standard
    errors of the self-normalized estimates by the delta method (they reflect the effective
    sample size :math:`1/\sum w^2`)."""
    rng = np.random.default_rng(seed)
    Z = []
    for start in range(0, size, chunk):
        S = min(chunk, size - start)
        W1 = rng.standard_normal((S, n, 2)) * np.sqrt(_BCW / 2)
        b1 = rng.standard_normal((S, n, 1)) * np.sqrt(_BCB)
        W2 = rng.standard_normal((S, n)) * np.sqrt(_BCW / n)
        b2 = rng.standard_normal((S, 1)) * np.sqrt(_BCB)
        Z.append(np.einsum("sn,snk->sk", W2, np.tanh(W1 @ _BX.T + b1)) + b2)
    Z = np.concatenate(Z)
    logw = -((Z[:, :2] - _BY) ** 2).sum(axis=1) / (2 * _NOISE)
    w = np.exp(logw - logw.max())
    w /= w.sum()
    zb = Z[:, 2]
    mu = w @ zb
    var = w @ (zb - mu) ** 2
    se_mu = np.sqrt(np.sum(w ** 2 * (zb - mu) ** 2))
    se_var = np.sqrt(np.sum(w ** 2 * ((zb - mu) ** 2 - var) ** 2))
    return mu, se_mu, var, se_var, 1.0 / np.sum(w ** 2)


def _bayes_study(widths, size):
    theory = predict(et.MLP("tanh", depth=2, c_w=_BCW, c_b=_BCB), _BX[:2], _BY, _BX[2:],
                     method="bayes", noise=_NOISE)
    rows = [_posterior_by_importance_weights(n, size, seed=100 + n) for n in widths]
    return theory, rows


def _bayes_checks(widths, size):
    theory, rows = _bayes_study(widths, size)
    m, v = float(theory.value("mean")[0]), float(theory.value("covariance")[0, 0])
    assert all(ess > 0.1 * size for *_, ess in rows)            # the weights are well spread (ESS ~ 27%)
    cv = [compare(np.array([v]), np.array([r[2]]), "covariance", stderr=np.array([r[3]]))
          for r in rows]
    fit = scaling_fit(cv, widths)
    assert _slope_ok(fit, -1.0), fit
    # the posterior mean's 1/n correction is small here: consistent at the largest width
    mu, se_mu = rows[-1][0], rows[-1][1]
    assert abs(mu - m) < 5 * se_mu, (mu, m, se_mu)
    # wrong theories fail: the mean x 0.9, the posterior without the noise (6.57 on K~ alone),
    # the prior variance
    assert abs(mu - 0.9 * m) > 5 * se_mu
    noiseless = predict(et.MLP("tanh", depth=2, c_w=_BCW, c_b=_BCB), _BX[:2], _BY, _BX[2:],
                        method="bayes")
    for wrong in (float(noiseless.value("covariance")[0, 0]), float(theory.value("K")[2, 2])):
        bad = [compare(np.array([wrong]), np.array([r[2]]), "covariance", stderr=np.array([r[3]]))
               for r in rows]
        assert bad[-1].max_abs_z > 5 or not _slope_ok(scaling_fit(bad, widths), -1.0)
    return fit


def test_bayes_posterior_by_importance_weighting_converges_like_one_over_n():
    _bayes_checks((4, 8, 16), 1_000_000)


# ----------------------------------------------------------------------------- full study
@pytest.mark.slow
@pytest.mark.parametrize("act", ["tanh", "gelu"])
def test_newton_step_full_study(act, opt_in_slow):
    widths = (16, 32, 64, 128, 256)
    theory, runs, means = _newton_study(act, widths, (16000, 16000, 16000, 8000, 4000),
                                        control=True)
    cm = [compare(theory.value("mean"), m, "mean", stderr=s) for m, s in means]
    cc = [compare(theory, r, "covariance") for r in runs]
    keep_m = [i for i, c in enumerate(cm) if c.error >= 3 * c.error_stderr]
    keep_c = [i for i, c in enumerate(cc) if c.error >= 3 * c.error_stderr]
    assert len(keep_m) >= 3 and len(keep_c) >= 3
    fm = scaling_fit([cm[i] for i in keep_m], [widths[i] for i in keep_m])
    fc = scaling_fit([cc[i] for i in keep_c], [widths[i] for i in keep_c])
    assert _slope_ok(fm, -1.0), fm
    if act == "gelu":
        # GELU's covariances are ~0.5 (tanh's ~0.03), so at 4000 networks the covariance error
        # sits at its noise floor from n = 128 on (RMS error = noise floor, max |z| 1.6): an
        # earlier study read that floor as a plateau.  With 32000 networks per width and the
        # noise removed (debias=True) the error falls like 1/n.
        widths = (32, 64, 128, 256)
        theory, runs, _ = _newton_study(act, widths, (32000,) * 4, control=True)
        cc = [compare(theory, r, "covariance") for r in runs]
        e2 = [c.error_debiased ** 2 for c in cc]
        s2 = [c.error_debiased_sq_stderr for c in cc]
        # n = 32, 64 are resolved (> 4 SE in the squared error); n = 128, 256 only at ~2 and
        # ~1 SE, so no four-point slope: instead n = 256 against the 1/n extrapolation from 64
        # (agrees within 3 SE) and against the old "plateau" of 0.009 (rejected by > 5 SE)
        assert e2[0] > 4 * s2[0] and e2[1] > 4 * s2[1], (e2, s2)
        assert abs(e2[3] - (cc[1].error_debiased / 4) ** 2) <= 3 * s2[3], (e2, s2)
        assert 0.009 ** 2 - e2[3] > 5 * s2[3], (e2, s2)
        # the fitted slope over 64..256 (weighted by each point's resolution, min_z lowered to
        # admit the ~1-2 SE points): measured -0.95 +- 0.30 (with n = 32, still carrying its
        # 1/n^2 term: -0.68 +- 0.13)
        fc = scaling_fit(cc[1:], widths[1:], debias=True, min_z=0.5)
        assert _slope_ok(fc, -1.0), fc
        return
    assert _slope_ok(fc, -1.0), fc


@pytest.mark.slow
def test_bayes_full_study(opt_in_slow):
    _bayes_checks((4, 8, 16, 32), 2_000_000)


# ------------------------------------------------------------- kinks change the NTK update scaling
def _newton_update(act, widths, size=200, depth=6):
    """One Newton step on one input (n0 = 16, |x|^2/n0 = 1, y = 1, no biases): the per-instance
    relative NTK change |dH/H| and training residual |z(1) - y|, mean and SE over ``size`` nets."""
    from effth.compare import Comparison

    x = np.random.default_rng(0).standard_normal((1, 16))
    x *= 4.0 / np.linalg.norm(x)
    cw, lw = {"relu": (2.0, 1.0 / depth), "tanh": (1.0, 1.0)}[act]
    dh, res = [], []
    for n in widths:
        run = et.train_ensemble(et.MLP(act, depth=depth, widths=n, c_w=cw, c_b=0.0), x, [1.0],
                                eta=1.0, updates=1, method="newton", networks=size, seed=n,
                                lambda_b=0.0, lambda_w=lw, record_ntk=True)
        H = run.ntk[:, :, 0, 0]
        for out, v in ((dh, np.abs(H[:, -1] - H[:, 0]) / H[:, 0]), (res, np.abs(run.f_train[:, -1, 0] - 1.0))):
            out.append(Comparison("x", None, np.zeros(1), np.array([v.mean()]),
                                  np.array([v.std(ddof=1) / np.sqrt(size)])))
    return scaling_fit(dh, widths), scaling_fit(res, widths)


def test_relu_ntk_update_scales_like_one_over_sqrt_n():
    """PDLT §∞.1 after (∞.44): for deep ReLU networks the normalized NTK update after a step
    scales like 1/sqrt(n), not l/n (kinks crossed by O(1) jumps). Depth 6, one Newton step,
    200 networks at n = 64, 128, 256 (|dH/H| ~ 0.2 -> 0.11, SE ~6%, so slope SE ~0.06): ReLU's
    slope is -1/2 (within 4 SE or 0.15) and excludes -1; tanh's training residual falls like
    1/n, and its |dH/H| falls faster than ReLU's by more than 4 SE."""
    widths = (64, 128, 256)
    relu_dh, relu_res = _newton_update("relu", widths)
    tanh_dh, tanh_res = _newton_update("tanh", widths)
    for fit in (relu_dh, relu_res):
        assert _slope_ok(fit, -0.5, tol=0.15), fit
        assert abs(fit.slope + 1.0) > 4 * fit.slope_stderr, fit
    assert _slope_ok(tanh_res, -1.0, tol=0.15), tanh_res
    gap = relu_dh.slope - tanh_dh.slope
    assert gap > 4 * np.hypot(relu_dh.slope_stderr, tanh_dh.slope_stderr), (relu_dh, tanh_dh)
