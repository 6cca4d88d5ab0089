"""Theorem 14 of paper 004 (softmatch = I-projection), computably: relative entropy, the convex dual
:func:`maxent_dual` on a discrete base measure (interior or boundary solutions), feasible
perturbations for checking maximality, and the dot-product-attention instance
:func:`softmax_i_projection`."""
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
from rieszflow.theory import DotProductKernel, boltzmann_gibbs, softmatch_measure
from rieszflow.theory.max_entropy._inputs import _host_array, _probability

__all__ = ["MAXENT_STATUSES", "MaxEntResult", "SoftmaxIProjection", "feasible_perturbations",
           "maxent_dual", "maxent_dual_objective", "relative_entropy", "softmax_i_projection"]


#: Values of :attr:`MaxEntResult.status`.
MAXENT_STATUSES = ("interior", "boundary")


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
