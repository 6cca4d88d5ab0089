"""Langevin with the FMM Riesz gradient, recorded by LangevinRecorder (summaries + subsample)."""
from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from rieszflow.engine.energy import RieszEnergy
from rieszflow.engine.simulate import projected_langevin, run_langevin
from rieszflow.engine.space import Ball
from rieszflow.engine.storage import TrajectoryWriter
from rieszflow.solvers.particles import LangevinRecorder


def _cloud(n, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 3))
    x /= np.linalg.norm(x, axis=1)[:, None]
    return 0.9 * x * rng.uniform(size=(n, 1)) ** (1.0 / 3.0)


@pytest.mark.parametrize("particles", ["all", 40])
def test_langevin_fmm_recorded(tmp_path, particles):
    n, eta, steps = 400, 1e-3, 4
    x0 = _cloud(n)
    fast = RieszEnergy(s=1.0, normalization="mean_field", method="fmm", tol=1e-12)
    direct = RieszEnergy(s=1.0, normalization="mean_field", method="numba")
    states = []
    path = tmp_path / "run.h5"
    with TrajectoryWriter(path, "test_langevin") as w:
        rec = LangevinRecorder(w, n, 3, eta, particles=particles, energy=fast, seed=3)

        def callback(st):
            states.append(st)
            rec(st)

        init, step = projected_langevin(fast.grad, Ball(1.0), eta, 100.0, grad_scale=1.0)
        final = run_langevin(step, init(x0), steps, 7, record_every=2, callback=callback, progress=False)
    # the same chain with the direct gradient: same noise, the positions agree to the FMM's precision
    init_d, step_d = projected_langevin(direct.grad, Ball(1.0), eta, 100.0, grad_scale=1.0)
    final_d = run_langevin(step_d, init_d(x0), steps, 7, progress=False)
    np.testing.assert_allclose(final.omega, final_d.omega, rtol=0, atol=1e-12)
    with xr.open_dataset(path, engine="h5netcdf") as ds:
        assert ds.sizes["time"] == 3 and list(ds["step"].values) == [0, 2, 4]
        np.testing.assert_allclose(ds["time"].values, [0.0, 2 * eta, 4 * eta])
        m = n if particles == "all" else particles
        assert ds.sizes["particle"] == m
        idx = ds["particle"].values
        assert np.all(np.diff(idx) > 0) and idx.min() >= 0 and idx.max() < n
        for k, st in enumerate(states):
            np.testing.assert_array_equal(ds["omega"].values[k], st.omega[idx])
            np.testing.assert_allclose(ds["second_moment"].values[k], np.mean(np.sum(st.omega ** 2, axis=1)),
                                       rtol=1e-14)
            np.testing.assert_allclose(ds["mean"].values[k], st.omega.mean(axis=0), rtol=1e-12, atol=1e-15)
            np.testing.assert_allclose(ds["max_radius"].values[k], np.linalg.norm(st.omega, axis=1).max())
            np.testing.assert_allclose(ds["energy"].values[k], float(direct(st.omega)), rtol=1e-11)
        assert ds["max_radius"].values.max() <= 1.0 + 1e-12
        for v in ds.variables.values():
            assert "long_name" in v.attrs and "units" in v.attrs


def test_recorder_bad_particles(tmp_path):
    with TrajectoryWriter(tmp_path / "x.h5", "test_langevin") as w:
        with pytest.raises(ValueError, match="particles must be 'all' or an integer in \\[1, N=10\\]"):
            LangevinRecorder(w, 10, 3, 1e-3, particles=11)
        with pytest.raises(ValueError, match="particles"):
            LangevinRecorder(w, 10, 3, 1e-3, particles=0)


def test_make_interaction_fast_methods():
    from rieszflow.solvers.particles import make_interaction

    x = _cloud(300, seed=1)
    e = make_interaction(s=1.0, lam=0.5, d=3, method="fmm", tol=1e-12)
    e0 = make_interaction(s=1.0, lam=0.5, d=3, method="numba")
    assert e.method == "fmm" and e.tol == 1e-12
    np.testing.assert_allclose(e.grad(x), e0.grad(x), rtol=0, atol=1e-11 * np.abs(e0.grad(x)).max())
    x1 = x[:, :1]
    e1 = make_interaction(s=0.0, lam=0.5, d=1, method="nufft", tol=1e-10)
    np.testing.assert_allclose(e1.grad(x1), make_interaction(s=0.0, lam=0.5, d=1, method="numba").grad(x1),
                               rtol=0, atol=1e-9 * 300)
    with pytest.raises(ValueError, match="not to method='sorted'"):
        make_interaction(s=-1.0, lam=0.5, d=1, method="sorted", tol=1e-8)
    with pytest.raises(ValueError, match="method='fmm' computes the Coulomb kernel of R\\^3 only"):
        make_interaction(s=0.0, lam=0.5, d=2, method="fmm")
    with pytest.raises(ValueError, match="method='nufft' supports d = 1, 2, 3, got d=4"):
        make_interaction(s=0.0, lam=0.5, d=4, method="nufft")
