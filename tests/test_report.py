"""``effth report``: the end-to-end job (derive, evaluate, simulate, compare) and its verdicts.

The z-scores are recomputed here from the raw arrays of the simulation (``G_rb``, ``V`` and their
``*_err``) and of the flow (``K``, ``G1``, ``V``), and deliberately wrong theories must be flagged
by the same machinery that passes the right one.
"""

from __future__ import annotations

import io
import sys

import numpy as np
import pytest

from effth.cli import main
from effth.report import Z_THRESHOLD, assess, default_inputs, run_report


@pytest.fixture(scope="module")
def resolved():
    """Depth 4, widths 16/64/256, 30 000 networks each: the 1/n correction is resolved (~1 s)."""
    return run_report(depth=4, widths=16, networks=30_000, seed=3, out=None, stream=None,
                      progress=False)


def test_quick_report_writes_files_and_reads_like_a_report(tmp_path):
    buf = io.StringIO()
    r = run_report(quick=True, out=tmp_path / "rep", stream=buf, progress=False)
    text = buf.getvalue()
    for section in ("1. derive", "2. evaluate", "3. measure", "4. compare", "5. width scaling",
                    "verdicts"):
        assert section in text
    for book in ("PDLT (4.118)", "PDLT (4.119)", "PDLT (4.115)"):
        assert book in text
    names = {p.name for p in r.files}
    assert {"report.md", "recursions.tex"} <= names
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "$$" in md and "verdicts" in md
    tex = (tmp_path / "rep" / "recursions.tex").read_text()
    assert r"\langle \sigma_{\alpha_1} \sigma_{\alpha_2} \rangle_K" in tex     # compact form
    assert r"\begin{align*}" in tex and r"\\" in tex and "multline" not in tex
    from effth.printing.tex import compile_tex, have_pdflatex
    if have_pdflatex():
        run = compile_tex(tex)
        assert run.ok and run.worst_overfull <= 10.0, (run.errors, run.overfull)
    pytest.importorskip("matplotlib")
    assert {"metric_correction.png", "vertex.png", "width_scaling.png"} <= names
    for p in r.files:
        assert p.stat().st_size > 0
    assert r.config["widths"] == (16, 64, 256) and r.config["depth"] == 3


def test_z_scores_come_from_the_simulation_standard_errors(resolved):
    r = resolved
    n = r.config["width"]
    st, fl = r.measurements[n], r.theory
    iu = np.triu_indices(r.config["inputs"])
    for layer in (2, 3, 4):
        # metric: K + G1/n_{l-1} against the Rao-Blackwellized mean metric
        theory = fl.K[layer - 1] + fl.G1[layer - 1] / n
        z = (st.G_rb[layer] - theory)[iu] / st.G_rb_err[layer][iu]
        np.testing.assert_allclose(r.comparisons[("G", n, layer)].z, z, rtol=1e-12)
        zk = (st.G_rb[layer] - fl.K[layer - 1])[iu] / st.G_rb_err[layer][iu]
        np.testing.assert_allclose(r.comparisons[("K", n, layer)].z, zk, rtol=1e-12)
        # vertex: every distinct entry is some entry of the full tensor
        zv_full = (st.V[layer] - fl.V[layer - 1]) / st.V_err[layer]
        zv = r.comparisons[("V", n, layer)].z
        assert np.all(np.isin(np.round(zv, 10), np.round(zv_full.ravel(), 10)))
        assert zv.size == 21                      # distinct entries of V for N = 3


def test_right_theory_passes_and_the_1_over_n_correction_is_resolved(resolved):
    r = resolved
    assert r.passed, "\n".join(map(str, r.verdicts))
    statuses = {v.name.split(" (")[0]: v.status for v in r.verdicts}
    assert all(s == "PASS" for s in statuses.values()), statuses
    n0 = r.config["width"]
    zk = max(r.comparisons[("K", n0, l)].max_abs_z for l in (2, 3, 4))
    zg = max(r.comparisons[("G", n0, l)].max_abs_z for l in (2, 3, 4))
    assert zk > 2 * Z_THRESHOLD and zg < Z_THRESHOLD


class _Wrong:
    """A Flow with one quantity replaced (the report must flag it)."""

    def __init__(self, flow, mode):
        self.flow, self.mode = flow, mode

    def value(self, name, layer=None, widths=None):
        if name == "G" and self.mode == "K-only":
            return self.flow.value("K", layer=layer)
        if name == "G":
            return self.flow.value("G", layer=layer, widths=widths)
        v = self.flow.value(name, layer=layer)
        return 0.9 * v if (name == "V" and self.mode == "V*0.9") else v


def test_vertex_times_0_9_is_flagged(resolved):
    _, _, verdicts = assess(_Wrong(resolved.theory, "V*0.9"), resolved.measurements)
    v = [x for x in verdicts if "vertex" in x.name]
    assert v[0].status == "FAIL", v[0]
    assert all(x.status == "PASS" for x in verdicts if "vertex" not in x.name)


def test_kernel_without_the_1_over_n_metric_is_flagged(resolved):
    _, _, verdicts = assess(_Wrong(resolved.theory, "K-only"), resolved.measurements)
    assert any(x.status == "FAIL" for x in verdicts)
    fail = [x for x in verdicts if x.status == "FAIL"]
    assert any("1/n correction" in x.name for x in fail), fail


def test_report_without_matplotlib_says_so(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    buf = io.StringIO()
    r = run_report(quick=True, out=tmp_path, stream=buf, progress=False)
    assert "matplotlib is not installed" in buf.getvalue()
    assert not any(p.suffix == ".png" for p in r.files)


def test_cli_report_quick(tmp_path):
    out = io.StringIO()
    code = main(["report", "--quick", "--out", str(tmp_path / "r"), "--no-plots",
                 "--no-progress"], out=out)
    assert code in (0, 1)                 # 1 only if a verdict failed; quick runs are weak
    assert "verdicts" in out.getvalue()
    assert (tmp_path / "r" / "report.md").exists()


@pytest.mark.parametrize("argv", [
    ["report", "--quick", "--depth", "1"],
    ["report", "--quick", "--networks", "5"],
    ["report", "--quick", "--activation", "nonsense"],
    ["report", "--quick", "--inputs", "9"],
])
def test_cli_report_bad_input_exits_2(argv, capsys, tmp_path):
    assert main(argv + ["--out", str(tmp_path)], out=io.StringIO()) == 2
    err = capsys.readouterr().err
    assert err.startswith("effth") and err.count("\n") == 1


def test_default_inputs_have_the_documented_overlaps():
    X = default_inputs(4)
    np.testing.assert_allclose(X @ X.T / 4, 0.6 ** np.abs(np.subtract.outer(range(4), range(4))),
                               atol=1e-14)


def test_plots_and_tables_show_the_worst_entries():
    from effth.compare import compare
    from effth.report import _worst
    z1 = compare(np.zeros(4), np.array([0.1, -0.9, 0.2, 0.0]), "G", stderr=np.full(4, 0.1))
    z2 = compare(np.zeros(4), np.array([0.0, 0.1, 0.5, 1.7]), "G", stderr=np.full(4, 0.1))
    assert _worst([z1, z2], 2) == [3, 1]          # max |z| over layers: 17, 9, 5, 1


def test_a_fitted_exponent_off_the_expected_order_is_a_finding():
    from types import SimpleNamespace
    from effth.report import _clean, _fit_text
    off = SimpleNamespace(slope=-0.31, slope_stderr=0.10, x=np.array([16, 64, 256]))
    on = SimpleNamespace(slope=-0.9, slope_stderr=0.10, x=np.array([16, 64, 256]))
    assert "FINDING" in _fit_text(off, 1) and "6.9 standard errors" in _fit_text(off, 1)
    assert "FINDING" not in _fit_text(on, 1)
    # round-off around an exact zero prints as 0, a small true value does not
    assert _clean(-2.22e-15, 1.0) == 0.0 and _clean(1e-9, 1.0) == 1e-9
