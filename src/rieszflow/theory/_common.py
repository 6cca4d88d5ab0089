"""Shared validators, norms and numerics of the paper-004 theory package (private)."""
from __future__ import annotations


import numpy as np

from rieszflow.engine import measures as _measures
from rieszflow.engine._checks import check_real
from rieszflow.engine.backend import namespace, to_numpy

__all__ = [
    "METRICS",
    "operator_norm",
]



METRICS = _measures.METRICS


# ----------------------------------------------------------------------------------------------
# validation helpers
# ----------------------------------------------------------------------------------------------
def _check_metric(metric: str) -> str:
    if metric not in METRICS:
        raise ValueError(f"metric={metric!r} is not supported; allowed: {', '.join(METRICS)}")
    return metric


def _as_matrix(name: str, a, ndim: int = 2):
    """Validate a finite float64 array of the given rank (kept in its own namespace)."""
    xp = namespace(a)
    arr = np.asarray(a, dtype=np.float64) if xp is np else a.astype(xp.float64, copy=False)
    if arr.ndim != ndim:
        raise ValueError(f"{name} must be a {ndim}-D array, got shape {tuple(arr.shape)}")
    if not bool(xp.all(xp.isfinite(arr))):
        raise ValueError(f"{name} contains NaN or inf; all entries must be finite")
    return arr


def _check_real(name: str, value, *, low: float | None = None, strict: bool = False) -> float:
    """Scalar check of the theory package: :func:`rieszflow.engine._checks.check_real` with a lower bound."""
    return check_real(name, value, low=low, low_open=strict)


def operator_norm(W, metric: str = "l1") -> float:
    """Operator norm of a matrix acting on column vectors.

    Parameters
    ----------
    W : array_like, shape (m, n), float64
    metric : {"l1", "l2", "linf"}
        ``"l1"``: ||W||_{1->1} = max column absolute sum; ``"l2"``: spectral norm;
        ``"linf"``: ||W||_{inf->inf} = max row absolute sum.

    Returns
    -------
    float
        The norm (the Lipschitz constant of x -> W x in that metric).

    Raises
    ------
    ValueError
        If ``W`` is not a finite 2-D array or ``metric`` is unknown.

    References
    ----------
    Paper 004, Prop. 21 (K_l = Lip(l)); spec section 1 (K_l = ||W||_{1->1} under l1).
    """
    W = to_numpy(_as_matrix("W", W))
    if metric == "l1":
        return float(np.abs(W).sum(axis=0).max())
    if metric == "l2":
        return float(np.linalg.norm(W, 2))
    if metric == "linf":
        return float(np.abs(W).sum(axis=1).max())
    raise ValueError(f"metric={metric!r} is not supported; allowed: l1, l2, linf")


def _logsumexp(xp, a, axis):
    m = xp.max(a, axis=axis, keepdims=True)
    m = xp.where(xp.isfinite(m), m, 0.0)
    return xp.squeeze(m, axis=axis) + xp.log(xp.sum(xp.exp(a - m), axis=axis))
