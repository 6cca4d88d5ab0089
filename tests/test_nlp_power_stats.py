"""Pooled tests of the NLP power study (engine/stats.py): closed-form and independent oracles."""
import math

import numpy as np
import pytest
from scipy.stats import nct, norm

from rieszflow.engine import stats


def test_cmh_two_equal_strata_by_hand():
    # each stratum [[3, 1], [1, 3]]: N = 8, E[a] = 4 * 4 / 8 = 2, Var[a] = 4^4 / (8^2 * 7) = 4 / 7;
    # sum (a - E) = 2, sum Var = 8 / 7: CMH = 4 / (8/7) = 3.5; corrected (2 - 0.5)^2 / (8/7) = 1.96875;
    # MH odds ratio = sum(a d / N) / sum(b c / N) = (2 * 9/8) / (2 * 1/8) = 9
    t = np.array([[[3, 1], [1, 3]], [[3, 1], [1, 3]]])
    r = stats.cmh_test(t)
    assert r.statistic == pytest.approx(3.5, rel=1e-12)
    assert r.p_value == pytest.approx(math.erfc(math.sqrt(3.5 / 2)), rel=1e-10)   # chi2(1) tail
    assert r.odds_ratio == pytest.approx(9.0, rel=1e-12)
    assert r.ci_low < 9.0 < r.ci_high and r.n_strata == 2
    assert stats.cmh_test(t, correction=True).statistic == pytest.approx(1.96875, rel=1e-12)


def test_cmh_one_stratum_is_pearson_times_n_minus_1_over_n():
    # Pearson chi2 of [[3,1],[1,3]] is 4 * 1 / 2 = 2; CMH = (N - 1) / N * Pearson = 7/8 * 2 = 1.75
    assert stats.cmh_test([[[3, 1], [1, 3]]]).statistic == pytest.approx(1.75, rel=1e-12)


def test_cmh_symmetric_strata_cancel_and_degenerate_is_nan():
    r = stats.cmh_test([[[3, 1], [1, 3]], [[1, 3], [3, 1]]])   # a - E = +1 and -1
    assert r.statistic == pytest.approx(0.0, abs=1e-12) and r.p_value == pytest.approx(1.0)
    r = stats.cmh_test([[[5, 0], [5, 0]]])                       # a column margin of 0: no variance
    assert math.isnan(r.statistic) and r.p_value == 1.0


@pytest.mark.parametrize("bad", [np.zeros((2, 2)), [[[1, -1], [1, 1]]], [[[1.5, 1], [1, 1]]]])
def test_cmh_rejects_bad_tables(bad):
    with pytest.raises(ValueError, match="tables"):
        stats.cmh_test(bad)


def test_mean_interval_closed_form_one_degree_of_freedom():
    # t_{0.975, 1} is the Cauchy quantile tan(0.475 pi); mean 0, sd sqrt(2), n = 2 -> half-width tan(0.475 pi)
    r = stats.mean_interval([1.0, -1.0])
    assert r.mean == 0 and r.sd == pytest.approx(math.sqrt(2))
    assert r.high == pytest.approx(math.tan(0.475 * math.pi), rel=1e-10) and r.low == pytest.approx(-r.high)
    with pytest.raises(ValueError, match="d needs"):
        stats.mean_interval([1.0])
    with pytest.raises(ValueError, match="level"):
        stats.mean_interval([1.0, 2.0], level=1.0)


def test_mean_interval_covers_at_its_level():
    rng = np.random.default_rng(3)
    reps = 2000
    hits = sum(r.low <= 0.2 <= r.high for r in
               (stats.mean_interval(rng.normal(0.2, 1.0, 10)) for _ in range(reps)))
    se = math.sqrt(0.95 * 0.05 / reps)
    assert abs(hits / reps - 0.95) < 4 * se


def test_detectable_effect_solves_the_noncentral_t_power():
    sd, n = 0.01, 10
    delta = stats.detectable_effect(sd, n)
    from scipy.stats import t as student_t

    c = student_t.ppf(0.975, n - 1)
    ncp = math.sqrt(n) * delta / sd
    power = nct.sf(c, n - 1, ncp) + nct.cdf(-c, n - 1, ncp)
    assert power == pytest.approx(0.8, abs=1e-4)
    # large n: (z_0.975 + z_0.8) sd / sqrt(n) (Cohen 1988)
    big = stats.detectable_effect(1.0, 10_000)
    assert big == pytest.approx((norm.ppf(0.975) + norm.ppf(0.8)) / 100, rel=1e-3)
    with pytest.raises(ValueError, match="sd"):
        stats.detectable_effect(0.0, 10)
    with pytest.raises(ValueError, match="n must"):
        stats.detectable_effect(1.0, 1)


def test_mcnemar_detectable_effect_plugs_back_into_connor():
    psi, n = 0.05, 10 * 1066
    d = stats.mcnemar_detectable_effect(psi, n)
    za, zb = norm.ppf(0.975), norm.ppf(0.8)
    assert (za * math.sqrt(psi) + zb * math.sqrt(psi - d * d)) ** 2 / d ** 2 == pytest.approx(n, rel=1e-8)
    assert 0 < d < psi
    assert stats.mcnemar_detectable_effect(0.01, 3) == 0.01        # even delta = psi needs more than 3
    with pytest.raises(ValueError, match="discordance"):
        stats.mcnemar_detectable_effect(0.0, 10)
