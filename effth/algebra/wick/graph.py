r"""Wick pairings as graphs, grouped into isomorphism classes with multiplicities.

A Wick term (PDLT (1.45)) is a perfect matching of the Gaussian **slots**.  Slots carry
attributes (a label, optionally a neuron index, a layer and a field name); some slots are tied
by fixed **structure** edges (the four legs of one interaction vertex, the repeated-index
"trace" matching of :math:`\sum_j z_j z_j`, ...).  A pairing together with the structure is a
:class:`WickGraph`.  Two pairings are *equivalent* when a permutation of the slots that
preserves the slot attributes and the structure edges (with their kinds) maps one onto the
other; equivalent pairings give equal terms once dummy indices are relabelled, so a Wick sum
is a sum over **classes** times their **multiplicities**:

.. math:: \sum_{\pi} T(\pi) = \sum_{[\pi]} |[\pi]|\, T(\pi_{\rm rep}).

:func:`wick_classes` computes the classes.  Two exact methods are used:

* ``"automorphisms"`` (``"auto"``) -- a strong generating set of the automorphism group
  :math:`\mathrm{Aut}` of the structure graph (slot colours and edge kinds preserved) is found
  once by individualization (at most :math:`N^2` small VF2 tests); the class of a pairing is
  its :math:`\mathrm{Aut}`-orbit, generated in one go by closing under the generators, so every
  later member is skipped by a set lookup and per-class work (predicates, sympy terms) runs
  once per class;
* ``"isomorphism"`` -- Weisfeiler--Lehman hashes bucket the pairing graphs and
  ``networkx.is_isomorphic`` (node and edge matches) confirms; hashes are never stored.
  Slower; kept as an independent check.

Output order is deterministic: classes appear in order of their
first member in :func:`~effth.algebra.wick.pairings.enumerate_pairings` order, and that
first member is the class representative.

Examples
--------
Four identical slots: the 3 pairings form one class.

>>> from effth.algebra.wick.graph import Slot, wick_classes
>>> slots = [Slot(k, label="z") for k in range(4)]
>>> wick_classes(slots).multiplicities
(3,)

Two slots tied by a trace edge (as in :math:`\sum_{j,k} z_j z_j z_k z_k`): two classes.

>>> ex = wick_classes(slots, structure=[(0, 1, "trace"), (2, 3, "trace")])
>>> ex.multiplicities, ex.cycles
((1, 2), (2, 1))
"""

from __future__ import annotations

from effth._signature import public

from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Iterable, Iterator, Sequence

import networkx as nx
from networkx.algorithms import isomorphism as nxiso

from .pairings import enumerate_pairings

__all__ = [
    "Slot",
    "WickGraph",
    "WickClass",
    "WickExpansion",
    "wick_classes",
    "structure_automorphisms",
    "structure_generators",
]

Pairing = tuple  # tuple of (name, name) pairs


@public
@dataclass(frozen=True)
class Slot:
    """One Gaussian slot :math:`z_{i;\\alpha}` of a Wick contraction.

    Parameters
    ----------
    name : hashable
        Unique identifier of the slot (e.g. ``("ext", 0)`` or ``0``).
    label : object, optional
        Sample index or tensor-leg name.  Slots with equal ``(label, neuron, layer, field)``
        are interchangeable for the isomorphism test.
    neuron, layer : object, optional
        Neuron index and layer (``None`` when absent).
    field : str
        Field name, ``"z"`` by default.
    """

    name: Hashable
    label: Any = None
    neuron: Any = None
    layer: Any = None
    field: str = "z"

    @property
    def color(self) -> tuple:
        """The attributes an equivalence must preserve."""
        return (str(self.label), str(self.neuron), str(self.layer), self.field)


def _kinds(counts: dict) -> tuple:
    return tuple(sorted(counts.items()))


@public
class WickGraph:
    """A pairing of slots plus the fixed structure edges, as a simple ``networkx.Graph``.

    Parallel edges (a contraction on top of a structure edge, or a doubled contraction) are
    collapsed into one edge whose ``kinds`` attribute is a sorted tuple of ``(kind, count)``.

    Parameters
    ----------
    slots : sequence of Slot
    pairing : tuple of pairs of slot names
    structure : iterable of ``(u, v, kind)``
    """

    def __init__(self, slots: Sequence[Slot], pairing: Pairing, structure: Iterable = ()):
        self.slots = tuple(slots)
        self.pairing = tuple(tuple(p) for p in pairing)
        self.structure = tuple(_normalize_structure(structure))
        self._graph: nx.Graph | None = None

    @property
    def graph(self) -> nx.Graph:
        """The collapsed ``networkx.Graph`` (nodes: slot names with attributes)."""
        if self._graph is None:
            g = nx.Graph()
            for s in self.slots:
                g.add_node(s.name, color=s.color, label=s.label, neuron=s.neuron,
                           layer=s.layer, field=s.field)
            counts: dict = {}
            for u, v, kind in list(self.structure) + [(a, b, "wick") for a, b in self.pairing]:
                key = (u, v) if (u, v) in counts or (v, u) not in counts else (v, u)
                counts.setdefault(key, {}).setdefault(kind, 0)
                counts[key][kind] += 1
            for (u, v), c in counts.items():
                g.add_edge(u, v, kinds=_kinds(c))
            self._graph = g
        return self._graph

    def components(self) -> list[tuple]:
        """Connected components (structure plus contractions), each a tuple of slot names in slot order."""
        order = {s.name: k for k, s in enumerate(self.slots)}
        comps = [tuple(sorted(c, key=order.__getitem__)) for c in nx.connected_components(self.graph)]
        return sorted(comps, key=lambda c: order[c[0]])

    def is_connected(self) -> bool:
        """Whether structure plus contractions form one connected graph."""
        return nx.is_connected(self.graph)

    def n_cycles(self, kind: str = "trace") -> int:
        """Number of cycles of the union of the pairing and the structure edges of ``kind``."""
        from .counting import cycle_count

        trace = [(u, v) for u, v, k in self.structure if k == kind]
        return cycle_count(self.pairing, trace)

    def is_isomorphic(self, other: "WickGraph") -> bool:
        """Isomorphism preserving slot colours and edge kinds."""
        return nx.is_isomorphic(self.graph, other.graph, node_match=_node_match, edge_match=_edge_match)

    def draw(self, ax=None, **kwargs):
        """Draw the graph: structure edges dashed, contractions solid (needs matplotlib).

        Parameters
        ----------
        ax : matplotlib Axes, optional
        **kwargs
            Passed to ``networkx.draw_networkx_nodes``.

        Returns
        -------
        matplotlib Axes
        """
        import matplotlib.pyplot as plt  # optional dependency

        if ax is None:
            _, ax = plt.subplots()
        g = self.graph
        pos = nx.circular_layout(sorted(g.nodes, key=str))
        nx.draw_networkx_nodes(g, pos, ax=ax, **kwargs)
        labels = {s.name: f"{s.label}" + ("" if s.neuron is None else f";{s.neuron}") for s in self.slots}
        nx.draw_networkx_labels(g, pos, labels=labels, ax=ax, font_size=8)
        wick = [(u, v) for u, v, d in g.edges(data=True) if any(k == "wick" for k, _ in d["kinds"])]
        struct = [(u, v) for u, v, d in g.edges(data=True) if any(k != "wick" for k, _ in d["kinds"])]
        nx.draw_networkx_edges(g, pos, edgelist=struct, style="dashed", ax=ax, edge_color="gray")
        nx.draw_networkx_edges(g, pos, edgelist=wick, ax=ax, width=2.0)
        ax.set_axis_off()
        return ax

    def __repr__(self) -> str:
        pairs = ", ".join(f"({a}, {b})" for a, b in self.pairing)
        return f"WickGraph([{pairs}])"


def _node_match(a: dict, b: dict) -> bool:
    return a["color"] == b["color"]


def _edge_match(a: dict, b: dict) -> bool:
    return a["kinds"] == b["kinds"]


def _normalize_structure(structure: Iterable) -> Iterator[tuple]:
    for e in structure:
        if len(e) == 2:
            yield (e[0], e[1], "structure")
        elif len(e) == 3:
            yield (e[0], e[1], str(e[2]))
        else:
            raise ValueError(f"structure edge {e!r} must be (u, v) or (u, v, kind)")


@public
@dataclass
class WickClass:
    """One isomorphism class: a representative graph and the number of pairings in the class."""

    representative: WickGraph
    multiplicity: int
    members: tuple = field(default=(), repr=False)

    @property
    def pairing(self) -> Pairing:
        return self.representative.pairing


@public
@dataclass
class WickExpansion:
    """Report of a grouped Wick expansion (like opt_einsum's ``PathInfo``).

    Attributes
    ----------
    slots, structure
        The input.
    classes : list of WickClass
        In deterministic order (first appearance in enumeration order).
    n_pairings : int
        Number of pairings enumerated, :math:`(2m-1)!!`.
    n_selected : int
        Pairings in the returned classes (after the ``where`` filter).
    method : str
        ``"automorphisms"`` or ``"isomorphism"``.
    n_automorphisms : int or None
        Order of the structure's automorphism group when it was computed.
    """

    slots: tuple
    structure: tuple
    classes: list
    n_pairings: int
    n_selected: int
    method: str
    n_automorphisms: int | None = None

    @property
    def multiplicities(self) -> tuple:
        return tuple(c.multiplicity for c in self.classes)

    @property
    def cycles(self) -> tuple:
        """Cycles of pairing ∪ trace edges for each class (the power of :math:`n` before normalization)."""
        return tuple(c.representative.n_cycles("trace") for c in self.classes)

    def __len__(self) -> int:
        return len(self.classes)

    def __iter__(self):
        return iter(self.classes)

    def __str__(self) -> str:
        has_trace = any(k == "trace" for _, _, k in self.structure)
        lines = [
            f"  Wick expansion: {len(self.slots)} slots, {self.n_pairings} pairings",
            f"  selected pairings: {self.n_selected} in {len(self.classes)} classes"
            f"  (method: {self.method}"
            + ("" if self.n_automorphisms is None else f", |Aut| = {self.n_automorphisms}") + ")",
            "-" * 72,
            f"{'class':>6} {'mult':>6} " + (f"{'n^cyc':>6} " if has_trace else "") + "representative",
            "-" * 72,
        ]
        for k, c in enumerate(self.classes):
            pairs = " ".join(f"({a},{b})" for a, b in c.pairing)
            cyc = f"{'n^' + str(c.representative.n_cycles('trace')):>6} " if has_trace else ""
            lines.append(f"{k:>6} {c.multiplicity:>6} {cyc}{pairs}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (f"<WickExpansion: {self.n_pairings} pairings, {self.n_selected} selected, "
                f"{len(self.classes)} classes>")


@public
def structure_automorphisms(slots: Sequence[Slot], structure: Iterable = (), limit: int | None = None):
    """Automorphisms of the structure graph preserving slot colours and edge kinds.

    Parameters
    ----------
    slots : sequence of Slot
    structure : iterable of ``(u, v[, kind])``
    limit : int, optional
        Stop and return ``None`` once more than ``limit`` automorphisms were found.

    Returns
    -------
    list of tuple or None
        Each automorphism as a tuple ``p`` with ``p[k]`` the position of the image of slot ``k``.

    Examples
    --------
    >>> sl = [Slot(k, label="V") for k in range(4)]
    >>> len(structure_automorphisms(sl, [(0, 1, "pair"), (2, 3, "pair")]))
    8
    """
    g = WickGraph(slots, (), structure).graph
    pos = {s.name: k for k, s in enumerate(slots)}
    matcher = nxiso.GraphMatcher(g, g, node_match=_node_match, edge_match=_edge_match)
    out = []
    for m in matcher.isomorphisms_iter():
        out.append(tuple(pos[m[s.name]] for s in slots))
        if limit is not None and len(out) > limit:
            return None
    return sorted(out)


@public
def structure_generators(slots: Sequence[Slot], structure: Iterable = ()) -> tuple[list, int]:
    r"""A strong generating set of the structure's automorphism group, and the group order.

    Individualization along a stabilizer chain: for each slot in turn (earlier ones fixed), one
    automorphism per image of the slot is found with VF2 -- at most ``len(slots)**2`` small
    isomorphism tests, however large the group (e.g. :math:`2^m m!` for a trace matching).  From
    the deepest level up, only the coset representatives that enlarge the basic orbit are kept.

    Returns
    -------
    generators : list of tuple
        Permutations of slot positions (identity excluded).
    order : int
        :math:`|\mathrm{Aut}|`, the product of the basic orbit lengths.

    Examples
    --------
    >>> sl = [Slot(k, label="z") for k in range(6)]
    >>> structure_generators(sl, [(0, 1, "trace"), (2, 3, "trace"), (4, 5, "trace")])[1]
    48
    """
    slots = tuple(slots)
    base = WickGraph(slots, (), structure).graph
    names = [s.name for s in slots]
    pos = {x: k for k, x in enumerate(names)}
    levels: list = []  # per base point: (position, [coset representatives])
    order = 1
    fixed: list = []
    for v in names:
        g1 = base.copy()
        for j, f in enumerate(fixed):
            g1.nodes[f]["color"] = g1.nodes[f]["color"] + (f"#fix{j}",)
        orbit, reps = 0, []
        for w in names:
            if base.nodes[w]["color"] != base.nodes[v]["color"] or w in fixed:
                continue
            a, b = g1.copy(), g1.copy()
            a.nodes[v]["color"] = a.nodes[v]["color"] + ("#new",)
            b.nodes[w]["color"] = b.nodes[w]["color"] + ("#new",)
            m = nxiso.GraphMatcher(a, b, node_match=_node_match, edge_match=_edge_match)
            if m.is_isomorphic():
                orbit += 1
                if w != v:
                    reps.append(tuple(pos[m.mapping[x]] for x in names))
        order *= max(orbit, 1)
        levels.append((pos[v], orbit, reps))
        fixed.append(v)
    # Keep, from the deepest level up, only representatives that enlarge the basic orbit:
    # <kept> then still equals the full group (orbit-stabilizer at every level).
    gens: list = []
    for point, size, reps in reversed(levels):
        reach = _point_orbit(point, gens)
        for r in reps:
            if len(reach) == size:
                break
            if r[point] not in reach:
                gens.append(r)
                reach = _point_orbit(point, gens)
    return gens, order


def _point_orbit(point: int, gens: list) -> set:
    orbit, stack = {point}, [point]
    while stack:
        x = stack.pop()
        for p in gens:
            if p[x] not in orbit:
                orbit.add(p[x])
                stack.append(p[x])
    return orbit


def _mate(pairing_idx: Iterable[tuple[int, int]], size: int) -> tuple:
    """A matching as its partner array: ``mate[k]`` is the slot paired with ``k`` (a canonical key)."""
    mate = [0] * size
    for a, b in pairing_idx:
        mate[a], mate[b] = b, a
    return tuple(mate)


def _pairs(mate: tuple) -> tuple:
    return tuple((k, m) for k, m in enumerate(mate) if k < m)


@public
def wick_classes(
    slots: Sequence[Slot],
    structure: Iterable = (),
    *,
    where: Callable[[WickGraph], bool] | None = None,
    method: str = "auto",
    keep_members: bool = False,
) -> WickExpansion:
    r"""Group all Wick pairings of ``slots`` into isomorphism classes with multiplicities.

    Parameters
    ----------
    slots : sequence of Slot
        The Gaussian slots, an even number with unique names.
    structure : iterable of ``(u, v)`` or ``(u, v, kind)``
        Fixed edges between slot names (vertex legs, trace matchings); kinds are preserved.
    where : callable, optional
        Predicate on a :class:`WickGraph`; only classes whose representative satisfies it are
        kept.  It must be invariant under the equivalence (connectedness, absence of vacuum
        components, cycle counts ... are).  It is evaluated once per class.
    method : {"auto", "automorphisms", "isomorphism"}
    keep_members : bool
        Store every member pairing of each class.

    Returns
    -------
    WickExpansion

    Notes
    -----
    Wick's theorem :math:`\langle z_{\mu_1}\cdots z_{\mu_{2m}}\rangle = \sum_\pi\prod K`
    (PDLT (1.45)) has :math:`(2m-1)!!` terms.  Pairings :math:`\pi,\pi'` are equivalent iff
    :math:`\pi' = \sigma(\pi)` for an automorphism :math:`\sigma` of the coloured structure
    graph; equivalently the graphs structure :math:`\cup\,\pi` and structure
    :math:`\cup\,\pi'` are isomorphic with colours and edge kinds preserved.  The class size is
    :math:`|\mathrm{Aut}|/|\mathrm{Stab}(\pi)|`.

    Examples
    --------
    The first-order two-point function of PDLT (1.74): two external slots and one vertex.

    >>> sl = [Slot("m1", "mu1"), Slot("m2", "mu2")] + [Slot(f"r{k}", "V") for k in range(4)]
    >>> vertex = [(f"r{a}", f"r{b}", "vertex") for a in range(4) for b in range(a + 1, 4)]
    >>> ex = wick_classes(sl, vertex)
    >>> ex.n_pairings, ex.multiplicities
    (15, (3, 12))
    """
    slots = tuple(slots)
    names = [s.name for s in slots]
    if len(set(names)) != len(names):
        raise ValueError("slot names must be unique")
    if len(slots) % 2:
        raise ValueError(f"an odd number of slots ({len(slots)}) has no pairings")
    structure = tuple(_normalize_structure(structure))
    unknown = {x for u, v, _ in structure for x in (u, v)} - set(names)
    if unknown:
        raise ValueError(f"structure refers to unknown slots {sorted(map(str, unknown))}")
    if method not in ("auto", "automorphisms", "isomorphism"):
        raise ValueError(f"method must be 'auto', 'automorphisms' or 'isomorphism', got {method!r}")

    if method == "isomorphism":
        return _classes_by_isomorphism(slots, structure, where, keep_members)
    gens, order = structure_generators(slots, structure)
    return _classes_by_automorphisms(slots, structure, gens, order, where, keep_members)


def _orbit(key: tuple, gens: list) -> set:
    """Orbit of a partner array under the group generated by ``gens`` (pairs ``(p, p^{-1})``)."""
    orbit = {key}
    stack = [key]
    while stack:
        cur = stack.pop()
        for p, pinv in gens:
            img = tuple([p[cur[q]] for q in pinv])
            if img not in orbit:
                orbit.add(img)
                stack.append(img)
    return orbit


def _classes_by_automorphisms(slots, structure, gens, order, where, keep_members) -> WickExpansion:
    names = [s.name for s in slots]
    size = len(slots)
    gens = [(p, tuple(sorted(range(size), key=p.__getitem__))) for p in gens]
    seen: set = set()
    classes = []
    total = selected = 0
    for pairing in enumerate_pairings(list(range(size))):
        total += 1
        key = _mate(pairing, size)
        if key in seen:
            continue
        orbit = _orbit(key, gens)
        seen |= orbit
        graph = WickGraph(slots, tuple((names[a], names[b]) for a, b in pairing), structure)
        if where is not None and not where(graph):
            continue
        members = ()
        if keep_members:
            members = tuple(sorted(tuple((names[a], names[b]) for a, b in _pairs(o)) for o in orbit))
        classes.append(WickClass(graph, len(orbit), members))
        selected += len(orbit)
    return WickExpansion(slots, structure, classes, total, selected, "automorphisms", order)


def _classes_by_isomorphism(slots, structure, where, keep_members) -> WickExpansion:
    names = [s.name for s in slots]
    buckets: dict = {}
    classes: list = []
    members: list = []
    total = 0
    for pairing in enumerate_pairings(names):
        total += 1
        graph = WickGraph(slots, pairing, structure)
        h = _wl_hash(graph.graph)
        bucket = buckets.setdefault(h, [])
        for idx in bucket:
            if graph.is_isomorphic(classes[idx].representative):
                classes[idx].multiplicity += 1
                if keep_members:
                    members[idx].append(pairing)
                break
        else:
            bucket.append(len(classes))
            classes.append(WickClass(graph, 1))
            members.append([pairing])
    buckets.clear()  # hashes are only used to bucket, never kept
    out, selected = [], 0
    for c, mem in zip(classes, members):
        if where is not None and not where(c.representative):
            continue
        if keep_members:
            c.members = tuple(mem)
        out.append(c)
        selected += c.multiplicity
    return WickExpansion(slots, tuple(structure), out, total, selected, "isomorphism", None)


def _wl_hash(g: nx.Graph) -> str:
    h = g.copy()
    for n, d in h.nodes(data=True):
        d["c"] = "|".join(d["color"])
    for u, v, d in h.edges(data=True):
        d["k"] = repr(d["kinds"])
    return nx.weisfeiler_lehman_graph_hash(h, node_attr="c", edge_attr="k", iterations=3)
