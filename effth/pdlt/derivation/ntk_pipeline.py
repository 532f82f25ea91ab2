r"""The generic derivation pipeline extended to the NTK hierarchy (joint statistics of z, Ĥ, dĤ, ddĤ).

Steps, for a joint moment of layer-:math:`(\ell+1)` objects (each a :class:`Leg`):

1. every object is expanded by its stochastic forward equation (:mod:`effth.pdlt.derivation.ntk_forward`);
2. the weights and biases of layer :math:`\ell+1` are Wick-contracted (PDLT (2.19)–(2.20)):
   a weight pair forces equal output neurons and fuses two input-neuron variables;
3. the remaining input-neuron sums are split by coincidence pattern (set partitions, counts
   :math:`n_\ell(n_\ell-1)\cdots`);
4. the layer-:math:`\ell` expectation of activations *and* layer-:math:`\ell` NTK objects over
   distinct neurons is expanded to :math:`O(1/n)` by the cumulant rules of the nearly-Gaussian
   layer-:math:`\ell` distribution (:func:`ntk_layer_expectation`): the kernel's
   :math:`G^{\{1\}}` and :math:`V` (as for the kernel recursions), the NTK mean
   :math:`\Theta+H^{\{1\}}/n`, and the connected pieces

   * :math:`\widehat{\Delta H}` with preactivations: the derivative operator of PDLT (8.71) with
     :math:`D`, :math:`F`,
   * two :math:`\widehat{\Delta H}`: :math:`A`, :math:`B` (8.82),
   * :math:`\widehat{dH}` with preactivations: the derivative operator of PDLT (11.46) with
     :math:`P`, :math:`Q`,
   * the ddNTK means :math:`R, S, T, U` (∞.11)–(∞.12);

   every other joint cumulant is :math:`O(1/n^2)` (PDLT §11.2 fn. 6, §∞.1);
5. expectations over distinct neurons factorize into single-neuron derivative atoms.

The derivative sums :math:`\sum_\gamma` collapse onto the labels of the activations they act on
(Edgeworth form: the book's inverse kernels removed by Gaussian integration by parts), as in
:mod:`effth.pdlt.derivation.pipeline`.
"""

from __future__ import annotations

from effth._signature import public

import itertools
from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

import sympy as sp

from effth.algebra.cumulants import set_partitions
from effth.algebra.expectation import GaussianExpectation, sigma
from effth.algebra.indices import ell
from effth.algebra.ntk_tensors import (DDNTKR, DDNTKS, DDNTKT, DDNTKU, DNTKP, DNTKQ, NLONTK, FrozenNTK,
                                       NTKPreactD, NTKPreactF, NTKVarianceA, NTKVarianceB)
from effth.algebra.wick import enumerate_pairings
from effth.algebra.wick.counting import _UnionFind

from effth.pdlt.derivation.pipeline import (CB, CW, KMAT, N_L, N_PREV, PAIRINGS, _derivative_atom, _falling, _labels_of,
                      layer_expectation, pair_channels, truncate)
from effth.pdlt.derivation.ntk_forward import Term, forward_terms

__all__ = ["NTKLeg", "ntk_moment", "cached_moment", "ntk_layer_expectation"]

HALF = sp.Rational(1, 2)


@public
@dataclass(frozen=True)
class NTKLeg:
    r"""One external layer-:math:`(\ell+1)` object: ``kind`` in ``z, H, dH, ddI, ddII``, output neurons, samples."""

    kind: str
    neurons: tuple
    samples: tuple


# ------------------------------------------------------------------------ step 4: layer ℓ
def _gauss(blocks: Sequence[sp.Expr], derivs: dict | None = None) -> sp.Expr:
    r""":math:`\prod_b\langle\partial_{\gamma\ldots}F_b\rangle_{K^{(\ell)}}` with derivative labels per block."""
    derivs = derivs or {}
    out = sp.S.One
    for b, F in enumerate(blocks):
        labs = derivs.get(b)
        if labs:
            out *= _derivative_atom(F, tuple(sorted(labs, key=sp.default_sort_key)), "edgeworth")
        else:
            out *= GaussianExpectation(F, KMAT)
    return out


def _mean(obj: tuple, nlo: bool) -> sp.Expr:
    """Mean of a layer-ℓ object given as (kind, blocks, samples); ``nlo`` adds the 1/n part of Ĥ."""
    kind, b, s = obj
    if kind == "H":
        if b[0] != b[1]:
            return sp.S.Zero
        out = FrozenNTK(s[0], s[1], ell)
        return out + NLONTK(s[0], s[1], ell) / N_PREV if nlo else out
    if kind == "dH":
        return sp.S.Zero
    if kind == "ddI":       # (∞.11)
        return pair_channels(b, s, [((0, 1, 2, 3), DDNTKR), ((0, 2, 3, 1), DDNTKR), ((0, 3, 1, 2), DDNTKR)]) / N_PREV
    if kind == "ddII":      # (∞.12)
        return pair_channels(b, s, [((0, 1, 2, 3), DDNTKS), ((0, 2, 3, 1), DDNTKT), ((0, 3, 1, 2), DDNTKU)]) / N_PREV
    raise ValueError(kind)


def _delta_h_with_z(blocks, obj) -> sp.Expr:
    r""":math:`\mathbb E[\prod_bF_b\,\widehat{\Delta H}_{jk;ab}]` at :math:`O(1/n)` (PDLT (8.71), derivative form)."""
    _, (j, k), (a, b) = obj
    out = sp.S.Zero
    if j == k:       # (1/2) sum_m D_{g1 g2 a b} d_{m g1} d_{m g2}
        for m, F in enumerate(blocks):
            for g1, g2 in itertools.product(_labels_of(F), repeat=2):
                out += HALF * NTKPreactD(g1, g2, a, b, ell) * _gauss(blocks, {m: (g1, g2)})
    for g1 in _labels_of(blocks[j]):
        for g2 in _labels_of(blocks[k]):
            d = {j: (g1, g2)} if j == k else {j: (g1,), k: (g2,)}
            out += NTKPreactF(g1, a, g2, b, ell) * _gauss(blocks, d)
    return out / N_PREV


def _two_delta_h(o1, o2) -> sp.Expr:
    r""":math:`\mathbb E[\widehat{\Delta H}\widehat{\Delta H}]` (PDLT (8.82))."""
    (_, (j1, j2), (a1, a2)), (_, (j3, j4), (a3, a4)) = o1, o2
    chans = [(PAIRINGS[0], NTKVarianceA), (PAIRINGS[1], NTKVarianceB), (PAIRINGS[2], NTKVarianceB)]
    return pair_channels((j1, j2, j3, j4), (a1, a2, a3, a4), chans) / N_PREV


def _dh_with_z(blocks, obj) -> sp.Expr:
    r""":math:`\mathbb E[\prod_bF_b\,\widehat{dH}_{j_0j_1j_2}]` at :math:`O(1/n)` (PDLT (11.42)/(11.46))."""
    _, (j0, j1, j2), (d0, d1, d2) = obj
    out = sp.S.Zero
    if j1 == j2:
        for g in _labels_of(blocks[j0]):
            out += DNTKP(d0, d1, d2, g, ell) * _gauss(blocks, {j0: (g,)})
    if j0 == j1:
        for g in _labels_of(blocks[j2]):
            out += DNTKQ(d0, d1, d2, g, ell) * _gauss(blocks, {j2: (g,)})
    if j0 == j2:
        for g in _labels_of(blocks[j1]):
            out += DNTKQ(d0, d2, d1, g, ell) * _gauss(blocks, {j1: (g,)})
    return out / N_PREV


@public
def ntk_layer_expectation(blocks: Sequence[sp.Expr], objs: Sequence[tuple], order: int) -> sp.Expr:
    r""":math:`\mathbb E[\prod_bF_b(z_{j_b})\prod_o\mathcal O_o]` over distinct layer-:math:`\ell` neurons, to :math:`O(1/n^{\rm order})`.

    Parameters
    ----------
    blocks : sequence of sympy expressions
        :math:`F_b`: products of :func:`~effth.algebra.expectation.sigma` factors, one per
        distinct neuron.
    objs : sequence of (kind, block indices, samples)
        Layer-:math:`\ell` NTK objects whose neuron slots are the blocks.
    order : {0, 1}
    """
    blocks = list(blocks)
    objs = list(objs)
    options = [("mean", "fluct") if o[0] == "H" else (("fluct",) if o[0] == "dH" else ("mean",))
               for o in objs]
    total = sp.S.Zero
    for choice in itertools.product(*options):
        fl = [o for o, c in zip(objs, choice) if c == "fluct"]
        means = [o for o, c in zip(objs, choice) if c == "mean"]
        if not fl:
            m = sp.Mul(*[_mean(o, order >= 1) for o in means])
            if m != 0:
                total += m * layer_expectation(blocks, order)
            continue
        if order < 1 or any(o[0] in ("ddI", "ddII") for o in means):
            continue                                   # O(1/n^2)
        lead = sp.Mul(*[_mean(o, False) for o in means])
        if lead == 0:
            continue
        kinds = [o[0] for o in fl]
        if kinds == ["H"]:
            total += lead * _delta_h_with_z(blocks, fl[0])
        elif kinds == ["H", "H"]:
            total += lead * _two_delta_h(*fl) * _gauss(blocks)
        elif kinds == ["dH"]:
            total += lead * _dh_with_z(blocks, fl[0])
        # everything else (three ΔĤ, ΔĤ with dĤ, two dĤ, ...) is O(1/n^2)
    return total


# ------------------------------------------------------------------ steps 1-3: layer ℓ+1
def _combine(terms: Sequence[Term], order: int) -> sp.Expr:
    """Steps 2-4 for one product of forward-equation terms (one per leg)."""
    coef = sp.Mul(*[t.coef for t in terms])
    n_inv = sum(t.n_inv for t in terms)
    if any(a != b for t in terms for a, b in t.deltas):
        return sp.S.Zero
    weights = [w for t in terms for w in t.weights]
    biases = [b for t in terms for b in t.biases]
    sites = [s for t in terms for s in t.sites]
    objs = [o for t in terms for o in t.objs]
    if len(weights) % 2 or len(biases) % 2:
        return sp.S.Zero
    variables = sorted({v for _, v in weights} | {s.var for s in sites} | {v for o in objs for v in o.vars})
    total = sp.S.Zero
    for bp in enumerate_pairings(list(range(len(biases)))):
        if any(biases[a] != biases[b] for a, b in bp):
            continue
        for wp in enumerate_pairings(list(range(len(weights)))):
            if any(weights[a][0] != weights[b][0] for a, b in wp):
                continue
            uf = _UnionFind()
            for v in variables:
                uf.find(v)
            for a, b in wp:
                uf.union(weights[a][1], weights[b][1])
            classes = list(uf.groups().values())
            pref = coef * CB ** len(bp) * (CW / N_L) ** len(wp) / N_L ** n_inv
            for part in set_partitions(list(range(len(classes)))):
                k0 = len(wp) + n_inv - len(part)
                if k0 > order:
                    continue
                block_of = {v: bi for bi, blk in enumerate(part) for c in blk for v in classes[c]}
                blocks = [sp.S.One] * len(part)
                for s in sites:
                    blocks[block_of[s.var]] *= sigma(s.sample, s.order)
                lobjs = [(o.kind, tuple(block_of[v] for v in o.vars), o.samples) for o in objs]
                total += pref * _falling(N_L, len(part)) * ntk_layer_expectation(blocks, lobjs, order - k0)
    return total


@public
def ntk_moment(legs: Sequence[NTKLeg], order: int = 1) -> sp.Expr:
    r"""The joint moment :math:`\mathbb E[\prod_k\mathcal O^{(\ell+1)}_k]` to :math:`O(1/n^{\rm order})`.

    Each leg is a layer-:math:`(\ell+1)` preactivation, NTK, dNTK or ddNTK component; the result
    holds :math:`n_\ell`, :math:`n_{\ell-1}`, :math:`C_W^{(\ell+1)}, C_b^{(\ell+1)},
    \lambda_b^{(\ell+1)}, \lambda_W^{(\ell+1)}`, layer-:math:`\ell` tensors and derivative atoms
    over :math:`K^{(\ell)}`.
    """
    legs = list(legs)
    per_leg = [[t.renamed(f"L{k}_") for t in forward_terms(leg.kind, tuple(leg.neurons), tuple(leg.samples))]
               for k, leg in enumerate(legs)]
    total = sp.S.Zero
    for combo in itertools.product(*per_leg):
        total += _combine(combo, order)
    return truncate(total, order)


@public
@lru_cache(maxsize=None)
def cached_moment(legs: tuple, order: int = 1) -> sp.Expr:
    """:func:`ntk_moment` memoized on the (hashable) legs: statistics share moments."""
    return ntk_moment(list(legs), order)
