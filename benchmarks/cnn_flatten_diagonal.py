"""effth.cnn_kernels with the flatten readout: the equal-pixel path (pixel_pairs='diagonal', the
default for flatten) against all pixel pairs (pixel_pairs='full').  Run:
python benchmarks/cnn_flatten_diagonal.py [P ...]

8x8 digits (effth.data.load_digits, one channel), 3x3 filters, depth 4, NNGP + NTK; prints the
best-of-2 time and the peak traced memory (tracemalloc) of both paths and the largest relative
difference of the output kernels (docs/cnn.md quotes the result).  The full path at P = 100
needs about 4.2 GiB and about a minute per call on one core; pass smaller P to skip it."""

import sys
import time
import tracemalloc

import numpy as np

import effth as et


def _run(net, X, mode):
    best = np.inf
    for _ in range(2):
        t = time.perf_counter()
        k = et.cnn_kernels(net, X, pixel_pairs=mode)
        best = min(best, time.perf_counter() - t)
    tracemalloc.start()
    et.cnn_kernels(net, X, pixel_pairs=mode)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return k, best, peak


def main(Ps=(20, 50, 100)):
    for act in ("relu", "erf"):
        for padding in ("same", "valid", "circular"):
            for P in Ps:
                X = et.data.load_digits(P).images[..., None]
                net = et.CNN(act, depth=4, filter_size=3, padding=padding, readout="flatten",
                             c_w=2.0, c_b=0.05)
                kd, td, md = _run(net, X, "diagonal")
                kf, tf, mf = _run(net, X, "full")
                err = max(float(np.abs(kd.value(n) - kf.value(n)).max() / np.abs(kf.value(n)).max())
                          for n in ("K", "Theta"))
                print(f"{act:4s} {padding:8s} P={P:3d}  diagonal {1e3 * td:8.1f} ms {md / 2**20:7.1f} MiB"
                      f"   full {1e3 * tf:9.1f} ms {mf / 2**20:8.1f} MiB   speed-up {tf / td:6.0f}x"
                      f"  memory {mf / md:5.0f}x   max rel diff {err:.1e}", flush=True)


if __name__ == "__main__":
    main(tuple(int(a) for a in sys.argv[1:]) or (20, 50, 100))
