"""``rieszflow synthetic``: paper 000's synthetic benchmark as a sweep (see :mod:`.study`)."""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

from rieszflow.studies.base import add_study_arguments, given_options, resolve_config

__all__ = ["register", "run_from_args", "make_plot", "add_sweep_arguments", "SWEEPS"]

#: The sweeps of the study, in the order they run.
SWEEPS = ("benchmark", "ablation", "runtime")


def add_sweep_arguments(parser) -> None:
    """Add ``--workers`` and ``--scheduler``, the options of every study that runs a sweep.

    Parameters
    ----------
    parser : argparse.ArgumentParser
        The subcommand's parser.
    """
    from rieszflow.studies.cli import non_negative_int

    where = parser.add_mutually_exclusive_group()
    where.add_argument("--workers", type=non_negative_int, default=None, metavar="N",
                       help="LocalCluster worker processes, one thread each (default: the machine's "
                            "cores); 0 runs the tasks in this process, one after the other")
    where.add_argument("--scheduler", default=None, metavar="ADDRESS",
                       help="submit to an existing Dask scheduler (e.g. tcp://host:8786) instead; its "
                            "workers must see --out (docs/sweeps.md)")


def register(subparsers) -> argparse.ArgumentParser:
    """Add the ``synthetic`` subcommand to ``subparsers``.

    Parameters
    ----------
    subparsers : argparse._SubParsersAction
        From ``ArgumentParser.add_subparsers``.

    Returns
    -------
    argparse.ArgumentParser
        The subcommand's parser, with ``func=run_from_args``.
    """
    p = subparsers.add_parser(
        "synthetic", allow_abbrev=False,
        help="paper 000's synthetic kernel-learning benchmark (App. F.1) as a sweep on dask.distributed",
        description="Three sweeps (one task per method, grid point and trial, on a Dask LocalCluster "
                    "or an existing scheduler): benchmark (every method of App. F.1.2 built so far "
                    "against the logit noise sigma, Fig. 1), ablation (Langevin features against the "
                    "interaction strength lam, log and Riesz kernels, F.1.7) and runtime (wall time "
                    "against n, Table 4). One HDF5 file per task under --out/<sweep>/tasks, merged "
                    "into --out/<sweep>/<sweep>.h5; prints the tables and the paired verdicts on the "
                    "paper's claims. Rerunning the same command runs only the missing tasks.")
    add_study_arguments(p, default_out="runs/synthetic[-quick]-seed<seed>/ (a directory)",
                        quick_help="fewer noise levels, trials and sizes (35 minutes measured on 2 "
                                   "shared cores, docs/synthetic.md)",
                        resume_help="run only the tasks without a complete file (what rerunning the "
                                    "command always does; accepted for the shared contract)")
    add_sweep_arguments(p)
    p.add_argument("--sweep", action="append", choices=SWEEPS, default=None,
                   help="run only this sweep (repeatable; default: all three: benchmark = Fig. 1, "
                        "ablation = F.1.7 / Fig. 3, runtime = Fig. 2 / Table 4)")
    p.set_defaults(func=run_from_args, writes_hdf5=False)
    return p


def make_plot(ds, path: Path) -> Path:
    """Fig. 1 (A, B): accuracy and F1 against sigma (log axis), mean +- 1 sd bands over trials.

    Parameters
    ----------
    ds : xarray.Dataset
        The merged benchmark sweep.
    path : pathlib.Path
        PNG file to write.

    Returns
    -------
    pathlib.Path
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), constrained_layout=True)
    sig = ds.sigma.values.astype(float)
    for ax, var in zip(axes, ("accuracy", "f1")):
        for m in ds.method.values:
            v = ds[var].sel({"method": m}).values.astype(float)
            if not np.isfinite(v).any():               # unavailable or failed everywhere: no line
                continue
            mean, sd = np.nanmean(v, axis=-1), np.nanstd(v, axis=-1)
            dashed = "gamma" in str(m)
            ax.plot(sig, mean, "--" if dashed else "-", label=str(m))
            ax.fill_between(sig, mean - sd, mean + sd, alpha=0.15)
        ax.set_xscale("log")
        ax.set_xlabel("logit noise sigma")
        ax.set_ylabel(f"test {var}")
    axes[0].legend(fontsize=8)
    fig.suptitle("paper 000 App. F.1, Fig. 1 (mean +- 1 sd over trials)")
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def run_from_args(args: argparse.Namespace) -> int:
    """Resolve the configuration, run the sweep, merge, print the tables.

    Parameters
    ----------
    args : argparse.Namespace
        From the parser of :func:`register`.

    Returns
    -------
    int
        0 when every task is complete; 1 if any task failed (listed); 2 on bad input.
    """
    from rieszflow.studies.synthetic.study import (QUICK_OVERRIDES, SyntheticConfig, format_ablation,
                                                   format_runtime, format_summary, format_verdicts,
                                                   retry_unavailable, specs, task_config)
    from rieszflow.studies.sweep import open_sweep, run_sweep

    prog = "rieszflow synthetic"
    preset = SyntheticConfig().replace(**QUICK_OVERRIDES) if args.quick else SyntheticConfig()
    default = args.out is None
    out = Path("runs") / f"synthetic{'-quick' if args.quick else ''}-seed{args.seed or 0}" if default \
        else Path(args.out)
    try:
        if args.resume and not (out / "config.json").is_file():
            raise ValueError(f"--resume: {out} holds no sweep (no config.json); there is nothing to "
                             f"resume (rerunning the command without --resume starts it)")
        cfg = resolve_config(SyntheticConfig, preset, config_file=args.config,
                             given=given_options(seed=args.seed, backend=args.backend), overrides=args.set,
                             resume_from=out / "config.json" if args.resume else None,
                             preset_flag="--quick" if args.quick else None)
    except ValueError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    if default:
        Path("runs").mkdir(exist_ok=True)              # the documented default output directory
    if out.exists() and not out.is_dir():
        print(f"{prog}: error: --out {str(out)!r} is a file; a sweep writes a directory", file=sys.stderr)
        return 2
    if not out.parent.is_dir():
        print(f"{prog}: error: the directory {out.parent} of --out does not exist", file=sys.stderr)
        return 2
    chosen = [sp for sp in specs(cfg) if sp.name in (args.sweep or SWEEPS)]
    if args.overwrite:     # the whole --out: every sweep's tasks, merged file and failures
        from rieszflow.engine.storage import RunLock

        for sp in specs(cfg):
            if (out / sp.name).exists():
                lock = RunLock(out / sp.name / sp.name)     # refused while another sweep writes there
                lock.acquire()
                try:
                    shutil.rmtree(out / sp.name / "tasks", ignore_errors=True)
                    for stale in (out / sp.name / f"{sp.name}.h5", out / sp.name / "failures.json",
                                  out / sp.name / "sweep.json"):
                        stale.unlink(missing_ok=True)
                finally:
                    lock.release()
    out.mkdir(exist_ok=True)
    cfg_file = out / "config.json"
    if cfg_file.is_file() and not args.overwrite:
        # the grids (methods, noise levels, trials, sizes) may grow: complete tasks are reused;
        # any other field changes the tasks' results and is refused
        before = SyntheticConfig.from_dict(json.loads(cfg_file.read_text()))
        old, new = task_config(before), task_config(cfg)
        if old != new:
            diff = "; ".join(f"{k}: stored {old[k]!r}, given {new[k]!r}" for k in new if old[k] != new[k])
            print(f"{prog}: error: {out} holds a sweep of another configuration ({diff}); rerun with "
                  f"the same options (grids may change), use --resume, or --overwrite to replace it",
                  file=sys.stderr)
            return 2
    cfg_file.write_text(json.dumps(cfg.to_dict(), indent=1, sort_keys=True))
    log = (lambda *a: None) if args.quiet else (lambda s: print(s, flush=True))
    where = f"scheduler {args.scheduler}" if args.scheduler else (
        "in-process" if args.workers == 0 else f"LocalCluster of {args.workers or 'all'} workers")
    t0 = time.perf_counter()
    failed, merged = 0, {}
    for sp in chosen:
        log(f"{prog}: sweep {sp.name}: {len(sp.tasks())} tasks on {where} -> {out / sp.name}")
        retry_unavailable(sp, out / sp.name, log=log)    # an extra installed since: rerun its tasks
        summary = run_sweep(sp, out / sp.name, workers=args.workers, scheduler=args.scheduler,
                            progress=not args.quiet, log=log)
        failed += summary.failed
        if summary.failed:
            print(summary.format(), file=sys.stderr)
        if summary.done + summary.skipped:
            merged[sp.name] = open_sweep(out / sp.name)
    if "benchmark" in merged:
        print(format_summary(merged["benchmark"]))
        if not args.no_plots:
            log(f"plot: {make_plot(merged['benchmark'], out / 'benchmark' / 'fig1_accuracy_f1.png')}")
    if "ablation" in merged:
        print(format_ablation(merged["ablation"]))
    if "runtime" in merged:
        print(format_runtime(merged["runtime"]))
    if "benchmark" in merged:
        print(format_verdicts(merged["benchmark"], merged.get("ablation")))
    print("merged: " + ", ".join(str(out / n / f"{n}.h5") for n in merged)
          + f" (rieszflow.studies.sweep.open_sweep(dir)); wall time {time.perf_counter() - t0:.1f} s")
    if failed:
        return 1
    return 0
