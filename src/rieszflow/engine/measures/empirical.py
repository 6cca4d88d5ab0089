"""Finitely supported probability measures on R^d: :class:`EmpiricalMeasure` and its builder.

:math:`\\mu = \\sum_j w_j \\delta_{y_j}` (NumPy or CuPy arrays), paper 004's m(X) when the weights are
uniform; the argument checks shared by the other measure modules live here too.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from rieszflow.engine.backend import namespace, to_numpy

__all__ = ["METRICS", "EmpiricalMeasure", "empirical_measure"]


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
