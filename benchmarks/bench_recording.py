"""Benchmark: the cost of recording a main-job Phase A step loop to HDF5, blocks vs per-record flushes.

Run from the repository root::

    python benchmarks/bench_recording.py
    python benchmarks/bench_recording.py --md docs/results/bench_recording.md --json docs/results/bench_recording.json

What is timed: one Phase A epoch of the main job (``MainJob._phase_a_epoch``: ``--steps``
projected-Langevin steps, each one mini-batch alignment gradient, the Riesz repulsion of every
head and the particle update) followed by ``flush()`` of the writer, so every record of the
epoch is on disk when the clock stops (as at the main job's end-of-epoch checkpoint). Three
variants share one model and run interleaved (A, B, C, A, B, C, ...; one untimed warm-up
round), on two sizes:

* ``buffered``: recording through :class:`rieszflow.engine.storage.TrajectoryWriter` with its
  default blocks (``flush_records`` = 256, ``flush_seconds`` = 10 s, ``flush_bytes`` = 16 MiB);
* ``per-record``: the same writer with ``flush_records = 1``: every record written and the
  file flushed as it is appended (rieszflow before blocks);
* ``none``: no recording (the step records are not appended, the particle snapshots
  ``_record_omega`` not taken).

Sizes: ``smoke``, the model of ``rieszflow run --smoke`` (``SMOKE_OVERRIDES``: d_model 32,
m 16, batch 32, a snapshot of the particles every 2 steps), and ``full``, the default
configuration of ``rieszflow run`` (d_model 128, 2 layers, 2 heads, m 256, batch 64, a
snapshot every 5 steps); ``train_limit`` is set to ``--steps`` batches so that one epoch is
``--steps`` steps. Checkpoints are off (``checkpoint_seconds`` huge) in every variant.

Overhead = t(recording) / t(none) - 1, from the minima and from the medians of ``--k`` rounds;
the issue's goal is < 5 % at both sizes (ratio ``buffered / none`` < 1.05). Thread counts are
pinned (``--threads``) before NumPy is imported. ``suite_rows`` gives the same measure to the
benchmark suite (``quick``: the smoke size only).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

SIZES = ("smoke", "full")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="threads for BLAS and OpenMP (default 1)")
    parser.add_argument("--k", type=int, default=21, help="interleaved timing rounds (min and median reported)")
    parser.add_argument("--steps", type=int, default=8,
                        help="Phase A steps per timed epoch (default 8, an epoch of `run --smoke`)")
    parser.add_argument("--sizes", nargs="+", choices=SIZES, default=list(SIZES),
                        help="model sizes (default: smoke full)")
    parser.add_argument("--md", default=None, help="also write the report (markdown) to this file")
    parser.add_argument("--json", default=None, help="also write the measurements (JSON) to this file")
    args = parser.parse_args(argv)
    if args.threads < 1 or args.k < 1 or args.steps < 2:
        parser.error("--threads and --k must be >= 1 and --steps >= 2")
    return args


class _NoRecording:
    """The writer interface of the Phase A loop, recording nothing."""

    def append(self, dim, values, coord=None):
        return 0

    def flush(self):
        pass

    def length(self, dim):
        return 0


def _job(size: str, steps: int, folder: Path):
    """A built main job of ``size`` whose Phase A epoch is ``steps`` steps, with its two writers."""
    from rieszflow.learning.config import SMOKE_OVERRIDES, MainJobConfig
    from rieszflow.learning.train import MainJob

    over = dict(SMOKE_OVERRIDES) if size == "smoke" else {}
    batch = over.get("batch_size", MainJobConfig.batch_size)
    over.update(train_limit=batch * steps, checkpoint_seconds=1e12, phase_a_epochs=1)
    cfg = MainJobConfig(**over)
    job = MainJob(cfg, folder / f"{size}-buffered.h5", overwrite=True, quiet=True)
    job._build()
    job.elapsed, job.step_a = {"phase_a": 0.0, "phase_b": 0.0}, 0
    job.trainable = [k for k in job.model.params if k not in set(job.omega_names)]
    buffered = job._open_writer()
    job.out = folder / f"{size}-per-record.h5"
    per_record = job._open_writer()
    per_record.flush_records = 1           # every record written and flushed as it is appended
    return job, cfg, {"buffered": buffered, "per-record": per_record}


class _Timed:
    """A writer whose calls (and the particle snapshots) are timed: ``seconds`` accumulates the
    wall time spent recording, outermost calls only."""

    def __init__(self, writer):
        self.writer, self.seconds, self._depth = writer, 0.0, 0

    def timed(self, fn, *args, **kwargs):
        if self._depth:
            return fn(*args, **kwargs)
        self._depth += 1
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - t0
            self._depth -= 1

    def append(self, *args, **kwargs):
        return self.timed(self.writer.append, *args, **kwargs)

    def flush(self):
        return self.timed(self.writer.flush)

    def length(self, dim):
        return self.timed(self.writer.length, dim)

    def __getattr__(self, name):             # the rest of the writer's interface, untimed
        return getattr(self.writer, name)


def _epoch_fn(job, writer, record, cpu, direct):
    """One timed Phase A epoch with ``writer`` (and its closing flush). Appends to ``cpu`` the CPU
    time of this process and, when recording, to ``direct`` the time spent in the recording
    calls divided by the rest of the epoch's time."""
    snapshot = type(job)._record_omega

    def run():
        c0, t0 = time.process_time(), time.perf_counter()
        if record:
            timed = _Timed(writer)
            job._record_omega = lambda w: timed.timed(snapshot, job, w)
            job._phase_a_epoch(timed, 1)
            timed.flush()
        else:
            job._record_omega = lambda w: None
            job._phase_a_epoch(writer, 1)
        wall = time.perf_counter() - t0
        cpu.append(time.process_time() - c0)
        if record:
            direct.append(timed.seconds / (wall - timed.seconds))
    return run


def measure(size: str, k: int, steps: int, folder: Path) -> dict:
    """Interleaved times of one Phase A epoch: buffered, per-record and no recording.

    Returns
    -------
    dict
        ``size``, ``steps``, the configuration's model sizes, per variant the ``min`` and
        ``median`` wall seconds per step and the same of the CPU time, the overheads
        ``t / t_none - 1`` of each (``min``, ``median``, ``cpu_min``, ``cpu_median``), and the
        direct overhead, time in the recording calls / the rest of the same epoch
        (``direct_median`` and ``direct_max`` over the rounds).
    """
    from _interleave import interleaved

    job, cfg, writers = _job(size, steps, folder)
    try:
        cpu = {name: [] for name in ("buffered", "per-record", "none")}
        direct = {name: [] for name in ("buffered", "per-record")}
        fns = {"buffered": _epoch_fn(job, writers["buffered"], True, cpu["buffered"], direct["buffered"]),
               "per-record": _epoch_fn(job, writers["per-record"], True, cpu["per-record"],
                                       direct["per-record"]),
               "none": _epoch_fn(job, _NoRecording(), False, cpu["none"], None)}
        st = interleaved(fns, k)
        records = {name: (w.length("step"), w.length("time")) for name, w in writers.items()}
    finally:
        for w in writers.values():
            w.close("complete", verify=False)
    n = -(-len(job.train) // cfg.batch_size)        # steps per epoch
    out = {"size": size, "steps": n, "d_model": cfg.d_model, "m": cfg.m, "batch_size": cfg.batch_size,
           "n_layers": cfg.n_layers, "n_heads": cfg.n_heads, "record_every": cfg.record_every,
           "records": records}
    for name, s in st.items():
        c = sorted(cpu[name][-k:])                  # the timed rounds (the first is the warm-up)
        out[name] = {"min": s["min"] / n, "median": s["median"] / n,
                     "cpu_min": c[0] / n, "cpu_median": statistics.median(c) / n}
    for name in ("buffered", "per-record"):
        out[f"overhead_{name}"] = {q: out[name][q] / out["none"][q] - 1.0
                                   for q in ("min", "median", "cpu_min", "cpu_median")}
        d = direct[name][-k:]
        out[f"overhead_{name}"].update(direct_median=statistics.median(d), direct_max=max(d))
    return out


def _threads() -> int:
    try:
        from threadpoolctl import threadpool_info

        return max([p["num_threads"] for p in threadpool_info() if p.get("user_api") == "blas"] or [1])
    except ImportError:
        return int(os.environ.get("OMP_NUM_THREADS", "1"))


def suite_rows(k: int = 5, quick: bool = False) -> list[dict]:
    """Rows of the benchmark suite: recording overhead of a Phase A step loop.

    Parameters
    ----------
    k : int, default 5
        Interleaved timing rounds.
    quick : bool, default False
        The smoke size only (seconds; for the suite's smoke test).

    Returns
    -------
    list of dict
        Per size, two rows in the suite's format (``measure``, ``project``, ``peer``, min and
        median times and their ratios, ``target``, ``agreement``, ``threads``, ``notes``):
        buffered recording against no recording (target 1.05, the issue's < 5 %) and the
        per-record flushing of before against no recording (no target; for comparison).
    """
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    sizes = ("smoke",) if quick else SIZES
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for size in sizes:
            m = measure(size, k, 8, Path(tmp))
            for name, target in (("buffered", 1.05), ("per-record", None)):
                rows.append({
                    "measure": f"HDF5 recording of a main-job Phase A step, {size} size "
                               f"(d_model {m['d_model']}, m {m['m']}, batch {m['batch_size']})",
                    "project": f"{name} recording" + (" (flush_records=1)" if name == "per-record" else ""),
                    "peer": "no recording",
                    "project_min_s": m[name]["min"], "project_median_s": m[name]["median"],
                    "peer_min_s": m["none"]["min"], "peer_median_s": m["none"]["median"],
                    "ratio_min": m[name]["min"] / m["none"]["min"],
                    "ratio_median": m[name]["median"] / m["none"]["median"],
                    "target": target, "agreement": None, "threads": _threads(),
                    "notes": f"seconds per step, {m['steps']} steps per timed epoch plus the flush "
                             f"that ends it; CPU-time ratio min {m[name]['cpu_min'] / m['none']['cpu_min']:.3f}, "
                             f"median {m[name]['cpu_median'] / m['none']['cpu_median']:.3f}; time inside the "
                             f"recording calls / rest of the epoch: median "
                             f"{m[f'overhead_{name}']['direct_median']:.4f}; file contents "
                             f"of buffered and per-record writing are identical "
                             f"(tests/test_recording_buffer.py)"})
    return rows


def main(argv=None) -> int:
    args = parse_args(argv)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # run from a checkout
    from _interleave import provenance, write_outputs

    t_start = time.perf_counter()
    prov = provenance(args.threads)
    md = ["## Recording overhead of a main-job Phase A step loop\n",
          f"Seconds per Phase A step: minimum and median of {args.k} interleaved rounds, each one epoch "
          f"of {args.steps} steps plus the flush that ends it. Overhead = t / t(no recording) - 1 from "
          "the wall-clock times (`_interleave.interleaved`) and from the CPU time of this process "
          "(`time.process_time`); *direct*: the time spent inside the recording calls (appends, "
          "particle snapshots, the closing flush) divided by the rest of the same epoch, median and "
          "largest over the rounds (it does not depend on how much the step itself varies between "
          "rounds on a shared machine). Goal: buffered < 5 % at both sizes.\n",
          "| size | d_model, m, batch | variant | wall min [s/step] | overhead, wall min | "
          "overhead, wall median | overhead, CPU min | overhead, CPU median | direct, median | "
          "direct, max | records (step, time) |",
          "|" + "---|" * 11]
    payload = {"rows": []}
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes:
            m = measure(size, args.k, args.steps, Path(tmp))
            payload["rows"].append(m)
            for name in ("none", "buffered", "per-record"):
                label = {"none": "no recording", "buffered": "buffered (default blocks)",
                         "per-record": "per-record (flush_records=1)"}[name]
                o = m.get(f"overhead_{name}")
                cells = ([f"{100 * o[q]:+.1f} %" for q in ("min", "median", "cpu_min", "cpu_median",
                                                           "direct_median", "direct_max")]
                         if o else [""] * 6)
                rec = m["records"].get(name, "")
                md.append(f"| {size} | {m['d_model']}, {m['m']}, {m['batch_size']} | {label} | "
                          f"{m[name]['min']:.4f} | " + " | ".join(cells) + f" | {rec} |")
    wall = time.perf_counter() - t_start
    write_outputs(args, "Results: benchmarks/bench_recording.py",
                  "python benchmarks/bench_recording.py --md docs/results/bench_recording.md "
                  "--json docs/results/bench_recording.json", prov, wall, "\n".join(md) + "\n", payload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
