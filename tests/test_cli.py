"""The effth command line, called in-process and once as a real subprocess."""

from __future__ import annotations

import io
import math
import subprocess
import sys

import pytest

from effth.cli import main


def run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out)
    return code, out.getvalue()


def test_derive_connected_four_point_ch4_has_three_neuron_channels():
    code, text = run("derive", "connected-four-point", "--convention", "ch4")
    assert code == 0
    for channel in (r"\delta_{i_{1} i_{2}} \delta_{i_{3} i_{4}}", r"\delta_{i_{1} i_{3}} \delta_{i_{2} i_{4}}",
                    r"\delta_{i_{1} i_{4}} \delta_{i_{2} i_{3}}"):
        assert channel in text
    assert text.count("v^{(") == 3


def test_derive_two_point_ch1_is_book_1_74():
    code, text = run("derive", "two-point", "--convention", "ch1", "--format", "text")
    assert code == 0
    # plain text, PDLT (1.74): K_{mu1 mu2} - (eps/2) sum K K K V
    assert "-1/2 ε Σ_{ρ1,ρ2,ρ3,ρ4 ∈ D} K_μ1ρ1 K_μ2ρ2 K_ρ3ρ4 V^ρ1ρ2ρ3ρ4" in text
    assert "+ K_μ1μ2" in text and "\\" not in text and "Kernel(" not in text


def test_derive_c2m_and_cumulant():
    code, text = run("derive", "c2m", "--order", "3")
    assert code == 0 and r"\frac{6}{n}" in text and r"\frac{8}{n^{2}}" in text
    code, text = run("derive", "cumulant", "--order", "2", "--format", "text")
    assert code == 0 and text.strip() == "-E[z_1] E[z_2] + E[z_1 z_2]"


def test_wick_counts():
    code, text = run("wick", "6")
    assert code == 0 and "15 pairings" in text
    assert "3: 1" in text and "2: 6" in text and "1: 8" in text


def test_activations_lists_builtins():
    code, text = run("activations")
    assert code == 0
    for name in ("relu", "tanh", "gelu", "swish", "erf", "step"):
        assert name in text


def test_expect_relu_closed_form_matches_arc_cosine():
    code, text = run("expect", "sigma(1)*sigma(2)", "--activation", "relu", "--kernel", "1,0.5;0.5,1",
                     "--format", "text")
    assert code == 0
    exact = math.sqrt(3) / (4 * math.pi) + 1 / 6  # (sin θ + (π-θ)cos θ)/2π at θ = π/3
    assert float(text) == pytest.approx(exact, rel=1e-13)


@pytest.mark.parametrize(
    "argv",
    [
        ("expect", "sigma(1)*sigma(2)", "--activation", "relu", "--kernel", "1,2;2,1"),  # not PSD
        ("expect", "sigma(1)*sigma(2)", "--activation", "nonsense", "--kernel", "1,0;0,1"),
        ("expect", "sigma(1)*sigma(3)", "--activation", "tanh", "--kernel", "1,0;0,1"),  # sample 3 missing
    ],
)
def test_expect_bad_input_exits_2_with_message(argv, capsys):
    code, _ = run(*argv)
    assert code == 2
    assert "effth:" in capsys.readouterr().err


def test_derive_rejects_bad_order(capsys):
    assert run("derive", "cumulant", "--order", "0")[0] == 2


def test_console_script_runs_as_subprocess():
    proc = subprocess.run([sys.executable, "-m", "effth.cli", "derive", "c2m", "--order", "2"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert r"\frac{2}{n}" in proc.stdout


def test_derive_vertex_recursion_prints_book_symbols():
    code, text = run("derive", "V")
    assert code == 0
    assert r"{V^{(\ell+1)}_{(\alpha_1\alpha_2)(\alpha_3\alpha_4)}}" in text
    assert r"\langle \sigma_{\alpha_1} \sigma_{\alpha_2}\, \sigma_{\alpha_3} \sigma_{\alpha_4} \rangle_{K^{(\ell)}}" in text
    assert r"\frac{n_{\ell}}{n_{\ell-1}}" in text and "PDLT (4.119)" in text


def test_derive_residual_prints_the_skip_connection(tmp_path):
    """``--residual``: PDLT (B.11) with gamma and xi, and the three-point vertex T (not the
    ddNTK T); the standalone document compiles."""
    code, text = run("derive", "K", "--residual")
    assert code == 0 and "PDLT (B.11)" in text
    assert r"{\gamma^{(\ell+1)}}^2 {K^{(\ell)}_{\alpha_1\alpha_2}}" in text
    assert r"{\xi^{(\ell+1)}}^2" in text
    code, text = run("derive", "T", "--residual")
    assert code == 0 and r"{T^{(\ell+1)}_{(\alpha_1\alpha_2)\alpha_3}}" in text
    assert r"{\gamma^{(\ell+1)}}^3" in text
    from effth.printing.tex import compile_tex, have_pdflatex
    if have_pdflatex():
        out = tmp_path / "k.tex"
        assert run("derive", "K", "--residual", "--standalone", "--out", str(out))[0] == 0
        run_ = compile_tex(out.read_text())
        assert run_.ok, run_.errors


def test_gamma0_prints_the_corrected_deep_linear_ntk_prefactor():
    """The gamma0^2 NTK prefactor of a deep linear net with L hidden layers is L(L+1)^2(L+2)/12:
    20 at L = 3 (= 3*16*5/12); Bordelon & Pehlevan (2022), eq. (12), prints L(L+1)/2 = 6, the
    gradient-independence value.  --depth counts weight layers: --depth 4 is L = 3."""
    for size in (("--hidden-layers", "3"), ("--depth", "4")):
        code, text = run("gamma0", "--order", "2", *size, "--linear", "--quantity", "ntk")
        assert code == 0
        assert text.startswith(r"K_{2,\mu\nu}(t,s) = 20 ")
        code, text = run("gamma0", "--order", "2", *size, "--gradient-independent")
        assert code == 0 and text.startswith(r"K_{2,\mu\nu}(t,s) = 6 ")
    code, text = run("gamma0", "--quantity", "ntk")
    assert code == 0 and r"L \left(L + 1\right)^{2} \left(L + 2\right)" in text


def test_gamma0_two_layer_atoms_and_odd_orders():
    code, text = run("gamma0", "--order", "2", "--hidden-layers", "1", "--activation", "tanh",
                     "--quantity", "phi")
    assert code == 0 and r"\left\langle" in text and r"\sigma''_{\mu}" in text
    code, text = run("gamma0", "--order", "3", "--hidden-layers", "2")
    assert code == 0 and text.strip().endswith("= 0")


def test_gamma0_bad_input_exits_2(capsys):
    assert run("gamma0", "--order", "-2")[0] == 2
    assert "effth:" in capsys.readouterr().err
    code, text = run("gamma0", "--order", "4", "--hidden-layers", "3", "--activation", "tanh",
                     "--quantity", "phi")
    assert code == 0 and "Price" not in text and r"\cdots" not in text
    assert r"\hat\Phi^{\ell}_{4}(t,s)&=" in text and "given as numbers" not in text
    code, text = run("gamma0", "--order", "2", "--depth", "4", "--activation", "tanh",
                     "--quantity", "phi")
    assert code == 0 and r"\Phi^{\ell-1}_{2,ab}" in text
    assert run("gamma0", "--order", "-2")[0] == 2


def test_derive_ntk_statistics_print_latex():
    import io

    from effth.cli import main

    buf = io.StringIO()
    assert main(["derive", "U", "--single-input"], out=buf) == 0
    text = buf.getvalue()
    assert text.startswith("{U^{(\\ell+1)}") and "PDLT" in text
    buf = io.StringIO()
    assert main(["derive", "B", "--second-layer"], out=buf) == 0
    assert "B^{(\\ell)}" not in buf.getvalue()            # no layer-1 fluctuations


# ------------------------------------------------------------------ bad input: exit 2, one line
def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("effth") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("argv, needle", [
    (("gamma0", "--activation", "foo"), "unknown activation"),
    (("gamma0", "--activation", "relu", "--hidden-layers", "2"), "smooth"),
    (("gamma0", "--depth", "4", "--hidden-layers", "3"), "not allowed with"),
    (("gamma0", "--hidden-layers", "3", "--layer", "4"), "1..3"),
    (("gamma0", "--depth", "4", "--layer", "4"), "1..3"),
    (("gamma0", "--depth", "1"), "--depth"),
    (("derive", "cumulant", "--order", "12"), "at most 8"),
    (("derive", "connected-four-point", "--order", "5"), "at most 2"),
    (("derive", "K", "--single-input", "--second-layer"), "not both"),
    (("derive", "P", "--residual"), "not derived"),
    (("derive", "K", "--residual", "--single-input"), "does not combine"),
    (("wick", "40"), "0..14"),
    (("expect", "sigma(1,1.5)*sigma(2)", "--activation", "tanh", "--kernel", "1,0;0,1"),
     "derivative order"),
    (("expect", "sigma(1)*", "--activation", "tanh", "--kernel", "1,0;0,1"), "cannot parse"),
    (("expect", "sigma(1)", "--activation", "tanh", "--kernel", "1,a"), "--kernel"),
    (("expect", "sigma(1)", "--activation", "tanh", "--kernel", "1,0;0"), "--kernel"),
    (("expect", "z(1)**0.5", "--activation", "tanh", "--kernel", "1"), "exponent"),
    (("expect", "1/0", "--activation", "tanh", "--kernel", "1"), "not finite"),
    (("expect", "relu(z(1))", "--activation", "tanh", "--kernel", "1"), "relu"),
    (("expect", "sigma(1)", "--activation", "monomial", "--kernel", "1"), "degree"),
    (("expect", "sigma(1)", "--activation", "tanh", "--kernel", "1", "--digits", "99"), "digits"),
    (("bogus",), "invalid choice"),
])
def test_bad_input_exits_2_with_one_line(argv, needle, capsys):
    assert run(*argv)[0] == 2
    assert needle in _one_line_error(capsys)


@pytest.mark.parametrize("payload", [
    "__import__('pathlib').Path({path!r}).touch()",
    "sigma(1)*__import__('pathlib').Path({path!r}).touch()",
    "(lambda: __import__('pathlib').Path({path!r}).touch())()",
    "[c for c in ().__class__.__bases__[0].__subclasses__()]",
    "sigma(1).__class__",
])
def test_expect_never_executes_the_integrand(payload, tmp_path, capsys):
    target = tmp_path / "pwned"
    text = payload.format(path=str(target))
    assert run("expect", text, "--activation", "tanh", "--kernel", "1,0;0,1")[0] == 2
    _one_line_error(capsys)
    assert run("expect", "sigma(1)", "--activation", text, "--kernel", "1,0;0,1")[0] == 2
    _one_line_error(capsys)
    assert not target.exists()


def test_expect_accepts_what_its_help_invites():
    # registry aliases, parameterized families, expressions in z, the activation by its name
    code, text = run("expect", "sigma(1)*sigma(2)", "--activation", "ReLU", "--kernel",
                     "1,0.5;0.5,1", "--format", "text")
    assert code == 0 and float(text) == pytest.approx(math.sqrt(3) / (4 * math.pi) + 1 / 6, rel=1e-13)
    # sigma = z + z^3 at K = [[1, r], [r, 1]], Wick (PDLT (1.45)): E[z1 z2] = r,
    # E[z1 z2^3] = E[z1^3 z2] = 3r, E[z1^3 z2^3] = 9r + 6r^3; total 16r + 6r^3 = 8.75 at r = 1/2
    code, text = run("expect", "sigma(1)*sigma(2)", "--activation", "z + z**3", "--kernel",
                     "1,0.5;0.5,1", "--format", "text")
    assert code == 0 and float(text) == pytest.approx(8.75, rel=1e-12)
    # leaky ReLU with slope a at K = I: independent samples, E[s(z)]^2 = ((1-a)/sqrt(2 pi))^2
    code, text = run("expect", "sigma(1)*sigma(2)", "--activation", "leaky_relu(slope=0.1)",
                     "--kernel", "1,0;0,1", "--format", "text")
    assert code == 0 and float(text) == pytest.approx(0.9 ** 2 / (2 * math.pi), rel=1e-12)
    code, text = run("expect", "tanh(z(1))*sigma(2, 1) + 0.5", "--activation", "tanh",
                     "--kernel", "1,0;0,1", "--format", "text")
    assert code == 0 and float(text) == pytest.approx(0.5, abs=1e-12)   # <tanh z> = 0
    code, text = run("expect", "z(1)**2", "--activation", "tanh", "--kernel", "2.5",
                     "--format", "text")
    assert code == 0 and float(text) == pytest.approx(2.5, rel=1e-13)


def test_help_cites_papers_not_internal_notes(capsys):
    for argv in (("gamma0", "--help"), ("expect", "--help"), ("report", "--help"),
                 ("derive", "--help"), ("--help",)):
        assert run(*argv)[0] == 0
        text = capsys.readouterr().out
        assert "spec" not in text.lower().replace("special", "") and "seed 0" not in text
    assert run("gamma0", "--help")[0] == 0
    text = capsys.readouterr().out
    assert "Bordelon & Pehlevan (2022)" in text and "even order" in text


def _csv(tmp_path, name, rows):
    path = tmp_path / name
    path.write_text("\n".join(", ".join(repr(v) for v in r) for r in rows) + "\n")
    return str(path)


def test_predict_reproduces_the_books_relu_posterior(tmp_path):
    """PDLT §6.3 worked example (ReLU, L = 3, C_W = 2, C_b = 0): log p(y) = -2.198197934 and the
    posterior mean 0.79549854, 0.733184 printed in the book."""
    tr = _csv(tmp_path, "train.csv", [[1.0, 0.0, 1.0], [0.0, 1.0, 0.5]])
    te = _csv(tmp_path, "test.csv", [[0.5 ** 0.5, 0.5 ** 0.5], [0.6, -0.8]])
    code, text = run("predict", tr, te, "--activation", "relu", "--depth", "3", "--c-w", "2",
                     "--method", "bayes", "--digits", "10")
    assert code == 0
    assert "log evidence (6.34): -2.198197934" in text
    rows = [line.split(", ") for line in text.splitlines() if not line.startswith("#")]
    assert float(rows[0][1]) == pytest.approx(0.79549854, abs=1e-8)
    assert float(rows[1][1]) == pytest.approx(0.733184, abs=1e-6)
    code, gd = run("predict", tr, te, "--activation", "tanh", "--depth", "4")
    assert code == 0 and "(10.40)-(10.41)" in gd


@pytest.mark.parametrize("test_rows, match", [([[0.1, 0.2, 0.3]], "columns"), (None, "cannot read")])
def test_predict_bad_input_exits_2(tmp_path, capsys, test_rows, match):
    tr = _csv(tmp_path, "train.csv", [[1.0, 0.0, 1.0], [0.0, 1.0, 0.5]])
    te = _csv(tmp_path, "test.csv", test_rows) if test_rows else str(tmp_path / "missing.csv")
    assert main(["predict", tr, te, "--activation", "relu", "--depth", "3"]) == 2
    assert match in capsys.readouterr().err


def test_expect_prints_the_labels_as_typed_and_exact_zeros():
    code, text = run("expect", "sigma(1,1)*sigma(2,1)", "--activation", "tanh", "--kernel", "1,0.5;0.5,1")
    assert code == 0 and r"\sigma'_{1} \sigma'_{2}" in text and "_{0}" not in text
    # tanh is odd: sigma' sigma'' changes sign under z -> -z, so its expectation is exactly 0
    code, text = run("expect", "sigma(1,1)*sigma(2,2)", "--activation", "tanh", "--kernel", "1,0.5;0.5,1")
    assert code == 0 and text.strip().endswith("= 0")
    # not for an even integrand, nor for an activation without parity
    code, text = run("expect", "sigma(1)*sigma(2)", "--activation", "tanh", "--kernel", "1,0.5;0.5,1")
    assert not text.strip().endswith("= 0")
    code, text = run("expect", "sigma(1)*z(1)", "--activation", "relu", "--kernel", "1,0.5;0.5,1")
    assert text.strip().endswith("= 0.5")
