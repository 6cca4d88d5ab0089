"""HDF5 trajectories with named dimensions: written incrementally, read with xarray.

Every rieszflow run or study writes one netCDF4-compatible HDF5 file through
:class:`TrajectoryWriter`. Each dimension is a real netCDF dimension (an HDF5
dimension scale, created by h5netcdf), so

>>> import xarray as xr
>>> ds = xr.open_dataset(path, engine="h5netcdf")   # doctest: +SKIP

returns variables with named dimensions (``time``, ``layer``, ``head``,
``particle``, ``coord``, ...). :func:`open_run` does the same after checking
that the file is a rieszflow file.

Crash safety and resumption
---------------------------
Growing dimensions (``time``, ``epoch``, ...) are unlimited and chunked along
themselves. :meth:`TrajectoryWriter.append` keeps each record in memory (a copy, on the
array's own device: CuPy records stay on the GPU) and writes the records of every
unlimited dimension in *blocks*: one host copy and one HDF5 write per variable per block,
then one flush of the file. A block is written when one dimension holds ``flush_records``
unwritten records (default :data:`FLUSH_RECORDS` = 256), when the unwritten records hold
``flush_bytes`` bytes (default :data:`FLUSH_BYTES` = 16 MiB), or at the first append
``flush_seconds`` seconds after the last flush (default :data:`FLUSH_SECONDS` = 10 s);
:meth:`TrajectoryWriter.flush`, :meth:`~TrajectoryWriter.set`,
:meth:`~TrajectoryWriter.set_attrs`, :meth:`~TrajectoryWriter.read`,
:meth:`~TrajectoryWriter.truncate` and :meth:`~TrajectoryWriter.close` write it at once.
``flush_records=1`` writes and flushes every record as it is appended.

What a kill loses: SIGINT and SIGTERM inside :func:`interruptible` (every ``rieszflow``
command) raise :class:`RunInterrupted`; the writer's ``close("interrupted")`` writes the
buffered block first, so nothing is lost (a signal that arrives while a block is being
written is held until the block is complete). SIGKILL (or a crash of the interpreter) loses
the records appended since the last flush and nothing else: per unlimited dimension at most
``flush_records - 1`` records, together less than ``flush_bytes`` bytes, all appended less
than ``flush_seconds`` before the last append. The file stays valid and holds every record
of the earlier blocks. The root attribute ``status`` is ``"running"`` until
:meth:`TrajectoryWriter.close` sets it to ``"complete"``; a file left ``"running"`` was
interrupted and can be reopened with ``resume=True``. Checkpointing callers call
:meth:`TrajectoryWriter.flush` before they store :meth:`TrajectoryWriter.length`, so a
checkpoint never counts records that are not on disk.

An existing file is never overwritten unless ``overwrite=True`` is passed.

One writer per path
-------------------
A writer holds ``<file>.lock`` (owner pid, host, start time) from before it touches the
path until it has closed and verified the file. A second writer of the same path, with or
without ``overwrite``, is refused while the lock is held; a lock left by a dead process
on this host is stale and taken over (with a warning). A fresh file is written under a
temporary name in the same directory and renamed onto the path right after its header
is written and flushed (the *first flush*): a run killed at any later point leaves a
valid, resumable file at the path, and an ``overwrite`` never truncates the old file in
place (the rename swaps it atomically). At close the writer re-opens its file and checks
it (:func:`open_run`, status, every variable readable) before reporting success.

Live reading
------------
The writer opens the file without HDF5's own file lock (our lock file takes its place),
so ``xarray.open_dataset(path, engine="h5netcdf")`` (or :func:`open_run`, ``rieszflow
status``) reads a running file; a reader sees the records flushed so far (at most one block,
``flush_seconds`` of records, behind the writer). This is not HDF5 SWMR: a reader that opens the file in the middle of a
write can, rarely, see an inconsistent state and should simply retry.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from rieszflow.engine.backend import namespace, to_numpy

__all__ = ["raise_pending_signal", "FORMAT", "FLUSH_RECORDS", "FLUSH_SECONDS", "FLUSH_BYTES",
           "TrajectoryWriter", "open_run", "provenance", "RunFileError", "check_run_file",
           "check_resumable", "RunInterrupted", "interruptible", "RunLock", "missing_cf_attributes"]

#: Value of the root attribute ``rieszflow_format`` of every file rieszflow writes.
FORMAT = "rieszflow/1"

#: Default block size of :class:`TrajectoryWriter`: records of one unlimited dimension kept in
#: memory before they are written (``flush_records``).
FLUSH_RECORDS = 256
#: Default longest time, in seconds, between two flushes while records are appended
#: (``flush_seconds``; checked at each append).
FLUSH_SECONDS = 10.0
#: Default largest size, in bytes, of the records kept in memory (``flush_bytes``): 16 MiB.
FLUSH_BYTES = 16 * 2**20


def _string_dtype():
    import h5py

    return h5py.string_dtype("utf-8")


class RunFileError(ValueError):
    """A file is not a readable rieszflow run (foreign, corrupt, or of another kind)."""


class RunInterrupted(KeyboardInterrupt):
    """A run stopped by a signal (SIGINT or SIGTERM).

    A ``KeyboardInterrupt``, so every ``except KeyboardInterrupt`` (and the writers'
    ``status = "interrupted"``) handles SIGTERM exactly like Ctrl-C.

    Parameters
    ----------
    signum : int
        The signal number.

    Attributes
    ----------
    signum : int
    exit_code : int
        128 + signum (130 for SIGINT, 143 for SIGTERM), the shell convention.
    """

    def __init__(self, signum: int):
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = int(signum)
        self.exit_code = 128 + int(signum)


@contextlib.contextmanager
def interruptible():
    """Turn SIGTERM and SIGINT into :class:`RunInterrupted` inside the block.

    The previous handlers are restored on exit. Outside the main thread (where Python
    cannot install handlers) the block runs unchanged.

    Yields
    ------
    None
    """
    global _PENDING_SIGNAL, _HELD_SIGNAL

    def handler(signum, frame):
        global _PENDING_SIGNAL, _HELD_SIGNAL
        _PENDING_SIGNAL = signum    # kept: an exception raised inside a weakref or __del__
        if _HOLD_SIGNALS:           # callback is swallowed by Python; writers re-raise it.
            _HELD_SIGNAL = signum   # A block is being written: raised once it is complete.
            return
        raise RunInterrupted(signum)

    try:
        old = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}
    except ValueError:              # not the main thread
        yield
        return
    _PENDING_SIGNAL = _HELD_SIGNAL = None
    try:
        yield
    finally:
        _PENDING_SIGNAL = _HELD_SIGNAL = None
        for sig, h in old.items():
            signal.signal(sig, h)


#: The signal caught by :func:`interruptible` (None if none): when Python swallowed the
#: exception of the handler (it was raised inside a weakref or ``__del__`` callback), the next
#: :meth:`TrajectoryWriter.append` raises it again, so no interrupt is lost.
_PENDING_SIGNAL: int | None = None

#: Nesting depth of :func:`_signals_held`: while positive, the handler of :func:`interruptible`
#: only records the signal (a block of records is written whole or not at all) in
#: ``_HELD_SIGNAL``, which :meth:`TrajectoryWriter.flush` raises once the block is written.
_HOLD_SIGNALS = 0
_HELD_SIGNAL: int | None = None


@contextlib.contextmanager
def _signals_held():
    """Hold SIGINT/SIGTERM caught by :func:`interruptible` in ``_PENDING_SIGNAL`` inside the block."""
    global _HOLD_SIGNALS
    _HOLD_SIGNALS += 1
    try:
        yield
    finally:
        _HOLD_SIGNALS -= 1


def _raise_held_signal() -> None:
    """Raise :class:`RunInterrupted` for a signal held while a block was written (if any)."""
    global _PENDING_SIGNAL, _HELD_SIGNAL
    if _HELD_SIGNAL is not None and not _HOLD_SIGNALS:
        signum, _HELD_SIGNAL, _PENDING_SIGNAL = _HELD_SIGNAL, None, None
        raise RunInterrupted(signum)


def raise_pending_signal() -> None:
    """Raise :class:`RunInterrupted` if :func:`interruptible` caught a signal that was swallowed.

    Raises
    ------
    RunInterrupted
        With the pending signal (SIGINT or SIGTERM).
    """
    global _PENDING_SIGNAL, _HELD_SIGNAL
    if _PENDING_SIGNAL is not None:
        # one signal, raised once: a copy held while a block was written is consumed too
        signum, _PENDING_SIGNAL, _HELD_SIGNAL = _PENDING_SIGNAL, None, None
        raise RunInterrupted(signum)


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
                    import time

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


def _git_commit() -> str:
    root = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True,
                             text=True, timeout=5, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return out + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


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
    import shlex

    _COMMAND = shlex.join(str(a) for a in argv)


def _command() -> str:
    import shlex

    return _COMMAND if _COMMAND is not None else "python " + shlex.join(sys.argv)


def provenance() -> dict[str, str]:
    """Versions, commit and host facts recorded in every file's root attributes.

    Returns
    -------
    dict of str to str
        ``version_<package>`` for rieszflow's dependencies, ``git_commit``
        (``"-dirty"`` appended when tracked files differ), ``python``,
        ``platform``, ``created`` (UTC, ISO 8601) and ``command`` (the ``rieszflow`` command
        line that wrote the file, or the Python command of an API call).
    """
    import importlib.metadata as md

    info = {}
    for pkg in ("rieszflow", "numpy", "scipy", "numba", "h5py", "h5netcdf", "xarray",
                "tokenizers", "scikit-learn", "fipy", "pot", "cupy-cuda12x"):
        try:
            info[f"version_{pkg.replace('-', '_')}"] = md.version(pkg)
        except md.PackageNotFoundError:
            continue
    info["git_commit"] = _git_commit()
    info["python"] = platform.python_version()
    info["platform"] = platform.platform()
    info["created"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    info["command"] = _command()
    return info


def _attr_value(v: Any):
    """netCDF-safe attribute value: numbers and strings as they are, the rest as JSON."""
    if isinstance(v, (bool, np.bool_)):
        return int(v)
    if isinstance(v, (int, float, str, np.integer, np.floating)):
        return v
    if isinstance(v, np.ndarray) and v.ndim == 1 and v.dtype.kind in "iuf":
        return v                                   # e.g. CF flag_values
    return json.dumps(v, sort_keys=True, default=str)


def _record_copy(val):
    """A private copy of one record on its own device: no host transfer, no synchronisation."""
    if type(val).__module__.startswith("cupy"):
        return val.copy()                 # device-to-device, asynchronous
    return np.array(val)                  # a copy (the caller may reuse its buffer)


def _stack_to_host(arrays):
    """The records of one variable stacked on their device, then one host copy."""
    try:
        xp = namespace(*arrays)
    except TypeError:                     # NumPy and CuPy records in one block
        return np.stack([to_numpy(a) for a in arrays])
    return to_numpy(xp.stack(arrays))


class TrajectoryWriter:
    """Incremental writer of one rieszflow HDF5 file (netCDF4 data model via h5netcdf).

    Parameters
    ----------
    path : str or os.PathLike
        File to create (or to reopen with ``resume=True``).
    kind : str
        What the file holds (``"main_job"``, ``"mean_field"``, ...); stored as
        the root attribute ``kind`` and checked by :func:`open_run`.
    config : mapping, optional
        The full resolved configuration; stored as JSON in the root attribute
        ``config`` and, key by key, as ``config_<key>`` for scalar values.
    attrs : mapping, optional
        Further root attributes (``seed``, ``backend``, ...).
    overwrite : bool, default False
        Replace an existing file. Without it an existing ``path`` raises.
    resume : bool, default False
        Reopen an existing rieszflow file of the same ``kind`` to append to it.
    flush_records : int, optional
        Block size: the records of one unlimited dimension kept in memory before they are
        written and the file is flushed, >= 1. Default :data:`FLUSH_RECORDS` (256);
        ``1`` writes and flushes every record as it is appended.
    flush_seconds : float, optional
        Write and flush at the first append this many seconds after the last flush, >= 0.
        Default :data:`FLUSH_SECONDS` (10 s). Checked at each append only: a writer that stops
        appending keeps its block until the next append, flush or close.
    flush_bytes : int, optional
        Write and flush when the records kept in memory (every dimension together) reach this
        many bytes, >= 1. Default :data:`FLUSH_BYTES` (16 MiB). It bounds the host (or GPU)
        memory the block takes.

    Raises
    ------
    FileExistsError
        If ``path`` exists and neither ``overwrite`` nor ``resume`` is set.
    FileNotFoundError
        If ``resume=True`` and ``path`` does not exist.
    RunFileError
        If ``resume=True`` and the file is not a rieszflow file of this kind.
    ValueError
        If both ``overwrite`` and ``resume`` are set, or a ``flush_*`` option is out of range.
    TypeError
        If ``flush_records`` or ``flush_bytes`` is not an integer.

    Notes
    -----
    Records are written in blocks (module docstring, "Crash safety and resumption"): a
    SIGKILL loses the records appended since the last flush, at most ``flush_records - 1``
    per unlimited dimension and less than ``flush_bytes`` bytes, all appended within
    ``flush_seconds`` before the last append; SIGINT and SIGTERM under :func:`interruptible`
    lose nothing (``close("interrupted")`` writes the block). :meth:`length`, :meth:`read`
    and :meth:`truncate` see the buffered records; a caller that stores :meth:`length` in a
    checkpoint calls :meth:`flush` first, so the checkpoint counts only records on disk.
    Close the writer (or use it as a context manager, which closes it also on errors): a
    writer dropped without :meth:`close` loses the block it still holds.

    Examples
    --------
    >>> with TrajectoryWriter(p, "demo", config={"n": 3}) as w:    # doctest: +SKIP
    ...     w.dimension("time", None)
    ...     w.dimension("particle", 3)
    ...     w.variable("x", ("time", "particle"))
    ...     w.append("time", {"x": [1.0, 2.0, 3.0]}, coord=0.0)
    """

    def __init__(self, path, kind: str, *, config: Mapping[str, Any] | None = None,
                 attrs: Mapping[str, Any] | None = None, overwrite: bool = False,
                 resume: bool = False, flush_records: int | None = None,
                 flush_seconds: float | None = None, flush_bytes: int | None = None):
        import h5netcdf

        from rieszflow.engine._checks import check_int, check_real

        self.path = Path(path)
        self.kind = kind
        self._f = None
        self._tmp = None
        self.flush_records = check_int("flush_records", FLUSH_RECORDS if flush_records is None
                                       else flush_records, minimum=1)
        self.flush_seconds = check_real("flush_seconds", FLUSH_SECONDS if flush_seconds is None
                                        else flush_seconds, nonnegative=True, allow_inf=True)
        self.flush_bytes = check_int("flush_bytes", FLUSH_BYTES if flush_bytes is None
                                     else flush_bytes, minimum=1)
        # the block in memory: per unlimited dimension, its records as (coord, {name: array})
        # and the index of its first record in the file; per variable, (first dim, record dims)
        self._pending: dict[str, list] = {}
        self._pending_start: dict[str, int] = {}
        self._pending_bytes = 0
        self._specs: dict[str, tuple] = {}
        self._last_flush = time.monotonic()
        self._new_structure = False     # dimensions or variables created since the last flush
        self._sizes: dict[str, int] = {}                 # dimension sizes in the file
        self._resize_targets: dict[str, list] = {}       # (h5py dataset, axis) per dimension
        self._datasets: dict[str, Any] = {}              # h5py datasets by variable name
        self._growing: dict[str, bool] = {}              # unlimited dims: has a coordinate?
        if overwrite and resume:
            raise ValueError("TrajectoryWriter: overwrite=True and resume=True exclude each other")
        if self.path.is_dir():
            raise RunFileError(f"{self.path} is a directory; give the path of an HDF5 file (e.g. "
                               f"{self.path / 'run.h5'})")
        if not self.path.parent.is_dir():
            raise FileNotFoundError(f"the directory {self.path.parent} of {self.path} does not exist; "
                                    f"create it first")
        exists = self.path.exists()
        if exists and not (overwrite or resume):
            raise FileExistsError(
                f"{self.path} already exists; refusing to overwrite it. Pass overwrite=True "
                f"(CLI: --overwrite) to replace it or choose another output path (studies that "
                f"support it continue an interrupted file with --resume).")
        if resume and not exists:
            raise FileNotFoundError(f"resume=True but {self.path} does not exist")
        self._lock = RunLock(self.path)
        self._lock.acquire()           # before the file is touched in any way
        try:
            if resume:
                check_run_file(self.path, kind)
                self._f = h5netcdf.File(self.path, "a", locking=False)
                self._f.attrs["status"] = "running"
                self._f.attrs["resumed"] = int(self._f.attrs.get("resumed", 0)) + 1
                self._f.attrs["resume_command"] = _command()
            else:
                self._tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
                self._f = h5netcdf.File(self._tmp, "w", locking=False)
                root = self._f.attrs
                root["rieszflow_format"] = FORMAT
                root["kind"] = kind
                root["status"] = "running"
                for k, v in provenance().items():
                    root[k] = v
                if config is not None:
                    root["config"] = json.dumps(dict(config), sort_keys=True, default=str)
                    for k, v in config.items():
                        if isinstance(v, (int, float, str, bool, np.integer, np.floating)):
                            root[f"config_{k}"] = _attr_value(v)
                for k, v in (attrs or {}).items():
                    root[k] = _attr_value(v)
            self._flush()
        except BaseException:
            if self._f is not None:
                with contextlib.suppress(Exception):
                    self._f.close()
                self._f = None
            if self._tmp is not None:
                with contextlib.suppress(FileNotFoundError):
                    self._tmp.unlink()
            self._lock.release()
            raise
        self.resumed = bool(resume)
        self._t0 = time.perf_counter()

    # -- structure ---------------------------------------------------------------------------
    def dimension(self, name: str, size: int | None, coords=None, attrs: Mapping | None = None,
                  dtype="f8"):
        """Create a dimension (idempotent when resuming).

        Parameters
        ----------
        name : str
            Dimension name (``time``, ``particle``, ``coord``, ...).
        size : int or None
            Fixed length, or None for an unlimited (growing) dimension.
        coords : array_like, optional
            Coordinate values written as the variable ``name`` of that dimension.
            For unlimited dimensions, coordinates are given record by record in
            :meth:`append` instead.
        attrs : mapping, optional
            Attributes of the coordinate variable (``units``, ``long_name``).
        dtype : str, default "f8"
            Type of the coordinate of an unlimited dimension (``"i8"`` for step and epoch
            indices).
        """
        f = self._f
        if name in f.dimensions:                      # resuming: the dimension must agree
            dim = f.dimensions[name]
            if (size is None) != dim.isunlimited() or (size is not None and dim.size != size):
                raise ValueError(f"dimension {name!r} exists with size "
                                 f"{'unlimited' if dim.isunlimited() else dim.size}; "
                                 f"cannot redeclare it with size {size!r}")
            return
        f.dimensions[name] = size
        self._new_structure = True
        if coords is not None:
            c = np.asarray(coords)
            if size is not None and c.shape != (size,):
                raise ValueError(f"dimension {name!r}: coords have shape {c.shape}, expected ({size},)")
            if c.dtype.kind in "US":
                v = f.create_variable(name, (name,), dtype=_string_dtype(), data=c.astype(object))
            else:
                v = f.create_variable(name, (name,), data=c)
            for k, val in (attrs or {}).items():
                v.attrs[k] = _attr_value(val)
        elif size is None:
            v = f.create_variable(name, (name,), dtype=dtype, chunks=(1024,))
            for k, val in (attrs or {}).items():
                v.attrs[k] = _attr_value(val)

    def variable(self, name: str, dims: tuple[str, ...], dtype="f8", attrs: Mapping | None = None,
                 data=None):
        """Create a variable over existing dimensions (idempotent when resuming).

        Variables over an unlimited dimension are chunked one record per chunk
        along it (fast appends; see h5py/h5py#2036).

        Parameters
        ----------
        name : str
        dims : tuple of str
            Dimension names, each created before with :meth:`dimension`.
        dtype : numpy dtype, default float64
        attrs : mapping, optional
            Variable attributes (``units``, ``long_name``, ``source``).
        data : array_like, optional
            Full contents, for variables without an unlimited dimension.

        Returns
        -------
        h5netcdf.Variable
            The variable created (or, when resuming, the existing one).

        Raises
        ------
        KeyError
            If a dimension in ``dims`` was not created.
        """
        f = self._f
        if name in f.variables:                       # resuming: the variable must agree
            var = f.variables[name]
            if tuple(var.dimensions) != tuple(dims):
                raise ValueError(f"variable {name!r} exists with dims {var.dimensions}; cannot "
                                 f"redeclare it with dims {tuple(dims)}")
            if data is not None:
                var[...] = np.asarray(to_numpy(data)) if np.dtype(dtype).kind not in "USO" \
                    else np.asarray(data).astype(object)
                self.flush()
            return var
        for d in dims:
            if d not in f.dimensions:
                raise KeyError(f"variable {name!r}: dimension {d!r} was not created "
                               f"(known: {sorted(f.dimensions)})")
        unlimited = [f.dimensions[d].isunlimited() for d in dims]
        self._new_structure = True
        self._resize_targets.clear()    # the new variable must grow with its dimensions
        chunks = None
        if any(unlimited):
            chunks = tuple(1 if u else max(1, f.dimensions[d].size) for d, u in zip(dims, unlimited))
        if data is not None and np.dtype(dtype).kind in "USO":
            v = f.create_variable(name, dims, dtype=_string_dtype(), data=np.asarray(data).astype(object))
        elif data is not None:
            v = f.create_variable(name, dims, dtype=dtype, data=np.asarray(to_numpy(data), dtype=dtype))
        else:
            fill = np.nan if np.dtype(dtype).kind == "f" else None
            v = f.create_variable(name, dims, dtype=dtype, chunks=chunks, fillvalue=fill)
        for k, val in (attrs or {}).items():
            v.attrs[k] = _attr_value(val)
        return v

    def flush(self) -> None:
        """Write the records kept in memory, then all data and metadata, to disk.

        ``h5netcdf.File.flush`` only writes netCDF bookkeeping attributes (done at the first
        flush); the HDF5 file itself is flushed here, so a process killed after this
        call leaves a consistent file holding every record appended so far (tested with
        SIGKILL in ``tests/test_storage.py`` and ``tests/test_recording_buffer.py``).
        """
        self._flush()
        _raise_held_signal()        # a SIGINT/SIGTERM that arrived while the block was written

    def _flush(self) -> None:
        """:meth:`flush` without raising a held signal (for the constructor and :meth:`close`)."""
        with _signals_held():               # a block is written whole (see interruptible)
            self._write_pending()
            if self._tmp is not None:
                # h5netcdf's flush writes only the constant _NCProperties of a new file (0.5-1 ms
                # each time): once, at the first flush, is enough (h5netcdf's close writes it again)
                self._f.flush()
            self._f._h5file.flush()
        self._last_flush = time.monotonic()
        self._new_structure = False
        if self._tmp is not None:     # first flush of a fresh file: move it onto the path
            os.replace(self._tmp, self.path)
            self._tmp = None

    def _write_pending(self) -> bool:
        """Write the block of every unlimited dimension (no HDF5 flush); True if there was one.

        Idempotent when interrupted: a block leaves memory only once all of it is written, and
        a retry writes the same file rows again. Writes go to the HDF5 datasets directly
        (h5netcdf's per-call bookkeeping costs more than the write of a small block).
        """
        wrote = False
        for dim in list(self._pending):     # every dimension first: a record may span two
            if self._pending[dim]:
                self._resize(dim, self._pending_start[dim] + len(self._pending[dim]))
        for dim in list(self._pending):
            recs = self._pending[dim]
            if not recs:                    # emptied by truncate
                del self._pending[dim], self._pending_start[dim]
                continue
            start, n = self._pending_start[dim], len(recs)
            rows = slice(start, start + n)
            if self._growing.get(dim, True):  # the coordinate variable
                self._dataset(dim)[rows] = np.array([c for c, _ in recs], dtype=np.float64)
            names = {}
            for j, (_, vals) in enumerate(recs):
                for name in vals:
                    names.setdefault(name, []).append(j)
            for name, given in names.items():
                ds = self._dataset(name)
                if len(given) == n:         # the usual case: one stacked host copy, one write
                    ds[rows] = _stack_to_host([vals[name] for _, vals in recs])
                else:                       # a variable given in some records only
                    for j in given:
                        ds[start + j] = to_numpy(recs[j][1][name])
            del self._pending[dim], self._pending_start[dim]
            wrote = True
        self._pending_bytes = 0
        return wrote

    def _dataset(self, name: str):
        """The h5py dataset of a variable of the root group (cached)."""
        ds = self._datasets.get(name)
        if ds is None:
            ds = self._datasets[name] = self._f._h5file[name]
        return ds

    def _disk_size(self, dim: str) -> int:
        """Size of a dimension in the file (cached: only this writer changes it)."""
        size = self._sizes.get(dim)
        if size is None:
            size = self._sizes[dim] = int(self._f.dimensions[dim].size)
        return size

    def _resize(self, dim: str, size: int) -> None:
        """Resize the unlimited dimension ``dim`` in the file: its dimension scale and every
        dataset that refers to it (what ``h5netcdf.File.resize_dimension`` does, with the list of
        datasets kept between calls)."""
        if self._disk_size(dim) == size:
            return
        targets = self._resize_targets.get(dim)
        if targets is None:
            h5 = self._f._h5file
            scale = self._dataset(dim)
            targets = [(scale, 0)] + [(h5[ref], int(axis))
                                      for ref, axis in scale.attrs.get("REFERENCE_LIST", [])]
            self._resize_targets[dim] = targets
        for ds, axis in targets:
            ds.resize(size, axis=axis)
        self._sizes[dim] = size

    def _flush_pending(self) -> None:
        """:meth:`flush` if records are kept in memory (before anything reads or resizes)."""
        if self._pending:
            self.flush()

    def length(self, dim: str) -> int:
        """Current length of a dimension (records appended along it, buffered ones included).

        Parameters
        ----------
        dim : str
            Dimension name.

        Returns
        -------
        int
            Its current size: the records on disk plus those kept in memory.
        """
        if dim in self._pending:
            return self._pending_start[dim] + len(self._pending[dim])
        return self._disk_size(dim)

    def _spec(self, dim: str, name: str) -> tuple:
        """The record dimensions of variable ``name`` appended along ``dim`` (KeyError if not)."""
        spec = self._specs.get(name)
        if spec is None:
            f = self._f
            if name not in f.variables:
                raise KeyError(f"append: variable {name!r} does not exist")
            var = f.variables[name]
            dims = tuple(var.dimensions)
            fixed = [None if f.dimensions[d].isunlimited() else int(f.dimensions[d].size)
                     for d in dims[1:]]
            spec = self._specs[name] = (dims, tuple(zip(dims[1:], fixed)))
        dims, rest = spec
        if dims[0] != dim:
            raise KeyError(f"append: variable {name!r} has dims {dims}, not starting with {dim!r}")
        return tuple(self.length(d) if size is None else size for d, size in rest)

    # -- data --------------------------------------------------------------------------------
    def append(self, dim: str, values: Mapping[str, Any], coord=None) -> int:
        """Append one record along the unlimited dimension ``dim`` (written in blocks).

        The record is copied on its own device (no host transfer, no device
        synchronisation: a CuPy array stays on the GPU until its block is written, with
        one host copy per variable per block) and written when the block is full (see the
        class's ``flush_records``, ``flush_bytes``, ``flush_seconds``).

        Parameters
        ----------
        dim : str
            An unlimited dimension.
        values : mapping of str to array_like
            For each variable whose first dimension is ``dim``, the record
            (its shape is the variable's shape without ``dim``). NumPy or CuPy arrays,
            or Python / NumPy scalars; the caller may change its arrays afterwards.
        coord : float, optional
            Value of the coordinate variable ``dim`` for this record
            (e.g. the time); defaults to the record index.

        Returns
        -------
        int
            Index of the record.

        Raises
        ------
        KeyError
            If a variable does not exist or does not start with ``dim``.
        ValueError
            If a record has the wrong shape (the message names the variable, the shape
            and the expected shape); nothing is appended then.
        RunInterrupted
            If :func:`interruptible` caught a signal that is still pending.
        """
        raise_pending_signal()      # a SIGINT/SIGTERM whose exception Python swallowed
        if self._new_structure:
            self.flush()            # new variables reach the disk before their first record
        records, nbytes = {}, 0
        for name, val in values.items():              # check every record before keeping any
            want = self._spec(dim, name)
            arr = _record_copy(val)
            if tuple(arr.shape) != want:
                raise ValueError(f"append: record for {name!r} has shape {tuple(arr.shape)}, "
                                 f"expected {want}")
            records[name] = arr
            nbytes += arr.nbytes
        if dim not in self._growing:
            if dim not in self._f.dimensions or not self._f.dimensions[dim].isunlimited():
                raise KeyError(f"append: {dim!r} is not an unlimited dimension of {self.path.name}")
            self._growing[dim] = dim in self._f.variables       # has a coordinate variable
        i = self.length(dim)
        if dim not in self._pending:
            self._pending_start[dim] = i
            self._pending[dim] = []
        self._pending[dim].append((float(i if coord is None else coord), records))
        self._pending_bytes += nbytes
        if (len(self._pending[dim]) >= self.flush_records or self._pending_bytes >= self.flush_bytes
                or time.monotonic() - self._last_flush >= self.flush_seconds):
            self.flush()            # raises a signal held while the block was written
        return i

    def truncate(self, dim: str, length: int) -> None:
        """Shrink the unlimited dimension ``dim`` to ``length`` records (used when resuming).

        Records past ``length`` (written after the last checkpoint, on disk or kept in
        memory) are dropped.

        Parameters
        ----------
        dim : str
            An unlimited dimension.
        length : int
            Number of records to keep, in ``[0, current length]``.

        Raises
        ------
        ValueError
            If ``length`` is negative or larger than the current length.
        """
        n = self.length(dim)
        if not 0 <= length <= n:
            raise ValueError(f"truncate: length={length} for dimension {dim!r} must lie in [0, {n}]")
        if length == n:
            return
        if dim in self._pending:
            start = self._pending_start[dim]
            if length > start:          # only records kept in memory go
                del self._pending[dim][length - start:]
                return
            del self._pending[dim], self._pending_start[dim]
        if length < self._disk_size(dim):
            self._resize(dim, length)
        self.flush()

    def set(self, name: str, data) -> None:
        """Write the whole contents of a fixed-size variable and flush (buffered records too).

        Parameters
        ----------
        name : str
            An existing variable.
        data : array_like
            Its new contents, of the variable's shape (CuPy arrays are accepted).
        """
        var = self._f.variables[name]
        var[...] = np.asarray(to_numpy(data))
        self.flush()

    def read(self, name: str) -> np.ndarray:
        """Read back a variable (used to resume a run from its last record).

        Records kept in memory are written (and the file flushed) first.

        Parameters
        ----------
        name : str
            An existing variable.

        Returns
        -------
        ndarray
            Its whole contents, of the variable's shape and dtype.
        """
        self._flush_pending()
        return np.asarray(self._f.variables[name][...])

    def get_var_attr(self, name: str, attr: str):
        """An attribute of an existing variable (KeyError if either is missing).

        Parameters
        ----------
        name : str
            An existing variable.
        attr : str
            Attribute name.

        Returns
        -------
        object
            The attribute's value as stored (number, string or array).
        """
        return self._f.variables[name].attrs[attr]

    def describe(self, name: str, long_name: str, units: str = "1", **more) -> None:
        """Set the CF description of an existing variable or coordinate.

        Parameters
        ----------
        name : str
            The variable (or the coordinate variable of a dimension).
        long_name : str
            What it is.
        units : str, default "1"
            Its units (``"1"`` for dimensionless quantities, CF convention).
        **more
            Further attributes (``flag_values``, ``flag_meanings``, ...).

        Raises
        ------
        KeyError
            If there is no variable ``name``.
        """
        var = self._f.variables[name]
        for k, v in {"long_name": long_name, "units": units, **more}.items():
            var.attrs[k] = _attr_value(v)

    def set_attrs(self, **attrs) -> None:
        """Set root attributes (numbers, strings; anything else stored as JSON) and flush.

        Parameters
        ----------
        **attrs
            Attribute names and values.
        """
        for k, v in attrs.items():
            self._f.attrs[k] = _attr_value(v)
        self.flush()

    def get_attr(self, key: str, default=None):
        """Root attribute ``key`` or ``default``.

        Parameters
        ----------
        key : str
            Attribute name.
        default : object, optional
            Returned when there is no root attribute ``key``.

        Returns
        -------
        object
            The attribute's value as stored, or ``default``.
        """
        return self._f.attrs.get(key, default)

    def close(self, status: str = "complete", verify: bool = True) -> None:
        """Set the root attribute ``status``, close, verify the file and release the lock.

        Parameters
        ----------
        status : {"complete", "interrupted", "failed"}, default "complete"
        verify : bool, default True
            Re-open the closed file and check it (:func:`open_run` of this kind, the status
            written, every variable readable).

        Raises
        ------
        RunFileError
            If the verification fails: the run must not report success.
        """
        if getattr(self, "_f", None) is None:
            return
        try:
            session = time.perf_counter() - self._t0
            # wall time of the writing sessions (summed over resumes), for the docs' stated runs
            self._f.attrs["wall_seconds"] = float(self._f.attrs.get("wall_seconds", 0.0)) + session
            self._f.attrs["status"] = status
            self._flush()               # the block in memory too; a signal held meanwhile stays
            self._f.close()             # pending (raised by the next append of any writer)
            self._f = None
            if verify:
                self._verify(status)
        finally:
            if self._f is not None:
                with contextlib.suppress(Exception):
                    self._f.close()
                self._f = None
            self._lock.release()

    def _verify(self, status: str) -> None:
        try:
            ds = open_run(self.path, kind=self.kind)
        except (OSError, RunFileError, ValueError) as e:
            raise RunFileError(f"{self.path} failed verification after closing: {e}") from e
        got = ds.attrs.get("status")
        if got != status:
            raise RunFileError(f"{self.path} failed verification: status {got!r}, expected {status!r}")

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None and issubclass(exc_type, KeyboardInterrupt):
            self.close("interrupted")
        elif exc_type is not None:
            self.close("failed")
        else:
            self.close("complete")
        return False


def check_run_file(path, kind: str | None = None) -> None:
    """Check that ``path`` is a readable rieszflow HDF5 file (of ``kind`` when given).

    Parameters
    ----------
    path : str or os.PathLike
    kind : str, optional

    Raises
    ------
    RunFileError
        If the file is not HDF5, not written by rieszflow, or of another kind.
    """
    path = Path(path)
    import h5py

    try:
        with h5py.File(path, "r") as f:
            fmt = f.attrs.get("rieszflow_format")
            got_kind = f.attrs.get("kind")
    except (OSError, ValueError) as e:
        raise RunFileError(f"{path} is not a readable HDF5 file ({e}); expected a file written "
                           f"by rieszflow") from e
    if isinstance(fmt, bytes):
        fmt = fmt.decode()
    if isinstance(got_kind, bytes):
        got_kind = got_kind.decode()
    if fmt != FORMAT:
        raise RunFileError(f"{path} is an HDF5 file but not a rieszflow run: root attribute "
                           f"rieszflow_format={fmt!r}, expected {FORMAT!r}")
    if kind is not None and got_kind != kind:
        raise RunFileError(f"{path} holds a rieszflow run of kind={got_kind!r}, expected {kind!r}")


def open_run(path, kind: str | None = None):
    """Open a rieszflow HDF5 file as an :class:`xarray.Dataset` with named dimensions.

    Parameters
    ----------
    path : str or os.PathLike
    kind : str, optional
        If given, the file's root attribute ``kind`` must equal it.

    Returns
    -------
    xarray.Dataset
        Loaded into memory (the file is closed on return); ``ds.attrs``
        holds the configuration (``config``, JSON), seed, backend, versions
        and commit.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    RunFileError
        If the file is corrupt, foreign, or of another kind.
    """
    import xarray as xr

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist")
    check_run_file(path, kind)
    try:
        with xr.open_dataset(os.fspath(path), engine="h5netcdf") as ds:
            return ds.load()
    except (OSError, RuntimeError, KeyError, ValueError) as e:
        if isinstance(e, RunFileError):
            raise
        raise RunFileError(f"{path} is a rieszflow file but cannot be read ({type(e).__name__}: {e}); "
                           f"it may be truncated or corrupt") from e


def _config_diff(stored, given, prefix=""):
    """(key, stored value, given value) for every leaf where two JSON-like mappings differ."""
    out = []
    for key in sorted(set(stored) | set(given), key=str):
        a, b = stored.get(key, "<absent>"), given.get(key, "<absent>")
        if isinstance(a, dict) and isinstance(b, dict):
            out += _config_diff(a, b, f"{prefix}{key}.")
        elif a != b:
            out.append((f"{prefix}{key}", a, b))
    return out


def check_resumable(path, kind: str, config, *, allow_complete: bool = True) -> dict:
    """Refuse to resume a missing, foreign, finished or differently configured run file.

    The one resume check of rieszflow: every study calls it before it touches the file.

    Parameters
    ----------
    path : str or os.PathLike
        The run file to continue.
    kind : str
        The ``kind`` root attribute the study writes.
    config : Mapping
        The configuration exactly as the study stores it in the root attribute ``config``
        (e.g. ``cfg.to_dict()``, or a wrapper such as ``{"json": cfg.to_dict()}``).
    allow_complete : bool, default True
        When False, a file whose ``status`` is ``"complete"`` is an error (nothing to resume).

    Returns
    -------
    dict
        The stored configuration (parsed JSON).

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    RunFileError
        If it is not a rieszflow run of ``kind`` or its ``config`` attribute is not JSON.
    ValueError
        If the run is complete (with ``allow_complete=False``), or the configurations differ;
        the message lists every differing key with the stored and the given value.
    """
    import h5py

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"resume: {path} does not exist")
    check_run_file(path, kind)
    with h5py.File(path, "r") as f:
        raw = f.attrs.get("config", "{}")
        status = f.attrs.get("status")
    if isinstance(status, bytes):
        status = status.decode()
    try:
        stored = json.loads(raw)
    except (TypeError, ValueError) as e:
        raise RunFileError(f"{path}: root attribute 'config' is not valid JSON ({e})") from e
    if not allow_complete and status == "complete":
        raise ValueError(f"resume: {path} holds a complete run; there is nothing to resume")
    given = json.loads(json.dumps(dict(config), default=str))
    diff = _config_diff(stored, given)
    if diff:
        lines = "; ".join(f"{k}: stored {a!r}, given {b!r}" for k, a, b in diff)
        raise ValueError(f"resume: {path} was written with another configuration ({lines}); resume "
                         f"with the same options, or start again with --overwrite")
    return stored


def missing_cf_attributes(path) -> list[str]:
    """Variables of a file (coordinates included) that lack ``long_name`` or ``units``.

    Parameters
    ----------
    path : str or os.PathLike
        An HDF5/netCDF file.

    Returns
    -------
    list of str
        ``"name (missing long_name, units)"`` entries; empty when every variable describes
        itself as the CF conventions ask.

    Raises
    ------
    RunFileError
        If the file cannot be read.
    """
    import xarray as xr

    try:
        with xr.open_dataset(os.fspath(path), engine="h5netcdf") as ds:
            out = []
            for name in ds.variables:
                miss = [a for a in ("long_name", "units") if a not in ds[name].attrs]
                if miss:
                    out.append(f"{name} (missing {', '.join(miss)})")
            return out
    except (OSError, ValueError) as e:
        raise RunFileError(f"{path} cannot be read ({e})") from e
