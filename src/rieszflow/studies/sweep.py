"""Sweeps: many (method, parameters, trial) tasks on dask.distributed, one HDF5 file per task.

The one way rieszflow runs many independent tasks (docs/sweeps.md):

- A :class:`SweepSpec` names a task function (``"module:function"``, importable on every
  worker), the methods, a grid of parameters and the number of trials; its tasks are the
  product ``methods x grid x trials``. A task's random stream is derived from its *names*
  (:meth:`Task.seed_sequence`: SHA-256 of the canonical JSON of sweep, method, parameters
  and trial, with the root seed), never from its position in a list, so adding a noise level
  or a method changes no other task's numbers.
- :func:`run_sweep` runs the missing tasks on a :class:`distributed.LocalCluster` sized to
  the machine (one thread per worker; BLAS and Numba pinned to one thread in the workers),
  on an existing Dask scheduler (``scheduler=ADDRESS``; the workers must see the output
  directory), or in-process (``workers=0``, for debugging), with one progress bar over tasks
  counting done / failed / skipped.
- Each task writes one HDF5 file under ``<outdir>/tasks/``, to a temporary name renamed when
  complete: a killed sweep leaves no half file that looks complete, and rerunning the same
  command skips every complete task (and says how many). A complete file whose parameters
  differ from the task's is an error, never overwritten. A failing task is recorded (task,
  exception, traceback) in ``<outdir>/failures.json`` and in the summary; the others go on.
- :func:`open_sweep` merges the task files into one :class:`xarray.Dataset` with dimensions
  ``method``, one per grid parameter, ``trial`` (then the task's own), NaN where a task is
  missing or failed (never zero), and writes it beside them as ``<outdir>/<name>.h5``.

A task function has the signature ``fn(task, config, rng) -> xarray.Dataset``: ``task`` is the
:class:`Task`, ``config`` the sweep's shared JSON-able configuration, ``rng`` a
``numpy.random.Generator`` seeded by :meth:`Task.seed_sequence`. Every variable it returns
needs ``long_name`` and ``units`` attributes.

The execution layer under :func:`run_sweep` is :func:`run_jobs`: it runs a list of independent
:class:`Job` (a picklable function and its arguments, named by a JSON-able ``task`` mapping) on the
chosen executor (in-process, a LocalCluster, or an existing scheduler) with the one progress bar
and the failure records, and hands every result to a callback in the calling process. The studies
that write one HDF5 file (``rieszflow mean-field``, ``rieszflow ldp``) run their particle runs and
chains through it and store each result as it arrives (docs/sweeps.md).
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import hashlib
import importlib
import itertools
import json
import math
import os
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

__all__ = ["Task", "SweepSpec", "SweepSummary", "run_sweep", "open_sweep", "execute_task",
           "Job", "JobsSummary", "TasksFailed", "Executor", "run_jobs", "call_job", "check_executor",
           "describe_executor", "add_sweep_arguments", "THREAD_ENV", "TASK_KIND", "SWEEP_KIND"]

#: ``kind`` root attribute of a task file and of the merged file.
TASK_KIND, SWEEP_KIND = "sweep_task", "sweep"

#: Environment of every worker process: one BLAS/OpenMP/Numba thread per task (the parallelism
#: is across tasks), so that workers do not oversubscribe the cores.
THREAD_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
              "NUMBA_NUM_THREADS": "1"}


def _canonical(value):
    """A JSON-able, type-stable form of a parameter value (bool, int, float, str)."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        v = float(value)
        if not math.isfinite(v):
            raise ValueError(f"sweep parameter values must be finite; got {value!r}")
        return v
    if isinstance(value, str):
        return value
    raise TypeError(f"sweep parameter values must be bool, int, float or str; got "
                    f"{type(value).__name__} {value!r}")


def _format_value(v) -> str:
    if isinstance(v, float):
        return format(v, ".6g")
    return str(v)


@dataclasses.dataclass(frozen=True)
class Task:
    """One (method, parameters, trial) job of a sweep.

    Parameters
    ----------
    sweep : str
        Name of the sweep the task belongs to.
    method : str
        Method name.
    params : tuple of (str, value) pairs
        Grid parameters in the sweep's grid order; values bool, int, float or str.
    trial : int
        Trial index, ``>= 0``.
    """

    sweep: str
    method: str
    params: tuple
    trial: int

    def as_dict(self) -> dict:
        """The task as a JSON-able mapping.

        Returns
        -------
        dict
            ``sweep``, ``method``, ``params`` (dict) and ``trial``.
        """
        return {"sweep": self.sweep, "method": self.method, "params": dict(self.params),
                "trial": int(self.trial)}

    @property
    def key(self) -> str:
        """Canonical JSON of the task (sorted keys): its identity, independent of list order."""
        d = self.as_dict()
        d["params"] = {k: _canonical(v) for k, v in sorted(d["params"].items())}
        return json.dumps(d, sort_keys=True, separators=(",", ":"))

    @property
    def digest(self) -> str:
        """SHA-256 of :attr:`key`, hexadecimal."""
        return hashlib.sha256(self.key.encode()).hexdigest()

    def seed_sequence(self, root_seed: int) -> np.random.SeedSequence:
        """The task's random stream, keyed on its names and the root seed.

        Parameters
        ----------
        root_seed : int
            The sweep's root seed, ``>= 0``.

        Returns
        -------
        numpy.random.SeedSequence
            Entropy ``[root_seed, *SHA-256(key) as eight uint32 words]``: the same for the same
            task in any sweep that contains it, whatever else the sweep holds.
        """
        words = np.frombuffer(bytes.fromhex(self.digest), dtype=">u4").astype(np.uint64)
        return np.random.SeedSequence([int(root_seed), *[int(w) for w in words]])

    @property
    def filename(self) -> str:
        """File name of the task's HDF5 file: readable names plus a digest (unique)."""
        parts = [self.method] + [f"{k}={_format_value(v)}" for k, v in self.params] + [f"trial{self.trial}"]
        safe = "__".join(parts).replace("/", "_").replace(" ", "_")
        return f"{safe}__{self.digest[:10]}.h5"


@dataclasses.dataclass(frozen=True)
class SweepSpec:
    """A sweep: a task function over ``methods x grid x trials`` with a shared configuration.

    Parameters
    ----------
    name : str
        Sweep name (file names, the merged file ``<name>.h5``); letters, digits, ``_``, ``-``.
    function : str
        ``"package.module:function"`` of the task function, importable on every worker.
    methods : tuple of str
        Method names (non-empty, distinct).
    grid : tuple of (str, tuple) pairs, or a mapping
        Parameter name to its values (each non-empty, distinct); the order is the order of the
        merged dimensions.
    trials : int
        Trials per (method, grid point), ``>= 1``.
    config : mapping
        Shared JSON-able configuration passed to every task (stored in every task file: a task
        file written under another configuration is an error, not a skip).
    root_seed : int, default 0
        Root of every task's :meth:`Task.seed_sequence`.
    units : mapping of str to str, optional
        Units of the grid parameters (default ``"1"``).

    Raises
    ------
    ValueError
        On an empty or repeated method or grid value, a bad name, ``trials < 1``, a negative
        seed or a configuration that is not JSON-able.
    """

    name: str
    function: str
    methods: tuple
    grid: Any
    trials: int
    config: Any = dataclasses.field(default_factory=dict)
    root_seed: int = 0
    units: Any = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        import re

        if not isinstance(self.name, str) or not re.fullmatch(r"[A-Za-z0-9_-]+", self.name):
            raise ValueError(f"sweep name={self.name!r}: use letters, digits, '_' and '-'")
        if not isinstance(self.function, str) or ":" not in self.function:
            raise ValueError(f"function={self.function!r}: expected 'package.module:function'")
        methods = tuple(self.methods)
        if not methods or len(set(methods)) != len(methods) or not all(isinstance(m, str) and m for m in methods):
            raise ValueError(f"methods={methods!r}: need distinct non-empty names")
        grid = tuple((str(k), tuple(_canonical(v) for v in vals)) for k, vals in
                     (self.grid.items() if isinstance(self.grid, Mapping) else self.grid))
        for k, vals in grid:
            if not vals or len(set(vals)) != len(vals):
                raise ValueError(f"grid parameter {k!r}: need distinct values, got {vals!r}")
            if k in ("method", "trial"):
                raise ValueError(f"grid parameter name {k!r} is reserved")
        if isinstance(self.trials, bool) or not isinstance(self.trials, (int, np.integer)) or self.trials < 1:
            raise ValueError(f"trials={self.trials!r}: need an integer >= 1")
        if isinstance(self.root_seed, bool) or not isinstance(self.root_seed, (int, np.integer)) \
                or self.root_seed < 0:
            raise ValueError(f"root_seed={self.root_seed!r}: need an integer >= 0")
        try:
            config = json.loads(json.dumps(dict(self.config), sort_keys=True))
        except (TypeError, ValueError) as e:
            raise ValueError(f"config must be a JSON-able mapping ({e})") from None
        object.__setattr__(self, "methods", methods)
        object.__setattr__(self, "grid", grid)
        object.__setattr__(self, "trials", int(self.trials))
        object.__setattr__(self, "root_seed", int(self.root_seed))
        object.__setattr__(self, "config", config)
        object.__setattr__(self, "units", dict(self.units))

    def tasks(self) -> list[Task]:
        """Every task of the sweep, ``methods x grid x trials`` in that order.

        Returns
        -------
        list of Task
        """
        names = [k for k, _ in self.grid]
        out = []
        for method in self.methods:
            for values in itertools.product(*[v for _, v in self.grid]):
                for trial in range(self.trials):
                    out.append(Task(self.name, method, tuple(zip(names, values)), trial))
        return out

    def task_config(self, task: Task) -> dict:
        """What a task file stores as its configuration (compared when a sweep is rerun).

        Parameters
        ----------
        task : Task

        Returns
        -------
        dict
        """
        return {"task": task.as_dict(), "function": self.function, "config": self.config,
                "root_seed": self.root_seed}

    def to_dict(self) -> dict:
        """The spec as a JSON-able mapping (stored beside the task files as ``sweep.json``).

        Returns
        -------
        dict
        """
        return {"name": self.name, "function": self.function, "methods": list(self.methods),
                "grid": [[k, list(v)] for k, v in self.grid], "trials": self.trials,
                "config": self.config, "root_seed": self.root_seed, "units": self.units}


@dataclasses.dataclass
class SweepSummary:
    """What :func:`run_sweep` did.

    Parameters
    ----------
    total, done, skipped, failed : int
        Tasks in the sweep; run to completion now; complete before (skipped); failed now.
    failures : list of dict
        One entry per failed task: ``task``, ``error``, ``traceback``.
    outdir : pathlib.Path
        The sweep directory.
    seconds : float
        Wall time of the call.
    """

    total: int
    done: int
    skipped: int
    failed: int
    failures: list
    outdir: Path
    seconds: float

    def format(self) -> str:
        """One paragraph: counts, wall time and every failure (task and exception).

        Returns
        -------
        str
        """
        lines = [f"sweep {self.outdir}: {self.total} tasks: {self.done} done, {self.skipped} skipped "
                 f"(complete before), {self.failed} failed, in {self.seconds:.1f} s"]
        for f in self.failures:
            lines.append(f"  FAILED {json.dumps(f['task'], sort_keys=True)}: {f['error']}")
        if self.failures:
            lines.append(f"  tracebacks in {self.outdir / 'failures.json'}")
        return "\n".join(lines)


def _resolve(function: str) -> Callable:
    module, _, name = function.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"task function {function!r} cannot be imported: {e}") from None


def _write_task_file(ds, path: Path, config: Mapping, wall: float) -> None:
    """Write ``ds`` to a temporary name beside ``path`` and rename it (atomic on POSIX)."""
    from rieszflow.engine.storage import FORMAT, _attr_value, provenance

    ds = ds.copy()
    attrs = {"rieszflow_format": FORMAT, "kind": TASK_KIND, "status": "complete",
             **provenance(), "config": json.dumps(config, sort_keys=True), "wall_seconds": wall}
    ds.attrs = {k: _attr_value(v) for k, v in {**ds.attrs, **attrs}.items()}
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        ds.to_netcdf(tmp, engine="h5netcdf")
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def _run_task(function: str, task: Task, config: Mapping, root_seed: int, path: str,
              task_config: Mapping) -> None:
    """The work of :func:`execute_task`: run the task function and write its file; raises on failure."""
    import xarray as xr

    t0 = time.perf_counter()
    fn = _resolve(function)
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
    function : str
        ``"module:function"`` of the task function.
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


# ------------------------------------------------------------------------------ execution layer
@dataclasses.dataclass(frozen=True)
class Job:
    """One independent call ``function(*args)`` of a batch run by :func:`run_jobs`.

    Parameters
    ----------
    task : mapping
        The job's identity, JSON-able (e.g. ``{"problem": "interval", "N": 100, "run": 3}``): what
        the progress, the failure records and the error messages name.
    function : callable
        A module-level function (a LocalCluster or a remote scheduler pickles it by reference:
        every worker must import its module). Its randomness must come from its arguments (a seed
        derived from the task's names), never from a generator shared between jobs, so that the
        results do not depend on where or in which order the jobs run.
    args : tuple
        Positional arguments (picklable).

    Raises
    ------
    TypeError
        If ``function`` is not callable.
    ValueError
        If ``task`` is not a JSON-able mapping.
    """

    task: Any
    function: Callable
    args: tuple = ()

    def __post_init__(self):
        if not callable(self.function):
            raise TypeError(f"Job.function must be callable, got {type(self.function).__name__}")
        try:
            task = json.loads(json.dumps(dict(self.task), sort_keys=True))
        except (TypeError, ValueError) as e:
            raise ValueError(f"Job.task must be a JSON-able mapping ({e})") from None
        object.__setattr__(self, "task", task)
        object.__setattr__(self, "args", tuple(self.args))


def call_job(function: Callable, args, task: Mapping) -> dict:
    """Call ``function(*args)``; never raises for an ``Exception`` of the call.

    Runs on a worker (or in-process). ``KeyboardInterrupt`` and ``SystemExit`` are not caught:
    in-process, Ctrl-C stops the batch.

    Parameters
    ----------
    function : callable
    args : sequence
    task : mapping
        The job's identity (copied into the result).

    Returns
    -------
    dict
        ``status`` ("done" or "failed"), ``task``, ``seconds`` (wall time of the call); when done
        ``value`` (what the function returned); when failed ``error`` (type and message) and
        ``traceback``.
    """
    t0 = time.perf_counter()
    try:
        value = function(*args)
    except Exception as e:  # noqa: BLE001 - a failed job is recorded, the others go on
        return {"status": "failed", "task": dict(task), "seconds": time.perf_counter() - t0,
                "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
    return {"status": "done", "task": dict(task), "seconds": time.perf_counter() - t0, "value": value}


@dataclasses.dataclass
class JobsSummary:
    """What :func:`run_jobs` did.

    Parameters
    ----------
    total, done, skipped, failed : int
        Jobs of the batch plus those complete before (``skipped``); run to completion now;
        complete before; failed now.
    failures : list of dict
        One entry per failed job: ``task``, ``error``, ``traceback``.
    seconds : float
        Wall time of the call.
    """

    total: int
    done: int
    skipped: int
    failed: int
    failures: list
    seconds: float

    def format(self, name: str = "tasks") -> str:
        """One paragraph: counts, wall time and every failure (task and exception).

        Parameters
        ----------
        name : str, default "tasks"
            What the batch is (first words of the line).

        Returns
        -------
        str
        """
        lines = [f"{name}: {self.total} tasks: {self.done} done, {self.skipped} skipped (complete "
                 f"before), {self.failed} failed, in {self.seconds:.1f} s"]
        for f in self.failures:
            lines.append(f"  FAILED {json.dumps(f['task'], sort_keys=True)}: {f['error']}")
        return "\n".join(lines)


class TasksFailed(RuntimeError):
    """Some tasks of a study failed; the others finished (and were stored).

    Parameters
    ----------
    what : str
        What the tasks are (``"particle runs"``, ``"(regime, N) cells"``).
    failures : list of dict
        The records of :func:`run_jobs` (``task``, ``error``, ``traceback``).
    total : int
        Tasks of the batch.
    hint : str, optional
        Appended to the message (where the results are, how to finish).

    Attributes
    ----------
    failures : list of dict
    """

    def __init__(self, what: str, failures, total: int, hint: str = ""):
        self.failures = list(failures)
        listed = "; ".join(f"{json.dumps(f['task'], sort_keys=True)}: {f['error']}" for f in self.failures[:5])
        more = f"; and {len(self.failures) - 5} more" if len(self.failures) > 5 else ""
        super().__init__(f"{len(self.failures)} of {total} {what} failed ({listed}{more}){hint}")


def check_executor(workers: int | None, scheduler: str | None) -> None:
    """Check a ``workers`` / ``scheduler`` pair (see :func:`run_jobs`).

    Parameters
    ----------
    workers : int or None
    scheduler : str or None

    Raises
    ------
    ValueError
        If both are given, or ``workers`` is not an integer ``>= 0``.
    """
    if workers is not None and scheduler is not None:
        raise ValueError("give either workers (a LocalCluster) or scheduler (an existing cluster), "
                         "not both")
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 0):
        raise ValueError(f"workers={workers!r}: need an integer >= 0 (0 runs in-process)")


def describe_executor(workers: int | None, scheduler: str | None) -> str:
    """Where :func:`run_jobs` runs the jobs, in words (for the log lines).

    Parameters
    ----------
    workers : int or None
    scheduler : str or None

    Returns
    -------
    str
    """
    if scheduler is not None:
        return f"scheduler {scheduler}"
    if workers == 0:
        return "in-process"
    return f"LocalCluster of {workers if workers is not None else os.cpu_count() or 1} workers"


def add_sweep_arguments(parser, *, default_help: str = "default: the machine's cores",
                        scheduler_note: str = "its workers must see --out") -> None:
    """Add ``--workers`` and ``--scheduler``, the options of every study that runs its tasks here.

    Parameters
    ----------
    parser : argparse.ArgumentParser
        The subcommand's parser.
    default_help : str, default "default: the machine's cores"
        What ``--workers`` defaults to, as the help states it.
    scheduler_note : str, default "its workers must see --out"
        What the scheduler's workers need (a sweep's workers write the task files; a study that
        writes one file gets the results back and writes it itself).
    """
    from rieszflow.studies.base import non_negative_int

    where = parser.add_mutually_exclusive_group()
    where.add_argument("--workers", type=non_negative_int, default=None, metavar="N",
                       help=f"LocalCluster worker processes, one thread each ({default_help}); 0 runs "
                            f"the tasks in this process, one after the other")
    where.add_argument("--scheduler", default=None, metavar="ADDRESS",
                       help=f"submit to an existing Dask scheduler (e.g. tcp://host:8786) instead; "
                            f"{scheduler_note} (docs/sweeps.md)")


class Executor:
    """Where :func:`run_jobs` runs its jobs, kept for several batches (one LocalCluster, not one each).

    In-process for ``workers=0``; otherwise a :class:`distributed.Client`, started at the first
    batch that has jobs (a study whose tasks are all stored starts no cluster) and closed by
    :meth:`close` (or the ``with`` block).

    Parameters
    ----------
    workers : int, optional
        As in :func:`run_jobs`.
    scheduler : str, optional
        As in :func:`run_jobs`.

    Raises
    ------
    ValueError
        As :func:`check_executor`.
    """

    def __init__(self, workers: int | None = None, scheduler: str | None = None):
        check_executor(workers, scheduler)
        self.workers, self.scheduler = workers, scheduler
        self._stack = contextlib.ExitStack()
        self._client = None

    @property
    def in_process(self) -> bool:
        """True for ``workers=0``: the jobs run here, one after the other."""
        return self.workers == 0 and self.scheduler is None

    def client(self):
        """The Dask client (started on first use).

        Returns
        -------
        distributed.Client
        """
        if self._client is None:
            self._client = self._stack.enter_context(_client(self.workers, self.scheduler))
        return self._client

    def describe(self) -> str:
        """Where the jobs run, in words (:func:`describe_executor`).

        Returns
        -------
        str
        """
        return describe_executor(self.workers, self.scheduler)

    def close(self) -> None:
        """Shut the client (and a LocalCluster it started) down; idempotent."""
        self._client = None
        self._stack.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def run_jobs(jobs, *, workers: int | None = None, scheduler: str | None = None,
             executor: Executor | None = None, progress: bool = True, desc: str = "tasks",
             skipped: int = 0, on_result: Callable | None = None) -> JobsSummary:
    """Run independent jobs in-process, on a LocalCluster or on an existing Dask scheduler.

    The one execution layer of rieszflow: :func:`run_sweep` and the studies that write one file
    (mean-field, ldp) run their tasks through it. A job that raises is recorded (task, exception,
    traceback) and the others go on; nothing is retried.

    Parameters
    ----------
    jobs : iterable of Job
    workers : int, optional
        LocalCluster worker processes (one thread each; BLAS, OpenMP and Numba pinned to one thread,
        :data:`THREAD_ENV`); default: the machine's cores; 0 runs the jobs in this process, one
        after the other, in the given order.
    scheduler : str, optional
        Address of an existing Dask scheduler; its workers must import the jobs' functions.
        Excludes ``workers``.
    executor : Executor, optional
        Run on this executor (shared by several batches) instead; excludes ``workers`` and
        ``scheduler``.
    progress : bool, default True
        One tqdm bar over tasks, with the running done / failed / skipped counts.
    desc : str, default "tasks"
        The bar's label.
    skipped : int, default 0
        Tasks complete before (not in ``jobs``): counted by the bar and the summary.
    on_result : callable, optional
        ``on_result(job, result)``, called in this process as each job ends (in completion order;
        ``result`` as :func:`call_job` returns it): store the result there. An exception it raises
        stops the batch (the LocalCluster is shut down) and propagates.

    Returns
    -------
    JobsSummary

    Raises
    ------
    ValueError
        If both ``workers`` and ``scheduler`` are given, ``workers < 0``, or ``executor`` is given
        with either.
    TypeError
        If an item of ``jobs`` is not a :class:`Job`.
    """
    if executor is None:
        with Executor(workers, scheduler) as ex:
            return run_jobs(jobs, executor=ex, progress=progress, desc=desc, skipped=skipped,
                            on_result=on_result)
    if workers is not None or scheduler is not None:
        raise ValueError("give either executor or workers/scheduler, not both")
    from tqdm.auto import tqdm

    jobs = list(jobs)
    for job in jobs:
        if not isinstance(job, Job):
            raise TypeError(f"run_jobs needs Job items, got {type(job).__name__}")
    t0 = time.perf_counter()
    counts = {"done": 0, "failed": 0, "skipped": int(skipped)}
    failures = []
    bar = tqdm(total=len(jobs) + int(skipped), initial=int(skipped), desc=desc, unit="task",
               disable=not progress, dynamic_ncols=True)

    def record(job, result):
        counts[result["status"]] += 1
        if result["status"] == "failed":
            failures.append({k: result[k] for k in ("task", "error", "traceback")})
        bar.update(1)
        bar.set_postfix(counts, refresh=False)
        if on_result is not None:
            on_result(job, result)

    try:
        if jobs and executor.in_process:
            from threadpoolctl import threadpool_limits

            # one BLAS thread, as in every worker (THREAD_ENV): a long Langevin run amplifies the
            # rounding differences of multi-threaded BLAS reductions, and the synthetic
            # benchmark's Langevin rows differed between 2-thread and 1-thread BLAS
            with threadpool_limits(limits=1, user_api="blas"):
                for job in jobs:
                    record(job, call_job(job.function, job.args, job.task))
        elif jobs:
            from distributed import as_completed

            client = executor.client()
            # random keys (pure=False): two batches on one scheduler never share a task
            futures = {client.submit(call_job, j.function, j.args, j.task, pure=False): j for j in jobs}
            try:
                for fut in as_completed(futures):
                    job = futures[fut]
                    try:
                        result = fut.result()
                    except Exception as e:  # noqa: BLE001 - a lost worker: the task failed
                        result = {"status": "failed", "task": job.task, "seconds": math.nan,
                                  "error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
                    record(job, result)
            finally:
                client.cancel([f for f in futures if not f.done()])
    finally:
        bar.close()
    return JobsSummary(total=len(jobs) + int(skipped), done=counts["done"], skipped=counts["skipped"],
                       failed=counts["failed"], failures=failures, seconds=time.perf_counter() - t0)


def _read_task_config(path: Path) -> dict:
    import h5py

    from rieszflow.engine.storage import RunFileError, check_run_file

    check_run_file(path, TASK_KIND)
    with h5py.File(path, "r", locking=False) as f:
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


@contextlib.contextmanager
def _client(workers: int | None, scheduler: str | None):
    """A dask.distributed Client: on ``scheduler``, else on a LocalCluster of ``workers``."""
    import logging

    from distributed import Client, LocalCluster

    if scheduler is not None:
        client = Client(scheduler, timeout="30s")
        try:
            yield client
        finally:
            client.close()
        return
    import dask

    n = workers if workers is not None else (os.cpu_count() or 1)
    # dask's nanny sets MALLOC_TRIM_THRESHOLD_=65536 in its workers, which also fixes glibc's mmap
    # threshold: every large NumPy temporary is then mmap'ed and unmapped, and the main job ran 3x
    # slower in a worker than in-process (measured: 2.3 s against 0.76 s for one tiny run). The
    # tasks here are NumPy-bound, so the workers keep glibc's default.
    # THREAD_ENV must be in the environment the worker processes are spawned with: given only as
    # env= it is set after NumPy has started its BLAS threads there (measured: OpenBLAS ran 2
    # threads per single-threaded worker). The parent's environment is restored afterwards.
    # An earlier nanny in this process leaves MALLOC_TRIM_THRESHOLD_ in os.environ (it updates the
    # parent's environment before spawning): remove it for the spawn too.
    # A nanny that restarts a dead worker spawns it again from this process's environment and its
    # pre-spawn-environ (read once, when the nanny is made), so both hold for the cluster's whole
    # life, not only for the first spawn; this process's own BLAS pools are already started, so
    # its thread counts do not change. Everything is restored when the cluster closes.
    saved = {k: os.environ.get(k) for k in (*THREAD_ENV, "MALLOC_TRIM_THRESHOLD_")}
    spawn_env = {"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None,
                 **{f"distributed.nanny.pre-spawn-environ.{k}": v for k, v in THREAD_ENV.items()}}
    os.environ.update(THREAD_ENV)
    os.environ.pop("MALLOC_TRIM_THRESHOLD_", None)
    try:
        with dask.config.set(spawn_env):
            cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                                   dashboard_address=None, silence_logs=logging.ERROR,
                                   env=dict(THREAD_ENV))
            try:
                client = Client(cluster)
            except BaseException:
                cluster.close()
                raise
            try:
                yield client
            finally:
                client.close()
                cluster.close()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_sweep(spec: SweepSpec, outdir, *, workers: int | None = None, scheduler: str | None = None,
              progress: bool = True, log: Callable | None = print) -> SweepSummary:
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
        import rieszflow and see ``outdir``. Excludes ``workers``.
    progress : bool, default True
        One tqdm bar over tasks, with the running done / failed / skipped counts.
    log : callable or None, default print
        Receives the one-line messages (tasks skipped, summary).

    Returns
    -------
    SweepSummary

    Raises
    ------
    ValueError
        If both ``workers`` and ``scheduler`` are given, ``workers < 0``, or a complete task file
        holds another configuration.
    engine.storage.RunFileError
        If another process runs a sweep in ``outdir`` (lock ``outdir/<name>.lock``), or a task
        file is corrupt or foreign.
    FileNotFoundError
        If the parent of ``outdir`` does not exist.
    """
    from rieszflow.engine.storage import RunLock

    if not isinstance(spec, SweepSpec):
        raise TypeError(f"spec must be a SweepSpec, got {type(spec).__name__}")
    check_executor(workers, scheduler)
    log = log or (lambda *a: None)
    t0 = time.perf_counter()
    outdir = Path(outdir)
    if not outdir.parent.is_dir():
        raise FileNotFoundError(f"the directory {outdir.parent} of {outdir} does not exist")
    task_dir = outdir / "tasks"
    task_dir.mkdir(parents=True, exist_ok=True)
    lock = RunLock(outdir / spec.name)
    lock.acquire()
    try:
        for stale in task_dir.glob(".*.tmp"):        # left by a killed sweep: we hold the lock
            stale.unlink()
        spec_file = outdir / "sweep.json"
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

        jobs = [Job(t.as_dict(), _run_task, (spec.function, t, spec.config, spec.root_seed,
                                             str(task_dir / t.filename), spec.task_config(t)))
                for t in todo]
        try:
            run_jobs(jobs, workers=workers, scheduler=scheduler, progress=progress, desc=spec.name,
                     skipped=len(complete), on_result=record)
        finally:
            fail_file = outdir / "failures.json"
            if failures:
                fail_file.write_text(json.dumps(failures, indent=1, sort_keys=True))
            elif fail_file.exists() and counts["done"] + counts["skipped"] == total:
                fail_file.unlink()
    finally:
        lock.release()
    summary = SweepSummary(total=total, done=counts["done"], skipped=counts["skipped"],
                           failed=counts["failed"], failures=failures, outdir=outdir,
                           seconds=time.perf_counter() - t0)
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


def open_sweep(outdir, *, write: bool = True):
    """Merge the task files of a sweep into one dataset; NaN where a task is missing.

    Parameters
    ----------
    outdir : str or os.PathLike
        A directory written by :func:`run_sweep`.
    write : bool, default True
        Also write the merged dataset to ``outdir/<name>.h5`` (temporary name, then rename).

    Returns
    -------
    xarray.Dataset
        Dimensions ``method``, the grid parameters (in grid order), ``trial``, then the tasks'
        own; every coordinate of the full grid is present, and a variable is NaN (float) where its
        task has no complete file (not run yet, or failed). Root attributes: ``kind = "sweep"``,
        ``status`` ("complete", or "partial" while tasks are missing),
        the spec as ``config`` (JSON), ``n_tasks``, ``n_complete``, ``wall_seconds`` (from the
        first task's start to the last task's end, read from the task files; 1 s resolution) and
        ``task_seconds_total`` (the tasks' own wall times summed).

    Raises
    ------
    FileNotFoundError
        If ``outdir`` has no ``sweep.json``.
    ValueError
        If no task is complete yet, a task file holds another configuration than ``sweep.json``,
        or a task variable is not numeric or changes shape between tasks.
    """
    import xarray as xr

    from rieszflow.engine.storage import FORMAT, _attr_value, provenance

    outdir = Path(outdir)
    spec = _load_spec(outdir)
    names = [k for k, _ in spec.grid]
    axes = {"method": list(spec.methods), **{k: list(v) for k, v in spec.grid},
            "trial": list(range(spec.trials))}
    position = {ax: {v: i for i, v in enumerate(vals)} for ax, vals in axes.items()}
    shape = tuple(len(v) for v in axes.values())
    data, dims, attrs, coords, spans, n_complete = {}, {}, {}, {}, [], 0
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
                    "n_tasks": n_tasks, "n_complete": n_complete}
    if spans:       # from the task files: first start to last end (a resumed sweep includes its gap)
        merged.attrs["wall_seconds"] = max(e for _, e, _ in spans) - min(b for b, _, _ in spans)
        merged.attrs["task_seconds_total"] = sum(w for _, _, w in spans)
    merged.attrs = {k: _attr_value(v) for k, v in merged.attrs.items()}
    if write:
        out = outdir / f"{spec.name}.h5"
        tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
        try:
            merged.to_netcdf(tmp, engine="h5netcdf")
            os.replace(tmp, out)
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
    return merged
