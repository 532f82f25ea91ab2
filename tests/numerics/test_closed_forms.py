"""Tests of effth.numerics.closed_forms against independent references.

References (written independently of the implementation):

* mpmath (dps=30) tanh-sinh quadrature in whitened coordinates with a breakpoint at the kink,
  for every 1-slot atom and (slow) a set of 2-slot atoms (nested 2-D quad);
* a vectorized double-precision Gauss-Legendre product rule in Cholesky coordinates, split at
  every kink z_i = 0 (conditional form), for 2- and 3-slot atoms (about 1e-14 accurate);
* exact limits for degenerate covariances (duplicate samples, zero variances, tiny scales).
"""

from __future__ import annotations

import math

import mpmath as mp
import numpy as np
import pytest
from scipy import special

from effth.errors import DomainError
from effth.numerics.closed_forms import closed_form, has_closed_form

try:  # the real registry, when available
    from effth.activations import get_activation as _get_activation
except Exception:  # pragma: no cover - stand-in used only before effth.activations existed
    _get_activation = None


class _StandIn:
    def __init__(self, name, family, **params):
        self.name, self.family = name, family
        self.params = tuple(sorted(params.items()))

    def param(self, key):
        return dict(self.params)[key]


_STANDIN = {
    "relu": ("piecewise_linear", dict(a_plus=1, a_minus=0)),
    "leaky_relu": ("piecewise_linear", dict(a_plus=1, a_minus=0.01)),
    "abs": ("piecewise_linear", dict(a_plus=1, a_minus=-1)),
    "perceptron": ("step", dict(low=0, high=1)),
    "sign": ("step", dict(low=-1, high=1)),
    "erf": ("erf", {}),
    "gelu": ("gelu", {}),
    "sin": ("trig", dict(kind="sin")),
    "cos": ("trig", dict(kind="cos")),
    "tanh": ("tanh", {}),
    "linear": ("polynomial", dict(coeffs=(0, 1))),
}


def act(name, **params):
    if _get_activation is not None:
        return _get_activation(name, **params)
    if name == "leaky_relu" and "slope" in params:
        return _StandIn(name, "piecewise_linear", a_plus=1, a_minus=params["slope"])
    fam, p = _STANDIN[name]
    p = dict(p, **params)
    return _StandIn(name, fam, **p)


def pwl(a_plus, a_minus):
    return _StandIn("pwl", "piecewise_linear", a_plus=a_plus, a_minus=a_minus)


def poly_act(coeffs):
    return _StandIn("poly", "polynomial", coeffs=tuple(coeffs))


def step_act(low, high):
    return _StandIn("stepx", "step", low=low, high=high)


# ---------------------------------------------------------------------------------------
# independent definitions of the regular parts, in numpy and mpmath
# ---------------------------------------------------------------------------------------
def spec_of(a):
    """(family, params dict) of an activation-like object."""
    return a.family, {k: v for k, v in a.params}


def np_sigma(a, order):
    fam, p = spec_of(a)
    if fam == "piecewise_linear":
        ap, am = float(p["a_plus"]), float(p["a_minus"])
        if order == 0:
            return lambda z: np.where(z > 0, ap * z, am * z)
        if order == 1:
            return lambda z: np.where(z > 0, ap, am) + 0.0 * z
        return lambda z: 0.0 * z
    if fam == "step":
        lo, hi = float(p["low"]), float(p["high"])
        if order == 0:
            return lambda z: np.where(z > 0, hi, lo) + 0.0 * z
        return lambda z: 0.0 * z
    if fam == "erf":
        if order == 0:
            return special.erf
        return lambda z: 2 / np.sqrt(np.pi) * (-1) ** (order - 1) * special.eval_hermite(order - 1, z) * np.exp(-z * z)
    if fam == "gelu":
        phi = lambda z: np.exp(-z * z / 2) / np.sqrt(2 * np.pi)  # noqa: E731
        return {
            0: lambda z: z * special.ndtr(z),
            1: lambda z: special.ndtr(z) + z * phi(z),
            2: lambda z: (2 - z * z) * phi(z),
            3: lambda z: (z**3 - 4 * z) * phi(z),
        }[order]
    if fam == "trig":
        sh = 0.5 * np.pi if p["kind"] == "cos" else 0.0
        return lambda z: np.sin(z + order * 0.5 * np.pi + sh)
    if fam == "polynomial":
        c = np.polynomial.polynomial.polyder([float(x) for x in p["coeffs"]], order) if order else [
            float(x) for x in p["coeffs"]
        ]
        return lambda z: np.polynomial.polynomial.polyval(z, c)
    raise KeyError(fam)


def mp_sigma(a, order):
    fam, p = spec_of(a)
    if fam == "piecewise_linear":
        ap, am = mp.mpf(float(p["a_plus"])), mp.mpf(float(p["a_minus"]))
        if order == 0:
            return lambda z: ap * z if z > 0 else am * z
        if order == 1:
            return lambda z: ap if z > 0 else am
        return lambda z: mp.mpf(0)
    if fam == "step":
        lo, hi = mp.mpf(float(p["low"])), mp.mpf(float(p["high"]))
        if order == 0:
            return lambda z: hi if z > 0 else lo
        return lambda z: mp.mpf(0)
    if fam == "erf":
        if order == 0:
            return mp.erf
        return lambda z: 2 / mp.sqrt(mp.pi) * (-1) ** (order - 1) * mp.hermite(order - 1, z) * mp.exp(-z * z)
    if fam == "gelu":
        if order == 0:
            return lambda z: z * mp.ncdf(z)
        if order == 1:
            return lambda z: mp.ncdf(z) + z * mp.npdf(z)
        if order == 2:
            return lambda z: (2 - z * z) * mp.npdf(z)
        return lambda z: mp.diff(lambda t: t * mp.ncdf(t), z, order)
    if fam == "trig":
        table = {
            "sin": [mp.sin, mp.cos, lambda t: -mp.sin(t), lambda t: -mp.cos(t)],
            "cos": [mp.cos, lambda t: -mp.sin(t), lambda t: -mp.cos(t), mp.sin],
        }
        return table[p["kind"]][order % 4]
    if fam == "polynomial":
        c = [mp.mpf(float(x)) for x in p["coeffs"]]
        for _ in range(order):
            c = [i * c[i] for i in range(1, len(c))] or [mp.mpf(0)]
        return lambda z: mp.fsum(ci * z**i for i, ci in enumerate(c))
    raise KeyError(fam)


def product_fn(a, factors, backend):
    """Integrand as a function of the slot values z (tuple)."""
    sig = np_sigma if backend == "np" else mp_sigma
    parts = []
    for s, kind, o in factors:
        if kind == "sigma":
            f = sig(a, o)
            parts.append((s, f))
        else:
            parts.append((s, (lambda p: (lambda z: z**p))(o)))

    def F(*z):
        v = 1
        for s, f in parts:
            v = v * f(z[s])
        return v

    return F


# ---------------------------------------------------------------------------------------
# references
# ---------------------------------------------------------------------------------------
def mp_ref1(F, K, dps=30):
    with mp.workdps(dps):
        K = mp.mpf(float(K))
        s = mp.sqrt(K)
        g = lambda x: F(s * x) * mp.exp(-x * x / 2)  # noqa: E731
        return float(mp.quad(g, [-mp.inf, 0, mp.inf]) / mp.sqrt(2 * mp.pi))


def mp_ref2(F, K, dps=20, L=11):
    """Nested 2-D mpmath quad in Cholesky (conditional) form, breakpoints at the kinks."""
    with mp.workdps(dps):
        K11, K12, K22 = (mp.mpf(float(K[i, j])) for i, j in ((0, 0), (0, 1), (1, 1)))
        L11 = mp.sqrt(K11)
        L21 = K12 / L11
        L22 = mp.sqrt(K22 - L21**2)
        phi = lambda x: mp.exp(-x * x / 2) / mp.sqrt(2 * mp.pi)  # noqa: E731

        def outer(x1):
            z1 = L11 * x1
            c = -L21 * x1 / L22
            pts = [-L, c, L] if -L < c < L else [-L, L]
            return phi(x1) * mp.quad(lambda x2: F(z1, L21 * x1 + L22 * x2) * phi(x2), pts)

        return float(mp.quad(outer, [-L, 0, L]))


_GL_CACHE: dict = {}


def gl_ref(F, K, n=None, L=12.0):
    """Gauss-Legendre product rule in Cholesky coordinates, split at every kink z_i = 0."""
    K = np.asarray(K, dtype=float)
    d = K.shape[0]
    n = n or {1: 200, 2: 120, 3: 36}[d]
    if n not in _GL_CACHE:
        _GL_CACHE[n] = np.polynomial.legendre.leggauss(n)
    t, w = _GL_CACHE[n]
    C = np.linalg.cholesky(K)
    X = np.zeros((1, 0))
    W = np.ones(1)
    for i in range(d):
        c = -(X @ C[i, :i]) / C[i, i]
        c = np.clip(c, -L, L)
        xs, ws = [], []
        for lo, hi in ((-L + 0 * c, c), (c, L + 0 * c)):
            mid, half = (lo + hi) / 2, (hi - lo) / 2
            xs.append(mid[:, None] + half[:, None] * t[None, :])
            ws.append(half[:, None] * w[None, :])
        xi = np.concatenate(xs, axis=1)  # (N, 2n)
        wi = np.concatenate(ws, axis=1)
        N = X.shape[0]
        X = np.concatenate([np.repeat(X, 2 * n, axis=0), xi.reshape(-1, 1)], axis=1)
        W = (W[:, None] * wi * np.exp(-xi**2 / 2) / np.sqrt(2 * np.pi)).reshape(-1)
        assert X.shape[0] == N * 2 * n
    Z = X @ C.T
    vals = F(*[Z[:, i] for i in range(d)])
    return float(np.sum(W * vals))


def random_K(k, seed, scale=1.0):
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(k, k))
    K = A @ A.T / k + 0.3 * np.eye(k)
    d = np.sqrt(np.diag(K))
    K = K / np.outer(d, d)  # correlation matrix
    v = rng.uniform(0.4, 1.6, k) * scale
    return K * np.sqrt(np.outer(v, v))


def assert_close(got, ref, rtol=1e-12, atol=1e-13):
    got = np.asarray(got, dtype=float)
    assert np.all(np.isfinite(got))
    assert np.allclose(got, ref, rtol=rtol, atol=atol), (got, ref, np.max(np.abs(got - ref)))


# ---------------------------------------------------------------------------------------
# activation set and atoms
# ---------------------------------------------------------------------------------------
ACTS = {
    "relu": lambda: act("relu"),
    "leaky_relu_0.1": lambda: act("leaky_relu", slope=0.1),
    "abs": lambda: act("abs"),
    "pwl_1.3_-0.4": lambda: pwl(1.3, -0.4),
    "perceptron": lambda: act("perceptron"),
    "sign": lambda: act("sign"),
    "step_-0.5_2": lambda: step_act(-0.5, 2.0),
    "erf": lambda: act("erf"),
    "gelu": lambda: act("gelu"),
    "sin": lambda: act("sin"),
    "cos": lambda: act("cos"),
    "poly": lambda: poly_act((0.3, 1.0, -0.5, 0.2)),
}

S = "sigma"
ATOMS1 = [
    ((0, S, 0),),
    ((0, S, 0),) * 2,
    ((0, S, 0),) * 3,
    ((0, S, 0),) * 4,
    ((0, S, 1),),
    ((0, S, 1),) * 2,
    ((0, S, 0), (0, S, 1)),
    ((0, S, 2),),
    ((0, S, 2), (0, S, 0)),
    ((0, S, 0), (0, S, 0), (0, "z", 2)),
    ((0, S, 0), (0, "z", 1)),
    ((0, S, 1), (0, "z", 3)),
    ((0, S, 0), (0, S, 0), (0, S, 1), (0, S, 1), (0, "z", 1)),
]
ATOMS2 = [
    ((0, S, 0), (1, S, 0)),
    ((0, S, 1), (1, S, 1)),
    ((0, S, 0), (1, S, 1)),
    ((0, S, 0), (0, S, 0), (1, S, 0), (1, S, 0)),
    ((0, S, 0), (1, "z", 1)),
    ((0, S, 1), (1, S, 0), (0, "z", 1), (1, "z", 2)),
    ((0, S, 0), (0, S, 0), (1, S, 1)),
    ((0, S, 2), (1, S, 1)),
    ((0, S, 0), (0, S, 1), (1, S, 0), (1, "z", 1)),
]
ATOMS3 = [
    ((0, S, 0), (1, S, 0), (2, S, 0)),
    ((0, S, 0), (0, S, 0), (1, S, 0), (2, S, 0)),
    ((0, S, 1), (1, S, 0), (2, S, 0), (2, "z", 1)),
    ((0, S, 1), (1, S, 1), (2, S, 1)),
    ((0, S, 0), (1, S, 1), (2, S, 0), (2, "z", 1)),
    ((0, S, 0), (0, S, 0), (1, S, 1), (2, S, 2)),
]


def _id(x):
    return "-".join(f"{s}{k[0]}{o}" for s, k, o in x)


# ---------------------------------------------------------------------------------------
# single-variable reference values <σ>, <σ²>, <σ⁴>, <σ²(z²−K)> (closed forms by hand)
# ---------------------------------------------------------------------------------------
SPEC = [
    # name, K, <s>, <s^2>, <s^4>, <s^2 (z^2-K)>
    ("linear", 1.0, 0.0, 1.0, 3.0, 2.0),
    ("relu", 1.0, 0.3989422804, 0.5, 1.5, 1.0),
    ("relu", 0.5, 0.2820947918, 0.25, 0.375, 0.25),
    ("leaky_relu", 1.0, 0.3590480524, 0.505, 1.50015, 1.01),
    ("perceptron", 1.0, 0.5, 0.5, 0.5, 0.0),
    ("sin", 1.0, 0.0, 0.4323323584, 0.3073742912, 0.2706705665),
    ("gelu", 1.0, 0.2820947918, 0.4252214826, 1.3046790972, 0.9729604975),   # <s^4>: mpmath, 30 digits
]


@pytest.mark.parametrize("name,K,m1,m2,m4,m2z", SPEC)
def test_spec_values(name, K, m1, m2, m4, m2z):
    a = act("leaky_relu", slope=0.1) if name == "leaky_relu" else act(name)
    Kb = np.array([[K]])
    f = lambda *fs: closed_form(a, fs, Kb)  # noqa: E731
    s = (0, S, 0)
    assert abs(f(s) - m1) < 1e-10
    assert abs(f(s, s) - m2) < 1e-10
    if m4 is not None:
        assert abs(f(s, s, s, s) - m4) < 1e-9
    else:
        assert f(s, s, s, s) is None
    assert abs(f(s, s, (0, "z", 2)) - K * f(s, s) - m2z) < 1e-9


def test_spec_closed_forms_exact():
    # relu <s^{2k}> = (2k-1)!!/2 K^k, sin^4, sin-sin, perceptron two-input
    relu, sin, perc = act("relu"), act("sin"), act("perceptron")
    for Kv in (0.3, 1.0, 2.7):
        Kb = np.array([[Kv]])
        for k in range(1, 6):
            ref = 0.5 * math.prod(range(2 * k - 1, 0, -2)) * Kv**k
            assert_close(closed_form(relu, ((0, S, 0),) * (2 * k), Kb), ref, rtol=1e-14)
        assert_close(closed_form(sin, ((0, S, 0),) * 4, Kb), (3 - 4 * math.exp(-2 * Kv) + math.exp(-8 * Kv)) / 8, rtol=1e-14)
    K = random_K(2, 3)
    th = math.acos(K[0, 1] / math.sqrt(K[0, 0] * K[1, 1]))
    assert_close(closed_form(perc, ((0, S, 0), (1, S, 0)), K), (math.pi - th) / (2 * math.pi), rtol=1e-14)
    assert_close(
        closed_form(sin, ((0, S, 0), (1, S, 0)), K), math.exp(-(K[0, 0] + K[1, 1]) / 2) * math.sinh(K[0, 1]), rtol=1e-14
    )
    r = math.sqrt(K[0, 0] * K[1, 1])
    assert_close(
        closed_form(relu, ((0, S, 0), (0, S, 0), (1, S, 0), (1, S, 0)), K),
        r * r / (2 * math.pi) * (3 * math.sin(th) * math.cos(th) + (math.pi - th) * (1 + 2 * math.cos(th) ** 2)),
        rtol=1e-14,
    )
    # erf (Williams 1996)
    erf = act("erf")
    d = (1 + 2 * K[0, 0]) * (1 + 2 * K[1, 1])
    assert_close(closed_form(erf, ((0, S, 0), (1, S, 0)), K), 2 / math.pi * math.asin(2 * K[0, 1] / math.sqrt(d)), rtol=1e-14)
    assert_close(closed_form(erf, ((0, S, 1), (1, S, 1)), K), 4 / math.pi / math.sqrt(d - 4 * K[0, 1] ** 2), rtol=1e-14)
    # scale-invariant
    a = pwl(1.3, -0.4)
    Kb = np.array([[0.7]])
    assert_close(closed_form(a, ((0, S, 0),) * 2, Kb), (1.3**2 + 0.4**2) / 2 * 0.7, rtol=1e-14)
    assert_close(closed_form(a, ((0, S, 0),) * 4, Kb), 3 * (1.3**4 + 0.4**4) / 2 * 0.49, rtol=1e-14)


def test_wick_spec_values():
    K = np.array([[2.0, 1, 0], [1, 3, 1], [0, 1, 1]])
    t = act("tanh")
    assert closed_form(t, ((0, "z", 2), (1, "z", 2)), K) == pytest.approx(8.0, abs=1e-13)
    assert closed_form(t, ((0, "z", 2), (1, "z", 1), (2, "z", 1)), K) == pytest.approx(2.0, abs=1e-13)
    assert closed_form(t, ((0, "z", 1), (1, "z", 1), (2, "z", 2)), K) == pytest.approx(1.0, abs=1e-13)
    assert closed_form(t, ((0, "z", 6),), np.array([[2.0]])) == pytest.approx(120.0, abs=1e-12)
    assert closed_form(t, ((0, "z", 3), (1, "z", 2)), K) == 0.0


# ---------------------------------------------------------------------------------------
# 1-slot atoms vs mpmath
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("aname", list(ACTS))
def test_one_slot_vs_mpmath(aname):
    a = ACTS[aname]()
    for i, fs in enumerate(ATOMS1):
        if not has_closed_form(a, fs):
            assert closed_form(a, fs, np.eye(1)) is None
            continue
        Ks = np.array([0.37, 1.9])
        got = closed_form(a, fs, Ks[:, None, None])
        assert got.shape == (2,) and got.dtype == np.float64
        j = i % 2  # one mpmath reference per atom, alternating K (keeps the default run short)
        assert_close(got[j], mp_ref1(product_fn(a, fs, "mp"), Ks[j]))


def test_expected_availability():
    s0, s1 = (0, S, 0), (1, S, 0)
    assert not has_closed_form(act("tanh"), (s0,))
    assert has_closed_form(act("tanh"), ((0, "z", 4), (1, "z", 2)))
    assert has_closed_form(act("erf"), (s0, s0, s1, s1))          # four Heaviside factors
    assert not has_closed_form(act("erf"), (s0, s0, s1, s1, (2, S, 0)))
    assert has_closed_form(act("erf"), (s0, s1, (2, S, 0)))
    assert has_closed_form(act("erf"), ((0, S, 1), (1, S, 2), (2, S, 1), (3, S, 3)))
    assert has_closed_form(act("gelu"), (s0, s0, s1))
    assert has_closed_form(act("gelu"), (s0, s0, s1, s1))
    assert not has_closed_form(act("gelu"), (s0, s0, s1, s1, (2, S, 1)))
    assert has_closed_form(act("gelu"), ((0, S, 1), (1, S, 1), (2, S, 1)))
    assert has_closed_form(act("relu"), ((0, S, 1), (1, S, 1), (2, S, 1)))
    assert has_closed_form(act("relu"), (s0, s1, (2, S, 0)))
    assert has_closed_form(act("relu"), ((0, S, 2), (1, S, 0), (2, S, 0), (3, S, 0)))  # zero
    assert has_closed_form(act("relu"), ((0, S, 1), (1, S, 1), (2, S, 1), (3, S, 1)))
    assert has_closed_form(act("relu"), (s0, s1, (2, S, 0), (3, S, 0)))   # even degree, 4 slots
    assert has_closed_form(act("relu"), (s0, s1, (2, S, 0), (3, S, 1)))  # odd degree, 4 slots
    assert not has_closed_form(act("relu"), (s0, s1, (2, S, 0), (3, S, 1), (4, S, 1)))
    assert has_closed_form(act("sin"), tuple((i, S, i) for i in range(5)))


# ---------------------------------------------------------------------------------------
# 2- and 3-slot atoms vs Gauss-Legendre product rule (double precision)
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("aname", list(ACTS))
def test_two_slot_vs_gl(aname):
    a = ACTS[aname]()
    Ks = np.stack([random_K(2, seed) for seed in (11, 12)] + [np.array([[1.2, -0.9], [-0.9, 0.8]])])
    for fs in ATOMS2:
        if not has_closed_form(a, fs):
            continue
        got = closed_form(a, fs, Ks)
        for K, g in zip(Ks, got):
            ref = gl_ref(product_fn(a, fs, "np"), K)
            assert_close(g, ref, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("aname", list(ACTS))
def test_three_slot_vs_gl(aname):
    a = ACTS[aname]()
    K = random_K(3, 21)
    for fs in ATOMS3:
        if not has_closed_form(a, fs):
            continue
        got = closed_form(a, fs, K)
        ref = gl_ref(product_fn(a, fs, "np"), K)
        assert_close(got, ref, rtol=1e-11, atol=1e-12)


def test_mpmath_two_slot_default():
    K = random_K(2, 5)
    a = act("relu")
    fs = ((0, S, 0), (1, S, 0))
    assert_close(closed_form(a, fs, K), mp_ref2(product_fn(a, fs, "mp"), K))


@pytest.mark.slow
@pytest.mark.parametrize(
    "aname,fs",
    [
        ("relu", ((0, S, 1), (1, S, 1))),
        ("leaky_relu_0.1", ((0, S, 0), (0, S, 0), (1, S, 0), (1, S, 0))),
        ("pwl_1.3_-0.4", ((0, S, 0), (1, S, 1), (1, "z", 2))),
        ("sign", ((0, S, 0), (1, S, 0), (0, "z", 1))),
        ("erf", ((0, S, 0), (1, S, 0))),
        ("erf", ((0, S, 1), (1, S, 0), (1, "z", 1))),
        ("gelu", ((0, S, 0), (1, S, 0))),
        ("gelu", ((0, S, 1), (1, S, 1))),
        ("cos", ((0, S, 0), (1, S, 2), (0, "z", 2))),
        ("poly", ((0, S, 0), (0, S, 0), (1, S, 1))),
    ],
)
def test_two_slot_vs_mpmath_slow(aname, fs, opt_in_slow):
    """Nested 2-D mpmath reference (minutes each)."""
    a = ACTS[aname]()
    K = random_K(2, 7)
    assert_close(closed_form(a, fs, K), mp_ref2(product_fn(a, fs, "mp"), K))


# ---------------------------------------------------------------------------------------
# polynomial / Isserlis exactness at high degree
# ---------------------------------------------------------------------------------------
def test_isserlis_high_degree_vs_gauss_hermite():
    x, w = np.polynomial.hermite_e.hermegauss(12)  # exact for degree <= 23 per dimension
    w = w / np.sqrt(2 * np.pi)
    K = random_K(3, 4)
    C = np.linalg.cholesky(K)
    X = np.stack(np.meshgrid(x, x, x, indexing="ij"), -1).reshape(-1, 3)
    W = np.prod(np.stack(np.meshgrid(w, w, w, indexing="ij"), -1).reshape(-1, 3), axis=1)
    Z = X @ C.T
    t = act("tanh")
    for n in [(12, 0, 0), (4, 4, 4), (6, 3, 3), (5, 4, 3), (2, 7, 3), (1, 1, 10)]:
        fs = tuple((i, "z", p) for i, p in enumerate(n) if p)
        ref = np.sum(W * np.prod(Z**np.array(n), axis=1))
        got = closed_form(t, fs, K)
        assert_close(got, ref, rtol=1e-12, atol=1e-12 * abs(ref) + 1e-13)
    # polynomial activation, 4 slots, total degree 12
    a = poly_act((0.1, -0.7, 0.0, 0.25))
    K4 = random_K(4, 9)
    C4 = np.linalg.cholesky(K4)
    x, w = np.polynomial.hermite_e.hermegauss(8)
    w = w / np.sqrt(2 * np.pi)
    X = np.stack(np.meshgrid(x, x, x, x, indexing="ij"), -1).reshape(-1, 4)
    W = np.prod(np.stack(np.meshgrid(w, w, w, w, indexing="ij"), -1).reshape(-1, 4), axis=1)
    Z = X @ C4.T
    fs = ((0, S, 0), (1, S, 0), (2, S, 0), (3, S, 0))
    ref = np.sum(W * product_fn(a, fs, "np")(*Z.T))
    assert_close(closed_form(a, fs, K4), ref)


def test_trig_four_slots_vs_gauss_hermite():
    x, w = np.polynomial.hermite_e.hermegauss(30)
    w = w / np.sqrt(2 * np.pi)
    K = random_K(4, 17)
    C = np.linalg.cholesky(K)
    X = np.stack(np.meshgrid(x, x, x, x, indexing="ij"), -1).reshape(-1, 4)
    W = np.prod(np.stack(np.meshgrid(w, w, w, w, indexing="ij"), -1).reshape(-1, 4), axis=1)
    Z = X @ C.T
    for a in (act("sin"), act("cos")):
        for fs in [
            ((0, S, 0), (1, S, 1), (2, S, 2), (3, S, 3)),
            ((0, S, 0), (0, S, 0), (1, S, 0), (2, S, 1), (3, "z", 2)),
            ((0, S, 1), (1, S, 0), (2, S, 0), (3, S, 0), (0, "z", 1), (1, "z", 1)),
        ]:
            ref = np.sum(W * product_fn(a, fs, "np")(*Z.T))
            assert_close(closed_form(a, fs, K), ref, rtol=1e-11, atol=1e-13)


def test_erf_gaussian_parts_four_slots_vs_gauss_hermite():
    x, w = np.polynomial.hermite_e.hermegauss(40)
    w = w / np.sqrt(2 * np.pi)
    K = random_K(4, 23)
    C = np.linalg.cholesky(K)
    X = np.stack(np.meshgrid(x, x, x, x, indexing="ij"), -1).reshape(-1, 4)
    W = np.prod(np.stack(np.meshgrid(w, w, w, w, indexing="ij"), -1).reshape(-1, 4), axis=1)
    Z = X @ C.T
    for a, fs in [
        (act("erf"), ((0, S, 1), (1, S, 2), (2, S, 1), (3, S, 3))),
        (act("erf"), ((0, S, 0), (1, S, 2), (2, S, 0), (3, S, 1))),
        (act("gelu"), ((0, S, 2), (1, S, 2), (2, S, 0), (3, S, 1))),
    ]:
        ref = np.sum(W * product_fn(a, fs, "np")(*Z.T))
        assert_close(closed_form(a, fs, K), ref, rtol=1e-11, atol=1e-13)


# ---------------------------------------------------------------------------------------
# degenerate covariances
# ---------------------------------------------------------------------------------------
DEG_ATOMS2 = [a for a in ATOMS2]


@pytest.mark.parametrize("aname", list(ACTS))
def test_duplicate_samples(aname):
    """rho = +1: E[f(z1)g(z2)] = E[f(z)g(z)]; rho = -1: E[f(z)g(-z)]."""
    a = ACTS[aname]()
    for fs in DEG_ATOMS2:
        if not has_closed_form(a, fs):
            continue
        for k1, k2 in ((0.8, 0.8), (0.5, 1.7)):
            for sgn in (1.0, -1.0):
                c = sgn * math.sqrt(k1 * k2)
                K = np.array([[k1, c], [c, k2]])
                # z2 = sgn*sqrt(k2/k1) z1
                r = sgn * math.sqrt(k2 / k1)
                F = product_fn(a, fs, "np")
                ref = gl_ref(lambda z: F(z, r * z), np.array([[k1]]))
                got = closed_form(a, fs, K)
                assert_close(got, ref, rtol=1e-11, atol=1e-12)


def _side_value(a, fs, slot, side):
    """Product of the slot-``slot`` factors of ``fs`` at z = 0+ (side=+1) or 0- (side=-1)."""
    z = np.array(side * 1e-300)
    v = 1.0
    for s, k, o in fs:
        if s == slot:
            v *= float(np_sigma(a, o)(z)) if k == "sigma" else float(z**o)
    return v


@pytest.mark.parametrize("aname", list(ACTS))
def test_zero_variance(aname):
    """K_11 = 0: z_1 = 0 and the limit K_11 -> 0+ averages the two sides of a kink."""
    a = ACTS[aname]()
    for fs in ATOMS2 + [((0, S, 0), (0, S, 1), (1, S, 0))]:
        if not has_closed_form(a, fs):
            continue
        K = np.array([[0.0, 0.0], [0.0, 1.3]])
        v0 = 0.5 * (_side_value(a, fs, 0, 1) + _side_value(a, fs, 0, -1))
        rest = tuple((0, k, o) for s, k, o in fs if s == 1)
        ref = v0 * gl_ref(product_fn(a, rest, "np"), np.array([[1.3]]))
        assert_close(closed_form(a, fs, K), ref, rtol=1e-11, atol=1e-13)
    for fs in ATOMS1:
        if has_closed_form(a, fs):
            ref = 0.5 * (_side_value(a, fs, 0, 1) + _side_value(a, fs, 0, -1))
            assert_close(closed_form(a, fs, np.zeros((1, 1))), ref, rtol=1e-12)


@pytest.mark.parametrize("aname", list(ACTS))
def test_tiny_and_singular_no_nan(aname):
    a = ACTS[aname]()
    rng = np.random.default_rng(0)
    v = rng.normal(size=(3, 1))
    Ks = [
        1e-12 * random_K(3, 1),
        v @ v.T,  # rank one
        np.array([[1.0, 1.0, -1.0], [1.0, 1.0, -1.0], [-1.0, -1.0, 1.0]]),
        np.diag([0.0, 1.0, 0.0]),
        np.zeros((3, 3)),
    ]
    Kb = np.stack(Ks)
    for fs in ATOMS1 + ATOMS2 + ATOMS3:
        if has_closed_form(a, fs):
            out = closed_form(a, fs, Kb)
            assert out.shape == (5,) and np.all(np.isfinite(out))


@pytest.mark.parametrize("aname", ["relu", "pwl_1.3_-0.4", "perceptron", "sign"])
def test_homogeneity_tiny_scale(aname):
    """Piecewise-linear/step atoms are homogeneous of degree (#sigma + #z)/2... in K."""
    a = ACTS[aname]()
    K = random_K(2, 31)
    for fs in ATOMS2:
        if not has_closed_form(a, fs):
            continue
        deg = sum(o for _, k, o in fs if k == "z")
        if a.family == "piecewise_linear":
            deg += sum(1 for _, k, o in fs if k == "sigma" and o == 0)
        assert_close(closed_form(a, fs, 1e-12 * K), closed_form(a, fs, K) * 1e-6**deg, rtol=1e-13, atol=0)


def test_near_degenerate_continuity():
    """rho -> +-1 and K_11 -> 0 approach the exact limits smoothly."""
    for aname in ("relu", "abs", "perceptron", "erf", "gelu"):
        a = ACTS[aname]()
        for fs in ATOMS2[:4]:
            if not has_closed_form(a, fs):
                continue
            for sgn in (1, -1):
                Ke = np.array([[1.0, sgn * 1.0], [sgn * 1.0, 1.0]])
                Kn = np.array([[1.0, sgn * (1 - 1e-12)], [sgn * (1 - 1e-12), 1.0]])
                assert abs(closed_form(a, fs, Ke) - closed_form(a, fs, Kn)) < 1e-5


# ---------------------------------------------------------------------------------------
# interface
# ---------------------------------------------------------------------------------------
def test_batch_shape_unused_slots_and_errors():
    a = act("relu")
    Ks = np.stack([random_K(3, s) for s in range(6)]).reshape(2, 3, 3, 3)
    fs = ((0, S, 0), (2, S, 0))
    out = closed_form(a, fs, Ks)
    assert out.shape == (2, 3) and out.dtype == np.float64
    sub = Ks[..., [0, 2], :][..., :, [0, 2]]
    assert np.array_equal(out, closed_form(a, ((0, S, 0), (1, S, 0)), sub))
    assert closed_form(act("tanh"), ((0, S, 0),), np.eye(1)) is None
    with pytest.raises(DomainError):
        closed_form(a, ((0, "x", 1),), np.eye(1))
    with pytest.raises(DomainError):
        closed_form(a, ((3, S, 0),), np.eye(2))
    with pytest.raises(DomainError):
        closed_form(a, ((0, S, -1),), np.eye(1))
    assert closed_form(a, (), np.eye(2)) == 1.0
    # list input
    assert closed_form(a, [(0, S, 0), (0, S, 0)], [[2.0]]) == pytest.approx(1.0, rel=1e-15)


# ---------------------------------------------------------------------------------------
# the real registry (effth.activations), when available
# ---------------------------------------------------------------------------------------
CLOSED_FAMILIES = {"polynomial", "piecewise_linear", "step", "erf", "gelu", "trig"}


@pytest.mark.skipif(_get_activation is None, reason="effth.activations not available")
def test_registry_activations_vs_own_numpy():
    from effth.activations import available_activations

    K2 = random_K(2, 41)
    atoms = [((0, S, 0), (0, S, 0)), ((0, S, 1), (1, S, 1)), ((0, S, 0), (1, S, 0)), ((0, S, 0), (1, S, 1), (1, "z", 1))]
    checked = 0
    for name in available_activations():
        try:
            a = _get_activation(name)
        except Exception:
            continue
        assert has_closed_form(a, atoms[0]) == (a.family in CLOSED_FAMILIES), name
        if any(c != 0 for c in getattr(a, "kinks", ())):
            continue
        for fs in atoms:
            if not has_closed_form(a, fs):
                continue
            fns = {o: a.numpy(o) for _, k, o in fs if k == "sigma"}

            def F(*z, fs=fs, fns=fns):
                v = 1.0
                for s, k, o in fs:
                    v = v * (fns[o](z[s]) if k == "sigma" else z[s] ** o)
                return v

            assert_close(closed_form(a, fs, K2), gl_ref(F, K2), rtol=1e-11, atol=1e-12)
            checked += 1
    assert checked > 20


# ---------------------------------------------------------------------------------------
# three and four slots: degenerate embeddings and Monte Carlo
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("aname", ["relu", "pwl_1.3_-0.4", "step_-0.5_2", "erf", "gelu", "sin"])
def test_three_slot_duplicate_embedding(aname):
    """z_3 = r z_2 (r = +-1, +-0.7): reduces to a 2-D integral."""
    a = ACTS[aname]()
    K2 = random_K(2, 51)
    for r in (1.0, -1.0, 0.7, -0.7):
        T3 = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, r]])
        K3 = T3 @ K2 @ T3.T
        for fs in ATOMS3:
            if not has_closed_form(a, fs):
                continue
            F = product_fn(a, fs, "np")
            ref = gl_ref(lambda z1, z2: F(z1, z2, r * z2), K2)
            assert_close(closed_form(a, fs, K3), ref, rtol=1e-11, atol=1e-12)


def test_four_slot_odd_degree():
    """relu/step 4-slot atoms of odd degree: duplicate embedding (exact) and Monte Carlo."""
    a = act("relu")
    atoms = [((0, S, 0), (1, S, 1), (2, S, 1), (3, S, 1)), ((0, S, 0), (1, S, 0), (2, S, 0), (3, S, 1))]
    K3 = random_K(3, 61)
    T4 = np.array([[1.0, 0, 0], [0, 1.0, 0], [0, 0, 1.0], [1.3, 0, 0]])
    K4 = T4 @ K3 @ T4.T
    for fs in atoms:
        assert has_closed_form(a, fs)
        F = product_fn(a, fs, "np")
        ref = gl_ref(lambda z1, z2, z3: F(z1, z2, z3, 1.3 * z1), K3, n=60)
        assert_close(closed_form(a, fs, K4), ref, rtol=1e-10, atol=1e-12)
    K4 = random_K(4, 62)
    rng = np.random.default_rng(63)
    Z = rng.multivariate_normal(np.zeros(4), K4, size=400_000)
    for fs in atoms:
        F = product_fn(a, fs, "np")
        v = F(*Z.T)
        se = v.std() / math.sqrt(len(v))
        assert abs(closed_form(a, fs, K4) - v.mean()) < 5 * se


@pytest.mark.parametrize("aname,orders", [
    ("relu", (0, 0, 0, 0)), ("relu", (1, 1, 0, 0)), ("relu", (1, 1, 1, 1)),
    ("pwl_1.3_-0.4", (0, 0, 0, 0)), ("abs", (1, 0, 1, 0)), ("sign", (0, 0, 0, 0)),
    ("step_-0.5_2", (0, 0, 0, 0))])
def test_four_slot_even_degree_vs_gl(aname, orders):
    """Four slots of even degree end on the quadrivariate orthant probability (a 1-D integral):
    against the 4-D Gauss-Legendre product rule split at the kinks (converged to 1e-15 at 24
    nodes per half line: 12 nodes give 2e-6, 16 give 5e-9, 20 give 4e-12)."""
    a = ACTS[aname]()
    fs = tuple((i, S, o) for i, o in enumerate(orders))
    assert has_closed_form(a, fs)
    K = random_K(4, 62)
    ref = gl_ref(product_fn(a, fs, "np"), K, n=24, L=9.0)
    assert_close(closed_form(a, fs, K), ref, rtol=1e-11, atol=1e-13)


@pytest.mark.parametrize("aname,orders", [("erf", (0, 0, 0, 0)), ("erf", (0, 0, 0, 0, 2)),
                                          ("gelu", (0, 0, 0, 0)), ("gelu", (1, 0, 1, 0))])
def test_four_heaviside_smooth_vs_quadrature(aname, orders):
    """erf and GELU atoms with four Heaviside factors (auxiliary noise) against effth's
    quadrature backend at rtol 1e-12 (an independent code path)."""
    import warnings

    from effth import gaussian_expectation
    from effth.errors import AccuracyWarning

    a = ACTS[aname]()
    fs = tuple((i % 4, S, o) for i, o in enumerate(orders))
    assert has_closed_form(a, fs)
    K = random_K(4, 64)
    with warnings.catch_warnings():      # the reference's own estimate sits at rtol on one atom
        warnings.simplefilter("ignore", AccuracyWarning)
        ref = gaussian_expectation(list(fs), K, a, method="quadrature", rtol=1e-12)
    assert_close(closed_form(a, fs, K), ref, rtol=1e-11, atol=1e-13)


def test_near_duplicate_three_slot_continuity():
    for aname in ("relu", "perceptron", "abs"):
        a = ACTS[aname]()
        K2 = random_K(2, 71)
        for fs in ATOMS3:
            if not has_closed_form(a, fs):
                continue
            for r in (1.0, -1.0):
                T3 = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, r]])
                Ke = T3 @ K2 @ T3.T
                Kn = Ke + 1e-10 * np.diag([0.0, 0.0, 1.0])
                assert abs(closed_form(a, fs, Ke) - closed_form(a, fs, Kn)) < 1e-4


# ------------------------------------------- accuracy near orthogonal and near parallel inputs
def _mp_two_slot(name, fac, K):
    """High-precision (mpmath, dps = 40) values of two-slot atoms from their classical formulas
    (Cho & Saul 2009 arc-cosine kernels; Williams 1996 for erf; the characteristic function for
    sin/cos), evaluated at the float64 entries of ``K`` (so the reference sees the same input)."""
    with mp.workdps(40):
        k11, k12, k22 = (mp.mpf(float(K[i, j])) for i, j in ((0, 0), (0, 1), (1, 1)))
        s = mp.sqrt(k11 * k22)
        r = k12 / s
        th = mp.acos(r)
        relu_ss = s / (2 * mp.pi) * (mp.sin(th) + (mp.pi - th) * mp.cos(th))
        relu_dd = (mp.pi - th) / (2 * mp.pi)
        a = mp.mpf("0.01")                         # leaky_relu = (1 - a) relu(z) + a z
        table = {
            ("relu", "ss"): relu_ss, ("relu", "dd"): relu_dd,
            ("abs", "ss"): 2 * s / mp.pi * (mp.sqrt(1 - r * r) + r * mp.asin(r)),
            ("abs", "dd"): 2 / mp.pi * mp.asin(r),
            ("sign", "ss"): 2 / mp.pi * mp.asin(r),
            ("leaky_relu", "ss"): (1 - a) ** 2 * relu_ss + a * (1 - a) * k12 + a * a * k12,
            ("leaky_relu", "dd"): (1 - a) ** 2 * relu_dd + a * (1 - a) + a * a,
            ("erf", "ss"): 2 / mp.pi * mp.asin(2 * k12 / mp.sqrt((1 + 2 * k11) * (1 + 2 * k22))),
            ("erf", "dd"): 4 / mp.pi / mp.sqrt((1 + 2 * k11) * (1 + 2 * k22) - 4 * k12 ** 2),
            ("sin", "ss"): mp.exp(-(k11 + k22) / 2) * mp.sinh(k12),
            ("sin", "dd"): mp.exp(-(k11 + k22) / 2) * mp.cosh(k12),
            ("cos", "ss"): mp.exp(-(k11 + k22) / 2) * mp.cosh(k12),
        }
        if name != "gelu":
            return table[(name, fac)]
        # GELU: condition on z1; z2 | z1 ~ N(m, v) and E[x Phi(x)], E[Phi(x) + x phi(x)] of a
        # Gaussian x are elementary; the remaining 1-D integral by tanh-sinh quadrature
        v = k22 - k12 ** 2 / k11
        c = mp.sqrt(1 + v)

        def inner(m):
            if fac == "ss":
                return m * mp.ncdf(m / c) + v * mp.npdf(m / c) / c
            return mp.ncdf(m / c) + m * mp.npdf(m, 0, c) / (1 + v)

        g1 = (lambda z: z * mp.ncdf(z)) if fac == "ss" else (lambda z: mp.ncdf(z) + z * mp.npdf(z))
        sd = mp.sqrt(k11)
        return mp.quad(lambda x: g1(sd * x) * inner(k12 / sd * x) * mp.npdf(x), [-mp.inf, 0, mp.inf])


_ODD_AT_ZERO = {("abs", "dd"), ("sign", "ss"), ("erf", "ss"), ("sin", "ss")}
_KINKED_DERIV = {("relu", "dd"), ("abs", "dd"), ("sign", "ss"), ("leaky_relu", "dd")}
_RHOS = [0.0, 1e-12, 1e-8, 1e-4, -1e-8, 0.3, -0.3, 1 - 1e-6, 1 - 1e-10, -1 + 1e-6, -1 + 1e-10]


@pytest.mark.parametrize("name,fac", [
    ("relu", "ss"), ("relu", "dd"), ("abs", "ss"), ("abs", "dd"), ("sign", "ss"),
    ("leaky_relu", "ss"), ("leaky_relu", "dd"), ("erf", "ss"), ("erf", "dd"),
    ("gelu", "ss"), ("gelu", "dd"), ("sin", "ss"), ("sin", "dd"), ("cos", "ss")])
def test_two_slot_accuracy_near_orthogonal_and_parallel_inputs(name, fac):
    """The accuracy stated in docs/closed_forms.md, "Accuracy notes", against 40-digit values:
    absolute error <= 1e-15 (K of unit scale) everywhere, except the kinked derivative atoms
    (Theta(z) factors: arc-cosine kernels of degree 0) near rho = +-1, where it is
    <= 8 eps / sqrt(1 - rho^2) (the conditioning of the angle through det K); relative error
    <= 1e-14 where the atom is of unit size, and <= 4 eps / |rho| near rho = 0 for the atoms
    odd in rho (which vanish there)."""
    act = _get_activation(name)
    factors = {"ss": [(0, "sigma", 0), (1, "sigma", 0)], "dd": [(0, "sigma", 1), (1, "sigma", 1)]}[fac]
    eps = np.finfo(float).eps
    rhos = _RHOS if name != "gelu" else [1e-8, -1 + 1e-10]
    for rho in rhos:
        k1, k2 = 1.3, 0.7
        K = np.array([[k1, rho * math.sqrt(k1 * k2)], [rho * math.sqrt(k1 * k2), k2]])
        ref = _mp_two_slot(name, fac, K)
        got = float(closed_form(act, factors, K))
        err = float(abs(mp.mpf(got) - ref))
        sin_theta = math.sqrt(max(1.0 - rho * rho, 1e-300))
        abs_bound = 1e-15 + (8 * eps / sin_theta if (name, fac) in _KINKED_DERIV else 0.0)
        assert err <= abs_bound, (rho, err, abs_bound)
        if (name, fac) in _ODD_AT_ZERO and abs(rho) < 0.1 and rho != 0:
            assert err <= 4 * eps / abs(rho) * abs(float(ref)), (rho, err)
        elif abs(float(ref)) > 0.05 and (name, fac) not in _KINKED_DERIV:
            assert err <= 1e-14 * abs(float(ref)), (rho, err, float(ref))
