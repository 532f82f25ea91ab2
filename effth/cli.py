r"""Command line: ``effth derive``, ``effth expect``, ``effth wick``, ``effth activations``.

Examples
--------
Derive the connected four-point function of the neural-index quartic action (PDLT (4.48)) and
print it as LaTeX::

    effth derive connected-four-point --convention ch4

Evaluate :math:`\langle\sigma(z_1)\sigma(z_2)\rangle_K` for tanh by quadrature::

    effth expect "sigma(1)*sigma(2)" --activation tanh --kernel "1,0.5;0.5,1"

List the Wick classes of :math:`\langle z_a z_a z_b z_b\rangle`-type contractions::

    effth wick 8

Print the :math:`\gamma_0^2` NTK correction of a deep linear network with three hidden layers
(DMFT of seed 000, spec §4.3)::

    effth gamma0 --order 2 --depth 3 --linear --quantity ntk
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Sequence

import numpy as np
import sympy as sp

__all__ = ["main", "build_parser"]

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
        print(sp.sstr(expr), file=out)


def _derive(args: argparse.Namespace, out) -> int:
    from .algebra.action import QuarticAction, connected_correlator, partition_function, perturbative_moment
    from .algebra.cumulants import cumulants_to_moments, moments_to_cumulants
    from .algebra.wick import c2m

    t0 = time.perf_counter()
    target = args.target
    if target in ("K", "V", "G1") or target in _NTK_TARGETS:
        if args.single_input and args.second_layer:
            print("effth: error: give --single-input or --second-layer, not both", file=sys.stderr)
            return 2
        if target in _NTK_TARGETS:
            from .theories.pdlt import derive_ntk

            special = "single-input" if args.single_input else ("second-layer" if args.second_layer else None)
            rec = derive_ntk(target, special=special)
        elif args.single_input or args.second_layer:
            from .theories.pdlt.reductions import second_layer, single_input

            rec = (single_input if args.single_input else second_layer)(target)
        else:
            from .theories.pdlt import derive_initialization

            rec = derive_initialization(target, form=args.form)
        elapsed = time.perf_counter() - t0
        print(rec.latex() if args.format == "latex" else sp.sstr(rec.expr), file=out)
        print(f"% {rec.provenance}", file=out)
        if args.timing:
            print(f"% derived in {elapsed:.3f} s", file=out)
        return 0
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
        print(f"% derived in {elapsed:.3f} s", file=out)
    return 0


def _parse_kernel(text: str) -> np.ndarray:
    rows = [r for r in text.replace(" ", "").split(";") if r]
    try:
        K = np.array([[float(x) for x in r.split(",")] for r in rows], dtype=float)
    except ValueError as exc:
        raise SystemExit(f"effth: cannot parse --kernel {text!r}: {exc}") from None
    return K


def _expect(args: argparse.Namespace, out) -> int:
    from .algebra.expectation import GaussianExpectation, sigma, z
    from .algebra.tensors import Kernel, KernelMatrix
    from .codegen import compile_expression
    from .errors import EffthError
    from .printing import latex

    K = _parse_kernel(args.kernel)
    namespace = {
        "sigma": lambda a, order=0: sigma(sp.Integer(a) - 1, order),
        "z": lambda a: z(sp.Integer(a) - 1),
    }
    try:
        integrand = sp.sympify(args.integrand, locals=namespace)
    except (sp.SympifyError, TypeError, SyntaxError) as exc:
        print(f"effth: cannot parse integrand {args.integrand!r}: {exc}", file=sys.stderr)
        return 2
    atom = GaussianExpectation(integrand, KernelMatrix(Kernel))
    try:
        fn = compile_expression(atom, kernel=KernelMatrix(Kernel), activation=args.activation, method=args.method, rtol=args.rtol)
        value = fn(K)
    except EffthError as exc:
        print(f"effth: {exc}", file=sys.stderr)
        return 2
    if args.format == "latex":
        print(f"{latex(atom)} = {float(value):.{args.digits}g}", file=out)
    else:
        print(f"{float(value):.{args.digits}g}", file=out)
    return 0


def _wick(args: argparse.Namespace, out) -> int:
    from .algebra.wick import cycle_histogram, count_pairings

    n = args.slots
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


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``effth`` command."""
    p = argparse.ArgumentParser(prog="effth", description="Effective theory of wide neural networks.")
    sub = p.add_subparsers(dest="command", required=True)

    d = sub.add_parser("derive", help="derive a result symbolically and print it",
                       description="\n".join(f"{k}: {v}" for k, v in DERIVE_TARGETS.items()),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    d.add_argument("target", choices=sorted(DERIVE_TARGETS))
    d.add_argument("--convention", choices=("ch1", "ch4"), default="ch4",
                   help="quartic-action convention: PDLT (1.71) or (4.44) [ch4]")
    d.add_argument("--order", type=int, default=None,
                   help="coupling order (actions; default 1), number of variables (cumulant/moment; "
                   "default 4) or m (c2m; default 2)")
    d.add_argument("--parity-even", action="store_true", help="drop odd moments/cumulants")
    d.add_argument("--form", choices=("edgeworth", "book"), default="edgeworth",
                   help="K/V/G1: derivative atoms (no inverse kernel) or the book's K^-1 form")
    d.add_argument("--single-input", action="store_true",
                   help="K/V/G1: single-input form in chi_parallel and j/K^2 (PDLT ch. 5)")
    d.add_argument("--second-layer", action="store_true",
                   help="K/V/G1: the exact layer-2 form (V(1) = G1(1) = 0)")
    d.add_argument("--format", choices=("latex", "text"), default="latex")
    d.add_argument("--timing", action="store_true", help="print the derivation time")

    e = sub.add_parser("expect", help="evaluate a Gaussian expectation <F>_K numerically")
    e.add_argument("integrand", help="e.g. \"sigma(1)*sigma(2)\", \"sigma(1,1)*z(2)**2\" (samples are 1-based)")
    e.add_argument("--activation", required=True)
    e.add_argument("--kernel", required=True, help="rows separated by ';', e.g. \"1,0.5;0.5,1\"")
    e.add_argument("--method", default="auto", choices=("auto", "closed", "quadrature", "mpmath", "mc"))
    e.add_argument("--rtol", type=float, default=1e-10)
    e.add_argument("--digits", type=int, default=15)
    e.add_argument("--format", choices=("latex", "text"), default="latex")

    w = sub.add_parser("wick", help="count pairings and neuron-index cycles of 2m slots")
    w.add_argument("slots", type=int)

    sub.add_parser("activations", help="list the registered activations")

    g = sub.add_parser("gamma0", help="print a coefficient of the DMFT gamma0-series as LaTeX",
                       description="Coefficient of gamma0^ORDER of a DMFT order parameter "
                       "(seed 000 §5.2; spec seed-000-dmft.md §4). Order 2 prints the closed form "
                       "(deep linear: §4.3, two-layer: §4.4 Gaussian atoms, deep nonlinear: the §4.5 "
                       "recursion with Price propagation).")
    g.add_argument("--order", type=int, default=2, help="power of gamma0 (even; odd ones vanish)")
    g.add_argument("--depth", type=int, default=None,
                   help="number of hidden layers L (default: symbolic L, linear only)")
    g.add_argument("--layer", type=int, default=None, help="layer ell for phi/g (default symbolic)")
    kind = g.add_mutually_exclusive_group()
    kind.add_argument("--linear", action="store_true", help="deep linear network (default)")
    kind.add_argument("--activation", default=None, help="nonlinear activation (any order at depth 1, order 2 deeper)")
    g.add_argument("--quantity", default="ntk",
                   choices=("ntk", "phi", "g", "f", "delta", "loss", "A", "B"))
    g.add_argument("--gradient-independent", action="store_true",
                   help="expand the gradient-independence ansatz A = B = 0 (the seed's eq. (12))")
    return p


def _gamma0(args, out) -> int:
    from .errors import EffthError
    from .theories.dmft.gamma_series import latex_coefficient

    activation = args.activation or "linear"
    depth = args.depth
    try:
        if args.order < 0:
            raise EffthError(f"--order must be a non-negative integer, got {args.order}")
        if depth is not None and depth < 1:
            raise EffthError(f"--depth must be a positive integer, got {depth}")
        if args.layer is not None and (args.layer < 1 or (depth is not None and args.layer > depth)):
            raise EffthError(f"--layer must lie in 1..depth, got {args.layer}")
        text = latex_coefficient(args.order, args.quantity, depth=depth, activation=activation,
                                 layer=args.layer, gradient_independent=args.gradient_independent)
    except EffthError as exc:
        print(f"effth: {exc}", file=sys.stderr)
        return 2
    print(text, file=out)
    return 0


def main(argv: Sequence[str] | None = None, out=None) -> int:
    """Entry point of the ``effth`` command; returns the exit status."""
    out = out or sys.stdout
    args = build_parser().parse_args(argv)
    if args.command == "derive":
        if args.order is None:
            args.order = {"cumulant": 4, "moment": 4, "c2m": 2}.get(args.target, 1)
        if args.order < 0 or (args.target in ("cumulant", "moment", "c2m") and args.order < 1):
            print(f"effth: --order must be positive, got {args.order}", file=sys.stderr)
            return 2
        return _derive(args, out)
    if args.command == "expect":
        return _expect(args, out)
    if args.command == "wick":
        return _wick(args, out)
    if args.command == "gamma0":
        return _gamma0(args, out)
    return _activations(args, out)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
