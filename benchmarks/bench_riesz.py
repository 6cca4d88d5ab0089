"""Benchmark: Riesz energy + gradient, GEMM path vs Numba kernel vs NumPy reference (vs torch), one run.

Run from the repository root::

    python benchmarks/bench_riesz.py                 # 1 thread, default sizes
    python benchmarks/bench_riesz.py --md docs/results/bench_riesz.md --json docs/results/bench_riesz.json
    python benchmarks/bench_riesz.py --threads 2 --gemm-sizes 2000 10000 --k 3

Thread counts of BLAS/OpenMP/Numba (and torch) are pinned *before* NumPy and Numba are
imported. Every table times its implementations interleaved (A, B, A, B, ...; after one
untimed warm-up round that also compiles the Numba kernel) and reports the minimum and the
median of ``--k`` rounds and the ratios ``t_other / t_gemm`` (or ``t_numpy / t_numba``):
on a shared machine only these ratios are meaningful.

Tables:

1. ``d = --gemm-d`` (default 64, the main job's head dimension): ``method="gemm"`` against
   ``"numba"``, ``"numpy"`` (the chunked difference reference; only up to ``--numpy-max-n``, it
   is slow) and, if torch is importable (optional, never a dependency), a dense float64 torch
   computation (Gram matrix, full N x N weights, one process). Column ``max rel diff``: largest
   difference to the NumPy reference (or to Numba above ``--numpy-max-n``) of energy and
   gradient, relative to their largest entry.
2. The crossover in d (N = ``--crossover-n``, 256 and 2000 by default): Numba time over GEMM
   time; ``method="auto"`` takes GEMM for ``d >= GEMM_MIN_D``.
3. ``d = --d`` (default 2): Numba against the NumPy reference, with throughput in ordered
   pairs per second N(N-1)/t, for the kernel's exponent paths: s = 0 (log), odd integer s
   (one sqrt), half-integer s (two sqrt) and general s (pow).
4. ``d = 3``, ``s = 1`` (Coulomb), N = ``--keops-sizes``: the direct kernel against PyKeOps-CPU
   written as a KeOps user writes it (:data:`KEOPS_FORMULA`: factorised by
   ``.auto_factorize()`` on the expression), the same with the cube as ``** 3``
   (:data:`KEOPS_FORMULA_POW`, to show what ``pow`` costs) and row-blocked torch, when importable.
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
    parser.add_argument("--k", type=int, default=5, help="interleaved timing rounds (min and median reported)")
    parser.add_argument("--gemm-d", type=int, default=64, help="dimension of table 1 (default 64)")
    parser.add_argument("--gemm-sizes", type=int, nargs="+", default=[1000, 2000, 4000], help="N of table 1")
    parser.add_argument("--gemm-s", type=float, nargs="+", default=[0.0, 1.0, 0.7], help="s of tables 1 and 2")
    parser.add_argument("--numpy-max-n", type=int, default=2000, help="largest N timed with the NumPy reference")
    parser.add_argument("--crossover-d", type=int, nargs="+", default=[2, 4, 8, 12, 16, 24, 32, 64],
                        help="dimensions of table 2")
    parser.add_argument("--crossover-n", type=int, nargs="+", default=[256, 2000],
                        help="N of table 2 (256: the main job's particles per head)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[500, 1000, 2000, 4000], help="N of table 3")
    parser.add_argument("--d", type=int, default=2, help="dimension of table 3 (default 2)")
    parser.add_argument("--s", type=float, nargs="+", default=[0.0, 1.0, 2.5, 0.7], help="s of table 3")
    parser.add_argument("--keops-sizes", type=int, nargs="+", default=[2000, 6000, 20000],
                        help="N of table 4 (d = 3, s = 1: the direct kernel against PyKeOps-CPU and torch)")
    parser.add_argument("--keops-pow-max-n", type=int, default=6000,
                        help="largest N of table 4 timed with the 'pow' KeOps formula (cube as r**3)")
    parser.add_argument("--peer-rows", type=int, default=6000,
                        help="table 4: above this N the peers are timed on this many rows and scaled")
    parser.add_argument("--tables", type=int, nargs="+", default=[1, 2, 3, 4], choices=[1, 2, 3, 4],
                        help="tables to run (default all)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--md", default=None, help="also write the report (markdown) to this file")
    parser.add_argument("--json", default=None, help="also write the measurements (JSON) to this file")
    args = parser.parse_args(argv)
    sizes = args.sizes + args.gemm_sizes + args.crossover_n
    if min(args.threads, args.k, args.d, args.gemm_d, *args.crossover_d) < 1 or min(sizes) < 2:
        parser.error("--threads, --k and every dimension must be >= 1 and every size >= 2")
    return args


def torch_dense_sums(torch, x, s):
    """Riesz energy and gradient of the torch tensor ``x`` (N, d) by dense GEMMs, on its device.

    Gram-matrix form with full N x N weights; returns the (mean) energy and gradient tensors.
    Shared by the CPU peer below and by ``benchmarks/gpu.py`` (torch-CUDA).
    """
    sq = (x * x).sum(1)
    r2 = sq[:, None] + sq[None, :] - 2.0 * (x @ x.T)
    r2.fill_diagonal_(1.0)
    if s == 0.0:
        g, w = -0.5 * torch.log(r2), 1.0 / r2
    else:
        w = r2 ** (-0.5 * (s + 2.0))
        g = (w * r2) if s > 0 else -(w * r2)
    g.fill_diagonal_(0.0)
    w.fill_diagonal_(0.0)
    coef = 1.0 if s == 0.0 else abs(s)
    grads = -coef * (w.sum(1)[:, None] * x - w @ x)
    n = x.shape[0]
    return g.sum() / (2.0 * n * (n - 1)), grads / (n * (n - 1.0))


def torch_dense(torch, threads):
    """Energy-and-gradient row sums by dense torch float64 GEMMs (None if torch is absent)."""
    if torch is None:
        return None
    torch.set_num_threads(threads)

    def run(x_np, s):
        e, grads = torch_dense_sums(torch, torch.from_numpy(x_np), s)
        return float(e), grads.numpy()

    return run


def torch_blocked(torch, x_np, s, block=None):
    """Energy and gradient of :func:`riesz_energy_and_grad` by dense torch GEMMs over row blocks.

    The peer a torch user would write: ``r^2 = |x|^2 + |y|^2 - 2 x.y`` from a Gram block,
    elementwise kernel and weight, the gradient ``-c sum_l w_kl (x_k - x_l)`` as two GEMMs.
    Row blocks keep the memory at about ``block * N`` entries (full N x N when it is small).
    ``s = 1`` uses ``rsqrt`` (no ``pow``), ``s = 0`` the log kernel; other ``s`` use ``pow``.
    ``block``: rows per block (default: about 2^24 entries per block; :func:`tune_block` picks
    the fastest).
    """
    x = torch.from_numpy(x_np)
    n = x.shape[0]
    block = block or max(1, min(n, 2 ** 24 // n))
    sq = (x * x).sum(1)
    coef = 1.0 if s == 0.0 else abs(s)
    energy = 0.0
    grads = torch.empty_like(x)
    for i0 in range(0, n, block):
        i1 = min(n, i0 + block)
        xi = x[i0:i1]
        r2 = sq[i0:i1, None] + sq[None, :] - 2.0 * (xi @ x.T)
        rows = torch.arange(i1 - i0)
        r2[rows, rows + i0] = 1.0
        if s == 0.0:
            g, w = -0.5 * torch.log(r2), 1.0 / r2
        elif s == 1.0:
            g = torch.rsqrt(r2)
            w = g * g * g
        else:
            w = r2 ** (-0.5 * (s + 2.0))
            g = (w * r2) if s > 0 else -(w * r2)
        g[rows, rows + i0] = 0.0
        w[rows, rows + i0] = 0.0
        energy += float(g.sum())
        grads[i0:i1] = -coef * (w.sum(1)[:, None] * xi - w @ x)
    return energy / (2.0 * n * (n - 1)), (grads / (n * (n - 1.0))).numpy()


#: The KeOps peer's formula, as a KeOps user writes it (shown in the reports): one square root
#: per pair, its cube by multiplications, and the expression factorised by KeOps itself: the
#: ``LazyTensor.auto_factorize()`` method on the expression, before its reduction. Where the idiom
#: comes from: KeOps 2.3's CHANGELOG ("added support for intermediate variables in formulas
#: (factorize and auto_factorize methods of LazyTensor class)",
#: https://github.com/getkeops/keops/blob/v2.3/CHANGELOG.md), the method's docstring in
#: ``pykeops/common/lazy_tensor.py`` (v2.3) and KeOps' own use of it in
#: ``keopscore/sandbox/laplacian.py`` (``K(x - y).laplacian(x).auto_factorize().sum_reduction(axis=1)``).
#: The suite set the module flag ``keopscore.auto_factorize = True`` instead until a review found
#: that with it the generated C++ evaluated ``rsqrt`` once per occurrence of ``t`` (no
#: factorisation): the ratios measured against that peer overstated the project's speed-up.
#: ``tests/test_bench_peers.py`` keeps every KeOps reduction in benchmarks/ factorised.
KEOPS_FORMULA = ("D = x_i - x_j; t = D.sqnorm2().rsqrt(); t.concat(t*t*t*D).auto_factorize().sum(j)  "
                 "[pykeops.numpy LazyTensor; Rsqrt(0) = 0 drops k = l]")
#: The formula the suite used before issue 24, ``rinv ** 3`` (a libm ``pow`` per pair in KeOps'
#: generated code), now factorised as well: the column shows what ``** 3`` costs, nothing else.
KEOPS_FORMULA_POW = ("r = ((D**2).sum(-1)).rsqrt(); r.concat((r**3)*D).auto_factorize().sum(j)  "
                     "[pow for the cube]")


def keops_coulomb(x_np, formula="idiomatic", rows=None):
    """Energy and gradient of the s = 1 (Coulomb in 3-D) Riesz sums by PyKeOps ``LazyTensor`` reductions.

    ``formula="idiomatic"`` (:data:`KEOPS_FORMULA`): the squared distance's ``rsqrt`` once, its
    cube as ``t*t*t`` (KeOps emits ``pow`` for ``t**3``), the expression factorised by
    ``.auto_factorize()`` (KeOps then evaluates ``t`` once per pair); ``"pow"``
    (:data:`KEOPS_FORMULA_POW`): the cube as ``r**3`` (the formula this suite used before issue
    24), also factorised. KeOps' ``Rsqrt`` is 0 at 0, which removes the diagonal ``k = l``;
    energy and gradient come from one reduction of the concatenated (1 + d)-vector. ``rows``:
    reduce only the first ``rows`` particles' row sums (against all N columns; the work is
    proportional to ``rows``), for timing at large N.
    """
    import numpy as np
    from pykeops.numpy import LazyTensor

    n = x_np.shape[0]
    xi = LazyTensor(np.ascontiguousarray(x_np[:rows])[:, None, :])
    xj = LazyTensor(x_np[None, :, :])
    diff = xi - xj
    if formula == "idiomatic":
        t = diff.sqnorm2().rsqrt()
        # one pass: energy row sums and gradient; .auto_factorize(): t computed once per pair
        out = t.concat(t * t * t * diff).auto_factorize().sum(axis=1)
    elif formula == "pow":
        rinv = (diff ** 2).sum(-1).rsqrt()
        out = rinv.concat((rinv ** 3) * diff).auto_factorize().sum(axis=1)
    else:
        raise ValueError(f"formula must be 'idiomatic' or 'pow', got {formula!r}")
    return float(out[:, 0].sum()) / (2.0 * n * (n - 1)), -out[:, 1:] / (n * (n - 1.0))


def tune_block(torch, x_np, s, candidates=(16, 32, 64, 128, 256, 512)):
    """The row-block size at which :func:`torch_blocked` is fastest for this input (the best of two timed calls each).

    Large blocks make torch slow (allocating and touching N x N temporaries): a fair peer is
    given its best block.
    """
    best, best_t = None, float("inf")
    for b in sorted({min(c, x_np.shape[0]) for c in candidates}):
        torch_blocked(torch, x_np, s, b)                   # warm (allocator, caches)
        for _ in range(2):                                 # the better of two calls: less load noise
            t0 = time.perf_counter()
            torch_blocked(torch, x_np, s, b)
            t = time.perf_counter() - t0
            if t < best_t:
                best, best_t = b, t
    return best


def suite_rows(k: int = 5, quick: bool = False) -> list:
    """Rows of the benchmark suite (``python -m benchmarks``; contract in ``benchmarks/suite.py``).

    * d = 3, s = 1, N = 2000, 6000, 20000 (quick: 400): ``riesz_energy_and_grad`` (method
      "auto": the Numba kernel) against PyKeOps-CPU and a row-blocked dense torch float64
      computation (block size tuned for torch first), all three timed interleaved; no target
      (the issue lists the ratios).
    * d = 64 (the main job's head dimension), s = 0 (the main job's) and 1, N = 2000, 4000,
      10000 (quick: 300): method "auto" (the GEMM path) against dense torch; target 1.0 (at
      least as fast as torch).

    Float64 throughout; thread counts as pinned by the suite. ``agreement``: largest difference
    of energy and gradient, relative to the largest entry.
    """
    from _interleave import interleaved
    from suite import make_row, optional_peer, rel_diff, skipped_row, suite_threads

    import numpy as np

    from rieszflow.engine.energy import riesz_energy_and_grad

    torch, why_torch = optional_peer("torch")
    keops, why_keops = optional_peer("pykeops")
    rng = np.random.default_rng(0)
    rows = []

    def agree(a, b):
        return rel_diff([(a[0], b[0]), (a[1], b[1])], None)

    for n in ([400] if quick else [2000, 6000, 20000]):
        x = rng.normal(size=(n, 3))
        measure = f"Riesz energy+grad d=3 N={n} s=1 float64"
        fns = {"project": lambda x=x: riesz_energy_and_grad(x, 1.0)}
        if keops is not None:
            fns["keops"] = lambda x=x: keops_coulomb(x)
        if torch is not None:
            blk3 = tune_block(torch, x, 1.0)
            fns["torch"] = lambda x=x, b=blk3: torch_blocked(torch, x, 1.0, b)
        if len(fns) == 1:
            rows += [skipped_row(measure, "numba (auto)", "PyKeOps-CPU", why_keops),
                     skipped_row(measure, "numba (auto)", "torch dense", why_torch)]
            continue
        st = interleaved(fns, k)
        ref = fns["project"]()
        for key, peer, why in (("keops", "PyKeOps-CPU", why_keops), ("torch", "torch dense", why_torch)):
            if key not in fns:
                rows.append(skipped_row(measure, "numba (auto)", peer, why))
                continue
            if key == "keops":
                target, notes = 0.5, ("issue 24: the pair-once direct kernel at least 2 x faster; peer formula: "
                                      + KEOPS_FORMULA)
            else:
                target, notes = None, f"no target stated; torch in row blocks of {blk3} (tuned)"
            rows.append(make_row(measure, "numba (auto)", peer, st, project_key="project", peer_key=key,
                                 agreement=agree(ref, fns[key]()), tolerance=1e-10, target=target, notes=notes))
    cases = [(300, 0.0), (300, 1.0)] if quick else [(n, s) for n in (2000, 4000, 10000) for s in (0.0, 1.0)]
    for n, s in cases:
        measure = f"Riesz energy+grad d=64 N={n} s={s:g} float64"
        if torch is None:
            rows.append(skipped_row(measure, "gemm (auto)", "torch dense", why_torch))
            continue
        x = rng.normal(size=(n, 64))
        blk = tune_block(torch, x, s)
        fns = {"project": lambda x=x, s=s: riesz_energy_and_grad(x, s),
               "torch": lambda x=x, s=s, b=blk: torch_blocked(torch, x, s, b)}
        st = interleaved(fns, k)
        rows.append(make_row(measure, "gemm (auto)", "torch dense", st, project_key="project",
                             peer_key="torch", target=1.0, agreement=agree(fns["project"](), fns["torch"]()),
                             tolerance=1e-10, notes=f"GEMM formulation both; torch in row blocks of {blk} "
                                                    f"(tuned); {suite_threads()} thread(s)"))
    return rows


def table_peers_d3(args, md, payload, rng, torch):
    """Table 4: d = 3, s = 1, the direct kernel against PyKeOps-CPU (factorised; cube by products or pow) and torch."""
    import numpy as np
    from _interleave import interleaved, ratio

    from rieszflow.engine.energy import riesz_energy_and_grad

    try:
        import pykeops
        pykeops.set_verbose(False)
    except ImportError as exc:
        pykeops = None
        why = f"pykeops is not importable ({exc})"
    md.append("\n## 4. The direct d = 3 kernel (s = 1) against PyKeOps-CPU and torch\n")
    md.append("Ratios t_peer / t_project (> 1: the project faster) of the minima and of the medians of the "
              "interleaved rounds (3 rounds at N > 6000); float64, one process. The project: "
              "`riesz_energy_and_grad(x, 1.0)` (method \"auto\": the Numba kernel, each unordered pair once, "
              "1/sqrt by a bit estimate and Newton steps). Peers:\n")
    md.append(f"* `keops`: {KEOPS_FORMULA}")
    md.append(f"* `keops pow`: the cube as `r**3` (the suite's earlier formula), also factorised: "
              f"{KEOPS_FORMULA_POW} (only N <= {args.keops_pow_max_n})")
    md.append("* `torch`: `torch_blocked` (Gram-matrix blocks, `rsqrt` then `g*g*g`, row block tuned for torch)"
              + ("" if torch is not None else " - torch is not importable here") + "\n")
    if pykeops is None:
        md.append(f"PyKeOps skipped: {why}.\n")
    md.append(f"Above N = {args.peer_rows} the peers reduce only the first {args.peer_rows} rows (against all N "
              "columns; their work is proportional to the rows) and their times are scaled by N / rows; the "
              "agreement is then over those rows' gradients.\n")
    md.append("| N | peer rows | project min [s] | project pairs/s | keops/project min | keops/project median | keops pow/project "
              "min | keops pow/project median | torch/project min | torch/project median | max rel diff |")
    md.append("|" + "---|" * 11)
    blk = None
    for n in args.keops_sizes:
        x = rng.normal(size=(n, 3))
        rows = n if n <= args.peer_rows else args.peer_rows   # the peers on the first rows only, scaled
        scale = n / rows
        fns = {"project": lambda x=x: riesz_energy_and_grad(x, 1.0)}
        if pykeops is not None:
            fns["keops"] = lambda x=x, r=rows: keops_coulomb(x, "idiomatic", r)
            if n <= args.keops_pow_max_n:
                fns["keops_pow"] = lambda x=x, r=rows: keops_coulomb(x, "pow", r)
        if torch is not None:
            if rows == n or blk is None:
                blk = tune_block(torch, x[:rows], 1.0)       # at large N: the block tuned at the last N
            fns["torch"] = lambda x=x, b=blk, r=rows: torch_rows(torch, x, r, b)
        results = {m: f() for m, f in fns.items()}         # untimed warm-up, and the agreement
        ref = results["project"]
        diff = 0.0
        for m, res in results.items():
            g = res[1] if m == "project" else np.asarray(res[1])
            gref = ref[1][:g.shape[0]]
            diff = max(diff, float(np.abs(g - gref).max() / np.abs(gref).max()))
            if m == "project" or rows == n:
                diff = max(diff, abs(res[0] - ref[0]) / abs(ref[0]))
        st = interleaved(fns, args.k if n <= 6000 else min(args.k, 3), warmup=0)
        for m in st:
            if m != "project":
                for q in ("min", "median"):
                    st[m][q] *= scale
        row = {"N": n, "peer_rows": rows, "max_rel_diff": diff,
               **{f"{m}_{q}": st[m][q] for m in fns for q in ("min", "median")}}
        cells = []
        for m in ("keops", "keops_pow", "torch"):
            if m in fns:
                r = ratio(st, m, "project")
                row[f"{m}_over_project"] = r
                cells.append(f"{r[0]:.2f} | {r[1]:.2f}")
            else:
                cells.append("- | -")
        payload["peers_d3"].append(row)
        md.append(f"| {n} | {rows} | {st['project']['min']:.4f} | {n * (n - 1) / st['project']['min']:.3e} | "
                  + " | ".join(cells) + f" | {diff:.1e} |")


def torch_rows(torch, x_np, rows, block):
    """Row sums of the first ``rows`` particles by :func:`torch_blocked`'s formula (for timing at large N).

    Returns the unnormalised energy row sum and the gradient rows, normalised as
    :func:`torch_blocked` (``1/(2N(N-1))`` and ``1/(N(N-1))``).
    """
    if rows == x_np.shape[0]:
        return torch_blocked(torch, x_np, 1.0, block)
    x = torch.from_numpy(x_np)
    n = x.shape[0]
    sq = (x * x).sum(1)
    energy = 0.0
    grads = torch.empty((rows, x.shape[1]), dtype=x.dtype)
    for i0 in range(0, rows, block):
        i1 = min(rows, i0 + block)
        xi = x[i0:i1]
        r2 = sq[i0:i1, None] + sq[None, :] - 2.0 * (xi @ x.T)
        idx = torch.arange(i1 - i0)
        r2[idx, idx + i0] = 1.0
        g = torch.rsqrt(r2)
        w = g * g * g
        g[idx, idx + i0] = 0.0
        w[idx, idx + i0] = 0.0
        energy += float(g.sum())
        grads[i0:i1] = -(w.sum(1)[:, None] * xi - w @ x)
    return energy / (2.0 * n * (n - 1)), (grads / (n * (n - 1.0))).numpy()


def main(argv=None) -> int:
    args = parse_args(argv)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # run from a checkout
    from _interleave import interleaved, provenance, ratio, write_outputs

    import numba
    import numpy as np

    from rieszflow.engine.energy import riesz_energy_and_grad
    from rieszflow.engine.energy.riesz import GEMM_MIN_D

    try:
        import torch
    except ImportError:
        torch = None
    dense = torch_dense(torch, args.threads)
    numba.set_num_threads(args.threads)
    t_start = time.perf_counter()
    prov = provenance(args.threads)
    rng = np.random.default_rng(args.seed)

    def call(method, x, s):
        return lambda: riesz_energy_and_grad(x, s, method=method)

    def rel_diff(a, b):
        (ea, ga), (eb, gb) = a, b
        return max(abs(float(ea) - float(eb)) / abs(float(eb)), float(np.abs(ga - gb).max() / np.abs(gb).max()))

    md, payload = [], {"gemm": [], "crossover": [], "numba_vs_numpy": [], "peers_d3": [], "torch": torch is not None}
    # ---- table 1
    if 1 in args.tables:
        d = args.gemm_d
        md.append(f"## 1. GEMM path against Numba, NumPy{' and torch' if dense else ''} at d = {d}\n")
        md.append("Time ratios t_other / t_gemm (> 1: GEMM faster), of the minima and of the medians of "
                  f"{args.k} interleaved rounds; float64, {args.threads} thread(s)."
                  + ("" if dense else " torch is not importable in this environment (optional extra): no torch "
                                      "column.") + "\n")
        cols = ["numba", "numpy"] + (["torch"] if dense else [])
        md.append("| N | s | gemm min [s] | gemm median [s] | " + " | ".join(f"{c}/gemm min | {c}/gemm median"
                                                                         for c in cols) + " | max rel diff |")
        md.append("|" + "---|" * (5 + 2 * len(cols)))
        for n in args.gemm_sizes:
            x = rng.normal(size=(n, d))
            for s in args.gemm_s:
                fns = {"gemm": call("gemm", x, s), "numba": call("numba", x, s)}
                if n <= args.numpy_max_n:
                    fns["numpy"] = call("numpy", x, s)
                if dense:
                    fns["torch"] = (lambda x=x, s=s: dense(x, s))
                st = interleaved(fns, args.k)
                ref = fns["numpy"]() if "numpy" in fns else fns["numba"]()
                diff = max(rel_diff(fns[m](), ref) for m in fns)
                row = {"N": n, "d": d, "s": s, "max_rel_diff": diff, "reference": "numpy" if "numpy" in fns else "numba",
                       **{f"{m}_{q}": st[m][q] for m in fns for q in ("min", "median")}}
                cells = []
                for c in cols:
                    if c in fns:
                        r = ratio(st, c, "gemm")
                        row[f"{c}_over_gemm"] = r
                        cells.append(f"{r[0]:.2f} | {r[1]:.2f}")
                    else:
                        cells.append("- | -")
                payload["gemm"].append(row)
                md.append(f"| {n} | {s:g} | {st['gemm']['min']:.4f} | {st['gemm']['median']:.4f} | "
                          + " | ".join(cells) + f" | {diff:.1e} |")
    # ---- table 2
    if 2 in args.tables:
        md.append("\n## 2. Crossover in d: t_numba / t_gemm\n")
        md.append(f"`method=\"auto\"` uses GEMM for d >= GEMM_MIN_D = {GEMM_MIN_D} (> 1: GEMM faster).\n")
        md.append("| N | d | " + " | ".join(f"s = {s:g} min | s = {s:g} median" for s in args.gemm_s) + " | auto |")
        md.append("|" + "---|" * (3 + 2 * len(args.gemm_s)))
        for n in args.crossover_n:
            for dd in args.crossover_d:
                x = rng.normal(size=(n, dd))
                cells = []
                for s in args.gemm_s:
                    st = interleaved({"gemm": call("gemm", x, s), "numba": call("numba", x, s)},
                                     args.k * max(1, (2000 // n) ** 2 // 4))   # more rounds for small N
                    r = ratio(st, "numba", "gemm")
                    payload["crossover"].append({"N": n, "d": dd, "s": s, "numba_over_gemm": r,
                                                 **{f"{m}_{q}": st[m][q] for m in st for q in ("min", "median")}})
                    cells.append(f"{r[0]:.2f} | {r[1]:.2f}")
                md.append(f"| {n} | {dd} | " + " | ".join(cells) + f" | {'gemm' if dd >= GEMM_MIN_D else 'numba'} |")
    # ---- table 3
    if 3 in args.tables:
        md.append(f"\n## 3. Numba kernel against the NumPy reference at d = {args.d}\n")
        md.append("Throughput in ordered pairs per second N(N-1)/t (from the minimum); ratio t_numpy / t_numba.\n")
        md.append("| N | s | numpy min [s] | numba min [s] | numpy pairs/s | numba pairs/s | numpy/numba min "
                  "| numpy/numba median | max rel diff |")
        md.append("|" + "---|" * 9)
        for n in args.sizes:
            x = rng.normal(size=(n, args.d))
            pairs = n * (n - 1)
            for s in args.s:
                fns = {"numpy": call("numpy", x, s), "numba": call("numba", x, s)}
                st = interleaved(fns, args.k)
                r = ratio(st, "numpy", "numba")
                diff = rel_diff(fns["numba"](), fns["numpy"]())
                payload["numba_vs_numpy"].append({"N": n, "d": args.d, "s": s, "numpy_over_numba": r, "max_rel_diff": diff,
                                                  **{f"{m}_{q}": st[m][q] for m in st for q in ("min", "median")}})
                md.append(f"| {n} | {s:g} | {st['numpy']['min']:.4f} | {st['numba']['min']:.4f} | "
                          f"{pairs / st['numpy']['min']:.3e} | {pairs / st['numba']['min']:.3e} | {r[0]:.1f} | "
                          f"{r[1]:.1f} | {diff:.1e} |")
    # ---- table 4
    if 4 in args.tables:
        table_peers_d3(args, md, payload, rng, torch)
    wall = time.perf_counter() - t_start
    command = "python benchmarks/bench_riesz.py " + " ".join(sys.argv[1:] if argv is None else argv)
    write_outputs(args, "Results: benchmarks/bench_riesz.py", command.strip(), prov, wall,
                  "\n".join(md) + "\n", payload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
