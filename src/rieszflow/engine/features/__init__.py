"""Random-feature maps phi_Omega : R^d -> R^M with hand-written backward passes.

Each map turns token vectors ``x`` of shape ``(..., d)`` into features ``phi``
of shape ``(..., M)`` given the particles ``omega`` of shape ``(M, d)``, so that
``K(q, k) = phi(q) . phi(k)`` is the kernel of linearised attention (paper 000,
App. D) or of a random-feature model (paper 000, Lemma 3, eq. (B.6)).

Conventions (shared by every map)
---------------------------------
* **Particles are rows.** ``omega[k]`` is the particle omega_k in R^d, i.e. the
  k-th *column* of the paper's matrix Omega in R^{d x M}. ``M = m = omega.shape[0]``.
* **Pre-activation.** ``u_k(x) = (omega_k . x) / tau + b_k``, where ``tau > 0`` is
  the temperature and ``b`` are fixed (non-learned) per-feature constants
  (ELU biases, cosine phases; zero for the other maps). FAVOR scales the data
  instead: ``x~ = x / sqrt(tau)`` (see :class:`FavorFeatureMap`). With the
  default ``tau = 1`` every map is exactly the paper's display.
* **l1 renormalisation** (elu, softplus, porf_softplus, sigmoid2, cos2):
  ``phi_k(x) = sqrt(M) g_k(x) / sum_j g_j(x)``, so ``sum_k phi_k(x) = sqrt(M)``
  for every token (paper 000, App. D, "Implementation details"); the paper's
  ``Z(x)`` is therefore ``sum_j g_j(x) / sqrt(M)``. ``softmaxfeat`` sums to
  ``sqrt(M)`` by construction; ``favor`` and ``rff`` are not renormalised.
* **Fixed constants** (``b``) are drawn once, in ``__init__``, from the host
  :class:`numpy.random.Generator` passed as ``rng`` (or passed explicitly as
  ``b=``), stored as host NumPy float64 arrays, and moved to the backend of
  ``x`` inside :meth:`FeatureMap.forward`. They are never redrawn.
* **Backends.** Array code takes ``xp = namespace(x, omega)``; the output dtype
  is ``result_type(x.dtype, omega.dtype)`` (float32 or float64).
* **Gradients.** :meth:`FeatureMap.backward` returns the vector-Jacobian
  products ``dx = (dphi)^T dphi/dx`` of shape ``(..., d)`` and
  ``domega = sum over all leading dims of (dphi)^T dphi/domega`` of shape
  ``(M, d)``.

Modules
-------
base
    :class:`FeatureMap`, the abstract contract (validation, particles' initial laws,
    forward/backward machinery) and helpers shared by the map families.
fixed
    The fixed random-feature maps of paper 000: favor, elu, softplus, porf_softplus,
    sigmoid2, cos2, softmaxfeat, rff.
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
    "FEATURE_MAPS",
    "make_feature_map",
]
