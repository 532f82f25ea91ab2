r"""Entropy and mutual information of preactivations measured on ensembles of finite networks.

For one input :math:`x` and a plain MLP, the :math:`n_\ell` preactivations of layer :math:`\ell`
are, given the layer below, i.i.d. Gaussians of variance the stochastic metric
:math:`\widehat G^{(\ell)}=C_b+\frac{C_W}{n_{\ell-1}}\sum_j\sigma(z^{(\ell-1)}_j)^2` (PDLT §4.3,
eq. (4.70)).  The joint density of any :math:`m` of them is therefore the exact scale mixture

.. math::
    p(z_1,\dots,z_m)=\mathbb E_{\widehat G}\Big[(2\pi\widehat G)^{-m/2}
    e^{-\rho/(2\widehat G)}\Big],\qquad \rho=\textstyle\sum_{i\le m}z_i^2,

so its differential entropy :math:`\mathcal S_m=-\mathbb E[\log p]` is a one-dimensional integral
over :math:`\rho` once the distribution of :math:`\widehat G` is known.  The functions here draw
:math:`\widehat G^{(\ell)}` from literal random networks (:func:`simulate_ensemble`), use the
empirical mixture as :math:`p` (an unbiased density estimate), integrate in :math:`\log\rho` with
the trapezoid rule (spectrally accurate for this smooth, exponentially decaying integrand) and
give delete-one-group jackknife errors.  Nothing from effth's theory enters: these are the
measured side of PDLT app. A, to be compared with
:func:`effth.pdlt.information.entropy_expansion` and
:func:`effth.pdlt.information.mutual_information_expansion` at
:math:`\epsilon_V=V^{(\ell)}/(n_{\ell-1}G^{(\ell)2})` (eqs. (A.52)–(A.53), (A.66)–(A.67)).

Residual networks are refused: their neurons have the neuron-specific conditional means
:math:`\gamma z^{(\ell-1)}_i`, so the marginal is not a scale mixture.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import special, stats

from effth._signature import public
from effth._validate import input_matrix, integer, real_array
from effth.errors import ConvergenceError, DomainError

from ._jackknife import jackknife_error

__all__ = ["InformationEstimate", "mixture_entropy", "sampled_entropy",
           "sampled_mutual_information"]

_TAIL = 1e-15          # chi^2_m quantiles that bound the rho grid (mass outside < 2e-15)
_GRID = 401            # trapezoid nodes in log rho (doubled until the mass is 1 to 1e-11)
_trapezoid = getattr(np, "trapezoid", None) or np.trapz


@dataclass(frozen=True)
class InformationEstimate:
    r"""An entropy or mutual information measured on an ensemble (nats).

    Attributes
    ----------
    value, stderr : float
        The estimate and its delete-one-group jackknife standard error.  For an entropy the value
        is the *deviation from the Gaussian* :math:`\mathcal S_m-\frac m2\log(2\pi e\,\bar G)`
        (the quantity of PDLT (A.52)); for a mutual information it is
        :math:`\mathcal S_{m_1}+\mathcal S_{m_2}-\mathcal S_{m_1+m_2}` (A.53).
    epsilon, epsilon_stderr : float
        The measured expansion parameter :math:`\epsilon_V=\mathrm{Var}[\widehat G]/\bar G^2`
        (:math:`V/(nG^2)` of app. A) with its jackknife error.
    G : float
        :math:`\bar G`, the mean of the stochastic metric.
    neurons : tuple of int
        ``(m,)`` or ``(m1, m2)``.
    layer, networks : int
        Book layer number and ensemble size.
    """

    value: float
    stderr: float
    epsilon: float
    epsilon_stderr: float
    G: float
    neurons: tuple
    layer: int
    networks: int
    loo_value: np.ndarray = field(default=None, repr=False, compare=False)
    loo_epsilon: np.ndarray = field(default=None, repr=False, compare=False)

    def residual(self, theory) -> tuple[float, float]:
        r"""``value - theory(epsilon)`` and its jackknife standard error.

        ``theory`` is a function of :math:`\epsilon_V` (e.g. ``sympy.lambdify`` of
        :func:`effth.pdlt.information.mutual_information_expansion`).  Evaluating it at the
        *measured* :math:`\epsilon_V` of the same networks, group by group, cancels the
        fluctuation of :math:`\epsilon_V` that dominates ``stderr``: the error of the residual is
        that of the theory's functional form alone.
        """
        if not callable(theory):
            raise DomainError("theory must be a function of epsilon_V")
        return self.statistic(lambda value, eps: value - float(theory(eps)))

    def statistic(self, fn) -> tuple[float, float]:
        r"""``fn(value, epsilon)`` and its delete-one-group jackknife error, ``fn`` evaluated on
        every group's estimates — e.g. ``lambda I, e: (I - e**2 / 8) / e**3``, the measured
        :math:`\epsilon_V^3` coefficient of the mutual information."""
        if not callable(fn):
            raise DomainError("fn must be a function of (value, epsilon)")
        full = float(fn(self.value, self.epsilon))
        loo = np.array([float(fn(v, e)) for v, e in zip(self.loo_value, self.loo_epsilon)])
        return full, float(jackknife_error(loo[:, None])[0])

    def __repr__(self) -> str:
        what = "S - S_gauss" if len(self.neurons) == 1 else "I"
        return (f"InformationEstimate({what} = {self.value:.6g} ± {self.stderr:.2g} nats, "
                f"neurons={self.neurons}, layer={self.layer}, epsilon_V={self.epsilon:.4g} "
                f"± {self.epsilon_stderr:.2g}, networks={self.networks})")


def _grid(G: np.ndarray, m: int, nodes: int) -> np.ndarray:
    lo = np.log(G.min() * stats.chi2.ppf(_TAIL, m))
    hi = np.log(G.max() * stats.chi2.isf(_TAIL, m))
    return np.linspace(lo, hi, nodes)


def _log_mixture_sums(G: np.ndarray, bounds: np.ndarray, m: int, t: np.ndarray):
    r"""Per group k (the contiguous samples ``bounds[k]:bounds[k+1]``) and node
    :math:`t=\log\rho`: :math:`\sum_{j\in k}(\widehat G_j/G_*)^{-m/2}
    e^{-\rho/(2\widehat G_j)+\rho/(2G_*)}` with :math:`G_*=\max\widehat G` (every exponent is
    bounded above by a few tens, so nothing overflows)."""
    rho = np.exp(t)
    Gs = G.max()
    a = -0.5 * m * np.log(G / Gs)
    b = 0.5 / G - 0.5 / Gs
    K = bounds.size - 1
    out = np.zeros((K, t.size))
    step = max(1, int(2 ** 20 // t.size))
    for k in range(K):
        for s in range(int(bounds[k]), int(bounds[k + 1]), step):
            e = min(s + step, int(bounds[k + 1]))
            out[k] += np.exp(a[s:e, None] - b[s:e, None] * rho[None, :]).sum(axis=0)
    return out, Gs


def _entropy_from_sums(sums: np.ndarray, count: float, Gs: float, m: int, t: np.ndarray):
    r""":math:`\mathcal S_m` of the mixture whose summed kernel is ``sums`` over ``count`` samples.

    With :math:`g(\rho)=p(z)`, the density of :math:`\rho` is
    :math:`f=\frac{\pi^{m/2}}{\Gamma(m/2)}\rho^{m/2-1}g` and :math:`\mathcal S=-\int f\log g\,d\rho`,
    integrated in :math:`t=\log\rho` (:math:`d\rho=\rho\,dt`).
    """
    rho = np.exp(t)
    with np.errstate(divide="ignore"):
        log_g = (np.log(sums / count) - 0.5 * m * np.log(2 * np.pi * Gs) - rho / (2 * Gs))
    log_w = 0.5 * m * np.log(np.pi) - special.gammaln(0.5 * m) + 0.5 * m * t
    f_rho = np.exp(log_w + log_g)                       # f(rho) * rho
    integrand = np.where(f_rho > 0, -f_rho * log_g, 0.0)
    return float(_trapezoid(integrand, t)), float(_trapezoid(f_rho, t))


def _check_samples(G_hat: Any) -> np.ndarray:
    G = real_array(G_hat, "G_hat").ravel()
    if G.size < 4:
        raise DomainError("G_hat must be an array of at least 4 samples of the stochastic metric")
    if not np.all(np.isfinite(G)):
        raise DomainError("G_hat must hold finite samples of the stochastic metric")
    if np.any(G <= 0):
        raise DomainError(f"{int(np.sum(G <= 0))} of the {G.size} samples of the stochastic metric "
                          "are <= 0: the preactivations then have an atom at z = 0 (for ReLU "
                          "with C_b = 0, a network whose previous layer is all inactive), and "
                          "their differential entropy is -inf; use wider layers or C_b > 0")
    return G


def _groups(size: int) -> tuple[int, np.ndarray, np.ndarray]:
    """32 (or size // 2) contiguous groups: their count, per-sample labels and bounds."""
    K = min(32, size // 2)
    labels = (np.arange(size) * K) // size
    return K, labels, np.searchsorted(labels, np.arange(K + 1))


def _estimate(G: np.ndarray, neurons: tuple, layer: int, networks: int) -> InformationEstimate:
    K, groups, bounds = _groups(G.size)
    counts = np.bincount(groups, minlength=K).astype(float)
    n = float(G.size)
    # the entropy combination sum_m c_m S_m (each distinct m evaluated once: I(1;1) = 2 S_1 - S_2)
    combo: dict = {}
    for m, c in ((neurons[0], 1.0),) if len(neurons) == 1 else (
            (neurons[0], 1.0), (neurons[1], 1.0), (neurons[0] + neurons[1], -1.0)):
        combo[m] = combo.get(m, 0.0) + c
    full, loo = 0.0, np.zeros(K)
    for m, sign in combo.items():
        for nodes in (_GRID, 2 * _GRID, 4 * _GRID, 8 * _GRID):
            t = _grid(G, m, nodes)
            sums, Gs = _log_mixture_sums(G, bounds, m, t)
            total = sums.sum(axis=0)
            S, mass = _entropy_from_sums(total, n, Gs, m, t)
            if abs(mass - 1.0) < 1e-11:
                break
        else:
            raise ConvergenceError(f"the rho quadrature of the m = {m} mixture entropy did not "
                                   f"reach unit mass (off by {abs(mass - 1):.2g} at {nodes} nodes); "
                                   "the samples of G_hat spread over too many decades")
        full += sign * S
        loo += sign * np.array([_entropy_from_sums(total - sums[k], n - counts[k], Gs, m, t)[0]
                                for k in range(K)])
    sum_k = np.bincount(groups, weights=G, minlength=K)
    if len(neurons) == 1:                        # deviation from the Gaussian of the same G
        m = neurons[0]
        ref = lambda mean: 0.5 * m * np.log(2 * np.pi * np.e * mean)  # noqa: E731
        full -= ref(G.mean())
        loo -= ref((G.sum() - sum_k) / (n - counts))
    sq_k = np.bincount(groups, weights=G * G, minlength=K)

    def eps(s, q, c):
        mean = s / c
        return (q / c - mean ** 2) * c / (c - 1) / mean ** 2

    e_full = eps(G.sum(), (G * G).sum(), n)
    e_loo = eps(G.sum() - sum_k, (G * G).sum() - sq_k, n - counts)
    return InformationEstimate(float(full), float(jackknife_error(loo[:, None])[0]), float(e_full),
                               float(jackknife_error(e_loo[:, None])[0]), float(G.mean()),
                               tuple(int(v) for v in neurons), int(layer), int(networks),
                               loo, e_loo)


def _neurons(m: Any, name: str) -> int:
    return integer(m, name, minimum=1)


@public
def mixture_entropy(G_hat: Any, m: int = 1) -> InformationEstimate:
    r"""Entropy of :math:`m` preactivations whose variance is drawn from the samples ``G_hat``.

    The density is the empirical scale mixture
    :math:`p(z)=\frac1N\sum_j(2\pi\widehat G_j)^{-m/2}e^{-|z|^2/(2\widehat G_j)}`; the returned
    ``value`` is :math:`\mathcal S_m-\frac m2\log(2\pi e\bar G)` (nats, :math:`\le 0`), with a
    jackknife error over 32 groups of samples.

    Parameters
    ----------
    G_hat : array_like
        Samples (>= 4) of the stochastic metric :math:`\widehat G` of one input, positive.
    m : int
        Number of neurons (>= 1).

    Examples
    --------
    >>> r = mixture_entropy(np.full(8, 2.0), m=3)     # no fluctuation: exactly Gaussian
    >>> abs(r.value) < 1e-12
    True
    """
    G = _check_samples(G_hat)
    return _estimate(G, (_neurons(m, "m"),), 0, G.size)


def _metric_samples(net: Any, x: Any, layer: Any, networks: Any, seed: Any, batch: Any,
                    progress: Any, need: int) -> tuple[np.ndarray, int]:
    from .ensemble import simulate_ensemble

    if getattr(net, "residual", False):
        raise DomainError("sampled entropies need a plain MLP: the preactivations of a residual "
                          "MLP have neuron-specific conditional means gamma z^(l-1)_i, so their "
                          "marginal is not a scale mixture (PDLT app. B)")
    X = input_matrix(x, "x")
    if X.shape[0] != 1:
        raise DomainError(f"x must be one input (app. A treats a single input), got {X.shape[0]}")
    depth = integer(getattr(net, "depth", None), "net.depth", minimum=1)
    if depth < 2:
        raise DomainError("a network of depth 1 has no fluctuating metric: sampled entropies "
                          "need depth >= 2")
    layer = max(depth - 1, 2) if layer is None else integer(layer, "layer", minimum=2)
    if layer > depth:
        raise DomainError(f"layer={layer} exceeds the network's depth {depth}")
    width = net.hidden_widths[layer - 1] if layer < depth else net.n_out
    if need > width:
        raise DomainError(f"{need} neurons asked for but layer {layer} has width {width}")
    networks = integer(networks, "networks", minimum=64)
    ens = simulate_ensemble(net, X, networks=networks, seed=seed, batch=batch,
                            method="conditional", layers=[layer], keep_samples=True,
                            progress=progress)
    return _check_samples(np.ascontiguousarray(ens.G_hat_samples[layer][:, 0, 0])), layer


@public
def sampled_entropy(net: Any, x: Any, *, m: int = 1, layer: int | None = None,
                    networks: int = 20000, seed: Any = 0, batch: int | None = None,
                    progress: bool | None = None) -> InformationEstimate:
    r"""Entropy of :math:`m` preactivations of layer ``layer`` measured on random networks.

    Draws ``networks`` random networks (:func:`simulate_ensemble` with its exactly equivalent
    ``method="conditional"`` sampling, up to ``layer``), reads the stochastic metric
    :math:`\widehat G^{(\ell)}` of the input, and returns
    :math:`\mathcal S_m-\frac m2\log(2\pi e\,\bar G)` (nats) of the exact scale mixture (module
    docstring) with its jackknife error — the measured counterpart of PDLT (A.52), (A.66):
    :math:`-\frac{m(m+2)}{16}\epsilon_V^2+O(\epsilon_V^3)`.

    Parameters
    ----------
    net : MLP
        A plain (non-residual) MLP with numeric widths.
    x : array_like (1, n_0) or (n_0,)
        One input.
    m : int
        Neurons of the layer (1 .. its width).
    layer : int, optional
        Book layer (2 .. depth; layer 1 has no fluctuation), default the last hidden layer
        (layer 2 for depth 2).
    networks : int
        Ensemble size (>= 64).
    seed, batch, progress
        As in :func:`simulate_ensemble`.
    """
    m = _neurons(m, "m")
    G, layer = _metric_samples(net, x, layer, networks, seed, batch, progress, m)
    return _estimate(G, (m,), layer, G.size)


@public
def sampled_mutual_information(net: Any, x: Any, *, m1: int = 1, m2: int = 1,
                               layer: int | None = None, networks: int = 20000, seed: Any = 0,
                               batch: int | None = None,
                               progress: bool | None = None) -> InformationEstimate:
    r"""Mutual information between two disjoint groups of ``m1`` and ``m2`` preactivations of
    one layer, measured on random networks (nats, with a jackknife error).

    :math:`\mathcal I=\mathcal S_{m_1}+\mathcal S_{m_2}-\mathcal S_{m_1+m_2}` of the exact scale
    mixture (module docstring); the measured counterpart of PDLT (A.53), (A.67):
    :math:`\frac{m_1m_2}{8}\epsilon_V^2+O(\epsilon_V^3)`.  Arguments as in
    :func:`sampled_entropy`; ``m1 + m2`` must not exceed the layer's width.
    """
    m1, m2 = _neurons(m1, "m1"), _neurons(m2, "m2")
    G, layer = _metric_samples(net, x, layer, networks, seed, batch, progress, m1 + m2)
    return _estimate(G, (m1, m2), layer, G.size)
