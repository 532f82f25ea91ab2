r"""The algorithm projectors of a trained finite-width network (PDLT §∞.2.2–§∞.2.3).

At order :math:`1/n` every MSE training algorithm ends at the universal solution (∞.141): the
algorithm enters only through six *projectors* :math:`Z_A, Z_B` (4 training-sample indices,
contracted with the dNTK) and :math:`Z_{IA}, Z_{IB}, Z_{IIA}, Z_{IIB}` (6 indices, contracted with
the two ddNTKs), built from the inverse training NTK :math:`\widetilde H^{\tilde\alpha_1
\tilde\alpha_2}` and the inverting tensors :math:`X_{II}, X_{III}` of (∞.107), (∞.110):

.. math::
    X_{II} = M_2^{-1},\quad M_2=\widetilde H\otimes\mathbb 1+\mathbb 1\otimes\widetilde H-\eta\,
    \widetilde H\otimes\widetilde H,\qquad
    X_{III} = M_3^{-1},\quad M_3=\tfrac1\eta\big[\mathbb 1^{\otimes3}-(\mathbb 1-\eta\widetilde H)^{\otimes3}\big],

:math:`Y_1\dots Y_4` of (∞.135), (∞.138)–(∞.140) and, for gradient descent with a global rate
:math:`\eta`, (∞.142)–(∞.147); gradient flow is :math:`\eta\to0` (∞.149)–(∞.153); the two-step
"giant leap + small step" Newton algorithm has :math:`Z_B=\tfrac12\widetilde H\widetilde H`,
:math:`Z_{IB}=-\tfrac16\widetilde H\widetilde H\widetilde H` and the others zero (∞.148).

**Eigenbasis form.**  With :math:`\widetilde H_{\tilde\alpha_1\tilde\alpha_2}=\sum_p\lambda_p
u_p^{\tilde\alpha_1}u_p^{\tilde\alpha_2}`, :math:`M_2` and :math:`M_3` are diagonal on
:math:`u_p\otimes u_q(\otimes u_r)` with eigenvalues
:math:`d_2(p,q)=[1-(1-\eta\lambda_p)(1-\eta\lambda_q)]/\eta` and
:math:`d_3(p,q,r)=[1-\prod(1-\eta\lambda)]/\eta`; every product in (∞.135)–(∞.147) then
contracts to a *pair-diagonal* tensor

.. math::
    Z^{a_1a_2a_3a_4}=\sum_{pq}u_p^{a_1}u_q^{a_2}u_p^{a_3}u_q^{a_4}\,z(\lambda_p,\lambda_q),\qquad
    Z^{a_1\cdots a_6}=\sum_{pqr}u_p^{a_1}u_q^{a_2}u_r^{a_3}u_p^{a_4}u_q^{a_5}u_r^{a_6}\,
    z(\lambda_p,\lambda_q,\lambda_r),

so a projector is held as its coefficient function :math:`z` -- an :math:`N_\mathcal A^2` or
:math:`N_\mathcal A^3` array -- and never as the :math:`N_\mathcal A^4`, :math:`N_\mathcal A^6`
tensor (nor :math:`X_{III}` as an :math:`N_\mathcal A^3\times N_\mathcal A^3` matrix).  The
coefficient functions are built here as SymPy expressions from the definitions (so
:meth:`AlgorithmProjectors.latex` prints them) and compiled to NumPy.
"""

from __future__ import annotations

from effth._signature import public

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import sympy as sp

from effth._validate import kernel_matrix
from effth.errors import DomainError

__all__ = ["AlgorithmProjectors", "algorithm_projectors", "projector_expressions", "projector_formulas", "ALGORITHMS",
           "PROJECTORS"]

#: Training algorithms whose projectors are known (PDLT (∞.142)–(∞.153), (∞.148)).
ALGORITHMS = ("gd", "gradient_flow", "two_step")
#: Projector names, in the book's order.
PROJECTORS = ("A", "B", "IA", "IB", "IIA", "IIB")

_LAM = sp.symbols("lambda_p lambda_q lambda_r", positive=True)
_ETA = sp.Symbol("eta", nonnegative=True)


def _coefficients(algorithm: str) -> dict:
    """Eigen-coefficient functions of the six projectors, derived from (∞.135)–(∞.148)."""
    p, q, r = _LAM
    eta = sp.Integer(0) if algorithm == "gradient_flow" else _ETA

    def xi(a):                      # X_I = inverse training NTK, eigenvalue 1/lambda
        return 1 / a

    def xii(a, b):                  # X_II = M_2^{-1} (∞.107)
        return 1 / (a + b - eta * a * b)

    def xiii(a, b, c):              # X_III = M_3^{-1} (∞.110)
        return 1 / (a + b + c - eta * (a * b + a * c + b * c) + eta ** 2 * a * b * c)

    if algorithm == "two_step":     # (∞.148)
        zero = sp.Integer(0)
        return {"A": zero, "B": xi(p) * xi(q) / 2, "IA": zero, "IB": -xi(p) * xi(q) * xi(r) / 6,
                "IIA": zero, "IIB": zero}

    def y2(a, b):                   # (∞.138)
        return xi(a) * xi(b) - xi(b) * xii(a, b)

    def y1(a, b, c):                # (∞.135)
        return xii(a, b) * xi(c) - xi(c) * xiii(a, b, c)

    def y3(a, b, c):                # (∞.139): four terms
        return (xi(a) * xi(b) * xi(c) - xi(b) * xii(a, b) * xi(c) - xi(a) * xi(c) * xii(b, c)
                + xi(c) * xii(b, c) * xiii(a, b, c))

    def y4(a, b, c):                # (∞.140)
        return xi(a) * xii(b, c) - xii(b, c) * xiii(a, b, c)

    half = sp.Rational(1, 2)
    return {                        # (∞.142)-(∞.147); eta -> 0 gives (∞.149)-(∞.153)
        "A": y2(p, q),
        "B": y2(p, q) + half * eta * xii(p, q),
        "IA": -y3(p, q, r) - half * eta * y4(p, q, r),
        "IB": (-y3(p, q, r) - half * eta * y4(p, q, r) - half * eta * y1(p, q, r)
               - eta ** 2 / 6 * xiii(p, q, r)),
        "IIA": -y3(p, q, r),
        # Y_3^{a2 a1 a3 a5 a4 a6} has coefficient y3(q, p, r) on (p, q, r) attached to (a1, a2, a3)
        "IIB": (-y3(p, q, r) - y3(q, p, r) - y3(p, r, q) - eta * y4(p, q, r) - eta * y1(p, q, r)),
    }


@public
@lru_cache(maxsize=None)
def projector_expressions(algorithm: str = "gd") -> dict:
    r"""Eigen-coefficient functions :math:`z(\lambda_p,\lambda_q[,\lambda_r];\eta)` of the projectors.

    Parameters
    ----------
    algorithm : {"gd", "gradient_flow", "two_step"}

    Returns
    -------
    dict
        ``name -> sympy.Expr`` for ``name`` in :data:`PROJECTORS`, in the symbols
        ``lambda_p, lambda_q, lambda_r`` (eigenvalues of the training NTK) and ``eta``.

    Examples
    --------
    >>> import sympy as sp
    >>> z = projector_expressions("gd")
    >>> H, eta = sp.symbols("H eta", positive=True)
    >>> lp, lq, lr = sp.symbols("lambda_p lambda_q lambda_r", positive=True)
    >>> sp.factor(z["A"].subs({lp: H, lq: H}))   # PDLT (∞.164)
    -(H*eta - 1)/(H**2*(-H*eta + 2))
    """
    if algorithm not in ALGORITHMS:
        raise DomainError(f"algorithm must be one of {ALGORITHMS}, got {algorithm!r}")
    return {k: sp.sympify(v) for k, v in _coefficients(algorithm).items()}


def _named_factors() -> dict:
    import itertools
    p, q, r = _LAM
    eta = _ETA
    out = {}
    for a in (p, q, r):
        out[sp.Symbol(f"e_{str(a)[-1]}")] = 1 - eta * a
    for a, b in itertools.combinations((p, q, r), 2):
        out[sp.Symbol(f"d_{{{str(a)[-1]}{str(b)[-1]}}}")] = a + b - eta * a * b
    out[sp.Symbol("d_{pqr}")] = sp.expand(p + q + r - eta * (p * q + p * r + q * r) + eta ** 2 * p * q * r)
    return out


def _name(e: sp.Expr, named: dict) -> sp.Expr:
    """``e`` (a polynomial) factored, each factor equal to a named one (up to sign) replaced."""
    c, fs = sp.factor(e).as_coeff_mul()
    out = c
    for f in fs:
        base, ex = f.as_base_exp()
        for s, poly in named.items():
            if sp.expand(base - poly) == 0:
                base = s
                break
            if sp.expand(base + poly) == 0:
                base, out = s, (-out if ex % 2 else out)
                break
        out *= base ** ex
    return out


def _same_rational_function(a: sp.Expr, b: sp.Expr, points: int = 4) -> bool:
    """Exact equality of two rational functions of the eigenvalues and eta, tested at random
    rational points in exact arithmetic (a nonzero rational function of bounded degree vanishes
    at a random point with negligible probability; ``sp.cancel`` of the difference took minutes)."""
    import random
    rng = random.Random(12345)
    syms = sorted(a.free_symbols | b.free_symbols, key=str)
    for _ in range(points):
        sub = {x: sp.Rational(rng.randint(1, 997), rng.randint(1, 997)) for x in syms}
        if sp.nsimplify(a.xreplace(sub) - b.xreplace(sub)) != 0:
            return False
    return True


@public
@lru_cache(maxsize=None)
def projector_formulas(algorithm: str = "gd") -> tuple:
    r"""The eigen-coefficient functions printed compactly: ``(formulas, definitions)``.

    Each :math:`z` of :func:`projector_expressions` as numerator over denominator, factored, with
    the factors :math:`e_a\equiv1-\eta\lambda_a`, :math:`d_{ab}\equiv\lambda_a+\lambda_b-
    \eta\lambda_a\lambda_b` (eigenvalues of :math:`M_2`, PDLT (∞.107)) and
    :math:`d_{pqr}\equiv\lambda_p+\lambda_q+\lambda_r-\eta(\lambda_p\lambda_q+\lambda_p
    \lambda_r+\lambda_q\lambda_r)+\eta^2\lambda_p\lambda_q\lambda_r` (of :math:`M_3`, (∞.110))
    named; ``definitions`` holds the names used. Checked equal to the expressions exactly.

    Examples
    --------
    >>> z, defs = projector_formulas("gd")
    >>> z["A"]
    e_p/(d_{pq}*lambda_p)
    """
    named = _named_factors()
    formulas, used = {}, {}
    for k, e in projector_expressions(algorithm).items():
        n, d = sp.fraction(sp.cancel(sp.together(e)))
        c = _name(n, named) / _name(d, named)
        if not _same_rational_function(c.xreplace(named), e):
            raise AssertionError(f"the printed z_{k} differs from its derivation (a bug)")
        formulas[k] = c
        used.update({s: named[s] for s in c.free_symbols if s in named})
    used = {s: used[s] for s in sorted(used, key=str)}
    return formulas, used


@lru_cache(maxsize=None)
def _compiled(algorithm: str) -> dict:
    exprs = projector_expressions(algorithm)
    return {k: sp.lambdify((*_LAM, _ETA), e, modules="numpy") for k, e in exprs.items()}


@public
@dataclass(frozen=True, repr=False)
class AlgorithmProjectors:
    r"""The six projectors of one training algorithm on one training NTK, in its eigenbasis.

    Attributes
    ----------
    algorithm : str
        ``"gd"``, ``"gradient_flow"`` or ``"two_step"``.
    eta : float or None
        Global learning rate (``"gd"``).
    eigenvalues : ndarray (N_A,)
        :math:`\lambda_p` of the training NTK :math:`\widetilde H`.
    eigenvectors : ndarray (N_A, N_A)
        Columns :math:`u_p`.
    coefficients : dict
        ``name -> ndarray``: :math:`z(p,q)` for ``"A"``, ``"B"`` (shape ``(N_A, N_A)``) and
        :math:`z(p,q,r)` for the ddNTK projectors (``(N_A, N_A, N_A)``).
    """

    algorithm: str
    eta: float | None
    eigenvalues: np.ndarray
    eigenvectors: np.ndarray
    coefficients: dict

    @property
    def n_train(self) -> int:
        return len(self.eigenvalues)

    def inverse(self) -> np.ndarray:
        r""":math:`\widetilde H^{\tilde\alpha_1\tilde\alpha_2}`, the inverse training NTK."""
        U, lam = self.eigenvectors, self.eigenvalues
        return (U / lam) @ U.T

    def to_eigenbasis(self, T: np.ndarray, axes: tuple) -> np.ndarray:
        r"""Contract the training-sample ``axes`` of ``T`` with :math:`u_p` (axis length :math:`N_\mathcal A`)."""
        for ax in axes:
            T = np.moveaxis(np.tensordot(T, self.eigenvectors, axes=([ax], [0])), -1, ax)
        return T

    def dense(self, name: str) -> np.ndarray:
        r"""The full projector tensor over training-sample indices (:math:`N_\mathcal A^4` or
        :math:`N_\mathcal A^6` entries: for checks on small training sets)."""
        z = self.coefficients[name]
        U = self.eigenvectors
        if z.ndim == 2:
            return np.einsum("ap,bq,cp,dq,pq->abcd", U, U, U, U, z)
        return np.einsum("ap,bq,cr,dp,eq,fr,pqr->abcdef", U, U, U, U, U, U, z)

    def latex(self) -> str:
        r"""The six eigen-coefficient functions as an ``aligned`` LaTeX block, in the named
        factors :math:`e_p\equiv1-\eta\lambda_p`, :math:`d_{pq}\equiv\lambda_p+\lambda_q-
        \eta\lambda_p\lambda_q` (the eigenvalues of :math:`M_2` of PDLT (∞.107)) and
        :math:`d_{pqr}` (of :math:`M_3`, (∞.110)), defined after them (:func:`projector_formulas`)."""
        formulas, used = projector_formulas(self.algorithm)
        lines = [rf"z_{{{k}}} &= {sp.latex(e)}" for k, e in formulas.items()]
        if used:
            defs = ",\\ ".join(rf"{sp.latex(s)} \equiv {sp.latex(d)}" for s, d in used.items())
            lines.append(rf"&\text{{where }} {defs}")
        return "\\begin{aligned}\n" + " \\\\\n".join(lines) + "\n\\end{aligned}"

    def _repr_latex_(self) -> str:
        return "$$" + self.latex() + "$$"

    def __repr__(self) -> str:
        eta = "" if self.eta is None else f", eta={self.eta:.6g}"
        return (f"AlgorithmProjectors({self.algorithm!r}{eta}, N_A={self.n_train}, "
                f"eigenvalues {self.eigenvalues.min():.4g}..{self.eigenvalues.max():.4g})")


@public
def algorithm_projectors(H_train: Any, *, algorithm: str = "gd", eta: Any = None) -> AlgorithmProjectors:
    r"""The projectors :math:`Z_A\dots Z_{IIB}` of a training algorithm (PDLT (∞.142)–(∞.153)).

    Parameters
    ----------
    H_train : array_like (N_A, N_A)
        Training block :math:`\widetilde H` of the NTK mean (symmetric positive definite).
    algorithm : {"gd", "gradient_flow", "two_step"}
        Gradient descent with a global learning rate ``eta`` (∞.142)–(∞.147); its
        :math:`\eta\to0` limit (∞.149)–(∞.153); the two-step Newton algorithm (∞.148).
    eta : float
        Learning rate of ``"gd"``; it must satisfy :math:`0<\eta\lambda_p<2` for every eigenvalue
        of :math:`\widetilde H` (the free dynamics (∞.88)–(∞.89) converges only then).

    Returns
    -------
    AlgorithmProjectors

    Raises
    ------
    DomainError
        A training NTK that is not symmetric positive definite, an unknown algorithm, or an
        unstable or missing learning rate.

    Examples
    --------
    >>> Z = algorithm_projectors([[2.0]], eta=0.25)        # PDLT (∞.164) at H = 2
    >>> float(Z.coefficients["A"][0, 0]), float(Z.coefficients["B"][0, 0])
    (0.08333333333333333, 0.125)
    """
    if algorithm not in ALGORITHMS:
        raise DomainError(f"algorithm must be one of {ALGORITHMS}, got {algorithm!r}")
    H = kernel_matrix(H_train, "H_train")
    lam, U = np.linalg.eigh(H)
    if lam.min() <= 1e-12 * max(lam.max(), 1e-300):
        raise DomainError(f"the training NTK is singular or not positive definite (eigenvalues "
                          f"{lam.min():.3g}..{lam.max():.3g}): the trained solution needs its inverse")
    if algorithm == "gd":
        if eta is None:
            raise DomainError("algorithm='gd' needs the learning rate eta")
        eta = float(eta)
        if not np.isfinite(eta) or eta <= 0:
            raise DomainError(f"eta must be positive and finite, got {eta!r}")
        if eta * lam.max() >= 2:
            raise DomainError(f"unstable learning rate: eta * lambda_max = {eta * lam.max():.4g} >= 2, "
                              "so gradient descent diverges (PDLT (∞.88)-(∞.89)); use eta < "
                              f"{2 / lam.max():.4g}")
    elif eta is not None:
        raise DomainError(f"eta applies to algorithm='gd' only, not {algorithm!r}")
    fns = _compiled(algorithm)
    e = 0.0 if eta is None else eta
    p2 = np.meshgrid(lam, lam, indexing="ij")
    p3 = np.meshgrid(lam, lam, lam, indexing="ij")
    coeffs = {}
    for k in PROJECTORS:
        args = (p2[0], p2[1], p2[0]) if k in ("A", "B") else tuple(p3)
        shape = args[0].shape
        coeffs[k] = np.broadcast_to(np.asarray(fns[k](*args, e), dtype=float), shape).copy()
    return AlgorithmProjectors(algorithm, None if algorithm != "gd" else eta, lam, U, coeffs)
