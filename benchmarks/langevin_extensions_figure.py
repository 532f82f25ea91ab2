"""The figure of docs/dmft.md for underdamped Langevin in the two-layer solver, per-layer
initial variances with biases and Langevin noise, and the NTK-Euler closure of eq. (102).

Bordelon & Pehlevan (2022), apps. D.8, K, L.  Panels: (a) ``N x`` the mean squared gap of single
tanh networks (two-layer, temperature 0.5, weight decay 1, momentum 0.6) to the two-layer DMFT,
against the DMFT with the momentum dropped; (b) the same with a bias and ``sigma^2 = (1.6,
0.7)``, against the unit-variance DMFT; (c) the NTK-Euler closure minus the exact closure at
``t = 1.6`` against ``eta``, with and without the Ito term.  The same settings as the tests
(``tests/dmft/test_langevin_momentum.py``, ``test_weight_variances_langevin.py``,
``test_langevin_monte_carlo.py``); about a minute on one core.

Run ``OPENBLAS_NUM_THREADS=1 python benchmarks/langevin_extensions_figure.py --plot
docs/figures/langevin_extensions.png``.
"""

from __future__ import annotations

import argparse

import numpy as np

import effth.dmft.solvers.monte_carlo as mcm
from effth.dmft import solve_monte_carlo, solve_two_layer
from effth.simulation import simulate_training

X = np.array([[1.0, 0.3], [0.2, -1.0]])
Y = np.array([1.0, -0.5])
LANG = dict(gamma0=1.0, eta=0.2, weight_decay=1.0, temperature=0.5)
NS = np.array([32, 64, 128, 256, 512, 1024])


def gap_scan(kw, wrong, T, S=300):
    """``N x`` mean squared gap (and its SE) to the DMFT with ``kw`` and with ``wrong``."""
    idx = np.arange(T)
    targets = []
    for k in (kw, wrong):
        r = solve_two_layer(X, Y, activation="tanh", method="monte_carlo", samples=400_000,
                            seed=0, two_time=False, steps=T, **k)
        targets.append(np.concatenate([r.f[1:].ravel(), r.phi[0][idx, :, idx, :].ravel()]))
    out = np.zeros((2, 2, len(NS)))
    for j, N in enumerate(NS):
        run = simulate_training(X, Y, hidden_layers=1, widths=int(N), activation="tanh",
                                seed=int(N), networks=S, parameterization="mup", steps=T, **kw)
        o = np.concatenate([run.f[:, 1:].reshape(S, -1),
                            run.phi[:, 0][:, idx, :, idx, :].transpose(1, 0, 2, 3)
                            .reshape(S, -1)], axis=1)
        for i, tg in enumerate(targets):
            d2 = np.sum((o - tg) ** 2, axis=1)
            out[i, :, j] = N * d2.mean(), N * d2.std(ddof=1) / np.sqrt(S)
    return out


def ntk_gap(etas=(0.2, 0.1, 0.05), t_end=1.6):
    """max |f_ntk - f_exact| at ``t_end`` (L = 1) with and without the Ito term."""
    terms = mcm._langevin_terms

    def no_ito(*a):
        out = terms(*a)
        out.half = 0.0
        return out

    gaps = np.zeros((2, len(etas)))
    for j, eta in enumerate(etas):
        T = int(round(t_end / eta)) + 1
        kw = dict(LANG, eta=eta, steps=T)
        ex = solve_two_layer(X, Y, activation="tanh", method="monte_carlo", samples=400_000,
                             seed=0, two_time=False, **kw).f[-1]
        for i, patch in enumerate((terms, no_ito)):
            mcm._langevin_terms = patch
            try:
                nt = solve_monte_carlo(X, Y, hidden_layers=1, activation="tanh", closure="ntk",
                                       responses="stein", samples=8000, replicas=8, seed=1, **kw)
            finally:
                mcm._langevin_terms = terms
            gaps[i, j] = np.max(np.abs(nt.f[-1] - ex))
    return np.array(etas), gaps


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plot", help="write the figure to this file")
    args = ap.parse_args()
    a = gap_scan(dict(LANG, momentum=0.6), dict(LANG, momentum=0.0), T=20)
    b = gap_scan(dict(LANG, bias=True, weight_variances=(1.6, 0.7)),
                 dict(LANG, bias=True, weight_variances=None), T=12)
    etas, gaps = ntk_gap()
    for name, x in (("underdamped", a), ("variances", b)):
        print(name, "N x gap^2 right:", np.round(x[0, 0], 2), "wrong:", np.round(x[1, 0], 2))
    print("NTK-Euler - exact, eta", etas, "with Ito:", np.round(gaps[0], 4), "without:",
          np.round(gaps[1], 4))
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(1, 3, figsize=(13, 3.8))
        for k, (x, title, wl) in enumerate(((a, "(a) two-layer, Langevin + momentum",
                                             "DMFT, momentum dropped"),
                                            (b, r"(b) bias, $\sigma^2=(1.6, 0.7)$, Langevin",
                                             "DMFT, unit variances"))):
            ax[k].errorbar(NS, x[0, 0], x[0, 1], marker="o", label="DMFT")
            ax[k].errorbar(NS, x[1, 0], x[1, 1], marker="s", label=wl)
            ax[k].set_xscale("log")
            ax[k].set_xlabel("width N")
            ax[k].set_ylabel(r"$N\times$ mean squared gap")
            ax[k].set_title(title, fontsize=10)
            ax[k].legend(fontsize=8)
        ax[2].loglog(etas, gaps[0], "o-", label="NTK-Euler with the Itô term")
        ax[2].loglog(etas, gaps[1], "s-", label="without the Itô term")
        ax[2].loglog(etas, gaps[0][0] * etas / etas[0], "k:", label=r"$\propto\eta$")
        ax[2].set_xlabel(r"$\eta$")
        ax[2].set_ylabel(r"max $|f_{\rm NTK}-f_{\rm exact}|$ at $t=1.6$")
        ax[2].set_title("(c) NTK-Euler closure, eq. (102), L = 1", fontsize=10)
        ax[2].legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(args.plot, dpi=110)


if __name__ == "__main__":
    main()
