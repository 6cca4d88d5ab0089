"""Numba CPU kernels for the all-pairs Riesz energy and force (beside the xp reference).

The kernel returns *unnormalised* row sums over the off-diagonal pairs,

    rows[k]    = sum_{l != k} g_s(omega_k - omega_l)
    grads[k]   = sum_{l != k} grad g_s(omega_k - omega_l)
               = -c_s sum_{l != k} |omega_k - omega_l|_eps^{-(s+2)} (omega_k - omega_l),

with ``|w|_eps = sqrt(|w|^2 + eps^2)``, ``c_s = |s|`` for ``s != 0`` and ``c_0 = 1``;
the normalisations of paper 000, eq. (2.3)/(B.10), are applied by the caller
(:mod:`~rieszflow.engine.energy.riesz`).

**Each unordered pair is evaluated once.** ``g_s`` is even and its gradient odd, so the pair
(k, l) adds ``g`` to both rows and ``+w (omega_k - omega_l)`` to row k, ``-w (omega_k -
omega_l)`` to row l. The particles are cut into blocks of ``BLOCK`` (zero-padded); a *tile*
is a pair of blocks (I, J), I <= J, and evaluates the pairs between them, adding to the
accumulators of both blocks. Thread-parallel accumulation without races or atomics: the
tiles are scheduled in rounds of a round-robin tournament (the circle method), so within a
round no two tiles touch the same block, and each round is one ``prange`` over its tiles
(round 0: the diagonal tiles (I, I)). Every accumulator therefore receives its terms in an
order fixed by the schedule, the same for every thread count: the result does not depend on
the number of threads, bit for bit. Work per tile is the same (BLOCK^2 pairs), so the
rounds balance; memory is O(N d).

Exponent special cases (particles_pde_reference.md sec. 1.4): the force weight
``r^{-(s+2)}`` is computed as an integer power of

* ``1/r^2``           when ``s`` is an even integer (no root; ``s = 0`` is the log case),
* ``1/sqrt(r^2)``     when ``s`` is an odd integer (e.g. ``s = d - 2`` for odd d),
* ``1/sqrt(sqrt(r^2))`` when ``s`` is a half-integer (two sqrt),

and by ``pow`` otherwise. The energy needs no extra transcendental call for
``s != 0`` because ``r^{-s} = r^{-(s+2)} * r^2``.

**Reciprocal square root without the divider** (odd integer ``s``): ``y = 1/sqrt(x)`` comes
from the bit-level estimate ``y0 = bits^-1(R - bits(x) >> 1)`` with ``R =
0x5FE6EB50C7B537A9`` (relative error at most 3.42e-2 for every normal ``x``; C. Lomont,
"Fast inverse square root", 2003; M. Robertson, "A Brief History of InvSqrt", 2012) and four
Newton steps ``y <- y (3/2 - x y^2 / 2)``, the last one written as ``y + (y/2) e`` with the
residual ``e = 1 - (x y) y`` from a fused multiply-add (:func:`fma`: one rounding, so ``e``
is accurate to about ``u`` although ``x y^2`` is close to 1). The relative error of the
estimate falls as ``e_{n+1} = (3/2) e_n^2 + e_n^3/2``: 3.42e-2, 1.8e-3, 4.7e-6, 3.3e-11,
then below the unit roundoff ``u = 2^-53``, so the result is within a few ``u`` of the exact
``1/sqrt(x)`` (the sqrt-then-divide it replaces is within 1.5 ``u``); only multiplies, FMAs
and integer operations, which vectorise at full width, instead of a vector square root and
a division (the slowest instructions of the pair). Zero, subnormal and infinite ``x`` (where
the bit estimate does not hold) are recomputed as ``1/sqrt(x)``. ``tests/test_riesz.py``
checks every path against the NumPy reference with a tolerance derived from this analysis,
near-coincident pairs included.

``fastmath`` is off: with it LLVM may reassociate sums and replace divisions by
approximate reciprocals, so results would depend on the vector width. SIMD is
obtained without it: the columns of a tile are element-wise loops over the block
(vectorised), and each row's sums are kept in ``LANES`` explicit partial accumulators
(a fixed, documented summation order, the same for every thread count and machine).
"""
from __future__ import annotations

import math

import numba as nb
import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

#: exponent modes of :func:`riesz_pair_sums`
MODE_LOG, MODE_EVEN, MODE_ODD, MODE_HALF, MODE_POW = 0, 1, 2, 3, 4

#: bit-level estimate constant of 1/sqrt for float64 (see the module docstring)
RSQRT_MAGIC = 0x5FE6EB50C7B537A9
#: number of Newton steps after the estimate (3.42e-2 -> below 2^-53)
RSQRT_NEWTON_STEPS = 4
_NORMAL_MIN = 2.2250738585072014e-308
_FLOAT_MAX = 1.7976931348623157e308


def exponent_mode(s: float):
    """Choose the cheapest exact evaluation of ``r^{-(s+2)}``.

    Parameters
    ----------
    s : float
        Riesz exponent, ``s > -2``.

    Returns
    -------
    mode : int
        One of ``MODE_LOG, MODE_EVEN, MODE_ODD, MODE_HALF, MODE_POW``.
    power : int
        Integer power of the base (``1/r^2``, ``1/r`` or ``1/sqrt(r)``); 0 for
        ``MODE_LOG`` and ``MODE_POW``.
    """
    if s == 0.0:
        return MODE_LOG, 0
    m = s + 2.0  # exponent of 1/r in the force weight, m > 0
    if 2.0 * m == round(2.0 * m) and 2.0 * m <= 128:
        q = int(round(2.0 * m))  # r^{-m} = (r^{-1/2})^{2m}
        if q % 4 == 0:
            return MODE_EVEN, q // 4
        if q % 2 == 0:
            return MODE_ODD, q // 2
        return MODE_HALF, q
    return MODE_POW, 0


@intrinsic
def fma(typingctx, a, b, c):
    """``a * b + c`` with one rounding (LLVM ``llvm.fma.f64``; vectorises to FMA instructions).

    Numba intrinsic, callable from jitted code only.

    Parameters
    ----------
    a, b, c : float64

    Returns
    -------
    float64
        The correctly rounded ``a * b + c`` (IEEE 754 fusedMultiplyAdd).
    """
    if not all(isinstance(t, types.Float) for t in (a, b, c)):
        return None
    sig = types.float64(types.float64, types.float64, types.float64)

    def codegen(context, builder, signature, args):
        vals = [context.cast(builder, v, t, types.float64) for v, t in zip(args, signature.args)]
        dbl = ir.DoubleType()
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(dbl, [dbl, dbl, dbl]), "llvm.fma.f64")
        return builder.call(fn, vals)

    return sig, codegen


@nb.njit(cache=True, error_model="numpy")
def rsqrt_newton(x, y, ybits, xbits):
    """``y[k] = 1/sqrt(x[k])`` by the bit estimate and Newton steps (module docstring), in place.

    Parameters
    ----------
    x : float64 array, shape (m,)
        Arguments, ``>= 0``.
    y : float64 array, shape (m,)
        Output; ``ybits`` is its int64 view.
    ybits, xbits : int64 arrays, shape (m,)
        ``y.view(np.int64)`` and ``x.view(np.int64)``.
    """
    m = x.shape[0]
    for k in range(m):
        ybits[k] = RSQRT_MAGIC - (xbits[k] >> 1)
    nbad = 0
    for k in range(m):
        xk = x[k]
        yk = y[k]
        h = 0.5 * xk
        yk = yk * fma(-(h * yk), yk, 1.5)
        yk = yk * fma(-(h * yk), yk, 1.5)
        yk = yk * fma(-(h * yk), yk, 1.5)
        e = fma(-(xk * yk), yk, 1.0)
        y[k] = fma(0.5 * yk, e, yk)
        nbad += 0 if (xk >= _NORMAL_MIN and xk <= _FLOAT_MAX) else 1
    if nbad:
        for k in range(m):
            xk = x[k]
            if not (xk >= _NORMAL_MIN and xk <= _FLOAT_MAX):
                y[k] = 1.0 / math.sqrt(xk)


#: lane count of the partial row sums and the block size (a multiple of LANES)
LANES, BLOCK = 8, 256


@nb.njit(cache=True)
def round_robin(nblocks):
    """Round-robin schedule of the off-diagonal block pairs (the circle method).

    Parameters
    ----------
    nblocks : int
        Number of blocks ``B >= 1``.

    Returns
    -------
    int64 array, shape (R, P, 2)
        ``R = B' - 1`` rounds of ``P = B'/2`` pairs ``(I, J)``, ``I < J``, ``B' = B`` rounded up
        to even; every pair ``I < J < B`` occurs exactly once and no block twice in a round.
        Pairs with ``J == B`` (the bye of an odd ``B``) are to be skipped.
    """
    bp = nblocks + (nblocks & 1)
    nr = max(bp - 1, 0)
    half = bp // 2
    sched = np.empty((nr, half, 2), np.int64)
    for r in range(nr):
        sched[r, 0, 0] = r
        sched[r, 0, 1] = bp - 1
        for k in range(1, half):
            a = (r + k) % nr
            b = (r - k + nr) % nr
            sched[r, k, 0] = min(a, b)
            sched[r, k, 1] = max(a, b)
    return sched


@nb.njit(cache=True, error_model="numpy")
def _tile(xt, n, i0, j0, diag, s, eps2, mode, power, want_energy, fsum, esum):
    """Pairs between block rows [i0, i0+BLOCK) and block columns [j0, j0+BLOCK).

    Adds ``w (x_i - x_j)`` to ``fsum[:, i]``, its negative to ``fsum[:, j]`` and ``g`` to
    ``esum[i]`` and ``esum[j]`` (``diag``: i0 == j0, pairs j > i only).
    """
    d = xt.shape[0]
    r2b = np.empty(BLOCK)
    wb = np.empty(BLOCK)
    tb = np.empty(BLOCK)
    db = np.empty((d, BLOCK))
    acc = np.empty((d, LANES))
    acce = np.empty(LANES)
    r2bits = r2b.view(np.int64)
    tbits = tb.view(np.int64)
    sign = 1.0 if s > 0.0 else -1.0
    g0 = math.inf if s > 0.0 else 0.0  # g_s at coincident points (w * r2 = inf * 0)
    hi = min(BLOCK, n - j0)            # block-local index of the first padding column
    mc = min(BLOCK, (hi + LANES - 1) // LANES * LANES)  # columns evaluated: to the lane multiple after hi
    for i in range(i0, min(i0 + BLOCK, n)):
        lo = i - j0 + 1 if diag else 0  # diagonal tile: columns j <= i are masked
        for k in range(mc):
            r2b[k] = eps2
        for a in range(d):
            xia = xt[a, i]
            for k in range(mc):
                t = xia - xt[a, j0 + k]
                db[a, k] = t
                r2b[k] += t * t
        # mask the padding, the self pair and j < i BEFORE evaluating the kernel
        for k in range(lo):
            r2b[k] = 1.0
        for k in range(hi, mc):
            r2b[k] = 1.0
        # force weight r^{-(s+2)}
        if mode == MODE_LOG:
            for k in range(mc):
                wb[k] = 1.0 / r2b[k]
        elif mode == MODE_POW:
            e = -0.5 * (s + 2.0)
            for k in range(mc):
                wb[k] = r2b[k] ** e
        else:
            if mode == MODE_EVEN:
                for k in range(mc):
                    tb[k] = 1.0 / r2b[k]
            elif mode == MODE_ODD:
                rsqrt_newton(r2b[:mc], tb[:mc], tbits[:mc], r2bits[:mc])
            else:
                for k in range(mc):
                    tb[k] = 1.0 / math.sqrt(math.sqrt(r2b[k]))
            if power == 1:
                for k in range(mc):
                    wb[k] = tb[k]
            else:
                for k in range(mc):
                    wb[k] = 1.0
                p = power  # wb = tb**power by binary exponentiation, element-wise
                while p > 0:
                    if p & 1:
                        for k in range(mc):
                            wb[k] *= tb[k]
                    p >>= 1
                    if p > 0:
                        for k in range(mc):
                            tb[k] *= tb[k]
        for k in range(lo):
            wb[k] = 0.0
        for k in range(hi, mc):
            wb[k] = 0.0
        if want_energy:
            if mode == MODE_LOG:
                for k in range(mc):
                    tb[k] = -0.5 * math.log(r2b[k])
            else:
                for k in range(mc):
                    tb[k] = sign * (wb[k] * r2b[k]) if r2b[k] > 0.0 else g0  # r^{-s} = r^{-(s+2)} r^2
            for k in range(lo):
                tb[k] = 0.0
            for k in range(hi, mc):
                tb[k] = 0.0
            for lane in range(LANES):
                acce[lane] = 0.0
            for k0 in range(0, mc, LANES):
                for lane in range(LANES):
                    acce[lane] += tb[k0 + lane]
            for k in range(mc):
                esum[j0 + k] += tb[k]
            e_row = 0.0
            for lane in range(LANES):
                e_row += acce[lane]
            esum[i] += e_row
        for a in range(d):
            for lane in range(LANES):
                acc[a, lane] = 0.0
            for k0 in range(0, mc, LANES):
                for lane in range(LANES):
                    acc[a, lane] += wb[k0 + lane] * db[a, k0 + lane]
            for k in range(mc):
                fsum[a, j0 + k] -= wb[k] * db[a, k]
            g = 0.0
            for lane in range(LANES):
                g += acc[a, lane]
            fsum[a, i] += g


@nb.njit(parallel=True, cache=True)
def _tile_round(xt, n, pairs, diag, s, eps2, mode, power, want_energy, fsum, esum):
    """One round of tiles in parallel: the block ``pairs`` (P, 2) (``diag``: pairs (I, I)).

    No two tiles of a round share a block, so the threads write disjoint accumulator entries.
    """
    nblk = xt.shape[1] // BLOCK
    for p in nb.prange(pairs.shape[0]):
        bi = pairs[p, 0]
        bj = pairs[p, 1]
        if bj < nblk:
            _tile(xt, n, bi * BLOCK, bj * BLOCK, diag, s, eps2, mode, power, want_energy, fsum, esum)


@nb.njit(cache=True)
def riesz_pair_sums(x, s, eps2, mode, power, want_energy):
    """Row sums of g_s and grad g_s over the off-diagonal pairs, each pair once (module docstring).

    Parameters
    ----------
    x : float64 array, shape (N, d)
    s : float
        Riesz exponent, ``s > -2``.
    eps2 : float
        Squared softening length, ``>= 0``.
    mode, power : int
        From :func:`exponent_mode`.
    want_energy : bool
        Compute ``rows`` (otherwise it is returned as zeros and no log is taken).

    Returns
    -------
    rows : float64 array, shape (N,)
        ``sum_{l != k} g_s(x_k - x_l)``.
    grads : float64 array, shape (N, d)
        ``sum_{l != k} grad g_s(x_k - x_l)``.
    """
    n, d = x.shape
    nblk = max(1, (n + BLOCK - 1) // BLOCK)
    npad = nblk * BLOCK
    xt = np.zeros((d, npad))  # transposed, zero-padded copy: unit-stride column blocks
    for a in range(d):
        for j in range(n):
            xt[a, j] = x[j, a]
    fsum = np.zeros((d, npad))  # sum_l w_kl (x_k - x_l)
    esum = np.zeros(npad)
    diag = np.empty((nblk, 2), np.int64)
    for b in range(nblk):
        diag[b, 0] = b
        diag[b, 1] = b
    _tile_round(xt, n, diag, True, s, eps2, mode, power, want_energy, fsum, esum)
    sched = round_robin(nblk)
    for r in range(sched.shape[0]):
        _tile_round(xt, n, sched[r], False, s, eps2, mode, power, want_energy, fsum, esum)
    coef = 1.0 if s == 0.0 else abs(s)
    rows = np.zeros(n)
    grads = np.empty((n, d))
    for k in range(n):
        if want_energy:
            rows[k] = esum[k]
        for a in range(d):
            grads[k, a] = -coef * fsum[a, k]
    return rows, grads


@nb.njit(cache=True)
def _g_scalar(r2, s, eps2):
    """g_s at squared distance r2 (softened): r^-s (s > 0), -log r (s = 0), -r^-s (s < 0)."""
    r2 = r2 + eps2
    if s == 0.0:
        return -0.5 * math.log(r2)
    v = r2 ** (-0.5 * s)
    return v if s > 0.0 else -v


@nb.njit(cache=True)
def component_sweep(omega, proposal, log_a, log_u, inside, coef, s, eps):
    """One Metropolis-within-Gibbs sweep's pair correction, in place on ``omega``.

    For k = 0..N-1 (in order), if ``inside[k]``: ``d = sum_{l != k} [g_s(y_k - omega_l) -
    g_s(omega_k - omega_l)]`` at the current ``omega``; accept when ``log_u[k] < log_a[k] - coef * d``
    and then ``omega[k] = proposal[k]``. Returns the accepted mask (bool, (N,)).
    """
    n, dim = omega.shape
    acc = np.zeros(n, dtype=np.bool_)
    eps2 = eps * eps
    for k in range(n):
        if not inside[k]:
            continue
        dsum = 0.0
        for l in range(n):
            if l == k:
                continue
            rn = 0.0
            ro = 0.0
            for j in range(dim):
                a = proposal[k, j] - omega[l, j]
                b = omega[k, j] - omega[l, j]
                rn += a * a
                ro += b * b
            dsum += _g_scalar(rn, s, eps2) - _g_scalar(ro, s, eps2)
        la = log_a[k] - coef * dsum
        if log_u[k] < la:                  # NaN rejects
            acc[k] = True
            for j in range(dim):
                omega[k, j] = proposal[k, j]
    return acc


@nb.njit(cache=True, error_model="numpy")
def _pair_sums(z, k, omega, s, eps2, grad, skip):
    """``sum_{l != k} g_s(z - omega_l)`` and, in ``grad`` (length d, overwritten), its gradient in z
    (0 when ``skip``). A coincident pair (distance 0, no softening) adds no force; its energy is
    ``g_s(0)``: 0 for s < 0, +inf for s >= 0 (so a proposal onto another particle is rejected)."""
    n, dim = omega.shape
    e = 0.0
    for a in range(dim):
        grad[a] = 0.0
    if skip:
        return e
    coef = 1.0 if s == 0.0 else abs(s)
    for l in range(n):
        if l == k:
            continue
        r2 = eps2
        for a in range(dim):
            w = z[a] - omega[l, a]
            r2 += w * w
        if r2 == 0.0:
            if s >= 0.0:
                e = math.inf
            continue
        if s == 0.0:
            e -= 0.5 * math.log(r2)
            fw = 1.0 / r2
        elif s == 1.0:                     # Coulomb in 3-D: one sqrt and one divide, no pow
            inv = 1.0 / math.sqrt(r2)
            e += inv
            fw = inv * inv * inv
        elif s == -1.0:                    # Coulomb in 1-D
            rr = math.sqrt(r2)
            e -= rr
            fw = 1.0 / rr
        else:
            fw = r2 ** (-0.5 * s - 1.0)
            e += fw * r2 if s > 0.0 else -fw * r2
        for a in range(dim):
            grad[a] -= coef * fw * (z[a] - omega[l, a])
    return e


@nb.njit(cache=True, error_model="numpy")
def metropolized_sweep(omega, others, xi, log_u, lo, hi, gamma, pair_coef, s, eps2, h, beta):
    """One sweep of the Metropolized Euler-Maruyama step, particle by particle, in place on ``omega``.

    For k = 0..N-1 (in order), with the pair sums taken over the rows of ``others`` (``omega``
    itself: the current positions, particles before k already moved; a copy of the sweep's
    initial positions: all particles see the same configuration): the Euler proposal
    ``y = x_k + h b(x_k) + sqrt(2 h / beta) xi_k`` with the full drift
    ``b(z) = -gamma z - pair_coef sum_{l != k} grad g_s(z - others_l)``, rejected outside the
    box ``[lo, hi]`` (or when not finite), else accepted when ``log_u[k] < -beta dH - beta / (4 h)
    (|x - y - h b(y)|^2 - |y - x - h b(x)|^2)`` with ``dH = gamma (|y|^2 - |x|^2) / 2 + pair_coef
    (sum g(y - .) - sum g(x - .))``. Returns the outcome per particle (int8, (N,)): 1 accepted,
    0 rejected, -1 outside the box, -2 not finite.
    """
    n, dim = omega.shape
    acc = np.zeros(n, dtype=np.int8)
    gx = np.empty(dim)
    gy = np.empty(dim)
    x = np.empty(dim)
    y = np.empty(dim)
    noise = math.sqrt(2.0 * h / beta)
    for k in range(n):
        for a in range(dim):
            x[a] = omega[k, a]
        ex = _pair_sums(x, k, others, s, eps2, gx, pair_coef == 0.0)
        code = 0
        for a in range(dim):
            y[a] = x[a] + h * (-gamma * x[a] - pair_coef * gx[a]) + noise * xi[k, a]
            if not math.isfinite(y[a]):
                code = -2
            elif code == 0 and not (lo[a] <= y[a] <= hi[a]):
                code = -1
        if code < 0:
            acc[k] = code
            continue
        ey = _pair_sums(y, k, others, s, eps2, gy, pair_coef == 0.0)
        dh = pair_coef * (ey - ex)
        fwd = 0.0
        back = 0.0
        for a in range(dim):
            dh += 0.5 * gamma * (y[a] * y[a] - x[a] * x[a])
            f = y[a] - x[a] - h * (-gamma * x[a] - pair_coef * gx[a])
            b = x[a] - y[a] - h * (-gamma * y[a] - pair_coef * gy[a])
            fwd += f * f
            back += b * b
        la = -beta * dh - beta / (4.0 * h) * (back - fwd)
        if log_u[k] < la:                              # NaN rejects
            acc[k] = 1
            for a in range(dim):
                omega[k, a] = y[a]
    return acc
