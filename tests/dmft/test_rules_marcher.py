"""One marcher for GD and every learning rule (Bordelon & Pehlevan, ICLR 2023, App. E).

``solve_rule_deep_linear`` runs the marcher of ``solve_deep_linear`` with a rule hook
(:class:`effth.dmft.solvers.deep_linear.RuleFields`).  Checked here against

* ``solve_deep_linear`` itself for GD (and GLN with linear gates), at rounding level;
* an independent implementation written in a different representation: every field as an
  explicit linear combination of its layer's Gaussian sources (App. A's scheme, generalised to
  the rules), whose covariances give the kernels -- no ``M_g`` or response matrices shared with
  the code under test;
* trained networks (the true-gradient kernels of deep Hebbian networks, which need the
  pseudo-gradient kernel ``G~^{l+1}`` at the current time inside ``D^l``'s drift).
"""

from __future__ import annotations

import numpy as np
import pytest

import effth as et
from effth.errors import DomainError
from effth.simulation.rules import simulate_rule_training
from effth.dmft import solve_deep_linear
from effth.dmft.solvers.deep_linear import RuleFields
from effth.dmft.rules.solvers import solve_rule_deep_linear


def _reference(kx, y, L, rule, rho, g0, eta, T, a=None, k=None):
    """Fields as coefficient vectors on (u^l, r^l, v^l): ``h = Hu u + Hv v``,
    ``g = Gu u + Gr r + Gv v``; ``v`` is the static feedback coordinate (FA/DFA, variance 1,
    ``Cov(r^l(t), v^l) = rho G~^{l+1}(t)``).  GD: ``h = Hu u + Hr r``.  Exact closure
    ``f = <g^L h^L> / gamma0``.  Returns ``f``, ``Phi^l``, ``G^l``, ``G~^l`` (flattened
    ``(t, mu)`` indices).

    ``a``, ``k``: an optimizer ``W(t) = a(t) W(0) + sum_{s<t} k(t-1-s) eta G(s)`` (weight decay,
    momentum): the initial weights act as ``a(t) W(0)`` in both passes at time ``t`` (so
    ``a(t)`` multiplies the sources and the response terms of row ``t``), the frozen feedback
    does not decay, and every drift carries ``k(t-1-s)``."""
    a = np.ones(T) if a is None else a
    k = np.ones(T) if k is None else k
    P = len(y)
    N = T * P
    z = lambda *s: np.zeros(s)
    Hu = {l: z(N, N) for l in range(1, L + 1)}
    Hr = {l: z(N, N) for l in range(1, L + 1)}
    Hv = {l: z(N) for l in range(1, L + 1)}
    Gu = {l: z(N, N) for l in range(1, L + 2)}
    Gr = {l: z(N, N) for l in range(1, L + 1)}
    Gv = {l: z(N) for l in range(1, L + 1)}
    H = {0: np.tile(kx, (T, T)), **{l: z(N, N) for l in range(1, L + 1)}}
    G = {L + 1: np.ones((N, N)), **{l: z(N, N) for l in range(1, L + 1)}}
    Gt = {L + 1: np.ones((N, N)), **{l: z(N, N) for l in range(1, L + 1)}}
    rv = rho if rule == "fa" else 0.0
    D = z(T, P)

    def cov(a, b, l):               # <(a . sources)(b . sources)^T> at layer l
        (au, ar, av), (bu, br, bv) = a, b
        cv = rv * Gt[l + 1][:, 0]   # FA/DFA: G~^{l+1}(t, s) does not depend on s
        return (au @ H[l - 1] @ bu.T + ar @ G[l + 1] @ br.T + np.outer(ar @ cv, bv)
                + np.outer(av, br @ cv) + np.outer(av, bv))

    f = z(T, P)
    for t in range(T):
        rs, p = slice(t * P, (t + 1) * P), slice(0, t * P)
        Dp = D[:t].ravel()
        Kp = np.repeat(k[:t][::-1], P)                              # k(t-1-s) on (s, nu)
        for l in range(L, 0, -1):                                   # backward
            Bm = a[t] * Gu[l + 1][rs, p] + eta * g0 * Gt[l + 1][rs, p] * (Kp * Dp)[None, :]
            Gu[l][rs] = Bm @ Hu[l][p]
            Gr[l][rs] = Bm @ Hr[l][p]
            Gr[l][rs, rs] += a[t] * np.eye(P)
            Gv[l][rs] = Bm @ Hv[l][p]
            g_all, g_t = (Gu[l], Gr[l], Gv[l]), (Gu[l][rs], Gr[l][rs], Gv[l][rs])
            G[l][rs] = cov(g_t, g_all, l)
            G[l][:, rs] = G[l][rs].T
            if rule == "gd":
                Gt[l][rs], Gt[l][:, rs] = G[l][rs], G[l][rs].T
            elif rule in ("fa", "dfa"):
                Gt[l][rs] = (Gr[l][rs] @ (rv * Gt[l + 1][:, 0]) + Gv[l][rs])[:, None]
            else:                                                   # Hebb: <g(t) h(s<t)> Delta(s)
                Gt[l][rs, p] = cov(g_t, (Hu[l][p], Hr[l][p], Hv[l][p]), l) * Dp[None, :]
        for l in range(1, L + 1):                                   # forward
            drift = eta * g0 * H[l - 1][rs, p] * (Kp * Dp)[None, :]
            if rule == "gd":
                Am = (a[t] * Hr[l - 1][rs, p] if l > 1 else 0.0) + drift
                Hu[l][rs], Hr[l][rs] = Am @ Gu[l][p], Am @ Gr[l][p]
            elif rule in ("fa", "dfa"):
                Hv[l][rs] = (a[t] * rv * Hv[l - 1][rs] if l > 1 else 0.0) + drift.sum(axis=1)
            else:
                Hu[l][rs] = (drift * Dp[None, :]) @ Hu[l][p]
            Hu[l][rs, rs] += a[t] * np.eye(P)
            H[l][rs] = cov((Hu[l][rs], Hr[l][rs], Hv[l][rs]), (Hu[l], Hr[l], Hv[l]), l)
            H[l][:, rs] = H[l][rs].T
        gh = cov((Gu[L][rs], Gr[L][rs], Gv[L][rs]), (Hu[L][rs], Hr[L][rs], Hv[L][rs]), L)
        f[t] = np.diag(gh) / g0
        D[t] = y - f[t]
    return f, H, G, Gt


KX3 = np.array([[1.0, 0.3, -0.2], [0.3, 1.2, 0.4], [-0.2, 0.4, 0.9]])
Y3 = np.array([1.0, -0.7, 0.4])


@pytest.mark.parametrize("L", [1, 2, 3])
def test_gd_through_the_rule_solver_is_solve_deep_linear(L):
    """GD and GLN (linear gates) through the rule solver equal solve_deep_linear (same marcher),
    with test points and both closures; G~ = G for GD."""
    rng = np.random.default_rng(3)
    X, Xt = rng.standard_normal((3, 4)), rng.standard_normal((2, 4))
    for closure in ("exact", "ntk"):
        kw = {"hidden_layers": L, "gamma0": 1.2, "eta": 0.04, "steps": 18, "closure": closure}
        b = solve_deep_linear(X, Y3, X_test=Xt, **kw)
        for rule in ("gd", "gln"):
            a = solve_rule_deep_linear(X, Y3, X_test=Xt, rule=rule, **kw)
            np.testing.assert_allclose(a.f, b.f, rtol=0, atol=1e-12)
            np.testing.assert_allclose(a.phi, b.phi, rtol=0, atol=1e-12)
            np.testing.assert_allclose(a.g, b.g, rtol=0, atol=1e-12)
            np.testing.assert_allclose(a.gtilde, a.g, rtol=0, atol=0)
            np.testing.assert_allclose(a.ntk, b.ntk, rtol=0, atol=1e-12)


@pytest.mark.parametrize("rule,rho,g0", [("gd", None, 1.3), ("fa", 0.0, 1.3), ("fa", 0.5, 1.3),
                                         ("fa", -0.4, 1.3), ("fa", 1.0, 1.3), ("dfa", None, 1.3),
                                         ("hebb", None, 0.6)])
@pytest.mark.parametrize("L", [1, 2, 3])
def test_marcher_equals_source_coefficient_reference(rule, rho, g0, L):
    """Every rule, every kernel, at rounding level (1e-12 relative to the kernels' scale)."""
    T, eta = 14, 0.06
    ref_f, ref_H, ref_G, ref_Gt = _reference(KX3, Y3, L, rule, rho, g0, eta, T)
    res = solve_rule_deep_linear(kernel=KX3, y=Y3, rule=rule, rho=rho, hidden_layers=L,
                                 gamma0=g0, eta=eta, steps=T)
    P = 3
    np.testing.assert_allclose(res.f, ref_f, rtol=0, atol=1e-12)
    for l in range(1, L + 1):
        for name, ref in (("phi", ref_H), ("g", ref_G)):
            got = res.value(name, layer=l).reshape(T * P, T * P)
            np.testing.assert_allclose(got, ref[l], rtol=0, atol=1e-12 * np.abs(ref[l]).max())
        got = res.value("gtilde", layer=l).reshape(T * P, T * P)
        # the reference fills G~ on s < t only for Hebb (all the dynamics uses)
        mask = np.tril(np.ones((T, T)), -1).repeat(P, 0).repeat(P, 1) if rule == "hebb" else 1.0
        np.testing.assert_allclose(got * mask, ref_Gt[l] * mask, rtol=0,
                                   atol=1e-12 * max(1.0, np.abs(ref_Gt[l]).max()))


def test_wrong_hook_is_caught_by_the_reference():
    """The comparison can fail: a hook whose ρ is off by 10 % changes f far beyond 1e-12."""
    from effth.dmft.solvers.deep_linear import _march, _Model
    from effth.dmft.grid import prepare_data
    data = prepare_data(kernel=KX3, y=Y3)
    model = _Model(eta=0.06, g2=1.69, rho=1.0, lam=0.0, b=0.0, Y=Y3[:, None], closure="exact",
                   gi=False)
    (_, _, _, _, _), f = _march(data, model, 2, 14, rule=RuleFields("static", 0.45, 1.3))
    ref_f = _reference(KX3, Y3, 2, "fa", 0.5, 1.3, 0.06, 14)[0]
    assert np.abs(f[..., 0] - ref_f).max() > 1e-4
    with pytest.raises(DomainError):
        RuleFields("sgd")


def test_hebb_true_gradient_kernels_vs_networks():
    """Deep Hebb (L = 3): the true-gradient kernel G^1 and G~^1 = <g^1 g~^1> need G~^2(t, s < t)
    inside D^1's drift.  16 width-1000 networks agree with the DMFT (4.5 sigma on G^1, G~^1
    and the eNTK); the theory at gamma0 x 0.8 is rejected (> 5 sigma).  (Leaving G~^{l+1}(t, .)
    out of the drift, as the rule solver did before it shared this marcher, puts G~^1 68 sigma
    and G^1 18 sigma away from 16 width-2000 networks.)"""
    KX = np.array([[1.0, 0.5], [0.5, 1.0]])
    X, y = np.linalg.cholesky(2 * KX), np.array([1.0, -0.5])
    kw = {"rule": "hebb", "hidden_layers": 3, "eta": 0.05, "steps": 31}
    th = solve_rule_deep_linear(X, y, gamma0=0.75, **kw)
    run = simulate_rule_training(X, y, widths=1000, seed=range(16), activation="linear",
                                 gamma0=0.75, **kw)
    for name, layer in (("g", 1), ("gtilde", 1), ("ntk", None)):
        assert et.compare(th, run, name, layer=layer).max_abs_z < 4.5, name
    wrong = solve_rule_deep_linear(X, y, gamma0=0.6, **kw)
    assert et.compare(wrong, run, "gtilde", layer=1).max_abs_z > 5


def _heavy_ball(eta, lam, mu, T):
    """``a(t)``, ``k(j)`` of ``v <- mu v + (1 - mu) (u - eta lam theta)``, ``theta <- theta + v``
    by running it on a scalar: from ``theta = 1`` without kicks, and after a unit kick."""
    def run(theta, kick, n):
        out, v = [], 0.0
        for t in range(n):
            out.append(theta)
            v = mu * v + (1 - mu) * ((kick if t == 0 else 0.0) - eta * lam * theta)
            theta = theta + v
        return np.array(out)
    return run(1.0, 0.0, T), run(0.0, 1.0, T + 1)[1:]


@pytest.mark.parametrize("rule,rho,g0", [("gd", None, 1.3), ("fa", 0.5, 1.3), ("fa", -0.4, 1.3),
                                         ("dfa", None, 1.3), ("hebb", None, 0.6)])
@pytest.mark.parametrize("L", [1, 2, 3])
@pytest.mark.parametrize("lam,mu", [(0.9, 0.0), (0.0, 0.6), (0.5, 0.5)])
def test_decay_and_momentum_equal_source_coefficient_reference(rule, rho, g0, L, lam, mu):
    """Weight decay and momentum (App. C, eqs. (50)-(53)): every rule, every kernel, at rounding
    level against the reference with the optimizer's a(t), k(j)."""
    T, eta = 14, 0.06
    a, k = _heavy_ball(eta, lam, mu, T)
    ref_f, ref_H, ref_G, _ = _reference(KX3, Y3, L, rule, rho, g0, eta, T, a=a, k=k)
    res = solve_rule_deep_linear(kernel=KX3, y=Y3, rule=rule, rho=rho, hidden_layers=L,
                                 gamma0=g0, eta=eta, steps=T, weight_decay=lam, momentum=mu)
    np.testing.assert_allclose(res.f, ref_f, rtol=0, atol=1e-12)
    for l in range(1, L + 1):
        for name, ref in (("phi", ref_H), ("g", ref_G)):
            got = res.value(name, layer=l).reshape(T * 3, T * 3)
            np.testing.assert_allclose(got, ref[l], rtol=0,
                                       atol=1e-12 * max(1.0, np.abs(ref[l]).max()))
    # the a(t) factors matter: the reference without them is far away
    if lam > 0:
        bad = _reference(KX3, Y3, L, rule, rho, g0, eta, T, k=k)[0]
        assert np.abs(res.f - bad).max() > 1e-3
