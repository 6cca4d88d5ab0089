r"""NFFT fast summation of the Riesz row sums for general s in d = 1, 2, 3 (``method="nufft"``).

The scheme of Potts and Steidl (fast summation at nonequispaced knots): the kernel is split into
a near part, summed directly over the pairs closer than a cut-off radius :math:`R_c`, and a
smooth far part, summed for all pairs at once by two non-uniform FFTs through the Fourier
coefficients of its periodisation. Here the split is the Ewald (incomplete-gamma) split of
:math:`g_s` (for :math:`s \ne 0`, :math:`a = s/2`, :math:`z = \alpha^2 R^2`):

.. math::

    g_s(R) = \underbrace{g_s(R)\,P(a, z)}_{F(R)\ \text{smooth}}
           + \underbrace{g_s(R)\,Q(a, z)}_{\text{near, decays like } e^{-z}},
    \qquad -\log R = \Big(-\log R - \tfrac12 E_1(z)\Big) + \tfrac12 E_1(z)\quad (s = 0),

with :math:`P, Q` the regularised lower/upper incomplete gamma functions (for
:math:`-1 < a < 0` through :math:`\Gamma(a, z) = (\Gamma(a+1, z) - z^a e^{-z})/a`). This follows
from :math:`R^{-s} = \Gamma(a)^{-1}\int_0^\infty t^{a-1} e^{-R^2 t}\,dt` cut at
:math:`t = \alpha^2`. :math:`F` is an entire function of :math:`z` (finite at 0, so the
singularity at the origin needs no other regularisation), with Fourier transform decaying like
:math:`e^{-\pi^2|k|^2/\alpha^2}`. Instead of Potts and Steidl's two-point Taylor polynomials,
the inner regularisation is therefore this split, and the boundary regularisation is a smooth
window: the particles are centred and scaled into the ball of radius 3/16 of the unit torus
:math:`[-1/2, 1/2)^d` (all differences shorter than 3/8), and
:math:`F_R(r) = C + \chi(r)(F(r) - C)` with :math:`\chi = \tfrac12\,\mathrm{erfc}((r - 7/16)/w)`,
equal to 1 up to 3/8 and 0 from 1/2 on to the precision; :math:`F_R` is sampled on an
:math:`n^d` grid and transformed by an FFT (its coefficients beyond :math:`n/2` are below the
precision, so sampling aliases nothing that matters). Then, with :math:`y` the scaled points,

.. math::

    \mathrm{rows}_k \approx \sum_{|l_i| < n/2} b_l\, e^{2\pi i l\cdot y_k}\,\overline{\hat c_l}
      - \sum_l b_l + \sum_{0 < \|y_k - y_j\| < R_c} \mathrm{near}(\rho\|y_k - y_j\|),
    \qquad \hat c_l = \sum_j e^{2\pi i l\cdot y_j},

the first sum by a type-1 NUFFT (charges to modes) and a type-2 NUFFT (modes to particles,
FINUFFT), the second removing the self term, and the gradient from the same coefficients times
:math:`2\pi i l` (d more type-2 transforms) plus the near part's exact gradient.

Accuracy and cost: ``tol`` sets the cut-off (:math:`Q(a, \alpha^2R_c^2) \le` tol), the modes
(:math:`n \ge 2\alpha\sqrt{\log(1/\mathrm{tol})}/\pi`) and FINUFFT's precision; the balance
between near pairs and modes is :data:`NUFFT_NEIGHBOURS` pairs per particle, and at most
:data:`NUFFT_MAX_MODES` modes (more near pairs when the cap binds). The near field is a Numba
cell-list pair sum (:mod:`~rieszflow.engine.energy._nufft_near`: each pair once, O(N) memory,
E1 and Q(b, z) compiled); the Fourier coefficients come from a type-I DCT of the radial sample
on the 2^-d part of the grid with non-negative coordinates. Cost at N = 10^6, d = 2, s = 0,
tol = 1e-7 (one thread): 19.8 CPU-s, relative errors 5.1e-10 (potential) and 5.5e-10
(gradient) against exact row sums over 100 rows (``docs/results/bench_fast.md``, section 1b). Measured errors at small N:
``tests/test_riesz_fast_nufft.py`` (d = 1, 2, 3, s from -1.5 to 2.5 and the log kernel, softening).

References
----------
D. Potts and G. Steidl, "Fast summation at nonequispaced knots by NFFTs", SIAM J. Sci. Comput.
24 (2003) 2013-2037, doi:10.1137/S1064827502400984. P. P. Ewald, Ann. Phys. 369 (1921) 253-287
(the incomplete-gamma split). A. H. Barnett, J. Magland, L. af Klinteberg, "A parallel
nonuniform fast Fourier transform library based on an 'exponential of semicircle' kernel",
SIAM J. Sci. Comput. 41 (2019) C479-C504 (FINUFFT). Paper 000, eq. (2.3), (B.10) (the kernel).
"""
from __future__ import annotations

import math

import numpy as np
import scipy.special as sc

from rieszflow.engine.energy._nufft_near import near_field_sums

__all__ = ["NUFFT_MAX_MODES", "NUFFT_NEIGHBOURS", "nufft_pair_sums"]

#: Target number of near pairs per particle (d -> count): the balance of the direct near field
#: (Numba cell list) against the Fourier modes of the far field. Chosen by CPU time, unit ball,
#: s = 0: d = 1: 32 best of 32/128/512 (N = 20000, tol = 1e-10, before the cell list); d = 2: 512
#: best of 128/256/512/1024 at N = 2e4 and 2e5 (tol = 1e-10) and of 256/512/1024 at N = 1e6
#: (tol = 1e-7: 18.1 CPU-s against 22.9 and 26.8); d = 3: not tuned (the mode cap binds from
#: N of about 1e4 on, so the count follows from the cap).
NUFFT_NEIGHBOURS = {1: 32, 2: 512, 3: 512}
#: Largest number of Fourier modes n^d of the far field, per d (memory: FINUFFT's fine grid is
#: (upsampfac)^d times this, in complex128, and the d + 1 mode arrays of the potential and the
#: gradient are held at once: about 100 bytes per mode in d = 2, 1.4 GB at the cap).
NUFFT_MAX_MODES = {1: 2 ** 22, 2: 2 ** 24, 3: 2 ** 23}
#: FINUFFT's upsampling factor for ``tol >= 1e-9`` (1.25: a fine grid (2/1.25)^d times smaller
#: than the default 2, wider spreading; FINUFFT's kernel cannot reach a smaller tol with it, so
#: below that the default 2 is used).
NUFFT_UPSAMPFAC = 1.25
_R_POINTS = 1.0 / 8.0       # scaled particles lie in this ball: differences < 1/4
_WINDOW_HALF = 0.25 - _R_POINTS          # the window falls from 1 to 0 over [2 R_p, 1/2]
_WINDOW_CENTRE = 2.0 * _R_POINTS + _WINDOW_HALF


def _finufft():
    try:
        import finufft
    except ImportError as err:    # pragma: no cover - a core dependency; the message is for broken installs
        raise ImportError("method='nufft' needs the package finufft (pip install 'finufft>=2.5'); it "
                          f"could not be imported: {err}") from None
    return finufft


def _tail(a, z):
    """Relative size of the near part at z: Q(a, z) (a != 0) or E1(z)/2 (a = 0, absolute)."""
    if a == 0.0:
        return 0.5 * sc.exp1(z)
    if a > 0.0:
        return sc.gammaincc(a, z)
    return abs(sc.gammaincc(a + 1.0, z) - z ** a * math.exp(-z) / sc.gamma(a + 1.0))


def _cutoff_z(a, tol):
    """Smallest z (bisection) with the near part's relative size below tol/4."""
    lo, hi = 0.0, 1.0
    while _tail(a, hi) > 0.25 * tol:
        hi *= 2.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if _tail(a, mid) <= 0.25 * tol else (mid, hi)
    return hi


def _g(s, R):
    if s == 0.0:
        return -np.log(R)
    return R ** (-s) if s > 0 else -(R ** (-s))


def _far(s, alpha, R):
    """The smooth part F(R) (stable at R = 0)."""
    a = 0.5 * s
    z = (alpha * R) ** 2
    if s == 0.0:
        small = z < 0.5                          # series there (no cancellation), closed form beyond
        out = np.empty_like(z)
        big = ~small
        out[big] = -np.log(R[big]) - 0.5 * sc.exp1(z[big])
        zs = z[small]
        ein = np.zeros_like(zs)                  # Ein(z) = sum_k (-1)^(k+1) z^k / (k k!), |term| < 1e-17 by k = 20
        term = np.ones_like(zs)
        for k in range(1, 21):
            term = term * zs / k
            ein += (-1) ** (k + 1) * term / k
        out[small] = 0.5 * np.euler_gamma + math.log(alpha) - 0.5 * ein
        return out
    if a > 0.0:                                   # alpha^s z^-a P(a, z); limit 1/Gamma(a+1) at 0
        zz = np.where(z > 0.0, z, 1.0)
        val = np.where(z > 0.0, sc.gammainc(a, zz) * zz ** (-a), 1.0 / sc.gamma(a + 1.0))
        return alpha ** s * val
    # -1 < a < 0: -alpha^s [z^-a P(a+1, z) + e^-z / Gamma(a+1)]
    return -alpha ** s * (z ** (-a) * sc.gammainc(a + 1.0, z) + np.exp(-z) / sc.gamma(a + 1.0))


def _near(s, alpha, R):
    """Near part g - F and its derivative d/dR at R > 0 (the reference of the Numba near field).

    d/dR near = -c_s R^{-s-1} Q(a + 1, z) (from d/dz [z^-a Gamma(a, z)] = -z^(-a-1) Gamma(a+1, z)),
    and for -1 < a < 0 near = alpha^s e^-z / Gamma(a+1) - R^-s Q(a+1, z): no cancellation at small R.
    """
    a = 0.5 * s
    z = (alpha * R) ** 2
    if s == 0.0:
        return 0.5 * sc.exp1(z), -np.exp(-z) / R
    q1 = sc.gammaincc(a + 1.0, z)
    dval = -abs(s) * R ** (-s - 1.0) * q1
    if a > 0.0:
        return R ** (-s) * sc.gammaincc(a, z), dval
    return alpha ** s * np.exp(-z) / sc.gamma(a + 1.0) - R ** (-s) * q1, dval


def _log_tol(tol):
    return math.log(1.0 / tol) + 3.0


def _plan(n, d, s, tol):
    """(alpha in scaled units, cut-off radius in scaled units, modes per axis, window width)."""
    zc = _cutoff_z(0.5 * s, tol)
    L = _log_tol(tol)
    w = _WINDOW_HALF / math.sqrt(L)                 # erfc window: 1 - chi < e^-L at r = 2 R_p
    kw = math.sqrt(L) / (math.pi * w)               # its largest mode above the precision
    rc = _R_POINTS * (NUFFT_NEIGHBOURS[d] / max(n, 1)) ** (1.0 / d)
    alpha = math.sqrt(zc) / rc
    ka = alpha * math.sqrt(L) / math.pi             # F's largest mode: exp(-pi^2 k^2 / alpha^2) < e^-L
    half = int(math.ceil(math.hypot(ka, kw))) + 1
    cap = int(round(NUFFT_MAX_MODES[d] ** (1.0 / d))) // 2 - 1
    if half > cap:                                  # fewer modes, more near pairs
        half = cap
        ka = math.sqrt(max(1.0, half * half - kw * kw))
        alpha = ka * math.pi / math.sqrt(L)
        rc = math.sqrt(zc) / alpha
    return alpha, rc, 2 * half, w


def _coefficients(s, alpha_p, rho, eps, nm, d, w):
    """Fourier coefficients b_l (real, shape (nm,)*d, modes -nm/2..nm/2-1) of the windowed F.

    The sample is radial, hence even along every axis: it is evaluated on the grid points with
    non-negative coordinates only (indices 0..nm/2, a 2^-d part) and transformed by a type-I DCT
    per axis, which is exactly the DFT of its even extension (no approximation)."""
    import scipy.fft

    h = nm // 2
    t = np.arange(h + 1) / nm
    r2 = np.zeros((h + 1,) * d)
    for ax in range(d):
        shape = [1] * d
        shape[ax] = h + 1
        r2 = r2 + (t * t).reshape(shape)
    r = np.sqrt(r2)
    R = np.sqrt((rho * r) ** 2 + eps * eps)
    far = _far(s, alpha_p, R)
    edge = _far(s, alpha_p, np.array([math.sqrt((rho * 0.5) ** 2 + eps * eps)]))[0]
    chi = 0.5 * sc.erfc((r - _WINDOW_CENTRE) / w)
    sample = edge + chi * (far - edge)
    bq = scipy.fft.dctn(sample, type=1) / float(nm) ** d
    fold = np.abs(np.arange(nm) - h)
    return bq[np.ix_(*([fold] * d))]


def nufft_pair_sums(omega, s, softening, want_energy, tol):
    """Row sums of the Riesz kernel by NFFT fast summation (d = 1, 2, 3, any s > -2).

    Parameters
    ----------
    omega : ndarray, shape (N, d), d in {1, 2, 3}
        Particle positions (host, finite; checked by the caller).
    s : float
        Riesz exponent, ``-2 < s`` (``s = 0``: the log kernel).
    softening : float
        Plummer softening :math:`\\varepsilon \\ge 0` (the split is applied to
        :math:`\\sqrt{R^2 + \\varepsilon^2}`).
    want_energy : bool
        Also return the potential row sums.
    tol : float
        Requested relative precision (cut-off, modes and FINUFFT's ``eps``).

    Returns
    -------
    rows : float64 ndarray, shape (N,), or None
        :math:`\\sum_{l \\ne k} g_s(\\omega_k - \\omega_l)`.
    grads : float64 ndarray, shape (N, d)
        :math:`\\sum_{l \\ne k} \\nabla g_s(\\omega_k - \\omega_l)`.

    Raises
    ------
    TypeError
        If ``omega`` is not a NumPy array.
    ValueError
        If ``d`` is not 1, 2 or 3.
    ImportError
        If ``finufft`` cannot be imported (the message names the package).

    References
    ----------
    Potts and Steidl, SIAM J. Sci. Comput. 24 (2003) 2013-2037 (fast summation by NFFTs);
    Barnett, Magland, af Klinteberg, SIAM J. Sci. Comput. 41 (2019) (FINUFFT).
    """
    from rieszflow.engine._checks import is_host

    if not is_host(omega):
        raise TypeError(f"method='nufft' needs a NumPy (CPU) array, got a {type(omega).__module__}."
                        f"{type(omega).__name__}; move it to the host or use method='auto'")
    n, d = omega.shape
    if d not in (1, 2, 3):
        raise ValueError(f"method='nufft' supports d = 1, 2, 3, got d={d}; use a direct method")
    fi = _finufft()
    s, eps = float(s), float(softening)
    x = np.asarray(omega, dtype=np.float64)
    centre = 0.5 * (x.min(axis=0) + x.max(axis=0))
    extent = float(np.max(np.sqrt(np.sum((x - centre) ** 2, axis=1))))
    rho = max(extent, np.finfo(np.float64).tiny) / _R_POINTS
    y = (x - centre) / rho
    alpha, rc, nm, width = _plan(n, d, s, tol)
    alpha_p = alpha / rho
    b = _coefficients(s, alpha_p, rho, eps, nm, d, width)
    pts = [2.0 * math.pi * y[:, ax] for ax in range(d)]
    t1 = {1: fi.nufft1d1, 2: fi.nufft2d1, 3: fi.nufft3d1}[d]
    t2 = {1: fi.nufft1d2, 2: fi.nufft2d2, 3: fi.nufft3d2}[d]
    ftol = max(tol, 1e-14)
    opts = {"eps": ftol, "nthreads": 1, "upsampfac": NUFFT_UPSAMPFAC if tol >= 1e-9 else 2.0}
    modes = t1(*pts, np.ones(n, dtype=np.complex128), (nm,) * d, isign=-1, **opts)
    modes *= b
    k = np.arange(nm) - nm // 2
    e = int(bool(want_energy))
    stack = np.empty((d + e,) + (nm,) * d, dtype=np.complex128)   # potential and gradient: one batch
    if e:
        stack[0] = modes
    for ax in range(d):
        shape = [1] * d
        shape[ax] = nm
        stack[e + ax] = modes * (2j * math.pi * k).reshape(shape)
    del modes
    out = t2(*pts, stack, isign=1, **opts).real
    rows = out[0] - float(np.sum(b)) if e else None
    grads = np.ascontiguousarray(out[e:].T) / rho
    # near field: pairs with sqrt(R^2 + eps^2) < R_c (physical), exact near part (Numba cell list)
    Rc = rc * rho
    if Rc > eps:
        near_rows, near_grads = near_field_sums(x, s, eps, alpha_p, Rc, want_energy)
        if want_energy:
            rows += near_rows
        grads += near_grads
    return rows, grads
