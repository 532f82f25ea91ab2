r"""The generic derivation pipeline for layer-:math:`(\ell+1)` statistics at initialization.

This module implements steps 1–5 of DESIGN.md "How a recursion gets derived" for the forward
equation of an MLP (PDLT (2.5)),

.. math:: z^{(\ell+1)}_{i;\alpha}=b^{(\ell+1)}_i+\sum_{j=1}^{n_\ell}W^{(\ell+1)}_{ij}\,
          \sigma\big(z^{(\ell)}_{j;\alpha}\big),

and nothing in it is specific to one formula:

1. a moment :math:`\mathbb E[\prod_k z^{(\ell+1)}_{i_k;\alpha_k}]` is expanded leg by leg
   (each leg is a bias :math:`b_{i_k}` or a weight term :math:`W_{i_kj_k}\sigma_{j_k;\alpha_k}`);
2. the Gaussian weights and biases are Wick-contracted
   (:func:`~effth.algebra.wick.enumerate_pairings`; PDLT (2.19)–(2.20)); output neuron deltas
   are collapsed with :func:`~effth.algebra.wick.collapse_neurons`, and each weight pair
   :math:`\delta_{j_kj_l}` fuses two input-neuron indices into one summed group;
3. the sum over the groups is split by coincidence pattern
   (:func:`~effth.algebra.cumulants.set_partitions`, counts :math:`n_\ell(n_\ell-1)\cdots`);
4. each layer-:math:`\ell` expectation over distinct neurons is expanded in the cumulants of the
   nearly-Gaussian layer-:math:`\ell` distribution (PDLT (4.104), (4.117)) in the Edgeworth form
   with derivative atoms; the Edgeworth coefficients are themselves derived from the
   moment–cumulant relation (:func:`edgeworth_coefficient`);
5. expectations over distinct neurons factorize into single-neuron atoms
   :math:`\langle\cdot\rangle_{K^{(\ell)}}` and equal atoms merge.

Order bookkeeping: both widths are written :math:`n\to n/\epsilon` and every term is expanded
in the formal parameter :math:`\epsilon`; a term's prefactor order decides how far its
layer-:math:`\ell` expectation must be expanded (no wasted work on dropped orders).
"""

from __future__ import annotations

from effth._signature import public

import itertools
from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

import sympy as sp

from effth.algebra.cumulants import Cumulant, Moment, cumulants_to_moments, moments_to_cumulants, set_partitions
from effth.algebra.expectation import (ActivationFactor, GaussianExpectation, expand_expectations, sigma,
                                       stein, wick, z)
from effth.algebra.expectation.variables import GaussianVariable
from effth.algebra.indices import c_b, c_w, ell, residual_gamma, residual_xi, width
from effth.algebra.tensors import (FourPointVertex, Kernel, KernelMatrix, NLOMetric, SampleSum,
                                   ThreePointVertex)
from effth.algebra.wick import collapse_neurons, enumerate_pairings

__all__ = ["Leg", "EPS", "XI", "GAMMA", "edgeworth_coefficient", "forward_moment", "forward_cumulant",
           "layer_expectation", "order_coefficient", "truncate"]

#: Formal expansion parameter: every width :math:`n` is replaced by :math:`n/\epsilon`.
EPS = sp.Symbol("epsilon", positive=True)

N_L = width(ell)          # n_ℓ  (the summed layer)
N_PREV = width(ell - 1)   # n_{ℓ-1} (sets the size of layer-ℓ non-Gaussianity)
CW = c_w(ell + 1)
CB = c_b(ell + 1)
XI = residual_xi(ell + 1)
GAMMA = residual_gamma(ell + 1)
KMAT = KernelMatrix(Kernel, ell)

#: :math:`n_\ell/n_{\ell-1}`, the only way widths enter the recursions.
RATIO = sp.Symbol(r"\frac{n_{\ell}}{n_{\ell-1}}", positive=True)


@public
@dataclass(frozen=True)
class Leg:
    """One external preactivation :math:`z^{(\\ell+1)}_{i;\\alpha}`: output neuron and sample."""

    neuron: int
    sample: sp.Expr


# --------------------------------------------------------------------------------------------
# step 4a: Edgeworth coefficients from the moment-cumulant relation
# --------------------------------------------------------------------------------------------
@public
@lru_cache(maxsize=None)
def edgeworth_coefficient(r: int) -> sp.Rational:
    r"""Coefficient :math:`c_r` of :math:`\sum_{\mu_1..\mu_r}\kappa_{\mu_1..\mu_r}\langle\partial_{\mu_1}\cdots\partial_{\mu_r}F\rangle`.

    The expansion of :math:`\mathbb E[F]` around the Gaussian with covariance :math:`K` reads, to
    first order in the non-Gaussian data (a covariance shift :math:`\Delta K` for ``r = 2``, the
    :math:`r`-th cumulant for ``r > 2``),

    .. math:: \mathbb E[F]=\langle F\rangle_K+\sum_r c_r\sum_{\mu}\kappa_{\mu_1..\mu_r}
              \langle\partial_{\mu_1}\cdots\partial_{\mu_r}F\rangle_K+\dots

    :math:`c_r` is fixed by matching :math:`F=z_1\cdots z_r`, whose moment is the set-partition
    sum of cumulants (PDLT (1.56), :func:`~effth.algebra.cumulants.cumulants_to_moments`): the
    single-block term :math:`\kappa_{1..r}` must be reproduced by the ansatz.  The result is
    :math:`c_r=1/r!` (so :math:`\tfrac12` for :math:`\Delta K`, :math:`\tfrac1{24}` for
    :math:`\kappa_4`).
    """
    labels = tuple(range(1, r + 1))
    moment = cumulants_to_moments(labels)
    target = moment.coeff(Cumulant(*labels))           # coefficient of the connected block
    F = sp.Mul(*[z(a) for a in labels])
    c = sp.Symbol("c")
    ansatz = sp.S.Zero
    for mu in itertools.product(labels, repeat=r):     # ordered tuples, as in the book's sums
        d = sp.diff(F, *[GaussianVariable(a) for a in mu])
        if d != 0:
            ansatz += c * Cumulant(*sorted(mu)) * d    # cumulants are symmetric
    sol = sp.solve(sp.Eq(ansatz.coeff(Cumulant(*labels)), target), c)
    return sp.Rational(sol[0])


# --------------------------------------------------------------------------------------------
# step 4b: expectation over distinct layer-ℓ neurons, expanded in cumulants
# --------------------------------------------------------------------------------------------
def _two_point(s1, s2):
    r"""Covariance shift of layer :math:`\ell`: :math:`\delta_{jk}G^{\{1\}}_{ab}/n_{\ell-1}` (PDLT (4.104))."""
    (b1, a1), (b2, a2) = s1, s2
    return NLOMetric(a1, a2, ell) / N_PREV if b1 == b2 else sp.S.Zero


#: The three neuron pairings of a four-slot decomposition, as slot orders (p, q, r, s):
#: the channel :math:`\delta_{i_pi_q}\delta_{i_ri_s}` carries the tensor at samples (p, q, r, s).
PAIRINGS = ((0, 1, 2, 3), (0, 2, 1, 3), (0, 3, 1, 2))


def pair_channels(neurons, samples, channels) -> sp.Expr:
    r"""Sum over neuron-pairing channels with the deltas evaluated on neuron identities.

    ``channels`` is a sequence of ``(slot order, tensor)``; a channel contributes
    ``tensor(*samples in slot order)`` when neurons ``p = q`` and ``r = s``.  E.g. the connected
    four-point function (4.117) is ``[(P, V) for P in PAIRINGS]``.
    """
    out = sp.S.Zero
    for (p, q, r, t), T in channels:
        if neurons[p] == neurons[q] and neurons[r] == neurons[t]:
            out += T(samples[p], samples[q], samples[r], samples[t], ell)
    return out


def _four_point(s1, s2, s3, s4):
    r"""Connected four-point function of layer :math:`\ell` (PDLT (4.117)), neuron deltas evaluated."""
    (b1, a1), (b2, a2), (b3, a3), (b4, a4) = s1, s2, s3, s4
    return pair_channels((b1, b2, b3, b4), (a1, a2, a3, a4), [(P, FourPointVertex) for P in PAIRINGS]) / N_PREV


def _three_point(s1, s2, s3):
    r"""Connected three-point function of a residual layer :math:`\ell` at :math:`O(1/n_{\ell-1})`:
    :math:`\frac1{n_{\ell-1}}[\delta_{i_1i_2}T_{(\alpha_1\alpha_2)\alpha_3}+\text{2 channels}]`
    (:class:`~effth.algebra.tensors.ThreePointVertex`), neuron deltas evaluated."""
    (b1, a1), (b2, a2), (b3, a3) = s1, s2, s3
    out = sp.S.Zero
    for (p, q, r) in ((0, 1, 2), (0, 2, 1), (1, 2, 0)):
        bs, as_ = (b1, b2, b3), (a1, a2, a3)
        if bs[p] == bs[q]:
            out += ThreePointVertex(as_[p], as_[q], as_[r], ell)
    return out / N_PREV


#: Non-Gaussian data of layer ℓ at O(1/n_{ℓ-1}): (rank, cumulant function).  In a plain MLP odd
#: cumulants vanish (every term of an odd moment is odd in the zero-mean weights and biases,
#: PDLT §4.1); the sixth cumulant and products of two O(1/n) cumulants are O(1/n^2).
_LAYER_CUMULANTS = ((2, _two_point), (4, _four_point))

#: A residual layer (PDLT (B.4)) adds the third cumulant: the skip term γ z^{(ℓ)} is not odd in
#: the weights, so E[z z z] ∝ γ ξ² C_W <σσz> / n survives for activations that are not odd.
_RESIDUAL_CUMULANTS = ((2, _two_point), (3, _three_point), (4, _four_point))


def _labels_of(F: sp.Expr) -> list:
    labels = {f.label for f in F.atoms(ActivationFactor)} | {v.label for v in F.atoms(GaussianVariable)}
    return sorted(labels, key=sp.default_sort_key)


def _normal_ordered(zs: list) -> sp.Expr:
    r"""Wick normal ordering :math:`{:}z_{\beta_1}\cdots z_{\beta_k}{:}` w.r.t. :math:`K^{(\ell)}` (sum over partial pairings)."""
    k = len(zs)
    out = sp.S.Zero
    for r in range(0, k // 2 + 1):
        for sub in itertools.combinations(range(k), 2 * r):
            for pairing in enumerate_pairings(list(sub)):
                rest = [zs[i] for i in range(k) if i not in sub]
                term = sp.Mul(*[Kernel(zs[a].label, zs[b].label, ell) for a, b in pairing])
                out += (-1) ** r * term * sp.Mul(*rest)
    return out


@lru_cache(maxsize=4096)
def _hermite_atom(F: sp.Expr, labels: tuple) -> sp.Expr:
    r"""Book (raised-index) form of :math:`\langle\partial_{\gamma_1}\cdots\partial_{\gamma_k}F\rangle_K`.

    Gaussian integration by parts (Stein's lemma, PDLT (4.115), (4.118), (4.119) in Edgeworth form) run backwards:

    .. math:: \langle\partial_{\gamma_1}\cdots\partial_{\gamma_k}F\rangle_K=\sum_{\beta}
              K^{\gamma_1\beta_1}\cdots K^{\gamma_k\beta_k}
              \langle F\,{:}z_{\beta_1}\cdots z_{\beta_k}{:}\rangle_K,

    e.g. :math:`\langle F(z_{\beta_1}z_{\beta_2}-K_{\beta_1\beta_2})\rangle` for
    :math:`k=2` as in PDLT (4.115), (4.119).  Needed for kinked σ, whose high derivatives are
    not functions; it needs :math:`K^{-1}` over the whole dataset.
    """
    from effth.algebra.tensors import InverseKernel

    betas = [sp.Symbol("beta_" + str(g).split("_")[-1]) for g in labels]   # γ_k -> β_k
    inv = sp.Mul(*[InverseKernel(g, b, ell) for g, b in zip(labels, betas)])
    body = expand_expectations(GaussianExpectation(sp.expand(F * _normal_ordered([z(b) for b in betas])), KMAT))
    return SampleSum(sp.expand(inv * body), *betas)


@lru_cache(maxsize=4096)
def _derivative_atom(F: sp.Expr, labels: tuple, form: str = "edgeworth") -> sp.Expr:
    r""":math:`\langle\partial_{\gamma_1}\cdots\partial_{\gamma_k}F\rangle_{K^{(\ell)}}`, expanded by linearity (memoized)."""
    if form == "book":
        return _hermite_atom(F, labels)
    dF = sp.diff(F, *[GaussianVariable(a) for a in labels])
    return expand_expectations(GaussianExpectation(sp.expand(dF), KMAT))


@public
def layer_expectation(blocks: Sequence[sp.Expr], order: int, form: str = "edgeworth",
                      residual: bool = False) -> sp.Expr:
    r""":math:`\mathbb E[\prod_b F_b(z^{(\ell)}_{j_b})]` over distinct neurons :math:`j_b`, to :math:`O(\epsilon^{\rm order})`.

    Parameters
    ----------
    blocks : sequence of sympy expressions
        :math:`F_b`, products of :func:`~effth.algebra.expectation.sigma` factors, one per
        distinct neuron.
    order : int
        0 (Gaussian, factorized) or 1 (adds :math:`\Delta K=G^{\{1\}}/n_{\ell-1}` and the
        four-point cumulant :math:`V/n_{\ell-1}`, same-neuron and cross-neuron).
    form : {"edgeworth", "book"}
        Derivative atoms (no inverse kernel), or their Stein-equivalent raised-index form.
    residual : bool
        Layer :math:`\ell` is the output of a residual block (PDLT (B.4)): its third cumulant
        (:class:`~effth.algebra.tensors.ThreePointVertex`) enters with the Edgeworth
        coefficient :math:`1/3!`.  The blocks may then hold :func:`~effth.algebra.expectation.z`
        factors too (the skip term of an output neuron).

    Notes
    -----
    A derivative slot :math:`\mu=(j,\gamma)` acting on :math:`F_b(z_{j_b})` vanishes unless
    :math:`j=j_b` and :math:`\gamma` is one of the labels of :math:`F_b`; the dummy sums
    :math:`\sum_\gamma` therefore collapse onto the labels of the blocks (marginalization over
    samples, PDLT §4.4) and the result has no free dummies.  Neuron deltas in the cumulants are
    evaluated on block identities (distinct blocks are distinct neurons).
    """
    blocks = list(blocks)
    gauss = [GaussianExpectation(F, KMAT) for F in blocks]
    out = sp.Mul(*gauss)
    if order <= 0:
        return out
    if order > 1:
        raise NotImplementedError("O(1/n^2) needs the sextic cumulant and V^{1}, G^{2} (not derived yet)")
    book = form == "book"
    if book:
        # derivative slots carry dataset dummies γ_k (Stein needs the full derivative of F_b)
        slots = [(b, None) for b in range(len(blocks))]
    else:
        # ∂_γ F_b vanishes unless γ is a label of F_b: the γ sums collapse onto those labels
        slots = [(b, a) for b, F in enumerate(blocks) for a in _labels_of(F)]
    corr = sp.S.Zero
    for r, kappa in (_RESIDUAL_CUMULANTS if residual else _LAYER_CUMULANTS):
        c = edgeworth_coefficient(r)
        gam = tuple(sp.Symbol(f"gamma_{k + 1}") for k in range(r))
        for mu in itertools.product(slots, repeat=r):
            if book:
                mu = tuple((b, g) for (b, _), g in zip(mu, gam))
            k = kappa(*mu)
            if k == 0:
                continue
            factors = []
            for b, F in enumerate(blocks):
                labels_b = tuple(a for (bb, a) in mu if bb == b)
                if not book:
                    labels_b = tuple(sorted(labels_b, key=sp.default_sort_key))
                factors.append(_derivative_atom(F, labels_b, form) if labels_b else gauss[b])
            if book:   # widths stay outside the sum so that orders can be read off
                corr += c / N_PREV * SampleSum(sp.expand(k * N_PREV) * sp.Mul(*factors), *gam)
            else:
                corr += c * k * sp.Mul(*factors)
    return out + corr


# --------------------------------------------------------------------------------------------
# steps 1-3: forward equation, Wick over weights and biases, coincidence split
# --------------------------------------------------------------------------------------------
def _falling(n: sp.Expr, p: int) -> sp.Expr:
    return sp.Mul(*[n - k for k in range(p)])


@public
def forward_moment(legs: Sequence[Leg], order: int = 1, form: str = "edgeworth",
                   residual: bool = False) -> sp.Expr:
    r"""The layer-:math:`(\ell+1)` moment :math:`\mathbb E[\prod_k z^{(\ell+1)}_{i_k;\alpha_k}]` to :math:`O(1/n^{\rm order})`.

    Derived from the forward equation by Wick contraction of :math:`b^{(\ell+1)}` and
    :math:`W^{(\ell+1)}` (PDLT (2.19)–(2.20)), the coincidence split of the remaining
    input-neuron sums and :func:`layer_expectation`.  The result holds :math:`n_\ell`,
    :math:`n_{\ell-1}`, :math:`C_W^{(\ell+1)}`, :math:`C_b^{(\ell+1)}`, layer-:math:`\ell`
    tensors and atoms over :math:`K^{(\ell)}`; terms beyond the requested order are dropped.

    With ``residual=True`` the forward equation is the residual MLP of PDLT (B.4),
    :math:`z^{(\ell+1)}_i=\xi^{(\ell+1)}[b_i+\sum_jW_{ij}\sigma_j]+\gamma^{(\ell+1)}z^{(\ell)}_i`
    (:math:`n_{\ell+1}=n_\ell`): each leg is a bias, a weight term or the skip term
    :math:`\gamma z^{(\ell)}_{i_k}` of its own output neuron.  The skip terms are not contracted;
    they are layer-:math:`\ell` variables of the neurons :math:`i_k`, so the coincidence split
    also lets a summed input neuron :math:`j` coincide with one of them (each such coincidence
    costs a factor :math:`1/n_\ell` against the free sum), and the layer-:math:`\ell` expectation
    includes the third cumulant (:func:`layer_expectation` with ``residual=True``).
    """
    legs = list(legs)
    m = len(legs)
    total = sp.S.Zero
    kinds = "bWz" if residual else "bW"
    for choice in itertools.product(kinds, repeat=m):
        contracted = [k for k in range(m) if choice[k] != "z"]
        skips = [k for k in range(m) if choice[k] == "z"]
        # neurons carrying skip terms (layer-ℓ variables of output neurons) and their z factors
        skip_neurons = sorted({legs[k].neuron for k in skips})
        zblock = {i: sp.Mul(*[z(legs[k].sample) for k in skips if legs[k].neuron == i])
                  for i in skip_neurons}
        gain = (XI ** len(contracted) * GAMMA ** len(skips)) if residual else sp.S.One
        for pairing in enumerate_pairings(contracted):
            if any(choice[a] != choice[b] for a, b in pairing):
                continue            # b and W are independent, zero-mean
            delta = collapse_neurons(pairing, (), {k: sp.Integer(legs[k].neuron) for k in range(m)})
            if delta == 0:
                continue            # output-neuron deltas δ_{i_a i_b}
            w_pairs = [p for p in pairing if choice[p[0]] == "W"]
            n_b = len(pairing) - len(w_pairs)
            coef = gain * delta * CB ** n_b * (CW / N_L) ** len(w_pairs)
            # each W pair fuses its two input indices j into one summed group
            groups = [sigma(legs[a].sample) * sigma(legs[b].sample) for a, b in w_pairs]
            for part in set_partitions(list(range(len(groups)))):
                # each block of summed groups is a free neuron or one of the skip neurons
                for where in itertools.product([None] + skip_neurons, repeat=len(part)):
                    used = [w for w in where if w is not None]
                    if len(set(used)) != len(used):
                        continue    # distinct blocks are distinct neurons
                    free = len(part) - len(used)
                    pref = coef * _falling(N_L - len(skip_neurons), free)
                    k0 = len(w_pairs) - free   # (1/n_ℓ)^{#W pairs} n_ℓ^{#free} at leading order
                    if k0 > order:
                        continue
                    sig = [sp.Mul(*[groups[g] for g in blk]) for blk in part]
                    blocks = [zblock[i] * sp.Mul(*[f for f, w in zip(sig, where) if w == i])
                              for i in skip_neurons]
                    blocks += [f for f, w in zip(sig, where) if w is None]
                    total += pref * layer_expectation(blocks, order - k0, form, residual)
    if residual:
        # the skip terms leave z factors in the atoms: Gaussian integration by parts removes them
        # (Edgeworth form: derivative atoms only), or Wick's theorem evaluates the pure-z atoms
        # (book form: atoms such as <σσ(zz - K)> stay as in PDLT (B.24))
        total = stein(total) if form == "edgeworth" else wick(total)
    return truncate(total, order)


@public
def truncate(expr: sp.Expr, order: int) -> sp.Expr:
    r"""Drop terms beyond :math:`O(1/n^{\rm order})` (both widths counted as one order)."""
    e = sp.expand(expr.subs({N_L: N_L / EPS, N_PREV: N_PREV / EPS}, simultaneous=True))
    kept = [t for t in sp.Add.make_args(e) if t.as_coeff_exponent(EPS)[1] <= order]
    return sp.expand(sp.Add(*kept).subs(EPS, 1))


@public
def order_coefficient(expr: sp.Expr, k: int) -> sp.Expr:
    r"""Coefficient of :math:`\epsilon^k` after :math:`n_\ell\to n_\ell/\epsilon`, :math:`n_{\ell-1}\to n_{\ell-1}/\epsilon`."""
    e = sp.expand(expr.subs({N_L: N_L / EPS, N_PREV: N_PREV / EPS}, simultaneous=True))
    return sp.expand(e.coeff(EPS, k))


@public
def forward_cumulant(legs: Sequence[Leg], order: int = 1, form: str = "edgeworth",
                     residual: bool = False) -> sp.Expr:
    r"""Joint cumulant of layer-:math:`(\ell+1)` preactivations (PDLT (1.56) inverted), to :math:`O(1/n^{\rm order})`.

    Each moment of the set-partition formula
    (:func:`~effth.algebra.cumulants.moments_to_cumulants`, parity even, PDLT §7.12) is derived
    with :func:`forward_moment`.  With ``residual=True`` (PDLT (B.4)) odd moments no longer
    vanish, but the mean does (:math:`\mathbb E[z^{(\ell+1)}]=\gamma\,\mathbb E[z^{(\ell)}]=0`),
    so every moment partition with an odd block still contains a vanishing first moment, except
    the single block of an odd cumulant itself; the moment polynomial is taken without parity
    and the first moments set to zero.
    """
    legs = list(legs)
    poly = moments_to_cumulants(tuple(range(len(legs))), parity_even=not residual)
    cache: dict = {}

    def moment(idx):
        key = tuple(idx)
        if len(key) == 1:
            return sp.S.Zero        # zero-mean biases and weights; E[z^(1)] = 0 starts the skip
        if key not in cache:
            cache[key] = forward_moment([legs[i] for i in key], order, form, residual)
        return cache[key]

    out = poly.replace(lambda e: isinstance(e, Moment), lambda e: moment(e.labels))
    return truncate(out, order)
