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
