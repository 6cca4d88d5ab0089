"""Benchmark: 2 threads against 1, quiet and with a competing process, under the thread policy.

Run from the repository root::

    python benchmarks/bench_threads.py                  # main-job sizes, k = 5 rounds
    python benchmarks/bench_threads.py --quick          # --smoke sizes, seconds
    python benchmarks/bench_threads.py --md docs/results/bench_threads.md --json docs/results/bench_threads.json

For each operation (the main job's Phase A step, Phase B train step and evaluation pass; the
Riesz sums through the GEMM path at d = 64 and through the Numba kernel at d = 3; the RFF
alignment potential) it times, round-robin in one process on the same inputs:

* ``policy@2``: ``engine.threads.configure_threads(2)``, i.e. what ``rieszflow --threads 2``
  (the default on 2 cores) runs: one BLAS thread, Numba threads only for large calls;
* ``1 thread``: ``configure_threads(1)``;
* ``naive@2``: 2 BLAS threads and 2 Numba threads for every call (the old ``make run``).

first on the machine as it is ("quiet"), then again while a competing CPU-bound process that
this benchmark starts (``python -c 'while True: pass'``) runs ("loaded"). The issue's goal:
with a competing process, ``policy@2`` is never slower than ``1 thread`` (ratio <= 1 within
noise). The ``naive@2`` rows are the evidence behind the policy (engine/threads.py).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

CONFIGS = ("policy@2", "1 thread", "naive@2")


def _operations(quick: bool, seed: int = 0):
    """The operations to time: name -> (callable, numba work units or None)."""
    import numpy as np

    from rieszflow.engine.attention.data import batches
    from rieszflow.engine.attention.loss import softmax_cross_entropy
    from rieszflow.engine.energy.alignment import alignment_potential_and_grad
    from rieszflow.engine.energy.riesz import riesz_energy_and_grad
    from rieszflow.learning.config import SMOKE_OVERRIDES, MainJobConfig
    from rieszflow.learning.train import ALIGNMENTS, MainJob, alignment_gradients

    cfg = MainJobConfig().replace(**SMOKE_OVERRIDES) if quick else MainJobConfig()
    mj = MainJob(cfg, os.devnull)
    mj._build()
    mj.trainable = [k for k in mj.model.params if k not in set(mj.omega_names)]
    opt = mj._optimizer()
    ids, mask, labels, _ = next(batches(mj.train, cfg.batch_size, rng=np.random.default_rng(seed),
                                        pad_id=mj.tok.pad_id))
    ev = next(batches(mj.val, 256, pad_id=mj.tok.pad_id))
    rng = np.random.default_rng(seed)

    def phase_b():
        logits = mj.model.forward(ids, mask, train=True, rng=rng)
        _, dl, _ = softmax_cross_entropy(logits, labels)
        opt.step(mj.model.backward(dl, wrt=mj.trainable))

    def phase_a():
        alignment_gradients(mj.model, ids, mask, labels, ALIGNMENTS[cfg.alignment], mj.omega_names)
        for n in mj.omega_names:
            for h in range(mj.model.params[n].shape[0]):
                riesz_energy_and_grad(mj.model.params[n][h], cfg.s)

    def evaluate():
        mj.model.forward(ev[0], ev[1], train=False, rng=None)

    size = "smoke" if quick else "default"
    ops = {f"main job Phase A step ({size} config)": phase_a,
           f"main job Phase B train step ({size} config)": phase_b,
           f"main job evaluation, batch 256 ({size} config)": evaluate}
    for N in ((500,) if quick else (1000, 4000)):
        x = rng.standard_normal((N, 64))
        ops[f"Riesz GEMM path d=64 N={N}"] = lambda x=x: riesz_energy_and_grad(x, 0.0, method="gemm")
    for N in ((1000,) if quick else (1000, 12000)):
        x = rng.standard_normal((N, 3))
        ops[f"Riesz Numba kernel d=3 N={N}"] = lambda x=x: riesz_energy_and_grad(x, 1.0, method="numba")
    n, N = (1000, 100) if quick else (10000, 1000)
    om, X, y = rng.standard_normal((N, 64)), rng.standard_normal((n, 64)), np.sign(rng.standard_normal(n))
    ops[f"RFF alignment potential n={n} N={N} d=64"] = lambda: alignment_potential_and_grad(om, X, y)
    return ops


@contextlib.contextmanager
def _config(name):
    """Apply one thread configuration for the duration of the block."""
    import numba
    from threadpoolctl import threadpool_limits

    from rieszflow.engine import threads

    saved_rules = dict(threads.THREAD_RULES)
    try:
        if name == "policy@2":
            threads.configure_threads(2)
        elif name == "1 thread":
            threads.configure_threads(1)
        else:                                   # naive: every call on 2 threads
            threads.configure_threads(2)
            for key, rule in threads.THREAD_RULES.items():
                threads.THREAD_RULES[key] = threads.ThreadRule(
                    blas=2, numba_min_work=0.0 if rule.numba_min_work is not None else None,
                    units=rule.units, evidence=rule.evidence)
            threadpool_limits(2, user_api="blas")
        numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS) if name != "1 thread" else 1)
        yield
    finally:
        threads.THREAD_RULES.clear()
        threads.THREAD_RULES.update(saved_rules)


#: shortest timed sample: fast operations are repeated until one sample lasts this long
MIN_SAMPLE_S = 0.05
#: untimed pause after switching configurations (OpenBLAS threads spin for a while after a call)
SETTLE_S = 0.5


def _time(ops, k):
    """Round-robin over the configurations: min and median seconds per call, per (op, config)."""
    reps = {}
    for name in CONFIGS:                        # warm-up (JIT, caches), untimed; calibrates reps
        with _config(name):
            for op, f in ops.items():
                t0 = time.perf_counter()
                f()
                dt = time.perf_counter() - t0
                reps[op] = max(reps.get(op, 1), min(50, int(MIN_SAMPLE_S / max(dt, 1e-6)) + 1))
    times = {(op, c): [] for op in ops for c in CONFIGS}
    for i in range(k):
        # the order alternates between rounds (forward, reversed, ...): a configuration that
        # leaves spinning BLAS threads behind does not always precede the same one
        for c in (CONFIGS if i % 2 == 0 else CONFIGS[::-1]):
            with _config(c):
                time.sleep(SETTLE_S)
                for op, f in ops.items():
                    t0 = time.perf_counter()
                    for _ in range(reps[op]):
                        f()
                    times[(op, c)].append((time.perf_counter() - t0) / reps[op])
    return {key: (min(t), statistics.median(t)) for key, t in times.items()}


@contextlib.contextmanager
def competing_process():
    """A CPU-bound Python process for the duration of the block (killed afterwards)."""
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    time.sleep(0.5)
    try:
        yield hog.pid
    finally:
        hog.kill()
        hog.wait()


def measure(k=5, quick=False):
    """Both conditions: ``{"quiet": times, "loaded": times}`` (see :func:`_time`)."""
    ops = _operations(quick)
    out = {"quiet": _time(ops, k)}
    with competing_process():
        out["loaded"] = _time(ops, k)
    return ops, out


def _rows(ops, out, k):
    rows = []
    for cond in ("loaded", "quiet"):
        t = out[cond]
        for op in ops:
            for proj, target in (("policy@2", 1.0 if cond == "loaded" else None), ("naive@2", None)):
                (pmin, pmed), (qmin, qmed) = t[(op, proj)], t[(op, "1 thread")]
                rows.append({"measure": f"{op}, {cond}" + (" (1 competing process)" if cond == "loaded" else ""),
                             "project": proj, "peer": "1 thread",
                             "project_min_s": pmin, "project_median_s": pmed,
                             "peer_min_s": qmin, "peer_median_s": qmed,
                             "ratio_min": pmin / qmin, "ratio_median": pmed / qmed,
                             "target": target, "agreement": None, "threads": 2,
                             "notes": f"k={k}; {proj}: " + ("the policy of engine/threads.py" if proj == "policy@2"
                                                            else "2 BLAS + 2 Numba threads for every call")})
    return rows


def suite_rows(k: int = 5, quick: bool = False) -> list[dict]:
    """Rows of the benchmark suite (contract: ``benchmarks/README.md``).

    Parameters
    ----------
    k : int
        Timing rounds per configuration and condition.
    quick : bool
        ``--smoke`` sizes (seconds) instead of the main job's default sizes.

    Returns
    -------
    list of dict
        One row per operation, condition (loaded / quiet) and 2-thread configuration against
        one thread; ``target`` 1.0 on the loaded ``policy@2`` rows.
    """
    ops, out = measure(k, quick)
    return _rows(ops, out, k)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, default=5, help="timing rounds (min and median reported)")
    parser.add_argument("--quick", action="store_true", help="--smoke sizes (seconds)")
    parser.add_argument("--md", default=None, help="also write the report (markdown) to this file")
    parser.add_argument("--json", default=None, help="also write the measurements (JSON) to this file")
    args = parser.parse_args(argv)
    if args.k < 1:
        parser.error("--k must be >= 1")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _interleave import provenance, write_outputs

    prov = provenance(2)
    t0 = time.perf_counter()
    rows = suite_rows(args.k, args.quick)
    lines = ["| operation, condition | 2-thread configuration | time / time with 1 thread (min) | (median) |",
             "| --- | --- | --- | --- |"]
    lines += [f"| {r['measure']} | {r['project']} | {r['ratio_min']:.2f} | {r['ratio_median']:.2f} |" for r in rows]
    body = "\n".join(lines) + "\n"
    command = " ".join(["python benchmarks/bench_threads.py", *(argv if argv is not None else sys.argv[1:])])
    write_outputs(args, "2 threads against 1, quiet and loaded", command, prov, time.perf_counter() - t0, body, {"rows": rows})


if __name__ == "__main__":
    main()
