"""Deprecated: the theories moved to :mod:`effth.pdlt` and :mod:`effth.dmft`.

Earlier releases documented ``effth.theories.pdlt…`` and ``effth.theories.dmft…``; those import
paths keep working here (with a :class:`DeprecationWarning`) and resolve to the modules at their
new homes, so ``effth.theories.pdlt.criticality is effth.pdlt.criticality``.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

#: old module path (below ``effth.theories``) -> new module path
MOVED = {
    "pdlt": "effth.pdlt",
    "pdlt._derive": "effth.pdlt.derivation.pipeline",
    "pdlt._ntk_forward": "effth.pdlt.derivation.ntk_forward",
    "pdlt._ntk_derive": "effth.pdlt.derivation.ntk_pipeline",
    "pdlt.initialization": "effth.pdlt.initialization.recursions",
    "pdlt.kernel_flow": "effth.pdlt.initialization.kernel_flow",
    "pdlt.reductions": "effth.pdlt.initialization.reductions",
    "pdlt.couplings": "effth.pdlt.initialization.couplings",
    "pdlt.criticality": "effth.pdlt.criticality",
    "pdlt.deep_linear": "effth.pdlt.deep_linear",
    "pdlt.ntk": "effth.pdlt.ntk.recursions",
    "pdlt.ntk_flow": "effth.pdlt.ntk.ntk_flow",
    "pdlt.learning": "effth.pdlt.learning.prediction",
    "pdlt.linear_models": "effth.pdlt.learning.linear_models",
    "pdlt.two_input": "effth.pdlt.learning.two_input",
    "pdlt.projectors": "effth.pdlt.learning.projectors",
    "pdlt.finite_width_learning": "effth.pdlt.learning.finite_width",
    "pdlt.bayes_finite": "effth.pdlt.learning.bayes_finite",
    "pdlt.nearly_kernel": "effth.pdlt.learning.nearly_kernel",
    "dmft": "effth.dmft",
    "dmft.grid": "effth.dmft.grid",
    "dmft.result": "effth.dmft.result",
    "dmft.metrics": "effth.dmft.metrics",
    "dmft.lazy": "effth.dmft.solvers.lazy",
    "dmft.deep_linear": "effth.dmft.solvers.deep_linear",
    "dmft.two_layer": "effth.dmft.solvers.two_layer",
    "dmft.nonlinear": "effth.dmft.solvers.monte_carlo",
    "dmft.saddle_point": "effth.dmft.solvers.saddle_point",
    "dmft.gamma_series": "effth.dmft.series.gamma0",
    "dmft.rules": "effth.dmft.rules.solvers",
    "dmft.random_data": "effth.dmft.random_data",
}


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolves ``effth.theories.<old>`` to the module at its new home."""

    prefix = __name__ + "."

    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith(self.prefix) and fullname[len(self.prefix):] in MOVED:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        new = MOVED[spec.name[len(self.prefix):]]
        warnings.warn(f"{spec.name} moved to {new}; import it from there",
                      DeprecationWarning, stacklevel=3)
        return importlib.import_module(new)

    def exec_module(self, module):
        pass


if not any(isinstance(f, _Alias) for f in sys.meta_path):
    sys.meta_path.insert(0, _Alias())


def __getattr__(name):
    if name in ("pdlt", "dmft"):
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
