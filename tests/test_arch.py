"""The MLP specification: per-layer hyperparameters and validation."""

from __future__ import annotations

import pytest

from effth.arch import MLP
from effth.errors import DomainError, UnknownActivationError


def test_per_layer_values_and_widths():
    net = MLP("relu", depth=3, widths=(4, 8), c_w=(1.0, 2.0, 2.0), c_b=0.1)
    assert net.layer_widths(5) == (5, 4, 8, 1)
    assert net.c_w_at(1) == 1.0 and net.c_w_at(3) == 2.0 and net.c_b_at(2) == 0.1
    assert net.act.name == "relu"
    assert net.with_widths(16).hidden_widths == (16, 16)
    assert MLP("tanh", depth=2, widths=3) == MLP("tanh", depth=2, widths=(3,))


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(depth=0),
        dict(depth=3, widths=(4,)),
        dict(depth=2, widths=(0,)),
        dict(depth=2, c_w=0.0),
        dict(depth=2, c_b=-1.0),
        dict(depth=2, c_w=(1.0,)),
        dict(depth=2, c_w=float("nan")),
        dict(depth=2, n_out=0),
    ],
)
def test_impossible_hyperparameters_raise(kwargs):
    with pytest.raises(DomainError):
        MLP("tanh", **kwargs)


def test_unknown_activation_and_symbolic_widths():
    with pytest.raises(UnknownActivationError):
        MLP("tanhh", depth=2)
    with pytest.raises(DomainError, match="symbolic widths"):
        MLP("tanh", depth=2).layer_widths(3)
    with pytest.raises(DomainError):
        MLP("tanh", depth=2).c_w_at(3)
