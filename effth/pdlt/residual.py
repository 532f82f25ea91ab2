r"""Residual MLPs (PDLT app. B) and the optimal aspect ratio (PDLT app. A, §A.4; §B.3).

The recursions themselves are derived by the one pipeline
(``derive_initialization(statistic, residual=True)``, iterated by :func:`initialization_flow`
with ``gamma=``, ``xi=``); their single-layer cumulant closure misses one neuron's history at
:math:`O(1/n)`, which :mod:`effth.pdlt.residual_history` restores on one and two inputs, and
pair by pair on more (``mlp_flow``'s default).  This module adds what a practitioner asks of them:

* :func:`residual_criticality` -- the critical :math:`C_W(\gamma)` of PDLT (B.20)–(B.21): the
  derived kernel recursion :math:`K'=\xi^2(C_b+C_W\langle\sigma\sigma\rangle_K)+\gamma^2K` (B.11)
  shifts both susceptibilities by :math:`\gamma^2` (B.15)–(B.16) and scales the branch by
  :math:`\xi^2`, so at :math:`C_b=0` criticality is :math:`\xi^2C_W=(1-\gamma^2)C_W^{\rm MLP}`;
* :func:`residual_nu` -- the depth coefficient :math:`\nu(\gamma)` of
  :math:`V^{(L)}/(n\,G^{(L)2})=\nu\,L/n` (A.68), measured on the exact single-input flow at
  criticality.  For activations that are not odd (ReLU) the flow carries the three-point vertex
  :math:`T` that the book's (B.24) omits: with the cumulant closure the ReLU value is
  :math:`\nu(\gamma)=(1-\gamma^2)[5-\gamma^2+\tfrac{16}{\pi}\gamma(1+\gamma)]`, larger than the
  printed (B.29) :math:`(1-\gamma^2)(5-\gamma^2)` for :math:`\gamma>0`, and the history terms
  raise it by another 1–3.5 % (``docs/residual.md``, Erratum 2); simulations of residual
  ReLU networks reject the printed value (``docs/residual.md``);
* :func:`optimal_aspect_ratio` -- :math:`r^\star=4/[(20+3m_1+3m_2)\nu]` (A.72), (A.73), (B.36);
  :func:`mutual_information` (A.71); :func:`optimal_gamma` -- :math:`\gamma^\star(r)` solving
  :math:`r^\star(\gamma)=r` (§B.3);
* :func:`residual_branch_gain` -- the hybrid rule (B.44)–(B.45) for a general residual block;
* :func:`residual_ntk_flow` -- the NTK hierarchy :math:`\Theta, H^{\{1\}}, A, B, D, F` of a
  residual MLP (and the odd tensors :math:`Y, X` it needs), iterating
  ``derive_ntk(statistic, residual=True)``; ``ntk_flow(net, X)`` calls it for a residual ``net``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
from scipy.optimize import brentq

from effth._signature import public
from effth._validate import integer, real_scalar
from effth.activations import get_activation
from effth.errors import DomainError

__all__ = ["ResidualCriticality", "residual_criticality", "residual_nu", "optimal_aspect_ratio",
           "mutual_information", "optimal_gamma", "residual_branch_gain", "residual_ntk_flow"]


def _gamma(gamma: Any) -> float:
    g = real_scalar(gamma, "gamma")
    if not (g == g) or not 0 <= g < 1:
        raise DomainError(f"gamma must be in [0, 1) for a critical residual MLP (PDLT §B.2: "
                          f"C_W(gamma) = (1 - gamma^2)/A_2 vanishes at gamma = 1), got {gamma!r}")
    return g


def _xi(xi: Any) -> float:
    x = real_scalar(xi, "xi")
    if not (x == x) or not 0 < x < float("inf"):
        raise DomainError(f"xi must be positive and finite, got {xi!r}")
    return x


@public
@dataclass(frozen=True)
class ResidualCriticality:
    r"""Critical initialization of a residual MLP (PDLT (B.19)–(B.21)).

    Attributes
    ----------
    activation : str
    universality_class : str
        ``"scale-invariant"`` or ``"K*=0"`` (of the plain MLP, PDLT §5.2–§5.3).
    gamma, xi : float
        Skip and branch gains (B.4).
    c_w, c_b : float
        :math:`C_W(\gamma)=(1-\gamma^2)C_W^{\rm MLP}/\xi^2`, :math:`C_b=0`.
    """

    activation: str
    universality_class: str
    gamma: float
    xi: float
    c_w: float
    c_b: float


@public
def residual_criticality(activation: Any, gamma: Any, xi: Any = 1.0) -> ResidualCriticality:
    r"""The critical :math:`(C_W, C_b)` of a residual MLP, PDLT (B.20)–(B.21).

    Parameters
    ----------
    activation : str or Activation
        Of the scale-invariant or the :math:`K^\star=0` class (PDLT §5.2–§5.3).
    gamma : float in [0, 1)
    xi : float > 0

    Raises
    ------
    DomainError
        :math:`\gamma\notin[0,1)`, :math:`\xi\le0`, or an activation without such criticality.

    Examples
    --------
    >>> residual_criticality("relu", 0.5).c_w
    1.5
    """
    from effth.pdlt.criticality import find_criticality

    g, x = _gamma(gamma), _xi(xi)
    act = get_activation(activation)
    crit = find_criticality(act)
    if crit.universality_class not in ("scale-invariant", "K*=0") or float(crit.c_b) != 0:
        raise DomainError(f"{act!r} is of the {crit.universality_class!r} class: PDLT (B.20)-(B.21) "
                          "cover the scale-invariant and the K*=0 classes (C_b = 0)")
    return ResidualCriticality(repr(act), crit.universality_class, g, x,
                               (1 - g * g) * float(crit.c_w) / (x * x), 0.0)


@public
def residual_nu(activation: Any, gamma: Any, *, depth: int = 64, K1: float = 1.0,
                closure: str = "history") -> float:
    r"""Depth coefficient :math:`\nu(\gamma)` of the critical residual MLP, from the exact flow.

    Iterates the exact single-input recursions of :math:`K, V, G^{\{1\}}, T` over one neuron's
    history (:func:`~effth.pdlt.residual_history.residual_history_flow`; ``closure="cumulant"``:
    the derived single-layer cumulant closure, PDLT (B.24) with the three-point vertex) at
    :func:`residual_criticality` and returns

    * scale-invariant class: the per-layer increment :math:`(V^{(L)}-V^{(L-1)})/K^{(L)2}`, which
      is exactly :math:`\nu` of (B.28)–(B.29) once :math:`T` has reached its fixed point
      (geometrically in :math:`\gamma^{L}`; :math:`T\equiv0` for linear networks);
    * :math:`K^\star=0` class: :math:`V^{(L)}/(L\,K^{(L)2})`, which tends to :math:`\nu` of
      (B.35) with :math:`O(\log L/L)` corrections (deep ``depth`` needed).

    The cumulant closure (like the book's (B.24), (B.29), (B.35)) drops the Mehler terms
    :math:`m\ge3` of the covariance of one neuron's :math:`\sigma^2` at different layers, which
    a skip makes :math:`O(1)`; ``closure="history"`` keeps them all (``docs/residual.md``,
    Erratum 2).  Both agree for linear networks.  In the scale-invariant class the increment
    converges geometrically in depth (like :math:`\gamma^L`): ``depth`` of a few hundred for
    :math:`\gamma` near 1.

    Parameters
    ----------
    activation : str or Activation
    gamma : float in [0, 1)
    depth : int
        Layers iterated (>= 3).
    K1 : float
        First-layer kernel (scale-invariant: any; :math:`\nu` does not depend on it).
    closure : {"history", "cumulant"}
        The exact recursion, or the truncated one of the book's (B.24) (with :math:`T`).

    Returns
    -------
    float
    """
    from effth.pdlt.initialization.recursions import initialization_flow
    from effth.pdlt.residual_history import residual_history_flow

    crit = residual_criticality(activation, gamma)
    L = integer(depth, "depth", minimum=3)
    k1 = real_scalar(K1, "K1")
    if not 0 < k1 < float("inf"):
        raise DomainError(f"K1 must be positive and finite, got {K1!r}")
    if closure not in ("history", "cumulant"):
        raise DomainError(f"closure must be 'history' or 'cumulant', got {closure!r}")
    if closure == "history":
        f = residual_history_flow(k1, L, activation, c_w=crit.c_w, c_b=0.0, gamma=crit.gamma,
                                  xi=1.0)
    else:
        f = initialization_flow(np.array([[k1]]), L, activation, c_w=crit.c_w, c_b=0.0,
                                gamma=crit.gamma, xi=1.0)
    K = float(f["K"][-1].ravel()[0])
    V = [float(v.ravel()[0]) for v in f["V"]]
    if crit.universality_class == "scale-invariant":
        return (V[-1] - V[-2]) / K**2
    return V[-1] / (L * K**2)


def _parts(n_out: Any, m1: Any, m2: Any) -> tuple[int, int]:
    if n_out is not None:
        if m1 is not None or m2 is not None:
            raise DomainError("give n_out= (split in halves, (A.73)) or m1= and m2=, not both")
        n = integer(n_out, "n_out", minimum=2)
        return n // 2, n - n // 2
    if m1 is None or m2 is None:
        raise DomainError("give n_out= or both m1= and m2= (output-neuron groups of (A.72))")
    return integer(m1, "m1", minimum=1), integer(m2, "m2", minimum=1)


def _positive(x: Any, name: str) -> float:
    v = real_scalar(x, name)
    if not 0 < v < float("inf"):
        raise DomainError(f"{name} must be positive and finite, got {x!r}")
    return v


@public
def optimal_aspect_ratio(nu: Any, n_out: Any = None, *, m1: Any = None, m2: Any = None) -> float:
    r"""The aspect ratio :math:`r^\star=L/n` that maximizes the NLO mutual information (A.72).

    :math:`r^\star=\frac{4}{20+3m_1+3m_2}\frac1\nu`; with ``n_out`` the output neurons are split
    in halves :math:`(\lfloor n_L/2\rfloor,\lceil n_L/2\rceil)` (A.73); for a residual MLP pass
    :math:`\nu(\gamma)` (B.36).

    Examples
    --------
    >>> round(optimal_aspect_ratio(5.0, n_out=2), 6)       # ReLU, PDLT (A.73)
    0.030769
    """
    a, b = _parts(n_out, m1, m2)
    return 4.0 / ((20 + 3 * a + 3 * b) * _positive(nu, "nu"))


@public
def mutual_information(nu_r: Any, n_out: Any = None, *, m1: Any = None, m2: Any = None) -> float:
    r"""NLO mutual information between two groups of output neurons, PDLT (A.67)/(A.71).

    :math:`\mathcal I=\frac{m_1m_2}8(\nu r)^2-\frac{m_1m_2(20+3m_1+3m_2)}{48}(\nu r)^3`, with
    ``nu_r`` :math:`=\nu r=V^{(L)}/(n_{L-1}G^{(L)2})` (A.68).
    """
    a, b = _parts(n_out, m1, m2)
    e = real_scalar(nu_r, "nu_r")
    if not 0 <= e < float("inf"):
        raise DomainError(f"nu_r must be >= 0 and finite, got {nu_r!r}")
    return a * b / 8 * e**2 - a * b * (20 + 3 * a + 3 * b) / 48 * e**3


@public
def optimal_gamma(r: Any, nu: Callable[[float], float], n_out: Any = None, *, m1: Any = None,
                  m2: Any = None, grid: int = 65, tol: float = 1e-12) -> float:
    r""":math:`\gamma^\star(r)`: the skip gain whose :math:`r^\star(\gamma)` (B.36) equals ``r``.

    Solves :math:`\nu(\gamma)=4/[(20+3m_1+3m_2)\,r]` on :math:`[0,1)` (sign changes on a grid of
    ``grid`` points, refined by Brent's method) and returns the largest root, 0 if there is none
    (for a decreasing :math:`\nu`, as in the book's (B.29), (B.35): :math:`r\le r^\star(0)`,
    where residual connections do not help, §B.3).  The derived ReLU :math:`\nu(\gamma)`
    (:func:`residual_nu`) first rises with :math:`\gamma`: there a small ``r`` can have two roots,
    and the larger :math:`\gamma` is returned.

    Parameters
    ----------
    r : float > 0
        Aspect ratio :math:`L/n`.
    nu : callable
        :math:`\gamma\mapsto\nu(\gamma)`, e.g. ``lambda g: residual_nu("relu", g)`` or a closed form.
    n_out, m1, m2 : int
        Output neurons split in halves, or the two groups of (A.72).
    """
    rr = _positive(r, "r")
    a, b = _parts(n_out, m1, m2)
    if not callable(nu):
        raise DomainError("nu must be a callable gamma -> nu(gamma)")
    n_grid = integer(grid, "grid", minimum=2)
    target = 4.0 / ((20 + 3 * a + 3 * b) * rr)
    gs = np.linspace(0.0, 1.0 - 1e-9, n_grid)
    f = np.array([float(nu(g)) - target for g in gs])
    if not np.all(np.isfinite(f)):
        raise DomainError("nu(gamma) is not finite on [0, 1)")
    roots = [float(brentq(lambda g: float(nu(g)) - target, gs[k], gs[k + 1], xtol=tol))
             for k in range(n_grid - 1) if f[k] * f[k + 1] < 0]
    roots += [float(gs[k]) for k in range(n_grid) if f[k] == 0]
    return max(roots) if roots else 0.0


@public
def residual_branch_gain(gamma: Any, G_zz: Any, G_RR: Any, G_Rz: Any = 0.0) -> float:
    r"""The branch gain :math:`\xi` that preserves the mean metric of a general residual block.

    PDLT §B.4: with the measured :math:`\bar G_{zz}^{(\ell)}`, :math:`\bar G_{RR}^{(\ell+1)}`
    (B.42) and :math:`\bar G_{Rz}^{(\ell+0.5)}` (B.43, with its missing :math:`\sum_\delta`), the
    diagonal recursion (B.44) keeps :math:`\bar G_{zz}` fixed when (B.45)
    :math:`(1-\gamma^2)\bar G_{zz}=\xi^2\bar G_{RR}+2\gamma\xi\bar G_{Rz}`; the positive root is

    .. math:: \xi=\frac{-\gamma\bar G_{Rz}+\sqrt{\gamma^2\bar G_{Rz}^2+(1-\gamma^2)\bar G_{zz}\bar G_{RR}}}{\bar G_{RR}}.

    Examples
    --------
    >>> round(residual_branch_gain(0.5, 1.0, 1.0), 6)
    0.866025
    """
    g = _gamma(gamma)
    zz, rr = _positive(G_zz, "G_zz"), _positive(G_RR, "G_RR")
    rz = real_scalar(G_Rz, "G_Rz")
    if not abs(rz) < float("inf") or rz * rz > zz * rr:
        raise DomainError(f"G_Rz must satisfy G_Rz^2 <= G_zz G_RR (Cauchy-Schwarz), got {G_Rz!r}")
    return (-g * rz + np.sqrt(g * g * rz * rz + (1 - g * g) * zz * rr)) / rr


# ----------------------------------------------------------------------------- NTK hierarchy
_RANK = {"Theta": 2, "H1": 2, "A": 4, "B": 4, "D": 4, "F": 4, "Y": 3, "X": 3}


def _ntk_step(statistic: str, N: int, activation: Any, method: str, rtol: float):
    """The compiled residual recursion of one NTK statistic on ``N`` inputs (components, step)."""
    import itertools

    import sympy as sp

    from effth.algebra.ntk_tensors import (NLONTK, FrozenNTK, NTKPreactD, NTKPreactF, NTKVarianceA,
                                           NTKVarianceB)
    from effth.algebra.tensors import FourPointVertex, NLOMetric, ThreePointVertex
    from effth.codegen import compile_step
    from effth.pdlt.derivation.ntk_forward import LAMBDA_B, LAMBDA_W
    from effth.pdlt.derivation.ntk_pipeline import NTKOddX, NTKOddY
    from effth.pdlt.derivation.pipeline import CB, CW, GAMMA, KMAT, RATIO, XI
    from effth.pdlt.ntk.recursions import derive_ntk

    rec = derive_ntk(statistic, residual=True)
    seen, comps = set(), []
    for idx in itertools.product(range(N), repeat=len(rec.labels)):
        key = rec.tensor(*idx).args
        if key not in seen:
            seen.add(key)
            comps.append(idx)
    exprs = [rec.expr.xreplace(dict(zip(rec.labels, map(sp.Integer, idx)))) for idx in comps]
    inputs = {KMAT: "K", FourPointVertex: "V", NLOMetric: "G1", ThreePointVertex: "T3",
              FrozenNTK: "Theta", NLONTK: "H1", NTKVarianceA: "A", NTKVarianceB: "B",
              NTKPreactD: "D", NTKPreactF: "F", NTKOddY: "Y", NTKOddX: "X"}
    params = {"C_W": CW, "C_b": CB, "ratio": RATIO, "xi": XI, "gamma": GAMMA,
              "lambda_b": LAMBDA_B, "lambda_W": LAMBDA_W}
    step = compile_step({"out": exprs}, inputs, activation=activation, params=params,
                        method=method, rtol=rtol)
    return rec, comps, step


def _kernel_sector(net: Any, X: np.ndarray, need_all: bool, method: str, rtol: float) -> dict:
    """K (and V, G1, T when ``need_all``) of every layer of ``net`` on ``X`` from the derived
    residual recursions (:func:`~effth.pdlt.initialization.recursions.mlp_flow`'s loop)."""
    from effth.pdlt.initialization.recursions import derive_initialization, mlp_flow

    if need_all:
        return mlp_flow(net, X, method=method, rtol=rtol, closure="cumulant")
    rec = derive_initialization("K", residual=True)
    K = net.c_b_at(1) + net.c_w_at(1) * (X @ X.T) / X.shape[1]
    out = [K]
    for layer in range(1, net.depth):
        K = rec.evaluate(K, activation=net.act, c_w=float(net.c_w_at(layer + 1)),
                         c_b=float(net.c_b_at(layer + 1)), xi=float(net.xi_at(layer + 1)),
                         gamma=float(net.gamma_at(layer + 1)), method=method, rtol=rtol)
        out.append(K)
    N = X.shape[0]
    L = net.depth
    return {"K": out, "V": [np.zeros((N,) * 4)] * L, "G1": [np.zeros((N, N))] * L}


@public
def residual_ntk_flow(net: Any, X: Any, *, lambda_b: Any = 1.0, lambda_w: Any = 1.0,
                      statistics: Any = None, closure: str = "exact", method: str = "auto",
                      rtol: float = 1e-10):
    r"""The NTK hierarchy of a residual MLP (PDLT (B.4)) through every layer, from the derived recursions.

    Iterates ``derive_ntk(statistic, residual=True)`` (the NTK pipeline on the residual forward
    equations of :math:`z` and :math:`\hat H`) together with the residual kernel sector
    :math:`K, V, G^{\{1\}}, T` in the same cumulant closure
    (:func:`~effth.pdlt.initialization.recursions.mlp_flow` with ``closure="cumulant"``), with the
    per-layer gains :math:`\gamma^{(\ell)}, \xi^{(\ell)}` of ``net`` (the first and the output
    layer have none).  Layer 1 is :math:`\Theta^{(1)}=\xi^{(1)2}[\lambda_b^{(1)}+\lambda_W^{(1)}
    XX^\top/n_0]` with every finite-width tensor zero.  ``ntk_flow(net, X)`` returns this for a
    residual ``net``.

    **Closure.**  These recursions close on single-layer cumulants (the nearly-Gaussian
    description of PDLT §4.5 and §8.3).  A skip connection breaks that description at
    :math:`O(1/n)`.  The off-diagonal NTK of a residual layer holds the single-neuron terms
    :math:`\xi\gamma\,W^{(\ell)}_{mk}\sigma'(z^{(\ell-1)}_k)\Theta^{(\ell-1)}`, and
    :math:`z^{(\ell)}_k` keeps :math:`\gamma z^{(\ell-1)}_k`.  So the next layer needs joint
    expectations over a neuron's history, such as
    :math:`\mathbb E[\sigma'(z^{(\ell)})^2\sigma'(z^{(\ell-1)})^2]`, with covariance
    :math:`\gamma K^{(\ell-1)}`.  By Mehler's expansion this is
    :math:`\sum_p(\gamma K)^p/p!\,\langle(\sigma'^2)^{(p)}\rangle\langle(\sigma'^2)^{(p)}\rangle`,
    and the cumulant closure keeps only its first terms: :math:`p=0` in :math:`B` and
    :math:`p\le1` in :math:`F`.  The dropped terms vanish when :math:`\sigma` is affine, so that
    case is exact.  Otherwise they are :math:`O(1)` parts of :math:`A, B, D, F` (GELU,
    :math:`\gamma=0.5`, depth 3: :math:`B` is 2.6% low, :math:`F` 2.9% low; see
    ``docs/residual.md`` for the simulations) and of :math:`H^{\{1\}}` (5% high there).  ``closure="exact"`` (the default) therefore refuses the finite-width
    statistics of a residual net with a non-affine activation; ``closure="cumulant"`` returns
    the truncated hierarchy.  :math:`\Theta` is exact either way.

    Parameters
    ----------
    net : effth.MLP
        With ``gamma=`` (and optionally ``xi=``); a plain ``net`` gives the plain hierarchy.
    X : array_like (N, n_0)
    lambda_b, lambda_w : float or sequence of L values
        :math:`\lambda_b^{(\ell)}, \lambda_W^{(\ell)}` (PDLT (8.6)).
    statistics : sequence of str, optional
        Subset of ``("Theta", "H1", "A", "B", "D", "F")`` (default: all; the tensors they read
        are computed too).
    closure : {"exact", "cumulant"}
        ``"exact"``: refuse :math:`H^{\{1\}}, A, B, D, F` when the recursions are not exact, that
        is, a residual layer with a non-affine :math:`\sigma`.  ``"cumulant"``: the
        single-layer cumulant closure (see above).
    method, rtol
        Gaussian expectations (as :meth:`~effth.pdlt.Recursion.evaluate`).

    Returns
    -------
    NTKFlow
        ``value("Theta" | "H1" | "H" | "A" | "B" | "D" | "F" | "K" | "V" | "G1" | "G", layer=)``;
        ``nf["Y"]``, ``nf["X"]`` (the odd NTK–preactivation tensors, :class:`~effth.pdlt.derivation.ntk_pipeline.NTKOddY`,
        :class:`~effth.pdlt.derivation.ntk_pipeline.NTKOddX`) and ``nf["T3"]`` (the three-point
        vertex) as arrays ``(L, N, N, N)``.

    Raises
    ------
    DomainError
        Bad inputs or learning rates; a kinked activation (its :math:`\sigma''` atoms are
        distributions; the residual hierarchy is evaluated for smooth activations); a
        finite-width statistic of a residual net with a non-affine activation under
        ``closure="exact"``.

    Examples
    --------
    >>> import numpy as np, effth as et
    >>> net = et.MLP("tanh", depth=3, widths=64, gamma=0.5)
    >>> nf = residual_ntk_flow(net, np.array([[1.0, 0.5]]), statistics=("Theta",))
    >>> round(float(nf.value("Theta", layer=3)[0, 0]), 6)
    2.843289
    """
    import sympy as sp  # noqa: F401

    from effth._validate import input_matrix
    from effth.arch._common import per_layer
    from effth.errors import DomainError as _DE
    from effth.algebra.tensors import SampleTensor
    from effth.pdlt.initialization.kernel_flow import Flow
    from effth.pdlt.ntk.ntk_flow import NTKFlow
    from effth.pdlt.ntk.recursions import RESIDUAL_NTK_STATISTICS, RESIDUAL_NTK_TENSORS

    Xa = input_matrix(X, "X")
    act = net.act
    if not (act.is_smooth or act.is_polynomial):
        raise _DE(f"{act!r} is kinked: the residual NTK recursions hold sigma'' atoms (distributions); "
                  "residual_ntk_flow evaluates smooth activations (tanh, GELU, ...)")
    L = net.depth
    lb = np.asarray(per_layer(lambda_b, L, "lambda_b"), dtype=float)
    lw = np.asarray(per_layer(lambda_w, L, "lambda_w"), dtype=float)
    public_stats = RESIDUAL_NTK_STATISTICS[:6]
    wanted = public_stats if statistics is None else (
        (statistics,) if isinstance(statistics, str) else tuple(statistics))
    for s in wanted:
        if s not in public_stats:
            raise _DE(f"unknown statistic {s!r}; expected some of {public_stats}")
    if closure not in ("exact", "cumulant"):
        raise _DE(f"closure must be 'exact' or 'cumulant', got {closure!r}")
    affine = act.is_polynomial and (act.polynomial_degree or 0) <= 1
    skips = [k for k in range(1, L + 1) if float(net.gamma_at(k)) != 0]
    finite = [s for s in wanted if s != "Theta"]
    if closure == "exact" and skips and finite and not affine:
        raise _DE(f"{finite} of a residual net with {act!r} (skip at layers {skips}): the "
                  "single-layer cumulant recursions drop O(1) parts of A, B, D, F (the Mehler "
                  "terms of a neuron's joint history, gamma K^(l-1) correlated with z^(l)), and "
                  "of H1; they are exact for an affine activation only.  "
                  "statistics=('Theta',) is exact; closure='cumulant' returns the truncated "
                  "hierarchy")
    N, n0 = Xa.shape
    recs = {}
    need = set(wanted)
    while True:                         # the closure: what the wanted recursions read
        for s in list(need):
            if s not in recs:
                recs[s] = _ntk_step(s, N, act, method, rtol)
        reads = {s2 for s in need for t in recs[s][0].expr.atoms(SampleTensor)
                 for s2, cls in RESIDUAL_NTK_TENSORS.items() if type(t) is cls}
        more = reads - need
        if not more:
            break
        need |= more
    stats = tuple(s for s in RESIDUAL_NTK_STATISTICS if s in need)
    kern = _kernel_sector(net, Xa, need_all=stats != ("Theta",), method=method, rtol=rtol)
    out = {s: np.zeros((L,) + (N,) * len(recs[s][0].labels)) for s in stats}
    xi1 = float(net.xi_at(1))
    out["Theta"][0] = xi1 ** 2 * (lb[0] + lw[0] * (Xa @ Xa.T) / n0)
    widths = net.hidden_widths
    full = (n0, *widths) if widths is not None else None
    for layer in range(1, L):           # the step from book layer `layer` to `layer + 1`
        arrays = dict(K=kern["K"][layer - 1], V=kern["V"][layer - 1], G1=kern["G1"][layer - 1],
                      T3=kern["T"][layer - 1] if "T" in kern else np.zeros((N,) * 3))
        arrays.update({s: (out[s][layer - 1] if s in out else np.zeros((N,) * _RANK[s]))
                       for s in RESIDUAL_NTK_STATISTICS})
        ratio = 1.0 if full is None else full[layer] / full[layer - 1]
        vals = dict(C_W=float(net.c_w_at(layer + 1)), C_b=float(net.c_b_at(layer + 1)), ratio=ratio,
                    xi=float(net.xi_at(layer + 1)), gamma=float(net.gamma_at(layer + 1)),
                    lambda_b=float(lb[layer]), lambda_W=float(lw[layer]))
        for s in stats:
            rec, comps, step = recs[s]
            res = np.asarray(step(**arrays, **vals)["out"]).reshape(-1)
            canon = {rec.tensor(*idx).args: v for idx, v in zip(comps, res)}
            arr = out[s][layer]
            for idx in np.ndindex(arr.shape):
                arr[idx] = canon[rec.tensor(*idx).args]
            if not np.all(np.isfinite(arr)):
                raise _DE(f"{s} overflows or is undefined at layer {layer + 1}")
    K = np.stack(kern["K"])
    kflow = Flow(K, np.stack(kern["V"]), np.stack(kern["G1"]), np.arange(1, L + 1), act,
                 np.array([net.c_w_at(k) for k in range(1, L + 1)], dtype=float),
                 np.array([net.c_b_at(k) for k in range(1, L + 1)], dtype=float),
                 np.array([1.0] + [(full[k] / full[k - 1]) if full else 1.0 for k in range(1, L)]),
                 tuple(widths) if widths is not None else None, np.zeros(L))
    tensors = dict(out)
    tensors["T3"] = np.stack(kern["T"]) if "T" in kern else np.zeros((L,) + (N,) * 3)
    return NTKFlow(kflow, tensors, lb, lw, np.arange(1, L + 1), np.zeros(L))

