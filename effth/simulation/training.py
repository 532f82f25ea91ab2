"""Finite-width networks trained by full-batch gradient descent: the ground truth of the DMFT.

The network of Bordelon & Pehlevan (Bordelon & Pehlevan (2022), eq. (1), (13); Bordelon & Pehlevan (2022), eqs. (1), (13); eqs. (4), (14)-(15), §1.7), with ``L``
hidden layers of width ``N`` and no biases:

``h^1 = W^0 x / sqrt(D)``, ``h^{l+1} = m W^l phi(h^l)``, ``f = m w^L . phi(h^L) / gamma``,
``gamma = gamma0 sqrt(N)``, loss ``1/2 sum_mu (f_mu - y_mu)^2``,

trained by full-batch GD.  Two equivalent parameterizations (Bordelon & Pehlevan (2022), App. N, exact at any ``N``):

* ``'mean_field'`` (Bordelon & Pehlevan (2022), eqs. (1), (4)): ``m = 1/sqrt(N)``, all weights ``N(0, 1)``, parameter learning
  rate ``eta gamma0^2 N``;
* ``'mup'``: ``m = 1``, hidden and readout weights ``N(0, 1/N)``, learning rate ``eta gamma0^2``
  for them (``eta gamma0^2 N`` for the input layer, whose parameterization is shared).

One GD step is one DMFT grid step ``t -> t + eta``.  Recorded at every step (before the update):
outputs, loss, the feature and gradient fields from which the kernels
``Phi^l(t, s) = phi(h^l(t)) . phi(h^l(s)) / N`` and ``G^l(t, s) = g^l(t) . g^l(s) / N`` with
``g^l = gamma0 N df/dh^l`` (Bordelon & Pehlevan (2022), eq. (16)) are formed, and the NTK
``K(t, t) = sum_l G^{l+1} Phi^l`` (Bordelon & Pehlevan (2022), eq. (19)).

The forward and backward passes are the shared batched pass of :mod:`effth.simulation._mlp`
(also used by :func:`~effth.simulation.train_ensemble`), with layer multipliers ``1/sqrt(D)``,
``m`` and ``m / gamma``; trajectories agree with the earlier hand-written pass to rounding
(``<= 1e-14``).

NumPy only: this module never imports theory code (it is the ground truth).
"""

from __future__ import annotations

from effth._signature import public

from dataclasses import dataclass

import numpy as np


from .._display import activation_text, depth_text, html_table
from .._progress import progress_bar
from .._threads import blas_threads
from .._results import HiddenLayers
from .._validate import check_memory, check_networks, integer, langevin_momentum, real_array, real_scalar
from .._validate import weight_variance_values
from .._validate import seed as _check_seed
from ..activations import get_activation
from effth.arch import resolve_depth
from effth._langevin import langevin_noise
from ..errors import DomainError
from . import _mlp

__all__ = ["ACTIVATIONS", "TrainingRun", "simulate_training"]


def _relu(z):
    return np.maximum(z, 0.0)


#: the original closed forms (kept so that existing runs reproduce bit for bit); every other
#: activation of the registry uses its NumPy callables ``Activation.numpy(0)``, ``numpy(1)``
ACTIVATIONS = {
    "linear": (lambda z: z, lambda z: np.ones_like(z)),
    "tanh": (np.tanh, lambda z: 1.0 - np.tanh(z) ** 2),
    "relu": (_relu, lambda z: (z > 0).astype(float)),
}


@public
@dataclass
class TrainingRun(HiddenLayers):
    """Record of GD training of finite-width networks over several seeds.

    Sample axes have length ``n = P + Q`` (training points, then test points); layer
    ``l = 1 .. L`` sits at index ``l - 1``.

    Attributes
    ----------
    f : ndarray, shape (S, T, n) [or (S, T, n, C) for 2-D targets]
        Outputs at steps ``0 .. T-1`` (centred, ``f - f(theta_0)``, if ``center``).
    loss : ndarray, shape (S, T)
        ``1/2 sum_mu (f_mu - y_mu)^2`` over training points.
    phi : ndarray, shape (S, L, T, n, T, n)
        Two-time feature kernels ``Phi^l(t, s)``.
    g : ndarray, shape (S, L, T, n, T, n) [or (S, L, T, n, T, n, C, C)]
        Two-time gradient kernels ``G^l(t, s)`` (``G^{l, c c'}`` for ``C`` outputs, Bordelon & Pehlevan (2022), App. I).
    ntk : ndarray, shape (S, T, n, n) [or (S, T, n, n, C, C)]
        Equal-time NTK ``sum_{l=0}^{L} G^{l+1}(t,t) Phi^l(t,t)`` (``Phi^0 = K^x``, ``G^{L+1} = 1``;
        ``+ sum_l G^l`` with biases; ``Phi^L delta_{c c'}`` for several outputs, Bordelon & Pehlevan (2022), eq. (95));
        for the mean-field parameterization it equals ``gamma^2 grad f . grad f``.
    kx : ndarray, shape (n, n)
        ``X X^T / D``.
    widths : int
        Hidden width ``N`` (all hidden layers).
    hidden_layers : int
        ``L``, the number of hidden layers.
    gamma0, eta : float
        The settings used.
    seed : tuple
        One entry per network (the ``seed`` given, one per network).
    activation : str or Activation
        The activation (registry name, or the ``Activation`` of a user expression).
    h : ndarray, shape (S, L, T, n, N), or None
        Preactivations of every neuron (``record_preactivations=True``).

    Notes
    -----
    Read it like every effth result (``docs/conventions.md``): :meth:`value` averages the network
    axis, :meth:`stderr` is the standard error over the networks (``None`` with one network),
    :attr:`layers` are the book numbers ``1 .. hidden_layers``.
    """

    f: np.ndarray
    loss: np.ndarray
    phi: np.ndarray
    g: np.ndarray
    ntk: np.ndarray
    kx: np.ndarray
    widths: int
    hidden_layers: int
    gamma0: float
    eta: float
    seed: tuple
    h: np.ndarray | None = None
    activation: object = "tanh"

    _NAMES = ("f", "loss", "phi", "g", "ntk")


    @property
    def networks(self) -> int:
        """Number of trained networks ``S`` (one per seed)."""
        return int(self.f.shape[0])

    def _raw(self, name: str, layer) -> np.ndarray:
        """``(S, ...)`` samples of ``name`` (at book layer ``layer`` for ``'phi'``, ``'g'``)."""
        if name not in self._NAMES:
            raise DomainError(f"unknown quantity name={name!r}; choose from {list(self._NAMES)}")
        x = getattr(self, name)
        if name in ("phi", "g") and layer is None:
            return x                                     # all layers, layer l at index l - 1
        if name in ("phi", "g"):
            if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)) \
                    or int(layer) not in self.layers:
                raise DomainError(f"{name!r} is per layer: give layer= one of {list(self.layers)} "
                                  f"(book numbering), got layer={layer!r}")
            return x[:, int(layer) - 1]
        if layer is not None:
            raise DomainError(f"{name!r} has no layer axis; drop layer={layer!r}")
        return x

    def value(self, name: str, layer: int | None = None) -> np.ndarray:
        """Mean over the networks of ``name`` (``docs/conventions.md``, Results).

        Parameters
        ----------
        name : {'f', 'loss', 'phi', 'g', 'ntk'}
            ``'f'`` ``(T, n[, C])``, ``'loss'`` ``(T,)``, ``'phi'``/``'g'`` two-time
            ``(T, n, T, n)`` (``g``: ``(T, n, T, n, C, C)`` with ``C`` outputs) of hidden layer
            ``layer``, ``'ntk'`` equal-time ``(T, n, n[, C, C])``.
        layer : int, optional
            Book layer number ``1 .. hidden_layers``, for ``'phi'`` and ``'g'`` only (``None``
            there: every layer, with a leading layer axis, layer ``l`` at index ``l - 1``).
        """
        return self._raw(name, layer).mean(axis=0)

    def mean(self, name: str, layer: int | None = None) -> np.ndarray:
        """Alias of :meth:`value`."""
        return self.value(name, layer)

    def stderr(self, name: str, layer: int | None = None) -> np.ndarray | None:
        """Standard error over the networks of :meth:`value` (sample standard deviation
        ``/ sqrt(S)``); ``None`` with only one network (no spread to estimate it from)."""
        x = self._raw(name, layer)
        if x.shape[0] < 2:
            return None
        return x.std(axis=0, ddof=1) / np.sqrt(x.shape[0])

    def __repr__(self) -> str:
        C = f", outputs={self.f.shape[-1]}" if self.f.ndim == 4 else ""
        return (f"TrainingRun(networks={self.networks}, {depth_text(self.depth)}, widths={self.widths}, activation={activation_text(self.activation)}, "
                f"gamma0={self.gamma0:g}, eta={self.eta:g}, steps={self.f.shape[1]}, "
                f"inputs={self.f.shape[2]}{C})")

    def _repr_html_(self) -> str:
        rows = [("networks", self.networks), ("depth", self.depth),
                ("hidden_layers", self.hidden_layers), ("widths", self.widths),
                ("activation", activation_text(self.activation)), ("gamma0", f"{self.gamma0:g}"),
                ("eta", f"{self.eta:g}"), ("steps T", self.f.shape[1]),
                ("samples n", self.f.shape[2]),
                ("final loss (mean)", f"{float(self.loss[:, -1].mean()):.4g}")]
        return html_table("TrainingRun", rows)


def _resolve_callables(activation):
    """``(label, phi, phi')`` from a registry name/alias, an ``Activation`` or a SymPy expression."""
    act = get_activation(activation)
    plain = act.family != "user" and not act.params
    if plain and act.name in ACTIVATIONS:
        return act.name, ACTIVATIONS[act.name]
    if act.singular_part(1):
        raise DomainError(f"activation={act!r} has a jump (its derivative is a delta function); "
                          "gradient descent needs a derivative that is a function (a.e.)")
    label = act if act.family == "user" else act.name
    return label, (act.numpy(0), act.numpy(1))


def _real_array(a, name: str) -> np.ndarray:
    """``a`` as a finite float array (effth._validate.real_array with finite entries)."""
    return real_array(a, name, finite=True)


def _real_scalar(v, name: str) -> float:
    """A real Python/NumPy/SymPy number as float (effth._validate.real_scalar)."""
    return real_scalar(v, name)


def _resolve_seeds(seed, networks=None) -> tuple:
    """One entry per network: ints, a sequence of ints, a SeedSequence, a Generator, or None;
    with ``networks=k``, ``k`` independent children of ``seed`` (``SeedSequence.spawn``)."""
    s = _check_seed(seed)
    if networks is not None:
        k = integer(networks, "networks", minimum=1)
        check_networks(k, 0.0, "training")               # before spawning k children
        if isinstance(s, (np.random.SeedSequence, np.random.Generator)):
            return tuple(s.spawn(k))
        if s is None or isinstance(s, int):
            return tuple(np.random.SeedSequence(s).spawn(k))
        if len(s) != k:
            raise DomainError(f"networks={k} but seed lists {len(s)} seeds (one per network): "
                              "give one of them")
        return s
    if s is None:
        return (np.random.SeedSequence(),)
    if isinstance(s, (np.random.SeedSequence, np.random.Generator, int)):
        return (s,)
    return s


def _resolve_widths(widths, hidden_layers: int) -> tuple:
    """One hidden width per hidden layer ``(N_1, .., N_L)`` from an int or a sequence of ints."""
    if isinstance(widths, (bool, np.bool_)):
        raise DomainError(f"widths must be a positive int, got {widths!r}")
    if np.ndim(widths) == 0:
        w = [widths] * hidden_layers
    else:
        w = list(np.asarray(widths).ravel())
        if len(w) != hidden_layers:
            raise DomainError(f"widths needs one width per hidden layer ({hidden_layers}), "
                              f"got {len(w)}: {widths!r}")
    try:
        vals = [int(v) for v in w]
    except (TypeError, ValueError):
        raise DomainError(f"widths must be positive integers, got {widths!r}") from None
    if any(v != x or v < 1 for v, x in zip(vals, w)):
        raise DomainError(f"widths must be positive integers, got {widths!r}")
    return tuple(vals)


@public
def simulate_training(X, y, *, depth: int | None = None, hidden_layers: int | None = None,
                      widths, gamma0: float, eta: float, steps: int, activation="tanh", seed=0,
                      networks: int | None = None, X_test=None, parameterization: str = "mean_field", center: bool = True,
                      record_kernels: bool = True, weight_decay: float = 0.0,
                      bias: bool = False, record_preactivations: bool = False,
                      progress: bool | None = None, temperature: float = 0.0,
                      momentum: float = 0.0, weight_variances=None) -> TrainingRun:
    """Train width-``N`` networks by full-batch GD and record outputs and kernels.

    Parameters
    ----------
    X : array_like, shape (P, D)
        Training inputs.
    y : array_like, shape (P,) or (P, C)
        Targets; a 2-D ``y`` trains ``C`` outputs ``f_c = m w^L_c . phi(h^L) / gamma`` (seed
        App. I), and the output axis ``c`` is appended to ``f`` and (as ``c, c'``) to ``g``, ``ntk``.
    depth, hidden_layers : int
        Give exactly one: ``depth`` weight layers (output included, ``>= 2``) or
        ``hidden_layers = depth - 1`` (the paper's ``L``).
    widths : int or sequence of int
        The hidden width ``N``, or one width ``N_l`` per hidden layer (Bordelon & Pehlevan
        (2022), App. D.8).  With unequal widths the reference width is the last one,
        ``N = N_L`` (the paper's choice), ``gamma = gamma0 sqrt(N_L)``, the learning rates stay
        ``eta gamma^2`` (mean field), each layer's multiplier is ``1 / sqrt(fan-in)``
        (``'mup'``: hidden weight ``W^l ~ N(0, 1 / N_l)`` with learning rate
        ``eta gamma^2 / N_l``), ``g^l = gamma sqrt(N_l) df/dh^l`` and the kernels are normalized by
        their own width, ``Phi^l = phi(h^l) . phi(h^l) / N_l``.  The DMFT counterpart is
        ``width_ratios = (N_1 / N_L, .., 1)`` (:func:`effth.dmft.solve_deep_linear`): layer ``l``
        feels ``gamma0 / sqrt(a_l)``.  ``record_preactivations`` needs equal widths.
    weight_variances : sequence of float, optional
        ``sigma_0^2 .. sigma_L^2 > 0``, one per weight layer (input ``W^0``, hidden
        ``W^1 .. W^{L-1}``, readout ``w^L``): the initial weights are drawn as before and scaled
        by ``sigma_l`` (Bordelon & Pehlevan (2022), App. D.8: ``W^l_ij ~ N(0, sigma_l^2)``, times
        ``1 / fan-in`` under ``'mup'``); the learning rates and the biases are unchanged.
        ``None`` or all ones: the unit-variance networks, bit for bit.  The DMFT counterpart is
        ``solve_deep_linear(..., weight_variances=...)``.
    gamma0 : float
        Feature-learning strength (``gamma = gamma0 sqrt(N)``); must be nonzero.
    eta : float
        DMFT time step; the parameter learning rate is ``eta gamma0^2 N`` (mean field).
    steps : int
        Number of recorded steps ``T`` (``T - 1`` updates).
    activation : str, Activation or sympy.Expr
        Any registered name or alias, :class:`~effth.activations.Activation` or SymPy expression
        in ``z`` whose first derivative is a function (smooth ones, and kinked ones with an a.e.
        derivative such as ReLU, leaky ReLU, abs); a step (derivative a delta) is rejected.
    seed : int, sequence of int, SeedSequence, Generator or None
        One independent network per seed (``numpy.random.default_rng(seed)``); a sequence of
        ints trains one network per entry.
    networks : int, optional
        Train this many independent networks, seeded by the children
        ``SeedSequence(seed).spawn(networks)`` (``seed`` then one int, SeedSequence or Generator).
    X_test : array_like, shape (Q, D), optional
        Test inputs, recorded but not trained on.
    parameterization : {'mean_field', 'mup'}
        See the module docstring; both give the same trajectories up to rounding.
    center : bool
        Train and report the centred output ``f(theta) - f(theta_0)`` (corrected here: removes the
        ``O(1/(gamma0 sqrt N))`` initial offset, which the DMFT sets to 0; gradients unchanged).
    record_kernels : bool
        Form the two-time kernels (memory ``S L (T n)^2``); else ``phi`` and ``g`` hold only the
        equal-time diagonal blocks in the same layout (other entries zero).
    weight_decay : float
        ``lambda >= 0``: each GD step is ``theta <- (1 - eta lambda) theta + lr * grad`` for every
        parameter (the discrete form of ``d theta/dt = -gamma^2 grad L - lambda theta``, seed
        App. J).  With ``center`` the constant ``f(theta_0)`` is still subtracted.
    bias : bool
        Trainable biases on every preactivation, ``h^{l} += b^{l}`` (``l = 1 .. L``), ``b(0) ~ N(0, 1)``,
        learning rate ``eta gamma0^2 N`` in both parameterizations (Bordelon & Pehlevan (2022), App. H:
        ``db/dt = gamma0 sum_mu Delta_mu g_mu``); each adds ``G^l`` to the NTK (corrected here).  For
        ``L = 1`` this is the input-kernel shift ``K^x -> K^x + 1``.
    record_preactivations : bool
        Keep every neuron's preactivation ``h^l_{mu i}(t)`` (``TrainingRun.h``, memory
        ``S L T n N``) -- the finite-width counterpart of the DMFT's single-site fields (seed
        Fig. 1b-c).
    progress : bool, optional
        Progress bar over the networks (``docs/conventions.md``).
    temperature : float
        Langevin temperature ``1/beta >= 0`` (Bordelon & Pehlevan (2022), App. K, eq. (100)): each
        step adds independent Gaussian noise to every parameter, of variance
        ``temperature (1 - rho^2) / weight_decay`` (``2 eta temperature`` without decay; the
        Euler-Maruyama ``2 eta / beta`` up to ``O(eta^2)``, chosen so that the Gaussian prior of
        variance ``temperature / weight_decay`` is exactly invariant under decay plus noise), in
        the mean-field units of the parameter (divided by ``sqrt(N)`` for the hidden and readout
        weights of ``'mup'``).  The noise is drawn from the network's own generator after its
        initial weights (these are unchanged).
    momentum : float
        Heavy-ball coefficient ``mu`` in ``[0, 1)`` (Bordelon & Pehlevan (2022), App. L, eq. (122)
        in discrete time, ``mu = exp(-eta / tau)``): ``v <- mu v + (1 - mu) (lr grad - eta lambda
        theta)``, ``theta <- theta + v`` (``torch.optim.SGD`` with ``momentum = dampening = mu``);
        ``mu = 0`` is the GD step above.  With ``temperature > 0`` (underdamped Langevin
        dynamics) the noise is added to the increment, ``v <- mu v + (1 - mu) (lr grad - eta
        lambda theta + sigma xi)``, with ``sigma^2 = temperature eta (2 - eta lambda (1 - mu) /
        (1 + mu))`` (:func:`effth.dmft.grid.langevin_noise`: the prior of variance
        ``temperature / weight_decay`` stays invariant).

    Returns
    -------
    TrainingRun
    """
    L = resolve_depth(depth, hidden_layers, minimum=2) - 1       # hidden layers from here on
    Ns = _resolve_widths(widths, L)
    width = Ns[0] if len(set(Ns)) == 1 else Ns
    if record_preactivations and len(set(Ns)) > 1:
        raise DomainError("record_preactivations=True needs equal hidden widths (the array "
                          "(S, L, T, n, N) has one N); give one int for widths")
    act_label, fns = _resolve_callables(activation)
    if parameterization not in ("mean_field", "mup"):
        raise DomainError(f"parameterization={parameterization!r}: use 'mean_field' or 'mup'")
    gamma0, eta, weight_decay = (_real_scalar(v, k) for v, k in
                                 ((gamma0, "gamma0"), (eta, "eta"), (weight_decay, "weight_decay")))
    if not (np.isfinite(gamma0) and gamma0 != 0):
        raise DomainError(f"gamma0={gamma0!r} must be finite and nonzero (output factor 1/gamma0)")
    if not (np.isfinite(eta) and eta > 0):
        raise DomainError(f"eta={eta!r} must be positive")
    if not (np.isfinite(weight_decay) and 0 <= eta * weight_decay < 1):
        raise DomainError(f"weight_decay={weight_decay!r} must satisfy 0 <= eta * weight_decay < 1")
    temperature, momentum = _optimizer_settings(temperature, momentum)
    variances = weight_variance_values(weight_variances, L + 1)
    X = _real_array(X, "X")
    y = _real_array(y, "y")
    if X.ndim != 2 or X.shape[0] < 1 or X.shape[1] < 1:
        raise DomainError(f"X must be a 2-D array (P, D) with P, D >= 1, got shape {X.shape}")
    if y.ndim not in (1, 2) or y.shape[0] != X.shape[0] or (y.ndim == 2 and y.shape[1] < 1):
        raise DomainError(f"y must be (P,) or (P, C) with P = X.shape[0] = {X.shape[0]} rows, "
                          f"got shape {y.shape} (X: {X.shape})")
    multi = y.ndim == 2
    Y = y.reshape(y.shape[0], -1)
    if X_test is not None:
        Xt = _real_array(X_test, "X_test")
        if Xt.ndim != 2 or Xt.shape[1] != X.shape[1]:
            raise DomainError(f"X_test must be 2-D with X's {X.shape[1]} columns (Q, "
                              f"{X.shape[1]}), got shape {Xt.shape}")
        X = np.vstack([X, Xt])
    if (isinstance(steps, (bool, np.bool_)) or not isinstance(steps, (int, np.integer, float,
                                                                      np.floating))
            or not np.isfinite(steps) or int(steps) != steps or steps < 1):
        raise DomainError(f"steps={steps!r} must be a positive integer")
    seeds = _resolve_seeds(seed, networks)
    Ns = (width,) * L if np.ndim(width) == 0 else tuple(width)
    T_, n_, C_, N_ = float(steps), float(X.shape[0]), float(Y.shape[1]), float(max(Ns))
    work = (L * T_ * n_ * N_ * (1 + C_ + bool(record_preactivations))
            + sum(float(Ns[k]) * Ns[k + 1] for k in range(L - 1)) + Ns[0] * X.shape[1])
    kept = L * T_ * T_ * n_ * n_ * (1 + C_ * C_) + T_ * n_ * (C_ + 1)
    check_memory(8.0 * (work + 2 * len(seeds) * kept),
                 f"{len(seeds)} network(s) of width {width} trained for {int(steps)} steps "
                 f"(two-time kernels Phi, G of shape ({L}, T, {int(n_)}, T, {int(n_)}) with "
                 f"T = {int(steps)})", "lower steps (the kernels grow as steps**2), widths or "
                 "networks")
    runs = []
    # one network at a time, N x N products: BLAS threads only oversubscribe (effth._threads)
    with blas_threads(), progress_bar(len(seeds), "training networks", progress=progress,
                                      unit="net") as bar:
        for s in seeds:
            runs.append(_train_one(X, Y, L, Ns, float(gamma0), float(eta), int(steps),
                                   fns, s, parameterization, center, record_kernels,
                                   float(weight_decay), bool(bias), bool(record_preactivations),
                                   temperature, momentum, variances))
            bar.update()
    f, loss, phi, g = (np.stack([r[k] for r in runs]) for k in range(4))
    h = np.stack([r[4] for r in runs]) if record_preactivations else None
    kx = X @ X.T / X.shape[1]
    T, C = int(steps), Y.shape[1]
    idx = np.arange(T)
    phid = phi[:, :, idx, :, idx, :].transpose(1, 2, 0, 3, 4)       # (S, L, T, n, n)
    gd = g[:, :, idx, :, idx, :].transpose(1, 2, 0, 3, 4, 5, 6)     # (S, L, T, n, n, C, C)
    one = 1.0 if bias else 0.0
    ntk = gd[:, 0] * (kx + one)[..., None, None] + phid[:, -1][..., None, None] * np.eye(C)
    for ell in range(1, L):
        ntk = ntk + gd[:, ell] * (phid[:, ell - 1] + one)[..., None, None]
    if not multi:
        f, g, ntk = f[..., 0], g[..., 0, 0], ntk[..., 0, 0]
    return TrainingRun(f=f, loss=loss, phi=phi, g=g, ntk=ntk, kx=kx, widths=width,
                       hidden_layers=L, gamma0=float(gamma0), eta=float(eta), seed=seeds, h=h,
                       activation=act_label)


#: a run whose training loss exceeds this multiple of max(initial loss, |y|^2 / 2) has diverged
_RUNAWAY = 1e6


class _Diverged(Exception):
    def __init__(self, step, loss, ref):
        super().__init__(step)
        self.step, self.loss, self.ref = step, loss, ref


def _lazy_bound(phis, es, X, P, C, Ns, gamma0, bias):
    """``2 / lambda_max`` of the network's NTK on the training points at initialization (the
    stability edge of GD on a frozen NTK), from the recorded features and backprop signals."""
    D = X.shape[1]
    one = 1.0 if bias else 0.0
    kx = X[:P] @ X[:P].T / D
    Ns = (Ns,) * len(es) if np.ndim(Ns) == 0 else tuple(Ns)
    N = Ns[-1]
    gs = [gamma0 * np.sqrt(N * Nk) * e[:P] for e, Nk in zip(es, Ns)]     # g^l, (P, N_l, C)
    G = [np.einsum("aic,bid->acbd", g, g) / Nk for g, Nk in zip(gs, Ns)]  # (P, C, P, C)
    Ph = [ph[:P] @ ph[:P].T / Nk for ph, Nk in zip(phis, Ns)]
    K = G[0] * (kx + one)[:, None, :, None]
    for ell in range(1, len(G)):
        K = K + G[ell] * (Ph[ell - 1] + one)[:, None, :, None]
    K = K + Ph[-1][:, None, :, None] * np.eye(C)[None, :, None, :]
    lam = float(np.linalg.eigvalsh(K.reshape(P * C, P * C))[-1])
    return 2.0 / lam if lam > 0 else np.inf


def _diverged_error(step, loss, ref, eta, bound, momentum=0.0, weight_decay=0.0) -> DomainError:
    what = ("a floating-point overflow" if loss is None else
            "non-finite outputs" if not np.isfinite(loss) else
            f"training loss {loss:.3g} > {_RUNAWAY:g} x its initial scale {ref:.3g}")
    if bound is None:
        edge = ""
    elif momentum == 0:
        edge = (f"; the lazy stability bound is eta < 2 / lambda_max(NTK at initialization) = "
                f"{bound:.4g} (here eta lambda_max / 2 = {eta / bound:.3g}; feature learning "
                "moves the NTK, so the edge of the trained run can lie below it)")
    else:
        # heavy ball (Bordelon & Pehlevan (2022), App. L): eta (lambda_max + lambda) < 2 (1+mu)/(1-mu)
        hb = 2.0 * (1.0 + momentum) / (1.0 - momentum)
        lam = 2.0 / bound
        edge = (f"; the lazy heavy-ball bound is eta (lambda_max(NTK at initialization) + "
                f"weight_decay) < 2 (1 + momentum) / (1 - momentum) = {hb:.4g}, i.e. eta < "
                f"{hb / (lam + weight_decay):.4g} (feature learning moves the NTK, so the edge of "
                "the trained run can lie below it)")
    return DomainError(f"training diverged at step {step} ({what}): eta={eta:g} is beyond the "
                       f"stable range of gradient descent{edge}; lower eta")


def _optimizer_settings(temperature, momentum) -> tuple[float, float]:
    """Validated Langevin temperature and heavy-ball coefficient (:class:`DomainError`)."""
    return langevin_momentum(temperature, momentum)


class _Optimizer:
    """The per-parameter update of every trainer step: decay, heavy-ball momentum and Langevin
    noise around the GD increment ``u = lr * grad`` (one rule for every parameter).

    ``mu = 0``: ``theta <- rho theta + u + sigma c xi``; ``mu > 0``:
    ``v <- mu v + (1 - mu) (u - eta lambda theta + sigma c xi)``, ``theta <- theta + v``
    (``sigma^2`` from :func:`effth.dmft.grid.langevin_noise`).  ``c`` is the
    parameter's scale (``1``, or ``1/sqrt(N)`` for the mup hidden and readout weights)."""

    def __init__(self, eta, weight_decay, temperature, momentum, rng):
        self.rho = 1.0 - eta * weight_decay
        self.decay = eta * weight_decay
        self.mu = momentum
        self.rng = rng
        var = langevin_noise(eta, weight_decay, temperature, momentum)
        self.sigma = float(np.sqrt(var)) if var > 0 else 0.0
        self.v = {}

    def step(self, key, theta, u, scale=1.0):
        if self.mu == 0.0:
            new = self.rho * theta + u
            if self.sigma:
                new = new + (self.sigma * scale) * self.rng.standard_normal(theta.shape)
            return new
        v = self.v.get(key)
        inc = u - self.decay * theta if self.decay else u
        if self.sigma:               # underdamped Langevin: the noise enters the increment
            inc = inc + (self.sigma * scale) * self.rng.standard_normal(theta.shape)
        v = (1.0 - self.mu) * inc if v is None else self.mu * v + (1.0 - self.mu) * inc
        self.v[key] = v
        return theta + v


def _train_one(X, Y, L, Ns, gamma0, eta, T, fns, seed, parameterization, center, record,
               weight_decay=0.0, bias=False, keep_h=False, temperature=0.0, momentum=0.0,
               variances=None):
    act, dact = fns
    n, D = X.shape
    P, C = Y.shape
    Ns = (Ns,) * L if np.ndim(Ns) == 0 else tuple(Ns)
    N = Ns[-1]                                           # reference width (App. D.8: N = N_L)
    rng = np.random.default_rng(seed)
    mf = parameterization == "mean_field"
    # weights drawn identically in both parameterizations (so trajectories can be compared)
    W0 = rng.standard_normal((Ns[0], D))
    Ws = [rng.standard_normal((Ns[k + 1], Ns[k])) for k in range(L - 1)]
    w = rng.standard_normal(N) if C == 1 else rng.standard_normal((N, C))
    w = w.reshape(N, C)
    bs = [rng.standard_normal(Ns[k]) if bias else np.zeros(Ns[k]) for k in range(L)]
    if variances is not None:                    # W^l(0) ~ N(0, sigma_l^2) (App. D.8)
        sd = np.sqrt(np.asarray(variances))
        W0 = sd[0] * W0
        Ws = [sd[k + 1] * W for k, W in enumerate(Ws)]
        w = sd[L] * w
    # per-layer multipliers 1/sqrt(fan-in) (mean field) or 1 (mup, weights N(0, 1/fan-in))
    ms = [1.0 / np.sqrt(Nk) if mf else 1.0 for Nk in Ns]
    if not mf:
        Ws = [W / np.sqrt(Ns[k]) for k, W in enumerate(Ws)]
        w = w / np.sqrt(N)
    lr0 = eta * gamma0 ** 2 * N
    lrs = [lr0 if mf else eta * gamma0 ** 2 * (N / Nk) for Nk in Ns]   # hidden W^l and readout
    inv_gamma = 1.0 / (gamma0 * np.sqrt(N))
    opt = _Optimizer(eta, weight_decay, temperature, momentum, rng)
    css = [1.0 if mf else 1.0 / np.sqrt(Nk) for Nk in Ns]   # scale of hidden and readout weights
    feats = [np.zeros((T, n, Nk)) for Nk in Ns]
    pre = np.zeros((L, T, n, N)) if keep_h else None
    grads = [np.zeros((T, n, Nk, C)) for Nk in Ns]
    f_rec = np.zeros((T, n, C))
    f0 = None
    t, bound = 0, None
    try:
        with np.errstate(over="raise", invalid="raise"):
            for t in range(T):
                # the shared batched pass (network axis of length 1): layer multipliers
                # 1/sqrt(D), m (hidden), m / gamma (readout, no bias)
                layers = [W0[None]] + [W[None] for W in Ws] + [w.T[None]]
                fp = _mlp.forward(layers, [b[None] for b in bs] + [None], X, act, dact,
                                  scales=(1.0 / np.sqrt(D),) + tuple(ms[:-1]) + (ms[-1] * inv_gamma,))
                hs = [z[0] for z in fp.z[:-1]]
                phis = [a[0] for a in fp.s[1:]]
                f = fp.out[0]                                                     # (n, C)
                if f0 is None:
                    f0 = f.copy() if center else np.zeros((n, C))
                f = f - f0
                # backprop e^l_c = df_c/dh^l, shape (n, N, C)
                jac = _mlp.backward(layers, fp, np.broadcast_to(np.eye(C), (1, n, C, C)))
                es = [np.swapaxes(g[0], -1, -2) for g in jac[:-1]]
                f_rec[t] = f
                loss_t = 0.5 * float(np.sum((Y - f[:P]) ** 2))
                if t == 0:
                    loss_ref = max(loss_t, 0.5 * float(np.sum(Y ** 2))) or 1.0
                    bound = _lazy_bound(phis, es, X, P, C, Ns, gamma0, bias)
                if not (np.all(np.isfinite(f)) and loss_t <= _RUNAWAY * loss_ref):
                    raise _Diverged(t, loss_t, loss_ref)
                for ell in range(L):
                    feats[ell][t] = phis[ell]
                    if keep_h:
                        pre[ell, t] = hs[ell]
                    # g^l = gamma sqrt(N_l) df/dh^l (= gamma0 N df/dh^l at equal widths)
                    grads[ell][t] = (gamma0 * N * es[ell] if Ns[ell] == N else
                                     gamma0 * np.sqrt(N) * np.sqrt(Ns[ell]) * es[ell])
                if t == T - 1:
                    break
                delta = np.zeros((n, C))
                delta[:P] = Y - f[:P]
                # GD: theta <- rho theta + lr * sum_mu,c Delta_mu,c df_mu,c/dtheta  (rho = 1 - eta lambda),
                # with momentum and Langevin noise around it (_Optimizer)
                back = [np.einsum("mjc,mc->mj", e, delta) for e in es]           # sum_c Delta_c e_c
                w = opt.step("w", w, lrs[-1] * (ms[-1] * inv_gamma) * (phis[-1].T @ delta),
                             css[-1])
                for ell in range(L - 1):
                    Ws[ell] = opt.step(("W", ell), Ws[ell],
                                       lrs[ell] * ms[ell] * back[ell + 1].T @ phis[ell], css[ell])
                W0 = opt.step("W0", W0, lr0 * back[0].T @ X / np.sqrt(D))
                if bias:
                    bs = [opt.step(("b", k), b, lr0 * bk.sum(axis=0))
                          for k, (b, bk) in enumerate(zip(bs, back))]
    except FloatingPointError:
        raise _diverged_error(t, None, None, eta, bound, momentum, weight_decay) from None
    except _Diverged as exc:
        raise _diverged_error(exc.step, exc.loss, exc.ref, eta, bound, momentum,
                              weight_decay) from None
    loss = 0.5 * np.sum((Y[None] - f_rec[:, :P]) ** 2, axis=(1, 2))
    # kernels normalized by each layer's own width (App. D.8, eq. (55))
    if record:
        phi = np.stack([np.einsum("tan,sbn->tasb", fe, fe, optimize=True) / Nk
                        for fe, Nk in zip(feats, Ns)])
        g = np.stack([np.einsum("tanc,sbnd->tasbcd", gr, gr, optimize=True) / Nk
                      for gr, Nk in zip(grads, Ns)])
    else:
        phi = np.zeros((L, T, n, T, n))
        g = np.zeros((L, T, n, T, n, C, C))
        idx = np.arange(T)
        for ell in range(L):
            phi[ell, idx, :, idx, :] = np.einsum("tan,tbn->tab", feats[ell], feats[ell]) / Ns[ell]
            g[ell, idx, :, idx, :] = np.einsum("tanc,tbnd->tabcd", grads[ell],
                                               grads[ell]) / Ns[ell]
    return f_rec, loss, phi, g, pre
