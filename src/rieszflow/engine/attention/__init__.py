"""The bundled Transformer of paper 000: layers with hand-written backward, the classifier, Adam.

Modules
-------
layers
    Forward/backward pairs with caches: Linear, Embedding, PositionEmbedding,
    LayerNorm, GELU, Dropout, FeedForward, KernelizedLinearAttention (eq. (3.2),
    (C.2)-(C.3)), SoftmaxAttention (eq. (C.1)), LinformerAttention (Wang et al. 2020), EncoderLayer (post-LN),
    masked mean pooling and the softmax cross-entropy.
model
    TransformerClassifier: flat parameter dict, forward/backward, pooled
    representation for Phase A, parameter groups, state dicts.
optim
    Adam / AdamW over a subset of parameter names, and the warm-up + cosine schedule.

References
----------
paper 000, eq. (3.2); App. C; App. F.2 ("Experimental setup").
"""
from rieszflow.engine.attention.layers import (
    Dropout,
    Embedding,
    EncoderLayer,
    FeedForward,
    GELU,
    KernelizedLinearAttention,
    LayerNorm,
    Linear,
    LinformerAttention,
    PositionEmbedding,
    SoftmaxAttention,
    masked_mean_pool,
    masked_mean_pool_backward,
    softmax_cross_entropy,
)
from rieszflow.engine.attention.model import PARAMETER_GROUPS, TransformerClassifier
from rieszflow.engine.attention.optim import Adam

__all__ = [
    "Adam",
    "Dropout",
    "Embedding",
    "EncoderLayer",
    "FeedForward",
    "GELU",
    "KernelizedLinearAttention",
    "LayerNorm",
    "LinformerAttention",
    "Linear",
    "PARAMETER_GROUPS",
    "PositionEmbedding",
    "SoftmaxAttention",
    "TransformerClassifier",
    "masked_mean_pool",
    "masked_mean_pool_backward",
    "softmax_cross_entropy",
]
