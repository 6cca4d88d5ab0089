"""One writer per path: the lock file ``<path>.lock`` (:class:`RunLock`)."""
from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import socket
import time
import warnings
from pathlib import Path

from rieszflow.engine.storage.reader import RunFileError

__all__ = ["RunLock"]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class RunLock:
    """The exclusive writer lock of one output path: the file ``<path>.lock``.

    Parameters
    ----------
    path : str or os.PathLike
        The output file the lock protects.

    Raises
    ------
    RunFileError
        On :meth:`acquire`, if another live process (or a process on another host) holds it;
        the message names its pid, host and start time.
    """

    def __init__(self, path):
        self.path = Path(path)
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        self.held = False

    def owner(self) -> dict | None:
        """The holder recorded in the lock file (``pid``, ``host``, ``started``), or None.

        Returns
        -------
        dict or None
            The lock file's JSON record (``pid`` int, ``host`` str, ``started`` ISO 8601 UTC
            time); None if there is no lock file or it cannot be read or parsed.
        """
        try:
            return json.loads(self.lock_path.read_text())
        except (OSError, ValueError):
            return None

    def acquire(self) -> None:
        """Create the lock file atomically, taking over a stale lock of a dead local process."""
        me = {"pid": os.getpid(), "host": socket.gethostname(),
              "started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
        for _ in range(3):
            try:
                fd = os.open(self.lock_path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                other = self.owner()
                if other is None:            # being written right now, or unreadable: look again
                    time.sleep(0.05)
                    other = self.owner() or {}
                same_host = other.get("host") == me["host"]
                pid = other.get("pid")
                if same_host and isinstance(pid, int) and pid != me["pid"] and not _pid_alive(pid):
                    warnings.warn(f"{self.lock_path}: taking over the stale lock of process {pid} "
                                  f"(no longer running)", RuntimeWarning, stacklevel=3)
                    with contextlib.suppress(FileNotFoundError):
                        self.lock_path.unlink()
                    continue
                raise RunFileError(
                    f"{self.path} is being written by process {pid} on host {other.get('host')} "
                    f"(since {other.get('started')}); refusing to touch it. Wait for that run to end, "
                    f"or choose another output path (if that process is gone, delete "
                    f"{self.lock_path}).") from None
            with os.fdopen(fd, "w") as f:
                json.dump(me, f)
            self.held = True
            return
        raise RunFileError(f"could not acquire {self.lock_path}")

    def release(self) -> None:
        """Remove the lock file if this process holds it (idempotent)."""
        if self.held:
            with contextlib.suppress(FileNotFoundError):
                self.lock_path.unlink()
            self.held = False
