r"""The Gibbs equilibrium of Langevin-trained deep linear networks at infinite width.

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

from effth._signature import public
from effth._display import html_table
from effth.dmft.grid import TrainingData, prepare_data, real_scalar
from effth.dmft.solvers.lazy import hidden_layer_count
from effth.errors import ConvergenceError, DomainError

__all__ = ["LangevinEquilibrium", "solve_deep_linear_equilibrium"]


@public
@dataclass
class LangevinEquilibrium:
    """The ``N -> infinity`` Gibbs equilibrium of Langevin training (deep linear network).

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
                f"temperature={self.temperature:g}, weight_decay={self.weight_decay:g}, "
                f"inputs={self.f.shape[0]}, iterations={self.iterations})")

    def _repr_html_(self) -> str:
        rows = [("hidden_layers", self.hidden_layers), ("gamma0", f"{self.gamma0:g}"),
                ("temperature", f"{self.temperature:g}"), ("weight_decay", f"{self.weight_decay:g}"),
                ("prior variance", f"{self.prior_variance:g}"), ("iterations", self.iterations)]
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
