"""KGD of learned kernels (issue 12, item 5): estimators against closed forms, and --from-run end to end.

Oracles: the rotation average of the eq. (1) random-feature kernel of particles ``omega_k`` is
``mean_k e^{-s} 0F1(d/2; |omega_k|^2 s (1+t)/2)`` (so ``K_GS`` for unit-norm particles, whatever
their arrangement); ``E_{x,y ~ mu}[exp(2 s t)] = a_0(2 s)`` for the token U-statistic. Thresholds:
4 standard errors of the estimator (z = 4).
"""
import math

import numpy as np
import pytest
import xarray as xr

from rieszflow.theory.kgd import sampling as rs
from rieszflow.theory.kgd import spectral as sp
from rieszflow.engine.features import make_feature_map
from rieszflow.engine.space import Sphere
from rieszflow.studies.cli import main as cli_main
from rieszflow.learning import kernel_geometry as L


def _rf_values(d, omega, x, y):
    fmap = make_feature_map("favor", d, omega.shape[0], tau=math.sqrt(d))
    return np.einsum("rm,rjm->rj", fmap(x, omega), fmap(y, omega))


def test_sphere_estimator_zonal_part_of_unit_norm_features_is_kgs():
    d = 16
    rng = np.random.default_rng(0)
    x, y, t, w = L.sphere_probes(d, 3000, 12, rng)
    # unit-norm Hadamard rows without a Haar rotation: a non-zonal kernel whose zonal part is K_GS
    vals = _rf_values(d, rs.rhf_omega(16, d, rng), x, y)
    r = L.sphere_distance(vals, np.broadcast_to(sp.kernel_gs(t, d), vals.shape), w)
    assert abs(r["kgd2"]) <= 4 * r["kgd2_se"]
    assert r["residual2"] > 10 * r["total2_se"] / 4 and r["total2"] > 0
    # Gaussian particles: the zonal part is the norm-weighted mixture of 0F1's
    om = rs.gaussian_omega(8, d, rng)
    s = d ** -0.5
    kbar = lambda tt: np.mean([np.exp(-s) * sp.hyp0f1_series(d / 2, (o @ o) * s * (1 + tt) / 2) for o in om], 0)
    ref = sp.kgd_parseval(kbar, lambda tt: sp.kernel_gs(tt, d), d) ** 2
    r = L.sphere_distance(_rf_values(d, om, x, y), np.broadcast_to(sp.kernel_gs(t, d), (3000, 12)), w)
    assert abs(r["kgd2"] - ref) <= 4 * r["kgd2_se"] + 1e-12 and ref > 4 * r["kgd2_se"]
    # identical kernels: exactly zero
    z = L.sphere_distance(vals, vals, w)
    assert z["kgd2"] == 0 and z["total2"] == 0


def test_token_hs_u_statistic_is_unbiased():
    d, n = 8, 300
    rng = np.random.default_rng(1)
    s = d ** -0.5
    hs2 = []
    for _ in range(20):
        X = Sphere().sample_uniform(rng, n, d)
        r = L.token_distance(np.exp(X @ X.T * s), np.zeros((n, n)))
        hs2.append(r["hs2"])
    ref = float(sp.a_exp(0, d, 2 * s)[0])
    assert abs(np.mean(hs2) - ref) <= 4 * np.std(hs2, ddof=1) / np.sqrt(len(hs2))
    assert abs(r["hs2"] - ref) <= 4 * r["hs2_se"]                 # the single-run SE covers the error
    with pytest.raises(ValueError, match="square"):
        L.token_distance(np.zeros((3, 4)), np.zeros((3, 4)))


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("kgdrun")
    path = d / "smoke.h5"
    assert cli_main(["run", "--smoke", "--quiet", "--out", str(path)]) == 0
    return path


def test_from_run_writes_and_prints_the_learned_distances(smoke_run, capsys):
    out = smoke_run.with_name("smoke-kgd.h5")
    argv = ["kgd", "--from-run", str(smoke_run), "--n-rot", "60", "--n-tokens", "80", "--n-noise", "2"]
    assert cli_main(argv) == 0
    text = capsys.readouterr().out
    assert "KGD^2->init" in text and "between heads" in text
    ds = xr.open_dataset(out, engine="h5netcdf")
    # the stored estimate is unclipped; the printed KGD^2 is that estimate with its SE (never a clipped 0)
    k2, se = ds["kgd2_to_initial"].isel(time=-1).values, ds["kgd2_to_initial_se"].isel(time=-1).values
    assert np.allclose(ds["kgd_to_initial"].isel(time=-1).values, np.sqrt(np.maximum(k2, 0)))
    assert f"{k2[0, 0]:+.2e} +- {se[0, 0]:.1e}" in text
    k2t, set_ = ds["kgd2_to_initial"].values[:, 0, 0], ds["kgd2_to_initial_se"].values[:, 0, 0]
    assert ("(< 2 SE)" in text) == bool(np.any(k2 < 2 * se) or np.any(k2t < 2 * set_))
    for v in ds.variables:
        assert {"long_name", "units"} <= set(ds[v].attrs), v
    assert np.all(ds["kgd_to_initial"].isel(time=0).values == 0)
    assert np.all(ds["sphere_to_initial"].isel(time=0).values == 0)
    assert np.all(np.isfinite(ds["ratio_to_noise_tokens"].isel(time=-1).values))
    assert np.all(ds["noise_sphere"].values > 0)
    assert ds.attrs["rebuild_error"] < 1e-6                      # the tokens come from the run's network
    ds.close()
    assert cli_main(argv) == 2                                     # no overwrite without --overwrite
    assert "exists" in capsys.readouterr().err
    # rieszflow report shows the stored tables with the file's provenance
    page = smoke_run.with_name("page.md")
    assert cli_main(["report", str(out), "--out", str(page)]) == 0
    text = page.read_text()
    assert "KGD^2->init" in text and "- written by: `rieszflow kgd --from-run" in text


def test_kgd_to_initial_api_and_errors(smoke_run):
    from rieszflow.studies.kgd.analysis import kgd_to_initial

    lk = L.LearnedKernels(smoke_run, n_rot=40, n_tokens=0, n_noise=1)
    last = int(lk.times[-1])
    r = kgd_to_initial(smoke_run, last, 1, 0, n_rot=40, n_tokens=0, n_noise=1)
    assert r["sphere_total"] > 0 and r["sphere_total"] ** 2 == pytest.approx(
        max(r["sphere_kgd2"], 0) + r["sphere_residual2"], rel=1e-9, abs=1e-15) or r["sphere_kgd2"] < 0
    assert math.isnan(r["tokens_hs"])                              # n_tokens = 0: no token distance
    with pytest.raises(ValueError, match="time"):
        lk.kgd_to_initial(last + 1, 0, 0)
    with pytest.raises(ValueError, match="layer"):
        lk.kgd_to_initial(0, 5, 0)
    # the learned particles of the file are what the distance sees: moving them moves the kernel
    lk.omega[-1, 0, 0] = lk.omega[0, 0, 0]
    lk._cache.clear()
    assert lk.kgd_to_initial(last, 0, 0)["sphere_total"] == 0
