"""Riesz / Coulomb / logarithmic interaction energy of the feature particles.

The kernel of paper 000, eq. (2.3) and (B.10) (no 1/s factor):

.. math::

    g_s(w) = \\begin{cases} \\|w\\|^{-s}, & s > 0,\\\\ -\\log\\|w\\|, & s = 0,\\\\
             -\\|w\\|^{-s}, & -2 < s < 0, \\end{cases}
    \\qquad \\nabla g_s(w) = -c_s \\|w\\|^{-(s+2)} w,\\quad c_s = |s|\\ (s\\ne0),\\ c_0 = 1.

``s = d - 2`` is the Coulomb kernel of :math:`\\mathbb{R}^d`, ``s = 0`` the log
gas; every branch is repulsive (decreasing in :math:`\\|w\\|`).

Optional softening replaces :math:`\\|w\\|` by :math:`\\sqrt{\\|w\\|^2 + \\varepsilon^2}`
(a Plummer-type regularisation, bounded at 0 for ``s >= 0``); ``softening = 0``
is the exact kernel.

The pair energy with the paper's normalisation (eq. (2.3)/(B.10), ordered pairs
k != l, divided by 2N(N-1)) is

.. math::

    \\mathcal{W}_{N,s}(\\Omega_N) = \\frac{1}{2N(N-1)} \\sum_{k \\ne l} g_s(\\omega_k-\\omega_l),
    \\qquad
    \\nabla_{\\omega_k} \\mathcal{W}_{N,s} = \\frac{1}{N(N-1)} \\sum_{l \\ne k} \\nabla g_s(\\omega_k-\\omega_l).

Two implementations compute the same row sums: an array-API reference (NumPy or
CuPy, chunked over rows so memory is O(N * chunk * d), not O(N^2)) and a Numba
``prange`` kernel for CPU arrays (:mod:`~rieszflow.engine.energy._numba_kernels`). The
self-pair is masked *before* the kernel is evaluated (``where(off, r2, 1)``),
and all sums are accumulated in float64. Coincident distinct particles give an
infinite energy and a non-finite force unless ``softening > 0``.

A third implementation, ``method="gemm"``, computes the same row sums through
BLAS (array-API, so it also runs on CuPy): after centring the cloud
(:math:`y_k = \\omega_k - \\bar\\omega`; the sums only see differences), each row
tile gets :math:`r_{kl}^2 = |y_k|^2 + |y_l|^2 - 2\\, y_k \\cdot y_l` from a Gram
block, and the force from a second product,
:math:`\\sum_l w_{kl}(y_k - y_l) = (\\sum_l w_{kl})\\, y_k - (W Y)_k`. The Gram
formula loses accuracy for close pairs: in float64 (unit roundoff
:math:`u = 2^{-53}`) its absolute error is at most
:math:`(2\\gamma_d + u)(|y_k|^2 + |y_l|^2)`, :math:`\\gamma_d = du/(1-du)`
(Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., eq. (3.5),
for the two norms and the dot product, plus the final subtraction). A pair is
therefore recomputed exactly from its difference vector (as the reference does)
whenever

.. math::

    r_{kl}^2 + \\varepsilon^2 \\le \\theta\\, (|y_k|^2 + |y_l|^2),
    \\qquad \\theta = \\max\\Big(1, \\frac{s + 2}{2}\\Big) \\frac{2\\gamma_d + u}{\\tau},

with :math:`\\tau` = ``GEMM_R2_RTOL`` (:math:`2^{-36} \\approx 1.5\\times10^{-11}`):
every pair kept in the BLAS path then has a force weight
:math:`r^{-(s+2)}` (and energy) within about :math:`\\tau` relative of the exactly
computed one. The recomputed pairs are also taken out of the force product, so
for the others the cancellation in :math:`(\\sum_l w_{kl}) y_k - (WY)_k` is at
most about :math:`u \\sqrt{2/\\theta}` relative to each pair's own force.
Energies, potentials and gradients agree with the reference to
:math:`10^{-10}` relative to their largest entry (tested in
``tests/test_riesz.py`` for ``-1.9 <= s <= 62``, ``s = 0``, softening 0 and
> 0, d = 1 to 64, and adversarial near-duplicate pairs at norms ~1e4; measured
differences are ~1e-15 to 3e-12). ``method="auto"`` takes this path for
``d >= GEMM_MIN_D = 8``, from the crossover with the Numba kernel measured by
``python benchmarks/bench_riesz.py`` (table 2 of docs/results/bench_riesz.md:
one thread, float64, interleaved timings on a heavily loaded 2-core machine):
for s = 1 (the kernel's cheapest exponent) Numba is 1.6-2.6x faster at d = 2 and
up to 1.6x at d = 4, the two are even at d = 8 and N = 256, and GEMM is
1.7x faster at d = 8 and N = 2000, 1.5-3.3x at d = 16 and 4-6.4x at d = 64
(N = 256 and 2000; faster still for s = 0 and 0.7). Numba stays the choice for
small d. Below N ~ 100 the GEMM path's fixed cost per call (~50 us) exceeds
Numba's, a negligible amount either way.

On CuPy, ``method="auto"`` takes ``method="fused"``: one CUDA kernel
(``cupy.RawKernel``, compiled through :func:`~rieszflow.engine.backend.raw_kernel`) computes
energy and gradient in one pass, one thread per row k, the columns staged in
shared memory in tiles of :func:`fused_tile` rows, every difference and sum in
float64 and nothing copied to the host. Its logic is mirrored by a NumPy path
(the same column tiles in the same order), which ``method="fused"`` runs on host
arrays and the CPU tests compare with the reference; ``tests/test_riesz_fused.py``
also runs the CUDA source on CPU threads (g++, a barrier for ``__syncthreads``) and
compares the kernel on the device with the reference when a GPU is present
(``benchmarks/gpu.py`` times it against GEMM and torch). The GEMM path on device
arrays finds close pairs with masks over the tile instead of ``nonzero`` (no
host synchronisation; 2d extra elementwise passes over each tile are the price).

Fast methods (approximate, to a stated relative precision ``tol``): ``method="fmm"``, the fast
multipole method of FMM3D for the Coulomb kernel of R^3 (d = 3, s = 1), potential and gradient
in one O(N) call (:mod:`~rieszflow.engine.energy.fast`); ``method="nufft"``, NFFT fast summation
(Potts and Steidl) for any s in d = 1, 2, 3, softening included
(:mod:`~rieszflow.engine.energy.fast_nufft`); ``method="auto"`` takes FMM from
:data:`~rieszflow.engine.energy.fast.FMM_MIN_N` particles on and NFFT from
:data:`~rieszflow.engine.energy.fast.NUFFT_MIN_N` (the measured crossovers). Errors against these direct sums
are measured in ``tests/test_riesz_fast.py`` and ``docs/results/bench_fast.md``.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from rieszflow.engine._checks import as_float_array, check_choice, check_int, check_points, check_real, is_host
from rieszflow.engine.backend import namespace, raw_kernel
from rieszflow.engine.energy.base import NORMALIZATIONS, Energy
from rieszflow.engine.energy.fast import FAST_METHODS, FAST_TOL, auto_fast, check_tol, fmm_pair_sums
from rieszflow.engine.energy.fast_nufft import nufft_pair_sums
from rieszflow.engine.energy.interaction import check_s, check_softening
from rieszflow.engine.threads import numba_threads

__all__ = [
    "RieszEnergy",
    "riesz_energy",
    "riesz_energy_and_grad",
    "riesz_energy_grad",
    "riesz_pair",
    "riesz_potential",
    "gemm_close_threshold",
    "fused_kernel_source",
    "fused_tile",
    "FUSED_MAX_D",
]

METHODS = ("auto", "numpy", "numba", "gemm", "fused") + FAST_METHODS
_CHUNK_ELEMENTS = 2 ** 21  # elements of the (chunk, N, d) difference block (16 MiB in float64)
_GEMM_TILE_ROWS = 64           # rows of a GEMM-path tile: (64, N) blocks stay in cache (bench: 32-128 best)
_GEMM_TILE_ELEMENTS = 2 ** 22  # ... and at most this many elements (32 MiB in float64) for huge N
_GEMM_DEVICE_TILE_ELEMENTS = 2 ** 24  # device tiles: (m, N) with m N <= this (128 MiB in float64)

#: ``method="auto"`` uses the BLAS path for d >= GEMM_MIN_D and the Numba kernel (host) or the
#: array-API reference (CuPy) below it. Measured with ``benchmarks/bench_riesz.py`` (table 2:
#: one thread, N = 2000, float64; docs/results/bench_riesz.md): see the module docstring.
GEMM_MIN_D = 8

#: Target relative error of one pair's squared distance in the GEMM path (see :func:`gemm_close_threshold`).
GEMM_R2_RTOL = 2.0 ** -36

#: Threads per block of the fused CUDA kernel (one thread per row k) for N >= 16384; smaller N
#: use blocks of 32 so that the rows spread over more multiprocessors (not measured on a GPU
#: yet: ``benchmarks/gpu.py`` times N = 4000 and 20000). The result does not depend on it.
FUSED_THREADS = 128
#: Shared memory of one column tile of the fused kernel, in float64 entries (48 KiB).
_FUSED_SHARED = 6144
#: Largest d of the fused CUDA kernel, ``method="auto"`` takes the GEMM path above it on CuPy.
#: Each thread keeps its particle and its gradient sum, 2 d float64, in local memory, which the
#: driver reserves for every resident thread: d = 256 is 4 KiB per thread (the shared tile would
#: allow 6144, whose 96 KiB per thread no GPU can hold for all resident threads). Not measured on
#: a GPU yet (``benchmarks/gpu.py``).
FUSED_MAX_D = 256


def _coef(s: float) -> float:
    """c_s in grad g_s(w) = -c_s |w|^{-(s+2)} w."""
    return 1.0 if s == 0.0 else abs(s)


def _kernel_and_weight(xp, r2, s):
    """g_s and the force weight |w|^{-(s+2)} from squared distances r2 (diagonal already masked)."""
    if s == 0.0:
        return -0.5 * xp.log(r2), 1.0 / r2
    g = r2 ** (-0.5 * s)
    return (g if s > 0 else -g), r2 ** (-0.5 * (s + 2.0))


def riesz_pair(w, s, softening=0.0):
    """Kernel and its gradient for displacement vectors.

    Parameters
    ----------
    w : array, shape (..., d)
        Displacements :math:`\\omega_k - \\omega_l` (nonzero unless softened).
    s : float
        Riesz exponent, ``-2 < s < inf``.
    softening : float, default 0.0
        :math:`\\varepsilon \\ge 0` (see :func:`riesz_kernel`).

    Returns
    -------
    g : array, shape (...)
        :math:`g_s(w)`.
    grad : array, shape (..., d)
        :math:`\\nabla g_s(w) = -c_s \\|w\\|_\\varepsilon^{-(s+2)} w`, with
        :math:`c_s = |s|` for ``s != 0`` and ``c_0 = 1``.

    Raises
    ------
    ValueError
        If ``s`` or ``softening`` is invalid or ``w`` is 0-dimensional.

    References
    ----------
    paper 000, eq. (2.3) and (B.10).
    """
    s = check_s(s)
    eps = check_softening(softening)
    w = as_float_array("w", w)
    xp = namespace(w)
    if w.ndim < 1:
        raise ValueError(f"w must have shape (..., d), got shape {tuple(w.shape)}")
    g, weight = _kernel_and_weight(xp, xp.sum(w * w, axis=-1) + eps * eps, s)
    return g, (-_coef(s)) * weight[..., None] * w


def _chunk_rows(n, d, chunk_size):
    if chunk_size is None:
        return max(1, min(n, _CHUNK_ELEMENTS // max(1, n * d)))
    return check_int("chunk_size", chunk_size, minimum=1)


def _pair_sums_xp(omega, s, eps, want_energy, chunk_size):
    """Reference row sums (NumPy or CuPy), chunked over rows.

    Returns ``rows[k] = sum_{l != k} g(omega_k - omega_l)`` (float64, or None) and
    ``grads[k] = sum_{l != k} grad g(omega_k - omega_l)`` (float64).
    """
    xp = namespace(omega)
    n, d = omega.shape
    block = _chunk_rows(n, d, chunk_size)
    coef = _coef(s)
    rows = xp.empty(n, dtype=xp.float64) if want_energy else None
    grads = xp.empty((n, d), dtype=xp.float64)
    cols = xp.arange(n)
    for a in range(0, n, block):
        b = min(a + block, n)
        diff = omega[a:b, None, :] - omega[None, :, :]  # (B, N, d)
        off = xp.arange(a, b)[:, None] != cols[None, :]  # (B, N): exclude k == l
        r2 = xp.where(off, xp.sum(diff * diff, axis=-1) + eps * eps, 1.0)  # mask BEFORE the kernel
        g, w = _kernel_and_weight(xp, r2, s)
        w = xp.where(off, w, 0.0)
        grads[a:b] = (-coef) * xp.sum(w[..., None] * diff, axis=1, dtype=xp.float64)
        if want_energy:
            rows[a:b] = xp.sum(xp.where(off, g, 0.0), axis=1, dtype=xp.float64)
    return rows, grads


def _pair_sums_numba(omega, s, eps, want_energy):
    """Numba row sums on a float64 copy of ``omega`` (see ``_numba_kernels``)."""
    import numba as nb

    from rieszflow.engine.energy import _numba_kernels as nk

    x = np.ascontiguousarray(omega, dtype=np.float64)
    mode, power = nk.exponent_mode(s)
    # threads only for calls long enough to gain on a shared machine (engine/threads.py); the
    # rows are summed one per thread, so the result does not depend on the count
    before = nb.get_num_threads()
    nb.set_num_threads(numba_threads("riesz", x.shape[0] * (x.shape[0] - 1.0)))
    try:
        rows, grads = nk.riesz_pair_sums(x, s, eps * eps, mode, power, bool(want_energy))
    finally:
        nb.set_num_threads(before)
    return (rows if want_energy else None), grads


def gemm_close_threshold(s, d):
    """Relative threshold :math:`\\theta` below which the GEMM path recomputes a pair exactly.

    Parameters
    ----------
    s : float
        Riesz exponent, ``-2 < s < inf``.
    d : int
        Dimension of the particles (length of the dot products).

    Returns
    -------
    float
        :math:`\\theta = \\max(1, (s+2)/2)\\,(2\\gamma_d + u)/\\tau` with
        :math:`u = 2^{-53}`, :math:`\\gamma_d = du/(1-du)` and :math:`\\tau` =
        ``GEMM_R2_RTOL``; a pair with
        :math:`r^2 + \\varepsilon^2 \\le \\theta (|y_k|^2 + |y_l|^2)` is recomputed from its
        difference vector (see the module docstring).

    References
    ----------
    N. J. Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed. (SIAM 2002),
    eq. (3.5) (error of a floating-point inner product).
    """
    u = 2.0 ** -53
    gamma = d * u / (1.0 - d * u)
    return max(1.0, 0.5 * (float(s) + 2.0)) * (2.0 * gamma + u) / GEMM_R2_RTOL


def _int_power(xp, base, p):
    """``base ** p`` for an integer ``p >= 1`` by binary exponentiation (overwrites ``base``)."""
    out = None
    while True:
        if p & 1:
            out = base.copy() if out is None else xp.multiply(out, base, out=out)
        p >>= 1
        if not p:
            return out
        base = xp.multiply(base, base, out=base)


def _weight_gemm(xp, r2, s):
    """Force weight r^{-(s+2)} from r2 (> 0 where used), the Numba kernel's cheapest exact forms."""
    from rieszflow.engine.energy import _numba_kernels as nk

    mode, power = nk.exponent_mode(s)
    if mode == nk.MODE_LOG:
        return 1.0 / r2
    if mode == nk.MODE_POW:
        return r2 ** (-0.5 * (s + 2.0))
    base = 1.0 / r2
    if mode == nk.MODE_ODD:
        base = xp.sqrt(base, out=base)
    elif mode == nk.MODE_HALF:
        base = xp.sqrt(xp.sqrt(base, out=base), out=base)
    return _int_power(xp, base, power)


def _pair_sums_gemm(omega, s, eps, want_energy, tile_rows):
    """Row sums through BLAS (Gram blocks), exact recomputation of close pairs.

    Same outputs as :func:`_pair_sums_xp` (float64). Each pair is evaluated once: row tile
    ``[a, b)`` meets columns ``[a, N)``; the pairs with a column beyond the tile also
    contribute, with the opposite sign of the force, to the column's row sums. Memory
    O(tile_rows * N) besides the (N, d) inputs; see the module docstring for the threshold.
    """
    xp = namespace(omega)
    host = is_host(omega)
    n, d = omega.shape
    x = xp.asarray(omega, dtype=xp.float64)
    y = x - xp.mean(x, axis=0)[None, :]  # differences are translation invariant
    sq = xp.sum(y * y, axis=1)
    sq_max = xp.max(sq)
    theta = gemm_close_threshold(s, d)
    eps2 = eps * eps
    if tile_rows is not None:
        block = tile_rows
    elif _is_cupy(omega):                        # device: few large tiles (launches, not caches, cost)
        block = max(1, min(n, _GEMM_DEVICE_TILE_ELEMENTS // n))
    else:
        block = max(1, min(_GEMM_TILE_ROWS, _GEMM_TILE_ELEMENTS // n))
    rows = xp.zeros(n, dtype=xp.float64) if want_energy else None
    force = xp.zeros((n, d), dtype=xp.float64)      # sum_l w_kl (omega_k - omega_l)
    for a in range(0, n, block):
        b = min(a + block, n)
        m = b - a
        diag = (xp.arange(m), xp.arange(m))
        r2 = y[a:b] @ y[a:].T                    # (m, N - a) Gram block: columns a..N-1
        r2 *= -2.0
        r2 += sq[a:b, None]
        r2 += sq[None, a:]
        if eps2:
            r2 += eps2
        r2[diag] = 1.0                           # mask the self pair BEFORE the kernel
        if not host:                             # device: no data-dependent shapes (no sync)
            _gemm_tile_masked(xp, x, y, sq, r2, rows, force, a, b, theta, eps2, s, want_energy, diag)
            continue
        # close pairs: a cheap tile-wide screen, then the exact per-pair test on the candidates
        i, j = xp.nonzero(r2 <= theta * (xp.max(sq[a:b]) + sq_max))
        keep = (r2[i, j] <= theta * (sq[a + i] + sq[a + j])) & (i != j)
        i, j = i[keep], j[keep]
        close = int(i.shape[0])
        if close:
            r2[i, j] = 1.0                       # finite mask value: g, w of these pairs are zeroed
            #                                       below and the pairs recomputed from differences
        w = _weight_gemm(xp, r2, s)
        if want_energy:
            if s == 0.0:
                g = xp.log(r2)
                g *= -0.5
            else:
                g = w * r2                       # r^{-s} = r^{-(s+2)} r^2
                if s < 0:
                    g *= -1.0
            g[diag] = 0.0
            if close:
                g[i, j] = 0.0
            rows[a:b] += xp.sum(g, axis=1)
            rows[b:] += xp.sum(g[:, m:], axis=0)
        w[diag] = 0.0
        if close:
            w[i, j] = 0.0
        force[a:b] += xp.sum(w, axis=1)[:, None] * y[a:b] - w @ y[a:]
        w_beyond = w[:, m:]                      # pairs (k, l), l beyond the tile: row l gets -w (y_k - y_l)
        force[b:] += xp.sum(w_beyond, axis=0)[:, None] * y[b:] - w_beyond.T @ y[a:b]
        if close:                                # exact, difference-based (the reference's formula)
            diff = x[a + i] - x[a + j]
            gc, wc = _kernel_and_weight(xp, xp.sum(diff * diff, axis=1) + eps2, s)
            # row a+i gets +wc diff; row a+j gets -wc diff, unless j is inside the tile (its own row sum)
            out = j >= m
            idx = xp.concatenate([a + i, (a + j)[out]])
            contrib = xp.concatenate([wc[:, None] * diff, -(wc[out][:, None] * diff[out])])
            force += xp.bincount((idx[:, None] * d + xp.arange(d)[None, :]).ravel(),
                                 weights=contrib.ravel(), minlength=n * d).reshape(n, d)
            if want_energy:
                rows += xp.bincount(idx, weights=xp.concatenate([gc, gc[out]]), minlength=n)
    return rows, (-_coef(s)) * force


def _gemm_tile_masked(xp, x, y, sq, r2, rows, force, a, b, theta, eps2, s, want_energy, diag):
    """One GEMM tile with the close pairs handled by masks over the tile (device arrays).

    The same pairs as the host path (``r2 <= theta (|y_k|^2 + |y_l|^2)``) are taken out of
    the BLAS sums and recomputed from their difference vectors, coordinate by coordinate over
    the whole tile (2d elementwise passes: distances, then forces), with ``where`` instead of
    ``nonzero``: no output shape depends on the data, so nothing synchronises with the host.
    """
    n, d = x.shape
    m = b - a
    close = r2 <= theta * (sq[a:b, None] + sq[None, a:])
    close[diag] = False
    r2 = xp.where(close, 1.0, r2)                # finite mask value; these pairs are recomputed below
    w = _weight_gemm(xp, r2, s)
    if want_energy:
        if s == 0.0:
            g = -0.5 * xp.log(r2)
        else:
            g = w * r2
            if s < 0:
                g = -g
        g[diag] = 0.0
        g = xp.where(close, 0.0, g)
        rows[a:b] += xp.sum(g, axis=1)
        rows[b:] += xp.sum(g[:, m:], axis=0)
    w[diag] = 0.0
    w = xp.where(close, 0.0, w)
    force[a:b] += xp.sum(w, axis=1)[:, None] * y[a:b] - w @ y[a:]
    w_beyond = w[:, m:]
    force[b:] += xp.sum(w_beyond, axis=0)[:, None] * y[b:] - w_beyond.T @ y[a:b]
    # exact recomputation of the close pairs (the reference's formula)
    if _is_cupy(x):                              # one CUDA thread per pair; only close pairs work
        from rieszflow.engine.energy._riesz_device import close_pairs_device

        close_pairs_device(xp.ascontiguousarray(x), close, rows, force, a, m, s, eps2, want_energy)
        return
    r2x = xp.zeros(r2.shape, dtype=xp.float64)   # elsewhere masked over the tile, 2d passes
    for c in range(d):
        dc = x[a:b, c, None] - x[None, a:, c]
        r2x += dc * dc
    r2x = xp.where(close, r2x + eps2, 1.0)
    gx, wx = _kernel_and_weight(xp, r2x, s)
    wx = xp.where(close, wx, 0.0)
    if want_energy:
        gx = xp.where(close, gx, 0.0)
        rows[a:b] += xp.sum(gx, axis=1)
        rows[b:] += xp.sum(gx[:, m:], axis=0)
    for c in range(d):
        fc = wx * (x[a:b, c, None] - x[None, a:, c])
        force[a:b, c] += xp.sum(fc, axis=1)
        force[b:, c] -= xp.sum(fc[:, m:], axis=0)


def _is_cupy(a):
    return type(a).__module__.startswith("cupy")


def fused_tile(d):
    """Columns per shared-memory tile of the fused kernel (and of its NumPy mirror).

    Parameters
    ----------
    d : int
        Dimension of the particles.

    Returns
    -------
    int
        ``min(128, 6144 // d)`` (at least 1): one tile of float64 coordinates fits in 48 KiB.
    """
    return max(1, min(FUSED_THREADS, _FUSED_SHARED // max(1, int(d))))


_FUSED_SOURCE = r"""
#define D __D__
#define TILE __TILE__
typedef __T__ real_t;
extern "C" __global__ void riesz_fused(const real_t* __restrict__ x, const int n, const double s,
                                       const double eps2, const int want_energy,
                                       double* __restrict__ rows, double* __restrict__ acc_out)
{
    // one thread per row k; columns l in tiles of TILE rows of x staged in shared memory;
    // every sum in float64, columns in increasing order (the NumPy mirror's order)
    __shared__ double tile[TILE * D];
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    double xk[D];
    double acc[D];
    double e = 0.0;
    for (int c = 0; c < D; ++c) {
        xk[c] = (k < n) ? (double)x[(size_t)k * D + c] : 0.0;
        acc[c] = 0.0;
    }
    for (int c0 = 0; c0 < n; c0 += TILE) {
        const int cnt = min(TILE, n - c0);
        for (int idx = threadIdx.x; idx < cnt * D; idx += blockDim.x)
            tile[idx] = (double)x[(size_t)c0 * D + idx];
        __syncthreads();
        if (k < n) {
            for (int j = 0; j < cnt; ++j) {
                if (c0 + j == k) continue;                 // the self pair is never evaluated
                double r2 = 0.0;
                for (int c = 0; c < D; ++c) {
                    const double dc = xk[c] - tile[j * D + c];
                    r2 += dc * dc;
                }
                r2 += eps2;
                double wgt;
                if (s == 0.0) {
                    wgt = 1.0 / r2;
                    if (want_energy) e += -0.5 * log(r2);
                } else {
                    wgt = pow(r2, -0.5 * (s + 2.0));
                    if (want_energy) e += (s > 0.0) ? pow(r2, -0.5 * s) : -pow(r2, -0.5 * s);
                }
                for (int c = 0; c < D; ++c)
                    acc[c] += wgt * (xk[c] - tile[j * D + c]);
            }
        }
        __syncthreads();
    }
    if (k < n) {
        if (want_energy) rows[k] = e;
        for (int c = 0; c < D; ++c) acc_out[(size_t)k * D + c] = acc[c];
    }
}
"""


def fused_kernel_source(d, dtype):
    """CUDA C++ source of the fused Riesz kernel for dimension ``d`` and input ``dtype``.

    Parameters
    ----------
    d : int
        Dimension of the particles (a compile-time constant of the kernel).
    dtype : numpy.dtype
        float32 or float64 (the positions; every sum is float64).

    Returns
    -------
    str
        Source of ``extern "C" __global__ void riesz_fused(x, n, s, eps2, want_energy, rows,
        acc)``: thread k writes ``rows[k] = sum_{l != k} g_s`` and
        ``acc[k] = sum_{l != k} |w|^{-(s+2)} (x_k - x_l)``.
    """
    t = "float" if np.dtype(dtype) == np.float32 else "double"
    return (_FUSED_SOURCE.replace("__D__", str(int(d))).replace("__TILE__", str(fused_tile(d)))
            .replace("__T__", t))


def _pair_sums_fused(omega, s, eps, want_energy):
    """Fused row sums: the CUDA kernel on CuPy arrays, its NumPy mirror otherwise.

    The mirror follows the kernel's order (column tiles of :func:`fused_tile` rows, in
    increasing order, differences and float64 sums per pair); CPU tests run it against the
    reference, so the kernel's logic is tested where no GPU is.
    """
    xp = namespace(omega)
    n, d = omega.shape
    if type(omega).__module__.startswith("cupy"):
        if d > FUSED_MAX_D:
            raise ValueError(f"method='fused' on CuPy supports d <= {FUSED_MAX_D} (one particle per "
                             f"48 KiB tile), got d={d}; use method='gemm' or 'auto'")
        x = xp.ascontiguousarray(omega)
        rows = xp.empty(n, dtype=xp.float64)
        acc = xp.empty((n, d), dtype=xp.float64)
        kern = raw_kernel(fused_kernel_source(d, x.dtype), "riesz_fused")
        threads = FUSED_THREADS if n >= 16384 else 32
        kern(((n + threads - 1) // threads,), (threads,),
             (x, np.int32(n), np.float64(s), np.float64(eps * eps), np.int32(bool(want_energy)), rows, acc))
    else:
        rows, acc = _fused_mirror(xp, omega, s, eps, want_energy)
    return (rows if want_energy else None), (-_coef(s)) * acc


def _fused_mirror(xp, omega, s, eps, want_energy):
    """NumPy (array-API) mirror of the fused kernel: same column tiles, float64 sums."""
    n, d = omega.shape
    x = xp.asarray(omega, dtype=xp.float64)
    tile = fused_tile(d)
    rows = xp.zeros(n, dtype=xp.float64)
    acc = xp.zeros((n, d), dtype=xp.float64)
    ridx = xp.arange(n)
    block = max(1, min(n, _CHUNK_ELEMENTS // max(1, tile * d)))   # threads evaluated together
    for c0 in range(0, n, tile):
        c1 = min(c0 + tile, n)
        cols = x[c0:c1]
        for r0 in range(0, n, block):
            r1 = min(r0 + block, n)
            diff = x[r0:r1, None, :] - cols[None, :, :]                    # (R, T, d)
            off = ridx[r0:r1, None] != ridx[None, c0:c1]
            r2 = xp.where(off, xp.sum(diff * diff, axis=-1) + eps * eps, 1.0)
            g, wgt = _kernel_and_weight(xp, r2, s)
            acc[r0:r1] += xp.sum(xp.where(off, wgt, 0.0)[..., None] * diff, axis=1)
            if want_energy:
                rows[r0:r1] += xp.sum(xp.where(off, g, 0.0), axis=1)
    return rows, acc


def _pair_sums(omega, s, softening, method, want_energy, chunk_size, tol=FAST_TOL):
    """Validate and dispatch; returns float64 (rows or None, grads)."""
    s = check_s(s)
    eps = check_softening(softening)
    check_choice("method", method, METHODS)
    tol = check_tol(tol)
    omega = check_points("omega", omega)
    if method == "numba" and not is_host(omega):
        raise TypeError("method='numba' needs a NumPy (CPU) array, got a "
                        f"{type(omega).__module__}.{type(omega).__name__}; use method='auto' or 'numpy'")
    if chunk_size is not None:
        check_int("chunk_size", chunk_size, minimum=1)
    return omega, _dispatch(omega, s, eps, method, want_energy, chunk_size, tol)


def _dispatch(omega, s, eps, method, want_energy, chunk_size, tol=FAST_TOL):
    """Row sums of validated input by ``method`` (no checks, no host synchronisation)."""
    host = is_host(omega)
    if method == "auto":
        method = auto_fast(omega, s, eps) or method
    if method == "fmm":
        return fmm_pair_sums(omega, s, eps, want_energy, tol)
    if method == "nufft":
        return nufft_pair_sums(omega, s, eps, want_energy, tol)
    if method == "auto":
        if not host:                 # a device array: the fused kernel (exact, sync-free)
            method = "fused" if omega.shape[1] <= FUSED_MAX_D else "gemm"
        else:
            method = "gemm" if omega.shape[1] >= GEMM_MIN_D else "numba"
    if method == "fused":
        return _pair_sums_fused(omega, s, eps, want_energy)
    if method == "numba":
        return _pair_sums_numba(omega, s, eps, want_energy)
    if method == "gemm":
        return _pair_sums_gemm(omega, s, eps, want_energy, chunk_size)
    return _pair_sums_xp(omega, s, eps, want_energy, chunk_size)


def _pair_sums_chains(omega, s, softening):
    """Row sums and gradients for C independent configurations at once (chain axis).

    ``omega`` of shape (C, N, d); returns ``(rows, grads)`` of shapes (C, N) and (C, N, d),
    the ordered-pair sums of :func:`_pair_sums` for every chain, by dense (C, N, N, d)
    differences (meant for the small N of sampling studies).
    """
    s = check_s(s)
    eps = check_softening(softening)
    omega = as_float_array("omega", omega)
    xp = namespace(omega)
    if omega.ndim != 3:
        raise ValueError(f"omega must have shape (C, N, d) for chains, got {tuple(omega.shape)}")
    if is_host(omega) and not bool(xp.all(xp.isfinite(omega))):   # as check_points: host only
        raise ValueError("omega contains NaN or inf")
    n = omega.shape[1]
    diff = omega[:, :, None, :] - omega[:, None, :, :]
    off = ~xp.eye(n, dtype=bool)[None]
    safe = xp.where(off[..., None], diff, 1.0)          # mask the diagonal before the kernel
    g, dg = riesz_pair(safe, s, eps)
    g = xp.where(off, g, 0.0)
    dg = xp.where(off[..., None], dg, 0.0)
    return omega, (xp.sum(g, axis=2), xp.sum(dg, axis=2))


def _check_paper_n(omega):
    if omega.shape[-2] < 2:
        raise ValueError(f"omega must hold N >= 2 particles for the 1/(2N(N-1)) normalisation, "
                         f"got shape {tuple(omega.shape)}")


def riesz_energy_and_grad(omega, s, softening=0.0, method="auto", chunk_size=None, *, validate=True,
                          tol=FAST_TOL):
    """Riesz energy :math:`\\mathcal{W}_{N,s}` and its exact gradient (paper normalisation).

    Parameters
    ----------
    omega : array, shape (N, d), N >= 2
        Particle positions (float32 or float64; NumPy or CuPy).
    s : float
        Riesz exponent, ``-2 < s < inf``.
    softening : float, default 0.0
        :math:`\\varepsilon \\ge 0`; distances become :math:`\\sqrt{r^2 + \\varepsilon^2}`.
    method : {"auto", "numpy", "numba", "gemm", "fused", "fmm", "nufft"}, default "auto"
        ``"fmm"``: the fast multipole method (d = 3, s = 1, softening 0, NumPy arrays;
        :mod:`~rieszflow.engine.energy.fast`), relative precision ``tol``. ``"nufft"``: NFFT
        fast summation (d = 1, 2, 3, any s, NumPy arrays;
        :mod:`~rieszflow.engine.energy.fast_nufft`), relative precision ``tol``.
        ``"gemm"``: BLAS Gram blocks with exact recomputation of close pairs
        (NumPy or CuPy; see the module docstring). ``"fused"``: energy and gradient in
        one pass of a CUDA kernel on CuPy arrays (one thread per row, column tiles in
        shared memory, float64 sums), its NumPy mirror on host arrays. ``"auto"``: for
        NumPy arrays ``"gemm"`` if ``d >= GEMM_MIN_D``, else the Numba kernel; for CuPy
        arrays ``"fused"`` (no host synchronisation) up to ``d = FUSED_MAX_D``, ``"gemm"``
        above; on NumPy arrays ``"fmm"`` instead where it applies and N >= ``FMM_MIN_N``, else
        ``"nufft"`` from ``NUFFT_MIN_N[d]`` (s = 0) or ``NUFFT_MIN_N_POWER[d]``
        (:mod:`~rieszflow.engine.energy.fast`).
    chunk_size : int, optional
        Rows per block of the reference implementation (memory
        O(chunk_size * N * d)) or of the GEMM path (memory O(chunk_size * N));
        chosen automatically by default. Ignored by Numba.
    validate : bool, default True
        Check ``omega``, ``s`` and ``softening``. ``False`` is for loops over input checked
        once (Phase A of :mod:`rieszflow.learning.train` checks the particles at every record):
        no host synchronisation on device arrays (no finiteness check), the default row block;
        ``omega`` must then be an (N, d) float array with N >= 2 and ``s``, ``softening`` valid.
    tol : float, default :data:`~rieszflow.engine.energy.fast.FAST_TOL`
        Requested relative precision of a fast method (``"fmm"``, or ``"auto"`` when it takes
        one); the direct methods ignore it.

    Returns
    -------
    energy : float64 scalar (0-d array on CuPy)
        :math:`\\frac{1}{2N(N-1)} \\sum_{k \\ne l} g_s(\\omega_k - \\omega_l)`.
    grad : array, shape (N, d), dtype of ``omega``
        :math:`\\frac{1}{N(N-1)} \\sum_{l \\ne k} \\nabla g_s(\\omega_k - \\omega_l)`.

    Raises
    ------
    ValueError
        If ``s`` or ``softening`` is out of range, ``omega`` is not (N, d) with
        N >= 2 and finite entries (checked for host arrays), ``method`` is unknown, or
        ``method="fused"`` is asked for a CuPy array with ``d > FUSED_MAX_D``, ``method="fmm"``
        outside d = 3, s = 1, softening 0, ``method="nufft"`` outside d = 1, 2, 3, or ``tol`` is
        out of range.
    TypeError
        If ``method="numba"``, ``"fmm"`` or ``"nufft"`` is asked for a CuPy array.

    References
    ----------
    paper 000, eq. (2.3) and (B.10).
    """
    if validate:
        omega, (rows, grads) = _pair_sums(omega, s, softening, method, True, chunk_size, tol)
        _check_paper_n(omega)
    else:
        rows, grads = _dispatch(omega, float(s), float(softening), method, True, None, tol)
    xp = namespace(omega)
    n = omega.shape[0]
    energy = xp.sum(rows) / (2.0 * n * (n - 1))
    return energy, xp.asarray(grads / (n * (n - 1.0)), dtype=omega.dtype)


def riesz_energy(omega, s, softening=0.0, method="auto", chunk_size=None, *, tol=FAST_TOL):
    """Riesz energy :math:`\\mathcal{W}_{N,s} = \\frac{1}{2N(N-1)} \\sum_{k \\ne l} g_s(\\omega_k - \\omega_l)`.

    Parameters
    ----------
    omega : array, shape (N, d), N >= 2
        Particle positions (float32 or float64; NumPy or CuPy).
    s : float
        Riesz exponent, ``-2 < s < inf``.
    softening : float, default 0.0
        :math:`\\varepsilon \\ge 0`; distances become :math:`\\sqrt{r^2 + \\varepsilon^2}`.
    method : {"auto", "numpy", "numba", "gemm", "fused", "fmm", "nufft"}, default "auto"
        See :func:`riesz_energy_and_grad`.
    chunk_size : int, optional
        Rows per block of the reference implementation.
    tol : float, default :data:`~rieszflow.engine.energy.fast.FAST_TOL`
        Relative precision of a fast method (see :func:`riesz_energy_and_grad`).

    Returns
    -------
    float64 scalar (0-d array on CuPy)
        Ordered pairs k != l, divided by 2N(N-1).

    Raises
    ------
    ValueError
        If ``s`` or ``softening`` is out of range, ``omega`` is not (N, d) with
        N >= 2 and finite entries, or ``method`` is unknown.
    TypeError
        If ``method="numba"`` is asked for a CuPy array.

    References
    ----------
    paper 000, eq. (2.3) and (B.10).
    """
    return riesz_energy_and_grad(omega, s, softening, method, chunk_size, tol=tol)[0]


def riesz_energy_grad(omega, s, softening=0.0, method="auto", chunk_size=None, *, tol=FAST_TOL):
    """Gradient :math:`\\nabla_{\\omega_k}\\mathcal{W}_{N,s} = \\frac{1}{N(N-1)}\\sum_{l\\ne k}\\nabla g_s(\\omega_k-\\omega_l)`.

    The energy itself is not evaluated (no logarithm for ``s = 0``).

    Parameters
    ----------
    omega : array, shape (N, d), N >= 2
        Particle positions (float32 or float64; NumPy or CuPy).
    s : float
        Riesz exponent, ``-2 < s < inf``.
    softening : float, default 0.0
        :math:`\\varepsilon \\ge 0`.
    method : {"auto", "numpy", "numba", "gemm", "fused", "fmm", "nufft"}, default "auto"
        See :func:`riesz_energy_and_grad`.
    chunk_size : int, optional
        Rows per block of the reference implementation.
    tol : float, default :data:`~rieszflow.engine.energy.fast.FAST_TOL`
        Relative precision of a fast method (see :func:`riesz_energy_and_grad`).

    Returns
    -------
    array, shape (N, d), dtype of ``omega``
        Accumulated in float64.

    Raises
    ------
    ValueError
        As :func:`riesz_energy`.
    TypeError
        If ``method="numba"`` is asked for a CuPy array.

    References
    ----------
    paper 000, eq. (2.3), (B.10) and (A.7).
    """
    omega, (_, grads) = _pair_sums(omega, s, softening, method, False, chunk_size, tol)
    _check_paper_n(omega)
    xp = namespace(omega)
    n = omega.shape[0]
    return xp.asarray(grads / (n * (n - 1.0)), dtype=omega.dtype)


def riesz_potential(omega, s, softening=0.0, method="auto", chunk_size=None, *, tol=FAST_TOL):
    """Leave-one-out Riesz potential at each particle, :math:`\\frac{1}{N-1}\\sum_{l \\ne k} g_s(\\omega_k - \\omega_l)`.

    This is :math:`(g_s * \\mu_N^{(-k)})(\\omega_k)` of paper 000, eq. (A.7); its
    mean over k is :math:`2\\mathcal{W}_{N,s}`.

    Parameters
    ----------
    omega : array, shape (N, d), N >= 2
        Particle positions (float32 or float64; NumPy or CuPy), as :func:`riesz_energy_and_grad`.
    s : float
        Riesz exponent, ``-2 < s < inf``, as :func:`riesz_energy_and_grad`.
    softening : float, default 0.0
        :math:`\\varepsilon \\ge 0`, as :func:`riesz_energy_and_grad`.
    method : {"auto", "numpy", "numba", "gemm", "fused", "fmm", "nufft"}, default "auto"
        Backend of the pair sums, as :func:`riesz_energy_and_grad`.
    chunk_size : int, optional
        Rows per block of the reference implementation, as :func:`riesz_energy_and_grad`.
    tol : float, default :data:`~rieszflow.engine.energy.fast.FAST_TOL`
        Relative precision of a fast method, as :func:`riesz_energy_and_grad`.

    Returns
    -------
    float64 array, shape (N,)
        Leave-one-out potential of each particle.

    Raises
    ------
    ValueError
        As :func:`riesz_energy`.

    References
    ----------
    paper 000, eq. (A.5) and (A.7).
    """
    omega, (rows, _) = _pair_sums(omega, s, softening, method, True, chunk_size, tol)
    _check_paper_n(omega)
    return rows / (omega.shape[0] - 1.0)


@dataclasses.dataclass(frozen=True)
class RieszEnergy(Energy):
    """Riesz interaction energy :math:`\\lambda \\times` (pair sum), as a composable :class:`Energy`.

    Parameters
    ----------
    s : float
        Riesz exponent, ``-2 < s < inf`` (``s = d - 2`` Coulomb, ``s = 0`` log).
    lam : float, default 1.0
        Interaction strength :math:`\\lambda \\ge 0`.
    normalization : {"paper", "mean_field"}, default "paper"
        ``"paper"``: :math:`\\lambda \\mathcal{W}_{N,s} = \\frac{\\lambda}{2N(N-1)}\\sum_{k\\ne l} g_s`
        (paper 000, eq. (2.2)/(B.10); use ``grad_scale = N`` in Langevin).
        ``"mean_field"``: :math:`\\frac{\\lambda}{2N}\\sum_{i \\ne j} g_s(x_i - x_j)`, whose
        gradient is the drift :math:`\\frac{\\lambda}{N}\\sum_{j\\ne i}\\nabla g_s(x_i-x_j)`
        (particles_pde_reference.md; use ``grad_scale = 1``).
    softening : float, default 0.0
        :math:`\\varepsilon \\ge 0` (see :func:`riesz_kernel`).
    method : {"auto", "numpy", "numba", "gemm", "fused", "fmm", "nufft"}, default "auto"
        Backend of the pair sums (see :func:`riesz_energy_and_grad`).
    chunk_size : int, optional
        Rows per block of the reference implementation.
    tol : float, default :data:`~rieszflow.engine.energy.fast.FAST_TOL`
        Relative precision of a fast method (``"fmm"``, or ``"auto"`` when it takes one).

    Raises
    ------
    ValueError
        If any parameter is out of range or unknown.

    References
    ----------
    paper 000, eq. (2.2), (2.3), (B.10), (A.7); particles_pde_reference.md (preamble).
    """

    s: float
    lam: float = 1.0
    normalization: str = "paper"
    softening: float = 0.0
    method: str = "auto"
    chunk_size: int | None = None
    tol: float = FAST_TOL

    def __post_init__(self):
        object.__setattr__(self, "s", check_s(self.s))
        object.__setattr__(self, "lam", check_real("lam", self.lam, nonnegative=True))
        check_choice("normalization", self.normalization, NORMALIZATIONS)
        object.__setattr__(self, "softening", check_softening(self.softening))
        check_choice("method", self.method, METHODS)
        object.__setattr__(self, "tol", check_tol(self.tol))
        if self.chunk_size is not None:
            check_int("chunk_size", self.chunk_size, minimum=1)

    def _sums(self, omega, want_energy):
        if getattr(omega, "ndim", 2) == 3:               # chain axis: C configurations at once
            omega, (rows, grads) = _pair_sums_chains(omega, self.s, self.softening)
        else:
            omega, (rows, grads) = _pair_sums(omega, self.s, self.softening, self.method,
                                              want_energy, self.chunk_size, self.tol)
        n = omega.shape[-2]
        if self.normalization == "paper":
            _check_paper_n(omega)
            pair_scale = self.lam / (n * (n - 1.0))  # (lam/(2N(N-1))) sum_{k!=l}, gradient twice that
        else:
            pair_scale = self.lam / n  # (lam/(2N)) sum_{i!=j}
        return omega, rows, grads, pair_scale

    def value_and_grad(self, omega):
        """Energy (float64) and gradient (shape (N, d), dtype of ``omega``).

        With a chain axis (``omega`` of shape (C, N, d)) the energies have shape (C,) and the
        gradients shape (C, N, d).

        Parameters
        ----------
        omega : array, shape (N, d), or (C, N, d) with a chain axis
            Particle positions (float32 or float64; NumPy or CuPy); N >= 2 for ``"paper"``.

        Returns
        -------
        value : float64 0-d array, or shape (C,) with a chain axis
            Energy (see class docstring for the normalisation).
        grad : array, shape of ``omega``, dtype of ``omega``
            Its gradient.
        """
        omega, rows, grads, scale = self._sums(omega, True)
        xp = namespace(omega)
        return 0.5 * scale * xp.sum(rows, axis=-1), xp.asarray(scale * grads, dtype=omega.dtype)

    def __call__(self, omega):
        """Energy value, float64 (see class docstring for the normalisation).

        Parameters
        ----------
        omega : array, shape (N, d), or (C, N, d) with a chain axis
            Particle positions (float32 or float64; NumPy or CuPy); N >= 2 for ``"paper"``.

        Returns
        -------
        float64 0-d array, or shape (C,) with a chain axis
            Energy value.
        """
        return self.value_and_grad(omega)[0]

    def grad(self, omega):
        """Gradient, shape (N, d), dtype of ``omega`` (energy not evaluated).

        Parameters
        ----------
        omega : array, shape (N, d), or (C, N, d) with a chain axis
            Particle positions (float32 or float64; NumPy or CuPy); N >= 2 for ``"paper"``.

        Returns
        -------
        array, shape of ``omega``, dtype of ``omega``
            Gradient with respect to every particle.
        """
        omega, _, grads, scale = self._sums(omega, False)
        xp = namespace(omega)
        return xp.asarray(scale * grads, dtype=omega.dtype)

    def per_particle(self, omega):
        """Interaction potential felt by each particle, shape (N,), float64.

        ``"paper"``: :math:`\\frac{\\lambda}{N-1}\\sum_{l\\ne k} g_s(\\omega_k-\\omega_l)`;
        ``"mean_field"``: :math:`\\frac{\\lambda}{N}\\sum_{l\\ne k} g_s(\\omega_k-\\omega_l)`.

        Parameters
        ----------
        omega : array, shape (N, d), or (C, N, d) with a chain axis
            Particle positions (float32 or float64; NumPy or CuPy); N >= 2 for ``"paper"``.

        Returns
        -------
        float64 array, shape (N,), or (C, N) with a chain axis
            Interaction potential of each particle.
        """
        omega, rows, _, _ = self._sums(omega, True)
        n = omega.shape[-2]
        return (self.lam / (n - 1.0) if self.normalization == "paper" else self.lam / n) * rows
