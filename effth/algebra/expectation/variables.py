r"""The random variables of a Gaussian-expectation atom: :math:`z_\alpha` and :math:`\sigma^{(a)}(z_\alpha)`.

Distinct sample labels are distinct variables (no Kronecker deltas on differentiation); see
:mod:`effth.algebra.expectation`.
"""

from __future__ import annotations

from effth._signature import public

import sympy as sp

from effth.errors import DomainError

__all__ = ["GaussianVariable", "ActivationFactor", "z", "sigma"]

_key = sp.default_sort_key


# --------------------------------------------------------------------------------------------
# the random variables
# --------------------------------------------------------------------------------------------
class GaussianVariable(sp.Expr):
    r"""The single-neuron Gaussian variable :math:`z_\alpha` of sample ``label``.

    Can be differentiated with respect to (``_diff_wrt``); variables with distinct labels are
    independent symbols (see the module notes).

    Examples
    --------
    >>> from effth.printing import latex
    >>> latex(z(1)), latex(GaussianVariable(sp.Symbol('alpha_1')))
    ('z_{1}', 'z_{\\alpha_{1}}')
    """

    is_commutative = True
    is_real = True
    _diff_wrt = True

    def __new__(cls, label):
        return super().__new__(cls, sp.sympify(label))

    @property
    def label(self) -> sp.Expr:
        """The sample label."""
        return self.args[0]

    def _eval_derivative(self, s):
        return sp.S.One if s == self else sp.S.Zero

    def _latex(self, printer) -> str:
        return f"z_{{{printer._print(self.label)}}}"

    def _sympystr(self, printer) -> str:
        return f"z({printer._print(self.label)})"


@public
def z(label) -> GaussianVariable:
    r"""The Gaussian variable :math:`z_\alpha` (PDLT (4.26)) of sample ``label``."""
    return GaussianVariable(label)


_PRIMES = {0: "", 1: "'", 2: "''", 3: "'''"}


class ActivationFactor(sp.Expr):
    r"""The activation derivative :math:`\sigma^{(a)}(z_\alpha)` of a single-neuron variable.

    Parameters
    ----------
    label : sample label
    order : int, default 0
        Derivative order :math:`a\ge 0`.
    name : str, default ``"sigma"``
        LaTeX stem without backslash (``"phi"`` prints :math:`\phi`, for the DMFT).

    Notes
    -----
    ``diff(sigma(a), z(a))`` raises the order; the derivative with respect to anything else is
    zero (distinct labels are distinct variables).

    Examples
    --------
    >>> s = sigma(1)
    >>> sp.diff(s, z(1), 2)
    sigma''(1)
    >>> sp.diff(s, z(2))
    0
    """

    is_commutative = True
    is_real = True

    def __new__(cls, label, order=0, name="sigma"):
        order = sp.Integer(order)
        if order < 0:
            raise DomainError(f"derivative order must be >= 0, got {order}")
        name = name if isinstance(name, sp.Symbol) else sp.Symbol(str(name))
        # The variable z_alpha is stored (not just the label) so that sympy's diff, which
        # replaces the differentiation variable by a Dummy, reaches this factor.
        var = label if isinstance(label, (GaussianVariable, sp.Dummy)) else GaussianVariable(label)
        return super().__new__(cls, var, order, name)

    @property
    def variable(self) -> sp.Expr:
        """The variable :math:`z_\\alpha` this factor is a function of."""
        return self.args[0]

    @property
    def label(self) -> sp.Expr:
        v = self.args[0]
        return v.label if isinstance(v, GaussianVariable) else v

    @property
    def order(self) -> int:
        return int(self.args[1])

    @property
    def free_symbols(self):
        # the name is stored as a Symbol but is not a variable
        return self.args[0].free_symbols

    @property
    def name(self) -> str:
        return self.args[2].name

    def _eval_derivative(self, s):
        if s == self.args[0]:
            return ActivationFactor(self.args[0], self.order + 1, self.args[2])
        return sp.S.Zero

    def _latex_head(self) -> str:
        stem = "\\" + self.name if self.name.isalpha() and len(self.name) > 1 else self.name
        a = self.order
        return stem + _PRIMES[a] if a in _PRIMES else f"{stem}^{{({a})}}"

    def _latex(self, printer) -> str:
        return f"{self._latex_head()}_{{{printer._print(self.label)}}}"

    def _sympystr(self, printer) -> str:
        a = self.order
        head = self.name + (_PRIMES[a] if a in _PRIMES else f"^({a})")
        return f"{head}({printer._print(self.label)})"


@public
def sigma(label, order: int = 0, name: str = "sigma") -> ActivationFactor:
    r""":math:`\sigma^{(a)}(z_\alpha)`, printed :math:`\sigma_\alpha`, :math:`\sigma'_\alpha`, ….

    Examples
    --------
    >>> from effth.printing import latex
    >>> latex(sigma(sp.Symbol('alpha_1'), 4)), latex(sigma(1, 1, name='phi'))
    ('\\sigma^{(4)}_{\\alpha_{1}}', "\\phi'_{1}")
    """
    return ActivationFactor(label, order, name)


_RANDOM = (GaussianVariable, ActivationFactor)


def _pairs(labels) -> list:
    """Pairs ``(a, b)`` with ``a`` at or before ``b`` in ``labels``."""
    return [(a, b) for i, a in enumerate(labels) for b in labels[i:]]


def _random_power(f) -> tuple[sp.Expr, int] | None:
    """``(base, exponent)`` if ``f`` is a random factor or its positive integer power."""
    if isinstance(f, _RANDOM):
        return f, 1
    if f.is_Pow and isinstance(f.base, _RANDOM) and f.exp.is_Integer and f.exp > 0:
        return f.base, int(f.exp)
    return None


def _is_random(e) -> bool:
    return e.has(*_RANDOM)


def _labels(expr) -> list:
    """Sample labels of the random factors of ``expr`` (deterministic order)."""
    labels = {a.label for a in sp.preorder_traversal(expr) if isinstance(a, _RANDOM)}
    return sorted(labels, key=_key)


def _split_monomial(term):
    """Split a product into (coefficient, monomial, rest): rest holds non-monomial random parts."""
    coeff, mono, rest = [], [], []
    for f in sp.Mul.make_args(term):
        if not _is_random(f):
            coeff.append(f)
        elif _random_power(f) is not None:
            mono.append(f)
        else:
            rest.append(f)
    return sp.Mul(*coeff), sp.Mul(*mono), sp.Mul(*rest)
