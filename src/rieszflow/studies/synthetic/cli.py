"""``rieszflow synthetic``: paper 000's synthetic benchmark as a sweep (see :mod:`~rieszflow.studies.synthetic.study`)."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from rieszflow.studies.base import add_study_arguments, given_options
from rieszflow.studies.sweep import add_sweep_arguments
from rieszflow.studies.sweep_cli import format_merged, run_sweeps, start_sweep_study
from rieszflow.studies.reporting import register_sweep_reporter

__all__ = ["register", "run_from_args", "make_plot", "SWEEPS"]

register_sweep_reporter("rieszflow.studies.synthetic.study:benchmark_task",
                        "rieszflow.studies.synthetic.cli:report_tables")


def report_tables(ds) -> str:
    """The tables of one synthetic-benchmark sweep (benchmark, ablation or runtime) file, as ``rieszflow report`` shows them.

    Parameters
    ----------
    ds : xarray.Dataset
        An opened synthetic-benchmark sweep (benchmark, ablation or runtime) file.

    Returns
    -------
    str
        The sweep's table, and the verdicts of the benchmark and ablation sweeps.
    """
    from rieszflow.studies.synthetic import study

    name = json.loads(ds.attrs["config"])["name"]
    table = {"benchmark": study.format_summary, "ablation": study.format_ablation,
             "runtime": study.format_runtime}[name](ds)
    if name == "benchmark":
        table += "\n\n" + study.format_verdicts(ds)
    elif name == "ablation":
        table += "\n\n" + study.ablation_verdicts(ds)
    return table

#: The sweeps of the study, in the order they run.
SWEEPS = ("benchmark", "ablation", "runtime")


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
                        quick_help="fewer noise levels, trials, sizes and lams (wall time measured on 2 "
                                   "shared cores, docs/synthetic.md)",
                        resume_help="run only the tasks without a complete file (what rerunning the "
                                    "command always does; accepted for the shared contract)")
    add_sweep_arguments(p, dashboard=True)
    p.add_argument("--preset", choices=("power",), default=None,
                   help="power: the benchmark sized to decide: sigma in {0.01, 0.1, 1, 10, 100} (100: the "
                        "no-signal control), 20 trials each, the fast baselines, RFF, Sinha-Duchi and "
                        "the Langevin features (lam = 0.5); per-sigma verdicts at level 0.01 beside the Bayes "
                        "ceiling; runs only the benchmark sweep unless --sweep is given; default "
                        "--out runs/synthetic-power-seed<seed> (CPU time in docs/synthetic.md)")
    p.add_argument("--sweep", action="append", choices=SWEEPS, default=None,
                   help="run only this sweep (repeatable; default: all three: benchmark = Fig. 1, "
                        "ablation = F.1.7 / Fig. 3, runtime = Fig. 2 / Table 4; with --preset power: "
                        "benchmark)")
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
    from rieszflow.studies.synthetic.study import (POWER_OVERRIDES, QUICK_OVERRIDES, SyntheticConfig,
                                                   format_ablation, format_runtime, format_summary,
                                                   format_verdicts, retry_unavailable, specs,
                                                   task_config)
    prog = "rieszflow synthetic"
    power = getattr(args, "preset", None) == "power"
    if power and args.quick:
        print(f"{prog}: error: --preset power and --quick are two size presets; give one", file=sys.stderr)
        return 2
    status, cfg, out = start_sweep_study(
        prog, "synthetic", SyntheticConfig, QUICK_OVERRIDES, args, specs,
        task_config, given=lambda: given_options(seed=args.seed, backend=args.backend),
        presets={"power": POWER_OVERRIDES})
    if status is not None:
        return status
    chosen = [sp for sp in specs(cfg) if sp.name in (args.sweep or (("benchmark",) if power else SWEEPS))]
    log = (lambda *a: None) if args.quiet else (lambda s: print(s, flush=True))
    t0 = time.perf_counter()
    # an optional extra installed since the last run: its 'unavailable' tasks run again
    merged, failed = run_sweeps(prog, out, chosen, args, log, before=retry_unavailable)
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
    print(format_merged(out, merged, time.perf_counter() - t0))
    if failed:
        return 1
    return 0
