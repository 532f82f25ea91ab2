"""Why the O(1/n) covariance of the trained output has no dNTK x dNTK term (PDLT §11.2, §∞.2).

The per-network solution (∞.141) (and its finite-time form, §∞.2.2) is linear in the dNTK: a
term d = [dH] Z e e.  Its square enters Cov at O(1/n) only if the dNTK-dNTK correlator
E[dH dH] is O(1/n).  It is O(1/n^2): the dNTK (11.24) is a sum over n neurons of zero-mean terms
of size n^(-3/2) (three weights, or one weight and the explicit lambda_W / n), so its fluctuations
are O(1/n), against O(1/sqrt n) for the NTK's (n zero-mean terms of size 1/n).  At one hidden
layer this is exact at every width, from (11.27):

    n_1^2 E[dH_e dH_e'] = 15 C_W^3 <a_e a_e'> + 3 C_W^2 (<a_e c_e'> + <c_e a_e'>) + C_W <c_e c_e'>,

a_e = H1_{d0d1} H1_{d0d2} s''_{d0} s'_{d1} s'_{d2}, c_e = lambda_W^(2) (H1_{d0d2} s'_{d0} s_{d1} s'_{d2}
+ H1_{d0d1} s'_{d0} s'_{d1} s_{d2}), e = (d0, d1, d2), Gaussian expectations over the first-layer
preactivations (kernel K^(1)), E[W^6] = 15 (C_W/n_1)^3, E[W^4] = 3 (C_W/n_1)^2.  Deeper, PDLT §11.2
(footnote 6) states that correlators with two or more dNTKs are subleading; measured here."""

from __future__ import annotations

import numpy as np

import effth as et
from effth.numerics._rules import gaussian_tensor_rule
from effth.simulation import NTKResult, empirical_ntk, init_params

_X = np.array([(1, 0.3, -0.5, 0.8), (-0.6, 1.1, 0.2, -0.4), (0.5, 0.5, 0.9, 0.1)], float)
_X = _X / np.sqrt((_X ** 2).mean(1, keepdims=True))
#: sample triples (d0, d1, d2) of dH_{000; d0 d1 d2}; input 2 is the test input of the studies
_ENTRIES = ((0, 0, 0), (2, 0, 1), (2, 2, 2), (0, 1, 2), (1, 2, 2))


def _one_hidden_layer_correlator(cw, cb, lb, lw):
    """n_1^2 E[dH_e dH_e] of a one-hidden-layer network, exact at every n_1, from (11.27), for the
    entries _ENTRIES (tanh; trapezoid rule in the three preactivations, exact to ~1e-12)."""
    n0 = _X.shape[1]
    K1 = cb + cw * _X @ _X.T / n0                       # first layer: exactly Gaussian (4.8)
    H1 = lb[0] + lw[0] * _X @ _X.T / n0                 # first-layer NTK, deterministic (8.23)
    z, _, w = gaussian_tensor_rule(K1, 81, kind="trapezoid")
    t = np.tanh(z)
    s, s1 = t, 1 - t ** 2
    s2 = -2 * t * s1
    out = []
    for d0, d1, d2 in _ENTRIES:
        a = H1[d0, d1] * H1[d0, d2] * s2[:, d0] * s1[:, d1] * s1[:, d2]
        c = lw[1] * (H1[d0, d2] * s1[:, d0] * s[:, d1] * s1[:, d2]
                     + H1[d0, d1] * s1[:, d0] * s1[:, d1] * s[:, d2])
        out.append(15 * cw ** 3 * (w @ (a * a)) + 6 * cw ** 2 * (w @ (a * c)) + cw * (w @ (c * c)))
    return np.array(out)


def _dntk_squares(depth, n, networks, cw=1.0, cb=0.0, lb=(1.0, 0.5, 1 / 3), lw=1.0, seed=0):
    """Per network, n^2 dH_{000;e}^2 for e in _ENTRIES (one output; E[dH] = 0 exactly, every term
    of (11.24) having an odd number of weights), over ``networks`` MLPs of width n; and, as a
    control, n (H_{00;01} - mean)^2 (an O(1/n) correlator, (8.82))."""
    net = et.MLP(depth=depth, activation="tanh", widths=n, c_w=cw, c_b=cb)
    p = init_params(net, 4, seed=np.random.SeedSequence([seed, depth, n]), networks=networks)
    inst = empirical_ntk(p, _X, "tanh", lambda_b=list(lb[:depth]), lambda_w=lw, order=2,
                         outputs=[0])
    d, h = inst.dH[:, 0, 0, 0], inst.H[:, 0, 0, 0, 1]
    return (n * n * np.stack([d[:, a, b, c] ** 2 for a, b, c in _ENTRIES], 1),
            n * (h - h.mean()) ** 2 * networks / (networks - 1))


def _mean_se(v):
    return v.mean(0), v.std(0, ddof=1) / np.sqrt(v.shape[0])


def test_one_hidden_layer_dntk_correlator_is_exactly_order_1_over_n_squared():
    """Two-layer tanh MLPs at n_1 = 8 and 64 (20 000 networks each): n_1^2 E[dH dH] of the exact
    dNTK (empirical_ntk) equals the closed form above within 5 SE at both widths, so n_1 E[dH dH]
    -> 0 like 1/n_1.  An O(1/n) correlator (n_1 E[dH dH] flat) would make the two widths differ
    by a factor 8 in n_1^2 E; the closed form times 0.9 is rejected by more than 5 SE."""
    cw, cb, lb, lw = 1.3, 0.2, (1.0, 0.5), (0.7, 1.3)
    exact = _one_hidden_layer_correlator(cw, cb, lb, lw)
    meas = {n: _mean_se(_dntk_squares(2, n, 20000, cw, cb, lb, lw, seed=11)[0]) for n in (8, 64)}
    for n, (m, se) in meas.items():
        print(f"\nn1 = {n}: n1^2 E[dH dH] = {m.round(4).tolist()} +- {se.round(4).tolist()}, "
              f"exact {exact.round(4).tolist()}")
        assert np.all(np.abs(m - exact) < 5 * se), (n, m, se, exact)
    m, se = meas[64]
    assert np.max(np.abs(m - 0.9 * exact) / se) > 5, (m, se)
    # the O(1/n) alternative: n1 E flat, i.e. n1^2 E at n1 = 64 eight times that at n1 = 8
    m8, se8 = meas[8]
    assert np.all(np.abs(m - 8 * m8) > 5 * np.hypot(se, 8 * se8))


_LB3 = [1.0, 1 / 2, 1 / 3]
_Y = 4 * np.array([0.4, -0.3])


def _solution_parts(n, networks, updates, seed=0, ddntk=False, H=None, eta=None):
    """The parts of the per-network solution after ``updates`` GD steps (each an iterable; None:
    converged), trained_output (PDLT (∞.141), §∞.2.2) on each network's own tensors, for depth-3
    tanh MLPs of width n (the networks of the covariance width study: inputs _X, the first two
    for training, targets 4 (0.4, -0.3)): per t, arrays (networks, 2) of "free", "dntk",
    "ddntk" (zero unless ``ddntk``: the ddNTKs do not enter d) at the test input and the first
    training input, and the initial outputs "z0" (networks, 3).  H, eta: the NTK mean of the
    projectors and the rate (default: the ensemble's measured NTK mean, 0.5 / its largest
    training eigenvalue)."""
    from effth.pdlt.learning.finite_width import trained_output
    net = et.MLP(depth=3, activation="tanh", widths=n, c_w=1.0, c_b=0.0)
    p = init_params(net, 4, seed=np.random.SeedSequence([seed, 3, n, 1]), networks=networks)
    inst = empirical_ntk(p, _X, "tanh", lambda_b=_LB3, order=3 if ddntk else 2, outputs=[0],
                         ddntk_II=ddntk)
    H = inst.H[:, 0, 0].mean(0) if H is None else H
    eta = 0.5 / np.linalg.eigvalsh(H[:2, :2]).max() if eta is None else eta
    zero = np.zeros((1,) * 4 + (3,) * 4)
    out = {t: {k: [] for k in ("free", "dntk", "ddntk")} for t in updates}
    for b in range(networks):
        one = NTKResult(outputs=(0,), z=inst.z[b], H=inst.H[b], dH=inst.dH[b],
                        ddIH=inst.ddIH[b] if ddntk else zero, ddIIH=inst.ddIIH[b] if ddntk else zero)
        for t in updates:
            o = trained_output(one, _Y, n_train=2, eta=eta, updates=t, H=H)
            out[t]["free"].append(o.value("free")[[2, 0], 0])
            out[t]["dntk"].append(o.value("dntk")[[2, 0], 0])
            out[t]["ddntk"].append(o.value("ddntk_I")[[2, 0], 0] + o.value("ddntk_II")[[2, 0], 0])
    for t in updates:
        out[t] = {k: np.array(v) for k, v in out[t].items()}
        out[t]["z0"] = inst.z[:, 0]
    return out


def _n_cov(n, x, y):
    """n 2 Cov(x, y) per network (n Var(x) for y = None) over the ensemble axis 0: (mean, SE)."""
    x = x - x.mean(0)
    v = n * x * x * x.shape[0] / (x.shape[0] - 1) if y is None else n * 2 * x * (y - y.mean(0))
    return _mean_se(v)


def _exponent(n1, m1, se1, n2, m2, se2):
    """p of m ~ n^-p from two widths, with its SE (delta method)."""
    p = -np.log(m2 / m1) / np.log(n2 / n1)
    return p, np.hypot(se1 / m1, se2 / m2) / np.log(n2 / n1)


def test_deep_dntk_correlator_and_would_be_covariance_term_fall_like_1_over_n():
    """Depth-3 tanh MLPs (the networks of the covariance width study) at n = 32 and 128:
    E[dH dH] of the exact dNTK falls like n^-p with p = 2 within 0.5, and p = 1 (an O(1/n)
    correlator) is rejected by more than 5 SE; the NTK's fluctuation n Var(H_01), an O(1/n)
    correlator, is flat by the same estimator (p = 1 within 5 SE).  The would-be dNTK x dNTK
    part of the covariance after t = 10 steps, n Var(d), falls like n^-q at the test and training
    inputs with q = 1 within 0.5, and q = 0 (an O(1/n) part of the covariance) is rejected by
    more than 5 SE."""
    (a32, h32), (a128, h128) = _dntk_squares(3, 32, 2500, seed=3), _dntk_squares(3, 128, 2500, seed=3)
    (m32, s32), (m128, s128) = _mean_se(a32), _mean_se(a128)
    p, sp_ = _exponent(32, m32, s32, 128, m128, s128)
    p = p + 2                                            # of E[dH dH] = (n^2 E) / n^2
    ph, sph = _exponent(32, *_mean_se(h32), 128, *_mean_se(h128))
    print(f"\nn^2 E[dH dH]: n=32 {m32.round(3).tolist()}, n=128 {m128.round(3).tolist()}; "
          f"E[dH dH] ~ n^-p, p = {p.round(2).tolist()} +- {sp_.round(2).tolist()}; "
          f"n Var(H_01) ~ n^-p, p = {ph:.2f} +- {sph:.2f}")
    assert np.all(np.abs(p - 2) < 0.5) and np.all(p - 1 > 5 * sp_), (p, sp_)
    assert abs(ph) < 5 * sph, (ph, sph)
    v32, e32 = _n_cov(32, _solution_parts(32, 700, (10,), seed=4)[10]["dntk"], None)
    v128, e128 = _n_cov(128, _solution_parts(128, 700, (10,), seed=4)[10]["dntk"], None)
    q, sq = _exponent(32, v32, e32, 128, v128, e128)
    print(f"n Var(d) at t = 10 (test, training input): n=32 {v32.round(4).tolist()} +- "
          f"{e32.round(4).tolist()}, n=128 {v128.round(4).tolist()} +- {e128.round(4).tolist()}; "
          f"n Var(d) ~ n^-q, q = {q.round(2).tolist()} +- {sq.round(2).tolist()}")
    assert np.all(q > 5 * sq) and np.all(np.abs(q - 1) < 0.5), (q, sq)


def _fit_quadratic(widths, meas):
    """Weighted fit n x (measured) = a + b/n + c/n^2: ((a, b, c), SE of a)."""
    n = np.asarray(widths, float)
    A = np.stack([np.ones(len(n)), 1 / n, 1 / n ** 2], 1) / meas[:, 1:2]
    coef, *_ = np.linalg.lstsq(A, meas[:, 0] / meas[:, 1], rcond=None)
    return coef, float(np.sqrt(np.linalg.inv(A.T @ A)[0, 0]))


def test_covariance_parts_of_the_per_network_solution_width_study(opt_in_slow):
    """The covariance of the per-network solution (∞.141) over depth-3 tanh MLPs' own tensors,
    split by parts, 8000 networks per width at n = 32, 64, 128, 256, after t = 10 steps and at
    convergence, at the test input and (t = 10) the first training input:

    * the would-be dNTK x dNTK part n Var(d), fitted as a + b/n + c/n^2 (it is curved: n^2 Var(d)
      falls by 20 % over these widths), has its intercept a within 5 SE of zero; so has the
      ddNTK square n Var(dd) (the ddNTKs' fluctuations are subleading, PDLT §∞.1);
    * the products the covariance keeps, fitted the same way, have their intercepts within 5 SE
      of the covariance1 parts (finite_width_covariance): n 2 Cov(d, free) of "dntk",
      n 2 Cov(dd, free) of "ddntk", n (Var free - Var u0) of "metric" + "ntk_fluctuation" minus
      the metric of u0 = Mt z(0) (its variance Mt (K + G1/n) Mt^T is known, PDLT (4.106)).

    About 6 minutes on the loaded 2-core machine."""
    from effth.pdlt.learning.finite_time import power_t
    from effth.pdlt.learning.finite_width import finite_width_covariance
    widths, ts = (32, 64, 128, 256), (10, None)
    nf = et.ntk_flow(et.MLP(depth=3, activation="tanh", c_w=1.0, c_b=0.0), _X, lambda_b=_LB3)
    Th, G1 = nf.value("Theta", layer=3), nf.value("G1", layer=3)
    lam, U = np.linalg.eigh(Th[:2, :2])
    eta = 0.5 / lam.max()
    runs = [_solution_parts(n, 8000, ts, seed=21, ddntk=True, H=Th, eta=eta) for n in widths]
    for t in ts:
        cov = finite_width_covariance(nf, _Y, n_train=2, eta=eta, updates=t)
        phi = 1 / lam if t is None else (1 - power_t(lam, eta, t)) / lam
        Mt = np.eye(3)
        Mt[:, :2] -= Th[:, :2] @ U @ np.diag(phi) @ U.T
        for k, (s, where) in enumerate(((2, "test"), (0, "training"))):
            if t is None and s == 0:
                continue                                  # every part vanishes on the training set
            theory = {q: cov.value(q)[s, s, 0, 0] for q in cov.part_names}
            expect = {"Var d": 0.0, "Var dd": 0.0, "2Cov(d, free)": theory["dntk"],
                      "2Cov(dd, free)": theory["ddntk"],
                      "Var free - Var u0": theory["metric"] - (Mt @ G1 @ Mt.T)[s, s]
                      + theory["ntk_fluctuation"]}
            meas = {q: [] for q in expect}
            for n, run in zip(widths, runs):
                r = run[t]
                f, d, dd = r["free"][:, k], r["dntk"][:, k], r["ddntk"][:, k]
                u0 = r["z0"] @ Mt[s]
                meas["Var d"].append(_n_cov(n, d, None))
                meas["Var dd"].append(_n_cov(n, dd, None))
                meas["2Cov(d, free)"].append(_n_cov(n, d, f))
                meas["2Cov(dd, free)"].append(_n_cov(n, dd, f))
                a, b = f - f.mean(), u0 - u0.mean()
                meas["Var free - Var u0"].append(_mean_se(n * (a * a - b * b) * len(a) / (len(a) - 1)))
            print(f"\nt={t} {where} input:")
            for q, want in expect.items():
                data = np.array(meas[q])
                (a, b, c), se_a = _fit_quadratic(widths, data)
                print(f"  n {q}: {data.round(4).tolist()}; a + b/n + c/n^2: a = {a:.4f} +- "
                      f"{se_a:.4f} (b = {b:.2f}, c = {c:.1f}), theory {want:.4f}")
                assert abs(a - want) < 5 * se_a, (t, where, q, a, se_a, want)




def test_dntk_part_from_the_measured_dntk_preactivation_correlator(opt_in_slow):
    """The covariance1 part "dntk" depends on the dNTK only through E[dH z] (11.45); with one
    output only P + Q + Q^T (slots 0213) enters.  Evaluated with n E[dH_{000} z_0] measured on
    60 000 depth-3 tanh MLPs at n = 256 (the networks of the covariance width study; jackknife
    over 20 groups) in place of ntk_flow's P, Q, it agrees with the theory's part within 5 SE
    after t = 10 steps and at convergence (the product n 2 Cov(d, free) of the study above is
    noisier).  About 3 minutes on the loaded 2-core machine."""
    from effth.pdlt.learning.finite_width import finite_width_covariance
    nf = et.ntk_flow(et.MLP(depth=3, activation="tanh", c_w=1.0, c_b=0.0), _X, lambda_b=_LB3)
    T = {k: np.asarray(nf.value(k, layer=3)) for k in
         ("Theta", "H1", "K", "G1", "A", "B", "D", "F", "P", "Q", "R", "S", "T", "U")}
    eta = 0.5 / np.linalg.eigvalsh(T["Theta"][:2, :2]).max()

    def part(PQ, t):
        T2 = dict(T, P=PQ, Q=np.zeros_like(PQ))
        return finite_width_covariance(T2, _Y, n_train=2, eta=eta, updates=t).value("dntk")[2, 2, 0, 0]

    n, groups, per = 256, 20, 3000
    net = et.MLP(depth=3, activation="tanh", widths=n, c_w=1.0, c_b=0.0)
    acc = []
    for g in range(groups):
        p = init_params(net, 4, seed=np.random.SeedSequence([5, n, g]), networks=per)
        inst = empirical_ntk(p, _X, "tanh", lambda_b=_LB3, order=2, outputs=[0])
        acc.append(n * np.einsum("Babc,Bd->abcd", inst.dH[:, 0, 0, 0], inst.z[:, 0]) / per)
    acc = np.array(acc)
    leave = (acc.sum(0) - acc) / (groups - 1)
    for t in (10, None):
        want = part(T["P"] + T["Q"] + T["Q"].transpose(0, 2, 1, 3), t)
        got = part(acc.mean(0), t)
        jk = np.array([part(x, t) for x in leave])
        se = np.sqrt((groups - 1) / groups * ((jk - jk.mean()) ** 2).sum())
        print(f"\nt={t}: dntk part with the measured n E[dH z] {got:.4f} +- {se:.4f}, theory {want:.4f}")
        assert abs(got - want) < 5 * se, (t, got, se, want)
        assert abs(got - 0.9 * want) > 5 * se, (t, got, se, want)
