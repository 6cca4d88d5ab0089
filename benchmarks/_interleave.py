"""Shared helpers of the benchmarks: interleaved timing and the report header.

Imported by the scripts in this folder (``python benchmarks/bench_*.py`` puts the folder on
``sys.path``). Timings on a shared machine are noisy; every comparison here runs the
implementations round-robin (A, B, C, A, B, C, ...) on the same inputs, so a burst of load hits
all of them alike, and reports the minimum and the median of ``k`` rounds and their ratios.
"""
from __future__ import annotations

import datetime
import os
import platform
import statistics
import subprocess
import time
from pathlib import Path


def interleaved(fns, k, warmup=1):
    """Time callables round-robin.

    Parameters
    ----------
    fns : dict of str to callable
        The implementations (no arguments).
    k : int
        Rounds; each round calls every function once, in the given order.
    warmup : int, default 1
        Untimed rounds first (JIT compilation, caches).

    Returns
    -------
    dict of str to dict
        Per name: ``min`` and ``median`` seconds and the list ``times``.
    """
    for _ in range(warmup):
        for f in fns.values():
            f()
    times = {name: [] for name in fns}
    for _ in range(k):
        for name, f in fns.items():
            t0 = time.perf_counter()
            f()
            times[name].append(time.perf_counter() - t0)
    return {name: {"min": min(t), "median": statistics.median(t), "times": t} for name, t in times.items()}


def ratio(stats, num, den):
    """``(min ratio, median ratio)`` of two entries of :func:`interleaved`: time(num) / time(den)."""
    return stats[num]["min"] / stats[den]["min"], stats[num]["median"] / stats[den]["median"]


def provenance(threads):
    """Date, git commit, machine and thread count of a run (a dict, for the JSON and the header)."""
    root = Path(__file__).resolve().parents[1]
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True,
                                text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, check=True).stdout.strip()
        commit += "+uncommitted" if dirty else ""
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    return {"measured": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "commit": commit, "machine": platform.machine(), "cores": os.cpu_count(),
            "threads": threads, "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None}


def write_outputs(args, title, command, prov, wall_s, markdown_body, payload):
    """Print the markdown; write it (``--md``) with a header and the JSON (``--json``)."""
    import json

    header = (f"# {title}\n\nRegenerate with `{command}` (also run by `make results`). "
              f"Measured {prov['measured']}, git {prov['commit']}, {prov['machine']}, {prov['cores']} cores, "
              f"{prov['threads']} thread(s), load average {prov['load_average']}, wall time {wall_s:.0f} s. "
              f"The machine was shared with other work while this ran: absolute times are noisy; "
              f"the implementations were timed interleaved (A, B, A, B, ...) in one process, so "
              f"compare the ratios (of the minima and of the medians).\n\n")
    print(markdown_body)
    if args.md:
        Path(args.md).write_text(header + markdown_body)
    if args.json:
        Path(args.json).write_text(json.dumps({**payload, "provenance": prov, "wall_s": wall_s,
                                               "command": command}, indent=1))
