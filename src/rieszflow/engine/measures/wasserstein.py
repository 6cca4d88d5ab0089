"""Wasserstein-1 between measures on R^d: :func:`wasserstein1` (exact optimal transport, exact CDF
formula in 1-D, or sliced), its ground cost and the choice of method by problem size."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from rieszflow.engine._checks import check_choice, check_int
from rieszflow.engine.backend import to_numpy
from rieszflow.engine.measures.empirical import _CDIST_METRIC, METRICS, EmpiricalMeasure

__all__ = ["W1", "ground_cost", "wasserstein1", "resolve_w1_method"]


class W1(NamedTuple):
    """A Wasserstein-1 value and the method that produced it.

    Parameters
    ----------
    value : float
        The distance (>= 0), in the units of the points.
    method : str
        How it was computed, as the caller labels it: exact optimal transport
        (``"exact"``, or ``"emd"`` in the token-flow observables) or ``"sliced"``
        (sliced W1, a different metric, ``<=`` W1).
    """

    value: float
    method: str


def ground_cost(x, y, metric: str = "l2") -> np.ndarray:
    """Cost matrix C_ij = |x_i - y_j| for optimal transport, exact at zero distance.

    Parameters
    ----------
    x : array, shape (n, d)
    y : array, shape (m, d)
    metric : {"l1", "l2"}, default "l2"
        |.|_1 or the Euclidean norm.

    Returns
    -------
    numpy.ndarray, shape (n, m), float64
        From ``scipy.spatial.distance.cdist``, which evaluates each difference
        directly (no |a|^2 + |b|^2 - 2 a.b expansion), so equal points cost 0.

    Raises
    ------
    ValueError
        On an unknown metric or shapes that do not match.
    """
    from scipy.spatial.distance import cdist

    check_choice("metric", metric, METRICS)
    a = np.asarray(to_numpy(x), dtype=np.float64)
    b = np.asarray(to_numpy(y), dtype=np.float64)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"x and y must have shapes (n, d) and (m, d), got {a.shape} and {b.shape}")
    return cdist(a, b, metric=_CDIST_METRIC[metric])


def _measure(name, mu):
    """An EmpiricalMeasure from a measure or a (N, d) point array (uniform weights)."""
    if isinstance(mu, EmpiricalMeasure):
        return mu
    try:
        return EmpiricalMeasure.uniform(mu)
    except ValueError as e:
        raise ValueError(f"{name}: {e}") from None


def _emd_w1(x, a, y, b, metric: str, num_itermax: int) -> float:
    """Exact W1 between weighted clouds (host arrays) by POT's network simplex."""
    import ot

    value, log = ot.emd2(a, b, ground_cost(x, y, metric), numItermax=int(num_itermax), log=True)
    if log.get("result_code", 1) != 1 or log.get("warning") is not None:
        raise RuntimeError(f"ot.emd2 did not converge for clouds of {x.shape[0]} and {y.shape[0]} "
                           f"points ({log.get('warning')}); raise num_itermax (got {num_itermax}) "
                           f"or use method='sliced'")
    return float(value)


def wasserstein1(mu, nu, *, metric: str = "l2", method: str = "exact",
                 num_itermax: int = 10_000_000, max_exact: int = 16_000_000,
                 n_projections: int = 256, rng=None) -> float:
    """Wasserstein-1 distance between two empirical measures.

    Parameters
    ----------
    mu, nu : EmpiricalMeasure or array, shape (N, d)
        The measures (an array stands for its uniform empirical measure). Same d; any
        numbers of atoms.
    metric : {"l1", "l2"}, default "l2"
        Ground cost |x - y|_1 (paper 004's) or |x - y|_2.
    method : {"exact", "sliced", "auto"}, default "exact"
        ``"exact"``: for d = 1 the sorted-CDF formula (``ot.wasserstein_1d``; both
        metrics coincide), otherwise ``ot.emd2`` on :func:`ground_cost`.
        ``"sliced"``: the sliced W1 (mean over random directions of the 1-D W1 of the
        projections, ``ot.sliced_wasserstein_distance(p=1)``, Euclidean geometry);
        a different metric, always <= the l2 W1. ``"auto"``: exact when
        ``N_mu * N_nu <= max_exact``, else sliced. Use :func:`resolve_w1_method` to
        know which one ``"auto"`` picks.
    num_itermax : int, default 1e7
        Network-simplex iteration cap (POT's default 1e5 silently stops short for
        N ~ 3000).
    max_exact : int, default 16_000_000
        Largest ``N_mu * N_nu`` that ``"auto"`` solves exactly (cost matrix of
        8 * max_exact bytes).
    n_projections : int, default 256
        Directions of the sliced distance.
    rng : numpy.random.Generator, optional
        Seeds the sliced directions (default seed 0: deterministic).

    Returns
    -------
    float
        The distance, >= 0, in the units of the points.

    Raises
    ------
    ValueError
        On a dimension mismatch, an unknown metric or method, or invalid measures.
    RuntimeError
        If the network simplex reports that it did not reach optimality.

    References
    ----------
    Villani (2009), ch. 6; paper 004, section 4 ("Background", W1 with cost |x - y|_1);
    docs/specs/paper004_attention_theory.md section 4.5 (POT, numItermax >= 1e7).
    """
    import ot

    check_choice("metric", metric, METRICS)
    method = resolve_w1_method(mu, nu, method, max_exact)
    num_itermax = check_int("num_itermax", num_itermax, minimum=1)
    n_projections = check_int("n_projections", n_projections, minimum=1)
    mu, nu = _measure("mu", mu), _measure("nu", nu)
    if mu.dim != nu.dim:
        raise ValueError(f"mu and nu live in different dimensions: {mu.dim} vs {nu.dim}")
    X, Y = to_numpy(mu.points), to_numpy(nu.points)
    a, b = to_numpy(mu.weights), to_numpy(nu.weights)
    if method == "sliced":
        seed = 0 if rng is None else int(rng.integers(2**31 - 1))
        return float(ot.sliced_wasserstein_distance(X, Y, a, b, n_projections=n_projections, p=1,
                                                    seed=seed))
    if mu.dim == 1:
        return float(ot.wasserstein_1d(X[:, 0], Y[:, 0], a, b, p=1))
    return _emd_w1(X, a, Y, b, metric, num_itermax)


def resolve_w1_method(mu, nu, method: str = "auto", max_exact: int = 16_000_000) -> str:
    """The method :func:`wasserstein1` uses: ``"exact"`` or ``"sliced"``.

    Parameters
    ----------
    mu, nu : EmpiricalMeasure or array, shape (N, d)
        The measures (only their numbers of atoms are read).
    method : {"exact", "sliced", "auto"}, default "auto"
        As in :func:`wasserstein1`.
    max_exact : int, default 16_000_000
        Largest ``N_mu * N_nu`` solved exactly by ``"auto"``.

    Returns
    -------
    str
        ``"exact"`` or ``"sliced"``.

    Raises
    ------
    ValueError
        If ``method`` is unknown or ``max_exact < 1``.
    """
    check_choice("method", method, ("exact", "sliced", "auto"))
    max_exact = check_int("max_exact", max_exact, minimum=1)
    if method != "auto":
        return method

    def n_of(m):
        return m.n_atoms if isinstance(m, EmpiricalMeasure) else int(np.shape(m)[0])

    return "exact" if n_of(mu) * n_of(nu) <= max_exact else "sliced"
