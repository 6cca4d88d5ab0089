"""Linformer attention (Wang et al. 2020, arXiv:2006.04768): gradients, closed form, padding, model.

Layer gradient checks reuse the float64 central-difference helper of
tests/test_attention_layers.py (h = 1e-6, every coordinate of x and of every
parameter, norm-wise relative error < 1e-6 per tensor). The closed form: with
k = L and E = F = I the layer is :class:`SoftmaxAttention` with the same
projections (compared with that class, not with a second softmax). Padding:
padded key/value contents never reach any output, and appended padding leaves
every output unchanged (the mask zeroes K, V rows before the projection).
Model checks reuse tests/test_attention_model.py's tiny model and its
directional / spot-check finite differences (h = 1e-5, < 1e-6).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from rieszflow.engine.attention import TransformerClassifier, softmax_cross_entropy
from rieszflow.engine.attention.layers import EncoderLayer, LinformerAttention, SoftmaxAttention
from rieszflow.engine.attention.model import ATTENTIONS, PARAMETER_GROUPS

from test_attention_layers import check_layer, padded_mask
from test_attention_model import H_FD as MODEL_H, TOL as MODEL_TOL, VOCAB, batch, make_loss, perturb_params
from test_attention_model import rel_err as scalar_rel_err
from test_attention_model import tiny_model

LIN = dict(attention="linformer", linformer_k=4)


def make_linformer(d_model=4, n_heads=2, k=3, max_len=6, qk="learned", seed=0):
    rng = np.random.default_rng(seed)
    attn = LinformerAttention(d_model, n_heads, k, max_len, qk=qk)
    params = attn.init_params(rng)
    for name in params:                     # non-zero biases so their gradients are exercised
        if name.startswith("b_"):
            params[name] = 0.3 * rng.standard_normal(params[name].shape)
    return attn, params


# ------------------------------------------------------------------ layer

@pytest.mark.parametrize("qk", ["learned", "shared"])
@pytest.mark.parametrize("length", [4, 6], ids=["L<max_len", "L=max_len"])
def test_linformer_gradient(qk, length):
    """Every parameter (w_q, b_q, w_k, b_k, w_v, b_v, w_o, b_o, e_proj, f_proj) and x, padded batch."""
    attn, params = make_linformer(qk=qk)
    rng = np.random.default_rng(30)
    x = rng.standard_normal((2, length, 4))
    mask = padded_mask(rng, 2, length)
    errs = check_layer(lambda p, x: attn.forward(p, x, mask), attn.backward, x, params, rng)
    expected = {"x", "w_v", "b_v", "w_o", "b_o", "e_proj", "f_proj"}
    if qk == "learned":
        expected |= {"w_q", "b_q", "w_k", "b_k"}
    assert set(errs) == expected


def test_linformer_projection_gradient_is_zero_beyond_length():
    attn, params = make_linformer(k=3, max_len=6)
    rng = np.random.default_rng(31)
    x = rng.standard_normal((2, 4, 4))
    mask = np.array([[True, True, False, False], [True, False, False, False]])
    y, cache = attn.forward(params, x, mask)
    _, grads = attn.backward(rng.standard_normal(y.shape), cache)
    for name in ("e_proj", "f_proj"):
        assert np.all(grads[name][:, 4:] == 0)       # columns >= L are not used
        assert np.all(grads[name][:, 2:4] == 0)      # padded in every row of the batch: multiply zeros
        assert np.any(grads[name][:, :2] != 0)


@pytest.mark.parametrize("qk", ["learned", "shared"])
def test_identity_projection_equals_softmax_attention(qk):
    """k = L, E = F = I, all-real mask: Linformer is softmax attention with the same W's."""
    length = 5
    lin = LinformerAttention(6, 3, k=length, max_len=length, qk=qk)
    soft = SoftmaxAttention(6, 3, qk=qk)
    params = lin.init_params(np.random.default_rng(32))
    params_soft = soft.init_params(np.random.default_rng(32))
    for name, val in params_soft.items():            # same seed, same draw order: same W's
        np.testing.assert_array_equal(params[name], val)
    rng = np.random.default_rng(33)
    for name in params_soft:
        if name.startswith("b_"):
            params[name] = params_soft[name] = 0.3 * rng.standard_normal(val.shape)
    params["e_proj"] = np.eye(length)
    params["f_proj"] = np.eye(length)
    x = rng.standard_normal((2, length, 6))
    mask = np.ones((2, length), dtype=bool)
    y, c = lin.forward(params, x, mask)
    y_ref, c_ref = soft.forward(params_soft, x, mask)
    np.testing.assert_allclose(y, y_ref, rtol=1e-12, atol=1e-12)
    dy = rng.standard_normal(y.shape)
    dx, g = lin.backward(dy, c)
    dx_ref, g_ref = soft.backward(dy, c_ref)
    np.testing.assert_allclose(dx, dx_ref, rtol=1e-10, atol=1e-12)
    for name in g_ref:
        np.testing.assert_allclose(g[name], g_ref[name], rtol=1e-10, atol=1e-12, err_msg=name)


def test_padded_keys_have_no_influence():
    """Changing x at padded positions leaves real-token outputs unchanged (K, V rows are masked)."""
    attn, params = make_linformer(k=3, max_len=6)
    rng = np.random.default_rng(34)
    x = rng.standard_normal((2, 5, 4))
    mask = np.array([[True, True, True, False, False], [True, True, True, True, True]])
    y1, _ = attn.forward(params, x, mask)
    x2 = x.copy()
    x2[0, 3:] = 100.0 * rng.standard_normal((2, 4))
    y2, _ = attn.forward(params, x2, mask)
    np.testing.assert_allclose(y2[mask], y1[mask], rtol=1e-12, atol=1e-12)
    assert not np.allclose(y2[~mask], y1[~mask])          # the padded queries' outputs do change


def test_appended_padding_leaves_outputs_unchanged():
    """Right padding: the columns E[:, j] of padded positions multiply zeros, so L itself does not matter."""
    attn, params = make_linformer(k=3, max_len=8)
    rng = np.random.default_rng(35)
    x = rng.standard_normal((2, 4, 4))
    mask = np.array([[True, True, True, False], [True, True, True, True]])
    y1, _ = attn.forward(params, x, mask)
    x2 = np.concatenate([x, rng.standard_normal((2, 3, 4))], axis=1)
    mask2 = np.concatenate([mask, np.zeros((2, 3), dtype=bool)], axis=1)
    y2, _ = attn.forward(params, x2, mask2)
    np.testing.assert_allclose(y2[:, :4][mask], y1[mask], rtol=1e-12, atol=1e-12)


def test_linformer_matches_explicit_loops():
    """The forward against a per-head, per-sequence loop (projection, then softmax attention via the class)."""
    attn, params = make_linformer(d_model=6, n_heads=3, k=4, max_len=7)
    rng = np.random.default_rng(36)
    x = rng.standard_normal((2, 5, 6))
    mask = padded_mask(rng, 2, 5)
    y, _ = attn.forward(params, x, mask)
    q = x @ params["w_q"] + params["b_q"]
    k = (x @ params["w_k"] + params["b_k"]) * mask[..., None]
    v = (x @ params["w_v"] + params["b_v"]) * mask[..., None]
    e, f = params["e_proj"][:, :5], params["f_proj"][:, :5]
    out = np.zeros_like(x)
    for b in range(2):
        for h in range(3):
            sl = slice(2 * h, 2 * h + 2)
            kp, vp = e @ k[b, :, sl], f @ v[b, :, sl]
            for i in range(5):
                w = np.array([math.exp(q[b, i, sl] @ kp[r] / math.sqrt(2)) for r in range(4)])
                out[b, i, sl] = (w / w.sum()) @ vp
    np.testing.assert_allclose(y, out @ params["w_o"] + params["b_o"], rtol=1e-12, atol=1e-12)


def test_linformer_init():
    attn = LinformerAttention(8, 2, k=16, max_len=48)
    params = attn.init_params(np.random.default_rng(37), dtype=np.float32)
    bound = math.sqrt(3.0 / (16 + 48))                   # Xavier-uniform, gain 1/sqrt(2)
    for name in ("e_proj", "f_proj"):
        p = params[name]
        assert p.shape == (16, 48) and p.dtype == np.float32 and p.flags["C_CONTIGUOUS"]
        assert np.all(np.abs(p) <= bound)
        # 768 uniform draws: sample variance within 4 SE of a^2 / 3 (SE ~ a^2 sqrt(4/45/768))
        assert abs(p.var() - bound ** 2 / 3) < 4 * bound ** 2 * math.sqrt(4 / 45 / p.size)
    assert not np.array_equal(params["e_proj"], params["f_proj"])


def test_encoder_layer_gradient_with_linformer():
    rng = np.random.default_rng(38)
    layer = EncoderLayer(LinformerAttention(4, 2, k=3, max_len=5), d_ff=5, dropout=0.2)
    params = layer.init_params(rng)
    for name in params:
        if name.endswith((".beta", ".b1", ".b2")) or ".b_" in name:
            params[name] = 0.3 * rng.standard_normal(params[name].shape)
    x = rng.standard_normal((2, 4, 4))
    mask = padded_mask(rng, 2, 4)

    def fwd(p, x):
        return layer.forward(p, x, mask, True, np.random.default_rng(21))

    check_layer(fwd, layer.backward, x, params, rng)


def test_linformer_bad_inputs():
    attn, params = make_linformer(k=3, max_len=6)
    x = np.zeros((2, 3, 4))
    ok = np.ones((2, 3), dtype=bool)
    with pytest.raises(ValueError, match="k must be >= 1"):
        LinformerAttention(4, 2, k=0, max_len=6)
    with pytest.raises(TypeError, match="k must be an integer"):
        LinformerAttention(4, 2, k=2.0, max_len=6)
    with pytest.raises(ValueError, match="max_len must be >= 1"):
        LinformerAttention(4, 2, k=2, max_len=0)
    with pytest.raises(ValueError, match="qk="):
        LinformerAttention(4, 2, k=2, max_len=6, qk="tied")
    with pytest.raises(ValueError, match="divisible"):
        LinformerAttention(5, 2, k=2, max_len=6)
    with pytest.raises(ValueError, match="max_len=6"):
        attn.forward(params, np.zeros((2, 7, 4)), np.ones((2, 7), dtype=bool))
    with pytest.raises(ValueError, match="e_proj"):
        attn.forward(dict(params, e_proj=np.zeros((3, 5))), x, ok)
    with pytest.raises(ValueError, match="f_proj"):
        attn.forward(dict(params, f_proj=np.zeros((2, 6))), x, ok)
    with pytest.raises(ValueError, match="mask has shape"):
        attn.forward(params, x, np.ones((2, 4), dtype=bool))
    with pytest.raises(TypeError, match="mask has dtype"):
        attn.forward(params, x, np.ones((2, 3)))
    with pytest.raises(ValueError, match="no True entry"):
        attn.forward(params, x, np.array([[True, True, True], [False, False, False]]))
    with pytest.raises(ValueError, match="x has shape"):
        attn.forward(params, np.zeros((2, 3, 5)), ok)


# ------------------------------------------------------------------ model

def test_model_registers_linformer():
    assert "linformer" in ATTENTIONS and "projection" in PARAMETER_GROUPS
    model = tiny_model(**LIN)
    assert model.config["linformer_k"] == 4 and model.config["qk"] == "learned" and model.config["m"] is None
    assert tiny_model(attention="softmax").config["linformer_k"] is None
    names = model.parameter_names("projection")
    assert names == ["layers.0.attn.e_proj", "layers.0.attn.f_proj",
                     "layers.1.attn.e_proj", "layers.1.attn.f_proj"]
    assert all(model.params[k].shape == (4, 7) for k in names)
    groups = [model.parameter_names(g) for g in PARAMETER_GROUPS]
    union = [k for g in groups for k in g]
    assert sorted(union) == sorted(model.params) and len(union) == len(set(union))
    assert model.particle_names() == []
    assert tiny_model(attention="softmax").parameter_names("projection") == []


def test_model_forward_backward_and_gradient():
    model = tiny_model(attention="linformer", linformer_k=8)     # k = 8 > max_len = 7 is allowed
    perturb_params(model)
    rng = np.random.default_rng(40)
    ids, mask, labels = batch(rng)
    loss = make_loss(model, ids, mask, labels)
    logits = model.forward(ids, mask, True, np.random.default_rng(5))
    assert logits.shape == (3, 3) and np.all(np.isfinite(logits))
    _, dlogits, _ = softmax_cross_entropy(logits, labels)
    grads = model.backward(dlogits)
    assert set(grads) == set(model.params)
    # directional derivative over all parameters
    direction = {k: rng.standard_normal(v.shape) for k, v in model.params.items()}
    norm = math.sqrt(sum(float(np.sum(d * d)) for d in direction.values()))
    analytic = sum(float(np.sum(grads[k] * direction[k])) for k in grads) / norm
    saved = {k: v.copy() for k, v in model.params.items()}
    for sign in (1, -1):
        for k in model.params:
            model.params[k][...] = saved[k] + sign * MODEL_H * direction[k] / norm
        if sign == 1:
            lp = loss()
        else:
            lm = loss()
    for k in model.params:
        model.params[k][...] = saved[k]
    assert scalar_rel_err(analytic, (lp - lm) / (2 * MODEL_H)) < MODEL_TOL
    # spot check: 3 coordinates of a few parameters, E/F in the used columns
    length = ids.shape[1]
    for k in ("layers.0.attn.e_proj", "layers.1.attn.f_proj", "layers.0.attn.w_k", "layers.1.attn.b_q"):
        p = model.params[k]
        if k.endswith("_proj"):
            coords = [np.ravel_multi_index((r, c), p.shape)
                      for r, c in zip(rng.integers(0, p.shape[0], 3), rng.integers(0, length - 2, 3))]
        else:
            coords = rng.choice(p.size, size=3, replace=False)
        flat = p.reshape(-1)
        for i in coords:
            old = flat[i]
            flat[i] = old + MODEL_H
            lp = loss()
            flat[i] = old - MODEL_H
            lm = loss()
            flat[i] = old
            num = (lp - lm) / (2 * MODEL_H)
            assert scalar_rel_err(grads[k].reshape(-1)[i], num) < MODEL_TOL, (k, i, grads[k].reshape(-1)[i], num)
    # columns of E, F beyond the batch length get no gradient
    assert np.all(grads["layers.0.attn.e_proj"][:, length:] == 0)


def test_model_padding_invariance():
    model = tiny_model(**LIN)
    rng = np.random.default_rng(41)
    ids, mask, _ = batch(rng, b=3, length=4)
    p1 = model.pooled(ids, mask)
    l1 = model.forward(ids, mask)
    ids2 = np.concatenate([ids, rng.integers(0, VOCAB, size=(3, 3))], axis=1)
    mask2 = np.concatenate([mask, np.zeros((3, 3), dtype=bool)], axis=1)
    np.testing.assert_allclose(model.pooled(ids2, mask2), p1, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(model.forward(ids2, mask2), l1, rtol=1e-12, atol=1e-12)


def test_model_state_dict_round_trip():
    model = tiny_model(**LIN)
    other = tiny_model(seed=11, **LIN)
    ids, mask, _ = batch(np.random.default_rng(42))
    assert not np.allclose(model.forward(ids, mask), other.forward(ids, mask))
    state = model.state_dict()
    assert set(state) == set(model.params) and "layers.0.attn.e_proj" in state
    before = other.params["layers.0.attn.e_proj"]
    other.load_state_dict(state)
    assert other.params["layers.0.attn.e_proj"] is before       # copied in place
    for k in state:
        np.testing.assert_array_equal(other.params[k], model.params[k])
    np.testing.assert_array_equal(other.forward(ids, mask), model.forward(ids, mask))
    wrong_k = tiny_model(attention="linformer", linformer_k=3)
    with pytest.raises(ValueError, match="e_proj"):
        wrong_k.load_state_dict(state)
    with pytest.raises(ValueError, match="missing names"):
        tiny_model(attention="softmax").load_state_dict(state)


def test_model_bad_linformer_inputs():
    with pytest.raises(ValueError, match="linformer_k=0"):
        tiny_model(attention="linformer", linformer_k=0)
    with pytest.raises(ValueError, match="linformer_k=2.5"):
        tiny_model(attention="linformer", linformer_k=2.5)
    with pytest.raises(ValueError, match="linformer_k=True"):
        tiny_model(attention="linformer", linformer_k=True)
    with pytest.raises(ValueError, match="linformer_k=None"):
        tiny_model(attention="linformer")
    with pytest.raises(ValueError, match="linformer_k=4 is not used by attention='linear'"):
        tiny_model(attention="linear", feature_map="elu", linformer_k=4)
    with pytest.raises(ValueError, match="linformer_k=4 is not used by attention='softmax'"):
        tiny_model(attention="softmax", linformer_k=4)
    with pytest.raises(ValueError, match="not used by attention='linformer'"):
        tiny_model(attention="linformer", linformer_k=4, feature_map="favor")
    model = tiny_model(**LIN)
    with pytest.raises(ValueError, match="max_len"):
        model.forward(np.zeros((2, 8), dtype=int), np.ones((2, 8), dtype=bool))


# ------------------------------------------------------------------ GPU parity

@pytest.mark.gpu
def test_cupy_matches_numpy():
    """Same seed on both backends: logits and every gradient agree to float64 round-off."""
    from rieszflow.engine.backend import cupy_available, to_numpy
    if not cupy_available():
        pytest.skip("CuPy with a usable CUDA device is not available")
    cpu = tiny_model(**LIN)
    gpu = tiny_model(backend="cupy", **LIN)
    ids, mask, labels = batch(np.random.default_rng(0))
    loss_c, grads_c, probs_c = cpu.loss_and_grads(ids, mask, labels, True, np.random.default_rng(1))
    xp = gpu.backend.xp
    loss_g, grads_g, probs_g = gpu.loss_and_grads(xp.asarray(ids), xp.asarray(mask), xp.asarray(labels),
                                                  True, np.random.default_rng(1))
    np.testing.assert_allclose(float(loss_g), float(loss_c), rtol=1e-12)
    np.testing.assert_allclose(to_numpy(probs_g), probs_c, rtol=1e-10, atol=1e-12)
    for k in grads_c:
        np.testing.assert_allclose(to_numpy(grads_g[k]), grads_c[k], rtol=1e-9, atol=1e-12, err_msg=k)
