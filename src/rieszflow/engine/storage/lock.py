"""One writer per path: the lock file ``<path>.lock`` (:class:`RunLock`), and whether its holder
still runs (:func:`holder_state`)."""
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

__all__ = ["RunLock", "holder_state", "ALIVE", "GONE", "OTHER_HOST", "UNKNOWN"]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _proc_stat(pid: int) -> tuple[str, float] | None:
    """(state letter, start time in seconds since the epoch) of a process, from Linux's /proc;
    None where /proc cannot tell (another system, or the process is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        btime = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                     if line.startswith("btime "))
        fields = stat[stat.rindex(")") + 2:].split()     # after "pid (comm) "
        ticks = os.sysconf("SC_CLK_TCK")
        return fields[0], btime + int(fields[19]) / ticks
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def _parse_time(text) -> float | None:
    """Seconds since the epoch of an ISO 8601 time (None if it is not one)."""
    try:
        t = _dt.datetime.fromisoformat(str(text))
    except ValueError:
        return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=_dt.timezone.utc)
    return t.timestamp()


#: Liveness of a lock's holder (:func:`holder_state`).
ALIVE, GONE, OTHER_HOST, UNKNOWN = "alive", "gone", "other host", "unknown"


def holder_state(owner: dict | None) -> str:
    """Whether the process recorded in a lock file still runs.

    On the lock's own host the process must exist, not be a zombie, and (where Linux's
    ``/proc`` tells) have started no later than the lock's ``started`` time (plus 2 s of
    rounding and clock slack): a later start means the pid was reused by another process.

    Parameters
    ----------
    owner : dict or None
        A lock record (:meth:`RunLock.owner`: ``pid``, ``host``, ``started``).

    Returns
    -------
    str
        ``"alive"``, ``"gone"`` (the writer no longer runs), ``"other host"`` (written on
        another host: this host cannot tell) or ``"unknown"`` (no readable record).
    """
    if not owner:
        return UNKNOWN
    pid = owner.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return UNKNOWN
    if owner.get("host") != socket.gethostname():
        return OTHER_HOST
    if not _pid_alive(pid):
        return GONE
    stat = _proc_stat(pid)
    if stat is not None:
        state, start = stat
        if state in ("Z", "X"):                   # killed, not yet reaped by its parent
            return GONE
        started = _parse_time(owner.get("started"))
        if started is not None and start > started + 2.0:
            return GONE                           # the pid now belongs to a younger process
    return ALIVE


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
        """Create the lock file atomically, taking over a stale lock of a dead local process.

        The lock file is only ever created with ``O_EXCL``, and a stale one is only removed under
        a takeover mutex (:meth:`_remove_stale`), after reading it again there and finding the
        same dead holder: two processes that find the same stale lock cannot both take it (the
        second would otherwise delete the first's fresh lock and create its own).
        """
        me = {"pid": os.getpid(), "host": socket.gethostname(),
              "started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}
        for _ in range(200):                 # each retry waits 0.05 s or follows a takeover
            try:
                fd = os.open(self.lock_path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                other = self.owner()
                if other is None:            # being written right now, or unreadable: look again
                    time.sleep(0.05)
                    other = self.owner() or {}
                same_host = other.get("host") == me["host"]
                pid = other.get("pid")
                if same_host and isinstance(pid, int) and pid != me["pid"] and \
                        holder_state(other) == GONE:
                    if self._remove_stale(other):
                        warnings.warn(f"Taking over the stale lock file {self.lock_path}: the process "
                                      f"{pid} that held it (since {other.get('started')}) is no longer "
                                      f"running on this host.", RuntimeWarning, stacklevel=3)
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

    #: A takeover mutex file older than this (seconds) was left by a process that died inside
    #: the takeover (which takes milliseconds): it is removed.
    TAKEOVER_STALE_S = 10.0

    def _unlink_if_still(self, stale: dict) -> bool:
        """Inside a takeover mutex: remove the lock file if it still records ``stale``.

        False if it changed (taken over and re-created by another process) or is gone.
        """
        if self.owner() != stale:
            return False
        with contextlib.suppress(FileNotFoundError):
            self.lock_path.unlink()
        return True

    def _remove_stale(self, stale: dict) -> bool:
        """Remove the lock file if it still records ``stale``, under the takeover mutex.

        The mutex is the file ``<path>.lock.takeover``, created with ``O_EXCL`` and removed at
        once (the takeover takes milliseconds); one older than :attr:`TAKEOVER_STALE_S` was
        left by a process that died inside it and is removed.

        Returns
        -------
        bool
            True if this process removed it; False if another process is taking over (the
            caller looks again after 0.05 s) or the lock file changed since it was judged stale.
        """
        mutex = self.lock_path.with_name(self.lock_path.name + ".takeover")
        try:
            fd = os.open(mutex, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            with contextlib.suppress(OSError):
                if time.time() - mutex.stat().st_mtime > self.TAKEOVER_STALE_S:
                    mutex.unlink()
            time.sleep(0.05)
            return False
        os.close(fd)
        try:
            return self._unlink_if_still(stale)
        finally:
            with contextlib.suppress(FileNotFoundError):
                mutex.unlink()

    def release(self) -> None:
        """Remove the lock file if this process holds it (idempotent)."""
        if self.held:
            with contextlib.suppress(FileNotFoundError):
                self.lock_path.unlink()
            self.held = False
