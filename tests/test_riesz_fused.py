"""The fused Riesz kernel: its NumPy mirror against the reference (CPU), the CUDA kernel on a GPU.

``method="fused"`` runs a CUDA kernel on CuPy arrays and, on host arrays, the NumPy mirror of
its tiling (column tiles of ``fused_tile(d)`` rows, one row per thread, float64 sums): the
mirror is what proves the kernel's logic where no GPU is. The CUDA source itself is also
executed on the CPU (compiled with g++, each block's threads as std::threads meeting at a barrier
for ``__syncthreads``; skipped without g++). The GPU test compares the kernel on the device with
the reference and skips cleanly without CuPy.
"""
from __future__ import annotations

import ctypes
import shutil
import subprocess

import numpy as np
import pytest

from rieszflow.engine.backend import cupy_available, to_numpy
from rieszflow.engine.energy.riesz import (RieszEnergy, fused_kernel_source, fused_tile,
                                           riesz_energy_and_grad, riesz_energy_grad, riesz_potential)


def _rel(a, b):
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b))) / max(np.max(np.abs(np.asarray(b))), 1e-300))


@pytest.mark.parametrize("s", [-1.5, -1.0, 0.0, 0.7, 1.0, 2.5, 6.0])
@pytest.mark.parametrize("d, n", [(1, 300), (3, 150), (64, 140), (100, 70)])
@pytest.mark.parametrize("softening", [0.0, 0.05])
def test_fused_mirror_matches_reference(s, d, n, softening):
    x = np.random.default_rng(int(10 * s) + d + n).normal(size=(n, d))
    assert n > fused_tile(d)                     # more than one column tile: the tiling is exercised
    e_ref, g_ref = riesz_energy_and_grad(x, s, softening, method="numpy")
    e, g = riesz_energy_and_grad(x, s, softening, method="fused")
    assert float(e) == pytest.approx(float(e_ref), rel=1e-12, abs=1e-300)
    assert _rel(g, g_ref) <= 1e-12
    assert _rel(riesz_energy_grad(x, s, softening, method="fused"), g_ref) <= 1e-12
    assert _rel(riesz_potential(x, s, softening, method="fused"),
                riesz_potential(x, s, softening, method="numpy")) <= 1e-12


def test_fused_mirror_float32_accumulates_in_float64():
    x = np.random.default_rng(5).normal(size=(300, 8)).astype(np.float32)
    e_ref, g_ref = riesz_energy_and_grad(x.astype(np.float64), 1.0, method="numpy")
    e, g = riesz_energy_and_grad(x, 1.0, method="fused")
    assert g.dtype == np.float32
    assert float(e) == pytest.approx(float(e_ref), rel=1e-13)   # same float32 inputs, float64 sums
    assert _rel(g, g_ref) <= 1e-6                                 # float32 output rounding


def test_fused_mirror_in_the_energy_class():
    x = np.random.default_rng(6).normal(size=(90, 5))
    a = RieszEnergy(s=1.0, lam=0.3, method="fused").value_and_grad(x)
    b = RieszEnergy(s=1.0, lam=0.3, method="numpy").value_and_grad(x)
    assert float(a[0]) == pytest.approx(float(b[0]), rel=1e-12)
    assert _rel(a[1], b[1]) <= 1e-12


def test_fused_closed_form_two_particles():
    """Two particles at distance r = 0.5, s = 1: energy 2 g_1(r) / (2N(N-1)) = 1/r / 2."""
    x = np.array([[0.0, 0.0, 0.0], [0.3, 0.4, 0.0]])          # r = 0.5
    e, g = riesz_energy_and_grad(x, 1.0, method="fused")
    assert float(e) == pytest.approx(2 * (1 / 0.5) / (2 * 2 * 1), rel=1e-15)   # 2 pairs of 1/r
    # grad_k = (1/(N(N-1))) * (-|w|^{-3} w), w = x_0 - x_1
    w = x[0] - x[1]
    np.testing.assert_allclose(g[0], -w / 0.5 ** 3 / 2.0, rtol=1e-15)
    np.testing.assert_allclose(g[1], w / 0.5 ** 3 / 2.0, rtol=1e-15)


# The CUDA source itself, executed on the CPU: each block's threads are std::threads meeting at a
# std::barrier for __syncthreads, the tile is one static array per block (blocks run in turn).
_EMULATION = r"""
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstddef>
#include <thread>
#include <vector>
using std::log; using std::min; using std::pow;
struct dim_ { int x; };
static thread_local dim_ threadIdx;
static dim_ blockIdx, blockDim;
static std::barrier<>* block_barrier;
static void __syncthreads() { block_barrier->arrive_and_wait(); }
#define __global__
#define __restrict__
#define __shared__ static
"""

_LAUNCH = r"""
extern "C" void launch(const real_t* x, int n, double s, double eps2, int want, double* rows,
                       double* acc, int threads) {
    blockDim.x = threads;
    for (int b = 0; b < (n + threads - 1) / threads; ++b) {
        blockIdx.x = b;
        std::barrier<> bar(threads);
        block_barrier = &bar;
        std::vector<std::thread> ts;
        for (int t = 0; t < threads; ++t)
            ts.emplace_back([=] { threadIdx.x = t; riesz_fused(x, n, s, eps2, want, rows, acc); });
        for (auto& th : ts) th.join();
    }
}
"""


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs a C++20 compiler (g++) to run the CUDA source on the CPU")
@pytest.mark.parametrize("d, dtype, s, threads", [(3, np.float64, 0.0, 128), (64, np.float32, 1.0, 32),
                                                   (5, np.float64, -1.0, 32)])
def test_cuda_source_executed_on_cpu_threads_matches_reference(tmp_path, d, dtype, s, threads):
    src = tmp_path / "kernel.cpp"
    lib = tmp_path / "kernel.so"
    src.write_text(_EMULATION + fused_kernel_source(d, dtype) + _LAUNCH)
    subprocess.run(["g++", "-std=c++20", "-O1", "-shared", "-fPIC", "-pthread", str(src), "-o", str(lib)],
                   check=True, capture_output=True, timeout=300)
    fn = ctypes.CDLL(str(lib)).launch
    n = 300                                 # 3 or 10 blocks (the last one partial), several column tiles
    x = np.ascontiguousarray(np.random.default_rng(d).normal(size=(n, d)).astype(dtype))
    rows, acc = np.empty(n), np.empty((n, d))
    ptr = ctypes.c_void_p
    fn(ptr(x.ctypes.data), ctypes.c_int(n), ctypes.c_double(s), ctypes.c_double(0.01 ** 2), ctypes.c_int(1),
       ptr(rows.ctypes.data), ptr(acc.ctypes.data), ctypes.c_int(threads))
    e_ref, g_ref = riesz_energy_and_grad(x.astype(np.float64), s, 0.01, method="numpy")
    coef = 1.0 if s == 0.0 else abs(s)
    assert rows.sum() / (2.0 * n * (n - 1)) == pytest.approx(float(e_ref), rel=1e-12)
    assert _rel(-coef * acc / (n * (n - 1.0)), g_ref) <= 1e-12


def test_fused_tile_and_source():
    assert fused_tile(1) == 128 and fused_tile(64) == 96 and fused_tile(100000) == 1
    src = fused_kernel_source(64, np.float32)
    assert "#define D 64" in src and "#define TILE 96" in src and "typedef float real_t" in src
    assert "__D__" not in fused_kernel_source(3, np.float64)
    # the tile of float64 coordinates fits in 48 KiB of shared memory
    assert all(fused_tile(d) * d * 8 <= 48 * 1024 for d in (1, 3, 64, 100, 257, 6144))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("d", [3, 64])
@pytest.mark.parametrize("s", [-1.0, 0.0, 1.0, 2.5])
def test_cupy_fused_kernel_matches_reference(s, d, dtype):
    if not cupy_available():
        pytest.skip("CuPy with a CUDA device is not available")
    from rieszflow.engine.backend import get_backend

    be = get_backend("cupy", dtype)
    x = np.random.default_rng([d, int(10 * s) + 100]).normal(size=(517, d)).astype(dtype)  # seeds >= 0
    e_ref, g_ref = riesz_energy_and_grad(x.astype(np.float64), s, 0.01, method="numpy")
    e, g = riesz_energy_and_grad(be.asarray(x), s, 0.01)        # auto -> fused on CuPy
    e2, _ = riesz_energy_and_grad(be.asarray(x), s, 0.01, method="fused")
    assert type(g).__module__.startswith("cupy") and g.dtype == np.dtype(dtype)
    assert float(e) == float(e2)
    assert float(e) == pytest.approx(float(e_ref), rel=1e-12)
    assert _rel(to_numpy(g), g_ref) <= (1e-12 if dtype == "float64" else 1e-6)


# ----------------------------------------------------------------------------- GEMM on device arrays

@pytest.mark.parametrize("d", (3, 64))
@pytest.mark.parametrize("s", (-1.0, 0.0, 1.0, 2.5, 7.0))
def test_device_gemm_masks_close_pairs_like_the_host_path(d, s):
    """The GEMM path on device arrays (counting stand-ins: the CuPy code path) recomputes the
    close pairs with masks instead of nonzero, on the adversarial cloud of test_riesz.py
    (near-duplicates 1e-7 apart at norm 1e4, far tight clusters), without a host transfer."""
    from rieszflow.engine.backend import count_host_transfers, get_backend

    rng = np.random.default_rng(12)
    base = 1e4 + rng.normal(size=(20, d))
    twins = base + 1e-7 * rng.normal(size=(20, d))
    far = np.concatenate([rng.normal(size=(10, d)) * 1e-2 + 3e4, rng.normal(size=(10, d)) * 1e-2 - 3e4])
    x = np.concatenate([base, twins, far])
    be = get_backend("numpy", count_transfers=True)
    for softening in (0.0, 1e-6):
        e_np, g_np = riesz_energy_and_grad(x, s, softening, method="numpy")
        pot_np = riesz_potential(x, s, softening, method="numpy")
        with count_host_transfers() as c:
            e_dev, g_dev = riesz_energy_and_grad(be.asarray(x), s, softening, method="gemm", chunk_size=16)
            pot_dev = riesz_potential(be.asarray(x), s, softening, method="gemm", chunk_size=16)
        assert c.total == 0, c.by_site()
        e_host, g_host = riesz_energy_and_grad(x, s, softening, method="gemm", chunk_size=16)
        scale = np.abs(pot_np).max()
        assert abs(float(e_dev) - e_np) <= 1e-10 * scale
        np.testing.assert_allclose(to_numpy(pot_dev), pot_np, rtol=1e-10, atol=1e-10 * scale)
        np.testing.assert_allclose(to_numpy(g_dev), g_np, rtol=0, atol=1e-10 * np.abs(g_np).max())
        np.testing.assert_allclose(to_numpy(g_dev), g_host, rtol=0, atol=1e-10 * np.abs(g_np).max())


@pytest.mark.gpu
@pytest.mark.parametrize("d", (3, 64))
@pytest.mark.parametrize("s", (-1.0, 0.0, 1.0, 2.5, 7.0))
def test_cupy_gemm_close_pair_kernel_matches_reference(d, s):
    """On a real device the GEMM path's close pairs go through the CUDA close-pair kernel (one
    thread per pair, float64 atomics): the adversarial cloud above, several row tiles and the
    default (one large) tile, against the NumPy reference."""
    if not cupy_available():
        pytest.skip("CuPy with a CUDA device is not available")
    from rieszflow.engine.backend import get_backend

    rng = np.random.default_rng(12)
    base = 1e4 + rng.normal(size=(20, d))
    twins = base + 1e-7 * rng.normal(size=(20, d))
    far = np.concatenate([rng.normal(size=(10, d)) * 1e-2 + 3e4, rng.normal(size=(10, d)) * 1e-2 - 3e4])
    x = np.concatenate([base, twins, far])
    be = get_backend("cupy")
    for softening in (0.0, 1e-6):
        e_np, g_np = riesz_energy_and_grad(x, s, softening, method="numpy")
        scale = np.abs(riesz_potential(x, s, softening, method="numpy")).max()
        for chunk in (16, None):
            e_dev, g_dev = riesz_energy_and_grad(be.asarray(x), s, softening, method="gemm", chunk_size=chunk)
            pot_dev = riesz_potential(be.asarray(x), s, softening, method="gemm", chunk_size=chunk)
            assert type(g_dev).__module__.startswith("cupy")
            assert abs(float(e_dev) - e_np) <= 1e-10 * scale
            np.testing.assert_allclose(to_numpy(pot_dev), riesz_potential(x, s, softening, method="numpy"),
                                       rtol=1e-10, atol=1e-10 * scale)
            np.testing.assert_allclose(to_numpy(g_dev), g_np, rtol=0, atol=1e-10 * np.abs(g_np).max())
