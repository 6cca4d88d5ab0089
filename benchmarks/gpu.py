"""Every GPU measurement of rieszflow in one command (issue 14, item 6: a host-light GPU path).

A GPU is rarely lent to this project; when one is, run from the repository root::

    python benchmarks/gpu.py --md docs/results/gpu.md --json docs/results/gpu.json
    python benchmarks/gpu.py --quick           # small sizes, well under a minute of GPU time

Without CuPy or a usable CUDA device it prints one line (``no CUDA device``) to stderr, writes
nothing and exits with status 2 (``tests/test_host_transfers.py`` checks that path).

What it measures, in this order (each section is independent: a failure is reported in the
output and the next section still runs, so a scarce GPU session is never wasted):

1. **Correctness on the device.** The fused CuPy Riesz kernel (``method="fused"``, the default
   on CuPy) against the NumPy reference, d = 3 and 64, several s, float64 and float32: largest
   relative difference of energy and gradient.
2. **Riesz energy + gradient timings**, interleaved: fused kernel vs the CuPy GEMM path, vs a
   dense torch-CUDA computation (if torch with CUDA is importable), and vs the CPU
   (``method="auto"``, ``--threads`` threads).
3. **Main job steps per second**, CuPy vs NumPy (CPU), interleaved epochs of Phase A (projected
   Langevin on the particles) and Phase B (Adam), main-job sizes (``--quick``: smoke sizes).
4. **Host synchronisations per step** of Phase A and Phase B, counted through the backend's
   counting arrays (the same loop code as on CuPy; see ``engine.backend.count_host_transfers``).
5. **The main job** ``rieszflow run --smoke --backend cupy``: wall time (and the NumPy run's),
   and whether its recorded metrics and trajectories equal the NumPy run's.

Timing rows follow the benchmark suite's row format (``measure``, ``project``, ``peer``,
``*_min_s``, ``*_median_s``, ``ratio_min``, ``ratio_median`` (< 1: project faster),
``target``, ``agreement``, ``threads``, ``notes``); :func:`suite_rows` returns them (an empty
list without a GPU). GPU times are taken after a device synchronisation.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NO_DEVICE = "no CUDA device (CuPy is not installed or no GPU answers); nothing was measured"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="CPU threads of the CPU peers (default 1)")
    parser.add_argument("--k", type=int, default=5, help="interleaved timing rounds (min and median reported)")
    parser.add_argument("--quick", action="store_true", help="small sizes (well under a minute)")
    parser.add_argument("--md", default=None, help="also write the report (markdown) to this file")
    parser.add_argument("--json", default=None, help="also write the measurements (JSON) to this file")
    args = parser.parse_args(argv)
    if args.threads < 1 or args.k < 1:
        parser.error("--threads and --k must be >= 1")
    return args


def _pin_threads(threads):
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ[var] = str(threads)


def _row(measure, project, peer, stats, agreement=None, target=None, threads=1, notes=""):
    """One row of the suite contract from two entries of ``interleaved``."""
    p, q = stats[project], stats[peer]
    return {"measure": measure, "project": project, "peer": peer,
            "project_min_s": p["min"], "project_median_s": p["median"],
            "peer_min_s": q["min"], "peer_median_s": q["median"],
            "ratio_min": p["min"] / q["min"], "ratio_median": p["median"] / q["median"],
            "target": target, "agreement": agreement, "threads": threads, "notes": notes}


def _rel_diff(a, b):
    """Largest relative difference of (energy, gradient) pairs, host arrays."""
    import numpy as np

    (ea, ga), (eb, gb) = a, b
    return max(abs(float(ea) - float(eb)) / max(abs(float(eb)), 1e-300),
               float(np.max(np.abs(ga - gb)) / max(np.max(np.abs(gb)), 1e-300)))


# --------------------------------------------------------------------------- sections

def riesz_correctness(quick, n=None):
    """Fused CuPy kernel vs the NumPy reference (``n`` particles; default by ``quick``)."""
    import numpy as np

    from rieszflow.engine.backend import get_backend, to_numpy
    from rieszflow.engine.energy.riesz import riesz_energy_and_grad

    out = []
    n = n or (300 if quick else 1000)
    for dtype in ("float64", "float32"):
        be = get_backend("cupy", dtype)
        for d in (3, 64):
            for s in (-1.0, 0.0, 1.0, 2.5):
                x = np.random.default_rng(d).normal(size=(n, d)).astype(dtype)
                ref = riesz_energy_and_grad(x.astype(np.float64), s, method="numpy")
                e, g = riesz_energy_and_grad(be.asarray(x), s, method="fused")
                diff = _rel_diff((float(e), to_numpy(g).astype(np.float64)), ref)
                out.append({"dtype": dtype, "d": d, "s": s, "n": n, "max_rel_diff": diff,
                            "ok": diff <= (1e-12 if dtype == "float64" else 1e-6)})
    return out


def synced_riesz(be, xg, s, method):
    """A no-argument call of ``riesz_energy_and_grad(xg, s, method=method)`` that returns after a
    device synchronisation (what the GPU timings time); shared with ``gpu_crossover.py``."""
    from rieszflow.engine.energy.riesz import riesz_energy_and_grad

    def f():
        out = riesz_energy_and_grad(xg, s, method=method)
        be.synchronize()
        return out
    return f


def riesz_rows(k, quick, threads, sizes=None):
    """Fused vs GEMM (CuPy), vs torch CUDA dense, vs the CPU; ``sizes``: (d, N) pairs."""
    import numpy as np

    from _interleave import interleaved
    from rieszflow.engine.backend import get_backend, to_numpy
    from rieszflow.engine.energy.riesz import riesz_energy_and_grad

    be = get_backend("cupy")
    try:
        import torch

        torch_cuda = torch if torch.cuda.is_available() else None
    except ImportError:
        torch_cuda = None
    rows = []
    if sizes is None:
        sizes = [(64, 2000), (3, 2000)] if quick else [(64, 4000), (64, 20000), (16, 20000), (3, 20000)]
    for d, n in sizes:
        for s in (0.0, 1.0):
            x = np.random.default_rng(n + d).normal(size=(n, d))
            xg = be.asarray(x)

            fns = {"cupy fused": synced_riesz(be, xg, s, "fused"), "cupy gemm": synced_riesz(be, xg, s, "gemm")}
            if torch_cuda is not None and n <= 10000:
                fns["torch cuda dense"] = _torch_dense(torch_cuda, x, s)
            if n <= 4000:
                fns[f"numpy auto (CPU, {threads} thread)"] = lambda x=x, s=s: riesz_energy_and_grad(x, s)
            host = {}
            for name, f in fns.items():
                r = f()
                e, g = f.host(r) if hasattr(f, "host") else (float(to_numpy(r[0])), to_numpy(r[1]))
                host[name] = (e, np.asarray(g, dtype=np.float64))
            stats = interleaved(fns, k)
            measure = f"Riesz energy+grad d={d} N={n} s={s:g} float64"
            for peer in fns:
                if peer == "cupy fused":
                    continue
                rows.append(_row(measure, "cupy fused", peer, stats,
                                 agreement=_rel_diff(host["cupy fused"], host[peer]), threads=threads,
                                 notes="GPU times after a device synchronisation"))
    return rows


def _torch_dense(torch, x_np, s):
    """Dense float64 torch-CUDA energy and gradient (Gram matrix, full N x N weights)."""
    from bench_riesz import torch_dense_sums       # the CPU peer's formula, on the device

    x = torch.from_numpy(x_np).cuda()

    def run():
        out = torch_dense_sums(torch, x, s)
        torch.cuda.synchronize()
        return out

    def host(out):
        return float(out[0]), out[1].cpu().numpy()

    run.host = host
    return run


class _StubWriter:
    def append(self, dim, data, coord=None):
        pass

    def length(self, dim):
        return 0


def _main_job(backend, quick, counting=False, steps=8):
    """A built main job ready to run Phase A / Phase B epochs of ``steps`` batches."""
    from rieszflow.engine.backend import get_backend
    from rieszflow.learning.config import SMOKE_OVERRIDES, MainJobConfig
    from rieszflow.learning.train import MainJob

    base = dict(SMOKE_OVERRIDES) if quick else {}
    batch = base.get("batch_size", 64)
    cfg = MainJobConfig(**{**base, "backend": backend, "train_limit": batch * steps, "eval_limit": 64,
                           "checkpoint_seconds": 1e9})
    job = MainJob(cfg, Path(tempfile.gettempdir()) / "rieszflow_gpu_bench.h5", quiet=True)
    job._build()
    if counting:
        be = get_backend("numpy", cfg.dtype, count_transfers=True)
        job.backend = job.model.backend = be
        job.model.params = {k: be.asarray(v, dtype=v.dtype) for k, v in job.model.params.items()}
        for fmap in job.model.feature_maps:
            fmap.check_finite = False                 # as MainJobConfig.feature_options() on CuPy
    job.step_a = 0
    job.elapsed = {"phase_a": 0.0, "phase_b": 0.0}
    job.trainable = [k for k in job.model.params if k not in set(job.omega_names)]
    return job, job._optimizer(), cfg


def phase_rows(k, quick, threads):
    """Phase A and Phase B steps per second, CuPy vs NumPy, interleaved epochs."""
    from _interleave import interleaved

    steps = 4 if quick else 8
    jobs = {name: _main_job(name, quick, steps=steps) for name in ("cupy", "numpy")}
    w = _StubWriter()
    rows = []
    cfg = jobs["numpy"][2]
    size = (f"d_model={cfg.d_model} heads={cfg.n_heads} m={cfg.m} L={cfg.max_len} "
            f"batch={cfg.batch_size} {cfg.dtype}")
    for phase in ("A", "B"):
        def epoch(name, phase=phase):
            job, opt, _ = jobs[name]
            if phase == "A":
                return lambda: job._phase_a_epoch(w, 1)
            return lambda: job._phase_b_epoch(w, opt, 1)

        fns = {"cupy": epoch("cupy"), f"numpy (CPU, {threads} thread)": epoch("numpy")}
        stats = interleaved(fns, k)
        for st in stats.values():                       # seconds per step
            st["min"] /= steps
            st["median"] /= steps
        peer = f"numpy (CPU, {threads} thread)"
        row = _row(f"main job Phase {phase} step, {size}", "cupy", peer, stats, threads=threads,
                   notes=f"{steps} steps per timed epoch; steps/s: cupy {1 / stats['cupy']['median']:.1f}, "
                         f"CPU {1 / stats[peer]['median']:.1f} (medians)")
        rows.append(row)
    return rows


def host_syncs(quick):
    """Host transfers per Phase A / Phase B step, counted on the CPU (the CuPy code path)."""
    from rieszflow.engine.backend import count_host_transfers

    steps = 4
    job, opt, cfg = _main_job("numpy", True, counting=True, steps=steps)
    w = _StubWriter()
    with count_host_transfers() as ca:
        job._phase_a_epoch(w, 1)
    with count_host_transfers() as cb:
        job._phase_b_epoch(w, opt, 1)
    return {"phase_a": {"steps": steps, "record_every": cfg.record_every, "transfers": ca.total,
                        "by_site": dict(ca.by_site())},
            "phase_b": {"steps": steps, "transfers": cb.total, "by_site": dict(cb.by_site())}}


def main_job_smoke():
    """``rieszflow run --smoke`` with --backend cupy and numpy: wall times and equality."""
    import numpy as np
    import xarray as xr

    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        paths = {}
        for backend in ("cupy", "numpy"):
            paths[backend] = Path(tmp) / f"{backend}.h5"
            cmd = [sys.executable, "-m", "rieszflow", "run", "--smoke", "--quiet", "--backend", backend,
                   "--out", str(paths[backend])]
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
            out[f"{backend}_wall_s"] = time.perf_counter() - t0
            out[f"{backend}_returncode"] = proc.returncode
            if proc.returncode:
                out[f"{backend}_stderr"] = proc.stderr[-2000:]
        if out["cupy_returncode"] == 0 and out["numpy_returncode"] == 0:
            a = xr.open_dataset(paths["cupy"], engine="h5netcdf")
            b = xr.open_dataset(paths["numpy"], engine="h5netcdf")
            diffs = {}
            for v in b.data_vars:
                if v in a and b[v].dtype.kind == "f":
                    va, vb = a[v].values.astype(np.float64), b[v].values.astype(np.float64)
                    diffs[v] = (float(np.max(np.abs(va - vb))) if va.shape == vb.shape and va.size
                                else (0.0 if va.shape == vb.shape else float("inf")))
            metrics = dict(zip(b["metric"].values.tolist(), b["test_metrics"].values.tolist()))
            out.update(max_abs_diff=diffs, identical=all(v == 0.0 for v in diffs.values()),
                       numpy_test_metrics=metrics,
                       cupy_test_metrics=dict(zip(a["metric"].values.tolist(),
                                                  a["test_metrics"].values.tolist())))
            a.close()
            b.close()
    return out


# --------------------------------------------------------------------------- driver

def _gpu_name():
    from rieszflow.engine.backend import get_backend

    cp = get_backend("cupy").xp
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    name = props["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


def suite_rows(k: int = 5, quick: bool = False) -> list[dict]:
    """The timing rows of this script in the suite's format; [] without a CUDA device.

    Parameters
    ----------
    k : int
        Interleaved rounds.
    quick : bool
        Small sizes.

    Returns
    -------
    list of dict
        Riesz and main-job rows (see the module docstring).
    """
    sys.path.insert(0, str(ROOT / "benchmarks"))
    sys.path.insert(0, str(ROOT / "src"))
    from rieszflow.engine.backend import cupy_available

    if not cupy_available():
        return []
    return riesz_rows(k, quick, 1) + phase_rows(k, quick, 1)


def _markdown(sections, prov, wall_s, command):
    lines = [f"# GPU measurements\n",
             f"Regenerate with `{command}`. Measured {prov['measured']}, git {prov['commit']}, "
             f"GPU {sections.get('gpu', '?')}, {prov['cores']} CPU cores, CPU peers with "
             f"{prov['threads']} thread(s), wall time {wall_s:.0f} s. Times are minima and medians of "
             f"interleaved rounds; compare the ratios (< 1: the first implementation is faster).\n"]
    corr = sections.get("riesz_correctness")
    if isinstance(corr, list):
        lines += ["## 1. Fused CuPy Riesz kernel vs the NumPy reference\n",
                  "| dtype | d | s | N | max rel diff | ok |", "| --- | --- | --- | --- | --- | --- |"]
        lines += [f"| {c['dtype']} | {c['d']} | {c['s']:g} | {c['n']} | {c['max_rel_diff']:.2e} | "
                  f"{'yes' if c['ok'] else 'NO'} |" for c in corr]
        lines.append("")
    for key, title in (("riesz_rows", "2. Riesz energy + gradient"), ("phase_rows", "3. Main job steps")):
        rows = sections.get(key)
        if isinstance(rows, list):
            lines += [f"## {title}\n", "| measure | project | peer | project min / median (s) | "
                      "peer min / median (s) | ratio min / median | agreement | notes |",
                      "| --- | --- | --- | --- | --- | --- | --- | --- |"]
            for r in rows:
                agr = "" if r["agreement"] is None else f"{r['agreement']:.1e}"
                lines.append(f"| {r['measure']} | {r['project']} | {r['peer']} | "
                             f"{r['project_min_s']:.4g} / {r['project_median_s']:.4g} | "
                             f"{r['peer_min_s']:.4g} / {r['peer_median_s']:.4g} | "
                             f"{r['ratio_min']:.3f} / {r['ratio_median']:.3f} | {agr} | {r['notes']} |")
            lines.append("")
    syncs = sections.get("host_syncs")
    if isinstance(syncs, dict):
        a, b = syncs["phase_a"], syncs["phase_b"]
        lines += ["## 4. Host synchronisations (counting backend, the CuPy code path, on the CPU)\n",
                  f"Phase A: {a['transfers']} transfers in {a['steps']} steps with record_every = "
                  f"{a['record_every']} (per record block: one read of the step diagnostics and the "
                  f"particle snapshot); Phase B: {b['transfers']} in an epoch of {b['steps']} steps.\n"]
    smoke = sections.get("main_job_smoke")
    if isinstance(smoke, dict):
        lines += ["## 5. `rieszflow run --smoke`\n",
                  f"--backend cupy: {smoke.get('cupy_wall_s', float('nan')):.1f} s wall (exit "
                  f"{smoke.get('cupy_returncode')}); --backend numpy: "
                  f"{smoke.get('numpy_wall_s', float('nan')):.1f} s (exit {smoke.get('numpy_returncode')}); "
                  f"recorded variables identical: {smoke.get('identical')}; largest differences: "
                  f"{json.dumps(smoke.get('max_abs_diff'))}\n"]
        for backend in ("cupy", "numpy"):
            if smoke.get(f"{backend}_stderr"):
                lines += [f"--backend {backend} failed:\n", "```", smoke[f"{backend}_stderr"], "```", ""]
    for key, val in sections.items():
        if isinstance(val, dict) and "error" in val:
            lines += [f"## {key}: FAILED\n", "```", val["error"], "```", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse_args(argv)
    _pin_threads(args.threads)
    sys.path.insert(0, str(ROOT / "benchmarks"))
    sys.path.insert(0, str(ROOT / "src"))               # run from a checkout
    from rieszflow.engine.backend import cupy_available

    if not cupy_available():
        print(f"benchmarks/gpu.py: {NO_DEVICE}", file=sys.stderr)
        return 2
    from _interleave import provenance

    t_start = time.perf_counter()
    prov = provenance(args.threads)
    sections = {"gpu": _gpu_name()}
    plan = [("riesz_correctness", lambda: riesz_correctness(args.quick)),
            ("riesz_rows", lambda: riesz_rows(args.k, args.quick, args.threads)),
            ("phase_rows", lambda: phase_rows(args.k, args.quick, args.threads)),
            ("host_syncs", lambda: host_syncs(args.quick)),
            ("main_job_smoke", main_job_smoke)]
    for name, fn in plan:
        t0 = time.perf_counter()
        try:
            sections[name] = fn()
        except Exception:                               # noqa: BLE001 - keep measuring the rest
            sections[name] = {"error": traceback.format_exc()[-4000:]}
        print(f"[gpu.py] {name}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    wall_s = time.perf_counter() - t_start
    command = "python benchmarks/gpu.py" + (" --quick" if args.quick else "")
    md = _markdown(sections, prov, wall_s, command)
    print(md)
    if args.md:
        Path(args.md).write_text(md)
    if args.json:
        rows = [r for key in ("riesz_rows", "phase_rows") if isinstance(sections.get(key), list)
                for r in sections[key]]
        Path(args.json).write_text(json.dumps({"rows": rows, "sections": sections, "provenance": prov,
                                               "wall_s": wall_s, "command": command}, indent=1,
                                              default=str))
    failed = [k for k, v in sections.items() if isinstance(v, dict) and "error" in v]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
