"""Wick contractions of Gaussian slots: pairings, graphs, isomorphism classes, neuron-index counting."""

from .counting import (
    c2m,
    c2m_gamma,
    collapse_neurons,
    cycle_count,
    cycle_histogram,
    cycle_polynomial,
    deep_linear_layer_factor,
    trace_matching,
)
from .graph import (
    Slot,
    WickClass,
    WickExpansion,
    WickGraph,
    structure_automorphisms,
    structure_generators,
    wick_classes,
)
from .isserlis import isserlis_terms
from .pairings import count_pairings, double_factorial, enumerate_pairings

__all__ = [
    "count_pairings",
    "double_factorial",
    "enumerate_pairings",
    "isserlis_terms",
    "Slot",
    "WickGraph",
    "WickClass",
    "WickExpansion",
    "wick_classes",
    "structure_automorphisms",
    "structure_generators",
    "cycle_count",
    "collapse_neurons",
    "cycle_histogram",
    "cycle_polynomial",
    "c2m",
    "c2m_gamma",
    "deep_linear_layer_factor",
    "trace_matching",
]
