"""The Langevin noise variance of the discrete update, shared by the DMFT solvers
(:mod:`effth.dmft.grid`) and the trainer (:mod:`effth.simulation.training`): it lives below both,
so that the simulator imports no theory module."""

from __future__ import annotations

__all__ = ["langevin_noise"]


def langevin_noise(eta: float, weight_decay: float = 0.0, temperature: float = 0.0,
                   momentum: float = 0.0) -> float:
    """``sigma^2``, the variance of the Langevin noise added per step to the increment of every
    parameter (in its mean-field units), shared by the DMFT solvers and the trainer.

    Chosen so that the prior ``N(0, temperature / weight_decay)`` (Bordelon & Pehlevan (2022),
    App. K.2) is exactly invariant under the decay-and-noise part of the step:
    ``temperature (1 - rho^2) / weight_decay`` for GD (``rho = 1 - eta lambda``; ``2 eta
    temperature`` at ``lambda = 0``, the Euler-Maruyama ``2 eta / beta`` of eq. (100)), and with
    heavy-ball momentum ``mu`` (noise inside the increment, ``v <- mu v + (1 - mu) (eta G - eta
    lambda theta + sigma xi)``, App. L) ``temperature eta (2 - eta lambda (1 - mu) / (1 + mu))``:
    the stationary variance of that AR(2) recursion is ``sigma^2 (1 + mu) / (eta lambda (2 (1 +
    mu) - (1 - mu) eta lambda))``.  Both agree at ``mu = 0`` and differ from ``2 eta
    temperature`` by ``O(eta^2)``.  ``0`` without temperature."""
    lam, temp, mu = float(weight_decay), float(temperature), float(momentum)
    if temp <= 0:
        return 0.0
    if mu == 0.0:
        rho = 1.0 - float(eta) * lam
        return temp * (1.0 - rho ** 2) / lam if lam > 0 else 2.0 * float(eta) * temp
    return temp * float(eta) * (2.0 - float(eta) * lam * (1.0 - mu) / (1.0 + mu))
