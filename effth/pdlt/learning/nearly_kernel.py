r"""Quadratic models and nearly-kernel methods (PDLT §11.4.1–§11.4.2).

The quadratic model (11.105) with one output block per component :math:`i`,

.. math::
    z_i(x) = \sum_j W_{ij}\phi_j(x) + \frac\epsilon2\sum_{j_1j_2}W_{ij_1}W_{ij_2}\psi_{j_1j_2}(x),

has a kernel :math:`k_{\delta_1\delta_2}=\sum_j\phi_j(x_{\delta_1})\phi_j(x_{\delta_2})` (learning
rates = identity) and a *meta kernel* (11.130)

.. math::
    \mu_{\delta_0\delta_1\delta_2} = \epsilon\sum_{j_1j_2}\psi_{j_1j_2}(x_{\delta_0})
        \phi_{j_1}(x_{\delta_1})\phi_{j_2}(x_{\delta_2}).

Trained to zero training loss its test prediction is, to :math:`O(\epsilon)`, a *nearly-kernel*
method that depends on the data only through :math:`k` and :math:`\mu` (the dual description):

* ``method="direct"``: the direct-optimization solution :math:`W^\star=W^F+W^I` (11.115),
  (11.118), whose prediction is (11.132);
* ``method="gd"``: gradient descent from :math:`W=0` with a global step ``eta`` (11.133)–(11.136),
  with the algorithm projectors :math:`Z_A, Z_B` built in the eigenbasis of :math:`\widetilde k`;
* ``method="trained_kernel"``: the trained-kernel prediction (11.142), the kernel prediction with
  :math:`k^\#=\tfrac12(k+k^E)` (11.140) and the effective kernel :math:`k^E` (11.137)–(11.138).
  This is an approximation: as printed, (11.142) differs from (11.132) at :math:`O(\epsilon)`
  by :math:`\tfrac12\sum[\mu_{\tilde\alpha_1\dot\beta\tilde\alpha_2}-\sum k_{\dot\beta\tilde\alpha_5}
  \widetilde k^{\tilde\alpha_5\tilde\alpha_6}\mu_{\tilde\alpha_1\tilde\alpha_6\tilde\alpha_2}]
  v_{i;\tilde\alpha_1}v_{i;\tilde\alpha_2}` (``"trained_kernel_extra"``), which vanishes only when the
  test features lie in the span of the training features.  Expanding
  :math:`k^\#_{\dot\beta\mathcal A}(\widetilde k^\#)^{-1}y` to first order in :math:`\mu` gives
  this term directly: :math:`k^E-k` contains both :math:`\mu_{\dot\beta\tilde\alpha_1\tilde\alpha_2}` and
  :math:`\mu_{\tilde\alpha_1\dot\beta\tilde\alpha_2}`, while (11.132) contains only the first.

:class:`QuadraticModel` holds explicit features and meta features (for checks and examples):
its kernel, meta kernel, the primal solution (11.115)–(11.119) and its exact output.
"""

from __future__ import annotations

from effth._signature import public

import html
import numbers
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from effth.errors import DomainError

from effth._validate import finite_array, label_array, nonnegative, symmetric_matrix
from effth.pdlt.learning._linalg import training_spectrum

__all__ = ["QuadraticModel", "quadratic_model", "nearly_kernel_predict", "NearlyKernelPrediction",
           "meta_kernel", "NEARLY_KERNEL_METHODS"]

NEARLY_KERNEL_METHODS = ("direct", "gd", "trained_kernel")


# ================================================================================ the model
@public
@dataclass(repr=False)
class QuadraticModel:
    r"""The quadratic model (11.105): features :math:`\phi_j(x_\delta)` and symmetric meta features
    :math:`\psi_{j_1j_2}(x_\delta)` on :math:`N` samples, coupling :math:`\epsilon`.

    Attributes
    ----------
    phi : ndarray (F, N)
    psi : ndarray (F, F, N)
    eps : float
    """

    phi: np.ndarray
    psi: np.ndarray
    eps: float

    @property
    def n_features(self) -> int:
        return self.phi.shape[0]

    @property
    def n_samples(self) -> int:
        return self.phi.shape[1]

    def kernel(self) -> np.ndarray:
        r""":math:`k_{\delta_1\delta_2}=\sum_j\phi_j(x_{\delta_1})\phi_j(x_{\delta_2})` ``(N, N)``."""
        return self.phi.T @ self.phi

    def meta_kernel(self) -> np.ndarray:
        r"""The meta kernel :math:`\mu_{\delta_0\delta_1\delta_2}` (11.130) ``(N, N, N)``."""
        return self.eps * np.einsum("jkd,je,kf->def", self.psi, self.phi, self.phi)

    def output(self, W: Any) -> np.ndarray:
        r"""The model's outputs :math:`z_i(x_\delta)` for weights ``W`` ``(C, F)``: ``(N, C)``."""
        W = np.atleast_2d(np.asarray(W, dtype=float))
        if W.shape[1] != self.n_features:
            raise DomainError(f"W must have shape (C, {self.n_features}), got {W.shape}")
        return (W @ self.phi).T + 0.5 * self.eps * np.einsum("ij,ik,jkd->di", W, W, self.psi)

    def effective_features(self, W: Any) -> np.ndarray:
        r""":math:`\phi^E_{ij}(x_\delta)=\phi_j(x_\delta)+\epsilon\sum_kW_{ik}\psi_{kj}(x_\delta)`
        (11.107): ``(C, F, N)``."""
        W = np.atleast_2d(np.asarray(W, dtype=float))
        return self.phi[None] + self.eps * np.einsum("ik,kjd->ijd", W, self.psi)

    def solve(self, y_train: Any, n_train: int) -> np.ndarray:
        r"""The direct-optimization weights :math:`W^\star=W^F+W^I` (11.115), (11.118), with the
        pseudo-inverse of :math:`M=\sum_{\tilde\alpha}\phi(x_{\tilde\alpha})\phi(x_{\tilde\alpha})^\top`
        (the overparameterized case): ``(C, F)``."""
        P = _n_train(n_train, self.n_samples)
        y = label_array(y_train, P)
        y = y[:, None] if y.ndim == 1 else y
        phiA = self.phi[:, :P]
        Minv = np.linalg.pinv(phiA @ phiA.T)
        WF = y.T @ phiA.T @ Minv                                   # (11.115)
        WI = -0.5 * self.eps * np.einsum("ia,ib,abd,cd,cj->ij", WF, WF, self.psi[:, :, :P],
                                         phiA, Minv)               # (11.118)
        return WF + WI

    def __repr__(self) -> str:
        return (f"QuadraticModel(features={self.n_features}, samples={self.n_samples}, "
                f"eps={self.eps:g})")


@public
def quadratic_model(phi: Any, psi: Any, eps: Any) -> QuadraticModel:
    r"""A :class:`QuadraticModel` (PDLT (11.105)) from features ``phi`` ``(F, N)``, meta features
    ``psi`` ``(F, F, N)`` (symmetric in the first two axes) and the coupling ``eps``."""
    phi = finite_array(phi, "phi", (2,))
    psi = finite_array(psi, "psi", (3,))
    F, N = phi.shape
    if psi.shape != (F, F, N):
        raise DomainError(f"psi must have shape (F, F, N) = {(F, F, N)}, got {psi.shape}")
    scale = max(float(np.max(np.abs(psi))), 1e-300)
    if not np.allclose(psi, psi.transpose(1, 0, 2), rtol=0.0, atol=1e-12 * scale):
        raise DomainError("psi must be symmetric in j1 <-> j2 (the meta features of (11.105))")
    return QuadraticModel(phi, psi, nonnegative(eps, "eps"))


@public
def meta_kernel(phi: Any, psi: Any, eps: Any) -> np.ndarray:
    r"""The meta kernel (11.130) :math:`\mu_{\delta_0\delta_1\delta_2}` of explicit features."""
    return quadratic_model(phi, psi, eps).meta_kernel()


def _n_train(n_train: Any, N: int) -> int:
    if isinstance(n_train, bool) or not isinstance(n_train, numbers.Integral) or not 0 < n_train < N:
        raise DomainError(f"n_train must be an int with 0 < n_train < N = {N} (training inputs "
                          f"first, then at least one test input), got {n_train!r}")
    return int(n_train)


# ============================================================================ the prediction
@public
@dataclass(repr=False)
class NearlyKernelPrediction:
    r"""The trained prediction of a nearly-kernel method (PDLT §11.4.2), to :math:`O(\epsilon)`.

    ``value(name)`` (``stderr`` is ``None``; no layer axis).  :math:`Q` test inputs, :math:`C`
    output components:

    * ``"mean"`` ``(Q,)`` or ``(Q, C)``: the prediction for ``method``, the sum of
    * ``"kernel"``: :math:`k_{\dot\beta\tilde\alpha_1}\widetilde k^{\tilde\alpha_1\tilde\alpha_2}y_{\tilde\alpha_2}`
      (the kernel prediction) and ``"correction"``: the :math:`O(\epsilon)` meta-kernel term;
    * ``"direct"``, ``"gd"`` (when ``eta`` is given), ``"trained_kernel"``: the three predictions
      (11.132), (11.133), (11.142); ``"trained_kernel_extra"``: (11.142) − (11.132) at
      :math:`O(\epsilon)` (see the module docstring);
    * ``"effective_kernel"`` ``(C, N, N)``: :math:`k^E_{ii}` (11.137)–(11.138) at the solution;
      ``"trained_kernel_matrix"`` ``(C, N, N)``: :math:`k^\#_{ii}` (11.140);
    * ``"k"`` ``(N, N)``, ``"mu"`` ``(N, N, N)``: the inputs.
    """

    method: str
    k: np.ndarray
    mu: np.ndarray
    n_train: int
    y_train: np.ndarray
    parts: dict
    eta: float | None = None
    layers: tuple = field(default=())

    @property
    def names(self) -> tuple:
        out = ["mean", "kernel", "correction", "direct", "trained_kernel", "trained_kernel_extra"]
        if self.eta is not None:
            out.append("gd")
        return tuple(out + ["effective_kernel", "trained_kernel_matrix", "k", "mu"])

    def value(self, name: str, layer: int | None = None) -> Any:
        """The prediction for ``name`` (see the class docstring)."""
        self._check(name, layer)
        if name == "k":
            return self.k.copy()
        if name == "mu":
            return self.mu.copy()
        if name in ("effective_kernel", "trained_kernel_matrix"):
            return self.parts[name].copy()
        a = self.parts[self.method] if name == "mean" else (
            self.parts[self.method] - self.parts["kernel"] if name == "correction" else self.parts[name])
        return a[:, 0].copy() if self.y_train.ndim == 1 else a.copy()

    def stderr(self, name: str, layer: int | None = None) -> None:
        """``None``: a deterministic theory."""
        self._check(name, layer)
        return None

    def _check(self, name: str, layer: Any) -> None:
        if layer is not None:
            raise DomainError(f"a NearlyKernelPrediction has no layer axis; got layer={layer!r}")
        if name not in self.names:
            hint = " (pass eta= for the gradient-descent prediction)" if name == "gd" else ""
            raise DomainError(f"a NearlyKernelPrediction holds {list(self.names)}, not {name!r}{hint}")

    def __repr__(self) -> str:
        eta = "" if self.eta is None else f", eta={self.eta:g}"
        return (f"NearlyKernelPrediction(method={self.method!r}{eta}, train={self.n_train}, "
                f"test={self.k.shape[0] - self.n_train}, outputs={self.y_train.shape[1] if self.y_train.ndim == 2 else 1})")

    def _repr_html_(self) -> str:
        rows = [("method", self.method), ("training inputs", self.n_train),
                ("test inputs", self.k.shape[0] - self.n_train),
                ("max |kernel part|", f"{np.max(np.abs(self.parts['kernel'])):.4g}"),
                ("max |O(eps) correction|", f"{np.max(np.abs(self.parts[self.method] - self.parts['kernel'])):.3g}"),
                ("names", ", ".join(self.names))]
        body = "".join(f"<tr><th style='text-align:left'>{html.escape(str(a))}</th>"
                       f"<td style='text-align:left'>{html.escape(str(b))}</td></tr>" for a, b in rows)
        return f"<table><caption>Nearly-kernel prediction (PDLT §11.4)</caption>{body}</table>"

    def latex(self) -> str:
        r"""(11.132) in the book's notation (an ``aligned`` block)."""
        kt = r"\widetilde{k}"
        return (r"\begin{aligned}z_{i;\dot{\beta}} &= \sum k_{\dot{\beta}\tilde{\alpha}_{1}}"
                rf"{kt}^{{\tilde{{\alpha}}_{{1}}\tilde{{\alpha}}_{{2}}}}y_{{i;\tilde{{\alpha}}_{{2}}}}"
                r" + \frac{1}{2}\sum\Big[\mu_{\dot{\beta}\tilde{\alpha}_{1}\tilde{\alpha}_{2}}"
                r" - \sum k_{\dot{\beta}\tilde{\alpha}_{5}}"
                rf"{kt}^{{\tilde{{\alpha}}_{{5}}\tilde{{\alpha}}_{{6}}}}"
                r"\mu_{\tilde{\alpha}_{6}\tilde{\alpha}_{1}\tilde{\alpha}_{2}}\Big]"
                r"v_{i;\tilde{\alpha}_{1}}v_{i;\tilde{\alpha}_{2}}\\ "
                rf"v_{{i;\tilde{{\alpha}}}} &= \sum {kt}^{{\tilde{{\alpha}}\tilde{{\alpha}}_{{1}}}}"
                r"y_{i;\tilde{\alpha}_{1}}\end{aligned}")

    def _repr_latex_(self) -> str:
        return f"$${self.latex()}$$"


@public
def nearly_kernel_predict(k: Any = None, mu: Any = None, y_train: Any = None, n_train: Any = None, *,
                          model: QuadraticModel | None = None, method: str = "direct",
                          eta: Any = None) -> NearlyKernelPrediction:
    r"""The trained prediction of a nearly-kernel method to :math:`O(\epsilon)` (PDLT §11.4.2).

    Parameters
    ----------
    k : array_like (N, N)
        The kernel on the training then test inputs.
    mu : array_like (N, N, N)
        The meta kernel :math:`\mu_{\delta_0\delta_1\delta_2}` (11.130), symmetric in
        :math:`\delta_1\leftrightarrow\delta_2`.
    y_train : array_like (P,) or (P, C)
    n_train : int
        :math:`P`.
    model : QuadraticModel, optional
        Instead of ``k, mu``: take them from an explicit quadratic model.
    method : {"direct", "gd", "trained_kernel"}
        Which prediction ``"mean"`` is: (11.132), (11.133) (needs ``eta``), (11.142).
    eta : float, optional
        Global gradient-descent step (11.133); :math:`0<\eta<2/\lambda_{\max}(\widetilde k)`.

    Returns
    -------
    NearlyKernelPrediction

    Raises
    ------
    DomainError
        Bad shapes, a non-symmetric or singular training kernel, a meta kernel without its
        :math:`\delta_1\leftrightarrow\delta_2` symmetry, ``method="gd"`` without ``eta``, an
        ``eta`` outside the convergent range.
    """
    if method not in NEARLY_KERNEL_METHODS:
        raise DomainError(f"method must be one of {NEARLY_KERNEL_METHODS}, got {method!r}")
    if model is not None:
        if k is not None or mu is not None:
            raise DomainError("give either model= or k=, mu=, not both")
        k, mu = model.kernel(), model.meta_kernel()
    if k is None or mu is None or y_train is None or n_train is None:
        raise DomainError("nearly_kernel_predict needs k=, mu= (or model=), y_train= and n_train=")
    k = symmetric_matrix(finite_array(k, "k", (2,)), "k")
    N = k.shape[0]
    mu = finite_array(mu, "mu", (3,))
    if mu.shape != (N, N, N):
        raise DomainError(f"mu must have shape {(N, N, N)}, got {mu.shape}")
    scale = max(float(np.max(np.abs(mu))), 1e-300)
    if not np.allclose(mu, mu.transpose(0, 2, 1), rtol=0.0, atol=1e-10 * scale):
        raise DomainError("mu must be symmetric in its last two indices (PDLT (11.130))")
    P = _n_train(n_train, N)
    y = label_array(y_train, P)
    y2 = y[:, None] if y.ndim == 1 else y
    lam, U = training_spectrum(k[:P, :P], "k", need_invertible=True, jitter=0.0)
    if method == "gd" and eta is None:
        raise DomainError("method='gd' needs the global learning rate eta= (11.133)")
    if eta is not None:
        eta = nonnegative(eta, "eta")
        if not 0 < eta < 2.0 / lam[-1]:
            raise DomainError(f"eta={eta:g} must be in (0, 2/lambda_max(k~)) = (0, {2.0 / lam[-1]:.6g})")
    kinv = (U / lam) @ U.T
    A, B = slice(0, P), slice(P, N)
    v = kinv @ y2                                                 # v_{i;a} (P, C)
    proj = k[B, A] @ kinv                                         # k_{bA} k~^{-1}
    kernel = proj @ y2
    mu1 = mu[B][:, A, A] - np.einsum("ba,acd->bcd", proj, mu[A][:, A, A])      # mu_{b a1 a2} - proj
    mu2 = mu[A][:, B, A] - np.einsum("ba,cad->cbd", proj, mu[A][:, A, A])      # mu_{a1 b a2} - proj
    mu2 = mu2.transpose(1, 0, 2)                                  # (Q, a1, a2)
    direct = kernel + 0.5 * np.einsum("bcd,ci,di->bi", mu1, v, v)
    extra = 0.5 * np.einsum("bcd,ci,di->bi", mu2, v, v)
    # effective kernel (11.137)-(11.138) and trained kernel (11.140), per component i
    C = y2.shape[1]
    kE = np.empty((C, N, N))
    for i in range(C):
        d = mu[:, :, A] @ v[:, i]                                 # sum_a mu_{d1 d2 a} v_a
        kE[i] = k + d + d.T
    ksharp = 0.5 * (k[None] + kE)
    trained = np.empty_like(kernel)
    for i in range(C):
        ks = ksharp[i]
        trained[:, i] = ks[B, A] @ np.linalg.solve(ks[A, A], y2[:, i])   # (11.141)-(11.142)
    parts = {"kernel": kernel, "direct": direct, "trained_kernel": trained,
             "trained_kernel_extra": extra, "effective_kernel": kE, "trained_kernel_matrix": ksharp}
    if eta is not None:
        # X_Pi: inverse of k~(x)1 + 1(x)k~ - eta k~(x)k~ on pair space, diagonal in k~'s eigenbasis
        den = lam[:, None] + lam[None, :] - eta * lam[:, None] * lam[None, :]
        X = np.einsum("ia,jb,ka,lb,ab->ijkl", U, U, U, U, 1.0 / den)
        ZA = np.einsum("ik,jl->ijkl", kinv, kinv) - np.einsum("jm,imkl->ijkl", kinv, X)
        ZB = ZA + 0.5 * eta * X
        yy = np.einsum("ki,li->kli", y2, y2)
        parts["gd"] = (kernel + np.einsum("bcd,cdkl,kli->bi", mu2, ZA, yy)
                       + np.einsum("bcd,cdkl,kli->bi", mu1, ZB, yy))
    return NearlyKernelPrediction(method=method, k=k, mu=mu, n_train=P, y_train=y, parts=parts,
                                  eta=eta)
