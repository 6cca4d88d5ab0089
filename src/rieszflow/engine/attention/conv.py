"""Depthwise convolution over the sequence (1d) or a pixel grid (2d), the DWC branch of linear attention.

References
----------
paper 001 (LUNA), section 4 ("DWC"); Han et al. (2023), "FLatten Transformer: vision
transformer using focused linear attention", arXiv:2308.00442.
"""
from __future__ import annotations

from rieszflow.engine.backend import namespace

__all__ = [
    "depthwise_conv",
    "depthwise_conv_backward",
]


# --------------------------------------------------------------------------- depthwise convolution

def depthwise_conv(v, w, b, *, grid=None, causal: bool = False):
    """Depthwise convolution of the values along the sequence (1-D) or a pixel grid (2-D).

    1-D (``w`` of shape (C, k)): ``out[t, c] = b_c + sum_j w[c, j] v[t + j - p, c]`` with
    "same" padding ``p = (k - 1) // 2`` (zeros outside), or ``p = k - 1`` (left padding
    only) when ``causal``. 2-D (``w`` of shape (C, k, k), ``grid = (h, w)`` with
    ``h * w = n``, tokens in row-major order): the same over both grid axes with "same"
    padding. One kernel per channel; no mixing across channels.

    Parameters
    ----------
    v : float array, shape (..., n, C)
    w : float array, shape (C, k) or (C, k, k)
    b : float array, shape (C,)
    grid : tuple of int or None
        ``(h, w)`` for a 2-D kernel; None for 1-D.
    causal : bool, default False
        Left padding only (1-D only): position t sees t - k + 1 .. t.

    Returns
    -------
    out : float array, shape (..., n, C)
    cache : tuple

    Raises
    ------
    ValueError
        On shapes that do not fit, a 2-D kernel without ``grid``, or ``causal`` with 2-D.

    References
    ----------
    paper 001 (section 5.4 mentions "DWC", undefined); Meng et al. (2025), PolaFormer,
    and Han et al. (2023), FLatten Transformer, official code (``dwc`` on the values,
    added to the attention output).
    """
    xp = namespace(v, w)
    n, C = v.shape[-2], v.shape[-1]
    if w.shape[0] != C or b.shape != (C,):
        raise ValueError(f"w {tuple(w.shape)} and b {tuple(b.shape)} do not fit {C} channels")
    if w.ndim == 2:
        if grid is not None:
            raise ValueError(f"grid={grid!r} is for 2-D kernels; w has shape {tuple(w.shape)}")
        k = w.shape[1]
        p = k - 1 if causal else (k - 1) // 2
        out = xp.zeros_like(v) + b
        for j in range(k):
            s = j - p                                        # out[t] += w[:, j] * v[t + s]
            lo, hi = max(0, -s), min(n, n - s)
            if lo < hi:
                out[..., lo:hi, :] += w[:, j] * v[..., lo + s:hi + s, :]
        return out, (v, w, grid, causal)
    if w.ndim != 3 or grid is None:
        raise ValueError(f"w has shape {tuple(w.shape)}: a 2-D kernel (C, k, k) needs grid=(h, w)")
    if causal:
        raise ValueError("causal=True applies to 1-D kernels only")
    gh, gw = grid
    if gh * gw != n:
        raise ValueError(f"grid={grid!r} has {gh * gw} cells; the sequence has n={n}")
    k = w.shape[1]
    p = (k - 1) // 2
    vg = v.reshape(v.shape[:-2] + (gh, gw, C))
    out = xp.zeros_like(vg) + b
    for i in range(k):
        si = i - p
        ilo, ihi = max(0, -si), min(gh, gh - si)
        for j in range(k):
            sj = j - p
            jlo, jhi = max(0, -sj), min(gw, gw - sj)
            if ilo < ihi and jlo < jhi:
                out[..., ilo:ihi, jlo:jhi, :] += w[:, i, j] * vg[..., ilo + si:ihi + si, jlo + sj:jhi + sj, :]
    return out.reshape(v.shape), (v, w, grid, causal)


def depthwise_conv_backward(dout, cache):
    """VJP of :func:`depthwise_conv`.

    Parameters
    ----------
    dout : float array, shape (..., n, C)
    cache : tuple from :func:`depthwise_conv`

    Returns
    -------
    dv : float array, shape (..., n, C)
    dw : float array, shape of ``w``
    db : float array, shape (C,)

    References
    ----------
    paper 001 spec, section 1.8.
    """
    v, w, grid, causal = cache
    xp = namespace(dout)
    n, C = v.shape[-2], v.shape[-1]
    db = dout.reshape(-1, C).sum(axis=0)
    dw = xp.zeros_like(w)
    dv = xp.zeros_like(v)
    if w.ndim == 2:
        k = w.shape[1]
        p = k - 1 if causal else (k - 1) // 2
        for j in range(k):
            s = j - p
            lo, hi = max(0, -s), min(n, n - s)
            if lo < hi:
                dw[:, j] = (dout[..., lo:hi, :] * v[..., lo + s:hi + s, :]).reshape(-1, C).sum(axis=0)
                dv[..., lo + s:hi + s, :] += w[:, j] * dout[..., lo:hi, :]
        return dv, dw, db
    gh, gw = grid
    k = w.shape[1]
    p = (k - 1) // 2
    vg = v.reshape(v.shape[:-2] + (gh, gw, C))
    dg = dout.reshape(vg.shape)
    dvg = dv.reshape(vg.shape)
    for i in range(k):
        si = i - p
        ilo, ihi = max(0, -si), min(gh, gh - si)
        for j in range(k):
            sj = j - p
            jlo, jhi = max(0, -sj), min(gw, gw - sj)
            if ilo < ihi and jlo < jhi:
                src = (Ellipsis, slice(ilo + si, ihi + si), slice(jlo + sj, jhi + sj), slice(None))
                dst = (Ellipsis, slice(ilo, ihi), slice(jlo, jhi), slice(None))
                dw[:, i, j] = (dg[dst] * vg[src]).reshape(-1, C).sum(axis=0)
                dvg[src] += w[:, i, j] * dg[dst]
    return dvg.reshape(v.shape), dw, db
