"""The equal-pixel path of effth.cnn_kernels (flatten readout, pixel_pairs='diagonal', the
default there) against the full pixel-pair path: the patch operator maps equal pixels to equal
pixels (Novak et al. 2019, eq. (7)-(8)), so the output NNGP kernel and NTK, and the equal-pixel
entries of every hidden layer, must agree with the full recursion."""

import numpy as np
import pytest

import effth as et
from effth.arch import CNN
from effth.errors import DomainError
from effth.pdlt import cnn_kernels

PADDINGS = ("circular", "same", "valid")


def _compare(net, X, tol, rtol=1e-10):
    d = cnn_kernels(net, X, pixel_pairs="auto", rtol=rtol)
    f = cnn_kernels(net, X, pixel_pairs="full", rtol=rtol)
    assert d.pixel_pairs == "diagonal" and f.pixel_pairs == "full"
    worst = 0.0
    for name in ("K", "Theta"):
        ref = f.value(name)
        worst = max(worst, np.abs(d.value(name) - ref).max() / np.abs(ref).max())
        for ell in range(1, net.depth):
            ref = f.value(name, ell, diagonal=True)
            worst = max(worst, np.abs(d.value(name, ell, diagonal=True) - ref).max()
                        / np.abs(ref).max())
    assert worst < tol, worst
    return d, f


@pytest.mark.parametrize("padding", PADDINGS)
@pytest.mark.parametrize("act", ["erf", "relu"])
def test_closed_forms_equal_the_full_path(act, padding):
    """Closed-form tables (Williams' arcsine, arc-cosine): the same formulas entry by entry, so
    the two paths agree to round-off, on 2-D multi-channel images with a rectangular filter."""
    X = np.random.default_rng(0).standard_normal((4, 7, 6, 2))
    net = CNN(act, depth=4, filter_size=(3, 2), padding=padding, readout="flatten", c_w=1.7,
              c_b=0.1)
    d, _ = _compare(net, X, 1e-14)
    # the hidden layers hold |P| times fewer entries: (P, P, S), VALID shrinking the grid
    S = int(np.prod(d.spatial_shapes[3]))
    assert d.K[2].shape == (4, 4, S)
    assert S == ((7 - 3 * 2) * (6 - 3 * 1) if padding == "valid" else 7 * 6)


@pytest.mark.parametrize("padding", PADDINGS)
def test_quadrature_activation_equals_the_full_path(padding):
    """tanh (no closed form: Mehler's expansion or quadrature, whose rules follow the largest
    scale of the kernel they are given, here P x P per pixel instead of P|P| x P|P|): the paths
    agree to the requested accuracy, 1-D images."""
    X = np.random.default_rng(1).standard_normal((3, 9, 2))
    net = CNN("tanh", depth=3, filter_size=3, dims=1, padding=padding, readout="flatten",
              c_w=1.5, c_b=0.1)
    _compare(net, X, 1e-12, rtol=1e-13)


def test_zero_variance_pixels_on_digits():
    """Digits with empty borders, 'same' padding, C_b = 0: zero-variance pixels take the point
    masses pixel by pixel (the batched closed forms are refused there); equal to round-off."""
    X = et.data.load_digits(5).images
    net = CNN("relu", depth=3, filter_size=3, padding="same", readout="flatten", c_w=2.0,
              c_b=(0.0, 0.0, 0.1))
    _compare(net, X, 1e-14)


def test_a_wrong_padding_is_rejected_and_full_kernels_on_request():
    """The same comparison tells 'same' from 'circular' padding (the zero-padded border); the
    hidden full kernels of a diagonal result are computed on request and are those of
    pixel_pairs='full'."""
    X = et.data.load_digits(4).images
    same = CNN("erf", depth=3, filter_size=3, padding="same", readout="flatten", c_w=1.7, c_b=0.1)
    circ = CNN("erf", depth=3, filter_size=3, padding="circular", readout="flatten", c_w=1.7,
               c_b=0.1)
    d = cnn_kernels(same, X)
    wrong = cnn_kernels(circ, X, pixel_pairs="full")
    assert np.abs(d.value("K") - wrong.value("K")).max() > 1e-3 * np.abs(wrong.value("K")).max()
    full = cnn_kernels(same, X, pixel_pairs="full")
    np.testing.assert_array_equal(d.value("Theta", 2, pixels=True), full.value("Theta", 2, pixels=True))
    assert d.value("K", 1).shape == (4, 64, 4, 64)
    assert d.value("K", 1, diagonal=True, pixels=True).shape == (4, 4, 8, 8)


def test_bad_pixel_pairs():
    X = np.ones((2, 5))
    with pytest.raises(DomainError, match="readout='flatten'"):
        cnn_kernels(CNN("relu", depth=2, dims=1, readout="gap"), X, pixel_pairs="diagonal")
    with pytest.raises(DomainError, match="pixel_pairs must be"):
        cnn_kernels(CNN("relu", depth=2, dims=1, readout="flatten"), X, pixel_pairs="diag")
    assert cnn_kernels(CNN("relu", depth=2, dims=1, readout="gap"), X).pixel_pairs == "full"
