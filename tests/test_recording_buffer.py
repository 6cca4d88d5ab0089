"""Block-buffered recording (TrajectoryWriter): identical files, buffered records visible to length /
read / truncate, nothing lost to SIGINT/SIGTERM, at most the last block lost to SIGKILL, and a main
job killed mid-block that resumes bit-identically.

The SIGKILL test of a plain writer (blocks of 1, 4 and 256 records, by time and by bytes) is
``tests/test_storage.py::test_killed_writer_leaves_readable_file``; the in-process interrupt and resume
tests of the main job are in ``tests/test_main_job.py`` and ``tests/test_main_job_variants.py``.
"""
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from rieszflow.engine.storage import TrajectoryWriter, open_run

ROOT = Path(__file__).resolve().parents[1]


def _script(p, n, **kw):
    """The same sequence of writer calls, with the given block options; returns the lengths seen."""
    seen = []
    with TrajectoryWriter(p, "demo", config={"n": n}, **kw) as w:
        w.dimension("time", None)
        w.dimension("step", None, dtype="i8")
        w.dimension("particle", 3)
        w.variable("x", ("time", "particle"), dtype="f4")
        w.variable("e", ("time",))
        w.variable("k", ("step",), dtype="i8")
        buf = np.zeros(3)
        for t in range(n):
            buf[:] = t + np.array([0.25, 0.5, 0.75])    # one buffer, changed after each append
            rec = {"x": buf, "e": np.float32(-t)} if t % 3 else {"x": buf}   # e missing: fill value
            w.append("time", rec, coord=0.5 * t)
            w.append("step", {"k": 7 * t})               # coordinate defaults to the index
            seen.append((w.length("time"), w.length("step")))
        w.truncate("step", n - 2)                        # inside the last block when blocks are long
        w.append("step", {"k": -1}, coord=100)
        w.dimension("metric", 2, coords=np.arange(2))
        w.variable("m", ("metric",), data=[1.0, 2.0])
    return seen


@pytest.mark.parametrize("kw", [dict(flush_records=3), dict(flush_records=256),
                                dict(flush_bytes=40), dict(flush_seconds=0.0)])
def test_buffered_file_equals_per_record_file(tmp_path, kw):
    """Every variable, coordinate and attribute of data equal to the flush_records=1 file, and
    length() counts the records kept in memory."""
    n = 11
    ref, buf = tmp_path / "ref.h5", tmp_path / "buf.h5"
    seen_ref = _script(ref, n, flush_records=1)
    seen_buf = _script(buf, n, **kw)
    assert seen_ref == seen_buf == [(t + 1, t + 1) for t in range(n)]
    a, b = open_run(ref), open_run(buf)
    assert set(a.variables) == set(b.variables) and a.sizes == b.sizes
    for name in a.variables:
        assert a[name].dtype == b[name].dtype, name
        np.testing.assert_array_equal(a[name].values, b[name].values, err_msg=name)
        assert a[name].attrs == b[name].attrs, name
    assert a.sizes["time"] == n and a.sizes["step"] == n - 1
    np.testing.assert_array_equal(b.k.values, [7 * t for t in range(n - 2)] + [-1])
    np.testing.assert_array_equal(b.step.values, list(range(n - 2)) + [100])
    np.testing.assert_array_equal(b.x.values[:, 1], np.arange(n) + 0.5)       # not the last buffer
    assert np.isnan(b.e.values[0]) and b.e.values[1] == -1.0


def test_length_read_truncate_see_the_buffer(tmp_path):
    p = tmp_path / "a.h5"
    with TrajectoryWriter(p, "demo", flush_records=4, flush_seconds=float("inf")) as w:
        w.dimension("time", None)
        w.variable("y", ("time",))
        for t in range(6):                  # one block of 4 written, 2 records in memory
            assert w.append("time", {"y": float(t)}) == t
        assert w.length("time") == 6
        np.testing.assert_array_equal(w.read("y"), np.arange(6.0))   # read writes the block first
        for t in range(6, 9):
            w.append("time", {"y": float(t)})
        w.truncate("time", 7)               # drops records kept in memory only
        assert w.length("time") == 7
        w.append("time", {"y": 70.0})
        w.truncate("time", 3)               # into the records on disk
        assert w.length("time") == 3
        assert w.append("time", {"y": 30.0}) == 3
        np.testing.assert_array_equal(w.read("y"), [0.0, 1.0, 2.0, 30.0])
    ds = open_run(p)
    np.testing.assert_array_equal(ds.y.values, [0.0, 1.0, 2.0, 30.0])
    np.testing.assert_array_equal(ds.time.values, [0.0, 1.0, 2.0, 3.0])


def test_append_validates_at_once_and_options_are_checked(tmp_path):
    """Bad records fail at append time (the variable, its shape and the expected shape named) and
    leave nothing in the block; out-of-range block options are refused before a file exists."""
    p = tmp_path / "a.h5"
    with TrajectoryWriter(p, "demo") as w:
        w.dimension("time", None)
        w.dimension("particle", 3)
        w.variable("x", ("time", "particle"))
        w.variable("fixed", ("particle",))
        w.append("time", {"x": np.zeros(3)})
        with pytest.raises(ValueError, match=r"'x' has shape \(4,\), expected \(3,\)"):
            w.append("time", {"x": np.zeros(4)})
        with pytest.raises(KeyError, match="'nope' does not exist"):
            w.append("time", {"nope": 1.0})
        with pytest.raises(KeyError, match="not starting with 'time'"):
            w.append("time", {"fixed": 1.0})
        with pytest.raises(KeyError, match="'particle' is not an unlimited dimension"):
            w.append("particle", {})
        assert w.length("time") == 1
    assert open_run(p).sizes["time"] == 1
    for kw, err, msg in ((dict(flush_records=0), ValueError, "flush_records must be >= 1, got 0"),
                         (dict(flush_records=2.5), TypeError, "flush_records must be an integer"),
                         (dict(flush_seconds=-1.0), ValueError, "flush_seconds must be >= 0"),
                         (dict(flush_bytes=0), ValueError, "flush_bytes must be >= 1")):
        with pytest.raises(err, match=msg):
            TrajectoryWriter(tmp_path / "b.h5", "demo", **kw)
        assert not (tmp_path / "b.h5").exists() and not (tmp_path / "b.h5.lock").exists()


def _count_host_copies(monkeypatch):
    """Count the writer's device-to-host copies (``engine.backend.to_numpy`` inside storage)."""
    from rieszflow.engine.storage import writer as storage

    calls = []
    real = storage.to_numpy
    monkeypatch.setattr(storage, "to_numpy", lambda x: (calls.append(type(x).__module__), real(x))[1])
    return calls


def _device_records(tmp_path, xp, monkeypatch):
    """Append 5 records of two variables from ``xp`` arrays; the host copies made by appends and
    by the flush of the block, and the file's contents."""
    calls = _count_host_copies(monkeypatch)
    p = tmp_path / f"{xp.__name__}.h5"
    with TrajectoryWriter(p, "demo", flush_records=64, flush_seconds=float("inf")) as w:
        w.dimension("time", None)
        w.dimension("particle", 4)
        w.variable("x", ("time", "particle"), dtype="f4")
        w.variable("e", ("time",))
        w.flush()
        for t in range(5):
            x = xp.arange(4, dtype=xp.float32) * t
            w.append("time", {"x": x, "e": (x * x).sum()}, coord=t)
        by_append = len(calls)
        w.flush()
        by_flush = len(calls) - by_append
    ds = open_run(p)
    return by_append, by_flush, ds


def test_one_host_copy_per_variable_per_block(tmp_path, monkeypatch):
    """Appends make no host copy; the block's flush makes one per variable."""
    by_append, by_flush, ds = _device_records(tmp_path, np, monkeypatch)
    assert (by_append, by_flush) == (0, 2)
    np.testing.assert_array_equal(ds.x.values, np.arange(5)[:, None] * np.arange(4.0)[None, :])


@pytest.mark.gpu
def test_cupy_records_stay_on_the_device_until_their_block(tmp_path, monkeypatch):
    from rieszflow.engine.backend import cupy_available

    if not cupy_available():
        pytest.skip("CuPy with a CUDA device is not available")
    import cupy as cp

    by_append, by_flush, ds = _device_records(tmp_path, cp, monkeypatch)
    assert (by_append, by_flush) == (0, 2)          # one cupy -> host copy per variable
    (tmp_path / "np").mkdir()
    _, _, ref = _device_records(tmp_path / "np", np, monkeypatch)
    for name in ("x", "e", "time"):
        np.testing.assert_array_equal(ds[name].values, ref[name].values)


def _child(code, *, ready="ready"):
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT)
    line = proc.stdout.readline().strip()
    if line != ready:
        proc.kill()
        raise AssertionError(f"child said {line!r}: {proc.communicate(timeout=30)[1]}")
    return proc


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.parametrize("during_write", [False, True])
def test_sigterm_and_sigint_lose_nothing(tmp_path, sig, during_write):
    """Under interruptible() (every rieszflow command), SIGTERM/SIGINT close the file as
    'interrupted' with every appended record, also when the signal arrives while a block is being
    written (it is held until the block is complete)."""
    p = tmp_path / "sig.h5"
    proc = _child(f"""
        import sys, time, numpy as np
        sys.path.insert(0, {str(ROOT)!r})
        from rieszflow.engine.storage import writer as storage
        from rieszflow.engine.storage import RunInterrupted, TrajectoryWriter, interruptible
        stack = storage._stack_to_host
        def slow_stack(arrays):                 # the block write pauses where the signal arrives
            print("writing", flush=True)
            time.sleep(3)
            return stack(arrays)
        try:
            with interruptible():
                with TrajectoryWriter({str(p)!r}, "demo", flush_records=5,
                                      flush_seconds=float("inf")) as w:
                    w.dimension("time", None); w.dimension("particle", 8)
                    w.variable("x", ("time", "particle"))
                    for t in range(7):          # a block of 5 on disk, 2 records in memory
                        w.append("time", {{"x": np.full(8, float(t))}})
                    if {during_write!r}:
                        storage._stack_to_host = slow_stack
                        for t in range(7, 10):
                            w.append("time", {{"x": np.full(8, float(t))}})
                    else:
                        print("writing", flush=True)
                    time.sleep(60)
        except RunInterrupted as e:
            sys.exit(e.exit_code)
    """, ready="writing")
    try:
        proc.send_signal(sig)
        assert proc.wait(timeout=60) == 128 + sig
    finally:
        if proc.poll() is None:
            proc.kill()
    ds = open_run(p)
    assert ds.attrs["status"] == "interrupted"
    n = 10 if during_write else 7
    np.testing.assert_array_equal(ds.x.values[:, 0], np.arange(float(n)))


def test_a_signal_during_an_explicit_flush_is_raised_after_the_block(tmp_path, monkeypatch):
    """The main job's checkpoint calls flush(): a SIGTERM that arrives while the block is written
    waits for the block, then flush() raises RunInterrupted; the file then holds every record."""
    from rieszflow.engine.storage import writer as storage
    from rieszflow.engine.storage import RunInterrupted, interruptible

    real = storage._stack_to_host

    def signalled(arrays):
        os.kill(os.getpid(), signal.SIGTERM)     # delivered inside the block write
        return real(arrays)

    p = tmp_path / "a.h5"
    with interruptible():
        w = TrajectoryWriter(p, "demo", flush_seconds=float("inf"))
        w.dimension("time", None)
        w.variable("y", ("time",))
        for t in range(3):
            w.append("time", {"y": float(t)})
        monkeypatch.setattr(storage, "_stack_to_host", signalled)
        with pytest.raises(RunInterrupted, match="SIGTERM"):
            w.flush()
        assert not w._pending                    # the block was written whole before the raise
        monkeypatch.setattr(storage, "_stack_to_host", real)
        w.close("interrupted")
    ds = open_run(p)
    assert ds.attrs["status"] == "interrupted"
    np.testing.assert_array_equal(ds.y.values, [0.0, 1.0, 2.0])


# -- the main job: SIGKILL mid-block, resume, bit-identical ------------------------------------
ARGS = ["run", "--smoke", "--quiet", "--epochs", "2", "--phase-a-epochs", "2"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    from rieszflow.studies.cli import main as cli_main

    full = tmp_path_factory.mktemp("full") / "full.h5"
    assert cli_main([*ARGS, "--out", str(full)]) == 0
    return full


@pytest.mark.parametrize("dim", ["step", "batch"])
def test_main_job_killed_mid_block_resumes_bit_identically(tmp_path, uninterrupted, dim):
    """SIGKILL at the 13th record of ``dim``: the 5th of Phase A's second epoch (``step``) or of
    Phase B's second epoch (``batch``; 8 records per epoch at smoke size), with blocks of 3
    records. On disk: the 8 records of the first epoch (flushed by its checkpoint) and one block of
    3; the 12th record, in memory, is lost. The resumed run equals the uninterrupted one bit for bit."""
    from rieszflow.studies.cli import main as cli_main

    cut = tmp_path / "cut.h5"
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import os, signal, sys
        sys.path.insert(0, {str(ROOT)!r})
        from rieszflow.engine.storage import writer as storage
        storage.FLUSH_RECORDS, storage.FLUSH_SECONDS = 3, float("inf")   # blocks of 3 records
        append, calls = storage.TrajectoryWriter.append, [0]
        def killed(self, dim, values, coord=None):
            if dim == {dim!r}:
                calls[0] += 1
                if calls[0] == 13:
                    os.kill(os.getpid(), signal.SIGKILL)
            return append(self, dim, values, coord)
        storage.TrajectoryWriter.append = killed
        from rieszflow.studies.cli import main
        sys.exit(main({[*ARGS, "--out", str(cut)]!r}))
    """)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    ds = open_run(cut)                  # a valid file, missing only the last (partial) block
    assert ds.attrs["status"] == "running" and ds.sizes[dim] == 11
    with pytest.warns(RuntimeWarning, match="stale lock"):     # the killed run's lock file
        assert cli_main(["run", "--quiet", "--resume", "--out", str(cut)]) == 0
    with xr.open_dataset(uninterrupted, engine="h5netcdf") as a, xr.open_dataset(cut, engine="h5netcdf") as b:
        assert b.attrs["status"] == "complete" and b.attrs["resumed"] == 1
        assert set(a.variables) == set(b.variables) and a.sizes == b.sizes
        for name in a.variables:        # every variable and coordinate, bit for bit
            np.testing.assert_array_equal(a[name].values, b[name].values, err_msg=name)
