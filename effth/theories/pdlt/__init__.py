r"""The effective theory of wide networks of PDLT (Roberts & Yaida), derived by the engine.

Currently: the initialization recursions for :math:`K`, :math:`V`, :math:`G^{\{1\}}`
(:func:`derive_initialization`, :func:`initialization_flow`, :func:`mlp_flow`).
"""

from .initialization import RATIO, Recursion, derive_initialization, initialization_flow, mlp_flow

__all__ = ["Recursion", "derive_initialization", "initialization_flow", "mlp_flow", "RATIO"]
