"""Independent references for the finite-width trained network (PDLT §∞.2): dense projectors
from their definitions, the difference equations (∞.81)-(∞.83), and the brute-force ensemble
expectation of (∞.141) over the NTK-hierarchy statistics (8.82), (11.45), (∞.11), (∞.12)."""

from __future__ import annotations

import itertools

import numpy as np


def dense_projectors(Ht: np.ndarray, eta: float) -> dict:
    """Z_A..Z_IIB of GD from (∞.107), (∞.110), (∞.135), (∞.138)-(∞.147), by dense inverses."""
    n = Ht.shape[0]
    I = np.eye(n)
    Hi = np.linalg.inv(Ht)
    # M_2, M_3 are built from the training NTK itself (the evolution operator 1 - eta H);
    # the Y's contract with its inverse
    M2 = np.kron(Ht, I) + np.kron(I, Ht) - eta * np.kron(Ht, Ht)
    XII = np.linalg.inv(M2).reshape(n, n, n, n)
    k3 = lambda a, b, c: np.kron(np.kron(a, b), c)  # noqa: E731
    M3 = (k3(Ht, I, I) + k3(I, Ht, I) + k3(I, I, Ht)
          - eta * (k3(Ht, Ht, I) + k3(Ht, I, Ht) + k3(I, Ht, Ht)) + eta ** 2 * k3(Ht, Ht, Ht))
    XIII = np.linalg.inv(M3).reshape((n,) * 6)
    Y1 = np.einsum("abde,cf->abcdef", XII, Hi) - np.einsum("cg,abgdef->abcdef", Hi, XIII)
    Y2 = np.einsum("ac,bd->abcd", Hi, Hi) - np.einsum("be,aecd->abcd", Hi, XII)
    Y3 = (np.einsum("ad,be,cf->abcdef", Hi, Hi, Hi) - np.einsum("bg,agde,cf->abcdef", Hi, XII, Hi)
          - np.einsum("ad,cg,bgef->abcdef", Hi, Hi, XII)
          + np.einsum("ci,bigh,aghdef->abcdef", Hi, XII, XIII))
    Y4 = np.einsum("ad,bcef->abcdef", Hi, XII) - np.einsum("bcgh,aghdef->abcdef", XII, XIII)
    return {"A": Y2, "B": Y2 + eta / 2 * XII,
            "IA": -Y3 - eta / 2 * Y4,
            "IB": -Y3 - eta / 2 * Y4 - eta / 2 * Y1 - eta ** 2 / 6 * XIII,
            "IIA": -Y3,
            "IIB": (-Y3 - Y3.transpose(1, 0, 2, 4, 3, 5) - Y3.transpose(0, 2, 1, 3, 5, 4)
                    - eta * Y4 - eta * Y1)}


def symmetric_statistics(N: int, rng: np.random.Generator) -> dict:
    """Random A..U with the symmetries their definitions imply, and SPD K, Theta, H1."""
    def spd():
        G = rng.standard_normal((N, N))
        return G @ G.T / N + 0.5 * np.eye(N)
    T = {k: rng.standard_normal((N,) * 4) for k in "ABPQRSTU"}
    A = T["A"]
    A = A + A.transpose(1, 0, 2, 3)
    A = A + A.transpose(0, 1, 3, 2)
    T["A"] = A + A.transpose(2, 3, 0, 1)
    B = T["B"]
    B = B + B.transpose(1, 0, 3, 2)
    T["B"] = B + B.transpose(2, 3, 0, 1)
    T["P"] = T["P"] + T["P"].transpose(0, 2, 1, 3)
    T["R"] = T["R"] + T["R"].transpose(0, 1, 3, 2)
    T["S"] = T["S"] + T["S"].transpose(1, 0, 3, 2)
    T["T"] = T["T"] + T["T"].transpose(3, 2, 1, 0)
    T["U"] = T["U"] + T["U"].transpose(2, 3, 0, 1)
    H1 = rng.standard_normal((N, N))
    T.update(K=spd(), Theta=spd(), H1=H1 + H1.T)
    return T


def brute_force_mean(T: dict, y: np.ndarray, P: int, eta: float, n: int) -> dict:
    """n_(L-1) (E[z(inf)] - m_inf) part by part: the expectation of (∞.141) (free part expanded
    to second order in Delta H as (∞.71)) with explicit output indices."""
    N = T["Theta"].shape[0]
    m = y.shape[1]
    d = np.eye(m)
    H = T["Theta"]
    Hi = np.linalg.inv(H[:P, :P])
    Z = dense_projectors(H[:P, :P], eta)
    A_ = lambda k: T[k]  # noqa: E731
    # E[dH_{i0 i1 i2} z_{i3}] n, (11.45)
    Pq, Q = T["P"], T["Q"]
    E3 = (np.einsum("ad,bc,wxyz->abcdwxyz", d, d, Pq) + np.einsum("ab,cd,wxyz->abcdwxyz", d, d, Q)
          + np.einsum("ac,bd,wyxz->abcdwxyz", d, d, Q))
    R, S, Tt, U = T["R"], T["S"], T["T"], T["U"]
    EI = (np.einsum("ab,cd,wxyz->abcdwxyz", d, d, R) + np.einsum("ac,db,wyzx->abcdwxyz", d, d, R)
          + np.einsum("ad,bc,wzxy->abcdwxyz", d, d, R))
    EII = (np.einsum("ab,cd,wxyz->abcdwxyz", d, d, S) + np.einsum("ac,db,wyzx->abcdwxyz", d, d, Tt)
           + np.einsum("ad,bc,wzxy->abcdwxyz", d, d, U))
    E2 = (np.einsum("ab,cd,wxyz->abcdwxyz", d, d, A_("A"))
          + np.einsum("ac,bd,wyxz->abcdwxyz", d, d, T["B"])
          + np.einsum("ad,bc,wzxy->abcdwxyz", d, d, T["B"]))
    K = T["K"][:P, :P]
    # E[e e e] = -(y y y + K y + K y + K y); E[e] = -y
    Eeee = -(np.einsum("ai,bj,ck->ijkabc", y, y, y) + np.einsum("ij,ab,ck->ijkabc", d, K, y)
             + np.einsum("ik,ac,bj->ijkabc", d, K, y) + np.einsum("jk,bc,ai->ijkabc", d, K, y))

    def bracket(f):      # f (N, m)
        return f - H[:, :P] @ (Hi @ f[:P])

    out = {}
    out["H1"] = bracket(T["H1"][:, :P] @ Hi @ y)
    # free part: E[(Hhat_d . Hhat^-1)] y at second order in Delta H; only the connected
    # second-order pieces survive: -E[dH_d Hi dH~ Hi] + H_d Hi E[dH~ Hi dH~ Hi]
    f = np.zeros((N, m))
    for i, k in itertools.product(range(m), range(m)):
        for j in range(m):
            # E[DH_{ij;D a1} Hi_{a1 a2} DH_{jk; a2 a3}] Hi_{a3 a4} y_{k;a4}
            e2 = E2[i, j, j, k][:, :P, :P, :P]                 # (D, a1, a2, a3)
            f[:, i] -= np.einsum("Dabc,ab,cd,d->D", e2, Hi, Hi, y[:, k])
    out["delta_ntk"] = bracket(f)
    # dNTK terms: E[dH e_{j1} e_{j2}] = -(E[dH z_{j1}] y_{j2} + E[dH z_{j2}] y_{j1})
    fA = np.zeros((N, m))
    fB = np.zeros((N, m))
    ZA, ZB = Z["A"], Z["B"]
    for i, j1, j2 in itertools.product(range(m), repeat=3):
        # [dH_{j1 i j2; a1 D a2}] Z_A^{a1 a2 a3 a4} e_{j1;a3} e_{j2;a4}
        EdA = -(np.einsum("xDyz,xyzw,w->D", E3[j1, i, j2, j1][:P, :, :P, :P], ZA, y[:, j2])
                + np.einsum("xDyw,xyzw,z->D", E3[j1, i, j2, j2][:P, :, :P, :P], ZA, y[:, j1]))
        fA[:, i] += EdA
        EdB = -(np.einsum("Dxyz,xyzw,w->D", E3[i, j1, j2, j1][:, :P, :P, :P], ZB, y[:, j2])
                + np.einsum("Dxyw,xyzw,z->D", E3[i, j1, j2, j2][:, :P, :P, :P], ZB, y[:, j1]))
        fB[:, i] += EdB
    out["dntk"] = bracket(fA + fB)
    fI = np.zeros((N, m))
    fII = np.zeros((N, m))
    for i, j1, j2, j3 in itertools.product(range(m), repeat=4):
        w = Eeee[j1, j2, j3]
        fI[:, i] += np.einsum("xDyz,xyzabc,abc->D", EI[j1, i, j2, j3][:P, :, :P, :P], Z["IA"], w)
        fI[:, i] += np.einsum("Dxyz,xyzabc,abc->D", EI[i, j1, j2, j3][:, :P, :P, :P], Z["IB"], w)
        fII[:, i] += np.einsum("xyDz,xyzabc,abc->D", EII[j1, j2, i, j3][:P, :P, :, :P], Z["IIA"], w)
        fII[:, i] += np.einsum("Dxyz,xyzabc,abc->D", EII[i, j1, j2, j3][:, :P, :P, :P], Z["IIB"], w)
    out["ddntk_I"] = bracket(fI)
    out["ddntk_II"] = bracket(fII)
    return out


def difference_equations(z0, H, dH, ddI, ddII, y, P, eta, steps):
    """Iterate (∞.81)-(∞.83) (Delta H = 0: the instance NTK is delta_ij H) and return z(steps)."""
    m, N = z0.shape
    z = z0.copy()
    Hij = np.einsum("ij,ab->ijab", np.eye(m), H)
    dHt = dH.copy()
    for _ in range(steps):
        eps = z[:, :P] - y.T
        ddsym = ddI + ddI.transpose(1, 0, 2, 3, 5, 4, 6, 7) + 2 * ddII
        z = (z - eta * np.einsum("ijDa,ja->iD", Hij[:, :, :, :P], eps)
             + eta ** 2 / 2 * np.einsum("iabDxy,ax,by->iD", dHt[:, :, :, :, :P, :P], eps, eps)
             - eta ** 3 / 6 * np.einsum("iabcDxyw,ax,by,cw->iD", ddI[..., :P, :P, :P], eps, eps, eps))
        Hn = (Hij - eta * np.einsum("ijkDEa,ka->ijDE", dHt[..., :P], eps)
              - eta * np.einsum("jikEDa,ka->ijDE", dHt[..., :P], eps)
              + eta ** 2 / 2 * np.einsum("ijabDExy,ax,by->ijDE", ddsym[..., :P, :P], eps, eps))
        dHn = dHt - eta * np.einsum("ijkaDEFx,ax->ijkDEF",
                                    ddI[..., :P] + ddII[..., :P]
                                    + ddII.transpose(0, 2, 1, 3, 4, 6, 5, 7)[..., :P], eps)
        Hij, dHt = Hn, dHn
    return z
