r"""The near field of the NFFT fast summation (``method="nufft"``): a Numba cell-list pair sum.

The incomplete-gamma split of :mod:`~rieszflow.engine.energy.fast_nufft` leaves a near part that
is summed directly over the pairs closer than the cut-off radius :math:`R_c`:

.. math::

    \mathrm{near}(R) = g_s(R)\,Q(a, \alpha^2 R^2) \quad (s \ne 0,\ a = s/2), \qquad
    \mathrm{near}(R) = \tfrac12 E_1(\alpha^2 R^2) \quad (s = 0),

with :math:`R = \sqrt{|\omega_k - \omega_l|^2 + \varepsilon^2}`, and its derivative

.. math::

    \frac{\mathrm{near}'(R)}{R} = -c_s\,R^{-(s+2)}\,Q(a + 1, z), \qquad z = \alpha^2 R^2,

(from :math:`\frac{d}{dz}[z^{-a}\Gamma(a, z)] = -z^{-a-1}\Gamma(a+1, z)`; :math:`c_s = |s|`,
:math:`c_0 = 1`, :math:`Q(1, z) = e^{-z}`): the direct force weight times one regularised
incomplete gamma function :math:`Q(a, z) = \Gamma(a, z)/\Gamma(a)`, free of cancellation at
small R. For :math:`-1 < a < 0` the near part itself is
:math:`\alpha^s e^{-z}/\Gamma(a+1) - R^{-s} Q(a+1, z)` (also without cancellation). The special functions are SciPy's own
(:mod:`scipy.special.cython_special`: ``exp1``, ``gammaincc``), called from compiled code through
their C entry points, so the near part is the same function, to the last bit, as the NumPy
reference :func:`~rieszflow.engine.energy.fast_nufft._near`.

The pairs are found by a cell list: the particles are sorted by the cell of side
:math:`h \ge R_c` that holds them (a counting sort, O(N)), and each cell is paired with itself
and with the half of its :math:`3^d - 1` neighbour cells that come after it in lexicographic
order, so each unordered pair within :math:`R_c` is evaluated exactly once (adding to both
rows, the gradient with opposite signs), in a fixed order: the result does not depend on
anything but the positions. Work O(N k) for k neighbours per particle, memory O(N). One
thread (the far field's FINUFFT calls use one thread too).

References
----------
D. Potts and G. Steidl, "Fast summation at nonequispaced knots by NFFTs", SIAM J. Sci. Comput.
24 (2003) 2013-2037, doi:10.1137/S1064827502400984 (the near field of fast summation);
M. P. Allen and D. J. Tildesley, *Computer Simulation of Liquids*, 2nd ed., OUP (2017),
sec. 5.3 (cell lists).
"""
from __future__ import annotations

import ctypes
import math

import numba as nb
import numpy as np
import scipy.special as sc

__all__ = ["near_field_sums"]


def _cython_special(name: str, nargs: int):
    """A ctypes handle of ``scipy.special.cython_special.<name>`` (the double-precision variant)."""
    import scipy.special.cython_special as cs
    from numba.extending import get_cython_function_address

    want = "double (" + ", ".join(["double"] * nargs)
    for key, capsule in cs.__pyx_capi__.items():
        if (key == name or key.endswith("fuse_1" + name) or key.endswith("fuse_0" + name)) \
                and want in repr(capsule):
            addr = get_cython_function_address("scipy.special.cython_special", key)
            proto = ctypes.CFUNCTYPE(ctypes.c_double, *([ctypes.c_double] * nargs), ctypes.c_int)
            return proto(addr)
    raise ImportError(f"scipy.special.cython_special has no double-precision {name!r} "  # pragma: no cover
                      f"(SciPy {__import__('scipy').__version__}); method='nufft' needs it")


_exp1 = _cython_special("exp1", 1)
_gammaincc = _cython_special("gammaincc", 2)

_MODE_LOG, _MODE_POS, _MODE_NEG = 0, 1, 2

# ---------------------------------------------------------------- E1 for the log kernel's near part
# E1(z) = -gamma - log z + Ein(z) for z <= 1 (Ein's Taylor series, 18 terms: the next term is
# below 1e-17); E1(z) = e^-z f(z) on (1, _E1_ZMAX] with f(z) = e^z E1(z) interpolated by a
# Chebyshev polynomial of degree _E1_DEG on each unit interval [k, k+1] (f is analytic there with
# its branch point at 0, so the degree-20 interpolant on [1, 2] converges like 5.8^-20); SciPy's
# exp1 beyond (never a near pair: the cut-off keeps z below ~40 for tol >= 1e-16).
_E1_TERMS = 18
_EIN = np.array([(-1.0) ** (k + 1) / (k * math.factorial(k)) for k in range(1, _E1_TERMS + 1)])
_E1_ZMAX = 64
_E1_DEG = 20


def _e1_table() -> np.ndarray:
    from numpy.polynomial import chebyshev as C

    table = np.empty((_E1_ZMAX - 1, _E1_DEG + 1))
    for k in range(1, _E1_ZMAX):
        table[k - 1] = C.chebinterpolate(lambda t, k=k: np.exp(k + 0.5 + 0.5 * t) * sc.exp1(k + 0.5 + 0.5 * t),
                                         _E1_DEG)
    return table


_E1_CHEB = _e1_table()


@nb.njit(error_model="numpy")
def e1(z):
    """The exponential integral E1(z) for z >= 0 (same values as scipy.special.exp1 to a few ulp)."""
    if z <= 1.0:
        acc = 0.0
        for k in range(_E1_TERMS - 1, -1, -1):          # Horner: Ein(z) = z (c1 + z (c2 + ...))
            acc = acc * z + _EIN[k]
        return -0.5772156649015329 - math.log(z) + acc * z
    if z >= _E1_ZMAX:
        return _exp1(z, 0)
    k = int(z)
    t = 2.0 * (z - k) - 1.0                             # the unit interval [k, k+1] onto [-1, 1]
    c = _E1_CHEB[k - 1]
    b1 = 0.0
    b2 = 0.0
    for j in range(_E1_DEG, 0, -1):                     # Clenshaw
        b1, b2 = 2.0 * t * b1 - b2 + c[j], b1
    return math.exp(-z) * (t * b1 - b2 + c[0])


@nb.njit(error_model="numpy")
def q_reg(b, z, half_integer):
    """Q(b, z) = Gamma(b, z)/Gamma(b), b > 0: closed forms when 2b is an integer, else SciPy.

    Q(1/2, z) = erfc(sqrt z), Q(1, z) = e^-z and the upward recurrence
    Q(c+1, z) = Q(c, z) + z^c e^-z / Gamma(c+1) (positive terms: stable)."""
    if not half_integer:
        return _gammaincc(b, z, 0)
    if b - math.floor(b) > 0.25:                       # b = 1/2, 3/2, ...
        q = math.erfc(math.sqrt(z))
        t = math.sqrt(z) * math.exp(-z) * 1.1283791670955126   # z^(1/2) e^-z / Gamma(3/2)
        c = 0.5
    else:                                               # b = 1, 2, ...
        q = math.exp(-z)
        t = z * q                                       # z e^-z / Gamma(2)
        c = 1.0
    while c < b - 0.25:
        q += t
        c += 1.0
        t *= z / c
    return q


@nb.njit(error_model="numpy")
def _pair(mode, s, a, alpha2, alpha_s, ga1, half, r2, want_energy):
    """(near(R), near'(R)/R) of one pair at squared distance r2 (softening included).

    near'(R)/R = -c_s R^{-(s+2)} Q(a+1, z): the direct force weight times one regularised
    incomplete gamma function (no cancellation at small R)."""
    z = alpha2 * r2
    if mode == _MODE_LOG:
        val = 0.5 * e1(z) if want_energy else 0.0
        return val, -math.exp(-z) / r2
    q1 = q_reg(a + 1.0, z, half)
    w = -abs(s) * r2 ** (-0.5 * s - 1.0) * q1
    if not want_energy:
        return 0.0, w
    if mode == _MODE_POS:
        val = r2 ** (-0.5 * s) * q_reg(a, z, half)
    else:                                   # -1 < a < 0: alpha^s e^-z / Gamma(a+1) - R^-s Q(a+1, z)
        val = alpha_s * math.exp(-z) / ga1 - r2 ** (-0.5 * s) * q1
    return val, w


@nb.njit(error_model="numpy")
def _cell_pairs(xs, starts, ncell, offsets, mode, s, a, alpha2, alpha_s, ga1, half, eps2, rc2, want_energy,
                rows, grads):
    """Accumulate the near field over the sorted particles ``xs`` (cells in C order)."""
    d = xs.shape[1]
    ntot = starts.shape[0] - 1
    coord = np.empty(d, dtype=np.int64)
    diff = np.empty(d)
    for c in range(ntot):
        lo_c, hi_c = starts[c], starts[c + 1]
        if lo_c == hi_c:
            continue
        rem = c
        for ax in range(d - 1, -1, -1):
            coord[ax] = rem % ncell[ax]
            rem //= ncell[ax]
        for o in range(offsets.shape[0] + 1):
            if o == 0:
                nb_c = c
            else:                               # a neighbour cell after c (half shell)
                nb_c = 0
                inside = True
                for ax in range(d):
                    q = coord[ax] + offsets[o - 1, ax]
                    if q < 0 or q >= ncell[ax]:
                        inside = False
                        break
                    nb_c = nb_c * ncell[ax] + q
                if not inside:
                    continue
            lo_n, hi_n = starts[nb_c], starts[nb_c + 1]
            for i in range(lo_c, hi_c):
                j0 = i + 1 if o == 0 else lo_n
                for j in range(j0, hi_n):
                    r2 = eps2
                    for ax in range(d):
                        diff[ax] = xs[i, ax] - xs[j, ax]
                        r2 += diff[ax] * diff[ax]
                    if r2 >= rc2:
                        continue
                    val, w = _pair(mode, s, a, alpha2, alpha_s, ga1, half, r2, want_energy)
                    if want_energy:
                        rows[i] += val
                        rows[j] += val
                    for ax in range(d):
                        f = w * diff[ax]
                        grads[i, ax] += f
                        grads[j, ax] -= f


def _half_offsets(d: int) -> np.ndarray:
    """The neighbour offsets in {-1, 0, 1}^d that are lexicographically positive (3^d - 1)/2."""
    grids = np.stack(np.meshgrid(*([np.array([-1, 0, 1])] * d), indexing="ij"), axis=-1).reshape(-1, d)
    keep = []
    for off in grids:
        nz = np.flatnonzero(off)
        if nz.size and off[nz[0]] > 0:
            keep.append(off)
    return np.asarray(keep, dtype=np.int64).reshape(-1, d)


def near_field_sums(x, s, softening, alpha, cutoff, want_energy):
    r"""Near-part row sums of the NFFT split over the pairs with :math:`R < R_c`.

    Parameters
    ----------
    x : float64 ndarray, shape (N, d), d in {1, 2, 3}
        Particle positions (physical units, host, finite).
    s : float
        Riesz exponent, ``-2 < s`` (``s = 0``: the log kernel).
    softening : float
        Plummer softening :math:`\varepsilon \ge 0`: :math:`R = \sqrt{r^2 + \varepsilon^2}`.
    alpha : float
        Split parameter :math:`\alpha > 0` (inverse length, physical units).
    cutoff : float
        Cut-off radius :math:`R_c > \varepsilon` (physical units, on the softened distance).
    want_energy : bool
        Also return the potential row sums (needs ``exp1``/``gammaincc`` per pair; the gradient
        alone needs only ``exp`` when s = 0).

    Returns
    -------
    rows : float64 ndarray, shape (N,)
        :math:`\sum_{l \ne k,\ R_{kl} < R_c} \mathrm{near}(R_{kl})` (zeros if not
        ``want_energy``).
    grads : float64 ndarray, shape (N, d)
        :math:`\sum_{l \ne k,\ R_{kl} < R_c} \mathrm{near}'(R_{kl})\,(\omega_k - \omega_l)/R_{kl}`.

    Raises
    ------
    ValueError
        If ``cutoff <= softening`` or ``alpha <= 0``.

    References
    ----------
    Potts and Steidl, SIAM J. Sci. Comput. 24 (2003) 2013-2037 (near field of fast summation);
    the split: :mod:`~rieszflow.engine.energy.fast_nufft`.
    """
    x = np.ascontiguousarray(x, dtype=np.float64)
    n, d = x.shape
    s, eps = float(s), float(softening)
    if not alpha > 0.0 or not cutoff > eps:
        raise ValueError(f"near field needs alpha > 0 and cutoff > softening, got alpha={alpha}, "
                         f"cutoff={cutoff}, softening={eps}")
    rows = np.zeros(n)
    grads = np.zeros((n, d))
    if n < 2:
        return rows, grads
    h = math.sqrt(cutoff * cutoff - eps * eps)          # largest plain distance of a near pair
    lo = x.min(axis=0)
    span = x.max(axis=0) - lo
    # cells of side >= h; at most ~2N cells in all (memory O(N) whatever the cut-off)
    ncell = np.maximum(1, np.floor(span / h).astype(np.int64))
    while int(np.prod(ncell)) > 2 * n + 8:
        ncell = np.maximum(1, ncell // 2)
    side = np.where(ncell > 0, span / ncell, 1.0)
    side = np.where(side > 0, side, 1.0)
    idx = np.minimum(((x - lo) / side).astype(np.int64), ncell - 1)
    key = np.ravel_multi_index(tuple(idx.T), tuple(ncell))
    order = np.argsort(key, kind="stable")
    counts = np.bincount(key, minlength=int(np.prod(ncell)))
    starts = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(counts, out=starts[1:])
    xs = x[order]
    a = 0.5 * s
    mode = _MODE_LOG if s == 0.0 else (_MODE_POS if a > 0.0 else _MODE_NEG)
    ga1 = sc.gamma(a + 1.0)
    r_s = np.zeros(n)
    g_s = np.zeros((n, d))
    _cell_pairs(xs, starts, ncell, _half_offsets(d), mode, s, a, alpha * alpha, alpha ** s, ga1, s == round(s), eps * eps,
                cutoff * cutoff, bool(want_energy), r_s, g_s)
    rows[order] = r_s
    grads[order] = g_s
    return rows, grads
