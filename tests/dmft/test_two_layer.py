"""Two-layer DMFT by forward marching: quadrature vs closed forms, Monte Carlo, weight decay."""

from __future__ import annotations

import numpy as np
import pytest

import effth as et

from effth.errors import DomainError
from effth.simulation.training import simulate_training
from effth.dmft import solve_deep_linear
from effth.dmft.solvers.monte_carlo import solve_monte_carlo
from effth.dmft.solvers.two_layer import solve_two_layer

KX = np.array([[1.0, 0.5], [0.5, 1.0]])
X = np.linalg.cholesky(2 * KX)
Y = np.array([1.0, -0.5])
XT = np.array([[0.3, -0.8]])


def test_quadrature_linear_is_exact():
    """phi = id: the fields are linear in (u, r), Gauss-Hermite is exact -> the closed equations."""
    ref = solve_deep_linear(X, Y, X_test=XT, hidden_layers=1, gamma0=1.3, eta=0.05, steps=30)
    q = solve_two_layer(X, Y, X_test=XT, activation="linear", gamma0=1.3, eta=0.05, steps=30,
                        nodes=6)
    for name in ("phi", "g", "f"):
        np.testing.assert_allclose(getattr(q, name), getattr(ref, name), atol=1e-12, err_msg=name)


def test_quadrature_tanh_matches_alternating_monte_carlo():
    """The quadrature solve against two Monte-Carlo solvers of the same DMFT, by z-scores from
    their own standard errors (no tolerance floors): the alternating solver (errors from its
    batches) and the marching one (errors from 16 independent seeds).  The same quadrature at
    gamma0 x 0.9 is rejected by both."""
    import effth as et
    kw = dict(activation="tanh", eta=0.1, steps=12)
    q = solve_two_layer(X, Y, gamma0=1.0, **kw)
    q2 = solve_two_layer(X, Y, gamma0=1.0, nodes=60, **kw)
    assert np.max(np.abs(q.phi - q2.phi)) < 1e-3 and np.max(np.abs(q.f - q2.f)) < 1e-3
    wrong = solve_two_layer(X, Y, gamma0=0.9, **kw)
    mc = solve_monte_carlo(X, Y, hidden_layers=1, gamma0=1.0, samples=12000, iterations=12,
                           seed=3, **kw)
    zs = {nm: [et.compare(th, mc, nm, layer=None if nm == "f" else 1).max_abs_z
               for th in (q, wrong)] for nm in ("phi", "g", "f")}
    assert all(z[0] < 5.0 for z in zs.values()), zs
    assert max(z[1] for z in zs.values()) > 5.0, zs
    # the marching Monte-Carlo variant of the same solver
    idx = np.arange(12)
    runs = [solve_two_layer(X, Y, gamma0=1.0, method="monte_carlo", samples=10000, seed=s,
                            two_time=False, **kw) for s in range(16)]
    z_wrong = {}
    for nm in ("f", "phi", "g"):                    # t > 0: at t = 0, f = 0 up to rounding
        get = (lambda r: r.f[1:]) if nm == "f" else (lambda r: getattr(r, nm)[0][idx, :, idx, :][1:])
        a = np.array([get(r) for r in runs])
        m, se = a.mean(axis=0), a.std(axis=0, ddof=1) / np.sqrt(len(runs))
        assert np.max(np.abs(m - get(q)) / se) < 5.0, nm
        z_wrong[nm] = np.max(np.abs(m - get(wrong)) / se)
    assert max(z_wrong.values()) > 5.0, z_wrong


def test_even_in_gamma0_and_lazy_limit():
    a = solve_two_layer(X, Y, activation="tanh", gamma0=0.8, eta=0.1, steps=10, nodes=20)
    b = solve_two_layer(X, Y, activation="tanh", gamma0=-0.8, eta=0.1, steps=10, nodes=20)
    np.testing.assert_allclose(a.phi, b.phi, atol=1e-12)
    np.testing.assert_allclose(a.f, b.f, atol=1e-12)
    lazy = solve_two_layer(X, Y, activation="tanh", gamma0=1e-3, eta=0.1, steps=10, nodes=20)
    zero = solve_two_layer(X, Y, activation="tanh", gamma0=0.0, eta=0.1, steps=10)
    assert np.max(np.abs(lazy.f - zero.f)) < 1e-4
    assert np.max(np.abs(lazy.phi - zero.phi)) < 1e-4


def test_weight_decay_representer_fixed_point_linear():
    """Bordelon & Pehlevan (2022), App. J, eq. (98): at the fixed point of a kappa-homogeneous net (linear L = 1:
    kappa = 2), f_train = K (K + lambda kappa I)^-1 y with the final NTK -- exact here."""
    for g0, lam in ((2.0, 0.5), (1.0, 0.2)):
        r = solve_two_layer(X, Y, activation="linear", gamma0=g0, eta=0.05, steps=600,
                            weight_decay=lam, two_time=False, nodes=5)
        K = r.ntk_diag[-1]
        np.testing.assert_allclose(r.f[-1], K @ np.linalg.solve(K + 2 * lam * np.eye(2), Y),
                                   atol=1e-10)
        assert r.loss[-1] < 0.1           # a nontrivial fixed point (trivial: loss = 0.625)


def test_weight_decay_relu_figure3():
    """Bordelon & Pehlevan (2022), Fig. 3 (L = 1 ReLU, lambda = 1): the fixed point is trivial (f, K -> 0) at small
    gamma0, nontrivial at larger gamma0, and the final loss falls with gamma0; the representer
    identity (kappa = 2) holds up to the chattering of units stuck at the ReLU kink."""
    final = []
    for g0 in (0.5, 2.0, 3.0):
        r = solve_two_layer(X, Y, activation="relu", gamma0=g0, eta=0.05, steps=300,
                            weight_decay=1.0, two_time=False, nodes=30)
        final.append(r.loss[-1])
        K = r.ntk_diag[-1]
        if g0 == 0.5:
            assert np.max(np.abs(r.f[-1])) < 1e-3 and np.max(np.abs(K)) < 1e-3
        else:
            np.testing.assert_allclose(r.f[-1, :2], K @ np.linalg.solve(K + 2 * np.eye(2), Y),
                                       atol=0.08)
    assert final[0] > 0.6 > final[1] > final[2]


def test_weight_decay_matches_network():
    """ReLU with weight decay against 8 width-2000 networks.  The kinked fields make the
    theory's quadrature the larger error (its estimate, a rerun at 3/4 of the nodes, is
    ~1e-4 in the loss and ~1e-3 in f), so it is added in quadrature to the networks' standard
    errors; the same theory at gamma0 x 0.9 is rejected."""
    kw = dict(eta=0.05, steps=200, weight_decay=1.0)
    r = solve_two_layer(X, Y, activation="relu", gamma0=3.0, two_time=False, nodes=30, **kw)
    wrong = solve_two_layer(X, Y, activation="relu", gamma0=2.7, two_time=False, nodes=30, **kw)
    s = simulate_training(X, Y, hidden_layers=1, widths=2000, gamma0=3.0, activation="relu",
                          seed=range(8), record_kernels=False, **kw)
    q = r.diagnostics.quadrature_error
    q["ntk"] = q["g"] * float(np.max(np.abs(r.data.kx))) + q["phi"]
    for name in ("loss", "f", "ntk"):
        se = np.sqrt(s.stderr(name) ** 2 + q[name] ** 2)
        assert et.compare(r, s, name, stderr=se).max_abs_z < 5, name
        assert et.compare(wrong, s, name, stderr=se).max_abs_z > 5 or name == "ntk", name


def test_bad_input():
    with pytest.raises(DomainError, match="method"):
        solve_two_layer(X, Y, gamma0=1.0, eta=0.1, steps=5, method="exact")
    with pytest.raises(DomainError, match="points"):
        solve_two_layer(kernel=np.eye(6), y=np.ones(6), gamma0=1.0, eta=0.1, steps=5)
    with pytest.raises(DomainError, match="weight_decay"):
        solve_two_layer(X, Y, gamma0=1.0, eta=0.1, steps=5, weight_decay=-1.0)
    with pytest.raises(DomainError, match="stability"):
        solve_two_layer(X, Y, activation="linear", gamma0=1.0, eta=2.0, steps=5)


Y2 = np.array([[1.0, 0.3], [-0.5, 0.8]])


@pytest.mark.parametrize("activation,nodes", [("linear", 5), ("tanh", 12)])
def test_multiple_outputs_match_network(activation, nodes):
    """Bordelon & Pehlevan (2022), App. I: C = 2 outputs share the features; G^{cc'} and the NTK K^{cc'} (eq. (95))."""
    r = solve_two_layer(X, Y2, activation=activation, gamma0=1.0, eta=0.1, steps=20, nodes=nodes)
    assert r.f.shape == (20, 2, 2) and r.g.shape == (1, 20, 2, 20, 2, 2, 2)
    assert r.ntk_diag.shape == (20, 2, 2, 2, 2)
    s = simulate_training(X, Y2, hidden_layers=1, widths=4000, activation=activation, gamma0=1.0, eta=0.1,
                          steps=20, seed=range(8))
    assert s.f.shape == (8, 20, 2, 2) and s.ntk.shape == (8, 20, 2, 2, 2, 2)
    err_f = np.max(np.abs(s.mean("f") - r.f))
    # 8 networks: z-scores from their spread (|z| <= 2.1 measured); gamma0 x 0.9 is rejected
    wrong = solve_two_layer(X, Y2, activation=activation, gamma0=0.9, eta=0.1, steps=20,
                            nodes=nodes)
    zs = {(nm, l): (et.compare(r, s, nm, l).max_abs_z, et.compare(wrong, s, nm, l).max_abs_z)
          for nm, l in (("f", None), ("ntk", None), ("phi", 1), ("g", 1))}
    assert all(z < 5 for z, _ in zs.values()), zs
    assert max(w for _, w in zs.values()) > 8, zs
    # the outputs interact through the shared features: solving them one at a time is wrong
    solo = np.stack([solve_two_layer(X, Y2[:, c], activation=activation, gamma0=1.0, eta=0.1,
                                     steps=20, nodes=nodes).f for c in range(2)], axis=-1)
    assert np.max(np.abs(solo - r.f)) > 3 * err_f
    # one output passed as (P, 1) is the scalar solver
    one = solve_two_layer(X, Y[:, None], activation=activation, gamma0=1.0, eta=0.1, steps=8,
                          nodes=nodes)
    ref = solve_two_layer(X, Y, activation=activation, gamma0=1.0, eta=0.1, steps=8, nodes=nodes)
    np.testing.assert_allclose(one.f[..., 0], ref.f, atol=1e-14)
    np.testing.assert_allclose(one.g[..., 0, 0], ref.g, atol=1e-14)


def test_trainable_bias_matches_network():
    """Bordelon & Pehlevan (2022), App. H: a bias on h^1 (b(0) ~ N(0,1), db/dt = gamma0 sum Delta g) is K^x -> K^x + 1."""
    # the comparison is at 0.01: the default rule's 1e-3 suffices (quad_tol=3e-3 says so)
    r = solve_two_layer(X, Y, activation="tanh", gamma0=1.0, eta=0.1, steps=20, bias=True,
                        quad_tol=3e-3)
    np.testing.assert_allclose(r.data.kx, KX + 1.0)
    s = simulate_training(X, Y, hidden_layers=1, widths=4000, activation="tanh", gamma0=1.0, eta=0.1,
                          steps=20, seed=range(4), bias=True)
    assert np.max(np.abs(s.mean("f") - r.f)) < 0.01
    assert np.max(np.abs(s.mean("ntk") - r.ntk_diag)) < 0.05
    no_bias = solve_two_layer(X, Y, activation="tanh", gamma0=1.0, eta=0.1, steps=20)
    assert np.max(np.abs(no_bias.f - r.f)) > 0.04


def test_defaults_meet_their_own_quadrature_tolerance_or_say_what_to_do():
    """The default nodes meet the default quad_tol on two training points (three Gaussian
    dimensions); on four dimensions (erf, trainable bias, three training inputs and one test
    input) they do not, and the default budget is refused, naming what to pass."""
    import warnings
    from effth.errors import AccuracyWarning
    KX = np.array([[1.0, 0.5], [0.5, 1.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error", AccuracyWarning)
        r = solve_two_layer(kernel=KX, y=np.array([1.0, -0.5]), gamma0=1.0, eta=0.1, steps=30,
                            activation="tanh")
    assert r.diagnostics.quadrature_error["f"] < 1e-4
    rng = np.random.default_rng(0)
    X, Xt = rng.normal(size=(3, 2)), rng.normal(size=(1, 2))
    with pytest.raises(DomainError, match=r"4 Gaussian dimensions.*nodes=.*max_nodes=.*"
                                          r"method='monte_carlo'"):
        solve_two_layer(X, np.array([1.0, -0.5, 0.3]), X_test=Xt, gamma0=1e-3, eta=0.1, steps=6,
                        activation="erf", bias=True)


def _four_dim_erf_case():
    """Three training inputs and one test input in two dimensions, erf, trainable bias: four
    Gaussian dimensions, so the default budget (64,000 points) allows 15 nodes each."""
    rng = np.random.default_rng(3)
    X, Xt = rng.normal(size=(3, 2)), rng.normal(size=(1, 2))
    return X, rng.normal(size=3), dict(X_test=Xt, eta=0.1, steps=10, activation="erf", bias=True)


def test_quadrature_error_estimate_bounds_the_error_near_the_lazy_limit():
    """At gamma0 -> 0 the exact answer is the static-NTK dynamics with the closed-form erf
    kernels.  15 Gauss-Hermite nodes in four dimensions are 0.09 off there (30 % of f); the
    estimate must not say less (a rerun at 11 nodes differs by only 0.03: Gauss-Hermite's error
    oscillates with the node count), and the default budget is refused outright."""
    from effth.errors import AccuracyWarning
    X, y, kw = _four_dim_erf_case()
    exact = solve_two_layer(X, y, gamma0=0.0, **kw).f            # static NTK, closed forms
    with pytest.raises(DomainError, match=r"nodes=.*max_nodes=.*method='monte_carlo'"):
        solve_two_layer(X, y, gamma0=1e-3, **kw)
    with pytest.warns(AccuracyWarning, match="estimated error of f"):
        r = solve_two_layer(X, y, gamma0=1e-3, nodes=15, **kw)
    actual = np.max(np.abs(r.f - exact))
    assert actual > 0.05                                          # the case is a hard one
    est = r.diagnostics.quadrature_error
    assert actual <= est["f"] < 1.5 * actual, (actual, est)
    # the lazy part of the estimate is exact; the rest is the gamma0^2 change, here ~1e-6
    assert abs(est["lazy_f"] - actual) < 1e-4


@pytest.mark.parametrize("activation", ["tanh", "erf", "gelu"])
def test_quadrature_error_estimate_bounds_the_error_with_feature_learning(activation):
    """Deliberately coarse rules (12 and 16 Gauss-Hermite nodes) on two Gaussian dimensions at
    gamma0 = 0.5 and 2 and on three at gamma0 = 2, against trapezoid rules of 200 and 90 nodes
    (converged to < 1e-6 here): the estimate is at least the actual error of f, loss,
    Phi(t,t) and G(t,t)."""
    import warnings
    from effth.errors import AccuracyWarning
    rng = np.random.default_rng(11)
    X3 = rng.normal(size=(2, 2))
    for kwd, g0, big in ((dict(X=X3[:1], y=np.array([0.7])), 0.5, 200),
                         (dict(X=X3[:1], y=np.array([0.7])), 2.0, 200),
                         (dict(X=X3, y=np.array([0.7, -0.4])), 2.0, 90)):
            kw = dict(kwd, gamma0=g0, eta=0.1, steps=12, activation=activation, two_time=False)
            ref = solve_two_layer(**kw, nodes=big, quadrature_rule="trapezoid", quad_tol=None)
            for nodes in (12, 16):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", AccuracyWarning)
                    r = solve_two_layer(**kw, nodes=nodes)
                est = r.diagnostics.quadrature_error
                idx = np.arange(r.grid.steps)
                actual = {"f": np.max(np.abs(r.f - ref.f)),
                          "loss": np.max(np.abs(r.loss - ref.loss)),
                          "phi": np.max(np.abs(r.phi[0][idx, :, idx] - ref.phi[0][idx, :, idx])),
                          "g": np.max(np.abs(r.g[0][idx, :, idx] - ref.g[0][idx, :, idx]))}
                for k, v in actual.items():
                    assert v <= est[k], (activation, g0, nodes, k, v, est[k])


@pytest.mark.slow
@pytest.mark.parametrize("gamma0", [0.5, 2.0])
def test_quadrature_error_estimate_bounds_the_error_in_four_dimensions(opt_in_slow, gamma0):
    """Four Gaussian dimensions with feature learning (tanh, three training inputs with
    |x|^2 = D, so K^x has unit diagonal): the default 15 Gauss-Hermite nodes and 24 nodes
    against a 44-node trapezoid rule (4e6 points) whose own error, bounded by its difference
    to 40 nodes, is at most half of the error compared.  The estimate bounds the error of f
    (the actual error plus the reference's) without being vacuous (measured: 4.2-12x)."""
    import warnings
    from effth.errors import AccuracyWarning
    rng = np.random.default_rng(5)
    X3 = rng.normal(size=(3, 4))
    X3 = X3 / np.linalg.norm(X3, axis=1, keepdims=True) * 2.0
    kw = dict(X=X3, y=np.array([0.8, -0.5, 0.3]), gamma0=gamma0, eta=0.1, steps=10,
              activation="tanh", two_time=False)
    ref = solve_two_layer(**kw, nodes=44, quadrature_rule="trapezoid", quad_tol=None).f
    ref_err = np.max(np.abs(ref - solve_two_layer(**kw, nodes=40, quadrature_rule="trapezoid",
                                                  quad_tol=None).f))
    for nodes in (15, 24):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", AccuracyWarning)
            r = solve_two_layer(**kw, nodes=nodes)
        actual = np.max(np.abs(r.f - ref))
        assert ref_err < 0.5 * actual, (nodes, ref_err, actual)
        est = r.diagnostics.quadrature_error["f"]
        assert actual + ref_err <= est < 20 * (actual - ref_err), (gamma0, nodes, actual, est)
