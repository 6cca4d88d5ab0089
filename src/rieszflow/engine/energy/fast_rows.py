"""Exact Riesz row sums for a subset of the particles: the oracle of the fast methods at large N.

A fast method's error at N = 10^6 cannot be measured against the full direct sums (10^12
pairs, an hour per call on one core), but each row of the sum is cheap on its own: O(N d)
for one particle. :func:`riesz_row_sums` computes the exact rows

.. math::

    \\mathrm{rows}_k = \\sum_{l \\ne k} g_s(\\omega_k - \\omega_l), \\qquad
    \\mathrm{grads}_k = \\sum_{l \\ne k} \\nabla g_s(\\omega_k - \\omega_l)

for the requested indices k only, with the kernel of :func:`~rieszflow.engine.energy.riesz_pair`
(the self pair masked before the kernel is evaluated, float64 sums), so a random subset of rows
gives unbiased estimates of the error of a fast method (``benchmarks/bench_fast.py``).

References
----------
Paper 000, eq. (2.3) and (B.10).
"""
from __future__ import annotations

import numpy as np

from rieszflow.engine._checks import check_points
from rieszflow.engine.energy.interaction import check_s, check_softening
from rieszflow.engine.energy.riesz import riesz_pair

__all__ = ["riesz_row_sums"]

_BLOCK_ELEMENTS = 2 ** 21   # elements of one (rows, N, d) block of differences (16 MiB in float64)


def riesz_row_sums(omega, index, s, softening=0.0):
    """Exact row sums of the Riesz kernel for the particles ``index`` (all N columns).

    Parameters
    ----------
    omega : array_like, shape (N, d)
        Particle positions (host array), finite.
    index : array_like of int, shape (m,)
        Rows k to compute, each in ``[0, N)`` (repeats allowed).
    s : float
        Riesz exponent, ``-2 < s < inf``.
    softening : float, default 0.0
        Plummer softening :math:`\\varepsilon \\ge 0`.

    Returns
    -------
    rows : float64 ndarray, shape (m,)
        :math:`\\sum_{l \\ne k} g_s(\\omega_k - \\omega_l)` for each k in ``index``.
    grads : float64 ndarray, shape (m, d)
        :math:`\\sum_{l \\ne k} \\nabla g_s(\\omega_k - \\omega_l)`.

    Raises
    ------
    ValueError
        If ``omega`` is not a finite (N, d) array, an index is out of range or not an integer,
        or ``s``/``softening`` is invalid.

    References
    ----------
    Paper 000, eq. (2.3) and (B.10).
    """
    s = check_s(s)
    eps = check_softening(softening)
    x = np.asarray(check_points("omega", omega), dtype=np.float64)
    n, d = x.shape
    idx = np.asarray(index)
    if idx.ndim != 1 or not np.issubdtype(idx.dtype, np.integer):
        raise ValueError(f"index must be a 1-D array of integers, got dtype {idx.dtype} and shape {idx.shape}")
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        raise ValueError(f"index must lie in [0, {n}), got values from {idx.min()} to {idx.max()}")
    block = max(1, _BLOCK_ELEMENTS // max(1, n * d))
    rows = np.empty(idx.size, dtype=np.float64)
    grads = np.empty((idx.size, d), dtype=np.float64)
    cols = np.arange(n)
    for a in range(0, idx.size, block):
        k = idx[a:a + block]
        diff = x[k, None, :] - x[None, :, :]                     # (b, N, d)
        off = k[:, None] != cols[None, :]
        safe = np.where(off[..., None], diff, 1.0)               # mask the self pair BEFORE the kernel
        g, dg = riesz_pair(safe, s, eps)
        rows[a:a + block] = np.sum(np.where(off, g, 0.0), axis=1)
        grads[a:a + block] = np.sum(np.where(off[..., None], dg, 0.0), axis=1)
    return rows, grads
