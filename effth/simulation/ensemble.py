r"""Monte-Carlo ensembles of finite-width MLPs at initialization: the ground truth.

:func:`simulate_ensemble` draws ``networks`` independent networks of an :class:`~effth.arch.MLP`,
evaluates them on ``N_D`` inputs and returns, for every requested layer
:math:`\ell = 1..L`, estimates of

* the mean metric :math:`G^{(\ell)}_{\alpha\beta} = \mathbb E[z_{i;\alpha} z_{i;\beta}]`, both
  directly from the preactivations (``G``) and Rao–Blackwellized as
  :math:`\mathbb E[\widehat G^{(\ell)}]` (``G_rb``);
* the four-point vertex defined exactly by PDLT (4.76),
  :math:`V^{(\ell)} = n_{\ell-1}\,\mathrm{Cov}(\widehat G^{(\ell)}, \widehat G^{(\ell)})`;
* the connected four-point function of the preactivations, same neuron (``kappa4_same``) and two
  distinct neurons (``kappa4_cross``), an independent cross-check of ``V`` through (4.77):
  ``kappa4_cross`` :math:`\to V_{(\alpha_1\alpha_2)(\alpha_3\alpha_4)}/n_{\ell-1}` and
  ``kappa4_same`` :math:`\to (V_{(12)(34)} + V_{(13)(24)} + V_{(14)(23)})/n_{\ell-1}`;
* the covariance across networks of the neuron-averaged metric
  :math:`\mathcal O_{\alpha\beta} = n_\ell^{-1}\sum_i z_{i;\alpha} z_{i;\beta}` (``O_cov``),

each with a standard error from the independence of the networks (delete-one-group jackknife).

This module is NumPy only and never imports effth's theory, algebra, numerics or codegen: it is
what the theory is checked against.  See ``docs/simulation.md``.

Examples
--------
>>> import numpy as np
>>> from effth.arch import MLP
>>> net = MLP("relu", depth=2, widths=8, c_w=2.0, c_b=0.0)
>>> st = simulate_ensemble(net, np.ones((1, 1)), networks=2000, seed=1)
>>> st.value("G_rb", layer=2).shape, st.value("V", layer=2).shape
((1, 1), (1, 1, 1, 1))
"""

from __future__ import annotations

from effth._signature import public

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Iterable, Mapping

import numpy as np

from .._progress import progress_bar
from .._threads import blas_threads, worker_threads
from effth.arch import MLP
from ..errors import DomainError
from .._display import html_table, short
from .._results import WeightLayers
from .._validate import check_memory, check_work
from ._inputs import as_generator, check_ensemble
from ._jackknife import group_units
from ._estimators import layer_estimates
from ._kernels import (LayerSums, Plan, _factor, chunk_bytes, chunk_elements, device_chunk,
                       draw_shapes, finite_checks, pair_index, run_chunk)
from ._backend import MAX_ELEMENTS, resolve as _resolve_backend

__all__ = ["EnsembleStatistics", "simulate_ensemble", "ESTIMATORS", "STAT_NAMES"]

#: Target number of float64 elements in the largest per-chunk temporary (~32 MB).
_CHUNK_ELEMENTS = 1 << 22

#: Description of the estimator behind every statistic field of :class:`EnsembleStatistics`.
ESTIMATORS: Mapping[str, str] = MappingProxyType({
    "G": "mean over networks and neurons of z_{i;a} z_{i;b} (unbiased for G^(l))",
    "G_rb": "mean over networks of the stochastic metric G_hat^(l) computed from layer l-1 "
            "(Rao-Blackwellized, unbiased, lower variance; exact constant for l = 1)",
    "V": "n_{l-1} times the unbiased sample covariance over networks of G_hat^(l) (PDLT 4.76); "
         "exactly 0 for l = 1",
    "kappa4_same": "same-neuron connected 4-pt E[z_a z_b z_c z_d] - 3 pairings of G G: moment "
                   "averaged over networks and neurons minus an unbiased estimate of G (x) G "
                   "(G_rb products corrected by Cov(G_hat)/networks); unbiased",
    "kappa4_cross": "distinct-neuron connected 4-pt E[z_{i;a} z_{i;b} z_{j;c} z_{j;d}] - G_ab G_cd "
                    "(i != j), averaged over all ordered neuron pairs and networks, minus the same "
                    "unbiased G (x) G; unbiased; NaN if n_l < 2",
    "O_cov": "unbiased sample covariance over networks of O_ab = (1/n_l) sum_i z_{i;a} z_{i;b}",
    "kappa3_same": "same-neuron third moment E[z_a z_b z_c] (= the connected 3-pt function, the "
                   "mean being 0), averaged over networks and neurons; zero in expectation for a "
                   "plain MLP, O(1/n) behind a skip connection with a non-odd activation",
    "kappa3_cross": "distinct-neuron third moment E[z_{i;a} z_{i;b} z_{j;c}] (i != j), averaged "
                    "over ordered neuron pairs and networks; -> T_(ab)c / n_{l-1} for a residual "
                    "MLP; NaN if n_l < 2",
})


#: Names read by :meth:`EnsembleStatistics.value` and :meth:`EnsembleStatistics.stderr`.
STAT_NAMES: tuple[str, ...] = ("G", "G_rb", "V", "kappa4_same", "kappa4_cross", "O_cov",
                               "kappa3_same", "kappa3_cross")


def _frozen(d: dict | None) -> Mapping | None:
    return None if d is None else MappingProxyType(d)


@public
@dataclass(frozen=True)
class EnsembleStatistics(WeightLayers):
    r"""Statistics of an ensemble of random networks, per layer.

    Read it like every effth result: :attr:`layers` holds the book layer numbers,
    ``st.value(name, layer=l)`` the estimate and ``st.stderr(name, layer=l)`` its standard error,
    with ``name`` in :data:`STAT_NAMES` (``"G"``, ``"G_rb"``, ``"V"``, ``"kappa4_same"``,
    ``"kappa4_cross"``, ``"O_cov"``).  The same arrays are the statistic fields, read-only
    mappings ``layer -> ndarray`` over :attr:`layers`, each with an ``*_err`` twin holding the
    standard errors (same shapes; NaN if ``networks < 4``).  ``N = N_D``.  The estimator behind each
    field is described in :data:`ESTIMATORS` (also :attr:`estimators`).

    Examples
    --------
    >>> import numpy as np
    >>> from effth.arch import MLP
    >>> st = simulate_ensemble(MLP("tanh", depth=2, widths=4), np.ones((1, 2)), networks=8, seed=0)
    >>> st
    EnsembleStatistics(layers=(1, 2), widths=(2, 4, 1), networks=8, inputs=1, method='weights')
    >>> st.value("V", layer=2).shape, st.stderr("G", layer=2).shape
    ((1, 1, 1, 1), (1, 1))

    Attributes
    ----------
    layers : tuple of int
        Layers reported, increasing, in ``1..L``.
    widths : tuple of int
        ``(n_0, n_1, ..., n_L)``.
    networks : int
        Number of independent networks.
    method : str
        ``"weights"`` or ``"conditional"``.
    n_groups : int
        Number of disjoint groups of networks used by the jackknife.
    G, G_err : mapping int -> ndarray (N, N)
        Mean metric :math:`G^{(\ell)}_{\alpha\beta}` estimated from the preactivations.
    G_rb, G_rb_err : mapping int -> ndarray (N, N)
        The same, Rao–Blackwellized: :math:`\mathbb E[\widehat G^{(\ell)}]`.
    V, V_err : mapping int -> ndarray (N, N, N, N)
        Four-point vertex ``V[l][a1, a2, a3, a4]`` :math:`= V^{(\ell)}_{(\alpha_1\alpha_2)(\alpha_3\alpha_4)}`
        :math:`= n_{\ell-1}\mathrm{Cov}(\widehat G_{\alpha_1\alpha_2}, \widehat G_{\alpha_3\alpha_4})`;
        exactly symmetric under the 8 pair symmetries.
    kappa4_same, kappa4_same_err : mapping int -> ndarray (N, N, N, N)
        Same-neuron connected four-point function (fully symmetric).
    kappa4_cross, kappa4_cross_err : mapping int -> ndarray (N, N, N, N)
        Distinct-neuron connected four-point function, ``[a1, a2, a3, a4]`` pairs neuron ``i``
        with ``(a1, a2)`` and ``j != i`` with ``(a3, a4)``; NaN for a layer of width 1.
    O_cov, O_cov_err : mapping int -> ndarray (N, N, N, N)
        Covariance across networks of :math:`\mathcal O_{\alpha\beta}=n_\ell^{-1}\sum_i z_{i;\alpha}z_{i;\beta}`.
    kappa3_same, kappa3_same_err, kappa3_cross, kappa3_cross_err : mapping int -> ndarray (N, N, N)
        Third moments (connected: the mean vanishes), same neuron and ``[a, b, c]`` with
        ``(a, b)`` on neuron ``i`` and ``c`` on ``j != i``; for a residual MLP (PDLT (B.4))
        ``kappa3_cross`` :math:`\to T^{(\ell)}_{(ab)c}/n_{\ell-1}`.
    samples : mapping int -> ndarray (networks, N, n_l) or None
        Raw preactivations ``z[m, alpha, i]`` if ``keep_samples``.
    G_hat_samples : mapping int -> ndarray (networks, N, N) or None
        Stochastic metrics of every network if ``keep_samples``.
    estimators : mapping str -> str
        :data:`ESTIMATORS`.
    """

    layers: tuple[int, ...]
    widths: tuple[int, ...]
    networks: int
    method: str
    n_groups: int
    G: Mapping[int, np.ndarray]
    G_err: Mapping[int, np.ndarray]
    G_rb: Mapping[int, np.ndarray]
    G_rb_err: Mapping[int, np.ndarray]
    V: Mapping[int, np.ndarray]
    V_err: Mapping[int, np.ndarray]
    kappa4_same: Mapping[int, np.ndarray]
    kappa4_same_err: Mapping[int, np.ndarray]
    kappa4_cross: Mapping[int, np.ndarray]
    kappa4_cross_err: Mapping[int, np.ndarray]
    O_cov: Mapping[int, np.ndarray]
    O_cov_err: Mapping[int, np.ndarray]
    kappa3_same: Mapping[int, np.ndarray] = field(default_factory=dict)
    kappa3_same_err: Mapping[int, np.ndarray] = field(default_factory=dict)
    kappa3_cross: Mapping[int, np.ndarray] = field(default_factory=dict)
    kappa3_cross_err: Mapping[int, np.ndarray] = field(default_factory=dict)
    samples: Mapping[int, np.ndarray] | None = None
    G_hat_samples: Mapping[int, np.ndarray] | None = None
    estimators: Mapping[str, str] = field(default_factory=lambda: ESTIMATORS, repr=False)

    def V_from_cross(self, layer: int) -> tuple[np.ndarray, np.ndarray]:
        r"""Vertex from the distinct-neuron cumulant, :math:`n_{\ell-1}\,\kappa_4^{\rm cross}`.

        Returns
        -------
        V, err : ndarray (N, N, N, N)
            Independent estimate of :math:`V^{(\ell)}` (exact relation PDLT (4.77)) and its error.
        """
        layer = self._layer(layer)
        n_prev = self.widths[layer - 1]
        return n_prev * self.kappa4_cross[layer], n_prev * self.kappa4_cross_err[layer]

    # ------------------------------------------------------------ one protocol for all results
    @property
    def depth(self) -> int:
        """Number of weight layers :math:`L` of the simulated network."""
        return len(self.widths) - 1


    @property
    def n_inputs(self) -> int:
        """Number of inputs :math:`N`."""
        return int(self.G[self.layers[0]].shape[0])

    def _layer(self, layer: Any) -> int:
        if layer is None:
            if len(self.layers) == 1:
                return self.layers[0]
            raise DomainError(f"layer=None is ambiguous: this result holds layers {self.layers}; "
                              "pass layer=<book layer number>")
        if isinstance(layer, (bool, np.bool_)) or not isinstance(layer, (int, np.integer)) \
                or int(layer) not in self.layers:
            raise DomainError(f"layer={layer!r} is not held: this result holds layers {self.layers}")
        return int(layer)

    def _field(self, name: Any) -> str:
        if not isinstance(name, str) or name not in STAT_NAMES:
            raise DomainError(f"unknown statistic name={name!r}; available: {', '.join(STAT_NAMES)}")
        return name

    def value(self, name: str, layer: int | None = None) -> np.ndarray:
        r"""Ensemble estimate of statistic ``name`` at book layer ``layer``.

        Parameters
        ----------
        name : str
            ``"G"`` (mean metric :math:`\mathbb E[\widehat G]` estimated from the preactivations,
            ``(N, N)``), ``"G_rb"`` (its Rao–Blackwellized twin), ``"V"`` (four-point vertex,
            ``(N, N, N, N)``), ``"kappa4_same"``, ``"kappa4_cross"``, ``"O_cov"``.
        layer : int, optional
            Book layer number in :attr:`layers`; may be omitted when only one layer is held.

        Returns
        -------
        ndarray

        Raises
        ------
        DomainError
            Unknown name, or a layer this result does not hold (the message lists them).
        """
        return getattr(self, self._field(name))[self._layer(layer)]

    def stderr(self, name: str, layer: int | None = None) -> np.ndarray:
        """Jackknife standard error of :meth:`value` (same shape; NaN if ``networks < 4``)."""
        return getattr(self, self._field(name) + "_err")[self._layer(layer)]

    def __repr__(self) -> str:
        return (f"EnsembleStatistics(layers={short(self.layers)}, widths={short(self.widths)}, "
                f"networks={self.networks}, inputs={self.n_inputs}, method={self.method!r})")

    def _repr_html_(self) -> str:
        rows = [("layers", short(self.layers)), ("widths", short(self.widths)),
                ("networks", self.networks), ("inputs", self.n_inputs), ("method", self.method),
                ("statistics", ", ".join(STAT_NAMES)),
                ("estimators", f"unbiased (see .estimators); jackknife SE over {self.n_groups} groups"),
                ("samples kept", self.samples is not None)]
        return html_table("EnsembleStatistics", rows)


def _n_workers() -> int:
    """``$EFFTH_SIM_WORKERS``, else ``$EFFTH_THREADS``, else the available cores (at most 8)."""
    try:
        return worker_threads("EFFTH_SIM_WORKERS")
    except ValueError as exc:
        raise DomainError(str(exc)) from None


def _validate(net: Any, X: Any, networks: Any, method: str, layers: Iterable[int] | None,
              batch: int | None) -> tuple[np.ndarray, tuple[int, ...], tuple[int, ...]]:
    Xa = check_ensemble(net, X, networks, batch)
    if method not in ("weights", "conditional"):
        raise DomainError(f"method must be 'weights' or 'conditional', got {method!r}")
    widths = net.layer_widths(Xa.shape[1])
    if layers is None:
        lay = tuple(range(1, net.depth + 1))
    else:
        try:
            lay = tuple(sorted({int(k) for k in layers}))
        except (TypeError, ValueError):
            raise DomainError(f"layers must be an iterable of ints in 1..{net.depth}, got {layers!r}") from None
        if not lay or lay[0] < 1 or lay[-1] > net.depth:
            raise DomainError(f"layers must be non-empty, in 1..{net.depth}; got {layers!r}")
    return Xa, widths, lay


def _default_batch(widths: tuple[int, ...], last: int, N: int) -> int:
    p = N * (N + 1) // 2
    per_net = max(max(widths[k - 1] * widths[k] for k in range(1, last + 1)),
                  max(p * widths[k] for k in range(1, last + 1)))
    return max(1, _CHUNK_ELEMENTS // per_net)


@public
def simulate_ensemble(net: MLP, X: Any, *, networks: int,
                      seed: int | np.random.SeedSequence | np.random.Generator | None = 0,
                      batch: int | None = None, method: str = "weights",
                      layers: Iterable[int] | None = None,
                      keep_samples: bool = False,
                      progress: bool | None = None, backend: str = "numpy",
                      draws: str = "host") -> EnsembleStatistics:
    r"""Simulate ``networks`` independent random networks and estimate G, V and 4-pt cumulants.

    Parameters
    ----------
    net : MLP
        Architecture with numeric hidden widths; ``net.depth`` weight layers, activation
        ``net.act``, per-layer ``c_w``, ``c_b``; output width ``net.n_out``.  A residual MLP
        (``gamma``, ``xi``; PDLT (B.4)) is simulated as written,
        :math:`z^{(\ell)}=\xi[b+W\sigma(z^{(\ell-1)})]+\gamma z^{(\ell-1)}`; at its skip layers
        ``V`` is :math:`n_{\ell-1}\kappa_4^{\rm cross}` (PDLT (4.77); (4.76) assumes a zero
        conditional mean) and ``G_rb`` averages the conditional second moment
        :math:`\xi^2\widehat G+\gamma^2 z^{(\ell-1)}\cdot z^{(\ell-1)}/n`.
    X : array_like (N_D, n_0)
        Inputs, one per row, finite.
    networks : int
        Number of independent networks (>= 2; >= 4 for standard errors).
    seed : int, SeedSequence, Generator or None, default 0
        Every random draw comes from ``numpy.random.default_rng(seed)`` (a Generator is used
        as is): one child generator per chunk (``Generator.spawn``), so results are exactly
        reproducible for the same ``(seed, networks, batch)`` whatever the number of threads.
    batch : int, optional
        Networks simulated at once (bounds memory: about ``batch * max(n_{l-1} n_l)`` floats
        for the weights); default targets ~32 MB per temporary.
    method : {"weights", "conditional"}
        ``"weights"``: literal networks, ``W ~ N(0, C_W/n_{l-1})``, ``b ~ N(0, C_b)``, batched
        matrix products.  ``"conditional"``: the exactly equivalent conditional sampling
        ``z^(l)_i | z^(l-1) ~ N(0, G_hat^(l))`` i.i.d. over neurons, through a clipped
        eigen-factorization of ``G_hat`` (singular metrics allowed); much cheaper when
        ``N_D << n``.
    layers : iterable of int, optional
        Layers in ``1..L`` to report (default all); the pass runs up to the deepest one.
    keep_samples : bool
        Also return the raw preactivations and stochastic metrics (memory:
        ``networks * N_D * (n_l + N_D)`` floats per layer).
    progress : bool, optional
        Draw a progress bar over the chunks of networks (``None``: when stderr is a terminal or
        in a notebook, unless ``EFFTH_PROGRESS=0``).
    backend : {"numpy", "jax"}
        Array library of the forward pass and the per-chunk sums.  ``"numpy"`` (default):
        threaded NumPy on the CPU.  ``"jax"``: one compiled function per run on JAX's default
        device (a GPU or TPU when JAX finds one, else the CPU), in float64 (JAX's scoped
        ``enable_x64``; the global JAX configuration is not changed), chunks sized to a quarter
        of the accelerator's memory (256 MiB on a CPU) unless ``batch`` is given; needs the
        optional extra ``pip install effth[jax]``.  The estimators and the jackknife run on the
        host either way.
    draws : {"host", "device"}
        Where the Gaussian draws come from.  ``"host"`` (default): the seed's NumPy generators,
        the same calls as ``backend="numpy"``, so with the same ``(seed, networks, batch)`` the
        networks are the same and the statistics agree to round-off across backends.
        ``"device"`` (``backend="jax"`` only): ``jax.random`` on the device, keys drawn from the
        same generators (reproducible for a fixed seed, but other networks: the statistics agree
        within their standard errors); it avoids moving every weight from the host, the cost
        that dominates on an accelerator.

    Returns
    -------
    EnsembleStatistics
        Read by book layer number: ``st.value("V", layer=3)``, ``st.stderr("V", layer=3)``.

    Raises
    ------
    DomainError
        Bad input (``X`` not 2-D, complex or non-finite, symbolic widths, ``networks < 2``, unknown
        method, bad layers, batch or seed), or preactivations, activations, the sums over
        networks or the estimates (fourth moments) overflowing to non-finite values (the message
        names the layer).

    Notes
    -----
    Standard errors: the networks are split into ``K = min(32, networks // 2)`` disjoint groups and
    every estimator is recomputed with one group left out (delete-one-group jackknife); this
    handles the nonlinear estimators (covariances, cumulants) without a delta-method formula.
    Work is spread over ``$EFFTH_SIM_WORKERS`` threads (default: available cores, at most 8),
    each with BLAS limited by :func:`effth._threads.blas_threads`.
    """
    Xa, widths, lay = _validate(net, X, networks, method, layers, batch)
    be = _resolve_backend(backend, draws)
    size = int(networks)
    N, n0 = Xa.shape
    last = lay[-1]
    c_w = tuple(net.c_w_at(k) for k in range(1, net.depth + 1))
    c_b = tuple(net.c_b_at(k) for k in range(1, net.depth + 1))
    G1 = c_b[0] + c_w[0] * (Xa @ Xa.T) / n0
    sigma = net.act.numpy(0)
    gamma = tuple(net.gamma_at(k) for k in range(1, net.depth + 1))
    xi = tuple(net.xi_at(k) for k in range(1, net.depth + 1))
    plan = Plan(widths=widths, c_w=c_w, c_b=c_b, sigma=sigma, X=Xa, G1=G1, last=last,
                layers=frozenset(lay), method=method, keep=bool(keep_samples), gamma=gamma, xi=xi)
    bsz = _chunk_size(plan, be, batch)
    flops = 2.0 * N * sum(float(widths[k - 1]) * widths[k] for k in range(1, last + 1))
    check_work(size * ((1e-6 if be.is_numpy else 1e-8) + flops / be.flop_rate()),  # optimistic
               f"simulating {size} networks (widths {tuple(widths[:last + 1])}, {N} inputs)",
               "lower networks or widths")
    if keep_samples:
        check_memory(8.0 * size * N * sum(widths[k] + N for k in lay),
                     f"the kept samples of {size} networks (keep_samples=True)",
                     "lower networks or pass keep_samples=False")
    K, units = group_units(size, bsz)
    rng = as_generator(seed)
    children = _spawn(rng, len(units))

    p = N * (N + 1) // 2
    group_sums = [{k: LayerSums.zeros(p, N) for k in lay} for _ in range(K)]
    kept = ({k: (np.empty((size, N, widths[k])), np.empty((size, N, N))) for k in lay}
            if keep_samples else None)

    def work(i: int):
        _, _, m = units[i]
        return run_chunk(plan, children[i], m)

    workers = min(_n_workers(), len(units))
    with blas_threads(1), progress_bar(size, "ensemble", progress=progress, unit="net") as bar:
        if not be.is_numpy:
            _collect(_device_chunks(plan, be, net, units, children), units, group_sums, kept, bar)
        elif workers > 1:
            with ThreadPoolExecutor(max_workers=workers) as pool:
                results = pool.map(work, range(len(units)))
                _collect(results, units, group_sums, kept, bar)
        else:
            _collect(map(work, range(len(units))), units, group_sums, kept, bar)

    _, _, pid = pair_index(N)
    out: dict[str, dict[int, np.ndarray]] = {}
    for k in lay:
        with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
            est, err = layer_estimates([g[k] for g in group_sums], n_prev=widths[k - 1],
                                       n_cur=widths[k], first=(k == 1), pid=pid,
                                       residual=gamma[k - 1] != 0)
        _check_estimates(est, err, k, widths[k], len(group_sums))
        for name, val in est.items():
            out.setdefault(name, {})[k] = val
            out.setdefault(name + "_err", {})[k] = err[name]
    return EnsembleStatistics(
        layers=lay, widths=widths, networks=size, method=method, n_groups=K,
        **{name: MappingProxyType(d) for name, d in out.items()},
        samples=_frozen({k: v[0] for k, v in kept.items()}) if kept else None,
        G_hat_samples=_frozen({k: v[1] for k, v in kept.items()}) if kept else None,
    )


def _chunk_size(plan: Plan, be, batch: int | None) -> int:
    """Networks per chunk: ``batch``, else ~32 MB temporaries on NumPy, else as many as fit in
    :meth:`~effth.simulation._backend.Backend.chunk_bytes` of the device by
    :func:`~effth.simulation._kernels.chunk_bytes` (with no array above ``MAX_ELEMENTS``)."""
    if batch is not None:
        return int(batch)
    if be.is_numpy:
        return _default_batch(plan.widths, plan.last, plan.X.shape[0])
    bsz = max(1, int(be.chunk_bytes() // chunk_bytes(plan, 1, be.draws == "device")))
    return min(bsz, MAX_ELEMENTS // max(chunk_elements(plan, 1), 1))


def _device_chunks(plan: Plan, be, net: MLP, units, children):
    """Chunk results ``(sums, samples)`` of :func:`run_chunk`, computed on the backend ``be``.

    Every chunk is padded to the largest one (a 0/1 mask over networks), so one compilation
    serves the run; the next chunk's host draws overlap the device's work on the current one.
    """
    with be.scope():
        m_pad = max(u[2] for u in units)
        fn = device_chunk(plan, be, net.act, m_pad)
        checks = finite_checks(plan)
        shapes = draw_shapes(plan, m_pad)
        X, G1 = be.put(plan.X), be.put(plan.G1)
        A1 = be.put(_factor(plan.G1) if plan.method == "conditional" else np.zeros((1, 1)))

        def launch(i: int):
            m = units[i][2]
            mask = np.zeros(m_pad)
            mask[:m] = 1.0
            if be.draws == "device":
                source = be.key(children[i])
            else:
                source = []
                for shp in shapes:
                    buf = np.zeros(shp)
                    children[i].standard_normal(out=buf[:m])
                    source.append(be.put(buf))
            return m, fn(X, G1, A1, source, be.put(mask))

        def finish(m, res):
            sums, flags, samples = res
            flags = be.get(flags)
            if not flags.all():
                layer, what = checks[int(np.argmin(flags))]
                raise DomainError(
                    f"non-finite {what} at layer {layer} (overflow); reduce c_w/c_b, the depth or "
                    "the input scale, or use a bounded activation")
            out = {k: LayerSums(m, *(be.get(a) for a in v)) for k, v in sums.items()}
            kept = ({k: (be.get(z)[:m], be.get(G)[:m]) for k, (z, G) in samples.items()}
                    if plan.keep else None)
            return out, kept

        pending = None
        for i in range(len(units)):
            nxt = launch(i)
            if pending is not None:
                yield finish(*pending)
            pending = nxt
        if pending is not None:
            yield finish(*pending)


def _spawn(rng: np.random.Generator, count: int) -> list[np.random.Generator]:
    """``count`` independent child generators, deterministic given ``rng``'s state."""
    if hasattr(rng, "spawn"):                          # numpy >= 1.25
        return rng.spawn(count)
    root = np.random.SeedSequence(int(rng.integers(2**63)))  # pragma: no cover - old numpy
    return [np.random.Generator(type(rng.bit_generator)(s)) for s in root.spawn(count)]


def _check_estimates(est: dict, err: dict, layer: int, n_cur: int, n_groups: int) -> None:
    """Raise if an estimate (or its error) is not finite, except the NaN that are by design
    (``kappa4_cross`` of a width-1 layer; every error when fewer than 2 groups)."""
    for name, v in est.items():
        if name in ("kappa4_cross", "kappa3_cross") and n_cur < 2:
            continue
        bad = not np.isfinite(v).all()
        if not bad and n_groups >= 2 and name in err:
            bad = not np.isfinite(err[name]).all()
        if bad:
            raise DomainError(
                f"the estimate of {name!r} at layer {layer} is not finite: the fourth moments of "
                f"the preactivations overflow float64 there; use a smaller c_w (or c_b), a "
                f"smaller depth or smaller inputs, or request only shallower layers (layers=...)")


def _collect(results, units, group_sums, kept, bar) -> None:
    """Add chunk results (in unit order, hence deterministically) into their groups."""
    for (group, start, m), (sums, samples) in zip(units, results):
        bar.update(m)
        for k, s in sums.items():
            group_sums[group][k].add(s)
        if kept is not None and samples is not None:
            for k, (z, Gh) in samples.items():
                kept[k][0][start:start + m] = z
                kept[k][1][start:start + m] = Gh
