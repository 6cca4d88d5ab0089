"""``rieszflow status`` under faults (issue 22): dead writers, progress and ETA, silent corruption.

Each test reproduces a finding of the issue on the old behaviour: a SIGKILLed writer was reported
as live ("being written by process N"); no progress fraction or ETA; a flipped byte in a chunk was
returned as data; a damaged object header gave ``KeyError: 'Unable to open object by token'``.
"""
import datetime as dt
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import h5py
import numpy as np
import pytest
import xarray as xr

from rieszflow.engine.storage import CONVENTIONS, RunFileError, TrajectoryWriter, open_run
from rieszflow.engine.storage.lock import ALIVE, GONE, OTHER_HOST, UNKNOWN, holder_state
from rieszflow.studies.cli import main as cli_main
from rieszflow.studies.runs.inspect import STATES, format_status, run_status

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}

#: the configuration keys status derives a main-job file's progress from
MAIN_CFG = {"epochs": 3, "phase_a_epochs": 1, "kernel": True, "attention": "linear",
            "train_limit": 64, "batch_size": 32}


def _writer(path, kind="demo", config=None):
    """A tiny writer process: opens a TrajectoryWriter, appends a record every 50 ms, prints each."""
    code = textwrap.dedent(f"""
        import time
        from rieszflow.engine.storage import TrajectoryWriter
        w = TrajectoryWriter({str(path)!r}, {kind!r}, config={config or {"n": 1}!r}, flush_records=1)
        w.dimension("step", None)
        w.variable("x", ("step",), attrs={{"long_name": "x", "units": "1"}})
        for t in range(100000):
            w.append("step", {{"x": float(t)}}, coord=float(t))
            print("record", t, flush=True)
            time.sleep(0.05)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert line.startswith("record"), proc.stderr.read()
    return proc


@pytest.mark.parametrize("kind, config", [("demo", None), ("main_job", MAIN_CFG)])
def test_a_live_writer_is_running_and_a_sigkilled_one_is_stale(tmp_path, kind, config, capsys):
    p = tmp_path / "live.h5"
    proc = _writer(p, kind, config)
    try:
        info = run_status(p)
        assert info["state"] == "running" and info["writer"] == ALIVE
        assert info["lock"]["pid"] == proc.pid and info["resumable"] is None
        assert cli_main(["status", str(p)]) == 0
        out = capsys.readouterr().out
        assert "status running" in out and f"being written by process {proc.pid}" in out
    finally:
        proc.kill()
        proc.wait(timeout=60)                       # reaped: no zombie left to look alive
    assert proc.returncode == -signal.SIGKILL
    assert (tmp_path / "live.h5.lock").exists()     # SIGKILL leaves the lock and status=running
    info = run_status(p)
    assert info["status"] == "running" and info["state"] == "stale (writer gone)"
    assert info["writer"] == GONE and info["state"] in STATES
    assert cli_main(["status", str(p)]) == 0
    out = capsys.readouterr().out
    assert "status stale (writer gone)" in out and "being written by" not in out
    assert f"stale lock of process {proc.pid}" in out
    if kind == "main_job":                          # no checkpoint beside it: say so
        assert "not resumable (killed before its first checkpoint; start again with --overwrite)" in out
        (tmp_path / "live.h5.ckpt.npz").write_bytes(b"")
        assert "resumable from the checkpoint live.h5.ckpt.npz" in run_status(p)["resumable"]
    else:
        assert "resumable" not in out


def test_a_zombie_writer_is_gone(tmp_path):
    """A killed writer whose parent has not reaped it still answers kill(pid, 0): /proc says 'Z'."""
    p = tmp_path / "z.h5"
    proc = _writer(p)
    proc.kill()
    deadline = time.time() + 30
    while time.time() < deadline and holder_state(json.loads((tmp_path / "z.h5.lock").read_text())) != GONE:
        time.sleep(0.05)
    try:
        assert run_status(p)["state"] == "stale (writer gone)"
    finally:
        proc.wait(timeout=60)


def test_holder_state_other_host_reused_pid_and_unreadable_lock():
    now = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    me = {"pid": os.getpid(), "host": socket.gethostname(), "started": now}
    assert holder_state(me) == ALIVE
    assert holder_state({**me, "host": "elsewhere.example"}) == OTHER_HOST
    # this process started after 2001: the pid no longer belongs to the lock's writer
    assert holder_state({**me, "started": "2001-01-01T00:00:00+00:00"}) == GONE
    assert holder_state(None) == UNKNOWN and holder_state({"pid": "x"}) == UNKNOWN


def test_a_lock_of_another_host_cannot_be_checked_from_here(tmp_path, capsys):
    p = tmp_path / "x.h5"
    w = TrajectoryWriter(p, "demo")
    w._lock.release()                       # as if another host wrote the file and holds the lock
    w._lock.lock_path.write_text(json.dumps({"pid": 4242, "host": "elsewhere.example",
                                             "started": "2026-01-01T00:00:00+00:00"}))
    try:
        info = run_status(p)
        assert info["state"] == "running" and info["writer"] == OTHER_HOST
        assert "cannot tell" in info["state_note"]
        assert "cannot tell from this host whether it still runs" in format_status(info)
    finally:
        w._lock.lock_path.unlink()
        w._f.close()


def test_progress_and_eta_from_planned_lengths(tmp_path):
    """f = sum min(len, plan) / sum plan over the planned dimensions; ETA = wall (1 - f) / f."""
    p = tmp_path / "x.h5"
    with TrajectoryWriter(p, "demo", flush_records=1) as w:
        w.dimension("step", None)
        w.dimension("epoch", None)
        w.variable("x", ("step",), attrs={"long_name": "x", "units": "1"})
        w.variable("y", ("epoch",), attrs={"long_name": "y", "units": "1"})
        w.plan(step=12, epoch=4)
        w.progress(phase="A", epoch="1/2")
        for t in range(6):
            w.append("step", {"x": float(t)})
        w.append("epoch", {"y": 1.0})
        w.flush()
        info = run_status(p)
        wall = float(h5py.File(p, "r", locking=False).attrs["wall_seconds"])
        with pytest.raises(ValueError, match="planned length of 'step'"):
            w.plan(step=-1)
    prog = info["progress"]
    assert prog["planned"] == {"epoch": 4, "step": 12}
    assert prog["fraction"] == pytest.approx(7 / 16)
    assert prog["eta_seconds"] == pytest.approx(wall * (9 / 16) / (7 / 16))
    text = format_status(info)
    assert "progress: phase A, epoch 1/2; 43.8% done" in text and "ETA " in text
    assert "planned: epoch 1/4, step 6/12" in text


def test_progress_of_a_main_job_file_without_plans_comes_from_its_configuration(tmp_path):
    """An interrupted main-job file of the old layout: Phase A (1 epoch of ceil(64/32) = 2 steps)
    done, 1 of 3 Phase B epochs (2 optimiser steps each) done: 2 of 4 epochs, half done."""
    p = tmp_path / "m.h5"
    with pytest.raises(KeyboardInterrupt):
        with TrajectoryWriter(p, "main_job", config=MAIN_CFG) as w:
            for dim in ("step", "epoch", "batch"):
                w.dimension(dim, None)
                w.variable(f"v_{dim}", (dim,), attrs={"long_name": dim, "units": "1"})
            for dim, n in (("step", 2), ("epoch", 1), ("batch", 2)):
                for i in range(n):
                    w.append(dim, {f"v_{dim}": 0.0})
            w.set_attrs(phase_a_steps=2)
            raise KeyboardInterrupt
    info = run_status(p)
    assert info["state"] == "interrupted"
    assert info["progress"]["fields"] == {"phase": "B", "epoch": "2/3", "step": 2}
    assert info["progress"]["fraction"] == pytest.approx(0.5)
    assert "about" in format_status(info) and "of work left" in format_status(info)
    assert "not resumable" in info["resumable"]


def test_no_eta_without_plans(tmp_path):
    p = tmp_path / "x.h5"
    TrajectoryWriter(p, "demo").close("interrupted")
    text = format_status(run_status(p))
    assert "no ETA (the job declared no planned lengths" in text


def test_wall_seconds_and_updated_are_kept_at_each_flush_and_summed_over_resumes(tmp_path):
    p = tmp_path / "x.h5"
    w = TrajectoryWriter(p, "demo")
    w.dimension("step", None)
    w.variable("x", ("step",), attrs={"long_name": "x", "units": "1"})
    time.sleep(0.05)
    w.append("step", {"x": 1.0})
    w.flush()
    with h5py.File(p, "r", locking=False) as f:       # before close: a SIGKILL keeps these
        first = float(f.attrs["wall_seconds"])
        assert first >= 0.05 and dt.datetime.fromisoformat(f.attrs["updated"]).tzinfo is not None
        assert f.attrs["Conventions"] == CONVENTIONS == "CF-1.10"
    w.close("interrupted")
    closed = float(open_run(p).attrs["wall_seconds"])
    assert closed >= first
    w = TrajectoryWriter(p, "demo", resume=True)
    time.sleep(0.05)
    w.close()
    assert float(open_run(p).attrs["wall_seconds"]) >= closed + 0.05


def _demo_file(p):
    with TrajectoryWriter(p, "demo", config={"n": 4}) as w:
        w.dimension("step", None, attrs={"long_name": "step", "units": "1"}, dtype="i8")
        w.dimension("particle", 4, coords=np.arange(4), attrs={"long_name": "particle", "units": "1"})
        w.dimension("label", 2, coords=np.array(["a", "b"]), attrs={"long_name": "label", "units": "1"})
        w.variable("x", ("step", "particle"), attrs={"long_name": "x", "units": "m"})
        w.variable("y", ("particle",), data=np.arange(4.0), attrs={"long_name": "y", "units": "1"})
        w.variable("scalar", (), data=1.5, attrs={"long_name": "s", "units": "1"})
        for t in range(5):
            w.append("step", {"x": np.full(4, t + 0.5)})


def test_every_numeric_dataset_carries_fletcher32_and_reads_with_xarray(tmp_path):
    p = tmp_path / "x.h5"
    _demo_file(p)
    with h5py.File(p, "r") as f:
        assert f["x"].maxshape[0] is None and f["x"].fletcher32 and f["step"].fletcher32
        assert f["y"].fletcher32 and f["particle"].fletcher32
        assert not f["label"].fletcher32 and not f["scalar"].fletcher32   # HDF5 allows no filter there
    with xr.open_dataset(p, engine="h5netcdf") as ds:
        np.testing.assert_array_equal(ds["x"].values[:, 0], np.arange(5) + 0.5)
        assert ds.attrs["Conventions"] == "CF-1.10"
    assert cli_main(["status", "--verify", str(p)]) == 0


def test_verify_names_the_variable_of_a_flipped_byte(tmp_path, capsys):
    p = tmp_path / "x.h5"
    _demo_file(p)
    with h5py.File(p, "r") as f:
        info = f["x"].id.get_chunk_info(3)                 # the chunk of record 3
        offset, size = info.byte_offset, info.size
    with open(p, "r+b") as fh:
        fh.seek(offset + size // 2)
        b = fh.read(1)
        fh.seek(offset + size // 2)
        fh.write(bytes([b[0] ^ 0x5A]))
    capsys.readouterr()
    assert cli_main(["status", "--verify", str(p)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "variable 'x' is damaged" in err[0] and str(p) in err[0], err
    with pytest.raises(OSError):                            # not silently returned as data
        h5py.File(p, "r")["x"][3]


def test_a_damaged_object_header_is_one_line_exit_2_naming_file_and_object(tmp_path, capsys):
    p = tmp_path / "x.h5"
    _demo_file(p)
    with h5py.File(p, "r") as f:
        addr = h5py.h5o.get_info(f["y"].id).addr
    with open(p, "r+b") as fh:
        fh.seek(addr)
        fh.write(bytes(range(7, 47)))
    capsys.readouterr()
    assert cli_main(["status", str(p)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "object 'y' is damaged" in err[0] and str(p) in err[0], err
    assert "Traceback" not in err[0]
    with pytest.raises(RunFileError, match="'y'"):
        run_status(p)
    assert cli_main(["status", "--verify", str(p)]) == 2
    assert "variable 'y' is damaged" in capsys.readouterr().err


def test_the_stale_lock_warning_is_a_sentence(tmp_path):
    p = tmp_path / "x.h5"
    (tmp_path / "x.h5.lock").write_text(json.dumps({"pid": 2**22 + 7, "host": socket.gethostname(),
                                                    "started": "2026-01-01T00:00:00+00:00"}))
    with pytest.warns(RuntimeWarning) as rec:
        TrajectoryWriter(p, "demo").close()
    msg = str(rec[0].message)
    assert msg.startswith("Taking over the stale lock file") and msg.endswith("on this host.")


def _damaged_header(p):
    _demo_file(p)
    with h5py.File(p, "r") as f:
        addr = h5py.h5o.get_info(f["y"].id).addr
    with open(p, "r+b") as fh:
        fh.seek(addr)
        fh.write(bytes(range(7, 47)))


@pytest.mark.parametrize("make", ["junk", "foreign", "damaged"])
def test_corrupt_or_foreign_files_are_run_file_errors_in_every_reader(tmp_path, make):
    from rieszflow.engine.storage import check_resumable, check_run_file, missing_cf_attributes, verify_run_file
    from rieszflow.studies.runs.inspect import compare_runs, open_runs

    p = tmp_path / "x.h5"
    if make == "junk":
        p.write_bytes(b"not an HDF5 file " * 64)
    elif make == "foreign":
        with h5py.File(p, "w") as f:
            f["x"] = [1.0]
    else:
        _damaged_header(p)
    readers = [open_run, verify_run_file, run_status, lambda q: open_runs([q]),
               lambda q: compare_runs([q, q])]
    if make != "damaged":                   # these read the root attributes only
        readers += [check_run_file, lambda q: check_resumable(q, "demo", {"n": 4})]
    if make != "foreign":                   # a CF check of any netCDF file, rieszflow's or not
        readers += [missing_cf_attributes]
    for read in readers:
        with pytest.raises(RunFileError) as e:
            read(p)
        assert str(p) in str(e.value) and "\n" not in str(e.value)


def test_an_unreadable_lock_of_a_running_file_is_not_called_stale(tmp_path):
    """A lock file that names no readable writer (empty: being created this instant) cannot tell
    whether the writer runs: 'running' with a note, never 'stale (writer gone)'."""
    p = tmp_path / "x.h5"
    w = TrajectoryWriter(p, "demo")
    w._lock.release()
    w._lock.lock_path.write_text("")
    try:
        info = run_status(p)
        assert info["writer"] == UNKNOWN and info["state"] == "running"
        assert "cannot tell" in info["state_note"]
    finally:
        w._lock.lock_path.unlink()
        w._f.close()


def test_status_last_zero_shows_no_records(tmp_path, capsys):
    p = tmp_path / "d.h5"
    _demo_file(p)
    assert cli_main(["status", "--last", "0", str(p)]) == 0
    out = capsys.readouterr().out
    assert "last:" not in out and "status complete" in out


def test_verify_refuses_a_live_file_and_a_live_read_failure_is_not_called_corrupt(tmp_path, capsys,
                                                                                    monkeypatch):
    """Without SWMR a reader can meet a block half-written: a live file is not 'corrupt'; --verify
    reads files at rest only."""
    from rieszflow.studies.runs import inspect

    p = tmp_path / "d.h5"
    _demo_file(p)
    lock = p.with_name(p.name + ".lock")
    lock.write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                "started": dt.datetime.now(dt.timezone.utc).isoformat()}))
    try:
        assert cli_main(["status", "--verify", str(p)]) == 2
        assert "reads a file at rest" in capsys.readouterr().err

        def torn(path, n_last):
            raise RunFileError(f"{path}: variable 'x' is damaged")

        real, calls = inspect._read_layout, []

        def torn_once(path, n_last):                       # the writer finishes its block
            calls.append(1)
            return torn(path, n_last) if len(calls) == 1 else real(path, n_last)

        monkeypatch.setattr(inspect, "_read_layout", torn_once)
        assert run_status(p)["status"] == "complete" and len(calls) == 2      # read on the retry
        monkeypatch.setattr(inspect, "_read_layout", torn)
        with pytest.raises(RunFileError, match="is being written by process .* not damaged"):
            run_status(p)
        lock.unlink()
        with pytest.raises(RunFileError, match="is damaged"):      # at rest: damage is damage
            run_status(p)
    finally:
        lock.unlink(missing_ok=True)
