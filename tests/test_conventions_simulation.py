"""Conventions of the simulators at initialization (``docs/conventions.md``), pinned:
activation forms, the ``seed=`` keyword, the result protocol (``layers``, ``value``, ``stderr``)
and short reprs of :func:`simulate_ensemble`, :func:`simulate_ntk_ensemble` and
:func:`empirical_ntk`."""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp

import effth as et
from effth.activations import get_activation, register_activation
from effth.arch import MLP
from effth.errors import DomainError
from effth.simulation import (EnsembleStatistics, NTKEnsembleStatistics, NTKResult, empirical_ntk,
                              init_params, simulate_ensemble, simulate_ntk_ensemble)

X = np.array([[1.0, -0.5], [0.3, 0.8]])
Z = sp.Symbol("z", real=True)


def _ens(act, seed=3, **kw):
    net = MLP(act, depth=3, widths=5, c_w=1.3, c_b=0.1, n_out=2)
    return simulate_ensemble(net, X, networks=40, seed=seed, batch=9, **kw)


def _ntk(act, seed=3, **kw):
    net = MLP(act, depth=3, widths=5, c_w=1.3, c_b=0.1, n_out=2)
    return simulate_ntk_ensemble(net, X, networks=12, seed=seed, batch=5, **kw)


def _same_ensemble(a: EnsembleStatistics, b: EnsembleStatistics, exact: bool = True):
    for name in ("G", "V", "kappa4_same", "kappa4_cross", "O_cov"):
        for ell in a.layers:
            if exact:
                np.testing.assert_array_equal(a.value(name, ell), b.value(name, ell))
            else:
                np.testing.assert_allclose(a.value(name, ell), b.value(name, ell), rtol=1e-12,
                                           atol=1e-12)


# ---------------------------------------------------------------- activation forms
def test_activation_forms_give_identical_ensembles():
    ref = _ens("swish")
    _same_ensemble(ref, _ens("silu"))                                  # alias
    _same_ensemble(ref, _ens("SiLU"))                                  # case-insensitive
    _same_ensemble(ref, _ens(get_activation("swish")))                 # Activation
    _same_ensemble(ref, _ens(Z / (1 + sp.exp(-Z))), exact=False)       # SymPy expression in z
    register_activation("conv_test_swish", lambda: get_activation("swish"), overwrite=True)
    _same_ensemble(ref, _ens("conv_test_swish"))                       # user-registered name
    assert not np.allclose(ref.value("G", 3), _ens("tanh").value("G", 3))   # can fail


def test_activation_forms_give_identical_ntk_ensembles():
    ref = _ntk("gelu")
    for other in (get_activation("gelu"), Z * (1 + sp.erf(Z / sp.sqrt(2))) / 2):
        alt = _ntk(other)
        for name in ("Theta", "G", "A", "B", "D", "F", "P", "Q", "R", "S", "T", "U"):
            np.testing.assert_allclose(alt.value(name), ref.value(name), rtol=1e-10, atol=1e-12)
    p = init_params(MLP("gelu", depth=3, widths=4, n_out=2), 2, seed=0)
    a = empirical_ntk(p, X, "gelu")
    b = empirical_ntk(p, X, Z * (1 + sp.erf(Z / sp.sqrt(2))) / 2)
    np.testing.assert_allclose(a.ddIIH, b.ddIIH, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("act", ["gelu", "silu", "swish", "softplus", "erf", "sigmoid", "sin",
                                 "cos", "tanh", "linear"])
def test_every_smooth_activation_runs_every_order(act):
    st = _ntk(act)
    assert st.order == 3
    for name in ("Theta", "P", "R", "S", "T", "U"):
        assert np.isfinite(st.value(name)).all()


@pytest.mark.parametrize("act, ok_order", [("relu", 1), ("leaky_relu", 1), ("abs", 1),
                                           ("step", 0), ("sign", 0)])
def test_kinked_activations_need_the_right_order(act, ok_order):
    for order in (1, 2, 3):
        if order <= ok_order:
            assert np.isfinite(_ntk(act, order=order).value("Theta")).all()
        else:
            with pytest.raises(DomainError, match="Dirac"):
                _ntk(act, order=order)
    # one network: the almost-everywhere derivatives are exact at almost every parameter point
    p = init_params(MLP(act, depth=3, widths=4, n_out=2), 2, seed=1)
    assert np.isfinite(empirical_ntk(p, X, act).ddIIH).all()


# ---------------------------------------------------------------- seed spelling
def test_seed_spellings():
    ref = _ens("tanh", seed=7)
    _same_ensemble(ref, _ens("tanh", seed=np.random.SeedSequence(7)))
    _same_ensemble(ref, _ens("tanh", seed=np.random.default_rng(7)))
    assert not np.array_equal(ref.value("V", 3), _ens("tanh", seed=8).value("V", 3))
    nref = _ntk("tanh", seed=7, order=1)
    for s in (np.random.SeedSequence(7), np.random.default_rng(7)):
        np.testing.assert_array_equal(_ntk("tanh", seed=s, order=1).value("Theta"),
                                      nref.value("Theta"))
    net = MLP("tanh", depth=2, widths=3)
    for a, b in zip(init_params(net, 2, seed=4), init_params(net, 2, seed=np.random.SeedSequence(4))):
        np.testing.assert_array_equal(a[0], b[0])
    with pytest.raises(TypeError):
        init_params(net, 2, rng=4)                                      # no rng= keyword
    with pytest.raises(TypeError):
        simulate_ensemble(net, X, networks=4, rng=4)
    for bad in ("abc", -1, 1.5, True):
        with pytest.raises(DomainError, match="seed"):
            simulate_ensemble(net, X, networks=4, seed=bad)
        with pytest.raises(DomainError, match="seed"):
            simulate_ntk_ensemble(net, X, networks=4, seed=bad, order=1)


# ---------------------------------------------------------------- result protocol
def test_ensemble_result_protocol():
    st = _ens("tanh", layers=[2, 3])
    assert st.layers == (2, 3) and st.depth == 3 and st.hidden_layers == 2
    assert st.value("G", layer=2).shape == (2, 2) and st.stderr("G", layer=2).shape == (2, 2)
    for name in ("V", "kappa4_same", "kappa4_cross", "O_cov"):
        assert st.value(name, layer=3).shape == (2, 2, 2, 2)
        assert st.stderr(name, layer=3).shape == (2, 2, 2, 2)
    assert st.value("V", 3) is st.V[3] and st.stderr("V", 3) is st.V_err[3]   # same arrays
    with pytest.raises(DomainError, match=r"\(2, 3\)"):
        st.value("G", layer=1)                                          # lists the layers held
    with pytest.raises(DomainError, match="layer"):
        st.value("G")                                                   # two layers: ambiguous
    with pytest.raises(DomainError, match="Theta"):
        st.value("Theta", layer=2)
    one = _ens("tanh", layers=[3])
    np.testing.assert_array_equal(one.value("V"), one.value("V", layer=3))


def test_ntk_result_protocol():
    st = _ntk("tanh")
    assert st.layers == (3,) and st.depth == 3 and st.hidden_layers == 2
    assert st.value("Theta").shape == (2, 2) and st.stderr("Theta", layer=3).shape == (2, 2)
    np.testing.assert_array_equal(st.value("Theta"), st.H)              # Theta is the NTK mean
    for name in "ABDFPQRSTU":
        assert st.value(name).shape == (2, 2, 2, 2) and st.stderr(name).shape == (2, 2, 2, 2)
    assert st.value("H_var_same").shape == (2, 2, 2, 2)                 # raw keys still readable
    with pytest.raises(DomainError, match=r"\(3,\)"):
        st.value("Theta", layer=2)
    with pytest.raises(DomainError, match="available"):
        st.value("V")


# ---------------------------------------------------------------- what users see
def test_reprs_are_short():
    st = _ens("tanh")
    nst = _ntk("tanh")
    res = empirical_ntk(init_params(MLP("tanh", depth=3, widths=4, n_out=2), 2, seed=0), X, "tanh")
    batch = empirical_ntk(init_params(MLP("tanh", depth=3, widths=4, n_out=2), 2, seed=0, networks=3),
                          X, "tanh")
    big = simulate_ensemble(MLP("tanh", depth=12, widths=3), np.ones((4, 2)), networks=4, seed=0)
    for obj in (st, nst, res, batch, big):
        r = repr(obj)
        assert len(r) < 300 and "\n" not in r and "array" not in r, r
        h = obj._repr_html_()
        assert h.startswith("<table") and len(h) < 2000
    assert repr(st).startswith("EnsembleStatistics(") and "networks=40" in repr(st)
    assert repr(nst).startswith("NTKEnsembleStatistics(") and repr(res).startswith("NTKResult(")
    assert isinstance(nst, NTKEnsembleStatistics) and isinstance(res, NTKResult)


def test_complex_inputs_rejected():
    net = MLP("tanh", depth=2, widths=3, n_out=2)
    Xc = X + 1j
    with pytest.raises(DomainError, match="real"):
        simulate_ensemble(net, Xc, networks=4, seed=0)
    with pytest.raises(DomainError, match="real"):
        simulate_ntk_ensemble(net, Xc, networks=4, seed=0)
    with pytest.raises(DomainError, match="real"):
        empirical_ntk(init_params(net, 2, seed=0), Xc, "tanh")


def test_progress_keyword(capsys):
    net = MLP("tanh", depth=2, widths=3, n_out=2)
    a = simulate_ensemble(net, X, networks=8, seed=0, progress=False)
    b = simulate_ensemble(net, X, networks=8, seed=0, progress=True)
    np.testing.assert_array_equal(a.value("V", 2), b.value("V", 2))    # the bar changes nothing
    c = simulate_ntk_ensemble(net, X, networks=8, seed=0, progress=True)
    assert np.isfinite(c.value("Theta")).all()
    assert et.simulate_ensemble is simulate_ensemble
