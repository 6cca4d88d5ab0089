"""Mean-field study: W1 helpers against closed forms, decay fits, strict config, CLI smoke to HDF5."""
import argparse
import json
import math

import numpy as np
import pytest
import scipy.stats

from rieszflow.engine.stats import expected_slope, fit_decay
from rieszflow.studies.mean_field.analysis import load_study, summary_tables
from rieszflow.studies.mean_field.config import MeanFieldConfig, ProblemConfig, full_config, quick_config
from rieszflow.engine.measures import (
    AtomicMeasure1D,
    CellMeasure1D,
    bin_to_grid,
    quantisation_bound,
    sample_cells,
    wasserstein1_1d,
    wasserstein1_grid,
    wasserstein1_points,
)

# ----------------------------------------------------------------------------- W1 closed forms


@pytest.mark.parametrize("n", [1, 2, 7])
def test_w1_equally_spaced_atoms_vs_uniform(n):
    """Atoms at (k + 1/2)/n against U[0, 1]: W1 = 1/(4n)."""
    u = CellMeasure1D(np.array([0.0, 1.0]), np.array([1.0]))
    atoms = AtomicMeasure1D((np.arange(n) + 0.5) / n)
    assert abs(wasserstein1_1d(atoms, u) - 1.0 / (4 * n)) < 1e-14


def test_w1_single_atom_and_shifted_uniform():
    u = CellMeasure1D(np.linspace(0.0, 1.0, 11), np.full(10, 0.1))
    for x0 in (0.0, 0.3, 1.0):  # int |1{x >= x0} - x| dx = x0^2/2 + (1 - x0)^2/2
        assert abs(wasserstein1_1d(AtomicMeasure1D(np.array([x0])), u) - (x0 ** 2 + (1 - x0) ** 2) / 2) < 1e-14
    for shift in (0.05, 0.37, 2.5):  # a translate: W1 = |shift|, also when the supports are disjoint
        v = CellMeasure1D(np.linspace(0.0, 1.0, 11) + shift, np.full(10, 0.1))
        assert abs(wasserstein1_1d(u, v) - shift) < 1e-13
    # two Diracs: W1(delta_a, delta_b) = |a - b|, weights respected
    two = AtomicMeasure1D(np.array([0.0, 1.0]), np.array([0.25, 0.75]))
    one = AtomicMeasure1D(np.array([1.0]))
    assert abs(wasserstein1_1d(two, one) - 0.25) < 1e-15


def test_w1_empirical_matches_scipy(rng):
    x, y = rng.normal(size=300), rng.normal(0.2, 1.3, size=170)
    assert abs(wasserstein1_1d(AtomicMeasure1D(x), AtomicMeasure1D(y))
               - scipy.stats.wasserstein_distance(x, y)) < 1e-12


def test_w1_2d_points_and_grid():
    # two Diracs in the plane
    assert abs(wasserstein1_points([[0.0, 0.0]], [1.0], [[3.0, 4.0]], [1.0]) - 5.0) < 1e-12
    # half the mass moved by one cell of side h on a grid: W1 = h / 2
    centres = np.array([[0.5, 0.5], [1.5, 0.5], [0.5, 1.5], [1.5, 1.5]])
    a = np.array([0.5, 0.5, 0.0, 0.0])
    assert abs(wasserstein1_grid(a, np.array([0.0, 1.0, 0.0, 0.0]), centres) - 0.5) < 1e-12
    # the other half moved diagonally instead: W1 = sqrt(2) / 2
    assert abs(wasserstein1_grid(a, np.array([0.0, 0.5, 0.0, 0.5]), centres) - math.sqrt(0.5)) < 1e-12
    # binning, FiPy order (x fastest)
    m = bin_to_grid(np.array([[0.2, 0.1], [1.9, 0.3], [1.2, 1.7], [1.99, 1.99]]), (0, 0), (1, 1), (2, 2))
    np.testing.assert_allclose(m, [0.25, 0.25, 0.0, 0.5])
    with pytest.raises(ValueError, match="leave the grid"):
        bin_to_grid(np.array([[2.5, 0.1]]), (0, 0), (1, 1), (2, 2))


def test_quantisation_bound_against_monte_carlo(rng):
    u = rng.uniform(-0.5, 0.5, size=(200_000, 2)) * np.array([1.0, 0.5])
    mc = np.linalg.norm(u, axis=1)
    se = mc.std() / math.sqrt(mc.size)
    assert abs(quantisation_bound((1.0, 0.5)) - mc.mean()) < 4 * se  # 4 SE, seeded
    assert abs(quantisation_bound((2.0, 2.0)) - 2.0 * (math.sqrt(2) + math.asinh(1)) / 6) < 1e-15
    assert quantisation_bound((0.4,)) == 0.1


def test_sample_cells_law(rng):
    masses = np.array([0.1, 0.6, 0.3])
    x = sample_cells(rng, 30_000, masses, (0.0,), (1.0,), (3,))
    counts = np.bincount(np.floor(x[:, 0]).astype(int), minlength=3)
    assert scipy.stats.chisquare(counts, 30_000 * masses).pvalue > 1e-3
    with pytest.raises(ValueError, match="masses"):
        sample_cells(rng, 10, np.array([0.5, -0.1, 0.6]), (0.0,), (1.0,), (3,))


def test_w1_bad_inputs():
    with pytest.raises(ValueError, match="sum to 1"):
        AtomicMeasure1D(np.array([0.0, 1.0]), np.array([0.5, 0.6]))
    with pytest.raises(ValueError, match="non-finite"):
        AtomicMeasure1D(np.array([0.0, np.nan]))
    with pytest.raises(ValueError, match="strictly increasing"):
        CellMeasure1D(np.array([0.0, 0.0, 1.0]), np.array([0.5, 0.5]))
    with pytest.raises(TypeError, match="AtomicMeasure1D"):
        wasserstein1_1d(np.zeros(3), AtomicMeasure1D(np.zeros(1)))


# ----------------------------------------------------------------------------- fits


def test_fit_decay_recovers_power_law(rng):
    n = np.array([100, 1000, 10000])
    w = 0.8 * n[:, None] ** -0.5 * np.exp(0.05 * rng.standard_normal((3, 6)))
    f = fit_decay(n, w)
    assert abs(f.slope + 0.5) < 4 * f.slope_se and f.slope_se < 0.03  # 4 SE, seeded
    exact = fit_decay(n, 2.0 * n[:, None] ** -0.3 * np.ones((3, 2)))
    assert abs(exact.slope + 0.3) < 1e-12 and exact.slope_se < 1e-12
    assert expected_slope(n, 1) == -0.5
    assert -0.4 < expected_slope(n, 2) < -0.3  # local slope of N^-1/2 log N is -1/2 + 1/log N
    with pytest.raises(ValueError, match="at least 3"):
        fit_decay([10], [[0.1, 0.2]])
    with pytest.raises(ValueError, match="> 0"):
        fit_decay([10, 100], [[0.1, 0.0], [0.1, 0.1]])


# ----------------------------------------------------------------------------- config

def _tiny_dict():
    return {"problems": [
        {"name": "interval", "lo": [-1.25], "hi": [1.25], "n_cells": [20], "s": -1.0, "rho0_mean": [0.5],
         "rho0_std": [0.4], "times": [0.0, 0.1, 0.2], "eta": 0.05, "pde_dt": 0.05, "n_particles": [10, 40],
         "n_seeds": [3, 2], "eta_refinement": [0.1, 0.05], "refinement_n": 50, "refinement_seeds": 2},
        {"name": "rectangle", "lo": [-2, -2], "hi": [2, 2], "n_cells": [8, 8], "s": 0.0,
         "rho0_mean": [0.5, 0.0], "rho0_std": [0.3, 0.5], "times": [0.0, 0.2], "eta": 0.05, "pde_dt": 0.05,
         "n_particles": [10, 40], "n_seeds": [2, 2], "eta_refinement": [0.1], "refinement_n": 20,
         "refinement_seeds": 2}]}


def _tiny(tmp_path):
    cfg = _tiny_dict()
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(cfg))
    return path, cfg


@pytest.fixture(scope="module")
def tiny_full_study(tmp_path_factory):
    """The uninterrupted tiny study (seed 0, both problems), shared by the reproducibility tests."""
    from rieszflow.studies.mean_field.study import run_mean_field_study

    path = tmp_path_factory.mktemp("mf") / "full.h5"
    run_mean_field_study(MeanFieldConfig.from_dict(_tiny_dict()), path, progress=False, log=None)
    return path


def test_config_presets_and_strictness(tmp_path):
    q, f = quick_config(), full_config()
    assert [p.name for p in q.problems] == ["interval", "rectangle"]
    assert max(f.problems[0].n_particles) == 100_000
    _, cfg = _tiny(tmp_path)
    MeanFieldConfig.from_dict(cfg)
    bad = json.loads(json.dumps(cfg))
    bad["problems"][0]["etaa"] = 0.1
    with pytest.raises(ValueError, match="unknown ProblemConfig keys"):
        MeanFieldConfig.from_dict(bad)
    with pytest.raises(ValueError, match="unknown MeanFieldConfig keys"):
        MeanFieldConfig.from_dict({**cfg, "seeed": 1})
    base = dict(cfg["problems"][0])
    for key, value, match in (("s", 1.0, "s="), ("eta", 0.03, "multiple"), ("n_cells", [21], "even"),
                              ("times", [0.1, 0.2], "start at 0"), ("boundary", "absorb", "boundary"),
                              ("n_seeds", [3], "same length"), ("beta", -1.0, "beta")):
        with pytest.raises(ValueError, match=match):
            ProblemConfig.from_dict({**base, key: value})
    with pytest.raises(ValueError, match="backend"):
        MeanFieldConfig.from_dict({**cfg, "backend": "jax"})


# ----------------------------------------------------------------------------- CLI smoke

def test_cli_smoke_writes_readable_hdf5(tmp_path, capsys):
    from rieszflow.engine.storage import open_run
    from rieszflow.studies.mean_field import cli

    path, _ = _tiny(tmp_path)
    out = tmp_path / "mf.h5"
    ap = argparse.ArgumentParser()
    cli.register(ap.add_subparsers())
    args = ap.parse_args(["mean-field", "--config", str(path), "--out", str(out), "--quiet", "--seed", "3"])
    assert args.func(args) == 0
    text = capsys.readouterr().out
    assert "fitted exponent" in text and "interval" in text and "rectangle" in text
    from rieszflow.engine.storage import missing_cf_attributes

    assert missing_cf_attributes(out) == []          # every variable has long_name and units
    ds = open_run(out, "mean_field_study")
    assert ds.attrs["status"] == "complete"
    assert ds["interval_w1"].dims == ("interval_N", "interval_seed", "interval_time")
    assert ds["interval_w1"].shape == (2, 3, 3)
    assert np.isfinite(ds["interval_w1"].values[0]).all()
    assert np.isnan(ds["interval_w1"].values[1, 2]).all()  # N=40 has 2 runs
    assert ds["rectangle_rho"].shape == (2, 64)
    np.testing.assert_allclose((ds["rectangle_rho"] * ds["rectangle_volume"]).sum("rectangle_cell"), 1.0,
                               atol=1e-10)
    t = summary_tables(load_study(out))
    assert t["interval"]["fits"][1] is not None
    for name in ("mf_interval_w1_vs_N.png", "mf_rectangle_density.png", "mf_interval_refinement.png"):
        assert (tmp_path / name).stat().st_size > 1000
    # refusing to overwrite: a clear error and exit code 2, the file untouched
    assert args.func(args) == 2
    assert "already exists" in capsys.readouterr().err


def test_interrupted_study_resumes_to_the_same_result(tmp_path, monkeypatch, tiny_full_study):
    """Interrupt the study after a few particle runs, resume it, and get the uninterrupted W1.

    Every run draws from its own seed (seed, problem, N, replica), so skipping the finished runs
    and recomputing the deterministic PDE reference must reproduce the full study exactly.
    """
    from rieszflow.engine.storage import open_run
    from rieszflow.solvers import particles
    from rieszflow.studies.mean_field.study import run_mean_field_study

    cfg = MeanFieldConfig.from_dict(_tiny_dict())
    full, cut = tiny_full_study, tmp_path / "cut.h5"

    original = particles.MeanFieldParticles.simulate
    calls = {"n": 0}

    def flaky(self, *a, **k):
        calls["n"] += 1
        if calls["n"] == 4:
            raise KeyboardInterrupt
        return original(self, *a, **k)

    monkeypatch.setattr(particles.MeanFieldParticles, "simulate", flaky)
    with pytest.raises(KeyboardInterrupt):
        run_mean_field_study(cfg, cut, progress=False, log=None)
    partial = open_run(cut)
    assert partial.attrs["status"] == "interrupted"
    assert np.isnan(partial["interval_w1"].values).any()
    monkeypatch.setattr(particles.MeanFieldParticles, "simulate", original)
    with pytest.raises(ValueError, match="another configuration"):
        run_mean_field_study(cfg.replace(seed=cfg.seed + 1), cut, resume=True, progress=False, log=None)
    run_mean_field_study(cfg, cut, resume=True, progress=False, log=None)
    a, b = open_run(full), open_run(cut)
    assert b.attrs["status"] == "complete"
    for name in ("interval_w1", "interval_w1_iid", "interval_w1_eta", "rectangle_w1", "rectangle_w1_eta"):
        np.testing.assert_array_equal(a[name].values, b[name].values)


def test_problem_subset_reproduces_the_full_study(tmp_path, tiny_full_study):
    """--problem rectangle: the rectangle runs draw the same streams as in the full study."""
    from rieszflow.engine.storage import open_run

    path, _ = _tiny(tmp_path)
    out = tmp_path / "rect.h5"
    args = _parse("--config", str(path), "--problem", "rectangle", "--out", str(out), "--quiet", "--no-plots")
    assert args.func(args) == 0
    a, b = open_run(tiny_full_study), open_run(out)
    assert "interval_w1" not in b
    for name in ("rectangle_w1", "rectangle_w1_iid", "rectangle_hist", "rectangle_w1_eta", "rectangle_w1_eta_iid"):
        np.testing.assert_array_equal(a[name].values, b[name].values, err_msg=name)


def _parse(*argv):
    from rieszflow.studies.mean_field import cli

    ap = argparse.ArgumentParser()
    cli.register(ap.add_subparsers())
    return ap.parse_args(["mean-field", *argv])


def test_cli_options_override_the_config_only_when_given(tmp_path, monkeypatch, capsys):
    import rieszflow.studies.mean_field.study

    seen = []

    def fake(cfg, out, **kw):  # record the resolved configuration instead of running the study
        seen.append(cfg)
        raise FileExistsError("stop here")

    monkeypatch.setattr(rieszflow.studies.mean_field.study, "run_mean_field_study", fake)
    path = tmp_path / "c.json"
    path.write_text(json.dumps({**_tiny_dict(), "seed": 5}))
    out = str(tmp_path / "x.h5")
    for argv, seed in (((), 5), (("--seed", "7"), 7)):
        args = _parse("--config", str(path), "--out", out, "--quiet", *argv)
        assert args.func(args) == 2
        assert seen[-1].seed == seed and seen[-1].backend == "numpy"
        assert [p.name for p in seen[-1].problems] == ["interval", "rectangle"]
    # --problem that filters out every configured problem: a clean error, exit code 2
    only = _tiny_dict()
    only["problems"] = only["problems"][:1]
    path.write_text(json.dumps(only))
    args = _parse("--config", str(path), "--problem", "rectangle", "--out", out)
    assert args.func(args) == 2
    assert "selects none of the configured problems ['interval']" in capsys.readouterr().err
    path.write_text(json.dumps({**_tiny_dict(), "seeed": 1}))
    args = _parse("--config", str(path), "--out", out)
    assert args.func(args) == 2
    assert "unknown MeanFieldConfig keys" in capsys.readouterr().err
    assert len(seen) == 2


def test_unconverged_pde_steps_are_an_error(monkeypatch):
    import rieszflow.studies.mean_field.study as study
    from rieszflow.studies.mean_field.study import setup_problem, solve_pde

    setup = setup_problem(MeanFieldConfig.from_dict(_tiny_dict()).problems[0])
    original = study.solve_mckean_vlasov          # the name the study calls (imported at its top)
    monkeypatch.setattr(study, "solve_mckean_vlasov",
                        lambda *a, **k: original(*a, **{**k, "max_sweeps": 1, "max_retries": 0}))
    with pytest.raises(RuntimeError, match="interval: PDE run with dt=0.05 has .* did not converge; first: step 1"):
        solve_pde(setup, 0.05)


def test_mean_se_is_computed_per_entry():
    """One N with a single run must not turn the other rows' SEs into NaN."""
    from rieszflow.studies.mean_field.analysis import _mean_se

    w = np.array([[1.0, 2.0, 4.0], [3.0, np.nan, np.nan], [np.nan, np.nan, np.nan]])
    m, se = _mean_se(w, 1)
    np.testing.assert_allclose(m[:2], [7 / 3, 3.0], rtol=1e-15)
    assert se[0] == pytest.approx(np.std([1.0, 2.0, 4.0], ddof=1) / np.sqrt(3), rel=1e-14)
    assert np.isnan(se[1]) and np.isnan(m[2]) and np.isnan(se[2])
    x = np.random.default_rng(3).random((4, 5, 2))
    np.testing.assert_allclose(_mean_se(x, 1)[1], x.std(axis=1, ddof=1) / np.sqrt(5), rtol=1e-13)


# ----------------------------------------------------------------------------- the sweep layer

_RESULT_VARS = ("w1", "w1_iid", "hist", "w1_eta", "w1_eta_iid", "rho", "pde_dt_floor", "pde_grid_floor",
                "pde_free_energy", "pde_mass", "rho0")


def _assert_same_results(a, b):
    for p in ("interval", "rectangle"):
        for v in _RESULT_VARS:
            np.testing.assert_array_equal(a[f"{p}_{v}"].values, b[f"{p}_{v}"].values, err_msg=f"{p}_{v}")


def test_localcluster_gives_the_in_process_arrays(tmp_path, tiny_full_study):
    """workers=2 (a LocalCluster, tasks in another order, one thread each): the same bits as workers=0."""
    from rieszflow.engine.storage import open_run
    from rieszflow.studies.mean_field.study import run_mean_field_study

    out = tmp_path / "cluster.h5"
    run_mean_field_study(MeanFieldConfig.from_dict(_tiny_dict()), out, progress=False, log=None, workers=2)
    a, b = open_run(tiny_full_study), open_run(out)
    assert b.attrs["status"] == "complete" and json.loads(b.attrs["failures"]) == []
    assert set(a.data_vars) == set(b.data_vars)
    _assert_same_results(a, b)
    assert np.isfinite(b["interval_w1"].values[0]).all() and np.isfinite(b["rectangle_w1_eta"].values).all()


def test_task_order_does_not_change_any_number(tmp_path, monkeypatch, tiny_full_study):
    """Every task draws from its own seed: running the tasks in reverse order gives the same arrays."""
    import rieszflow.studies.mean_field.study as sweep     # patch run_jobs where the study calls it
    from rieszflow.engine.storage import open_run
    from rieszflow.studies.mean_field.study import run_mean_field_study

    original, seen = sweep.run_jobs, []

    def reversed_jobs(jobs, **kw):
        jobs = list(jobs)[::-1]
        seen.append([j.task for j in jobs])
        return original(jobs, **kw)

    monkeypatch.setattr(sweep, "run_jobs", reversed_jobs)
    out = tmp_path / "reversed.h5"
    run_mean_field_study(MeanFieldConfig.from_dict(_tiny_dict()), out, progress=False, log=None)
    assert seen[1][0]["stage"] == "refinement" and seen[1][-1] == {"stage": "particles", "problem": "interval",
                                                                   "N": 10, "run": 0}
    _assert_same_results(open_run(tiny_full_study), open_run(out))


def test_a_failing_run_is_named_the_others_are_stored_and_resume_finishes(tmp_path, monkeypatch, tiny_full_study):
    from rieszflow.engine.storage import open_run
    from rieszflow.solvers import particles
    from rieszflow.studies.mean_field.study import run_mean_field_study
    from rieszflow.studies.sweep import TasksFailed

    cfg = MeanFieldConfig.from_dict(_tiny_dict())
    out = tmp_path / "failed.h5"
    original = particles.MeanFieldParticles.simulate

    def broken(self, omega0, *a, **k):       # the interval runs with N = 40 (d = 1) fail
        if np.shape(omega0) == (40, 1):
            raise ArithmeticError("injected failure")
        return original(self, omega0, *a, **k)

    monkeypatch.setattr(particles.MeanFieldParticles, "simulate", broken)
    with pytest.raises(TasksFailed, match=r'2 of 19 particle tasks failed \(\{"N": 40, "problem": "interval", '
                                          r'"run": 0, "stage": "particles"\}: ArithmeticError: injected failure') as e:
        run_mean_field_study(cfg, out, progress=False, log=None)
    assert "--resume runs the failed ones again" in str(e.value) and len(e.value.failures) == 2
    partial = open_run(out)
    assert partial.attrs["status"] == "failed"
    failures = json.loads(partial.attrs["failures"])
    assert [f["task"]["N"] for f in failures] == [40, 40] and "Traceback" in failures[0]["traceback"]
    assert np.isnan(partial["interval_w1"].values[1]).all()                 # the failed runs: NaN
    np.testing.assert_array_equal(partial["interval_w1"].values[0], open_run(tiny_full_study)["interval_w1"].values[0])
    assert np.isfinite(partial["rectangle_w1"].values).all() and np.isfinite(partial["interval_w1_eta"].values).all()
    monkeypatch.setattr(particles.MeanFieldParticles, "simulate", original)
    run_mean_field_study(cfg, out, resume=True, progress=False, log=None)
    done = open_run(out)
    assert done.attrs["status"] == "complete" and json.loads(done.attrs["failures"]) == []
    _assert_same_results(open_run(tiny_full_study), done)


def test_cli_workers_and_scheduler_options(tmp_path, monkeypatch, capsys):
    import rieszflow.studies.mean_field.study

    seen = []

    def fake(cfg, out, **kw):
        seen.append(kw)
        raise FileExistsError("stop here")

    monkeypatch.setattr(rieszflow.studies.mean_field.study, "run_mean_field_study", fake)
    path, _ = _tiny(tmp_path)
    out = str(tmp_path / "x.h5")
    for argv, want in (((), (None, None)), (("--workers", "0"), (0, None)), (("--workers", "3"), (3, None)),
                       (("--scheduler", "tcp://h:8786"), (None, "tcp://h:8786"))):
        args = _parse("--config", str(path), "--out", out, "--quiet", *argv)
        assert args.func(args) == 2
        assert (seen[-1]["workers"], seen[-1]["scheduler"]) == want
    with pytest.raises(SystemExit):
        _parse("--workers", "2", "--scheduler", "tcp://h:8786")
    assert "not allowed with argument" in capsys.readouterr().err
