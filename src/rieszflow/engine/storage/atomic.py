"""Atomic file output: :func:`atomic_output`, the one write-temp-then-rename helper of rieszflow.

Every file that rieszflow writes whole (result tables, task files of a sweep, reports, the
header of a fresh :class:`~rieszflow.engine.storage.TrajectoryWriter` file) is written under a
temporary name in the directory of its destination and renamed onto it only when complete, so
a reader (or a crash) never sees a half-written file at the path, and a failed write leaves
neither a changed destination nor a temporary file behind.
"""
from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path

__all__ = ["atomic_output"]


def _fsync_path(path: Path, directory: bool = False) -> None:
    """Flush a file's (or a directory's) data and metadata to the disk."""
    fd = os.open(path, os.O_RDONLY | (getattr(os, "O_DIRECTORY", 0) if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_output(path, *, suffix: str = ".tmp", fsync: bool = True):
    """Write a file atomically: yield a temporary path beside ``path``, rename it onto ``path``.

    The block writes the whole file to the temporary path it is given (by any writer that
    takes a path: ``xarray.Dataset.to_netcdf``, ``Path.write_text``, ``numpy.savez``, an
    ``h5netcdf.File``). When the block ends without an exception the temporary file is flushed
    to the disk (``os.fsync``) and renamed onto ``path`` with ``os.replace``, atomic on POSIX
    (the directory entry switches from the old file to the new one; no reader ever sees a
    partial file); the directory is then flushed too. When the block, the flush or the rename
    raises (a full disk, a ``KeyboardInterrupt``, an error of the writer), the temporary file is
    removed, ``path`` is left as it was and the exception propagates: no temporary file is ever
    left behind, so a retry starts clean.

    Parameters
    ----------
    path : str or os.PathLike
        The destination file. Its directory must exist; an existing file there is replaced.
    suffix : str, default ".tmp"
        Ending of the temporary name, for writers that append their own extension to a name
        lacking it (``numpy.savez`` needs ``".tmp.npz"``). Must start with ``"."`` and hold no
        path separator.
    fsync : bool, default True
        Flush the file and its directory to the disk before and after the rename (durability
        across a power loss; the atomicity of the rename does not depend on it).

    Yields
    ------
    pathlib.Path
        The temporary path ``<dir>/.<name>.<pid>.<random hex><suffix>``, in the directory of
        ``path`` (a rename within one file system is atomic), not yet existing: the block
        creates it.

    Raises
    ------
    ValueError
        If ``suffix`` does not start with ``"."`` or contains a path separator.
    FileNotFoundError
        If the directory of ``path`` does not exist, or the block did not create the temporary
        file.
    IsADirectoryError
        If ``path`` is a directory.

    Examples
    --------
    >>> with atomic_output(out) as tmp:                       # doctest: +SKIP
    ...     ds.to_netcdf(tmp, engine="h5netcdf")
    """
    path = Path(path)
    if not isinstance(suffix, str) or not suffix.startswith(".") or os.sep in suffix or \
            (os.altsep and os.altsep in suffix):
        raise ValueError(f"atomic_output: suffix={suffix!r}; give an ending that starts with '.' "
                         f"and holds no path separator (e.g. '.tmp', '.tmp.npz')")
    if path.is_dir():
        raise IsADirectoryError(f"atomic_output: {path} is a directory; give the path of a file")
    if not path.parent.is_dir():
        raise FileNotFoundError(f"atomic_output: the directory {path.parent} of {path} does not "
                                f"exist; create it first")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}{suffix}")
    replaced = False
    try:
        yield tmp
        if not tmp.exists():
            raise FileNotFoundError(f"atomic_output: nothing was written to the temporary file "
                                    f"{tmp}, so {path} is left as it was")
        if fsync:
            _fsync_path(tmp)
        os.replace(tmp, path)
        replaced = True
    finally:
        if not replaced:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
    if fsync:
        with contextlib.suppress(OSError):    # not every platform can open a directory
            _fsync_path(path.parent, directory=True)
