"""CuPy parity of the linear-attention layer and the training step (GPU only; skipped without CuPy).

The attention layer's forward and backward (augmented key-sum GEMMs, in-place softplus/sigmoid
features, the signed normaliser, the causal form) and a whole float32 training step with Adam
are run on NumPy and on CuPy from the same parameters; the CuPy results must equal the NumPy
ones to round-off of the dtype, and float32 must stay float32 on both backends.
"""
from __future__ import annotations

import numpy as np
import pytest

from rieszflow.engine.attention import Adam, KernelizedLinearAttention, TransformerClassifier, softmax_cross_entropy
from rieszflow.engine.backend import cupy_available, namespace, to_numpy
from rieszflow.engine.features import make_feature_map

pytestmark = pytest.mark.gpu

B, L, D, H = 3, 9, 8, 2
DK = D // H

LAYERS = {
    "softplus-eps": dict(name="softplus", qk="learned", eps=0.05),
    "softplus-causal": dict(name="softplus", qk="learned", eps=0.05, causal=True),
    "rff-signed": dict(name="rff", qk="learned", eps=1e-2, signed=True, omega_scale=2.0),
    "favor-shared": dict(name="favor", qk="shared"),
    "luna-learned": dict(name="luna", qk="learned", eps=1e-3, channels=2),
    "elu-learned": dict(name="elu", qk="learned"),
}


def _need_cupy():
    if not cupy_available():
        pytest.skip("CuPy with a usable CUDA device is not available")
    import cupy
    return cupy


def _layer(name, qk, eps=0.0, causal=False, signed=False, **options):
    rng = np.random.default_rng(0)
    fmap = make_feature_map(name, DK, 6, rng=rng, **options)
    attn = KernelizedLinearAttention(D, H, fmap, qk=qk, eps=eps, causal=causal, signed=signed)
    params = attn.init_params(rng)
    for k in params:
        if k.startswith("b_"):
            params[k] = 0.3 * rng.standard_normal(params[k].shape)
    return attn, params


@pytest.mark.parametrize("kind", list(LAYERS))
def test_layer_forward_backward_cupy_matches_numpy(kind):
    cp = _need_cupy()
    attn, params = _layer(**LAYERS[kind])
    rng = np.random.default_rng(1)
    x = rng.standard_normal((B, L, D))
    mask = np.ones((B, L), dtype=bool)
    mask[0, 6:] = False
    mask[2, 3:] = False
    dy = rng.standard_normal((B, L, D))
    y_c, cache_c = attn.forward(params, x, mask)
    dx_c, g_c = attn.backward(dy, cache_c)
    params_g = {k: cp.asarray(v) for k, v in params.items()}
    y_g, cache_g = attn.forward(params_g, cp.asarray(x), cp.asarray(mask))
    dx_g, g_g = attn.backward(cp.asarray(dy), cache_g)
    assert isinstance(y_g, cp.ndarray) and isinstance(dx_g, cp.ndarray)
    np.testing.assert_allclose(to_numpy(y_g), y_c, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(to_numpy(dx_g), dx_c, rtol=1e-9, atol=1e-12)
    assert set(g_g) == set(g_c)
    for k in g_c:
        np.testing.assert_allclose(to_numpy(g_g[k]), g_c[k], rtol=1e-9, atol=1e-12, err_msg=k)


@pytest.mark.parametrize("cfg", [dict(feature_map="softplus", qk="learned"),
                                 dict(feature_map="rff", qk="shared"),
                                 dict(feature_map="favor", qk="shared")],
                         ids=["softplus", "rff-signed", "favor"])   # rff is not positive: the model makes it signed
def test_float32_training_step_cupy_matches_numpy(cfg):
    """One float32 step (forward, backward, Adam) on both backends: dtypes kept, values to float32 round-off."""
    cp = _need_cupy()

    def make(backend):
        return TransformerClassifier(13, max_len=12, d_model=D, n_heads=H, d_ff=12, n_layers=2,
                                     n_classes=2, dropout=0.0, attention="linear", m=6, seed=3,
                                     dtype="float32", backend=backend, **cfg)

    rng = np.random.default_rng(2)
    ids = rng.integers(0, 13, size=(4, 10))
    mask = np.arange(10)[None, :] < np.array([10, 7, 4, 9])[:, None]
    labels = rng.integers(0, 2, size=4)
    out = {}
    for backend in ("numpy", "cupy"):
        model = make(backend)
        xp = model.backend.xp
        loss, grads, _ = model.loss_and_grads(xp.asarray(ids), xp.asarray(mask), xp.asarray(labels),
                                              False, np.random.default_rng(1))
        for k, g in grads.items():
            assert g.dtype == np.float32, (backend, k, g.dtype)
        out[backend] = (model, float(loss), {k: to_numpy(v) for k, v in grads.items()})
    (mc, lc, gc), (mg, lg, gg) = out["numpy"], out["cupy"]
    np.testing.assert_allclose(lg, lc, rtol=1e-5)
    for k in gc:
        scale = float(np.max(np.abs(gc[k]))) + 1e-6
        np.testing.assert_allclose(gg[k], gc[k], rtol=0, atol=1e-4 * scale, err_msg=k)
    # Adam from the same (host) gradients on both backends: Adam's m / sqrt(v) is the sign of a
    # near-zero gradient, so feeding each backend its own gradients would compare round-off signs.
    for model in (mc, mg):
        Adam(model.params, list(model.params), lr=1e-2).step(
            {k: namespace(model.params[k]).asarray(gc[k]) for k in gc})
    for k in mc.params:
        pg = to_numpy(mg.params[k])
        assert pg.dtype == np.float32, k
        np.testing.assert_allclose(pg, mc.params[k], rtol=1e-6, atol=1e-7, err_msg=k)


def test_softmax_cross_entropy_on_cupy_keeps_float32():
    cp = _need_cupy()
    rng = np.random.default_rng(4)
    logits = rng.standard_normal((5, 3)).astype(np.float32)
    labels = rng.integers(0, 3, size=5)
    lc, dc, pc = softmax_cross_entropy(logits, labels)
    lg, dg, pg = softmax_cross_entropy(cp.asarray(logits), cp.asarray(labels))
    assert dg.dtype == cp.float32
    np.testing.assert_allclose(float(lg), float(lc), rtol=1e-6)
    np.testing.assert_allclose(to_numpy(dg), dc, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(to_numpy(pg), pc, rtol=1e-5, atol=1e-7)
