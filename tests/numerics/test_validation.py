"""Bad inputs are rejected early with informative DomainErrors."""

from __future__ import annotations

import numpy as np
import pytest

from effth.errors import ClosedFormUnavailableWarning, DomainError, UnknownActivationError
from effth.numerics import gaussian_expectation, validate_covariance

S2 = [(0, "sigma", 0), (1, "sigma", 0)]


def test_valid_passthrough_and_promotion():
    K = validate_covariance([[1.0, 0.2], [0.2, 2.0]], 2)
    assert K.dtype == np.float64 and K.shape == (2, 2)
    assert validate_covariance(2.0, 1).shape == (1, 1)
    # tiny negative eigenvalue from round-off is accepted
    validate_covariance([[1.0, 1.0], [1.0, 1.0 - 1e-13]], 2)
    # singular (duplicated samples) is fine
    validate_covariance(np.ones((3, 2, 2)), 2)


def test_non_psd_names_entry_and_eigenvalue():
    K = np.stack([np.eye(2), np.array([[1.0, 2.0], [2.0, 1.0]])])
    with pytest.raises(DomainError, match=r"batch entry \(1,\).*-1") as ei:
        validate_covariance(K, 2)
    assert "PSD" in str(ei.value)
    with pytest.raises(DomainError, match="positive semi-definite"):
        gaussian_expectation(S2, K, "tanh")


def test_non_symmetric():
    with pytest.raises(DomainError, match="not symmetric"):
        validate_covariance([[1.0, 0.3], [0.2, 1.0]], 2)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite(bad):
    with pytest.raises(DomainError, match="non-finite"):
        gaussian_expectation(S2, [[1.0, bad], [bad, 1.0]], "tanh")


def test_mismatched_k_and_shapes():
    with pytest.raises(DomainError, match="2 slot"):
        gaussian_expectation(S2, np.eye(3), "tanh")
    with pytest.raises(DomainError):
        validate_covariance(np.ones((2, 3)))
    with pytest.raises(DomainError):
        validate_covariance([1.0, 2.0])


@pytest.mark.parametrize("factors", [
    [(0, "x", 1)], [(0, "sigma", -1)], [(0, "sigma", 1.5)], [(0, "sigma", 0), (2, "sigma", 0)],
    [], [(0, "sigma")], [(-1, "z", 1)],
])
def test_bad_factors(factors):
    with pytest.raises(DomainError):
        gaussian_expectation(factors, np.eye(3)[:1, :1], "tanh")


def test_unknown_activation_and_method():
    with pytest.raises(UnknownActivationError):
        gaussian_expectation([(0, "sigma", 0)], [[1.0]], "tanhh")
    with pytest.raises(DomainError):
        gaussian_expectation([(0, "sigma", 0)], [[1.0]], "tanh", method="magic")
    with pytest.raises(DomainError):
        gaussian_expectation([(0, "sigma", 0)], [[1.0]], None)
    with pytest.raises(DomainError):
        gaussian_expectation([(0, "sigma", 0)], [[1.0]], "tanh", rtol=0)


def test_bad_mean():
    with pytest.raises(DomainError):
        gaussian_expectation(S2, np.eye(2), "tanh", mean=[1.0, 2.0, 3.0])
    with pytest.raises(DomainError):
        gaussian_expectation(S2, np.eye(2), "tanh", mean=[np.nan, 0.0])


def test_closed_form_unavailable_warns_and_falls_back():
    # swish has no closed form for <sigma sigma>; with method='closed' we must warn, never NaN
    with pytest.warns(ClosedFormUnavailableWarning, match="no closed form for"):
        v = gaussian_expectation([(0, "sigma", 0), (0, "sigma", 0)], [[1.0]], "swish", method="closed")
    assert np.isfinite(v) and abs(float(v) - 0.3557755198) < 1e-9
    # nonzero mean: closed forms never apply
    with pytest.warns(ClosedFormUnavailableWarning):
        gaussian_expectation([(0, "sigma", 0)], [[1.0]], "relu", method="closed", mean=[0.3])


def test_psd_decision_at_the_tolerance_edge():
    """The batched Cholesky shortcut of validate_covariance decides as the eigenvalue test: with
    eigenvalues (1, -0.5e-10) a covariance passes, with (1, -2e-10) it is refused naming that
    eigenvalue, and in a batch one refused entry is the one named."""
    U = np.array([[0.6, -0.8], [0.8, 0.6]])
    ok = U @ np.diag([1.0, -0.5e-10]) @ U.T
    bad = U @ np.diag([1.0, -2e-10]) @ U.T
    assert validate_covariance(ok).shape == (2, 2)
    with pytest.raises(DomainError, match=r"at batch entry \(2,\).*minimum eigenvalue -2e-10"):
        validate_covariance(np.stack([ok, ok, bad, ok]))
    big = 1e6 * ok                                   # the tolerance grows with max |eigenvalue|
    big[1, 1] -= 5e-5        # lambda_min about -7e-5: above -1e-10 * 1e6, below -1e-10 max diag
    assert validate_covariance(big).shape == (2, 2)
