"""The softmax cross-entropy classification loss, with its gradient with respect to the logits.

References
----------
paper 000, App. F.2 ("Experimental setup").
"""
from __future__ import annotations

import numpy as np

from rieszflow.engine._checks import is_host
from rieszflow.engine.backend import namespace

__all__ = [
    "softmax_cross_entropy",
]


def softmax_cross_entropy(logits, labels):
    """Mean softmax cross-entropy over the batch, its gradient and the class probabilities.

    ``loss = -(1/B) sum_b log softmax(logits_b)[y_b]``, computed with the row
    maximum subtracted (log-sum-exp), accumulated in float64.

    Parameters
    ----------
    logits : float array, shape (B, C)
    labels : int array, shape (B,)
        Classes in ``[0, C)``.

    Returns
    -------
    loss : float64 scalar (NumPy) or 0-d float64 array (CuPy; no host sync)
    dlogits : float array, shape (B, C), dtype of ``logits``
        ``(softmax(logits) - onehot(labels)) / B``.
    probs : float array, shape (B, C)

    Raises
    ------
    TypeError
        If ``labels`` is not an integer array.
    ValueError
        On shape mismatch, labels out of range, or non-finite logits.

    References
    ----------
    paper 000, App. F.2 (Phase B: "trained end-to-end with cross-entropy loss").
    """
    xp = namespace(logits, labels)
    if logits.ndim != 2:
        raise ValueError(f"logits has shape {tuple(logits.shape)}; expected (B, C)")
    b, c = logits.shape
    if not hasattr(labels, "dtype") or not np.issubdtype(np.dtype(labels.dtype), np.integer):
        raise TypeError(f"labels must be an integer array; got {getattr(labels, 'dtype', type(labels))}")
    if tuple(labels.shape) != (b,):
        raise ValueError(f"labels has shape {tuple(labels.shape)}; expected ({b},)")
    if b == 0:
        raise ValueError("logits has an empty batch (B=0)")
    if is_host(labels):                        # contents on the host only (engine._checks policy)
        lo, hi = int(labels.min()), int(labels.max())
        if lo < 0 or hi >= c:
            raise ValueError(f"labels contains {lo if lo < 0 else hi}, outside [0, {c})")
    if is_host(logits) and not bool(xp.isfinite(logits).all()):
        raise ValueError("logits contains NaN or inf")
    shifted = logits - logits.max(axis=1, keepdims=True)
    e = xp.exp(shifted)
    sumexp = e.sum(axis=1, keepdims=True)
    probs = e / sumexp
    rows = xp.arange(b)
    logp = shifted[rows, labels].astype(xp.float64) - xp.log(sumexp[:, 0].astype(xp.float64))
    loss = -logp.mean()
    dlogits = probs.copy()
    dlogits[rows, labels] -= 1.0
    dlogits /= b
    return loss, dlogits, probs
