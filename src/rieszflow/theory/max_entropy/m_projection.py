"""Prop. 16 of paper 004 (M-projection = moment matching) for Gaussians: the Gaussian cross-entropy and
KL, and :func:`gaussian_m_projection` by moments or by minimising the cross-entropy."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import scipy.linalg
import scipy.optimize

from rieszflow.engine._checks import check_int, check_real
from rieszflow.engine.backend import to_numpy
from rieszflow.theory import gaussian_projection
from rieszflow.theory.max_entropy._inputs import _as_measure, _host_array

__all__ = ["GaussianMProjection", "gaussian_cross_entropy", "gaussian_kl", "gaussian_m_projection"]


_GAUSSIAN_METHODS = ("moments", "nll")


@dataclasses.dataclass(frozen=True)
class GaussianMProjection:
    """The Gaussian N(mean, cov) closest to mu in KL(mu || .) (paper 004 Prop. 16).

    Parameters
    ----------
    mean : array, shape (d,), float64
        Mean of the Gaussian.
    cov : array, shape (d, d), float64
        Population convention (weights w_j; 1/n for samples).
    method : {"moments", "nll"}
        Moment matching, or BFGS on the cross-entropy (negative log-likelihood).
    cross_entropy : float
        E_mu[-log N(y; mean, cov)] (nats).
    iterations : int
        BFGS iterations (0 for "moments").
    grad_norm : float
        Infinity norm of the cross-entropy gradient in the (mean, precision-Cholesky)
        parameters at the returned point (0.0 for "moments").
    converged : bool
        ``grad_norm <= gtol`` (always True for "moments").

    References
    ----------
    Paper 004 Prop. 16, Remark 18; spec section 3.2.
    """

    mean: np.ndarray
    cov: np.ndarray
    method: str
    cross_entropy: float
    iterations: int
    grad_norm: float
    converged: bool


def gaussian_cross_entropy(mu, mean, cov) -> float:
    """Cross-entropy E_mu[-log N(y; mean, cov)] of an empirical measure against a Gaussian.

    Parameters
    ----------
    mu : EmpiricalMeasure or array, shape (n, d)
        The measure (samples get uniform weights 1/n).
    mean : array, shape (d,), float64
    cov : array, shape (d, d), float64
        Symmetric positive definite.

    Returns
    -------
    float
        sum_j w_j [ (1/2)(y_j - m)^T cov^{-1} (y_j - m) + (1/2) log det(2 pi cov) ] in nats.
        KL(mu || N) = this - H(mu) whenever mu has a density, so both have the same argmin.

    Raises
    ------
    ValueError
        On shape mismatches, NaN/inf, or a covariance that is not symmetric positive definite.

    References
    ----------
    Paper 004 Prop. 16 (proof: KL(mu||nu_theta) differences); spec section 3.2 ("maximise the
    cross-entropy E_mu[log nu_theta]").
    """
    mu = _as_measure("mu", mu)
    mean, chol = _check_gaussian("mean", "cov", mean, cov, mu.dim)
    pts, w = to_numpy(mu.points), to_numpy(mu.weights)
    z = scipy.linalg.solve_triangular(chol, (pts - mean[None, :]).T, lower=True)
    logdet = 2.0 * float(np.sum(np.log(np.diag(chol))))
    quad = float(w @ np.sum(z * z, axis=0))
    return 0.5 * quad + 0.5 * (logdet + mu.dim * math.log(2 * math.pi))


def _check_gaussian(mname, cname, mean, cov, d):
    mean = _host_array(mname, mean, 1)
    cov = _host_array(cname, cov, 2)
    if mean.shape != (d,) or cov.shape != (d, d):
        raise ValueError(f"{mname} and {cname} must have shapes ({d},) and ({d}, {d}), got "
                         f"{tuple(mean.shape)} and {tuple(cov.shape)}")
    if not np.allclose(cov, cov.T, rtol=1e-12, atol=1e-14):
        raise ValueError(f"{cname} must be symmetric")
    try:
        chol = np.linalg.cholesky(cov)
    except np.linalg.LinAlgError:
        raise ValueError(f"{cname} must be positive definite") from None
    return mean, chol


def gaussian_kl(mean0, cov0, mean1, cov1) -> float:
    """KL(N(mean0, cov0) || N(mean1, cov1)) in closed form.

    Parameters
    ----------
    mean0, mean1 : array, shape (d,), float64
    cov0, cov1 : array, shape (d, d), float64
        Symmetric positive definite.

    Returns
    -------
    float
        (1/2)[tr(cov1^{-1} cov0) + (m1 - m0)^T cov1^{-1} (m1 - m0) - d + log det cov1 -
        log det cov0] >= 0 (nats).

    Raises
    ------
    ValueError
        On shape mismatches, NaN/inf or non-SPD covariances.

    References
    ----------
    Paper 004 Prop. 16 (last line of the proof: KL(mu||nu_M) - KL(mu||nu_theta) =
    -KL(nu_M||nu_theta)).
    """
    mean0 = _host_array("mean0", mean0, 1)
    d = mean0.shape[0]
    mean0, l0 = _check_gaussian("mean0", "cov0", mean0, cov0, d)
    mean1, l1 = _check_gaussian("mean1", "cov1", mean1, cov1, d)
    a = scipy.linalg.solve_triangular(l1, l0, lower=True)           # L1^{-1} L0
    b = scipy.linalg.solve_triangular(l1, mean1 - mean0, lower=True)
    logdet = 2.0 * float(np.sum(np.log(np.diag(l1))) - np.sum(np.log(np.diag(l0))))
    return 0.5 * (float(np.sum(a * a)) + float(b @ b) - d + logdet)


def gaussian_m_projection(mu, method: str = "moments", *, gtol: float = 1e-8,
                          max_iter: int = 2000) -> GaussianMProjection:
    """Gaussian moment projection Pi(mu) = argmin_{N in Gaussians} KL(mu || N) (Prop. 16).

    Parameters
    ----------
    mu : EmpiricalMeasure or array, shape (n, d)
        The measure (samples get uniform weights 1/n).
    method : {"moments", "nll"}, default "moments"
        "moments": moment matching (mean, population covariance) with
        :func:`rieszflow.theory.gaussian_projection`. "nll": BFGS
        (``scipy.optimize.minimize``) on the cross-entropy E_mu[-log N(y; m, P^{-1})], summed
        over the atoms, with analytic gradient, in the parameters (m, L) where P = L L^T is the
        precision and L is lower triangular with log-parametrised diagonal; started from
        m = 0, P = I. Both agree (Prop. 16), which is what test T08 checks.
    gtol : float, default 1e-8
        BFGS gradient tolerance (infinity norm), "nll" only. BFGS cannot go much below ~1e-9:
        there the decrease of the cross-entropy falls below float64 resolution ("precision
        loss"); a gradient of 1e-8 already puts mean and covariance within ~1e-8 of the
        moments on O(1) data.
    max_iter : int, default 2000
        BFGS iteration cap, "nll" only.

    Returns
    -------
    GaussianMProjection
        mean (d,), cov (d, d) (population convention: the 1/n covariance is the exact
        cross-entropy minimiser), cross_entropy, iterations, grad_norm, converged.

    Raises
    ------
    ValueError
        If ``method`` is unknown, mu is invalid, or its covariance is singular (the M-projection
        onto non-degenerate Gaussians does not exist; e.g. n <= d samples).

    Notes
    -----
    Prop. 16 assumes mu ~ nu for every member nu of the family, which an empirical measure
    violates (KL(mu || N) = +inf). The cross-entropy E_mu[-log N] is finite and has the same
    minimiser as KL for every mu with a density; on samples it is the maximum-likelihood fit.

    References
    ----------
    Paper 004 Prop. 16 (and proof, appendix B, with theta_M defined by grad A(theta_M) = mu(F):
    spec section 1 typos), Remark 18, Def. 6-7; spec section 3.2 and test T08.
    """
    if method not in _GAUSSIAN_METHODS:
        raise ValueError(f"method={method!r} is not supported; allowed: "
                         f"{', '.join(_GAUSSIAN_METHODS)}")
    gtol = check_real("gtol", gtol, positive=True)
    max_iter = check_int("max_iter", max_iter, minimum=1)
    mu = _as_measure("mu", mu)
    d = mu.dim
    m_mom, c_mom = (np.asarray(to_numpy(a)) for a in gaussian_projection(mu))
    if np.linalg.matrix_rank(c_mom) < d:
        raise ValueError(f"mu has a singular covariance (rank {np.linalg.matrix_rank(c_mom)} < "
                         f"d = {d}); no non-degenerate Gaussian M-projection exists")
    if method == "moments":
        return GaussianMProjection(mean=m_mom, cov=c_mom, method=method,
                                   cross_entropy=gaussian_cross_entropy(mu, m_mom, c_mom),
                                   iterations=0, grad_norm=0.0, converged=True)

    pts, w = to_numpy(mu.points), to_numpy(mu.weights)
    tril = np.tril_indices(d)
    diag_pos = np.flatnonzero(tril[0] == tril[1])

    def unpack(theta):
        m = theta[:d]
        vals = theta[d:].copy()
        vals[diag_pos] = np.exp(vals[diag_pos])
        chol = np.zeros((d, d))
        chol[tril] = vals
        return m, chol

    def fun(theta):
        m, chol = unpack(theta)
        dev = pts - m[None, :]
        z = dev @ chol                                          # rows: L^T (y - m)
        value = 0.5 * float(w @ np.sum(z * z, axis=1)) - float(np.sum(np.log(np.diag(chol))))
        g_m = -(chol @ (w @ z))                                 # -P E[y - m]
        g_l = (dev * w[:, None]).T @ z - np.diag(1.0 / np.diag(chol))   # S L - diag(1/L_ii)
        g_vals = g_l[tril]
        g_vals[diag_pos] *= np.diag(chol)                       # chain rule for log-diagonal
        return value + 0.5 * d * math.log(2 * math.pi), np.concatenate([g_m, g_vals])

    theta0 = np.zeros(d + tril[0].size)
    res = scipy.optimize.minimize(fun, theta0, jac=True, method="BFGS",
                                  options={"gtol": gtol, "maxiter": max_iter})
    m, chol = unpack(res.x)
    cov = scipy.linalg.cho_solve((chol, True), np.eye(d))       # (L L^T)^{-1}
    cov = 0.5 * (cov + cov.T)
    value, grad = fun(res.x)
    grad_norm = float(np.abs(grad).max())
    return GaussianMProjection(mean=m, cov=cov, method=method, cross_entropy=float(value),
                               iterations=int(res.nit), grad_norm=grad_norm,
                               converged=grad_norm <= gtol)
