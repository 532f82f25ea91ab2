"""The image loaders: shipped digits and CIFAR-10's python batch format (a tiny file written here)."""

import pickle

import numpy as np
import pytest

from effth.data import CIFAR10_CLASSES, load_cifar10, load_digits
from effth.errors import DomainError


def test_digits_shipped_counts_and_scales():
    d = load_digits(scale="raw")
    assert len(d) == 360 and d.images.shape == (360, 8, 8) and d.classes == (0, 1)
    assert np.bincount(d.labels).tolist() == [178, 182]
    assert d.images.min() == 0 and d.images.max() == 16
    assert np.all(d.images == np.round(d.images))             # pixel counts 0..16
    assert np.array_equal(d.y, np.where(d.labels == 1, 1.0, -1.0))
    # the classes differ: mean image of ones is brighter in the centre column than zeros'
    zeros, ones = d.images[d.labels == 0], d.images[d.labels == 1]
    assert ones[:, :, 3:5].mean() > zeros[:, :, 3:5].mean() + 3
    u = load_digits(scale="unit")
    assert np.allclose(u.images.mean(axis=(1, 2)), 0, atol=1e-12)
    assert np.allclose((u.images ** 2).mean(axis=(1, 2)), 1, rtol=1e-12)
    assert np.allclose(load_digits(scale="max").images, d.images / 16)


def test_digits_selection_balanced_and_seeded():
    d = load_digits(10)
    assert d.labels.tolist() == [0, 1] * 5                      # alternating: prefixes balanced
    a, b = load_digits(12, seed=3), load_digits(12, seed=3)
    assert np.array_equal(a.images, b.images)
    assert not np.array_equal(a.images, load_digits(12, seed=4).images)
    one = load_digits(5, classes=[1])
    assert one.y is None and set(one.labels) == {1}
    tr, te = load_digits(20).split(16)
    assert len(tr) == 16 and len(te) == 4 and tr.y.shape == (16,)


@pytest.mark.parametrize("kwargs, msg", [
    (dict(classes=(0, 7)), "not in"), (dict(n=0), "positive int"), (dict(n=1000), "only 360"),
    (dict(scale="zscore"), "scale="), (dict(classes=(1, 1)), "repeat"),
])
def test_digits_bad_input(kwargs, msg):
    with pytest.raises(DomainError, match=msg):
        load_digits(**kwargs)


def _write_batch(path, n=12, seed=0, **override):
    rng = np.random.default_rng(seed)
    batch = {b"batch_label": b"testing batch 1 of 1",
             b"labels": [int(v) for v in rng.integers(0, 10, n)],
             b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
             b"filenames": [b"img%d.png" % k for k in range(n)]}
    batch.update(override)
    with open(path, "wb") as fh:
        pickle.dump(batch, fh, protocol=2)
    return batch


def test_cifar_reads_the_python_batch_format(tmp_path):
    d = tmp_path / "cifar-10-batches-py"
    d.mkdir()
    b1 = _write_batch(d / "data_batch_1", n=12, seed=1)
    b2 = _write_batch(d / "test_batch", n=8, seed=2)
    labels = np.concatenate([b1[b"labels"], b2[b"labels"]])
    data = np.concatenate([b1[b"data"], b2[b"data"]])
    out = load_cifar10(d, batches=("data_batch_1", "test_batch"), classes=None, scale="raw")
    assert out.images.shape[1:] == (32, 32, 3) and len(out) == 20
    # channel-major rows: pixel (i, j) of channel c is data[k, c*1024 + 32 i + j]
    k = 0
    src = int(np.flatnonzero(labels == out.labels[0])[0])
    assert out.labels[0] == labels[src]
    for (i, j, c) in [(0, 0, 0), (5, 7, 1), (31, 2, 2)]:
        assert out.images[k, i, j, c] == data[src, c * 1024 + 32 * i + j]
    # every image of the two batches is there once (as a multiset of rows)
    got = sorted(map(bytes, out.images.astype(np.uint8).transpose(0, 3, 1, 2).reshape(20, -1)))
    assert got == sorted(map(bytes, data))
    g = load_cifar10(d / "data_batch_1", classes=None, grayscale=True, scale="max")
    assert g.images.shape == (12, 32, 32) and g.images.max() <= 1.0
    two = [c for c in range(10) if c in b1[b"labels"]][:2]
    sel = load_cifar10(d, classes=two)
    assert set(sel.labels) <= set(two) and np.array_equal(sel.y, np.where(sel.labels == two[1], 1., -1.))
    assert np.allclose((sel.images ** 2).mean(axis=(1, 2, 3)), 1)
    assert len(CIFAR10_CLASSES) == 10


def test_cifar_bad_files(tmp_path):
    with pytest.raises(DomainError, match="does not exist"):
        load_cifar10(tmp_path / "nowhere")
    with pytest.raises(DomainError, match="not found in"):
        load_cifar10(tmp_path)
    bad = tmp_path / "bad"
    _write_batch(bad, data=np.zeros((4, 100), np.uint8))
    with pytest.raises(DomainError, match=r"\(N, 3072\)"):
        load_cifar10(bad, classes=None)
    short = tmp_path / "short"
    _write_batch(short, n=4, labels=[0, 1])
    with pytest.raises(DomainError, match="labels for 4 images"):
        load_cifar10(short, classes=None)
    junk = tmp_path / "junk"
    junk.write_bytes(b"not a pickle at all")
    with pytest.raises(DomainError, match="not a CIFAR-10"):
        load_cifar10(junk)
    evil = tmp_path / "evil"
    with open(evil, "wb") as fh:
        pickle.dump({b"data": np.zeros((1, 3072), np.uint8), b"labels": [0], b"x": print}, fh)
    with pytest.raises(DomainError, match="not allowed"):
        load_cifar10(evil, classes=None)
