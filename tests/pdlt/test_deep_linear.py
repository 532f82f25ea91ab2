"""Exact finite-width deep linear networks (PDLT ch. 3, with biases): the three corners.

* published: the book's printed formulas (3.24)-(3.57), re-typed HERE ONLY (with the glitches of
  PDLT (3.43) as printed has G_6^(0), corrected to G_6^(1)), and independent exact reference numbers;
* brute: two independent exact computations that share no code with the engine -- moments of
  the conditional Gaussian by multinomial expansion (chi-square moments), and a literal
  expansion of tiny networks into polynomials of their Gaussian weights and biases;
* simulation: ``effth.simulate_ensemble`` with fixed seeds, tolerances of NSIG standard errors,
  each test also showing that a wrong coefficient would be rejected.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from fractions import Fraction

import numpy as np
import pytest
import sympy as sp

from effth.algebra.indices import alpha, ell, width
from effth.algebra.indices import c_b as cb_sym
from effth.algebra.indices import c_w as cw_sym
from effth.algebra.tensors import FourPointVertex, Kernel
from effth.algebra.wick import deep_linear_layer_factor
from effth.arch import MLP
from effth.errors import DomainError
from effth.printing import latex
from effth.simulation import simulate_ensemble
from effth.pdlt.deep_linear import (
    deep_linear_flow,
    double_scaling_limit,
    exact_vertex,
    kernel_recursion,
    layer_factor,
    metric_moment,
    observable_variance,
    preactivation_moment,
    single_input_correlator,
    single_input_cumulants,
    single_input_moment,
    single_input_vertex,
    vertex_recursion,
)

NSIG = 4.5
n = sp.Symbol("n", positive=True)


def dfact(k: int) -> int:
    return math.prod(range(k, 0, -2)) if k > 0 else 1


def assert_mc(est, err, exact, *, nsig: float = NSIG, max_err=None) -> None:
    est, err, exact = np.asarray(est, float), np.asarray(err, float), np.broadcast_to(exact, np.shape(est))
    assert np.all(np.isfinite(err)) and np.all(err > 0)
    bad = np.abs(est - exact) > nsig * err
    assert not bad.any(), f"MC {est[bad]} vs exact {exact[bad]} (err {err[bad]})"
    if max_err is not None:
        assert np.all(err <= max_err), f"standard error {err.max()} too large to test (> {max_err})"


def assert_rejects(est, err, wrong, *, nsig: float = NSIG) -> None:
    """The MC estimate excludes a wrong prediction (so the comparison above could fail)."""
    assert np.all(np.abs(np.asarray(est) - np.asarray(wrong)) > nsig * np.asarray(err)), (est, err, wrong)


# ================================================================ published formulas (re-typed)
def book_c2m(m, n):
    """PDLT (3.46), product form."""
    return sp.Mul(*[1 + sp.Integer(2 * s) / n for s in range(1, m)])


def book_c2m_gamma(m, n):
    """PDLT (3.46), factorial form (read as Gamma for odd n)."""
    return sp.gamma(n / 2 + m) / sp.gamma(n / 2) * (2 / n) ** m


class TestPublished:
    @pytest.mark.parametrize("m", range(8))
    def test_layer_factor_is_346(self, m):
        assert sp.simplify(layer_factor(m, n) - book_c2m(m, n)) == 0
        for k in (1, 2, 3, 5):
            assert layer_factor(m, k) == sp.gammasimp(book_c2m_gamma(m, sp.Integer(k)))

    def test_counting_323_339_341(self):
        """(3.23): 1 + 2/n; (3.39)-(3.41): one, six, eight terms -> 1 + 6/n + 8/n^2."""
        assert sp.expand(layer_factor(2, n) - (1 + 2 / n)) == 0
        assert sp.expand(layer_factor(3, n) - (1 + 6 / n + 8 / n**2)) == 0
        assert sp.expand(layer_factor(4, n) - (1 + 12 / n + 44 / n**2 + 48 / n**3)) == 0

    def test_G4_G6_G2m_per_layer_widths(self):
        """(3.25), (3.43), (3.47) with per-layer widths and C_W; (3.15) for G_2."""
        ns = sp.symbols("n1:4", positive=True)
        cw, g0 = sp.symbols("C_W G0", positive=True)
        G2 = cw**4 * g0                                                   # (3.15), layer 4
        assert sp.simplify(single_input_correlator(1, 4, ns, c_w=cw, G0=g0) - G2) == 0
        G4 = sp.Mul(*[1 + 2 / w for w in ns]) * G2**2                      # (3.25)
        assert sp.simplify(single_input_correlator(2, 4, ns, c_w=cw, G0=g0) - G4) == 0
        G6 = sp.Mul(*[1 + 6 / w + 8 / w**2 for w in ns]) * G2**3           # (3.43), G_6^{(1)} = (G_2^{(1)})^3
        assert sp.simplify(single_input_correlator(3, 4, ns, c_w=cw, G0=g0) - G6) == 0
        for m in (4, 5):
            G2m = sp.Mul(*[book_c2m(m, w) for w in ns]) * G2**m            # (3.47)
            assert sp.simplify(single_input_correlator(m, 4, ns, c_w=cw, G0=g0) - G2m) == 0
            assert sp.simplify(single_input_correlator(m, 4, ns) - deep_linear_layer_factor(m, ns)) == 0

    def test_recursion_324_342_345(self):
        """G_{2m}^{(l+1)} = c_{2m}(n_l) C_W^m G_{2m}^{(l)} (3.24), (3.42), (3.45)."""
        cw = sp.Symbol("C_W", positive=True)
        ws = (3, 7, 11, 5)
        for m in (2, 3, 4):
            for lay in range(1, 5):
                ratio = single_input_correlator(m, lay + 1, ws, c_w=cw) / single_input_correlator(m, lay, ws, c_w=cw)
                assert sp.simplify(ratio - book_c2m(m, ws[lay - 1]) * cw**m) == 0

    def test_symbolic_layer_350(self):
        """Equal widths: G_{2m}^{(l)} = c_{2m}(n)^{l-1} (G_2^{(l)})^m (3.50), G_2 = C_W^l G_2^{(0)}."""
        cw, g0 = sp.symbols("C_W G0", positive=True)
        for m in (2, 3):
            got = single_input_correlator(m, ell, n, c_w=cw, G0=g0)
            book = book_c2m(m, n) ** (ell - 1) * (cw**ell * g0) ** m
            assert got.has(ell)
            for lay in (1, 2, 5):
                assert sp.simplify(got.subs(ell, lay) - book.subs(ell, lay)) == 0
                assert sp.simplify(got.subs(ell, lay) - single_input_correlator(m, lay, n, c_w=cw, G0=g0)) == 0
            assert sp.simplify(got.subs(n, 6) / book.subs(n, 6)) == 1

    def test_spec_table_36(self):
        """Exact reference numbers (PDLT §3.3–§3.4): widths (4, 8, 16), layer 4, and n = 10, l = 5 (C_W = G_2 = 1)."""
        w = (4, 8, 16)
        assert single_input_correlator(2, 4, w) == sp.Rational("2.109375")
        assert single_input_correlator(3, 4, w) == sp.Rational("7.91015625")
        assert abs(float(single_input_correlator(4, 4, w)) - 47.58453369) < 1e-8
        assert single_input_moment(2, 4, w) == sp.Rational("6.328125")
        assert abs(float(single_input_moment(3, 4, w)) - 118.6523438) < 1e-6
        assert abs(float(single_input_moment(4, 4, w)) - 4996.376038) < 1e-5
        cum = single_input_cumulants(4, w)
        assert cum["kappa4"] == sp.Rational("3.328125") and cum["G6_connected"] == sp.Rational("3.58203125")
        cum = single_input_cumulants(5, 10)
        assert cum["G4_minus_G2sq"] == sp.Rational("1.0736")
        assert single_input_correlator(3, 5, 10) == sp.Rational("7.96594176")
        assert cum["G6_connected"] == sp.Rational("3.74514176")
        assert observable_variance(5, 10) == sp.Rational("1.48832")

    def test_leading_terms_328_333(self):
        """(3.28): G_4 - G_2^2 = 2(l-1)/n G_2^2 + O(1/n^2); (3.33): Var O = 2l/n G_2^2 + O(1/n^2).

        The printed '2l/n' of (3.33) is the leading term only (PDLT §3.3); the exact value is
        [(1 + 2/n)^l - 1] G_2^2, checked here too.
        """
        eps = sp.Symbol("epsilon", positive=True)
        for lay in range(1, 6):
            g4c = single_input_cumulants(lay, n)["G4_minus_G2sq"]
            assert sp.simplify(g4c - ((1 + 2 / n) ** (lay - 1) - 1)) == 0
            ser = sp.series(g4c.subs(n, 1 / eps), eps, 0, 2).removeO()
            assert sp.expand(ser - 2 * (lay - 1) * eps) == 0
            var = observable_variance(lay, n)
            assert sp.simplify(var - ((1 + 2 / n) ** lay - 1)) == 0
            assert sp.expand(sp.series(var.subs(n, 1 / eps), eps, 0, 2).removeO() - 2 * lay * eps) == 0
            # (3.33) second line: 2/n G_4 + [G_4 - G_2^2]
            G4 = single_input_correlator(2, lay, n)
            assert sp.simplify(var - (2 / n * G4 + G4 - 1)) == 0

    def test_double_scaling_353_357(self):
        """(3.53) slope m(m-1); (3.55) e^{m(m-1) r}; (3.56) 2r; (3.57) 12 r^2 (+ 32 r^3, spec)."""
        r = sp.Symbol("r", positive=True)
        for m in range(1, 6):
            assert double_scaling_limit(m, r) == sp.exp(m * (m - 1) * r)
        e4 = double_scaling_limit(2, r) - 1
        e6 = double_scaling_limit(3, r) - 3 * double_scaling_limit(2, r) + 2
        assert sp.series(e4, r, 0, 2).removeO() == 2 * r
        assert sp.expand(sp.series(e6, r, 0, 4).removeO() - (12 * r**2 + 32 * r**3)) == 0
        # PDLT §3.4: n = 100, L = 10 exact (1.02)^9 vs the limit e^{0.2}; n = 1000, L = 100
        assert abs(float(single_input_correlator(2, 10, 100)) - 1.1950926) < 1e-7
        assert abs(float(double_scaling_limit(2, sp.Rational(1, 10))) - 1.2214028) < 1e-7
        assert abs(float(single_input_correlator(3, 100, 1000)) - 1.8094309) < 1e-7

    def test_kernel_recursion_314(self):
        a = [alpha(k) for k in (1, 2)]
        eq = kernel_recursion()
        assert eq.lhs == Kernel(a[0], a[1], ell + 1)
        assert sp.expand(eq.rhs - (cb_sym(ell + 1) + cw_sym(ell + 1) * Kernel(a[0], a[1], ell))) == 0

    def test_vertex_recursion_spec35_and_4119(self):
        """Exact: derived multi-input recursion (checked by 4e6 simulated networks); leading: PDLT (4.119) with sigma(z) = z (<zzzz> - <zz><zz> = KK + KK)."""
        a = [alpha(k) for k in range(1, 5)]
        K = lambda i, j: Kernel(a[i], a[j], ell)
        V = lambda i, j, k, l: FourPointVertex(a[i], a[j], a[k], a[l], ell)
        nl, np_, cw = width(ell), width(ell - 1), cw_sym(ell + 1)
        lead = cw**2 * (K(0, 2) * K(1, 3) + K(0, 3) * K(1, 2) + nl / np_ * V(0, 1, 2, 3))
        exact = lead + cw**2 / np_ * (V(0, 2, 1, 3) + V(0, 3, 1, 2))
        assert sp.expand(vertex_recursion(True).rhs - exact) == 0
        assert sp.expand(vertex_recursion(False).rhs - lead) == 0
        assert vertex_recursion().lhs == FourPointVertex(*a, ell + 1)
        tex = latex(vertex_recursion())
        assert r"V^{(\ell + 1)}_{(\alpha_{1}\alpha_{2})(\alpha_{3}\alpha_{4})}" in tex
        assert r"n_{\ell - 1}" in tex and r"{C_{W}^{(\ell + 1)}}^{2}" in tex and "C_{b}" not in tex

    def test_flow_spec35_table(self):
        """Reference table (exact recursion, 4e6-network Monte Carlo): V^{(3)} exact 14.774, 3.743, 7.247; leading (4.119) 12.701, 2.748, 6.584."""
        kw = {"K1": [[1.0, 0.4], [0.4, 0.8]], "depth": 3, "widths": (4, 6), "c_w": (1.0, 1.2, 1.2), "c_b": (0.0, 0.3, 0.3)}
        V = deep_linear_flow(**kw)["V"][2]
        np.testing.assert_allclose([V[0, 0, 0, 0], V[0, 0, 1, 1], V[0, 1, 0, 1]], [14.774, 3.743, 7.247], atol=6e-4)
        V0 = deep_linear_flow(**kw, exact=False)["V"][2]
        np.testing.assert_allclose([V0[0, 0, 0, 0], V0[0, 0, 1, 1], V0[0, 1, 0, 1]], [12.701, 2.748, 6.584], atol=6e-4)
        K = deep_linear_flow(**kw)["K"]
        np.testing.assert_allclose(K[2], 0.3 + 1.2 * (0.3 + 1.2 * np.array(kw["K1"])))

    def test_single_input_vertex_closed_form(self):
        """V^{(l)}/(n K^2) = (1 + 2/n)^{l-1} - 1 exactly (C_b = 0), = 2(l-1)/n + O(1/n^2) (3.28)."""
        V = single_input_vertex(ell, n)
        for lay in (1, 2, 3, 6):
            assert sp.simplify(V.subs(ell, lay) - n * ((1 + 2 / n) ** (lay - 1) - 1)) == 0
            assert sp.simplify(V.subs(ell, lay) - single_input_vertex(lay, n)) == 0
            eps = sp.Symbol("epsilon", positive=True)
            lead = sp.series((V.subs(ell, lay) / n).subs(n, 1 / eps), eps, 0, 2).removeO()
            assert sp.expand(lead - 2 * (lay - 1) * eps) == 0
        # with biases at C_W = 1: the symbolic-l sum equals the recursion
        cb = sp.Symbol("C_b", positive=True)
        Vb = single_input_vertex(ell, n, c_b=cb, K1=2)
        for lay in (1, 2, 4):
            assert sp.simplify(Vb.subs(ell, lay) - single_input_vertex(lay, n, c_b=cb, K1=2)) == 0


# ================================================================ brute exact (independent)
def chi_moment_brute(n: int, k: int) -> Fraction:
    """E[(sum_{j<=n} g_j^2)^k] for i.i.d. standard g, by multinomial expansion."""
    tot = Fraction(0)
    for ks in itertools.product(range(k + 1), repeat=n):
        if sum(ks) == k:
            tot += Fraction(math.factorial(k), math.prod(math.factorial(x) for x in ks)) * math.prod(
                dfact(2 * x - 1) for x in ks)
    return tot


def brute_single_input(m: int, layer: int, widths, cw: Fraction, g0: Fraction) -> Fraction:
    """E[z^{2m}] = (2m-1)!! E[G_hat^m], G_hat^{(l+1)} = C_W/n sum_j z_j^2 given G_hat^{(l)}."""
    EG = (cw * g0) ** m
    for lay in range(1, layer):
        nl = widths[lay - 1]
        EG = (cw / nl) ** m * chi_moment_brute(nl, m) * EG
    return dfact(2 * m - 1) * EG


class _Poly:
    """Polynomials in independent centered Gaussians (weights, biases): {sorted var ids: coeff}."""

    def __init__(self):
        self.var: list[Fraction] = []

    def new(self, variance) -> dict:
        self.var.append(Fraction(variance))
        return {(len(self.var) - 1,): Fraction(1)}

    @staticmethod
    def add(*ps) -> dict:
        out: dict = defaultdict(Fraction)
        for p in ps:
            for k, v in p.items():
                out[k] += v
        return dict(out)

    @staticmethod
    def mul(p: dict, q: dict) -> dict:
        out: dict = defaultdict(Fraction)
        for k1, v1 in p.items():
            for k2, v2 in q.items():
                out[tuple(sorted(k1 + k2))] += v1 * v2
        return dict(out)

    def expect(self, p: dict) -> Fraction:
        tot = Fraction(0)
        for mono, c in p.items():
            cnt: dict = defaultdict(int)
            for v in mono:
                cnt[v] += 1
            if all(e % 2 == 0 for e in cnt.values()):
                tot += c * math.prod(dfact(e - 1) * self.var[v] ** (e // 2) for v, e in cnt.items())
        return tot


def brute_network(X, widths, cws, cbs):
    """Output preactivations of a literal linear network as Gaussian polynomials: z[i][alpha]."""
    P = _Poly()
    n0 = len(X[0])
    z = [[{(): Fraction(0)} for _ in X] for _ in range(n0)]
    z = [[{(): Fraction(x[j])} for x in X] for j in range(n0)]        # z^{(0)}_{j; alpha} = x
    prev = n0
    for lay, nl in enumerate(widths):
        W = [[P.new(Fraction(cws[lay]) / prev) for _ in range(prev)] for _ in range(nl)]
        b = [P.new(cbs[lay]) for _ in range(nl)]
        z = [[P.add(b[i], *[P.mul(W[i][j], z[j][a]) for j in range(prev)]) for a in range(len(X))]
             for i in range(nl)]
        prev = nl
    return P, z


class TestBrute:
    @pytest.mark.parametrize("w", [1, 2, 3, 5])
    def test_single_input_moments_equal_widths(self, w):
        cw, g0 = Fraction(3, 2), Fraction(2, 3)
        for m in range(1, 5):
            for lay in range(1, 5):
                exact = brute_single_input(m, lay, (w,) * (lay - 1), cw, g0)
                assert single_input_moment(m, lay, w, c_w=cw, G0=g0) == sp.Rational(exact.numerator, exact.denominator)

    def test_single_input_moments_mixed_widths_and_engine(self):
        """Per-layer widths; the general engine (preactivation_moment) agrees too."""
        ws = (2, 5, 1)
        for m in range(1, 5):
            for lay in range(1, 5):
                exact = brute_single_input(m, lay, ws, Fraction(1), Fraction(1))
                exact = sp.Rational(exact.numerator, exact.denominator)
                assert single_input_moment(m, lay, ws) == exact
                assert preactivation_moment([0] * (2 * m), layer=lay, widths=ws, K1=[[1]]) == exact
                assert metric_moment([(0, 0)] * m, layer=lay, widths=ws, K1=[[1]]) * dfact(2 * m - 1) == exact

    def test_multi_neuron_344(self):
        """(3.44): E[z_1^2 z_2^2] = G_4, E[z_1^4 z_2^2] = 3 G_6, E[z_1^2 z_2^2 z_3^2 z_4^2] = G_8."""
        ws = (3, 4)
        G = {m: single_input_correlator(m, 3, ws) for m in (2, 3, 4)}
        assert preactivation_moment([0, 0, 1, 1], layer=3, widths=ws, K1=[[1]]) == G[2]
        assert preactivation_moment([0, 1, 0, 1], layer=3, widths=ws, K1=[[1]]) == G[2]
        assert preactivation_moment([0, 0, 0, 0, 1, 1], layer=3, widths=ws, K1=[[1]]) == 3 * G[3]
        assert preactivation_moment([0, 0, 1, 1, 2, 2, 3, 3], layer=3, widths=ws, K1=[[1]]) == G[4]
        assert preactivation_moment([0, 0, 1, 2], layer=3, widths=ws, K1=[[1]]) == 0
        assert preactivation_moment([0, 0, 1], layer=3, widths=ws, K1=[[1]]) == 0

    @pytest.mark.parametrize("widths", [(1, 2), (2, 2)])
    def test_literal_network_multi_input_with_biases(self, widths):
        """Tiny network, 2 inputs, per-layer C_W, C_b: every 4-point moment and V exactly."""
        X = [[Fraction(1), Fraction(-1, 2)], [Fraction(1, 3), Fraction(2)]]
        cws, cbs = (Fraction(1), Fraction(3, 2), Fraction(6, 5)), (Fraction(1, 2), Fraction(1, 3), Fraction(1, 4))
        P, z = brute_network(X, widths + (2,), cws, cbs)
        gram = [[sum(a * b for a, b in zip(x, y)) / 2 for y in X] for x in X]
        kw = {"layer": 3, "widths": widths, "c_w": cws, "c_b": cbs, "gram": gram}
        K3 = {}
        for a, b in itertools.product(range(2), repeat=2):
            K3[a, b] = P.expect(P.mul(z[0][a], z[0][b]))
            assert preactivation_moment([0, 0], [a, b], **kw) == K3[a, b]
        Vx = exact_vertex(**kw)
        flow = deep_linear_flow(gram=np.array(gram, float), depth=3, widths=widths,
                                c_w=[float(c) for c in cws], c_b=[float(c) for c in cbs])
        for a, b, c, d in [(0, 0, 0, 0), (0, 0, 1, 1), (0, 1, 0, 1), (0, 0, 0, 1), (1, 1, 1, 1), (0, 1, 1, 1)]:
            cross = P.expect(P.mul(P.mul(z[0][a], z[0][b]), P.mul(z[1][c], z[1][d])))
            same = P.expect(P.mul(P.mul(z[0][a], z[0][b]), P.mul(z[0][c], z[0][d])))
            assert preactivation_moment([0, 0, 1, 1], [a, b, c, d], **kw) == cross
            assert preactivation_moment([0, 0, 0, 0], [a, b, c, d], **kw) == same
            V = widths[-1] * (cross - K3[a, b] * K3[c, d])                 # (4.77), exact
            assert Vx[a, b, c, d] == V
            assert abs(flow["V"][2][a, b, c, d] - float(V)) < 1e-12 * max(1.0, abs(float(V)))
            # same-neuron connected function = (1/n)(V + V + V), exactly (4.77)
            conn = same - K3[a, b] * K3[c, d] - K3[a, c] * K3[b, d] - K3[a, d] * K3[b, c]
            assert conn * widths[-1] == Vx[a, b, c, d] + Vx[a, c, b, d] + Vx[a, d, b, c]

    def test_flow_equals_engine_deeper(self):
        """The numeric recursion equals exact_vertex (no recursion) at layer 4, 3 inputs."""
        K1 = [[2, 1, 0], [1, 3, 1], [0, 1, 1]]
        kw = {"widths": (2, 3, 5), "c_w": (1, 0.8, 1.1, 1.0), "c_b": (0, 0.1, 0.2, 0.05)}
        flow = deep_linear_flow(K1=np.array(K1, float), depth=4, **kw)
        for lay in (1, 2, 4):
            Vx = np.array(exact_vertex(layer=lay, K1=K1, **kw).tolist(), dtype=float)
            np.testing.assert_allclose(flow["V"][lay - 1], Vx, rtol=1e-12, atol=1e-12)
        # exactness is not the leading order: the two differ at O(1/n) relative
        lead = deep_linear_flow(K1=np.array(K1, float), depth=4, exact=False, **kw)
        assert np.abs(lead["V"][3] - flow["V"][3]).max() > 0.05 * np.abs(flow["V"][3]).max()

    def test_symbolic_widths_vertex(self):
        n1, n2 = sp.symbols("n1 n2", positive=True)
        V = exact_vertex(layer=3, widths=(n1, n2), K1=[[1]])[0, 0, 0, 0]
        assert sp.simplify(V - n2 * ((1 + 2 / n1) * (1 + 2 / n2) - 1)) == 0


# ================================================================ validation
class TestValidation:
    @pytest.mark.parametrize("K1", [[[1.0, 2.0], [2.0, 1.0]], [[-1.0]], [[1.0, 0.5], [0.4, 1.0]], [[np.nan]]])
    def test_bad_kernel(self, K1):
        with pytest.raises(DomainError):
            deep_linear_flow(K1=K1, depth=3, widths=4)
        with pytest.raises(DomainError):
            metric_moment([(0, 0)], layer=2, widths=4, K1=K1)

    @pytest.mark.parametrize("kw", [{"c_w": -1.0}, {"c_w": 0.0}, {"c_b": -0.1}, {"widths": 0},
                                    {"widths": (4, 0)}, {"widths": 2.5}, {"depth": 2.5}, {"depth": 3.0},
                                    {"depth": 0}, {"c_w": (1.0, 1.0)}, {"c_w": float("inf")}])
    def test_bad_hyperparameters(self, kw):
        base = {"K1": [[1.0]], "depth": 3, "widths": 4, "c_w": 1.0, "c_b": 0.0}
        base.update(kw)
        with pytest.raises(DomainError):
            deep_linear_flow(**base)

    def test_bad_exact_inputs(self):
        with pytest.raises(DomainError, match="layer"):
            single_input_moment(2, 2.0, 4)
        with pytest.raises(DomainError, match="c_w"):
            single_input_correlator(2, 3, 4, c_w=-1)
        with pytest.raises(DomainError, match="widths"):
            single_input_correlator(2, 3, (4,))
        with pytest.raises(DomainError):
            single_input_correlator(2, ell, (4, 5))                    # symbolic layer, unequal widths
        with pytest.raises(DomainError, match="exactly one"):
            metric_moment([(0, 0)], layer=2, widths=3, K1=[[1]], gram=[[1]])
        with pytest.raises(DomainError, match="range"):
            metric_moment([(0, 1)], layer=2, widths=3, K1=[[1]])
        with pytest.raises(DomainError):
            preactivation_moment([0, 0], [0], layer=2, widths=3, K1=[[1]])
        with pytest.raises(DomainError):
            layer_factor(-1, 3)


# ================================================================ simulation
@pytest.mark.mc
class TestSimulation:
    def test_single_input_moments_and_wrong_c4(self):
        """Layer 3, widths (3, 5), C_W = 1.3: E[z^4], E[z^6] exact; c_4 with 3/n is rejected."""
        ws, cw = (3, 5), 1.3
        net = MLP("linear", depth=3, widths=ws, c_w=cw, n_out=8)
        st = simulate_ensemble(net, [[1.0]], networks=200_000, seed=20261121, method="conditional",
                               layers=[3], keep_samples=True)
        z = st.samples[3][:, 0, :]                                    # (size, n_out)
        K = cw**3
        cw_exact = sp.Rational(13, 10)
        for m in (2, 3):                      # raw preactivation moments, averaged over neurons
            per_net = (z ** (2 * m)).mean(axis=1)
            est, err = per_net.mean(), per_net.std(ddof=1) / np.sqrt(len(per_net))
            exact = float(single_input_moment(m, 3, ws, c_w=cw_exact))
            assert_mc(est, err, exact, max_err=(0.03 if m == 2 else 0.08) * exact)
            if m == 2:
                wrong = 3 * K**2 * (1 + 3 / ws[0]) * (1 + 3 / ws[1])   # c_4 with 3/n instead of 2/n
                assert_rejects(est, err, wrong)
                assert_rejects(est, err, 3 * K**2)                      # the Gaussian value
        # Rao-Blackwellized: E[z^{2m}] = (2m-1)!! E[G_hat^m], so E[G_hat^m] = G_{2m} (3.44), m <= 4
        G = st.G_hat_samples[3][:, 0, 0]
        for m in (2, 3, 4):
            est, err = (G**m).mean(), (G**m).std(ddof=1) / np.sqrt(len(G))
            exact = float(single_input_correlator(m, 3, ws, c_w=cw_exact))
            assert_mc(est, err, exact, max_err=0.05 * exact)
            wrong = K**m * math.prod(1 + 3 * s_ / w_ for s_ in range(1, m) for w_ in ws)
            assert_rejects(est, err, wrong)                              # 2s/n -> 3s/n in c_{2m}
        # the connected 4-pt function: kappa4 = 3 (G_4 - G_2^2) (3.29)
        kappa4 = float(single_input_cumulants(3, ws, c_w=sp.Rational(13, 10))["kappa4"])
        assert_mc(st.kappa4_same[3], st.kappa4_same_err[3], kappa4, max_err=0.05 * kappa4)
        assert_rejects(st.kappa4_same[3], st.kappa4_same_err[3],
                       3 * K**2 * ((1 + 3 / ws[0]) * (1 + 3 / ws[1]) - 1))

    def test_multi_input_with_biases_exact_not_leading(self):
        """3 inputs, per-layer C_W, C_b: V^{(l)} exact; the leading (4.119) value is rejected."""
        X = np.array([[1.0, 0.0, 0.5], [0.3, 1.0, -0.2], [-0.4, 0.6, 1.0]])
        net = MLP("linear", depth=4, widths=(3, 4, 3), c_w=(1.0, 1.1, 0.9, 1.2), c_b=(0.1, 0.2, 0.0, 0.3), n_out=3)
        st = simulate_ensemble(net, X, networks=60_000, seed=7, method="conditional")
        flow = deep_linear_flow(gram=X @ X.T / 3, depth=4, widths=(3, 4, 3), c_w=net.c_w, c_b=net.c_b)
        lead = deep_linear_flow(gram=X @ X.T / 3, depth=4, widths=(3, 4, 3), c_w=net.c_w, c_b=net.c_b, exact=False)
        for lay in (2, 3, 4):
            assert_mc(st.G_rb[lay], st.G_rb_err[lay], flow["K"][lay - 1])
            assert_mc(st.V[lay], st.V_err[lay], flow["V"][lay - 1])
            Vx, Vx_err = st.V_from_cross(lay)
            assert_mc(Vx, Vx_err, flow["V"][lay - 1])
        assert_rejects(st.V[4][0, 0, 0, 0], st.V_err[4][0, 0, 0, 0], lead["V"][3][0, 0, 0, 0])

    def test_scaling_with_width_and_depth(self):
        """E[z^4]/(3K^2) - 1 = kappa4/(3K^2): log-log slope vs n near -1; linear in l (slope 2/n)."""
        widths = np.array([4, 8, 16, 32, 64])
        ex, er = [], []
        for k, w in enumerate(widths):
            st = simulate_ensemble(MLP("linear", depth=3, widths=int(w), n_out=4), [[1.0]], networks=100_000,
                                   seed=100 + k, method="conditional", layers=[3])
            ex.append(st.kappa4_same[3].item() / 3)
            er.append(st.kappa4_same_err[3].item() / 3)
        ex, er = np.array(ex), np.array(er)
        theory = np.array([float(single_input_cumulants(3, int(w))["G4_minus_G2sq"]) for w in widths])
        assert_mc(ex, er, theory, max_err=0.06)
        # weighted fit of log(excess) vs log(n): the exact theory's slope on these widths, and -1
        x, y, s = np.log(widths), np.log(ex), er / ex
        A = np.vstack([np.ones_like(x), x]).T / s[:, None]
        coef, *_ = np.linalg.lstsq(A, y / s, rcond=None)
        cov = np.linalg.inv(A.T @ A)
        slope, slope_err = coef[1], np.sqrt(cov[1, 1])
        slope_th = np.polyfit(x, np.log(theory), 1, w=1 / s)[0]
        assert abs(slope - slope_th) < NSIG * slope_err and slope_err < 0.05
        assert abs(slope_th + 1) < 0.1 and abs(slope + 1) < 0.1 + NSIG * slope_err
        assert abs(slope + 0.5) > NSIG * slope_err                      # a 1/sqrt(n) law is rejected
        # depth: n = 16, l = 1..6: excess = (1 + 2/n)^{l-1} - 1, slope 2/n in l at leading order
        w = 16
        st = simulate_ensemble(MLP("linear", depth=6, widths=w, n_out=4), [[1.0]], networks=100_000, seed=300,
                               method="conditional")
        lays = np.arange(2, 7)
        ex = np.array([st.kappa4_same[k].item() / 3 for k in lays])
        er = np.array([st.kappa4_same_err[k].item() / 3 for k in lays])
        theory = np.array([float(single_input_cumulants(int(k), w)["G4_minus_G2sq"]) for k in lays])
        assert_mc(ex, er, theory)
        slope, cov = np.polyfit(lays - 1, ex, 1, w=1 / er, cov="unscaled")
        slope_th = np.polyfit(lays - 1, theory, 1, w=1 / er)[0]
        sd = np.sqrt(cov[0, 0])
        assert abs(slope[0] - slope_th) < NSIG * sd and sd < 0.1 * 2 / w
        # exact slope = leading 2/n (3.28) times 1 + O(l/n): here within 30% (l/n <= 6/16)
        assert 2 / w < slope_th < 1.3 * 2 / w
        assert abs(slope[0] - 3 / w) > NSIG * sd                                  # 3/n rejected
