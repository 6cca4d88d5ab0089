"""Benchmark: Riesz energy + gradient, NumPy reference vs Numba kernel, measured in one run.

Run from the repository root::

    python benchmarks/bench_riesz.py                 # 1 thread, default sizes
    python benchmarks/bench_riesz.py --threads 2 --sizes 1000 4000 --d 3

Thread counts of BLAS/OpenMP/Numba are pinned *before* NumPy and Numba are
imported, so the two implementations run under the same conditions. Reported:
the best wall time over ``--repeats`` runs (after one untimed warm-up that also
compiles the Numba kernel), the throughput in ordered pairs per second
(N(N-1) / t) and the speed-up ratio numba/numpy. Ratios are meaningful within
one run; absolute numbers depend on the machine and its load.

Exponents cover the kernel's evaluation paths: s = 0 (log: weight 1/r^2),
s = 1 (odd integer: one sqrt), s = 2.5 (half-integer: two sqrt) and s = 0.7
(general: pow).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="threads for BLAS, OpenMP and Numba (default 1)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[500, 1000, 2000, 4000], help="particle counts N")
    parser.add_argument("--d", type=int, default=2, help="dimension of the particles (default 2)")
    parser.add_argument("--s", type=float, nargs="+", default=[0.0, 1.0, 2.5, 0.7], help="Riesz exponents")
    parser.add_argument("--repeats", type=int, default=3, help="timed repetitions; the best is reported")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.threads < 1 or args.repeats < 1 or args.d < 1 or min(args.sizes) < 2:
        parser.error("--threads, --repeats and --d must be >= 1 and every size >= 2")
    return args


def best_time(fn, repeats):
    fn()  # warm-up (JIT compilation, caches)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main(argv=None) -> int:
    args = parse_args(argv)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

    import numba
    import numpy as np

    from rieszflow.engine.energy import riesz_energy_and_grad

    numba.set_num_threads(args.threads)
    rng = np.random.default_rng(args.seed)
    print(f"# Riesz energy+gradient, d={args.d}, threads={args.threads}, float64, best of {args.repeats}")
    print(f"{'N':>6} {'s':>5} {'numpy [s]':>10} {'numba [s]':>10} {'numpy pairs/s':>14} "
          f"{'numba pairs/s':>14} {'numba/numpy':>12} {'max rel diff':>13}")
    for n in args.sizes:
        x = rng.normal(size=(n, args.d))
        pairs = n * (n - 1)
        for s in args.s:
            t_np = best_time(lambda: riesz_energy_and_grad(x, s, method="numpy"), args.repeats)
            t_nb = best_time(lambda: riesz_energy_and_grad(x, s, method="numba"), args.repeats)
            e_np, g_np = riesz_energy_and_grad(x, s, method="numpy")
            e_nb, g_nb = riesz_energy_and_grad(x, s, method="numba")
            diff = max(abs(e_nb - e_np) / abs(e_np), np.abs(g_nb - g_np).max() / np.abs(g_np).max())
            print(f"{n:>6} {s:>5.2f} {t_np:>10.4f} {t_nb:>10.4f} {pairs / t_np:>14.3e} "
                  f"{pairs / t_nb:>14.3e} {t_np / t_nb:>12.1f} {diff:>13.1e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
