"""The classifiers of paper 000, App. F.1.2, on one shared feature budget D.

Each method is one entry of :data:`METHODS`: ``fit_predict(X_train, y_train, X_test, rng,
config) -> y_pred``. scikit-learn provides every classical model; the random Fourier features
are the engine's ``rff`` feature map (:mod:`rieszflow.engine.features`), scaled by
``1/sqrt(D)`` to the paper's ``z(x) = sqrt(2/D) cos(W^T x + b)``.

References
----------
Paper 000, App. F.1.2 (baselines (1)-(3), MKL (4) through the optional extra ``mkl``, the
Sinha-Duchi features (5) and the Langevin features (6)).

A method whose optional dependency is missing raises :class:`MethodUnavailable`; the benchmark
records such a task as *unavailable* (NaN metrics, ``available = 0``), not as failed.
"""
from __future__ import annotations

import math

import numpy as np
from rieszflow.engine._checks import check_real
from rieszflow.engine.energy import rff_hamiltonian
from rieszflow.engine.features import make_feature_map
from rieszflow.engine.simulate import gibbs_resample, projected_langevin, run_langevin
from rieszflow.engine.space import Ball


__all__ = ["METHODS", "BENCHMARK_METHODS", "MethodUnavailable", "OPTIONAL_DEPENDENCIES", "MKL_INSTALL",
           "MKL_GAMMAS", "missing_dependency", "project_simplex", "sinha_duchi_weights", "sinha_duchi_svm",
           "stratified_indices", "logistic", "rbf_svm", "rff_features", "rff_linear_svm", "rff_svm", "langevin_svm", "mkl_memo"]


#: How to install the optional extra of :func:`mkl_memo` (MKLpy is GPL-3.0 and needs torch; the
#: CPU index keeps torch's CUDA stack out).
MKL_INSTALL = "pip install -e '.[mkl]' --extra-index-url https://download.pytorch.org/whl/cpu"

#: Method name -> (module it imports, install command) for the methods of an optional extra.
OPTIONAL_DEPENDENCIES = {"mkl_memo": ("MKLpy", MKL_INSTALL)}


class MethodUnavailable(RuntimeError):
    """A method cannot run here because its optional dependency is missing.

    Not a failure: :func:`rieszflow.studies.synthetic.study.benchmark_task` records the task as
    unavailable (``available = 0``, NaN metrics, the reason as an attribute) and the reports say
    so; the sweep's exit status stays 0.

    Parameters
    ----------
    method : str
        The method's name in :data:`METHODS`.
    reason : str
        Why, with the install command (e.g. ``"MKLpy not installed: pip install ..."``).
    """

    def __init__(self, method: str, reason: str):
        super().__init__(f"{method}: unavailable ({reason})")
        self.method, self.reason = method, reason

    def __reduce__(self):            # picklable across Dask workers (two constructor arguments)
        return (type(self), (self.method, self.reason))


def missing_dependency(method: str) -> str | None:
    """Why ``method`` cannot run in this process, or None when it can (or needs no extra).

    Looks the module up (``importlib.util.find_spec``) without importing it.

    Parameters
    ----------
    method : str

    Returns
    -------
    str or None
        ``"<module> not installed: <install command>"`` or None.
    """
    import importlib.util

    if method not in OPTIONAL_DEPENDENCIES:
        return None
    module, install = OPTIONAL_DEPENDENCIES[method]
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    return None if found else f"{module} not installed: {install}"


def logistic(X_train, y_train, X_test, rng, config):
    """(1) Linear logistic regression on the raw inputs (scikit-learn defaults, lbfgs).

    Parameters
    ----------
    X_train : ndarray, shape (n_train, p), float64
    y_train : ndarray, shape (n_train,), int64
    X_test : ndarray, shape (n_test, p), float64
    rng : numpy.random.Generator
        Unused (the method is deterministic).
    config : dict
        Unused.

    Returns
    -------
    ndarray, shape (n_test,), int64
        Predicted labels.
    """
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(max_iter=1000).fit(X_train, y_train).predict(X_test)


def rbf_svm(gamma: float):
    """(2) SVM with the Gaussian kernel ``exp(-gamma |x - x'|^2)``, hinge loss, ``C = 1``.

    Parameters
    ----------
    gamma : float
        Bandwidth: 0.5 in the paper, 0.01 and 100 for its mis-specified dashed lines.

    Returns
    -------
    callable
        ``fit_predict(X_train, y_train, X_test, rng, config) -> y_pred``.
    """
    def fit_predict(X_train, y_train, X_test, rng, config):
        from sklearn.svm import SVC

        return SVC(kernel="rbf", gamma=gamma, C=1.0).fit(X_train, y_train).predict(X_test)

    fit_predict.__doc__ = f"RBF-SVM with gamma = {gamma}, C = 1 (paper 000, App. F.1.2 (2))."
    return fit_predict


def rff_features(X, omega, b):
    """Random Fourier features ``sqrt(2/D) cos(X omega^T + b)`` through the engine's ``rff`` map.

    Parameters
    ----------
    X : ndarray, shape (n, p), float64
    omega : ndarray, shape (D, p), float64
        Frequencies (rows).
    b : ndarray, shape (D,), float64
        Phases in [0, 2 pi).

    Returns
    -------
    ndarray, shape (n, D), float64

    References
    ----------
    Paper 000, App. F.1.2 (3); Rahimi and Recht (2007).
    """
    d_features = omega.shape[0]
    fmap = make_feature_map("rff", X.shape[1], d_features, b=b)
    return fmap(X, omega) / math.sqrt(d_features)


def rff_svm(X_train, y_train, X_test, rng, config):
    """(3) RFF with ``W ~ N(0, 2 gamma I)``, ``b ~ U[0, 2 pi]``, ``gamma = 0.5``, D features, then a
    linear SVM (hinge loss, ``C = 1``).

    Parameters
    ----------
    X_train : ndarray, shape (n_train, p), float64
    y_train : ndarray, shape (n_train,), int64
    X_test : ndarray, shape (n_test, p), float64
    rng : numpy.random.Generator
        Draws ``W`` (D x p normals) and then ``b`` (D uniforms).
    config : dict
        ``D`` (feature budget) and ``gamma``.

    Returns
    -------
    ndarray, shape (n_test,), int64
    """
    D, gamma = int(config["D"]), float(config["gamma"])
    omega = rng.normal(0.0, math.sqrt(2.0 * gamma), size=(D, X_train.shape[1]))
    b = rng.uniform(0.0, 2.0 * math.pi, size=D)
    return rff_linear_svm(X_train, y_train, X_test, omega, b)


def rff_linear_svm(X_train, y_train, X_test, omega, b):
    """A linear SVM (hinge loss, ``C = 1``) on the random Fourier features of given frequencies.

    The classifier of the RFF and Langevin methods (App. F.1.2 (3) and (6)): features
    :func:`rff_features`, scikit-learn's ``LinearSVC(C=1, loss="hinge", max_iter=20000)``.

    Parameters
    ----------
    X_train : ndarray, shape (n_train, p), float64
    y_train : ndarray, shape (n_train,), int64
    X_test : ndarray, shape (n_test, p), float64
    omega : ndarray, shape (D, p), float64
        Frequencies (rows; repeats allowed).
    b : ndarray, shape (D,), float64
        Phases.

    Returns
    -------
    ndarray, shape (n_test,), int64
        Test predictions.

    References
    ----------
    Paper 000, App. F.1.2 (3), (6).
    """
    from sklearn.svm import LinearSVC

    clf = LinearSVC(C=1.0, loss="hinge", max_iter=20000)
    clf.fit(rff_features(X_train, omega, b), y_train)
    return clf.predict(rff_features(X_test, omega, b))


def langevin_svm(lam: float | None, s: float | None = 0.0):
    """(6) Langevin spectral features of Alg. 1, then a linear SVM (``C = 1``).

    ``N`` particles (``config["langevin_N"]``, 300) start from the RFF law ``N(0, 2 gamma I)``
    projected onto the ball of radius ``langevin_radius`` (5) and follow the engine's projected
    Langevin chain (eq. (4.3)) on the RFF Hamiltonian ``H = E_N + lam W_{N,s}`` (alignment with
    the labels mapped to +-1, fixed phases ``b ~ U[0, 2 pi]``; ``s = 0``: log repulsion) with the
    N-scaled gradient clipped to global norm ``langevin_clip`` (1), step ``langevin_eta`` (30),
    inverse temperature ``langevin_beta`` (100), for ``langevin_steps`` (2000) steps. The D-feature
    budget is met by Alg. 2's Gibbs resampling of D particles (with their phases) from the final N
    (the paper does not say how D < N features are formed; stated in docs/synthetic.md).

    Parameters
    ----------
    lam : float or None
        Interaction strength (0.5 for "Alg-1", 0 for the robust variant); None: the task's
        ``config["lam"]`` (the ablation grid).
    s : float or None, default 0.0
        Riesz exponent of the repulsion (0: logarithmic); None: ``config["ablation_s"]``.

    Returns
    -------
    callable
        ``fit_predict(X_train, y_train, X_test, rng, config) -> (y_pred, extras)`` where
        ``extras`` holds the learned frequencies ``omega`` (D, p) and phases ``b`` (D,) of the
        D resampled features, all N final particles ``omega_all`` (N, p) with their phases
        ``b_all`` (N,) (the benchmark fits the no-resampling row on them, outside the timed
        call), and ``distinct``, the number of distinct particles among the D resampled.

    References
    ----------
    Paper 000, Algorithms 1-2, eq. (2.2), (4.3), App. F.1.2 (6).
    """
    def fit_predict(X_train, y_train, X_test, rng, config):
        n_particles, D = int(config["langevin_N"]), int(config["D"])
        beta = float(config["langevin_beta"])
        p = X_train.shape[1]
        space = Ball(float(config["langevin_radius"]))
        b = rng.uniform(0.0, 2.0 * math.pi, size=n_particles)
        strength = float(config["lam"]) if lam is None else lam
        exponent = float(config["ablation_s"]) if s is None else s
        H = rff_hamiltonian(X_train, 2.0 * y_train - 1.0, s=exponent, lam=strength, b=b)
        omega0 = space.project(rng.normal(0.0, math.sqrt(2.0 * float(config["gamma"])), size=(n_particles, p)))
        init, step = projected_langevin(H.grad, space, eta=float(config["langevin_eta"]), beta=beta,
                                        clip_norm=float(config["langevin_clip"]))
        state = run_langevin(step, init(omega0), int(config["langevin_steps"]), rng, progress=False)
        pick = gibbs_resample(state.omega, H.per_particle(state.omega), beta, D, rng)
        omega, phases = np.asarray(pick.omega), b[pick.index]
        y_pred = rff_linear_svm(X_train, y_train, X_test, omega, phases)
        return y_pred, {"omega": omega, "b": phases, "omega_all": np.asarray(state.omega), "b_all": b,
                        "distinct": int(np.unique(np.asarray(pick.index)).size)}

    fit_predict.__doc__ = (f"Langevin features, lam = {'grid' if lam is None else lam}, s = "
                           f"{'ablation_s' if s is None else s}, then a linear SVM (paper 000, App. F.1.2 (6)).")
    return fit_predict


def project_simplex(z):
    """Euclidean projection onto the probability simplex ``{q >= 0, sum q = 1}`` (sort and threshold).

    Parameters
    ----------
    z : ndarray, shape (m,), float64

    Returns
    -------
    ndarray, shape (m,), float64

    References
    ----------
    Duchi, Shalev-Shwartz, Singer and Chandra (2008), "Efficient projections onto the l1-ball";
    docs/specs/attention_reference.md section 3.3.
    """
    z = np.asarray(z, dtype=np.float64)
    s = np.sort(z)[::-1]
    c = np.cumsum(s)
    j = np.arange(1, z.size + 1)
    k = int(np.nonzero(s - (c - 1.0) / j > 0)[0][-1]) + 1
    return np.maximum(z - (c[k - 1] - 1.0) / k, 0.0)


def sinha_duchi_weights(v, rho: float, tol: float = 1e-10):
    """Maximise ``q^T v`` over the simplex within the chi-square ball ``||q - u||^2 <= rho / m``.

    The optimum of the partial Lagrangian is ``q(lam) = proj_simplex(u + v / lam)``; ``lam`` is
    bracketed by doubling or halving from 1 and bisected until the bracket is below
    ``tol * lam_start`` (Sinha and Duchi 2016, Sec. 3; the chi-square case of the spec).

    Parameters
    ----------
    v : ndarray, shape (m,), float64
        Alignment scores ``((Phi^T y)_k)^2`` of the m candidate features.
    rho : float
        Divergence budget (``D_chi2(q || u) = m ||q - u||^2 <= rho``), ``> 0``.
    tol : float, default 1e-10
        Relative bracket width at which the bisection stops.

    Returns
    -------
    ndarray, shape (m,), float64
        The weights q (non-negative, summing to 1). When the ball contains the whole simplex
        (``rho / m >= 1 - 1/m``) this is the vertex at ``argmax v``.

    Raises
    ------
    ValueError
        If ``v`` is not finite or ``rho`` / ``tol`` is not positive.

    References
    ----------
    Sinha and Duchi (2016), "Learning kernels with random features", NeurIPS, Sec. 3;
    docs/specs/attention_reference.md sections 3.2-3.3.
    """
    v = np.asarray(v, dtype=np.float64).ravel()
    if v.size < 1 or not np.isfinite(v).all():
        raise ValueError("v must be a non-empty finite vector")
    rho = check_real("rho", rho, positive=True)
    tol = check_real("tol", tol, positive=True)
    m = v.size
    u = np.full(m, 1.0 / m)
    r = rho / m
    if r >= 1.0 - 1.0 / m:
        q = np.zeros(m)
        q[int(np.argmax(v))] = 1.0
        return q

    def g(lam):
        d = project_simplex(u + v / lam) - u
        return 0.5 * float(d @ d) - 0.5 * r

    lo = hi = 1.0
    if g(1.0) >= 0:
        while g(hi) >= 0:
            lo, hi = hi, 2.0 * hi
    else:
        while g(lo) < 0 and lo > 1e-300:
            hi, lo = lo, 0.5 * lo
    start = hi
    while hi - lo >= tol * start:
        mid = 0.5 * (lo + hi)
        if g(mid) < 0:
            hi = mid
        else:
            lo = mid
    return project_simplex(u + v / hi)


def stratified_indices(q, D: int, rng):
    """D indices drawn from the weights q by stratified (systematic-per-stratum) sampling.

    The k-th index is the inverse CDF of q at ``(k + U_k) / D``, ``U_k ~ U[0, 1)``: every stratum
    of probability 1/D gets one draw, so a weight q_m yields ``floor(D q_m)`` or one more copies
    (repeats are the paper's "padding" when fewer than D candidates carry weight).

    Parameters
    ----------
    q : ndarray, shape (m,), float64
        Non-negative weights summing to 1.
    D : int
        Number of indices, ``>= 1``.
    rng : numpy.random.Generator

    Returns
    -------
    ndarray, shape (D,), int64
    """
    cdf = np.cumsum(np.asarray(q, dtype=np.float64))
    cdf /= cdf[-1]
    return np.minimum(np.searchsorted(cdf, (np.arange(D) + rng.random(D)) / D, side="right"),
                      cdf.size - 1).astype(np.int64)


def sinha_duchi_svm(X_train, y_train, X_test, rng, config):
    """(5) Optimised random features (Sinha and Duchi 2016) + linear SVM (``C = 1``).

    ``N_w = config["sd_candidates"]`` (1e4) candidates ``w ~ N(0, 2 gamma I)``, ``b ~ U[0, 2 pi]``;
    scores ``v = (Phi^T y)^2`` with ``Phi = cos(X W^T + b)`` and labels +-1; weights
    :func:`sinha_duchi_weights` with ``rho = N_w * config["sd_rho_fraction"]`` (0.005) and
    ``tol = config["sd_tol"]`` (1e-10); D features by :func:`stratified_indices`; then
    ``sqrt(2/D) cos(W x + b)`` and a linear SVM.

    Parameters
    ----------
    X_train : ndarray, shape (n_train, p), float64
    y_train : ndarray, shape (n_train,), int64
    X_test : ndarray, shape (n_test, p), float64
    rng : numpy.random.Generator
        Draws W, b and the stratified offsets.
    config : dict
        ``D``, ``gamma``, ``sd_candidates``, ``sd_rho_fraction``, ``sd_tol``.

    Returns
    -------
    ndarray, shape (n_test,), int64

    References
    ----------
    Paper 000, App. F.1.2 (5); Sinha and Duchi (2016), NeurIPS.
    """
    D, gamma, m = int(config["D"]), float(config["gamma"]), int(config["sd_candidates"])
    W = rng.normal(0.0, math.sqrt(2.0 * gamma), size=(m, X_train.shape[1]))
    b = rng.uniform(0.0, 2.0 * math.pi, size=m)
    v = (np.cos(X_train @ W.T + b).T @ (2.0 * y_train - 1.0)) ** 2
    q = sinha_duchi_weights(v, m * float(config["sd_rho_fraction"]), float(config["sd_tol"]))
    idx = stratified_indices(q, D, rng)
    return rff_linear_svm(X_train, y_train, X_test, W[idx], b[idx])


#: Bandwidths of the Gaussian kernels of MKL (4), ``exp(-gamma |x - x'|^2)`` (paper 000, App. F.1.2).
MKL_GAMMAS = (0.1, 0.3, 0.7, 1.0, 1.3, 1.6)


def mkl_memo(gammas=MKL_GAMMAS, learning_rate: float = 1.0, max_iter: int = 100):
    """(4) MKL over Gaussian kernels combined by MEMO (MKLpy), then an SVM (``C = 1``).

    One Gram matrix ``K_g = exp(-g |x - x'|^2)`` (scikit-learn's ``rbf_kernel``, the convention of
    MKLpy's and of :func:`rbf_svm`) per bandwidth ``g`` on the training inputs; MKLpy's ``MEMO``
    learns the weights ``mu`` of ``K = sum_g mu_g K_g``; its base learner, scikit-learn's ``SVC(C =
    1)`` on the precomputed combined kernel, is fitted on it and predicts from the test kernels
    ``exp(-g |x_test - x_train|^2)`` combined with the same weights.

    MEMO's hyper-parameters: ``learning_rate`` (1; MKLpy's default is 0.01), ``max_iter`` (100; its
    default 1000), ``theta = 0`` (its default: no kernel-variance term), ``min_margin = 1e-4``, the
    libsvm margin solver, no scheduler (every step is taken). A step is ``mu <- mu + lr * grad``,
    ``grad_g = (y alpha)^T K_g (y alpha) >= 0`` (``alpha``: the hard-margin dual of the current
    combined kernel), then
    negative entries clipped to 0 and ``mu`` divided by its sum: the weights stay non-negative and
    sum to 1. Why not the default rate: on the benchmark's data (n_train = 280) lr = 0.01 moves
    the weights from the uniform 1/6 to [0.161, 0.169] in 100 steps, far from MEMO's fixed point;
    with lr = 1 the 100 steps reach the weights that lr = 10 and 1000 reach (to 3 decimals, at
    sigma = 1e-5, 1, 100 and 1e5), e.g. [0.116, 0.157, 0.178, 0.182, 0.183, 0.184] at sigma = 1. The
    rate is chosen by that convergence, not by accuracy (docs/synthetic.md). MEMO's debug prints
    (tensor sizes, "ok") are swallowed (``contextlib.redirect_stdout``), and so is torch's
    ``x.T`` deprecation warning raised inside MEMO.

    Needs the optional extra ``mkl`` (MKLpy 0.6, GPL-3.0, and torch; :data:`MKL_INSTALL`).

    Parameters
    ----------
    gammas : tuple of float, default MKL_GAMMAS
        Kernel bandwidths, ``(0.1, 0.3, 0.7, 1.0, 1.3, 1.6)`` in the paper.
    learning_rate : float, default 1.0
        MEMO's step size.
    max_iter : int, default 100
        MEMO's steps.

    Returns
    -------
    callable
        ``fit_predict(X_train, y_train, X_test, rng, config) -> (y_pred, extras)``, ``extras``
        holding ``kernel_weight`` (len(gammas),) and ``kernel_gamma`` (the bandwidths); ``rng`` and
        ``config`` are unused (MEMO is deterministic). It raises :class:`MethodUnavailable` (naming
        :data:`MKL_INSTALL`) when MKLpy or torch cannot be imported.

    References
    ----------
    Paper 000, App. F.1.2 (4); MEMO: ESANN 2018, paper es2018-181 (the reference MKLpy's README
    gives); MKLpy 0.6, ``MKLpy/algorithms/MEMO.py``.
    """
    gammas = tuple(float(g) for g in gammas)

    def fit_predict(X_train, y_train, X_test, rng, config):
        import contextlib
        import io
        import warnings

        try:
            import MKLpy  # noqa: F401 - the extra's marker: GPL-3.0, pulls in torch
            import torch
            from MKLpy.algorithms import MEMO
        except ImportError as e:
            what = ("MKLpy not installed" if isinstance(e, ModuleNotFoundError) and e.name == "MKLpy"
                    else f"MKLpy cannot be imported ({type(e).__name__}: {e})")
            raise MethodUnavailable("mkl_memo", f"{what}: {MKL_INSTALL}") from e
        from sklearn.metrics.pairwise import rbf_kernel
        from sklearn.svm import SVC

        K_train = [torch.from_numpy(rbf_kernel(X_train, X_train, gamma=g)) for g in gammas]
        K_test = [torch.from_numpy(rbf_kernel(X_test, X_train, gamma=g)) for g in gammas]
        mkl = MEMO(learning_rate=learning_rate, max_iter=max_iter, learner=SVC(C=1.0))
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="The use of `x.T` on tensors", category=UserWarning)
            mkl.fit(K_train, torch.from_numpy(np.asarray(y_train, dtype=np.int64)))
            y_pred = np.asarray(mkl.predict(K_test), dtype=np.int64)
        weights = np.asarray(mkl.solution.weights, dtype=np.float64)
        return y_pred, {"kernel_weight": weights, "kernel_gamma": np.asarray(gammas)}

    fit_predict.__doc__ = (f"MKL (MEMO, lr = {learning_rate}, max_iter = {max_iter}) over Gaussian kernels "
                           f"gamma in {gammas}, then an SVM with C = 1 (paper 000, App. F.1.2 (4)).")
    return fit_predict


#: Method name -> ``fit_predict(X_train, y_train, X_test, rng, config)`` returning the test
#: predictions, or ``(predictions, extras)`` with learned arrays to store. Adding a method is one
#: entry here.
METHODS = {
    "logistic": logistic,
    "rbf_svm": rbf_svm(0.5),
    "rbf_svm_gamma0.01": rbf_svm(0.01),
    "rbf_svm_gamma100": rbf_svm(100.0),
    "rff_svm": rff_svm,
    "sinha_duchi_svm": sinha_duchi_svm,
    "langevin_svm": langevin_svm(0.5),
    "langevin_svm_lam0": langevin_svm(0.0),
    "langevin_log": langevin_svm(None, 0.0),      # ablation: lam from the grid, log kernel
    "langevin_riesz": langevin_svm(None, None),   # ablation: lam from the grid, Riesz s = ablation_s
    "mkl_memo": mkl_memo(),                       # optional extra `mkl`: unavailable without MKLpy
}

#: The methods of Fig. 1 and of the runtime law (the ablation-only entries take lam from their
#: grid). ``mkl_memo`` without its extra is recorded as unavailable at no cost.
BENCHMARK_METHODS = ("logistic", "rbf_svm", "rbf_svm_gamma0.01", "rbf_svm_gamma100", "rff_svm",
                     "mkl_memo", "sinha_duchi_svm", "langevin_svm", "langevin_svm_lam0")
