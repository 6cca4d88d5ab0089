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

Integrity and progress
----------------------
Every numeric dataset carries HDF5's Fletcher-32 checksum filter: a chunk changed on disk
fails to read (:func:`verify_run_file`, ``rieszflow status --verify``) instead of returning
wrong numbers. Each flush stamps the root attributes ``updated`` (UTC) and ``wall_seconds``
(summed over resumes); a job may declare ``planned_lengths`` (:meth:`TrajectoryWriter.plan`)
and a free-form ``progress`` (:meth:`TrajectoryWriter.progress`), from which ``rieszflow
status`` computes the fraction done and an ETA. Files carry ``Conventions = "CF-1.10"``.

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

Atomic output
-------------
Files written whole (result tables, sweep task files, reports) go through
:func:`atomic_output`: written under a temporary name beside the destination, flushed, and
renamed onto it; a failure removes the temporary file and leaves the destination untouched.

Modules
-------
:mod:`~rieszflow.engine.storage.writer`
    :class:`TrajectoryWriter`, its default block sizes (``FLUSH_*``) and :data:`CONVENTIONS`.
:mod:`~rieszflow.engine.storage.reader`
    :data:`FORMAT`, :class:`RunFileError`, :func:`open_run`, :func:`check_run_file`,
    :func:`check_resumable`, :func:`missing_cf_attributes`, :func:`verify_run_file`.
:mod:`~rieszflow.engine.storage.lock`
    :class:`RunLock`, the one-writer-per-path lock file, and :func:`~.lock.holder_state`.
:mod:`~rieszflow.engine.storage.atomic`
    :func:`atomic_output`.
:mod:`~rieszflow.engine.storage.signals`
    :class:`RunInterrupted`, :func:`interruptible`, :func:`raise_pending_signal`.
:mod:`~rieszflow.engine.storage.provenance`
    :func:`provenance` and :func:`record_command`.

Every name is importable from ``rieszflow.engine.storage`` itself.
"""
from __future__ import annotations

from rieszflow.engine.storage.atomic import atomic_output
from rieszflow.engine.storage.lock import RunLock
from rieszflow.engine.storage.provenance import _command, provenance, record_command  # noqa: F401
from rieszflow.engine.storage.reader import (
    FORMAT,
    RunFileError,
    check_resumable,
    check_run_file,
    missing_cf_attributes,
    open_run,
    read_hdf5,
    verify_run_file,
)
from rieszflow.engine.storage.signals import RunInterrupted, interruptible, raise_pending_signal
from rieszflow.engine.storage.writer import (
    CONVENTIONS,
    FLUSH_BYTES,
    FLUSH_RECORDS,
    FLUSH_SECONDS,
    TrajectoryWriter,
    _attr_value,  # noqa: F401  (private helpers used by rieszflow.studies)
)

__all__ = ["raise_pending_signal", "FORMAT", "FLUSH_RECORDS", "FLUSH_SECONDS", "FLUSH_BYTES",
           "TrajectoryWriter", "open_run", "provenance", "RunFileError", "check_run_file",
           "check_resumable", "RunInterrupted", "interruptible", "RunLock", "missing_cf_attributes",
           "atomic_output", "record_command", "verify_run_file", "CONVENTIONS", "read_hdf5"]
