"""The incremental writer :class:`TrajectoryWriter` of one rieszflow HDF5 file, and its block sizes.

The crash-safety contract (blocks of records, what a kill loses, one writer per path, the
rename of a fresh file onto its path at the first flush) is described in the docstring of
:mod:`rieszflow.engine.storage`.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import json
import sys
import time
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from rieszflow.engine.backend import namespace, to_numpy
from rieszflow.engine.storage.atomic import atomic_output
from rieszflow.engine.storage.lock import RunLock
from rieszflow.engine.storage.provenance import _command, provenance
from rieszflow.engine.storage.reader import FORMAT, RunFileError, check_run_file, open_run
from rieszflow.engine.storage.signals import _raise_held_signal, _signals_held, raise_pending_signal
from rieszflow.engine._checks import check_int, check_real

__all__ = ["CONVENTIONS", "FLUSH_RECORDS", "FLUSH_SECONDS", "FLUSH_BYTES", "TrajectoryWriter"]


#: Value of the root attribute ``Conventions`` of every file :class:`TrajectoryWriter` writes: the
#: CF conventions the variables' ``units`` and ``long_name`` follow.
CONVENTIONS = "CF-1.10"


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


def _attr_value(v: Any):
    """netCDF-safe attribute value: numbers and strings as they are, the rest as JSON."""
    if isinstance(v, (bool, np.bool_)):
        return int(v)
    if isinstance(v, (int, float, str, np.integer, np.floating)):
        return v
    if isinstance(v, np.ndarray) and v.ndim == 1 and v.dtype.kind in "iuf":
        return v                                   # e.g. CF flag_values
    return json.dumps(v, sort_keys=True, default=str)


def _utc_now() -> str:
    """The current time, ISO 8601 UTC to the second (``2026-11-26T19:00:11+00:00``)."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _filter_options(dtype, ndim: int) -> dict:
    """HDF5 filter options of a new dataset: Fletcher-32 checksums where HDF5 allows a filter.

    Filters need a chunked dataset of rank >= 1 and a fixed-size type (HDF5 refuses them on
    variable-length strings).
    """
    if ndim < 1 or np.dtype(dtype).kind in "USO":
        return {}
    return {"fletcher32": True}


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

    Root attributes the writer keeps (besides ``kind``, ``config``, ``config_<key>``, the
    provenance of :func:`~rieszflow.engine.storage.provenance` and the caller's ``attrs``):

    ``rieszflow_format``
        :data:`~rieszflow.engine.storage.FORMAT`.
    ``Conventions``
        ``"CF-1.10"`` (:data:`CONVENTIONS`): every variable has ``long_name`` and ``units``
        (UDUNITS strings, ``"1"`` for dimensionless quantities).
    ``status``
        ``"running"`` while written; ``"complete"``, ``"interrupted"`` or ``"failed"`` from
        :meth:`close`.
    ``updated``
        ISO 8601 UTC time of the last flush (a live reader sees how fresh the file is).
    ``wall_seconds``
        Wall time of the writing sessions, in seconds, summed over resumes; brought up to date
        at every flush (so a killed run keeps the time to its last block).
    ``planned_lengths``
        JSON object ``{dimension: planned number of records}``, from :meth:`plan` (absent if
        the job never called it). ``rieszflow status`` computes the fraction done as
        ``sum_d min(length_d, planned_d) / sum_d planned_d`` over the planned dimensions (each
        record counting as one unit of work) and the ETA as ``wall_seconds * (1 - f) / f``.
    ``progress``
        JSON object from :meth:`progress`, free form (e.g. ``{"phase": "A", "epoch": 1,
        "epochs": 2}``), shown by ``rieszflow status``.
    ``resumed``, ``resume_command``
        How often and with which command the file was continued (``resume=True``).

    Every dataset of a numeric type is chunked and carries HDF5's Fletcher-32 checksum filter,
    so a damaged chunk is detected when it is read (``rieszflow status --verify``); scalar and
    string variables cannot carry a filter.

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

        self.path = Path(path)
        self.kind = kind
        self._f = None
        self._tmp = None                # the temporary name of a fresh file, until its first flush
        self._atomic = None             # the atomic_output context that renames it onto the path
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
        self._t0 = time.perf_counter()   # start of this writing session (wall_seconds)
        self._wall0 = 0.0                # wall_seconds of the earlier sessions (resume)
        self._updated = None             # the root attribute updated, as last written
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
                self._f.attrs["Conventions"] = CONVENTIONS
                with contextlib.suppress(TypeError, ValueError):
                    self._wall0 = float(np.ravel(self._f.attrs.get("wall_seconds", 0.0))[0])
            else:
                self._atomic = atomic_output(self.path)
                self._tmp = self._atomic.__enter__()
                self._f = h5netcdf.File(self._tmp, "w", locking=False)
                root = self._f.attrs
                root["rieszflow_format"] = FORMAT
                root["kind"] = kind
                root["Conventions"] = CONVENTIONS
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
            if self._atomic is not None:    # removes the temporary file, leaves the path as it was
                with contextlib.suppress(BaseException):
                    self._atomic.__exit__(*sys.exc_info())
                self._atomic = self._tmp = None
            self._lock.release()
            raise
        self.resumed = bool(resume)

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
                v = f.create_variable(name, (name,), data=c, chunks=True,
                                      **_filter_options(c.dtype, 1))
            for k, val in (attrs or {}).items():
                v.attrs[k] = _attr_value(val)
        elif size is None:
            v = f.create_variable(name, (name,), dtype=dtype, chunks=(1024,),
                                  **_filter_options(dtype, 1))
            for k, val in (attrs or {}).items():
                v.attrs[k] = _attr_value(val)

    def variable(self, name: str, dims: tuple[str, ...], dtype="f8", attrs: Mapping | None = None,
                 data=None):
        """Create a variable over existing dimensions (idempotent when resuming).

        Variables over an unlimited dimension are chunked one record per chunk
        along it (fast appends; see h5py/h5py#2036); the others are chunked by h5py's
        heuristic. Numeric variables of rank >= 1 carry the Fletcher-32 checksum filter.

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
            filters = _filter_options(dtype, len(dims))
            v = f.create_variable(name, dims, dtype=dtype, data=np.asarray(to_numpy(data), dtype=dtype),
                                  chunks=True if filters else None, **filters)
        else:
            fill = np.nan if np.dtype(dtype).kind == "f" else None
            filters = _filter_options(dtype, len(dims))
            if filters and chunks is None:
                chunks = True
            v = f.create_variable(name, dims, dtype=dtype, chunks=chunks, fillvalue=fill, **filters)
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
            # freshness and wall time (class docstring), rewritten in place: a flush costs about
            # 0.15 ms more and the file does not grow (``attrs[k] = v`` would re-create them)
            attrs = self._f._h5file.attrs
            now = _utc_now()
            if now != self._updated:            # second resolution: once a second at most
                attrs.modify("updated", now)
                self._updated = now
            attrs.modify("wall_seconds", self._wall0 + (time.perf_counter() - self._t0))
            if self._tmp is not None:
                # h5netcdf's flush writes only the constant _NCProperties of a new file (0.5-1 ms
                # each time): once, at the first flush, is enough (h5netcdf's close writes it again)
                self._f.flush()
            self._f._h5file.flush()
        self._last_flush = time.monotonic()
        self._new_structure = False
        if self._tmp is not None:     # first flush of a fresh file: move it onto the path
            atomic, self._atomic, self._tmp = self._atomic, None, None
            atomic.__exit__(None, None, None)       # fsync, then os.replace onto the path

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
            Attribute names and values. ``wall_seconds`` (s) replaces the time counted before
            this writing session (a study that computes first and writes at the end gives its
            computing time); the writer keeps adding the time of its own session.
        """
        if "wall_seconds" in attrs:
            self._wall0 = check_real("wall_seconds", attrs.pop("wall_seconds"), nonnegative=True)
        for k, v in attrs.items():
            self._f.attrs[k] = _attr_value(v)
        self.flush()

    def plan(self, **lengths) -> None:
        """Declare the planned number of records of growing dimensions (for progress and ETA).

        Stored, merged with earlier calls, as the JSON root attribute ``planned_lengths``;
        the file is flushed. ``rieszflow status`` computes the fraction done as
        ``sum_d min(length_d, planned_d) / sum_d planned_d`` over the planned dimensions, so
        plan dimensions whose records cost about the same each (e.g. the optimiser steps of
        both phases of a training run), and its ETA as ``wall_seconds * (1 - f) / f``.

        Parameters
        ----------
        **lengths : int
            Dimension name to the number of records the job will have appended along it when
            it ends (>= 0), e.g. ``w.plan(step=1234, batch=4000)``.

        Raises
        ------
        TypeError
            If a length is not an integer.
        ValueError
            If a length is negative.
        """
        planned = self._json_attr("planned_lengths")
        for dim, n in lengths.items():
            planned[dim] = check_int(f"planned length of {dim!r}", n, minimum=0)
        self._f.attrs["planned_lengths"] = json.dumps(planned, sort_keys=True)
        self.flush()

    def progress(self, **fields) -> None:
        """Record where the job is, as the JSON root attribute ``progress`` (written at the next flush).

        Free form; ``rieszflow status`` prints the fields in the order given. Cheap (no
        flush): call it at every phase or epoch boundary.

        Parameters
        ----------
        **fields
            JSON-serialisable values, e.g. ``w.progress(phase="A", epoch=1, epochs=2)``; they
            replace the earlier ``progress`` entirely.
        """
        self._f.attrs["progress"] = json.dumps(fields, default=str)

    def _json_attr(self, key: str) -> dict:
        """A root attribute holding a JSON object, parsed ({} if absent or not a JSON object)."""
        raw = self._f.attrs.get(key)
        try:
            val = json.loads(raw) if raw is not None else {}
        except (TypeError, ValueError):
            return {}
        return val if isinstance(val, dict) else {}

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
            # wall time of the writing sessions (summed over resumes): set by the flush
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

    def remove(self, variables=(), dimensions=(), attrs=()) -> None:
        """Delete variables, fixed-size dimensions and root attributes of a resumed file.

        Used to extend a finished run: its final outputs (say a test evaluation) go before the
        run continues, so an interrupted extension never shows the shorter run's results. Names
        that do not exist are skipped. The file is closed and reopened around the deletion (the
        lock is kept throughout); HDF5 does not shrink the file, the space is reused.

        Parameters
        ----------
        variables : iterable of str
            Variables to delete (detached from their dimensions first).
        dimensions : iterable of str
            Fixed-size dimensions to delete with their coordinate variables; no remaining
            variable may use them.
        attrs : iterable of str
            Root attributes to delete.

        Raises
        ------
        ValueError
            If the writer did not reopen an existing file (``resume=True``), or a dimension is
            still used by a variable that is not deleted.
        """
        import h5netcdf
        import h5py

        if not self.resumed or self._f is None:
            raise ValueError("remove: only a writer that resumed an existing file may delete from it")
        variables, dimensions, attrs = list(variables), list(dimensions), list(attrs)
        self._flush()
        h5 = self._f._h5file
        if not any(n in h5 for n in variables + dimensions) and not any(a in h5.attrs for a in attrs):
            return                                  # nothing to delete: the file stays open
        for name in dimensions:
            if name in h5:
                users = [ref for ref in h5[name].attrs.get("REFERENCE_LIST", [])
                         if h5[ref[0]].name.lstrip("/") not in variables]
                if users:
                    raise ValueError(f"remove: dimension {name!r} is still used by "
                                     f"{[h5[r[0]].name for r in users]}")
        self._f.close()
        self._f = None
        try:
            with h5py.File(self.path, "a", locking=False) as f:
                for name in variables:
                    if name in f:
                        ds = f[name]
                        for dim in ds.dims:
                            for scale in list(dim.values()):
                                dim.detach_scale(scale)
                        del f[name]
                for name in dimensions:
                    if name in f:
                        del f[name]
                for a in attrs:
                    if a in f.attrs:
                        del f.attrs[a]
        finally:
            self._f = h5netcdf.File(self.path, "a", locking=False)
            for cache in (self._sizes, self._resize_targets, self._datasets, self._specs,
                          self._growing):
                cache.clear()
