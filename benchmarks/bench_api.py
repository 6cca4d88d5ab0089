"""Benchmark: the main job's smoke run called from Python against the same run from the CLI.

Run from the repository root::

    python benchmarks/bench_api.py
    python benchmarks/bench_api.py --k 5 --md docs/results/bench_api.md --json docs/results/bench_api.json

What is timed: the whole of one ``--smoke`` main-job run (Phase A and Phase B on 256 Rotten
Tomatoes sentences, the file written), each in a fresh process so that every variant pays the
same start-up and imports, interleaved (A, B, C, A, B, C, ...; one untimed warm-up round):

* ``cli``: ``rieszflow run --smoke --quiet --out F`` (``python -m rieszflow``);
* ``python``: a script, ``import rieszflow as rf; rf.run_main_job(smoke config, F, quiet=True)``;
* ``python-no-policy``: the same script with ``RIESZFLOW_THREAD_POLICY=off``: what a Python call
  got before the thread policy applied at import (the BLAS pools at their defaults, one thread
  per core).

No thread variable is set for the child processes (``OMP_NUM_THREADS`` and friends are removed
from their environment), so each runs under the policy it would have for a user. The issue's
goal: ``python / cli`` at most 1 (within the noise of a shared machine).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _interleave import interleaved, provenance, ratio, write_outputs  # noqa: E402

SCRIPT = ("import sys, rieszflow as rf\n"
          "from rieszflow.learning import SMOKE_OVERRIDES\n"
          "rf.run_main_job(rf.MainJobConfig().replace(**SMOKE_OVERRIDES), sys.argv[1], quiet=True)\n")
#: Variables that would override the policy in the children (the benchmark measures the policy).
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS",
               "RIESZFLOW_THREADS", "RIESZFLOW_BLAS_THREADS", "RIESZFLOW_THREAD_POLICY")


def _runner(argv, env, workdir):
    counter = iter(range(10**6))

    def run():
        out = Path(workdir) / f"run{next(counter)}.h5"
        subprocess.run([*argv, str(out)], env=env, check=True, capture_output=True)
        out.unlink()
    return run


def measure(k: int):
    """Interleaved wall times of the three variants (seconds), from ``k`` rounds."""
    env = {key: v for key, v in os.environ.items() if key not in THREAD_VARS}
    off = {**env, "RIESZFLOW_THREAD_POLICY": "off"}
    with tempfile.TemporaryDirectory() as d:
        fns = {"cli": _runner([sys.executable, "-m", "rieszflow", "run", "--smoke", "--quiet", "--out"], env, d),
               "python": _runner([sys.executable, "-c", SCRIPT], env, d),
               "python-no-policy": _runner([sys.executable, "-c", SCRIPT], off, d)}
        return interleaved(fns, k)


def suite_rows(k: int = 5, quick: bool = False) -> list:
    """Rows of the benchmark suite (contract in ``benchmarks/suite.py``): Python call vs CLI."""
    from suite import make_row

    stats = measure(2 if quick else k)
    return [make_row("main job --smoke, whole process (Python API vs the rieszflow command)",
                     "python", "cli", stats, target=1.0,
                     notes=f"without the thread policy the Python call took "
                           f"{ratio(stats, 'python-no-policy', 'cli')[1]:.2f}x the CLI (median)")]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, default=5, help="interleaved rounds (default 5)")
    ap.add_argument("--md", default=None, help="write the markdown report here")
    ap.add_argument("--json", default=None, help="write the JSON report here")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    prov = provenance("policy (one BLAS thread)")
    stats = measure(args.k)
    rows = ["| variant | min (s) | median (s) | ratio to cli (min) | ratio to cli (median) |",
            "| --- | --- | --- | --- | --- |"]
    for name in stats:
        r = ratio(stats, name, "cli")
        rows.append(f"| {name} | {stats[name]['min']:.2f} | {stats[name]['median']:.2f} | {r[0]:.3f} | {r[1]:.3f} |")
    body = "\n".join(rows) + "\n"
    write_outputs(args, "Benchmark: the main job from Python against the CLI",
                  f"python benchmarks/bench_api.py --k {args.k}", prov, time.perf_counter() - t0, body,
                  {"stats": {n: {"min": s["min"], "median": s["median"], "times": s["times"]}
                             for n, s in stats.items()}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
