"""Masked mean pooling of token representations and its backward pass.

References
----------
paper 000, App. C.1 (the pooling operator, pi_i = m_i / sum_j m_j).
"""
from __future__ import annotations

from rieszflow.engine.backend import namespace
from rieszflow.engine.attention.ops import check_mask

__all__ = [
    "masked_mean_pool",
    "masked_mean_pool_backward",
]


# --------------------------------------------------------------------------- pooling and loss

def masked_mean_pool(h, mask):
    """Masked mean over the sequence: ``P = sum_i pi_i h_i``, ``pi_i = m_i / sum_j m_j``.

    Parameters
    ----------
    h : float array, shape (B, L, D)
    mask : bool array, shape (B, L)
        True on real tokens; every row needs one.

    Returns
    -------
    pooled : float array, shape (B, D)
    cache : tuple

    Raises
    ------
    ValueError, TypeError
        If shapes disagree or the mask is bad (see :func:`check_mask`).

    References
    ----------
    paper 000, App. C.1 (pooling operator P with pi in the simplex; mean
    pooling with masks, pi_i = m_i / sum_j m_j).
    """
    if h.ndim != 3:
        raise ValueError(f"h has shape {tuple(h.shape)}; expected (B, L, D)")
    check_mask(mask, h.shape[:2])
    xp = namespace(h)
    w = mask.astype(h.dtype)
    w /= w.sum(axis=1, keepdims=True)
    pooled = xp.matmul(w[:, None, :], h)[:, 0, :]
    return pooled, (w, h.shape)


def masked_mean_pool_backward(dpooled, cache):
    """VJP of :func:`masked_mean_pool`: ``dh[b, i] = pi[b, i] * dpooled[b]``.

    Parameters
    ----------
    dpooled : float array, shape (B, D)
    cache : tuple from :func:`masked_mean_pool`

    Returns
    -------
    dh : float array, shape (B, L, D)

    Raises
    ------
    ValueError
        If ``dpooled`` is not (B, D).

    References
    ----------
    paper 000, App. C.1 (pooling operator).
    """
    w, shape = cache
    if tuple(dpooled.shape) != (shape[0], shape[2]):
        raise ValueError(f"dpooled has shape {tuple(dpooled.shape)}; expected {(shape[0], shape[2])}")
    return w[:, :, None] * dpooled[:, None, :]
