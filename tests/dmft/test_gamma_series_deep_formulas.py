"""The gamma0-series of deep nonlinear networks above gamma0^2, printed as derived formulas.

derived  -- the printed terms (Gaussian moments x time networks, from the field expansion and the
            Price expansion of the corrected sources) evaluated on their own moments;
measured -- the numeric engine (formal sources on Smolyak rules, `deep_jets`), an independent
            implementation: the printed system must reproduce it to <= 1e-10 relative at gamma0^4
            (L = 2, 3; tanh, erf), responses included;
published/known -- at gamma0^2 the derived terms equal the moment table of
            `formulas_nonlinear` (Bordelon & Pehlevan (2022), App. P.2-P.6); with phi = id the deep
            linear series.  One coefficient x 0.9 or one dropped term is rejected.
"""

from __future__ import annotations

import numpy as np
import pytest

from effth.dmft import gamma0_series
from effth.dmft.series.formulas_deep import DeepSeriesFormulas, deep_series_formulas, derive_deep_terms
from effth.errors import DomainError
from effth.printing.formula import document
from effth.printing.tex import compile_tex, have_pdflatex

KX1, Y1 = np.array([[0.8]]), np.array([1.0])


def _rel(a, b):
    return float(np.abs(np.asarray(a) - np.asarray(b)).max() / np.abs(np.asarray(b)).max())


def _engine(L, act, T, order=4):
    return gamma0_series(kernel=KX1, y=Y1, hidden_layers=L, activation=act, eta=0.1, steps=T,
                         order=order, closure="ntk", nodes=160)


def _errors(ev, ser, order=4):
    err = {}
    for k in range(0, order + 1, 2):
        for name in ("phi", "g", "ntk", "f"):
            ref = np.asarray(ser.coefficient(k, name))
            ref = ref[:, :, 0, :, 0] if name in ("phi", "g") else ref.reshape(ev[name][k // 2].shape)
            err[(name, k)] = _rel(ev[name][k // 2], ref)
    for name in ("A", "B"):
        R = np.asarray(ser.lazy_responses[name + "_series"])[:, :, :, 0, :, 0]
        for k in range(R.shape[0] if R.shape[1] else 0):          # L = 1: no inner responses
            err[(name, 2 * k)] = _rel(ev[name][k, 1:R.shape[1] + 1], R[k])
    return err


@pytest.mark.parametrize("L,act", [(2, "tanh"), (3, "erf")])
def test_printed_gamma0_4_system_reproduces_the_engine(L, act):
    T = 4
    ev = deep_series_formulas(4, L).evaluate(KX1, Y1, activation=act, eta=0.1, steps=T)
    err = _errors(ev, _engine(L, act, T))
    assert max(err.values()) < 1e-10, err


@pytest.mark.parametrize("L,act", [(3, "tanh"), (2, "erf"), (1, "tanh")])
def test_printed_gamma0_4_system_more_cases(L, act, opt_in_slow):
    T = 6
    ev = deep_series_formulas(4, L).evaluate(KX1, Y1, activation=act, eta=0.1, steps=T)
    err = _errors(ev, _engine(L, act, T))
    assert max(err.values()) < 1e-10, err


def test_printed_gamma0_6_system_reproduces_the_engine(opt_in_slow):
    """gamma0^6 (12 499 kernel terms, about a minute to derive)."""
    T = 4
    ev = deep_series_formulas(6, 2).evaluate(KX1, Y1, activation="tanh", eta=0.1, steps=T)
    err = _errors(ev, _engine(2, "tanh", T, order=6), order=6)
    assert max(err.values()) < 1e-10, err


def test_order_2_terms_equal_the_moment_table():
    """The derived gamma0^2 terms against the moment form of formulas_nonlinear."""
    from effth.dmft.series.formulas_nonlinear import deep_nonlinear_formulas
    a = deep_series_formulas(2, 3).evaluate(KX1, Y1, activation="tanh", eta=0.1, steps=6)
    b = deep_nonlinear_formulas(3).evaluate(KX1, Y1, activation="tanh", eta=0.1, steps=6)
    for name in ("phi", "g", "ntk", "f"):
        assert _rel(a[name][1], b[name][1]) < 1e-13, name


def test_phi_identity_gives_the_deep_linear_series():
    """phi(z) = z: only <phi^2> = Phi and moments of phi' (= 1) survive; the printed gamma0^4
    system must give the exact deep linear coefficients (NTK closure)."""
    def ident(ds, var):
        ds = tuple(ds)
        if any(d >= 2 for d in ds):
            return 0.0
        zeros = ds.count(0)
        return 0.0 if zeros % 2 else float(np.prod(np.arange(zeros - 1, 0, -2))) * var ** (zeros // 2)

    ev = deep_series_formulas(4, 2).evaluate(KX1, Y1, activation="tanh", eta=0.1, steps=6, moment=ident)
    ser = gamma0_series(kernel=KX1, y=Y1, hidden_layers=2, eta=0.1, steps=6, order=4, closure="ntk")
    assert _rel(ev["ntk"][2], ser.coefficient(4, "ntk")[:, 0, 0]) < 1e-12
    assert _rel(ev["f"][2], ser.coefficient(4, "f")[:, 0]) < 1e-12


def test_a_wrong_term_is_rejected():
    T = 4
    ser = _engine(2, "tanh", T)
    good = deep_series_formulas(4, 2)
    printed = good.printed_terms()
    for how in ("scale", "drop"):
        terms = {k: dict(v) for k, v in printed.items()}
        key = max(terms[("g", 4)], key=lambda k: len(k[2]))        # one of the deepest networks
        if how == "scale":
            terms[("g", 4)][key] *= 0.9
        else:
            del terms[("g", 4)][key]

        class Bad(DeepSeriesFormulas):
            def printed_terms(self):
                return terms

        ev = Bad(4, 2).evaluate(KX1, Y1, activation="tanh", eta=0.1, steps=T)
        err = _errors(ev, ser)
        assert err[("ntk", 4)] > 1e-6, (how, err[("ntk", 4)])
        assert err[("ntk", 2)] < 1e-10                     # lower orders untouched


def test_terms_are_derived_not_tabulated():
    d = derive_deep_terms(4)
    assert {k for k in d} >= {("phi", 4), ("g", 4), ("A", 2), ("B", 2)}
    # every gamma0^4 kernel term carries four powers of gamma0: drivers C~, D~ (one each, order m
    # counting m more) and source corrections Phi_m, G_m (m each)
    for q in ("phi", "g"):
        for (mom, p, net), c in d[(q, 4)].items():
            power = sum(1 + int(n[1:]) if n[0] in "CD" else int(n[1:]) for n, _, _ in net if n != "I")
            assert power == 4, net


def test_text_and_latex_print_every_symbol_without_structural_placeholders():
    fm = deep_series_formulas(4, 3, activation="tanh")
    text, tex = fm.text(), fm.latex(env="align*")
    assert "\\" not in text
    for bad in ("Price", "cdots", "sum_(i+j", r"\sum_{i+j", "GaussianExpectation", "Symbol("):
        assert bad not in text and bad not in tex, bad
    for defined in ("c_m(t) = sum_s C~^l_m(t,s)", "d_m(t) = sum_s D~^l_m(t,s)", "Theta(t>s) = 1",
                    "<F>_l = E[F(phi(u)", "A^0_m = 0", "NTK closure"):
        assert defined in text, defined
    for lhs in ("Phihat^l_4(t,s) = ", "Ghat^l_4(t,s) = ", "K_4(t) = ", "Delta_4(t_(i+1)) = ",
                "A^l_2(t,s) = ", "B^(l-1)_2(t,s) = ", "C~^l_2(t,s) = "):
        assert lhs in text, lhs
    assert r"\hat\Phi^{\ell}_{4}(t,s)&=" in tex


@pytest.mark.skipif(not have_pdflatex(), reason="pdflatex not on PATH")
def test_gamma0_4_document_compiles():
    run = compile_tex(document([deep_series_formulas(4, 3, activation="tanh")]))
    assert run.ok, run.errors
    assert run.worst_overfull <= 10.0, run.overfull


def test_cli_prints_the_gamma0_4_formulas():
    from tests.test_cli import run
    code, text = run("gamma0", "--order", "4", "--depth", "3", "--activation", "tanh")
    assert code == 0 and r"\hat\Phi^{\ell}_{4}(t,s)&=" in text and "given as numbers" not in text
    for bad in (r"\mathrm{Price}", r"\cdots", r"\sum_{i+j"):
        assert bad not in text
    code, text = run("gamma0", "--order", "4", "--depth", "3", "--activation", "tanh", "--format", "text")
    assert code == 0 and "\\" not in text and "Ghat^l_4(t,s) = " in text


def test_api_latex_is_the_same_system():
    ser = gamma0_series(kernel=KX1, y=Y1, hidden_layers=2, activation="tanh", eta=0.1, steps=3,
                        order=4, closure="ntk")
    assert ser.latex(4, "f") == deep_series_formulas(4, 2, activation="tanh").latex(env="aligned")


def test_bad_input():
    with pytest.raises(DomainError, match="even"):
        deep_series_formulas(3)
    with pytest.raises(DomainError, match="hidden_layers"):
        deep_series_formulas(4, 0)
    with pytest.raises(DomainError, match="one input"):
        deep_series_formulas(4, 2).evaluate(np.eye(2), np.ones(2), activation="tanh", eta=0.1, steps=3)
    with pytest.raises(DomainError):
        deep_series_formulas(4, 2).evaluate(KX1, Y1, activation="relu", eta=0.1, steps=3)


# ------------------------------------------------------------- the printed text, read back
def _split_top(s: str) -> list:
    """``[(sign, piece)]`` at the top-level `` + `` / `` - `` (not inside brackets)."""
    out, depth, cur, sign, i = [], 0, "", 1, 0
    if s.startswith("-"):
        sign, s = -1, s[1:]
    while i < len(s):
        ch = s[i]
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if depth == 0 and s.startswith((" + ", " - "), i):
            out.append((sign, cur))
            sign, cur, i = (1 if s[i + 1] == "+" else -1), "", i + 3
            continue
        cur += ch
        i += 1
    out.append((sign, cur))
    return out


def _coef(s: str):
    from fractions import Fraction
    head, _, rest = s.partition(" ")
    try:
        return Fraction(head), rest
    except ValueError:
        return Fraction(1), s


def _moment_of(s: str) -> tuple:
    import re
    ds = []
    for tok in s.strip("<>_l").replace(">", "").split():
        m = re.fullmatch(r"phi(?:\^\((\d+)\)|('*))(?:\^(\d+))?", tok)
        k = int(m.group(1)) if m.group(1) else len(m.group(2) or "")
        ds += [k] * int(m.group(3) or 1)
    return tuple(sorted(ds))


def _network_of(s: str):
    import re
    from effth.dmft.series.formulas_deep import _canon
    names = {}
    if s.startswith("sum_("):
        head, _, s = s.partition(") ")
        for k, x in enumerate(head[5:].split(",")):
            names[x] = str(k)
    lab = lambda x: names.get(x, x)                                     # noqa: E731
    mats, fresh = [], [len(names)]
    for tok in s.split():
        m = re.fullmatch(r"(C~|D~|Phi\^\(l-1\)|G\^\(l\+1\)|delta|c|d)_?(\d*)\(([a-z]),?([a-z]?)\)(?:\^(\d+))?", tok)
        assert m, tok
        kind, order, a, b, p = m.groups()
        for _ in range(int(p or 1)):
            if kind in ("c", "d"):
                mats.append((kind.upper() + order, lab(a), str(fresh[0])))
                fresh[0] += 1
            else:
                name = {"C~": "C", "D~": "D", "Phi^(l-1)": "P", "G^(l+1)": "G", "delta": "I"}[kind]
                mats.append((name + ("" if name == "I" else order), lab(a), lab(b)))
    return _canon((), (), tuple(mats))[2]


def _read_terms(rhs: str) -> dict:
    out: dict = {}
    for sign, piece in _split_top(rhs):
        c, rest = _coef(piece)
        p = 0
        if rest.startswith("G^(l+1)_0 "):
            p, rest = 1, rest[len("G^(l+1)_0 "):]
        elif rest.startswith("(G^(l+1)_0)^"):
            p, rest = int(rest[12]), rest[14:]
        mom_txt, _, body = rest.partition(">_l ")
        mom = _moment_of(mom_txt + ">_l")
        inner = _split_top(body[1:-1]) if body.startswith("[") else [(1, body)]
        for s2, item in inner:
            c2, net = _coef(item)
            key = (mom, p, _network_of(net))
            out[key] = out.get(key, 0) + sign * s2 * c * c2
    return out


def test_the_printed_text_read_back_is_the_system():
    """Parse every Phihat, Ghat, A, B line of the text (coefficients, moments, sums over times)
    back into terms: exactly the printed terms, which reproduce the engine above.  A text with
    one coefficient changed reads back different."""
    fm = deep_series_formulas(4, 2)
    printed = fm.printed_terms()
    heads = {"Phihat^l_{m}(t,s) = ": "phi", "Ghat^l_{m}(t,s) = ": "g", "A^l_{m}(t,s) = ": "A",
             "B^(l-1)_{m}(t,s) = ": "B"}
    lines = fm.text().splitlines()
    seen = 0
    for key, terms in printed.items():
        q, m = key
        if m == 0 and q in ("phi", "g"):
            continue
        head = next(h for h, v in heads.items() if v == q).format(m=m)
        line = next(ln for ln in lines if ln.startswith(head))
        assert _read_terms(line[len(head):]) == terms, key
        seen += 1
    assert seen == 8
    line = next(ln for ln in lines if ln.startswith("Ghat^l_4(t,s) = "))
    wrong = line.replace(" 3/2 ", " 27/20 ", 1)
    assert wrong != line and _read_terms(wrong[16:]) != printed[("g", 4)]
