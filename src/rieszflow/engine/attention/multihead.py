"""The Q, K, V, O projections shared by the attention layers, and the query-key modes.

References
----------
paper 000, App. C, eq. (C.1) and App. F.2 ("Q = K = reshape(x)" in the shared form).
"""
from __future__ import annotations

import numpy as np

from rieszflow.engine._checks import check_int
from rieszflow.engine.attention.ops import (
    _linear_bwd,
    _linear_fwd,
    _merge_heads,
    _split_heads,
    _xavier_uniform,
    check_mask,
)

__all__ = [
    "QK_MODES",
]


QK_MODES = ("shared", "learned")


# --------------------------------------------------------------------------- attention

def _check_qk(qk):
    if qk not in QK_MODES:
        raise ValueError(f"qk={qk!r} is not supported; allowed: {', '.join(QK_MODES)}")
    return qk


class _MultiHead:
    """Shared projections of the attention layers (Q, K, V, O); :meth:`project` is public API."""

    def __init__(self, d_model, n_heads, qk):
        self.d_model = check_int("d_model", d_model, minimum=1)
        self.n_heads = check_int("n_heads", n_heads, minimum=1)
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.d_k = self.d_model // self.n_heads
        self.qk = _check_qk(qk)

    def _init_proj(self, rng, dtype):
        d = self.d_model
        p = {}
        if self.qk == "learned":
            p.update(w_q=_xavier_uniform(rng, d, d, dtype), b_q=np.zeros(d, dtype=dtype),
                     w_k=_xavier_uniform(rng, d, d, dtype), b_k=np.zeros(d, dtype=dtype))
        p.update(w_v=_xavier_uniform(rng, d, d, dtype), b_v=np.zeros(d, dtype=dtype),
                 w_o=_xavier_uniform(rng, d, d, dtype), b_o=np.zeros(d, dtype=dtype))
        return p

    def _check_inputs(self, x, mask):
        if x.ndim != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"x has shape {tuple(x.shape)}; expected (B, L, {self.d_model})")
        check_mask(mask, x.shape[:2])

    def project(self, params, x):
        """Queries, keys and values of every head, as the forward pass computes them.

        Parameters
        ----------
        params : dict
            The layer's parameters (local names): ``"w_v"``, ``"b_v"`` (D, D), (D,)
            and, with ``qk="learned"``, ``"w_q"``, ``"b_q"``, ``"w_k"``, ``"b_k"``.
        x : float array, shape (B, L, D)
            The layer input (float32 or float64, NumPy or CuPy); the outputs have its
            dtype and backend.

        Returns
        -------
        q : float array, shape (H, B, L, d_k)
            Head-major, C-contiguous. ``q = x W_Q + b_Q`` split into heads, or the head
            slices of ``x`` itself with ``qk="shared"``.
        k : float array, shape (H, B, L, d_k)
            ``x W_K + b_K`` split into heads; the same object as ``q`` with ``qk="shared"``.
        v : float array, shape (H, B, L, d_k)
            ``x W_V + b_V`` split into heads.

        Raises
        ------
        ValueError
            If ``x`` is not of shape (B, L, D) with ``D = d_model``.
        KeyError
            If ``params`` lacks a projection of this layer.

        References
        ----------
        paper 000, App. C, eq. (C.1) and App. F.2 ("Q = K = reshape(x)").
        """
        if x.ndim != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"x has shape {tuple(x.shape)}; expected (B, L, {self.d_model})")
        if self.qk == "learned":
            q = _split_heads(_linear_fwd(x, params["w_q"], params["b_q"]), self.n_heads)
            k = _split_heads(_linear_fwd(x, params["w_k"], params["b_k"]), self.n_heads)
        else:
            q = k = _split_heads(x, self.n_heads)
        v = _split_heads(_linear_fwd(x, params["w_v"], params["b_v"]), self.n_heads)
        return q, k, v

    def output_backward(self, params, dy):
        """VJP of the output projection: the gradient of every head's attention output.

        ``out = concat_h(a_h) W_O + b_O``, so ``d a_h`` is the head slice of ``dy W_O^T``.

        Parameters
        ----------
        params : dict
            The layer's parameters (local names); ``"w_o"`` (D, D) is read.
        dy : float array, shape (B, L, D)
            Upstream gradient of the layer output.

        Returns
        -------
        float array, shape (H, B, L, d_k)
            Gradient of the per-head attention output ``a`` (before ``W_O``), head-major.

        References
        ----------
        paper 000, App. C, eq. (C.1).
        """
        return _split_heads(dy @ params["w_o"].T, self.n_heads)

    def _project_in_backward(self, params, x, dq, dk, dv, grads):
        """Accumulate dx from head gradients dq, dk, dv (H, B, L, d_k); dk is None in shared form."""
        dx, grads["w_v"], grads["b_v"] = _linear_bwd(_merge_heads(dv), x, params["w_v"])
        if self.qk == "learned":
            dxq, grads["w_q"], grads["b_q"] = _linear_bwd(_merge_heads(dq), x, params["w_q"])
            dxk, grads["w_k"], grads["b_k"] = _linear_bwd(_merge_heads(dk), x, params["w_k"])
            dx += dxq
            dx += dxk
        else:
            dx += _merge_heads(dq)
        return dx
