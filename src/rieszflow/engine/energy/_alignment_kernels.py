"""Numba CPU kernels of the fused RFF alignment step (beside the xp reference of :mod:`.alignment`).

The caller (:func:`~rieszflow.engine.energy.alignment.alignment_potential_and_grad` with
``method="fused"``) tiles the particles; for one tile of ``B`` particles it writes the
phases ``U_ji = omega_j . x_i`` into a ``(B, n)`` buffer with one BLAS call, then
:func:`rff_tile` makes **one pass per particle** (a ``prange`` task each, the row of
length n stays in the core's cache) that

1. evaluates ``sin`` and ``cos`` of the phase (plus the phase ``b_j`` if given) with
   one shared range reduction (:func:`sincos`),
2. reduces over the data, ``zc_j = sum_i y_i cos``, ``zs_j = sum_i y_i sin`` (phase
   average) or ``z_j = sum_i y_i phi_ji``, ``sum_i y_i^2 phi_ji^2`` with
   ``phi = sqrt(2) cos(U + b)`` (given phases), in float64 with ``LANES`` explicit
   partial sums (a fixed summation order, the same for every thread count),
3. gives the potential ``V_j`` of paper 000, eq. (4.1)/(B.6) and overwrites the row with
   ``dV_j/dU_ji``, so that the caller's second BLAS call ``dU @ X`` is the gradient.

Each particle's pass is the same sequence of operations whichever thread runs it, so the
results do not depend on the thread count. ``rff_tile`` runs the particles as ``prange``
tasks; ``rff_tile_serial`` is the same function compiled without a thread pool, taken by the
caller when ``numba.get_num_threads() == 1``.

The formulas are those of the reference loop in :mod:`.alignment` (the one home of
the mathematics); the tests check the two against each other.

``sincos``: Cody-Waite reduction by pi/2 with a three-part constant (fdlibm's
``pio2_1, pio2_2, pio2_3``, 33 bits each, so ``k * pio2_m`` is exact for
``|k| < 2**20``) and fdlibm's minimax polynomials ``__kernel_sin`` / ``__kernel_cos``
on ``[-pi/4, pi/4]`` (without the low word of the reduced argument). Element-wise, no
calls and no branches (quadrant by selects), so LLVM vectorises it; ``fastmath`` stays
off. Absolute error below ``2.5e-16`` for ``|x| <= PHASE_LIMIT`` (the tests compare it
with ``np.sin``/``np.cos``); the caller passes ``mode=MODE_LIBM`` (libm per element)
when its bound on ``|U + b|`` exceeds ``PHASE_LIMIT``.

Float32 tiles (``tile_dtype="float32"``) evaluate ``sincos32`` (cephes' ``sinf``/``cosf``,
16 lanes per AVX-512 vector, absolute error below 2.5e-7, phases up to
``PHASE_LIMIT_F32``; beyond it the float64 ``sincos`` of the float32 phase); the sums
over the data and ``V`` are float64 whatever the tile's precision.
"""
from __future__ import annotations

import math

import numba as nb
import numpy as np
from numba.extending import overload

#: largest phase |omega . x + b| evaluated by the polynomial sincos (k = round(2x/pi) < 2**19)
PHASE_LIMIT = 2.0 ** 19
#: largest phase evaluated by the float32 polynomial (cephes' bound for its three-part pi/2)
PHASE_LIMIT_F32 = 8192.0
#: ``mode`` of :func:`rff_tile`: sin/cos in the tile's precision, in float64, or by libm
MODE_NATIVE, MODE_F64, MODE_LIBM = 0, 1, 2
#: lane count of the partial sums over the data
LANES = 8

_TWO_OVER_PI = 6.36619772367581382433e-01
_ROUND = 6755399441055744.0  # 1.5 * 2**52: (t + _ROUND) - _ROUND rounds t to the nearest integer
_PIO2_1 = 1.57079632673412561417e+00  # first 33 bits of pi/2
_PIO2_2 = 6.07710050630396597660e-11  # next 33 bits
_PIO2_3 = 2.02226624871116645580e-21  # next 33 bits
_S1, _S2, _S3 = -1.66666666666666324348e-01, 8.33333333332248946124e-03, -1.98412698298579493134e-04
_S4, _S5, _S6 = 2.75573137070700676789e-06, -2.50507602534068634195e-08, 1.58969099521155010221e-10
_C1, _C2, _C3 = 4.16666666666666019037e-02, -1.38888888888741095749e-03, 2.48015872894767294178e-05
_C4, _C5, _C6 = -2.75573143513906633035e-07, 2.08757232129817482790e-09, -1.13596475577881948265e-11


@nb.njit(inline="always", fastmath=False)
def sincos(x):
    """``(sin(x), cos(x))`` in float64 for ``|x| <= PHASE_LIMIT`` (see the module docstring).

    Parameters
    ----------
    x : float64

    Returns
    -------
    s, c : float64
    """
    k = (x * _TWO_OVER_PI + _ROUND) - _ROUND
    r = x - k * _PIO2_1
    r = r - k * _PIO2_2
    r = r - k * _PIO2_3
    z = r * r
    w = z * z
    ps = _S2 + z * (_S3 + z * (_S4 + z * (_S5 + z * _S6)))
    s = r + (z * r) * (_S1 + z * ps)
    pc = z * (_C1 + z * (_C2 + z * _C3)) + w * w * (_C4 + z * (_C5 + z * _C6))
    hz = 0.5 * z
    one_m = 1.0 - hz
    c = one_m + (((1.0 - one_m) - hz) + z * pc)
    q = np.int64(k) & 3
    swap = (q & 1) == 1
    s1 = c if swap else s
    c1 = s if swap else c
    s1 = -s1 if (q & 2) == 2 else s1
    c1 = -c1 if ((q + 1) & 2) == 2 else c1
    return s1, c1


_F32_TWO_OVER_PI = np.float32(6.36619772367581382433e-01)
_F32_ROUND = np.float32(12582912.0)  # 1.5 * 2**23
_F32_DP1 = np.float32(1.5703125)  # pi/2 in three parts (cephes' sinf split, doubled)
_F32_DP2 = np.float32(4.837512969970703125e-4)
_F32_DP3 = np.float32(7.54978995489188216e-8)
_F32_S1, _F32_S2, _F32_S3 = np.float32(-1.6666654611e-1), np.float32(8.3321608736e-3), np.float32(-1.9515295891e-4)
_F32_C1, _F32_C2, _F32_C3 = np.float32(4.166664568298827e-2), np.float32(-1.388731625493765e-3), \
    np.float32(2.443315711809948e-5)
_F32_HALF = np.float32(0.5)
_F32_ONE = np.float32(1.0)


@nb.njit(inline="always", fastmath=False)
def sincos32(x):
    """``(sin(x), cos(x))`` in float32 for ``|x| <= PHASE_LIMIT_F32``: cephes' ``sinf``/``cosf``.

    Reduction by pi/2 with a three-part constant, polynomials of degree 7 and 8 on
    ``[-pi/4, pi/4]``; absolute error below 2.5e-7 (the tests compare it with ``np.sin`` of
    the float64 value), a few float32 ulp of 1.

    Parameters
    ----------
    x : float32

    Returns
    -------
    s, c : float32
    """
    k = (x * _F32_TWO_OVER_PI + _F32_ROUND) - _F32_ROUND
    r = ((x - k * _F32_DP1) - k * _F32_DP2) - k * _F32_DP3
    z = r * r
    s = ((_F32_S3 * z + _F32_S2) * z + _F32_S1) * z * r + r
    c = ((_F32_C3 * z + _F32_C2) * z + _F32_C1) * z * z - _F32_HALF * z + _F32_ONE
    q = np.int32(k) & 3
    swap = (q & 1) == 1
    s1 = c if swap else s
    c1 = s if swap else c
    s1 = -s1 if (q & 2) == 2 else s1
    c1 = -c1 if ((q + 1) & 2) == 2 else c1
    return s1, c1


def sincos_native(x):
    """``sincos`` in the precision of ``x``: :func:`sincos32` for float32, :func:`sincos` otherwise.

    Inside jitted code the choice is made at compile time (the ``overload`` below); called from
    Python it dispatches on the scalar's dtype the same way.
    """
    if isinstance(x, np.float32):
        return sincos32(x)
    return sincos(x)


@overload(sincos_native, inline="always")
def _sincos_native_impl(x):
    if isinstance(x, nb.types.Float) and x.bitwidth == 32:
        return lambda x: sincos32(x)
    return lambda x: sincos(x)


@nb.njit(fastmath=False, cache=True)
def sincos_array(x):
    """Element-wise :func:`sincos` (float64) or :func:`sincos32` (float32) of an array (for the tests).

    Parameters
    ----------
    x : float64 or float32 array, shape (n,)

    Returns
    -------
    s, c : arrays, shape (n,), dtype of ``x``
    """
    n = x.shape[0]
    s = np.empty_like(x)
    c = np.empty_like(x)
    for i in range(n):
        s[i], c[i] = sincos_native(x[i])
    return s, c


def _rff_tile(ut, ct, y, b, phased, mode, coef, sum_y2):
    """One fused pass over a tile of particles (see the module docstring).

    Parameters
    ----------
    ut : float64 or float32 array, shape (B, n), C-contiguous
        On entry the phases ``omega_j . x_i``; on return ``dV_j / dU_ji``.
    ct : array, shape (B, n), dtype of ``ut``
        Scratch.
    y : float64 array, shape (n,)
        Targets.
    b : array, shape (B,), dtype of ``ut``
        Phases of the tile's particles (zeros unless ``phased``), added to the phases.
    phased : bool
        Given phases (exact (B.6)) rather than the phase average (eq. (4.1)).
    mode : int
        ``MODE_NATIVE``: :func:`sincos` or :func:`sincos32` in the tile's precision
        (phases up to ``PHASE_LIMIT`` resp. ``PHASE_LIMIT_F32``); ``MODE_F64``: float64
        :func:`sincos` of the phases (float32 tiles with phases beyond
        ``PHASE_LIMIT_F32``); ``MODE_LIBM``: libm, for phases beyond ``PHASE_LIMIT``.
    coef : float
        ``-1 / (n (n - 1))``.
    sum_y2 : float
        ``sum_i y_i^2``.

    Returns
    -------
    V : float64 array, shape (B,)
        The potential of each particle.
    """
    m, n = ut.shape
    nl = n - n % LANES
    V = np.empty(m)
    root2 = 2.0 ** 0.5
    k2 = 2.0 * coef
    for j in nb.prange(m):
        u = ut[j]
        cr = ct[j]
        bj = b[j]
        if mode == MODE_NATIVE:
            for i in range(n):
                s, c = sincos_native(u[i] + bj)
                u[i] = s
                cr[i] = c
        elif mode == MODE_F64:
            for i in range(n):
                s, c = sincos(np.float64(u[i]) + np.float64(bj))
                u[i] = s
                cr[i] = c
        else:
            for i in range(n):
                a = np.float64(u[i]) + np.float64(bj)
                u[i] = math.sin(a)
                cr[i] = math.cos(a)
        acc1 = np.zeros(LANES)
        acc2 = np.zeros(LANES)
        if phased:
            for i0 in range(0, nl, LANES):
                for l in range(LANES):
                    t = y[i0 + l] * (root2 * np.float64(cr[i0 + l]))
                    acc1[l] += t
                    acc2[l] += t * t
            z = 0.0
            dg = 0.0
            for l in range(LANES):
                z += acc1[l]
                dg += acc2[l]
            for i in range(nl, n):
                t = y[i] * (root2 * np.float64(cr[i]))
                z += t
                dg += t * t
            V[j] = coef * (z * z - dg)
            for i in range(n):
                phi = root2 * np.float64(cr[i])
                dphi = k2 * y[i] * (z - y[i] * phi)
                u[i] = dphi * (-root2) * np.float64(u[i])
        else:
            for i0 in range(0, nl, LANES):
                for l in range(LANES):
                    acc1[l] += y[i0 + l] * np.float64(cr[i0 + l])
                    acc2[l] += y[i0 + l] * np.float64(u[i0 + l])
            zc = 0.0
            zs = 0.0
            for l in range(LANES):
                zc += acc1[l]
                zs += acc2[l]
            for i in range(nl, n):
                zc += y[i] * np.float64(cr[i])
                zs += y[i] * np.float64(u[i])
            V[j] = coef * (zc * zc + zs * zs - sum_y2)
            for i in range(n):
                u[i] = k2 * y[i] * (zs * np.float64(cr[i]) - zc * np.float64(u[i]))
    return V


#: :func:`_rff_tile` with one ``prange`` task per particle (used when Numba has more than one thread)
rff_tile = nb.njit(parallel=True, fastmath=False, cache=True)(_rff_tile)
#: the same pass compiled without a thread pool (``prange`` is ``range``): used with one Numba
#: thread, so a single-threaded step never wakes the threading layer (OpenMP workers that spin
#: after a parallel region compete with BLAS threads on a busy machine)
rff_tile_serial = nb.njit(parallel=False, fastmath=False, cache=True)(_rff_tile)
