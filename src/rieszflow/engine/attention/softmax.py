"""Softmax (scaled dot-product) attention, the exact baseline of the linear attentions.

References
----------
paper 000, App. C, eq. (C.1); Vaswani et al. (2017), "Attention is all you need", arXiv:1706.03762.
"""
from __future__ import annotations

import math

import numpy as np

from rieszflow.engine.backend import namespace
from rieszflow.engine.attention.multihead import _MultiHead
from rieszflow.engine.attention.ops import (
    _linear_bwd,
    _linear_fwd,
    _merge_heads,
    _softmax_last,
    _softmax_last_backward,
    _split_heads,
)

__all__ = [
    "SoftmaxAttention",
]


class SoftmaxAttention(_MultiHead):
    """Exact scaled dot-product softmax attention (the Vaswani baseline).

    ``a_i = sum_j p_ij v_j``, ``p_ij = m_j exp(s_ij) / sum_l m_l exp(s_il)``,
    ``s_ij = q_i^T k_j / sqrt(d_k)``, with padding keys (``m_j = 0``) given
    weight exactly 0; evaluated with the row maximum subtracted. Heads are
    merged and projected by ``W_O``. No dropout on the attention weights.

    Parameters
    ----------
    d_model, n_heads : int
        Model width D and heads H; ``d_k = D / H``.
    qk : {"learned", "shared"}, default "learned"
        ``"learned"`` is the standard baseline (``W_Q``, ``W_K``); ``"shared"``
        uses ``q = k =`` the head slice of the input.

    Notes
    -----
    Parameters as :class:`KernelizedLinearAttention` without ``"omega"``.
    O(H B L^2 d_k) time, O(H B L^2) memory.

    References
    ----------
    paper 000, App. C, eq. (C.1) and the softmax attention display before it.
    """

    def __init__(self, d_model: int, n_heads: int, qk: str = "learned"):
        super().__init__(d_model, n_heads, qk)

    def init_params(self, rng: np.random.Generator, dtype=np.float64) -> dict:
        """Draw the projections on the host (Xavier-uniform weights, zero biases).

        Parameters
        ----------
        rng : numpy.random.Generator
        dtype : numpy dtype, default float64

        Returns
        -------
        dict
            ``w_v, b_v, w_o, b_o`` and, with ``qk="learned"``, ``w_q, b_q, w_k, b_k``.
        """
        return self._init_proj(rng, dtype)

    def forward(self, params: dict, x, mask):
        """Evaluate softmax attention.

        Parameters
        ----------
        params : dict
            The projections (see :meth:`init_params`).
        x : float array, shape (B, L, D)
        mask : bool array, shape (B, L)
            True on real tokens (keys with False get weight 0); every row needs one.

        Returns
        -------
        y : float array, shape (B, L, D)
        cache : tuple

        Raises
        ------
        ValueError, TypeError
            On wrong shapes or a bad mask.
        """
        self._check_inputs(x, mask)
        xp = namespace(x)
        q, k, v = self.project(params, x)
        p, scale = self._probs(xp, q, k, mask)
        a = xp.matmul(p, v)
        am = _merge_heads(a)
        y = _linear_fwd(am, params["w_o"], params["b_o"])
        return y, (x, q, k, v, p, am, scale, params)

    def attention_rows(self, params, x, mask):
        """The attention matrix of every head, as the forward pass computes it.

        ``A[h, b, i, j] = softmax_j(q_i . k_j / sqrt(d_k))`` over the real keys
        (padded keys get 0), so ``a_i = sum_j A[i, j] v_j``; bit-identical to the
        forward pass's probabilities.

        Parameters
        ----------
        params : dict
            The projections (see :meth:`init_params`).
        x : float array, shape (B, L, D)
            The layer input.
        mask : bool array, shape (B, L)
            True on real tokens; every row needs one.

        Returns
        -------
        float array, shape (H, B, L, L)
            Row-stochastic over the keys; dtype and backend of ``x``.

        Raises
        ------
        ValueError, TypeError
            On wrong shapes or a bad mask.

        References
        ----------
        paper 000, App. C, eq. (C.1).
        """
        self._check_inputs(x, mask)
        q, k, _ = self.project(params, x)
        return self._probs(namespace(x), q, k, mask)[0]

    def _probs(self, xp, q, k, mask):
        """Masked, scaled softmax scores (H, B, L, L) and the scale 1/sqrt(d_k)."""
        scale = 1.0 / math.sqrt(self.d_k)
        s = xp.matmul(q, k.transpose(0, 1, 3, 2))                     # (H, B, L, L)
        s *= scale
        keyok = mask[None, :, None, :]
        s = xp.where(keyok, s, -xp.inf)
        return _softmax_last(xp, s), scale

    def backward(self, dy, cache):
        """VJP of :meth:`forward`.

        Parameters
        ----------
        dy : float array, shape (B, L, D)
        cache : tuple from :meth:`forward`

        Returns
        -------
        dx : float array, shape (B, L, D)
        grads : dict
            The projections' gradients, with their shapes.
        """
        x, q, k, v, p, am, scale, params = cache
        xp = namespace(dy)
        grads = {}
        dam, grads["w_o"], grads["b_o"] = _linear_bwd(dy, am, params["w_o"])
        da = _split_heads(dam, self.n_heads)
        dv = xp.matmul(p.transpose(0, 1, 3, 2), da)
        dp = xp.matmul(da, v.transpose(0, 1, 3, 2))
        ds = _softmax_last_backward(p, dp)
        ds *= scale
        dq = xp.matmul(ds, k)
        dk = xp.matmul(ds.transpose(0, 1, 3, 2), q)
        if self.qk == "shared":
            dq += dk
            dk = None
        dx = self._project_in_backward(params, x, dq, dk, dv, grads)
        return dx, grads
