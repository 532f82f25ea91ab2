r"""Estimators of G, V and the connected four-point function from per-group sums, and their
delete-one-group jackknife standard errors.

Private helpers of :mod:`effth.simulation.ensemble`.  Every estimator is a smooth function of
sums over independent networks (:class:`~effth.simulation._kernels.LayerSums`), so the
jackknife over ``K`` disjoint groups of networks gives its standard error.
"""

from __future__ import annotations

import numpy as np

from ._jackknife import jackknife_error
from ._kernels import LayerSums

__all__ = ["layer_estimates"]

def _sym_pairs(a: np.ndarray) -> np.ndarray:
    """Symmetrize ``(..., p, p)`` under the pair swap."""
    return 0.5 * (a + np.swapaxes(a, -1, -2))


def _estimate(sG, sGG, sg, sgg, sq, s3, s3x, M, *, n_prev: int, n_cur: int, first: bool,
              pid: np.ndarray, residual: bool = False) -> dict[str, np.ndarray]:
    r"""Estimators from sums with a leading replicate axis ``r``.

    Parameters
    ----------
    sG, sg : ndarray (r, p)
    sGG, sgg, sq : ndarray (r, p, p)
    s3, s3x : ndarray (r, p, N)
    M : ndarray (r,)
        Number of networks in each replicate's sums (>= 2).

    Returns
    -------
    dict
        ``G, G_rb``: ``(r, N, N)``; ``V, kappa4_same, kappa4_cross, O_cov``: ``(r, N, N, N, N)``;
        ``kappa3_same, kappa3_cross``: ``(r, N, N, N)``.  With ``residual`` the metric sums are
        the neuron-averaged conditional second moment (unbiased for :math:`G`, so the
        :math:`G\otimes G` estimate stays unbiased) and ``V`` is read from the cross-neuron
        cumulant, :math:`n_{\ell-1}\kappa_4^{\rm cross}` (PDLT (4.77)): (4.76) does not hold
        when the conditional mean :math:`\gamma z^{(\ell-1)}` is nonzero.
    """
    M1 = M[:, None]
    M2 = M[:, None, None]
    G_rb = sG / M1
    outer_rb = G_rb[:, :, None] * G_rb[:, None, :]
    if first:
        cov = np.zeros_like(sGG)                        # G_hat^(1) is deterministic
    else:
        cov = _sym_pairs(sGG - M2 * outer_rb) / (M2 - 1)
    G_z = sg / M1
    O_cov = _sym_pairs(sgg - M2 * G_z[:, :, None] * G_z[:, None, :]) / (M2 - 1)
    Q = _sym_pairs(sq) / M2
    Pi = outer_rb - cov / M2                            # unbiased estimate of G (x) G

    def full(a: np.ndarray) -> np.ndarray:
        return a[:, pid[:, :, None, None], pid[None, None, :, :]]

    Pi4 = full(Pi)
    Q4 = full(Q)
    k_same = (Q4 - Pi4 - np.einsum("...acbd->...abcd", Pi4)
              - np.einsum("...adbc->...abcd", Pi4))
    if n_cur >= 2:
        R = (n_cur * _sym_pairs(sgg) / M2 - Q) / (n_cur - 1)
        k_cross = full(R) - Pi4
    else:
        k_cross = np.full_like(Q4, np.nan)
    k3_same = s3 / M[:, None, None]
    k3_cross = s3x / M[:, None, None] if n_cur >= 2 else np.full_like(k3_same, np.nan)
    V = n_prev * (k_cross if residual else full(cov))
    if residual and first:
        V = np.zeros_like(V)
    return {
        "kappa3_same": k3_same[:, pid],
        "kappa3_cross": k3_cross[:, pid],
        "G": G_z[:, pid],
        "G_rb": G_rb[:, pid],
        "V": V,
        "kappa4_same": k_same,
        "kappa4_cross": k_cross,
        "O_cov": full(O_cov),
    }


def layer_estimates(groups: list[LayerSums], *, n_prev: int, n_cur: int, first: bool,
                    pid: np.ndarray, residual: bool = False
                    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Point estimates (all networks) and jackknife standard errors (over the groups).

    Parameters
    ----------
    groups : list of LayerSums
        Disjoint groups of networks of one layer, ``K = len(groups)``.
    n_prev, n_cur : int
        :math:`n_{\\ell-1}` and :math:`n_\\ell`.
    first : bool
        Whether this is layer 1 (deterministic stochastic metric, ``V = 0``).
    pid : ndarray (N_D, N_D)
        Pair packing (:func:`~effth.simulation._kernels.pair_index`).

    Returns
    -------
    estimates, errors : dict str -> ndarray
        Same keys and shapes; errors are NaN when fewer than 2 groups are available.
    """
    keys = ("sG", "sGG", "sg", "sgg", "sq", "s3", "s3x")
    stack = {k: np.stack([getattr(g, k) for g in groups]) for k in keys}
    counts = np.array([g.count for g in groups], dtype=np.float64)
    tot = {k: v.sum(axis=0) for k, v in stack.items()}
    M = counts.sum()
    kw = dict(n_prev=n_prev, n_cur=n_cur, first=first, pid=pid, residual=residual)
    est = _estimate(*(tot[k][None] for k in keys),
                    np.array([M]), **kw)
    est = {k: v[0] for k, v in est.items()}
    K = len(groups)
    if K < 2 or np.any(M - counts < 2):
        err = {k: np.full_like(v, np.nan) for k, v in est.items()}
        return est, err
    loo = _estimate(*(tot[k][None] - stack[k] for k in keys),
                    M - counts, **kw)
    err = {}
    for k, v in loo.items():
        if k in ("kappa4_cross", "kappa3_cross") and n_cur < 2:
            err[k] = np.full_like(est[k], np.nan)
            continue
        err[k] = jackknife_error(v)
    return est, err
