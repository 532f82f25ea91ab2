"""Keyword checking for the public API: a mistyped or retired keyword gets a suggestion.

Python's own message for ``predict(..., widths=32)`` is a bare ``TypeError: predict() got an
unexpected keyword argument 'width'``. :func:`public` checks the keywords of a call against the
signature before the call and, for an unknown one, names the closest accepted keyword, or the
keyword that replaced a retired one (``docs/conventions.md``: one spelling per meaning).

The check costs one set comparison per call; calls with correct keywords run the function
unchanged. The keywords with one meaning everywhere (``seed=``, ``rtol=``, ``progress=`` and the
flags annotated ``bool``) are checked here too, by :func:`effth._validate.keyword_rules`.

Examples
--------
>>> @public
... def f(x, *, widths=None):
...     return widths
>>> f(1, widths=2)
2
>>> f(1, widhts=2)
Traceback (most recent call last):
...
TypeError: f() got an unexpected keyword argument 'widhts'; did you mean 'widths'?
>>> f(1, width=2)
Traceback (most recent call last):
...
TypeError: f() got an unexpected keyword argument 'width'; 'width' is now 'widths' (docs/conventions.md)
"""

from __future__ import annotations

import difflib
import functools
import inspect
from typing import Any, Callable

from .errors import EffthError as _EffthError

__all__ = ["RETIRED", "public", "suggest"]

#: keywords the package no longer uses -> the one that replaced them (``docs/conventions.md``)
RETIRED = {
    "width": "widths",
    "size": "networks",
    "seeds": "seed",
    "rng": "seed",
    "n_networks": "networks",
    "num_networks": "networks",
}


#: the two words for time (``docs/conventions.md``): grid points of the DMFT and ``simulate_training``
#: against parameter updates of ``train_ensemble`` and ``predict`` (``steps = updates + 1``)
_TIME = {"steps": ("updates", "this function counts parameter updates (steps = updates + 1)"),
         "updates": ("steps", "this function counts time-grid points t_i = i*eta, "
                              "i = 0..steps-1 (steps = updates + 1)")}


def suggest(name: str, accepted: Any) -> str:
    """The ``"; did you mean ..."`` tail for an unknown keyword ``name`` (``""`` if none)."""
    accepted = sorted(accepted)
    if name in _TIME and _TIME[name][0] in accepted:
        other, why = _TIME[name]
        return f"; {why}: pass {other}="
    new = RETIRED.get(name)
    if new is not None and new in accepted:
        return f"; {name!r} is now {new!r} (docs/conventions.md)"
    close = difflib.get_close_matches(name, accepted, n=2, cutoff=0.6)
    if not close:
        low = name.lower()
        close = [a for a in accepted if a.lower() == low]
    if not close:
        return f"; accepted keywords: {', '.join(accepted)}"
    return "; did you mean " + " or ".join(repr(c) for c in close) + "?"


def _keywords(fn: Callable) -> frozenset | None:
    """Keywords ``fn`` accepts, or ``None`` if it takes ``**kwargs`` (anything goes)."""
    params = inspect.signature(fn).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return frozenset(p.name for p in params
                     if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                   inspect.Parameter.KEYWORD_ONLY))


def public(obj: Any) -> Any:
    """Decorate a public function (or class: its ``__init__``) so unknown keywords get a
    ``TypeError`` that names the keyword meant. Everything else is unchanged."""
    if isinstance(obj, type):
        init = obj.__dict__.get("__init__")
        if inspect.isfunction(init):              # a Python __init__ of this class (dataclasses too)
            obj.__init__ = public(init)
        obj.__effth_public__ = True
        return obj
    accepted = _keywords(obj)
    if accepted is None:
        obj.__effth_public__ = True
        return obj
    name = obj.__qualname__.removesuffix(".__init__")
    from ._validate import check_keywords, check_positional, domain_error_from, keyword_rules
    # seed=, rtol=, progress=, net=, bool/int/float/str flags (effth._validate); functions only:
    # the fields of result classes (a run's seed=(SeedSequence, ...), its converged=) are not
    # user input
    rules = {} if obj.__name__ == "__init__" else keyword_rules(obj)
    names = tuple(p.name for p in inspect.signature(obj).parameters.values()
                  if p.kind in (inspect.Parameter.POSITIONAL_ONLY,
                                inspect.Parameter.POSITIONAL_OR_KEYWORD))

    @functools.wraps(obj)
    def checked(*args, **kwargs):
        if kwargs and not accepted.issuperset(kwargs):
            bad = next(k for k in kwargs if k not in accepted)
            raise TypeError(f"{name}() got an unexpected keyword argument {bad!r}"
                            + suggest(bad, accepted - {"self"})) from None
        if rules:
            if kwargs:
                check_keywords(rules, kwargs)
            if args:
                check_positional(rules, names, args)
        try:
            return obj(*args, **kwargs)
        except (MemoryError, OverflowError, ValueError, TypeError, AttributeError) as exc:
            # a raw allocation failure, float overflow, plain ValueError or an argument of the
            # wrong built-in type below: the DomainError naming the argument (or the sizes);
            # effth's own bugs (no argument of the named type) propagate unchanged
            mapped = None if isinstance(exc, _EffthError) else domain_error_from(
                exc, name, args, kwargs, names)
            if mapped is None:
                raise
            raise mapped from exc

    checked.__effth_public__ = True
    return checked
