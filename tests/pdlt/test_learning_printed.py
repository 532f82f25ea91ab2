"""The printed learning formulas are the computed ones.

The O(1/n) mean of trained networks (PDLT (∞.155)-(∞.160), as corrected) is printed from
SymPy expressions built from the same term tables that ``finite_width_mean`` contracts.  Here the
printed expressions are evaluated on their own (an einsum over every sample tensor, projector and
summed index they contain) and must equal the computed parts; a changed table changes both.
"""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

from effth.algebra.tensors import SampleSum, SampleTensor
from effth.pdlt.learning import finite_width as fwl
from effth.pdlt.learning.finite_width import finite_width_mean, mean_expressions, mean_latex
from effth.printing.tex import compile_tex, have_pdflatex

from ._trained_reference import symmetric_statistics

_PARTS = {r"m^{\Delta\mathrm{NTK}}_{i;\delta}": "delta_ntk", r"m^{\mathrm{dNTK}}_{i;\delta}": "dntk",
          r"m^{\mathrm{ddNTK\text{-}I}}_{i;\delta}": "ddntk_I",
          r"m^{\mathrm{ddNTK\text{-}II}}_{i;\delta}": "ddntk_II"}


def _labels_of(sym):
    name = sym.name
    if name.startswith(r"\tilde"):                  # W's three training labels in one symbol
        return tuple(sp.Symbol(f"alphatilde_{k}") for k in (4, 5, 6))
    return (sym,)


class _Evaluator:
    def __init__(self, T, y, Z, W=None):
        self.T, self.y, self.Z, self.W = T, y, Z, W
        self.P = y.shape[0]

    def _range(self, lab):
        return slice(None, self.P) if lab.name.startswith("alphatilde") else slice(None)

    def leaf(self, e):
        if isinstance(e, SampleTensor):
            stem = type(e).stem
            if stem.startswith("Z_"):
                key = stem[2:].strip("{}")
                arr = self.Z.dense(key)
            elif "widetilde" in stem:
                arr = self.Z.inverse()
            else:
                arr = self.T[stem]
            labs = tuple(e.indices)
            return arr[tuple(self._range(lb) for lb in labs)], labs
        if type(e).__name__ == "_Component":
            stem, n, s = e.args
            labs = _labels_of(s)
            arr = {"y": self.y, "W": self.W}[stem.name]
            if stem.name == "y":
                return arr, (s, n)
            return arr, (n,) + labs
        if e == sp.Symbol("n_L"):
            return np.array(float(self.y.shape[1])), ()
        if e.is_Number:
            return np.array(float(e)), ()
        raise TypeError(f"cannot evaluate {e!r}")

    def __call__(self, e):
        if isinstance(e, SampleSum):
            arr, labs = self(e.args[0])
            keep = [k for k, lb in enumerate(labs) if lb not in tuple(e.args[1])]
            arr = arr.sum(axis=tuple(k for k in range(len(labs)) if k not in keep))
            return arr, tuple(labs[k] for k in keep)
        if e.is_Add:
            vals = [self(a) for a in e.args]
            labs = vals[0][1]
            out = 0
            for arr, lb in vals:
                assert set(lb) == set(labs), (lb, labs)
                out = out + np.transpose(arr, [lb.index(x) for x in labs])
            return out, labs
        if e.is_Mul:
            vals = [self(a) for a in e.args]
            allab = list(dict.fromkeys(lb for _, ls in vals for lb in ls))
            letter = {lb: chr(97 + k) for k, lb in enumerate(allab)}
            spec = ",".join("".join(letter[x] for x in ls) for _, ls in vals)
            out = np.einsum(spec + "->" + "".join(letter[x] for x in allab), *(a for a, _ in vals))
            return out, tuple(allab)
        return self.leaf(e)


def _setup(m=2, seed=3):
    rng = np.random.default_rng(seed)
    N, P = 5, 3
    T = symmetric_statistics(N, rng)
    y = rng.standard_normal((P, m))
    eta = 0.37 * 2 / np.linalg.eigvalsh(T["Theta"][:P, :P]).max()
    return T, y, P, eta


def _printed_parts(T, y, Z):
    pairs = mean_expressions()
    ev = _Evaluator(T, y, Z)
    W_rhs = next(r for l, r in pairs if type(l).__name__ == "_Component" and l.args[0].name == "W")
    arr, labs = ev(W_rhs)
    i, a4, a5, a6 = sp.Symbol("i", integer=True), *_labels_of(sp.Symbol(r"\tilde"))
    ev.W = np.transpose(arr, [labs.index(x) for x in (i, a4, a5, a6)])
    out = {}
    for lhs, rhs in pairs:
        key = _PARTS.get(lhs.args[0].name if type(lhs).__name__ == "_Head" else None)
        if key:
            arr, labs = ev(rhs)
            d = sp.Symbol("delta")
            out[key] = np.transpose(arr, [labs.index(d), labs.index(i)])
    return out


@pytest.mark.parametrize("m", [1, 2])
def test_printed_mean_evaluates_to_the_computed_parts(m):
    T, y, P, eta = _setup(m)
    got = finite_width_mean(T, y, n_train=P, eta=eta, widths=10)
    Z = got.projectors
    printed = _printed_parts(T, y, Z)
    assert set(printed) == {"delta_ntk", "dntk", "ddntk_I", "ddntk_II"}
    Hinv = Z.inverse()
    for k, M in printed.items():
        bracketed = M - T["Theta"][:, :P] @ (Hinv @ M[:P])              # (∞.155)
        ref = got.value(k)
        assert abs(ref).max() > 1e-3
        np.testing.assert_allclose(bracketed, ref, rtol=0, atol=1e-11 * abs(ref).max(), err_msg=k)


def test_a_changed_table_changes_print_and_computation(monkeypatch):
    """Both the print and the computation read the tables: dropping the n_L B term of (∞.157)
    changes the printed line and the computed part, which still agree."""
    T, y, P, eta = _setup(2)
    before = finite_width_mean(T, y, n_train=P, eta=eta, widths=10).value("delta_ntk")
    tex = mean_latex()
    monkeypatch.setattr(fwl, "_DELTA_NTK", fwl._DELTA_NTK[:2])
    got = finite_width_mean(T, y, n_train=P, eta=eta, widths=10)
    assert abs(got.value("delta_ntk") - before).max() > 1e-3
    assert mean_latex() != tex and tex.count("B^{(L)}") == mean_latex().count("B^{(L)}") + 1
    Z = got.projectors
    M = _printed_parts(T, y, Z)["delta_ntk"]
    np.testing.assert_allclose(M - T["Theta"][:, :P] @ (Z.inverse() @ M[:P]), got.value("delta_ntk"),
                               atol=1e-11)


def test_mean_latex_goes_through_the_printer():
    tex = mean_latex()
    assert r"\sum_{\tilde{\alpha}_{1},\tilde{\alpha}_{2},\tilde{\alpha}_{3},\tilde{\alpha}_{4}}" in tex
    assert r"{A^{(L)}_{(\delta\tilde{\alpha}_{1})(\tilde{\alpha}_{2}\tilde{\alpha}_{3})}}" in tex
    assert tex.count(r"\\") >= 12                           # broken at term boundaries


@pytest.mark.skipif(not have_pdflatex(), reason="pdflatex not on PATH")
def test_mean_latex_compiles():
    doc = "\n".join([r"\documentclass[10pt]{article}", r"\usepackage[a4paper,margin=2cm]{geometry}",
                     r"\usepackage{amsmath,amssymb}", r"\begin{document}", r"\[" + mean_latex() + r"\]",
                     r"\end{document}"])
    run = compile_tex(doc)
    assert run.ok, run.errors
    assert run.worst_overfull <= 10.0


def test_bayes_log_evidence_is_printed_from_expressions():
    """log p of (6.34): the determinant and the 1/2 are SymPy objects printed by effth.latex
    (not LaTeX strings in symbol names)."""
    from effth.pdlt.learning.prediction import prediction_latex
    tex = prediction_latex("bayes")
    assert r"\log{\left(\left|{2 \pi \widetilde{K}}\right| \right)}" in tex
    assert r"- \frac{1}{2} \sum_{i}" in tex and r"\tfrac" not in tex
