"""Fast Riesz sums (engine.energy.fast): FMM3D against the direct sums, dispatch, errors.

The oracle is the direct O(N^2) sum (Numba kernel, itself tested against closed forms in
tests/test_riesz.py) and an independent NumPy pair loop. Error bounds: the requested precision
``tol`` (FMM3D's 2-norm relative precision) plus, for near-coincident pairs, the rounding of the
coordinates: FMM3D maps the particles into its root box, so a pair at distance r carries a
relative error of about u R / r (u = 2^-53, R the cloud's extent); summed over a row k this is
at most ``C u R sum_l r_kl^{-(s+1)}`` for the potential and ``C u R sum_l r_kl^{-(s+2)}`` for
the gradient, with C = 64 (d = 3 coordinates, a few operations each, and a margin).
"""
from __future__ import annotations

import numpy as np
import pytest

from rieszflow.engine.energy import RieszEnergy, riesz_energy_and_grad, riesz_potential
from rieszflow.engine.energy import fast
from rieszflow.engine.energy.fast_rows import riesz_row_sums
from rieszflow.engine.energy.riesz import _pair_sums

U = 2.0 ** -53


def ball(rng, n, d=3):
    """n uniform points in the unit ball of R^d."""
    x = rng.standard_normal((n, d))
    x /= np.linalg.norm(x, axis=1)[:, None]
    return x * rng.uniform(size=(n, 1)) ** (1.0 / d)


def clouds():
    """(name, cloud): uniform ball; two clusters of very different scale; near-coincident pairs."""
    rng = np.random.default_rng(7)
    out = [("ball", ball(rng, 1500))]
    out.append(("clusters", np.concatenate([ball(rng, 1000) * 1e-3, ball(rng, 500) + 5.0])))
    x = ball(rng, 1500)
    x[:60] = x[60:120] + rng.standard_normal((60, 3)) * np.logspace(-9, -4, 60)[:, None]
    out.append(("near-coincident", x))
    return out


def direct_with_rounding_bound(x):
    """Direct rows, grads and the per-row rounding terms u R sum r^-2, u R sum r^-3 (NumPy, float64)."""
    diff = x[:, None, :] - x[None, :, :]
    r = np.sqrt(np.sum(diff * diff, axis=-1))
    np.fill_diagonal(r, np.inf)
    rows = np.sum(1.0 / r, axis=1)
    grads = -np.sum(diff / r[..., None] ** 3, axis=1)
    extent = np.max(np.abs(x - x.mean(axis=0)))
    return rows, grads, U * extent * np.sum(r ** -2.0, axis=1), U * extent * np.sum(r ** -3.0, axis=1)


@pytest.mark.parametrize("name,x", clouds(), ids=[c[0] for c in clouds()])
@pytest.mark.parametrize("tol", [1e-6, 1e-10])
def test_fmm_rows_match_direct_sums(name, x, tol):
    rows0, grads0, round_pot, round_grad = direct_with_rounding_bound(x)
    # the library's direct kernel agrees with the independent NumPy sums
    _, (rows_nb, grads_nb) = _pair_sums(x, 1.0, 0.0, "numba", True, None)
    np.testing.assert_allclose(rows_nb, rows0, rtol=1e-12)
    _, (rows, grads) = _pair_sums(x, 1.0, 0.0, "fmm", True, None, tol)
    # 2-norm relative error over the particles, the quantity FMM3D's eps controls, plus rounding
    pot_err = np.linalg.norm(rows - rows0)
    assert pot_err <= 10 * tol * np.linalg.norm(rows0) + 64 * np.linalg.norm(round_pot), (name, pot_err)
    grad_err = np.linalg.norm(grads - grads0)
    assert grad_err <= 10 * tol * np.linalg.norm(grads0) + 64 * np.linalg.norm(round_grad), (name, grad_err)
    # row by row: no row is off by more than the precision times the largest row plus its rounding
    assert np.all(np.abs(rows - rows0) <= 10 * tol * np.abs(rows0).max() + 64 * round_pot)
    row_err = np.linalg.norm(grads - grads0, axis=1)
    assert np.all(row_err <= 10 * tol * np.linalg.norm(grads0, axis=1).max() + 64 * round_grad)


def test_fmm_precision_is_met_without_close_pairs():
    """A well-separated cloud: the error follows tol (no rounding floor above 1e-13)."""
    rng = np.random.default_rng(3)
    x = ball(rng, 2000)
    rows0, grads0, _, _ = direct_with_rounding_bound(x)
    errs = []
    for tol in (1e-4, 1e-8, 1e-12):
        _, (rows, grads) = _pair_sums(x, 1.0, 0.0, "fmm", True, None, tol)
        e = np.linalg.norm(grads - grads0) / np.linalg.norm(grads0)
        assert e <= 10 * tol + 1e-13, (tol, e)
        assert np.linalg.norm(rows - rows0) / np.linalg.norm(rows0) <= 10 * tol + 1e-13
        errs.append(e)
    assert errs[0] > errs[2]      # the parameter does something


@pytest.mark.parametrize("normalization", ["paper", "mean_field"])
def test_riesz_energy_fmm_matches_numba(normalization):
    rng = np.random.default_rng(11)
    x = ball(rng, 1200)
    exact = RieszEnergy(s=1.0, lam=0.7, normalization=normalization, method="numba")
    approx = RieszEnergy(s=1.0, lam=0.7, normalization=normalization, method="fmm", tol=1e-12)
    v0, g0 = exact.value_and_grad(x)
    v, g = approx.value_and_grad(x)
    assert abs(float(v) - float(v0)) <= 1e-11 * abs(float(v0))
    assert np.linalg.norm(g - g0) <= 1e-11 * np.linalg.norm(g0)
    np.testing.assert_allclose(approx.grad(x), g, rtol=0, atol=0)      # same call, same numbers
    np.testing.assert_allclose(approx.per_particle(x), exact.per_particle(x), rtol=1e-11)
    e, gr = riesz_energy_and_grad(x, 1.0, method="fmm", tol=1e-12)
    e0, gr0 = riesz_energy_and_grad(x, 1.0, method="numba")
    assert abs(float(e) - float(e0)) <= 1e-11 * float(e0)
    assert np.linalg.norm(gr - gr0) <= 1e-11 * np.linalg.norm(gr0)
    np.testing.assert_allclose(riesz_potential(x, 1.0, method="fmm", tol=1e-12),
                               riesz_potential(x, 1.0, method="numba"), rtol=1e-11)


def test_fmm_float32_keeps_dtype():
    x = ball(np.random.default_rng(2), 500).astype(np.float32)
    e, g = riesz_energy_and_grad(x, 1.0, method="fmm")
    e0, g0 = riesz_energy_and_grad(x, 1.0, method="numba")
    assert g.dtype == np.float32
    assert abs(float(e) - float(e0)) <= 1e-12 * float(e0)
    assert np.linalg.norm(g - g0) <= 1e-6 * np.linalg.norm(g0)


def test_auto_takes_fmm_from_the_crossover(monkeypatch):
    x = ball(np.random.default_rng(5), 400)
    e_fmm, g_fmm = riesz_energy_and_grad(x, 1.0, method="fmm", tol=1e-3)
    e_nb, g_nb = riesz_energy_and_grad(x, 1.0, method="numba")
    monkeypatch.setattr(fast, "FMM_MIN_N", 400)
    e, g = riesz_energy_and_grad(x, 1.0, method="auto", tol=1e-3)
    assert float(e) == float(e_fmm) and np.array_equal(g, g_fmm)
    assert not np.array_equal(g, g_nb)              # tol = 1e-3: the fast path is visibly not exact
    for d, s, soft in ((2, 1.0, 0.0), (3, 2.0, 0.0), (3, 1.0, 0.1)):   # where FMM does not apply
        y = ball(np.random.default_rng(5), 400, d)
        _, g_auto = riesz_energy_and_grad(y, s, soft, method="auto")
        _, g_direct = riesz_energy_and_grad(y, s, soft, method="numba")
        assert np.array_equal(g_auto, g_direct)
    monkeypatch.setattr(fast, "FMM_MIN_N", 401)
    assert np.array_equal(riesz_energy_and_grad(x, 1.0, method="auto")[1], g_nb)


@pytest.mark.parametrize("kwargs,match", [
    (dict(s=2.0), "d=3, s=1"),
    (dict(s=1.0, softening=0.1), "softening=0"),
    (dict(s=1.0, tol=0.0), "tol"),
    (dict(s=1.0, tol=1.5), "tol"),
    (dict(s=1.0, tol=1e-16), "tol"),
])
def test_fmm_bad_input(kwargs, match):
    x = ball(np.random.default_rng(0), 50)
    with pytest.raises(ValueError, match=match):
        riesz_energy_and_grad(x, method="fmm", **kwargs)


def test_fmm_wrong_dimension_and_energy_tol():
    x = ball(np.random.default_rng(0), 50, 2)
    with pytest.raises(ValueError, match="d=3, s=1.*got d=2"):
        riesz_energy_and_grad(x, 1.0, method="fmm")
    with pytest.raises(ValueError, match="tol"):
        RieszEnergy(s=1.0, method="fmm", tol=-1.0)


def test_row_sums_oracle():
    rng = np.random.default_rng(4)
    x = ball(rng, 300, 2)
    idx = np.array([0, 17, 17, 299])
    for s, soft in ((0.0, 0.0), (1.0, 0.05), (-1.0, 0.0), (2.5, 0.0)):
        _, (rows, grads) = _pair_sums(x, s, soft, "numpy", True, None)
        r, g = riesz_row_sums(x, idx, s, soft)
        np.testing.assert_allclose(r, rows[idx], rtol=1e-12, atol=1e-12 * np.abs(rows).max())
        np.testing.assert_allclose(g, grads[idx], rtol=1e-12, atol=1e-12 * np.abs(grads).max())
    with pytest.raises(ValueError, match="index must lie in"):
        riesz_row_sums(x, [300], 1.0)
    with pytest.raises(ValueError, match="index must be a 1-D array of integers"):
        riesz_row_sums(x, [0.5], 1.0)
