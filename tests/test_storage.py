"""HDF5 storage: round trip through xarray, crash safety, refusal to overwrite, foreign files."""
import os
import signal
import subprocess
import sys
import textwrap

import h5py
import numpy as np
import pytest
import xarray as xr

from rieszflow.engine.storage import FORMAT, RunFileError, TrajectoryWriter, open_run


def _write(path, n=5, **kw):
    with TrajectoryWriter(path, "demo", config={"n": n, "lam": 1e-3, "name": "x", "lst": [1, 2]},
                          attrs={"seed": 3}, **kw) as w:
        w.dimension("time", None)
        w.dimension("particle", 4)
        w.dimension("coord", 2)
        w.variable("omega", ("time", "particle", "coord"))
        w.variable("hamiltonian", ("time",))
        for t in range(n):
            w.append("time", {"omega": np.full((4, 2), t, float), "hamiltonian": -t}, coord=0.5 * t)
        w.dimension("metric", 2, coords=np.array(["accuracy", "mcc"]))
        w.variable("test_metrics", ("metric",), data=[0.7, 0.4])


def test_round_trip_through_xarray(tmp_path):
    p = tmp_path / "run.h5"
    _write(p)
    with xr.open_dataset(p, engine="h5netcdf") as ds:
        assert ds.omega.dims == ("time", "particle", "coord")
        assert ds.omega.shape == (5, 4, 2)
        np.testing.assert_array_equal(ds.time.values, 0.5 * np.arange(5))
        np.testing.assert_array_equal(ds.omega.values[:, 0, 0], np.arange(5))
        np.testing.assert_array_equal(ds.hamiltonian.values, -np.arange(5))
        assert list(ds.metric.values) == ["accuracy", "mcc"]
        assert ds.attrs["rieszflow_format"] == FORMAT
        assert ds.attrs["status"] == "complete"
        assert ds.attrs["seed"] == 3 and ds.attrs["config_n"] == 5
        assert "version_numpy" in ds.attrs and "git_commit" in ds.attrs
    ds = open_run(p, kind="demo")
    assert float(ds.test_metrics.sel(metric="mcc")) == pytest.approx(0.4)
    # every dimension of every variable is a real dimension scale (netCDF4-compatible)
    with h5py.File(p, "r") as f:
        for name in ("time", "particle", "coord"):
            assert f[name].is_scale


def test_refuses_to_overwrite(tmp_path):
    p = tmp_path / "run.h5"
    _write(p, n=2)
    with pytest.raises(FileExistsError, match="overwrite"):
        _write(p, n=3)
    assert open_run(p).sizes["time"] == 2          # untouched
    _write(p, n=3, overwrite=True)
    assert open_run(p).sizes["time"] == 3


def test_resume_appends(tmp_path):
    p = tmp_path / "run.h5"
    _write(p, n=2)
    w = TrajectoryWriter(p, "demo", resume=True)
    w.append("time", {"omega": np.ones((4, 2)), "hamiltonian": 7.0}, coord=9.0)
    w.close()
    ds = open_run(p)
    assert ds.sizes["time"] == 3 and float(ds.hamiltonian[-1]) == 7.0
    assert ds.attrs["resumed"] == 1


def test_foreign_and_corrupt_files(tmp_path):
    foreign = tmp_path / "foreign.h5"
    with h5py.File(foreign, "w") as f:
        f["x"] = np.arange(3)
    with pytest.raises(RunFileError, match="not a rieszflow run"):
        open_run(foreign)
    corrupt = tmp_path / "corrupt.h5"
    corrupt.write_bytes(b"\x89HDF\r\n\x1a\n" + b"garbage" * 100)
    with pytest.raises(RunFileError, match="not a readable HDF5"):
        open_run(corrupt)
    p = tmp_path / "run.h5"
    _write(p, n=1)
    with pytest.raises(RunFileError, match="kind='demo'"):
        open_run(p, kind="main_job")
    with pytest.raises(RunFileError):
        TrajectoryWriter(foreign, "demo", resume=True)
    with pytest.raises(FileNotFoundError):
        open_run(tmp_path / "missing.h5")


def test_append_checks_shapes(tmp_path):
    with TrajectoryWriter(tmp_path / "a.h5", "demo") as w:
        w.dimension("time", None)
        w.dimension("particle", 3)
        w.variable("x", ("time", "particle"))
        with pytest.raises(ValueError, match="shape"):
            w.append("time", {"x": np.zeros(4)})
        with pytest.raises(KeyError, match="does not exist"):
            w.append("time", {"y": np.zeros(3)})
        with pytest.raises(KeyError, match="not created"):
            w.variable("z", ("nope",))


@pytest.mark.parametrize("flush_records, kept", [(1, 10), (4, 8), (256, 0)])
def test_killed_writer_leaves_readable_file(tmp_path, flush_records, kept):
    """A process killed with SIGKILL between records leaves every flushed record readable: with
    blocks of ``flush_records`` records, 10 appends leave the full blocks (the last, partial block
    is lost), and the variables exist even when no block was written."""
    p = tmp_path / "killed.h5"
    code = textwrap.dedent(f"""
        import sys, time, numpy as np
        sys.path.insert(0, {os.getcwd()!r})
        from rieszflow.engine.storage import TrajectoryWriter
        w = TrajectoryWriter({str(p)!r}, "demo", flush_records={flush_records},
                             flush_seconds=float("inf"))
        w.dimension("time", None); w.dimension("particle", 8)
        w.variable("x", ("time", "particle"))
        for t in range(10):
            w.append("time", {{"x": np.full(8, float(t))}})
        print("ready", flush=True)
        time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                            cwd=os.getcwd())
    try:
        assert proc.stdout.readline().strip() == "ready"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    ds = open_run(p)
    assert ds.attrs["status"] == "running"
    np.testing.assert_array_equal(ds.x.values[:, 0], np.arange(float(kept)))


def test_bad_record_leaves_file_unchanged_and_redeclaration_is_checked(tmp_path):
    p = tmp_path / "a.h5"
    with TrajectoryWriter(p, "demo") as w:
        w.dimension("time", None)
        w.dimension("particle", 3)
        w.variable("x", ("time", "particle"))
        w.variable("y", ("time",))
        w.append("time", {"x": np.zeros(3), "y": 1.0})
        with pytest.raises(ValueError, match="shape"):
            w.append("time", {"y": 2.0, "x": np.zeros(4)})     # y is fine, x is not
        assert w.length("time") == 1                           # nothing was grown
        with pytest.raises(ValueError, match="cannot redeclare"):
            w.dimension("particle", 4)
        with pytest.raises(ValueError, match="cannot redeclare"):
            w.variable("x", ("particle",))
        w.dimension("cell", 2)
        w.variable("rho", ("cell",), data=[1.0, 2.0])
        w.variable("rho", ("cell",), data=[3.0, 4.0])          # redeclared with data: rewritten
        w.append("time", {"x": np.ones(3), "y": 3.0})
        w.truncate("time", 1)
        with pytest.raises(ValueError, match="truncate"):
            w.truncate("time", 5)
    ds = open_run(p)
    assert ds.sizes["time"] == 1 and float(ds.y[0]) == 1.0
    np.testing.assert_array_equal(ds.rho.values, [3.0, 4.0])


def test_check_resumable_names_every_differing_key(tmp_path):
    """The one resume check: stored config returned when equal; each differing key reported with its
    stored and given value; missing, foreign and (optionally) complete files refused."""
    from rieszflow.engine.storage import check_resumable

    p = tmp_path / "run.h5"
    _write(p)
    stored = check_resumable(p, "demo", {"n": 5, "lam": 1e-3, "name": "x", "lst": [1, 2]})
    assert stored == {"n": 5, "lam": 1e-3, "name": "x", "lst": [1, 2]}
    with pytest.raises(ValueError, match=r"another configuration \(lam: stored 0.001, given 0.01; "
                                         r"n: stored 5, given 6\)"):
        check_resumable(p, "demo", {"n": 6, "lam": 1e-2, "name": "x", "lst": [1, 2]})
    with pytest.raises(ValueError, match=r"extra: stored '<absent>', given 1"):
        check_resumable(p, "demo", {"n": 5, "lam": 1e-3, "name": "x", "lst": [1, 2], "extra": 1})
    with pytest.raises(ValueError, match="nothing to resume"):
        check_resumable(p, "demo", stored, allow_complete=False)
    with pytest.raises(RunFileError, match="kind='demo', expected 'other'"):
        check_resumable(p, "other", stored)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        check_resumable(tmp_path / "missing.h5", "demo", stored)


def test_provenance_records_the_commit_of_the_loaded_code(monkeypatch):
    """A long run records the commit its code was loaded from, not the checkout's HEAD at write time."""
    import importlib

    P = importlib.import_module("rieszflow.engine.storage.provenance")     # the module, not the function
    monkeypatch.setattr(P, "_git_state", lambda: ("0000000-moved-on", True, "ab" * 32))
    info = P.provenance()
    assert info["git_commit"] == P._COMMIT_AT_IMPORT != "0000000-moved-on"
    assert info["git_diff_sha256"] == P._DIFF_AT_IMPORT


def test_git_state_hashes_the_uncommitted_code(tmp_path, monkeypatch):
    """A dirty tree is named by the hash of its changes: two different edits of one commit differ,
    the same edit gives the same hash, and a clean tree has no hash (mutation: drop the diff)."""
    import importlib
    import subprocess

    P = importlib.import_module("rieszflow.engine.storage.provenance")
    repo = tmp_path / "repo"
    pkg = repo / "src" / "rieszflow" / "engine" / "storage"
    pkg.mkdir(parents=True)
    (pkg / "provenance.py").write_text("x = 1\n")
    run = dict(cwd=repo, check=True, capture_output=True)
    subprocess.run(["git", "init", "-q"], **run)
    subprocess.run(["git", "-c", "user.email=a@b", "-c", "user.name=a", "add", "."], **run)
    subprocess.run(["git", "-c", "user.email=a@b", "-c", "user.name=a", "commit", "-qm", "c"], **run)
    monkeypatch.setattr(P, "__file__", str(pkg / "provenance.py"))
    commit, dirty, diff = P._git_state()
    assert dirty is False and diff == "" and len(commit) == 40
    (pkg / "provenance.py").write_text("x = 2\n")
    c2, d2, h2 = P._git_state()
    assert c2 == commit + "-dirty" and d2 is True and len(h2) == 64
    assert P._git_state()[2] == h2                               # same edit, same hash
    (pkg / "provenance.py").write_text("x = 3\n")
    assert P._git_state()[2] != h2                               # another edit, another hash
    (pkg / "provenance.py").write_text("x = 1\n")
    (repo / "src" / "rieszflow" / "new.py").write_text("y = 1\n")     # untracked source counts
    assert P._git_state()[1] is True
    ident = P.code_identity({"git_commit": c2, "git_commit_of": "loaded code", "git_diff_sha256": h2})
    assert ident == f"{c2}+{h2[:12]}"
    assert P.code_identity({"git_commit": commit}) == commit + " (at write)"
    assert P.code_identity({}) == "unknown"
