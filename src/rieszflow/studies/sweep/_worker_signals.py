"""Dask worker preload of the LocalCluster sweeps: the workers ignore SIGINT.

Ctrl-C in a terminal sends SIGINT to the whole foreground process group: the rieszflow process,
which marks its output file 'interrupted' and closes the cluster, and every Dask worker process,
which printed a raw ``KeyboardInterrupt`` traceback each (seen with 8 workers). The workers are
ended by the cluster's close, so they need not handle the signal at all. Loaded by
:func:`rieszflow.studies.sweep.executor._client` through ``distributed.worker.preload`` (read by
each nanny when it is made, so a worker the nanny restarts ignores SIGINT too).
"""
from __future__ import annotations

import signal
import threading


def dask_setup(worker) -> None:
    """Ignore SIGINT in this worker process (called by distributed when the worker starts).

    Parameters
    ----------
    worker : distributed.Worker
        The starting worker (unused).

    Returns
    -------
    None
    """
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)
