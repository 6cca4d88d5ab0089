"""Explicit attention rows of one attention layer, as the LUNA study compares them (teacher against
student in the post-hoc conversion, trained against initial maps in the kernel sweep)."""
from __future__ import annotations

import math

import numpy as np

__all__ = ["attention_rows"]


def attention_rows(attn, params, x, mask):
    """Explicit attention rows of one attention layer: (H, B, n, n), rows summing to 1.

    Parameters
    ----------
    attn : KernelizedLinearAttention or SoftmaxAttention
    params : dict
        The layer's parameters (local names).
    x : float array, shape (B, n, d_model)
        The layer's attention input.
    mask : bool array, shape (B, n)

    Returns
    -------
    rows : ndarray, shape (H, B, n, n)
    keys : ndarray, shape (H, B, n, d_k)
        The key vectors (the support on which the rows are compared).
    """
    q, k, _ = attn.project(params, x)
    q, k = np.asarray(q, dtype=np.float64), np.asarray(k, dtype=np.float64)
    km = mask[None, :, None, :]
    if hasattr(attn, "feature_map"):
        phi_q, _ = attn.features({kk: np.asarray(v, dtype=np.float64) for kk, v in params.items()}, q)
        phi_k, _ = attn.features({kk: np.asarray(v, dtype=np.float64) for kk, v in params.items()}, k)
        kern = np.einsum("hbid,hbjd->hbij", phi_q, phi_k) * km
        rows = kern / (kern.sum(-1, keepdims=True) + max(attn.eps, 1e-12))
    else:
        sc = np.einsum("hbid,hbjd->hbij", q, k) / math.sqrt(q.shape[-1])
        sc = np.where(km, sc, -np.inf)
        sc -= sc.max(-1, keepdims=True)
        e = np.exp(sc)
        rows = e / e.sum(-1, keepdims=True)
    return rows, k
