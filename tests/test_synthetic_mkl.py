"""MKL (4) of paper 000's synthetic benchmark (method ``mkl_memo``, optional extra ``mkl``).

Without MKLpy (forced here by hiding it, so these run in every environment) the method raises
MethodUnavailable naming the install command, and a sweep containing it exits 0 and reports it as
unavailable (printed and markdown reports), not as failed; once MKLpy imports, a rerun runs those
tasks again. With MKLpy (``pytest.importorskip``) a tiny fit is above chance on an easy problem
and MEMO's kernel weights are non-negative and sum to 1.
"""
import json
import pickle
import sys

import numpy as np
import pytest

from rieszflow.studies.cli import main as cli_main
from rieszflow.studies.sweep import Task, open_sweep
from rieszflow.studies.synthetic import methods as methods_module
from rieszflow.studies.synthetic.methods import (BENCHMARK_METHODS, MKL_GAMMAS, MKL_INSTALL, METHODS,
                                                 MethodUnavailable, missing_dependency)
from rieszflow.studies.synthetic.study import SyntheticConfig, benchmark_task

TINY = SyntheticConfig(n=60, sigmas=(1e-3, 1.0), trials=2, methods=("logistic", "mkl_memo"), D=10,
                       runtime_sizes=(30, 40, 50), runtime_trials=1)


@pytest.fixture
def no_mklpy(monkeypatch):
    """MKLpy hidden from this process (a None entry in sys.modules makes its import fail)."""
    for name in ("MKLpy", "MKLpy.algorithms"):
        monkeypatch.setitem(sys.modules, name, None)


def _moons(n=160, seed=0):
    from sklearn.datasets import make_moons

    X, y = make_moons(n_samples=n, noise=0.1, random_state=seed)
    return X, y.astype(np.int64)


def test_mkl_memo_is_registered_with_the_papers_bandwidths():
    assert "mkl_memo" in METHODS and "mkl_memo" in BENCHMARK_METHODS
    assert MKL_GAMMAS == (0.1, 0.3, 0.7, 1.0, 1.3, 1.6)
    assert ".[mkl]" in MKL_INSTALL and "download.pytorch.org/whl/cpu" in MKL_INSTALL


def test_without_mklpy_the_method_is_unavailable_with_the_install_command(no_mklpy):
    X, y = _moons(40)
    with pytest.raises(MethodUnavailable) as e:
        METHODS["mkl_memo"](X[:30], y[:30], X[30:], np.random.default_rng(0), {})
    assert e.value.method == "mkl_memo"
    assert e.value.reason == f"MKLpy not installed: {MKL_INSTALL}"
    assert str(e.value) == f"mkl_memo: unavailable (MKLpy not installed: {MKL_INSTALL})"
    assert missing_dependency("mkl_memo") == f"MKLpy not installed: {MKL_INSTALL}"
    assert missing_dependency("logistic") is None
    back = pickle.loads(pickle.dumps(e.value))             # crosses Dask workers intact
    assert (back.method, back.reason) == (e.value.method, e.value.reason)


def test_unavailable_task_is_recorded_with_nan_metrics_and_the_reason(no_mklpy):
    ds = benchmark_task(Task("benchmark", "mkl_memo", (("sigma", 1.0),), 0), TINY.to_dict(),
                        np.random.default_rng(0))
    assert float(ds.available) == 0.0 and ds.available.attrs["reason"].startswith("MKLpy not installed")
    assert ds.attrs["unavailable_reason"] == f"MKLpy not installed: {MKL_INSTALL}"
    assert all(np.isnan(float(ds[v])) for v in ("accuracy", "f1", "seconds"))
    assert 0.0 <= float(ds.test_positive_rate) <= 1.0
    ran = benchmark_task(Task("benchmark", "logistic", (("sigma", 1.0),), 0), TINY.to_dict(),
                         np.random.default_rng(0))
    assert float(ran.available) == 1.0 and np.isfinite(float(ran.accuracy))


def test_sweep_with_mkl_memo_unavailable_exits_0_and_reports_it(no_mklpy, tmp_path, capsys):
    from rieszflow.studies.runs.report import report_markdown

    cfg = tmp_path / "tiny.json"
    cfg.write_text(json.dumps(TINY.to_dict()))
    out = tmp_path / "s"
    argv = ["synthetic", "--config", str(cfg), "--quiet", "--no-plots", "--workers", "0",
            "--sweep", "benchmark", "--sweep", "runtime", "--out", str(out)]
    assert cli_main(argv) == 0
    printed = capsys.readouterr()
    line = f"mkl_memo: unavailable (MKLpy not installed: {MKL_INSTALL}) in 4 of 4 tasks"
    assert line in printed.out and "mkl_memo: unavailable (MKLpy not installed" in printed.out
    assert "FAILED" not in printed.err and not (out / "benchmark" / "failures.json").exists()
    bench = open_sweep(out / "benchmark")
    assert bench.attrs["status"] == "complete"
    assert bench.available.sel({"method": "mkl_memo"}).values.tolist() == [[0.0, 0.0], [0.0, 0.0]]
    assert bool(np.isnan(bench.accuracy.sel({"method": "mkl_memo"})).all())
    assert bool((bench.available.sel({"method": "logistic"}) == 1.0).all())
    assert "mkl_memo" in printed.out.split("accuracy:")[1].split("f1:")[0]   # its row says so
    runtime_rows = [ln for ln in printed.out.splitlines() if ln.startswith("MKL-SVM")]
    assert len(runtime_rows) == 1 and "unavailable" in runtime_rows[0]
    # the markdown report (rieszflow report) says the same
    page = report_markdown([out / "benchmark" / "benchmark.h5", out / "runtime" / "runtime.h5"])
    assert line in page and "in 3 of 3 tasks" in page
    # rerunning skips the unavailable tasks while MKLpy is still missing ...
    assert cli_main(argv) == 0
    assert "running them again" not in capsys.readouterr().out


def test_rerun_after_the_extra_imports_runs_the_unavailable_tasks_again(no_mklpy, tmp_path, monkeypatch,
                                                                         capsys):
    cfg = tmp_path / "tiny.json"
    cfg.write_text(json.dumps(TINY.to_dict()))
    argv = ["synthetic", "--config", str(cfg), "--no-plots", "--workers", "0", "--sweep", "benchmark",
            "--out", str(tmp_path / "s")]
    assert cli_main([*argv, "--quiet"]) == 0
    capsys.readouterr()
    # the main process now finds MKLpy (simulated); the tasks run again (and, MKLpy still not
    # importable in the task, are recorded unavailable again)
    monkeypatch.setattr(methods_module, "missing_dependency", lambda m: None)
    monkeypatch.setattr("rieszflow.studies.synthetic.study.missing_dependency", lambda m: None)
    assert cli_main(argv) == 0
    out = capsys.readouterr().out
    assert "4 task(s) recorded mkl_memo as unavailable; it imports now: running them again" in out
    assert "4 of 8 tasks complete before, skipped; running 4" in out


def test_memo_fit_is_above_chance_with_weights_on_the_simplex():
    pytest.importorskip("MKLpy")
    X, y = _moons(200)
    y_pred, learned = METHODS["mkl_memo"](X[:140], y[:140], X[140:], np.random.default_rng(0), {})
    assert y_pred.shape == (60,) and y_pred.dtype == np.int64
    assert np.mean(y_pred == y[140:]) > 0.8                     # chance is 0.5 (balanced moons)
    w = learned["kernel_weight"]
    assert w.shape == (6,) and np.all(w >= 0) and abs(w.sum() - 1.0) < 1e-12
    assert np.ptp(w) > 0.01                                     # lr = 1 moves them off uniform
    np.testing.assert_array_equal(learned["kernel_gamma"], MKL_GAMMAS)


def test_memo_task_stores_the_kernel_weights(capsys):
    pytest.importorskip("MKLpy")
    ds = benchmark_task(Task("benchmark", "mkl_memo", (("sigma", 1e-3),), 0), TINY.to_dict(),
                        np.random.default_rng(0))
    assert float(ds.available) == 1.0 and 0.0 <= float(ds.accuracy) <= 1.0
    assert ds.kernel_weight.dims == ("kernel_gamma",)
    np.testing.assert_array_equal(ds.kernel_gamma.values, MKL_GAMMAS)
    assert abs(float(ds.kernel_weight.sum()) - 1.0) < 1e-12
    assert "torch.Size" not in capsys.readouterr().out          # MEMO's debug prints swallowed
