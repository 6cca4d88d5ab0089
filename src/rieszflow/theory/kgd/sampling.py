"""Random-feature frequency samplers of paper 003 (Gaussian, GS-ORF, random Hadamard) and eq. (1).

The feature map itself lives in :mod:`rieszflow.engine.features`: the paper's positive map (1),
``phi(x) = m^{-1/2} exp(r omega.x - s |x|^2 / 2)`` with ``s = d^{-1/2}``, ``r = d^{-1/4}``, is
:class:`~rieszflow.engine.features.FavorFeatureMap` at temperature ``tau = sqrt(d)``
(``x~ = x d^{-1/4}``), and :func:`positive_features` only calls it. The Gaussian and the
orthogonal laws are the feature maps' own initial laws (:meth:`~rieszflow.FeatureMap.init_omega` with
``omega_scale`` and ``init="orthogonal"``, ``row_norms``); this module adds the random Hadamard
law and the "same draws" pairing of Gaussian and GS-ORF frequencies used by the attention
experiment (Table 5).

Conventions: frequencies are rows, ``omega`` of shape ``(m, d)``; for ``m > d`` the structured
laws stack ``ceil(m / d)`` independent ``d x d`` blocks and truncate the last one (spec section
2.2; the paper states only ``m <= d``).

References
----------
Z. Peng & Z. Yi, "Kernel Geometry Divergence: A Spectral Theory of Random-Feature Attention
Kernels", doi:10.20944/preprints202606.0665.v1, eq. (1) and sections 5.2-5.3 (eq. 4, 5);
Choromanski et al. (2020), "Rethinking attention with Performers", arXiv:2009.14794, sec. 2.4;
Yu et al. (2016), "Orthogonal random features", arXiv:1610.09072.
"""
from __future__ import annotations

import math

import numpy as np

from rieszflow.engine._checks import check_choice, check_int
from rieszflow.engine.features import make_feature_map

__all__ = ["ORF_NORMS", "gaussian_omega", "gs_orf_omega", "paired_gaussian_gs_orf", "rhf_omega",
           "positive_features"]

#: Row-norm conventions of GS-ORF: the paper's unit rows (eq. 4) or the Performer's chi_d norms.
ORF_NORMS = ("unit", "chi")


def _rng(rng):
    if isinstance(rng, np.random.Generator):
        return rng
    if rng is None or isinstance(rng, (int, np.integer)):
        return np.random.default_rng(rng)
    raise TypeError(f"rng must be a numpy.random.Generator, an int seed or None; got {type(rng).__name__}")


def _check_md(m, d):
    m = check_int("m", m, minimum=1)
    d = check_int("d", d, minimum=3)
    return m, d


def gaussian_omega(m, d, rng=None):
    """I.i.d. Gaussian frequencies ``omega_i ~ N(0, I_d)`` (independent random features).

    Parameters
    ----------
    m : int
        Number of features, ``>= 1``.
    d : int
        Dimension, ``>= 3``.
    rng : numpy.random.Generator, int or None
        Generator or seed.

    Returns
    -------
    numpy.ndarray, shape (m, d), float64

    Raises
    ------
    ValueError
        If ``m < 1`` or ``d < 3``.
    TypeError
        If ``m`` or ``d`` is not an integer, or ``rng`` is not a Generator, int or None.

    References
    ----------
    Peng & Yi, "Kernel Geometry Divergence", eq. (1); the expected kernel of map (1) under this
    law is the softmax kernel ``exp(x.y / sqrt d)`` (spec section 2.1).
    """
    m, d = _check_md(m, d)
    fmap = make_feature_map("favor", d, m, omega_scale=math.sqrt(d))
    return fmap.init_omega(_rng(rng))


def gs_orf_omega(m, d, rng=None, orf_norm="unit"):
    """GS-ORF frequencies: independent Haar-orthogonal ``d x d`` blocks, truncated to ``m`` rows.

    Parameters
    ----------
    m : int
        Number of features, ``>= 1`` (``m > d`` stacks independent blocks).
    d : int
        Dimension, ``>= 3``.
    rng : numpy.random.Generator, int or None
        Generator or seed.
    orf_norm : {"unit", "chi"}, default "unit"
        ``"unit"``: rows of norm 1 (the paper's convention, expected kernel ``K_GS`` of eq. 4);
        ``"chi"``: each row rescaled to an independent ``chi_d`` norm (Performer; each row is
        then marginally N(0, I_d) and the expected kernel is the softmax kernel).

    Returns
    -------
    numpy.ndarray, shape (m, d), float64

    Raises
    ------
    ValueError
        If ``m < 1``, ``d < 3`` or ``orf_norm`` is not in :data:`ORF_NORMS`.

    References
    ----------
    Peng & Yi, "Kernel Geometry Divergence", section 5.2, eq. (4); Yu et al. (2016).
    """
    m, d = _check_md(m, d)
    orf_norm = check_choice("orf_norm", orf_norm, ORF_NORMS)
    if orf_norm == "unit":
        fmap = make_feature_map("favor", d, m, init="orthogonal", row_norms="fixed")
    else:
        fmap = make_feature_map("favor", d, m, init="orthogonal", row_norms="chi",
                                omega_scale=math.sqrt(d))
    return fmap.init_omega(_rng(rng))


def paired_gaussian_gs_orf(m, d, rng=None):
    """Gaussian frequencies and their blockwise Gram-Schmidt orthonormalisation ("same draws").

    Block ``b`` of the Gaussian frequencies is ``G_b^T`` for a standard normal ``d x d`` matrix
    ``G_b``; the GS-ORF block is ``Q_b^T`` with ``G_b = Q_b R_b`` and ``diag R_b > 0`` (Gram-Schmidt
    of the Gaussian rows, unit norms). Both are truncated to ``m`` rows.

    Parameters
    ----------
    m : int
        Number of features, ``>= 1``.
    d : int
        Dimension, ``>= 3``.
    rng : numpy.random.Generator, int or None
        Generator or seed.

    Returns
    -------
    gauss : numpy.ndarray, shape (m, d), float64
        I.i.d. N(0, I_d) rows.
    orf : numpy.ndarray, shape (m, d), float64
        Unit-norm orthogonal rows (Haar distributed within each block).

    Raises
    ------
    ValueError
        If ``m < 1`` or ``d < 3``.
    TypeError
        If ``m`` or ``d`` is not an integer, or ``rng`` is not a Generator, int or None.

    References
    ----------
    Peng & Yi, "Kernel Geometry Divergence", Table 5 ("same random feature realisation",
    unspecified in the paper; spec section 7).
    """
    m, d = _check_md(m, d)
    rng = _rng(rng)
    g_blocks, o_blocks = [], []
    for _ in range(-(-m // d)):
        G = rng.standard_normal((d, d))
        Q, R = np.linalg.qr(G)
        g_blocks.append(G.T)
        o_blocks.append((Q * np.where(np.diag(R) < 0, -1.0, 1.0)).T)
    return np.concatenate(g_blocks)[:m], np.concatenate(o_blocks)[:m]


def rhf_omega(m, d, rng=None, haar=False):
    """Random Hadamard frequencies: rows of ``H_d D / sqrt(d)``, a fresh sign diagonal per block.

    Parameters
    ----------
    m : int
        Number of features, ``>= 1``.
    d : int
        Dimension, a power of 2, ``>= 4`` (Sylvester construction).
    rng : numpy.random.Generator, int or None
        Generator or seed.
    haar : bool, default False
        Apply one Haar rotation ``omega -> Q^T omega`` to all rows (paper eq. 5); the
        Haar-averaged kernel is then exactly ``K_GS`` (spec section 2.3). Without it the kernel
        is not zonal.

    Returns
    -------
    numpy.ndarray, shape (m, d), float64
        Rows of unit norm (entries ``+-1/sqrt(d)`` without the rotation).

    Raises
    ------
    ValueError
        If ``d`` is not a power of 2, ``d < 3`` or ``m < 1``.

    References
    ----------
    Peng & Yi, "Kernel Geometry Divergence", section 5.3, eq. (5).
    """
    from scipy.linalg import hadamard

    m, d = _check_md(m, d)
    if d & (d - 1):
        raise ValueError(f"d must be a power of 2 for Sylvester Hadamard blocks, got d={d}")
    rng = _rng(rng)
    H = hadamard(d).astype(float) / np.sqrt(d)
    W = np.concatenate([H * rng.choice([-1.0, 1.0], size=d) for _ in range(-(-m // d))])[:m]
    if haar:
        W = W @ gs_orf_omega(d, d, rng)
    return W


def positive_features(X, W):
    """Positive random features of paper eq. (1): ``m^{-1/2} exp(r W x - s |x|^2 / 2)``.

    Evaluated by :class:`rieszflow.engine.features.FavorFeatureMap` with ``tau = sqrt(d)``
    (``s = d^{-1/2}``, ``r = d^{-1/4}``), so ``phi(x).phi(y)`` estimates ``exp(x.y / sqrt d)``
    for Gaussian ``W`` and ``K_GS`` for unit-norm GS-ORF ``W``.

    Parameters
    ----------
    X : array_like, shape (n, d), float
        Inputs.
    W : array_like, shape (m, d), float
        Frequencies (rows).

    Returns
    -------
    numpy.ndarray, shape (n, m), float64

    Raises
    ------
    ValueError
        If ``X`` and ``W`` are not 2-D with the same ``d``, or hold NaN/inf.

    References
    ----------
    Peng & Yi, "Kernel Geometry Divergence", eq. (1), section 3.1.
    """
    X, W = np.asarray(X, float), np.asarray(W, float)
    if X.ndim != 2 or W.ndim != 2 or X.shape[1] != W.shape[1]:
        raise ValueError(f"X (n, d) and W (m, d) must be 2-D and share d; got X.shape={X.shape}, "
                         f"W.shape={W.shape}")
    m, d = W.shape
    return make_feature_map("favor", d, m, tau=math.sqrt(d))(X, W)
