"""Fused host kernels (Numba) of the Transformer's row-wise and elementwise passes.

The array-API code of the Transformer layers and the l1-renormalised feature maps runs on
NumPy and CuPy alike, one array operation per arithmetic step; on the host each step is a
pass over memory (a layer norm of a (B, L, D) block takes eight such passes). The kernels
here do the same arithmetic, with the same formulas, in one pass per row, for host arrays
of one float dtype that are C-contiguous; :func:`fusable` says when they apply, and every
caller keeps its array-API path for the other cases (CuPy, mixed dtypes, views).

The kernels compute in the arrays' dtype and reorder sums within a row (Numba
``fastmath={"reassoc"}``: vectorised reductions; no fused multiply-adds, and NaN and infinity
semantics kept), so they agree with the array-API path to rounding, which
``tests/test_fused.py`` checks in float32 and float64 for every kernel; the layers' own
gradient checks run on this path on the host. As with the BLAS products around them, the
last bits of a sum can depend on the CPU's vector width (the engine's Riesz kernels keep
fastmath off for that reason; here the row sums are a small part of a training step's
rounding, and a run on one machine is deterministic: the loops are serial).

Set :data:`ENABLED` to False to force the array-API path (the tests compare the two).

References
----------
Issue 24, item 5 (a train step of the bundled Transformer at parity with PyTorch on one core);
``benchmarks/bench_attention.py`` measures it.
"""
from __future__ import annotations

import functools
import math

import numpy as np

__all__: list = []

#: Use the fused kernels where :func:`fusable` allows (False: the array-API path everywhere).
ENABLED = True

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
#: Numba's fastmath flags of every kernel: ``reassoc`` only (vectorised sums within a row; no
#: fused multiply-adds, and NaN, infinities and signed zeros keep their IEEE semantics).
_FAST = {"reassoc"}


def _jit(fn):
    """``fn`` compiled by Numba at its first call (Numba is imported then, not with the module).

    The compiled code is cached on disk (``cache=True``) like the engine's other kernels.
    """
    compiled = None

    @functools.wraps(fn)
    def call(*args):
        nonlocal compiled
        if compiled is None:
            import numba as nb

            compiled = nb.njit(cache=True, fastmath=_FAST, error_model="numpy")(fn)
        return compiled(*args)

    return call


def fusable(*arrays) -> bool:
    """True when the fused kernels may take ``arrays``: host, one float dtype, C-contiguous.

    Parameters
    ----------
    *arrays : objects
        The arrays a kernel reads and writes.

    Returns
    -------
    bool
        False when :data:`ENABLED` is False, or any argument is not exactly a
        ``numpy.ndarray`` (CuPy arrays and the backend's counting stand-ins take the
        array-API path), or the dtypes differ or are not float32/float64, or an array is
        not C-contiguous.
    """
    if not ENABLED:
        return False
    dtype = None
    for a in arrays:
        if type(a) is not np.ndarray or not a.flags.c_contiguous:
            return False
        if dtype is None:
            dtype = a.dtype
            if dtype not in _FLOATS:
                return False
        elif a.dtype != dtype:
            return False
    return True


def rows(a):
    """``a`` as a 2-D (rows, last axis) view (no copy: ``a`` is C-contiguous)."""
    return a.reshape(-1, a.shape[-1]) if a.ndim != 2 else a


# --------------------------------------------------------------------------- layer norm
@_jit
def layer_norm_forward(x, gamma, beta, eps, y, xhat, rstd):  # pragma: no cover - compiled
    """Rows of ``y = gamma xhat + beta``, ``xhat = (x - mean) rstd``, ``rstd = 1/sqrt(var + eps)``.

    x, y, xhat: (n, d); gamma, beta: (d,); rstd: (n,). Two-pass mean and biased variance.
    """
    n, d = x.shape
    zero = x.dtype.type(0.0)
    one = x.dtype.type(1.0)
    inv_d = one / x.dtype.type(d)
    eps = x.dtype.type(eps)
    for i in range(n):
        acc = zero
        for k in range(d):
            acc += x[i, k]
        mu = acc * inv_d
        acc = zero
        for k in range(d):
            c = x[i, k] - mu
            xhat[i, k] = c
            acc += c * c
        r = one / math.sqrt(acc * inv_d + eps)
        rstd[i] = r
        for k in range(d):
            h = xhat[i, k] * r
            xhat[i, k] = h
            y[i, k] = h * gamma[k] + beta[k]


@_jit
def layer_norm_backward(dy, xhat, rstd, gamma, dx, dgamma, dbeta):  # pragma: no cover - compiled
    """VJP of :func:`layer_norm_forward`: ``dx = rstd (g - mean(g) - xhat mean(g xhat))``, g = dy gamma.

    dy, xhat, dx: (n, d); rstd: (n,); gamma, dgamma, dbeta: (d,). dgamma and dbeta are
    overwritten with the sums over rows of ``dy xhat`` and ``dy``.
    """
    n, d = dy.shape
    zero = dy.dtype.type(0.0)
    inv_d = dy.dtype.type(1.0) / dy.dtype.type(d)
    for k in range(d):
        dgamma[k] = zero
        dbeta[k] = zero
    for i in range(n):
        a = zero
        b = zero
        for k in range(d):
            g = dy[i, k] * gamma[k]
            h = xhat[i, k]
            a += g
            b += g * h
            dgamma[k] += dy[i, k] * h
            dbeta[k] += dy[i, k]
        a *= inv_d
        b *= inv_d
        r = rstd[i]
        for k in range(d):
            dx[i, k] = (dy[i, k] * gamma[k] - a - xhat[i, k] * b) * r


# --------------------------------------------------------------------------- GELU (tanh form)
@_jit
def gelu_argument(x, c, ac, out):  # pragma: no cover - compiled
    """``out = x (c + ac x^2)``, the argument of tanh in the GELU (flat arrays)."""
    c = x.dtype.type(c)
    ac = x.dtype.type(ac)
    for i in range(x.size):
        v = x[i]
        out[i] = v * (c + ac * (v * v))


@_jit
def gelu_output(x, t, y):  # pragma: no cover - compiled
    """``y = x (1 + t) / 2`` with ``t = tanh(...)`` (flat arrays)."""
    half = x.dtype.type(0.5)
    one = x.dtype.type(1.0)
    for i in range(x.size):
        y[i] = half * (x[i] * (t[i] + one))


@_jit
def gelu_backward(x, t, dy, c, c3a, dx):  # pragma: no cover - compiled
    """``dx = dy (1 + t + x (c + c3a x^2)(1 - t^2)) / 2``: the VJP of the tanh GELU (flat arrays)."""
    half = x.dtype.type(0.5)
    one = x.dtype.type(1.0)
    c = x.dtype.type(c)
    c3a = x.dtype.type(c3a)
    for i in range(x.size):
        v = x[i]
        ti = t[i]
        dx[i] = half * ((((c + c3a * (v * v)) * (one - ti * ti)) * v + ti + one) * dy[i])


# --------------------------------------------------------------------------- l1 feature maps
@_jit
def softplus_sigmoid_finish(u, e, g, shift):  # pragma: no cover - compiled
    """From ``e = exp(-|u|)`` and ``g = log1p(e)`` (flat arrays), in place:
    ``g = max(u, 0) + g + shift`` (softplus) and ``e = (u > 0 ? 1 : e) / (1 + e)`` (sigmoid).

    ``(u > 0 ? 1 : e)`` is ``exp(min(u, 0))``, so the values are those of the array-API path.
    """
    one = e.dtype.type(1.0)
    zero = e.dtype.type(0.0)
    shift = e.dtype.type(shift)
    for i in range(u.size):
        v = u[i]
        ei = e[i]
        g[i] = (max(v, zero) + g[i]) + shift
        e[i] = (one if v > zero else ei) / (one + ei)


@_jit
def l1_normalise(g, root_m, s):  # pragma: no cover - compiled
    """Rows of ``g`` (n, m) in place: ``s = sum_k g_k`` (n,), then ``g *= root_m / s``."""
    n, m = g.shape
    root_m = g.dtype.type(root_m)
    for i in range(n):
        acc = g.dtype.type(0.0)
        for k in range(m):
            acc += g[i, k]
        s[i] = acc
        c = root_m / acc
        for k in range(m):
            g[i, k] *= c


@_jit
def l1_backward(dphi, phi, dg, s, root_m, scale, dz):  # pragma: no cover - compiled
    """VJP of ``phi = root_m g / sum(g)`` chained with ``g'(u)``, rows (n, m):

    ``dz = (dphi - sum_k(dphi_k phi_k) / root_m) (scale / s) dg`` with ``scale = root_m / tau``;
    s: (n,) the row sums of the unnormalised g.
    """
    n, m = dphi.shape
    inv_root_m = dphi.dtype.type(1.0) / dphi.dtype.type(root_m)
    scale = dphi.dtype.type(scale)
    for i in range(n):
        acc = dphi.dtype.type(0.0)
        for k in range(m):
            acc += dphi[i, k] * phi[i, k]
        inner = acc * inv_root_m
        c = scale / s[i]
        for k in range(m):
            dz[i, k] = (dphi[i, k] - inner) * c * dg[i, k]
