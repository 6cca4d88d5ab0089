"""Paper 001 (LUNA): the twelve P0 tests of the implementation spec, float64.

1. linear attention = normalised quadratic form; 2. causal prefix and chunked forms =
masked quadratic attention; 3. key-chunked streaming = full; 4. phi >= 0, attention rows
non-negative and summing to 1; 5. PSD Gram matrices; 6. central-difference gradients of
every parameter and input; 7. special cases (Gaussian and softmax kernels, canonical
Performer unbiased, the paper's printed eq. (8) biased); 8. Prop. 5 clip identity;
9. piecewise-linear psi = dense MLP; 10. padding invariance; 11. permutation
equivariance; 12. ch_rms shrinks only, frozen is causal, live leaks the future.

References: Shahbazi et al. (2025), "LUNA: Linear Universal Neural Attention with
Generalization Guarantees" (paper 001), eqs. (7)-(11), Prop. 1, Prop. 5, Listing 1.
"""
import math

import numpy as np
import pytest

from rieszflow.engine.attention.layers import (
    KernelizedLinearAttention,
    causal_linear_attention,
    causal_linear_attention_backward,
    causal_linear_attention_prefix,
    depthwise_conv,
    depthwise_conv_backward,
    streaming_linear_attention,
)
from rieszflow.engine.attention.model import TransformerClassifier
from rieszflow.engine.features import FEATURE_MAPS, make_feature_map

H_FD = 1e-6


def rel_err(a, n, atol=1e-10):
    """Norm-wise relative error (0 when both are ~0)."""
    a, n = np.asarray(a, dtype=np.float64), np.asarray(n, dtype=np.float64)
    den = np.linalg.norm(a) + np.linalg.norm(n)
    return 0.0 if den < atol else float(np.linalg.norm(a - n) / den)


def fd_grad(f, arr, h=H_FD, max_coords=40, rng=None):
    """Central differences of the scalar f() w.r.t. (a sample of) the entries of arr, in place."""
    flat = arr.reshape(-1)
    idx = np.arange(flat.size)
    if flat.size > max_coords:
        idx = (rng or np.random.default_rng(0)).choice(flat.size, max_coords, replace=False)
    g = np.zeros(len(idx))
    for t, j in enumerate(idx):
        old = flat[j]
        flat[j] = old + h
        fp = f()
        flat[j] = old - h
        fm = f()
        flat[j] = old
        g[t] = (fp - fm) / (2 * h)
    return idx, g


def luna(d=4, m=3, **opts):
    opts.setdefault("channels", 3)
    opts.setdefault("hidden", 6)
    return make_feature_map("luna", d, m, **opts)


def luna_params(fm, seed=0):
    rng = np.random.default_rng(seed)
    return fm.init_omega(rng), fm.init_theta(rng)


def quadratic(phi_q, phi_k, v, eps, causal=False, keymask=None):
    """Explicit O(n^2) normalised kernel attention."""
    kern = phi_q @ np.swapaxes(phi_k, -1, -2)
    if keymask is not None:
        kern = kern * keymask[..., None, :]
    if causal:
        kern = np.tril(kern)
    return (kern @ v) / (kern.sum(-1, keepdims=True) + eps)


# ----------------------------------------------------------------------------- P0.1
def test_p0_1_linear_equals_quadratic():
    fm = luna(d=4, m=4, channels=4)
    attn = KernelizedLinearAttention(8, 2, fm, qk="learned", eps=1e-6)
    rng = np.random.default_rng(1)
    params = attn.init_params(rng)
    x = rng.standard_normal((2, 7, 8))
    mask = np.ones((2, 7), bool)
    mask[1, 5:] = False
    y, _ = attn.forward(params, x, mask)
    # independent evaluation: per head, explicit kernel matrix
    th = {k: params[f"phi_{k}"][0] for k in fm.theta_names}
    q = x @ params["w_q"] + params["b_q"]
    k = x @ params["w_k"] + params["b_k"]
    v = x @ params["w_v"] + params["b_v"]
    out = np.zeros_like(x)
    for h in range(2):
        sl = slice(4 * h, 4 * h + 4)
        pq = fm(q[..., sl], params["omega"][0], th)
        pk = fm(k[..., sl], params["omega"][0], th)
        out[..., sl] = quadratic(pq, pk, v[..., sl], 1e-6, keymask=mask.astype(float))
    ref = out @ params["w_o"] + params["b_o"]
    assert rel_err(y, ref) < 1e-12


# ----------------------------------------------------------------------------- P0.2
@pytest.mark.parametrize("chunk", [1, 7, 64, 23])
def test_p0_2_causal_forms_equal_masked_quadratic(chunk):
    rng = np.random.default_rng(2)
    n = 23
    fm = luna(d=4, m=3)
    om, th = luna_params(fm)
    pq = fm(rng.standard_normal((2, n, 4)), om, th)
    pk = fm(rng.standard_normal((2, n, 4)), om, th)
    v = rng.standard_normal((2, n, 5))
    ref = quadratic(pq, pk, v, 1e-6, causal=True)
    a, _ = causal_linear_attention(pq, pk, v, eps=1e-6, chunk=chunk)
    assert rel_err(a, ref) < 1e-12
    assert rel_err(causal_linear_attention_prefix(pq, pk, v, eps=1e-6), ref) < 1e-12


def test_p0_2_causal_backward_matches_central_differences():
    rng = np.random.default_rng(3)
    n, D = 9, 4
    pq = rng.random((2, n, D)) + 0.1
    pk = rng.random((2, n, D)) + 0.1
    v = rng.standard_normal((2, n, 3))
    w = rng.standard_normal((2, n, 3))

    def f():
        return float((causal_linear_attention(pq, pk, v, eps=1e-6, chunk=4)[0] * w).sum())

    _, cache = causal_linear_attention(pq, pk, v, eps=1e-6, chunk=4)
    grads = causal_linear_attention_backward(w, cache)
    for arr, g in zip((pq, pk, v), grads):
        idx, num = fd_grad(f, arr)
        assert rel_err(g.reshape(-1)[idx], num) < 1e-7


# ----------------------------------------------------------------------------- P0.3
def test_p0_3_streaming_equals_full():
    rng = np.random.default_rng(4)
    fm = luna(d=4, m=3)
    om, th = luna_params(fm)
    pq = fm(rng.standard_normal((3, 50, 4)), om, th)
    pk = fm(rng.standard_normal((3, 50, 4)), om, th)
    v = rng.standard_normal((3, 50, 6))
    ref = quadratic(pq, pk, v, 1e-6)
    for chunk in (1, 7, 50, 64):
        assert rel_err(streaming_linear_attention(pq, pk, v, eps=1e-6, chunk=chunk), ref) < 1e-12


# ----------------------------------------------------------------------------- P0.4
def test_p0_4_nonnegative_features_and_stochastic_rows():
    rng = np.random.default_rng(5)
    fm = make_feature_map("luna", 32, 8)                 # the paper's defaults: M = L = 8, hidden 64
    om, th = luna_params(fm, 5)
    x = rng.standard_normal((200, 32))
    phi = fm(x, om, th)
    assert phi.shape == (200, 64) and np.all(phi >= 0)
    zero_frac = float(np.mean(phi == 0))
    assert 0.2 < zero_frac < 0.8                          # the output ReLU clips a share of entries
    kern = phi @ phi.T
    den = kern.sum(1)
    ok = den > 1e-6
    A = kern[ok] / den[ok, None]
    assert np.all(A >= 0)
    np.testing.assert_allclose(A.sum(1), 1.0, atol=1e-12)
    # a signed variant (nonneg=False) really is signed: the guarantee comes from the ReLU
    fm2 = make_feature_map("luna", 32, 8, nonneg=False)
    assert np.any(fm2(x, om, th) < 0)
    with pytest.raises(ValueError, match="not positive"):
        KernelizedLinearAttention(64, 2, fm2)


# ----------------------------------------------------------------------------- P0.5
VARIANTS = [dict(), dict(envelope="gate"), dict(shared_channels=True), dict(nonneg=False),
            dict(psi_impl="dense"), dict(psi_kind="bank")]


@pytest.mark.parametrize("opts", VARIANTS, ids=[str(o) for o in VARIANTS])
def test_p0_5_gram_psd(opts):
    rng = np.random.default_rng(6)
    fm = make_feature_map("luna", 32, 8, **opts)
    om, th = luna_params(fm, 6)
    if "a_h" in th:
        th["a_h"] = rng.standard_normal(th["a_h"].shape) / 6
    x = rng.standard_normal((200, 32))
    lam = np.linalg.eigvalsh(fm(x, om, th) @ fm(x, om, th).T)
    assert lam[0] >= -1e-10 * lam[-1]


def test_p0_5_gram_psd_baselines():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((200, 8))
    for name in ("rff", "favor", "cosformer"):
        fm = make_feature_map(name, 8, 16, rng=rng)
        phi = fm(x if name != "cosformer" else x[None], fm.init_omega(rng))
        phi = phi.reshape(-1, phi.shape[-1])
        lam = np.linalg.eigvalsh(phi @ phi.T)
        assert lam[0] >= -1e-10 * lam[-1], name
    fm = make_feature_map("hedgehog", 8, 8)
    phi = fm(x, fm.init_omega(rng), fm.init_theta(rng))
    lam = np.linalg.eigvalsh(phi @ phi.T)
    assert lam[0] >= -1e-10 * lam[-1]


# ----------------------------------------------------------------------------- P0.6
def _check_map_grads(fm, om, th, x, seed):
    rng = np.random.default_rng(seed)
    phi, cache = fm.forward(x, om, th)
    w = rng.standard_normal(phi.shape)
    dx, dom, dth = fm.backward(w, cache)

    def f():
        return float((fm(x, om, th) * w).sum())

    for name, arr, g in [("x", x, dx), ("omega", om, dom)] + [(k, th[k], dth[k]) for k in th]:
        idx, num = fd_grad(f, arr, rng=rng)
        assert rel_err(g.reshape(-1)[idx], num) < 1e-6, name


@pytest.mark.parametrize("opts", [dict(), dict(envelope="gate"), dict(shared_channels=True),
                                  dict(psi_impl="dense"), dict(ch_rms="live", ch_rms_target=0.05),
                                  dict(nonneg=False), dict(psi_kind="bank", channels=8)],
                         ids=["default", "gate", "shared", "dense", "ch_rms", "signed", "bank_coef"])
def test_p0_6_feature_map_gradients(opts):
    rng = np.random.default_rng(8)
    fm = luna(d=5, m=3, **opts)
    om, th = luna_params(fm, 8)
    th["b"] = 0.3 * rng.standard_normal(th["b"].shape)
    if "a_h" in th:
        th["a_h"] = rng.standard_normal(th["a_h"].shape)
        th["c_h"] = rng.standard_normal(th["c_h"].shape)
    if "gamma" in th:
        th["gamma"] = rng.standard_normal(th["gamma"].shape)
    _check_map_grads(fm, om, th, rng.standard_normal((2, 6, 5)), 9)


def test_p0_6_hedgehog_gradients():
    rng = np.random.default_rng(10)
    fm = make_feature_map("hedgehog", 4, 6)
    om, th = fm.init_omega(rng), {"b": 0.2 * rng.standard_normal(6)}
    _check_map_grads(fm, om, th, 0.5 * rng.standard_normal((2, 5, 4)), 11)


def _model_grad_check(seed, **kw):
    m = TransformerClassifier(11, max_len=9, d_model=8, n_heads=2, d_ff=8, n_layers=1, n_classes=3,
                              dropout=0.0, attention="linear", qk="learned", dtype="float64",
                              seed=seed, **kw)
    rng = np.random.default_rng(seed)
    length = 9
    ids = rng.integers(0, 11, (2, length))
    mask = np.ones((2, length), bool)
    if "dwc" not in kw or kw["dwc"]["kind"] == "1d":
        mask[1, 6:] = False
    y = rng.integers(0, 3, 2)
    _, grads, _ = m.loss_and_grads(ids, mask, y)

    def f():
        return float(m.loss_and_grads(ids, mask, y)[0])

    for name, p in m.params.items():
        idx, num = fd_grad(f, p, max_coords=12, rng=rng)
        assert rel_err(grads[name].reshape(-1)[idx], num) < 1e-6, name
    return m


@pytest.mark.parametrize("kw", [
    dict(feature_map="luna", m=3, feature_options=dict(channels=2, hidden=4, envelope="gate")),
    dict(feature_map="luna", m=3, feature_options=dict(channels=2, hidden=4, shared_heads=False),
         dwc={"kind": "1d", "kernel": 3}, pre_ln=True),
    dict(feature_map="luna", m=2, feature_options=dict(channels=2, hidden=4),
         dwc={"kind": "2d", "kernel": 3, "grid": (3, 3)}),
    dict(feature_map="hedgehog", m=4),
    dict(feature_map="cosformer", m=4),
    dict(feature_map="favor", m=6, feature_options=dict(stabilise="seq")),
], ids=["luna-gate", "luna-perhead-dwc1d-preln", "luna-dwc2d", "hedgehog", "cosformer", "performer"])
def test_p0_6_attention_gradients_every_parameter(kw):
    m = _model_grad_check(3, **kw)
    names = set(m.params)
    if kw["feature_map"] == "luna":
        assert {"layers.0.attn.phi_a1", "layers.0.attn.phi_b", "layers.0.attn.omega"} <= names


def test_p0_6_causal_attention_layer_gradients():
    fm = luna(d=4, m=3, channels=2, hidden=4)
    attn = KernelizedLinearAttention(8, 2, fm, qk="learned", eps=1e-6, causal=True, chunk=3,
                                     dwc={"kind": "1d", "kernel": 3})
    rng = np.random.default_rng(12)
    params = attn.init_params(rng)
    x = rng.standard_normal((2, 7, 8))
    mask = np.ones((2, 7), bool)
    w = rng.standard_normal((2, 7, 8))
    y, cache = attn.forward(params, x, mask)
    dx, grads = attn.backward(w, cache)

    def f():
        return float((attn.forward(params, x, mask)[0] * w).sum())

    for name, arr, g in [("x", x, dx)] + [(k, params[k], grads[k]) for k in params]:
        idx, num = fd_grad(f, arr, max_coords=15, rng=rng)
        assert rel_err(g.reshape(-1)[idx], num) < 1e-6, name


def test_p0_6_depthwise_conv_gradients():
    rng = np.random.default_rng(13)
    for w_shape, grid, causal, n in [((3, 5), None, False, 8), ((3, 3), None, True, 8),
                                     ((3, 3, 3), (2, 4), False, 8)]:
        v = rng.standard_normal((2, n, 3))
        w = rng.standard_normal(w_shape)
        b = rng.standard_normal(3)
        gout = rng.standard_normal((2, n, 3))
        _, cache = depthwise_conv(v, w, b, grid=grid, causal=causal)
        grads = depthwise_conv_backward(gout, cache)

        def f():
            return float((depthwise_conv(v, w, b, grid=grid, causal=causal)[0] * gout).sum())

        for arr, g in zip((v, w, b), grads):
            idx, num = fd_grad(f, arr)
            assert rel_err(g.reshape(-1)[idx], num) < 1e-8


def test_depthwise_conv_oracles():
    """1-D 'same' conv against numpy.convolve; causal conv sees no future token."""
    rng = np.random.default_rng(14)
    v = rng.standard_normal((1, 10, 1))
    w = rng.standard_normal((1, 5))
    out, _ = depthwise_conv(v, w, np.zeros(1))
    ref = np.convolve(v[0, :, 0], w[0, ::-1], mode="same")
    np.testing.assert_allclose(out[0, :, 0], ref, atol=1e-13)
    out1, _ = depthwise_conv(v, w, np.zeros(1), causal=True)
    v2 = v.copy()
    v2[0, 6:] += 1.0
    out2, _ = depthwise_conv(v2, w, np.zeros(1), causal=True)
    np.testing.assert_array_equal(out1[0, :6], out2[0, :6])


# ----------------------------------------------------------------------------- P0.7
def _mc(values):
    return float(values.mean()), float(values.std(ddof=1) / math.sqrt(values.size))


def test_p0_7_special_cases_gaussian_and_softmax():
    """LUNA-form features with psi = (cos, sin), W rows ~ N(0, d^{-1/2} I): the Gaussian kernel
    exp(-|x-y|^2 / (2 sqrt d)); with h(x) = exp(|x|^2 / (2 sqrt d)) the softmax kernel
    exp(x.y / sqrt d). m = 2e5; each estimate within 5e-3 and within 5 standard errors."""
    rng = np.random.default_rng(15)
    d, m = 16, 200_000
    x, y = rng.standard_normal(d) * 0.25, rng.standard_normal(d) * 0.25
    w = rng.standard_normal((m, d)) * d ** -0.25          # covariance d^{-1/2} I
    ux, uy = w @ x, w @ y
    prod = np.cos(ux) * np.cos(uy) + np.sin(ux) * np.sin(uy)      # psi(u_x) . psi(u_y)
    kg = math.exp(-np.sum((x - y) ** 2) / (2 * math.sqrt(d)))
    est, se = _mc(prod)
    assert abs(est - kg) < 5e-3 and abs(est - kg) < 5 * se + 1e-12
    hx, hy = math.exp(x @ x / (2 * math.sqrt(d))), math.exp(y @ y / (2 * math.sqrt(d)))
    ks = math.exp(x @ y / math.sqrt(d))
    est, se = _mc(hx * hy * prod)
    assert abs(est - ks) < 5e-3 and abs(est - ks) < 5 * se


def test_p0_7_performer_canonical_unbiased_and_paper_eq8_biased():
    """Canonical FAVOR+ (omega ~ N(0, I), x' = x / d^{1/4}; the package's favor map with
    tau = omega_scale = sqrt(d)) is unbiased for exp(x.y / sqrt d); the paper's printed
    eq. (8), omega ~ N(0, d^{-1/2} I) with the same exponent, is biased (z > 20)."""
    rng = np.random.default_rng(16)
    d, m = 16, 200_000
    x, y = rng.standard_normal(d) / d ** 0.25, rng.standard_normal(d) / d ** 0.25
    target = math.exp(x @ y / math.sqrt(d))
    fm = make_feature_map("favor", d, m, tau=math.sqrt(d), omega_scale=math.sqrt(d))
    om = fm.init_omega(rng)
    terms = m * fm(x, om) * fm(y, om)                    # the M^{-1/2} is inside phi
    est, se = _mc(terms)
    assert abs(est - target) < 5 * se
    wp = rng.standard_normal((m, d)) * d ** -0.25          # eq. (8) as printed
    f = lambda z: np.exp((2 * (wp @ z) - z @ z) / (2 * math.sqrt(d)))   # noqa: E731
    est_p, se_p = _mc(f(x) * f(y))
    assert abs(est_p - target) > 20 * se_p                 # biased, not noise


# ----------------------------------------------------------------------------- P0.8
def test_p0_8_prop5_clip_identity():
    """clip(psi, [-M, M]) = psi - relu(psi - M) + relu(-psi - M) (paper 001, Prop. 5), exactly
    for dyadic M and |psi| < 2^20 (each subtraction is exact by Sterbenz's lemma or exact in
    the dyadic grid)."""
    rng = np.random.default_rng(17)
    psi = rng.standard_normal(100_000) * 3
    relu = lambda t: np.maximum(t, 0.0)                    # noqa: E731
    for M in (0.5, 1.0, 2.0, 4.0):
        np.testing.assert_array_equal(psi - relu(psi - M) + relu(-psi - M), np.clip(psi, -M, M))


# ----------------------------------------------------------------------------- P0.9
@pytest.mark.parametrize("shared", [False, True])
def test_p0_9_piecewise_linear_equals_dense(shared):
    rng = np.random.default_rng(18)
    kw = dict(channels=4, hidden=16, shared_channels=shared)
    pwl, dense = luna(d=6, m=5, **kw), luna(d=6, m=5, psi_impl="dense", **kw)
    om, th = luna_params(pwl, 18)
    th["a1"].reshape(-1)[[0, 3, 7]] = 0.0                  # constant units (a1_j = 0) ...
    th["c1"].reshape(-1)[[0, 3]] = [0.4, -0.2]             # ... one on, one off
    th["b"] = rng.standard_normal(5)
    x = 2 * rng.standard_normal((3, 40, 6))
    p1, c1 = pwl.forward(x, om, th)
    p2, c2 = dense.forward(x, om, th)
    assert rel_err(p1, p2) < 1e-12
    w = rng.standard_normal(p1.shape)
    g1, g2 = pwl.backward(w, c1), dense.backward(w, c2)
    assert rel_err(g1[0], g2[0]) < 1e-12 and rel_err(g1[1], g2[1]) < 1e-12
    for k in th:
        assert rel_err(g1[2][k], g2[2][k]) < 1e-12, k
    u = np.linspace(-6, 6, 2001)
    assert rel_err(pwl.psi(u, th), dense.psi(u, th, impl="dense")) < 1e-12


# ----------------------------------------------------------------------------- P0.10
@pytest.mark.parametrize("kw", [dict(feature_map="luna", m=4, feature_options=dict(channels=2, hidden=8)),
                                dict(feature_map="luna", m=4, feature_options=dict(channels=2, hidden=8),
                                     dwc={"kind": "1d", "kernel": 5}, pre_ln=True)],
                         ids=["luna", "luna-dwc-preln"])
def test_p0_10_padding_invariance(kw):
    m = TransformerClassifier(13, max_len=16, d_model=8, n_heads=2, d_ff=8, n_layers=2, n_classes=2,
                              dropout=0.0, attention="linear", dtype="float64", seed=4, **kw)
    rng = np.random.default_rng(19)
    ids = rng.integers(1, 13, (2, 6))
    mask = np.ones((2, 6), bool)
    ids_p = np.concatenate([ids, rng.integers(0, 13, (2, 5))], axis=1)
    mask_p = np.concatenate([mask, np.zeros((2, 5), bool)], axis=1)
    np.testing.assert_allclose(m.forward(ids_p, mask_p), m.forward(ids, mask), rtol=1e-12, atol=1e-13)


# ----------------------------------------------------------------------------- P0.11
def test_p0_11_permutation_equivariance():
    fm = luna(d=4, m=3)
    attn = KernelizedLinearAttention(8, 2, fm, qk="learned", eps=1e-6)
    rng = np.random.default_rng(20)
    params = attn.init_params(rng)
    x = rng.standard_normal((2, 9, 8))
    mask = np.ones((2, 9), bool)
    perm = rng.permutation(9)
    y, _ = attn.forward(params, x, mask)
    yp, _ = attn.forward(params, x[:, perm], mask)
    np.testing.assert_allclose(yp, y[:, perm], rtol=1e-12, atol=1e-14)


# ----------------------------------------------------------------------------- P0.12
def test_p0_12_ch_rms_shrinks_frozen_is_causal_live_leaks():
    rng = np.random.default_rng(21)
    fm = luna(d=4, m=3, channels=3, hidden=8, ch_rms="live", ch_rms_target=0.05)
    om, th = luna_params(fm, 21)
    x = 3 * rng.standard_normal((1, 12, 4))
    _, cache = fm.forward(x, om, th)
    s = fm.ch_rms_scales(cache["y"])
    assert np.all(s <= 1.0) and np.all(s > 0) and np.any(s < 1.0)
    v = rng.standard_normal((1, 12, 2))
    future = x.copy()
    future[0, 8:] *= 5.0                                   # change only tokens 8..11

    def causal_out(fmap, xx):
        phi = fmap(xx, om, th)
        return causal_linear_attention(phi, phi, v, eps=1e-6, chunk=4)[0]

    frozen = luna(d=4, m=3, channels=3, hidden=8, ch_rms="frozen", ch_rms_scale=s)
    np.testing.assert_array_equal(causal_out(frozen, x)[0, :8], causal_out(frozen, future)[0, :8])
    # the hazard: with the live statistic, earlier outputs move when later tokens change
    leak = np.abs(causal_out(fm, x)[0, :8] - causal_out(fm, future)[0, :8]).max()
    assert leak > 1e-6
    with pytest.raises(ValueError, match="ch_rms_scale"):
        luna(ch_rms="frozen")
    # so the causal layer refuses the live statistic (the frozen one is causal)
    with pytest.raises(ValueError, match="ch_rms='live'"):
        KernelizedLinearAttention(8, 2, fm, qk="learned", eps=1e-6, causal=True)
    KernelizedLinearAttention(8, 2, frozen, qk="learned", eps=1e-6, causal=True)


# ----------------------------------------------------------------------------- contract
def test_registry_and_errors():
    assert FEATURE_MAPS["luna"].learned and FEATURE_MAPS["hedgehog"].learned
    fm = make_feature_map("luna", 32, 8)
    assert fm.n_features == 64 and fm.shared_heads
    om, th = luna_params(fm)
    assert om.shape == (8, 32) and abs(om.std() - 32 ** -0.5) < 0.03
    assert np.all(th["b"] == 0) and th["a1"].shape == (8, 64)
    with pytest.raises(ValueError, match="envelope"):
        make_feature_map("luna", 4, 2, envelope="vector")
    with pytest.raises(ValueError, match="missing keys"):
        fm.forward(np.zeros((2, 32)), om, {"b": th["b"]})
    with pytest.raises(ValueError, match="unknown option"):
        make_feature_map("luna", 4, 2, chanels=3)
