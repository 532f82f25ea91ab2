"""The printed two-layer gamma0-series (effth.dmft.series.formulas_two_layer) against the engines.

(a) the printed terms -- Gaussian atoms over the lazy process on a product trapezoid rule in the
eigen-coordinates of K^x, exact r-moments, the printed time functions w_k -- against (b) the
two-layer engine (two_layer_series_arrays: truncated power-series arithmetic at the points of its
own tensor rule, Gauss-Hermite in r) and (c) for phi(z) = z the deep linear engine with one hidden
layer (the closed matrix equations of Bordelon & Pehlevan (2022), eqs. (68)-(71)); and the
printed plain text parsed back and evaluated term by term against (b).  Tolerance
1e-12 relative (both sides converged quadratures, float64); a coefficient changed by 10 % or one
dropped term misses by orders of magnitude more.

The engine's default rule (100 nodes) is converged to 3e-13 at gamma0^2 and gamma0^4 with two
inputs (its docstring); with tanh and one input (K^x = 0.8) it is off by 1.6e-12 at gamma0^4 and
3e-9 at gamma0^6 (high derivatives of tanh near its poles; 160 and 240 nodes agree with the
printed terms to 1e-15), so the one-input comparisons run it with 200 nodes.
"""

from __future__ import annotations

import dataclasses
import io
from fractions import Fraction

import numpy as np
import pytest
import sympy as sp

from effth.cli import main
from effth.dmft.series.deep_linear import deep_linear_series_arrays
from effth.dmft.series.formulas_two_layer import two_layer_formulas
from effth.dmft.series.two_layer import two_layer_series_arrays
from effth.errors import DomainError
from effth.printing.formula import document
from effth.printing.tex import compile_tex, have_pdflatex

KX1, Y1 = np.array([[0.8]]), np.array([1.0])
KX2, Y2 = np.array([[1.0, 0.5], [0.5, 1.0]]), np.array([1.0, -0.5])
NAMES = ("phi", "g", "ntk", "f", "delta")


@pytest.fixture(scope="module")
def fm6():
    return two_layer_formulas(6)


@pytest.fixture(scope="module")
def fm4():
    return two_layer_formulas(4)


def _rel(a, b):
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


def _worst(ev, arr, order, names=NAMES):
    out = {}
    for name in names:
        for m in range(order // 2 + 1):
            ref = getattr(arr, name)[2 * m]
            assert np.max(np.abs(ref)) > 0, (name, m)
            out[(name, 2 * m)] = _rel(ev[name][m], ref.reshape(ev[name][m].shape))
    return out


@pytest.mark.parametrize("act", ["tanh", "erf", "gelu"])
def test_one_input_through_gamma0_6_equals_the_engine(fm6, act):
    eta, T = 0.1, 6
    ev = fm6.evaluate(KX1, Y1, activation=act, eta=eta, steps=T)
    arr = two_layer_series_arrays(KX1, Y1, activation=act, eta=eta, steps=T, order=6, nodes=200)
    errs = _worst(ev, arr, 6)
    assert max(errs.values()) < 1e-12, errs
    # the loss: 1/2 sum of the Cauchy product of the printed Delta's
    d = arr.delta
    loss6 = sum(d[a] * d[6 - a] for a in range(7)).sum(axis=-1) / 2
    assert _rel(ev["loss"][3], loss6) < 1e-12


@pytest.mark.parametrize("act", ["tanh", "erf", "gelu"])
def test_two_inputs_through_gamma0_4_equal_the_engine(fm4, act):
    eta, T = 0.1, 5
    ev = fm4.evaluate(KX2, Y2, activation=act, eta=eta, steps=T)
    arr = two_layer_series_arrays(KX2, Y2, activation=act, eta=eta, steps=T, order=4)
    errs = _worst(ev, arr, 4)
    assert max(errs.values()) < 1e-12, errs


def test_two_inputs_gamma0_6_cubic_activation(fm6):
    """A cubic activation (every phi^(k), k <= 3, nonzero; the engine's 24-node Gauss-Hermite rule
    is exact for its atoms, polynomials of degree <= 47) with two training points and a test point
    (K^x of rank 2): every printed term of gamma0^6 is exercised."""
    z = sp.Symbol("z")
    act = z + z ** 2 / 4 - z ** 3 / 6
    X = np.array([[1.0, 0.0], [0.5, 0.8], [-0.4, 0.7]])
    kx = X @ X.T
    eta, T = 0.1, 4
    ev = fm6.evaluate(kx, Y2, activation=act, eta=eta, steps=T)
    arr = two_layer_series_arrays(kx, Y2, activation=act, eta=eta, steps=T, order=6, nodes=24)
    errs = _worst(ev, arr, 6)
    assert max(errs.values()) < 1e-12, errs


def test_linear_activation_is_the_deep_linear_series(fm6):
    """phi(z) = z: the printed two-layer terms against the deep linear engine (L = 1, exact
    closure), an independent set of equations (matrix recursions on (time, sample) pairs)."""
    eta, T = 0.1, 5
    ev = fm6.evaluate(KX2, Y2, activation="linear", eta=eta, steps=T)
    dl = deep_linear_series_arrays(KX2, Y2, hidden_layers=1, eta=eta, steps=T, order=3)
    idx = np.arange(T)
    for m in range(4):
        H = dl.H[m][0][idx, :, idx, :]
        assert _rel(ev["phi"][m], H) < 1e-12, m
        assert _rel(ev["g"][m], dl.G[m][0][idx, idx][:, None, None] * np.ones((1, 2, 2))) < 1e-12, m
        assert _rel(ev["ntk"][m], dl.ntk[m]) < 1e-12, m
        assert _rel(ev["f"][m], dl.f[m]) < 1e-12, m


def test_a_wrong_coefficient_or_a_dropped_term_is_rejected(fm4):
    """One gamma0^4 term of G (the largest-coefficient one) times 0.9, or one term of f_4 dropped:
    the evaluated coefficients miss the engine by > 1e-6 (the check bites)."""
    eta, T = 0.1, 6
    arr = two_layer_series_arrays(KX1, Y1, activation="tanh", eta=eta, steps=T, order=4, nodes=200)
    terms = list(fm4.kernels[("g", 4)])
    j = max(range(len(terms)), key=lambda i: terms[i][0])
    c, l, r = terms[j]
    terms[j] = (c * Fraction(9, 10), l, r)
    bad = dataclasses.replace(fm4, kernels={**fm4.kernels, ("g", 4): terms})
    ev = bad.evaluate(KX1, Y1, activation="tanh", eta=eta, steps=T)
    assert _rel(ev["g"][2], arr.g[4]) > 1e-6
    good = fm4.evaluate(KX1, Y1, activation="tanh", eta=eta, steps=T)
    assert _rel(good["g"][2], arr.g[4]) < 1e-12
    preds = {**fm4.predictions, 4: fm4.predictions[4][1:]}
    ev = dataclasses.replace(fm4, predictions=preds).evaluate(KX1, Y1, activation="tanh",
                                                              eta=eta, steps=T)
    assert _rel(ev["f"][2], arr.f[4]) > 1e-6


def test_text_and_latex_define_every_symbol(fm4, fm6):
    text, tex = fm6.text(), fm4.latex()
    assert "\\" not in text
    for bad in (r"\cdots", "Price", r"\sum_{i+j", "iterated"):
        assert bad not in tex and bad not in text
    head, defs = tex.split(r"\text{where}")
    import re
    used = set(re.findall(r"w_\{(\d+),", head))
    defined = set(re.findall(r"w_\{(\d+),[^}]*\}\(t_i\)&=", defs))
    assert used and used <= defined, sorted(used - defined)
    for sym in (r"\langle F\rangle", r"K^{x}", r"\langle r^{m}\rangle=(m-1)!!", r"\Delta_{0}(t_{i+1})"):
        assert sym in defs, sym
    assert "w26(a; t_i) = eta sum_(j<i) Delta_4(a; t_j)" in text            # Delta_4 enters at 6
    assert fm6.term_count("phi", 2) == 4 and fm6.term_count("g", 4) == 106
    assert "K_2(mu,nu; t) = Phi_2(mu,nu; t) + G_2(mu,nu; t) Kx(mu,nu)" in text


@pytest.mark.skipif(not have_pdflatex(), reason="pdflatex not on PATH")
def test_latex_compiles_with_pdflatex(fm4):
    run = compile_tex(document([dataclasses.replace(fm4, activation="tanh")]))
    assert run.ok, run.errors
    assert run.worst_overfull <= 10.0


def _cli(*argv):
    out = io.StringIO()
    return main(list(argv), out=out), out.getvalue()


def test_cli_prints_the_two_layer_formulas():
    code, text = _cli("gamma0", "--order", "4", "--hidden-layers", "1", "--activation", "tanh")
    assert code == 0 and text.startswith(r"\begin{aligned}")
    assert r"\Phi_{4,\mu\nu}(t)&=" in text and r"\cdots" not in text and "Price" not in text
    code, text = _cli("gamma0", "--order", "6", "--hidden-layers", "1", "--activation", "tanh",
                      "--format", "text")
    assert code == 0 and "\\" not in text and "f_6(mu; t) = " in text
    code, text = _cli("gamma0", "--order", "4", "--depth", "2", "--activation", "gelu",
                      "--format", "text")
    assert code == 0 and "\\" not in text and "G_4(mu,nu; t) = " in text


def test_cli_deep_nonlinear_above_order_2_prints_formulas():
    code, text = _cli("gamma0", "--order", "4", "--depth", "3", "--activation", "tanh")
    assert code == 0
    for bad in (r"\mathrm{Price}", r"\cdots", r"\sum_{i+j", "B_j", "given as numbers"):
        assert bad not in text, bad
    assert r"\langle \phi'^{4}\rangle_{\ell}" in text          # moments of the activation
    assert r"\hat G^{\ell}_{4}(t,s)&=" in text and r"K_{4}(t)&=" in text
    code, text = _cli("gamma0", "--order", "4", "--depth", "3", "--activation", "tanh",
                      "--format", "text")
    assert code == 0 and "\\" not in text and "Phihat^l_4(t,s) = " in text


def test_bad_input():
    with pytest.raises(DomainError, match="even"):
        two_layer_formulas(3)
    with pytest.raises(DomainError, match="gamma0_series"):
        two_layer_formulas(10)
    with pytest.raises(DomainError, match="symmetric"):
        two_layer_formulas(2).evaluate(np.ones((2, 3)), Y2, activation="tanh", eta=0.1, steps=3)
    with pytest.raises(DomainError, match="kink"):
        two_layer_formulas(2).evaluate(KX2, Y2, activation="relu", eta=0.1, steps=3)


def _two_inputs_gamma0_6(fm6, act):
    eta, T = 0.1, 5
    ev = fm6.evaluate(KX2, Y2, activation=act, eta=eta, steps=T)
    arr = two_layer_series_arrays(KX2, Y2, activation=act, eta=eta, steps=T, order=6, nodes=160)
    errs = _worst(ev, arr, 6)
    assert max(errs.values()) < 1e-12, errs


@pytest.mark.slow
@pytest.mark.parametrize("act", ["tanh", "erf", "gelu"])
def test_two_inputs_through_gamma0_6_equal_the_engine(opt_in_slow, fm6, act):
    """Two inputs, gamma0^6, 121^2 trapezoid points (about 7 s and 0.9 GB each)."""
    _two_inputs_gamma0_6(fm6, act)


# ---------------------------------------------------------------------- the printed text, parsed
import re  # noqa: E402
from itertools import product as _product  # noqa: E402

_TOKEN = re.compile(r"sum_\(([^)]*)\)|Kx\((\w+),(\w+)\)|<([^>]*)>|w(\d+)\(([^;]*); t\)")
_PHI = re.compile(r"phi(?:('+)|\^\((\d+)\))?_(\w+)")


def _split_top(rhs):
    """Top-level terms of a printed right-hand side (``' + '`` outside brackets)."""
    out, depth, cur, i = [], 0, "", 0
    while i < len(rhs):
        ch = rhs[i]
        depth += ch in "[(<"
        depth -= ch in "])>"
        if depth == 0 and rhs.startswith(" + ", i):
            out.append(cur)
            cur, i = "", i + 3
            continue
        cur += ch
        i += 1
    return out + [cur]


def _parse_term(s):
    s = s.strip()
    m = re.match(r"(\d+(?:/\d+)?) (.*)$", s)
    coef, body = (Fraction(m.group(1)), m.group(2)) if m else (Fraction(1), s)
    swap = body.startswith("[") and body.endswith(" + (mu<->nu)]")
    if swap:
        body = body[1:-len(" + (mu<->nu)]")]
    dummies, kfac, atom, wfac = [], [], [], []
    for t in _TOKEN.finditer(body):
        if t.group(1) is not None:
            dummies = t.group(1).split(",")
        elif t.group(2) is not None:
            kfac.append((t.group(2), t.group(3)))
        elif t.group(4) is not None:
            for d in _PHI.finditer(t.group(4)):
                k = len(d.group(1)) if d.group(1) else int(d.group(2) or 0)
                atom.append((k, d.group(3)))
        else:
            wfac.append((int(t.group(5)), t.group(6).split(",")))
    return coef, swap, dummies, kfac, atom, wfac


def _parse_text(text):
    eqs, wdefs = {}, {}
    for line in text.splitlines():
        m = re.match(r"(Phi|G)_(\d+)\(mu,nu; t\) = (.*)$", line)
        if m:
            eqs[(m.group(1), int(m.group(2)))] = [_parse_term(t) for t in _split_top(m.group(3))]
            continue
        m = re.match(r"f_(\d+)\(mu; t\) = (.*)$", line)
        if m:
            eqs[("f", int(m.group(1)))] = [_parse_term(t) for t in _split_top(m.group(2))]
            continue
        m = re.match(r"w(\d+)\(([^;]*); t_i\) = eta sum_\(j<i\) Delta_(\d+)\(a; t_j\)(.*)$", line)
        if m:
            kids = [(int(k), ls.split(",")) for k, ls in re.findall(r"w(\d+)\(([^;]*); t_j\)", m.group(4))]
            wdefs[int(m.group(1))] = (m.group(2).split(","), int(m.group(3)), kids)
    return eqs, wdefs


def _evaluate_text(text, kx, y, act, eta, T, nodes=161, span=10.0):
    """Evaluate the *printed text*: each term's sample sums enumerated, each atom a quadrature on
    a product trapezoid rule of its own (cached per multiset of (derivative, point)), each w_k
    from its printed definition; Delta_0 = y - f_0, Delta_n = -f_n, marched in time."""
    from effth.dmft.solvers.lazy import resolve_activation

    eqs, wdefs = _parse_text(text)
    fn = resolve_activation(act).numpy
    n, P = kx.shape[0], y.size
    lam, Q = np.linalg.eigh(kx)
    keep = lam > 1e-12
    B = Q[:, keep] * np.sqrt(lam[keep])
    x = np.linspace(-span, span, nodes)
    w1 = np.exp(-x ** 2 / 2)
    w1 /= w1.sum()
    grids = np.meshgrid(*([x] * B.shape[1]), indexing="ij")
    ws = np.meshgrid(*([w1] * B.shape[1]), indexing="ij")
    u = np.stack([g.ravel() for g in grids], 1) @ B.T
    wq = np.prod(np.stack([g.ravel() for g in ws], 1), axis=1)
    atoms, deriv = {}, {}

    def atom(key):
        if key not in atoms:
            v = wq.copy()
            for k, pt in key:
                if (k, pt) not in deriv:
                    deriv[(k, pt)] = fn(k)(u[:, pt])
                v = v * deriv[(k, pt)]
            atoms[key] = float(v.sum())
        return atoms[key]

    orders = sorted({k[1] for k in eqs})
    delta = {p: np.zeros((T, P)) for p in range(max(orders) + 1)}
    out = {("f", m): np.zeros((T, n)) for m in orders}
    out.update({(nm, m): np.zeros((T, n, n)) for nm in ("Phi", "G") for m in orders})
    wval = {}                                         # (k, labels) -> value at the current t

    def wfun(k, labs, i):
        key = (k, labs, i)
        if key not in wval:
            formal, p, kids = wdefs[k]
            env = dict(zip(formal, labs))
            acc = 0.0
            for j in range(i):
                v = eta * delta[p][j, env["a"]]
                for kk, ls in kids:
                    v *= wfun(kk, tuple(env[q] for q in ls), j)
                acc += v
            wval[key] = acc
        return wval[key]

    def term_value(term, env0, i):
        coef, swap, dummies, kfac, atom_, wfac = term
        tot = 0.0
        for vals in _product(range(P), repeat=len(dummies)):
            env = dict(env0, **dict(zip(dummies, vals)))
            v = float(coef)
            for a, b in kfac:
                v *= kx[env[a], env[b]]
            v *= atom(tuple(sorted((k, env[lab]) for k, lab in atom_)))
            for k, ls in wfac:
                v *= wfun(k, tuple(env[q] for q in ls), i)
            tot += v
        return tot

    for i in range(T):
        for m in orders:
            for mu in range(n):
                out[("f", m)][i, mu] = sum(term_value(t, {"mu": mu}, i) for t in eqs[("f", m)])
            for nm in ("Phi", "G"):
                for mu in range(n):
                    for nu in range(n):
                        s = 0.0
                        for t in eqs[(nm, m)]:
                            s += term_value(t, {"mu": mu, "nu": nu}, i)
                            if t[1]:
                                s += term_value(t, {"mu": nu, "nu": mu}, i)
                        out[(nm, m)][i, mu, nu] = s
            delta[m][i] = (y - out[("f", m)][i, :P]) if m == 0 else -out[("f", m)][i, :P]
    return out


@pytest.mark.parametrize("case", ["one input, gamma0^6, tanh", "two inputs, gamma0^4, erf"])
def test_the_printed_text_parsed_back_equals_the_engine(fm4, fm6, case):
    """The plain-text formulas themselves, parsed and evaluated term by term (sample sums
    enumerated, atoms by a separate quadrature), against the engine."""
    if case.startswith("one"):
        fm, kx, y, act, order, nodes = fm6, KX1, Y1, "tanh", 6, 200
    else:
        fm, kx, y, act, order, nodes = fm4, KX2, Y2, "erf", 4, None
    T, eta = (3 if order == 6 else 4), 0.1
    ev = _evaluate_text(fm.text(), kx, y, act, eta, T, nodes=321 if kx.shape[0] == 1 else 141)
    arr = two_layer_series_arrays(kx, y, activation=act, eta=eta, steps=T, order=order, nodes=nodes)
    for m in range(0, order + 1, 2):
        assert _rel(ev[("Phi", m)], arr.phi[m]) < 1e-12, ("phi", m)
        assert _rel(ev[("G", m)], arr.g[m]) < 1e-12, ("g", m)
        assert _rel(ev[("f", m)], arr.f[m]) < 1e-12, ("f", m)
    eqs, _ = _parse_text(fm.text())
    assert [len(eqs[("G", m)]) for m in range(0, order + 1, 2)] == [
        fm.term_count("g", m) for m in range(0, order + 1, 2)]
    if case.startswith("two"):
        # the printed text with one derivative wrong (the first third derivative in G_4 made a
        # second one) is rejected
        lines = fm.text().splitlines()
        k = next(i for i, ln in enumerate(lines) if ln.startswith("G_4("))
        lines[k] = lines[k].replace("phi'''", "phi''", 1)
        bad = _evaluate_text("\n".join(lines), kx, y, act, eta, T, nodes=141)
        assert _rel(bad[("G", 4)], arr.g[4]) > 1e-6


@pytest.mark.parametrize("act", ["tanh", "erf"])
def test_order2_equals_the_appendix_p_atom_form(fm4, act):
    """gamma0^2: the printed trees equal the four-point-atom form of Bordelon & Pehlevan (2022),
    App. P (two-layer; effth.dmft.series.leading, compiled by effth.codegen) on the discrete lazy
    time functions v = w_1, v_ab = w_3 (two inputs)."""
    from effth.dmft.series.leading import (evaluate_two_layer_order2, lazy_time_functions_discrete,
                                           two_layer_order2_exprs)
    from effth.dmft.solvers.lazy import lazy_kernels, resolve_activation

    eta, T = 0.1, 5
    ev = fm4.evaluate(KX2, Y2, activation=act, eta=eta, steps=T)
    ntk0 = lazy_kernels(KX2, resolve_activation(act), hidden_layers=1)[3]
    _, v, vv = lazy_time_functions_discrete(ntk0, Y2, eta, T)
    ex = two_layer_order2_exprs()
    for name in ("phi", "g"):
        assert _rel(ev[name][1], evaluate_two_layer_order2(ex[name], KX2, v, vv, act)) < 1e-12


@pytest.mark.slow
@pytest.mark.skipif(not have_pdflatex(), reason="pdflatex not on PATH")
def test_gamma0_6_document_compiles(opt_in_slow, fm6):
    """The gamma0^6 system (1.9 MB of LaTeX, split into align* blocks of 40 rows, wide terms
    broken at factor boundaries) compiles with no overfull box beyond 10 pt."""
    run = compile_tex(document([dataclasses.replace(fm6, activation="tanh")]))
    assert run.ok, run.errors
    assert run.worst_overfull <= 10.0


def test_series_latex_above_order_2_tabulates_its_own_numbers():
    """One input: the derived formulas, no numbers; the table of a series' own numbers (added
    for several inputs, where the printed one-input system does not apply) reads them."""
    from effth.dmft import gamma0_series
    from effth.dmft.series.gamma0 import _numbers_beyond_order2, _tex_number
    from effth.dmft.solvers.lazy import resolve_activation
    ser = gamma0_series(kernel=KX1, y=Y1, hidden_layers=2, activation="tanh", eta=0.1, steps=3,
                        order=4, closure="ntk")
    tex = ser.latex(4, "f")
    assert r"\hat\Phi^{\ell}_{4}(t,s)" in tex and "given as numbers" not in tex
    rows = _numbers_beyond_order2(4, "f", 2, resolve_activation("tanh"), None, False, ser)
    tex = "\n".join(rows)
    assert r"\text{the series' own data}" in tex and r"\mathrm{Price}" not in tex
    c = ser.coefficient(4, "f")[2, 0]
    assert rf"f_{{4}}={_tex_number(c)}" in tex
