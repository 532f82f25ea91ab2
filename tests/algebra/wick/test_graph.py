"""Wick graphs and isomorphism classes."""

from __future__ import annotations

import os
import subprocess
import sys
from math import factorial

import networkx as nx
import pytest

from effth.algebra.wick import (
    Slot,
    WickGraph,
    count_pairings,
    cycle_histogram,
    structure_automorphisms,
    structure_generators,
    wick_classes,
)


def vertex_setup(n_ext: int, kind: str = "full", copies: int = 1, same_label: bool = False):
    slots = [Slot(("x", k), label="mu" if same_label else f"mu{k}") for k in range(n_ext)]
    structure = []
    for c in range(copies):
        names = [("v", c, leg) for leg in range(4)]
        slots += [Slot(nm, label="V") for nm in names]
        if kind == "full":
            structure += [(names[a], names[b], "vertex") for a in range(4) for b in range(a + 1, 4)]
        else:
            structure += [(names[0], names[1], "trace"), (names[2], names[3], "trace")]
            structure += [(names[a], names[b], "vertex") for a in (0, 1) for b in (2, 3)]
    return slots, structure


def _partition_count(m: int) -> int:
    from sympy.functions.combinatorial.numbers import partition

    return int(partition(m))


@pytest.mark.parametrize(
    "n_ext, kind, copies",
    [(2, "full", 1), (4, "full", 1), (2, "pair", 1), (4, "pair", 1), (2, "full", 2), (0, "pair", 2)],
)
def test_methods_agree_and_multiplicities_sum(n_ext, kind, copies):
    slots, structure = vertex_setup(n_ext, kind, copies)
    a = wick_classes(slots, structure, method="automorphisms", keep_members=True)
    b = wick_classes(slots, structure, method="isomorphism", keep_members=True)
    assert a.multiplicities == b.multiplicities
    assert [c.pairing for c in a] == [c.pairing for c in b]
    assert sum(a.multiplicities) == count_pairings(len(slots)) == a.n_pairings
    for ca, cb in zip(a, b):
        assert {frozenset(map(frozenset, p)) for p in ca.members} == {frozenset(map(frozenset, p)) for p in cb.members}
    # members of different classes are non-isomorphic, members of one class isomorphic
    reps = [c.representative for c in a]
    for i, r in enumerate(reps):
        for s in reps[i + 1:]:
            assert not r.is_isomorphic(s)


def test_first_order_two_point_classes_spec_2_5():
    slots, structure = vertex_setup(2)
    ex = wick_classes(slots, structure)
    assert ex.n_pairings == 15 and ex.multiplicities == (3, 12)  # 3 pair mu1 with mu2, 12 do not
    assert ex.n_automorphisms == 24
    conn = wick_classes(slots, structure, where=WickGraph.is_connected)
    assert conn.multiplicities == (12,) and conn.n_selected == 12


def test_four_point_connected_is_one_class_of_24():
    slots, structure = vertex_setup(4)
    ex = wick_classes(slots, structure, where=lambda g: g.is_connected())
    assert ex.multiplicities == (24,)
    assert ex.classes[0].pairing == ((("x", 0), ("v", 0, 0)), (("x", 1), ("v", 0, 1)),
                                     (("x", 2), ("v", 0, 2)), (("x", 3), ("v", 0, 3)))


@pytest.mark.parametrize("m", range(1, 7))
def test_trace_classes_are_cycle_types(m):
    slots = [Slot(k, label="z") for k in range(2 * m)]
    ex = wick_classes(slots, [(2 * k, 2 * k + 1, "trace") for k in range(m)])
    assert len(ex) == _partition_count(m)  # classes = cycle types = integer partitions of m
    assert ex.n_automorphisms == 2**m * factorial(m)
    hist: dict = {}
    for c, cyc in zip(ex.classes, ex.cycles):
        hist[cyc] = hist.get(cyc, 0) + c.multiplicity
    assert hist == cycle_histogram(m)


def test_identical_externals_merge():
    slots, structure = vertex_setup(2, same_label=True)
    ex = wick_classes(slots, structure)
    assert ex.multiplicities == (3, 12)
    slots = [Slot(k, "z") for k in range(6)]
    assert wick_classes(slots).multiplicities == (15,)


def test_generators_match_full_group():
    for kind in ("full", "pair"):
        slots, structure = vertex_setup(2, kind, copies=2)
        gens, order = structure_generators(slots, structure)
        full = structure_automorphisms(slots, structure)
        assert order == len(full)
        assert set(gens) <= set(full)
    assert structure_automorphisms(*vertex_setup(0, "full", 2), limit=10) is None


def test_multigraph_collapse_and_components():
    slots = [Slot(k, "z") for k in range(4)]
    g = WickGraph(slots, ((0, 1), (2, 3)), [(0, 1, "trace"), (2, 3, "trace")])
    assert isinstance(g.graph, nx.Graph) and not g.graph.is_multigraph()
    assert g.graph.edges[0, 1]["kinds"] == (("trace", 1), ("wick", 1))
    assert g.components() == [(0, 1), (2, 3)]
    assert not g.is_connected() and g.n_cycles() == 2
    assert "WickGraph" in repr(g)


def test_report_text():
    slots, structure = vertex_setup(4)
    ex = wick_classes(slots, structure)
    text = str(ex)
    assert "105 pairings" in text and "10 classes" in text and "|Aut| = 24" in text
    assert "105 pairings" in repr(ex)
    tr = wick_classes([Slot(k, "z") for k in range(4)], [(0, 1, "trace"), (2, 3, "trace")])
    assert "n^2" in str(tr)


def test_bad_input():
    with pytest.raises(ValueError):
        wick_classes([Slot(0), Slot(0)])
    with pytest.raises(ValueError):
        wick_classes([Slot(0), Slot(1), Slot(2)])
    with pytest.raises(ValueError):
        wick_classes([Slot(0), Slot(1)], [(0, 5)])
    with pytest.raises(ValueError):
        wick_classes([Slot(0), Slot(1)], method="nauty")
    with pytest.raises(ValueError):
        wick_classes([Slot(0), Slot(1)], [(0, 1, "a", "b")])


_SNIPPET = """
from effth.algebra.wick import Slot, wick_classes
sl = [Slot(('x', k), f'mu{k}') for k in range(4)] + [Slot(('v', 0, k), 'V') for k in range(4)]
st = [(('v', 0, a), ('v', 0, b), 'vertex') for a in range(4) for b in range(a + 1, 4)]
for m in ('automorphisms', 'isomorphism'):
    print(wick_classes(sl, st, method=m))
"""


def test_deterministic_across_hash_seeds():
    outs = set()
    for seed in ("0", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        r = subprocess.run([sys.executable, "-c", _SNIPPET], capture_output=True, text=True, env=env, check=True)
        outs.add(r.stdout)
    assert len(outs) == 1


def test_draw():
    mpl = pytest.importorskip("matplotlib")
    mpl.use("Agg")
    slots, structure = vertex_setup(2)
    ax = wick_classes(slots, structure).classes[1].representative.draw()
    assert ax is not None
