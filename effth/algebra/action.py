r"""Perturbative expectations under nearly-Gaussian quartic actions (PDLT §1.3 and §4.2).

Two conventions of the book, which differ in sign and symmetry of the quartic term:

* ``"ch1"`` -- PDLT (1.71), :math:`N` variables :math:`z_\mu`:

  .. math:: S = \tfrac12\sum K^{\mu\nu}z_\mu z_\nu + \frac{\epsilon}{4!}\sum V^{\mu\nu\rho\lambda}
            z_\mu z_\nu z_\rho z_\lambda,

  :math:`V` totally symmetric (:class:`~effth.algebra.tensors.SymmetricQuarticCoupling`),
  propagator :class:`~effth.algebra.tensors.Kernel` :math:`K_{\mu\nu}`;
* ``"ch4"`` -- PDLT (4.44), :math:`n` neurons times samples :math:`z_{i;\alpha}`:

  .. math:: S = \tfrac12\sum g^{\alpha_1\alpha_2}\sum_i z_{i;\alpha_1}z_{i;\alpha_2}
            - \tfrac18\sum v^{(\alpha_1\alpha_2)(\alpha_3\alpha_4)}\sum_{i_1,i_2}
            z_{i_1;\alpha_1}z_{i_1;\alpha_2}z_{i_2;\alpha_3}z_{i_2;\alpha_4},

  :math:`v` with the order-8 pair symmetry (:class:`~effth.algebra.tensors.QuarticCoupling`),
  propagator :class:`~effth.algebra.tensors.Propagator` :math:`g_{\alpha\beta}`.

Expectations are expanded in the coupling (PDLT (1.72), (4.46)):
:math:`\mathbb E[F]=\langle F e^{-\Delta S}\rangle/\langle e^{-\Delta S}\rangle`; by the
linked-cluster theorem this is the sum of Wick diagrams (externals plus :math:`k` vertex copies,
weight :math:`(-\Delta S)^k/k!`) **without vacuum components**; connected correlators
(cumulants) are the **connected** diagrams.  Diagrams are grouped into isomorphism classes by
:func:`~effth.algebra.wick.graph.wick_classes` (vertex-leg and vertex-copy symmetries), one sympy
term per class times its multiplicity; neuron deltas collapse by index cycles
(:func:`~effth.algebra.wick.counting.collapse_neurons`), each closed cycle giving :math:`n`.

Examples
--------
>>> import sympy as sp
>>> from effth.algebra.action import QuarticAction, connected_correlator
>>> mu = sp.symbols("mu1:5")
>>> connected_correlator(QuarticAction("ch1"), mu)
-epsilon*SampleSum(Kernel(mu1, rho_1)*Kernel(mu2, rho_2)*Kernel(mu3, rho_3)*Kernel(mu4, rho_4)*SymmetricQuarticCoupling(rho_1, rho_2, rho_3, rho_4), rho_1, rho_2, rho_3, rho_4)
"""

from __future__ import annotations

from effth._signature import public

from dataclasses import dataclass, field
from math import factorial
from typing import Any, Sequence

import sympy as sp

from .tensors import (
    Kernel,
    Propagator,
    QuarticCoupling,
    SampleSum,
    SymmetricQuarticCoupling,
    canonicalize_dummies,
)
from .wick.counting import collapse_neurons
from .wick.graph import Slot, WickExpansion, WickGraph, wick_classes

__all__ = [
    "QuarticAction",
    "Diagram",
    "diagrams",
    "classify_diagram",
    "perturbative_moment",
    "connected_correlator",
    "partition_function",
]

_CONVENTIONS = ("ch1", "ch4")


@public
@dataclass(frozen=True)
class QuarticAction:
    r"""A quadratic-plus-quartic action in one of the book's two conventions.

    Parameters
    ----------
    convention : {"ch1", "ch4"}
        PDLT (1.71) or PDLT (4.44).
    epsilon : sympy expression
        Small parameter of the ch1 convention (ignored for ch4, where :math:`v` itself is small).
    n : sympy expression
        Number of neurons in the ch4 action (a free symbol by default: by the marginalization rule of
        PDLT §4.4, neuron-index-free observables do not depend on it).
    layer : optional
        Layer attached to the tensors (``None``: layer-less, chapter-1 style).
    dummy : str, optional
        Stem of the summed sample indices (default ``"rho"`` for ch1, ``"beta"`` for ch4).

    Examples
    --------
    >>> QuarticAction("ch4").n
    n
    """

    convention: str = "ch4"
    epsilon: Any = sp.Symbol("epsilon")
    n: Any = sp.Symbol("n", positive=True, integer=True)
    layer: Any = None
    dummy: str | None = None

    def __post_init__(self):
        if self.convention not in _CONVENTIONS:
            raise ValueError(f"convention must be 'ch1' or 'ch4', got {self.convention!r}")

    # -- pieces ------------------------------------------------------------------------------
    @property
    def has_neurons(self) -> bool:
        return self.convention == "ch4"

    @property
    def vertex_coefficient(self) -> sp.Expr:
        r"""Coefficient :math:`c` of one vertex in :math:`-\Delta S = c\sum T\,zzzz`."""
        if self.convention == "ch1":
            return -sp.sympify(self.epsilon) / 24
        return sp.Rational(1, 8)

    def _layer(self) -> tuple:
        return () if self.layer is None else (self.layer,)

    def propagator(self, a, b) -> sp.Expr:
        """The Gaussian propagator component: :math:`K_{ab}` (ch1) or :math:`g_{ab}` (ch4)."""
        cls = Kernel if self.convention == "ch1" else Propagator
        return cls(a, b, *self._layer())

    def vertex_tensor(self, *idx) -> sp.Expr:
        """The quartic coupling component :math:`V^{\\mu\\nu\\rho\\lambda}` or :math:`v^{(\\alpha_1\\alpha_2)(\\alpha_3\\alpha_4)}`."""
        cls = SymmetricQuarticCoupling if self.convention == "ch1" else QuarticCoupling
        return cls(*idx, *self._layer())

    def dummy_index(self, k: int) -> sp.Symbol:
        stem = self.dummy or ("rho" if self.convention == "ch1" else "beta")
        return sp.Symbol(f"{stem}_{k}")

    def vertex_slots(self, copy: int) -> tuple[list, list, list]:
        """Slots, structure edges and neuron-trace pairs of vertex copy ``copy`` (0-based)."""
        names = [("v", copy, leg) for leg in range(4)]
        slots = [Slot(nm, label="vertex", field="z") for nm in names]
        if self.convention == "ch1":
            structure = [(names[a], names[b], "vertex") for a in range(4) for b in range(a + 1, 4)]
            trace: list = []
        else:
            trace = [(names[0], names[1]), (names[2], names[3])]
            structure = [(a, b, "trace") for a, b in trace]
            structure += [(names[a], names[b], "vertex") for a in (0, 1) for b in (2, 3)]
        return slots, structure, trace


def _external_slots(action: QuarticAction, externals: Sequence) -> tuple[list, dict, dict]:
    slots, samples, neurons = [], {}, {}
    for k, ext in enumerate(externals):
        name = ("x", k)
        if action.has_neurons:
            try:
                neuron, sample = ext
            except (TypeError, ValueError):
                raise ValueError(
                    f"ch4 externals are (neuron, sample) pairs, e.g. (i1, alpha1); got {ext!r}"
                ) from None
            neuron, sample = sp.sympify(neuron), sp.sympify(sample)
            neurons[name] = neuron
        else:
            if isinstance(ext, (tuple, list)):
                raise ValueError(f"ch1 externals are sample labels; got {ext!r}")
            neuron, sample = None, sp.sympify(ext)
        samples[name] = sample
        slots.append(Slot(name, label=sample, neuron=neuron))
    return slots, samples, neurons


@public
@dataclass
class Diagram:
    """One class of Wick diagrams with its sympy value (class total, multiplicity included)."""

    graph: WickGraph
    multiplicity: int
    order: int
    kind: str
    value: sp.Expr = field(repr=False)


@public
def classify_diagram(graph: WickGraph, external: set) -> str:
    """``"vacuum"`` (a component without externals), ``"connected"``, or ``"disconnected"``.

    At first order in a four-point function the ``"disconnected"`` non-vacuum diagrams are the
    propagator corrections of PDLT (1.75).
    """
    comps = graph.components()
    if any(not (set(c) & external) for c in comps):
        return "vacuum"
    return "connected" if len(comps) == 1 else "disconnected"


def _term(action, graph: WickGraph, order: int, samples: dict, neurons: dict, trace: list) -> sp.Expr:
    label = dict(samples)
    dummies = []
    tensors = sp.S.One
    for c in range(order):
        idx = [action.dummy_index(4 * c + leg + 1) for leg in range(4)]
        dummies += idx
        for leg in range(4):
            label[("v", c, leg)] = idx[leg]
        tensors *= action.vertex_tensor(*idx)
    props = sp.Mul(*[action.propagator(label[a], label[b]) for a, b in graph.pairing])
    coeff = action.vertex_coefficient ** order / factorial(order)
    if action.has_neurons:
        coeff *= collapse_neurons(graph.pairing, trace, neurons, action.n)
    return coeff * SampleSum(tensors * props, *dummies)


@public
def diagrams(
    action: QuarticAction,
    externals: Sequence,
    order: int = 1,
    *,
    kinds: Sequence[str] | None = None,
    exact_order: bool = False,
) -> list[Diagram]:
    r"""All classes of Wick diagrams for :math:`\langle F\,(-\Delta S)^k/k!\rangle`, :math:`k\le` ``order``.

    Parameters
    ----------
    action : QuarticAction
    externals : sequence
        Sample labels (ch1) or ``(neuron, sample)`` pairs (ch4).
    order : int
        Highest power of the coupling.
    kinds : sequence of {"vacuum", "disconnected", "connected"}, optional
        Keep only these kinds (default: all).
    exact_order : bool
        Only :math:`k=` ``order``.

    Returns
    -------
    list of Diagram
        Deterministic order: by power of the coupling, then class order.

    Examples
    --------
    PDLT (1.75): of the 105 pairings of :math:`\langle z_{\mu_1}..z_{\mu_4}\,V zzzz\rangle`, 9 are
    vacuum, 72 propagator corrections and 24 connected.

    >>> import sympy as sp
    >>> ds = diagrams(QuarticAction("ch1"), sp.symbols("mu1:5"), order=1, exact_order=True)
    >>> {k: sum(d.multiplicity for d in ds if d.kind == k) for k in ("vacuum", "disconnected", "connected")}
    {'vacuum': 9, 'disconnected': 72, 'connected': 24}
    """
    if order < 0:
        raise ValueError("order must be non-negative")
    ext_slots, samples, neurons = _external_slots(action, externals)
    external = {s.name for s in ext_slots}
    ext_order = [s.label for s in ext_slots]
    out = []
    for k in range(order if exact_order else 0, order + 1):
        slots, structure, trace = list(ext_slots), [], []
        for c in range(k):
            s, st, tr = action.vertex_slots(c)
            slots += s
            structure += st
            trace += tr
        if len(slots) % 2:
            continue

        def keep(g: WickGraph) -> bool:
            return kinds is None or classify_diagram(g, external) in kinds

        ex: WickExpansion = wick_classes(slots, structure, where=keep)
        for cls in ex.classes:
            g = cls.representative
            value = cls.multiplicity * _term(action, g, k, samples, neurons, trace)
            value = canonicalize_dummies(value, ext_order)
            out.append(Diagram(g, cls.multiplicity, k, classify_diagram(g, external), value))
    return out


@public
def perturbative_moment(action: QuarticAction, externals: Sequence, order: int = 1) -> sp.Expr:
    r"""The full moment :math:`\mathbb E[z\cdots z]` to ``order`` in the coupling.

    Parameters
    ----------
    action : QuarticAction
    externals : sequence
        Sample labels (ch1) or ``(neuron, sample)`` pairs (ch4).
    order : int

    Returns
    -------
    sympy expression (``SampleSum`` over the dummy sample indices)

    Notes
    -----
    PDLT (1.72)/(4.46): :math:`\mathbb E[F]=\langle F\rangle+\langle F(-\Delta S)\rangle
    -\langle F\rangle\langle-\Delta S\rangle+O(\Delta S^2)`; to all orders the diagrams without
    vacuum components.  For ch1 and two externals this is PDLT (1.74),

    .. math:: \mathbb E[z_{\mu_1}z_{\mu_2}]=K_{\mu_1\mu_2}-\frac\epsilon2\sum_\rho
              V^{\rho_1\rho_2\rho_3\rho_4}K_{\mu_1\rho_1}K_{\mu_2\rho_2}K_{\rho_3\rho_4};

    for ch4 it is PDLT (4.47),

    .. math:: \mathbb E[z_{i_1;\alpha_1}z_{i_2;\alpha_2}]=\delta_{i_1i_2}\Big[g_{\alpha_1\alpha_2}
              +\frac12\sum_\beta v^{(\beta_1\beta_2)(\beta_3\beta_4)}\big(n\,g_{\alpha_1\beta_1}
              g_{\alpha_2\beta_2}g_{\beta_3\beta_4}+2g_{\alpha_1\beta_1}g_{\alpha_2\beta_3}
              g_{\beta_2\beta_4}\big)\Big].

    Examples
    --------
    >>> import sympy as sp
    >>> i1, i2 = sp.symbols("i1 i2", integer=True)
    >>> a1, a2 = sp.symbols("alpha1 alpha2")
    >>> perturbative_moment(QuarticAction("ch4"), [(i1, a1), (i2, a2)])  # doctest: +NORMALIZE_WHITESPACE
    n*KroneckerDelta(i1, i2)*SampleSum(Propagator(alpha1, beta_1)*Propagator(alpha2, beta_2)*Propagator(beta_3, beta_4)*QuarticCoupling(beta_1, beta_2, beta_3, beta_4), beta_1, beta_2, beta_3, beta_4)/2
    + KroneckerDelta(i1, i2)*Propagator(alpha1, alpha2)
    + KroneckerDelta(i1, i2)*SampleSum(Propagator(alpha1, beta_1)*Propagator(alpha2, beta_3)*Propagator(beta_2, beta_4)*QuarticCoupling(beta_1, beta_2, beta_3, beta_4), beta_1, beta_2, beta_3, beta_4)
    """
    ds = diagrams(action, externals, order, kinds=("connected", "disconnected"))
    return sp.Add(*[d.value for d in ds])


@public
def connected_correlator(action: QuarticAction, externals: Sequence, order: int = 1) -> sp.Expr:
    r"""The connected correlator (cumulant) :math:`\mathbb E[z\cdots z]|_c` to ``order``.

    Parameters
    ----------
    action : QuarticAction
    externals : sequence
        Sample labels (ch1) or ``(neuron, sample)`` pairs (ch4).
    order : int

    Returns
    -------
    sympy expression

    Notes
    -----
    Cumulants are sums of connected diagrams.  First order, ch1, PDLT (1.78):

    .. math:: \mathbb E[z_{\mu_1}z_{\mu_2}z_{\mu_3}z_{\mu_4}]\big|_c=-\epsilon\sum_\rho
              V^{\rho_1\rho_2\rho_3\rho_4}K_{\mu_1\rho_1}K_{\mu_2\rho_2}K_{\mu_3\rho_3}K_{\mu_4\rho_4};

    ch4, PDLT (4.48): three neuron channels
    :math:`\delta_{i_1i_2}\delta_{i_3i_4}\sum_\beta v^{(\beta_1\beta_2)(\beta_3\beta_4)}
    g_{\alpha_1\beta_1}g_{\alpha_2\beta_2}g_{\alpha_3\beta_3}g_{\alpha_4\beta_4}` + (13)(24) + (14)(23).

    Examples
    --------
    >>> import sympy as sp
    >>> i = sp.symbols("i1:5", integer=True)
    >>> a = sp.symbols("alpha1:5")
    >>> len(connected_correlator(QuarticAction("ch4"), list(zip(i, a))).args)
    3
    """
    ds = diagrams(action, externals, order, kinds=("connected",))
    return sp.Add(*[d.value for d in ds])


@public
def partition_function(action: QuarticAction, order: int = 1) -> sp.Expr:
    r"""The normalized partition function :math:`Z/Z_0=\langle e^{-\Delta S}\rangle` to ``order``.

    :math:`Z_0=\sqrt{|2\pi K|}` (ch1; PDLT (1.67)) or :math:`\sqrt{|2\pi g^{-1}|}^{\,n}` (ch4).

    Notes
    -----
    PDLT (1.73): :math:`Z=\sqrt{|2\pi K|}\big[1-\frac18\epsilon\sum V^{\rho_1\rho_2\rho_3\rho_4}
    K_{\rho_1\rho_2}K_{\rho_3\rho_4}+O(\epsilon^2)\big]`; all vacuum diagrams, disconnected ones
    included.

    Examples
    --------
    >>> partition_function(QuarticAction("ch1"))
    -epsilon*SampleSum(Kernel(rho_1, rho_2)*Kernel(rho_3, rho_4)*SymmetricQuarticCoupling(rho_1, rho_2, rho_3, rho_4), rho_1, rho_2, rho_3, rho_4)/8 + 1
    """
    ds = diagrams(action, (), order)
    return sp.Add(*[d.value for d in ds])
