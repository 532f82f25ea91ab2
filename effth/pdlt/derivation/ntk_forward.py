r"""Stochastic forward equations of the NTK hierarchy as data (PDLT (8.12), (11.24), (∞.169), (∞.170)).

Each layer-:math:`(\ell+1)` object is a sum of :class:`Term` s.  A term is a product of

* a coefficient (:math:`\lambda_b^{(\ell+1)}`, :math:`\lambda_W^{(\ell+1)}`, numbers),
* explicit factors :math:`1/n_\ell` (``n_inv``) and output-neuron deltas
  :math:`\delta_{i_ai_b}` (``deltas``),
* weights :math:`W^{(\ell+1)}_{i\,j}` and biases :math:`b^{(\ell+1)}_i`,
* layer-:math:`\ell` factors: activations :math:`\sigma^{(p)}(z^{(\ell)}_{j;\delta})`
  (:class:`Site`) and stochastic tensors :math:`\hat H`, :math:`\widehat{dH}`,
  :math:`\widehat{dd_IH}`, :math:`\widehat{dd_{II}H}` of layer :math:`\ell` (:class:`Obj`),

with every input-neuron variable :math:`j` summed over :math:`1..n_\ell`.  A variable named
``"@<i>"`` is not summed: it is the layer-:math:`\ell` neuron with the index of output neuron
``i`` (the skip term of a residual MLP, PDLT (B.4), where :math:`n_{\ell+1}=n_\ell`), and a
:class:`Site` of ``order`` :math:`-1` is the preactivation :math:`z^{(\ell)}` itself.  The same data drive
the symbolic derivation (:mod:`effth.pdlt.derivation.ntk_pipeline`) and a numeric evaluation on concrete weights
(:func:`forward_numeric`), which the tests compare with the exact derivatives of
:mod:`effth.simulation.ntk` — so the equations typed here are checked, not trusted.

The ddNTK equations were re-derived from the definitions (∞.5), (∞.7):
:math:`\widehat{dd_{II}H}_{1234}=\langle\nabla(Dz_1[v_3]),\lambda\nabla(Dz_2[v_4])\rangle` with
:math:`v_k=\lambda\nabla z_k` held fixed, split into the :math:`W^{(\ell+1)}` block and the
layer-:math:`\le\ell` block; this reproduces (∞.170) term by term, and (∞.169) likewise.
"""

from __future__ import annotations

from effth._signature import public

from dataclasses import dataclass

import numpy as np
import sympy as sp

from effth.algebra.indices import ell, lambda_b, lambda_w, residual_gamma, residual_xi

__all__ = ["Site", "Obj", "Term", "forward_terms", "LAMBDA_B", "LAMBDA_W", "KINDS", "forward_numeric",
           "skip_var", "RESIDUAL_KINDS"]

LAMBDA_B = lambda_b(ell + 1)
LAMBDA_W = lambda_w(ell + 1)
XI = residual_xi(ell + 1)
GAMMA = residual_gamma(ell + 1)

#: Objects whose residual forward equation is written (PDLT (B.4) differentiated once).
RESIDUAL_KINDS = ("z", "H")


def skip_var(neuron) -> str:
    r"""The unsummed layer-:math:`\ell` variable of the skip term of output neuron ``neuron``."""
    return f"@{neuron}"

#: object kind -> number of neuron (and sample) slots
KINDS = {"z": 1, "H": 2, "dH": 3, "ddI": 4, "ddII": 4}


@public
@dataclass(frozen=True)
class Site:
    r""":math:`\sigma^{(p)}(z^{(\ell)}_{j;\delta})` with ``var`` = j, ``order`` = p, ``sample`` = δ."""

    var: str
    order: int
    sample: object


@public
@dataclass(frozen=True)
class Obj:
    r"""A layer-:math:`\ell` stochastic tensor: ``kind`` in ``H, dH, ddI, ddII``, neuron variables, samples."""

    kind: str
    vars: tuple
    samples: tuple


@public
@dataclass(frozen=True)
class Term:
    """One term of a forward equation (see the module docstring)."""

    coef: sp.Expr
    n_inv: int = 0
    deltas: tuple = ()
    weights: tuple = ()     # (output neuron, input variable)
    biases: tuple = ()      # output neurons
    sites: tuple = ()
    objs: tuple = ()

    def renamed(self, prefix: str) -> "Term":
        """The same term with every input variable prefixed (to combine legs)."""
        r = lambda v: v if v.startswith("@") else f"{prefix}{v}"  # noqa: E731
        return Term(self.coef, self.n_inv, self.deltas,
                    tuple((o, r(v)) for o, v in self.weights), self.biases,
                    tuple(Site(r(s.var), s.order, s.sample) for s in self.sites),
                    tuple(Obj(o.kind, tuple(map(r, o.vars)), o.samples) for o in self.objs))


def _H(a, b, x, y):
    return Obj("H", (a, b), (x, y))


def _dH(a, b, c, x, y, w):
    return Obj("dH", (a, b, c), (x, y, w))


def _residual_terms(kind: str, outs: tuple, samples: tuple) -> list[Term]:
    r"""PDLT (B.4) and its derivative: :math:`z_i=\xi[b_i+W_{ij}\sigma_j]+\gamma z_i`, and

    .. math:: \hat H^{(\ell+1)}_{i_1i_2}=\xi^2\Big[\lambda_b\delta_{i_1i_2}+\frac{\lambda_W}{n_\ell}
              \delta_{i_1i_2}\sigma_j\sigma_j\Big]+\sum_{j_1j_2}(\xi W_{i_1j_1}\sigma'_{j_1}
              +\gamma\delta_{i_1j_1})(\xi W_{i_2j_2}\sigma'_{j_2}+\gamma\delta_{i_2j_2})
              \hat H^{(\ell)}_{j_1j_2},

    since :math:`\partial z^{(\ell+1)}_i/\partial\theta^{(\ell+1)}` carries :math:`\xi` and
    :math:`\partial z^{(\ell+1)}_i/\partial z^{(\ell)}_j=\xi W_{ij}\sigma'_j+\gamma\delta_{ij}`."""
    S = Site
    if kind == "z":
        (i,), (d,) = outs, samples
        return [Term(XI, biases=(i,)), Term(XI, weights=((i, "j"),), sites=(S("j", 0, d),)),
                Term(GAMMA, sites=(S(skip_var(i), -1, d),))]
    if kind == "H":
        (i1, i2), (d1, d2) = outs, samples
        s1, s2 = skip_var(i1), skip_var(i2)
        x2 = XI ** 2
        return [Term(x2 * LAMBDA_B, deltas=((i1, i2),)),
                Term(x2 * LAMBDA_W, 1, ((i1, i2),), sites=(S("j", 0, d1), S("j", 0, d2))),
                Term(x2, weights=((i1, "j1"), (i2, "j2")), sites=(S("j1", 1, d1), S("j2", 1, d2)),
                     objs=(_H("j1", "j2", d1, d2),)),
                Term(GAMMA * XI, weights=((i1, "j1"),), sites=(S("j1", 1, d1),),
                     objs=(_H("j1", s2, d1, d2),)),
                Term(GAMMA * XI, weights=((i2, "j2"),), sites=(S("j2", 1, d2),),
                     objs=(_H(s1, "j2", d1, d2),)),
                Term(GAMMA ** 2, objs=(_H(s1, s2, d1, d2),))]
    raise ValueError(f"the residual forward equation of {kind!r} is not written; "
                     f"residual kinds: {RESIDUAL_KINDS}")


@public
def forward_terms(kind: str, outs: tuple, samples: tuple, residual: bool = False) -> list[Term]:
    r"""The forward equation of a layer-:math:`(\ell+1)` object with output neurons ``outs``.

    ``kind``: ``"z"`` (PDLT (2.5)), ``"H"`` (8.12), ``"dH"`` (11.24), ``"ddI"`` (∞.169),
    ``"ddII"`` (∞.170).  With ``residual=True``: the residual MLP (PDLT (B.4)) for ``"z"`` and
    ``"H"``, with the gains :math:`\xi^{(\ell+1)}`, :math:`\gamma^{(\ell+1)}` and skip variables
    (:func:`skip_var`).
    """
    if residual:
        return _residual_terms(kind, outs, samples)
    S = Site
    one = sp.S.One
    if kind == "z":
        (i,), (d,) = outs, samples
        return [Term(one, biases=(i,)), Term(one, weights=((i, "j"),), sites=(S("j", 0, d),))]
    if kind == "H":
        (i1, i2), (d1, d2) = outs, samples
        return [Term(LAMBDA_B, deltas=((i1, i2),)),
                Term(LAMBDA_W, 1, ((i1, i2),), sites=(S("j", 0, d1), S("j", 0, d2))),
                Term(one, weights=((i1, "j1"), (i2, "j2")), sites=(S("j1", 1, d1), S("j2", 1, d2)),
                     objs=(_H("j1", "j2", d1, d2),))]
    if kind == "dH":
        (i0, i1, i2), (d0, d1, d2) = outs, samples
        W3 = ((i0, "k0"), (i1, "k1"), (i2, "k2"))
        return [Term(one, weights=W3, sites=(S("k0", 1, d0), S("k1", 1, d1), S("k2", 1, d2)),
                     objs=(_dH("k0", "k1", "k2", d0, d1, d2),)),
                Term(one, weights=W3, sites=(S("k0", 2, d0), S("k1", 1, d1), S("k2", 1, d2)),
                     objs=(_H("k0", "k1", d0, d1), _H("k0", "k2", d0, d2))),
                Term(LAMBDA_W, 1, ((i0, i1),), ((i2, "k2"),),
                     sites=(S("k0", 1, d0), S("k0", 0, d1), S("k2", 1, d2)), objs=(_H("k0", "k2", d0, d2),)),
                Term(LAMBDA_W, 1, ((i0, i2),), ((i1, "k1"),),
                     sites=(S("k0", 1, d0), S("k1", 1, d1), S("k0", 0, d2)), objs=(_H("k0", "k1", d0, d1),))]
    if kind == "ddI":
        i, d = outs, samples
        terms = []
        for a, b, c in ((1, 2, 3), (2, 3, 1), (3, 1, 2)):     # the W^{(l+1)} derivative along v_a
            base = dict(n_inv=1, deltas=((i[0], i[a]),), weights=((i[b], f"j{b}"), (i[c], f"j{c}")))
            common = (S("j0", 0, d[a]), S(f"j{b}", 1, d[b]), S(f"j{c}", 1, d[c]))
            terms.append(Term(LAMBDA_W, **base, sites=common + (S("j0", 2, d[0]),),
                              objs=(_H("j0", f"j{b}", d[0], d[b]), _H("j0", f"j{c}", d[0], d[c]))))
            terms.append(Term(LAMBDA_W, **base, sites=common + (S("j0", 1, d[0]),),
                              objs=(_dH("j0", f"j{b}", f"j{c}", d[0], d[b], d[c]),)))
        W4 = tuple((i[k], f"j{k}") for k in range(4))
        rest = tuple(S(f"j{k}", 1, d[k]) for k in (1, 2, 3))
        terms.append(Term(one, weights=W4, sites=rest + (S("j0", 1, d[0]),),
                          objs=(Obj("ddI", ("j0", "j1", "j2", "j3"), tuple(d)),)))
        for p, q, r in ((1, 2, 3), (2, 3, 1), (3, 1, 2)):
            terms.append(Term(one, weights=W4, sites=rest + (S("j0", 2, d[0]),),
                              objs=(_dH("j0", f"j{p}", f"j{q}", d[0], d[p], d[q]), _H("j0", f"j{r}", d[0], d[r]))))
        terms.append(Term(one, weights=W4, sites=rest + (S("j0", 3, d[0]),),
                          objs=tuple(_H("j0", f"j{k}", d[0], d[k]) for k in (1, 2, 3))))
        return terms
    if kind == "ddII":
        (i1, i2, i3, i4), (d1, d2, d3, d4) = outs, samples
        t = [Term(LAMBDA_W ** 2, 2, ((i1, i3), (i2, i4)),
                  sites=(S("j", 1, d1), S("k", 1, d2), S("j", 0, d3), S("k", 0, d4)),
                  objs=(_H("j", "k", d1, d2),)),
             Term(LAMBDA_W, 1, ((i1, i2),), ((i3, "j3"), (i4, "j4")),
                  sites=(S("j1", 1, d1), S("j1", 1, d2), S("j3", 1, d3), S("j4", 1, d4)),
                  objs=(_H("j1", "j3", d1, d3), _H("j1", "j4", d2, d4)))]
        # <X1, Y2 + Z2> and <Y1 + Z1, X2>
        for (ia, ib), (ic, id_), da, db, dc, dd in (((i1, i3), (i2, i4), d1, d3, d2, d4),
                                                   ((i2, i4), (i1, i3), d2, d4, d1, d3)):
            base = dict(n_inv=1, deltas=((ia, ib),), weights=((ic, "jc"), (id_, "jd")))
            common = (S("ja", 1, da), S("ja", 0, db), S("jd", 1, dd))
            t.append(Term(LAMBDA_W, **base, sites=common + (S("jc", 2, dc),),
                          objs=(_H("jc", "ja", dc, da), _H("jc", "jd", dc, dd))))
            t.append(Term(LAMBDA_W, **base, sites=common + (S("jc", 1, dc),),
                          objs=(_dH("jc", "ja", "jd", dc, da, dd),)))
        W4 = ((i1, "j1"), (i2, "j2"), (i3, "j3"), (i4, "j4"))
        s34 = (S("j3", 1, d3), S("j4", 1, d4))
        t += [Term(one, weights=W4, sites=s34 + (S("j1", 1, d1), S("j2", 1, d2)),
                   objs=(Obj("ddII", ("j1", "j2", "j3", "j4"), (d1, d2, d3, d4)),)),
              Term(one, weights=W4, sites=s34 + (S("j1", 2, d1), S("j2", 2, d2)),
                   objs=(_H("j1", "j2", d1, d2), _H("j1", "j3", d1, d3), _H("j2", "j4", d2, d4))),
              Term(one, weights=W4, sites=s34 + (S("j1", 1, d1), S("j2", 2, d2)),
                   objs=(_H("j2", "j4", d2, d4), _dH("j1", "j2", "j3", d1, d2, d3))),
              Term(one, weights=W4, sites=s34 + (S("j2", 1, d2), S("j1", 2, d1)),
                   objs=(_H("j1", "j3", d1, d3), _dH("j2", "j1", "j4", d2, d1, d4)))]
        return t
    raise ValueError(f"unknown kind {kind!r}")


# ------------------------------------------------------------------------------ numeric check
@public
def forward_numeric(kind: str, W: np.ndarray, z: np.ndarray, prev: dict, derivs, lam_b: float,
                    lam_w: float, *, xi: float | None = None, gamma: float | None = None) -> np.ndarray:
    r"""Evaluate a forward equation on one concrete network layer (for tests).

    Parameters
    ----------
    kind : {"H", "dH", "ddI", "ddII"}
    W : ndarray (n_out, n)
        :math:`W^{(\ell+1)}`.
    z : ndarray (n, N)
        :math:`z^{(\ell)}_{j;\delta}`.
    prev : dict
        Layer-:math:`\ell` tensors ``{"H": (n, n, N, N), "dH": (n,)*3+(N,)*3, "ddI": ..., "ddII": ...}``
        (neuron axes first, then sample axes, in the slot order of the objects).
    derivs : sequence of callables
        :math:`\sigma, \sigma', \sigma'', \sigma'''`.
    lam_b, lam_w : float
        :math:`\lambda_b^{(\ell+1)}`, :math:`\lambda_W^{(\ell+1)}`.
    xi, gamma : float, optional
        Given either: the residual forward equation (PDLT (B.4), ``kind`` in ``z, H``; ``W``
        square), with :math:`\xi^{(\ell+1)}` (default 1) and :math:`\gamma^{(\ell+1)}` (default 0).

    Returns
    -------
    ndarray
        The layer-:math:`(\ell+1)` tensor, neuron axes first then sample axes.
    """
    m, n = W.shape
    N = z.shape[1]
    k = KINDS[kind]
    residual = xi is not None or gamma is not None
    if residual and m != n:
        raise ValueError("a skip connection needs n_(l+1) = n_l (PDLT (B.4))")
    sig = [f(z) for f in derivs]
    out = np.zeros((m,) * k + (N,) * k)
    outs = tuple(sp.Symbol(f"i{a}") for a in range(k))
    samples = tuple(sp.Symbol(f"d{a}") for a in range(k))
    gains = {XI: 1.0 if xi is None else xi, GAMMA: 0.0 if gamma is None else gamma}
    for term in forward_terms(kind, outs, samples, residual=residual):
        coef = float(term.coef.subs({LAMBDA_B: lam_b, LAMBDA_W: lam_w, **gains})) / n ** term.n_inv
        vars_ = sorted({v for _, v in term.weights} | {s.var for s in term.sites}
                       | {v for o in term.objs for v in o.vars})
        # one einsum per term: output neurons, samples and input variables are letters; an
        # output-neuron delta is an identity operand (every output neuron sits on a weight or a
        # delta); a skip variable takes its output neuron's letter
        letters = iter("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
        L = {x: next(letters) for x in (*outs, *samples) + tuple(v for v in vars_ if not v.startswith("@"))}
        L.update({skip_var(o): L[o] for o in outs})
        ops, specs = [], []
        for o, v in term.weights:
            ops.append(W)
            specs.append(L[o] + L[v])
        for a, b in term.deltas:
            ops.append(np.eye(m))
            specs.append(L[a] + L[b])
        for st in term.sites:
            ops.append(z if st.order < 0 else sig[st.order])
            specs.append(L[st.var] + L[st.sample])
        for ob in term.objs:
            ops.append(prev[ob.kind])
            specs.append("".join(L[v] for v in ob.vars) + "".join(L[x] for x in ob.samples))
        for x in samples:                      # samples no factor depends on broadcast
            if not any(L[x] in sp_ for sp_ in specs):
                ops.append(np.ones(N))
                specs.append(L[x])
        out += coef * np.einsum(",".join(specs) + "->" + "".join(L[x] for x in (*outs, *samples)), *ops)
    return out
