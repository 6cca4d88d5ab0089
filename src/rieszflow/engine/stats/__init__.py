"""Statistics used by the analyses: power-law fits, paired tests, MCMC convergence diagnostics.

A package of three modules along the seams (:mod:`~rieszflow.engine.stats.fits`,
:mod:`~rieszflow.engine.stats.paired`, :mod:`~rieszflow.engine.stats.mcmc`); every name is
importable from ``rieszflow.engine.stats`` itself.

One home for each estimator or test the studies report, so that every table computes a given
quantity the same way:

* :func:`power_law_fit`: ordinary least squares of ``log y`` on ``log x``, giving
  ``y ~ prefactor * x**slope`` with the slope's standard error and ``R^2``.
* :func:`mcnemar`, :func:`mcnemar_counts`: McNemar's exact test of two classifiers on the same
  examples (the two-sided binomial test of the discordant pairs).
* :func:`paired_test`: paired t-test or Wilcoxon signed-rank test of matched measurements.
* :func:`sign_flip_test`: the exact sign-flip permutation test of paired differences (scipy);
  :func:`matched_pairs_test`: the Mantel-Haenszel test for matched pairs (the pooled McNemar
  test) with its odds ratio and exact interval; :func:`paired_t_power`: the power of the paired
  t-test at a given effect; :func:`holm`: Holm's step-down adjustment (statsmodels);
  :func:`compare_with_reference`: a measured mean against a published mean with its own error.
* :func:`cmh_test`: Cochran-Mantel-Haenszel test over stratified 2x2 tables of *independent*
  samples (statsmodels; not for two classifiers on the same examples: use :func:`matched_pairs_test`),
  :func:`mean_interval`: t interval of a mean difference, :func:`detectable_effect` and
  :func:`mcnemar_detectable_effect`: the smallest effect a paired design detects.
* :func:`split_rhat`, :func:`effective_sample_size`: convergence diagnostics of a scalar trace
  over several Markov chains.
* :func:`linear_trend`: weighted straight-line fit of estimates with known SEs and the
  chi-square test that they are constant (the mean-field bias study's test of b(N)).

Every function checks its input and raises :class:`ValueError` naming the parameter, the value
received and what is allowed. The tests themselves are those of :mod:`scipy.stats`
(``binomtest``, ``ttest_rel``, ``wilcoxon``, ``linregress``).

References
----------
McNemar, "Note on the sampling error of the difference between correlated proportions or
percentages", Psychometrika 12 (1947) 153-157.
Student, "The probable error of a mean", Biometrika 6 (1908) 1-25.
Wilcoxon, "Individual comparisons by ranking methods", Biometrics Bulletin 1 (1945) 80-83.
Gelman and Rubin, Statist. Sci. 7 (1992) 457-472; Gelman et al., Bayesian Data Analysis, 3rd ed.
(2013), sections 11.4-11.5.
Geyer, "Practical Markov chain Monte Carlo", Statist. Sci. 7 (1992) 473-483.
Vehtari, Gelman, Simpson, Carpenter and Buerkner, "Rank-normalization, folding, and
localization: an improved R-hat for assessing convergence of MCMC", Bayesian Analysis 16 (2021)
667-718.
"""
from __future__ import annotations

from rieszflow.engine.stats.fits import (  # noqa: F401
    DecayFit,
    fit_decay,
    expected_slope,
    POWER_LAW_METHODS,
    PowerLawFit,
    power_law_fit,
    LinearTrend,
    linear_trend,
)
from rieszflow.engine.stats.paired import (  # noqa: F401
    PAIRED_TESTS,
    McNemarResult,
    mcnemar,
    mcnemar_counts,
    PairedTest,
    wilcoxon_floor,
    paired_test,
    CMHResult,
    cmh_test,
    MeanInterval,
    mean_interval,
    detectable_effect,
    mcnemar_detectable_effect,
    sign_flip_test,
    MatchedPairsResult,
    matched_pairs_test,
    paired_t_power,
    holm,
    ReferenceComparison,
    compare_with_reference,
)
from rieszflow.engine.stats.mcmc import (  # noqa: F401
    split_rhat,
    effective_sample_size,
)

__all__ = ["DecayFit", "fit_decay", "expected_slope",
    "POWER_LAW_METHODS",
    "PAIRED_TESTS",
    "PowerLawFit",
    "power_law_fit",
    "McNemarResult",
    "mcnemar",
    "mcnemar_counts",
    "PairedTest",
    "wilcoxon_floor",
    "paired_test",
    "CMHResult",
    "cmh_test",
    "MeanInterval",
    "mean_interval",
    "detectable_effect",
    "mcnemar_detectable_effect",
    "sign_flip_test",
    "MatchedPairsResult",
    "matched_pairs_test",
    "paired_t_power",
    "holm",
    "ReferenceComparison",
    "compare_with_reference",
    "split_rhat",
    "effective_sample_size",
    "LinearTrend",
    "linear_trend",
]
