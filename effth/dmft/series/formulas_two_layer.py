r"""The :math:`\gamma_0`-series of a two-layer network (one hidden layer, any smooth activation) as
printed formulas: Gaussian atoms over the lazy process times functions of time built from the
lazy error, at every order through the requested one.

The single-site process of one hidden layer on the gradient-descent grid :math:`t_i=i\eta`
(Bordelon & Pehlevan (2022), eqs. (23), (33), (66)-(67), §3.2) is

.. math::
   h_\mu(t_i)=u_\mu+\gamma_0\eta\sum_{j<i}\sum_\alpha K^x_{\mu\alpha}\Delta_\alpha(t_j)\,
   \phi'(h_\alpha(t_j))\,z(t_j),\qquad
   z(t_i)=r+\gamma_0\eta\sum_{j<i}\sum_\alpha\Delta_\alpha(t_j)\,\phi(h_\alpha(t_j)),

with the lazy process :math:`u\sim\mathcal N(0,K^x)`, :math:`r\sim\mathcal N(0,1)` independent,
:math:`f_\mu=\gamma_0^{-1}\langle z\,\phi(h_\mu)\rangle` (the exact closure), :math:`\Delta=y-f`,
:math:`\Phi=\langle\phi(h)\phi(h)^\top\rangle`, :math:`G=\langle g\,g^\top\rangle` with
:math:`g=\phi'(h)z`, and the NTK :math:`K=\Phi+G\odot K^x` (equal times).  Expanding
:math:`h=u+\sum_n\gamma_0^nh^{(n)}`, :math:`z=r+\sum_n\gamma_0^nz^{(n)}`,
:math:`\Delta=\sum_p\gamma_0^p\Delta_p` and :math:`\phi^{(m)}(u+\delta)=\sum_k\phi^{(m+k)}(u)\delta^k/k!`
(Bordelon & Pehlevan (2022), §5.2, App. P.1-P.4), every field coefficient is a sum of *trees*: a
node carries a sample label :math:`\alpha` (summed over the training points), one factor
:math:`\phi^{(d)}(u_\alpha)` and one factor :math:`\eta\sum_{j<i}\Delta_{p,\alpha}(t_j)`; its
children are the field coefficients it was Taylor-expanded in (an :math:`h`-child :math:`\beta`
brings :math:`K^x_{\alpha\beta}`) and, for an :math:`h`-node, either the :math:`z`-child or the
lazy :math:`r`.  A kernel or prediction coefficient is then a sum of products of trees whose
average factorises into

* a rational coefficient times the Gaussian moment :math:`\langle r^m\rangle=(m-1)!!`,
* :math:`K^x` factors along the tree edges,
* one Gaussian atom :math:`\langle\prod_{\text{nodes}}\phi^{(d)}(u_{\text{label}})\rangle` over
  :math:`u\sim\mathcal N(0,K^x)`,
* a product of time functions :math:`w_k` of the lazy error (and, from :math:`\gamma_0^3` of the
  fields on, of :math:`\Delta_2,\Delta_4,\dots`, themselves printed), each defined by the iterated
  sum of its tree: :math:`w_{k,\alpha\beta\dots}(t_i)=\eta\sum_{j<i}\Delta_{p,\alpha}(t_j)\prod_c
  w_{c,\dots}(t_j)`; :math:`w_{1,\alpha}=v_\alpha` is the lazy :math:`\eta\sum_{j<i}\Delta_{0,\alpha}(t_j)`.

:func:`two_layer_formulas` builds the coefficients of :math:`\Phi,G,K` (equal time),
:math:`f,\Delta` and the loss :math:`\tfrac12\|\Delta\|^2` through :math:`\gamma_0^{\mathrm{order}}`;
:class:`TwoLayerSeriesFormulas` prints them (:meth:`~TwoLayerSeriesFormulas.latex`,
:meth:`~TwoLayerSeriesFormulas.text`, every symbol defined) and evaluates the printed terms
(:meth:`~TwoLayerSeriesFormulas.evaluate`): the atoms on an independent product trapezoid rule in
the eigen-coordinates of :math:`K^x`, the :math:`r`-moments exactly, the time functions from their
printed definitions.  It reproduces the numeric engine
(:func:`effth.dmft.series.two_layer.two_layer_series_arrays`, truncated power-series arithmetic at
the points of a tensor rule) to round-off; at :math:`\gamma_0^2` the terms are those of
:func:`effth.dmft.series.leading.two_layer_order2_exprs`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from fractions import Fraction
from math import factorial

import numpy as np
import sympy as sp

from effth._signature import public
from effth.errors import DomainError
from effth.printing import latex as _latex
from effth.printing.formula import LINE_WIDTH

__all__ = ["TwoLayerSeriesFormulas", "two_layer_formulas"]

# A node is (kind, p, hch, zc): kind 'h' (a coefficient of h, factor phi^(1+len(hch)), edge
# K^x_(parent, node)) or 'z' (a coefficient of z, factor phi^(len(hch))); p the order of the error
# Delta_p in its time sum; hch the sorted tuple of its h-children; zc its z-child, 'r' (the lazy
# r) or None (z-nodes).  A root is (d, hch, zc): the factor phi^(d + len(hch)) at the output label
# mu (or nu), evaluated at time t (no time sum).
_R = "r"


def _key(x):
    if x is None:
        return (0,)
    if x == _R:
        return (1,)
    kind, p, hch, zc = x
    return (2, _order(x), kind, p, tuple(_key(c) for c in hch), _key(zc))


def _order(x) -> int:
    if x is None or x == _R:
        return 0
    kind, p, hch, zc = x
    return 1 + p + sum(_order(c) for c in hch) + _order(zc)


def _compositions(total: int, k: int):
    """Ordered ``k``-tuples of positive integers summing to ``total``."""
    if k == 1:
        if total >= 1:
            yield (total,)
        return
    for a in range(1, total - k + 2):
        for rest in _compositions(total - a, k - 1):
            yield (a,) + rest


def _add(acc: dict, key, c) -> None:
    acc[key] = acc.get(key, Fraction(0)) + c


class _Expansion:
    """The field coefficients ``h^(n)``, ``z^(n)`` as trees, ``n <= top``."""

    def __init__(self, top: int):
        self.H: dict = {}
        self.Z: dict = {}
        for n in range(1, top + 1):
            self.H[n], self.Z[n] = {}, {}
            for p in range(0, n, 2):                       # odd orders of Delta vanish
                q = n - 1 - p
                for a in range(q + 1):
                    for c1, hch in self.taylor(a):
                        for c2, zc in self.zser(q - a):
                            _add(self.H[n], ("h", p, hch, zc), c1 * c2)
                for c1, hch in self.taylor(q):
                    _add(self.Z[n], ("z", p, hch, None), c1)

    def taylor(self, q: int) -> list:
        r"""The order-``q`` coefficient of :math:`\phi^{(m)}(u+\delta h)` as ``(coef, h-children)``
        (the :math:`\phi^{(m+k)}/k!` Taylor sum over ordered compositions, merged)."""
        if q == 0:
            return [(Fraction(1), ())]
        out: dict = {}
        for k in range(1, q + 1):
            for cp in _compositions(q, k):
                for combo in itertools.product(*[self.H[a].items() for a in cp]):
                    c = Fraction(1, factorial(k))
                    for _, cc in combo:
                        c *= cc
                    _add(out, tuple(sorted((nd for nd, _ in combo), key=_key)), c)
        return list((c, h) for h, c in out.items())

    def zser(self, b: int) -> list:
        return [(Fraction(1), _R)] if b == 0 else [(c, nd) for nd, c in self.Z[b].items()]

    def roots(self, q: int, d: int, with_z: bool) -> list:
        """The order-``q`` coefficient of ``phi^(d)(h_mu)`` (``with_z``: times ``z``)."""
        if not with_z:
            return [(c, (d, h, None)) for c, h in self.taylor(q)]
        return [(c1 * c2, (d, h, zc)) for a in range(q + 1) for c1, h in self.taylor(a)
                for c2, zc in self.zser(q - a)]


def _rcount(x) -> int:
    if x is None:
        return 0
    if x == _R:
        return 1
    if len(x) == 3:
        return sum(_rcount(c) for c in x[1]) + _rcount(x[2])
    return sum(_rcount(c) for c in x[2]) + _rcount(x[3])


def _rmoment(m: int) -> int:
    """:math:`\\langle r^m\\rangle=(m-1)!!` for even ``m``, 0 for odd ``m``."""
    if m % 2:
        return 0
    out = 1
    for k in range(m - 1, 0, -2):
        out *= k
    return out


def _rootkey(root):
    d, hch, zc = root
    return (d, tuple(_key(c) for c in hch), _key(zc))


def _kernel_terms(ex: _Expansion, n: int, d: int, with_z: bool) -> list:
    """``sum_(a+b=n) <X^[a]_mu X^[b]_nu>`` as ``[(coef, root_mu, root_nu)]`` (r averaged out)."""
    out: dict = {}
    for a in range(n + 1):
        for c1, l in ex.roots(a, d, with_z):
            for c2, r in ex.roots(n - a, d, with_z):
                m = _rmoment(_rcount(l) + _rcount(r))
                if m:
                    _add(out, (l, r), c1 * c2 * m)
    return sorted(((c, l, r) for (l, r), c in out.items()),
                  key=lambda t: (_rootkey(t[1]), _rootkey(t[2])))


def _prediction_terms(ex: _Expansion, n: int) -> list:
    r"""The :math:`\gamma_0^n` coefficient of :math:`f=\gamma_0^{-1}\langle z\phi(h_\mu)\rangle`."""
    out: dict = {}
    for c, root in ex.roots(n + 1, 0, True):
        m = _rmoment(_rcount(root))
        if m:
            _add(out, root, c * m)
    return sorted(((c, root) for root, c in out.items()), key=lambda t: _rootkey(t[1]))


# ---------------------------------------------------------------------- printing helpers
_GREEK = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "kappa", "lambda", "rho", "sigma")
_GREEK_TXT = ("a", "b", "c", "d", "e", "z", "k", "l", "p", "s")


def _tfun(x):
    """The time structure of a node: ``(p, sorted child time structures)`` (h- and z-children)."""
    kids = list(x[2]) + ([x[3]] if x[3] not in (None, _R) else [])
    return (x[1], tuple(sorted((_tfun(c) for c in kids), key=repr)))


def _tkids(x) -> list:
    """A node's children in the order of the labels of its time function."""
    kids = list(x[2]) + ([x[3]] if x[3] not in (None, _R) else [])
    return sorted(kids, key=lambda c: repr(_tfun(c)))


def _deriv_tex(d: int, label: str) -> str:
    base = {0: r"\phi", 1: r"\phi'", 2: r"\phi''", 3: r"\phi'''"}.get(d, rf"\phi^{{({d})}}")
    return f"{base}_{{{label}}}"


def _deriv_txt(d: int, label: str) -> str:
    base = {0: "phi", 1: "phi'", 2: "phi''", 3: "phi'''"}.get(d, f"phi^({d})")
    return f"{base}_{label}"


class _Namer:
    """Numbers the time functions ``w_k`` in order of first use (by weight, then structure)."""

    def __init__(self):
        self.names: dict = {}

    def name(self, tf) -> int:
        for c in tf[1]:
            self.name(c)
        if tf not in self.names:
            self.names[tf] = len(self.names) + 1
        return self.names[tf]


@dataclass
class _Printed:
    """One term laid out: coefficient, sample sums, K factors, atom, time functions."""

    coef: Fraction
    dummies: list
    kfac: list
    atom: list
    wfac: list


def _layout_term(coef, roots, labels, namer) -> _Printed:
    """Assign dummy labels in depth-first order and collect the factors of one term."""
    dummies, kfac, atom, wfac = [], [], [], []
    nxt = iter(range(len(_GREEK)))

    def visit(x, parent):
        lab = next(nxt)
        dummies.append(lab)
        kind, p, hch, zc = x
        if kind == "h":
            kfac.append((parent, lab))
        atom.append(((1 if kind == "h" else 0) + len(hch), lab))
        order = []
        for c in _tkids(x):
            order.append(visit(c, lab))
        return [lab] + [q for sub in order for q in sub]

    for root, out in zip(roots, labels):
        d, hch, zc = root
        atom.append((d + len(hch), out))
        kids = list(hch) + ([zc] if zc not in (None, _R) else [])
        for c in sorted(kids, key=lambda c: repr(_tfun(c))):
            labs = visit(c, out)
            wfac.append((namer.name(_tfun(c)), labs))
    atom.sort(key=lambda a: (0, labels.index(a[1])) if isinstance(a[1], str) else (1, a[1]))
    return _Printed(coef, dummies, kfac, atom, wfac)


def _coef_str(c: Fraction, first: bool, tex: bool) -> str:
    sign = "-" if c < 0 else ("" if first else "+")
    a = abs(c)
    if tex:
        body = "" if a == 1 else _latex(sp.Rational(a.numerator, a.denominator)) + r"\,"
        return sign + body
    return (sign + " " if sign and not first else sign) + ("" if a == 1 else f"{a} ")


def _term_tex(t: _Printed, first: bool, swap: bool) -> str:
    g = lambda lab: "\\" + (lab if isinstance(lab, str) else _GREEK[lab])      # noqa: E731
    parts = []
    if t.dummies:
        parts.append(r"\sum_{" + "".join(g(x) for x in t.dummies) + "}")
    parts += [f"K^{{x}}_{{{g(a)}{g(b)}}}" for a, b in t.kfac]
    parts.append(r"\langle " + "".join(_deriv_tex(d, g(lab)) for d, lab in t.atom) + r"\rangle")
    parts += [f"w_{{{k},{''.join(g(x) for x in labs)}}}(t)" for k, labs in t.wfac]
    body = r"\,".join(parts)
    if swap:
        body = rf"\big[{body}+(\mu\leftrightarrow\nu)\big]"
    return _coef_str(t.coef, first, True) + body


def _term_txt(t: _Printed, first: bool, swap: bool) -> str:
    g = lambda lab: lab if isinstance(lab, str) else _GREEK_TXT[lab]           # noqa: E731
    parts = []
    if t.dummies:
        parts.append("sum_(" + ",".join(g(x) for x in t.dummies) + ")")
    parts += [f"Kx({g(a)},{g(b)})" for a, b in t.kfac]
    parts.append("<" + " ".join(_deriv_txt(d, g(lab)) for d, lab in t.atom) + ">")
    parts += [f"w{k}(" + ",".join(g(x) for x in labs) + "; t)" for k, labs in t.wfac]
    body = " ".join(parts)
    if swap:
        body = f"[{body} + (mu<->nu)]"
    return _coef_str(t.coef, first, False) + body


# ---------------------------------------------------------------------- the formulas
@public
@dataclass
class TwoLayerSeriesFormulas:
    r"""The printed :math:`\gamma_0`-coefficients of a two-layer network (any smooth activation).

    Attributes
    ----------
    order : int
        Highest power of :math:`\gamma_0` (even).
    activation : str
        Name printed in the heading (the formulas hold for any smooth activation).
    kernels : dict
        ``(name, n) -> [(coef, root_mu, root_nu), ...]`` for ``name`` in ``'phi', 'g'`` (the
        :math:`r`-moment included in ``coef``).
    predictions : dict
        ``n -> [(coef, root), ...]``, the coefficient of :math:`\gamma_0^n` of :math:`f_\mu`.
    """

    order: int
    activation: str = r"\phi"
    kernels: dict = field(default_factory=dict, repr=False)
    predictions: dict = field(default_factory=dict, repr=False)
    _memo: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    # ------------------------------------------------------------------ printing
    def _printed(self):
        if "printed" not in self._memo:
            self._memo["printed"] = self._layout_all()
        return self._memo["printed"]

    def _layout_all(self):
        namer = _Namer()
        out = {}
        for n in range(0, self.order + 1, 2):
            out[("f", n)] = [_layout_term(c, (root,), ("mu",), namer)
                             for c, root in self.predictions[n]]
            for name in ("phi", "g"):
                terms = self.kernels[(name, n)]
                seen, rows = set(), []
                index = {(_rootkey(l), _rootkey(r)): c for c, l, r in terms}
                for c, l, r in terms:
                    kl, kr = _rootkey(l), _rootkey(r)
                    if (kl, kr) in seen:
                        continue
                    seen.add((kl, kr))
                    swap = kl != kr and index.get((kr, kl)) == c
                    if swap:
                        seen.add((kr, kl))
                    rows.append((_layout_term(c, (l, r), ("mu", "nu"), namer), swap))
                out[(name, n)] = rows
        return out, namer

    def term_count(self, name: str, n: int) -> int:
        """Number of printed terms of the coefficient of :math:`\\gamma_0^n` of ``name``
        (``'phi'``, ``'g'`` with the :math:`\\mu\\leftrightarrow\\nu` pairs folded, or ``'f'``)."""
        return len(self._printed()[0][(name, n)])

    def _wdefs(self, namer, tex: bool) -> list:
        rows = []
        for tf, k in sorted(namer.names.items(), key=lambda kv: kv[1]):
            p, kids = tf
            labs, pos = [], 1
            for c in kids:
                labs.append((namer.names[c], list(range(pos, pos + _nlabels(c)))))
                pos += _nlabels(c)
            if tex:
                L = lambda i: "\\" + _GREEK[i]                               # noqa: E731
                lhs = f"w_{{{k},{''.join(L(i) for i in [0] + [q for _, ls in labs for q in ls])}}}(t_i)"
                rhs = rf"\eta\textstyle\sum_{{j<i}}\Delta_{{{p},\alpha}}(t_j)" + "".join(
                    rf"\,w_{{{kk},{''.join(L(i) for i in ls)}}}(t_j)" for kk, ls in labs)
                rows.append(f"{lhs}={rhs}")
            else:
                L = lambda i: _GREEK_TXT[i]                                  # noqa: E731
                lhs = f"w{k}(" + ",".join(L(i) for i in [0] + [q for _, ls in labs for q in ls]) + "; t_i)"
                rhs = f"eta sum_(j<i) Delta_{p}(a; t_j)" + "".join(
                    f" w{kk}(" + ",".join(L(i) for i in ls) + "; t_j)" for kk, ls in labs)
                rows.append(f"{lhs} = {rhs}")
        return rows

    def lines(self, tex: bool = True) -> list:
        """Every printed line (LaTeX rows or plain text)."""
        if ("lines", tex) not in self._memo:
            self._memo[("lines", tex)] = self._lines(tex)
        return list(self._memo[("lines", tex)])

    def _lines(self, tex: bool) -> list:
        printed, namer = self._printed()
        out = []
        for n in range(0, self.order + 1, 2):
            out.append(rf"\text{{order }}\gamma_0^{{{n}}}:" if tex else f"order gamma0^{n}:")
            for name, lhs_t, lhs_x in (
                    ("phi", rf"\Phi_{{{n},\mu\nu}}(t)", f"Phi_{n}(mu,nu; t)"),
                    ("g", rf"G_{{{n},\mu\nu}}(t)", f"G_{n}(mu,nu; t)")):
                rows = printed[(name, n)]
                if tex:
                    rhs = "".join(_term_tex(t, i == 0, sw) for i, (t, sw) in enumerate(rows))
                    out.append(f"{lhs_t}={rhs or '0'}")
                else:
                    rhs = " ".join(_term_txt(t, i == 0, sw) for i, (t, sw) in enumerate(rows))
                    out.append(f"{lhs_x} = {rhs or '0'}")
            rows = printed[("f", n)]
            if tex:
                out.append(rf"f_{{{n},\mu}}(t)=" + "".join(_term_tex(t, i == 0, False)
                                                            for i, t in enumerate(rows)))
                out.append(rf"K_{{{n},\mu\nu}}(t)=\Phi_{{{n},\mu\nu}}(t)"
                           rf"+G_{{{n},\mu\nu}}(t)\,K^{{x}}_{{\mu\nu}}"
                           + (rf",\quad \Delta_{{{n}}}=-f_{{{n}}}" if n else r",\quad \Delta_{0}=y-f_{0}")
                           + rf",\quad \mathcal{{L}}_{{{n}}}(t)=\tfrac12\big["
                           + "+".join(rf"\Delta_{{{a}}}(t)\cdot\Delta_{{{n - a}}}(t)"
                                      for a in range(0, n + 1, 2)) + r"\big]")
            else:
                out.append(f"f_{n}(mu; t) = " + " ".join(_term_txt(t, i == 0, False)
                                                         for i, t in enumerate(rows)))
                out.append(f"K_{n}(mu,nu; t) = Phi_{n}(mu,nu; t) + G_{n}(mu,nu; t) Kx(mu,nu),  "
                           + (f"Delta_{n} = -f_{n}" if n else "Delta_0 = y - f_0") + ",  "
                           + f"loss_{n}(t) = 1/2 [" + " + ".join(
                               f"Delta_{a}(t).Delta_{n - a}(t)" for a in range(0, n + 1, 2)) + "]")
        out.append(r"\text{where}" if tex else "where")
        act = "" if self.activation == r"\phi" else self.activation
        if tex:
            out += [
                r"&\text{two-layer network (one hidden layer), exact closure, times }t_i=i\eta,\ "
                r"X_{n}:\ \text{coefficient of }\gamma_0^{n}\ (\text{odd orders vanish})"
                + (rf",\ \phi=\mathrm{{{act}}}" if act else ""),
                r"&\Phi,G:\ \text{feature and gradient kernels at equal times},\ K:\ \text{NTK},\ "
                r"f:\ \text{predictions},\ \Delta:\ \text{error on the training points},\ "
                r"\mathcal{L}=\tfrac12\|\Delta\|^2",
                r"&\mu,\nu:\ \text{any points},\ \alpha,\beta,\gamma,\delta,\epsilon,\zeta,\kappa,"
                r"\lambda,\rho,\sigma:\ \text{training points (summed)},\ K^{x}:\ \text{input kernel},\ "
                r"y:\ \text{targets}",
                r"&\langle F\rangle=\int du\,\mathcal N(u;0,K^{x})\,F(u):\ \text{Gaussian atom of the "
                r"lazy process},\ \phi^{(k)}_{\alpha}=\phi^{(k)}(u_{\alpha}),\ \phi^{(k)}:\ "
                r"\text{derivatives of the activation}",
                r"&\text{the lazy }r\sim\mathcal N(0,1)\ \text{averaged out: coefficients include }"
                r"\langle r^{m}\rangle=(m-1)!!",
                r"&\Delta_{0}(t_{i+1})=(1-\eta K_{0})\Delta_{0}(t_{i}),\ \Delta_{0}(t_{0})=y,\ "
                r"\Delta_{p}(t_{0})=0\ (p>0),\ \text{empty sums }=0",
                r"\text{time functions of the errors }\Delta_{p}\text{ (the first label carries }"
                r"\Delta_{p}\text{, the others their own }w\text{):}",
            ] + self._wdefs(namer, True)
        else:
            out += [
                "two-layer network (one hidden layer), exact closure, times t_i = i eta; X_n: "
                "coefficient of gamma0^n (odd orders vanish)" + (f"; phi = {act}" if act else ""),
                "Phi, G: feature and gradient kernels at equal times, K: NTK, f: predictions, Delta: "
                "error on the training points, loss = 1/2 |Delta|^2",
                "mu, nu: any points; a, b, c, d, e, z, k, l, p, s: training points (summed); Kx: "
                "input kernel; y: targets",
                "<F> = E[F(u)], u ~ N(0, Kx): Gaussian atom of the lazy process; phi^(k)_a = "
                "phi^(k)(u_a), derivatives of the activation",
                "the lazy r ~ N(0, 1) averaged out: coefficients include <r^m> = (m-1)!!",
                "Delta_0(t_(i+1)) = (1 - eta K_0) Delta_0(t_i), Delta_0(t_0) = y, Delta_p(t_0) = 0 "
                "(p > 0), empty sums = 0",
                "time functions of the errors Delta_p (the first label carries Delta_p, the others "
                "their own w):",
            ] + self._wdefs(namer, False)
        return out

    def latex(self, form=None, env: str | None = None, width: float = LINE_WIDTH) -> str:
        r"""LaTeX rows (``align*`` body; ``env`` wraps it), broken at term boundaries.  ``form`` is
        accepted for :func:`~effth.printing.formula.document` and ignored."""
        from effth.dmft.series.formulas import align_rows

        rows = []
        for row in align_rows(self.lines(True), width, None).split(" \\\\\n"):
            rows.extend(_split_wide(row, width))
        if env != "align*":
            body = " \\\\\n".join(rows)
            return body if env is None else f"\\begin{{{env}}}\n{body}\n\\end{{{env}}}"
        # a document: several align* blocks of at most 40 rows (TeX keeps a whole display in
        # memory; gamma0^6, about 1.9 MB of LaTeX, overflows it in one block)
        blocks = [rows[i:i + 40] for i in range(0, len(rows), 40)]
        return "\n".join("\\begin{align*}\n" + " \\\\\n".join(b) + "\n\\end{align*}" for b in blocks)

    def text(self) -> str:
        """Plain text, one equation a line, no backslash."""
        return "\n".join(self.lines(False))

    @property
    def provenance(self) -> str:
        return (f"Two-layer network, gamma0-series through gamma0^{self.order} in Gaussian atoms "
                "of the lazy process (Bordelon & Pehlevan (2022), §5.2, App. P, exact closure)")

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, kx, y, *, activation, eta: float, steps: int, nodes: int | None = None,
                 span: float | None = None) -> dict:
        r"""Evaluate the printed terms on a grid: ``{'phi', 'g', 'ntk': (M, T, n, n), 'f': (M, T, n),
        'delta': (M, T, P), 'loss': (M, T)}`` with ``M = order/2 + 1`` (the even orders).

        The Gaussian atoms are sums over a product trapezoid rule with ``nodes`` points per
        dimension on ``[-span, span]`` standard deviations in the eigen-coordinates of :math:`K^x`
        (default: 241 points for one dimension, 121 for two, 41 for more, on ``span = 9``; for a
        polynomial activation, whose atoms at :math:`\gamma_0^6` are polynomials of degree ~40
        with Gaussian tails past 9, ``span = 12`` and 81 points -- 61 points on ``span = 9`` are
        off by 6e-12; independent of the engine's rule); the :math:`r`-moments are the exact ones
        in the coefficients; the time
        functions are the printed iterated sums.  The sums over the training labels and the
        rule's points are done tree by tree (a subtree shared by several terms is summed once).
        """
        from effth.dmft.solvers.lazy import require_smooth, resolve_activation

        act = resolve_activation(activation)
        require_smooth(act, "the gamma0-series")
        kx = np.atleast_2d(np.asarray(kx, dtype=float))
        y = np.atleast_1d(np.asarray(y, dtype=float))
        n, P, T = kx.shape[0], y.size, int(steps)
        if kx.shape != (n, n) or P > n or not np.allclose(kx, kx.T):
            raise DomainError(f"kx must be a symmetric (n, n) kernel with the {P} training points "
                              f"first, got shape {kx.shape}")
        if T < 1 or eta <= 0:
            raise DomainError(f"steps={steps!r} must be >= 1 and eta={eta!r} > 0")
        lam, Q = np.linalg.eigh(kx)
        if lam[0] < -1e-10 * max(1.0, lam[-1]):
            raise DomainError(f"kx must be positive semi-definite (smallest eigenvalue {lam[0]:.3g})")
        keep = lam > 1e-12 * max(1.0, lam[-1])
        B = Q[:, keep] * np.sqrt(lam[keep])                    # u = B xi, xi ~ N(0, I)
        k = B.shape[1]
        poly = act.polynomial_degree is not None
        if span is None:
            span = 12.0 if poly else 9.0
        if nodes is None:
            nodes = 81 if poly else {1: 241, 2: 121}.get(k, 41)
        x = np.linspace(-span, span, int(nodes))
        w1 = np.exp(-0.5 * x ** 2) * (x[1] - x[0]) / np.sqrt(2 * np.pi)
        xi = np.stack(np.meshgrid(*([x] * k), indexing="ij"), axis=-1).reshape(-1, k)
        w = np.prod(np.stack(np.meshgrid(*([w1] * k), indexing="ij"), axis=-1).reshape(-1, k), axis=1)
        good = w > 1e-300
        xi, w = xi[good], w[good]
        u = xi @ B.T                                            # (S, n)
        S_ = w.size
        top = self.order + 1
        F = [act.numpy(d)(u) for d in range(top + 2)]
        Fp = [f[:, :P] for f in F]
        kxp = kx[:, :P]                                         # K^x_(any, training)

        # the trees, numbered once: a node is (is_h, p, d, h-children, z-child or -1)
        nodes_all = sorted(_collect_nodes(self), key=_order)
        idx = {nd: i for i, nd in enumerate(nodes_all)}
        spec = [(nd[0] == "h", nd[1], (1 if nd[0] == "h" else 0) + len(nd[2]),
                 [idx[c] for c in nd[2]], idx[nd[3]] if nd[3] not in (None, _R) else -1)
                for nd in nodes_all]
        rootidx: dict = {}
        rspec = []

        def rid(rt):
            if rt not in rootidx:
                rootidx[rt] = len(rspec)
                d, hch, zc = rt
                rspec.append((d + len(hch), [idx[c] for c in hch],
                              idx[zc] if zc not in (None, _R) else -1))
            return rootidx[rt]

        M = self.order // 2 + 1
        kern = {}
        for name in ("phi", "g"):
            for m in range(M):
                groups: dict = {}
                for c, l, r in self.kernels[(name, 2 * m)]:
                    groups.setdefault(rid(l), []).append((float(c), rid(r)))
                kern[(name, m)] = list(groups.items())
        preds = [[(float(c), rid(rt)) for c, rt in self.predictions[2 * m]] for m in range(M)]

        acc = [np.zeros((S_, P)) for _ in nodes_all]           # eta sum_{j<i} Delta_p (...)
        out = {"phi": np.zeros((M, T, n, n)), "g": np.zeros((M, T, n, n)),
               "f": np.zeros((M, T, n)), "delta": np.zeros((M, T, P))}
        delta = np.zeros((top + 1, P))
        for i in range(T):
            val = [None] * len(nodes_all)                       # node values at t_i
            for j, (is_h, p, d, hch, zc) in enumerate(spec):
                prod = Fp[d] * acc[j]                           # (S, P) at the node's label
                val[j] = prod @ kxp.T if is_h else prod.sum(axis=1)   # h: at the parent's label

            def root(j):
                d, hch, zc = rspec[j]
                v = F[d]
                for c in hch:
                    v = v * val[c]
                if zc >= 0:
                    v = v * val[zc][:, None]
                return v

            for m in range(M):
                out["f"][m, i] = sum(c * (w @ root(j)) for c, j in preds[m])
                for name in ("phi", "g"):
                    tot = np.zeros((n, n))
                    for lj, rights in kern[(name, m)]:
                        R = sum(c * root(j) for c, j in rights)
                        tot += (root(lj) * w[:, None]).T @ R
                    out[name][m, i] = tot
            for m in range(M):
                dl = out["f"][m, i, :P]
                delta[2 * m] = (y - dl) if m == 0 else -dl
                out["delta"][m, i] = delta[2 * m]
            for j, (is_h, p, d, hch, zc) in enumerate(spec):     # the time sums at t_(i+1)
                inner = eta * delta[p][None, :]                 # the lazy r: in the coefficient
                for c in hch:
                    inner = inner * val[c][:, :P]
                if zc >= 0:
                    inner = inner * val[zc][:, None]
                acc[j] = acc[j] + inner
        out["ntk"] = out["phi"] + out["g"] * kx[None, None]
        d = out["delta"]
        out["loss"] = np.stack([sum(d[a] * d[m - a] for a in range(m + 1)).sum(axis=-1) / 2
                                for m in range(M)])
        return out


def _split_wide(row: str, width: float) -> list:
    """A row wider than ``width`` (one term with many factors) broken at its factor boundaries
    ``\\,`` outside braces (``\\big[`` and ``\\big]`` may fall on different rows)."""
    from effth.printing.formula import rendered_width

    if rendered_width(row) <= width:
        return [row]
    pieces, depth, cur, i = [], 0, "", 0
    while i < len(row):
        if depth == 0 and row.startswith(r"\,", i):
            pieces.append(cur)
            cur, i = r"\,", i + 2
            continue
        depth += row[i] == "{"
        depth -= row[i] == "}"
        cur += row[i]
        i += 1
    pieces.append(cur)
    out, cur = [], ""
    for pc in pieces:
        if cur and rendered_width(cur + pc) > width:
            out.append(cur)
            cur = r"&\qquad " + pc
        else:
            cur += pc
    return out + [cur]


def _nlabels(tf) -> int:
    return 1 + sum(_nlabels(c) for c in tf[1])


def _collect_nodes(fm: TwoLayerSeriesFormulas) -> list:
    seen: dict = {}

    def walk(x):
        if x in (None, _R) or x in seen:
            return
        seen[x] = True
        for c in x[2]:
            walk(c)
        walk(x[3])

    for terms in fm.kernels.values():
        for _, l, r in terms:
            for rt in (l, r):
                for c in rt[1]:
                    walk(c)
                walk(rt[2])
    for terms in fm.predictions.values():
        for _, rt in terms:
            for c in rt[1]:
                walk(c)
            walk(rt[2])
    return list(seen)


@public
def two_layer_formulas(order: int, *, activation: str = r"\phi") -> TwoLayerSeriesFormulas:
    r"""The printed :math:`\gamma_0`-coefficients of a two-layer network through ``order`` (even):
    :math:`\Phi_n,G_n,K_n` at equal times, :math:`f_n,\Delta_n,\mathcal L_n`, as Gaussian atoms of
    the lazy process times time functions of the errors (Bordelon & Pehlevan (2022), §5.2,
    App. P.1-P.4, expanded to every order; the exact closure of the predictions).

    Examples
    --------
    >>> fm = two_layer_formulas(4)
    >>> fm.term_count("phi", 2), "\\" in fm.text()
    (4, False)
    """
    if int(order) != order or order < 0 or order % 2:
        raise DomainError(f"order={order!r} must be a non-negative even integer (odd orders vanish)")
    if order > 8:
        raise DomainError(f"order={order!r}: the printed two-layer formulas stop at gamma0^8 "
                          "(order 8 already has tens of thousands of terms); use "
                          "effth.dmft.gamma0_series for the numbers")
    order = int(order)
    ex = _Expansion(order + 1)
    kernels, preds = {}, {}
    for n in range(0, order + 1, 2):
        kernels[("phi", n)] = _kernel_terms(ex, n, 0, False)
        kernels[("g", n)] = _kernel_terms(ex, n, 1, True)
        preds[n] = _prediction_terms(ex, n)
    return TwoLayerSeriesFormulas(order, str(activation), kernels, preds)
