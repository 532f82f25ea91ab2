"""effth.cnn_kernels against neural-tangents' stax kernels (optional: neural-tangents and jax are
not effth dependencies).  Run: python benchmarks/cnn_vs_neural_tangents.py [--json]

Prints the largest relative difference of the NNGP kernel and the NTK for ReLU and erf, the three
paddings and both readouts, on random multi-channel images and on digits images (8x8, one
channel, effth.data.load_digits), and the time of effth.cnn_kernels against neural-tangents'
jit-compiled kernel_fn on the digits (best of 3 calls each, the compile timed apart; docs/cnn.md
quotes the result).  ``--json`` prints one JSON object instead (used by the optional test that
runs this script with a separate neural-tangents Python, tests/pdlt/test_cnn_kernels.py)."""

import json
import sys
import time
import types

import jax

jax.config.update("jax_enable_x64", True)

# neural_tangents.experimental imports TensorFlow (not needed here): an empty module instead
sys.modules.setdefault("neural_tangents.experimental",
                       types.ModuleType("neural_tangents.experimental"))
import neural_tangents as nt                                # noqa: E402
import numpy as np                                          # noqa: E402
from neural_tangents import stax                            # noqa: E402

import effth as et                                          # noqa: E402

NT_PAD = {"circular": "CIRCULAR", "same": "SAME", "valid": "VALID"}
NT_ACT = {"relu": stax.Relu, "erf": stax.Erf}


def nt_kernels(act, depth, filt, padding, readout, cw, cb, X):
    layers = []
    for _ in range(depth - 1):
        layers += [stax.Conv(1, filt, padding=NT_PAD[padding], W_std=cw ** 0.5, b_std=cb ** 0.5),
                   NT_ACT[act]()]
    layers += [stax.GlobalAvgPool() if readout == "gap" else stax.Flatten(),
               stax.Dense(1, W_std=cw ** 0.5, b_std=cb ** 0.5)]
    _, _, kernel_fn = stax.serial(*layers)
    k = kernel_fn(X, None, ("nngp", "ntk"))
    return np.asarray(k.nngp), np.asarray(k.ntk)


def _rel(a, b):
    return float(np.abs(a - b).max() / np.abs(b).max())


def random_check(report):
    rng = np.random.default_rng(0)
    X = rng.standard_normal((4, 7, 6, 2))
    for act in ("relu", "erf"):
        for padding in ("circular", "same", "valid"):
            for readout in ("gap", "flatten"):
                depth, filt, cw, cb = 3, (3, 2), 1.7, 0.1
                net = et.CNN(act, depth=depth, filter_size=filt, padding=padding,
                             readout=readout, c_w=cw, c_b=cb)
                kern = et.cnn_kernels(net, X)
                K, T = nt_kernels(act, depth, filt, padding, readout, cw, cb, X)
                report.append(dict(data="random 4x7x6x2", act=act, padding=padding,
                                   readout=readout, nngp=_rel(kern.value("K"), K),
                                   ntk=_rel(kern.value("Theta"), T)))


def _best(fn, repeat=3):
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return min(out)


def digits_check(report, P=6, depth=3, cw=2.0, cb=0.05):
    """P digits of 8x8 pixels (one channel), 3x3 filters; agreement and best-of-3 times."""
    X = et.data.load_digits(P).images[..., None]
    for act in ("relu", "erf"):
        for padding in ("circular", "same", "valid"):
            for readout in ("gap", "flatten"):
                net = et.CNN(act, depth=depth, filter_size=3, padding=padding, readout=readout,
                             c_w=cw, c_b=cb)
                kern = et.cnn_kernels(net, X)
                layers = []
                for _ in range(depth - 1):
                    layers += [stax.Conv(1, (3, 3), padding=NT_PAD[padding], W_std=cw ** 0.5,
                                         b_std=cb ** 0.5), NT_ACT[act]()]
                layers += [stax.GlobalAvgPool() if readout == "gap" else stax.Flatten(),
                           stax.Dense(1, W_std=cw ** 0.5, b_std=cb ** 0.5)]
                kfn = jax.jit(stax.serial(*layers)[2], static_argnames="get")
                Xj = jax.numpy.asarray(X)
                t = time.perf_counter()
                k = kfn(Xj, None, get=("nngp", "ntk"))
                k.ntk.block_until_ready()
                compile_s = time.perf_counter() - t
                t_nt = _best(lambda: kfn(Xj, None, get=("nngp", "ntk")).ntk.block_until_ready())
                t_et = _best(lambda: et.cnn_kernels(net, X))
                report.append(dict(data=f"digits {P}x8x8", act=act, padding=padding,
                                   readout=readout, nngp=_rel(kern.value("K"), np.asarray(k.nngp)),
                                   ntk=_rel(kern.value("Theta"), np.asarray(k.ntk)),
                                   effth_s=t_et, nt_s=t_nt, nt_compile_s=compile_s))


def main():
    report = []
    random_check(report)
    digits_check(report)
    if "--json" in sys.argv:
        print(json.dumps(dict(neural_tangents=nt.__version__, jax=jax.__version__,
                              rows=report)))
        return
    print(f"neural-tangents {nt.__version__}, jax {jax.__version__}")
    for r in report:
        line = (f"{r['data']:15s} {r['act']:5s} {r['padding']:9s} {r['readout']:8s}  "
                f"NNGP {r['nngp']:.1e}  NTK {r['ntk']:.1e}")
        if "effth_s" in r:
            line += (f"   effth {1e3 * r['effth_s']:.1f} ms, neural-tangents "
                     f"{1e3 * r['nt_s']:.1f} ms (compile {r['nt_compile_s']:.2f} s), "
                     f"ratio {r['effth_s'] / r['nt_s']:.2f}")
        print(line)
    print(f"largest relative difference: {max(max(r['nngp'], r['ntk']) for r in report):.1e}")


if __name__ == "__main__":
    main()
