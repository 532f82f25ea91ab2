r"""Weight decay and heavy-ball momentum in the sampled learning-rule solvers (Bordelon &
Pehlevan, ICLR 2023, App. C, eqs. (50)-(53), in discrete time).

The rule trainer (:func:`effth.simulation.simulate_rule_training`) updates every *trained*
weight (``W^0 .. W^{L-1}``, ``w^L``; not the frozen feedback of ρ-FA and DFA, nor the gates) by
``v <- mu v + (1 - mu) (u - eta lambda theta)``, ``theta <- theta + v`` around the rule's increment
``u`` (``mu = 0``: ``theta <- (1 - eta lambda) theta + u``).  Its solution is the optimizer's
filter (:class:`~effth.dmft.grid.ParameterFilter`)

``theta(t) = a(t) theta(0) + sum_{s<t} k(t-1-s) u(s)``,

and this is all the DMFT needs (the same filter as the deep linear rule DMFT and the GD solvers):
with the *unscaled* Gaussian sources (``u^ℓ ~ GP(0, Φ^{ℓ-1})`` from ``W^{ℓ-1}(0)``,
``r^ℓ ~ GP(0, G^{ℓ+1})`` from ``W^ℓ(0)^T``) and the responses taken with respect to them,

* every field built from an initial weight carries ``a(t)``: ``h^ℓ(t) = a(t) [u^ℓ(t) + response
  terms] + ...``, ``z^ℓ(t) = a(t) [r^ℓ(t) + response terms] + ...``, ``w^L(t) = a(t) w^L(0) + ...``
  (ρ-FA's pseudo-gradient field is built from the *frozen* feedback and carries no ``a``);
* every feature-learning sum carries ``k(t-1-s)``: ``eta gamma0 sum_{s<t} k(t-1-s) Φ(t, s) Δ(s)
  g~(s)`` (eq. (50)'s ``e^{-λ(t-s)}``, or the momentum kernel ``e^{-(t'-t'')/τ}/τ`` of (51)-(53)
  integrated once).

Fields that are linear images of one weight with a fixed input (the two-layer ``h = W^0 x``
and the readout ``z = w^L``) are instead advanced by the optimizer's own recursion
(:meth:`RuleFilter.step`), which the filter solves.  ``weight_decay = momentum = 0`` gives
``a = k = 1`` and the plain Euler marching bit for bit (:attr:`RuleFilter.plain` skips the
factors).
"""

from __future__ import annotations

import numpy as np

from effth._validate import real_scalar
from effth.dmft.grid import langevin_settings, parameter_filter


class RuleFilter:
    """The trainer's update on ``steps`` grid points: ``a(t)``, ``k(j)`` and the recursion."""

    def __init__(self, eta: float, steps: int, weight_decay=0.0, momentum=0.0):
        lam = real_scalar(weight_decay, "weight_decay")
        rho, _, mu = langevin_settings(eta, lam, 0.0, momentum)
        self.eta, self.lam, self.mu, self.rho = float(eta), float(lam), float(mu), float(rho)
        self.plain = self.lam == 0.0 and self.mu == 0.0
        filt = parameter_filter(eta, steps, lam, 0.0, mu)
        self.a = np.asarray(filt.init, dtype=float)          # a(t)
        self.k = np.asarray(filt.memory, dtype=float)        # k(j), j = 0 .. T-1
        self._v = {}

    def init(self, t: int) -> float:
        """``a(t)``, the factor of the initial weights at step ``t``."""
        return float(self.a[t])

    def past(self, t: int, width: int) -> np.ndarray:
        """``k(t-1-s)`` for ``s = 0 .. t-1``, each repeated ``width`` times (the flattened
        ``(s, ν)`` columns of a time-major kernel row)."""
        return np.repeat(self.k[:t][::-1], width)

    def step(self, key, x: np.ndarray, inc: np.ndarray) -> np.ndarray:
        """One update of a field that is a linear image of a trained weight:
        ``x <- rho x + inc`` (no momentum) or ``v <- mu v + (1 - mu)(inc - eta lambda x)``,
        ``x <- x + v`` (the trainer's update, :class:`effth.simulation.training._Optimizer`)."""
        if self.plain:
            return x + inc
        if self.mu == 0.0:
            return self.rho * x + inc
        d = inc - (self.eta * self.lam) * x if self.lam else inc
        v = self._v.get(key)
        v = (1.0 - self.mu) * d if v is None else self.mu * v + (1.0 - self.mu) * d
        self._v[key] = v
        return x + v
