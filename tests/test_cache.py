"""The on-disk derivation cache (effth._cache): it stores and reads back, a code change or
EFFTH_CACHE=0 bypasses it, a corrupt file is recomputed, and a cached NTK derivation equals a
fresh one (the cache can only save time)."""

from __future__ import annotations

import pickle

import pytest

from effth import _cache


@pytest.fixture
def cache_on(tmp_path, monkeypatch):
    monkeypatch.setenv("EFFTH_CACHE", "1")
    monkeypatch.setenv("EFFTH_CACHE_DIR", str(tmp_path))
    return tmp_path


def _counter():
    calls = []

    def f(x):
        calls.append(x)
        return {"x": x, "sq": x * x}

    return calls, f


def test_stores_and_reads_back(cache_on):
    calls, f = _counter()
    g = _cache.disk_cached(f)
    assert g(3) == {"x": 3, "sq": 9} and calls == [3]
    files = list(cache_on.rglob("*.pkl"))
    assert len(files) == 1 and files[0].parent.name == _cache.source_hash()
    g2 = _cache.disk_cached(f)            # a new process: empty memory cache, same disk
    assert g2(3) == {"x": 3, "sq": 9} and calls == [3]
    assert g2(4)["sq"] == 16 and calls == [3, 4]


def test_corrupt_file_is_recomputed(cache_on):
    calls, f = _counter()
    _cache.disk_cached(f)(5)
    (path,) = cache_on.rglob("*.pkl")
    path.write_bytes(b"not a pickle")
    assert _cache.disk_cached(f)(5)["sq"] == 25 and calls == [5, 5]
    assert pickle.loads(path.read_bytes())["sq"] == 25       # rewritten


def test_disabled_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("EFFTH_CACHE", "0")
    monkeypatch.setenv("EFFTH_CACHE_DIR", str(tmp_path))
    calls, f = _counter()
    g = _cache.disk_cached(f)
    g(1)
    assert not list(tmp_path.rglob("*.pkl"))


def test_cached_derivation_equals_fresh(cache_on):
    from effth.pdlt.ntk import recursions as ntk

    fresh = ntk._derive.uncached("H1")
    first = _cache.disk_cached(ntk._derive.uncached)("H1")
    again = _cache.disk_cached(ntk._derive.uncached)("H1")     # read from disk
    assert first[0] == fresh[0] and again[0] == fresh[0] and again[1] == fresh[1]
