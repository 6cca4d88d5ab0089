"""``rieszflow infinite-width``: paper 002's experiments E1-E6 as sweeps (see :mod:`~rieszflow.studies.infinite_width.study`)."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from rieszflow.engine.storage import atomic_output
from rieszflow.studies.base import add_study_arguments, given_options
from rieszflow.studies.sweep import add_sweep_arguments
from rieszflow.studies.sweep_cli import format_merged, run_sweeps, start_sweep_study

__all__ = ["register", "run_from_args", "make_plots", "SWEEPS"]

#: The sweeps of the study, in the order they run.
SWEEPS = ("e1_width", "e2_scaling", "e3_heads", "e4_lowrank", "e5_tokens", "e6_relu", "t12_hierarchical",
          "timing", "bundled_linear", "t7_validation", "t18_linear")


def register(subparsers) -> argparse.ArgumentParser:
    """Add the ``infinite-width`` subcommand to ``subparsers``.

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
        "infinite-width", allow_abbrev=False,
        help="paper 002: the infinite-width law of one attention layer (E1-E6, Fig. 1-5) as sweeps",
        description="Sweeps with one task per (experiment, n, trial) on a Dask LocalCluster or an "
                    "existing scheduler: e1_width (Fig. 1), e2_scaling (Fig. 2a), e3_heads (Fig. 2b), "
                    "e4_lowrank (Fig. 3), e5_tokens (Fig. 4, s = 8), e6_relu (Fig. 5), t12_hierarchical "
                    "(Theorem 3.1, brute force), timing (reduced sampler against brute force) and "
                    "bundled_linear (the bundled model's linear attention at initialisation), "
                    "t7_validation (reduced sampler against brute force) and t18_linear (linear "
                    "attention against the variance-gamma law). "
                    "Finite-width samples come from the exact reduced sampler; both KL estimators "
                    "(the paper's KDE and the Rao-Blackwellised one) are reported side by side with "
                    "their noise floors. One HDF5 file per task under --out/<sweep>/tasks, merged into "
                    "--out/<sweep>/<sweep>.h5, KL tables in --out/<sweep>/kl.h5, the report in "
                    "--out/report.txt. Rerunning the same command runs only the missing tasks.")
    add_study_arguments(p, default_out="runs/infinite-width[-quick]-seed<seed>/ (a directory)",
                        backends=("numpy", "cupy"),
                        quick_help="2 trials, 20k samples (E1: 50k), smaller brute-force checks; within "
                                   "10 minutes on 2 cores (docs/infinite_width.md)",
                        resume_help="run only the tasks without a complete file (what rerunning the "
                                    "command always does; accepted for the shared contract)")
    add_sweep_arguments(p, dashboard=True)
    p.add_argument("--sweep", action="append", choices=SWEEPS, default=None,
                   help="run only this sweep (repeatable; default: all)")
    p.set_defaults(func=run_from_args, writes_hdf5=False)
    return p


def make_plots(merged: dict, tables: dict, out: Path) -> list:
    """Fig. 1-5 with both estimators, Fig. 2a and Fig. 2b.

    Parameters
    ----------
    merged : dict
        Sweep name to merged dataset.
    tables : dict
        KL sweep name to :func:`rieszflow.studies.infinite_width.study.kl_tables`.
    out : pathlib.Path
        Study directory; each figure goes into its sweep's directory.

    Returns
    -------
    list of pathlib.Path
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    import scipy.stats

    from rieszflow.studies.infinite_width.study import _ln_stats

    paths = []
    xs = np.linspace(-3, 3, 1000)
    titles = {"e1_width": "Fig. 1: clip, s = 4, H = 2", "e4_lowrank": "Fig. 3: low rank, n_H = 64, H = n/64",
              "e5_tokens": "Fig. 4: s = 8, H = 2", "e6_relu": "Fig. 5: ReLU inputs, s = 4, H = 2"}
    for name, title in titles.items():
        if name not in tables:
            continue
        d, t = merged[name].isel(method=0, trial=0), tables[name]
        fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4), constrained_layout=True)
        for i, n in enumerate(d["n"].values):
            col = f"C{i}"
            a.plot(xs, scipy.stats.gaussian_kde(d["y_emp"].sel(n=n).values)(xs), "--", color=col, label=f"n = {int(n)}")
        a.plot(xs, scipy.stats.gaussian_kde(d["y_theo"].isel(n=0).values)(xs), "k-", label="limit Z^y")
        a.set_xlabel("y_1^1")
        a.set_ylabel("density (KDE of trial 0)")
        a.legend(fontsize=8)
        n = t["n"].values
        for var, lab, mk in (("kl_kde", "paper's KDE estimator", "o"), ("kl_rb", "Rao-Blackwellised", "s")):
            lm, err, ml, se = _ln_stats(t[var].transpose("n", "trial").values)
            b.errorbar(np.log(n) / np.log(4), lm, yerr=err, marker=mk, capsize=3, label=f"{lab}: ln mean KL")
            b.plot(np.log(n) / np.log(4), ml, mk, mfc="none", color="gray")
        kf = float(np.nanmean(t["kl_kde_floor"]))
        if kf > 0:
            b.axhline(np.log(kf), color="C0", ls=":", label="KDE floor (limit vs limit)")
        b.set_xlabel("log_4 n")
        b.set_ylabel("ln KL (open grey: mean of ln KL)")
        b.legend(fontsize=8)
        fig.suptitle(title)
        p = out / name / f"{name}.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        paths.append(p)
    if "e2_scaling" in merged:
        d = merged["e2_scaling"].isel(method=0, trial=0)
        fig, ax = plt.subplots(figsize=(6, 4), constrained_layout=True)
        bins = np.linspace(-3, 3, 121)
        ax.hist(d["p_sqrt"].values.ravel(), bins=bins, density=True, alpha=0.5, label="q.k / sqrt(n)")
        ax.hist(d["p_n"].values.ravel(), bins=bins, density=True, alpha=0.5, label="q.k / n")
        ax.plot(xs, scipy.stats.norm.pdf(xs), "k-", label="N(0, 1) (1/sqrt(n) limit)")
        ax.axvline(0, color="r", ls="--", label="point mass at 0 (1/n limit)")
        ax.set_xlabel("score p_11^(1)")
        ax.set_ylabel("probability density")
        ax.set_title(f"Fig. 2a: score scaling, n = {int(d['n'].values[0])}")
        ax.legend(fontsize=8)
        p = out / "e2_scaling" / "e2_scaling.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        paths.append(p)
    if "e3_heads" in merged:
        d = merged["e3_heads"].isel(method=0, trial=0, n=0)
        fig, ax = plt.subplots(figsize=(6, 4), constrained_layout=True)
        for i, H in enumerate(d["H"].values):
            ax.plot(xs, scipy.stats.gaussian_kde(d["y_emp"].sel(H=H).values)(xs), "--", color=f"C{i}",
                    label=f"finite width, H = {int(H)}")
            ax.plot(xs, scipy.stats.gaussian_kde(d["y_theo"].sel(H=H).values)(xs), "-", color=f"C{i}",
                    label=f"limit, H = {int(H)}")
        k2 = float(d["kappa2"].values.flat[0])
        ax.plot(xs, scipy.stats.norm.pdf(xs, 0, np.sqrt(k2)), "k-", lw=2, label=f"infinite-head Gaussian N(0, {k2:.3f})")
        ax.set_xlabel("y_1^1")
        ax.set_ylabel("density (KDE of trial 0)")
        ax.set_title("Fig. 2b: finite heads")
        ax.legend(fontsize=8)
        p = out / "e3_heads" / "e3_heads.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        paths.append(p)
    return paths


def run_from_args(args: argparse.Namespace) -> int:
    """Resolve the configuration, run the sweeps, merge, compute both KL estimators, print the report.

    Parameters
    ----------
    args : argparse.Namespace
        From the parser of :func:`register`.

    Returns
    -------
    int
        0 when every task is complete; 1 if any task failed (listed); 2 on bad input.
    """
    from rieszflow.studies.infinite_width.study import (KL_SWEEPS, QUICK_OVERRIDES, InfiniteWidthConfig,
                                                        format_report, kl_tables, specs, task_config,
                                                        write_kl_tables)
    prog = "rieszflow infinite-width"
    status, cfg, out = start_sweep_study(
        prog, "infinite-width", InfiniteWidthConfig, QUICK_OVERRIDES, args, specs, task_config,
        given=lambda: given_options(seed=args.seed, backend=args.backend))
    if status is not None:
        return status
    chosen = [sp for sp in specs(cfg) if sp.name in (args.sweep or SWEEPS)]
    log = (lambda *a: None) if args.quiet else (lambda s: print(s, flush=True))
    t0 = time.perf_counter()
    merged, failed = run_sweeps(prog, out, chosen, args, log)
    tables = {}
    for name in KL_SWEEPS:
        if name in merged:
            tables[name] = kl_tables(merged[name], cfg.kde_grid_points)
            write_kl_tables(tables[name], out / name / "kl.h5")
    report, numbers = format_report(merged, tables)
    wall = time.perf_counter() - t0
    report += f"\nwall time {wall:.1f} s (sweeps, merge, KL tables)"
    print(report)
    with atomic_output(out / "report.txt") as tmp:     # rieszflow report OUT reads it
        tmp.write_text(report + "\n")
    (out / "numbers.json").write_text(json.dumps(numbers, indent=1, sort_keys=True))
    if not args.no_plots and merged:
        for p in make_plots(merged, tables, out):
            log(f"plot: {p}")
    print(format_merged(out, merged))
    return 1 if failed else 0
