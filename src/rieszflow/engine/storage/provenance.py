"""What every file records about how it was made: versions, commit, host and command line."""
from __future__ import annotations

import datetime as _dt
import importlib.metadata as md
import platform
import shlex
import subprocess
import sys
from pathlib import Path

__all__ = ["provenance", "record_command"]


def _git_commit() -> str:
    root = Path(__file__).resolve().parents[2]          # src/rieszflow
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                             text=True, timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return out + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


#: The commit of the code this process loaded, read once when this module is imported (every
#: writer imports it first): a long run records the code it runs, not the checkout's HEAD at the
#: time of a later write (which moves when commits land while the run goes on).
_COMMIT_AT_IMPORT = _git_commit()

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
        before this attribute existed record the checkout's commit at write time), ``python``,
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
    info["python"] = platform.python_version()
    info["platform"] = platform.platform()
    info["created"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    info["command"] = _command()
    return info
