"""Work buffers of KernelizedLinearAttention (issue 24, item 5) leave every result unchanged.

The fixed l1 feature maps are applied to chunks of whole sequences (FEATURE_CHUNK_BYTES) and the
backward pass reuses its dnum / dphi_q / dphi_k arrays from call to call; both must give the
results of the unchunked, freshly allocated computation, whatever the order of the calls.
"""
from __future__ import annotations

import pickle

import numpy as np
import pytest

from rieszflow.engine.attention import KernelizedLinearAttention
from rieszflow.engine.attention import kernelized
from rieszflow.engine.features import make_feature_map


def make_layer(name="softplus", seed=0, d=8, h=2, m=6):
    rng = np.random.default_rng(seed)
    fm = make_feature_map(name, d // h, m, rng=rng)
    layer = KernelizedLinearAttention(d, h, fm, qk="shared")
    return layer, layer.init_params(rng, dtype=np.float64)


def run(layer, params, x, mask, dy):
    y, cache = layer.forward(params, x, mask)
    dx, grads = layer.backward(dy, cache)
    return y, dx, grads


def inputs(seed, b=5, l=7, d=8):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((b, l, d))
    mask = np.ones((b, l), dtype=bool)
    mask[1, 4:] = False
    return x, mask, rng.standard_normal((b, l, d))


@pytest.mark.parametrize("name", ("softplus", "elu"))
def test_chunked_features_give_the_unchunked_results(name, monkeypatch):
    layer, params = make_layer(name)
    x, mask, dy = inputs(1)
    ref = run(layer, params, x, mask, dy)
    monkeypatch.setattr(kernelized, "FEATURE_CHUNK_BYTES", 1)      # one sequence per call
    assert layer._chunk_sequences(np.zeros((2, 5, 7, 4))) == 1
    got = run(layer, params, x, mask, dy)
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(got[1], ref[1], rtol=1e-13, atol=1e-14)
    for k in ref[2]:
        np.testing.assert_allclose(got[2][k], ref[2][k], rtol=1e-12, atol=1e-14, err_msg=k)


def test_chunked_gradient_matches_central_differences(monkeypatch):
    """d(sum(dy * y))/d omega by the chunked backward against central differences."""
    monkeypatch.setattr(kernelized, "FEATURE_CHUNK_BYTES", 1)
    layer, params = make_layer()
    x, mask, dy = inputs(2)
    _, _, grads = run(layer, params, x, mask, dy)
    rng = np.random.default_rng(3)
    direction = rng.standard_normal(params["omega"].shape)
    h = 1e-6

    def f(omega):
        return float(np.sum(dy * layer.forward({**params, "omega": omega}, x, mask)[0]))

    fd = (f(params["omega"] + h * direction) - f(params["omega"] - h * direction)) / (2 * h)
    assert abs(fd - np.sum(grads["omega"] * direction)) <= 1e-7 * max(1.0, abs(fd))


def test_reused_backward_buffers_do_not_leak_between_calls():
    """forward A, forward B, backward B, backward A (the order of backward_to_attention after a
    training step) gives what a fresh layer gives for each, and the buffers are reused."""
    layer, params = make_layer()
    fresh, _ = make_layer()
    xa, ma, dya = inputs(4)
    xb, mb, dyb = inputs(5)
    ya, ca = layer.forward(params, xa, ma)
    yb, cb = layer.forward(params, xb, mb)
    dxb, gb = layer.backward(dyb, cb)
    buf = layer._scratch["dphi_q"]
    dxa, ga = layer.backward(dya, ca)
    assert layer._scratch["dphi_q"] is buf                         # reused, not reallocated
    for (x, m, dy), (dx, g) in (((xa, ma, dya), (dxa, ga)), ((xb, mb, dyb), (dxb, gb))):
        _, dx_ref, g_ref = run(fresh, params, x, m, dy)
        np.testing.assert_array_equal(dx, dx_ref)
        for k in g_ref:
            np.testing.assert_array_equal(g[k], g_ref[k])
    # a gradient returned earlier is not overwritten by a later call
    dxb_copy = dxb.copy()
    layer.backward(dya, layer.forward(params, xa, ma)[1])
    np.testing.assert_array_equal(dxb, dxb_copy)


def test_pickled_layer_carries_no_work_buffers():
    layer, params = make_layer()
    x, mask, dy = inputs(6)
    run(layer, params, x, mask, dy)
    assert layer._scratch
    clone = pickle.loads(pickle.dumps(layer))
    assert clone._scratch == {}
    np.testing.assert_array_equal(run(clone, params, x, mask, dy)[1], run(layer, params, x, mask, dy)[1])
