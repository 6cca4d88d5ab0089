"""Token flows: attention as interacting particles (paper 004, section 3.1; GLPR; Sinkformers).

A cloud of ``n`` tokens ``x`` of shape ``(..., n, d)`` (leading axes are
independent clouds, e.g. a batch of initialisations) moves under one of

* the discrete layer map of paper 004 (multi-head softmax attention, with or
  without residual connection and LayerNorm), :class:`MultiHeadAttentionLayer`;
* the continuous-time flows of Geshkovski-Letrouit-Polyanskiy-Rigollet (GLPR):
  pure attention on the sphere (``SA``), its unnormalised variant (``USA``),
  the Sinkhorn (doubly stochastic) variant of Sander et al., and the residual
  flow in R^d, :class:`AttentionField`;

driven by any attention kernel (:mod:`~rieszflow.engine.tokenflow.kernels`: exact softmax,
chunked over query and key blocks; linear attention with any feature map,
O(n m)). Integrators are ``(init_fn, step_fn)`` factories
(:mod:`~rieszflow.engine.tokenflow.integrate`); :func:`run_flow` owns the loop and the
HDF5 output. Observables (interaction energy, clusters, W1, Wendel's
hemisphere probability, the equiangular ODE) are in
:mod:`~rieszflow.engine.tokenflow.observables`.

References
----------
paper 004 (Vuckovic, Baratin, Tachet des Combes 2020), section 3.1 and App. A;
spec paper004_attention_theory.md, sections 2.4 and 6.1-6.4;
Geshkovski, Letrouit, Polyanskiy, Rigollet, "A mathematical perspective on
Transformers", arXiv:2312.10794;
Sander, Ablin, Blondel, Peyre, "Sinkformers", AISTATS 2022, arXiv:2110.11773.
"""
from rieszflow.engine.tokenflow.dynamics import (
    VARIANTS,
    AttentionField,
    FieldValue,
    MultiHeadAttentionLayer,
    euclidean_attention_flow,
    layer_norm,
    normalise,
    sphere_attention_flow,
    tangent_projection,
)
from rieszflow.engine.tokenflow.integrate import (
    INTEGRATORS,
    FlowResult,
    FlowState,
    euler,
    make_integrator,
    projected_euler,
    rk4,
    run_flow,
    sphere_tolerance,
)
from rieszflow.engine.tokenflow.kernels import (
    AttentionOutput,
    GaussianKernel,
    LinearKernel,
    SinkhornOutput,
    SoftmaxKernel,
    dense_attention,
)

__all__ = [
    "VARIANTS", "AttentionField", "FieldValue", "MultiHeadAttentionLayer",
    "euclidean_attention_flow", "layer_norm", "normalise", "sphere_attention_flow",
    "tangent_projection",
    "INTEGRATORS", "FlowResult", "FlowState", "euler", "make_integrator", "projected_euler", "rk4",
    "run_flow", "sphere_tolerance",
    "AttentionOutput", "GaussianKernel", "LinearKernel", "SinkhornOutput", "SoftmaxKernel",
    "dense_attention",
]
