"""Sequence-level alignment objectives of Phase A (paper 000, App. C.1, eq. C.4) with gradients.

Both objectives act on pooled representations P (one row per sequence) and
return a value to **maximise** and its gradient with respect to P; Phase A
minimises the alignment energy ``-value`` plus the Riesz repulsion.
"""
from __future__ import annotations

from rieszflow.engine.backend import namespace

__all__ = ["onehot_alignment", "centered_kta", "ALIGNMENTS"]


def _check(P, y):
    xp = namespace(P)
    if P.ndim != 2:
        raise ValueError(f"pooled representations must have shape (n, d); got {P.shape}")
    if y.shape != (P.shape[0],):
        raise ValueError(f"labels must have shape ({P.shape[0]},); got {y.shape}")
    if P.shape[0] < 2:
        raise ValueError(f"alignment needs at least 2 sequences; got n={P.shape[0]}")
    if not bool(xp.all(xp.isfinite(P))):
        raise ValueError("pooled representations contain NaN or inf")
    return xp


def onehot_alignment(P, y, n_classes: int = 2):
    """Within-class alignment V_seq of eq. (C.4) with the one-hot label kernel.

    Note that (C.4) sums only same-class pairs: unlike eq. (2.2) with labels
    y_i y_j = +-1, it has no penalty for similarity across classes, so it also
    grows when all pooled vectors align in one direction. It rewards
    within-class similarity, not class separation; :func:`centered_kta` does
    both.

    V = 1/(n(n-1)) * sum_{i<j} [y_i = y_j] <P_i, P_j>,
    computed in O(n d) as sum_c (|S_c|^2 - sum_{i in c} |P_i|^2) / 2 with
    S_c = sum_{i in c} P_i.

    Parameters
    ----------
    P : array of float, shape (n, d)
        Pooled sequence representations.
    y : array of int, shape (n,)
        Labels in {0, ..., n_classes - 1}.
    n_classes : int, default 2

    Returns
    -------
    value : float
        V (dimensionless; the paper's normalisation 1/(n(n-1)) over pairs i<j).
    grad : array, shape (n, d)
        dV/dP, row i equal to (S_{y_i} - P_i) / (n(n-1)).

    Raises
    ------
    ValueError
        On bad shapes, n < 2, non-finite P, or labels out of range.

    References
    ----------
    Paper 000, App. C.1, eq. (C.4).
    """
    xp = _check(P, y)
    n = P.shape[0]
    onehot = xp.zeros((n, n_classes), dtype=P.dtype)
    if int(y.min()) < 0 or int(y.max()) >= n_classes:
        raise ValueError(f"labels must lie in [0, {n_classes}); got range [{int(y.min())}, {int(y.max())}]")
    onehot[xp.arange(n), y] = 1
    S = onehot.T @ P                      # (C, d) class sums
    norm = n * (n - 1)
    # energies accumulate in float64 even when P is float32
    value = 0.5 * (float(xp.sum(S * S, dtype=xp.float64)) - float(xp.sum(P * P, dtype=xp.float64))) / norm
    grad = (onehot @ S - P) / norm
    return value, grad


def centered_kta(P, y, n_classes: int = 2, eps: float = 1e-12):
    """Centred kernel-target alignment of the linear kernel K = P P^T.

    A = <K_c, Y_c>_F / (||K_c||_F ||Y_c||_F), with K_c = H K H, Y_c = H Y H,
    H = I - 11^T / n and Y_ij = [y_i = y_j] (one-hot label kernel). A lies in
    [-1, 1].

    Parameters
    ----------
    P : array of float, shape (n, d)
    y : array of int, shape (n,)
    n_classes : int, default 2
    eps : float
        Guard added to the norms (documented; only matters for constant P).

    Returns
    -------
    value : float
        A.
    grad : array, shape (n, d)
        dA/dP = 2 G P with G = Y_c / (|K_c| |Y_c|) - A K_c / |K_c|^2.

    References
    ----------
    Cristianini, Shawe-Taylor, Elisseeff, Kandola (2002); Cortes, Mohri,
    Rostamizadeh (2012), centred alignment. Paper 000, App. D ("Learning the
    kernel via alignment/KTA").
    """
    xp = _check(P, y)
    Pc = P - P.mean(axis=0, keepdims=True)      # H P, so K_c = (HP)(HP)^T
    Kc = Pc @ Pc.T
    Y = (y[:, None] == y[None, :]).astype(P.dtype)
    Yc = Y - Y.mean(axis=0, keepdims=True)
    Yc = Yc - Yc.mean(axis=1, keepdims=True)
    nk = float(xp.sqrt(xp.sum(Kc * Kc, dtype=xp.float64))) + eps
    ny = float(xp.sqrt(xp.sum(Yc * Yc, dtype=xp.float64))) + eps
    A = float(xp.sum(Kc * Yc, dtype=xp.float64)) / (nk * ny)
    G = Yc / (nk * ny) - A * Kc / (nk * nk)
    # dA/dP = 2 H G H P; G is already doubly centred, so H G H = G.
    grad = 2.0 * (G @ P)
    return A, grad


ALIGNMENTS = {"onehot": onehot_alignment, "kta": centered_kta}
