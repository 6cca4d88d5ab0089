"""Sweeps on dask.distributed (rieszflow.studies.sweep) and the synthetic benchmark built on them.

Seeds keyed on names (order-independent), failures recorded without stopping the sweep, NaN for
missing tasks in the merge, reruns that skip complete tasks and refuse mismatched ones, a
SIGKILLed sweep finished by rerunning, the same numbers in-process, on a LocalCluster and on an
external `dask scheduler` with two `dask worker` processes; the F.1.1 data against hand-computed
rows.
"""
import json
import math
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from rieszflow.studies.cli import build_parser
from rieszflow.studies.cli import main as cli_main
from rieszflow.studies.sweep import SweepSpec, Task, open_sweep, run_sweep
from rieszflow.studies.synthetic.data import draw_labels, log_odds, make_dataset
from rieszflow.studies.synthetic.methods import project_simplex, sinha_duchi_weights, stratified_indices
from rieszflow.studies.synthetic.study import SyntheticConfig, benchmark_spec, fit_power_law

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}
SMALL = SyntheticConfig(n=60, sigmas=(1e-3, 1.0, 1e3), trials=2, methods=("logistic", "rff_svm"), D=20)


def toy_task(task, config, rng):
    """A task function for the tests: fails on request, else returns two draws of its stream."""
    import xarray as xr

    if task.method == "boom" and dict(task.params)["x"] == 2:
        raise ArithmeticError("injected failure")
    return xr.Dataset({"draw": (("k",), rng.standard_normal(2), {"long_name": "draws", "units": "1"}),
                       "x2": ((), float(dict(task.params)["x"]) ** 2, {"long_name": "x^2", "units": "1"})},
                      coords={"k": ("k", np.arange(2), {"long_name": "draw index", "units": "1"})})


def _spec(xs, methods=("a", "boom"), trials=2, config=None):
    return SweepSpec(name="toy", function="test_sweep:toy_task", methods=methods, grid={"x": xs},
                     trials=trials, config=config or {"c": 1}, root_seed=3)


def test_seeds_are_keyed_on_names_not_on_list_order(tmp_path):
    t = Task("toy", "a", (("x", 2),), 1)
    s1 = [x.seed_sequence(3).generate_state(4).tolist() for x in _spec((1, 2, 3)).tasks() if x == t]
    s2 = [x.seed_sequence(3).generate_state(4).tolist() for x in _spec((5, 2), ("z", "a")).tasks() if x == t]
    assert s1 == s2 and len(s1) == 1
    assert Task("toy", "a", (("x", 2),), 0).seed_sequence(3).generate_state(4).tolist() != s1[0]
    assert t.seed_sequence(4).generate_state(4).tolist() != s1[0]              # root seed matters
    # adding a grid value changes no other task's numbers
    run_sweep(_spec((1, 2), methods=("a",)), tmp_path / "one", workers=0, progress=False, log=None)
    run_sweep(_spec((0, 2, 1), methods=("b", "a")), tmp_path / "two", workers=0, progress=False, log=None)
    a, b = open_sweep(tmp_path / "one"), open_sweep(tmp_path / "two")
    np.testing.assert_array_equal(a.draw.sel({"method": "a", "x": [1, 2]}).values,
                                  b.draw.sel({"method": "a", "x": [1, 2]}).values)


def test_a_failing_task_is_recorded_and_the_sweep_goes_on_and_merge_has_nan(tmp_path):
    out = tmp_path / "s"
    summary = run_sweep(_spec((1, 2, 3)), out, workers=0, progress=False, log=None)
    assert (summary.total, summary.done, summary.failed) == (12, 10, 2)
    failures = json.loads((out / "failures.json").read_text())
    assert len(failures) == 2 and all("ArithmeticError: injected failure" in f["error"] for f in failures)
    assert all("Traceback" in f["traceback"] and f["task"]["method"] == "boom" for f in failures)
    assert "FAILED" in summary.format()
    ds = open_sweep(out)
    assert ds.x2.dims == ("method", "x", "trial") and ds.draw.dims == ("method", "x", "trial", "k")
    assert np.isnan(ds.x2.sel({"method": "boom", "x": 2})).all()                # missing: NaN
    assert (ds.x2.sel({"method": "boom", "x": 3}) == 9.0).all()                 # not zero elsewhere
    assert int(ds.attrs["n_complete"]) == 10 and (out / "toy.h5").exists()
    # a missing task file is NaN too, never zero
    victim = out / "tasks" / Task("toy", "a", (("x", 1),), 0).filename
    victim.unlink()
    ds = open_sweep(out, write=False)
    assert np.isnan(ds.x2.sel({"method": "a", "x": 1, "trial": 0}))
    assert ds.x2.sel({"method": "a", "x": 1, "trial": 1}) == 1.0


def test_rerun_skips_complete_tasks_and_refuses_another_configuration(tmp_path):
    out = tmp_path / "s"
    run_sweep(_spec((1, 3), methods=("a",)), out, workers=0, progress=False, log=None)
    before = {p.name: p.stat().st_mtime_ns for p in (out / "tasks").iterdir()}
    said = []
    again = run_sweep(_spec((1, 3, 4), methods=("a",)), out, workers=0, progress=False, log=said.append)
    assert (again.skipped, again.done) == (4, 2) and "4 of 6 tasks complete before, skipped" in said[0]
    assert all(p.stat().st_mtime_ns == before[p.name] for p in (out / "tasks").iterdir() if p.name in before)
    with pytest.raises(ValueError, match="other parameters or configuration"):
        run_sweep(_spec((1, 3), methods=("a",), config={"c": 2}), out, workers=0, progress=False, log=None)


def test_localcluster_gives_the_in_process_numbers(tmp_path):
    serial = run_sweep(benchmark_spec(SMALL), tmp_path / "serial", workers=0, progress=False, log=None)
    cluster = run_sweep(benchmark_spec(SMALL), tmp_path / "cluster", workers=2, progress=False, log=None)
    assert serial.done == cluster.done == 12 and cluster.failed == 0
    a, b = open_sweep(tmp_path / "serial"), open_sweep(tmp_path / "cluster")
    for v in ("accuracy", "f1", "test_positive_rate"):
        np.testing.assert_array_equal(a[v].values, b[v].values)
    assert a.accuracy.dims == ("method", "sigma", "trial")


def test_run_jobs_in_process_and_on_a_localcluster_record_failures_and_go_on():
    """The execution layer under run_sweep, mean-field and ldp: every job's result reaches on_result,
    a failing job is recorded (task, exception, traceback) and the others go on, the same results
    in-process and on a LocalCluster; one Executor serves several batches with one cluster."""
    import operator

    from rieszflow.studies.sweep import Executor, Job, TasksFailed, run_jobs

    jobs = [Job({"i": i}, operator.truediv, (float(i), float(i - 2))) for i in range(5)]
    results = {}
    for workers in (0, 2):
        got = {}
        summary = run_jobs(jobs, workers=workers, progress=False, skipped=3,
                           on_result=lambda job, r: got.__setitem__(job.task["i"], r))
        assert (summary.total, summary.done, summary.failed, summary.skipped) == (8, 4, 1, 3)
        assert summary.failures[0]["task"] == {"i": 2} and "ZeroDivisionError" in summary.failures[0]["error"]
        assert "Traceback" in summary.failures[0]["traceback"] and "FAILED {\"i\": 2}" in summary.format()
        assert got[2]["status"] == "failed" and "value" not in got[2]
        results[workers] = {i: r["value"] for i, r in got.items() if r["status"] == "done"}
    assert results[0] == results[2] == {0: -0.0, 1: -1.0, 3: 3.0, 4: 2.0}
    with Executor(workers=2) as ex:
        first = run_jobs(jobs[:2], executor=ex, progress=False)
        client = ex.client()
        second = run_jobs(jobs[3:], executor=ex, progress=False)
        assert ex.client() is client and first.done == second.done == 2 and ex.describe().startswith("LocalCluster")
        with pytest.raises(ValueError, match="not both"):
            run_jobs(jobs, executor=ex, workers=1)
    with pytest.raises(ValueError, match="not both"):
        run_jobs(jobs, workers=1, scheduler="tcp://h:1")
    with pytest.raises(ValueError, match="workers=-1"):
        run_jobs(jobs, workers=-1)
    with pytest.raises(ValueError, match="JSON-able"):
        Job({"f": object()}, operator.neg)
    with pytest.raises(TypeError, match="callable"):
        Job({"i": 0}, "operator:neg")
    err = TasksFailed("cells", summary.failures, 8, hint="; rerun")
    assert str(err) == '1 of 8 cells failed ({"i": 2}: ZeroDivisionError: float division by zero); rerun'


def _wait_for(path, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if path.exists():
            return
        time.sleep(0.2)
    raise AssertionError(f"{path} did not appear")


@pytest.mark.slow
def test_external_scheduler_and_workers_give_the_same_numbers(tmp_path):
    """`dask scheduler` + two `dask worker` processes started here: the same merged numbers."""
    sched_file = tmp_path / "scheduler.json"
    dask = [sys.executable, "-m", "distributed.cli.dask_scheduler"]
    procs = [subprocess.Popen([*dask, "--scheduler-file", str(sched_file), "--no-dashboard",
                               "--host", "127.0.0.1"], env=ENV, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)]
    try:
        _wait_for(sched_file)
        for _ in range(2):
            procs.append(subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker",
                                           "--scheduler-file", str(sched_file), "--nthreads", "1",
                                           "--no-dashboard", "--host", "127.0.0.1"], env=ENV,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        address = json.loads(sched_file.read_text())["address"]
        cfg = tmp_path / "small.json"
        cfg.write_text(json.dumps(SMALL.to_dict()))
        common = ["synthetic", "--config", str(cfg), "--quiet", "--no-plots", "--sweep", "benchmark"]
        assert cli_main([*common, "--scheduler", address, "--out", str(tmp_path / "remote")]) == 0
        assert cli_main([*common, "--workers", "0", "--out", str(tmp_path / "local")]) == 0
        a = open_sweep(tmp_path / "remote" / "benchmark")
        b = open_sweep(tmp_path / "local" / "benchmark")
        for v in ("accuracy", "f1"):
            np.testing.assert_array_equal(a[v].values, b[v].values)
    finally:
        for p in procs[::-1]:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()


def test_sigkilled_sweep_finishes_by_rerunning_with_the_uninterrupted_result(tmp_path):
    cfg = tmp_path / "small.json"
    cfg.write_text(json.dumps(SMALL.replace(sigmas=(1e-3, 1e-1, 1.0, 1e1, 1e3), trials=3).to_dict()))
    argv = ["synthetic", "--config", str(cfg), "--quiet", "--no-plots", "--workers", "0", "--sweep", "benchmark"]
    out = tmp_path / "cut"
    proc = subprocess.Popen([sys.executable, "-m", "rieszflow", *argv, "--out", str(out)], env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    tasks = out / "benchmark" / "tasks"
    deadline = time.time() + 120
    while time.time() < deadline and not (tasks.exists() and len(list(tasks.glob("*.h5"))) >= 5):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    n_before = len(list(tasks.glob("*.h5")))
    assert 5 <= n_before < 30, n_before
    assert (out / "benchmark" / "benchmark.lock").exists()           # the dead process's lock
    assert cli_main([*argv, "--out", str(out)]) == 0                 # stale lock taken over, rest run
    assert cli_main([*argv, "--out", str(tmp_path / "whole")]) == 0
    a, b = open_sweep(out / "benchmark"), open_sweep(tmp_path / "whole" / "benchmark")
    assert int(a.attrs["n_complete"]) == 30
    for v in ("accuracy", "f1", "test_positive_rate"):
        np.testing.assert_array_equal(a[v].values, b[v].values)


def test_synthetic_cli_contract(tmp_path, capsys):
    options = {s for a in build_parser().subcommand_parsers["synthetic"]._actions for s in a.option_strings}
    assert {"--out", "--overwrite", "--resume", "--set", "--config", "--seed", "--backend", "--quiet",
            "--no-plots", "--quick", "--workers", "--scheduler", "--sweep"} <= options
    cfg = tmp_path / "small.json"
    cfg.write_text(json.dumps(SMALL.to_dict()))
    out = tmp_path / "s"
    one = ["--sweep", "benchmark", "--workers", "0"]
    assert cli_main(["synthetic", "--resume", "--quiet", "--out", str(out)]) == 2     # nothing yet
    assert cli_main(["synthetic", "--config", str(cfg), "--quiet", *one, "--out", str(out)]) == 0
    assert (out / "benchmark" / "fig1_accuracy_f1.png").exists()
    capsys.readouterr()
    # rerun with --resume alone: the stored configuration, nothing recomputed
    assert cli_main(["synthetic", "--resume", *one, "--no-plots", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "12 of 12 tasks complete before, skipped; running 0" in printed
    assert "F.1.6: Langevin features (Alg. 1, lam = 0.5) beat plain RFF: not in this sweep" in printed
    assert cli_main(["synthetic", "--resume", "--quiet", "--seed", "9", *one, "--out", str(out)]) == 2
    assert "seed: stored 0, given 9" in capsys.readouterr().err
    # a grown grid (one more noise level, one more trial) reuses every complete task
    grown = tmp_path / "grown.json"
    grown.write_text(json.dumps(SMALL.replace(sigmas=SMALL.sigmas + (10.0,), trials=3).to_dict()))
    assert cli_main(["synthetic", "--config", str(grown), *one, "--no-plots", "--out", str(out)]) == 0
    assert "12 of 24 tasks complete before, skipped; running 12" in capsys.readouterr().out
    # another configuration (a field that changes results) on the same directory: refused
    assert cli_main(["synthetic", "--quick", "--quiet", *one, "--out", str(out)]) == 2
    assert "another configuration" in capsys.readouterr().err
    assert cli_main(["synthetic", "--quiet", "--set", "methods=nope", "--out", str(out)]) == 2
    assert "allowed: logistic" in capsys.readouterr().err


# ---------------------------------------------------------------------------- App. F.1.1 data

def test_log_odds_matches_hand_computed_rows():
    X = np.array([[0.5, 1.0, 2.0, 3.0, math.pi / 6, 1.0, -2.0],
                  [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
                  [1.0, -2.0, -1.0, 0.5, math.pi / 3, 4.0, 1.0]])
    w = np.array([0.5, 0.25])
    # row 0: 1.5*sin(pi/2) + 0.8*1 - 2*3 + 0.5*sin(pi/2) + (0.5 - 0.5) = 1.5 + 0.8 - 6 + 0.5 + 0
    # row 2: 1.5*sin(pi) + 0.8*4 + 0.5 + 0.5*sin(pi) + (2 + 0.25) = 0 + 3.2 + 0.5 + 0 + 2.25
    np.testing.assert_allclose(log_odds(X, w), [-3.2, 0.0, 5.95], atol=1e-12)
    np.testing.assert_allclose(log_odds(X[:, :5], np.zeros(0)), [-3.2, 0.0, 3.7], atol=1e-12)
    with pytest.raises(ValueError, match="p >= 5"):
        log_odds(X[:, :4], np.zeros(0))
    with pytest.raises(ValueError, match=r"shape \(p - 5,\)"):
        log_odds(X, np.zeros(3))


def test_dataset_is_fixed_by_the_global_seed_and_labels_follow_the_logistic_link():
    a, b = make_dataset(), make_dataset()
    np.testing.assert_array_equal(a.X, b.X)
    assert a.X.shape == (400, 10) and a.w.shape == (5,) and len(a.train) == 280 and len(a.test) == 120
    assert len(np.intersect1d(a.train, a.test)) == 0
    np.testing.assert_allclose(a.logit, log_odds(a.X, a.w))
    with pytest.raises(ValueError, match="p"):
        make_dataset(p=4)
    # sigma = 0: P(y = 1) = sigmoid(l); the mean over 2000 redraws is within 5 SE of it
    rng = np.random.default_rng(0)
    draws = np.stack([draw_labels(a.logit, 0.0, rng) for _ in range(2000)])
    p = 1.0 / (1.0 + np.exp(-a.logit))
    se = np.sqrt(p * (1 - p) / 2000) + 1e-12
    assert np.max(np.abs(draws.mean(0) - p) / se) < 5.0
    # huge noise: labels carry no signal (fraction of ones within 5 SE of 1/2)
    y = np.stack([draw_labels(a.logit, 1e5, rng) for _ in range(200)]).ravel()
    assert abs(y.mean() - 0.5) < 5 * 0.5 / math.sqrt(y.size)


def test_power_law_fit_recovers_known_exponent_and_prefactor():
    n = np.array([100, 150, 230, 350, 530, 800, 1200, 1800], dtype=float)
    exact = fit_power_law(n, 3e-4 * n ** 1.3)
    assert abs(exact["gamma"] - 1.3) < 1e-12 and abs(exact["c"] / 3e-4 - 1) < 1e-10
    assert exact["sigma_log"] < 1e-12 and exact["n_obs"] == 8
    # lognormal noise of known sigma: gamma within 4 SE, sigma_log within 50 % (8 points, 6 dof)
    rng = np.random.default_rng(5)
    noisy = fit_power_law(n, 0.02 * n ** 0.75 * np.exp(0.1 * rng.standard_normal(n.size)))
    assert abs(noisy["gamma"] - 0.75) < 4 * noisy["gamma_se"]
    assert 0.05 < noisy["sigma_log"] < 0.15
    assert fit_power_law(np.r_[n, 5.0], np.r_[3e-4 * n ** 1.3, np.nan])["n_obs"] == 8   # NaN dropped
    with pytest.raises(ValueError, match=">= 3"):
        fit_power_law([1, 2], [1, 2])


def test_langevin_features_learn_inside_the_ball_and_are_stored():
    """Method (6) runs the engine's projected Langevin chain: frequencies within the radius,
    D of them with their phases stored in the task file (small sizes)."""
    cfg = SyntheticConfig(n=60, sigmas=(1.0,), trials=1, methods=("langevin_svm",), D=12,
                          langevin_N=16, langevin_steps=30).to_dict()
    from rieszflow.studies.synthetic.study import benchmark_task

    ds = benchmark_task(Task("benchmark", "langevin_svm", (("sigma", 1.0),), 0), cfg,
                        np.random.default_rng(0))
    assert ds.omega.shape == (12, 10) and ds.phase.shape == (12,)
    assert np.all(np.linalg.norm(ds.omega.values, axis=1) <= 5.0 + 1e-12)
    assert 0.0 <= float(ds.accuracy) <= 1.0 and np.all((ds.phase >= 0) & (ds.phase < 2 * np.pi))


@pytest.mark.parametrize("m, rho_fraction", [(40, 0.005), (300, 0.005), (300, 0.5)])
def test_sinha_duchi_weights_satisfy_kkt_and_match_a_general_solver(m, rho_fraction):
    """max q^T v over the simplex within ||q - u||^2 <= rho/m: KKT conditions, and the optimum of
    scipy's SLSQP on the same problem (small m)."""
    from scipy.optimize import minimize

    rng = np.random.default_rng(m)
    v = rng.gamma(2.0, 1.0, m) ** 2
    rho = m * rho_fraction
    q = sinha_duchi_weights(v, rho)
    u, r = np.full(m, 1.0 / m), rho / m
    assert np.all(q >= 0) and abs(q.sum() - 1) < 1e-12
    gap = float((q - u) @ (q - u))
    assert gap <= r * (1 + 1e-8)                                   # feasible
    # stationarity: q = proj_simplex(u + v / lam); on the support v - lam (q - u) is one constant nu,
    # off the support v + lam u <= nu; the ball constraint is active (lam > 0)
    support = q > 1e-14
    lam = (v[support][0] - v[support][1]) / ((q - u)[support][0] - (q - u)[support][1])
    nu = v[support] - lam * (q - u)[support]
    assert lam > 0 and np.ptp(nu) < 1e-6 * np.abs(nu).max()
    assert np.all(v[~support] + lam * u[~support] <= nu.mean() + 1e-6 * abs(nu.mean()))
    assert abs(gap - r) < 1e-6 * r                                 # active
    if m <= 40:
        res = minimize(lambda x: -x @ v, u, jac=lambda x: -v, method="SLSQP", bounds=[(0, 1)] * m,
                       constraints=[{"type": "eq", "fun": lambda x: x.sum() - 1},
                                    {"type": "ineq", "fun": lambda x: r - (x - u) @ (x - u)}],
                       options={"ftol": 1e-14, "maxiter": 1000})
        assert q @ v >= -res.fun - 1e-6 * abs(res.fun)
    np.testing.assert_allclose(project_simplex(np.array([0.2, 0.3, 0.5])), [0.2, 0.3, 0.5])
    np.testing.assert_allclose(project_simplex(np.array([2.0, 0.0, -1.0])), [1.0, 0.0, 0.0])


def test_stratified_indices_give_every_weight_its_share():
    q = np.array([0.5, 0.25, 0.125, 0.125, 0.0])
    idx = stratified_indices(q, 16, np.random.default_rng(0))
    assert np.bincount(idx, minlength=5).tolist() == [8, 4, 2, 2, 0]


def test_synthetic_default_output_directory_and_resume(tmp_path, monkeypatch, capsys):
    """Review finding: without --out the sweep failed ('the directory runs ... does not exist') and
    --resume said 'None holds no sweep'."""
    monkeypatch.chdir(tmp_path)
    cfg = tmp_path / "small.json"
    cfg.write_text(json.dumps(SMALL.to_dict()))
    one = ["--sweep", "benchmark", "--workers", "0", "--quiet", "--no-plots"]
    assert cli_main(["synthetic", "--config", str(cfg), *one]) == 0
    assert (tmp_path / "runs" / "synthetic-seed0" / "benchmark" / "benchmark.h5").exists()
    assert cli_main(["synthetic", "--resume", *one]) == 0
    assert cli_main(["synthetic", "--resume", "--quick", *one]) == 2           # the quick default path
    assert "runs/synthetic-quick-seed0 holds no sweep" in capsys.readouterr().err
    assert cli_main(["synthetic", "--resume", "--quick", *one, "--out", "runs/synthetic-seed0"]) == 2
    assert "--quick" in capsys.readouterr().err                                # other sizes: refused


def _worker_environment():
    import os

    import threadpoolctl

    return (os.environ.get("MALLOC_TRIM_THRESHOLD_"),
            {i["internal_api"]: i["num_threads"] for i in threadpoolctl.threadpool_info()})


def test_local_cluster_workers_are_single_threaded_with_default_malloc(monkeypatch):
    """Workers get THREAD_ENV at spawn (BLAS starts with one thread, not the parent's count) and
    keep glibc's malloc defaults (dask's MALLOC_TRIM_THRESHOLD_ made the main job 3x slower)."""
    import os

    from rieszflow.studies.sweep import _client

    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "65536")      # what an earlier nanny leaves behind
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "2")
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    with _client(1, None) as client:
        malloc, threads = client.submit(_worker_environment, pure=False).result()
        assert malloc is None
        assert all(n == 1 for n in threads.values()), threads
        client.restart()                          # a nanny respawns its worker: same environment
        malloc, threads = client.submit(_worker_environment, pure=False).result()
        assert malloc is None
        assert all(n == 1 for n in threads.values()), threads
    assert os.environ["OPENBLAS_NUM_THREADS"] == "2"            # the parent's is restored


def _sigint_ignored():
    import signal

    return signal.getsignal(signal.SIGINT) == signal.SIG_IGN


def test_local_cluster_workers_ignore_sigint():
    """Ctrl-C (SIGINT to the process group) is this process's to handle: the workers ignore it,
    also a worker the nanny restarts; this process keeps its own handler."""
    import signal

    from rieszflow.studies.sweep import _client

    before = signal.getsignal(signal.SIGINT)
    with _client(1, None) as client:
        assert client.submit(_sigint_ignored, pure=False).result()
        client.restart()
        assert client.submit(_sigint_ignored, pure=False).result()
    assert signal.getsignal(signal.SIGINT) is before


def test_sigint_preload_keeps_the_users_preloads():
    """The user's preloads stay first (a single string too) and a per-preload argv list keeps
    the lengths equal; the SIGINT preload comes last."""
    from rieszflow.studies.sweep.executor import _SIGINT_PRELOAD, _with_sigint_preload

    def cfg(d):
        return type("C", (), {"get": staticmethod(lambda k, default=None: d.get(k, default))})

    assert _with_sigint_preload(cfg({})) == {"distributed.worker.preload": [_SIGINT_PRELOAD]}
    assert _with_sigint_preload(cfg({"distributed.worker.preload": "mymod"}))[
        "distributed.worker.preload"] == ["mymod", _SIGINT_PRELOAD]
    out = _with_sigint_preload(cfg({"distributed.worker.preload": ["a", "b"],
                                    "distributed.worker.preload-argv": [["--x"], []]}))
    assert out == {"distributed.worker.preload": ["a", "b", _SIGINT_PRELOAD],
                   "distributed.worker.preload-argv": [["--x"], [], []]}
    flat = _with_sigint_preload(cfg({"distributed.worker.preload": ["a"],
                                     "distributed.worker.preload-argv": ["--x"]}))
    assert "distributed.worker.preload-argv" not in flat       # one argv for all: left as it is


def _blas_threads():
    import threadpoolctl

    return {i["internal_api"]: i["num_threads"] for i in threadpoolctl.threadpool_info()
            if i["user_api"] == "blas"}


def test_in_process_jobs_run_with_one_blas_thread_like_the_workers():
    from rieszflow.studies.sweep import Job, run_jobs

    from threadpoolctl import threadpool_limits

    seen = []
    with threadpool_limits(limits=2, user_api="blas"):          # the caller runs 2 BLAS threads
        assert all(n == 2 for n in _blas_threads().values())
        run_jobs([Job({"name": "t"}, _blas_threads, ())], workers=0, progress=False,
                 on_result=lambda job, r: seen.append(r))
    assert seen and all(n == 1 for n in seen[0]["value"].values()), seen


def _named_task(task, config, rng):
    import xarray as xr

    return xr.Dataset({"v": ((), 1.0, {"long_name": "one", "units": "1"})})


def test_a_spec_of_a_function_keeps_it_through_replace_and_refuses_anonymous_ones():
    import dataclasses
    import functools

    from rieszflow.studies.sweep import SweepSpec

    spec = SweepSpec(name="f", function=_named_task, methods=("m",), grid={"x": (1,)}, trials=1)
    assert spec.function == f"{__name__}:_named_task" and spec.task_function is _named_task
    again = dataclasses.replace(spec, trials=2)
    assert again.task_function is _named_task and again.trials == 2 and again == dataclasses.replace(spec, trials=2)
    with pytest.raises(ValueError, match="lambda"):
        SweepSpec(name="f", function=lambda t, c, r: None, methods=("m",), grid={"x": (1,)}, trials=1)
    with pytest.raises(ValueError, match="partial"):
        SweepSpec(name="f", function=functools.partial(_named_task), methods=("m",), grid={"x": (1,)}, trials=1)


def test_tasks_of_different_code_are_not_merged_unless_asked(tmp_path):
    """One result, one version of the code: a task file from another commit (or another dirty
    diff) makes open_sweep refuse the merge, naming the versions per method; allow_mixed_code
    merges and records the counts (mutation: a merge that ignores the commits fails here)."""
    import h5py

    from rieszflow.studies.sweep import MixedCodeError

    out = tmp_path / "sw"
    run_sweep(_spec((1, 2), methods=("a",)), out, workers=0, progress=False, log=None)
    merged = open_sweep(out, write=False)
    assert len(json.loads(merged.attrs["task_code"])) == 1
    files = sorted((out / "tasks").glob("*.h5"))
    with h5py.File(files[0], "r+") as h:
        h.attrs["git_commit"] = "0" * 40 + "-dirty"
        h.attrs["git_diff_sha256"] = "ab" * 32
    with pytest.raises(MixedCodeError, match=r"2 versions of the code.*" + "0" * 40 + r"-dirty\+abababababab"):
        open_sweep(out, write=False)
    mixed = open_sweep(out, write=False, allow_mixed_code=True)
    code = json.loads(mixed.attrs["task_code"])
    assert sorted(code.values()) == [1, len(files) - 1]
    assert set(json.loads(mixed.attrs["task_code_by_method"])) == {"a"}
    # the same commit with another uncommitted diff is other code too
    with h5py.File(files[0], "r+") as h:
        h.attrs["git_commit"] = merged.attrs["git_commit"]
        h.attrs["git_diff_sha256"] = "cd" * 32
    if merged.attrs["git_commit"].endswith("-dirty"):
        with pytest.raises(MixedCodeError):
            open_sweep(out, write=False)
    # a file that records its commit only 'at write' does not name the code that ran
    with h5py.File(files[0], "r+") as h:
        h.attrs["git_diff_sha256"] = merged.attrs["git_diff_sha256"]
        del h.attrs["git_commit_of"]
    with pytest.raises(MixedCodeError, match="at write"):
        open_sweep(out, write=False)
