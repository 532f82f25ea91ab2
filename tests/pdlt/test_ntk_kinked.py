r"""NTK hierarchy of kinked activations (ReLU, leaky ReLU): :math:`H^{\{1\}}, A, B, D, F`.

Three ways:

* (a) the derived recursions of :func:`effth.pdlt.ntk_flow` with the point-mass / Leibniz pair
  tables (:func:`effth.numerics.sample_tables.leibniz_pair_tables`);
* (b) the book's exact scale-invariant solutions at criticality, PDLT (9.42), (9.44),
  (9.49)–(9.51), the exact :math:`A^{(\ell)}` whose leading term is (9.52), and the printed
  ReLU fixture (:math:`K^\star=2`, :math:`\lambda_b=\lambda_W=1`);
* (c) ensembles of finite-width ReLU networks at two inputs (the NTK simulator): the
  discrepancy falls like :math:`1/n` (fitted), and a theory with one tensor scaled by 0.9 is
  rejected by the same test.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import chi2 as chi2_dist

from effth.activations import get_activation
from effth.activations.builtin import leaky_relu
from effth.errors import DomainError
from effth.numerics.sample_tables import leibniz_pair_tables, regular_order
from effth.pdlt import ntk_flow

sys.path.insert(0, str(Path(__file__).parent))


def _single(act, depth, lam_b=1.0, lam_w=1.0, xx=1.0):
    A2 = _A(act)[0]
    c_w = 1.0 / A2
    K1 = c_w * xx
    fl = ntk_flow(K1=np.array([[K1]]), Theta1=np.array([[lam_b + lam_w * xx]]), depth=depth,
                  activation=act, c_w=c_w, c_b=0.0, lambda_b=lam_b, lambda_w=lam_w,
                  statistics=("H1", "A", "B", "D", "F"))
    out = {k: v[:, 0, 0, 0, 0] if v.ndim == 5 else v[:, 0, 0] for k, v in fl.tensors.items()}
    out["V"] = fl.kernel.V[:, 0, 0, 0, 0]
    out["K"] = fl.kernel.K[:, 0, 0]
    return out


def _A(act):
    a = get_activation(act)
    ap, am = float(a.param("a_plus")), float(a.param("a_minus"))
    return (ap ** 2 + am ** 2) / 2, (ap ** 4 + am ** 4) / 2


def test_relu_single_input_equals_the_printed_fixture():
    """ReLU, C_W = 2, x̄² = 1 (K* = 2), λ_b = λ_W = 1: the integer table of PDLT (9.42)–(9.52)."""
    fl = _single("relu", 6)
    l = np.arange(1, 7)
    book = {"K": 2 + 0 * l, "V": 20 * (l - 1), "Theta": 2 * l, "D": 7 * l * (l - 1), "F": 4 * l * (l - 1),
            "B": 4 * l * (l - 1) * (2 * l - 1) / 3, "A": l * (l - 1) * (22 * l - 5) / 6}
    for k, v in book.items():
        np.testing.assert_allclose(fl[k], v, rtol=1e-9, atol=1e-9, err_msg=k)
    # the 1/n NTK mean: K is exact (G1 = 0) and <sigma' sigma'> does not see the kernel's scale
    np.testing.assert_allclose(fl["H1"], 0.0, atol=1e-9)


@pytest.mark.parametrize("act", [leaky_relu(0.1), leaky_relu(-0.5)])
@pytest.mark.parametrize("lams", [(1.0, 1.0), (0.3, 2.0)])
def test_scale_invariant_single_input_closed_forms(act, lams):
    """PDLT (9.49)–(9.51) and the exact A (leading term (9.52)) for leaky ReLU, r = A4/A2^2."""
    lb, lw = lams
    L = 7
    fl = _single(act, L, lb, lw, xx=1.3)
    A2, A4 = _A(act)
    r = A4 / A2 ** 2
    Ks = 1.3 / A2
    kap = A2 * Ks
    c = lb + lw * kap
    l = np.arange(1, L + 1, dtype=float)
    book = {"V": (l - 1) * (3 * r - 1) * Ks ** 2,                                        # (9.42)
            "Theta": c * l,                                                              # (9.44)
            "D": l * (l - 1) / 2 * (lb * (r - 1) * Ks + lw * A2 * (4 * r - 2) * Ks ** 2),  # (9.49)
            "F": l * (l - 1) / 2 * r * c * Ks,                                           # (9.50)
            "B": l * (l - 1) * (2 * l - 1) / 6 * r * c ** 2,                             # (9.51)
            "A": l * (l - 1) * ((r - 1) * (2 * l - 1) / 6 * lb ** 2 + (r - 1) * l * kap * lb * lw
                                + ((5 * r - 3) * l - r) / 3 * kap ** 2 * lw ** 2)}
    for k, v in book.items():
        np.testing.assert_allclose(fl[k], v, rtol=1e-9, atol=1e-9, err_msg=k)
    # (9.52): A ~ l^3/3 [(r-1) lb^2 + 3(r-1) lb lw kappa + (5 A4 - 3 A2^2) lw^2 K*^2]: the flow's
    # A at l = 1..7 is a cubic in l, whose leading coefficient is this
    lead = ((r - 1) * lb ** 2 + 3 * (r - 1) * lb * lw * kap + (5 * A4 - 3 * A2 ** 2) * lw ** 2 * Ks ** 2) / 3
    coef = np.polyfit(l, fl["A"], 4)
    assert abs(coef[0]) < 1e-9 * abs(lead) and coef[1] == pytest.approx(lead, rel=1e-9)


def test_leibniz_pair_tables_exact_entries():
    """Regular atoms exact, point masses exact off the diagonal, Leibniz sums exact on it."""
    K = np.array([[2.0, 0.7], [0.7, 1.5]])
    T = leibniz_pair_tables(K, "relu", [(1, 1), (0, 2), (2, 2), (1, 3)])
    det = np.linalg.det(K)
    assert T[1, 1][0, 0] == pytest.approx(0.5, abs=1e-12)                  # <Theta Theta>
    assert T[0, 2][0, 0] == pytest.approx(0.0, abs=1e-12)                  # sigma(0) delta = 0
    assert T[2, 2][0, 1] == pytest.approx(1 / (2 * math.pi * math.sqrt(det)), rel=1e-9)
    # the arc-cosine form of <Theta_1 Theta_2>
    assert T[1, 1][0, 1] == pytest.approx((math.pi - math.acos(0.7 / math.sqrt(3.0))) / (2 * math.pi), rel=1e-9)
    for a in range(2):     # <(Theta^2)''> = 2 T13 + 2 T22 = <(z^2 - K) Theta>/K^2 = 0
        assert 2 * T[1, 3][a, a] + 2 * T[2, 2][a, a] == pytest.approx(0.0, abs=1e-10)
    assert regular_order("relu") == 1 and regular_order("step") == 0
    with pytest.raises(DomainError, match="collinear"):
        leibniz_pair_tables(np.array([[1.0, 2.0], [2.0, 4.0]]), "relu", [(2, 2)])
    with pytest.raises(DomainError, match="Dirac"):
        leibniz_pair_tables(np.eye(2), "step", [(1, 1)])


def test_ddntk_of_kinked_activations_is_refused_with_the_reason():
    with pytest.raises(DomainError, match="diverge"):
        ntk_flow(K1=np.array([[2.0]]), Theta1=np.array([[2.0]]), depth=3, activation="relu", c_w=2.0,
                 statistics=("R",))
    with pytest.raises(DomainError, match="collinear"):
        ntk_flow(K1=np.array([[1.0, 1.0], [1.0, 1.0]]), Theta1=np.eye(2) + 1, depth=3, activation="relu",
                 c_w=2.0, statistics=("A",))


# ----------------------------------------------------------------------------- simulation
DEPTH = 3
X = np.array([[1.0, 0.0], [0.6, 0.8]]) * math.sqrt(2.0)
CW, CB = [1.0, 2.0, 2.0], [0.0, 0.0, 0.0]
LB, LW = [1.0, 0.6, 0.8], [1.0, 1.2, 0.7]


def _theory(act):
    K1 = CB[0] + CW[0] * X @ X.T / 2
    Th1 = LB[0] + LW[0] * X @ X.T / 2
    fl = ntk_flow(K1=K1, Theta1=Th1, depth=DEPTH, activation=act, c_w=CW[1:], c_b=CB[1:], lambda_b=LB,
                  lambda_w=LW, statistics=("H1", "A", "B", "D", "F"), rtol=1e-10)
    return {k: v[-1] for k, v in fl.tensors.items()}


def _study(widths, sizes, seed):
    from ntk_width_study import width_study

    th = _theory("relu")
    res = width_study("relu", X, DEPTH, widths, sizes, seed, th, c_w=CW, c_b=CB, lambda_b=LB,
                      lambda_w=LW, stats=("H", "A", "B", "D", "F"), replicates=16, outputs=6)
    print("\n" + res.table())
    return res, th


def _passes(b, dof):
    """The c/n law fits (p-value > 1e-4) and, where resolved, the local exponent is 1 within 4 SE."""
    ok = b.chi2_c1 <= chi2_dist.isf(1e-4, dof)
    if abs(b.delta[0]) > 5 * b.delta_err[0]:
        ok = ok and abs(b.p - 1.0) < 4 * b.p_err
    return ok


def test_relu_two_inputs_vs_networks_one_over_n():
    """Widths 32, 64 (2 x 48000 ReLU networks, ~8 s): A, B, D, F approach the derived tensors
    like 1/n; the NTK mean matches Θ + H¹/n; A or F scaled by 0.9 is rejected."""
    from ntk_width_study import rescore

    res, th = _study((32, 64), (48000, 48000), 11)
    for s in ("A", "B", "D", "F", "H"):
        assert _passes(res.stats[s], 1), s
    for s in ("A", "B", "F"):
        assert abs(res.stats[s].delta[0]) > 5 * res.stats[s].delta_err[0], s     # the 1/n term is seen
        assert abs(res.stats[s].p - 1.0) < 4 * res.stats[s].p_err, s
    # H: within 4 SE of Θ + H1/n at both widths
    h = res.stats["H"]
    assert np.all(np.abs(h.delta) < 4 * h.delta_err)
    for s in ("A", "F"):
        assert not _passes(rescore(res, {**th, s: 0.9 * th[s]}).stats[s], 1), s


@pytest.mark.slow
def test_relu_two_inputs_vs_networks_full(opt_in_slow):
    """Widths 32–128: every statistic fits c/n + d/n² with Δ(∞) within 4 SE of 0, and each
    tensor scaled by 0.9 (D included) has Δ(∞) > 4 SE."""
    from ntk_width_study import rescore

    res, th = _study((32, 64, 128), (256000, 256000, 128000), 12)
    for s in ("A", "B", "D", "F", "H"):
        b = res.stats[s]
        assert abs(b.a) < 4 * b.a_err, s
    for s in ("A", "B", "D", "F"):
        b = rescore(res, {**th, s: 0.9 * th[s]}).stats[s]
        assert abs(b.a) > 4 * b.a_err, s
    # the 1/n correction H1 of the NTK mean is resolved: Θ alone is rejected at n = 32
    no_h1 = rescore(res, {k: v for k, v in th.items() if k != "H1"}).stats["H"]
    assert abs(no_h1.delta[0]) > 4 * no_h1.delta_err[0]
