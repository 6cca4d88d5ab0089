"""engine.storage.atomic_output: the one write-temp-then-rename helper.

The contract: the temporary file lives in the destination's directory; success replaces the
destination atomically; any failure (an error of the writer, a full disk at the write or at the
flush, an interrupt) leaves the old destination intact and no temporary file behind.
"""
import errno
import os

import pytest

from rieszflow.engine.storage import atomic_output


def _leftovers(directory, name):
    return sorted(p.name for p in directory.iterdir() if p.name != name)


def test_success_replaces_the_file_and_leaves_no_temporary(tmp_path):
    out = tmp_path / "table.txt"
    out.write_text("old")
    with atomic_output(out) as tmp:
        assert tmp.parent == out.parent                      # same directory: the rename is atomic
        assert tmp.name.startswith(".table.txt.") and tmp.name.endswith(".tmp")
        assert not tmp.exists()
        tmp.write_text("new")
        assert out.read_text() == "old"                      # untouched until the block ends
    assert out.read_text() == "new"
    assert _leftovers(tmp_path, "table.txt") == []


def test_creates_a_missing_destination(tmp_path):
    out = tmp_path / "fresh.h5"
    with atomic_output(out) as tmp:
        tmp.write_bytes(b"\x00\x01")
    assert out.read_bytes() == b"\x00\x01" and _leftovers(tmp_path, "fresh.h5") == []


@pytest.mark.parametrize("exc", [RuntimeError("writer failed"), KeyboardInterrupt()])
def test_an_exception_keeps_the_old_file_and_removes_the_temporary(tmp_path, exc):
    out = tmp_path / "table.txt"
    out.write_text("old")
    with pytest.raises(type(exc)):
        with atomic_output(out) as tmp:
            tmp.write_text("half")
            raise exc
    assert out.read_text() == "old"
    assert _leftovers(tmp_path, "table.txt") == []


def test_a_full_disk_at_the_flush_leaves_nothing_and_a_retry_succeeds(tmp_path, monkeypatch):
    out = tmp_path / "table.txt"
    out.write_text("old")
    real_fsync = os.fsync

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError, match="No space left"):
        with atomic_output(out) as tmp:
            tmp.write_text("new")
    assert out.read_text() == "old" and _leftovers(tmp_path, "table.txt") == []
    monkeypatch.setattr(os, "fsync", real_fsync)
    with atomic_output(out) as tmp:                          # the retry starts clean
        tmp.write_text("new")
    assert out.read_text() == "new" and _leftovers(tmp_path, "table.txt") == []


def test_a_block_that_writes_nothing_is_an_error_and_changes_nothing(tmp_path):
    out = tmp_path / "table.txt"
    out.write_text("old")
    with pytest.raises(FileNotFoundError, match="nothing was written"):
        with atomic_output(out):
            pass
    assert out.read_text() == "old" and _leftovers(tmp_path, "table.txt") == []


def test_suffix_for_writers_that_append_an_extension(tmp_path):
    np = pytest.importorskip("numpy")
    out = tmp_path / "ckpt.npz"
    with atomic_output(out, suffix=".tmp.npz") as tmp:
        assert tmp.name.endswith(".tmp.npz")
        np.savez(tmp, a=np.arange(3))                        # savez keeps a name ending in .npz
    assert np.load(out)["a"].tolist() == [0, 1, 2] and _leftovers(tmp_path, "ckpt.npz") == []


@pytest.mark.parametrize("suffix", ["tmp", ".a/b", ""])
def test_bad_suffix_names_the_parameter(tmp_path, suffix):
    with pytest.raises(ValueError, match="suffix="):
        with atomic_output(tmp_path / "x", suffix=suffix):
            pass


def test_missing_directory_and_directory_destination(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        with atomic_output(tmp_path / "nope" / "x.h5"):
            pass
    with pytest.raises(IsADirectoryError):
        with atomic_output(tmp_path):
            pass


def test_trajectory_writer_leaves_no_temporary_when_its_header_fails(tmp_path, monkeypatch):
    """The writer's fresh file goes through atomic_output: a failure before its first flush
    removes the temporary file and leaves an existing file at the path untouched."""
    from rieszflow.engine.storage import TrajectoryWriter
    from rieszflow.engine.storage import writer as writer_module

    out = tmp_path / "run.h5"
    out.write_bytes(b"old")

    def broken():
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(writer_module, "provenance", broken)
    with pytest.raises(OSError, match="No space left"):
        TrajectoryWriter(out, "demo", overwrite=True)
    assert out.read_bytes() == b"old"
    assert _leftovers(tmp_path, "run.h5") == []              # no temporary, no lock
