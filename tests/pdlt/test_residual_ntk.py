"""The residual MLP's NTK hierarchy (PDLT app. B) derived by the NTK pipeline.

Independent sources: the residual network's NTK from finite differences of its forward map (for
the typed forward equation), the plain-MLP derivation (gamma = 0), the book's remark that the
block's learning rates become xi^2 lambda (§B.1), and the NTK simulator on residual networks
(tests marked slow; docs/residual.md has the width study).
"""

import numpy as np
import pytest
import sympy as sp

import effth as et
from effth.activations import get_activation
from effth.algebra.expectation import GaussianExpectation, sigma
from effth.algebra.indices import alpha, ell
from effth.algebra.ntk_tensors import FrozenNTK
from effth.algebra.tensors import Kernel, KernelMatrix, SampleTensor, ThreePointVertex
from effth.errors import DomainError
from effth.pdlt import derive_ntk
from effth.pdlt.derivation.ntk_forward import LAMBDA_B, LAMBDA_W, forward_numeric
from effth.pdlt.derivation.ntk_pipeline import NTKLeg, NTKOddX, NTKOddY, ntk_moment
from effth.pdlt.derivation.pipeline import CW, GAMMA, N_L, XI, order_coefficient

KM = KernelMatrix(Kernel, ell)
a1, a2, a3 = (alpha(k) for k in range(1, 4))


def _residual_net(W, b, X, act, gamma, xi):
    """z1 = b1 + W1 x, z2 = xi (b2 + W2 sigma(z1)) + gamma z1: outputs (n, N)."""
    z1 = (W[0] @ X.T) + b[0][:, None]
    return z1, xi * (W[1] @ act(z1) + b[1][:, None]) + gamma * z1


def test_residual_forward_equation_reproduces_finite_difference_ntk():
    """The typed residual forward equations of z and H (B.4) give the network's NTK (central
    differences of the residual forward map), and the plain one does not."""
    rng = np.random.default_rng(5)
    n0, n, N = 3, 4, 2
    X = rng.normal(size=(N, n0))
    W = [rng.normal(size=(n, n0)) / np.sqrt(n0), rng.normal(size=(n, n)) / np.sqrt(n)]
    b = [0.3 * rng.normal(size=n), 0.3 * rng.normal(size=n)]
    lb, lw, gamma, xi = [0.7, 1.3], [1.1, 0.6], 0.6, 0.8
    a = get_activation("tanh")
    derivs = [a.numpy(k) for k in range(4)]
    flat = np.concatenate([W[0].ravel(), b[0], W[1].ravel(), b[1]])
    rates = np.concatenate([np.full(n * n0, lw[0] / n0), np.full(n, lb[0]),
                            np.full(n * n, lw[1] / n), np.full(n, lb[1])])

    def out(p):
        k = 0
        parts = []
        for shape in ((n, n0), (n,), (n, n), (n,)):
            size = int(np.prod(shape))
            parts.append(p[k:k + size].reshape(shape))
            k += size
        return _residual_net([parts[0], parts[2]], [parts[1], parts[3]], X, derivs[0], gamma, xi)

    h = 1e-6
    J1, J2 = [], []
    for k in range(flat.size):
        e = np.zeros_like(flat)
        e[k] = h
        (p1, p2), (m1, m2) = out(flat + e), out(flat - e)
        J1.append((p1 - m1) / (2 * h))
        J2.append((p2 - m2) / (2 * h))
    J1, J2 = np.array(J1), np.array(J2)                  # (params, n, N)
    H1 = np.einsum("p,pia,pjb->ijab", rates, J1, J1)
    H2 = np.einsum("p,pia,pjb->ijab", rates, J2, J2)
    z1, z2 = out(flat)
    got = forward_numeric("H", W[1], z1, {"H": H1}, derivs, lb[1], lw[1], xi=xi, gamma=gamma)
    np.testing.assert_allclose(got, H2, rtol=1e-6, atol=1e-8)
    plain = forward_numeric("H", W[1], z1, {"H": H1}, derivs, lb[1], lw[1])
    assert not np.allclose(plain, H2, rtol=1e-2)


def _odd_zero(expr):
    zero = {t: 0 for t in expr.atoms(SampleTensor)
            if isinstance(t, (ThreePointVertex, NTKOddX, NTKOddY))}
    return sp.expand(expr.xreplace(zero).subs({GAMMA: 0, XI: 1}))


@pytest.mark.parametrize("statistic", ["Theta", "H1", "B", "F"])
def test_gamma_zero_is_the_plain_mlp(statistic):
    """At gamma = 0, xi = 1 and zero odd tensors the residual recursion is the plain one."""
    res = derive_ntk(statistic, residual=True).expr
    assert res.has(GAMMA)
    assert sp.expand(_odd_zero(res) - derive_ntk(statistic).expr) == 0


def test_theta_is_the_books_rescaled_rates():
    r"""Theta' = xi^2 (lambda_b + lambda_W <sigma sigma>) + (gamma^2 + xi^2 C_W <sigma' sigma'>) Theta:
    the block's rates become xi^2 lambda (PDLT §B.1) and the skip adds gamma^2 Theta."""
    rec = derive_ntk("Theta", residual=True)
    T = FrozenNTK(a1, a2, ell)
    E = lambda *f: GaussianExpectation(sp.Mul(*f), KM)  # noqa: E731
    expected = (XI**2 * (LAMBDA_B + LAMBDA_W * E(sigma(a1), sigma(a2)))
                + (GAMMA**2 + XI**2 * CW * E(sigma(a1, 1), sigma(a2, 1))) * T)
    assert sp.expand(rec.expr - expected) == 0
    wrong = expected.subs(GAMMA, sp.Rational(9, 10) * GAMMA)
    assert sp.expand(rec.expr - wrong) != 0


def test_odd_channels_are_closed():
    """The NTK-preactivation three-point ansatz (Y and two X channels) covers E[H_11 z_1]:
    the derived same-neuron moment equals Y_{a1a2a3} + X_{a1a3a2} + X_{a2a3a1} at layer l+1."""
    H = NTKLeg("H", (1, 1), (a1, a2))
    same = N_L * order_coefficient(ntk_moment([H, NTKLeg("z", (1,), (a3,))], 1, True), 1)
    Y = N_L * order_coefficient(ntk_moment([H, NTKLeg("z", (2,), (a3,))], 1, True), 1)

    def X(p, q, r):   # n E[H_12;pr z_1;q]
        return N_L * order_coefficient(ntk_moment([NTKLeg("H", (1, 2), (p, r)),
                                                   NTKLeg("z", (1,), (q,))], 1, True), 1)
    assert sp.expand(same - Y - X(a1, a3, a2) - X(a2, a3, a1)) == 0
    assert sp.expand(same - Y - X(a1, a3, a2)) != 0


def test_residual_ntk_statistics_refused_beyond_the_derived_ones():
    with pytest.raises(DomainError, match="dNTK and ddNTK of residual"):
        derive_ntk("P", residual=True)
    with pytest.raises(DomainError, match="residual must be"):
        derive_ntk("Theta", residual="yes")


def test_ntk_flow_of_a_residual_net_is_the_residual_hierarchy():
    """ntk_flow(net, X) on a residual net iterates the residual recursions: Theta by hand."""
    net = et.MLP("tanh", depth=3, widths=32, gamma=0.5)
    X = np.array([[1.0, 0.5]])
    nf = et.pdlt.ntk_flow(net, X, statistics=("Theta",))
    fl = {"K": [np.array([[0.625]])]}          # C_W x.x / n_0 with x = (1, 0.5)
    rec = et.pdlt.derive_initialization("K", residual=True)
    for layer in (1, 2):
        fl["K"].append(rec.evaluate(fl["K"][-1], activation="tanh", c_w=1.0, gamma=net.gamma_at(layer + 1)))
    x, w = np.polynomial.hermite_e.hermegauss(80)
    w = w / w.sum()
    th = 1.0 + 1.25 / 2              # lambda_b + lambda_W x.x / n_0, n_0 = 2
    for layer in (1, 2):
        zz = np.sqrt(float(fl["K"][layer - 1].ravel()[0])) * x
        g = w @ np.tanh(zz) ** 2
        chi = net.c_w_at(layer + 1) * (w @ np.cosh(zz) ** -4)
        gam = net.gamma_at(layer + 1)
        th = 1.0 + g + (gam**2 + chi) * th
    assert abs(float(nf.value("Theta", layer=3)[0, 0]) - th) < 1e-8 * th
    with pytest.raises(DomainError, match="residual net"):
        et.pdlt.ntk_flow(net, X, n_train=1)


@pytest.mark.parametrize("act, stat", [("gelu", "B"), ("tanh", "H1"), ("gelu", "F")])
def test_finite_width_statistics_of_a_non_affine_residual_net_are_refused(act, stat):
    """The single-layer cumulant closure drops the Mehler terms of a neuron's history (see
    residual_ntk_flow): refused by default, named in the error; Theta stays available."""
    net = et.MLP(act, depth=3, widths=32, gamma=0.5)
    X = np.array([[1.0, 0.5]])
    with pytest.raises(DomainError, match="closure='cumulant'"):
        et.pdlt.ntk_flow(net, X, statistics=(stat,))
    with pytest.raises(DomainError, match="closure must be"):
        et.pdlt.ntk_flow(net, X, statistics=(stat,), closure="mehler")
    with pytest.raises(DomainError, match="applies to a residual net"):
        et.pdlt.ntk_flow(et.MLP(act, depth=3, widths=32), X, closure="cumulant")


@pytest.mark.slow
def test_cumulant_closure_is_the_truncated_mehler_series(opt_in_slow):
    """Depth 3 (skip at layer 2), GELU, gamma = 0.5: the derived closure equals the hand-derived
    depth-3 statistics with the joint history expectations truncated (p = 0 in B, p <= 1 in F,
    p <= 2 / <= 1 in H1) to 1e-8, and the exact ones differ by 2.6% (B), 2.9% (F), 5% (H1)
    (tests/pdlt/_residual_ntk_oracle.py; the simulations side with the exact values:
    tests/simulation/test_ntk_residual.py).  About 3 minutes without the cache (derivation)."""
    from ._residual_ntk_oracle import depth3_statistics

    net = et.MLP("gelu", depth=3, widths=64, gamma=0.5)
    nf = et.pdlt.ntk_flow(net, np.array([[1.0, 0.5]]), statistics=("H1", "B", "F"),
                          closure="cumulant")
    got = {s: float(nf.value(s, layer=3).ravel()[0]) for s in ("Theta", "H1", "B", "F")}
    trunc = depth3_statistics("gelu", 0.5, truncate=True)
    exact = depth3_statistics("gelu", 0.5)
    for s, v in got.items():
        assert abs(v - trunc[s]) < 1e-8 * abs(trunc[s]), (s, v, trunc[s])
    for s in ("H1", "B", "F"):
        assert abs(exact[s] - got[s]) > 0.02 * abs(exact[s]), (s, exact[s], got[s])
