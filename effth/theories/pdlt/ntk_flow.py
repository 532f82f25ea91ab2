r"""Layer-by-layer evaluation of the derived NTK-hierarchy recursions on a batch of inputs.

:func:`ntk_flow` compiles every recursion of :func:`~effth.theories.pdlt.ntk.derive_ntk` into an
array program over all sample labels (as :func:`~effth.theories.pdlt.flow` does for
:math:`K, V, G^{\{1\}}`):

* every derivative atom :math:`\langle\prod_k\sigma^{(p_k)}_{\delta_k}\rangle_{K^{(\ell)}}` becomes a
  table over the inputs (:class:`~effth.numerics.atom_tables.AtomTables`: one memoized
  integral per distinct integrand, on trapezoid grids shared per subset of samples);
* every tensor component with repeated labels, e.g. :math:`P_{\delta_0\delta_1\delta_2\delta_0}`,
  is a fancy-indexed view of the full tensor;
* the expression is lambdified once per process (common-subexpression elimination) and evaluated
  on broadcast index grids.

The kernel sector (:math:`K, V, G^{\{1\}}`) comes from :func:`~effth.theories.pdlt.flow`.  Layer 1
is :math:`\Theta^{(1)}=\lambda_b^{(1)}+\lambda_W^{(1)}XX^\top/n_0` with every finite-width tensor
zero (PDLT (8.23), (9.17), (11.57), (∞.11)).

Kinked activations: the recursions contain :math:`\sigma''` and higher derivatives, which are
distributions for ReLU-like :math:`\sigma`; :math:`\langle\sigma''\sigma''\rangle` diverges and
the :math:`1/n` expansion of the dNTK/ddNTK breaks down (PDLT §∞.1, spec chinf §3.6).
:func:`ntk_flow` therefore rejects kinked activations except for the sector that needs no second
derivative (``statistics=("Theta", "B")``), which it evaluates exactly; the linear activation
is smooth and fully supported.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable

import numpy as np
import sympy as sp

from effth._threads import blas_threads
from effth.algebra.expectation import GaussianExpectation
from effth.algebra.ntk_tensors import NTK_TENSORS
from effth.algebra.tensors import FourPointVertex, Kernel, NLOMetric, SampleTensor
from effth.errors import DomainError, NotDerivedError
from effth.numerics import gaussian_expectation
from effth.numerics.atom_tables import AtomTables

from ._derive import CB, CW
from ._ntk_forward import LAMBDA_B, LAMBDA_W
from .initialization import RATIO
from .kernel_flow import Flow, _grids, flow
from .ntk import NTK_STATISTICS, derive_ntk

__all__ = ["ntk_flow", "NTKFlow", "NTKLayerStep", "learning_rates"]

_NAME = {cls: name for name, cls in NTK_TENSORS.items()}
_NAME[FourPointVertex] = "V"
_NAME[NLOMetric] = "G1"


class NTKLayerStep:
    r"""One derived NTK-hierarchy recursion compiled into an array program over all sample labels.

    Attributes
    ----------
    recursion : NTKRecursion
    atoms : list of tuple
        Atom factor patterns ``((label position, order), ...)``.
    reads : set of str
        Layer-:math:`\ell` tensors the step reads (``"V"``, ``"G1"``, ``"Theta"``, ...).
    max_order : int
        Highest activation derivative in the atoms.
    """

    def __init__(self, statistic: str) -> None:
        rec = derive_ntk(statistic)
        self.recursion = rec
        self.statistic = statistic
        pos = {lab: i for i, lab in enumerate(rec.labels)}
        expr = sp.expand(rec.expr)
        reps: dict = {}
        self._inputs: list[tuple[sp.Symbol, Any]] = []
        self.atoms: list[tuple] = []
        for atom in expr.atoms(GaussianExpectation):
            samples, factors = atom.to_numeric()
            if any(kind != "sigma" for _, kind, _ in factors):
                raise NotDerivedError(f"unexpected z factor in {atom}")
            key = tuple(sorted((pos[samples[s]], o) for s, _, o in factors))
            s = sp.Symbol(f"_a{len(self._inputs)}")
            self._inputs.append((s, ("atom", key)))
            self.atoms.append(key)
            reps[atom] = s
        body = expr.xreplace(reps)
        self.reads = set()
        for t in body.atoms(SampleTensor):
            if isinstance(t, Kernel):
                raise NotDerivedError(f"{statistic}: bare kernel component {t} in the recursion")
            name = _NAME[type(t)]
            self.reads.add(name)
            s = sp.Symbol(f"_a{len(self._inputs)}")
            self._inputs.append((s, ("tensor", name, tuple(pos[a] for a in t.indices))))
            reps[t] = s
        body = body.xreplace({t: reps[t] for t in body.atoms(SampleTensor)})
        self.params = tuple(sp.Symbol(p) for p in ("C_W", "C_b", "lambda_b", "lambda_W", "ratio"))
        body = body.xreplace(dict(zip((CW, CB, LAMBDA_B, LAMBDA_W, RATIO), self.params)))
        leftover = body.free_symbols - set(self.params) - {s for s, _ in self._inputs}
        if leftover:
            raise NotDerivedError(f"{statistic}: symbols not mapped to arrays: {leftover}")
        self._fn: Callable = sp.lambdify([s for s, _ in self._inputs] + list(self.params), body,
                                         modules="numpy", cse=True)
        self.rank = len(rec.labels)
        self.max_order = max((o for key in self.atoms for _, o in key), default=0)

    def __call__(self, N: int, tables: AtomTables, tensors: dict, params: dict) -> np.ndarray:
        """Evaluate on all labels: an array of shape ``(N,) * rank``."""
        grids = _grids(N, self.rank)
        args = []
        for _, key in self._inputs:
            if key[0] == "atom":
                fac = key[1]
                labs = sorted({p for p, _ in fac})
                args.append(tables.table(fac)[tuple(grids[p] for p in labs)])
            else:
                _, name, labs = key
                args.append(tensors[name][tuple(grids[p] for p in labs)])
        vals = [np.float64(params[k]) for k in ("c_w", "c_b", "lambda_b", "lambda_w", "ratio")]
        with np.errstate(over="ignore", invalid="ignore"):
            out = self._fn(*args, *vals)
        return np.broadcast_to(out, (N,) * self.rank).copy()


@lru_cache(maxsize=None)
def ntk_layer_step(statistic: str) -> NTKLayerStep:
    """The compiled step of one statistic (compiled once per process)."""
    return NTKLayerStep(statistic)


def _closure(statistics) -> tuple:
    """The statistics needed to iterate ``statistics`` (their layer-ℓ inputs), in step order."""
    need = set(statistics)
    while True:
        more = set()
        for s in need:
            more |= {r for r in ntk_layer_step(s).reads if r in NTK_TENSORS} - need
        if not more:
            break
        need |= more
    return tuple(s for s in NTK_STATISTICS if s in need)


@dataclass(frozen=True)
class NTKFlow:
    r"""Layer-by-layer NTK hierarchy on a batch of inputs.

    Attributes
    ----------
    kernel : Flow
        The kernel sector :math:`K, V, G^{\{1\}}` (:func:`~effth.theories.pdlt.flow`).
    tensors : dict
        ``name -> ndarray (L, N, ...)`` for every computed statistic (``"Theta"``, ``"H1"``,
        ``"A"``, ... in the book's slot order; layer :math:`\ell` at index :math:`\ell-1`).
    lambda_b, lambda_w : ndarray (L,)
        Learning rates :math:`\lambda_b^{(\ell)}, \lambda_W^{(\ell)}` of every layer.
    layers : ndarray (L,)
    """

    kernel: Flow
    tensors: dict
    lambda_b: np.ndarray
    lambda_w: np.ndarray
    layers: np.ndarray
    table_error: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def __getitem__(self, key: str) -> np.ndarray:
        if key in self.tensors:
            return self.tensors[key]
        return self.kernel[key]

    def ntk_mean_at_width(self, widths: Any = None) -> np.ndarray:
        r""":math:`\Theta^{(\ell)}+H^{\{1\}(\ell)}/n_{\ell-1}` for every layer (PDLT (9.3)).

        Parameters
        ----------
        widths : int or sequence, optional
            Hidden widths :math:`n_1..n_{L-1}` (default: the network's).
        """
        from .kernel_flow import _prev_widths

        if "H1" not in self.tensors:
            raise DomainError("H1 was not computed (pass statistics including 'H1')")
        n_prev = _prev_widths(self.kernel, widths)
        return self.tensors["Theta"] + self.tensors["H1"] / n_prev[:, None, None]

    def __repr__(self) -> str:
        L, N = self.tensors["Theta"].shape[:2]
        return (f"NTKFlow(layers=1..{L}, inputs={N}, activation={self.kernel.activation!r}, "
                f"statistics={sorted(self.tensors)})")


def learning_rates(schedule: str, depth: int, lambda_b: float = 1.0, lambda_w: float = 1.0,
                   p_perp: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    r"""Per-layer learning rates :math:`\lambda_b^{(\ell)}, \lambda_W^{(\ell)}`, :math:`\ell=1..L`.

    Parameters
    ----------
    schedule : {"uniform", "scale-invariant", "k-star-zero"}
        * ``"uniform"``: :math:`\lambda^{(\ell)}=\tilde\lambda`;
        * ``"scale-invariant"``: the equivalence principle for the scale-invariant class
          (PDLT (9.94)): :math:`\lambda_b^{(\ell)}=\tilde\lambda_b/L`,
          :math:`\lambda_W^{(\ell)}=\tilde\lambda_W/L`;
        * ``"k-star-zero"``: for the :math:`K^\star=0` class (PDLT (9.95)):
          :math:`\lambda_b^{(\ell)}=\tilde\lambda_b\,\ell^{-p_\perp}L^{p_\perp-1}`,
          :math:`\lambda_W^{(\ell)}=\tilde\lambda_W(L/\ell)^{p_\perp-1}` (odd :math:`\sigma`:
          :math:`p_\perp=1`, (9.96)).
    depth : int
    lambda_b, lambda_w : float
        :math:`\tilde\lambda_b, \tilde\lambda_W` (:math:`\lambda_W` is the width-rescaled rate:
        the per-weight rate is :math:`\lambda_W^{(\ell)}/n_{\ell-1}`, PDLT (8.6)).
    p_perp : float
        :math:`p_\perp=b_1/a_1` for ``"k-star-zero"``.

    Returns
    -------
    (ndarray, ndarray)
        :math:`\lambda_b^{(\ell)}` and :math:`\lambda_W^{(\ell)}` for :math:`\ell=1..L`.
    """
    L = int(depth)
    if L != depth or L < 1:
        raise DomainError(f"depth must be a positive integer, got {depth!r}")
    if not (lambda_b >= 0 and lambda_w >= 0 and math.isfinite(lambda_b) and math.isfinite(lambda_w)):
        raise DomainError(f"learning rates must be finite and >= 0, got {lambda_b}, {lambda_w}")
    ell_ = np.arange(1, L + 1, dtype=float)
    if schedule == "uniform":
        return np.full(L, float(lambda_b)), np.full(L, float(lambda_w))
    if schedule == "scale-invariant":
        return np.full(L, lambda_b / L), np.full(L, lambda_w / L)
    if schedule == "k-star-zero":
        return (lambda_b * ell_ ** (-p_perp) * L ** (p_perp - 1.0),
                lambda_w * (L / ell_) ** (p_perp - 1.0))
    raise DomainError(f"schedule must be 'uniform', 'scale-invariant' or 'k-star-zero', got {schedule!r}")


def _per_layer(x: Any, L: int, name: str) -> np.ndarray:
    if np.isscalar(x):
        out = np.full(L, float(x))
    else:
        out = np.asarray(x, dtype=float).ravel()
        if out.size != L:
            raise DomainError(f"{name}: need one value or {L} (one per layer 1..L), got {out.size}")
    if not np.all(np.isfinite(out)) or np.any(out < 0):
        raise DomainError(f"{name} must be finite and >= 0, got {out}")
    return out


def ntk_flow(net: Any = None, X: Any = None, *, K1: Any = None, Theta1: Any = None,
             depth: int | None = None, activation: Any = None, c_w: Any = 1.0, c_b: Any = 0.0,
             ratios: Any = 1.0, lambda_b: Any = 1.0, lambda_w: Any = 1.0,
             statistics: Any = None, rtol: float = 1e-8) -> NTKFlow:
    r"""Iterate the derived NTK-hierarchy recursions through every layer.

    Either ``ntk_flow(net, X, lambda_b=..., lambda_w=...)`` or, from a first-layer kernel,
    ``ntk_flow(K1=..., Theta1=..., depth=..., activation=..., ...)``.

    Parameters
    ----------
    net : effth.MLP, optional
    X : array_like (N, n_0), optional
        Inputs: :math:`\Theta^{(1)}=\lambda_b^{(1)}+\lambda_W^{(1)}XX^\top/n_0` (PDLT (8.23)).
    K1, Theta1 : array_like (N, N), optional
        First-layer kernel and NTK (instead of ``net, X``).
    depth, activation, c_w, c_b, ratios
        As :func:`~effth.theories.pdlt.flow` (with ``K1``).
    lambda_b, lambda_w : float or sequence of L values
        :math:`\lambda_b^{(\ell)}, \lambda_W^{(\ell)}` for :math:`\ell=1..L` (PDLT (8.6); see
        :func:`learning_rates` for the depth prescriptions of chapter 9).
    statistics : sequence of str, optional
        Subset of :data:`~effth.theories.pdlt.ntk.NTK_STATISTICS` (default: all); the tensors
        they depend on are computed too.
    rtol : float
        Target relative accuracy of the Gaussian expectations.

    Returns
    -------
    NTKFlow

    Raises
    ------
    DomainError
        Kinked activation with statistics that need :math:`\sigma''` (the dNTK/ddNTK and the
        :math:`1/n` NTK sector are not defined by the :math:`1/n` expansion there), bad inputs
        or learning rates, overflow (the layer is named).
    """
    if net is not None:
        if X is None:
            raise DomainError("ntk_flow(net, X): inputs X are required with a network")
        X = np.asarray(X, dtype=float)
        if X.ndim != 2:
            raise DomainError(f"X must be (N_inputs, n_0), got shape {X.shape}")
        L = net.depth
        lb = _per_layer(lambda_b, L, "lambda_b")
        lw = _per_layer(lambda_w, L, "lambda_w")
        Th = lb[0] + lw[0] * (X @ X.T) / X.shape[1]
        _check_theta(Th, X.shape[0])
        kern = flow(net, X, rtol=rtol)
    else:
        if Theta1 is None:
            raise DomainError("ntk_flow with K1= needs Theta1= (the first-layer NTK)")
        L = int(depth) if depth is not None else 0
        lb = _per_layer(lambda_b, L, "lambda_b")
        lw = _per_layer(lambda_w, L, "lambda_w")
        Th = np.asarray(Theta1, dtype=float)
        _check_theta(Th, np.shape(K1)[0] if np.ndim(K1) == 2 else -1)
        kern = flow(K1=K1, depth=depth, activation=activation, c_w=c_w, c_b=c_b, ratios=ratios, rtol=rtol)
    N = kern.K.shape[1]
    wanted = tuple(NTK_STATISTICS) if statistics is None else tuple(statistics)
    for s in wanted:
        if s not in NTK_STATISTICS:
            raise DomainError(f"unknown statistic {s!r}; expected some of {NTK_STATISTICS}")
    stats = _closure(wanted)
    act = kern.activation
    kinked = not (act.is_smooth or act.is_polynomial)
    if kinked:
        bad = [s for s in stats if ntk_layer_step(s).max_order > 1]
        if bad:
            raise DomainError(
                f"{act!r} is kinked: {bad} need sigma'' or higher, which are distributions "
                "(<sigma'' sigma''> diverges); the 1/n expansion of the NTK fluctuations, dNTK and "
                "ddNTKs does not apply (PDLT §∞.1: kinks change the scaling). Only Theta and B are "
                "available for kinked activations.")
    out = {s: [np.zeros((N,) * (2 if s in ("Theta", "H1") else 4))] for s in stats}
    out["Theta"][0] = Th
    errs = [0.0]
    with blas_threads():
        for layer in range(1, L):
            K = kern.K[layer - 1]
            params = dict(c_w=kern.c_w[layer], c_b=kern.c_b[layer], lambda_b=lb[layer],
                          lambda_w=lw[layer], ratio=kern.ratios[layer - 1])
            prev = {s: out[s][-1] for s in stats}
            prev["V"] = kern.V[layer - 1]
            prev["G1"] = kern.G1[layer - 1]
            tables = (_KinkedTables if kinked else AtomTables)(K, act, rtol=rtol)
            for s in stats:
                val = ntk_layer_step(s)(N, tables, prev, params)
                if not np.all(np.isfinite(val)):
                    raise DomainError(f"{s} overflows or is undefined at layer {layer + 1}")
                out[s].append(val)
            errs.append(tables.max_error)
    tensors = {s: np.stack(v) for s, v in out.items()}
    return NTKFlow(kern, tensors, lb, lw, np.arange(1, L + 1), np.asarray(errs))


def _check_theta(Th: np.ndarray, N: int) -> None:
    if Th.shape != (N, N) or not np.all(np.isfinite(Th)):
        raise DomainError(f"Theta1 must be a finite ({N}, {N}) matrix matching K1, got shape {Th.shape}")
    if not np.allclose(Th, Th.T) or np.linalg.eigvalsh(Th).min() < -1e-9 * max(1.0, abs(Th).max()):
        raise DomainError("the first-layer NTK Theta1 is not symmetric positive semi-definite")


class _KinkedTables(AtomTables):
    """Atom tables for kinked sigma: products of sigma and sigma' only, each integrand by
    :func:`effth.gaussian_expectation` (closed forms for the piecewise-linear family)."""

    smooth_only = False

    def _evaluate(self, S: tuple, keys: list) -> None:
        pos = {s: i for i, s in enumerate(S)}
        KS = self.K[np.ix_(S, S)]
        for key in keys:
            fac = [(pos[s], "sigma", o) for s, o in key]
            self._cache[key] = float(gaussian_expectation(fac, KS, self.act, rtol=self.rtol))
