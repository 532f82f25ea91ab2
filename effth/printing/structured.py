r"""The building blocks of a structured (readable) form of a derived expression.

A derived recursion arrives fully expanded: a sum of coefficients times layer-:math:`\ell`
tensors times single-neuron atoms :math:`\langle\sigma^{(a)}_{\alpha}\cdots\rangle_K`.  The book
writes the same quantity with a few objects that this module provides, each a SymPy expression
that **expands back** (``.doit()``) to the atoms it stands for, so that every printed form can be
checked equal to the derivation:

* :class:`DerivativeExpectation` :math:`\langle\partial_{\beta_1}\cdots\partial_{\beta_r}F\rangle_K`
  (:math:`\partial_\beta\equiv\partial/\partial z_\beta`), the Edgeworth form of a cumulant
  contracted with an expectation (PDLT (4.115), (4.119) after Gaussian integration by parts);
* :class:`HermiteExpectation` :math:`\langle F\,{:}z_{\beta_1}\cdots z_{\beta_r}{:}\rangle_K`,
  the same with the inverse kernels written out (the book's raised-index form), where
  :math:`{:}z_{\beta_1}z_{\beta_2}{:}=z_{\beta_1}z_{\beta_2}-K_{\beta_1\beta_2}`;
* :class:`BlockFunction`, a named random variable of one neuron, e.g. the book's
  :math:`\widehat\Omega^{(\ell+1)}_{\alpha_1\alpha_2}` (PDLT (8.90)), that carries its definition;
* :class:`Connected`, :math:`\langle XY\rangle_K-\langle X\rangle_K\langle Y\rangle_K`.

Sums over the dummy indices :math:`\beta` are :class:`~effth.algebra.tensors.SampleSum` objects
over the dataset :math:`\mathcal D`; a derivative with respect to a sample on which :math:`F`
does not depend vanishes, so :func:`expand_structured` runs them over the free labels only.
"""

from __future__ import annotations

import itertools
from functools import lru_cache

import sympy as sp

from effth.algebra.expectation import GaussianExpectation, expand_expectations
from effth.algebra.expectation.variables import ActivationFactor, GaussianVariable, _labels
from effth.algebra.tensors import KernelMatrix, SampleSum

__all__ = ["BlockFunction", "Connected", "DerivativeExpectation", "DerivedBlock", "HermiteExpectation",
           "NamedScalar",
           "expand_structured", "term_dict"]


def _slot(k: int) -> sp.Symbol:
    return sp.Symbol(f"_slot{k}")


class BlockFunction(sp.Expr):
    r"""A named random variable of one neuron, :math:`X_{\alpha_1\ldots}=` ``definition``.

    Parameters
    ----------
    name : str
        LaTeX of the symbol without indices, e.g. ``r"\widehat{\Omega}^{(\ell+1)}"``.
    labels : tuple
        Its sample labels (printed as the subscript), distinct.
    definition : sympy expression
        The integrand it stands for (σ-factors, z's and z-independent coefficients).

    The definition is stored with its labels replaced by slot placeholders, so that substituting
    samples for the labels (a single input, or numbers) keeps the meaning of each slot.
    """

    is_commutative = True
    is_real = True

    def __new__(cls, name, labels, definition):
        labels = tuple(sp.sympify(x) for x in labels)
        definition = sp.sympify(definition)
        if definition.free_symbols & {_slot(k) for k in range(len(labels))}:
            generic = definition          # rebuilt from .args (xreplace, subs): already generic
        else:
            if len(set(labels)) != len(labels):
                raise ValueError(f"a named random variable needs distinct labels, got {labels}")
            generic = definition.xreplace({x: _slot(k) for k, x in enumerate(labels)})
        return super().__new__(cls, sp.Symbol(str(name)), sp.Tuple(*labels), generic)

    @property
    def name(self) -> str:
        return self.args[0].name

    @property
    def labels(self) -> tuple:
        return tuple(self.args[1])

    @property
    def generic(self) -> sp.Expr:
        """The definition in slot placeholders ``_slot0, _slot1, ...``."""
        return self.args[2]

    @property
    def definition(self) -> sp.Expr:
        return self.generic.xreplace({_slot(k): x for k, x in enumerate(self.labels)})

    @property
    def free_symbols(self):
        return set(self.labels) | (self.generic.free_symbols - {_slot(k) for k in range(len(self.labels))})

    def doit(self, **hints):
        return self.definition

    def _eval_derivative(self, s):
        return sp.diff(self.definition, s)

    def _latex(self, printer) -> str:
        sub = "".join(printer._print(a) for a in self.labels)
        return f"{self.name}_{{{sub}}}"

    def _sympystr(self, printer) -> str:
        return f"{self.args[0]}[{', '.join(map(str, self.labels))}]"


class DerivedBlock(sp.Expr):
    r"""A derivative of a named random variable with respect to its label slots, e.g.
    :math:`\partial_{\delta_1}\widehat\Omega_{\delta_1\delta_2}` in the dNTK recursions.

    The derivative acts on the slot, not on the variable :math:`z` of its label: where two slots
    carry the same sample (a single input), :math:`\partial_{\delta_1}` still hits only the first
    factor, as in the formula with distinct labels it stands for.
    """

    is_commutative = True
    is_real = True

    def __new__(cls, base, slots):
        return super().__new__(cls, base, sp.Tuple(*[sp.Integer(k) for k in slots]))

    @property
    def base(self) -> BlockFunction:
        return self.args[0]

    @property
    def slots(self) -> tuple:
        return tuple(int(k) for k in self.args[1])

    @property
    def derivative_labels(self) -> tuple:
        return tuple(self.base.labels[k] for k in self.slots)

    @property
    def definition(self) -> sp.Expr:
        labels = self.base.labels
        d = sp.diff(self.base.generic, *[GaussianVariable(_slot(k)) for k in self.slots])
        return d.xreplace({_slot(k): x for k, x in enumerate(labels)})

    @property
    def free_symbols(self):
        return self.base.free_symbols

    def doit(self, **hints):
        return self.definition

    def _latex(self, printer) -> str:
        d = "".join(rf"\partial_{{{printer._print(a)}}}" for a in self.derivative_labels)
        return d + printer._print(self.base)

    def _sympystr(self, printer) -> str:
        return "d[" + ",".join(map(str, self.derivative_labels)) + "]" + printer._print(self.base)


def _unfold(expr: sp.Expr) -> sp.Expr:
    """Replace every :class:`BlockFunction` and :class:`DerivedBlock` by its definition."""
    if not expr.has(BlockFunction):
        return expr
    expr = expr.replace(lambda e: isinstance(e, DerivedBlock), lambda e: e.definition)
    return expr.replace(lambda e: isinstance(e, BlockFunction), lambda e: _unfold(e.definition))


@lru_cache(maxsize=8192)
def _derivative_atoms(F: sp.Expr, labels: tuple, kernel: KernelMatrix) -> sp.Expr:
    dF = sp.diff(_unfold(F), *[GaussianVariable(a) for a in labels]) if labels else _unfold(F)
    return expand_expectations(GaussianExpectation(sp.expand(dF), kernel))


class _IndexedExpectation(sp.Expr):
    """An expectation over ``kernel`` of ``integrand`` carrying dummy sample labels ``betas``."""

    is_commutative = True
    is_real = True

    def __new__(cls, integrand, betas, kernel):
        return super().__new__(cls, sp.sympify(integrand), sp.Tuple(*betas), kernel)

    @property
    def integrand(self) -> sp.Expr:
        return self.args[0]

    @property
    def betas(self) -> tuple:
        return tuple(self.args[1])

    @property
    def kernel(self) -> KernelMatrix:
        return self.args[2]

    @property
    def free_symbols(self):
        return self.args[0].free_symbols | set(self.betas)


class DerivativeExpectation(_IndexedExpectation):
    r""":math:`\langle\partial_{\beta_1}\cdots\partial_{\beta_r}F\rangle_K`: derivatives of the
    integrand :math:`F` with respect to :math:`z_{\beta}`, then the Gaussian expectation."""

    def doit(self, **hints):
        return _derivative_atoms(self.integrand, self.betas, self.kernel)

    def _latex(self, printer) -> str:
        body = printer._print(self.integrand)
        if self.betas:
            d = "".join(rf"\partial_{{{printer._print(b)}}}" for b in self.betas)
            many = isinstance(self.integrand, (sp.Mul, sp.Add, sp.Pow))
            body = rf"{d}\!\left({body}\right)" if many else f"{d} {body}"
        return rf"\left\langle {body} \right\rangle_{{{printer._print(self.kernel)}}}"

    def _sympystr(self, printer) -> str:
        return f"<d[{', '.join(map(str, self.betas))}] {printer._print(self.integrand)}>"


def _normal_ordered(betas, kernel) -> sp.Expr:
    r"""Wick normal ordering :math:`{:}z_{\beta_1}\cdots z_{\beta_r}{:}` w.r.t. the kernel."""
    from effth.algebra.wick import enumerate_pairings

    k = len(betas)
    out = sp.S.Zero
    for r in range(0, k // 2 + 1):
        for sub in itertools.combinations(range(k), 2 * r):
            for pairing in enumerate_pairings(list(sub)):
                rest = [GaussianVariable(betas[i]) for i in range(k) if i not in sub]
                out += (-1) ** r * sp.Mul(*[kernel.entry(betas[a], betas[b]) for a, b in pairing]) \
                    * sp.Mul(*rest)
    return out


class HermiteExpectation(_IndexedExpectation):
    r""":math:`\langle F\,{:}z_{\beta_1}\cdots z_{\beta_r}{:}\rangle_K`, the raised-index form of
    :class:`DerivativeExpectation` by Stein's identity:
    :math:`\langle\partial_{\gamma_1}\cdots\partial_{\gamma_r}F\rangle_K=\sum_\beta
    K^{\gamma_1\beta_1}\cdots K^{\gamma_r\beta_r}\langle F{:}z_{\beta_1}\cdots z_{\beta_r}{:}\rangle_K`."""

    def doit(self, **hints):
        body = sp.expand(_unfold(self.integrand) * _normal_ordered(self.betas, self.kernel))
        return expand_expectations(GaussianExpectation(body, self.kernel))

    def _latex(self, printer) -> str:
        body = printer._print(self.integrand)
        b = self.betas
        K = self.kernel
        if len(b) == 1:
            tail = printer._print(GaussianVariable(b[0]))
        elif len(b) == 2:
            tail = (rf"\left({printer._print(GaussianVariable(b[0]))}"
                    rf"{printer._print(GaussianVariable(b[1]))} - "
                    rf"{printer._print(K.entry(b[0], b[1]))}\right)")
        else:
            zs = "".join(printer._print(GaussianVariable(x)) for x in b)
            tail = rf"{{:}}{zs}{{:}}"
        return rf"\left\langle {body} {tail} \right\rangle_{{{printer._print(K)}}}"


class Connected(sp.Expr):
    r""":math:`\langle XY\rangle_K-\langle X\rangle_K\langle Y\rangle_K` for random variables of two
    distinct label groups (the Gaussian part of a covariance, e.g. PDLT (4.119), (8.97))."""

    is_commutative = True
    is_real = True

    def __new__(cls, X, Y, kernel):
        return super().__new__(cls, sp.sympify(X), sp.sympify(Y), kernel)

    def doit(self, **hints):
        X, Y, K = self.args
        return (expand_expectations(GaussianExpectation(sp.expand(_unfold(X * Y)), K))
                - expand_expectations(GaussianExpectation(sp.expand(_unfold(X)), K))
                * expand_expectations(GaussianExpectation(sp.expand(_unfold(Y)), K)))

    @property
    def free_symbols(self):
        return self.args[0].free_symbols | self.args[1].free_symbols

    def _latex(self, printer) -> str:
        X, Y, K = self.args
        k = printer._print(K)
        x, y = printer._print(X), printer._print(Y)
        return (rf"\left[\left\langle {x}\, {y} \right\rangle_{{{k}}} - \left\langle {x} "
                rf"\right\rangle_{{{k}}}\left\langle {y} \right\rangle_{{{k}}}\right]")


_STRUCTURED = (DerivativeExpectation, HermiteExpectation, Connected)


def expand_structured(expr: sp.Expr, samples) -> sp.Expr:
    r"""Expand a structured expression back to atoms: sample sums over ``samples``, derivative,
    Hermite and connected expectations evaluated, named functions unfolded."""
    from effth.algebra.tensors import expand_sample_sums

    e = expand_sample_sums(sp.sympify(expr), list(samples)) if expr.has(SampleSum) else expr
    if e.has(*_STRUCTURED):
        e = e.replace(lambda x: isinstance(x, _STRUCTURED), lambda x: x.doit())
    if e.has(BlockFunction):
        e = _unfold(e)
    return expand_expectations(sp.expand(e))


def _mul_dicts(a: dict, b: dict) -> dict:
    out: dict = {}
    for ka, va in a.items():
        for kb, vb in b.items():
            c, k = (ka * kb).as_coeff_Mul()
            out[k] = out.get(k, 0) + c * va * vb
    return {k: v for k, v in out.items() if v != 0}


def _add_into(out: dict, d: dict, c=1) -> None:
    for k, v in d.items():
        out[k] = out.get(k, 0) + c * v


def expanded_terms(expr: sp.Expr, samples) -> dict:
    r"""``{monomial: coefficient}`` of ``expr`` expanded back to atoms, as :func:`expand_structured`
    but by term-dictionary arithmetic (sums over dummies run over ``samples``), fast on the sums
    the simplifier builds."""
    samples = [sp.sympify(x) for x in samples]

    def go(e, sub) -> dict:
        if isinstance(e, sp.Add):
            out: dict = {}
            for a in e.args:
                _add_into(out, go(a, sub))
            return {k: v for k, v in out.items() if v != 0}
        if isinstance(e, sp.Mul):
            out = {sp.S.One: 1}
            for a in e.args:
                out = _mul_dicts(out, go(a, sub))
                if not out:
                    return {}
            return out
        if isinstance(e, sp.Pow) and e.exp.is_Integer and e.exp > 0:
            base = go(e.base, sub)
            out = {sp.S.One: 1}
            for _ in range(int(e.exp)):
                out = _mul_dicts(out, base)
            return out
        if isinstance(e, SampleSum):
            out = {}
            for values in itertools.product(samples, repeat=len(e.dummies)):
                _add_into(out, go(e.summand, {**sub, **dict(zip(e.dummies, values))}))
            return {k: v for k, v in out.items() if v != 0}
        if isinstance(e, DerivativeExpectation):
            F = e.integrand.xreplace(sub) if sub else e.integrand
            betas = tuple(sub.get(b, b) for b in e.betas)
            return term_dict(_derivative_atoms(F, betas, e.kernel))
        if isinstance(e, NamedScalar):
            return term_dict(expand_expectations(sp.expand(e.definition)))
        if isinstance(e, (HermiteExpectation, Connected, GaussianExpectation, BlockFunction)):
            x = e.xreplace(sub) if sub else e
            if isinstance(x, GaussianExpectation):
                x = GaussianExpectation(_unfold(x.integrand), x.kernel)
                return term_dict(expand_expectations(x))
            return term_dict(expand_expectations(sp.expand(_unfold(x.doit()))))
        x = e.xreplace(sub) if sub else e
        return term_dict(x)

    return go(sp.sympify(expr), {})


def term_dict(expr: sp.Expr) -> dict:
    """``{monomial: rational coefficient}`` of an expanded expression."""
    out: dict = {}
    for t in sp.Add.make_args(sp.expand(expr)):
        if t == 0:
            continue
        c, rest = t.as_coeff_Mul()
        out[rest] = out.get(rest, 0) + c
    return {k: v for k, v in out.items() if v != 0}


def labels_of(expr: sp.Expr) -> list:
    """Sample labels of the σ-factors and z's in ``expr``."""
    return _labels(expr)


def activation_factors(expr: sp.Expr) -> list:
    return [a for a in sp.preorder_traversal(expr) if isinstance(a, ActivationFactor)]


class NamedScalar(sp.Expr):
    r"""A named scalar function of the kernel, e.g. the susceptibility
    :math:`\chi_\parallel^{(\ell)}\equiv C_W\langle\sigma'\sigma'+\sigma\sigma''\rangle_{K^{(\ell)}}`
    (PDLT (5.50)), that carries its definition (``doit()`` returns it)."""

    is_commutative = True
    is_real = True

    def __new__(cls, name, definition):
        return super().__new__(cls, sp.Symbol(str(name)), sp.sympify(definition))

    @property
    def name(self) -> str:
        return self.args[0].name

    @property
    def definition(self) -> sp.Expr:
        return self.args[1]

    @property
    def free_symbols(self):
        return self.args[1].free_symbols

    def doit(self, **hints):
        return self.definition

    def _latex(self, printer) -> str:
        return self.name

    def _sympystr(self, printer) -> str:
        return str(self.args[0])
