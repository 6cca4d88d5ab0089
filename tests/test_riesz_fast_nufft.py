"""NFFT fast summation (engine.energy.fast_nufft, method="nufft") against the direct sums.

Oracle: the direct Numba kernel (tested against closed forms in tests/test_riesz.py). Bound:
10 x the requested precision ``tol`` in the relative 2-norm over the particles, for the
potential row sums and the gradient, and per row relative to the largest row. The split
(incomplete gamma) is exact, so near-coincident pairs cost no accuracy (they are in the near
field, summed directly).
"""
from __future__ import annotations

import numpy as np
import pytest

from rieszflow.engine.energy import RieszEnergy, riesz_energy_and_grad
from rieszflow.engine.energy.fast_nufft import _far, _near
from rieszflow.engine.energy.riesz import _pair_sums


def ball(rng, n, d):
    x = rng.standard_normal((n, d))
    x /= np.linalg.norm(x, axis=1)[:, None]
    return x * rng.uniform(size=(n, 1)) ** (1.0 / d)


def check(x, s, soft, tol, bound):
    _, (rows0, grads0) = _pair_sums(x, s, soft, "numba", True, None)
    _, (rows, grads) = _pair_sums(x, s, soft, "nufft", True, None, tol)
    assert np.linalg.norm(rows - rows0) <= bound * np.linalg.norm(rows0)
    assert np.linalg.norm(grads - grads0) <= bound * np.linalg.norm(grads0)
    assert np.abs(rows - rows0).max() <= bound * np.abs(rows0).max()
    assert np.linalg.norm(grads - grads0, axis=1).max() <= bound * np.linalg.norm(grads0, axis=1).max()
    return rows, grads, rows0, grads0


@pytest.mark.parametrize("d", [1, 2])
@pytest.mark.parametrize("s", [0.0, 1.0, 0.5, -1.0, -1.5, 2.5])
def test_nufft_matches_direct(d, s):
    rng = np.random.default_rng(int(10 * s) + 100 * d)
    x = ball(rng, 800, d) * 3.0 + 1.0                       # off-centre, not unit scale
    x[:20] = x[20:40] + 1e-9 * rng.standard_normal((20, d))  # near-coincident pairs
    check(x, s, 0.0, 1e-8, 1e-7)


@pytest.mark.parametrize("s", [0.0, 1.0])
def test_nufft_3d(s):
    x = ball(np.random.default_rng(9), 300, 3)
    check(x, s, 0.0, 1e-6, 1e-5)


@pytest.mark.parametrize("s", [0.0, 2.0])
def test_nufft_softening(s):
    x = ball(np.random.default_rng(1), 600, 2)
    check(x, s, 0.05, 1e-8, 1e-7)


def test_nufft_tol_controls_error():
    x = ball(np.random.default_rng(2), 1000, 2)
    errs = []
    for tol in (1e-3, 1e-10):
        rows, grads, rows0, grads0 = check(x, 0.0, 0.0, tol, 10 * tol)
        errs.append(np.linalg.norm(grads - grads0) / np.linalg.norm(grads0))
    assert errs[1] < errs[0]


def test_split_is_exact():
    """far + near = g_s at R > 0 for every kind of exponent (the split loses nothing)."""
    R = np.logspace(-4, 1, 50)
    alpha = 7.0
    for s in (0.0, 1.0, 0.5, -1.0, -1.5, 3.0):
        g = -np.log(R) if s == 0 else (R ** -s if s > 0 else -(R ** -s))
        near, dnear = _near(s, alpha, R)
        np.testing.assert_allclose(_far(s, alpha, R) + near, g, rtol=1e-12, atol=1e-12)
        # derivative of the near part against a central difference
        h = 1e-6 * R
        fd = (_near(s, alpha, R + h)[0] - _near(s, alpha, R - h)[0]) / (2 * h)
        np.testing.assert_allclose(dnear, fd, rtol=1e-5, atol=1e-8 * np.abs(fd).max())
    # F is finite and continuous at R = 0
    for s in (0.0, 1.0, -1.0):
        f = _far(s, alpha, np.array([0.0, 1e-9]))
        assert np.isfinite(f).all() and abs(f[0] - f[1]) < 1e-8


def test_riesz_energy_nufft():
    x = ball(np.random.default_rng(4), 700, 2)
    for norm in ("paper", "mean_field"):
        v0, g0 = RieszEnergy(s=0.0, normalization=norm, method="numba").value_and_grad(x)
        v, g = RieszEnergy(s=0.0, normalization=norm, method="nufft", tol=1e-10).value_and_grad(x)
        assert abs(float(v) - float(v0)) <= 1e-9 * abs(float(v0))
        assert np.linalg.norm(g - g0) <= 1e-9 * np.linalg.norm(g0)


def test_nufft_bad_dimension():
    x = ball(np.random.default_rng(0), 50, 4)
    with pytest.raises(ValueError, match="d = 1, 2, 3, got d=4"):
        riesz_energy_and_grad(x, 1.0, method="nufft")


def test_auto_takes_nufft_from_its_crossover(monkeypatch):
    from rieszflow.engine.energy import fast

    x = ball(np.random.default_rng(6), 300, 2)
    g_fast = riesz_energy_and_grad(x, 0.0, method="nufft", tol=1e-4)[1]
    g_direct = riesz_energy_and_grad(x, 0.0, method="numba")[1]
    monkeypatch.setitem(fast.NUFFT_MIN_N, 2, 300)
    assert np.array_equal(riesz_energy_and_grad(x, 0.0, method="auto", tol=1e-4)[1], g_fast)
    monkeypatch.setitem(fast.NUFFT_MIN_N, 2, 301)
    assert np.array_equal(riesz_energy_and_grad(x, 0.0, method="auto", tol=1e-4)[1], g_direct)
    monkeypatch.setitem(fast.NUFFT_MIN_N, 2, None)
    assert np.array_equal(riesz_energy_and_grad(x, 0.0, method="auto", tol=1e-4)[1], g_direct)
    # s != 0 has its own crossover (the near field's incomplete gamma function per pair)
    monkeypatch.setitem(fast.NUFFT_MIN_N, 2, 300)
    monkeypatch.setitem(fast.NUFFT_MIN_N_POWER, 2, 301)
    assert np.array_equal(riesz_energy_and_grad(x, 1.5, method="auto", tol=1e-4)[1],
                          riesz_energy_and_grad(x, 1.5, method="numba")[1])
    monkeypatch.setitem(fast.NUFFT_MIN_N_POWER, 2, 300)
    assert np.array_equal(riesz_energy_and_grad(x, 1.5, method="auto", tol=1e-4)[1],
                          riesz_energy_and_grad(x, 1.5, method="nufft", tol=1e-4)[1])


def brute_near(x, s, eps, alpha, rc):
    """Every pair, NumPy's near part (the reference of the split) where R < R_c."""
    n, d = x.shape
    diff = x[:, None, :] - x[None, :, :]
    R = np.sqrt(np.sum(diff * diff, axis=-1) + eps * eps)
    mask = (R < rc) & ~np.eye(n, dtype=bool)
    val = np.zeros_like(R)
    dval = np.zeros_like(R)
    val[mask], dval[mask] = _near(s, alpha, R[mask])
    rows = val.sum(axis=1)
    w = np.where(mask, dval / np.where(mask, R, 1.0), 0.0)
    return rows, np.einsum("kl,kla->ka", w, diff)


@pytest.mark.parametrize("d", [1, 2, 3])
@pytest.mark.parametrize("s", [0.0, 1.0, 0.5, -1.0, -1.5])
def test_cell_list_near_field_matches_all_pairs(d, s):
    """The Numba cell list finds every pair within R_c once (clusters, cell edges, softening)."""
    from rieszflow.engine.energy._nufft_near import near_field_sums

    rng = np.random.default_rng(10 + d + int(4 * s))
    x = ball(rng, 500, d) * 2.0 - 0.5
    x[:30] = x[30:60] + 1e-6 * rng.standard_normal((30, d))   # close pairs
    x[60:90] = np.round(x[60:90], 1)                          # on cell edges / coincident up to 1e-16
    x[60:90, 0] += 1e-9 * np.arange(30)                       # (not exactly coincident)
    for eps, rc in ((0.0, 0.3), (0.05, 0.3), (0.0, 5.0)):     # 5.0: every pair is near (one cell)
        alpha = 4.0 / rc
        rows, grads = near_field_sums(x, s, eps, alpha, rc, True)
        rows0, grads0 = brute_near(x, s, eps, alpha, rc)
        np.testing.assert_allclose(rows, rows0, rtol=1e-11, atol=1e-11 * np.abs(rows0).max())
        np.testing.assert_allclose(grads, grads0, rtol=1e-11, atol=1e-11 * np.abs(grads0).max())
        _, grads_only = near_field_sums(x, s, eps, alpha, rc, False)
        np.testing.assert_array_equal(grads_only, grads)


def test_special_functions_match_scipy():
    """The compiled E1 and the closed-form Q(b, z) (2b integer) against SciPy, a few ulp."""
    import numba as nb
    import scipy.special as sc

    from rieszflow.engine.energy._nufft_near import e1, q_reg

    @nb.njit
    def both(z, b, half):
        out = np.empty((2, z.size))
        for i in range(z.size):
            out[0, i] = e1(z[i])
            out[1, i] = q_reg(b, z[i], half)
        return out

    z = np.concatenate([np.logspace(-14, 0, 3000), np.linspace(1.0, 70.0, 20001)])
    for b in (0.5, 1.0, 1.5, 2.0, 3.5, 0.75):
        e, q = both(z, b, b * 2 == round(b * 2))
        np.testing.assert_allclose(e, sc.exp1(z), rtol=2e-14)
        ok = sc.gammaincc(b, z) > 1e-290
        np.testing.assert_allclose(q[ok], sc.gammaincc(b, z[ok]), rtol=2e-13)


def test_cell_list_rejects_bad_cutoff():
    from rieszflow.engine.energy._nufft_near import near_field_sums

    with pytest.raises(ValueError, match="cutoff > softening"):
        near_field_sums(np.zeros((3, 2)), 0.0, 0.1, 1.0, 0.05, True)
