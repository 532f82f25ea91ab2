r"""Learning at infinite width: Bayesian inference (PDLT ch. 6.3) and gradient descent (ch. 7, 10).

One entry point, :func:`predict`, turns a network, a training set and test inputs into the
ensemble statistics of the network's test outputs after learning:

* ``method="bayes"``: the exact Bayesian posterior of the outputs, mean (6.64) and covariance
  (6.57), from the output-layer kernel :math:`K^{(L)}` (with Gaussian output noise
  :math:`\sigma_\varepsilon^2` on the training labels when ``noise > 0``);
* ``method="gd"``: the ensemble over initializations of networks trained by gradient descent
  on the MSE loss, mean (10.40) and covariance (10.41) from :math:`K^{(L)}` and the frozen NTK
  :math:`\Theta^{(L)}`; trained to convergence, or for a finite number of steps
  (the free solution (∞.88)–(∞.92) with :math:`\widehat H\to\Theta`);
* ``method="newton"``: optional gradient-descent steps followed by one Newton step
  (10.25), (10.31), (10.34) — by algorithm independence (10.35) the same as converged GD.

The kernels are the infinite-width ones (:func:`output_kernels`: the recursions (4.118) and
(9.5), i.e. (10.44)–(10.45), on the whole dataset).  The linear algebra is done once in the
eigenbasis of the training NTK (GD, cost :math:`O(N_\mathcal A^3)`) or with a Cholesky factor of
the training kernel (Bayes).  With ``widths=n`` the :math:`O(1/n)` mean and covariance of
networks trained to convergence are added (PDLT §∞.2, :mod:`effth.pdlt.learning.finite_width`).

Bayesian model comparison (§6.2.2, §6.3.1): :func:`log_evidence` (6.34),
:func:`log_bayes_factor` (6.30)–(6.31), :func:`evidence_scan` (the evidence as a function of
:math:`C_W`) and the closed two-input form :func:`log_evidence_two_inputs` (6.48).
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
import sympy as sp
from scipy.special import log_softmax, softmax

from effth.algebra.tensors import SampleSum, SampleTensor
from effth._results import TrainTestSplit
from effth.errors import AccuracyWarning, DomainError
from effth._validate import (finite_array, psd_kernel, label_array, last_hidden_width, nonnegative,
                             symmetric_matrix)
from effth.pdlt.learning._linalg import (given_kernel, given_kernel_factor, training_cholesky,
                                         training_spectrum)

from effth.pdlt.learning.finite_width import (COVARIANCE_PARTS as _COV_PARTS,
                                    MEAN_PARTS as _MEAN_PARTS, finite_width_covariance,
                                    finite_width_mean)
from effth.pdlt.initialization.kernel_flow import flow
from effth.pdlt.initialization.kernel_flow import WidthWarning, width_figures, width_message
from effth.pdlt.ntk.ntk_flow import (_per_layer as _lambda_per_layer, last_layer_kernels, ntk_flow,
                                    restricted_flow_bytes)

__all__ = ["predict", "Prediction", "output_kernels", "log_evidence", "log_bayes_factor",
           "log_evidence_two_inputs", "evidence_scan", "EvidenceScan", "PREDICTION_NAMES"]

METHODS = ("bayes", "gd", "newton")

#: Every name :meth:`Prediction.value` knows (some need ``y_test`` or a method; see the class).
PREDICTION_NAMES = ("mean", "covariance", "std", "bias", "variance", "test_loss",
                    "train_mean", "train_covariance", "log_evidence", "K", "Theta",
                    "mean1", "covariance1")


# ============================================================================ kernels K, Theta
@public
def output_kernels(net: Any, X: Any, *, lambda_b: Any = 1.0, lambda_w: Any = 1.0,
                   ntk: bool = True, rtol: float = 1e-10) -> tuple[np.ndarray, np.ndarray | None]:
    r"""Infinite-width kernel :math:`K^{(L)}` and frozen NTK :math:`\Theta^{(L)}` of the output layer.

    The two leading-order recursions only — (4.118) and (9.5), written side by side in PDLT
    (10.44)–(10.45):

    .. math::
        K^{(\ell+1)}_{\delta_1\delta_2} = C_b^{(\ell+1)} + C_W^{(\ell+1)}
            \langle\sigma_{\delta_1}\sigma_{\delta_2}\rangle_{K^{(\ell)}},\qquad
        \Theta^{(\ell+1)}_{\delta_1\delta_2} = \lambda_b^{(\ell+1)}
            + \lambda_W^{(\ell+1)}\langle\sigma_{\delta_1}\sigma_{\delta_2}\rangle_{K^{(\ell)}}
            + C_W^{(\ell+1)}\langle\sigma'_{\delta_1}\sigma'_{\delta_2}\rangle_{K^{(\ell)}}
              \Theta^{(\ell)}_{\delta_1\delta_2},

    from :math:`K^{(1)}=C_b^{(1)}+C_W^{(1)}XX^\top/n_0` (4.8) and
    :math:`\Theta^{(1)}=\lambda_b^{(1)}+\lambda_W^{(1)}XX^\top/n_0` (8.23).  A thin call of the
    layer flows restricted to these statistics, ``ntk_flow(net, X, statistics=("Theta",))``
    (``flow(net, X, statistics=("K",))`` when ``ntk=False``): :math:`O(N^2)` per layer, closed
    forms where they exist, no four-point tensor.

    Parameters
    ----------
    net : effth.MLP
    X : array_like (N, n_0)
    lambda_b, lambda_w : float or sequence of L floats
        :math:`\lambda_b^{(\ell)}, \lambda_W^{(\ell)}` (PDLT (8.6); width-rescaled :math:`\lambda_W`).
    ntk : bool
        Also iterate :math:`\Theta` (default); ``False`` returns ``(K, None)``.
    rtol : float
        Relative accuracy of the Gaussian expectations.

    Returns
    -------
    (ndarray (N, N), ndarray (N, N) or None)
    """
    X = finite_array(X, "X", (2,))
    if not hasattr(net, "depth") or not hasattr(net, "c_w_at"):
        raise DomainError(f"net must be an effth.MLP, got {type(net).__name__}")
    from effth._validate import check_memory       # K and Theta of every layer: (L, N, N) each
    check_memory(8.0 * float(X.shape[0]) ** 2 * (2 * net.depth + 2),
                 f"the (N, N) kernels of N = {X.shape[0]} inputs through {net.depth} layers",
                 "use fewer training and test inputs (the memory grows as N^2)")
    from effth.pdlt.initialization.kernel_flow import KernelScaleWarning

    with warnings.catch_warnings():
        # evidence scans and predictions cross non-critical C_W on purpose: the output kernel is
        # what is asked for, not a warning about its growth with depth
        warnings.simplefilter("ignore", KernelScaleWarning)
        # the last layer only, two layers held at a time, where the fused closed-form pass applies
        last = last_layer_kernels(net, X, lambda_b, lambda_w, ntk=ntk)
        if last is not None:
            return last
        if not ntk:
            return flow(net, X, statistics=("K",), rtol=rtol, progress=False).K[-1].copy(), None
        nf = ntk_flow(net, X, lambda_b=lambda_b, lambda_w=lambda_w, statistics=("Theta",),
                      rtol=rtol, progress=False)
    # copies: a view would keep every layer's (L, N, N) arrays alive with the prediction
    return nf.kernel.K[-1].copy(), nf.tensors["Theta"][-1].copy()


# ======================================================================= linear algebra core
#: Newton's GD phase runs step by step (10.33) up to this many updates, in closed form beyond
_STEPWISE_UPDATES = 10_000


def _gd_factor(lam: np.ndarray, eta: float | None, updates: int | None) -> np.ndarray:
    r""":math:`\varphi_t(\lambda)=[1-(1-\eta\lambda)^t]/\lambda` (:math:`1/\lambda` when converged),
    with its limit :math:`\eta t` at :math:`\lambda\to0`.

    For :math:`|\eta\lambda|<1` in log space, :math:`-\mathrm{expm1}(t\,\mathrm{log1p}(-\eta\lambda))
    /\lambda`: exact to rounding at any :math:`t` (no truncated series, no :math:`(1-\eta\lambda)^t`
    that loses the digits of :math:`\eta\lambda\ll1`)."""
    if updates is None:
        return 1.0 / lam
    lam = np.asarray(lam, dtype=float)
    out = np.empty_like(lam)
    t = float(updates)
    e = eta * lam
    zero = e == 0.0
    mid = ~zero & (np.abs(e) < 1.0)
    big = e >= 1.0                                      # 1 <= eta lam < 2: (1 - e)^t alternates
    out[mid] = -np.expm1(t * np.log1p(-e[mid])) / lam[mid]
    out[big] = (1.0 - np.power(1.0 - e[big], updates)) / lam[big]
    out[zero] = eta * t
    return out


def _decay(lam: np.ndarray, eta: float, updates: int) -> np.ndarray:
    """(1 - eta lam)^t: ``exp(t log1p(-eta lam))`` for |eta lam| < 1 (exact at any t), the
    power (sign-correct) for 1 <= eta lam < 2."""
    e = eta * np.asarray(lam, dtype=float)
    out = np.power(1.0 - e, updates)
    mid = np.abs(e) < 1.0
    out[mid] = np.exp(float(updates) * np.log1p(-e[mid]))
    return out


def _covariance(Pm: np.ndarray, K: np.ndarray, P: int) -> np.ndarray:
    r"""Cov of :math:`z_\mathcal B - P_m z_\mathcal A` for :math:`z\sim\mathcal N(0,K)` (10.41)."""
    KAA, KAB, KBB = K[:P, :P], K[:P, P:], K[P:, P:]
    C = KBB - Pm @ KAB - KAB.T @ Pm.T + Pm @ KAA @ Pm.T
    return 0.5 * (C + C.T)


# ================================================================================== the result
@public
@dataclass(repr=False)
class Prediction(TrainTestSplit):
    r"""Ensemble statistics of an infinite-width network's test outputs after learning.

    Read it as every effth result (``docs/conventions.md``): ``p.value(name)``,
    ``p.stderr(name)`` (``None``: a deterministic theory) and ``p.layers`` (``()``: no layer
    axis; the kernels are those of the output layer :math:`L`).  :math:`Q` test inputs,
    :math:`P` training inputs, :math:`C` output components (``n_out``), :math:`N=P+Q`:

    * ``"mean"`` ``(Q,)`` or ``(Q, C)``: :math:`m^\infty_{i;\dot\beta}`, Bayes (6.64), GD (10.40);
    * ``"covariance"`` ``(Q, Q)``: :math:`\mathrm{Cov}[z_{i;\dot\beta_1},z_{i;\dot\beta_2}]`, Bayes
      (6.57), GD (10.41); the same for every component :math:`i` (the :math:`\delta_{i_1i_2}`);
    * ``"std"`` ``(Q,)``: square root of the covariance's diagonal;
    * ``"bias"``, ``"variance"``, ``"test_loss"`` ``()``: (10.52) for the MSE,
      :math:`\tfrac12\sum_{\dot\beta,i}(m^\infty_{i;\dot\beta}-y_{i;\dot\beta})^2`,
      :math:`\tfrac12\sum_{\dot\beta,i}\mathrm{Cov}[z_{i;\dot\beta},z_{i;\dot\beta}]` and their sum
      :math:`\mathbb E[\mathcal L_\mathcal B]`; (10.53)-(10.55) for the cross-entropy
      (``test_loss=`` of :func:`predict`); need ``y_test``;
    * ``"train_mean"`` ``(P,)`` or ``(P, C)``: mean output on the training inputs (``y`` when
      converged; Bayes: posterior mean of the latent outputs there); ``"train_covariance"``
      ``(P, P)``: their covariance (0 when converged);
    * ``"log_evidence"`` ``()``: :math:`\log p(y_\mathcal A)` (6.34) (``method="bayes"``);
    * ``"K"``, ``"Theta"`` ``(N, N)``: :math:`K^{(L)}`, :math:`\Theta^{(L)}` on training then test
      inputs;
    * ``"mean1"`` (with ``widths=`` of :func:`predict`): :math:`n_{L-1}(m-m^\infty)`, the
      :math:`O(1/n)` correction of the mean of networks trained to convergence (PDLT (∞.155)),
      shape as ``"mean"``; its parts ``"mean1_H1"`` (the NTK-mean shift :math:`H^{\{1\}}`),
      ``"mean1_delta_ntk"`` (∞.157), ``"mean1_dntk"`` (∞.158), ``"mean1_ddntk_I"`` (∞.159),
      ``"mean1_ddntk_II"`` (∞.160); ``"mean_at_width"``: :math:`m^\infty+\text{mean1}/n_{L-1}`;
    * ``"covariance1"`` (with ``widths=``, converged training): :math:`n_{L-1}` times the
      :math:`O(1/n)` covariance of the trained outputs (:func:`~effth.pdlt.
      finite_width_learning.finite_width_covariance`, derived here, not printed in the book),
      ``(Q, Q)`` for one output and ``(Q, Q, C, C)`` (:math:`[\dot\beta_1,\dot\beta_2,i_1,i_2]`,
      components coupled through the targets) otherwise; its parts ``"covariance1_metric"``,
      ``"covariance1_ntk_fluctuation"``, ``"covariance1_dntk"``, ``"covariance1_ddntk"``;
      ``"covariance_at_width"``.

    Attributes
    ----------
    method : {"bayes", "gd", "newton"}
    n_train, n_test, n_out : int
    noise : float
        Output-noise variance :math:`\sigma_\varepsilon^2` (Bayes).
    eta, updates : float or None, int or None
        Finite-time gradient descent (``updates=None``: trained to convergence).
    lambda_b, lambda_w : ndarray (L,) or None
        Learning rates used for :math:`\Theta` (when computed from a network).
    jitter : float
        Ridge added to the training block (0 unless asked for).
    net : MLP or None
    finite_width : tuple or None
        ``(FiniteWidthMean, FiniteWidthCovariance or None)`` on training-then-test inputs
        (``widths=`` of :func:`predict`; the covariance is computed when a covariance name is
        first read, until then a pending computation).
    """

    method: str
    K: np.ndarray
    Theta: np.ndarray | None
    n_train: int
    mean_: np.ndarray
    covariance_: np.ndarray
    train_mean_: np.ndarray
    train_covariance_: np.ndarray
    y_train: np.ndarray
    y_test: np.ndarray | None = None
    test_loss_kind: str = "mse"
    noise: float = 0.0
    eta: float | None = None
    updates: int | None = None
    jitter: float = 0.0
    log_evidence_: float | None = None
    net: Any = None
    lambda_b: np.ndarray | None = None
    lambda_w: np.ndarray | None = None
    finite_width: Any = None
    layers: tuple = field(default=())

    # ----------------------------------------------------------------- reading
    @property
    def converged(self) -> bool:
        """Trained to convergence (Bayes, converged GD, Newton)."""
        return self.method != "gd" or self.updates is None

    @property
    def names(self) -> tuple:
        """The names :meth:`value` answers for this prediction."""
        out = ["mean", "covariance", "std"]
        if self.y_test is not None:
            out += ["bias", "variance", "test_loss"]
        out += ["train_mean", "train_covariance"]
        if self.log_evidence_ is not None:
            out.append("log_evidence")
        out.append("K")
        if self.Theta is not None:
            out.append("Theta")
        out += [n for n in self._finite_names() if n not in out]
        return tuple(out)

    def value(self, name: str, layer: int | None = None) -> Any:
        """The prediction for ``name`` (see the class table).

        Parameters
        ----------
        name : str
        layer : None
            There is no layer axis; ``layer`` may be omitted or be the output layer :math:`L`.

        Raises
        ------
        DomainError
            Unknown name, ``"bias"``/``"variance"``/``"test_loss"`` without ``y_test``,
            ``"log_evidence"`` of a gradient-descent prediction, another layer; the
            :math:`O(1/n)` names without ``widths=``.
        """
        self._check(name, layer)
        C = self.n_out
        if name == "mean":
            return self.mean_.copy()
        if name == "covariance":
            return self._get("covariance_").copy()
        if name == "std":
            return np.sqrt(np.clip(np.diag(self._get("covariance_")), 0.0, None))
        if name == "bias":
            if self.test_loss_kind == "cross_entropy":
                # (7.3): -sum_b sum_i p_i;b log softmax(m_b)_i
                return float(-np.sum(self.y_test * log_softmax(self.mean_, axis=1)))
            return 0.5 * float(np.sum((self.mean_ - self.y_test) ** 2))
        if name == "variance":
            if self.test_loss_kind == "cross_entropy":
                # (10.53)-(10.55): 1/2 sum_b sum_ij d2L/dz_i dz_j Cov[z_i;b, z_j;b], with the
                # Hessian diag(q) - q q^T of the softmax cross-entropy and Cov[z_i, z_j] = delta_ij Cov
                q = softmax(self.mean_, axis=1)
                return 0.5 * float(np.sum(np.diag(self._get("covariance_")) * np.sum(q * (1.0 - q), axis=1)))
            return 0.5 * C * float(np.trace(self._get("covariance_")))
        if name == "test_loss":
            return self.value("bias") + self.value("variance")
        if name == "train_mean":
            return self._get("train_mean_").copy()
        if name == "train_covariance":
            return self._get("train_covariance_").copy()
        if name == "log_evidence":
            return float(self.log_evidence_)
        if name == "K":
            return self.K.copy()
        if name == "Theta":
            return self.Theta.copy()
        if self.method == "bayes" and name in self._finite_names():
            return self.finite_width.value(name)
        if name in ("mean1", "mean_at_width") or name.startswith("mean1_"):
            key = name[len("mean1_"):] if name.startswith("mean1_") else name
            out = self.finite_width[0].value(key)[self.n_train:]
            return out[:, 0] if self.y_train.ndim == 1 else out
        if name in ("covariance1", "covariance_at_width") or name.startswith("covariance1_"):
            key = name[len("covariance1_"):] if name.startswith("covariance1_") else name
            P = self.n_train
            out = self._finite_covariance().value(key)[P:, P:]
            return out[:, :, 0, 0] if self.y_train.ndim == 1 else out
        raise AssertionError(name)   # pragma: no cover

    def _get(self, field_name: str) -> np.ndarray:
        """A field computed when first read (the covariance and the Bayesian training-set
        posterior: a callable until then)."""
        val = getattr(self, field_name)
        if callable(val):
            val = val()
            setattr(self, field_name, val)
        return val

    def _finite_covariance(self) -> Any:
        """The O(1/n) covariance, computed on first use (:func:`_finite_width`)."""
        mean, cov = self.finite_width
        if isinstance(cov, _PendingCovariance):
            cov = cov()
            self.finite_width = (mean, cov)
        return cov

    def stderr(self, name: str, layer: int | None = None) -> None:
        """``None``: a deterministic theory (the name is checked)."""
        self._check(name, layer)
        return None

    def _finite_names(self) -> list:
        """The O(1/n) names this prediction holds (``widths=`` of :func:`predict`)."""
        fw = self.finite_width
        if fw is None:
            return []
        if self.method == "bayes":
            return [n for n in fw.names if n not in ("mean", "covariance", "log_evidence", "K")]
        out = ["mean1", "mean_at_width"] + [f"mean1_{k}" for k in _MEAN_PARTS]
        if fw[1] is not None:
            out += ["covariance1", "covariance_at_width"] + [f"covariance1_{k}" for k in _COV_PARTS]
        return out

    def _check(self, name: str, layer: Any) -> None:
        if layer is not None and not (self.net is not None and layer == self.net.depth):
            raise DomainError(f"a Prediction has no layer axis (its kernels are the output "
                              f"layer's); omit layer=, got layer={layer!r}")
        finite = name in ("mean1", "mean_at_width", "covariance1", "covariance_at_width") or \
            name.startswith(("mean1_", "covariance1_"))
        if finite and self.finite_width is None:
            raise DomainError(f"{name!r} is the O(1/n) correction: pass widths= (n_(L-1)) to predict")
        if name not in self.names:
            if name in ("bias", "variance", "test_loss"):
                raise DomainError(f"{name!r} needs the test targets: pass y_test= to predict")
            if name == "log_evidence":
                raise DomainError("'log_evidence' is the Bayesian evidence (6.34): use "
                                  "method='bayes' or effth.pdlt.log_evidence")
            raise DomainError(f"a Prediction holds {list(self.names)}, not {name!r}")

    # ----------------------------------------------------------------- display
    def _what(self) -> str:
        if self.method == "bayes":
            return "Bayesian posterior" + (f", noise={self.noise:g}" if self.noise else "")
        if self.method == "newton":
            return "Newton step" + (f" after {self.updates} GD steps" if self.updates else "")
        return "gradient descent, " + ("converged" if self.updates is None
                                       else f"{self.updates} steps at eta={self.eta:g}")

    def _order(self) -> str:
        """The order of the prediction, in words."""
        if self.finite_width is None:
            return "infinite width"
        fw = self.finite_width
        width = fw.n_prev if self.method == "bayes" else fw[0].width
        width = int(width) if width is not None and float(width).is_integer() else width
        return "O(1/n)" + ("" if width is None else f" at width {width}")

    def __repr__(self) -> str:
        net = "" if self.net is None else f", depth={self.net.depth}"
        return (f"Prediction(method={self.method!r} ({self._what()}), train={self.n_train}, "
                f"test={self.n_test}, outputs={self.n_out}{net}, order={self._order()})")

    def _repr_html_(self) -> str:
        rows = [("learning", self._what()), ("training inputs", self.n_train),
                ("test inputs", self.n_test), ("output components", self.n_out),
                ("network", repr(self.net) if self.net is not None else "precomputed kernels"),
                ("order", self._order()),
                ("names", ", ".join(self.names))]
        if self.y_test is not None:
            rows.insert(4, ("bias / variance (10.52)",
                            f"{self.value('bias'):.4g} / {self.value('variance'):.4g}"))
        if self.log_evidence_ is not None:
            rows.insert(4, ("log evidence (6.34)", f"{self.log_evidence_:.6g}"))
        if self.jitter:
            rows.append(("jitter", f"{self.jitter:g}"))
        body = "".join(f"<tr><th style='text-align:left'>{html.escape(str(k))}</th>"
                       f"<td style='text-align:left'>{html.escape(str(v))}</td></tr>" for k, v in rows)
        where = ("at infinite width (PDLT ch. 6, 10)" if self.finite_width is None else
                 "at order 1/n (PDLT §6.4, §∞.2)")
        return f"<table><caption>Prediction {where}</caption>{body}</table>"

    def latex(self) -> str:
        r"""The formulas this prediction evaluates, in the book's notation (an ``aligned`` block).

        Bayes: (6.64), (6.57) and the log of (6.34); GD converged or Newton: (10.39)–(10.41);
        finite-time GD: the free solution (∞.88)–(∞.92) at infinite width in matrix form.
        """
        return prediction_latex(self.method, noise=bool(self.noise), updates=self.updates)

    def _repr_latex_(self) -> str:
        return f"$${self.latex()}$$"


# ==================================================================================== LaTeX
class _BookOrder(SampleTensor):
    """Printing-only component that keeps the book's index order (no canonicalization)."""

    symmetry = "none"


class _K(_BookOrder):
    stem = "K"


class _Th(_BookOrder):
    stem = r"\Theta"


class _InvK(_BookOrder):
    """Inverse of the training block of K (raised indices, a tilde), PDLT (6.35)."""

    stem = r"\widetilde{K}"
    raised = True


class _InvTheta(_BookOrder):
    """Inverse of the training block of Theta, PDLT (10.26)."""

    stem = r"\widetilde{\Theta}"
    raised = True


class _Component(sp.Expr):
    r"""A neuron-and-sample component such as :math:`y_{i;\tilde\alpha}` (printing only)."""

    is_commutative = True

    def __new__(cls, stem: str, neuron: Any, sample: Any):
        return super().__new__(cls, sp.Symbol(stem), sp.sympify(neuron), sp.sympify(sample))

    def _latex(self, printer) -> str:
        stem, i, s = self.args
        return f"{stem.name}_{{{printer._print(i)};{printer._print(s)}}}"


class _Head(sp.Expr):
    """A left-hand side written as LaTeX (printing only)."""

    is_commutative = True

    def __new__(cls, tex: str):
        return super().__new__(cls, sp.Symbol(tex))

    def _latex(self, printer) -> str:
        return self.args[0].name


def _mul(*args: Any) -> sp.Expr:
    return sp.Mul(*args, evaluate=False)


def _add(*args: Any) -> sp.Expr:
    return sp.Add(*args, evaluate=False)


def _neg(x: Any) -> sp.Expr:
    return sp.Mul(-1, x, evaluate=False)


def _lines(pairs: list) -> str:
    from effth.printing import latex

    def tex(e: Any) -> str:
        return e if isinstance(e, str) else latex(e, order="none")

    return r"\begin{aligned}" + r" \\ ".join(f"{tex(l)} &= {tex(r)}" for l, r in pairs) + r"\end{aligned}"


def prediction_latex(method: str, *, noise: bool = False, updates: int | None = None) -> str:
    r"""LaTeX of the formulas :func:`predict` evaluates for ``method``, in the book's notation.

    Built as SymPy expressions (sample tensors, :class:`~effth.algebra.tensors.SampleSum`,
    matrix symbols for finite-time GD) and printed by :func:`effth.latex`, terms in the book's
    order.  Bayes: (6.64), (6.57), the log of (6.34) (and the noise shift of :math:`\widetilde K`);
    converged GD / Newton: (10.39)–(10.41); finite-time GD: the infinite-width free solution
    (∞.88)–(∞.92) in matrix form.

    Examples
    --------
    >>> tex = prediction_latex("bayes")
    >>> r"{\widetilde{K}_{(L)}^{\tilde{\alpha}_{1}\tilde{\alpha}_{2}}}" in tex
    True
    """
    if method not in METHODS:
        raise DomainError(f"method must be one of {METHODS}, got {method!r}")
    L = sp.Symbol("L")
    i, i1, i2 = (sp.Symbol(n, integer=True) for n in ("i", "i_1", "i_2"))
    a1, a2, a3, a4 = (sp.Symbol(f"alphatilde_{k}") for k in range(1, 5))
    b, b1, b2 = sp.Symbol("betadot"), sp.Symbol("betadot_1"), sp.Symbol("betadot_2")

    def y(s: Any, n: Any = i) -> sp.Expr:
        return _Component("y", n, s)

    def z(s: Any, n: Any = i) -> sp.Expr:
        return _Component("z", n, s)

    if method == "bayes":
        mean = SampleSum(_mul(_K(b, a1, L), _InvK(a1, a2, L), y(a2)), a1, a2)
        cov = _add(_K(b1, b2, L),
                   _neg(SampleSum(_mul(_K(b1, a3, L), _InvK(a3, a4, L), _K(a4, b2, L)), a3, a4)))
        nL = sp.Symbol("n_L")
        # the log evidence (6.34): the determinant of the training block as a matrix symbol
        Ktilde = sp.MatrixSymbol(r"\widetilde{K}", sp.Symbol(r"N_{\mathcal{A}}"), sp.Symbol(r"N_{\mathcal{A}}"))
        logp = _add(_neg(_mul(nL / 2, sp.log(sp.Determinant(sp.MatMul(2 * sp.pi, Ktilde))))),
                    _neg(_mul(sp.UnevaluatedExpr(sp.Rational(1, 2)),
                              SampleSum(SampleSum(_mul(_InvK(a1, a2, L), y(a1), y(a2)), a1, a2), i))))
        pairs = [(_Head(r"m^{\infty}_{i;\dot{\beta}}"), mean),
                 (_Head(r"\mathbb{K}_{\dot{\beta}_{1}\dot{\beta}_{2}}"), cov),
                 (_Head(r"\log p(y_{\mathcal{A}})"), logp)]
        if noise:
            pairs.append((_Head(r"\widetilde{K}_{\tilde{\alpha}_{1}\tilde{\alpha}_{2}}"),
                          _add(_K(a1, a2, L), _mul(sp.Symbol(r"\sigma_{\varepsilon}^{2}"),
                                                   sp.KroneckerDelta(a1, a2)))))
        return _lines(pairs)
    if method == "gd" and updates is not None:
        NA, NB = sp.Symbol(r"N_{\mathcal{A}}"), sp.Symbol(r"N_{\mathcal{B}}")
        Tt = sp.MatrixSymbol(r"\widetilde{\Theta}", NA, NA)
        TBA = sp.MatrixSymbol(r"\Theta_{\mathcal{B}\mathcal{A}}", NB, NA)
        KAA = sp.MatrixSymbol(r"\widetilde{K}", NA, NA)
        KBA = sp.MatrixSymbol(r"K_{\mathcal{B}\mathcal{A}}", NB, NA)
        KAB = sp.MatrixSymbol(r"K_{\mathcal{A}\mathcal{B}}", NA, NB)
        KBB = sp.MatrixSymbol(r"K_{\mathcal{B}\mathcal{B}}", NB, NB)
        yA = sp.MatrixSymbol(r"y_{\mathcal{A}}", NA, 1)
        zA = sp.MatrixSymbol(r"z_{\mathcal{A}}", NA, 1)
        M = sp.MatrixSymbol(r"M(t)", NB, NA)
        eta, t = sp.Symbol("eta", positive=True), sp.Symbol("t", integer=True)
        decay = sp.MatPow(sp.MatAdd(sp.Identity(NA), sp.MatMul(-1, eta, Tt, evaluate=False),
                                    evaluate=False), t, evaluate=False)
        U = sp.MatrixSymbol(r"U(t)", NA, NA)          # the step-evolution operator (∞.89)
        Mdef = sp.MatMul(TBA, sp.Inverse(Tt), sp.MatAdd(sp.Identity(NA), sp.MatMul(-1, U, evaluate=False),
                                                       evaluate=False), evaluate=False)
        cov = sp.MatAdd(KBB, sp.MatMul(-1, M, KAB, evaluate=False), sp.MatMul(-1, KBA, M.T, evaluate=False),
                        sp.MatMul(M, KAA, M.T, evaluate=False), evaluate=False)
        pairs = [(_Head(r"U(t)"), decay),
                 (_Head(r"z_{\mathcal{A}}(t) - y_{\mathcal{A}}"),
                  sp.MatMul(U, sp.MatAdd(zA, sp.MatMul(-1, yA), evaluate=False), evaluate=False)),
                 (_Head(r"M(t)"), Mdef),
                 (_Head(r"m(t)"), sp.MatMul(M, yA, evaluate=False)),
                 (_Head(r"\mathrm{Cov}\left[z_{\mathcal{B}}(t), z_{\mathcal{B}}(t)\right]"), cov)]
        return _lines(pairs)
    # converged gradient descent / Newton: (10.39)-(10.41)
    trained = _add(z(b), _neg(SampleSum(_mul(_Th(b, a1, L), _InvTheta(a1, a2, L),
                                             _add(z(a2), _neg(y(a2)))), a1, a2)))
    mean = SampleSum(_mul(_Th(b, a1, L), _InvTheta(a1, a2, L), y(a2)), a1, a2)
    cov = _mul(sp.KroneckerDelta(i1, i2), _add(
        _K(b1, b2, L),
        _neg(SampleSum(_mul(_Th(b2, a1, L), _InvTheta(a1, a2, L), _K(b1, a2, L)), a1, a2)),
        _neg(SampleSum(_mul(_Th(b1, a1, L), _InvTheta(a1, a2, L), _K(b2, a2, L)), a1, a2)),
        SampleSum(_mul(_Th(b1, a1, L), _InvTheta(a1, a2, L), _Th(b2, a3, L), _InvTheta(a3, a4, L),
                       _K(a4, a2, L)), a1, a2, a3, a4)))
    head = r"z_{i;\dot{\beta}}(T)"
    pairs = [(_Head(head), trained),
             (_Head(r"m^{\infty}_{i;\dot{\beta}}"), mean),
             (_Head(r"\mathrm{Cov}\left[z_{i_{1};\dot{\beta}_{1}}(T), z_{i_{2};\dot{\beta}_{2}}(T)\right]"), cov)]
    return _lines(pairs)


# ============================================================================= the entry point
def _check_duplicates(Xa: np.ndarray, y: np.ndarray) -> None:
    """Refuse repeated training inputs, naming the rows: with different targets no function fits
    them, with equal ones the training block is singular (an infinite-width kernel evaluated by
    quadrature only hides that behind round-off, ~1e-11)."""
    _, first, inverse = np.unique(Xa, axis=0, return_index=True, return_inverse=True)
    inverse = np.ravel(inverse)
    if len(first) == len(Xa):
        return
    groups = [np.flatnonzero(inverse == g) for g in range(len(first))]
    dup = [g for g in groups if len(g) > 1]
    rows = "; ".join(", ".join(str(int(k) + 1) for k in g) for g in dup[:5])
    yy = y.reshape(len(Xa), -1)
    conflict = [g for g in dup if not np.all(yy[g] == yy[g[0]])]
    if conflict:
        raise DomainError(f"training inputs repeat with different targets (rows {rows}, numbered "
                          "from 1): no function fits both; average their targets into one row, or "
                          "pass noise= (Bayes) for noisy labels")
    raise DomainError(f"training inputs repeat (rows {rows}, numbered from 1): the training block "
                      "is singular; keep one row of each")


def _inputs_and_targets(net, X_train, y_train, X_test, ndim, regularized):
    """Training and test inputs (vectors, ``ndim=(2,)``, or a CNN's images) and the targets,
    checked: equal input shapes, at least one of each, no repeated training input (unless the
    block is regularized), as many target columns as the network has outputs."""
    Xa = finite_array(X_train, "X_train", ndim)
    Xb = finite_array(X_test, "X_test", ndim)
    images = ndim != (2,)
    if Xa.shape[1:] != Xb.shape[1:]:
        raise DomainError(f"X_train holds images of shape {Xa.shape[1:]} but X_test of shape "
                          f"{Xb.shape[1:]}: the images must share one shape" if images else
                          f"X_train has {Xa.shape[1]} features per input but X_test has "
                          f"{Xb.shape[1]}")
    if Xa.shape[0] == 0 or Xb.shape[0] == 0:
        raise DomainError(f"X_train and X_test need at least one {'image' if images else 'input'} "
                          "each")
    y = label_array(y_train, Xa.shape[0])
    if not regularized:
        _check_duplicates(Xa.reshape(Xa.shape[0], -1), y)
    C = 1 if y.ndim == 1 else y.shape[1]
    if getattr(net, "n_out", C) != C:
        raise DomainError(f"y_train has {C} output components but the network has "
                          f"n_out={net.n_out}")
    return Xa, Xb, y


def _resolve_cnn(net, X_train, y_train, X_test, method, lambda_b, lambda_w, rtol, regularized):
    """:func:`_resolve_data` for a :class:`~effth.CNN`: its infinite-channel NNGP kernel and NTK
    on the training images followed by the test images (:func:`effth.pdlt.cnn_kernels`)."""
    from effth.pdlt.cnn import cnn_kernels

    if net.parameterization != "ntk":
        raise DomainError("predict gives the lazy (kernel) prediction of a CNN in the NTK "
                          "parameterization; a μP CNN with gamma0 learns features: use "
                          "effth.dmft.solve_cnn_monte_carlo (or solve_cnn_deep_linear)")
    if not (np.all(np.asarray(lambda_b) == 1.0) and np.all(np.asarray(lambda_w) == 1.0)):
        raise DomainError("lambda_b/lambda_w rescale the MLP's NTK (PDLT (8.6)); a CNN's NTK is "
                          "that of its parameterization: leave them at 1")
    Xa, Xb, y = _inputs_and_targets(net, X_train, y_train, X_test, (net.dims + 1, net.dims + 2),
                                    regularized)
    ks = cnn_kernels(net, np.concatenate([Xa, Xb]), ntk=method != "bayes", rtol=rtol)
    Tf = ks.value("Theta").copy() if method != "bayes" else None
    return ks.value("K").copy(), Tf, Xa.shape[0], y, None, None


def _resolve_data(net, X_train, y_train, X_test, K, Theta, n_train, method, lambda_b, lambda_w, rtol,
                  regularized=False, factors=None):
    """(K full, Theta full or None, P, y, lambda_b, lambda_w) from either calling convention.

    With given kernels and a dict ``factors``, the Cholesky factor of the training block that
    the solve will use (Bayes: K's, GD and Newton: Theta's; not when ``regularized``) is put in
    ``factors`` by the PSD check that computed it (:func:`~effth.pdlt.learning._linalg.
    given_kernel_factor`, the blockwise test of :func:`~effth._validate.psd_kernel`); GD and
    Newton then check K finite and symmetric only and set ``factors["K_pending"]``: its
    positivity is checked when the covariance, the one formula that reads K, is first read."""
    if net is not None:
        if K is not None or Theta is not None or n_train is not None:
            raise DomainError("give either (net, X_train, y_train, X_test) or precomputed kernels "
                              "(K=, Theta=, n_train=), not both")
        if X_train is None or X_test is None or y_train is None:
            raise DomainError("predict(net, X_train, y_train, X_test): X_train, y_train and X_test "
                              "are all required")
        from effth.arch.cnn import CNN
        if isinstance(net, CNN):
            return _resolve_cnn(net, X_train, y_train, X_test, method, lambda_b, lambda_w, rtol,
                                regularized)
        Xa, Xb, y = _inputs_and_targets(net, X_train, y_train, X_test, (2,), regularized)
        need_theta = method != "bayes"
        Kf, Tf = output_kernels(net, np.vstack([Xa, Xb]), lambda_b=lambda_b, lambda_w=lambda_w,
                                ntk=need_theta, rtol=rtol)
        lb = _lambda_per_layer(lambda_b, net.depth, "lambda_b") if need_theta else None
        lw = _lambda_per_layer(lambda_w, net.depth, "lambda_w") if need_theta else None
        return Kf, Tf, Xa.shape[0], y, lb, lw
    if X_train is not None or X_test is not None:
        raise DomainError("X_train/X_test need a network: predict(net, X_train, y_train, X_test)")
    if K is None or y_train is None or n_train is None:
        raise DomainError("predict needs (net, X_train, y_train, X_test) or precomputed kernels "
                          "K=, y_train= and n_train= (plus Theta= for gradient descent)")
    Kf = finite_array(K, "K", (2,))
    if Kf.shape[0] != Kf.shape[1]:
        symmetric_matrix(Kf, "K")                             # its message for a non-square K
    if isinstance(n_train, bool) or not isinstance(n_train, (numbers.Integral,)) or not 0 < n_train < Kf.shape[0]:
        raise DomainError(f"n_train must be an int with 0 < n_train < N = {Kf.shape[0]} (training "
                          f"inputs first, then at least one test input), got {n_train!r}")
    reuse = factors is not None and not regularized
    if reuse and method == "bayes":                          # the test blocks too
        Kf, factors["K"], factors["K_W"] = given_kernel_factor(Kf, "K", int(n_train))
    elif reuse:
        # GD and Newton read K only in the covariance: finite and symmetric now, its
        # positivity checked when the covariance is first read (factors["K_pending"])
        Kf, _ = given_kernel(Kf, "K", scale=False)
        factors["K_pending"] = True
    else:
        Kf = psd_kernel(Kf, "K", n_train=int(n_train))
    Tf = None
    if Theta is not None:
        Ta = finite_array(Theta, "Theta", (2,))
        if Ta.shape != Kf.shape:
            raise DomainError(f"Theta has shape {Ta.shape} but K has {Kf.shape}")
        if reuse and method != "bayes":
            Tf, factors["Theta"], factors["Theta_W"] = given_kernel_factor(Ta, "Theta", int(n_train))
        else:
            Tf = psd_kernel(Ta, "Theta", n_train=int(n_train))
    elif method != "bayes":
        raise DomainError(f"method={method!r} needs the frozen NTK: pass Theta= (N, N)")
    y = label_array(y_train, int(n_train))
    return Kf, Tf, int(n_train), y, None, None


@public
def predict(net: Any = None, X_train: Any = None, y_train: Any = None, X_test: Any = None, *,
            method: str = "gd", y_test: Any = None, test_loss: str = "mse", noise: Any = 0.0,
            lambda_b: Any = 1.0,
            lambda_w: Any = 1.0, eta: Any = None, updates: Any = None, K: Any = None,
            Theta: Any = None, n_train: Any = None, jitter: Any = None, widths: Any = None,
            rtol: float = 1e-10, progress: bool | None = None) -> Prediction:
    r"""Prediction after learning: ensemble mean and covariance of the test outputs, at infinite
    width and (``widths=``) with the :math:`O(1/n)` corrections.

    Either ``predict(net, X_train, y_train, X_test, ...)`` (the kernels are computed here,
    :func:`output_kernels`) or ``predict(K=..., Theta=..., y_train=..., n_train=P)`` with
    precomputed output-layer kernels on the training inputs followed by the test inputs.

    Parameters
    ----------
    net : effth.MLP or effth.CNN, optional
        A :class:`~effth.CNN` (NTK parameterization) takes images, ``(P, *spatial)`` or
        ``(P, *spatial, C_0)``, and its infinite-channel kernels
        (:func:`effth.pdlt.cnn_kernels`); ``lambda_b``, ``lambda_w`` and ``widths`` are MLP-only.
    X_train : array_like (P, n_0)
    y_train : array_like (P,) or (P, C)
        Training targets :math:`y_{i;\tilde\alpha}`; ``C`` must equal ``net.n_out``.
    X_test : array_like (Q, n_0)
    method : {"gd", "bayes", "newton"}
        * ``"gd"`` (default): gradient descent on the MSE loss; the ensemble over
          initializations (10.39)–(10.41) (converged), or after ``updates`` steps of size ``eta``;
        * ``"bayes"``: the exact posterior (6.57), (6.64);
        * ``"newton"``: ``updates`` GD steps (none by default) and then one Newton step,
          :math:`\eta\kappa=\widetilde\Theta^{-1}` (10.25), (10.34): the converged prediction
          by algorithm independence (10.35), computed here by a separate (Cholesky) route.
    y_test : array_like (Q,) or (Q, C), optional
        Test targets: enables ``"bias"``, ``"variance"``, ``"test_loss"`` (10.52). For
        ``test_loss="cross_entropy"``, rows of class probabilities :math:`p_{i;\dot\beta}`
        (``(Q, C)``, non-negative, summing to 1).
    test_loss : {"mse", "cross_entropy"}
        The loss whose expectation over the ensemble is split into bias and variance: the MSE
        (10.52), exact; or the softmax cross-entropy (7.3) by the expansion (10.53)–(10.55),
        :math:`\mathbb E[\mathcal L_\mathcal B]\approx\mathcal L_\mathcal B(m^\infty)+\tfrac12
        \sum_{\dot\beta}\sum_i q_i(1-q_i)\,\mathrm{Cov}[z_{i;\dot\beta},z_{i;\dot\beta}]` with
        :math:`q=\mathrm{softmax}(m^\infty_{\dot\beta})` (the next term is of second order in
        the covariance). The prediction itself is that of MSE training in both cases.
    noise : float
        Bayes: output-noise variance :math:`\sigma_\varepsilon^2` of the likelihood (6.10),
        independent per sample, so :math:`\widetilde K\to\widetilde K+\sigma_\varepsilon^2\mathbb 1`.
        (PDLT §6.2 footnote 6 describes the noise as the shift :math:`C_b^{(L)}\to
        C_b^{(L)}+\sigma_\varepsilon^2`, which adds it to every entry of :math:`K`; that agrees with
        (6.10) only for a single input.  The covariance returned is that of the noiseless outputs
        :math:`z_\mathcal B`.)
    lambda_b, lambda_w : float or sequence of L floats
        Learning rates :math:`\lambda_b^{(\ell)},\lambda_W^{(\ell)}` of the NTK (PDLT (8.6));
        see :func:`~effth.pdlt.learning.predict_rates` for chapter 9's depth scalings.
    eta : float, optional
        Global learning rate for finite-time GD; must satisfy
        :math:`0<\eta<2/\lambda_{\max}(\widetilde\Theta)` (footnote 16 of §∞.2).
    updates : int, optional
        Number of GD steps; ``None`` (default): trained to convergence.
    K, Theta : array_like (N, N), optional
        Precomputed :math:`K^{(L)}` and :math:`\Theta^{(L)}` (training inputs first).
    n_train : int, optional
        Number of training inputs :math:`P` with ``K=``.
    jitter : float, optional
        Add ``jitter`` times the identity to the training block (a ridge) — only on request, with
        an :class:`~effth.errors.AccuracyWarning`.  Without it a singular training block raises.
    widths : int or sequence of int, optional
        The hidden widths (an int: all equal; gradient descent and Newton take equal widths); the
        last, :math:`n_{L-1}`, sets the :math:`1/n` expansion. Adds the :math:`O(1/n)` corrections
        (names ``"mean1"`` = :math:`n_{L-1}(m-m^\infty)`, ``"mean_at_width"``, their parts, and
        the same for the covariance, computed when a covariance name is first read: its NTK
        hierarchy is needed at entries with two test inputs, and its flow reuses the subsets of
        samples the mean's integrated, about the mean's cost again).  Needs ``net``.

        * Gradient descent and Newton (PDLT §∞.2): networks trained to convergence, the mean
          (∞.155)–(∞.160) as corrected in
          :func:`~effth.pdlt.learning.finite_width.finite_width_mean` (parts
          ``"mean1_H1"``, ``"mean1_delta_ntk"``, ``"mean1_dntk"``, ``"mean1_ddntk_I"``,
          ``"mean1_ddntk_II"``) and the covariance (derived;
          :func:`~effth.pdlt.learning.finite_width.finite_width_covariance`).  With
          ``updates=`` (and ``eta``) the mean after that many steps (PDLT §∞.2.2, the
          finite-time projectors of :mod:`effth.pdlt.learning.finite_time`) and the
          covariance after that many steps (the same derivation with the solution after
          ``updates`` steps).  With
          ``eta`` the projectors of GD (∞.142)–(∞.147), without it gradient flow
          (∞.149)–(∞.153); ``method="newton"`` is the two-step Newton algorithm (∞.148).  A
          smooth activation is required: for kinked ones (ReLU) the :math:`1/n` expansion of the
          training dynamics does not apply (PDLT §∞.1).
        * Bayes (PDLT §6.4): the posterior mean (6.88) with its wiring (6.89), the posterior
          covariance and the log evidence at :math:`O(1/n)` and the representation update
          (6.104), as :func:`~effth.pdlt.learning.bayes_finite.bayes_posterior` (parts
          ``"mean1_G1"``, ``"mean1_V_wiring"``, ``"mean1_V_linear"``, ...).
    rtol : float
        Relative accuracy of the Gaussian expectations of the kernels; with ``widths=``, the NTK
        hierarchy of the :math:`O(1/n)` terms is computed at ``min(100 * rtol, 1e-8)``.
    progress : bool or None
        A progress bar for the :math:`O(1/n)` NTK hierarchy (``widths=``), the loop that can run
        for minutes (``None``: follow ``$EFFTH_PROGRESS`` / a terminal, see
        :mod:`effth._progress`).  When the flow on all inputs would need more than 3 GiB (its
        estimate, :func:`~effth.pdlt.ntk.ntk_flow.restricted_flow_bytes`), the mean is computed
        over the test inputs in chunks (its value at a test input needs only that input), with
        a bar over the chunks; above the memory bound (``$EFFTH_MAX_BYTES``, default half the
        physical memory) even for one test input it is refused before allocating.

    Returns
    -------
    Prediction

    Raises
    ------
    DomainError
        Mismatched shapes, NaN/inf/complex input, non-symmetric or non-PSD kernels, a singular
        training block (without ``jitter``), :math:`\eta\ge2/\lambda_{\max}(\widetilde\Theta)`
        (the bound is in the message), ``updates`` without ``eta``, an unknown method;
        ``widths=`` without a network, with a kinked activation, with ``updates`` for Newton, noise or jitter.
        With given kernels (no ``jitter``), converged GD and Newton read ``K`` only in the
        covariance (10.41): a finite, symmetric ``K`` that is not PSD is refused when the
        covariance (``"std"``, ``"variance"``) is first read.

    Examples
    --------
    >>> import numpy as np, effth as et
    >>> from effth.pdlt import predict
    >>> net = et.MLP("relu", depth=3, c_w=2.0)
    >>> p = predict(net, [[1.0, 0.0], [0.0, 1.0]], [1.0, 0.5], [[0.6, -0.8]], method="bayes")
    >>> p.value("mean").shape, p.value("covariance").shape
    ((1,), (1, 1))
    """
    if method not in METHODS:
        raise DomainError(f"method must be one of {METHODS}, got {method!r}")
    if progress is not None:
        from effth._progress import progress_enabled
        progress_enabled(progress)                   # True, False or None, checked up front
    noise = nonnegative(noise, "noise")
    if noise and method != "bayes":
        raise DomainError("noise= is the output-noise variance of the Bayesian likelihood (6.10); "
                          "it applies to method='bayes' only")
    jitter = 0.0 if jitter is None else nonnegative(jitter, "jitter")
    if updates is not None:
        if isinstance(updates, bool) or not isinstance(updates, numbers.Integral) or updates < 0:
            raise DomainError(f"updates must be an int >= 0 (or None: trained to convergence), got {updates!r}")
        updates = int(updates)
        if method == "bayes":
            raise DomainError("updates= is for gradient descent (method='gd' or 'newton'), not Bayes")
        if eta is None:
            raise DomainError("updates= needs the global learning rate eta=")
    if eta is not None:
        if method == "bayes":
            raise DomainError("eta= is for gradient descent (method='gd' or 'newton'), not Bayes")
        eta = nonnegative(eta, "eta")
        if eta == 0:
            raise DomainError("eta must be > 0")
    width = None if widths is None else _width(widths, net, updates, jitter, method)
    if width is not None and method != "bayes":
        _plan_restricted_flows(net, X_train, X_test)     # refused before the kernels, if at all
    factors: dict = {}
    Kf, Tf, P, y, lb, lw = _resolve_data(net, X_train, y_train, X_test, K, Theta, n_train, method,
                                         lambda_b, lambda_w, rtol,
                                         # finite-time GD and a regularized block need no inverse
                                         regularized=bool(noise) or bool(jitter) or
                                         (method == "gd" and updates is not None),
                                         factors=factors)
    N = Kf.shape[0]
    Q = N - P
    yt = None
    if y_test is not None:
        yt = finite_array(y_test, "y_test", (1, 2))
        if yt.shape[0] != Q or yt.ndim != y.ndim or (yt.ndim == 2 and yt.shape[1] != y.shape[1]):
            raise DomainError(f"y_test has shape {yt.shape}; expected {(Q,) + y.shape[1:]} "
                              f"(one row per test input, as y_train's columns)")
    if test_loss not in ("mse", "cross_entropy"):
        raise DomainError(f"test_loss must be 'mse' or 'cross_entropy', got {test_loss!r}")
    if test_loss == "cross_entropy":
        if yt is None:
            raise DomainError("test_loss='cross_entropy' needs y_test (class probabilities per test input)")
        if yt.ndim != 2 or yt.shape[1] < 2:
            raise DomainError("test_loss='cross_entropy' needs at least two outputs: y_test of shape (Q, C), C >= 2")
        if np.any(yt < 0) or not np.allclose(yt.sum(axis=1), 1.0, atol=1e-10):
            raise DomainError("y_test rows must be probability vectors (non-negative, summing to 1) "
                              "for the cross-entropy")
    if jitter:
        warnings.warn(f"jitter={jitter:g} added to the training block: the prediction is that of a "
                      f"ridge-regularized kernel, not the exact infinite-width one "
                      f"(relative size {jitter / max(float(np.max(np.diag(Kf[:P, :P]))), 1e-300):.2g})",
                      AccuracyWarning, stacklevel=2)
    KAA = Kf[:P, :P]
    C = 1 if y.ndim == 1 else y.shape[1]
    log_ev = None
    if method == "bayes":
        Kt = KAA + (noise + jitter) * np.eye(P) if noise or jitter else KAA
        Lc = training_cholesky(Kt, "K (plus noise)" if noise else "K", jitter=0.0,
                               bound_hint=" (a noise variance noise=s2 > 0 regularizes it too)",
                               factor=factors.get("K"))
        v = _solve_tri(Lc, y)                           # L^{-1} y
        alpha = _solve_tri(Lc.T, v, upper=True)         # K~^{-1} y (a Cholesky solve)
        mean = Kf[P:, :P] @ alpha
        KAB, KBB = Kf[:P, P:], Kf[P:, P:]

        def cov():                                      # (6.57), when first read
            W = factors.get("K_W")                      # L^{-1} K_AB, from K's check
            W = _solve_tri(Lc, KAB) if W is None else W
            c = KBB - W.T @ W
            return _finite_or_raise("covariance", 0.5 * (c + c.T))

        def train_mean():                               # posterior of the latent training outputs
            return KAA @ alpha

        def train_cov():
            Wa = _solve_tri(Lc, KAA)
            c = KAA - Wa.T @ Wa
            return 0.5 * (c + c.T)

        log_ev = float(-0.5 * C * (P * math.log(2 * math.pi) + 2 * np.sum(np.log(np.diag(Lc))))
                       - 0.5 * np.sum(v * v))
    else:
        TAA = Tf[:P, :P]
        converged = updates is None
        if method in ("gd", "newton") and (converged if method == "gd" else not updates):
            # converged GD (10.39)-(10.41) and Newton without GD steps (10.34): Theta_BA
            # Theta~^{-1} by a Cholesky solve, no eigendecomposition; a learning rate is checked
            # by a second Cholesky factorization, of 2/eta - Theta~ (definite iff eta lambda_max < 2)
            Lt = training_cholesky(TAA, "Theta", jitter=jitter, factor=factors.get("Theta"))
            if eta is not None:
                _check_stable(TAA + jitter * np.eye(P), eta)
            # the mean as Theta_BA (Theta~^{-1} y): solves with the C columns of y; the Q x P
            # projector Theta_BA Theta~^{-1} (Q right-hand sides) only for the covariance
            mean = Tf[P:, :P] @ _solve_tri(Lt, y, transpose=True)
            Pm = None
            train_mean, train_cov = y.copy(), np.zeros((P, P))
        else:
            lam, U = training_spectrum(TAA, "Theta", need_invertible=converged or method == "newton",
                                       jitter=jitter)
            if eta is not None:
                _check_stable(None, eta, lam[-1])
            TBA = Tf[P:, :P]
            if method == "gd":
                phi = _gd_factor(lam, eta, updates)
                Pm = (TBA @ U) * phi @ U.T                   # Theta_BA Theta~^{-1}[1 - (1 - eta Theta~)^t]
                S = (U * _decay(lam, eta, updates)) @ U.T    # (1 - eta Theta~)^t
                train_mean = y - S @ y
                train_cov = S @ KAA @ S.T
                train_cov = 0.5 * (train_cov + train_cov.T)
            else:  # Newton: GD steps, then the Newton step (10.34), by a Cholesky solve
                Tj = TAA + jitter * np.eye(P)
                Lc = np.linalg.cholesky(Tj)
                newton = _solve_tri(Lc, TBA.T, transpose=True)   # Theta~^{-1} Theta_AB
                Pn = newton.T                                     # Theta_BA Theta~^{-1}
                if updates > _STEPWISE_UPDATES:
                    # the same sums in closed form (a loop of 1e10 steps would not end):
                    # eta sum_s (1 - eta Theta~)^s = Theta~^{-1} [1 - (1 - eta Theta~)^t]
                    Pg = (TBA @ U) * _gd_factor(lam, eta, updates) @ U.T
                    S = (U * _decay(lam, eta, updates)) @ U.T
                    Pm = Pg + Pn @ S
                else:
                    S = np.eye(P)
                    step = np.eye(P) - eta * Tj
                    Pg = np.zeros((Q, P))
                    for _ in range(updates):                        # the steps one by one (10.33)
                        Pg = Pg + eta * TBA @ S
                        S = step @ S
                    Pm = Pg + Pn @ S                              # z_B(T) = z_B - Pm (z_A - y)
                train_mean, train_cov = y.copy(), np.zeros((P, P))
        if Pm is not None:
            mean = Pm @ y

        def cov():                                      # (10.41), when first read
            if factors.get("K_pending"):                # K's positivity: first read here
                psd_kernel(Kf, "K", n_train=P)
                factors["K_pending"] = False
            if Pm is None:                              # Theta~^{-1} Theta_AB = L^{-T} (L^{-1} Theta_AB)
                W = factors.get("Theta_W")              # L^{-1} Theta_AB, from Theta's check
                W = _solve_tri(Lt, Tf[P:, :P].T) if W is None else W
                pm = _solve_tri(Lt.T, W, upper=True).T
            else:
                pm = Pm
            return _finite_or_raise("covariance", _covariance(pm, Kf, P))
    _finite_or_raise("mean", mean)
    finite = None
    if width is not None and method == "bayes":
        from effth.pdlt.learning.bayes_finite import bayes_posterior
        finite = bayes_posterior(net, X_train, y_train, X_test, widths=widths, noise=noise, rtol=rtol,
                                 progress=progress)
    elif width is not None:
        finite = _finite_width(net, X_train, X_test, y, method, eta, width, lambda_b, lambda_w, rtol,
                               updates, progress)
    return Prediction(method=method, K=Kf, Theta=Tf, n_train=P, mean_=mean, covariance_=cov,
                      train_mean_=train_mean, train_covariance_=train_cov, y_train=y, y_test=yt,
                      test_loss_kind=test_loss,
                      noise=noise, eta=eta, updates=updates, jitter=jitter, log_evidence_=log_ev,
                      net=net, lambda_b=lb, lambda_w=lw, finite_width=finite)


def _width(widths: Any, net: Any, updates: Any, jitter: float, method: str) -> int:
    """Check ``widths=`` of :func:`predict` (Bayes: PDLT §6.4; GD, Newton: §∞.2); returns
    :math:`n_{L-1}`."""
    from effth.arch.cnn import CNN
    if isinstance(net, CNN):
        from effth.errors import NotDerivedError
        raise NotDerivedError("widths= adds the O(1/n) corrections of MLPs (PDLT §6.4, §∞.2); "
                              "for a CNN only the infinite-channel prediction is derived: drop "
                              "widths= (the trained CNNs of effth.simulation.train_cnn measure "
                              "the finite-channel one)")
    width = last_hidden_width(widths, "widths", equal=method != "bayes")
    if net is None:
        raise DomainError("widths= needs the network, predict(net, X_train, y_train, X_test, "
                          "widths=n): the O(1/n) mean needs its NTK hierarchy, not only K and Theta")
    held = getattr(net, "widths", None)
    if held is not None and all(isinstance(w, numbers.Integral) for w in held) \
            and int(held[-1]) != int(width):
        raise DomainError(f"the widths are given twice and differ: the network has widths="
                          f"{tuple(int(w) for w in held)}, predict widths={widths!r}; give them once")
    if updates is not None and method != "gd":
        raise DomainError("widths= with updates= is finite-time gradient descent (PDLT §∞.2.2, "
                          "method='gd'); Newton at finite width is the converged two-step "
                          "algorithm (∞.148): drop updates=")
    if jitter:
        raise DomainError("widths= does not combine with jitter= (a ridge changes the solution)")
    act = getattr(net, "act", None)
    if method != "bayes" and act is not None and not (act.is_smooth or act.is_polynomial):
        raise DomainError(f"{act!r} is kinked: the O(1/n) training dynamics does not apply (the "
                          "ddNTK mean diverges and single networks move at O(1/sqrt(n)), PDLT "
                          "§∞.1), so there is no O(1/n) trained prediction")
    return int(width)


def _finite_width(net, X_train, X_test, y, method, eta, width, lambda_b, lambda_w, rtol, updates=None,
                  progress=None):
    """The O(1/n) mean of trained networks (PDLT (∞.155); after ``updates`` steps, §∞.2.2) on
    train-then-test inputs, and their covariance as a :class:`_PendingCovariance` (after the
    same ``updates`` steps).

    The mean at a test input reads only the entries of the NTK hierarchy with that one test input
    (``ntk_flow(..., max_test=1)``), so when the flow on all inputs would need more than
    :func:`_flow_budget` the test inputs are taken in chunks, one flow on the training inputs
    plus each chunk (the training-only entries are then recomputed per chunk)."""
    X = np.vstack([finite_array(X_train, "X_train", (2,)), finite_array(X_test, "X_test", (2,))])
    algorithm = "two_step" if method == "newton" else ("gd" if eta is not None else "gradient_flow")
    kw = dict(n_train=len(y), algorithm=algorithm, eta=eta if algorithm == "gd" else None, widths=width,
              updates=updates)
    flow_kw = _flow_kw(lambda_b, lambda_w, rtol, y)
    P, N = len(y), X.shape[0]
    L = int(net.depth)
    chunk = _test_chunk(P, N - P, L)
    if chunk < N - P:
        mean, figures = _chunked_mean(net, X, y, flow_kw, kw, chunk, progress, width)
    else:
        # the mean reads the entries with at most one test input; the covariance, which reads
        # those with two, is computed when first read, reusing the subsets of samples the mean's
        # flow integrated (14 + 14 tanh inputs: 17.8 s after a 16.0 s mean, 32.2 s without)
        cache: list | None = []
        nf = ntk_flow(net, X, max_test=1, atom_cache=cache, progress=progress, **flow_kw)
        figures = width_figures(nf.kernel, width)
        mean = finite_width_mean(nf, y, **kw)
        del nf
        if cache and sum(s["nbytes"] for s in cache if s is not None) > _ATOM_CACHE_BYTES:
            cache.clear()             # too large to hold until the covariance is read: recomputed
    msg = width_message(*figures)
    if msg is not None:                  # the criterion of flow(), at the width given here
        warnings.warn(f"predict(widths={width}): {msg}", WidthWarning, stacklevel=4)   # past @public
    return mean, _PendingCovariance(net, X, y, flow_kw, kw, None if chunk < N - P else cache, progress)


#: the restricted flow's estimate (:func:`~effth.pdlt.ntk.ntk_flow.restricted_flow_bytes`)
#: above which the test inputs are taken in chunks (soft; the hard bound is
#: effth._validate.memory_limit): 40 training + 40 test inputs at depth 3 run as flows of
#: 40 + 5 inputs
_FLOW_BUDGET = 3 * 2 ** 30


def _flow_budget() -> float:
    from effth._validate import memory_limit
    return min(_FLOW_BUDGET, memory_limit())


def _test_chunk(P: int, Q: int, L: int) -> int:
    """Test inputs per restricted flow: all of them when the flow fits :func:`_flow_budget`,
    else the most that fit (at least one; refused, before anything is allocated, when one does
    not fit the memory bound)."""
    from effth._validate import check_memory
    budget = _flow_budget()
    if restricted_flow_bytes(P + Q, L, P) <= budget:
        return Q
    check_memory(restricted_flow_bytes(P + 1, L, P),
                 f"the O(1/n) mean's NTK hierarchy on {P} training inputs and one test input "
                 f"(depth {L}; the estimate of ntk_flow.restricted_flow_bytes)",
                 "use fewer training inputs or a shallower network, or raise $EFFTH_MAX_BYTES")
    c = 1
    while c < Q and restricted_flow_bytes(P + c + 1, L, P) <= budget:
        c += 1
    n_chunks = -(-Q // c)
    return -(-Q // n_chunks)                     # balanced chunks


def _plan_restricted_flows(net: Any, X_train: Any, X_test: Any) -> None:
    """The memory plan of the O(1/n) mean (:func:`_test_chunk`) from the input counts alone, so
    that a request no chunking fits is refused before the infinite-width kernels are computed
    (inputs that are not matrices are left to the validation that follows)."""
    try:
        shapes = [np.shape(X_train), np.shape(X_test)]
    except (ValueError, TypeError):
        return
    if net is None or getattr(net, "depth", None) is None or any(len(s) != 2 for s in shapes):
        return
    _test_chunk(shapes[0][0], shapes[1][0], int(net.depth))


def _chunked_mean(net, X, y, flow_kw, kw, chunk, progress, width):
    """:func:`finite_width_mean` on the training inputs and the test inputs in chunks (one
    restricted flow per chunk), assembled into one result on all inputs, and the largest
    :func:`~effth.pdlt.initialization.kernel_flow.width_figures` of the flows."""
    from effth._progress import progress_bar
    P, Q = len(y), X.shape[0] - len(y)
    pieces = []
    figures = (0.0, 0.0)
    with progress_bar(-(-Q // chunk), "finite-width mean: test chunks", progress=progress,
                      unit="chunk") as bar:
        for start in range(0, Q, chunk):
            rows = np.r_[0:P, P + start:P + min(start + chunk, Q)]
            nf = ntk_flow(net, X[rows], max_test=1, progress=False, **flow_kw)
            figures = tuple(max(a, b) for a, b in zip(figures, width_figures(nf.kernel, width)))
            pieces.append(finite_width_mean(nf, y, **kw))
            del nf                # freed before the next chunk's flow allocates its arrays
            bar.update()
    first = pieces[0]
    parts = {k: np.concatenate([first.parts[k][:P]] + [m.parts[k][P:] for m in pieces])
             for k in first.parts}
    infinite = np.concatenate([first.infinite[:P]] + [m.infinite[P:] for m in pieces])
    return type(first)(parts, infinite, P, first.width, first.projectors), figures


_ATOM_CACHE_BYTES = 1 << 30    # the mean's atoms kept for the covariance up to this size


def _flow_kw(lambda_b, lambda_w, rtol, y) -> dict:
    """The restricted NTK flow's settings of :func:`_finite_width`."""
    return dict(lambda_b=lambda_b, lambda_w=lambda_w, rtol=min(rtol * 100, 1e-8), n_train=len(y))


class _PendingCovariance:
    """The O(1/n) covariance of :func:`_finite_width`, computed on first use (its flow reads the
    entries with two test inputs, which the mean does not need)."""

    def __init__(self, net, X, y, flow_kw: dict, kw: dict, cache: list | None,
                 progress: Any = None) -> None:
        self._args = (net, X, y, flow_kw, kw, progress)
        self._cache = cache          # the mean's atoms, per layer (ntk_flow's atom_cache)

    def __call__(self):
        from effth._validate import check_memory
        from effth.pdlt.learning.finite_width import covariance_bytes
        net, X, y, flow_kw, kw, progress = self._args
        N, P = X.shape[0], len(y)
        m = 1 if y.ndim == 1 else y.shape[1]
        check_memory(restricted_flow_bytes(N, int(net.depth), P, 2)
                     + covariance_bytes(N, P, m, kw.get("updates")),
                     f"the O(1/n) covariance on {P} training and {N - P} test inputs (the NTK "
                     f"hierarchy on all {N} inputs and the output-index decompositions)",
                     "read the covariance for fewer test inputs (another predict call), or use "
                     "fewer training inputs")
        cache, self._cache = self._cache, None       # computed once: the snapshots go with it
        return finite_width_covariance(ntk_flow(net, X, max_test=2, atom_cache=cache,
                                                progress=progress, **flow_kw), y, **kw)


def _finite_or_raise(what: str, arr: np.ndarray) -> np.ndarray:
    if not np.all(np.isfinite(arr)):
        raise DomainError(f"the {what} is not finite: the training block is too ill-conditioned "
                          "for double precision (pass jitter=)")
    return arr


def _check_stable(TAA: np.ndarray | None, eta: float, lam_max: float | None = None) -> None:
    """``eta * lambda_max(Theta~) < 2`` (PDLT §∞.2, footnote 16): from ``lam_max``, or without an
    eigendecomposition by a Cholesky factorization of ``2/eta - Theta~``; the eigenvalue is
    computed only to say by how much a failing rate misses."""
    if lam_max is None:
        try:
            np.linalg.cholesky((2.0 / eta) * np.eye(len(TAA)) - TAA)
            return
        except np.linalg.LinAlgError:
            lam_max = float(np.linalg.eigvalsh(TAA)[-1])
    bound = 2.0 / lam_max
    if eta >= bound:
        raise DomainError(f"eta={eta:g} is not below 2/lambda_max(Theta_train) = {bound:.6g} "
                          f"(lambda_max = {lam_max:.6g}): gradient descent does not "
                          "converge (PDLT §∞.2, footnote 16)")


def _solve_tri(Lc: np.ndarray, B: np.ndarray, transpose: bool = False, upper: bool = False) -> np.ndarray:
    """L^{-1} B (``upper``: for an upper-triangular factor), or (L L^T)^{-1} B with
    ``transpose`` (a Cholesky solve)."""
    from scipy.linalg import solve_triangular

    X = solve_triangular(Lc, B, lower=not upper, check_finite=False)
    if transpose:
        X = solve_triangular(Lc.T, X, lower=False, check_finite=False)
    return X


# ========================================================================= model comparison
@public
def log_evidence(net: Any = None, X_train: Any = None, y_train: Any = None, *, noise: Any = 0.0,
                 K: Any = None, jitter: Any = None, rtol: float = 1e-10) -> float:
    r"""Log of the Bayesian evidence :math:`p(y_\mathcal A|\mathcal H)` at infinite width (PDLT (6.34)).

    .. math::
        \log p(y_\mathcal A) = -\frac{n_L}{2}\log\bigl|2\pi\widetilde K\bigr|
        - \frac12\sum_{i=1}^{n_L}\sum_{\tilde\alpha_1,\tilde\alpha_2}
          \widetilde K^{\tilde\alpha_1\tilde\alpha_2}y_{i;\tilde\alpha_1}y_{i;\tilde\alpha_2},

    with :math:`\widetilde K` the training block of :math:`K^{(L)}` (plus
    :math:`\sigma_\varepsilon^2\mathbb 1` for output noise) and
    :math:`\widetilde K^{\tilde\alpha_1\tilde\alpha_2}` the inverse of that block (6.35).
    Evaluated with a Cholesky factor, cost :math:`O(N_\mathcal A^3)`.

    For two inputs this is the closed form (6.48), :func:`log_evidence_two_inputs`.  PDLT (6.46)
    as printed has :math:`+\widetilde K_{[1]}` in *both* diagonal entries of the two-input
    kernel; corrected here (in :func:`log_evidence_two_inputs`) because by the
    :math:`\gamma^{[a]}` decomposition (5.15)–(5.16), :math:`\gamma^{[1]}=\mathrm{diag}(1,-1)`,
    the :math:`--` entry is :math:`\widetilde K_{[0]}-\widetilde K_{[1]}+\widetilde K_{[2]}`, and
    only then is the determinant :math:`4\widetilde K_{[0]}\widetilde K_{[2]}-\widetilde K_{[1]}^2`
    that (6.48) uses.  (The general matrix form computed here is unaffected.)

    Parameters
    ----------
    net, X_train, y_train
        The network, training inputs (P, n_0) and targets (P,) or (P, C).
    noise : float
        Output-noise variance :math:`\sigma_\varepsilon^2` (see :func:`predict`).
    K : array_like (P, P), optional
        A precomputed training kernel instead of ``net, X_train``.
    jitter : float, optional
        Ridge added to the training block on request (with an AccuracyWarning).

    Returns
    -------
    float
    """
    noise = nonnegative(noise, "noise")
    jitter = 0.0 if jitter is None else nonnegative(jitter, "jitter")
    if net is not None:
        if K is not None:
            raise DomainError("give either (net, X_train) or K=, not both")
        if X_train is None or y_train is None:
            raise DomainError("log_evidence(net, X_train, y_train): X_train and y_train are required")
        Kt, _ = output_kernels(net, X_train, ntk=False, rtol=rtol)
    else:
        if K is None or y_train is None:
            raise DomainError("log_evidence needs (net, X_train, y_train) or K= and y_train=")
        Kt = psd_kernel(finite_array(K, "K", (2,)), "K")
    P = Kt.shape[0]
    y = label_array(y_train, P)
    if net is not None and getattr(net, "n_out", None) not in (None, 1 if y.ndim == 1 else y.shape[1]):
        raise DomainError(f"y_train has {1 if y.ndim == 1 else y.shape[1]} output components but "
                          f"the network has n_out={net.n_out}")
    if jitter:
        warnings.warn(f"jitter={jitter:g} added to the training kernel: the evidence is that of a "
                      "ridge-regularized kernel", AccuracyWarning, stacklevel=2)
    Kt = Kt + (noise + jitter) * np.eye(P)
    Lc = training_cholesky(Kt, "K", jitter=0.0, bound_hint=" and the evidence is a delta function there")
    v = _solve_tri(Lc, y)
    C = 1 if y.ndim == 1 else y.shape[1]
    return float(-0.5 * C * (P * math.log(2 * math.pi) + 2 * np.sum(np.log(np.diag(Lc))))
                 - 0.5 * np.sum(v * v))


@public
def log_bayes_factor(net_a: Any, net_b: Any, X_train: Any, y_train: Any, *,
                     noise: Any = 0.0, rtol: float = 1e-10) -> float:
    r"""Log Bayes factor :math:`\log p(y_\mathcal A|\mathcal H_a)-\log p(y_\mathcal A|\mathcal H_b)`
    between two hypotheses (networks) (PDLT (6.30)–(6.31)); positive favours ``net_a``."""
    return (log_evidence(net_a, X_train, y_train, noise=noise, rtol=rtol)
            - log_evidence(net_b, X_train, y_train, noise=noise, rtol=rtol))


@public
def log_evidence_two_inputs(K0: float, K1: float, K2: float, y_plus: Any, y_minus: Any) -> float:
    r"""Two-input log evidence in the :math:`\gamma^{[a]}` basis, PDLT (6.48) with (6.46) corrected.

    .. math::
        p(y_+,y_-) = \bigl[4\pi^2(4\widetilde K_{[0]}\widetilde K_{[2]}-\widetilde K_{[1]}^2)\bigr]^{-n_L/2}
        \exp\Bigl[-\frac{4\widetilde K_{[0]}\mathbb Y_{[2]}+4\widetilde K_{[2]}\mathbb Y_{[0]}
        -2\widetilde K_{[1]}\mathbb Y_{[1]}}{2(4\widetilde K_{[0]}\widetilde K_{[2]}-\widetilde K_{[1]}^2)}\Bigr]

    with :math:`\mathbb Y_{[a]}` of (6.47).  PDLT (6.46) as printed has :math:`+\widetilde K_{[1]}`
    in both diagonal entries of :math:`\widetilde K`; corrected here because (5.15)–(5.16) give
    :math:`\widetilde K_{--}=\widetilde K_{[0]}-\widetilde K_{[1]}+\widetilde K_{[2]}`
    (:math:`\gamma^{[1]}=\mathrm{diag}(1,-1)`), which is what makes the determinant
    :math:`4\widetilde K_{[0]}\widetilde K_{[2]}-\widetilde K_{[1]}^2` of (6.48); (6.48) itself is
    right.

    Parameters
    ----------
    K0, K1, K2 : float
        :math:`\widetilde K_{[0]}, \widetilde K_{[1]}, \widetilde K_{[2]}` (5.17)–(5.19).
    y_plus, y_minus : array_like (n_L,) or float
    """
    k0, k1, k2 = (float(finite_array(k, name, (0,))) for k, name in ((K0, "K0"), (K1, "K1"), (K2, "K2")))
    yp = np.atleast_1d(finite_array(y_plus, "y_plus", (0, 1)))
    ym = np.atleast_1d(finite_array(y_minus, "y_minus", (0, 1)))
    if yp.shape != ym.shape:
        raise DomainError(f"y_plus and y_minus must have the same shape, got {yp.shape}, {ym.shape}")
    det = 4 * k0 * k2 - k1 * k1
    if not (det > 0 and k0 + k2 > 0):
        raise DomainError(f"the two-input kernel is not positive definite: 4 K0 K2 - K1^2 = {det:.3g}")
    nL = yp.size
    Y0 = float(np.sum(((yp + ym) / 2) ** 2))
    Y1 = float((np.sum(yp ** 2) - np.sum(ym ** 2)) / 2)
    Y2 = float(np.sum(((yp - ym) / 2) ** 2))
    return (-0.5 * nL * math.log(4 * math.pi ** 2 * det)
            - (4 * k0 * Y2 + 4 * k2 * Y0 - 2 * k1 * Y1) / (2 * det))


@public
@dataclass(repr=False)
class EvidenceScan:
    r"""The log evidence (6.34) over a grid of :math:`C_W` (all layers), other hyperparameters fixed.

    ``value("log_evidence")`` and ``value("c_w")`` are ``(M,)`` arrays; :attr:`c_w_best` is the
    maximizer (grid maximum refined by a parabola through its neighbours).
    """

    c_w: np.ndarray
    log_evidence_: np.ndarray
    net: Any
    noise: float = 0.0
    layers: tuple = ()

    @property
    def c_w_best(self) -> float:
        k = int(np.argmax(self.log_evidence_))
        x, f = self.c_w, self.log_evidence_
        if 0 < k < len(x) - 1:
            x0, x1, x2 = x[k - 1:k + 2]
            f0, f1, f2 = f[k - 1:k + 2]
            den = (x0 - x1) * (x0 - x2) * (x1 - x2)
            A = (x2 * (f1 - f0) + x1 * (f0 - f2) + x0 * (f2 - f1)) / den
            B = (x2 ** 2 * (f0 - f1) + x1 ** 2 * (f2 - f0) + x0 ** 2 * (f1 - f2)) / den
            if A < 0:
                return float(-B / (2 * A))
        return float(x[k])

    def value(self, name: str, layer: int | None = None) -> np.ndarray:
        self.stderr(name, layer)
        return (self.log_evidence_ if name == "log_evidence" else self.c_w).copy()

    def stderr(self, name: str, layer: int | None = None) -> None:
        if layer is not None:
            raise DomainError("an EvidenceScan has no layer axis; omit layer=")
        if name not in ("log_evidence", "c_w"):
            raise DomainError(f"an EvidenceScan holds ['log_evidence', 'c_w'], not {name!r}")
        return None

    def __repr__(self) -> str:
        return (f"EvidenceScan(c_w={self.c_w[0]:g}..{self.c_w[-1]:g} ({len(self.c_w)} points), "
                f"best c_w={self.c_w_best:.4g}, depth={self.net.depth})")

    def _repr_html_(self) -> str:
        rows = [("network", repr(self.net)), ("C_W grid", f"{self.c_w[0]:g}..{self.c_w[-1]:g} "
                                                         f"({len(self.c_w)} points)"),
                ("maximizing C_W", f"{self.c_w_best:.6g}"),
                ("max log evidence", f"{float(np.max(self.log_evidence_)):.6g}")]
        body = "".join(f"<tr><th style='text-align:left'>{html.escape(str(k))}</th>"
                       f"<td style='text-align:left'>{html.escape(str(v))}</td></tr>" for k, v in rows)
        return f"<table><caption>Evidence scan over C_W (PDLT §6.3.1)</caption>{body}</table>"


@public
def evidence_scan(net: Any, X_train: Any, y_train: Any, *, c_w: Any, noise: Any = 0.0,
                  rtol: float = 1e-10) -> EvidenceScan:
    r"""Log evidence (6.34) as a function of :math:`C_W` — the "evidence for criticality" (§6.3.1).

    Every layer gets the same :math:`C_W` from the grid; activation, depth, :math:`C_b` and
    ``n_out`` are the network's.  PDLT §6.3.1 argues that for deep networks the evidence prefers
    the critical hyperparameters (the kernel neither vanishes nor explodes,
    :math:`\chi_\parallel=\chi_\perp=1`).  For scale-invariant activations with :math:`C_b=0`
    the kernel is :math:`K^{(L)}(C_W)=(C_W/C_W^{\rm crit})^L K^{(L)}(C_W^{\rm crit})` with an
    unchanged angular structure, so the maximizer is
    :math:`C_W^{\rm crit}\,(\,y^\top\widetilde K_{\rm crit}^{-1}y/(n_LN_\mathcal A))^{1/L}`:
    above the critical value, and tending to it as :math:`L\to\infty`, for any data (tested).
    The approach is slow: the angles between inputs close like :math:`1/L` (§5.5), so
    :math:`y^\top\widetilde K_{\rm crit}^{-1}y` grows like :math:`L^2` and
    :math:`C_W^\star/C_W^{\rm crit}-1\approx 2\log L/L` (ReLU, three inputs: 2.28 at
    :math:`L=20`, 2.04 at :math:`L=400`) — the book's "peaks near criticality" holds for deep
    networks, with the optimum slightly on the chaotic side (cf. its footnote 22 for tanh).

    Parameters
    ----------
    net : effth.MLP
    X_train, y_train
    c_w : array_like (M,)
        Grid of :math:`C_W > 0` values, increasing.
    noise : float

    Returns
    -------
    EvidenceScan
    """
    from effth.arch import MLP

    grid = finite_array(c_w, "c_w", (1,))
    if grid.size < 1 or np.any(grid <= 0) or np.any(np.diff(grid) <= 0):
        raise DomainError("c_w must be a non-empty increasing grid of positive values")
    vals = []
    for cw in grid:
        other = MLP(net.activation, net.depth, net.widths, c_w=float(cw), c_b=net.c_b, n_out=net.n_out)
        vals.append(log_evidence(other, X_train, y_train, noise=noise, rtol=rtol))
    return EvidenceScan(grid, np.array(vals), net, nonnegative(noise, "noise"))
