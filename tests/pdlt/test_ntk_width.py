r"""Width bar of the NTK hierarchy: ensemble NTK hierarchy of depth-3 MLPs vs the leading-order theory.

For tanh and GELU at criticality, two inputs, depth 3, equal hidden widths :math:`n`, every
simulated statistic :math:`X_{\rm sim}(n)` (:math:`n\times` cumulant at the output layer, see
``docs/ntk_simulation.md``) must approach the leading-order tensor like :math:`1/n`:
the discrepancy :math:`\Delta_X(n)=\mathrm{mean}_{\rm entries}(X_{\rm sim}-X_{\rm theory})`
(standard errors from replicate ensembles, :mod:`.ntk_width_study`) must

* show no constant offset: :math:`\Delta=c/n` (fast test, widths 32, 64) or
  :math:`\Delta=c/n+d/n^2` (full study, widths 32–256) fits with p-value > 1e-4, and the
  extrapolated :math:`\Delta(\infty)` is within 4 SE of zero (a wrong leading-order tensor fails);
* when resolved at the smallest width, decay at the predicted rate: fitted exponent
  :math:`p=1` within 4 SE (fast) or within 0.25 over 32–256 (a visible :math:`1/n^2` admixture
  is allowed) and, between the two largest widths, the local exponent within 4 SE of 1;
* when not resolved, be within 4 SE of the leading-order theory at the largest width;
* for the NTK mean, match :math:`\Theta+H^{\{1\}}/n` within 4 SE at the largest widths when
  ``theory["H1"]`` is provided (the residual is :math:`O(1/n^2)`, expected exponent 2).

The NTK-sector statistics (H, A, B, D, F) are simulated with ``order=1`` and six output
neurons, P–U with ``order=3`` and three (:data:`.ntk_width_study.SECTORS`).  The theory is the
book oracle (:func:`.ntk_width_study.book_theory`); replace :func:`theory_for` by the derived
flow's layer-L tensors (plus ``"H1"``) to test it the same way.  Each test shows its power: a
theory with one tensor scaled by 0.9 is rejected.

Default run: widths 32 and 64 (about 60 s on one core).  The full study (widths 32–256, about
20 min per activation on one core) is ``-m slow`` / ``EFFTH_SLOW=1``.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import chi2 as chi2_dist

from .ntk_width_study import ALL_STATS, FULL_SIZES, rescore, standard_setup, standard_study

DEPTH = 3


def theory_for(activation: str) -> dict[str, np.ndarray]:
    """Layer-L tensors of the *derived* flow, with its 1/n correction ``"H1"`` of the NTK mean.

    (The derived flow equals the book oracle, :func:`.ntk_width_study.book_theory`, to 1e-8:
    ``test_ntk.py::test_multi_input_flow_equals_the_books_printed_recursions``.)
    """
    from effth.pdlt import ntk_flow

    cfg = standard_setup(activation, DEPTH)
    X = cfg["X"]
    K1 = cfg["c_b"][0] + cfg["c_w"][0] * X @ X.T / X.shape[1]
    Th1 = cfg["lambda_b"][0] + cfg["lambda_w"][0] * X @ X.T / X.shape[1]
    fl = ntk_flow(K1=K1, Theta1=Th1, depth=DEPTH, activation=activation, c_w=cfg["c_w"][1:],
                  c_b=cfg["c_b"][1:], lambda_b=cfg["lambda_b"], lambda_w=cfg["lambda_w"], rtol=1e-10)
    th = {k: v[-1] for k, v in fl.tensors.items()}
    th["K"], th["V"] = fl.kernel.K[-1], fl.kernel.V[-1]
    return th


def _run(act, widths, sizes, seed, replicates):
    th = theory_for(act)
    res = standard_study(act, widths, sizes, seed, th, DEPTH, replicates)
    print("\n" + res.table())
    return res, th


def _rejected(res, th, name, full):
    """Does the same test reject a theory with 0.9 x the tensor ``name``?"""
    key = "Theta" if name == "H" else name
    b = rescore(res, {**th, key: th[key] * 0.9}).stats[name]
    if full:
        return b.chi2_c2 > chi2_dist.isf(1e-4, len(res.widths) - 2) or abs(b.a) > 4 * b.a_err
    return b.chi2_c1 > chi2_dist.isf(1e-4, len(res.widths) - 1) or not abs(b.p - 1) < 4 * b.p_err


FAST = {
    # activation: statistics that must show the 1/n correction at widths 32 and 64
    "tanh": ("R", "S", "T", "U"),
    "gelu": ("B", "F", "Q", "R", "S", "T", "U"),
}
FAST_SIZES = ((64000, 64000), (24000, 24000))


@pytest.mark.parametrize("act", sorted(FAST))
def test_width_rate_fast(act, request):
    """Widths 32, 64: Δ = c/n fits every statistic (no offset); resolved ones decay with p = 1."""
    if act == "gelu":     # opt-in (about 20 s): tanh keeps the rate test of the default run
        request.getfixturevalue("opt_in_slow")
    res, th = _run(act, (32, 64), FAST_SIZES, seed=11, replicates=16)
    assert set(res.stats) == set(ALL_STATS)
    chi2_max = chi2_dist.isf(1e-4, 1)
    for name, s in res.stats.items():
        assert s.chi2_c1 < chi2_max, (name, s.delta, s.delta_err)
        if name == "H" and "H1" in th:   # Θ + H1/n at the larger width (an O(1/n²) rest is allowed)
            assert abs(s.z[-1]) < 4.0, (name, s.z)
        if s.resolved:
            assert s.p_err < 0.45 and abs(s.p - s.p_pred) < 4 * s.p_err, (name, s.p, s.p_err)
    for name in FAST[act]:
        assert res.stats[name].resolved, (name, res.stats[name].z)
        assert _rejected(res, th, name, full=False), name


FULL = {
    "tanh": ("A", "B", "Q", "R", "S", "T", "U"),
    "gelu": ("H", "A", "B", "D", "F", "P", "Q", "R", "S", "T", "U"),
}


@pytest.mark.slow
@pytest.mark.parametrize("act", sorted(FULL))
def test_width_study_full(act, opt_in_slow):
    """Widths 32–256 (~20 min per activation on one core)."""
    res, th = _run(act, (32, 64, 128, 256), FULL_SIZES, seed=4, replicates=32)
    chi2_max = chi2_dist.isf(1e-4, 2)
    for name, s in res.stats.items():
        # a smooth 1/n expansion without constant offset: Δ = c/n + d/n² fits ...
        assert s.chi2_c2 < chi2_max, (name, s.delta, s.delta_err)
        # ... and the extrapolated n -> infinity discrepancy is zero
        assert abs(s.a) < 4 * s.a_err, (name, s.a, s.a_err)
        if name == "H" and "H1" in th:   # Θ + H1/n at the two largest widths
            assert np.all(np.abs(s.z[-2:]) < 4.0), (name, s.z)
        if s.resolved:
            # effective exponent over 32..256 (1/n² admixture allowed) and local one at 128..256
            assert abs(s.p - s.p_pred) < 0.25, (name, s.p, s.p_err)
            if abs(s.z[-1]) > 3 and abs(s.z[-2]) > 3:
                assert abs(s.p_hi - s.p_pred) < 4 * s.p_hi_err, (name, s.p_hi, s.p_hi_err)
        else:
            # unresolved: within 4 SE of the leading-order theory at the largest width
            assert abs(s.z[-1]) < 4.0, (name, s.z)
    for name in FULL[act]:
        if name == "H" and "H1" in th:
            continue          # with H1 the NTK mean's 1/n part is predicted: nothing left to resolve
        assert res.stats[name].resolved, (name, res.stats[name].z)
        assert _rejected(res, th, name, full=True), name
