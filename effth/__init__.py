"""effth: the effective theory of wide neural networks, derived, printed, compiled and checked."""

__version__ = "0.1.0"
