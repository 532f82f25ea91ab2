"""LaTeX printing in the book's notation: :func:`latex`, :class:`EffthLatexPrinter`, :func:`init_printing`."""

from .latex import EffthLatexPrinter, init_printing, latex

__all__ = ["EffthLatexPrinter", "init_printing", "latex"]
