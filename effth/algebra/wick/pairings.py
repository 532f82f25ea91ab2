r"""Perfect matchings (Wick pairings) of a list of slots.

Wick's theorem (PDLT (1.45)): for a zero-mean Gaussian,

.. math:: \langle z_{\mu_1}\cdots z_{\mu_{2m}}\rangle_K
          = \sum_{\text{pairings}} K_{\mu_{k_1}\mu_{k_2}}\cdots K_{\mu_{k_{2m-1}}\mu_{k_{2m}}},

a sum over the :math:`(2m-1)!!` perfect matchings of the :math:`2m` slots.  This module only
enumerates matchings; :mod:`effth.algebra.wick.graph` groups them into isomorphism classes.

Examples
--------
>>> list(enumerate_pairings("abcd"))
[(('a', 'b'), ('c', 'd')), (('a', 'c'), ('b', 'd')), (('a', 'd'), ('b', 'c'))]
>>> count_pairings(12)
10395
"""

from __future__ import annotations

from effth import _validate as _v
from effth._signature import public

from typing import Hashable, Iterator, Sequence, TypeVar

__all__ = ["enumerate_pairings", "count_pairings", "double_factorial"]

T = TypeVar("T", bound=Hashable)


@public
def double_factorial(k: int) -> int:
    """:math:`k!! = k(k-2)(k-4)\\cdots`, with ``(-1)!! = 0!! = 1``."""
    if k < -1:
        raise ValueError(f"double factorial of {k} is undefined")
    out = 1
    while k > 1:
        out *= k
        k -= 2
    return out


@public
def count_pairings(n_slots: int) -> int:
    """Number of perfect matchings of ``n_slots`` slots: ``(n-1)!!`` if even, else 0."""
    if n_slots < 0:
        raise ValueError("n_slots must be non-negative")
    return 0 if n_slots % 2 else double_factorial(n_slots - 1)


@public
def enumerate_pairings(slots: Sequence[T]) -> Iterator[tuple[tuple[T, T], ...]]:
    """Yield every perfect matching of ``slots`` as a tuple of pairs, in a fixed order.

    The first slot is paired with each later slot in turn and the rest is matched
    recursively, so the order is deterministic and each pair keeps the slots' order.
    An odd number of slots yields nothing; an empty sequence yields one empty matching.
    A ``slots`` that is not a sequence raises :class:`~effth.errors.DomainError` at the call.
    """
    return _pairings(_v.items(slots, "slots"))


def _pairings(slots: list) -> Iterator[tuple[tuple[T, T], ...]]:
    if len(slots) % 2:
        return
    if not slots:
        yield ()
        return
    first, rest = slots[0], slots[1:]
    for k, partner in enumerate(rest):
        remaining = rest[:k] + rest[k + 1 :]
        for tail in _pairings(remaining):
            yield ((first, partner),) + tail
