r"""Single-input forms in the book's helper functions: the same simplifier idea for scalars.

With one input every atom is a one-variable expectation :math:`\langle\sigma^{(a)}\sigma^{(b)}
\cdots\rangle_K` and the book writes the recursions in a few named functions of :math:`K`
(PDLT (5.49)–(5.52), (5.111), (9.8)–(9.11): :math:`g`, :math:`\chi_\parallel`, :math:`\chi_\perp`,
:math:`h`, :math:`j`). :func:`in_helpers` rewrites an expression in them:

1. each helper is linear in one atom it *eliminates* (``χ∥ = C_W(⟨σ'σ'⟩ + ⟨σσ''⟩)`` eliminates
   ``⟨σσ''⟩``); every subset of the helpers is tried, its atoms eliminated exactly (a linear
   substitution), the result collected by its tensors and factored;
2. the shortest printed result wins, and is checked equal to the input (exact).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable, Sequence

import sympy as sp

from effth.algebra.expectation import GaussianExpectation, expand_expectations
from effth.algebra.tensors import SampleTensor

from .structured import NamedScalar, term_dict

__all__ = ["Helper", "in_helpers"]


@dataclass(frozen=True)
class Helper:
    """A named function of the kernel: its printed name, definition and eliminated atom."""

    name: str
    definition: sp.Expr
    eliminates: sp.Expr
    where: str = ""

    def scalar(self) -> NamedScalar:
        return NamedScalar(self.name, self.definition)


def _group(expr: sp.Expr) -> sp.Expr:
    """Collect by the monomial of tensors (and width ratios left in the coefficients), factor."""
    groups: dict = {}
    for t in sp.Add.make_args(sp.expand(expr)):
        tens = sp.Mul(*[f for f in sp.Mul.make_args(t)
                        if isinstance(f.base if f.is_Pow else f, SampleTensor)])
        groups[tens] = groups.get(tens, 0) + t / tens
    return sp.Add(*[sp.factor(c) * k for k, c in groups.items()], evaluate=False)


def in_helpers(expr: sp.Expr, helpers: Sequence[Helper], measure: Callable[[sp.Expr], float]) -> tuple:
    """``(best, used)``: ``expr`` rewritten in a subset of ``helpers`` (NamedScalar objects), the
    one of smallest ``measure``, and the helpers it uses. Exact: checked term by term."""
    e = expand_expectations(sp.expand(expr))
    target = term_dict(e)
    present = set(e.atoms(GaussianExpectation))
    usable = [h for h in helpers if h.eliminates in present]
    best = (measure(_group(e)), _group(e), ())
    for r in range(1, len(usable) + 1):
        for subset in itertools.combinations(usable, r):
            sub, names = {}, {}
            for k, h in enumerate(subset):
                a = h.eliminates
                ph = sp.Symbol(f"_H{k}")           # a placeholder: substitutions never enter it
                sol = sp.solve(sp.Eq(ph, h.definition), a)
                if len(sol) != 1:
                    break
                sub[a] = sol[0]
                names[ph] = h.scalar()
            else:
                cand = e
                for _ in range(len(subset)):       # triangular: a helper may use another's atom
                    cand = sp.expand(cand.xreplace(sub))
                cand = _group(cand).xreplace(names)
                m = measure(cand) + 20 * len(subset)      # each name costs a definition
                if m < best[0]:
                    best = (m, cand, subset)
    unfolded = best[1].replace(lambda x: isinstance(x, NamedScalar), lambda x: x.definition)
    if term_dict(expand_expectations(sp.expand(unfolded))) != target:
        raise AssertionError("the helper form differs from the derivation (a bug)")
    return best[1], tuple(best[2])
