"""Tables and figures of the attention-theory study (formatting only; no experiments here)."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from rieszflow.theory import (
    cor30_constant,
)

__all__ = ["format_table", "make_plots"]


def _fmt(v: float) -> str:
    if not np.isfinite(v):
        return "-" if np.isnan(v) else "inf"
    return f"{v:.3g}" if 1e-3 <= abs(v) < 1e4 or v == 0 else f"{v:.2e}"


def _holds(flag: int, viol: int, n: int) -> str:
    if flag < 0:
        return "n/a"
    return f"yes (0/{n})" if flag else f"NO ({viol}/{n})"


def format_table(rows, model: dict | None = None) -> str:
    """The report: one line per statement, then the counterexamples of the failing ones.

    Columns: statement id, paper constant, corrected constant, ratio (both at the trial where
    ratio/paper is largest), the largest ratio over all trials, the largest ratio/corrected, and
    whether the paper's and the corrected constants hold (violations/trials).

    Parameters
    ----------
    rows : list of BoundRow
    model : dict, optional
        Output of :func:`~rieszflow.studies.attention_theory.component_bounds.model_checks`, printed first.

    Returns
    -------
    str
    """
    lines = []
    if model:
        lines.append("Model (measure route vs matrix route, max abs difference): " + ", ".join(
            f"{k} {v:.1e}" for k, v in model.items()))
        lines.append("")
    head = (f"{'statement':<22} {'sets':<12} {'paper':>9} {'corrected':>9} {'ratio':>9} "
            f"{'max ratio':>9} {'max r/corr':>10}  {'paper holds?':<14} {'corrected holds?':<14}")
    lines += [head, "-" * len(head)]
    for r in rows:
        s = r.summary()
        lines.append(
            f"{r.bound_id:<22} {r.token_sets:<12} {_fmt(s['paper_constant']):>9} "
            f"{_fmt(s['corrected_constant']):>9} {_fmt(s['ratio_at_worst']):>9} "
            f"{_fmt(s['max_ratio']):>9} {_fmt(s['max_ratio_over_corrected']):>10}  "
            f"{_holds(s['paper_holds'], s['paper_violations'], s['paper_checked']):<14} "
            f"{_holds(s['corrected_holds'], s['corrected_violations'], s['corrected_checked'])}")
    lines.append("")
    lines.append("Statements:")
    for r in rows:
        lines.append(f"  {r.bound_id}: {r.statement}  ({r.reference})")
    fails = [r.counterexample() for r in rows if r.counterexample()]
    if fails:
        lines.append("")
        lines.append("Counterexamples to the paper's constants:")
        lines.extend(f"  - {t}" for t in fails)
    notes = [f"  - {r.bound_id}: {r.note}" for r in rows if r.note and not r.counterexample()]
    if notes:
        lines.append("")
        lines.append("Notes:")
        lines.extend(notes)
    return "\n".join(lines)


def make_plots(path: Path, rows, fam, fp) -> list:
    """Draw the study's figures beside its HDF5 file (labelled axes, PNG).

    Parameters
    ----------
    path : pathlib.Path
        The study's HDF5 file; figures are written as ``<stem>_<name>.png`` beside it.
    rows : list of BoundRow
        The experiment rows (bounds against measured ratios).
    fam : dict
        The Cor. 30 family (:func:`rieszflow.studies.attention_theory.experiments.cor30_family`).
    fp : dict
        The Prop. 26 fixed-point runs (:func:`~rieszflow.studies.attention_theory.prop26.fixed_point_collapse`).

    Returns
    -------
    list of pathlib.Path
        The files written.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stem = path.with_suffix("")
    files = []
    # 1. every bound: log10(max ratio / constant)
    fig, ax = plt.subplots(figsize=(8, 0.32 * len(rows) + 1.5))
    y = np.arange(len(rows))
    sums = [r.summary() for r in rows]
    lp = [math.log10(s["max_ratio_over_paper"]) if s["max_ratio_over_paper"] > 0 else np.nan
          for s in sums]
    lc = [math.log10(s["max_ratio_over_corrected"]) if s["max_ratio_over_corrected"] > 0 else np.nan
          for s in sums]
    ax.barh(y - 0.2, lp, height=0.4, label="paper constant", color="tab:red")
    ax.barh(y + 0.2, lc, height=0.4, label="corrected constant", color="tab:blue")
    ax.plot(lp, y - 0.2, "|", color="tab:red", ms=8)
    ax.plot(lc, y + 0.2, "|", color="tab:blue", ms=8)
    ax.axvline(0.0, color="k", lw=1)
    ax.set_yticks(y, [r.bound_id for r in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("log10 max(measured ratio / constant)   (> 0: the constant fails)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    files.append(Path(f"{stem}_bounds.png"))
    fig.savefig(files[-1], dpi=110)
    plt.close(fig)
    # 2. Cor 30 growth
    fig, ax = plt.subplots(figsize=(6, 4))
    L = fam["log_n"]
    grid = np.linspace(min(2.0, L.min()), max(L.max(), fam["crossing_log_n"] + 5), 200)
    ax.plot(grid, (1 + np.log(np.expm1(grid))) / 2, "k-", lw=1, label="(1 + ln(N-1))/2")
    ax.plot(grid, [cor30_constant(math.exp(g), 1, 1.0) for g in grid], "r--",
            label="printed C30 (not certified)")
    a, b = fam["sqrt_fit"]
    ax.plot(grid, a + b * np.sqrt(grid), "g:", label="best a + b sqrt(ln N) fit")
    ok = np.isfinite(fam["ratio_particles"])
    ax.plot(L[ok], fam["ratio_particles"][ok], "o", label="particle arrays (exact W1)")
    ok = np.isfinite(fam["ratio_decimal"])
    ax.plot(L[ok], fam["ratio_decimal"][ok], "s", mfc="none", label="two atoms, 60-digit decimal")
    ax.axvline(fam["crossing_log_n"], color="grey", lw=0.8)
    ax.set_xlabel("ln N")
    ax.set_ylabel("W1(out) / W1(in)")
    ax.set_title("Cor. 30 counterexample family (K2, d = 1)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    files.append(Path(f"{stem}_cor30.png"))
    fig.savefig(files[-1], dpi=110)
    plt.close(fig)
    # 3. Prop 26 recursions
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for c in fp["cases"]:
        it = np.arange(len(fp[c]["max_deviation"]))
        axes[0].semilogy(it, np.maximum(fp[c]["max_deviation"], 1e-17), label=c)
        axes[1].semilogy(it, np.maximum(fp[c]["w1_between_inputs"], 1e-17), label=c)
    c0 = fp["cases"][0]
    axes[0].semilogy(np.arange(len(fp[c0]["envelope"])), fp[c0]["envelope"], "k:",
                     label="kappa^h D_0, kappa = 0.5 (collapse cases)")
    axes[0].set_title("max_i ||x_i^h - x*||_inf  (x* = f(l(x*)); x* = 0 for certificate, rotation)",
                      fontsize=9)
    axes[1].set_title("W1 between the trajectories of two inputs")
    for ax in axes:
        ax.set_xlabel("layer h")
        ax.legend(fontsize=6)
    fig.tight_layout()
    files.append(Path(f"{stem}_fixed_point.png"))
    fig.savefig(files[-1], dpi=110)
    plt.close(fig)
    # 4. Thm 23 instances: measured ratio against both bounds
    fig, ax = plt.subplots(figsize=(6, 4.5))
    for r in rows:
        if r.bound_id.startswith("thm23"):
            mk = {"thm23_random": "o", "thm23_adversarial": "s", "thm23_dirac": "^"}[r.bound_id]
            ax.loglog(r.paper, r.ratio, mk, mfc="none", color="tab:red", ms=4,
                      label=f"{r.bound_id} vs paper")
            ax.loglog(r.corrected, r.ratio, mk, mfc="none", color="tab:blue", ms=4,
                      label=f"{r.bound_id} vs corrected")
    vals = np.concatenate([np.concatenate([r.paper, r.corrected, r.ratio]) for r in rows
                           if r.bound_id.startswith("thm23")])
    vals = vals[np.isfinite(vals) & (vals > 0)]
    lim = [vals.min() / 2, vals.max() * 2]
    ax.plot(lim, lim, "k-", lw=0.8)
    ax.set_xlabel("bound on tau(A)")
    ax.set_ylabel("measured W1 ratio")
    ax.set_title("Thm. 23: below the diagonal = bound holds")
    ax.legend(fontsize=6)
    fig.tight_layout()
    files.append(Path(f"{stem}_thm23.png"))
    fig.savefig(files[-1], dpi=110)
    plt.close(fig)
    return files
