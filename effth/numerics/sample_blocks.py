r"""Which entries of a sample tensor a train/test computation needs.

The trained prediction at order :math:`1/n` (PDLT §∞.2) reads the output-layer tensors of the
NTK hierarchy only at entries whose labels hold at most one test input -- :math:`\Theta_{\dot\beta
\tilde\alpha}`, :math:`P_{\dot\beta\tilde\alpha_1\tilde\alpha_2\tilde\alpha_3}`, ... -- and its
covariance at entries with at most two distinct test inputs.  Every layer recursion of
:math:`K, V, G^{\{1\}}` and of the NTK hierarchy maps an entry to an expression in atoms over
subsets of the entry's own samples and in the previous layer's entries with the same samples
(PDLT (4.115), (4.118), (4.119), (8.63)–(8.97), (11.49)–(11.52), (∞.172)–(∞.176)), so the entries with at
most ``max_test`` distinct test samples are closed under the recursions: a flow restricted to
them is exact on them.

:class:`SampleRestriction` says which entries and which subsets of samples those are, for a
dataset ordered training inputs first (indices ``< n_train``), then test inputs.
"""

from __future__ import annotations

from effth._signature import public

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..errors import DomainError

__all__ = ["SampleRestriction", "restricted_entries"]


@public
@dataclass(frozen=True)
class SampleRestriction:
    """Entries whose labels hold at most ``max_test`` distinct test samples.

    Parameters
    ----------
    n_train : int
        Inputs ``0 .. n_train-1`` are training inputs, the rest test inputs.
    max_test : int
        Largest number of distinct test samples an entry (or a subset of samples) may hold.
    """

    n_train: int
    max_test: int = 1

    def __post_init__(self) -> None:
        for name in ("n_train", "max_test"):
            v = getattr(self, name)
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or v < 0:
                raise DomainError(f"{name} must be a non-negative int, got {v!r}")
        object.__setattr__(self, "n_train", int(self.n_train))
        object.__setattr__(self, "max_test", int(self.max_test))

    def check(self, N: int) -> None:
        """``n_train`` fits the ``N`` inputs."""
        if self.n_train > N:
            raise DomainError(f"n_train={self.n_train} exceeds the {N} inputs")

    def subsets(self, samples: np.ndarray) -> np.ndarray:
        """Rows of sorted distinct samples ``(B, k)`` that hold at most ``max_test`` test samples."""
        return np.count_nonzero(samples >= self.n_train, axis=1) <= self.max_test

    def mask(self, N: int, rank: int) -> np.ndarray:
        """Boolean ``(N,) * rank``: the entries computed (read-only)."""
        return _mask(self.n_train, self.max_test, N, rank)

    def count(self, N: int, rank: int) -> int:
        """Number of computed entries of ``(N,) * rank`` (:func:`restricted_entries`; nothing
        allocated)."""
        self.check(N)
        return restricted_entries(self.n_train, N - self.n_train, self.max_test, rank)

    def entries(self, N: int, rank: int) -> tuple:
        """The computed entries as ``rank`` flat index arrays (row-major order; read-only)."""
        return _entries(self.n_train, self.max_test, N, rank)


@public
def restricted_entries(n_train: int, n_test: int, max_test: int, rank: int = 4) -> int:
    r"""Number of entries of a rank-``rank`` sample tensor on ``n_train`` training and ``n_test``
    test inputs whose labels hold at most ``max_test`` distinct test inputs (the entries
    :class:`SampleRestriction` computes), counted without allocating.

    With :math:`N_\mathcal A` training inputs, exactly :math:`j` distinct test inputs (chosen in
    :math:`\binom{N_\mathcal B}{j}` ways) each appearing at least once among the ``rank`` labels
    is, by inclusion-exclusion, :math:`\sum_{i=0}^{j}(-1)^i\binom{j}{i}(N_\mathcal A+j-i)^{r}`
    label assignments; the count sums that over :math:`j\le` ``max_test``.  For ``max_test=1``
    and rank 4: :math:`N_\mathcal A^4+N_\mathcal B[(N_\mathcal A+1)^4-N_\mathcal A^4]`.

    Parameters
    ----------
    n_train, n_test, max_test, rank : int
        Non-negative counts.

    Returns
    -------
    int
    """
    from math import comb
    for name, v in (("n_train", n_train), ("n_test", n_test), ("max_test", max_test), ("rank", rank)):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or v < 0:
            raise DomainError(f"{name} must be a non-negative int, got {v!r}")
    P, Q, r = int(n_train), int(n_test), int(rank)
    total = 0
    for j in range(min(int(max_test), Q, r) + 1):
        onto = sum((-1) ** i * comb(j, i) * (P + j - i) ** r for i in range(j + 1))
        total += comb(Q, j) * onto
    return total


@lru_cache(maxsize=16)
def _mask(n_train: int, max_test: int, N: int, rank: int) -> np.ndarray:
    idx = np.indices((N,) * rank).reshape(rank, -1)
    test = idx >= n_train
    # distinct test samples: a test label counts unless an earlier slot holds the same sample
    count = np.zeros(idx.shape[1], dtype=np.int64)
    for j in range(rank):
        new = test[j].copy()
        for i in range(j):
            new &= idx[i] != idx[j]
        count += new
    m = (count <= max_test).reshape((N,) * rank)
    m.setflags(write=False)
    return m


@lru_cache(maxsize=16)
def _entries(n_train: int, max_test: int, N: int, rank: int) -> tuple:
    out = np.nonzero(_mask(n_train, max_test, N, rank))
    for a in out:
        a.setflags(write=False)
    return out
