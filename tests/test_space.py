"""Tests of engine.space: projections, reflections, sampling, validation."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from rieszflow.engine.space import Ball, Box, Free, Interval

SPACES = (Ball(1.5), Box(-1.0, 2.0), Box([-1.0, 0.0], [1.0, 3.0]), Interval(-0.5, 0.25))


def dim_of(space, default=2):
    return space.dim if isinstance(space, Box) and space.dim is not None else default


finite = st.floats(-50, 50, allow_nan=False, allow_infinity=False)


def points_for(space):
    return st.integers(1, 8).flatmap(lambda n: arrays(np.float64, (n, dim_of(space)), elements=finite))


space_and_points = st.sampled_from(SPACES).flatmap(lambda sp: st.tuples(st.just(sp), points_for(sp)))


# ----------------------------------------------------------------------------- projection

@settings(max_examples=200, deadline=None)
@given(space_and_points)
def test_projection_is_idempotent_and_lands_inside(sp_x):
    space, x = sp_x
    p = space.project(x)
    assert space.contains(p).all()
    np.testing.assert_array_equal(space.project(p), p)  # exactly idempotent


@settings(max_examples=200, deadline=None)
@given(space_and_points)
def test_projection_is_identity_inside_and_nonexpansive(sp_x):
    space, x = sp_x
    inside = space.contains(x)
    np.testing.assert_array_equal(space.project(x)[inside], x[inside])
    # Euclidean projections onto convex sets are 1-Lipschitz.
    y = np.roll(x, 1, axis=0) + 0.5
    d_proj = np.linalg.norm(space.project(x) - space.project(y), axis=1)
    assert (d_proj <= np.linalg.norm(x - y, axis=1) * (1 + 1e-12) + 1e-12).all()


def test_ball_projection_closed_form():
    x = np.array([[3.0, 4.0], [0.3, 0.4], [0.0, -10.0]])
    np.testing.assert_allclose(Ball(2.0).project(x), [[1.2, 1.6], [0.3, 0.4], [0.0, -2.0]], rtol=1e-15)


def test_box_projection_is_clipping():
    x = np.array([[-3.0, 0.5], [0.5, 9.0]])
    np.testing.assert_array_equal(Box([-1.0, 0.0], [1.0, 3.0]).project(x), [[-1.0, 0.5], [0.5, 3.0]])


def test_projection_is_the_nearest_point_of_the_ball():
    rng = np.random.default_rng(0)
    ball = Ball(1.0)
    x = 3 * rng.normal(size=(50, 3))
    candidates = ball.sample_uniform(rng, 2000, 3)
    d_proj = np.linalg.norm(ball.project(x) - x, axis=1)
    d_best = np.linalg.norm(candidates[None] - x[:, None], axis=2).min(axis=1)
    assert (d_proj <= d_best + 1e-12).all()


# ----------------------------------------------------------------------------- reflection

@settings(max_examples=200, deadline=None)
@given(space_and_points)
def test_reflection_lands_inside_and_fixes_inside_points(sp_x):
    space, x = sp_x
    r = space.reflect(x)
    assert space.contains(r).all()
    inside = space.contains(x)
    np.testing.assert_array_equal(r[inside], x[inside])


def test_ball_reflection_values():
    ball = Ball(1.0)
    x = np.array([[1.3, 0.0], [0.0, 3.5], [-2.0, 0.0], [0.6, 0.8]])
    # r -> 2R - r; beyond the antipode (r = 3.5) the point passes through the centre to radius 0.5.
    expected = np.array([[0.7, 0.0], [0.0, -0.5], [0.0, 0.0], [0.6, 0.8]])
    np.testing.assert_allclose(ball.reflect(x), expected, atol=1e-15)
    # for the ball the radial mirror is 2 P(x) - x (reflection across the tangent plane)
    z = np.array([[1.7, -0.4, 0.2]])
    np.testing.assert_allclose(ball.reflect(z), 2 * ball.project(z) - z, rtol=1e-14)


def test_box_reflection_folds():
    box = Interval(0.0, 1.0)
    x = np.array([[1.3], [-0.2], [2.3], [-1.2], [0.4]])
    np.testing.assert_allclose(box.reflect(x), [[0.7], [0.2], [0.3], [0.8], [0.4]], atol=1e-15)


# ----------------------------------------------------------------------------- sampling and volume

@pytest.mark.parametrize("d", (1, 2, 3))
def test_ball_sampling_second_moment(d):
    # E|x|^2 = R^2 d / (d + 2) for the uniform law on the ball; threshold 5 standard errors.
    R, n = 2.0, 20000
    x = Ball(R).sample_uniform(np.random.default_rng(d), n, d)
    assert x.shape == (n, d) and Ball(R).contains(x).all()
    r2 = np.sum(x ** 2, axis=1)
    se = r2.std(ddof=1) / math.sqrt(n)
    assert abs(r2.mean() - R ** 2 * d / (d + 2)) < 5 * se


def test_box_sampling_mean():
    box = Box([-1.0, 0.0], [1.0, 3.0])
    n = 20000
    x = box.sample_uniform(np.random.default_rng(7), n, 2)
    assert box.contains(x).all()
    se = np.array([2.0, 3.0]) / math.sqrt(12 * n)  # uniform standard deviation / sqrt(n)
    assert (np.abs(x.mean(axis=0) - [0.0, 1.5]) < 5 * se).all()


def test_volumes():
    assert Ball(2.0).volume(2) == pytest.approx(4 * math.pi, rel=1e-15)
    assert Ball(2.0).volume(3) == pytest.approx(4 / 3 * math.pi * 8, rel=1e-15)
    assert Ball(2.0).volume(1) == pytest.approx(4.0, rel=1e-15)
    assert Box([-1.0, 0.0], [1.0, 3.0]).volume(2) == 6.0
    assert Box(0.0, 2.0).volume(3) == 8.0
    assert Interval(-0.5, 0.25).volume(1) == 0.75
    assert Free().volume(2) == math.inf


# ----------------------------------------------------------------------------- free space

def test_free_space():
    x = np.random.default_rng(0).normal(size=(4, 3)) * 1e6
    free = Free()
    assert free.project(x) is x and free.reflect(x) is x
    assert free.contains(x).all()
    assert not free.contains(np.array([[np.nan, 0.0]]))[0]
    with pytest.raises(ValueError, match="infinite volume"):
        free.sample_uniform(np.random.default_rng(0), 3, 2)


# ----------------------------------------------------------------------------- validation

@pytest.mark.parametrize("R", (0.0, -1.0, float("nan"), float("inf")))
def test_ball_radius_is_validated(R):
    with pytest.raises(ValueError, match="R"):
        Ball(R)


def test_ball_radius_type():
    with pytest.raises(TypeError, match="R"):
        Ball("1")


@pytest.mark.parametrize("lo,hi", ((1.0, 0.0), (0.0, 0.0), ([0.0, 1.0], [1.0, 1.0]), ([0.0, 0.0], [1.0, 1.0, 1.0]),
                                   (float("nan"), 1.0), (0.0, float("inf"))))
def test_box_bounds_are_validated(lo, hi):
    with pytest.raises(ValueError):
        Box(lo, hi)


def test_interval_is_validated_and_one_dimensional():
    with pytest.raises(ValueError, match="lo"):
        Interval(float("nan"), 1.0)
    with pytest.raises(ValueError, match="lo < hi"):
        Interval(1.0, 1.0)
    with pytest.raises(ValueError, match="d=1"):
        Interval(0.0, 1.0).project(np.zeros((3, 2)))
    with pytest.raises(ValueError, match="d must be 1"):
        Interval(0.0, 1.0).sample_uniform(np.random.default_rng(0), 3, 2)


@pytest.mark.parametrize("space", SPACES + (Free(),))
def test_point_shapes_are_validated(space):
    with pytest.raises(ValueError, match=r"shape \(N, d\)"):
        space.project(np.zeros(3))
    with pytest.raises(ValueError, match=r"shape \(N, d\)"):
        space.reflect(np.zeros((2, 1, 1)))
    with pytest.raises(ValueError, match=r"shape \(N, d\)"):
        space.contains(np.zeros(3))


def test_float32_is_preserved():
    x = np.array([[3.0, 4.0]], dtype=np.float32)
    for space in (Ball(1.0), Box(0.0, 1.0)):
        assert space.project(x).dtype == np.float32
        assert space.reflect(x).dtype == np.float32
        assert space.contains(space.project(x)).all()


@pytest.mark.gpu
@pytest.mark.parametrize("space", SPACES)
def test_cupy_matches_numpy(space):
    from rieszflow.engine.backend import cupy_available, to_numpy

    if not cupy_available():
        pytest.skip("CuPy with a CUDA device is not available")
    import cupy as cp

    x = 3 * np.random.default_rng(12).normal(size=(50, dim_of(space)))
    for method in ("project", "reflect", "contains"):
        np.testing.assert_allclose(to_numpy(getattr(space, method)(cp.asarray(x))), getattr(space, method)(x),
                                   rtol=1e-14, atol=1e-15)


def test_cube_is_the_centred_box():
    """Cube(R, d) = Box(-R, R) in d coordinates: same projection and draws; diameters 2Rd (l1),
    2R sqrt(d) (l2); dimension fixed also for d = 1."""
    from rieszflow.engine.space import Cube

    cube, box = Cube(0.5, 3), Box([-0.5] * 3, [0.5] * 3)
    x = np.random.default_rng(0).normal(size=(20, 3))
    np.testing.assert_array_equal(cube.project(x), box.project(x))
    np.testing.assert_array_equal(cube.sample(np.random.default_rng(1), 5),
                                  np.random.default_rng(1).uniform(-0.5, 0.5, size=(5, 3)))
    assert cube.diam("l1") == 3.0 and cube.diam("l2") == pytest.approx(np.sqrt(3.0), rel=1e-15)
    assert Cube(1.0, 1).dim == 1 and cube.volume(3) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="radius must be > 0"):
        Cube(0.0, 2)
    with pytest.raises(ValueError, match="dim must be >= 1"):
        Cube(1.0, 0)


def test_sphere_joins_the_spaces():
    """Sphere: retraction idempotent and unit-norm, tangent projection orthogonal to x, uniform
    samples on the sphere, surface areas 2 pi (S^1) and 4 pi (S^2); the token flows use it."""
    from rieszflow.engine.space import Sphere
    from rieszflow.engine.tokenflow.dynamics import normalise, tangent_projection

    sph = Sphere()
    x = np.random.default_rng(0).normal(size=(30, 4))
    p = sph.project(x)
    np.testing.assert_allclose(np.linalg.norm(p, axis=1), 1.0, rtol=0, atol=1e-15)
    np.testing.assert_array_equal(sph.project(p), normalise(p))
    assert sph.contains(p).all() and not sph.contains(2 * p).any()
    v = np.random.default_rng(1).normal(size=(30, 4))
    t = sph.tangent(p, v)
    np.testing.assert_allclose(np.sum(t * p, axis=1), 0.0, atol=1e-14)
    np.testing.assert_array_equal(t, tangent_projection(p, v))
    assert sph.contains(sph.sample_uniform(np.random.default_rng(2), 50, 3)).all()
    assert sph.volume(2) == pytest.approx(2 * np.pi) and sph.volume(3) == pytest.approx(4 * np.pi)
