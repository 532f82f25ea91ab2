"""Truncation error of the deep tanh gamma0-series against the Monte-Carlo DMFT.

Deep tanh network, ``L = 2`` hidden layers, one training sample (``K^x = 1.2``, ``y = 1``),
discrete GD with ``eta = 0.3`` on ``T = 6`` grid points, NTK closure.  For each gamma0 the table
gives the truncation error of the series cut at order ``2k`` (``k = 0, 1, 2``),

    err_k(gamma0) = | X_MC(gamma0) - sum_{j <= k} gamma0^(2j) X_{2j} |,

for the final-time ``Phi^1(t_5, t_5)``, ``G^1(t_5, t_5)``, NTK ``K(t_5)`` and prediction ``f(t_5)``,
and its ratio ``r_k = err_k / (gamma0^(2k+2) |X_{2k+2}|)`` to the leading omitted term (-> 1 as
gamma0 -> 0).  ``X_{2j}``: :func:`effth.dmft.gamma0_series` (``order=4``, ``nodes=240``;
tanh quadrature converges slowly in the higher derivatives: at ``nodes=80`` the ``gamma0^4``
coefficients are off by ~1 %, the ``gamma0^6`` ones by ~20 % -- figures for the Gauss-Hermite
rule first used; the deep series now use the trapezoid rule in ``u``, converged at ~120 nodes).  ``X_MC``: seed mean of
:func:`effth.dmft.solvers.monte_carlo.solve_monte_carlo` (``samples=3000``, 25 sweeps, the last 15
averaged).  The log-log slopes of ``err_k`` should be ``2k + 2``.

Monte-Carlo noise: at fixed seed the solver uses common random numbers (CRN) across gamma0.  The
gamma0-independent part of its error (the lazy kernels estimated from ``samples`` draws) is by far
the largest, so ``X_MC`` is taken CRN-subtracted: ``X_s(gamma0) - X_s(gamma_ref) + S(gamma_ref)``
per seed ``s``, with ``gamma_ref = 1e-3`` and ``S`` the series (there equal to the lazy value to
1e-6 relative).  The solver's own ``gamma0 = 0`` branch is the exact static-NTK solution, without
Monte Carlo, so it cannot serve as the CRN reference.  ``se`` is the seed-to-seed standard error of
the CRN-subtracted mean (it grows like gamma0^2: the seed-to-seed spread of the gamma0^2
coefficient), ``se_raw`` that of the plain mean (for comparison).  Slopes are least-squares fits
of ``log err_k`` against ``log gamma0`` over the gamma0 with ``err_k > 3 se`` and
``gamma0 <= --fit-max``, weighted by ``err_k / se``: plain, and with a ``gamma0^2`` term for the
next order of the series (``log(1 + c gamma0^2)``), which otherwise biases them low.

Run with ``OPENBLAS_NUM_THREADS=1 python benchmarks/gamma0_deep_truncation.py [--seeds 48]
[--workers 2] [--x6]``.  ``--x6`` also computes the order-6 series (``nodes=200``, ~3 minutes) for
``r_2``.  48 seeds: ~6 minutes of Monte Carlo on one core.
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # the working tree's effth

from effth.dmft import gamma0_series
from effth.dmft.solvers.monte_carlo import solve_monte_carlo

KX, Y = np.array([[1.2]]), np.array([1.0])
L, T, ETA = 2, 6, 0.3
SAMPLES, ITERATIONS, AVERAGE = 3000, 25, 15
GAMMAS = (0.03, 0.05, 0.07, 0.1, 0.12, 0.14, 0.17, 0.2, 0.23, 0.26, 0.3, 0.35)
GAMMA_REF = 1e-3
NAMES = ("Phi^1", "G^1", "NTK", "f")


def final(phi, g, ntk, f):
    """Final-time ``Phi^1``, ``G^1``, NTK and ``f`` (one sample)."""
    return np.array([phi[0, -1, 0, -1, 0], g[0, -1, 0, -1, 0], ntk[-1, 0, 0], f[-1, 0]])


def series(order, nodes):
    """``(order/2 + 1, 4)``: the coefficients of gamma0^0, gamma0^2, ..."""
    ser = gamma0_series(kernel=KX, y=Y, hidden_layers=L, eta=ETA, steps=T, order=order,
                        activation="tanh", closure="ntk", nodes=nodes)
    return np.array([final(*(ser.coefficient(2 * k, name) for name in ("phi", "g", "ntk", "f")))
                     for k in range(order // 2 + 1)])


def mc_seed(seed):
    """``(1 + len(GAMMAS), 4)``: the reference gamma0 first; common random numbers."""
    out = []
    for g in (GAMMA_REF,) + GAMMAS:
        r = solve_monte_carlo(kernel=KX, y=Y, hidden_layers=L, gamma0=g, eta=ETA, steps=T,
                              activation="tanh", samples=SAMPLES, iterations=ITERATIONS,
                              average=AVERAGE, closure="ntk", seed=seed)
        out.append(final(r.phi, r.g, r.ntk_diag, r.f))
    return np.array(out)


def slope(gam, err, se, fit_max):
    """Weighted log-log slope, plain and with a ``gamma0^2`` term, and the range used."""
    ok = (err > 3 * se) & (gam <= fit_max + 1e-12)
    if ok.sum() < 4:
        return np.nan, np.nan, None
    lg, le, w = np.log(gam[ok]), np.log(err[ok]), err[ok] / se[ok]
    plain = np.polyfit(lg, le, 1, w=w)[0]
    A = np.stack([np.ones_like(lg), lg, gam[ok] ** 2], axis=1)
    corr = np.linalg.lstsq(A * w[:, None], le * w, rcond=None)[0][1]
    return plain, corr, (gam[ok].min(), gam[ok].max(), int(ok.sum()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=48)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--fit-max", type=float, default=0.35,
                    help="largest gamma0 in the slope fits (the series radius is ~0.45)")
    ap.add_argument("--x6", action="store_true", help="also the order-6 series (~3 min)")
    ap.add_argument("--save", help="write the raw Monte-Carlo values to this .npz")
    ap.add_argument("--load", help="reuse raw Monte-Carlo values from this .npz")
    args = ap.parse_args()

    t0 = time.perf_counter()
    co = series(4, 240)
    t_series = time.perf_counter() - t0
    x6 = np.full(4, np.nan)
    if args.x6:
        t1 = time.perf_counter()
        x6 = series(6, 200)[3]
        t_series6 = time.perf_counter() - t1
    t1 = time.perf_counter()
    if args.load:
        mc = np.load(args.load)["mc"]
    else:
        with ProcessPoolExecutor(max_workers=args.workers) as ex:
            mc = np.array(list(ex.map(mc_seed, range(args.seeds))))   # (seeds, 1 + G, 4)
    if args.save:
        np.savez(args.save, mc=mc, gammas=(GAMMA_REF,) + GAMMAS)
    t_mc = time.perf_counter() - t1

    n = mc.shape[0]
    gam = np.array(GAMMAS)
    x = gam[:, None] ** 2
    partial = np.array([co[0] + 0 * x, co[0] + x * co[1], co[0] + x * co[1] + x ** 2 * co[2]])
    lead = np.array([x * np.abs(co[1]), x ** 2 * np.abs(co[2]), x ** 3 * np.abs(x6)])
    ref = co[0] + GAMMA_REF ** 2 * co[1] + GAMMA_REF ** 4 * co[2]
    crn = mc[:, 1:] - mc[:, :1] + ref                                      # (seeds, G, 4)
    mean, se = crn.mean(0), crn.std(0, ddof=1) / np.sqrt(n)
    se_raw = mc[:, 1:].std(0, ddof=1) / np.sqrt(n)
    err = np.abs(mean[None] - partial)                                     # (3, G, 4)
    ratio = err / lead

    print(f"deep tanh L={L}, one sample, eta={ETA}, T={T}, NTK closure; MC: {n} seeds x "
          f"{SAMPLES} samples, {ITERATIONS} sweeps (last {AVERAGE} averaged), CRN-subtracted at "
          f"gamma_ref={GAMMA_REF}")
    print("series coefficients X_0, X_2, X_4 (nodes=240)"
          + (", X_6 (nodes=200)" if args.x6 else "") + ":")
    for q, name in enumerate(NAMES):
        extra = f" {x6[q]:+9.4f}" if args.x6 else ""
        print(f"  {name:6s} {co[0, q]:+.6f} {co[1, q]:+.5f} {co[2, q]:+.4f}{extra}")
    for q, name in enumerate(NAMES):
        print(f"\n{name}(t_5)")
        print(f"{'gamma0':>7s} {'err_0':>9s} {'err_1':>9s} {'err_2':>9s} {'se':>8s} {'se_raw':>8s}"
              f" {'r_0':>6s} {'r_1':>6s} {'r_2':>6s}")
        for i, g in enumerate(gam):
            print(f"{g:7.3f} {err[0, i, q]:9.2e} {err[1, i, q]:9.2e} {err[2, i, q]:9.2e} "
                  f"{se[i, q]:8.1e} {se_raw[i, q]:8.1e} {ratio[0, i, q]:6.3f} "
                  f"{ratio[1, i, q]:6.2f} {ratio[2, i, q]:6.2f}")
        for k in range(3):
            p, pc, rng = slope(gam, err[k, :, q], se[:, q], args.fit_max)
            where = (f"over gamma0 in [{rng[0]:.2f}, {rng[1]:.2f}] ({rng[2]} points)" if rng
                     else "(below the noise floor)")
            print(f"  slope k={k}: {p:5.2f}; with gamma0^2 term {pc:5.2f}  (expected {2 * k + 2}) "
                  f"{where}")
    msg = f"\nruntime: series {t_series:.1f} s"
    if args.x6:
        msg += f" + order 6 {t_series6:.1f} s"
    print(msg + f", Monte Carlo {t_mc:.1f} s ({n * (1 + len(GAMMAS))} solves, "
          f"{args.workers} worker(s){', loaded' if args.load else ''})")


if __name__ == "__main__":
    main()
