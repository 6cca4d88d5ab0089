"""The shared study base: strict configurations from mappings and files, and their validators.

Every study's configuration is a frozen dataclass; this module gives them one way to be
built from a mapping or a JSON/HDF5 file (unknown keys are an error that lists the allowed
ones) and one set of value checks whose failures are ``ValueError`` (a bad configuration is
bad input: exit code 2 in the CLI), built on the engine's validators
(:mod:`rieszflow.engine._checks`).
"""
from __future__ import annotations

import dataclasses
import json
import math
import numbers
from pathlib import Path
from typing import Any, Mapping

from rieszflow.engine._checks import check_int, check_real

__all__ = ["from_mapping", "unwrap_config", "load_config_mapping", "config_real", "config_int",
           "is_int", "is_real", "add_output_arguments"]


def is_int(v) -> bool:
    """True for an integer that is not a bool (Python or NumPy)."""
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def is_real(v) -> bool:
    """True for a finite real number that is not a bool."""
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(float(v))


def config_real(name: str, value, **bounds) -> float:
    """A configuration's real value: :func:`~rieszflow.engine._checks.check_real`, errors as ValueError.

    Parameters
    ----------
    name : str
        The configuration key.
    value : object
        Its value.
    **bounds
        ``positive``, ``nonnegative``, ``low``, ``high``, ``low_open``, ``high_open``.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        Naming the key, the value and what is allowed.
    """
    try:
        return check_real(name, value, **bounds)
    except TypeError as e:
        raise ValueError(str(e)) from None


def config_int(name: str, value, minimum: int | None = None) -> int:
    """A configuration's integer value (bool rejected), errors as ValueError.

    Parameters
    ----------
    name : str
        The configuration key.
    value : object
        Its value.
    minimum : int, optional
        Smallest allowed value.

    Returns
    -------
    int

    Raises
    ------
    ValueError
        Naming the key, the value and what is allowed.
    """
    try:
        return check_int(name, value, minimum=minimum)
    except TypeError as e:
        raise ValueError(str(e)) from None


def unwrap_config(d: Mapping[str, Any]) -> Mapping[str, Any]:
    """The configuration mapping inside the wrappers rieszflow writes (``{"json": {...}}``).

    Parameters
    ----------
    d : Mapping
        A configuration, or the ``{"json": config}`` wrapper some studies store.

    Returns
    -------
    Mapping
    """
    if isinstance(d, Mapping) and set(d) == {"json"} and isinstance(d["json"], Mapping):
        return d["json"]
    return d


def from_mapping(cfg_cls, d: Mapping[str, Any]):
    """Build the dataclass ``cfg_cls`` from a mapping, strictly.

    Parameters
    ----------
    cfg_cls : dataclass type
        The configuration class.
    d : Mapping
        Its fields (or the ``{"json": ...}`` wrapper of a stored configuration).

    Returns
    -------
    instance of ``cfg_cls``

    Raises
    ------
    TypeError
        If ``d`` is not a mapping.
    ValueError
        On unknown keys (the message lists the allowed ones), or as ``cfg_cls`` validates.
    """
    if not isinstance(d, Mapping):
        raise TypeError(f"{cfg_cls.__name__} needs a mapping, got {type(d).__name__}")
    d = unwrap_config(d)
    known = {f.name for f in dataclasses.fields(cfg_cls)}
    unknown = sorted(set(d) - known)
    if unknown:
        raise ValueError(f"unknown {cfg_cls.__name__} keys {unknown}; allowed: {sorted(known)}")
    return cfg_cls(**dict(d))


def load_config_mapping(path) -> dict:
    """The configuration stored in a JSON file or in any rieszflow HDF5 file.

    Parameters
    ----------
    path : str or os.PathLike
        A ``.json`` file, or an HDF5 file written by rieszflow (its root attribute ``config``).

    Returns
    -------
    dict
        The configuration mapping, wrappers removed.

    Raises
    ------
    ValueError
        If the file does not exist, is not JSON / not a rieszflow file, or holds no configuration.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"--config {str(path)!r}: no such file")
    if path.suffix.lower() in (".h5", ".hdf5", ".nc"):
        from rieszflow.engine.storage import RunFileError, check_run_file

        import h5py

        try:
            check_run_file(path)
        except RunFileError as e:
            raise ValueError(f"--config {str(path)!r}: {e}") from None
        with h5py.File(path, "r") as f:
            raw = f.attrs.get("config")
        if raw is None:
            raise ValueError(f"--config {str(path)!r}: the file stores no configuration")
    else:
        raw = path.read_text()
    try:
        data = json.loads(raw)
    except (TypeError, ValueError) as e:
        raise ValueError(f"--config {str(path)!r}: not valid JSON ({e})") from None
    if not isinstance(data, Mapping):
        raise ValueError(f"--config {str(path)!r}: expected a JSON object, got {type(data).__name__}")
    return dict(unwrap_config(data))


def add_output_arguments(parser, default_out: str, *, resume_help: str | None = None,
                         plots: bool = True) -> None:
    """Add the output options every study shares: ``--out``, ``--overwrite``, ``--resume``,
    ``--no-plots``, ``--quiet``.

    Parameters
    ----------
    parser : argparse.ArgumentParser
        The subcommand's parser.
    default_out : str
        The default output path, as shown in the help (e.g. ``runs/ldp[-quick]-seed<seed>.h5``).
    resume_help : str, optional
        Help of ``--resume`` (what a resumed run keeps); None when the study cannot resume.
    plots : bool, default True
        Whether the study draws figures (adds ``--no-plots``).
    """
    from pathlib import Path as _Path

    parser.add_argument("--out", type=_Path, default=None,
                        help=f"output HDF5 file (default {default_out})")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing output file")
    if resume_help is not None:
        parser.add_argument("--resume", action="store_true", help=resume_help)
    if plots:
        parser.add_argument("--no-plots", action="store_true", help="skip the PNG figures")
    parser.add_argument("--quiet", action="store_true", help="no progress bars or stage lines")
