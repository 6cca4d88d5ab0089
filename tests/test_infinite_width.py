"""Acceptance tests T1-T18 of the infinite-width attention law (docs/specs/paper002_infinite_width.md).

Reference: M. Sakai, R. Karakida, M. Imaizumi, "Infinite-Width Limit of a Single Attention Layer:
Analysis via Tensor Programs", arXiv:2506.00846. Every stochastic test is seeded; thresholds are
stated in standard errors (z) at the reduced CI sizes, or are the spec's tolerances where the
spec's sizes are used. The full-size versions are marked ``full_size`` (``make test-full``;
``make test`` runs the reduced twins).
"""
import math

import numpy as np
import pytest
import scipy.stats
from threadpoolctl import threadpool_limits

from rieszflow.theory.infinite_width import (AttentionLayerSpec, clip_constant, input_kernel, kl_kde_paper, kl_rao_blackwell, linear_attention_scale, one_over_n_limit_variance, paper_kde_grid, sample_finite_brute_force, sample_finite_reduced, sample_limit, scale_mixture_logpdf, variance_gamma_cdf, variance_gamma_pdf)

CLIP = AttentionLayerSpec()                       # s = 4, H = 2, clip C = 100, sigma = 1
LIMIT_VAR = 0.39197                               # spec section 2.5(a)


@pytest.fixture(autouse=True)
def _one_thread():
    with threadpool_limits(1):
        yield


def rng(*key):
    return np.random.default_rng(np.random.SeedSequence([2506_00846, *key]))


def se_mean(x):
    return np.std(x, ddof=1) / math.sqrt(len(x))


# --- T1-T5: the limit law -------------------------------------------------------------------------

@pytest.mark.parametrize("spec,target", [(CLIP, 0.3920), (CLIP.replace(s=8), 0.2323),
                                         (CLIP.replace(act="relu"), 0.2548),
                                         (CLIP.replace(act="relu", s=8), 0.2082)])
def test_T1_limit_variance(spec, target):
    # 2e5 samples: SE(mean sigma^2) <= 1.8e-4, so the spec's +-0.001 is z >= 5.5
    s2 = sample_limit(spec, 200_000, rng(1, spec.s, hash(spec.act) % 1000))["sigma2"]
    assert se_mean(s2) < 2e-4
    assert abs(s2.mean() - target) < 0.001


@pytest.mark.full_size
@pytest.mark.parametrize("spec,target", [(CLIP, 0.3920), (CLIP.replace(s=8), 0.2323),
                                         (CLIP.replace(act="relu"), 0.2548),
                                         (CLIP.replace(act="relu", s=8), 0.2082)])
def test_T1_limit_variance_full(spec, target):
    s2 = sample_limit(spec, 1_000_000, rng(101, spec.s, hash(spec.act) % 1000))["sigma2"]
    assert abs(s2.mean() - target) < 0.001


def test_T2_variance_does_not_depend_on_H():
    for H, N in ((1, 200_000), (2, 100_000), (16, 20_000), (256, 4_000)):
        s2 = sample_limit(CLIP.replace(H=H), N, rng(2, H))["sigma2"]
        assert 3 * se_mean(s2) < 0.002                 # +-0.002 is at least 3 SE
        assert abs(s2.mean() - 0.3920) < 0.002, H


def _kurt(s2):
    return 3 * s2.var() / s2.mean() ** 2


def test_T3_limit_excess_kurtosis():
    k1 = _kurt(sample_limit(CLIP.replace(H=1), 200_000, rng(3, 1))["sigma2"])
    assert abs(k1 - 0.242) < 0.01                       # bootstrap SE at 2e5 is about 1.5e-3
    hk = [H * _kurt(sample_limit(CLIP.replace(H=H), 100_000, rng(3, H))["sigma2"]) for H in (1, 2, 4, 16)]
    assert max(hk) / min(hk) < 1.05, hk
    k8 = _kurt(sample_limit(CLIP.replace(H=1, s=8), 200_000, rng(3, 8))["sigma2"])
    assert abs(k8 - 0.353) < 0.015
    kr = _kurt(sample_limit(CLIP.replace(H=1, act="relu"), 200_000, rng(3, 99))["sigma2"])
    assert abs(kr - 0.0036) < 0.0005


def test_T4_clip_bounds_and_subgaussian_tail():
    out = sample_limit(CLIP.replace(H=1), 200_000, rng(4))
    s2, y = out["sigma2"], out["y"]
    assert np.all(s2 >= 1 / 4 - 1e-12) and np.all(s2 <= 1 + 1e-12)
    for t in (1, 2, 3):
        assert np.mean(np.abs(y) >= t) <= 2 * math.exp(-t * t / 2)
    # the bound uses ||K_v||_2 = 1 for clip; the empirical tail must also lie below the Gaussian
    # tail of the largest possible variance 1 (a sampler with too large variances fails this)
    assert np.mean(np.abs(y) >= 2) < 2 * scipy.stats.norm.sf(2)


@pytest.mark.parametrize("H", [1, 2])
def test_T5_cross_token_covariance(H):
    out = sample_limit(CLIP.replace(H=H), 400_000, rng(5, H), tokens="all")
    Y, Sig = out["y"], out["Sigma"]
    prod = Y[:, 0] * Y[:, 1]
    assert abs(prod.mean() - 0.25) < max(0.003, 3 * se_mean(prod))
    assert abs(Y[:, 0].var() - 0.392) < 0.003
    # Rao-Blackwellised versions (much smaller SE): E Sigma_12 = 1/s exactly
    assert abs(Sig[:, 0, 1].mean() - 0.25) < 4 * se_mean(Sig[:, 0, 1])
    assert abs(Sig[:, 0, 0].mean() - LIMIT_VAR) < 4 * se_mean(Sig[:, 0, 0]) + 1e-4
    # the first-token sampler and the joint one agree on sigma^2
    assert np.allclose(out["sigma2"], Sig[:, 0, 0])
    # under the 1/n scaling every token has the same output: Var = Cov = 1/s, deterministic
    out_n = sample_limit(CLIP.replace(H=H, scaling="n"), 1000, rng(5, H, 1), tokens="all")
    assert np.allclose(out_n["Sigma"], 0.25) and np.allclose(out_n["y"][:, 0], out_n["y"][:, 1])


# --- T6-T8: finite width --------------------------------------------------------------------------

def _var_se(x):
    """Variance of a centred variable and its SE (fourth-moment formula)."""
    m2, m4 = np.mean(x ** 2), np.mean(x ** 4)
    return m2, math.sqrt((m4 - m2 ** 2) / len(x))


def _cov_se(a, b):
    p = a * b
    return p.mean(), se_mean(p)


@pytest.mark.parametrize("n,N", [(16, 400_000), (256, 200_000)])
def test_T6_finite_score_moments(n, N):
    out = sample_finite_reduced(CLIP.replace(H=1), n, N, rng(6, n), return_scores=True)
    p = out["qk"] / math.sqrt(n)
    assert np.allclose(p[:, 0, 0] * math.sqrt(n), out["qk11"])
    for est, target in (( _var_se(p[:, 0, 0]), (1 + 2 / n) ** 2), (_var_se(p[:, 0, 1]), 1 + 2 / n),
                        (_cov_se(p[:, 0, 0], p[:, 1, 1]), (1 + 2 / n) / n),
                        (_cov_se(p[:, 0, 1], p[:, 1, 0]), (1 + 2 / n) / n)):
        value, se = est
        assert abs(value - target) < 3 * se, (value, target, se)
    # at n = 16 the finite-n correction (1 + 2/n)^2 = 1.27 is tens of SE from the limit 1: the test can fail
    if n == 16:
        v, se = _var_se(p[:, 0, 0])
        assert abs(v - 1.0) > 10 * se
    else:
        assert scipy.stats.kstest(p[:, 0, 0], "norm").statistic < 0.01
        sd_n = np.std(out["qk11"] / n)
        assert abs(sd_n - (1 + 2 / n) / math.sqrt(n)) < 0.0005


@pytest.mark.full_size
def test_T6_finite_score_moments_full():
    n = 256
    out = sample_finite_reduced(CLIP.replace(H=1), n, 4_000_000, rng(106), return_scores=True)
    p = out["qk"] / math.sqrt(n)
    for (value, se), target in ((_var_se(p[:, 0, 0]), (1 + 2 / n) ** 2), (_var_se(p[:, 0, 1]), 1 + 2 / n),
                                (_cov_se(p[:, 0, 0], p[:, 1, 1]), (1 + 2 / n) / n)):
        assert abs(value - target) < 3 * se
    assert scipy.stats.kstest(p[:, 0, 0], "norm").statistic < 0.01
    assert abs(np.std(out["qk11"] / n) - 0.0630) < 0.0005


T7_CASES = [(16, 2, "clip", None, 20_000), (16, 1, "relu", None, 20_000), (32, 2, "clip", None, 6_000),
            (64, 1, "clip", None, 3_000), (64, 4, "clip", 16, 2_000)]


def _t7(n, H, act, n_H, nets, key):
    spec = CLIP.replace(H=H, act=act, n_H=n_H)
    b = sample_finite_brute_force(spec, n, nets, rng(7, key, 0))
    r = sample_finite_reduced(spec, n, 100_000, rng(7, key, 1))
    z = (b["tau2"].mean() - r["tau2"].mean()) / math.hypot(se_mean(b["tau2"]), se_mean(r["tau2"]))
    return z, scipy.stats.ks_2samp(b["y"], r["y"]).pvalue, b, r


@pytest.mark.parametrize("case", T7_CASES)
def test_T7_reduced_matches_brute_force(case):
    n, H, act, n_H, nets = case
    z, pval, b, _ = _t7(n, H, act, n_H, nets, T7_CASES.index(case))
    assert abs(z) < 3 and pval > 0.01, (z, pval)
    # brute-force internals: tau2 is the conditional variance of y (E y^2 = E tau2 within 4 SE)
    assert abs(np.mean(b["y"] ** 2) - b["tau2"].mean()) < 4 * se_mean(b["y"] ** 2)


def test_T7_can_fail():
    # a wrong reduction (value Wishart with n + 4 degrees of freedom) is detected at these sizes
    n, H = 16, 2
    b = sample_finite_brute_force(CLIP.replace(H=H), n, 20_000, rng(7, 99, 0))
    r = sample_finite_reduced(CLIP.replace(H=H), n + 4, 100_000, rng(7, 99, 1))
    z = (b["tau2"].mean() - r["tau2"].mean()) / math.hypot(se_mean(b["tau2"]), se_mean(r["tau2"]))
    assert abs(z) > 3


@pytest.mark.full_size
@pytest.mark.parametrize("n", [16, 32, 64])
@pytest.mark.parametrize("H", [1, 2])
@pytest.mark.parametrize("act", ["clip", "relu"])
def test_T7_full(n, H, act):
    z, pval, _, _ = _t7(n, H, act, None, 20_000, 1000 + n * 10 + H + (act == "relu"))
    assert abs(z) < 3 and pval > 0.01


def test_T8_mean_convergence():
    t16 = sample_finite_reduced(CLIP, 16, 200_000, rng(8, 16))["tau2"]
    assert 3 * se_mean(t16) < 0.003
    assert abs(t16.mean() - 0.434) < 0.003
    for n, N in ((64, 150_000), (256, 200_000)):
        t = sample_finite_reduced(CLIP, n, N, rng(8, n))["tau2"]
        c = n * (t.mean() - LIMIT_VAR)
        assert n * 3 * se_mean(t) < 0.2                     # the interval +-0.2 is >= 3 SE wide
        assert 0.55 <= c <= 0.95, (n, c)


# --- T9-T11: KL estimators on E1 ------------------------------------------------------------------

E1_N = (16, 64, 256, 1024)
E1_RB_REF = (2.2e-2, 2.1e-3, 1.6e-4, 1.2e-5)


def _e1(trials, N, key):
    """Per trial: one limit set reused for every n (as the paper's code); samples and variances."""
    out = []
    for t in range(trials):
        lim = sample_limit(CLIP, N, rng(9, key, t, 0))
        fin = {n: sample_finite_reduced(CLIP, n, N, rng(9, key, t, n)) for n in E1_N}
        out.append((lim, fin))
    return out


@pytest.fixture(scope="module")
def e1_small():
    with threadpool_limits(1):
        return _e1(3, 50_000, 0)


def _check_t9(kl, tol_1024):
    mean = kl.mean(axis=0)
    for m, ref, tol in zip(mean, E1_RB_REF, (0.3, 0.3, 0.3, tol_1024)):
        assert abs(m / ref - 1) < tol, (mean, E1_RB_REF)
    ratios = mean[:-1] / mean[1:]
    assert np.all((ratios >= 8) & (ratios <= 20)), ratios
    slope = np.polyfit(np.log(E1_N[1:]), np.log(mean[1:]), 1)[0]
    assert -2.2 <= slope <= -1.6, slope


def test_T9_E1_rao_blackwell(e1_small):
    kl = np.array([[kl_rao_blackwell(fin[n]["tau2"], lim["sigma2"]) for n in E1_N] for lim, fin in e1_small])
    # single-trial relative sd measured at 50k: 1-2 % for n <= 256, 16 % at n = 1024; the mean of 3
    # trials is within +-30 % (n <= 256) and +-40 % (n = 1024, 4 SE) of the reference
    _check_t9(kl, 0.4)
    # the estimator can fail: a limit taken at H = 1 (another law) is far from E1's finite n = 1024
    wrong = kl_rao_blackwell(e1_small[0][1][1024]["tau2"], sample_limit(CLIP.replace(H=1), 50_000, rng(9, 9))["sigma2"])
    assert wrong > 5 * E1_RB_REF[-1]


@pytest.mark.full_size
def test_T9_E1_rao_blackwell_full():
    data = _e1(10, 50_000, 100)
    kl = np.array([[kl_rao_blackwell(fin[n]["tau2"], lim["sigma2"]) for n in E1_N] for lim, fin in data])
    _check_t9(kl, 0.3)


def _kde_table(data):
    ys = [lim["y"] for lim, _ in data] + [fin[n]["y"] for _, fin in data for n in fin]
    grid = paper_kde_grid(*ys)
    return np.array([[kl_kde_paper(fin[n]["y"], lim["y"], grid) for n in fin] for lim, fin in data]), grid


def test_T10_E1_paper_kde_small(e1_small):
    # CI: n = 16, 64 only (the KDE costs about 1 s per pair), 3 trials x 50k. The paper's estimator
    # is noisy: per-trial sd of KL_KDE / mean up to 0.4 at n = 64 (measured, --quick), so the SE of
    # ln(mean KL) over 3 trials is about 0.23 there: n = 64 is checked at +-0.7 (3 SE), n = 16 (sd/mean
    # 0.05-0.17) at the spec's +-0.5. The full-size spec criterion is test_T10_E1_paper_kde_full.
    data = [(lim, {n: fin[n] for n in (16, 64)}) for lim, fin in e1_small]
    kl, _ = _kde_table(data)
    lnm = np.log(kl.mean(axis=0))
    assert lnm[0] > lnm[1]
    assert abs(lnm[0] + 3.42) < 0.5 and abs(lnm[1] + 5.58) < 0.7, lnm
    # and it is biased upward relative to the Rao-Blackwellised estimate at n = 64 (KDE floor ~6e-4)
    rb = np.mean([kl_rao_blackwell(fin[64]["tau2"], lim["sigma2"]) for lim, fin in data])
    assert kl.mean(axis=0)[1] > 0.9 * rb


@pytest.mark.full_size
def test_T10_E1_paper_kde_full():
    data = _e1(10, 50_000, 200)
    kl, grid = _kde_table(data)
    mean, sd = kl.mean(axis=0), kl.std(axis=0, ddof=1)
    lnm = np.log(mean)
    assert lnm[0] > lnm[1] > lnm[2]
    assert abs(lnm[0] + 3.42) < 0.5 and abs(lnm[1] + 5.58) < 0.5 and abs(lnm[2] + 7.13) < 0.7
    assert mean[3] <= mean[2] + sd[2]
    floor = np.mean([kl_kde_paper(sample_limit(CLIP, 50_000, rng(10, t))["y"], lim["y"], grid)
                     for t, (lim, _) in enumerate(data)])
    assert mean[3] <= 2 * floor


def _t11(H, n, N, key):
    fin = sample_finite_reduced(CLIP.replace(H=H), n, N, rng(11, key, 0))["tau2"]
    lim = sample_limit(CLIP.replace(H=H), N, rng(11, key, 1))["sigma2"]
    return kl_rao_blackwell(fin, lim), kl_rao_blackwell(fin, [0.392])


@pytest.mark.parametrize("H", [1, 2])
def test_T11_theory_beats_gaussian(H):
    for n in (64, 1024):
        theo, gauss = _t11(H, n, 100_000, H * 10000 + n)
        assert theo < gauss, (n, theo, gauss)
    assert gauss / theo >= 10, (theo, gauss)


@pytest.mark.full_size
@pytest.mark.parametrize("H", [1, 2])
def test_T11_full(H):
    for n in (64, 256, 1024):
        theo, gauss = _t11(H, n, 200_000, 500 + H * 10000 + n)
        assert theo < gauss
    assert gauss / theo >= 10


# --- T12: the hierarchical limit (Theorem 3.1) ----------------------------------------------------

def _t12(scaling, n, nets, key):
    return sample_finite_brute_force(CLIP.replace(scaling=scaling), n, nets, rng(12, key, n), full_output=True)


def test_T12_hierarchical_limit():
    a, b = _t12("sqrt", 64, 100, 0), _t12("sqrt", 256, 100, 0)
    # sd over networks of m2 = (1/n) sum_alpha (y_alpha^1)^2: 0.20 (n=64), 0.126 (256), -> 0.079, not 0.
    # Relative SE of an sd from 100 nets is about 8 %.
    assert np.std(a["m2"]) > np.std(b["m2"]) > 0.079
    # m2 tracks the network's own sigma^2(p): corr 0.85 at n = 256 (SE about 0.03 at 100 nets)
    assert np.corrcoef(b["m2"], b["sigma2_net"])[0, 1] >= 0.75
    # within one network the coordinates are Gaussian: mean excess kurtosis over 100 nets,
    # SE sqrt(24/256)/10 = 0.03 plus the small-sample bias -6/(n+1)
    assert abs(b["kurt_within"].mean()) < 0.1
    c, d = _t12("n", 64, 200, 1), _t12("n", 256, 200, 1)
    ratio = np.std(c["m2"]) / np.std(d["m2"])
    assert 1.6 <= ratio <= 2.6, ratio                   # sd(m2) ~ n^{-1/2} under 1/n: 2 expected
    assert abs(d["m2"].mean() - 0.25) < 0.02


@pytest.mark.full_size
def test_T12_full():
    big = _t12("sqrt", 1024, 100, 2)
    sd = np.std(big["m2"])
    assert sd > 0.07 and abs(sd - 0.087) < 0.02
    assert np.corrcoef(big["m2"], big["sigma2_net"])[0, 1] >= 0.9
    c, d = _t12("n", 256, 200, 3), _t12("n", 1024, 100, 3)
    assert 1.6 <= np.std(c["m2"]) / np.std(d["m2"]) <= 2.6
    assert abs(d["m2"].mean() - 0.25) < 0.02
    assert abs(big["kurt_within"].mean()) < 0.1


# --- T13-T15: heads, low rank, s = 8, ReLU ----------------------------------------------------------

def test_T13_heads_limit_vs_infinite_head_gaussian():
    for H, N, ref, tol in ((1, 200_000, 9.6e-4, 0.15), (2, 200_000, 2.7e-4, 0.2)):
        kl = kl_rao_blackwell(sample_limit(CLIP.replace(H=H), N, rng(13, H))["sigma2"], [0.392])
        assert abs(kl / ref - 1) < tol, (H, kl)
    kl256 = kl_rao_blackwell(sample_limit(CLIP.replace(H=256), 5_000, rng(13, 256))["sigma2"], [0.392])
    assert kl256 < 1e-6
    fin = sample_finite_reduced(CLIP.replace(H=1), 256, 50_000, rng(13, 1, 256))["tau2"]
    lim = sample_limit(CLIP.replace(H=1), 50_000, rng(13, 1, 0))["sigma2"]
    assert abs(kl_rao_blackwell(fin, lim) / 1.9e-4 - 1) < 0.3


@pytest.mark.full_size
def test_T13_full_H256():
    fin = sample_finite_reduced(CLIP.replace(H=256), 256, 50_000, rng(113))["tau2"]
    lim = sample_limit(CLIP.replace(H=256), 50_000, rng(113, 1))["sigma2"]
    assert abs(kl_rao_blackwell(fin, lim) / 1.2e-4 - 1) < 0.3


LOWRANK = ((64, 1, 2.45e-3), (256, 4, 2.0e-4), (1024, 16, 1.3e-5))


def _t14(trials, N, key):
    kl = np.zeros((trials, 3))
    for t in range(trials):
        for i, (n, H, _) in enumerate(LOWRANK):
            fin = sample_finite_reduced(CLIP.replace(H=H, n_H=64), n, N, rng(14, key, t, n))["tau2"]
            lim = sample_limit(CLIP.replace(H=H), N, rng(14, key, t, 0, H))["sigma2"]
            kl[t, i] = kl_rao_blackwell(fin, lim)
    return kl.mean(axis=0)


def test_T14_low_rank():
    # one trial of 50k: measured single-trial spread about 3 % (n <= 256) and 5 % (n = 1024)
    m = _t14(1, 50_000, 0)
    assert np.all(np.diff(m) < 0)
    for v, (_, _, ref) in zip(m, LOWRANK):
        assert abs(v / ref - 1) < 0.3, m


@pytest.mark.full_size
def test_T14_full():
    m = _t14(10, 50_000, 1)
    assert np.all(np.diff(m) < 0)
    for v, (_, _, ref) in zip(m, LOWRANK):
        assert abs(v / ref - 1) < 0.3


T15_REF = {"s8": (CLIP.replace(s=8), (3.84e-2, 3.90e-3, 3.02e-4, 2.17e-5), (0.2964, 0.2491, 0.2366, 0.2335), 50_000),
           "relu": (CLIP.replace(act="relu"), (1.59e-2, 1.23e-3, 8.38e-5, 5.40e-6),
                    (0.2657, 0.2573, 0.2554, 0.2549), 100_000)}


@pytest.mark.parametrize("name", ["s8", "relu"])
def test_T15_tokens_and_relu_small(name):
    spec, kl_ref, tau_ref, _ = T15_REF[name]
    lim = sample_limit(spec, 50_000, rng(15, len(name)))["sigma2"]
    for i, n in enumerate((16, 64)):
        t = sample_finite_reduced(spec, n, 50_000, rng(15, len(name), n))["tau2"]
        assert abs(t.mean() - tau_ref[i]) < 0.003
        assert abs(kl_rao_blackwell(t, lim) / kl_ref[i] - 1) < 0.3


# --- T16-T18 --------------------------------------------------------------------------------------

def test_T16_clip_constant():
    assert abs(clip_constant(1.0) - 0.516059) < 1e-6
    assert clip_constant(100.0) == 1.0
    z = rng(16).standard_normal(10_000_000)
    mc = np.mean(np.clip(z, -1, 1) ** 2)
    assert abs(mc - clip_constant(1.0)) < 3e-4
    # the kernel of a user activation (numerical quadrature) matches the closed forms
    K_user = input_kernel(CLIP.replace(act=lambda u: np.clip(u, -1.0, 1.0)))
    assert np.allclose(K_user, input_kernel(CLIP.replace(C=1.0)), atol=1e-6)
    K_relu = input_kernel(CLIP.replace(act=lambda u: np.maximum(u, 0.0)))
    assert np.allclose(K_relu, input_kernel(CLIP.replace(act="relu")), atol=1e-6)


def test_T17_one_over_n_limit():
    assert abs(one_over_n_limit_variance(CLIP) - 0.25) < 1e-12
    assert abs(one_over_n_limit_variance(CLIP.replace(act="relu")) - 0.24437) < 1e-5
    Y = sample_limit(CLIP.replace(scaling="n"), 100_000, rng(17), tokens="all")["y"]
    assert abs(Y[:, 0].var() - 0.25) < 4 * 0.25 * math.sqrt(2 / 100_000)
    assert np.corrcoef(Y[:, 0], Y[:, 1])[0, 1] > 1 - 1e-12
    Yr = sample_limit(CLIP.replace(scaling="n", act="relu"), 100_000, rng(17, 1), tokens="all")["y"]
    assert abs(Yr[:, 0].var() - 0.24437) < 4 * 0.24437 * math.sqrt(2 / 100_000)
    # finite width under 1/n: E tau^2 -> 1/s (n = 1024; O(1/sqrt n) fluctuations of the scores)
    t = sample_finite_reduced(CLIP.replace(scaling="n"), 1024, 50_000, rng(17, 2))["tau2"]
    assert abs(t.mean() - 0.25) < 0.01


def test_T18_linear_attention_variance_gamma():
    y = np.linspace(-60, 60, 600_001)
    for s, H in ((4, 1), (4, 2), (8, 3)):
        f = variance_gamma_pdf(y, s, H)
        mass, var = np.trapezoid(f, y), np.trapezoid(y ** 2 * f, y)
        kurt = np.trapezoid(y ** 4 * f, y) / var ** 2 - 3
        assert abs(mass - 1) < 1e-6 and abs(var - s) < 1e-5 and abs(kurt - 6 / (s * H)) < 1e-4
    lin = CLIP.replace(H=1, score_map="identity")
    scale = linear_attention_scale(lin)
    assert scale == 1.0
    lim = sample_limit(lin, 100_000, rng(18))["y"]
    assert scipy.stats.kstest(lim, lambda v: variance_gamma_cdf(v, 4, 1)).pvalue > 0.01
    fin = sample_finite_reduced(lin, 1024, 200_000, rng(18, 1024))["y"]
    D = scipy.stats.kstest(fin, lambda v: variance_gamma_cdf(v, 4, 1)).statistic
    assert D < 0.005, D
    # the test can fail: the Gaussian of the same variance is rejected by the limit sample
    assert scipy.stats.kstest(lim, "norm", args=(0, 2.0)).pvalue < 1e-6


# --- interfaces -----------------------------------------------------------------------------------

def test_bad_input_names_the_parameter():
    with pytest.raises(ValueError, match="scaling"):
        AttentionLayerSpec(scaling="log")
    with pytest.raises(ValueError, match="score_map"):
        AttentionLayerSpec(score_map="sparsemax")
    with pytest.raises(ValueError, match="head dimension"):
        sample_finite_reduced(CLIP.replace(n_H=2), 16, 10, rng(0))
    with pytest.raises(ValueError, match="variances"):
        scale_mixture_logpdf([0.0], [-1.0])
    with pytest.raises(ValueError, match="linear_attention_scale"):
        linear_attention_scale(CLIP)


def test_user_score_map_and_rb_binning():
    # a user map equal to softmax reproduces the built-in one draw for draw
    def soft(p):
        e = np.exp(p - p.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    a = sample_limit(CLIP.replace(score_map=soft), 1000, rng(19))["sigma2"]
    b = sample_limit(CLIP, 1000, rng(19))["sigma2"]
    assert np.allclose(a, b)
    v = sample_limit(CLIP, 20_000, rng(20))["sigma2"]
    y = np.linspace(-3, 3, 7)
    assert np.allclose(scale_mixture_logpdf(y, v, bins=3000), scale_mixture_logpdf(y, v, bins=None), atol=1e-6)
    assert kl_rao_blackwell(v, v) == pytest.approx(0.0, abs=1e-15)


# --- the study, end to end at toy size ------------------------------------------------------------

def test_study_end_to_end_tiny(tmp_path, capsys):
    import json

    import xarray as xr

    from rieszflow.engine.storage import missing_cf_attributes
    from rieszflow.studies.cli import main as cli_main

    sets = ["samples=1500", "trials=2", "relu_samples=1500", "lowrank_samples=1500", "lowrank_n_H=16",
            "lowrank_widths=16,32", "heads=1,4", "heads_width=32", "heads_samples=1500", "heads_trials=2",
            "tokens_samples=1500", "scaling_samples=1500", "scaling_width=32", "hier_networks=10",
            "hier_widths=16,32", "timing_widths=16,32", "timing_networks=2", "timing_samples=500",
            "bundled_samples=20", "widths=16,32,64", "validation_networks=200", "validation_samples=1000",
            "linear_widths=16", "linear_samples=1000"]
    args = ["infinite-width", "--quiet", "--no-plots", "--workers", "0", "--out", str(tmp_path / "iw")]
    for s in sets:
        args += ["--set", s]
    assert cli_main(args) == 0
    out = capsys.readouterr().out
    assert "KL decay exponent" in out and "speed-up" in out and "resolves n = 64" in out
    # the verdict texts follow the widths given (16, 32, 64: all three fitted, ratios per x2)
    assert "over n = 16, 32, 64, 6 trial points" in out and "per x2 in n" in out and "per x4" not in out
    assert "z_crit = 1.96" in out and "(delta-method SE)" in out
    assert "a curve that grows without bound with n" in out and "KL(Z^y || Gaussian) = " in out
    assert "T7: reduced sampler" in out and "T18: linear attention" in out
    numbers = json.loads((tmp_path / "iw" / "numbers.json").read_text())
    assert {"slope_rb", "kde_resolves", "gauss_ratio_top", "speedup", "bundled_kurtosis",
            "gauss_ratios", "kl_limit_gauss"} <= set(numbers)
    assert len(numbers["gauss_ratios"]) == 3
    with xr.open_dataset(tmp_path / "iw" / "e1_width" / "kl.h5", engine="h5netcdf") as ds:
        assert ds["kl_kde"].dims == ("n", "trial") and np.all(np.isfinite(ds["kl_kde"].values))
        assert np.all(ds["kl_kde_floor"].values > 0) and ds["kl_kde_floor"].dims == ("pair",)
    for name in ("e1_width", "e3_heads", "t12_hierarchical"):
        with xr.open_dataset(tmp_path / "iw" / name / f"{name}.h5", engine="h5netcdf") as ds:
            assert "method" in ds.dims and "trial" in ds.dims
    assert not missing_cf_attributes(tmp_path / "iw" / "e1_width" / "kl.h5")
    assert not missing_cf_attributes(tmp_path / "iw" / "e1_width" / "e1_width.h5")
    # the same command again runs nothing new and reproduces the report's numbers
    assert cli_main(args) == 0
    assert json.loads((tmp_path / "iw" / "numbers.json").read_text())["slope_rb"] == numbers["slope_rb"]


@pytest.mark.gpu
def test_brute_force_numpy_cupy_parity():
    from rieszflow.engine.backend import cupy_available

    if not cupy_available():
        pytest.skip("CuPy or a CUDA device is not available")
    spec = CLIP.replace(H=2)
    a = sample_finite_brute_force(spec, 64, 50, rng(30), full_output=True)
    b = sample_finite_brute_force(spec, 64, 50, rng(30), full_output=True, backend="cupy")
    for k in a:                                   # same host draws: equal to float64 round-off
        assert np.allclose(a[k], b[k], rtol=1e-9, atol=1e-12), k


def test_report_helpers():
    from rieszflow.studies.infinite_width.study import _ratio_se, _steps, decay_slope

    # decay_slope: exact power law -> slope exact, SE ~ 0; noisy -> SE covers the truth (z = 4)
    n = np.array([64.0, 256.0, 1024.0])
    exact = decay_slope(n, 3.0 * n[:, None] ** -1.9 * np.ones((3, 4)))
    assert exact.slope == pytest.approx(-1.9, abs=1e-12) and exact.slope_se < 1e-10
    g = np.random.default_rng(0)
    noisy = decay_slope(n, 3.0 * n[:, None] ** -1.9 * np.exp(0.1 * g.standard_normal((3, 10))))
    assert 0 < noisy.slope_se < 0.05 and abs(noisy.slope + 1.9) < 4 * noisy.slope_se
    # width steps
    assert _steps([16, 64, 256, 1024]) == "per x4 in n" and _steps([8, 16, 32]) == "per x2 in n"
    assert _steps([16, 64, 128]) == "for n 16 -> 64, 64 -> 128"
    # ratio of means: the delta-method SE matches the spread of the ratio over repeated experiments
    reps = [(lambda a, b: _ratio_se(a, b))(2 + 0.2 * g.standard_normal(50), 1 + 0.1 * g.standard_normal(50))
            for _ in range(400)]
    r, se = np.array(reps).T
    assert abs(r.mean() - 2.0) < 4 * r.std() / np.sqrt(r.size)
    assert se.mean() == pytest.approx(r.std(), rel=0.2)   # sd of the ratio estimate: 0.04; 400 reps: 4 % SE


def test_gauss_ratio_curve_grows_while_the_limit_kl_is_fixed():
    """Fabricated KLs with known means: theory KL c n^-2, Gaussian KL = K + theory KL, limit KL = K.
    The ratio (K + c n^-2) / (c n^-2) grows without bound; KL(Z^y || Gaussian) is K at every n."""
    import xarray as xr

    from rieszflow.studies.infinite_width.study import gauss_ratio_curve

    rng = np.random.default_rng(11)
    ns, T, K, c = np.array([16, 64, 256, 1024]), 40, 2.7e-4, 5.0
    th = (c / ns[:, None] ** 2) * (1 + 0.05 * rng.standard_normal((ns.size, T)))
    ga = K + th + 1e-6 * rng.standard_normal((ns.size, T))
    lim = np.broadcast_to(K + 1e-6 * rng.standard_normal(T), (ns.size, T))
    ds = xr.Dataset({"kl_rb": (("trial", "n"), th.T), "kl_rb_gauss": (("n", "trial"), ga),
                     "kl_rb_theo_gauss": (("n", "trial"), lim)}, coords={"n": ns})
    cur = gauss_ratio_curve(ds)
    assert cur["n"] == list(ns)
    exact = (K + c / ns ** 2) / (c / ns ** 2)
    for r, e, x in zip(cur["ratio"], cur["ratio_se"], exact):
        assert e > 0 and abs(r - x) < 5 * e                  # the delta-method SE covers the truth
    assert all(b > a for a, b in zip(cur["ratio"], cur["ratio"][1:]))
    assert abs(cur["kl_limit_gauss"] - K) < 5 * cur["kl_limit_gauss_se"]
    assert cur["kl_limit_gauss_se"] == pytest.approx(lim[0].std(ddof=1) / np.sqrt(T))
