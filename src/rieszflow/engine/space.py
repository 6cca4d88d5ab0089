"""Domains that own their constraint: Euclidean projection, mirror reflection, sampling.

A *space* is the feature domain :math:`\\Omega \\subset \\mathbb{R}^d` in which the
particles :math:`\\omega_k` live. Each space is a small frozen dataclass with

``project(x)``
    the Euclidean projection :math:`\\mathcal{P}_\\Omega` of every row of ``x``
    (paper 000, eq. (4.3) and (B.11)); this is the projected-Euler scheme whose
    continuous limit is the reflected diffusion (paper 000, App. A.3, eq. (A.9)).
``reflect(x)``
    the mirror image of every row across the boundary, repeated until it lies in
    :math:`\\bar\\Omega` (the symmetrised Euler step of Bossy, Gobet and Talay 2004,
    weak order 1, against order 1/2 for projection; particles_pde_reference.md
    sec. 2.3).

``contains(x)``, ``sample_uniform(rng, n, d)``, ``volume(d)``.

Spaces: :class:`Free` (:math:`\\mathbb{R}^d`), :class:`Ball` (per-particle
:math:`\\ell_2` norm at most ``R``: the paper's column-norm constraint on the
frequency matrix), :class:`Box` and :class:`Interval` (a 1-D box).

All array methods take ``xp = namespace(x)`` and run on NumPy or CuPy; no method
synchronises with the device. Points are arrays of shape ``(N, d)``.

Boundary round-off
------------------
A projected point of a ball has norm ``R`` only up to one rounding error. Both
:meth:`Ball.contains` and the "already inside" test of :meth:`Ball.project`
therefore accept norms up to ``R * (1 + 8 eps)`` (``eps`` the machine epsilon of
the array's dtype), which makes projection exactly idempotent.
"""
from __future__ import annotations

import abc
import dataclasses
import math

import numpy as np

from rieszflow.engine._checks import check_choice, check_int, check_points, check_real
from rieszflow.engine.backend import namespace

__all__ = ["Space", "Free", "Ball", "Box", "Interval", "Cube", "Sphere"]


def _rtol(xp, x) -> float:
    """Relative boundary tolerance (8 machine epsilons of ``x``'s dtype)."""
    return 8.0 * float(xp.finfo(x.dtype).eps)


def _fold(xp, t, lo, hi):
    """Fold ``t`` into ``[lo, hi]`` by repeated mirror reflection (a triangle wave).

    Points already inside are returned bit-for-bit unchanged.
    """
    length = hi - lo
    u = xp.remainder(t - lo, 2.0 * length)
    folded = lo + xp.where(u > length, 2.0 * length - u, u)
    folded = xp.clip(folded, lo, hi)  # guard the last ulp of lo + length
    inside = (t >= lo) & (t <= hi)
    return xp.where(inside, t, folded)


class Space(abc.ABC):
    """Abstract feature domain; see the module docstring for the contract."""

    @abc.abstractmethod
    def project(self, x):
        """Euclidean projection :math:`\\mathcal{P}_\\Omega` of each row of ``x``.

        Parameters
        ----------
        x : array, shape (N, d)
            Points (NumPy or CuPy).

        Returns
        -------
        array, shape (N, d), dtype and backend of ``x``
        """

    @abc.abstractmethod
    def reflect(self, x):
        """Mirror reflection of each row of ``x`` into :math:`\\bar\\Omega`.

        Parameters
        ----------
        x : array, shape (N, d)
            Points (NumPy or CuPy).

        Returns
        -------
        array, shape (N, d), dtype and backend of ``x``
        """

    @abc.abstractmethod
    def contains(self, x):
        """Which rows of ``x`` lie in :math:`\\bar\\Omega`.

        Parameters
        ----------
        x : array, shape (N, d)
            Points (NumPy or CuPy).

        Returns
        -------
        bool array, shape (N,)
        """

    @abc.abstractmethod
    def sample_uniform(self, rng: np.random.Generator, n: int, d: int) -> np.ndarray:
        """``n`` independent uniform points of :math:`\\Omega \\subset \\mathbb{R}^d`.

        Parameters
        ----------
        rng : numpy.random.Generator
            Source of randomness.
        n : int
            Number of points, ``n >= 0``.
        d : int
            Dimension, ``d >= 1``.

        Returns
        -------
        numpy.ndarray, shape (n, d), float64
            Host array; move it with ``Backend.asarray``.
        """

    @abc.abstractmethod
    def volume(self, d: int) -> float:
        """Lebesgue measure of :math:`\\Omega \\subset \\mathbb{R}^d`.

        Parameters
        ----------
        d : int
            Dimension, ``d >= 1``.

        Returns
        -------
        float
        """


@dataclasses.dataclass(frozen=True)
class Free(Space):
    """The whole space :math:`\\mathbb{R}^d` (no constraint).

    ``project`` and ``reflect`` return their argument; ``contains`` is all True.
    There is no uniform law on :math:`\\mathbb{R}^d`, so :meth:`sample_uniform`
    raises.

    References
    ----------
    jax-md ``space.free()``; particles_pde_reference.md sec. 1.2.
    """

    def project(self, x):
        """Identity.

        Parameters
        ----------
        x : array, shape (N, d)

        Returns
        -------
        array, shape (N, d)
            ``x`` itself.

        Raises
        ------
        ValueError
            If ``x`` is not two-dimensional.
        """
        return check_points("x", x, finite=False)

    def reflect(self, x):
        """Identity (see :meth:`project`).

        Parameters
        ----------
        x : array, shape (N, d)
            Points (NumPy or CuPy).

        Returns
        -------
        array, shape (N, d)
            ``x`` itself.
        """
        return check_points("x", x, finite=False)

    def contains(self, x):
        """Mask of the finite rows (every finite point lies in :math:`\\mathbb{R}^d`).

        Parameters
        ----------
        x : array, shape (N, d)
            Points (NumPy or CuPy).

        Returns
        -------
        bool array, shape (N,)
        """
        x = check_points("x", x, finite=False)
        xp = namespace(x)
        return xp.all(xp.isfinite(x), axis=1)

    def sample_uniform(self, rng, n, d):
        """Not defined on :math:`\\mathbb{R}^d`.

        Parameters
        ----------
        rng : numpy.random.Generator
            Unused.
        n : int
            Number of points (unused).
        d : int
            Dimension (unused).

        Raises
        ------
        ValueError
            Always: the uniform law on an unbounded space does not exist.
        """
        raise ValueError("Free space has infinite volume: there is no uniform distribution to "
                         "sample; use Ball(R) or Box(lo, hi), or draw from a Gaussian")

    def volume(self, d):
        """Lebesgue measure of :math:`\\mathbb{R}^d`: ``inf``.

        Parameters
        ----------
        d : int
            Dimension, ``d >= 1``.

        Returns
        -------
        float
        """
        check_int("d", d, minimum=1)
        return math.inf


@dataclasses.dataclass(frozen=True)
class Ball(Space):
    """Closed Euclidean ball :math:`\\{\\omega : \\|\\omega\\|_2 \\le R\\}` centred at 0.

    Applied row by row this is the paper's column-norm constraint on the
    frequency matrix (each particle :math:`\\omega_k` has norm at most ``R``).

    Parameters
    ----------
    R : float
        Radius, ``R > 0`` and finite (same units as the particles).

    Raises
    ------
    ValueError
        If ``R`` is not a positive finite number.

    References
    ----------
    paper 000, eq. (4.3) and (B.11) (projection :math:`\\mathcal{P}_\\Omega`);
    App. D ("column-wise l2 clipping").
    """

    R: float

    def __post_init__(self):
        object.__setattr__(self, "R", check_real("R", self.R, positive=True))

    def _norms(self, x):
        xp = namespace(x)
        return xp, xp.sqrt(xp.sum(x * x, axis=1, keepdims=True))

    def project(self, x):
        """Euclidean projection :math:`x \\mapsto x \\min(1, R/\\|x\\|)` of each row.

        Parameters
        ----------
        x : array, shape (N, d)

        Returns
        -------
        array, shape (N, d), dtype of ``x``
            Rows with norm at most ``R (1 + 8 eps)`` are returned unchanged.

        Raises
        ------
        ValueError
            If ``x`` does not have shape (N, d).
        """
        x = check_points("x", x, finite=False)
        xp, r = self._norms(x)
        outside = r > self.R * (1.0 + _rtol(xp, x))
        scale = self.R / xp.where(outside, r, 1.0)  # mask before dividing
        return xp.where(outside, x * scale, x)

    def reflect(self, x):
        """Radial mirror reflection :math:`r \\mapsto 2R - r`, repeated until inside.

        The signed radial coordinate along the ray through each point is folded
        into ``[-R, R]`` (a triangle wave of period ``4R``), so a point beyond the
        antipode (``r > 3R``) passes through the centre. For the ball the radial
        mirror equals the reflection :math:`2\\mathcal{P}(x) - x` across the
        tangent plane at the projection.

        Parameters
        ----------
        x : array, shape (N, d)

        Returns
        -------
        array, shape (N, d)
            Every row lies in the closed ball; rows inside are unchanged.

        Raises
        ------
        ValueError
            If ``x`` does not have shape (N, d).

        References
        ----------
        Bossy, Gobet and Talay, J. Appl. Probab. 41 (2004) 877-889;
        particles_pde_reference.md sec. 2.3.
        """
        x = check_points("x", x, finite=False)
        xp, r = self._norms(x)
        R = self.R
        outside = r > R * (1.0 + _rtol(xp, x))
        u = xp.remainder(r + R, 4.0 * R)
        t = -R + xp.where(u > 2.0 * R, 4.0 * R - u, u)  # signed radius in [-R, R]
        scale = t / xp.where(outside, r, 1.0)
        return xp.where(outside, x * scale, x)

    def contains(self, x):
        """Mask ``|x_k| <= R (1 + 8 eps)`` (see the module docstring on round-off).

        Parameters
        ----------
        x : array, shape (N, d)
            Points (NumPy or CuPy).

        Returns
        -------
        bool array, shape (N,)
        """
        x = check_points("x", x, finite=False)
        xp, r = self._norms(x)
        return r[:, 0] <= self.R * (1.0 + _rtol(xp, x))

    def sample_uniform(self, rng, n, d):
        """Uniform points in the ball: Gaussian direction, radius ``R U^(1/d)``.

        Parameters
        ----------
        rng : numpy.random.Generator
        n : int
            Number of points, ``n >= 0``.
        d : int
            Dimension, ``d >= 1``.

        Returns
        -------
        numpy.ndarray, shape (n, d), float64
            Host array; move it with ``Backend.asarray``.
        """
        n = check_int("n", n, minimum=0)
        d = check_int("d", d, minimum=1)
        z = rng.standard_normal((n, d))
        z /= np.linalg.norm(z, axis=1, keepdims=True)
        return z * (self.R * rng.uniform(size=(n, 1)) ** (1.0 / d))

    def volume(self, d):
        """Volume :math:`\\pi^{d/2} R^d / \\Gamma(d/2 + 1)` of the ball in :math:`\\mathbb{R}^d`.

        Parameters
        ----------
        d : int
            Dimension, ``d >= 1``.

        Returns
        -------
        float
        """
        d = check_int("d", d, minimum=1)
        return math.pi ** (d / 2) * self.R ** d / math.gamma(d / 2 + 1)


def _as_bounds(name, value):
    """Scalar or 1-D sequence of finite floats -> tuple of floats."""
    try:
        arr = None if isinstance(value, bool) else np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        arr = None
    if arr is None or arr.ndim > 1 or arr.size == 0:
        raise ValueError(f"{name} must be a finite number or a 1-D sequence of them, got {value!r}")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} must be finite, got {value!r}")
    return tuple(float(v) for v in np.atleast_1d(arr))


@dataclasses.dataclass(frozen=True)
class Box(Space):
    """Axis-aligned box :math:`\\prod_a [lo_a, hi_a]`.

    Parameters
    ----------
    lo, hi : float or sequence of float
        Lower and upper corners. Scalars apply to every coordinate (any ``d``);
        sequences of length ``d`` fix the dimension. Need ``lo < hi``
        coordinate-wise.

    Raises
    ------
    ValueError
        If the bounds are not finite, have different lengths, or ``lo >= hi``.

    References
    ----------
    paper 000, eq. (4.3) (projection :math:`\\mathcal{P}_\\Omega`).
    """

    lo: tuple
    hi: tuple

    def __post_init__(self):
        lo = _as_bounds("lo", self.lo)
        hi = _as_bounds("hi", self.hi)
        if len(lo) != len(hi) and 1 not in (len(lo), len(hi)):
            raise ValueError(f"lo and hi must have the same length, got lo={self.lo!r}, hi={self.hi!r}")
        lo_a, hi_a = np.broadcast_arrays(np.array(lo), np.array(hi))
        if not (lo_a < hi_a).all():
            raise ValueError(f"need lo < hi in every coordinate, got lo={self.lo!r}, hi={self.hi!r}")
        object.__setattr__(self, "lo", tuple(lo_a.tolist()))
        object.__setattr__(self, "hi", tuple(hi_a.tolist()))

    @property
    def dim(self):
        """Fixed dimension, or ``None`` when the bounds are scalars (any ``d``)."""
        return None if len(self.lo) == 1 else len(self.lo)

    def _bounds(self, x):
        """Bounds as arrays of ``x``'s backend and dtype, broadcastable to ``x``."""
        d = self.dim
        if d is not None and x.shape[1] != d:
            raise ValueError(f"x must have d={d} columns for {self!r}, got shape {tuple(x.shape)}")
        xp = namespace(x)
        return xp, xp.asarray(self.lo, dtype=x.dtype), xp.asarray(self.hi, dtype=x.dtype)

    def project(self, x):
        """Coordinate-wise clipping to ``[lo, hi]`` (the Euclidean projection onto a box).

        Parameters
        ----------
        x : array, shape (N, d)

        Returns
        -------
        array, shape (N, d)

        Raises
        ------
        ValueError
            If ``x`` does not have shape (N, d) with the box's dimension.
        """
        x = check_points("x", x, finite=False)
        xp, lo, hi = self._bounds(x)
        return xp.clip(x, lo, hi)

    def reflect(self, x):
        """Coordinate-wise folding into ``[lo, hi]`` by repeated mirror reflection.

        Parameters
        ----------
        x : array, shape (N, d)

        Returns
        -------
        array, shape (N, d)
            Rows inside are unchanged bit for bit.

        Raises
        ------
        ValueError
            If ``x`` does not have shape (N, d) with the box's dimension.

        References
        ----------
        Bossy, Gobet and Talay (2004); particles_pde_reference.md sec. 2.3.
        """
        x = check_points("x", x, finite=False)
        xp, lo, hi = self._bounds(x)
        return _fold(xp, x, lo, hi)

    def contains(self, x):
        """Mask ``lo <= x_k <= hi`` in every coordinate.

        Parameters
        ----------
        x : array, shape (N, d)
            Points (NumPy or CuPy).

        Returns
        -------
        bool array, shape (N,)

        Raises
        ------
        ValueError
            If ``x`` does not have shape (N, d) with the box's dimension.
        """
        x = check_points("x", x, finite=False)
        xp, lo, hi = self._bounds(x)
        return xp.all((x >= lo) & (x <= hi), axis=1)

    def sample_uniform(self, rng, n, d):
        """Uniform points in the box.

        Parameters
        ----------
        rng : numpy.random.Generator
        n : int
            Number of points, ``n >= 0``.
        d : int
            Dimension; must equal :attr:`dim` when the bounds are sequences.

        Returns
        -------
        numpy.ndarray, shape (n, d), float64
        """
        n = check_int("n", n, minimum=0)
        d = check_int("d", d, minimum=1)
        if self.dim is not None and d != self.dim:
            raise ValueError(f"d must be {self.dim} for {self!r}, got {d}")
        lo, hi = np.broadcast_to(self.lo, (d,)), np.broadcast_to(self.hi, (d,))
        return rng.uniform(lo, hi, size=(n, d))

    def volume(self, d):
        """Volume :math:`\\prod_a (hi_a - lo_a)` over ``d`` coordinates.

        Parameters
        ----------
        d : int
            Dimension; must equal :attr:`dim` when the bounds are sequences.

        Returns
        -------
        float

        Raises
        ------
        ValueError
            If ``d`` does not match the box's dimension.
        """
        d = check_int("d", d, minimum=1)
        if self.dim is not None and d != self.dim:
            raise ValueError(f"d must be {self.dim} for {self!r}, got {d}")
        return float(np.prod(np.broadcast_to(np.subtract(self.hi, self.lo), (d,))))


class Interval(Box):
    """The interval ``[lo, hi]``: a one-dimensional :class:`Box` (points of shape (N, 1)).

    Parameters
    ----------
    lo, hi : float
        Finite end points with ``lo < hi``.

    Raises
    ------
    ValueError
        If the end points are not finite scalars with ``lo < hi``.
    """

    def __init__(self, lo: float, hi: float):
        lo = check_real("lo", lo)
        hi = check_real("hi", hi)
        super().__init__((lo,), (hi,))

    @property
    def dim(self):
        """Always 1."""
        return 1

    def __repr__(self):
        return f"Interval(lo={self.lo[0]!r}, hi={self.hi[0]!r})"


class Cube(Box):
    """The centred cube :math:`E = [-R, R]^d`: a :class:`Box` of fixed dimension with a radius.

    The token space of paper 004 (Assumption 1: a compact convex E); every Box method
    (projection, reflection, ``contains``, ``sample_uniform``, ``volume``) applies.

    Parameters
    ----------
    radius : float
        Half-width R > 0.
    dim : int
        Dimension d >= 1.

    Raises
    ------
    TypeError, ValueError
        If ``radius`` is not a finite number > 0 or ``dim`` is not an integer >= 1.

    References
    ----------
    Paper 004 ("A Mathematical Theory of Attention", arXiv:2007.02876), Assumption 1;
    docs/specs/paper004_attention_theory.md section 1 (diam_1 = 2Rd, diam_2 = 2R sqrt(d)).
    """

    def __init__(self, radius: float, dim: int):
        r = check_real("radius", radius, positive=True)
        d = check_int("dim", dim, minimum=1)
        super().__init__((-r,) * d, (r,) * d)

    @property
    def radius(self) -> float:
        """Half-width R."""
        return float(self.hi[0])

    @property
    def dim(self) -> int:
        """The dimension d (fixed, also for d = 1)."""
        return len(self.lo)

    def diam(self, metric: str = "l1") -> float:
        """Diameter of E: 2Rd in the l1 metric, 2R sqrt(d) in the l2 metric.

        Parameters
        ----------
        metric : {"l1", "l2"}, default "l1"

        Returns
        -------
        float

        Raises
        ------
        ValueError
            If ``metric`` is unknown.
        """
        check_choice("metric", metric, ("l1", "l2"))
        r, d = self.radius, len(self.lo)
        return 2 * r * d if metric == "l1" else 2 * r * math.sqrt(d)

    def sample(self, rng: np.random.Generator, n: int):
        """``n`` i.i.d. uniform points of E, shape (n, d), from the host generator ``rng``.

        Parameters
        ----------
        rng : numpy.random.Generator
        n : int
            Number of points, >= 0.

        Returns
        -------
        numpy.ndarray, shape (n, d), float64
        """
        return self.sample_uniform(rng, n, len(self.lo))

    def __repr__(self) -> str:
        return f"Cube(radius={self.radius!r}, dim={len(self.lo)})"


class Sphere(Space):
    """The unit sphere :math:`S^{d-1} = \\{x \\in \\mathbb{R}^d : |x| = 1\\}` (token space of the flows).

    ``project`` is the retraction :math:`x / |x|` (the idealised LayerNorm of attention
    dynamics); the sphere has no boundary, so ``reflect`` is the same retraction.
    :meth:`tangent` projects a vector field onto the tangent space. The token-flow
    dynamics (:mod:`rieszflow.engine.tokenflow.dynamics`) use these.

    References
    ----------
    Geshkovski, Letrouit, Polyanskiy, Rigollet, "A mathematical perspective on Transformers",
    arXiv:2312.10794, section 2.
    """

    def project(self, x):
        """Retraction ``x / |x|`` along the last axis.

        Parameters
        ----------
        x : array, shape (..., d)
            Non-zero vectors (a zero row gives NaN, which the flow drivers report).

        Returns
        -------
        array, shape (..., d)
            Unit vectors.
        """
        xp = namespace(x)
        return x / xp.sqrt(xp.sum(x * x, axis=-1, keepdims=True))

    def reflect(self, x):
        """The retraction :meth:`project` (a sphere has no boundary to reflect at).

        Parameters
        ----------
        x : array, shape (..., d)

        Returns
        -------
        array, shape (..., d)
        """
        return self.project(x)

    def tangent(self, x, y):
        """Project ``y`` onto the tangent space at ``x``: ``y - <x, y> x``.

        Parameters
        ----------
        x : array, shape (..., d)
            Points (unit vectors; off the sphere the same formula is the smooth extension
            under which ``|x| = 1`` is an attracting invariant set).
        y : array, shape (..., d)

        Returns
        -------
        array, shape (..., d)
        """
        xp = namespace(x, y)
        return y - xp.sum(x * y, axis=-1, keepdims=True) * x

    def contains(self, x):
        """Mask ``| |x_k| - 1 | <= 8 eps`` for each row.

        Parameters
        ----------
        x : array, shape (N, d)

        Returns
        -------
        bool array, shape (N,)
        """
        x = check_points("x", x, finite=False)
        xp = namespace(x)
        r = xp.sqrt(xp.sum(x * x, axis=1))
        return xp.abs(r - 1.0) <= 8.0 * float(xp.finfo(x.dtype).eps) * max(1, x.shape[1])

    def sample_uniform(self, rng, n, d):
        """Uniform points on :math:`S^{d-1}` (normalised Gaussians).

        Parameters
        ----------
        rng : numpy.random.Generator
        n : int
            Number of points, ``n >= 0``.
        d : int
            Ambient dimension, ``d >= 1``.

        Returns
        -------
        numpy.ndarray, shape (n, d), float64
        """
        n = check_int("n", n, minimum=0)
        d = check_int("d", d, minimum=1)
        return self.project(rng.standard_normal((n, d)))

    def volume(self, d):
        """Surface area :math:`2\\pi^{d/2}/\\Gamma(d/2)` of :math:`S^{d-1}`.

        Parameters
        ----------
        d : int
            Ambient dimension, ``d >= 1``.

        Returns
        -------
        float
        """
        d = check_int("d", d, minimum=1)
        return 2.0 * math.pi ** (d / 2.0) / math.gamma(d / 2.0)
