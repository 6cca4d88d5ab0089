r"""Fast (approximate, O(N log N)) Riesz row sums: the fast multipole method in 3-D.

The direct pair sums of :mod:`~rieszflow.engine.energy.riesz` cost O(N^2): at N = 10^6 they are
10^12 pairs, about an hour per gradient on one core. For the Coulomb kernel of
:math:`\mathbb{R}^3` (``d = 3``, ``s = 1``, :math:`g_1(w) = 1/\|w\|`) the fast multipole method
of FMM3D computes the same row sums

.. math::

    \mathrm{rows}_k = \sum_{l \ne k} \frac{1}{\|\omega_k - \omega_l\|}, \qquad
    \mathrm{grads}_k = \sum_{l \ne k} \nabla g_1(\omega_k - \omega_l)
                     = -\sum_{l \ne k} \frac{\omega_k - \omega_l}{\|\omega_k - \omega_l\|^3}

in O(N) work to a requested relative precision ``tol`` (FMM3D's ``eps``), potential and
gradient from one call. FMM3D's Laplace kernel is :math:`1/(4\pi r)` and it drops the self
term :math:`l = k` from the sum (``lfmm3d`` with unit charges, ``pg = 2``), so the row sums are
:math:`4\pi` times its potential and gradient; the diagonal exclusion and the normalisations of
:func:`~rieszflow.engine.energy.riesz_energy_and_grad` are unchanged, and every energy built on
the Riesz sums gets the method (``method="fmm"``; ``method="auto"`` takes it from
:data:`FMM_MIN_N` particles on, see :func:`auto_fast`).

Accuracy
--------
``tol`` is FMM3D's requested precision, a relative error of the potential and gradient in the
2-norm over the particles. What it delivers is measured, not assumed:
``tests/test_riesz_fast.py`` compares energy, potential and gradient with the direct sums at
N up to a few thousand (uniform, clustered and near-coincident clouds) and
``benchmarks/bench_fast.py`` at N = 10^6 against the exact direct sums over a random subset
of rows (:func:`~rieszflow.engine.energy.fast_rows.riesz_row_sums`); the page is
``docs/results/bench_fast.md``.

Only the exact kernel is available (``softening = 0``: a softened kernel is not harmonic) and
only host (NumPy) arrays; the wheel of ``fmm3dpy`` 2.1 runs on one thread.

References
----------
L. Greengard and V. Rokhlin, "A fast algorithm for particle simulations", J. Comput. Phys. 73
(1987), doi:10.1016/0021-9991(87)90140-9. FMM3D (Flatiron Institute),
https://fmm3d.readthedocs.io, Python package ``fmm3dpy`` 2.1 (``lfmm3d``: kernel
:math:`1/(4\pi r)`, self term excluded). Paper 000, eq. (2.3) and (B.10) (the kernel and the
normalisation).
"""
from __future__ import annotations

import math

import numpy as np

from rieszflow.engine._checks import check_real, is_host

__all__ = ["FAST_METHODS", "FAST_TOL", "FMM_MIN_N", "NUFFT_MIN_N", "NUFFT_MIN_N_POWER", "auto_fast", "check_tol", "fmm_pair_sums"]

#: The fast methods of the Riesz sums (approximate, to the accuracy ``tol``): ``"fmm"`` here,
#: ``"nufft"`` in :mod:`~rieszflow.engine.energy.fast_nufft`.
FAST_METHODS = ("fmm", "nufft")

#: Default requested relative precision of the fast methods. At N = 10^6 (d = 3, s = 1, unit
#: ball) FMM3D delivers errors well below it (docs/results/bench_fast.md).
FAST_TOL = 1e-10

#: ``method="auto"`` takes ``"fmm"`` for d = 3, s = 1, softening 0 and host arrays from this
#: many particles on: the crossover with the Numba direct kernel measured by
#: ``python benchmarks/bench_fast.py crossover`` (docs/results/bench_fast.md, table 2; one
#: thread, CPU seconds, unit ball, the default ``tol``): Numba 2.1x faster at N = 20000, FMM 2.5x
#: faster at N = 50000 (the crossover lies between; the first measured size past it is taken).
FMM_MIN_N = 50_000

#: ``method="auto"`` takes ``"nufft"`` for the log kernel (s = 0; host arrays, d in this mapping,
#: any softening) from this many particles on: the crossover with the Numba kernel measured by
#: ``python benchmarks/bench_fast.py crossover --sizes 2000 5000 10000 20000 50000 --k 3 --d 2 1
#: --s 0 0`` (docs/results/bench_fast.md, table 2; CPU seconds, one thread, unit ball, default
#: ``tol``): d = 1 faster from the smallest size measured, N = 2000 (2.7x; 36x at N = 20000);
#: d = 2 Numba faster at N = 5000 (1.1x), NFFT faster at 10000 (1.45x), 20000 (2.9x) and 50000
#: (7.6x); d = 3 never (None; the mode cap binds and the direct kernel is faster up to 5e4).
NUFFT_MIN_N = {1: 2000, 2: 10000, 3: None}
#: The same for s != 0, whose near field evaluates an incomplete gamma function per pair
#: (closed forms through erfc/exp when s is an integer, SciPy's ``gammaincc`` otherwise), so the
#: crossover lies higher. Measured interleaved (min of 2, tol = 1e-10, one thread, unit ball, in
#: the development of the cell-list near field; not a page): d = 1, s = 0.5 Numba 2x faster at
#: N = 2000, NFFT 1.1x at 5000 (s = 1 and 2.5: NFFT 1.1-1.2x at 2000, 2.5-2.8x at 5000); d = 2
#: NFFT / Numba at N = 20000: 0.62 (s = 0.5), 1.33 (s = 1), 0.96 (s = -0.5), at N = 40000: 1.21
#: (s = 0.5), 1.78 (s = -0.5).
NUFFT_MIN_N_POWER = {1: 5000, 2: 40000, 3: None}


def check_tol(tol) -> float:
    """Validate the requested relative precision of a fast method.

    Parameters
    ----------
    tol : float
        Relative precision, ``1e-15 <= tol < 1``.

    Returns
    -------
    float

    Raises
    ------
    TypeError
        If ``tol`` is not a real number.
    ValueError
        If it is NaN, infinite or outside ``[1e-15, 1)``.
    """
    v = check_real("tol", tol, positive=True)
    if not 1e-15 <= v < 1.0:
        raise ValueError(f"tol must satisfy 1e-15 <= tol < 1 (a relative precision), got tol={tol!r}")
    return v


def _fmm3d():
    try:
        import fmm3dpy
    except ImportError as err:   # pragma: no cover - a core dependency; the message is for broken installs
        raise ImportError("method='fmm' needs the package fmm3dpy (pip install 'fmm3dpy>=2.1'); "
                          f"it could not be imported: {err}") from None
    return fmm3dpy


def _check_fmm(omega, s, eps):
    if not is_host(omega):
        raise TypeError(f"method='fmm' needs a NumPy (CPU) array, got a {type(omega).__module__}."
                        f"{type(omega).__name__}; move it to the host or use method='auto'")
    d = omega.shape[1]
    if d != 3 or s != 1.0:
        raise ValueError(f"method='fmm' computes the Coulomb kernel of R^3 only (d=3, s=1), got d={d}, "
                         f"s={s}; use method='nufft' or a direct method for other (d, s)")
    if eps != 0.0:
        raise ValueError(f"method='fmm' needs softening=0 (the softened kernel is not harmonic), got "
                         f"softening={eps}; use a direct method")


def fmm_pair_sums(omega, s, softening, want_energy, tol=FAST_TOL):
    """Row sums of the Coulomb kernel in 3-D by FMM3D, potential and gradient in one call.

    Parameters
    ----------
    omega : ndarray, shape (N, 3)
        Particle positions (float32 or float64, host); finite, as checked by the caller.
    s : float
        Riesz exponent, must be 1.
    softening : float
        Must be 0.
    want_energy : bool
        Also return the potential row sums.
    tol : float, default :data:`FAST_TOL`
        Requested relative precision (FMM3D's ``eps``), see :func:`check_tol`.

    Returns
    -------
    rows : float64 ndarray, shape (N,), or None
        :math:`\\sum_{l \\ne k} \\|\\omega_k - \\omega_l\\|^{-1}` (None without ``want_energy``).
    grads : float64 ndarray, shape (N, 3)
        :math:`\\sum_{l \\ne k} \\nabla g_1(\\omega_k - \\omega_l)`.

    Raises
    ------
    TypeError
        If ``omega`` is not a NumPy array.
    ValueError
        If ``d != 3``, ``s != 1``, ``softening != 0`` or ``tol`` is out of range.
    ImportError
        If ``fmm3dpy`` cannot be imported (the message names the package).

    References
    ----------
    Greengard and Rokhlin, J. Comput. Phys. 73 (1987); FMM3D ``lfmm3d`` (kernel
    :math:`1/(4\\pi r)`, self term excluded); paper 000, eq. (2.3).
    """
    tol = check_tol(tol)
    _check_fmm(omega, float(s), float(softening))
    fmm = _fmm3d()
    n = omega.shape[0]
    src = np.ascontiguousarray(np.asarray(omega, dtype=np.float64).T)
    out = fmm.lfmm3d(eps=tol, sources=src, charges=np.ones(n), pg=2)  # pg=2: potential and gradient
    four_pi = 4.0 * math.pi
    rows = four_pi * np.asarray(out.pot, dtype=np.float64) if want_energy else None
    grads = four_pi * np.asarray(out.grad, dtype=np.float64).T
    return rows, np.ascontiguousarray(grads)


def auto_fast(omega, s, softening) -> str | None:
    """The fast method that ``method="auto"`` takes for this input, or None (a direct method).

    Parameters
    ----------
    omega : array, shape (N, d)
        Particle positions.
    s : float
        Riesz exponent.
    softening : float
        Softening length.

    Returns
    -------
    str or None
        ``"fmm"`` for host arrays with d = 3, s = 1, softening 0 and N >= :data:`FMM_MIN_N`;
        else ``"nufft"`` for host arrays with N >= :data:`NUFFT_MIN_N` ``[d]`` (s = 0) or
        :data:`NUFFT_MIN_N_POWER` ``[d]`` (s != 0); otherwise None.
    """
    n, d = omega.shape[-2], omega.shape[-1]
    if not is_host(omega):
        return None
    if d == 3 and s == 1.0 and softening == 0.0:
        return "fmm" if n >= FMM_MIN_N else None
    start = (NUFFT_MIN_N if s == 0.0 else NUFFT_MIN_N_POWER).get(d)
    return "nufft" if start is not None and n >= start else None
