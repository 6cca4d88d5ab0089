"""Maximum entropy and moment projections of paper 004 (Theorem 14, Props. 16-17), computably.

Paper 004 (Vuckovic, Baratin, Tachet des Combes, *A Mathematical Theory of Attention*, 2020),
section 4 and appendix B, characterises the two halves of the attention kernel by variational
problems:

* **Theorem 14 (softmatch = I-projection).** Among the measures mu << nu whose feature mean
  mu(k(x, .)) equals a target f(x), the maximiser of H_nu(mu) = -KL(mu || nu) is the softmatch
  measure Psi_{G(x, .)}(nu) with G(x, y) = exp<lam(x), k(x, y)>. On a discrete nu it is found by
  the convex dual (:func:`maxent_dual`); for dot-product attention the dual variable is
  lam = beta W^Q x / sqrt(d') (:func:`softmax_i_projection`).
* **Prop. 16 (M-projection = moment matching).** The member of an exponential family closest to
  mu in KL(mu || .) is the one with the moments of mu; for Gaussians, mean and covariance
  (:func:`gaussian_m_projection`, by moments or by minimising the cross-entropy with BFGS).
* **Prop. 17 (the Dirac projection as a limit).** Over F_sigma = {N(x, sigma^2 I)} the KL
  projection of rho_sigma * mu is N(mean(mu), sigma^2 I) exactly, and its W1 distance (l1 ground
  metric) to Pi(mu) = delta_{mean(mu)} is d sigma sqrt(2/pi) (:func:`isotropic_gaussian_projection`,
  :func:`gaussian_dirac_w1`).

Conventions
-----------
* H_nu(mu) = -KL(mu || nu) = -sum_j mu_j log(mu_j / nu_j), and H_nu(mu) = -inf when mu is not
  << nu (the paper prints KL = int log(dmu/dnu) dnu and "+inf"; spec section 1 typos).
* Covariances are population covariances, sum_j w_j (y_j - m)(y_j - m)^T (1/n for uniform
  weights, no 1/(n-1) correction): the Gaussian cross-entropy minimiser is exactly this one.
* Every function here is a host (NumPy/SciPy) computation: the solvers are scipy.optimize
  routines (trust-region Newton, BFGS, HiGHS linear programs). CuPy inputs are moved to the host
  with :func:`~rieszflow.engine.backend.to_numpy`; results are NumPy arrays.

References
----------
Paper 004 section 4.1-4.2, Theorem 14, Remark 15, Props. 16-17, Lemmas 36-37 and appendix B;
implementation spec ``docs/specs/paper004_attention_theory.md`` section 3 and tests T06-T09.

Modules
-------
:mod:`~rieszflow.theory.max_entropy.i_projection`
    Theorem 14: :func:`relative_entropy`, :func:`maxent_dual`, :func:`maxent_dual_objective`,
    :class:`MaxEntResult`, :func:`feasible_perturbations`, :func:`softmax_i_projection`.
:mod:`~rieszflow.theory.max_entropy.m_projection`
    Prop. 16: :func:`gaussian_m_projection`, :func:`gaussian_cross_entropy`, :func:`gaussian_kl`.
:mod:`~rieszflow.theory.max_entropy.dirac_limit`
    Prop. 17: :func:`isotropic_gaussian_projection`, :func:`gaussian_dirac_w1`,
    :func:`gaussian_dirac_w1_mc`.

Every name is importable from ``rieszflow.theory.max_entropy`` itself.
"""
from __future__ import annotations

from rieszflow.theory.max_entropy.dirac_limit import (
    gaussian_dirac_w1,
    gaussian_dirac_w1_mc,
    isotropic_gaussian_projection,
)
from rieszflow.theory.max_entropy.i_projection import (
    MAXENT_STATUSES,
    MaxEntResult,
    SoftmaxIProjection,
    feasible_perturbations,
    maxent_dual,
    maxent_dual_objective,
    relative_entropy,
    softmax_i_projection,
)
from rieszflow.theory.max_entropy.m_projection import (
    GaussianMProjection,
    gaussian_cross_entropy,
    gaussian_kl,
    gaussian_m_projection,
)

__all__ = [
    "MAXENT_STATUSES",
    "GaussianMProjection",
    "MaxEntResult",
    "SoftmaxIProjection",
    "feasible_perturbations",
    "gaussian_cross_entropy",
    "gaussian_dirac_w1",
    "gaussian_dirac_w1_mc",
    "gaussian_kl",
    "gaussian_m_projection",
    "isotropic_gaussian_projection",
    "maxent_dual",
    "maxent_dual_objective",
    "relative_entropy",
    "softmax_i_projection",
]
