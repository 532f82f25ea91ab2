"""Compilation of effth expressions to vectorized NumPy: :func:`compile_expression`, :func:`compile_step`."""

from .compile import (
    CompiledExpression,
    CompiledStep,
    cache_info,
    clear_cache,
    compile_expression,
    compile_step,
)

__all__ = [
    "CompiledExpression",
    "CompiledStep",
    "cache_info",
    "clear_cache",
    "compile_expression",
    "compile_step",
]
