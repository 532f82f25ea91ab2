r"""Gaussian-expectation atoms :math:`\langle F(z)\rangle_K` and their symbolic calculus.

An *atom* is the single-neuron Gaussian expectation of PDLT (4.25) (the
single-neuron form of (1.68)),

.. math:: \langle F(z_{\alpha_1},\dots,z_{\alpha_m})\rangle_{K}
          = \int\frac{\prod_\alpha dz_\alpha}{\sqrt{|2\pi K|}}
            e^{-\frac12\sum K^{\alpha\beta}z_\alpha z_\beta}\,F,

whose integrand is built from

* :func:`z` — the Gaussian variable :math:`z_\alpha` of sample :math:`\alpha`;
* :func:`sigma` — an :class:`ActivationFactor` :math:`\sigma^{(a)}(z_\alpha)`, printed
  :math:`\sigma_{\alpha}`, :math:`\sigma'_{\alpha}`, …, :math:`\sigma^{(4)}_{\alpha}`.

**Distinct sample labels are distinct variables.**  Differentiating :math:`\sigma_{\alpha_1}`
with respect to :math:`z_{\alpha_2}` gives zero even though :math:`\alpha_1` and
:math:`\alpha_2` might later be set equal: no Kronecker deltas are produced.  Every identity
derived here (Stein, Price, Wick) is polynomial or smooth in the kernel components, so the
results remain valid when labels coincide, by continuity in :math:`K` (coinciding labels give
a degenerate kernel, the limit of non-degenerate ones).

The calculus (all methods return new expressions, atoms are immutable):

* :meth:`GaussianExpectation.expand` — linearity: monomial integrands times coefficients;
* :meth:`GaussianExpectation.wick` — Wick's theorem (PDLT (1.45)) for atoms without
  :math:`\sigma`;
* :meth:`GaussianExpectation.stein` — Stein's lemma (Gaussian integration by parts)
  :math:`\langle z_\beta F\rangle_K=\sum_\gamma K_{\beta\gamma}\langle\partial_\gamma F\rangle_K`;
* ``sympy.diff(atom, Kernel(a, b, ell))`` — Price's theorem
  :math:`\partial\langle F\rangle_K/\partial K_{ab}=\langle\partial_a\partial_bF\rangle_K`
  (:math:`\tfrac12\langle\partial_a^2F\rangle_K` on the diagonal, a symmetric component being one
  variable);
* :meth:`GaussianExpectation.doit` — exact reduction for polynomial activations.

For kinked activations (ReLU, step) the derivatives :math:`\sigma^{(a)}` are distributions;
Stein's and Price's identities hold in the distributional sense, and the numerics
(``effth.numerics.gaussian_expectation``) add the delta parts exactly.

Examples
--------
>>> from effth.algebra.indices import ell
>>> from effth.algebra.tensors import KernelMatrix, Kernel
>>> K = KernelMatrix(Kernel, ell)
>>> e = GaussianExpectation(z(1)**2 * z(2)**2, K)
>>> e.wick()
Kernel(1, 1, ell)*Kernel(2, 2, ell) + 2*Kernel(1, 2, ell)**2
>>> GaussianExpectation(z(1) * sigma(2), K).stein()
GaussianExpectation(sigma'(2), KernelMatrix(Kernel, ell))*Kernel(1, 2, ell)
"""

from __future__ import annotations

from .atom import GaussianExpectation, atoms_of, expand_expectations, expect, stein, wick
from .variables import ActivationFactor, GaussianVariable, sigma, z

__all__ = [
    "GaussianVariable",
    "ActivationFactor",
    "GaussianExpectation",
    "z",
    "sigma",
    "expect",
    "expand_expectations",
    "stein",
    "wick",
    "atoms_of",
]
