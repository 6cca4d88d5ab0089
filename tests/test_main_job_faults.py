"""The main job under faults: early interrupts, kills, corrupt checkpoints, a full disk, an
unwritable directory, and a finished run extended with more epochs (issue 22)."""
import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import zipfile

import h5py
import numpy as np
import pytest
import xarray as xr

from rieszflow.learning import checkpoint as ckpt_mod
from rieszflow.learning.checkpoint import CheckpointError, read_checkpoint, write_checkpoint
from rieszflow.studies.cli import main as cli_main

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}
#: Tiny runs whose Phase A epochs and Phase B epochs each last about a second on 2 cores.
TINY = ["--smoke", "--set", "train_limit=512", "--set", "batch_size=16", "--phase-a-epochs", "2",
        "--epochs", "2"]


def _ckpt(out):
    return out.with_name(out.name + ".ckpt.npz")


def _assert_same_variables(a_path, b_path):
    """Every variable and coordinate of the two files, bit for bit (attributes aside: timings)."""
    with xr.open_dataset(a_path, engine="h5netcdf") as a, xr.open_dataset(b_path, engine="h5netcdf") as b:
        names = set(a.variables)
        assert names == set(b.variables)
        assert "omega" in names and "test_metrics" in names and "batch_loss" in names
        for name in sorted(names):
            np.testing.assert_array_equal(a[name].values, b[name].values, err_msg=name)
        assert b.attrs["status"] == "complete"


def _run_and_signal(args, pattern, delay, sig=signal.SIGINT, timeout=180):
    """Start ``rieszflow run ARGS`` in a subprocess; once ``pattern`` appears in its output (a
    progress bar's title), wait ``delay`` seconds and send ``sig``. Returns (exit code, output)."""
    proc = subprocess.Popen([sys.executable, "-m", "rieszflow", "run", *args], env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    buf = bytearray()

    def pump():
        for chunk in iter(lambda: proc.stdout.read1(4096), b""):
            buf.extend(chunk)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + timeout
        while pattern.encode() not in buf and proc.poll() is None:
            assert time.monotonic() < deadline, bytes(buf).decode(errors="replace")
            time.sleep(0.02)
        assert proc.poll() is None, f"finished before {pattern!r}: {bytes(buf).decode(errors='replace')}"
        time.sleep(delay)
        proc.send_signal(sig)
        rc = proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
    reader.join(timeout=10)
    return rc, bytes(buf).decode(errors="replace")


def test_sigint_in_the_first_seconds_and_in_phase_b_resume_bit_identically(tmp_path):
    """Old: SIGINT before the first in-epoch checkpoint (30 s) said "can be continued with --resume"
    and --resume then exited 2 "no checkpoint". New: SIGINT a fraction of a second into the first
    Phase A epoch (about 2 s after the start, long before checkpoint_seconds) writes a checkpoint of
    the last block boundary; the resumed run is interrupted again inside Phase B epoch 2 (resumed
    from the end of epoch 1); the twice-resumed file equals an uninterrupted run variable by
    variable, bit for bit."""
    full, cut = tmp_path / "full.h5", tmp_path / "cut.h5"
    assert cli_main(["run", *TINY, "--quiet", "--out", str(full)]) == 0

    rc, out = _run_and_signal([*TINY, "--out", str(cut)], "Phase A epoch 1", delay=0.1)
    assert rc == 130, out
    assert "can be continued with: rieszflow run --resume" in out and "Phase A epoch" in out
    meta, _ = read_checkpoint(_ckpt(cut))
    # the interrupt's own checkpoint, inside the first Phase A epoch (none other existed there)
    assert meta["phase"] == "A" and meta["partial"] is not None
    with xr.open_dataset(cut, engine="h5netcdf") as ds:
        assert ds.attrs["status"] == "interrupted"
        assert ds.sizes["step"] == meta["phase_a_steps"] == meta["lengths"]["step"]

    rc, out = _run_and_signal(["--resume", "--out", str(cut)], "Phase B epoch 2", delay=0.2,
                              sig=signal.SIGTERM)
    assert rc == 143, out
    assert "can be continued with" in out
    meta, _ = read_checkpoint(_ckpt(cut))
    assert (meta["phase"], meta["epoch"]) in {("B", 1), ("B", 2)}

    assert cli_main(["run", "--quiet", "--resume", "--out", str(cut)]) == 0
    _assert_same_variables(full, cut)


def test_interrupt_before_the_file_exists_says_there_is_nothing_to_resume(tmp_path, monkeypatch,
                                                                          capsys):
    from rieszflow.learning import train

    def interrupted(cfg):
        raise KeyboardInterrupt

    monkeypatch.setattr(train, "load_data", interrupted)
    out = tmp_path / "r.h5"
    assert cli_main(["run", "--smoke", "--quiet", "--out", str(out)]) == 130
    err = capsys.readouterr().err
    assert "nothing to resume" in err and "can be continued" not in err
    assert not out.exists() and not _ckpt(out).exists()


def test_killed_before_the_first_checkpoint_is_not_resumable(tmp_path, monkeypatch, capsys):
    """The file a SIGKILL leaves before the first checkpoint (status 'running', no checkpoint):
    --resume exits 2 saying so; an interrupt at that point says it cannot be resumed."""
    from rieszflow.learning import train

    def no_checkpoint(self, *a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(train.MainJob, "_save_ckpt", no_checkpoint)
    out = tmp_path / "r.h5"
    assert cli_main(["run", "--smoke", "--quiet", "--out", str(out)]) == 130
    err = capsys.readouterr().err
    assert "cannot be resumed" in err and "--overwrite" in err and "can be continued" not in err
    monkeypatch.undo()
    assert out.exists() and not _ckpt(out).exists()
    with h5py.File(out, "a") as f:
        f.attrs["status"] = "running"                       # what SIGKILL leaves
    assert cli_main(["run", "--quiet", "--resume", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "killed before its first checkpoint" in err and "--overwrite" in err
    assert "--config" not in err


@pytest.fixture(scope="module")
def interrupted_run(tmp_path_factory):
    """A smoke run interrupted in Phase B epoch 2 (checkpoint at the end of epoch 1)."""
    from rieszflow.learning import train

    d = tmp_path_factory.mktemp("cut")
    out = d / "cut.h5"
    original = train.MainJob._phase_b_epoch

    def interrupted(self, w, opt, epoch):
        if epoch == 2:
            raise KeyboardInterrupt
        return original(self, w, opt, epoch)

    train.MainJob._phase_b_epoch = interrupted
    try:
        assert cli_main(["run", "--smoke", "--quiet", "--epochs", "2", "--out", str(out)]) == 130
    finally:
        train.MainJob._phase_b_epoch = original
    return out


def _rewrite(path, members):
    """An .npz of ``members`` (name -> array), as np.savez writes it."""
    np.savez(path, **members)
    if not str(path).endswith(".npz"):
        os.replace(str(path) + ".npz", path)


def _flip_in_member(path, member):
    """Flip one byte of a stored member's data (the zip's CRC-32 no longer matches)."""
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo(member)
    raw = bytearray(path.read_bytes())
    name_len = int.from_bytes(raw[info.header_offset + 26:info.header_offset + 28], "little")
    extra_len = int.from_bytes(raw[info.header_offset + 28:info.header_offset + 30], "little")
    data = info.header_offset + 30 + name_len + extra_len
    raw[data + info.compress_size - 1] ^= 0xFF
    path.write_bytes(bytes(raw))


def _corrupt(kind, path):
    with np.load(path) as z:
        members = {k: z[k] for k in z.files}
    model_key = next(k for k in members if k.startswith("model/"))
    if kind == "truncated":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif kind == "not-a-zip":
        path.write_bytes(b"definitely not a zip archive" * 10)
    elif kind == "bad-crc":
        _flip_in_member(path, model_key + ".npy")
    elif kind == "changed-array":                       # a valid archive; the checksum catches it
        members[model_key] = members[model_key] + 1e-3
        _rewrite(path, members)
    elif kind == "no-checksum":
        del members["sha256"]
        _rewrite(path, members)
    elif kind == "meta-not-json":
        text = "{not json"
        del members["meta"], members["sha256"]
        _rewrite(path, {"meta": np.array(text), "sha256": np.array(ckpt_mod._digest(text, members)),
                        **members})
    elif kind == "wrong-keys":                          # consistent checksum, foreign state names
        meta = json.loads(str(members.pop("meta")))
        del members["sha256"]
        members["model/not.a.parameter"] = members.pop(model_key)
        write_checkpoint(path, meta, members)
    elif kind == "meta-lacks-keys":
        meta = json.loads(str(members.pop("meta")))
        del members["sha256"], meta["rng_b"]
        write_checkpoint(path, meta, members)


@pytest.mark.parametrize("kind", ["truncated", "not-a-zip", "bad-crc", "changed-array", "no-checksum",
                                  "meta-not-json", "wrong-keys", "meta-lacks-keys"])
def test_corrupt_checkpoint_is_bad_input_and_leaves_the_run_file_alone(interrupted_run, tmp_path,
                                                                       kind, capsys):
    """Old: exit 1 with a raw BadZipFile, and the run marked 'failed'. New: exit 2, one line naming
    the checkpoint and --overwrite; the run file is not touched (still 'interrupted')."""
    out = tmp_path / "cut.h5"
    shutil.copy(interrupted_run, out)
    shutil.copy(_ckpt(interrupted_run), _ckpt(out))
    _corrupt(kind, _ckpt(out))
    with pytest.raises(CheckpointError):
        meta, arrays = read_checkpoint(_ckpt(out))
        ckpt_mod.check_checkpoint(_ckpt(out), meta, arrays, out=out, run_id=meta["run_id"],
                                  lengths={"time": 99, "step": 99, "epoch": 99, "batch": 99},
                                  model_state={k[6:]: v for k, v in arrays.items()
                                               if k.startswith("model/") and "not.a" not in k},
                                  opt_state=None)
    before = out.read_bytes()
    assert cli_main(["run", "--quiet", "--resume", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(_ckpt(out)) in err and "--overwrite" in err, err
    assert "Traceback" not in err
    assert out.read_bytes() == before
    with xr.open_dataset(out, engine="h5netcdf") as ds:
        assert ds.attrs["status"] == "interrupted"
    assert not out.with_name(out.name + ".lock").exists()


def test_full_disk_leaves_no_temporary_file_and_the_old_checkpoint(tmp_path, monkeypatch):
    """Old: disk full left <file>.ckpt.npz.tmp.npz behind. New: the temporary file goes, the old
    checkpoint stays readable."""
    path = tmp_path / "r.h5.ckpt.npz"
    meta = {k: 0 for k in ckpt_mod.META_KEYS}
    write_checkpoint(path, meta, {"model/a": np.arange(3.0)})
    real_savez = np.savez

    def half_then_enospc(file, *args, **kwds):
        real_savez(file, *args, **kwds)
        name = file if str(file).endswith(".npz") else f"{file}.npz"
        with open(name, "r+b") as f:
            f.truncate(os.path.getsize(name) // 2)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(np, "savez", half_then_enospc)
    with pytest.raises(OSError) as e:
        write_checkpoint(path, {**meta, "epoch": 1}, {"model/a": np.arange(3.0) + 1})
    assert e.value.errno == errno.ENOSPC
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]     # no *.tmp* left
    got, arrays = read_checkpoint(path)
    assert got["epoch"] == 0 and arrays["model/a"].tolist() == [0.0, 1.0, 2.0]


def test_unwritable_or_missing_output_directory_is_refused_before_any_work(tmp_path, monkeypatch,
                                                                           capsys):
    from rieszflow.learning import train

    def no_data_load(cfg):
        raise AssertionError("the data was loaded before the directory check")

    monkeypatch.setattr(train, "load_data", no_data_load)
    missing = tmp_path / "nope" / "r.h5"
    assert cli_main(["run", "--smoke", "--quiet", "--out", str(missing)]) == 2
    assert str(missing.parent) in capsys.readouterr().err
    locked = tmp_path / "locked"
    locked.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **k: False if str(p) == str(locked)
                        else real_access(p, mode, **k))
    assert cli_main(["run", "--smoke", "--quiet", "--out", str(locked / "r.h5")]) == 2
    err = capsys.readouterr().err
    assert "not writable" in err and str(locked) in err
    assert list(locked.iterdir()) == []


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0,
                    reason="root writes to any directory; chmod cannot make it unwritable")
def test_chmod_unwritable_directory_exits_2(tmp_path, capsys):
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o500)
    try:
        assert cli_main(["run", "--smoke", "--quiet", "--out", str(d / "r.h5")]) == 2
        assert "not writable" in capsys.readouterr().err
    finally:
        d.chmod(0o700)


@pytest.fixture(scope="module")
def two_epoch_run(tmp_path_factory):
    """A complete smoke run of 2 Phase B epochs, with its final checkpoint (do not modify)."""
    out = tmp_path_factory.mktemp("two") / "long.h5"
    assert cli_main(["run", "--smoke", "--quiet", "--epochs", "2", "--out", str(out)]) == 0
    return out


@pytest.mark.parametrize("how", [["--epochs", "2"], ["--set", "epochs=2"]])
def test_finished_run_extended_with_more_epochs_equals_a_longer_run(tmp_path, how, capsys,
                                                                    two_epoch_run):
    """Old: a finished run could not be extended. New: --resume --epochs 2 on a complete 1-epoch
    run equals a run started with 2 epochs, variable by variable, bit for bit."""
    short, long_ = tmp_path / "short.h5", two_epoch_run
    assert cli_main(["run", "--smoke", "--quiet", "--out", str(short)]) == 0
    assert cli_main(["run", "--smoke", "--quiet", "--resume", *how, "--out", str(short)]) == 0
    _assert_same_variables(long_, short)
    with xr.open_dataset(short, engine="h5netcdf") as ds:
        assert json.loads(ds.attrs["config"])["epochs"] == 2 and ds.attrs["config_epochs"] == 2
        assert ds.attrs["extended"] == 1 and ds.sizes["epoch"] == 2
        # the planned records (status's progress and ETA) are the records a finished run holds,
        # re-planned by the extension
        assert json.loads(ds.attrs["planned_lengths"]) == {"batch": ds.sizes["batch"],
                                                           "step": ds.sizes["step"]}
    # the same budget again: nothing to do, the stored table is printed
    capsys.readouterr()
    assert cli_main(["run", "--quiet", "--resume", "--epochs", "2", "--out", str(short)]) == 0
    assert "nothing to resume" in capsys.readouterr().out


def test_extensions_a_longer_run_would_not_reproduce_are_refused(tmp_path, capsys, two_epoch_run):
    out = tmp_path / "r.h5"
    shutil.copy(two_epoch_run, out)
    shutil.copy(_ckpt(two_epoch_run), _ckpt(out))
    before = out.read_bytes()
    # Phase B ran after Phase A: more Phase A epochs would come before it in a longer run
    assert cli_main(["run", "--quiet", "--resume", "--phase-a-epochs", "2", "--out", str(out)]) == 2
    assert "cannot be extended bit-identically" in capsys.readouterr().err
    assert cli_main(["run", "--quiet", "--resume", "--epochs", "1", "--out", str(out)]) == 2
    assert "cannot shrink" in capsys.readouterr().err
    assert out.read_bytes() == before
    cos = tmp_path / "cos.h5"
    assert cli_main(["run", "--smoke", "--quiet", "--optimizer", "adamw", "--epochs", "2",
                     "--out", str(cos)]) == 0
    assert cli_main(["run", "--quiet", "--resume", "--epochs", "3", "--out", str(cos)]) == 2
    assert "warm-up + cosine" in capsys.readouterr().err


def test_resume_of_a_foreign_file_does_not_mention_config(tmp_path, capsys):
    """Old: "--config 'x.h5': ..." for a --config the user never passed. New: --resume names it."""
    bad = tmp_path / "x.h5"
    bad.write_bytes(b"not hdf5")
    assert cli_main(["run", "--quiet", "--resume", "--out", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "--config" not in err and "--resume" in err and str(bad) in err


@pytest.mark.parametrize("where", ["mid-step", "mid-record"])
def test_interrupt_inside_a_phase_a_step_rolls_back_to_the_last_block_boundary(tmp_path, monkeypatch,
                                                                                where):
    """Deterministic landing points of an interrupt in Phase A: between the layers of one step
    (the first layer's particles already moved, the second's not) and inside the recording of a
    block (the step's energies appended, its particle snapshot not). The interrupt's checkpoint
    holds the last block boundary; the resumed file equals the uninterrupted one bit for bit."""
    from rieszflow.learning import train

    args = ["run", "--smoke", "--quiet", "--set", "n_layers=2"]
    full, cut = tmp_path / "full.h5", tmp_path / "cut.h5"
    assert cli_main([*args, "--out", str(full)]) == 0
    calls = {"n": 0}
    if where == "mid-step":
        original = train.riesz_energy_and_grad
        per_step = 2 * 2                          # layers x heads of the smoke model
        target = 5 * per_step + per_step // 2 + 1      # step 6, first head of the second layer

        def hook(*a, **k):
            calls["n"] += 1
            if calls["n"] == target:
                raise KeyboardInterrupt
            return original(*a, **k)

        monkeypatch.setattr(train, "riesz_energy_and_grad", hook)
    else:
        original = train.MainJob._record_omega

        def hook(self, w):
            calls["n"] += 1
            if calls["n"] == 3:     # initial snapshot, step 2, step 4 (host: a block per step)
                raise KeyboardInterrupt
            return original(self, w)

        monkeypatch.setattr(train.MainJob, "_record_omega", hook)
    assert cli_main([*args, "--out", str(cut)]) == 130
    monkeypatch.undo()
    meta, _ = read_checkpoint(_ckpt(cut))
    assert meta["phase"] == "A" and meta["partial"]["batches_done"] == (5 if where == "mid-step" else 3)
    with xr.open_dataset(cut, engine="h5netcdf") as ds:
        assert ds.sizes["step"] == meta["phase_a_steps"] and ds.sizes["time"] == meta["lengths"]["time"]
    assert cli_main(["run", "--quiet", "--resume", "--out", str(cut)]) == 0
    _assert_same_variables(full, cut)


def test_library_runs_delete_their_final_checkpoint_and_cannot_be_extended(tmp_path, capsys):
    """run_main_job (a sweep's task) keeps no 64 MB checkpoint per finished run unless asked; the
    CLI keeps it. Extending a run without one says why."""
    from rieszflow.learning import MainJobConfig, SMOKE_OVERRIDES, run_main_job

    out = tmp_path / "lib.h5"
    run_main_job(MainJobConfig(**SMOKE_OVERRIDES), out, quiet=True)
    assert out.exists() and not _ckpt(out).exists()
    assert cli_main(["run", "--smoke", "--quiet", "--resume", "--epochs", "2", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "no final checkpoint" in err and "cannot be extended" in err


def test_interrupt_in_the_first_phase_b_epoch_of_a_vanilla_run_resumes_from_the_start(
        tmp_path, monkeypatch, capsys):
    """Before any epoch ends, the checkpoint of the initial state (written when the file is
    created) is what an interrupt leaves; resuming from it gives the uninterrupted run."""
    from rieszflow.learning import train

    args = ["run", "--smoke", "--quiet", "--vanilla", "--epochs", "2"]
    full, cut = tmp_path / "full.h5", tmp_path / "cut.h5"
    assert cli_main([*args, "--out", str(full)]) == 0

    def interrupted(self, w, opt, epoch):
        w.append("batch", {"batch_loss": 1.0})         # a record after the checkpoint: dropped
        raise KeyboardInterrupt

    monkeypatch.setattr(train.MainJob, "_phase_b_epoch", interrupted)
    capsys.readouterr()
    assert cli_main([*args, "--out", str(cut)]) == 130
    assert "from its checkpoint at the start of the run" in capsys.readouterr().err
    monkeypatch.undo()
    assert read_checkpoint(_ckpt(cut))[0]["phase"] == "start"
    assert cli_main(["run", "--quiet", "--resume", "--out", str(cut)]) == 0
    _assert_same_variables(full, cut)


def test_every_units_string_of_a_main_job_file_parses_as_udunits(tmp_path):
    """Old: '1 (frequency ...)', 'nat', '1 (log_loss in nats)'. New: every units attribute parses
    with cf_units and means what it should ('nat' parsed, as n*at, to a pressure: 1e-9 technical
    atmospheres); the explanations are in long_name or comment."""
    cf_units = pytest.importorskip("cf_units")
    out = tmp_path / "cf.h5"
    assert cli_main(["run", "--smoke", "--quiet", "--out", str(out)]) == 0
    with xr.open_dataset(out, engine="h5netcdf", decode_times=False) as ds:
        units = {name: ds[name].attrs.get("units") for name in ds.variables}
        assert "nats" in ds.batch_loss.attrs["long_name"] and "nats" in ds.test_metrics.attrs["comment"]
    assert all(u is not None for u in units.values()), units
    for name, u in units.items():
        cf_units.Unit(u)                          # raises ValueError on a non-UDUNITS string
    for name in ("batch_loss", "train_loss", "val_loss", "test_metrics", "omega"):
        assert cf_units.Unit(units[name]).is_dimensionless(), (name, units[name])


def test_epochs_bound_is_stated_once(capsys):
    """Old: --epochs took 0 (an argparse bound of >= 0) and the configuration then refused it
    (>= 1). New: the option, its help and --set all say >= 1."""
    with pytest.raises(SystemExit) as e:
        cli_main(["run", "--epochs", "0"])
    assert e.value.code == 2 and "must be >= 1" in capsys.readouterr().err
    assert cli_main(["run", "--set", "epochs=0"]) == 2
    assert "must be >= 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli_main(["run", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "Phase B epochs, >= 1" in help_text and "Phase A epochs, >= 1" in help_text


def test_writer_remove_deletes_variables_and_dimensions_cleanly(tmp_path):
    """TrajectoryWriter.remove (used to extend a finished run): the variables, their dimensions and
    the attributes go, no dimension scale keeps a reference to a deleted variable, and the names
    can be created again with other sizes."""
    from rieszflow.engine.storage import TrajectoryWriter

    p = tmp_path / "x.h5"
    with TrajectoryWriter(p, "demo", attrs={"done_at": 1.0}) as w:
        w.dimension("time", None, attrs={"long_name": "t", "units": "1"})
        w.variable("x", ("time",), attrs={"long_name": "x", "units": "1"})
        w.append("time", {"x": 1.0}, coord=0.0)
        w.dimension("example", 3, coords=np.arange(3), attrs={"long_name": "e", "units": "1"})
        w.variable("pred", ("example",), data=[0.1, 0.2, 0.3], attrs={"long_name": "p", "units": "1"})
    w = TrajectoryWriter(p, "demo", resume=True)
    with pytest.raises(ValueError, match="still used"):
        w.remove(dimensions=["example"])                     # pred still uses it
    w.remove(variables=["pred", "absent"], dimensions=["example"], attrs=["done_at"])
    w.append("time", {"x": 2.0}, coord=1.0)
    w.dimension("example", 5, coords=np.arange(5), attrs={"long_name": "e", "units": "1"})
    w.variable("pred", ("example",), data=np.arange(5.0), attrs={"long_name": "p", "units": "1"})
    w.close()
    fresh = TrajectoryWriter(tmp_path / "y.h5", "demo")
    with pytest.raises(ValueError, match="resumed"):
        fresh.remove(variables=["x"])
    fresh.close()
    with xr.open_dataset(p, engine="h5netcdf") as ds:
        assert ds.pred.values.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0] and ds.sizes["example"] == 5
        assert ds.x.values.tolist() == [1.0, 2.0] and "done_at" not in ds.attrs
    with h5py.File(p, "r") as f:
        for name in ("time", "example"):
            users = sorted(f[ref].name for ref, _ in f[name].attrs.get("REFERENCE_LIST", []))
            assert users == {"time": ["/x"], "example": ["/pred"]}[name]


def test_disk_full_during_a_run_leaves_no_temporary_file_and_the_retry_resumes(tmp_path,
                                                                              monkeypatch, capsys):
    """Old: a full disk left <file>.ckpt.npz.tmp.npz and the retry failed again at once. New: the run
    fails (exit 1) with nothing temporary left; once there is space, --resume continues from the
    last good checkpoint and gives the uninterrupted result."""
    args = ["run", "--smoke", "--quiet", "--epochs", "2"]
    full, cut = tmp_path / "full" / "r.h5", tmp_path / "cut" / "r.h5"
    full.parent.mkdir()
    cut.parent.mkdir()
    assert cli_main([*args, "--out", str(full)]) == 0
    real_savez, calls = np.savez, {"n": 0}

    def enospc_at_the_third(file, *a, **k):          # start, end of Phase A, end of B epoch 1
        calls["n"] += 1
        if calls["n"] == 3:
            with open(file, "wb") as f:
                f.write(b"PK\x03\x04 half an archive")
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_savez(file, *a, **k)

    monkeypatch.setattr(np, "savez", enospc_at_the_third)
    assert cli_main([*args, "--out", str(cut)]) == 1
    assert "No space left on device" in capsys.readouterr().err
    monkeypatch.undo()
    # (r.h5.log, the command's log file, may be there too)
    assert {p.name for p in cut.parent.iterdir()} - {"r.h5.log"} == {"r.h5", "r.h5.ckpt.npz"}
    assert read_checkpoint(_ckpt(cut))[0]["phase"] == "A"
    assert cli_main(["run", "--quiet", "--resume", "--out", str(cut)]) == 0
    _assert_same_variables(full, cut)


def test_a_failure_while_the_file_layout_is_written_closes_the_file_and_its_lock(tmp_path,
                                                                                  monkeypatch, capsys):
    """An interrupt (or error) after the file and its lock exist but before the layout is complete:
    the file is marked, the lock released, and the message says what to do (no checkpoint yet)."""
    from rieszflow.engine.storage import TrajectoryWriter

    def interrupted(self, *a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(TrajectoryWriter, "variable", interrupted)
    out = tmp_path / "w.h5"
    assert cli_main(["run", "--smoke", "--quiet", "--out", str(out)]) == 130
    err = capsys.readouterr().err
    assert "cannot be resumed" in err and "--overwrite" in err
    assert not out.with_name("w.h5.lock").exists()
    monkeypatch.undo()
    with h5py.File(out, "r") as f:
        assert f.attrs["status"] == "interrupted"
    assert cli_main(["run", "--smoke", "--quiet", "--overwrite", "--out", str(out)]) == 0


def test_a_broken_pipe_of_the_run_itself_is_a_failure_not_a_quiet_success(tmp_path, monkeypatch,
                                                                            capsys):
    """Exit 0 without a word is for a closed console (| head); a BrokenPipeError from the run's own
    pipes (a socket, a subprocess) is a run failure, exit 1, with its line."""
    from rieszflow.learning import train

    def broken(*a, **k):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(train, "run_main_job", broken)
    assert cli_main(["run", "--smoke", "--quiet", "--out", str(tmp_path / "b.h5")]) == 1
    assert "run failed: BrokenPipeError" in capsys.readouterr().err


def test_run_files_held_open_by_this_process_are_still_read(tmp_path, two_epoch_run):
    """HDF5 refuses a second open with another locking flag in one process: every read-only open
    (read_hdf5) falls back, so a dataset held open by xarray never makes a file 'unreadable'."""
    from rieszflow.config import load_config_mapping
    from rieszflow.engine.storage import open_run
    from rieszflow.studies.main_job.cli import _stored_config

    with open_run(two_epoch_run) as ds:
        ds["epoch"].values                                   # the file is open in this process
        assert _stored_config(two_epoch_run)["epochs"] == 2
        assert load_config_mapping(two_epoch_run)["epochs"] == 2
