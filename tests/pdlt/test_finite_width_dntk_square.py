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


def _would_be_term(n, networks, t, seed=0, targets=(0.4, -0.3)):
    """The would-be dNTK x dNTK part of the covariance, measured: n Var(d) with d the dNTK term of
    the per-network solution after t GD steps (trained_output, PDLT §∞.2.2) of depth-3 tanh MLPs
    (the networks of the covariance width study: 2 training inputs, targets 4 (0.4, -0.3)), at
    the test input and the first training input, with SE; and n 2 Cov(d, free), the product that
    the covariance1 part "dntk" is (at O(1/n))."""
    from effth.pdlt.learning.finite_width import trained_output
    lb = [1.0, 1 / 2, 1 / 3]
    y = 4 * np.array(targets)
    net = et.MLP(depth=3, activation="tanh", widths=n, c_w=1.0, c_b=0.0)
    p = init_params(net, 4, seed=np.random.SeedSequence([seed, 3, n, 1]), networks=networks)
    inst = empirical_ntk(p, _X, "tanh", lambda_b=lb, order=2, outputs=[0])
    Th = inst.H[:, 0, 0].mean(0)                         # the NTK mean, measured
    eta = 0.5 / np.linalg.eigvalsh(Th[:2, :2]).max()
    zero = np.zeros((1,) * 4 + (3,) * 4)                 # the ddNTKs do not enter d
    rows = []
    for b in range(networks):
        one = NTKResult(outputs=(0,), z=inst.z[b], H=inst.H[b], dH=inst.dH[b], ddIH=zero,
                        ddIIH=zero)
        o = trained_output(one, y, n_train=2, eta=eta, updates=t, H=Th)
        rows.append(np.concatenate([o.value("dntk")[[2, 0], 0], o.value("free")[[2, 0], 0]]))
    d, f = np.array(rows)[:, :2], np.array(rows)[:, 2:]
    d, f = d - d.mean(0), f - f.mean(0)
    var = n * d ** 2 * networks / (networks - 1)
    cross = n * 2 * d * f
    return _mean_se(var), _mean_se(cross), eta


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
    (a32, h32), (a128, h128) = _dntk_squares(3, 32, 4000, seed=3), _dntk_squares(3, 128, 4000, seed=3)
    (m32, s32), (m128, s128) = _mean_se(a32), _mean_se(a128)
    p, sp_ = _exponent(32, m32, s32, 128, m128, s128)
    p = p + 2                                            # of E[dH dH] = (n^2 E) / n^2
    ph, sph = _exponent(32, *_mean_se(h32), 128, *_mean_se(h128))
    print(f"\nn^2 E[dH dH]: n=32 {m32.round(3).tolist()}, n=128 {m128.round(3).tolist()}; "
          f"E[dH dH] ~ n^-p, p = {p.round(2).tolist()} +- {sp_.round(2).tolist()}; "
          f"n Var(H_01) ~ n^-p, p = {ph:.2f} +- {sph:.2f}")
    assert np.all(np.abs(p - 2) < 0.5) and np.all(p - 1 > 5 * sp_), (p, sp_)
    assert abs(ph) < 5 * sph, (ph, sph)
    (v32, e32), _, _ = _would_be_term(32, 1000, 10, seed=4)
    (v128, e128), _, _ = _would_be_term(128, 1000, 10, seed=4)
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


def test_would_be_dntk_square_width_study(opt_in_slow):
    """Depth-3 tanh MLPs of the covariance width study, 8000 networks per width at n = 32, 64,
    128, 256, after t = 10 steps and at convergence: the would-be dNTK x dNTK part n Var(d) fitted
    as a + b/n + c/n^2 (it is curved: n^2 Var(d) falls by 20 % over these widths) has its
    intercept a (the part's O(1/n) value) within 5 SE of zero, while the
    product the covariance keeps, n 2 Cov(d, free), fitted the same way, has its intercept within
    5 SE of the covariance1 part "dntk" (finite_width_covariance) and more than 5 SE from zero.
    A few minutes on the loaded 2-core machine."""
    from effth.pdlt.learning.finite_width import finite_width_covariance
    from .test_finite_time_width import _fit_line
    widths = (32, 64, 128, 256)
    lb = [1.0, 1 / 2, 1 / 3]
    nf = et.ntk_flow(et.MLP(depth=3, activation="tanh", c_w=1.0, c_b=0.0), _X, lambda_b=lb)
    for t in (10, None):
        var, cross, eta = [], [], None
        for n in widths:
            v, c, eta = _would_be_term(n, 8000, t, seed=21)
            var.append(v)
            cross.append(c)
        cov = finite_width_covariance(nf, 4 * np.array([0.4, -0.3]), n_train=2, eta=eta,
                                      updates=t)
        for k, (s, where) in enumerate(((2, "test"), (0, "training"))):
            if t is None and s == 0:
                continue                                  # d vanishes on the training set
            dv = np.array([[m[k], e[k]] for m, e in var])
            dc = np.array([[m[k], e[k]] for m, e in cross])
            (a, b, _), se_a = _fit_quadratic(widths, dv)
            (ac, bc), se_c = _fit_line(widths, dc)
            theory = cov.value("dntk")[s, s, 0, 0]
            print(f"\nt={t} {where}: n Var(d) {dv.round(4).tolist()}, a + b/n + c/n^2: a = "
                  f"{a:.4f} +- {se_a:.4f}, b = {b:.2f}; n 2Cov(d, free) {dc.round(4).tolist()}, intercept "
                  f"{ac:.4f} +- {se_c:.4f} (b = {bc:.2f}), covariance1 part dntk {theory:.4f}, "
                  f"covariance1 {cov.value('covariance1')[s, s, 0, 0]:.4f}")
            assert abs(a) < 5 * se_a, (a, se_a)
            assert abs(ac - theory) < 5 * se_c, (ac, se_c, theory)
            assert abs(ac) > 5 * se_c or abs(theory) < 5 * se_c
