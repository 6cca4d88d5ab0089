"""Prop. 17 of paper 004: the Dirac projection as the limit of isotropic-Gaussian KL projections, and
the W1 distance (l1 or l2 ground metric) between N(m, sigma^2 I) and delta_m, exact and by Monte Carlo."""
from __future__ import annotations

import math

import numpy as np

from rieszflow.engine._checks import check_int, check_real
from rieszflow.engine.backend import to_numpy
from rieszflow.theory import dirac_projection
from rieszflow.theory.max_entropy._inputs import _as_measure

__all__ = ["isotropic_gaussian_projection", "gaussian_dirac_w1", "gaussian_dirac_w1_mc"]


_METRICS = ("l1", "l2")


def isotropic_gaussian_projection(mu, sigma: float):
    """argmin over F_sigma = {N(x, sigma^2 I)} of KL(rho_sigma * mu || .) = N(mean(mu), sigma^2 I).

    KL(rho * mu || N(x, sigma^2 I)) = const + E_{rho*mu} ||y - x||_2^2 / (2 sigma^2), minimised
    at x = mean(rho * mu) = mean(mu) (Lemma 36: convolution with the centred rho adds 0 to
    the mean). Only the mean is free in F_sigma.

    Parameters
    ----------
    mu : EmpiricalMeasure or array, shape (n, d)
    sigma : float
        Standard deviation of rho_sigma = N(0, sigma^2 I), > 0 (the paper's Prop. 17 writes
        N(0, sigma_n I); Lemma 37 has sigma_n^2 I, used here: spec section 1).

    Returns
    -------
    mean : array, shape (d,)
        mean(mu) = Pi(mu)'s atom (:func:`rieszflow.theory.dirac_projection`).
    cov : array, shape (d, d)
        sigma^2 I.

    Raises
    ------
    ValueError
        If ``sigma`` is not a finite positive number or ``mu`` is invalid.

    References
    ----------
    Paper 004 Prop. 17, Lemmas 36-37 (appendix B); spec section 3.3 ("computable form").
    """
    sigma = check_real("sigma", sigma, positive=True)
    mu = _as_measure("mu", mu)
    mean = np.asarray(to_numpy(dirac_projection(mu).points))[0]
    return mean, sigma * sigma * np.eye(mu.dim)


def gaussian_dirac_w1(sigma: float, d: int, metric: str = "l1") -> float:
    """W1(N(m, sigma^2 I), delta_m) in closed form: the gap of Prop. 17's limit at sigma.

    Parameters
    ----------
    sigma : float
        Standard deviation, >= 0.
    d : int
        Dimension, >= 1.
    metric : {"l1", "l2"}, default "l1"
        Ground metric ("l1" is the paper's).

    Returns
    -------
    float
        E||sigma Z||: d sigma sqrt(2/pi) for l1 (d independent half-normal means);
        sigma sqrt(2) Gamma((d+1)/2) / Gamma(d/2) for l2 (the chi mean). The only coupling
        with a Dirac is the product one, so W1 is this expectation exactly.

    Raises
    ------
    ValueError
        If ``sigma`` < 0, ``d`` < 1 or ``metric`` is unknown.

    References
    ----------
    Paper 004 Prop. 17 and Lemma 37 (W1(rho_n * mu, mu) <= int ||x|| rho_n(dx)); spec section
    3.3 and test T09.
    """
    sigma = check_real("sigma", sigma)
    if sigma < 0:
        raise ValueError(f"sigma must be >= 0, got {sigma!r}")
    d = check_int("d", d, minimum=1)
    if metric not in _METRICS:
        raise ValueError(f"metric={metric!r} is not supported; allowed: {', '.join(_METRICS)}")
    if metric == "l1":
        return d * sigma * math.sqrt(2.0 / math.pi)
    return sigma * math.sqrt(2.0) * math.exp(math.lgamma((d + 1) / 2) - math.lgamma(d / 2))


def gaussian_dirac_w1_mc(sigma: float, d: int, rng: np.random.Generator,
                         n_samples: int = 200_000, metric: str = "l1"):
    """Monte Carlo estimate of W1(N(0, sigma^2 I), delta_0) and its standard error.

    Parameters
    ----------
    sigma : float
        Standard deviation, > 0.
    d : int
        Dimension, >= 1.
    rng : numpy.random.Generator
        Host generator.
    n_samples : int, default 200000
        Number of Gaussian samples, >= 2.
    metric : {"l1", "l2"}, default "l1"

    Returns
    -------
    estimate : float
        (1/n) sum_i ||sigma Z_i|| (exactly W1 of the n-sample empirical measure to delta_0).
    standard_error : float
        Sample standard deviation of ||sigma Z_i|| (1/(n-1) convention) over sqrt(n).

    Raises
    ------
    ValueError
        On a non-positive sigma, d < 1, n_samples < 2 or an unknown metric.
    TypeError
        If ``rng`` is not a numpy Generator.

    References
    ----------
    Paper 004 Prop. 17; spec section 3.3 ("checked: Monte Carlo with 2e5 samples") and T09.
    """
    sigma = check_real("sigma", sigma, positive=True)
    d = check_int("d", d, minimum=1)
    n_samples = check_int("n_samples", n_samples, minimum=2)
    if metric not in _METRICS:
        raise ValueError(f"metric={metric!r} is not supported; allowed: {', '.join(_METRICS)}")
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    z = sigma * rng.standard_normal((n_samples, d))
    dist = np.abs(z).sum(axis=1) if metric == "l1" else np.sqrt(np.sum(z * z, axis=1))
    return float(dist.mean()), float(dist.std(ddof=1) / math.sqrt(n_samples))
