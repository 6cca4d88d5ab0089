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

Modules
-------
:mod:`~rieszflow.studies.sweep.spec`
    :class:`Task`, :class:`SweepSpec`, :class:`SweepSummary` and the ``kind`` tags.
:mod:`~rieszflow.studies.sweep.executor`
    :func:`run_jobs`, :class:`Job`, :class:`Executor`, :class:`TasksFailed`,
    :class:`WorkersCannotWrite` (the pre-flight check of the workers) and the CLI options.
:mod:`~rieszflow.studies.sweep.tasks`
    :func:`execute_task`: one task in its worker, its file written atomically.
:mod:`~rieszflow.studies.sweep.run`
    :func:`run_sweep` and :func:`open_sweep`.

Every name is importable from ``rieszflow.studies.sweep`` itself.
"""
from __future__ import annotations

from rieszflow.studies.sweep.executor import (
    THREAD_ENV,
    WORKER_WAIT_ENV,
    Executor,
    Job,
    JobsSummary,
    TasksFailed,
    WorkersCannotWrite,
    _client,  # noqa: F401  (used by tests/test_sweep.py)
    add_sweep_arguments,
    call_job,
    check_dashboard,
    check_executor,
    dashboard_link,
    describe_executor,
    run_jobs,
)
from rieszflow.studies.sweep.run import MixedCodeError, open_sweep, run_sweep
from rieszflow.studies.sweep.spec import SWEEP_KIND, TASK_KIND, SweepSpec, SweepSummary, Task
from rieszflow.studies.sweep.tasks import execute_task

__all__ = ["Task", "SweepSpec", "SweepSummary", "run_sweep", "open_sweep", "MixedCodeError", "execute_task",
           "Job", "JobsSummary", "TasksFailed", "WorkersCannotWrite", "Executor", "run_jobs", "call_job",
           "check_executor", "check_dashboard", "dashboard_link", "describe_executor", "add_sweep_arguments",
           "THREAD_ENV", "WORKER_WAIT_ENV", "TASK_KIND", "SWEEP_KIND"]
