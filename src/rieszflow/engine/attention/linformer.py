"""Linformer attention: softmax attention over keys and values projected along the sequence.

References
----------
Wang et al. (2020), "Linformer: Self-Attention with Linear Complexity", arXiv:2006.04768
(a baseline of paper 000's NLP tables).
"""
from __future__ import annotations

import math

import numpy as np

from rieszflow.engine._checks import check_int
from rieszflow.engine.backend import namespace
from rieszflow.engine.attention.multihead import _MultiHead
from rieszflow.engine.attention.ops import (
    _linear_bwd,
    _linear_fwd,
    _merge_heads,
    _softmax_last,
    _softmax_last_backward,
    _split_heads,
    _xavier_uniform,
)

__all__ = [
    "LinformerAttention",
]


class LinformerAttention(_MultiHead):
    """Linformer attention: softmax attention over keys and values projected along the sequence.

    With learned sequence projections ``E, F`` of shape (k, max_len), shared
    by the heads, and for an input of length ``L <= max_len``,

    ``K' = E[:, :L] (m * K)``, ``V' = F[:, :L] (m * V)`` (each (k, d_k) per head),
    ``P = softmax(Q K'^T / sqrt(d_k))`` over the k projected keys,
    ``a = P V'``,

    where ``m`` is the padding mask applied to the rows of ``K`` and ``V``
    (padded keys and values are zeroed before the projection, so they
    contribute nothing). Heads are merged and projected by ``W_O``. No dropout
    on the attention weights.

    Parameters
    ----------
    d_model : int
        Model width D; ``d_k = D / n_heads``.
    n_heads : int
        Number of heads H.
    k : int
        Projected length (number of projected keys/values), >= 1. The layer
        saves work over softmax attention when ``k < L``; larger ``k`` is
        allowed (with ``k = L`` and ``E = F = I`` it is softmax attention).
    max_len : int
        Longest accepted sequence, >= 1 (columns of ``E`` and ``F``).
    qk : {"learned", "shared"}, default "learned"
        ``"learned"``: ``q = x W_Q + b_Q``, ``k = x W_K + b_K`` (the Linformer
        of Wang et al.). ``"shared"``: ``q = k = `` the head slice of the input
        (no ``W_Q``, ``W_K``), as in the other attention layers; supported
        because it only changes the input projections.

    Raises
    ------
    TypeError
        If a size is not an integer.
    ValueError
        If a size is < 1, ``d_model`` is not divisible by ``n_heads``, or
        ``qk`` is unknown.

    Notes
    -----
    Parameters: ``"w_q", "b_q", "w_k", "b_k"`` (learned form only),
    ``"w_v", "b_v", "w_o", "b_o"`` ((D, D), (D,)), and the sequence
    projections ``"e_proj"`` (keys) and ``"f_proj"`` (values), each
    (k, max_len).

    Sharing: one ``E`` and one ``F`` per layer, shared by all heads (the
    paper's "headwise sharing"); ``E`` and ``F`` are distinct (no key-value
    sharing) and not shared across layers.

    Initialisation: ``W_Q, W_K, W_V, W_O`` Xavier-uniform, zero biases (as
    :class:`SoftmaxAttention`, drawn first and in the same order, so a seed
    gives both layers the same ``W``'s); then ``E``, then ``F``, each
    Xavier-uniform with gain ``1/sqrt(2)``, ``U(-a, a)`` with
    ``a = sqrt(3 / (k + max_len))`` (variance ``1 / (k + max_len)``), as the
    authors' fairseq reference initialises its ``compress_k``/``compress_v``
    (k, max_len) weights. A projected key is then a sum of ``L`` rows with
    variance ``L / (k + max_len) <= 1`` times theirs, independent of ``k``.

    Padding: padded rows of ``K`` and ``V`` (``x W + b`` at positions with
    mask False) are multiplied by 0 before the projection, so their contents
    never reach a real or padded query's output, and the columns of ``E[:, :L]``
    at padded positions multiply zeros. For right padding (real tokens first,
    as in this package's batches) appending pad positions therefore leaves
    every output exactly unchanged: the length dependence of Linformer is only
    through the positions of the real tokens, whose columns ``E[:, j]`` are
    used, as in the position embedding. Unlike softmax attention the
    projection mixes positions: a real token's output depends on where the
    other real tokens sit (column ``j`` of ``E``), and the projected keys are
    sums over the real tokens, not averages, so their scale grows with the
    number of real tokens. The softmax runs over all k projected keys (there
    is no padding among them). Every query, padded or not, gets an output.

    The projection is applied to ``K = x W_K + b_K`` (the paper's
    ``E_i K W_i^K``); fairseq applies it to the layer input before ``W_K``,
    which differs only in the bias term (``E 1 b_K`` vs ``b_K``).

    Cost O(H B L k d_k) time and O(H B L k) memory per layer.

    References
    ----------
    Wang, Li, Khabsa, Fang & Ma (2020), "Linformer: Self-Attention with Linear
    Complexity", arXiv:2006.04768, Sec. 4 (eq. (7), projections E_i, F_i;
    "headwise sharing"); fairseq ``examples/linformer`` (initialisation).
    Baseline of paper 000's NLP tables; softmax attention of paper 000,
    App. C, eq. (C.1).
    """

    def __init__(self, d_model: int, n_heads: int, k: int, max_len: int, qk: str = "learned"):
        super().__init__(d_model, n_heads, qk)
        self.k = check_int("k", k, minimum=1)
        self.max_len = check_int("max_len", max_len, minimum=1)

    def init_params(self, rng: np.random.Generator, dtype=np.float64) -> dict:
        """Draw the projections, then ``E``, then ``F``, on the host.

        Parameters
        ----------
        rng : numpy.random.Generator
            Draws the ``W``'s in :class:`SoftmaxAttention`'s order, then
            ``e_proj``, then ``f_proj``.
        dtype : numpy dtype, default float64

        Returns
        -------
        dict
            The projections (class Notes), ``"e_proj"`` and ``"f_proj"``
            (k, max_len), C-contiguous.
        """
        p = self._init_proj(rng, dtype)
        gain = 1.0 / math.sqrt(2.0)
        for name in ("e_proj", "f_proj"):
            p[name] = np.ascontiguousarray(gain * _xavier_uniform(rng, self.k, self.max_len, np.float64),
                                           dtype=dtype)
        return p

    def forward(self, params: dict, x, mask):
        """Evaluate Linformer attention.

        Parameters
        ----------
        params : dict
            See class Notes; ``"e_proj"``, ``"f_proj"`` of shape (k, max_len).
        x : float array, shape (B, L, D)
            ``L <= max_len``.
        mask : bool array, shape (B, L)
            True on real tokens (padded keys and values are zeroed before the
            projection); every row needs one.

        Returns
        -------
        y : float array, shape (B, L, D)
        cache : tuple

        Raises
        ------
        ValueError, TypeError
            On wrong shapes, a bad mask, ``L > max_len``, or an ``e_proj`` or
            ``f_proj`` whose shape is not (k, max_len).
        """
        self._check_inputs(x, mask)
        length = x.shape[1]
        if length > self.max_len:
            raise ValueError(f"x has sequence length L={length}, above max_len={self.max_len} of "
                             "LinformerAttention (E and F have max_len columns)")
        for name in ("e_proj", "f_proj"):
            if tuple(params[name].shape) != (self.k, self.max_len):
                raise ValueError(f"params[{name!r}] has shape {tuple(params[name].shape)}; expected "
                                 f"(k, max_len) = ({self.k}, {self.max_len})")
        xp = namespace(x)
        q, k, v = self.project(params, x)
        keym = mask.astype(x.dtype)[None, :, :, None]                # (1, B, L, 1)
        km = k * keym                                                 # (H, B, L, d_k)
        vm = v * keym
        e = params["e_proj"][:, :length]                              # (k, L)
        f = params["f_proj"][:, :length]
        kp = xp.matmul(e, km)                                         # (H, B, k, d_k)
        vp = xp.matmul(f, vm)
        scale = 1.0 / math.sqrt(self.d_k)
        s = xp.matmul(q, kp.transpose(0, 1, 3, 2))                    # (H, B, L, k)
        s *= scale
        p = _softmax_last(xp, s)
        a = xp.matmul(p, vp)                                          # (H, B, L, d_k)
        am = _merge_heads(a)
        y = _linear_fwd(am, params["w_o"], params["b_o"])
        return y, (x, keym, q, km, vm, kp, vp, e, f, p, am, scale, params)

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
            Same keys and shapes as the parameters; ``"e_proj"`` and
            ``"f_proj"`` (k, max_len) are zero in the columns ``>= L``.
        """
        x, keym, q, km, vm, kp, vp, e, f, p, am, scale, params = cache
        xp = namespace(dy)
        length = x.shape[1]
        grads = {}
        dam, grads["w_o"], grads["b_o"] = _linear_bwd(dy, am, params["w_o"])
        da = _split_heads(dam, self.n_heads)                          # (H, B, L, d_k)
        dvp = xp.matmul(p.transpose(0, 1, 3, 2), da)                  # (H, B, k, d_k)
        dp = xp.matmul(da, vp.transpose(0, 1, 3, 2))                  # (H, B, L, k)
        ds = _softmax_last_backward(p, dp)
        ds *= scale
        dq = xp.matmul(ds, kp)                                        # (H, B, L, d_k)
        dkp = xp.matmul(ds.transpose(0, 1, 3, 2), q)                  # (H, B, k, d_k)
        for name, dproj, rows in (("e_proj", dkp, km), ("f_proj", dvp, vm)):
            g = xp.zeros_like(params[name])
            g[:, :length] = xp.tensordot(dproj, rows, axes=([0, 1, 3], [0, 1, 3]))   # (k, L)
            grads[name] = g
        dk = xp.matmul(e.T, dkp)                                      # (H, B, L, d_k)
        dk *= keym
        dv = xp.matmul(f.T, dvp)
        dv *= keym
        if self.qk == "shared":
            dq += dk
            dk = None
        dx = self._project_in_backward(params, x, dq, dk, dv, grads)
        return dx, grads
