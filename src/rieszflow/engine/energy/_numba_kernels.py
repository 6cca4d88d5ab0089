"""Numba CPU kernels for the all-pairs Riesz energy and force (beside the xp reference).

The kernel returns *unnormalised* row sums over the off-diagonal pairs,

    rows[k]    = sum_{l != k} g_s(omega_k - omega_l)
    grads[k]   = sum_{l != k} grad g_s(omega_k - omega_l)
               = -c_s sum_{l != k} |omega_k - omega_l|_eps^{-(s+2)} (omega_k - omega_l),

with ``|w|_eps = sqrt(|w|^2 + eps^2)``, ``c_s = |s|`` for ``s != 0`` and ``c_0 = 1``;
the normalisations of paper 000, eq. (2.3)/(B.10), are applied by the caller
(:mod:`~rieszflow.engine.energy.riesz`). Each row is an independent ``prange`` task, so the
double loop visits every ordered pair (twice the work of ``k < l``) but needs no
atomic writes, and every sum has a fixed order independent of the thread count.

Exponent special cases (particles_pde_reference.md sec. 1.4): the force weight
``r^{-(s+2)}`` is computed as an integer power of

* ``1/r^2``           when ``s`` is an even integer (no root; ``s = 0`` is the log case),
* ``1/sqrt(r^2)``     when ``s`` is an odd integer (one sqrt; e.g. ``s = d - 2`` for odd d),
* ``1/sqrt(sqrt(r^2))`` when ``s`` is a half-integer (two sqrt),

and by ``pow`` otherwise. The energy needs no extra transcendental call for
``s != 0`` because ``r^{-s} = r^{-(s+2)} * r^2``.

``fastmath`` is off: with it LLVM may reassociate sums and replace divisions by
approximate reciprocals, so results would depend on the vector width. SIMD is
obtained without it: for each row the columns are processed in blocks of
``BLOCK``; squared distances, weights and energies are element-wise loops over
the block (vectorised, exact IEEE sqrt/division), and the row sums are kept in
``LANES`` explicit partial accumulators (a fixed, documented summation order
that is the same for every thread count and machine). This is ~10x faster than
the scalar double loop and agrees with the NumPy reference to ~1e-14 relative.
"""
from __future__ import annotations

import math

import numba as nb
import numpy as np

#: exponent modes of :func:`riesz_pair_sums`
MODE_LOG, MODE_EVEN, MODE_ODD, MODE_HALF, MODE_POW = 0, 1, 2, 3, 4


def exponent_mode(s: float):
    """Choose the cheapest exact evaluation of ``r^{-(s+2)}``.

    Parameters
    ----------
    s : float
        Riesz exponent, ``s > -2``.

    Returns
    -------
    mode : int
        One of ``MODE_LOG, MODE_EVEN, MODE_ODD, MODE_HALF, MODE_POW``.
    power : int
        Integer power of the base (``1/r^2``, ``1/r`` or ``1/sqrt(r)``); 0 for
        ``MODE_LOG`` and ``MODE_POW``.
    """
    if s == 0.0:
        return MODE_LOG, 0
    m = s + 2.0  # exponent of 1/r in the force weight, m > 0
    if 2.0 * m == round(2.0 * m) and 2.0 * m <= 128:
        q = int(round(2.0 * m))  # r^{-m} = (r^{-1/2})^{2m}
        if q % 4 == 0:
            return MODE_EVEN, q // 4
        if q % 2 == 0:
            return MODE_ODD, q // 2
        return MODE_HALF, q
    return MODE_POW, 0


#: lane count of the partial row sums and the column block (a multiple of LANES)
LANES, BLOCK = 8, 256


@nb.njit(parallel=True, fastmath=False, cache=True)
def riesz_pair_sums(x, s, eps2, mode, power, want_energy):
    """Row sums of g_s and grad g_s over the off-diagonal pairs (see module docstring).

    Parameters
    ----------
    x : float64 array, shape (N, d)
    s : float
        Riesz exponent, ``s > -2``.
    eps2 : float
        Squared softening length, ``>= 0``.
    mode, power : int
        From :func:`exponent_mode`.
    want_energy : bool
        Compute ``rows`` (otherwise it is returned as zeros and no log is taken).

    Returns
    -------
    rows : float64 array, shape (N,)
        ``sum_{l != k} g_s(x_k - x_l)``.
    grads : float64 array, shape (N, d)
        ``sum_{l != k} grad g_s(x_k - x_l)``.
    """
    n, d = x.shape
    npad = ((n + LANES - 1) // LANES) * LANES
    xt = np.zeros((d, npad))  # transposed, zero-padded copy: unit-stride column blocks
    for a in range(d):
        for j in range(n):
            xt[a, j] = x[j, a]
    rows = np.zeros(n)
    grads = np.zeros((n, d))
    sign = 1.0 if s > 0.0 else -1.0
    coef = 1.0 if s == 0.0 else abs(s)
    for i in nb.prange(n):
        r2b = np.empty(BLOCK)
        wb = np.empty(BLOCK)
        tb = np.empty(BLOCK)
        acc = np.zeros((d, LANES))
        acce = np.zeros(LANES)
        for jb in range(0, npad, BLOCK):
            m = min(BLOCK, npad - jb)
            pad0 = max(0, n - jb)  # block-local index of the first padding column
            for k in range(m):
                r2b[k] = eps2
            for a in range(d):
                xia = x[i, a]
                for k in range(m):
                    t = xia - xt[a, jb + k]
                    r2b[k] += t * t
            # mask the padding and the self pair BEFORE evaluating the kernel
            for k in range(pad0, m):
                r2b[k] = 1.0
            if jb <= i < jb + m:
                r2b[i - jb] = 1.0
            # force weight r^{-(s+2)}
            if mode == MODE_LOG:
                for k in range(m):
                    wb[k] = 1.0 / r2b[k]
            elif mode == MODE_POW:
                e = -0.5 * (s + 2.0)
                for k in range(m):
                    wb[k] = r2b[k] ** e
            else:
                if mode == MODE_EVEN:
                    for k in range(m):
                        tb[k] = 1.0 / r2b[k]
                elif mode == MODE_ODD:
                    for k in range(m):
                        tb[k] = 1.0 / math.sqrt(r2b[k])
                else:
                    for k in range(m):
                        tb[k] = 1.0 / math.sqrt(math.sqrt(r2b[k]))
                for k in range(m):
                    wb[k] = 1.0
                p = power  # wb = tb**power by binary exponentiation, element-wise
                while p > 0:
                    if p & 1:
                        for k in range(m):
                            wb[k] *= tb[k]
                    p >>= 1
                    if p > 0:
                        for k in range(m):
                            tb[k] *= tb[k]
            for k in range(pad0, m):
                wb[k] = 0.0
            if jb <= i < jb + m:
                wb[i - jb] = 0.0
            if want_energy:
                if mode == MODE_LOG:
                    for k in range(m):
                        tb[k] = -0.5 * math.log(r2b[k])
                else:
                    g0 = math.inf if s > 0.0 else 0.0  # g_s at coincident points (w * r2 = inf * 0)
                    for k in range(m):
                        tb[k] = sign * (wb[k] * r2b[k]) if r2b[k] > 0.0 else g0  # r^{-s} = r^{-(s+2)} r^2
                for k in range(pad0, m):
                    tb[k] = 0.0
                if jb <= i < jb + m:
                    tb[i - jb] = 0.0
                for k0 in range(0, m, LANES):
                    for lane in range(LANES):
                        acce[lane] += tb[k0 + lane]
            for a in range(d):
                xia = x[i, a]
                for k0 in range(0, m, LANES):
                    for lane in range(LANES):
                        acc[a, lane] += wb[k0 + lane] * (xia - xt[a, jb + k0 + lane])
        e_row = 0.0
        for lane in range(LANES):
            e_row += acce[lane]
        rows[i] = e_row
        for a in range(d):
            g = 0.0
            for lane in range(LANES):
                g += acc[a, lane]
            grads[i, a] = -coef * g
    return rows, grads


@nb.njit(cache=True)
def _g_scalar(r2, s, eps2):
    """g_s at squared distance r2 (softened): r^-s (s > 0), -log r (s = 0), -r^-s (s < 0)."""
    r2 = r2 + eps2
    if s == 0.0:
        return -0.5 * math.log(r2)
    v = r2 ** (-0.5 * s)
    return v if s > 0.0 else -v


@nb.njit(cache=True)
def component_sweep(omega, proposal, log_a, log_u, inside, coef, s, eps):
    """One Metropolis-within-Gibbs sweep's pair correction, in place on ``omega``.

    For k = 0..N-1 (in order), if ``inside[k]``: ``d = sum_{l != k} [g_s(y_k - omega_l) -
    g_s(omega_k - omega_l)]`` at the current ``omega``; accept when ``log_u[k] < log_a[k] - coef * d``
    and then ``omega[k] = proposal[k]``. Returns the accepted mask (bool, (N,)).
    """
    n, dim = omega.shape
    acc = np.zeros(n, dtype=np.bool_)
    eps2 = eps * eps
    for k in range(n):
        if not inside[k]:
            continue
        dsum = 0.0
        for l in range(n):
            if l == k:
                continue
            rn = 0.0
            ro = 0.0
            for j in range(dim):
                a = proposal[k, j] - omega[l, j]
                b = omega[k, j] - omega[l, j]
                rn += a * a
                ro += b * b
            dsum += _g_scalar(rn, s, eps2) - _g_scalar(ro, s, eps2)
        la = log_a[k] - coef * dsum
        if log_u[k] < la:                  # NaN rejects
            acc[k] = True
            for j in range(dim):
                omega[k, j] = proposal[k, j]
    return acc
