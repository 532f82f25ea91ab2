r"""The atom :class:`GaussianExpectation` and the calculus on it (linearity, Wick, Stein, Price).

See :mod:`effth.algebra.expectation` for the conventions.
"""

from __future__ import annotations

from effth._signature import public

from typing import Any

import sympy as sp

from effth.algebra.tensors import KernelMatrix
from effth.errors import DomainError, NotDerivedError

from ..wick.isserlis import isserlis_terms
from .variables import (
    ActivationFactor,
    GaussianVariable,
    _is_random,
    _key,
    _labels,
    _pairs,
    _random_power,
    _split_monomial,
)

__all__ = ["GaussianExpectation", "expect", "expand_expectations", "stein", "wick", "atoms_of"]


# --------------------------------------------------------------------------------------------
# the atom
# --------------------------------------------------------------------------------------------
class GaussianExpectation(sp.Expr):
    r"""The Gaussian expectation :math:`\langle F\rangle_{K}` of PDLT (1.68)/(4.25).

    Parameters
    ----------
    integrand : sympy expression
        :math:`F`, built from :func:`z`, :func:`sigma` and constants.
    kernel : KernelMatrix
        The covariance, e.g. ``KernelMatrix(Kernel, ell)`` for :math:`K^{(\ell)}`.

    Notes
    -----
    Construction is cheap: the integrand is sympified (SymPy's ``Mul`` already orders the
    factors canonically), its sample labels are collected in one traversal and the
    :math:`m(m+1)/2` components of the :math:`m` samples are listed; no expansion, Wick or
    Stein work.  A constant integrand returns itself (:math:`\langle c\rangle=c`).
    All state is in ``.args == (integrand, kernel, components)``: the atom depends only on the
    kernel restricted to :attr:`samples` (marginalization, PDLT §4.4), and ``components`` lists
    these kernel components :math:`K_{ab}`, :math:`a\le b` in :attr:`samples` (derived from the
    integrand; they are in ``.args`` so that ``sympy.diff`` with respect to a component reaches
    the atom, see :meth:`_eval_derivative`).  Differentiating an atom with respect to
    :math:`z` is meaningless (:math:`z` is integrated out) and is not supported.

    Examples
    --------
    >>> from effth.algebra.indices import ell, alpha
    >>> from effth.algebra.expectation import sigma, z
    >>> from effth.algebra.tensors import KernelMatrix, Kernel
    >>> from effth.printing import latex
    >>> a1, a2 = alpha(1), alpha(2)
    >>> e = GaussianExpectation(sigma(a2) * sigma(a1), KernelMatrix(Kernel, ell))
    >>> latex(e)
    '\\left\\langle \\sigma_{\\alpha_{1}} \\sigma_{\\alpha_{2}} \\right\\rangle_{K^{(\\ell)}}'
    >>> e.samples
    (alpha_1, alpha_2)
    """

    is_commutative = True
    is_real = True

    def __new__(cls, integrand, kernel, components=None):
        integrand = sp.sympify(integrand)
        if not isinstance(kernel, KernelMatrix):
            raise DomainError(
                f"kernel must be a KernelMatrix (e.g. KernelMatrix(Kernel, ell)), got {kernel!r}"
            )
        if not _is_random(integrand):
            return integrand
        canonical = sp.Tuple(*(kernel.entry(a, b) for a, b in _pairs(_labels(integrand))))
        if components is None or not _keeps_dummies(components, canonical):
            components = canonical
        return super().__new__(cls, integrand, kernel, components)

    # -- accessors ---------------------------------------------------------------------------
    @property
    def integrand(self) -> sp.Expr:
        return self.args[0]

    @property
    def kernel(self) -> KernelMatrix:
        return self.args[1]

    @property
    def samples(self) -> tuple:
        """Sample labels of the integrand's random factors, sorted by ``default_sort_key``."""
        return tuple(_labels(self.integrand))

    @property
    def free_symbols(self):
        # the KernelMatrix stores its tensor class name as a Symbol; it is not a variable
        layer = self.kernel.layer
        extra = layer.free_symbols if layer is not None else set()
        # the components carry the Dummy that sympy's diff substitutes (product rule)
        return self.integrand.free_symbols | extra | self.args[2].free_symbols

    @property
    def is_monomial(self) -> bool:
        """Whether the integrand is a product of powers of σ-factors and z's (no coefficient)."""
        return all(_random_power(f) is not None for f in sp.Mul.make_args(self.integrand))

    def _new(self, integrand):
        return GaussianExpectation(integrand, self.kernel)

    # -- linearity ---------------------------------------------------------------------------
    def expand(self, *args, **hints) -> sp.Expr:
        r"""Linearity: :math:`\sum_k c_k\langle M_k\rangle` with monomial integrands :math:`M_k`.

        Constants, kernel components and any factor free of :math:`z` are pulled out; equal
        monomials are merged.  Random factors that are not monomials (e.g. ``exp(z(1))``) stay
        inside the atom.
        """
        integrand = sp.expand(self.integrand)
        groups: dict[sp.Expr, sp.Expr] = {}
        order: list[sp.Expr] = []
        for term in sp.Add.make_args(integrand):
            coeff, mono, rest = _split_monomial(term)
            inner = mono * rest
            if inner not in groups:
                groups[inner] = sp.S.Zero
                order.append(inner)
            groups[inner] += coeff
        return sp.Add(*[groups[m] * self._new(m) for m in order])

    def _eval_expand_mul(self, **hints):
        return self.expand()

    # -- Wick --------------------------------------------------------------------------------
    def wick(self) -> sp.Expr:
        r"""Wick's theorem (PDLT (1.45)) on every atom of :meth:`expand` without σ factors.

        :math:`\langle z_{\mu_1}\cdots z_{\mu_{2m}}\rangle_K` becomes the sum over the
        :math:`(2m-1)!!` pairings of products of kernel components, equal terms merged.
        Atoms containing σ factors are returned unchanged.
        """
        return wick(self)

    def _wick_monomial(self) -> sp.Expr:
        if not self.is_monomial or self.integrand.has(ActivationFactor):
            return self
        exps: dict = {}
        for f in sp.Mul.make_args(self.integrand):
            base, p = _random_power(f)
            exps[base.label] = exps.get(base.label, 0) + p
        labels = sorted(exps, key=_key)
        n = [exps[a] for a in labels]
        if sum(n) % 2:
            return sp.S.Zero
        # multiplicity form of Isserlis' theorem: each distinct term once, with its pairing count
        terms = [c * sp.Mul(*[self.kernel.entry(labels[i], labels[j]) ** m for i, j, m in mult])
                 for c, mult in isserlis_terms(tuple(n))]
        return sp.Add(*terms)

    # -- Stein -------------------------------------------------------------------------------
    def stein(self) -> sp.Expr:
        r"""Remove every :math:`z` factor by Stein's lemma (Gaussian integration by parts).

        .. math:: \langle z_\beta F\rangle_K = \sum_{\gamma}K_{\beta\gamma}\langle\partial_\gamma F\rangle_K,

        :math:`\gamma` running over the labels of :math:`F`.  The result is a combination of
        derivative atoms :math:`\langle\sigma^{(a)}\cdots\rangle_K` and kernel components.  For
        kinked σ the derivatives are distributions (Gaussian integration by parts holds for
        them); the numerics evaluate their delta parts exactly.
        """
        return stein(self)

    def _stein_monomial(self) -> sp.Expr:
        if not self.is_monomial:
            return self
        zs = [f for f in sp.Mul.make_args(self.integrand)
              if isinstance(_random_power(f)[0], GaussianVariable)]
        if not zs:
            return self
        base = _random_power(min(zs, key=_key))[0]
        rest = self.integrand / base
        total = sp.S.Zero
        for gamma in _labels(rest):
            d = sp.diff(rest, GaussianVariable(gamma))
            if d != 0:
                total += self.kernel.entry(base.label, gamma) * self._new(d)
        return stein(total)

    # -- Price's theorem ---------------------------------------------------------------------
    def _eval_derivative(self, s):
        r"""Price/Bonnet: :math:`\partial_{K_{ab}}\langle F\rangle=\langle\partial_a\partial_b F\rangle`, ½ if a = b.

        ``sympy.diff`` replaces the component by a Dummy ``s`` everywhere in the atom, including
        the component tuple in ``.args``; its position there tells which :math:`(a, b)`.
        Explicit dependence of the integrand (e.g. :math:`z_az_b-K_{ab}`) is added.
        """
        integrand = self.integrand
        result = sp.S.Zero
        if integrand.has(s):
            explicit = sp.diff(integrand, s)
            if explicit != 0:
                result = expand_expectations(self._new(explicit))
        comps = self.args[2]
        if s in comps.args:
            a, b = _pairs(self.samples)[comps.args.index(s)]
            d = sp.diff(integrand, GaussianVariable(a), GaussianVariable(b))
            if a == b:
                d = d / 2
            result = result + expand_expectations(self._new(d))
        return result

    # -- evaluation --------------------------------------------------------------------------
    def doit(self, activation: Any = None, **hints) -> sp.Expr:
        r"""Evaluate what can be evaluated exactly.

        Wick-reduces atoms without σ.  If ``activation`` (a registry name or an
        ``effth.activations.Activation``) is polynomial, :math:`\sigma^{(a)}` is replaced by its
        exact derivative polynomial and the atom reduces to kernel components.  Other
        activations leave σ atoms unevaluated (they compile to closed forms or quadrature,
        see :mod:`effth.codegen`).
        """
        atom = self
        if activation is not None:
            act = _resolve_activation(activation)
            if act.is_polynomial:
                atom = atom._new(_substitute_activation(atom.integrand, act))
                if not isinstance(atom, GaussianExpectation):
                    return atom
        return atom.wick()

    # -- numerics ----------------------------------------------------------------------------
    def factors(self) -> tuple:
        """The numerics contract's factor tuple ``((slot, 'sigma', a) | (slot, 'z', p), ...)``.

        Slots are positions in :attr:`samples`.  Only for monomial atoms.

        Examples
        --------
        >>> from effth.algebra.expectation import sigma, z
        >>> from effth.algebra.tensors import KernelMatrix, Kernel
        >>> GaussianExpectation(sigma(2, 1) * sigma(1)**2 * z(2)**3, KernelMatrix(Kernel)).factors()
        ((0, 'sigma', 0), (0, 'sigma', 0), (1, 'sigma', 1), (1, 'z', 3))
        """
        return self.to_numeric()[1]

    def to_numeric(self) -> tuple[tuple, tuple]:
        """``(samples, factors)`` for ``effth.numerics.gaussian_expectation``.

        Raises
        ------
        NotDerivedError
            If the integrand is not a monomial (call :meth:`expand` first).
        """
        if not self.is_monomial:
            raise NotDerivedError(
                f"{self} is not a monomial atom; call .expand() first "
                "(non-polynomial functions of z have no numeric factor tuple)"
            )
        samples = self.samples
        slot = {lab: k for k, lab in enumerate(samples)}
        names = {f.name for f in self.integrand.atoms(ActivationFactor)}
        if len(names) > 1:
            raise NotDerivedError(f"atom {self} mixes activations {sorted(names)}")
        out = []
        for f in sp.Mul.make_args(self.integrand):
            base, p = _random_power(f)
            if isinstance(base, ActivationFactor):
                out.extend([(slot[base.label], "sigma", base.order)] * p)
            else:
                out.append((slot[base.label], "z", p))
        kind_rank = {"sigma": 0, "z": 1}
        out.sort(key=lambda t: (t[0], kind_rank[t[1]], t[2]))
        return samples, tuple(out)

    # -- printing ----------------------------------------------------------------------------
    def _latex(self, printer) -> str:
        body = _latex_integrand(self.integrand, printer)
        return rf"\left\langle {body} \right\rangle_{{{printer._print(self.kernel)}}}"

    def _sympystr(self, printer) -> str:
        return f"GaussianExpectation({printer._print(self.integrand)}, {printer._print(self.kernel)})"


def _keeps_dummies(given, canonical) -> bool:
    """Whether ``given`` is ``canonical`` with some entries replaced by Dummies (sympy's diff)."""
    if not isinstance(given, sp.Tuple) or len(given) != len(canonical):
        return False
    return all(g == c or isinstance(g, sp.Dummy) for g, c in zip(given.args, canonical.args))


def _latex_factor_key(f):
    base, p = _random_power(f)
    kind = 0 if isinstance(base, ActivationFactor) else 1
    order = base.order if kind == 0 else 0
    return (kind, _key(base.label), order)


def _latex_integrand(integrand, printer) -> str:
    """σ-factors first (by sample, then order), then z's, then other factors; powers braced."""
    from sympy.printing.precedence import PRECEDENCE

    mono, other = [], []
    for f in sp.Mul.make_args(integrand):
        (mono if _random_power(f) is not None else other).append(f)
    parts = []
    for f in sorted(mono, key=_latex_factor_key):
        base, p = _random_power(f)
        s = printer._print(base)
        if p > 1:
            s = f"{{{s}}}^{{{p}}}" if ("'" in s or "^" in s) else f"{s}^{{{p}}}"
        parts.append(s)
    if other:
        rest = sp.Mul(*other)
        if rest.is_Add or len(other) == 1:
            parts.extend(printer.parenthesize(o, PRECEDENCE["Mul"]) for o in other)
        else:
            parts.append(printer._print(rest))
    return " ".join(parts)


# --------------------------------------------------------------------------------------------
# activations (duck-typed, lazily imported: algebra sits below activations)
# --------------------------------------------------------------------------------------------
def _resolve_activation(activation):
    if isinstance(activation, str):
        from effth.activations import get_activation  # lazy: activations import algebra

        return get_activation(activation)
    return activation


def _activation_symbol(act):
    try:
        from effth.activations import Z

        return Z
    except ImportError:  # pragma: no cover
        return sp.Symbol("z", real=True)


def _substitute_activation(expr, act):
    Z = _activation_symbol(act)

    def repl(f):
        return act.derivative_expr(f.order).xreplace({Z: GaussianVariable(f.label)})

    return expr.replace(lambda e: isinstance(e, ActivationFactor), repl)


# --------------------------------------------------------------------------------------------
# module-level helpers
# --------------------------------------------------------------------------------------------
@public
def expand_expectations(expr) -> sp.Expr:
    """Apply :meth:`GaussianExpectation.expand` (linearity) to every atom in ``expr``."""
    expr = sp.sympify(expr)
    if isinstance(expr, GaussianExpectation):
        return expr.expand()
    return expr.replace(lambda e: isinstance(e, GaussianExpectation), lambda e: e.expand())


@public
def expect(expr, kernel: KernelMatrix) -> sp.Expr:
    r"""The Gaussian expectation :math:`\langle\mathrm{expr}\rangle_K` as a combination of atoms.

    Examples
    --------
    >>> from effth.algebra.expectation import sigma, z
    >>> from effth.algebra.tensors import KernelMatrix, Kernel
    >>> K = KernelMatrix(Kernel)
    >>> expect(3 * sigma(1) * (z(2)**2 - Kernel(2, 2)), K)
    3*GaussianExpectation(sigma(1)*z(2)**2, KernelMatrix(Kernel)) - 3*GaussianExpectation(sigma(1), KernelMatrix(Kernel))*Kernel(2, 2)
    """
    return expand_expectations(GaussianExpectation(expr, kernel))


@public
def stein(expr) -> sp.Expr:
    r"""Apply Stein's lemma to every atom of ``expr`` until no :math:`z` factor is left.

    See :meth:`GaussianExpectation.stein`.
    """
    expr = expand_expectations(expr)
    out = expr.replace(lambda e: isinstance(e, GaussianExpectation), lambda e: e._stein_monomial())
    return sp.expand(out)


@public
def wick(expr) -> sp.Expr:
    """Apply :meth:`GaussianExpectation.wick` to every atom of ``expr``."""
    return expand_expectations(expr).replace(
        lambda e: isinstance(e, GaussianExpectation), lambda e: e._wick_monomial()
    )


@public
def atoms_of(expr) -> list:
    """The distinct :class:`GaussianExpectation` atoms of ``expr``, in a deterministic order."""
    return sorted(sp.sympify(expr).atoms(GaussianExpectation), key=_key)
