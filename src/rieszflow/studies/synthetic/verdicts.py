"""Per-sigma verdicts of paper 000's synthetic benchmark, each beside the Bayes ceiling.

A pooled window of noise levels mixes levels that carry signal with levels where the best
possible classifier is a coin flip (at sigma = 100 the Bayes ceiling of the fixed 120-point test
split is 0.507); such a pool can neither confirm nor refute anything. So every claim is tested
at each sigma on its own, over the trials (every method of one (sigma, trial) sees the same
labels: paired), and a sigma whose Bayes ceiling is within one standard deviation (over label
draws) of 1/2 is reported as "no signal: not decidable", never as a win or a loss.

The test is the two-sided Wilcoxon signed-rank test of
:func:`rieszflow.engine.stats.paired_test` (scipy: zero differences dropped, exact
sign-flip distribution for up to 50 pairs); its smallest possible p with k non-zero pairs is
``2 / 2^k``, so reaching ``p < 0.01`` needs ``k >= 8`` (``2 / 2^7 = 0.0156``,
``2 / 2^8 = 0.0078``) and ``p < 0.05`` needs ``k >= 6`` (``2 / 2^5 = 0.0625``,
``2 / 2^6 = 0.031``). The level is 0.01 per sigma (Bonferroni for a family of five sigmas at
0.05).

References
----------
Paper 000 ("Random features as interacting particles"), App. F.1.1 (the generative model),
F.1.6-F.1.7 (the claims); Wilcoxon, Biometrics Bulletin 1 (1945) 80-83.
"""
from __future__ import annotations

import json
import math
from typing import NamedTuple

import numpy as np

from rieszflow.engine.stats import paired_test, wilcoxon_floor
from rieszflow.studies.synthetic.data import bayes_accuracy, make_dataset

__all__ = ["ALPHA", "SigmaVerdict", "min_pairs", "has_signal", "split_ceilings",
           "sigma_verdict", "format_claim", "format_resampling", "claim_summary"]

#: Level of every per-sigma test (Bonferroni: 0.05 over five sigmas).
ALPHA = 0.01


def min_pairs(alpha: float = ALPHA) -> int:
    """Fewest non-zero pairs for which the exact Wilcoxon test can reach ``p < alpha``.

    Parameters
    ----------
    alpha : float, default :data:`ALPHA`
        Level, in (0, 1).

    Returns
    -------
    int
        The smallest k with ``2 / 2^k < alpha`` (8 for 0.01, 6 for 0.05).

    Raises
    ------
    ValueError
        If ``alpha`` is not in (0, 1).
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1); got {alpha!r}")
    k = 1
    while wilcoxon_floor(k) >= alpha:
        k += 1
    return k


def has_signal(ceiling: float, sd: float) -> bool:
    """Whether a noise level carries signal: the Bayes ceiling stands more than one standard
    deviation (over label draws) above 1/2.

    Below that even the Bayes rule's accuracy on the test split is within one sd of a coin
    flip's, so no difference between methods can be attributed to learning the log-odds.

    Parameters
    ----------
    ceiling : float
        Expected Bayes accuracy of the test split
        (:func:`rieszflow.studies.synthetic.data.bayes_accuracy`).
    sd : float
        Its standard deviation over label draws, ``>= 0``.

    Returns
    -------
    bool
    """
    return bool(ceiling - 0.5 > sd)


def split_ceilings(config: dict, sigmas) -> dict:
    """The Bayes ceiling of the benchmark's fixed test split at each noise level.

    Parameters
    ----------
    config : dict
        The sweep's task configuration (``n``, ``p``, ``data_seed``).
    sigmas : iterable of float
        Noise levels.

    Returns
    -------
    dict
        ``sigma -> (ceiling, sd)`` (:func:`~rieszflow.studies.synthetic.data.bayes_accuracy` of
        ``logit[test]``).

    References
    ----------
    Paper 000, App. F.1.1.
    """
    data = make_dataset(int(config["n"]), int(config["p"]), int(config["data_seed"]))
    return {float(s): bayes_accuracy(data.logit[data.test], float(s)) for s in sigmas}


class SigmaVerdict(NamedTuple):
    """A claim "a beats b" tested at one noise level.

    Parameters
    ----------
    status : str
        ``"no signal"``, ``"holds"``, ``"fails"`` (b is better), ``"no significant difference"``,
        ``"too few pairs"`` (the exact test cannot reach ``alpha``) or ``"no pairs"``.
    mean, lo, hi : float
        Mean paired accuracy difference a - b and its 95 % t-interval (NaN when undefined).
    n, nonzero : int
        Pairs with both entries finite; of them with a non-zero difference.
    p_value : float
        Two-sided Wilcoxon signed-rank p (NaN when not tested).
    ceiling, ceiling_sd : float
        Bayes ceiling of the test split and its sd over label draws.
    """

    status: str
    mean: float
    lo: float
    hi: float
    n: int
    nonzero: int
    p_value: float
    ceiling: float
    ceiling_sd: float


def sigma_verdict(a, b, ceiling: float, ceiling_sd: float, alpha: float = ALPHA) -> SigmaVerdict:
    """Test "a beats b" at one sigma, over paired trials, unless the sigma carries no signal.

    Parameters
    ----------
    a, b : array_like, shape (trials,)
        Test accuracies of the two methods, paired by trial (NaN: missing, dropped pairwise).
    ceiling, ceiling_sd : float
        Bayes ceiling of the test split at this sigma and its sd (:func:`has_signal`).
    alpha : float, default :data:`ALPHA`
        Level of the test.

    Returns
    -------
    SigmaVerdict
        ``"no signal"`` when :func:`has_signal` is false (the pairs are still summarised);
        ``"too few pairs"`` when the non-zero pairs cannot reach ``alpha``
        (:func:`rieszflow.engine.stats.wilcoxon_floor`) and the test did not; else holds / fails / no significant
        difference by the sign of the mean and ``p < alpha``.

    Raises
    ------
    ValueError
        If ``a`` and ``b`` differ in shape.
    """
    from scipy.stats import ttest_rel

    a, b = np.asarray(a, dtype=float).ravel(), np.asarray(b, dtype=float).ravel()
    if a.shape != b.shape:
        raise ValueError(f"a and b must have the same shape; got {a.shape} and {b.shape}")
    ok = np.isfinite(a) & np.isfinite(b)
    a, b = a[ok], b[ok]
    nan = math.nan
    if a.size < 2:
        return SigmaVerdict("no signal" if not has_signal(ceiling, ceiling_sd) else "no pairs",
                            nan, nan, nan, int(a.size), int(np.count_nonzero(a - b)), nan, ceiling, ceiling_sd)
    r = paired_test(a, b, test="wilcoxon")
    d = a - b
    nonzero = int(np.count_nonzero(d))
    if np.ptp(d) > 0:
        lo, hi = ttest_rel(a, b).confidence_interval(0.95)
    else:
        lo = hi = float(r.mean)
    if not has_signal(ceiling, ceiling_sd):
        status = "no signal"
    elif r.p_value < alpha:
        status = "holds" if r.mean > 0 else "fails"
    elif wilcoxon_floor(nonzero) >= alpha:
        status = "too few pairs"
    else:
        status = "no significant difference"
    return SigmaVerdict(status, float(r.mean), float(lo), float(hi), int(r.n), nonzero, float(r.p_value),
                        ceiling, ceiling_sd)


_WORDS = {"no signal": "no signal: not decidable",
          "holds": "holds",
          "fails": "fails (the other is better)",
          "no significant difference": "no significant difference",
          "too few pairs": "not decidable at this size (too few non-zero pairs)",
          "no pairs": "no paired results"}


def format_claim(title: str, rows, alpha: float = ALPHA) -> str:
    """One claim's per-sigma table: Bayes ceiling, both means, the difference with its interval,
    pairs, p and the verdict.

    Parameters
    ----------
    title : str
        The claim ("F.1.6: Langevin features ... beat plain RFF").
    rows : iterable of (float, ndarray, ndarray, SigmaVerdict)
        ``(sigma, a, b, verdict)`` per noise level (``a``, ``b``: accuracies over trials).
    alpha : float, default :data:`ALPHA`
        The level the verdicts used (printed).

    Returns
    -------
    str
    """
    lines = [f"{title} (level {alpha:g} per sigma)",
             f"{'sigma':>8} {'Bayes ceiling':>14} {'mean A':>7} {'mean B':>7} {'A - B [95% CI]':>27} "
             f"{'pairs':>5} {'nz':>3} {'p':>8}  verdict"]
    for sigma, a, b, v in rows:
        ma, mb = (float(np.nanmean(x)) if np.isfinite(x).any() else math.nan for x in (a, b))
        mean, lo, hi = (0.0 if abs(x) < 5e-5 else x for x in (v.mean, v.lo, v.hi))   # no "-0.0000"
        diff = "n/a" if not math.isfinite(mean) else f"{mean:+.4f} [{lo:+.4f}, {hi:+.4f}]"
        p = "n/a" if not math.isfinite(v.p_value) else f"{v.p_value:.2g}"
        word = _WORDS[v.status]
        if v.status == "no signal":
            word += f" (ceiling - 1/2 = {v.ceiling - 0.5:.3f} <= sd {v.ceiling_sd:.3f})"
        elif v.status == "too few pairs":
            word += f"; smallest possible p = {wilcoxon_floor(v.nonzero):.3g}"
        lines.append(f"{float(sigma):>8.0e} {v.ceiling:>7.3f}+-{v.ceiling_sd:<5.3f} {ma:>7.3f} {mb:>7.3f} "
                     f"{diff:>27} {v.n:>5d} {v.nonzero:>3d} {p:>8}  {word}")
    return "\n".join(lines)


def claim_summary(title: str, rows) -> str:
    """One line: at which sigmas the claim holds, fails, shows no difference or cannot be decided.

    Parameters
    ----------
    title : str
    rows : iterable of (float, ndarray, ndarray, SigmaVerdict)
        As for :func:`format_claim`.

    Returns
    -------
    str
    """
    by = {}
    for sigma, _, _, v in rows:
        by.setdefault(v.status, []).append(f"{float(sigma):.0e}")
    parts = [f"{_WORDS[k]} at sigma = {', '.join(by[k])}" for k in _WORDS if k in by]
    return f"{title}: " + "; ".join(parts)


def format_resampling(ds, alpha: float = ALPHA) -> str:
    """The Langevin rows without resampling: all N particles as features beside the D
    Gibbs-resampled ones, per method and sigma, with the distinct frequencies resampling kept.

    Parameters
    ----------
    ds : xarray.Dataset
        The merged benchmark sweep (dims method, sigma, trial) with ``accuracy_all_particles``
        and ``distinct_frequencies`` (tasks written before they were stored lack them).
    alpha : float, default :data:`ALPHA`

    Returns
    -------
    str
        Empty when no task stored the row.
    """
    if "accuracy_all_particles" not in ds:
        return ""
    config = json.loads(ds.attrs["config"])["config"]
    ceilings = split_ceilings(config, ds.sigma.values)
    out = []
    for m in ds.method.values:
        allp = ds["accuracy_all_particles"].sel({"method": m})
        if not np.isfinite(allp.values).any():
            continue
        n_all = np.nanmax(ds["n_particles"].sel({"method": m}).values)
        rows = []
        for s in ds.sigma.values:
            a = allp.sel(sigma=s).values.astype(float)
            b = ds["accuracy"].sel({"method": m, "sigma": s}).values.astype(float)
            rows.append((float(s), a, b, sigma_verdict(a, b, *ceilings[float(s)], alpha=alpha)))
        out.append(format_claim(f"{m}: all N = {int(n_all)} particles as features (A) against the "
                                f"D = {int(config['D'])} Gibbs-resampled (B)", rows, alpha))
        per = []
        for s in ds.sigma.values:
            v = ds["distinct_frequencies"].sel({"method": m, "sigma": s}).values.astype(float)
            v = v[np.isfinite(v)]
            if v.size:
                per.append(f"sigma={float(s):.0e}: {int(v.min())}-{int(v.max())} (median {np.median(v):g})")
        out.append(f"  distinct frequencies among the D = {int(config['D'])} resampled, min-max over "
                   f"trials: " + "; ".join(per))
    return "\n".join(out)
