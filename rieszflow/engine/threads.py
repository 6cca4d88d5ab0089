"""Thread policy: how many BLAS and Numba threads each operation of rieszflow uses.

rieszflow runs on shared machines (a laptop with a browser open, a 2-core CI runner, a node
shared with other jobs). There, more threads are often *slower*: OpenBLAS and Numba's OpenMP
layer split an operation statically between their threads and spin at a barrier, so when another
process holds one of the cores every fine-grained operation waits for a descheduled thread.
Measured on the project's 2-core machine with one competing CPU-bound process
(``benchmarks/bench_threads.py``, ``python -m benchmarks --only bench_threads``):

=====================================================  ===========  ============
operation (main-job sizes unless stated)               2 vs 1       2 vs 1
                                                       quiet        loaded
=====================================================  ===========  ============
Phase B train step (BLAS)                              0.76 x       2.96 x
Phase A step (alignment gradient + Riesz, BLAS)        0.74 x       2.87 x
evaluation forward pass, batch 256 (BLAS)              0.87 x       2.16 x
Riesz GEMM path, d = 64, N = 1000-4000 (BLAS)          0.91-0.97 x  2.1 x
RFF alignment potential, n = 1e4, N = 1e3 (BLAS)       1.09 x       2.16 x
Riesz Numba kernel, d = 3, N = 1000                    0.55 x       5.8-10 x
Riesz Numba kernel, d = 3, N = 20000                   0.53 x       0.95 x
=====================================================  ===========  ============

(ratios of median times, one run each, 2026-11-25; the quiet column had light load from other
work; ``make results`` regenerates the benchmark.) Two threads gain at most 1.35 x on a quiet
machine and lose 2-10 x on a loaded one for every BLAS-bound operation at these sizes, so the
policy is deterministic and conservative:

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

__all__ = ["ThreadRule", "THREAD_RULES", "configure_threads", "thread_cap", "blas_threads",
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
        blas=1, evidence="Phase B step 2/1: 0.76 quiet, 2.96 loaded; Phase A step 0.74 / 2.87; "
                         "evaluation 0.87 / 2.16 (main-job sizes)"),
    "riesz": ThreadRule(
        blas=1, numba_min_work=1e8, units="ordered pairs N (N - 1) of one call",
        evidence="GEMM path d=64 N=1000-4000 2/1: 0.91-0.97 quiet, 2.1 loaded; Numba kernel d=3: "
                 "N=1000 0.55 quiet, 5.8-10 loaded; N=20000 0.53 quiet, 0.95 loaded"),
    "alignment": ThreadRule(
        blas=1, evidence="RFF alignment potential n=1e4 N=1e3 d=64, reference path 2/1: 1.09 quiet, "
                         "2.16 loaded; fused path (Numba) with 2 threads at load 3.4: 149 ms vs 77 ms"),
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
        Thread cap (>= 1); default :func:`thread_cap`'s environment / core count.

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
    if threads is not None:
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise ValueError(f"threads={threads!r} is not allowed; give an integer >= 1")
        _state["cap"] = int(threads)
    n = blas_threads()
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=n, user_api="blas")
    _state["blas"] = n
    return thread_settings()


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
