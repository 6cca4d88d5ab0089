"""The reporters of ``rieszflow report``: each study registers how its files become text tables.

A reporter is a function ``ds -> str`` (``ds`` an opened run file) that returns the tables the
study prints. A study registers its reporters where it registers its subcommand (its ``cli``
module), by file kind (:func:`register_reporter`) or, for a sweep file, by the sweep's task
function (:func:`register_sweep_reporter`); targets are ``"module:function"`` strings, so that
registering imports nothing heavy. ``rieszflow report`` (:mod:`rieszflow.studies.runs.report`)
looks reporters up here and never imports a study; :func:`reporter` loads every study's CLI
module (``rieszflow.studies.cli.SUBCOMMANDS``) the first time a kind is not yet known, so the
registry is complete whether the command line or a Python script asks.

Shared infrastructure of the studies, like :mod:`rieszflow.studies.base` and the sweep layer.
"""
from __future__ import annotations

import importlib
from typing import Callable

from rieszflow.studies.cli import SUBCOMMANDS

__all__ = ["register_reporter", "register_sweep_reporter", "reporter", "sweep_reporter",
           "reporter_kinds", "stored_report"]

_REPORTERS: dict[str, str] = {}
_SWEEP_REPORTERS: dict[str, str] = {}
_loaded = False


def register_reporter(kind: str, target: str) -> None:
    """Register the reporter of a file kind.

    Parameters
    ----------
    kind : str
        The root attribute ``kind`` of the files it reports (e.g. ``"ldp_study"``).
    target : str
        ``"module:function"``: a function ``ds -> str`` that returns the study's text tables.

    Raises
    ------
    ValueError
        If ``target`` is not of the form ``module:function``, or ``kind`` already has another
        reporter.
    """
    _register(_REPORTERS, "kind", kind, target)


def register_sweep_reporter(task_function: str, target: str) -> None:
    """Register the reporter of the sweep files whose tasks run ``task_function``.

    Parameters
    ----------
    task_function : str
        The sweep's task function as stored in the file's configuration (``"module:function"``).
    target : str
        ``"module:function"``: a function ``ds -> str`` that returns the sweep's text tables.

    Raises
    ------
    ValueError
        If ``target`` is not of the form ``module:function``, or the task function already has
        another reporter.
    """
    _register(_SWEEP_REPORTERS, "task function", task_function, target)


def _register(table: dict, what: str, key: str, target: str) -> None:
    module, sep, func = str(target).partition(":")
    if not (module and sep and func):
        raise ValueError(f"reporter target {target!r}: expected 'module:function'")
    if table.get(key, target) != target:
        raise ValueError(f"{what} {key!r} already has the reporter {table[key]!r}; got {target!r}")
    table[key] = target


def _load_all() -> None:
    global _loaded
    if not _loaded:
        for _, module in SUBCOMMANDS:
            importlib.import_module(module.partition(":")[0])
        _loaded = True


def _resolve(target: str) -> Callable:
    module, _, func = target.partition(":")
    return getattr(importlib.import_module(module), func)


def reporter_kinds() -> list[str]:
    """Every file kind with a registered reporter.

    Returns
    -------
    list of str
        Sorted kinds (the studies' CLI modules are loaded first).
    """
    _load_all()
    return sorted(_REPORTERS)


def reporter(kind: str) -> Callable:
    """The reporter of a file kind.

    Parameters
    ----------
    kind : str
        The file's root attribute ``kind``.

    Returns
    -------
    callable
        ``ds -> str``.

    Raises
    ------
    ValueError
        If no study registered a reporter for ``kind`` (the message lists the kinds with one).
    """
    if kind not in _REPORTERS:
        _load_all()
    if kind not in _REPORTERS:
        raise ValueError(f"kind {kind!r} has no report; kinds with one: {', '.join(sorted(_REPORTERS))}")
    return _resolve(_REPORTERS[kind])


def sweep_reporter(task_function: str) -> Callable | None:
    """The reporter of a sweep by its task function, or None when its study registered none.

    Parameters
    ----------
    task_function : str
        ``"module:function"`` as stored in the sweep file's configuration.

    Returns
    -------
    callable or None
        ``ds -> str``.
    """
    if task_function not in _SWEEP_REPORTERS:
        _load_all()
    target = _SWEEP_REPORTERS.get(task_function)
    return None if target is None else _resolve(target)


def stored_report(ds) -> str:
    """The report a study stored in its file (root attribute ``report``), for studies that write it.

    Parameters
    ----------
    ds : xarray.Dataset
        An opened run file.

    Returns
    -------
    str

    Raises
    ------
    ValueError
        If the file stores no ``report`` attribute.
    """
    report = ds.attrs.get("report")
    if not report:
        raise ValueError("the file stores no 'report' attribute (written by an older rieszflow?)")
    return str(report)
