"""The attention operators of rieszflow agree where their definitions coincide.

Three multi-head softmax layers (the bundled Transformer's SoftmaxAttention, the token-flow
MultiHeadAttentionLayer, paper 004's measure-theoretic MultiHeadTransformerLayer) and the two
Gaussian kernels (token flows, measure-theoretic potentials) are written for different purposes
(training with a hand-written backward; flows of token clouds; maps of measures). Each states its
scaling; here the same weights are mapped into each convention and the outputs must agree to
round-off:

* SoftmaxAttention: ``x @ w`` per projection, head h = columns h*d_k:(h+1)*d_k, scores
  ``q.k / sqrt(d_k)``, merged heads ``@ w_o``.
* MultiHeadAttentionLayer: ``q = W_h^Q x`` with ``w_q`` of shape (H, d_k, d), default kernel
  ``SoftmaxKernel(beta = 1/sqrt(d_k))``, output ``sum_h y^h W_h^O`` (row vectors).
* MultiHeadTransformerLayer: scores ``beta <W_h^Q x, W_h^K y> / sqrt(d')`` (beta = 1), output the
  barycentre of the atoms ``H y^h W_h^O`` with weights 1/H, i.e. ``sum_h y^h W_h^O``.
"""
import numpy as np
import pytest

from rieszflow import theory as ma
from rieszflow.engine.attention.layers import SoftmaxAttention
from rieszflow.engine.measures import empirical_measure
from rieszflow.engine.tokenflow.dynamics import MultiHeadAttentionLayer
from rieszflow.engine.tokenflow.kernels import GaussianKernel, SoftmaxKernel


def _weights(rng, d, h):
    return {k: rng.standard_normal((d, d)) / np.sqrt(d) for k in ("w_q", "w_k", "w_v", "w_o")}


def _per_head(w, h, dk, out=False):
    """(d, d) matrix of x @ w -> (H, d_k, d) per-head matrices acting on column vectors; for the
    output projection the row-vector blocks (H, d_k, d)."""
    if out:
        return np.stack([w[i * dk:(i + 1) * dk, :] for i in range(h)])
    return np.stack([w[:, i * dk:(i + 1) * dk].T for i in range(h)])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_three_multi_head_softmax_layers_agree(seed):
    rng = np.random.default_rng(seed)
    d, h, n = 6, 3, 7
    dk = d // h
    w = _weights(rng, d, h)
    x = rng.standard_normal((n, d))

    bundled = SoftmaxAttention(d, h, qk="learned")
    params = dict(w, b_q=np.zeros(d), b_k=np.zeros(d), b_v=np.zeros(d), b_o=np.zeros(d))
    y_bundled, _ = bundled.forward(params, x[None], np.ones((1, n), dtype=bool))

    wq, wk, wv = (_per_head(w[k], h, dk) for k in ("w_q", "w_k", "w_v"))
    wo = _per_head(w["w_o"], h, dk, out=True)
    y_flow = MultiHeadAttentionLayer(wq, wk, wv, wo)(x)

    layer = ma.MultiHeadTransformerLayer(wq, wk, wv, wo, beta=1.0)
    y_measure = layer.transport(empirical_measure(x))

    np.testing.assert_allclose(y_flow, y_bundled[0], rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(y_measure, y_bundled[0], rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("beta", [0.3, 1.0, 4.0])
def test_gaussian_kernels_share_one_parameterisation(beta):
    """GaussianKernel(beta) means exp(-(beta/2)|q - k|^2) in the token flows and in paper 004's
    operators; the attention they induce on one token set is the same, and from_sigma is the
    paper's exp(-|x - y|^2 / sigma^2)."""
    rng = np.random.default_rng(5)
    x, v = rng.standard_normal((9, 3)), rng.standard_normal((9, 2))
    flow = GaussianKernel(beta).attend(x, x, v).out
    measure, _ = ma.attention_kernel(x, empirical_measure(x), ma.GaussianKernel(beta), v)
    np.testing.assert_allclose(measure, flow, rtol=1e-12, atol=1e-14)
    sigma = 0.8
    a = ma.GaussianKernel.from_sigma(sigma).log_potential(x, x)
    np.testing.assert_allclose(a, -((x[:, None] - x[None]) ** 2).sum(-1) / sigma ** 2, rtol=1e-14)


def test_softmax_kernels_agree():
    """SoftmaxKernel(beta) (token flows) and DotProductKernel(I, beta) (paper 004) give the same
    row-normalised attention."""
    rng = np.random.default_rng(6)
    x, v = rng.standard_normal((8, 4)), rng.standard_normal((8, 3))
    flow = SoftmaxKernel(0.7).attend(x, x, v).out
    measure, _ = ma.attention_kernel(x, empirical_measure(x), ma.DotProductKernel(np.eye(4), 0.7), v)
    np.testing.assert_allclose(measure, flow, rtol=1e-12, atol=1e-14)


def test_feed_forward_kernel_equals_the_model_layer():
    """Paper 004's FFN kernel delta_{f(x)} built from the bundled model's FeedForward parameters
    equals the layer's forward pass (dropout off), and its Jacobian matches central differences."""
    from rieszflow.engine.attention.layers import FeedForward as LayerFFN

    rng = np.random.default_rng(7)
    layer = LayerFFN(5, 11, dropout=0.0)
    params = layer.init_params(rng)
    params["b1"] = rng.standard_normal(11)
    params["b2"] = rng.standard_normal(5)
    x = rng.standard_normal((4, 5))
    y_layer, _ = layer.forward(params, x[None], train=False)
    f = ma.FeedForward.from_layer_params(params)
    np.testing.assert_allclose(f(x), y_layer[0], rtol=1e-13, atol=1e-14)
    J, h = f.jacobian(x), 1e-6
    for k in range(5):
        e = np.zeros(5)
        e[k] = h
        np.testing.assert_allclose((f(x + e) - f(x - e)) / (2 * h), J[:, :, k], rtol=1e-6, atol=1e-8)
