"""One neuron's history in a residual MLP (PDLT (B.4)) on two inputs: the exact O(1/n) kernel
sector K, V, G1, T of ``residual_history_flow`` / ``mlp_flow`` against the single-input flow on
each input, the plain MLP at gamma = 0, the cumulant closure where it is exact, a depth-3 oracle
by brute-force Gaussian quadrature over the neuron's two-layer history, and residual networks.

Given layer l, the neurons of layer l+1 are independent N(gamma z_i, xi^2 G_hat), G_hat the 2x2
empirical metric, which holds the neuron's own sigma(z_a) sigma(z_b) / n.  For a depth-3 net
(skip gamma at layer 2) expanding n Cov(G_hat^(3)_ab, G_hat^(3)_cd) to O(1) gives, with
s_ab = sigma(z_a) sigma(z_b), D[ab][mv] = <d_m d_v s_ab>_K2 (Stein: <s_ab (y_m y_v - K2^-1_mv)>,
y = K2^-1 z), X[ab][mv] = Cov[s_ab(z^(2)), s_mv(z^(1))] over one neuron's history (4-D Gaussian,
Cov(z^(2), z^(1)) = gamma K1) and C1 = Cov_K1(s, s), sums over ordered pairs mv,

    V^(3)_(ab)(cd) = C_W^2 { Cov_K2(s_ab, s_cd) + (xi^2 C_W / 2) (X[ab].D[cd] + D[ab].X[cd])
                             + (xi^4 C_W^2 / 4) D[ab] C1 D[cd] }.

The oracle below integrates that by tensor Gauss-Hermite rules (2-D at one layer, 4-D over the
history); it shares nothing with the whitened Hermite series of effth.pdlt.residual_history.
"""

from __future__ import annotations

import functools
import warnings

import numpy as np
import pytest
from scipy import special

import effth as et
from effth.errors import AccuracyWarning
from effth.pdlt import initialization_flow, mlp_flow
from effth.pdlt.residual_history import residual_history_flow

K1 = np.array([[1.0, 0.6], [0.6, 1.3]])
Z = 4.5


def _gelu(z):
    return 0.5 * z * (1.0 + special.erf(z / np.sqrt(2.0)))


def _grid2(n):
    x, w = np.polynomial.hermite_e.hermegauss(n)
    w = w / w.sum()
    u1, u2 = np.meshgrid(x, x, indexing="ij")
    return np.stack([u1.ravel(), u2.ravel()]), np.outer(w, w).ravel()


def depth3_vertex(sig, gamma, c_w, K, c_b=0.0, xi=1.0, n2=120, n4=40):
    """V^(3) (2, 2, 2, 2) of the depth-3 net by the formula of the module docstring."""
    s = lambda z: np.stack([sig(z[a]) * sig(z[b]) for a in range(2) for b in range(2)])  # noqa: E731
    u, w = _grid2(n2)
    L1 = np.linalg.cholesky(K)
    S1 = s(L1 @ u)
    m1 = S1 @ w
    G2 = c_b + c_w * m1.reshape(2, 2)
    K2 = gamma ** 2 * K + xi ** 2 * G2
    C1 = (S1 * w) @ S1.T - np.outer(m1, m1)
    z2 = np.linalg.cholesky(K2) @ u
    S2 = s(z2)
    m2 = S2 @ w
    C2 = (S2 * w) @ S2.T - np.outer(m2, m2)
    Ki = np.linalg.inv(K2)
    y = Ki @ z2
    D = np.stack([(S2 * w) @ (y[m] * y[v] - Ki[m, v]) for m in range(2) for v in range(2)], 1)
    ug, wg = _grid2(n4)                                   # history: z1 = L1 u, z2 = gamma z1 + xi LG v
    Z1 = (L1 @ ug)[:, :, None]
    Z2 = gamma * Z1 + (np.linalg.cholesky(xi ** 2 * G2) @ ug)[:, None, :]
    W4 = np.outer(wg, wg)
    H1, H2 = s(np.broadcast_to(Z1, Z2.shape)), s(Z2)
    X = (np.einsum("pij,qij,ij->pq", H2, H1, W4)
         - np.outer(np.einsum("pij,ij->p", H2, W4), np.einsum("qij,ij->q", H1, W4)))
    V = c_w ** 2 * (C2 + 0.5 * xi ** 2 * c_w * (X @ D.T + D @ X.T)
                    + 0.25 * xi ** 4 * c_w ** 2 * D @ C1 @ D.T)
    return V.reshape(2, 2, 2, 2)


def depth3_metric(sig, gamma, c_w, K, c_b=0.0, xi=1.0, n2=120, n4=40):
    """G1^(3) (2, 2) of the depth-3 net: C_W D_2(s_ab), D_2(a) = C_W <grad_G A . s~> +
    (C_W^2 / 2) <A''> . C1 (module docstring of effth.pdlt.residual_history), with
    grad_G A . X = (xi^2 / 2) E[a(z2) ((S^-1 eta)_m (S^-1 eta)_v - S^-1_mv)] X_mv over the history
    (eta = z2 - gamma z1, S = xi^2 G2; Stein) and <A''> . C1 = (xi^4 / 4) <d^4 a>_K2 . C1 (the
    fourth-order Hermite tensor of K2)."""
    s = lambda z: np.stack([sig(z[a]) * sig(z[b]) for a in range(2) for b in range(2)])  # noqa: E731
    u, w = _grid2(n2)
    L1 = np.linalg.cholesky(K)
    S1 = s(L1 @ u)
    m1 = S1 @ w
    G2 = c_b + c_w * m1.reshape(2, 2)
    K2 = gamma ** 2 * K + xi ** 2 * G2
    C1 = (S1 * w) @ S1.T - np.outer(m1, m1)              # (4, 4) over ordered pairs
    z2 = np.linalg.cholesky(K2) @ u
    S2 = s(z2)
    P = np.linalg.inv(K2)
    y = P @ z2
    idx = [(a, b) for a in range(2) for b in range(2)]
    quart = np.zeros(4)
    for p, (m, v) in enumerate(idx):
        for q, (k, l) in enumerate(idx):
            H = (y[m] * y[v] * y[k] * y[l]
                 - (P[m, v] * y[k] * y[l] + P[m, k] * y[v] * y[l] + P[m, l] * y[v] * y[k]
                    + P[v, k] * y[m] * y[l] + P[v, l] * y[m] * y[k] + P[k, l] * y[m] * y[v])
                 + P[m, v] * P[k, l] + P[m, k] * P[v, l] + P[m, l] * P[v, k])
            quart += (S2 * w) @ H * C1[p, q]
    quart *= 0.25 * xi ** 4
    ug, wg = _grid2(n4)
    Z1 = (L1 @ ug)[:, :, None]
    Sig = xi ** 2 * G2
    eta = (np.linalg.cholesky(Sig) @ ug)[:, None, :] + 0 * Z1
    Z2 = gamma * Z1 + eta
    W4 = np.outer(wg, wg)
    Si = np.linalg.inv(Sig)
    e = np.einsum("mn,nij->mij", Si, eta)
    H2 = s(Z2)
    H1 = s(np.broadcast_to(Z1, Z2.shape)) - m1[:, None, None]
    grad = np.zeros(4)
    for p, (m, v) in enumerate(idx):
        grad += np.einsum("aij,ij->a", H2 * ((e[m] * e[v] - Si[m, v]) * H1[p])[None], W4)
    grad *= 0.5 * xi ** 2
    D2 = c_w * grad + 0.5 * c_w ** 2 * quart
    return (c_w * D2).reshape(2, 2)


@pytest.mark.parametrize("gamma,c_w,c_b,xi,tol", [(0.9, 0.5, 0.0, 1.0, 1e-8), (0.5, 0.75, 0.2, 0.8, 1e-10)])
def test_pair_metric_equals_the_depth3_history_oracle(gamma, c_w, c_b, xi, tol):
    """GELU, G1^(3) on a pair (the mean shift: the degree-raising grad_G and the quartic <A''>
    terms of the recursion) to 1e-10 (measured 6e-13); at gamma = 0.9 the 40-node 4-D oracle
    itself is good to 3e-9 (it moves by 2.2e-10 from 40 to 52 nodes, onto the recursion's
    value).  The closure is off by 1e-2."""
    f = residual_history_flow(K1, 3, "gelu", c_w=c_w, c_b=c_b, xi=[xi, 1.0], gamma=[gamma, 0.0])
    oracle = depth3_metric(_gelu, gamma, c_w, K1, c_b=c_b, xi=xi)
    scale = np.max(np.abs(oracle))
    assert np.max(np.abs(f["G1"][2] - oracle)) < tol * scale
    tr = initialization_flow(K1, 3, "gelu", c_w=c_w, c_b=c_b, xi=[xi, 1.0], gamma=[gamma, 0.0])
    assert np.max(np.abs(tr["G1"][2] - oracle)) > 1e-2 * scale


@pytest.mark.parametrize("gamma,c_w,c_b,xi", [(0.9, 0.5, 0.0, 1.0), (0.5, 0.75, 0.2, 0.8)])
def test_pair_vertex_equals_the_depth3_history_oracle(gamma, c_w, c_b, xi):
    """GELU, every component of V^(3) on a pair to 1e-10 (measured 4e-14); the cumulant closure
    (PDLT (B.24) with T) misses it by 2-3 % and is rejected by the same check."""
    f = residual_history_flow(K1, 3, "gelu", c_w=c_w, c_b=c_b, xi=[xi, 1.0], gamma=[gamma, 0.0])
    oracle = depth3_vertex(_gelu, gamma, c_w, K1, c_b=c_b, xi=xi)
    scale = np.max(np.abs(oracle))
    assert np.max(np.abs(f["V"][2] - oracle)) < 1e-10 * scale
    tr = initialization_flow(K1, 3, "gelu", c_w=c_w, c_b=c_b, xi=[xi, 1.0], gamma=[gamma, 0.0])
    assert np.max(np.abs(tr["V"][2] - oracle)) > 1e-3 * scale


CASES = [("relu", 0.7, 0.38), ("gelu", 0.9, 0.5), ("tanh", 0.5, 0.75)]


@functools.lru_cache(maxsize=None)
def _depth5(act, gamma, c_w):
    kw = dict(c_w=c_w, c_b=0.1, xi=[0.9, 1.0, 1.1, 1.0], gamma=[gamma] * 3 + [0.0])
    return (kw, residual_history_flow(K1, 5, act, **kw), initialization_flow(K1, 5, act, **kw))


@pytest.mark.parametrize("act,gamma,c_w", CASES)
def test_pair_diagonal_is_the_single_input_flow(act, gamma, c_w):
    """Depth 5 (skips at 2..4, C_b, xi): the (1111), (2222) entries of V, the diagonals of G1, K
    and T_(11)1 equal the single-input recursion on each input to 1e-12.  Every component of K
    and T equals the cumulant closure's (they read Mehler orders <= 2 only), while V and G1
    differ from it by more than 0.5 %."""
    kw, f, p = _depth5(act, gamma, c_w)
    for a in range(2):
        g = residual_history_flow(K1[a, a], 5, act, **kw)
        for k in ("K", "V", "G1", "T"):
            for layer in range(5):
                x, y = f[k][layer][(a,) * f[k][layer].ndim], float(g[k][layer].ravel()[0])
                assert abs(x - y) <= 1e-12 * max(1.0, abs(y)), (k, layer, x, y)
    for k in ("K", "T"):
        for x, y in zip(p[k], f[k]):
            assert np.max(np.abs(x - y)) < 1e-12 * max(1.0, np.max(np.abs(x))), k
    if act != "tanh":
        assert np.max(np.abs(p["T"][-2])) > 1e-2
    for k in ("V", "G1"):
        assert np.max(np.abs(p[k][-1] / f[k][-1] - 1)) > 5e-3


def test_pair_gamma_zero_is_the_plain_mlp():
    """gamma = 0 (C_b, xi, unequal widths): every component is the plain derived flow (PDLT (4.90),
    (4.115)) to 1e-12."""
    for act in ("tanh", "relu"):
        kw = dict(c_w=1.2, c_b=0.1, ratios=[1.0, 2.0, 0.5, 1.0, 1.5])
        p = initialization_flow(K1, 6, act, **kw)
        h = residual_history_flow(K1, 6, act, xi=1.0, gamma=0.0, **kw)
        for k in ("K", "V", "G1"):
            for x, y in zip(p[k], h[k]):
                assert np.max(np.abs(x - y)) < 1e-12 * max(1.0, np.max(np.abs(x))), (act, k)


def test_pair_equals_the_closure_for_affine_sigma():
    """Affine sigma (per-layer gamma, C_b, xi, widths): every Mehler term m >= 3 vanishes and the
    exact recursion is the pipeline's, K, V, G1, T, to 1e-12.  sigma = z^2 (sigma^2 quartic) is
    not: its V differs; nor is |z| off the diagonal (s_12 = |z_1 z_2|), exact on it."""
    import sympy as sp

    a = et.activations.get_activation(0.7 * sp.Symbol("z") + 0.3)
    kw = dict(c_w=[1.1, 0.9, 1.2, 0.8, 1.0], c_b=[0.1, 0.2, 0.0, 0.3, 0.1],
              gamma=[0.5, 0.7, 0.3, 0.6, 0.0], xi=[1.0, 0.8, 1.2, 1.0, 1.0],
              ratios=[1.0, 1.0, 1.0, 1.0, 0.5])
    p, h = initialization_flow(K1, 6, a, **kw), residual_history_flow(K1, 6, a, **kw)
    scale = np.max(np.abs(p["V"][-1]))
    for k in ("K", "V", "G1", "T"):
        for x, y in zip(p[k], h[k]):
            assert np.max(np.abs(x - y)) < 1e-12 * scale, k
    q = et.activations.get_activation(sp.Symbol("z") ** 2)
    kw = dict(c_w=0.3, gamma=[0.5, 0.5, 0.0])
    p, h = initialization_flow(K1, 4, q, **kw), residual_history_flow(K1, 4, q, **kw)
    assert np.max(np.abs(h["V"][-1] / p["V"][-1] - 1)) > 1e-3
    # |z|: sigma^2 = z^2 keeps the diagonal exact, but s_12 = |z_1 z_2| is no polynomial
    kw = dict(c_w=0.5, gamma=[0.9, 0.9, 0.0])
    p, h = initialization_flow(K1, 4, "abs", **kw), residual_history_flow(K1, 4, "abs", **kw)
    for a in range(2):
        assert h["V"][-1][a, a, a, a] == pytest.approx(p["V"][-1][a, a, a, a], rel=1e-12)
    assert abs(h["V"][-1][0, 1, 0, 1] / p["V"][-1][0, 1, 0, 1] - 1) > 1e-3
    assert abs(h["G1"][-1][0, 1] / p["G1"][-1][0, 1] - 1) > 1e-2


def test_degenerate_pairs_reduce_to_one_input():
    """x1 = x2 (K singular at every layer): every component of V, G1, T, K is the single-input
    value to 1e-12.  x2 = 2 x1 with ReLU and no biases (homogeneous: z_2 = 2 z_1 exactly):
    V_(ab)(cd) = 2^(#2s) V, G1_ab likewise.  x2 = -x1 (K1 singular, K2 not) runs through the
    rank-one first layer and keeps the diagonal."""
    kw = dict(c_w=0.5, gamma=[0.7] * 3 + [0.0])
    one = residual_history_flow(1.3, 5, "gelu", c_b=0.1, **kw)
    same = residual_history_flow(np.full((2, 2), 1.3), 5, "gelu", c_b=0.1, **kw)
    for k in ("K", "V", "G1", "T"):
        for x, y in zip(same[k], one[k]):
            assert np.max(np.abs(x - y.ravel()[0])) < 1e-12 * max(1.0, abs(y.ravel()[0])), k
    one = residual_history_flow(1.0, 5, "relu", **kw)
    lam = np.array([1.0, 2.0])
    pair = residual_history_flow(np.outer(lam, lam), 5, "relu", **kw)
    for layer in range(5):
        V, v = pair["V"][layer], float(one["V"][layer].ravel()[0])
        assert np.max(np.abs(V - v * np.einsum("a,b,c,d->abcd", lam, lam, lam, lam))) < 1e-12 * 16 * max(v, 1)
        G, g = pair["G1"][layer], float(one["G1"][layer].ravel()[0])
        assert np.max(np.abs(G - g * np.outer(lam, lam))) < 1e-12 * 4 * max(abs(g), 1)
    anti = residual_history_flow(np.array([[1.0, -1.0], [-1.0, 1.0]]), 5, "relu", **kw)
    assert abs(anti["V"][4][1, 1, 1, 1] - float(one["V"][4].ravel()[0])) < 1e-12
    assert np.all(np.isfinite(anti["V"][4]))


def test_mlp_flow_uses_the_history_recursion_for_two_and_more_inputs():
    """Two inputs: mlp_flow's default is residual_history_flow (closure="cumulant" the pipeline,
    bitwise).  Three inputs: G1 and the V components on at most two distinct inputs are every
    pair's exact recursion, with an AccuracyWarning for the rest, which stay the closure's."""
    X = np.array([[1.0, 0.0, 0.3], [0.6, 0.8, -0.2], [-0.5, 0.4, 0.9]])
    net = et.MLP("gelu", depth=3, widths=32, c_w=0.8, gamma=0.7)
    kw = dict(c_w=[0.8] * 2, c_b=[0.0] * 2, gamma=[0.7, 0.0], xi=[1.0] * 2, ratios=[32 / 3, 1.0])
    K = 0.8 * X @ X.T / 3
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        two = mlp_flow(net, X[:2])
    ref = residual_history_flow(K[:2, :2], 3, "gelu", **kw)
    close = lambda a, b: np.allclose(a, b, rtol=1e-12, atol=1e-15)  # noqa: E731
    assert all(close(x, y) for k in ("V", "G1", "T") for x, y in zip(two[k], ref[k]))
    cum = mlp_flow(net, X[:2], closure="cumulant")
    assert all(close(x, y) for k in ("V", "G1")
               for x, y in zip(cum[k], initialization_flow(K[:2, :2], 3, "gelu", **kw)[k]))
    with pytest.warns(AccuracyWarning, match="three or four distinct inputs"):
        three = mlp_flow(net, X)
    closure = initialization_flow(K, 3, "gelu", **kw)
    pair = residual_history_flow(K[np.ix_([0, 2], [0, 2])], 3, "gelu", **kw)
    i = np.ix_([0, 2], [0, 2], [0, 2], [0, 2])
    assert close(three["V"][2][i], pair["V"][2])
    assert close(three["G1"][2][np.ix_([0, 2], [0, 2])], pair["G1"][2])
    assert close(three["V"][2][0, 1, 0, 2], closure["V"][2][0, 1, 0, 2])
    assert close(three["T"][2], closure["T"][2])
    assert abs(three["V"][2][0, 0, 2, 2] / closure["V"][2][0, 0, 2, 2] - 1) > 1e-3


# ------------------------------------------------------------------ residual networks, two inputs
# GELU, C_W = 0.5 at every layer, skips gamma = 0.9 at layers 2..5, depth 6, K^(1)_aa = 1
XNET = 2.0 * np.array([[1.0, 0.0], [0.6, 0.8]])
OFF = {"V_(12)(12)": ("V", (0, 1, 0, 1)), "V_(11)(22)": ("V", (0, 0, 1, 1)), "G1_12": ("G1", (0, 1))}


def _net(act, c_w, n):
    return et.MLP(act, depth=6, widths=n, c_w=c_w, gamma=0.9)


@functools.lru_cache(maxsize=None)
def _pair_networks(act, c_w, plan, seed):
    """{width: EnsembleStatistics at layer 6} (conditional sampling, effth.simulation)."""
    from effth.simulation import simulate_ensemble

    return {n: simulate_ensemble(_net(act, c_w, n), XNET, networks=N, seed=seed + 7919 * n,
                                 method="conditional", layers=[6]) for n, N in plan}


def _intercept(rows):
    """c0 +- SE of a weighted c0 + c1/n fit."""
    n, v, e = rows.T
    A = np.stack([np.ones_like(n), 1 / n], 1) / e[:, None]
    coef, *_ = np.linalg.lstsq(A, v / e, rcond=None)
    return coef[0], float(np.sqrt(np.linalg.inv(A.T @ A)[0, 0]))


def _measured_intercepts(act, c_w, K, plan_v, plan_g, seed):
    """{name: (c0, SE)} for the off-diagonal V_(12)(12), V_(11)(22) (widths plan_v) and G1_12
    (widths plan_g, where n (E G_hat - K) has a small 1/n term); K = K^(6)."""
    out = {}
    for name, (kind, idx) in OFF.items():
        stats = _pair_networks(act, c_w, plan_v if kind == "V" else plan_g, seed)
        if kind == "V":
            rows = np.array([(n, st.value("V", 6)[idx], st.stderr("V", 6)[idx])
                             for n, st in sorted(stats.items())])
        else:
            rows = np.array([(n, n * (st.value("G_rb", 6)[idx] - K[idx]),
                              n * st.stderr("G_rb", 6)[idx]) for n, st in sorted(stats.items())])
        out[name] = _intercept(rows)
    return out


def _theories(act, c_w):
    ex = mlp_flow(_net(act, c_w, 64), XNET)
    cl = mlp_flow(_net(act, c_w, 64), XNET, closure="cumulant")
    pick = lambda f: {k: f[kind][5][idx] for k, (kind, idx) in OFF.items()}  # noqa: E731
    return pick(ex), pick(cl), ex["K"][5]


@pytest.mark.mc
def test_pair_networks_follow_the_history_recursion():
    """GELU, gamma = 0.9, depth 6, two inputs, n = 32, 64, 128 (80 000, 40 000, 20 000
    networks): the c0 + c1/n intercepts of V_(12)(12), V_(11)(22) and n (G_rb - K)_12 meet the
    exact recursion within 4.5 SE, and 0.9 x the exact V_(12)(12) is rejected by the same fit.
    (The cumulant closure's V_(12)(12), 7 % low, needs the networks of the opt-in study below to
    be rejected; its 15 s evaluation is kept out of this test.)"""
    ex = mlp_flow(_net("gelu", 0.5, 64), XNET)
    exact = {k: ex[kind][5][idx] for k, (kind, idx) in OFF.items()}
    plan = ((32, 80_000), (64, 40_000), (128, 20_000))
    got = _measured_intercepts("gelu", 0.5, ex["K"][5], plan, plan, seed=11)
    for name, (c0, se) in got.items():
        assert abs(c0 - exact[name]) < Z * se, (name, c0, se, exact[name])
    c0, se = got["V_(12)(12)"]
    assert abs(c0 - 0.9 * exact["V_(12)(12)"]) > Z * se


# (activation, C_W, components whose closure value the study rejects by > 4.5 SE)
PAIR_STUDY = [("gelu", 0.5, ("V_(12)(12)", "G1_12")), ("relu", 0.38, ("V_(12)(12)",))]


@pytest.mark.slow
@pytest.mark.mc
@pytest.mark.parametrize("act,c_w,rejected", PAIR_STUDY, ids=["gelu", "relu"])
def test_pair_networks_study(opt_in_slow, act, c_w, rejected, capsys):
    """The long version (docs/residual.md, two inputs): V from n = 32..256 (1.6 10^6 networks at
    n = 32 down to 2 10^5 at n = 256), G1 from n = 16, 32, 64 (4, 2, 1 10^6 networks).  Every
    off-diagonal intercept within 4.5 SE of the exact recursion; the closure is rejected
    (> 4.5 SE) for V_(12)(12) (GELU 17.8 SE, ReLU 12.4 SE) and for GELU's G1_12 (6.5 SE; ReLU's,
    11 % high, is 3.5 SE off).  Its V_(11)(22), 1.6-2.5 % low, is not resolved."""
    exact, closure, K = _theories(act, c_w)
    plan_v = ((32, 1_600_000), (64, 800_000), (128, 400_000), (256, 200_000))
    plan_g = ((16, 4_000_000), (32, 2_000_000), (64, 1_000_000))
    got = _measured_intercepts(act, c_w, K, plan_v, plan_g, seed=101)
    with capsys.disabled():
        for name, (c0, se) in got.items():
            print(f"\n{act} {name}: exact {exact[name]:.5f} closure {closure[name]:.5f} "
                  f"c0 {c0:.5f} +- {se:.5f}: {(c0 - exact[name]) / se:+.1f} SE exact, "
                  f"{(c0 - closure[name]) / se:+.1f} SE closure")
    for name, (c0, se) in got.items():
        assert abs(c0 - exact[name]) < Z * se
    for name in rejected:
        c0, se = got[name]
        assert abs(c0 - closure[name]) > Z * se
