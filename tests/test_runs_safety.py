"""Runs that cannot be lost: one writer per path, clean signals, live reading, clean CLI errors.

Each test reproduces a finding of the fault-injection review (issue "Runs that cannot be lost") on
the old behaviour and checks the new one.
"""
import os
import signal
import subprocess
import sys
import textwrap
import time

import h5py
import numpy as np
import pytest
import xarray as xr

from rieszflow.engine.storage import RunFileError, TrajectoryWriter, open_run
from rieszflow.studies.cli import main as cli_main

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}


def _writer_script(path, n_records, pause):
    return textwrap.dedent(f"""
        import time, numpy as np
        from rieszflow.engine.storage import TrajectoryWriter, interruptible
        with interruptible():   # records reach the disk in blocks, at most 0.2 s late here
            with TrajectoryWriter({str(path)!r}, "demo", config={{"n": {n_records}}},
                                  flush_seconds=0.2) as w:
                w.dimension("time", None)
                w.variable("x", ("time",), attrs={{"long_name": "x", "units": "1"}})
                for t in range({n_records}):
                    w.append("time", {{"x": float(t)}}, coord=float(t))
                    print("record", t, flush=True)
                    time.sleep({pause})
    """)


def _start_writer(tmp_path, path, n_records=400, pause=0.05):
    proc = subprocess.Popen([sys.executable, "-c", _writer_script(path, n_records, pause)], env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().startswith("record"), proc.stderr.read()
    return proc


def test_a_second_writer_is_refused_and_the_first_file_survives(tmp_path):
    """Old: a concurrent --overwrite truncated a live run to 0 bytes. New: refused by the lock file,
    in-process and from another process; the first writer's file verifies at close."""
    p = tmp_path / "x.h5"
    w = TrajectoryWriter(p, "demo", config={"n": 1})
    w.dimension("time", None)
    w.variable("x", ("time",))
    w.append("time", {"x": 1.0}, coord=0.0)
    with pytest.raises(RunFileError, match=r"being written by process \d+ on host"):
        TrajectoryWriter(p, "demo", overwrite=True)
    second = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        from rieszflow.engine.storage import TrajectoryWriter
        TrajectoryWriter({str(p)!r}, "demo", overwrite=True)
    """)], env=ENV, capture_output=True, text=True, timeout=120)
    assert second.returncode != 0 and "being written by process" in second.stderr
    w.append("time", {"x": 2.0}, coord=1.0)
    w.close()
    ds = open_run(p, kind="demo")
    assert ds.attrs["status"] == "complete" and list(ds.x.values) == [1.0, 2.0]
    assert not (tmp_path / "x.h5.lock").exists()
    TrajectoryWriter(p, "demo", overwrite=True).close()      # free again once the first one closed


def test_stale_lock_of_a_dead_process_is_taken_over(tmp_path):
    p = tmp_path / "x.h5"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    import json
    import socket

    (tmp_path / "x.h5.lock").write_text(json.dumps({"pid": int(dead), "host": socket.gethostname(),
                                                    "started": "then"}))
    with pytest.warns(RuntimeWarning, match="stale lock"):
        TrajectoryWriter(p, "demo").close()
    assert open_run(p).attrs["status"] == "complete"


@pytest.mark.parametrize("sig, status", [(signal.SIGTERM, "interrupted"), (signal.SIGINT, "interrupted")])
def test_signals_mark_the_file_interrupted_and_a_live_file_can_be_read(tmp_path, sig, status):
    """Old: SIGTERM left status 'running'; a running file could not be opened by xarray. New: both
    signals leave a valid 'interrupted' file with every appended record (the block in memory is
    written at close), and a reader opens the live file between records and sees the flushed ones."""
    p = tmp_path / "live.h5"
    proc = _start_writer(tmp_path, p)
    try:
        deadline = time.time() + 60
        while True:                                                 # while the writer runs
            with xr.open_dataset(p, engine="h5netcdf") as ds:
                assert ds.attrs["status"] == "running"
                if ds.sizes["time"] >= 1 or time.time() > deadline:
                    break
            time.sleep(0.1)
        assert ds.sizes["time"] >= 1
    finally:
        proc.send_signal(sig)
        proc.wait(timeout=60)
    assert proc.returncode != 0
    ds = open_run(p, kind="demo")
    assert ds.attrs["status"] == status and ds.sizes["time"] >= 1
    np.testing.assert_array_equal(ds.x.values, np.arange(ds.sizes["time"], dtype=float))
    assert not (tmp_path / "live.h5.lock").exists()


def test_cli_sigterm_exits_143_with_one_line_and_resumes(tmp_path, capsys):
    """A SIGTERM'd main job: exit 143, one 'interrupted' line, no traceback, status interrupted."""
    out = tmp_path / "run.h5"
    proc = subprocess.Popen([sys.executable, "-m", "rieszflow", "run", "--smoke", "--epochs", "40",
                             "--out", str(out)], env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline:
        time.sleep(0.5)
        if out.exists():
            with h5py.File(out, "r", locking=False) as f:
                if "epoch" in f and f["epoch"].shape[0] >= 1:
                    break
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert "Traceback" not in err and "interrupted" in err
    assert open_run(out).attrs["status"] == "interrupted"
    # --resume needs no other option: the stored configuration is the default; a differing one is
    # named, and the growth field epochs may only grow
    assert cli_main(["run", "--quiet", "--set", "lam=0.5", "--resume", "--out", str(out)]) == 2
    assert "lam: stored 0.001, given 0.5" in capsys.readouterr().err
    assert cli_main(["run", "--quiet", "--epochs", "7", "--resume", "--out", str(out)]) == 2
    assert "epochs 40 -> 7" in capsys.readouterr().err
    assert cli_main(["run", "--quiet", "--resume", "--out", str(out)]) == 0
    assert open_run(out).attrs["status"] == "complete"


def test_cli_contract_basics(tmp_path, capsys):
    """Bare rieszflow prints help (exit 2) instead of starting the main job; --version; an unknown
    option shows the subcommand's usage; --out a directory or in a missing directory is a clean
    usage error; open_run on a corrupt file raises RunFileError."""
    assert cli_main([]) == 2
    assert "usage: rieszflow" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        cli_main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.startswith("rieszflow ")
    with pytest.raises(SystemExit) as e:
        cli_main(["ldp", "--no-such-option"])
    assert e.value.code == 2 and "usage: rieszflow ldp" in capsys.readouterr().err
    assert cli_main(["run", "--smoke", "--quiet", "--out", str(tmp_path), "--overwrite"]) == 2
    assert "is a directory" in capsys.readouterr().err
    assert cli_main(["run", "--smoke", "--quiet", "--out", str(tmp_path / "no" / "x.h5")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert cli_main(["run", "--smoke", "--quiet", "--out", str(tmp_path / "x.txt")]) == 2
    assert "name ending in .h5" in capsys.readouterr().err
    bad = tmp_path / "corrupt.h5"
    TrajectoryWriter(bad, "demo").close()
    data = bad.read_bytes()
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(RunFileError):
        open_run(bad)


def test_a_signal_whose_exception_python_swallowed_is_raised_at_the_next_record(tmp_path):
    """CI found it: a SIGTERM delivered inside a weakref callback raised there, Python printed
    'Exception ignored' and the run went on to exit 0. The handler now also records the signal,
    and the writer's next append raises it."""
    from rieszflow.engine.storage import signals as storage

    with storage.interruptible():
        with pytest.raises(storage.RunInterrupted) as e:
            with TrajectoryWriter(tmp_path / "x.h5", "demo") as w:
                w.dimension("time", None)
                w.variable("x", ("time",), attrs={"long_name": "x", "units": "1"})
                w.append("time", {"x": 0.0}, coord=0.0)
                storage._PENDING_SIGNAL = signal.SIGTERM          # as if the raise had been swallowed
                w.append("time", {"x": 1.0}, coord=1.0)
        assert e.value.exit_code == 143
    ds = open_run(tmp_path / "x.h5", kind="demo")
    assert ds.attrs["status"] == "interrupted" and ds.sizes["time"] == 1
    assert storage._PENDING_SIGNAL is None


_RACER = textwrap.dedent("""
    import sys, time, warnings
    from rieszflow.engine.storage import RunFileError
    from rieszflow.engine.storage.lock import RunLock
    warnings.simplefilter("ignore")
    lock = RunLock(sys.argv[1])
    time.sleep(max(0.0, float(sys.argv[2]) - time.time()))
    try:
        lock.acquire()
    except RunFileError:
        print("refused", flush=True)
        sys.exit(0)
    print("held", flush=True)
    sys.stdin.readline()                # hold it until every racer has answered
    lock.release()
""")

# The race runs in a driver process of its own: a pytest-xdist worker that ran it in-process died
# twice in the full CI suite ("node down", not reproduced when the module ran alone), so whatever
# happens to the racers' parent now happens to the driver, and the test reads its verdict.
_DRIVER = textwrap.dedent("""
    import json, os, socket, subprocess, sys, time
    tmp, mutex, racer = sys.argv[1], sys.argv[2], sys.argv[3]
    dead = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True, stdin=subprocess.DEVNULL).stdout)
    rounds = []
    for r in range(2):
        path = os.path.join(tmp, f"r{r}.h5")
        with open(path + ".lock", "w") as f:
            json.dump({"pid": dead, "host": socket.gethostname(),
                       "started": "2000-01-01T00:00:00+00:00"}, f)
        start = time.time() + 3.0
        procs = [subprocess.Popen([sys.executable, "-c", racer, path, str(start), mutex],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, start_new_session=True)
                 for _ in range(6)]
        said = [p.stdout.readline().strip() for p in procs]
        errs = []
        for p in procs:
            try:
                _, err = p.communicate(input="\\n", timeout=120)
            except BrokenPipeError:
                _, err = p.communicate(timeout=120)
            errs.append(err[-500:])
        rounds.append({"said": said, "codes": [p.returncode for p in procs], "errs": errs,
                       "takeover_left": os.path.exists(path + ".lock.takeover")})
    print(json.dumps(rounds))
""")


def test_a_stale_lock_is_taken_over_by_one_of_many_racing_processes(tmp_path):
    """Old: every process that found the same stale lock deleted the lock file and created its
    own, so a later one could delete an earlier one's fresh lock and both wrote. New: removal
    under a takeover mutex (an O_EXCL mutex file), after re-reading the record: exactly one of 6
    racing processes (each in its own session, sleeping to a common start time) holds the lock,
    the other 5 are refused (2 rounds)."""
    import json

    run = subprocess.run([sys.executable, "-c", _DRIVER, str(tmp_path), "file", _RACER], env=ENV,
                         capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)
    assert run.returncode == 0, (run.returncode, run.stderr[-2000:])
    for r in json.loads(run.stdout):
        assert sorted(r["said"]) == ["held"] + ["refused"] * 5, r
        assert r["codes"] == [0] * 6, r
        assert not r["takeover_left"], r
