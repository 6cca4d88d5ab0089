"""Tests of engine.energy.riesz: closed-form oracles, exact gradients, Numba/NumPy parity, errors."""
from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rieszflow.engine.energy import (
    RieszEnergy,
    riesz_energy,
    riesz_energy_and_grad,
    riesz_energy_grad,
    riesz_kernel,
    riesz_pair,
    riesz_potential,
)

S_VALUES = (-1.5, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 2.5)
METHODS = ("numpy", "numba", "gemm")


def g_hand(r, s):
    """g_s of paper 000, eq. (B.10), written out independently of the library."""
    if s > 0:
        return r ** (-s)
    if s == 0:
        return -math.log(r)
    return -(r ** (-s))


def central_difference(f, x, h=1e-6):
    """Float64 central-difference gradient of a scalar function of an (N, d) array."""
    grad = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        xp_, xm = x.copy(), x.copy()
        xp_[idx] += h
        xm[idx] -= h
        grad[idx] = (float(f(xp_)) - float(f(xm))) / (2 * h)
    return grad


# ----------------------------------------------------------------------------- configurations

def antipodal_pair():
    return np.array([[0.0, 0.0, 1.0], [0.0, 0.0, -1.0]])


def triangle():
    a = 2 * np.pi * np.arange(3) / 3
    return np.stack([np.cos(a), np.sin(a)], axis=1)


def tetrahedron():
    v = np.array([[1, 1, 1], [1, -1, -1], [-1, 1, -1], [-1, -1, 1]], dtype=float)
    return v / np.sqrt(3.0)


def octahedron():
    return np.concatenate([np.eye(3), -np.eye(3)])


# W_{N,s} = (1 / (2 N (N-1))) sum_{k != l} g = (1 / (N (N-1))) sum_{k < l} g
ORACLES = {
    "antipodal pair": (antipodal_pair, lambda s: g_hand(2.0, s) / 2.0),  # 1 pair, N(N-1) = 2
    "triangle": (triangle, lambda s: 3 * g_hand(math.sqrt(3.0), s) / 6.0),  # 3 pairs, N(N-1) = 6
    "tetrahedron": (tetrahedron, lambda s: 6 * g_hand(math.sqrt(8.0 / 3.0), s) / 12.0),  # 6 edges
    "octahedron": (octahedron,  # 12 edges of length sqrt(2) and 3 antipodal pairs, N(N-1) = 30
                   lambda s: (12 * g_hand(math.sqrt(2.0), s) + 3 * g_hand(2.0, s)) / 30.0),
}


def test_oracle_configurations_have_the_stated_geometry():
    for name, side in (("triangle", math.sqrt(3)), ("tetrahedron", math.sqrt(8 / 3))):
        x = ORACLES[name][0]()
        dist = np.linalg.norm(x[:, None] - x[None], axis=-1)[np.triu_indices(len(x), 1)]
        np.testing.assert_allclose(dist, side, rtol=1e-15)
        np.testing.assert_allclose(np.linalg.norm(x, axis=1), 1.0, rtol=1e-15)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("s", (-1.0, 0.0, 1.0, 2.5))
@pytest.mark.parametrize("name", sorted(ORACLES))
def test_energy_matches_closed_form(name, s, method):
    config, closed_form = ORACLES[name]
    assert float(riesz_energy(config(), s, method=method)) == pytest.approx(closed_form(s), rel=1e-14, abs=1e-15)


def test_closed_forms_by_hand():
    # Octahedron, s = 1: (12 / sqrt 2 + 3 / 2) / 30.
    assert float(riesz_energy(octahedron(), 1.0)) == pytest.approx((12 / math.sqrt(2) + 1.5) / 30, rel=1e-14)
    # Tetrahedron, s = 0: -log(sqrt(8/3)) / 2.
    assert float(riesz_energy(tetrahedron(), 0.0)) == pytest.approx(-0.25 * math.log(8 / 3), rel=1e-14)
    # Antipodal pair, s = -1: -2 / 2 = -1.
    assert float(riesz_energy(antipodal_pair(), -1.0)) == pytest.approx(-1.0, rel=1e-15)
    # Triangle, s = 2.5: 3^{-5/4} / 2.
    assert float(riesz_energy(triangle(), 2.5)) == pytest.approx(0.5 * 3 ** -1.25, rel=1e-14)


@pytest.mark.parametrize("s", (-1.0, 0.0, 1.0, 2.5))
@pytest.mark.parametrize("name", ("tetrahedron", "octahedron", "triangle"))
def test_force_on_symmetric_configurations_is_radial(name, s):
    # By symmetry the net force on each vertex of a regular polytope points along the vertex.
    x = ORACLES[name][0]()
    grad = riesz_energy_grad(x, s)
    tangential = grad - np.sum(grad * x, axis=1, keepdims=True) * x
    assert np.abs(tangential).max() < 1e-14
    assert np.abs(grad).max() > 1e-3


# ----------------------------------------------------------------------------- kernel

def test_kernel_values_and_softening():
    assert float(riesz_kernel(2.0, 1.0)) == 0.5
    assert float(riesz_kernel(2.0, 0.0)) == pytest.approx(-math.log(2.0), rel=1e-15)
    assert float(riesz_kernel(2.0, -1.0)) == pytest.approx(-2.0, rel=1e-15)
    assert float(riesz_kernel(3.0, 2.0, softening=4.0)) == pytest.approx(1 / 25, rel=1e-15)
    assert float(riesz_kernel(0.0, 1.0, softening=1.0)) == 1.0
    assert np.isinf(riesz_kernel(np.array([0.0]), 1.0))[0]
    r = np.array([0.5, 1.0, 2.0])
    np.testing.assert_allclose(riesz_kernel(r, 2.5), r ** -2.5, rtol=1e-15)


@pytest.mark.parametrize("s", S_VALUES)
@pytest.mark.parametrize("softening", (0.0, 0.3))
def test_pair_gradient_matches_central_difference(s, softening):
    w = np.random.default_rng(1).normal(size=(5, 3))
    g, grad = riesz_pair(w, s, softening)
    for k in range(5):
        fd = central_difference(lambda v: riesz_pair(v, s, softening)[0][0], w[k:k + 1])
        np.testing.assert_allclose(grad[k:k + 1], fd, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(g, [g_hand(math.sqrt(r2 + softening ** 2), s) for r2 in (w * w).sum(1)],
                               rtol=1e-14)


# ----------------------------------------------------------------------------- gradients

@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("softening", (0.0, 0.2))
@pytest.mark.parametrize("s", S_VALUES)
def test_energy_gradient_matches_central_difference(s, softening, method):
    x = np.random.default_rng(2).normal(size=(6, 3))
    energy, grad = riesz_energy_and_grad(x, s, softening, method=method)
    fd = central_difference(lambda v: riesz_energy(v, s, softening, method=method), x)
    np.testing.assert_allclose(grad, fd, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(riesz_energy_grad(x, s, softening, method=method), grad, rtol=1e-15)


def test_energy_brute_force_and_normalisation():
    x = np.random.default_rng(3).normal(size=(7, 2))
    n = len(x)
    for s in S_VALUES:
        total = sum(g_hand(np.linalg.norm(x[k] - x[l]), s) for k in range(n) for l in range(n) if k != l)
        assert float(riesz_energy(x, s)) == pytest.approx(total / (2 * n * (n - 1)), rel=1e-13)


# ----------------------------------------------------------------------------- numba vs numpy

@pytest.mark.parametrize("n,d", ((2, 1), (9, 2), (33, 3), (300, 2)))
@pytest.mark.parametrize("s", S_VALUES + (0.73, -1.9, 7.0))
@pytest.mark.parametrize("softening", (0.0, 0.05))
def test_numba_matches_numpy(n, d, s, softening):
    x = np.random.default_rng(n * 10 + d).normal(size=(n, d))
    e_np, g_np = riesz_energy_and_grad(x, s, softening, method="numpy")
    e_nb, g_nb = riesz_energy_and_grad(x, s, softening, method="numba")
    assert abs(e_nb - e_np) <= 1e-12 * abs(e_np)
    assert np.abs(g_nb - g_np).max() <= 1e-12 * np.abs(g_np).max()
    np.testing.assert_allclose(riesz_potential(x, s, softening, method="numba"),
                               riesz_potential(x, s, softening, method="numpy"), rtol=1e-12, atol=1e-14)


# ----------------------------------------------------------------------------- GEMM path vs reference

GEMM_RTOL = 1e-10  # stated tolerance of method="gemm" against the reference (module docstring of riesz)


def assert_gemm_matches_reference(x, s, softening, chunk_size=None):
    e_np, g_np = riesz_energy_and_grad(x, s, softening, method="numpy")
    e_gm, g_gm = riesz_energy_and_grad(x, s, softening, method="gemm", chunk_size=chunk_size)
    pot_np = riesz_potential(x, s, softening, method="numpy")
    pot_gm = riesz_potential(x, s, softening, method="gemm", chunk_size=chunk_size)
    scale = np.abs(pot_np).max()
    assert abs(e_gm - e_np) <= GEMM_RTOL * scale
    np.testing.assert_allclose(pot_gm, pot_np, rtol=GEMM_RTOL, atol=GEMM_RTOL * scale)
    np.testing.assert_allclose(g_gm, g_np, rtol=0, atol=GEMM_RTOL * np.abs(g_np).max())
    np.testing.assert_array_equal(riesz_energy_grad(x, s, softening, method="gemm", chunk_size=chunk_size), g_gm)


@pytest.mark.parametrize("n,d", ((2, 1), (9, 2), (40, 16), (70, 64)))
@pytest.mark.parametrize("s", S_VALUES + (0.73, -1.9, 7.0, "coulomb"))
@pytest.mark.parametrize("softening", (0.0, 0.05))
def test_gemm_matches_numpy(n, d, s, softening):
    s = max(d - 2.0, 0.5) if s == "coulomb" else s
    x = np.random.default_rng(n * 10 + d).normal(size=(n, d))
    assert_gemm_matches_reference(x, s, softening, chunk_size=7)  # several row tiles


@pytest.mark.parametrize("d", (3, 64))
@pytest.mark.parametrize("s", (-1.0, 0.0, 1.0, 2.5, 7.0))
def test_gemm_recomputes_close_pairs_exactly(d, s, monkeypatch):
    from rieszflow.engine.energy import riesz

    rng = np.random.default_rng(12)
    # near-duplicate points (1e-7 apart) on a cloud of norm ~1e4, plus two far, tight clusters
    base = 1e4 + rng.normal(size=(20, d))
    twins = base + 1e-7 * rng.normal(size=(20, d))
    far = np.concatenate([rng.normal(size=(10, d)) * 1e-2 + 3e4, rng.normal(size=(10, d)) * 1e-2 - 3e4])
    x = np.concatenate([base, twins, far])
    for softening in (0.0, 1e-6):
        assert_gemm_matches_reference(x, s, softening, chunk_size=16)
    # The configuration is adversarial: without the exact recomputation the Gram formula is far off.
    monkeypatch.setattr(riesz, "GEMM_R2_RTOL", math.inf)  # theta = 0: nothing recomputed
    assert riesz.gemm_close_threshold(s, d) == 0.0
    with np.errstate(all="ignore"):
        e_raw, g_raw = riesz_energy_and_grad(x, s, method="gemm")
    e_np, g_np = riesz_energy_and_grad(x, s, method="numpy")
    assert not np.isfinite(e_raw) or not np.allclose(g_raw, g_np, rtol=1e-6, atol=1e-6 * np.abs(g_np).max())


def test_gemm_close_threshold_is_the_stated_bound():
    from rieszflow.engine.energy.riesz import GEMM_R2_RTOL, gemm_close_threshold

    u = 2.0 ** -53
    for d, s in ((1, 0.0), (64, 0.0), (64, -1.5), (64, 62.0), (512, 1.0)):
        gamma = d * u / (1 - d * u)
        assert gemm_close_threshold(s, d) == pytest.approx(max(1.0, (s + 2) / 2) * (2 * gamma + u) / GEMM_R2_RTOL,
                                                           rel=1e-15)
    assert gemm_close_threshold(0.0, 64) < 2e-3  # d = 64: pairs closer than ~4% of the norms are recomputed


def test_auto_chooses_gemm_from_the_measured_crossover():
    from rieszflow.engine.energy.riesz import GEMM_MIN_D

    rng = np.random.default_rng(13)
    for d, method in ((GEMM_MIN_D, "gemm"), (GEMM_MIN_D - 1, "numba")):
        x = rng.normal(size=(30, d))
        e, g = riesz_energy_and_grad(x, 0.7)
        e_m, g_m = riesz_energy_and_grad(x, 0.7, method=method)
        assert e == e_m and np.array_equal(g, g_m)
    x = rng.normal(size=(30, GEMM_MIN_D)).astype(np.float32)
    e32, g32 = riesz_energy_and_grad(x, 1.0, method="gemm")
    assert np.asarray(e32).dtype == np.float64 and g32.dtype == np.float32
    assert e32 == pytest.approx(riesz_energy_and_grad(x.astype(np.float64), 1.0, method="numpy")[0], rel=1e-12)


def test_auto_uses_numba_on_host_and_chunking_is_invisible():
    x = np.random.default_rng(4).normal(size=(40, 3))
    ref = riesz_energy_and_grad(x, 1.3, method="numba")
    for chunk in (1, 7, 40, 1000):
        e, g = riesz_energy_and_grad(x, 1.3, method="numpy", chunk_size=chunk)
        assert e == pytest.approx(ref[0], rel=1e-13)
        np.testing.assert_allclose(g, ref[1], rtol=1e-12, atol=1e-15)
    e, g = riesz_energy_and_grad(x, 1.3)
    assert e == ref[0] and np.array_equal(g, ref[1])


def test_diagonal_is_masked_before_the_kernel():
    # A kernel evaluated at r = 0 on the diagonal would raise divide/invalid warnings.
    x = np.random.default_rng(5).normal(size=(10, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for s in (0.0, 1.0, -0.5):
            e, g = riesz_energy_and_grad(x, s, method="numpy")
            assert np.isfinite(e) and np.isfinite(g).all()


def test_float32_positions_accumulate_in_float64():
    x = np.random.default_rng(6).normal(size=(50, 2))
    e64, g64 = riesz_energy_and_grad(x, 1.0, method="numpy")
    e32, g32 = riesz_energy_and_grad(x.astype(np.float32), 1.0, method="numpy")
    assert np.asarray(e32).dtype == np.float64 and g32.dtype == np.float32
    assert e32 == pytest.approx(e64, rel=1e-5)


# ----------------------------------------------------------------------------- properties

points = st.integers(min_value=2, max_value=12).flatmap(
    lambda n: st.tuples(st.integers(0, 2 ** 31 - 1), st.just(n), st.integers(1, 3)))


@settings(max_examples=40, deadline=None)
@given(points, st.sampled_from(S_VALUES))
def test_permutation_invariance(p, s):
    seed, n, d = p
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    perm = rng.permutation(n)
    e, g = riesz_energy_and_grad(x, s)
    e_p, g_p = riesz_energy_and_grad(x[perm], s)
    assert e_p == pytest.approx(e, rel=1e-13, abs=1e-13)
    np.testing.assert_allclose(g_p, g[perm], rtol=1e-12, atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(points, st.sampled_from(S_VALUES), st.floats(0.25, 4.0))
def test_translation_invariance_and_homogeneity(p, s, c):
    seed, n, d = p
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    e = float(riesz_energy(x, s))
    assert float(riesz_energy(x + rng.normal(size=d), s)) == pytest.approx(e, rel=1e-9, abs=1e-9)
    # g_s(c w) = c^{-s} g_s(w) for s != 0 and g_0(c w) = g_0(w) - log c; the pair average of 1 is 1/2.
    expected = c ** (-s) * e if s != 0 else e - 0.5 * math.log(c)
    assert float(riesz_energy(c * x, s)) == pytest.approx(expected, rel=1e-11, abs=1e-12)


# ----------------------------------------------------------------------------- energy object

@pytest.mark.parametrize("s", (-1.0, 0.0, 1.5))
def test_riesz_energy_object_normalisations(s):
    x = np.random.default_rng(7).normal(size=(8, 2))
    n, lam = len(x), 0.7
    W, gW = riesz_energy_and_grad(x, s)
    paper = RieszEnergy(s, lam)
    mf = RieszEnergy(s, lam, normalization="mean_field")
    assert float(paper(x)) == pytest.approx(lam * W, rel=1e-14)
    np.testing.assert_allclose(paper.grad(x), lam * gW, rtol=1e-14)
    # mean field: (lam / 2N) sum_{i != j} g = lam (N - 1) W, drift (lam / N) sum_j grad g
    assert float(mf(x)) == pytest.approx(lam * (n - 1) * W, rel=1e-13)
    np.testing.assert_allclose(mf.grad(x), lam * (n - 1) * gW, rtol=1e-13)
    v, g = mf.value_and_grad(x)
    assert float(v) == pytest.approx(float(mf(x)), rel=1e-15)
    np.testing.assert_allclose(g, mf.grad(x), rtol=1e-15)


@pytest.mark.parametrize("normalization,grad_scale", (("paper", 8), ("mean_field", 1)))
def test_per_particle_energy_is_the_potential_of_the_drift(normalization, grad_scale):
    # d/d omega_k of per_particle[k] (others frozen) equals grad_scale * grad[k] (eq. (A.7)).
    x = np.random.default_rng(8).normal(size=(8, 2))
    energy = RieszEnergy(1.0, 0.5, normalization=normalization)
    grad = energy.grad(x)
    for k in (0, 5):
        def u_k(v, k=k):
            y = x.copy()
            y[k] = v[0]
            return energy.per_particle(y)[k]
        np.testing.assert_allclose(central_difference(u_k, x[k:k + 1]), grad_scale * grad[k:k + 1],
                                   rtol=1e-7, atol=1e-10)
    assert float(np.mean(riesz_potential(x, 1.0))) == pytest.approx(2 * float(riesz_energy(x, 1.0)), rel=1e-14)


def test_mean_field_allows_a_single_particle():
    x = np.zeros((1, 2))
    assert float(RieszEnergy(1.0, normalization="mean_field")(x)) == 0.0
    with pytest.raises(ValueError, match="N >= 2"):
        RieszEnergy(1.0)(x)


# ----------------------------------------------------------------------------- errors

@pytest.mark.parametrize("s", (-2.0, -3.0, float("nan"), float("inf")))
def test_s_out_of_range_is_rejected(s):
    x = np.random.default_rng(9).normal(size=(4, 2))
    with pytest.raises(ValueError, match="s"):
        riesz_energy(x, s)
    with pytest.raises(ValueError, match="s"):
        riesz_kernel(1.0, s)
    with pytest.raises(ValueError, match="s"):
        RieszEnergy(s)


def test_bad_inputs_are_rejected():
    x = np.random.default_rng(10).normal(size=(4, 2))
    with pytest.raises(TypeError, match="s"):
        riesz_energy(x, "1")
    with pytest.raises(ValueError, match=r"shape \(N, d\)"):
        riesz_energy(x[:, 0], 1.0)
    with pytest.raises(ValueError, match=r"shape \(N, d\)"):
        riesz_energy(x[..., None], 1.0)
    with pytest.raises(ValueError, match="N >= 2"):
        riesz_energy(x[:1], 1.0)
    bad = x.copy()
    bad[1, 1] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        riesz_energy(bad, 1.0)
    with pytest.raises(ValueError, match="softening"):
        riesz_energy(x, 1.0, softening=-0.1)
    with pytest.raises(ValueError, match="method"):
        riesz_energy(x, 1.0, method="fmm")
    with pytest.raises(ValueError, match="chunk_size"):
        riesz_energy(x, 1.0, method="numpy", chunk_size=0)
    with pytest.raises(ValueError, match="normalization"):
        RieszEnergy(1.0, normalization="extensive")
    with pytest.raises(ValueError, match="lam"):
        RieszEnergy(1.0, lam=-1.0)
    with pytest.raises(ValueError, match="r must"):
        riesz_kernel(np.array([-1.0]), 1.0)


@pytest.mark.parametrize("method", METHODS)
def test_coincident_particles_give_infinite_energy_unless_softened(method):
    x = np.array([[0.0, 0.0], [0.0, 0.0], [1.0, 0.0]])
    with np.errstate(divide="ignore", invalid="ignore"):
        assert np.isposinf(riesz_energy(x, 1.0, method=method))
        assert float(riesz_energy(x, -1.0, method=method)) == pytest.approx(-2.0 / 6.0, rel=1e-15)
    assert np.isfinite(riesz_energy(x, 1.0, softening=0.1, method=method))


# ----------------------------------------------------------------------------- GPU parity

@pytest.mark.gpu
@pytest.mark.parametrize("s", (-1.0, 0.0, 1.0, 2.5))
def test_cupy_matches_numpy(s):
    from rieszflow.engine.backend import cupy_available, to_numpy

    if not cupy_available():
        pytest.skip("CuPy with a CUDA device is not available")
    import cupy as cp

    x = np.random.default_rng(11).normal(size=(300, 3))
    e_np, g_np = riesz_energy_and_grad(x, s, 0.01, method="numpy")
    e_cp, g_cp = riesz_energy_and_grad(cp.asarray(x), s, 0.01)  # auto -> array-API reference
    assert float(e_cp) == pytest.approx(float(e_np), rel=1e-12)
    np.testing.assert_allclose(to_numpy(g_cp), g_np, rtol=1e-11, atol=1e-14)
    e_gm, g_gm = riesz_energy_and_grad(cp.asarray(x), s, 0.01, method="gemm")
    assert float(e_gm) == pytest.approx(float(e_np), rel=1e-10)
    np.testing.assert_allclose(to_numpy(g_gm), g_np, rtol=0, atol=1e-10 * np.abs(g_np).max())
    with pytest.raises(TypeError, match="numba"):
        riesz_energy(cp.asarray(x), s, method="numba")


@pytest.mark.parametrize("s", [0.0, 1.0])
def test_riesz_energy_and_grad_without_validation_is_the_same_sum(s):
    """``validate=False`` (Phase A's per-step path: no host sync) gives the validated result bit
    for bit; only the checks are skipped."""
    from rieszflow.engine.energy.riesz import riesz_energy_and_grad

    omega = np.random.default_rng(0).standard_normal((40, 5))
    e1, g1 = riesz_energy_and_grad(omega, s)
    e2, g2 = riesz_energy_and_grad(omega, s, validate=False)
    assert e1 == e2 and np.array_equal(g1, g2)
    with pytest.raises(ValueError):
        riesz_energy_and_grad(omega[:1], s)           # N = 1 is refused when validating
