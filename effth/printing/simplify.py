r"""The canonical simplifier: a derived expression, fully expanded, rewritten the way the book
writes it — and checked equal to what it was given.

One mechanism serves every derived object (the initialization recursions, the NTK hierarchy, the
single-input and second-layer forms, the learning formulas). It knows no formula; it knows three
rules of the Gaussian calculus and the tensors' symmetry groups:

1. **Cumulant contractions** (un-Leibniz). A cumulant of layer :math:`\ell` contracted with
   expectations is, in the Edgeworth form the derivation produces, a sum over index patterns:
   :math:`\sum_{\beta}T_{\beta_1\beta_2\cdots}\langle\partial_{\beta_1}\partial_{\beta_2}F\rangle`
   expanded by the Leibniz rule into atoms of σ-derivatives. For a term, every way of reading
   some of its tensor indices as derivative indices is tried (the σ-factor that carries the
   derivative is lowered by one order); a reading is kept when its whole sum over
   :math:`\beta\in\mathcal D` is present in the expression with one common coefficient, and the
   largest such reading wins.
2. **Linearity and factorization**. Terms with the same tensors and derivative pattern are
   summed inside their expectations and the integrand is factored (SymPy's ``factor``), per
   neuron-label block; constants leave the expectation.
3. **Names and connected parts**. A block integrand that is a sum (e.g.
   :math:`\lambda_W\sigma\sigma+C_W\Theta\sigma'\sigma'`) is given the book's name where it has
   one (:data:`NAMED`: :math:`\widehat\Omega`, PDLT (8.90)), otherwise a generic one, and its
   definition is printed beside the formula; :math:`\langle XY\rangle-\langle X\rangle\langle
   Y\rangle` is written as one bracket.

The result, :class:`Structured`, holds the right-hand side as a SymPy expression of the objects of
:mod:`effth.printing.structured` and the definitions it uses. :meth:`Structured.check` expands it
back and compares with the input term by term (exact, symbolic); :func:`structure` refuses to
return a form that fails the check.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import sympy as sp

from effth.algebra.expectation import GaussianExpectation
from effth.algebra.expectation.variables import ActivationFactor, GaussianVariable, _random_power
from effth.algebra.tensors import SampleSum, SampleTensor

from .structured import (BlockFunction, Connected, DerivativeExpectation, DerivedBlock,
                         expand_structured, expanded_terms, term_dict)

__all__ = ["NAMED", "Structured", "structure"]

_key = sp.default_sort_key

#: tensors that enter a layer recursion as coefficients (means), never contracted with
#: derivatives: the kernel and the NTK mean (PDLT (4.118), (8.63), (9.3))
COEFFICIENT_TENSORS = ("Kernel", "Metric", "FrozenNTK", "NLONTK")


# ============================================================================== term anatomy
@dataclass
class _Term:
    """One expanded term: scalar factors, tensors and atoms (powers unrolled)."""

    scalar: sp.Expr
    tensors: list
    atoms: list          # GaussianExpectation


def _anatomy(rest: sp.Expr) -> _Term:
    scalar, tensors, atoms = [], [], []
    for f in sp.Mul.make_args(rest):
        base, p = (f.base, int(f.exp)) if f.is_Pow and f.exp.is_Integer and f.exp > 0 else (f, 1)
        if isinstance(base, GaussianExpectation):
            atoms.extend([base] * p)
        elif isinstance(base, SampleTensor):
            tensors.extend([base] * p)
        else:
            scalar.append(f)
    return _Term(sp.Mul(*scalar), tensors, atoms)


def _sigma_counts(F: sp.Expr) -> list:
    """The σ-factors of a monomial integrand as a list ``[(label, order), ...]`` (with repeats)."""
    out = []
    for f in sp.Mul.make_args(F):
        rp = _random_power(f)
        if rp is not None and isinstance(rp[0], ActivationFactor):
            out.extend([(rp[0].label, rp[0].order)] * rp[1])
    return out


def _lower(F: sp.Expr, label, order: int) -> sp.Expr:
    r"""``F`` with one factor :math:`\sigma^{(order)}_{label}` replaced by :math:`\sigma^{(order-1)}`."""
    name = None
    for f in sp.preorder_traversal(F):
        if isinstance(f, ActivationFactor) and f.label == label and f.order == order:
            name = f.args[2]
            break
    old = ActivationFactor(label, order, name)
    return sp.expand(F / old * ActivationFactor(label, order - 1, name))


# ============================================================================ the structures
@dataclass
class _STerm:
    """A structured term: ``scalar * sum_beta prod(tensors) prod(atoms)``.

    ``atoms`` are ``(F, betas)`` pairs (``betas`` the dummies differentiating ``F``); the
    tensors carry the dummies of their derivative slots.
    """

    scalar: sp.Expr
    tensors: tuple
    atoms: tuple
    betas: tuple
    kernel: Any

    def expr(self) -> sp.Expr:
        atoms = [DerivativeExpectation(F, b, self.kernel) if b else
                 GaussianExpectation(F, self.kernel) for F, b in self.atoms]
        body = sp.Mul(*self.tensors) * sp.Mul(*atoms)
        return self.scalar * (SampleSum(body, *self.betas) if self.betas else body)

    def skeleton(self, separate: tuple = ()) -> tuple:
        """What terms must share to be merged: dummy-carrying tensors, the tensors of the
        coefficient that are not means (A in A's recursion), the powers of ``separate``
        (e.g. the width ratio) and the label blocks and derivative patterns of the atoms."""
        blocks = tuple(sorted(((tuple(sorted(_labels_set(F), key=_key)), b) for F, b in self.atoms),
                              key=_key))
        cum = tuple(sorted((f for f in sp.Mul.make_args(self.scalar)
                            if isinstance(f.base if f.is_Pow else f, SampleTensor)
                            and type(f.base if f.is_Pow else f).__name__ not in COEFFICIENT_TENSORS),
                           key=_key))
        powers = tuple(sp.degree(self.scalar, x) if self.scalar.is_polynomial(x) else None
                       for x in separate)
        return (tuple(sorted(self.tensors, key=_key)), cum, powers, blocks, self.betas)


def _make_sterm(scalar, tensors, atoms, betas, kernel) -> _STerm:
    """A structured term whose tensors without dummies are part of its scalar coefficient."""
    bset = set(betas)
    with_b = tuple(t for t in tensors if set(t.indices) & bset)
    scalar = scalar * sp.Mul(*[t for t in tensors if not set(t.indices) & bset])
    return _STerm(scalar, with_b, tuple(atoms), tuple(betas), kernel)


def _labels_set(F) -> set:
    out = set()
    for f in sp.preorder_traversal(F):
        if isinstance(f, (ActivationFactor, GaussianVariable)):
            out.add(f.label)
        elif isinstance(f, BlockFunction):
            out.update(f.labels)
    return out


def _beta(k: int) -> sp.Symbol:
    return sp.Symbol(f"beta_{k}")


def _hypotheses(term: _Term, kernel) -> list:
    r"""Every reading of ``term`` as one term of a cumulant contraction: ``(n_derivatives, _STerm)``."""
    slot_opts = []      # per tensor: list of (derivative slot positions)
    for t in term.tensors:
        if type(t).__name__ in COEFFICIENT_TENSORS:
            slot_opts.append([()])
            continue
        r = len(t.indices)
        slot_opts.append([s for k in range(r, -1, -1) for s in itertools.combinations(range(r), k)])
    out = []
    for choice in itertools.product(*slot_opts):
        slots = [(i, s) for i, ss in enumerate(choice) for s in ss]
        # attach each derivative slot to an atom containing a σ of that label with order >= 1
        per_slot = []
        for i, s in slots:
            a = term.tensors[i].indices[s]
            per_slot.append([j for j, A in enumerate(term.atoms)
                             if any(lab == a and o >= 1 for lab, o in _sigma_counts(A.integrand))])
        if any(not p for p in per_slot):
            continue
        for attach in itertools.product(*per_slot):
            Fs = [A.integrand for A in term.atoms]
            ok = True
            betas_of = [[] for _ in term.atoms]
            new_idx = [list(t.indices) for t in term.tensors]
            for k, ((i, s), j) in enumerate(zip(slots, attach)):
                a = term.tensors[i].indices[s]
                orders = sorted({o for lab, o in _sigma_counts(Fs[j]) if lab == a and o >= 1})
                if not orders:
                    ok = False
                    break
                Fs[j] = _lower(Fs[j], a, orders[-1])     # lower the highest derivative
                b = _beta(k + 1)
                betas_of[j].append(b)
                new_idx[i][s] = b
            if not ok:
                continue
            tensors = [type(t)(*idx, *(() if t.layer is None else (t.layer,)))
                       for t, idx in zip(term.tensors, new_idx)]
            betas = tuple(_beta(k + 1) for k in range(len(slots)))
            atoms = tuple((F, tuple(b)) for F, b in zip(Fs, betas_of))
            out.append((len(slots), _make_sterm(term.scalar, tensors, atoms, betas, kernel)))
    return out


# ================================================================================== naming
@dataclass(frozen=True)
class NamedPattern:
    r"""A random variable the book names, as a pattern over two labels ``a``, ``b``.

    ``build(a, b)`` returns its definition; a block integrand equal to ``c * build(a, b)`` for
    some labels and a z-independent ``c`` prints as ``c`` times the name.
    """

    name: str
    build: Callable
    where: str


#: Named random variables (filled lazily to keep printing free of theory imports)
NAMED: list = []


def register_name(pattern: NamedPattern) -> None:
    """Add a named random variable (the book's, or a user's) to the simplifier's vocabulary."""
    if pattern.name not in [p.name for p in NAMED]:
        NAMED.append(pattern)


def _match_named(F: sp.Expr) -> sp.Expr | None:
    """``F`` as ``c * Name_{ab}`` if it is a multiple of a named pattern, else None."""
    labels = sorted(_labels_set(F), key=_key)
    if len(labels) > 2:
        return None
    pairs = [(labels[0], labels[-1])] + ([(labels[1], labels[0])] if len(labels) == 2 else [])
    Fe = sp.expand(F)
    for p in NAMED:
        for a, b in pairs:
            base = sp.expand(p.build(a, b))
            if base == 0:
                continue
            named = BlockFunction(p.name, (a, b), base)
            # the function itself, then its derivatives up to third order (dNTK, ddNTK)
            for i, j in ((0, 0), (1, 0), (0, 1), (2, 0), (1, 1), (0, 2), (3, 0), (2, 1), (1, 2), (0, 3)):
                slots = (0,) * i + (1,) * j
                d = sp.expand(DerivedBlock(named, slots).definition) if slots else base
                if d == 0:
                    continue
                ratio = sp.cancel(Fe / d)
                if not ratio.has(ActivationFactor, GaussianVariable):
                    return ratio * (DerivedBlock(named, slots) if slots else named)
    return None


# ============================================================================== the simplifier
@dataclass
class Structured:
    r"""A derived expression in structured form.

    Attributes
    ----------
    rhs : sympy expression
        Built from :class:`~effth.printing.structured.DerivativeExpectation`,
        :class:`~effth.printing.structured.Connected`, named
        :class:`~effth.printing.structured.BlockFunction` s, tensors and sample sums.
    original : sympy expression
        What it was built from (expanded atoms).
    samples : tuple
        The free sample labels.
    """

    rhs: sp.Expr
    original: sp.Expr
    samples: tuple
    terms: list = field(default_factory=list)

    def definitions(self) -> list:
        """The named random variables used: ``[(BlockFunction, definition), ...]``, once each."""
        seen, out = set(), []
        from .structured import NamedScalar

        blocks = set(self.rhs.atoms(BlockFunction)) | {d.base for d in self.rhs.atoms(DerivedBlock)}
        blocks |= set(self.rhs.atoms(NamedScalar))
        for b in sorted(blocks, key=_key):
            if b.name not in seen:
                seen.add(b.name)
                out.append((b, b.definition))
        return out

    def expanded(self) -> sp.Expr:
        """The right-hand side expanded back to atoms (what :meth:`check` compares)."""
        return expand_structured(self.rhs, self.samples)

    def check(self) -> bool:
        """Exact symbolic equality with the expression it was built from."""
        return expanded_terms(self.rhs, self.samples) == term_dict(self.original)


def _unleibniz(terms: dict, kernel) -> list:
    """Cover the expanded ``terms`` by structured terms (rule 1)."""
    remaining = dict(terms)
    samples = _free_labels(terms)
    out: list = []

    def priority(k):
        anat = _anatomy(k)
        n = sum(len(t.indices) for t in anat.tensors if type(t).__name__ not in COEFFICIENT_TENSORS)
        return (-n, _key(k))

    for seed in sorted(terms, key=priority):
        if seed not in remaining:
            continue
        anat = _anatomy(seed)
        best = None
        if any(type(t).__name__ not in COEFFICIENT_TENSORS for t in anat.tensors):
            by_n: dict = {}
            for n, h in _hypotheses(anat, kernel):
                by_n.setdefault(n, []).append(h)
            for n in sorted(by_n, reverse=True):
                if n == 0:
                    break
                for h in by_n[n]:
                    exp = _expansion_within(h, samples, remaining)
                    if exp is None or seed not in exp:
                        continue
                    c = remaining[seed] / exp[seed]
                    if all(remaining[k] == c * v for k, v in exp.items()):
                        if best is None or len(exp) > len(best[2]):
                            best = (c, h, exp)
                if best is not None:
                    break
        if best is None:
            h = _make_sterm(anat.scalar, anat.tensors, tuple((A.integrand, ()) for A in anat.atoms),
                            (), kernel)
            c, exp = remaining[seed], {seed: 1}
        else:
            c, h, exp = best
        for k, v in exp.items():
            remaining[k] -= c * v
            if remaining[k] == 0:
                del remaining[k]
        h.scalar = c * h.scalar
        out.append(h)
    return out


def _expansion_within(h: _STerm, samples, allowed) -> dict | None:
    r"""The expansion of ``h`` over ``samples`` as ``{monomial: coefficient}``, or ``None`` as soon
    as a monomial is not in ``allowed`` (most readings fail on their first few terms)."""
    from .structured import _derivative_atoms

    out: dict = {}
    n = len(h.betas)
    for values in itertools.product(samples, repeat=n):
        sub = dict(zip(h.betas, values))
        tens = sp.Mul(*[t.xreplace(sub) for t in h.tensors])
        parts = [term_dict(_derivative_atoms(F.xreplace(sub), tuple(sub.get(b, b) for b in bs),
                                             h.kernel)) for F, bs in h.atoms]
        if any(not p for p in parts):
            continue
        for combo in itertools.product(*[list(p.items()) for p in parts]):
            c = h.scalar
            mono = tens
            for m, v in combo:
                mono = mono * m
                c = c * v
            cc, rest = (mono * c).as_coeff_Mul()
            if rest not in allowed:
                return None
            out[rest] = out.get(rest, 0) + cc
    return {k: v for k, v in out.items() if v != 0}


def _free_labels(terms) -> tuple:
    labels = set()
    for k in terms:
        for f in sp.preorder_traversal(k):
            if isinstance(f, (ActivationFactor, GaussianVariable)):
                labels.add(f.label)
            elif isinstance(f, SampleTensor):
                labels.update(i for i in f.indices if isinstance(i, sp.Symbol))
    return tuple(sorted(labels, key=_key))


def _placeholders(n: int) -> list:
    return [sp.Symbol(f"_U{j}") for j in range(n)]


def _merge(sterms: list, kernel, separate: tuple = ()) -> list:
    """Rule 2: sum terms of one skeleton inside their expectations and factor."""
    groups: dict = {}
    order = []
    for s in sterms:
        k = s.skeleton(separate)
        if k not in groups:
            groups[k] = []
            order.append(k)
        groups[k].append(s)
    out = []
    for k in order:
        g = groups[k]
        if len(g) == 1 and len(g[0].atoms) != 1:
            out.append(g[0])
            continue
        out.extend(_factor_group(g, kernel))
    return out


def _content(form: sp.Expr, placeholders: set) -> tuple:
    """``(c, L)`` with ``form = c * L``, ``c`` free of the placeholders (common content)."""
    f = sp.factor_terms(form)
    c, L = sp.S.One, sp.S.One
    for x in sp.Mul.make_args(f):
        if x.free_symbols & placeholders:
            L *= x
        else:
            c *= x
    return c, L


def _rank_one(entries: dict, m: int) -> tuple | None:
    r"""Factor a multilinear form :math:`\sum_{k}M_{k}\,u^{(1)}_{k_1}\cdots u^{(m)}_{k_m}` as
    :math:`c\prod_j(\sum a^{(j)}_{k}u^{(j)}_{k})` (``entries``: key tuples -> coefficients).

    Returns ``(c, [ {key: a^{(j)}_key} for each slot ])`` or ``None`` when it does not factor.
    Exact: every 2×2 minor through the pivot must vanish identically.
    """
    entries = {k: v for k, v in entries.items() if v != 0}
    if not entries:
        return None
    if m == 1:
        keys = list(entries)
        syms = {k: sp.Dummy() for k in keys}
        c, L = _content(sp.Add(*[entries[k] * syms[k] for k in keys]), set(syms.values()))
        return c, [{k[0]: sp.expand(L.coeff(syms[k])) for k in keys}]
    rows = sorted({k[0] for k in entries}, key=_key)
    cols = sorted({k[1:] for k in entries}, key=_key)
    M = lambda i, c: entries.get((i,) + c, sp.S.Zero)  # noqa: E731
    i0, c0 = next((i, c) for i in rows for c in cols if M(i, c) != 0)
    p = M(i0, c0)
    for i in rows:
        for c in cols:
            if sp.expand(M(i, c) * p - M(i, c0) * M(i0, c)) != 0:
                return None
    rest = _rank_one({c: M(i0, c) for c in cols}, m - 1)
    if rest is None:
        return None
    ca, first = _rank_one({(i,): M(i, c0) for i in rows}, 1)
    return sp.cancel(ca * rest[0] / p), first + rest[1]


def _factor_group(g: list, kernel) -> list:
    r"""One skeleton: :math:`\sum_i c_i\prod_j\langle\partial F_{ij}\rangle` as
    :math:`c\prod_j\langle\partial(\sum_k a_{jk}F_{jk})\rangle` when the multilinear form factors;
    a single expectation's integrand is factored over its neuron-label blocks."""
    s0 = g[0]
    m = len(s0.atoms)
    if m == 0:
        return [_STerm(sp.Add(*[s.scalar for s in g]), s0.tensors, (), s0.betas, kernel)]

    def ordered(s):      # atoms in skeleton order: slot j is the same block in every term
        return sorted(s.atoms, key=lambda a: _key(tuple(sorted(_labels_set(a[0]), key=_key))))

    betas = [b for _, b in ordered(s0)]
    if m == 1:
        terms = [(s.scalar, ordered(s)[0][0]) for s in g]
        c, F = _factor_integrand(terms)
        return [_STerm(c, s0.tensors, ((F, betas[0]),), s0.betas, kernel)]
    entries: dict = {}
    for s in g:
        key = tuple(sp.expand(F) for F, _ in ordered(s))
        entries[key] = entries.get(key, 0) + s.scalar
    fac = _rank_one(entries, m)
    if fac is None:
        return g
    c, forms = fac
    atoms = tuple((sp.Add(*[a * F for F, a in form.items()]), b) for form, b in zip(forms, betas))
    return [_STerm(c, s0.tensors, atoms, s0.betas, kernel)]


def _factor_integrand(terms: list) -> tuple:
    r""":math:`\sum_i c_i m_i` (``terms``: coefficient, σ-monomial) as ``(c, F)`` with ``F`` a product
    of one linear form per neuron-label block (the finest split that factors exactly)."""
    labels = sorted(set().union(*[_labels_set(mn) for _, mn in terms]), key=_key)

    def split(mono, part):
        a, b = sp.S.One, sp.S.One
        for f in sp.Mul.make_args(mono):
            if _labels_set(f) <= part:
                a *= f
            else:
                b *= f
        return a, b

    def factor(items, labs):
        # items: list of (coefficient, monomial over labs)
        for r in range(1, len(labs) // 2 + 1):
            for part in itertools.combinations(labs, r):
                part = set(part)
                if r * 2 == len(labs) and labs[0] not in part:
                    continue
                entries: dict = {}
                for c, mn in items:
                    k = split(mn, part)
                    entries[k] = entries.get(k, 0) + c
                fac = _rank_one(entries, 2)
                if fac is None:
                    continue
                const, (fa, fb) = fac
                ca, A = factor([(v, k) for k, v in fa.items()], [x for x in labs if x in part])
                cb, B = factor([(v, k) for k, v in fb.items()], [x for x in labs if x not in part])
                return const * ca * cb, A * B
        entries = {(mn,): c for c, mn in items}
        c, (form,) = _rank_one(entries, 1)
        return c, sp.Add(*[a * mn for mn, a in form.items()])

    merged: dict = {}
    for c, mn in terms:
        merged[mn] = merged.get(mn, 0) + c
    merged = {k: v for k, v in merged.items() if sp.expand(v) != 0}
    if not merged:
        return sp.S.Zero, sp.S.One
    return factor([(v, k) for k, v in merged.items()], labels)


def _blocks(F: sp.Expr) -> list:
    """Split a factored integrand into factors over disjoint label sets (neuron blocks)."""
    parts: list = []
    for f in sp.Mul.make_args(F):
        labs = _labels_set(f)
        for p in parts:
            if p[0] & labs:
                p[0] |= labs
                p[1] *= f
                break
        else:
            parts.append([set(labs), f])
    # merge transitively
    merged = True
    while merged:
        merged = False
        for i, j in itertools.combinations(range(len(parts)), 2):
            if parts[i][0] & parts[j][0]:
                parts[i][0] |= parts[j][0]
                parts[i][1] *= parts[j][1]
                del parts[j]
                merged = True
                break
    return [p[1] for p in sorted(parts, key=lambda p: _key(tuple(sorted(p[0], key=_key))))]


def _name(F: sp.Expr, names: dict) -> sp.Expr:
    """Replace the blocks of ``F`` that are sums by named functions (rule 3)."""
    out = sp.S.One
    for blk in _blocks(F):
        if isinstance(sp.expand(blk), sp.Add):
            named = _match_named(blk)
            if named is None:
                key = sp.expand(blk)
                if key not in names:
                    labels = tuple(sorted(_labels_set(blk), key=_key))
                    names[key] = BlockFunction(rf"X^{{({len(names) + 1})}}", labels, key)
                named = names[key]
            out *= named
        else:
            out *= blk
    return out


def _connected(sterms: list, kernel) -> list:
    """Rule 3b: ``c<X Y> - c<X><Y>`` as ``c Connected(X, Y)`` (``X``, ``Y`` on disjoint labels)."""
    used = set()
    out = []
    singles = {}
    for i, s in enumerate(sterms):
        if not s.tensors and not s.betas and len(s.atoms) == 1:
            singles.setdefault(sp.expand(_unfold_all(s.atoms[0][0])), []).append(i)
    for j, t in enumerate(sterms):
        if t.tensors or t.betas or len(t.atoms) != 2 or j in used:
            continue
        X, Y = (a[0] for a in t.atoms)
        if _labels_set(X) & _labels_set(Y):
            continue
        for i in singles.get(sp.expand(_unfold_all(X * Y)), []):
            if i not in used and sp.expand(sterms[i].scalar + t.scalar) == 0:
                used.update((i, j))
                out.append((min(i, j), sterms[i].scalar * Connected(X, Y, kernel)))
                break
    rest = [(i, s.expr()) for i, s in enumerate(sterms) if i not in used]
    return [e for _, e in sorted(out + rest, key=lambda p: p[0])]


def _unfold_all(F):
    from .structured import _unfold
    return _unfold(F)


def _unname_singletons(sterms: list, kernel) -> list:
    """A name is worth its definition only if it is used twice: unfold the others."""
    count: dict = {}
    for s in sterms:
        for F, _ in s.atoms:
            for x in sp.preorder_traversal(F):
                b = x.base if isinstance(x, DerivedBlock) else x
                if isinstance(b, BlockFunction):
                    count[b.name] = count.get(b.name, 0) + 1
    once = {n for n, c in count.items() if c < 2}
    if not once:
        return sterms

    def unfold(F):
        F = F.replace(lambda e: isinstance(e, DerivedBlock) and e.base.name in once,
                      lambda e: e.definition)
        return F.replace(lambda e: isinstance(e, BlockFunction) and e.name in once,
                         lambda e: e.definition)

    return [_STerm(s.scalar, s.tensors, tuple((unfold(F), b) for F, b in s.atoms), s.betas, kernel)
            for s in sterms]


def structure(expr: sp.Expr, kernel, separate: Sequence = ()) -> Structured:
    r"""The structured form of an expanded derived expression (see the module docstring).

    Parameters
    ----------
    expr : sympy expression
        Sum of coefficients × tensors × :class:`~effth.algebra.expectation.GaussianExpectation`
        atoms over ``kernel`` (the Edgeworth form of a derived recursion).
    kernel : KernelMatrix
        The covariance of the atoms.
    separate : sequence of symbols
        Terms with different powers of these (e.g. the width ratio :math:`n_\ell/n_{\ell-1}`)
        are never merged into one expectation.

    Returns
    -------
    Structured
        Checked equal to ``expr`` (exact); raises ``AssertionError`` otherwise (a bug).
    """
    terms = term_dict(expr)
    samples = _free_labels(terms)
    st = _merge(_unleibniz(terms, kernel), kernel, tuple(separate))
    names: dict = {}
    named = []
    for s in st:
        atoms = tuple((_name(F, names), b) for F, b in s.atoms)
        named.append(_STerm(s.scalar, s.tensors, atoms, s.betas, kernel))
    named = _unname_singletons(named, kernel)
    rhs = sp.Add(*_connected(named, kernel), evaluate=False)
    out = Structured(rhs=rhs, original=expr, samples=samples, terms=named)
    if not out.check():
        raise AssertionError("the structured form differs from the derivation (a simplifier bug)")
    return out
