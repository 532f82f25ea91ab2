r"""Index kinds and named symbols of the effective theory.

Three kinds of index appear in effth's expressions:

* **sample indices** :math:`\alpha, \beta, \gamma, \ldots` label inputs of the dataset; they stay
  free (tensors over the dataset) or are summed with :class:`~effth.algebra.tensors.SampleSum`;
* **neuron indices** :math:`i, j, k` label units of a layer; they appear only inside Kronecker
  deltas that collapse under neuron sums (the Wick engine counts them, see
  :mod:`effth.algebra.wick`);
* the **layer** :math:`\ell` labels depth.  Widths :math:`n_\ell` and initialization
  hyperparameters :math:`C_W^{(\ell)}, C_b^{(\ell)}` are per-layer symbols.

Conventions follow *The Principles of Deep Learning Theory* (PDLT; Roberts, Yaida & Hanin 2022),
(2.5), (4.76): layers are :math:`\ell=1..L` (:math:`L` weight layers, the output layer counts),
and the layer-:math:`\ell` expansion parameter is :math:`1/n_{\ell-1}`.

Examples
--------
>>> from effth.algebra.indices import alpha, ell, width, c_w
>>> alpha(1)
alpha_1
>>> from effth.printing import latex
>>> latex(width(ell - 1)), latex(c_w(ell + 1))
('n_{\\ell - 1}', '{C_{W}^{(\\ell + 1)}}')
"""

from __future__ import annotations

from effth._signature import public

import sympy as sp

__all__ = [
    "ell",
    "gamma0",
    "alpha",
    "beta",
    "gamma",
    "sample_indices",
    "neuron",
    "LayerSymbol",
    "width",
    "c_w",
    "c_b",
    "lambda_w",
    "lambda_b",
    "residual_xi",
    "residual_gamma",
]

#: The layer symbol :math:`\ell` (PDLT counts weight layers, output layer included).
ell = sp.Symbol("ell", integer=True)

#: Feature-learning strength :math:`\gamma_0` of the DMFT (Bordelon & Pehlevan 2022).
gamma0 = sp.Symbol("gamma_0", positive=True)


def _indexed_symbol(stem: str, k: int | str) -> sp.Symbol:
    return sp.Symbol(f"{stem}_{k}")


@public
def alpha(k: int | str) -> sp.Symbol:
    r"""Sample index :math:`\alpha_k` (a free index of a sample tensor)."""
    return _indexed_symbol("alpha", k)


@public
def beta(k: int | str) -> sp.Symbol:
    r"""Sample index :math:`\beta_k` (conventionally a summed, dummy index)."""
    return _indexed_symbol("beta", k)


@public
def gamma(k: int | str) -> sp.Symbol:
    r"""Sample index :math:`\gamma_k` (dummy index of derivative, Edgeworth-form sums)."""
    return _indexed_symbol("gamma", k)


@public
def sample_indices(stem: str, count: int, start: int = 1) -> tuple[sp.Symbol, ...]:
    r"""``count`` sample indices ``stem_start, …``, e.g. ``sample_indices('beta', 4)``."""
    return tuple(_indexed_symbol(stem, k) for k in range(start, start + count))


@public
def neuron(stem: str, k: int | str | None = None) -> sp.Symbol:
    r"""Neuron index :math:`i`, :math:`j_1`, … (integer symbol)."""
    name = stem if k is None else f"{stem}_{k}"
    return sp.Symbol(name, integer=True)


class LayerSymbol(sp.Expr):
    r"""A per-layer scalar such as :math:`n_\ell`, :math:`C_W^{(\ell)}` or :math:`\lambda_b^{(\ell)}`.

    Parameters
    ----------
    name : str
        LaTeX stem, e.g. ``"n"`` or ``"C_{W}"``.
    layer : sympy expression
        The layer, e.g. ``ell + 1``.
    style : {"sub", "sup"}
        ``"sub"`` prints :math:`n_{\ell}`, ``"sup"`` prints :math:`C_W^{(\ell)}`.

    Notes
    -----
    All state lives in ``.args`` so ``expr.func(*expr.args) == expr`` and substitution of the
    layer (``expr.subs(ell, 3)``) works.  The symbol is positive (widths, variances).
    """

    is_commutative = True
    is_positive = True
    is_real = True

    def __new__(cls, name, layer, style="sub"):
        name = sp.Symbol(str(name)) if not isinstance(name, sp.Symbol) else name
        style = sp.Symbol(str(style)) if not isinstance(style, sp.Symbol) else style
        if str(style) not in ("sub", "sup"):
            raise ValueError(f"style must be 'sub' or 'sup', got {style!r}")
        return super().__new__(cls, name, sp.sympify(layer), style)

    @property
    def stem(self) -> str:
        return str(self.args[0])

    @property
    def layer(self) -> sp.Expr:
        return self.args[1]

    def _latex(self, printer) -> str:
        layer = printer._print(self.layer)
        if str(self.args[2]) == "sub":
            return rf"{self.stem}_{{{layer}}}"
        # outer braces: a power must print {C_{W}^{(\ell)}}^{2}, never a double superscript
        return rf"{{{self.stem}^{{({layer})}}}}"

    def _sympystr(self, printer) -> str:
        return f"{self.stem.replace('{', '').replace('}', '')}[{printer._print(self.layer)}]"

    def _eval_subs(self, old, new):
        if old == self:
            return new
        return None


@public
def width(layer) -> LayerSymbol:
    r"""Width :math:`n_\ell` of layer ``layer``."""
    return LayerSymbol("n", layer, "sub")


@public
def c_w(layer) -> LayerSymbol:
    r"""Rescaled weight variance :math:`C_W^{(\ell)}` (PDLT (2.20))."""
    return LayerSymbol("C_{W}", layer, "sup")


@public
def c_b(layer) -> LayerSymbol:
    r"""Bias variance :math:`C_b^{(\ell)}` (PDLT (2.19))."""
    return LayerSymbol("C_{b}", layer, "sup")


@public
def lambda_w(layer) -> LayerSymbol:
    r"""Weight learning-rate hyperparameter :math:`\lambda_W^{(\ell)}` (PDLT (7.22))."""
    return LayerSymbol(r"\lambda_{W}", layer, "sup")


@public
def lambda_b(layer) -> LayerSymbol:
    r"""Bias learning-rate hyperparameter :math:`\lambda_b^{(\ell)}` (PDLT (7.22))."""
    return LayerSymbol(r"\lambda_{b}", layer, "sup")


@public
def residual_xi(layer) -> LayerSymbol:
    r"""Residual-branch gain :math:`\xi^{(\ell)}` of the residual MLP (PDLT (B.4))."""
    return LayerSymbol(r"\xi", layer, "sup")


@public
def residual_gamma(layer) -> LayerSymbol:
    r"""Skip-connection gain :math:`\gamma^{(\ell)}` of the residual MLP (PDLT (B.4))."""
    return LayerSymbol(r"\gamma", layer, "sup")
