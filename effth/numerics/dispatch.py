"""``gaussian_expectation``: validation, distributional expansion, method dispatch.

A product of factors sigma^(a)(z_s), z_s^p is first split into regular parts
and Dirac parts (``Activation.singular_part``).  Every term with Dirac factors
is reduced exactly by Gaussian conditioning; the remaining regular expectation
is computed by a backend: closed form, quadrature, mpmath reference or Monte
Carlo.
"""

from __future__ import annotations

from .. import _validate as _v
from effth._signature import public

import math
import warnings
from typing import Any, Sequence

import numpy as np

from ..activations import get_activation
from ..errors import ClosedFormUnavailableWarning, DomainError, NotDerivedError
from .validation import validate_covariance, validate_factors, validate_mean

__all__ = ["gaussian_expectation"]

_METHODS = ("auto", "closed", "quadrature", "mpmath", "mc")


class _Backend:
    """Evaluates regular (delta-free) atoms; collects closed-form misses."""

    def __init__(self, method: str, activation: Any, rtol: float, rng: Any, n_samples: int | None,
                 dps: int) -> None:
        self.method = method
        self.activation = activation
        self.rtol = rtol
        self.rng = rng
        self.n_samples = n_samples
        self.dps = dps
        self.missed: list[tuple] = []
        self._mc_calls = 0

    def __call__(self, factors: tuple, K: np.ndarray, mean: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        act = self.activation
        if self.method in ("auto", "closed"):
            if mean is None:
                res = _closed_with_point_masses(act, factors, K)
                if res is not None:
                    return res, np.zeros(K.shape[0])
            if self.method == "closed":
                self.missed.append(factors if mean is None else factors + (("mean", "nonzero"),))
        if self.method in ("auto", "closed", "quadrature"):
            if K.shape[-1] > 4:
                raise NotDerivedError(
                    f"no closed form for {act!r} with factors {list(factors)} and quadrature supports at "
                    f"most 4 distinct slots (got {K.shape[-1]}); use method='mc'")
            from .quadrature import quadrature_expectation
            v, e, _ = quadrature_expectation(factors, K, act, mean=mean, rtol=self.rtol, return_info=True)
            return v, e
        if self.method == "mpmath":
            from .reference import reference_expectation
            return reference_expectation(factors, K, act, mean=mean, dps=self.dps, return_error=True)
        from .montecarlo import mc_expectation
        self._mc_calls += 1
        return mc_expectation(factors, K, act, mean=mean, seed=self.rng, n_samples=self.n_samples,
                              return_error=True)


def _jump_on_point_mass(act: Any, factors: tuple, K: np.ndarray) -> bool:
    """Whether a factor whose regular part jumps at 0 sits on a slot of exactly zero variance.

    There z = 0 almost surely and the expectation is the activation's value at the kink
    (PDLT (2.9): Theta(0) = 1), not the K -> 0+ limit (1/2) that the orthant closed forms
    give; such batches go to quadrature, which evaluates the point mass.
    """
    if not getattr(act, "kinks", ()) or 0.0 not in act.kinks:
        return False
    diag = np.diagonal(K, axis1=-2, axis2=-1)
    for s, kind, order in factors:
        if kind != "sigma" or not np.any(diag[..., s] == 0.0):
            continue
        for c, jumps in act.jumps(max_order=max(order, 1)):
            if c == 0.0 and order < len(jumps) and jumps[order] != 0:
                return True
    return False


def _try_closed(act: Any, factors: tuple, K: np.ndarray) -> np.ndarray | None:
    """The closed form on a batch without point masses at kinks (callers split those off:
    :func:`_closed_with_point_masses`), or None where there is none or it is not finite."""
    try:
        from .closed_forms import closed_form
    except ImportError:
        return None
    try:
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            res = closed_form(act, list(factors), K)
    except np.linalg.LinAlgError:          # a formula degenerate at this kernel (e.g. overflowed): quadrature
        return None
    if res is None:
        return None
    res = np.asarray(res, dtype=np.float64).reshape(K.shape[:-2])
    if not np.all(np.isfinite(res)):
        return None
    return res


def _closed_with_point_masses(act: Any, factors: tuple, K: np.ndarray) -> np.ndarray | None:
    """Closed forms for a batch ``K (B, k, k)`` in which some entries have slots of exactly zero
    variance under a factor that jumps at 0 (:func:`_jump_on_point_mass`): there z = 0 almost
    surely, so those factors are the constants sigma^(p)(0) (the value at the kink, PDLT (2.9))
    and ``z^p`` is ``0**p``, and the closed form runs on the other slots.  Entries are grouped by
    their pattern of zero slots; None where any group has no closed form (then quadrature, which
    evaluates the point mass, takes the whole batch)."""
    if not _jump_on_point_mass(act, factors, K):
        return _try_closed(act, factors, K)
    slots = sorted({s for s, _, _ in factors})
    diag = np.diagonal(K, axis1=-2, axis2=-1)
    codes = (diag[:, slots] == 0.0) @ (1 << np.arange(len(slots)))
    out = np.empty(K.shape[0])
    for code in np.unique(codes):
        sel = codes == code
        zero = {s for i, s in enumerate(slots) if int(code) >> i & 1}
        const, rest = 1.0, []
        for s, kind, o in factors:
            if s not in zero:
                rest.append((s, kind, o))
            elif kind == "z":
                const *= 0.0 ** o
            else:
                const *= float(act.numpy(o)(np.array(0.0)))
        if const == 0.0 or not rest:
            out[sel] = const
            continue
        used = sorted({s for s, _, _ in rest})
        remap = {s: i for i, s in enumerate(used)}
        sub = K[sel][:, used][:, :, used]
        res = _try_closed(act, tuple((remap[s], kd, o) for s, kd, o in rest), sub)
        if res is None:
            return None
        out[sel] = const * res
    return out


# ------------------------------------------------------- homogeneous scaling
_RESCALE_BITS = 16     # rescale when max diag K is outside [2^-16, 2^16] (exact: by a power of 2)


def _degree(factors: tuple, act: Any) -> int | None:
    """Degree of homogeneity of the integrand in z, or None if it is not homogeneous."""
    h = None
    if any(kind == "sigma" for _, kind, _ in factors):
        h = getattr(act, "homogeneity", None)
        if h is None:
            return None
    return sum((h - o) if kind == "sigma" else o for _, kind, o in factors)


def _homogeneous_rescale(factors: tuple, K: np.ndarray, mean: Any, act: Any, method: str) -> tuple:
    r"""For a positively homogeneous integrand and zero mean, evaluate at K/2^e instead of K.

    :math:`\langle f\rangle_{\lambda K}=\lambda^{d/2}\langle f\rangle_K` exactly (Dirac parts
    included), so kernels of any scale (1e-300 .. 1e300) are computed at unit scale and scaled
    back; 2^e is a power of two, so K/2^e is exact.  Returns (K', e per batch entry) or (K, None).
    """
    if mean is not None or method == "mpmath" or K.shape[0] == 0:
        return K, None
    if _degree(factors, act) is None:
        return K, None
    dmax = np.max(np.diagonal(K, axis1=-2, axis2=-1), axis=-1)
    with np.errstate(divide="ignore"):
        e = np.where(dmax > 0, np.round(np.log2(np.where(dmax > 0, dmax, 1.0))), 0.0)
    e = np.where(np.abs(e) > _RESCALE_BITS, e, 0.0).astype(np.int64)
    if not np.any(e):
        return K, None
    return np.ldexp(K, -e[:, None, None]), e


def _scale_back(total: np.ndarray, e: np.ndarray, factors: tuple, act: Any, check: bool = True) -> np.ndarray:
    """Multiply by (2^e)^(d/2) without intermediate overflow; refuse a result beyond float64."""
    d = _degree(factors, act)
    half, odd = divmod(int(d) * e, 2)                        # 2^(e d / 2) = 2^half * sqrt(2)^odd
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        out = np.ldexp(total * np.where(odd != 0, math.sqrt(2.0), 1.0), half)
    if check:
        bad = np.isfinite(total) & ~np.isfinite(out)
        if np.any(bad):
            b = int(np.argmax(bad))
            with np.errstate(divide="ignore"):
                mag = (math.log10(abs(float(total[b]))) + (float(half[b]) + 0.5 * float(odd[b])) * math.log10(2.0))
            raise DomainError(
                f"the expectation of {list(factors)} overflows float64 at batch entry {b}: it is about "
                f"1e{mag:.0f} (kernel scale {2.0 ** float(e[b]):.3g}, homogeneous of degree {d}); rescale "
                "the inputs or the kernel")
    return out


# --------------------------------------------------------------- conditioning
def _condition(K: np.ndarray, mean: np.ndarray | None, S: list[int], c: np.ndarray):
    """Condition z ~ N(mean, K) on z_S = c.

    Returns density p (B,), rest slots R, conditional covariance (B,|R|,|R|),
    conditional mean (B,|R|) or None, regression coefficients beta (B,|R|,|S|)
    and a = K_SS^{-1}(c - mu_S) (B,|S|).
    """
    B, k = K.shape[0], K.shape[-1]
    R = [i for i in range(k) if i not in S]
    KSS = K[:, S][:, :, S]
    mu = np.zeros((B, k)) if mean is None else mean
    dc = c[None, :] - mu[:, S]
    # Degeneracy is judged on the correlation matrix of K[S,S], so slots of very different scales
    # (variance 1e-8 next to 1e8) are not mistaken for duplicated ones.
    dS = np.sqrt(np.clip(np.diagonal(KSS, axis1=1, axis2=2), 0.0, None))
    dSz = np.where(dS > 0.0, dS, 1.0)
    Rss = KSS / (dSz[:, :, None] * dSz[:, None, :])
    if len(S) == 1:                 # the smallest eigenvalue of the correlation: 1, 1 - |rho|
        eig = Rss[:, 0]
    elif len(S) == 2:
        eig = 0.5 * (Rss[:, 0, 0] + Rss[:, 1, 1])[:, None] - np.abs(Rss[:, 0, 1])[:, None]
    else:
        eig = np.linalg.eigvalsh(Rss)
    bad = (eig[:, 0] <= 1e-13) | np.any(dS == 0.0, axis=1)
    if np.any(bad):
        b = int(np.argmax(bad))
        raise DomainError(
            f"Dirac delta(s) on slot(s) {S} need a non-degenerate marginal covariance, but batch entry {b} "
            f"has a zero variance or a correlation matrix of K[S,S] with minimum eigenvalue "
            f"{float(eig[b, 0]):.3g} (duplicated samples): the product of deltas is not a function "
            "there; merge duplicated samples first")
    a = np.linalg.solve(KSS, dc[..., None])[..., 0]                         # (B,|S|)
    logdet = np.linalg.slogdet(KSS)[1]
    p = np.exp(-0.5 * np.sum(dc * a, axis=1) - 0.5 * logdet - 0.5 * len(S) * math.log(2 * math.pi))
    if not R:
        return p, R, None, None, None, a
    KRS = K[:, R][:, :, S]
    beta = np.swapaxes(np.linalg.solve(KSS, np.swapaxes(KRS, 1, 2)), 1, 2)  # (B,|R|,|S|)
    Kc = K[:, R][:, :, R] - beta @ np.swapaxes(KRS, 1, 2)
    Kc = 0.5 * (Kc + np.swapaxes(Kc, 1, 2))
    mc = mu[:, R] + np.einsum("brs,bs->br", beta, dc)
    if not np.any(mc):
        mc = None
    return p, R, Kc, mc, beta, a


def _const_factor(act: Any, kind: str, order: int, c: float) -> float:
    """Value of a regular factor at z = c, refusing discontinuities."""
    if kind == "z":
        return c ** order
    for kc, js in act.jumps(order):
        if kc == c and js[order] != 0:
            raise NotDerivedError(
                f"regular part of sigma^({order}) of {act!r} jumps by {js[order]} at z={c}, where a Dirac "
                "delta of the same sample sits: the product is not defined (conventions for Theta(0) "
                "differ); rewrite the integrand (e.g. integrate by parts) to avoid it")
    return float(act.numpy(order)(np.array(c)))


class _Expander:
    def __init__(self, act: Any, backend: _Backend, K: np.ndarray, mean: np.ndarray | None) -> None:
        self.act, self.backend, self.K, self.mean = act, backend, K, mean
        self.errs: list[np.ndarray] = []

    # order-0 deltas only
    def delta0(self, G: tuple, D: dict, w: Any = 1.0) -> np.ndarray:
        K, mean = self.K, self.mean
        if not D:
            return self._regular(G, K, mean, w)
        S = sorted(D)
        c = np.array([D[s] for s in S], dtype=np.float64)
        p, R, Kc, mc, _, _ = _condition(K, mean, S, c)
        const = 1.0
        rest = []
        for s, kind, o in G:
            if s in D:
                const *= _const_factor(self.act, kind, o, D[s])
            else:
                rest.append((s, kind, o))
        rest = [f for f in rest if not (f[1] == "z" and f[2] == 0)]
        if not rest:
            return p * const
        used = sorted({s for s, _, _ in rest})
        pos = {s: R.index(s) for s in used}
        remap = {s: i for i, s in enumerate(used)}
        idx = [pos[s] for s in used]
        subK = Kc[:, idx][:, :, idx]
        subm = None if mc is None else mc[:, idx]
        if subm is not None and not np.any(subm):
            subm = None
        val = self._regular(tuple((remap[s], kd, o) for s, kd, o in rest), subK, subm, w * p * const)
        return p * const * val

    def _regular(self, G: tuple, K: np.ndarray, mean: np.ndarray | None, w: Any = 1.0) -> np.ndarray:
        G = tuple(f for f in G if not (f[1] == "z" and f[2] == 0))
        if not G:
            return np.ones(K.shape[0])
        used = sorted({s for s, _, _ in G})
        if used != list(range(K.shape[-1])):
            remap = {s: i for i, s in enumerate(used)}
            K = K[:, used][:, :, used]
            mean = None if mean is None else mean[:, used]
            G = tuple((remap[s], kd, o) for s, kd, o in G)
        v, e = self.backend(G, K, mean)
        self.errs.append(np.abs(w) * e)
        return v

    def delta1(self, G: tuple, D0: dict, s1: int, c1: float, w: Any = 1.0) -> np.ndarray:
        """E[delta'(z_s1 - c1) prod_{D0} delta(.) G] = p [a_s1 h - dh/dc1]."""
        act = self.act
        D = dict(D0)
        D[s1] = c1
        S = sorted(D)
        c = np.array([D[s] for s in S], dtype=np.float64)
        _, R, _, _, beta, a = _condition(self.K, self.mean, S, c)
        i1 = S.index(s1)
        out = a[:, i1] * self.delta0(G, D, w * a[:, i1])
        for i, (s, kind, o) in enumerate(G):
            others = G[:i] + G[i + 1:]
            if kind == "z":
                if o == 0:
                    continue
                dG = others + ((s, "z", o - 1),)
                coeff_reg = float(o)
            else:
                dG = others + ((s, "sigma", o + 1),)
                coeff_reg = 1.0
            if s == s1:
                if kind == "sigma":
                    for kc, js in act.jumps(o + 1):
                        if kc == c1 and (js[o] != 0 or js[o + 1] != 0):
                            raise NotDerivedError(
                                f"delta'(z-{c1}) multiplies sigma^({o}) of {act!r}, which is not smooth at "
                                f"z={c1}: the product is not a well-defined distribution")
                out = out - coeff_reg * self.delta0(dG, D, w * coeff_reg)
            elif s in D0:
                continue
            else:
                b = beta[:, R.index(s), i1]
                if not np.any(b):
                    continue
                out = out - b * coeff_reg * self.delta0(dG, D, w * b * coeff_reg)
                if kind == "sigma":
                    for kc, js in act.jumps(o):
                        if js[o] != 0:
                            D2 = dict(D)
                            D2[s] = kc
                            out = out - b * float(js[o]) * self.delta0(others, D2, w * b * float(js[o]))
        return out


def _expand(factors: tuple, act: Any) -> list[tuple[float, tuple, dict]]:
    """Expand into [(coeff, regular_factors, {slot: (c, delta_order)})]."""
    terms: list[tuple[float, tuple, dict]] = [(1.0, (), {})]
    for f in factors:
        s, kind, a = f
        sing = () if kind == "z" or act is None or a == 0 else act.singular_part(a)
        new = []
        for coef, regs, deltas in terms:
            new.append((coef, regs + (f,), deltas))
            for c, cf, kd in sing:
                if s in deltas:
                    raise NotDerivedError(
                        f"two Dirac deltas on the same sample (slot {s}) arise from {list(factors)} with "
                        f"{act!r}: the product delta(z-c) delta(z-c') is not a distribution")
                d2 = dict(deltas)
                d2[s] = (float(c), int(kd))
                new.append((coef * float(cf), regs, d2))
        terms = new
    return terms


@public
def gaussian_expectation(factors: Sequence[tuple], K: Any, activation: Any = None, *,
                         method: str = "auto", rtol: float = 1e-10, mean: Any = None, seed: Any = 0,
                         n_samples: int | None = None, dps: int = 30, return_error: bool = False) -> Any:
    """Gaussian expectation of a product of activation factors, batched over kernels.

    Parameters
    ----------
    factors : sequence of ``(slot, kind, order)`` tuples
        ``(s, 'sigma', a)`` is sigma^(a)(z_s) (distributional derivative: Dirac
        parts of kinked activations included); ``(s, 'z', p)`` is z_s**p.
        Slots must be exactly ``0..k-1``.
    K : array_like, shape (..., k, k)
        Batch of covariance matrices (PSD; singular allowed).
    activation : Activation or str
        The activation (name or instance); may be None if no 'sigma' factor.
    method : {'auto', 'closed', 'quadrature', 'mpmath', 'mc'}
        'auto': closed form when one applies (zero mean), else quadrature.
        'closed': like 'auto' but warns ClosedFormUnavailableWarning on fallback.
    rtol : float
        Relative tolerance for quadrature.
    mean : array_like, shape (..., k), optional
        Mean of z (closed forms need zero mean).
    seed : int, SeedSequence, numpy.random.Generator or None
        Monte-Carlo randomness (default seed 0, so Monte-Carlo atoms are reproducible; ``None``
        draws fresh entropy).
    n_samples : int, optional
        Monte-Carlo sample count (default 200_000).
    dps : int
        Decimal digits for method='mpmath'.
    return_error : bool
        Also return an error estimate (quadrature: convergence estimate; mc:
        standard error; mpmath: self-consistency; closed: 0).

    Returns
    -------
    value : ndarray, shape (...)
    error : ndarray, shape (...)
        Only if ``return_error``.

    Raises
    ------
    DomainError
        Bad kernel (non-PSD, non-symmetric, non-finite, wrong size), bad factors.
    UnknownActivationError
        Unknown activation name.
    NotDerivedError
        Distributional products the engine does not define (two deltas on one
        sample, delta'' or higher, delta' times a kinked factor at the kink).
    ConvergenceError
        Quadrature could not reach rtol.

    Notes
    -----
    ``delta(z_s - c)`` terms: ``E[delta(z_s-c) G] = phi_{K_ss}(c - mu_s) E[G | z_s = c]``.
    ``delta'(z_s - c)`` terms: ``-d/dc`` of that, i.e.
    ``p(c) [a h(c) - E(d_s G + sum_r beta_r d_r G | z_s = c)]`` with
    ``a = (c - mu_s)/K_ss`` and ``beta_r = K_rs/K_ss`` (Gaussian integration by parts).

    Examples
    --------
    >>> import numpy as np
    >>> round(float(gaussian_expectation([(0, 'sigma', 0), (0, 'sigma', 0)], [[1.0]], 'relu')), 12)
    0.5
    >>> K = np.array([[1.0, 0.5], [0.5, 1.0]])
    >>> round(float(gaussian_expectation([(0, 'sigma', 2), (1, 'sigma', 0)], K, 'relu')), 12)
    0.137832223855
    """
    if method not in _METHODS:
        raise DomainError(f"unknown method {method!r}; choose one of {_METHODS}")
    if not (isinstance(rtol, (int, float)) and 0 < rtol < 1):
        raise DomainError(f"rtol must be in (0, 1), got {rtol!r}")
    factors, k = validate_factors(factors)
    needs_act = any(kind == "sigma" for _, kind, _ in factors)
    act = get_activation(activation) if activation is not None else None
    if needs_act and act is None:
        raise DomainError("factors contain 'sigma' but no activation was given")
    K = validate_covariance(K, k)
    batch = K.shape[:-2]
    Kf = K.reshape((-1, k, k))
    m = validate_mean(mean, batch, k)
    mf = None if m is None else m.reshape((-1, k))
    rng = None
    if method == "mc":
        rng = _v.rng(seed)
    backend = _Backend(method, act, float(rtol), rng, n_samples, dps)
    Kf, rescale = _homogeneous_rescale(factors, Kf, mf, act, method)
    ex = _Expander(act, backend, Kf, mf)
    total = np.zeros(Kf.shape[0])
    for coef, regs, deltas in _expand(factors, act):
        orders = [kd for _, kd in deltas.values()]
        if any(o >= 2 for o in orders) or sum(o == 1 for o in orders) >= 2:
            raise NotDerivedError(
                f"{list(factors)} with {act!r} produces delta^(n) terms of total derivative order > 1 "
                f"({deltas}); only delta and a single delta' are reduced exactly (delta'' would need "
                "second derivatives of conditional expectations). Integrate by parts to lower the order")
        d0 = {s: c for s, (c, kd) in deltas.items() if kd == 0}
        d1 = [(s, c) for s, (c, kd) in deltas.items() if kd == 1]
        if d1:
            total = total + coef * ex.delta1(regs, d0, d1[0][0], d1[0][1], coef)
        else:
            total = total + coef * ex.delta0(regs, d0, coef)
    if backend.missed:
        warnings.warn(f"no closed form for {act!r} with factors {list(backend.missed[0])}"
                      f"{' (and %d more terms)' % (len(backend.missed) - 1) if len(backend.missed) > 1 else ''}"
                      "; used quadrature", ClosedFormUnavailableWarning, stacklevel=2)
    if rescale is not None:
        total = _scale_back(total, rescale, factors, act)
        ex.errs = [np.abs(_scale_back(np.broadcast_to(e, total.shape), rescale, factors, act, check=False))
                   for e in ex.errs]
    value = total.reshape(batch)
    if not return_error:
        return value
    errs = [np.broadcast_to(e, total.shape) for e in ex.errs] or [np.zeros_like(total)]
    if method == "mc":
        err = np.sqrt(np.sum([e ** 2 for e in errs], axis=0))
    else:
        err = np.sum(errs, axis=0)
    return value, err.reshape(batch)
