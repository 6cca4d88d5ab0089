"""Tests of the fused RFF alignment path (``method="fused"``) against the reference (``method="numpy"``).

Tolerances: float64 tiles agree with the reference to 1e-12 relative to the largest entry
(measured ~4e-15 at n = 1e4, M = 1e3, d = 64); float32 tiles to ``F32_TOL`` = 2e-5 relative
(the phases are rounded to float32, relative error 2**-24 ~ 6e-8 per phase, times phases of
order 10 in these tests and the condition of the sums; measured ~5e-7 at the benchmark's size).
"""
from __future__ import annotations

import numba
import numpy as np
import pytest

from rieszflow.engine.energy import (
    RFFAlignmentEnergy,
    alignment_potential,
    alignment_potential_and_grad,
    hamiltonian_and_grad,
    rff_alignment_energy,
    rff_alignment_energy_and_grad,
    rff_hamiltonian,
)
from rieszflow.engine.energy import _alignment_kernels as ak

F64_TOL = 1e-12
F32_TOL = 2e-5


@pytest.fixture(autouse=True)
def _one_numba_thread():
    """Pin Numba to one thread (the results do not depend on it: see the thread test)."""
    before = numba.get_num_threads()
    numba.set_num_threads(1)
    yield
    numba.set_num_threads(before)


def _problem(rng, n=37, M=11, d=5, scale=0.7):
    X = rng.normal(size=(n, d))
    y = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    omega = scale * rng.normal(size=(M, d))
    b = rng.uniform(0.0, 2.0 * np.pi, size=M)
    return omega, X, y, b


def _rel(a, b):
    """Largest difference relative to the largest entry of the reference."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def central_difference(f, x, h=1e-6):
    """Float64 central-difference gradient of a scalar function of an array."""
    grad = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        xp_, xm = x.copy(), x.copy()
        xp_[idx] += h
        xm[idx] -= h
        grad[idx] = (float(f(xp_)) - float(f(xm))) / (2 * h)
    return grad


# --------------------------------------------------------------------------- sincos


def test_sincos_matches_libm():
    rng = np.random.default_rng(5)
    half_pi = np.pi / 2
    x = np.concatenate([
        rng.uniform(-10.0, 10.0, 20000),
        rng.uniform(-ak.PHASE_LIMIT, ak.PHASE_LIMIT, 20000),
        np.arange(-3000, 3000) * half_pi,                       # the quadrant boundaries
        np.arange(-3000, 3000) * half_pi + 1e-9,
        np.arange(-3000, 3000) * (np.pi / 4),                   # the polynomial's interval ends
        [0.0, -0.0, 1e-300, ak.PHASE_LIMIT, -ak.PHASE_LIMIT],
    ])
    s, c = ak.sincos_array(x)
    # absolute error: the alignment sums use sin and cos as summands of O(1)
    assert np.max(np.abs(s - np.sin(x))) < 2.5e-16
    assert np.max(np.abs(c - np.cos(x))) < 2.5e-16


def test_sincos32_matches_libm():
    rng = np.random.default_rng(6)
    x = np.concatenate([
        rng.uniform(-10.0, 10.0, 20000),
        rng.uniform(-ak.PHASE_LIMIT_F32, ak.PHASE_LIMIT_F32, 20000),
        np.arange(-2000, 2000) * (np.pi / 2),
        np.arange(-2000, 2000) * (np.pi / 4),
        [0.0, ak.PHASE_LIMIT_F32, -ak.PHASE_LIMIT_F32],
    ]).astype(np.float32)
    s, c = ak.sincos_array(x)
    assert s.dtype == np.float32 and c.dtype == np.float32
    x64 = x.astype(np.float64)                       # the float32 value, exactly
    # a few float32 ulp of 1 (2**-24 ~ 6e-8)
    assert np.max(np.abs(s - np.sin(x64))) < 2.5e-7
    assert np.max(np.abs(c - np.cos(x64))) < 2.5e-7


# --------------------------------------------------------------------------- agreement with the reference


@pytest.mark.parametrize("phased", [False, True])
@pytest.mark.parametrize("n, M, chunk", [(37, 11, None), (37, 11, 1), (37, 11, 3), (37, 11, 4), (37, 11, 11),
                                          (37, 11, 50), (2, 5, 2), (8, 7, 3), (64, 1, None)])
def test_fused_float64_matches_reference(rng, phased, n, M, chunk):
    omega, X, y, b = _problem(rng, n=n, M=M)
    bb = b if phased else None
    V_ref, g_ref = alignment_potential_and_grad(omega, X, y, bb, method="numpy")
    V, g = alignment_potential_and_grad(omega, X, y, bb, chunk_size=chunk, method="fused")
    assert V.dtype == np.float64 and g.dtype == np.float64 and g.shape == omega.shape
    assert _rel(V, V_ref) < F64_TOL
    assert _rel(g, g_ref) < F64_TOL


def test_chunks_give_identical_results(rng):
    """Each particle's pass is independent of the tile it is in: bitwise equal for every chunk size."""
    omega, X, y, b = _problem(rng, n=53, M=13)
    V0, g0 = alignment_potential_and_grad(omega, X, y, b, chunk_size=13, method="fused")
    for chunk in (1, 2, 5, 6, 100):
        V, g = alignment_potential_and_grad(omega, X, y, b, chunk_size=chunk, method="fused")
        np.testing.assert_allclose(V, V0, rtol=0, atol=1e-15 * np.max(np.abs(V0)))
        np.testing.assert_allclose(g, g0, rtol=0, atol=1e-15 * np.max(np.abs(g0)))


def test_strided_and_fortran_inputs(rng):
    omega, X, y, b = _problem(rng, n=40, M=9, d=6)
    big = np.zeros((9, 12))
    big[:, ::2] = omega                                  # a strided view
    V_ref, g_ref = alignment_potential_and_grad(omega, X, y, b, method="numpy")
    V, g = alignment_potential_and_grad(big[:, ::2], np.asfortranarray(X), y[::1], b, chunk_size=4, method="fused")
    assert _rel(V, V_ref) < F64_TOL
    assert _rel(g, g_ref) < F64_TOL


def test_auto_is_fused_on_numpy_arrays(rng):
    omega, X, y, b = _problem(rng)
    for bb in (None, b):
        Va, ga = alignment_potential_and_grad(omega, X, y, bb)
        Vf, gf = alignment_potential_and_grad(omega, X, y, bb, method="fused")
        np.testing.assert_array_equal(Va, Vf)
        np.testing.assert_array_equal(ga, gf)


def test_libm_branch_for_large_phases(rng):
    """Phases beyond PHASE_LIMIT take libm sin/cos; still equal to the reference."""
    omega, X, y, b = _problem(rng, n=29, M=6, d=3)
    omega = omega * (3.0 * ak.PHASE_LIMIT / np.max(np.abs(omega)))
    for bb in (None, b):
        V_ref, g_ref = alignment_potential_and_grad(omega, X, y, bb, method="numpy")
        V, g = alignment_potential_and_grad(omega, X, y, bb, method="fused")
        assert _rel(V, V_ref) < F64_TOL
        assert _rel(g, g_ref) < F64_TOL


@pytest.mark.parametrize("phased", [False, True])
@pytest.mark.parametrize("f32_limit", [None, 1e-3])   # float32 sincos; float64 sincos of float32 phases
def test_fused_float32_tiles(rng, monkeypatch, phased, f32_limit):
    if f32_limit is not None:          # phases "beyond" the float32 polynomial's range
        monkeypatch.setattr(ak, "PHASE_LIMIT_F32", f32_limit)
    omega, X, y, b = _problem(rng, n=300, M=17, d=8)
    bb = b if phased else None
    V_ref, g_ref = alignment_potential_and_grad(omega, X, y, bb, method="numpy")
    V, g = alignment_potential_and_grad(omega, X, y, bb, chunk_size=5, method="fused", tile_dtype="float32")
    assert V.dtype == np.float64 and g.dtype == np.float64
    assert _rel(V, V_ref) < F32_TOL
    assert _rel(g, g_ref) < F32_TOL
    # and it is a float32 computation, not the float64 one under another name
    assert _rel(V, V_ref) > 1e-12 or _rel(g, g_ref) > 1e-12


def test_float32_gradient_blocks_over_data(rng, monkeypatch):
    """More data points than one float32 gradient block: the float64 sum over blocks is right."""
    from rieszflow.engine.energy import alignment

    monkeypatch.setattr(alignment, "F32_GRAD_ROWS", 7)
    omega, X, y, b = _problem(rng, n=50, M=4)
    V_ref, g_ref = alignment_potential_and_grad(omega, X, y, b, method="numpy")
    V, g = alignment_potential_and_grad(omega, X, y, b, method="fused", tile_dtype="float32")
    assert _rel(V, V_ref) < F32_TOL
    assert _rel(g, g_ref) < F32_TOL


def test_float32_omega_keeps_its_dtype(rng):
    omega, X, y, b = _problem(rng)
    g = alignment_potential_and_grad(omega.astype(np.float32), X, y, method="fused")[1]
    assert g.dtype == np.float32
    g_ref = alignment_potential_and_grad(omega.astype(np.float32), X, y, method="numpy")[1]
    assert _rel(g, g_ref) < 1e-6


def test_thread_count_does_not_change_results(rng, monkeypatch):
    """One prange task per particle with a fixed summation order: bitwise equal for 1 and 2 threads."""
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("NUMBA_NUM_THREADS=1 in this process: only one thread count to compare")
    from rieszflow.engine import threads

    omega, X, y, b = _problem(rng, n=101, M=9)
    before = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        one = alignment_potential_and_grad(omega, X, y, b, method="fused")     # serial build
        numba.set_num_threads(2)
        # the policy grants the alignment kernel no Numba threads: grant them for this test
        rule = threads.THREAD_RULES["alignment"]
        monkeypatch.setitem(threads.THREAD_RULES, "alignment", threads.ThreadRule(
            blas=1, numba_min_work=1.0, units="particles x data points", evidence=rule.evidence))
        monkeypatch.setattr(threads, "thread_cap", lambda: 2)
        assert threads.numba_threads("alignment", 9 * 101) == 2
        two = alignment_potential_and_grad(omega, X, y, b, method="fused")     # prange build
    finally:
        numba.set_num_threads(before)
    np.testing.assert_array_equal(one[0], two[0])
    np.testing.assert_array_equal(one[1], two[1])


def test_serial_and_parallel_kernels_are_the_same_pass(rng):
    """rff_tile (prange) and rff_tile_serial compile one function: bitwise equal outputs."""
    omega, X, y, b = _problem(rng, n=45, M=6)
    U = np.ascontiguousarray(omega @ X.T)
    c = -1.0 / (45 * 44.0)
    for phased in (False, True):
        outs = []
        for kernel in (ak.rff_tile, ak.rff_tile_serial):
            u = U.copy()
            V = kernel(u, np.empty_like(u), y, b if phased else np.zeros(6), phased, ak.MODE_NATIVE, c,
                       float(y @ y))
            outs.append((V, u))
        np.testing.assert_array_equal(outs[0][0], outs[1][0])
        np.testing.assert_array_equal(outs[0][1], outs[1][1])


# --------------------------------------------------------------------------- gradients


@pytest.mark.parametrize("phased", [False, True])
def test_fused_gradient_central_differences(rng, phased):
    omega, X, y, b = _problem(rng, n=23, M=4, d=3)
    bb = b if phased else None
    g = rff_alignment_energy_and_grad(omega, X, y, bb, chunk_size=3, method="fused")[1]
    fd = central_difference(lambda w: rff_alignment_energy(w, X, y, bb, chunk_size=3, method="fused"), omega)
    # central differences with h = 1e-6: truncation O(h^2 |V'''|) ~ 1e-12, rounding ~1e-16/h
    np.testing.assert_allclose(g, fd, rtol=0, atol=1e-8 * max(1.0, np.max(np.abs(fd))))


def test_energy_class_and_hamiltonian_pass_the_method(rng):
    omega, X, y, b = _problem(rng)
    ref = RFFAlignmentEnergy(X, y, b, method="numpy")
    for E in (RFFAlignmentEnergy(X, y, b, method="fused", chunk_size=4),
              RFFAlignmentEnergy(X, y, b, method="fused", tile_dtype="float32")):
        tol = F64_TOL if E.tile_dtype == "float64" else F32_TOL
        assert abs(E(omega) - ref(omega)) < tol * np.max(np.abs(ref.per_particle(omega)))
        assert _rel(E.grad(omega), ref.grad(omega)) < tol
        assert _rel(E.per_particle(omega), ref.per_particle(omega)) < tol
    h_ref = hamiltonian_and_grad(omega, X, y, 1.0, 0.3, b, alignment_method="numpy")
    h = hamiltonian_and_grad(omega, X, y, 1.0, 0.3, b, alignment_method="fused")
    assert abs(h[0] - h_ref[0]) < F64_TOL * abs(h_ref[0])
    assert _rel(h[1], h_ref[1]) < F64_TOL
    assert rff_hamiltonian(X, y, 1.0, 0.3, alignment_method="fused").terms[0].method == "fused"


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("kwargs, match", [
    ({"method": "numba"}, r"method='numba' is not supported; allowed: 'auto', 'numpy', 'fused'"),
    ({"tile_dtype": "float16"}, r"tile_dtype='float16' is not supported; allowed: 'float64', 'float32'"),
    ({"tile_dtype": "float32", "method": "numpy"}, r"tile_dtype='float32' is a precision of method='fused'"),
    ({"chunk_size": 0}, r"chunk_size"),
])
def test_bad_arguments(rng, kwargs, match):
    omega, X, y, _ = _problem(rng)
    with pytest.raises(ValueError, match=match):
        alignment_potential(omega, X, y, **kwargs)


def test_bad_arguments_of_the_energy_and_hamiltonian(rng):
    omega, X, y, _ = _problem(rng)
    with pytest.raises(ValueError, match="method='gemm' is not supported"):
        RFFAlignmentEnergy(X, y, method="gemm")
    with pytest.raises(ValueError, match="tile_dtype='half' is not supported"):
        RFFAlignmentEnergy(X, y, tile_dtype="half")
    with pytest.raises(ValueError, match="method='fast' is not supported"):
        rff_hamiltonian(X, y, 1.0, 0.1, alignment_method="fast")


def test_bad_data_is_refused_by_the_fused_path(rng):
    omega, X, y, b = _problem(rng)
    X_bad = X.copy()
    X_bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="X"):
        alignment_potential(omega, X_bad, y, method="fused")
    with pytest.raises(ValueError, match=r"X must have d=3 columns"):
        alignment_potential(omega[:, :3], X, y, method="fused")
    with pytest.raises(ValueError, match="b"):
        alignment_potential(omega, X, y, b[:-1], method="fused")


def test_sincos_native_from_python_picks_the_precision():
    """Called from Python, sincos_native dispatches on the dtype as its Numba overload does."""
    from rieszflow.engine.energy._alignment_kernels import sincos_native

    for x in (0.3, -2.5, 1000.25):
        s64, c64 = sincos_native(x)
        assert abs(s64 - np.sin(x)) <= 2.5e-16 * 4 and abs(c64 - np.cos(x)) <= 2.5e-16 * 4
        s32, c32 = sincos_native(np.float32(x))
        x32 = float(np.float32(x))
        assert abs(s32 - np.sin(x32)) <= 2.5e-7 and abs(c32 - np.cos(x32)) <= 2.5e-7
