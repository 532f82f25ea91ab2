"""The gamma0-series needs sigma'' pointwise: kinked activations are refused at every entry point
and depth, and for smooth ones the gamma0^2 coefficient is checked against the full solver.

A kinked activation's sigma'' carries a delta function at the kink; the pointwise expansion drops
it.  Two-layer ReLU gave f_2(t_10) = [0.0205, -0.0033] where the two-layer solver's finite
difference in gamma0 gives [-0.0269, 0.0042] (wrong sign and magnitude), so the series now refuses
such activations instead of returning a wrong number.
"""

from __future__ import annotations

import io

import numpy as np
import pytest

from effth.cli import main as cli_main
from effth.errors import DomainError
from effth.dmft import (
    compare_approximations,
    gamma0_leading_order,
    gamma0_series,
    solve_two_layer,
)
from effth.dmft.series.gamma0 import latex_coefficient

KX = np.array([[1.0, 0.5], [0.5, 1.0]])
Y = np.array([1.0, -0.5])
KINKED = ("relu", "abs", "leaky_relu")


@pytest.mark.parametrize("activation", KINKED)
@pytest.mark.parametrize("hidden_layers", [1, 2, 3])
def test_series_refuses_kinked_activations_at_every_depth(activation, hidden_layers):
    for closure in ("exact", "ntk"):
        with pytest.raises(DomainError, match="kink"):
            gamma0_series(kernel=KX, y=Y, hidden_layers=hidden_layers, eta=0.1, steps=5,
                          order=2, activation=activation, closure=closure)
    with pytest.raises(DomainError, match="kink"):
        gamma0_series(kernel=KX, y=Y, depth=hidden_layers + 1, eta=0.1, steps=5, order=4,
                      activation=activation)
    with pytest.raises(DomainError, match="kink"):
        gamma0_leading_order(kernel=KX, y=Y, hidden_layers=hidden_layers, times=[0.0, 1.0],
                             activation=activation)
    for name in ("ntk", "phi", "g", "f", "loss", "A", "B"):
        for order in (2, 4):
            with pytest.raises(DomainError, match="kink"):
                latex_coefficient(order, name, hidden_layers=hidden_layers, activation=activation)
    with pytest.raises(DomainError, match="kink"):
        compare_approximations(kernel=KX, y=Y, hidden_layers=hidden_layers, gamma0=0.1, eta=0.1,
                               steps=5, order=2, activation=activation, samples=8, iterations=1)


@pytest.mark.parametrize("activation", KINKED)
def test_kinked_refused_below_the_public_entry_points(activation):
    from effth.dmft.series.leading import evaluate_two_layer_order2, two_layer_order2_exprs
    from effth.dmft.series.two_layer import two_layer_series_arrays

    with pytest.raises(DomainError, match="kink"):
        two_layer_series_arrays(KX, Y, activation=activation, eta=0.1, steps=5, order=2, nodes=8)
    with pytest.raises(DomainError, match="kink"):
        evaluate_two_layer_order2(two_layer_order2_exprs()["phi"], KX, np.zeros((2, 2)),
                                  np.zeros((2, 2, 2)), activation)
    with pytest.raises(DomainError, match="kink"):
        latex_coefficient(2, "ntk", activation=activation)             # symbolic depth
    # the lazy (order 0) and vanishing odd coefficients hold for any activation
    assert latex_coefficient(3, "f", hidden_layers=1, activation=activation).endswith("= 0")
    assert "K_{0" in latex_coefficient(0, "ntk", hidden_layers=1, activation=activation)


def test_cli_refuses_kinked_activation():
    out, err = io.StringIO(), io.StringIO()
    import contextlib
    with contextlib.redirect_stderr(err):
        code = cli_main(["gamma0", "--order", "2", "--hidden-layers", "1", "--activation", "relu",
                         "--quantity", "ntk"], out=out)
    assert code == 2 and "kink" in err.getvalue() and out.getvalue() == ""


@pytest.mark.parametrize("activation", ["gelu", "softplus"])
def test_two_layer_gamma0_squared_coefficient_against_the_solver(activation):
    """Smooth, non-odd activations (the smooth cousins of ReLU): the series' gamma0^2 coefficient
    of f and of the equal-time NTK equals the finite difference of the deterministic two-layer
    solver, (X(g1) - X(g2)) / (g1^2 - g2^2), with the same Gauss-Hermite rule (so the quadrature
    error is common).  Its remainder is X_4 (g1^2 + g2^2): we require agreement to 1 % of the
    coefficient's scale at (0.04, 0.02) and the remainder to shrink ~4x at (0.02, 0.01) -- a
    wrong sign (error 200 %) or a coefficient off by 10 % is rejected."""
    eta, T, nodes = 0.2, 11, 24
    ser = gamma0_series(kernel=KX, y=Y, hidden_layers=1, eta=eta, steps=T, order=2,
                        activation=activation, nodes=nodes)
    c2 = {"f": ser.coefficient(2, "f"), "ntk": ser.coefficient(2, "ntk")}
    sols = {g: solve_two_layer(kernel=KX, y=Y, gamma0=g, eta=eta, steps=T, activation=activation,
                               nodes=nodes, two_time=False) for g in (0.04, 0.02, 0.01)}

    def fd(name, g1, g2):
        return (sols[g1].value(name) - sols[g2].value(name)) / (g1 ** 2 - g2 ** 2)

    for name in ("f", "ntk"):
        scale = np.max(np.abs(c2[name]))
        assert scale > 1e-2                                     # a coefficient that is not ~0
        big = np.max(np.abs(fd(name, 0.04, 0.02) - c2[name])) / scale
        small = np.max(np.abs(fd(name, 0.02, 0.01) - c2[name])) / scale
        assert big < 1e-2, (name, big)
        assert small < big / 3, (name, big, small)              # gamma0^4 remainder
        for wrong in (-c2[name], 0.9 * c2[name]):
            assert np.max(np.abs(fd(name, 0.04, 0.02) - wrong)) / scale > 5e-2
