"""Thread policy: how many BLAS and Numba threads each operation of rieszflow uses.

rieszflow runs on shared machines (a laptop with a browser open, a 2-core CI runner, a node
shared with other jobs). There, more threads are often *slower*: OpenBLAS and Numba's OpenMP
layer split an operation statically between their threads and spin at a barrier, so when another
process holds one of the cores every fine-grained operation waits for a descheduled thread.
The measurement behind the rules is ``benchmarks/bench_threads.py`` (also part of
``python -m benchmarks``; pages ``docs/results/bench_threads.md`` and ``bench_suite.md``): for the
main job's Phase A step, Phase B step and evaluation pass, the Riesz sums (GEMM path at d = 64,
Numba kernel at d = 3) and the RFF alignment potential, it times the policy at 2 threads, one
thread, and "naive" 2 threads (2 BLAS and 2 Numba threads for every call), interleaved, on the
machine as it is and with a competing CPU-bound process that it starts. On the project's 2-core
machine two naive threads gained little on an idle machine (at best about 1.3 x for the
Transformer's steps, nothing for the GEMM path) and lost several-fold in the median as soon as
another process held a core; only Numba calls of about 1e8 pairs and more kept a gain under
load. Hence the policy, deterministic and conservative:

* **BLAS: one thread** for every operation (:data:`THREAD_RULES`), set once per process by
  :func:`configure_threads` (the ``rieszflow`` command calls it before any study runs; the sweep
  workers already run one BLAS thread each, see ``studies.sweep.THREAD_ENV``).
* **Numba: the thread cap only for calls with enough work** that each thread's share is long
  next to the scheduler's time slice (``numba_min_work`` of the operation's rule, in the
  kernel's work units), one thread below it (:func:`numba_threads`).

The policy never depends on the load at run time: a run's numbers depend on its configuration,
seed and thread settings only (the Numba kernels give bit-identical results for any thread
count, each row of a pair sum being summed by one thread; BLAS with a different thread count
changes float32 results in the last bits, which is why the count is fixed, not adaptive).
``--threads N`` (or the environment variable ``RIESZFLOW_THREADS``) sets the cap; a machine
with dedicated cores can raise the BLAS count with ``RIESZFLOW_BLAS_THREADS``.
"""
from __future__ import annotations

import dataclasses
import os

# Idle OpenMP threads (Numba's "omp" layer) sleep at once instead of spinning for a while after a
# parallel call: a spinning worker took a core from the next one-thread operation under load (the
# RFF alignment step after a 2-thread Riesz call: +9.6 % median with a competing process, +2.7 %
# with this setting; the parallel calls the policy allows last long enough not to notice the
# wake-up). Set before Numba's first parallel call (this module is imported by every kernel that
# makes one); a value already in the environment is kept.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__all__ = ["ThreadRule", "THREAD_RULES", "configure_threads", "limit_blas", "BLAS_ENV", "thread_cap", "blas_threads",
           "numba_threads", "thread_settings"]


@dataclasses.dataclass(frozen=True)
class ThreadRule:
    """How many threads one operation may use.

    Parameters
    ----------
    blas : int
        BLAS threads (>= 1) when the operation runs (the process-wide count is the largest over
        :data:`THREAD_RULES`, capped by :func:`thread_cap`).
    numba_min_work : float or None
        Work of one call (in the operation's own units, stated in ``units``) from which its
        Numba kernel uses :func:`thread_cap` threads; below it, one thread. None: always one.
    units : str
        What ``numba_min_work`` counts.
    evidence : str
        The measurement that chose the rule (median time with 2 threads / with 1).
    """

    blas: int = 1
    numba_min_work: float | None = None
    units: str = ""
    evidence: str = ""


#: The rule of each operation; adding an operation is one entry here.
THREAD_RULES: dict[str, ThreadRule] = {
    "transformer": ThreadRule(
        blas=1, evidence="bench_threads: main job Phase A step, Phase B train step, evaluation pass "
                         "(naive@2 vs 1 thread, idle and with a competing process)"),
    "riesz": ThreadRule(
        blas=1, numba_min_work=1e8, units="ordered pairs N (N - 1) of one call",
        evidence="bench_threads: Riesz GEMM path d=64 N=1000, 4000; Numba kernel d=3 N=1000 "
                 "(threads lose under load) and N=12000 (threads gain under load)"),
    "alignment": ThreadRule(
        blas=1, evidence="bench_threads: RFF alignment potential n=1e4 N=1e3 d=64; the fused "
                         "kernel with 2 Numba threads at load 3.4 took 149 ms against 77 ms "
                         "(docs/results/bench_alignment.md's run, measured by hand)"),
}

_state = {"cap": None, "blas": None}


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _env_int(name: str) -> int | None:
    text = os.environ.get(name)
    if text is None or text.strip() == "":
        return None
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"environment variable {name}={text!r} is not an integer; allowed: an "
                         f"integer >= 1") from None
    if value < 1:
        raise ValueError(f"environment variable {name}={text!r} must be >= 1")
    return value


def thread_cap() -> int:
    """The largest number of threads any operation may use.

    Returns
    -------
    int
        The value given to :func:`configure_threads`, else ``RIESZFLOW_THREADS``, else the
        number of cores this process may run on.

    Raises
    ------
    ValueError
        If ``RIESZFLOW_THREADS`` is set and is not an integer >= 1.
    """
    if _state["cap"] is not None:
        return _state["cap"]
    env = _env_int("RIESZFLOW_THREADS")
    return env if env is not None else _cores()


def blas_threads() -> int:
    """BLAS threads of this process under the policy.

    Returns
    -------
    int
        ``RIESZFLOW_BLAS_THREADS`` if set, else the largest ``blas`` of :data:`THREAD_RULES`;
        at most :func:`thread_cap`.

    Raises
    ------
    ValueError
        If ``RIESZFLOW_BLAS_THREADS`` or ``RIESZFLOW_THREADS`` is not an integer >= 1.
    """
    env = _env_int("RIESZFLOW_BLAS_THREADS")
    want = env if env is not None else max(r.blas for r in THREAD_RULES.values())
    return max(1, min(want, thread_cap()))


def configure_threads(threads: int | None = None) -> dict:
    """Apply the thread policy to this process (BLAS pools now; Numba per call).

    Parameters
    ----------
    threads : int, optional
        Thread cap (>= 1); None (default) returns to :func:`thread_cap`'s environment / core
        count, also after an earlier call with a number.

    Returns
    -------
    dict
        :func:`thread_settings` after the change.

    Raises
    ------
    ValueError
        If ``threads`` is not an integer >= 1, or an environment variable of the policy is
        malformed.
    """
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ValueError(f"threads={threads!r} is not allowed; give an integer >= 1")
    _state["cap"] = None if threads is None else int(threads)    # None: back to the environment
    n = limit_blas()
    _state["blas"] = n
    return thread_settings()


#: Environment variables through which a BLAS library reads its thread count when it is loaded.
BLAS_ENV = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS")


def limit_blas(*, respect_environment: bool = False) -> int:
    """Give every BLAS library of this process :func:`blas_threads` threads, loaded or not yet.

    threadpoolctl limits only the libraries already loaded, and SciPy ships its own OpenBLAS that
    loads with ``scipy.linalg``, often after the policy was applied: so the count also goes to
    the variables of :data:`BLAS_ENV` that the user has not set, which a library reads when it
    loads (child processes inherit them). Cheap: it imports neither NumPy nor SciPy
    (``import rieszflow`` calls it).

    Parameters
    ----------
    respect_environment : bool, default False
        True (at ``import rieszflow``): when the user set a variable of :data:`BLAS_ENV` (e.g.
        ``OPENBLAS_NUM_THREADS=4``), that is their choice and the loaded libraries are left alone.
        False (:func:`configure_threads`, the ``rieszflow`` command): the loaded libraries get the
        policy's count whatever the environment says.

    Returns
    -------
    int
        The BLAS thread count set (or, when the environment was respected, the policy's count
        that was not applied).

    Raises
    ------
    ValueError
        If ``RIESZFLOW_BLAS_THREADS`` or ``RIESZFLOW_THREADS`` is not an integer >= 1.
    """
    import sys

    n = blas_threads()
    owned = _state.setdefault("env_owned", set())
    user_set = [k for k in BLAS_ENV if k in os.environ and k not in owned]
    for name in BLAS_ENV:
        if name not in user_set:
            os.environ[name] = str(n)
            owned.add(name)
    if respect_environment and user_set:
        return n
    if "numpy" in sys.modules or "scipy" in sys.modules:
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=n, user_api="blas")
    return n


def numba_threads(operation: str, work: float) -> int:
    """Numba threads for one call of ``operation`` with ``work`` units of work.

    Parameters
    ----------
    operation : str
        A key of :data:`THREAD_RULES`.
    work : float
        The call's work in the rule's ``units`` (e.g. ordered pairs for ``"riesz"``).

    Returns
    -------
    int
        :func:`thread_cap` (at most Numba's own ``NUMBA_NUM_THREADS``) when ``work`` reaches the
        rule's ``numba_min_work``, else 1.

    Raises
    ------
    KeyError
        If ``operation`` is not in :data:`THREAD_RULES`.
    """
    try:
        rule = THREAD_RULES[operation]
    except KeyError:
        raise KeyError(f"numba_threads: operation={operation!r} is unknown; allowed: "
                       f"{', '.join(sorted(THREAD_RULES))}") from None
    if rule.numba_min_work is None or work < rule.numba_min_work:
        return 1
    import numba

    return max(1, min(thread_cap(), numba.config.NUMBA_NUM_THREADS))


def thread_settings() -> dict:
    """The thread settings in force, for provenance (files, benchmark reports).

    Returns
    -------
    dict
        ``thread_cap``, ``blas_threads`` (as the BLAS libraries report them now, via
        threadpoolctl) and ``numba_max_threads``.
    """
    from threadpoolctl import threadpool_info

    blas = sorted({i["num_threads"] for i in threadpool_info() if i.get("user_api") == "blas"})
    try:
        import numba

        numba_max = int(numba.config.NUMBA_NUM_THREADS)
    except ImportError:  # pragma: no cover - numba is a dependency
        numba_max = 1
    return {"thread_cap": thread_cap(), "blas_threads": ",".join(map(str, blas)) or "none",
            "numba_max_threads": numba_max}
