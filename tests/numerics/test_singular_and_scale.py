"""Singular kernels for kinked activations, kernels of extreme scale, and runaway grids.

Regressions: raw ``LinAlgError: Singular matrix`` on duplicated / zero inputs (kinked flows), a
``k**4`` underflow reported as "the kernel overflows" for a decaying ReLU kernel, minutes of
quadrature on an overflowing integrand, ``ValueError: Maximum allowed size exceeded`` and GiB
grids for smooth activations at large kernel scales.
"""

import contextlib
import signal

import numpy as np
import pytest

import effth as et
from effth.errors import ConvergenceError, DomainError
from effth.numerics import gaussian_expectation
from effth.numerics.sample_tables import kinked_pair_tables, pair_tables
from effth.activations import get_activation

ORDERS = {(0, 0), (0, 2), (1, 1), (2, 2), (1, 3), (0, 4)}


@contextlib.contextmanager
def within(seconds):
    def boom(*_):
        raise TimeoutError(f"took more than {seconds} s")
    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# ------------------------------------------------------------------ kinked pair tables
@pytest.mark.parametrize("name", ["relu", "abs", "leaky_relu", "step"])
def test_kinked_pair_tables_regular_entries_are_the_expectations(name):
    K = np.array([[1.0, 0.3, -0.2], [0.3, 0.8, 0.1], [-0.2, 0.1, 1.3]])
    T = kinked_pair_tables(K, name, {(0, 0), (1, 1), (0, 1), (2, 0)})
    for (p, q), tab in T.items():
        for a in range(3):
            for b in range(3):
                if a != b:
                    kern = K[np.ix_([a, b], [a, b])]
                    ref = gaussian_expectation([(0, "sigma", p), (1, "sigma", q)], kern, name)
                    assert tab[a, b] == pytest.approx(float(ref), rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("name", ["relu", "abs", "step"])
def test_kinked_pair_tables_singular_kernels_are_finite(name):
    for K in ([[1.0, 1.0], [1.0, 1.0]], [[1.0, 0.0], [0.0, 0.0]], [[1.0, -1.0], [-1.0, 1.0]],
              [[4.0, 2.0], [2.0, 1.0]], [[0.0, 0.0], [0.0, 0.0]]):
        T = kinked_pair_tables(np.array(K), name, ORDERS)      # was: LinAlgError
        assert all(np.all(np.isfinite(t)) for t in T.values())


@pytest.mark.parametrize("name", ["relu", "abs"])
@pytest.mark.parametrize("c", [1.0, 0.5, -1.0, -2.0])
def test_collinear_pair_gives_the_leibniz_combination(name, c):
    # z_b = c z_a: only sum_p binom(m,p) c^(m-p) T_{p,m-p}[a,b] = <d^m[sigma(z) sigma(cz)]> enters the
    # recursions; for m = 2 it is finite term by term, and equals the limit of regular neighbours
    k = 1.3
    K = np.array([[k, c * k], [c * k, c * c * k]])
    T = kinked_pair_tables(K, name, {(2, 0), (1, 1)})
    comb = T[2, 0][0, 1] + 2 * c * T[1, 1][0, 1] + c * c * T[0, 2][0, 1]
    eps = 1e-9
    Kn = K * np.array([[1.0, 1 - eps], [1 - eps, 1.0]])
    near = sum(f * float(gaussian_expectation([(0, "sigma", p), (1, "sigma", 2 - p)], Kn, name))
               for p, f in ((2, 1.0), (1, 2 * c), (0, c * c)))
    assert comb == pytest.approx(near, rel=1e-6, abs=1e-8)


@pytest.mark.parametrize("name,h", [("relu", 1), ("abs", 1), ("step", 0)])
def test_kinked_pair_tables_scale_exactly(name, h):
    K = np.array([[1.0, 0.3, 1.0], [0.3, 0.8, 0.3], [1.0, 0.3, 1.0]])
    A = kinked_pair_tables(K, name, ORDERS)
    for lam in (1e-82, 2.0 ** -150, 1e100):          # k**4 underflowed at 1e-82
        B = kinked_pair_tables(K * lam, name, ORDERS)
        for (p, q), t in A.items():
            assert np.allclose(B[p, q] / lam ** ((2 * h - p - q) / 2), t, rtol=1e-13,
                               atol=1e-13 * np.max(np.abs(t)))


def test_flow_tables_on_duplicated_and_zero_inputs(monkeypatch):
    """Through the kernel flow (its pair tables swapped for kinked_pair_tables): a duplicated input
    gives the single-input flow exactly; a zero input is the limit of a vanishing one."""
    from effth.pdlt.initialization import kernel_flow as kf

    monkeypatch.setattr(kf, "_generic_pairs", kinked_pair_tables, raising=False)
    one = et.flow(K1=[[1.0]], depth=4, activation="relu", c_b=0.3)
    dup = et.flow(K1=[[1.0, 1.0], [1.0, 1.0]], depth=4, activation="relu", c_b=0.3)
    for s in ("K", "G1"):
        assert np.allclose(getattr(dup, s), getattr(one, s)[..., [0, 0], :][..., [0, 0]], rtol=1e-13, atol=1e-15)
    assert np.allclose(dup.V, one.V[:, [0, 0]][:, :, [0, 0]][:, :, :, [0, 0]][..., [0, 0]], rtol=1e-13, atol=1e-15)
    zero = et.flow(K1=[[1.0, 0.0], [0.0, 0.0]], depth=4, activation="relu", c_b=0.3)
    diffs = []
    for e in (1e-4, 1e-8):
        near = et.flow(K1=[[1.0, 0.0], [0.0, e]], depth=4, activation="relu", c_b=0.3)
        diffs.append(max(np.max(np.abs(getattr(zero, s) - getattr(near, s))) for s in ("K", "V", "G1")))
    assert diffs[1] < 5e-5 and diffs[1] < diffs[0] / 30      # ~ sqrt(e)


# ------------------------------------------------------------------ scale of the kernel
def test_homogeneous_expectations_scale_exactly():
    f = [(0, "sigma", 0), (0, "sigma", 0), (0, "z", 4)]
    for k in (1e100, 1e-100, 1e40):
        assert float(gaussian_expectation(f, [[k]], "relu")) == pytest.approx(7.5 * k ** 3, rel=1e-14)
    K = np.array([[1.0, 0.3], [0.3, 2.0]])
    for fac in ([(0, "sigma", 2), (1, "sigma", 0)], [(0, "sigma", 3), (1, "sigma", 1)],
                [(0, "sigma", 1), (1, "sigma", 1), (0, "z", 1)]):
        d = sum((1 - o) if kind == "sigma" else o for _, kind, o in fac)
        ratio = float(gaussian_expectation(fac, K * 1e50, "relu") / gaussian_expectation(fac, K, "relu"))
        assert ratio == pytest.approx(1e25 ** d, rel=1e-13)


def test_overflowing_expectation_is_refused_fast():
    f = [(0, "sigma", 0), (0, "sigma", 0), (0, "z", 4)]
    with within(10):                                     # ran for minutes in quadrature
        with pytest.raises(DomainError, match="overflows float64"):
            gaussian_expectation(f, [[1e120]], "relu")
        with pytest.raises(DomainError, match="overflows"):
            gaussian_expectation(f, [[1e120]], "relu", mean=[1.0])


@pytest.mark.parametrize("name", ["tanh", "gelu", "swish"])
def test_huge_smooth_kernels_are_refused_fast(name):
    with within(10):                                     # ValueError / LinAlgError / GiB grids
        with pytest.raises((DomainError, ConvergenceError)):
            gaussian_expectation([(0, "sigma", 0), (0, "sigma", 0)], [[1e300]], name)
        if name != "gelu":                               # gelu has a closed form there
            with pytest.raises((DomainError, ConvergenceError)):
                gaussian_expectation([(0, "sigma", 0), (1, "sigma", 0)], np.eye(2) * 1e8, name)


@pytest.mark.parametrize("k", [1e5, 1e8, 1e300])
def test_pair_tables_bound_the_grid(k):
    act = get_activation("tanh")
    with within(10):                                     # asked for 857 GiB at 1e5
        with pytest.raises(DomainError, match="(?i)rescale the inputs"):
            pair_tables(np.array([[k, 0.5 * k], [0.5 * k, k]]), act, {(0, 0)})


# ------------------------------------------------------------------ complex input
def test_table_entry_points_reject_complex_kernels():
    from effth.numerics import validate_covariance
    from effth.numerics.atom_tables import AtomTables
    from effth.numerics.sample_tables import four_point_table

    Kc = np.array([[1.0 + 1j, 0.2], [0.2, 1.0]])
    tanh = get_activation("tanh")
    for call in (lambda: validate_covariance(Kc, 2), lambda: AtomTables(Kc, "tanh"),
                 lambda: pair_tables(Kc, tanh, {(0, 0)}), lambda: four_point_table(Kc, tanh),
                 lambda: kinked_pair_tables(Kc, "relu", {(0, 0)}),
                 lambda: gaussian_expectation([(0, "sigma", 0)], [[1 + 1j]], "tanh")):
        with pytest.raises(DomainError, match="real"):     # tables dropped the imaginary part
            call()
