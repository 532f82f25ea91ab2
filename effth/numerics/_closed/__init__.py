"""Implementation of :mod:`effth.numerics.closed_forms` (Isserlis moments, orthant moments, family planners)."""
