"""The Transformer layers, one import path for all: re-exports of the layer modules of this package.

Each concern has its own module: :mod:`~rieszflow.engine.attention.basic` (Linear,
LayerNorm, GELU, Dropout, FeedForward and the forward/backward contract),
:mod:`~rieszflow.engine.attention.embedding`, :mod:`~rieszflow.engine.attention.multihead`
(the Q, K, V, O projections), :mod:`~rieszflow.engine.attention.kernelized`,
:mod:`~rieszflow.engine.attention.softmax`, :mod:`~rieszflow.engine.attention.linformer`,
:mod:`~rieszflow.engine.attention.causal`, :mod:`~rieszflow.engine.attention.conv`,
:mod:`~rieszflow.engine.attention.encoder`, :mod:`~rieszflow.engine.attention.pooling`,
:mod:`~rieszflow.engine.attention.loss` and the shared helpers of
:mod:`~rieszflow.engine.attention.ops`.

References
----------
paper 000, eq. (3.2) and App. C; Wang et al. (2020), "Linformer: Self-Attention with
Linear Complexity", arXiv:2006.04768.
"""
from rieszflow.engine.attention.basic import Dropout, FeedForward, GELU, LayerNorm, Linear
from rieszflow.engine.attention.causal import (
    causal_linear_attention,
    causal_linear_attention_backward,
    causal_linear_attention_prefix,
    streaming_linear_attention,
)
from rieszflow.engine.attention.conv import depthwise_conv, depthwise_conv_backward
from rieszflow.engine.attention.embedding import Embedding, PositionEmbedding
from rieszflow.engine.attention.encoder import EncoderLayer
from rieszflow.engine.attention.kernelized import KernelizedLinearAttention
from rieszflow.engine.attention.linformer import LinformerAttention
from rieszflow.engine.attention.loss import softmax_cross_entropy
from rieszflow.engine.attention.multihead import QK_MODES
from rieszflow.engine.attention.ops import check_mask
from rieszflow.engine.attention.pooling import masked_mean_pool, masked_mean_pool_backward
from rieszflow.engine.attention.softmax import SoftmaxAttention

__all__ = [
    "Linear",
    "Embedding",
    "PositionEmbedding",
    "LayerNorm",
    "GELU",
    "Dropout",
    "FeedForward",
    "KernelizedLinearAttention",
    "causal_linear_attention",
    "causal_linear_attention_backward",
    "causal_linear_attention_prefix",
    "streaming_linear_attention",
    "depthwise_conv",
    "depthwise_conv_backward",
    "SoftmaxAttention",
    "LinformerAttention",
    "EncoderLayer",
    "masked_mean_pool",
    "masked_mean_pool_backward",
    "softmax_cross_entropy",
    "check_mask",
    "QK_MODES",
]
