"""The package's one set of conventions (docs/conventions.md), pinned across both halves.

Area files hold the details (tests/test_conventions_pdlt.py, _simulation.py, _dmft.py); this file
pins what must agree *between* the halves: the meaning of ``depth``, the keyword spellings, the
activation registry honoured by every solver and simulator, and that theory and measurement of
the same quantity have the same shape and access.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import effth as et
from effth import DomainError

X = np.array([[1.0, 0.3, -0.2], [0.1, -0.8, 0.5]])
Y = np.array([0.5, -0.4])


# ------------------------------------------------------------------ depth means one thing
def test_depth_counts_weight_layers_everywhere():
    """A network with two hidden layers is depth=3 for the book's flow, the ensembles, the DMFT
    solvers and the trainer alike; hidden_layers=2 names the same network."""
    net = et.MLP("tanh", depth=3, widths=16)
    assert len(net.hidden_widths) == 2
    fl = et.flow(net, X)
    assert tuple(fl.layers) == (1, 2, 3)
    ens = et.simulate_ensemble(net, X, networks=8, seed=0)
    assert max(ens.layers) == 3
    kw = dict(gamma0=0.5, eta=0.2, steps=3)
    a = et.dmft.solve_deep_linear(X, Y, depth=3, **kw)
    b = et.dmft.solve_deep_linear(X, Y, hidden_layers=2, **kw)
    assert a.depth == b.depth == 3 and a.hidden_layers == b.hidden_layers == 2
    np.testing.assert_array_equal(a.f, b.f)
    assert a.layers == (1, 2)                        # phi^1, phi^2: the hidden layers
    run = et.simulate_training(X, Y, depth=3, widths=16, activation="linear", seed=0, **kw)
    assert run.depth == 3 and run.hidden_layers == 2
    with pytest.raises(DomainError, match="exactly one"):
        et.dmft.solve_deep_linear(X, Y, depth=3, hidden_layers=2, **kw)
    ser = et.dmft.gamma0_series(X, Y, depth=3, eta=0.2, steps=3, order=2)
    assert ser.depth == 3 and ser.hidden_layers == 2


# ------------------------------------------------------------------ one spelling per keyword
PUBLIC_CALLS = [et.MLP, et.flow, et.ntk_flow, et.simulate_ensemble, et.simulation.simulate_ntk_ensemble,
                et.simulate_training, et.dmft.solve_deep_linear, et.dmft.solve_monte_carlo,
                et.dmft.solve_two_layer, et.dmft.gamma0_series, et.dmft.compare_approximations]


@pytest.mark.parametrize("fn", PUBLIC_CALLS, ids=lambda f: f.__name__)
def test_one_spelling_per_keyword(fn):
    params = set(inspect.signature(fn).parameters)
    assert not params & {"seeds", "rng", "width", "n_layers", "L"}, params
    if "c_w" in params and "c_b" in params:
        names = list(inspect.signature(fn).parameters)
        assert names.index("c_w") < names.index("c_b")


def test_criticality_takes_weights_first_by_keyword():
    from effth.pdlt import criticality
    for name in ("kernel_map", "check_critical", "iterate_single_input"):
        sig = inspect.signature(getattr(criticality, name))
        for p in ("c_w", "c_b"):
            assert sig.parameters[p].kind is inspect.Parameter.KEYWORD_ONLY, (name, p)


def test_numpy_and_sympy_numbers_are_accepted_where_unambiguous():
    import sympy as sp
    net = et.MLP("tanh", depth=np.int64(3), widths=np.array([8, 8]), c_w=sp.Integer(1),
                 c_b=sp.Float(0.0))
    assert net.depth == 3 and net.hidden_widths == (8, 8) and net.c_w_at(1) == 1.0
    with pytest.raises(DomainError):
        et.MLP("tanh", depth=3, widths=[8, 8, 8])
    with pytest.raises(DomainError):
        et.flow(K1=[[1.0]], depth=3, activation="tanh", c_w=[1.0, 1.0, 1.0, 1.0])


# ------------------------------------------------------------------ the registry everywhere
def test_every_simulator_and_solver_takes_registry_and_sympy_activations():
    import sympy as sp
    z = sp.Symbol("z")
    forms = ["swish", et.get_activation("silu"), z / (1 + sp.exp(-z))]
    outs = []
    for act in forms:
        r = et.dmft.solve_two_layer(X, Y, gamma0=0.5, eta=0.2, steps=3, activation=act, nodes=12)
        run = et.simulate_training(X, Y, depth=2, widths=8, gamma0=0.5, eta=0.2, steps=3,
                                   activation=act, seed=0)
        ntk = et.simulation.simulate_ntk_ensemble(et.MLP(act, depth=2, widths=8), X, networks=4,
                                                  seed=0)
        outs.append((r.value("f"), run.value("f"), ntk.value("Theta")))
    for other in outs[1:]:
        for a, b in zip(outs[0], other):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


# ------------------------------------------------------------------ theory and measurement meet
def test_theory_minus_measurement_is_one_line_at_initialization():
    net = et.MLP("tanh", depth=3, widths=16)
    fl, ens = et.flow(net, X), et.simulate_ensemble(net, X, networks=16, seed=1)
    for name in ("G", "V"):
        assert fl.value(name, layer=3).shape == ens.value(name, layer=3).shape
        assert ens.stderr(name, layer=3).shape == ens.value(name, layer=3).shape
        assert fl.stderr(name, layer=3) is None
    c = et.compare(fl, ens, "G", layer=3)
    assert c.theory.shape == (2, 2)
    with pytest.raises(DomainError, match="layer"):
        ens.value("G", layer=7)


def test_theory_minus_measurement_is_one_line_in_training():
    kw = dict(depth=2, gamma0=0.5, eta=0.2, steps=4)
    dm = et.dmft.solve_deep_linear(X, Y, **kw)
    run = et.simulate_training(X, Y, widths=16, activation="linear", seed=[0, 1, 2], **kw)
    for name in ("f", "loss", "ntk"):
        assert dm.value(name).shape == run.value(name).shape, name
    assert dm.value("phi", layer=1).shape == run.value("phi", layer=1).shape
    assert run.stderr("f").shape == run.value("f").shape
    c = et.compare(dm, run, "f")
    assert c.theory.shape == (4, 2)


@pytest.mark.parametrize("result", ["flow", "ensemble", "dmft", "training", "series"])
def test_every_result_prints_a_short_summary(result):
    net = et.MLP("tanh", depth=3, widths=8)
    X8 = np.random.default_rng(0).standard_normal((8, 3))
    obj = {
        "flow": lambda: et.flow(net, X8),
        "ensemble": lambda: et.simulate_ensemble(net, X8, networks=8, seed=0),
        "dmft": lambda: et.dmft.solve_deep_linear(X8, np.ones(8), depth=3, gamma0=0.5, eta=0.1,
                                                  steps=10),
        "training": lambda: et.simulate_training(X8, np.ones(8), depth=3, widths=8, gamma0=0.5,
                                                 eta=0.1, steps=10, activation="tanh", seed=0),
        "series": lambda: et.dmft.gamma0_series(X8, np.ones(8), depth=3, eta=0.1, steps=10),
    }[result]()
    assert len(repr(obj)) < 300 and "\n" not in repr(obj)
    assert "<table" in obj._repr_html_()


# ------------------------------------------------------------- the vocabulary of issue items
def test_widths_is_the_one_spelling_and_width_gets_a_did_you_mean():
    net = et.MLP("erf", depth=2)
    p = et.predict(net, X, Y, X[:1] * 0.5, method="gd", widths=32)
    assert p.value("mean1").shape == p.value("mean").shape
    with pytest.raises(TypeError, match="widths"):
        et.predict(net, X, Y, X[:1] * 0.5, method="gd", width=32)


def test_networks_is_the_one_ensemble_size_and_size_is_retired():
    net = et.MLP("tanh", depth=2, widths=8)
    assert et.simulate_ensemble(net, X, networks=4, seed=0) is not None
    with pytest.raises(TypeError, match="networks"):
        et.simulate_ensemble(net, X, size=4, seed=0)
    for fn in (et.simulate_ensemble, et.simulation.simulate_ntk_ensemble, et.train_ensemble):
        params = set(inspect.signature(fn).parameters)
        assert "networks" in params and "size" not in params, fn.__name__


def test_steps_counts_grid_points_and_updates_counts_parameter_updates():
    for fn in (et.dmft.solve_deep_linear, et.dmft.solve_two_layer, et.dmft.solve_monte_carlo,
               et.simulate_training, et.dmft.gamma0_series):
        params = set(inspect.signature(fn).parameters)
        assert "steps" in params and "updates" not in params, fn.__name__
    for fn in (et.predict, et.train_ensemble):
        params = set(inspect.signature(fn).parameters)
        assert "updates" in params and "steps" not in params, fn.__name__
    with pytest.raises(TypeError, match="updates"):
        et.predict(et.MLP("relu", depth=2), X, Y, X[:1], method="gd", eta=0.1, steps=3)


def test_reprs_say_depth_the_same_way():
    kw = dict(gamma0=0.5, eta=0.2, steps=3)
    texts = [repr(et.dmft.solve_deep_linear(X, Y, depth=3, **kw)),
             repr(et.flow(et.MLP("tanh", depth=3), X)),
             repr(et.dmft.solve_rule_deep_linear(X, Y, depth=3, rule="gd", **kw))
             if hasattr(et.dmft, "solve_rule_deep_linear") else "depth=3 (hidden_layers=2)"]
    for t in texts:
        assert "depth=3" in t and "L=" not in t, t


def test_printed_sample_labels_count_from_one():
    c = et.compare(np.zeros((2, 2)), np.array([[0.0, 0.0], [0.0, 1.0]]), "G",
                   stderr=np.full((2, 2), 0.1))
    assert "(2, 2)" in c.table() and "(1, 1)" in c.table() and "(0," not in c.table()


def test_monte_carlo_results_have_errors_for_every_name_they_estimate():
    r = et.dmft.solve_monte_carlo(X, Y, hidden_layers=1, gamma0=0.5, eta=0.2, steps=3,
                                  activation="tanh", samples=64, iterations=2, seed=0)
    for name in ("f", "loss", "phi", "g"):
        assert r.stderr(name) is not None, name
    assert et.dmft.solve_deep_linear(X, Y, hidden_layers=1, gamma0=0.5, eta=0.2,
                                     steps=3).stderr("loss") is None
