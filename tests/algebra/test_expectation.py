"""Tests of Gaussian-expectation atoms: Wick, Stein, Price, doit, numeric factor specs.

Tolerance classes: exact symbolic (``sp.expand(a - b) == 0``) for identities; deterministic
numerics (rtol 1e-9) against an independent tensor-product Gauss–Hermite rule written here, and
against ``effth.numerics.gaussian_expectation``.
"""

from __future__ import annotations

import itertools
import pickle

import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from effth.activations import Z, get_activation
from effth.algebra.expectation import (
    ActivationFactor,
    GaussianExpectation,
    GaussianVariable,
    atoms_of,
    expect,
    sigma,
    stein,
    wick,
    z,
)
from effth.algebra.indices import alpha, ell
from effth.algebra.tensors import Kernel, KernelMatrix, Metric
from effth.errors import DomainError, NotDerivedError

KM = KernelMatrix(Kernel, ell)
K0 = KernelMatrix(Kernel)  # layer-less, chapter-1 style
# a polynomial σ with exact rational coefficients (the 'polynomial' family stores floats)
CUBIC = get_activation(sp.Rational(1, 5) + Z + sp.Rational(3, 10) * Z**3)

SPEC_K = np.array([[2.0, 1.0, 0.0], [1.0, 3.0, 1.0], [0.0, 1.0, 1.0]])  # Wick, PDLT (1.45)


# ---------------------------------------------------------------------------------------------
# independent numerics: tensor-product Gauss–Hermite (probabilists') with a Cholesky factor
# ---------------------------------------------------------------------------------------------
def gh_expect(fn, K, deg=40):
    """E[fn(z_0, ..., z_{k-1})] for z ~ N(0, K), K positive definite (k <= 3)."""
    x, w = np.polynomial.hermite_e.hermegauss(deg)
    w = w / w.sum()
    k = K.shape[0]
    L = np.linalg.cholesky(K)
    grids = np.meshgrid(*([x] * k), indexing="ij")
    u = np.stack([g.ravel() for g in grids])  # (k, deg^k)
    ww = np.prod(np.meshgrid(*([w] * k), indexing="ij"), axis=0).ravel()
    zz = L @ u
    return float(np.sum(ww * fn(*zz)))


def numeric_value(expr, K, act, samples):
    """Evaluate a combination of atoms and kernel components at a numeric K with gh_expect."""
    samples = list(samples)
    pos = {s: i for i, s in enumerate(samples)}
    d = {c: K[pos[c.indices[0]], pos[c.indices[1]]] for c in expr.atoms(Kernel)
         if not isinstance(c, GaussianExpectation)}
    vals = {}
    for a in atoms_of(expr):
        labs, factors = a.to_numeric()
        idx = [pos[s] for s in labs]
        sub = K[np.ix_(idx, idx)]

        def fn(*zs, factors=factors):
            out = np.ones_like(zs[0])
            for slot, kind, o in factors:
                out = out * (act.numpy(o)(zs[slot]) if kind == "sigma" else zs[slot] ** o)
            return out

        vals[a] = sp.Float(gh_expect(fn, sub), 17)
    rest = expr.xreplace(vals)
    return float(rest.xreplace(d))


def random_psd(rng, n):
    A = rng.standard_normal((n, n))
    return A @ A.T / n + 0.3 * np.eye(n)


# ---------------------------------------------------------------------------------------------
# construction, variables, factors
# ---------------------------------------------------------------------------------------------
def test_construction_invariants():
    a1, a2 = alpha(1), alpha(2)
    e = GaussianExpectation(sigma(a2) * sigma(a1), KM)
    assert e.func(*e.args) == e
    assert e == GaussianExpectation(sigma(a1) * sigma(a2), KM)
    assert e.samples == (a1, a2)
    assert e.kernel == KM and e.integrand == sigma(a1) * sigma(a2)
    assert e.free_symbols == {a1, a2, ell}
    assert GaussianExpectation(3, KM) == 3  # <c> = c
    assert GaussianExpectation(Kernel(1, 2, ell), KM) == Kernel(1, 2, ell)
    with pytest.raises(DomainError):
        GaussianExpectation(sigma(1), Kernel(1, 1))
    with pytest.raises(DomainError):
        sigma(1, -1)
    assert pickle.loads(pickle.dumps(e)) == e  # round trip
    # substitution keeps the derived component tuple consistent (coinciding labels, numbers)
    assert e.subs(a2, a1) == GaussianExpectation(sigma(a1) ** 2, KM)
    assert e.subs(Kernel(a1, a2, ell), sp.Rational(1, 2)) == e
    assert e.subs(ell, 3) == GaussianExpectation(sigma(a1) * sigma(a2), KernelMatrix(Kernel, 3))


def test_derivatives_of_factors():
    s = sigma(1)
    assert sp.diff(s, z(1)) == sigma(1, 1)
    assert sp.diff(s, z(1), 4) == sigma(1, 4)
    assert sp.diff(s, z(2)) == 0
    assert sp.diff(z(1) ** 3, z(1)) == 3 * z(1) ** 2
    assert sp.diff(z(1), z(2)) == 0
    assert sp.diff(s * z(1), z(1)) == sigma(1, 1) * z(1) + s
    assert isinstance(sigma(1, name="phi"), ActivationFactor)
    assert sp.diff(sigma(1, name="phi"), z(1)) == sigma(1, 1, name="phi")
    assert isinstance(z(1), GaussianVariable)


def test_factors_spec():
    e = GaussianExpectation(sigma(5, 1) * sigma(3) ** 2 * z(5) ** 3 * z(7), K0)
    samples, factors = e.to_numeric()
    assert samples == (3, 5, 7)
    assert factors == ((0, "sigma", 0), (0, "sigma", 0), (1, "sigma", 1), (1, "z", 3), (2, "z", 1))
    assert e.factors() == factors
    with pytest.raises(NotDerivedError):
        GaussianExpectation(sigma(1) * (z(1) + 1), K0).to_numeric()
    with pytest.raises(NotDerivedError):
        GaussianExpectation(sigma(1) * sigma(2, name="phi"), K0).to_numeric()


def test_expand_linearity():
    e = GaussianExpectation(3 * sigma(1) * (z(2) ** 2 - Kernel(2, 2)) + Kernel(1, 2) * sigma(1), K0)
    got = e.expand()
    want = (3 * GaussianExpectation(sigma(1) * z(2) ** 2, K0)
            + (Kernel(1, 2) - 3 * Kernel(2, 2)) * GaussianExpectation(sigma(1), K0))
    assert sp.expand(got - want) == 0
    assert expect(3 * sigma(1) * (z(2) ** 2 - Kernel(2, 2)) + Kernel(1, 2) * sigma(1), K0) == got
    # sympy.expand linearizes atoms too (via _eval_expand_mul)
    assert sp.expand(2 * e) == sp.expand(2 * got)
    # non-monomial random factors stay inside
    assert expect(sp.exp(z(1)) * 2, K0) == 2 * GaussianExpectation(sp.exp(z(1)), K0)


# ---------------------------------------------------------------------------------------------
# Wick
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("exps", [(6,), (4, 2), (3, 3, 2), (1, 1, 1, 1, 2), (5, 3), (2, 2, 2, 2)])
def test_isserlis_multiplicity_form_equals_pairings(exps):
    """The multiplicity form (one term per distinct monomial) agrees with explicit pairings."""
    from effth.algebra.wick.isserlis import isserlis_terms
    from effth.algebra.wick.pairings import enumerate_pairings

    slots = [i for i, p in enumerate(exps) for _ in range(p)]
    by_pairing = sp.Add(*[sp.Mul(*[Kernel(slots[a], slots[b]) for a, b in pairing])
                          for pairing in enumerate_pairings(range(len(slots)))])
    by_mult = sp.Add(*[c * sp.Mul(*[Kernel(i, j) ** m for i, j, m in mult])
                       for c, mult in isserlis_terms(exps)])
    assert sp.expand(by_pairing - by_mult) == 0
    assert wick(GaussianExpectation(sp.Mul(*[z(i) ** p for i, p in enumerate(exps)]), K0)) == by_mult


def test_wick_many_slots_is_fast():
    e = GaussianExpectation(z(0) ** 9 * z(1) ** 9 * z(2) ** 6, K0)  # 23!! ~ 3e11 pairings
    w = wick(e)
    assert w.subs({Kernel(0, 1): 0, Kernel(0, 2): 0, Kernel(1, 2): 0}) == 0  # odd exponents
    assert len(w.args) > 10


def test_wick_known_values():
    K = Kernel
    assert wick(GaussianExpectation(z(1) ** 2 * z(2) ** 2, K0)) == K(1, 1) * K(2, 2) + 2 * K(1, 2) ** 2
    assert wick(GaussianExpectation(z(1) ** 2 * z(2) * z(3), K0)) == K(1, 1) * K(2, 3) + 2 * K(1, 2) * K(1, 3)
    assert wick(GaussianExpectation(z(1) * z(2) * z(3) ** 2, K0)) == K(1, 2) * K(3, 3) + 2 * K(1, 3) * K(2, 3)
    assert wick(GaussianExpectation(z(1) ** 6, K0)) == 15 * K(1, 1) ** 3
    assert wick(GaussianExpectation(z(1) ** 3 * z(2), K0)) == 3 * K(1, 1) * K(1, 2)
    assert wick(GaussianExpectation(z(1) ** 5, K0)) == 0
    # σ atoms are left alone
    assert wick(GaussianExpectation(sigma(1) * z(2) ** 2, K0)) == GaussianExpectation(sigma(1) * z(2) ** 2, K0)


@pytest.mark.parametrize(
    ("integrand", "value"),
    [(z(1) ** 2 * z(2) ** 2, 8), (z(1) ** 2 * z(2) * z(3), 2), (z(1) * z(2) * z(3) ** 2, 1)],
)
def test_wick_spec_values(integrand, value):
    """Wick (PDLT (1.44)–(1.45)) by hand: K = [[2,1,0],[1,3,1],[0,1,1]] gives 8, 2, 1."""
    w = GaussianExpectation(integrand, K0).wick()
    sub = {Kernel(i + 1, j + 1): int(SPEC_K[i, j]) for i in range(3) for j in range(3)}
    assert w.xreplace(sub) == value


@settings(max_examples=25, deadline=None, derandomize=True, database=None)
@given(st.lists(st.integers(0, 3), min_size=1, max_size=3), st.integers(0, 10**6))
def test_wick_matches_quadrature(exponents, seed):
    """Wick sum vs independent Gauss–Hermite quadrature on a random PSD kernel."""
    k = len(exponents)
    K = random_psd(np.random.default_rng(seed), k)
    integrand = sp.Mul(*[z(i) ** p for i, p in enumerate(exponents)])
    w = wick(GaussianExpectation(integrand, K0))
    sub = {Kernel(i, j): K[i, j] for i in range(k) for j in range(k)}
    got = float(sp.sympify(w).xreplace(sub))

    def fn(*zs):
        return np.prod([zs[i] ** p for i, p in enumerate(exponents)], axis=0)

    assert got == pytest.approx(gh_expect(fn, K), rel=1e-9, abs=1e-12)


# ---------------------------------------------------------------------------------------------
# Stein
# ---------------------------------------------------------------------------------------------
def test_stein_simple():
    assert GaussianExpectation(z(1) * sigma(2), K0).stein() == Kernel(1, 2) * GaussianExpectation(sigma(2, 1), K0)
    assert GaussianExpectation(z(1) * z(2), K0).stein() == Kernel(1, 2)
    assert GaussianExpectation(z(1) * sigma(1), K0).stein() == Kernel(1, 1) * GaussianExpectation(sigma(1, 1), K0)
    got = GaussianExpectation(z(1) * sigma(1) * sigma(2), K0).stein()
    want = (Kernel(1, 1) * GaussianExpectation(sigma(1, 1) * sigma(2), K0)
            + Kernel(1, 2) * GaussianExpectation(sigma(1) * sigma(2, 1), K0))
    assert sp.expand(got - want) == 0
    assert GaussianExpectation(z(3), K0).stein() == 0


def test_stein_spec_4_8_identity():
    r"""<F (z_a z_b - K_ab)> = sum_{c,d} K_ac K_bd <d_c d_d F> for F = σ_1 σ_2 (Stein's lemma, Gaussian integration by parts)."""
    a, b = 1, 2
    F = sigma(1) * sigma(2)
    lhs = stein(expect(F * (z(a) * z(b) - Kernel(a, b)), K0))
    rhs = sum(Kernel(a, c) * Kernel(b, d) * expect(sp.diff(F, z(c), z(d)), K0)
              for c in (1, 2) for d in (1, 2))
    assert sp.expand(lhs - rhs) == 0


@settings(max_examples=10, deadline=None, derandomize=True, database=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2)), min_size=1, max_size=2))
def test_stein_equals_wick_and_polynomial_doit(parts):
    """Stein's form is exact: for z-monomials it equals Wick; for a polynomial σ, doit agrees."""
    integrand = sp.Mul(*[z(i) ** p for i, (p, _) in enumerate(parts)])
    e = GaussianExpectation(integrand, K0)
    assert sp.expand(stein(e) - wick(e)) == 0
    with_sigma = GaussianExpectation(integrand * sp.Mul(*[sigma(i) ** q for i, (_, q) in enumerate(parts)]), K0)
    assert sp.expand(stein(with_sigma).doit(activation=CUBIC) - with_sigma.doit(activation=CUBIC)) == 0


# ---------------------------------------------------------------------------------------------
# Price's theorem
# ---------------------------------------------------------------------------------------------
def test_price_symbolic():
    a1, a2, a3 = alpha(1), alpha(2), alpha(3)
    e = GaussianExpectation(sigma(a1) * sigma(a2), KM)
    assert sp.diff(e, Kernel(a1, a2, ell)) == GaussianExpectation(sigma(a1, 1) * sigma(a2, 1), KM)
    assert sp.diff(e, Kernel(a1, a1, ell)) == GaussianExpectation(sigma(a1, 2) * sigma(a2), KM) / 2
    assert sp.diff(e, Kernel(a1, a2, ell + 1)) == 0
    assert sp.diff(e, Metric(a1, a2, ell)) == 0
    assert sp.diff(e, Kernel(a1, a3, ell)) == 0
    # chain/product rule through ordinary sympy expressions
    f = Kernel(a1, a2, ell) * e
    assert sp.diff(f, Kernel(a1, a2, ell)) == e + Kernel(a1, a2, ell) * sp.diff(e, Kernel(a1, a2, ell))
    # explicit dependence of the integrand is included
    g = GaussianExpectation(sigma(a1) * (z(a2) ** 2 - Kernel(a2, a2, ell)), KM)
    want = -GaussianExpectation(sigma(a1), KM) + GaussianExpectation(sigma(a1) * z(a2) ** 2, KM).diff(
        Kernel(a2, a2, ell))
    assert sp.expand(sp.diff(g, Kernel(a2, a2, ell)) - want) == 0


def test_price_is_exact_for_polynomial_activation():
    """d/dK_ab of doit(atom) equals doit of the Price derivative, exactly."""
    e = GaussianExpectation(sigma(0) ** 2 * sigma(1) * z(1), K0)
    for comp in (Kernel(0, 0), Kernel(0, 1), Kernel(1, 1)):
        lhs = sp.diff(e.doit(activation=CUBIC), comp)
        rhs = sp.diff(e, comp).doit(activation=CUBIC)
        assert sp.expand(lhs - rhs) == 0, comp


def test_derivative_identity_spec_5_1():
    r"""<σ²(z²−K)>_K = 2K² ∂_K <σ²>_K (PDLT (5.10), (5.50)), symbolically via stein and diff."""
    k = Kernel(0, 0, ell)
    lhs = stein(expect(sigma(0) ** 2 * (z(0) ** 2 - k), KM))
    rhs = 2 * k**2 * sp.diff(GaussianExpectation(sigma(0) ** 2, KM), k)
    assert sp.expand(lhs - rhs) == 0
    # and the χ_∥ form of PDLT (5.10)/(5.50): ∂_K<σ²> = <σ'² + σσ''>
    assert sp.expand(sp.diff(GaussianExpectation(sigma(0) ** 2, KM), k)
                     - expect(sigma(0, 1) ** 2 + sigma(0) * sigma(0, 2), KM)) == 0


# ---------------------------------------------------------------------------------------------
# doit
# ---------------------------------------------------------------------------------------------
def test_doit_polynomial_exact():
    lin = get_activation("linear")
    e = GaussianExpectation(sigma(1) * sigma(2), K0)
    assert e.doit(activation=lin) == Kernel(1, 2)
    assert e.doit(activation="linear") == Kernel(1, 2)
    assert GaussianExpectation(sigma(1) ** 4, K0).doit(activation=lin) == 3 * Kernel(1, 1) ** 2
    # non-polynomial activation: σ atoms stay, z-only parts reduce
    t = expect(sigma(1) + z(1) ** 2, K0).doit(activation="tanh")
    assert t == GaussianExpectation(sigma(1), K0) + Kernel(1, 1)
    # doit propagates through sums (sympy calls doit(**hints) on the arguments)
    assert (2 * e + 1).doit(activation="linear") == 2 * Kernel(1, 2) + 1


@settings(max_examples=15, deadline=None, derandomize=True, database=None)
@given(st.lists(st.integers(0, 2), min_size=1, max_size=2), st.integers(0, 2), st.integers(0, 10**6))
def test_doit_polynomial_vs_quadrature(orders, zpow, seed):
    """Exact doit for σ = 1/5 + z + 3/10 z³ vs Gauss–Hermite on random PSD kernels."""
    k = len(orders)
    K = random_psd(np.random.default_rng(seed), k)
    integrand = sp.Mul(*[sigma(i, o) for i, o in enumerate(orders)]) * z(0) ** zpow
    e = GaussianExpectation(integrand, K0)
    exact = sp.sympify(e).doit(activation=CUBIC)
    sub = {Kernel(i, j): K[i, j] for i in range(k) for j in range(k)}
    assert float(sp.sympify(exact).xreplace(sub)) == pytest.approx(
        numeric_value(e, K, CUBIC, range(k)), rel=1e-9, abs=1e-12)


# ---------------------------------------------------------------------------------------------
# against effth.numerics (the other corner)
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def numerics():
    import effth.numerics

    return effth.numerics


def _eval_with_numerics(numerics, expr, K, act):
    d = {c: K[int(c.indices[0]), int(c.indices[1])] for c in sp.sympify(expr).atoms(Kernel)}
    vals = {}
    for a in atoms_of(expr):
        labs, factors = a.to_numeric()
        idx = [int(s) for s in labs]
        vals[a] = sp.Float(float(numerics.gaussian_expectation(factors, K[np.ix_(idx, idx)], act, rtol=1e-10)), 17)
    # atoms first (their .args contain kernel components)
    return float(sp.sympify(expr).xreplace(vals).xreplace(d))


@pytest.mark.parametrize("name", ["tanh", "erf", "relu", "perceptron"])
def test_stein_vs_numerics(numerics, name):
    """Stein holds for kinked σ in the distributional sense (numerics add the delta parts)."""
    act = get_activation(name)
    rng = np.random.default_rng(7)
    if act.is_smooth:
        integrands = (z(0) * z(1) * sigma(0) * sigma(1), z(0) ** 2 * sigma(1) ** 2,
                      (z(0) * z(1) - Kernel(0, 1)) * (z(1) ** 2 - Kernel(1, 1)) * sigma(0) * sigma(1))
    else:  # the numerics reduce delta and delta' exactly (one per sample)
        integrands = (z(0) * z(1) * sigma(0) * sigma(1), z(0) * sigma(0) * sigma(1),
                      (z(1) ** 2 - Kernel(1, 1)) * sigma(0) * sigma(1))
    for integrand in integrands:
        K = random_psd(rng, 2)
        e = expect(integrand, K0)
        s = stein(e)
        assert all(kind == 'sigma' for a in atoms_of(s) for _, kind, _ in a.factors())
        assert _eval_with_numerics(numerics, s, K, act) == pytest.approx(
            _eval_with_numerics(numerics, e, K, act), rel=1e-8, abs=1e-12)


@pytest.mark.parametrize("name", ["tanh", "erf"])
def test_price_vs_finite_differences(numerics, name):
    act = get_activation(name)
    K = np.array([[1.3, 0.4], [0.4, 0.8]])
    e = GaussianExpectation(sigma(0) * sigma(1) ** 2, K0)
    h = 1e-5
    for (i, j) in [(0, 0), (0, 1), (1, 1)]:
        dK = np.zeros((2, 2))
        dK[i, j] = dK[j, i] = h  # a symmetric component is one variable
        fd = (_eval_with_numerics(numerics, e, K + dK, act)
              - _eval_with_numerics(numerics, e, K - dK, act)) / (2 * h)
        sym = _eval_with_numerics(numerics, sp.diff(e, Kernel(i, j)), K, act)
        assert sym == pytest.approx(fd, rel=1e-6, abs=1e-9)


def test_polynomial_doit_vs_numerics(numerics):
    rng = np.random.default_rng(3)
    K = random_psd(rng, 3)
    for integrand in (sigma(0) * sigma(1) * sigma(2) ** 2, sigma(0, 1) * sigma(1) * z(2) ** 2):
        e = GaussianExpectation(integrand, K0)
        exact = float(sp.sympify(e.doit(activation=CUBIC)).xreplace(
            {Kernel(i, j): K[i, j] for i, j in itertools.product(range(3), repeat=2)}))
        assert exact == pytest.approx(_eval_with_numerics(numerics, e, K, CUBIC), rel=1e-10)
