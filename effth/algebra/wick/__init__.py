"""Wick contractions of Gaussian slots: pairings, graphs, isomorphism classes, neuron-index counting."""

from .pairings import count_pairings, double_factorial, enumerate_pairings

__all__ = ["count_pairings", "double_factorial", "enumerate_pairings"]
