"""One task of a sweep in its worker: resolve the task function, run it, write its file atomically;
and, in the calling process, which task files are complete (:func:`_pending`)."""
from __future__ import annotations

import importlib
import json
import time
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

from rieszflow.engine.storage import (
    FORMAT,
    RunFileError,
    _attr_value,
    atomic_output,
    check_run_file,
    provenance,
    read_hdf5,
)
from rieszflow.studies.sweep.executor import call_job
from rieszflow.studies.sweep.spec import TASK_KIND, SweepSpec, Task

__all__ = ["execute_task"]


def _resolve(function) -> Callable:
    if callable(function):          # shipped by value (a function of the user's script)
        return function
    module, _, name = function.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"task function {function!r} cannot be imported: {e}") from None


def _write_task_file(ds, path: Path, config: Mapping, wall: float) -> None:
    """Write ``ds`` to a temporary name beside ``path`` and rename it (atomic on POSIX)."""
    ds = ds.copy()
    attrs = {"rieszflow_format": FORMAT, "kind": TASK_KIND, "status": "complete",
             **provenance(), "config": json.dumps(config, sort_keys=True), "wall_seconds": wall}
    ds.attrs = {k: _attr_value(v) for k, v in {**ds.attrs, **attrs}.items()}
    with atomic_output(path) as tmp:
        ds.to_netcdf(tmp, engine="h5netcdf")


def _run_task(function: str, task: Task, config: Mapping, root_seed: int, path: str,
              task_config: Mapping) -> None:
    """The work of :func:`execute_task`: run the task function and write its file; raises on failure."""
    import xarray as xr

    t0 = time.perf_counter()
    fn = _resolve(function)
    function = function if isinstance(function, str) else f"{fn.__module__}:{fn.__qualname__}"
    ds = fn(task, dict(config), np.random.default_rng(task.seed_sequence(root_seed)))
    if not isinstance(ds, xr.Dataset):
        raise TypeError(f"task function {function} returned {type(ds).__name__}, expected an "
                        f"xarray.Dataset")
    bad = [v for v in ds.variables if not {"long_name", "units"} <= set(ds[v].attrs)]
    if bad:
        raise ValueError(f"task function {function}: variables without long_name/units: {bad}")
    reserved = {"method", "trial", *dict(task.params)} & set(ds.dims)
    if reserved:
        raise ValueError(f"task function {function}: dimensions {sorted(reserved)} are the sweep's")
    _write_task_file(ds, Path(path), task_config, time.perf_counter() - t0)


def execute_task(function: str, task: Task, config: Mapping, root_seed: int, path: str,
                 task_config: Mapping) -> dict:
    """Run one task and write its file; never raises for a failure of the task itself.

    Runs on a worker (or in-process). The random generator is
    ``numpy.random.default_rng(task.seed_sequence(root_seed))``.

    Parameters
    ----------
    function : str or callable
        ``"module:function"`` of the task function, or the function itself.
    task : Task
    config : mapping
        The sweep's shared configuration.
    root_seed : int
    path : str
        The task file to create.
    task_config : mapping
        What the file stores as ``config`` (:meth:`SweepSpec.task_config`).

    Returns
    -------
    dict
        ``status`` ("done" or "failed"), ``task`` (mapping), ``seconds``; on failure also
        ``error`` (type and message) and ``traceback``.
    """
    result = call_job(_run_task, (function, task, config, root_seed, path, task_config), task.as_dict())
    result.pop("value", None)
    return result


def _read_task_config(path: Path) -> dict:
    check_run_file(path, TASK_KIND)
    with read_hdf5(path) as f:
        raw = f.attrs.get("config")
    try:
        return json.loads(raw)
    except (TypeError, ValueError) as e:
        raise RunFileError(f"{path}: root attribute 'config' is not valid JSON ({e})") from None


def _pending(spec: SweepSpec, task_dir: Path):
    """Split the tasks into (to run, complete); refuse complete files of another configuration."""
    todo, complete, mismatched = [], [], []
    for task in spec.tasks():
        path = task_dir / task.filename
        if not path.exists():
            todo.append(task)
            continue
        stored = _read_task_config(path)
        if stored != json.loads(json.dumps(spec.task_config(task), sort_keys=True)):
            mismatched.append(path)
        else:
            complete.append(task)
    if mismatched:
        listed = ", ".join(p.name for p in mismatched[:5]) + (" ..." if len(mismatched) > 5 else "")
        raise ValueError(f"{len(mismatched)} task file(s) in {task_dir} were written with other "
                         f"parameters or configuration ({listed}); rerun with the same configuration, "
                         f"or choose another output directory (nothing is overwritten)")
    return todo, complete
