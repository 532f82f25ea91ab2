r"""Fast layer-by-layer evaluation of the derived :math:`K, V, G^{\{1\}}` recursions on a batch of inputs.

:func:`flow` compiles the recursions *derived* by :func:`~effth.pdlt.derive_initialization`
(Edgeworth form: PDLT (4.115), (4.118), (4.119) with the inverse kernel removed by Gaussian integration by
parts) into array programs over the whole sample index space:

* every atom of the derived expressions is a table over samples:
  :math:`\langle\sigma^{(p)}_{\alpha}\sigma^{(q)}_{\beta}\rangle_K` (an :math:`N\times N` table per
  :math:`(p,q)`), and :math:`\langle\sigma_{\alpha_1}\sigma_{\alpha_2}\sigma_{\alpha_3}\sigma_{\alpha_4}\rangle_K`
  (an :math:`N^4` table filled from the :math:`\binom{N+3}{4}` multisets — the 8-element symmetry
  of :math:`V` and more);
* every tensor component with repeated labels, e.g. :math:`V_{(\alpha_1\alpha_1)(\alpha_3\alpha_4)}`,
  is a fancy-indexed view of the full tensor;
* the derived expression, with atoms and tensor components replaced by array symbols, is
  lambdified with common-subexpression elimination and evaluated once per layer on broadcast
  index grids.

The two-point tables come from closed forms where they exist
(:func:`effth.numerics.sample_tables.closed_pair_tables`: erf, sin/cos, GELU, polynomials and the
arc-cosine kernels of the piecewise-linear family, upper triangle only, in blocks), otherwise from
:mod:`effth.numerics.sample_tables` (shared nodes, one dimension integrated out) for smooth
activations and from :func:`effth.gaussian_expectation` batched over all entries for kinked ones.
The four-point table is a batched closed form where a fast one exists and keeps relative accuracy
(:func:`effth.numerics.closed_forms.fast_closed_form`, ``closed_form_resolves``: erf, sin/cos,
polynomials, the piecewise-linear family through the quadrivariate orthant probability),
otherwise shared-node quadrature.

``statistics=`` selects what is iterated: ``("K",)`` needs only
:math:`\langle\sigma\sigma\rangle` (PDLT (4.118)) and costs :math:`O(N^2)` per layer;
:math:`V` (4.119) adds the four-point table (:math:`O(N^4)`) and :math:`G^{\{1\}}` (4.115)
more derivative orders.  What was not requested is not held (``value`` raises
:class:`~effth.errors.DomainError`).  For kinked activations the
Edgeworth form of :math:`G^{\{1\}}` needs :math:`\sigma''''`, which is not a function; it is then
evaluated in the Stein-equivalent book form, entry by entry.
"""

from __future__ import annotations

from effth._signature import public

import dataclasses
import math
import threading
import warnings
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable

import numpy as np
import sympy as sp

from effth._display import depth_text, html_table
from effth._progress import progress_bar
from effth._results import WeightLayers
from effth._threads import blas_threads
from effth._validate import check_memory, duplicate_rows, expand_samples, input_matrix, kernel_matrix
from effth.activations import get_activation
from effth.arch import resolve_depth
from effth.arch._common import _widths, real_sequence
from effth.algebra.expectation import GaussianExpectation
from effth.algebra.tensors import FourPointVertex, NLOMetric
from effth.errors import DomainError, NotDerivedError
from effth.numerics import gaussian_expectation, validate_covariance
from effth.numerics.atom_tables import AtomTables
from effth.numerics.closed_forms import closed_form_resolves, fast_closed_form
from effth.numerics.sample_blocks import SampleRestriction
from effth.numerics.sample_tables import (closed_pair_tables, four_point_table, kinked_pair_tables,
                                          multiset_groups, multiset_index, pair_tables)

from effth.pdlt.derivation.pipeline import CB, CW
from effth.pdlt.initialization.recursions import RATIO, derive_initialization

__all__ = ["flow", "Flow", "LayerStep", "KernelScaleWarning", "WidthWarning"]


class KernelScaleWarning(UserWarning):
    """The kernel grows or shrinks by many orders of magnitude with depth (not critical)."""


class WidthWarning(UserWarning):
    r"""Depth-to-width ratio :math:`\ell/n` or :math:`V/(nK^2)` not small: the 1/n expansion is unreliable."""


# --------------------------------------------------------------------------- compilation
@dataclass(frozen=True)
class _Atom:
    kind: str            # "pair" | "four"
    orders: tuple        # (p, q) for pairs
    labels: tuple        # label positions (indices into the recursion's labels)


@public
class LayerStep:
    r"""One derived recursion compiled into an array program over all sample labels.

    Parameters
    ----------
    statistic : {"K", "V", "G1"}

    Attributes
    ----------
    recursion : Recursion
        The derived recursion (Edgeworth form) this step evaluates.
    pair_orders : set of (p, q)
        Derivative orders of the two-point atoms it needs.
    needs_four_point : bool
    """

    def __init__(self, statistic: str) -> None:
        rec = derive_initialization(statistic)
        self.recursion = rec
        self.statistic = statistic
        labels = rec.labels
        pos = {lab: i for i, lab in enumerate(labels)}
        expr = sp.expand(rec.expr)
        reps: dict = {}
        self._inputs: list[tuple[sp.Symbol, Any]] = []

        def sym_for(key: Any) -> sp.Symbol:
            s = sp.Symbol(f"_a{len(self._inputs)}")
            self._inputs.append((s, key))
            return s

        for atom in sorted(expr.atoms(GaussianExpectation), key=sp.default_sort_key):
            samples, factors = atom.to_numeric()
            labs = [pos[samples[s]] for s, _, _ in factors]
            if any(kind != "sigma" for _, kind, _ in factors):
                raise NotDerivedError(f"unexpected z factor in {atom}")
            if len(factors) == 2:
                key = _Atom("pair", (factors[0][2], factors[1][2]), tuple(labs))
            elif len(factors) == 4 and all(o == 0 for _, _, o in factors):
                key = _Atom("four", (), tuple(labs))
            else:
                raise NotDerivedError(f"no sample table for atom {atom}")
            reps[atom] = sym_for(key)
        for t in sorted(expr.atoms(FourPointVertex) | expr.atoms(NLOMetric), key=sp.default_sort_key):
            name = "V" if isinstance(t, FourPointVertex) else "G1"
            reps[t] = sym_for((name, tuple(pos[a] for a in t.args[:-1])))
        self.params = (sp.Symbol("C_W"), sp.Symbol("C_b"), sp.Symbol("ratio"))
        body = expr.xreplace(reps).xreplace(dict(zip((CW, CB, RATIO), self.params)))
        leftover = body.free_symbols - set(self.params) - {s for s, _ in self._inputs}
        if leftover:
            raise NotDerivedError(f"{statistic}: symbols not mapped to arrays: {leftover}")
        # a polynomial step (K, V, G1 all are) is evaluated term by term in place; any other is
        # compiled whole
        self._terms = polynomial_terms(body, [s for s, _ in self._inputs], self.params)
        self._fn: Callable | None = None if self._terms is not None else sp.lambdify(
            [s for s, _ in self._inputs] + list(self.params), body, modules="numpy", cse=True)
        self.rank = len(labels)
        self.pair_orders = {k.orders for _, k in self._inputs if isinstance(k, _Atom) and k.kind == "pair"}
        self.needs_four_point = any(isinstance(k, _Atom) and k.kind == "four" for _, k in self._inputs)
        #: layer-l tensors the step reads besides K ("V", "G1")
        self.reads = {k[0] for _, k in self._inputs if not isinstance(k, _Atom)}

    def __call__(self, N: int, tables: dict, V: np.ndarray, G1: np.ndarray, c_w: float, c_b: float,
                 ratio: float, out: np.ndarray | None = None, entries: tuple | None = None) -> np.ndarray:
        """Evaluate on all labels: an array of shape ``(N,) * rank`` (written into ``out`` if
        given); with ``entries`` (``rank`` flat index arrays) only on those (the rest of a new
        array is NaN, of ``out`` untouched)."""
        vals = [np.float64(c_w), np.float64(c_b), np.float64(ratio)]
        if entries is not None:                  # chunk by chunk: no argument over all entries
            return run_entries(self._terms, self._fn,
                               lambda ch: self._args(N, tables, V, G1, None, ch), vals, N,
                               self.rank, out, entries)
        return run_step(self._terms, self._fn, self._args(N, tables, V, G1, _grids(N, self.rank), None),
                        vals, N, self.rank, out, None)

    def _args(self, N: int, tables: dict, V: Any, G1: Any, grids: tuple | None,
              entries: tuple | None) -> list:
        """The step's arguments over all labels (``grids``) or on ``entries``; a restricted
        flow's four-point atom (``tables["four"]`` None) read per entry from ``tables["atoms"]``."""
        grids = entries if grids is None else grids
        args = []
        for _, key in self._inputs:
            if isinstance(key, _Atom):
                table = tables["four"] if key.kind == "four" else tables[key.orders]
                if table is None and entries is not None:
                    args.append(entry_atom(tables["atoms"], _FOUR_PATTERN, key.labels, entries, N))
                    continue
                if entries is None and self.rank == 2 and key.labels == (0, 1):
                    args.append(table)             # the table itself: no index copy
                    continue
                args.append(gather_labels(table, key.labels, N, grids, entries))
            else:
                name, labs = key
                args.append(gather_labels(V if name == "V" else G1, labs, N, grids, entries))
        return args


_FLAT: dict = {}
#: the four-point atom <sigma sigma sigma sigma> as an AtomTables pattern
_FOUR_PATTERN = ((0, 0), (1, 0), (2, 0), (3, 0))
_FLAT_BYTES = 1 << 28      # cached flat indices, all entry lists together (256 MiB)
_FLAT_LOCK = threading.Lock()


def gather_labels(arr: np.ndarray, labs: tuple, N: int, grids: tuple, entries: tuple | None) -> np.ndarray:
    """``arr[grids[labs[0]], grids[labs[1]], ...]``: a step argument over all labels (``entries``
    None: broadcast grids) or over the flat ``entries``.  On entries the flat positions are
    formed once per (entry list, labels) and kept (up to :data:`_FLAT_BYTES`), and the values
    read with ``np.take``: 4.5x faster than tuple indexing, which dominated restricted flows."""
    if entries is None:
        return arr[tuple(grids[i] for i in labs)]
    return np.take(arr.reshape(-1), flat_positions(entries, labs, N))


def flat_positions(entries: tuple, labs: tuple, N: int) -> np.ndarray:
    """Row-major flat positions in ``(N,) * len(labs)`` of the entries' labels ``labs`` (kept per
    entry list and labels, up to :data:`_FLAT_BYTES` in all)."""
    key = (id(entries), tuple(labs), N)
    with _FLAT_LOCK:
        hit = _FLAT.get(key)
    if hit is None or hit[0] is not entries:
        dims = (N,) * len(labs)
        # kept as intp: np.take converts other index types on every call (int32 indices made
        # the gathers of the 20 + 20 restricted flow 1.7x slower)
        flat = np.ravel_multi_index(tuple(entries[i] for i in labs), dims)
        hit = (entries, flat)                       # entries kept alive: its id stays unique
        with _FLAT_LOCK:
            if sum(h[1].nbytes for h in _FLAT.values()) + flat.nbytes > _FLAT_BYTES:
                _FLAT.clear()
            _FLAT[key] = hit
    return hit[1]


#: entries of a restricted rank-4 step evaluated at once: its gathered arguments (up to 36 for
#: the NTK variance A) stay a few MiB each instead of one array per argument over all entries
_ENTRY_CHUNK = 1 << 17
_CHUNKS: dict = {}
_LAYOUTS: dict = {}
_LAYOUT_BYTES = 1 << 28    # cached per-entry atom layouts, all together (256 MiB)


def entry_chunks(entries: tuple) -> tuple:
    """``entries`` (flat index arrays) in consecutive chunks of :data:`_ENTRY_CHUNK` (views, the
    same objects on every call for one entry list, so the gathers' flat positions are kept)."""
    with _FLAT_LOCK:
        hit = _CHUNKS.get(id(entries))
        if hit is None or hit[0] is not entries:
            n = len(entries[0])
            chunks = tuple(tuple(a[i:i + _ENTRY_CHUNK] for a in entries)
                           for i in range(0, n, _ENTRY_CHUNK))
            if len(_CHUNKS) >= 16:
                _CHUNKS.clear()
            hit = _CHUNKS[id(entries)] = (entries, chunks)
    return hit[1]


def _entry_layout(chunk: tuple, labs: tuple, N: int) -> list:
    """Where each entry's atom value sits in :class:`AtomTables`' stores: ``(rank vector, k,
    positions in the chunk, subset ids)`` per way the samples ``chunk[labs[j]]`` coincide (the
    same for every pattern of ``len(labs)`` labels and every layer; kept up to
    :data:`_LAYOUT_BYTES`)."""
    from effth.numerics.atom_tables import _ranks, _subset_ids

    key = (id(chunk), tuple(labs), N)
    with _FLAT_LOCK:
        hit = _LAYOUTS.get(key)
    if hit is not None and hit[0] is chunk:
        return hit[1]
    m = len(labs)
    idx = np.stack([chunk[i] for i in labs], axis=1)
    rank, _ = _ranks(idx)
    code = rank @ (m ** np.arange(m))
    order = np.argsort(code, kind="stable")
    bounds = np.flatnonzero(np.diff(code[order])) + 1
    lay = []
    for sel in np.split(order, bounds):
        rv = tuple(int(x) for x in rank[sel[0]])
        kk = max(rv) + 1
        D = np.empty((len(sel), kk), dtype=np.intp)
        D[:, list(rv)] = idx[sel]
        lay.append((rv, kk, sel, _subset_ids(D, N)))
    nbytes = sum(s.nbytes + d.nbytes for _, _, s, d in lay)
    with _FLAT_LOCK:
        if sum(h[2] for h in _LAYOUTS.values()) + nbytes > _LAYOUT_BYTES:
            _LAYOUTS.clear()
        _LAYOUTS[key] = (chunk, lay, nbytes)
    return lay


def prepare_atoms(atoms: AtomTables, patterns: Any) -> None:
    """Integrate the subsets of samples the atom ``patterns`` need (as
    :meth:`AtomTables.tables`, all patterns in one pass) without gathering them into
    ``(N,) * m`` tables: :func:`entry_atom` then reads them on the entries a restricted step
    evaluates."""
    from effth.numerics.atom_tables import _all_subsets, _close

    done = atoms.__dict__.setdefault("_prepared", set())
    new = [f for f in dict.fromkeys(tuple(f) for f in patterns) if f not in done]
    if not new:
        return
    need: dict = {}
    for f in new:
        for k, combos in atoms._plan(f)[1].items():
            need.setdefault(k, set()).update(combos)
    for k, combos in sorted(need.items()):
        ids, samples = _all_subsets(atoms.N, k)
        if atoms.restrict is not None:
            keep = atoms.restrict.subsets(samples)
            ids, samples = ids[keep], samples[keep]
        atoms._compute(k, ids, samples, _close(combos))
    done.update(new)


def entry_atom(atoms: AtomTables, factors: tuple, labs: tuple, chunk: tuple, N: int) -> np.ndarray:
    """The atom ``factors`` (label positions as :meth:`AtomTables.table`) at the samples
    ``chunk[labs[j]]`` of each entry: the values :meth:`AtomTables.table` would gather there,
    read from the stores (:func:`prepare_atoms`) without the ``(N,) * m`` table."""
    from effth.numerics.atom_tables import _combo

    prepare_atoms(atoms, [factors])
    lab_orders = atoms._plan(tuple(factors))[0]
    out = np.empty(len(chunk[0]))
    for rv, kk, sel, sid in _entry_layout(chunk, labs, N):
        store = atoms._store[kk]
        out[sel] = store.vals[store.col[_combo(rv, lab_orders)]][sid]
    return out


def run_entries(terms: list | None, fn: Callable | None, chunk_args: Callable, vals: list, N: int,
                rank: int, out: np.ndarray | None, entries: tuple) -> np.ndarray:
    """:func:`run_step` on ``entries`` chunk by chunk (:func:`entry_chunks`): ``chunk_args(chunk)``
    gives the step's arguments on a chunk, the values are scattered into ``out`` (a new array NaN
    elsewhere)."""
    if out is None:
        out = np.full((N,) * rank, np.nan)
    dest = out.reshape(-1) if out.flags.c_contiguous else None
    every = tuple(range(rank))
    for chunk in entry_chunks(entries):
        args = chunk_args(chunk)
        n = len(chunk[0])
        with np.errstate(over="ignore", invalid="ignore"):     # overflow is reported by the caller
            res = (evaluate_terms(terms, args, vals, (n,)) if terms is not None
                   else np.broadcast_to(fn(*args, *vals), (n,)))
        if dest is not None:
            dest[flat_positions(chunk, every, N)] = res
        else:
            out[chunk] = res
    return out


def run_step(terms: list | None, fn: Callable | None, args: list, vals: list, N: int, rank: int,
             out: np.ndarray | None, entries: tuple | None) -> np.ndarray:
    """Evaluate a compiled step (:func:`polynomial_terms` in place, or the lambdified ``fn``) on
    arguments gathered over all labels or over ``entries`` (scattered into ``out``, a new array
    NaN elsewhere)."""
    full = (N,) * rank
    shape = full if entries is None else (len(entries[0]),)
    dest = out if entries is None else None
    with np.errstate(over="ignore", invalid="ignore"):     # overflow is reported by the caller
        if terms is not None:
            res = evaluate_terms(terms, args, vals, shape, dest)
        else:
            res = np.broadcast_to(fn(*args, *vals), shape)
    if entries is None:
        if out is None:
            return res if terms is not None else res.copy()
        if res is not out:
            np.copyto(out, res)
        return out
    if out is None:
        out = np.full(full, np.nan)
    out[entries] = res
    return out


def polynomial_terms(body: sp.Expr, inputs: list, params: tuple) -> list | None:
    """``[(coefficient(params), (input positions with multiplicity)), ...]`` when ``body`` is a
    polynomial in ``inputs`` with coefficients in ``params`` only; ``None`` otherwise."""
    try:
        poly = sp.Poly(sp.expand(body), *inputs)
    except sp.PolynomialError:
        return None
    terms = []
    for mono, coef in poly.terms():
        if coef.free_symbols - set(params):
            return None
        fn = sp.lambdify(list(params), coef, modules="math")
        terms.append((fn, tuple(i for i, e in enumerate(mono) for _ in range(e))))
    return terms


def evaluate_terms(terms: list, args: list, vals: list, shape: tuple,
                   out: np.ndarray | None = None, tmp: np.ndarray | None = None) -> np.ndarray:
    """Evaluate :func:`polynomial_terms` on arrays, accumulating term by term in place (the first
    term written into ``out``, one scratch array ``tmp`` for the others, allocated when needed and
    not given): no temporaries of the generated expression."""
    if out is None:
        out = np.empty(shape)
    const = 0.0
    first = True
    for coef, factors in terms:
        c = float(coef(*vals))
        if not factors:
            const += c
            continue
        target = out if first else tmp
        if target is None:
            tmp = target = np.empty(shape)
        rest = factors[1:]
        if c == 1.0 and rest:                          # x 1 is exact: one pass fewer, same bits
            np.multiply(args[factors[0]], args[rest[0]], out=target)
            rest = rest[1:]
        else:
            np.multiply(args[factors[0]], c, out=target)
        for f in rest:
            target *= args[f]
        if not first:
            out += tmp
        first = False
    if first:
        out.fill(const)
    elif const:
        out += const
    return out


@lru_cache(maxsize=64)
def _grids(N: int, rank: int) -> tuple:
    return tuple(np.arange(N).reshape([N if i == j else 1 for i in range(rank)]) for j in range(rank))


@lru_cache(maxsize=None)
def layer_step(statistic: str) -> LayerStep:
    """The compiled step of one statistic, ``"K"``, ``"V"`` or ``"G1"`` (compiled once per process)."""
    return LayerStep(statistic)


def layer_steps() -> dict:
    """The three compiled steps ``{"K", "V", "G1"}`` (compiled once per process)."""
    return {s: layer_step(s) for s in ("K", "V", "G1")}


KERNEL_STATISTICS = ("K", "V", "G1")


def _statistics(statistics: Any) -> tuple:
    """The requested statistics and those their recursions read, in step order."""
    if statistics is None:
        return KERNEL_STATISTICS
    names = (statistics,) if isinstance(statistics, str) else tuple(statistics)
    need = {"K"}
    for s in names:
        if s == "G":
            s = "G1"
        if s not in KERNEL_STATISTICS:
            raise DomainError(f"unknown statistic {s!r} for flow; expected some of "
                              f"{list(KERNEL_STATISTICS) + ['G']} (the NTK ones are ntk_flow's)")
        need.add(s)
    while True:
        more = set().union(*(layer_step(s).reads for s in need)) - need
        if not more:
            break
        need |= more
    return tuple(s for s in KERNEL_STATISTICS if s in need)


# ------------------------------------------------------------------------------ tables
def _generic_four(K: np.ndarray, act: Any, rtol: float) -> np.ndarray:
    """Four-point table through gaussian_expectation, batched by multiplicity pattern."""
    idx, sets = multiset_index(K.shape[0])
    vals = np.empty(len(sets))                     # every multiset belongs to one pattern group
    for pattern, (ids, var) in multiset_groups(K.shape[0]).items():
        factors = [(s, "sigma", 0) for s, p in enumerate(pattern) for _ in range(p)]
        Kb = K[var[:, :, None], var[:, None, :]]
        vals[ids] = gaussian_expectation(factors, Kb, act, rtol=rtol)
    return vals[idx]


def _relative(err: np.ndarray, table: np.ndarray) -> float:
    """Largest error relative to max(|entry|, 1e-3 max|table|) (entries that nearly cancel are
    judged on the table's scale, as the quadrature's own acceptance test does)."""
    floor = 1e-3 * float(np.max(np.abs(table)))
    return float(np.max(err / np.maximum(np.abs(table), max(floor, 1e-300))))


def _tables(K: np.ndarray, act: Any, orders: set, four: bool, rtol: float,
            restrict: SampleRestriction | None = None, atom_patterns: tuple = (),
            seed: dict | None = None) -> tuple[dict, float]:
    r"""All tables for one layer and the largest estimated relative error.

    Two-point orders with a closed form come from :func:`closed_pair_tables` (exact; for kinked
    activations only :math:`(0,0)`: the other orders of the kinked tables follow the Leibniz
    convention of :func:`kinked_pair_tables` on the diagonal), the rest from quadrature.  With
    ``restrict`` (smooth or polynomial :math:`\sigma`) the four-point table holds only the
    entries of :class:`SampleRestriction` (NaN elsewhere), from :class:`AtomTables`, which is
    returned as ``tables["atoms"]`` for the NTK-hierarchy atoms of the same layer; the atoms
    ``atom_patterns`` (patterns of :meth:`AtomTables.tables`) are evaluated in the same pass, so
    that every subset of samples is integrated once for the four-point table and them; the
    subsets in ``seed`` (an :meth:`AtomTables.snapshot` of another flow's layer) are not
    integrated again.
    """
    if restrict is not None and four and (act.is_smooth or act.is_polynomial):
        tabs, err = _tables(K, act, orders, False, rtol)
        atoms = AtomTables(K, act, rtol=rtol, restrict=restrict)
        if seed is not None:
            atoms.restore(seed)
        # every subset the four-point table and the atoms need, integrated in one pass; the
        # values are read per entry by the steps (entry_atom), never as (N,)*4 tables
        prepare_atoms(atoms, [_FOUR_PATTERN, *atom_patterns])
        tabs["four"] = None
        tabs["atoms"] = atoms
        return tabs, max(err, atoms.max_error)
    if act.is_smooth:
        tabs = closed_pair_tables(K, act, orders)
        rest = {o for o in orders if o not in tabs}
        err = 0.0
        if rest:
            more, errs = pair_tables(K, act, rest, rtol=rtol)
            tabs.update(more)
            err = max(_relative(e, more[o]) for o, e in errs.items())
        four_f = [(s, "sigma", 0) for s in range(4)]
        if four and fast_closed_form(act, four_f) and bool(np.all(
                closed_form_resolves(act, four_f, np.full(4, np.min(np.diag(K))), rtol))):
            tabs["four"] = _generic_four(K, act, rtol)       # closed forms (erf, sin, polynomials)
        elif four:
            F, FE = four_point_table(K, act, rtol=rtol)
            tabs["four"] = F
            err = max(err, _relative(FE, F))
        return tabs, err
    tabs = closed_pair_tables(K, act, {(0, 0)}) if (0, 0) in orders else {}
    rest = {o for o in orders if o not in tabs}
    if rest:
        tabs.update(kinked_pair_tables(K, act, rest, rtol))
    if four:
        tabs["four"] = _generic_four(K, act, rtol)
    return tabs, rtol


# ----------------------------------------------------------------------------- results
FLOW_NAMES = ("K", "V", "G1", "G")


def _layer_index(layers: tuple, layer: Any, what: str) -> int:
    """Index of book layer ``layer`` in ``layers`` (``None`` only when one layer is held)."""
    if layer is None:
        if len(layers) == 1:
            return 0
        raise DomainError(f"layer=None is ambiguous: {what} holds layers {list(layers)}; "
                          "pass layer=<book layer number>")
    if isinstance(layer, bool):
        raise DomainError(f"layer must be a book layer number in {list(layers)}, got {layer!r}")
    try:
        import numbers

        ok = isinstance(layer, numbers.Integral) or (getattr(layer, "is_Integer", False))
        ell = int(layer) if ok else None
    except (TypeError, ValueError):
        ell = None
    if ell is None or ell not in layers:
        raise DomainError(f"{what} holds layers {list(layers)} (book numbers 1..L); "
                          f"layer={layer!r} is not one of them")
    return layers.index(ell)


def _widths_summary(widths: Any) -> str:
    if widths is None:
        return "symbolic"
    widths = tuple(widths)
    if widths and all(w == widths[0] for w in widths):
        return str(widths[0])
    text = str(widths)
    return text if len(text) <= 60 else f"({widths[0]}, ..., {widths[-1]})"


_html_table = html_table


@public
@dataclass(repr=False)
class Flow(WeightLayers):
    r"""Layer-by-layer :math:`K^{(\ell)}, V^{(\ell)}, G^{\{1\}(\ell)}` on a batch of inputs.

    Read it as every effth result (``docs/conventions.md``): ``flow.value(name, layer=ℓ)``
    with book layer numbers :math:`\ell=1..L`, ``flow.stderr(name, layer=ℓ)`` (``None``: a
    deterministic theory) and ``flow.layers``.

    ========  =====================================================================  ================
    name      quantity                                                               shape
    ========  =====================================================================  ================
    ``"K"``   kernel at infinite width :math:`K^{(\ell)}_{\alpha_1\alpha_2}` (PDLT (4.118))  ``(N, N)``
    ``"V"``   four-point vertex :math:`V^{(\ell)}_{(\alpha_1\alpha_2)(\alpha_3\alpha_4)}` (PDLT (4.119))  ``(N, N, N, N)``
    ``"G1"``  NLO metric :math:`G^{\{1\}(\ell)}_{\alpha_1\alpha_2}` (PDLT (4.115))   ``(N, N)``
    ``"G"``   metric at finite width :math:`K^{(\ell)}+G^{\{1\}(\ell)}/n_{\ell-1}` (PDLT (4.104))  ``(N, N)``
    ========  =====================================================================  ================

    Only the statistics computed are held (``statistics=`` of :func:`flow`; :attr:`names`):
    a K-only flow has ``V`` and ``G1`` set to ``None`` and ``value("V")`` raises
    :class:`~effth.errors.DomainError`.

    Attributes
    ----------
    K : ndarray (L, N, N)
    V : ndarray (L, N, N, N, N) or None
        :math:`V^{(\ell)}_{(\alpha_1\alpha_2)(\alpha_3\alpha_4)}` (full tensor, all 8 symmetries);
        ``None`` when not computed.
    G1 : ndarray (L, N, N) or None
        Raw arrays keep layer :math:`\ell` at index :math:`\ell-1`; ``None`` when not computed.
    layers : tuple of int
        Book layer numbers held, :math:`(1, \dots, L)`.
    activation : Activation
    c_w, c_b : ndarray (L,)
        :math:`C_W^{(\ell)}, C_b^{(\ell)}` used to reach layer :math:`\ell` (entry 0: first layer).
    ratios : ndarray (L,)
        :math:`n_\ell/n_{\ell-1}` used in the step out of layer :math:`\ell`.
    widths : tuple or None
        Hidden widths :math:`n_1..n_{L-1}` when known.
    table_error : ndarray (L,)
        Largest estimated relative error of the Gaussian-expectation tables used to *reach*
        layer :math:`\ell` (0 for layer 1; relative to max(|entry|, 1e-3 max|table|); for
        kinked activations the requested ``rtol``).  A heuristic; the accuracy statement is
        ``rtol``, which the tests check against references.
    statistics : tuple of str
        The statistics computed, a subset of ``("K", "V", "G1")``.
    """

    K: np.ndarray
    V: np.ndarray | None
    G1: np.ndarray | None
    layers: tuple
    activation: Any
    c_w: np.ndarray
    c_b: np.ndarray
    ratios: np.ndarray
    widths: tuple | None = None
    table_error: np.ndarray = field(default_factory=lambda: np.zeros(0))
    statistics: tuple = KERNEL_STATISTICS

    def __post_init__(self) -> None:
        self.layers = tuple(int(x) for x in np.asarray(self.layers).ravel())
        self.statistics = tuple(s for s in KERNEL_STATISTICS if getattr(self, s) is not None)

    @property
    def names(self) -> tuple:
        """Every name :meth:`value` answers for this result."""
        return tuple(s for s in FLOW_NAMES if ("G1" if s == "G" else s) in self.statistics)

    @property
    def depth(self) -> int:
        """Number of weight layers :math:`L` (PDLT's :math:`L`)."""
        return len(self.layers)


    def value(self, name: str, layer: int | None = None, widths: Any = None) -> np.ndarray:
        r"""The prediction for ``name`` at book layer ``layer``.

        Parameters
        ----------
        name : {"K", "V", "G1", "G"}
            See the class docstring; ``"G"`` is :math:`K^{(\ell)}+G^{\{1\}(\ell)}/n_{\ell-1}`
            (PDLT (4.104); exactly :math:`K^{(1)}` at layer 1).
        layer : int
            Book layer number in :attr:`layers` (may be omitted only when one layer is held).
        widths : int or sequence of int, optional
            Hidden widths :math:`n_1..n_{L-1}` for ``"G"`` (default: the network's).

        Returns
        -------
        ndarray
            ``(N, N)``, or ``(N, N, N, N)`` for ``"V"``.

        Raises
        ------
        DomainError
            Unknown name, a layer not held or omitted (the message lists the held layers), ``"G"`` with no
            widths known, or ``widths`` given for another name.
        """
        i = self._index(name, layer)
        if name == "G":
            return self.kernel_at_width(widths)[i]
        if widths is not None:
            raise DomainError(f"widths= only applies to 'G' (K + G1/n), not to {name!r}")
        return np.array(getattr(self, name)[i])

    def stderr(self, name: str, layer: int | None = None) -> None:
        """``None``: the flow is a deterministic theory (the name and layer are checked)."""
        self._index(name, layer)
        return None

    def _index(self, name: str, layer: Any) -> int:
        if name not in FLOW_NAMES:
            raise DomainError(f"Flow holds {list(self.names)}, not {name!r}")
        _held(self, name)
        return _layer_index(self.layers, layer, "this Flow")

    def kernel_at_width(self, widths: Any = None) -> np.ndarray:
        r""":math:`K^{(\ell)}+G^{\{1\}(\ell)}/n_{\ell-1}` for every layer (PDLT (4.104)).

        Parameters
        ----------
        widths : int or sequence of hidden widths :math:`n_1..n_{L-1}`, optional
            Defaults to the network's widths.
        """
        _held(self, "G")
        n = _prev_widths(self, widths)
        return self.K + self.G1 / n[:, None, None]

    def four_point_at_width(self, widths: Any = None) -> np.ndarray:
        r""":math:`V^{(\ell)}/n_{\ell-1}`: the connected four-point function across two neurons."""
        _held(self, "V")
        n = _prev_widths(self, widths)
        return self.V / n[:, None, None, None, None]

    def __getitem__(self, key: str) -> np.ndarray:
        """``flow["K"]`` etc. (all layers), like the dict returned by :func:`initialization_flow`."""
        if key not in ("K", "V", "G1"):
            raise KeyError(key)
        _held(self, key)
        return getattr(self, key)

    def __repr__(self) -> str:
        return (f"Flow(activation={self.activation.name!r}, {depth_text(self.depth)}, "
                f"inputs={self.K.shape[-1]}, widths={_widths_summary(self.widths)}, "
                f"statistics={' '.join(self.statistics)})")

    def _repr_html_(self) -> str:
        return _html_table("Flow: K, V, G1 by layer (PDLT ch. 4)", [
            ("activation", self.activation.name), ("depth L", self.depth),
            ("layers", f"{self.layers[0]}..{self.layers[-1]}"), ("inputs N", self.K.shape[-1]),
            ("hidden widths", _widths_summary(self.widths)),
            ("names", ", ".join(self.names)),
            ("max table error", f"{float(np.max(self.table_error, initial=0.0)):.2g}")])


def _held(fl: Flow, name: str) -> None:
    """DomainError when ``name`` was not computed (not in ``statistics=``)."""
    need = "G1" if name == "G" else name
    if need in KERNEL_STATISTICS and need not in fl.statistics:
        raise DomainError(f"{name!r} was not requested: this Flow holds {list(fl.names)} "
                          f"(computed statistics={fl.statistics}); pass statistics= including "
                          f"{need!r} to flow (or leave statistics out for all)")


def _prev_widths(fl: Flow, widths: Any) -> np.ndarray:
    """n_{l-1} per layer (inf for layer 1: exactly Gaussian)."""
    w = fl.widths if widths is None else widths
    if w is None:
        raise DomainError("widths unknown: pass widths= (hidden widths n_1..n_{L-1}, or one int)")
    L = len(fl.layers)
    w = _widths(w, L)
    return np.array([np.inf] + [float(x) for x in w])


# ------------------------------------------------------------------------------- driver
@public
def flow(net: Any = None, X: Any = None, *, K1: Any = None, depth: int | None = None,
         hidden_layers: int | None = None, activation: Any = None, c_w: Any = 1.0, c_b: Any = 0.0,
         ratios: Any = 1.0, rtol: float = 1e-8, require_critical: bool = False,
         progress: bool | None = None, statistics: Any = None) -> Flow:
    r"""Iterate the derived recursions for :math:`K, V, G^{\{1\}}` through every layer.

    Either an MLP and its inputs, ``flow(net, X)``, or a first-layer kernel,
    ``flow(K1=..., depth=..., activation=..., c_w=..., c_b=..., ratios=...)``.

    Parameters
    ----------
    net : effth.MLP, optional
        Activation, depth, per-layer :math:`C_W, C_b` and (if numeric) widths.
    X : array_like (N, n_0), optional
        Inputs; :math:`K^{(1)}=C_b^{(1)}+C_W^{(1)}XX^\top/n_0` (PDLT (4.8)).
    K1 : array_like (N, N), optional
        First-layer kernel (instead of ``net, X``).
    depth : int
        Number of weight layers :math:`L` (with ``K1``; PDLT's :math:`L`, output layer included).
    hidden_layers : int
        ``depth - 1``; give ``depth`` or ``hidden_layers``, not both (with ``K1``).
    activation : str or Activation
        With ``K1``.
    c_w, c_b : float or sequence
        With ``K1``: one value, or :math:`C_W^{(\ell)}, C_b^{(\ell)}` for the steps
        :math:`\ell=2..L` (``L - 1`` values), or one per weight layer :math:`\ell=1..L`
        (``L`` values; the first is not used, since ``K1`` fixes layer 1).  Python, NumPy and
        SymPy numbers are accepted; other lengths raise :class:`~effth.errors.DomainError`.
    ratios : float or sequence
        :math:`n_\ell/n_{\ell-1}` for :math:`\ell=1..L-1` (with ``K1``, exactly ``L - 1`` values
        when a sequence; from ``net`` otherwise).
    rtol : float
        Target relative accuracy of every Gaussian expectation (default 1e-8).
    require_critical : bool
        If true, warn (:class:`~effth.pdlt.criticality.NonCriticalWarning`) when the
        hyperparameters are not critical (PDLT (5.55)–(5.57)).
    progress : bool or None
        Draw a progress bar over the layers (``None``: when stderr is a terminal or in a notebook,
        unless ``EFFTH_PROGRESS=0``).
    statistics : str or sequence of {"K", "V", "G1", "G"}, optional
        What to iterate (default: all three).  The recursions a statistic reads are iterated too
        (:math:`V` reads :math:`V`; :math:`G^{\{1\}}` reads :math:`V` and :math:`G^{\{1\}}`;
        ``"G"`` means :math:`G^{\{1\}}`).  ``("K",)`` computes only
        :math:`\langle\sigma\sigma\rangle_{K^{(\ell)}}` per layer (PDLT (4.118)): closed forms where
        they exist, memory :math:`O(N^2)`, no :math:`N^4` tensor.  The values are the same as
        those of the full flow.

    Returns
    -------
    Flow
        Holding only the computed statistics (``value`` of another raises
        :class:`~effth.errors.DomainError`).

    Warns
    -----
    KernelScaleWarning
        When :math:`K` grows or shrinks by more than :math:`10^{6}` relative to layer 1 (the layer
        is named).
    WidthWarning
        When the widths are known and :math:`\ell/n` or :math:`V/(nK^2)` exceeds 0.5.

    Raises
    ------
    DomainError
        Non-PSD or non-finite kernel, bad hyperparameters, or a kernel that overflows (the layer
        is named).
    """
    kw = dict(depth=depth, hidden_layers=hidden_layers, activation=activation, c_w=c_w, c_b=c_b,
              ratios=ratios, rtol=rtol, require_critical=require_critical, progress=progress,
              statistics=statistics)
    dup = distinct_inputs(net, X, K1)
    if dup is not None:
        # repeated inputs: each distinct input evaluated once, so their rows are identical (as
        # the mathematics makes them; separate quadratures would differ in the last digits)
        index, Xd, K1d, _ = dup
        return expand_flow(_flow(net, Xd, K1=K1d, **kw), index)
    return _flow(net, X, K1=K1, **kw)


def distinct_inputs(net: Any, X: Any, K1: Any, Theta1: Any = None) -> tuple | None:
    """``(index, X[first], K1[first][:, first], Theta1[first][:, first])`` when inputs repeat
    exactly (rows of ``X``; or samples whose rows and columns of ``K1`` and ``Theta1`` are
    equal), else ``None``; ``first`` are the distinct inputs and ``index`` maps every input to
    its copy among them (:func:`effth._validate.duplicate_rows`)."""
    if net is not None and X is not None:
        Xa = input_matrix(X, "X")
        dup = duplicate_rows(Xa)
        return None if dup is None else (dup[1], Xa[dup[0]], None, None)
    if net is None and K1 is not None:
        Ka = kernel_matrix(K1, "K1", check_psd=False)
        mats = [Ka]
        if Theta1 is not None:
            Ta = kernel_matrix(Theta1, "Theta1", check_psd=False)
            if Ta.shape != Ka.shape:
                return None                              # refused by the caller's checks
            mats.append(Ta)
        dup = duplicate_rows(np.hstack([m for a in mats for m in (a, a.T)]))
        if dup is None:
            return None
        sub = [a[np.ix_(dup[0], dup[0])] for a in mats] + [None]
        return dup[1], None, sub[0], sub[1]
    return None


def expand_flow(fl: Flow, index: np.ndarray) -> Flow:
    """A :class:`Flow` of distinct inputs re-indexed to the inputs ``index`` maps them to."""
    return dataclasses.replace(fl, **{
        s: expand_samples(getattr(fl, s), index, tuple(range(1, getattr(fl, s).ndim)))
        for s in ("K", "V", "G1") if getattr(fl, s) is not None})


def _flow(net: Any = None, X: Any = None, *, K1: Any = None, depth: int | None = None,
          hidden_layers: int | None = None, activation: Any = None, c_w: Any = 1.0, c_b: Any = 0.0,
          ratios: Any = 1.0, rtol: float = 1e-8, require_critical: bool = False,
          progress: bool | None = None, statistics: Any = None, hook: Callable | None = None,
          progress_label: str = "flow: layers", restrict: SampleRestriction | None = None,
          atom_patterns: tuple = (), atom_seeds: list | None = None) -> Flow:
    r""":func:`flow`, with ``hook(layer, K, tables, V, G1, c_w, c_b, ratio)`` called after each step
    with the layer-``layer`` tensors and the tables of ``K`` (how :func:`ntk_flow` shares them).
    With ``restrict``, :math:`V` and :math:`G^{\{1\}}` are computed only on the entries of
    :class:`~effth.numerics.sample_blocks.SampleRestriction` (NaN elsewhere; :math:`K` in full),
    and the hook's atoms ``atom_patterns`` in the same pass as the four-point table
    (``atom_seeds[layer - 1]``: an :meth:`AtomTables.snapshot` whose subsets that layer reuses)."""
    stats = _statistics(statistics)
    spec = _resolve(net, X, K1, depth, hidden_layers, activation, c_w, c_b, ratios)
    K, L, act, cws, cbs, rats, widths = spec
    if require_critical:
        from effth.pdlt.criticality import check_critical

        for c_b_, c_w_ in sorted({(float(b), float(w)) for b, w in zip(cbs[1:], cws[1:])}):
            check_critical(act, c_w=c_w_, c_b=c_b_, action="warn")
    steps = {s: layer_step(s) for s in stats}
    # kinked sigma: pair tables of distributional derivatives come from Stein's identity (see
    # effth.numerics.sample_tables.kinked_pair_tables); if even that fails, G1 is evaluated in
    # the book form entry by entry
    g1_book = None
    orders = set().union(*(steps[s].pair_orders for s in stats))
    if not act.is_smooth and "G1" in stats:
        try:
            kinked_pair_tables(np.eye(2), act, orders, 1e-6)
        except NotDerivedError:
            g1_book = derive_initialization("G1", form="book")
            orders = set().union(*(steps[s].pair_orders for s in stats if s != "G1"))
    four = any(step.needs_four_point for step in steps.values())
    N = K.shape[0]
    ent4 = None if restrict is None else restrict.entries(N, 4)    # checked by ntk_flow
    Ks, errs = np.empty((L, N, N)), [0.0]          # layers written in place (no final stack)
    Ks[0] = K
    # V and G1 preallocated and written layer by layer too: the peak memory is one copy of the
    # (L, N^4) result plus the tables (a list stacked at the end held two); a restricted flow's
    # skipped entries stay NaN
    if "V" in stats:                        # (L, N^4) results plus the four-point tables
        check_memory(4.0 * L * float(N) ** 4 * 8.0, f"the four-point vertex of {N} inputs "
                     f"through {L} layers", "use fewer inputs (the memory grows as N^4), or "
                     "statistics=('K',)")
    Vs = np.zeros((L,) + (N,) * 4) if "V" in stats else None
    Gs = np.zeros((L, N, N)) if "G1" in stats else None
    if restrict is not None and Vs is not None:
        Vs[1:] = np.nan
    scale0 = float(np.max(np.abs(np.diag(K))))
    warned = False
    with blas_threads(), progress_bar(L - 1, progress_label, progress=progress, unit="layer") as bar:
        for layer in range(1, L):
            K = Ks[layer - 1]
            V = None if Vs is None else Vs[layer - 1]
            G1 = None if Gs is None else Gs[layer - 1]
            c_w_, c_b_, r_ = cws[layer], cbs[layer], rats[layer - 1]
            Vn = Gn = None
            with np.errstate(over="ignore", invalid="ignore"):   # reported below with the layer
                seed = atom_seeds[layer - 1] if atom_seeds and layer <= len(atom_seeds) else None
                tabs, err = _tables(K, act, orders, four, rtol, restrict, atom_patterns, seed)
                Kn = steps["K"](N, tabs, V, G1, c_w_, c_b_, r_, out=Ks[layer])
                if Vs is not None:
                    Vn = steps["V"](N, tabs, V, G1, c_w_, c_b_, r_, out=Vs[layer], entries=ent4)
                if Gs is not None and g1_book is None:
                    Gn = steps["G1"](N, tabs, V, G1, c_w_, c_b_, r_, out=Gs[layer])
                elif Gs is not None:
                    Gn = g1_book.evaluate(K, V, G1, activation=act, c_w=c_w_, c_b=c_b_, ratio=r_,
                                          rtol=rtol)
            if not all(np.all(np.isfinite(T if restrict is None else T[restrict.mask(N, T.ndim)]))
                       for T in (Vn, Gn) if T is not None):
                Kn = Kn * np.nan
            _check_layer(Kn, layer + 1, scale0, warned)
            warned = warned or _scale_off(Kn, scale0)
            if hook is not None:
                hook(layer, K, tabs, V, G1, c_w_, c_b_, r_)
            del tabs
            if Kn is not Ks[layer]:
                Ks[layer] = Kn
            if Vn is not None and Vn is not Vs[layer]:
                Vs[layer] = Vn
            if Gn is not None and Gn is not Gs[layer]:
                Gs[layer] = Gn
            errs.append(err)
            bar.update()
    out = Flow(Ks, Vs, Gs,
               np.arange(1, L + 1), act, np.asarray(cws, float), np.asarray(cbs, float),
               np.asarray(rats, float), widths, np.asarray(errs))
    if widths is not None and (Vs is not None or Gs is not None):    # K alone is the n -> inf limit
        _check_widths(out)
    return out


def _resolve(net, X, K1, depth, hidden_layers, activation, c_w, c_b, ratios) -> tuple:
    """Normalize the two calling conventions to (K1, L, act, c_w[L], c_b[L], ratios[L-1], widths)."""
    if net is not None:
        if X is None:
            raise DomainError("flow(net, X): inputs X are required with a network")
        if depth is not None or hidden_layers is not None or activation is not None:
            raise DomainError("flow(net, X) takes depth and activation from net: do not pass "
                              "depth=, hidden_layers= or activation= as well")
        if K1 is not None:
            raise DomainError("give either (net, X) or K1, not both")
        from effth.arch._common import require_plain
        require_plain(net, "flow (the compiled kernel flow)")
        X = input_matrix(X, "X")
        L = net.depth
        n0 = X.shape[1]
        with np.errstate(over="ignore", invalid="ignore"):
            K = net.c_b_at(1) + net.c_w_at(1) * (X @ X.T) / n0
        if not np.all(np.isfinite(K)):
            raise DomainError("X is too large: the first-layer kernel C_b + C_W X X^T/n_0 "
                              "overflows float64")
        act = net.act
        cws = [net.c_w_at(k) for k in range(1, L + 1)]
        cbs = [net.c_b_at(k) for k in range(1, L + 1)]
        widths = net.hidden_widths
        if widths is None:
            rats = [1.0] * max(L - 1, 1)
        else:
            full = (n0, *widths)
            rats = [full[k] / full[k - 1] for k in range(1, len(full))] or [1.0]
            rats[0] = 1.0          # V^(1) = G1^(1) = 0: n_1/n_0 never enters
    else:
        if K1 is None or (depth is None and hidden_layers is None) or activation is None:
            raise DomainError("flow needs (net, X) or K1=, depth= (or hidden_layers=) and activation=")
        L = resolve_depth(depth, hidden_layers, minimum=1)
        K = kernel_matrix(K1, "K1")
        act = get_activation(activation)

        def per_layer(x: Any, n: int, name: str, counts: tuple) -> list:
            seq = real_sequence(x, counts, name)
            if isinstance(seq, float):
                return [seq] * n
            return list(seq[len(seq) - n:])

        # c_w, c_b: one per step l = 2..L (L - 1 values) or one per weight layer l = 1..L
        # (L values; the first is not used: K1 fixes layer 1); ratios: n_l/n_{l-1}, l = 1..L-1
        cws = [math.nan] + per_layer(c_w, L - 1, "c_w", (L - 1, L))
        cbs = [math.nan] + per_layer(c_b, L - 1, "c_b", (L - 1, L))
        rats = per_layer(ratios, max(L - 1, 1), "ratios", (max(L - 1, 1),))
        widths = None
        for r in rats:
            if not (r > 0 and math.isfinite(r)):
                raise DomainError(f"width ratios must be positive and finite, got {r}")
    for w, b in zip(cws[1:], cbs[1:]):
        if not (w >= 0 and b >= 0 and math.isfinite(w) and math.isfinite(b)):
            raise DomainError(f"need finite C_W >= 0 and C_b >= 0, got C_W={w}, C_b={b}")
    if K.ndim != 2 or K.shape[0] != K.shape[1]:
        raise DomainError(f"the first-layer kernel must be (N, N), got shape {K.shape}")
    if net is None:
        # a user's K1 is validated; C_b + C_W X X^T/n_0 from net is PSD by construction (C_b,
        # C_W >= 0, checked above) and finite (checked), so no O(N^3) eigen-check per call
        validate_covariance(K)
    return K, L, act, cws, cbs, rats, widths


def _scale_off(K: np.ndarray, scale0: float) -> bool:
    d = float(np.max(np.abs(np.diag(K))))
    return scale0 > 0 and (d > 1e6 * scale0 or d < 1e-6 * scale0)


def _check_layer(K: np.ndarray, layer: int, scale0: float, warned: bool,
                 finite: bool = False) -> None:
    """Raise on overflow; warn once when K has moved by more than 1e6 from layer 1 (``finite``:
    K is known to be finite, only its diagonal is read)."""
    if not finite and not np.all(np.isfinite(K)):
        raise DomainError(f"the kernel overflows at layer {layer} (not critical: C_W chi > 1)")
    d = float(np.max(np.abs(np.diag(K))))
    if not warned and _scale_off(K, scale0):
        word = "blows up" if d > scale0 else "vanishes"
        warnings.warn(f"the kernel {word} with depth: max K_aa = {d:.3g} at layer {layer} against "
                      f"{scale0:.3g} at layer 1 (hyperparameters are not critical)",
                      KernelScaleWarning, stacklevel=4)


#: both figures of :func:`width_figures` above this: the 1/n expansion is flagged unreliable
WIDTH_LIMIT = 0.5


def width_figures(fl: Flow, widths: Any = None) -> tuple[float, float]:
    r"""The two figures the :class:`WidthWarning` criterion reads: the depth-to-width ratio
    :math:`L/\min_\ell n_\ell` (PDLT §3.3, the expansion parameter of deep networks) and the
    largest normalized four-point vertex :math:`V^{(\ell)}_{lphalphalphalpha}/
    (n_{\ell-1}(K^{(\ell)}_{lphalpha})^2)` over layers and inputs (the size of the
    :math:`1/n` correction to the output variance, PDLT (4.81)); ``widths`` as
    :meth:`Flow.value`."""
    n = _prev_widths(fl, widths)
    L = len(fl.layers)
    ratio = L / float(np.min(n[1:])) if L > 1 else 0.0
    worst = 0.0
    if fl.V is not None:
        d = np.einsum("laa->la", fl.K)
        vn = np.einsum("laaaa->la", fl.V) / np.maximum(d * d, 1e-300) / n[:, None]
        worst = float(np.nanmax(vn))            # NaN: a diagonal a restricted flow skipped
    return ratio, worst


def width_message(ratio: float, worst: float) -> str | None:
    """The :class:`WidthWarning` text for :func:`width_figures`, ``None`` when both are at most
    :data:`WIDTH_LIMIT`."""
    if ratio <= WIDTH_LIMIT and worst <= WIDTH_LIMIT:
        return None
    return (f"depth/width L/n = {ratio:.2f} and max V/(n K^2) = {worst:.2f}: the 1/n "
            f"expansion is not reliable (want both << 1; warned above {WIDTH_LIMIT})")


def _check_widths(fl: Flow) -> None:
    msg = width_message(*width_figures(fl))
    if msg is not None:
        warnings.warn(msg, WidthWarning, stacklevel=4)
