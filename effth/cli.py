r"""Command line: ``effth report``, ``derive``, ``expect``, ``wick``, ``activations``, ``gamma0``.

Examples
--------
Derive the layer recursions, evaluate them, simulate finite-width networks and compare, in one
go (a readable report on stdout and ``effth-report/``; about half a minute)::

    effth report

Derive the connected four-point function of the neural-index quartic action (PDLT (4.48)) and
print it as LaTeX::

    effth derive connected-four-point --convention ch4

Evaluate :math:`\langle\sigma(z_1)\sigma(z_2)\rangle_K` for tanh by quadrature::

    effth expect "sigma(1)*sigma(2)" --activation tanh --kernel "1,0.5;0.5,1"

List the Wick classes of :math:`\langle z_a z_a z_b z_b\rangle`-type contractions::

    effth wick 8

Print the :math:`\gamma_0^2` NTK correction of a deep linear network with three hidden layers
(four weight layers; Bordelon & Pehlevan (2022), §5.2, corrected)::

    effth gamma0 --order 2 --hidden-layers 3 --linear --quantity ntk

Every command exits with status 2 and a one-line message on bad input.  The integrand of
``effth expect`` and an activation written as an expression are parsed by a small grammar
(numbers, ``z``, ``sigma``, arithmetic), never evaluated as Python.
"""

from __future__ import annotations

from effth._signature import public

import argparse
import ast
import math
import sys
import time
from typing import Any, Sequence

import numpy as np
import sympy as sp

__all__ = ["main", "build_parser", "parse_integrand", "parse_activation"]


class UsageError(Exception):
    """Bad command-line input: printed as one line, exit status 2."""


#: Largest ``--order`` per derive target (larger ones take minutes to hours).
ORDER_LIMITS = {"connected-four-point": 2, "two-point": 3, "partition-function": 3,
                "cumulant": 8, "moment": 8, "c2m": 20}
#: Largest number of slots for ``effth wick`` (16 slots take half a minute).
MAX_WICK_SLOTS = 14
#: Limits of the integrand grammar.
MAX_EXPRESSION_CHARS = 500
MAX_DERIVATIVE_ORDER = 8
MAX_POWER = 16

DERIVE_TARGETS = {
    "K": "kernel recursion K^{(l+1)} from the forward equation (PDLT (4.118))",
    "V": "four-point vertex recursion V^{(l+1)} to O(1/n) (PDLT (4.119); Edgeworth form)",
    "G1": "NLO-metric recursion G^{{1}(l+1)} (PDLT (4.115); Edgeworth form)",
    "connected-four-point": "connected four-point function at first order in the quartic coupling "
    "(PDLT (1.78) for ch1, (4.48) for ch4)",
    "two-point": "two-point function with its first-order correction (PDLT (1.74) / (4.47))",
    "partition-function": "normalized partition function at first order (PDLT (1.73))",
    "cumulant": "connected correlator of ORDER variables in terms of moments (PDLT (1.56), (1.61))",
    "moment": "moment of ORDER variables in terms of cumulants (set partitions)",
    "c2m": "deep-linear layer factor c_{2m}(n) from neuron-index cycles (PDLT (3.46))",
}


_NTK_TARGETS = {
    "Theta": "frozen NTK (PDLT (8.63)/(9.5))",
    "H1": "1/n correction of the NTK mean (new)",
    "A": "NTK variance A (PDLT (8.97))", "B": "NTK variance B (PDLT (8.89))",
    "D": "NTK-preactivation D (PDLT (8.77))", "F": "NTK-preactivation F (PDLT (8.79))",
    "P": "dNTK-preactivation P (PDLT (11.49), corrected)", "Q": "dNTK-preactivation Q (PDLT (11.52))",
    "R": "ddNTK mean R (PDLT (inf.172))", "S": "ddNTK mean S (PDLT (inf.174))",
    "T": "ddNTK mean T (PDLT (inf.175))", "U": "ddNTK mean U (PDLT (inf.176))",
}
DERIVE_TARGETS.update(_NTK_TARGETS)


def _print(expr: sp.Expr, fmt: str, out) -> None:
    from .printing import latex

    if fmt == "latex":
        print(latex(expr), file=out)
    else:
        print(_plain(expr), file=out)


def _print_recursion(rec, args, out, elapsed: float) -> int:
    """Print a derived recursion: LaTeX (one line, or aligned; or a standalone document) or text."""
    form = args.form if hasattr(rec, "formula") else None
    if args.standalone:
        if not hasattr(rec, "document"):
            raise UsageError("--standalone needs a recursion with a printed form (not this target)")
        text = rec.document(form=form, title=None)
        if args.out:
            _write_new(args.out, text)
        else:
            print(text, file=out, end="")
        return 0
    if args.format == "text":
        print(rec.text(form) if hasattr(rec, "text") else _plain(rec.expr), file=out)
        print(f"# {rec.provenance}", file=out)
    else:
        kw = {"env": args.env} if args.env != "none" else {}
        print(rec.latex(form, **kw) if hasattr(rec, "formula") else rec.latex(), file=out)
        print(f"% {rec.provenance}", file=out)
    if args.timing:
        print(f"{'#' if args.format == 'text' else '%'} derived in {elapsed:.3f} s", file=out)
    return 0


def _derive_residual(args: argparse.Namespace, out, t0: float) -> int:
    """``effth derive TARGET --residual``: the recursions of the residual MLP (PDLT (B.4))."""
    from effth.pdlt import derive_initialization, derive_ntk
    from effth.pdlt.ntk.recursions import RESIDUAL_NTK_STATISTICS

    target = args.target
    if args.single_input or args.second_layer:
        raise UsageError("--residual derives the general recursions; it does not combine with "
                         "--single-input or --second-layer")
    if target in ("K", "V", "G1", "T"):
        rec = derive_initialization(target, residual=True,
                                    form="book" if args.form == "book" else "edgeworth")
    elif target in RESIDUAL_NTK_STATISTICS:
        rec = derive_ntk(target, residual=True)
    else:
        raise UsageError(f"--residual derives K, V, G1, T (the three-point vertex) and the NTK "
                         f"statistics {', '.join(s for s in RESIDUAL_NTK_STATISTICS if s in _NTK_TARGETS)}; "
                         f"not {target} (the dNTK and ddNTK of residual MLPs are not derived)")
    return _print_recursion(rec, args, out, time.perf_counter() - t0)


def _plain(expr) -> str:
    from .printing.text import text
    return text(expr)


def _write_new(path: str, text: str) -> None:
    from pathlib import Path

    p = Path(path)
    if p.exists():
        raise UsageError(f"{p} exists; give a new file name (effth never overwrites)")
    try:
        p.write_text(text)
    except OSError as exc:
        raise UsageError(f"cannot write {p}: {exc.strerror}") from None


def _derive(args: argparse.Namespace, out) -> int:
    from .algebra.action import QuarticAction, connected_correlator, partition_function, perturbative_moment
    from .algebra.cumulants import cumulants_to_moments, moments_to_cumulants
    from .algebra.wick import c2m

    t0 = time.perf_counter()
    target = args.target
    if args.residual:
        return _derive_residual(args, out, t0)
    if target in ("K", "V", "G1") or target in _NTK_TARGETS:
        if args.single_input and args.second_layer:
            raise UsageError("give --single-input or --second-layer, not both")
        if target in _NTK_TARGETS:
            from effth.pdlt import derive_ntk

            special = "single-input" if args.single_input else ("second-layer" if args.second_layer else None)
            rec = derive_ntk(target, special=special)
        elif args.single_input or args.second_layer:
            from effth.pdlt.initialization.reductions import second_layer, single_input

            rec = (single_input if args.single_input else second_layer)(target)
        else:
            from effth.pdlt import derive_initialization

            rec = derive_initialization(target, form="book" if args.form == "book" else "edgeworth")
        elapsed = time.perf_counter() - t0
        return _print_recursion(rec, args, out, elapsed)
    if target in ("connected-four-point", "two-point", "partition-function"):
        action = QuarticAction(args.convention)
        npts = 4 if target == "connected-four-point" else 2
        if args.convention == "ch4":
            externals = [(sp.Symbol(f"i_{k}", integer=True), sp.Symbol(f"alpha_{k}")) for k in range(1, npts + 1)]
        else:
            externals = [sp.Symbol(f"mu_{k}") for k in range(1, npts + 1)]
        if target == "connected-four-point":
            expr = connected_correlator(action, externals, order=args.order)
        elif target == "two-point":
            expr = perturbative_moment(action, externals, order=args.order)
        else:
            expr = partition_function(action, order=args.order)
    elif target in ("cumulant", "moment"):
        labels = list(range(1, args.order + 1))
        fn = moments_to_cumulants if target == "cumulant" else cumulants_to_moments
        expr = fn(labels, parity_even=args.parity_even)
    elif target == "c2m":
        expr = sp.expand(c2m(args.order, sp.Symbol("n", positive=True)))
    else:  # pragma: no cover - argparse restricts choices
        raise AssertionError(target)
    elapsed = time.perf_counter() - t0
    _print(expr, args.format, out)
    if args.timing:
        print(f"{'#' if args.format == 'text' else '%'} derived in {elapsed:.3f} s", file=out)
    return 0


# ------------------------------------------------------------------ restricted expression grammar
#: Functions an activation written as an expression in ``z`` may use.
_FUNCTIONS = {
    "exp": sp.exp, "log": sp.log, "sqrt": sp.sqrt, "tanh": sp.tanh, "sinh": sp.sinh,
    "cosh": sp.cosh, "sin": sp.sin, "cos": sp.cos, "atan": sp.atan, "erf": sp.erf,
    "abs": sp.Abs, "Abs": sp.Abs, "Heaviside": sp.Heaviside,
}
_CONSTANTS = {"pi": sp.pi, "E": sp.E}


class _Grammar:
    """Numbers, the names in ``names``, the calls in ``calls``, ``+ - * / **`` and unary signs.

    Built from Python's ``ast`` parse tree node by node; nothing is evaluated as Python.
    """

    def __init__(self, what: str, names: dict, calls: dict, hint: str) -> None:
        self.what, self.names, self.calls, self.hint = what, names, calls, hint

    def parse(self, text: str) -> sp.Expr:
        if not isinstance(text, str) or not text.strip():
            raise UsageError(f"empty {self.what}; {self.hint}")
        if len(text) > MAX_EXPRESSION_CHARS:
            raise UsageError(f"{self.what} longer than {MAX_EXPRESSION_CHARS} characters")
        try:
            tree = ast.parse(text.strip(), mode="eval")
        except SyntaxError as exc:
            raise UsageError(f"cannot parse {self.what} {text!r}: {exc.msg}"
                             + (f" at column {exc.offset}" if exc.offset else "")) from None
        except (ValueError, RecursionError, MemoryError):
            raise UsageError(f"cannot parse {self.what} {text!r}") from None
        try:
            expr = self.node(tree.body)
        except RecursionError:
            raise UsageError(f"{self.what} {text!r} is nested too deeply") from None
        if expr.has(sp.zoo, sp.oo, -sp.oo, sp.nan):
            raise UsageError(f"{self.what} {text!r} is not finite (division by zero?)")
        return expr

    def reject(self, node: ast.AST, why: str = "") -> UsageError:
        seg = ast.unparse(node) if hasattr(ast, "unparse") else type(node).__name__
        return UsageError(f"{self.what}: {why or 'not allowed'}: {seg!r}; {self.hint}")

    def node(self, node: ast.AST) -> sp.Expr:
        if isinstance(node, ast.Constant):
            v = node.value
            if type(v) is int:
                return sp.Integer(v)
            if type(v) is float:
                if not math.isfinite(v):
                    raise self.reject(node, "non-finite number")
                return sp.Rational(repr(v))
            raise self.reject(node, "only real numbers are allowed as constants")
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            inner = self.node(node.operand)
            return -inner if isinstance(node.op, ast.USub) else inner
        if isinstance(node, ast.BinOp):
            if isinstance(node.op, ast.Pow):
                return self.power(node)
            ops = {ast.Add: sp.Add, ast.Sub: lambda a, b: a - b, ast.Mult: sp.Mul,
                   ast.Div: lambda a, b: a / b}
            op = ops.get(type(node.op))
            if op is None:
                raise self.reject(node, "operator not allowed (use + - * / **)")
            return op(self.node(node.left), self.node(node.right))
        if isinstance(node, ast.Name):
            if node.id in self.names:
                return self.names[node.id]
            raise self.reject(node, "unknown name")
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in self.calls:
                raise self.reject(node, "unknown function")
            return self.calls[node.func.id](self, node)
        raise self.reject(node)

    def power(self, node: ast.BinOp) -> sp.Expr:
        exp = self.node(node.right)
        if not (exp.is_Integer and 0 <= exp <= MAX_POWER):
            raise self.reject(node, f"exponents must be integers 0..{MAX_POWER}")
        base = self.node(node.left)
        if base.is_Number and base != 0 and int(exp) * abs(math.log10(abs(float(base)))) > 300:
            raise self.reject(node, "number too large")
        return base ** exp

    def int_arg(self, node: ast.AST, call: ast.Call, what: str, lo: int, hi: int) -> int:
        value = None
        if isinstance(node, ast.Constant) and type(node.value) is int:
            value = node.value
        elif (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub)
              and isinstance(node.operand, ast.Constant) and type(node.operand.value) is int):
            value = -node.operand.value
        if value is None or not lo <= value <= hi:
            raise self.reject(call, f"{what} must be an integer {lo}..{hi}")
        return value


def _registered(name: str):
    """The registered activation ``name`` (alias allowed), or None."""
    from .activations import get_activation
    from .errors import EffthError

    try:
        return get_activation(name)
    except (EffthError, ValueError, TypeError):
        return None


@public
def parse_integrand(text: str, samples: int, activation=None) -> sp.Expr:
    r"""The integrand of ``effth expect`` as a SymPy expression, from a restricted grammar.

    Allowed: numbers; ``sigma(s)`` and ``sigma(s, k)`` (:math:`\sigma^{(k)}(z_s)`, sample
    ``s = 1..samples``, ``k = 0..8``); ``z(s)``; the activation by its own name applied to
    ``z(s)`` (``tanh(z(1))`` is ``sigma(1)`` when the activation is tanh); ``+ - * / **``
    (integer exponents 0..16) and unary signs.  Anything else raises :class:`UsageError`;
    nothing is evaluated as Python.

    Examples
    --------
    >>> parse_integrand("sigma(1, 1)*z(2)**2 - 0.5", samples=2)   # labels are 0-based inside
    sigma'(0)*z(1)**2 - 1/2
    """
    from .algebra.expectation import sigma, z

    hint = (f"write sigma(s), sigma(s, k), z(s) with samples s = 1..{samples} and derivative "
            f"orders k = 0..{MAX_DERIVATIVE_ORDER}, numbers and + - * / **")

    def sample_of(g: _Grammar, call: ast.Call, arg: ast.AST) -> int:
        return g.int_arg(arg, call, "the sample", 1, samples)

    def call_sigma(g: _Grammar, call: ast.Call) -> sp.Expr:
        if call.keywords or not 1 <= len(call.args) <= 2:
            raise g.reject(call, "sigma takes a sample and an optional derivative order")
        s = sample_of(g, call, call.args[0])
        k = (g.int_arg(call.args[1], call, "the derivative order", 0, MAX_DERIVATIVE_ORDER)
             if len(call.args) == 2 else 0)
        return sigma(sp.Integer(s - 1), k)

    def call_z(g: _Grammar, call: ast.Call) -> sp.Expr:
        if call.keywords or len(call.args) != 1:
            raise g.reject(call, "z takes one sample")
        return z(sp.Integer(sample_of(g, call, call.args[0]) - 1))

    def call_activation(g: _Grammar, call: ast.Call) -> sp.Expr:
        arg = call.args[0] if len(call.args) == 1 and not call.keywords else None
        if not (isinstance(arg, ast.Call) and isinstance(arg.func, ast.Name) and arg.func.id == "z"):
            raise g.reject(call, f"write {call.func.id}(z(s)) or sigma(s)")
        if _registered(call.func.id) != activation:
            raise g.reject(call, "the integrand may name only the --activation itself")
        if len(arg.args) != 1 or arg.keywords:
            raise g.reject(call, "z takes one sample")
        return sigma(sp.Integer(sample_of(g, arg, arg.args[0]) - 1), 0)

    calls = {"sigma": call_sigma, "z": call_z}
    if activation is not None:
        from .activations import available_activations

        for name in available_activations():
            if name.isidentifier() and name not in calls and _registered(name) == activation:
                calls[name] = call_activation
    return _Grammar("integrand", dict(_CONSTANTS), calls, hint).parse(text)


@public
def parse_activation(text: str):
    """An activation from the command line: a registered name or alias (``tanh``, ``ReLU``), a
    family with keyword parameters (``leaky_relu(slope=0.1)``, ``monomial(degree=3)``), or an
    expression in ``z`` (``z + 0.1*z**3``, ``tanh(2*z)``), parsed by a restricted grammar.

    Raises :class:`UsageError` with a one-line message otherwise.
    """
    from .activations import Z, available_activations, get_activation
    from .errors import EffthError

    names = ", ".join(available_activations())
    hint = (f"give a registered name ({names}), NAME(param=value) for a family, or an "
            f"expression in z with numbers, + - * / ** and {', '.join(sorted(_FUNCTIONS))}")
    text = (text or "").strip()
    if not text:
        raise UsageError(f"empty activation; {hint}")
    if text.lower() in available_activations():
        try:
            return get_activation(text)
        except (EffthError, ValueError) as exc:
            raise UsageError(f"activation {text!r}: {exc}; give its parameters, e.g. "
                             f"{text}(degree=3) or leaky_relu(slope=0.1)") from None
    if text.isidentifier() and text not in ("z",) and text not in _FUNCTIONS:
        raise UsageError(f"unknown activation {text!r}; {hint}")
    try:
        tree = ast.parse(text, mode="eval").body
    except (SyntaxError, ValueError):
        tree = None
    if (isinstance(tree, ast.Call) and isinstance(tree.func, ast.Name)
            and tree.func.id.lower() in available_activations() and tree.func.id not in _FUNCTIONS):
        if tree.args:
            raise UsageError(f"activation {text!r}: give the parameters by keyword, e.g. "
                             "monomial(degree=3), leaky_relu(slope=0.1)")
        params = {}
        for kw in tree.keywords:
            try:
                value = ast.literal_eval(kw.value)
            except (ValueError, SyntaxError, TypeError, RecursionError):
                value = None
            flat = value if isinstance(value, (list, tuple)) else [value]
            if kw.arg is None or not flat or not all(type(v) in (int, float) for v in flat):
                raise UsageError(f"activation {text!r}: parameters must be numbers or lists of "
                                 "numbers, given by keyword")
            params[kw.arg] = value
        try:
            return get_activation(tree.func.id, **params)
        except (EffthError, ValueError, TypeError) as exc:
            raise UsageError(f"activation {text!r}: {exc}") from None
    calls = {name: (lambda fn: lambda g, call: _apply(g, call, fn))(fn) for name, fn in _FUNCTIONS.items()}
    expr = _Grammar("activation", {"z": Z, **_CONSTANTS}, calls, hint).parse(text)
    if not expr.has(Z):
        raise UsageError(f"activation {text!r} does not depend on z; {hint}")
    try:
        return get_activation(expr)
    except (EffthError, ValueError, TypeError) as exc:
        raise UsageError(f"activation {text!r}: {exc}") from None


def _apply(g: _Grammar, call: ast.Call, fn) -> sp.Expr:
    if call.keywords or len(call.args) != 1:
        raise g.reject(call, f"{call.func.id} takes one argument")
    return fn(g.node(call.args[0]))


def _parse_kernel(text: str) -> np.ndarray:
    rows = [r for r in text.replace(" ", "").split(";") if r]
    try:
        K = np.array([[float(x) for x in r.split(",")] for r in rows], dtype=float)
    except ValueError as exc:
        raise UsageError(f"cannot parse --kernel {text!r} (rows separated by ';', entries by ','):"
                         f" {exc}") from None
    if K.ndim != 2 or K.shape[0] != K.shape[1] or K.size == 0:
        raise UsageError(f"--kernel must be a square matrix, got {text!r}")
    if K.shape[0] > 16:
        raise UsageError(f"--kernel has {K.shape[0]} rows; at most 16 samples")
    if not np.all(np.isfinite(K)):
        raise UsageError(f"--kernel entries must be finite, got {text!r}")
    return K


def _expect(args: argparse.Namespace, out) -> int:
    from .algebra.expectation import GaussianExpectation
    from .algebra.tensors import Kernel, KernelMatrix
    from .codegen import compile_expression
    from .errors import EffthError
    from .printing import latex

    if not 1 <= args.digits <= 17:
        raise UsageError(f"--digits must be 1..17, got {args.digits}")
    if not (math.isfinite(args.rtol) and 0 < args.rtol < 1):
        raise UsageError(f"--rtol must lie in (0, 1), got {args.rtol}")
    K = _parse_kernel(args.kernel)
    act = parse_activation(args.activation)
    integrand = parse_integrand(args.integrand, samples=K.shape[0], activation=act)
    if not integrand.free_symbols and not integrand.atoms(sp.Function) and integrand.is_Number:
        value, atom = float(integrand), integrand          # a constant: <c>_K = c
    elif _odd_under_flip(integrand, act):
        # z -> -z leaves the Gaussian measure invariant and flips the integrand: exactly 0
        value, atom = 0.0, GaussianExpectation(integrand, KernelMatrix(Kernel))
    else:
        atom = GaussianExpectation(integrand, KernelMatrix(Kernel))
        try:
            fn = compile_expression(atom, kernel=KernelMatrix(Kernel), activation=act,
                                    method=args.method, rtol=args.rtol)
            value = fn(K)
        except (EffthError, ValueError, TypeError, ArithmeticError) as exc:
            raise UsageError(str(exc).splitlines()[0] if str(exc) else type(exc).__name__) from None
    value = float(np.real_if_close(value))
    if args.format == "latex":
        print(f"{latex(_one_based(atom))} = {value:.{args.digits}g}", file=out)
    else:
        print(f"{value:.{args.digits}g}", file=out)
    return 0


def _odd_under_flip(integrand, act) -> bool:
    """Whether a product of activation factors and Gaussian variables changes sign under the
    global flip z -> -z (given the activation's parity): its expectation is then exactly 0."""
    from .algebra.expectation.variables import ActivationFactor, GaussianVariable

    parity = act.parity
    if not isinstance(integrand, (sp.Mul, sp.Pow, ActivationFactor, GaussianVariable)):
        return False
    sign = 1
    for f in sp.Mul.make_args(integrand):
        base, e = f.as_base_exp()
        if not (e.is_Integer and e > 0):
            return False
        if isinstance(base, GaussianVariable):
            s = -1
        elif isinstance(base, ActivationFactor):
            if parity is None:
                return False
            s = parity * (-1) ** int(base.order)
        elif base.is_Number:
            s = 1
        else:
            return False
        sign *= s ** int(e)
    return sign == -1


def _one_based(expr):
    """Sample labels printed as the user typed them (1-based, like ``sigma(1,1)`` and the
    book's :math:`\alpha_1`): the parser numbers samples from 0 for the kernel's rows."""
    from .algebra.expectation.variables import ActivationFactor, GaussianVariable

    rep = {}
    for x in sp.preorder_traversal(expr):
        if isinstance(x, GaussianVariable) and x.label.is_Integer:
            rep[x] = GaussianVariable(x.label + 1)
        elif isinstance(x, ActivationFactor) and x.args[0].is_Integer:
            rep[x] = ActivationFactor(x.args[0] + 1, x.order, x.name)
    return expr.xreplace(rep)


def _wick(args: argparse.Namespace, out) -> int:
    from .algebra.wick import cycle_histogram, count_pairings

    n = args.slots
    if not 0 <= n <= MAX_WICK_SLOTS:
        raise UsageError(f"wick: the number of slots must be 0..{MAX_WICK_SLOTS}, got {n} "
                         f"({MAX_WICK_SLOTS + 2} slots already take half a minute)")
    if n % 2:
        print(f"{n} slots: no perfect matching (odd)", file=out)
        return 0
    m = n // 2
    print(f"{n} slots: {count_pairings(n)} pairings", file=out)
    hist = cycle_histogram(m)
    print("neuron-index cycles against the trace matching (cycles: pairings):", file=out)
    for cycles in sorted(hist, reverse=True):
        print(f"  {cycles}: {hist[cycles]}", file=out)
    return 0


def _activations(args: argparse.Namespace, out) -> int:
    from .activations import available_activations, get_activation
    from .errors import DomainError
    from .numerics.closed_forms import has_closed_form

    print("closed forms: which of <ss>, <s's'>, <ssss> (2 and 4 samples) have one", file=out)

    for name in available_activations():
        try:
            act = get_activation(name)
        except DomainError:  # families such as monomial(degree) need parameters
            print(f"{name:16s} (needs parameters: effth.get_activation({name!r}, ...))", file=out)
            continue
        kinks = ",".join(f"{c:g}" for c in act.kinks) or "-"
        closed = ",".join(label for label, factors in _REPRESENTATIVE_ATOMS
                          if has_closed_form(act, factors)) or "-"
        print(f"{name:16s} family={act.family:17s} kinks={kinks:6s} closed forms={closed:24s} "
              f"sigma(z)={act.expr}", file=out)
    return 0


_REPRESENTATIVE_ATOMS = (
    ("<ss>", ((0, "sigma", 0), (1, "sigma", 0))),
    ("<s's'>", ((0, "sigma", 1), (1, "sigma", 1))),
    ("<ssss>", ((0, "sigma", 0), (1, "sigma", 0), (2, "sigma", 0), (3, "sigma", 0))),
)


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors: ``effth: error: ...`` and exit status 2."""

    def error(self, message: str):  # noqa: D401 - argparse API
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


_GAMMA0_DESCRIPTION = (
    "Coefficient of gamma0^ORDER of a DMFT order parameter in the small-gamma0 expansion of "
    "Bordelon & Pehlevan (2022), §5.2 and App. P (gamma = gamma0 sqrt(N), their §2). Odd orders "
    "vanish. Deep linear networks: the closed gamma0^2 form (this corrects their eq. (12)/(146), "
    "which for two or more hidden layers is the expansion of the gradient-independence "
    "approximation A = B = 0 of their §5; --gradient-independent prints that one), higher orders "
    "as the equations of every order through ORDER (their eqs. (68)-(71) expanded in gamma0^2, "
    "each coefficient in terms of the lower orders and the neighbouring layers). Two-layer "
    "nonlinear networks (--hidden-layers 1, i.e. --depth 2): Gaussian atoms at gamma0^2 for "
    "phi, g, ntk, and with the exact closure every coefficient through ORDER (kernels, NTK, "
    "predictions, error, loss) as Gaussian atoms of the lazy process times time functions of "
    "the errors, every symbol defined. Deep nonlinear networks at gamma0^2: one-input Gaussian "
    "moments <phi'^4>, <phi phi'^2 phi''>, ... and the several-input four-point atoms (their "
    "App. P.2-P.6, with the responses A, B kept); above gamma0^2 the one-input system of every "
    "order through ORDER (NTK closure), derived from the field expansion: each kernel and response "
    "coefficient in Gaussian moments of the activation times sums over times of the drivers C~, "
    "D~ and the lower-order kernels, every symbol defined (seconds at order 4, about a minute "
    "at order 6). "
    "The numbers, with the exact or the NTK closure of the predictions, come from "
    "effth.dmft.gamma0_series (Python).")


@public
def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``effth`` command."""
    p = _Parser(prog="effth", description="Effective theory of wide neural networks: derive, "
                "evaluate and check against simulated networks. Start with: effth report")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    r = sub.add_parser(
        "report", help="derive, evaluate and check against simulated networks (start here)",
        description="Derive the layer recursions of the kernel K, the four-point vertex V and the "
        "NLO metric G1 (PDLT (4.118), (4.119), (4.115)) with the Wick/cumulant engine, print them "
        "as LaTeX, evaluate them for a network, simulate finite-width networks of that "
        "architecture at three widths, and compare theory with measurement layer by layer, with "
        "standard errors, z-scores and width-scaling fits. Writes report.md, recursions.tex and "
        "(with matplotlib) PNG plots to --out.")
    r.add_argument("--activation", default="tanh",
                   help="registered name, NAME(param=value) or expression in z [tanh]")
    r.add_argument("--depth", type=int, default=None,
                   help="number of weight layers L, output layer included [5; --quick: 3]")
    r.add_argument("--widths", type=int, nargs="+", default=None,
                   help="hidden widths simulated: one n (ensembles at n, 4n, 16n) or two or more "
                   "increasing widths; the first is the main comparison [32; --quick: 16]")
    r.add_argument("--networks", type=int, default=None,
                   help="simulated networks per width [100000; --quick: 4000]")
    r.add_argument("--inputs", type=int, default=3, help="number of inputs N (2..6) [3]")
    r.add_argument("--c-w", type=float, default=None,
                   help="C_W [1.0 for tanh, the critical value (PDLT §5.3); 2.0 for ReLU; "
                   "else 1.0]")
    r.add_argument("--c-b", type=float, default=0.0, help="C_b [0]")
    r.add_argument("--seed", type=int, default=0, help="seed of the simulation [0]")
    r.add_argument("--quick", action="store_true",
                   help="tiny sizes (seconds; for tests): the checks are then weak")
    r.add_argument("--out", default="effth-report",
                   help="output directory for report.md, recursions.tex and the plots "
                   "[effth-report]")
    r.add_argument("--no-plots", action="store_true", help="do not write PNG plots")
    r.add_argument("--no-progress", action="store_true", help="no progress bar")

    d = sub.add_parser("derive", help="derive a result symbolically and print it",
                       description="\n".join(f"{k}: {v}" for k, v in DERIVE_TARGETS.items())
                       + "\n\n--order limits: " + ", ".join(f"{k} <= {v}" for k, v in ORDER_LIMITS.items()),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    d.add_argument("target", choices=sorted(DERIVE_TARGETS))
    d.add_argument("--convention", choices=("ch1", "ch4"), default="ch4",
                   help="quartic-action convention: PDLT (1.71) or (4.44) [ch4]")
    d.add_argument("--order", type=int, default=None,
                   help="coupling order (actions; default 1), number of variables (cumulant/moment; "
                   "default 4) or m (c2m; default 2)")
    d.add_argument("--parity-even", action="store_true", help="drop odd moments/cumulants")
    d.add_argument("--form", choices=("edgeworth", "book", "compact"), default="edgeworth",
                   help="recursions: derivative expectations (no inverse kernel), the book's "
                   "raised-index K^-1 form, or the first with the layer labels stated once")
    d.add_argument("--env", choices=("none", "align", "align*", "aligned"), default="none",
                   help="recursions: one line, or an environment broken at term boundaries")
    d.add_argument("--standalone", action="store_true",
                   help="recursions: a complete .tex document that compiles with pdflatex")
    d.add_argument("--out", default=None,
                   help="with --standalone: write the document to this new file")
    d.add_argument("--single-input", action="store_true",
                   help="one input: the recursion in g, chi_par, chi_perp, h, j (PDLT (5.49)-(5.52), (5.111), ch. 9)")
    d.add_argument("--second-layer", action="store_true",
                   help="K/V/G1: the exact layer-2 form (V(1) = G1(1) = 0)")
    d.add_argument("--residual", action="store_true",
                   help="the residual MLP z' = xi [b + W sigma(z)] + gamma z (PDLT (B.4)): K (B.11), "
                   "V (B.24) with the third-cumulant terms, G1, T = the three-point vertex (not "
                   "the ddNTK), Theta, H1, A, B, D, F. These close on single-layer cumulants; "
                   "from layer 3 on, for activations that are not odd, the exact one-input values "
                   "come from the history recursion (effth.pdlt.residual_history_flow)")
    d.add_argument("--format", choices=("latex", "text"), default="latex",
                   help="LaTeX, or plain Unicode text (no LaTeX)")
    d.add_argument("--timing", action="store_true", help="print the derivation time")

    e = sub.add_parser(
        "expect", help="evaluate a Gaussian expectation <F>_K numerically",
        description="Evaluate <F(z)>_K (PDLT (4.25)). F is written with sigma(s) and sigma(s, k) "
        "(the k-th derivative of the activation at z_s), z(s), numbers, + - * / ** (integer "
        "exponents 0..16); samples s are numbered from 1; tanh(z(1)) may stand for sigma(1) when "
        "--activation is tanh. The text is parsed by this grammar, never run as Python.")
    e.add_argument("integrand", help="e.g. \"sigma(1)*sigma(2)\", \"sigma(1,1)*z(2)**2\" (samples are 1-based)")
    e.add_argument("--activation", required=True,
                   help="registered name or alias (effth activations), NAME(param=value) for a "
                   "family (leaky_relu(slope=0.1), monomial(degree=3)), or an expression in z "
                   "(\"z + 0.1*z**3\")")
    e.add_argument("--kernel", required=True, help="rows separated by ';', e.g. \"1,0.5;0.5,1\"")
    e.add_argument("--method", default="auto", choices=("auto", "closed", "quadrature", "mpmath", "mc"))
    e.add_argument("--rtol", type=float, default=1e-10)
    e.add_argument("--digits", type=int, default=15, help="significant digits, 1..17 [15]")
    e.add_argument("--format", choices=("latex", "text"), default="latex")

    w = sub.add_parser("wick", help="count pairings and neuron-index cycles of 2m slots")
    w.add_argument("slots", type=int, help=f"number of slots, 0..{MAX_WICK_SLOTS}")

    sub.add_parser("activations", help="list the registered activations")

    g = sub.add_parser("gamma0", help="print a coefficient of the DMFT gamma0-series as LaTeX",
                       description=_GAMMA0_DESCRIPTION)
    g.add_argument("--order", type=int, default=2, help="power of gamma0 (even; odd ones vanish)")
    size = g.add_mutually_exclusive_group()
    size.add_argument("--depth", type=int, default=None,
                      help="number of weight layers, output layer included (= hidden layers + 1)")
    size.add_argument("--hidden-layers", type=int, default=None,
                      help="number of hidden layers, the L of Bordelon & Pehlevan (2022) (default: "
                      "symbolic L, deep linear only)")
    g.add_argument("--layer", type=int, default=None,
                   help="hidden layer ell = 1..hidden layers for phi/g (default symbolic)")
    kind = g.add_mutually_exclusive_group()
    kind.add_argument("--linear", action="store_true", help="deep linear network (default)")
    kind.add_argument("--activation", default=None,
                      help="smooth nonlinear activation (every even order, any depth)")
    g.add_argument("--quantity", default="ntk",
                   choices=("ntk", "phi", "g", "f", "delta", "loss", "A", "B"))
    g.add_argument("--gradient-independent", action="store_true",
                   help="expand the gradient-independence approximation A = B = 0 instead "
                   "(Bordelon & Pehlevan (2022), §5; their eq. (12) for deep linear networks)")
    g.add_argument("--closure", choices=("exact", "ntk"), default="exact",
                   help="predictions: the exact single-site closure or NTK-Euler (deep linear "
                   "orders >= 4) [exact]")
    g.add_argument("--format", choices=("latex", "text"), default="latex",
                   help="LaTeX or plain text (deep linear orders >= 4) [latex]")
    pr = sub.add_parser(
        "predict", help="infinite-width prediction of a trained network (Bayes or gradient descent)",
        description="The statistics of an MLP's test outputs after learning at infinite width: "
        "the Bayesian posterior with the NNGP kernel (PDLT (6.57), (6.64), evidence (6.34)) or the "
        "ensemble of networks trained by gradient descent to convergence (PDLT (10.40)-(10.41)). "
        "The kernels K^(L) and Theta^(L) are computed from the network. TRAIN is a CSV file "
        "(comma- or whitespace-separated) whose rows are training inputs with the target in the "
        "last column; TEST holds test inputs, one per row. Prints the mean and standard deviation "
        "of each test output.")
    pr.add_argument("train", help="CSV of training rows: x_1, ..., x_n0, y")
    pr.add_argument("test", help="CSV of test rows: x_1, ..., x_n0")
    pr.add_argument("--activation", required=True,
                    help="registered name, NAME(param=value) or expression in z")
    pr.add_argument("--depth", type=int, required=True,
                    help="number of weight layers L, output layer included")
    pr.add_argument("--c-w", type=float, default=1.0, help="C_W [1.0]")
    pr.add_argument("--c-b", type=float, default=0.0, help="C_b [0]")
    pr.add_argument("--method", choices=("gd", "bayes"), default="gd",
                    help="gradient descent to convergence (ensemble over initializations) or the "
                    "Bayesian posterior [gd]")
    pr.add_argument("--lambda-b", type=float, default=1.0, help="lambda_b (PDLT (8.6)) [1]")
    pr.add_argument("--lambda-w", type=float, default=1.0, help="lambda_W (PDLT (8.6)) [1]")
    pr.add_argument("--noise", type=float, default=0.0,
                    help="output noise variance sigma_epsilon^2 (Bayes only, PDLT (6.10)) [0]")
    pr.add_argument("--digits", type=int, default=8, help="significant digits, 1..17 [8]")
    return p


def _read_rows(path: str, what: str) -> np.ndarray:
    try:
        with open(path) as fh:
            text = fh.read()
    except OSError as exc:
        raise UsageError(f"cannot read {what} file {path!r}: {exc.strerror}") from None
    rows = []
    for i, line in enumerate(text.splitlines(), start=1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            rows.append([float(v) for v in line.replace(",", " ").split()])
        except ValueError:
            raise UsageError(f"{what} file {path!r}, line {i}: not a row of numbers: {line[:60]!r}") from None
    if not rows:
        raise UsageError(f"{what} file {path!r} has no rows")
    if len({len(r) for r in rows}) != 1:
        raise UsageError(f"{what} file {path!r}: rows have different numbers of columns")
    return np.array(rows)


def _predict(args, out) -> int:
    from effth.arch import MLP
    from effth.pdlt.learning.prediction import predict

    if not 1 <= args.digits <= 17:
        raise UsageError(f"--digits must be in 1..17, got {args.digits}")
    if args.depth < 1:
        raise UsageError(f"--depth must be a positive integer, got {args.depth}")
    train = _read_rows(args.train, "training")
    test = _read_rows(args.test, "test")
    if train.shape[1] < 2:
        raise UsageError("training rows need at least one input column and the target column")
    if test.shape[1] != train.shape[1] - 1:
        raise UsageError(f"test rows have {test.shape[1]} columns; the training inputs have "
                         f"{train.shape[1] - 1} (the last training column is the target)")
    net = MLP(parse_activation(args.activation), depth=args.depth, c_w=args.c_w, c_b=args.c_b)
    kw = dict(method=args.method, lambda_b=args.lambda_b, lambda_w=args.lambda_w)
    if args.noise:
        kw["noise"] = args.noise
    res = predict(net, train[:, :-1], train[:, -1], test, **kw)
    mean, std = res.value("mean"), res.value("std")
    d = args.digits
    what = "posterior (PDLT (6.57), (6.64))" if args.method == "bayes" else \
        "gradient descent to convergence (PDLT (10.40)-(10.41))"
    print(f"# {net!r}: {what}", file=out)
    if args.method == "bayes":
        print(f"# log evidence (6.34): {float(res.value('log_evidence')):.{d}g}", file=out)
    print("# test input, mean, std", file=out)
    for i, (m, sd) in enumerate(zip(mean, std)):
        print(f"{i}, {float(m):.{d}g}, {float(sd):.{d}g}", file=out)
    return 0


def _gamma0(args, out) -> int:
    from .errors import EffthError
    from effth.dmft.series.gamma0 import latex_coefficient

    if args.order < 0:
        raise UsageError(f"--order must be a non-negative integer, got {args.order}")
    if args.order > 64:
        raise UsageError(f"--order must be at most 64, got {args.order}")
    hidden = args.hidden_layers
    if args.depth is not None:
        if args.depth < 2:
            raise UsageError(f"--depth (weight layers) must be at least 2, got {args.depth}")
        hidden = args.depth - 1
    if hidden is not None and hidden < 1:
        raise UsageError(f"--hidden-layers must be a positive integer, got {hidden}")
    if args.layer is not None and (args.layer < 1 or (hidden is not None and args.layer > hidden)):
        top = hidden if hidden is not None else "L"
        raise UsageError(f"--layer must lie in 1..{top} (the hidden layers), got {args.layer}")
    activation = "linear"
    if args.activation is not None:
        act = parse_activation(args.activation)
        if not act.is_smooth:
            raise UsageError(f"the gamma0-series needs a smooth activation (second and higher "
                             f"derivatives); {args.activation!r} has a kink at "
                             f"{', '.join(f'{c:g}' for c in act.kinks)}")
        if act.family == "user":
            raise UsageError("gamma0: give a registered smooth activation by name "
                             "(the printed coefficients name it); expressions are accepted by "
                             "effth.dmft.gamma0_series in Python")
        from .activations import Z

        activation = "linear" if sp.expand(act.expr - Z) == 0 else act.name
    kw: dict[str, Any] = {}               # depth = weight layers, hidden_layers = depth - 1
    if args.depth is not None:
        kw["depth"] = args.depth
    elif args.hidden_layers is not None:
        kw["hidden_layers"] = args.hidden_layers
    try:
        text = latex_coefficient(args.order, args.quantity, activation=activation,
                                 layer=args.layer, gradient_independent=args.gradient_independent,
                                 closure=args.closure, format=args.format, **kw)
    except (EffthError, ValueError) as exc:
        raise UsageError(str(exc).splitlines()[0]) from None
    print(text, file=out)
    return 0


def _derive_checked(args, out) -> int:
    if args.order is None:
        args.order = {"cumulant": 4, "moment": 4, "c2m": 2}.get(args.target, 1)
    if args.order < 0 or (args.target in ("cumulant", "moment", "c2m") and args.order < 1):
        raise UsageError(f"--order must be positive, got {args.order}")
    limit = ORDER_LIMITS.get(args.target)
    if limit is not None and args.order > limit:
        raise UsageError(f"--order {args.order} is too large for {args.target}: at most {limit} "
                         "(the next order takes minutes or more)")
    return _derive(args, out)


def _report(args, out) -> int:
    from .report import run_report

    result = run_report(activation=parse_activation(args.activation), depth=args.depth,
                        widths=(None if args.widths is None else
                                args.widths[0] if len(args.widths) == 1 else args.widths),
                        networks=args.networks, inputs=args.inputs,
                        c_w=args.c_w, c_b=args.c_b, seed=args.seed, quick=args.quick,
                        out=args.out, plots=not args.no_plots,
                        progress=False if args.no_progress else None, stream=out)
    return 0 if result.passed else 1


_COMMANDS = {"report": _report, "derive": _derive_checked, "expect": _expect, "wick": _wick,
             "gamma0": _gamma0, "predict": _predict,
             "activations": lambda args, out: _activations(args, out)}


@public
def main(argv: Sequence[str] | None = None, out=None) -> int:
    """Entry point of the ``effth`` command; returns the exit status.

    0: success; 1: ``effth report`` found a disagreement between theory and measurement;
    2: bad input (a one-line message on stderr).
    """
    from .errors import EffthError

    out = out or sys.stdout
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:              # --help (0) or a usage error (2), already printed
        return exc.code if isinstance(exc.code, int) else 2
    import warnings
    try:
        with warnings.catch_warnings():
            # NumPy's overflow/invalid RuntimeWarnings would precede the one-line error (effth
            # checks the results for NaN and overflow itself and says what to change)
            warnings.simplefilter("ignore", RuntimeWarning)
            return _COMMANDS[args.command](args, out)
    except UsageError as exc:
        print(f"effth: error: {exc}", file=sys.stderr)
        return 2
    except EffthError as exc:              # bad values found below the command line
        print(f"effth: error: {str(exc).splitlines()[0]}", file=sys.stderr)
        return 2
    except OSError as exc:                 # an output file that cannot be written
        print(f"effth: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
