r"""Network specifications: what a theorist describes, with no mathematics attached.

Theories (:mod:`effth.algebra` and, later, the theory modules) and the simulator
(:mod:`effth.simulation`) both read these specs; that is the only thing they share, so a
simulation can never reuse the code it checks.

Conventions (PDLT §2.1 and §2.3, ``docs/conventions.md``): ``depth`` is the number of
weight layers :math:`L` (the output layer counts); hidden widths are
:math:`n_1,\dots,n_{L-1}`; :math:`n_0` is the input dimension; biases
:math:`b^{(\ell)}\sim\mathcal N(0, C_b^{(\ell)})` and weights
:math:`W^{(\ell)}\sim\mathcal N(0, C_W^{(\ell)}/n_{\ell-1})`; the output layer has no activation.

Examples
--------
>>> net = MLP("tanh", depth=4, widths=64, c_w=1.0, c_b=0.0)
>>> net.hidden_widths, net.c_w_at(2)
((64, 64, 64), 1.0)

:class:`CNN` is the convolutional network (1-D or 2-D, stride 1) with the same conventions:
``depth`` weight layers, ``widths`` the hidden channels.
"""

from effth.arch._common import resolve_depth
from effth.arch.cnn import CNN
from effth.arch.mlp import MLP

__all__ = ["CNN", "MLP", "resolve_depth"]
