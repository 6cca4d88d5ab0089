"""Controls that separate what Phase A learns from what its noise does (``MainJobConfig.phase_a_control``).

Paper 000's Phase A moves the feature particles by projected Langevin dynamics at inverse
temperature beta = 50, where the noise dominates the drift: a gain after Phase A may come from
any perturbation of the features, not from what the alignment term learns. Two controls, each run
at the same seed as the kernel run it controls:

* ``no_alignment``: the same Phase A steps, batches and noise with the alignment gradient off
  (implemented in the Phase A loop of :mod:`rieszflow.learning.train`);
* ``matched_jitter`` (:func:`matched_jitter`): the particles before Phase A plus isotropic
  Gaussian noise, projected onto the ball, with its scale chosen so that the paired MMD^2 to the
  particles before Phase A equals the one Phase A reached.

References
----------
"A Coulomb Particle Model for Learning Kernel Attention in Transformers" (paper 000 of this
project; under review, no arXiv identifier), eq. (4.3), App. F.2; Gretton et al., "A kernel
two-sample test", JMLR 13 (2012) 723-773 (the MMD estimator).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from rieszflow.engine.backend import to_numpy
from rieszflow.engine.measures import mmd2
from rieszflow.engine.space import Ball

__all__ = ["JitterResult", "matched_jitter"]


class JitterResult(NamedTuple):
    """One head's matched jitter.

    Parameters
    ----------
    particles : numpy.ndarray, shape (m, d), float64
        ``P_ball(before + scale * xi)``.
    scale : float
        sigma, in the units of the particles (0 where the target is <= 0).
    target_mmd2 : float
        Paired MMD^2 between the particles before and after Phase A (float32-rounded, as a run file
        stores them).
    mmd2 : float
        Paired MMD^2 between ``before`` and ``particles`` (equal to the target to the bisection's
        tolerance).
    """

    particles: np.ndarray
    scale: float
    target_mmd2: float
    mmd2: float


def _moved(a, b) -> float:
    """Paired MMD^2 of two particle sets as a run file stores them (float32), computed in float64."""
    return mmd2(np.asarray(a).astype(np.float32).astype(np.float64),
                np.asarray(b).astype(np.float32).astype(np.float64), paired=True).mmd2


def matched_jitter(before, after, rng: np.random.Generator, radius: float, *, halvings: int = 60) -> JitterResult:
    """A random perturbation of ``before`` as far, in paired MMD^2, as ``after`` is from it.

    The target is ``mmd2(before, after, paired=True)`` (:func:`rieszflow.engine.measures.mmd2`,
    Gaussian kernel at the median bandwidth). One Gaussian direction ``xi`` (shape of
    ``before``) is drawn from ``rng``; the scale ``sigma`` of ``P_ball(before + sigma * xi)``
    is bracketed by doubling from 1e-3 and then found by ``halvings`` bisection steps so that its
    paired MMD^2 to ``before`` equals the target (the upper end of the final bracket, so the
    result never falls short). Where the target estimate is <= 0 (Phase A left the law where it
    was, to the estimator's noise), ``sigma = 0`` and the particles are ``before``.

    Parameters
    ----------
    before, after : array_like, shape (m, d), m >= 3
        The particles of one head before and after Phase A (NumPy or CuPy).
    rng : numpy.random.Generator
        Source of ``xi`` (the main job passes its dedicated redraw stream).
    radius : float
        Radius of the particle ball, ``> 0``.
    halvings : int, default 60
        Bisection steps (and the most doublings of the bracket).

    Returns
    -------
    JitterResult

    Raises
    ------
    ValueError
        If the shapes differ or are not (m, d) with m >= 3, or ``radius`` is not a finite number
        > 0.

    Examples
    --------
    >>> import numpy as np
    >>> from rieszflow.learning.controls import matched_jitter
    >>> rng = np.random.default_rng(0)
    >>> x0 = rng.normal(size=(64, 4)) * 0.3
    >>> r = matched_jitter(x0, x0 * 1.2, rng, radius=1.5)
    >>> bool(abs(r.mmd2 - r.target_mmd2) < 1e-9 and r.scale > 0)
    True
    """
    x0 = np.asarray(to_numpy(before), dtype=np.float64)
    x1 = np.asarray(to_numpy(after), dtype=np.float64)
    if x0.ndim != 2 or x0.shape != x1.shape or x0.shape[0] < 3:
        raise ValueError(f"before and after must be (m, d) arrays of one shape with m >= 3; got "
                         f"{x0.shape} and {x1.shape}")
    if not (isinstance(radius, (int, float)) and np.isfinite(radius) and radius > 0):
        raise ValueError(f"radius={radius!r} must be a finite number > 0")
    ball = Ball(float(radius))
    target = _moved(x0, x1)
    xi = rng.standard_normal(x0.shape)

    def perturbed(sigma):
        return np.asarray(to_numpy(ball.project(x0 + sigma * xi)), dtype=np.float64)

    sigma = 0.0
    if target > 0:
        lo, hi = 0.0, 1e-3
        for _ in range(halvings):                     # bracket: f(hi) >= target
            if _moved(x0, perturbed(hi)) >= target:
                break
            lo, hi = hi, 2 * hi
        for _ in range(halvings):
            mid = 0.5 * (lo + hi)
            if _moved(x0, perturbed(mid)) < target:
                lo = mid
            else:
                hi = mid
        sigma = hi
    out = perturbed(sigma)
    return JitterResult(particles=out, scale=float(sigma), target_mmd2=float(target), mmd2=float(_moved(x0, out)))
