"""Benchmark: the projected Langevin step on the RFF alignment potential, fused path vs its floor, one run.

Run from the repository root::

    python benchmarks/bench_alignment.py                 # 1 thread, n = 1e4, N = 1e3, d = 64
    python benchmarks/bench_alignment.py --md docs/results/bench_alignment.md --json docs/results/bench_alignment.json
    python benchmarks/bench_alignment.py --quick --k 3   # n = 2000, N = 200

Thread counts of BLAS/OpenMP/Numba are pinned *before* NumPy and Numba are imported. One
step is :func:`engine.simulate.projected_langevin`'s ``step_fn`` with the gradient of
:class:`engine.energy.RFFAlignmentEnergy` (the phase average, ``b=None``, as the
kernel-mean-field study; and fixed phases ``b``, as the synthetic study), on ``N``
particles (frequencies ``omega``, in a ball of radius 5) and ``n`` data points in
dimension ``d``. Timed interleaved (A, B, C, ..., after one untimed warm-up round that
also compiles the Numba kernels), minimum and median of ``--k`` rounds:

* ``fused``: ``method="fused"`` (the default through ``"auto"``), float64 tiles;
* ``fused f32``: ``method="fused", tile_dtype="float32"``;
* ``numpy``: ``method="numpy"``, the reference;
* ``floor``: what any implementation of this step has to compute, on preallocated
  arrays: the GEMM of the phases ``X @ omega.T`` (n x N), the transpose GEMM of the
  gradient ``(n x N).T @ X``, and ``np.sin`` + ``np.cos`` of the n x N phases;
* ``gemm floor``: the two GEMMs alone.

The issue's goal (issue 14 item 3): the fused step within 1.5 x the floor (GEMM + sincos).
``agreement``: largest difference of the step's new particles and of the potential to the
reference's, relative to their largest entries.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

TARGET = 1.5  # issue 14: fused step <= 1.5 x (GEMM + sincos floor)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="threads for BLAS, OpenMP and Numba (default 1)")
    parser.add_argument("--k", type=int, default=5, help="interleaved timing rounds (min and median reported)")
    parser.add_argument("--n", type=int, default=10_000, help="data points (default 1e4)")
    parser.add_argument("--N", type=int, default=1_000, help="particles (default 1e3)")
    parser.add_argument("--d", type=int, default=64, help="dimension (default 64)")
    parser.add_argument("--quick", action="store_true", help="n = 2000, N = 200 (overrides --n, --N)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--md", default=None, help="also write the report (markdown) to this file")
    parser.add_argument("--json", default=None, help="also write the measurements (JSON) to this file")
    args = parser.parse_args(argv)
    if min(args.threads, args.k, args.d, args.N - 1, args.n - 1) < 1:
        parser.error("--threads, --k and --d must be >= 1, --n and --N >= 2")
    return args


def _sizes(quick, n=10_000, N=1_000, d=64):
    return (2000, 200, 64) if quick else (n, N, d)


def measure(n, N, d, k, threads, seed=0):
    """Time the step's implementations and the floor interleaved; return the rows of both phase modes.

    Parameters
    ----------
    n, N, d : int
        Data points, particles, dimension.
    k : int
        Interleaved rounds.
    threads : int
        The thread count in effect (recorded).
    seed : int

    Returns
    -------
    list of dict
        Suite rows (see ``benchmarks/suite.py``'s contract).
    """
    import numpy as np

    from rieszflow.engine.energy import RFFAlignmentEnergy
    from rieszflow.engine.simulate import projected_langevin
    from rieszflow.engine.space import Ball

    here = str(Path(__file__).resolve().parent)
    if here not in sys.path:
        sys.path.insert(0, here)
    from _interleave import interleaved, ratio

    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) / np.sqrt(d)                     # |x| ~ 1
    y = np.where(rng.random(n) < 0.5, -1.0, 1.0)
    space = Ball(5.0)
    omega = space.project(rng.normal(0.0, 1.0, size=(N, d)))
    noise = rng.normal(size=(N, d))
    b_fixed = rng.uniform(0.0, 2.0 * np.pi, size=N)
    # the floor's preallocated arrays
    U = np.empty((n, N))
    G = np.empty((N, d))
    S = np.empty((n, N))
    C = np.empty((n, N))

    def gemms():
        np.matmul(X, omega.T, out=U)
        np.matmul(U.T, X, out=G)

    def floor():
        gemms()
        np.sin(U, out=S)
        np.cos(U, out=C)

    rows = []
    for label, b in (("phase average", None), ("fixed phases", b_fixed)):
        energies = {m: RFFAlignmentEnergy(X, y, b, method=m, tile_dtype=t)
                    for m, t in (("fused", "float64"), ("numpy", "float64"))}
        energies["fused f32"] = RFFAlignmentEnergy(X, y, b, method="fused", tile_dtype="float32")
        steps = {}
        for name, E in energies.items():
            init, step = projected_langevin(E.grad, space, eta=1e-3, beta=100.0)
            steps[name] = (lambda init=init, step=step: step(init(omega), noise).omega)
        fns = {"fused": steps["fused"], "floor": floor, "numpy": steps["numpy"], "fused f32": steps["fused f32"],
               "gemm floor": gemms}
        st = interleaved(fns, k)

        ref_new, ref_V = steps["numpy"](), energies["numpy"].per_particle(omega)

        def agree(name):
            new, V = steps[name](), energies[name].per_particle(omega)
            return max(float(np.max(np.abs(new - ref_new)) / np.max(np.abs(ref_new))),
                       float(np.max(np.abs(V - ref_V)) / np.max(np.abs(ref_V))))

        size = f"n={n} N={N} d={d}, {label}"

        def row(measure, project, peer, target, agreement, notes):
            r = ratio(st, project, peer)
            return {"measure": measure, "project": project, "peer": peer,
                    "project_min_s": st[project]["min"], "project_median_s": st[project]["median"],
                    "peer_min_s": st[peer]["min"], "peer_median_s": st[peer]["median"],
                    "ratio_min": r[0], "ratio_median": r[1], "target": target, "agreement": agreement,
                    "threads": threads, "notes": notes}

        a_fused = agree("fused")
        rows.append(row(f"RFF alignment Langevin step {size}", "fused", "floor", TARGET, None,
                        "floor = GEMM X@omega^T + GEMM U^T@X + np.sin + np.cos on n x N (preallocated); "
                        "not the same computation, so no agreement"))
        rows.append(row(f"RFF alignment Langevin step {size}", "fused", "numpy", None, a_fused,
                        "fused path vs today's reference (method='numpy'); agreement: new particles and V"))
        rows.append(row(f"RFF alignment Langevin step {size}", "fused f32", "numpy", None, agree("fused f32"),
                        "float32 tiles, float64 sums; agreement: new particles and V vs the float64 reference"))
        rows.append(row(f"RFF alignment Langevin step {size}", "fused", "gemm floor", None, None,
                        "the two GEMMs alone (the sin/cos excluded)"))
        rows.append(row(f"RFF alignment Langevin step {size}", "numpy", "floor", None, None,
                        "today's reference vs the GEMM + sincos floor"))
    return rows


def suite_rows(k: int = 5, quick: bool = False) -> list[dict]:
    """Rows of the benchmark suite (issue 14 item 3), threads as configured by the caller.

    Parameters
    ----------
    k : int, default 5
        Interleaved rounds.
    quick : bool, default False
        n = 2000, N = 200, d = 64 instead of n = 1e4, N = 1e3, d = 64.

    Returns
    -------
    list of dict
        One dict per compared pair: ``measure, project, peer, project_min_s, project_median_s,
        peer_min_s, peer_median_s, ratio_min, ratio_median, target, agreement, threads, notes``.
    """
    import numba

    n, N, d = _sizes(quick)
    return measure(n, N, d, k, numba.get_num_threads())


def main(argv=None) -> int:
    args = parse_args(argv)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # run from a checkout
    from _interleave import provenance, write_outputs

    import numba

    numba.set_num_threads(args.threads)
    t_start = time.perf_counter()
    prov = provenance(args.threads)
    n, N, d = _sizes(args.quick, args.n, args.N, args.d)
    rows = measure(n, N, d, args.k, args.threads, args.seed)
    md = [f"## Projected Langevin step on the RFF alignment potential, n = {n}, N = {N}, d = {d}\n",
          f"Ratios t_project / t_peer of the minima and of the medians of {args.k} interleaved rounds "
          f"(< 1: project faster); float64 unless stated, {args.threads} thread(s). floor = GEMM "
          "X@omega^T + GEMM U^T@X + np.sin + np.cos on n x N; gemm floor = the two GEMMs. Goal "
          f"(issue 14): fused / floor <= {TARGET}. agreement: largest difference of the new particles "
          "and of V to the reference's, relative to their largest entry.\n",
          "| case | project | peer | project min [s] | peer min [s] | ratio min | ratio median | target "
          "| agreement |", "|" + "---|" * 9]
    for r in rows:
        case = r["measure"].rsplit(", ", 1)[1]
        tgt = "-" if r["target"] is None else f"{r['target']:g}"
        agr = "-" if r["agreement"] is None else f"{r['agreement']:.1e}"
        md.append(f"| {case} | {r['project']} | {r['peer']} | {r['project_min_s']:.4f} | {r['peer_min_s']:.4f} "
                  f"| {r['ratio_min']:.2f} | {r['ratio_median']:.2f} | {tgt} | {agr} |")
    wall = time.perf_counter() - t_start
    command = ("python benchmarks/bench_alignment.py --threads 1 --md docs/results/bench_alignment.md "
               "--json docs/results/bench_alignment.json")
    write_outputs(args, "Results: benchmarks/bench_alignment.py", command, prov, wall, "\n".join(md) + "\n",
                  {"rows": rows, "n": n, "N": N, "d": d})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
