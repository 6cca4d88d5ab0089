"""rieszflow.theory: each paper's mathematics, measured (one module or package per paper).

Paper 004 (below, at the top of this package); paper 001 (LUNA) in :mod:`rieszflow.theory.luna`;
paper 002 (the infinite-width law of one attention layer) in :mod:`rieszflow.theory.infinite_width`;
paper 003 (Kernel Geometry Divergence) in :mod:`rieszflow.theory.kgd`. Paper 000's own mathematics
(the McKean-Vlasov limit, Gibbs states, rate functions) is the subject of :mod:`rieszflow.solvers`.

Paper 004: the mathematical theory of attention.

Attention as a nonlinear Markov transport of empirical measures (tokens as
self-interacting particles), the paper's regularity bounds next to corrected ones,
and the maximum-entropy characterisation of softmax attention. It builds on the
engine (measures, spaces, kernels) and is used by the ``attention-theory`` study;
the engine never imports it.

Modules
-------
``luna``, ``infinite_width``, ``kgd``
    papers 001, 002 and 003 (see above).
``operators``
    softmatch, lookup, Dirac projection, attention kernels, self-attention and
    Transformer layers as maps on measures.
``potentials``
    interaction potentials G = exp(a) (dot-product, Gaussian, linear random-feature)
    and their constants.
``bounds``
    Props. 19-26, Thm. 23, Cor. 24/30, Lemmas 31/40 as printed and corrected.
``max_entropy``
    Theorem 14 (softmax attention as a maximum-entropy I-projection) and Gaussian
    M-projections.

References
----------
Vuckovic, Baratin, Tachet des Combes, "A Mathematical Theory of Attention",
arXiv:2007.02876 (paper 004); docs/specs/paper004_attention_theory.md.
"""
from rieszflow.theory._common import (
    METRICS,
    operator_norm,
)
from rieszflow.theory.potentials import (
    InteractionPotential,
    DotProductKernel,
    GaussianKernel,
    LinearFeatureKernel,
    KernelConstants,
    QueryConstants,
)
from rieszflow.theory.operators import (
    LinearLookup,
    FeedForward,
    boltzmann_gibbs,
    softmatch,
    softmatch_measure,
    dirac_projection,
    gaussian_projection,
    attention_kernel,
    SelfAttention,
    MultiHeadTransformerLayer,
    iterate,
    wasserstein1,
)
from rieszflow.theory.bounds import (
    Bound,
    prop19_query_bound,
    prop19_key_bound,
    prop20_bound,
    prop21_bound,
    thm23_bound,
    cor24_bound,
    prop25_bound,
    lemma31_bound,
    cor30_constant,
    lemma40_bound,
)

__all__ = [
    "METRICS",
    "operator_norm",
    "InteractionPotential",
    "DotProductKernel",
    "GaussianKernel",
    "LinearFeatureKernel",
    "KernelConstants",
    "QueryConstants",
    "LinearLookup",
    "FeedForward",
    "boltzmann_gibbs",
    "softmatch",
    "softmatch_measure",
    "dirac_projection",
    "gaussian_projection",
    "attention_kernel",
    "SelfAttention",
    "MultiHeadTransformerLayer",
    "iterate",
    "wasserstein1",
    "Bound",
    "prop19_query_bound",
    "prop19_key_bound",
    "prop20_bound",
    "prop21_bound",
    "thm23_bound",
    "cor24_bound",
    "prop25_bound",
    "lemma31_bound",
    "cor30_constant",
    "lemma40_bound",
]
