r"""Gaussian expectations of products of activation derivatives over a dataset, on shared nodes.

The NTK-hierarchy recursions need atoms :math:`\langle\prod_k\sigma^{(p_k)}(z_{\delta_k})\rangle_K`
with up to four factors, arbitrary derivative orders and repeated samples, for *every*
assignment of the samples :math:`\delta_k` to the :math:`N` inputs.  :class:`AtomTables` evaluates
them by integrand: an atom entry is a multiset of (sample, order) pairs; it is computed once
(memoized) on the trapezoid grid of its subset of distinct samples, and every subset's grid and
activation values are shared by all the atoms that live on it.

Rule: a tensor-product trapezoid rule in standard-normal coordinates :math:`z=Lx`
(:math:`K_S=LL^\top` from the eigen-decomposition, so singular sub-kernels are fine), with the
step from the activation's strip of analyticity (:mod:`effth.numerics.sample_tables`'
pole/saddle model) and an error estimate from the same nodes at step :math:`2h`; subsets whose
estimate exceeds ``rtol`` are refined.  Polynomial activations use exact Gauss–Hermite rules.
Kinked activations are not handled (their derivatives are distributions): callers must reject
them or use Stein forms.
"""

from __future__ import annotations

import itertools
import math
import warnings
from typing import Any, Iterable

import numpy as np

from ..activations import get_activation
from ..errors import AccuracyWarning, DomainError
from ._rules import gauss_hermite, truncation
from .sample_tables import _coarse, _growth, _rule, _step, real_kernel

__all__ = ["AtomTables"]

_MAX_NODES = 1 << 21     # per subset grid
_MAX_REFINE = 3


class AtomTables:
    r"""Memoized Gaussian expectations of activation-derivative products over one kernel matrix.

    Parameters
    ----------
    K : ndarray (N, N)
        PSD kernel over the dataset.
    activation : str or Activation
        Smooth (or polynomial) activation.
    rtol : float
        Target relative accuracy (relative to the scale of the integrand's absolute value).

    Examples
    --------
    >>> import numpy as np
    >>> t = AtomTables(np.array([[1.0, 0.3], [0.3, 0.8]]), "tanh", rtol=1e-10)
    >>> v = t.table(((0, 1), (1, 1)))        # <sigma'_a sigma'_b> for all a, b
    >>> v.shape
    (2, 2)
    """

    #: Subclasses that evaluate integrands another way (e.g. closed forms for kinked sigma) set False.
    smooth_only = True

    def __init__(self, K: Any, activation: Any, rtol: float = 1e-8) -> None:
        K = real_kernel(K)
        self.K = K
        self.N = K.shape[0]
        self.act = get_activation(activation)
        if self.smooth_only and not (self.act.is_smooth or self.act.is_polynomial):
            raise DomainError(f"{self.act!r} is kinked: its higher derivatives are distributions; "
                              "atom tables need a smooth activation")
        self.rtol = float(rtol)
        self._cache: dict = {}
        self._tables: dict = {}
        self._fns: dict = {}
        self.max_error = 0.0

    # ------------------------------------------------------------------ evaluation
    def _f(self, order: int):
        if order not in self._fns:
            self._fns[order] = self.act.numpy(order)
        return self._fns[order]

    def _grid(self, S: tuple, nfac: int, mult: float):
        KS = self.K[np.ix_(S, S)]
        w_, V = np.linalg.eigh(KS)
        if w_.min() < -1e-9 * max(1.0, abs(w_).max()):
            raise DomainError(f"kernel restricted to samples {S} is not PSD (eigenvalue {w_.min():.3g})")
        w_ = np.clip(w_, 0.0, None)
        keep = w_ > 1e-14 * max(w_.max(), 1e-300)
        L = V[:, keep] * np.sqrt(w_[keep])          # z = L x, x standard normal
        scales = np.sqrt(w_[keep])
        act = self.act
        if act.is_polynomial:
            x, w = gauss_hermite(act.polynomial_degree * nfac // 2 + 1)
            rules = [(x, w, w)] * L.shape[1]
        else:
            X = truncation(self.rtol, _growth(act, nfac))
            rules = []
            for sc in scales:
                x, w = _rule(_step(float(sc), act, self.rtol, nfac) / mult, X)
                rules.append((x, w, _coarse(w)))
        if not rules:                                # all-zero sub-kernel: a point mass at z = 0
            return np.zeros((len(S), 1)), np.ones(1), np.ones(1)
        size = math.prod(len(r[0]) for r in rules)
        if size > _MAX_NODES:
            raise DomainError(f"{len(S)}-D expectation needs {size} nodes (> {_MAX_NODES}); "
                              "lower rtol or use fewer distinct samples per atom")
        xs = np.meshgrid(*[r[0] for r in rules], indexing="ij")
        W = np.ones(())
        Wc = np.ones(())
        for r in rules:
            W = np.multiply.outer(W, r[1])
            Wc = np.multiply.outer(Wc, r[2])
        Z = L @ np.stack([x.ravel() for x in xs])    # (|S|, nodes)
        return Z, W.ravel(), Wc.ravel()

    def _evaluate(self, S: tuple, keys: list) -> None:
        """Fill the cache for integrand keys living on the subset ``S`` of samples."""
        # pole order for strip-analytic sigma (derivatives raise it); growth factors for entire sigma
        nfac = max(len(k) + (sum(o for _, o in k) if math.isfinite(self.act.strip) else 0) for k in keys)
        pending = list(keys)
        mult = 1.0
        for attempt in range(_MAX_REFINE + 1):
            Z, W, Wc = self._grid(S, nfac, mult)
            pos = {s: i for i, s in enumerate(S)}
            vals: dict = {}
            fails = []
            for key in pending:
                prod = np.ones(Z.shape[1])
                for s, o in key:
                    fk = (s, o)
                    if fk not in vals:
                        vals[fk] = self._f(o)(Z[pos[s]])
                    prod = prod * vals[fk]
                fine = float(W @ prod)
                coarse = float(Wc @ prod)
                scale = float(W @ np.abs(prod))
                err = abs(fine - coarse) ** 2 / max(scale, 1e-300) if not self.act.is_polynomial else 0.0
                if err > self.rtol * max(scale, 1e-300) and attempt < _MAX_REFINE:
                    fails.append(key)
                else:
                    self.max_error = max(self.max_error, err / max(scale, 1e-300))
                self._cache[key] = fine
            if not fails:
                return
            pending = fails
            mult *= 2.0
        warnings.warn(f"atom tables: relative error estimate {self.max_error:.2g} above rtol "
                      f"{self.rtol:.2g} on samples {S}", AccuracyWarning, stacklevel=3)

    def values(self, keys: Iterable[tuple]) -> np.ndarray:
        r"""Expectations for integrand keys, each a tuple of ``(sample index, derivative order)``."""
        keys = [tuple(sorted(k)) for k in keys]
        missing: dict = {}
        for k in keys:
            if k not in self._cache:
                S = tuple(sorted({s for s, _ in k}))
                missing.setdefault(S, set()).add(k)
        for S, ks in missing.items():
            self._evaluate(S, sorted(ks))
        return np.array([self._cache[k] for k in keys])

    def table(self, factors: tuple) -> np.ndarray:
        r"""The atom over all label assignments.

        Parameters
        ----------
        factors : tuple of (label position, order)
            E.g. ``((0, 2), (0, 1), (1, 0))`` is :math:`\langle\sigma''_a\sigma'_a\sigma_b\rangle`;
            the result has one axis per distinct label position, in increasing order.
        """
        factors = tuple(factors)
        if factors not in self._tables:
            labels = sorted({p for p, _ in factors})
            keys = []
            for idx in itertools.product(range(self.N), repeat=len(labels)):
                m = dict(zip(labels, idx))
                keys.append(tuple((m[p], o) for p, o in factors))
            self._tables[factors] = self.values(keys).reshape((self.N,) * len(labels))
        return self._tables[factors]
