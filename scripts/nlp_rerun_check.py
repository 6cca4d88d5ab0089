"""Rerun stored tasks of an NLP sweep with the current code and compare them with the stored files.

Usage (one thread, as the sweep's workers run)::

    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 python scripts/nlp_rerun_check.py runs/nlp-power/nlp-rt \\
        Vanilla-softplus:0 [METHOD:TRIAL ...]

Prints one JSON line per task (:func:`rieszflow.studies.nlp.power.rerun_task`): the stored and the
rerun commit, both accuracies, the largest difference of the test probabilities and how many test
predictions changed. Each task is a full main-job run (about 9 CPU-minutes at the default size).
"""
from __future__ import annotations

import argparse
import json
import sys


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sweep_dir", help="a sweep directory of rieszflow nlp (<out>/nlp-<dataset>)")
    parser.add_argument("tasks", nargs="+", metavar="METHOD:TRIAL", help="stored tasks to rerun")
    args = parser.parse_args(argv)
    from rieszflow.studies.nlp.power import rerun_task

    status = 0
    for spec in args.tasks:
        method, sep, trial = spec.rpartition(":")
        if not sep or not trial.isdigit():
            print(f"nlp_rerun_check: error: {spec!r} is not METHOD:TRIAL (e.g. Vanilla-softplus:0)", file=sys.stderr)
            status = 2
            continue
        try:
            print(json.dumps(rerun_task(args.sweep_dir, method, int(trial))), flush=True)
        except FileNotFoundError as e:
            print(f"nlp_rerun_check: error: {e}", file=sys.stderr)
            status = 2
    return status


if __name__ == "__main__":
    sys.exit(main())
