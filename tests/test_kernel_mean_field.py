"""rieszflow kernel-mean-field: V_D on the mesh against Monte Carlo, the mean-field kernel against the
large-N feature kernel (both SE-based, z stated), closed forms, config strictness, a tiny CLI run."""
import json

import numpy as np
import pytest

from rieszflow.engine.energy.alignment import alignment_potential, rff_alignment_energy
from rieszflow.solvers.mckean_vlasov import alignment_potential_on_mesh, disk_mesh, interval_mesh
from rieszflow.studies.kernel_mean_field.config import KernelMeanFieldConfig, quick_config
from rieszflow.studies.kernel_mean_field.data import make_data
from rieszflow.studies.kernel_mean_field.kernels import feature_kernel, mean_field_kernel

Z = 4.0     # every statistical check: |mean - expected| <= 4 standard errors (two-sided p ~ 6e-5)


def _data(p, n=40, seed=3):
    return make_data("sine1d" if p == 1 else "sine2d", n, 10, seed)


def _mesh(p):
    return interval_mesh(-4.0, 4.0, 40) if p == 1 else disk_mesh(3.0, 0.6)


def _masses(dom):
    r2 = np.sum(dom.centers ** 2, axis=1)
    m = np.exp(-0.5 * r2 / 1.5 ** 2) * (1 + 0.5 * np.cos(2 * dom.centers[:, 0])) * dom.volumes
    return m / m.sum()


@pytest.mark.parametrize("p", [1, 2])
def test_V_D_on_the_mesh_is_the_monte_carlo_alignment_energy_of_particles_drawn_from_rho(p):
    """E over omega ~ rho (cell centres with the cell masses) and phases b ~ U[0, 2pi) of the exact
    fixed-phase RFF alignment energy (B.6) equals sum_j m_j V_D(c_j): Lemma 3 (phase average, as
    corrected) and the mesh potential in one check."""
    d = _data(p)
    dom = _mesh(p)
    m = _masses(dom)
    V = alignment_potential_on_mesh(dom, d.X_train, d.y_train)
    expected = float(m @ V)
    rng = np.random.default_rng(11)
    R, N = 400, 30
    vals = np.empty(R)
    for r in range(R):
        omega = dom.centers[rng.choice(m.size, size=N, p=m)]
        b = rng.uniform(0, 2 * np.pi, N)
        vals[r] = rff_alignment_energy(omega, d.X_train, d.y_train, b)
    se = vals.std(ddof=1) / np.sqrt(R)
    assert abs(vals.mean() - expected) <= Z * se, (vals.mean(), expected, se)
    assert se < 0.2 * abs(expected)            # the test has power: SE well below the value


@pytest.mark.parametrize("p", [1, 2])
def test_mean_field_kernel_equals_the_large_N_feature_kernel_within_its_standard_error(p):
    d = _data(p, n=8)
    dom = _mesh(p)
    m = _masses(dom)
    rng = np.random.default_rng(5)
    N = 20000
    omega = dom.centers[rng.choice(m.size, size=N, p=m)]
    b = rng.uniform(0, 2 * np.pi, N)
    K_mf = mean_field_kernel(d.X_train, d.X_train, dom.centers, m)
    K_N = feature_kernel(d.X_train, d.X_train, omega, b)
    phi = np.sqrt(2) * np.cos(d.X_train @ omega.T + b)          # (n, N)
    prod = phi[:, None, :] * phi[None, :, :]
    se = prod.std(axis=2, ddof=1) / np.sqrt(N)
    np.testing.assert_allclose(K_N, prod.mean(axis=2), rtol=0, atol=1e-12)   # the engine's map, (B.5)
    iu = np.triu_indices(K_mf.shape[0])
    z = (K_N - K_mf)[iu] / se[iu]
    assert np.max(np.abs(z)) <= 4.5, z           # 36 entries: Bonferroni-level 4.5 SE
    assert np.max(se) < 0.02


def test_mean_field_kernel_closed_forms():
    x = np.array([[0.0], [0.3], [-1.1]])
    # a single atom: cos(omega0 (x - x'))
    K = mean_field_kernel(x, x, np.array([[2.0], [5.0]]), np.array([1.0, 0.0]))
    np.testing.assert_allclose(K, np.cos(2.0 * (x - x.T)), atol=1e-14)
    # a Gaussian N(0, s^2) on a fine interval mesh: the RBF kernel exp(-s^2 |x - x'|^2 / 2)
    dom = interval_mesh(-12.0, 12.0, 4000)
    w = np.exp(-0.5 * dom.centers[:, 0] ** 2 / 1.5 ** 2) * dom.volumes
    K = mean_field_kernel(x, x, dom.centers, w)
    np.testing.assert_allclose(K, np.exp(-0.5 * 1.5 ** 2 * (x - x.T) ** 2), atol=1e-6)


def test_the_particles_feel_the_mesh_potential():
    """One formula for V_D: the particles' external field equals the mesh potential at the centres."""
    from rieszflow.studies.kernel_mean_field.study import alignment_field

    d = _data(2)
    dom = _mesh(2)
    f = alignment_field(d.X_train, d.y_train)
    np.testing.assert_allclose(f.per_particle(dom.centers), alignment_potential_on_mesh(dom, d.X_train, d.y_train),
                               rtol=0, atol=1e-14)
    np.testing.assert_allclose(f.per_particle(dom.centers), alignment_potential(dom.centers, d.X_train, d.y_train),
                               rtol=0, atol=1e-14)


def test_distance_on_the_disk_is_zero_for_the_same_histogram_and_positive_otherwise():
    from rieszflow.solvers.particles import GridW1

    dom = _mesh(2)
    dist = GridW1(dom, 1e-12)
    m = _masses(dom)
    rng = np.random.default_rng(0)
    x = dom.centers[rng.choice(m.size, 500, p=m)]
    h = dist.bin(x)
    assert h.sum() == pytest.approx(1.0) and dist.particles(x, h) == pytest.approx(0.0, abs=1e-12)
    assert dist.particles(x + 0.0, m) > 0 and dist.iid(rng, 500, m) > 0


def test_config_is_strict():
    with pytest.raises(ValueError, match="allowed"):
        KernelMeanFieldConfig.from_dict({"no_such_key": 1})
    with pytest.raises(ValueError, match="problems"):
        KernelMeanFieldConfig(problems=("sine3d",))
    with pytest.raises(ValueError, match="multiple of eta"):
        KernelMeanFieldConfig(times=(0.0, 0.33))
    with pytest.raises(ValueError, match="s_1d"):
        KernelMeanFieldConfig(s_1d=1.0)          # needs s < p = 1
    with pytest.raises(ValueError, match="same"):
        KernelMeanFieldConfig(n_particles=(10, 20), n_seeds=(1,))
    assert KernelMeanFieldConfig.from_dict(quick_config().to_dict()) == quick_config()


def _tiny():
    return dict(problems=["sine1d", "breast_cancer"], n_train=30, n_test=30, radius_1d=4.0, n_cells_1d=20,
                radius_2d=2.0, cell_size_2d=0.5, times=[0.0, 0.5], eta=0.05, pde_dt=0.025, long_time=1.0,
                long_n=20, long_seeds=3, n_particles=[20, 40], n_seeds=[3, 2])


def test_tiny_cli_run_writes_a_self_describing_file_and_plots(tmp_path):
    import xarray as xr

    from rieszflow.engine.storage import missing_cf_attributes
    from rieszflow.studies.cli import main
    from rieszflow.studies.kernel_mean_field.analysis import format_tables, load_study, summary_tables

    cfg = tmp_path / "tiny.json"
    cfg.write_text(json.dumps(_tiny()))
    out = tmp_path / "kmf.h5"
    assert main(["kernel-mean-field", "--config", str(cfg), "--workers", "0", "--quiet", "--out", str(out)]) == 0
    assert missing_cf_attributes(out) == []
    ds = xr.open_dataset(out, engine="h5netcdf")
    assert ds["sine1d_w1"].dims == ("sine1d_N", "sine1d_seed", "sine1d_time")
    assert np.isfinite(ds["sine1d_w1"].values[:, :2]).all() and np.isnan(ds["sine1d_w1"].values[1, 2]).all()
    assert np.all(np.diff(ds["breast_cancer_pde_free_energy"].values) <= 1e-12)    # F never increases
    ds.close()
    tables = summary_tables(load_study(out))
    assert set(tables) == {"sine1d", "breast_cancer"} and "fitted p" in format_tables(tables)
    assert len(list(tmp_path.glob("kmf_*.png"))) == 8
    # rerunning the same command refuses to overwrite; --resume of a complete file only reports
    assert main(["kernel-mean-field", "--config", str(cfg), "--workers", "0", "--quiet", "--out", str(out)]) == 2
    assert main(["kernel-mean-field", "--workers", "0", "--quiet", "--no-plots", "--resume", "--out", str(out)]) == 0


def test_resume_after_an_interruption_gives_the_uninterrupted_arrays(tmp_path, capsys):
    import shutil

    import h5py

    from rieszflow.engine.storage import open_run
    from rieszflow.studies.cli import main

    cfg = tmp_path / "tiny.json"
    cfg.write_text(json.dumps({**_tiny(), "problems": ["sine1d"]}))
    full, cut = tmp_path / "full.h5", tmp_path / "cut.h5"
    assert main(["kernel-mean-field", "--config", str(cfg), "--workers", "0", "--quiet", "--no-plots",
                 "--out", str(full)]) == 0
    shutil.copy(full, cut)
    with h5py.File(cut, "a") as f:           # as if killed after some runs: their W1 (written last) missing
        f["sine1d_w1"][1, 0] = np.nan
        f["sine1d_w1"][0, 2] = np.nan
        f["sine1d_long_w1"][1] = np.nan
        f["sine1d_w1_iid"][0, 0, 0] = 123.0     # a finished run: kept as stored, not recomputed
        f.attrs["status"] = "interrupted"
    assert main(["kernel-mean-field", "--workers", "0", "--quiet", "--no-plots", "--resume", "--out", str(cut)]) == 0
    capsys.readouterr()
    # --quick --resume of a file with another configuration: the error names the stored and --quick values
    assert main(["kernel-mean-field", "--quick", "--workers", "0", "--quiet", "--no-plots", "--resume",
                 "--out", str(full)]) == 2
    err = capsys.readouterr().err
    assert "another configuration" in err and "times: stored (0.0, 0.5), --quick (0.0, 1.0, 2.0, 5.0)" in err
    a, b = open_run(full), open_run(cut)
    assert b.attrs["status"] == "complete" and b["sine1d_w1_iid"].values[0, 0, 0] == 123.0
    b["sine1d_w1_iid"].values[0, 0, 0] = a["sine1d_w1_iid"].values[0, 0, 0]
    for name in ("sine1d_w1", "sine1d_w1_iid", "sine1d_acc", "sine1d_free_energy", "sine1d_long_w1", "sine1d_long_hist"):
        np.testing.assert_array_equal(a[name].values, b[name].values, err_msg=name)


def _gibbs_g():
    g = np.array([0.002, 0.05, 0.2, 0.3, 0.25, 0.15, 0.045, 0.003])
    return g / g.sum()


def _runs(rng, law, n, runs, bins):
    return np.array([np.bincount(rng.choice(bins, size=n, p=law), minlength=bins) / n for _ in range(runs)])


def test_gibbs_histogram_test_p_value_is_uniform_under_the_null_and_rejects_a_shifted_law():
    """Null: R = 3 runs of N = 20 iid draws from g (8 bins, two nearly empty). Over 200 seeded
    repetitions the fraction of Monte Carlo p-values <= 0.05 (and <= 0.5) is within Z binomial standard
    errors of 0.05 (0.5). A law shifted by one bin is rejected (p < 0.01) at N = 300, R = 2."""
    from rieszflow.studies.kernel_mean_field.analysis import gibbs_histogram_test

    g, reps = _gibbs_g(), 200
    rng = np.random.default_rng(11)
    p = np.array([gibbs_histogram_test(_runs(rng, g, 20, 3, g.size), g, 20, n_mc=2000, seed=k)["p_value"]
                  for k in range(reps)])
    for level in (0.05, 0.5):
        frac = float(np.mean(p <= level))
        assert abs(frac - level) <= Z * np.sqrt(level * (1 - level) / reps), (level, frac)
    shifted = np.roll(g, 1)
    res = gibbs_histogram_test(_runs(rng, shifted, 300, 2, g.size), g, 300, n_mc=2000)
    assert res["p_value"] < 0.01 and res["chi2"] > 50


def test_gibbs_histogram_test_keeps_bins_that_are_empty_in_every_run():
    """A bin empty in every run enters with the null SE: z = -g/sqrt(g(1-g)/(NR)) (closed form), none dropped."""
    from rieszflow.studies.kernel_mean_field.analysis import gibbs_histogram_test

    g = np.array([0.1, 0.4, 0.4, 0.1])
    m = np.array([[0.0, 0.5, 0.5, 0.0], [0.0, 0.4, 0.6, 0.0]])
    res = gibbs_histogram_test(m, g, 10, n_mc=100)
    se = np.sqrt(g * (1 - g) / 20)
    np.testing.assert_allclose(res["z"], (m.mean(axis=0) - g) / se)
    assert res["chi2"] == pytest.approx(float(np.sum(((m.mean(axis=0) - g) / se) ** 2))) and res["bins"] == 4
    assert gibbs_histogram_test(np.array([[0.5, 0.5]]), np.array([1.0, 0.0]), 2, n_mc=10)["p_value"] == 0.0
    with pytest.raises(ValueError, match="gibbs"):
        gibbs_histogram_test(m, -g, 10)


def test_step_counts_are_bounded_and_one_long_run_is_allowed():
    from rieszflow.studies.kernel_mean_field.config import MAX_STEPS

    with pytest.raises(ValueError, match=r"eta=1e-300 gives 1e\+302 steps .*1,000,000"):
        KernelMeanFieldConfig(eta=1e-300)
    with pytest.raises(ValueError, match="pde_dt="):
        KernelMeanFieldConfig(pde_dt=10.0 / (2 * MAX_STEPS), times=(0.0, 10.0), eta=0.05, long_time=100.0)
    assert KernelMeanFieldConfig(long_seeds=1).long_seeds == 1
