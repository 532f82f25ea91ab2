"""Benchmark: cost of the CNN DMFT against T, P and |S| (effth.dmft.solve_cnn_monte_carlo), and
of the closed form of deep linear CNNs (effth.dmft.solve_cnn_deep_linear).

The Monte-Carlo solver is dense over the index (time, image, pixel), of size m = T P |S|.  Per
sweep it factors two (m x m) source covariances (Cholesky, O(m^3/3)).  The first layer's forward
source and the readout's backward source need no m x m factor.  The fields, the sample kernels
and the Stein regressions cost O(S m^2), and the patch operator and its adjoint are per-axis
matrix products, O(m^2 sum_k n_k^2).  The kernels have no pixel-difference (block-circulant)
structure for a fixed data set: circular padding makes the problem equivariant under shifting
*all images*, but the kernels of given images are not functions of i - j.  So m cannot be split
into per-frequency blocks.  Times are CPU seconds of the process (one BLAS thread), which stay
meaningful on a shared machine.

Default: times one sweep of one replica while varying T, P and |S| one at a time around a base
point and fits the exponent of each.  ``--reference``: the family of the reference problem
(P = 10 digits, 8x8 pixels, 3x3 filters, depth 3) at T = 2..8.  It fits
a m^2 + b m^3 (the quadratic passes plus the two Cholesky factors) and a power law, and
extrapolates both to T = 50, m = 32000, which it does not run (8 GB per dense kernel).
``--eigh`` also times sampler='eigh', the symmetric square roots used before.  It then times the
deep linear closed form, pixel-resolved (dense, O(m^3) per sweep) at a small size, and the exact
reduction of a circular pooled linear CNN to the deep linear MLP at the reference size.
Not collected by pytest.

Usage: ``OPENBLAS_NUM_THREADS=1 python benchmarks/bench_cnn_dmft.py [--samples 1000] [--big]
[--reference] [--eigh]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np


def _data(P, side, dims=2):
    import effth as et
    d = et.data.load_digits(P)
    X = d.images[:, :side, :side] if dims == 2 else d.images[:, 3, :side]
    X = X - X.mean(axis=tuple(range(1, X.ndim)), keepdims=True)
    X = X / np.sqrt(np.mean(X ** 2, axis=tuple(range(1, X.ndim)), keepdims=True))
    return X, d.y


def _eta(net, X):
    import effth as et
    return 1.0 / np.linalg.eigvalsh(et.cnn_kernels(net, X).value("Theta"))[-1]


def one(T, P, side, samples, dims=2, act="relu", sampler="cholesky"):
    """CPU seconds of a one-sweep solve of one replica (depth 3, 3x3 filters, circular padding,
    gamma0 = 1; the setup included)."""
    import effth as et
    from effth.dmft import solve_cnn_monte_carlo

    X, y = _data(P, side, dims)
    net = et.CNN(act, depth=3, filter_size=3, dims=dims, padding="circular", c_w=2.0,
                 parameterization="mup", gamma0=1.0)
    eta = _eta(net, X)
    t = time.process_time()
    r = solve_cnn_monte_carlo(net, X, y, eta=eta, steps=T, samples=samples, iterations=1,
                              replicas=1, seed=0, progress=False, sampler=sampler)
    return time.process_time() - t, r


def reference_scan(samples, eigh, Ts=(2, 3, 4, 5, 6, 8)):
    """The reference family (P = 10 digits of 8x8) at growing T, and the extrapolation to T = 50."""
    ms = np.array([T * 640 for T in Ts], float)
    secs = []
    for T, m in zip(Ts, ms):
        secs.append(one(T, 10, 8, samples)[0])
        line = f"T={T:2d} P=10 |S|=8x8: m = {int(m):5d}, one sweep: {secs[-1]:7.2f} s CPU"
        if eigh and T <= 4:
            line += f", sampler='eigh' {one(T, 10, 8, samples, sampler='eigh')[0]:7.2f} s"
        print(line, flush=True)
    secs = np.array(secs)
    m_ref = 50 * 640
    p = np.polyfit(np.log(ms), np.log(secs), 1)
    # a m^2 + b m^3 with a, b >= 0, least squares relative to each point
    from scipy.optimize import nnls
    A = np.stack([ms ** 2, ms ** 3], axis=1) / secs[:, None]
    (a, b), _ = nnls(A, np.ones_like(secs))
    two = a * m_ref ** 2 + b * m_ref ** 3
    print(f"power law m^{p[0]:.2f}: {np.exp(np.polyval(p, np.log(m_ref))) / 60:.0f} min; "
          f"a m^2 + b m^3 (a = {a:.2e}, b = {b:.2e}): {two / 60:.0f} min per sweep and replica "
          f"at the reference m = {m_ref} on one core (not run)")


def _slope(x, s):
    return np.polyfit(np.log(np.asarray(x, float)), np.log(np.asarray(s, float)), 1)[0]


def main() -> None:
    import warnings

    import effth as et
    from effth.dmft import solve_cnn_deep_linear

    warnings.simplefilter("ignore", UserWarning)   # stability warnings of the short ReLU runs
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=1000)
    ap.add_argument("--big", action="store_true", help="also the largest point of each scan")
    ap.add_argument("--reference", action="store_true", help="the reference family's T scan")
    ap.add_argument("--eigh", action="store_true", help="with --reference: also sampler='eigh'")
    args = ap.parse_args()
    if args.reference:
        reference_scan(args.samples, args.eigh)
        return
    base = dict(T=8, P=3, side=4)
    scans = {"T": [8, 16, 32], "P": [3, 6, 12], "side": [4, 6, 8]}
    if not args.big:
        scans = {k: v[:2] for k, v in scans.items()}
    fits, timed = {}, {}
    for key, values in scans.items():
        secs = []
        for v in values:
            kw = dict(base, **{key: v})
            k = (kw["T"], kw["P"], kw["side"])
            if k not in timed:
                timed[k] = one(*k, args.samples)[0]
            m = kw["T"] * kw["P"] * kw["side"] ** 2
            secs.append(timed[k])
            print(f"T={kw['T']:3d} P={kw['P']:2d} |S|={kw['side']}x{kw['side']}: m = {m:5d}, "
                  f"one sweep ({args.samples} draws): {timed[k]:7.2f} s CPU", flush=True)
        x = values if key != "side" else [v * v for v in values]
        fits[key] = _slope(x, secs)
    print("time per sweep ~ " + ", ".join(f"{'|S|' if k == 'side' else k}^{v:.2f}"
                                          for k, v in fits.items()))
    ms = np.array([T * P * s * s for T, P, s in timed], float)
    secs = np.array(list(timed.values()))
    p = np.polyfit(np.log(ms), np.log(secs), 1)
    m_ref = 50 * 10 * 64
    est = np.exp(np.polyval(p, np.log(m_ref)))
    cubic = secs[np.argmax(ms)] * (m_ref / ms.max()) ** 3
    print(f"all points: ~ m^{p[0]:.2f}; reference problem (P=10, 8x8, T=50): m = {m_ref}, "
          f"{8 * m_ref ** 2 / 1e9:.1f} GB per dense kernel, extrapolated {est / 3600:.1f} h "
          f"(fit) to {cubic / 3600:.1f} h (m^3 from the largest point) per sweep and replica: "
          "not run")
    # the closed form of deep linear CNNs
    X, y = _data(4, 4)
    net = et.CNN("linear", depth=3, filter_size=3, padding="same", readout="flatten",
                 parameterization="mup", gamma0=1.0)
    t = time.perf_counter()
    r = solve_cnn_deep_linear(net, X, y, eta=_eta(net, X), steps=10)
    print(f"linear CNN, pixel-resolved closed form (P=4, 4x4, T=10, m=640, same padding, "
          f"flatten): {time.perf_counter() - t:.2f} s, {r.diagnostics.iterations} sweeps")
    d = et.data.load_digits(10, scale="max")   # not centred: a pooled linear CNN sees the pixel mean
    X, y = d.images, d.y
    net = et.CNN("linear", depth=3, filter_size=3, padding="circular", readout="gap",
                 parameterization="mup", gamma0=1.0)
    eta = 0.5 * _eta(net, X)
    t = time.perf_counter()
    r = solve_cnn_deep_linear(net, X, y, eta=eta, steps=50, reduce=True)
    print(f"linear CNN, reference problem (P=10, 8x8, 3x3, L=2, T=50, circular, pooled) by the "
          f"exact reduction to the deep linear MLP: {time.perf_counter() - t:.3f} s, "
          f"final loss {r.value('loss')[-1]:.4f}")


if __name__ == "__main__":
    main()
