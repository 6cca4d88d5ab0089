"""Kernel-target alignment energy of the feature particles (paper 000, eq. (2.2), (B.4), (B.6)-(B.9), (4.1)).

General feature map
-------------------
With the feature matrix :math:`\\Phi_{ik} = \\phi_{\\omega_k}(x_i)`, shape ``(n, N)``,

.. math::

    \\mathcal{E}_N = -\\frac{1}{n(n-1)} \\sum_{i \\ne j} y_i y_j \\frac1N \\sum_{k=1}^N \\Phi_{ik}\\Phi_{jk}
    = -\\frac{1}{n(n-1)N} \\sum_k \\Big[(y^\\top\\Phi_{:k})^2 - \\sum_i y_i^2 \\Phi_{ik}^2\\Big],

evaluated in O(nN) with identity (A.2) of App. A.2. The gradient with respect to
:math:`\\Phi` lets a caller chain through any feature map's backward pass.

Random Fourier features
-----------------------
For :math:`\\phi_{\\omega,b}(x) = \\sqrt2\\cos(\\omega^\\top x + b)`:

* with given phases ``b`` the functions here evaluate the **exact** (B.6);
* with ``b=None`` they evaluate the **exact phase average**
  :math:`\\mathbb{E}_b[\\mathcal{E}_N] = \\frac1N\\sum_k V_{\\mathcal{D}}(\\omega_k)`, where

  .. math::

      V_{\\mathcal{D}}(\\omega) = -\\frac{1}{n(n-1)} \\sum_{i\\ne j} y_i y_j \\cos(\\omega^\\top(x_i-x_j))
      = -\\frac{1}{n(n-1)}\\Big[(y^\\top\\cos(X\\omega))^2 + (y^\\top\\sin(X\\omega))^2 - \\sum_i y_i^2\\Big]

  is the single-particle potential of eq. (4.1) averaged over the phase.

Corrections to Lemma 3 (paper 000, App. B and A.2)
--------------------------------------------------
* (B.7) as printed, :math:`\\mathcal{E}_N \\equiv -\\frac{2}{n^2}\\|y^\\top C\\|^2` "up to an
  additive constant independent of :math:`(\\Omega_N, b)`", is **not true with fixed
  phases**. Exactly,
  :math:`\\mathcal{E}_N = -\\frac{2}{n(n-1)N}\\big[\\|y^\\top C\\|^2 - \\sum_{i,k} y_i^2 C_{ik}^2\\big]`,
  and the dropped diagonal term
  :math:`\\sum_{i,k} y_i^2\\cos^2(\\omega_k^\\top x_i + b_k) = \\frac N2\\sum_i y_i^2 + \\frac12\\sum_{i,k} y_i^2\\cos(2\\omega_k^\\top x_i + 2b_k)`
  depends on :math:`\\omega` (and b); only its phase average is constant. The
  prefactor of (B.7) should also be :math:`-2/(n(n-1)N)`, not :math:`-2/n^2`.
  These functions keep the diagonal term (exact (B.6)).
* (B.8)/(B.9) are right up to the additive constant :math:`+\\sum_i y_i^2/(n(n-1))`
  (:math:`= 1/(n-1)` for labels :math:`\\pm1`), which is included here so that
  ``b=None`` returns :math:`\\mathbb{E}_b[\\mathcal{E}_N]` exactly. The last display
  of App. A.2 (prefactor :math:`-1/n^2`) disagrees with (B.8); (B.8) is correct.

All sums are accumulated in float64; gradients are returned in the dtype of
the differentiated argument.

Implementations of the RFF functions
------------------------------------
``method="numpy"`` is the reference (NumPy or CuPy): per block of particles the
(n, block) phase, sine and cosine arrays. ``method="fused"`` (NumPy arrays; the
default through ``"auto"``) computes the same formulas per block with one BLAS call
for the phases, one Numba pass per particle that evaluates sin and cos together and
reduces over the data, and one BLAS call for the gradient
(:mod:`~rieszflow.engine.energy._alignment_kernels`); it agrees with the reference to ~5e-15
relative in float64 and, with ``tile_dtype="float32"``, to 2e-7 to 4e-7
(``tests/test_alignment_fused.py``, ``docs/results/bench_alignment.md``).
"""
from __future__ import annotations

import dataclasses
import threading

from rieszflow.engine._checks import check_choice, check_int, check_points, check_vector, is_host
from rieszflow.engine.backend import namespace
from rieszflow.engine.energy.base import Energy
from rieszflow.engine.energy.riesz import RieszEnergy
from rieszflow.engine.threads import numba_threads

__all__ = [
    "RFFAlignmentEnergy",
    "alignment_energy",
    "alignment_energy_and_grad",
    "alignment_energy_grad",
    "alignment_potential",
    "alignment_potential_and_grad",
    "alignment_potential_grad",
    "hamiltonian",
    "hamiltonian_and_grad",
    "kernel_target_alignment",
    "onehot_alignment",
    "rff_alignment_energy",
    "rff_alignment_energy_and_grad",
    "rff_alignment_energy_grad",
    "rff_hamiltonian",
]

_CHUNK_ELEMENTS = 2 ** 21  # elements of one (n, chunk) phase block
_FUSED_TILE_ELEMENTS = 2 ** 19  # elements of one (chunk, n) tile buffer of the fused path (4 MiB in float64)

#: methods of the RFF functions: the NumPy/CuPy reference and the fused Numba path
METHODS = ("auto", "numpy", "fused")
#: precisions of the fused path's tile arithmetic
TILE_DTYPES = ("float64", "float32")
#: data points per float32 gradient GEMM whose partial sums are added in float64
F32_GRAD_ROWS = 4096


# --------------------------------------------------------------------------- general feature map

def _check_features(features, y):
    features = check_points("features", features, min_n=2)  # (n, N): rows are samples
    y = check_vector("y", y, n=features.shape[0])
    return features, y


def alignment_energy_and_grad(features, y):
    """Alignment energy (B.4) of a general feature matrix and its gradient.

    Parameters
    ----------
    features : array, shape (n, N)
        :math:`\\Phi_{ik} = \\phi_{\\omega_k}(x_i)` for ``n >= 2`` samples and ``N``
        particles.
    y : array, shape (n,)
        Targets (labels :math:`\\pm1` in the paper; any real values allowed).

    Returns
    -------
    energy : float64 scalar
        :math:`-\\frac{1}{n(n-1)N}\\sum_k[(y^\\top\\Phi_{:k})^2 - \\sum_i y_i^2\\Phi_{ik}^2]`
        (pairs :math:`i \\ne j`, normalised by n(n-1) and N).
    grad : array, shape (n, N), dtype of ``features``
        :math:`\\partial\\mathcal{E}_N/\\partial\\Phi_{ik} = -\\frac{2 y_i}{n(n-1)N}\\,(y^\\top\\Phi_{:k} - y_i\\Phi_{ik})`.

    Raises
    ------
    ValueError
        If ``features`` is not (n, N) with n >= 2 and finite entries, or ``y``
        is not a finite vector of length n.

    References
    ----------
    paper 000, eq. (2.2), (B.4) and identity (A.2) of App. A.2.
    """
    features, y = _check_features(features, y)
    xp = namespace(features, y)
    n, N = features.shape
    phi = xp.asarray(features, dtype=xp.float64)
    y = xp.asarray(y, dtype=xp.float64)
    z = y @ phi  # (N,) y^T Phi_k
    diag = (y * y) @ (phi * phi)  # (N,) sum_i y_i^2 Phi_ik^2
    c = -1.0 / (n * (n - 1.0) * N)
    energy = c * xp.sum(z * z - diag)
    grad = (2.0 * c) * y[:, None] * (z[None, :] - y[:, None] * phi)
    return energy, xp.asarray(grad, dtype=features.dtype)


def alignment_energy(features, y):
    """Alignment energy (B.4) of a feature matrix; see :func:`alignment_energy_and_grad`.

    Parameters
    ----------
    features : array, shape (n, N)
        :math:`\\Phi_{ik} = \\phi_{\\omega_k}(x_i)`, n >= 2 samples, N particles.
    y : array, shape (n,)
        Targets (labels :math:`\\pm1` in the paper; any real values allowed).

    Returns
    -------
    float64 scalar
        :math:`-\\frac{1}{n(n-1)N}\\sum_k[(y^\\top\\Phi_{:k})^2 - \\sum_i y_i^2\\Phi_{ik}^2]`.

    Raises
    ------
    ValueError
        If ``features`` is not (n, N) with n >= 2 and finite entries, or ``y``
        is not a finite vector of length n.

    References
    ----------
    paper 000, eq. (2.2) and (B.4).
    """
    return alignment_energy_and_grad(features, y)[0]


def alignment_energy_grad(features, y):
    """Gradient of (B.4) with respect to the feature matrix; see :func:`alignment_energy_and_grad`.

    Parameters
    ----------
    features : array, shape (n, N)
        :math:`\\Phi_{ik} = \\phi_{\\omega_k}(x_i)`, n >= 2 samples, N particles.
    y : array, shape (n,)
        Targets (labels :math:`\\pm1` in the paper; any real values allowed).

    Returns
    -------
    array, shape (n, N), dtype of ``features``

    Raises
    ------
    ValueError
        If ``features`` is not (n, N) with n >= 2 and finite entries, or ``y``
        is not a finite vector of length n.

    References
    ----------
    paper 000, eq. (B.4).
    """
    return alignment_energy_and_grad(features, y)[1]


# --------------------------------------------------------------------------- sequence-level objectives
# Both act on pooled representations P (one row per sequence) and return a value to maximise and
# its gradient with respect to P (Phase A of the main job minimises -value + lam * repulsion).

def _check_pooled(P, y):
    xp = namespace(P)
    if P.ndim != 2:
        raise ValueError(f"pooled representations must have shape (n, d); got {P.shape}")
    if y.shape != (P.shape[0],):
        raise ValueError(f"labels must have shape ({P.shape[0]},); got {y.shape}")
    if P.shape[0] < 2:
        raise ValueError(f"alignment needs at least 2 sequences; got n={P.shape[0]}")
    if is_host(P) and not bool(xp.all(xp.isfinite(P))):   # value checks on the host only (no sync)
        raise ValueError("pooled representations contain NaN or inf")
    return xp


def onehot_alignment(P, y, n_classes: int = 2):
    """Within-class alignment V_seq of eq. (C.4) with the one-hot label kernel.

    Note that (C.4) sums only same-class pairs: unlike eq. (2.2) with labels
    y_i y_j = +-1, it has no penalty for similarity across classes, so it also
    grows when all pooled vectors align in one direction. It rewards
    within-class similarity, not class separation; :func:`kernel_target_alignment` does
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
    value : float64 scalar (0-d array on CuPy)
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
    xp = _check_pooled(P, y)
    n = P.shape[0]
    onehot = xp.zeros((n, n_classes), dtype=P.dtype)
    if is_host(y) and (int(y.min()) < 0 or int(y.max()) >= n_classes):
        raise ValueError(f"labels must lie in [0, {n_classes}); got range [{int(y.min())}, {int(y.max())}]")
    onehot[xp.arange(n), y] = 1
    S = onehot.T @ P                      # (C, d) class sums
    norm = n * (n - 1)
    # energies accumulate in float64 even when P is float32
    # (float64 scalars, on the device for CuPy: no host sync)
    value = 0.5 * (xp.sum(S * S, dtype=xp.float64) - xp.sum(P * P, dtype=xp.float64)) / norm
    grad = (onehot @ S - P) / norm
    return value, grad


def kernel_target_alignment(P, y, n_classes: int = 2, eps: float = 1e-12):
    """Kernel-target alignment (centred, normalised) of the linear kernel K = P P^T.

    The quantity the field calls KTA; the unnormalised pair sum of paper 000, eq. (A.2), is
    ``-alignment_energy``.

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
    value : float64 scalar (0-d array on CuPy)
        A.
    grad : array, shape (n, d)
        dA/dP = 2 G P with G = Y_c / (|K_c| |Y_c|) - A K_c / |K_c|^2.

    References
    ----------
    Cristianini, Shawe-Taylor, Elisseeff, Kandola (2002); Cortes, Mohri,
    Rostamizadeh (2012), centred alignment. Paper 000, App. D ("Learning the
    kernel via alignment/KTA").
    """
    xp = _check_pooled(P, y)
    Pc = P - P.mean(axis=0, keepdims=True)      # H P, so K_c = (HP)(HP)^T
    Kc = Pc @ Pc.T
    Y = (y[:, None] == y[None, :]).astype(P.dtype)
    Yc = Y - Y.mean(axis=0, keepdims=True)
    Yc = Yc - Yc.mean(axis=1, keepdims=True)
    # float64 scalars kept on the device (no host sync); cast to P's dtype where they scale
    # arrays, as Python floats would be
    nk = xp.sqrt(xp.sum(Kc * Kc, dtype=xp.float64)) + eps
    ny = xp.sqrt(xp.sum(Yc * Yc, dtype=xp.float64)) + eps
    A = xp.sum(Kc * Yc, dtype=xp.float64) / (nk * ny)
    dt = P.dtype
    G = Yc / (nk * ny).astype(dt) - A.astype(dt) * Kc / (nk * nk).astype(dt)
    # dA/dP = 2 H G H P; G is already doubly centred, so H G H = G.
    grad = 2.0 * (G @ P)
    return A, grad


# --------------------------------------------------------------------------- random Fourier features

def _check_rff(omega, X, y, b):
    omega = check_points("omega", omega)
    X = check_points("X", X, d=omega.shape[1], min_n=2)
    y = check_vector("y", y, n=X.shape[0])
    if b is not None:
        b = check_vector("b", b, n=omega.shape[0])
    return omega, X, y, b


def _chunk(n, chunk_size, elements=_CHUNK_ELEMENTS):
    if chunk_size is None:
        return max(1, elements // n)
    return check_int("chunk_size", chunk_size, minimum=1)


def _check_method(method, tile_dtype, host):
    """Resolve ``method``/``tile_dtype`` of the RFF functions to ``"numpy"`` or ``"fused"``."""
    check_choice("method", method, METHODS)
    check_choice("tile_dtype", tile_dtype, TILE_DTYPES)
    if method == "fused" and not host:
        raise TypeError("method='fused' needs NumPy (CPU) arrays; use method='auto' or 'numpy' for CuPy arrays")
    if method == "auto":
        method = "fused" if host else "numpy"
    if tile_dtype != "float64" and method != "fused":
        raise ValueError(f"tile_dtype={tile_dtype!r} is a precision of method='fused' (NumPy arrays); "
                         f"method={method!r} computes in float64: use tile_dtype='float64'")
    return method


def _potential_and_grad_numpy(omega, X, y, b, block):
    """The reference: blocks of particles, NumPy/CuPy element-wise (the one home of the formulas)."""
    xp = namespace(omega, X, y, b)
    n = X.shape[0]
    M = omega.shape[0]
    X = xp.asarray(X, dtype=xp.float64)
    y = xp.asarray(y, dtype=xp.float64)
    c = -1.0 / (n * (n - 1.0))
    sum_y2 = xp.sum(y * y)
    V = xp.empty(M, dtype=xp.float64)
    grad = xp.empty(omega.shape, dtype=xp.float64)
    for a in range(0, M, block):
        w = xp.asarray(omega[a:a + block], dtype=xp.float64)
        U = X @ w.T  # (n, B) phases omega^T x_i
        if b is None:
            C, S = xp.cos(U), xp.sin(U)
            zc, zs = y @ C, y @ S  # (B,)
            V[a:a + block] = c * (zc * zc + zs * zs - sum_y2)
            dU = (2.0 * c) * y[:, None] * (zs[None, :] * C - zc[None, :] * S)  # dV/dU, (n, B)
        else:
            A = U + xp.asarray(b[a:a + block], dtype=xp.float64)[None, :]
            phi = (2.0 ** 0.5) * xp.cos(A)
            z = y @ phi
            V[a:a + block] = c * (z * z - (y * y) @ (phi * phi))
            dphi = (2.0 * c) * y[:, None] * (z[None, :] - y[:, None] * phi)
            dU = dphi * (-(2.0 ** 0.5)) * xp.sin(A)
        grad[a:a + block] = dU.T @ X
    return V, xp.asarray(grad, dtype=omega.dtype)


_TILES = threading.local()


def _tile_buffers(rows, n, dtype):
    """The fused path's two (rows, n) tile buffers, kept per thread between calls.

    A Langevin run calls the fused path with the same shapes every step; fresh buffers of
    several MiB would be fresh pages every step (page faults cost as much as the kernel).
    One pair per thread (the last shape and dtype used) is kept, so concurrent callers in
    different threads never share a buffer.
    """
    import numpy as np

    key = (rows, n, np.dtype(dtype).str)
    cached = getattr(_TILES, "buffers", None)
    if cached is None or cached[0] != key:
        cached = (key, np.empty((rows, n), dtype=dtype), np.empty((rows, n), dtype=dtype))
        _TILES.buffers = cached
    return cached[1], cached[2]


def _potential_and_grad_fused(omega, X, y, b, block, tile_dtype):
    """Fused path: per tile of particles, BLAS phases, one Numba pass, BLAS gradient.

    The Numba pass (:func:`~rieszflow.engine.energy._alignment_kernels.rff_tile`) evaluates the
    formulas of :func:`_potential_and_grad_numpy` per particle row; nothing of size
    (n, M) is allocated beyond the two (block, n) tile buffers.
    """
    import numba
    import numpy as np

    from rieszflow.engine.energy import _alignment_kernels as ak

    n, d = X.shape
    M = omega.shape[0]
    tdt = np.dtype(tile_dtype)
    Xt = np.ascontiguousarray(X, dtype=tdt)
    W = np.asarray(omega, dtype=tdt)
    y = np.ascontiguousarray(y, dtype=np.float64)
    c = -1.0 / (n * (n - 1.0))
    sum_y2 = float(y @ y)
    phased = b is not None
    bb = np.ascontiguousarray(b, dtype=tdt) if phased else np.zeros(M, dtype=tdt)
    # a Cauchy-Schwarz bound on |omega . x + b| picks the sin/cos evaluation
    bound = (float(np.sqrt(np.max(np.einsum("ij,ij->i", X, X, dtype=np.float64))))
             * float(np.sqrt(np.max(np.einsum("ij,ij->i", omega, omega, dtype=np.float64))))
             + (float(np.max(np.abs(b))) if phased else 0.0))
    if not bound <= ak.PHASE_LIMIT:
        mode = ak.MODE_LIBM
    elif tdt == np.float32 and not bound <= ak.PHASE_LIMIT_F32:
        mode = ak.MODE_F64
    else:
        mode = ak.MODE_NATIVE
    V = np.empty(M, dtype=np.float64)
    grad = np.empty((M, d), dtype=np.float64)
    rows = min(block, M)
    ut, ct = _tile_buffers(rows, n, tdt)
    # Numba threads by the thread policy (engine/threads.py; one thread: the serial build, whose
    # result is bitwise equal to the parallel build's)
    threads = min(numba_threads("alignment", float(M) * n), numba.get_num_threads())
    kernel = ak.rff_tile if threads > 1 else ak.rff_tile_serial
    for a in range(0, M, rows):
        m = min(rows, M - a)
        u = ut[:m]
        np.matmul(W[a:a + m], Xt.T, out=u)  # (m, n) phases
        V[a:a + m] = kernel(u, ct[:m], y, bb[a:a + m], phased, mode, c, sum_y2)
        if tdt == np.float64:
            np.matmul(u, Xt, out=grad[a:a + m])
        else:  # float32 GEMMs over blocks of data points, summed in float64
            g = grad[a:a + m]
            g[...] = 0.0
            for i in range(0, n, F32_GRAD_ROWS):
                g += u[:, i:i + F32_GRAD_ROWS] @ Xt[i:i + F32_GRAD_ROWS]
    return V, np.asarray(grad, dtype=omega.dtype)


def alignment_potential_and_grad(omega, X, y, b=None, chunk_size=None, method="auto", tile_dtype="float64"):
    """Single-particle alignment potential :math:`V_{\\mathcal{D}}` of RFF and its gradient.

    For each point (row of ``omega``),

    * ``b is None`` (phase average, the mean-field potential of eq. (4.1)):
      :math:`V(\\omega) = -\\frac{1}{n(n-1)}[(y^\\top\\cos X\\omega)^2 + (y^\\top\\sin X\\omega)^2 - \\sum_i y_i^2]
      = -\\frac{1}{n(n-1)}\\sum_{i\\ne j} y_i y_j\\cos(\\omega^\\top(x_i - x_j))`;
    * ``b`` given (phase :math:`b_k` attached to row k):
      :math:`V(\\omega_k) = -\\frac{1}{n(n-1)}\\sum_{i \\ne j} y_i y_j \\phi_{\\omega_k,b_k}(x_i)\\phi_{\\omega_k,b_k}(x_j)`
      with :math:`\\phi_{\\omega,b}(x) = \\sqrt2\\cos(\\omega^\\top x + b)`.

    The gradient is :math:`\\nabla_\\omega V = \\sum_i (\\partial V/\\partial U_i)\\, x_i`
    with the phases :math:`U_i = \\omega^\\top x_i`.

    Parameters
    ----------
    omega : array, shape (M, d)
        Evaluation points (particles or a grid).
    X : array, shape (n, d), n >= 2
        Training inputs.
    y : array, shape (n,)
        Targets.
    b : array, shape (M,), optional
        Phases in radians; ``None`` for the phase average.
    chunk_size : int, optional
        Points per block (memory O(n * chunk_size)); automatic by default
        (``2**21 // n`` points for ``"numpy"``, ``2**19 // n`` for ``"fused"``, whose
        two tile buffers are kept per thread between calls).
    method : {"auto", "numpy", "fused"}, default "auto"
        ``"numpy"``: the reference (NumPy or CuPy; the phases, sines and cosines of a
        block of points as (n, block) arrays). ``"fused"``: NumPy arrays only; per
        block of points, one BLAS call for the phases, one Numba pass per point that
        evaluates sin and cos together (a vectorised polynomial, absolute error below
        2.5e-16) and the reductions over the data, and one BLAS call for the
        gradient (:mod:`~rieszflow.engine.energy._alignment_kernels`); 3-6 x faster than
        ``"numpy"`` at n = 1e4, M = 1e3, d = 64, about 1.5 x its two GEMMs, and equal
        to the reference to ~5e-15 relative in float64
        (``docs/results/bench_alignment.md``). ``"auto"``: ``"fused"`` for NumPy
        arrays, ``"numpy"`` for CuPy arrays.
    tile_dtype : {"float64", "float32"}, default "float64"
        Precision of the fused path's tile arithmetic (phases, sin/cos inputs,
        :math:`\\partial V/\\partial U` and the gradient GEMMs); the reductions
        that give ``V`` and the gradient's sums over blocks of ``F32_GRAD_ROWS`` data
        points are accumulated in float64. ``"float32"`` rounds the phases to float32
        (relative error ~6e-8 of each phase), so ``V`` and the Langevin step differ from
        the float64 reference by 2e-7 to 4e-7 relative to their largest entry at n = 1e4,
        M = 1e3, d = 64 (``docs/results/bench_alignment.md``); the tests require 2e-5.

    Returns
    -------
    V : float64 array, shape (M,)
    grad : array, shape (M, d), dtype of ``omega``
        :math:`\\nabla_\\omega V` at each point.

    Raises
    ------
    ValueError
        On inconsistent shapes or non-finite inputs, an unknown ``method`` or
        ``tile_dtype``, or ``tile_dtype="float32"`` with a method other than the
        fused one.
    TypeError
        If ``method="fused"`` is asked for CuPy arrays.

    References
    ----------
    paper 000, eq. (4.1), (A.31), (B.8)-(B.9); App. A.2.
    """
    omega, X, y, b = _check_rff(omega, X, y, b)
    _chunk(X.shape[0], chunk_size)
    method = _check_method(method, tile_dtype, all(is_host(a) for a in (omega, X, y, b) if a is not None))
    if method == "fused":
        return _potential_and_grad_fused(omega, X, y, b, _chunk(X.shape[0], chunk_size, _FUSED_TILE_ELEMENTS),
                                         tile_dtype)
    return _potential_and_grad_numpy(omega, X, y, b, _chunk(X.shape[0], chunk_size))


def alignment_potential(omega, X, y, b=None, chunk_size=None, method="auto", tile_dtype="float64"):
    """Single-particle alignment potential :math:`V_{\\mathcal{D}}` at each row of ``omega``.

    See :func:`alignment_potential_and_grad` for the formulas.

    Parameters
    ----------
    omega : array, shape (M, d)
        Evaluation points.
    X : array, shape (n, d), n >= 2
        Training inputs.
    y : array, shape (n,)
        Targets.
    b : array, shape (M,), optional
        Phases in radians; ``None`` for the phase average.
    chunk_size : int, optional
        Points per block.

    method : {"auto", "numpy", "fused"}, default "auto"
        Implementation; see :func:`alignment_potential_and_grad`.
    tile_dtype : {"float64", "float32"}, default "float64"
        Precision of the fused path's tile arithmetic; see
        :func:`alignment_potential_and_grad`.

    Returns
    -------
    float64 array, shape (M,)

    Raises
    ------
    ValueError
        On inconsistent shapes or non-finite inputs, an unknown ``method`` or
        ``tile_dtype``, or ``tile_dtype="float32"`` with a method other than the fused one.
    TypeError
        If ``method="fused"`` is asked for CuPy arrays.

    References
    ----------
    paper 000, eq. (4.1).
    """
    return alignment_potential_and_grad(omega, X, y, b, chunk_size, method, tile_dtype)[0]


def alignment_potential_grad(omega, X, y, b=None, chunk_size=None, method="auto", tile_dtype="float64"):
    """Gradient of :math:`V_{\\mathcal{D}}` at each row of ``omega``.

    See :func:`alignment_potential_and_grad` for the formulas.

    Parameters
    ----------
    omega : array, shape (M, d)
        Evaluation points.
    X : array, shape (n, d), n >= 2
        Training inputs.
    y : array, shape (n,)
        Targets.
    b : array, shape (M,), optional
        Phases in radians; ``None`` for the phase average.
    chunk_size : int, optional
        Points per block.

    method : {"auto", "numpy", "fused"}, default "auto"
        Implementation; see :func:`alignment_potential_and_grad`.
    tile_dtype : {"float64", "float32"}, default "float64"
        Precision of the fused path's tile arithmetic; see
        :func:`alignment_potential_and_grad`.

    Returns
    -------
    array, shape (M, d), dtype of ``omega``

    Raises
    ------
    ValueError
        On inconsistent shapes or non-finite inputs, an unknown ``method`` or
        ``tile_dtype``, or ``tile_dtype="float32"`` with a method other than the fused one.
    TypeError
        If ``method="fused"`` is asked for CuPy arrays.

    References
    ----------
    paper 000, eq. (4.1).
    """
    return alignment_potential_and_grad(omega, X, y, b, chunk_size, method, tile_dtype)[1]


def rff_alignment_energy_and_grad(omega, X, y, b=None, chunk_size=None, method="auto", tile_dtype="float64"):
    """Alignment energy of random Fourier features and its gradient in ``omega``.

    :math:`\\mathcal{E}_N = \\frac1N\\sum_k V(\\omega_k)` with :math:`V` of
    :func:`alignment_potential_and_grad`: the exact (B.6) for given phases, the
    exact phase average :math:`\\mathbb{E}_b[\\mathcal{E}_N]` ((B.8)-(B.9) plus the
    constant :math:`\\sum_i y_i^2/(n(n-1))`) for ``b=None``. See the module
    docstring for the corrections to Lemma 3.

    Parameters
    ----------
    omega : array, shape (N, d)
        Particles (frequencies).
    X : array, shape (n, d), n >= 2
    y : array, shape (n,)
    b : array, shape (N,), optional
        Phases :math:`b_k` in radians; ``None`` averages over
        :math:`b_k \\sim \\mathrm{Unif}[0, 2\\pi]`.
    chunk_size : int, optional
        Particles per block.

    method : {"auto", "numpy", "fused"}, default "auto"
        Implementation; see :func:`alignment_potential_and_grad`.
    tile_dtype : {"float64", "float32"}, default "float64"
        Precision of the fused path's tile arithmetic; see
        :func:`alignment_potential_and_grad`.

    Returns
    -------
    energy : float64 scalar
    grad : array, shape (N, d), dtype of ``omega``
        :math:`\\nabla_{\\omega_k}\\mathcal{E}_N = \\frac1N\\nabla V(\\omega_k)`.

    Raises
    ------
    ValueError
        On inconsistent shapes or non-finite inputs, an unknown ``method`` or
        ``tile_dtype``, or ``tile_dtype="float32"`` with a method other than the fused one.
    TypeError
        If ``method="fused"`` is asked for CuPy arrays.

    References
    ----------
    paper 000, eq. (B.6), (B.8), (B.9), (A.32); App. A.2.
    """
    V, grad = alignment_potential_and_grad(omega, X, y, b, chunk_size, method, tile_dtype)
    xp = namespace(V)
    N = V.shape[0]
    return xp.mean(V), grad / N


def rff_alignment_energy(omega, X, y, b=None, chunk_size=None, method="auto", tile_dtype="float64"):
    """Alignment energy of random Fourier features; see :func:`rff_alignment_energy_and_grad`.

    Parameters
    ----------
    omega : array, shape (N, d)
        Particles (frequencies).
    X : array, shape (n, d), n >= 2
        Training inputs.
    y : array, shape (n,)
        Targets.
    b : array, shape (N,), optional
        Phases in radians; ``None`` for the exact phase average.
    chunk_size : int, optional
        Particles per block.

    method : {"auto", "numpy", "fused"}, default "auto"
        Implementation; see :func:`alignment_potential_and_grad`.
    tile_dtype : {"float64", "float32"}, default "float64"
        Precision of the fused path's tile arithmetic; see
        :func:`alignment_potential_and_grad`.

    Returns
    -------
    float64 scalar
        Exact (B.6) for given phases; exact phase average (B.8) + constant otherwise.

    Raises
    ------
    ValueError
        On inconsistent shapes or non-finite inputs, an unknown ``method`` or
        ``tile_dtype``, or ``tile_dtype="float32"`` with a method other than the fused one.
    TypeError
        If ``method="fused"`` is asked for CuPy arrays.

    References
    ----------
    paper 000, eq. (B.6) and (B.8).
    """
    return rff_alignment_energy_and_grad(omega, X, y, b, chunk_size, method, tile_dtype)[0]


def rff_alignment_energy_grad(omega, X, y, b=None, chunk_size=None, method="auto", tile_dtype="float64"):
    """Gradient in ``omega`` of the RFF alignment energy; see :func:`rff_alignment_energy_and_grad`.

    Parameters
    ----------
    omega : array, shape (N, d)
        Particles (frequencies).
    X : array, shape (n, d), n >= 2
        Training inputs.
    y : array, shape (n,)
        Targets.
    b : array, shape (N,), optional
        Phases in radians; ``None`` for the exact phase average.
    chunk_size : int, optional
        Particles per block.

    method : {"auto", "numpy", "fused"}, default "auto"
        Implementation; see :func:`alignment_potential_and_grad`.
    tile_dtype : {"float64", "float32"}, default "float64"
        Precision of the fused path's tile arithmetic; see
        :func:`alignment_potential_and_grad`.

    Returns
    -------
    array, shape (N, d), dtype of ``omega``

    Raises
    ------
    ValueError
        On inconsistent shapes or non-finite inputs, an unknown ``method`` or
        ``tile_dtype``, or ``tile_dtype="float32"`` with a method other than the fused one.
    TypeError
        If ``method="fused"`` is asked for CuPy arrays.

    References
    ----------
    paper 000, eq. (B.6) and (B.8).
    """
    return rff_alignment_energy_and_grad(omega, X, y, b, chunk_size, method, tile_dtype)[1]


@dataclasses.dataclass(frozen=True, eq=False)
class RFFAlignmentEnergy(Energy):
    """RFF alignment energy :math:`\\mathcal{E}_N` as a composable :class:`Energy` (``normalization="paper"``).

    Parameters
    ----------
    X : array, shape (n, d), n >= 2
        Training inputs.
    y : array, shape (n,)
        Targets.
    b : array, shape (N,), optional
        Fixed phases (exact (B.6)); ``None`` for the phase average (B.8).
    chunk_size : int, optional
        Particles per block.
    method : {"auto", "numpy", "fused"}, default "auto"
        Implementation; see :func:`alignment_potential_and_grad`.
    tile_dtype : {"float64", "float32"}, default "float64"
        Precision of the fused path's tile arithmetic; see
        :func:`alignment_potential_and_grad`.

    Notes
    -----
    ``per_particle(omega)`` returns :math:`V(\\omega_k)` (eq. (4.1), phase-averaged
    when ``b is None``), so ``N * grad`` is its gradient (eq. (A.7)).

    References
    ----------
    paper 000, eq. (2.2), (4.1), (B.6), (B.8).
    """

    X: object
    y: object
    b: object = None
    chunk_size: int | None = None
    method: str = "auto"
    tile_dtype: str = "float64"
    normalization: str = dataclasses.field(default="paper", init=False)

    def __post_init__(self):
        X = check_points("X", self.X, min_n=2)
        object.__setattr__(self, "X", X)
        object.__setattr__(self, "y", check_vector("y", self.y, n=X.shape[0]))
        if self.b is not None:
            object.__setattr__(self, "b", check_vector("b", self.b))
        if self.chunk_size is not None:
            check_int("chunk_size", self.chunk_size, minimum=1)
        check_choice("method", self.method, METHODS)
        check_choice("tile_dtype", self.tile_dtype, TILE_DTYPES)

    def value_and_grad(self, omega):
        """Energy (float64) and gradient, shape (N, d).

        Parameters
        ----------
        omega : array, shape (N, d)
            Particles (frequencies).

        Returns
        -------
        value : float64 scalar
            :math:`\\mathcal{E}_N`.
        grad : array, shape (N, d), dtype of ``omega``
            Its gradient.
        """
        return rff_alignment_energy_and_grad(omega, self.X, self.y, self.b, self.chunk_size, self.method,
                                             self.tile_dtype)

    def __call__(self, omega):
        """Energy value (float64).

        Parameters
        ----------
        omega : array, shape (N, d)
            Particles (frequencies).

        Returns
        -------
        float64 scalar
            :math:`\\mathcal{E}_N`.
        """
        return self.value_and_grad(omega)[0]

    def grad(self, omega):
        """Gradient, shape (N, d).

        Parameters
        ----------
        omega : array, shape (N, d)
            Particles (frequencies).

        Returns
        -------
        array, shape (N, d), dtype of ``omega``
            :math:`\\nabla_{\\omega_k}\\mathcal{E}_N`.
        """
        return self.value_and_grad(omega)[1]

    def per_particle(self, omega):
        """:math:`V(\\omega_k)`, shape (N,), float64.

        Parameters
        ----------
        omega : array, shape (N, d)
            Particles (frequencies).

        Returns
        -------
        array, shape (N,), float64
            :math:`V(\\omega_k)` (phase-averaged when ``b is None``).
        """
        return alignment_potential(omega, self.X, self.y, self.b, self.chunk_size, self.method, self.tile_dtype)


# --------------------------------------------------------------------------- Hamiltonian

def rff_hamiltonian(X, y, s, lam, b=None, softening=0.0, method="auto", alignment_method="auto"):
    """Build the Hamiltonian :math:`H_N = \\mathcal{E}_N + \\lambda\\mathcal{W}_{N,s}` of eq. (2.2) for RFF.

    Parameters
    ----------
    X : array, shape (n, d), n >= 2
    y : array, shape (n,)
    s : float
        Riesz exponent, ``-2 < s < inf``.
    lam : float
        Interaction strength :math:`\\lambda \\ge 0`.
    b : array, shape (N,), optional
        Fixed phases; ``None`` for the phase average.
    softening : float, default 0.0
        Riesz softening length.
    method : {"auto", "numpy", "numba", "gemm"}, default "auto"
        Backend of the Riesz pair sums.
    alignment_method : {"auto", "numpy", "fused"}, default "auto"
        Implementation of the alignment term; see :func:`alignment_potential_and_grad`.

    Returns
    -------
    SumEnergy
        With ``normalization="paper"``: use ``grad_scale = N`` in Langevin.

    Raises
    ------
    ValueError
        On invalid ``X``, ``y``, ``b``, ``s``, ``lam``, ``softening``, ``method`` or
        ``alignment_method``.

    References
    ----------
    paper 000, eq. (2.2), (2.3), (B.3).
    """
    return (RFFAlignmentEnergy(X, y, b, method=alignment_method)
            + RieszEnergy(s, lam, "paper", softening, method))


def hamiltonian_and_grad(omega, X, y, s, lam, b=None, softening=0.0, method="auto", alignment_method="auto"):
    """Value and gradient of :math:`H_N = \\mathcal{E}_N + \\lambda\\mathcal{W}_{N,s}` (eq. (2.2)) for RFF.

    Parameters
    ----------
    omega : array, shape (N, d), N >= 2
        Particles (frequencies).
    X : array, shape (n, d), n >= 2
        Training inputs, as :func:`rff_hamiltonian`.
    y : array, shape (n,)
        Targets, as :func:`rff_hamiltonian`.
    s : float
        Riesz exponent, ``-2 < s < inf``.
    lam : float
        Interaction strength :math:`\\lambda \\ge 0`.
    b : array, shape (N,), optional
        Fixed phases; ``None`` for the phase average.
    softening : float, default 0.0
        Riesz softening length.
    method : {"auto", "numpy", "numba", "gemm"}, default "auto"
        Backend of the Riesz pair sums.
    alignment_method : {"auto", "numpy", "fused"}, default "auto"
        Implementation of the alignment term; see :func:`alignment_potential_and_grad`.

    Returns
    -------
    value : float64 scalar
        :math:`H_N(\\omega)`.
    grad : array, shape (N, d)
        Its gradient.

    Raises
    ------
    ValueError
        On invalid shapes or parameters (see :func:`rff_alignment_energy` and
        :func:`~rieszflow.engine.energy.riesz_energy`).

    References
    ----------
    paper 000, eq. (2.2).
    """
    return rff_hamiltonian(X, y, s, lam, b, softening, method, alignment_method).value_and_grad(omega)


def hamiltonian(omega, X, y, s, lam, b=None, softening=0.0, method="auto", alignment_method="auto"):
    """Value of :math:`H_N = \\mathcal{E}_N + \\lambda\\mathcal{W}_{N,s}` (eq. (2.2)) for RFF.

    Parameters
    ----------
    omega : array, shape (N, d), N >= 2
        Particles (frequencies).
    X : array, shape (n, d), n >= 2
        Training inputs, as :func:`rff_hamiltonian`.
    y : array, shape (n,)
        Targets, as :func:`rff_hamiltonian`.
    s : float
        Riesz exponent, ``-2 < s < inf``.
    lam : float
        Interaction strength :math:`\\lambda \\ge 0`.
    b : array, shape (N,), optional
        Fixed phases; ``None`` for the phase average.
    softening : float, default 0.0
        Riesz softening length.
    method : {"auto", "numpy", "numba", "gemm"}, default "auto"
        Backend of the Riesz pair sums.
    alignment_method : {"auto", "numpy", "fused"}, default "auto"
        Implementation of the alignment term; see :func:`alignment_potential_and_grad`.

    Returns
    -------
    float64 scalar

    Raises
    ------
    ValueError
        On invalid shapes or parameters (see :func:`rff_alignment_energy` and
        :func:`~rieszflow.engine.energy.riesz_energy`).

    References
    ----------
    paper 000, eq. (2.2).
    """
    return rff_hamiltonian(X, y, s, lam, b, softening, method, alignment_method)(omega)
