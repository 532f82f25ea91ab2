"""Infinite-channel CNN kernels (effth.pdlt.cnn) against independent references.

(a) effth's patch-operator recursion; (b) the published recursion of Novak et al. 2019 eq. (7)
and Arora et al. 2019 §4 (CNTK), written here as a plain loop over output pixels and filter
offsets with the closed forms of Cho & Saul 2009 (ReLU, arc-cosine kernel of degree 1 and 0) and
Williams 1996 (erf), or 2-D Gauss-Hermite quadrature (tanh); (c) exact reductions to effth's MLP
flows: 1x1 filters make every pixel an MLP input, and a filter covering the whole image with
'valid' padding makes the CNN an MLP on the flattened image.  The finite-width ground truth is
tests/simulation/test_cnn_ensemble.py.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import effth as et
from effth.arch import CNN, MLP
from effth.errors import DomainError
from effth.pdlt import cnn_kernels


# ----------------------------------------------------------------------------- the reference
def _relu_pair(kaa, kbb, kab, order):
    s = math.sqrt(kaa * kbb)
    rho = max(-1.0, min(1.0, kab / s))
    th = math.acos(rho)
    if order == 0:      # Cho & Saul 2009, arc-cosine kernel of degree 1 (halved: sigma = max(0, z))
        return s / (2 * math.pi) * (math.sin(th) + (math.pi - th) * math.cos(th))
    return (math.pi - th) / (2 * math.pi)          # degree 0


def _erf_pair(kaa, kbb, kab, order):
    if order == 0:      # Williams 1996
        return 2 / math.pi * math.asin(2 * kab / math.sqrt((1 + 2 * kaa) * (1 + 2 * kbb)))
    return 4 / math.pi / math.sqrt((1 + 2 * kaa) * (1 + 2 * kbb) - 4 * kab * kab)


_U = np.linspace(-9.0, 9.0, 301)          # trapezoid rule: spectrally accurate for analytic integrands
_W = np.exp(-0.5 * _U ** 2)
_W /= _W.sum()


def _tanh_pair(kaa, kbb, kab, order):
    """2-D trapezoid rule over independent standard normals (u, v) with za = sqrt(kaa) u,
    zb = kab / sqrt(kaa) u + sqrt(kbb - kab^2 / kaa) v."""
    f = np.tanh if order == 0 else (lambda z: 1 - np.tanh(z) ** 2)
    a = math.sqrt(kaa)
    inner = f(kab / a * _U[:, None] + math.sqrt(max(kbb - kab * kab / kaa, 0.0)) * _U[None, :]) @ _W
    return float(np.dot(_W * f(a * _U), inner))


PAIRS = {"relu": _relu_pair, "erf": _erf_pair, "tanh": _tanh_pair}


def _sources(shape, filt, padding):
    """out pixel -> list over offsets of the input pixel read (None: a zero-padded pixel)."""
    pads = [0 if padding == "valid" else (f - 1) // 2 for f in filt]
    out_shape = [s - f + 1 if padding == "valid" else s for s, f in zip(shape, filt)]
    table = {}
    for i in itertools.product(*(range(o) for o in out_shape)):
        src = []
        for d in itertools.product(*(range(f) for f in filt)):
            p = [ik + dk - pk for ik, dk, pk in zip(i, d, pads)]
            if padding == "circular":
                p = [pk % sk for pk, sk in zip(p, shape)]
            elif any(pk < 0 or pk >= sk for pk, sk in zip(p, shape)):
                p = None
            src.append(None if p is None else tuple(p))
        table[i] = src
    return tuple(out_shape), table


def reference(act, X, depth, filt, padding, readout, cw, cb):
    """The CNN NNGP and NTK by loops (dicts over (image, pixel) pairs)."""
    pair = PAIRS[act]
    P = X.shape[0]
    shape = X.shape[1:-1]
    pix = list(itertools.product(*(range(s) for s in shape)))

    def conv(M, shape, cw_, cb_, add=None):
        out_shape, src = _sources(shape, filt, padding)
        q = len(src[next(iter(src))])
        new = {}
        for a, b in itertools.product(range(P), repeat=2):
            for i, j in itertools.product(src, repeat=2):
                tot = 0.0
                for si, sj in zip(src[i], src[j]):
                    if si is not None and sj is not None:
                        tot += M[a, si, b, sj]
                new[a, i, b, j] = cw_ * tot / q + (cb_ if add is None else add[a, i, b, j])
        return new, out_shape

    G = {(a, i, b, j): float(np.dot(X[(a, *i)], X[(b, *j)])) / X.shape[-1]
         for a, b in itertools.product(range(P), repeat=2) for i in pix for j in pix}
    K, shape = conv(G, shape, cw, cb)
    T = dict(K)
    for _ in range(depth - 2):
        Q = {k: pair(K[k[0], k[1], k[0], k[1]], K[k[2], k[3], k[2], k[3]], v, 0) for k, v in K.items()}
        D = {k: pair(K[k[0], k[1], k[0], k[1]], K[k[2], k[3], k[2], k[3]], v, 1) * T[k]
             for k, v in K.items()}
        K, shape2 = conv(Q, shape, cw, cb)
        T, _ = conv(D, shape, cw, cb, add=K)
        shape = shape2
    pix = list(itertools.product(*(range(s) for s in shape)))
    Ko, To = np.zeros((P, P)), np.zeros((P, P))
    for a, b in itertools.product(range(P), repeat=2):
        pairs = ([(i, j) for i in pix for j in pix] if readout == "gap" else [(i, i) for i in pix])
        for i, j in pairs:
            kaa, kbb, kab = K[a, i, a, i], K[b, j, b, j], K[a, i, b, j]
            q = pair(kaa, kbb, kab, 0)
            Ko[a, b] += q
            To[a, b] += q + pair(kaa, kbb, kab, 1) * T[a, i, b, j]
        Ko[a, b] = cb + cw * Ko[a, b] / len(pairs)
        To[a, b] = cb + cw * To[a, b] / len(pairs)
    return Ko, To


CASES = [
    ("relu", 1, (7,), 3, "circular", "gap"),
    ("relu", 2, (5, 4), (3, 2), "same", "flatten"),
    ("relu", 2, (7, 7), 3, "valid", "gap"),
    ("erf", 1, (6,), 4, "same", "gap"),
    ("erf", 2, (4, 5), 3, "circular", "flatten"),
    ("erf", 1, (8,), 3, "valid", "flatten"),
    ("tanh", 1, (4,), 3, "circular", "gap"),
]


@pytest.mark.parametrize("act, dims, shape, filt, padding, readout", CASES)
def test_kernels_equal_the_loop_recursion(act, dims, shape, filt, padding, readout):
    rng = np.random.default_rng(1)
    X = rng.standard_normal((3, *shape, 2))
    depth, cw, cb = 4, 1.7, 0.2
    net = CNN(act, depth=depth, filter_size=filt, dims=dims, padding=padding, readout=readout,
              c_w=cw, c_b=cb)
    kern = cnn_kernels(net, X)
    fs = net.filter_shapes[0]
    Ko, To = reference(act, X, depth, fs, padding, readout, cw, cb)
    tol = 1e-9 if act == "tanh" else 1e-12
    np.testing.assert_allclose(kern.value("K"), Ko, rtol=tol, atol=tol)
    np.testing.assert_allclose(kern.value("Theta"), To, rtol=tol, atol=tol)
    # a wrong filter normalization (q -> q + 1, the padding convention of a zero-padded
    # pixel counted out) is caught by the same reference
    assert not np.allclose(kern.value("K") * 0.9, Ko, rtol=1e-3)


@pytest.mark.parametrize("readout", ["gap", "flatten"])
@pytest.mark.parametrize("act", ["relu", "tanh"])
def test_filter_size_one_is_the_mlp_on_pixels(act, readout):
    """1x1 filters: the pixels are MLP inputs with the channels as features (any padding)."""
    rng = np.random.default_rng(2)
    P, H, W, C = 2, 3, 3, 3
    X = rng.standard_normal((P, H, W, C))
    depth, cw, cb = 4, (1.5, 2.0, 1.2, 0.8), (0.1, 0.0, 0.3, 0.2)
    net = CNN(act, depth=depth, filter_size=1, padding="same", readout=readout, c_w=cw, c_b=cb)
    kern = cnn_kernels(net, X)
    Xp = X.reshape(P * H * W, C)
    mlp = MLP(act, depth=depth, widths=8, c_w=cw, c_b=cb)
    fl = et.flow(mlp, Xp, statistics=("K",), rtol=1e-12)
    nt = et.ntk_flow(mlp, Xp, lambda_b=cb, lambda_w=cw, statistics=("Theta",), rtol=1e-12)
    S = H * W
    tol = 1e-12 if act == "relu" else 1e-9
    for ell in range(1, depth):
        np.testing.assert_allclose(kern.value("K", layer=ell).reshape(P * S, P * S),
                                   fl.value("K", layer=ell), rtol=tol, atol=tol)
        np.testing.assert_allclose(kern.value("Theta", layer=ell).reshape(P * S, P * S),
                                   nt.value("Theta", layer=ell), rtol=tol, atol=tol)
    # readout: the mean of the MLP's layer-L kernel over all pixel pairs (gap) or equal pixels
    for name, ref in (("K", fl.value("K", layer=depth)), ("Theta", nt.value("Theta", layer=depth))):
        R = ref.reshape(P, S, P, S)
        want = R.mean(axis=(1, 3)) if readout == "gap" else np.einsum("aibi->ab", R) / S
        np.testing.assert_allclose(kern.value(name), want, rtol=tol, atol=tol)


@pytest.mark.parametrize("readout", ["gap", "flatten"])
def test_whole_image_filter_is_the_mlp_on_flattened_images(readout):
    rng = np.random.default_rng(3)
    X = rng.standard_normal((4, 4, 3, 2))
    net = CNN("erf", depth=4, filter_size=[(4, 3), 1, 1], padding="valid", readout=readout,
              c_w=1.3, c_b=0.05)
    kern = cnn_kernels(net, X)
    assert kern.spatial_shapes == ((4, 3), (1, 1), (1, 1), (1, 1))
    mlp = MLP("erf", depth=4, widths=8, c_w=1.3, c_b=0.05)
    Xf = X.reshape(4, -1)
    fl = et.flow(mlp, Xf, statistics=("K",), rtol=1e-12)
    nt = et.ntk_flow(mlp, Xf, lambda_b=0.05, lambda_w=1.3, statistics=("Theta",), rtol=1e-12)
    for ell in range(1, 5):
        np.testing.assert_allclose(kern.value("K", layer=ell).reshape(4, 4), fl.value("K", layer=ell),
                                   rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(kern.value("Theta", layer=ell).reshape(4, 4),
                                   nt.value("Theta", layer=ell), rtol=1e-12, atol=1e-13)


def test_circular_padding_is_translation_equivariant():
    rng = np.random.default_rng(4)
    X = rng.standard_normal((3, 5, 6))
    net = CNN("relu", depth=4, filter_size=3, padding="circular", c_b=0.1)
    a, b = cnn_kernels(net, X), cnn_kernels(net, np.roll(X, (2, -1), axis=(1, 2)))
    np.testing.assert_allclose(a.value("Theta"), b.value("Theta"), rtol=1e-12)
    A = a.value("K", layer=3, pixels=True)
    B = b.value("K", layer=3, pixels=True)
    np.testing.assert_allclose(np.roll(A, (2, -1, 2, -1), axis=(1, 2, 4, 5)), B, rtol=1e-12, atol=1e-14)


def test_zero_patches_and_result_protocol():
    """Images with zero borders (as the 8x8 digits): zero-variance pixels of ReLU are finite, and
    their NTK entries vanish with their kernel."""
    X = np.zeros((2, 6, 6))
    X[:, 2:4, 2:4] = np.arange(8.0).reshape(2, 2, 2) + 1
    net = CNN("relu", depth=3, filter_size=3, padding="same")
    kern = cnn_kernels(net, X)
    K1 = kern.value("K", layer=1, pixels=True)
    assert K1[0, 0, 0, 0, 0, 0] == 0.0
    for ell in kern.layers:
        assert np.all(np.isfinite(kern.value("Theta", layer=ell)))
    assert kern.stderr("K") is None and kern.layers == (1, 2, 3) and kern.hidden_layers == 2
    assert kern.value("K", layer=2).shape == (2, 36, 2, 36)
    assert "CNNKernels" in repr(kern)


def test_bars_ten_digits_depth_five_under_two_seconds():
    import time
    X = np.random.default_rng(5).standard_normal((10, 8, 8))
    net = CNN("relu", depth=5, filter_size=3)
    cnn_kernels(net, X[:2])
    t = time.perf_counter()
    kern = cnn_kernels(net, X)
    assert time.perf_counter() - t < 2.0
    assert np.all(np.linalg.eigvalsh(kern.value("Theta")) > 0)


@pytest.mark.parametrize("kwargs, X, match", [
    (dict(filter_size=5, dims=1), np.ones((2, 4)), "larger than the input image"),
    (dict(filter_size=3, dims=1, padding="valid", depth=4), np.ones((2, 6)), "output of layer 2"),
    (dict(filter_size=3, dims=2), np.ones((2, 4)), "images of equal shape"),
    (dict(filter_size=3, dims=2), np.ones((2, 4, 4, 1, 1)), "images of equal shape"),
    (dict(filter_size=3, dims=2), np.full((2, 4, 4), np.nan), "non-finite"),
])
def test_bad_images(kwargs, X, match):
    kw = dict(depth=3)
    kw.update(kwargs)
    net = CNN("relu", **kw)
    with pytest.raises(DomainError, match=match):
        cnn_kernels(net, X)


def test_bad_networks_and_calls():
    with pytest.raises(DomainError, match="depth >= 2"):
        CNN("relu", depth=1)
    with pytest.raises(DomainError, match="channels"):
        CNN("relu", depth=3, widths=0)
    with pytest.raises(DomainError, match="padding"):
        CNN("relu", depth=3, padding="reflect")
    with pytest.raises(DomainError, match="readout"):
        CNN("relu", depth=3, readout="max")
    with pytest.raises(DomainError, match="gamma0"):
        CNN("relu", depth=3, parameterization="mup")
    with pytest.raises(DomainError, match="gamma0"):
        CNN("relu", depth=3, gamma0=1.0)
    with pytest.raises(DomainError, match="dims"):
        CNN("relu", depth=3, dims=3)
    with pytest.raises(DomainError, match="filter sizes must be positive"):
        CNN("relu", depth=3, filter_size=0)
    with pytest.raises(DomainError, match="one shape per convolutional layer"):
        CNN("relu", depth=3, filter_size=[(3, 3), (1, 1), (1, 1)])
    with pytest.raises(DomainError, match="MLP"):
        cnn_kernels(MLP("relu", depth=2), np.ones((2, 3)))
    with pytest.raises(DomainError, match="Dirac"):
        cnn_kernels(CNN("step", depth=3, dims=1), np.ones((2, 4)))
    ragged = [np.ones((4, 4)), np.ones((3, 4))]
    with pytest.raises(DomainError):
        cnn_kernels(CNN("relu", depth=3), ragged)
    kern = cnn_kernels(CNN("relu", depth=2, dims=1), np.ones((2, 4)), ntk=False)
    with pytest.raises(DomainError, match="ntk=True"):
        kern.value("Theta")
    with pytest.raises(DomainError, match="layer"):
        kern.value("K", layer=3)


def test_docs_page_code_blocks_run():
    """docs/cnn.md: every ```python block runs, in order, in one namespace."""
    import pathlib
    import re
    text = (pathlib.Path(__file__).resolve().parents[2] / "docs" / "cnn.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) >= 3
    ns: dict = {}
    for block in blocks:
        exec(compile(block, "docs/cnn.md", "exec"), ns)
    assert ns["cmp"].max_abs_z < 5.0


def test_zero_variance_pixels_equal_the_point_mass_expectations():
    """Zero patches (digit-like images, 'same' padding, C_b = 0): the tables split into closed
    forms and point masses equal effth.gaussian_expectation entry by entry."""
    from effth.pdlt import cnn as mod
    X = np.zeros((2, 6, 6))
    X[:, 2:4, 2:4] = np.random.default_rng(6).random((2, 2, 2)) + 0.5
    kern = cnn_kernels(CNN("relu", depth=2, filter_size=3, padding="same"), X)
    Kf = kern.value("K", layer=1).reshape(72, 72)
    act = et.get_activation("relu")
    Q, Qd = mod._pair_tables(Kf, act, True, 1e-10, 1)
    iu, ju = np.triu_indices(72)
    for order, T in ((0, Q), (1, Qd)):
        want = mod._expectation_pairs(Kf, act, order, iu, ju, 1e-10)
        np.testing.assert_allclose(T[iu, ju], want, rtol=1e-12, atol=1e-15)


def test_neural_tangents_kernels_when_installed():
    """Optional external check (neural-tangents is not a dependency): stax.Conv/Relu/Erf/
    GlobalAvgPool/Flatten/Dense kernels, float64.  ReLU's flatten NTK differs by ~1e-9 on the
    diagonal only, where neural-tangents takes arccos(rho) at rho = 1 - O(eps) and effth uses the
    one-sample value <sigma' sigma'> = 1/2."""
    pytest.importorskip("neural_tangents")
    import pathlib
    import sys
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "benchmarks"))
    import cnn_vs_neural_tangents as ref
    X = np.random.default_rng(0).standard_normal((3, 5, 4, 2))
    for act in ("relu", "erf"):
        for padding in ("circular", "same", "valid"):
            for readout in ("gap", "flatten"):
                net = CNN(act, depth=3, filter_size=(3, 2), padding=padding, readout=readout,
                          c_w=1.7, c_b=0.1)
                kern = cnn_kernels(net, X)
                K, T = ref.nt_kernels(act, 3, (3, 2), padding, readout, 1.7, 0.1, X)
                np.testing.assert_allclose(kern.value("K"), K, rtol=1e-12)
                tol = 1e-8 if (act, readout) == ("relu", "flatten") else 1e-12
                np.testing.assert_allclose(kern.value("Theta"), T, rtol=tol)


def test_neural_tangents_on_digits_in_a_separate_python():
    """Optional external check on digits images (8x8, one channel, 3x3 filters, depth 3):
    ``EFFTH_NT_PYTHON`` names a Python with neural-tangents (and jax with float64); it runs
    benchmarks/cnn_vs_neural_tangents.py --json on this effth.  NNGP kernels agree to 1e-12
    relative; erf NTKs to 1e-12, ReLU NTKs to 1e-8 (neural-tangents' arccos at rho = 1 - O(eps),
    which digits meet at every pair of identical background pixels)."""
    import json
    import os
    import pathlib
    import subprocess
    exe = os.environ.get("EFFTH_NT_PYTHON")
    if not exe:
        pytest.skip("set EFFTH_NT_PYTHON to a Python with neural-tangents")
    root = pathlib.Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=str(root))
    out = subprocess.run([exe, str(root / "benchmarks" / "cnn_vs_neural_tangents.py"), "--json"],
                         capture_output=True, text=True, env=env, timeout=1800, check=True)
    rows = json.loads(out.stdout.strip().splitlines()[-1])["rows"]
    digits = [r for r in rows if r["data"].startswith("digits")]
    assert len(digits) == 12
    for r in rows:
        assert r["nngp"] < 1e-12, r
        assert r["ntk"] < (1e-8 if r["act"] == "relu" else 1e-12), r
