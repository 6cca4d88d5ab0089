"""Layers of the bundled Transformer: float64 central-difference gradient checks and oracles.

Every hand-written backward is compared with central differences
(f(x + h e) - f(x - h e)) / 2h, h = 1e-6, of the scalar f = <R, layer(x)> for
a random upstream gradient R, on every coordinate of the input and of every
parameter (the layers are tiny). The error is the norm-wise relative error
|a - n| / (|a| + |n|) per tensor, required < 1e-6 (observed ~1e-9: the
truncation error is O(h^2) and the round-off O(1e-16 / h)). A tensor whose true
gradient is exactly 0 (the softmax key bias b_K: it adds q_i . b_K to a whole
score row, which the softmax cancels) passes when both norms are < 1e-8.

Oracles: linear attention equals the explicit quadratic form (normalised
phi(Q) phi(K)^T with masked keys, row-normalised) to 1e-10; softmax attention
equals a loop-based reference; the embedding's sort/cumsum scatter equals
np.add.at; GELU (tanh form) is within 1e-3 of the exact x Phi(x).

References: paper 000, eq. (3.2), App. C (eqs. (C.1)-(C.3)), App. F.2;
attention_reference.md, section 5.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import erf

from rieszflow.engine.attention.layers import (
    Dropout,
    Embedding,
    EncoderLayer,
    FeedForward,
    GELU,
    KernelizedLinearAttention,
    LayerNorm,
    Linear,
    PositionEmbedding,
    SoftmaxAttention,
    masked_mean_pool,
    masked_mean_pool_backward,
    softmax_cross_entropy,
)
from rieszflow.engine.features import FEATURE_MAPS, make_feature_map

H_FD = 1e-6
TOL = 1e-6
# particle maps (paper 000); the learned maps of paper 001 are tested in test_luna.py
POSITIVE_MAPS = sorted(name for name, cls in FEATURE_MAPS.items()
                       if cls.positive and not cls.learned and not cls.position_dependent)


def rel_err(a, n, atol=1e-8):
    """Norm-wise relative error; 0 when both norms are below atol (a true gradient of exactly 0)."""
    a, n = np.asarray(a, dtype=np.float64), np.asarray(n, dtype=np.float64)
    den = np.linalg.norm(a) + np.linalg.norm(n)
    return 0.0 if den < atol else float(np.linalg.norm(a - n) / den)


def numerical_grad(f, arr, h=H_FD, coords=None):
    """Central differences of the scalar f() with respect to arr (perturbed in place)."""
    assert arr.flags["C_CONTIGUOUS"], "perturbations must reach the array: it must be C-contiguous"
    g = np.zeros_like(arr)
    it = range(arr.size) if coords is None else coords
    flat = arr.reshape(-1)
    gflat = g.reshape(-1)
    for i in it:
        old = flat[i]
        flat[i] = old + h
        fp = f()
        flat[i] = old - h
        fm = f()
        flat[i] = old
        gflat[i] = (fp - fm) / (2 * h)
    return g


def check_layer(forward, backward, x, params, rng, tol=TOL, check_x=True):
    """Gradient-check a layer: forward(params, x) -> (y, cache); backward(dy, cache) -> (dx, grads)."""
    y, cache = forward(params, x)
    r = rng.standard_normal(y.shape)
    dx, grads = backward(r.copy(), cache)

    def f():
        return float(np.sum(forward(params, x)[0] * r))

    errs = {}
    if check_x:
        errs["x"] = rel_err(dx, numerical_grad(f, x))
    assert set(grads) == set(params), (sorted(grads), sorted(params))
    for name, p in params.items():
        assert grads[name].shape == p.shape, name
        errs[name] = rel_err(grads[name], numerical_grad(f, p))
    bad = {k: v for k, v in errs.items() if not v < tol}
    assert not bad, f"gradient check failed: {bad} (all: {errs})"
    return errs


def padded_mask(rng, b, length, min_len=1):
    lens = rng.integers(min_len, length + 1, size=b)
    lens[0] = length - 1 if length > 1 else 1          # at least one row has padding
    return np.arange(length)[None, :] < lens[:, None]


# ------------------------------------------------------------------ elementary layers

def test_linear_gradient():
    rng = np.random.default_rng(0)
    lin = Linear(3, 4)
    params = lin.init_params(rng)
    params["b"] = rng.standard_normal(4)
    x = rng.standard_normal((2, 5, 3))
    check_layer(lin.forward, lin.backward, x, params, rng)


def test_layernorm_gradient_and_moments():
    rng = np.random.default_rng(1)
    ln = LayerNorm(6)
    params = {"gamma": rng.standard_normal(6), "beta": rng.standard_normal(6)}
    x = 3.0 + 2.0 * rng.standard_normal((2, 3, 6))
    check_layer(ln.forward, ln.backward, x, params, rng)
    y, _ = ln.forward(ln.init_params(rng), x)
    np.testing.assert_allclose(y.mean(-1), 0.0, atol=1e-12)
    np.testing.assert_allclose(y.var(-1), x.var(-1) / (x.var(-1) + 1e-5), rtol=1e-12)


def test_gelu_gradient_and_exact_form():
    rng = np.random.default_rng(2)
    gelu = GELU()
    x = rng.standard_normal((4, 5)) * 2
    check_layer(lambda p, x: gelu.forward(x), gelu.backward, x, {}, rng)
    t = np.linspace(-8, 8, 2001)
    exact = 0.5 * t * (1 + erf(t / math.sqrt(2)))
    assert np.max(np.abs(gelu.forward(t)[0] - exact)) < 1e-3


def test_dropout_gradient_statistics_and_eval():
    p = 0.3
    drop = Dropout(p)
    x = np.random.default_rng(3).standard_normal((50, 40))

    def fwd(params, x):
        return drop.forward(x, True, np.random.default_rng(7))   # same mask on every call

    check_layer(fwd, drop.backward, x, {}, np.random.default_rng(4))
    y, mask = fwd({}, x)
    kept = mask != 0
    np.testing.assert_allclose(y[kept], x[kept] / (1 - p), rtol=1e-15)
    assert np.all(y[~kept] == 0)
    # keep fraction of 2000 Bernoulli(0.7) draws: SE = sqrt(0.21 / 2000) = 0.0102; allow 4 SE
    assert abs(kept.mean() - (1 - p)) < 4 * math.sqrt(p * (1 - p) / kept.size)
    y_eval, c = drop.forward(x, False, None)
    assert y_eval is x and c is None
    with pytest.raises(ValueError, match="rng"):
        drop.forward(x, True, None)
    with pytest.raises(ValueError, match="dropout p"):
        Dropout(1.0)


def test_feedforward_gradient_with_dropout():
    rng = np.random.default_rng(5)
    ffn = FeedForward(4, 6, dropout=0.25)
    params = ffn.init_params(rng)
    params["b1"] = rng.standard_normal(6)
    params["b2"] = rng.standard_normal(4)

    def fwd(params, x):
        return ffn.forward(params, x, True, np.random.default_rng(11))

    check_layer(fwd, ffn.backward, rng.standard_normal((2, 3, 4)), params, rng)


def test_embedding_gradient_and_scatter():
    rng = np.random.default_rng(6)
    emb = Embedding(7, 3)
    params = emb.init_params(rng)
    ids = rng.integers(0, 7, size=(4, 5))
    ids[0, :3] = 2                                          # repeated ids
    check_layer(lambda p, x: emb.forward(p, ids), emb.backward, None, params, rng, check_x=False)
    dy = rng.standard_normal((4, 5, 3))
    uid, rows = emb.backward_rows(dy, emb.forward(params, ids)[1])
    ref = np.zeros((7, 3))
    np.add.at(ref, ids.reshape(-1), dy.reshape(-1, 3))
    np.testing.assert_array_equal(uid, np.unique(ids))
    np.testing.assert_allclose(rows, ref[uid], rtol=1e-13, atol=1e-14)
    absent = np.setdiff1d(np.arange(7), uid)
    assert np.all(emb.backward(dy, emb.forward(params, ids)[1])[1]["weight"][absent] == 0)


def test_embedding_bad_ids():
    emb = Embedding(7, 3)
    params = emb.init_params(np.random.default_rng(0))
    with pytest.raises(ValueError, match="vocabulary"):
        emb.forward(params, np.array([[0, 7]]))
    with pytest.raises(ValueError, match="vocabulary"):
        emb.forward(params, np.array([[-1, 2]]))
    with pytest.raises(TypeError, match="integer"):
        emb.forward(params, np.array([[0.0, 1.0]]))


def test_position_embedding_gradient_and_max_len():
    rng = np.random.default_rng(8)
    pe = PositionEmbedding(6, 3)
    params = {"weight": rng.standard_normal((6, 3))}
    check_layer(pe.forward, pe.backward, rng.standard_normal((2, 4, 3)), params, rng)
    with pytest.raises(ValueError, match="max_len"):
        pe.forward(params, np.zeros((1, 7, 3)))


def test_masked_mean_pool_gradient_and_weights():
    rng = np.random.default_rng(9)
    mask = padded_mask(rng, 3, 5)
    h = rng.standard_normal((3, 5, 4))

    def fwd(params, x):
        return masked_mean_pool(x, mask)

    check_layer(fwd, lambda dy, c: (masked_mean_pool_backward(dy, c), {}), h, {}, rng)
    pooled, _ = masked_mean_pool(h, mask)
    for b in range(3):
        np.testing.assert_allclose(pooled[b], h[b, mask[b]].mean(0), rtol=1e-13)


def test_softmax_cross_entropy_value_gradient_and_stability():
    rng = np.random.default_rng(10)
    logits = rng.standard_normal((5, 3)) * 3
    labels = rng.integers(0, 3, size=5)
    loss, dlogits, probs = softmax_cross_entropy(logits, labels)
    p_ref = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    np.testing.assert_allclose(probs, p_ref, rtol=1e-13)
    np.testing.assert_allclose(float(loss), -np.mean(np.log(p_ref[np.arange(5), labels])), rtol=1e-13)
    num = numerical_grad(lambda: float(softmax_cross_entropy(logits, labels)[0]), logits)
    assert rel_err(dlogits, num) < TOL
    # stability: huge logits stay finite and exact (log-sum-exp)
    big = np.array([[1e4, 0.0], [0.0, -1e4]])
    loss, dl, pr = softmax_cross_entropy(big, np.array([1, 0]))
    assert np.isfinite(float(loss)) and abs(float(loss) - 1e4 / 2) < 1e-9
    assert np.all(np.isfinite(dl))
    with pytest.raises(ValueError, match="labels contains 3"):
        softmax_cross_entropy(logits, np.array([0, 1, 2, 3, 0]))
    with pytest.raises(ValueError, match="labels has shape"):
        softmax_cross_entropy(logits, np.array([0, 1]))
    with pytest.raises(ValueError, match="NaN"):
        softmax_cross_entropy(np.full((2, 2), np.nan), np.array([0, 1]))


# ------------------------------------------------------------------ attention

def make_linear_attention(name, qk, d_model=4, n_heads=2, m=3, seed=0, eps=0.0, **options):
    rng = np.random.default_rng(seed)
    d_k = d_model // n_heads
    fmap = make_feature_map(name, d_k, m, rng=rng, **options)
    attn = KernelizedLinearAttention(d_model, n_heads, fmap, qk=qk, eps=eps)
    params = attn.init_params(rng)
    for k in params:                       # non-zero biases so their gradients are exercised
        if k.startswith("b_"):
            params[k] = 0.3 * rng.standard_normal(params[k].shape)
    return attn, params


MAP_CASES = [(name, {}) for name in POSITIVE_MAPS] + [("favor", {"stabilise": "seq"})]


@pytest.mark.parametrize("qk", ["shared", "learned"])
@pytest.mark.parametrize("name,options", MAP_CASES, ids=[f"{n}{'-' + '-'.join(o.values()) if o else ''}"
                                                         for n, o in MAP_CASES])
def test_linear_attention_gradient(name, options, qk):
    attn, params = make_linear_attention(name, qk, **options)
    rng = np.random.default_rng(12)
    x = rng.standard_normal((2, 4, 4))
    mask = padded_mask(rng, 2, 4)
    check_layer(lambda p, x: attn.forward(p, x, mask), attn.backward, x, params, rng)


def test_linear_attention_gradient_with_eps():
    attn, params = make_linear_attention("softplus", "learned", eps=0.05)
    rng = np.random.default_rng(13)
    x = rng.standard_normal((2, 4, 4))
    mask = padded_mask(rng, 2, 4)
    check_layer(lambda p, x: attn.forward(p, x, mask), attn.backward, x, params, rng)


def quadratic_attention(attn, params, x, mask):
    """Explicit O(L^2) normalised kernel attention with the same phi, per head, by loops."""
    fmap, n_heads, d_k = attn.feature_map, attn.n_heads, attn.d_k
    b, length, d = x.shape
    if attn.qk == "learned":
        q = x @ params["w_q"] + params["b_q"]
        k = x @ params["w_k"] + params["b_k"]
    else:
        q = k = x
    v = x @ params["w_v"] + params["b_v"]
    out = np.zeros((b, length, d))
    for bb in range(b):
        for h in range(n_heads):
            sl = slice(h * d_k, (h + 1) * d_k)
            phi_q = fmap.forward(q[bb, :, sl], params["omega"][h])[0]
            phi_k = fmap.forward(k[bb, :, sl], params["omega"][h])[0]
            kern = phi_q @ phi_k.T                               # (L, L) = K(q_i, k_j)
            kern = kern * mask[bb][None, :]                      # masked keys omitted
            att = kern / (kern.sum(axis=1, keepdims=True) + attn.eps)
            out[bb, :, sl] = att @ v[bb, :, sl]
    return out @ params["w_o"] + params["b_o"]


@pytest.mark.parametrize("eps", [0.0, 1e-3])
@pytest.mark.parametrize("qk", ["shared", "learned"])
@pytest.mark.parametrize("name,options", MAP_CASES, ids=[f"{n}{'-' + '-'.join(o.values()) if o else ''}"
                                                         for n, o in MAP_CASES])
def test_linear_attention_equals_quadratic(name, options, qk, eps):
    attn, params = make_linear_attention(name, qk, d_model=8, n_heads=2, m=16, eps=eps, **options)
    rng = np.random.default_rng(14)
    x = rng.standard_normal((3, 6, 8))
    mask = padded_mask(rng, 3, 6)
    y, _ = attn.forward(params, x, mask)
    ref = quadratic_attention(attn, params, x, mask)
    np.testing.assert_allclose(y, ref, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("attn_kind", ["linear", "softmax"])
def test_padded_keys_have_no_influence(attn_kind):
    """Changing the inputs at padded positions leaves the outputs at real positions unchanged."""
    if attn_kind == "linear":
        attn, params = make_linear_attention("elu", "learned")
    else:
        attn = SoftmaxAttention(4, 2)
        params = attn.init_params(np.random.default_rng(0))
    rng = np.random.default_rng(15)
    x = rng.standard_normal((2, 5, 4))
    mask = np.array([[True, True, True, False, False], [True, True, True, True, True]])
    y1, _ = attn.forward(params, x, mask)
    x2 = x.copy()
    x2[0, 3:] = 100.0 * rng.standard_normal((2, 4))
    y2, _ = attn.forward(params, x2, mask)
    np.testing.assert_allclose(y2[mask], y1[mask], rtol=1e-12, atol=1e-12)
    assert not np.allclose(y2[~mask], y1[~mask])          # the padded outputs do change


@pytest.mark.parametrize("qk", ["learned", "shared"])
def test_softmax_attention_gradient(qk):
    rng = np.random.default_rng(16)
    attn = SoftmaxAttention(4, 2, qk=qk)
    params = attn.init_params(rng)
    for k in params:
        if k.startswith("b_"):
            params[k] = 0.3 * rng.standard_normal(params[k].shape)
    x = rng.standard_normal((2, 4, 4))
    mask = padded_mask(rng, 2, 4)
    check_layer(lambda p, x: attn.forward(p, x, mask), attn.backward, x, params, rng)


def test_softmax_attention_equals_naive_and_is_stable():
    rng = np.random.default_rng(17)
    attn = SoftmaxAttention(6, 3)
    params = attn.init_params(rng)
    x = rng.standard_normal((2, 5, 6))
    mask = padded_mask(rng, 2, 5)
    y, _ = attn.forward(params, x, mask)
    q = x @ params["w_q"] + params["b_q"]
    k = x @ params["w_k"] + params["b_k"]
    v = x @ params["w_v"] + params["b_v"]
    out = np.zeros_like(x)
    for b in range(2):
        for h in range(3):
            sl = slice(2 * h, 2 * h + 2)
            for i in range(5):
                w = [math.exp(q[b, i, sl] @ k[b, j, sl] / math.sqrt(2)) if mask[b, j] else 0.0
                     for j in range(5)]
                w = np.array(w) / sum(w)
                out[b, i, sl] = w @ v[b, :, sl]
    np.testing.assert_allclose(y, out @ params["w_o"] + params["b_o"], rtol=1e-12, atol=1e-12)
    y_big, _ = attn.forward(params, 1e3 * x, mask)          # scores ~1e6: no overflow
    assert np.all(np.isfinite(y_big))


@pytest.mark.parametrize("kind", ["linear-shared", "softmax"])
def test_encoder_layer_gradient_with_dropout(kind):
    rng = np.random.default_rng(18)
    if kind == "softmax":
        attn = SoftmaxAttention(4, 2)
    else:
        attn = KernelizedLinearAttention(4, 2, make_feature_map("cos2", 2, 3, rng=rng), qk="shared")
    layer = EncoderLayer(attn, d_ff=5, dropout=0.2)
    params = layer.init_params(rng)
    for k in params:
        if k.endswith((".beta", ".b1", ".b2")) or ".b_" in k:
            params[k] = 0.3 * rng.standard_normal(params[k].shape)
        if k.endswith(".gamma"):
            params[k] = 1.0 + 0.3 * rng.standard_normal(params[k].shape)
    x = rng.standard_normal((2, 4, 4))
    mask = padded_mask(rng, 2, 4)

    def fwd(p, x):
        return layer.forward(p, x, mask, True, np.random.default_rng(21))

    check_layer(fwd, layer.backward, x, params, rng)


# ------------------------------------------------------------------ bad input

def test_attention_bad_inputs():
    attn, params = make_linear_attention("softplus", "shared")
    x = np.zeros((2, 3, 4))
    with pytest.raises(ValueError, match="mask has shape"):
        attn.forward(params, x, np.ones((2, 4), dtype=bool))
    with pytest.raises(TypeError, match="mask has dtype"):
        attn.forward(params, x, np.ones((2, 3)))
    with pytest.raises(ValueError, match="no True entry"):
        attn.forward(params, x, np.array([[True, True, True], [False, False, False]]))
    with pytest.raises(ValueError, match="x has shape"):
        attn.forward(params, np.zeros((2, 3, 5)), np.ones((2, 3), dtype=bool))
    bad = dict(params, omega=np.zeros((2, 3, 3)))
    with pytest.raises(ValueError, match="omega"):
        attn.forward(bad, x, np.ones((2, 3), dtype=bool))
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="not positive"):
        KernelizedLinearAttention(4, 2, make_feature_map("rff", 2, 3, rng=rng))
    with pytest.raises(ValueError, match="stabilise='row'"):
        KernelizedLinearAttention(4, 2, make_feature_map("favor", 2, 3, stabilise="row"))
    with pytest.raises(ValueError, match="qk="):
        KernelizedLinearAttention(4, 2, make_feature_map("elu", 2, 3, rng=rng), qk="tied")
    with pytest.raises(ValueError, match="divisible"):
        SoftmaxAttention(5, 2)
    with pytest.raises(TypeError, match="feature_map"):
        KernelizedLinearAttention(4, 2, "favor")
