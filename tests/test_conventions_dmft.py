"""The conventions of ``docs/conventions.md`` on the DMFT half and the trainer.

* ``depth`` counts weight layers, ``hidden_layers = depth - 1`` (the DMFT paper's L); give one;
* ``seed=`` and ``widths=`` (never ``seeds=``, ``width=``);
* every activation spelling (registry name, alias, ``Activation``, SymPy expression) is accepted;
  the trainer runs any registered activation with an a.e. derivative;
* theory and measurement are read alike: ``value``, ``stderr``, ``layers`` with the same names and
  shapes, so ``dmft.value("f") - run.value("f")`` is one line;
* one-line reprs.
"""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

import effth as et
from effth.errors import DomainError
from effth.simulation import simulate_training
from effth.dmft import (
    compare_approximations,
    gamma0_leading_order,
    gamma0_series,
    solve_deep_linear,
    solve_monte_carlo,
    solve_two_layer,
)
from effth.dmft.series.gamma0 import latex_coefficient

KX = np.array([[1.0, 0.5], [0.5, 1.0]])
X = np.linalg.cholesky(2 * KX)
Y = np.array([1.0, -0.5])
Y2 = np.array([[1.0, 0.3], [-0.5, 0.8]])


# ---------------------------------------------------------------------------- depth
def test_depth_and_hidden_layers_are_one_network():
    a = solve_deep_linear(kernel=KX, y=Y, depth=3, gamma0=1.0, eta=0.05, steps=8)
    b = solve_deep_linear(kernel=KX, y=Y, hidden_layers=2, gamma0=1.0, eta=0.05, steps=8)
    assert a.depth == b.depth == 3 and a.hidden_layers == b.hidden_layers == 2
    assert a.layers == (1, 2) and a.phi.shape[0] == 2
    np.testing.assert_array_equal(a.f, b.f)
    np.testing.assert_array_equal(a.phi, b.phi)
    kw = dict(kernel=KX, y=Y, gamma0=1.0, eta=0.1, steps=4, samples=200, iterations=2, seed=0)
    np.testing.assert_array_equal(solve_monte_carlo(depth=3, **kw).f,
                                  solve_monte_carlo(hidden_layers=2, **kw).f)
    s1 = gamma0_series(kernel=KX, y=Y, depth=3, eta=0.1, steps=5, order=2)
    s2 = gamma0_series(kernel=KX, y=Y, hidden_layers=2, eta=0.1, steps=5, order=2)
    assert s1.depth == 3 and s1.hidden_layers == 2 and s1.layers == (1, 2)
    np.testing.assert_array_equal(s1.coefficient(2, "ntk"), s2.coefficient(2, "ntk"))
    l1 = gamma0_leading_order(kernel=KX, y=Y, depth=3, times=[1.0])
    l2 = gamma0_leading_order(kernel=KX, y=Y, hidden_layers=2, times=[1.0])
    np.testing.assert_array_equal(l1["ntk2"], l2["ntk2"])
    assert latex_coefficient(2, "ntk", depth=3) == latex_coefficient(2, "ntk", hidden_layers=2)
    assert latex_coefficient(2, "ntk") != latex_coefficient(2, "ntk", depth=3)   # symbolic L
    c = compare_approximations(kernel=KX, y=Y, depth=3, gamma0=0.3, eta=0.05, steps=6)
    assert c.depth == 3 and c.hidden_layers == 2
    r1 = simulate_training(X, Y, depth=3, widths=16, gamma0=1.0, eta=0.1, steps=3)
    r2 = simulate_training(X, Y, hidden_layers=2, widths=16, gamma0=1.0, eta=0.1, steps=3)
    assert r1.depth == 3 and r1.hidden_layers == 2 and r1.layers == (1, 2)
    np.testing.assert_array_equal(r1.f, r2.f)


@pytest.mark.parametrize("call", [
    lambda **k: solve_deep_linear(kernel=KX, y=Y, gamma0=1.0, eta=0.05, steps=4, **k),
    lambda **k: solve_monte_carlo(kernel=KX, y=Y, gamma0=1.0, eta=0.05, steps=4, samples=8, **k),
    lambda **k: gamma0_series(kernel=KX, y=Y, eta=0.05, steps=4, **k),
    lambda **k: gamma0_leading_order(kernel=KX, y=Y, times=[1.0], **k),
    lambda **k: compare_approximations(kernel=KX, y=Y, gamma0=0.1, eta=0.05, steps=4, **k),
    lambda **k: latex_coefficient(2, "ntk", **k),
    lambda **k: simulate_training(X, Y, widths=4, gamma0=1.0, eta=0.1, steps=2, **k),
])
def test_depth_keywords_are_checked(call):
    with pytest.raises(DomainError, match="exactly one"):
        call(depth=3, hidden_layers=2)
    with pytest.raises(DomainError, match="shallow"):
        call(depth=1)
    with pytest.raises(DomainError, match="integer"):
        call(depth=2.5)


# ---------------------------------------------------------------------------- spelling
def test_seed_and_widths_spelling():
    kw = dict(hidden_layers=1, gamma0=1.0, eta=0.1, steps=3)
    with pytest.raises(TypeError):
        simulate_training(X, Y, widths=8, seeds=(0, 1), **kw)
    with pytest.raises(TypeError):
        simulate_training(X, Y, width=8, seed=0, **kw)
    one = simulate_training(X, Y, widths=8, seed=3, **kw)
    two = simulate_training(X, Y, widths=8, seed=[3, 4], **kw)
    assert one.seed == (3,) and two.seed == (3, 4) and one.widths == 8
    np.testing.assert_array_equal(one.f[0], two.f[0])             # same draws per seed
    np.testing.assert_array_equal(
        simulate_training(X, Y, widths=np.int64(8), seed=np.random.SeedSequence(5), **kw).f,
        simulate_training(X, Y, widths=8, seed=np.random.SeedSequence(5), **kw).f)
    deep = dict(kw, hidden_layers=2)
    np.testing.assert_array_equal(simulate_training(X, Y, widths=(8, 8), seed=1, **deep).f,
                                  simulate_training(X, Y, widths=8, seed=1, **deep).f)
    # unequal widths (Bordelon & Pehlevan (2022), App. D.8) are one width per hidden layer
    assert simulate_training(X, Y, widths=(8, 16), seed=1, **deep).widths == (8, 16)
    with pytest.raises(DomainError, match="widths"):
        simulate_training(X, Y, widths=(8, 8, 8), seed=1, **deep)
    with pytest.raises(DomainError, match="widths"):
        simulate_training(X, Y, widths=0, seed=1, **kw)
    with pytest.raises(DomainError, match="seed"):
        simulate_training(X, Y, widths=8, seed=[0.5], **kw)


# ---------------------------------------------------------------------------- activations
def test_every_spelling_of_an_activation_gives_the_same_numbers():
    z = sp.Symbol("z")
    spellings = ["tanh", "TANH", et.get_activation("tanh"), sp.tanh(z)]
    mc = [solve_monte_carlo(kernel=KX, y=Y, hidden_layers=2, gamma0=1.0, eta=0.1, steps=4,
                            samples=200, iterations=2, seed=0, activation=a) for a in spellings]
    two = [solve_two_layer(kernel=KX, y=Y, gamma0=1.0, eta=0.1, steps=5, nodes=10, activation=a)
           for a in spellings]
    ser = [gamma0_series(kernel=KX, y=Y, hidden_layers=1, eta=0.1, steps=5, order=2, nodes=10,
                         activation=a) for a in spellings]
    sim = [simulate_training(X, Y, hidden_layers=2, widths=16, gamma0=1.0, eta=0.1, steps=3,
                             activation=a) for a in spellings]
    for group, get in ((mc, lambda r: r.f), (two, lambda r: r.f),
                       (ser, lambda r: r.coefficient(2, "f")), (sim, lambda r: r.f)):
        for r in group[1:3]:                           # alias, Activation: the same object
            np.testing.assert_array_equal(get(r), get(group[0]))
        # the SymPy expression: its own lambdified callables and quadrature of the lazy kernels
        np.testing.assert_allclose(get(group[3]), get(group[0]), rtol=1e-9, atol=1e-11)
    # the identity as an alias or expression is the deep linear network
    lin = gamma0_series(kernel=KX, y=Y, hidden_layers=2, eta=0.1, steps=5, order=2)
    for a in ("identity", z):
        other = gamma0_series(kernel=KX, y=Y, hidden_layers=2, eta=0.1, steps=5, order=2,
                              activation=a)
        np.testing.assert_allclose(other.coefficient(2, "f"), lin.coefficient(2, "f"), atol=1e-14)


def test_kinked_activations_only_refused_where_smoothness_is_needed():
    with pytest.raises(DomainError, match="kinks"):
        gamma0_series(kernel=KX, y=Y, hidden_layers=1, eta=0.1, steps=4, activation="relu")
    r = solve_monte_carlo(kernel=KX, y=Y, hidden_layers=2, gamma0=1.0, eta=0.1, steps=3,
                          samples=100, iterations=1, activation="leaky_relu")
    assert np.all(np.isfinite(r.f))
    for a in ("relu", "abs", "leaky_relu"):
        assert np.all(np.isfinite(simulate_training(X, Y, hidden_layers=1, widths=8, gamma0=1.0,
                                                    eta=0.1, steps=2, activation=a).f))
    with pytest.raises(DomainError, match="delta"):
        simulate_training(X, Y, hidden_layers=1, widths=8, gamma0=1.0, eta=0.1, steps=2,
                          activation="step")
    with pytest.raises(et.UnknownActivationError):
        simulate_training(X, Y, hidden_layers=1, widths=8, gamma0=1.0, eta=0.1, steps=2,
                          activation="foo")


@pytest.mark.parametrize("activation", ["gelu", "silu"])
def test_trainer_runs_registry_activations_against_the_dmft(activation):
    """Width-4000 networks (4 seeds) with gelu / silu match the two-layer DMFT within 5 standard
    errors (at this width the O(1/N) bias is below the noise: max|z| 2.7-3.1 on phi); tanh's DMFT
    solution is rejected by the same test."""
    theory = solve_two_layer(X, Y, activation=activation, gamma0=1.0, eta=0.1, steps=12, nodes=16)
    wrong = solve_two_layer(X, Y, activation="tanh", gamma0=1.0, eta=0.1, steps=12, nodes=16)
    run = simulate_training(X, Y, hidden_layers=1, widths=4000, activation=activation,
                            gamma0=1.0, eta=0.1, steps=12, seed=range(4))

    # f(t_0) = 0 exactly in both (centred outputs): the only entries without spread.
    assert np.max(np.abs(run.value("f")[0])) < 1e-12
    assert np.max(np.abs(theory.value("f")[0])) < 1e-12
    assert np.all(run.stderr("f")[1:] > 0)

    def z(th, name, layer=None):
        return et.compare(th, run, name, layer).max_abs_z     # entries with stderr > 0

    for name, layer in (("f", None), ("ntk", None), ("phi", 1), ("g", 1)):
        assert z(theory, name, layer) < 5, (activation, name)
    assert max(z(wrong, n, l) for n, l in (("f", None), ("ntk", None), ("phi", 1))) > 10


# ---------------------------------------------------------------------------- results
@pytest.mark.parametrize("y", [Y, Y2], ids=["one output", "two outputs"])
def test_theory_and_measurement_read_alike(y):
    T = 6
    dmft = solve_deep_linear(X, y, hidden_layers=2, gamma0=1.0, eta=0.05, steps=T)
    mc = solve_monte_carlo(X, y, hidden_layers=2, gamma0=1.0, eta=0.05, steps=T, samples=200,
                           iterations=2, activation="linear")
    run = simulate_training(X, y, hidden_layers=2, widths=32, gamma0=1.0, eta=0.05, steps=T,
                            activation="linear", seed=[0, 1, 2])
    n, C = 2, (() if y.ndim == 1 else (2,))
    shapes = {"f": (T, n) + C, "loss": (T,), "ntk": (T, n, n) + C + C}
    for res in (dmft, mc, run):
        assert res.layers == (1, 2)
        for name, shape in shapes.items():
            assert res.value(name).shape == shape, (type(res).__name__, name)
        assert res.value("phi", layer=2).shape == (T, n, T, n)
        assert res.value("g", layer=1).shape == (T, n, T, n) + C + C
        with pytest.raises(DomainError, match="layer"):
            res.value("phi", layer=3)
        with pytest.raises(DomainError, match="layer"):
            res.value("f", layer=1)
        with pytest.raises(DomainError, match="name"):
            res.value("kernel")
    diff = dmft.value("f") - run.value("f")                        # theory meets measurement
    assert diff.shape == shapes["f"]
    assert run.stderr("f").shape == shapes["f"] and dmft.stderr("f") is None
    assert mc.stderr("phi", layer=1).shape == (T, n, T, n)
    assert run.stderr("g", layer=2).shape == (T, n, T, n) + C + C
    one = simulate_training(X, y, hidden_layers=2, widths=8, gamma0=1.0, eta=0.05, steps=T)
    assert one.stderr("f") is None                                 # one network: no spread
    # DMFTResult.ntk is the equal-time NTK per step; the two-time one is ntk_two_time
    K2 = dmft.ntk_two_time
    idx = np.arange(T)
    np.testing.assert_array_equal(dmft.ntk, K2[idx, :, idx, :])
    ser = gamma0_series(X, Y, hidden_layers=2, eta=0.05, steps=T, order=2)
    assert ser.value("f", gamma0=0.5).shape == (T, n) and ser.stderr("f") is None
    assert ser.value("phi", layer=1, gamma0=0.5).shape == (T, n, T, n)
    assert ser.value("g", layer=2, gamma0=0.5).shape == (T, n, T, n)
    np.testing.assert_allclose(ser.value("ntk", gamma0=0.5, order=0), ser.coefficient(0, "ntk"))


def test_short_reprs():
    dmft = solve_deep_linear(X, Y, hidden_layers=2, gamma0=1.0, eta=0.05, steps=5)
    run = simulate_training(X, Y, hidden_layers=2, widths=8, gamma0=1.0, eta=0.05, steps=5)
    ser = gamma0_series(X, Y, hidden_layers=2, eta=0.05, steps=5, order=2)
    cmp_ = compare_approximations(X, Y, hidden_layers=2, gamma0=0.3, eta=0.05, steps=5)
    user = solve_two_layer(X, Y, gamma0=1.0, eta=0.1, steps=3, nodes=6,
                           activation=sp.sin(sp.Symbol("z")))
    for obj in (dmft, dmft.diagnostics, run, ser, cmp_, dmft.grid, dmft.data, user):
        text = repr(obj)
        assert "\n" not in text and len(text) < 300, text
        assert "array" not in text
    for obj in (dmft, dmft.diagnostics, run, ser, cmp_, dmft.grid, dmft.data):
        assert obj._repr_html_().startswith("<table")
    assert "depth=3" in repr(dmft) and "hidden_layers=2" in repr(run)
