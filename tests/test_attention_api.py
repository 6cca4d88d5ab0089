"""Tests of the public attention-inspection API: ``project``, ``features`` / ``features_backward``,
``kernel_terms``, ``attention_rows`` on the attention layers, and ``layer_params`` /
``attention_params`` / ``attention_inputs`` on the model.

Each check compares against an independent computation (einsum over explicit projections and
feature maps, a spy on the forward pass, finite differences), so a wrong index, head layout,
mask or normaliser fails it.
"""
from __future__ import annotations

import numpy as np
import pytest

from rieszflow.engine.attention import KernelizedLinearAttention, SoftmaxAttention, TransformerClassifier
from rieszflow.engine.features import make_feature_map

B, L, D, H = 3, 6, 8, 2
DK = D // H


def _mask():
    mask = np.ones((B, L), dtype=bool)
    mask[0, 4:] = False
    mask[2, 2:] = False
    return mask


def _linear(name, qk, eps=0.0, m=4, causal=False, signed=False, seed=0, **options):
    rng = np.random.default_rng(seed)
    fmap = make_feature_map(name, DK, m, rng=rng, **options)
    attn = KernelizedLinearAttention(D, H, fmap, qk=qk, eps=eps, causal=causal, signed=signed)
    params = attn.init_params(rng)
    for k in params:                           # non-zero biases: a missing bias would show
        if k.startswith("b_"):
            params[k] = 0.3 * rng.standard_normal(params[k].shape)
    return attn, params


def _heads(y):
    """(B, L, D) -> (H, B, L, d_k), written independently of the engine's helper."""
    return np.stack([y[:, :, h * DK:(h + 1) * DK] for h in range(H)])


def _phi(attn, params, x):
    """phi of every head by direct calls of the feature map, per head and particle set."""
    fm = attn.feature_map
    out = []
    for h in range(H):
        s = 0 if attn.n_sets == 1 else h
        if attn.learned:
            theta = {k: params[f"phi_{k}"][s] for k in fm.theta_names}
            out.append(fm.forward(x[h], params["omega"][s], theta)[0])
        else:
            out.append(fm.forward(x[h], params["omega"][s])[0])
    return np.stack(out)


def _out(rows, v, params):
    """The layer output from explicit rows: merge heads of rows @ v, then W_O."""
    a = np.einsum("hbij,hbjd->hbid", rows, v)
    return np.concatenate(list(a), axis=-1) @ params["w_o"] + params["b_o"]


@pytest.mark.parametrize("qk", ["learned", "shared"])
def test_project_equals_explicit_projections(qk):
    attn, params = _linear("softplus", qk)
    x = np.random.default_rng(1).standard_normal((B, L, D))
    q, k, v = attn.project(params, x)
    assert q.shape == k.shape == v.shape == (H, B, L, DK)
    if qk == "learned":
        np.testing.assert_array_equal(q, _heads(x @ params["w_q"] + params["b_q"]))
        np.testing.assert_array_equal(k, _heads(x @ params["w_k"] + params["b_k"]))
    else:
        assert q is k
        np.testing.assert_array_equal(q, _heads(x))
    np.testing.assert_array_equal(v, _heads(x @ params["w_v"] + params["b_v"]))
    with pytest.raises(ValueError, match=r"expected \(B, L, 8\)"):
        attn.project(params, x[..., :4])


CASES = [("softplus", "learned", {}), ("elu", "shared", {}), ("favor", "learned", {}),
         ("luna", "learned", {"channels": 2}), ("hedgehog", "shared", {})]


@pytest.mark.parametrize("name,qk,options", CASES, ids=[c[0] for c in CASES])
def test_linear_attention_rows_are_stochastic_and_match_an_einsum(name, qk, options):
    attn, params = _linear(name, qk, **options)
    rng = np.random.default_rng(2)
    x, mask = rng.standard_normal((B, L, D)), _mask()
    rows = attn.attention_rows(params, x, mask)
    assert rows.shape == (H, B, L, L) and rows.dtype == x.dtype
    np.testing.assert_allclose(rows.sum(-1), 1.0, rtol=0, atol=1e-12)
    assert np.all(rows[np.broadcast_to(~mask[None, :, None, :], rows.shape)] == 0)   # padded keys
    # independent: explicit projections, per-head feature maps, einsum kernel, masked row sums
    if qk == "learned":
        q, k = _heads(x @ params["w_q"] + params["b_q"]), _heads(x @ params["w_k"] + params["b_k"])
    else:
        q = k = _heads(x)
    kern = np.einsum("hbim,hbjm->hbij", _phi(attn, params, q), _phi(attn, params, k)) * mask[None, :, None, :]
    np.testing.assert_allclose(rows, kern / kern.sum(-1, keepdims=True), rtol=1e-11, atol=1e-14)
    # and the forward pass is these rows applied to the values
    y, _ = attn.forward(params, x, mask)
    np.testing.assert_allclose(_out(rows, attn.project(params, x)[2], params), y, rtol=1e-11, atol=1e-12)


@pytest.mark.parametrize("kind", ["eps", "causal", "signed"])
def test_linear_attention_rows_reproduce_the_forward_pass(kind):
    if kind == "signed":
        attn, params = _linear("rff", "learned", eps=1e-2, signed=True, omega_scale=2.0)
    else:
        attn, params = _linear("softplus", "learned", eps=0.05, causal=kind == "causal")
    rng = np.random.default_rng(3)
    x, mask = rng.standard_normal((B, L, D)), _mask()
    rows = attn.attention_rows(params, x, mask)
    y, _ = attn.forward(params, x, mask)
    np.testing.assert_allclose(_out(rows, attn.project(params, x)[2], params), y, rtol=1e-10, atol=1e-12)
    if kind == "causal":
        assert np.all(np.triu(np.ones((L, L), bool), 1)[None, None] <= (rows == 0))
    if kind == "eps":                          # eps > 0: rows sum to den-without-eps / den < 1
        assert np.all(rows.sum(-1) < 1.0)


@pytest.mark.parametrize("qk", ["learned", "shared"])
def test_kernel_terms_are_the_forward_pass_arrays(qk):
    attn, params = _linear("luna", qk, eps=1e-3, channels=2)
    rng = np.random.default_rng(4)
    x, mask = rng.standard_normal((B, L, D)), _mask()
    t = attn.kernel_terms(params, x, mask)
    _, cache = attn.forward(params, x, mask)
    np.testing.assert_array_equal(t["phi_q"], cache[3])
    np.testing.assert_array_equal(t["phi_k"], cache[4] * cache[1])     # the cache keeps phi_k unmasked
    np.testing.assert_array_equal(t["den"], cache[9])
    np.testing.assert_array_equal(t["a"], cache[10])
    np.testing.assert_array_equal(t["v"], cache[2])
    assert (t["caches_k"] is None) == (qk == "shared")
    np.testing.assert_array_equal(t["caches_q"][0]["psi"]["u"], cache[5][0]["psi"]["u"])
    assert np.all(t["phi_k"][:, ~mask] == 0)


@pytest.mark.parametrize("name,options", [("hedgehog", {}), ("elu", {}), ("luna", {"channels": 2})])
def test_features_and_their_backward_agree_with_finite_differences(name, options):
    attn, params = _linear(name, "learned", **options)
    rng = np.random.default_rng(5)
    q = rng.standard_normal((H, B, L, DK))
    phi, caches = attn.features(params, q)
    np.testing.assert_array_equal(phi, _phi(attn, params, q))
    dphi, dq = rng.standard_normal(phi.shape), rng.standard_normal(q.shape)
    grads = {}
    dx, domega = attn.features_backward(params, dphi, caches, grads)
    assert dx.shape == q.shape and domega.shape == params["omega"].shape
    assert set(grads) == {f"phi_{k}" for k in attn.feature_map.theta_names}
    h = 1e-6
    fd = (np.sum(dphi * attn.features(params, q + h * dq)[0])
          - np.sum(dphi * attn.features(params, q - h * dq)[0])) / (2 * h)
    assert abs(fd - np.sum(dx * dq)) <= 1e-6 * max(1.0, abs(fd))
    dom = rng.standard_normal(domega.shape)
    shifted = [dict(params, omega=params["omega"] + s * h * dom) for s in (1, -1)]
    fd = (np.sum(dphi * attn.features(shifted[0], q)[0]) - np.sum(dphi * attn.features(shifted[1], q)[0])) / (2 * h)
    assert abs(fd - np.sum(domega * dom)) <= 1e-6 * max(1.0, abs(fd))


@pytest.mark.parametrize("qk", ["learned", "shared"])
def test_softmax_attention_rows_match_an_einsum_and_the_forward_pass(qk):
    attn = SoftmaxAttention(D, H, qk=qk)
    params = attn.init_params(np.random.default_rng(6))
    rng = np.random.default_rng(7)
    x, mask = rng.standard_normal((B, L, D)), _mask()
    rows = attn.attention_rows(params, x, mask)
    q, k, v = attn.project(params, x)
    s = np.einsum("hbid,hbjd->hbij", q, k) / np.sqrt(DK)
    e = np.exp(s - s.max(-1, keepdims=True)) * mask[None, :, None, :]
    np.testing.assert_allclose(rows, e / e.sum(-1, keepdims=True), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(rows.sum(-1), 1.0, atol=1e-12)
    y, cache = attn.forward(params, x, mask)
    np.testing.assert_array_equal(rows, cache[4])
    np.testing.assert_allclose(_out(rows, v, params), y, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("pre_ln", [False, True])
@pytest.mark.parametrize("attention", ["linear", "softmax", "linformer"])
def test_model_attention_inputs_and_params_are_what_the_forward_pass_uses(attention, pre_ln):
    extra = {"feature_map": "softplus"} if attention == "linear" else {}
    if attention == "linformer":
        extra["linformer_k"] = 3
    model = TransformerClassifier(20, max_len=L, d_model=D, n_heads=H, d_ff=12, n_layers=2, n_classes=3,
                                  dropout=0.1, m=4, seed=0, dtype="float64", attention=attention,
                                  pre_ln=pre_ln, **extra)
    rng = np.random.default_rng(8)
    ids, mask = rng.integers(0, 20, size=(B, L)), _mask()
    seen = []
    for layer in model.layers:                  # spy: record what each attention layer receives
        def spy(params, x, m, _f=layer.attn.forward):
            seen.append((params, x))
            return _f(params, x, m)
        layer.attn.forward = spy
    logits = model.forward(ids, mask)
    inputs = model.attention_inputs(ids, mask)
    assert len(inputs) == len(seen) // 2 == 2
    for i, x in enumerate(inputs):
        np.testing.assert_array_equal(x, seen[i][1])
        p = model.attention_params(i)
        assert p.keys() == seen[i][0].keys() and all(p[k] is seen[i][0][k] for k in p)
        lp = model.layer_params(i)
        assert all(lp[f"attn.{k}"] is v for k, v in p.items())
        assert set(lp) == {k[len(f"layers.{i}."):] for k in model.params if k.startswith(f"layers.{i}.")}
    np.testing.assert_array_equal(model.forward(ids, mask), logits)   # no state changed
    for bad in (-1, 2, 1.0, True):
        with pytest.raises(ValueError, match="layer="):
            model.attention_params(bad)


@pytest.mark.parametrize("pre_ln", [False, True])
def test_backward_to_attention_matches_finite_differences(pre_ln):
    model = TransformerClassifier(20, max_len=L, d_model=D, n_heads=H, d_ff=12, n_layers=3, n_classes=3,
                                  dropout=0.1, m=4, seed=1, dtype="float64", feature_map="softplus",
                                  pre_ln=pre_ln)
    rng = np.random.default_rng(9)
    ids, mask = rng.integers(0, 20, size=(B, L)), _mask()
    dpooled = rng.standard_normal((B, D))
    with pytest.raises(RuntimeError, match="cached"):
        model.backward_to_attention(dpooled, 0)
    with pytest.raises(RuntimeError, match="cached"):
        model.last_attention_inputs()
    for layer in range(3):
        model.pooled(ids, mask)
        dy = model.backward_to_attention(dpooled, layer)
        assert dy.shape == (B, L, D)
        delta = rng.standard_normal((B, L, D))
        attn = model.layers[layer].attn
        fwd = attn.forward

        def shifted(s):                         # <dpooled, pooled> with the attention output moved
            attn.forward = lambda p, x, m: (lambda y, c: (y + s * delta, c))(*fwd(p, x, m))
            try:
                return float(np.sum(dpooled * model.pooled(ids, mask)))
            finally:
                attn.forward = fwd
        h = 1e-6
        fd = (shifted(h) - shifted(-h)) / (2 * h)
        assert abs(fd - np.sum(dy * delta)) <= 1e-6 * max(1.0, abs(fd))
        # the per-head gradient before W_O: <da, delta_a> = <dy, concat_h(delta_a) W_O>
        params = model.attention_params(layer)
        da = attn.output_backward(params, dy)
        assert da.shape == (H, B, L, DK)
        delta_a = rng.standard_normal(da.shape)
        np.testing.assert_allclose(np.sum(da * delta_a),
                                   np.sum(dy * (np.concatenate(list(delta_a), -1) @ params["w_o"])), rtol=1e-12)
    with pytest.raises(ValueError, match="layer="):
        model.backward_to_attention(dpooled, 3)
    xs = model.attention_inputs(ids, mask)
    assert all(a is b for a, b in zip(xs, model.last_attention_inputs()))


@pytest.mark.parametrize("name", ["elu", "softplus", "sigmoid2", "porf_softplus"])
def test_l1_map_activation_reproduces_the_features(name):
    fm = make_feature_map(name, DK, 5, rng=np.random.default_rng(0))
    assert fm.l1_normalised and not make_feature_map("favor", DK, 5).l1_normalised
    rng = np.random.default_rng(10)
    x, omega = rng.standard_normal((7, DK)), fm.init_omega(rng)
    u = x @ omega.T / fm.tau
    if fm.has_bias:
        u = u + fm.b
    g, dg = fm.activation(u)
    np.testing.assert_allclose(fm.forward(x, omega)[0], np.sqrt(5) * g / g.sum(-1, keepdims=True), rtol=1e-12)
    hh = 1e-6
    np.testing.assert_allclose(dg, (fm.activation(u + hh)[0] - fm.activation(u - hh)[0]) / (2 * hh),
                               rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("signed", [False, True])
def test_float32_in_float32_out(signed):
    """float32 parameters and input give float32 outputs and gradients; the signed normaliser's
    eps was a float64 array and promoted y and grads to float64 before."""
    attn, params = _linear("rff" if signed else "softplus", "learned", eps=1e-2, signed=signed,
                           omega_scale=2.0) if signed else _linear("softplus", "shared", eps=1e-3)
    params = {k: v.astype(np.float32) for k, v in params.items()}
    rng = np.random.default_rng(5)
    x = rng.standard_normal((B, L, D)).astype(np.float32)
    y, cache = attn.forward(params, x, _mask())
    dx, grads = attn.backward(np.ones_like(y), cache)
    assert y.dtype == dx.dtype == np.float32
    assert {k: g.dtype for k, g in grads.items()} == {k: np.dtype(np.float32) for k in grads}
