"""Convergence diagnostics of a scalar trace over several Markov chains: split R-hat and effective sample size."""
from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import numpy as np
from scipy.stats import binomtest, linregress, ttest_rel, wilcoxon


# --------------------------------------------------------------------------------------------
# MCMC diagnostics
# --------------------------------------------------------------------------------------------
def _chains(chains, name: str, min_draws: int, what: str) -> np.ndarray:
    x = np.asarray(chains, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < 1 or x.shape[1] < min_draws:
        raise ValueError(f"{name} has shape {x.shape}; {what} needs (C, n) with C >= 1 and n >= {min_draws}")
    if not np.isfinite(x).all():
        raise ValueError(f"{name} must be finite; {int((~np.isfinite(x)).sum())} entries are not "
                         f"(first at index {tuple(int(i) for i in np.argwhere(~np.isfinite(x))[0])})")
    return x


def split_rhat(chains) -> float:
    """Split-R-hat of a scalar trace over several chains.

    Each chain is cut into two halves (the middle draw of an odd-length chain is dropped);
    over the ``2C`` half-chains of length ``n'`` with within-half variance ``W`` (mean of the
    ``ddof=1`` variances) and between-half variance ``B = n' var(half means, ddof=1)``,
    ``R = sqrt(((n'-1)/n' W + B/n') / W)``.

    Parameters
    ----------
    chains : array_like, shape (C, n)
        One row per chain (kept draws only), ``C >= 1``, ``n >= 4``, finite.

    Returns
    -------
    float
        1 at convergence, larger when the chains disagree; NaN if every half is constant.

    Raises
    ------
    ValueError
        If ``chains`` is not of shape (C, n) with ``C >= 1`` and ``n >= 4``, or has a
        non-finite entry.

    References
    ----------
    Gelman et al., Bayesian Data Analysis, 3rd ed. (2013), section 11.4, eq. (11.4);
    Vehtari et al., Bayesian Analysis 16 (2021) 667-718, section 2 (the classic split-R-hat,
    without their rank normalisation and folding).
    """
    x = _chains(chains, "chains", 4, "split-R-hat")
    n = x.shape[1] // 2
    halves = np.concatenate([x[:, :n], x[:, n:2 * n]])
    w = halves.var(axis=1, ddof=1).mean()
    b = n * halves.mean(axis=1).var(ddof=1)
    if w <= 0:
        return math.nan
    return float(math.sqrt(((n - 1) / n * w + b / n) / w))


def effective_sample_size(chains) -> float:
    """Effective sample size of a scalar trace over chains (Geyer's initial positive sequence).

    ``C n / tau`` with ``tau = 1 + 2 sum_t rho_t``: the autocorrelations ``rho_t`` of each
    chain (about its own mean, FFT, biased ``1/n`` normalisation) are averaged over chains and
    summed in consecutive pairs ``rho_t + rho_{t+1}`` (t = 1, 3, ...) while the pair sums stay
    positive.

    Parameters
    ----------
    chains : array_like, shape (C, n)
        One row per chain, ``C >= 1``, ``n >= 2``, finite.

    Returns
    -------
    float
        The effective number of independent draws; NaN for constant traces. For an AR(1)
        chain with coefficient ``rho`` it tends to ``C n (1 - rho) / (1 + rho)``.

    Raises
    ------
    ValueError
        If ``chains`` is not of shape (C, n) with ``C >= 1`` and ``n >= 2``, or has a
        non-finite entry.

    References
    ----------
    Geyer, Statist. Sci. 7 (1992) 473-483; Gelman et al. (2013), section 11.5. Vehtari et al.
    (2021), section 3.2, combine the chains' autocorrelations with the between-chain variance
    and use the initial monotone sequence; this estimator averages the within-chain
    autocorrelations only.
    """
    x = _chains(chains, "chains", 2, "an effective sample size")
    c, n = x.shape
    xc = x - x.mean(axis=1, keepdims=True)
    var = np.mean(xc * xc)
    if var <= 0:
        return math.nan
    f = np.fft.rfft(xc, 2 * n, axis=1)
    acov = np.fft.irfft(f * np.conj(f), axis=1)[:, :n].mean(0) / n
    rho = acov / acov[0]
    tau = 1.0
    for t in range(1, n - 1, 2):
        pair = rho[t] + rho[t + 1]
        if pair <= 0:
            break
        tau += 2.0 * pair
    return float(c * n / tau)
