"""The console of every command (issue 22): ``--log-level``, the log file beside the output, warnings
as one line, a console closed by its reader (``| head``), and the exit-code table of docs/cli.md for
the faults of issue 22 (injected into the CLI)."""
import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from rieszflow.engine.storage import RunFileError, RunInterrupted, TrajectoryWriter
from rieszflow.studies.cli import log_file_of, main as cli_main
from rieszflow.studies.console import Console

ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
       "NUMBA_NUM_THREADS": "1"}
STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z (DEBUG|INFO|WARNING|ERROR) +\S")
TINY = ["run", "--smoke", "--epochs", "1", "--phase-a-epochs", "1"]


def _patch_run(monkeypatch, behaviour):
    import rieszflow.learning.train as train

    monkeypatch.setattr(train, "run_main_job", behaviour)


def test_a_run_appends_what_it_prints_to_its_log_file(tmp_path, capsys):
    out = tmp_path / "a.h5"
    assert cli_main([*TINY, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    log = (tmp_path / "a.h5.log").read_text().splitlines()
    assert all(STAMP.match(line) for line in log), log
    assert log[0].endswith(f"rieszflow {' '.join(TINY)} --out {out}  (pid {os.getpid()}, cwd {os.getcwd()})")
    assert log[-1].endswith("INFO    exit status 0")
    for line in printed.splitlines():                    # every printed line, in order
        if line.strip():
            assert any(entry.endswith(line.rstrip()) for entry in log), line
    # a second command on the same file appends (here: a --resume of the complete file)
    assert cli_main(["run", "--resume", "--out", str(out)]) == 0
    again = (tmp_path / "a.h5.log").read_text().splitlines()
    assert again[:len(log)] == log and sum("exit status 0" in line for line in again) == 2
    assert any("is complete: nothing to resume" in line for line in again[len(log):])
    # a command refused on bad input before it writes leaves no log behind
    assert cli_main(["run", "--smoke", "--set", "m=x", "--out", str(tmp_path / "b.h5")]) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.h5", "a.h5.ckpt.npz", "a.h5.log"]   # the final checkpoint is kept (extendable)


def test_the_error_line_and_the_debug_traceback_reach_the_log(tmp_path, monkeypatch, capsys):
    def fails(*args, **kwargs):
        raise ArithmeticError("injected failure")

    _patch_run(monkeypatch, fails)
    out = tmp_path / "f.h5"
    TrajectoryWriter(out, "demo").close()        # a run fails once it has its file: its log is kept
    assert cli_main(["run", "--smoke", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "run failed: ArithmeticError: injected failure (--log-level debug" in err and "Traceback" not in err
    assert cli_main(["run", "--smoke", "--log-level", "debug", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "ArithmeticError: injected failure" in err
    log = (tmp_path / "f.h5.log").read_text()
    assert re.search(r"ERROR +rieszflow run: run failed: ArithmeticError: injected failure", log)
    assert re.search(r"DEBUG +Traceback \(most recent call last\)", log) and "exit status 1" in log


def test_log_levels_and_quiet(tmp_path, monkeypatch, capsys):
    seen = []

    def records(cfg, out, **kwargs):
        seen.append(kwargs["quiet"])
        raise ArithmeticError("stop here")

    _patch_run(monkeypatch, records)
    for argv, quiet in ((["--quiet"], True), (["--log-level", "warning"], True), (["--log-level", "error"], True),
                        (["--log-level", "info"], False), ([], False), (["--log-level", "debug"], False)):
        assert cli_main(["run", "--smoke", *argv, "--out", str(tmp_path / "q.h5")]) == 1
        assert seen.pop() is quiet, argv
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        cli_main(["run", "--smoke", "--quiet", "--log-level", "debug"])
    assert e.value.code == 2 and "--quiet is --log-level warning" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        cli_main(["status", "x.h5", "--log-level", "loud"])
    assert e.value.code == 2


def test_where_the_log_file_goes(tmp_path):
    from rieszflow.studies.cli import build_parser

    parser = build_parser()

    def path(*argv):
        args, _ = parser.parse_known_args(list(argv))
        return log_file_of(args)[0]

    assert path("run", "--out", "x/a.h5") == Path("x/a.h5.log")
    assert path("ldp", "--out", "b.nc") == Path("b.nc.log")
    assert path("nlp", "--out", "sweep") == Path("sweep/rieszflow.log")
    assert path("run") == Path("runs/run.log") and path("luna") == Path("runs/luna.log")
    assert path("status", "x.h5") is None and path("report", "x.h5", "--out", "p.md") is None
    # a sweep directory gets its log once it holds its config.json, so an empty directory that the sweep
    # is about to check stays empty until then; the lines printed before are kept and written then
    d = tmp_path / "sweep"
    d.mkdir()
    with Console() as console:
        console.log_to(d / "rieszflow.log", lambda: (d / "config.json").is_file(), header="start")
        print("before")
        assert list(d.iterdir()) == []
        (d / "config.json").write_text("{}")
        print("after")
        assert (d / "rieszflow.log").is_file()
    lines = (d / "rieszflow.log").read_text().splitlines()
    assert [line.split(maxsplit=2)[2] for line in lines] == ["start", "before", "after"]


def test_a_progress_bar_is_logged_once_in_its_last_state(tmp_path):
    with Console() as console:
        console.log_to(tmp_path / "x.log", header="h")
        sys.stderr.write("bar  10%\rbar  50%\r\x1b[Abar 100%\n")
        sys.stderr.write("rieszflow run: error: bad\n")
        sys.stderr.write("\rtasks 1/5")                    # a bar, then a warning that does not clear it
        sys.stderr.write("\rtasks 2/5")
        sys.stderr.write("rieszflow run: warning: slow\n")
    lines = (tmp_path / "x.log").read_text().splitlines()
    assert [line.split(maxsplit=1)[1] for line in lines[1:]] == [
        "INFO    bar 100%", "ERROR   rieszflow run: error: bad", "INFO    tasks 2/5",
        "WARNING rieszflow run: warning: slow"]


class _ClosedPipe(io.TextIOBase):
    """A stdout whose reader has gone (``| head``): every write fails."""

    def write(self, text):
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self):
        raise BrokenPipeError(32, "Broken pipe")


def _main_file(tmp_path):
    out = tmp_path / "m.h5"
    w = TrajectoryWriter(out, "demo")
    w.close()
    return out


@pytest.fixture(scope="module")
def main_job_file(tmp_path_factory):
    out = tmp_path_factory.mktemp("pipe") / "run.h5"
    assert cli_main([*TINY, "--quiet", "--out", str(out)]) == 0
    return out


@pytest.mark.parametrize("argv", [["status", "FILE"], ["compare", "FILE", "FILE"], ["report", "FILE"],
                                  ["run", "--smoke", "--show-config"], ["run", "--help"], ["--help"]])
def test_a_closed_console_exits_quietly_with_0(argv, main_job_file, monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdout", _ClosedPipe())
    try:
        code = cli_main([str(main_job_file) if a == "FILE" else a for a in argv])
    except SystemExit as e:                                        # --help: argparse exits
        code = e.code
    assert code == 0
    assert "BrokenPipe" not in capsys.readouterr().err


def test_a_closed_pipe_in_a_real_process_exits_0_without_a_message(tmp_path):
    f = _main_file(tmp_path)
    for argv in (["--help"], ["status", str(f)], ["run", "--smoke", "--show-config"]):
        r, w = os.pipe()
        os.close(r)                                                 # the reader is gone before the start
        proc = subprocess.run([sys.executable, "-m", "rieszflow", *argv], stdout=w, stderr=subprocess.PIPE,
                              env=ENV, text=True, timeout=120)
        os.close(w)
        assert proc.returncode == 0 and proc.stderr == "", (argv, proc.stderr)


def test_a_warning_is_one_line_on_the_console_and_in_the_log(tmp_path):
    out = tmp_path / "w.h5"
    (tmp_path / "w.h5.lock").write_text(json.dumps({"pid": 2 ** 22 + 12345, "host": socket.gethostname(),
                                                    "started": "then"}))
    proc = subprocess.run([sys.executable, "-m", "rieszflow", *TINY, "--quiet", "--out", str(out)],
                          capture_output=True, env=ENV, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if "stale lock" in line]
    assert lines == [f"rieszflow run: warning: Taking over the stale lock file {out}.lock: the process "
                     f"{2 ** 22 + 12345} that held it (since then) is no longer running on this host."], \
        proc.stderr
    assert "warnings.warn" not in proc.stderr and "RuntimeWarning" not in proc.stderr
    assert re.search(r"WARNING +rieszflow run: warning: .*stale lock", (tmp_path / "w.h5.log").read_text())


@pytest.mark.parametrize("fault, words", [
    (PermissionError(13, "Permission denied", "ro/x.h5.lock"), "Permission denied"),  # unwritable directory
    (zipfile.BadZipFile("Bad CRC-32 for file 'adam/m.npy'"), "corrupt input file: Bad CRC-32"),
    (RunFileError("x.h5: damaged object 'energy'"), "damaged object"),           # corrupt HDF5 / checkpoint
    (RunFileError("x.h5 is being written by process 1 on host h"), "being written"),   # a live writer
])
def test_exit_code_2_for_the_bad_input_faults_of_issue_22(fault, words, tmp_path, monkeypatch, capsys):
    def raises(*args, **kwargs):
        raise fault

    _patch_run(monkeypatch, raises)
    assert cli_main(["run", "--smoke", "--quiet", "--out", str(tmp_path / "x.h5")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rieszflow run: error: ") and words in err[0], err


@pytest.mark.parametrize("attrs, words", [
    ({"resumable": True, "resume_hint": "continue it with: rieszflow run --resume --out X"},
     "; continue it with: rieszflow run --resume --out X"),
    ({"resumable": False}, "holds no checkpoint to continue from"),
    ({}, "commands with --resume continue it from its last checkpoint, if it has one"),
])
def test_the_interrupt_line_uses_the_runs_resume_hint(attrs, words, tmp_path, monkeypatch, capsys):
    def interrupted(*args, **kwargs):
        e = RunInterrupted(signal.SIGTERM)
        for k, v in attrs.items():
            setattr(e, k, v)
        raise e

    _patch_run(monkeypatch, interrupted)
    assert cli_main(["run", "--smoke", "--quiet", "--out", str(tmp_path / "x.h5")]) == 143
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rieszflow run: interrupted (interrupted by SIGTERM)")
    assert words in err[0], err
    assert "can be continued with --resume where" not in err[0]


@pytest.mark.parametrize("name", ["run", "ldp", "nlp"])
def test_an_empty_out_is_refused_naming_what_to_give(name, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as e:
        cli_main([name, "--out", ""])
    err = capsys.readouterr().err
    assert e.value.code == 2 and "argument --out: '': an empty path; give a file name ending in .h5" in err
    assert "PosixPath" not in err and list(tmp_path.iterdir()) == []
    if name != "nlp":                               # --out . names a directory, not an output file
        assert cli_main([name, "--quick" if name == "ldp" else "--smoke", "--out", "."]) == 2
        assert "--out '.' is a directory; give a file name ending in .h5" in capsys.readouterr().err
        assert list(tmp_path.iterdir()) == []
