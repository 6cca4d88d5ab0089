"""Fits of measured quantities: power laws in log-log space, W1 decay rates, straight lines with known SEs."""
from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import numpy as np
from scipy.stats import binomtest, linregress, ttest_rel, wilcoxon

from rieszflow.engine.stats._common import _as_1d, _check_positive_finite, _count  # noqa: F401

#: Arithmetic recipes of :func:`power_law_fit` (one estimator, rounding differs in the last bits).
POWER_LAW_METHODS = ("lstsq", "lstsq_normal", "polyfit", "linregress")




# --------------------------------------------------------------------------------------------
# power laws
# --------------------------------------------------------------------------------------------
class PowerLawFit(NamedTuple):
    """Least-squares fit ``log y = intercept + slope * log x``, i.e. ``y ~ prefactor * x**slope``.

    Sign convention: ``slope`` is the exponent of ``x`` as it stands (negative for a decay);
    a caller reporting a decay rate ``alpha`` with ``y ~ C x**(-alpha)`` uses ``-slope``.

    Parameters
    ----------
    slope : float
        The exponent.
    slope_se : float
        Its classical OLS standard error, ``s / sqrt(sum (log x - mean log x)^2)`` with
        ``s^2 = RSS / (n - 2)``; NaN with only 2 points (no residual degree of freedom).
    intercept : float
        ``log(prefactor)``.
    prefactor : float
        ``exp(intercept)``.
    r2 : float
        Coefficient of determination in log-log space, ``1 - RSS / TSS`` (NaN when all
        ``log y`` are equal).
    residual_std : float
        ``s``, the standard deviation of the log residuals with ``ddof = 2``; NaN with 2 points.
    n_points : int
        Number of (x, y) pairs fitted.
    """

    slope: float
    slope_se: float
    intercept: float
    prefactor: float
    r2: float
    residual_std: float
    n_points: int


def power_law_fit(x, y, *, method: str = "lstsq") -> PowerLawFit:
    """Fit ``y ~ prefactor * x**slope`` by ordinary least squares of ``log y`` on ``log x``.

    Parameters
    ----------
    x : array_like, shape (n,)
        Abscissae (converted to float64), finite and ``> 0``; repeated values (replicates) are
        allowed, at least 2 distinct values are needed.
    y : array_like, shape (n,)
        Ordinates (converted to float64), finite and ``> 0``.
    method : {"lstsq", "polyfit", "lstsq_normal", "linregress"}, default "lstsq"
        How the one estimator is evaluated in floating point. All four give the same
        mathematical quantities and differ only in rounding (last bits); they are kept so
        that each study writes the numbers it has always written. New code should use the
        default.

        * ``"lstsq"``: :func:`numpy.linalg.lstsq` on the design ``[1, log x]``; residuals
          ``log y - A @ coef``; ``slope_se = s / sqrt(S_xx)`` with ``S_xx`` the centred sum of
          squares of ``log x``.
        * ``"lstsq_normal"``: as ``"lstsq"`` but ``slope_se = sqrt(s^2 [(A^T A)^{-1}]_{11})``
          (the normal-equations form of the same standard error).
        * ``"polyfit"``: :func:`numpy.polyfit` of degree 1; residuals
          ``log y - (intercept + slope log x)``; ``slope_se`` as ``"lstsq"``.
        * ``"linregress"``: :func:`scipy.stats.linregress`; residuals as ``"polyfit"``;
          ``slope_se`` is scipy's ``stderr``.

    Returns
    -------
    PowerLawFit
        ``r2 = 1 - sum(res**2) / sum((log y - mean)**2)`` and ``residual_std = sqrt(RSS / (n-2))``
        from the method's residuals; ``prefactor = numpy.exp(intercept)``.

    Raises
    ------
    ValueError
        If ``x`` or ``y`` is not 1-D, their lengths differ, an entry is not finite or not
        ``> 0``, fewer than 2 distinct ``x`` remain, or ``method`` is unknown.

    Notes
    -----
    ``slope = S_xy / S_xx`` and ``intercept = mean(log y) - slope mean(log x)`` (Gauss-Markov);
    with independent homoscedastic errors in ``log y`` the standard error is
    ``s / sqrt(S_xx)`` (e.g. Seber and Lee, Linear Regression Analysis, 2nd ed. (2003), 4.1).

    Examples
    --------
    >>> f = power_law_fit([1, 2, 4, 8], [3.0, 1.5, 0.75, 0.375])
    >>> round(f.slope, 12), round(f.prefactor, 12)
    (-1.0, 3.0)
    """
    if method not in POWER_LAW_METHODS:
        raise ValueError(f"method must be one of {POWER_LAW_METHODS}; got {method!r}")
    x, y = _as_1d(x, "x"), _as_1d(y, "y")
    if x.shape != y.shape:
        raise ValueError(f"x and y must have the same length; got {x.size} and {y.size}")
    _check_positive_finite(x, "x")
    _check_positive_finite(y, "y")
    distinct = np.unique(x).size
    if distinct < 2:
        raise ValueError(f"x must hold at least 2 distinct values to fit a slope; got {distinct} "
                         f"({x.size} points)")
    lx, ly = np.log(x), np.log(y)
    n = lx.size
    stderr = math.nan
    if method in ("lstsq", "lstsq_normal"):
        A = np.stack([np.ones_like(lx), lx], axis=1)
        coef, *_ = np.linalg.lstsq(A, ly, rcond=None)
        intercept, slope = coef[0], coef[1]
        res = ly - A @ coef
    elif method == "polyfit":
        slope, intercept = np.polyfit(lx, ly, 1)
        res = ly - (intercept + slope * lx)
    else:
        lr = linregress(lx, ly)
        slope, intercept, stderr = lr.slope, lr.intercept, float(lr.stderr)
        res = ly - (intercept + slope * lx)
    dof = n - 2
    if dof > 0:
        rss = res @ res
        sigma = float(np.sqrt(rss / dof))
        if method == "lstsq_normal":
            cov = (float(rss) / dof) * np.linalg.inv(A.T @ A)
            se = float(np.sqrt(cov[1, 1]))
        elif method == "linregress":
            se = stderr
        else:
            se = sigma / float(np.sqrt(((lx - lx.mean()) ** 2).sum()))
    else:
        sigma = se = math.nan
    tss = np.sum((ly - ly.mean()) ** 2)
    r2 = float(1 - np.sum(res ** 2) / tss) if tss > 0 else math.nan
    return PowerLawFit(slope=float(slope), slope_se=se, intercept=float(intercept),
                       prefactor=float(np.exp(intercept)), r2=r2, residual_std=sigma, n_points=int(n))


# --------------------------------------------------------------------------- decay rates

@dataclasses.dataclass(frozen=True)
class DecayFit:
    """Least-squares fit :math:`\\log W_1 = \\log C + p \\log N`.

    Parameters
    ----------
    slope, slope_se : float
        The exponent p and its standard error.
    intercept : float
        :math:`\\log C`.
    n_points : int
        Number of (N, run) pairs used.
    """

    slope: float
    slope_se: float
    intercept: float
    n_points: int


def fit_decay(n_values, w1) -> DecayFit:
    """OLS of :math:`\\log W_1` on :math:`\\log N` over all runs.

    The fit is :func:`power_law_fit` (``method="lstsq_normal"``), pooled over the runs.

    Parameters
    ----------
    n_values : array_like, shape (n_N,)
        Particle numbers.
    w1 : array_like, shape (n_N, n_runs)
        Distances; NaN entries (runs not made) are ignored.

    Returns
    -------
    DecayFit

    Raises
    ------
    ValueError
        If fewer than 3 finite points or fewer than 2 distinct N remain, or a
        distance is not positive.
    """
    n = np.asarray(n_values, dtype=np.float64)
    w = np.asarray(w1, dtype=np.float64)
    if w.ndim != 2 or w.shape[0] != n.size:
        raise ValueError(f"w1 must have shape ({n.size}, n_runs), got {w.shape}")
    n_x = np.repeat(n, w.shape[1])
    w_y = w.ravel()
    ok = np.isfinite(w_y)
    n_x, w_y = n_x[ok], w_y[ok]
    if (w_y <= 0).any():
        raise ValueError("w1 must be > 0 to fit a power law")
    n_distinct = np.unique(np.log(n_x)).size
    if w_y.size < 3 or n_distinct < 2:
        raise ValueError(f"need at least 3 runs over 2 distinct N to fit, got {w_y.size} runs, "
                         f"{n_distinct} N values")
    f = power_law_fit(n_x, w_y, method="lstsq_normal")
    return DecayFit(slope=f.slope, slope_se=f.slope_se, intercept=f.intercept, n_points=f.n_points)


def expected_slope(n_values, d: int) -> float:
    """Least-squares slope of the Fournier-Guillin curve over ``n_values``: the W1 sampling rate.

    The expected :math:`W_1` between N i.i.d. points and their law decays as :math:`N^{-1/2}` in
    d = 1 and :math:`N^{-1/2}\\log N` in d = 2 (Fournier and Guillin, "On the rate of convergence in
    Wasserstein distance of the empirical measure", PTRF 162, 2015); this is the slope a log-log
    fit over ``n_values`` sees, the reference for particle-versus-PDE rates.

    Parameters
    ----------
    n_values : array_like
        Particle numbers (at least 2 distinct).
    d : int
        Dimension: 1 gives exactly -0.5; 2 fits :math:`N^{-1/2}\\log N`.

    Returns
    -------
    float
    """
    n = np.asarray(n_values, dtype=np.float64)
    if d == 1:
        return -0.5
    return power_law_fit(n, n ** -0.5 * np.log(n), method="polyfit").slope


# --------------------------------------------------------------------------------------------
# trends of estimates with known standard errors
# --------------------------------------------------------------------------------------------
class LinearTrend(NamedTuple):
    """Result of :func:`linear_trend`.

    Parameters
    ----------
    slope, slope_se : float
        Weighted least-squares slope of y on x and its standard error from the given SEs
        (absolute: not rescaled by the residuals).
    z : float
        ``slope / slope_se``.
    mean, mean_se : float
        The inverse-variance weighted mean of y and its SE (the constant model).
    chi2 : float
        :math:`\\sum_i ((y_i - \\bar y_w)/\\sigma_i)^2`, the constant model's chi-square.
    dof : int
        Its degrees of freedom, ``n - 1``.
    p_constant : float
        ``P(chi2_dof >= chi2)``: the p-value of "y is constant in x" (:func:`scipy.stats.chi2.sf`).
    n_points : int
    """

    slope: float
    slope_se: float
    z: float
    mean: float
    mean_se: float
    chi2: float
    dof: int
    p_constant: float
    n_points: int


def linear_trend(x, y, se) -> LinearTrend:
    """Is an estimate constant in x? Weighted straight-line fit and chi-square of the constant.

    Fits :math:`y_i = a + c\\,x_i` by weighted least squares with weights :math:`1/\\sigma_i^2`
    (the closed form on x centred at its weighted mean; the SEs are taken as known, as
    ``numpy.polyfit(x, y, 1, w=1/se, cov="unscaled")`` does), and tests the constant model :math:`y_i = a` by its chi-square. Used on the antithetic
    estimates :math:`\\hat b(N) = -2N\\hat D_N` against :math:`x = \\log_{10} N`: an O(1/N) bias
    has a constant b (slope 0 up to :math:`O(1/N)` corrections), a :math:`(\\log N)/N` term a
    slope per decade of N.

    Parameters
    ----------
    x, y, se : array_like, shape (n,)
        Abscissae, estimates and their standard errors (> 0), all finite; n >= 2 with at least
        two distinct x (n = 2 gives the line through both points, chi2 on 1 dof).

    Returns
    -------
    LinearTrend

    Raises
    ------
    ValueError
        If the shapes differ, a value is not finite, an SE is not > 0, or fewer than 2 points
        or 2 distinct x are given.

    References
    ----------
    Bevington and Robinson, *Data Reduction and Error Analysis for the Physical Sciences*, 3rd
    ed. (2003), sections 6.3-6.4 (weighted straight line) and 11.1 (chi-square test).
    """
    from scipy.stats import chi2 as chi2_law

    xa, ya, sa = _as_1d(x, "x"), _as_1d(y, "y"), _as_1d(se, "se")
    if not xa.size == ya.size == sa.size:
        raise ValueError(f"x, y and se must have one length; got {xa.size}, {ya.size}, {sa.size}")
    for name, a in (("x", xa), ("y", ya), ("se", sa)):
        if not np.isfinite(a).all():
            raise ValueError(f"{name} has a value that is not finite: {a.tolist()}")
    if (sa <= 0).any():
        raise ValueError(f"se must be > 0 (known standard errors); got {sa.tolist()}")
    if xa.size < 2 or np.unique(xa).size < 2:
        raise ValueError(f"need at least 2 points with 2 distinct x; got x = {xa.tolist()}")
    w = 1.0 / sa ** 2
    mean = float(np.sum(w * ya) / np.sum(w))
    dx = xa - np.sum(w * xa) / np.sum(w)              # centred on the weighted mean of x: no squaring
    sxx = float(np.sum(w * dx * dx))                  # of the condition number (as polyfit's cov has)
    slope, slope_se = float(np.sum(w * dx * (ya - mean)) / sxx), float(1.0 / math.sqrt(sxx))
    chi2 = float(np.sum(((ya - mean) / sa) ** 2))
    dof = xa.size - 1
    return LinearTrend(slope=slope, slope_se=slope_se, z=slope / slope_se, mean=mean,
                       mean_se=float(1.0 / math.sqrt(np.sum(w))), chi2=chi2, dof=dof,
                       p_constant=float(chi2_law.sf(chi2, dof)), n_points=int(xa.size))
