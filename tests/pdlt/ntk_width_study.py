r"""Width study of the NTK hierarchy: ensemble simulation vs a leading-order theory (PDLT ch. 8–11).

For an MLP of depth :math:`L` with equal hidden widths :math:`n` the simulator
(:func:`effth.simulation.simulate_ntk_ensemble`) estimates :math:`n\times` (cumulant) for each of
:math:`A,B,D,F,P,Q,R,S,T,U` at the output layer; each equals its leading-order tensor
:math:`+\,O(1/n)`.  The NTK mean is :math:`E[\hat H]=\Theta+H^{\{1\}}/n+O(1/n^2)`.

:func:`width_study` runs, for every width, ``replicates`` independent ensembles (seeds spawned
from ``seed``), and for every statistic forms the **discrepancy**

.. math:: \Delta_X(n)=\operatorname{mean}_{\rm entries}\big(X_{\rm sim}(n)-X_{\rm theory}\big)

(for ``"H"`` the theory is :math:`\Theta+H^{\{1\}}/n` when ``theory["H1"]`` is given, else
:math:`\Theta`).  Its standard error is the delete-one-replicate jackknife (= the spread of the
replicate discrepancies / :math:`\sqrt R`), so correlations between entries are accounted for.
Entry-wise z-scores use the simulator's own jackknife errors, pooled over replicates.

Rates: :math:`\Delta_X(n)=c\,n^{-p}` is fitted by weighted nonlinear least squares
(:func:`scipy.optimize.curve_fit`, absolute sigma) giving :math:`p\pm\mathrm{se}`; the predicted
:math:`p` is 1 for every :math:`X\ne H` and for :math:`H` without ``H1`` (and 2 for :math:`H`
with ``H1``).  Also reported: the local exponent between the two largest widths, the weighted
linear fits :math:`\Delta=c_1/n` and :math:`\Delta=c/n+d/n^2` with their :math:`\chi^2`, and the
extrapolated :math:`\Delta(\infty)` (intercept of :math:`a+b/n(+c/n^2)`).

The theory is any dict of layer-:math:`L` tensors in the book's slot order, e.g. the last layer
of :func:`tests.pdlt._ntk_book.book_flow` or the lead's derived flow.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy.optimize import OptimizeWarning, curve_fit

from effth.arch import MLP
from effth.simulation import simulate_ntk_ensemble

ALL_STATS = ("H", "A", "B", "D", "F", "P", "Q", "R", "S", "T", "U")
ORDER_OF = {"H": 1, "A": 1, "B": 1, "D": 1, "F": 1, "P": 2, "Q": 2, "R": 3, "S": 3, "T": 3, "U": 3}


@dataclass
class StatResult:
    name: str
    widths: tuple[int, ...]
    delta: np.ndarray            # (W,) discrepancy summary per width
    delta_err: np.ndarray        # (W,) its standard error (replicate jackknife)
    z_entries: list[np.ndarray]  # per width: (X_sim - X_th) / err_sim, entry-wise
    measured: list[np.ndarray]
    theory: list[np.ndarray]
    p: float = float("nan")      # fitted exponent of |Delta| ~ n^-p
    p_err: float = float("nan")
    c: float = float("nan")      # amplitude of the power fit
    c1: float = float("nan")     # one-parameter fit Delta = c1 / n
    c1_err: float = float("nan")
    chi2_c1: float = float("nan")  # chi^2 of the c1/n fit (dof = W - 1)
    a: float = float("nan")      # n -> infinity intercept of Delta = a + b/n (+ c/n^2 with >= 4 widths)
    a_err: float = float("nan")
    c2: tuple[float, float] = (float("nan"), float("nan"))        # Delta = c/n + d/n^2: (c, d)
    c2_err: tuple[float, float] = (float("nan"), float("nan"))
    chi2_c2: float = float("nan")  # chi^2 of that fit (dof = W - 2)
    p_hi: float = float("nan")   # local exponent between the two largest widths
    p_hi_err: float = float("nan")
    p_pred: float = 1.0

    @property
    def z(self) -> np.ndarray:
        """Discrepancy in standard errors per width."""
        return self.delta / self.delta_err

    @property
    def resolved(self) -> bool:
        """Signal resolved at the smallest width (|Δ| > 5 SE) so that a rate is measurable."""
        return bool(abs(self.delta[0]) > 5 * self.delta_err[0])


@dataclass
class WidthStudy:
    activation: str
    depth: int
    widths: tuple[int, ...]
    sizes: tuple[int, ...]
    replicates: int
    seconds: dict[int, float]
    stats: dict[str, StatResult] = field(default_factory=dict)
    #: per stat, per width: (replicate estimates (R, ...), replicate jackknife errors (R, ...))
    raw: dict[str, list[tuple[np.ndarray, np.ndarray]]] = field(default_factory=dict, repr=False)

    def table(self) -> str:
        lines = [(f"{self.activation}, depth {self.depth}, widths {self.widths}, sizes {self.sizes}, "
                 f"R={self.replicates}; seconds per width { {k: round(v, 1) for k, v in self.seconds.items()} }"),
                 "stat | " + " | ".join(f"n={n}: Δ (z)" for n in self.widths)
                 + " | p ± se (pred) | p(last two) | c1 ± se, chi2 | c, d of c/n+d/n², chi2 | a (n→∞) ± se"
                 " | max|z_entry| at largest n"]
        for s in self.stats.values():
            cells = " | ".join(f"{d:+.4g} ({d / e:+.1f})" for d, e in zip(s.delta, s.delta_err))
            lines.append(f"{s.name} | {cells} | {s.p:.2f} ± {s.p_err:.2f} ({s.p_pred:g}) | "
                         f"{s.p_hi:.2f} ± {s.p_hi_err:.2f} | {s.c1:+.3g} ± {s.c1_err:.2g}, {s.chi2_c1:.1f} | "
                         f"{s.c2[0]:+.3g} ± {s.c2_err[0]:.2g}, {s.c2[1]:+.3g} ± {s.c2_err[1]:.2g}, {s.chi2_c2:.1f} | "
                         f"{s.a:+.3g} ± {s.a_err:.2g} | "
                         f"{np.nanmax(np.abs(s.z_entries[-1])):.2f}")
        return "\n".join(lines)


def _wls(cols: list[np.ndarray], d: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Weighted linear least squares: (coefficients, standard errors, chi^2)."""
    Xd = np.stack(cols, 1) / e[:, None]
    cov = np.linalg.inv(Xd.T @ Xd)
    beta = cov @ Xd.T @ (d / e)
    chi2 = float(np.sum((Xd @ beta - d / e) ** 2))
    return beta, np.sqrt(np.diag(cov)), chi2


def _intercept(widths: np.ndarray, d: np.ndarray, e: np.ndarray) -> tuple[float, float]:
    """Intercept (a, se) of Δ = a + b/n (+ c/n² with four or more widths)."""
    x = 1.0 / widths
    cols = [np.ones_like(x), x] + ([x * x] if len(x) >= 4 else [])
    beta, se, _ = _wls(cols, d, e)
    return float(beta[0]), float(se[0])


def _fit(widths: np.ndarray, d: np.ndarray, e: np.ndarray) -> tuple[float, float, float, float, float, float]:
    """(p, p_err, c, c1, c1_err, chi2_c1) for Δ = c n^-p and Δ = c1/n."""
    w = 1.0 / e ** 2
    x = 1.0 / widths
    c1 = float(np.sum(w * x * d) / np.sum(w * x * x))
    c1_err = float(1.0 / math.sqrt(np.sum(w * x * x)))
    chi2 = float(np.sum(w * (d - c1 * x) ** 2))
    try:
        with warnings.catch_warnings():   # unresolved signals: no covariance (p_err = inf)
            warnings.simplefilter("ignore", OptimizeWarning)
            popt, pcov = curve_fit(lambda n, c, p: c * (n / widths[0]) ** (-p), widths, d,
                                   p0=(d[0] if d[0] != 0 else c1 * x[0], 1.0), sigma=e,
                                   absolute_sigma=True, maxfev=20000)
        p, p_err, c = float(popt[1]), float(math.sqrt(max(pcov[1, 1], 0.0))), float(popt[0])
    except (RuntimeError, ValueError):  # pragma: no cover - no convergence
        p, p_err, c = float("nan"), float("inf"), float("nan")
    return p, p_err, c, c1, c1_err, chi2


def width_study(activation: str, X: Any, depth: int, widths: Sequence[int], sizes: Sequence[int] | int,
                seed: int, theory: Mapping[str, np.ndarray], *, c_w: Any = 1.0, c_b: Any = 0.0,
                lambda_b: Any = 1.0, lambda_w: Any = 1.0, stats: Sequence[str] = ALL_STATS,
                replicates: int = 16, outputs: int = 3, batch: int | None = None) -> WidthStudy:
    """Simulate ``sizes[k]`` networks of width ``widths[k]`` (split in ``replicates`` ensembles)
    and compare every statistic in ``stats`` with ``theory`` (layer-L tensors; ``"Theta"`` for
    the NTK mean, optional ``"H1"``).  See the module docstring."""
    widths = tuple(int(n) for n in widths)
    sizes = (int(sizes),) * len(widths) if np.ndim(sizes) == 0 else tuple(int(s) for s in sizes)
    order = max(ORDER_OF[s] for s in stats)
    ss = np.random.SeedSequence(seed)
    width_seeds = ss.spawn(len(widths))
    raw: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {s: [] for s in stats}
    seconds: dict[int, float] = {}
    for n, size, wseed in zip(widths, sizes, width_seeds):
        net = MLP(activation, depth=depth, widths=n, c_w=c_w, c_b=c_b, n_out=outputs)
        reps = wseed.spawn(replicates)
        m_r = size // replicates
        t0 = time.perf_counter()
        runs = [simulate_ntk_ensemble(net, X, networks=m_r, seed=np.random.default_rng(r), lambda_b=lambda_b,
                                      lambda_w=lambda_w, outputs=range(outputs), order=order, batch=batch)
                for r in reps]
        seconds[n] = time.perf_counter() - t0
        for s in stats:
            raw[s].append((np.stack([r.stats[s] for r in runs]), np.stack([r.err[s] for r in runs])))
    out = WidthStudy(activation=activation, depth=depth, widths=widths, sizes=sizes,
                     replicates=replicates, seconds=seconds, raw=raw)
    return rescore(out, theory)


def merge_studies(*studies: WidthStudy) -> WidthStudy:
    """Combine studies of the same widths run for different statistics (e.g. the NTK sector
    with ``order=1`` and many outputs, the dNTK/ddNTK sector with ``order=3``)."""
    first = studies[0]
    assert all(s.widths == first.widths for s in studies)
    out = WidthStudy(activation=first.activation, depth=first.depth, widths=first.widths,
                     sizes=first.sizes, replicates=first.replicates,
                     seconds={n: sum(s.seconds[n] for s in studies) for n in first.widths})
    for st in studies:
        out.stats.update(st.stats)
        out.raw.update(st.raw)
    out.sizes = tuple(tuple(s.sizes) for s in studies)  # type: ignore[assignment]
    return out


def rescore(study: WidthStudy, theory: Mapping[str, np.ndarray]) -> WidthStudy:
    """Compare the stored simulations of ``study`` with another ``theory`` (no re-simulation)."""
    widths, R = study.widths, study.replicates
    out = WidthStudy(activation=study.activation, depth=study.depth, widths=widths, sizes=study.sizes,
                     replicates=R, seconds=study.seconds, raw=study.raw)
    wa = np.array(widths, dtype=float)
    for s, per_width in study.raw.items():
        d, de, zs, ms, ts = [], [], [], [], []
        for n, (vals, errs) in zip(widths, per_width):
            if s == "H":
                th = np.asarray(theory["Theta"], float)
                if "H1" in theory:
                    th = th + np.asarray(theory["H1"], float) / n
            else:
                th = np.asarray(theory[s], float)
            meas = vals.mean(0)
            err = np.sqrt((errs ** 2).sum(0)) / R
            drep = (vals - th).reshape(R, -1).mean(1)
            d.append(float(drep.mean()))
            de.append(float(drep.std(ddof=1) / math.sqrt(R)))
            zs.append((meas - th) / err)
            ms.append(meas)
            ts.append(th)
        r = StatResult(s, widths, np.array(d), np.array(de), zs, ms, ts,
                       p_pred=2.0 if (s == "H" and "H1" in theory) else 1.0)
        if len(widths) >= 2:
            r.p, r.p_err, r.c, r.c1, r.c1_err, r.chi2_c1 = _fit(wa, r.delta, r.delta_err)
        if len(widths) >= 3:
            r.a, r.a_err = _intercept(wa, r.delta, r.delta_err)
            beta, se, r.chi2_c2 = _wls([1.0 / wa, 1.0 / wa ** 2], r.delta, r.delta_err)
            r.c2, r.c2_err = (float(beta[0]), float(beta[1])), (float(se[0]), float(se[1]))
        d1, d2 = r.delta[-2], r.delta[-1]
        if d1 * d2 > 0:
            r.p_hi = math.log(d1 / d2) / math.log(wa[-1] / wa[-2])
            r.p_hi_err = math.hypot(r.delta_err[-2] / d1, r.delta_err[-1] / d2) / math.log(wa[-1] / wa[-2])
        out.stats[s] = r
    return out


# ----------------------------------------------------------------------------- standard setup
#: activation -> (C_W, C_b) of layers 2..L (critical; C_W^(1) = 1, C_b^(1) = 0), input scale
CONFIGS = {
    "tanh": (1.0, 0.0, 2.0),
    # half-stable criticality of GELU, spec ch5-8 appendix
    "gelu": (1.983058257, 0.1729223908, 1.0),
}
LAMBDA_B = (1.0, 0.6, 0.8, 0.9, 0.7)
LAMBDA_W = (1.0, 1.2, 0.7, 0.9, 1.1)


def standard_setup(activation: str, depth: int = 3) -> dict[str, Any]:
    """Two inputs with :math:`XX^\\top/n_0=\\mathrm{scale}^2[[1,.6],[.6,1]]`, critical
    :math:`(C_W,C_b)` for layers ≥ 2, distinct per-layer learning rates.  Keyword arguments for
    :func:`width_study` and (``c_w, c_b, lambda_b, lambda_w``) for a theory flow."""
    cw, cb, scale = CONFIGS[activation]
    return {"X": np.array([[1.0, 0.0], [0.6, 0.8]]) * math.sqrt(2.0) * scale,
                "c_w": [1.0] + [cw] * (depth - 1), "c_b": [0.0] + [cb] * (depth - 1),
                "lambda_b": list(LAMBDA_B[:depth]), "lambda_w": list(LAMBDA_W[:depth])}


def book_theory(activation: str, depth: int = 3) -> dict[str, np.ndarray]:
    """Layer-L tensors of the book oracle (:mod:`._ntk_book`) for :func:`standard_setup`."""
    try:
        from ._ntk_book import book_flow
    except ImportError:  # run as a script
        from _ntk_book import book_flow
    cfg = standard_setup(activation, depth)
    fl = book_flow(activation, cfg["X"], depth, cfg["c_w"], cfg["c_b"], cfg["lambda_b"], cfg["lambda_w"])
    return {k: v[-1] for k, v in fl.items()}


#: the two sectors of the standard study: (statistics, outputs); ``order`` follows the statistics
SECTORS = ((("H", "A", "B", "D", "F"), 6), (("P", "Q", "R", "S", "T", "U"), 3))


def standard_study(activation: str, widths: Sequence[int], sizes: Sequence[Sequence[int]], seed: int,
                   theory: Mapping[str, np.ndarray], depth: int = 3, replicates: int = 32) -> WidthStudy:
    """The study of :func:`standard_setup`, sector by sector (NTK statistics with ``order=1`` and
    six outputs, which is ~2.5x cheaper per network and 2–6x more efficient for B, D, F; dNTK and
    ddNTK statistics with ``order=3`` and three outputs); ``sizes[k]`` are the sizes of sector k."""
    cfg = standard_setup(activation, depth)
    parts = [width_study(activation, cfg["X"], depth, widths, sz, seed + k, theory, c_w=cfg["c_w"],
                         c_b=cfg["c_b"], lambda_b=cfg["lambda_b"], lambda_w=cfg["lambda_w"], stats=st,
                         replicates=replicates, outputs=m)
             for k, ((st, m), sz) in enumerate(zip(SECTORS, sizes))]
    return merge_studies(*parts)


def main(argv: Sequence[str] | None = None) -> None:  # pragma: no cover - manual runs
    import argparse
    import pickle

    ap = argparse.ArgumentParser(description="NTK width study vs the book oracle")
    ap.add_argument("activation", choices=sorted(CONFIGS))
    ap.add_argument("--depth", type=int, default=3)
    ap.add_argument("--widths", type=int, nargs="+", default=[32, 64, 128, 256])
    ap.add_argument("--sizes1", type=int, nargs="+", default=list(FULL_SIZES[0]))
    ap.add_argument("--sizes2", type=int, nargs="+", default=list(FULL_SIZES[1]))
    ap.add_argument("--seed", type=int, default=4)
    ap.add_argument("--replicates", type=int, default=32)
    ap.add_argument("--save", default=None, help="pickle the study here")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    res = standard_study(a.activation, a.widths, (a.sizes1, a.sizes2), a.seed,
                         book_theory(a.activation, a.depth), a.depth, a.replicates)
    print(res.table())
    print(f"total {time.perf_counter() - t0:.0f} s")
    if a.save:
        with open(a.save, "wb") as f:
            pickle.dump(res, f)


#: sizes of the two sectors for widths (32, 64, 128, 256) in the full study
FULL_SIZES = ((384000, 384000, 256000, 256000), (96000, 96000, 64000, 64000))


if __name__ == "__main__":  # pragma: no cover
    main()
