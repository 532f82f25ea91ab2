"""Tests of effth.pdlt.criticality (PDLT §5.2–§5.4, with the corrected (5.81), (5.143)
and footnote 21).

Three corners: published (book numbers and independent high-precision reference values), derived (exact Taylor-series results),
measured (iterating the single-input recursions to large depth and fitting exponents).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import sympy as sp

from effth.errors import ConvergenceError, DomainError, UnknownActivationError
from effth.pdlt.criticality import (
    CLASSES, NonCriticalWarning, check_critical, chi_parallel, chi_perp, find_criticality, fit_power_law,
    iterate_single_input, j_function, kernel_map, measure_asymptotics, taylor_expansions)

z = sp.Symbol("z")


def R(act, K):
    return float(chi_perp(act, K, c_w=1.0) / chi_parallel(act, K, c_w=1.0))


# ================================================================ published corner
@pytest.mark.parametrize("name, c_w, slope", [("relu", 2, 5), ("linear", 1, 2), ("abs", 1, 2)])
def test_scale_invariant_published(name, c_w, slope):
    c = find_criticality(name)
    assert c.universality_class == "scale-invariant"
    assert c.c_b == 0 and c.c_w == c_w and c.K_star is None
    assert c.asymptotics.slope == slope and c.asymptotics.p0 == 0 and c.asymptotics.pV == -1


@pytest.mark.parametrize("a_minus, c_w, slope", [(0.01, 1.999800, 4.998800), (0.1, 1.980198, 4.882364),
                                                 (0.2, 1.923077, 4.556213)])
def test_leaky_relu_table(a_minus, c_w, slope):      # PDLT (5.61), (5.114), (5.130) for a_- = slope
    from effth.activations import get_activation
    c = find_criticality(get_activation("leaky_relu", slope=a_minus))
    assert float(c.c_w) == pytest.approx(c_w, abs=1e-6)
    assert float(c.asymptotics.slope) == pytest.approx(slope, abs=1e-6)


def test_relu_vertex_exact():
    fl = iterate_single_input("relu", c_w=2.0, c_b=0.0, K1=2.0, depth=8)          # PDLT (5.120): V = 20(l-1)
    np.testing.assert_allclose(fl.V, 20.0 * np.arange(8), rtol=1e-14)
    np.testing.assert_allclose(fl.K, 2.0)
    np.testing.assert_allclose(fl.G1, 0.0)


@pytest.mark.parametrize("name, c_w, a1, a2, b1, kc, vc, g1b, g1r", [
    ("tanh", 1, -2, sp.Rational(17, 3), -2, sp.Rational(1, 2), sp.Rational(1, 6), -sp.Rational(1, 6),
     sp.Rational(89, 72)),
    ("sin", 1, -1, sp.Rational(2, 3), -1, 1, sp.Rational(2, 3), -sp.Rational(1, 3), sp.Rational(20, 9)),
])
def test_kstar0_published(name, c_w, a1, a2, b1, kc, vc, g1b, g1r):
    c = find_criticality(name)
    assert c.universality_class == "K*=0" and c.c_b == 0 and c.c_w == c_w and c.K_star == 0
    co, a = c.coefficients, c.asymptotics
    assert (co["a1"], co["a2"], co["b1"]) == (a1, a2, b1)
    assert (a.p0, a.pV, a.slope, a.p_parallel, a.p_perp) == (1, 1, sp.Rational(2, 3), 2, 1)
    assert (a.K_coeff, a.V_coeff, a.G1_bare_limit) == (kc, vc, g1b)
    assert a.G1_ren_coeff == g1r                                   # PDLT (5.143) as printed has 13/12 (tanh); corrected
    assert a.c_w1_renormalization == sp.Rational(2, 3) * c_w


def test_erf_kstar0():
    c = find_criticality("erf")
    assert c.universality_class == "K*=0" and c.c_w == sp.pi / 4
    assert c.coefficients["a1"] == -2 and c.asymptotics.slope == sp.Rational(2, 3)


def test_tanh_reference_helpers():
    K = np.array([0.1, 0.5, 1.0])                                 # reference values (mpmath, 30 digits)
    np.testing.assert_allclose(kernel_map("tanh", c_w=1, c_b=0)(K), [0.0842139284, 0.2736763079, 0.3942944904], atol=1e-10)
    np.testing.assert_allclose(chi_parallel("tanh", K, c_w=1), [0.7160490621, 0.3246299960, 0.1817976881], atol=1e-9)
    np.testing.assert_allclose(chi_perp("tanh", K, c_w=1), [0.8492070684, 0.5924257934, 0.4644029024], atol=1e-9)
    np.testing.assert_allclose(j_function("tanh", K, c_w=1), [-0.0814619205, -0.4729098141, -0.6851737935], atol=1e-9)


def test_sin_closed_forms():
    K = np.array([0.05, 0.7, 3.0])
    np.testing.assert_allclose(chi_parallel("sin", K, c_w=1), np.exp(-2 * K), rtol=1e-10)
    np.testing.assert_allclose(chi_perp("sin", K, c_w=1), (1 + np.exp(-2 * K)) / 2, rtol=1e-10)
    np.testing.assert_allclose(j_function("sin", K, c_w=1), -8 * K ** 2 * np.exp(-2 * K), rtol=1e-8)


@pytest.mark.parametrize("name, Ks, Cb, Cw, at1, other", [
    ("swish", 14.320173618, 0.5551431707, 1.988004678, 2.849792189e-6, 14.59310499),
    ("gelu", (3 + math.sqrt(17)) / 2, 0.1729223908, 1.983058257, -1.436264187e-4, 3.034981436),
])
def test_half_stable_published(name, Ks, Cb, Cw, at1, other):
    c = find_criticality(name)                                    # PDLT §5.3.4 (the book quotes -a1~)
    assert c.universality_class == "half-stable"
    assert c.K_star == pytest.approx(Ks, rel=1e-9)
    assert float(c.c_b) == pytest.approx(Cb, rel=1e-8) and float(c.c_w) == pytest.approx(Cw, rel=1e-8)
    assert c.coefficients["a1_tilde"] == pytest.approx(at1, rel=1e-5)
    assert c.chi_parallel == pytest.approx(1, abs=1e-9) and c.chi_perp == pytest.approx(1, abs=1e-12)
    assert len(c.other_fixed_points) == 1 and c.other_fixed_points[0] == pytest.approx(other, rel=1e-7)
    assert ("below" in c.stability.split(",")[0]) == (at1 > 0)
    assert c.coefficients["a1"] > 0                                # K*=0 unstable (PDLT §5.3.4)


def test_half_stable_slopes():
    assert find_criticality("swish").asymptotics.slope == pytest.approx(4.9231871, abs=1e-6)
    assert find_criticality("gelu").asymptotics.slope == pytest.approx(4.9042262, abs=1e-6)


@pytest.mark.parametrize("name, K, val", [
    ("sigmoid", 0.1, 1.048877), ("sigmoid", 1.0, 1.437140), ("sigmoid", 10.0, 4.635403),
    ("softplus", 0.1, 0.598047), ("softplus", 1.0, 0.647204), ("softplus", 10.0, 0.793242),
    ("swish", 1.0, 0.90964), ("swish", 20.0, 1.00688), ("gelu", 1.0, 0.93704), ("gelu", 5.0, 1.00962)])
def test_ratio_R_published(name, K, val):
    assert R(name, K) == pytest.approx(val, abs=6e-6)


@pytest.mark.parametrize("name", ["sigmoid", "softplus", "perceptron", "cos"])
def test_no_criticality(name):
    c = find_criticality(name)
    assert c.universality_class == "none" and c.c_w is None and c.asymptotics is None and c.reason
    assert "no criticality" in c.latex()


def test_sigmoid_softplus_limits():
    assert "-4" in find_criticality("sigmoid").coefficients["K0_limit"]
    assert find_criticality("softplus").coefficients["R0"] == 1 / (1 + sp.log(2))   # corrected (5.81)
    assert R("softplus", 1e-3) == pytest.approx(float(1 / (1 + sp.log(2))), abs=5e-4)
    assert "Dirac" in find_criticality("perceptron").reason


@pytest.mark.parametrize("p", [2, 3])
def test_monomial_ratio(p):
    from effth.activations import get_activation
    act = get_activation("monomial", degree=p)
    assert R(act, 0.7) == pytest.approx(p / (2 * p - 1), rel=1e-10)   # (5.78)
    assert find_criticality(act).universality_class == "none"


# ================================================================ derived corner
def _book_coeffs(s):
    s1, s2, s3, s4, s5 = s[1:6]
    a1 = s3 / s1 + sp.Rational(3, 4) * (s2 / s1) ** 2
    a2 = s5 / s1 / 4 + sp.Rational(5, 8) * s4 * s2 / s1 ** 2 + sp.Rational(5, 12) * (s3 / s1) ** 2
    return a1, a2, s3 / s1 + (s2 / s1) ** 2


@pytest.mark.parametrize("act", ["tanh", "sin", "erf", sp.tanh(z / 2) / 2, sp.tanh(z) + sp.tanh(z) ** 2 / 2,
                                 sp.atan(z)])
def test_taylor_matches_book_formulas(act):
    c = find_criticality(act)
    s = c.coefficients["sigma"]
    a1, a2, b1 = _book_coeffs(s)                                   # (5.86)-(5.88)
    co = c.coefficients
    assert sp.simplify(co["a1"] - a1) == 0 and sp.simplify(co["b1"] - b1) == 0
    if s[2] == 0 or act != sp.tanh(z) + sp.tanh(z) ** 2 / 2:       # (5.87) assumes sigma_0 = 0 only
        assert sp.simplify(co["a2"] - a2) == 0
    ser = taylor_expansions(act, 3)
    cw = 1 / s[1] ** 2
    assert sp.simplify(cw ** 2 * ser["var"][2] - 2) == 0           # (5.122)
    assert sp.simplify(cw ** 2 * ser["var"][3] - (8 * s[3] / s[1] + 21 * (s[2] / s[1]) ** 2)) == 0
    assert sp.simplify(cw ** 2 * ser["var"][3] - (-52 * a1 + 60 * b1)) == 0


def test_non_odd_example():
    c = find_criticality(sp.tanh(z) + sp.tanh(z) ** 2 / 2)
    assert c.coefficients["a1"] == sp.Rational(-5, 4) and c.coefficients["b1"] == -1
    assert c.asymptotics.p_perp == sp.Rational(4, 5) and c.asymptotics.K_coeff == sp.Rational(4, 5)


def test_sigmoid_shifted_table():
    c = find_criticality(sp.tanh(z / 2) / 2)                       # sigmoid - 1/2
    assert c.c_w == 16 and c.coefficients["a2"] == sp.Rational(17, 48) and c.coefficients["a1"] == -sp.Rational(1, 2)


def test_corrected_581():
    ser = taylor_expansions(1 + z + z ** 2, 1)                      # PDLT (5.81) as printed has 2 sigma_0 sigma_2: 3K, not 5K
    assert ser["g"][1] == 3
    assert ser["g"][0] == 1


def test_j_small_K_series():
    K = 1e-4                                                       # (5.123): j/(8K^2) = a1 + 3 a2 K
    assert j_function("tanh", K, c_w=1) / (8 * K * K) == pytest.approx(-2 + 17 * K, abs=5e-6)


def test_half_stable_from_K0_unstable_coefficients():
    assert find_criticality("swish").coefficients["a1"] == sp.Rational(3, 4)
    assert find_criticality("gelu").coefficients["a1"] == 6 / sp.pi


def test_a1_zero_branch():
    c = find_criticality(z - z ** 5)                               # PDLT §5.3.3 fn. 19: p0 = 1/2 when a1 = 0 < -a2
    assert c.universality_class == "K*=0" and c.coefficients["a1"] == 0
    assert c.asymptotics.p0 == sp.Rational(1, 2) and c.asymptotics.K_coeff == 1 / sp.sqrt(60)


def test_latex_and_fields():
    c = find_criticality("tanh")
    s = c.latex()
    assert r"\frac{2}{3}" in s and "K^\\star=0" in s and "tanh" in s
    assert "5" in find_criticality("relu").latex()
    assert set(CLASSES) == {"scale-invariant", "K*=0", "half-stable", "none"}
    with pytest.raises(Exception):
        c.c_w = 3                                                  # frozen


# ================================================================ measured corner
# book values (PDLT (5.120), (5.130), (5.131), (5.94), (5.127)): slopes of V/(nK^2) against l/n are
# 5 (ReLU), 2 (linear, |z|), 2/3 (K*=0 class); l K -> 1/(-a1), l V -> 2/(3 a1^2) with a1 = -2
# (tanh, erf) and -1 (sin), PDLT (5.86)
@pytest.mark.parametrize("name, depth, p0, pV, slope, lK, lV", [
    ("relu", 10_000, 0, -1, 5, None, None), ("linear", 10_000, 0, -1, 2, None, None),
    ("abs", 2_000, 0, -1, 2, None, None),
    ("tanh", 10_000, 1, 1, 2 / 3, 1 / 2, 1 / 6), ("sin", 10_000, 1, 1, 2 / 3, 1, 2 / 3),
    ("erf", 10_000, 1, 1, 2 / 3, 1 / 2, 1 / 6)])
def test_measured_exponents(name, depth, p0, pV, slope, lK, lV):
    m = measure_asymptotics(name, depth)
    c = find_criticality(name).asymptotics
    assert (c.p0, c.pV) == (p0, pV) and float(c.slope) == pytest.approx(slope)
    assert m.p0 == pytest.approx(p0, abs=0.05)
    assert m.pV == pytest.approx(pV, abs=0.05)
    assert m.slope == pytest.approx(slope, abs=0.05)
    if p0 == 1:
        assert float(c.K_coeff) == pytest.approx(lK) and float(c.V_coeff) == pytest.approx(lV)
        assert m.lK == pytest.approx(lK, rel=2e-3)
        assert m.lV == pytest.approx(lV, rel=2e-3)


def test_measured_tanh_published_values():
    m = measure_asymptotics("tanh", 10_000, renormalized=True)
    assert m.lK == pytest.approx(0.500214, abs=2e-6)               # reference iteration (mpmath), l = 1e4
    assert m.lV == pytest.approx(0.166730, abs=2e-6)
    assert m.lG1 == pytest.approx(1.234520, abs=1e-5)              # corrected (5.143), reference iteration
    b = measure_asymptotics("tanh", 1_000)
    assert b.G1 == pytest.approx(-0.165816, abs=2e-6)


@pytest.mark.parametrize("name, slope", [("swish", 4.9231871), ("gelu", 4.9042262)])
def test_measured_half_stable_slope(name, slope):
    # C_W^2 Var_{K*}(sigma^2)/K*^2 from independent 30-digit quadrature (the book gives no value)
    m = measure_asymptotics(name, 100)
    assert m.slope == pytest.approx(slope, abs=0.05)


def test_measured_a1_zero_exponent():
    m = measure_asymptotics(z - z ** 5, 10_000, K1=0.1)
    assert m.p0 == pytest.approx(0.5, abs=0.05)


def test_gauss_hermite_matches_quadrature():
    a = iterate_single_input("tanh", c_w=1.0, c_b=0.0, K1=1.0, depth=30)
    b = iterate_single_input("tanh", c_w=1.0, c_b=0.0, K1=1.0, depth=30, method="quadrature")
    np.testing.assert_allclose(a.K, b.K, rtol=1e-9)
    np.testing.assert_allclose(a.V, b.V, rtol=1e-7, atol=1e-12)
    np.testing.assert_allclose(a.G1, b.G1, rtol=1e-6, atol=1e-12)


def test_half_stable_iteration_matches_reference():
    c = find_criticality("gelu")
    fl = iterate_single_input("gelu", c_w=float(c.c_w), c_b=float(c.c_b), K1=c.K_star + 1, depth=2001)
    assert fl.K[-1] == pytest.approx(4.2116, abs=2e-3)             # PDLT §5.3.4, 2000 layers (reference iteration)
    fl = iterate_single_input("gelu", c_w=float(c.c_w), c_b=float(c.c_b), K1=c.K_star - 1, depth=2001)
    assert fl.K[-1] == pytest.approx(2.7782, abs=2e-3)


@pytest.mark.slow
@pytest.mark.parametrize("name, lK, lV, lG", [("tanh", 0.500026, 0.166675, 1.235903),
                                              ("sin", 0.999961, 0.666625, 2.22170)])
def test_measured_1e5(name, lK, lV, lG):
    m = measure_asymptotics(name, 100_000, renormalized=True)
    assert m.lK == pytest.approx(lK, abs=5e-6) and m.lV == pytest.approx(lV, abs=5e-6)
    assert m.lG1 == pytest.approx(lG, abs=2e-4)
    assert m.slope == pytest.approx(2 / 3, abs=0.005)


@pytest.mark.slow
def test_erf_renormalized_G1_coefficient():
    m = measure_asymptotics("erf", 100_000, renormalized=True)
    # corrected (5.143) for odd sigma: (6 a1^2 + a2)/(3 (-a1)^3) = 43/36 with a1 = -2, a2 = 14/3
    assert find_criticality("erf").asymptotics.G1_ren_coeff == sp.Rational(43, 36)
    assert m.lG1 == pytest.approx(43 / 36, abs=1e-3)


# ================================================================ flagging / bad input
def test_check_critical_ok():
    assert check_critical("tanh", c_w=1.0, c_b=0.0).is_critical
    assert check_critical("relu", c_w=2.0, c_b=0.0).is_critical
    c = find_criticality("gelu")
    assert check_critical("gelu", c_w=float(c.c_w), c_b=float(c.c_b), tol=1e-8).is_critical


def test_check_critical_flags():
    with pytest.raises(DomainError, match="chi_par=1.1"):
        check_critical("tanh", c_w=1.1, c_b=0.0)
    with pytest.raises(DomainError, match="residual"):
        check_critical("relu", c_w=2.0, c_b=0.1)                           # semi-critical
    with pytest.warns(NonCriticalWarning, match="no critical point"):
        r = check_critical("sigmoid", c_w=16.0, c_b=0.0, action="warn")
    assert not r.is_critical
    r = check_critical("perceptron", c_w=1.0, c_b=0.0, action="return")
    assert not r.is_critical and math.isinf(r.chi_perp)
    r = check_critical("tanh", c_w=1.0, c_b=0.0, K=0.5, action="return")
    assert r.chi_parallel == pytest.approx(0.3246299960) and r.deviation > 0.5


def test_blow_up_and_vanishing_report_layer():
    with pytest.raises(ConvergenceError, match=r"blows up at layer \d+"):
        iterate_single_input("relu", c_w=2.5, c_b=0.0, K1=1.0, depth=5000)
    with pytest.raises(ConvergenceError, match=r"vanishes .* at layer \d+"):
        iterate_single_input("relu", c_w=1.0, c_b=0.0, K1=1.0, depth=5000)
    with pytest.raises(ConvergenceError, match="layer"):
        iterate_single_input("tanh", c_w=0.5, c_b=0.0, K1=1.0, depth=5000)
    with pytest.raises(ConvergenceError, match="layer"):
        iterate_single_input(z ** 3, c_w=1.0, c_b=0.0, K1=2.0, depth=100)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        fl = iterate_single_input("tanh", c_w=0.9, c_b=0.0, K1=1.0, depth=200)      # decays but stays finite
    assert np.all(np.isfinite(fl.K)) and np.all(np.isfinite(fl.V))


@pytest.mark.parametrize("call", [
    lambda: find_criticality("no_such_activation"),
    lambda: kernel_map("tanh", c_w=1.0, c_b=-1.0),
    lambda: kernel_map("tanh", c_w=0.0, c_b=0.0),
    lambda: kernel_map("tanh", c_w=float("nan"), c_b=0.0),
    lambda: kernel_map("tanh", c_w=1.0, c_b=0.0)(-0.5),
    lambda: chi_parallel("tanh", [0.1, np.inf], c_w=1.0),
    lambda: chi_parallel("perceptron", 0.0, c_w=1.0),
    lambda: iterate_single_input("tanh", c_w=1.0, c_b=0.0, K1=1.0, depth=0),
    lambda: iterate_single_input("tanh", c_w=1.0, c_b=0.0, K1=1.0, depth=2.5),
    lambda: iterate_single_input("tanh", c_w=1.0, c_b=0.0, K1=-1.0, depth=10),
    lambda: iterate_single_input("tanh", c_w=1.0, c_b=0.0, K1=1.0, depth=10, method="exact"),
    lambda: iterate_single_input("relu", c_w=1.0, c_b=0.0, K1=1.0, depth=10, method="gauss_hermite"),
    lambda: iterate_single_input("relu", c_w=1.0, c_b=0.0, K1=1.0, depth=10, method="bogus"),
    lambda: check_critical("tanh", c_w=1.0, c_b=0.0, action="explode"),
    lambda: measure_asymptotics("sigmoid", 10),
    lambda: measure_asymptotics("tanh", 100, window=(50, 200)),
    lambda: chi_perp("tanh", 0.5, c_w=-1.0),
    lambda: fit_power_law([1, 2, 3], [1, -1, 2]),
    lambda: find_criticality(sp.Integer(0) * z),
])
def test_bad_input(call):
    with pytest.raises(DomainError):
        call()


def test_unknown_activation_is_domain_error():
    with pytest.raises(UnknownActivationError):
        find_criticality("nope")


def test_fit_power_law_exact():
    ell = np.arange(10, 100.0)
    e, c = fit_power_law(ell, 3.0 * ell ** -0.7)
    assert e == pytest.approx(-0.7) and c == pytest.approx(3.0)


def test_measured_non_odd_example():
    act = sp.tanh(z) + sp.tanh(z) ** 2 / 2                         # PDLT (5.94), (5.127): lK -> 0.8 = 1/(-a1), lV -> 32/75
    m = measure_asymptotics(act, 10_000, K1=0.5)
    a = find_criticality(act).asymptotics
    assert m.p0 == pytest.approx(1, abs=0.05) and m.pV == pytest.approx(1, abs=0.05)
    assert m.slope == pytest.approx(2 / 3, abs=0.05)
    assert float(a.K_coeff) == pytest.approx(0.8) and float(a.V_coeff) == pytest.approx(32 / 75)
    assert m.lK == pytest.approx(0.8, rel=2e-3) and m.lV == pytest.approx(32 / 75, rel=3e-3)


@pytest.mark.parametrize("expr, slope", [(sp.Max(z, 0), 5), (2 * z, 2), (sp.Max(z, 0) + sp.Min(z, 0) / 10, 4.882364)])
def test_user_scale_invariant(expr, slope):
    c = find_criticality(expr)
    assert c.universality_class == "scale-invariant"
    assert float(c.asymptotics.slope) == pytest.approx(slope, abs=1e-6)
    assert measure_asymptotics(expr, 1000).slope == pytest.approx(slope, abs=1e-6)
