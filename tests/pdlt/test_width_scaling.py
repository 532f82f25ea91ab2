r"""Width scaling of theory vs simulation: :math:`G-(K+G^{\{1\}}/n)=O(1/n^2)`, :math:`V_{\rm sim}-V=O(1/n)`.

For an MLP of depth :math:`L` on two inputs the exact mean metric of the last layer is
:math:`G^{(L)}=K^{(L)}+G^{\{1\}(L)}/n+O(1/n^2)` and the exact vertex
:math:`n\,\mathrm{Cov}(\widehat G^{(L)})=V^{(L)}+O(1/n)` (PDLT (4.76), (4.104)).  The theory is
:func:`effth.pdlt.mlp_flow`, the ground truth :func:`effth.simulation.simulate_ensemble`
(``method="conditional"``, raw samples kept).  We fit :math:`\Delta(n)=A\,n^{-p}` by weighted
least squares over :math:`n\in\{16,32,64,128\}` and require :math:`|p-p_{\rm pred}|\le0.3`.

Estimator of :math:`G^{(L)}` (see ``docs/width_scaling.md``): the Rao–Blackwellized
:math:`\widehat G^{(L)}` with *martingale control variates*.  Given the layer-:math:`\ell` metric
:math:`\widehat G^{(\ell)}`, the preactivations :math:`z^{(\ell)}_i` are i.i.d.
:math:`\mathcal N(0,\widehat G^{(\ell)})`, so the fresh noise of every layer

.. math:: \varepsilon^{(\ell)}_{\alpha\beta}=\frac1n\sum_i\sigma(z^{(\ell)}_{i;\alpha})\sigma(z^{(\ell)}_{i;\beta})
          -\langle\sigma_\alpha\sigma_\beta\rangle_{\widehat G^{(\ell)}}

has conditional mean exactly zero, as has its product with anything known at layer
:math:`\ell` (earlier :math:`\varepsilon`, :math:`\widehat G^{(\ell)}`).  These carry the whole
:math:`O(n^{-1/2})` fluctuation of :math:`\widehat G^{(L)}`; regressing it out leaves an
:math:`O(1/n)` residual, so the standard error of the :math:`O(1/n^2)` signal falls like
:math:`1/(n\sqrt M)` instead of :math:`1/\sqrt{nM}`.  The Gaussian expectation is exact for
ReLU (arc-cosine kernel) and a *randomly shifted* trapezoid lattice otherwise, which is unbiased
for every shift distribution uniform over a cell (so no quadrature bias can leak into the mean).
Nothing here uses theory code in the estimator.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import pytest
from scipy.special import ndtr

from effth.arch import MLP
from effth.simulation import simulate_ensemble

DEPTH = 4
#: activation -> (C_W, C_b) of layers 2..L (critical), input scale (K^(1) = scale^2 [[1,.6],[.6,1]])
CONFIGS = {
    "relu": (2.0, 0.0, 1.0),
    "tanh": (1.0, 0.0, 2.0),
    # half-stable critical point of GELU (find_criticality("gelu"): K* = 3.56)
    "gelu": (1.9830582574375484, 0.17292239075606464, 1.0),
}
WIDTHS = (16, 32, 64, 128)
PAIRS = ((0, 0), (0, 1), (1, 1))           # packed components of a 2x2 metric
OFF = 1                                    # packed slot of (0, 1)
N_GROUPS = 16                              # jackknife groups


def inputs(scale: float) -> np.ndarray:
    """Two inputs with :math:`K^{(1)}=\\mathrm{scale}^2[[1,.6],[.6,1]]` for :math:`C_W^{(1)}=1`."""
    return np.array([[1.0, 0.0], [0.6, 0.8]]) * math.sqrt(2.0) * scale


def network(act: str, n: int, depth: int = DEPTH) -> MLP:
    cw, cb, _ = CONFIGS[act]
    return MLP(act, depth=depth, widths=n, c_w=[1.0] + [cw] * (depth - 1),
               c_b=[0.0] + [cb] * (depth - 1))


def pack(G: np.ndarray) -> np.ndarray:
    return np.stack([G[..., a, b] for a, b in PAIRS], axis=-1)


# ---------------------------------------------------------------- Gaussian expectations
def _lattice(h: float, T: float, m: int, rng: np.random.Generator):
    """Randomly shifted trapezoid nodes/weights for N(0,1): unbiased for any integrand."""
    k = np.arange(-int(T / h) - 1, int(T / h) + 2)
    x = (k[None, :] + rng.random((m, 1))) * h
    return x, h * np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)


def _gelu(t):
    return t * ndtr(t)


def mean_ss(act: str, G: np.ndarray, rng: np.random.Generator, fine: bool = False) -> np.ndarray:
    r"""Unbiased :math:`\langle\sigma(z_a)\sigma(z_b)\rangle_G` for a batch ``(m, 2, 2)`` -> ``(m, 3)``.

    ReLU: closed form.  GELU: the inner Gaussian integral in closed form
    (:math:`\mathbb E_y[\sigma(c+dy)]=c\,\Phi(c/s)+d^2\varphi(c/s)/s`, :math:`s^2=1+d^2`), outer by a
    randomly shifted lattice.  tanh: 2-D randomly shifted lattice with the addition formula.
    ``fine``: a much finer lattice (error ~1e-15 instead of a random ~1e-5), used for the
    deterministic first layer, whose one evaluation is shared by all networks of a chunk.
    """
    g11, g12, g22 = G[:, 0, 0], G[:, 0, 1], G[:, 1, 1]
    m = len(g11)
    if act == "relu":
        s = np.sqrt(g11 * g22)
        rho = np.clip(np.divide(g12, s, out=np.ones_like(s), where=s > 0), -1.0, 1.0)
        th = np.arccos(rho)
        off = s / (2 * np.pi) * (np.sin(th) + (np.pi - th) * rho)
        return np.stack([g11 / 2, off, g22 / 2], axis=1)
    f = np.tanh if act == "tanh" else _gelu
    a = np.sqrt(g11)[:, None]
    c = (g12 / np.sqrt(g11))[:, None]
    d = np.sqrt(np.clip(g22 - g12 ** 2 / g11, 0.0, None))[:, None]
    x, w = _lattice(0.25, 8.5, m, rng)
    m11 = (f(a * x) ** 2 * w).sum(1)
    x, w = _lattice(0.25, 8.5, m, rng)
    m22 = (f(np.sqrt(g22)[:, None] * x) ** 2 * w).sum(1)
    if act == "gelu":
        x, w = _lattice(0.25, 8.5, m, rng)
        s = np.sqrt(1.0 + d * d)
        u = c * x / s
        inner = c * x * ndtr(u) + d * d * np.exp(-0.5 * u * u) / (math.sqrt(2 * math.pi) * s)
        m12 = (f(a * x) * inner * w).sum(1)
    elif act == "tanh":
        h2 = 0.1 if fine else 0.7
        x, w = _lattice(h2, 7.7, m, rng)
        y, v = _lattice(h2, 7.7, m, rng)
        tc = np.tanh(c * x)[:, :, None]
        td = np.tanh(d * y)[:, None, :]
        inner = ((tc + td) / (1.0 + tc * td) * v[:, None, :]).sum(2)
        m12 = (np.tanh(a * x) * inner * w).sum(1)
    else:  # pragma: no cover
        raise ValueError(act)
    return np.stack([m11, m12, m22], axis=1)


def _sigma(act: str):
    return {"relu": lambda t: np.maximum(t, 0.0), "tanh": np.tanh, "gelu": _gelu}[act]


# ---------------------------------------------------------------- simulation + control variates
def features(act: str, net: MLP, st, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Target ``Y`` (packed :math:`\\widehat G^{(L)}`, ``(m, 3)``) and zero-mean control variates ``F``."""
    L = net.depth
    f = _sigma(act)
    eps, cols = [], []
    for l in range(1, L):
        z = st.samples[l]
        s = f(z)
        emp = np.stack([(s[:, a] * s[:, b]).mean(1) for a, b in PAIRS], axis=1)
        Gl = st.G_hat_samples[l]
        if l == 1:                                   # deterministic first-layer metric
            mu = mean_ss(act, Gl[:1], rng, fine=True)
        else:
            mu = np.concatenate([mean_ss(act, Gl[i:i + 2048], rng) for i in range(0, len(Gl), 2048)])
        e = emp - mu
        cols.append(e)
        if l >= 2:                                   # eps^(l) x G_hat^(l)
            cols.append((e[:, :, None] * pack(Gl)[:, None, :]).reshape(len(e), -1))
        for ek in eps:                               # eps^(l) x eps^(k), k < l
            cols.append((e[:, :, None] * ek[:, None, :]).reshape(len(e), -1))
        eps.append(e)
    return pack(st.G_hat_samples[L]), np.concatenate(cols, axis=1)


@dataclass
class Sums:
    """Sufficient statistics of one jackknife group."""
    M: int = 0
    sY: np.ndarray | float = 0.0
    sYY: np.ndarray | float = 0.0
    sF: np.ndarray | float = 0.0
    sFF: np.ndarray | float = 0.0
    sFY: np.ndarray | float = 0.0

    def add(self, Y, F):
        self.M += len(Y)
        self.sY = self.sY + Y.sum(0)
        self.sYY = self.sYY + Y.T @ Y
        self.sF = self.sF + F.sum(0)
        self.sFF = self.sFF + F.T @ F
        self.sFY = self.sFY + F.T @ Y

    def __add__(self, o):
        return Sums(self.M + o.M, self.sY + o.sY, self.sYY + o.sYY, self.sF + o.sF,
                    self.sFF + o.sFF, self.sFY + o.sFY)

    def __sub__(self, o):
        return Sums(self.M - o.M, self.sY - o.sY, self.sYY - o.sYY, self.sF - o.sF,
                    self.sFF - o.sFF, self.sFY - o.sFY)


def _estimate(s: Sums, n: int, cv: bool = True) -> dict:
    M = s.M
    mY, mF = s.sY / M, s.sF / M
    cYY = s.sYY / M - np.outer(mY, mY)
    G = mY
    if cv:
        cFF = s.sFF / M - np.outer(mF, mF)
        cFY = s.sFY / M - np.outer(mF, mY)
        scale = np.sqrt(np.diag(cFF))
        scale = np.where(scale > 0, scale, 1.0)
        beta = np.linalg.lstsq(cFF / np.outer(scale, scale), cFY / scale[:, None], rcond=None)[0] / scale[:, None]
        G = mY - mF @ beta                       # E[F] = 0 exactly
    return {"G": G, "V": n * cYY * M / (M - 1)}


def _jackknife(groups: list[Sums], n: int, cv: bool = True) -> tuple[dict, dict]:
    total = groups[0]
    for g in groups[1:]:
        total = total + g
    est = _estimate(total, n, cv)
    reps = [_estimate(total - g, n, cv) for g in groups]
    K = len(groups)
    err = {k: np.sqrt((K - 1) / K * sum((r[k] - np.mean([q[k] for q in reps], 0)) ** 2 for r in reps))
           for k in est}
    return est, err


def measure(act: str, n: int, size: int, seed: int, depth: int = DEPTH) -> dict:
    """Simulate ``size`` networks of width ``n``; estimates of G (CV and plain RB) and V with se."""
    net = network(act, n, depth)
    X = inputs(CONFIGS[act][2])
    chunk = max(1000, min(-(-size // N_GROUPS), 2_000_000 // n))
    groups = [Sums() for _ in range(N_GROUPS)]
    done, c = 0, 0
    while done < size:
        m = min(chunk, size - done)
        st = simulate_ensemble(net, X, networks=m, seed=np.random.SeedSequence([seed, n, c]),
                               method="conditional", keep_samples=True)
        Y, F = features(act, net, st, np.random.default_rng([seed, n, c, 1]))
        groups[c % N_GROUPS].add(Y, F)
        done += m
        c += 1
        del st
    est, err = _jackknife(groups, n, cv=True)
    raw, raw_err = _jackknife(groups, n, cv=False)
    return {"n": n, "size": size, "G": est["G"], "G_err": err["G"], "G_raw": raw["G"],
            "G_raw_err": raw_err["G"], "V": est["V"], "V_err": err["V"]}


def theory(act: str, depth: int = DEPTH) -> dict:
    """K, G^{1}, V of the last layer (packed; V as a 3x3 matrix over packed pairs)."""
    from effth.pdlt import mlp_flow

    fl = mlp_flow(network(act, 16, depth), inputs(CONFIGS[act][2]), rtol=1e-9)
    V = fl["V"][depth - 1]
    return {"K": pack(fl["K"][depth - 1]), "G1": pack(fl["G1"][depth - 1]),
            "V": np.array([[V[a, b, c, d] for c, d in PAIRS] for a, b in PAIRS])}


# ---------------------------------------------------------------- weighted power-law fit
@dataclass
class PowerFit:
    p: float
    p_err: float
    A: float
    A_err: float
    chi2: float
    dof: int
    pvalue: float = field(default=float("nan"))

    def rejects(self, p_pred: float, tol: float = 0.3) -> bool:
        """The bar fails: slope off by more than ``tol`` or the power law itself rejected."""
        return abs(self.p - p_pred) > tol or self.pvalue < 1e-3


def fit_power(n, y, se, p0: float = 2.0) -> PowerFit:
    r"""Weighted least squares :math:`y=A\,n^{-p}` (no logarithms of noisy data).

    Gauss–Newton on :math:`\chi^2=\sum((y-An^{-p})/se)^2`; the slope's error from the covariance
    :math:`(J^\top W J)^{-1}` with absolute standard errors.  ``p`` is profiled on a grid first
    (``A`` is linear given ``p``) so the start is never in a wrong basin.
    """
    from scipy.stats import chi2 as chi2_dist

    n, y, se = (np.asarray(v, float) for v in (n, y, se))
    w = 1.0 / se ** 2
    x = n / np.exp(np.mean(np.log(n)))               # centred scale: A is the value at the mean n

    def best_A(p):
        b = x ** -p
        A = np.sum(w * y * b) / np.sum(w * b * b)
        return A, np.sum(w * (y - A * b) ** 2)

    grid = np.linspace(-3.0, 6.0, 901)
    p = grid[int(np.argmin([best_A(q)[1] for q in grid]))]
    A = best_A(p)[0]
    for _ in range(50):
        b = x ** -p
        J = np.stack([b, -A * np.log(x) * b], axis=1)
        r = y - A * b
        H = J.T @ (w[:, None] * J)
        step = np.linalg.solve(H, J.T @ (w * r))
        A, p = A + step[0], p + step[1]
        if np.all(np.abs(step) < 1e-12 * (1 + np.abs([A, p]))):
            break
    b = x ** -p
    J = np.stack([b, -A * np.log(x) * b], axis=1)
    cov = np.linalg.inv(J.T @ (w[:, None] * J))
    chi2 = float(np.sum(w * (y - A * b) ** 2))
    dof = len(n) - 2
    pv = float(chi2_dist.sf(chi2, dof)) if dof > 0 else float("nan")
    A_n = A * np.exp(np.mean(np.log(n))) ** p       # amplitude in y = A_n n^-p
    return PowerFit(float(p), float(math.sqrt(cov[1, 1])), float(A_n),
                    float(math.sqrt(cov[0, 0]) * np.exp(np.mean(np.log(n))) ** p), chi2, dof, pv)


# ---------------------------------------------------------------- the study
def study(act: str, sizes: dict, seed: int = 2026, widths=WIDTHS, depth: int = DEPTH,
          g1_scale: float = 0.9, verbose: bool = False) -> dict:
    """Δ_G (off-diagonal, CV estimator), Δ_V (V_(01)(01)) vs n, and the three power-law fits."""
    t0 = time.perf_counter()
    th = theory(act, depth)
    t_th = time.perf_counter() - t0
    rows = []
    for n in widths:
        t = time.perf_counter()
        r = measure(act, n, sizes[n], seed, depth)
        r["dG"] = r["G"] - (th["K"] + th["G1"] / n)
        r["dG_wrong"] = r["G"] - (th["K"] + g1_scale * th["G1"] / n)
        r["dV"] = r["V"] - th["V"]
        r["time"] = time.perf_counter() - t
        rows.append(r)
        if verbose:
            print(f"  {act} n={n:4d} M={sizes[n]:>9,d} dG={r['dG'][OFF]:+.3e}±{r['G_err'][OFF]:.1e} "
                  f"dV={r['dV'][OFF, OFF]:+.3e}±{r['V_err'][OFF, OFF]:.1e}  {r['time']:.1f}s", flush=True)
    ns = [r["n"] for r in rows]
    fit_G = fit_power(ns, [r["dG"][OFF] for r in rows], [r["G_err"][OFF] for r in rows])
    fit_wrong = fit_power(ns, [r["dG_wrong"][OFF] for r in rows], [r["G_err"][OFF] for r in rows])
    fit_V = fit_power(ns, [r["dV"][OFF, OFF] for r in rows], [r["V_err"][OFF, OFF] for r in rows], p0=1.0)
    return {"act": act, "theory": th, "rows": rows, "fit_G": fit_G, "fit_G_wrong": fit_wrong,
            "fit_V": fit_V, "time": time.perf_counter() - t0, "time_theory": t_th}


# ---------------------------------------------------------------- tests
def test_fit_power_recovers_exponent():
    n = np.array(WIDTHS, float)
    y = 0.3 * n ** -2.0
    f = fit_power(n, y, 0.02 * y)
    assert abs(f.p - 2.0) < 1e-8 and abs(f.A - 0.3) < 1e-8 and f.chi2 < 1e-12
    g = fit_power(n, -0.5 / n + 1e-4 * np.array([1, -1, 1, -1]), 1e-4 * np.ones(4))
    assert abs(g.p - 1.0) < 0.05


def test_mean_ss_is_unbiased():
    rng = np.random.default_rng(5)
    G = np.array([[[1.0, 0.6], [0.6, 1.0]], [[3.0, 1.4], [1.4, 2.0]]])
    # reference: fine deterministic trapezoid (converges geometrically for tanh, GELU);
    # ReLU (closed form) against plain Monte Carlo
    h = 0.02
    xg = np.arange(-10.0, 10.0 + h / 2, h)
    wg = h * np.exp(-0.5 * xg * xg) / math.sqrt(2 * math.pi)
    X1, X2 = np.meshgrid(xg, xg, indexing="ij")
    W = np.outer(wg, wg)
    for act in ("tanh", "gelu", "relu"):
        f = _sigma(act)
        for Gk in G:
            A = np.linalg.cholesky(Gk)
            if act == "relu":
                z = rng.standard_normal((400_000, 2)) @ A.T
                s = f(z)
                samp = np.stack([s[:, 0] ** 2, s[:, 0] * s[:, 1], s[:, 1] ** 2], 1)
                ref, ref_se = samp.mean(0), samp.std(0) / math.sqrt(len(samp))
            else:
                z1, z2 = A[0, 0] * X1, A[1, 0] * X1 + A[1, 1] * X2
                ref = np.array([(f(z1) ** 2 * W).sum(), (f(z1) * f(z2) * W).sum(), (f(z2) ** 2 * W).sum()])
                ref_se = 0.0
            est = mean_ss(act, np.broadcast_to(Gk, (4000, 2, 2)).copy(), rng)
            se = np.hypot(est.std(0) / math.sqrt(len(est)), ref_se)
            assert np.all(np.abs(est.mean(0) - ref) <= 5 * se + 1e-12), (act, est.mean(0) - ref, se)


#: default (fast) study: ReLU, three widths; ~30 s on 2 cores (p_G = 1.95 ± 0.14, p_V = 1.08 ± 0.05)
FAST_SIZES = {16: 200_000, 32: 250_000, 64: 400_000}
#: full study (slow test; the benchmark uses the same sizes)
FULL_SIZES = {
    "relu": {16: 1_000_000, 32: 1_000_000, 64: 1_000_000, 128: 1_000_000},
    "gelu": {16: 300_000, 32: 300_000, 64: 300_000, 128: 300_000},
    "tanh": {16: 1_500_000, 32: 1_500_000, 64: 2_000_000, 128: 2_000_000},
}


def _check_bar(res: dict, max_err: float = 0.2) -> None:
    fG, fW, fV = res["fit_G"], res["fit_G_wrong"], res["fit_V"]
    msg = f"{res['act']}: p_G={fG.p:.3f}±{fG.p_err:.3f}, p_V={fV.p:.3f}±{fV.p_err:.3f}, wrong G1: {fW.p:.3f}±{fW.p_err:.3f}"
    # the bar: slopes within ±0.3 of the prediction, and resolved well enough to be able to fail
    assert abs(fG.p - 2.0) <= 0.3 and fG.p_err <= max_err, msg
    assert abs(fV.p - 1.0) <= 0.3 and fV.p_err <= max_err, msg
    assert fG.pvalue > 1e-3 and fV.pvalue > 1e-3, msg
    # power: a wrong NLO metric (0.9 G1) leaves a 1/n term and must be rejected
    assert fW.rejects(2.0), msg


@pytest.mark.mc
def test_width_scaling_relu_fast():
    res = study("relu", FAST_SIZES, seed=11, widths=(16, 32, 64))
    _check_bar(res)


@pytest.mark.slow
@pytest.mark.mc
@pytest.mark.parametrize("act", ["relu", "tanh", "gelu"])
def test_width_scaling_full(act, opt_in_slow):
    """The full study (6 minutes; also benchmarks/bench_width_scaling.py)."""
    res = study(act, FULL_SIZES[act], seed=2026)
    _check_bar(res)
