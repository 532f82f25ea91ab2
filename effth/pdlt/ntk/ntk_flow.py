r"""Layer-by-layer evaluation of the derived NTK-hierarchy recursions on a batch of inputs.

:func:`ntk_flow` compiles every recursion of :func:`~effth.pdlt.ntk.recursions.derive_ntk` into an
array program over all sample labels (as :func:`~effth.pdlt.flow` does for
:math:`K, V, G^{\{1\}}`):

* every derivative atom :math:`\langle\prod_k\sigma^{(p_k)}_{\delta_k}\rangle_{K^{(\ell)}}` becomes a
  table over the inputs (:class:`~effth.numerics.atom_tables.AtomTables`: all tables of a layer
  evaluated together, each subset of samples once for every integrand on it, one variable
  integrated out on shared rotated nodes);
* every tensor component with repeated labels, e.g. :math:`P_{\delta_0\delta_1\delta_2\delta_0}`,
  is a fancy-indexed view of the full tensor;
* the expression is lambdified once per process (common-subexpression elimination) and evaluated
  on broadcast index grids.

The kernel sector (:math:`K, V, G^{\{1\}}`) comes from :func:`~effth.pdlt.flow`, in
the same pass over the layers and only as far as the requested statistics read it:
``statistics=("Theta",)`` iterates :math:`K` and :math:`\Theta` alone (PDLT (4.118), (9.5)),
whose atoms :math:`\langle\sigma\sigma\rangle`, :math:`\langle\sigma'\sigma'\rangle` are
two-point tables over all pairs (closed forms where they exist,
:func:`effth.numerics.sample_tables.closed_pair_tables`; the :math:`\langle\sigma\sigma\rangle`
table of the kernel step is reused).  Layer 1
is :math:`\Theta^{(1)}=\lambda_b^{(1)}+\lambda_W^{(1)}XX^\top/n_0` with every finite-width tensor
zero (PDLT (8.23), (9.17), (11.57), (∞.11)).

Kinked activations (ReLU, leaky ReLU, the piecewise-linear family): the recursions contain
:math:`\sigma''` and higher derivatives, which are distributions (:math:`\sigma''=(a_+-a_-)
\delta(z)`).  For :math:`\Theta, H^{\{1\}}, A, B, D, F` every such atom comes from Stein's
identity acting on a product of :math:`\sigma` and :math:`\sigma'` (PDLT (8.70)–(8.71)), so

* at distinct, non-collinear samples the atoms are finite point-mass expectations
  (Gaussian conditioning on the Dirac parts, e.g. :math:`\langle\delta(z_1)\delta(z_2)\rangle
  =1/(2\pi\sqrt{\det K})`);
* at coincident labels single atoms diverge (:math:`\langle\delta(z)\delta(z)\rangle`), but they
  enter only in Leibniz sums :math:`\langle\partial^k_z[\sigma^{(p_0)}\sigma^{(q_0)}]\rangle`,
  :math:`p_0,q_0\le1`, which are finite; the diagonal tables hold values satisfying all of them
  (:func:`effth.numerics.sample_tables.leibniz_pair_tables`), which makes the result exact.

The dNTK :math:`P, Q` of the piecewise-linear family (PDLT (11.49), (11.52), §11.3) has the
four-sample atom :math:`\langle\sigma''_{\delta_0}\sigma'_{\delta_1}\sigma'_{\delta_2}
\sigma_{\delta_3}\rangle`: a point mass by Gaussian conditioning on :math:`z_{\delta_0}=0` where
:math:`\delta_0` is on its own, zero where :math:`\delta_0=\delta_3` (:math:`\sigma(0)=0`, PDLT
(11.67)–(11.71)), and undefined where :math:`\delta_0` shares its sample with a :math:`\sigma'`
only (:math:`\delta(z)\Theta(z)` needs :math:`\sigma'(0)`).  Those entries are NaN
(:func:`kinked_dntk_singular`); a single input has none (:math:`P\equiv0`, (11.74)).  The ddNTKs
:math:`R, S, T, U` contain :math:`\langle\sigma'^2\sigma''^2\rangle` or
:math:`\langle\sigma'^3\sigma'''\rangle`, which diverge (PDLT (∞.40)): refused.  The linear
activation is smooth and fully supported.
"""

from __future__ import annotations

from effth._signature import public

from effth._display import depth_text

import contextvars
import math
import threading
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Callable

import numpy as np
import sympy as sp

from effth._results import WeightLayers
from effth._validate import input_matrix, kernel_matrix
from effth.arch import resolve_depth
from effth.arch._common import per_layer
from effth.algebra.expectation import GaussianExpectation
from effth.algebra.ntk_tensors import NTK_TENSORS
from effth.algebra.tensors import FourPointVertex, Kernel, NLOMetric, SampleTensor
from effth.errors import DomainError, NotDerivedError
from effth.numerics import gaussian_expectation
from effth.numerics.atom_tables import AtomTables, dispatched_group
from effth.numerics.sample_blocks import SampleRestriction
from effth.numerics.sample_tables import closed_pair_tables, leibniz_pair_tables, pair_tables

from effth.pdlt.derivation.pipeline import CB, CW
from effth.pdlt.derivation.ntk_forward import LAMBDA_B, LAMBDA_W
from effth.pdlt.initialization.recursions import RATIO
from effth.pdlt.initialization.kernel_flow import (FLOW_NAMES, Flow, _flow, _grids, evaluate_terms, gather_labels, polynomial_terms, run_step, _html_table,
                          entry_atom, prepare_atoms, run_entries,
                          _layer_index, _relative, _widths_summary)
from effth.pdlt.ntk.recursions import NTK_STATISTICS, derive_ntk

__all__ = ["ntk_flow", "NTKFlow", "NTKLayerStep", "learning_rates", "kinked_dntk_singular",
           "restricted_flow_bytes"]

_NAME = {cls: name for name, cls in NTK_TENSORS.items()}
_NAME[FourPointVertex] = "V"
_NAME[NLOMetric] = "G1"


@public
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
        for atom in sorted(expr.atoms(GaussianExpectation), key=sp.default_sort_key):
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
        for t in sorted(body.atoms(SampleTensor), key=sp.default_sort_key):
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
        self.rank = len(rec.labels)
        # a polynomial step is evaluated term by term in place; any other is compiled whole
        self._terms = polynomial_terms(body, [s for s, _ in self._inputs], self.params)
        self._fn: Callable | None = None if self._terms is not None else sp.lambdify(
            [s for s, _ in self._inputs] + list(self.params), body, modules="numpy", cse=True)
        self.max_order = max((o for key in self.atoms for _, o in key), default=0)
        #: derivative orders (p, q) of the two-factor atoms (the two-point tables)
        self.pair_orders = {tuple(o for _, o in key) for key in self.atoms if len(key) == 2}

    def __call__(self, N: int, tables: AtomTables, tensors: dict, params: dict,
                 out: np.ndarray | None = None, entries: tuple | None = None) -> np.ndarray:
        """Evaluate on all labels: an array of shape ``(N,) * rank`` (written into ``out`` if
        given); with ``entries`` (``rank`` flat index arrays) only on those, chunk by chunk (the
        atoms of a restricted flow's tables read per entry, :meth:`_PairFirstTables.on_entries`)."""
        vals = [np.float64(params[k]) for k in ("c_w", "c_b", "lambda_b", "lambda_w", "ratio")]
        if entries is not None:
            return run_entries(self._terms, self._fn,
                               lambda ch: self._args(N, tables, tensors, None, ch), vals, N,
                               self.rank, out, entries)
        return run_step(self._terms, self._fn, self._args(N, tables, tensors, _grids(N, self.rank), None),
                        vals, N, self.rank, out, None)

    def _args(self, N: int, tables: Any, tensors: dict, grids: tuple | None,
              entries: tuple | None) -> list:
        """The step's arguments over all labels (``grids``) or on ``entries``."""
        whole = entries is None and self.rank == 2
        grids = entries if grids is None else grids
        per_entry = getattr(tables, "on_entries", None) if entries is not None else None
        args = []
        for _, key in self._inputs:
            if key[0] == "atom":
                fac = key[1]
                labs = sorted({p for p, _ in fac})
                if whole and labs == [0, 1]:
                    args.append(tables.table(fac))      # the table itself: no index copy
                    continue
                v = None if per_entry is None else per_entry(fac, tuple(labs), entries, N)
                args.append(v if v is not None else gather_labels(tables.table(fac), labs, N, grids, entries))
            else:
                _, name, labs = key
                if whole and tuple(labs) in ((0, 1), (1, 0)):   # a view, no index copy
                    args.append(tensors[name] if tuple(labs) == (0, 1) else tensors[name].T)
                    continue
                args.append(gather_labels(tensors[name], labs, N, grids, entries))
        return args


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


@public
@dataclass(frozen=True, repr=False)
class NTKFlow(WeightLayers):
    r"""Layer-by-layer NTK hierarchy on a batch of inputs.

    Read it as every effth result (``docs/conventions.md``): ``nf.value(name, layer=ℓ)`` with
    book layer numbers :math:`\ell=1..L`, ``nf.stderr(name, layer=ℓ)`` (``None``: a deterministic
    theory) and ``nf.layers``.  Names (each statistic is held only if computed; see
    ``statistics=`` of :func:`ntk_flow`):

    * ``"Theta"``: the NTK mean at infinite width :math:`\Theta^{(\ell)}_{\delta_1\delta_2}`
      (PDLT (8.63)/(9.5)), ``(N, N)``;
    * ``"H1"``: its :math:`1/n` correction :math:`H^{\{1\}(\ell)}_{\delta_1\delta_2}` (PDLT (9.3)),
      ``(N, N)``;
    * ``"H"``: the NTK mean at finite width, :math:`\mathbb E[\widehat H^{(\ell)}]=
      \Theta^{(\ell)}+H^{\{1\}(\ell)}/n_{\ell-1}` (PDLT (9.3); exactly :math:`\Theta^{(1)}` at layer
      1) at the network's widths or ``widths=``; ``(N, N)``; the name the NTK simulation uses
      for the measured mean;
    * ``"A"``, ``"B"`` (NTK variance, PDLT (8.97), (8.89)), ``"D"``, ``"F"`` (NTK–preactivation
      cross-correlation, PDLT (8.77), (8.79)), ``"P"``, ``"Q"`` (dNTK, PDLT (11.49), (11.52)),
      ``"R"``, ``"S"``, ``"T"``, ``"U"`` (ddNTKs, PDLT (∞.172)–(∞.176)): ``(N, N, N, N)`` in the
      book's slot order;
    * the kernel sector ``"K"``, ``"V"``, ``"G1"``, ``"G"`` as :class:`Flow`.

    Attributes
    ----------
    kernel : Flow
        The kernel sector :math:`K, V, G^{\{1\}}` (:func:`~effth.pdlt.flow`).
    tensors : dict
        ``name -> ndarray (L, N, ...)`` for every computed statistic (``"Theta"``, ``"H1"``,
        ``"A"``, ... in the book's slot order; layer :math:`\ell` at index :math:`\ell-1`).
    lambda_b, lambda_w : ndarray (L,)
        Learning rates :math:`\lambda_b^{(\ell)}, \lambda_W^{(\ell)}` of every layer.
    layers : tuple of int
        Book layer numbers held, :math:`(1, \dots, L)`.
    restrict : SampleRestriction or None
        Set when only the entries with at most ``restrict.max_test`` distinct test inputs were
        computed (``ntk_flow(..., n_train=, max_test=)``); the others are NaN.
    """

    kernel: Flow
    tensors: dict
    lambda_b: np.ndarray
    lambda_w: np.ndarray
    layers: tuple
    table_error: np.ndarray = field(default_factory=lambda: np.zeros(0))
    restrict: SampleRestriction | None = None

    def expanded(self, index: np.ndarray) -> "NTKFlow":
        """This flow of distinct inputs re-indexed to the inputs ``index`` maps them to."""
        from effth._validate import expand_samples
        from effth.pdlt.initialization.kernel_flow import expand_flow
        return NTKFlow(expand_flow(self.kernel, index),
                       {k: expand_samples(v, index, tuple(range(1, v.ndim)))
                        for k, v in self.tensors.items()},
                       self.lambda_b, self.lambda_w, self.layers, self.table_error, self.restrict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "layers", tuple(int(x) for x in np.asarray(self.layers).ravel()))

    @property
    def depth(self) -> int:
        """Number of weight layers :math:`L`."""
        return len(self.layers)


    @property
    def names(self) -> tuple:
        """Every name :meth:`value` answers for this result."""
        extra = ("H",) if "H1" in self.tensors else ()
        return tuple(s for s in NTK_STATISTICS if s in self.tensors) + extra + self.kernel.names

    def __getitem__(self, key: str) -> np.ndarray:
        if key in self.tensors:
            return self.tensors[key]
        return self.kernel[key]

    def value(self, name: str, layer: int | None = None, widths: Any = None) -> np.ndarray:
        r"""The prediction for ``name`` at book layer ``layer``.

        Parameters
        ----------
        name : str
            One of :attr:`names` (see the class docstring).
        layer : int
            Book layer number in :attr:`layers` (may be omitted only when one layer is held).
        widths : int or sequence of int, optional
            Hidden widths :math:`n_1..n_{L-1}` for ``"H"`` and ``"G"`` (default: the network's).

        Returns
        -------
        ndarray
            ``(N, N)`` for ``"Theta"``, ``"H1"``, ``"H"``, ``"K"``, ``"G1"``, ``"G"``;
            ``(N, N, N, N)`` otherwise.

        Raises
        ------
        DomainError
            A name not computed (the message lists those held), a layer not held, or no widths
            known for ``"H"``/``"G"``.
        """
        i = self._index(name, layer)
        if name in FLOW_NAMES:
            return self.kernel.value(name, layer=self.layers[i], widths=widths)
        if name == "H":
            return self.ntk_mean_at_width(widths)[i]
        if widths is not None:
            raise DomainError(f"widths= only applies to 'H' and 'G', not to {name!r}")
        return np.array(self.tensors[name][i])

    def stderr(self, name: str, layer: int | None = None) -> None:
        """``None``: a deterministic theory (the name and layer are checked)."""
        self._index(name, layer)
        return None

    def _index(self, name: str, layer: Any) -> int:
        if name in FLOW_NAMES:
            self.kernel._index(name, layer)          # names what was not requested
        if name not in self.names:
            raise DomainError(f"this NTKFlow holds {list(self.names)}, not {name!r}"
                              + (" (pass statistics= including it to ntk_flow)"
                                 if name in NTK_STATISTICS or name == "H" else ""))
        return _layer_index(self.layers, layer, "this NTKFlow")

    def ntk_mean_at_width(self, widths: Any = None) -> np.ndarray:
        r""":math:`\Theta^{(\ell)}+H^{\{1\}(\ell)}/n_{\ell-1}` for every layer (PDLT (9.3)); ``value("H")``.

        Parameters
        ----------
        widths : int or sequence, optional
            Hidden widths :math:`n_1..n_{L-1}` (default: the network's).
        """
        from effth.pdlt.initialization.kernel_flow import _prev_widths

        if "H1" not in self.tensors:
            raise DomainError("H1 was not computed (pass statistics including 'H1')")
        n_prev = _prev_widths(self.kernel, widths)
        return self.tensors["Theta"] + self.tensors["H1"] / n_prev[:, None, None]

    def __repr__(self) -> str:
        stats = [s for s in NTK_STATISTICS if s in self.tensors]
        return (f"NTKFlow(activation={self.kernel.activation.name!r}, {depth_text(self.depth)}, "
                f"inputs={self.kernel.K.shape[-1]}, widths={_widths_summary(self.kernel.widths)}, "
                f"statistics={' '.join(stats + list(self.kernel.statistics))}"
                + ("" if self.restrict is None else
                   f", n_train={self.restrict.n_train}, max_test={self.restrict.max_test}") + ")")

    def _repr_html_(self) -> str:
        stats = [s for s in NTK_STATISTICS if s in self.tensors]
        return _html_table("NTKFlow: NTK hierarchy by layer (PDLT ch. 8, 9, 11, ∞)", [
            ("activation", self.kernel.activation.name), ("depth L", self.depth),
            ("layers", f"{self.layers[0]}..{self.layers[-1]}"),
            ("inputs N", self.kernel.K.shape[-1]),
            ("hidden widths", _widths_summary(self.kernel.widths)),
            ("statistics", ", ".join(stats + list(self.kernel.statistics))),
            ("learning rates", "uniform" if np.ptp(self.lambda_b) == 0 and np.ptp(self.lambda_w) == 0
             else "per layer")])


@public
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
    """Per-layer learning rates as an array (effth.arch.per_layer: finite, non-negative)."""
    return np.asarray(per_layer(x, L, name), dtype=float)


@public
def ntk_flow(net: Any = None, X: Any = None, *, K1: Any = None, Theta1: Any = None,
             depth: int | None = None, hidden_layers: int | None = None, activation: Any = None,
             c_w: Any = 1.0, c_b: Any = 0.0, ratios: Any = 1.0, lambda_b: Any = 1.0,
             lambda_w: Any = 1.0, statistics: Any = None, rtol: float = 1e-8,
             progress: bool | None = None, n_train: int | None = None,
             max_test: int = 1, atom_cache: list | None = None,
             closure: str | None = None) -> NTKFlow:
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
    depth, hidden_layers, activation, c_w, c_b, ratios
        As :func:`~effth.pdlt.flow` (with ``K1``; ``c_w``, ``c_b``, ``ratios`` of
        another length than documented there raise :class:`~effth.errors.DomainError`).
    lambda_b, lambda_w : float or sequence of L values
        :math:`\lambda_b^{(\ell)}, \lambda_W^{(\ell)}` for :math:`\ell=1..L` (PDLT (8.6); see
        :func:`learning_rates` for the depth prescriptions of chapter 9).
    statistics : str or sequence of str, optional
        Subset of :data:`~effth.pdlt.ntk.recursions.NTK_STATISTICS` (default: all); the tensors
        they depend on are computed too, and of the kernel sector only what they read:
        ``("Theta",)`` iterates :math:`K` and :math:`\Theta` alone (PDLT (4.118), (9.5); the result
        holds ``"K"`` and ``"Theta"``, and ``value("V")`` raises
        :class:`~effth.errors.DomainError`), at :math:`O(N^2)` cost and memory per layer.
    rtol : float
        Target relative accuracy of the Gaussian expectations.
    progress : bool or None
        Draw a progress bar over the layers (``None``: when stderr is a terminal or in a notebook,
        unless ``EFFTH_PROGRESS=0``).
    n_train, max_test : int, optional
        Inputs ``0..n_train-1`` are training inputs, the rest test inputs: compute only the
        entries whose labels hold at most ``max_test`` distinct test inputs (the others are NaN;
        :math:`K` and :math:`\Theta` are computed in full).  These entries are closed under the
        layer recursions, so they are exact; the trained prediction at order :math:`1/n` reads
        only them (PDLT (∞.155)–(∞.160): ``max_test=1``; its covariance: ``max_test=2``).  With
        :math:`N_\mathcal A` training and :math:`N_\mathcal B` test inputs the four-sample atoms
        cost :math:`\binom{N_\mathcal A}{4}+N_\mathcal B\binom{N_\mathcal A}{3}` subsets
        instead of :math:`\binom{N_\mathcal A+N_\mathcal B}{4}`.
    atom_cache : list, optional
        With ``n_train``: a list shared by flows of the same network, inputs and ``rtol`` (e.g.
        ``max_test=1``, then ``max_test=2``).  The flow reuses the subsets of samples whose atoms
        the list holds (one compact snapshot per layer: about 30 numbers per subset of four
        samples) instead of integrating them again, and leaves its own in it.
    closure : {"exact", "cumulant"}, optional
        Residual ``net`` only (default ``"exact"``): see
        :func:`~effth.pdlt.residual.residual_ntk_flow`.  The plain hierarchy is exact at
        :math:`O(1/n)`.

    Returns
    -------
    NTKFlow

    Raises
    ------
    DomainError
        Kinked activation with the ddNTK statistics (divergent; :math:`\Theta, H^{\{1\}}, A, B,
        D, F` and, for the piecewise-linear family, :math:`P, Q` are evaluated, the entries of
        :math:`P, Q` that need the undefined :math:`\sigma'(0)` NaN: :func:`kinked_dntk_singular`),
        collinear inputs with a kinked activation, bad inputs or learning rates, overflow (the
        layer is named).
    """
    from effth._validate import restriction_arguments
    restriction_arguments(n_train, max_test)
    if getattr(net, "residual", False):      # PDLT (B.4): the derived residual hierarchy
        from effth.pdlt.residual import residual_ntk_flow
        if n_train is not None or K1 is not None or Theta1 is not None or atom_cache is not None:
            raise DomainError("a residual net: ntk_flow(net, X, lambda_b=, lambda_w=, statistics=, "
                              "rtol=) (no K1=, Theta1=, n_train=, atom_cache=)")
        return residual_ntk_flow(net, X, lambda_b=lambda_b, lambda_w=lambda_w,
                                 statistics=statistics, rtol=rtol,
                                 closure="exact" if closure is None else closure)
    if closure is not None:
        raise DomainError("closure= applies to a residual net (PDLT (B.4)); the plain MLP's "
                          "hierarchy is exact at O(1/n)")
    if net is None and K1 is None:            # before the symbolic closure
        raise DomainError("ntk_flow needs (net, X) or K1= with Theta1=, depth= and activation=")
    if n_train is None:       # repeated inputs evaluated once: their rows are identical
        from effth.pdlt.initialization.kernel_flow import distinct_inputs
        dup = distinct_inputs(net, X, K1, Theta1)
        if dup is not None:
            index, Xd, K1d, T1d = dup
            nf = ntk_flow(net, Xd, K1=K1d, Theta1=T1d, depth=depth, hidden_layers=hidden_layers,
                          activation=activation, c_w=c_w, c_b=c_b, ratios=ratios,
                          lambda_b=lambda_b, lambda_w=lambda_w, statistics=statistics, rtol=rtol,
                          progress=progress)
            return nf.expanded(index)
    call_args = dict(net=net, X=X, K1=K1, Theta1=Theta1, depth=depth, hidden_layers=hidden_layers,
                     activation=activation, c_w=c_w, c_b=c_b, ratios=ratios, lambda_b=lambda_b,
                     lambda_w=lambda_w, statistics=statistics, rtol=rtol, progress=progress,
                     n_train=n_train, max_test=max_test, atom_cache=atom_cache)
    wanted = tuple(NTK_STATISTICS) if statistics is None else (
        (statistics,) if isinstance(statistics, str) else tuple(statistics))
    for s in wanted:
        if s not in NTK_STATISTICS:
            raise DomainError(f"unknown statistic {s!r}; expected some of {NTK_STATISTICS}")
    if net is not None and X is not None:   # bad inputs refused before the (symbolic) closure
        X = input_matrix(X, "X")
        with np.errstate(over="ignore", invalid="ignore"):
            gram = X @ X.T / X.shape[1]
        if not np.isfinite(gram).all():
            raise DomainError(f"X overflows: inputs up to {float(np.max(np.abs(X))):.3g} make the "
                              "first-layer kernels lambda_b + lambda_W X X^T / n_0 infinite; rescale X")
    elif net is None and K1 is not None:
        L0 = resolve_depth(depth, hidden_layers, minimum=1)
        _per_layer(lambda_b, L0, "lambda_b"), _per_layer(lambda_w, L0, "lambda_w")
        n_k1 = kernel_matrix(K1, "K1").shape[0]
        from effth.pdlt.initialization.kernel_flow import _resolve      # C_W, C_b, ratios too
        _resolve(None, None, K1, depth, hidden_layers, activation, c_w, c_b, ratios)
        if Theta1 is not None:
            _check_theta(kernel_matrix(Theta1, "Theta1"), n_k1)
    if net is not None:
        n_in, L_in = (None if X is None else X.shape[0]), net.depth
    else:
        n_in, L_in = kernel_matrix(K1, "K1").shape[0], resolve_depth(depth, hidden_layers, minimum=1)
    if n_in is not None and any(s not in ("Theta", "H1") for s in wanted):   # N^4: refuse up front
        from effth._validate import check_memory
        if n_train is not None and n_train <= n_in:
            check_memory(restricted_flow_bytes(n_in, L_in, n_train, max_test),
                         f"the four-index NTK statistics of {n_in} inputs through {L_in} layers "
                         f"at the entries with at most {max_test} of the {n_in - n_train} test "
                         "inputs (ntk_flow.restricted_flow_bytes)",
                         "use fewer inputs (the memory grows as N^4), or statistics=('Theta',)")
        else:
            check_memory(_PEAK_COPIES * L_in * float(n_in) ** 4 * 8.0,
                         f"the four-index NTK statistics of {n_in} inputs through {L_in} layers",
                         "use fewer inputs (the memory grows as N^4), or statistics=('Theta',)")
    stats = _closure(wanted)
    # the kernel sector: what the NTK steps read (V, G1), K always
    kstats = ("K",) + tuple(sorted({r for s in stats for r in ntk_layer_step(s).reads} & {"V", "G1"}))
    if net is not None:
        if X is None:
            raise DomainError("ntk_flow(net, X): inputs X are required with a network")
        X = input_matrix(X, "X")
        if depth is not None or hidden_layers is not None or activation is not None:
            raise DomainError("ntk_flow(net, X) takes depth and activation from net: do not pass "
                              "depth=, hidden_layers= or activation= as well")
        L = net.depth
        lb = _per_layer(lambda_b, L, "lambda_b")
        lw = _per_layer(lambda_w, L, "lambda_w")
        Th = lb[0] + lw[0] * (X @ X.T) / X.shape[1]
        _check_theta(Th, X.shape[0])     # lambda_b + lambda_W X X^T/n_0: PSD by construction
        from effth.arch._common import require_plain
        require_plain(net, "ntk_flow")
        act = net.act
        kw: dict = {"net": net, "X": X}
    else:
        if Theta1 is None:
            raise DomainError("ntk_flow with K1= needs Theta1= (the first-layer NTK)")
        L = resolve_depth(depth, hidden_layers, minimum=1)
        lb = _per_layer(lambda_b, L, "lambda_b")
        lw = _per_layer(lambda_w, L, "lambda_w")
        Th = kernel_matrix(Theta1, "Theta1")
        _check_theta(Th, kernel_matrix(K1, "K1").shape[0])
        from effth.activations import get_activation

        act = get_activation(activation) if activation is not None else None
        kw = {"K1": K1, "depth": L, "activation": activation, "c_w": c_w, "c_b": c_b, "ratios": ratios}
    kinked = act is not None and not (act.is_smooth or act.is_polynomial)
    if kinked:
        bad = [s for s in stats if ntk_layer_step(s).max_order > 1
               and s not in _KINKED_OK + _KINKED_DNTK]
        if bad:
            raise DomainError(
                f"{act!r} is kinked: {bad} contain <sigma'' sigma''> at one sample or "
                "sigma''' = delta' (e.g. <sigma'^2 sigma''^2> = <Theta(z)^2 delta(z)^2>), which "
                "diverge (PDLT (∞.40): the ddNTKs of kinked activations do not exist, §∞.3). "
                f"Available for kinked activations: {list(_KINKED_OK + _KINKED_DNTK)}.")
        dntk = [s for s in stats if s in _KINKED_DNTK]
        if dntk and act.family != "piecewise_linear":
            raise DomainError(
                f"{act!r}: the dNTK statistics {dntk} of kinked activations are evaluated for the "
                "piecewise-linear family (kink at 0, sigma(0) = 0: relu, leaky_relu, ...) only. "
                f"Available here: {list(_KINKED_OK)}.")
        if dntk and _KINK_SLOPE.get() is None:
            return _kinked_dntk_flow(call_args, dntk, act)
    N = Th.shape[0]
    if atom_cache is not None and (n_train is None or not isinstance(atom_cache, list)):
        raise DomainError("atom_cache= is a list shared by flows restricted with n_train= (got "
                          + (f"{type(atom_cache).__name__})" if n_train is not None else
                             "no n_train=)"))
    if stats == ("Theta",) and n_train is None:
        # K and Theta alone from closed forms: fused row blocks on the worker threads
        fast = _theta_flow_blocked(kw, Th, lb, lw, progress)
        if fast is not None:
            return fast
    restrict = None if n_train is None else SampleRestriction(n_train, max_test)
    if restrict is not None:
        restrict.check(N)
    ent4 = None if restrict is None else restrict.entries(N, 4)
    # every layer written in place (no list of layers stacked at the end: a copy of L N^2 floats);
    # a restricted flow's layer-1 tensors are exact zeros, the rest NaN until computed
    out = {}
    for s in stats:
        out[s] = np.zeros((L,) + (N,) * (2 if s in ("Theta", "H1") else 4))
        if restrict is not None:
            out[s][1:] = np.nan
    out["Theta"][0] = Th
    errs = [0.0]
    pair_orders = set().union(*(ntk_layer_step(s).pair_orders for s in stats))
    atoms = sorted({a for s in stats for a in ntk_layer_step(s).atoms})

    def step(layer: int, K: np.ndarray, tabs: dict, V: Any, G1: Any, c_w_: float, c_b_: float,
             r_: float) -> None:
        params = dict(c_w=c_w_, c_b=c_b_, lambda_b=lb[layer], lambda_w=lw[layer], ratio=r_)
        prev = {s: out[s][layer - 1] for s in stats}
        prev["V"] = V
        prev["G1"] = G1
        # two-point tables of K shared with the kernel step: exact expectations for smooth sigma,
        # and for kinked sigma the (0, 0) one (the others follow kinked_pair_tables' convention)
        given = {o: T for o, T in tabs.items()
                 if o not in ("four", "atoms") and (o == (0, 0) or not kinked)}
        tables = _PairFirstTables(K, act, rtol, kinked, pair_orders, given, tabs.get("atoms"), restrict)
        tables.prepare(atoms)          # every atom table of the layer in one shared evaluation
        for s in stats:
            st = ntk_layer_step(s)
            val = st(N, tables, prev, params, out=out[s][layer], entries=ent4 if st.rank == 4 else None)
            if restrict is not None:
                val = val[restrict.mask(N, st.rank)]
            if not np.isfinite(val.sum()):         # one reduction; NaN and inf propagate into it
                if not np.all(np.isfinite(val)):
                    raise DomainError(f"{s} overflows or is undefined at layer {layer + 1}")
        errs.append(tables.max_error)
        if atom_cache is not None:
            snaps.append(tabs["atoms"].snapshot() if tabs.get("atoms") is not None else None)

    snaps: list = []
    # restricted smooth flows: the atoms no pair table serves share the four-point table's
    # pass over the subsets of samples
    shared = tuple(f for f in atoms if not _pair_served(f, pair_orders))
    kern = _flow(**kw, rtol=rtol, statistics=kstats, hook=step, progress=progress,
                 progress_label="ntk_flow: layers", restrict=restrict,
                 atom_patterns=shared if restrict is not None else (),
                 atom_seeds=list(atom_cache) if atom_cache and restrict is not None else None)
    if atom_cache is not None and restrict is not None:
        atom_cache[:] = snaps
    return NTKFlow(kern, out, lb, lw, np.arange(1, L + 1), np.asarray(errs), restrict)


#: the restricted flow's memory model (:func:`restricted_flow_bytes`), fitted to peak RSS: float64
#: (N,)^4 arrays per layer from layer 2 on (the eleven stored tensors and about nine more of heap
#: the layer steps leave resident), float64 words per restricted entry (the flat entry indices,
#: their cached flat positions and atom layouts, the atom stores of the subsets, the chunk
#: temporaries), and the interpreter with numba, SymPy and the derivations
_LAYER_ARRAYS = 20
_ENTRY_WORDS = 24
_BASE_BYTES = 420 * 2 ** 20


@public
def restricted_flow_bytes(N: int, L: int, n_train: int, max_test: int = 1) -> float:
    r"""Estimated peak resident bytes of ``ntk_flow(net, X, n_train=, max_test=)`` on ``N``
    inputs and ``L`` layers (every statistic), computed before anything is allocated.

    The flow stores eleven four-index tensors per layer (A, B, D, F, P, Q, R, S, T, U and the
    kernel sector's V), of which layers 2..L are written (layer 1 is exact zeros, PDLT (8.23),
    (11.57), (∞.11), never touched); each layer step works on the :math:`E`
    :func:`~effth.numerics.sample_blocks.restricted_entries` with at most ``max_test`` distinct
    test inputs.  Measured peak RSS is modelled as

    .. math:: 8\,ig(20\,(L-1)\,N^4 + 24\,Eig) + 420\ \mathrm{MiB}

    bytes: twenty :math:`N^4` float64 arrays per layer (the eleven stored and about nine more of
    heap the layer steps leave resident), 24 words per entry, and the interpreter.  On
    erf and tanh flows of depth 3 and 5, 20 to 43 inputs, ``max_test`` 1 and 2, it is 1.03 to
    1.32 times the peak RSS (``docs/performance.md``, finite-width prediction memory).

    Parameters
    ----------
    N, L : int
        Inputs (training then test) and weight layers.
    n_train, max_test : int
        As :func:`ntk_flow`.

    Returns
    -------
    float
        Bytes.
    """
    from effth.numerics.sample_blocks import restricted_entries
    N, n_train = int(N), int(n_train)
    E = restricted_entries(n_train, N - n_train, int(max_test), 4)
    return (8.0 * (_LAYER_ARRAYS * max(int(L) - 1, 0) * float(N) ** 4 + _ENTRY_WORDS * float(E))
            + _BASE_BYTES)


#: peak memory of a full ntk_flow in (N, N, N, N) float64 tensors per layer (measured: tanh,
#: depth 3, 49 inputs restricted to one test input held 4.9 GB)
_PEAK_COPIES = 36

#: statistics evaluated for kinked activations (with their dependencies Theta and B)
_KINKED_OK = ("Theta", "H1", "B", "D", "F", "A")
#: the dNTK statistics of the piecewise-linear family: finite except at the entries that depend
#: on the undefined sigma'(0) (NaN there, :func:`_kinked_dntk_flow`)
_KINKED_DNTK = ("P", "Q")
#: m -> the value given to sigma'(0)^m in the atoms <delta(z_a) sigma'(z_a)^m ...> while a kinked
#: dNTK flow is evaluated (None: not inside such an evaluation)
_KINK_SLOPE: contextvars.ContextVar = contextvars.ContextVar("effth_kink_slope", default=None)


@public
def kinked_dntk_singular(statistic: str, N: int, layer: int | None = None) -> np.ndarray:
    r"""Where the dNTK of a piecewise-linear activation is singular (PDLT (11.49), (11.52)).

    A sample label :math:`\delta_0` that carries :math:`\sigma''=(a_+-a_-)\delta(z)` and shares
    its sample with a :math:`\sigma'` factor gives the product :math:`\delta(z)\Theta(z)`, which
    needs the undefined :math:`\sigma'(0)`: in the atom
    :math:`\langle\sigma''_{\delta_0}\sigma'_{\delta_1}\sigma'_{\delta_2}\sigma_{\delta_3}\rangle`
    of both recursions that is :math:`\delta_0\in\{\delta_1,\delta_2\}`,
    :math:`\delta_0\neq\delta_3` (at :math:`\delta_0=\delta_3` the factor :math:`\sigma(0)=0`
    makes it vanish).  The recursion of :math:`P` keeps the labels of each entry (its
    :math:`\sum_\beta` reads only :math:`\beta\in\{\delta_0,\delta_3\}`, and
    :math:`P_{\delta_0\delta_1\delta_2\delta_0}\equiv0`); that of :math:`Q` also reads
    :math:`Q_{\delta_0\delta_1\delta_2\delta_2}`.  So (layer 1 has none)

    * :math:`P_{\delta_0\delta_1\delta_2\delta_3}` is singular from layer 2 on iff
      :math:`\delta_0\in\{\delta_1,\delta_2\}` and :math:`\delta_0\ne\delta_3`;
    * :math:`Q_{\delta_0\delta_1\delta_2\delta_3}` is singular at layer 2 iff that holds, and
      from layer 3 on also where :math:`\delta_0=\delta_1\ne\delta_2`.

    A single input has no singular entry (:math:`P\equiv0`, PDLT (11.74)).
    :func:`ntk_flow` finds the same entries by their dependence on :math:`\sigma'(0)`.

    Parameters
    ----------
    statistic : {"P", "Q"}
    N : int
        Number of inputs.
    layer : int, optional
        Book layer :math:`\ell\ge1` (default: any layer from 3 on).

    Returns
    -------
    ndarray of bool (N, N, N, N)
        True at the singular entries (book slot order).
    """
    if statistic not in ("P", "Q"):
        raise DomainError(f"statistic must be 'P' or 'Q', got {statistic!r}")
    if not isinstance(N, (int, np.integer)) or N < 1:
        raise DomainError(f"N must be a positive int, got {N!r}")
    if layer is not None and (isinstance(layer, bool) or not isinstance(layer, (int, np.integer))
                              or layer < 1):
        raise DomainError(f"layer must be a positive int, got {layer!r}")
    i = np.arange(N)
    d0, d1, d2, d3 = np.ix_(i, i, i, i)
    m = ((d0 == d1) | (d0 == d2)) & (d0 != d3) & (layer is None or layer >= 2)
    if statistic == "Q" and (layer is None or layer >= 3):
        m = m | ((d0 == d1) & (d0 != d2))
    return np.broadcast_to(m, (N,) * 4).copy()


def _kinked_dntk_flow(call_args: dict, dntk: list, act: Any) -> "NTKFlow":
    r"""The flow of a piecewise-linear activation with dNTK statistics: evaluated with
    :math:`\sigma'(0)` set to :math:`a_-`, :math:`a_+` and their mean; an entry of P or Q that
    differs between them depends on the undefined :math:`\sigma'(0)` and is NaN (the dependence is
    a polynomial of degree at most two, so three values decide it).  The other entries are the
    exact distributional values (point masses by Gaussian conditioning)."""
    am, ap = float(act.param("a_minus")), float(act.param("a_plus"))
    # atoms depend on the value given to sigma'(0): no cache shared between the three flows
    call_args = {**call_args, "atom_cache": None}
    flows = []
    for s0 in (am, ap, 0.5 * (am + ap)):
        token = _KINK_SLOPE.set(lambda m, s0=s0: s0 ** m)
        try:
            flows.append(ntk_flow(**call_args))
        finally:
            _KINK_SLOPE.reset(token)
    base = flows[0]
    for s in dntk:
        T = base.tensors[s]
        scale = max(float(np.nanmax(np.abs(f.tensors[s]), initial=0.0)) for f in flows)
        sing = np.zeros(T.shape, dtype=bool)
        for f in flows[1:]:
            sing |= np.abs(f.tensors[s] - T) > 1e-9 * max(scale, 1e-300)
        T[sing] = np.nan
    return base
_ROW_ENTRIES = 1 << 16     # entries of one row block of the fused K/Theta step (cache-sized)


def _finite(a: np.ndarray) -> bool:
    """Every entry finite: one reduction (a sum is finite only if every term is), the entrywise
    test only when the sum is not (a finite sum that overflows)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return bool(np.isfinite(np.add.reduce(a, axis=None)) or np.isfinite(a).all())


def _row_args(inputs: list, rows: slice, blocks: dict, ones: dict, tensors: dict,
              cols: slice = slice(None)) -> list | None:
    """The arguments of a compiled two-label step on the block ``rows`` x ``cols``: two-sample
    atoms from ``blocks`` (``(p, q) -> (rows, cols)``), one-sample atoms from ``ones`` (``(p, q) ->
    (N,)``), tensors by block; ``None`` when an input is of another kind (no fused path)."""
    args = []
    for _, key in inputs:
        if isinstance(key, tuple) and key and key[0] == "atom":          # NTKLayerStep
            fac = key[1]
            if len(fac) != 2:
                return None
            (l0, p), (l1, q) = fac
            labs, orders = (l0, l1), (p, q)
        elif isinstance(key, tuple) and key and key[0] == "tensor":      # NTKLayerStep
            _, name, labs = key
            T = tensors.get(name)
            if T is None or len(labs) != 2:
                return None
            # (1, 0) as (0, 1): the tensors are symmetric to the bit, and only the entries on and
            # above the diagonal are current in _theta_flow_blocked's last_only mode
            args.append(T[rows, cols] if tuple(labs) in ((0, 1), (1, 0)) else
                        np.diagonal(T)[rows, None] if tuple(labs) == (0, 0) else np.diagonal(T)[None, cols])
            continue
        elif getattr(key, "kind", None) == "pair":                      # LayerStep (kernel)
            labs, orders = key.labels, key.orders
        else:
            return None
        labs = tuple(labs)
        if labs == (0, 1):
            args.append(blocks[orders])
        elif labs == (1, 0):
            args.append(blocks[orders[::-1]])
        elif labs == (0, 0):
            args.append(ones[orders][rows, None])
        elif labs == (1, 1):
            args.append(ones[orders][None, cols])
        else:
            return None
    return args


def _theta_flow_blocked(kw: dict, Th1: np.ndarray | None, lb: np.ndarray, lw: np.ndarray,
                        progress: Any, last_only: bool = False) -> NTKFlow | tuple | None:
    r""":math:`K` and :math:`\Theta` through every layer (PDLT (4.118), (9.5)) when every two-point
    atom of the two steps has a direct closed form (erf, sin/cos, the arc-cosine family; exactly
    symmetric): per layer, each block of rows is one fused pass over its columns on and above the
    diagonal (closed forms, then the compiled K and Theta steps on the block, the one-sample
    values on its diagonal) and its mirror below the diagonal, the blocks on
    :func:`effth._threads.thread_map`'s threads (half the transcendental work; exactly symmetric).  ``None`` (the general
    path then runs) when an atom has no closed form, a layer's closed forms do not apply (kinked
    activation at a zero-variance input or an extreme scale) or give a non-finite value.

    ``last_only``: only two layers are held at a time and ``(K^{(L)}, Theta^{(L)})`` is returned
    (``Th1`` None: :math:`K` alone, ``(K^{(L)}, None)``), what a prediction reads, in
    :math:`4N^2` floats instead of :math:`2LN^2`."""
    from effth._progress import progress_bar
    from effth._threads import blas_threads, thread_map
    from effth.numerics._fastmath import Scratch
    from effth.numerics.sample_tables import fast_pair_joint, pair_plans

    from effth.pdlt.initialization.kernel_flow import _check_layer, _resolve, _scale_off, layer_step

    net, X = kw.get("net"), kw.get("X")
    K1, L, act, cws, cbs, rats, widths = _resolve(net, X, kw.get("K1"), kw.get("depth"), None,
                                                  kw.get("activation"), kw.get("c_w", 1.0),
                                                  kw.get("c_b", 0.0), kw.get("ratios", 1.0))
    ks, ts = layer_step("K"), ntk_layer_step("Theta")
    with_theta = Th1 is not None
    orders = set(ks.pair_orders) | (set(ts.pair_orders) if with_theta else set())
    joint = fast_pair_joint(act) if orders == {(0, 0), (1, 1)} else None
    if ts._terms is None or ks._terms is None or set(ts.reads) - {"Theta"}:
        return None
    N = K1.shape[0]
    if last_only:          # two layers at a time: the one read and the one written
        Ks = [np.asarray(K1, float), np.empty((N, N))]
        Ths = [Th1, np.empty((N, N)) if with_theta else None]
    else:
        Ks, Ths = np.empty((L, N, N)), np.empty((L, N, N))
        Ks[0], Ths[0] = K1, Th1
    scale0 = float(np.max(np.abs(np.diag(K1))))
    warned = False
    scratch = threading.local()  # per worker thread: the block's scratch arrays, reused
    stops, i0 = {}, 0            # start -> stop of each upper-triangle row block (same every layer)
    while i0 < N:
        stops[i0] = min(N, i0 + max(1, _ROW_ENTRIES // (N - i0)))
        i0 = stops[i0]
    with blas_threads(), progress_bar(L - 1, "ntk_flow: layers", progress=progress, unit="layer") as bar:
        for layer in range(1, L):
            src, dst = ((layer - 1) % 2, layer % 2) if last_only else (layer - 1, layer)
            K, T, Kd, Td = Ks[src], Ths[src], Ks[dst], Ths[dst]
            d = np.diag(K).copy()
            plans = pair_plans(act, orders, d, direct_only=True)
            if not all(o in plans for o in orders):
                return None
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                ones = {o: np.asarray(plans[o][1](d), float) for o in plans}
            kv = [np.float64(x) for x in (cws[layer], cbs[layer], rats[layer - 1])]
            tv = [np.float64(x) for x in (cws[layer], cbs[layer], lb[layer], lw[layer], rats[layer - 1])]

            def block(i0: int, K=K, T=T, d=d, plans=plans, ones=ones, kv=kv, tv=tv, Kd=Kd,
                      Td=Td) -> bool:
                rows, cols = slice(i0, stops[i0]), slice(i0, N)
                r = np.arange(rows.stop - i0)
                ws = getattr(scratch, "pool", None)
                if ws is None:
                    ws = scratch.pool = Scratch()
                ws.reset()
                with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                    da, db, kr = d[rows, None], d[None, cols], K[rows, cols]
                    blocks = joint(da, db, kr, ws) if joint is not None else {}
                    blocks.update({o: plans[o][0](da, db, kr) for o in plans if o not in blocks})
                    for o, B in blocks.items():
                        B[r, r] = ones[o][rows]               # the one-sample values, as the tables
                    shape = (len(r), N - i0)
                    ka = _row_args(ks._inputs, rows, blocks, ones, {}, cols)
                    ta = _row_args(ts._inputs, rows, blocks, ones, {"Theta": T}, cols) if with_theta else ()
                    if ka is None or ta is None:
                        return False
                    kb = evaluate_terms(ks._terms, ka, kv, shape, Kd[rows, cols], ws.take(shape))
                    if not last_only:
                        Kd[cols, rows] = kb.T                   # the mirror (its own columns)
                    if not _finite(kb):
                        return False
                    if not with_theta:
                        return True
                    tb = evaluate_terms(ts._terms, ta, tv, shape, Td[rows, cols], ws.take(shape))
                    if not last_only:
                        Td[cols, rows] = tb.T
                return _finite(tb)

            # row blocks of about _ROW_ENTRIES entries of the upper triangle
            if not all(thread_map(block, list(stops))):
                return None                                    # the general path says why
            _check_layer(Kd, layer + 1, scale0, warned, finite=True)   # the blocks checked it
            warned = warned or _scale_off(Kd, scale0)
            bar.update()
    if last_only:
        # the layers were iterated on and above the diagonal (all a block reads): the mirror once
        out = Ks[(L - 1) % 2], Ths[(L - 1) % 2]
        if L > 1:
            def mirror(i0: int) -> None:
                rows, cols = slice(i0, stops[i0]), slice(stops[i0], N)
                for A in out:
                    if A is not None:
                        A[cols, rows] = A[rows, cols].T
            thread_map(mirror, list(stops))
        return out
    kern = Flow(Ks, None, None, np.arange(1, L + 1), act, np.asarray(cws, float), np.asarray(cbs, float),
                np.asarray(rats, float), widths, np.zeros(L))
    return NTKFlow(kern, {"Theta": Ths}, lb, lw, np.arange(1, L + 1), np.zeros(L))


def last_layer_kernels(net: Any, X: np.ndarray, lambda_b: Any, lambda_w: Any,
                       ntk: bool = True) -> tuple | None:
    r""":math:`K^{(L)}` and (``ntk``) :math:`\Theta^{(L)}` of ``net`` on ``X`` by the fused
    closed-form pass of :func:`_theta_flow_blocked`, holding two layers at a time (no
    ``(L, N, N)`` arrays: a prediction keeps only its own outputs); ``None`` where that pass does
    not apply (the caller then runs :func:`ntk_flow` or :func:`~effth.pdlt.flow`).  Repeated
    inputs are evaluated once (their rows are identical)."""
    from effth.arch._common import require_plain
    from effth.pdlt.initialization.kernel_flow import distinct_inputs

    X = input_matrix(X, "X")
    dup = distinct_inputs(net, X, None, None)
    if dup is not None:
        out = last_layer_kernels(net, dup[1], lambda_b, lambda_w, ntk)
        if out is None:
            return None
        idx = np.ix_(dup[0], dup[0])
        return tuple(None if a is None else a[idx] for a in out)
    require_plain(net, "ntk_flow")
    L = net.depth
    lb, lw = _per_layer(lambda_b, L, "lambda_b"), _per_layer(lambda_w, L, "lambda_w")
    Th = None
    if ntk:
        with np.errstate(over="ignore", invalid="ignore"):
            Th = lb[0] + lw[0] * (X @ X.T) / X.shape[1]
        if not np.isfinite(Th).all():
            return None                        # ntk_flow refuses it with its message
    try:
        out = _theta_flow_blocked({"net": net, "X": X}, Th, lb, lw, False, last_only=True)
    except DomainError:
        return None                            # the general path raises (or handles) it
    if out is None:
        return None
    return tuple(None if a is None else (a.copy() if L == 1 else a) for a in out)


def _check_theta(Th: np.ndarray, N: int) -> None:
    """Theta1 matches the inputs (its symmetry and PSD are checked by kernel_matrix, or hold by
    construction from X)."""
    if Th.shape != (N, N) or not np.all(np.isfinite(Th)):
        raise DomainError(f"Theta1 must be a finite ({N}, {N}) matrix matching K1, got shape {Th.shape}")


class _KinkedTables(AtomTables):
    """Atom tables for kinked sigma: products of sigma and sigma' only, by
    :func:`effth.gaussian_expectation`: up to four samples one call per integrand batched over
    all subsets of a size (closed forms for the piecewise-linear family: orthant moments; the
    dispatcher's quadrature for other kinked sigma), beyond that one call per entry."""

    smooth_only = False

    def _group(self, samples: np.ndarray, combos: list, mult: float) -> tuple:
        dirac = [j for j, cb in enumerate(combos) if max(max(o) for o in cb if o) >= 2]
        if not dirac:
            return dispatched_group(self.K, samples, combos, self.act, self.rtol, closed_only=False)
        reg = [j for j in range(len(combos)) if j not in dirac]
        v = np.empty((len(samples), len(combos)))
        if reg:
            v[:, reg] = dispatched_group(self.K, samples, [combos[j] for j in reg], self.act,
                                         self.rtol, closed_only=False)[0]
        Kb = self.K[samples[:, :, None], samples[:, None, :]]
        for j in dirac:
            v[:, j] = _dirac_atoms(Kb, combos[j], self.act, self.rtol)
        return v, np.zeros_like(v), np.abs(v)

    def _evaluate(self, S: tuple, keys: list) -> None:
        pos = {s: i for i, s in enumerate(S)}
        KS = self.K[np.ix_(S, S)]
        for key in keys:
            fac = [(pos[s], "sigma", o) for s, o in key]
            self._cache[key] = float(gaussian_expectation(fac, KS, self.act, rtol=self.rtol))


def _dirac_atoms(Kb: np.ndarray, combo: tuple, act: Any, rtol: float) -> np.ndarray:
    r"""Atoms of a piecewise-linear :math:`\sigma` with :math:`\sigma''=(a_+-a_-)\delta(z)`
    factors, on a batch of kernels ``Kb (B, k, k)``; ``combo`` holds each sample's derivative
    orders.  With :math:`\mathcal D` the samples carrying :math:`\sigma''`:

    * a factor :math:`\sigma` on such a sample gives 0 (:math:`\sigma(0)=0`);
    * :math:`m` factors :math:`\sigma'` on it give :math:`\sigma'(0)^m`, undefined: the value
      set by :func:`_kinked_dntk_flow` (entries depending on it are singular);
    * otherwise :math:`\prod(a_+-a_-)\,p_{\mathcal D}(0)\,
      \mathbb E[\prod_{\rm rest}\mid z_{\mathcal D}=0]`, the conditional expectation on the Schur
      complement :math:`K_{RR}-K_{R\mathcal D}K_{\mathcal D\mathcal D}^{-1}K_{\mathcal DR}`
      (mean zero).

    Two :math:`\sigma''` on one sample (:math:`\delta(z)^2`) or :math:`\sigma'''` diverge."""
    jump = float(sum(c for _, c, k in act.singular_part(2) if k == 0))
    for o in combo:
        if any(x >= 3 for x in o) or o.count(2) > 1:
            raise DomainError(f"{act!r}: the atom with derivative orders {combo} contains "
                              "delta(z)^2 or delta'(z) on one sample and diverges (PDLT (∞.40))")
    D = [p for p, o in enumerate(combo) if 2 in o]
    fac = 1.0
    for p in D:
        o = combo[p]
        if 0 in o:
            return np.zeros(len(Kb))
        m = o.count(1)
        if m:
            power = _KINK_SLOPE.get()
            if power is None:
                raise DomainError(f"{act!r}: <delta(z) sigma'(z)^{m} ...> on one sample needs the "
                                  "undefined sigma'(0) (singular)")
            fac *= power(m)
        fac *= jump
    R = [p for p in range(len(combo)) if p not in D and combo[p]]
    KDD = Kb[:, D][:, :, D]
    det = np.linalg.det(KDD)
    if np.any(det <= 0):
        raise DomainError("kinked dNTK atoms need inputs that are not collinear (|rho| < 1)")
    pD = fac / np.sqrt((2.0 * np.pi) ** len(D) * det)
    if not R:
        return pD
    KRD = Kb[:, R][:, :, D]
    Kc = Kb[:, R][:, :, R] - KRD @ np.linalg.solve(KDD, np.swapaxes(KRD, 1, 2))
    Kc = 0.5 * (Kc + np.swapaxes(Kc, 1, 2))
    facs = [(i, "sigma", o) for i, p in enumerate(R) for o in combo[p]]
    return pD * np.asarray(gaussian_expectation(facs, Kc, act, rtol=rtol), float)


def _pair_served(factors: tuple, pair_orders: Any) -> bool:
    """Whether an atom is read from a whole two-point table (two factors whose orders have one)
    rather than from the per-subset :class:`AtomTables`: the one rule for where an atom is
    evaluated."""
    return len(factors) == 2 and (factors[0][1], factors[1][1]) in pair_orders


class _PairFirstTables:
    r"""Atom tables of one layer: the two-factor atoms :math:`\langle\sigma^{(p)}_{\delta_1}
    \sigma^{(q)}_{\delta_2}\rangle` as whole :math:`N\times N` tables (given by the kernel step,
    closed forms, or shared-node quadrature for smooth :math:`\sigma`); every other atom, and
    these when no table applies, from :class:`AtomTables` / :class:`_KinkedTables` (built only
    when needed)."""

    def __init__(self, K: np.ndarray, act: Any, rtol: float, kinked: bool, orders: set,
                 given: dict, base: AtomTables | None = None,
                 restrict: SampleRestriction | None = None) -> None:
        self.K, self.act, self.rtol, self.kinked = K, act, rtol, kinked
        self.restrict = restrict
        self._pairs = dict(given)
        self._err = 0.0
        missing = {o for o in orders if o not in self._pairs or o[::-1] not in self._pairs}
        if missing:
            self._pairs.update(closed_pair_tables(K, act, missing))
        rest = {o for o in missing if o not in self._pairs}
        if rest and not kinked and act.is_smooth:
            more, errs = pair_tables(K, act, rest, rtol=rtol)
            self._pairs.update(more)
            self._err = max(_relative(e, more[o]) for o, e in errs.items())
        elif kinked and any(max(o) >= 2 for o in rest):
            # distributional derivatives: point masses off the diagonal, Leibniz sums on it (the
            # sigma, sigma' products stay with the per-subset tables, as for Theta and B)
            self._pairs.update(leibniz_pair_tables(K, act, {o for o in rest if max(o) >= 2}, rtol))
        self._base = base

    @property
    def base(self) -> AtomTables:
        if self._base is None:
            # kinked sigma: per-subset closed forms (orders <= 1: orthant moments), never restricted
            self._base = (_KinkedTables(self.K, self.act, rtol=self.rtol) if self.kinked else
                          AtomTables(self.K, self.act, rtol=self.rtol, restrict=self.restrict))
        return self._base

    @property
    def max_error(self) -> float:
        return max(self._err, 0.0 if self._base is None else self._base.max_error)

    def prepare(self, patterns: list) -> None:
        """Evaluate the atoms that no two-point table serves together (their integrals over
        each subset of samples are shared)."""
        rest = [f for f in patterns if not _pair_served(f, self._pairs)]
        if rest and self._per_entry():
            # a restricted flow: the subsets integrated, the atoms of three or more labels read
            # per entry by the steps (on_entries), never gathered into (N,)*m tables
            prepare_atoms(self.base, rest)
            rest = [f for f in rest if len({p for p, _ in f}) < 3]
        if rest:
            self.base.tables(rest)

    def _per_entry(self) -> bool:
        b = self._base
        return (b is not None and type(b) is AtomTables and b.restrict is not None
                and not b._keyed)

    def on_entries(self, factors: tuple, labs: tuple, chunk: tuple, N: int) -> np.ndarray | None:
        """The atom at the entries ``chunk`` (labels ``labs``) read from the stores, for atoms of
        three or more labels of a restricted flow; ``None``: gather from :meth:`table`."""
        if len(labs) < 3 or _pair_served(factors, self._pairs) or not self._per_entry():
            return None
        return entry_atom(self._base, factors, labs, chunk, N)

    def table(self, factors: tuple) -> np.ndarray:
        if _pair_served(factors, self._pairs):
            (p0, o0), (p1, o1) = factors
            T = self._pairs[(o0, o1)]
            return T if p0 != p1 else np.ascontiguousarray(np.diagonal(T))
        return self.base.table(factors)
