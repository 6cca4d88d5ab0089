"""Measures on the line and on a uniform grid: :class:`AtomicMeasure1D`, :class:`CellMeasure1D`, the
exact 1-D W1 between them, binning particles to a grid, W1 between gridded histograms, the
quantisation bound of that W1 and sampling particles from cell masses."""
from __future__ import annotations

import dataclasses

import numpy as np

from rieszflow.engine._checks import check_int
from rieszflow.engine.measures.empirical import _finite_1d, _weights
from rieszflow.engine.measures.wasserstein import _emd_w1

__all__ = ["AtomicMeasure1D", "CellMeasure1D", "wasserstein1_1d", "bin_to_grid", "wasserstein1_points",
           "wasserstein1_grid", "quantisation_bound", "sample_cells"]


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
