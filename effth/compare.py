r"""Theory meets measurement: one comparison type with standard errors and scaling fits.

This module sits in the top row of effth's design (comparison and reports): it reads any
*theory* result (``Flow``, ``NTKFlow``, ``DMFTResult``, ``Gamma0Series``) and any *measured*
result (``EnsembleStatistics``, ``NTKEnsembleStatistics``, ``TrainingRun``, or a Monte-Carlo
``DMFTResult``) through the one protocol of ``docs/conventions.md``::

    result.value(name, layer=None)     # prediction, or mean over networks
    result.stderr(name, layer=None)    # standard error, or None for a deterministic theory

and returns a :class:`Comparison`: the difference, its standard error and the z-scores.
:func:`scaling_fit` fits :math:`|\text{error}| \propto x^{p}` over a family of comparisons (width
:math:`n`, or :math:`\gamma_0`) with the standard error of the exponent, so that a claim such as
"the error of :math:`K+G^{\{1\}}/n` shrinks as :math:`1/n^2`" (PDLT §4.5) is a number with an
error bar.

Examples
--------
>>> import numpy as np
>>> from effth.compare import compare, scaling_fit
>>> c = compare(np.array([1.0, 2.0]), np.array([1.1, 1.9]), "G", stderr=np.array([0.05, 0.05]))
>>> round(c.max_abs_z, 6), c.dof
(2.0, 2)
>>> fits = [compare(np.zeros(3), np.full(3, 1.0 / n**2), "G", stderr=np.full(3, 1e-3 / n**2))
...         for n in (8, 16, 32)]
>>> round(scaling_fit(fits, [8, 16, 32]).slope, 6)
-2.0
"""

from __future__ import annotations

from effth._signature import public

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from ._validate import real_array
from .errors import DomainError

__all__ = ["Comparison", "ScalingFit", "compare", "scaling_fit"]


def _read(result: Any, name: str, layer: Any, kwargs: dict) -> tuple[np.ndarray, np.ndarray | None]:
    """(value, stderr) of ``name`` at ``layer`` from a result or a plain array."""
    if hasattr(result, "value") and callable(result.value):
        kw = dict(kwargs)
        value = result.value(name, layer=layer, **kw) if layer is not None or kw else \
            result.value(name)
        err = None
        if hasattr(result, "stderr") and callable(result.stderr):
            err = result.stderr(name, layer=layer) if layer is not None else result.stderr(name)
        return _real_array(value, "value"), (None if err is None else _real_array(err, "stderr"))
    return _real_array(result, "value"), None


def _real_array(x: Any, what: str) -> np.ndarray:
    return real_array(x, f"compare: the {what}")


def _generators(ndim: int) -> list:
    if ndim == 2:
        return [(1, 0)]
    if ndim == 4:
        return [(1, 0, 2, 3), (0, 1, 3, 2), (2, 3, 0, 1)]
    return []


def _distinct_mask(*arrays: np.ndarray) -> np.ndarray:
    """True at the lexicographically first index of each orbit of the symmetries all
    ``arrays`` share (checked exactly, entry by entry)."""
    a0 = arrays[0]
    def same(a, g):     # equal up to the rounding of a symmetrizing sum
        scale = float(np.max(np.abs(a), initial=0.0, where=np.isfinite(a)))
        return np.allclose(a, np.transpose(a, g), rtol=1e-12, atol=1e-14 * scale, equal_nan=True)

    gens = [g for g in _generators(a0.ndim)
            if tuple(a0.shape[k] for k in g) == a0.shape
            and all(a.shape == a0.shape and same(a, g) for a in arrays)]
    mask = np.ones(a0.shape, dtype=bool)
    if not gens or a0.size == 0:
        return mask
    group = {tuple(range(a0.ndim))}
    while True:
        new = group | {tuple(g[k] for k in h) for g in group for h in gens}
        if new == group:
            break
        group = new
    idx = np.indices(a0.shape)
    flat = np.ravel_multi_index(tuple(idx), a0.shape)
    for g in group:
        mask &= flat <= np.ravel_multi_index(tuple(idx[list(g)]), a0.shape)
    return mask


@public
@dataclass(frozen=True, repr=False)
class Comparison:
    r"""Theory against measurement for one quantity.

    Attributes
    ----------
    name : str
        The quantity (``"G"``, ``"V"``, ``"f"``, ...).
    layer : int or None
        Book layer number :math:`\ell`, if the quantity is per layer.
    theory, measured : ndarray
        Same shape.
    stderr : ndarray
        Standard error of ``measured - theory``: the measured one and the theory's (if it has
        one, e.g. a Monte-Carlo DMFT) combined in quadrature.
    difference : ndarray
        ``measured - theory``.
    z : ndarray
        ``difference / stderr`` (``nan`` where an entry has zero standard error and zero
        difference; ``±inf`` where the difference is nonzero but the error is zero).
    """

    name: str
    layer: int | None
    theory: np.ndarray
    measured: np.ndarray
    stderr: np.ndarray
    label: str = ""
    meta: dict = field(default_factory=dict)

    @property
    def difference(self) -> np.ndarray:
        return self.measured - self.theory

    @property
    def z(self) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return self.difference / self.stderr

    @property
    def distinct(self) -> np.ndarray:
        """Mask of the distinct entries: one per orbit of the index symmetries that theory,
        measurement and standard error all share (a symmetric matrix counts its upper
        triangle, a pair-symmetric four-index tensor its 8-fold orbits once)."""
        return _distinct_mask(self.theory, self.measured, self.stderr)

    @property
    def _resolved(self) -> np.ndarray:
        """Distinct entries with a positive standard error."""
        return (self.stderr > 0) & self.distinct

    @property
    def dof(self) -> int:
        """Number of distinct entries with a positive standard error (the ones ``chi2`` sums;
        symmetric duplicates counted once)."""
        return int(np.count_nonzero(self._resolved))

    @property
    def chi2(self) -> float:
        r""":math:`\sum z^2` over resolved entries (entries are treated as independent)."""
        m = self._resolved
        return float(np.sum(self.z[m] ** 2)) if m.any() else float("nan")

    @property
    def max_abs_z(self) -> float:
        """Largest :math:`|z|` over resolved entries (``nan`` if none is resolved)."""
        m = self._resolved
        return float(np.max(np.abs(self.z[m]))) if m.any() else float("nan")

    @property
    def error(self) -> float:
        r"""RMS difference :math:`e=\sqrt{\overline{d^2}}` over all entries."""
        return float(np.sqrt(np.mean(self.difference ** 2)))

    @property
    def error_stderr(self) -> float:
        r"""Standard error of :attr:`error` by the delta method, :math:`\sqrt{\sum(d_i s_i)^2}/(N e)`.

        Meaningful when the difference is resolved (``max_abs_z`` well above 1); at the noise
        floor :attr:`error` is dominated by the noise itself, :math:`\approx` RMS(stderr).
        """
        d, s = self.difference.ravel(), self.stderr.ravel()
        e = self.error
        if e == 0:
            return float(np.sqrt(np.mean(s ** 2)))
        return float(np.sqrt(np.sum((d * s) ** 2)) / (d.size * e))

    @property
    def error_debiased(self) -> float:
        r"""RMS of the *true* difference, with the noise removed:
        :math:`\hat e=\sqrt{\max(\overline{d^2}-\overline{s^2},0)}`.

        Each measured difference has :math:`\mathbb E[d_i^2]=\mu_i^2+s_i^2`, so the plain
        :attr:`error` never falls below the noise floor :math:`\sqrt{\overline{s^2}}`; a width
        study whose sample sizes shrink with the width then shows a spurious plateau. This is the
        estimate :func:`scaling_fit` fits with ``debias=True``."""
        d2, s2 = self.difference.ravel() ** 2, self.stderr.ravel() ** 2
        return float(np.sqrt(max(np.mean(d2) - np.mean(s2), 0.0)))

    @property
    def error_debiased_sq_stderr(self) -> float:
        r"""Standard error of :math:`\hat e^2=\overline{d^2}-\overline{s^2}`, from
        :math:`\mathrm{Var}(d_i^2)=2s_i^4+4\mu_i^2s_i^2` with :math:`\mu_i^2` estimated by
        :math:`\max(d_i^2-s_i^2,0)` (entries independent, Gaussian errors)."""
        d2, s2 = self.difference.ravel() ** 2, self.stderr.ravel() ** 2
        mu2 = np.maximum(d2 - s2, 0.0)
        return float(np.sqrt(np.sum(2.0 * s2 ** 2 + 4.0 * mu2 * s2)) / d2.size)

    @property
    def noise_floor(self) -> float:
        """RMS standard error: the :attr:`error` that pure noise would give."""
        return float(np.sqrt(np.mean(self.stderr ** 2)))

    @property
    def consistent(self) -> bool:
        """Every resolved entry within 5 standard errors (:meth:`within` for another bound)."""
        return self.within(5.0)

    def within(self, sigmas: float) -> bool:
        """Every resolved entry within ``sigmas`` standard errors (a multiple-comparison-aware
        verdict needs ``sigmas`` of 4–5 for tables of tens of entries)."""
        return bool(self.max_abs_z <= sigmas)

    def table(self, max_rows: int = 12) -> str:
        """A plain-text table: entries with the largest ``|z|`` first."""
        d = self.difference.ravel()
        zz = np.abs(np.nan_to_num(self.z.ravel(), nan=0.0))
        order = np.argsort(-zz)[:max_rows]
        shape = self.theory.shape
        head = (f"{self.label or self.name}" + (f" at layer {self.layer}" if self.layer else "")
                + f": max|z| = {self.max_abs_z:.2f}, chi2/dof = {self.chi2:.1f}/{self.dof}, "
                f"RMS error {self.error:.3g} (noise {self.noise_floor:.2g})")
        rows = [head, f"{'entry (from 1)':>14} {'theory':>13} {'measured':>13} {'± stderr':>11} "
                      f"{'z':>7}"]
        for i in order:
            idx = np.unravel_index(i, shape) if shape else ()
            # entries numbered from 1, as the book's sample labels and the report's G_11
            rows.append(f"{str(tuple(int(k) + 1 for k in idx)):>14} {self.theory.ravel()[i]:>13.6g} "
                        f"{self.measured.ravel()[i]:>13.6g} {self.stderr.ravel()[i]:>11.3g} "
                        f"{self.z.ravel()[i]:>7.2f}")
        if d.size > len(order):
            rows.append(f"{'':>14} ... {d.size - len(order)} more entries")
        return "\n".join(rows)

    def __repr__(self) -> str:
        where = f", layer={self.layer}" if self.layer is not None else ""
        return (f"Comparison({self.label or self.name!r}{where}, shape={self.theory.shape}, "
                f"max|z|={self.max_abs_z:.2f}, chi2/dof={self.chi2:.1f}/{self.dof}, "
                f"error={self.error:.3g})")

    def _repr_html_(self) -> str:
        return ("<table><tr><th>quantity</th><th>layer</th><th>entries</th><th>max |z|</th>"
                "<th>χ²/dof</th><th>RMS error</th><th>noise floor</th></tr>"
                f"<tr><td>{self.label or self.name}</td><td>{self.layer if self.layer else ''}</td>"
                f"<td>{self.theory.size}</td><td>{self.max_abs_z:.2f}</td>"
                f"<td>{self.chi2:.1f}/{self.dof}</td><td>{self.error:.3g}</td>"
                f"<td>{self.noise_floor:.2g}</td></tr></table>")


@public
def compare(theory: Any, measured: Any, name: str, layer: int | None = None, *,
            stderr: Any = None, widths: Any = None, label: str = "",
            **theory_kwargs: Any) -> Comparison:
    r"""Compare a theory's ``name`` with a measurement of it, entry by entry.

    Parameters
    ----------
    theory : result or array_like
        Anything with ``value(name, layer=...)`` (``Flow``, ``NTKFlow``, ``DMFTResult``, ...) or
        the predicted array itself.  A theory result with a ``stderr`` (a Monte-Carlo DMFT) adds
        its error in quadrature.
    measured : result or array_like
        Anything with ``value`` and ``stderr`` (``EnsembleStatistics``, ``TrainingRun``, ...),
        or an array together with ``stderr=``.
    name : str
        The quantity, with the names of ``docs/conventions.md`` (``"G"``, ``"V"``, ``"f"``, ...).
    layer : int, optional
        Book layer number :math:`\ell` (per-layer quantities).
    stderr : array_like, optional
        Standard error of ``measured`` when it is a plain array (overrides the result's).
    widths : int or sequence, optional
        Passed to ``theory.value`` for finite-width theory quantities (``"G"`` of a ``Flow``).
    label : str
        A display name.
    **theory_kwargs
        Further keywords for ``theory.value`` (e.g. ``gamma0=`` of a ``Gamma0Series``).

    Returns
    -------
    Comparison

    Raises
    ------
    DomainError
        Shapes differ, no standard error is available, or an input is not finite.

    Examples
    --------
    >>> import effth as et, numpy as np
    >>> X = np.eye(2)
    >>> net = et.MLP("tanh", depth=3, widths=32)
    >>> fl = et.flow(net, X)
    >>> ens = et.simulate_ensemble(net, X, networks=400, seed=0)      # doctest: +SKIP
    >>> et.compare(fl, ens, "G", layer=3).max_abs_z < 5             # doctest: +SKIP
    True
    """
    kw = dict(theory_kwargs)
    if widths is not None:
        kw["widths"] = widths
    t_val, t_err = _read(theory, name, layer, kw)
    m_val, m_err = _read(measured, name, layer, {})
    if stderr is not None:
        m_err = _real_array(stderr, "stderr")
    if m_err is None and t_err is None:
        raise DomainError(f"compare({name!r}): the measurement has no standard error; pass "
                          "stderr= or a measured result with stderr(name, layer)")
    if t_val.shape != m_val.shape:
        raise DomainError(f"compare({name!r}): theory has shape {t_val.shape}, measurement "
                          f"{m_val.shape}; the conventions give both the same shape")
    errs = [e for e in (m_err, t_err) if e is not None]
    if any(np.any(e < 0) for e in errs):
        raise DomainError(f"compare({name!r}): negative standard errors (stderr must be >= 0)")
    for e in errs:
        if e.shape != m_val.shape:
            try:
                np.broadcast_to(e, m_val.shape)
            except ValueError as exc:
                raise DomainError(f"compare({name!r}): stderr shape {e.shape} does not match "
                                  f"{m_val.shape}") from exc
    total = np.sqrt(sum(np.broadcast_to(e, m_val.shape) ** 2 for e in errs))
    for what, a in (("theory", t_val), ("measured", m_val), ("stderr", total)):
        if not np.all(np.isfinite(a)):
            raise DomainError(f"compare({name!r}): the {what} values are not all finite")
    return Comparison(name=name, layer=None if layer is None else int(layer), theory=t_val,
                      measured=m_val, stderr=np.array(total, dtype=float), label=label)


@public
@dataclass(frozen=True, repr=False)
class ScalingFit:
    r"""Power law :math:`e(x) = a\,x^{p}` fitted to comparison errors.

    Attributes
    ----------
    x : ndarray
        The scaling variable (width :math:`n`, or :math:`\gamma_0`).
    error, error_stderr : ndarray
        :attr:`Comparison.error` and its standard error at each ``x``.
    slope, slope_stderr : float
        :math:`p` and its standard error (weighted least squares in :math:`\log e`; the
        standard error is scaled up by :math:`\sqrt{\chi^2/\nu}` when that exceeds 1).
    amplitude : float
        :math:`a`.
    chi2 : float
        Residual :math:`\chi^2` of the fit (``nan`` for two points).
    """

    x: np.ndarray
    error: np.ndarray
    error_stderr: np.ndarray
    slope: float
    slope_stderr: float
    amplitude: float
    chi2: float

    def consistent_with(self, slope: float, sigmas: float = 4.0) -> bool:
        """Whether ``slope`` lies within ``sigmas`` standard errors of the fitted exponent."""
        return bool(abs(self.slope - slope) <= sigmas * self.slope_stderr)

    def predict(self, x: Any) -> np.ndarray:
        return self.amplitude * np.asarray(x, dtype=float) ** self.slope

    def __repr__(self) -> str:
        return (f"ScalingFit(slope={self.slope:.3f} ± {self.slope_stderr:.3f}, "
                f"points={self.x.size}, chi2={self.chi2:.2f})")

    def _repr_html_(self) -> str:
        rows = "".join(f"<tr><td>{x:g}</td><td>{e:.4g} ± {s:.2g}</td></tr>"
                       for x, e, s in zip(self.x, self.error, self.error_stderr))
        return (f"<p>error ∝ x<sup>{self.slope:.3f} ± {self.slope_stderr:.3f}</sup></p>"
                f"<table><tr><th>x</th><th>error</th></tr>{rows}</table>")


@public
def scaling_fit(comparisons: Sequence[Comparison], x: Sequence[float], *,
                min_z: float = 3.0, debias: bool = False) -> ScalingFit:
    r"""Fit :math:`e \propto x^{p}` to the RMS errors of ``comparisons`` at the values ``x``.

    Parameters
    ----------
    comparisons : sequence of Comparison
        One per value of ``x`` (e.g. the same quantity at widths 16, 32, 64).
    x : sequence of float
        Positive scaling variable.
    min_z : float
        Every error must be resolved. By default (``debias=False``) the fitted error is the plain
        RMS :attr:`Comparison.error` with its delta-method standard error, and a point counts as
        resolved when ``error / error_stderr >= min_z``. That error is biased up by the noise
        (:math:`\mathbb E[d_i^2]=\mu_i^2+s_i^2`): it never falls below the noise floor
        :attr:`Comparison.noise_floor`, and the check can pass there when the comparison has many
        entries, so a study whose sample size shrinks with ``x`` can show a spurious plateau.
        Check ``error`` against ``noise_floor``, or use ``debias=True``.
    debias : bool
        Fit :attr:`Comparison.error_debiased` (the noise's expected contribution removed) with
        the standard error of its square; a point is resolved when
        :math:`\hat e^2\ge z_{\min}\,\mathrm{SE}(\hat e^2)` (pure noise passes with probability
        :math:`\approx10^{-3}` at ``min_z = 3``). Stricter, and unbiased at the noise floor.

    Returns
    -------
    ScalingFit

    Raises
    ------
    DomainError
        Fewer than two points, non-positive ``x``, or an unresolved error.
    """
    comps = list(comparisons)
    xs = np.asarray(x, dtype=float)
    if len(comps) != xs.size or xs.size < 2:
        raise DomainError(f"scaling_fit needs one comparison per x and at least two points; "
                          f"got {len(comps)} comparisons, {xs.size} x values")
    if np.any(~np.isfinite(xs)) or np.any(xs <= 0):
        raise DomainError(f"scaling_fit: x must be positive and finite, got {xs.tolist()}")
    if debias:
        e2 = np.array([c.error_debiased ** 2 for c in comps])
        s2 = np.array([c.error_debiased_sq_stderr for c in comps])
        for xi, ei, si in zip(xs, e2, s2):
            if not (ei > 0 and si > 0 and ei / si >= min_z):
                raise DomainError(
                    f"scaling_fit: the error at x = {xi:g} is not resolved above the noise (squared "
                    f"error {ei:.3g} ± {si:.2g} after removing the noise, need {min_z:g} standard "
                    "errors); more samples, or a larger effect, are needed")
        e = np.sqrt(e2)
        s = s2 / (2.0 * e)                              # SE(e) = SE(e^2) / (2 e)
    else:
        e = np.array([c.error for c in comps])
        s = np.array([c.error_stderr for c in comps])
        for xi, ei, si in zip(xs, e, s):
            if not (ei > 0 and si > 0 and ei / si >= min_z):
                raise DomainError(f"scaling_fit: the error at x = {xi:g} is not resolved "
                                  f"({ei:.3g} ± {si:.2g}, need {min_z:g} standard errors); more "
                                  "samples, or a larger effect, are needed")
    y, w = np.log(e), (e / s) ** 2                      # var(log e) = (s/e)^2
    A = np.stack([np.ones_like(xs), np.log(xs)], axis=1)
    cov = np.linalg.inv(A.T @ (A * w[:, None]))
    coef = cov @ (A.T @ (w * y))
    resid = y - A @ coef
    chi2 = float(np.sum(w * resid ** 2))
    nu = xs.size - 2
    scale = math.sqrt(max(1.0, chi2 / nu)) if nu > 0 else 1.0
    return ScalingFit(x=xs, error=e, error_stderr=s, slope=float(coef[1]),
                      slope_stderr=float(math.sqrt(cov[1, 1]) * scale),
                      amplitude=float(math.exp(coef[0])), chi2=chi2 if nu > 0 else float("nan"))
