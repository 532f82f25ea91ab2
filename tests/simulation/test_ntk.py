"""Tests of the empirical NTK / dNTK / ddNTK simulator (effth.simulation.ntk, PDLT ch. 8-11, ∞).

Everything here is independent of effth's theory modules: the derivatives are checked against
finite differences of a network function written in this file, the ensemble statistics against
an infinite-width recursion computed here with Gauss-Hermite quadrature, against values that are
exact at layer 2 (Gaussian integrals of PDLT (8.63), (8.82), (8.67), (11.45), (∞.11)-(∞.12)
computed once by quadrature and typed here), and against exact
identities of linear networks.  Tolerances are in jackknife standard errors (NSIG).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from scipy import special

from effth.arch import MLP
from effth.errors import DomainError
from effth.simulation.ntk import (
    NTKEnsembleStatistics,
    empirical_ntk,
    init_params,
    simulate_ntk_ensemble,
)

NSIG = 4.5


# ---------------------------------------------------------------- exact derivatives vs FD
def _tiny():
    rng = np.random.default_rng(0)
    sizes = [2, 3, 4, 3]                      # n0, n1, n2, n3
    X = rng.normal(size=(2, 2))
    params = [(rng.normal(size=(sizes[k + 1], sizes[k])) * 0.9, rng.normal(size=sizes[k + 1]) * 0.3)
              for k in range(3)]
    return sizes, X, params


def _fd_reference(sizes, X, params, lb, lw, outputs, act=np.tanh):
    """NTK, dNTK, ddNTK-I, ddNTK-II by 4th-order central finite differences of z(theta)
    (``act``: the activation as a NumPy function written in the test)."""
    L = len(params)
    theta0 = np.concatenate([np.concatenate([W.ravel(), b]) for W, b in params])
    lam = np.concatenate([np.concatenate([np.full(W.size, lw[k] / sizes[k]), np.full(b.size, lb[k])])
                          for k, (W, b) in enumerate(params)])
    P = theta0.size

    def f(th):                                # (..., P) -> (..., N, m)
        lead = th.shape[:-1]
        a = np.broadcast_to(X, lead + X.shape)
        k = 0
        for ell in range(L):
            n1, n0 = sizes[ell + 1], sizes[ell]
            W = th[..., k:k + n1 * n0].reshape(lead + (n1, n0))
            k += n1 * n0
            b = th[..., k:k + n1]
            k += n1
            z = np.einsum("...ij,...dj->...di", W, a) + b[..., None, :]
            a = act(z)
        return z[..., list(outputs)]

    steps, coef = np.array([-2, -1, 1, 2]), np.array([1, -8, 8, -1]) / 12.0

    def mixed(dirs, h):
        idx = list(itertools.product(range(4), repeat=len(dirs)))
        pts = np.array([theta0 + sum(h * steps[i] * d for i, d in zip(ix, dirs)) for ix in idx])
        wts = np.array([np.prod(coef[list(ix)]) for ix in idx])
        return np.tensordot(wts, f(pts), axes=(0, 0)) / h ** len(dirs)

    E = np.eye(P)
    J = np.moveaxis(np.array([mixed([E[p]], 1e-3) for p in range(P)]), 0, -1)   # (N, m, P)
    V = J * lam                                                                   # NTK directions
    N, m = J.shape[:2]
    H = np.einsum("dip,ejp->ijde", J, V)
    dH = np.zeros((m,) * 3 + (N,) * 3)
    for i1, d1, i2, d2 in itertools.product(range(m), range(N), range(m), range(N)):
        dH[:, i1, i2, :, d1, d2] = mixed([V[d1, i1], V[d2, i2]], 1e-3).T
    ddI = np.zeros((m,) * 4 + (N,) * 4)
    for i1, d1, i2, d2, i3, d3 in itertools.product(*[range(m), range(N)] * 3):
        ddI[:, i1, i2, i3, :, d1, d2, d3] = mixed([V[d1, i1], V[d2, i2], V[d3, i3]], 5e-3).T
    Hess = np.zeros((P, P, N, m))
    for p in range(P):
        for q in range(p, P):
            Hess[p, q] = Hess[q, p] = mixed([E[p], E[q]], 1e-3)
    HV = np.einsum("pqdi,ejq->dipej", Hess, V)          # HVP of z_{i;d} along v_{j;e}
    ddII = np.einsum("aipcj,p,bkpdl->ikjlabcd", HV, lam, HV)
    return H, dH, ddI, ddII


def test_exact_derivatives_match_finite_differences():
    sizes, X, params = _tiny()
    lb, lw, outputs = (0.5, 0.8, 1.1), (1.0, 0.7, 1.3), (0, 2)
    res = empirical_ntk(params, X, "tanh", lambda_b=lb, lambda_w=lw, outputs=outputs)
    H, dH, ddI, ddII = _fd_reference(sizes, X, params, lb, lw, outputs)
    assert res.H.shape == (2, 2, 2, 2) and res.dH.shape == (2,) * 6 and res.ddIH.shape == (2,) * 8
    for got, ref in ((res.H, H), (res.dH, dH), (res.ddIH, ddI), (res.ddIIH, ddII)):
        scale = np.abs(ref).max()
        assert scale > 0.1
        np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6 * scale)


def _gelu(z):
    return 0.5 * z * (1.0 + special.erf(z / np.sqrt(2.0)))


def _silu(z):
    return z / (1.0 + np.exp(-z))


@pytest.mark.parametrize("name, act", [("gelu", _gelu), ("silu", _silu)])
def test_smooth_registry_activations_match_finite_differences(name, act):
    """GELU and SiLU (through the registry: sigma^(k), k <= 3, from effth.activations)
    against finite differences of a network written here with its own GELU/SiLU."""
    sizes, X, params = _tiny()
    lb, lw, outputs = (0.5, 0.8, 1.1), (1.0, 0.7, 1.3), (0, 2)
    res = empirical_ntk(params, X, name, lambda_b=lb, lambda_w=lw, outputs=outputs)
    refs = _fd_reference(sizes, X, params, lb, lw, outputs, act=act)
    for got, ref in zip((res.H, res.dH, res.ddIH, res.ddIIH), refs):
        scale = np.abs(ref).max()
        assert scale > 5e-3                   # non-trivial (SiLU's ddNTK here is about 1e-2)
        np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6 * scale)
    # the FD check can fail: a network with another activation (tanh) is far off
    other = empirical_ntk(params, X, "tanh", lambda_b=lb, lambda_w=lw, outputs=outputs)
    assert np.abs(other.dH - refs[1]).max() > 1e-2 * np.abs(refs[1]).max()


def test_symmetries_and_batching():
    _sizes, X, params = _tiny()
    lb, lw = (0.5, 0.8, 1.1), (1.0, 0.7, 1.3)
    r = empirical_ntk(params, X, "tanh", lambda_b=lb, lambda_w=lw, outputs=(0, 1, 2))
    np.testing.assert_allclose(r.H, np.einsum("ijab->jiba", r.H), atol=1e-13)
    # dNTK symmetric under the joint swap (i1,d1) <-> (i2,d2) (11.8)
    np.testing.assert_allclose(r.dH, np.einsum("xyzabc->xzyacb", r.dH), atol=1e-12)
    # ddNTK-I totally symmetric in its last three index pairs (inf.5)
    for perm in ("wxzyabdc", "wyxzacbd", "wzyxadcb"):
        np.testing.assert_allclose(r.ddIH, np.einsum("wxyzabcd->" + perm, r.ddIH), atol=1e-11)
    # ddNTK-II symmetric only under the joint swap (1<->2 and 3<->4) (inf.7)
    np.testing.assert_allclose(r.ddIIH, np.einsum("wxyzabcd->xwzybadc", r.ddIIH), atol=1e-11)
    assert np.abs(r.ddIIH - np.einsum("wxyzabcd->xwyzbacd", r.ddIIH)).max() > 1e-3
    # batch axis: same as one network at a time; input/output selection
    rng = np.random.default_rng(3)
    net = MLP("softplus", depth=3, widths=(5, 4), c_w=1.2, c_b=0.1, n_out=3)
    batch = init_params(net, 2, rng, networks=3)
    rb = empirical_ntk(batch, X, net, lambda_b=lb, lambda_w=lw, outputs=(2, 0))
    for k in range(3):
        single = [(W[k], b[k]) for W, b in batch]
        rs = empirical_ntk(single, X[::-1], net, lambda_b=lb, lambda_w=lw, outputs=(2, 0), inputs=[1, 0])
        for name in ("z", "H", "dH", "ddIH", "ddIIH"):
            np.testing.assert_allclose(getattr(rb, name)[k], getattr(rs, name), rtol=1e-12, atol=1e-12)
    r1 = empirical_ntk(params, X, "tanh", order=1)
    assert r1.dH is None and r1.ddIH is None and r1.ddIIH is None


def test_linear_networks_exact_per_instance():
    """Depth 1: H = lambda_b + lambda_w x.x/n0, dH = 0.  Depth 2 linear: (11.27) with
    sigma'' = 0 gives dH = d_{i0i1} (lw2/n1) H1_{d0d2} (z_{i2;d1} - b_{i2}) + (1 <-> 2)."""
    rng = np.random.default_rng(7)
    X = rng.normal(size=(3, 4))
    net1 = MLP("linear", depth=1, widths=(), n_out=3)
    r = empirical_ntk(init_params(net1, 4, rng), X, "linear", lambda_b=0.7, lambda_w=1.9)
    H1 = 0.7 + 1.9 * X @ X.T / 4
    np.testing.assert_allclose(r.H, np.einsum("ij,ab->ijab", np.eye(3), H1), atol=1e-13)
    assert np.abs(r.dH).max() == 0 and np.abs(r.ddIH).max() == 0 and np.abs(r.ddIIH).max() == 0
    net2 = MLP("linear", depth=2, widths=5, n_out=3, c_b=0.3)
    params = init_params(net2, 4, rng)
    lb, lw = (0.7, 0.4), (1.9, 1.3)
    r = empirical_ntk(params, X, "linear", lambda_b=lb, lambda_w=lw)
    H1 = lb[0] + lw[0] * X @ X.T / 4
    zb = r.z - params[1][1][:, None]                      # z_{i;d} - b_i
    e = np.eye(3)
    ref = (lw[1] / 5) * (np.einsum("xy,ac,zb->xyzabc", e, H1, zb)
                         + np.einsum("xz,ab,yc->xyzabc", e, H1, zb))
    np.testing.assert_allclose(r.dH, ref, rtol=1e-12, atol=1e-12)
    W2 = params[1][0]
    Z1 = X @ params[0][0].T + params[0][1]
    Href = (np.einsum("ij,ab->ijab", e, lb[1] + lw[1] * Z1 @ Z1.T / 5)
            + np.einsum("ij,ab->ijab", W2 @ W2.T, H1))
    np.testing.assert_allclose(r.H, Href, rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------- ensemble: exact layer 2
def _check(st: NTKEnsembleStatistics, refs: dict, nsig: float = NSIG):
    for name, ref in refs.items():
        val, err = st.stats[name].ravel()[0], st.err[name].ravel()[0]
        if err == 0:          # exactly zero for every network (e.g. P, R, U of linear nets)
            assert abs(val - ref) < 1e-12, (name, val, ref)
        else:
            assert abs(val - ref) < nsig * err, (name, val, err, ref)


def test_layer2_single_input_matches_exact_values():
    """Layer-2 values of the single-input tanh recursions PDLT (8.63), (11.45), (∞.11)-(∞.12) (tanh, C_W = 1, C_b = 0, lb = (1, 1/2), lw = 1): the layer-2
    tensors are exact at any n_1 because layer 1 is Gaussian."""
    net = MLP("tanh", depth=2, widths=16, c_w=1.0, c_b=0.0, n_out=2)
    st = simulate_ntk_ensemble(net, np.ones((1, 1)), networks=40000, seed=1, lambda_b=(1.0, 0.5),
                               lambda_w=1.0)
    for name in ("H", "B", "F", "P", "Q", "R", "S", "T", "U"):
        assert st.err[name].ravel()[0] > 0
    _check(st, {"H": 1.82310030, "B": 1.36603683, "F": 0.15010191, "P": -0.38274194, "Q": -0.23264003,
                    "R": -4.22529627, "S": 2.44709882, "T": 0.46568002, "U": 1.08106199})
    # same-neuron components: (P + 2Q) and A + 2B (single input)
    assert abs(st.PQ_same - (st.P + 2 * st.Q)).max() < NSIG * (st.PQ_same_err + st.P_err + 2 * st.Q_err).max()
    assert abs(st.H_var_same - (st.A + 2 * st.B)).max() < NSIG * (st.H_var_same_err + st.A_err + 2 * st.B_err).max()
    assert abs(st.H_offdiag).max() < NSIG * st.H_offdiag_err.max()
    assert st.H.shape == (1, 1) and st.R.shape == (1, 1, 1, 1) and st.n_groups == 32


def test_layer2_three_dim_input_values():
    """Layer-2 values of A, B, D, F, P, Q (PDLT (8.82), (8.67), (11.45); exact at any n_1), tanh,
    C_W = 1.5, C_b = 0.2, x = (0.9, -0.4, 1.3)."""
    net = MLP("tanh", depth=2, widths=12, c_w=1.5, c_b=0.2, n_out=2)
    st = simulate_ntk_ensemble(net, np.array([[0.9, -0.4, 1.3]]), networks=40000, seed=2,
                               lambda_b=(0.5, 0.8), lambda_w=(1.0, 0.7), order=2)
    _check(st, {"P": -0.36173, "Q": -0.26320, "D": -0.24710, "F": 0.21113, "B": 1.22073, "A": 0.27130})
    assert np.isnan(st.R).all() and np.isnan(st.S).all()


def test_deep_linear_layer2_S_T_and_vanishing_P_R_U():
    """PDLT (∞.45)-(∞.48) (deep linear, C_W = 1, C_b = 0, lambda = lambda~/L with L = 12):
    S^(2) = 0.0097337963, T^(2) = 0.0046990741, Theta, B, F (11.77), Q (11.79) at l = 2 (exact at
    layer 2 for any n_1); P = R = U = 0 exactly for every network at layer 2."""
    L = 12
    lb, lw, Ks = 1.5 / L, 2.0 / L, 0.7
    net = MLP("linear", depth=2, widths=6, c_w=1.0, c_b=0.0, n_out=2)
    X = np.array([[np.sqrt(Ks)]])
    st = simulate_ntk_ensemble(net, X, networks=40000, seed=4, lambda_b=lb, lambda_w=lw)
    c = 1.5 + 2.0 * Ks
    _check(st, {"S": 0.0097337963, "T": 0.0046990741, "P": 0.0, "R": 0.0, "U": 0.0,
                    "H": 2 * (lb + lw * Ks),                       # Theta^(2) = c l / L
                    "B": c ** 2 * 6 / (6 * L ** 2),                # c^2 (l-1) l (2l-1) / (6 L^2)
                    "F": 2 * c * Ks / (2 * L),                     # l (l-1) c K* / (2 L)   (11.77)
                    "Q": 2 * 3 * c * 2.0 * Ks / (6 * L ** 2)})     # l (l^2-1) c lw~ K* / (6 L^2) (11.79)


def _layer2_exact(X, cw, cb, lb, lw, fs, deg=120):
    """Exact layer-2 tensors for two inputs by 2-D Gauss-Hermite over the layer-1 kernel.

    H (8.27), A (8.32), B (8.33), D (8.38), F (8.39), P, Q (11.31)-(11.32); R, S, T, U from the
    expectation of (inf.169)-(inf.170) with H_hat^(1) = delta H1 and dH^(1) = 0 (derived here;
    s1, s2, s3 denote sigma', sigma'', sigma'''):
      R_0123 = lw C_W <s2_0 s_1 s1_2 s1_3> H1_02 H1_03 + C_W^2 <s3_0 s1_1 s1_2 s1_3> H1_01 H1_02 H1_03
      X_1234 = C_W^2 <s2_1 s2_2 s1_3 s1_4> H1_12 H1_13 H1_24
      S_1234 = lw C_W <s1_1 s1_2 s1_3 s1_4> H1_13 H1_24 + X_1234
      T_{1342} = lw^2 <s1_1 s1_2 s_3 s_4> H1_12
                 + lw C_W (<s1_1 s2_2 s_3 s1_4> H1_12 H1_24 + <s2_1 s1_2 s1_3 s_4> H1_12 H1_13) + X_1234
      U_{1423} = X_1234
    (cw, cb: layer 1 and 2 variances as pairs; lb, lw: learning rates of layers 1 and 2.)"""
    n0 = X.shape[1]
    K1 = cb[0] + cw[0] * X @ X.T / n0
    H1 = lb[0] + lw[0] * X @ X.T / n0
    C, l2 = cw[1], lw[1]
    x, w = np.polynomial.hermite_e.hermegauss(deg)
    w = w / np.sqrt(2 * np.pi)
    N = X.shape[0]
    grids = np.meshgrid(*([x] * N), indexing="ij")
    wt = np.ones(1)
    for _ in range(N):
        wt = np.multiply.outer(wt, w)
    wt = wt.ravel()
    Z = np.linalg.cholesky(K1) @ np.stack([g.ravel() for g in grids])   # z_delta at every node
    s = [f(Z) for f in fs]                                 # s[k][delta, g] = sigma^(k)(z_delta)

    def E(*ks):
        letters = "abcd"[:len(ks)]
        return np.einsum(",".join(x + "g" for x in letters) + ",g->" + letters,
                         *[s[k] for k in ks], wt)

    H = lb[1] + l2 * E(0, 0) + C * E(1, 1) * H1
    Om2 = l2 * E(0, 0) + C * H1 * E(1, 1)
    OmOm = (l2 ** 2 * E(0, 0, 0, 0) + l2 * C * H1[None, None] * E(0, 0, 1, 1)
            + l2 * C * H1[:, :, None, None] * E(1, 1, 0, 0)
            + C ** 2 * np.einsum("ab,cd->abcd", H1, H1) * E(1, 1, 1, 1))
    A = OmOm - np.einsum("ab,cd->abcd", Om2, Om2)
    D = C * (l2 * E(0, 0, 0, 0) + C * H1[None, None] * E(0, 0, 1, 1)
             - np.einsum("ab,cd->abcd", E(0, 0), Om2))
    # B_{a1 a3 a2 a4}: B[a,b,c,d] = C^2 H1_{ac} H1_{bd} <s'_a s'_c s'_b s'_d>
    B = C ** 2 * np.einsum("ac,bd,acbd->abcd", H1, H1, E(1, 1, 1, 1))
    # F_{a1 a3 a2 a4}: F[a,b,c,d] = C^2 H1_{bd} <s_a s_c s'_b s'_d>
    F = C ** 2 * np.einsum("bd,acbd->abcd", H1, E(0, 0, 1, 1))
    P = C ** 2 * np.einsum("ab,ac,abcd->abcd", H1, H1, E(2, 1, 1, 0))
    Q = P + l2 * C * np.einsum("ac,abcd->abcd", H1, E(1, 0, 1, 0))
    R = (l2 * C * np.einsum("ac,ad,abcd->abcd", H1, H1, E(2, 0, 1, 1))
         + C ** 2 * np.einsum("ab,ac,ad,abcd->abcd", H1, H1, H1, E(3, 1, 1, 1)))
    Xi = C ** 2 * np.einsum("ab,ac,bd,abcd->abcd", H1, H1, H1, E(2, 2, 1, 1))
    S = l2 * C * np.einsum("ac,bd,abcd->abcd", H1, H1, E(1, 1, 1, 1)) + Xi
    MT = (l2 ** 2 * np.einsum("ab,abcd->abcd", H1, E(1, 1, 0, 0))
          + l2 * C * (np.einsum("ab,bd,abcd->abcd", H1, H1, E(1, 2, 0, 1))
                      + np.einsum("ab,ac,abcd->abcd", H1, H1, E(2, 1, 1, 0))) + Xi)
    T = np.einsum("adbc->abcd", MT)          # T_{d1 d3 d4 d2} = MT[d1, d2, d3, d4]
    U = np.einsum("acdb->abcd", Xi)          # U_{d1 d4 d2 d3} = Xi[d1, d2, d3, d4]
    return {"H": H, "A": A, "B": B, "D": D, "F": F, "P": P, "Q": Q, "R": R, "S": S, "T": T, "U": U}


@pytest.mark.parametrize("act", ["tanh", "softplus"])
def test_layer2_two_inputs_all_tensors(act):
    """Multi-input index placement of every statistic, at layer 2 where the book's tensors are
    exact at any n_1 (1/n_1 is the exact prefactor since layer 1 is Gaussian)."""
    X = np.array([[0.9, -0.4, 1.3], [0.2, 1.1, -0.7]])
    cw, cb, lb, lw = (1.5, 1.2), (0.2, 0.1), (0.5, 0.8), (1.0, 0.7)
    net = MLP(act, depth=2, widths=8, c_w=cw, c_b=cb, n_out=2)
    st = simulate_ntk_ensemble(net, X, networks=40000, seed=12, lambda_b=lb, lambda_w=lw)
    fs = tuple(net.act.numpy(k) for k in range(4))
    ref = _layer2_exact(X, cw, cb, lb, lw, fs)
    # the single-input reduction reproduces the layer-2 values of test_layer2_single_input_...
    one = _layer2_exact(np.ones((1, 1)), (1.0, 1.0), (0.0, 0.0), (1.0, 0.5), (1.0, 1.0),
                        tuple(MLP("tanh", 1).act.numpy(k) for k in range(4)))
    np.testing.assert_allclose([one[k].ravel()[0] for k in "HBFPQRSTU"],
                               [1.82310030, 1.36603683, 0.15010191, -0.38274194, -0.23264003,
                                -4.22529627, 2.44709882, 0.46568002, 1.08106199], rtol=1e-5)
    for name, val in ref.items():
        dev = np.abs(st.stats[name] - val) / st.err[name]
        assert np.all(dev < NSIG), (name, dev.max(), st.stats[name], val)


# ---------------------------------------------------------------- ensemble vs infinite width
def _gauss2(K, f, g, deg=64):
    """<f(z_a) g(z_b)>_K for all pairs (a, b), 2-D Gauss-Hermite (probabilists')."""
    x, w = np.polynomial.hermite_e.hermegauss(deg)
    w = w / np.sqrt(2 * np.pi)
    u, v = np.meshgrid(x, x, indexing="ij")
    Wt = np.outer(w, w)
    N = K.shape[0]
    out = np.empty((N, N))
    for a in range(N):
        for b in range(N):
            C = K[np.ix_([a, b], [a, b])]
            l00 = np.sqrt(C[0, 0])
            l10 = C[0, 1] / l00
            l11 = np.sqrt(max(C[1, 1] - l10 ** 2, 0.0))
            out[a, b] = (Wt * f(l00 * u) * g(l10 * u + l11 * v)).sum()
    return out


def _frozen_ntk(X, L, cw, cb, lb, lw, s, ds):
    """Infinite-width K and Theta, (4.x) and (8.63)/(9.4):
    Theta^(l+1) = lb + lw <s s>_K + C_W <s' s'>_K * Theta^(l) (Hadamard)."""
    n0 = X.shape[1]
    K = cb + cw * X @ X.T / n0
    Th = lb + lw * X @ X.T / n0
    for _ in range(1, L):
        ss, dd = _gauss2(K, s, s), _gauss2(K, ds, ds)
        Th = lb + lw * ss + cw * dd * Th
        K = cb + cw * ss
    return Th, K


def test_ntk_mean_approaches_frozen_ntk():
    X = np.array([[1.0, -0.5], [0.3, 0.8]])
    cw, cb, lb, lw = 2.0, 0.0, 0.0, 1.0
    Th, K = _frozen_ntk(X, 3, cw, cb, lb, lw, np.tanh, lambda z: 1 / np.cosh(z) ** 2)
    big = simulate_ntk_ensemble(MLP("tanh", depth=3, widths=256, c_w=cw, c_b=cb, n_out=4), X,
                                networks=1600, seed=5, lambda_b=lb, lambda_w=lw, outputs=range(4),
                                order=1)
    assert np.all(np.abs(big.H - Th) < NSIG * big.H_err)
    np.testing.assert_allclose(big.G, K, atol=NSIG * big.err["G"].max())
    small = simulate_ntk_ensemble(MLP("tanh", depth=3, widths=4, c_w=cw, c_b=cb, n_out=4), X,
                                  networks=40000, seed=6, lambda_b=lb, lambda_w=lw, outputs=range(4),
                                  order=1)
    # the 1/n correction is detected at n = 4 (about -2.5% on the diagonal)
    assert np.max(np.abs(small.H - Th) / small.H_err) > 8


def _dgelu(z):
    return 0.5 * (1.0 + special.erf(z / np.sqrt(2.0))) + z * np.exp(-0.5 * z * z) / np.sqrt(2 * np.pi)


def _dsilu(z):
    s = 1.0 / (1.0 + np.exp(-z))
    return s * (1.0 + z * (1.0 - s))


@pytest.mark.parametrize("name, s, ds", [("gelu", _gelu, _dgelu), ("silu", _silu, _dsilu)])
def test_smooth_ntk_mean_matches_frozen_ntk(name, s, ds):
    """GELU / SiLU: at layer 2 the NTK mean is exactly the frozen NTK (8.63) at any width (layer
    1 is Gaussian), computed here by the recursion _frozen_ntk with this file's sigma, sigma'.
    A theory with its C_W <s' s'> Theta term scaled by 0.9 is rejected."""
    X = np.array([[1.0, -0.5], [0.3, 0.8]])
    cw, cb, lb, lw = 1.6, 0.1, 0.5, 1.0
    st = simulate_ntk_ensemble(MLP(name, depth=2, widths=8, c_w=cw, c_b=cb, n_out=2), X,
                               networks=24000, seed=21, lambda_b=lb, lambda_w=lw, order=1)
    Th, K = _frozen_ntk(X, 2, cw, cb, lb, lw, s, ds)
    val, err = st.value("Theta"), st.stderr("Theta")
    assert np.all(np.abs(val - Th) < NSIG * err), (val, Th, err)
    assert np.all(np.abs(st.value("G") - K) < NSIG * st.stderr("G"))
    # a wrong coefficient is detected: 0.9 C_W <s' s'> Theta^(1)
    K1 = cb + cw * X @ X.T / 2
    Th1 = lb + lw * X @ X.T / 2
    wrong = lb + lw * _gauss2(K1, s, s) + 0.9 * cw * _gauss2(K1, ds, ds) * Th1
    np.testing.assert_allclose(Th, lb + lw * _gauss2(K1, s, s) + cw * _gauss2(K1, ds, ds) * Th1)
    assert np.max(np.abs(val - wrong) / err) > 2 * NSIG


def test_linear_ntk_mean_exact_at_finite_width():
    """Linear sigma: E[H] = Theta exactly at any width, Theta^(l+1) = lb + lw K^(l) + C_W Theta^(l)."""
    X = np.array([[1.0, -0.5, 0.2], [0.3, 0.8, -1.0]])
    cw, cb, lb, lw = 1.1, 0.3, 0.6, 1.4
    Th, K = _frozen_ntk(X, 3, cw, cb, lb, lw, lambda z: z, lambda z: np.ones_like(z))
    st = simulate_ntk_ensemble(MLP("linear", depth=3, widths=3, c_w=cw, c_b=cb, n_out=3), X,
                               networks=20000, seed=8, lambda_b=lb, lambda_w=lw, outputs=range(3),
                               order=1)
    assert np.all(np.abs(st.H - Th) < NSIG * st.H_err)
    assert np.all(np.abs(st.G - K) < NSIG * st.err["G"])


# ---------------------------------------------------------------- API hygiene
def test_reproducible_and_validation():
    net = MLP("gelu", depth=3, widths=(6, 5), c_w=1.4, c_b=0.1, n_out=2)
    X = np.array([[1.0, 0.2], [-0.4, 0.7]])
    a = simulate_ntk_ensemble(net, X, networks=40, seed=9, batch=7)
    b = simulate_ntk_ensemble(net, X, networks=40, seed=9, batch=7)
    for k in a.stats:
        np.testing.assert_array_equal(a.stats[k], b.stats[k])
        assert a.stats[k].shape == ((2, 2) if k in ("G", "H", "H_offdiag") else (2, 2, 2, 2))
    with pytest.raises(DomainError):
        simulate_ntk_ensemble(net, X, networks=1, seed=0)
    with pytest.raises(DomainError):
        simulate_ntk_ensemble(net, X, networks=10, seed=0, outputs=(0, 5))
    with pytest.raises(DomainError):
        simulate_ntk_ensemble(net, X, networks=10, seed=0, lambda_b=(1.0, 2.0))
    with pytest.raises(DomainError):
        simulate_ntk_ensemble(MLP("tanh", depth=2), X, networks=10, seed=0)
    with pytest.raises(DomainError):
        empirical_ntk([(np.ones((3, 3)), np.ones(3))], X, "tanh")
    with pytest.raises(DomainError):
        empirical_ntk([(np.ones((3, 2)), np.ones(3))], X, "tanh", order=4)
    one = simulate_ntk_ensemble(MLP("tanh", depth=2, widths=4, n_out=1), X, networks=8, seed=0)
    assert np.isfinite(one.H).all() and np.isnan(one.A).all()
    with pytest.raises(DomainError, match="real"):
        simulate_ntk_ensemble(net, X * (1 + 1j), networks=10, seed=0)
    with pytest.raises(DomainError, match="real"):
        empirical_ntk([(np.ones((3, 2)) * 1j, np.ones(3))], X, "tanh")


def test_overflowing_statistics_raise():
    """Linear, C_W = 1e52: the NTK (~1e156) is finite but its second moments overflow float64;
    the simulator raises (naming the output layer) instead of returning NaN."""
    X = np.array([[1.0, -0.5], [0.3, 0.8]])
    ok = simulate_ntk_ensemble(MLP("linear", depth=4, widths=3, c_w=1e40, n_out=2), X, networks=8,
                               seed=0, order=1)
    assert np.isfinite(ok.value("A")).all() and np.isfinite(ok.stderr("A")).all()
    with pytest.raises(DomainError, match=r"layer 4.*smaller c_w"):
        simulate_ntk_ensemble(MLP("linear", depth=4, widths=3, c_w=1e52, n_out=2), X, networks=8,
                              seed=0, order=1)


def test_kinked_activation_statistics_need_smoothness():
    """ReLU: sigma'' = delta (PDLT (inf.40)), so the dNTK/ddNTK statistics are refused at two
    inputs while the NTK statistics (sigma' is a step function) are allowed; step: sigma' = delta.
    (One input: P, Q allowed, tests/pdlt/test_ntk_kinked_dntk.py.)"""
    X = np.array([[1.0, -0.5], [0.3, 0.8]])
    relu = MLP("relu", depth=3, widths=4, c_w=2.0, n_out=2)
    assert np.isfinite(simulate_ntk_ensemble(relu, X, networks=8, seed=0, order=1).value("B")).all()
    for kw in ({}, {"order": 2}, {"order": 1, "ddntk_II": True}):
        with pytest.raises(DomainError, match="order 2 has a Dirac part"):
            simulate_ntk_ensemble(relu, X, networks=8, seed=0, **kw)
    with pytest.raises(DomainError, match="order 1 has a Dirac part"):
        simulate_ntk_ensemble(MLP("step", depth=3, widths=4, n_out=2), X, networks=8, seed=0, order=1)
