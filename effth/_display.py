"""One-line summaries and small HTML tables for the result types of every layer (no NumPy needed)."""

from __future__ import annotations

import html
from typing import Any, Iterable

__all__ = ["activation_text", "html_table", "short"]


def short(values: Iterable[Any], limit: int = 6) -> str:
    """``(a, b, c)`` for short tuples, ``(a, b, ..., z)`` (with a count) for long ones."""
    vals = tuple(values)
    if len(vals) <= limit:
        return "(" + ", ".join(str(v) for v in vals) + ("," if len(vals) == 1 else "") + ")"
    return ("(" + ", ".join(str(v) for v in vals[:limit - 2]) + ", ..., " + str(vals[-1])
            + f"; {len(vals)} values)")


def html_table(title: str, rows: Iterable[tuple[str, Any]]) -> str:
    """A two-column HTML table (``<table>`` with a caption) of ``(field, value)`` rows."""
    body = "".join(f"<tr><th style='text-align:left'>{html.escape(str(k))}</th>"
                   f"<td style='text-align:left'>{html.escape(str(v))}</td></tr>" for k, v in rows)
    return f"<table><caption>{html.escape(title)}</caption>{body}</table>"


def activation_text(activation: Any) -> str:
    """A short printable name of an activation: its registry name, or ``user: <expression>``."""
    expr = getattr(activation, "expr", None)
    if getattr(activation, "family", None) == "user" and expr is not None:
        return f"user: {expr}"
    return str(getattr(activation, "name", activation))


def depth_text(depth: int) -> str:
    """How every result's ``repr`` states its depth: ``depth=3 (hidden_layers=2)``
    (``docs/conventions.md``: PDLT's :math:`L` and the DMFT papers' :math:`L`)."""
    return f"depth={int(depth)} (hidden_layers={int(depth) - 1})"
