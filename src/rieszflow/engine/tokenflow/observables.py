"""Observables of token flows: energy, clusters, W1, Wendel's probability, the equiangular ODE.

Conventions
-----------
* Tokens ``x`` have shape ``(..., n, d)``; functions that return "one value per
  cloud" return an array of shape ``x.shape[:-2]`` (float64).
* Pair sums run over all **ordered** pairs ``(i, j)``, diagonal included, with
  the mean-field normalisation ``1/n^2`` unless stated (GLPR's ``E_beta[mu]``
  evaluated at the empirical measure ``mu = (1/n) sum_i delta_{x_i}``).
* Pair statistics (minimum inner product, fraction of clustered pairs) use the
  off-diagonal pairs ``i != j`` only.
* W1 uses the Euclidean (l2) ground cost (spec T38), not paper 004's l1 cost.

References
----------
spec paper004_attention_theory.md, sections 6.1 (energy, dissipation identities,
Wendel, equiangular ODE), 6.4 (noisy-USA threshold), 8 (T25-T38);
GLPR, arXiv:2312.10794; Wendel (1962), "A problem in geometric probability";
Flamary et al., POT (ot.emd2, ot.sliced_wasserstein_distance).
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from rieszflow.engine._checks import check_choice, check_int, check_real
from rieszflow.engine.backend import namespace, to_numpy
from rieszflow.engine.measures import W1, resolve_w1_method
from rieszflow.engine.measures import wasserstein1 as _w1
from rieszflow.engine.tokenflow.dynamics import sphere_attention_flow, tangent_projection
from rieszflow.engine.tokenflow.kernels import SoftmaxKernel

__all__ = [
    "interaction_energy",
    "energy_rate",
    "cluster_labels",
    "count_clusters",
    "min_inner_product",
    "diameter",
    "fraction_clustered_pairs",
    "wasserstein1",
    "flow_distance",
    "wendel_probability",
    "in_open_hemisphere",
    "hemisphere_monte_carlo",
    "equiangular_gamma",
    "phase_boundary_time",
    "noisy_usa_critical_kappa",
]


def _tokens(name, x, min_n=1):
    xp = namespace(x)
    x = xp.asarray(x)
    if x.ndim < 2 or x.dtype.kind not in "fiu":
        raise ValueError(f"{name} must be a real array of shape (..., n, d); got shape {tuple(x.shape)}")
    if x.shape[-2] < min_n:
        raise ValueError(f"{name} must hold at least {min_n} tokens; got shape {tuple(x.shape)}")
    if not bool(xp.all(xp.isfinite(x))):         # validation (record time), not inside a step
        raise ValueError(f"{name} contains NaN or inf; tokens must be finite")
    return xp, x.astype(xp.float64, copy=False) if x.dtype.kind in "iu" else x


def _gram_blocks(xp, x, chunk):
    """Yield (a, b, gram block) over row blocks of size chunk: gram = x[a:b] @ x^T (float64)."""
    n = x.shape[-2]
    xt = xp.swapaxes(x, -1, -2).astype(xp.float64, copy=False)
    x64 = x.astype(xp.float64, copy=False)
    for a in range(0, n, chunk):
        b = min(n, a + chunk)
        yield a, b, xp.matmul(x64[..., a:b, :], xt)


def interaction_energy(x, beta: float, *, chunk: int = 256):
    """Interaction energy ``E_beta(x) = (1/(2 beta n^2)) sum_{i,j} exp(beta <x_i, x_j>)``.

    All ordered pairs, diagonal included (GLPR's ``E_beta[mu]`` at the empirical
    measure). Along the USA and SA flows on the sphere with ``Q = K = V = I``
    it is non-decreasing (USA: Euclidean gradient ascent; SA: gradient ascent in
    the ``Zbar``-weighted metric, see :func:`energy_rate`). Its maximum
    ``e^beta / (2 beta)`` is reached exactly at one cluster.

    Parameters
    ----------
    x : array, shape (..., n, d)
        Tokens (on S^{d-1} for the statements above).
    beta : float
        Inverse temperature, ``beta > 0``.
    chunk : int, default 256
        Row block of the Gram matrix (memory O(chunk * n)).

    Returns
    -------
    array, shape x.shape[:-2], float64 (backend of ``x``)

    Raises
    ------
    ValueError
        If ``beta <= 0`` or ``x`` has a bad shape or non-finite entries.

    References
    ----------
    GLPR, arXiv:2312.10794, section 3 (E_beta[mu] = (1/(2 beta)) int int e^{beta <x, x'>});
    spec section 6.1 ("Particle identities") and test T26.
    """
    beta = check_real("beta", beta, positive=True)
    chunk = check_int("chunk", chunk, minimum=1)
    xp, x = _tokens("x", x)
    n = x.shape[-2]
    total = xp.zeros(x.shape[:-2], dtype=xp.float64)
    for _, _, g in _gram_blocks(xp, x, chunk):
        total = total + xp.sum(xp.exp(beta * g), axis=(-2, -1))
    return total / (2.0 * beta * n * n)


def energy_rate(x, beta: float, variant: str = "USA"):
    """Predicted ``dE_beta/dt`` along the sphere flow with ``Q = K = V = I`` (dissipation identity).

    * USA: ``dE/dt = (1/n) sum_i |v_i|^2`` (``v_i = n P^perp grad_{x_i} E``);
    * SA:  ``dE/dt = (1/n) sum_i Zbar_i |v_i|^2``, ``Zbar_i = (1/n) sum_k e^{beta <x_i, x_k>}``
      (``v_i = (n / Zbar_i) P^perp grad_{x_i} E``).

    Both are >= 0, so ``E_beta`` never decreases along either flow.

    Parameters
    ----------
    x : array, shape (..., n, d)
        Tokens on S^{d-1}.
    beta : float
        ``beta > 0``.
    variant : {"SA", "USA"}, default "USA"

    Returns
    -------
    array, shape x.shape[:-2]

    Raises
    ------
    ValueError
        On a bad ``variant``, ``beta`` or ``x``.

    References
    ----------
    spec section 6.1 (particle identities) and test T27; GLPR section 3.
    """
    check_choice("variant", variant, ("SA", "USA"))
    beta = check_real("beta", beta, positive=True)
    xp, x = _tokens("x", x)
    kern = SoftmaxKernel(beta)
    n = x.shape[-2]
    if variant == "USA":
        v = sphere_attention_flow(kern, "USA")(x)
        return xp.sum(v * v, axis=(-2, -1)) / n
    res = kern.attend(x, x, x)
    v = tangent_projection(x, res.out)
    zbar = xp.exp(res.log_zbar)
    return xp.sum(zbar * xp.sum(v * v, axis=-1), axis=-1) / n


def _components(xp, x, eps, metric, chunk):
    """Connected components of the threshold graph of one cloud (host labels, shape (n,))."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    n = x.shape[-2]
    rep = np.arange(n)            # a representative node of each node's current component
    labels = np.arange(n)
    sq = None
    if metric == "euclidean":
        sq = xp.sum(x.astype(xp.float64) ** 2, axis=-1)
    for a, b, g in _gram_blocks(xp, x, chunk):
        if metric == "inner":
            adj = g > 1.0 - eps
        else:
            d2 = sq[a:b, None] + sq[None, :] - 2.0 * g
            adj = d2 < eps * eps
        rows, cols = (to_numpy(t) for t in xp.nonzero(adj))
        rows = rows + a
        # compress: link row i to the representative of each neighbour's component; the
        # links (k, rep[k]) keep the components found in earlier blocks
        pairs = np.unique(np.stack([rows, rep[cols]]), axis=1)
        src = np.concatenate([np.arange(n), pairs[0]])
        dst = np.concatenate([rep, pairs[1]])
        graph = coo_matrix((np.ones(src.size, dtype=np.int8), (src, dst)), shape=(n, n))
        k, labels = connected_components(graph, directed=False)
        first = np.full(k, n)
        np.minimum.at(first, labels, np.arange(n))
        rep = first[labels]
    return labels


def cluster_labels(x, eps: float = 1e-3, *, metric: str = "inner", max_tokens: int = 4096,
                   rng=None, chunk: int = 1024):
    """Cluster labels of one token cloud: connected components of a threshold graph.

    Rule (single linkage): tokens ``i`` and ``j`` are linked if
    ``<x_i, x_j> > 1 - eps`` (``metric="inner"``, for tokens on the sphere; for
    unit vectors this is ``|x_i - x_j| < sqrt(2 eps)``) or ``|x_i - x_j| < eps``
    (``metric="euclidean"``); clusters are the connected components. Chains of
    close tokens therefore form one cluster even if their ends are far apart.

    Parameters
    ----------
    x : array, shape (n, d)
    eps : float, default 1e-3
        Threshold, ``eps > 0`` (1e-3 matches the 0.999 statistic of GLPR's phase diagrams).
    metric : {"inner", "euclidean"}, default "inner"
    max_tokens : int, default 4096
        Above this size the rule is applied to a uniform random subsample of
        ``max_tokens`` tokens (drawn with ``rng``); the returned labels are then
        ``-1`` for tokens left out. Clusters holding fewer than about
        ``n / max_tokens`` tokens may be missed.
    rng : numpy.random.Generator, optional
        For the subsample; default ``numpy.random.default_rng(0)`` (deterministic).
    chunk : int, default 1024
        Row block of the Gram matrix (memory O(chunk * n)).

    Returns
    -------
    labels : numpy.ndarray, shape (n,), int
        Component index in ``0..k-1`` (``-1`` for tokens outside the subsample).

    Raises
    ------
    ValueError
        On a bad shape, non-finite tokens, ``eps <= 0`` or unknown ``metric``.

    References
    ----------
    spec section 6.1 (phase diagram statistic <x_i, x_j> > 0.999); GLPR, section 6.
    """
    eps = check_real("eps", eps, positive=True)
    check_choice("metric", metric, ("inner", "euclidean"))
    max_tokens = check_int("max_tokens", max_tokens, minimum=1)
    chunk = check_int("chunk", chunk, minimum=1)
    xp, x = _tokens("x", x)
    if x.ndim != 2:
        raise ValueError(f"x must have shape (n, d) (one cloud); got {tuple(x.shape)}")
    n = x.shape[0]
    if n <= max_tokens:
        return _components(xp, x, eps, metric, chunk)
    gen = np.random.default_rng(0) if rng is None else rng
    idx = np.sort(gen.choice(n, size=max_tokens, replace=False))
    sub = _components(xp, x[xp.asarray(idx)], eps, metric, chunk)
    labels = np.full(n, -1)
    labels[idx] = sub
    return labels


def count_clusters(x, eps: float = 1e-3, *, metric: str = "inner", max_tokens: int = 4096,
                   rng=None, chunk: int = 1024):
    """Number of clusters (see :func:`cluster_labels` for the rule), one per cloud.

    Parameters
    ----------
    x : array, shape (..., n, d)
        Token clouds, one per leading index.
    eps : float, default 1e-3
        Threshold, ``eps > 0``, as :func:`cluster_labels`.
    metric : {"inner", "euclidean"}, default "inner"
        As :func:`cluster_labels`.
    max_tokens : int, default 4096
        Subsample size above which the rule runs on a random subsample, as :func:`cluster_labels`.
    rng : numpy.random.Generator, optional
        For the subsample, as :func:`cluster_labels`.
    chunk : int, default 1024
        Row block of the Gram matrix, as :func:`cluster_labels`.

    Returns
    -------
    numpy.ndarray of int, shape x.shape[:-2]
        Number of clusters of each cloud.

    References
    ----------
    spec section 6.1.
    """
    xp, x = _tokens("x", x)
    lead = x.shape[:-2]
    flat = x.reshape((-1,) + tuple(x.shape[-2:]))
    out = np.empty(flat.shape[0], dtype=np.int64)
    for b in range(flat.shape[0]):
        lab = cluster_labels(flat[b], eps, metric=metric, max_tokens=max_tokens, rng=rng, chunk=chunk)
        out[b] = np.unique(lab[lab >= 0]).size
    return out.reshape(lead)


def min_inner_product(x, *, chunk: int = 256):
    """Smallest off-diagonal inner product ``min_{i != j} <x_i, x_j>``, one per cloud.

    Parameters
    ----------
    x : array, shape (..., n, d), n >= 2
    chunk : int, default 256

    Returns
    -------
    array, shape x.shape[:-2], float64 (backend of ``x``)

    Raises
    ------
    ValueError
        If ``n < 2`` or ``x`` is malformed.

    References
    ----------
    spec T29 (hemisphere lemma: min_i <x_i, w> is non-decreasing); GLPR section 6.
    """
    chunk = check_int("chunk", chunk, minimum=1)
    xp, x = _tokens("x", x, min_n=2)
    best = None
    for a, b, g in _gram_blocks(xp, x, chunk):
        idx = xp.arange(a, b)
        g = xp.where(idx[:, None] == xp.arange(x.shape[-2])[None, :], xp.inf, g)
        m = xp.min(g, axis=(-2, -1))
        best = m if best is None else xp.minimum(best, m)
    return best


def diameter(x, *, chunk: int = 256):
    """Euclidean diameter ``max_{i, j} |x_i - x_j|``, one per cloud.

    Parameters
    ----------
    x : array, shape (..., n, d)
    chunk : int, default 256

    Returns
    -------
    array, shape x.shape[:-2], float64

    References
    ----------
    spec T29, T31 (log diam(t) linear; final diameter <= 1e-6).
    """
    chunk = check_int("chunk", chunk, minimum=1)
    xp, x = _tokens("x", x)
    x64 = x.astype(xp.float64, copy=False)
    sq = xp.sum(x64 * x64, axis=-1)
    best = xp.zeros(x.shape[:-2], dtype=xp.float64)
    for a, b, g in _gram_blocks(xp, x64, chunk):
        d2 = sq[..., a:b, None] + sq[..., None, :] - 2.0 * g
        best = xp.maximum(best, xp.max(d2, axis=(-2, -1)))
    return xp.sqrt(xp.maximum(best, 0.0))


def fraction_clustered_pairs(x, threshold: float = 0.999, *, chunk: int = 256):
    """Fraction of off-diagonal pairs with ``<x_i, x_j> > threshold``, one per cloud.

    The statistic of GLPR's phase diagrams (``phase-diagrams.py``): over the
    ``n (n - 1)`` ordered pairs ``i != j``.

    Parameters
    ----------
    x : array, shape (..., n, d), n >= 2
    threshold : float, default 0.999
    chunk : int, default 256

    Returns
    -------
    array, shape x.shape[:-2], float64 in [0, 1]

    References
    ----------
    spec section 6.1 ("What their simulations show") and test T33.
    """
    threshold = check_real("threshold", threshold)
    chunk = check_int("chunk", chunk, minimum=1)
    xp, x = _tokens("x", x, min_n=2)
    n = x.shape[-2]
    count = xp.zeros(x.shape[:-2], dtype=xp.float64)
    for a, b, g in _gram_blocks(xp, x, chunk):
        idx = xp.arange(a, b)
        off = idx[:, None] != xp.arange(n)[None, :]
        count = count + xp.sum((g > threshold) & off, axis=(-2, -1))
    return count / (n * (n - 1))


def wasserstein1(x, y, *, method: str = "auto", max_exact: int = 16_000_000,
                 n_projections: int = 256, rng=None, num_itermax: int = 10**7) -> W1:
    """Wasserstein-1 distance between the empirical measures of two token clouds (l2 cost).

    The token-cloud front end of :func:`rieszflow.engine.measures.wasserstein1` (which
    computes it): validates the clouds by name and labels the method used.

    ``W1(mu_x, mu_y)`` with uniform weights ``1/n_x`` and ``1/n_y`` and ground cost
    ``|x - y|_2``, solved exactly by ``ot.emd2(..., numItermax=num_itermax)``; a
    network simplex that stops at the iteration cap (POT's log warning) raises
    rather than returning a non-optimal value. The cost
    matrix comes from ``scipy.spatial.distance.cdist`` rather than
    ``ot.dist(metric="euclidean")``: POT expands ``|a|^2 + |b|^2 - 2 a.b`` and
    takes a square root, which leaves ~1e-8 on zero distances (W1 of a cloud with
    itself came out 4e-9); ``cdist`` is exact to round-off. For large clouds (``n_x * n_y > max_exact``
    with ``method="auto"``) the **sliced** W1 is returned instead
    (``ot.sliced_wasserstein_distance(p=1)``: the mean over random directions of
    the 1-D W1 of the projections); it is a different metric (always ``<=`` W1)
    and is labelled ``"sliced"`` in the result.

    Parameters
    ----------
    x : array, shape (n_x, d)
    y : array, shape (n_y, d)
    method : {"auto", "emd", "sliced"}, default "auto"
    max_exact : int, default 16_000_000
        Largest ``n_x * n_y`` solved exactly by ``"auto"`` (cost matrix of
        8 * max_exact bytes).
    n_projections : int, default 256
        Directions of the sliced distance.
    rng : numpy.random.Generator, optional
        Seeds the sliced directions (default seed 0: deterministic).
    num_itermax : int, default 10**7
        Iteration cap of the exact solver (spec 4.5: at least 1e7).

    Returns
    -------
    W1
        ``(value, method)``.

    Raises
    ------
    ValueError
        On bad shapes (different d), non-finite values, or an unknown method.
    RuntimeError
        If ``ot.emd2`` did not converge (its log carries a warning, e.g. the
        iteration cap ``num_itermax`` was reached).

    References
    ----------
    spec sections 4.5 (POT; numItermax >= 1e7), 7 and test T38; POT documentation.
    """
    check_choice("method", method, ("auto", "emd", "sliced"))
    max_exact = check_int("max_exact", max_exact, minimum=1)
    n_projections = check_int("n_projections", n_projections, minimum=1)
    num_itermax = check_int("num_itermax", num_itermax, minimum=1)
    a = np.asarray(to_numpy(x), dtype=np.float64)
    b = np.asarray(to_numpy(y), dtype=np.float64)
    for name, arr in (("x", a), ("y", b)):
        if arr.ndim != 2 or arr.shape[0] < 1:
            raise ValueError(f"{name} must have shape (n, d) with n >= 1; got {arr.shape}")
        if not np.isfinite(arr).all():
            raise ValueError(f"{name} contains NaN or inf")
    if a.shape[1] != b.shape[1]:
        raise ValueError(f"x and y must have the same dimension d; got {a.shape} and {b.shape}")
    exact = resolve_w1_method(a, b, "exact" if method == "emd" else method, max_exact) == "exact"
    value = _w1(a, b, metric="l2", method="exact" if exact else "sliced", num_itermax=num_itermax,
                n_projections=n_projections, rng=rng)
    return W1(value, "emd" if exact else "sliced")


def flow_distance(traj_a, traj_b, *, method: str = "auto", max_exact: int = 16_000_000,
                  n_projections: int = 256, rng=None) -> dict:
    """Distance over time between two recorded flows (e.g. softmax vs its linear approximation).

    Parameters
    ----------
    traj_a, traj_b : array, shape (n_rec, n, d) (same n_rec; n may differ for W1)
        Recorded tokens at the same times (``FlowResult.x``).
    method : {"auto", "emd", "sliced"}, default "auto"
        Passed to :func:`wasserstein1`.
    max_exact : int, default 16_000_000
        Largest ``n_x * n_y`` solved exactly by ``"auto"``; passed to :func:`wasserstein1`.
    n_projections : int, default 256
        Directions of the sliced distance; passed to :func:`wasserstein1`.
    rng : numpy.random.Generator, optional
        Seeds the sliced directions; passed to :func:`wasserstein1`.

    Returns
    -------
    dict
        ``"w1"`` (n_rec,) W1 between the empirical measures;
        ``"w1_method"`` str;
        ``"coupled_mean"`` (n_rec,) ``(1/n) sum_i |a_i - b_i|`` (identity
        coupling, an upper bound on W1; only when both flows have the same n and
        started from the same tokens, else NaN);
        ``"coupled_max"`` (n_rec,) ``max_i |a_i - b_i|`` (same condition).

    Raises
    ------
    ValueError
        If the trajectories have different numbers of records or dimensions.

    References
    ----------
    spec section 6.4 ("Learned linear attention (K3) against softmax"), section 4.5 (brackets).
    """
    a = np.asarray(to_numpy(traj_a), dtype=np.float64)
    b = np.asarray(to_numpy(traj_b), dtype=np.float64)
    if a.ndim != 3 or b.ndim != 3 or a.shape[0] != b.shape[0] or a.shape[2] != b.shape[2]:
        raise ValueError(f"traj_a and traj_b must have shapes (n_rec, n, d) with equal n_rec and d; "
                         f"got {a.shape} and {b.shape}")
    w, meths = [], set()
    for t in range(a.shape[0]):
        r = wasserstein1(a[t], b[t], method=method, max_exact=max_exact,
                         n_projections=n_projections, rng=rng)
        w.append(r.value)
        meths.add(r.method)
    if a.shape[1] == b.shape[1]:
        dist = np.linalg.norm(a - b, axis=-1)
        cm, cx = dist.mean(axis=1), dist.max(axis=1)
    else:
        cm = cx = np.full(a.shape[0], np.nan)
    return {"w1": np.asarray(w), "w1_method": "+".join(sorted(meths)), "coupled_mean": cm,
            "coupled_max": cx}


def wendel_probability(n: int, d: int, *, exact: bool = False):
    """Probability that ``n`` i.i.d. uniform points on S^{d-1} lie in an open hemisphere.

    ``p(n, d) = 2^{-(n-1)} sum_{k=0}^{d-1} C(n-1, k)`` (Wendel 1962); equal to 1
    for ``n <= d``; ``p(n, 2) = n / 2^{n-1}``. Any symmetric law with points in
    general position gives the same value. By GLPR's hemisphere lemma, a
    configuration in an open hemisphere clusters exponentially fast (SA and
    USA, any beta > 0, V = I), so ``p(n, d)`` is a lower bound on the
    probability of exponential single-cluster convergence from a uniform start
    (GLPR's d >= n theorem is the case ``p = 1``).

    Parameters
    ----------
    n : int
        Number of points, ``n >= 1``.
    d : int
        Ambient dimension, ``d >= 1`` (points on S^{d-1}).
    exact : bool, default False
        Return a :class:`fractions.Fraction` instead of a float.

    Returns
    -------
    float or Fraction

    Raises
    ------
    TypeError, ValueError
        If ``n`` or ``d`` is not an integer >= 1.

    References
    ----------
    Wendel (1962), Math. Scand. 10:109-111; GLPR, arXiv:2312.10794, remark r:wendel and
    lemma lem:hemisphere.clustering; spec section 6.1 and test T30.
    """
    n = check_int("n", n, minimum=1)
    d = check_int("d", d, minimum=1)
    num = sum(math.comb(n - 1, k) for k in range(0, d))
    p = Fraction(num, 2 ** (n - 1))
    return p if exact else float(p)


def _hemisphere_rays(x):
    """Open-hemisphere test by enumerating extreme rays (generic points). x: (B, n, d) -> (B,)."""
    from itertools import combinations

    bsz, n, d = x.shape
    if n <= d:
        return np.ones(bsz, dtype=bool)
    if d == 1:                    # S^0 = {-1, +1}: in an open half-line iff all signs agree
        s = np.sign(x[..., 0])
        return np.all(s > 0, axis=1) | np.all(s < 0, axis=1)
    subsets = np.array(list(combinations(range(n), d - 1)), dtype=np.int64).reshape(-1, d - 1)
    out = np.zeros(bsz, dtype=bool)
    for lo in range(0, subsets.shape[0], 512):
        sub = subsets[lo:lo + 512]                                  # (S, d-1)
        rows = x[:, sub, :]                                         # (B, S, d-1, d)
        _, _, vt = np.linalg.svd(rows, full_matrices=True)
        w = vt[..., -1, :]                                          # (B, S, d): normal to the d-1 points
        proj = np.einsum("bnd,bsd->bsn", x, w)                      # (B, S, n)
        mask = np.ones((sub.shape[0], n), dtype=bool)
        mask[np.arange(sub.shape[0])[:, None], sub] = False
        pos = np.all((proj > 0) | ~mask[None], axis=2)
        neg = np.all((proj < 0) | ~mask[None], axis=2)
        out |= np.any(pos | neg, axis=1)
    return out


def _hemisphere_lp(x):
    """Open-hemisphere test by LP feasibility (HiGHS): exists w with X w >= 1. x: (B, n, d)."""
    from scipy.optimize import linprog

    bsz, n, d = x.shape
    out = np.empty(bsz, dtype=bool)
    for b in range(bsz):
        res = linprog(np.zeros(d), A_ub=-x[b], b_ub=-np.ones(n), bounds=[(None, None)] * d,
                      method="highs")
        if res.status not in (0, 2):
            raise RuntimeError(f"linprog failed on draw {b}: status {res.status}, {res.message}")
        out[b] = res.status == 0
    return out


def in_open_hemisphere(x, *, method: str = "rays"):
    """Whether each token cloud lies in an open hemisphere (``exists w: <x_i, w> > 0 for all i``).

    Parameters
    ----------
    x : array, shape (..., n, d)
        Points (norms are irrelevant).
    method : {"rays", "lp"}, default "rays"
        ``"lp"``: LP feasibility ``X w >= 1`` with SciPy's HiGHS (exact, one LP per
        cloud, the spec's method). ``"rays"``: vectorised enumeration of the
        ``C(n, d-1)`` candidate extreme rays of the cone ``{w : X w >= 0}`` (the
        normal to every ``d-1`` of the points), exact for points in general
        position (probability 1 for continuous laws); cost grows like ``C(n, d-1)``.
        For ``d = 1`` (S^0 = {-1, +1}) both reduce to "all signs agree".

    Returns
    -------
    numpy.ndarray of bool, shape x.shape[:-2]

    Raises
    ------
    ValueError
        On a bad shape, non-finite values or unknown method.

    References
    ----------
    spec test T30 ("LP hemisphere test (HiGHS: exists w, Xw >= 1)"); Wendel (1962).
    """
    check_choice("method", method, ("rays", "lp"))
    a = np.asarray(to_numpy(x), dtype=np.float64)
    if a.ndim < 2:
        raise ValueError(f"x must have shape (..., n, d); got {a.shape}")
    if not np.isfinite(a).all():
        raise ValueError("x contains NaN or inf")
    lead = a.shape[:-2]
    flat = a.reshape((-1,) + a.shape[-2:])
    out = _hemisphere_rays(flat) if method == "rays" else _hemisphere_lp(flat)
    return out.reshape(lead)


def hemisphere_monte_carlo(n: int, d: int, draws: int, rng, *, method: str = "rays"):
    """Monte Carlo estimate of Wendel's probability with its standard error.

    Draws ``draws`` clouds of ``n`` i.i.d. uniform points on S^{d-1} (normalised
    Gaussians from ``rng``) and tests each with :func:`in_open_hemisphere`.

    Parameters
    ----------
    n, d : int
        ``n >= 1``, ``d >= 1``.
    draws : int
        ``>= 1``.
    rng : numpy.random.Generator
    method : {"rays", "lp"}, default "rays"

    Returns
    -------
    p_hat : float
        Fraction of clouds in an open hemisphere.
    se : float
        Binomial standard error ``sqrt(p (1 - p) / draws)`` at ``p = wendel_probability(n, d)``
        (the null hypothesis' SE, so a 3-SE test has the stated level).

    Raises
    ------
    TypeError
        If ``rng`` is not a numpy Generator.

    References
    ----------
    spec test T30 (4000 draws, within 3 SE).
    """
    n = check_int("n", n, minimum=1)
    d = check_int("d", d, minimum=1)
    draws = check_int("draws", draws, minimum=1)
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    x = rng.standard_normal((draws, n, d))
    hits = in_open_hemisphere(x, method=method)
    p = wendel_probability(n, d)
    return float(hits.mean()), math.sqrt(p * (1.0 - p) / draws)


def _gamma_rhs(n, beta, variant):
    if variant == "SA":
        def rhs(_t, g):
            e = math.exp(beta * g[0])
            return [2.0 * e * (1.0 - g[0]) * ((n - 1) * g[0] + 1.0) / (math.exp(beta) + (n - 1) * e)]
    else:
        def rhs(_t, g):
            return [(2.0 / n) * math.exp(beta * g[0]) * (1.0 - g[0]) * ((n - 1) * g[0] + 1.0)]
    return rhs


def equiangular_gamma(t, n: int, beta: float, variant: str = "SA", *, rtol: float = 1e-12,
                      atol: float = 1e-14):
    """Pairwise inner product ``gamma(t)`` of the orthogonal (equiangular) initialisation.

    For ``n <= d`` tokens starting pairwise orthogonal (``gamma(0) = 0``), the
    configuration stays equiangular under SA/USA with ``Q = K = V = I`` and

    * SA:  ``gamma' = 2 e^{beta gamma} (1 - gamma)((n-1) gamma + 1) / (e^beta + (n-1) e^{beta gamma})``
    * USA: ``gamma' = (2/n) e^{beta gamma} (1 - gamma)((n-1) gamma + 1)``.

    Parameters
    ----------
    t : array_like of float, shape (k,)
        Non-negative, increasing times.
    n : int
        Number of tokens, ``n >= 2``.
    beta : float
        ``beta >= 0``.
    variant : {"SA", "USA"}, default "SA"
    rtol, atol : float
        ``scipy.integrate.solve_ivp`` (DOP853) tolerances.

    Returns
    -------
    numpy.ndarray, shape (k,)

    Raises
    ------
    ValueError
        On bad ``t``, ``n``, ``beta`` or ``variant``, or if the ODE solver fails.

    References
    ----------
    GLPR, thm:orthogonal; spec section 6.1 (scalar ODEs, re-derived) and test T25.
    """
    from scipy.integrate import solve_ivp

    check_choice("variant", variant, ("SA", "USA"))
    n = check_int("n", n, minimum=2)
    beta = check_real("beta", beta, nonnegative=True)
    ts = np.atleast_1d(np.asarray(t, dtype=np.float64))
    if ts.ndim != 1 or not np.isfinite(ts).all() or (ts < 0).any() or np.any(np.diff(ts) < 0):
        raise ValueError(f"t must be finite, >= 0 and non-decreasing; got {t!r}")
    if ts[-1] == 0:
        return np.zeros_like(ts)
    sol = solve_ivp(_gamma_rhs(n, beta, variant), (0.0, ts[-1]), [0.0], t_eval=ts, method="DOP853",
                    rtol=rtol, atol=atol)
    if not sol.success:
        raise ValueError(f"equiangular ODE solver failed: {sol.message}")
    return sol.y[0]


def phase_boundary_time(beta: float, n: int, delta: float = 1e-3, variant: str = "SA",
                        *, t_max: float = 1e6) -> float:
    """Time at which the equiangular ODE reaches ``gamma_beta(t) = 1 - delta``.

    GLPR's phase-transition curve ``Gamma_{infinity, delta} = {(t, beta): gamma_beta(t) = 1 - delta}``
    (large-d limit of i.i.d. uniform initialisations).

    Parameters
    ----------
    beta : float, ``>= 0``
    n : int, ``>= 2``
    delta : float, default 1e-3
        In (0, 1).
    variant : {"SA", "USA"}, default "SA"
    t_max : float, default 1e6
        Integration horizon; ``inf`` is returned if the level is not reached.

    Returns
    -------
    float

    References
    ----------
    GLPR, thm:phase.transition.curve and curve.ipynb; spec test T33.
    """
    from scipy.integrate import solve_ivp

    check_choice("variant", variant, ("SA", "USA"))
    n = check_int("n", n, minimum=2)
    beta = check_real("beta", beta, nonnegative=True)
    delta = check_real("delta", delta, positive=True)
    if delta >= 1:
        raise ValueError(f"delta must lie in (0, 1); got {delta}")
    t_max = check_real("t_max", t_max, positive=True)

    def hit(_t, g):
        return g[0] - (1.0 - delta)

    hit.terminal = True
    hit.direction = 1
    sol = solve_ivp(_gamma_rhs(n, beta, variant), (0.0, t_max), [0.0], events=hit, method="DOP853",
                    rtol=1e-10, atol=1e-13)
    if sol.t_events[0].size == 0:
        return math.inf
    return float(sol.t_events[0][0])


def noisy_usa_critical_kappa(beta: float, d: int) -> float:
    """Linear-stability threshold ``kappa_c = 1/lambda_1`` of the uniform law for noisy USA.

    ``lambda_1(beta, d) = Gamma(d/2) (2/beta)^{d/2 - 1} I_{d/2}(beta) / beta`` (Funk-Hecke,
    l = 1 mode of the kernel ``e^{beta <x, y>} / beta`` on S^{d-1}); ``kappa_c -> d``
    as ``beta -> 0``. Evaluated with the exponentially scaled Bessel function.

    Parameters
    ----------
    beta : float, ``> 0``
    d : int, ``>= 2``

    Returns
    -------
    float

    References
    ----------
    spec section 6.4 ("Gibbs/LDP (noisy USA)") and test T37.
    """
    from scipy.special import gammaln, ive

    beta = check_real("beta", beta, positive=True)
    d = check_int("d", d, minimum=2)
    log_lam = (gammaln(d / 2.0) + (d / 2.0 - 1.0) * math.log(2.0 / beta)
               + math.log(ive(d / 2.0, beta)) + beta - math.log(beta))
    return math.exp(-log_lam)
