"""Maximum mean discrepancy with a Gaussian kernel: :func:`mmd2` (unbiased, with a jackknife standard
error), its weighted form :func:`mmd2_weighted` and the median-heuristic bandwidth."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from rieszflow.engine._checks import check_real
from rieszflow.engine.backend import to_numpy
from rieszflow.engine.measures.empirical import _as_points

__all__ = ["MMD", "median_bandwidth", "mmd2", "mmd2_weighted"]


class MMD(NamedTuple):
    """An unbiased squared maximum mean discrepancy, its standard error and its kernel.

    Parameters
    ----------
    mmd2 : float
        The unbiased U-statistic :math:`\\widehat{\\mathrm{MMD}}^2_u` (can be < 0 when the two
        laws agree), in kernel units (dimensionless for the Gaussian kernel).
    se : float
        Its two-sample jackknife standard error.
    bandwidth : float
        The Gaussian kernel's bandwidth sigma, in the units of the points.
    n_x, n_y : int
        The sample sizes.
    """

    mmd2: float
    se: float
    bandwidth: float
    n_x: int
    n_y: int


def _sq_dists(a, b):
    d = (a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2.0 * a @ b.T
    return np.maximum(d, 0.0)


def median_bandwidth(*clouds) -> float:
    """Median heuristic: the median of the pairwise distances of the pooled points.

    Parameters
    ----------
    *clouds : array_like, each of shape (n_i, d)
        Point clouds in the same space (pooled; at least two points in all).

    Returns
    -------
    float
        The median of :math:`|z_i - z_j|` over all pairs ``i < j`` of the pooled points, > 0.

    Raises
    ------
    ValueError
        If no cloud is given, the dimensions differ, fewer than two points are given, a
        value is not finite, or every pooled point coincides (median distance 0).

    References
    ----------
    Gretton et al., JMLR 13 (2012) 723-773, section 8 (the median heuristic).
    """
    if not clouds:
        raise ValueError("median_bandwidth needs at least one point cloud")
    z = np.concatenate([_as_points(f"clouds[{i}]", np.asarray(to_numpy(c), dtype=np.float64))
                        for i, c in enumerate(clouds)])
    if z.shape[0] < 2:
        raise ValueError(f"median_bandwidth needs at least two points, got {z.shape[0]}")
    iu = np.triu_indices(z.shape[0], k=1)
    med = float(np.median(np.sqrt(_sq_dists(z, z)[iu])))
    if not med > 0:
        raise ValueError("median_bandwidth: the median pairwise distance is 0 (coinciding points); "
                         "pass an explicit bandwidth")
    return med


def mmd2(x, y, bandwidth=None, paired: bool = False) -> MMD:
    """Unbiased squared MMD between two point clouds with a Gaussian kernel, and its jackknife SE.

    With :math:`k(a, b) = \\exp(-|a - b|^2 / (2\\sigma^2))`,

    .. math::

        \\widehat{\\mathrm{MMD}}^2_u = \\frac{1}{n(n-1)}\\sum_{i \\ne j} k(x_i, x_j)
        + \\frac{1}{m(m-1)}\\sum_{i \\ne j} k(y_i, y_j) - \\frac{2}{nm}\\sum_{i, j} k(x_i, y_j),

    an unbiased estimate of :math:`\\mathrm{MMD}^2` for independent i.i.d. samples (Gretton et
    al. 2012, eq. (3)). With ``paired=True`` (``n = m``, point ``x_i`` paired with ``y_i``) the
    cross terms ``i = j`` are left out too,
    :math:`\\frac{1}{n(n-1)}\\sum_{i \\ne j} [k(x_i, x_j) + k(y_i, y_j) - k(x_i, y_j) - k(x_j, y_i)]`
    (Gretton et al. 2012, Lemma 6), which stays unbiased for the MMD between the two marginal
    laws when each pair ``(x_i, y_i)`` may be dependent (a particle and where it moved to)
    but the pairs are i.i.d. The standard error is the two-sample delete-one jackknife (Arvesen 1969):
    :math:`\\frac{n-1}{n}\\sum_a(\\theta_{-a} - \\bar\\theta_x)^2 + \\frac{m-1}{m}\\sum_b(\\theta_{-b} -
    \\bar\\theta_y)^2` (paired: delete one pair at a time, one sum), computed in O((n + m)^2)
    from row sums; by the Efron-Stein inequality it is conservative in expectation. Both assume independent points
    within each sample; for dependent points (an MCMC configuration, interacting particles)
    they are approximations.

    Parameters
    ----------
    x : array_like, shape (n, d), n >= 3
        First sample (NumPy or CuPy; computed on the host in float64).
    y : array_like, shape (m, d), m >= 3
        Second sample, same d.
    bandwidth : float, optional
        Kernel bandwidth sigma > 0 in the units of the points; default the median heuristic
        on the pooled sample (:func:`median_bandwidth`). Pass one bandwidth to every
        comparison that shares a table, so the numbers are in one kernel's units.
    paired : bool, default False
        Use the paired estimator above (needs ``n == m``).

    Returns
    -------
    MMD
        ``(mmd2, se, bandwidth, n_x, n_y)``.

    Raises
    ------
    ValueError
        If a sample is not a finite (n, d) array with n >= 3, the dimensions differ, or
        ``bandwidth`` is not a finite positive number, or ``paired`` with ``n != m``.

    References
    ----------
    Gretton et al., "A kernel two-sample test", JMLR 13 (2012) 723-773, eq. (3) and Lemma 6;
    Efron and Stein, Ann. Statist. 9 (1981) 586-596;
    Arvesen, Ann. Math. Statist. 40 (1969) 2076-2100 (jackknife of U-statistics).
    """
    x = _as_points("x", np.asarray(to_numpy(x), dtype=np.float64))
    y = _as_points("y", np.asarray(to_numpy(y), dtype=np.float64))
    n, m = x.shape[0], y.shape[0]
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"x has dimension {x.shape[1]} and y has {y.shape[1]}; they must agree")
    if paired and n != m:
        raise ValueError(f"paired=True needs samples of equal size, got n_x={n}, n_y={m}")
    if n < 3 or m < 3:
        raise ValueError(f"mmd2 needs at least 3 points per sample for its jackknife SE, got "
                         f"n_x={n}, n_y={m}")
    sigma = median_bandwidth(x, y) if bandwidth is None else check_real("bandwidth", bandwidth,
                                                                         positive=True)
    c = -1.0 / (2.0 * sigma * sigma)
    kxx = np.exp(c * _sq_dists(x, x))
    kyy = np.exp(c * _sq_dists(y, y))
    kxy = np.exp(c * _sq_dists(x, y))
    np.fill_diagonal(kxx, 0.0)
    np.fill_diagonal(kyy, 0.0)
    if paired:
        hm = kxx + kyy - kxy - kxy.T
        np.fill_diagonal(hm, 0.0)
        rows, total = hm.sum(1), hm.sum()
        th = (total - 2.0 * rows) / ((n - 1) * (n - 2))
        var = ((n - 1) / n) * np.sum((th - th.mean()) ** 2)
        return MMD(float(total / (n * (n - 1))), float(np.sqrt(var)), float(sigma), n, m)
    rx, ry = kxx.sum(1), kyy.sum(1)              # row sums without the diagonal
    cx, cy = kxy.sum(1), kxy.sum(0)
    sxx, syy, sxy = rx.sum(), ry.sum(), cx.sum()
    value = sxx / (n * (n - 1)) + syy / (m * (m - 1)) - 2.0 * sxy / (n * m)
    # delete-one estimates: dropping x_a removes its row and column of kxx and its row of kxy
    th_x = ((sxx - 2.0 * rx) / ((n - 1) * (n - 2)) + syy / (m * (m - 1))
            - 2.0 * (sxy - cx) / ((n - 1) * m))
    th_y = (sxx / (n * (n - 1)) + (syy - 2.0 * ry) / ((m - 1) * (m - 2))
            - 2.0 * (sxy - cy) / (n * (m - 1)))
    var = ((n - 1) / n) * np.sum((th_x - th_x.mean()) ** 2) \
        + ((m - 1) / m) * np.sum((th_y - th_y.mean()) ** 2)
    return MMD(float(value), float(np.sqrt(var)), float(sigma), n, m)


def mmd2_weighted(x, a, y, b, bandwidth: float) -> float:
    """Exact squared MMD between two weighted empirical measures, Gaussian kernel (no estimator).

    For comparing two given discrete measures (e.g. two attention rows over the same tokens);
    for an estimate of the MMD between the laws behind two samples, with its standard error,
    use :func:`mmd2`.

    ``MMD^2 = a^T K_xx a - 2 a^T K_xy b + b^T K_yy b`` with
    ``K(u, v) = exp(-|u - v|^2 / (2 bandwidth^2))``, for ``mu = sum_i a_i delta_{x_i}``
    and ``nu = sum_j b_j delta_{y_j}`` (the V-statistic; ``>= 0`` up to rounding, which is
    clipped at 0 only below ``1e-15`` of the scale).

    Parameters
    ----------
    x : array, shape (n, d)
    a : array, shape (n,)
        Weights of ``mu`` (non-negative, any total; usually summing to 1).
    y : array, shape (m, d)
    b : array, shape (m,)
    bandwidth : float
        Gaussian kernel width, ``> 0``.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        On shape mismatch, negative weights or a bad bandwidth.

    References
    ----------
    Gretton et al. (2012), "A kernel two-sample test", JMLR 13, eq. (2) (weighted V-statistic).
    """
    from scipy.spatial.distance import cdist

    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if x.ndim != 2 or y.ndim != 2 or x.shape[1] != y.shape[1] or a.shape != (len(x),) or b.shape != (len(y),):
        raise ValueError(f"mmd2_weighted: x {x.shape}, a {a.shape}, y {y.shape}, b {b.shape} do not fit "
                         "(need x (n, d), a (n,), y (m, d), b (m,))")
    for name, v in (("x", x), ("a", a), ("y", y), ("b", b)):
        if not np.isfinite(v).all():
            raise ValueError(f"mmd2_weighted: {name} has non-finite entries")
    if (a < 0).any() or (b < 0).any():
        raise ValueError("mmd2_weighted: weights a and b must be non-negative")
    bandwidth = check_real("bandwidth", bandwidth, positive=True)
    g = lambda u, v: np.exp(-cdist(u, v, "sqeuclidean") / (2.0 * bandwidth ** 2))  # noqa: E731
    val = float(a @ g(x, x) @ a - 2.0 * a @ g(x, y) @ b + b @ g(y, y) @ b)
    scale = float(a.sum() ** 2 + b.sum() ** 2)
    return 0.0 if -1e-15 * scale < val < 0 else val
