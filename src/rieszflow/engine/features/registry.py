"""The registry of feature maps: name -> class, the name groups the studies use, and the factory.

References
----------
paper 000, App. D; paper 001 (LUNA) and its baselines.
"""
from __future__ import annotations

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

__all__ = [
    "FEATURE_MAPS",
    "ATTENTION_FEATURE_MAPS",
    "LEARNED_FEATURE_MAPS",
    "LINEAR_ATTENTION_MAPS",
    "make_feature_map",
]

FEATURE_MAPS = {
    cls.name: cls
    for cls in (FavorFeatureMap, EluFeatureMap, SoftplusFeatureMap, Sigmoid2FeatureMap,
                SoftmaxFeatFeatureMap, Cos2FeatureMap, PorfSoftplusFeatureMap, RffFeatureMap,
                RffPairFeatureMap, LunaFeatureMap, HedgehogFeatureMap, CosformerFeatureMap)
}

#: Names of the positive random-feature (particle) maps of paper 000, usable in normalised
#: linear attention (every registered map with ``positive = True`` whose only parameters are
#: its particles and whose features are per token, in registration order). The particle
#: studies take their grids from here, so registering such a map is the only edit needed.
ATTENTION_FEATURE_MAPS = tuple(name for name, cls in FEATURE_MAPS.items()
                               if cls.positive and not cls.learned and not cls.position_dependent)

#: Maps with learned parameters besides the particles (paper 001's LUNA, Hedgehog).
LEARNED_FEATURE_MAPS = tuple(name for name, cls in FEATURE_MAPS.items() if cls.learned)

#: Every map the bundled model's linear attention accepts: the particle maps, the learned
#: maps and the position-dependent Cosformer baseline.
LINEAR_ATTENTION_MAPS = ATTENTION_FEATURE_MAPS + tuple(
    name for name, cls in FEATURE_MAPS.items() if cls.positive and name not in ATTENTION_FEATURE_MAPS)


def make_feature_map(name, d, m, *, rng=None, **options):
    """Build the feature map registered as ``name``.

    Parameters
    ----------
    name : str
        One of ``FEATURE_MAPS``: "favor", "elu", "softplus", "sigmoid2",
        "softmaxfeat", "cos2", "porf_softplus", "rff" (paper 000), "rff_pair", "luna",
        "hedgehog", "cosformer" (paper 001 and its baselines).
    d : int
        Input dimension, ``>= 1``.
    m : int
        Number of features / particles M, ``>= 1``.
    rng : numpy.random.Generator or None, default None
        Draws the fixed constants (elu, cos2, rff) once.
    **options
        ``tau``, ``floor`` and the map's ``options`` (see each class).

    Returns
    -------
    FeatureMap

    Raises
    ------
    ValueError
        If ``name`` is unknown or an option is not allowed for this map (the
        message lists the allowed values), or a value is out of range.
    TypeError
        If ``d``, ``m`` or an option has the wrong type.

    References
    ----------
    paper 000, App. D.
    """
    if not isinstance(name, str) or name not in FEATURE_MAPS:
        raise ValueError(f"unknown feature map name={name!r}; allowed: {', '.join(FEATURE_MAPS)}")
    cls = FEATURE_MAPS[name]
    allowed = ("tau", "floor") + cls.options
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(f"make_feature_map({name!r}): unknown option(s) {unknown}; "
                         f"allowed: {', '.join(allowed)}")
    return cls(d, m, rng=rng, **options)
