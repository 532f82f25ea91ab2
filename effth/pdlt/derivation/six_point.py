r"""The six-point vertex :math:`U_6` of the preactivations, derived at its leading order :math:`1/n^2`.

The connected six-point function of layer :math:`\ell+1` (PDLT epilogue (ε.17)–(ε.20)),

.. math:: \mathbb E\big[z_{i_1;\alpha_1}\cdots z_{i_6;\alpha_6}\big]\Big|_c=\frac1{n_\ell^2}
          \Big[\delta_{i_1i_2}\delta_{i_3i_4}\delta_{i_5i_6}
          U^{(\ell+1)}_{6\,(\alpha_1\alpha_2)(\alpha_3\alpha_4)(\alpha_5\alpha_6)}+\text{14 pairings}\Big]
          +O(1/n^3),

is derived from the forward equation (PDLT (2.5)) with the machinery of
:mod:`effth.pdlt.derivation.pipeline`, one order further in :math:`1/n`:

1. **Wick over** :math:`W^{(\ell+1)}, b^{(\ell+1)}`.  Given layer :math:`\ell`, the
   :math:`z^{(\ell+1)}_i` are Gaussian with covariance :math:`\delta_{ij}\widehat G_{\alpha\beta}`,
   :math:`\widehat G_{\alpha\beta}=C_b+\frac{C_W}{n_\ell}\sum_j\sigma_{j;\alpha}\sigma_{j;\beta}`
   (PDLT (4.65)).  By the law of total cumulance only the conditional second cumulants survive, so
   the six-point cumulant is the sum over the Wick pairings
   (:func:`~effth.algebra.wick.enumerate_pairings`) of the neuron deltas
   (:func:`~effth.algebra.wick.collapse_neurons`) times the joint third cumulant of three
   :math:`\widehat G`'s; with legs on neurons :math:`(1,1,2,2,3,3)` exactly one pairing survives
   and :math:`U_6^{(\ell+1)}=n_\ell^2\,\kappa(\widehat G_{\alpha_1\alpha_2},\widehat G_{\alpha_3\alpha_4},
   \widehat G_{\alpha_5\alpha_6})` at leading order (the constant :math:`C_b` drops out).
2. **Coincidence split** of the three neuron sums (:func:`~effth.algebra.cumulants.set_partitions`,
   counts :math:`n_\ell`, :math:`n_\ell(n_\ell-1)`, :math:`n_\ell(n_\ell-1)(n_\ell-2)`).
3. **Joint cumulants over layer-ℓ neurons.**  One neuron: the Gaussian cumulant of the three
   products at :math:`O(1)`.  Two neurons: the moment–cumulant formula (PDLT (1.56) inverted) with
   every moment from :func:`~effth.pdlt.derivation.pipeline.layer_expectation` at :math:`O(1/n)`
   (the four-point vertex :math:`V`).  Three neurons: at :math:`O(1/n^2)` only the Edgeworth terms
   whose cumulant factors link all three neurons survive the subtraction (linked clusters of
   :math:`E[F]=\langle\exp(\sum_r\kappa_r\partial^r/r!)F\rangle_K`): the layer-ℓ six-point vertex
   :math:`U_6^{(\ell)}/n_{\ell-1}^2` with coefficient :math:`1/6!` and the chains of two cross-neuron
   four-point cumulants, :math:`\tfrac12(1/4!)^2\kappa_4\kappa_4`.
4. **Order bookkeeping** as in the pipeline: :math:`n\to n/\epsilon`, keep :math:`\epsilon^2`.

Single input the result reads

.. math:: U_6^{(\ell+1)}=C_W^3\Big\{\big[\langle\sigma^6\rangle-3\langle\sigma^4\rangle\langle\sigma^2\rangle
          +2\langle\sigma^2\rangle^3\big]+\frac{3\rho}{4}V\langle(\sigma^2)''\rangle\big[\langle(\sigma^4)''\rangle
          -2\langle\sigma^2\rangle\langle(\sigma^2)''\rangle\big]+\rho^2\Big[\frac{U_6}8\langle(\sigma^2)''\rangle^3
          +\frac{3V^2}{16}\langle(\sigma^2)''''\rangle\langle(\sigma^2)''\rangle^2\Big]\Big\},

:math:`\rho=n_\ell/n_{\ell-1}`, which for ReLU is the book's (ε.20),
:math:`U_6^{(\ell+1)}=\tfrac18C_W^3[U_6^{(\ell)}+30V^{(\ell)}K^{(\ell)}+44(K^{(\ell)})^3]`.
"""

from __future__ import annotations

import itertools
from functools import lru_cache

import sympy as sp

from effth._signature import public
from effth.algebra.cumulants import Moment, moments_to_cumulants, set_partitions
from effth.algebra.expectation import GaussianExpectation, expand_expectations, sigma, z
from effth.algebra.expectation.variables import GaussianVariable
from effth.algebra.tensors import FourPointVertex, Kernel, SixPointVertex
from effth.algebra.indices import alpha, ell
from effth.algebra.wick import collapse_neurons, enumerate_pairings

from effth.pdlt.derivation.pipeline import (CW, KMAT, N_L, N_PREV, RATIO, _labels_of, edgeworth_coefficient,
                                            layer_expectation, order_coefficient, truncate)

__all__ = ["six_point_cumulant", "derive_six_point_vertex", "linked_cumulant", "six_point_flow"]


#: Edgeworth coefficient of the sixth cumulant, :math:`1/6!` (the value
#: :func:`~effth.pdlt.derivation.pipeline.edgeworth_coefficient` derives from the moment-cumulant
#: relation; that derivation enumerates 6^6 slot tuples, so it is checked in a slow test).
_C6 = sp.Rational(1, 720)


def _atom(F: sp.Expr, labels: tuple, form: str = "edgeworth") -> sp.Expr:
    r""":math:`\langle\partial_{\gamma_1}\cdots\partial_{\gamma_k}F\rangle_{K^{(\ell)}}` (Edgeworth atom).

    ``form="hermite"`` (one input, all labels equal): Stein's identity run backwards,
    :math:`\langle\partial^kF\rangle_K=K^{-k}\langle F\,{\rm He}_k(z;K)\rangle_K` with the
    Hermite polynomial of variance :math:`K` (PDLT (4.115), (4.119) single input), so no
    derivative of :math:`\sigma` is taken (kinked activations).
    """
    if form == "hermite" and labels:
        if len(set(labels)) != 1:
            raise ValueError("the Hermite form is derived for a single input only")
        a = labels[0]
        Kaa = Kernel(a, a, ell)
        x = sp.Symbol("x")
        he = sp.expand(Kaa ** (sp.Rational(len(labels), 2)) * sp.hermite_prob(len(labels), x)
                       .subs(x, z(a) / sp.sqrt(Kaa)))
        return expand_expectations(GaussianExpectation(sp.expand(F * he), KMAT)) / Kaa ** len(labels)
    dF = sp.diff(F, *[GaussianVariable(a) for a in labels]) if labels else F
    return expand_expectations(GaussianExpectation(sp.expand(dF), KMAT))


def _cross_slots(blocks: list, r: int, kappa) -> dict:
    r"""Group the slot tuples of an :math:`r`-th cumulant term by the labels each block receives.

    Returns ``{(labels of block 0, labels of block 1, ...): summed coefficient}`` over ordered slot
    tuples (PDLT's :math:`\sum_{\mu_1..\mu_r}`), each label tuple sorted; ``kappa(slots)`` gives the
    cumulant component with the neuron deltas evaluated on block identities.
    """
    slots = [(b, a) for b, F in enumerate(blocks) for a in _labels_of(F)]
    out: dict = {}
    for mu in itertools.product(slots, repeat=r):
        k = kappa(mu)
        if k == 0:
            continue
        key = tuple(tuple(sorted((a for bb, a in mu if bb == b), key=sp.default_sort_key))
                    for b in range(len(blocks)))
        out[key] = out.get(key, sp.S.Zero) + k
    return out


def _kappa4_cross(mu) -> sp.Expr:
    r"""Four-point cumulant :math:`\frac1{n_{\ell-1}}[\delta\delta V+2]` of layer :math:`\ell` (PDLT (4.117))
    restricted to two distinct neurons (the same-neuron channel cannot link neurons)."""
    neurons = [b for b, _ in mu]
    if len(set(neurons)) != 2:
        return sp.S.Zero
    out = sp.S.Zero
    for p, q, r, s in ((0, 1, 2, 3), (0, 2, 1, 3), (0, 3, 1, 2)):
        if neurons[p] == neurons[q] and neurons[r] == neurons[s]:
            out += FourPointVertex(mu[p][1], mu[q][1], mu[r][1], mu[s][1], ell)
    return out / N_PREV


def _kappa6_linked(mu) -> sp.Expr:
    r"""Six-point cumulant :math:`\frac1{n_{\ell-1}^2}[\delta\delta\delta U_6+14]` of layer :math:`\ell`
    with each of three distinct neurons in one pair."""
    neurons = [b for b, _ in mu]
    if len(set(neurons)) != 3:
        return sp.S.Zero
    out = sp.S.Zero
    for pairing in enumerate_pairings(list(range(6))):
        if all(neurons[a] == neurons[b] for a, b in pairing):
            idx = [mu[k][1] for pair in pairing for k in pair]
            out += SixPointVertex(*idx, ell)
    return out / N_PREV ** 2


def _linked_three(blocks: list, form: str = "edgeworth") -> sp.Expr:
    r"""Joint cumulant of :math:`F_0(z_j),F_1(z_k),F_2(z_l)`, distinct neurons, at :math:`O(1/n^2)`."""
    out = sp.S.Zero
    for key, k in _cross_slots(blocks, 6, _kappa6_linked).items():
        out += _C6 * k * sp.Mul(*[_atom(F, lab, form) for F, lab in zip(blocks, key)])
    # second order of exp(Σ κ4 ∂^4/4!): (1/2)(D4)^2, the two factors linking different neuron pairs
    d4 = _cross_slots(blocks, 4, _kappa4_cross)
    c4 = edgeworth_coefficient(4)
    for (k1, v1), (k2, v2) in itertools.product(d4.items(), repeat=2):
        touched1 = {b for b, lab in enumerate(k1) if lab}
        touched2 = {b for b, lab in enumerate(k2) if lab}
        if touched1 == touched2 or len(touched1 | touched2) != 3:
            continue        # a chain j-k-l links all three neurons; anything else is disconnected
        labs = [tuple(sorted(a + b, key=sp.default_sort_key)) for a, b in zip(k1, k2)]
        out += sp.Rational(1, 2) * c4 ** 2 * v1 * v2 * sp.Mul(*[_atom(F, lab, form) for F, lab in zip(blocks, labs)])
    return sp.expand(out)


def _two_neuron_hermite(blocks: list) -> sp.Expr:
    r"""Two distinct neurons to :math:`O(1/n)` in the Hermite form (the cross-neuron four-point term
    of :func:`~effth.pdlt.derivation.pipeline.layer_expectation`; single-neuron shifts cancel in the
    cumulant and are left out)."""
    gauss = sp.Mul(*[GaussianExpectation(F, KMAT) for F in blocks])
    out = gauss
    if len(blocks) == 2:
        for key, k in _cross_slots(blocks, 4, _kappa4_cross).items():
            out += edgeworth_coefficient(4) * k * sp.Mul(*[_atom(F, lab, "hermite") for F, lab in zip(blocks, key)])
    return out


@public
def linked_cumulant(variables, order: int | None = None, form: str = "edgeworth") -> sp.Expr:
    r"""Joint cumulant :math:`\kappa(X_1,\ldots,X_m)` of functions of layer-:math:`\ell` neurons, at leading order.

    Parameters
    ----------
    variables : sequence of ``(neuron, F)``
        ``F`` a product of :func:`~effth.algebra.expectation.sigma` factors of neuron ``neuron``
        (an integer identity: equal identities are the same neuron, distinct ones distinct).
    order : int, optional
        Checked against the leading order :math:`d-1` for :math:`d` distinct neurons (PDLT §4.1:
        each link between neurons costs :math:`1/n`).

    Returns
    -------
    sympy expression
        One neuron: the Gaussian cumulant (:math:`O(1)`); two: the moment–cumulant formula with
        :func:`~effth.pdlt.derivation.pipeline.layer_expectation` at :math:`O(1/n)`, truncated;
        three (single variables per neuron): the linked :math:`O(1/n^2)` Edgeworth terms.
    """
    variables = list(variables)
    neurons = sorted({b for b, _ in variables})
    d = len(neurons)
    if order is not None and order != d - 1:
        raise ValueError(f"the joint cumulant over {d} distinct neurons starts at order {d - 1}, got {order}")
    if d == 3:
        if len(variables) != 3:
            raise NotImplementedError("three neurons are derived for one function per neuron only")
        by = {b: F for b, F in variables}
        return _linked_three([by[b] for b in neurons], form)
    if d > 3:
        raise NotImplementedError("linked cumulants over more than three neurons are not derived")
    poly = moments_to_cumulants(tuple(range(len(variables))))

    def moment(labels):
        blocks = []
        for b in neurons:
            fs = [variables[i][1] for i in labels if variables[i][0] == b]
            if fs:
                blocks.append(sp.Mul(*fs))
        if form == "hermite" and d == 2:
            return _two_neuron_hermite(blocks)
        return layer_expectation(blocks, d - 1)

    out = poly.replace(lambda e: isinstance(e, Moment), lambda e: moment(e.labels))
    out = truncate(sp.expand(out), d - 1)
    return order_coefficient(out, d - 1) if d > 1 else sp.expand(out)


@lru_cache(maxsize=None)
def six_point_cumulant(samples: tuple, form: str = "edgeworth") -> sp.Expr:
    r"""The connected six-point function of layer :math:`\ell+1` on neurons :math:`(1,1,2,2,3,3)`, at :math:`O(1/n^2)`.

    Steps 1–4 of the module docstring; ``samples`` are the six sample labels.  The widths are kept
    (:math:`n_\ell`, :math:`n_{\ell-1}`).
    """
    neurons = {k: sp.Integer(n) for k, n in enumerate((1, 1, 2, 2, 3, 3))}
    total = sp.S.Zero
    for pairing in enumerate_pairings(list(range(6))):
        delta = collapse_neurons(pairing, (), neurons)
        if delta == 0:
            continue
        # κ(Ĝ_p1, Ĝ_p2, Ĝ_p3), Ĝ = C_b + (C_W/n_ℓ) Σ_j σ_j σ_j: multilinear, C_b drops out
        funcs = [sigma(samples[a]) * sigma(samples[b]) for a, b in pairing]
        for part in set_partitions([0, 1, 2]):
            count = sp.Mul(*[N_L - k for k in range(len(part))])
            var = [(nb, funcs[i]) for nb, blk in enumerate(part) for i in blk]
            total += delta * (CW / N_L) ** 3 * count * linked_cumulant(var, len(part) - 1, form)
    return truncate(total, 2)


@public
def derive_six_point_vertex(single_input: bool = False, form: str = "edgeworth") -> tuple:
    r""":math:`U^{(\ell+1)}_{6\,(\alpha_1\alpha_2)(\alpha_3\alpha_4)(\alpha_5\alpha_6)}` as ``(expr, labels)``.

    ``expr`` holds :math:`C_W^{(\ell+1)}`, :data:`~effth.pdlt.derivation.pipeline.RATIO`
    :math:`=n_\ell/n_{\ell-1}`, layer-:math:`\ell` tensors (:class:`~effth.algebra.tensors.FourPointVertex`,
    :class:`~effth.algebra.tensors.SixPointVertex`) and derivative atoms over :math:`K^{(\ell)}`.
    With ``single_input`` all six labels are :math:`\alpha_1`.
    """
    a = tuple(alpha(k) for k in range(1, 7))
    if single_input:
        a = (a[0],) * 6
    if form not in ("edgeworth", "hermite"):
        raise ValueError(f"form must be 'edgeworth' or 'hermite', got {form!r}")
    if form == "hermite" and not single_input:
        raise ValueError("form='hermite' is derived for a single input only (single_input=True)")
    kappa = six_point_cumulant(a, form)
    if order_coefficient(kappa, 0) != 0 or order_coefficient(kappa, 1) != 0:
        raise AssertionError("the linked six-point function has a part below O(1/n^2)")
    e = sp.expand(N_L ** 2 * order_coefficient(kappa, 2)).subs(N_L, RATIO * N_PREV)
    e = sp.expand(e)
    if e.has(N_L) or e.has(N_PREV):
        raise AssertionError(f"U6: widths do not cancel into n_l/n_(l-1): {e}")
    return e, (a if not single_input else (a[0],))


@lru_cache(maxsize=None)
def _single_input_step():
    from effth.codegen import compile_step
    from effth.pdlt.derivation.pipeline import CW as _CW

    expr, (a,) = derive_six_point_vertex(True, "hermite")
    expr = expr.xreplace({a: sp.Integer(0)})
    return lambda act: compile_step({"out": [expr]}, {KMAT: "K", FourPointVertex: "V", SixPointVertex: "U6"},
                                    activation=act, params={"C_W": _CW, "ratio": RATIO})


def _positive(x, name):
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a real number, got {type(x).__name__}") from None
    if not v > 0 or v != v or v == float("inf"):
        raise ValueError(f"{name} must be finite and > 0, got {x!r}")
    return v


@public
def six_point_flow(K1, depth: int, activation, c_w=1.0, c_b=0.0, ratios=1.0) -> dict:
    r"""Single-input flow of :math:`K`, :math:`V` and the six-point vertex :math:`U_6` from layer 1.

    Iterates the derived recursion (:func:`derive_six_point_vertex`, PDLT epilogue (ε.20) for ReLU)
    together with the derived :math:`K` (4.118) and :math:`V` (4.119), from the Gaussian first
    layer :math:`V^{(1)}=U_6^{(1)}=0`.  The measured connected six-point function of
    layer :math:`\ell` is :math:`U_6^{(\ell)}/n_{\ell-1}^2` per pairing of equal neurons.

    Parameters
    ----------
    K1 : float
        :math:`K^{(1)}>0` of the one input.
    depth : int
        Last layer :math:`L\ge1`.
    activation : str or Activation
    c_w, c_b, ratios : float
        :math:`C_W>0`, :math:`C_b\ge0` of every layer :math:`\ge2`; :math:`n_\ell/n_{\ell-1}>0`.

    Returns
    -------
    dict
        ``{"K": [...], "V": [...], "U6": [...]}`` floats indexed by ``layer - 1``.

    Examples
    --------
    >>> fl = six_point_flow(1.0, 3, "relu", c_w=2.0)
    >>> [round(u, 6) for u in fl["U6"]]          # 75 l^2 - 181 l + 106 at criticality
    [0.0, 44.0, 238.0]
    """
    import numpy as np

    from effth.pdlt.initialization.recursions import initialization_flow

    K1 = _positive(K1, "K1")
    if isinstance(depth, bool) or not isinstance(depth, (int, np.integer)) or depth < 1:
        raise ValueError(f"depth must be an int >= 1, got {depth!r}")
    cw = _positive(c_w, "c_w")
    try:
        cb = float(c_b)
    except (TypeError, ValueError):
        raise TypeError(f"c_b must be a real number, got {type(c_b).__name__}") from None
    if not cb >= 0 or cb == float("inf"):
        raise ValueError(f"c_b must be finite and >= 0, got {c_b!r}")
    rho = _positive(ratios, "ratios")
    base = initialization_flow(np.array([[K1]]), depth, activation, c_w=cw, c_b=cb, ratios=rho)
    step = _single_input_step()(activation)
    U6 = [0.0]
    for layer in range(1, depth):
        K, V = base["K"][layer - 1], base["V"][layer - 1]
        u = np.full((1,) * 6, U6[-1])
        U6.append(float(np.asarray(step(K=K, V=V, U6=u, C_W=cw, ratio=rho)["out"]).reshape(-1)[0]))
    return {"K": [float(k[0, 0]) for k in base["K"]], "V": [float(v.reshape(-1)[0]) for v in base["V"]],
            "U6": U6}
