r"""Neuron-index counting: Kronecker deltas from Wick contractions collapsed by index cycles.

A contraction of two Gaussian slots with neuron indices gives :math:`\delta_{i_a i_b}`
(PDLT (3.18), (3.20)).  When neuron indices are summed, e.g. in
:math:`\frac1{n^m}\sum_{j_1..j_m}\mathbb E[z_{j_1}z_{j_1}\cdots z_{j_m}z_{j_m}]`, the repeated
indices define a fixed **trace matching** :math:`\pi_0=\{(1,2),(3,4),\dots\}`.  The union of a
Wick pairing :math:`\pi` and :math:`\pi_0` is a disjoint union of cycles (and, when some slots
carry free indices, of paths); each closed cycle is one free index sum, a factor :math:`n`,
and each path collapses to one Kronecker delta between the free indices at its ends
(the counting of PDLT (3.18)–(3.41), stated as graphs):

.. math:: \frac1{n^m}\sum_{j_1..j_m}\sum_\pi\prod\delta = \sum_\pi n^{\mathrm{cyc}(\pi\cup\pi_0)-m}
          = c_{2m}(n) = \prod_{s=1}^{m-1}\Big(1+\frac{2s}{n}\Big)\quad\text{(PDLT (3.44)–(3.46))}.

Examples
--------
>>> cycle_histogram(3)
{3: 1, 2: 6, 1: 8}
>>> c2m(2, 4)
3/2
"""

from __future__ import annotations

from effth._signature import public
from effth._validate import integer

from typing import Hashable, Iterable, Mapping, Sequence

import sympy as sp

from .pairings import enumerate_pairings

__all__ = [
    "cycle_count",
    "collapse_neurons",
    "cycle_histogram",
    "cycle_polynomial",
    "c2m",
    "c2m_gamma",
    "deep_linear_layer_factor",
    "trace_matching",
]


class _UnionFind:
    def __init__(self):
        self.parent: dict = {}

    def find(self, x):
        self.parent.setdefault(x, x)
        root = x
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[x] != root:
            self.parent[x], x = root, self.parent[x]
        return root

    def union(self, a, b):
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[ra] = rb

    def groups(self) -> dict:
        out: dict = {}
        for x in list(self.parent):
            out.setdefault(self.find(x), []).append(x)
        return out


@public
def trace_matching(m: int) -> tuple[tuple[int, int], ...]:
    """The trace matching :math:`\\{(0,1),(2,3),\\dots\\}` of ``2m`` slots ``0..2m-1``."""
    return tuple((2 * k, 2 * k + 1) for k in range(m))


@public
def cycle_count(pairing: Iterable[tuple[Hashable, Hashable]], trace: Iterable[tuple[Hashable, Hashable]]) -> int:
    r"""Number of connected components of :math:`\pi\cup\pi_0` (cycles, for two perfect matchings).

    Parameters
    ----------
    pairing, trace : iterables of pairs of slot names
        Two matchings of the same slots.  A pair present in both is a 2-cycle.

    Returns
    -------
    int

    Examples
    --------
    >>> cycle_count([(0, 1), (2, 3)], [(0, 1), (2, 3)])
    2
    >>> cycle_count([(0, 2), (1, 3)], [(0, 1), (2, 3)])
    1
    """
    uf = _UnionFind()
    for a, b in list(pairing) + list(trace):
        uf.union(a, b)
    return len(uf.groups())


@public
def collapse_neurons(
    pairing: Iterable[tuple[Hashable, Hashable]],
    trace: Iterable[tuple[Hashable, Hashable]],
    free: Mapping[Hashable, sp.Basic] | None = None,
    n: sp.Expr = sp.Symbol("n", positive=True, integer=True),
) -> sp.Expr:
    r"""Neuron-index factor of one Wick term after all summed neuron indices are collapsed.

    Every contraction contributes :math:`\delta_{i_a i_b}`; slots joined by ``trace`` share one
    summed index.  Each connected component of pairing :math:`\cup` trace without a free index
    is a closed cycle and gives :math:`n`; a component holding free indices
    :math:`i_1,\dots,i_r` gives :math:`\delta_{i_1i_2}\cdots\delta_{i_1i_r}`.

    Parameters
    ----------
    pairing : pairs of slot names
    trace : pairs of slot names sharing one summed neuron index
    free : mapping slot name -> neuron symbol, for slots with a free (external) neuron index
    n : sympy expression
        The number of neurons.

    Returns
    -------
    sympy expression

    Examples
    --------
    >>> import sympy as sp
    >>> i1, i2 = sp.symbols("i1 i2", integer=True)
    >>> n = sp.Symbol("n")
    >>> collapse_neurons([("a", "x"), ("b", "y"), ("u", "w")], [("x", "y"), ("u", "w")], {"a": i1, "b": i2}, n)
    n*KroneckerDelta(i1, i2)
    """
    free = dict(free or {})
    uf = _UnionFind()
    for a, b in list(pairing) + list(trace):
        uf.union(a, b)
    out = sp.S.One
    for members in uf.groups().values():
        idx = [free[s] for s in members if s in free]
        if not idx:
            out *= n
        else:
            idx = sorted(idx, key=sp.default_sort_key)
            for other in idx[1:]:
                out *= sp.KroneckerDelta(idx[0], other)
    return out


@public
def cycle_histogram(m: int) -> dict[int, int]:
    r"""Number of pairings of :math:`2m` slots with each number of cycles of :math:`\pi\cup\pi_0`.

    Returns a dict ``{cycles: count}`` in decreasing order of cycles (PDLT (3.23), (3.39)–(3.41)):
    ``m=2: {2: 1, 1: 2}``; ``m=4: {4: 1, 3: 12, 2: 44, 1: 48}``.

    Parameters
    ----------
    m : int
        Half the number of slots.

    Returns
    -------
    dict

    Examples
    --------
    >>> list(cycle_histogram(5).values())
    [1, 20, 140, 400, 384]
    """
    if m < 0:
        raise ValueError("m must be non-negative")
    trace = trace_matching(m)
    hist: dict[int, int] = {}
    for pairing in enumerate_pairings(range(2 * m)):
        c = cycle_count(pairing, trace)
        hist[c] = hist.get(c, 0) + 1
    return dict(sorted(hist.items(), reverse=True))


@public
def cycle_polynomial(m: int, n: sp.Expr | int = sp.Symbol("n", positive=True)) -> sp.Expr:
    r""":math:`\sum_\pi n^{\mathrm{cyc}(\pi\cup\pi_0)-m}` from :func:`cycle_histogram` (equals :math:`c_{2m}(n)`).

    Examples
    --------
    >>> import sympy as sp
    >>> n = sp.Symbol("n")
    >>> sp.expand(cycle_polynomial(3, n))
    1 + 6/n + 8/n**2
    """
    n = sp.sympify(n)
    return sp.Add(*[cnt * n ** (c - m) for c, cnt in cycle_histogram(m).items()])


@public
def c2m(m: int, n: sp.Expr | int = sp.Symbol("n", positive=True)) -> sp.Expr:
    r"""Deep-linear layer factor :math:`c_{2m}(n)=\prod_{s=1}^{m-1}(1+2s/n)` (PDLT (3.46)).

    Parameters
    ----------
    m : int
    n : sympy expression or int

    Returns
    -------
    sympy expression

    Examples
    --------
    >>> c2m(3, 8)
    15/8

    ``m >= 0`` (``c_0 = c_2 = 1``); a negative ``m`` raises :class:`~effth.errors.DomainError`.
    """
    m = integer(m, "m", minimum=0)
    n = sp.sympify(n)
    return sp.Mul(*[1 + sp.Integer(2 * s) / n for s in range(1, m)])


@public
def c2m_gamma(m: int, n: sp.Expr | int = sp.Symbol("n", positive=True)) -> sp.Expr:
    r"""Gamma form :math:`\frac{\Gamma(n/2+m)}{\Gamma(n/2)}(2/n)^m` of :math:`c_{2m}(n)` (PDLT (3.46)).

    Examples
    --------
    >>> c2m_gamma(2, 3)
    5/3
    """
    n = sp.sympify(n)
    return sp.gammasimp(sp.gamma(n / 2 + m) / sp.gamma(n / 2) * (2 / n) ** m)


@public
def deep_linear_layer_factor(m: int, widths: Sequence, g2: sp.Expr | int = 1) -> sp.Expr:
    r""":math:`G_{2m}^{(\ell)}=\big[\prod_{\ell'}c_{2m}(n_{\ell'})\big](G_2^{(\ell)})^m` (PDLT (3.47)).

    Parameters
    ----------
    m : int
    widths : sequence
        The hidden widths :math:`n_1,\dots,n_{\ell-1}` before the layer.
    g2 : the two-point layer factor :math:`G_2^{(\ell)}`.

    Examples
    --------
    >>> deep_linear_layer_factor(2, (4, 8, 16))
    135/64
    """
    out = sp.sympify(g2) ** m
    for w in widths:
        out *= c2m(m, w)
    return out
