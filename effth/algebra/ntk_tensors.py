r"""Sample-indexed tensors of the NTK hierarchy (PDLT chapters 8, 9, 11 and ∞).

Every class is one component, canonicalized under the symmetry group that the definition of
the tensor implies (the decompositions PDLT (8.31)/(8.82), (8.37)/(8.67), (11.30)/(11.45),
(∞.11)–(∞.12));
slot orders are the book's:

======================  ====================================================================  =====================
class                   defining statistic (:math:`n=n_{\ell-1}`, distinct neurons)           symmetry
======================  ====================================================================  =====================
:class:`FrozenNTK`      :math:`\Theta_{\delta_1\delta_2}=\mathbb E[\hat H_{ii;\delta_1\delta_2}]` at :math:`O(1)`  pair
:class:`NLONTK`         :math:`H^{\{1\}}`: :math:`n\times` the :math:`O(1/n)` part of that mean  pair
:class:`NTKVarianceA`   :math:`A_{(\alpha_1\alpha_2)(\alpha_3\alpha_4)}` (8.82)              as :math:`V`
:class:`NTKVarianceB`   :math:`B_{\alpha_1\alpha_3\alpha_2\alpha_4}=n\,\mathbb E[\widehat{\Delta H}_{ij;\alpha_1\alpha_2}\widehat{\Delta H}_{ij;\alpha_3\alpha_4}]`  :math:`B_{pqrs}=B_{qpsr}=B_{rspq}`
:class:`NTKPreactD`     :math:`D_{\alpha_1\alpha_2\alpha_3\alpha_4}=n\,\mathbb E[z_iz_i\widehat{\Delta H}_{jj}]`  :math:`(12)`, :math:`(34)`
:class:`NTKPreactF`     :math:`F_{\alpha_1\alpha_3\alpha_2\alpha_4}=n\,\mathbb E[z_{i;\alpha_1}z_{j;\alpha_2}\hat H_{ij;\alpha_3\alpha_4}]`  :math:`F_{pqrs}=F_{rspq}`
:class:`DNTKP`          :math:`P_{\delta_0\delta_1\delta_2\delta_3}=n\,\mathbb E[\widehat{dH}_{ijj}z_i]`  :math:`\delta_1\leftrightarrow\delta_2`
:class:`DNTKQ`          :math:`Q_{\delta_0\delta_1\delta_2\delta_3}=n\,\mathbb E[\widehat{dH}_{iij}z_j]`  none
:class:`DDNTKR`         :math:`R_{\delta_0\delta_1\delta_2\delta_3}=n\,\mathbb E[\widehat{dd_IH}_{iijj}]`  :math:`\delta_2\leftrightarrow\delta_3`
:class:`DDNTKS`         :math:`S_{\delta_1\delta_2\delta_3\delta_4}=n\,\mathbb E[\widehat{dd_{II}H}_{iijj}]`  :math:`S_{pqrs}=S_{qpsr}`
:class:`DDNTKT`         :math:`T_{\delta_1\delta_3\delta_4\delta_2}=n\,\mathbb E[\widehat{dd_{II}H}_{ijij}]`  :math:`T_{pqrs}=T_{srqp}`
:class:`DDNTKU`         :math:`U_{\delta_1\delta_4\delta_2\delta_3}=n\,\mathbb E[\widehat{dd_{II}H}_{ijji}]`  :math:`U_{pqrs}=U_{rspq}`
======================  ====================================================================  =====================

:math:`F_{pqrs}=F_{rspq}` follows from :math:`\hat H_{ij;\alpha\beta}=\hat H_{ji;\beta\alpha}`
(PDLT ch. 8, footnote 6, says :math:`F` has "no symmetry at all in deeper layers"; that holds
for the swaps :math:`\alpha_1\leftrightarrow\alpha_2`, :math:`\alpha_3\leftrightarrow\alpha_4`
and the pair swap :math:`(\alpha_1\alpha_2)\leftrightarrow(\alpha_3\alpha_4)`, not for the
simultaneous swap above, which holds at every layer).

Examples
--------
>>> from effth.algebra.indices import alpha, ell
>>> a1, a2, a3, a4 = (alpha(k) for k in range(1, 5))
>>> NTKVarianceB(a2, a1, a4, a3, ell) == NTKVarianceB(a1, a2, a3, a4, ell)
True
>>> NTKPreactF(a3, a4, a1, a2, ell) == NTKPreactF(a1, a2, a3, a4, ell)
True
"""

from __future__ import annotations

from .tensors import SampleTensor

__all__ = ["FrozenNTK", "NLONTK", "NTKVarianceA", "NTKVarianceB", "NTKPreactD", "NTKPreactF",
           "DNTKP", "DNTKQ", "DDNTKR", "DDNTKS", "DDNTKT", "DDNTKU", "NTK_TENSORS"]


class FrozenNTK(SampleTensor):
    r"""Frozen NTK :math:`\Theta^{(\ell)}_{\delta_1\delta_2}` (PDLT (9.4)), the :math:`O(1)` NTK mean."""

    stem = r"\Theta"


class NLONTK(SampleTensor):
    r""":math:`H^{\{1\}(\ell)}_{\delta_1\delta_2}`: the NTK mean is :math:`\Theta+H^{\{1\}}/n_{\ell-1}+O(1/n^2)` (PDLT (9.3))."""

    stem = "H"
    layer_prefix = r"\{1\}"


class NTKVarianceA(SampleTensor):
    r"""NTK variance :math:`A^{(\ell)}_{(\alpha_1\alpha_2)(\alpha_3\alpha_4)}` (PDLT (8.82)): :math:`\delta_{i_1i_2}\delta_{i_3i_4}` part."""

    rank = 4
    symmetry = "pairpair"
    stem = "A"


class NTKVarianceB(SampleTensor):
    r"""NTK variance :math:`B^{(\ell)}_{\alpha_1\alpha_3\alpha_2\alpha_4}` (PDLT (8.82)): slots 1, 3 belong to the first NTK."""

    rank = 4
    symmetry = ((1, 0, 3, 2), (2, 3, 0, 1))
    stem = "B"


class NTKPreactD(SampleTensor):
    r"""NTK–preactivation cross-correlation :math:`D^{(\ell)}_{\alpha_1\alpha_2\alpha_3\alpha_4}` (PDLT (8.67)): slots 1, 2 are the :math:`z`'s."""

    rank = 4
    symmetry = ((1, 0, 2, 3), (0, 1, 3, 2))
    stem = "D"


class NTKPreactF(SampleTensor):
    r"""NTK–preactivation cross-correlation :math:`F^{(\ell)}_{\alpha_1\alpha_3\alpha_2\alpha_4}` (PDLT (8.67)): slots 1, 3 are the :math:`z`'s."""

    rank = 4
    symmetry = ((2, 3, 0, 1),)
    stem = "F"


class DNTKP(SampleTensor):
    r"""dNTK–preactivation tensor :math:`P^{(\ell)}_{\delta_0\delta_1\delta_2\delta_3}` (PDLT (11.45))."""

    rank = 4
    symmetry = ((0, 2, 1, 3),)
    stem = "P"


class DNTKQ(SampleTensor):
    r"""dNTK–preactivation tensor :math:`Q^{(\ell)}_{\delta_0\delta_1\delta_2\delta_3}` (PDLT (11.45)); no symmetry."""

    rank = 4
    symmetry = "none"
    stem = "Q"


class DDNTKR(SampleTensor):
    r"""Mean of the first ddNTK, :math:`R^{(\ell)}_{\delta_0\delta_1\delta_2\delta_3}` (PDLT (∞.11))."""

    rank = 4
    symmetry = ((0, 1, 3, 2),)
    stem = "R"


class DDNTKS(SampleTensor):
    r"""Mean of the second ddNTK, :math:`S^{(\ell)}_{\delta_1\delta_2\delta_3\delta_4}` (PDLT (∞.12))."""

    rank = 4
    symmetry = ((1, 0, 3, 2),)
    stem = "S"


class DDNTKT(SampleTensor):
    r"""Mean of the second ddNTK, :math:`T^{(\ell)}_{\delta_1\delta_3\delta_4\delta_2}` (PDLT (∞.12))."""

    rank = 4
    symmetry = ((3, 2, 1, 0),)
    stem = "T"


class DDNTKU(SampleTensor):
    r"""Mean of the second ddNTK, :math:`U^{(\ell)}_{\delta_1\delta_4\delta_2\delta_3}` (PDLT (∞.12))."""

    rank = 4
    symmetry = ((2, 3, 0, 1),)
    stem = "U"


#: Statistic name -> tensor class.
NTK_TENSORS = {"Theta": FrozenNTK, "H1": NLONTK, "A": NTKVarianceA, "B": NTKVarianceB,
               "D": NTKPreactD, "F": NTKPreactF, "P": DNTKP, "Q": DNTKQ, "R": DDNTKR,
               "S": DDNTKS, "T": DDNTKT, "U": DDNTKU}
