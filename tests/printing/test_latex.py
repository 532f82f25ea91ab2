"""Golden LaTeX strings in PDLT notation (exact-string tolerance class)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import sympy as sp

from effth.algebra.expectation import GaussianExpectation, sigma, z
from effth.algebra.indices import alpha, beta, c_b, c_w, ell, gamma0, lambda_w, neuron, width
from effth.algebra.tensors import (
    FourPointVertex,
    InverseKernel,
    InverseMetric,
    Kernel,
    KernelMatrix,
    Metric,
    NLOMetric,
    Propagator,
    QuadraticCoupling,
    QuarticCoupling,
    RaisedFourPointVertex,
    SampleSum,
    SymmetricQuarticCoupling,
)
from effth.printing import EffthLatexPrinter, init_printing, latex

a1, a2, a3, a4 = (alpha(k) for k in range(1, 5))
b1, b2 = beta(1), beta(2)
KM = KernelMatrix(Kernel, ell)
A12 = r"\alpha_{1}\alpha_{2}"

TWO_INDEX = [
    (Kernel, rf"{{K^{{(\ell)}}_{{{A12}}}}}", rf"{{K_{{{A12}}}}}"),
    (InverseKernel, rf"{{K_{{(\ell)}}^{{{A12}}}}}", rf"{{K^{{{A12}}}}}"),
    (Metric, rf"{{G^{{(\ell)}}_{{{A12}}}}}", rf"{{G_{{{A12}}}}}"),
    (InverseMetric, rf"{{G_{{(\ell)}}^{{{A12}}}}}", rf"{{G^{{{A12}}}}}"),
    (NLOMetric, rf"{{G^{{\{{1\}}(\ell)}}_{{{A12}}}}}", rf"{{G^{{\{{1\}}}}_{{{A12}}}}}"),
    (QuadraticCoupling, rf"{{g_{{(\ell)}}^{{{A12}}}}}", rf"{{g^{{{A12}}}}}"),
    (Propagator, rf"{{g^{{(\ell)}}_{{{A12}}}}}", rf"{{g_{{{A12}}}}}"),
]

PAIRS = r"(\alpha_{1}\alpha_{2})(\alpha_{3}\alpha_{4})"
FOUR_INDEX = [
    (FourPointVertex, rf"{{V^{{(\ell)}}_{{{PAIRS}}}}}"),
    (RaisedFourPointVertex, rf"{{V_{{(\ell)}}^{{{PAIRS}}}}}"),
    (QuarticCoupling, rf"{{v_{{(\ell)}}^{{{PAIRS}}}}}"),
    (SymmetricQuarticCoupling, r"{V_{(\ell)}^{\alpha_{1}\alpha_{2}\alpha_{3}\alpha_{4}}}"),
]


@pytest.mark.parametrize(("cls", "with_layer", "without_layer"), TWO_INDEX)
def test_two_index_tensors(cls, with_layer, without_layer):
    assert latex(cls(a1, a2, ell)) == with_layer
    assert latex(cls(a2, a1, ell)) == with_layer  # canonical order
    assert latex(cls(a1, a2)) == without_layer
    # powers: braced base, never a double superscript
    assert latex(cls(a1, a2, ell) ** 2) == f"{with_layer}^{{2}}"
    assert sp.latex(cls(a1, a2, ell) ** 2) == f"{with_layer}^{{2}}"  # sympy's printer too


def test_kernel_power_golden():
    assert latex(Kernel(a1, a2, ell) ** 2) == r"{K^{(\ell)}_{\alpha_{1}\alpha_{2}}}^{2}"
    assert latex(NLOMetric(a1, a2, ell)) == r"{G^{\{1\}(\ell)}_{\alpha_{1}\alpha_{2}}}"


@pytest.mark.parametrize(("cls", "expected"), FOUR_INDEX)
def test_four_index_tensors(cls, expected):
    assert latex(cls(a1, a2, a3, a4, ell)) == expected
    assert latex(cls(a1, a2, a3, a4, ell) ** 3) == f"{expected}^{{3}}"


def test_vertex_golden():
    assert latex(FourPointVertex(a1, a2, a3, a4, ell)) == (
        r"{V^{(\ell)}_{(\alpha_{1}\alpha_{2})(\alpha_{3}\alpha_{4})}}")
    mu, nu, rho, lam = sp.symbols("mu nu rho lambda")
    assert latex(SymmetricQuarticCoupling(mu, nu, rho, lam)) == r"{V^{\lambda\mu\nu\rho}}"


def test_kernel_matrix_labels():
    assert latex(KM) == r"K^{(\ell)}"
    assert latex(KernelMatrix(Metric, ell + 1)) == r"G^{(\ell + 1)}"
    assert latex(KernelMatrix(NLOMetric, ell)) == r"G^{\{1\}(\ell)}"
    assert latex(KernelMatrix(InverseKernel, ell)) == r"K_{(\ell)}"
    assert latex(KernelMatrix(Kernel)) == "K"


def test_sample_sum():
    s = SampleSum(Kernel(b1, b2, ell) * FourPointVertex(a1, a2, b1, b2, ell), b1, b2)
    assert latex(s) == (r"\sum_{\beta_{1},\beta_{2}} {V^{(\ell)}_{(\alpha_{1}\alpha_{2})(\beta_{1}\beta_{2})}}"
                        r" {K^{(\ell)}_{\beta_{1}\beta_{2}}}")
    s2 = SampleSum(Kernel(b1, b2, ell) + Metric(b1, b2, ell), b1, b2)
    assert latex(s2) == (r"\sum_{\beta_{1},\beta_{2}} \left({K^{(\ell)}_{\beta_{1}\beta_{2}}}"
                         r" + {G^{(\ell)}_{\beta_{1}\beta_{2}}}\right)")


def test_layer_symbols():
    assert latex(width(ell - 1)) == r"n_{\ell - 1}"
    assert latex(c_w(ell + 1)) == r"{C_{W}^{(\ell + 1)}}"
    assert latex(c_b(ell)) == r"{C_{b}^{(\ell)}}"
    assert latex(lambda_w(ell)) == r"{\lambda_{W}^{(\ell)}}"
    assert sp.latex(c_w(ell + 1) ** 2) == r"{C_{W}^{(\ell + 1)}}^{2}"  # sympy's own printer too
    assert latex(c_w(ell + 1) ** 2) == r"{C_{W}^{(\ell + 1)}}^{2}"
    assert latex(width(ell) ** 2) == r"n_{\ell}^{2}"
    assert latex(width(ell) / width(ell - 1)) == r"\frac{n_{\ell}}{n_{\ell - 1}}"
    assert latex(gamma0**2) == r"\gamma_{0}^{2}"


def test_kronecker_delta_of_neuron_indices():
    i1, i2 = neuron("i", 1), neuron("i", 2)
    assert latex(sp.KroneckerDelta(i1, i2)) == r"\delta_{i_{1} i_{2}}"
    assert latex(sp.KroneckerDelta(neuron("j"), neuron("k"))) == r"\delta_{j k}"


def test_activation_factors_and_variables():
    assert latex(sigma(a1)) == r"\sigma_{\alpha_{1}}"
    assert latex(sigma(a1, 1)) == r"\sigma'_{\alpha_{1}}"
    assert latex(sigma(a1, 2)) == r"\sigma''_{\alpha_{1}}"
    assert latex(sigma(a1, 3)) == r"\sigma'''_{\alpha_{1}}"
    assert latex(sigma(a1, 4)) == r"\sigma^{(4)}_{\alpha_{1}}"
    assert latex(sigma(a1, 1, name="phi")) == r"\phi'_{\alpha_{1}}"
    assert latex(z(a1)) == r"z_{\alpha_{1}}"
    assert latex(z(a1) ** 2) == r"z_{\alpha_{1}}^{2}"
    assert latex(sigma(a1) ** 2) == r"\sigma_{\alpha_{1}}^{2}"
    assert latex(sigma(a1, 1) ** 2) == r"{\sigma'_{\alpha_{1}}}^{2}"
    assert latex(sigma(a1, 4) ** 2) == r"{\sigma^{(4)}_{\alpha_{1}}}^{2}"


def test_atoms():
    e = GaussianExpectation(sigma(a2) * sigma(a1), KM)
    assert latex(e) == r"\left\langle \sigma_{\alpha_{1}} \sigma_{\alpha_{2}} \right\rangle_{K^{(\ell)}}"
    d = GaussianExpectation(sigma(a1, 4) * sigma(a1, 1) ** 2 * sigma(a2, 2) * z(a3) ** 2 * z(a1), KM)
    assert latex(d) == (r"\left\langle {\sigma'_{\alpha_{1}}}^{2} \sigma^{(4)}_{\alpha_{1}} "
                        r"\sigma''_{\alpha_{2}} z_{\alpha_{1}} z_{\alpha_{3}}^{2} \right\rangle_{K^{(\ell)}}")
    w = GaussianExpectation(sigma(a1) * sigma(a2) * (z(b1) * z(b2) - Kernel(b1, b2, ell)), KM)
    assert latex(w) == (r"\left\langle \sigma_{\alpha_{1}} \sigma_{\alpha_{2}} \left(z_{\beta_{1}} z_{\beta_{2}}"
                        r" - {K^{(\ell)}_{\beta_{1}\beta_{2}}}\right) \right\rangle_{K^{(\ell)}}")
    g = GaussianExpectation(sigma(a1) * sigma(a2), KernelMatrix(Metric, ell))
    assert latex(g) == r"\left\langle \sigma_{\alpha_{1}} \sigma_{\alpha_{2}} \right\rangle_{G^{(\ell)}}"
    assert latex(e**2) == (r"\left\langle \sigma_{\alpha_{1}} \sigma_{\alpha_{2}} \right\rangle_{K^{(\ell)}}^{2}")


def test_kernel_recursion_book_form():
    """PDLT (4.118): coefficients first, as in the book."""
    rec = c_b(ell + 1) + c_w(ell + 1) * GaussianExpectation(sigma(a1) * sigma(a2), KM)
    assert latex(rec) == (r"{C_{W}^{(\ell + 1)}} \left\langle \sigma_{\alpha_{1}} \sigma_{\alpha_{2}}"
                          r" \right\rangle_{K^{(\ell)}} + {C_{b}^{(\ell + 1)}}")
    v = -c_w(ell + 1) ** 2 * GaussianExpectation(sigma(a1) * sigma(a2), KM) * GaussianExpectation(
        sigma(a3) * sigma(a4), KM) / (4 * width(ell - 1))
    assert latex(v) == (r"- \frac{{C_{W}^{(\ell + 1)}}^{2}}{4 n_{\ell - 1}} \left\langle \sigma_{\alpha_{1}}"
                        r" \sigma_{\alpha_{2}} \right\rangle_{K^{(\ell)}} \left\langle \sigma_{\alpha_{3}}"
                        r" \sigma_{\alpha_{4}} \right\rangle_{K^{(\ell)}}")


def test_repr_latex_and_printer_class():
    e = c_w(ell + 1) * GaussianExpectation(sigma(a1) * sigma(a2), KM)
    r = e._repr_latex_()
    assert r.startswith(r"$\displaystyle ") and r.endswith("$")
    assert r"\left\langle \sigma_{\alpha_{1}} \sigma_{\alpha_{2}} \right\rangle_{K^{(\ell)}}" in r
    assert EffthLatexPrinter().doprint(e) == latex(e)
    assert latex(e, mode="inline").startswith("$")


def test_init_printing_uses_our_printer(monkeypatch):
    seen = {}

    def fake_init_printing(**kwargs):
        seen.update(kwargs)

    monkeypatch.setattr(sp, "init_printing", fake_init_printing)
    init_printing(use_latex="mathjax")
    assert seen["latex_printer"] is latex and seen["use_latex"] == "mathjax"


SCRIPT = textwrap.dedent(
    r"""
    import sympy as sp
    from effth.algebra.expectation import GaussianExpectation, sigma, z, stein, expect
    from effth.algebra.indices import alpha, beta, ell, c_w, c_b, width
    from effth.algebra.tensors import Kernel, KernelMatrix, FourPointVertex, SampleSum
    from effth.printing import latex
    a = [alpha(k) for k in range(1, 5)]
    b = [beta(k) for k in range(1, 5)]
    KM = KernelMatrix(Kernel, ell)
    F = sigma(a[0]) * sigma(a[1])
    e = expect(F * (z(a[2]) * z(a[3]) - Kernel(a[2], a[3], ell)) * (z(a[0])**2 - Kernel(a[0], a[0], ell)), KM)
    x = c_b(ell + 1) + c_w(ell + 1) * stein(e) / width(ell - 1)
    x += SampleSum(FourPointVertex(*b, ell) * GaussianExpectation(F * z(b[0]) * z(b[1]), KM), *b)
    print(latex(x))
    print(sp.srepr(x))
    from effth.codegen import compile_expression
    y = c_b(ell + 1) + c_w(ell + 1) * stein(expect(sigma(0) * sigma(1) * z(0) * z(1), KM)) ** 2
    print(compile_expression(y, kernel=KM, activation="tanh", params=[c_w(ell + 1), c_b(ell + 1)]).source)
    """
)


def test_output_independent_of_hash_seed():
    """LaTeX, srepr and generated code are identical under two PYTHONHASHSEEDs."""
    outs = []
    for seed in ("0", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        res = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env,
                             timeout=120, check=True)
        outs.append(res.stdout)
    assert outs[0] == outs[1]
    assert r"\left\langle" in outs[0]
