r"""The :math:`\gamma_0`-series of a deep nonlinear network with one input, as printed formulas at
every order: each coefficient a sum of one-dimensional Gaussian moments of the activation times
named functions of the two times, derived here by expanding the single-site fields.

The single-site process of layer :math:`\ell` on the discrete-GD grid (Bordelon & Pehlevan
(2022), §5.2, App. M, App. P; one input, NTK closure; :math:`t,s,i,j,\dots` grid times) is

.. math::
   h_t = u_t + \gamma_0\textstyle\sum_i\tilde C^\ell_{ti}\,\phi'(h_i)z_i,\qquad
   z_t = r_t + \gamma_0\textstyle\sum_i\tilde D^\ell_{ti}\,\phi(h_i),

   \tilde C^\ell_{ts} = A^{\ell-1}_{ts}+\eta\,\Theta(t>s)\,\Delta(s)\,\Phi^{\ell-1}_{ts},\qquad
   \tilde D^\ell_{ts} = B^{\ell}_{ts}+\eta\,\Theta(t>s)\,\Delta(s)\,G^{\ell+1}_{ts},

with :math:`u\sim\mathcal N(0,\Phi^{\ell-1})`, :math:`r\sim\mathcal N(0,G^{\ell+1})` and the order
parameters :math:`\Phi^\ell=\langle\phi(h)\phi(h)\rangle`, :math:`G^\ell=\langle gg\rangle`
(:math:`g=\phi'(h)z`), :math:`A^\ell_{ts}=\gamma_0^{-1}\langle\partial\phi(h_t)/\partial r_s\rangle`,
:math:`B^{\ell-1}_{ts}=\gamma_0^{-1}\langle\partial g_t/\partial u_s\rangle`.  Every one is a power
series in :math:`\gamma_0` (:math:`\tilde C=\sum_m\gamma_0^{2m}\tilde C_{2m}`, ...).

**Derivation.**  :func:`derive_deep_terms` solves the field equations order by order in
:math:`\gamma_0` as polynomials in :math:`r_i` and the activation derivatives
:math:`\phi^{(k)}(u_i)`, contracted with the matrices :math:`\tilde C_{2m},\tilde D_{2m}` over
summed times; takes the expectation over the sources with covariances
:math:`\Phi^{\ell-1}_0+\sum_{j\ge1}\gamma_0^{2j}\Phi^{\ell-1}_{2j}` (and :math:`G^{\ell+1}`) by
the Price/Wick expansion :math:`\langle F\rangle=\sum_n\frac1{n!}\langle(\tfrac12\sum_{ab}
\delta\Phi_{ab}\partial_{u_a}\partial_{u_b}+\tfrac12\sum_{ab}\delta G_{ab}\partial_{r_a}
\partial_{r_b})^nF\rangle_0`; and at the lazy process, where :math:`u_i=u\sim\mathcal
N(0,\Phi^{\ell-1}_0)` and :math:`r_i=r\sim\mathcal N(0,G^{\ell+1}_0)` for every time, every average
factorises into a moment :math:`\langle\phi^{(a)}\phi^{(b)}\cdots\rangle_\ell`, a power of
:math:`G^{\ell+1}_0` (:math:`\langle r^{2p}\rangle=(2p-1)!!\,(G^{\ell+1}_0)^p`) and a sum over the
times of products of matrices -- a *time function* :math:`w^\ell_k(t,s)`, printed once beside the
formulas.  Terms equal under a renaming of the summed times are merged.

:class:`DeepSeriesFormulas` prints the system (``latex``, ``text``) and evaluates *the printed
terms* (:meth:`DeepSeriesFormulas.evaluate`, moments by a dense trapezoid rule, the time functions
by their definitions): an implementation independent of the numeric engine
:mod:`effth.dmft.series.deep_jets` (formal sources on Smolyak rules), which it reproduces.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache
from itertools import permutations
from math import factorial

import numpy as np

from effth._signature import public
from effth.errors import DomainError
from effth.printing.formula import LINE_WIDTH

__all__ = ["DeepSeriesFormulas", "deep_series_formulas", "derive_deep_terms"]

# ---------------------------------------------------------------------------- the term algebra
# A term is (phis, rs, mats): phis a sorted tuple of (derivative order, time label) -- one factor
# phi^(k)(u_label); rs a sorted tuple of labels -- one factor r_label; mats a sorted tuple of
# (name, label, label) -- a matrix entry.  Free labels are "t", "s" and the template label "x";
# summed labels are "0", "1", ...  Names: "C2" = C~_2, "D0" = D~_0, "P2" = Phi^{l-1}_2,
# "G2" = G^{l+1}_2 (symmetric), "I" = the Kronecker delta (symmetric).
_FREE = ("s", "t", "x")
_SYMMETRIC = ("P", "G", "I")


def _is_dummy(label: str) -> bool:
    return label not in _FREE


def _norm_mat(m):
    name, a, b = m
    if name[0] in _SYMMETRIC and b < a:
        return (name, b, a)
    return m


def _classes(dummies, phis, rs, mats):
    """Invariants of the summed labels under renaming (colour refinement): labels in different
    classes can never be exchanged, so only permutations within a class are tried."""
    colour = {d: 0 for d in dummies}
    for _ in range(3):
        sig = {}
        for d in dummies:
            own = tuple(sorted(k for k, lb in phis if lb == d)), sum(1 for lb in rs if lb == d)
            nb = []
            for n, a, b in mats:
                for pos, (x, y) in enumerate(((a, b), (b, a))):
                    if x == d:
                        other = colour[y] if _is_dummy(y) else y
                        if n[0] in _SYMMETRIC:
                            pos = 0
                        nb.append((n, pos, str(other), x == y))
            sig[d] = (colour[d], own, tuple(sorted(nb)))
        ranks = {v: i for i, v in enumerate(sorted(set(sig.values())))}
        new = {d: ranks[sig[d]] for d in dummies}
        if len(set(new.values())) == len(set(colour.values())):
            colour = new
            break
        colour = new
    groups: dict = {}
    for d in dummies:
        groups.setdefault(colour[d], []).append(d)
    return [groups[c] for c in sorted(groups)]


def _orderings(groups):
    """Every ordering of the labels that keeps the classes in order."""
    if not groups:
        yield ()
        return
    for head in permutations(groups[0]):
        for rest in _orderings(groups[1:]):
            yield head + rest


@lru_cache(maxsize=None)
def _canon(phis, rs, mats):
    """The representative of a term under renaming of its summed labels (the smallest tuple
    over the renamings that respect the labels' invariants)."""
    labels = {lb for _, lb in phis} | set(rs) | {lb for _, a, b in mats for lb in (a, b)}
    dummies = sorted(lb for lb in labels if _is_dummy(lb))
    if not dummies:
        return (tuple(sorted(phis)), tuple(sorted(rs)), tuple(sorted(_norm_mat(m) for m in mats)))
    best = None
    for order in _orderings(_classes(dummies, phis, rs, mats)):
        ren = {d: str(p) for p, d in enumerate(order)}
        f = lambda lb: ren.get(lb, lb)                                    # noqa: E731
        key = (tuple(sorted((k, f(lb)) for k, lb in phis)), tuple(sorted(f(lb) for lb in rs)),
               tuple(sorted(_norm_mat((n, f(a), f(b))) for n, a, b in mats)))
        if best is None or key < best:
            best = key
    return best


def _n_dummies(term) -> int:
    phis, rs, mats = term
    labels = {lb for _, lb in phis} | set(rs) | {lb for _, a, b in mats for lb in (a, b)}
    return sum(1 for lb in labels if _is_dummy(lb))


def _relabel(term, ren):
    phis, rs, mats = term
    f = lambda lb: ren.get(lb, lb)                                        # noqa: E731
    return (tuple((k, f(lb)) for k, lb in phis), tuple(f(lb) for lb in rs),
            tuple((n, f(a), f(b)) for n, a, b in mats))


def _accumulate(out: dict, key, coef) -> None:
    """``out[key] += coef`` for a canonical ``key``, dropping the entry when it cancels."""
    if coef == 0:
        return
    v = out.get(key, 0) + coef
    if v == 0:
        out.pop(key, None)
    else:
        out[key] = v


def _add(out: dict, term, coef) -> None:
    if coef != 0:                  # (canonicalizing costs; a zero adds nothing)
        _accumulate(out, _canon(*term), coef)


def _mul(E1: dict, E2: dict) -> dict:
    out: dict = {}
    for t1, c1 in E1.items():
        n1 = _n_dummies(t1)
        for t2, c2 in E2.items():
            n2 = _n_dummies(t2)
            t2s = _relabel(t2, {str(i): str(i + n1) for i in range(n2)})
            _add(out, (t1[0] + t2s[0], t1[1] + t2s[1], t1[2] + t2s[2]), c1 * c2)
    return out


def _scale(E: dict, c) -> dict:
    return {k: v * c for k, v in E.items()} if c != 0 else {}


def _plus(*Es) -> dict:
    """The sum of term dicts whose keys are already canonical."""
    out: dict = {}
    for E in Es:
        for k, v in E.items():
            _accumulate(out, k, v)
    return out


def _at(E: dict, label: str) -> dict:
    """The template ``E`` (free label ``x``) at the free label ``label``."""
    out: dict = {}
    for t, c in E.items():
        _add(out, _relabel(t, {"x": label}), c)
    return out


def _attach(name: str, E: dict) -> dict:
    r""":math:`\sum_i M_{xi}E(i)`: the template's free label summed against the matrix ``name``."""
    out: dict = {}
    for t, c in E.items():
        d = str(_n_dummies(t))
        phis, rs, mats = _relabel(t, {"x": d})
        _add(out, (phis, rs, mats + ((name, "x", d),)), c)
    return out


def _phi(k: int, label: str = "x") -> dict:
    return {((( k, label),), (), ()): Fraction(1)}


def _r(label: str = "x") -> dict:
    return {((), (label,), ()): Fraction(1)}


ONE = {((), (), ()): Fraction(1)}

# series: lists of term dicts indexed by the power of gamma0


def _smul(S1, S2, N):
    out = [dict() for _ in range(N + 1)]
    for a, E1 in enumerate(S1):
        if not E1:
            continue
        for b, E2 in enumerate(S2):
            if a + b > N or not E2:
                continue
            out[a + b] = _plus(out[a + b], _mul(E1, E2))
    return out


def _taylor(m: int, dh, N):
    r""":math:`\phi^{(m)}(h_x)=\sum_k\phi^{(m+k)}(u_x)\,\delta h_x^k/k!` as a series."""
    out = [dict() for _ in range(N + 1)]
    out[0] = _phi(m)
    power = [ONE] + [dict() for _ in range(N)]
    for k in range(1, N + 1):
        power = _smul(power, dh, N)
        if not any(power):
            break
        for n in range(N + 1):
            if power[n]:
                out[n] = _plus(out[n], _scale(_mul(_phi(m + k), power[n]), Fraction(1, factorial(k))))
    return out


@lru_cache(maxsize=None)
def _fields(N: int):
    r"""The field templates at the free time ``x`` through :math:`\gamma_0^N`: ``(phi(h), g)``
    series, from :math:`\delta h_x=\sum_m\gamma_0^{2m+1}\sum_i\tilde C_{2m,xi}g_i` and
    :math:`\delta z_x=\sum_m\gamma_0^{2m+1}\sum_i\tilde D_{2m,xi}\phi(h_i)`."""
    dh = [dict() for _ in range(N + 1)]
    dz = [dict() for _ in range(N + 1)]
    for n in range(1, N + 1):
        lower = n - 1
        ph = _taylor(0, dh, lower)
        g = _smul(_taylor(1, dh, lower), [_r()] + dz[1:lower + 1], lower)
        for m in range(0, (n - 1) // 2 + 1):
            k = n - 1 - 2 * m
            dh[n] = _plus(dh[n], _attach(f"C{2 * m}", g[k]))
            dz[n] = _plus(dz[n], _attach(f"D{2 * m}", ph[k]))
    ph = _taylor(0, dh, N)
    g = _smul(_taylor(1, dh, N), [_r()] + dz[1:], N)
    return ph, g


def _laplacian(E: dict, j: int) -> dict:
    r""":math:`\tfrac12\sum_{ab}\Phi_{2j,ab}\partial_{u_a}\partial_{u_b}+\tfrac12\sum_{ab}G_{2j,ab}
    \partial_{r_a}\partial_{r_b}` applied to each term."""
    out: dict = {}
    P, G = f"P{2 * j}", f"G{2 * j}"
    for (phis, rs, mats), c in E.items():
        for p in range(len(phis)):
            kp, lp = phis[p]
            rest = phis[:p] + phis[p + 1:]
            _add(out, (rest + ((kp + 2, lp),), rs, mats + ((P, lp, lp),)), c * Fraction(1, 2))
            for q in range(p + 1, len(phis)):
                kq, lq = phis[q]
                rest2 = tuple(phis[i] for i in range(len(phis)) if i not in (p, q))
                _add(out, (rest2 + ((kp + 1, lp), (kq + 1, lq)), rs, mats + ((P, lp, lq),)), c)
        for p in range(len(rs)):
            for q in range(p + 1, len(rs)):
                rest = tuple(rs[i] for i in range(len(rs)) if i not in (p, q))
                _add(out, (phis, rest, mats + ((G, rs[p], rs[q]),)), c)
    return out


def _price(S, N):
    r"""The source average as a series over the lazy process: :math:`\sum_n O^nS/n!`,
    :math:`O=\sum_{j\ge1}\gamma_0^{2j}O_{2j}` (the covariance corrections)."""
    total = [dict(E) for E in S]
    cur = [dict(E) for E in S]
    n = 0
    while any(cur):
        n += 1
        new = [dict() for _ in range(N + 1)]
        for a, E in enumerate(cur):
            if not E:
                continue
            for j in range(1, (N - a) // 2 + 1):
                new[a + 2 * j] = _plus(new[a + 2 * j], _scale(_laplacian(E, j), Fraction(1, n)))
        cur = new
        total = [_plus(x, y) for x, y in zip(total, cur)]
    return total


def _double_factorial(m: int) -> int:
    out = 1
    for k in range(m - 1, 0, -2):
        out *= k
    return out


def _lazy(E: dict) -> dict:
    r"""The lazy average: ``{(moment, G power, network): coefficient}`` (odd powers of r vanish)."""
    out: dict = {}
    for (phis, rs, mats), c in E.items():
        m = len(rs)
        if m % 2:
            continue
        mom = tuple(sorted(k for k, _ in phis))
        net = _canon((), (), mats)[2]
        _accumulate(out, (mom, m // 2, net), c * _double_factorial(m))
    return out


def _d_source(E: dict, which: str) -> dict:
    r""":math:`\partial/\partial r_s` (``which='r'``) or :math:`\partial/\partial u_s` (``'u'``) of
    each term (free label ``t``): a summed label becomes ``s``, the free ``t`` gives
    :math:`\delta_{ts}`."""
    out: dict = {}
    for (phis, rs, mats), c in E.items():
        if which == "r":
            for p in range(len(rs)):
                lb = rs[p]
                rest = rs[:p] + rs[p + 1:]
                t = (phis, rest, mats)
                if _is_dummy(lb):
                    t = _relabel(t, {lb: "s"})
                else:
                    t = (phis, rest, mats + (("I", lb, "s"),))
                _add(out, t, c)
        else:
            for p in range(len(phis)):
                k, lb = phis[p]
                t = (phis[:p] + ((k + 1, lb),) + phis[p + 1:], rs, mats)
                if _is_dummy(lb):
                    t = _relabel(t, {lb: "s"})
                else:
                    t = (t[0], rs, mats + (("I", lb, "s"),))
                _add(out, t, c)
    return out


@public
@lru_cache(maxsize=None)
def derive_deep_terms(order: int) -> dict:
    r"""Derive the one-input coefficients through :math:`\gamma_0^{\mathrm{order}}`.

    Returns ``{(quantity, m): {(moment, p, network): Fraction}}`` for ``quantity`` in ``'phi'``
    (:math:`\Phi^\ell_m(t,s)`), ``'g'`` (:math:`G^\ell_m`), ``'A'`` (:math:`A^\ell_m`) and ``'B'``
    (:math:`B^{\ell-1}_m`, with its equal-time part), ``m`` even; a term is the coefficient times
    :math:`(G^{\ell+1}_0)^p\,\langle\prod_k\phi^{(k)}\rangle_\ell` times the time network
    (a tuple of matrix entries ``(name, label, label)`` summed over its labels other than
    ``t``, ``s``).  Responses are given through ``order - 2`` (the kernels of ``order`` need no
    more).
    """
    N = int(order)
    ph, g = _fields(N + 1)
    out = {}
    phi_ts = _price(_smul([_at(E, "t") for E in ph[:N + 1]], [_at(E, "s") for E in ph[:N + 1]], N), N)
    g_ts = _price(_smul([_at(E, "t") for E in g[:N + 1]], [_at(E, "s") for E in g[:N + 1]], N), N)
    for m in range(0, N + 1, 2):
        out[("phi", m)] = _lazy(phi_ts[m])
        out[("g", m)] = _lazy(g_ts[m])
    M = max(N - 1, 0)
    dA = _price([_d_source(_at(E, "t"), "r") for E in ph[:M + 1]], M)
    dB = _price([_d_source(_at(E, "t"), "u") for E in g[:M + 1]], M)
    for m in range(0, N - 1, 2):
        out[("A", m)] = _lazy(dA[m + 1])
        out[("B", m)] = _lazy(dB[m + 1])
    return out


# ---------------------------------------------------------------------------- evaluation
_LETTERS = "abcdefghijklmnopqruvwxyz"


def _network_value(net, mats_of, T: int) -> np.ndarray:
    """The time function of ``net`` on the grid, ``(T, T)`` over ``(t, s)``."""
    if not net:
        return np.ones((T, T))
    sub, ops = [], []
    for name, a, b in net:
        sub.append("".join(x if x in "ts" else _LETTERS[int(x)] for x in (a, b)))
        ops.append(mats_of(name))
    present = [x for x in "ts" if any(x in s for s in sub)]
    val = np.einsum(",".join(sub) + "->" + "".join(present), *ops, optimize=True)
    if present == ["t", "s"]:
        return val
    if present == ["t"]:
        return np.repeat(val[:, None], T, axis=1)
    if present == ["s"]:
        return np.repeat(val[None, :], T, axis=0)
    return np.full((T, T), float(val))


def _evaluate_terms(terms: dict, mats_of, moment, g0: float, T: int) -> np.ndarray:
    out = np.zeros((T, T))
    for (mom, p, net), c in terms.items():
        out += float(c) * (g0() ** p if p else 1.0) * moment(mom) * _network_value(net, mats_of, T)
    return out


@public
@dataclass
class DeepSeriesFormulas:
    r"""The printed one-input :math:`\gamma_0`-series of a deep nonlinear network through
    ``order`` (NTK closure), derived by :func:`derive_deep_terms`.

    Attributes
    ----------
    order : int
        Highest power of :math:`\gamma_0` (even).
    hidden_layers : int or None
        :math:`L` (``None``: symbolic; the equations hold for every :math:`L`).
    activation : str
        Name printed in the heading (the formulas hold for any smooth activation).
    """

    order: int = 4
    hidden_layers: int | None = None
    activation: str = r"\phi"

    @property
    def terms(self) -> dict:
        """``{(quantity, m): {(moment, p, network): coefficient}}`` (see :func:`derive_deep_terms`)."""
        return derive_deep_terms(self.order)

    def evaluate(self, kx, y, *, activation, eta: float, steps: int,
                 hidden_layers: int | None = None, moment=None) -> dict:
        r"""Evaluate the printed system (:meth:`printed_terms`) on the grid :math:`t_i=i\eta`, ``i < steps``.

        Returns ``{'phi', 'g': (K+1, L, T, T), 'A', 'B': (K, L+1, T, T), 'ntk', 'f', 'delta':
        (K+1, T)}`` with entry ``k`` the coefficient of :math:`\gamma_0^{2k}` (``A[k, l]`` is
        :math:`A^\ell_{2k}`, ``B[k, l]`` is :math:`B^{\ell}_{2k}`, ``l = 0..L``; responses through
        ``order - 2``).  ``moment(derivs, variance)`` computes
        :math:`\langle\prod_k\phi^{(k)}\rangle` over :math:`\mathcal N(0,\mathrm{variance})`
        (default: a dense trapezoid rule, step 0.02 standard deviations).
        """
        from effth.dmft.series.formulas_nonlinear import _one_input_arguments, _trapezoid_moment

        L, kx, y, act = _one_input_arguments(self.hidden_layers, hidden_layers, kx, y, activation)
        N, T = int(self.order), int(steps)
        terms = self.printed_terms()
        top = max(max(mom, default=0) for tm in terms.values() for mom, _, _ in tm)
        fns = [act.numpy(k) for k in range(top + 1)]
        mom_fn = moment or (lambda ds, var: _trapezoid_moment(fns, ds, var))
        orders = range(0, N + 1, 2)
        zeros = np.zeros((T, T))
        mask = np.tril(np.ones((T, T)), -1)
        # layers: Phi[l] l = 0..L (Phi^0 = Kx), G[l] l = 1..L+1 (G^{L+1} = 1), A[l] (A^0 = 0),
        # B[l] (B^L = 0); the drivers C[l], D[l] for l = 1..L
        Phi = {0: {m: (kx[0, 0] * np.ones((T, T)) if m == 0 else zeros) for m in orders}}
        G = {L + 1: {m: (np.ones((T, T)) if m == 0 else zeros) for m in orders}}
        A = {0: {m: zeros for m in orders}}
        B = {L: {m: zeros for m in orders}}
        C = {ell: {} for ell in range(1, L + 1)}
        D = {ell: {} for ell in range(1, L + 1)}
        for ell in range(1, L + 1):
            Phi[ell] = {}
        for ell in range(1, L + 1):
            G[ell] = {}
        var = {}
        cache: dict = {}

        def mom_of(ell):
            def f(ds):
                key = (ell, ds)
                if key not in cache:
                    cache[key] = mom_fn(ds, var[ell])
                return cache[key]
            return f

        def mats_of(ell):
            def f(name):
                kind, m = name[0], int(name[1:]) if len(name) > 1 else 0
                return {"C": lambda: C[ell][m], "D": lambda: D[ell][m], "P": lambda: Phi[ell - 1][m],
                        "G": lambda: G[ell + 1][m], "I": lambda: np.eye(T)}[kind]()
            return f

        def ev(q, m, ell):
            X = _evaluate_terms(terms[(q, m)], mats_of(ell), mom_of(ell), lambda: G[ell + 1][0][0, 0], T)
            return X + X.T if q in ("phi", "g") else X      # the kernels print X(t,s) + X(s,t)

        K, Dl = {}, {}
        for m in orders:
            for ell in range(1, L + 1):                     # kernels up the network
                var[ell] = Phi[ell - 1][0][0, 0]
                Phi[ell][m] = ev("phi", m, ell)
            for ell in range(L, 0, -1):                     # and down
                G[ell][m] = ev("g", m, ell)
            K[m] = sum(np.diag(G[ell + 1][a]) * np.diag(Phi[ell][m - a])
                       for ell in range(L + 1) for a in range(0, m + 1, 2))
            Dl[m] = np.zeros(T)
            Dl[m][0] = y[0] if m == 0 else 0.0
            for i in range(1, T):
                Dl[m][i] = Dl[m][i - 1] - eta * sum(K[a][i - 1] * Dl[m - a][i - 1]
                                                    for a in range(0, m + 1, 2))
            if m > N - 2:
                continue
            for ell in range(1, L + 1):                     # responses up ...
                C[ell][m] = A[ell - 1][m] + eta * mask * sum(
                    Dl[a][None, :] * Phi[ell - 1][m - a] for a in range(0, m + 1, 2))
                A.setdefault(ell, {})[m] = ev("A", m, ell)
            for ell in range(L, 0, -1):                     # ... and down
                D[ell][m] = B[ell][m] + eta * mask * sum(
                    Dl[a][None, :] * G[ell + 1][m - a] for a in range(0, m + 1, 2))
                B.setdefault(ell - 1, {})[m] = ev("B", m, ell)
        st = lambda X, ls, ms: np.stack([np.stack([X[ell][m] for ell in ls]) for m in ms])  # noqa: E731
        resp = list(range(0, N - 1, 2))
        return {"phi": st(Phi, range(1, L + 1), orders), "g": st(G, range(1, L + 1), orders),
                "A": st(A, range(0, L + 1), resp) if resp else np.zeros((0, L + 1, T, T)),
                "B": st(B, range(0, L + 1), resp) if resp else np.zeros((0, L + 1, T, T)),
                "ntk": np.stack([K[m] for m in orders]),
                "delta": np.stack([Dl[m] for m in orders]),
                "f": np.stack([(y[0] if m == 0 else 0.0) - Dl[m] for m in orders])}


# ---------------------------------------------------------------------------- printing
_DUMMY_TEX = "ijkpqvw"


def _mirror(net):
    return _canon((), (), _relabel(((), (), net), {"t": "s", "s": "t"})[2])[2]


def _fold(terms: dict) -> dict:
    r"""``X`` with ``terms = X(t,s) + X(s,t)`` for a kernel symmetric in its two times: each
    mirrored pair of terms kept once with the mean of their coefficients, a self-mirrored term
    with half of its own."""
    out: dict = {}
    for key0 in sorted(terms):
        mom, p, net = key0
        mk0 = (mom, p, _mirror(net))
        key, mk = max(key0, mk0), min(key0, mk0)         # the representative read from t
        if key in out:
            continue
        c = (terms[key] + terms.get(mk, 0)) / 2 if mk != key else terms[key] / 2
        if c != 0:
            out[key] = c
    return out


def _leaves(net):
    """Summed labels met once, as the column of a driver: printed as its row sum ``c``, ``d``."""
    count: dict = {}
    for _, a, b in net:
        for lb in (a, b):
            count[lb] = count.get(lb, 0) + 1
    return {b for name, a, b in net if name[0] in "CD" and _is_dummy(b) and count[b] == 1 and a != b}


def _net_parts(net, tex: bool):
    """``(summed labels, factors)`` of a network, factors in reading order (from t, then s)."""
    leaves = _leaves(net)
    dummies = sorted({lb for _, a, b in net for lb in (a, b) if _is_dummy(lb)} - leaves, key=int)
    names = {d: _DUMMY_TEX[k] for k, d in enumerate(dummies)}
    lab = lambda x: names.get(x, x)                                       # noqa: E731
    order = sorted(net, key=lambda m: (0 if "t" in m[1:] else 1 if "s" in m[1:] else 2,
                                       min((int(x) for x in m[1:] if _is_dummy(x)), default=-1), m))
    out = []
    for name, a, b in order:
        kind, m = name[0], name[1:]
        if kind in _SYMMETRIC and (a, b) == ("s", "t"):
            a, b = b, a
        if b in leaves:
            out.append((f"{kind.lower()}_{{{m}}}({lab(a)})" if tex else f"{kind.lower()}_{m}({lab(a)})"))
            continue
        if tex:
            sym = {"C": rf"\tilde C_{{{m}}}", "D": rf"\tilde D_{{{m}}}", "P": rf"\Phi^{{\ell-1}}_{{{m}}}",
                   "G": rf"G^{{\ell+1}}_{{{m}}}", "I": r"\delta"}[kind]
        else:
            sym = {"C": f"C~_{m}", "D": f"D~_{m}", "P": f"Phi^(l-1)_{m}", "G": f"G^(l+1)_{m}",
                   "I": "delta"}[kind]
        out.append(f"{sym}({lab(a)},{lab(b)})")
    # a repeated factor as a power: c_0(t)^2
    powers = []
    for f in out:
        if f not in [x for x, _ in powers]:
            powers.append((f, out.count(f)))
    out = [f if p == 1 else (f"{f}^{{{p}}}" if tex else f"{f}^{p}") for f, p in powers]
    return [names[d] for d in dummies], out


def _net_tex(net) -> str:
    summed, fac = _net_parts(net, True)
    body = r"\,".join(fac) if fac else "1"
    return (rf"\sum_{{{','.join(summed)}}}" if summed else "") + body


def _net_txt(net) -> str:
    summed, fac = _net_parts(net, False)
    body = " ".join(fac) if fac else "1"
    return (f"sum_({','.join(summed)}) " if summed else "") + body


def _prime(k: int, tex: bool) -> str:
    if tex:
        return r"\phi" + ("'" * k if k <= 3 else f"^{{({k})}}")
    return "phi" + ("'" * k if k <= 3 else f"^({k})")


def _moment(mom, tex: bool) -> str:
    parts = []
    for k in sorted(set(mom)):
        p = mom.count(k)
        base = _prime(k, tex)
        if p > 1:
            base = (f"{{{base}}}^{{{p}}}" if "^" in base else f"{base}^{{{p}}}") if tex else f"{base}^{p}"
        parts.append(base)
    if tex:
        return r"\langle " + r"\,".join(parts) + r"\rangle_{\ell}"
    return "<" + " ".join(parts) + ">_l"


def _frac(c: Fraction, tex: bool) -> str:
    c = abs(c)
    if c == 1:
        return ""
    if c.denominator == 1:
        return f"{c.numerator}" + (r"\," if tex else " ")
    return (rf"\tfrac{{{c.numerator}}}{{{c.denominator}}}\," if tex else f"{c.numerator}/{c.denominator} ")


def _rhs(terms: dict, tex: bool, width: float) -> str:
    """Terms grouped by (moment, power of G): ``<...> G [c1 w1 + c2 w2 ...]``, brackets split so
    each fits ``width``."""
    from effth.printing.formula import rendered_width

    groups: dict = {}
    for (mom, p, net), c in sorted(terms.items(), key=lambda kv: (kv[0][0], kv[0][1], len(kv[0][2]), kv[0][2])):
        groups.setdefault((mom, p), []).append((c, net))
    pieces = []
    for (mom, p), items in groups.items():
        if tex:
            gp = "" if p == 0 else (r"G^{\ell+1}_{0}\," if p == 1 else rf"(G^{{\ell+1}}_{{0}})^{{{p}}}\,")
        else:
            gp = "" if p == 0 else ("G^(l+1)_0 " if p == 1 else f"(G^(l+1)_0)^{p} ")
        head = gp + _moment(mom, tex)
        common = Fraction(1)
        if all(c == items[0][0] for c, _ in items):
            common = items[0][0]
        inner = [(c / common, _net_tex(n) if tex else _net_txt(n)) for c, n in items]
        # the bracket is split into pieces that each fit the line
        chunks, cur = [], []
        for c, s in inner:
            cand = cur + [(c, s)]
            if cur and tex and rendered_width(_join(cand, tex)) > width - rendered_width(head) - 8:
                chunks.append(cur)
                cur = [(c, s)]
            else:
                cur = cand
        chunks.append(cur)
        for ch in chunks:
            body = _join(ch, tex)
            single = len(ch) == 1
            if single:
                c = ch[0][0] * common
                sign = "-" if c < 0 else "+"
                pieces.append((sign, _frac(c, tex) + head + (r"\," if tex else " ") + ch[0][1]))
            else:
                sign = "-" if common < 0 else "+"
                br = (rf"\big[{body}\big]" if tex else f"[{body}]")
                pieces.append((sign, _frac(common, tex) + head + (r"\," if tex else " ") + br))
    out = ""
    for k, (sign, s) in enumerate(pieces):
        out += (("-" if sign == "-" else "") if k == 0 else sign if tex else f" {sign} ") + s
    return out or "0"


def _join(items, tex: bool) -> str:
    out = ""
    for k, (c, s) in enumerate(items):
        sign = "-" if c < 0 else "+"
        lead = ("-" if sign == "-" else "") if k == 0 else (sign if tex else f" {sign} ")
        out += lead + _frac(c, tex) + s
    return out


def _lazy_arg(x: str, k: int) -> str:
    """A lazy kernel is constant in time: its order-0 entry printed without arguments."""
    if k == 0 and not x.startswith((r"\Delta", "Delta")):
        return x[:x.rindex("(")]
    return x


def _cauchy(m: int, left: str, right: str, tex: bool) -> str:
    r""":math:`\sum_{a+b=m}X_a Y_b` spelled out; ``left``/``right`` templates with ``{k}``."""
    parts = [_lazy_arg(left.format(k=a), a) + (r"\," if tex else " ") + _lazy_arg(right.format(k=m - a), m - a)
             for a in range(0, m + 1, 2)]
    return "+".join(parts) if tex else " + ".join(parts)


def _lines(fm: "DeepSeriesFormulas", tex: bool, width: float) -> list:
    N, L = fm.order, fm.hidden_layers
    terms = fm.printed_terms()
    out = []
    if tex:
        out.append(r"\text{order }\gamma_0^{0}:")
        out.append(r"\Phi^{\ell}_{0}=\langle\phi^{2}\rangle_{\ell},\quad G^{\ell}_{0}=G^{\ell+1}_{0}"
                   r"\langle\phi'^{2}\rangle_{\ell},\quad \Phi^{0}_{0}=K^{x},\quad G^{L+1}_{0}=1")
    else:
        out.append("order gamma0^0:")
        out.append("Phi^l_0 = <phi^2>_l,  G^l_0 = G^(l+1)_0 <phi'^2>_l,  Phi^0_0 = Kx,  G^(L+1)_0 = 1")
    for m in range(0, N + 1, 2):
        if m:
            out.append(rf"\text{{order }}\gamma_0^{{{m}}}:" if tex else f"order gamma0^{m}:")
            for q, lhs_t, hat_t, lhs_x, hat_x in (
                    ("phi", rf"\Phi^{{\ell}}_{{{m}}}", rf"\hat\Phi^{{\ell}}_{{{m}}}", f"Phi^l_{m}", f"Phihat^l_{m}"),
                    ("g", rf"G^{{\ell}}_{{{m}}}", rf"\hat G^{{\ell}}_{{{m}}}", f"G^l_{m}", f"Ghat^l_{m}")):
                if tex:
                    out.append(f"{lhs_t}(t,s)={hat_t}(t,s)+{hat_t}(s,t)")
                    out.append(f"{hat_t}(t,s)=" + _rhs(terms[(q, m)], True, width))
                else:
                    out.append(f"{lhs_x}(t,s) = {hat_x}(t,s) + {hat_x}(s,t)")
                    out.append(f"{hat_x}(t,s) = " + _rhs(terms[(q, m)], False, width))
            if tex:
                out.append(rf"K_{{{m}}}(t)=\sum_{{\ell=0}}^{{L}}\big["
                           + _cauchy(m, r"G^{{\ell+1}}_{{{k}}}(t,t)", r"\Phi^{{\ell}}_{{{k}}}(t,t)", True)
                           + r"\big]")
                out.append(rf"\Delta_{{{m}}}(t_{{i+1}})=\Delta_{{{m}}}(t_{{i}})-\eta\big["
                           + _cauchy(m, r"K_{{{k}}}(t_i)", r"\Delta_{{{k}}}(t_i)", True)
                           + rf"\big],\quad \Delta_{{{m}}}(t_0)=0,\quad f_{{{m}}}=-\Delta_{{{m}}}")
            else:
                out.append(f"K_{m}(t) = sum_(l=0..L) ["
                           + _cauchy(m, "G^(l+1)_{k}(t,t)", "Phi^l_{k}(t,t)", False) + "]")
                out.append(f"Delta_{m}(t_(i+1)) = Delta_{m}(t_i) - eta ["
                           + _cauchy(m, "K_{k}(t_i)", "Delta_{k}(t_i)", False)
                           + f"],  Delta_{m}(t_0) = 0,  f_{m} = -Delta_{m}")
        else:
            out.append(r"K_{0}=\sum_{\ell=0}^{L}G^{\ell+1}_{0}\Phi^{\ell}_{0},\quad \Delta_{0}(t_{i+1})="
                       r"(1-\eta K_{0})\Delta_{0}(t_{i}),\quad \Delta_{0}(t_{0})=y" if tex else
                       "K_0 = sum_(l=0..L) G^(l+1)_0 Phi^l_0,  Delta_0(t_(i+1)) = (1 - eta K_0) Delta_0(t_i),"
                       "  Delta_0(t_0) = y")
        if m > N - 2:
            continue
        # the drivers of this order and the responses they give
        if tex:
            out.append(rf"\tilde C^{{\ell}}_{{{m}}}(t,s)=A^{{\ell-1}}_{{{m}}}(t,s)+\eta\,\Theta(t>s)\big["
                       + _cauchy(m, r"\Delta_{{{k}}}(s)", r"\Phi^{{\ell-1}}_{{{k}}}(t,s)", True) + r"\big]")
            out.append(rf"\tilde D^{{\ell}}_{{{m}}}(t,s)=B^{{\ell}}_{{{m}}}(t,s)+\eta\,\Theta(t>s)\big["
                       + _cauchy(m, r"\Delta_{{{k}}}(s)", r"G^{{\ell+1}}_{{{k}}}(t,s)", True) + r"\big]")
            out.append(rf"A^{{\ell}}_{{{m}}}(t,s)=" + _rhs(terms[("A", m)], True, width))
            out.append(rf"B^{{\ell-1}}_{{{m}}}(t,s)=" + _rhs(terms[("B", m)], True, width))
        else:
            out.append(f"C~^l_{m}(t,s) = A^(l-1)_{m}(t,s) + eta Theta(t>s) ["
                       + _cauchy(m, "Delta_{k}(s)", "Phi^(l-1)_{k}(t,s)", False) + "]")
            out.append(f"D~^l_{m}(t,s) = B^l_{m}(t,s) + eta Theta(t>s) ["
                       + _cauchy(m, "Delta_{k}(s)", "G^(l+1)_{k}(t,s)", False) + "]")
            out.append(f"A^l_{m}(t,s) = " + _rhs(terms[("A", m)], False, width))
            out.append(f"B^(l-1)_{m}(t,s) = " + _rhs(terms[("B", m)], False, width))
    lay = "" if L is None else (rf",\ L={L}" if tex else f", L = {L}")
    act = "" if fm.activation == r"\phi" else (rf",\ \phi=\mathrm{{{fm.activation}}}" if tex
                                                else f", phi = {fm.activation}")
    if tex:
        out += [
            r"\text{where}",
            r"&\text{one input; hidden layers }\ell=1..L" + lay
            + r",\ \text{times } t_i=i\eta,\ \text{NTK closure}" + act,
            r"&\langle F(\phi,\phi',\dots)\rangle_{\ell}=\int\!\frac{du\,e^{-u^2/2\Phi^{\ell-1}_{0}}}"
            r"{\sqrt{2\pi\Phi^{\ell-1}_{0}}}\,F(\phi(u),\phi'(u),\dots),\ "
            r"\phi^{(k)}:\ \text{derivatives of the activation}",
            r"&\text{in the layer-}\ell\text{ equations }\tilde C_{m}\equiv\tilde C^{\ell}_{m},\ "
            r"\tilde D_{m}\equiv\tilde D^{\ell}_{m},\ c_{m}(t)=\textstyle\sum_{s}\tilde C^{\ell}_{m}(t,s),\ "
            r"d_{m}(t)=\textstyle\sum_{s}\tilde D^{\ell}_{m}(t,s),\ \delta:\ \text{Kronecker delta}",
            r"&\text{summed times }i,j,k,\dots\text{ run over the grid (causality is in }\tilde C,\tilde D),\ "
            r"\Theta(t>s)=1\text{ for }t>s,\ 0\text{ otherwise}",
            r"&\text{boundary values: }\Phi^{0}_{m}=0,\ G^{L+1}_{m}=0\ (m\ge2),\ A^{0}_{m}=0,\ B^{L}_{m}=0",
            r"&X_{m}:\ \text{coefficient of }\gamma_0^{m},\ \Phi,G:\ \text{kernels},\ A,B:\ "
            r"\text{responses},\ K^{x}:\ \text{input kernel},\ y:\ \text{target},\ f:\ \text{prediction}",
        ]
    else:
        out += [
            "where",
            "one input; hidden layers l = 1..L" + lay + ", times t_i = i eta, NTK closure" + act,
            "<F>_l = E[F(phi(u), phi'(u), ...)], u ~ N(0, Phi^(l-1)_0); phi^(k): derivatives of the "
            "activation",
            "in the layer-l equations C~_m = C~^l_m, D~_m = D~^l_m, c_m(t) = sum_s C~^l_m(t,s), "
            "d_m(t) = sum_s D~^l_m(t,s), delta: Kronecker delta",
            "summed times i, j, k, ... run over the grid (causality is in C~, D~); Theta(t>s) = 1 for "
            "t > s, 0 otherwise",
            "boundary values: Phi^0_m = 0, G^(L+1)_m = 0 (m >= 2), A^0_m = 0, B^L_m = 0",
            "X_m: coefficient of gamma0^m; Phi, G: kernels; A, B: responses; Kx: input kernel; "
            "y: target; f: prediction",
        ]
    return out


def _methods():
    def printed_terms(self) -> dict:
        r"""The terms as printed: ``{(quantity, m): terms}``, the kernels folded
        (:math:`\Phi_m(t,s)=\hat\Phi_m(t,s)+\hat\Phi_m(s,t)`), the responses as derived."""
        return {k: (_fold(v) if k[0] in ("phi", "g") else dict(v)) for k, v in self.terms.items()}

    def lines(self, tex: bool = True, width: float = LINE_WIDTH) -> list:
        """Every printed line (LaTeX rows with ``=`` or raw rows starting ``&``; or plain text)."""
        return _lines(self, tex, width)

    def latex(self, form=None, env: str | None = None, width: float = LINE_WIDTH) -> str:
        """LaTeX rows (``align*`` body; ``env`` wraps it), broken at term boundaries."""
        from effth.dmft.series.formulas import align_rows

        return align_rows(self.lines(True, width), width, env)

    def text(self) -> str:
        """Plain text, no backslash."""
        return "\n".join(self.lines(False))

    provenance = property(lambda self: (
        f"Deep nonlinear network, one input: the gamma0-series through gamma0^{self.order} in "
        "Gaussian moments times time functions (Bordelon & Pehlevan (2022), App. M, App. P, NTK closure)"))
    return dict(printed_terms=printed_terms, lines=lines, latex=latex, text=text,
                provenance=provenance)


for _k, _v in _methods().items():
    setattr(DeepSeriesFormulas, _k, _v)


@public
def deep_series_formulas(order: int = 4, hidden_layers: int | None = None, *,
                         activation: str = r"\phi") -> DeepSeriesFormulas:
    r"""The one-input :math:`\gamma_0`-series of a deep nonlinear network through ``order``
    (any smooth activation, NTK closure; Bordelon & Pehlevan (2022), App. M, App. P with the
    responses kept), derived by :func:`derive_deep_terms`.

    Examples
    --------
    >>> fm = deep_series_formulas(4, 2)
    >>> "\\\\" in fm.text(), "Price" in fm.latex()
    (False, False)
    """
    if int(order) != order or order < 0 or order % 2:
        raise DomainError(f"order={order!r} must be a non-negative even integer: the series is even "
                          "in gamma0 (Bordelon & Pehlevan (2022), §5.2)")
    if hidden_layers is not None and (int(hidden_layers) != hidden_layers or hidden_layers < 1):
        raise DomainError(f"hidden_layers={hidden_layers!r} must be a positive integer")
    return DeepSeriesFormulas(int(order), None if hidden_layers is None else int(hidden_layers),
                              str(activation))
