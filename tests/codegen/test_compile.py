"""Tests of effth.codegen: compiled expressions vs direct numerics (rtol 1e-12, deterministic)."""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

from effth.algebra.expectation import GaussianExpectation, expect, sigma, z
from effth.algebra.indices import alpha, beta, c_b, c_w, ell
from effth.algebra.tensors import FourPointVertex, Kernel, KernelMatrix, Metric, SampleSum
from effth.codegen import (
    CompiledExpression,
    CompiledStep,
    cache_info,
    clear_cache,
    compile_expression,
    compile_step,
)
from effth.errors import DomainError, NotDerivedError
from effth.numerics import gaussian_expectation

KM = KernelMatrix(Kernel, ell)
CW, CB = c_w(ell + 1), c_b(ell + 1)


def random_psd_batch(rng, batch, n):
    A = rng.standard_normal((*batch, n, n))
    return A @ np.swapaxes(A, -1, -2) / n + 0.2 * np.eye(n)


def kernel_step_matrix(n):
    """PDLT (4.118) for n samples, as a sympy Matrix of K^{(ℓ+1)} components."""
    return sp.Matrix(n, n, lambda i, j: CB + CW * GaussianExpectation(sigma(i) * sigma(j), KM))


def test_kernel_only_expression():
    f = compile_expression(Kernel(0, 0, ell) * Kernel(1, 1, ell) - Kernel(0, 1, ell) ** 2, kernel=KM,
                           activation=None)
    K = random_psd_batch(np.random.default_rng(0), (4, 3), 2)
    np.testing.assert_allclose(f(K), np.linalg.det(K), rtol=1e-12)
    assert f(K).shape == (4, 3)
    assert f.atoms == ()


def test_atoms_marginalization_and_dedup():
    rng = np.random.default_rng(1)
    K = random_psd_batch(rng, (5,), 3)
    a = GaussianExpectation(sigma(0) * sigma(2), KM)
    b = GaussianExpectation(sigma(1) ** 2 * z(1) ** 2, KM)
    expr = 2 * a + Kernel(1, 2, ell) * b + a * b
    f = compile_expression(expr, kernel=KM, activation="tanh")
    assert len(f.atoms) == 2  # identical atoms evaluated once
    va = gaussian_expectation([(0, "sigma", 0), (1, "sigma", 0)], K[..., [0, 2], :][..., :, [0, 2]], "tanh")
    vb = gaussian_expectation([(0, "sigma", 0), (0, "sigma", 0), (0, "z", 2)], K[..., 1:2, 1:2], "tanh")
    np.testing.assert_allclose(f(K), 2 * va + K[..., 1, 2] * vb + va * vb, rtol=1e-12)


def test_linearity_inside_compile_and_several_outputs():
    rng = np.random.default_rng(2)
    K = random_psd_batch(rng, (3,), 2)
    e = GaussianExpectation(sigma(0) * sigma(1) * (z(0) * z(1) - Kernel(0, 1, ell)), KM)
    f = compile_expression([e, Kernel(0, 0, ell)], kernel=KM, activation="erf")
    out = f(K)
    assert isinstance(out, tuple) and len(out) == 2
    direct = (gaussian_expectation([(0, "sigma", 0), (0, "z", 1), (1, "sigma", 0), (1, "z", 1)], K, "erf")
              - K[..., 0, 1] * gaussian_expectation([(0, "sigma", 0), (1, "sigma", 0)], K, "erf"))
    np.testing.assert_allclose(out[0], direct, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(out[1], K[..., 0, 0])


def test_symbolic_labels_with_samples_and_sample_sums():
    a1, a2 = alpha(1), alpha(2)
    b1, b2 = beta(1), beta(2)
    expr = SampleSum(Kernel(b1, b2, ell) * GaussianExpectation(sigma(a1) * sigma(a2) * z(b1) * z(b2), KM),
                     b1, b2)
    with pytest.raises(NotDerivedError):
        compile_expression(expr, kernel=KM, activation="tanh")
    with pytest.raises(DomainError, match="samples"):
        compile_expression(GaussianExpectation(sigma(a1), KM), kernel=KM, activation="tanh")
    f = compile_expression(expr, kernel=KM, activation="tanh", samples=[a1, a2])
    K = np.array([[1.1, 0.3], [0.3, 0.7]])
    direct = 0.0  # z_i z_j with i == j is z_i**2
    for i in range(2):
        for j in range(2):
            fac = [(0, "sigma", 0), (1, "sigma", 0)] + ([(i, "z", 2)] if i == j else [(i, "z", 1), (j, "z", 1)])
            direct += K[i, j] * gaussian_expectation(sorted(fac), K, "tanh")
    np.testing.assert_allclose(f(K), direct, rtol=1e-11)
    with pytest.raises(DomainError, match="samples"):
        f(np.eye(3))


def test_params_and_errors():
    expr = CB + CW * GaussianExpectation(sigma(0) * sigma(1), KM)
    with pytest.raises(DomainError, match="free symbols"):
        compile_expression(expr, kernel=KM, activation="tanh")
    f = compile_expression(expr, kernel=KM, activation="tanh", params=[CW, CB])
    assert f.param_names == ("C_W", "C_b")
    g = compile_expression(expr, kernel=KM, activation="tanh", params={"cw": CW, "cb": CB})
    K = np.array([[1.0, 0.5], [0.5, 2.0]])
    np.testing.assert_allclose(f(K, C_W=2.0, C_b=0.1), g(K, cw=2.0, cb=0.1), rtol=1e-15)
    # broadcasting of parameters over a grid
    out = f(K, C_W=np.array([1.0, 2.0]), C_b=0.0)
    assert out.shape == (2,)
    np.testing.assert_allclose(out[1], 2 * out[0])
    with pytest.raises(DomainError, match="missing"):
        f(K, C_W=1.0)
    with pytest.raises(DomainError, match="unexpected"):
        f(K, C_W=1.0, C_b=0.0, foo=1.0)
    with pytest.raises(DomainError, match="shape"):
        f(np.ones(3), C_W=1.0, C_b=0.0)
    with pytest.raises(DomainError, match="shape"):
        f(np.ones((2, 3)), C_W=1.0, C_b=0.0)
    with pytest.raises(DomainError, match="N = 1"):
        f(np.ones((1, 1)), C_W=1.0, C_b=0.0)
    # atoms over a kernel that is not the input
    with pytest.raises(DomainError, match="not among the inputs"):
        compile_expression(GaussianExpectation(sigma(0), KernelMatrix(Metric, ell)), kernel=KM, activation="tanh")
    with pytest.raises(DomainError, match="no input array"):
        compile_expression(Kernel(0, 1, ell + 1), kernel=KM, activation=None)
    with pytest.raises(DomainError, match="activation"):
        compile_expression(GaussianExpectation(sigma(0), KM), kernel=KM, activation=None)
    with pytest.raises(NotDerivedError):
        compile_expression(GaussianExpectation(sp.exp(z(0)), KM), kernel=KM, activation="tanh")


def test_cache_hit_and_source():
    clear_cache()
    expr = CB + CW * GaussianExpectation(sigma(0) * sigma(1), KM)
    f1 = compile_expression(expr, kernel=KM, activation="tanh", params=[CW, CB])
    info = cache_info()
    f2 = compile_expression(CB + CW * GaussianExpectation(sigma(1) * sigma(0), KM), kernel=KM,
                            activation="tanh", params=[CW, CB])
    assert f2 is f1
    assert cache_info()["hits"] == info["hits"] + 1
    f3 = compile_expression(expr, kernel=KM, activation="erf", params=[CW, CB])
    assert f3 is not f1
    f4 = compile_expression(expr, kernel=KM, activation="tanh", params=[CW, CB], rtol=1e-8)
    assert f4 is not f1
    assert isinstance(f1, CompiledExpression)
    assert "def _lambdifygenerated" in f1.source and "E0" in f1.source


def test_cse_in_generated_code():
    e = GaussianExpectation(sigma(0) * sigma(1), KM)
    expr = [(CB + CW * e) ** 2, sp.sqrt(CB + CW * e)]
    f = compile_expression(expr, kernel=KM, activation="tanh", params=[CW, CB])
    assert "x0 =" in f.source


def test_compile_step_iterated_30_layers():
    """K^{(ℓ+1)} = C_b + C_W <σσ>_{K^{(ℓ)}} for 2 samples over 30 layers with ONE compile (PDLT (4.118))."""
    clear_cache()
    step = compile_step({"K": kernel_step_matrix(2)}, {KM: "K"}, activation="tanh", params=[CW, CB])
    assert isinstance(step, CompiledStep) and cache_info()["misses"] == 1
    K0 = np.array([[1.2, 0.9], [0.9, 1.0]])
    K = K0.copy()
    Kd = K0.copy()
    cw, cb = 1.0, 0.05
    for _ in range(30):
        K = step(K=K, C_W=cw, C_b=cb)["K"]
        # direct per-layer numerics
        s11 = gaussian_expectation([(0, "sigma", 0), (0, "sigma", 0)], Kd[:1, :1], "tanh")
        s22 = gaussian_expectation([(0, "sigma", 0), (0, "sigma", 0)], Kd[1:, 1:], "tanh")
        s12 = gaussian_expectation([(0, "sigma", 0), (1, "sigma", 0)], Kd, "tanh")
        Kd = cb + cw * np.array([[s11, s12], [s12, s22]])
    np.testing.assert_allclose(K, Kd, rtol=1e-12)
    assert K.shape == (2, 2) and K[0, 1] == K[1, 0]
    assert cache_info()["misses"] == 1  # compiled once


def test_compile_step_two_inputs_and_batches():
    """Several named inputs: K at layer ℓ (covariance of atoms) and V components at layer ℓ."""
    V = FourPointVertex(0, 0, 0, 0, ell)
    k00 = Kernel(0, 0, ell)
    e = GaussianExpectation(sigma(0) ** 2, KM)
    # single-input V-recursion shape: χ_∥² V + C_W² (<σ⁴> − <σ²>²), χ_∥ = C_W ∂_K <σ²>
    chi = CW * sp.diff(e, k00)
    outputs = {"K": CB + CW * e, "V": chi**2 * V + CW**2 * (expect(sigma(0) ** 4, KM) - e**2)}
    step = compile_step(outputs, {KM: "K", FourPointVertex: "V"}, activation="tanh", params=[CW, CB])
    rng = np.random.default_rng(5)
    K = 0.5 + rng.random((7, 1, 1))
    Vin = rng.random((7, 1, 1, 1, 1))
    out = step(K=K, V=Vin, C_W=1.3, C_b=0.0)
    assert set(out) == {"K", "V"} and out["K"].shape == (7,) and out["V"].shape == (7,)
    s2 = gaussian_expectation([(0, "sigma", 0)] * 2, K, "tanh")
    s4 = gaussian_expectation([(0, "sigma", 0)] * 4, K, "tanh")
    dchi = (gaussian_expectation([(0, "sigma", 1)] * 2, K, "tanh")
            + gaussian_expectation([(0, "sigma", 0), (0, "sigma", 2)], K, "tanh"))
    np.testing.assert_allclose(out["K"], 1.3 * s2, rtol=1e-12)
    np.testing.assert_allclose(out["V"], (1.3 * dchi) ** 2 * Vin[:, 0, 0, 0, 0] + 1.69 * (s4 - s2**2),
                               rtol=1e-11)
    with pytest.raises(DomainError, match="missing input"):
        step(K=K, C_W=1.0, C_b=0.0)
    with pytest.raises(DomainError):
        compile_step({"K": CB}, {"K": "K"})


def test_compiled_polynomial_atoms_equal_exact_doit():
    """Triangle: numerics through codegen vs exact Wick reduction for σ = 1/5 + z + 3/10 z³."""
    from effth.activations import Z, get_activation

    act = get_activation(sp.Rational(1, 5) + Z + sp.Rational(3, 10) * Z**3)
    expr = CW * GaussianExpectation(sigma(0) * sigma(1) * z(2) ** 2, KM) + GaussianExpectation(
        sigma(1, 1) ** 2 * sigma(2), KM)
    exact = expr.doit(activation=act)
    f_exact = compile_expression(exact, kernel=KM, activation=None, params=[CW])
    f_num = compile_expression(expr, kernel=KM, activation=act, params=[CW])
    K = random_psd_batch(np.random.default_rng(11), (6,), 3)
    np.testing.assert_allclose(f_num(K, C_W=0.7), f_exact(K, C_W=0.7), rtol=1e-10)


def test_compiled_functions_reject_complex_input():
    f = compile_expression(Kernel(0, 0, ell) * Kernel(1, 1, ell) - Kernel(0, 1, ell) ** 2, kernel=KM,
                           activation=None)
    K = np.array([[1.0 + 1j, 0.1], [0.1, 1.0]])
    with pytest.raises(DomainError, match="real"):        # the imaginary part was dropped silently
        f(K)
