"""Reading and checking rieszflow files: the format tag, :func:`open_run`, resume and CF checks."""
from __future__ import annotations

import json
import os
from pathlib import Path

__all__ = ["FORMAT", "RunFileError", "check_run_file", "open_run", "check_resumable",
           "missing_cf_attributes", "verify_run_file", "read_hdf5"]


#: Value of the root attribute ``rieszflow_format`` of every file rieszflow writes.
FORMAT = "rieszflow/1"


class RunFileError(ValueError):
    """A file is not a readable rieszflow run (foreign, corrupt, or of another kind)."""


def read_hdf5(path):
    """Open an HDF5 file read-only without HDF5's file lock, so a live file can be read.

    A file this process already holds open (an :func:`open_run` dataset, kept open by xarray)
    must be opened with the same locking flag as that handle (HDF5 shares one file object per
    process); the open is then retried with the default flag.

    Parameters
    ----------
    path : str or os.PathLike

    Returns
    -------
    h5py.File
        Open in mode ``"r"``; the caller closes it (``with read_hdf5(p) as f``).

    Raises
    ------
    OSError
        If HDF5 cannot open the file (missing, not HDF5, damaged superblock).
    """
    import h5py

    try:
        return h5py.File(path, "r", locking=False)
    except OSError as e:
        if "locking flag" not in str(e):
            raise
        return h5py.File(path, "r")


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
        with read_hdf5(path) as f:     # a live file too (the writer's lock)
            fmt = f.attrs.get("rieszflow_format")
            got_kind = f.attrs.get("kind")
    except (OSError, ValueError, KeyError, RuntimeError) as e:
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
    try:
        with read_hdf5(path) as f:
            raw = f.attrs.get("config", "{}")
            status = f.attrs.get("status")
    except (OSError, ValueError, KeyError, RuntimeError) as e:
        raise RunFileError(f"{path}: its root attributes cannot be read ({e}); the file is "
                           f"corrupt: start again with --overwrite") from e
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
    except (OSError, ValueError, KeyError, RuntimeError) as e:
        raise RunFileError(f"{path} cannot be read ({type(e).__name__}: {e})") from e


def verify_run_file(path) -> list[str]:
    """Read every dataset of a rieszflow file in full, so that HDF5 checks each chunk's checksum.

    Datasets written by :class:`~rieszflow.engine.storage.TrajectoryWriter` carry HDF5's
    Fletcher-32 filter: a chunk whose bytes changed on disk fails its checksum when it is read.
    Datasets without the filter (scalars, strings, files of older versions) are read too, which
    finds damaged metadata and truncated files but not silently changed values.

    Parameters
    ----------
    path : str or os.PathLike
        A file written by rieszflow.

    Returns
    -------
    list of str
        The names of the datasets read, in file order (groups walked depth first).

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    RunFileError
        If the file is not a readable rieszflow file, or an object of it cannot be opened or
        read: the message names the first damaged variable.
    """
    import h5py

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist")
    check_run_file(path)
    read: list[str] = []
    try:
        f = read_hdf5(path)
    except (OSError, ValueError) as e:
        raise RunFileError(f"{path} cannot be opened ({e})") from e
    with f:
        def walk(group, prefix):
            for name in group:
                full = f"{prefix}{name}"
                try:
                    obj = group[name]
                    if isinstance(obj, h5py.Dataset):
                        if obj.chunks is not None and obj.size:
                            for sel in obj.iter_chunks():     # chunk by chunk: bounded memory
                                obj[sel]
                        elif obj.shape is None or obj.size:
                            obj[()]
                        read.append(full)
                except (OSError, KeyError, RuntimeError, ValueError, TypeError) as e:
                    raise RunFileError(f"{path}: variable {full!r} is damaged and cannot be read "
                                       f"({type(e).__name__}: {e}); the file is corrupt: rerun "
                                       f"the job with --overwrite, or restore the file from a "
                                       f"copy") from e
                if isinstance(obj, h5py.Group):
                    walk(obj, full + "/")
        walk(f, "")
    return read
