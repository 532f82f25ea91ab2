r"""Compile effth expressions into vectorized NumPy functions of kernels.

An expression such as the kernel recursion (PDLT (4.118))

.. math:: K^{(\ell+1)}_{\alpha_1\alpha_2}=C_b+C_W\langle\sigma_{\alpha_1}\sigma_{\alpha_2}\rangle_{K^{(\ell)}}

is compiled in three parts:

1. every Gaussian-expectation atom (after linearity, :func:`expand_expectations`) becomes one
   call of ``effth.numerics.gaussian_expectation(factors, K_sub, activation, method, rtol)`` on
   the sub-kernel of its samples (marginalization, PDLT §4.4); identical atoms are evaluated
   once;
2. kernel components :math:`K_{ab}` are read from the input arrays (``K[..., a, b]``);
3. the rest is lambdified once with common-subexpression elimination (``cse=True``, numpy).

Compiled objects are cached by a structural key (``srepr`` of the expressions, inputs,
activation name/params/expression, samples, params, method, rtol), so compiling the same thing
twice is free (:func:`cache_info`).  A *layer step* is compiled once with :func:`compile_step`
and iterated by the caller, so compile time does not grow with depth.

Examples
--------
>>> import numpy as np
>>> from effth.algebra.indices import ell
>>> from effth.algebra.tensors import Kernel, KernelMatrix
>>> f = compile_expression(Kernel(0, 0, ell) * Kernel(1, 1, ell) - Kernel(0, 1, ell)**2,
...                        kernel=KernelMatrix(Kernel, ell), activation=None)
>>> f(np.array([[2.0, 1.0], [1.0, 3.0]]))
array(5.)
"""

from __future__ import annotations

from effth._signature import public

import inspect
import keyword
import re
import threading
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import sympy as sp

from effth.algebra.expectation import GaussianExpectation, atoms_of, expand_expectations
from effth.algebra.indices import LayerSymbol
from effth.algebra.tensors import (
    KernelMatrix,
    SampleSum,
    SampleTensor,
    expand_sample_sums,
    sample_position,
)
from effth.errors import DomainError, NotDerivedError

__all__ = [
    "CompiledExpression",
    "CompiledStep",
    "compile_expression",
    "compile_step",
    "cache_info",
    "clear_cache",
]

_key = sp.default_sort_key

# --------------------------------------------------------------------------------------------
# cache
# --------------------------------------------------------------------------------------------
_CACHE: dict[tuple, Any] = {}
_CACHE_SIZE = 256  # oldest entries are evicted beyond this
_STATS = {"hits": 0, "misses": 0}
_LOCK = threading.Lock()


@public
def cache_info() -> dict:
    """``{'hits': int, 'misses': int, 'size': int}`` of the compile cache."""
    with _LOCK:
        return {**_STATS, "size": len(_CACHE)}


@public
def clear_cache() -> None:
    """Empty the compile cache and reset its counters."""
    with _LOCK:
        _CACHE.clear()
        _STATS.update(hits=0, misses=0)


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------
def _real_array(x, what: str) -> np.ndarray:
    """A real float64 array, or DomainError (complex values are not silently truncated)."""
    raw = np.asarray(x)
    if np.iscomplexobj(raw):
        raise DomainError(f"{what} must be real; got a complex array")
    try:
        return np.asarray(raw, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise DomainError(f"{what} must be an array of real numbers: {exc}") from None


def _resolve_activation(activation):
    if activation is None or not isinstance(activation, str):
        return activation
    from effth.activations import get_activation

    return get_activation(activation)


def _activation_key(act) -> tuple:
    if act is None:
        return (None,)
    return (act.name, tuple(act.params), sp.srepr(act.expr))


def _sanitize(name: str) -> str:
    s = re.sub(r"[^0-9a-zA-Z_]", "", name.replace("{", "").replace("}", "").replace("\\", ""))
    if not s or s[0].isdigit():
        s = "p_" + s
    return s


def _normalize_params(params) -> list[tuple[str, sp.Expr]]:
    """``params`` as ``[(keyword, expression), ...]``."""
    if isinstance(params, Mapping):
        items = [(str(k), sp.sympify(v)) for k, v in params.items()]
    else:
        items = []
        for p in params:
            p = sp.sympify(p)
            if isinstance(p, sp.Symbol):
                name = p.name
            elif isinstance(p, LayerSymbol):
                name = _sanitize(p.stem)
            else:
                raise DomainError(
                    f"cannot name parameter {p}; pass params as a mapping {{'name': expr}}"
                )
            items.append((name, p))
    names = [n for n, _ in items]
    for n in names:
        if not n.isidentifier() or keyword.iskeyword(n):
            raise DomainError(f"parameter name {n!r} is not a Python identifier; pass a mapping")
    if len(set(names)) != len(names):
        raise DomainError(f"parameter names {names} collide; pass params as a mapping {{'name': expr}}")
    return items


@dataclass(frozen=True)
class _Input:
    argname: str
    matcher: Any  # KernelMatrix or SampleTensor subclass

    def matches_kernel(self, km: KernelMatrix) -> bool:
        if isinstance(self.matcher, KernelMatrix):
            return self.matcher == km
        return km.tensor is self.matcher

    def matches_component(self, t: SampleTensor) -> bool:
        if isinstance(self.matcher, KernelMatrix):
            return type(t) is self.matcher.tensor and t.layer == self.matcher.layer
        return type(t) is self.matcher

    @property
    def rank(self) -> int:
        return 2 if isinstance(self.matcher, KernelMatrix) else self.matcher.rank

    def describe(self) -> str:
        return f"{self.argname} ({self.matcher})"


def _normalize_inputs(inputs) -> list[_Input]:
    out = []
    for matcher, argname in inputs.items():
        if not (isinstance(matcher, KernelMatrix)
                or (isinstance(matcher, type) and issubclass(matcher, SampleTensor))):
            raise DomainError(
                f"input key {matcher!r} must be a KernelMatrix or a SampleTensor subclass"
            )
        if not str(argname).isidentifier():
            raise DomainError(f"input name {argname!r} is not a Python identifier")
        out.append(_Input(str(argname), matcher))
    if len({i.argname for i in out}) != len(out):
        raise DomainError(f"input names collide: {[i.argname for i in out]}")
    return out


def _flatten_outputs(expr) -> tuple[list[sp.Expr], tuple[int, ...] | None]:
    """A scalar expression or a matrix (sympy Matrix / nested list) as a flat list + shape."""
    if isinstance(expr, (sp.MatrixBase, list, tuple)) or (
        isinstance(expr, np.ndarray) and expr.dtype == object
    ):
        m = sp.Matrix(expr)
        return [sp.sympify(e) for e in m], m.shape
    return [sp.sympify(expr)], None


# --------------------------------------------------------------------------------------------
# the compiled object
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _AtomPlan:
    atom: GaussianExpectation
    input: int
    positions: tuple[int, ...]
    factors: tuple


@dataclass(frozen=True)
class _ComponentPlan:
    component: SampleTensor
    input: int
    positions: tuple[int, ...]


@public
class CompiledStep:
    r"""Compiled outputs as functions of named sample-tensor arrays and parameters.

    Call as ``step(**arrays, **params)``; returns ``{name: array}``.  An input of rank 2 has
    shape ``(..., N, N)``, of rank 4 ``(..., N, N, N, N)``; leading batch dimensions of all
    inputs and parameters broadcast.  A scalar output has the batch shape, a matrix output
    ``batch + (r, c)``.

    Attributes
    ----------
    source : str
        The generated (lambdified, CSE'd) source code.
    atoms : tuple of GaussianExpectation
        The distinct atoms evaluated numerically, in argument order.
    components : tuple of SampleTensor
        Kernel/tensor components read from the inputs.
    param_names : tuple of str
        Keyword names of the parameters.
    """

    def __init__(self, names, shapes, exprs, inputs, activation, samples, params, method, rtol, cse):
        self.output_names = tuple(names)
        self._shapes = tuple(shapes)
        self.inputs = tuple(inputs)
        self.activation = activation
        self.samples = samples
        self.method = method
        self.rtol = rtol
        self._build(exprs, params, cse)

    # -- construction ------------------------------------------------------------------------
    def _build(self, exprs, params, cse):
        samples = self.samples
        if samples is not None:
            exprs = [expand_sample_sums(e, samples) for e in exprs]
        for e in exprs:
            if e.has(SampleSum):
                raise NotDerivedError(
                    "the expression contains sums over dummy sample indices; pass samples=[...] "
                    "so they can be expanded over the dataset"
                )
        exprs = [expand_expectations(e) for e in exprs]

        # 1. atoms
        atoms = []
        for a in atoms_of(sp.Tuple(*exprs)):
            if not a.is_monomial:
                raise NotDerivedError(f"atom {a} has a non-polynomial integrand in z; cannot compile")
            k = next((i for i, inp in enumerate(self.inputs) if inp.matches_kernel(a.kernel)), None)
            if k is None:
                raise DomainError(
                    f"atom {a} is taken over {a.kernel}, which is not among the inputs "
                    f"{[i.describe() for i in self.inputs]}"
                )
            if self.inputs[k].rank != 2:
                raise DomainError(f"atom {a}: the covariance input {self.inputs[k].argname} must be rank 2")
            slots, factors = a.to_numeric()
            atoms.append(_AtomPlan(a, k, tuple(sample_position(s, samples) for s in slots), factors))
        if atoms and self.activation is None:
            raise DomainError("the expression contains Gaussian-expectation atoms; pass activation=...")
        atom_syms = [sp.Symbol(f"E{j}", real=True) for j in range(len(atoms))]
        exprs = [e.xreplace({p.atom: s for p, s in zip(atoms, atom_syms)}) for e in exprs]

        # 2. tensor components
        comps = sorted(set().union(*(e.atoms(SampleTensor) for e in exprs)), key=_key)
        comp_plans, comp_syms = [], []
        for c in comps:
            k = next((i for i, inp in enumerate(self.inputs) if inp.matches_component(c)), None)
            if k is None:
                raise DomainError(
                    f"component {c} has no input array; inputs are "
                    f"{[i.describe() for i in self.inputs]}"
                )
            pos = tuple(sample_position(x, samples) for x in c.indices)
            comp_plans.append(_ComponentPlan(c, k, pos))
            comp_syms.append(sp.Symbol(f"{self.inputs[k].argname}_{'_'.join(map(str, pos))}", real=True))
        exprs = [e.xreplace(dict(zip(comps, comp_syms))) for e in exprs]

        # 3. parameters
        param_items = _normalize_params(params)
        reserved = {i.argname for i in self.inputs}
        for n, _ in param_items:
            if n in reserved:
                raise DomainError(f"parameter name {n!r} collides with an input name")
        param_syms = [sp.Symbol(f"param_{n}", real=True) for n, _ in param_items]
        exprs = [e.xreplace({p: s for (_, p), s in zip(param_items, param_syms)}) for e in exprs]

        known = set(atom_syms) | set(comp_syms) | set(param_syms)
        leftovers = set()
        for e in exprs:
            leftovers |= {a for a in e.atoms(LayerSymbol)}
            leftovers |= {s for s in e.free_symbols if s not in known}
        if leftovers:
            names = sorted(map(str, leftovers))
            raise DomainError(
                f"free symbols without values: {names}; pass them as params=... "
                "(a sequence of symbols or a mapping {'name': expr})"
            )

        args = comp_syms + atom_syms + param_syms
        self._fn = sp.lambdify(args, exprs, modules="numpy", cse=cse, dummify=False)
        try:
            self.source = inspect.getsource(self._fn)
        except (OSError, TypeError):  # pragma: no cover
            self.source = ""
        self._atom_plans = tuple(atoms)
        self._comp_plans = tuple(comp_plans)
        self._param_items = tuple(param_items)
        self.atoms = tuple(p.atom for p in atoms)
        self.components = tuple(p.component for p in comp_plans)
        self.param_names = tuple(n for n, _ in param_items)
        self._max_pos = [
            max([max(p.positions) for p in atoms + comp_plans if p.input == k and p.positions] or [-1])
            for k in range(len(self.inputs))
        ]

    # -- evaluation --------------------------------------------------------------------------
    def _check_inputs(self, arrays: dict) -> tuple:
        batch = ()
        for k, inp in enumerate(self.inputs):
            if inp.argname not in arrays:
                raise DomainError(f"missing input array {inp.argname!r}")
            a = _real_array(arrays[inp.argname], f"input {inp.argname!r}")
            r = inp.rank
            if a.ndim < r or len(set(a.shape[-r:])) != 1:
                raise DomainError(
                    f"input {inp.argname!r} must have shape (..., N{', N' * (r - 1)}), got {a.shape}"
                )
            n = a.shape[-1]
            if self.samples is not None and n != len(self.samples):
                raise DomainError(
                    f"input {inp.argname!r} has N = {n} samples but samples has {len(self.samples)}"
                )
            if n <= self._max_pos[k]:
                raise DomainError(
                    f"input {inp.argname!r} has N = {n} samples; the expression needs sample "
                    f"position {self._max_pos[k]}"
                )
            arrays[inp.argname] = a
            batch = np.broadcast_shapes(batch, a.shape[:-r])
        return batch

    def _arguments(self, arrays: dict, params: dict) -> tuple[list, tuple]:
        """The lambdified function's arguments (components, atom values, params) and the batch shape."""
        missing = [n for n in self.param_names if n not in params]
        extra = [n for n in params if n not in self.param_names]
        if missing or extra:
            raise DomainError(
                f"parameters: missing {missing}, unexpected {extra}; expected {list(self.param_names)}"
            )
        batch = self._check_inputs(arrays)
        arrs = [arrays[i.argname] for i in self.inputs]
        comp_vals = [arrs[p.input][(Ellipsis, *p.positions)] for p in self._comp_plans]
        atom_vals = []
        if self._atom_plans:
            from effth.numerics import gaussian_expectation

            act = _resolve_activation(self.activation)
            for p in self._atom_plans:
                idx = list(p.positions)
                sub = arrs[p.input][..., idx, :][..., :, idx]
                atom_vals.append(
                    gaussian_expectation(p.factors, sub, act, method=self.method, rtol=self.rtol)
                )
        param_vals = [_real_array(params[n], f"parameter {n!r}") for n in self.param_names]
        for v in param_vals:
            batch = np.broadcast_shapes(batch, v.shape)
        return [*comp_vals, *atom_vals, *param_vals], batch

    def _evaluate(self, arrays: dict, params: dict) -> list:
        args, batch = self._arguments(arrays, params)
        raw = self._fn(*args)
        return [np.array(np.broadcast_to(np.asarray(r, dtype=np.float64), batch)) for r in raw]

    def _assemble(self, flat: list) -> list:
        out, i = [], 0
        for shape in self._shapes:
            if shape is None:
                out.append(flat[i])
                i += 1
            else:
                n = shape[0] * shape[1]
                block = np.stack(flat[i : i + n], axis=-1)
                out.append(block.reshape(block.shape[:-1] + shape))
                i += n
        return out

    def __call__(self, **kwargs) -> dict:
        arrays = {i.argname: kwargs.pop(i.argname) for i in self.inputs if i.argname in kwargs}
        flat = self._evaluate(arrays, kwargs)
        return dict(zip(self.output_names, self._assemble(flat)))

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(outputs={list(self.output_names)}, "
            f"inputs={[i.argname for i in self.inputs]}, atoms={len(self.atoms)}, "
            f"params={list(self.param_names)})"
        )


@public
class CompiledExpression(CompiledStep):
    r"""One or several expressions compiled as functions of one kernel ``K`` of shape ``(..., N, N)``.

    ``f(K, **params)`` returns an array of the batch shape ``(...)`` (``batch + (r, c)`` for a
    matrix expression), or a tuple of them when several expressions were compiled.
    """

    def __call__(self, K, **params):  # noqa: N803
        flat = self._evaluate({self.inputs[0].argname: K}, params)
        out = self._assemble(flat)
        return tuple(out) if self._multi else out[0]


def _cache_lookup(key, build):
    with _LOCK:
        hit = _CACHE.get(key)
        if hit is not None:
            _STATS["hits"] += 1
            return hit
        _STATS["misses"] += 1
    obj = build()
    with _LOCK:
        _CACHE.setdefault(key, obj)
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.pop(next(iter(_CACHE)))
        return _CACHE[key]


def _common_key(exprs, inputs, act, samples, params, method, rtol, cse):
    from effth.numerics.dispatch import _METHODS
    if method not in _METHODS:          # refused when compiling, not at the first evaluation
        raise DomainError(f"method={method!r} must be one of {_METHODS} (the methods of "
                          "effth.gaussian_expectation)")
    pkey = (
        tuple((str(k), sp.srepr(sp.sympify(v))) for k, v in params.items())
        if isinstance(params, Mapping)
        else tuple(sp.srepr(sp.sympify(p)) for p in params)
    )
    return (
        tuple(sp.srepr(e) for e in exprs),
        tuple((sp.srepr(i.matcher) if isinstance(i.matcher, sp.Basic) else i.matcher.__name__, i.argname)
              for i in inputs),
        _activation_key(act),
        None if samples is None else tuple(sp.srepr(s) for s in samples),
        pkey,
        method,
        float(rtol),
        bool(cse),
    )


@public
def compile_expression(
    exprs,
    *,
    kernel: KernelMatrix,
    activation: Any,
    samples: Sequence | None = None,
    params: Sequence | Mapping = (),
    method: str = "auto",
    rtol: float = 1e-10,
    cse: bool = True,
) -> CompiledExpression:
    r"""Compile expressions in :math:`K`, Gaussian atoms over :math:`K` and parameters.

    Parameters
    ----------
    exprs : sympy expression, Matrix, or sequence of them
        What to evaluate.  Atoms are expanded by linearity first; each distinct monomial atom is
        one numeric evaluation.
    kernel : KernelMatrix
        The kernel the inputs ``K`` stand for, e.g. ``KernelMatrix(Kernel, ell)``.  Its
        components ``Kernel(a, b, ell)`` read ``K[..., a, b]``.
    activation : str or Activation or None
        The activation of every σ factor (``None`` only if there are no atoms).
    samples : sequence, optional
        Sample labels in array order (needed for symbolic labels such as ``alpha_1`` and for
        :class:`~effth.algebra.tensors.SampleSum`); default: labels are 0-based integers.
    params : sequence of symbols, or mapping ``{keyword: expression}``
        Free parameters, passed as keywords when calling; ``LayerSymbol``\ s are named by their
        stem (``C_{W}`` → ``C_W``).
    method, rtol
        Passed to ``effth.numerics.gaussian_expectation``.
    cse : bool, default True
        Common-subexpression elimination in ``lambdify``.

    Returns
    -------
    CompiledExpression
        ``f(K, **params)`` with ``K`` of shape ``(..., N, N)``.

    Raises
    ------
    DomainError
        Free symbols without values, non-integer labels without ``samples``, atoms over other
        kernels; at call time, shape mismatches and missing parameters.
    NotDerivedError
        Non-polynomial integrands in z, unexpanded sample sums.
    """
    if isinstance(exprs, (list, tuple)) and not (exprs and isinstance(exprs[0], (list, tuple))):
        items, multi = list(exprs), True
    else:
        items, multi = [exprs], False
    if not isinstance(kernel, KernelMatrix):
        raise DomainError(f"kernel must be a KernelMatrix, got {kernel!r}")
    flat, shapes = [], []
    for it in items:
        f, shape = _flatten_outputs(it)
        flat.extend(f)
        shapes.append(shape)
    inputs = [_Input("K", kernel)]
    act = _resolve_activation(activation)
    samples = None if samples is None else [sp.sympify(s) for s in samples]
    key = ("expr",) + _common_key(flat, inputs, act, samples, params, method, rtol, cse) + (
        tuple(shapes), multi)

    def build():
        obj = CompiledExpression(
            [f"out{k}" for k in range(len(items))], shapes, flat, inputs, act, samples,
            params, method, rtol, cse,
        )
        obj._multi = multi
        return obj

    return _cache_lookup(key, build)


@public
def compile_step(
    outputs: Mapping[str, Any],
    inputs: Mapping[Any, str],
    *,
    activation: Any = None,
    samples: Sequence | None = None,
    params: Sequence | Mapping = (),
    method: str = "auto",
    rtol: float = 1e-10,
    cse: bool = True,
) -> CompiledStep:
    r"""Compile one layer step with several named inputs, to be iterated by the caller.

    Parameters
    ----------
    outputs : mapping ``{name: expression or Matrix}``
        E.g. ``{'K': Matrix of K^{(ℓ+1)} components}``.
    inputs : mapping ``{KernelMatrix or SampleTensor subclass: argname}``
        A ``KernelMatrix`` matches the components of its tensor class at its layer (and is the
        covariance of atoms over it); a class matches its components at any layer (e.g.
        ``FourPointVertex: 'V'`` with arrays of shape ``(..., N, N, N, N)``).
    activation, samples, params, method, rtol, cse
        As in :func:`compile_expression`.

    Returns
    -------
    CompiledStep
        ``step(**arrays, **params) -> {name: array}``.

    Examples
    --------
    >>> import numpy as np, sympy as sp
    >>> from effth.algebra.indices import ell
    >>> from effth.algebra.tensors import Kernel, KernelMatrix
    >>> c = sp.Symbol('c')
    >>> step = compile_step({'K': sp.Matrix(2, 2, lambda i, j: c * Kernel(i, j, ell))},
    ...                     {KernelMatrix(Kernel, ell): 'K'}, params=[c])
    >>> step(K=np.eye(2), c=2.0)['K']
    array([[2., 0.],
           [0., 2.]])
    """
    names, flat, shapes = [], [], []
    for name, e in outputs.items():
        f, shape = _flatten_outputs(e)
        names.append(str(name))
        flat.extend(f)
        shapes.append(shape)
    ins = _normalize_inputs(inputs)
    act = _resolve_activation(activation)
    samples = None if samples is None else [sp.sympify(s) for s in samples]
    key = ("step", tuple(names)) + _common_key(flat, ins, act, samples, params, method, rtol, cse) + (
        tuple(shapes),)
    return _cache_lookup(
        key,
        lambda: CompiledStep(names, shapes, flat, ins, act, samples, params, method, rtol, cse),
    )
