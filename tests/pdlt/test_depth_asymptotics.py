r"""Depth asymptotics of the NTK hierarchy (PDLT §9.2–§9.3, §11.3) as an API.

(a) :func:`ntk_asymptotics` derives each class's laws from the activation's class data;
(b) the book's published coefficients (typed here from the book, not from the code);
(c) effth's own derived single-input recursions iterated to large depth
(:func:`iterate_ntk_single_input`): fitted exponents with an error bar, and the flow/law ratio
approaching 1 at the subleading rate; a law with its coefficient scaled by 0.9 fails the same test.
"""

from __future__ import annotations


import numpy as np
import pytest
import sympy as sp

from effth.activations.builtin import leaky_relu
from effth.errors import DomainError
from effth.pdlt import iterate_ntk_single_input, measure_ntk_asymptotics, ntk_asymptotics
from effth.pdlt.depth_asymptotics import MeasuredLaw


# ----------------------------------------------------------------------------- (b) book values
def test_tanh_published_ratios():
    """tanh, λ̃_b = λ̃_W = 1 (c = 3/2, p⊥ = 1): PDLT (9.67), (9.81)–(9.86), (11.100), (11.102)."""
    a = ntk_asymptotics("tanh", lambda_b=1, lambda_w=1)
    r = a.ratios
    assert a.p_perp == 1
    assert r["V/(nK^2)"] == sp.Rational(2, 3)
    assert r["F/(nK Theta)"] == sp.Rational(1, 4)
    assert r["B/(n Theta^2)"] == sp.Rational(1, 3)
    assert r["P/(n Theta^2)"] == sp.Rational(-1, 12)
    assert r["Q/(n Theta^2)"] == -sp.Rational(1, 16) / sp.Rational(3, 2)     # -λ̃_b/(16c)
    # footnote 4 of ch. 9: for p⊥ = 1, D and A do not depend on λ̃_W at leading order (X = λ̃_b)
    b = ntk_asymptotics("tanh", lambda_b=1, lambda_w=7)
    assert b.laws["D"].coeff == a.laws["D"].coeff and b.laws["A"].coeff == a.laws["A"].coeff
    assert a.laws["K"].coeff == sp.Rational(1, 2) and a.laws["V"].coeff == sp.Rational(1, 6)
    assert a.laws["B"].p == -1 and a.laws["Theta"].p == 0


def test_scale_invariant_published_coefficients():
    """ReLU (r = 2): V ≃ 5 K*² ℓ (9.42); the ReLU special case of (9.52),
    A ≃ ℓ³ (7K*²λ_W² + 6K*λ_Wλ_b + 4λ_b²)/12; linear (r = 1): A ≃ (2/3) K*² λ_W² ℓ³."""
    Ks, lb, lw = 3, sp.Rational(1, 2), 2
    a = ntk_asymptotics("relu", lambda_b=0.5, lambda_w=2, K1=3)
    assert a.laws["V"].coeff == 5 * Ks ** 2 and a.ratios["V/(nK^2)"] == 5
    assert a.laws["A"].coeff == (7 * Ks ** 2 * lw ** 2 + 6 * Ks * lw * lb + 4 * lb ** 2) / 12
    assert a.laws["P"].identically_zero
    lin = ntk_asymptotics("linear", lambda_b=0, lambda_w=2, K1=3)
    assert lin.laws["A"].coeff == sp.Rational(2, 3) * Ks ** 2 * lw ** 2
    assert lin.ratios["V/(nK^2)"] == 2
    # leaky ReLU 0.1: the V slope of docs/criticality.md, 3 A4/A2^2 - 1
    assert float(ntk_asymptotics(leaky_relu(0.1)).ratios["V/(nK^2)"]) == pytest.approx(4.882364, abs=1e-6)
    # scaling laws (9.26)-(9.27), (11.65): p_A - 2 p_Theta = p_D - p_Theta - p_0 = ... = -1
    for act in ("relu", "tanh"):
        L = ntk_asymptotics(act).laws
        for x, y in (("A", "Theta"), ("B", "Theta"), ("P", "Theta"), ("Q", "Theta")):
            assert L[x].p - 2 * L[y].p == -1
        for x in ("D", "F"):
            assert L[x].p - L["Theta"].p - L["K"].p == -1
        assert L["V"].p - 2 * L["K"].p == -1


# ----------------------------------------------------------------------------- (c) flows
def _check(m: MeasuredLaw, exact: bool = False):
    """Exponent within 2 error bars (error bar < 0.1); flow/law -> 1, shrinking by 3x per decade."""
    assert m.p_err < 0.1, m
    assert abs(m.p - m.p_pred) <= 2 * m.p_err + 1e-9, m
    assert abs(m.ratio - 1) < 0.02, m
    if not exact:
        assert abs(m.ratio - 1) < abs(m.ratio_prev - 1) / 3, m


def _wrong(m: MeasuredLaw, f: float = 0.9) -> bool:
    """Would the same check pass for a law with coefficient x f?  (flow / (f law) = ratio / f)"""
    r, rp = m.ratio / f, m.ratio_prev / f
    return abs(r - 1) < 0.02 and abs(r - 1) < abs(rp - 1) / 3


@pytest.mark.parametrize("lams", [(1.0, 1.0), (0.3, 2.0)])
def test_tanh_flow_approaches_the_laws(lams):
    m = measure_ntk_asymptotics("tanh", 3000, lambda_b=lams[0], lambda_w=lams[1],
                                statistics=("Theta", "B", "D", "F", "A", "P", "Q"))
    for name in ("K", "V", "Theta", "F", "B", "D", "A", "P", "Q"):
        _check(m.laws[name])
        assert not _wrong(m.laws[name]), name
    pred = m.predicted.ratios
    for key, s in m.ratio_slopes.items():
        assert s == pytest.approx(float(pred[key]), rel=0.03), key


@pytest.mark.parametrize("act, K1", [("relu", 2.0), (leaky_relu(-0.5), 0.7), ("linear", 1.5)])
def test_scale_invariant_flow_approaches_the_laws(act, K1):
    stats = ("Theta", "B", "D", "F", "A") + (("P", "Q") if act == "linear" else ())
    m = measure_ntk_asymptotics(act, 1000, lambda_b=0.4, lambda_w=1.3, K1=K1, statistics=stats)
    for name, law in m.laws.items():
        # exact polynomials: flow/law = 1 + O(1/l), i.e. ~10x closer per decade
        _check(law, exact=(name in ("K", "Theta")))
        assert not _wrong(law), name
    for key, s in m.ratio_slopes.items():
        assert s == pytest.approx(float(m.predicted.ratios[key]), rel=0.01), key
    if act == "linear":
        np.testing.assert_allclose(m.flow["P"], 0.0, atol=1e-9)      # (11.74)


def test_single_input_flow_equals_ntk_flow():
    """The scalar single-input programs are the same derived recursions ntk_flow compiles."""
    from effth.pdlt import ntk_flow

    L = 6
    lb, lw = [0.9, 0.5, 1.1, 0.7, 1.2, 0.4], [1.0, 0.8, 0.6, 1.3, 0.9, 1.1]
    one = iterate_ntk_single_input("tanh", c_w=1.0, c_b=0.0, K1=1.2, depth=L, lambda_b=lb, lambda_w=lw,
                                   statistics=("Theta", "B", "D", "F", "A", "P", "Q"))
    fl = ntk_flow(K1=np.array([[1.2]]), Theta1=np.array([[lb[0] + lw[0] * 1.2]]), depth=L,
                  activation="tanh", c_w=1.0, c_b=0.0, lambda_b=lb, lambda_w=lw,
                  statistics=("A", "B", "D", "F", "P", "Q"), rtol=1e-12)
    for s in ("Theta", "B", "D", "F", "A", "P", "Q"):
        ref = fl.tensors[s].reshape(L, -1)[:, 0]
        np.testing.assert_allclose(one[s], ref, rtol=1e-6, atol=1e-12, err_msg=s)   # both quadratures


# ----------------------------------------------------------------------------- bad input
def test_bad_input():
    with pytest.raises(DomainError, match="half-stable"):
        ntk_asymptotics("gelu")
    with pytest.raises(DomainError, match="'none'"):
        ntk_asymptotics("sigmoid")
    with pytest.raises(DomainError, match="lambda_b"):
        ntk_asymptotics("tanh", lambda_b=-1)
    with pytest.raises(DomainError, match="K1"):
        ntk_asymptotics("relu", K1=0.0)
    with pytest.raises(DomainError, match="vanishes"):
        ntk_asymptotics("relu", lambda_b=0, lambda_w=0)
    with pytest.raises(DomainError, match="unknown statistic"):
        iterate_ntk_single_input("tanh", c_w=1, c_b=0, K1=1, depth=5, statistics=("R",))
    with pytest.raises(DomainError):
        measure_ntk_asymptotics("tanh", 50)


@pytest.mark.slow
def test_large_depth_study(opt_in_slow):
    """10^5 layers: tanh and the non-odd tanh + tanh²/2 (p⊥ = 0.8), within 1e-3 of the laws."""
    z = sp.Symbol("z")
    for act in ("tanh", sp.tanh(z) + sp.tanh(z) ** 2 / 2):
        m = measure_ntk_asymptotics(act, 100_000, statistics=("Theta", "B", "D", "F", "A", "P", "Q"))
        if act != "tanh":
            assert float(m.predicted.p_perp) == pytest.approx(0.8)
        for name, law in m.laws.items():
            _check(law)
            assert abs(law.ratio - 1) < 1.5e-3, law


def test_relu_dntk_iterated_and_its_law():
    """ReLU at one input: the iterated P ≡ 0 (11.74) and Q = (2/3) ℓ(ℓ² − 1) (K* = 2, λ = 1,
    (11.73)); with the law's learning rates Q follows ℓ³ (exponent −3, PDLT (11.79)) with the
    law's coefficient (a 0.9 coefficient is off)."""
    fl = iterate_ntk_single_input("relu", c_w=2, c_b=0, K1=2, depth=6, statistics=("P", "Q"))
    l = np.arange(1, 7)
    np.testing.assert_allclose(fl["P"], 0.0, atol=1e-10)
    np.testing.assert_allclose(fl["Q"], 2 / 3 * l * (l * l - 1), rtol=1e-10)
    m = measure_ntk_asymptotics("relu", 1000, statistics=("Theta", "F", "P", "Q"))
    q = m.laws["Q"]
    assert q.p_pred == -3 and abs(q.p - q.p_pred) < 1e-3
    assert abs(q.ratio - 1) < 1e-3 and abs(0.9 * q.ratio - 1) > 0.05
    assert "P" not in m.laws and m.predicted.laws["P"].identically_zero
