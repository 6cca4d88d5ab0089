"""Array helpers shared by the Transformer layers: the padding-mask check, dense maps, heads, softmax.

:func:`check_mask` is public; the private helpers (``_linear_fwd``/``_linear_bwd``,
``_split_heads``/``_merge_heads`` between ``(B, L, H d_k)`` and head-major
``(H, B, L, d_k)``, the in-place row softmax and its VJP) are shared by the
layer modules of this package.

References
----------
paper 000, App. C (eqs. (C.1)-(C.3)) and App. F.2 ("Experimental setup").
"""
from __future__ import annotations

import math

from rieszflow.engine._checks import is_host
from rieszflow.engine.backend import namespace

__all__ = [
    "check_mask",
]


# --------------------------------------------------------------------------- helpers

def _check_last_dim(name, x, d):
    if x.ndim < 1 or x.shape[-1] != d:
        raise ValueError(f"{name} has shape {tuple(x.shape)}; its last axis must have size {d}")


def _xavier_uniform(rng, fan_in, fan_out, dtype):
    a = math.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-a, a, size=(fan_in, fan_out)).astype(dtype)


def _rows_matmul(x, w):
    """``x @ w`` for x (..., k), w (k, n): one 2-D GEMM over the rows of a contiguous x.

    A stacked ``matmul`` with a 2-D right operand makes one GEMM per leading index; the rows
    of a C-contiguous x are one (rows, k) matrix, and one large GEMM runs faster on the host
    (issue 24, item 5; ``benchmarks/bench_attention.py``). The product is the same; only the
    GEMM's blocking differs.
    """
    if x.ndim > 2 and x.flags.c_contiguous:
        return (x.reshape(-1, x.shape[-1]) @ w).reshape(x.shape[:-1] + (w.shape[-1],))
    return x @ w


def _linear_fwd(x, w, b):
    """y = x @ w + b over any leading axes."""
    y = _rows_matmul(x, w)
    if b is not None:
        y += b
    return y


def _linear_bwd(dy, x, w, with_bias=True):
    """VJP of y = x @ w + b: returns (dx, dw, db)."""
    d_in, d_out = w.shape
    x2 = x.reshape(-1, d_in)
    dy2 = dy.reshape(-1, d_out)
    dw = x2.T @ dy2
    db = dy2.sum(axis=0) if with_bias else None
    dx = _rows_matmul(dy, w.T)
    return dx, dw, db


def check_mask(mask, shape):
    """Validate a padding mask.

    Parameters
    ----------
    mask : bool array, shape (B, L)
        ``True`` on real tokens, ``False`` on padding.
    shape : tuple of int
        Expected ``(B, L)``.

    Returns
    -------
    None

    Raises
    ------
    TypeError
        If ``mask`` is not boolean.
    ValueError
        If its shape differs from ``shape`` or a row has no real token (the
        attention normaliser and the mean pool would divide by zero).

    References
    ----------
    paper 000, App. C ("padding masks apply by omitting the masked terms").
    """
    if mask is None or not hasattr(mask, "dtype"):
        raise TypeError(f"mask must be a boolean array of shape {tuple(shape)}; got {type(mask).__name__}")
    if mask.dtype != bool:
        raise TypeError(f"mask has dtype {mask.dtype}; expected bool (True = real token)")
    if tuple(mask.shape) != tuple(shape):
        raise ValueError(f"mask has shape {tuple(mask.shape)}; expected {tuple(shape)} (the shape of ids)")
    xp = namespace(mask)
    # the contents are checked on the host only: on a device it would be a sync per call
    # (engine._checks policy); the training loops build masks on the host from the data
    if is_host(mask) and not bool(xp.all(mask.any(axis=1))):
        raise ValueError("mask has a row with no True entry; every sequence needs at least one real token")


def _softmax_last(xp, s):
    """Softmax over the last axis, in place in ``s`` (max-shifted: no overflow)."""
    s -= s.max(axis=-1, keepdims=True)
    p = xp.exp(s, out=s)
    p /= p.sum(axis=-1, keepdims=True)
    return p


def _softmax_last_backward(p, dp):
    """VJP of :func:`_softmax_last`: ``ds = p * (dp - sum(dp * p))`` over the last axis."""
    return p * (dp - (dp * p).sum(axis=-1, keepdims=True))


def _split_heads(x, n_heads):
    """(B, L, H*dk) -> contiguous (H, B, L, dk)."""
    xp = namespace(x)
    b, l, d = x.shape
    return xp.ascontiguousarray(x.reshape(b, l, n_heads, d // n_heads).transpose(2, 0, 1, 3))


def _merge_heads(x):
    """(H, B, L, dk) -> contiguous (B, L, H*dk)."""
    xp = namespace(x)
    h, b, l, dk = x.shape
    return xp.ascontiguousarray(x.transpose(1, 2, 0, 3)).reshape(b, l, h * dk)
