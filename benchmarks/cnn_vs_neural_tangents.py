"""effth.cnn_kernels against neural-tangents' stax kernels (optional: neural-tangents and jax are
not effth dependencies).  Run: python benchmarks/cnn_vs_neural_tangents.py

Prints the largest relative difference of the NNGP kernel and the NTK for ReLU and erf, the three
paddings and both readouts (docs/cnn.md quotes the result)."""

import jax

jax.config.update("jax_enable_x64", True)

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


def main():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((4, 7, 6, 2))
    worst = 0.0
    for act in ("relu", "erf"):
        for padding in ("circular", "same", "valid"):
            for readout in ("gap", "flatten"):
                depth, filt, cw, cb = 3, (3, 2), 1.7, 0.1
                net = et.CNN(act, depth=depth, filter_size=filt, padding=padding,
                             readout=readout, c_w=cw, c_b=cb)
                kern = et.cnn_kernels(net, X)
                K, T = nt_kernels(act, depth, filt, padding, readout, cw, cb, X)
                dK = np.abs(kern.value("K") - K).max() / np.abs(K).max()
                dT = np.abs(kern.value("Theta") - T).max() / np.abs(T).max()
                worst = max(worst, dK, dT)
                print(f"{act:5s} {padding:9s} {readout:8s}  NNGP {dK:.1e}  NTK {dT:.1e}")
    print(f"largest relative difference: {worst:.1e}")


if __name__ == "__main__":
    main()
