"""What every result type shares under the conventions (``docs/conventions.md``): the network's
``depth`` (weight layers) and ``hidden_layers`` (``depth - 1``), and the book layer numbers it
holds.  The DMFT results and the trainer describe networks by their hidden layers
(:class:`HiddenLayers`); the flows and ensembles by their weight layers (:class:`WeightLayers`).
"""

from __future__ import annotations

__all__ = ["HiddenLayers", "WeightLayers"]


class HiddenLayers:
    """Mixin for results with a ``hidden_layers`` field: per-layer kernels ``phi``, ``g`` of the
    hidden layers ``1 .. hidden_layers``."""

    hidden_layers: int

    @property
    def depth(self) -> int:
        """Number of weight layers, ``hidden_layers + 1``."""
        return self.hidden_layers + 1

    @property
    def layers(self) -> tuple:
        """Book numbers ``(1, .., hidden_layers)`` of the per-layer quantities."""
        return tuple(range(1, self.hidden_layers + 1))


class WeightLayers:
    """Mixin for results that know ``depth`` (weight layers): ``hidden_layers = depth - 1``."""

    @property
    def hidden_layers(self) -> int:
        """Number of hidden layers, ``depth - 1``."""
        return self.depth - 1


class TrainTestSplit:
    """``n_test``, ``n_out``, ``depth``, ``hidden_layers`` of a learning prediction that holds an
    output-layer kernel ``K`` on training-then-test inputs, ``n_train``, the targets ``y_train``
    and the network ``net`` (``None`` for precomputed kernels)."""

    @property
    def n_test(self) -> int:
        return self.K.shape[0] - self.n_train

    @property
    def n_out(self) -> int:
        return 1 if self.y_train.ndim == 1 else self.y_train.shape[1]

    @property
    def depth(self) -> int | None:
        """Number of weight layers :math:`L` of the network (``None`` for precomputed kernels)."""
        return None if self.net is None else self.net.depth

    @property
    def hidden_layers(self) -> int | None:
        return None if self.net is None else self.net.depth - 1
