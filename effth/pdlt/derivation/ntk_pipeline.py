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

**Residual MLPs** (``residual=True``, PDLT (B.4)): the forward equations of :math:`z` and
:math:`\hat H` gain the skip terms (:func:`~effth.pdlt.derivation.ntk_forward.forward_terms`);
a skip variable is the layer-:math:`\ell` neuron of an output neuron, so the coincidence split
also lets a summed input neuron land on it (at a cost of :math:`1/n_\ell`), as for the kernel
(:func:`~effth.pdlt.derivation.pipeline.forward_moment`).  Odd statistics no longer vanish:
the layer-:math:`\ell` expectation carries the three-point vertex :math:`T` of the
preactivations and the NTK–preactivation three-point function at :math:`O(1/n)`,

.. math:: \mathbb E\big[\widehat{\Delta H}_{jk;\alpha_1\alpha_2}\,z_{m;\alpha_3}\big]=\frac1{n_{\ell-1}}
          \big[\delta_{jk}Y_{\alpha_1\alpha_2\alpha_3}+\delta_{jm}X_{\alpha_1\alpha_3\alpha_2}
          +\delta_{km}X_{\alpha_2\alpha_3\alpha_1}\big]

(:class:`NTKOddY`, :class:`NTKOddX`), which enters through the first derivative of the
Edgeworth form, :math:`\mathbb E[F\,\widehat{\Delta H}]\ni\sum_\mu\kappa(\widehat{\Delta H},z_\mu)
\langle\partial_\mu F\rangle`.  Both vanish for odd activations (the ensemble is then even
under :math:`z\to-z` of every layer) and in a plain MLP.

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
from effth.algebra.expectation import stein, z
from effth.algebra.ntk_tensors import (DDNTKR, DDNTKS, DDNTKT, DDNTKU, DNTKP, DNTKQ, NLONTK, FrozenNTK,
                                       NTKPreactD, NTKPreactF, NTKVarianceA, NTKVarianceB)
from effth.algebra.tensors import SampleTensor
from effth.algebra.wick import enumerate_pairings
from effth.algebra.wick.counting import _UnionFind

from effth.pdlt.derivation.pipeline import (CB, CW, KMAT, N_L, N_PREV, PAIRINGS, _derivative_atom, _falling, _labels_of,
                      layer_expectation, pair_channels, truncate)
from effth.pdlt.derivation.ntk_forward import Term, forward_terms

__all__ = ["NTKLeg", "ntk_moment", "cached_moment", "ntk_layer_expectation", "NTKOddY", "NTKOddX"]

HALF = sp.Rational(1, 2)


class NTKOddY(SampleTensor):
    r"""NTK–preactivation three-point tensor of a residual MLP, diagonal-NTK channel.

    :math:`Y^{(\ell)}_{\alpha_1\alpha_2\alpha_3}=n_{\ell-1}\,\mathbb E[\hat H_{jj;\alpha_1\alpha_2}
    z_{m;\alpha_3}]`, :math:`j\ne m` (see :mod:`effth.pdlt.derivation.ntk_pipeline`);
    symmetric under :math:`\alpha_1\leftrightarrow\alpha_2`.  Zero in a plain MLP and for odd
    activations; a skip connection (PDLT (B.4)) with a non-odd activation makes it nonzero.
    """

    rank = 3
    symmetry = ((1, 0, 2),)
    stem = "Y"


class NTKOddX(SampleTensor):
    r"""NTK–preactivation three-point tensor of a residual MLP, cross channel.

    :math:`X^{(\ell)}_{\alpha_1\alpha_3\alpha_2}=n_{\ell-1}\,\mathbb E[\hat H_{jk;\alpha_1\alpha_2}
    z_{j;\alpha_3}]`, :math:`j\ne k`: the first two slots sit on the neuron shared by the NTK
    and the preactivation.  No symmetry; zero where :class:`NTKOddY` is.
    """

    rank = 3
    symmetry = "none"
    stem = "X"


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


def _delta_h_first(blocks, obj) -> sp.Expr:
    r""":math:`\sum_\mu\kappa(\widehat{\Delta H}_{jk;ab},z_\mu)\langle\partial_\mu\prod_bF_b\rangle`: the odd
    NTK–preactivation channel of a residual layer (:class:`NTKOddY`, :class:`NTKOddX`)."""
    _, (j, k), (a, b) = obj
    out = sp.S.Zero
    for m, F in enumerate(blocks):
        for g in _labels_of(F):
            c = sp.S.Zero
            if j == k:
                c += NTKOddY(a, b, g, ell)
            if j == m:
                c += NTKOddX(a, g, b, ell)
            if k == m:
                c += NTKOddX(b, g, a, ell)
            if c != 0:
                out += c * _gauss(blocks, {m: (g,)})
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
def ntk_layer_expectation(blocks: Sequence[sp.Expr], objs: Sequence[tuple], order: int,
                          residual: bool = False) -> sp.Expr:
    r""":math:`\mathbb E[\prod_bF_b(z_{j_b})\prod_o\mathcal O_o]` over distinct layer-:math:`\ell` neurons, to :math:`O(1/n^{\rm order})`.

    Parameters
    ----------
    blocks : sequence of sympy expressions
        :math:`F_b`: products of :func:`~effth.algebra.expectation.sigma` factors, one per
        distinct neuron.
    objs : sequence of (kind, block indices, samples)
        Layer-:math:`\ell` NTK objects whose neuron slots are the blocks.
    order : {0, 1}
    residual : bool
        Layer :math:`\ell` is the output of a residual block: the preactivations' third cumulant
        and the odd NTK–preactivation channel enter (the blocks may hold :math:`z` factors).
    """
    blocks = list(blocks)
    objs = list(objs)
    if residual and any(o[0] not in ("H",) for o in objs):
        raise NotImplementedError("residual MLPs: the dNTK and ddNTK statistics are not derived")
    options = [("mean", "fluct") if o[0] == "H" else (("fluct",) if o[0] == "dH" else ("mean",))
               for o in objs]
    total = sp.S.Zero
    for choice in itertools.product(*options):
        fl = [o for o, c in zip(objs, choice) if c == "fluct"]
        means = [o for o, c in zip(objs, choice) if c == "mean"]
        if not fl:
            m = sp.Mul(*[_mean(o, order >= 1) for o in means])
            if m != 0:
                total += m * layer_expectation(blocks, order, residual=residual)
            continue
        if order < 1 or any(o[0] in ("ddI", "ddII") for o in means):
            continue                                   # O(1/n^2)
        lead = sp.Mul(*[_mean(o, False) for o in means])
        if lead == 0:
            continue
        kinds = [o[0] for o in fl]
        if kinds == ["H"]:
            total += lead * _delta_h_with_z(blocks, fl[0])
            if residual:
                total += lead * _delta_h_first(blocks, fl[0])
        elif kinds == ["H", "H"]:
            total += lead * _two_delta_h(*fl) * _gauss(blocks)
        elif kinds == ["dH"]:
            total += lead * _dh_with_z(blocks, fl[0])
        # everything else (three ΔĤ, ΔĤ with dĤ, two dĤ, ...) is O(1/n^2)
    return total


# ------------------------------------------------------------------ steps 1-3: layer ℓ+1
def _combine(terms: Sequence[Term], order: int, residual: bool = False) -> sp.Expr:
    """Steps 2-4 for one product of forward-equation terms (one per leg).

    Skip variables (``"@i"``, residual MLPs) are fixed neurons: each block of summed variables
    is a free neuron or lands on one of them (distinct blocks, distinct neurons)."""
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
            groups = list(uf.groups().values())
            fixed = sorted({v for g in groups for v in g if v.startswith("@")})
            classes = [g for g in groups if not any(v.startswith("@") for v in g)]
            pref = coef * CB ** len(bp) * (CW / N_L) ** len(wp) / N_L ** n_inv
            for part in set_partitions(list(range(len(classes)))):
                for where in itertools.product([None] + fixed, repeat=len(part)):
                    used = [w for w in where if w is not None]
                    if len(set(used)) != len(used):
                        continue
                    free = len(part) - len(used)
                    k0 = len(wp) + n_inv - free
                    if k0 > order:
                        continue
                    # blocks: the fixed neurons first, then the free ones
                    block_of = {f: bi for bi, f in enumerate(fixed)}
                    nb = len(fixed)
                    for blk, w in zip(part, where):
                        if w is None:
                            bi, nb = nb, nb + 1
                        else:
                            bi = block_of[w]
                        for c in blk:
                            for v in classes[c]:
                                block_of[v] = bi
                    blocks = [sp.S.One] * nb
                    for s in sites:
                        blocks[block_of[s.var]] *= z(s.sample) if s.order < 0 else sigma(s.sample, s.order)
                    lobjs = [(o.kind, tuple(block_of[v] for v in o.vars), o.samples) for o in objs]
                    total += (pref * _falling(N_L - len(fixed), free)
                              * ntk_layer_expectation(blocks, lobjs, order - k0, residual))
    return total


@public
def ntk_moment(legs: Sequence[NTKLeg], order: int = 1, residual: bool = False) -> sp.Expr:
    r"""The joint moment :math:`\mathbb E[\prod_k\mathcal O^{(\ell+1)}_k]` to :math:`O(1/n^{\rm order})`.

    Each leg is a layer-:math:`(\ell+1)` preactivation, NTK, dNTK or ddNTK component; the result
    holds :math:`n_\ell`, :math:`n_{\ell-1}`, :math:`C_W^{(\ell+1)}, C_b^{(\ell+1)},
    \lambda_b^{(\ell+1)}, \lambda_W^{(\ell+1)}`, layer-:math:`\ell` tensors and derivative atoms
    over :math:`K^{(\ell)}`.  With ``residual=True`` the legs follow the residual MLP (PDLT
    (B.4); kinds ``z`` and ``H``), and the result also holds :math:`\xi^{(\ell+1)}`,
    :math:`\gamma^{(\ell+1)}`, the three-point vertex :math:`T` and :class:`NTKOddY`,
    :class:`NTKOddX` of layer :math:`\ell`; the skip terms' :math:`z` factors are removed by
    Gaussian integration by parts.
    """
    legs = list(legs)
    per_leg = [[t.renamed(f"L{k}_") for t in forward_terms(leg.kind, tuple(leg.neurons), tuple(leg.samples),
                                                           residual=residual)]
               for k, leg in enumerate(legs)]
    total = sp.S.Zero
    for combo in itertools.product(*per_leg):
        total += _combine(combo, order, residual)
    if residual:
        total = stein(total)
    return truncate(total, order)


@public
@lru_cache(maxsize=None)
def cached_moment(legs: tuple, order: int = 1, residual: bool = False) -> sp.Expr:
    """:func:`ntk_moment` memoized on the (hashable) legs: statistics share moments."""
    return ntk_moment(list(legs), order, residual)
