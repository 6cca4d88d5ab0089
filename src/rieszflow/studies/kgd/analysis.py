"""Table 2 and the asymptotic table of paper 003 recomputed (docs/specs/paper003_kgd.md sections 6, 3)."""
from __future__ import annotations

import numpy as np

from rieszflow.theory.kgd import spectral as sp
from rieszflow.learning.kernel_geometry import LearnedKernels

__all__ = ["PAPER_TABLE2", "table2", "asymptotic_table", "kgd_to_initial"]

#: Paper's Table 2 (Ind-GS, Ind-RHF, RHF-GS), 4 decimals.
PAPER_TABLE2 = {8: (0.0815, 0.0571, 0.0245), 16: (0.0470, 0.0329, 0.0141),
                32: (0.0257, 0.0180, 0.0077), 64: (0.0137, 0.0096, 0.0041),
                128: (0.0071, 0.0050, 0.0021)}


def table2(w=0.7):
    """Recompute Table 2 with the reverse-engineered RHF mixture weight ``w``.

    Parameters
    ----------
    w : float, default 0.7
        Mixture weight of K_GS in the RHF surrogate (not stated in the paper).

    Returns
    -------
    rows : list of tuple
        ``(d, ind_gs, ind_rhf, rhf_gs, paper_triple)``.
    fit : tuple
        ``(slope, prefactor, R^2)`` of the log-log fit of the Ind-GS column.
    """
    rows = []
    for d, paper in PAPER_TABLE2.items():
        ind = lambda t: sp.kernel_ind_paper(t, d)
        gs = lambda t: sp.kernel_gs(t, d)
        rhf = lambda t: sp.kernel_rhf_table2(t, d, w)
        rows.append((d, sp.kgd_listing(d, ind, gs), sp.kgd_listing(d, ind, rhf),
                     sp.kgd_listing(d, rhf, gs), paper))
    return rows, sp.fit_loglog([r[0] for r in rows], [r[1] for r in rows])


def asymptotic_table(dmax=65536):
    """KGD (variant P) for d = 8, 16, ..., dmax with ``d KGD e^{1/sqrt d}`` and the local slope.

    Parameters
    ----------
    dmax : int, default 65536

    Returns
    -------
    list of tuple
        ``(d, kgd, d*kgd*e^{1/sqrt d}, sqrt(d)*kgd, local slope to the previous d)``.
    """
    out, prev = [], None
    d = 8
    while d <= dmax:
        k = sp.kgd_closed_form(d, "P", L=10)
        slope = np.nan if prev is None else np.log(k / prev[1]) / np.log(d / prev[0])
        out.append((d, k, d * k * np.exp(d ** -0.5), np.sqrt(d) * k, slope))
        prev = (d, k)
        d *= 2
    return out


_LEARNED = {}


def kgd_to_initial(path, time, layer, head, **options):
    """Did Phase A move the attention kernel, and by how much against random-feature noise?

    Shortcut for :meth:`rieszflow.learning.kernel_geometry.LearnedKernels.kgd_to_initial` (the
    :class:`~rieszflow.learning.kernel_geometry.LearnedKernels` of ``path`` is built once per
    ``(path, options)`` and kept).

    Parameters
    ----------
    path : str or os.PathLike
        A main-job HDF5 file.
    time : int
        A recorded Phase A step (0: the initial particles).
    layer, head : int
    **options
        ``n_rot``, ``n_nodes``, ``n_tokens``, ``n_noise``, ``seed`` of ``LearnedKernels``.

    Returns
    -------
    dict of str to float
        Zonal KGD and whole distance to the initial kernel on the sphere, the Hilbert-Schmidt
        distance on held-out tokens (with standard errors), the random-feature noise at the same
        m and the ratios distance / noise.

    Raises
    ------
    ValueError
        If ``time`` was not recorded or ``layer``/``head`` is out of range.

    References
    ----------
    Peng & Yi, "Kernel Geometry Divergence", doi:10.20944/preprints202606.0665.v1, Def. 4.1.
    """
    from pathlib import Path

    key = (str(Path(path).resolve()), tuple(sorted(options.items())))
    if key not in _LEARNED:
        _LEARNED[key] = LearnedKernels(path, **options)
    return _LEARNED[key].kgd_to_initial(time, layer, head)
