"""Random-feature maps phi_Omega : R^d -> R^M with hand-written backward passes.

Each map turns token vectors ``x`` of shape ``(..., d)`` into features ``phi``
of shape ``(..., M)`` given the particles ``omega`` of shape ``(M, d)``, so that
``K(q, k) = phi(q) . phi(k)`` is the kernel of linearised attention (paper 000,
App. D) or of a random-feature model (paper 000, Lemma 3, eq. (B.6)).

The conventions every map follows (particles as rows, the pre-activation, the features'
normalisation, dtypes and backends) are stated once, in :mod:`rieszflow.engine.features.base`.

Modules
-------
base
    :class:`FeatureMap`, the abstract contract (validation, particles' initial laws,
    forward/backward machinery) and helpers shared by the map families.
fixed
    The fixed random-feature maps of paper 000: favor, elu, softplus, porf_softplus,
    sigmoid2, cos2, softmaxfeat, rff, and rff_pair (paper 001's fixed sin/cos RFF).
luna
    :class:`LunaFeatureMap` (paper 001, eq. (11)).
hedgehog
    :class:`HedgehogFeatureMap` (Zhang et al. 2024, a baseline of paper 001).
cosformer
    :class:`CosformerFeatureMap` (Qin et al. 2022, a baseline of paper 001).
registry
    :data:`FEATURE_MAPS` (name -> class), the name groups and :func:`make_feature_map`.

References
----------
paper 000, App. D ("Positive random-feature maps for linearized attention");
paper 000, Lemma 3 and eqs. (B.5)-(B.6) (random Fourier features);
project spec attention_reference.md, sections 0.3 (FAVOR+ stabiliser) and 5;
Choromanski et al. (2020), "Rethinking attention with Performers";
Katharopoulos et al. (2020), "Transformers are RNNs";
Yu et al. (2016), "Orthogonal random features";
Rahimi and Recht (2007), "Random features for large-scale kernel machines".
"""
from rieszflow.engine.features.base import FeatureMap
from rieszflow.engine.features.cosformer import CosformerFeatureMap
from rieszflow.engine.features.fixed import (
    Cos2FeatureMap,
    EluFeatureMap,
    FavorFeatureMap,
    PorfSoftplusFeatureMap,
    RffFeatureMap,
    RffPairFeatureMap,
    Sigmoid2FeatureMap,
    SoftmaxFeatFeatureMap,
    SoftplusFeatureMap,
)
from rieszflow.engine.features.hedgehog import HedgehogFeatureMap
from rieszflow.engine.features.luna import LunaFeatureMap
from rieszflow.engine.features.registry import (
    ATTENTION_FEATURE_MAPS,
    FEATURE_MAPS,
    LEARNED_FEATURE_MAPS,
    LINEAR_ATTENTION_MAPS,
    make_feature_map,
)

__all__ = [
    "ATTENTION_FEATURE_MAPS",
    "LEARNED_FEATURE_MAPS",
    "LINEAR_ATTENTION_MAPS",
    "LunaFeatureMap",
    "HedgehogFeatureMap",
    "CosformerFeatureMap",
    "FeatureMap",
    "FavorFeatureMap",
    "EluFeatureMap",
    "SoftplusFeatureMap",
    "PorfSoftplusFeatureMap",
    "Sigmoid2FeatureMap",
    "SoftmaxFeatFeatureMap",
    "Cos2FeatureMap",
    "RffFeatureMap",
    "RffPairFeatureMap",
    "FEATURE_MAPS",
    "make_feature_map",
]
