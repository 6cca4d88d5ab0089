"""How the antithetic bias estimate depends on the Euler-Maruyama step at a fixed N.

Usage::

    OMP_NUM_THREADS=1 NUMBA_NUM_THREADS=1 python scripts/mean_field_step_check.py box 1000 24 \\
        --etas 0.025,0.0125,0.00625,0.003125 [--integrator metropolized] [--softening 0.1]

For a problem of ``rieszflow mean-field --preset bias-large`` (``interval``, ``rectangle`` or
``box``), runs R antithetic triples of N (one batch, seed ``--seed``) at each step and prints one
JSON line per step: ``b = -2 N D_N`` with its SE for the three observables at the problem's last
time (:func:`rieszflow.studies.mean_field.antithetic.antithetic_estimate`) and the CPU seconds.
The estimator cancels the step's error only at leading order; a b that moves with the step at
fixed N means the step, not the particle number, sets what the preset would measure.
"""
from __future__ import annotations

import argparse
import json
import sys
import time


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("problem", choices=("interval", "rectangle", "box"))
    parser.add_argument("n", type=int, help="N, the size of the two smaller systems of a triple")
    parser.add_argument("r", type=int, help="antithetic triples per step (>= 2)")
    parser.add_argument("--etas", default="0.025,0.0125,0.00625", help="comma-separated steps")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--integrator", choices=("euler", "metropolized", "metropolized_simultaneous"),
                        default=None, help="the particle step (ProblemConfig.integrator); default: the "
                        "problem's own in the bias-large preset (euler)")
    parser.add_argument("--softening", type=float, default=None,
                        help="Plummer softening of the kernel (ProblemConfig.softening, d = 3 only); default: the "
                        "problem's own in the bias-large preset (box: 0.1, others: 0)")
    args = parser.parse_args(argv)
    try:
        etas = [float(e) for e in args.etas.split(",")]
    except ValueError:
        parser.error(f"--etas {args.etas!r} must be comma-separated numbers")
    if args.n < 2 or args.r < 2 or any(not e > 0 for e in etas):
        parser.error("n >= 2, r >= 2 and every step > 0 are required")
    import numpy as np

    from rieszflow.studies.mean_field.antithetic import antithetic_estimate, antithetic_samples
    from rieszflow.studies.mean_field.bias import OBSERVABLES, bias_batch_task, bias_large_config

    import dataclasses

    c = next(p for p in bias_large_config().problems if p.name == args.problem)
    try:
        if args.integrator:
            c = dataclasses.replace(c, integrator=args.integrator)
        if args.softening is not None:
            c = dataclasses.replace(c, softening=args.softening)
    except ValueError as e:
        parser.error(str(e))
    masses = None if c.d > 2 else np.full((len(c.times), int(np.prod(c.n_cells))), 1.0 / np.prod(c.n_cells))
    for eta in etas:
        if any(abs(round(t / eta) * eta - t) > 1e-9 * max(1.0, t) for t in c.times):
            parser.error(f"step {eta} does not divide the problem's times {c.times}")
        t0 = time.process_time()
        v = bias_batch_task(c, args.seed, args.n, 0, args.r, eta, 1, 0, masses, coupled=True)
        dd = antithetic_samples(v["f2n"], v["f"])[:, -1]
        est = {o: antithetic_estimate(dd[:, i], args.n) for i, o in enumerate(OBSERVABLES)}
        print(json.dumps({"problem": c.name, "integrator": c.integrator, "softening": c.softening,
                          "N": args.n, "R": args.r, "eta": eta,
                          "t": c.times[-1], **({"acceptance": round(v["acceptance"], 5)} if "acceptance" in v else {}),
                          "cpu_s": round(time.process_time() - t0, 1),
                          **{f"b_{o}": [round(e["b"], 4), round(e["b_se"], 4)] for o, e in est.items()}}),
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
