"""Causal linear attention: chunk-parallel (with its backward), prefix-sum and streaming forms.

References
----------
Katharopoulos et al. (2020), "Transformers are RNNs: fast autoregressive transformers
with linear attention", arXiv:2006.16236; paper 001 (LUNA), section 4.
"""
from __future__ import annotations

import math

import numpy as np

from rieszflow.engine._checks import check_int
from rieszflow.engine.backend import namespace

__all__ = [
    "causal_linear_attention",
    "causal_linear_attention_backward",
    "causal_linear_attention_prefix",
    "streaming_linear_attention",
]


# --------------------------------------------------------------------------- causal linear attention

def causal_linear_attention(phi_q, phi_k, v, eps: float = 1e-6, chunk: int = 64):
    """Causal normalised linear attention in the chunk-parallel form, and its cache.

    ``a_t = sum_{s <= t} (phi_q,t . phi_k,s) v_s / (sum_{s <= t} phi_q,t . phi_k,s + eps)``,
    evaluated chunk by chunk: inside a chunk the lower-triangular block
    ``A = tril(Phi_q,c Phi_k,c^T)``, across chunks the carried sums
    ``S = sum_s phi_k,s v_s^T`` (D, d_v) and ``z = sum_s phi_k,s`` (D,). Memory is
    ``O(chunk^2 + D d_v)`` per leading index, never ``O(n D d_v)``. Mask padding keys by
    zeroing their rows of ``phi_k`` before the call.

    Parameters
    ----------
    phi_q, phi_k : float array, shape (..., n, D)
        Query and key features (any leading axes, e.g. (H, B)).
    v : float array, shape (..., n, d_v)
    eps : float, default 1e-6
        Added to the denominator (``>= 0``).
    chunk : int, default 64
        Chunk length, ``>= 1`` (``chunk >= n`` is the masked quadratic form).

    Returns
    -------
    a : float array, shape (..., n, d_v)
    cache : tuple
        For :func:`causal_linear_attention_backward`.

    Raises
    ------
    ValueError
        On mismatched shapes or a bad ``chunk``/``eps``.

    References
    ----------
    Katharopoulos et al. (2020), "Transformers are RNNs", arXiv:2006.16236, eqs. (8)-(10);
    paper 001 spec, section 1.7 (the chunked form; the paper gives no causal form).
    """
    xp = namespace(phi_q, phi_k, v)
    chunk = check_int("chunk", chunk, minimum=1)
    if not (isinstance(eps, (int, float, np.floating)) and math.isfinite(eps) and eps >= 0):
        raise ValueError(f"eps={eps!r} is not allowed; expected a finite float >= 0")
    if phi_q.shape != phi_k.shape or phi_q.shape[:-1] != v.shape[:-1]:
        raise ValueError(f"phi_q {tuple(phi_q.shape)}, phi_k {tuple(phi_k.shape)} and v {tuple(v.shape)} "
                         "must share (..., n) and phi_q, phi_k their feature axis")
    n = phi_q.shape[-2]
    lead = phi_q.shape[:-2]
    D, dv = phi_q.shape[-1], v.shape[-1]
    S = xp.zeros(lead + (D, dv), dtype=v.dtype)
    z = xp.zeros(lead + (D,), dtype=v.dtype)
    a = xp.empty(lead + (n, dv), dtype=v.dtype)
    den = xp.empty(lead + (n,), dtype=v.dtype)
    for c0 in range(0, n, chunk):
        c1 = min(c0 + chunk, n)
        q, k, vc = phi_q[..., c0:c1, :], phi_k[..., c0:c1, :], v[..., c0:c1, :]
        A = xp.tril(xp.matmul(q, xp.swapaxes(k, -1, -2)))
        num = xp.matmul(q, S) + xp.matmul(A, vc)
        dn = xp.matmul(q, z[..., None])[..., 0] + A.sum(axis=-1) + eps
        a[..., c0:c1, :] = num / dn[..., None]
        den[..., c0:c1] = dn
        S = S + xp.matmul(xp.swapaxes(k, -1, -2), vc)
        z = z + k.sum(axis=-2)
    return a, (phi_q, phi_k, v, a, den, chunk)


def causal_linear_attention_backward(da, cache):
    """VJP of :func:`causal_linear_attention`: a reverse pass over the chunks.

    Parameters
    ----------
    da : float array, shape (..., n, d_v)
    cache : tuple from :func:`causal_linear_attention`

    Returns
    -------
    dphi_q, dphi_k : float arrays, shape (..., n, D)
    dv : float array, shape (..., n, d_v)

    References
    ----------
    paper 001 spec, section 1.9 (carried ``dS``, ``dz`` over later chunks).
    """
    phi_q, phi_k, v, a, den, chunk = cache
    xp = namespace(da)
    n = phi_q.shape[-2]
    dnum_all = da / den[..., None]
    dden_all = -(da * a).sum(axis=-1) / den
    dq, dk, dvv = xp.empty_like(phi_q), xp.empty_like(phi_k), xp.empty_like(v)
    # prefix sums S_c, z_c before each chunk (recomputed; O(n D d_v / chunk) extra memory)
    starts = list(range(0, n, chunk))
    lead = phi_q.shape[:-2]
    D, dv_ = phi_q.shape[-1], v.shape[-1]
    S_before, z_before = [], []
    S = xp.zeros(lead + (D, dv_), dtype=v.dtype)
    z = xp.zeros(lead + (D,), dtype=v.dtype)
    for c0 in starts:
        S_before.append(S)
        z_before.append(z)
        c1 = min(c0 + chunk, n)
        S = S + xp.matmul(xp.swapaxes(phi_k[..., c0:c1, :], -1, -2), v[..., c0:c1, :])
        z = z + phi_k[..., c0:c1, :].sum(axis=-2)
    dS = xp.zeros_like(S)
    dz = xp.zeros_like(z)
    for idx in reversed(range(len(starts))):
        c0 = starts[idx]
        c1 = min(c0 + chunk, n)
        q, k, vc = phi_q[..., c0:c1, :], phi_k[..., c0:c1, :], v[..., c0:c1, :]
        dnum, dden = dnum_all[..., c0:c1, :], dden_all[..., c0:c1]
        A = xp.tril(xp.matmul(q, xp.swapaxes(k, -1, -2)))
        dA = xp.tril(xp.matmul(dnum, xp.swapaxes(vc, -1, -2)) + dden[..., None])
        dq[..., c0:c1, :] = (xp.matmul(dnum, xp.swapaxes(S_before[idx], -1, -2))
                             + dden[..., None] * z_before[idx][..., None, :] + xp.matmul(dA, k))
        dk[..., c0:c1, :] = (xp.matmul(xp.swapaxes(dA, -1, -2), q)
                             + xp.matmul(vc, xp.swapaxes(dS, -1, -2)) + dz[..., None, :])
        dvv[..., c0:c1, :] = xp.matmul(xp.swapaxes(A, -1, -2), dnum) + xp.matmul(k, dS)
        dS = dS + xp.matmul(xp.swapaxes(q, -1, -2), dnum)
        dz = dz + xp.matmul(dden[..., None, :], q)[..., 0, :]
    return dq, dk, dvv


def causal_linear_attention_prefix(phi_q, phi_k, v, eps: float = 1e-6):
    """Causal linear attention by explicit prefix sums (the recurrent / decode form).

    ``S_t = S_{t-1} + phi_k,t v_t^T``, ``z_t = z_{t-1} + phi_k,t``,
    ``a_t = S_t^T phi_q,t / (z_t . phi_q,t + eps)``. Forms ``cumsum`` of shape
    (..., n, D, d_v): ``O(n D d_v)`` memory, so it is the reference of the chunked
    form, not a training path.

    Parameters
    ----------
    phi_q, phi_k : float array, shape (..., n, D)
    v : float array, shape (..., n, d_v)
    eps : float, default 1e-6

    Returns
    -------
    a : float array, shape (..., n, d_v)

    References
    ----------
    Katharopoulos et al. (2020), arXiv:2006.16236, eqs. (18)-(20).
    """
    xp = namespace(phi_q, phi_k, v)
    S = xp.cumsum(phi_k[..., :, None] * v[..., None, :], axis=-3)
    z = xp.cumsum(phi_k, axis=-2)
    num = xp.matmul(phi_q[..., None, :], S)[..., 0, :]
    den = (phi_q * z).sum(axis=-1) + eps
    return num / den[..., None]


def streaming_linear_attention(phi_q, phi_k, v, eps: float = 0.0, chunk: int = 64):
    """Non-causal normalised linear attention streamed over key/value and query chunks.

    First ``S = sum_j phi_k,j v_j^T`` and ``z = sum_j phi_k,j`` are accumulated over
    key chunks, then applied to query chunks: ``a_i = S^T phi_q,i / (z . phi_q,i + eps)``.
    Memory besides inputs and output is ``O(D d_v + chunk D)``, independent of ``n``.
    Mask padding keys by zeroing their rows of ``phi_k`` first.

    Parameters
    ----------
    phi_q : float array, shape (..., n_q, D)
    phi_k : float array, shape (..., n_k, D)
    v : float array, shape (..., n_k, d_v)
    eps : float, default 0.0
        Added to the denominator.
    chunk : int, default 64
        Rows per chunk, ``>= 1``.

    Returns
    -------
    a : float array, shape (..., n_q, d_v)

    Raises
    ------
    ValueError
        On a bad ``chunk``.

    References
    ----------
    paper 001, section 4 ("admits a streaming form"); paper 001 spec, section 1.7.
    """
    xp = namespace(phi_q, phi_k, v)
    chunk = check_int("chunk", chunk, minimum=1)
    lead = phi_k.shape[:-2]
    S = xp.zeros(lead + (phi_k.shape[-1], v.shape[-1]), dtype=v.dtype)
    z = xp.zeros(lead + (phi_k.shape[-1],), dtype=v.dtype)
    for c0 in range(0, phi_k.shape[-2], chunk):
        k = phi_k[..., c0:c0 + chunk, :]
        S = S + xp.matmul(xp.swapaxes(k, -1, -2), v[..., c0:c0 + chunk, :])
        z = z + k.sum(axis=-2)
    out = xp.empty(phi_q.shape[:-1] + (v.shape[-1],), dtype=v.dtype)
    for c0 in range(0, phi_q.shape[-2], chunk):
        q = phi_q[..., c0:c0 + chunk, :]
        out[..., c0:c0 + chunk, :] = xp.matmul(q, S) / (xp.matmul(q, z[..., None]) + eps)
    return out
