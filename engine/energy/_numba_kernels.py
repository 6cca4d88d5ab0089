"""Numba CPU kernels for the all-pairs Riesz energy and force (beside the xp reference).

The kernel returns *unnormalised* row sums over the off-diagonal pairs,

    rows[k]    = sum_{l != k} g_s(omega_k - omega_l)
    grads[k]   = sum_{l != k} grad g_s(omega_k - omega_l)
               = -c_s sum_{l != k} |omega_k - omega_l|_eps^{-(s+2)} (omega_k - omega_l),

with ``|w|_eps = sqrt(|w|^2 + eps^2)``, ``c_s = |s|`` for ``s != 0`` and ``c_0 = 1``;
the normalisations of paper 000, eq. (2.3)/(B.10), are applied by the caller
(:mod:`engine.energy.riesz`). Each row is an independent ``prange`` task, so the
double loop visits every ordered pair (twice the work of ``k < l``) but needs no
atomic writes, and the energy is a deterministic row-wise sum independent of
the thread count.

Exponent special cases (particles_pde_reference.md sec. 1.4): the force weight
``r^{-(s+2)}`` is computed as an integer power of

* ``1/r^2``           when ``s`` is an even integer (no root; ``s = 0`` is the log case),
* ``1/sqrt(r^2)``     when ``s`` is an odd integer (one sqrt; e.g. ``s = d - 2`` for odd d),
* ``1/sqrt(sqrt(r^2))`` when ``s`` is a half-integer (two sqrt),

and by ``pow`` otherwise. The energy needs no extra transcendental call for
``s != 0`` because ``r^{-s} = r^{-(s+2)} * r^2``.

``fastmath`` is off: with it LLVM may reassociate the row sums and replace
divisions by approximate reciprocals, which breaks the documented 1e-12 parity
with the NumPy reference and bitwise reproducibility across thread counts.
The loop is limited by sqrt/division latency, not by the reduction order.
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


@nb.njit(inline="always", cache=True)
def _ipow(base, n):
    """base**n for an integer n >= 1 by binary exponentiation."""
    result = 1.0
    while n > 0:
        if n & 1:
            result *= base
        base *= base
        n >>= 1
    return result


@nb.njit(inline="always", cache=True)
def _weight(r2, mode, power, s):
    """Force weight r^{-(s+2)} from r^2 (r^2 > 0)."""
    if mode == MODE_LOG:
        return 1.0 / r2
    if mode == MODE_EVEN:
        return _ipow(1.0 / r2, power)
    if mode == MODE_ODD:
        return _ipow(1.0 / math.sqrt(r2), power)
    if mode == MODE_HALF:
        return _ipow(1.0 / math.sqrt(math.sqrt(r2)), power)
    return r2 ** (-0.5 * (s + 2.0))


@nb.njit(parallel=True, fastmath=False, cache=True)
def riesz_pair_sums(x, s, eps2, mode, power, want_energy):
    """Row sums of g_s and grad g_s over the off-diagonal pairs (see module docstring).

    Parameters
    ----------
    x : float64 array, shape (N, d), C-contiguous
    s : float
        Riesz exponent, ``s > -2``.
    eps2 : float
        Squared softening length, ``>= 0``.
    mode, power : int
        From :func:`exponent_mode`.
    want_energy : bool
        Compute ``rows`` (otherwise it is returned as zeros).

    Returns
    -------
    rows : float64 array, shape (N,)
    grads : float64 array, shape (N, d)
    """
    n, d = x.shape
    rows = np.zeros(n)
    grads = np.zeros((n, d))
    sign = 1.0 if s > 0.0 else -1.0
    coef = 1.0 if s == 0.0 else abs(s)
    for i in nb.prange(n):
        acc = np.zeros(d)
        e = 0.0
        for j in range(n):
            if j == i:
                continue
            r2 = eps2
            for a in range(d):
                t = x[i, a] - x[j, a]
                r2 += t * t
            w = _weight(r2, mode, power, s)
            if want_energy:
                if mode == MODE_LOG:
                    e -= 0.5 * math.log(r2)
                else:
                    e += sign * (w * r2)
            for a in range(d):
                acc[a] += w * (x[i, a] - x[j, a])
        rows[i] = e
        for a in range(d):
            grads[i, a] = -coef * acc[a]
    return rows, grads
