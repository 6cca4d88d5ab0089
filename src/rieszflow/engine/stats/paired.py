"""Paired comparisons: McNemar, paired t / Wilcoxon / sign-flip tests, matched-pairs Mantel-Haenszel,
intervals, detectable effects, power, Holm's adjustment, and a measured mean against a published one."""
from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import numpy as np
from scipy.stats import binomtest, linregress, ttest_rel, wilcoxon

from rieszflow.engine.stats._common import _count  # noqa: F401

#: Tests of :func:`paired_test`.
PAIRED_TESTS = ("t", "wilcoxon")


# --------------------------------------------------------------------------------------------
# McNemar
# --------------------------------------------------------------------------------------------
class McNemarResult(NamedTuple):
    """McNemar's exact test of two classifiers A and B on the same examples.

    Parameters
    ----------
    n : int
        Number of paired examples.
    a_only : int
        Examples A got right and B wrong.
    b_only : int
        Examples B got right and A wrong.
    p_value : float
        Two-sided exact binomial test of ``a_only`` successes in ``a_only + b_only`` trials
        with probability 1/2 (:func:`scipy.stats.binomtest`); 1.0 when there are no
        discordant pairs.
    """

    n: int
    a_only: int
    b_only: int
    p_value: float


def mcnemar_counts(a_only, b_only, n) -> McNemarResult:
    """McNemar's exact test from the discordant counts.

    Pooling several tables (e.g. seeds on the same examples) is summing their counts and
    calling this function.

    Parameters
    ----------
    a_only : int
        Pairs where only A is right, ``>= 0``.
    b_only : int
        Pairs where only B is right, ``>= 0``.
    n : int
        Number of pairs, ``>= a_only + b_only``.

    Returns
    -------
    McNemarResult

    Raises
    ------
    ValueError
        If a count is not a non-negative integer or ``n < a_only + b_only``.

    References
    ----------
    McNemar, Psychometrika 12 (1947) 153-157 (the exact form is the binomial sign test of the
    discordant pairs); Dietterich, Neural Computation 10 (1998) 1895-1923.
    """
    a_only, b_only, n = _count(a_only, "a_only"), _count(b_only, "b_only"), _count(n, "n")
    if n < a_only + b_only:
        raise ValueError(f"n must be >= a_only + b_only = {a_only + b_only}; got {n}")
    p = 1.0 if a_only + b_only == 0 else float(binomtest(a_only, a_only + b_only, 0.5).pvalue)
    return McNemarResult(n=n, a_only=a_only, b_only=b_only, p_value=p)


def mcnemar(correct_a, correct_b) -> McNemarResult:
    """McNemar's exact test of two classifiers on the same examples.

    Parameters
    ----------
    correct_a : array_like of bool, shape (n,)
        Whether classifier A got each example right.
    correct_b : array_like of bool, shape (n,)
        The same for classifier B, on the same examples in the same order.

    Returns
    -------
    McNemarResult
        See :func:`mcnemar_counts`.

    Raises
    ------
    ValueError
        If the arrays are not 1-D of one length.

    References
    ----------
    McNemar, Psychometrika 12 (1947) 153-157; Dietterich, Neural Computation 10 (1998)
    1895-1923.
    """
    a, b = np.asarray(correct_a, dtype=bool), np.asarray(correct_b, dtype=bool)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"correct_a and correct_b must be 1-D of one length, got {a.shape}, {b.shape}")
    return mcnemar_counts(int(np.sum(a & ~b)), int(np.sum(~a & b)), int(a.size))


# --------------------------------------------------------------------------------------------
# paired tests
# --------------------------------------------------------------------------------------------
class PairedTest(NamedTuple):
    """A paired comparison of ``a`` against ``b`` (differences ``d = a - b``).

    Parameters
    ----------
    mean : float
        Mean of ``d``.
    se : float
        Its standard error, ``std(d, ddof=1) / sqrt(n)``.
    n : int
        Number of pairs used (pairs with a non-finite entry are dropped).
    statistic : float
        The test statistic (t, or the Wilcoxon signed-rank statistic); NaN when the test is
        undefined (see :func:`paired_test`).
    p_value : float
        Two-sided p-value.
    """

    mean: float
    se: float
    n: int
    statistic: float
    p_value: float


def paired_test(a, b, *, test: str = "t") -> PairedTest:
    """Two-sided paired test of ``a`` against ``b``: t-test or Wilcoxon signed-rank test.

    Parameters
    ----------
    a : array_like, shape (n,) or any shape equal to ``b``'s
        First measurements (flattened, converted to float64).
    b : array_like, same shape as ``a``
        Matched second measurements.
    test : {"t", "wilcoxon"}, default "t"
        ``"t"``: :func:`scipy.stats.ttest_rel` (Student 1908); when the differences are all
        equal (zero spread) t is undefined and ``statistic = p_value = NaN``.
        ``"wilcoxon"``: :func:`scipy.stats.wilcoxon` of the differences with scipy's defaults
        (zero differences dropped, exact distribution for small samples); when every
        difference is zero no pair favours either side and ``p_value = 1.0``,
        ``statistic = NaN``.

    Returns
    -------
    PairedTest

    Raises
    ------
    ValueError
        If the shapes differ, fewer than 2 pairs with both entries finite remain, or ``test``
        is unknown.

    References
    ----------
    Student, Biometrika 6 (1908) 1-25; Wilcoxon, Biometrics Bulletin 1 (1945) 80-83.
    """
    if test not in PAIRED_TESTS:
        raise ValueError(f"test must be one of {PAIRED_TESTS}; got {test!r}")
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape:
        raise ValueError(f"a and b must have the same shape; got {a.shape} and {b.shape}")
    a, b = a.ravel(), b.ravel()
    ok = np.isfinite(a) & np.isfinite(b)
    a, b = a[ok], b[ok]
    d = a - b
    if d.size < 2:
        raise ValueError(f"a and b need at least 2 pairs with both entries finite; got {d.size}")
    mean, se = float(d.mean()), float(d.std(ddof=1) / np.sqrt(d.size))
    if test == "t":
        if np.ptp(d) > 0:
            r = ttest_rel(a, b)
            stat, p = float(r.statistic), float(r.pvalue)
        else:
            stat = p = math.nan
    elif np.any(d != 0):
        r = wilcoxon(d)
        stat, p = float(r.statistic), float(r.pvalue)
    else:
        stat, p = math.nan, 1.0
    return PairedTest(mean=mean, se=se, n=int(d.size), statistic=stat, p_value=p)


# --------------------------------------------------------------------------------------------
# pooled tests over matched pairs (seeds): CMH, interval of the mean difference, detectable effect
# --------------------------------------------------------------------------------------------
class CMHResult(NamedTuple):
    """Cochran-Mantel-Haenszel test of a common odds ratio of 1 over K stratified 2x2 tables.

    Parameters
    ----------
    statistic : float
        The CMH chi-square statistic (1 degree of freedom); NaN when every stratum has zero
        variance (a margin of 0 in each).
    p_value : float
        Its upper-tail chi-square(1) probability; 1.0 when the statistic is NaN.
    odds_ratio : float
        The Mantel-Haenszel pooled odds ratio ``sum_k a_k d_k / N_k / sum_k b_k c_k / N_k``.
    ci_low, ci_high : float
        Its 95 % interval (Robins-Breslow-Greenland variance of the log odds ratio).
    n_strata : int
        K.
    """

    statistic: float
    p_value: float
    odds_ratio: float
    ci_low: float
    ci_high: float
    n_strata: int


def cmh_test(tables, *, correction: bool = False) -> CMHResult:
    """Cochran-Mantel-Haenszel test over stratified 2x2 tables (statsmodels' ``StratifiedTable``).

    With ``a_k`` the top-left cell of stratum ``k``, row sums ``n_1k, n_2k``, column sums
    ``m_1k, m_2k`` and total ``N_k``,

    ``CMH = (|sum_k (a_k - n_1k m_1k / N_k)| - c)^2 / sum_k n_1k n_2k m_1k m_2k / (N_k^2 (N_k - 1))``

    with ``c = 0.5`` under ``correction`` else 0, referred to chi-square with one degree of
    freedom (Mantel and Haenszel 1959, eq. for ``chi^2``; Agresti 2013, eq. 6.9).

    Parameters
    ----------
    tables : array_like of int, shape (K, 2, 2)
        One 2x2 table per stratum (e.g. per seed: rows = classifier A, B; columns = right, wrong).
    correction : bool, default False
        Continuity correction of 0.5.

    Returns
    -------
    CMHResult

    Raises
    ------
    ValueError
        If ``tables`` is not of shape (K, 2, 2) with K >= 1, or holds negative or non-integer
        counts.

    References
    ----------
    Mantel and Haenszel, J. Natl. Cancer Inst. 22 (1959) 719-748; Robins, Breslow and Greenland,
    Biometrics 42 (1986) 311-323; Agresti, Categorical Data Analysis, 3rd ed. (2013), sec. 6.4.
    """
    from statsmodels.stats.contingency_tables import StratifiedTable

    t = np.asarray(tables, dtype=float)
    if t.ndim != 3 or t.shape[1:] != (2, 2) or t.shape[0] < 1:
        raise ValueError(f"tables must have shape (K, 2, 2) with K >= 1; got {t.shape}")
    if not np.all(np.isfinite(t)) or np.any(t < 0) or np.any(t != np.round(t)):
        raise ValueError("tables must hold non-negative integer counts")
    n1, n2 = t[:, 0].sum(axis=1), t[:, 1].sum(axis=1)
    m1, m2 = t[:, :, 0].sum(axis=1), t[:, :, 1].sum(axis=1)
    N = t.sum(axis=(1, 2))
    var = np.sum(np.where(N > 1, n1 * n2 * m1 * m2 / np.maximum(N ** 2 * (N - 1), 1), 0.0))
    st = StratifiedTable(np.moveaxis(t, 0, -1))
    if var > 0:
        r = st.test_null_odds(correction=correction)
        stat, p = float(r.statistic), float(r.pvalue)
    else:
        stat, p = math.nan, 1.0
    with np.errstate(divide="ignore", invalid="ignore"):
        orr = float(st.oddsratio_pooled)
        lo, hi = (float(v) for v in st.oddsratio_pooled_confint())
    return CMHResult(statistic=stat, p_value=p, odds_ratio=orr, ci_low=lo, ci_high=hi,
                     n_strata=int(t.shape[0]))


class MeanInterval(NamedTuple):
    """Mean of matched differences with a two-sided t interval.

    Parameters
    ----------
    mean : float
        Mean of the differences.
    sd : float
        Their standard deviation (``ddof=1``).
    n : int
        Number of differences.
    low, high : float
        ``mean -+ t_{1-(1-level)/2, n-1} sd / sqrt(n)``.
    level : float
        Coverage of the interval.
    """

    mean: float
    sd: float
    n: int
    low: float
    high: float
    level: float


def mean_interval(d, *, level: float = 0.95) -> MeanInterval:
    """Student t interval of the mean of independent differences (e.g. one per seed).

    Parameters
    ----------
    d : array_like, shape (n,)
        Differences, ``n >= 2`` finite values (non-finite entries are an error, not dropped).
    level : float, default 0.95
        Coverage, in (0, 1).

    Returns
    -------
    MeanInterval

    Raises
    ------
    ValueError
        If ``d`` has fewer than 2 values, a non-finite value, or ``level`` is outside (0, 1).

    References
    ----------
    Student, Biometrika 6 (1908) 1-25.
    """
    from scipy.stats import t as student_t

    d = np.asarray(d, dtype=float).ravel()
    if d.size < 2 or not np.all(np.isfinite(d)):
        raise ValueError(f"d needs at least 2 finite values; got {d.size} values"
                         + ("" if np.all(np.isfinite(d)) else " with non-finite entries"))
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1); got {level!r}")
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    half = float(student_t.ppf(0.5 + level / 2, d.size - 1)) * sd / math.sqrt(d.size)
    return MeanInterval(mean=mean, sd=sd, n=int(d.size), low=mean - half, high=mean + half, level=level)


def _sd_and_n(sd, n) -> int:
    """Check a seed-level SD (finite, > 0) and a number of differences (an integer >= 2); return n."""
    if not (isinstance(sd, (int, float, np.floating)) and math.isfinite(sd) and sd > 0):
        raise ValueError(f"sd must be a finite number > 0; got {sd!r}")
    n = _count(n, "n")
    if n < 2:
        raise ValueError(f"n must be >= 2; got {n}")
    return n


def detectable_effect(sd, n, *, alpha: float = 0.05, power: float = 0.8) -> float:
    """Smallest mean difference a two-sided one-sample (paired) t-test detects with ``power``.

    Solves ``P(|T| > t_{1-alpha/2, n-1}) = power`` for ``delta`` where ``T`` is noncentral t
    with ``n - 1`` degrees of freedom and noncentrality ``sqrt(n) delta / sd``
    (statsmodels' ``TTestPower``); for large ``n`` this tends to
    ``(z_{1-alpha/2} + z_{power}) sd / sqrt(n)`` (Cohen 1988, ch. 2).

    Parameters
    ----------
    sd : float
        Standard deviation of one difference, ``> 0`` (e.g. the observed seed-level SD).
    n : int
        Number of differences, ``>= 2``.
    alpha : float, default 0.05
        Two-sided level, in (0, 1).
    power : float, default 0.8
        In (alpha, 1).

    Returns
    -------
    float
        The detectable difference, in the units of ``sd``.

    Raises
    ------
    ValueError
        If an argument is outside its range.

    References
    ----------
    Cohen, Statistical Power Analysis for the Behavioral Sciences, 2nd ed. (1988), ch. 2.
    """
    from statsmodels.stats.power import TTestPower

    n = _sd_and_n(sd, n)
    if not 0 < alpha < 1 or not alpha < power < 1:
        raise ValueError(f"need 0 < alpha < power < 1; got alpha={alpha!r}, power={power!r}")
    es = TTestPower().solve_power(effect_size=None, nobs=n, alpha=alpha, power=power,
                                  alternative="two-sided")
    return float(np.asarray(es).item()) * float(sd)


def mcnemar_detectable_effect(discordance, n, *, alpha: float = 0.05, power: float = 0.8) -> float:
    """Smallest accuracy difference McNemar's test detects with ``power``, given the discordance rate.

    Connor's sample size ``n = (z_{1-alpha/2} sqrt(psi) + z_{power} sqrt(psi - delta^2))^2 / delta^2``
    (psi: probability that the two classifiers disagree on an example; delta: the difference of
    their accuracies) solved for ``delta`` at the given ``n`` (Brent's method).

    Parameters
    ----------
    discordance : float
        psi, in (0, 1].
    n : int
        Paired examples, ``>= 1``.
    alpha : float, default 0.05
    power : float, default 0.8

    Returns
    -------
    float
        delta, in (0, psi]; ``psi`` when even ``delta = psi`` needs more than ``n`` examples.

    Raises
    ------
    ValueError
        If an argument is outside its range.

    References
    ----------
    Connor, "Sample size for testing differences in proportions for the paired-sample design",
    Biometrics 43 (1987) 207-211, eq. (3).
    """
    from scipy.optimize import brentq
    from scipy.stats import norm

    n = _count(n, "n")
    if not (isinstance(discordance, (int, float, np.floating)) and 0 < discordance <= 1) or n < 1:
        raise ValueError(f"need 0 < discordance <= 1 and n >= 1; got discordance={discordance!r}, n={n}")
    if not 0 < alpha < 1 or not alpha < power < 1:
        raise ValueError(f"need 0 < alpha < power < 1; got alpha={alpha!r}, power={power!r}")
    za, zb, psi = float(norm.ppf(1 - alpha / 2)), float(norm.ppf(power)), float(discordance)

    def needed(delta):
        return (za * math.sqrt(psi) + zb * math.sqrt(max(psi - delta ** 2, 0.0))) ** 2 / delta ** 2 - n

    if needed(psi) > 0:
        return psi
    return float(brentq(needed, 1e-12, psi, xtol=1e-12))


def sign_flip_test(d) -> PairedTest:
    """Exact two-sided sign-flip permutation test that paired differences are symmetric about 0.

    Under the null hypothesis each difference is as likely to have either sign (the two arms of
    a matched pair are exchangeable); the statistic is the mean difference and its null
    distribution is that of every one of the ``2**n`` sign patterns
    (:func:`scipy.stats.permutation_test` with ``permutation_type="samples"`` on one sample,
    ``n_resamples=inf``: exact). With ``n`` pairs the smallest two-sided p is ``2**(1 - n)``.

    Parameters
    ----------
    d : array_like, shape (n,)
        Paired differences (e.g. one accuracy change per seed), ``2 <= n <= 20`` finite values
        (the exact distribution has ``2**n`` members).

    Returns
    -------
    PairedTest
        ``mean``, ``se`` (``std(d, ddof=1) / sqrt(n)``), ``n``, ``statistic`` (the mean) and the
        exact two-sided ``p_value`` (1.0 when every difference is 0).

    Raises
    ------
    ValueError
        If ``d`` has fewer than 2 or more than 20 values, or a non-finite one.

    References
    ----------
    Fisher, The Design of Experiments (1935), section 21; Good, Permutation, Parametric and
    Bootstrap Tests of Hypotheses, 3rd ed. (2005), section 3.1.
    """
    from scipy.stats import permutation_test

    d = np.asarray(d, dtype=float).ravel()
    if not 2 <= d.size <= 20 or not np.all(np.isfinite(d)):
        raise ValueError(f"d needs 2 to 20 finite values for the exact sign-flip test; got {d.size} values"
                         + ("" if np.all(np.isfinite(d)) else " with non-finite entries"))
    mean, se = float(d.mean()), float(d.std(ddof=1) / math.sqrt(d.size))
    if not np.any(d != 0):
        return PairedTest(mean=mean, se=se, n=int(d.size), statistic=mean, p_value=1.0)
    r = permutation_test((d,), np.mean, permutation_type="samples", n_resamples=np.inf,
                         alternative="two-sided")
    return PairedTest(mean=mean, se=se, n=int(d.size), statistic=float(r.statistic),
                      p_value=float(min(1.0, r.pvalue)))


class MatchedPairsResult(NamedTuple):
    """The Mantel-Haenszel test for matched pairs, pooled over strata (e.g. seeds).

    Parameters
    ----------
    a_only, b_only : int
        Discordant pairs summed over strata: only A right, only B right.
    n : int
        Pairs in all.
    p_value : float
        Exact two-sided p of the pooled McNemar test (the conditional binomial test of
        ``b_only`` out of ``a_only + b_only`` at 1/2), which is the Mantel-Haenszel test when
        every matched pair is its own stratum.
    odds_ratio : float
        The Mantel-Haenszel odds ratio for matched pairs, ``b_only / a_only`` (> 1 favours B;
        inf when ``a_only = 0``, NaN without discordant pairs).
    ci_low, ci_high : float
        Its exact conditional interval: the Clopper-Pearson interval of
        ``p = b_only / (a_only + b_only)`` mapped through ``p / (1 - p)``.
    level : float
        Coverage of the interval.
    """

    a_only: int
    b_only: int
    n: int
    p_value: float
    odds_ratio: float
    ci_low: float
    ci_high: float
    level: float


def matched_pairs_test(a_only, b_only, n, *, level: float = 0.95) -> MatchedPairsResult:
    """Mantel-Haenszel test and odds ratio for matched pairs (two classifiers on the same examples).

    When two arms predict the same examples, each example is a matched pair; stratifying the
    Mantel-Haenszel test by pair gives McNemar's statistic on the summed discordant counts and
    the odds ratio ``b_only / a_only`` (Breslow and Day 1980, section 5.2). Stratifying further
    by seed changes nothing: the pairs of every seed are strata already. The Cochran-Mantel-
    Haenszel test on ``arm x right/wrong`` tables (:func:`cmh_test`) instead treats the two arms
    as independent samples and is the wrong test here.

    Parameters
    ----------
    a_only, b_only : int
        Summed discordant counts (only A right, only B right), ``>= 0``.
    n : int
        Pairs in all, ``>= a_only + b_only``.
    level : float, default 0.95
        Coverage of the odds ratio's interval, in (0, 1).

    Returns
    -------
    MatchedPairsResult

    Raises
    ------
    ValueError
        If a count is not a non-negative integer, ``n < a_only + b_only``, or ``level`` is not in
        (0, 1).

    References
    ----------
    Mantel and Haenszel, J. Natl. Cancer Inst. 22 (1959) 719-748; McNemar, Psychometrika 12
    (1947) 153-157; Breslow and Day, Statistical Methods in Cancer Research I (1980), 5.2.
    """
    a_only, b_only, n = _count(a_only, "a_only"), _count(b_only, "b_only"), _count(n, "n")
    if n < a_only + b_only:
        raise ValueError(f"n must be >= a_only + b_only = {a_only + b_only}; got {n}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1); got {level!r}")
    m = a_only + b_only
    if m == 0:
        return MatchedPairsResult(a_only, b_only, n, 1.0, math.nan, math.nan, math.nan, level)
    r = binomtest(b_only, m, 0.5)
    ci = r.proportion_ci(confidence_level=level, method="exact")

    def odds(p):
        return math.inf if p >= 1 else p / (1 - p)

    return MatchedPairsResult(a_only, b_only, n, float(r.pvalue),
                              math.inf if a_only == 0 else b_only / a_only,
                              odds(float(ci.low)), odds(float(ci.high)), level)


def paired_t_power(effect, sd, n, *, alpha: float = 0.05) -> float:
    """Power of the two-sided paired (one-sample) t-test to detect a mean difference ``effect``.

    Noncentral t with ``n - 1`` degrees of freedom and noncentrality ``sqrt(n) |effect| / sd``
    (statsmodels' ``TTestPower``; Cohen 1988, ch. 2). The inverse of :func:`detectable_effect`.

    Parameters
    ----------
    effect : float
        The true mean difference (e.g. a paper's claimed gain), finite.
    sd : float
        Standard deviation of one difference, ``> 0``.
    n : int
        Number of differences, ``>= 2``.
    alpha : float, default 0.05
        Two-sided level, in (0, 1).

    Returns
    -------
    float
        The power, in [alpha, 1).

    Raises
    ------
    ValueError
        If an argument is outside its range.

    References
    ----------
    Cohen, Statistical Power Analysis for the Behavioral Sciences, 2nd ed. (1988), ch. 2.
    """
    from statsmodels.stats.power import TTestPower

    if not (isinstance(effect, (int, float, np.floating)) and math.isfinite(effect)):
        raise ValueError(f"effect must be a finite number; got {effect!r}")
    n = _sd_and_n(sd, n)
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1); got {alpha!r}")
    from scipy.stats import nct
    from scipy.stats import t as student_t

    es = abs(float(effect)) / float(sd)
    p = float(TTestPower().power(effect_size=es, nobs=n, alpha=alpha, alternative="two-sided"))
    if not math.isfinite(p):       # statsmodels' series fails far in the tail: scipy's nct directly,
        # the lower tail P(T_nc < -c) as the upper tail P(T_-nc > c) (its cdf underflows to NaN)
        crit, nc = float(student_t.ppf(1 - alpha / 2, n - 1)), math.sqrt(n) * es
        p = float(nct.sf(crit, n - 1, nc) + nct.sf(crit, n - 1, -nc))
    return p


def holm(p_values) -> np.ndarray:
    """Holm's step-down adjustment of a family of p-values (statsmodels' ``multipletests``).

    Parameters
    ----------
    p_values : array_like, shape (k,)
        The family's p-values, each in [0, 1], ``k >= 1``.

    Returns
    -------
    numpy.ndarray, shape (k,), float64
        Adjusted p-values, in the order given: reject hypothesis i at level alpha when its
        adjusted p is <= alpha (family-wise error rate alpha under any dependence).

    Raises
    ------
    ValueError
        If the family is empty or a p-value is not in [0, 1].

    References
    ----------
    Holm, "A simple sequentially rejective multiple test procedure", Scand. J. Statist. 6 (1979)
    65-70.
    """
    from statsmodels.stats.multitest import multipletests

    p = np.asarray(p_values, dtype=float).ravel()
    if p.size < 1 or not np.all((p >= 0) & (p <= 1)):
        raise ValueError(f"p_values needs at least one value, each in [0, 1]; got {p.tolist()!r}")
    return np.asarray(multipletests(p, method="holm")[1], dtype=float)


class ReferenceComparison(NamedTuple):
    """A measured mean difference against a published one, each with its own error.

    Parameters
    ----------
    difference : float
        measured mean minus the reference.
    se : float
        ``sd * sqrt(1/n + 1/n_ref)``: the measured mean's SE and the reference's, the latter
        from the measured seed-level SD (a paper that reports no spread).
    low, high : float
        The t interval of the difference (``n - 1`` degrees of freedom: the only SD estimate
        comes from the ``n`` measured values).
    level : float
    n, n_ref : int
    """

    difference: float
    se: float
    low: float
    high: float
    level: float
    n: int
    n_ref: int


def compare_with_reference(d, reference, n_ref, *, level: float = 0.95) -> ReferenceComparison:
    """Interval of (measured mean - reference) where the reference is itself a mean of ``n_ref`` runs.

    A paper's number is an estimate with its own error: a mean over ``n_ref`` seeds has standard
    error ``sd / sqrt(n_ref)``. Without the paper's spread this takes the measured seed-level
    ``sd`` for it, so the difference has SE ``sd * sqrt(1/n + 1/n_ref)``; the interval uses
    Student's t with ``n - 1`` degrees of freedom.

    Parameters
    ----------
    d : array_like, shape (n,)
        Measured differences (one per seed), ``n >= 2`` finite values.
    reference : float
        The published mean difference.
    n_ref : int
        The runs behind it, ``>= 1`` (paper 000: 3 seeds).
    level : float, default 0.95

    Returns
    -------
    ReferenceComparison

    Raises
    ------
    ValueError
        If ``d`` has fewer than 2 finite values, ``reference`` is not finite, ``n_ref < 1`` or
        ``level`` is not in (0, 1).
    """
    from scipy.stats import t as student_t

    mi = mean_interval(d, level=level)
    if not (isinstance(reference, (int, float, np.floating)) and math.isfinite(reference)):
        raise ValueError(f"reference must be a finite number; got {reference!r}")
    n_ref = _count(n_ref, "n_ref")
    if n_ref < 1:
        raise ValueError(f"n_ref must be >= 1; got {n_ref}")
    diff = mi.mean - float(reference)
    se = mi.sd * math.sqrt(1 / mi.n + 1 / n_ref)
    half = float(student_t.ppf(0.5 + level / 2, mi.n - 1)) * se
    return ReferenceComparison(diff, se, diff - half, diff + half, level, mi.n, n_ref)


def wilcoxon_floor(nonzero: int) -> float:
    """Smallest two-sided p of the exact Wilcoxon signed-rank test with ``nonzero`` non-zero pairs.

    What a paired design of k non-zero pairs can reach at best.

    Every sign pattern of the k differences is equally likely under the null; the most extreme
    (all of one sign) has probability ``2^-k`` on each side, so ``p >= min(1, 2 / 2^k)``.

    Parameters
    ----------
    nonzero : int
        Pairs with a non-zero difference, ``>= 0``.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        If ``nonzero`` is negative.

    References
    ----------
    Wilcoxon, Biometrics Bulletin 1 (1945) 80-83.
    """
    if nonzero < 0:
        raise ValueError(f"nonzero must be >= 0; got {nonzero}")
    return min(1.0, 2.0 / 2.0 ** nonzero)
