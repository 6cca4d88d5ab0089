"""Benchmark: linear-attention token flow (O(N m)) against the exact chunked softmax flow (O(N^2)).

Measured in one run on the CPU (NumPy), tokens on S^{d-1}, SA normalisation
(``engine.tokenflow``):

* linear attention with FAVOR features (m particles): time per field
  evaluation and per RK4 step, and the peak memory of one evaluation
  (``tracemalloc``), for N up to 1e5 tokens. Memory per token is constant, so
  memory is linear in N;
* exact softmax attention, chunked (query and key blocks with a running
  log-sum-exp, block ``chunk``), at doubling N while one evaluation stays within
  the time cap and its peak memory within the stated budget; the dense
  (unchunked) softmax is shown at the sizes whose N x N score matrices fit the
  budget, to contrast O(N^2) with O(N) memory;
* ratios measured at the same N (the largest softmax N), and the softmax time
  at the largest linear N extrapolated with the measured N^2 law (labelled).

Usage::

    OMP_NUM_THREADS=1 python benchmarks/bench_token_flow.py [--quick]

Timings depend on the machine and its load; compare ratios, not seconds.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))   # run from a checkout

from rieszflow.engine.features import make_feature_map  # noqa: E402
from rieszflow.engine.tokenflow import (  # noqa: E402
    LinearKernel,
    SoftmaxKernel,
    make_integrator,
    normalise,
    sphere_attention_flow,
)

MiB = 1024.0 ** 2


def _sphere(rng, n, d):
    return normalise(rng.standard_normal((n, d)))


def time_eval(field, x, repeats):
    """Best wall time of ``repeats`` field evaluations (seconds)."""
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        field(x)
        best = min(best, time.perf_counter() - t0)
    return best


def peak_memory(fn):
    """Peak bytes allocated (tracemalloc; NumPy reports its buffers) while running ``fn``."""
    tracemalloc.start()
    tracemalloc.reset_peak()
    base = tracemalloc.get_traced_memory()[0]
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak - base


def time_rk4_step(field, x, dt=0.05):
    init, step = make_integrator("rk4_retract", field, dt)
    s = init(x)
    t0 = time.perf_counter()
    step(s)
    return time.perf_counter() - t0



def torch_linear_sa_field(torch, omega, input_scale):
    """The same SA sphere field in torch: FAVOR features, ``a = phi(q) S / phi(q).z``, tangent part.

    ``phi(x) = exp(s x.omega_k - |s x|^2 / 2) / sqrt(m)`` (FAVOR, ``tau = 1``, no stabiliser),
    ``S = sum_j phi(x_j) x_j^T``, ``z = sum_j phi(x_j)``, velocity ``a - <a, x> x``.
    """
    om = torch.from_numpy(np.ascontiguousarray(omega))
    root_m = math.sqrt(omega.shape[0])

    def field(x):
        xs = input_scale * x if input_scale != 1.0 else x
        phi = torch.exp(xs @ om.to(x.dtype).T - 0.5 * (xs * xs).sum(-1, keepdim=True)) / root_m
        a = (phi @ (phi.T @ x)) / (phi @ phi.sum(0))[:, None]
        return a - (a * x).sum(-1, keepdim=True) * x
    return field


def suite_rows(k: int = 5, quick: bool = False) -> list:
    """Rows of the benchmark suite (``python -m benchmarks``; contract in ``benchmarks/suite.py``).

    One evaluation of the linear-attention SA token-flow field on S^{d-1} (d = 16, FAVOR with
    m = 64 features, beta = 1; this script's first table), N = 1e5 tokens (quick: 1e4), in
    float64 and float32: ``sphere_attention_flow(LinearKernel(...))`` against the same field
    written in torch (:func:`torch_linear_sa_field`), timed interleaved; no target stated by the
    issue (it lists 0.91 x torch in float64, 1.48 x in float32). ``agreement``: largest
    difference of the velocities relative to the largest velocity.
    """
    from _interleave import interleaved
    from suite import make_row, optional_peer, rel_diff, skipped_row

    torch, why = optional_peer("torch")
    n, d, m, beta = (10_000 if quick else 100_000), 16, 64, 1.0
    rows = []
    rng = np.random.default_rng(0)
    fmap = make_feature_map("favor", d, m, omega_scale=math.sqrt(d), check_finite=False)
    omega = fmap.init_omega(rng)
    lin = sphere_attention_flow(LinearKernel(fmap, omega, input_scale=math.sqrt(beta)))
    x64 = _sphere(rng, n, d)
    for dtype, tol in (("float64", 1e-10), ("float32", 1e-3)):
        measure = f"token-flow SA field, linear attention, N={n} d={d} m={m} {dtype}"
        if torch is None:
            rows.append(skipped_row(measure, "sphere_attention_flow", "torch", why))
            continue
        x = x64.astype(dtype)
        xt = torch.from_numpy(x)
        peer = torch_linear_sa_field(torch, omega, math.sqrt(beta))
        fns = {"project": lambda x=x: lin(x), "torch": lambda xt=xt: peer(xt)}
        st = interleaved(fns, k)
        rows.append(make_row(measure, "sphere_attention_flow", "torch", st, project_key="project",
                             peer_key="torch", agreement=rel_diff(fns["project"](), fns["torch"]().numpy()),
                             tolerance=tol, notes="no target stated; issue 14 lists 0.91 x (float64), "
                                                  "1.48 x (float32)"))
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes (about a minute)")
    parser.add_argument("--d", type=int, default=16, help="token dimension (default 16)")
    parser.add_argument("--m", type=int, default=64, help="random features (default 64)")
    parser.add_argument("--budget-mib", type=float, default=256.0,
                        help="memory budget for one field evaluation (default 256 MiB)")
    parser.add_argument("--time-cap", type=float, default=None,
                        help="largest time of one softmax evaluation to try (s; default 3 quick, 20 full)")
    parser.add_argument("--chunk", type=int, default=256, help="softmax block size (default 256)")
    args = parser.parse_args(argv)
    cap = args.time_cap if args.time_cap is not None else (3.0 if args.quick else 20.0)
    d, m, beta = args.d, args.m, 1.0
    rng = np.random.default_rng(0)
    threads = {k: os.environ.get(k, "unset") for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
    print(f"token-flow benchmark: d = {d}, FAVOR m = {m}, beta = {beta}, softmax chunk = {args.chunk}, "
          f"memory budget {args.budget_mib:g} MiB, softmax time cap {cap:g} s/eval, threads {threads}")

    fmap = make_feature_map("favor", d, m, omega_scale=math.sqrt(d), check_finite=False)
    lin = sphere_attention_flow(LinearKernel(fmap, fmap.init_omega(rng), input_scale=math.sqrt(beta)))
    soft = sphere_attention_flow(SoftmaxKernel(beta, chunk=args.chunk))
    dense = sphere_attention_flow(SoftmaxKernel(beta, chunk=None))

    n_lin = [10_000, 30_000, 100_000] if not args.quick else [10_000, 100_000]
    print("\nlinear attention (O(N m)):")
    print(f"{'N':>9} {'s/eval':>10} {'s/RK4 step':>11} {'peak MiB':>9} {'bytes/token':>12}")
    lin_rows = {}
    for n in n_lin:
        x = _sphere(rng, n, d)
        t = time_eval(lin, x, 3)
        ts = time_rk4_step(lin, x)
        mem = peak_memory(lambda: lin(x))
        lin_rows[n] = (t, mem)
        print(f"{n:9d} {t:10.4f} {ts:11.4f} {mem / MiB:9.1f} {mem / n:12.0f}")
    ns = np.array(sorted(lin_rows), dtype=float)
    mem_slope = np.polyfit(np.log(ns), np.log([lin_rows[n][1] for n in sorted(lin_rows)]), 1)[0]
    time_slope = np.polyfit(np.log(ns), np.log([lin_rows[n][0] for n in sorted(lin_rows)]), 1)[0]
    print(f"  fitted exponents: memory ~ N^{mem_slope:.2f}, time ~ N^{time_slope:.2f}")

    print(f"\nexact softmax, chunked (block {args.chunk}):")
    print(f"{'N':>9} {'s/eval':>10} {'peak MiB':>9} {'dense s/eval':>13} {'dense MiB':>10}")
    soft_rows = {}
    n = 1024
    budget = args.budget_mib * MiB
    while True:
        x = _sphere(rng, n, d)
        t = time_eval(soft, x, 1 if n > 8192 else 2)
        mem = peak_memory(lambda: soft(x))
        if mem > budget:
            print(f"{n:9d} {t:10.4f} {mem / MiB:9.1f}  over the memory budget: stop")
            break
        soft_rows[n] = (t, mem)
        dense_need = 3 * 8.0 * n * n          # scores, exp and a temporary, float64
        if dense_need <= budget:
            td = time_eval(dense, x, 2)
            md = peak_memory(lambda: dense(x))
            dtxt = f"{td:13.4f} {md / MiB:10.1f}"
        else:
            dtxt = f"{'-':>13} {'> budget':>10}"
        print(f"{n:9d} {t:10.4f} {mem / MiB:9.1f} {dtxt}")
        if t > cap / 4 or n >= max(n_lin):
            break
        n *= 2
    if not soft_rows:
        print(f"  no softmax size fits the memory budget ({args.budget_mib:g} MiB at N = 1024): no "
              f"softmax/linear ratio measured; raise --budget-mib")
        return 0
    n_max = max(soft_rows)
    ks = np.array(sorted(soft_rows), dtype=float)
    big = ks >= 2048
    fit_ks = ks[big] if big.sum() >= 2 else ks
    if fit_ks.size >= 2:
        sl = np.polyfit(np.log(fit_ks), np.log([soft_rows[int(k)][0] for k in fit_ks]), 1)[0]
        print(f"  fitted exponent: time ~ N^{sl:.2f} (N >= {int(fit_ks[0])}); largest N within the "
              f"caps: {n_max}")
    else:
        print(f"  one softmax size only (N = {n_max}): no exponent fitted; largest N within the caps: "
              f"{n_max}")
    print("  (the chunked softmax holds O(N d + chunk^2) memory, so the time cap, not the memory budget,"
          " bounds its N; the dense one needs 8 N^2 bytes per score matrix)")

    x = _sphere(rng, n_max, d)
    t_lin_same = time_eval(lin, x, 3)
    t_soft_same = soft_rows[n_max][0]
    n_big = max(n_lin)
    t_soft_big = t_soft_same * (n_big / n_max) ** 2
    print("\nratios (measured in this run):")
    print(f"  at N = {n_max}: softmax / linear time per evaluation = {t_soft_same / t_lin_same:.1f} "
          f"({t_soft_same:.4f} s / {t_lin_same:.4f} s)")
    print(f"  at N = {n_max}: softmax / linear peak memory = "
          f"{soft_rows[n_max][1] / max(1, peak_memory(lambda: lin(x))):.2f}")
    print(f"  at N = {n_big}: softmax (extrapolated as N^2 from N = {n_max}: {t_soft_big:.1f} s) / linear "
          f"({lin_rows[n_big][0]:.4f} s) = {t_soft_big / lin_rows[n_big][0]:.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
