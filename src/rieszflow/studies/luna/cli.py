"""``rieszflow luna``: paper 001's protocols as sweeps (see :mod:`~rieszflow.studies.luna.study`), tables and figures."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from rieszflow.engine.storage import atomic_output
from rieszflow.studies.base import add_study_arguments, given_options
from rieszflow.studies.sweep import add_sweep_arguments
from rieszflow.studies.sweep_cli import format_merged, run_sweeps, start_sweep_study

__all__ = ["register", "run_from_args", "SWEEPS", "QUICK_SWEEPS", "format_report", "make_plots"]

#: The sweeps, in the order they run; ``--quick`` runs P1, P2 and a reduced P3.
SWEEPS = ("p1", "p2", "p3", "p4", "p5", "p6", "p7", "kernels", "dead_init")
QUICK_SWEEPS = ("p1", "p2", "p3")


def register(subparsers) -> argparse.ArgumentParser:
    """Add the ``luna`` subcommand to ``subparsers``.

    Parameters
    ----------
    subparsers : argparse._SubParsersAction

    Returns
    -------
    argparse.ArgumentParser
        With ``func=run_from_args``.
    """
    p = subparsers.add_parser(
        "luna", allow_abbrev=False,
        help="paper 001 (LUNA, learnable feature maps): theory numerics, runtime scaling, mini-LRA, "
             "ablations and psi curves as sweeps",
        description="Sweeps on dask.distributed, one HDF5 file per task under --out/<sweep>/tasks, "
                    "merged into --out/<sweep>/<sweep>.h5: p1 theory numerics, p2 runtime scaling, "
                    "p3 mini-LRA (Digits-seq, ListOps-mini), p4 M/L ablation, p5 kernel-form "
                    "ablation, p6 post-hoc conversion, p7 psi curves and attention maps (PNGs), "
                    "kernels: learned maps vs learned particles, dead_init: Monte Carlo of dead psi "
                    "channels under the listing's initialisation. --quick runs p1, p2 and a "
                    "reduced p3. Prints the tables; rerunning the command runs only missing tasks.")
    add_study_arguments(p, default_out="runs/luna[-quick]-seed<seed>/ (a directory)",
                        quick_help="p1 with fewer trials, p2 up to n = 4096, p3 on Digits-seq with "
                                   "300 steps and 2 seeds; only these three sweeps",
                        resume_help="run only the tasks without a complete file (what rerunning the "
                                    "command always does; accepted for the shared contract)")
    add_sweep_arguments(p, dashboard=True)
    p.add_argument("--sweep", action="append", choices=SWEEPS, default=None,
                   help="run only this sweep (repeatable; default: all, or p1-p3 with --quick)")
    p.set_defaults(func=run_from_args, writes_hdf5=False)
    return p


def _mean_sd(v):
    import numpy as np

    v = np.asarray(v, dtype=float)
    total = v.size
    v = v[np.isfinite(v)]
    if v.size == 0:
        return "n/a"
    sd = v.std(ddof=1) if v.size > 1 else float("nan")
    text = f"{100 * v.mean():.1f} +- {100 * sd:.1f}" if v.size > 1 else f"{100 * v.mean():.1f}"
    return text if v.size == total else f"{text} (n={v.size}/{total}, the rest not finite)"


def format_report(merged: dict) -> str:
    """Markdown tables of the merged sweeps.

    Parameters
    ----------
    merged : dict
        Sweep name to merged dataset.

    Returns
    -------
    str
    """
    import numpy as np

    from rieszflow.engine.stats import power_law_fit       # here, as numpy: `rieszflow --help` loads no scipy

    out = []
    if "p1" in merged:
        ds = merged["p1"]
        out.append("## P1: theory numerics\n")
        out.append("| check | result | pass criterion | pass |\n|---|---|---|---|")
        for kind in ("cos_sin", "sigmoid", "relu"):
            sel = ds.sel({"method": f"sampling_{kind}"}).isel(trial=0)
            slope = float(sel["slope"])
            mm = sel["m_mse"].values
            row = f"| sampling {kind}: slope of MSE vs m; m MSE | {slope:.3f}; {np.round(mm, 4).tolist()} | slope in [-1.1, -0.9]"
            ok = -1.1 <= slope <= -0.9
            if kind == "cos_sin":
                var = float(sel["exact_var"])
                row += f", m MSE within 10% of Var = {var:.4f}"
                ok = ok and bool(np.all(np.abs(mm / var - 1) < 0.1))
            if np.isfinite(float(sel["lipschitz_L"])):
                L = float(sel["lipschitz_L"])
                bound_ok = bool(np.all(sel["p_exceed"].values <= sel["bound"].values)) and bool(np.all(mm <= L ** 2))
                row += f", P(dev >= eps) <= 2exp(-m eps^2/2L^2) and m MSE <= L^2 (L = {L:.2f})"
                ok = ok and bound_ok
            out.append(row + f" | {'yes' if ok else 'NO'} |")
        for act in ("relu", "sigmoid"):
            sel = ds.sel({"method": f"parametrisation_{act}"}).isel(trial=0)
            e = sel["sup_err"].values
            holds = bool(np.all(sel["bound_holds"].values == 1))
            ok = e[-1] < 0.1 * e[0] and holds
            out.append(f"| parametrisation {act}: sup|k - k_NN| at hidden {sel['hidden'].values.tolist()} | "
                       f"{np.array2string(e, precision=2)} | hidden-64 error < 0.1 x hidden-4 error; "
                       f"Cauchy-Schwarz bound at every pair ({holds}) | {'yes' if ok else 'NO'} |")
        sel = ds.sel({"method": "truncation"}).isel(trial=0)
        ok = bool(np.all(sel["truncation_error"].values <= sel["tail"].values + 3 * sel["truncation_se"].values))
        out.append(f"| truncation (Lemmas 4-5): |k - k_A| at R = {sel['radius'].values.tolist()} | "
                   f"{np.array2string(sel['truncation_error'].values, precision=4)} | <= P(chi_d > R) = "
                   f"{np.array2string(sel['tail'].values, precision=4)} (+3 se) | {'yes' if ok else 'NO'} |")
        sel = ds.sel({"method": "rademacher"}).isel(trial=0)
        slope = float(sel["rademacher_slope"])
        ok = abs(slope + 0.5) <= 0.05 and bool(np.all(sel["rademacher"].values <= sel["rademacher_bound"].values))
        out.append(f"| Rademacher (standard substitute, 3.8): slope | {slope:.3f} | -0.5 +- 0.05, below "
                   f"sqrt(sum|phi|^2)/N | {'yes' if ok else 'NO'} |")
        sel = ds.sel({"method": "gram"}).isel(trial=0)
        ok = bool(np.all(sel["ratio"].values >= -1e-10))
        out.append(f"| Prop. 1 PSD: min lambda_min/lambda_max over {sel['variant'].values.tolist()} | "
                   f"{float(sel['ratio'].values.min()):.1e} | >= -1e-10 | {'yes' if ok else 'NO'} |")
        sel = ds.sel({"method": "tails"}).isel(trial=0)
        out.append(f"| single-sample tails P(|A~| > t), t = {sel['t'].values.tolist()} | ReLU "
                   f"{np.array2string(sel['relu'].values, precision=4)}, sigmoid "
                   f"{np.array2string(sel['sigmoid'].values, precision=4)}, Gaussian "
                   f"{np.array2string(sel['gaussian'].values, precision=6)} | ReLU heavier than Gaussian at t >= 4 "
                   f"| {'yes' if sel['relu'].values[1] > 10 * sel['gaussian'].values[1] else 'NO'} |")
        out.append("")
    if "p2" in merged:
        ds = merged["p2"]
        ns = ds["n"].values.astype(float)
        out.append("## P2: runtime scaling (one attention layer, forward, B = 1)\n")
        out.append("| method | " + " | ".join(f"n={int(n)}" for n in ns) + " | slope (n >= 1024) | peak MB at max n |")
        out.append("|---|" + "---|" * (len(ns) + 2))
        for m in ds["method"].values:
            t = ds["seconds"].sel({"method": m}).isel(trial=0).values.astype(float)
            mem = ds["peak_bytes"].sel({"method": m}).isel(trial=0).values.astype(float)
            ok = np.isfinite(t) & (ns >= 1024)
            slope = (power_law_fit(ns[ok], t[ok], method="polyfit").slope
                     if ok.sum() >= 2 else float("nan"))
            last = mem[np.isfinite(mem)][-1] / 2 ** 20 if np.isfinite(mem).any() else float("nan")
            out.append(f"| {m} | " + " | ".join("-" if not np.isfinite(v) else f"{1e3 * v:.1f} ms" for v in t)
                       + f" | {slope:.2f} | {last:.1f} |")
        t_l = ds["seconds"].sel({"method": "luna_pwl"}).isel(trial=0).values.astype(float)
        t_e = ds["seconds"].sel({"method": "elu"}).isel(trial=0).values.astype(float)
        out.append(f"\nLUNA (piecewise-linear psi) / elu+1 time ratio per n: "
                   f"{np.round(t_l / t_e, 1).tolist()}. Pass criteria of the spec: slope in [0.8, 1.25] "
                   f"for the linear methods, >= 1.6 for softmax (timings of concurrent sweep tasks on a "
                   f"shared CPU: noisy).")
        out.append("")
    if "p3" in merged:
        ds = merged["p3"]
        out.append("## P3: mini-LRA test accuracy (%), mean +- sd over seeds (validation-selected)\n")
        tasks = [str(t) for t in ds["task"].values]
        out.append("| method | " + " | ".join(tasks) + " | s/step (" + tasks[0] + ") |")
        out.append("|---|" + "---|" * (len(tasks) + 1))
        for m in ds["method"].values:
            cells = [_mean_sd(ds["test_accuracy"].sel({"method": m, "task": t}).values) for t in tasks]
            sps = float(np.nanmean(ds["seconds_per_step"].sel({"method": m, "task": tasks[0]}).values))
            out.append(f"| {m} | " + " | ".join(cells) + f" | {sps:.3f} |")
        out.append("")
    if "p4" in merged:
        ds = merged["p4"]
        out.append("## P4: M/L ablation (Digits-seq, 1 seed)\n\n| M x L | D | test acc (%) | s/step |\n|---|---|---|---|")
        for ml in ds["ml"].values:
            sel = ds.sel({"method": "luna", "ml": ml}).isel(trial=0)
            out.append(f"| {ml} | {int(float(sel['D']))} | {100 * float(sel['test_accuracy']):.1f} | "
                       f"{float(sel['seconds_per_step']):.3f} |")
        out.append("")
    if "p5" in merged:
        ds = merged["p5"]
        out.append("## P5: kernel-form ablation (Digits-seq, DWC on)\n\n| variant | test acc (%) | zero-den rows | "
                   "negative-den rows |\n|---|---|---|---|")
        for m in ds["method"].values:
            sel = ds.sel({"method": m})
            out.append(f"| {m} | {_mean_sd(sel['test_accuracy'].values)} | "
                       f"{float(np.nanmean(sel['zero_den_fraction'].values)):.4f} | "
                       f"{float(np.nanmean(sel['negative_den_fraction'].values)):.4f} |")
        out.append("")
    if "p6" in merged:
        ds = merged["p6"]
        out.append("## P6: post-hoc conversion of the softmax Digits-seq model\n\n| student | teacher acc | "
                   "Stage-1 loss first -> last | acc before Stage 2 | acc after | recover % | row KL after "
                   "Stage 1 / 2 |\n|---|---|---|---|---|---|---|")
        for m in ds["method"].values:
            sel = ds.sel({"method": m}).isel(trial=0)
            g = lambda k: float(sel[k])   # noqa: E731
            out.append(f"| {m} | {100 * g('teacher_accuracy'):.1f} | {g('stage1_loss_first'):.3f} -> "
                       f"{g('stage1_loss_last'):.3f} | {100 * g('accuracy_before_stage2'):.1f} | "
                       f"{100 * g('test_accuracy'):.1f} | {g('recover'):.1f} | {g('kl_stage1'):.3f} / "
                       f"{g('kl_stage2'):.3f} |")
        out.append("")
    if "kernels" in merged:
        ds = merged["kernels"]
        out.append("## Learned maps vs learned particles: how far learning moves the kernel\n\n"
                   "MMD (Gaussian kernel on the key vectors, median bandwidth) between each query's "
                   "layer-0 attention row under the initial and the learned kernel, averaged over "
                   "held-out test sequences; +- is the standard error over sequences, then mean over "
                   "seeds. 'feature map only': same trained q, k, feature-map parameters reset to "
                   "their initialisation; 'whole layer': the initial network against the trained one.\n")
        out.append("| task | method | test acc (%) | MMD feature map only | MMD whole layer |\n|---|---|---|---|---|")
        for t in ds["task"].values:
            for m in ds["method"].values:
                sel = ds.sel({"method": m, "task": t})
                f = sel["mmd_feature"].values.astype(float)
                fse = sel["mmd_feature_se"].values.astype(float)
                lv = sel["mmd_layer"].values.astype(float)
                lse = sel["mmd_layer_se"].values.astype(float)
                fcell = "n/a" if not np.isfinite(f).any() else f"{np.nanmean(f):.4f} +- {np.nanmean(fse):.4f}"
                out.append(f"| {t} | {m} | {_mean_sd(sel['test_accuracy'].values)} | {fcell} | "
                           f"{np.nanmean(lv):.4f} +- {np.nanmean(lse):.4f} |")
        out.append("")
    if "dead_init" in merged:
        dead = merged["dead_init"]["dead"].transpose("trial", "layer", "channel", ...).values.astype(float)
        dead = dead.reshape(dead.shape[:3])                                # the one method ("luna")
        per_draw = dead.reshape(dead.shape[0], -1).sum(axis=1)             # dead channels per draw
        C, T = dead[0].size, per_draw.size
        mean, sd = per_draw.mean(), per_draw.std(ddof=1) if T > 1 else float("nan")
        se = sd / np.sqrt(T)
        frac7 = float(np.mean(per_draw >= 7))
        out.append(f"## Dead psi channels at initialisation (Monte Carlo over {T} draws of the listing's "
                   f"initialisation, Digits-seq model, {C} channels per draw)\n\n"
                   f"Each draw judged on its own initial network's u range (1st-99th percentile). Dead channels "
                   f"per draw: mean {mean:.2f} +- {se:.2f} (SE), sd {sd:.2f}; rate {mean / C:.3f} +- {se / C:.3f} "
                   f"(SE) per channel; per layer {np.round(dead.mean(axis=(0, 2)), 3).tolist()}; P(>= 7 of {C} "
                   f"dead) = {frac7:.3f}. Observed in P7's single draw: 7 of 16, judged on the trained model's "
                   f"u range.\n")
    if "p7" in merged:
        ds = merged["p7"].sel({"method": "luna"}).isel(trial=0)
        out.append(f"## P7: learned psi (Digits-seq, test acc {100 * float(ds['test_accuracy']):.1f}%)\n\n"
                   f"relative L2 change of psi from its initialisation per layer: "
                   f"{np.round(ds['psi_rel_change'].values, 3).tolist()} (pass: > 0.10)\n")
    return "\n".join(out)


def make_plots(merged: dict, out: Path) -> list:
    """P7's PNGs (psi curves over the u histogram; attention heat-maps) and P2's log-log plot.

    Parameters
    ----------
    merged : dict
        Sweep name to merged dataset.
    out : pathlib.Path
        The study directory.

    Returns
    -------
    list of pathlib.Path
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    paths = []
    if "p2" in merged:
        ds = merged["p2"]
        fig, ax = plt.subplots(figsize=(6, 4), constrained_layout=True)
        for m in ds["method"].values:
            ax.loglog(ds["n"].values, ds["seconds"].sel({"method": m}).isel(trial=0).values, "o-", label=str(m))
        ax.set_xlabel("sequence length n")
        ax.set_ylabel("forward seconds (one layer)")
        ax.legend(fontsize=7)
        p = out / "p2" / "p2_runtime.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        paths.append(p)
    if "p7" in merged:
        ds = merged["p7"].sel({"method": "luna"}).isel(trial=0)
        n_layer, n_ch = ds.sizes["layer"], ds.sizes["channel"]
        fig, axes = plt.subplots(n_layer, n_ch, figsize=(2 * n_ch, 2.2 * n_layer), squeeze=False,
                                 constrained_layout=True)
        for i in range(n_layer):
            u = ds["u"].values[i]
            for c in range(n_ch):
                ax = axes[i, c]
                ax.plot(u, ds["psi"].values[i, :, c], "C0", lw=1.2)
                ax.plot(u, ds["psi_init"].values[i, :, c], "C1--", lw=0.8)
                tw = ax.twinx()
                tw.bar(np.linspace(u[0], u[-1], ds.sizes["bin"]), ds["u_hist"].values[i],
                       width=(u[-1] - u[0]) / ds.sizes["bin"], color="0.8", alpha=0.5)
                tw.set_yticks([])
                ax.set_title(f"layer {i}, psi_{c}", fontsize=7)
                ax.tick_params(labelsize=6)
        p = out / "p7" / "p7_psi_curves.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        paths.append(p)
        att = ds["attention"].values                                  # (layer, head, image, 8, 8)
        fig, axes = plt.subplots(att.shape[0] * att.shape[1], att.shape[2], figsize=(8, 8), squeeze=False,
                                 constrained_layout=True)
        for i in range(att.shape[0]):
            for h in range(att.shape[1]):
                for j in range(att.shape[2]):
                    ax = axes[i * att.shape[1] + h, j]
                    ax.imshow(att[i, h, j], cmap="viridis")
                    ax.set_xticks([])
                    ax.set_yticks([])
                    ax.set_title(f"L{i} H{h} img{j}", fontsize=7)
        p = out / "p7" / "p7_attention_maps.png"
        fig.savefig(p, dpi=110)
        plt.close(fig)
        paths.append(p)
    return paths


def run_from_args(args: argparse.Namespace) -> int:
    """Resolve the configuration, run the chosen sweeps, merge, print the tables.

    Parameters
    ----------
    args : argparse.Namespace

    Returns
    -------
    int
        0 when every task is complete; 1 if any task failed; 2 on bad input.
    """
    from rieszflow.studies.luna.study import QUICK_OVERRIDES, LunaConfig, specs, task_config

    prog = "rieszflow luna"
    def given():
        if args.backend not in (None, "numpy"):
            raise ValueError(f"--backend {args.backend}: rieszflow luna runs on numpy only")
        return given_options(seed=args.seed)

    status, cfg, out = start_sweep_study(prog, "luna", LunaConfig, QUICK_OVERRIDES, args, specs, task_config,
                                         given=given)
    if status is not None:
        return status
    wanted = args.sweep or (QUICK_SWEEPS if args.quick else SWEEPS)
    chosen = [sp for sp in specs(cfg) if sp.name in wanted]
    log = (lambda *a: None) if args.quiet else (lambda s: print(s, flush=True))
    t0 = time.perf_counter()
    merged, failed = run_sweeps(prog, out, chosen, args, log)
    report = format_report(merged)
    print(report)
    with atomic_output(out / "report.md") as tmp:      # rieszflow report OUT reads it
        tmp.write_text(report + "\n")
    if not args.no_plots:
        for p in make_plots(merged, out):
            log(f"plot: {p}")
    print(format_merged(out, merged, time.perf_counter() - t0))
    return 1 if failed else 0
