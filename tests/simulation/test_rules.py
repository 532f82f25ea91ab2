"""Networks trained by learning rules (effth.simulation.rules): GD reproduces the GD trainer,
the empirical eNTK at initialization of wide ReLU networks matches the lazy closed forms of
Bordelon & Pehlevan (ICLR 2023), Table 2, computed here independently from the arc-cosine
kernels (no theory module is used), and bad input is refused."""

from __future__ import annotations

import numpy as np
import pytest

from effth.errors import DomainError
from effth.simulation.rules import simulate_rule_training
from effth.simulation.training import simulate_training


def test_gd_rule_is_the_gd_trainer():
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((3, 4)), np.array([1.0, -0.5, 0.7])
    kw = {"hidden_layers": 3, "widths": 40, "gamma0": 1.2, "eta": 0.1, "steps": 6, "activation": "tanh",
              "seed": [1, 2]}
    a = simulate_rule_training(X, y, rule="gd", **kw)
    b = simulate_training(X, y, **kw)
    for name in ("f", "phi", "g", "ntk"):
        np.testing.assert_allclose(getattr(a, name), getattr(b, name), atol=1e-12, err_msg=name)
    # GD's pseudo-gradient kernel is its gradient kernel; corr(g, g~) = 1
    np.testing.assert_allclose(a.gtilde, a.g, atol=1e-12)
    np.testing.assert_allclose(a.corr, 1.0, atol=1e-12)


def _arccos(q1, q2, c):
    """ReLU arc-cosine kernels: <relu relu> and <step step> for covariance [[q1, c], [c, q2]]."""
    th = np.arccos(np.clip(c / np.sqrt(q1 * q2), -1, 1))
    return (np.sqrt(q1 * q2) / (2 * np.pi) * (np.sin(th) + (np.pi - th) * np.cos(th)),
            (np.pi - th) / (2 * np.pi))


def _lazy_relu(theta, L, rule, rho=0.5, gln_factor=True):
    """Independent closed forms of Table 2 for two unit-norm inputs at angle theta (off-diag)."""
    kx = np.cos(theta)
    q, c = [1.0], [kx]
    dc = []
    for _ in range(L):
        kc, dd = _arccos(q[-1], q[-1], c[-1])
        kq, _ = _arccos(q[-1], q[-1], q[-1])
        c.append(kc), q.append(kq), dc.append(dd)
    if rule == "gln":
        M = (np.pi - theta) / (2 * np.pi)
        return ((L + 1) if gln_factor else 1) * M ** L * kx
    if rule in ("dfa", "hebb"):
        return c[L]
    w = 1.0 if rule == "gd" else rho
    # G^{l+1} = prod_{k=l+1}^{L} dPhi^k ; K = sum_l w^{L-l} G^{l+1} Phi^l
    K = 0.0
    for ell in range(L + 1):
        G = np.prod(dc[ell:L]) if ell < L else 1.0
        K += w ** (L - ell) * G * c[ell]
    return K


@pytest.mark.parametrize("rule,rho", [("gd", None), ("fa", 0.5), ("dfa", None), ("hebb", None),
                                      ("gln", None)])
def test_empirical_entk_at_init_matches_lazy_closed_form(rule, rho):
    """Off-diagonal eNTK of width-2000 ReLU networks (L = 2, theta = pi/3, 16 seeds): z-test
    with the seed-to-seed standard error (4.5 sigma: fluctuations are O(N^-1/2) and the O(1/N)
    bias is far below the error bar).  The printed Table 2 GLN kernel (no L+1) is rejected."""
    th, L = np.pi / 3, 2
    X = np.sqrt(2.0) * np.array([[1.0, 0.0], [np.cos(th), np.sin(th)]])      # |x|^2 = D = 2
    run = simulate_rule_training(X, np.array([1.0, -1.0]), rule=rule, rho=rho, hidden_layers=L,
                                 widths=2000, gamma0=1.0, eta=0.0, steps=1, activation="relu",
                                 seed=range(16))
    off = 0.5 * (run.ntk[:, 0, 0, 1] + run.ntk[:, 0, 1, 0])
    m, se = off.mean(), off.std(ddof=1) / np.sqrt(off.size)
    exact = _lazy_relu(th, L, rule)
    assert abs(m - exact) < 4.5 * se, (m, se, exact)
    if rule == "gln":
        assert abs(m - _lazy_relu(th, L, rule, gln_factor=False)) > 10 * se
    if rule == "fa":                   # a rho^{L-l} weight off by x 0.9 is rejected
        assert abs(m - 0.9 * exact) > 5 * se
    if rule in ("dfa", "hebb"):        # only the last-layer features: eNTK - Phi^L has mean 0
        rest = run.ntk[:, 0] - run.phi[:, -1, 0, :, 0, :]
        z = rest.mean(axis=0) / (rest.std(axis=0, ddof=1) / np.sqrt(rest.shape[0]))
        assert np.all(np.abs(z) < 4.5), z


def test_dfa_and_fa_corr_start_near_zero():
    """corr(g, g~) of rho = 0 FA and DFA is O(N^-1/2) at init (Fig. 3c), GD's is 1."""
    rng = np.random.default_rng(3)
    X, y = rng.standard_normal((4, 5)), np.array([1.0, -1.0, 1.0, -1.0])
    for rule in ("fa", "dfa"):
        run = simulate_rule_training(X, y, rule=rule, hidden_layers=2, widths=1000, gamma0=1.0,
                                     eta=0.0, steps=1, activation="tanh", seed=range(4))
        assert abs(run.corr[:, 0].mean()) < 0.05


def test_bad_input():
    X, y = np.eye(2), np.ones(2)
    kw = {"hidden_layers": 1, "widths": 10, "gamma0": 1.0, "eta": 0.1, "steps": 2}
    with pytest.raises(DomainError, match=r"\[-1, 1\]"):
        simulate_rule_training(X, y, rule="fa", rho=-1.2, **kw)
    with pytest.raises(DomainError, match="feedback alignment only"):
        simulate_rule_training(X, y, rule="hebb", rho=0.3, **kw)
    with pytest.raises(DomainError, match="unknown learning rule"):
        simulate_rule_training(X, y, rule="adam", **kw)
    with pytest.raises(DomainError):
        simulate_rule_training(X, np.array([1.0, np.nan]), rule="gd", **kw)
    run = simulate_rule_training(X, y, rule="dfa", **kw)
    assert run.layers == (1,) and run.stderr("f") is None
    with pytest.raises(DomainError):
        run.value("phi", layer=2)


@pytest.mark.parametrize("extra", [{"temperature": 0.05},
                                   {"temperature": 0.05, "weight_decay": 0.5},
                                   {"temperature": 0.05, "weight_decay": 0.2, "momentum": 0.6},
                                   {"widths": (30, 50, 40)},
                                   {"widths": (30, 50, 40), "temperature": 0.1,
                                    "weight_decay": 0.3}])
def test_gd_rule_is_the_gd_trainer_with_langevin_noise_and_unequal_widths(extra):
    """Langevin noise (B&P 2022 app. K) and unequal widths (B&P 2022 app. D.8): both trainers
    draw the noise from the network's generator after the initial weights, so rule='gd' is the
    GD trainer network for network (to rounding).  The same comparison rejects a temperature
    x 0.8 and, for unequal widths, equal widths."""
    rng = np.random.default_rng(0)
    X, y = rng.standard_normal((3, 4)), np.array([1.0, -0.5, 0.7])
    kw = {"hidden_layers": 3, "widths": 40, "gamma0": 1.2, "eta": 0.1, "steps": 8,
          "activation": "tanh", "seed": [1, 2], **extra}
    a = simulate_rule_training(X, y, rule="gd", **kw)
    b = simulate_training(X, y, **kw)
    for name in ("f", "phi", "g", "ntk"):
        np.testing.assert_allclose(getattr(a, name), getattr(b, name), atol=1e-12, err_msg=name)
    np.testing.assert_allclose(a.gtilde, a.g, atol=1e-12)
    assert a.width == b.widths and a.temperature == kw.get("temperature", 0.0)
    wrong = []
    if "temperature" in extra:
        wrong.append({**kw, "temperature": 0.8 * extra["temperature"]})
    if "widths" in extra:
        wrong.append({**kw, "widths": 40})
    for bad in wrong:
        c = simulate_rule_training(X, y, rule="gd", **bad)
        assert np.max(np.abs(c.f - b.f)) > 1e-6


def test_langevin_noise_in_the_null_space_of_the_data_has_the_closed_form_variance():
    """Input-weight directions orthogonal to every training input get no update under any rule
    (the W^0 increment is a combination of the training inputs), so there each weight follows
    the Ornstein-Uhlenbeck chain theta <- rho theta + sigma xi, rho = 1 - eta lambda, whose
    variance from N(0, 1) is rho^(2t) + (temperature / lambda) (1 - rho^(2t)): the Langevin
    prior N(0, temperature / lambda) of B&P 2022 app. K.2 at long times.  For a linear network
    Phi^1 at a unit test input x* (|x*|^2 = D) in that null space has this mean.  Checked for
    rho-FA and DFA at finite t and near equilibrium, with the seed-to-seed standard error
    (4.5 sigma); a temperature x 0.8 is rejected by the same test."""
    rng = np.random.default_rng(5)
    D, P = 4, 3
    X = rng.standard_normal((P, D))
    u = np.linalg.svd(X)[2][-1]                       # the null direction of the training inputs
    xs = np.sqrt(D) * u[None]
    temp, lam, eta, T = 0.3, 1.0, 0.1, 41
    t = np.arange(T)
    r2 = (1.0 - eta * lam) ** (2 * t)
    exact = r2 + temp / lam * (1.0 - r2)
    for rule in ("fa", "dfa"):
        run = simulate_rule_training(X, np.array([1.0, -1.0, 0.5]), rule=rule, hidden_layers=1,
                                     widths=40, gamma0=1.0, eta=eta, steps=T, activation="linear",
                                     seed=11 + (rule == "dfa"), networks=150, X_test=xs, weight_decay=lam,
                                     temperature=temp, record_kernels=False)
        phi = run.phi[:, 0, t, P, t, P]                # (S, T): Phi^1_{x* x*}(t, t)
        m, se = phi.mean(axis=0), phi.std(axis=0, ddof=1) / np.sqrt(phi.shape[0])
        for k in (5, 15, T - 1):
            assert abs(m[k] - exact[k]) < 4.5 * se[k], (rule, k, m[k], se[k], exact[k])
        wrong = r2[-1] + 0.8 * temp / lam * (1.0 - r2[-1])
        assert abs(m[-1] - wrong) > 6 * se[-1]


@pytest.mark.parametrize("rule", ["fa", "dfa"])
def test_frozen_feedback_gets_no_langevin_noise(rule):
    """In a linear network the pseudo-gradients of rho-FA and DFA are products of the frozen
    feedback alone, so with the Langevin noise on the trained weights G~(t, s) must not depend
    on s (it would if the feedback were noised); the trained weights do move (G(t, s) does)."""
    rng = np.random.default_rng(1)
    X, y = rng.standard_normal((3, 4)), np.array([1.0, -0.5, 0.7])
    run = simulate_rule_training(X, y, rule=rule, rho=0.5 if rule == "fa" else None,
                                 hidden_layers=2, widths=(20, 30), gamma0=1.0, eta=0.1, steps=6,
                                 activation="linear", seed=[3, 4], temperature=0.2)
    gt = run.gtilde                                    # (S, L, T, n, T, n)
    assert np.max(np.abs(gt - gt[:, :, :, :, :1, :])) < 1e-12
    assert np.max(np.abs(run.g - run.g[:, :, :, :, :1, :])) > 1e-3


@pytest.mark.parametrize("rule,rho", [("fa", 0.5), ("dfa", None), ("hebb", None), ("gln", None)])
def test_lazy_entk_with_unequal_widths_is_the_equal_width_limit(rule, rho):
    """Unequal widths (B&P 2022 app. D.8): every kernel is normalized by its own layer's width,
    so at initialization the eNTK of widths (1000, 3000) has the infinite-width Table 2 value
    (4.5 SE).  Normalizing Phi^1 by the reference width N_L instead (the eNTK's l = 1 term x 1/3)
    is rejected for the rules whose eNTK has that term (FA, GLN)."""
    th, L = np.pi / 3, 2
    X = np.sqrt(2.0) * np.array([[1.0, 0.0], [np.cos(th), np.sin(th)]])
    run = simulate_rule_training(X, np.array([1.0, -1.0]), rule=rule, rho=rho, hidden_layers=L,
                                 widths=(1000, 3000), gamma0=1.0, eta=0.0, steps=1,
                                 activation="relu", seed=range(16))
    off = 0.5 * (run.ntk[:, 0, 0, 1] + run.ntk[:, 0, 1, 0])
    m, se = off.mean(), off.std(ddof=1) / np.sqrt(off.size)
    exact = _lazy_relu(th, L, rule)
    assert abs(m - exact) < 4.5 * se, (m, se, exact)
    if rule in ("fa", "gln"):
        term = 0.5 * (run.gtilde[:, 1, 0, 0, 0, 1] + run.gtilde[:, 1, 0, 1, 0, 0]) \
            * run.phi[:, 0, 0, 0, 0, 1]                  # G~^2 Phi^1 at the off-diagonal
        wrong = off - term * (1.0 - 1000 / 3000)
        assert abs(wrong.mean() - exact) > 6 * wrong.std(ddof=1) / np.sqrt(off.size)


def test_gated_linear_network_with_linear_gates_and_unequal_widths_is_gd():
    """GLN with the linear activation has gates phi' = 1, so it is the GD linear network; with
    unequal widths (its own gated forward pass) it equals simulate_training network for
    network (no temperature: the gates take draws from the generator before the noise)."""
    rng = np.random.default_rng(2)
    X, y = rng.standard_normal((3, 4)), np.array([1.0, -0.5, 0.7])
    kw = {"hidden_layers": 3, "widths": (20, 35, 25), "gamma0": 1.5, "eta": 0.2, "steps": 7,
          "activation": "linear", "seed": [5, 6], "weight_decay": 0.3, "momentum": 0.4}
    a = simulate_rule_training(X, y, rule="gln", **kw)
    b = simulate_training(X, y, **kw)
    for name in ("f", "phi", "g", "ntk"):
        np.testing.assert_allclose(getattr(a, name), getattr(b, name), atol=1e-12, err_msg=name)
    np.testing.assert_array_equal(simulate_rule_training(X, y, rule="gln", temperature=0.0, **kw).f,
                                  a.f)
