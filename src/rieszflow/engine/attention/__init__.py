"""The bundled Transformer of paper 000: layers with hand-written backward, the classifier, Adam.

Modules
-------
basic, embedding
    Forward/backward pairs with caches: Linear, LayerNorm, GELU, Dropout, FeedForward;
    Embedding, PositionEmbedding.
multihead
    The Q, K, V, O projections shared by the attention layers (``project``).
kernelized, softmax, linformer
    KernelizedLinearAttention (eq. (3.2), (C.2)-(C.3)), SoftmaxAttention (eq. (C.1)),
    LinformerAttention (Wang et al. 2020).
causal, conv
    Causal and streaming linear-attention kernels; the depthwise convolution (DWC) branch.
encoder, pooling, loss
    EncoderLayer (post-LN or pre-LN), masked mean pooling, the softmax cross-entropy.
ops
    The padding-mask check and the array helpers the layers share.
layers
    Re-exports of the public names of the layer modules above (one import path).
model
    TransformerClassifier: flat parameter dict, forward/backward, pooled
    representation for Phase A, parameter groups, state dicts.
optim
    Adam / AdamW over a subset of parameter names, and the warm-up + cosine schedule.

References
----------
paper 000, eq. (3.2); App. C; App. F.2 ("Experimental setup").
"""
from rieszflow.engine.attention.basic import GELU, Dropout, FeedForward, LayerNorm, Linear
from rieszflow.engine.attention.embedding import Embedding, PositionEmbedding
from rieszflow.engine.attention.encoder import EncoderLayer
from rieszflow.engine.attention.kernelized import KernelizedLinearAttention
from rieszflow.engine.attention.linformer import LinformerAttention
from rieszflow.engine.attention.loss import softmax_cross_entropy
from rieszflow.engine.attention.pooling import masked_mean_pool, masked_mean_pool_backward
from rieszflow.engine.attention.softmax import SoftmaxAttention
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
