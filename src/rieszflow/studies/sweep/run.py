"""Running a whole sweep (:func:`run_sweep`: the missing tasks, one HDF5 file each) and merging its
task files into one dataset (:func:`open_sweep`)."""
from __future__ import annotations

import contextlib
import datetime as _dt
import json
import time
from pathlib import Path
from typing import Callable

import numpy as np

from rieszflow.engine.storage import FORMAT, RunLock, _attr_value, atomic_output, provenance
from rieszflow.engine.storage.provenance import code_identity
from rieszflow.studies.sweep.executor import Executor, Job, check_executor, run_jobs
from rieszflow.studies.sweep.spec import SWEEP_KIND, SweepSpec, SweepSummary
from rieszflow.studies.sweep.tasks import _pending, _read_task_config, _run_task

__all__ = ["run_sweep", "open_sweep", "MixedCodeError"]


class MixedCodeError(ValueError):
    """The task files of a sweep were written by different code (commits or uncommitted changes).

    Evidence for one verdict must come from one version of the code: :func:`open_sweep` refuses
    to merge such files unless ``allow_mixed_code=True`` (CLI ``--allow-mixed-code``). The
    message names every code version and how many tasks of each method it wrote.
    """


def run_sweep(spec: SweepSpec, outdir, *, workers: int | None = None, scheduler: str | None = None,
              executor: Executor | None = None, progress: bool = True, log: Callable | None = print,
              report: bool = True) -> SweepSummary:
    """Run the tasks of ``spec`` that have no complete file in ``outdir``.

    Parameters
    ----------
    spec : SweepSpec
    outdir : str or os.PathLike
        The sweep directory (created if missing; its parent must exist). Task files go to
        ``outdir/tasks/``; ``sweep.json`` holds the spec; ``failures.json`` the failures of the
        last run (removed when none failed).
    workers : int, optional
        LocalCluster worker processes (one thread each); default: the machine's cores; 0 runs
        the tasks in this process, one after the other.
    scheduler : str, optional
        Address of an existing Dask scheduler (e.g. ``tcp://host:8786``); its workers must
        import rieszflow and see ``outdir``. Excludes ``workers``. Every path a worker gets is
        absolute (a relative ``outdir`` is resolved here, against this process's working
        directory), and before any task is submitted every worker must create and delete a file
        in ``outdir/tasks`` (:class:`~rieszflow.studies.sweep.WorkersCannotWrite` otherwise).
    executor : Executor, optional
        Run on this executor (one LocalCluster for several sweeps) instead; excludes ``workers``
        and ``scheduler``.
    progress : bool, default True
        One tqdm bar over tasks, with the running done / failed / skipped counts.
    log : callable or None, default print
        Receives the one-line messages (tasks skipped, summary).
    report : bool, default True
        Log the summary (:meth:`SweepSummary.format`: counts and every failure) at the end;
        False leaves it to the caller (the CLI prints it once, failures on stderr).

    Returns
    -------
    SweepSummary

    Raises
    ------
    ValueError
        If both ``workers`` and ``scheduler`` are given, ``workers < 0``, or a complete task file
        holds another configuration; :class:`~rieszflow.studies.sweep.WorkersCannotWrite` if a
        worker cannot write ``outdir/tasks`` (no task was submitted).
    engine.storage.RunFileError
        If another process runs a sweep in ``outdir`` (lock ``outdir/<name>.lock``), or a task
        file is corrupt or foreign.
    FileNotFoundError
        If the parent of ``outdir`` does not exist.
    """
    if not isinstance(spec, SweepSpec):
        raise TypeError(f"spec must be a SweepSpec, got {type(spec).__name__}")
    check_executor(workers, scheduler)
    if executor is not None and (workers is not None or scheduler is not None):
        raise ValueError("give either executor or workers/scheduler, not both")
    log = log or (lambda *a: None)
    t0 = time.perf_counter()
    outdir = Path(outdir)                     # as given, for the messages
    if not outdir.parent.is_dir():
        raise FileNotFoundError(f"the directory {outdir.parent} of {outdir} does not exist")
    # every path below is absolute: a worker of an external scheduler, started in another
    # directory, would resolve a relative one against its own working directory
    root = outdir.absolute()
    task_dir = root / "tasks"
    task_dir.mkdir(parents=True, exist_ok=True)
    lock = RunLock(root / spec.name)
    lock.acquire()
    try:
        for stale in task_dir.glob(".*.tmp"):        # left by a killed sweep: we hold the lock
            stale.unlink()
        spec_file = root / "sweep.json"
        todo, complete = _pending(spec, task_dir)     # refuses mismatched files before any write
        spec_file.write_text(json.dumps(spec.to_dict(), indent=1, sort_keys=True))
        total = len(todo) + len(complete)
        if complete:
            log(f"sweep {spec.name}: {len(complete)} of {total} tasks complete before, skipped; "
                f"running {len(todo)}")
        counts = {"done": 0, "failed": 0, "skipped": len(complete)}
        failures = []

        def record(job, result):                     # kept here too: an interrupt keeps them
            counts[result["status"]] += 1
            if result["status"] == "failed":
                failures.append({k: result[k] for k in ("task", "error", "traceback")})

        # trial-major submission: every method (and grid cell) of trial 0, then of trial 1, ...,
        # so a paired comparison across methods gains a complete pair every few tasks instead
        # of only once the first method has run all its trials (the files do not depend on it)
        jobs = [Job(t.as_dict(), _run_task, (spec.task_function, t, spec.config, spec.root_seed,
                                             str(task_dir / t.filename), spec.task_config(t)))
                for t in sorted(todo, key=lambda t: t.trial)]
        try:
            run_jobs(jobs, workers=workers, scheduler=scheduler, executor=executor, progress=progress,
                     desc=spec.name, skipped=len(complete), on_result=record, writable=task_dir)
        finally:
            fail_file = root / "failures.json"
            if failures:
                fail_file.write_text(json.dumps(failures, indent=1, sort_keys=True))
            elif fail_file.exists() and counts["done"] + counts["skipped"] == total:
                fail_file.unlink()
    finally:
        lock.release()
    summary = SweepSummary(total=total, done=counts["done"], skipped=counts["skipped"],
                           failed=counts["failed"], failures=failures, outdir=outdir,
                           seconds=time.perf_counter() - t0)
    if report:
        log(summary.format())
    return summary


def _load_spec(outdir: Path) -> SweepSpec:
    path = outdir / "sweep.json"
    if not path.is_file():
        raise FileNotFoundError(f"{outdir} holds no sweep.json: not a sweep directory written by "
                                f"rieszflow")
    try:
        d = json.loads(path.read_text())
        return SweepSpec(name=d["name"], function=d["function"], methods=d["methods"],
                         grid=[(k, v) for k, v in d["grid"]], trials=d["trials"], config=d["config"],
                         root_seed=d["root_seed"], units=d.get("units", {}))
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{path} is not a valid sweep description ({e})") from None


def open_sweep(outdir, *, write: bool = True, spec: SweepSpec | None = None,
               allow_mixed_code: bool = False):
    """Merge the task files of a sweep into one dataset; NaN where a task is missing.

    Parameters
    ----------
    outdir : str or os.PathLike
        A directory written by :func:`run_sweep`.
    write : bool, default True
        Also write the merged dataset to ``outdir/<name>.h5`` (temporary name, then rename).
    spec : SweepSpec, optional
        Merge the tasks of this specification instead of the one in ``outdir/sweep.json`` (which
        the last run in the directory wrote): two sweeps that share task files (the same stored
        task configuration, other methods or trials) are each read as themselves. Every task file
        must still hold the configuration ``spec`` gives it.
    allow_mixed_code : bool, default False
        Merge task files written by different code (another commit, or a dirty tree with other
        uncommitted changes; :func:`rieszflow.engine.storage.provenance.code_identity`). By
        default that raises :class:`MixedCodeError`: the tasks of one result must have run one
        version of the code.

    Returns
    -------
    xarray.Dataset
        Dimensions ``method``, the grid parameters (in grid order), ``trial``, then the tasks'
        own; every coordinate of the full grid is present, and a variable is NaN (float) where its
        task has no complete file (not run yet, or failed). Root attributes: ``kind = "sweep"``,
        ``status`` ("complete", or "partial" while tasks are missing),
        the spec as ``config`` (JSON), ``n_tasks``, ``n_complete``, ``wall_seconds`` (from the
        first task's start to the last task's end, read from the task files; 1 s resolution) and
        ``task_seconds_total`` (the tasks' own wall times summed), ``task_code`` (JSON: code
        version -> number of task files) and ``task_code_by_method`` (JSON: method -> code
        version -> count).

    Raises
    ------
    FileNotFoundError
        If ``outdir`` has no ``sweep.json`` (no ``tasks/`` folder, with ``spec``).
    ValueError
        If no task is complete yet, a task file holds another configuration than ``sweep.json``
        (or ``spec``), the task files were written by different code (:class:`MixedCodeError`,
        unless ``allow_mixed_code``),
        or a task variable is not numeric or changes shape between tasks.
    """
    import xarray as xr

    outdir = Path(outdir)
    if spec is None:
        spec = _load_spec(outdir)
    elif not isinstance(spec, SweepSpec):
        raise TypeError(f"spec must be a SweepSpec, got {type(spec).__name__}")
    elif not (outdir / "tasks").is_dir():
        raise FileNotFoundError(f"{outdir} holds no tasks/ folder: not a sweep directory written by rieszflow")
    names = [k for k, _ in spec.grid]
    axes = {"method": list(spec.methods), **{k: list(v) for k, v in spec.grid},
            "trial": list(range(spec.trials))}
    position = {ax: {v: i for i, v in enumerate(vals)} for ax, vals in axes.items()}
    shape = tuple(len(v) for v in axes.values())
    data, dims, attrs, coords, spans, n_complete, code = {}, {}, {}, {}, [], 0, {}
    for task in spec.tasks():
        path = outdir / "tasks" / task.filename
        if not path.exists():
            continue
        expected = json.loads(json.dumps(spec.task_config(task), sort_keys=True))
        if _read_task_config(path) != expected:
            raise ValueError(f"{path} was written with another configuration than {outdir / 'sweep.json'}; "
                             f"rerun the sweep with its configuration or remove the file")
        with xr.open_dataset(path, engine="h5netcdf") as ds:
            ds = ds.load()
        ident = code_identity(ds.attrs)
        code.setdefault(task.method, {})
        code[task.method][ident] = code[task.method].get(ident, 0) + 1
        with contextlib.suppress(KeyError, TypeError, ValueError):
            end = _dt.datetime.fromisoformat(str(ds.attrs["created"])).timestamp()
            spans.append((end - float(ds.attrs["wall_seconds"]), end, float(ds.attrs["wall_seconds"])))
        index = (position["method"][task.method], *[position[k][v] for k, v in task.params],
                 position["trial"][task.trial])
        for name, var in ds.data_vars.items():
            if var.dtype.kind not in "biuf":
                raise ValueError(f"{path}: variable {name!r} has dtype {var.dtype}; a sweep merges "
                                 f"numbers only (NaN marks a missing task)")
            if name not in data:                       # one full-grid array per variable, NaN-filled
                dims[name], attrs[name] = var.dims, dict(var.attrs)
                data[name] = np.full(shape + var.shape, np.nan)
                for d in var.dims:
                    if d in ds.coords:
                        coords.setdefault(d, ds[d].variable)
            if var.dims != dims[name] or data[name].shape[len(shape):] != var.shape:
                raise ValueError(f"{path}: variable {name!r} has dims {var.dims} {var.shape}, other tasks "
                                 f"{dims[name]} {data[name].shape[len(shape):]}")
            data[name][index] = var.values
        n_complete += 1
    if not n_complete:
        raise ValueError(f"{outdir}: no task of sweep {spec.name!r} is complete yet")
    totals = {}
    for per in code.values():
        for ident, n in per.items():
            totals[ident] = totals.get(ident, 0) + n
    if len(totals) > 1 and not allow_mixed_code:
        per_method = "; ".join(f"{m}: " + ", ".join(f"{i} ({n})" for i, n in sorted(per.items()))
                               for m, per in code.items())
        raise MixedCodeError(f"{outdir}: the {n_complete} complete task files of sweep {spec.name!r} were "
                             f"written by {len(totals)} versions of the code ({per_method}); evidence for "
                             f"one result must come from one version: rerun the tasks of the other "
                             f"versions from one clean commit, or pass allow_mixed_code=True (CLI "
                             f"--allow-mixed-code) to merge them anyway")
    grid_dims = ("method", *names, "trial")
    merged = xr.Dataset({name: (grid_dims + dims[name], arr, attrs[name]) for name, arr in data.items()},
                        coords={**{ax: vals for ax, vals in axes.items()}, **coords})
    merged["method"].attrs.update(long_name="method", units="1")
    merged["trial"].attrs.update(long_name="trial (independent repetition)", units="1")
    for k in names:
        merged[k].attrs.update(long_name=f"sweep parameter {k}", units=spec.units.get(k, "1"))
    n_tasks = len(spec.tasks())
    merged.attrs = {"rieszflow_format": FORMAT, "kind": SWEEP_KIND,
                    "status": "complete" if n_complete == n_tasks else "partial",
                    **provenance(), "config": json.dumps(spec.to_dict(), sort_keys=True),
                    "n_tasks": n_tasks, "n_complete": n_complete,
                    "task_code": json.dumps(totals, sort_keys=True),
                    "task_code_by_method": json.dumps(code, sort_keys=True)}
    if spans:       # from the task files: first start to last end (a resumed sweep includes its gap)
        merged.attrs["wall_seconds"] = max(e for _, e, _ in spans) - min(b for b, _, _ in spans)
        merged.attrs["task_seconds_total"] = sum(w for _, _, w in spans)
    merged.attrs = {k: _attr_value(v) for k, v in merged.attrs.items()}
    if write:
        out = outdir / f"{spec.name}.h5"
        with atomic_output(out) as tmp:
            merged.to_netcdf(tmp, engine="h5netcdf")
    return merged
