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
    assert "-epsilon*SampleSum(Kernel(mu_1, rho_1)*Kernel(mu_2, rho_2)*Kernel(rho_3, rho_4)" in text
    assert "/2" in text and "Kernel(mu_1, mu_2)" in text


def test_derive_c2m_and_cumulant():
    code, text = run("derive", "c2m", "--order", "3")
    assert code == 0 and r"\frac{6}{n}" in text and r"\frac{8}{n^{2}}" in text
    code, text = run("derive", "cumulant", "--order", "2", "--format", "text")
    assert code == 0 and "Moment(1, 2)" in text and "Moment(1)*Moment(2)" in text


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
    assert r"{V^{(\ell + 1)}_{(\alpha_{1}\alpha_{2})(\alpha_{3}\alpha_{4})}}" in text
    assert r"\left\langle \sigma_{\alpha_{1}} \sigma_{\alpha_{2}} \sigma_{\alpha_{3}} \sigma_{\alpha_{4}} \right\rangle_{K^{(\ell)}}" in text
    assert r"\frac{n_{\ell}}{n_{\ell-1}}" in text and "PDLT (4.119)" in text


def test_gamma0_prints_the_corrected_deep_linear_ntk_prefactor():
    """Spec §4.3: the gamma0^2 NTK prefactor is L(L+1)^2(L+2)/12 = 20 at L = 3 (seed's eq. (12): 6)."""
    code, text = run("gamma0", "--order", "2", "--depth", "3", "--linear", "--quantity", "ntk")
    assert code == 0
    assert text.startswith(r"K_{2,\mu\nu}(t,s) = 20 ")
    code, text = run("gamma0", "--order", "2", "--depth", "3", "--gradient-independent")
    assert code == 0 and text.startswith(r"K_{2,\mu\nu}(t,s) = 6 ")
    code, text = run("gamma0", "--quantity", "ntk")
    assert code == 0 and r"L \left(L + 1\right)^{2} \left(L + 2\right)" in text


def test_gamma0_two_layer_atoms_and_odd_orders():
    code, text = run("gamma0", "--order", "2", "--depth", "1", "--activation", "tanh",
                     "--quantity", "phi")
    assert code == 0 and r"\left\langle" in text and r"\sigma''_{\mu}" in text
    code, text = run("gamma0", "--order", "3", "--depth", "2")
    assert code == 0 and text.strip().endswith("= 0")


def test_gamma0_bad_input_exits_2(capsys):
    assert run("gamma0", "--order", "-2")[0] == 2
    assert "effth:" in capsys.readouterr().err
    code, text = run("gamma0", "--order", "4", "--depth", "3", "--activation", "tanh",
                     "--quantity", "phi")
    assert code == 0 and r"B_jB_j^\top=\Phi^{\ell-1}_{2j}" in text and "Price" in text
    code, text = run("gamma0", "--order", "2", "--depth", "3", "--activation", "tanh",
                     "--quantity", "phi")
    assert code == 0 and r"\Phi^{\ell-1}_{2,ab}" in text
    assert run("gamma0", "--order", "-2")[0] == 2


def test_derive_ntk_statistics_print_latex():
    import io

    from effth.cli import main

    buf = io.StringIO()
    assert main(["derive", "U", "--single-input"], out=buf) == 0
    text = buf.getvalue()
    assert text.startswith("{U^{(\\ell + 1)}") and "PDLT" in text
    buf = io.StringIO()
    assert main(["derive", "B", "--second-layer"], out=buf) == 0
    assert "B^{(\\ell)}" not in buf.getvalue()            # no layer-1 fluctuations
