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
  with :func:`engine.backend.to_numpy`; results are NumPy arrays.

References
----------
Paper 004 section 4.1-4.2, Theorem 14, Remark 15, Props. 16-17, Lemmas 36-37 and appendix B;
implementation spec ``docs/specs/paper004_attention_theory.md`` section 3 and tests T06-T09.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import scipy.linalg
import scipy.optimize
import scipy.special

from rieszflow.engine._checks import check_int, check_real
from rieszflow.engine.backend import to_numpy
from rieszflow.engine.measures import EmpiricalMeasure
from rieszflow.theory import (
    DotProductKernel,
    boltzmann_gibbs,
    dirac_projection,
    gaussian_projection,
    softmatch_measure,
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

#: Values of :attr:`MaxEntResult.status`.
MAXENT_STATUSES = ("interior", "boundary")

_METRICS = ("l1", "l2")
_GAUSSIAN_METHODS = ("moments", "nll")


# ----------------------------------------------------------------------------------------------
# validation helpers
# ----------------------------------------------------------------------------------------------
def _host_array(name: str, a, ndim: int) -> np.ndarray:
    """Finite float64 host array of rank ``ndim`` (CuPy input is copied to the host)."""
    if a is None:
        raise TypeError(f"{name} must be an array of rank {ndim}, got None")
    arr = np.asarray(to_numpy(a), dtype=np.float64)
    if arr.ndim != ndim:
        raise ValueError(f"{name} must be a {ndim}-D array, got shape {tuple(arr.shape)}")
    if arr.size == 0:
        raise ValueError(f"{name} must not be empty, got shape {tuple(arr.shape)}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or inf; all entries must be finite")
    return arr


def _probability(name: str, w, n: int) -> np.ndarray:
    w = _host_array(name, w, 1)
    if w.shape[0] != n:
        raise ValueError(f"{name} must have shape ({n},), got {tuple(w.shape)}")
    if np.any(w < 0):
        raise ValueError(f"{name} must be >= 0, got min {float(w.min())!r}")
    if abs(float(w.sum()) - 1.0) > 1e-12:
        raise ValueError(f"{name} must sum to 1 (a probability vector), got sum {float(w.sum())!r}")
    return w


def _as_measure(name: str, mu) -> EmpiricalMeasure:
    """An EmpiricalMeasure, or uniform weights on the rows of an (n, d) sample array."""
    if isinstance(mu, EmpiricalMeasure):
        return EmpiricalMeasure(to_numpy(mu.points), to_numpy(mu.weights))
    pts = _host_array(name, mu, 2)
    return EmpiricalMeasure.uniform(pts)


# ----------------------------------------------------------------------------------------------
# Theorem 14: maximum entropy / I-projection on a discrete base measure
# ----------------------------------------------------------------------------------------------
def relative_entropy(weights, base_weights) -> float:
    """H_nu(mu) = -KL(mu || nu) for two probability vectors on the same atoms.

    Parameters
    ----------
    weights : array, shape (N,), float64
        mu_j >= 0, summing to 1.
    base_weights : array, shape (N,), float64
        nu_j >= 0, summing to 1.

    Returns
    -------
    float
        -sum_j mu_j log(mu_j / nu_j) <= 0 (terms with mu_j = 0 are 0); -inf when mu is not
        absolutely continuous w.r.t. nu (some mu_j > 0 = nu_j). Computed with
        ``scipy.special.rel_entr``.

    Raises
    ------
    ValueError
        If either vector is not a finite non-negative probability vector, or shapes differ.

    References
    ----------
    Paper 004 section 4 ("Background", H_nu), with the spec section 1 corrections
    (KL = int log(dmu/dnu) dmu; H_nu = -inf, not +inf, off absolute continuity).
    """
    mu = _host_array("weights", weights, 1)
    nu = _probability("base_weights", base_weights, mu.shape[0])
    mu = _probability("weights", mu, nu.shape[0])
    return -float(np.sum(scipy.special.rel_entr(mu, nu)))


def maxent_dual_objective(lam, features, target, base_weights=None):
    """Dual function of the maximum-entropy problem, its gradient and Hessian.

    D(lam) = log sum_j w_j exp<lam, k_j - f>, the convex dual of
    max H_nu(mu) s.t. sum_j mu_j k_j = f, mu << nu.

    Parameters
    ----------
    lam : array, shape (d',), float64
        Dual variable (the "temperature vector" of Theorem 14).
    features : array, shape (N, d'), float64
        k_j = k(x, y_j), the feature of each atom of nu.
    target : array, shape (d',), float64
        The moment f(x) to reproduce.
    base_weights : array, shape (N,), float64, optional
        nu_j (probability vector; atoms with nu_j = 0 carry no mass). Default uniform 1/N.

    Returns
    -------
    value : float
        D(lam). Its infimum is -max H_nu (strong duality); it is attained iff f lies in the
        relative interior of conv{k_j : nu_j > 0}.
    grad : array, shape (d',)
        E_{pi_lam}[k] - f, with pi_lam = Psi_{exp<lam, k>}(nu) (log-sum-exp weights).
    hess : array, shape (d', d')
        Cov_{pi_lam}(k) (positive semi-definite).

    Raises
    ------
    ValueError
        On shape mismatches, NaN/inf, or invalid base weights.

    References
    ----------
    Paper 004 Theorem 14 and appendix B (A(x) = log int exp<lam, k> dnu); spec section 3.1
    ("Algorithm", step 1).
    """
    features, target, w = _check_problem(features, target, base_weights)
    lam = _host_array("lam", lam, 1)
    if lam.shape != target.shape:
        raise ValueError(f"lam must have shape {target.shape}, got {tuple(lam.shape)}")
    return _dual(lam, features - target[None, :], w)


def _dual(lam, centred, w):
    with np.errstate(divide="ignore"):
        s = np.log(w) + centred @ lam
    value = float(scipy.special.logsumexp(s))
    pi = np.exp(s - value)
    grad = pi @ centred
    hess = (centred * pi[:, None]).T @ centred - np.outer(grad, grad)
    return value, grad, hess


def _check_problem(features, target, base_weights):
    features = _host_array("features", features, 2)
    target = _host_array("target", target, 1)
    if target.shape[0] != features.shape[1]:
        raise ValueError(f"target must have shape ({features.shape[1]},) to match features "
                         f"{tuple(features.shape)}, got {tuple(target.shape)}")
    n = features.shape[0]
    if base_weights is None:
        w = np.full(n, 1.0 / n)
    else:
        w = _probability("base_weights", base_weights, n)
    return features, target, w


@dataclasses.dataclass(frozen=True)
class MaxEntResult:
    """Solution of the maximum-entropy problem of Theorem 14 on a discrete base measure.

    Parameters
    ----------
    weights : array, shape (N,), float64
        mu*_j, the maximum-entropy weights (exactly 0 off :attr:`face` and where nu_j = 0).
    lam : array, shape (d',), float64
        Dual variable with mu*_j proportional to nu_j exp<lam, k_j> on the face. It is the
        minimum-norm one: unique iff :attr:`rank` = d', otherwise defined modulo the orthogonal
        complement of ``direction_basis``. For ``status == "boundary"`` it is the finite dual
        variable of the face-restricted problem; the unrestricted dual has no minimiser.
    status : {"interior", "boundary"}
        "interior": f is in the relative interior of conv{k_j : nu_j > 0} and the dual
        minimum is attained at the finite ``lam``. "boundary": f lies on a proper face;
        every feasible mu is supported on that face.
    lam_diverges : bool
        True iff ``status == "boundary"``: the unrestricted dual infimum is only reached along
        lam + t * exposing_normal, t -> infinity (the hardmax limit).
    face : array of int, shape (n_face,)
        Indices J* of the atoms that carry mass in some feasible mu (the minimal face of
        conv{k_j} containing f). All atoms with nu_j > 0 when ``status == "interior"``.
    exposing_normal : array, shape (d',) or None
        For "boundary": a vector n with <n, k_j - f> = 0 on the face and <= -1 off it, for
        the atoms with nu_j > 0. It is a certificate: at every finite lam the dual gradient
        has <n, grad D(lam)> <= -(mass of pi_lam off the face) < 0, so the unrestricted dual
        has no minimiser. None for "interior".
    direction_basis : array, shape (d', rank), float64
        Orthonormal basis of the directions of the face's affine hull, span{k_i - k_j : i, j in
        face}; lam lies in it.
    rank : int
        Dimension of the affine hull of the face's features (= d' when the keys affinely span).
    iterations : int
        Trust-region plus polishing Newton iterations of the (face-restricted) dual solve
        (0 when rank = 0).
    residual : float
        max_i |sum_j mu*_j k_ji - f_i|, the constraint violation of the returned weights.
    grad_norm : float
        Infinity norm of the (face-restricted) dual gradient at ``lam``.
    converged : bool
        Whether the dual solve met ``gtol``.
    entropy : float
        H_nu(mu*) = -KL(mu* || nu), equal to the dual minimum (strong duality).
    measure : EmpiricalMeasure
        mu* as a measure: on the points of ``base`` when an EmpiricalMeasure was passed,
        otherwise on the feature vectors.

    References
    ----------
    Paper 004 Theorem 14, Remark 15, appendix B; spec section 3.1 ("Feasibility and
    uniqueness") and tests T06-T07.
    """

    weights: np.ndarray
    lam: np.ndarray
    status: str
    lam_diverges: bool
    face: np.ndarray
    exposing_normal: np.ndarray | None
    direction_basis: np.ndarray
    rank: int
    iterations: int
    residual: float
    grad_norm: float
    converged: bool
    entropy: float
    measure: EmpiricalMeasure


def _minimal_face(centred: np.ndarray, support: np.ndarray) -> np.ndarray:
    """Atoms that carry mass in some feasible mu: one HiGHS LP (facial reduction).

    maximise sum_j s_j  s.t.  sum_j v_j c_j = 0,  v_j >= s_j,  0 <= s_j <= 1,  v >= 0,
    over the atoms in ``support``; the cone constraint lets v scale, so at the optimum
    s_j = 1 exactly on the minimal face and 0 off it (empty face = infeasible target).
    """
    c = centred[support]
    m, dp = c.shape
    scale = float(np.abs(c).max())
    c = c / scale if scale > 0 else c
    cost = np.concatenate([np.zeros(m), -np.ones(m)])
    a_eq = np.hstack([c.T, np.zeros((dp, m))])
    a_ub = np.hstack([-np.eye(m), np.eye(m)])
    bounds = [(0, None)] * m + [(0, 1)] * m
    res = scipy.optimize.linprog(cost, A_ub=a_ub, b_ub=np.zeros(m), A_eq=a_eq,
                                 b_eq=np.zeros(dp), bounds=bounds, method="highs")
    if res.status != 0:
        raise RuntimeError(f"facial-reduction LP failed: {res.message}")
    return support[res.x[m:] > 0.5]


def _exposing_normal(centred: np.ndarray, face: np.ndarray, off: np.ndarray) -> np.ndarray:
    """n with <n, c_j> = 0 on the face and <= -1 off it, of least infinity norm (HiGHS LP)."""
    dp = centred.shape[1]
    cost = np.zeros(dp + 1)
    cost[-1] = 1.0
    eye = np.eye(dp)
    a_ub = np.vstack([np.hstack([centred[off], np.zeros((off.size, 1))]),
                      np.hstack([eye, -np.ones((dp, 1))]),
                      np.hstack([-eye, -np.ones((dp, 1))])])
    b_ub = np.concatenate([-np.ones(off.size), np.zeros(2 * dp)])
    a_eq = np.hstack([centred[face], np.zeros((face.size, 1))])
    res = scipy.optimize.linprog(cost, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=np.zeros(face.size),
                                 bounds=[(None, None)] * (dp + 1), method="highs")
    if res.status != 0:
        raise RuntimeError(f"exposing-normal LP failed: {res.message}")
    return res.x[:dp]


_POLISH_STEPS = 10


def _newton_polish(z, reduced, w, n_steps):
    """Undamped Newton steps on grad D(z) = 0, kept while they reduce ||grad D||_inf.

    Near the optimum the decrease of D (~ ||grad||^2) falls below float64 resolution, so the
    trust-region ratio test of ``trust-exact`` can stop with ||grad|| ~ 1e-10; the gradient
    itself is still accurate, and Newton on it converges quadratically from there.
    """
    _, g, h = _dual(z, reduced, w)
    g_inf = float(np.abs(g).max())
    steps = 0
    while steps < n_steps and g_inf > 0:
        try:
            step = np.linalg.solve(h, -g)
        except np.linalg.LinAlgError:
            break
        _, g_new, h_new = _dual(z + step, reduced, w)
        g_new_inf = float(np.abs(g_new).max())
        if not g_new_inf < g_inf:
            break
        z, g, h, g_inf = z + step, g_new, h_new, g_new_inf
        steps += 1
    return z, steps


def maxent_dual(features, target, base=None, *, gtol: float = 1e-12, max_iter: int = 200,
                rank_tol: float = 1e-10) -> MaxEntResult:
    """Maximum-entropy (I-projection) weights with prescribed feature mean, via the convex dual.

    Solves max_{mu << nu} H_nu(mu) subject to sum_j mu_j k_j = f for a discrete base measure
    nu = sum_j w_j delta_{y_j}. Theorem 14: the maximiser is mu*_j proportional to
    w_j exp<lam, k_j> (the softmatch measure Psi_{G(x, .)}(nu), G = exp<lam, k(x, .)>).

    Algorithm (spec section 3.1, with the boundary case designed here):

    1. Facial reduction (one HiGHS LP): the minimal face J* of conv{k_j : w_j > 0} that
       contains f, i.e. the atoms that carry mass in some feasible mu. Empty -> infeasible.
    2. If J* is all atoms with w_j > 0, ``status = "interior"``; otherwise ``"boundary"``,
       and an exposing normal n of the face is computed (second LP).
    3. The dual D(lam) = log sum_{j in J*} w_j exp<lam, k_j - f> is minimised by
       trust-region Newton (``scipy.optimize.minimize(method="trust-exact")``) in the
       coordinates of the direction space of aff{k_j : j in J*} (f is projected on that affine
       hull, which moves it by at most the LP tolerance); there D is strictly convex with a
       finite minimiser, so the returned lam is the minimum-norm dual solution. At most 10
       undamped Newton steps on grad D = 0 follow, kept while they reduce ||grad D|| (down to
       the round-off floor): near the optimum the decrease of D falls below float64
       resolution and the trust-region ratio test can stall at ||grad D|| ~ 1e-10.
    4. mu* = Psi_{exp<lam, k>}(nu restricted to J*) via
       :func:`rieszflow.theory.boltzmann_gibbs` (log-sum-exp); zero off J*.

    Parameters
    ----------
    features : array, shape (N, d'), float64
        k_j = k(x, y_j), the feature of atom j (keys W^K y_j for dot-product attention).
    target : array, shape (d',), float64
        f(x), the prescribed mean of the features.
    base : EmpiricalMeasure or array of shape (N,) or None, optional
        The base measure nu: an EmpiricalMeasure with N atoms (its points are the tokens y_j
        and are used for :attr:`MaxEntResult.measure`), a probability vector of weights, or
        None for uniform weights m(X) = (1/N) sum_j delta_{y_j}.
    gtol : float, default 1e-12
        Tolerance on the infinity norm of the dual gradient, relative to the feature scale
        max_j |k_j - f|_inf (the problem is solved in those units).
    max_iter : int, default 200
        Cap on Newton iterations (the result reports ``converged`` and ``residual``).
    rank_tol : float, default 1e-10
        Relative singular-value threshold for the dimension of the face's affine hull.

    Returns
    -------
    MaxEntResult
        Weights, lam, status, face, exposing normal, iterations, residual, entropy, measure.

    Raises
    ------
    ValueError
        If shapes disagree, entries are NaN/inf, base weights are not a probability vector,
        ``gtol``/``rank_tol`` are not positive, or f is not in conv{k_j : w_j > 0} (the
        constraint set Q(nu, x) of Theorem 14 is empty).
    TypeError
        If ``base`` has an unsupported type or ``max_iter`` is not an integer.
    RuntimeError
        If HiGHS fails on one of the two linear programs (both are feasible by construction).

    Notes
    -----
    Targets within about 1e-7 (relative; HiGHS's feasibility tolerance) of a face may be
    classified either way; either answer satisfies the constraints to that tolerance. The
    spec's detector "||lam|| growing with the dual gradient not -> 0" is not usable on its own:
    along the divergent direction the gradient does tend to 0, like exp(-||lam||), so a
    gradient-tolerance stop returns a large finite lam. The LP certificate does not have
    this problem.

    References
    ----------
    Paper 004 Theorem 14 (and its proof in appendix B), Remark 15 (I-projection); spec section
    3.1 (algorithm, feasibility iff f in relint conv{k_j}, uniqueness of lam iff the keys
    affinely span) and tests T06-T07.
    """
    gtol = check_real("gtol", gtol, positive=True)
    rank_tol = check_real("rank_tol", rank_tol, positive=True)
    max_iter = check_int("max_iter", max_iter, minimum=1)
    features_arr = _host_array("features", features, 2)
    n = features_arr.shape[0]
    if isinstance(base, EmpiricalMeasure):
        if base.n_atoms != n:
            raise ValueError(f"base has {base.n_atoms} atoms but features has {n} rows")
        base_measure = EmpiricalMeasure(to_numpy(base.points), to_numpy(base.weights))
        w_in = base_measure.weights
    elif base is None or isinstance(base, (np.ndarray, list, tuple)) or hasattr(base, "__array__"):
        w_in = base
        base_measure = None
    else:
        raise TypeError(f"base must be an EmpiricalMeasure, a weight array or None, got "
                        f"{type(base).__name__}")
    features_arr, target, w = _check_problem(features_arr, target, w_in)
    if base_measure is None:
        base_measure = EmpiricalMeasure(features_arr, w)
    dp = features_arr.shape[1]
    centred = features_arr - target[None, :]

    support = np.flatnonzero(w > 0)
    face = _minimal_face(centred, support)
    if face.size == 0:
        raise ValueError("target is not in the convex hull of the features of the atoms with "
                         "positive base weight: the constraint set Q(nu, x) of Theorem 14 is "
                         f"empty (target={target.tolist()})")
    status = "interior" if face.size == support.size else "boundary"
    off = np.setdiff1d(np.arange(n), face)

    # affine hull of the face's features: k_bar + span(basis); the target is projected on it
    # (a no-op up to round-off, except within the LP tolerance of a face, where it removes
    # the ~1e-9 component that would otherwise make the restricted dual unbounded)
    kf = features_arr[face]
    k_bar = kf.mean(axis=0)
    spread = kf - k_bar[None, :]
    scale = float(np.abs(spread).max())
    if scale > 0:
        _, sv, vt = np.linalg.svd(spread, full_matrices=False)
        rank = int(np.sum(sv > rank_tol * sv[0]))
    else:
        rank = 0
    basis = vt[:rank].T if rank > 0 else np.zeros((dp, 0))           # (d', rank)
    if rank == dp:
        target_face = target
    else:
        target_face = k_bar + basis @ (basis.T @ (target - k_bar))
    normal = None
    if status == "boundary":
        normal = _exposing_normal(features_arr - target_face[None, :], face,
                                  np.setdiff1d(support, face))

    if rank > 0:
        reduced = ((kf - target_face[None, :]) @ basis) / scale     # O(1) coordinates
        wf = w[face] / w[face].sum()

        def fun(z):
            return _dual(z, reduced, wf)[0]

        def jac(z):
            return _dual(z, reduced, wf)[1]

        def hess(z):
            return _dual(z, reduced, wf)[2]

        res = scipy.optimize.minimize(fun, np.zeros(rank), jac=jac, hess=hess,
                                      method="trust-exact",
                                      options={"gtol": gtol, "maxiter": max_iter})
        z, iterations = _newton_polish(res.x, reduced, wf, _POLISH_STEPS)
        iterations += int(res.nit)
        g_inf = float(np.abs(jac(z)).max())
        grad_norm = g_inf * scale
        converged = g_inf <= gtol
        lam = basis @ z / scale
    else:
        lam = np.zeros(dp)
        grad_norm, converged, iterations = 0.0, True, 0

    log_g = np.full(n, -np.inf)
    log_g[face] = features_arr[face] @ lam - float(np.max(features_arr[face] @ lam))
    mu_star = boltzmann_gibbs(base_measure, log_g)
    weights = np.asarray(to_numpy(mu_star.weights), dtype=np.float64)
    weights[off] = 0.0
    residual = float(np.abs(weights @ features_arr - target).max())
    return MaxEntResult(weights=weights, lam=lam, status=status,
                        lam_diverges=status == "boundary", face=face, exposing_normal=normal,
                        direction_basis=basis, rank=rank, iterations=iterations,
                        residual=residual, grad_norm=grad_norm, converged=converged,
                        entropy=relative_entropy(weights, w), measure=mu_star)


def feasible_perturbations(features, weights, rng: np.random.Generator, n_perturb: int = 200,
                           max_step: float = 0.9) -> np.ndarray:
    """Random probability vectors with the same feature mean as ``weights`` (same support).

    Each draw is weights + t v with v a Gaussian direction in the null space of the
    constraint matrix [K^T; 1^T] restricted to the support of ``weights`` (so sum_j mu_j k_j
    and sum_j mu_j are unchanged), and t = u * max_step * t_max, u ~ U(0, 1], where t_max is
    the largest step keeping every weight >= 0.

    Parameters
    ----------
    features : array, shape (N, d'), float64
        k_j.
    weights : array, shape (N,), float64
        A feasible probability vector (e.g. :attr:`MaxEntResult.weights`).
    rng : numpy.random.Generator
        Host generator (the only source of randomness).
    n_perturb : int, default 200
    max_step : float, default 0.9
        Fraction of the distance to the simplex boundary, in (0, 1]; values < 1 keep the
        perturbed weights strictly positive on the support.

    Returns
    -------
    array, shape (n_perturb, N), float64
        Perturbed weights; zero off the support of ``weights``.

    Raises
    ------
    ValueError
        On bad shapes/values, or when the null space is trivial (the constraints pin the
        weights: no feasible perturbation exists).
    TypeError
        If ``rng`` is not a numpy Generator.

    References
    ----------
    Spec section 3.1 ("200/200 random feasible perturbations in the null space of [K^T; 1]
    have lower H_nu"), test T06; paper 004 appendix B (H_nu(gamma) = H_nu(mu*) - KL(gamma||mu*)).
    """
    features = _host_array("features", features, 2)
    weights = _probability("weights", weights, features.shape[0])
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    n_perturb = check_int("n_perturb", n_perturb, minimum=1)
    max_step = check_real("max_step", max_step, positive=True, high=1.0)
    supp = np.flatnonzero(weights > 0)
    constraints = np.vstack([features[supp].T, np.ones((1, supp.size))])
    null = scipy.linalg.null_space(constraints)                     # (|supp|, q)
    if null.shape[1] == 0:
        raise ValueError(f"the constraints [K^T; 1] have a trivial null space on the "
                         f"{supp.size} supported atoms: no feasible perturbation exists")
    out = np.zeros((n_perturb, features.shape[0]))
    ws = weights[supp]
    for i in range(n_perturb):
        v = null @ rng.standard_normal(null.shape[1])
        v /= np.abs(v).max()
        neg = v < 0
        t_max = float(np.min(ws[neg] / -v[neg]))
        t = (1.0 - rng.uniform()) * max_step * t_max                # u in (0, 1]
        out[i, supp] = ws + t * v
    return out


@dataclasses.dataclass(frozen=True)
class SoftmaxIProjection:
    """Theorem 14 for one query of dot-product attention (spec section 3.1, instance).

    Parameters
    ----------
    result : MaxEntResult
        The dual solve with features k_j = W^K y_j and target f = sum_j P_j W^K y_j.
    softmax_weights : array, shape (N,), float64
        P_j = Psi_{G(x, .)}(nu)_j from :func:`rieszflow.theory.softmatch_measure`.
    lam_expected : array, shape (d',), float64
        beta W^Q x / sqrt(d').
    tv : float
        Total variation (1/2) sum_j |mu*_j - P_j|.
    lam_error : float
        Infinity norm of (lam - lam_expected) projected on ``result.direction_basis`` (the whole
        of R^{d'} when the keys affinely span; otherwise lam is only defined modulo the rest).

    References
    ----------
    Paper 004 Theorem 14, Prop. 9; spec section 3.1 and test T06.
    """

    result: MaxEntResult
    softmax_weights: np.ndarray
    lam_expected: np.ndarray
    tv: float
    lam_error: float


def softmax_i_projection(query, mu: EmpiricalMeasure, WQ, WK, beta: float = 1.0,
                         **solver_options) -> SoftmaxIProjection:
    """Recover the softmax weights of one attention query as a maximum-entropy solution.

    Builds the instance of spec section 3.1: features k(x, y) = W^K y, base nu = ``mu``,
    target f(x) = sum_j P_j W^K y_j with P = softmax_j(beta <W^Q x, W^K y_j>/sqrt(d') + log w_j),
    solves :func:`maxent_dual` and compares with the softmax weights and lam = beta W^Q x/sqrt(d').

    Parameters
    ----------
    query : array, shape (d,), float64
        The query token x.
    mu : EmpiricalMeasure
        Keys y_j (N atoms, dimension d) with weights w_j.
    WQ, WK : array, shape (d', d), float64
        Query and key projections.
    beta : float, default 1.0
        Inverse temperature (>= 0).
    **solver_options
        Passed to :func:`maxent_dual` (``gtol``, ``max_iter``, ``rank_tol``).

    Returns
    -------
    SoftmaxIProjection

    Raises
    ------
    ValueError
        On shape mismatches or NaN/inf (raised by the kernel, the measure or the solver).
    TypeError
        If ``mu`` is not an EmpiricalMeasure.

    References
    ----------
    Paper 004 Theorem 14 (softmatch = I-projection), appendix A (a(x, y) =
    <W^Q x, W^K y>/sqrt(d'), read as W^Q x: spec section 1 typos); spec section 3.1.
    """
    if not isinstance(mu, EmpiricalMeasure):
        raise TypeError(f"mu must be an EmpiricalMeasure, got {type(mu).__name__}")
    x = _host_array("query", query, 1)
    WQ = _host_array("WQ", WQ, 2)
    WK = _host_array("WK", WK, 2)
    mu = EmpiricalMeasure(to_numpy(mu.points), to_numpy(mu.weights))
    if WQ.shape != WK.shape or WQ.shape[1] != x.shape[0] or WK.shape[1] != mu.dim:
        raise ValueError(f"WQ {WQ.shape} and WK {WK.shape} must both be (d', d) with d = "
                         f"{x.shape[0]} (query) = {mu.dim} (keys)")
    kernel = DotProductKernel.from_projections(WQ, WK, beta)
    p = np.asarray(to_numpy(softmatch_measure(x, mu, kernel).weights))
    feats = to_numpy(mu.points) @ WK.T                                  # (N, d')
    target = p @ feats
    res = maxent_dual(feats, target, mu, **solver_options)
    lam_expected = kernel.beta * (WQ @ x) / math.sqrt(WQ.shape[0])
    basis = res.direction_basis
    diff = basis @ (basis.T @ (res.lam - lam_expected))
    return SoftmaxIProjection(result=res, softmax_weights=p, lam_expected=lam_expected,
                              tv=0.5 * float(np.abs(res.weights - p).sum()),
                              lam_error=float(np.abs(diff).max()) if diff.size else 0.0)


# ----------------------------------------------------------------------------------------------
# Prop. 16: Gaussian M-projection = moment matching
# ----------------------------------------------------------------------------------------------
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


# ----------------------------------------------------------------------------------------------
# Prop. 17: the Dirac projection as a limit of isotropic-Gaussian KL projections
# ----------------------------------------------------------------------------------------------
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
