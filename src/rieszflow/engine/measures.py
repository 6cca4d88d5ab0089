"""Empirical measures, Wasserstein-1 distances and MMD: the one home of all three in rieszflow.

Every study and every theory module that compares measures uses this module:
the particle clouds of the McKean-Vlasov study against the PDE density, the
token clouds of the attention flows, and the measure-theoretic attention of
paper 004.

Measures
--------
:class:`EmpiricalMeasure` is a finitely supported probability measure
:math:`\\mu = \\sum_j w_j \\delta_{y_j}` on :math:`\\mathbb R^d` (NumPy or CuPy arrays);
:class:`AtomicMeasure1D` and :class:`CellMeasure1D` are the two kinds of 1-D
measures whose CDFs are linear between breakpoints (atoms; a piecewise-constant
density on cells).

W1 in any dimension
-------------------
:func:`wasserstein1` is exact optimal transport (``ot.emd2``, network simplex,
``numItermax`` 1e7, non-convergence raises) with the ground cost from
``scipy.spatial.distance.cdist``, so a zero distance costs exactly 0 (POT's
``ot.dist(metric="euclidean")`` expands :math:`|a|^2 + |b|^2 - 2 a\\cdot b` and leaves
~1e-8 there: W1 of a cloud with itself came out 4e-9). In 1-D it uses the
exact CDF formula instead. ``method="sliced"`` is the sliced W1 (a different
metric, always <= W1), ``method="auto"`` switches to it above a problem size.

W1 in 1-D: exact
----------------
:math:`W_1(\\mu, \\nu) = \\int |F_\\mu(x) - F_\\nu(x)|\\,dx` (Vallender 1973). Both
measures here have CDFs that are *linear between breakpoints*: an empirical
measure (atoms, a step CDF) and a piecewise-constant density on cells (a
piecewise-linear CDF). On every interval between consecutive merged
breakpoints the difference :math:`D = F_\\mu - F_\\nu` is therefore linear, from
its right limit at the left end to its left limit at the right end, and
:math:`\\int|D|` has a closed form (with the sign change handled). The result is
exact up to round-off; no binning, no sampling of the PDE density.

W1 on a grid (2-D)
------------------
Particles binned to the cells of a uniform PDE grid and :math:`W_1` with the
Euclidean ground cost between the two histograms on the cell centres
(:func:`wasserstein1_grid`): the exact :math:`W_1` between the two measures
*quantised to the grid*. By the triangle inequality it differs from
:math:`W_1(\\mu_N, \\rho)` by at most twice the quantisation distance (at most
:math:`0.383\\,h` on average for a uniform density on square cells of side h,
:func:`quantisation_bound`), and it cannot resolve sampling fluctuations below
the scale h.

MMD
---
:func:`mmd2` is the unbiased estimate (U-statistic) of the squared maximum mean
discrepancy with a Gaussian kernel between two point clouds, with a two-sample
jackknife standard error; :func:`median_bandwidth` is the median heuristic for its
bandwidth.

References
----------
Gretton et al., "A kernel two-sample test", JMLR 13 (2012) 723-773 (MMD, eq. (3), Lemma 6);
Villani, *Optimal Transport: Old and New* (2009), ch. 6 (W1, Kantorovich-Rubinstein);
Fournier and Guillin, PTRF 162 (2015) 707-738 (rates of empirical measures);
Flamary et al., "POT: Python Optimal Transport", JMLR 22(78) 2021;
paper 004 ("A Mathematical Theory of Attention", arXiv:2007.02876), section 3.1
(m(X) = (1/N) sum_i delta_{x_i}) and section 4 (W1 with cost |x - y|_1);
docs/specs/particles_pde_reference.md sec. 4.1 (tools and timings).
"""
from __future__ import annotations

import dataclasses
from typing import Callable, NamedTuple

import numpy as np

from rieszflow.engine._checks import check_choice, check_int, check_real
from rieszflow.engine.backend import namespace, to_numpy

__all__ = [
    "METRICS",
    "EmpiricalMeasure",
    "empirical_measure",
    "W1",
    "ground_cost",
    "wasserstein1",
    "resolve_w1_method",
    "AtomicMeasure1D",
    "CellMeasure1D",
    "wasserstein1_1d",
    "bin_to_grid",
    "wasserstein1_points",
    "wasserstein1_grid",
    "quantisation_bound",
    "sample_cells",
    "MMD",
    "median_bandwidth",
    "mmd2",
    "mmd2_weighted",
]


def _finite_1d(name, v):
    v = np.asarray(v, dtype=np.float64)
    if v.ndim != 1 or v.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D array, got shape {v.shape}")
    if not np.isfinite(v).all():
        raise ValueError(f"{name} contains non-finite entries (NaN or inf)")
    return v


def _weights(name, w, n):
    if w is None:
        return np.full(n, 1.0 / n)
    w = _finite_1d(name, w)
    if w.size != n:
        raise ValueError(f"{name} must have length {n}, got {w.size}")
    if (w < 0).any():
        raise ValueError(f"{name} must be >= 0, got min {w.min()}")
    total = w.sum()
    if not abs(total - 1.0) <= 1e-9:
        raise ValueError(f"{name} must sum to 1 (a probability measure), got {total!r}")
    return w


#: Ground metrics of :func:`wasserstein1`: ``"l1"`` (|x - y|_1, paper 004's) and ``"l2"`` (Euclidean).
METRICS = ("l1", "l2")

_CDIST_METRIC = {"l1": "cityblock", "l2": "euclidean"}


def _as_points(name: str, a):
    """A finite float64 array of shape (N, d), kept in its own namespace (NumPy or CuPy)."""
    xp = namespace(a)
    arr = np.asarray(a, dtype=np.float64) if xp is np else a.astype(xp.float64, copy=False)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array of shape (N, d), got shape {tuple(arr.shape)}")
    if not bool(xp.all(xp.isfinite(arr))):
        raise ValueError(f"{name} contains NaN or inf; all entries must be finite")
    return arr


@dataclasses.dataclass(frozen=True, eq=False)
class EmpiricalMeasure:
    """A finitely supported probability measure mu = sum_j w_j delta_{y_j} on R^d.

    Parameters
    ----------
    points : array, shape (N, d), float64
        Atom locations (particles, tokens). Duplicated rows are allowed (token sets
        are multisets); :meth:`dedupe` merges them into weights. NumPy or CuPy.
    weights : array, shape (N,), float64
        Non-negative masses summing to 1 (within 1e-12). They are never renormalised
        silently.

    Raises
    ------
    ValueError
        If shapes disagree, N = 0, an entry is NaN/inf, a weight is negative, or the
        weights do not sum to 1.

    References
    ----------
    Paper 004 ("A Mathematical Theory of Attention", arXiv:2007.02876), section 3.1
    (m(X) = (1/N) sum_i delta_{x_i}); paper 000, eq. (2.1) (the empirical measure of
    the feature particles).
    """

    points: object
    weights: object

    def __post_init__(self):
        pts = _as_points("points", self.points)
        xp = namespace(pts)
        w = xp.asarray(self.weights, dtype=xp.float64)
        if w.ndim != 1 or w.shape[0] != pts.shape[0]:
            raise ValueError(f"weights must have shape ({pts.shape[0]},) to match points "
                             f"{tuple(pts.shape)}, got {tuple(w.shape)}")
        if pts.shape[0] == 0:
            raise ValueError("points must hold at least one atom, got N = 0")
        if not bool(xp.all(xp.isfinite(w))):
            raise ValueError("weights contain NaN or inf")
        if bool(xp.any(w < 0)):
            raise ValueError(f"weights must be >= 0, got min {float(w.min())!r}")
        total = float(w.sum())
        if abs(total - 1.0) > 1e-12:
            raise ValueError(f"weights must sum to 1 (probability measure), got sum {total!r}; "
                             f"normalise them explicitly")
        object.__setattr__(self, "points", pts)
        object.__setattr__(self, "weights", w)

    @classmethod
    def uniform(cls, points) -> "EmpiricalMeasure":
        """The empirical measure m(X) = (1/N) sum_i delta_{x_i} of a point set.

        Parameters
        ----------
        points : array, shape (N, d), float64
            The atoms, N >= 1.

        Returns
        -------
        EmpiricalMeasure
            Uniform weights 1/N.

        Raises
        ------
        ValueError
            If ``points`` is not a finite (N, d) array with N >= 1.

        References
        ----------
        Paper 004, section 3.1.
        """
        pts = _as_points("points", points)
        xp = namespace(pts)
        n = pts.shape[0]
        if n == 0:
            raise ValueError("points must hold at least one atom, got N = 0")
        return cls(pts, xp.full((n,), 1.0 / n))

    @property
    def n_atoms(self) -> int:
        """Number of atoms N (duplicates counted)."""
        return int(self.points.shape[0])

    @property
    def dim(self) -> int:
        """Dimension d of the space."""
        return int(self.points.shape[1])

    def mean(self):
        """First moment mu(F), F = id: array of shape (d,) (paper 004 eq. (2)).

        Returns
        -------
        array, shape (d,)
            :math:`\\sum_i w_i x_i`, on the backend of ``points``.
        """
        return self.weights @ self.points

    def integrate(self, fn) -> float:
        """The integral mu(fn) = sum_i w_i fn(x_i).

        Parameters
        ----------
        fn : callable
            Acts row-wise: an (N, d) array to an (N,) array.

        Returns
        -------
        float
            The integral, on the host.
        """
        return float(to_numpy(self.weights @ fn(self.points)))

    def push(self, fn: Callable) -> "EmpiricalMeasure":
        """Push-forward fn_# mu: atoms moved by ``fn`` (shape (N, d) -> (N, d')), weights kept.

        Parameters
        ----------
        fn : callable
            Vectorised map from an (N, d) array to an (N, d') array.

        Returns
        -------
        EmpiricalMeasure
        """
        return EmpiricalMeasure(fn(self.points), self.weights)

    def dedupe(self, marks=None):
        """Merge atoms with identical coordinates (and identical marks) into one weighted atom.

        Parameters
        ----------
        marks : array, shape (N, m), optional
            Data attached to each atom (e.g. the values of a key/value table). Two atoms merge
            only if both their points and their marks agree exactly.

        Returns
        -------
        EmpiricalMeasure or (EmpiricalMeasure, array)
            The merged measure with atoms sorted lexicographically (and the merged marks when
            ``marks`` is given). Exact equality is used, so m(X u X) and m(X) dedupe to the
            same arrays.

        Raises
        ------
        ValueError
            If ``marks`` does not have one row per atom.

        References
        ----------
        Paper 004, section 3.1 (token sets as measures: duplicates become weights);
        docs/specs/paper004_attention_theory.md, section 1 and test T05.
        """
        xp = namespace(self.points)
        key = self.points
        if marks is not None:
            marks = _as_points("marks", marks)
            if marks.shape[0] != self.n_atoms:
                raise ValueError(f"marks must have {self.n_atoms} rows, got {marks.shape[0]}")
            key = xp.concatenate([self.points, marks], axis=1)
        order = xp.lexsort(key.T[::-1])
        ks = key[order]
        ws = self.weights[order]
        new = xp.ones(ks.shape[0], dtype=bool)
        new[1:] = xp.any(ks[1:] != ks[:-1], axis=1)
        starts = xp.nonzero(new)[0]
        csum = xp.concatenate([xp.zeros(1), xp.cumsum(ws)])
        ends = xp.concatenate([starts[1:], xp.asarray([ks.shape[0]])])
        merged_w = csum[ends] - csum[starts]
        merged_w = merged_w / merged_w.sum()
        d = self.dim
        mu = EmpiricalMeasure(ks[starts, :d], merged_w)
        if marks is None:
            return mu
        return mu, ks[starts, d:]


def empirical_measure(points, weights=None) -> EmpiricalMeasure:
    """Build an :class:`EmpiricalMeasure`; uniform weights m(X) when ``weights`` is None.

    Parameters
    ----------
    points : array, shape (N, d), float64
        The atoms (NumPy or CuPy).
    weights : array, shape (N,), float64, optional
        Non-negative, summing to 1 (to 1e-12); default uniform 1/N.

    Returns
    -------
    EmpiricalMeasure

    Raises
    ------
    ValueError
        On a bad shape, non-finite entries, negative weights, or weights not summing to 1.

    References
    ----------
    Paper 004, section 3.1.
    """
    if weights is None:
        return EmpiricalMeasure.uniform(points)
    return EmpiricalMeasure(points, weights)


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


@dataclasses.dataclass(frozen=True, eq=False)
class AtomicMeasure1D:
    """A discrete probability measure :math:`\\sum_k w_k \\delta_{x_k}` on the line.

    Parameters
    ----------
    x : array_like, shape (n,)
        Atom positions (finite).
    weights : array_like, shape (n,), optional
        Non-negative weights summing to 1; default uniform (the empirical measure).

    Raises
    ------
    ValueError
        On non-finite positions or weights that are negative or do not sum to 1.
    """

    x: np.ndarray
    weights: np.ndarray | None = None

    def __post_init__(self):
        x = _finite_1d("x", self.x)
        w = _weights("weights", self.weights, x.size)
        order = np.argsort(x, kind="stable")
        object.__setattr__(self, "x", x[order])
        object.__setattr__(self, "weights", w[order])
        object.__setattr__(self, "_cum", np.concatenate([[0.0], np.cumsum(w[order])]))

    @property
    def breakpoints(self) -> np.ndarray:
        """Positions where the CDF is not linear (the atoms)."""
        return self.x

    def cdf_right(self, q) -> np.ndarray:
        """:math:`F(q) = \\mu((-\\infty, q])` (right-continuous).

        Parameters
        ----------
        q : float or array_like
            Evaluation point(s).

        Returns
        -------
        float64 or numpy.ndarray of float64, shape of ``q``
            :math:`F(q)`.
        """
        return self._cum[np.searchsorted(self.x, q, side="right")]

    def cdf_left(self, q) -> np.ndarray:
        """:math:`F(q^-) = \\mu((-\\infty, q))`.

        Parameters
        ----------
        q : float or array_like
            Evaluation point(s).

        Returns
        -------
        float64 or numpy.ndarray of float64, shape of ``q``
            :math:`F(q^-)`.
        """
        return self._cum[np.searchsorted(self.x, q, side="left")]


@dataclasses.dataclass(frozen=True, eq=False)
class CellMeasure1D:
    """A piecewise-constant probability density on cells ``[edges[k], edges[k+1]]``.

    Parameters
    ----------
    edges : array_like, shape (n + 1,)
        Strictly increasing cell edges.
    masses : array_like, shape (n,)
        Cell masses (density times cell length), >= 0, summing to 1.

    Raises
    ------
    ValueError
        On non-increasing edges, a length mismatch, negative masses or a total
        mass different from 1 (to 1e-9).
    """

    edges: np.ndarray
    masses: np.ndarray

    def __post_init__(self):
        e = _finite_1d("edges", self.edges)
        if e.size < 2 or not (np.diff(e) > 0).all():
            raise ValueError("edges must be strictly increasing with at least 2 entries")
        m = _weights("masses", self.masses, e.size - 1)
        object.__setattr__(self, "edges", e)
        object.__setattr__(self, "masses", m)
        object.__setattr__(self, "_cum", np.concatenate([[0.0], np.cumsum(m)]))

    @property
    def breakpoints(self) -> np.ndarray:
        """The cell edges."""
        return self.edges

    def cdf_right(self, q) -> np.ndarray:
        """CDF (continuous: left and right limits agree).

        Parameters
        ----------
        q : float or array_like
            Evaluation point(s).

        Returns
        -------
        float64 or numpy.ndarray of float64, shape of ``q``
            The CDF at ``q`` (linear interpolation of the cumulative masses at the edges).
        """
        return np.interp(q, self.edges, self._cum)

    cdf_left = cdf_right


def wasserstein1_1d(mu, nu) -> float:
    """Exact :math:`W_1(\\mu, \\nu) = \\int|F_\\mu - F_\\nu|\\,dx` of two 1-D measures.

    Parameters
    ----------
    mu, nu : AtomicMeasure1D or CellMeasure1D
        Probability measures whose CDFs are linear between their breakpoints.

    Returns
    -------
    float
        The distance, in the units of x.

    Raises
    ------
    TypeError
        If an argument is not one of the two measure types.

    Examples
    --------
    >>> u = CellMeasure1D(np.array([0.0, 1.0]), np.array([1.0]))
    >>> round(wasserstein1_1d(AtomicMeasure1D(np.array([0.5])), u), 12)
    0.25
    """
    for name, m in (("mu", mu), ("nu", nu)):
        if not isinstance(m, (AtomicMeasure1D, CellMeasure1D)):
            raise TypeError(f"{name} must be an AtomicMeasure1D or CellMeasure1D, got {type(m).__name__}")
    pts = np.unique(np.concatenate([mu.breakpoints, nu.breakpoints]))
    if pts.size < 2:
        return 0.0
    a, b = pts[:-1], pts[1:]
    da = mu.cdf_right(a) - nu.cdf_right(a)  # right limit of D at the left end
    db = mu.cdf_left(b) - nu.cdf_left(b)  # left limit of D at the right end
    width = b - a
    same = da * db >= 0
    abs_a, abs_b = np.abs(da), np.abs(db)
    denom = np.where(same, 1.0, abs_a + abs_b)
    integral = np.where(same, 0.5 * width * (abs_a + abs_b),
                        0.5 * width * (da * da + db * db) / denom)
    return float(np.sum(integral))


# ------------------------------------------------------------------------------ 2-D

def bin_to_grid(points, origin, spacing, shape) -> np.ndarray:
    """Cell masses of the empirical measure of ``points`` on a uniform grid (FiPy order, x fastest).

    Parameters
    ----------
    points : array_like, shape (N, d)
        Positions inside the grid box (points on the upper faces go to the last cell).
    origin, spacing : sequence of d floats
        Lower corner and cell sides.
    shape : sequence of d ints
        Cells per axis ``(nx,)`` or ``(nx, ny)``.

    Returns
    -------
    ndarray, shape (prod(shape),), float64
        Fraction of the points in each cell (sums to 1).

    Raises
    ------
    ValueError
        If a point lies outside the grid box (by more than round-off) or the
        shapes disagree.
    """
    x = np.asarray(points, dtype=np.float64)
    d = len(shape)
    if x.ndim != 2 or x.shape[1] != d:
        raise ValueError(f"points must have shape (N, {d}), got {x.shape}")
    idx = np.empty(x.shape, dtype=np.int64)
    for a in range(d):
        u = (x[:, a] - origin[a]) / spacing[a]
        if (u < -1e-9).any() or (u > shape[a] * (1 + 1e-12) + 1e-9).any():
            raise ValueError(f"points leave the grid along axis {a}: range [{x[:, a].min()}, {x[:, a].max()}]")
        idx[:, a] = np.clip(np.floor(u).astype(np.int64), 0, shape[a] - 1)
    flat = idx[:, 0] if d == 1 else idx[:, 0] + shape[0] * idx[:, 1]
    return np.bincount(flat, minlength=int(np.prod(shape))) / x.shape[0]


def wasserstein1_points(x, a, y, b) -> float:
    """Exact :math:`W_1` (Euclidean cost) between two weighted point clouds by ``ot.emd2``.

    The cost matrix is :func:`ground_cost` (exact zeros); non-optimal network-simplex
    results raise.

    Parameters
    ----------
    x : array_like, shape (n, d)
    a : array_like, shape (n,)
        Weights of ``x`` (>= 0, sum 1).
    y : array_like, shape (m, d)
    b : array_like, shape (m,)
        Weights of ``y`` (>= 0, sum 1).

    Returns
    -------
    float

    Raises
    ------
    ValueError
        On shape mismatches or invalid weights.
    RuntimeError
        If the network simplex does not reach optimality (POT's ``result_code``).
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.ndim != 2 or y.ndim != 2 or x.shape[1] != y.shape[1]:
        raise ValueError(f"x and y must have shapes (n, d) and (m, d), got {x.shape}, {y.shape}")
    a = _weights("a", a, x.shape[0])
    b = _weights("b", b, y.shape[0])
    # renormalise in float64 so emd sees exactly balanced masses (weights checked to 1e-9 only)
    return _emd_w1(x, a / a.sum(), y, b / b.sum(), "l2", 10_000_000)


def wasserstein1_grid(masses_a, masses_b, centers, tol: float = 0.0) -> float:
    """Exact :math:`W_1` between two histograms on the same cell centres.

    Parameters
    ----------
    masses_a, masses_b : array_like, shape (n_cells,)
        Cell masses (>= 0, each summing to 1).
    centers : array_like, shape (n_cells, d)
        Cell centres (the support points).
    tol : float, default 0.0
        Cells where both masses are ``<= tol`` are dropped before the
        transport problem (the dropped mass times the diameter bounds the error).

    Returns
    -------
    float
    """
    a = np.asarray(masses_a, dtype=np.float64)
    b = np.asarray(masses_b, dtype=np.float64)
    keep = (a > tol) | (b > tol)
    a, b = a[keep], b[keep]
    c = np.asarray(centers, dtype=np.float64)[keep]
    return wasserstein1_points(c, a / a.sum(), c, b / b.sum())


def quantisation_bound(spacing) -> float:
    """Mean distance of a uniform point of a cell to its centre, :math:`E|U - c|`.

    Parameters
    ----------
    spacing : sequence of float
        Cell sides ``(h,)`` or ``(hx, hy)``.

    Returns
    -------
    float
        ``h/4`` in 1-D; for a square of side h, :math:`h(\\sqrt2 + \\operatorname{asinh}1)/6
        \\approx 0.3826\\,h` (rectangles: by 64-point Gauss-Legendre quadrature).
    """
    sp = [float(v) for v in spacing]
    if len(sp) == 1:
        return sp[0] / 4.0
    if sp[0] == sp[1]:
        return sp[0] * (np.sqrt(2.0) + np.arcsinh(1.0)) / 6.0
    nodes, w = np.polynomial.legendre.leggauss(64)
    r = np.hypot(0.5 * sp[0] * nodes[:, None], 0.5 * sp[1] * nodes[None, :])
    return float(0.25 * np.sum(w[:, None] * w[None, :] * r))


def sample_cells(rng: np.random.Generator, n: int, masses, origin, spacing, shape) -> np.ndarray:
    """``n`` i.i.d. draws from a piecewise-constant density on a uniform grid.

    Parameters
    ----------
    rng : numpy.random.Generator
    n : int
        Number of draws, >= 1.
    masses : array_like, shape (prod(shape),)
        Cell masses (sum 1), FiPy order (x fastest).
    origin, spacing, shape : sequences of length d
        The grid.

    Returns
    -------
    ndarray, shape (n, d), float64

    Raises
    ------
    ValueError
        If ``n < 1`` or ``masses`` has the wrong length, negative or non-finite entries.
    """
    n = check_int("n", n, minimum=1)
    m = np.asarray(masses, dtype=np.float64)
    if m.ndim != 1 or m.size != int(np.prod(shape)) or not np.isfinite(m).all() or (m < 0).any():
        raise ValueError(f"masses must be {int(np.prod(shape))} finite values >= 0, got shape {m.shape}, "
                         f"min {np.min(m) if m.size else None}")
    cells = rng.choice(m.size, size=n, p=m / m.sum())
    d = len(shape)
    idx = [cells % shape[0]] if d == 1 else [cells % shape[0], cells // shape[0]]
    u = rng.uniform(size=(n, d))
    return np.stack([origin[a] + spacing[a] * (idx[a] + u[:, a]) for a in range(d)], axis=1)


# --------------------------------------------------------------------------- MMD

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
