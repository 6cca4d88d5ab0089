"""Sweeps on real clusters (issue 22): an external `dask scheduler` whose worker runs in another
working directory with a relative --out, the pre-flight check that every worker can write the
sweep directory, the warning while a cluster has no workers, the opt-in dashboard, the summary
line printed with --quiet, a sweep whose tasks all fail, and ldp's result lines kept off the bar.
"""
import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import rieszflow
from rieszflow.studies.cli import main as cli_main
from rieszflow.studies.synthetic.study import SyntheticConfig

SRC = str(Path(rieszflow.__file__).resolve().parents[1])       # this checkout's src/, absolute
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1",
       "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", ""), "PYTHONUNBUFFERED": "1"}
#: One task: the quickest synthetic sweep (1 method x 1 noise level x 1 trial).
TINY = SyntheticConfig(n=60, sigmas=(1.0,), trials=1, methods=("logistic",), D=20)
ONE = ["--sweep", "benchmark", "--no-plots"]


def _write_config(path: Path, cfg=TINY) -> Path:
    path.write_text(json.dumps(cfg.to_dict()))
    return path


def _wait_for(path: Path, timeout=60.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if path.exists() and path.stat().st_size:
            return
        time.sleep(0.1)
    raise AssertionError(f"{path} did not appear")


def _stop(procs):
    for p in procs[::-1]:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _scheduler(tmp: Path, dashboard: bool = False) -> tuple:
    """A `dask scheduler` on a free port; (process, address)."""
    sched_file = tmp / "scheduler.json"
    dash = ["--dashboard-address", "127.0.0.1:0"] if dashboard else ["--no-dashboard"]
    proc = subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--scheduler-file",
                             str(sched_file), "--host", "127.0.0.1", "--port", "0", *dash], env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for(sched_file)
    except AssertionError:
        _stop([proc])
        raise
    return proc, json.loads(sched_file.read_text())["address"]


def _worker(address: str, cwd: Path, wrap=()) -> subprocess.Popen:
    """A `dask worker` (one thread, no dashboard) whose working directory is ``cwd``."""
    return subprocess.Popen([*wrap, sys.executable, "-m", "distributed.cli.dask_worker", address,
                             "--nthreads", "1", "--no-dashboard", "--host", "127.0.0.1"],
                            cwd=cwd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _wait_workers(address: str, n: int = 1):
    from distributed import Client

    with Client(address, timeout="30s") as c:
        c.wait_for_workers(n, timeout=60)


def _rieszflow(argv, cwd: Path, timeout=240, env=ENV):
    return subprocess.run([sys.executable, "-m", "rieszflow", *argv], cwd=cwd, env=env, timeout=timeout,
                          capture_output=True, text=True)


def test_external_worker_in_another_directory_writes_a_relative_out_under_the_cli_cwd(tmp_path):
    """Finding 1: a worker started elsewhere resolved the relative --out against its own directory."""
    here, there = tmp_path / "cli", tmp_path / "worker"
    here.mkdir()
    there.mkdir()
    cfg = _write_config(tmp_path / "tiny.json")
    sched, address = _scheduler(tmp_path, dashboard=True)
    procs = [sched]
    try:
        procs.append(_worker(address, there))
        _wait_workers(address)
        r = _rieszflow(["synthetic", "--config", str(cfg), *ONE, "--scheduler", address, "--out", "sw"],
                       cwd=here)
        assert r.returncode == 0, r.stderr
        sweep = here / "sw" / "benchmark"
        assert (sweep / "benchmark.h5").is_file()
        assert len(list((sweep / "tasks").glob("*.h5"))) == 1
        assert not (there / "sw").exists()                        # nothing written beside the worker
        assert "1 sweep, 1 task: 1 done, 0 skipped (complete before), 0 failed" in r.stdout
        assert "Dask dashboard: http://127.0.0.1:" in r.stdout    # the scheduler's own dashboard
        assert "merged: sw/benchmark/benchmark.h5" in r.stdout
        assert not list(sweep.rglob(".rieszflow-probe-*"))        # the pre-flight file is removed
    finally:
        _stop(procs)


def _readonly_wrap(path: Path):
    """Run the worker where ``path`` is read-only: a read-only bind mount in its own mount
    namespace when root (chmod does not stop root), else None (the caller uses chmod)."""
    if os.geteuid() != 0:
        return None
    if shutil.which("unshare") is None:
        pytest.skip("running as root without unshare: no way to make a directory unwritable for a worker")
    probe = subprocess.run(["unshare", "-m", "sh", "-c", f'mount --bind -o ro "{path}" "{path}"'],
                           capture_output=True, text=True)
    if probe.returncode:
        pytest.skip(f"running as root and cannot make a read-only mount namespace ({probe.stderr.strip()}); "
                    f"chmod does not stop root")
    return ["unshare", "-m", "sh", "-c", f'mount --bind -o ro "{path}" "{path}" && exec "$@"', "sh"]


def test_a_worker_that_cannot_write_the_sweep_directory_is_refused_before_any_task(tmp_path):
    here, there = tmp_path / "cli", tmp_path / "worker"
    here.mkdir()
    there.mkdir()
    cfg = _write_config(tmp_path / "tiny.json")
    wrap = _readonly_wrap(here)
    out = here / "ro"
    if wrap is None:      # not root: a sweep directory whose tasks/ nobody can write (0o500)
        out.mkdir()
        (out / "config.json").write_text(json.dumps(TINY.to_dict(), indent=1, sort_keys=True))
        (out / "benchmark" / "tasks").mkdir(parents=True)
        (out / "benchmark" / "tasks").chmod(0o500)
    sched, address = _scheduler(tmp_path)
    procs = [sched]
    try:
        procs.append(_worker(address, there, wrap=wrap or ()))
        _wait_workers(address)
        r = _rieszflow(["synthetic", "--config", str(cfg), *ONE, "--quiet", "--scheduler", address,
                        "--out", "ro"], cwd=here)
        assert r.returncode == 2, r.stdout + r.stderr
        err = r.stderr.strip().splitlines()
        assert len(err) == 1, r.stderr                            # one line, no traceback
        assert "cannot write the sweep directory" in err[0]
        assert "worker tcp://127.0.0.1:" in err[0]                # names the worker's address
        assert str(out / "benchmark" / "tasks") in err[0]         # and the absolute path
        assert not list((out / "benchmark" / "tasks").glob("*.h5"))   # no task ran
    finally:
        _stop(procs)
        if wrap is None:
            (out / "benchmark" / "tasks").chmod(0o700)


def test_a_scheduler_without_workers_is_announced_at_once_and_again_after_the_wait(tmp_path):
    cfg = _write_config(tmp_path / "tiny.json")
    sched, address = _scheduler(tmp_path)
    proc = None
    try:
        proc = subprocess.Popen([sys.executable, "-m", "rieszflow", "synthetic", "--config", str(cfg), *ONE,
                                 "--quiet", "--dashboard", "--scheduler", address, "--out", "s"], cwd=tmp_path,
                                env={**ENV, "RIESZFLOW_WORKER_WAIT_S": "0.5"}, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        watchdog = threading.Timer(120, proc.kill)                 # never hangs the suite
        watchdog.start()
        warnings = []
        try:
            for line in proc.stderr:
                if "no workers" in line:
                    warnings.append(line.strip())
                if len(warnings) == 2:
                    break
            proc.send_signal(signal.SIGINT)                        # the user's Ctrl-C ends the wait
            rest = proc.stderr.read()
            printed = proc.stdout.read()
            rc = proc.wait(timeout=60)
        finally:
            watchdog.cancel()
        assert warnings[0].startswith(f"warning: the Dask scheduler {address} has no workers"), warnings
        assert warnings[1].startswith(f"warning: still no workers on the Dask scheduler {address} after"), warnings
        assert rc == 130, rest
        # --dashboard with a scheduler started with --no-dashboard: said, no dead link printed
        assert f"the Dask scheduler {address} serves no dashboard" in printed
        assert "http://" not in printed
        assert "Traceback" not in rest
        assert not list((tmp_path / "s" / "benchmark" / "tasks").glob("*.h5"))
    finally:
        _stop([p for p in (proc, sched) if p is not None])


def test_dashboard_of_the_local_cluster_is_opt_in_and_printed(tmp_path, capsys, monkeypatch):
    cfg = _write_config(tmp_path / "tiny.json")
    base = ["synthetic", "--config", str(cfg), *ONE, "--quiet"]
    assert cli_main([*base, "--workers", "1", "--dashboard", "127.0.0.1:0", "--out", str(tmp_path / "d")]) == 0
    out = capsys.readouterr().out
    assert "Dask dashboard: http://127.0.0.1:" in out
    assert cli_main([*base, "--workers", "1", "--out", str(tmp_path / "n")]) == 0      # default: none
    assert "Dask dashboard" not in capsys.readouterr().out
    # refused before any work: no cluster to show, an address for an external scheduler, no bokeh
    assert cli_main([*base, "--workers", "0", "--dashboard", "--out", str(tmp_path / "z")]) == 2
    assert "--workers 0 runs the tasks in this process" in capsys.readouterr().err
    assert cli_main([*base, "--scheduler", "tcp://127.0.0.1:1", "--dashboard", ":8787",
                     "--out", str(tmp_path / "z")]) == 2
    assert "serves its own dashboard" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "bokeh", None)                # as if the extra were not installed
    assert cli_main([*base, "--workers", "1", "--dashboard", "--out", str(tmp_path / "z")]) == 2
    assert "pip install 'rieszflow[dashboard]'" in capsys.readouterr().err
    assert not (tmp_path / "z").exists()


def test_quiet_still_prints_the_skip_and_failure_counts(tmp_path, capsys):
    cfg = _write_config(tmp_path / "tiny.json", TINY.replace(trials=2))
    argv = ["synthetic", "--config", str(cfg), *ONE, "--quiet", "--workers", "0", "--out", str(tmp_path / "q")]
    assert cli_main(argv) == 0
    assert "rieszflow synthetic: 1 sweep, 2 tasks: 2 done, 0 skipped (complete before), 0 failed" \
        in capsys.readouterr().out
    assert cli_main(argv) == 0
    assert "1 sweep, 2 tasks: 0 done, 2 skipped (complete before), 0 failed" in capsys.readouterr().out


def _always_fails(task, config, rng):
    raise ArithmeticError("injected failure")


def test_a_sweep_whose_tasks_all_fail_lists_them_once_and_merges_nothing(tmp_path, capsys, monkeypatch):
    from rieszflow.studies.synthetic import study

    monkeypatch.setattr(study, "benchmark_task", _always_fails)     # resolved by name in-process
    cfg = _write_config(tmp_path / "tiny.json", TINY.replace(trials=3))
    assert cli_main(["synthetic", "--config", str(cfg), *ONE, "--workers", "0",
                     "--out", str(tmp_path / "f")]) == 1
    printed = capsys.readouterr()
    both = printed.out + printed.err
    assert both.count("FAILED") == 3                                # each failed task once
    assert both.count("ArithmeticError: injected failure") == 3
    assert "1 sweep, 3 tasks: 0 done, 0 skipped (complete before), 3 failed" in printed.out
    last = printed.out.strip().splitlines()[-1]
    assert last.startswith("nothing merged: no task of these sweeps is complete"), last
    assert "merged:  (" not in printed.out


def test_ldp_result_lines_do_not_land_on_the_progress_bar_and_quiet_keeps_the_counts(tmp_path, capsys):
    from rieszflow.studies.ldp.config import quick_config

    cfg = quick_config(seed=5).replace(n_particles=(3, 5), burn_in=100, n_steps=200, chains_per_theta=4,
                                       chains_at_zero=8, n_theta=5, n_cells=100)
    path = _write_config(tmp_path / "ldp.json", cfg)
    screen = io.StringIO()                                          # stdout and stderr on one terminal
    with contextlib.redirect_stdout(screen), contextlib.redirect_stderr(screen):
        assert cli_main(["ldp", "--config", str(path), "--no-plots", "--out", str(tmp_path / "l.h5")]) == 0
    text = screen.getvalue()
    assert "ldp cells" in text                                      # the bar was drawn
    segments = [seg for line in text.split("\n") for seg in line.split("\r")]
    results = [seg for seg in segments if " r_N=" in seg]
    assert len(results) == 2 * len(cfg.regimes), text
    for seg in results:
        assert seg.startswith("["), f"a result line written onto the bar: {seg!r}"
    n = 2 * len(cfg.regimes)
    assert f"rieszflow ldp: {n} (regime, N) cells: {n} done, 0 skipped (complete before), 0 failed" in text
    assert cli_main(["ldp", "--resume", "--quiet", "--no-plots", "--out", str(tmp_path / "l.h5")]) == 0
    assert f"{n} (regime, N) cells: 0 done, {n} skipped (complete before), 0 failed" in capsys.readouterr().out


def test_nlp_qqp_dir_given_relative_is_made_absolute_for_the_workers(tmp_path, monkeypatch):
    from rieszflow.studies.nlp.study import NLPConfig, specs

    monkeypatch.chdir(tmp_path)
    cfg = NLPConfig(qqp_dir="glue/QQP")                       # as from --set qqp_dir=... or --config
    assert cfg.qqp_dir == str(tmp_path / "glue" / "QQP")
    qqp = [sp for sp in specs(cfg) if sp.name == "nlp-qqp"]
    assert len(qqp) == 1 and qqp[0].config["qqp_dir"] == str(tmp_path / "glue" / "QQP")   # what workers get


@pytest.mark.parametrize("command, tiny", [("mean-field", "test_mean_field_study:_tiny_dict"),
                                           ("kernel-mean-field", "test_kernel_mean_field:_tiny")])
def test_single_file_studies_print_their_task_counts_with_quiet(command, tiny, tmp_path, capsys):
    import importlib

    module, _, fn = tiny.partition(":")
    cfg = tmp_path / "tiny.json"
    cfg.write_text(json.dumps(getattr(importlib.import_module(module), fn)()))
    assert cli_main([command, "--config", str(cfg), "--quiet", "--no-plots", "--workers", "0",
                     "--out", str(tmp_path / "s.h5")]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith(f"rieszflow {command}: ")]
    assert len(lines) == 1, lines
    assert lines[0].endswith(" done, 0 skipped (complete before), 0 failed") and " particle tasks: " in lines[0]
