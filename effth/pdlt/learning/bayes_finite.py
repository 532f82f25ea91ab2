r"""Bayesian learning at finite width (PDLT §6.4): the :math:`O(1/n)` posterior, evidence and
representation learning.

At finite width the prior of the outputs :math:`z^{(L)}` is nearly Gaussian: its two-point
function is the metric :math:`G=K+G^{\{1\}}/n` (4.104) and its connected four-point function is
:math:`\tfrac1n[\delta_{i_1i_2}\delta_{i_3i_4}V_{(\alpha_1\alpha_2)(\alpha_3\alpha_4)}+\dots]`
(4.77), with :math:`n=n_{L-1}`; higher cumulants are :math:`O(1/n^2)`.  In the book these enter
through the couplings :math:`g, v` of the quartic action (6.79) and the posterior mean (6.88).
:func:`bayes_posterior` evaluates (6.88) consistently to :math:`O(1/n)`, i.e. with
:math:`g_{\alpha_1\alpha_2}=G_{\alpha_1\alpha_2}-\tfrac12\sum v(n_Lggg+2ggg)` (4.108) and
:math:`v=V/n` with raised indices (4.82) substituted and only first order kept.  The result
is written with the infinite-width objects :math:`\widetilde K` (training block of :math:`K^{(L)}`
plus the noise :math:`\sigma_\varepsilon^2` on the diagonal), :math:`Y_{i;\tilde\alpha}=
\sum\widetilde K^{\tilde\alpha\tilde\alpha_1}y_{i;\tilde\alpha_1}` and
:math:`M^{\tilde\alpha_1\tilde\alpha_2}=\sum_kY_{k;\tilde\alpha_1}Y_{k;\tilde\alpha_2}`:

.. math::
    \mathbb E[z_{i;\dot\beta}|y_\mathcal A] = m^\infty_{i;\dot\beta}
      + \frac1n\Big[\sum\bar G^{\{1\}}_{\dot\beta\tilde\alpha}Y_{i;\tilde\alpha}
      + \frac12\sum\bar V_{(\dot\beta\tilde\alpha_1)(\tilde\alpha_2\tilde\alpha_3)}Y_{i;\tilde\alpha_1}
        \big(M^{\tilde\alpha_2\tilde\alpha_3}-n_L\widetilde K^{\tilde\alpha_2\tilde\alpha_3}\big)
      - \sum\bar V_{(\dot\beta\tilde\alpha_2)(\tilde\alpha_1\tilde\alpha_3)}Y_{i;\tilde\alpha_1}
        \widetilde K^{\tilde\alpha_2\tilde\alpha_3}\Big],

where a bar on a test index means "minus its infinite-width regression on the training inputs",
:math:`\bar T_{\dot\beta\cdots}=T_{\dot\beta\cdots}-\sum K_{\dot\beta\tilde\alpha_1}
\widetilde K^{\tilde\alpha_1\tilde\alpha_2}T_{\tilde\alpha_2\cdots}`.  The :math:`M` term is the
book's "wiring" (6.89): it couples the output components :math:`i` and :math:`k`.  The output
noise enters only through :math:`\widetilde K` (it does not change :math:`V`, a cumulant of
Gaussian noise being zero beyond second order).

Also derived here, by the same first-order (Edgeworth) expansion of the nearly-Gaussian
distribution — these are *not* in the book:

* the posterior covariance, which at finite width is no longer proportional to
  :math:`\delta_{i_1i_2}` (the components are wired together in the covariance as well);
* the log evidence :math:`\log p(y_\mathcal A)` to :math:`O(1/n)`, for model comparison at finite
  width (the infinite-width evidence is (6.34)).

Representation learning (6.90)–(6.104): the posterior change of the penultimate-layer kernel
observable :math:`\mathcal O_{\delta_1\delta_2}=\tfrac1{n_{L-1}}\sum_j\sigma_{j;\delta_1}
\sigma_{j;\delta_2}` (6.104), on every input of the dataset, and :func:`observable_update` for a
general observable from its covariance with the metric fluctuation (6.99).
"""

from __future__ import annotations

from effth._signature import public

import html
import math
import numbers
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from effth._results import TrainTestSplit
from effth.errors import DomainError

from effth._validate import (finite_array, label_array, last_hidden_width, nonnegative,
                             symmetric_matrix)
from effth.pdlt.learning._linalg import training_spectrum

__all__ = ["bayes_posterior", "BayesPosterior", "observable_update", "POSTERIOR_NAMES"]

#: Every name :meth:`BayesPosterior.value` knows.
#: As every effth result with a 1/n expansion (``Flow``: K, G1, G; ``NTKFlow``: Theta, H1, H;
#: ``predict(..., widths=n)``): the bare name is the infinite-width value, ``name1`` is
#: :math:`n_{L-1}` times the :math:`O(1/n)` term, ``name_at_width`` their sum at the width, and
#: ``name1_<part>`` the parts of ``name1``.
_PARTS = {"mean": ("G1", "V", "V_wiring", "V_linear"), "covariance": ("G1", "V"),
          "log_evidence": ("G1", "V")}
POSTERIOR_NAMES = tuple(n for stem, parts in _PARTS.items()
                        for n in (stem, stem + "1", stem + "_at_width") + tuple(f"{stem}1_{p}" for p in parts)
                        ) + ("representation", "O_prior", "K", "G1", "V")


# ================================================================================ input checks
def _width(widths: Any, net: Any) -> float:
    """n_{L-1}: the last hidden width (from ``widths`` or the network)."""
    w = widths if widths is not None else (getattr(net, "widths", None) if net is not None else None)
    if w is None:
        raise DomainError("the finite-width posterior needs the hidden widths: pass widths= (an int, "
                          "or n_1..n_{L-1}; the 1/n corrections use the last one, n_{L-1})")
    return float(last_hidden_width(w))


def _four(V: Any, N: int) -> np.ndarray:
    V = finite_array(V, "V", (4,))
    if V.shape != (N,) * 4:
        raise DomainError(f"V must have shape {(N,) * 4} (the four-point vertex on the training "
                          f"then test inputs), got {V.shape}")
    scale = max(float(np.max(np.abs(V))), 1e-300)
    for perm, what in (((1, 0, 2, 3), "alpha_1 <-> alpha_2"), ((0, 1, 3, 2), "alpha_3 <-> alpha_4"),
                       ((2, 3, 0, 1), "the two pairs")):
        if not np.allclose(V, V.transpose(perm), rtol=0.0, atol=1e-9 * scale):
            raise DomainError(f"V is not symmetric under {what}: V_(a1a2)(a3a4) has the symmetries "
                              "of PDLT (4.77)")
    return V


# ============================================================================ the core algebra
def _terms(K: np.ndarray, G1: np.ndarray, V: np.ndarray, P: int, y: np.ndarray, noise: float,
           n: float) -> dict:
    """All O(1) and O(1/n) pieces; ``y`` is (P, C)."""
    N = K.shape[0]
    C = y.shape[1]
    A_, B_ = slice(0, P), slice(P, N)
    Kt = K[A_, A_] + noise * np.eye(P)
    S = np.linalg.inv(Kt)
    S = 0.5 * (S + S.T)                             # K~^{a1 a2}
    Areg = K[B_, A_] @ S                            # K_{bA} K~^{-1}: the regression on A
    Y = S @ y                                       # (P, C)
    M = Y @ Y.T                                     # sum_k Y_k Y_k^T
    R = np.hstack([-Areg, np.eye(N - P)])           # bar: x_b - Areg x_A   (Q, N)
    out = {}
    # ---- mean, O(1): (6.64) with the noise
    out["mean_infinite"] = K[B_, A_] @ Y
    # ---- G1: the shift K -> K + G1/n of the two-point function in (6.64)
    G1bar = (R @ G1)[:, A_]
    out["mean_G1"] = G1bar @ Y / n
    # ---- V: (6.88) at first order
    VbA = np.einsum("qg,gabc->qabc", R, V[:, A_, A_, A_])        # bar V_(b a1)(a2 a3)
    W = M - C * S
    out["mean_V_wiring"] = 0.5 * np.einsum("qabc,ai,bc->qi", VbA, Y, M) / n
    lin = (-0.5 * C * np.einsum("qabc,ai,bc->qi", VbA, Y, S)
           - np.einsum("qbac,ai,bc->qi", VbA, Y, S))
    out["mean_V_linear"] = lin / n
    out["mean_V"] = out["mean_V_wiring"] + out["mean_V_linear"]
    out["mean"] = out["mean_infinite"] + out["mean_G1"] + out["mean_V"]
    # ---- covariance (C, C, Q, Q): not in the book; first-order Edgeworth expansion
    eyeC = np.eye(C)
    Kn = K.copy()
    Kn[A_, A_] = Kt
    Kres = R @ Kn @ R.T                             # K_BB - K_BA K~^{-1} K_AB
    Kres = 0.5 * (Kres + Kres.T)
    out["covariance_infinite"] = np.einsum("ij,pq->ijpq", eyeC, Kres)
    G1res = R @ G1 @ R.T
    out["covariance_G1"] = np.einsum("ij,pq->ijpq", eyeC, 0.5 * (G1res + G1res.T)) / n
    Vpp = np.einsum("pg,qh,ghab->pqab", R, R, V[:, :, A_, A_])     # bar V_(b1 b2)(a1 a2)
    Vcross = np.einsum("pg,qh,gahb->paqb", R, R, V[:, A_, :, A_])  # bar V_(b1 a1)(b2 a2)
    cov_v = (0.5 * np.einsum("ij,pqab,ab->ijpq", eyeC, Vpp, W)
             + np.einsum("paqb,ai,bj->ijpq", Vcross, Y, Y)
             - np.einsum("ij,paqb,ab->ijpq", eyeC, Vcross, S))
    out["covariance_V"] = cov_v / n
    out["covariance"] = out["covariance_infinite"] + out["covariance_G1"] + out["covariance_V"]
    # ---- log evidence: (6.34) and its O(1/n) terms (not in the book)
    sign, logdet = np.linalg.slogdet(2 * math.pi * Kt)
    out["log_evidence_infinite"] = float(-0.5 * C * logdet - 0.5 * np.sum(y * Y))
    GA = G1[A_, A_]
    out["log_evidence_G1"] = float(0.5 * (np.sum(M * GA) - C * np.sum(S * GA)) / n)
    VA = V[A_, A_, A_, A_]

    def vab(X1: np.ndarray, X2: np.ndarray) -> float:
        return float(np.einsum("abcd,ab,cd->", VA, X1, X2))

    cross = lambda X1, X2: float(np.einsum("abcd,ac,bd->", VA, X1, X2))   # noqa: E731
    out["log_evidence_V"] = (vab(M, M) - 2 * C * vab(S, M) - 4 * cross(S, M) + C * C * vab(S, S)
                             + 2 * C * cross(S, S)) / (8.0 * n)
    out["log_evidence"] = (out["log_evidence_infinite"] + out["log_evidence_G1"]
                           + out["log_evidence_V"])
    out["_W"] = W
    return out


# ==================================================================================== the result
@public
@dataclass(repr=False)
class BayesPosterior(TrainTestSplit):
    r"""The Bayesian posterior of a finite-width network's outputs to :math:`O(1/n)` (PDLT §6.4).

    Read it as every effth result (``docs/conventions.md``): ``post.value(name)``,
    ``post.stderr(name)`` (``None``: a deterministic theory), ``post.layers`` (``()``).
    :math:`P` training inputs, :math:`Q` test inputs, :math:`C=n_L` output components,
    :math:`N=P+Q`; every :math:`O(1/n)` part already carries its :math:`1/n_{L-1}`.

    Names follow the package's :math:`1/n` convention (as ``K``/``G1``/``G`` of a ``Flow`` and
    ``predict(..., widths=n)``): the bare name is the infinite-width value, ``<name>1`` is
    :math:`n_{L-1}` times the :math:`O(1/n)` term, ``<name>_at_width`` their sum at the width
    :attr:`n_prev`, and ``<name>1_<part>`` the parts of ``<name>1``.

    * ``"mean"`` ``(Q,)`` or ``(Q, C)``: :math:`m^\infty` (6.64) (with the noise in
      :math:`\widetilde K`); ``"mean_at_width"``: :math:`\mathbb E[z_{i;\dot\beta}|y_\mathcal A]`
      to :math:`O(1/n)` (6.88); ``"mean1"`` with the parts ``"mean1_G1"`` (the :math:`G^{\{1\}}`
      shift of the metric (4.104) in (6.64)) and ``"mean1_V"`` = ``"mean1_V_wiring"`` (cubic in
      :math:`y`, couples components, (6.89)) + ``"mean1_V_linear"`` (the
      :math:`n_L\mathbb G\mathbb G+2\mathbb G\mathbb G` term of (6.88) and the :math:`v` part of
      :math:`g` (4.108)).
    * ``"covariance"`` ``(Q, Q)`` (one output) or ``(Q, Q, C, C)`` (``[β1, β2, i1, i2]``, as
      ``train_ensemble``'s covariance):
      :math:`\mathrm{Cov}[z_{i_1;\dot\beta_1},z_{i_2;\dot\beta_2}|y_\mathcal A]` at infinite
      width (6.57); ``"covariance1"`` (parts ``"covariance1_G1"``, ``"covariance1_V"``) and
      ``"covariance_at_width"``.  Not in the book (which gives only the mean); derived by the same
      first-order expansion.
    * ``"log_evidence"`` ``()``: :math:`\log p(y_\mathcal A)` (6.34); ``"log_evidence1"`` (parts
      ``"log_evidence1_G1"``, ``"log_evidence1_V"``), ``"log_evidence_at_width"``.  Not in the
      book.
    * ``"representation"`` ``(N, N)``: the posterior change
      :math:`\overline{d\mathcal O}_{\delta_1\delta_2}` (6.104) of
      :math:`\mathcal O=\tfrac1{n_{L-1}}\sum_j\sigma^{(L-1)}_{j;\delta_1}\sigma^{(L-1)}_{j;\delta_2}`
      on all inputs; ``"O_prior"`` ``(N, N)``: its prior mean at infinite width
      :math:`(K^{(L)}-C_b^{(L)})/C_W^{(L)}`.  Need :math:`C_W^{(L)}` (from the network, or ``c_w=``).
    * ``"K"``, ``"G1"`` ``(N, N)``, ``"V"`` ``(N, N, N, N)``: the output-layer tensors used.

    Attributes
    ----------
    n_train, n_test, n_out : int
    n_prev : float
        :math:`n_{L-1}`, the width that sets the :math:`1/n` corrections.
    noise : float
        Output-noise variance :math:`\sigma_\varepsilon^2` (as in :func:`~effth.pdlt.predict`).
    c_w, c_b : float or None
        :math:`C_W^{(L)}, C_b^{(L)}` (for the representation update).
    net : MLP or None
    """

    K: np.ndarray
    G1: np.ndarray
    V: np.ndarray
    n_train: int
    n_prev: float
    y_train: np.ndarray
    noise: float
    terms: dict
    c_w: float | None = None
    c_b: float | None = None
    net: Any = None
    layers: tuple = field(default=())

    @property
    def names(self) -> tuple:
        """The names :meth:`value` answers."""
        if self.c_w is None:
            return tuple(x for x in POSTERIOR_NAMES if x not in ("representation", "O_prior"))
        return POSTERIOR_NAMES

    def value(self, name: str, layer: int | None = None) -> Any:
        """The prediction for ``name`` (see the class table); ``layer`` may be omitted (or be L)."""
        self._check(name, layer)
        t = self.terms
        if name in ("K", "G1", "V"):
            return np.array(getattr(self, name))
        stem = next((k for k in _PARTS if name.startswith(k)), None)
        if stem is not None:
            rest = name[len(stem):]
            if rest == "":
                v = t[stem + "_infinite"]
            elif rest == "_at_width":
                v = t[stem]
            elif rest == "1":
                v = self.n_prev * (t[stem] - t[stem + "_infinite"])
            else:                                   # "1_<part>"
                v = self.n_prev * t[stem + rest[1:]]
            if stem == "mean":
                return v[:, 0].copy() if self.y_train.ndim == 1 else np.array(v)
            if stem == "covariance":               # held (C, C, Q, Q); read [b1, b2, i1, i2]
                return v[0, 0].copy() if self.y_train.ndim == 1 else np.array(v.transpose(2, 3, 0, 1))
            return float(v)
        if name == "representation":
            W = t["_W"]
            P = self.n_train
            return np.einsum("deab,ab->de", self.V[:, :, :P, :P], W) / (2.0 * self.n_prev * self.c_w)
        if name == "O_prior":
            return (self.K - self.c_b) / self.c_w
        raise AssertionError(name)   # pragma: no cover

    def stderr(self, name: str, layer: int | None = None) -> None:
        """``None``: a deterministic theory (the name is checked)."""
        self._check(name, layer)
        return None

    def _check(self, name: str, layer: Any) -> None:
        if layer is not None and not (self.net is not None and layer == self.net.depth):
            raise DomainError("a BayesPosterior has no layer axis (its tensors are the output "
                              f"layer's); omit layer=, got layer={layer!r}")
        if name not in self.names:
            if name in ("representation", "O_prior"):
                raise DomainError(f"{name!r} (PDLT (6.104)) needs C_W^(L): pass c_w= (and c_b=) "
                                  "with precomputed tensors, or a network")
            raise DomainError(f"a BayesPosterior holds {list(self.names)}, not {name!r}")

    # ------------------------------------------------------------------ display
    def __repr__(self) -> str:
        net = "" if self.net is None else f", depth={self.net.depth}"
        return (f"BayesPosterior(train={self.n_train}, test={self.n_test}, outputs={self.n_out}, "
                f"n_prev={self.n_prev:g}, noise={self.noise:g}{net}, order=1/n)")

    def _repr_html_(self) -> str:
        m = self.value("mean")
        rows = [("training / test inputs", f"{self.n_train} / {self.n_test}"),
                ("output components n_L", self.n_out), ("width n_{L-1}", f"{self.n_prev:g}"),
                ("noise", f"{self.noise:g}"),
                ("max |mean| (6.64), infinite width", f"{np.max(np.abs(m)):.4g}"),
                ("max |mean1_G1|", f"{np.max(np.abs(self.value('mean1_G1'))):.3g}"),
                ("max |mean1_V| (6.88)", f"{np.max(np.abs(self.value('mean1_V'))):.3g}"),
                ("max |mean_at_width|", f"{np.max(np.abs(self.value('mean_at_width'))):.4g}"),
                ("log evidence at width (O(1/n))", f"{self.value('log_evidence_at_width'):.6g}"),
                ("names", ", ".join(self.names))]
        body = "".join(f"<tr><th style='text-align:left'>{html.escape(str(k))}</th>"
                       f"<td style='text-align:left'>{html.escape(str(v))}</td></tr>" for k, v in rows)
        return ("<table><caption>Bayesian posterior at finite width (PDLT §6.4)</caption>"
                f"{body}</table>")

    def latex(self) -> str:
        r"""The formulas evaluated, in the book's notation (an ``aligned`` block): the posterior
        mean (6.88) expanded to :math:`O(1/n)`, and the representation update (6.104)."""
        return posterior_latex(noise=bool(self.noise))

    def _repr_latex_(self) -> str:
        return f"$${self.latex()}$$"


def posterior_latex(noise: bool = False) -> str:
    r"""LaTeX of the finite-width posterior mean (6.88) at :math:`O(1/n)` and of (6.104)."""
    Kt = r"\widetilde{K}"
    lines = [
        r"\mathbb{E}\left[z_{i;\dot{\beta}}\middle|y_{\mathcal{A}}\right] &= m^{\infty}_{i;\dot{\beta}}"
        r" + \frac{1}{n_{L-1}}\Big[\sum_{\tilde{\alpha}}\bar{G}^{\{1\}}_{\dot{\beta}\tilde{\alpha}}"
        r"Y_{i;\tilde{\alpha}} + \frac{1}{2}\sum_{\tilde{\alpha}_{1}\tilde{\alpha}_{2}\tilde{\alpha}_{3}}"
        r"\bar{V}_{(\dot{\beta}\tilde{\alpha}_{1})(\tilde{\alpha}_{2}\tilde{\alpha}_{3})}"
        r"Y_{i;\tilde{\alpha}_{1}}\Big(\sum_{k=1}^{n_L}Y_{k;\tilde{\alpha}_{2}}Y_{k;\tilde{\alpha}_{3}}"
        rf" - n_L{Kt}^{{\tilde{{\alpha}}_{{2}}\tilde{{\alpha}}_{{3}}}}\Big)"
        r" - \sum_{\tilde{\alpha}_{1}\tilde{\alpha}_{2}\tilde{\alpha}_{3}}"
        r"\bar{V}_{(\dot{\beta}\tilde{\alpha}_{2})(\tilde{\alpha}_{1}\tilde{\alpha}_{3})}"
        rf"Y_{{i;\tilde{{\alpha}}_{{1}}}}{Kt}^{{\tilde{{\alpha}}_{{2}}\tilde{{\alpha}}_{{3}}}}\Big]",
        rf"Y_{{i;\tilde{{\alpha}}}} &= \sum_{{\tilde{{\alpha}}_{{1}}}}{Kt}^{{\tilde{{\alpha}}"
        rf"\tilde{{\alpha}}_{{1}}}}y_{{i;\tilde{{\alpha}}_{{1}}}},\qquad "
        rf"\bar{{T}}_{{\dot{{\beta}}\cdots}} = T_{{\dot{{\beta}}\cdots}} - \sum K_{{\dot{{\beta}}"
        rf"\tilde{{\alpha}}_{{1}}}}{Kt}^{{\tilde{{\alpha}}_{{1}}\tilde{{\alpha}}_{{2}}}}"
        rf"T_{{\tilde{{\alpha}}_{{2}}\cdots}}",
        r"\overline{d\mathcal{O}}_{\delta_{1}\delta_{2}} &= \frac{1}{2n_{L-1}C_W^{(L)}}"
        r"\sum V^{(L)}_{(\delta_{1}\delta_{2})(\tilde{\alpha}_{1}\tilde{\alpha}_{2})}"
        rf"{Kt}^{{\tilde{{\alpha}}_{{1}}\tilde{{\alpha}}_{{3}}}}{Kt}^{{\tilde{{\alpha}}_{{2}}"
        r"\tilde{\alpha}_{4}}}\sum_{i}\left(y_{i;\tilde{\alpha}_{3}}y_{i;\tilde{\alpha}_{4}}"
        rf" - {Kt}_{{\tilde{{\alpha}}_{{3}}\tilde{{\alpha}}_{{4}}}}\right)",
    ]
    if noise:
        lines.append(rf"{Kt}_{{\tilde{{\alpha}}_{{1}}\tilde{{\alpha}}_{{2}}}} &= "
                     r"K^{(L)}_{\tilde{\alpha}_{1}\tilde{\alpha}_{2}} + \sigma_{\varepsilon}^{2}"
                     r"\delta_{\tilde{\alpha}_{1}\tilde{\alpha}_{2}}")
    return r"\begin{aligned}" + r"\\ ".join(lines) + r"\end{aligned}"


# ================================================================================= entry points
@public
def bayes_posterior(net: Any = None, X_train: Any = None, y_train: Any = None, X_test: Any = None,
                    *, widths: Any = None, noise: Any = 0.0, K: Any = None, V: Any = None,
                    G1: Any = None, n_train: Any = None, c_w: Any = None, c_b: Any = 0.0,
                    rtol: float = 1e-10, progress: bool | None = None) -> BayesPosterior:
    r"""The Bayesian posterior of the network outputs at finite width, to :math:`O(1/n)` (PDLT §6.4).

    Either ``bayes_posterior(net, X_train, y_train, X_test)`` — :math:`K^{(L)}, V^{(L)},
    G^{\{1\}(L)}` on the training then test inputs from the layer flow
    (:func:`~effth.pdlt.flow`, (4.115), (4.118), (4.119)) — or precomputed output-layer tensors
    ``K=, V=, G1=`` (``G1`` defaults to 0) with ``n_train=`` and ``widths=`` (:math:`n_{L-1}`).

    The mean is (6.88) evaluated consistently at :math:`O(1/n)` (module docstring), with the
    wiring of the output components (6.89); the covariance and log evidence are the same
    expansion (not printed in the book); ``"representation"`` is (6.104).

    Parameters
    ----------
    net : effth.MLP, optional
        With numeric widths (or pass ``widths=``); ``net.n_out`` must equal the number of
        label columns.
    X_train : array_like (P, n_0)
    y_train : array_like (P,) or (P, C)
        Labels :math:`y_{i;\tilde\alpha}`; :math:`C=n_L` output components.
    X_test : array_like (Q, n_0)
    widths : int or sequence of int, optional
        Hidden widths :math:`n_1..n_{L-1}` (default: the network's); with precomputed tensors an
        int :math:`n_{L-1}`.
    noise : float
        Output-noise variance :math:`\sigma_\varepsilon^2` of the likelihood (6.10), as in
        :func:`~effth.pdlt.predict` (``method="bayes"``): :math:`\widetilde K\to
        \widetilde K+\sigma_\varepsilon^2\mathbb 1`.
    K, V, G1 : array_like, optional
        Precomputed :math:`K^{(L)}` ``(N, N)``, :math:`V^{(L)}` ``(N, N, N, N)``,
        :math:`G^{\{1\}(L)}` ``(N, N)`` (effth's normalization: the four-point function across two
        neurons is :math:`V/n_{L-1}`, the metric :math:`K+G^{\{1\}}/n_{L-1}`).
    n_train : int
        With precomputed tensors: :math:`P`, the training inputs come first.
    c_w, c_b : float, optional
        :math:`C_W^{(L)}, C_b^{(L)}` for ``"representation"`` / ``"O_prior"`` with precomputed
        tensors (taken from the network otherwise).
    rtol : float
        Accuracy of the Gaussian expectations of the flow.
    progress : bool or None
        A progress bar for the flow of :math:`K, V, G^{\{1\}}` (:mod:`effth._progress`).

    Returns
    -------
    BayesPosterior

    Raises
    ------
    DomainError
        Negative noise, a non-PSD or singular training block of :math:`K`, a :math:`V` without its
        symmetries, mismatched shapes, missing or non-positive widths.

    Examples
    --------
    >>> import effth as et
    >>> from effth.pdlt.learning.bayes_finite import bayes_posterior
    >>> net = et.MLP("tanh", depth=3, widths=16)
    >>> post = bayes_posterior(net, [[1.0, 0.0], [0.0, 1.0]], [0.5, -0.3], [[0.6, 0.8]], noise=0.1)
    >>> post.value("mean").shape, post.value("representation").shape
    ((1,), (3, 3))
    """
    noise = nonnegative(noise, "noise")
    if net is not None:
        if K is not None or V is not None or G1 is not None or n_train is not None:
            raise DomainError("give either (net, X_train, y_train, X_test) or precomputed tensors "
                              "(K=, V=, G1=, n_train=), not both")
        if not hasattr(net, "depth") or not hasattr(net, "c_w_at"):
            raise DomainError(f"net must be an effth.MLP, got {type(net).__name__}")
        if X_train is None or X_test is None or y_train is None:
            raise DomainError("bayes_posterior(net, X_train, y_train, X_test): all are required")
        if net.depth < 2:
            raise DomainError("a network with depth=1 (no hidden layer) has an exactly Gaussian prior: "
                              "use effth.pdlt.predict(method='bayes')")
        n = _width(widths, net)
        if widths is not None:
            net = net.with_widths(widths)
        Xa = finite_array(X_train, "X_train", (2,))
        Xb = finite_array(X_test, "X_test", (2,))
        if Xa.shape[1] != Xb.shape[1]:
            raise DomainError(f"X_train has {Xa.shape[1]} features but X_test has {Xb.shape[1]}")
        if Xa.shape[0] == 0 or Xb.shape[0] == 0:
            raise DomainError("X_train and X_test need at least one input each")
        y = label_array(y_train, Xa.shape[0])
        C = 1 if y.ndim == 1 else y.shape[1]
        if net.n_out != C:
            raise DomainError(f"y_train has {C} output components but the network has n_out={net.n_out}")
        from effth.pdlt.initialization.kernel_flow import KernelScaleWarning, flow

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", KernelScaleWarning)
            fl = flow(net, np.vstack([Xa, Xb]), rtol=rtol, progress=progress)
        L = net.depth
        Kf, Gf, Vf = fl.value("K", layer=L), fl.value("G1", layer=L), fl.value("V", layer=L)
        P = Xa.shape[0]
        cw, cb = float(net.c_w_at(L)), float(net.c_b_at(L))
    else:
        if X_train is not None or X_test is not None:
            raise DomainError("X_train/X_test need a network: bayes_posterior(net, X_train, y_train, X_test)")
        if K is None or V is None or y_train is None or n_train is None:
            raise DomainError("bayes_posterior needs (net, X_train, y_train, X_test) or precomputed "
                              "K=, V=, (G1=,) y_train=, n_train= and widths=")
        n = _width(widths, None)
        Kf = symmetric_matrix(finite_array(K, "K", (2,)), "K")
        N = Kf.shape[0]
        if (isinstance(n_train, bool) or not isinstance(n_train, numbers.Integral)
                or not 0 < n_train < N):
            raise DomainError(f"n_train must be an int with 0 < n_train < N = {N}, got {n_train!r}")
        P = int(n_train)
        Vf = _four(V, N)
        if G1 is None:
            Gf = np.zeros_like(Kf)
        else:
            Gf = symmetric_matrix(finite_array(G1, "G1", (2,)), "G1")
            if Gf.shape != Kf.shape:
                raise DomainError(f"G1 has shape {Gf.shape} but K has {Kf.shape}")
        y = label_array(y_train, P)
        cw = None if c_w is None else nonnegative(c_w, "c_w")
        if cw == 0.0:
            raise DomainError("c_w must be > 0")
        cb = nonnegative(c_b, "c_b")
    # the whole kernel is a covariance: check it is PSD, and the training block invertible
    training_spectrum(Kf, "K", need_invertible=False, jitter=0.0)
    training_spectrum(Kf[:P, :P] + noise * np.eye(P), "K (plus noise)" if noise else "K",
              need_invertible=True, jitter=0.0,
              bound_hint=" (a noise variance noise=s2 > 0 regularizes it)")
    y2 = y[:, None] if y.ndim == 1 else y
    terms = _terms(Kf, Gf, Vf, P, y2, noise, n)
    for k, v in terms.items():
        if not np.all(np.isfinite(v)):
            raise DomainError(f"{k} is not finite: the training block is too ill-conditioned")
    return BayesPosterior(K=Kf, G1=Gf, V=Vf, n_train=P, n_prev=n, y_train=y, noise=noise,
                          terms=terms, c_w=cw, c_b=cb, net=net)


@public
def observable_update(cov_GO: Any, K_train: Any, y_train: Any, *, noise: Any = 0.0) -> np.ndarray:
    r"""Posterior change of a penultimate-layer observable, PDLT (6.99).

    .. math::
        \overline{d\mathcal O} = \frac12\sum\mathbb E\big[\widehat{\Delta G}_{\tilde\alpha_1
        \tilde\alpha_2}\mathcal O\big]\widetilde K^{\tilde\alpha_1\tilde\alpha_3}
        \widetilde K^{\tilde\alpha_2\tilde\alpha_4}\sum_i\big(y_{i;\tilde\alpha_3}
        y_{i;\tilde\alpha_4}-\widetilde K_{\tilde\alpha_3\tilde\alpha_4}\big)+O(1/n^2),

    with :math:`\widehat{\Delta G}=\widehat G^{(L)}-\mathbb E[\widehat G^{(L)}]` the fluctuation of
    the stochastic output metric and :math:`\widetilde K` the training block of :math:`K^{(L)}`
    (plus :math:`\sigma_\varepsilon^2\mathbb 1` with ``noise``).

    Parameters
    ----------
    cov_GO : array_like (P, P, ...)
        :math:`\mathbb E[\widehat{\Delta G}_{\tilde\alpha_1\tilde\alpha_2}\mathcal O]` on the
        training pairs; trailing axes are the observable's (e.g. from a simulation, or
        :math:`V^{(L)}/(n_{L-1}C_W)` for the kernel observable of (6.104)).
    K_train : array_like (P, P)
    y_train : array_like (P,) or (P, C)
    noise : float

    Returns
    -------
    ndarray, the observable's shape
    """
    noise = nonnegative(noise, "noise")
    Kt = symmetric_matrix(finite_array(K_train, "K_train", (2,)), "K_train")
    P = Kt.shape[0]
    y = label_array(y_train, P)
    y = y[:, None] if y.ndim == 1 else y
    cov = np.asarray(finite_array(cov_GO, "cov_GO", tuple(range(2, 12))))
    if cov.shape[:2] != (P, P):
        raise DomainError(f"cov_GO must start with the axes (P, P) = {(P, P)}, got {cov.shape}")
    Kn = Kt + noise * np.eye(P)
    training_spectrum(Kn, "K_train", need_invertible=True, jitter=0.0)
    S = np.linalg.inv(Kn)
    Y = S @ y
    W = Y @ Y.T - y.shape[1] * S
    return 0.5 * np.tensordot(W, cov, axes=([0, 1], [0, 1]))
