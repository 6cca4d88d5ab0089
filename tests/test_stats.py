"""rieszflow.engine.stats against closed forms computed independently here."""
import math

import numpy as np
import pytest
from scipy.signal import lfilter
from scipy.stats import t as student_t

from rieszflow.engine import stats
from rieszflow.engine.stats import (POWER_LAW_METHODS, effective_sample_size, mcnemar, mcnemar_counts,
                                    paired_test, power_law_fit, split_rhat)


# ------------------------------------------------------------------ power laws
@pytest.mark.parametrize("method", POWER_LAW_METHODS)
def test_exact_power_law_is_recovered(method):
    x = np.array([1.0, 2.0, 3.0, 5.0, 8.0, 13.0, 21.0])
    f = power_law_fit(x, 3.5 * x ** -1.7, method=method)
    assert f.slope == pytest.approx(-1.7, abs=1e-12)            # sign: y ~ prefactor x**slope
    assert f.prefactor == pytest.approx(3.5, rel=1e-12)
    assert f.intercept == pytest.approx(math.log(3.5), abs=1e-12)
    assert 0.0 <= f.slope_se < 1e-12 and f.residual_std < 1e-12
    assert f.r2 == pytest.approx(1.0, abs=1e-12)
    assert f.n_points == 7


def _textbook_ols(x, y):
    """Simple regression from sums (math.fsum), without numpy's linear algebra."""
    lx, ly = [math.log(v) for v in x], [math.log(v) for v in y]
    n = len(lx)
    mx, my = math.fsum(lx) / n, math.fsum(ly) / n
    sxx = math.fsum((a - mx) ** 2 for a in lx)
    sxy = math.fsum((a - mx) * (b - my) for a, b in zip(lx, ly))
    slope = sxy / sxx
    icpt = my - slope * mx
    rss = math.fsum((b - icpt - slope * a) ** 2 for a, b in zip(lx, ly))
    tss = math.fsum((b - my) ** 2 for b in ly)
    s = math.sqrt(rss / (n - 2))
    return slope, s / math.sqrt(sxx), icpt, 1 - rss / tss, s


@pytest.mark.parametrize("method", POWER_LAW_METHODS)
def test_noisy_fit_matches_the_textbook_ols_formulas(method):
    rng = np.random.default_rng(7)
    x = np.repeat([10.0, 20.0, 50.0, 100.0, 200.0, 500.0], 3)        # replicates allowed
    y = 2.0 * x ** -0.5 * np.exp(0.3 * rng.standard_normal(x.size))
    slope, se, icpt, r2, s = _textbook_ols(x, y)
    f = power_law_fit(x, y, method=method)
    assert f.slope == pytest.approx(slope, rel=1e-10)
    assert f.slope_se == pytest.approx(se, rel=1e-10)
    assert f.intercept == pytest.approx(icpt, rel=1e-10)
    assert f.prefactor == pytest.approx(math.exp(icpt), rel=1e-10)
    assert f.r2 == pytest.approx(r2, rel=1e-10)
    assert f.residual_std == pytest.approx(s, rel=1e-10)
    assert f.n_points == x.size


def test_two_points_give_the_line_and_no_standard_error():
    f = power_law_fit([2.0, 8.0], [1.0, 4.0])
    assert f.slope == pytest.approx(1.0, abs=1e-14)
    assert math.isnan(f.slope_se) and math.isnan(f.residual_std)


@pytest.mark.parametrize("x, y, match", [
    ([1.0, 2.0, 3.0], [1.0, np.nan, 2.0], r"y must be finite and > 0.*y\[1\] = nan"),
    ([1.0, 0.0, 3.0], [1.0, 1.0, 2.0], r"x must be finite and > 0.*x\[1\] = 0\.0"),
    ([1.0, 2.0, 3.0], [1.0, -1.0, 2.0], r"y\[1\] = -1\.0"),
    ([1.0, 2.0, 3.0], [1.0, 2.0], "same length; got 3 and 2"),
    ([[1.0, 2.0]], [[1.0, 2.0]], r"x must be 1-D.*\(1, 2\)"),
    ([4.0, 4.0, 4.0], [1.0, 2.0, 3.0], "at least 2 distinct values.*got 1"),
])
def test_power_law_fit_rejects_bad_input(x, y, match):
    with pytest.raises(ValueError, match=match):
        power_law_fit(x, y)


def test_power_law_fit_rejects_an_unknown_method():
    with pytest.raises(ValueError, match="method must be one of.*'ols'"):
        power_law_fit([1.0, 2.0], [1.0, 2.0], method="ols")


def test_callers_are_views_of_power_law_fit():
    from rieszflow.theory.kgd.spectral import fit_loglog
    from rieszflow.engine.stats import fit_decay
    from rieszflow.studies.token_flow.analysis import fit_power_law

    rng = np.random.default_rng(3)
    n = np.array([16.0, 64.0, 256.0, 1024.0])
    w = n[:, None] ** -0.5 * np.exp(0.1 * rng.standard_normal((4, 3)))
    ref = power_law_fit(np.repeat(n, 3), w.ravel(), method="lstsq_normal")
    d = fit_decay(n, w)
    assert (d.slope, d.slope_se, d.intercept, d.n_points) == (ref.slope, ref.slope_se, ref.intercept, 12)
    tf = fit_power_law(np.repeat(n, 3), w.ravel())
    assert tf.alpha == -power_law_fit(np.repeat(n, 3), w.ravel(), method="linregress").slope   # rate = -slope
    f = power_law_fit(n, w[:, 0], method="polyfit")
    assert fit_loglog(n, w[:, 0]) == (f.slope, f.prefactor, f.r2)


# ------------------------------------------------------------------ McNemar
def test_mcnemar_matches_the_hand_computed_binomial_tail():
    a = np.array([True] * 3 + [False] * 9 + [True] * 20 + [False] * 5)
    b = np.array([False] * 3 + [True] * 9 + [True] * 20 + [False] * 5)
    r = mcnemar(a, b)
    # two-sided exact: 2 P(Bin(12, 1/2) <= 3) = 2 (1 + 12 + 66 + 220) / 4096
    assert (r.n, r.a_only, r.b_only) == (37, 3, 9)
    assert r.p_value == pytest.approx(2 * 299 / 4096, rel=1e-12)
    assert mcnemar(a, a).p_value == 1.0                          # no discordant pairs
    assert mcnemar_counts(5, 5, 10).p_value == pytest.approx(1.0, abs=1e-12)
    assert mcnemar_counts(0, 6, 6).p_value == pytest.approx(2 / 64, rel=1e-12)
    assert mcnemar(a, b)._asdict() == {"n": 37, "a_only": 3, "b_only": 9, "p_value": r.p_value}


@pytest.mark.parametrize("args, match", [
    ((-1, 2, 5), "a_only must be an integer >= 0; got -1"),
    ((1, 2.5, 5), "b_only must be an integer >= 0; got 2.5"),
    ((3, 4, 6), "n must be >= a_only \\+ b_only = 7; got 6"),
])
def test_mcnemar_counts_rejects_bad_counts(args, match):
    with pytest.raises(ValueError, match=match):
        mcnemar_counts(*args)


def test_mcnemar_rejects_unequal_lengths():
    with pytest.raises(ValueError, match="1-D of one length"):
        mcnemar([True, False], [True])


# ------------------------------------------------------------------ paired tests
def test_paired_t_against_the_t_distribution():
    rng = np.random.default_rng(11)
    a = rng.normal(size=15)
    b = a - 0.3 + 0.5 * rng.normal(size=15)
    d = a - b
    t = d.mean() / (d.std(ddof=1) / math.sqrt(d.size))
    r = paired_test(a, b, test="t")
    assert r.n == 15 and r.mean == pytest.approx(d.mean(), rel=1e-12)
    assert r.se == pytest.approx(d.std(ddof=1) / math.sqrt(15), rel=1e-12)
    assert r.statistic == pytest.approx(t, rel=1e-10)
    assert r.p_value == pytest.approx(2 * student_t.sf(abs(t), 14), rel=1e-9)


def test_paired_wilcoxon_exact_and_degenerate_cases():
    a = np.array([2.0, 3.0, 4.0, 5.0, 6.0, np.nan])
    b = np.array([1.0, 1.0, 1.0, 1.0, 1.0, 0.0])
    r = paired_test(a, b, test="wilcoxon")                      # d = 1..5, all positive, NaN pair dropped
    assert r.n == 5 and r.statistic == 0.0
    assert r.p_value == pytest.approx(2 / 2 ** 5, rel=1e-12)   # exact: only the all-positive sign pattern
    z = paired_test(b, b, test="wilcoxon")
    assert z.p_value == 1.0 and math.isnan(z.statistic)
    c = paired_test(b + 1.0, b, test="t")                       # constant differences: t undefined
    assert math.isnan(c.p_value) and c.mean == 1.0


@pytest.mark.parametrize("a, b, kw, match", [
    ([1.0, np.nan], [1.0, 2.0], {}, "at least 2 pairs.*got 1"),
    ([1.0, 2.0, 3.0], [1.0, 2.0], {}, r"same shape; got \(3,\) and \(2,\)"),
    ([1.0, 2.0], [1.0, 2.0], {"test": "sign"}, "test must be one of"),
])
def test_paired_test_rejects_bad_input(a, b, kw, match):
    with pytest.raises(ValueError, match=match):
        paired_test(a, b, **kw)


# ------------------------------------------------------------------ R-hat and ESS
def test_split_rhat_of_iid_chains_is_one_within_its_standard_error():
    C, n = 4, 2000
    x = np.random.default_rng(5).normal(size=(C, n))
    # R^2 ~ 1 - 1/n' + chi2_{2C-1} / ((2C-1) n'), n' = n/2: sd(R) ~ sqrt(2/(2C-1)) / (2 n')
    sd = math.sqrt(2 / (2 * C - 1)) / n
    assert abs(split_rhat(x) - 1.0) < 6 * sd


def test_split_rhat_of_chains_with_shifted_means_exceeds_1_1():
    C, n, delta = 4, 1000, 2.0
    x = np.random.default_rng(6).normal(size=(C, n)) + delta * np.array([0, 0, 1, 1])[:, None]
    # 8 half-chain means, 4 at 0 and 4 at delta: var (ddof 1) = delta^2 * 8/28 -> R^2 ~ 1 + that
    expected = math.sqrt(1 + delta ** 2 * 8 / 28)
    # sd(R) ~ 2 delta sd(mean) sqrt(var(mu) / 7) / (2 R) ~ 0.012 here; 5 sd
    r = split_rhat(x)
    assert r > 1.1 and abs(r - expected) < 0.06


def test_split_rhat_sees_a_trend_inside_each_chain():
    x = np.linspace(0, 10, 1000)[None, :].repeat(2, 0) + np.random.default_rng(0).normal(size=(2, 1000))
    assert split_rhat(x) > 1.5                                   # the halves disagree


def test_ess_of_ar1_chains_matches_the_closed_form():
    rho, C, n = 0.5, 4, 5000
    e = np.random.default_rng(9).normal(size=(C, n + 200))
    x = lfilter([1.0], [1.0, -rho], e, axis=1)[:, 200:]          # stationary AR(1)
    closed = C * n * (1 - rho) / (1 + rho)
    # relative sd of the estimate ~ sqrt(2 (2M+1) / (C n)) ~ 0.046 for a window M ~ 10 (Sokal);
    # 20 % is > 4 sd
    assert effective_sample_size(x) == pytest.approx(closed, rel=0.20)


def test_constant_traces_give_nan():
    x = np.ones((2, 10))
    assert math.isnan(split_rhat(x)) and math.isnan(effective_sample_size(x))


@pytest.mark.parametrize("fn", [split_rhat, effective_sample_size])
def test_diagnostics_reject_bad_chains(fn):
    for bad in (np.zeros(10), np.zeros((2, 1))):
        with pytest.raises(ValueError, match=r"chains has shape"):
            fn(bad)
    x = np.zeros((2, 10))
    x[1, 3] = np.nan
    with pytest.raises(ValueError, match=r"chains must be finite.*\(1, 3\)"):
        fn(x)


def test_public_api():
    assert set(stats.__all__) >= {"power_law_fit", "PowerLawFit", "mcnemar", "mcnemar_counts",
                                  "McNemarResult", "paired_test", "PairedTest", "split_rhat",
                                  "effective_sample_size"}
    for name in stats.__all__:
        assert getattr(stats, name).__doc__ or name.isupper()


# ----------------------------------------------------------------------------- linear_trend

def test_linear_trend_closed_forms():
    from rieszflow.engine.stats import linear_trend

    tr = linear_trend([0.0, 1.0, 2.0], [1.0, 3.0, 5.0], [1.0, 1.0, 1.0])
    assert tr.slope == pytest.approx(2.0) and tr.slope_se == pytest.approx(1 / np.sqrt(2))   # 1/sqrt(Sxx)
    assert tr.mean == pytest.approx(3.0) and tr.mean_se == pytest.approx(1 / np.sqrt(3))
    assert tr.chi2 == pytest.approx(8.0) and tr.dof == 2
    assert tr.p_constant == pytest.approx(np.exp(-4.0))                 # chi2_2 survival: exp(-x/2)
    flat = linear_trend([3, 4, 5], [-0.5, -0.5, -0.5], [0.1, 0.2, 0.05])
    assert flat.slope == pytest.approx(0.0, abs=1e-12) and flat.chi2 == pytest.approx(0.0, abs=1e-20)
    assert flat.p_constant == pytest.approx(1.0)
    # far from the origin, and with SEs 1e8 apart: the closed form keeps its accuracy
    far = linear_trend(1e6 + np.arange(3.0), [1.0, 3.0, 5.0], [1.0, 1.0, 1.0])
    assert far.slope == pytest.approx(2.0, rel=1e-12) and far.slope_se == pytest.approx(1 / np.sqrt(2), rel=1e-12)
    spread = linear_trend([0.0, 1.0, 2.0], [0.0, 1.0, 2.0], [1e-8, 1.0, 1.0])
    sxx = (0.0 + 1.0 + 4.0) - (0.0 + 1.0 + 2.0) ** 2 / (1e16 + 2.0)     # sum w x^2 - (sum w x)^2 / sum w
    assert spread.slope_se == pytest.approx(1 / np.sqrt(sxx), rel=1e-9)
    # weights: the precise point dominates the mean
    w = linear_trend([0, 1], [0.0, 1.0], [1.0, 0.01])
    assert w.mean == pytest.approx(1.0 / (1 + 1e-4), rel=1e-9)


def test_linear_trend_is_calibrated_under_the_constant_model():
    """Seeded: y = c + N(0, se) at 5 points; |z| > 1.96 in 5 % of 4000 draws (within 4 binomial SE),
    and the p-value of the constant model is uniform (its mean within 4 SE of 1/2)."""
    from rieszflow.engine.stats import linear_trend

    rng = np.random.default_rng(11)
    x = np.log10([1e3, 3e3, 1e4, 3e4, 1e5])
    se = np.array([0.04, 0.05, 0.07, 0.1, 0.15])
    draws = 4000
    z, p = np.empty(draws), np.empty(draws)
    for i in range(draws):
        tr = linear_trend(x, -0.4 + se * rng.standard_normal(5), se)
        z[i], p[i] = tr.z, tr.p_constant
    frac = np.mean(np.abs(z) > 1.96)
    assert abs(frac - 0.05) < 4 * np.sqrt(0.05 * 0.95 / draws)
    assert abs(p.mean() - 0.5) < 4 * np.sqrt(1 / 12 / draws)


def test_linear_trend_bad_input_names_the_parameter():
    from rieszflow.engine.stats import linear_trend

    with pytest.raises(ValueError, match="se must be > 0"):
        linear_trend([1, 2], [0, 1], [0.1, 0.0])
    with pytest.raises(ValueError, match="y has a value that is not finite"):
        linear_trend([1, 2], [0, np.nan], [0.1, 0.1])
    with pytest.raises(ValueError, match="2 distinct x"):
        linear_trend([1, 1], [0, 1], [0.1, 0.1])
    with pytest.raises(ValueError, match="one length"):
        linear_trend([1, 2, 3], [0, 1], [0.1, 0.1])


# ---------------------------------------------------------------- issue 36: the paired analysis
def test_sign_flip_test_is_the_exact_enumeration_of_sign_patterns():
    import itertools

    from rieszflow.engine import stats as S

    rng = np.random.default_rng(5)
    for n in (2, 3, 7):
        d = rng.normal(0.3, 1.0, n)
        null = np.array([np.mean(d * np.array(s)) for s in itertools.product((-1, 1), repeat=n)])
        want = np.mean(np.abs(null) >= abs(d.mean()) - 1e-15)
        assert S.sign_flip_test(d).p_value == pytest.approx(want, rel=1e-12)
    assert S.sign_flip_test([1.0, 2.0, 3.0]).p_value == pytest.approx(2 / 8)     # floor 2^(1-n)
    assert S.sign_flip_test([0.0, 0.0]).p_value == 1.0
    with pytest.raises(ValueError, match="2 to 20 finite values"):
        S.sign_flip_test([1.0])
    with pytest.raises(ValueError, match="non-finite"):
        S.sign_flip_test([1.0, np.nan])


def test_matched_pairs_test_odds_ratio_and_exact_interval():
    """OR = b/a (the matched-pairs Mantel-Haenszel estimate), its interval the Clopper-Pearson
    interval of b/(a+b) mapped by p/(1-p), the p-value McNemar's exact one; the numbers of the
    issue's softmaxfeat recomputation (327 / 388: OR 1.19 [1.02, 1.38], p 0.025)."""
    from scipy.stats import beta

    from rieszflow.engine import stats as S

    r = S.matched_pairs_test(327, 388, 10660)
    assert r.odds_ratio == pytest.approx(388 / 327)
    lo, hi = beta.ppf(0.025, 388, 327 + 1), beta.ppf(0.975, 388 + 1, 327)
    assert r.ci_low == pytest.approx(lo / (1 - lo), rel=1e-9) and r.ci_high == pytest.approx(hi / (1 - hi), rel=1e-9)
    assert r.p_value == pytest.approx(S.mcnemar_counts(327, 388, 10660).p_value)
    assert round(r.odds_ratio, 2) == 1.19 and round(r.ci_low, 2) == 1.02 and round(r.p_value, 3) == 0.025
    assert math.isnan(S.matched_pairs_test(0, 0, 10).odds_ratio)
    assert S.matched_pairs_test(0, 3, 10).odds_ratio == math.inf
    with pytest.raises(ValueError, match="n must be >= a_only \\+ b_only"):
        S.matched_pairs_test(3, 4, 5)


def test_power_holm_and_reference_comparison_closed_forms():
    from rieszflow.engine import stats as S

    mde = S.detectable_effect(0.0027, 10)
    assert S.paired_t_power(mde, 0.0027, 10) == pytest.approx(0.8, abs=1e-6)      # inverse pair
    assert S.paired_t_power(-mde, 0.0027, 10) == pytest.approx(0.8, abs=1e-6)
    assert S.paired_t_power(0.0, 1.0, 10) == pytest.approx(0.05, abs=1e-9)
    assert 0.999 < S.paired_t_power(5.0, 1.0, 10) <= 1.0          # far tail: finite, not NaN
    np.testing.assert_allclose(S.holm([0.01, 0.04, 0.03]), [0.03, 0.06, 0.06])
    with pytest.raises(ValueError, match="each in \\[0, 1\\]"):
        S.holm([1.2])
    d = np.array([0.01, 0.03, 0.02, 0.00])
    c = S.compare_with_reference(d, 0.05, 3)
    sd = d.std(ddof=1)
    assert c.difference == pytest.approx(d.mean() - 0.05)
    assert c.se == pytest.approx(sd * math.sqrt(1 / 4 + 1 / 3))
    from scipy.stats import t

    assert c.high - c.difference == pytest.approx(t.ppf(0.975, 3) * c.se)
    with pytest.raises(ValueError, match="n_ref must be >= 1"):
        S.compare_with_reference(d, 0.05, 0)
