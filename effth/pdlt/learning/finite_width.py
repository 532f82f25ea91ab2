r"""The fully trained network at finite width: the solution (∞.141) and its ensemble mean (∞.155).

A network trained by an MSE algorithm to zero training error ends, to order :math:`1/n`, at
(PDLT (∞.141))

.. math::
    z_{i;\delta}(\infty)=z_{i;\delta}-\widehat H_{ij;\delta\tilde\alpha_1}
    (\widehat H^{-1})^{\tilde\alpha_1\tilde\alpha_2}_{jk}e_{k;\tilde\alpha_2}
    +\big[\widehat{dH}\big]_\delta Z_{A,B}\,ee+\big[\widehat{dd_IH}\big]_\delta Z_{IA,IB}\,eee
    +\big[\widehat{dd_{II}H}\big]_\delta Z_{IIA,IIB}\,eee,

:math:`e=z-y` at initialization, :math:`[X]_\delta=X_\delta-H_{\delta\tilde\alpha_5}
\widetilde H^{\tilde\alpha_5\tilde\alpha_6}X_{\tilde\alpha_6}` (zero on the training set), the
algorithm only in the projectors (:mod:`effth.pdlt.learning.projectors`).  :func:`trained_output` evaluates it for
one network from its own NTK, dNTK and ddNTKs (:func:`effth.simulation.empirical_ntk`).

Averaged over initializations (∞.155)–(∞.160), with the corrections of the symmetrized
:math:`Z_B` in (∞.158) and of the :math:`T`/:math:`U` permutations in (∞.160):

.. math::
    m_{i;\dot\beta}=H_{\dot\beta\tilde\alpha_1}\widetilde H^{\tilde\alpha_1\tilde\alpha_2}
    y_{i;\tilde\alpha_2}+\frac1{n_{L-1}}\Big[M_{i;\dot\beta}-H_{\dot\beta\tilde\alpha_1}
    \widetilde H^{\tilde\alpha_1\tilde\alpha_2}M_{i;\tilde\alpha_2}\Big],\quad
    M=m^{\Delta\rm NTK}+m^{\rm dNTK}+m^{\rm ddNTK\text-I}+m^{\rm ddNTK\text-II},

with :math:`H=\Theta+H^{\{1\}}/n_{L-1}` the NTK mean (PDLT (9.3); the :math:`H^{\{1\}}` part of the
first term is reported as its own :math:`O(1/n)` piece) and :math:`A,B,P,Q,R,S,T,U` of the output
layer from :func:`~effth.pdlt.ntk.ntk_flow`.  :func:`finite_width_mean` evaluates it;
``effth.predict(..., widths=n)`` calls it.

Every contraction with a projector runs in the eigenbasis of :math:`\widetilde H`, where the
projectors are pair-diagonal: cost :math:`O(N_\mathcal D N_\mathcal A^3)` per term, memory of
the rank-4 NTK-hierarchy tensors only.
"""

from __future__ import annotations

from effth._signature import public

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from effth._validate import check_memory, kernel_matrix, last_hidden_width, real_array
from effth.errors import DomainError
from effth.numerics.sample_blocks import SampleRestriction
from effth.pdlt.learning.projectors import AlgorithmProjectors, algorithm_projectors

__all__ = ["trained_output", "TrainedOutput", "finite_width_mean", "FiniteWidthMean",
           "MEAN_PARTS", "OUTPUT_PARTS", "mean_latex", "mean_expressions", "finite_width_covariance",
           "FiniteWidthCovariance", "COVARIANCE_PARTS"]

#: Parts of :math:`n_{L-1}(m-m^\infty)`: the NTK-mean shift :math:`H^{\{1\}}` and the four
#: groups of (∞.157)–(∞.160).
MEAN_PARTS = ("H1", "delta_ntk", "dntk", "ddntk_I", "ddntk_II")
#: Parts of the per-network solution (∞.141).
OUTPUT_PARTS = ("free", "dntk", "ddntk_I", "ddntk_II")


# ----------------------------------------------------------------------------- helpers
def _bracket(f: np.ndarray, H: np.ndarray, Hinv: np.ndarray, P: int) -> np.ndarray:
    r"""Subtract the training-set projection along the sample axis 0 of ``f``: :math:`[f]_\delta`."""
    return f - H[:, :P] @ (Hinv @ f[:P])


def _targets(y: Any, P: int) -> np.ndarray:
    y = real_array(y, "y_train")
    if y.ndim == 1:
        y = y[:, None]
    if y.ndim != 2 or y.shape[0] != P:
        raise DomainError(f"y_train must have shape ({P},) or ({P}, n_out), got {y.shape}")
    if not np.isfinite(y).all():
        raise DomainError("y_train has NaN or infinite entries")
    return y


def _n_train(n_train: Any, N: int) -> int:
    if isinstance(n_train, (bool, np.bool_)) or not isinstance(n_train, (int, np.integer)):
        raise DomainError(f"n_train must be an int, got {n_train!r}")
    P = int(n_train)
    if not 1 <= P <= N:
        raise DomainError(f"n_train must be between 1 and the number of inputs {N}, got {P}")
    return P


def _projectors(H: np.ndarray, P: int, algorithm: str, eta: Any, updates: int | None = None):
    Z = algorithm_projectors(H[:P, :P], algorithm=algorithm, eta=eta)
    if updates is None:
        return Z
    from effth.pdlt.learning.finite_time import finite_time_projectors
    return finite_time_projectors(Z.eigenvalues, Z.eigenvectors, Z.eta, updates)


def _updates(updates: Any, algorithm: str) -> int | None:
    """Check ``updates=`` (finite-time gradient descent with a global rate, PDLT §∞.2.2)."""
    if updates is None:
        return None
    if isinstance(updates, (bool, np.bool_)) or not isinstance(updates, (int, np.integer)) or updates < 0:
        raise DomainError(f"updates must be an int >= 0 (or None: trained to convergence), got {updates!r}")
    if algorithm != "gd":
        raise DomainError(f"updates= is finite-time gradient descent: algorithm='gd' with eta=, "
                          f"not {algorithm!r}")
    return int(updates)


# ----------------------------------------------------------------------------- result types
class _Parts:
    r"""A theory result held as named parts with their sum (``total``), read as every effth
    result: ``value(name)``, ``stderr(name)`` (``None``), no layer axis (the output layer)."""

    total = ""
    part_names: tuple = ()

    @property
    def names(self) -> tuple:
        return (self.total,) + self.part_names

    def _special(self, name: str):
        return None

    def value(self, name: str, layer: Any = None) -> np.ndarray:
        if layer is not None:
            raise DomainError(f"{type(self).__name__} has no layer axis (it is the output layer L)")
        special = self._special(name)
        if special is not None:
            return special
        if name == self.total:
            return sum(self.parts[k] for k in self.part_names)
        if name not in self.parts:
            raise DomainError(f"unknown name {name!r}; expected one of {self.names}")
        return self.parts[name]

    def stderr(self, name: str, layer: Any = None) -> None:
        """``None``: a deterministic theory (the name is checked)."""
        self.value(name, layer)
        return None


# ----------------------------------------------------------------------------- one network
@public
@dataclass(frozen=True, repr=False)
class TrainedOutput(_Parts):
    r"""The fully trained outputs of one finite-width network, (∞.141), on all its inputs.

    ``value(name)`` with ``name`` in ``("z", "free", "dntk", "ddntk_I", "ddntk_II")`` is an
    ``(N, n_out)`` array, training inputs first: ``"z"`` the sum, ``"free"`` the frozen-NTK
    solution with the network's own NTK (∞.93), the others the projector terms of (∞.141).
    """

    parts: dict
    n_train: int
    projectors: AlgorithmProjectors
    layers: tuple = field(default=())

    total = "z"
    part_names = OUTPUT_PARTS

    def __repr__(self) -> str:
        z = self.value("z")
        return (f"TrainedOutput(N={z.shape[0]}, n_train={self.n_train}, n_out={z.shape[1]}, "
                f"{self.projectors.algorithm})")


@public
def trained_output(instance: Any, y_train: Any, *, n_train: int, algorithm: str = "gd",
                   eta: Any = None, H: Any = None, updates: Any = None) -> TrainedOutput:
    r"""The end of training of one network at order :math:`1/n`, PDLT (∞.141).

    Parameters
    ----------
    instance : NTKResult
        One network's outputs and NTK hierarchy at initialization on its ``N`` inputs,
        :func:`effth.simulation.empirical_ntk` with ``order=3`` (``z`` ``(n_out, N)``, ``H``,
        ``dH``, ``ddIH``, ``ddIIH`` with the neural indices first), training inputs first.
    y_train : array_like (P,) or (P, n_out)
    n_train : int
        Number ``P`` of training inputs (the first ``P`` of the instance's inputs).
    algorithm, eta
        As :func:`~effth.pdlt.learning.projectors.algorithm_projectors`.
    H : array_like (N, N), optional
        The NTK mean in the projectors and the subtraction :math:`[\cdot]_\delta`; default: the
        network's own NTK averaged over output components (exact for one output, where the
        remainder is then :math:`O(1/n^2)`).
    updates : int, optional
        After this many steps of gradient descent (``algorithm="gd"``) instead of at convergence:
        the free part with :math:`\varphi_t(\widehat H)=\widehat H^{-1}[1-(1-\eta\widehat H)^t]`
        (∞.91)–(∞.92), the differential parts with the finite-time projectors and the
        training-set part of (∞.124) (:mod:`effth.pdlt.learning.finite_time`).

    Returns
    -------
    TrainedOutput
    """
    for name in ("z", "H", "dH", "ddIH", "ddIIH"):
        if getattr(instance, name, None) is None:
            raise DomainError(f"instance has no {name!r}: use empirical_ntk(..., order=3) on one network")
    z = np.asarray(instance.z, float)
    if z.ndim != 2:
        raise DomainError("instance must hold one network (z of shape (n_out, N)), not a batch")
    m, N = z.shape
    P = _n_train(n_train, N)
    y = _targets(y_train, P)
    if y.shape[1] != m:
        raise DomainError(f"y_train has {y.shape[1]} components but the instance {m} outputs")
    Hh = np.asarray(instance.H, float)                       # (m, m, N, N)
    Hm = (np.einsum("iiab->ab", Hh) / m) if H is None else kernel_matrix(H, "H")
    if Hm.shape != (N, N):
        raise DomainError(f"H must be ({N}, {N}), got {Hm.shape}")
    updates = _updates(updates, algorithm)
    Z = _projectors(Hm, P, algorithm, eta, updates)
    Hinv = Z.inverse()
    e = z[:, :P] - y.T                                       # (m, P)
    # free part (∞.93) with the exact inverse of the instance NTK over (output, sample) pairs;
    # after t steps (∞.91)-(∞.92): Hhat^{-1} [1 - (1 - eta Hhat)^t] on the same pairs
    HAA = Hh[:, :, :P, :P].transpose(0, 2, 1, 3).reshape(m * P, m * P)
    if updates is None:
        sol = np.linalg.solve(HAA, e.reshape(m * P)).reshape(m, P)
    else:
        from effth.pdlt.learning.finite_time import power_t
        lj, Uj = np.linalg.eigh(0.5 * (HAA + HAA.T))
        phi = (1.0 - power_t(lj, Z.eta, updates)) / lj
        sol = (Uj @ (phi * (Uj.T @ e.reshape(m * P)))).reshape(m, P)
    free = z - np.einsum("ijda,ja->id", Hh[:, :, :, :P], sol)
    E = Z.to_eigenbasis(e, (1,))                             # e_{j;p}
    dH = np.asarray(instance.dH, float)
    ddI = np.asarray(instance.ddIH, float)
    ddII = np.asarray(instance.ddIIH, float)

    def terms(zc, lead):
        """The projector terms of (∞.141) (``lead``: the free slot restricted to the training
        set and in the eigenbasis, the coefficient with the output eigen-index first)."""
        D, o = ("o", "o") if lead else ("D", "")
        def sl(T, ax):
            return Z.to_eigenbasis(T[(slice(None),) * ax + (slice(0, P),)], (ax,)) if lead else T
        # training slots to the eigenbasis; the delta slot keeps all N inputs
        dA = sl(Z.to_eigenbasis(dH[:, :, :, :P, :, :P], (3, 5)), 4)     # dH_{j1 i j2; a1 . a2}
        dB = sl(Z.to_eigenbasis(dH[:, :, :, :, :P, :P], (4, 5)), 3)     # dH_{i j1 j2; . a1 a2}
        rIA = sl(Z.to_eigenbasis(ddI[..., :P, :, :P, :P], (4, 6, 7)), 5)
        rIB = sl(Z.to_eigenbasis(ddI[..., :, :P, :P, :P], (5, 6, 7)), 4)
        rIIA = sl(Z.to_eigenbasis(ddII[..., :P, :P, :, :P], (4, 5, 7)), 6)
        rIIB = sl(Z.to_eigenbasis(ddII[..., :, :P, :P, :P], (5, 6, 7)), 4)
        f = lambda spec, *ops: np.einsum(spec.replace("D", D).replace(",pq", "," + o + "pq"), *ops)  # noqa: E731
        dntk = (f("aibpDq,pq,ap,bq->Di", dA, zc["A"], E, E)
                + f("iabDpq,pq,ap,bq->Di", dB, zc["B"], E, E))
        ddI_t = (f("aibcpDqr,pqr,ap,bq,cr->Di", rIA, zc["IA"], E, E, E)
                 + f("iabcDpqr,pqr,ap,bq,cr->Di", rIB, zc["IB"], E, E, E))
        ddII_t = (f("abicpqDr,pqr,ap,bq,cr->Di", rIIA, zc["IIA"], E, E, E)
                  + f("iabcDpqr,pqr,ap,bq,cr->Di", rIIB, zc["IIB"], E, E, E))
        return {"dntk": dntk, "ddntk_I": ddI_t, "ddntk_II": ddII_t}

    parts = {"free": free.T}
    parts.update({k: _bracket(v, Hm, Hinv, P) for k, v in terms(Z.coefficients, False).items()})
    if updates is not None:
        # the training-set part of (∞.124): H_{d a} H~^{-1} z^I_a(t), z^I in the eigenbasis
        U, lam = Z.eigenvectors, Z.eigenvalues
        for k, v in terms(Z.train_coefficients, True).items():
            parts[k] = parts[k] + Hm[:, :P] @ (U @ (v / lam[:, None]))
    return TrainedOutput(parts, P, Z)


# ----------------------------------------------------------------------------- ensemble mean
def _slots(T: np.ndarray, order: str, P: int) -> np.ndarray:
    """``T`` with its axes labelled by ``order`` (``'D'`` the free sample, ``'1'..'3'`` training
    slots) as ``X[D, a1, a2, a3]``, training slots restricted to the first ``P`` inputs."""
    letters = {"D": "D", "1": "a", "2": "b", "3": "c"}
    # restrict first (an N P^3 view), then reorder: no copy of the whole N^4 tensor
    T = T[tuple(slice(None) if c == "D" else slice(0, P) for c in order)]
    return np.einsum("".join(letters[c] for c in order) + "->Dabc", T)


def _contract(T_hat: np.ndarray, z: np.ndarray, sup: str, rhs: np.ndarray, lead: bool = False) -> np.ndarray:
    r""":math:`\sum T_{D a_1a_2a_3}Z^{\rm sup}\,\mathrm{rhs}_{i;\cdots}` in the eigenbasis.

    ``sup`` spells the projector's superscript over the letters ``abc`` (the slots of ``T``) and
    ``d``, ``e``, ``f`` (the slots of ``rhs``): ``"abcd"`` is :math:`Z^{a_1a_2a_3a_4}` contracted
    with :math:`y_{i;a_4}`, ``"abcefd"`` is :math:`Z^{a_1a_2a_3a_5a_6a_4}` with
    :math:`W_{i;a_4a_5a_6}`.  The projector pairs superscript positions :math:`k` and
    :math:`k+\mathrm{rank}/2` with one eigen-index each (module :mod:`effth.pdlt.learning.projectors`).
    """
    half = len(sup) // 2
    eig = "pqr"[:half]
    m = {}
    for k in range(half):
        m[sup[k]] = eig[k]
        m[sup[k + half]] = eig[k]
    tail = "def"[:len(sup) - 3]
    spec = ("D" + "".join(m[c] for c in "abc") + "," + ("D" if lead else "") + eig + ",i"
            + "".join(m[c] for c in tail) + "->Di")
    return np.einsum(spec, T_hat, z, rhs, optimize=True)


#: The projector terms of (∞.158)–(∞.160) as corrected: per part, a list of
#: ``(sum of (coefficient, tensor, slots), projector, superscript)``; ``slots`` places the
#: free sample ``D`` and the training samples ``1..3`` in the tensor's book slot order, the
#: superscript spells the projector's indices over ``a..c`` (the tensor's training samples)
#: and ``d..f`` (those of ``y`` or ``W``).  ``Bsym`` is :math:`Z_B^{a_1a_2a_3a_4}+Z_B^{a_2a_1a_4a_3}`
#: (the printed :math:`2Z_B` holds only for a symmetric :math:`Z_B`); in (∞.160) the
#: :math:`Z_{IIB}` superscripts of :math:`T` and :math:`U` are those of the brute-force
#: expectation (exchanged with respect to the print).
_TERMS = {
    "dntk": [
        ((("1", "P", "D123"), ("1", "Q", "D123"), ("nL", "Q", "D213")), "Bsym", "abcd"),
        ((("nL", "P", "1D23"), ("1", "Q", "1D23"), ("1", "Q", "12D3")), "A", "abcd"),
        ((("1", "P", "1D23"), ("nL", "Q", "1D23"), ("1", "Q", "12D3")), "A", "abdc"),
    ],
    "ddntk_I": [
        ((("1", "R", "D123"),), "IB", "abcdef"),
        ((("1", "R", "D123"),), "IB", "bcaefd"),
        ((("1", "R", "D123"),), "IB", "cabfde"),
        ((("1", "R", "1D23"),), "IA", "abcdef"),
        ((("1", "R", "123D"),), "IA", "abcefd"),
        ((("1", "R", "13D2"),), "IA", "abcfde"),
    ],
    "ddntk_II": [
        ((("1", "S", "D123"),), "IIB", "abcdef"),
        ((("1", "T", "D123"),), "IIB", "cabfde"),
        ((("1", "U", "D123"),), "IIB", "bcaefd"),
        ((("1", "S", "12D3"),), "IIA", "abcefd"),
        ((("1", "T", "1D32"),), "IIA", "abcdef"),
        ((("1", "U", "132D"),), "IIA", "abcfde"),
    ],
}

#: (∞.157) with the sign of the exact expansion: ``(coefficient, tensor, slots)`` contracted as
#: :math:`-\sum X_{\delta\tilde\alpha_1\tilde\alpha_2\tilde\alpha_3}\widetilde H^{\tilde\alpha_1
#: \tilde\alpha_2}\widetilde H^{\tilde\alpha_3\tilde\alpha_4}y_{i;\tilde\alpha_4}`.
_DELTA_NTK = (("1", "A", "D123"), ("1", "B", "D213"), ("nL", "B", "D312"))

#: (∞.159): :math:`W_{i;\tilde\alpha_4\tilde\alpha_5\tilde\alpha_6}` as ``(y slot, factor,
#: factor slots)`` over the letters ``d, e, f`` (= :math:`\tilde\alpha_{4,5,6}`); ``"yy"`` is
#: :math:`\sum_jy_{j;\cdot}y_{j;\cdot}`, ``"nLK"`` :math:`n_LK^{(L)}`.
_W_TERMS = (("d", "yy", "ef"), ("d", "nLK", "ef"), ("e", "K", "fd"), ("f", "K", "de"))

_SAMPLE = {"D": r"\delta", **{c: rf"\tilde\alpha_{{{k}}}" for k, c in enumerate("123", 1)},
           **{c: rf"\tilde\alpha_{{{k}}}" for k, c in enumerate("abcdef", 1)}}
_PROJ = {"A": "Z_A", "B": "Z_B", "IA": "Z_{IA}", "IB": "Z_{IB}", "IIA": "Z_{IIA}", "IIB": "Z_{IIB}"}


def _printing_classes() -> dict:
    """Printing-only tensors in the book's slot order (no canonicalisation of indices)."""
    from effth.algebra.tensors import SampleTensor

    def make(name, stem, rank, raised=False, pairs=False):
        body = {"rank": rank, "symmetry": "none", "stem": stem, "raised": raised}
        if pairs:
            body["_latex_indices"] = lambda self, printer: "({}{})({}{})".format(
                *(printer._print(i) for i in self.indices))
        return type(name, (SampleTensor,), body)

    out = {t: make(f"_{t}", t, 4, pairs=(t == "A")) for t in "ABPQRSTU"}
    out["K"] = make("_Kp", "K", 2)
    out["H"] = make("_Hp", "H", 2)
    out["Theta"] = make("_Thetap", r"\Theta", 2)
    out["H1"] = type("_H1p", (out["H"],), {"layer_prefix": r"\{1\}"})
    out["Hinv"] = make("_Hinvp", r"\widetilde H", 2, raised=True)
    for k, v in _PROJ.items():
        out["Z" + k] = make(f"_Z{k}", v, 4 if len(k) == 1 else 6, raised=True)
    return out


_PRINTING: dict = {}


def mean_expressions() -> list:
    r"""The :math:`O(1/n)` mean as ``(lhs, rhs)`` SymPy expressions, built from the term tables
    that :func:`finite_width_mean` contracts (``_DELTA_NTK``, ``_TERMS``, ``_W_TERMS``): sample
    tensors in the book's slot order, :class:`~effth.algebra.tensors.SampleSum` over the training
    samples :math:`\tilde\alpha_k`, the free sample :math:`\delta`, neuron :math:`i`.  Printed by
    :func:`mean_latex`; evaluating a right-hand side on the statistics gives the computed part."""
    import sympy as sp

    from effth.algebra.tensors import SampleSum
    from effth.pdlt.learning.prediction import _Component, _Head

    if not _PRINTING:
        _PRINTING.update(_printing_classes())
    C = _PRINTING
    L, nL, nprev = sp.Symbol("L"), sp.Symbol("n_L"), sp.Symbol("n_{L-1}")
    i, j = sp.Symbol("i", integer=True), sp.Symbol("j", integer=True)
    d, bd = sp.Symbol("delta"), sp.Symbol("betadot")
    b1, b2 = sp.Symbol("betadot_1"), sp.Symbol("betadot_2")
    al = {c: sp.Symbol(f"alphatilde_{k}") for k, c in enumerate("abcdef", 1)}
    slot = {"D": d, "1": al["a"], "2": al["b"], "3": al["c"]}
    coef = lambda c: nL if c == "nL" else sp.Integer(1)                       # noqa: E731

    def y(s, n=i):
        return _Component("y", n, s)

    def stat(t, slots):
        return C[t](*(slot[x] for x in slots), L)

    def group_sum(group):
        return sp.Add(*(coef(c) * stat(t, slots) for c, t, slots in group), evaluate=False)

    A1, A2, A3, A4 = (al[c] for c in "abcd")
    # (infinity.157)
    dntk_core = sp.Mul(group_sum(_DELTA_NTK), C["Hinv"](A1, A2), C["Hinv"](A3, A4), y(A4), evaluate=False)
    pairs = [(_Head(r"m^{\Delta\mathrm{NTK}}_{i;\delta}"),
              sp.Mul(-1, SampleSum(dntk_core, A1, A2, A3, A4), evaluate=False))]
    heads = {"dntk": r"m^{\mathrm{dNTK}}_{i;\delta}", "ddntk_I": r"m^{\mathrm{ddNTK\text{-}I}}_{i;\delta}",
             "ddntk_II": r"m^{\mathrm{ddNTK\text{-}II}}_{i;\delta}"}
    for part, terms in _TERMS.items():
        summed = [al[c] for c in ("abcd" if part == "dntk" else "abcdef")]
        rhs = y(A4) if part == "dntk" else _Component(
            "W", i, sp.Symbol("".join(rf"\tilde{{\alpha}}_{{{k}}}" for k in (4, 5, 6))))
        body = []
        for group, proj, sup in terms:
            if proj == "Bsym":
                z = sp.Add(C["ZB"](*(al[c] for c in "abcd")), C["ZB"](*(al[c] for c in "badc")),
                           evaluate=False)
            else:
                z = C["Z" + proj](*(al[c] for c in sup))
            # one summed term per projector term, so the line breaks between them
            body.append(sp.Mul(-1, SampleSum(sp.Mul(group_sum(group), z, rhs, evaluate=False), *summed),
                               evaluate=False))
        pairs.append((_Head(heads[part]), sp.Add(*body, evaluate=False)))
    # (infinity.159)
    fac = {"yy": lambda a, b: SampleSum(sp.Mul(y(a, j), y(b, j), evaluate=False), j),
           "nLK": lambda a, b: sp.Mul(nL, C["K"](a, b, L), evaluate=False),
           "K": lambda a, b: C["K"](a, b, L)}
    wt = sp.Add(*(sp.Mul(y(al[ys]), fac[name](al[ks[0]], al[ks[1]]), evaluate=False)
                  for ys, name, ks in _W_TERMS), evaluate=False)
    pairs.append((_Component("W", i, sp.Symbol(r"\tilde{\alpha}_{4}\tilde{\alpha}_{5}\tilde{\alpha}_{6}")),
                  wt))
    # (infinity.155): the mean, the training-set subtraction and H = Theta + H1 / n
    M = lambda s: _Component("M", i, s)                                      # noqa: E731
    first = [
        (_Head(r"m_{i;\dot{\beta}}"), sp.Add(
            SampleSum(sp.Mul(C["H"](bd, A1), C["Hinv"](A1, A2), y(A2), evaluate=False), A1, A2),
            sp.Mul(1 / nprev, sp.Add(M(bd), sp.Mul(-1, SampleSum(sp.Mul(
                C["H"](bd, A1), C["Hinv"](A1, A2), M(A2), evaluate=False), A1, A2), evaluate=False),
                evaluate=False), evaluate=False), evaluate=False)),
        (C["H"](b1, b2), sp.Add(C["Theta"](b1, b2, L), sp.Mul(1 / nprev, C["H1"](b1, b2, L), evaluate=False),
                                evaluate=False)),
        (M(d), sp.Add(*(h for h, _ in pairs[:4]), evaluate=False)),
    ]
    return first + pairs


@public
def mean_latex(width: float | None = None) -> str:
    r"""The :math:`O(1/n)` mean of trained networks, (∞.155)–(∞.160) as evaluated here, in LaTeX.

    The expressions of :func:`mean_expressions` (the same term tables that
    :func:`finite_width_mean` contracts, with the corrections to (∞.157), (∞.158) and (∞.160))
    printed by :func:`effth.latex` and broken at term boundaries in an ``aligned`` block.
    """
    from effth.dmft.series.formulas import align_rows
    from effth.printing import latex
    from effth.printing.formula import LINE_WIDTH

    lines = [f"{latex(lhs, order='none')}={latex(rhs, order='none')}" for lhs, rhs in mean_expressions()]
    return align_rows(lines, LINE_WIDTH if width is None else width, "aligned")


class _ExpansionParts(_Parts):
    r"""A theory quantity at infinite width plus its :math:`O(1/n)` coefficient, held in parts.

    Subclasses set :attr:`stem` (``"mean"``, ``"covariance"``) and :attr:`part_names`; the names
    read are ``stem`` (infinite width), ``stem + "1"`` (:math:`n_{L-1}` times the :math:`O(1/n)`
    term, the sum of the parts), ``stem + "_at_width"`` and every part.
    """

    stem = ""

    @property
    def total(self) -> str:
        return self.stem + "1"

    @property
    def names(self) -> tuple:
        return (self.stem, self.total, self.stem + "_at_width") + self.part_names

    def _special(self, name: str):
        if name == self.stem:
            return self.infinite
        if name == self.stem + "_at_width":
            if self.width is None:
                raise DomainError(f"no width given: pass widths= to finite_width_{self.stem}")
            return self.infinite + self.value(self.total) / self.width
        return None


@public
@dataclass(frozen=True, repr=False)
class FiniteWidthMean(_ExpansionParts):
    r"""The ensemble mean of trained finite-width networks at order :math:`1/n`, PDLT (∞.155).

    ``value(name)`` is an ``(N, n_out)`` array over all inputs (training first):

    * ``"mean"``: :math:`m^\infty=\Theta_{\delta\tilde\alpha_1}\widetilde\Theta^{\tilde\alpha_1
      \tilde\alpha_2}y_{\tilde\alpha_2}` (10.40);
    * ``"mean1"``: :math:`n_{L-1}(m-m^\infty)`, the sum of the parts below;
    * ``"mean_at_width"``: :math:`m^\infty+\text{mean1}/n_{L-1}` at :attr:`width`;
    * the parts of ``"mean1"`` (:data:`MEAN_PARTS`): ``"H1"`` the NTK-mean shift
      :math:`H^{\{1\}}` in (∞.156), ``"delta_ntk"`` (∞.157), ``"dntk"`` (∞.158, corrected),
      ``"ddntk_I"`` (∞.159), ``"ddntk_II"`` (∞.160, corrected), each with the training-set
      subtraction of (∞.155) applied (zero on the training inputs).
    """

    parts: dict
    infinite: np.ndarray
    n_train: int
    width: int | None
    projectors: AlgorithmProjectors
    layers: tuple = field(default=())

    stem = "mean"
    part_names = MEAN_PARTS

    def latex(self) -> str:
        """The formula evaluated (:func:`mean_latex`)."""
        return mean_latex()

    def _repr_latex_(self) -> str:
        return "$$" + self.latex() + "$$"

    def __repr__(self) -> str:
        return (f"FiniteWidthMean(N={self.infinite.shape[0]}, n_train={self.n_train}, "
                f"n_out={self.infinite.shape[1]}, {self.projectors.algorithm}, width={self.width})")


_TENSORS = ("Theta", "H1", "K", "A", "B", "P", "Q", "R", "S", "T", "U")


def _setup(tensors: Any, names: tuple, y_train: Any, n_train: Any, algorithm: str, eta: Any,
           width: Any, layer: int | None, max_test: int, updates: Any = None) -> tuple:
    """Read and check the output-layer statistics ``names`` (from an NTKFlow or a mapping), the
    targets, the width and the projectors: ``(T, y, P, width, Theta, projectors)``.

    Only the entries with at most ``max_test`` distinct test samples enter the result (the mean
    reads one, the covariance two): those must be finite, the others (NaN in a flow computed
    with ``ntk_flow(..., n_train=, max_test=)``) are set to zero, where they meet zero
    coefficients."""
    held = getattr(getattr(tensors, "restrict", None), "n_train", None)
    if held is not None and held != n_train:
        raise DomainError(f"the flow was computed with n_train={held} (ntk_flow(..., n_train=)) "
                          f"but n_train={n_train!r} here; the training inputs must be the same")
    if hasattr(tensors, "value") and hasattr(tensors, "layers"):
        lay = tensors.layers[-1] if layer is None else layer
        missing = [k for k in names if k not in tensors.names]
        if missing:
            raise DomainError(f"the NTK flow lacks {missing}: compute ntk_flow with every statistic "
                              "(kinked activations have no dNTK/ddNTK statistics, PDLT §∞.1)")
        held_t = getattr(tensors, "tensors", {})
        li = tensors.layers.index(lay) if lay in tensors.layers else None
        # the flow's own (N,)*4 arrays read in place (read-only use below), not copied
        T = {k: (held_t[k][li] if k in held_t and li is not None and held_t[k].dtype == float
                 else np.asarray(tensors.value(k, layer=lay), float)) for k in names}
    else:
        from collections.abc import Mapping
        if not isinstance(tensors, Mapping):
            raise DomainError(f"tensors must be an NTKFlow or a mapping of the statistics {names}, "
                              f"got {type(tensors).__name__}")
        try:
            T = {k: np.asarray(tensors[k], float) for k in names}
        except KeyError as exc:
            raise DomainError(f"tensors lacks {exc.args[0]!r}; needs {names}") from None
        except (TypeError, ValueError) as exc:
            raise DomainError(f"tensors must hold real numeric arrays: {exc}") from None
    if T["Theta"].ndim != 2:
        raise DomainError(f"Theta must be an (N, N) matrix, got shape {T['Theta'].shape}")
    N = T["Theta"].shape[0]
    P = _n_train(n_train, N)
    need = SampleRestriction(P, max_test)
    for k in names:
        want = (N, N) if k in ("Theta", "H1", "K", "G1") else (N,) * 4
        if T[k].shape != want:
            raise DomainError(f"{k} must have shape {want}, got {T[k].shape}")
        ok = np.isfinite(T[k])
        if not ok.all():
            m = need.mask(N, T[k].ndim)
            if np.any(m > ok):                   # a needed entry that is not finite
                raise DomainError(
                    f"{k} has NaN or infinite entries among those with at most {max_test} test "
                    f"input(s) (the first n_train={P} inputs are training inputs; a flow computed "
                    f"with ntk_flow(..., n_train={P}, max_test={max_test}) holds them)")
            if max_test > 1:
                T[k] = np.where(m, T[k], 0.0)
            # max_test = 1 (the mean): every read is of an entry with at most one test input
            # (the free slot D, the training slots restricted to the first P inputs), so the
            # others are never met and the array is read as it is (no N^4 copy)
        del ok
    y = _targets(y_train, P)
    if width is not None:
        width = last_hidden_width(width, "widths", equal=True)
    Th = kernel_matrix(T["Theta"], "Theta")
    return T, y, P, width, Th, _projectors(Th, P, algorithm, eta, _updates(updates, algorithm))


@public
def finite_width_mean(tensors: Any, y_train: Any, *, n_train: int, algorithm: str = "gd",
                      eta: Any = None, widths: Any = None, layer: int | None = None,
                      updates: Any = None) -> FiniteWidthMean:
    r"""Ensemble mean of the outputs of networks trained to convergence, at order :math:`1/n`.

    PDLT (∞.155)–(∞.160) with two corrections, both checked against the brute-force expectation
    of (∞.141) over the NTK-hierarchy statistics (8.82), (11.45), (∞.11), (∞.12): in (∞.158)
    :math:`2Z_B^{\tilde\alpha_1\tilde\alpha_2\tilde\alpha_3\tilde\alpha_4}\to Z_B^{\tilde\alpha_1
    \tilde\alpha_2\tilde\alpha_3\tilde\alpha_4}+Z_B^{\tilde\alpha_2\tilde\alpha_1\tilde\alpha_4
    \tilde\alpha_3}` (:math:`Z_B` of gradient descent is not symmetric), and in (∞.160) the
    :math:`Z_{IIB}` permutations of :math:`T` and :math:`U` are exchanged.  The NTK-mean shift
    :math:`H^{\{1\}}` (PDLT (9.3); footnote 7 of §∞.2 calls it marginal, but it is of the same
    order) is included as the part ``"H1"``.

    Parameters
    ----------
    tensors : NTKFlow or mapping
        The output-layer statistics on training-then-test inputs: an
        :class:`~effth.pdlt.NTKFlow` (all statistics; its last layer, or ``layer=``) or
        a mapping with ``"Theta"``, ``"H1"``, ``"K"`` ``(N, N)`` and ``"A"``, ``"B"``, ``"P"``,
        ``"Q"``, ``"R"``, ``"S"``, ``"T"``, ``"U"`` ``(N, N, N, N)`` (book slot order).
    y_train : array_like (P,) or (P, n_out)
    n_train : int
        The first ``P`` inputs are the training set.
    algorithm : {"gd", "gradient_flow", "two_step"}
    eta : float
        Learning rate for ``"gd"`` (stable: :math:`\eta\lambda_{\max}(\widetilde\Theta)<2`).
    widths : int or sequence of equal ints, optional
        The hidden widths; :math:`n_{L-1}` for ``"mean_at_width"``.
    layer : int, optional
        Which layer of an NTKFlow (default: the last).

    Returns
    -------
    FiniteWidthMean

    Raises
    ------
    DomainError
        Missing statistics (an NTKFlow of a kinked activation has no dNTK/ddNTK statistics: the
        :math:`1/n` dynamics does not apply there, PDLT §∞.1), a singular training NTK, an
        unstable learning rate, inconsistent shapes.
    """
    T, y, P, width, Th, Z = _setup(tensors, _TENSORS, y_train, n_train, algorithm, eta, widths, layer, 1,
                                   updates)
    if updates is not None:
        return _finite_time_mean(T, y, P, width, Th, Z)
    nL = y.shape[1]
    Hinv = Z.inverse()
    v = Hinv @ y                                                   # (P, nL)
    yh = Z.to_eigenbasis(y, (0,)).T                                # (nL, P): y_{i;p}
    K = T["K"][:P, :P]
    # W_{i;a4 a5 a6}, (∞.159)
    factors = {"yy": y @ y.T, "nLK": nL * K, "K": K}
    W = sum(np.einsum(f"{ys}i,{ks}->idef", y, factors[name]) for ys, name, ks in _W_TERMS)
    Wh = Z.to_eigenbasis(W, (1, 2, 3))
    parts = {}
    parts["H1"] = T["H1"][:, :P] @ v
    # (∞.157) with the sign of the exact expansion of the instance inverse (the printed (∞.154)
    # carries both Delta H lines with flipped signs)
    parts["delta_ntk"] = -sum((nL if c == "nL" else 1) * np.einsum("Dabc,ab,ci->Di", _slots(T[t], slots, P),
                                                                   Hinv, v)
                              for c, t, slots in _DELTA_NTK)
    stats = {k: T[k] for k in "PQRSTU"}
    zc = dict(Z.coefficients, Bsym=Z.coefficients["B"] + Z.coefficients["B"].T)
    for part, terms in _TERMS.items():
        rhs = yh if part == "dntk" else Wh
        total = 0.0
        for group, proj, sup in terms:
            X = sum((nL if c == "nL" else 1) * _slots(stats[t], slots, P) for c, t, slots in group)
            total = total + _contract(Z.to_eigenbasis(X, (1, 2, 3)), zc[proj], sup, rhs)
        parts[part] = -total
    parts = {k: _bracket(parts[k], Th, Hinv, P) for k in MEAN_PARTS}
    mean_inf = Th[:, :P] @ v
    return FiniteWidthMean(parts, mean_inf, P, width, Z)


def _finite_time_mean(T: dict, y: np.ndarray, P: int, width, Th: np.ndarray, Z) -> FiniteWidthMean:
    r"""The :math:`O(1/n)` mean after ``Z.updates`` steps of gradient descent (PDLT §∞.2.2).

    The expectation of the per-network solution after :math:`t` steps
    (:func:`trained_output` with ``updates=``): the free part
    :math:`\mathbb E[\widehat H_{\delta\tilde\alpha}\varphi_t(\widehat H)]y` expanded to second
    order in :math:`\widehat{\Delta H}` by the Fréchet derivatives of :math:`\varphi_t`
    (Daleckii–Krein: the divided differences ``Z.phi1``, ``Z.phi2``), the NTK-mean shift
    :math:`H^{\{1\}}` at first order, and the differential parts -- the terms of (∞.155)–(∞.160)
    with the finite-time projectors, bracketed, plus the training-set part of (∞.124)."""
    nL = y.shape[1]
    U, lam = Z.eigenvectors, Z.eigenvalues
    Hinv = Z.inverse()
    yh = U.T @ y                                                   # (P, nL): y_{p;i}
    K = T["K"][:P, :P]
    yy = y @ y.T
    W = (np.einsum("di,ef->idef", y, yy + nL * K) + np.einsum("ei,fd->idef", y, K)
         + np.einsum("fi,de->idef", y, K))
    Wh = Z.to_eigenbasis(W, (1, 2, 3))
    ThA = Th[:, :P]
    parts = {}
    # H1: d/dH of H_{d a} phi_t(H~) y in the direction H1
    H1h = U.T @ T["H1"][:P, :P] @ U
    parts["H1"] = T["H1"][:, :P] @ (U @ (Z.phi[:, None] * yh)) + ThA @ (U @ ((H1h * Z.phi1) @ yh))
    # Delta NTK: E[dH_{d a} Dphi[dH]] y + H_{d a} E[D^2 phi[dH, dH]] y / 2, the pairs of (8.82)
    X = _slots(T["A"], "D123", P) + _slots(T["B"], "D213", P) + nL * _slots(T["B"], "D312", P)
    Y = np.einsum("Dabc,ap,bp,cq->Dpq", X, U, U, U, optimize=True)
    term1 = np.einsum("Dpq,pq,qi->Di", Y, Z.phi1, yh, optimize=True)
    X4 = np.einsum("abcd,ap,bq,cq,dr->pqr", X[:P], U, U, U, U, optimize=True)
    term2 = ThA @ (U @ np.einsum("pqr,pqr,ri->pi", X4, Z.phi2, yh, optimize=True))
    parts["delta_ntk"] = term1 + term2
    stats = {k: T[k] for k in "PQRSTU"}
    zc = dict(Z.coefficients, Bsym=Z.coefficients["B"] + Z.coefficients["B"].T)
    zt = dict(Z.train_coefficients, Bsym=Z.train_coefficients["B"] + Z.train_coefficients["B"].transpose(0, 2, 1))
    for part, terms in _TERMS.items():
        rhs = yh.T if part == "dntk" else Wh
        total, train = 0.0, 0.0
        for group, proj, sup in terms:
            Xs = sum((nL if c == "nL" else 1) * _slots(stats[t], slots, P) for c, t, slots in group)
            Xh = Z.to_eigenbasis(Xs, (1, 2, 3))
            total = total + _contract(Xh, zc[proj], sup, rhs)
            train = train + _contract(Z.to_eigenbasis(Xh[:P], (0,)), zt[proj], sup, rhs, lead=True)
        parts[part] = -(_bracket(total, Th, Hinv, P) + ThA @ (U @ (train / lam[:, None])))
    mean_inf = ThA @ (U @ (Z.phi[:, None] * yh))
    return FiniteWidthMean(parts, mean_inf, P, width, Z)


# ----------------------------------------------------------------------------- covariance
def _decomposition(X: np.ndarray, m: int, pattern: str) -> np.ndarray:
    r"""Output-index form of an :math:`O(1/n)` decomposition, times :math:`n`.

    ``pattern`` names the book's Kronecker-delta decomposition of a four-slot statistic over
    slots :math:`1..4` (each slot an output index and a sample index):

    * ``"HH"`` (8.82): :math:`\delta_{12}\delta_{34}A_{(s_1s_2)(s_3s_4)}+\delta_{13}\delta_{24}B_{s_1s_3s_2s_4}+
      \delta_{14}\delta_{23}B_{s_1s_4s_2s_3}` with ``X = (A, B)``;
    * ``"zzH"`` (8.67): :math:`\mathbb E[z_1z_2\widehat{\Delta H}_{34}]`, ``X = (D, F)``;
    * ``"dHz"`` (11.45): :math:`\mathbb E[\widehat{dH}_{123}z_4]`, ``X = (P, Q)``;
    * ``"ddI"``, ``"ddII"`` (∞.11), (∞.12): ``X = R`` or ``(S, T, U)``.

    Returns ``E[i1, i2, i3, i4, s1, s2, s3, s4]``.
    """
    d = np.eye(m)
    if pattern in ("HH", "zzH"):
        first, second = X
        return (np.einsum("ab,cd,wxyz->abcdwxyz", d, d, first)
                + np.einsum("ac,bd,wyxz->abcdwxyz", d, d, second)
                + np.einsum("ad,bc,wzxy->abcdwxyz", d, d, second))
    if pattern == "dHz":
        Pt, Q = X
        return (np.einsum("ad,bc,wxyz->abcdwxyz", d, d, Pt) + np.einsum("ab,cd,wxyz->abcdwxyz", d, d, Q)
                + np.einsum("ac,bd,wyxz->abcdwxyz", d, d, Q))
    if pattern == "ddI":
        R = X
        return (np.einsum("ab,cd,wxyz->abcdwxyz", d, d, R) + np.einsum("ac,db,wyzx->abcdwxyz", d, d, R)
                + np.einsum("ad,bc,wzxy->abcdwxyz", d, d, R))
    if pattern == "ddII":
        S, T, U = X
        return (np.einsum("ab,cd,wxyz->abcdwxyz", d, d, S) + np.einsum("ac,db,wyzx->abcdwxyz", d, d, T)
                + np.einsum("ad,bc,wzxy->abcdwxyz", d, d, U))
    raise ValueError(pattern)  # pragma: no cover


#: Parts of :math:`n_{L-1}(\mathrm{Cov}-\mathrm{Cov}^\infty)`, see :func:`finite_width_covariance`.
COVARIANCE_PARTS = ("metric", "ntk_fluctuation", "dntk", "ddntk")


def covariance_bytes(N: int, P: int, m: int, updates: int | None = None) -> float:
    """Estimated peak bytes of :func:`finite_width_covariance` on ``N`` inputs (``P`` training,
    ``m`` outputs): five output-index decompositions of ``m^4 N^4`` entries and their restricted
    copies, the dense :math:`Z_A, Z_B` (``P^4``) and the third moments (``m^4 N P^3``); after
    ``updates`` steps also the training-set parts of :math:`Z_A(t), Z_B(t)` (``P^5``) and the
    first-order free-part map (``N^2 P^2``)."""
    extra = 0.0 if updates is None else 2.0 * float(P) ** 5 + 2.0 * (float(N) * P) ** 2
    return 8.0 * (10.0 * m ** 4 * float(N) ** 4 + 2.0 * float(P) ** 4 + 2.0 * m ** 4 * N * float(P) ** 3
                  + extra)


@public
@dataclass(frozen=True, repr=False)
class FiniteWidthCovariance(_ExpansionParts):
    r"""Covariance of the outputs of trained finite-width networks at order :math:`1/n`.

    ``value(name)`` is ``(N, N, n_out, n_out)``: :math:`\mathrm{Cov}[z_{i_1;\delta_1}(T),
    z_{i_2;\delta_2}(T)]` at ``[δ1, δ2, i1, i2]`` (training inputs first).  Names:
    ``"covariance"`` (infinite width, (10.41)), ``"covariance1"`` (:math:`n_{L-1}` times the
    :math:`O(1/n)` part), ``"covariance_at_width"``, and the parts of ``"covariance1"``
    (:data:`COVARIANCE_PARTS`): ``"metric"`` (the NLO metric :math:`G^{\{1\}}` and the NTK-mean
    shift :math:`H^{\{1\}}` in the frozen-NTK solution), ``"ntk_fluctuation"`` (the NTK
    variance :math:`A, B` and the NTK–preactivation correlators :math:`D, F`), ``"dntk"``
    (:math:`P, Q`), ``"ddntk"`` (:math:`R, S, T, U`).
    """

    parts: dict
    infinite: np.ndarray
    n_train: int
    width: int | None
    layers: tuple = field(default=())

    stem = "covariance"
    part_names = COVARIANCE_PARTS

    def __repr__(self) -> str:
        return f"FiniteWidthCovariance(N={self.infinite.shape[0]}, n_train={self.n_train}, width={self.width})"


@public
def finite_width_covariance(tensors: Any, y_train: Any, *, n_train: int, algorithm: str = "gd",
                            eta: Any = None, widths: Any = None, layer: int | None = None,
                            updates: Any = None) -> FiniteWidthCovariance:
    r"""Covariance of the outputs of trained networks (to convergence or after ``updates`` steps of
    gradient descent), at order :math:`1/n`.

    Not printed in the book (PDLT (∞.161) gives one of its terms, (∞.162)).  Derived here as the
    connected second moment of the per-network solution (∞.141) -- after ``updates`` steps the
    solution of §∞.2.2 (:func:`trained_output` with ``updates=``) -- with the free part
    :math:`\widehat H_{\delta\tilde\alpha}\varphi(\widehat H)e` expanded to second order in
    :math:`\widehat{\Delta H}` (Daleckii–Krein: the divided differences of :math:`\varphi=
    \lambda^{-1}` at convergence, :math:`\varphi_t=[1-(1-\eta\lambda)^t]/\lambda` after
    :math:`t` steps), over the statistics of the output layer at initialization, kept to
    :math:`O(1/n)`: :math:`\mathbb E[zz]=K+G^{\{1\}}/n` (PDLT (4.106)), the NTK mean
    :math:`\Theta+H^{\{1\}}/n`, :math:`\mathbb E[\widehat{\Delta H}\widehat{\Delta H}]` (8.82),
    :math:`\mathbb E[zz\widehat{\Delta H}]` (8.67), :math:`\mathbb E[\widehat{dH}z]` (11.45),
    :math:`\mathbb E[\widehat{dd_IH}]`, :math:`\mathbb E[\widehat{dd_{II}H}]` (∞.11)–(∞.12), and
    Gaussian :math:`z` at leading order.  The contributions at this order are the products of
    the frozen-NTK part :math:`u=z-H_{\delta\tilde\alpha}\varphi(\widetilde H)e` with itself (the
    NLO metric and :math:`H^{\{1\}}`), with the :math:`\widehat{\Delta H}` terms and with the
    dNTK and ddNTK terms (after ``t`` steps with the finite-time projectors and the training-set
    part of (∞.124)), and the square of the first-order :math:`\widehat{\Delta H}` term; every
    other product is :math:`O(n^{-3/2})` or smaller (the square of the dNTK term is
    :math:`O(1/n^2)`: the dNTK fluctuates at :math:`O(1/n)` and
    :math:`\mathbb E[\widehat{dH}\widehat{dH}]` is subleading, PDLT §11.2 footnote 6).  Output components are coupled through the
    targets ("wiring").  At ``updates=0`` it is the covariance at initialization, :math:`K` and
    :math:`G^{\{1\}}`.

    Parameters
    ----------
    tensors : NTKFlow or mapping
        As :func:`finite_width_mean`, plus ``"G1"``, ``"D"``, ``"F"``.
    y_train, n_train, algorithm, eta, widths, layer, updates
        As :func:`finite_width_mean`.

    Returns
    -------
    FiniteWidthCovariance

    Notes
    -----
    The ddNTK projectors stay in the eigenbasis of the training NTK (:math:`N_\mathcal A^3`
    coefficients, never :math:`N_\mathcal A^6` tensors); :math:`Z_A, Z_B` are held densely
    (:math:`N_\mathcal A^4`, after ``t`` steps also their training-set parts,
    :math:`N_\mathcal A^5`) and the output indices are explicit (:math:`n_L^4N^4` entries), so
    it is refused before allocating above the memory bound (:func:`covariance_bytes`).  The
    statistics are read at entries with at most two test inputs
    (``ntk_flow(..., n_train=, max_test=2)``).
    """
    T, y, P, width, Th, Z = _setup(tensors, _TENSORS + ("G1", "D", "F"), y_train, n_train,
                                   algorithm, eta, widths, layer, 2, updates)
    m = y.shape[1]
    N = Th.shape[0]
    finite_time = hasattr(Z, "train_coefficients")
    check_memory(covariance_bytes(N, P, m, Z.updates if finite_time else None),
                 f"the O(1/n) covariance's output-index decompositions "
                 f"and projectors ({N} inputs, {P} training, {m} outputs)",
                 "use fewer test inputs (the covariance of a subset is that subset's block) or "
                 "fewer training inputs")
    K = T["K"]
    U, lam = Z.eigenvectors, Z.eigenvalues
    Hi = Z.inverse()
    # the free part's function of the training NTK and its divided differences (Daleckii-Krein):
    # phi = 1/lambda at convergence (any algorithm), phi_t after t steps of GD
    if finite_time:
        phi, phi1, phi2 = Z.phi, Z.phi1, Z.phi2
    else:
        phi = 1.0 / lam
        phi1 = -1.0 / np.multiply.outer(lam, lam)
        phi2 = 1.0 / np.multiply.outer(np.multiply.outer(lam, lam), lam)
    EA = np.zeros((P, N))
    EA[:, :P] = np.eye(P)
    HU = Th[:, :P] @ U                                   # H_{delta a} u_p^a
    Mb = np.eye(N) - Th[:, :P] @ Hi @ EA                 # the bracket [X]_delta
    Mt = np.eye(N) - (HU * phi) @ U.T @ EA               # u = Mt z + H phi(H~) y
    # the H1 shift of u: -R z / n, R = H1_{d a} phi + H_{d a} Dphi[H1~] (Frechet derivative)
    H1 = T["H1"]
    Rb = (H1[:, :P] @ (U * phi) @ U.T + HU @ ((U.T @ H1[:P, :P] @ U) * phi1) @ U.T) @ EA
    d = np.eye(m)
    KA = K[:, :P]
    # (a) u u: O(1) and the metric / H1 parts
    cov_inf = np.einsum("ab,ij->abij", Mt @ K @ Mt.T, d)
    metric = np.einsum("ab,ij->abij", Mt @ T["G1"] @ Mt.T - Rb @ K @ Mt.T - Mt @ K @ Rb.T, d)
    # NTK fluctuations: E[zz dH~] (8.67) and E[dH~ dH~] (8.82)
    EzzH = _decomposition((T["D"], T["F"]), m, "zzH")        # [i1 i2 i3 i4, s1 s2 s3 s4]
    EHH = _decomposition((T["A"], T["B"]), m, "HH")
    # first order in dH of the free part, -dH_{ij;D p} L1[B, D, p, y] e_{j;y}:
    # L1 = delta_{BD} phi(H~)_{py} + H_{B a} Dphi[dH~] (D a training input)
    L1 = np.einsum("BD,py->BDpy", np.eye(N), (U * phi) @ U.T)
    L1[:, :P] += np.einsum("Ba,Da,pb,ab,yb->BDpy", HU, U, U, phi1, U, optimize=True)
    # (b) u x the first-order term: E[z_{i1;x} z_{j;y} dH_{i2 j; D p}]
    b = -np.einsum("IjijxyDp,Ax,BDpy->ABIi", _restrict(EzzH, "xyDp", P), Mt, L1, optimize=True)
    # (c) u x the second-order term, -(dH_{ij;Bp} Dphi[dH] + H_{B.} D^2phi[dH, dH]/2) e, in the
    #     eigenbasis; E[z_{i1;x} e_{k;s}] = delta K_{xs}
    MKU = Mt @ KA @ U
    E1 = Z.to_eigenbasis(_restrict(EHH, "Dpqr", P), (5, 6, 7))
    E2 = Z.to_eigenbasis(E1[..., :P, :, :, :], (4,))
    c = -(np.einsum("ijjIBaab,ab,Ab->ABIi", E1, phi1, MKU, optimize=True)
          + np.einsum("ijjIabbc,Ba,abc,Ac->ABIi", E2, HU, phi2, MKU, optimize=True))
    del E1, E2
    # (d) the first-order term squared, E[e_j e_k] = delta K + y y
    G2 = np.einsum("jk,pq->jkpq", d, K[:P, :P]) + np.einsum("pj,qk->jkpq", y, y)
    dd = np.einsum("IjikxpDq,Axpr,BDqs,jkrs->ABIi", _restrict(EHH, "xpDq", P), L1, L1, G2,
                   optimize=True)
    del L1
    fluct = b + b.transpose(1, 0, 3, 2) + c + c.transpose(1, 0, 3, 2) + dd
    # the differential terms' free slot: the bracketed part (coefficients Z.coefficients, the
    # map Mb) and after t steps the training-set part of (∞.124), H_{B a} u_o^a / lambda_o
    # times the free slot on the training inputs in the eigenbasis (coefficients with the output
    # eigen-index o first)
    UD = np.zeros((N, P))
    UD[:P] = U
    slots = [("", Mb, Z.coefficients)]
    if finite_time:
        slots.append(("o", (HU / lam, UD), Z.train_coefficients))
    # (e) u x the dNTK terms: E[z_{I;x} dH e_{J;r} e_{L;s}] = E[dH z_I](delta K + y y)_{JLrs}
    #     + E[dH z_{J;r}] delta_{IL} K_{xs} + E[dH z_{L;s}] delta_{IJ} K_{xr}
    E3 = _decomposition((T["P"], T["Q"]), m, "dHz")           # [o0 o1 o2 o3, s0 s1 s2 s3]
    KxA = K[:, :P]
    e_terms = 0.0
    for o, side, zc in slots:
        ops = (side,) if not o else side
        bs = ",BD" if not o else ",Bo,Do"
        for dslots, oslots, proj in (("pDq", "JiL", "A"), ("Dpq", "iJL", "B")):
            Zd = _dense_pairs(U, zc[proj])
            spec = oslots + "{z}" + dslots + "{w}"
            zs = "," + o + "pqrs"
            e_terms = e_terms + (
                np.einsum(spec.format(z="I", w="x") + ",JLrs" + zs + ",Ax" + bs + "->ABIi",
                          _restrict(E3, dslots + "x", P), G2, Zd, Mt, *ops, optimize=True)
                + np.einsum(spec.replace("L", "I").format(z="J", w="r") + ",xs" + zs + ",Ax" + bs + "->ABIi",
                            _restrict(E3, dslots + "r", P), KxA, Zd, Mt, *ops, optimize=True)
                + np.einsum(spec.replace("J", "I").format(z="L", w="s") + ",xr" + zs + ",Ax" + bs + "->ABIi",
                            _restrict(E3, dslots + "s", P), KxA, Zd, Mt, *ops, optimize=True))
            del Zd
    dntk = e_terms + e_terms.transpose(1, 0, 3, 2)
    # (f) u x the ddNTK terms: E[dd] E[z_{I;x} e e e], the latter K (delta K + y y) three ways
    Ez3 = (np.einsum("IJ,xs,KLtu->IJKLxstu", d, KxA, G2) + np.einsum("IK,xt,JLsu->IJKLxstu", d, KxA, G2)
           + np.einsum("IL,xu,JKst->IJKLxstu", d, KxA, G2))
    EI = _decomposition(T["R"], m, "ddI")
    EII = _decomposition((T["S"], T["T"], T["U"]), m, "ddII")
    # the rank-6 projectors in their eigenbasis (pair-diagonal: superscripts k and k+3 share an
    # eigen-index), never as N_A^6 tensors: both sides' training slots go to the eigenbasis
    Ez3_hat = Z.to_eigenbasis(Ez3, (5, 6, 7))                # [I J K L x a b c]
    f = 0.0
    for E, spec, proj in ((EI, "JiKLpDqr", "IA"), (EI, "iJKLDpqr", "IB"),
                          (EII, "JKiLpqDr", "IIA"), (EII, "iJKLDpqr", "IIB")):
        E_hat = Z.to_eigenbasis(_restrict(E, spec[4:], P), tuple(4 + spec[4:].index(c) for c in "pqr"))
        for o, side, zc in slots:
            ops = (side,) if not o else side
            bs = ",BD" if not o else ",Bo,Do"
            f = f + np.einsum(spec.translate(str.maketrans("pqr", "abc")) + "," + o + "abc,IJKLxabc,Ax"
                              + bs + "->ABIi", E_hat, zc[proj], Ez3_hat, Mt, *ops, optimize=True)
    ddntk = f + f.transpose(1, 0, 3, 2)
    parts = {"metric": metric, "ntk_fluctuation": fluct, "dntk": dntk, "ddntk": ddntk}
    return FiniteWidthCovariance(parts, cov_inf, P, width)


def _dense_pairs(U: np.ndarray, z: np.ndarray) -> np.ndarray:
    r"""A rank-4 projector over training samples from its eigen-coefficients (superscripts
    :math:`k` and :math:`k+2` share an eigen-index); a leading output eigen-index ``o`` of a
    training-set part is kept: ``(o, a, b, c, d)``."""
    if z.ndim == 2:
        return np.einsum("ap,bq,cp,dq,pq->abcd", U, U, U, U, z, optimize=True)
    return np.einsum("ap,bq,cp,dq,opq->oabcd", U, U, U, U, z, optimize=True)


def _restrict(E: np.ndarray, samples: str, P: int) -> np.ndarray:
    """Restrict the sample axes (the last four) of ``E`` labelled by lower-case letters other than
    ``x`` to the training inputs; ``D`` and ``x`` keep all inputs."""
    idx = tuple(slice(None) if c in "Dx" else slice(0, P) for c in samples)
    return E[(Ellipsis,) + idx]
