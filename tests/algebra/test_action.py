"""Perturbation theory under quartic actions: derived vs published vs measured (verification triangle).

Corners:
(a) published: PDLT (1.73), (1.74), (1.78), (4.47), (4.48) typed in below, compared after
    ``expand_sample_sums`` over 1, 2, 3 concrete samples with random symmetric tensors;
(b) brute force: explicit Wick sums over (neuron, sample) variables with explicit Kronecker deltas,
    n = 1, 2, 3 neurons (independent of the graph / cycle machinery);
(c) measured: quadrature of the actual non-Gaussian density (PDLT §1.3, (1.71)–(1.78)), residual ~ lambda^2.
"""

from __future__ import annotations

import itertools
from math import factorial

import numpy as np
import pytest
import sympy as sp
from scipy import integrate

from effth.algebra.action import (
    QuarticAction,
    classify_diagram,
    connected_correlator,
    diagrams,
    partition_function,
    perturbative_moment,
)
from effth.algebra.tensors import (
    Kernel,
    Propagator,
    QuarticCoupling,
    SampleSum,
    SymmetricQuarticCoupling,
    expand_sample_sums,
    tensor_components,
)
from effth.algebra.wick.pairings import enumerate_pairings

EPS = sp.Symbol("epsilon")
N_SYM = sp.Symbol("n", positive=True, integer=True)
MU = sp.symbols("mu1:5")
I = sp.symbols("i1:5", integer=True)
A = sp.symbols("alpha1:5")
RHO = sp.symbols("rho_1:5")
BETA = sp.symbols("beta_1:5")

# --------------------------------------------------------------------------------------------
# numeric helpers


def random_tensors(N: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(N, N + 2))
    K = x @ x.T / (N + 2) + 0.3 * np.eye(N)
    t = rng.normal(size=(N,) * 4)
    full = sum(np.transpose(t, p) for p in itertools.permutations(range(4))) / 24
    pair_group = [(0, 1, 2, 3), (1, 0, 2, 3), (0, 1, 3, 2), (1, 0, 3, 2),
                  (2, 3, 0, 1), (3, 2, 0, 1), (2, 3, 1, 0), (3, 2, 1, 0)]
    pair = sum(np.transpose(t, p) for p in pair_group) / 8
    return {Kernel: K, Propagator: K, SymmetricQuarticCoupling: full, QuarticCoupling: pair}


_EXPANDED: dict = {}


def evaluate(expr, samples, tensors, subs=None) -> float:
    # expand first: SampleSum does not survive ``xreplace`` (func(*args) re-wraps the dummies)
    key = (expr, tuple(samples))
    if key not in _EXPANDED:
        _EXPANDED[key] = expand_sample_sums(expr, samples)
    e = _EXPANDED[key].xreplace(subs or {})
    rep = {c: sp.Float(tensors[type(c)][tuple(int(i) for i in c.indices)], 30) for c in tensor_components(e)}
    return float(e.xreplace(rep))


# --------------------------------------------------------------------------------------------
# (a) published forms


def _S(body, *d):
    return SampleSum(body, *d)


PUB_173 = 1 - EPS / 8 * _S(SymmetricQuarticCoupling(*RHO) * Kernel(RHO[0], RHO[1]) * Kernel(RHO[2], RHO[3]), *RHO)
PUB_174 = Kernel(MU[0], MU[1]) - EPS / 2 * _S(
    SymmetricQuarticCoupling(*RHO) * Kernel(MU[0], RHO[0]) * Kernel(MU[1], RHO[1]) * Kernel(RHO[2], RHO[3]), *RHO)
PUB_178 = -EPS * _S(SymmetricQuarticCoupling(*RHO) * sp.Mul(*[Kernel(MU[k], RHO[k]) for k in range(4)]), *RHO)


def g(a, b):
    return Propagator(a, b)


b1, b2, b3, b4 = BETA
PUB_447 = sp.KroneckerDelta(I[0], I[1]) * (g(A[0], A[1]) + sp.Rational(1, 2) * _S(
    QuarticCoupling(*BETA) * (N_SYM * g(A[0], b1) * g(A[1], b2) * g(b3, b4) + 2 * g(A[0], b1) * g(A[1], b3) * g(b2, b4)),
    *BETA))
PUB_448 = (
    sp.KroneckerDelta(I[0], I[1]) * sp.KroneckerDelta(I[2], I[3])
    * _S(QuarticCoupling(b1, b2, b3, b4) * g(A[0], b1) * g(A[1], b2) * g(A[2], b3) * g(A[3], b4), *BETA)
    + sp.KroneckerDelta(I[0], I[2]) * sp.KroneckerDelta(I[1], I[3])
    * _S(QuarticCoupling(b1, b3, b2, b4) * g(A[0], b1) * g(A[1], b2) * g(A[2], b3) * g(A[3], b4), *BETA)
    + sp.KroneckerDelta(I[0], I[3]) * sp.KroneckerDelta(I[1], I[2])
    * _S(QuarticCoupling(b1, b4, b2, b3) * g(A[0], b1) * g(A[1], b2) * g(A[2], b3) * g(A[3], b4), *BETA)
)

CH1 = QuarticAction("ch1")
CH4 = QuarticAction("ch4")


def _assignments(labels, N, k=4):
    """A few assignments of concrete samples (0..N-1) to ``labels``, coincidences included."""
    out = []
    for shift in range(min(k, N ** len(labels))):
        out.append({lab: (j * (shift + 1) + shift) % N for j, lab in enumerate(labels)})
    return out


@pytest.mark.parametrize("N", [1, 2, 3])
def test_ch1_published_173_174_178(N):
    t = random_tensors(N, seed=10 + N)
    eps = {EPS: sp.Rational(3, 7)}
    samples = list(range(N))
    assert evaluate(partition_function(CH1), samples, t, eps) == pytest.approx(evaluate(PUB_173, samples, t, eps), rel=1e-12)
    two = perturbative_moment(CH1, MU[:2])
    four = connected_correlator(CH1, MU)
    for asg in _assignments(MU, N):
        s = {**eps, **asg}
        assert evaluate(two, samples, t, s) == pytest.approx(evaluate(PUB_174, samples, t, s), rel=1e-12)
        assert evaluate(four, samples, t, s) == pytest.approx(evaluate(PUB_178, samples, t, s), rel=1e-12)


@pytest.mark.parametrize("N", [1, 2, 3])
def test_ch4_published_447_448(N):
    t = random_tensors(N, seed=20 + N)
    samples = list(range(N))
    two = perturbative_moment(CH4, list(zip(I[:2], A[:2])))
    four = connected_correlator(CH4, list(zip(I, A)))
    for asg in _assignments(A, N):
        for neurons in [(0, 0, 0, 0), (0, 1, 0, 1), (0, 0, 1, 1), (1, 0, 0, 1), (0, 1, 2, 3)]:
            s = {**asg, **dict(zip(I, neurons)), N_SYM: 3}
            assert evaluate(two, samples, t, s) == pytest.approx(evaluate(PUB_447, samples, t, s), rel=1e-12, abs=1e-14)
            assert evaluate(four, samples, t, s) == pytest.approx(evaluate(PUB_448, samples, t, s), rel=1e-12, abs=1e-14)


def test_symbolic_forms_are_the_books():
    # the class representatives reproduce the printed index patterns exactly
    assert sp.simplify(perturbative_moment(CH1, MU[:2]) - PUB_174) == 0
    assert sp.simplify(connected_correlator(CH1, MU) - PUB_178) == 0
    assert sp.simplify(partition_function(CH1) - PUB_173) == 0
    delta = sp.KroneckerDelta(I[0], I[1])
    split_447 = delta * g(A[0], A[1]) + delta * N_SYM / 2 * _S(
        QuarticCoupling(*BETA) * g(A[0], b1) * g(A[1], b2) * g(b3, b4), *BETA) + delta * _S(
        QuarticCoupling(*BETA) * g(A[0], b1) * g(A[1], b3) * g(b2, b4), *BETA)
    assert sp.expand(perturbative_moment(CH4, list(zip(I[:2], A[:2]))) - split_447) == 0


def _distribute(expr):
    """Split SampleSum(c*(A + B)) into SampleSum(c*A) + SampleSum(c*B) (book brackets), factors
    free of the dummies pulled out; then ``sp.expand``."""

    def split(s):
        out = sp.S.Zero
        for term in sp.Add.make_args(sp.expand(s.summand)):
            inside = [f for f in sp.Mul.make_args(term) if f.has(*s.dummies)]
            outside = [f for f in sp.Mul.make_args(term) if not f.has(*s.dummies)]
            out += sp.Mul(*outside) * SampleSum(sp.Mul(*inside), *s.dummies)
        return out

    return sp.expand(sp.expand(expr).replace(lambda e: isinstance(e, SampleSum), split))


@pytest.mark.parametrize("name", ["1.73", "1.74", "1.78", "4.47", "4.48"])
def test_derived_is_symbolically_the_book(name):
    # strict: identical sympy expressions, dummy names included (canonicalize_dummies), no numerics
    derived = {
        "1.73": lambda: partition_function(CH1),
        "1.74": lambda: perturbative_moment(CH1, MU[:2]),
        "1.78": lambda: connected_correlator(CH1, MU),
        "4.47": lambda: perturbative_moment(CH4, list(zip(I[:2], A[:2]))),
        "4.48": lambda: connected_correlator(CH4, list(zip(I, A))),
    }[name]()
    book = {"1.73": PUB_173, "1.74": PUB_174, "1.78": PUB_178, "4.47": PUB_447, "4.48": PUB_448}[name]
    assert sp.expand(derived) == _distribute(book)
    assert sp.expand(derived - _distribute(book)) == 0


def test_448_channel_prints_like_the_book():
    four = connected_correlator(CH4, list(zip(I, A)))
    chan = [t for t in four.args if t.has(sp.KroneckerDelta(I[0], I[2]))]
    assert len(chan) == 1
    (s,) = [f for f in chan[0].args if isinstance(f, SampleSum)]
    assert s.summand == QuarticCoupling(b1, b3, b2, b4) * g(A[0], b1) * g(A[1], b2) * g(A[2], b3) * g(A[3], b4)
    assert s.dummies == BETA


def test_diagram_values_are_canonical():
    from effth.algebra.tensors import canonicalize_dummies

    for act, ext in [(CH1, MU), (CH4, list(zip(I, A))), (CH4, list(zip(I[:2], A[:2])))]:
        for d in diagrams(act, ext, order=1):
            assert canonicalize_dummies(d.value) == d.value
    # order 2 (8 dummies: greedy numbering) stays numerically right and is deterministic
    e2 = perturbative_moment(CH1, MU[:2], order=2)
    assert e2 == perturbative_moment(CH1, MU[:2], order=2)
    assert canonicalize_dummies(e2, MU[:2]) == e2


def test_diagram_counting_spec_2_3():
    ds = diagrams(CH1, MU, order=1, exact_order=True)
    counts = {k: sum(d.multiplicity for d in ds if d.kind == k) for k in ("vacuum", "disconnected", "connected")}
    assert counts == {"vacuum": 9, "disconnected": 72, "connected": 24}
    assert sum(d.multiplicity for d in ds) == 105
    # two-point: 3 of the 15 pair mu1 with mu2 (vacuum), 12 do not
    ds2 = diagrams(CH1, MU[:2], order=1, exact_order=True)
    assert sorted((d.kind, d.multiplicity) for d in ds2) == [("connected", 12), ("vacuum", 3)]


def test_z_ch4_and_bad_input():
    z = partition_function(CH4)
    expected = 1 + N_SYM**2 / 8 * _S(QuarticCoupling(*BETA) * g(b1, b2) * g(b3, b4), *BETA) \
        + N_SYM / 4 * _S(QuarticCoupling(*BETA) * g(b1, b3) * g(b2, b4), *BETA)
    assert sp.expand(z - expected) == 0
    with pytest.raises(ValueError):
        QuarticAction("ch2")
    with pytest.raises(ValueError):
        perturbative_moment(CH4, A[:2])
    with pytest.raises(ValueError):
        perturbative_moment(CH1, [(I[0], A[0]), (I[1], A[1])])
    assert perturbative_moment(CH1, MU[:3]) == 0  # odd moments vanish


def test_layer_and_zeroth_order():
    act = QuarticAction("ch4", layer=sp.Symbol("ell"))
    e = perturbative_moment(act, [(I[0], A[0]), (I[1], A[1])], order=0)
    assert e == sp.KroneckerDelta(I[0], I[1]) * Propagator(A[0], A[1], sp.Symbol("ell"))
    assert connected_correlator(CH1, MU, order=0) == 0


# --------------------------------------------------------------------------------------------
# (b) brute force: explicit Wick sums with explicit neuron indices


def gaussian_moment(variables, cov) -> float:
    """<prod z_v> for a zero-mean Gaussian with covariance cov(u, v), by explicit pairings."""
    total = 0.0
    for p in enumerate_pairings(list(range(len(variables)))):
        term = 1.0
        for a, b in p:
            term *= cov(variables[a], variables[b])
            if term == 0.0:
                break
        total += term
    return total


def brute_ch4_moment_orders(ext, n, gmat, v):
    """(order-0, order-1) coefficients of E[prod z_{i;a}] under (4.44), by (4.46) with explicit sums."""
    N = gmat.shape[0]

    def cov(x, y):
        return gmat[x[1], y[1]] if x[0] == y[0] else 0.0

    m0 = gaussian_moment(ext, cov)
    m1 = 0.0
    for bs in itertools.product(range(N), repeat=4):
        for j1, j2 in itertools.product(range(n), repeat=2):
            vert = [(j1, bs[0]), (j1, bs[1]), (j2, bs[2]), (j2, bs[3])]
            m1 += v[bs] * (gaussian_moment(vert + list(ext), cov) - gaussian_moment(vert, cov) * m0) / 8
    return m0, m1


@pytest.mark.parametrize("n", [1, 2, 3])
def test_ch4_brute_force_wick(n):
    N = 2
    t = random_tensors(N, seed=30 + n)
    gmat, v = t[Propagator], t[QuarticCoupling]
    two = perturbative_moment(CH4, list(zip(I[:2], A[:2])))
    four = connected_correlator(CH4, list(zip(I, A)))
    rng = np.random.default_rng(n)
    for _ in range(3):
        a = tuple(int(x) for x in rng.integers(0, N, size=4))
        ii = tuple(int(x) for x in rng.integers(0, n, size=4))
        # two-point
        m0, m1 = brute_ch4_moment_orders([(ii[0], a[0]), (ii[1], a[1])], n, gmat, v)
        s = {**dict(zip(A, a)), **dict(zip(I, ii)), N_SYM: n}
        assert evaluate(two, list(range(N)), t, s) == pytest.approx(m0 + m1, rel=1e-12, abs=1e-13)
        # connected four-point at first order: [E4]_1 - sum over 3 pairings ([E2]_0[E2]_1 + [E2]_1[E2]_0)
        ext = list(zip(ii, a))
        c1 = brute_ch4_moment_orders(ext, n, gmat, v)[1]
        for (p, q), (r, s_) in [((0, 1), (2, 3)), ((0, 2), (1, 3)), ((0, 3), (1, 2))]:
            x0, x1 = brute_ch4_moment_orders([ext[p], ext[q]], n, gmat, v)
            y0, y1 = brute_ch4_moment_orders([ext[r], ext[s_]], n, gmat, v)
            c1 -= x0 * y1 + x1 * y0
        assert evaluate(four, list(range(N)), t, s) == pytest.approx(c1, rel=1e-12, abs=1e-13)


def test_ch1_brute_force_wick():
    N = 2
    t = random_tensors(N, seed=7)
    K, V = t[Kernel], t[SymmetricQuarticCoupling]

    def cov(x, y):
        return K[x, y]

    eps = 0.37
    for mus in [(0, 1), (1, 1)]:
        m0 = gaussian_moment(list(mus), cov)
        m1 = sum(V[r] * (gaussian_moment(list(r) + list(mus), cov) - gaussian_moment(list(r), cov) * m0)
                 for r in itertools.product(range(N), repeat=4))
        expr = perturbative_moment(CH1, MU[:2])
        got = evaluate(expr, [0, 1], t, {EPS: eps, MU[0]: mus[0], MU[1]: mus[1]})
        assert got == pytest.approx(m0 - eps / 24 * m1, rel=1e-12)


# --------------------------------------------------------------------------------------------
# (c) measured: quadrature of the actual density


def _quad(f):
    val, _ = integrate.quad(f, -np.inf, np.inf, epsabs=0.0, epsrel=1e-13, limit=200)
    return val


def ch1_exact(lam: float) -> tuple[float, float, float]:
    """Z/sqrt(2 pi), E[z^2], kappa_4 for S = z^2/2 + lam z^4/24 (N = 1, K = 1)."""
    w = lambda z, p: z**p * np.exp(-z * z / 2 - lam * z**4 / 24)  # noqa: E731
    z0 = _quad(lambda z: w(z, 0))
    m2 = _quad(lambda z: w(z, 2)) / z0
    m4 = _quad(lambda z: w(z, 4)) / z0
    return z0 / np.sqrt(2 * np.pi), m2, m4 - 3 * m2**2


def _slope(lams, res):
    return np.polyfit(np.log(lams), np.log(np.abs(res)), 1)[0]


def test_ch1_quadrature_spec_2_5():
    z, m2, k4 = ch1_exact(0.01)
    assert z == pytest.approx(0.9987589917, abs=2e-10)
    assert m2 == pytest.approx(0.9950653282, abs=2e-10)
    assert k4 == pytest.approx(-0.0096619452, abs=2e-10)
    # first-order coefficients from the derived expressions (K = V = 1, one sample)
    t = {Kernel: np.ones((1, 1)), SymmetricQuarticCoupling: np.ones((1,) * 4)}
    at0 = {MU[k]: 0 for k in range(4)}
    zc = sp.Poly(expand_sample_sums(partition_function(CH1), [0]).xreplace(
        {Kernel(0, 0): 1, SymmetricQuarticCoupling(0, 0, 0, 0): 1}), EPS).all_coeffs()[0]
    c2 = evaluate(sp.diff(perturbative_moment(CH1, MU[:2]), EPS), [0], t, at0)
    c4 = evaluate(sp.diff(connected_correlator(CH1, MU), EPS), [0], t, at0)
    assert (float(zc), c2, c4) == (-0.125, -0.5, -1.0)
    lams = np.array([0.02, 0.01, 0.005, 0.0025])
    ex = np.array([ch1_exact(x) for x in lams])
    assert (ex[1:, 1] - 1) / lams[1:] == pytest.approx(c2, abs=0.02)
    assert ex[-1, 2] / lams[-1] == pytest.approx(c4, abs=0.01)
    _, m2, k4 = ch1_exact(0.001)  # PDLT (1.71), second coupling value
    assert ((m2 - 1) / 0.001, k4 / 0.001) == pytest.approx((-0.49933, -0.99651), abs=1e-5)
    for col, c, base in [(0, float(zc), 1.0), (1, c2, 1.0), (2, c4, 0.0)]:
        res = ex[:, col] - (base + c * lams)
        assert abs(_slope(lams, res) - 2.0) < 0.3


def test_ch1_second_order_residual_is_cubic():
    expr = perturbative_moment(CH1, MU[:2], order=2)
    val = expand_sample_sums(expr, [0]).xreplace({MU[0]: 0, MU[1]: 0}).xreplace(
        {Kernel(0, 0): 1, SymmetricQuarticCoupling(0, 0, 0, 0): 1})
    poly = sp.Poly(sp.expand(val), EPS)
    assert poly.all_coeffs() == [sp.Rational(2, 3), sp.Rational(-1, 2), 1]
    lams = np.array([0.04, 0.02, 0.01, 0.005])
    res = [ch1_exact(x)[1] - float(poly.eval(x)) for x in lams]
    assert abs(_slope(lams, res) - 3.0) < 0.3


def test_ch1_second_order_kappa4_residual_is_cubic():
    expr = connected_correlator(CH1, MU, order=2)
    val = expand_sample_sums(expr, [0]).xreplace({m: 0 for m in MU}).xreplace(
        {Kernel(0, 0): 1, SymmetricQuarticCoupling(0, 0, 0, 0): 1})
    poly = sp.Poly(sp.expand(val), EPS)
    assert poly.all_coeffs()[1:] == [-1, 0]
    lams = np.array([0.04, 0.02, 0.01, 0.005])
    res = [ch1_exact(x)[2] - float(poly.eval(x)) for x in lams]
    assert abs(_slope(lams, res) - 3.0) < 0.3


def ch4_exact(v: float, n_neurons: int, gval: float = 1.0) -> tuple[float, float]:
    """E[z_1^2] and E[z_1^2 z_2^2] - E[z_1^2]E[z_2^2] for (4.44) with one sample, by radial quadrature."""
    # S = g r^2/2 - v r^4/8 with r^2 = sum_i z_i^2; measure r^(n-1) dr
    def moment(p):
        f = lambda r: r ** (n_neurons - 1 + p) * np.exp(-gval * r * r / 2 + v * r**4 / 8)  # noqa: E731
        val, _ = integrate.quad(f, 0, np.inf, epsabs=0.0, epsrel=1e-13, limit=200)
        return val

    z = moment(0)
    r2, r4 = moment(2) / z, moment(4) / z
    m2 = r2 / n_neurons
    if n_neurons == 1:
        return m2, np.nan
    # E[z1^2 z2^2] = E[r^4] / (n (n + 2)) for a rotation-invariant density
    return m2, r4 / (n_neurons * (n_neurons + 2)) - m2**2


@pytest.mark.parametrize("n_neurons", [1, 2])
def test_ch4_quadrature(n_neurons):
    gval = 1.25  # quadratic coupling g^{aa}; the propagator is 1/g
    t = {Propagator: np.full((1, 1), 1 / gval), QuarticCoupling: np.ones((1,) * 4)}
    two = perturbative_moment(CH4, [(I[0], A[0]), (I[1], A[1])])
    four = connected_correlator(CH4, list(zip(I, A)))
    s2 = {A[0]: 0, A[1]: 0, I[0]: 0, I[1]: 0, N_SYM: n_neurons}
    s4 = {**{a: 0 for a in A}, I[0]: 0, I[1]: 0, I[2]: 1, I[3]: 1, N_SYM: n_neurons}
    c0 = 1 / gval
    c2 = evaluate(two, [0], t, s2) - c0  # coefficient of v (v = 1 in t)
    assert c2 == pytest.approx((n_neurons + 2) / (2 * gval**3), rel=1e-12)  # PDLT (4.47)–(4.48)
    c4 = evaluate(four, [0], t, s4)
    assert c4 == pytest.approx(1 / gval**4, rel=1e-12)  # PDLT (4.47)–(4.48)
    vs = -np.array([0.02, 0.01, 0.005, 0.0025])  # v < 0: normalizable
    ex = np.array([ch4_exact(v, n_neurons, gval) for v in vs])
    res2 = ex[:, 0] - (c0 + c2 * vs)
    assert (ex[-1, 0] - c0) / vs[-1] == pytest.approx(c2, rel=0.02)
    assert abs(_slope(-vs, res2) - 2.0) < 0.3
    if n_neurons == 2:
        res4 = ex[:, 1] - c4 * vs
        assert ex[-1, 1] / vs[-1] == pytest.approx(c4, rel=0.03)
        assert abs(_slope(-vs, res4) - 2.0) < 0.3


def test_classify_and_order_counts():
    # order 2, two-point, ch1: no vacuum components anywhere in the moment
    ds = diagrams(CH1, MU[:2], order=2, kinds=("connected", "disconnected"))
    assert all(d.kind != "vacuum" for d in ds)
    ext = {("x", 0), ("x", 1)}
    assert all(classify_diagram(d.graph, ext) == d.kind for d in ds)
    # multiplicities at order 2 add up to the non-vacuum pairings of 10 slots
    total = sum(d.multiplicity for d in diagrams(CH1, MU[:2], order=2, exact_order=True))
    assert total == factorial(10) // (2**5 * factorial(5))
