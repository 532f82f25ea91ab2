r"""The Gibbs equilibrium of Langevin-trained deep networks at infinite width (App. K.3).

:func:`solve_deep_linear_equilibrium` closes the equations for linear networks (below);
:func:`solve_equilibrium` solves them for any activation with sampled or quadrature averages over
the tilted single-site densities (its docstring has the equations).

Langevin dynamics ``d theta = -gamma^2 grad L dt - (lambda / beta) theta dt + sqrt(2 / beta) d eps``
(Bordelon & Pehlevan (2022), App. K, eq. (100)) equilibrates to the posterior
``p(theta) ~ exp(-beta gamma^2 L(theta) - lambda |theta|^2 / 2)`` (App. K.3), whose
``N -> infinity`` limit (``gamma = gamma0 sqrt(N)``) is a saddle point over the feature kernels
``Phi^l`` and their duals ``Phi^^l`` (eqs. (115)-(121)).  For deep linear networks every single-site
density is Gaussian and the saddle point closes algebraically.  Derived here (each hidden layer's
kernel is a Wishart matrix given the previous one, and the readout is integrated out):

``f = (beta / lambda) Phi^L Delta``,  ``Delta = y - f`` on the training points (eq. (118)),
``Phi^^L = -(gamma0^2 beta^2 / lambda) Delta Delta^T``,
``Phi^l = Sigma^l (1 + Phi^^l Sigma^l)^{-1}``, ``Sigma^l = Phi^{l-1} / lambda``, ``Phi^0 = K^x``,
``Phi^^{l-1} = lambda^{-1} (1 + Phi^^l Sigma^l)^{-1} Phi^^l = lambda^{-1} [Sigma^{-1} - Sigma^{-1} Phi^l Sigma^{-1}]``.

Erratum (corrected here): eqs. (120)-(121) print
``Phi^^{l-1} = lambda [Phi^{l-1}]^{-1} - lambda^2 [Phi^{l-1}]^{-1} <h^l h^l> [Phi^{l-1}]^{-1}``,
which is ``<h^^ h^^>``; the saddle point of (116) is ``Phi^^{l-1} = <h^^ h^^> / lambda`` (the
``1/(2 lambda)`` of ``ln Z`` is dropped in (117)).  The two agree at ``lambda = 1`` only; the long
Langevin DMFT runs select the form above (tests).

``Phi^l + Phi^^l`` written this way needs no inverse of ``Phi^{l-1}``, so test points (rows with
``Delta = 0``) ride along.  At ``gamma0 = 0``: ``Phi^l = K^x / lambda^l`` and
``f = K (K + beta^{-1})^{-1} y`` with ``K = K^x / lambda^{L+1}``, the NNGP posterior mean of a
linear network with weight variance ``1 / lambda`` and output noise ``1 / beta`` (App. K.2,
eqs. (113)-(114)).

In the variables of :func:`~effth.dmft.solve_deep_linear` and
:func:`~effth.simulation.simulate_training`, ``weight_decay = lambda / beta`` (the decay rate of
the parameters) and ``temperature = 1 / beta``, so ``lambda = weight_decay / temperature`` and
the prior weight variance is ``temperature / weight_decay``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from effth._threads import limits_blas_threads

from effth._signature import public
from effth._display import html_table
from effth.dmft.grid import TrainingData, prepare_data, real_scalar
from effth import _validate as _v
from effth.dmft.solvers.lazy import (activation_label, hidden_layer_count, is_linear,
                                     lazy_rule_kind, resolve_activation)
from effth.numerics._rules import gaussian_tensor_rule
from effth.errors import ConvergenceError, DomainError

__all__ = ["LangevinEquilibrium", "solve_deep_linear_equilibrium", "solve_equilibrium"]


@public
@dataclass
class LangevinEquilibrium:
    """The ``N -> infinity`` Gibbs equilibrium of Langevin training (Bayesian posterior, App. K.3).

    Returned by :func:`solve_deep_linear_equilibrium` (closed forms) and
    :func:`solve_equilibrium` (any activation; sampled or quadrature single-site averages).

    Attributes
    ----------
    f : ndarray (n,)
        Equilibrium predictions on the training points, then the test points.
    delta : ndarray (P,)
        ``y - f`` on the training points.
    phi : ndarray (L, n, n)
        Equal-time feature kernels ``Phi^l = <h^l h^l^T>``, layer ``l`` at index ``l - 1``.
    phi_hat : ndarray (L, n, n)
        Their duals ``Phi^^l`` (zero rows and columns on test points).
    data : TrainingData
    hidden_layers, gamma0, temperature, weight_decay : settings
    iterations : int
        Fixed-point iterations used.
    residual : float
        Max-abs change of ``Delta`` in the last iteration.
    activation : str or Activation
        ``'linear'`` for :func:`solve_deep_linear_equilibrium`.
    method : {'exact', 'monte_carlo', 'quadrature'}
        How the single-site averages were taken.
    mc_stderr : dict or None
        ``method='monte_carlo'``: standard errors of ``'f'``, ``'delta'``, ``'phi'`` from the spread
        of independent replicas (read with :meth:`stderr`).
    quad_error : dict or None
        ``method='quadrature'``: ``|fine - coarse|`` between the rule with ``nodes`` and the one
        with about ``2/3`` of them, for ``'f'``, ``'delta'``, ``'phi'``.
    effective_samples : float or None
        Smallest (over layers and replicas) relative effective sample size
        ``(sum w)^2 / sum w^2`` of the importance weights in the last iteration, divided by that
        of the unweighted rule (1 = the proposal is the tilted density).
    samples, nodes : int or None
        Draws (all replicas) or quadrature nodes per dimension used.
    """

    f: np.ndarray
    delta: np.ndarray
    phi: np.ndarray
    phi_hat: np.ndarray
    data: TrainingData
    hidden_layers: int
    gamma0: float
    temperature: float
    weight_decay: float
    iterations: int = 0
    residual: float = 0.0
    _paper_dual: bool = field(default=False, repr=False)
    activation: object = "linear"
    method: str = "exact"
    mc_stderr: dict | None = None
    quad_error: dict | None = None
    effective_samples: float | None = None
    samples: int | None = None
    nodes: int | None = None

    def stderr(self, name: str):
        """Monte-Carlo standard error of ``'f'``, ``'delta'`` or ``'phi'`` (same shape), or
        ``None`` for the closed-form and quadrature solutions (see ``quad_error``)."""
        if name not in ("f", "delta", "phi"):
            raise DomainError(f"unknown quantity name={name!r}; choose from ['f', 'delta', 'phi']")
        return None if self.mc_stderr is None else self.mc_stderr[name]

    @property
    def beta(self) -> float:
        """Inverse temperature ``beta = 1 / temperature``."""
        return 1.0 / self.temperature

    @property
    def ridge(self) -> float:
        """The paper's ``lambda = weight_decay / temperature`` (prior precision of every weight)."""
        return self.weight_decay / self.temperature

    @property
    def prior_variance(self) -> float:
        """``1 / lambda = temperature / weight_decay``."""
        return self.temperature / self.weight_decay

    def __repr__(self) -> str:
        return (f"LangevinEquilibrium(hidden_layers={self.hidden_layers}, gamma0={self.gamma0:g}, "
                f"activation={self.activation!s}, method={self.method!r}, "
                f"temperature={self.temperature:g}, weight_decay={self.weight_decay:g}, "
                f"inputs={self.f.shape[0]}, iterations={self.iterations})")

    def _repr_html_(self) -> str:
        rows = [("hidden_layers", self.hidden_layers), ("gamma0", f"{self.gamma0:g}"),
                ("temperature", f"{self.temperature:g}"), ("weight_decay", f"{self.weight_decay:g}"),
                ("prior variance", f"{self.prior_variance:g}"), ("iterations", self.iterations),
                ("activation", str(self.activation)), ("method", self.method)]
        return html_table("LangevinEquilibrium", rows)


@public
def solve_deep_linear_equilibrium(X=None, y=None, *, depth: int | None = None,
                                  hidden_layers: int | None = None, gamma0: float,
                                  temperature: float, weight_decay: float, X_test=None,
                                  kernel=None, damping: float = 0.5, tol: float = 1e-14,
                                  max_iter: int = 10_000) -> LangevinEquilibrium:
    r"""Solve the equilibrium equations of Bordelon & Pehlevan (2022), App. K.3, eqs. (118)-(121)
    (with the corrected dual, module docstring) for a deep linear network.

    Parameters
    ----------
    X, y, X_test, kernel
        Training data as for :func:`~effth.dmft.solve_deep_linear` (``y`` one-dimensional).
    depth, hidden_layers : int
        Give exactly one (``depth = hidden_layers + 1`` weight layers).
    gamma0 : float
        Feature-learning strength; ``0`` gives the NNGP posterior.
    temperature : float
        ``1 / beta > 0``.
    weight_decay : float
        The parameters' decay rate ``lambda / beta > 0`` (the dynamical solvers' keyword).
    damping : float in (0, 1]
        Update ``Delta <- (1 - damping) Delta + damping Delta_new``.
    tol : float
        Stop when ``Delta`` changes by less than ``tol`` (max-abs).
    max_iter : int
        :class:`ConvergenceError` after this many iterations.

    Raises
    ------
    DomainError
        Bad data or settings, or a tilt that makes a single-site density non-normalizable
        (``Sigma^{-1} + Phi^^`` not positive definite: no equilibrium at this ``gamma0``).
    ConvergenceError
        The fixed point did not converge (lower ``damping``).
    """
    return _solve(X, y, depth, hidden_layers, gamma0, temperature, weight_decay, X_test, kernel,
                  damping, tol, max_iter, paper_dual=False)


@public
@limits_blas_threads
def solve_equilibrium(X=None, y=None, *, depth: int | None = None, hidden_layers: int | None = None,
                      activation="tanh", gamma0: float, temperature: float, weight_decay: float,
                      X_test=None, kernel=None, method: str = "auto", samples: int = 16_000,
                      replicas: int = 8, nodes: int | None = None, seed=0, damping: float = 0.5,
                      tol: float | None = None, max_iter: int | None = None
                      ) -> LangevinEquilibrium:
    r"""Solve the equilibrium equations of Bordelon & Pehlevan (2022), App. K.3 for a deep network
    with any activation: the ``N -> infinity`` Bayesian posterior of Langevin training.

    The posterior ``exp(-beta gamma^2 L - lambda |theta|^2 / 2)`` (``gamma = gamma0 sqrt(N)``,
    ``L = sum_mu (f_mu - y_mu)^2 / 2``) concentrates on the saddle point of the action (116).
    Its stationarity conditions (117) are, with ``Sigma^l = Phi^{l-1} / lambda``,
    ``Phi^0 = K^x``, and the single-site density of layer ``l``

    ``p_l(h) ~ N(h; 0, Sigma^l) exp(-phi(h)^T Phi^^l phi(h) / 2)``   (the ``h^`` integral of (115)),

    * eq. (118): ``f = (beta / lambda) Phi^L Delta``, ``Delta = y - f`` on the training points,
      i.e. ``Delta = (1 + (beta / lambda) Phi^L)^{-1} y``;
    * the last layer's dual ``Phi^^L = -(gamma0^2 beta^2 / lambda) Delta Delta^T``: the tilt
      ``exp(gamma0^2 beta^2 [sum_mu Delta_mu phi(h_mu)]^2 / (2 lambda))`` of eq. (119);
    * ``Phi^l = <phi(h) phi(h)^T>_{p_l}`` (``dS / dPhi^^l = 0``);
    * eqs. (120)-(121), corrected by ``1 / lambda`` (erratum, module docstring):
      ``Phi^^{l-1} = -2 d ln Z_l / d Phi^{l-1}
      = lambda^{-1} [Sigma^-1 - Sigma^-1 <h h^T>_{p_l} Sigma^-1]`` on the training block.

    Only the training rows of ``Phi^^`` are nonzero, so a test row of ``h`` follows the training
    rows by the prior's Gaussian conditional.  With the linear activation these are the closed
    equations of :func:`solve_deep_linear_equilibrium`; at ``gamma0 = 0`` every ``Phi^^`` vanishes
    and ``Phi^l`` is the NNGP recursion at weight variance ``1 / lambda`` (App. K.2, eq. (113)), so
    ``f`` is the NNGP posterior mean with output noise ``1 / beta``.

    The fixed point is found as in :func:`solve_deep_linear_equilibrium` (damped iteration in
    ``Delta``, continuation in ``gamma0^2``).  The averages over ``p_l`` (joint over all ``n``
    inputs) are importance-weighted averages over a Gaussian proposal for the training rows that
    is moment-matched to ``p_l`` at the previous iteration, on fixed points: the map is
    deterministic, and exact for a Gaussian ``p_l`` (the linear network).

    Parameters
    ----------
    X, y, X_test, kernel
        Training data as for :func:`solve_deep_linear_equilibrium` (``y`` one-dimensional; the
        training kernel ``K^x`` must be positive definite).
    depth, hidden_layers : int
        Give exactly one.
    activation : str, Activation or sympy.Expr
        As for :func:`~effth.dmft.solve_monte_carlo`.
    gamma0, temperature, weight_decay
        As for :func:`solve_deep_linear_equilibrium`: ``beta = 1 / temperature``, the prior
        precision ``lambda = weight_decay / temperature``.
    method : {'auto', 'exact', 'monte_carlo', 'quadrature'}
        ``'exact'``: the closed forms (linear activation only; what ``'auto'`` picks for it, else
        ``'monte_carlo'``).  ``'monte_carlo'``: ``samples`` antithetic draws split over
        ``replicas`` independent solves; the result is their mean and :meth:`stderr` their
        spread ``/ sqrt(replicas)`` (Student-t with ``replicas - 1`` degrees of freedom).
        ``'quadrature'``: a tensor rule over all ``n`` inputs with ``nodes`` points per dimension
        (Gauss-Hermite, or the trapezoid rule from 36 nodes, as
        :func:`~effth.dmft.solve_two_layer`), solved again with ``~2/3`` of the nodes for
        ``quad_error``; for a few inputs only (``nodes ** n <= 2e6``).
    samples, replicas, seed
        Monte Carlo only.
    nodes : int
        Quadrature only; default the largest count within ``2e5`` points (at most 40).
    damping, tol, max_iter
        The fixed-point iteration: stop when ``Delta`` and every ``Phi^l`` change by less than
        ``tol`` (max-abs) in one sweep.  Defaults: those of
        :func:`solve_deep_linear_equilibrium` (``1e-14``, ``10_000``) for ``'exact'``, else
        ``1e-11``, ``2_000``.

    Raises
    ------
    DomainError
        Bad data or settings (non-positive ``temperature`` or ``weight_decay``, unknown
        ``method``, ``'exact'`` with a nonlinear activation, too few samples or nodes), a
        singular training kernel, or a tilt that is not normalizable (no equilibrium).
    ConvergenceError
        The fixed point did not converge within ``max_iter`` sweeps (lower ``damping``), or the
        importance weights collapsed (relative effective sample size below 1e-3).
    """
    L, g0, temp, lam_d = _settings(depth, hidden_layers, gamma0, temperature, weight_decay,
                                   damping, y)
    if method not in ("auto", "exact", "monte_carlo", "quadrature"):
        raise DomainError(f"method={method!r} must be 'auto', 'exact', 'monte_carlo' or "
                          "'quadrature'")
    act = resolve_activation(activation)
    linear = is_linear(act)
    if method == "auto":
        method = "exact" if linear else "monte_carlo"
    if tol is None:
        tol = 1e-14 if method == "exact" else 1e-11
    if max_iter is None:
        max_iter = 10_000 if method == "exact" else 2_000
    if method == "exact":
        if not linear:
            raise DomainError(f"method='exact' needs the linear activation (closed equations); "
                              f"activation={act.name!r} needs 'monte_carlo' or 'quadrature'")
        return _solve(X, y, depth, hidden_layers, gamma0, temperature, weight_decay, X_test,
                      kernel, damping, tol, max_iter)
    if not (np.isfinite(tol) and tol > 0):
        raise DomainError(f"tol={tol!r} must be a finite number > 0")
    if isinstance(max_iter, (bool, np.bool_)) or int(max_iter) != max_iter or max_iter < 1:
        raise DomainError(f"max_iter={max_iter!r} must be a positive integer")
    data = prepare_data(X, y, X_test=X_test, kernel=kernel)
    n = data.n_all
    fn = act.numpy(0)
    label = activation_label(act)

    def one(xi, wq):
        kmap = _TiltedMap(fn, xi, wq, data.n_train)
        out = _run(data, L, g0, temp, lam_d, damping, tol, max_iter, False, kmap)
        ess = min(kmap.ess.values()) if kmap.ess else 1.0
        if ess < 1e-3:
            raise ConvergenceError(
                f"the importance weights collapsed (relative effective sample size {ess:.2g}): "
                "the tilted single-site density is far from Gaussian; lower gamma0")
        return out, ess

    keys = ("f", "delta", "phi", "phi_hat")
    if method == "monte_carlo":
        if isinstance(replicas, (bool, np.bool_)) or int(replicas) != replicas or replicas < 2:
            raise DomainError(f"replicas={replicas!r} must be an integer >= 2 (the standard error "
                              "is their spread)")
        per = int(samples) // int(replicas) // 2 * 2
        if per < 4 * n:
            raise DomainError(f"samples={samples!r} gives {per} draws per replica; need at least "
                              f"{4 * n} (4 per input) for replicas={replicas}")
        outs, ess = [], 1.0
        for child in _v.seed_sequence(seed).spawn(int(replicas)):
            half = np.random.default_rng(child).standard_normal((per // 2, n))
            o, e = one(np.concatenate([half, -half]), np.ones(per))
            outs.append(o)
            ess = min(ess, e)
        stack = {k: np.array([o[i] for o in outs]) for i, k in enumerate(keys)}
        mean = {k: v.mean(axis=0) for k, v in stack.items()}
        se = {k: stack[k].std(axis=0, ddof=1) / np.sqrt(len(outs)) for k in ("f", "delta", "phi")}
        its = max(o[4] for o in outs)
        res = max(o[5] for o in outs)
        extra = dict(mc_stderr=se, samples=per * len(outs))
    else:
        if nodes is None:
            nodes = min(40, int(np.floor(200_000 ** (1.0 / n) + 1e-9)))
        if isinstance(nodes, (bool, np.bool_)) or int(nodes) != nodes or nodes < 6:
            raise DomainError(f"nodes={nodes!r}: quadrature over {n} inputs needs an integer "
                              ">= 6 per dimension; use method='monte_carlo' for more inputs")
        if int(nodes) ** n > 2_000_000:
            raise DomainError(f"nodes={nodes!r} over {n} inputs is {int(nodes) ** n} points "
                              "(> 2e6); use method='monte_carlo'")
        rows = []
        for k in (int(nodes), max(4, (2 * int(nodes)) // 3)):
            xi, _, wq = gaussian_tensor_rule(np.eye(n), k, kind=lazy_rule_kind(act, k))
            rows.append(one(xi, wq))
        (fine, ess), (coarse, _) = rows
        mean = dict(zip(keys, fine[:4]))
        err = {k: np.abs(fine[i] - coarse[i]) for i, k in enumerate(keys[:3])}
        its, res = fine[4], fine[5]
        extra = dict(quad_error=err, nodes=int(nodes))
    return LangevinEquilibrium(f=mean["f"], delta=mean["delta"], phi=mean["phi"],
                               phi_hat=mean["phi_hat"], data=data, hidden_layers=L, gamma0=g0,
                               temperature=temp, weight_decay=lam_d, iterations=its,
                               residual=res, activation=label, method=method,
                               effective_samples=ess, **extra)


def _settings(depth, hidden_layers, gamma0, temperature, weight_decay, damping, y):
    """Validated ``(L, gamma0, temperature, weight_decay)``."""
    L = hidden_layer_count(depth, hidden_layers)
    g0 = real_scalar(gamma0, "gamma0")
    temp = real_scalar(temperature, "temperature")
    lam_d = real_scalar(weight_decay, "weight_decay")
    if not np.isfinite(g0):
        raise DomainError(f"gamma0={gamma0!r} must be finite")
    if not (np.isfinite(temp) and temp > 0):
        raise DomainError(f"temperature={temperature!r} must be a finite number > 0 (1/beta; the "
                          "equilibrium of gradient descent at temperature 0 is not a posterior)")
    if not (np.isfinite(lam_d) and lam_d > 0):
        raise DomainError(f"weight_decay={weight_decay!r} must be a finite number > 0 (without "
                          "decay the Langevin dynamics has no equilibrium)")
    if not (0.0 < damping <= 1.0):
        raise DomainError(f"damping={damping!r} must lie in (0, 1]")
    if np.ndim(y) != 1:
        raise DomainError("y must be one-dimensional (one output) for the equilibrium solver")
    return L, g0, temp, lam_d


def _solve(X, y, depth, hidden_layers, gamma0, temperature, weight_decay, X_test, kernel,
           damping, tol, max_iter, paper_dual=False):
    L, g0, temp, lam_d = _settings(depth, hidden_layers, gamma0, temperature, weight_decay,
                                   damping, y)
    data = prepare_data(X, y, X_test=X_test, kernel=kernel)
    f, delta, Phi, Phh, it, res = _run(data, L, g0, temp, lam_d, damping, tol, max_iter,
                                       paper_dual, _LinearMap())
    return LangevinEquilibrium(f=f, delta=delta, phi=Phi, phi_hat=Phh,
                               data=data, hidden_layers=L, gamma0=g0, temperature=temp,
                               weight_decay=lam_d, iterations=it, residual=res,
                               _paper_dual=bool(paper_dual))


def _run(data, L, g0, temp, lam_d, damping, tol, max_iter, paper_dual, kmap):
    """Continuation in ``gamma0^2`` from the lazy start; returns ``f, Delta, Phi, Phi^^,
    iterations, residual``."""
    n, P = data.n_all, data.n_train
    beta, lam = 1.0 / temp, lam_d / temp
    g2 = g0 * g0
    # lazy start (the NNGP kernels at weight variance 1/lambda); continuation in gamma0^2 from 0
    # (a cold start at large gamma0 overshoots into a non-normalizable tilt); a failed stage is
    # retried with half the step
    Phi = kmap.lazy(data.kx, L, lam)
    delta = np.linalg.solve(np.eye(P) + (beta / lam) * Phi[-1][:P, :P], data.y)
    state = (delta, Phi, [np.zeros((n, n)) for _ in range(L)])
    done, step, total, res = 0.0, 1.0, 0, 0.0
    while done < 1.0:
        target = min(1.0, done + step)
        try:
            snap = kmap.snapshot()
            state, it, res = _damped(state, data, L, g2 * target, beta, lam, damping, tol,
                                     max_iter, paper_dual, kmap)
        except _NotPD as exc:
            kmap.restore(snap)
            if step < 1e-3:
                raise DomainError(
                    f"no equilibrium at gamma0={g0:g}: the tilted single-site density of layer "
                    f"{exc.layer} is not normalizable (kernel not positive semi-definite) at "
                    f"gamma0 = {g0 * np.sqrt(target):.4g}; lower gamma0 or raise the temperature"
                    ) from None
            step /= 2.0
            continue
        total += it
        done = target
        step = min(2.0 * step, 1.0)
    delta, Phi, Phh = state
    d = np.zeros(n)
    d[:P] = delta
    f = (beta / lam) * Phi[-1] @ d
    return f, data.y - f[:P], np.stack(Phi), np.stack(Phh), total, res


def _damped(state, data, L, g2, beta, lam, damping, tol, max_iter, paper_dual, kmap):
    """:func:`_iterate`, retried with the damping halved (to 1/16 of it) if it oscillates."""
    snap = kmap.snapshot()
    for k in range(5):
        try:
            return _iterate(state, data, L, g2, beta, lam, damping / 2 ** k, tol, max_iter,
                            paper_dual, kmap)
        except ConvergenceError:
            if k == 4:
                raise
            kmap.restore(snap)


class _NotPD(Exception):
    def __init__(self, layer):
        super().__init__(layer)
        self.layer = layer


def _iterate(state, data, L, g2, beta, lam, damping, tol, max_iter, paper_dual, kmap):
    """Damped fixed-point iteration of the equilibrium equations at ``gamma0^2 = g2``: backward
    pass for the duals ``Phi^^l`` (eq. (121), corrected), forward pass for ``Phi^l``, then
    ``Delta`` from eq. (118).  ``kmap`` gives the single-site averages (closed forms for linear
    networks, tilted Gaussian averages otherwise)."""
    n, P = data.n_all, data.n_train
    kx = data.kx
    delta, Phi, Phh = state[0].copy(), [p.copy() for p in state[1]], [p.copy() for p in state[2]]
    res = np.inf
    for it in range(1, int(max_iter) + 1):
        d = np.zeros(n)
        d[:P] = delta
        Phh[L - 1] = -(g2 * beta ** 2 / lam) * np.outer(d, d)
        # backward: Phi^^{l-1} from Phi^^l and Sigma^l = Phi^{l-1} / lambda
        for ell in range(L, 1, -1):
            Phh[ell - 2] = kmap.dual(ell, Phi[ell - 2] / lam, Phh[ell - 1], lam, paper_dual)
        # forward: Phi^l = <phi(h) phi(h)^T> under the tilted single-site density
        prev = kx
        change = 0.0
        for ell in range(1, L + 1):
            new = kmap.forward(ell, prev / lam, Phh[ell - 1])
            change = max(change, float(np.max(np.abs(new - Phi[ell - 1]))))
            Phi[ell - 1] = new
            prev = new
        d_new = np.linalg.solve(np.eye(P) + (beta / lam) * Phi[-1][:P, :P], data.y)
        res = float(np.max(np.abs(d_new - delta)))
        if not np.isfinite(res):
            raise _NotPD(L)
        delta = (1.0 - damping) * delta + damping * d_new
        if res < tol and (kmap.exact or change < tol):
            return (delta, Phi, Phh), it, res
    raise ConvergenceError(
        f"equilibrium did not converge in {max_iter} iterations (last change {res:.3g} > tol "
        f"{tol:.3g}); lower damping or raise max_iter")


class _LinearMap:
    """Closed single-site averages of a deep linear network (every density Gaussian):
    ``Phi^l = Sigma^l (1 + Phi^^l Sigma^l)^{-1}``, ``Phi^^{l-1} = lambda^{-1} (1 + Phi^^l
    Sigma^l)^{-1} Phi^^l``."""

    exact = True

    def lazy(self, kx, L, lam):
        return [kx / lam ** ell for ell in range(1, L + 1)]

    def snapshot(self):
        return None

    def restore(self, snap):
        pass

    def dual(self, ell, S, Phh, lam, paper_dual):
        eye = np.eye(S.shape[0])
        M = np.linalg.solve(eye + Phh @ S, Phh)
        M = M if paper_dual else M / lam             # paper_dual: eq. (121) as printed
        return 0.5 * (M + M.T)

    def forward(self, ell, S, Phh):
        A = np.eye(S.shape[0]) + Phh @ S
        new = np.linalg.solve(A.T, S.T).T            # S A^{-1}
        new = 0.5 * (new + new.T)
        # normalizable iff Sigma^{-1} + Phi^^ > 0, i.e. 1 + Sigma^{1/2} Phi^^ Sigma^{1/2} > 0
        if not np.all(np.isfinite(new)) or np.linalg.eigvalsh(new)[0] < -1e-10 * max(
                1.0, float(np.max(np.abs(new)))) or np.linalg.eigvals(A).real.min() <= 0:
            raise _NotPD(ell)
        return new


class _TiltedMap:
    """Single-site averages of a nonlinear layer: ``h ~ N(0, Sigma)`` tilted by
    ``exp(-phi(h_train)^T Phi^^ phi(h_train) / 2)`` (eqs. (115), (119)), by self-normalized
    importance sampling from a Gaussian proposal on the training block, moment-matched to the
    tilted density of the previous call (so the weights are constant where that density is
    Gaussian: linear networks are exact).  Test rows follow ``h_train`` by the prior's Gaussian
    conditional.  ``xi, wq``: standard-normal points (Monte-Carlo draws, whitened, or a tensor
    quadrature rule) and their weights."""

    exact = False

    def __init__(self, fn, xi, wq, P):
        self.fn, self.P = fn, P
        wq = np.asarray(wq, float) / np.sum(wq)
        m = wq @ xi
        xi = xi - m
        c = (xi * wq[:, None]).T @ xi
        # exact whitening: sum_i w_i xi_i = 0 and sum_i w_i xi_i xi_i^T = I
        self.xi = np.linalg.solve(np.linalg.cholesky(c), xi.T).T
        self.logwq = np.log(wq)
        self.ess_nominal = 1.0 / float(np.sum(wq ** 2))
        self.prop = {}
        self.ess = {}

    def snapshot(self):
        return dict(self.prop)

    def restore(self, snap):
        self.prop = dict(snap)

    def lazy(self, kx, L, lam):
        out, prev = [], kx
        for ell in range(1, L + 1):
            prev = self.forward(ell, prev / lam, np.zeros_like(kx))
            out.append(prev)
        self.prop = {}
        return out

    def _average(self, ell, S, Phh):
        P, n = self.P, S.shape[0]
        Str = 0.5 * (S[:P, :P] + S[:P, :P].T)
        try:
            Lp = np.linalg.cholesky(Str)
        except np.linalg.LinAlgError:
            raise DomainError(
                f"the training-point kernel of layer {ell - 1} is singular (the single-site "
                "density of the training preactivations has no density): use distinct, linearly "
                "independent training inputs") from None
        m, Lc = self.prop.get(ell, (np.zeros(P), Lp))
        xt = self.xi[:, :P]
        htr = m + xt @ Lc.T
        a = np.linalg.solve(Lp, htr.T)
        ptr = self.fn(htr)
        tilt = np.einsum("si,ij,sj->s", ptr, Phh[:P, :P], ptr)
        logw = (self.logwq - 0.5 * np.sum(a * a, axis=0) + 0.5 * np.sum(xt * xt, axis=1)
                - 0.5 * tilt)
        if not np.all(np.isfinite(logw)):
            raise _NotPD(ell)
        w = np.exp(logw - logw.max())
        w /= w.sum()
        self.ess[ell] = 1.0 / float(np.sum(w * w)) / self.ess_nominal
        if n > P:
            A = np.linalg.solve(Str, S[:P, P:]).T                        # Sigma_te,tr Sigma_tr^-1
            cond = S[P:, P:] - A @ S[:P, P:]
            lam_c, V = np.linalg.eigh(0.5 * (cond + cond.T))
            root = (V * np.sqrt(np.clip(lam_c, 0.0, None))) @ V.T
            h = np.concatenate([htr, htr @ A.T + self.xi[:, P:] @ root.T], axis=1)
            ph = np.concatenate([ptr, self.fn(h[:, P:])], axis=1)
        else:
            ph = ptr
        Phi = (ph * w[:, None]).T @ ph
        mean = w @ htr
        M = (htr * w[:, None]).T @ htr
        C = M - np.outer(mean, mean)
        try:
            self.prop[ell] = (mean, np.linalg.cholesky(0.5 * (C + C.T)))
        except np.linalg.LinAlgError:
            raise _NotPD(ell) from None
        return 0.5 * (Phi + Phi.T), 0.5 * (M + M.T), Lp

    def dual(self, ell, S, Phh, lam, paper_dual):
        # Phi^^{l-1} = lambda^{-1} [Sigma^-1 - Sigma^-1 <h h^T> Sigma^-1] on the training block
        _, M, Lp = self._average(ell, S, Phh)
        P, n = self.P, S.shape[0]
        Sinv = np.linalg.solve(Lp.T, np.linalg.solve(Lp, np.eye(P)))
        D = Sinv - Sinv @ M @ Sinv
        out = np.zeros((n, n))
        out[:P, :P] = 0.5 * (D + D.T) * (1.0 if paper_dual else 1.0 / lam)
        return out

    def forward(self, ell, S, Phh):
        return self._average(ell, S, Phh)[0]
