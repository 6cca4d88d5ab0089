"""The direct Numba kernel evaluates each unordered pair once, with a divider-free 1/sqrt.

Checks of engine.energy._numba_kernels against the NumPy reference (method="numpy") with
tolerances derived from a floating-point error analysis (below), near-coincident pairs
included; the reciprocal square root against an extended-precision one; the round-robin
schedule's disjointness (the no-race argument); and independence of the thread count.
"""
from __future__ import annotations

import numba as nb
import numpy as np
import pytest

from rieszflow.engine.energy import _numba_kernels as nk
from rieszflow.engine.energy import riesz_energy_grad, riesz_potential

U = 2.0 ** -53  # unit roundoff of float64


def gamma(m):
    """Higham's gamma_m = m u / (1 - m u) (Accuracy and Stability of Numerical Algorithms, eq. (3.8))."""
    return m * U / (1.0 - m * U)


# ----------------------------------------------------------------------------- reciprocal square root

#: bound on the relative error of rsqrt_newton: the fourth Newton step leaves (3/2) e_3^2 ~ 2e-21
#: of the estimate's error; the residual e = 1 - (x y) y from an FMA is off by at most about
#: 2u (rounding of x*y and of the FMA), halved by the step, plus the step's own rounding u/2 and
#: the input's rounding of y: at most 2.5u in all; 3u leaves a margin
RSQRT_RTOL = 3.0 * U


def rsqrt(x):
    x = np.ascontiguousarray(x, dtype=np.float64)
    y = np.empty_like(x)
    nk.rsqrt_newton(x, y, y.view(np.int64), x.view(np.int64))
    return y


def test_rsqrt_newton_is_within_a_few_ulp_over_the_whole_normal_range():
    rng = np.random.default_rng(1)
    # every binade of the normal range, several mantissas each, plus the extremes
    x = np.ldexp(rng.uniform(1.0, 2.0, size=(2046, 40)), np.arange(-1022, 1024)[:, None]).ravel()
    x = np.concatenate([x, [np.finfo(float).tiny, np.finfo(float).max, 1.0, 4.0, 2.0, 0.25]])
    exact = 1.0 / np.sqrt(x.astype(np.longdouble))          # 64-bit mantissa on x86
    rel = np.abs((rsqrt(x) - exact) / exact).astype(float)
    assert rel.max() <= RSQRT_RTOL, rel.max() / U
    # and it is no worse than the sqrt-then-divide it replaces (<= 1.5 u) by more than a ulp
    assert rel.max() <= np.abs((1.0 / np.sqrt(x) - exact) / exact).astype(float).max() + U


def test_rsqrt_newton_falls_back_to_the_exact_formula_outside_the_normal_range():
    x = np.array([0.0, 5e-324, 1e-310, np.finfo(float).tiny / 2, np.inf, 3.0, 0.0, 7.5])
    with np.errstate(divide="ignore"):
        expected = 1.0 / np.sqrt(x)
    got = rsqrt(x)
    special = ~((x >= np.finfo(float).tiny) & (x <= np.finfo(float).max))
    np.testing.assert_array_equal(got[special], expected[special])
    np.testing.assert_allclose(got[~special], expected[~special], rtol=RSQRT_RTOL, atol=0)


# ----------------------------------------------------------------------------- the schedule

@pytest.mark.parametrize("nblocks", range(1, 10))
def test_round_robin_pairs_every_block_pair_once_and_no_block_twice_per_round(nblocks):
    sched = nk.round_robin(nblocks)
    seen = []
    for rnd in sched:
        real = [tuple(p) for p in rnd if p[1] < nblocks]
        blocks = [b for p in real for b in p]
        assert len(blocks) == len(set(blocks))                   # disjoint: no two threads share a block
        assert all(i < j for i, j in real)
        seen += real
    assert sorted(seen) == [(i, j) for i in range(nblocks) for j in range(i + 1, nblocks)]


# ----------------------------------------------------------------------------- pair sums against the reference

def error_bounds(x, s, eps):
    """Per-row bounds on |numba - numpy| of the potential and the gradient (normalised as returned).

    Each implementation computes a term of the gradient, w_kl (x_k - x_l)_a with w = r^{-(s+2)}:
    differences rounded (u), r^2 = eps^2 + sum of d squares (relative error gamma_{d+3}),
    amplified by (s+2)/2 in w; the weight's own evaluation (pow: ~1u; 1/sqrt or 1/r^2 then p
    multiplies: (3 + 2p)u; at most 8u + 2p u for both) and the product (2u). The row sum of
    N - 1 terms adds gamma_N times the sum of the terms' absolute values S_k (Higham, eq. (4.4)).
    So each implementation is within (delta + gamma_N) S_k of the exact sum, and the two within
    twice that. The energy terms g = r^{-s} (or -log r) the same way, with the log's absolute
    error 0.5 * gamma_{d+3} per term.
    """
    n, d = x.shape
    mode, power = nk.exponent_mode(s)
    diff = x[:, None, :] - x[None, :, :]
    r2 = (diff * diff).sum(-1) + eps * eps
    np.fill_diagonal(r2, 1.0)
    w = r2 ** (-0.5 * (s + 2.0))
    np.fill_diagonal(w, 0.0)
    delta = (0.5 * abs(s + 2.0) + 1.0) * gamma(d + 3) + (10 + 2 * power) * U
    coef = 1.0 if s == 0 else abs(s)
    s_grad = coef * (w[..., None] * np.abs(diff)).sum(1) / (n * (n - 1.0))
    if s == 0:
        g = np.abs(0.5 * np.log(r2)) + 0.5
    else:
        g = r2 ** (-0.5 * s)
    np.fill_diagonal(g, 0.0)
    s_pot = g.sum(1) / (n - 1.0)
    factor = 2.0 * (delta + gamma(n))
    return factor * s_pot, factor * s_grad


def cloud_with_near_pairs(n, d, s, seed):
    """A Gaussian cloud with near-coincident pairs at 1e-7 and at the closest distance whose
    force weight r^{-(s+2)} is still below 1e250 (no overflow) and r^2 a normal number ( placed near the origin, where
    float64 resolves it)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    tiny = max(10.0 ** (-250.0 / (s + 2.0)), 1e-150)         # and r^2 >= 1e-300 (normal)
    for i, delta in ((0, 1e-7), (1, tiny), (2, 1e-3)):
        if n < 2 * i + 2:
            break
        if delta < 1e-15:                                    # resolvable only near the origin
            x[i] = 10.0 * delta * rng.normal(size=d)
        v = rng.normal(size=d)
        x[n - 1 - i] = x[i] + delta * v / np.linalg.norm(v)
    return x


@pytest.mark.parametrize("n,d", ((2, 1), (3, 3), (40, 2), (300, 3), (600, 3), (520, 1)))
@pytest.mark.parametrize("s", (1.0, 3.0, -1.0, 0.0, 2.0, 0.5, 0.73))
@pytest.mark.parametrize("softening", (0.0, 0.05))
def test_pair_once_kernel_matches_reference_within_the_error_bound(n, d, s, softening):
    """Every exponent path (odd: Newton 1/sqrt; log; even; half-integer; pow), one to three blocks
    of 256 (an odd count: the round-robin bye), near-coincident pairs in every cloud."""
    x = cloud_with_near_pairs(n, d, s, seed=n + 7 * d)
    b_pot, b_grad = error_bounds(x, s, softening)
    pot_ref = riesz_potential(x, s, softening, method="numpy")
    grad_ref = riesz_energy_grad(x, s, softening, method="numpy")
    pot = riesz_potential(x, s, softening, method="numba")
    grad = riesz_energy_grad(x, s, softening, method="numba")
    assert np.all(np.abs(pot - pot_ref) <= b_pot)
    assert np.all(np.abs(grad - grad_ref) <= b_grad)


def test_a_missing_pair_would_be_caught_by_the_bound():
    """The tolerance detects one pair's force left out (what a scheduling error would do)."""
    n, d, s = 300, 3, 1.0
    x = cloud_with_near_pairs(n, d, s, seed=5)
    _, b_grad = error_bounds(x, s, 0.0)
    grad = riesz_energy_grad(x, s, 0.0, method="numba")
    w = np.sum((x[10] - x[200]) ** 2) ** -1.5
    broken = grad.copy()
    broken[10] -= -s * w * (x[10] - x[200]) / (n * (n - 1.0))
    assert np.any(np.abs(broken - grad) > b_grad)


def test_coincident_pair_gives_the_same_non_finite_values_as_the_reference():
    x = np.random.default_rng(3).normal(size=(270, 3))
    x[269] = x[4]                                            # r^2 = 0: the exact-formula fallback
    with np.errstate(divide="ignore", invalid="ignore"):
        for s in (1.0, 3.0):
            ref = riesz_energy_grad(x, s, method="numpy")
            got = riesz_energy_grad(x, s, method="numba")
            np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
            assert np.isnan(got[[4, 269]]).all()
            assert np.isinf(riesz_potential(x, s, method="numba")[[4, 269]]).all()


def test_result_does_not_depend_on_the_thread_count():
    if nb.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("Numba was started with one thread (NUMBA_NUM_THREADS=1)")
    x = np.random.default_rng(2).normal(size=(1100, 3))
    mode, power = nk.exponent_mode(1.0)
    before = nb.get_num_threads()
    try:
        out = []
        for t in (1, 2):
            nb.set_num_threads(t)
            out.append(nk.riesz_pair_sums(x, 1.0, 0.0, mode, power, True))
    finally:
        nb.set_num_threads(before)
    np.testing.assert_array_equal(out[0][0], out[1][0])
    np.testing.assert_array_equal(out[0][1], out[1][1])
