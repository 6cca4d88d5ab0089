"""Where the CuPy GEMM path overtakes the fused CUDA kernel: Riesz energy + gradient over (d, N, s).

Run on a GPU from the repository root::

    python benchmarks/gpu_crossover.py --md docs/results/gpu_crossover.md

``method="auto"`` on CuPy arrays takes the fused kernel up to ``FUSED_MAX_D`` (one launch, exact,
deterministic, no host synchronisation) and GEMM above. ``docs/results/gpu.md`` found GEMM 1.7-4.4x
faster at d = 64 (N >= 4000) and the fused kernel 1.2-3.8x faster at d <= 16; this script times
both, interleaved (minimum and median of ``--k`` rounds after a device synchronisation), on a grid
of d and N, float64, and prints the ratio fused / GEMM (< 1: fused faster) and their agreement.
Without CuPy or a CUDA device it prints one line to stderr and exits with status 2.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument("--md", default=None, help="also write the table (Markdown) to this file")
    args = parser.parse_args(argv)
    if args.k < 1:
        parser.error("--k must be >= 1")
    import numpy as np

    from rieszflow.engine.backend import cupy_available, get_backend, to_numpy
    from rieszflow.engine.energy.riesz import FUSED_MAX_D

    if not cupy_available():
        print("no CUDA device (CuPy is not installed or no GPU answers); nothing was measured", file=sys.stderr)
        return 2
    from _interleave import interleaved
    from gpu import synced_riesz

    be = get_backend("cupy")
    t_start = time.time()
    rows = ["| d | N | s | fused min / median (s) | gemm min / median (s) | fused / gemm (median) | "
            "rel. difference | auto takes |", "|---|---|---|---|---|---|---|---|"]
    for d in (8, 16, 24, 32, 48, 64, 96, 128):
        for n in (256, 1024, 4000, 16000):
            for s in (0.0, 1.0):
                xg = be.asarray(np.random.default_rng(n + d).normal(size=(n, d)))

                fns = {"fused": synced_riesz(be, xg, s, "fused"), "gemm": synced_riesz(be, xg, s, "gemm")}
                ef, gf = fns["fused"]()
                eg, gg = fns["gemm"]()
                gf, gg = to_numpy(gf), to_numpy(gg)
                diff = max(abs(float(ef) - float(eg)) / max(abs(float(eg)), 1e-300),
                           float(np.max(np.abs(gf - gg)) / max(np.max(np.abs(gg)), 1e-300)))
                st = interleaved(fns, args.k)
                ratio = st["fused"]["median"] / st["gemm"]["median"]
                rows.append(f"| {d} | {n} | {s:g} | {st['fused']['min']:.3g} / {st['fused']['median']:.3g} | "
                            f"{st['gemm']['min']:.3g} / {st['gemm']['median']:.3g} | {ratio:.2f} | {diff:.1e} | "
                            f"{'fused' if d <= FUSED_MAX_D else 'gemm'} |")
                print(rows[-1], flush=True)
    import cupy

    dev = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    head = (f"# GPU: fused kernel against the GEMM path, Riesz energy + gradient\n\n"
            f"Regenerated on a GPU by `python benchmarks/gpu_crossover.py --md docs/results/gpu_crossover.md` "
            f"(never by `make results`: it needs CuPy and a CUDA device). {dev}, float64, median and "
            f"minimum of {args.k} interleaved rounds after a device synchronisation; wall time "
            f"{time.time() - t_start:.0f} s. `FUSED_MAX_D` = {FUSED_MAX_D} when measured.\n\n")
    text = head + "\n".join(rows) + "\n"
    if args.md:
        Path(args.md).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
