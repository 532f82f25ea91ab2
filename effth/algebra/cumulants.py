r"""Moments and cumulants (connected correlators) via set partitions.

PDLT (1.56): a moment is the sum, over all set partitions of its variables, of products of
connected correlators (cumulants); the inverse (consistent with (1.61)) is

.. math:: \mathbb E[z_1\cdots z_M]\big|_c
          = \sum_{\pi}(-1)^{|\pi|-1}(|\pi|-1)!\prod_{B\in\pi}\mathbb E\Big[\prod_{i\in B}z_i\Big].

For a parity-even distribution (:math:`z\to-z`) odd moments and cumulants vanish, so only
partitions into even blocks contribute.  Single variable: :math:`\kappa_6=m_6-15m_4m_2+30m_2^3`.

:class:`Moment` and :class:`Cumulant` are symbolic (sympy) objects; their labels are sorted
canonically (a moment is symmetric in its variables), so equal terms merge.

Examples
--------
>>> from effth.algebra.cumulants import moments_to_cumulants, Moment
>>> moments_to_cumulants((1, 2))
-Moment(1)*Moment(2) + Moment(1, 2)
>>> moments_to_cumulants(("z",) * 4, parity_even=True)
-3*Moment(z, z)**2 + Moment(z, z, z, z)
>>> from effth.printing import latex
>>> latex(Moment(2, 1))
'\\mathbb{E}\\left[z_{1} z_{2}\\right]'
"""

from __future__ import annotations

from effth import _validate as _v
from effth._signature import public

from functools import lru_cache
from math import factorial
from typing import Hashable, Iterator, Sequence, TypeVar

import sympy as sp

__all__ = [
    "set_partitions",
    "bell_number",
    "Moment",
    "Cumulant",
    "moments_to_cumulants",
    "cumulants_to_moments",
]

T = TypeVar("T", bound=Hashable)


@public
def set_partitions(items: Sequence[T]) -> Iterator[tuple[tuple[T, ...], ...]]:
    """Yield every set partition of ``items`` (blocks keep the items' order), deterministically.

    The number of partitions of ``M`` items is the Bell number :math:`B_M`
    (1, 1, 2, 5, 15, 52, 203, 877, 4140, ...).

    Parameters
    ----------
    items : sequence
        Positions are what is partitioned; equal items are still distinct positions.

    Yields
    ------
    tuple of tuples

    Examples
    --------
    >>> list(set_partitions("abc"))
    [(('a', 'b', 'c'),), (('a',), ('b', 'c')), (('a', 'b'), ('c',)), (('a', 'c'), ('b',)), (('a',), ('b',), ('c',))]
    """
    return _set_partitions(_v.items(items, "items"))


def _set_partitions(items: list) -> Iterator[tuple[tuple[T, ...], ...]]:
    for blocks in _partitions_idx(len(items)):
        yield tuple(tuple(items[k] for k in b) for b in blocks)


@lru_cache(maxsize=None)
def _partitions_idx(m: int) -> tuple:
    return tuple(sorted(_partitions_rec(tuple(range(m))), key=lambda p: (len(p), p)))


def _partitions_rec(items: tuple) -> Iterator[tuple]:
    if not items:
        yield ()
        return
    first, rest = items[0], items[1:]
    for part in _partitions_rec(rest):
        # first in its own block, or joined to an existing block
        yield tuple(sorted(((first,),) + part))
        for k in range(len(part)):
            yield tuple(sorted(part[:k] + ((first,) + part[k],) + part[k + 1 :]))


@public
def bell_number(m: int) -> int:
    """The Bell number :math:`B_m` (number of set partitions of ``m`` items).

    Examples
    --------
    >>> [bell_number(m) for m in range(9)]
    [1, 1, 2, 5, 15, 52, 203, 877, 4140]
    """
    return int(sp.bell(m))


def _label_latex(printer, label) -> str:
    return f"z_{{{printer._print(sp.sympify(label))}}}"


class _Correlator(sp.Expr):
    is_commutative = True

    def __new__(cls, *labels):
        if not labels:
            raise ValueError(f"{cls.__name__} needs at least one label")
        labels = sorted((sp.sympify(x) for x in labels), key=sp.default_sort_key)
        return super().__new__(cls, *labels)

    @property
    def labels(self) -> tuple:
        return self.args

    def _sympystr(self, printer) -> str:
        return f"{type(self).__name__}({', '.join(printer._print(a) for a in self.args)})"


@public
class Moment(_Correlator):
    r"""Symbolic moment :math:`\mathbb E[z_{\mu_1}\cdots z_{\mu_M}]`; labels are sorted canonically.

    Examples
    --------
    >>> Moment(3, 1) == Moment(1, 3)
    True
    """

    def _latex(self, printer) -> str:
        body = " ".join(_label_latex(printer, a) for a in self.args)
        return rf"\mathbb{{E}}\left[{body}\right]"


@public
class Cumulant(_Correlator):
    r"""Symbolic cumulant (connected correlator) :math:`\mathbb E[z_{\mu_1}\cdots z_{\mu_M}]\big|_c`.

    Examples
    --------
    >>> from effth.printing import latex
    >>> latex(Cumulant(1, 2))
    '\\mathbb{E}\\left[z_{1} z_{2}\\right]\\big|_{c}'
    """

    def _latex(self, printer) -> str:
        body = " ".join(_label_latex(printer, a) for a in self.args)
        return rf"\mathbb{{E}}\left[{body}\right]\big|_{{c}}"


def _partition_terms(labels: Sequence, parity_even: bool):
    for part in set_partitions(list(labels)):
        if parity_even and any(len(b) % 2 for b in part):
            continue
        yield part


@public
def moments_to_cumulants(labels: Sequence, parity_even: bool = False) -> sp.Expr:
    r"""The cumulant :math:`\mathbb E[z_{\mu_1}\cdots z_{\mu_M}]|_c` as a polynomial in moments.

    Parameters
    ----------
    labels : sequence
        Variable labels (repeats allowed: ``("z",)*6`` is the single-variable :math:`\kappa_6`).
    parity_even : bool
        Drop odd moments (PDLT §1.2: parity-symmetric distributions).

    Returns
    -------
    sympy expression in :class:`Moment` objects

    Notes
    -----
    .. math:: \kappa(1..M)=\sum_\pi(-1)^{|\pi|-1}(|\pi|-1)!\prod_{B\in\pi}\mathbb E\Big[\prod_{i\in B}z_i\Big],

    the inverse of PDLT (1.56); the six-point parity-even case is (1.61).

    Examples
    --------
    >>> moments_to_cumulants(("z",) * 6, parity_even=True)
    30*Moment(z, z)**3 - 15*Moment(z, z)*Moment(z, z, z, z) + Moment(z, z, z, z, z, z)
    """
    if parity_even and len(labels) % 2:
        return sp.S.Zero
    terms = []
    for part in _partition_terms(labels, parity_even):
        k = len(part)
        terms.append((-1) ** (k - 1) * factorial(k - 1) * sp.Mul(*[Moment(*b) for b in part]))
    return sp.Add(*terms)


@public
def cumulants_to_moments(labels: Sequence, parity_even: bool = False) -> sp.Expr:
    r"""The moment :math:`\mathbb E[z_{\mu_1}\cdots z_{\mu_M}]` as a sum over set partitions of cumulants.

    Parameters
    ----------
    labels : sequence
    parity_even : bool
        Drop odd cumulants.

    Returns
    -------
    sympy expression in :class:`Cumulant` objects

    Notes
    -----
    PDLT (1.56): :math:`\mathbb E[z_1\cdots z_M]=\sum_\pi\prod_{B\in\pi}\mathbb E[\prod_{i\in B}z_i]|_c`.

    Examples
    --------
    >>> cumulants_to_moments((1, 2, 3, 4), parity_even=True)
    Cumulant(1, 2)*Cumulant(3, 4) + Cumulant(1, 3)*Cumulant(2, 4) + Cumulant(1, 4)*Cumulant(2, 3) + Cumulant(1, 2, 3, 4)
    """
    if parity_even and len(labels) % 2:
        return sp.S.Zero
    return sp.Add(*[sp.Mul(*[Cumulant(*b) for b in part]) for part in _partition_terms(labels, parity_even)])
