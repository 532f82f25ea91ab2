"""Sample tensors: canonicalization under their symmetry groups, layers, sums, numerics."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import sympy as sp

from effth.algebra.indices import alpha, beta, ell
from effth.algebra.tensors import (
    FourPointVertex,
    InverseKernel,
    Kernel,
    KernelMatrix,
    NLOMetric,
    QuarticCoupling,
    SampleSum,
    SymmetricQuarticCoupling,
    expand_sample_sums,
    tensor_components,
)

A = [alpha(k) for k in range(1, 5)]


def _pair_group(a, b, c, d):
    """The 8 index orders of the four-point vertex's pair-symmetry group, built by hand."""
    out = set()
    for p, q in (((a, b), (c, d)), ((c, d), (a, b))):
        for p2 in (p, p[::-1]):
            for q2 in (q, q[::-1]):
                out.add(p2 + q2)
    return out


def test_symmetric_pair_canonicalizes():
    assert Kernel(A[1], A[0], ell) == Kernel(A[0], A[1], ell)
    assert Kernel(2, 1) == Kernel(1, 2)
    assert NLOMetric(A[1], A[0], ell) == NLOMetric(A[0], A[1], ell)


def test_vertex_has_exactly_the_order_8_group():
    base = FourPointVertex(*A, ell)
    group = _pair_group(*A)
    assert len(group) == 8
    for perm in itertools.permutations(A):
        same = FourPointVertex(*perm, ell) == base
        assert same == (perm in group), perm
    # three distinct classes under S4 / group: (12)(34), (13)(24), (14)(23)
    classes = {FourPointVertex(*perm, ell) for perm in itertools.permutations(A)}
    assert len(classes) == 3


def test_fully_symmetric_coupling_and_quartic_coupling():
    classes = {SymmetricQuarticCoupling(*p) for p in itertools.permutations(A)}
    assert len(classes) == 1
    classes = {QuarticCoupling(*p) for p in itertools.permutations(A)}
    assert len(classes) == 3


def test_layer_is_optional_and_substitutable():
    k = Kernel(A[0], A[1], ell + 1)
    assert k.layer == ell + 1 and Kernel(1, 2).layer is None
    assert k.subs(ell, 2) == Kernel(A[0], A[1], 3)
    assert k.func(*k.args) == k
    assert Kernel(1, 2, ell) != Kernel(1, 2, ell + 1)
    with pytest.raises(TypeError):
        Kernel(1)


def test_differentiation_with_respect_to_components():
    k12, k11 = Kernel(1, 2), Kernel(1, 1)
    expr = k12**2 * k11 + 3 * Kernel(2, 1)
    assert sp.diff(expr, k12) == 2 * k12 * k11 + 3
    assert sp.diff(expr, Kernel(2, 2)) == 0


def test_sample_sum_expands_over_ordered_tuples():
    b1, b2 = beta(1), beta(2)
    s = SampleSum(Kernel(b1, b2) * InverseKernel(b1, b2), b1, b2)
    assert s.free_symbols == set()
    K = np.array([[2.0, 0.3], [0.3, 1.0]])
    Kinv = np.linalg.inv(K)
    expanded = s.expand_over([0, 1])
    values = {Kernel(i, j): K[i, j] for i in range(2) for j in range(2)}
    values.update({InverseKernel(i, j): Kinv[i, j] for i in range(2) for j in range(2)})
    assert float(expanded.xreplace(values)) == pytest.approx(2.0, rel=1e-14)  # tr(K K^-1)
    nested = expand_sample_sums(1 + s, [0, 1])
    assert not any(isinstance(a, SampleSum) for a in sp.preorder_traversal(nested))


def test_sample_sum_rejects_repeated_dummies_and_passes_through_without_dummies():
    with pytest.raises(ValueError):
        SampleSum(Kernel(beta(1), beta(1)), beta(1), beta(1))
    assert SampleSum(Kernel(1, 2)) == Kernel(1, 2)


def test_component_reads_arrays_and_tensor_components():
    V = np.arange(16.0).reshape(2, 2, 2, 2)
    assert FourPointVertex(0, 1, 1, 0).component(V) == V[0, 1, 0, 1]
    K = np.array([[[1.0, 2.0], [2.0, 5.0]]] * 3)
    assert np.all(Kernel(1, 0).component(K) == 2.0)
    assert Kernel(alpha(1), alpha(2)).component(K, samples=[alpha(1), alpha(2)]).shape == (3,)
    expr = Kernel(1, 2) * FourPointVertex(1, 1, 2, 2) + NLOMetric(1, 1)
    assert tensor_components(expr, Kernel) == {Kernel(1, 2)}
    assert len(tensor_components(expr)) == 3


def test_kernel_matrix_label():
    km = KernelMatrix(Kernel, ell)
    assert km.entry(A[1], A[0]) == Kernel(A[0], A[1], ell)
    assert KernelMatrix(NLOMetric, ell).entry(1, 2) == NLOMetric(1, 2, ell)
    assert KernelMatrix().entry(1, 2) == Kernel(1, 2)
    with pytest.raises(ValueError):
        KernelMatrix("Nonsense")


def test_sample_sum_survives_rebuild_subs_and_xreplace():
    b1, b2 = beta(1), beta(2)
    s = SampleSum(Kernel(alpha(1), b1) * Kernel(b1, b2), b1, b2)
    assert s.func(*s.args) == s
    assert SampleSum(Kernel(b1, b2), [b1, b2]) == SampleSum(Kernel(b1, b2), b1, b2)
    moved = s.xreplace({alpha(1): 0})
    assert moved.dummies == (b1, b2)
    K = np.array([[2.0, 0.3], [0.3, 1.0]])
    values = {Kernel(i, j): K[i, j] for i in range(2) for j in range(2)}
    assert float(moved.expand_over([0, 1]).xreplace(values)) == pytest.approx((K @ K).sum(axis=1)[0])
    assert float(s.subs(alpha(1), 1).expand_over([0, 1]).xreplace(values)) == pytest.approx(
        (K @ K).sum(axis=1)[1])


# --------------------------------------------------------------------------------------------
# canonicalize_dummies


def test_canonicalize_dummies_merges_relabelled_copies():
    from effth.algebra.tensors import QuarticCoupling, Propagator, canonicalize_dummies

    a = [alpha(k) for k in range(1, 5)]
    b = [beta(k) for k in range(1, 5)]
    body = QuarticCoupling(*b) * sp.Mul(*[Propagator(a[k], b[k]) for k in range(4)])
    perm = dict(zip(b, [b[2], b[0], b[3], b[1]]))
    other = SampleSum(body.xreplace(perm), *b)
    assert other != SampleSum(body, *b)
    total = canonicalize_dummies(SampleSum(body, *b) + other)
    assert total == 2 * SampleSum(body, *b)
    # the (13)(24) channel of PDLT (4.48): externals numbered first
    chan = SampleSum(QuarticCoupling(*b) * Propagator(a[0], b[0]) * Propagator(a[1], b[2])
                     * Propagator(a[2], b[1]) * Propagator(a[3], b[3]), *b)
    want = QuarticCoupling(b[0], b[2], b[1], b[3]) * sp.Mul(*[Propagator(a[k], b[k]) for k in range(4)])
    assert canonicalize_dummies(chan).summand == want
    # external_order renumbers
    rev = canonicalize_dummies(chan, external_order=a[::-1])
    assert Propagator(a[3], b[0]) in rev.summand.args


class _Plain(FourPointVertex):
    symmetry = "none"


@pytest.mark.parametrize("vcls", ["SymmetricQuarticCoupling", "FourPointVertex", "QuarticCoupling", "none"])
@pytest.mark.parametrize("cls", [Kernel, NLOMetric])
def test_canonicalize_dummies_any_symmetry_and_idempotent(vcls, cls):
    import effth.algebra.tensors as T

    vc = _Plain if vcls == "none" else getattr(T, vcls)
    b = [beta(k) for k in range(1, 5)]
    a1, a2 = alpha(1), alpha(2)
    vert = vc(b[3], b[1], b[0], b[2], ell)
    s = SampleSum(vert * cls(a2, b[0], ell) * cls(a1, b[3], ell) * cls(b[1], b[2], ell), *b[::-1])
    c = T.canonicalize_dummies(s)
    assert c.dummies == tuple(b)
    assert T.canonicalize_dummies(c) == c
    assert cls(a1, b[0], ell) in c.summand.args
    # every relabelled copy canonicalizes to the same expression
    for perm in itertools.permutations(b):
        assert T.canonicalize_dummies(SampleSum(s.summand.xreplace(dict(zip(b, perm))), *b)) == c
    # and the value is unchanged
    rng = np.random.default_rng(0)
    ex = [expand_sample_sums(e, [0, 1]).xreplace({a1: 0, a2: 1}) for e in (s, c)]
    vals = {comp: sp.Float(rng.normal(), 20)
            for comp in sorted(tensor_components(ex[0]) | tensor_components(ex[1]), key=sp.default_sort_key)}
    assert float(ex[0].xreplace(vals)) == pytest.approx(float(ex[1].xreplace(vals)), rel=1e-12)


def test_canonicalize_dummies_greedy_and_hash_seed_independent():
    import os
    import subprocess
    import sys

    from effth.algebra.tensors import canonicalize_dummies

    b = [beta(k) for k in range(1, 9)]
    a1, a2 = alpha(1), alpha(2)
    body = (FourPointVertex(*b[:4]) * FourPointVertex(*b[4:]) * Kernel(a1, b[6]) * Kernel(a2, b[1])
            * Kernel(b[0], b[4]) * Kernel(b[2], b[3]) * Kernel(b[5], b[7]))
    s = SampleSum(body, *b)
    c = canonicalize_dummies(s)  # 8 dummies: greedy
    assert canonicalize_dummies(c) == c
    rng = np.random.default_rng(3)
    for _ in range(20):
        perm = dict(zip(b, rng.permutation(b)))
        assert canonicalize_dummies(SampleSum(body.xreplace(perm), *b)) == c
    assert Kernel(a1, b[0]) in c.summand.args
    assert float(expand_sample_sums(s, [0]).xreplace({a1: 0, a2: 0}).subs(
        {x: 1.5 for x in tensor_components(expand_sample_sums(s, [0]).xreplace({a1: 0, a2: 0}))})) == \
        pytest.approx(1.5**7)
    code = (
        "import sympy as sp\n"
        "from effth.algebra.action import QuarticAction, connected_correlator, perturbative_moment\n"
        "I=sp.symbols('i1:5',integer=True);A=sp.symbols('alpha1:5')\n"
        "print(sp.srepr(connected_correlator(QuarticAction('ch4'),list(zip(I,A)))))\n"
        "print(sp.srepr(perturbative_moment(QuarticAction('ch1'),sp.symbols('mu1:3'),order=2)))\n"
    )
    outs = set()
    for seed in ("0", "1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
        outs.add(r.stdout)
    assert len(outs) == 1
