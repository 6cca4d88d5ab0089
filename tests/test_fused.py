"""The fused host kernels (engine._fused) agree with the array-API path they replace.

Each layer or feature map is evaluated twice on the same inputs, with the kernels and with
``_fused.ENABLED = False`` (the NumPy/CuPy code), in float64 and float32; the kernels reorder
sums within a row, so the two agree to a few units of rounding of the dtype, not bit for bit.
The fallbacks (a non-contiguous view, mixed dtypes, a 0-d input) and NaN propagation are
checked too; the layers' finite-difference gradient checks elsewhere run on the fused path.
"""
from __future__ import annotations

import numpy as np
import pytest

from rieszflow.engine import _fused
from rieszflow.engine.attention import KernelizedLinearAttention, TransformerClassifier
from rieszflow.engine.attention.basic import GELU, LayerNorm
from rieszflow.engine.features import make_feature_map
from rieszflow.engine.features.base import _softplus_sigmoid

TOL = {np.float64: 1e-13, np.float32: 2e-6}


def both(fn, monkeypatch):
    """fn() with the fused kernels, then without; returns the two results."""
    fused = fn()
    with monkeypatch.context() as mp:
        mp.setattr(_fused, "ENABLED", False)
        plain = fn()
    return fused, plain


def close(a, b, dtype):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype == np.dtype(dtype)
    assert a.shape == b.shape
    scale = max(float(np.abs(b).max()), 1e-30)
    assert float(np.abs(a.astype(np.float64) - b).max()) <= TOL[dtype] * scale * 10


def test_fusable_needs_host_contiguous_arrays_of_one_float_dtype(monkeypatch):
    a = np.zeros((3, 4))
    assert _fused.fusable(a, np.zeros(4))
    assert not _fused.fusable(a, np.zeros(4, np.float32))           # mixed dtypes
    assert not _fused.fusable(a[:, ::2])                             # a strided view
    assert not _fused.fusable(np.zeros(3, np.int64))                 # not a float
    assert not _fused.fusable([0.0, 1.0])                            # not an array
    monkeypatch.setattr(_fused, "ENABLED", False)
    assert not _fused.fusable(a)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_layer_norm_forward_and_backward_agree(dtype, monkeypatch):
    rng = np.random.default_rng(0)
    ln = LayerNorm(24)
    p = {"gamma": (1 + 0.3 * rng.standard_normal(24)).astype(dtype),
         "beta": rng.standard_normal(24).astype(dtype)}
    x = (3.0 + 2.0 * rng.standard_normal((5, 7, 24))).astype(dtype)
    dy = rng.standard_normal(x.shape).astype(dtype)

    def run():
        y, cache = ln.forward(p, x)
        dx, g = ln.backward(dy, cache)
        return y, dx, g["gamma"], g["beta"], cache[1]

    fused, plain = both(run, monkeypatch)
    for a, b in zip(fused, plain):
        close(a, b, dtype)
    assert fused[4].shape == (5, 7, 1)                               # rstd keeps the cache's shape


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_gelu_forward_and_backward_agree(dtype, monkeypatch):
    rng = np.random.default_rng(1)
    x = (3.0 * rng.standard_normal((4, 6, 10))).astype(dtype)
    dy = rng.standard_normal(x.shape).astype(dtype)
    gelu = GELU()

    def run():
        y, cache = gelu.forward(x)
        return y, gelu.backward(dy, cache)[0]

    fused, plain = both(run, monkeypatch)
    for a, b in zip(fused, plain):
        close(a, b, dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_softplus_and_sigmoid_agree_far_into_both_tails(dtype, monkeypatch):
    u = np.concatenate([np.linspace(-60, 60, 241), [-1e-30, 0.0, 1e-30]]).astype(dtype)
    (g1, s1), (g0, s0) = both(lambda: _softplus_sigmoid(np, u, 1e-6), monkeypatch)
    close(g1, g0, dtype)
    np.testing.assert_array_equal(s1, s0)          # the same exp and one division: bit for bit
    assert s1[0] > 0 and s1[0] < 1e-25             # sigmoid(-60) ~ 8.8e-27: no underflow to 0


def test_nan_propagates_through_every_kernel():
    x = np.ones((2, 8))
    x[1, 3] = np.nan
    y, cache = LayerNorm(8).forward({"gamma": np.ones(8), "beta": np.zeros(8)}, x)
    assert np.isnan(y[1]).all() and np.isfinite(y[0]).all()
    assert np.isnan(GELU().forward(x)[0][1, 3])
    g, s = _softplus_sigmoid(np, x, 0.0)
    assert np.isnan(g[1, 3]) and np.isnan(s[1, 3])


@pytest.mark.parametrize("name", ["softplus", "elu"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_l1_feature_maps_agree(name, dtype, monkeypatch):
    rng = np.random.default_rng(2)
    fm = make_feature_map(name, 6, 9, rng=rng, tau=0.7)
    omega = fm.init_omega(rng, dtype=dtype)
    x = rng.standard_normal((3, 5, 6)).astype(dtype)
    dphi = rng.standard_normal((3, 5, 9)).astype(dtype)

    def run():
        phi, cache = fm.forward(x, omega)
        dx, dom = fm.backward(dphi, cache)
        return phi, dx, dom

    fused, plain = both(run, monkeypatch)
    for a, b in zip(fused, plain):
        close(a, b, dtype)
    np.testing.assert_allclose(fused[0].sum(-1), 3.0, rtol=10 * TOL[dtype])   # sum_k phi_k = sqrt(M)


def test_non_contiguous_and_mixed_inputs_take_the_array_path():
    rng = np.random.default_rng(3)
    ln = LayerNorm(4)
    x = rng.standard_normal((6, 8))[:, ::2]                           # strided: not fusable
    p = {"gamma": np.ones(4, np.float32), "beta": np.zeros(4, np.float32)}
    y, _ = ln.forward(p, x)                                          # mixed dtypes: not fusable
    ref = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + ln.eps)
    np.testing.assert_allclose(y, ref, rtol=1e-6, atol=1e-6)
    g, s = _softplus_sigmoid(np, np.float64(0.5), 0.0)                # 0-d: the scalar path
    assert abs(s - 1 / (1 + np.exp(-0.5))) < 1e-15


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_transformer_step_agrees_with_the_array_path(dtype, monkeypatch):
    model = TransformerClassifier(vocab_size=50, max_len=12, d_model=16, n_heads=2, d_ff=24, n_layers=2,
                                  dropout=0.0, attention="linear", feature_map="softplus", m=8, seed=0,
                                  dtype=np.dtype(dtype).name)
    rng = np.random.default_rng(4)
    ids = rng.integers(0, 50, size=(3, 12))
    mask = np.arange(12)[None, :] < np.array([[12], [7], [3]])
    labels = np.array([0, 1, 1])
    (l1, g1, _), (l0, g0, _) = both(lambda: model.loss_and_grads(ids, mask, labels), monkeypatch)
    assert abs(l1 - l0) <= 10 * TOL[dtype] * abs(l0)
    for k in g0:
        close(g1[k], g0[k], dtype)


def test_padded_keys_do_not_reach_real_rows_through_the_masked_values():
    rng = np.random.default_rng(5)
    fm = make_feature_map("softplus", 4, 6, rng=rng)
    layer = KernelizedLinearAttention(8, 2, fm, qk="learned")
    params = layer.init_params(rng)
    x = rng.standard_normal((2, 5, 8))
    mask = np.ones((2, 5), bool)
    mask[1, 3:] = False
    y, cache = layer.forward(params, x, mask)
    x2 = x.copy()
    x2[1, 3:] += 10.0 * rng.standard_normal((2, 8))                  # padded keys: no effect on real rows
    np.testing.assert_allclose(layer.forward(params, x2, mask)[0][:, :3], y[:, :3], rtol=1e-12, atol=1e-12)


def test_layer_norm_with_parameters_of_another_shape_takes_the_array_path():
    rng = np.random.default_rng(6)
    ln = LayerNorm(4)
    x = rng.standard_normal((3, 4))
    one = {"gamma": np.full(1, 2.0), "beta": np.full(1, 0.5)}          # broadcast, as NumPy does
    y, _ = ln.forward(one, x)
    ref = 2.0 * (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + ln.eps) + 0.5
    np.testing.assert_allclose(y, ref, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError):                                    # d + 1 entries: no silent truncation
        ln.forward({"gamma": np.ones(5), "beta": np.zeros(5)}, x)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_layer_norm_of_width_one_has_an_exactly_zero_input_gradient(dtype):
    ln = LayerNorm(1)
    p = {"gamma": np.full(1, 1.7, dtype), "beta": np.zeros(1, dtype)}
    x = np.arange(6, dtype=dtype).reshape(6, 1)
    y, cache = ln.forward(p, x)
    dx, _ = ln.backward(np.linspace(-1, 1, 6).astype(dtype).reshape(6, 1), cache)
    assert np.all(y == 0) and np.all(dx == 0)           # x - mean(x) = 0 exactly; no FMA residue


def test_the_causal_cache_keeps_no_second_feature_array():
    rng = np.random.default_rng(7)
    fm = make_feature_map("softplus", 4, 6, rng=rng)
    layer = KernelizedLinearAttention(8, 2, fm, qk="learned", causal=True)
    params = layer.init_params(rng)
    _, cache = layer.forward(params, rng.standard_normal((2, 5, 8)), np.ones((2, 5), bool))
    ccausal = cache[13]
    held = [a for a in (ccausal if isinstance(ccausal, (tuple, list)) else ccausal.values())
            if isinstance(a, np.ndarray)]
    assert any(a is cache[4] for a in held)             # the masked features ccausal holds, not a copy


def test_importing_the_model_does_not_import_numba():
    import subprocess
    import sys

    code = ("import sys, rieszflow.engine.attention, rieszflow.engine.features; "
            "print('numba' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"                # the kernels compile at their first call
