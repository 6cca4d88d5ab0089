"""What every file records about how it was made: versions, commit, host and command line."""
from __future__ import annotations

import datetime as _dt
import hashlib
import importlib.metadata as md
import platform
import shlex
import subprocess
import sys
from pathlib import Path

__all__ = ["provenance", "record_command", "code_identity"]


def _git_state() -> tuple[str, bool | None, str]:
    """``(commit, dirty, diff_sha256)`` of the checkout this module was loaded from.

    ``commit`` is ``HEAD`` with ``"-dirty"`` appended when tracked files differ from it, or
    ``"unknown"`` outside a git checkout; ``dirty`` is None there. ``diff_sha256`` is the SHA-256
    of ``git diff HEAD`` (binary, full index) followed by the names and contents' hashes of the
    untracked, not ignored files under ``src/``: two dirty trees with the same hash ran the same
    code. Empty for a clean tree.
    """
    root = Path(__file__).resolve().parents[2]          # src/rieszflow
    try:
        def git(*args):
            return subprocess.run(["git", *args], cwd=root, capture_output=True, timeout=20,
                                  check=True).stdout

        head = git("rev-parse", "HEAD").decode().strip()
        diff = git("diff", "HEAD", "--binary", "--full-index")
        top = Path(git("rev-parse", "--show-toplevel").decode().strip())
        # paths relative to root (git prints them relative to its working directory)
        untracked = [n for n in git("ls-files", "--others", "--exclude-standard", "-z", "--",
                                    str(top / "src")).decode().split("\0") if n]
    except (OSError, subprocess.SubprocessError, UnicodeDecodeError):
        return "unknown", None, ""
    dirty = bool(diff.strip()) or bool(untracked)
    if not dirty:
        return head, False, ""
    h = hashlib.sha256(diff)
    for name in sorted(untracked):
        h.update(b"\0untracked\0" + name.encode())
        try:
            h.update(hashlib.sha256((root / name).read_bytes()).digest())   # relative to root
        except OSError:
            h.update(b"unreadable")
    return head + "-dirty", True, h.hexdigest()


#: The state of the code this process loaded, read once when this module is imported (every
#: writer imports it first): a long run records the code it runs, not the checkout's HEAD at the
#: time of a later write (which moves when commits land while the run goes on).
_COMMIT_AT_IMPORT, _DIRTY_AT_IMPORT, _DIFF_AT_IMPORT = _git_state()


def code_identity(attrs) -> str:
    """One string that names the code a file's writer ran, for comparing files.

    Parameters
    ----------
    attrs : mapping
        Root attributes of a rieszflow file (or :func:`provenance`).

    Returns
    -------
    str
        ``"<commit>"`` for a clean tree; ``"<commit>-dirty+<first 12 hex of the diff hash>"`` for a
        dirty one (two dirty trees of one commit with other changes differ); ``"<commit> (at
        write)"`` for files written before ``git_commit_of = "loaded code"`` existed (their
        commit is the checkout's at write time, not necessarily the code that ran);
        ``"unknown"`` without a commit.
    """
    def text(v):
        return v.decode() if isinstance(v, bytes) else ("" if v is None else str(v))

    commit = text(attrs.get("git_commit")) or "unknown"
    if commit == "unknown":
        return commit
    if text(attrs.get("git_commit_of")) != "loaded code":
        return commit + " (at write)"
    diff = text(attrs.get("git_diff_sha256"))
    return commit + (f"+{diff[:12]}" if commit.endswith("-dirty") and diff else "")


#: The command line of the running ``rieszflow`` process (set by :func:`record_command`).
_COMMAND: str | None = None


def record_command(argv) -> None:
    """Remember the command line that every file written by this process records.

    Parameters
    ----------
    argv : sequence of str
        The command and its arguments (the CLI passes ``["rieszflow", *args]``).
    """
    global _COMMAND
    _COMMAND = shlex.join(str(a) for a in argv)


def _command() -> str:
    return _COMMAND if _COMMAND is not None else "python " + shlex.join(sys.argv)


def provenance() -> dict[str, str]:
    """Versions, commit and host facts recorded in every file's root attributes.

    Returns
    -------
    dict of str to str
        ``version_<package>`` for rieszflow's dependencies, ``git_commit`` (of the checkout
        when this process imported rieszflow's storage layer; ``"-dirty"`` appended when
        tracked files differed then), ``git_commit_of`` (``"loaded code"``: files written
        before this attribute existed record the checkout's commit at write time),
        ``git_dirty`` (``"true"``, ``"false"`` or ``"unknown"``), ``git_diff_sha256`` (the
        SHA-256 of the uncommitted changes and untracked source files at import; empty for a
        clean tree; :func:`code_identity` combines these), ``python``,
        ``platform``, ``created`` (UTC, ISO 8601) and ``command`` (the ``rieszflow`` command
        line that wrote the file, or the Python command of an API call).
    """
    info = {}
    for pkg in ("rieszflow", "numpy", "scipy", "numba", "h5py", "h5netcdf", "xarray",
                "tokenizers", "scikit-learn", "fipy", "pot", "cupy-cuda12x"):
        try:
            info[f"version_{pkg.replace('-', '_')}"] = md.version(pkg)
        except md.PackageNotFoundError:
            continue
    info["git_commit"] = _COMMIT_AT_IMPORT
    info["git_commit_of"] = "loaded code"          # files without it record HEAD at write time
    info["git_dirty"] = "unknown" if _DIRTY_AT_IMPORT is None else str(_DIRTY_AT_IMPORT).lower()
    info["git_diff_sha256"] = _DIFF_AT_IMPORT
    info["python"] = platform.python_version()
    info["platform"] = platform.platform()
    info["created"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    info["command"] = _command()
    return info
