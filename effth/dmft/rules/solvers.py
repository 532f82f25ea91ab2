r"""Learning rules at infinite width: GD, ρ-FA, DFA, error-modulated Hebb and gated linear networks.

Bordelon & Pehlevan, *The influence of learning rule on representation dynamics in wide neural
networks* (ICLR 2023) put every rule into one form: the hidden weights move along
:math:`\dot W^\ell \propto \sum_\mu \Delta_\mu \tilde g^{\ell+1}_\mu \phi(h^\ell_\mu)^\top` with a
rule-specific *pseudo-gradient* :math:`\tilde g` (eqs. (2)-(3)), the readout is always trained by
the delta rule, and the function obeys :math:`\dot f = K \Delta` with the effective NTK (eq. (4))

.. math:: K_{\mu\nu} = \sum_{\ell=0}^{L} \tilde G^{\ell+1}_{\mu\nu}\,\Phi^\ell_{\mu\nu},\qquad
          \tilde G^\ell = \langle g^\ell \tilde g^\ell\rangle,\ \tilde G^{L+1} = 1,\ \Phi^0 = K^x,

which is in general not symmetric.  This module gives

* the rule objects (:func:`learning_rule`, :class:`LearningRule`), accepted by the solvers here
  and by the ground-truth trainer :func:`effth.simulation.simulate_rule_training`;
* the lazy (``gamma0 -> 0``) eNTK of every rule in closed form for any activation and depth
  (:func:`lazy_entk`, Table 2 and eq. (56), with the gated-network factor ``L + 1``);
* the exactly solvable two-layer linear models with whitened data (:func:`two_layer_exact`,
  App. F: eqs. (66)-(73));
* the rich-regime DMFT of deep linear networks for every rule by exact causal marching in time
  (:func:`solve_rule_deep_linear`, App. E, corrected);
* the rich-regime DMFT of two-layer networks of any activation for every rule
  (:func:`solve_rule_two_layer`: Algorithm 1 at ``L = 1``, where no responses are needed) and of
  deep networks of any activation trained by DFA, Hebb (their forward fields close without
  responses) or ρ-FA (with the sampled responses ``C``, ``D``), with the true-gradient kernels
  and the eNTK marched on the same samples (:func:`solve_rule_forward`);
* the finite-width NLO kernel covariances at initialization (:func:`kernel_fluctuations`,
  App. H.3);
* diagnostics: kernel--task alignment, ``corr(g, g~)`` and ``H_y`` (Figs. 1, 3, 5).

Corrections to the printed paper used here (each re-derived, and checked against trained
networks in the tests): the printed Table 2 gives the gated-linear-network kernel without the
factor ``L + 1``; the correct form is ``(L + 1) M^{⊙L} ⊙ K^x`` (every layer contributes
``G^{ℓ+1} Φ^ℓ = M^{⊙L} ⊙ K^x``).  The printed (7) omits a factor 2; the correct form is
``dΔ/dt = -2 H_y Δ`` (the eNTK is ``G + H_y = 2 H_y``).  The printed Hebb fixed point omits a
factor 4; the correct form is ``Δ = [y ± sqrt(y^2 + 4 H / gamma0)] / 2``.  The printed second line of (58)
reads ``r + γ0² (B + G)(A + H) r``; the correct form is
``g = (I - γ0² B̄ Ā)^{-1}(r + γ0 B̄ u)``.  The printed (62) and (64) carry ``G^{ℓ+1}_Δ``; the
correct kernel there is ``G̃^{ℓ+1}_Δ`` (the weights move along ``g̃``).  The printed (10) and (40)
index the pseudo-gradient in the ``Φ Δ`` and ``C`` terms by ``μ``; the correct index is ``ν``.
"""

from __future__ import annotations

from effth import _validate as _v
from effth._signature import public

import time
from dataclasses import dataclass, field

import numpy as np

from effth._threads import limits_blas_threads

from effth._display import depth_text, html_table, short
from effth._results import HiddenLayers
from effth._validate import integer, real_array, real_scalar
from effth.errors import ConvergenceError, DomainError, NotDerivedError
from effth.numerics import gaussian_expectation
from effth.dmft.solvers.deep_linear import RuleFields, _march, _Model
from effth.dmft.grid import TimeGrid, TrainingData, langevin_settings, prepare_targets
from effth.dmft.solvers.lazy import (
    _pair_cov,
    hidden_layer_count,
    is_linear,
    lazy_kernels,
    resolve_activation,
)
from effth.dmft._batches import batch_gram
from effth.dmft.rules._filter import RuleFilter
from effth.dmft.metrics import target_alignment

__all__ = [
    "RULES",
    "KernelFluctuations",
    "LazyENTK",
    "LearningRule",
    "RuleDMFTResult",
    "TwoLayerSolution",
    "fa_fixed_point",
    "gradient_correlation",
    "kernel_fluctuations",
    "lazy_entk",
    "learning_rule",
    "solve_rule_deep_linear",
    "solve_rule_forward",
    "solve_rule_two_layer",
    "target_overlap",
    "task_alignment",
    "two_layer_exact",
]

#: canonical rule names and their aliases
RULES = {"gd": "gd", "gradient_descent": "gd", "backprop": "gd",
         "fa": "fa", "rho_fa": "fa", "feedback_alignment": "fa",
         "dfa": "dfa", "direct_feedback_alignment": "dfa",
         "hebb": "hebb", "hebbian": "hebb",
         "gln": "gln", "gated": "gln", "gated_linear": "gln"}

_TITLES = {"gd": "gradient descent", "fa": "ρ-aligned feedback alignment",
           "dfa": "direct feedback alignment", "hebb": "error-modulated Hebb",
           "gln": "gated linear network (GD)"}

_PSEUDO_LATEX = {
    "gd": r"\tilde g^\ell = \dot\phi(h^\ell)\odot\tfrac{1}{\sqrt N}W^\ell(t)^\top\tilde g^{\ell+1}",
    "fa": (r"\tilde g^\ell = \dot\phi(h^\ell)\odot\tfrac{1}{\sqrt N}\big(\rho W^\ell(0)"
           r"+\sqrt{1-\rho^2}\,\tilde W^\ell\big)^\top\tilde g^{\ell+1}"),
    "dfa": r"\tilde g^\ell = \dot\phi(h^\ell)\odot\tilde z^\ell,\ \tilde z^\ell_i\sim\mathcal N(0,1)",
    "hebb": r"\tilde g^\ell_\mu = \Delta_\mu\,\phi(h^\ell_\mu)",
    "gln": r"\tilde g^\ell = \dot\phi(m^\ell)\odot\tfrac{1}{\sqrt N}W^\ell(t)^\top\tilde g^{\ell+1}",
}


@public
@dataclass(frozen=True)
class LearningRule:
    r"""A learning rule of Bordelon & Pehlevan (ICLR 2023), eqs. (2)-(3) and Table 1.

    Attributes
    ----------
    name : {'gd', 'fa', 'dfa', 'hebb', 'gln'}
        Gradient descent, ρ-aligned feedback alignment, direct feedback alignment,
        error-modulated Hebb (two powers of the error, App. G) and gated linear networks.
    rho : float
        Correlation of the frozen feedback with the initial forward weights (``'fa'`` only,
        ``-1 <= rho <= 1``; ``B^ℓ = rho W^ℓ(0) + sqrt(1 - rho^2) W~^ℓ``).  ``1.0`` for GD/GLN and
        ``0.0`` for DFA and Hebb (whose pseudo-gradients carry no information on ``W``).
    """

    name: str
    rho: float = 1.0

    def __post_init__(self):
        if self.name not in _TITLES:
            raise DomainError(f"unknown learning rule {self.name!r}; known: {sorted(_TITLES)}")
        rho = real_scalar(self.rho, "rho")
        if not np.isfinite(rho) or not -1.0 <= rho <= 1.0:
            raise DomainError(f"rho={self.rho!r} must be a finite number in [-1, 1] (the "
                              "correlation of the feedback with the forward weights)")
        object.__setattr__(self, "rho", rho)

    @property
    def title(self) -> str:
        return _TITLES[self.name] + (f" (ρ = {self.rho:g})" if self.name == "fa" else "")

    def latex(self) -> str:
        """The pseudo-gradient of the rule (Table 1) in the paper's notation."""
        s = _PSEUDO_LATEX[self.name]
        return s + (rf",\quad \rho={self.rho:g}" if self.name == "fa" else "")

    def __repr__(self) -> str:
        return f"LearningRule('{self.name}', rho={self.rho:g})" if self.name == "fa" else \
            f"LearningRule('{self.name}')"

    def _repr_html_(self) -> str:
        return html_table("LearningRule", [("rule", self.title),
                                           ("pseudo-gradient", f"${self.latex()}$")])


@public
def learning_rule(rule="gd", rho=None) -> LearningRule:
    """A :class:`LearningRule` from a name (``'gd'``, ``'fa'``, ``'dfa'``, ``'hebb'``, ``'gln'``
    and aliases) or a rule object.

    ``rho`` is the feedback alignment of ``'fa'`` (default 0, plain FA); giving it with another
    rule raises :class:`DomainError`.
    """
    if isinstance(rule, LearningRule):
        if rho is not None and real_scalar(rho, "rho") != rule.rho:
            raise DomainError(f"rho={rho!r} contradicts the rule object {rule!r}")
        return rule
    if hasattr(rule, "name") and hasattr(rule, "rho"):         # duck-typed rule objects
        return LearningRule(str(rule.name), rule.rho)
    if not isinstance(rule, str):
        raise DomainError(f"rule must be a name or a LearningRule, got {rule!r}")
    key = RULES.get(rule.strip().lower().replace("-", "_").replace(" ", "_"))
    if key is None:
        raise DomainError(f"unknown learning rule {rule!r}; known: {sorted(set(RULES))}")
    if key == "fa":
        return LearningRule("fa", 0.0 if rho is None else rho)
    if rho is not None:
        raise DomainError(f"rho is a parameter of feedback alignment only, not of {key!r}")
    return LearningRule(key, 0.0 if key in ("dfa", "hebb") else 1.0)


# ================================================================== lazy limit (Table 2)

@public
@dataclass
class LazyENTK:
    r"""The frozen eNTK of a rule in the lazy limit (Table 2, eqs. (6), (55)-(56)).

    Attributes
    ----------
    rule : LearningRule
    hidden_layers : int
        ``L``.
    activation : str
    phi : ndarray, shape (L, n, n)
        ``Φ^ℓ``, ``ℓ = 1..L`` (for GLN, ``M^{⊙ℓ} ⊙ K^x``).
    g : ndarray, shape (L, n, n)
        True-gradient kernels ``G^ℓ``.
    gtilde : ndarray, shape (L, n, n)
        ``G̃^ℓ = <g^ℓ g̃^ℓ>``.
    ntk : ndarray, shape (n, n)
        ``K = Σ_ℓ G̃^{ℓ+1} ⊙ Φ^ℓ``.
    kx : ndarray, shape (n, n)
    """

    rule: LearningRule
    hidden_layers: int
    activation: str
    kx: np.ndarray
    phi: np.ndarray
    g: np.ndarray
    gtilde: np.ndarray
    ntk: np.ndarray

    @property
    def layers(self) -> tuple:
        return tuple(range(1, self.hidden_layers + 1))

    def value(self, name: str, layer: int | None = None) -> np.ndarray:
        """``'ntk'`` ``(n, n)``; ``'phi'``, ``'g'``, ``'gtilde'`` of hidden layer ``layer``
        (``None``: all, layer ``ℓ`` at index ``ℓ - 1``)."""
        if name == "ntk":
            if layer is not None:
                raise DomainError("'ntk' has no layers")
            return self.ntk
        if name not in ("phi", "g", "gtilde"):
            raise DomainError(f"unknown quantity {name!r}; known: 'ntk', 'phi', 'g', 'gtilde'")
        arr = getattr(self, name)
        if layer is None:
            return arr
        if isinstance(layer, bool) or layer not in self.layers:
            raise DomainError(f"layer={layer!r} is not held; layers are {list(self.layers)}")
        return arr[int(layer) - 1]

    def stderr(self, name: str, layer: int | None = None):
        """``None``: the closed forms are deterministic."""
        self.value(name, layer)

    def latex(self) -> str:
        """The eNTK in the paper's notation (Table 2), with the rule's ``G̃``."""
        L, r = self.hidden_layers, self.rule
        if r.name == "gd":
            return (r"K=\sum_{\ell=0}^{L}G^{\ell+1}\odot\Phi^{\ell},\quad "
                    r"G^{\ell}=G^{\ell+1}\odot\dot\Phi^{\ell},\ G^{L+1}=1,\ \Phi^0=K^x"
                    + rf",\ L={L}")
        if r.name == "fa":
            return (r"K=\sum_{\ell=0}^{L}\rho^{L-\ell}\,G^{\ell+1}\odot\Phi^{\ell},\quad "
                    r"\tilde G^{\ell}=\rho\,\tilde G^{\ell+1}\odot\dot\Phi^{\ell}=\rho^{L+1-\ell}G^{\ell}"
                    + rf",\ \rho={r.rho:g},\ L={L}")
        if r.name in ("dfa", "hebb"):
            return r"K=\Phi^{L}\quad(\tilde G^{\ell}=0,\ \ell\le L)" + rf",\ L={L}"
        return (r"K=(L+1)\,M^{\odot L}\odot K^x,\quad M=\langle\dot\phi(m)\dot\phi(m)^\top"
                r"\rangle_{m\sim\mathcal N(0,K^x)}" + rf",\ L={L}")

    def __repr__(self) -> str:
        return (f"LazyENTK(rule={self.rule!r}, {depth_text(self.depth)}, activation={self.activation!r}, "
                f"diag={short(np.diag(self.ntk))})")

    def _repr_html_(self) -> str:
        return html_table("Lazy eNTK", [("rule", self.rule.title), ("L", self.hidden_layers),
                                        ("activation", self.activation),
                                        ("K", f"${self.latex()}$"),
                                        ("diag K", short(np.diag(self.ntk)))])


def _kx(kx) -> np.ndarray:
    K = real_array(kx, "kx", finite=True)
    if K.ndim != 2 or K.shape[0] != K.shape[1] or K.shape[0] < 1:
        raise DomainError(f"kx must be a square (n, n) matrix with n >= 1, got shape {K.shape}")
    if not np.allclose(K, K.T, atol=1e-12 * max(1.0, np.abs(K).max())):
        raise DomainError("kx must be symmetric")
    return _v.psd_kernel(0.5 * (K + K.T), "kx")       # an input Gram matrix x.x'/D is PSD


def _gate_kernel(kx: np.ndarray, act) -> np.ndarray:
    """``M = <phi'(m) phi'(m)^T>``, ``m ~ N(0, K^x)``."""
    if is_linear(act):
        return np.ones_like(kx)
    M = gaussian_expectation([(0, "sigma", 1), (1, "sigma", 1)], _pair_cov(kx), act)
    return 0.5 * (M + M.T)


@public
def lazy_entk(kx, activation="relu", *, rule="gd", rho=None, depth=None,
              hidden_layers=None) -> LazyENTK:
    r"""The lazy-limit eNTK of a learning rule (Table 2; eqs. (6), (55), (56)).

    Parameters
    ----------
    kx : array_like, shape (n, n)
        Input kernel ``K^x_{μν} = x_μ · x_ν / D`` (training and test points alike).
    activation : str, Activation or sympy.Expr
        Any activation of the registry (Gaussian expectations by
        :func:`effth.gaussian_expectation`).  For GLN it is the gate nonlinearity: the gate
        factor is ``phi'(m)`` (``'relu'`` gives step gates).
    rule : str or LearningRule
    rho : float, optional
        Feedback alignment for ``rule='fa'``.
    depth, hidden_layers : int
        Give exactly one (``hidden_layers = depth - 1 = L``).

    Returns
    -------
    LazyENTK
        GD: ``Σ_ℓ G^{ℓ+1} Φ^ℓ``; ρ-FA: ``Σ_ℓ ρ^{L-ℓ} G^{ℓ+1} Φ^ℓ``; DFA and Hebb: ``Φ^L``;
        GLN: ``(L + 1) M^{⊙L} ⊙ K^x`` (the printed Table 2 omits ``L + 1``; the correct form
        has it, since every layer contributes ``M^{⊙L} ⊙ K^x``).
    """
    r = learning_rule(rule, rho)
    L = hidden_layer_count(depth, hidden_layers)
    act = resolve_activation(activation)
    kx = _kx(kx)
    n = kx.shape[0]
    if r.name == "gln":
        M = _gate_kernel(kx, act)
        phi = np.stack([M ** ell * kx for ell in range(1, L + 1)])
        g = np.stack([M ** (L + 1 - ell) for ell in range(1, L + 1)])
        gt = g.copy()
    else:
        phi, dphi, g, _ = lazy_kernels(kx, act, hidden_layers=L)
        if r.name == "gd":
            gt = g.copy()
        elif r.name == "fa":
            gt = np.empty_like(g)
            nxt = np.ones((n, n))
            for ell in range(L - 1, -1, -1):              # G~^l = rho G~^{l+1} dPhi^l   (56)
                gt[ell] = r.rho * nxt * dphi[ell]
                nxt = gt[ell]
        else:                                            # DFA, Hebb: <g g~> = 0 at init
            gt = np.zeros_like(g)
    _v.check_underflow(phi, "the lazy kernel Phi^l",
                       "lower depth (a ReLU kernel halves at every layer), or scale kx up")
    ntk = gt[0] * kx + phi[-1]
    for ell in range(1, L):
        ntk = ntk + gt[ell] * phi[ell - 1]
    return LazyENTK(rule=r, hidden_layers=L, activation=act.name, kx=kx, phi=phi, g=g,
                    gtilde=gt, ntk=ntk)


# ================================================================== diagnostics

@public
def task_alignment(K, y) -> float:
    r"""Kernel--task alignment ``A(K, y y^T) = y^T K y / (||K||_F |y|^2)`` (Figs. 1b, 4c); ``K``
    may be non-symmetric (the eNTK of FA)."""
    K = real_array(K, "K", finite=True)
    y = real_array(y, "y", finite=True).ravel()
    if K.ndim != 2 or K.shape != (y.size, y.size):
        raise DomainError(f"K must be ({y.size}, {y.size}) for {y.size} targets, got {K.shape}")
    return target_alignment(K, y)          # Tr(K y y^T) = y^T K y also for non-symmetric K


@public
def target_overlap(H, y) -> float:
    r"""``H_y = y^T H y / (|y|^2 Tr H)`` (Fig. 5b)."""
    H = real_array(H, "H", finite=True)
    y = real_array(y, "y", finite=True).ravel()
    if H.ndim != 2 or H.shape != (y.size, y.size):
        raise DomainError(f"H must be ({y.size}, {y.size}), got {H.shape}")
    tr = np.trace(H)
    if tr == 0 or y @ y == 0:
        raise DomainError("H_y of a traceless kernel or zero targets is undefined")
    return float(y @ H @ y / ((y @ y) * tr))


@public
def gradient_correlation(g, gtilde) -> float:
    r"""``corr(g, g~) = (1 / (L P)) Σ_{ℓ,μ} g^ℓ_μ · g~^ℓ_μ / (|g^ℓ_μ| |g~^ℓ_μ|)`` (Fig. 3c).

    ``g``, ``gtilde``: arrays ``(L, P, N)`` of true and pseudo-gradients of one network.
    """
    g = real_array(g, "g", finite=True)
    gt = real_array(gtilde, "gtilde", finite=True)
    if g.shape != gt.shape or g.ndim != 3:
        raise DomainError(f"g and gtilde must both be (L, P, N), got {g.shape} and {gt.shape}")
    num = np.sum(g * gt, axis=-1)
    den = np.linalg.norm(g, axis=-1) * np.linalg.norm(gt, axis=-1)
    if np.any(den == 0):
        raise DomainError("corr(g, g~) is undefined where a gradient vanishes")
    return float(np.mean(num / den))


# ================================================================== two-layer exact (App. F)

@public
@dataclass
class TwoLayerSolution:
    r"""Exact infinite-width dynamics of a two-layer linear network on whitened data (App. F).

    ``delta`` is the error along ``ŷ``, ``h_y = ŷ^T H ŷ`` the hidden kernel along ``ŷ`` and
    ``gtilde`` the readout-side alignment ``G̃`` (GD: ``G = H_y``; Hebb: the per-sample
    ``G̃^1 = gamma0 f Δ``).
    """

    rule: LearningRule
    gamma0: float
    y: float
    t: np.ndarray
    delta: np.ndarray
    h_y: np.ndarray
    gtilde: np.ndarray

    hidden_layers = 1
    layers = (1,)

    def value(self, name: str, layer=None) -> np.ndarray:
        """``'delta'``, ``'loss'`` (``Δ^2 / 2``), ``'h_y'``, ``'gtilde'``, ``'ntk'`` (along ŷ), ``'t'``."""
        if layer not in (None, 1):
            raise DomainError("a two-layer network has the single hidden layer 1")
        if name == "loss":
            return 0.5 * self.delta ** 2
        if name == "ntk":                         # K = G~ K^x + H along y-hat, K^x = I
            return self.h_y + self.gtilde
        if name in ("delta", "h_y", "gtilde", "t"):
            return getattr(self, name)
        raise DomainError(f"unknown quantity {name!r}")

    def stderr(self, name: str, layer=None):
        self.value(name, layer)

    def __repr__(self) -> str:
        return (f"TwoLayerSolution(rule={self.rule!r}, gamma0={self.gamma0:g}, y={self.y:g}, "
                f"delta[-1]={self.delta[-1]:.4g}, h_y[-1]={self.h_y[-1]:.4g})")


@public
def fa_fixed_point(gamma0, y=1.0, rho=0.0) -> dict:
    r"""Fixed point of two-layer linear ρ-FA on whitened data (App. F, eqs. (70)-(72)).

    ``a*`` is the unique positive root of ``a^3 / 2 + (1 + ρ) a = gamma0 y``; then
    ``H_y(∞) = 1 + a*^2`` and ``G̃(∞) = ρ + a*^2 / 2``.
    """
    g0 = real_scalar(gamma0, "gamma0")
    y = real_scalar(y, "y")
    r = learning_rule("fa", rho).rho
    if not (np.isfinite(g0) and np.isfinite(y)) or g0 <= 0 or y <= 0:
        raise DomainError("fa_fixed_point needs finite gamma0 > 0 and y = |y| > 0")
    roots = np.roots([0.5, 0.0, 1.0 + r, -g0 * y])
    real = roots[np.abs(roots.imag) < 1e-9].real
    a = float(real[real > 0].max())
    return {"a": a, "h_y": 1.0 + a * a, "gtilde": r + 0.5 * a * a}


@public
def two_layer_exact(rule="gd", *, gamma0, times, y=1.0, rho=None, rtol=1e-11) -> TwoLayerSolution:
    r"""Exact dynamics of two-layer linear networks on whitened data (``K^x = I``), App. F.

    * GD (66)-(67): ``dΔ/dt = -2 Δ sqrt(1 + gamma0^2 (y - Δ)^2)``, ``H_y = G = sqrt(1 + gamma0^2
      (y - Δ)^2)`` (the printed (7) omits the factor 2; the correct form has it).
    * ρ-FA and DFA (68)-(72): ``da/dt = gamma0 y - a^3/2 - (1 + ρ) a``,
      ``Δ = y - (a^3/2 + (1 + ρ) a)/gamma0``, ``H_y = 1 + a^2``, ``G̃ = ρ + a^2/2``; DFA equals
      ρ = 0 FA at infinite width.
    * Hebb (73): ``dH/dt = 2 gamma0 H Δ^2``, ``dΔ/dt = -[H + gamma0 (y - Δ) Δ] Δ``.

    Parameters
    ----------
    rule : str or LearningRule
        ``'gd'``, ``'fa'``, ``'dfa'``, ``'hebb'`` (GLN with linear gates is GD).
    gamma0 : float
        ``> 0``.
    times : array_like
        Increasing times ``>= 0`` at which to report.
    y : float
        ``|y|``, the norm of the target vector (``> 0``).
    """
    from scipy.integrate import solve_ivp

    r = learning_rule(rule, rho)
    if r.name == "gln":
        r = LearningRule("gd")
    g0 = real_scalar(gamma0, "gamma0")
    y = real_scalar(y, "y")
    t = real_array(times, "times", finite=True).ravel()
    if not np.isfinite(g0) or g0 <= 0:
        raise DomainError(f"gamma0={gamma0!r} must be finite and > 0")
    if not np.isfinite(y) or y <= 0:
        raise DomainError(f"y={y!r} is the target norm |y| and must be finite and > 0")
    if t.size == 0 or t[0] < 0 or np.any(np.diff(t) < 0):
        raise DomainError("times must be a non-empty increasing array of times >= 0")
    kw = {"t_eval": t, "rtol": rtol, "atol": 1e-13, "method": "DOP853"}
    if r.name == "gd":
        sol = solve_ivp(lambda s, d: -2 * d * np.sqrt(1 + g0 ** 2 * (y - d) ** 2),
                        (0.0, t[-1]), [y], **kw)
        d = sol.y[0]
        hy = np.sqrt(1 + g0 ** 2 * (y - d) ** 2)
        gt = hy.copy()
    elif r.name in ("fa", "dfa"):
        p = r.rho if r.name == "fa" else 0.0
        sol = solve_ivp(lambda s, a: g0 * y - 0.5 * a ** 3 - (1 + p) * a, (0.0, t[-1]), [0.0], **kw)
        a = sol.y[0]
        d = y - (0.5 * a ** 3 + (1 + p) * a) / g0
        hy, gt = 1 + a ** 2, p + 0.5 * a ** 2
    else:
        def rhs(s, z):
            H, D = z
            return [2 * g0 * H * D * D, -(H + g0 * (y - D) * D) * D]
        sol = solve_ivp(rhs, (0.0, t[-1]), [1.0, y], **kw)
        hy, d = sol.y
        gt = g0 * (y - d) * d
    if not sol.success:
        raise DomainError(f"the ODE integration failed: {sol.message}")
    return TwoLayerSolution(rule=r, gamma0=g0, y=y, t=t, delta=d, h_y=hy, gtilde=gt)


# ================================================================== deep linear DMFT (App. E)

@public
@dataclass
class RuleDMFTResult(HiddenLayers):
    r"""Infinite-width DMFT of a network trained by a learning rule (the deep linear solver of
    App. E and the sampled nonlinear solvers).

    Sample axes have length ``n = P + Q`` (training, then test points); kernels are indexed
    ``[t, μ, s, ν]`` and hidden layer ``ℓ`` sits at index ``ℓ - 1``.  With ``C`` outputs (2-D
    targets, App. C.1) ``f`` is ``(T, n, C)``, ``delta`` ``(T, P, C)``, ``g`` and ``gtilde`` gain
    two trailing output axes ``(C, C)`` and ``ntk`` is ``(T, n, n, C, C)``.

    Attributes
    ----------
    grid, data, hidden_layers, gamma0, rule
    phi, g : ndarray, shape (L, T, n, T, n)
        ``Φ^ℓ(t, s)`` and ``G^ℓ(t, s)`` (true gradients).
    gtilde : ndarray, shape (L, T, n, T, n)
        ``G̃^ℓ_{μν}(t, s) = <g^ℓ_μ(t) g̃^ℓ_ν(s)>``.
    f : ndarray, shape (T, n)
    delta : ndarray, shape (T, P)
    ntk : ndarray, shape (T, n, n)
        Equal-time eNTK ``Σ_ℓ G̃^{ℓ+1}(t, t) ⊙ Φ^ℓ(t, t)``.
    closure : {'exact', 'ntk'}
    diagnostics : dict
    """

    grid: TimeGrid
    data: TrainingData
    hidden_layers: int
    gamma0: float
    rule: LearningRule
    phi: np.ndarray
    g: np.ndarray
    gtilde: np.ndarray
    f: np.ndarray
    delta: np.ndarray
    ntk: np.ndarray
    closure: str = "exact"
    activation: str = "linear"
    diagnostics: dict = field(default_factory=dict)
    mc_stderr: dict | None = None

    def value(self, name: str, layer: int | None = None) -> np.ndarray:
        """``'f'`` ``(T, n)``, ``'loss'`` ``(T,)``, ``'delta'`` ``(T, P)``, ``'ntk'`` ``(T, n, n)``,
        ``'phi'``, ``'g'``, ``'gtilde'`` ``(T, n, T, n)`` of hidden layer ``layer``."""
        if name in ("f", "loss", "delta", "ntk"):
            if layer is not None:
                raise DomainError(f"{name!r} has no layers")
            if name == "loss":
                return 0.5 * np.sum(self.delta ** 2, axis=tuple(range(1, self.delta.ndim)))
            if getattr(self, name) is None:
                raise NotDerivedError(f"{name!r} is not computed by this solver (the eNTK needs "
                                      "the true-gradient kernels and their responses)")
            return getattr(self, name)
        if name not in ("phi", "g", "gtilde"):
            raise DomainError(f"unknown quantity {name!r}; known: f, loss, delta, ntk, phi, g, gtilde")
        arr = getattr(self, name)
        if arr is None:
            raise NotDerivedError(f"{name!r} is not computed by this solver (it needs the "
                                  "true-gradient response functions)")
        if layer is None:
            return arr
        if isinstance(layer, bool) or layer not in self.layers:
            raise DomainError(f"layer={layer!r} is not held; layers are {list(self.layers)}")
        return arr[int(layer) - 1]

    def stderr(self, name: str, layer: int | None = None):
        """Monte-Carlo standard error (two-layer sampled solver: spread of independent sample
        batches at the shared error signal), or ``None`` (deterministic deep linear solver, or
        no error for ``name``)."""
        self.value(name, layer)
        if self.mc_stderr is None or name not in self.mc_stderr:
            return None
        arr = self.mc_stderr[name]
        if name in ("phi", "g", "gtilde") and layer is not None:
            return arr[int(layer) - 1]
        return arr

    def __repr__(self) -> str:
        loss = self.value("loss")
        return (f"RuleDMFTResult(rule={self.rule!r}, {depth_text(self.depth)}, gamma0={self.gamma0:g}, "
                f"steps={self.grid.steps}, loss[-1]={loss[-1]:.4g})")

    def _repr_html_(self) -> str:
        loss = self.value("loss")
        return html_table("Learning-rule DMFT (deep linear)",
                          [("rule", self.rule.title), ("L", self.hidden_layers),
                           ("gamma0", f"{self.gamma0:g}"), ("grid", repr(self.grid)),
                           ("loss", short(loss[[0, len(loss) // 2, -1]]))])


@public
@limits_blas_threads
def solve_rule_deep_linear(X=None, y=None, *, rule="gd", rho=None, depth=None, hidden_layers=None,
                           gamma0, eta, steps, X_test=None, kernel=None,
                           closure: str = "exact", activation="linear",
                           weight_decay: float = 0.0, momentum: float = 0.0) -> RuleDMFTResult:
    r"""Exact infinite-width DMFT of a deep linear network trained by ``rule`` (App. E).

    Every field is a linear functional of its layer's Gaussian sources, so the order parameters
    follow by marching causally in time (the scheme of App. E, generalised to every rule).  With
    Euler step ``eta`` and flattened index ``(t, μ)``, per layer ``ℓ``:

    * backward: ``g^ℓ(t) = r^ℓ(t) + Σ_{s<t} [R_{gu}^{ℓ+1}(t,s) + eta gamma0 G̃^{ℓ+1}(t,s) Δ(s)] h^ℓ(s)``
      (the corrected (58), (62), (64): the weights move along ``g̃``);
    * forward: ``h^ℓ(t) = u^ℓ(t) + Σ_{s<t} R_{hr}^{ℓ-1}(t,s) g^ℓ(s) + ρ R_{hv}^{ℓ-1}(t) g̃^ℓ
      + eta gamma0 Σ_{s<t} H^{ℓ-1}(t,s) Δ(s) g̃^ℓ(s)``, with the rule's ``g̃^ℓ``:
      GD ``g^ℓ``; ρ-FA a static ``N(0, 1)`` per neuron correlated with ``r^ℓ`` by
      ``ρ G̃^{ℓ+1}``; DFA the same with ``ρ = 0`` (so DFA equals ρ = 0 FA); Hebb ``Δ h^ℓ``
      (then ``h^ℓ = (I - gamma0 H^{ℓ-1}_{Δ^2})^{-1} u^ℓ``).  GLN with linear gates is GD.

    ``u^ℓ ~ GP(0, H^{ℓ-1})``, ``H^0 = K^x``, ``r^ℓ ~ GP(0, G^{ℓ+1})``, ``G^{L+1} = 1``.

    The marching is the one of :func:`effth.dmft.solve_deep_linear` (``deep_linear._march``)
    with the rule hook :class:`effth.dmft.solvers.deep_linear.RuleFields`: GD (and GLN) run the
    plain GD equations unchanged, so they equal ``solve_deep_linear`` to rounding; for the other
    rules the hook supplies the forward field's source part, ``G̃^{ℓ+1}`` in ``D^ℓ``'s drift
    (at the current time ``t``, also for Hebb), the cross covariance of ``r^ℓ`` with the feedback
    coordinate and the closure.

    Parameters
    ----------
    X, y, X_test, kernel
        Training data (:func:`effth.dmft.prepare_data`).  ``y`` of shape ``(P, C)`` gives
        ``C`` outputs (App. C.1, eqs. (41)-(43)): ``h^ℓ`` stays scalar, ``g^ℓ_c`` and the
        pseudo-gradients ``g̃^ℓ_c`` carry an output index (ρ-FA/DFA: one static feedback
        coordinate ``v^ℓ_c`` per output, independent ``N(0, 1)``; Hebb:
        ``g̃^ℓ_{μc} = Δ_{μc} h^ℓ_μ``, so the update carries ``|Δ_μ|^2``), ``G^ℓ``, ``G̃^ℓ`` and
        the eNTK are ``C x C`` per pair of samples and times.  Then ``f`` is ``(T, n, C)``,
        ``delta`` ``(T, P, C)``, ``g``, ``gtilde`` ``(L, T, n, T, n, C, C)``, ``ntk``
        ``(T, n, n, C, C)`` and ``data.y`` holds the first column.  ``(P, 1)`` is the scalar
        solver bit for bit.
    rule, rho
        Learning rule (:func:`learning_rule`).
    depth, hidden_layers : int
        Give exactly one.
    gamma0 : float
        Richness, ``> 0``.
    eta : float
        Euler step (the network's raw learning rate is ``eta gamma0^2 N`` for GD).
    steps : int
        Grid points ``T``.
    activation : str
        Must be linear (the closure is algebraic only for linear networks); any other
        activation raises :class:`NotDerivedError`.
    closure : {'exact', 'ntk'}
        ``'exact'``: ``f_μ(t) = gamma0^{-1} <g^L_μ(t) h^L_μ(t)>`` (the exact infinite-width limit
        of the discrete network, ``f = w · h^L / (gamma0 N)``); ``'ntk'``:
        ``f(t+eta) = f(t) + eta K(t, t) Δ(t)`` (Euler on ``df/dt = K Δ``, App. A's scheme;
        with weight decay ``f(t+eta) = (1 - eta λ (L+1)) f(t) + eta K(t, t) Δ(t)``, the
        ``(L+1)``-homogeneous network's decay; with momentum ``mu`` and no decay
        ``f(t+eta) = f(t) + eta sum_{s<=t} (1 - mu) mu^{t-s} K(t, s) Δ(s)`` with the two-time eNTK
        ``K(t, s) = sum_l G̃^{l+1}(t; s) Φ^l(t, s)``, the true gradient of ``f(t)`` against the
        heavy-ball step).
    weight_decay : float
        ``λ >= 0`` with ``eta λ < 1`` (App. C, eq. (50) in discrete time): every trained weight
        is multiplied by ``1 - eta λ`` per step (the frozen feedback of ρ-FA and DFA is not).
        With the optimizer's filter ``θ(t) = a(t) θ(0) + Σ_{s<t} k(t-1-s) eta G(s)``
        (:class:`~effth.dmft.grid.ParameterFilter`, ``a(t) = (1 - eta λ)^t``,
        ``k(j) = (1 - eta λ)^j``) the initial-condition fields ``u^ℓ``, ``r^ℓ`` carry ``a(t)``
        (covariances ``a(t) a(s) H^{ℓ-1}``, ``a(t) a(s) G^{ℓ+1}``), the response terms
        ``a(t) a(s)``, the feedback coordinate's forward term ``ρ a(t) c^{ℓ-1}(t)`` and its
        correlation with ``r^ℓ(t)`` ``a(t) ρ G̃^{ℓ+1}(t)``, and every feature-learning
        integral the weight ``k(t-1-s)`` (``e^{-λ(t-s)}`` in continuous time): eq. (50)'s
        ``e^{-λt}`` and ``e^{-λ(t-s)}`` factors.
    momentum : float
        Heavy-ball coefficient ``μ = e^{-eta/τ}`` in ``[0, 1)`` (App. C, eqs. (51)-(53) in
        discrete time; the update of :func:`effth.simulation.simulate_rule_training`):
        ``v <- μ v + (1 - μ) eta (G - λ θ)``, ``θ <- θ + v``, so the feature-learning integrals
        carry the memory kernel ``k(j)`` (``1 - μ^{j+1}`` without decay, the discrete double
        integral with kernel ``e^{-(t'-t'')/τ}/τ``).  ``μ = 0`` is plain Euler; with
        ``closure='ntk'`` only without weight decay (see ``closure``).

    Returns
    -------
    RuleDMFTResult
    """
    r = learning_rule(rule, rho)
    if not is_linear(resolve_activation(activation)):
        raise NotDerivedError(
            f"solve_rule_deep_linear solves linear networks only (activation={activation!r}); "
            "for nonlinear networks use solve_rule_two_layer (L = 1, every rule), "
            "solve_rule_forward (deep DFA, Hebb, ρ-FA, GLN) or solve_monte_carlo (GD)")
    if r.name == "gln":
        r_eff = LearningRule("gd")               # linear gates: phi'(m) = 1
    else:
        r_eff = r
    L = hidden_layer_count(depth, hidden_layers)
    g0 = real_scalar(gamma0, "gamma0")
    eta = real_scalar(eta, "eta")
    if not np.isfinite(g0) or g0 <= 0:
        raise DomainError(f"gamma0={gamma0!r} must be finite and > 0 (use lazy_entk for gamma0 -> 0)")
    if not np.isfinite(eta) or eta <= 0:
        raise DomainError(f"eta={eta!r} must be finite and > 0")
    T = integer(steps, "steps", minimum=1)
    if closure not in ("exact", "ntk"):
        raise DomainError(f"closure={closure!r} must be 'exact' or 'ntk'")
    data, Yc, multi = prepare_targets(X, y, X_test=X_test, kernel=kernel)
    P, n, C = data.n_train, data.n_all, Yc.shape[1]
    if not np.all(np.isfinite(data.kx)) or not np.all(np.isfinite(data.y)):
        raise DomainError("the data must be finite")
    lam = real_scalar(weight_decay, "weight_decay")
    rho_wd, _, mu = langevin_settings(eta, lam, 0.0, momentum)
    if mu > 0 and closure == "ntk" and lam > 0:
        raise DomainError("closure='ntk' with momentum solves momentum alone: with weight decay "
                          "the decay term grad f(t) . theta(s) of an earlier step is not a DMFT "
                          "order parameter; use closure='exact'")
    start = time.perf_counter()
    kind = {"gd": "gd", "fa": "static", "dfa": "static", "hebb": "hebb"}[r_eff.name]
    hook = RuleFields(kind, r_eff.rho if r_eff.name == "fa" else 0.0, g0)
    model = _Model(eta=eta, g2=g0 * g0, rho=rho_wd, lam=lam, b=0.0, Y=Yc,
                   closure=closure, gi=False, momentum=mu)
    try:
        with np.errstate(over="raise", invalid="raise", divide="raise"):
            (H, G, _, _, D), f = _march(data, model, L, T, rule=hook)
    except (FloatingPointError, ConvergenceError):
        raise DomainError(
            f"the discrete {r.title} dynamics diverge (eta={eta:g}, gamma0={g0:g}): the kernels "
            "or the error blow up; use a smaller eta or gamma0") from None
    shape = (L, T, n, T, n)
    phi = np.stack(H).reshape(shape)
    if not multi:
        f, D = f[..., 0], D[..., 0]
        gg = np.stack([np.broadcast_to(x[:, None, :, None], (T, n, T, n)) for x in G])
        if kind == "gd":
            gt = gg.copy()
        elif kind == "static":                  # G~^l(t, s) = <g^l(t) v^l>
            gt = np.stack([np.broadcast_to(d[:, 0, 0, None, None, None], (T, n, T, n))
                           for d in hook.d])
        else:                                   # G~^l(t; s, nu) = gamma0 (D H)(t; s, nu) Delta_nu(s)
            gt = np.stack([np.broadcast_to((gh * D.ravel()[None, :])[:, None, :], (T, n, T * n))
                           for gh in hook.gh]).reshape(shape)
        idx = np.arange(T)
        K = data.kx[None] * gt[0][idx, :, idx, :] if L else None
        for ell in range(1, L + 1):
            top = 1.0 if ell == L else gt[ell][idx, :, idx, :]
            K = K + top * phi[ell - 1][idx, :, idx, :]
    else:                                       # C outputs: (..., C, C) kernels (App. C.1)
        full = (T, n, T, n, C, C)
        gg = np.stack([np.broadcast_to(x.reshape(T, C, T, C).transpose(0, 2, 1, 3)[:, None, :, None],
                                       full) for x in G])
        if kind == "gd":
            gt = gg.copy()
        elif kind == "static":                  # G~^l_{cc'}(t, s) = <g^l_c(t) v^l_c'>
            gt = np.stack([np.broadcast_to(d[:, None, None, None], full) for d in hook.d])
        else:                                   # gamma0 (D H)_c(t; s, nu) Delta_{nu c'}(s)
            gt = np.stack([gh.reshape(T, C, T, n).transpose(0, 2, 3, 1)[:, None, :, :, :, None]
                           * D[None, None, :, :, None, :] for gh in hook.gh])
            gt = np.broadcast_to(gt, (L,) + full)
        idx = np.arange(T)
        eye = np.eye(C)
        K = data.kx[None, :, :, None, None] * gt[0][idx, :, idx, :]
        for ell in range(1, L + 1):
            top = eye if ell == L else gt[ell][idx, :, idx, :]
            K = K + top * phi[ell - 1][idx, :, idx, :][..., None, None]
    return RuleDMFTResult(grid=TimeGrid(eta, T), data=data, hidden_layers=L, gamma0=g0, rule=r,
                          phi=phi, g=gg, gtilde=gt, f=f, delta=D[:, :P], ntk=K, closure=closure,
                          diagnostics={"seconds": time.perf_counter() - start})


# ================================================================== two-layer nonlinear (L = 1)

#: growth of the largest training error over its initial value taken as divergence
_DIVERGE_GROWTH = 1e4


def _check_divergence(D: np.ndarray, r, eta: float, g0: float) -> None:
    """A :class:`ConvergenceError` when the training errors ``D[t]`` grow by more than
    :data:`_DIVERGE_GROWTH` over ``D[0]`` (an unstable learning rate), naming the step."""
    size = np.max(np.abs(D), axis=1)
    bad = np.nonzero(~(size <= _DIVERGE_GROWTH * max(float(size[0]), 1e-300)))[0]
    if bad.size:
        t = int(bad[0])
        raise ConvergenceError(f"the {r.title} dynamics diverge: the largest training error grows "
                               f"from {size[0]:.3g} to {size[t]:.3g} by step {t} (eta={eta:g}, "
                               f"gamma0={g0:g}); use a smaller eta")


def _sampled_arguments(activation, gamma0, eta, steps, samples, batches) -> tuple:
    """The checked arguments shared by the sampled rule solvers: ``(act, sigma, sigma', gamma0,
    eta, T, S, batches)``."""
    act = resolve_activation(activation)
    if act.singular_part(1):
        raise NotDerivedError(f"activation={activation!r} has a jump: its derivative is not a "
                              "function, which the pseudo-gradients need")
    g0 = real_scalar(gamma0, "gamma0")
    eta = real_scalar(eta, "eta")
    if not np.isfinite(g0) or g0 <= 0:
        raise DomainError(f"gamma0={gamma0!r} must be finite and > 0")
    if not np.isfinite(eta) or eta <= 0:
        raise DomainError(f"eta={eta!r} must be finite and > 0")
    T = integer(steps, "steps", minimum=1)
    S = integer(samples, "samples", minimum=2)
    nb = integer(batches, "batches", minimum=2)
    if S % nb:
        raise DomainError(f"samples={S} must be a multiple of batches={nb}")
    _v.check_memory(8.0 * S * T, f"the sampled fields of samples={S} over steps={T}",
                    "lower samples or steps")
    return act, act.numpy(0), act.numpy(1), g0, eta, T, S, nb


@public
@limits_blas_threads
def solve_rule_two_layer(X=None, y=None, *, rule="gd", rho=None, gamma0, eta, steps,
                         activation="relu", samples: int = 20000, batches: int = 10, seed=0,
                         X_test=None, kernel=None, record_kernels: bool = True,
                         weight_decay: float = 0.0, momentum: float = 0.0) -> RuleDMFTResult:
    r"""DMFT of two-layer networks (``L = 1``) of any activation trained by ``rule``, sampled.

    At ``L = 1`` Algorithm 1 needs no response functions (``A^0 = B^1 = C = D = 0``): the
    single-site fields obey, on the Euler grid of step ``eta`` (eq. (40) with ``Φ^0 = K^x``),

    ``h_μ(t+1) = h_μ(t) + eta gamma0 Σ_ν K^x_{μν} Δ_ν(t) g~_ν(t)``, ``h(0) = u ~ N(0, K^x)``,
    ``z(t+1) = z(t) + eta gamma0 Σ_ν Δ_ν(t) φ(h_ν(t))``, ``z(0) = r ~ N(0, 1)``,

    ``g = φ'(h) z`` and the rule's ``g~`` (GD ``g``; ρ-FA ``φ'(h)(ρ r + sqrt(1-ρ²) ζ~)``; DFA
    ``φ'(h) z~``; Hebb ``Δ φ(h)``; GLN ``φ'(m) z`` with ``φ(h) -> φ'(m) h``, ``m ~ N(0, K^x)``),
    closed by ``f_μ(t) = gamma0^{-1} <z(t) φ(h_μ(t))>`` (the exact limit of
    ``f = w · φ(h) / (gamma0 N)``).  Averages are over ``samples`` i.i.d. draws of the sources,
    marched together in time (the error signal couples them only through the average), so no
    fixed-point iteration is needed.

    Parameters
    ----------
    X, y, X_test, kernel
        Data (:func:`effth.dmft.prepare_data`).  ``y`` of shape ``(P, C)`` gives ``C`` outputs
        (App. C.1, eqs. (41)-(43)): the readout source ``z = w^L`` and the feedback of ρ-FA and
        DFA get one independent column per output, ``g_c = φ'(h) z_c``, Hebb's
        ``g~_{μc} = Δ_{μc} φ(h_μ)``, and ``h`` moves by ``Σ_c Δ_c g~_c``; then ``f`` is
        ``(T, n, C)``, ``delta`` ``(T, P, C)``, ``g``, ``gtilde`` ``(1, T, n, T, n, C, C)``, ``ntk``
        ``(T, n, n, C, C)``.  ``(P, 1)`` is the scalar solver bit for bit.
    rule, rho
        Learning rule.
    gamma0, eta, steps
        Richness (``> 0``), Euler step and grid points.
    weight_decay, momentum : float
        The trainer's optimizer (App. C, eqs. (50)-(53) in discrete time; the update of
        :func:`effth.simulation.simulate_rule_training`): ``λ >= 0`` with ``eta λ < 1`` and the
        heavy-ball ``μ`` in ``[0, 1)``.  ``h = W^0 x / sqrt(D)`` and ``z = w^L`` are linear images
        of one trained weight each, so they take the same update, ``v <- μ v + (1 - μ)(u - eta λ
        x)``, ``x <- x + v`` around their increment ``u``
        (:class:`effth.dmft.rules._filter.RuleFilter`); the frozen feedback and gates do not
        decay.  ``0, 0`` is the plain solver bit for bit.
    activation : str, Activation or sympy.Expr
        ``φ`` (gate nonlinearity ``φ'`` for GLN).
    samples : int
        Monte-Carlo draws of the single-site sources.
    batches : int
        Independent batches for ``mc_stderr`` (the spread of the batch averages at the shared
        error signal; it ignores the noise fed back through ``Δ``).
    seed : int
        Randomness of the draws.
    record_kernels : bool
        Two-time kernels (memory ``3 samples T n`` floats); else equal-time only (zeros
        elsewhere), which allows many more samples.

    Returns
    -------
    RuleDMFTResult
        ``f`` uses the sampled ``f(0)`` as a control variate (``f(t) - f_S(0)``, exactly 0 at
        infinite width; the trained networks are centred the same way).  With ``mc_stderr`` for ``'f'``, ``'phi'``, ``'gtilde'``, ``'ntk'``.
    """
    r = learning_rule(rule, rho)
    act, fn, dfn, g0, eta, T, S, nb = _sampled_arguments(activation, gamma0, eta, steps, samples,
                                                         batches)
    data, Yc, multi = _sampled_targets(X, y, X_test, kernel)
    P, n, C = data.n_train, data.n_all, Yc.shape[1]
    opt = RuleFilter(eta, T, weight_decay, momentum)
    rng = _v.rng(seed)
    w_, V = np.linalg.eigh(data.kx)
    root = V * np.sqrt(np.clip(w_, 0, None))
    h = rng.standard_normal((S, n)) @ root.T
    z = rng.standard_normal((S, C))                   # readout w^L(0), one column per output
    z0 = z.copy()
    if r.name == "fa":
        fb = r.rho * z0 + np.sqrt(max(0.0, 1 - r.rho ** 2)) * rng.standard_normal((S, C))
    elif r.name == "dfa":
        fb = rng.standard_normal((S, C))
    if r.name == "gln":
        gate = dfn(rng.standard_normal((S, n)) @ root.T)
    start = time.perf_counter()
    keep = T if record_kernels else 1
    nc = n * C
    A = np.zeros((keep, S, n))
    Gs = np.zeros((keep, S, nc))                      # g_c, flattened (mu, c)
    Gt = np.zeros((keep, S, nc))
    eq = {"phi": np.zeros((T, n, n)), "phi_se": np.zeros((T, n, n))}
    eq.update({k: np.zeros((T, nc, nc)) for k in ("g", "gtilde", "gtilde_se")})
    za0 = None
    f = np.zeros((T, n, C))
    D = np.zeros((T, n, C))
    fb_err = np.zeros((T, n, C))
    try:
        with np.errstate(over="raise", invalid="raise"):
            for t in range(T):
                if r.name == "gln":
                    a, q = gate * h, gate
                else:
                    a, q = fn(h), dfn(h)
                za = z[:, None, :] * a[:, :, None]
                if za0 is None:
                    za0 = za.copy()
                za = za - za0                             # control variate: f(0) = 0 exactly
                f[t] = za.mean(axis=0) / g0
                fb_err[t] = za.reshape(nb, S // nb, n, C).mean(axis=1).std(axis=0, ddof=1) / (
                    g0 * np.sqrt(nb))
                D[t, :P] = Yc - f[t, :P]
                g = q[:, :, None] * z[:, None, :]
                if r.name in ("gd", "gln"):
                    gt = g
                elif r.name in ("fa", "dfa"):
                    gt = q[:, :, None] * fb[:, None, :]
                else:
                    gt = D[t][None, :, :] * a[:, :, None]
                gf, gtf = g.reshape(S, nc), gt.reshape(S, nc)
                if record_kernels:
                    A[t], Gs[t], Gt[t] = a, gf, gtf
                for key, (x1, x2) in (("phi", (a, a)), ("g", (gf, gf)), ("gtilde", (gf, gtf))):
                    per = batch_gram(x1, x2, nb)
                    eq[key][t] = per.mean(axis=0)
                    if key != "g":
                        eq[key + "_se"][t] = per.std(axis=0, ddof=1) / np.sqrt(nb)
                # h = W^0 x / sqrt(D) and z = w^L: the trainer's update of their weights
                e = (gt * D[t][None, :, :]).sum(axis=2)   # sum_c Delta_c g~_c
                h = opt.step("h", h, eta * g0 * e @ data.kx)
                z = opt.step("z", z, np.stack([eta * g0 * (a @ D[t][:, c]) for c in range(C)],
                                              axis=1))
    except FloatingPointError:
        raise DomainError(f"the {r.title} dynamics overflow (eta={eta:g}, gamma0={g0:g}); use a "
                          "smaller eta or gamma0") from None
    _check_divergence(D[:, :P].reshape(T, -1), r, eta, g0)

    def two_time(x, y_):
        m1, m2 = x.shape[2], y_.shape[2]
        xf, yf = x.transpose(1, 0, 2).reshape(S, T * m1), y_.transpose(1, 0, 2).reshape(S, T * m2)
        full = xf.T @ yf / S
        per = batch_gram(xf, yf, nb)
        return full, per.std(axis=0, ddof=1) / np.sqrt(nb)

    idx = np.arange(T)
    pairs = lambda x: _output_pairs(x, T, n, C, multi)
    if record_kernels:
        phi, phi_se = (x.reshape(T, n, T, n) for x in two_time(A, A))
        gg = pairs(two_time(Gs, Gs)[0])
        gt2, gt_se = (pairs(x.T) for x in two_time(Gt, Gs))   # G~(t, s) = <g(t) g~(s)>
    else:
        phi, phi_se = np.zeros((T, n, T, n)), np.zeros((T, n, T, n))
        phi[idx, :, idx, :], phi_se[idx, :, idx, :] = eq["phi"], eq["phi_se"]
        gg, gt2, gt_se = (np.zeros((T, n, T, n) + ((C, C) if multi else ())) for _ in range(3))
        gg[idx, :, idx], gt2[idx, :, idx], gt_se[idx, :, idx] = (
            _equal_pairs(eq[k], T, n, C, multi) for k in ("g", "gtilde", "gtilde_se"))
    kx = data.kx
    G1, G1_se = (_equal_pairs(eq[k], T, n, C, multi) for k in ("gtilde", "gtilde_se"))
    if multi:
        eye = np.eye(C)
        K = G1 * kx[None, :, :, None, None] + eq["phi"][..., None, None] * eye
        K_se = np.sqrt((G1_se * kx[None, :, :, None, None]) ** 2
                       + (eq["phi_se"][..., None, None] * eye) ** 2)
    else:
        f, D, fb_err = f[..., 0], D[..., 0], fb_err[..., 0]
        K = G1 * kx[None] + eq["phi"]
        K_se = np.sqrt((G1_se * kx[None]) ** 2 + eq["phi_se"] ** 2)
    return RuleDMFTResult(grid=TimeGrid(eta, T), data=data, hidden_layers=1, gamma0=g0, rule=r,
                          phi=phi[None], g=gg[None], gtilde=gt2[None], f=f, delta=D[:, :P], ntk=K,
                          closure="exact", activation=act.name,
                          diagnostics={"seconds": time.perf_counter() - start, "samples": S,
                                       "weight_decay": opt.lam, "momentum": opt.mu},
                          mc_stderr={"f": fb_err, "phi": phi_se[None], "gtilde": gt_se[None],
                                     "ntk": K_se})


def _sampled_targets(X, y, X_test, kernel):
    """``(data, Y (P, C), multi)`` of the sampled solvers (:func:`effth.dmft.grid.prepare_targets`),
    with finite data."""
    data, Yc, multi = prepare_targets(X, y, X_test=X_test, kernel=kernel)
    if not np.all(np.isfinite(data.kx)) or not np.all(np.isfinite(Yc)):
        raise DomainError("the data must be finite")
    return data, Yc, multi


def _output_pairs(K2, T, n, C, multi):
    """A two-time kernel of output-carrying fields, flattened ``(t, mu, c)`` on both axes
    ``(T n C, T n C)``, as ``(T, n, T, n, C, C)`` (``(T, n, T, n)`` for scalar targets)."""
    if not multi:
        return K2.reshape(T, n, T, n)
    return K2.reshape(T, n, C, T, n, C).transpose(0, 1, 3, 4, 2, 5)


def _equal_pairs(K2, T, n, C, multi):
    """Equal-time ``(T, n C, n C)`` as ``(T, n, n, C, C)`` (``(T, n, n)`` for scalar targets)."""
    if not multi:
        return K2.reshape(T, n, n)
    return K2.reshape(T, n, C, n, C).transpose(0, 1, 3, 2, 4)


# ================================================================== deep nonlinear DFA / Hebb

@public
@limits_blas_threads
def solve_rule_forward(X=None, y=None, *, rule="dfa", rho=None, depth=None, hidden_layers=None, gamma0,
                       eta, steps, activation="tanh", samples: int = 20000, batches: int = 10,
                       seed=0, X_test=None, kernel=None, jitter: float = 1e-10,
                       weight_decay: float = 0.0, momentum: float = 0.0) -> RuleDMFTResult:
    r"""Rich-regime DMFT of deep networks of any activation trained by DFA, Hebb, ρ-FA or GLN (sampled).

    ρ-FA (any activation) is marched by :mod:`effth.dmft.rules.feedback_alignment`: its
    pseudo-gradient chain closes with the responses ``C``, ``D`` (estimated by causal Stein
    regression on the sampled sources) and no true-gradient response; the readout closure adds
    ``gamma0^{-1} ρ <∂φ(h^L)/∂ž^L>`` (for activations with kinks, e.g. ReLU, the direct
    average ``gamma0^{-1} <w^L(0) [φ(h^L(t)) - φ(h^L(0))]>``: the Stein form needs ``φ''``).
    GLN is marched by :func:`effth.dmft.rules.feedback_alignment.march_gln` (both responses ``A``, ``B``, strictly causal
    because the gates are frozen).  The rest of this docstring describes DFA and Hebb.

    For DFA (``g~^ℓ = φ'(h^ℓ) z~^ℓ``) and error-modulated Hebb (``g~^ℓ = Δ φ(h^ℓ)``) no hidden
    field depends on the backward sources ``r^ℓ`` or on the forward weights' transposes, so the
    responses ``A``, ``C`` of eq. (40) vanish and the forward fields close on their own:

    ``h^ℓ(t) = u^ℓ(t) + eta gamma0 Σ_{s<t} Σ_ν Φ^{ℓ-1}_{μν}(t, s) Δ_ν(s) g~^ℓ_ν(s)``,
    ``u^ℓ ~ GP(0, Φ^{ℓ-1})``, ``Φ^0 = K^x``,

    and, since ``h^L`` is independent of the readout's initial weights, the exact closure is
    ``f(t) = eta Σ_{s<t} Φ^L(t, s) Δ(s)``.  The fields are sampled and marched causally in time:
    ``u^ℓ(t)`` is drawn conditionally on ``u^ℓ(s < t)`` from the rows of ``Φ^{ℓ-1}`` estimated
    from the samples of layer ``ℓ - 1`` (Algorithm 1 without its fixed-point loop, which
    causality makes unnecessary here).

    The eNTK ``K = Σ_ℓ G̃^{ℓ+1} ⊙ Φ^ℓ`` needs the true gradients: since nothing in the forward
    dynamics depends on them, ``g^ℓ = φ'(h^ℓ) z^ℓ`` is marched afterwards on the stored samples
    (:func:`effth.dmft.rules.feedback_alignment.march_true_gradient`), with the z-equation of eq. (40),
    ``z^ℓ(t) = r^ℓ(t) + Σ_{s<=t} B̄^ℓ(t,s) φ(h^ℓ(s)) + eta gamma0 Σ_{s<t} G̃^{ℓ+1}(t,s) Δ(s) φ(h^ℓ(s))``,
    ``z^L = w^L(t)``, ``r^ℓ ~ GP(0, G^{ℓ+1})`` (ρ-FA: jointly Gaussian with the feedback source
    ``v^ℓ``, ``Cov(r^ℓ(t), v^ℓ(s)) = G̃^{ℓ+1}(t, s)``) and the response ``B̄^ℓ`` by causal Stein
    regression on ``u^{ℓ+1}``.  GD and GLN need the responses in the dynamics itself and are not
    handled here.

    **Weight decay and momentum** (App. C, eqs. (50)-(53), in discrete time; the optimizer of
    :func:`effth.simulation.simulate_rule_training`): with the filter
    ``θ(t) = a(t) θ(0) + Σ_{s<t} k(t-1-s) u(s)`` of the update
    (:class:`effth.dmft.rules._filter.RuleFilter`, :class:`~effth.dmft.grid.ParameterFilter`),
    every field built from an initial weight carries ``a(t)`` (``h^ℓ = a(t) [u^ℓ + Σ C̄ g̃]``,
    GLN ``a(t) [u^ℓ + Σ Ā g]``, ``z^ℓ = a(t) [r^ℓ + Σ B̄ φ]``, the readout ``w^L(t) = a(t) w^L(0)
    + ...`` and its closure term ``a(t) gamma0^{-1} <w^L(0) φ(h^L(t))>``), with the sources
    ``u``, ``r``, ``v`` unscaled and the responses taken with respect to them, and every
    feature-learning sum carries ``k(t-1-s)``: ``eta gamma0 Σ_{s<t} k(t-1-s) Φ^{ℓ-1}(t,s) Δ(s)
    g̃^ℓ(s)``, ``f(t) = eta Σ_{s<t} k(t-1-s) Φ^L(t,s) Δ(s) + ...``.  ρ-FA's pseudo-gradient
    chain runs through the frozen feedback and carries no ``a``.  One implementation for every
    rule; ``weight_decay = momentum = 0`` is the plain solver bit for bit.

    **Several outputs** (App. C.1, eqs. (41)-(43); every rule): DFA's feedback ``z~^ℓ``,
    ρ-FA's top feedback and the readout get one column per output, the pseudo-gradients
    ``g̃^ℓ_c`` (DFA ``φ'(h^ℓ) z~^ℓ_c``, Hebb ``Δ_c φ(h^ℓ)``, ρ-FA ``φ'(h^ℓ) ž^ℓ_c`` with one feedback
    source ``v^ℓ_c``, ``ζ~^ℓ_c`` and response ``D̄^ℓ_c`` per output and ``Σ_c C̄_c g̃_c`` in the
    forward field) and true gradients ``g^ℓ_c`` an output index, ``h^ℓ`` moves by
    ``Σ_c Δ_c g̃^ℓ_c``, ``f_c(t) = eta Σ_{s<t} k(t-1-s) Φ^L(t,s) Δ_c(s) + ...``, and the
    true-gradient drift contracts ``Σ_{c'} G̃^{ℓ+1}_{cc'} Δ_{c'}``; ``G^ℓ``, ``G̃^ℓ`` and the eNTK
    are ``C x C`` per pair of samples and times (shapes as :func:`solve_rule_deep_linear`); GLN's
    ``z^ℓ_c``, ``g^ℓ_c``, ``r^ℓ_c`` and responses ``Ā_c``, ``B̄_c`` carry the output index
    (:func:`effth.dmft.rules.feedback_alignment.march_gln`).

    Parameters
    ----------
    X, y, X_test, kernel
        Data; ``y`` ``(P,)`` or ``(P, C)`` (``C`` outputs, below).
    rule : {'dfa', 'hebb', 'fa', 'gln'}
    rho : float, optional
        Feedback alignment for ``'fa'``.
    depth, hidden_layers : int
        Give exactly one.
    gamma0, eta, steps
        Richness ``> 0``, Euler step, grid points.
    activation : str, Activation or sympy.Expr
    samples, batches : int
        Monte-Carlo draws, and the batches whose spread gives ``stderr`` (``'f'``, ``'phi'``,
        ``'g'``, ``'gtilde'``, ``'ntk'``; it ignores the noise of the estimated kernels fed into
        the conditional draws).
    seed : int
    jitter : float
        Relative eigenvalue floor of the conditional Gaussian sampling.
    weight_decay, momentum : float
        ``λ >= 0`` with ``eta λ < 1``, heavy-ball ``μ`` in ``[0, 1)`` (above).

    Returns
    -------
    RuleDMFTResult
        Two-time ``phi``, ``g`` and ``gtilde`` (``G̃^ℓ(t, s) = <g^ℓ(t) g̃^ℓ(s)>``), the
        equal-time eNTK ``ntk``, read with ``value(name, layer=)`` and ``stderr(name, layer=)``.
    """
    r = learning_rule(rule, rho)
    if r.name not in ("dfa", "hebb", "fa", "gln"):
        raise NotDerivedError(
            f"solve_rule_forward handles DFA, Hebb, ρ-FA and gated linear networks; {r.title} "
            "of a nonlinear network needs the responses of the non-Gaussian fields with a "
            "fixed-point loop (use solve_monte_carlo; for linear networks solve_rule_deep_linear)")
    L = hidden_layer_count(depth, hidden_layers)
    jitter = _v.nonnegative(jitter, "jitter")
    act, fn, dfn, g0, eta, T, S, nb = _sampled_arguments(activation, gamma0, eta, steps, samples,
                                                         batches)
    data, Yc, multi = _sampled_targets(X, y, X_test, kernel)
    P, n, C = data.n_train, data.n_all, Yc.shape[1]
    opt = RuleFilter(eta, T, weight_decay, momentum)
    rng = _v.rng(seed)
    if r.name == "gln":
        from effth.dmft.rules.feedback_alignment import march_gln
        f, f_se, D, Phi, Phi_se, G, G_se, K, K_se, sec = march_gln(data, L, g0, eta, T, dfn, S,
                                                                   nb, rng, opt=opt, Y=Yc)
        shape = (L, T, n, T, n)
        G, G_se = (np.stack([_output_pairs(k, T, n, C, multi) for k in x]) for x in (G, G_se))
        if not multi:
            f, f_se, D, K, K_se = f[..., 0], f_se[..., 0], D[..., 0], K[..., 0, 0], K_se[..., 0, 0]
        return RuleDMFTResult(grid=TimeGrid(eta, T), data=data, hidden_layers=L, gamma0=g0,
                              rule=r, phi=Phi.reshape(shape), g=G, gtilde=G.copy(), f=f,
                              delta=D[:, :P], ntk=K, closure="exact", activation=act.name,
                              diagnostics={"seconds": sec, "samples": S, "weight_decay": opt.lam,
                                           "momentum": opt.mu},
                              mc_stderr={"f": f_se, "phi": Phi_se.reshape(shape), "g": G_se,
                                         "gtilde": G_se.copy(), "ntk": K_se})
    if r.name == "fa":
        from effth.dmft.rules.feedback_alignment import march_fa
        d2fn = None if act.kinks else act.numpy(2)      # kinks: direct readout average
        f, f_se, D, Phi, Phi_se, GG, sec, smp = march_fa(data, L, r.rho, g0, eta, T, fn, dfn,
                                                         d2fn, S, nb, rng, opt=opt, Y=Yc)
        return _with_true_gradients(data, L, r, act, g0, eta, T, dfn, smp, f, f_se, D, Phi,
                                    Phi_se, nb, rng, sec, S, {"gtilde_tilde": GG}, opt, multi)
    start = time.perf_counter()
    Nn = T * n
    A = [np.zeros((S, Nn)) for _ in range(L)]          # features a^ℓ at flattened (t, μ)
    Hf = [np.zeros((S, Nn)) for _ in range(L)]         # fields h^ℓ
    U = [np.zeros((S, Nn)) for _ in range(L)]          # sources u^ℓ
    Phi = [np.zeros((Nn, Nn)) for _ in range(L)]
    PhiB = [np.zeros((nb, Nn, Nn)) for _ in range(L)]  # batch estimates (errors)
    zt = [rng.standard_normal((S, C)) for _ in range(L)] if r.name == "dfa" else None
    w_, V = np.linalg.eigh(data.kx)
    u1 = rng.standard_normal((S, n)) @ (V * np.sqrt(np.clip(w_, 0, None))).T
    f = np.zeros((T, n, C))
    f_se = np.zeros((T, n, C))
    D = np.zeros((T, n, C))
    Gt = [np.zeros((S, Nn * C)) for _ in range(L)]     # pseudo-gradients g~^ℓ_c at (t, μ, c)
    Kx_t = np.tile(data.kx, (T, T))
    try:
        with np.errstate(over="raise", invalid="raise"):
            for t in range(T):
                rs, p = slice(t * n, (t + 1) * n), slice(0, t * n)
                stop = rs.stop
                for l in range(L):
                    prev = Kx_t if l == 0 else Phi[l - 1]
                    if l == 0:
                        U[0][:, rs] = u1
                    else:                                 # u(t) | u(<t) ~ N(M u(<t), Schur)
                        C_pp, C_tp, C_tt = prev[p, p], prev[rs, p], prev[rs, rs]
                        if t > 0:
                            ev, EV = np.linalg.eigh(C_pp)
                            keep = ev > jitter * max(ev.max(), 1e-300)
                            inv = (EV[:, keep] / ev[keep]) @ EV[:, keep].T
                            M = C_tp @ inv
                            schur = C_tt - M @ C_tp.T
                            mean = U[l][:, p] @ M.T
                        else:
                            schur, mean = C_tt, 0.0
                        es, ES = np.linalg.eigh(0.5 * (schur + schur.T))
                        root = ES * np.sqrt(np.clip(es, 0, None))
                        U[l][:, rs] = mean + rng.standard_normal((S, n)) @ root.T
                    drift = 0.0
                    if t > 0:       # Phi^{l-1}(t,s) Delta_c(s) [k(t-1-s)], columns (s, ν, c)
                        wgt = (prev[rs, p] if C == 1 else np.repeat(prev[rs, p], C, axis=1)) \
                            * D[:t].ravel()[None, :]
                        if not opt.plain:
                            wgt = wgt * opt.past(t, n * C)[None, :]
                        drift = eta * g0 * Gt[l][:, :t * n * C] @ wgt.T
                    h = (U[l][:, rs] if opt.plain else opt.init(t) * U[l][:, rs]) + drift
                    Hf[l][:, rs] = h
                    a = fn(h)
                    A[l][:, rs] = a
                    # new rows of Phi^l (t against s <= t), and per-batch estimates
                    blk = A[l][:, rs].T @ A[l][:, :stop] / S
                    Phi[l][rs, :stop] = blk
                    Phi[l][:stop, rs] = blk.T
                    bb = batch_gram(A[l][:, rs], A[l][:, :stop], nb)
                    PhiB[l][:, rs, :stop] = bb
                    PhiB[l][:, :stop, rs] = bb.transpose(0, 2, 1)
                # f(t) = eta sum_{s<t} k(t-1-s) Phi^L(t, s) Delta(s)  (exact closure,
                # <r phi(h^L)> = 0)
                if t > 0:
                    ph, phb = Phi[L - 1][rs, p], PhiB[L - 1][:, rs, p]
                    if not opt.plain:
                        kw = opt.past(t, n)
                        ph, phb = ph * kw[None, :], phb * kw[None, None, :]
                    for c in range(C):
                        dp = D[:t, :, c].ravel()
                        f[t, :, c] = eta * ph @ dp
                        per = eta * phb @ dp
                        f_se[t, :, c] = per.std(axis=0, ddof=1) / np.sqrt(nb)
                D[t, :P] = Yc - f[t, :P]
                rc = slice(t * n * C, (t + 1) * n * C)
                for l in range(L):                        # pseudo-gradients at time t
                    h = Hf[l][:, rs]
                    gt = (dfn(h)[:, :, None] * zt[l][:, None, :] if r.name == "dfa"
                          else A[l][:, rs][:, :, None] * D[t][None, :, :])
                    Gt[l][:, rc] = gt.reshape(S, n * C)
                if not np.all(np.isfinite(f[t])) or np.abs(D[t]).max() > 1e6 * max(1.0, np.abs(data.y).max()):
                    raise FloatingPointError
    except FloatingPointError:
        raise DomainError(f"the {r.title} dynamics diverge (eta={eta:g}, gamma0={g0:g}); use a "
                          "smaller eta or gamma0") from None
    phi_se = np.stack([pb.std(axis=0, ddof=1) / np.sqrt(nb) for pb in PhiB])
    smp = {"h": Hf, "u": U, "a": A, "gtilde": Gt, "phi": Phi}
    return _with_true_gradients(data, L, r, act, g0, eta, T, dfn, smp, f, f_se, D, np.stack(Phi),
                                phi_se, nb, rng, time.perf_counter() - start, S, {}, opt, multi)


def _with_true_gradients(data, L, r, act, g0, eta, T, dfn, smp, f, f_se, D, Phi, Phi_se, nb, rng,
                         seconds, S, extra, opt, multi) -> RuleDMFTResult:
    """The forward solvers' result, with ``G``, ``G~`` and the eNTK from the true-gradient fields
    marched on the stored samples (:func:`effth.dmft.rules.feedback_alignment.march_true_gradient`);
    ``f``, ``f_se``, ``D`` carry an output axis ``(T, n, C)``."""
    from effth.dmft.rules.feedback_alignment import march_true_gradient
    n, P, C = data.n_all, data.n_train, D.shape[2]
    start = time.perf_counter()
    G, GT, K, G_se, GT_se, K_se = march_true_gradient(
        data, L, g0, eta, T, dfn, smp, D, nb, rng, rho=r.rho if r.name == "fa" else None, opt=opt)
    shape = (L, T, n, T, n)
    rs = lambda x: x.reshape(shape)
    pairs = lambda x: np.stack([_output_pairs(k, T, n, C, multi) for k in x])
    if not multi:
        f, f_se, D = f[..., 0], f_se[..., 0], D[..., 0]
        K, K_se = K[..., 0, 0], K_se[..., 0, 0]
    return RuleDMFTResult(grid=TimeGrid(eta, T), data=data, hidden_layers=L, gamma0=g0, rule=r,
                          phi=rs(Phi), g=pairs(G), gtilde=pairs(GT), f=f, delta=D[:, :P], ntk=K,
                          closure="exact", activation=act.name,
                          diagnostics={"seconds": seconds + time.perf_counter() - start,
                                       "samples": S, "weight_decay": opt.lam,
                                       "momentum": opt.mu, **{k: pairs(v) for k, v in extra.items()}},
                          mc_stderr={"f": f_se, "phi": rs(Phi_se), "g": pairs(G_se),
                                     "gtilde": pairs(GT_se), "ntk": K_se})


# ================================================================== finite-width NLO (App. H)

@public
@dataclass
class KernelFluctuations:
    r"""Leading finite-width (NLO) covariances of the kernels at initialization (App. H.3).

    For one input with ``K^x = 1`` and an activation with ``<φ(u)^2> = 1`` (so ``Φ^ℓ = 1`` at
    every layer): ``N Cov(Φ^ℓ, Φ^ℓ') = V_φ min(ℓ, ℓ')`` and
    ``N Cov(G^ℓ, G^ℓ') = V_g min(L+1-ℓ, L+1-ℓ')`` with ``V_φ = <φ^4> - 1`` and
    ``V_g = <φ'^4> <z^4> - 1 = 3 <φ'^4> - 1`` (5 and 5 for sqrt(2)-ReLU, 2 and 2 for linear).
    Since ``Φ^ℓ`` is a product of ``ℓ`` independent factors of mean 1 and variance ``V_φ / N``,
    the exact finite-width variance is ``(1 + V_φ / N)^ℓ - 1`` (``exact_variance``).
    """

    hidden_layers: int
    activation: str
    v_phi: float
    v_g: float

    @property
    def layers(self) -> tuple:
        return tuple(range(1, self.hidden_layers + 1))

    def cov_phi(self, widths=None) -> np.ndarray:
        """``Cov(Φ^ℓ, Φ^ℓ')`` ``(L, L)``: times ``1/N`` if ``widths`` (``N``) is given, else ``N Cov``."""
        ell = np.arange(1, self.hidden_layers + 1)
        c = self.v_phi * np.minimum.outer(ell, ell).astype(float)
        return c if widths is None else c / _width(widths)

    def cov_g(self, widths=None) -> np.ndarray:
        """``Cov(G^ℓ, G^ℓ')`` ``(L, L)`` (``N Cov`` without ``widths``)."""
        k = self.hidden_layers + 1 - np.arange(1, self.hidden_layers + 1)
        c = self.v_g * np.minimum.outer(k, k).astype(float)
        return c if widths is None else c / _width(widths)

    def exact_variance(self, widths) -> np.ndarray:
        """``Var Φ^ℓ = (1 + V_φ / N)^ℓ - 1``, ``ℓ = 1..L`` (exact at width ``N = widths``)."""
        N = _width(widths)
        return (1 + self.v_phi / N) ** np.arange(1, self.hidden_layers + 1) - 1

    def value(self, name: str, layer=None):
        """``'cov_phi'``, ``'cov_g'`` (``N Cov``, ``(L, L)``), ``'v_phi'``, ``'v_g'``."""
        if layer is not None:
            raise DomainError("these quantities are (L, L) matrices; give no layer")
        if name in ("cov_phi", "cov_g"):
            return getattr(self, name)()
        if name in ("v_phi", "v_g"):
            return getattr(self, name)
        raise DomainError(f"unknown quantity {name!r}; known: cov_phi, cov_g, v_phi, v_g")

    def stderr(self, name: str, layer=None):
        self.value(name, layer)

    def latex(self) -> str:
        return (r"\mathrm{Cov}(\Phi^\ell,\Phi^{\ell'})=\frac{V_\phi}{N}\min(\ell,\ell'),\ "
                r"\mathrm{Cov}(G^\ell,G^{\ell'})=\frac{V_g}{N}\min(L+1-\ell,L+1-\ell')"
                + rf",\ V_\phi={self.v_phi:.6g},\ V_g={self.v_g:.6g}")

    def __repr__(self) -> str:
        return (f"KernelFluctuations({depth_text(self.depth)}, activation={self.activation!r}, "
                f"V_phi={self.v_phi:.6g}, V_g={self.v_g:.6g})")


def _width(widths) -> int:
    return integer(widths, "widths", minimum=1)


@public
def kernel_fluctuations(activation="relu", *, depth=None, hidden_layers=None,
                        rtol: float = 1e-6) -> KernelFluctuations:
    r"""NLO finite-width covariances of ``Φ^ℓ`` and ``G^ℓ`` at initialization (App. H.3).

    Single input, ``K^x = 1``; the activation must keep the kernel fixed, ``<φ(u)^2> = 1`` for
    ``u ~ N(0, 1)`` (e.g. ``sqrt(2) relu`` or linear), and ``<φ'(u)^2> = 1`` so that ``G^ℓ = 1``;
    otherwise :class:`NotDerivedError` (the layer-dependent kernels of other activations are not
    derived here).  Returns :class:`KernelFluctuations`.
    """
    L = hidden_layer_count(depth, hidden_layers)
    act = resolve_activation(activation)
    ones = lambda k: np.ones((k, k))
    m2 = float(gaussian_expectation([(0, "sigma", 0), (1, "sigma", 0)], ones(2), act))
    d2 = float(gaussian_expectation([(0, "sigma", 1), (1, "sigma", 1)], ones(2), act))
    if abs(m2 - 1) > rtol or abs(d2 - 1) > rtol:
        raise NotDerivedError(
            f"kernel_fluctuations needs <phi^2> = <phi'^2> = 1 at unit input norm (the kernel "
            f"a fixed point of the recursion, App. H.3); activation={activation!r} gives "
            f"<phi^2> = {m2:.6g}, <phi'^2> = {d2:.6g} (scale it, e.g. sqrt(2) relu)")
    m4 = float(gaussian_expectation([(k, "sigma", 0) for k in range(4)], ones(4), act))
    d4 = float(gaussian_expectation([(k, "sigma", 1) for k in range(4)], ones(4), act))
    return KernelFluctuations(hidden_layers=L, activation=act.name, v_phi=m4 - 1, v_g=3 * d4 - 1)
