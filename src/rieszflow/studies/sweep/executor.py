"""The execution layer: :func:`run_jobs` runs independent :class:`Job` objects in-process, on a
:class:`distributed.LocalCluster` or on an existing Dask scheduler (:class:`Executor`), with one
progress bar and the failure records (:class:`TasksFailed`); before the jobs, a warning while the
cluster has no workers and the check that every worker can write the output directory
(:class:`WorkersCannotWrite`); the ``--workers``/``--scheduler``/``--dashboard`` options of the CLI
(:func:`add_sweep_arguments`)."""
from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import time
import traceback
from typing import Any, Callable, Mapping

__all__ = ["Job", "JobsSummary", "TasksFailed", "WorkersCannotWrite", "Executor", "run_jobs", "call_job",
           "check_executor", "check_dashboard", "dashboard_link", "describe_executor", "add_sweep_arguments",
           "THREAD_ENV", "WORKER_WAIT_ENV"]


#: Environment of every worker process: one BLAS/OpenMP/Numba thread per task (the parallelism
#: is across tasks), so that workers do not oversubscribe the cores.
THREAD_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
              "NUMBA_NUM_THREADS": "1"}


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

    def counts(self, what: str = "tasks") -> str:
        """The counts in one line, for the CLI's summary printed with ``--quiet`` too.

        Parameters
        ----------
        what : str, default "tasks"
            What the jobs are (``"(regime, N) cells"``).

        Returns
        -------
        str
            ``"<total> <what>: <done> done, <skipped> skipped (complete before), <failed> failed"``.
        """
        return (f"{self.total} {what}: {self.done} done, {self.skipped} skipped (complete before), "
                f"{self.failed} failed")

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


class WorkersCannotWrite(ValueError):
    """A worker of the cluster (or this process) cannot create a file in the directory the jobs write.

    Raised by :func:`run_jobs` before any job is submitted (a ``ValueError``: the CLI exits 2).

    Parameters
    ----------
    address : str
        The worker's address (``"this process"`` in-process).
    path : str
        The directory, absolute.
    reason : str
        The operating system's reason (``PermissionError: Permission denied``).

    Attributes
    ----------
    address, path : str
    """

    def __init__(self, address: str, path: str, reason: str):
        self.address, self.path = address, path
        super().__init__(f"worker {address} cannot write the sweep directory {path} ({reason}); every "
                         f"worker must see and write --out: start the workers where {path} is mounted "
                         f"and writable, or give an --out they can write")


#: Environment variable: seconds between the warnings while a cluster has no workers (default 30).
WORKER_WAIT_ENV = "RIESZFLOW_WORKER_WAIT_S"


def _worker_wait_s() -> float:
    """The wait between two no-worker warnings: ``$RIESZFLOW_WORKER_WAIT_S`` or 30 s."""
    raw = os.environ.get(WORKER_WAIT_ENV, "30")
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{WORKER_WAIT_ENV}={raw!r}: need a number of seconds > 0")
    return value


def _probe_dir(path: str) -> str | None:
    """Create and delete a file in ``path`` (on a worker); None if that works, else the reason."""
    import socket
    import uuid

    probe = os.path.join(path, f".rieszflow-probe-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        fd = os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        return f"{type(e).__name__}: {e.strerror or e}"
    return None


def _check_writable(client, path: str) -> None:
    """Run :func:`_probe_dir` on every worker of ``client`` (this process when None); raise
    :class:`WorkersCannotWrite` naming the first that fails."""
    if client is None:
        results = {"this process": _probe_dir(path)}
    else:
        results = client.run(_probe_dir, path, on_error="return")
    for address, why in sorted(results.items()):
        if isinstance(why, BaseException):
            why = f"the check failed: {type(why).__name__}: {why}"
        if why is not None:
            raise WorkersCannotWrite(address, path, why)


def _wait_for_workers(client, warn: Callable[[str], None], wait_s: float | None = None) -> None:
    """Return once the cluster of ``client`` has a worker; warn at once and every ``wait_s`` seconds
    while it has none (a silent wait looks like a frozen progress bar)."""
    if client.nthreads():
        return
    wait_s = _worker_wait_s() if wait_s is None else wait_s
    address = client.scheduler.address
    warn(f"warning: the Dask scheduler {address} has no workers; the tasks wait until one connects "
         f"(start one with: dask worker {address}; Ctrl-C stops)")
    waited = 0.0
    while True:
        try:
            client.wait_for_workers(1, timeout=wait_s)
            return
        except KeyboardInterrupt:
            _quiet_dask_shutdown()
            raise
        except TimeoutError:
            waited += wait_s
            warn(f"warning: still no workers on the Dask scheduler {address} after {waited:.0f} s; waiting "
                 f"(start one with: dask worker {address}; Ctrl-C stops)")


def _quiet_dask_shutdown() -> None:
    """Silence the loggers of Dask's event loop for the rest of the process (after Ctrl-C).

    A Ctrl-C that interrupts a synchronous client call leaves the call's coroutine on the client's
    event loop; the loop then logs its cancellation as an error with a traceback (tornado,
    asyncio, distributed) while the command exits. The interrupt is the user's, not an error:
    the command prints its own one line.
    """
    import logging

    for name in ("tornado", "tornado.application", "asyncio", "distributed"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


def _warn(line: str) -> None:
    """A warning on stderr that does not break a progress bar."""
    import sys

    from tqdm.auto import tqdm

    tqdm.write(line, file=sys.stderr)


def check_dashboard(dashboard: str | None, workers: int | None, scheduler: str | None) -> None:
    """Check a ``dashboard`` address against the executor (see :class:`Executor`).

    Parameters
    ----------
    dashboard : str or None
        The LocalCluster's dashboard address (``":8787"``, ``"127.0.0.1:0"``), ``""`` for an
        external scheduler's own dashboard (only its link is printed), or None (no dashboard).
    workers : int or None
    scheduler : str or None

    Raises
    ------
    ValueError
        With ``workers=0`` (no cluster, no dashboard), with an address and a ``scheduler`` (the
        external scheduler's dashboard is its own), or if bokeh is not installed (the
        ``dashboard`` extra).
    """
    if dashboard is None:
        return
    if workers == 0 and scheduler is None:
        raise ValueError("--dashboard: --workers 0 runs the tasks in this process, without a Dask "
                         "cluster, so there is no dashboard; give --workers N >= 1 or leave it out")
    if scheduler is not None:
        if dashboard:
            raise ValueError(f"--dashboard {dashboard!r}: an external scheduler ({scheduler}) serves its "
                             f"own dashboard; give --dashboard without an address to print its link")
        return
    try:
        import bokeh  # noqa: F401
    except ImportError:
        raise ValueError("--dashboard needs bokeh, which is not installed: pip install "
                         "'rieszflow[dashboard]'") from None


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
                        scheduler_note: str = "its workers must see --out", dashboard: bool = False) -> None:
    """Add ``--workers``, ``--scheduler`` and ``--allow-mixed-code`` (and ``--dashboard``), the
    options of every study that runs its tasks here.

    Parameters
    ----------
    parser : argparse.ArgumentParser
        The subcommand's parser.
    default_help : str, default "default: the machine's cores"
        What ``--workers`` defaults to, as the help states it.
    scheduler_note : str, default "its workers must see --out"
        What the scheduler's workers need (a sweep's workers write the task files; a study that
        writes one file gets the results back and writes it itself).
    dashboard : bool, default False
        Also add ``--dashboard [ADDRESS]`` (the studies that run their sweeps through
        :func:`rieszflow.studies.sweep_cli.run_sweeps`): ``args.dashboard`` is None without it,
        ``""`` for the bare option (the LocalCluster's dashboard on ``:8787``, or the external
        scheduler's link), else the address.
    """
    from rieszflow.studies.base import non_negative_int

    where = parser.add_mutually_exclusive_group()
    where.add_argument("--workers", type=non_negative_int, default=None, metavar="N",
                       help=f"LocalCluster worker processes, one thread each ({default_help}); 0 runs "
                            f"the tasks in this process, one after the other")
    where.add_argument("--scheduler", default=None, metavar="ADDRESS",
                       help=f"submit to an existing Dask scheduler (e.g. tcp://host:8786) instead; "
                            f"{scheduler_note} (docs/sweeps.md)")
    parser.add_argument("--allow-mixed-code", action="store_true",
                        help="merge task files written by different code (other commits, or dirty trees "
                             "with other changes); by default a sweep whose tasks ran different code is "
                             "refused, since one result must come from one version of the code")
    if dashboard:
        parser.add_argument("--dashboard", nargs="?", const="", default=None, metavar="ADDRESS",
                            help="start the Dask dashboard of the LocalCluster (at ADDRESS, e.g. :8787, "
                                 "127.0.0.1:0 for a free port; default :8787) and print its link; with "
                                 "--scheduler, print the link of the scheduler's own dashboard. Needs "
                                 "bokeh: pip install 'rieszflow[dashboard]'. Default: no dashboard")


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
    dashboard : str, optional
        None (default): the LocalCluster serves no dashboard. An address (``":8787"``,
        ``"127.0.0.1:0"``; ``""`` means ``":8787"``): it serves the Dask dashboard there (needs
        bokeh, the ``dashboard`` extra). With ``scheduler``, ``""`` only prints the scheduler's
        own dashboard link (see :func:`check_dashboard`).
    log : callable, optional
        Receives one line when the client starts: the dashboard link (a LocalCluster started with
        ``dashboard``; an external scheduler that serves one), or that the scheduler serves none.

    Raises
    ------
    ValueError
        As :func:`check_executor` and :func:`check_dashboard`.
    """

    def __init__(self, workers: int | None = None, scheduler: str | None = None,
                 dashboard: str | None = None, log: Callable | None = None):
        check_executor(workers, scheduler)
        check_dashboard(dashboard, workers, scheduler)
        self.workers, self.scheduler, self.dashboard = workers, scheduler, dashboard
        self._log = log or (lambda *a: None)
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
            address = None if self.dashboard is None or self.scheduler else (self.dashboard or ":8787")
            self._client = self._stack.enter_context(_client(self.workers, self.scheduler, address))
            link = dashboard_link(self._client)
            if link is not None and (self.scheduler is not None or self.dashboard is not None):
                self._log(f"Dask dashboard: {link}")
            elif self.scheduler is not None and self.dashboard is not None:
                self._log(f"the Dask scheduler {self.scheduler} serves no dashboard (start it with "
                          f"bokeh installed and without --no-dashboard)")
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

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None and issubclass(exc_type, KeyboardInterrupt):
            _quiet_dask_shutdown()
        self.close()
        return False


def run_jobs(jobs, *, workers: int | None = None, scheduler: str | None = None,
             executor: Executor | None = None, progress: bool = True, desc: str = "tasks",
             skipped: int = 0, on_result: Callable | None = None, writable=None) -> JobsSummary:
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
    writable : str or os.PathLike, optional
        A directory the jobs write (a sweep's ``tasks/``): before any job is submitted, every
        worker connected then (this process when in-process) creates and deletes a file there.
        Give it absolute: a worker resolves a relative path against its own working directory.

    Returns
    -------
    JobsSummary

    Raises
    ------
    ValueError
        If both ``workers`` and ``scheduler`` are given, ``workers < 0``, or ``executor`` is given
        with either.
    WorkersCannotWrite
        (a ValueError) If a worker cannot write ``writable``; no job was submitted.
    TypeError
        If an item of ``jobs`` is not a :class:`Job`.

    Notes
    -----
    While the cluster has no workers the jobs cannot start: a warning naming the scheduler's
    address is printed on stderr at once and again every 30 s (``$RIESZFLOW_WORKER_WAIT_S``)
    until a worker connects.
    """
    if executor is None:
        with Executor(workers, scheduler) as ex:
            return run_jobs(jobs, executor=ex, progress=progress, desc=desc, skipped=skipped,
                            on_result=on_result, writable=writable)
    if workers is not None or scheduler is not None:
        raise ValueError("give either executor or workers/scheduler, not both")
    from tqdm.auto import tqdm

    jobs = list(jobs)
    for job in jobs:
        if not isinstance(job, Job):
            raise TypeError(f"run_jobs needs Job items, got {type(job).__name__}")
    t0 = time.perf_counter()
    client = None
    if jobs and not executor.in_process:      # workers present and able to write, before the bar
        client = executor.client()
        _wait_for_workers(client, _warn)
    if jobs and writable is not None:
        _check_writable(client, os.fspath(writable))
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


def dashboard_link(client) -> str | None:
    """The link of the dashboard of ``client``'s scheduler, or None when it serves none.

    Parameters
    ----------
    client : distributed.Client

    Returns
    -------
    str or None
        ``http://host:port/status``.

    Notes
    -----
    A scheduler lists its HTTP server as the service ``dashboard`` even when started without
    the dashboard (``dask scheduler --no-dashboard``, or without bokeh): whether it serves the
    dashboard pages is asked of the scheduler itself (a function sent by value; a scheduler that
    refuses it is taken to serve them).
    """
    from distributed.utils import format_dashboard_link

    port = client.scheduler_info(n_workers=0).get("services", {}).get("dashboard")
    if port is None:
        return None
    try:
        served = client.run_on_scheduler(
            lambda dask_scheduler: "distributed.dashboard.scheduler" in __import__("sys").modules)
    except Exception:  # noqa: BLE001 - the scheduler refuses to run functions: assume it serves them
        served = True
    if not served:
        return None
    host = client.scheduler.address.split("://", 1)[-1].rsplit(":", 1)[0]
    return format_dashboard_link(host, port)


_SIGINT_PRELOAD = "rieszflow.studies.sweep._worker_signals"


def _with_sigint_preload(config) -> dict:
    """The user's worker preloads (``distributed.worker.preload``) with the SIGINT preload appended.

    A preload given as one string (``DASK_DISTRIBUTED__WORKER__PRELOAD=module``) becomes a
    list; a ``preload-argv`` given as one list per preload gets an empty list for ours, so the
    two stay the same length (distributed refuses mismatched lengths).
    """
    pre = config.get("distributed.worker.preload", None) or []
    pre = [pre] if isinstance(pre, str) else list(pre)
    out = {"distributed.worker.preload": pre + [_SIGINT_PRELOAD]}
    argv = config.get("distributed.worker.preload-argv", None) or []
    if argv and all(isinstance(a, (list, tuple)) for a in argv):
        out["distributed.worker.preload-argv"] = [list(a) for a in argv] + [[]]
    return out


@contextlib.contextmanager
def _client(workers: int | None, scheduler: str | None, dashboard: str | None = None):
    """A dask.distributed Client: on ``scheduler``, else on a LocalCluster of ``workers`` (serving
    its dashboard at the address ``dashboard``, none when None)."""
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
    # The workers ignore SIGINT (a preload; see rieszflow.studies.sweep._worker_signals): Ctrl-C
    # reaches this process, which marks its file and closes the cluster, not a traceback per worker.
    spawn_env = {"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None,
                 **{f"distributed.nanny.pre-spawn-environ.{k}": v for k, v in THREAD_ENV.items()},
                 **_with_sigint_preload(dask.config)}
    os.environ.update(THREAD_ENV)
    os.environ.pop("MALLOC_TRIM_THRESHOLD_", None)
    try:
        with dask.config.set(spawn_env):
            cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                                   dashboard_address=dashboard, silence_logs=logging.ERROR,
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
