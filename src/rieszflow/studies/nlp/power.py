"""The power page of ``rieszflow nlp``: matched Kernel-against-Vanilla pairs over many seeds, pooled.

For every feature map of a sweep (``Vanilla-<map>`` against ``Kernel-<map>``) and every Phase A
grid cell (``Vanilla-<map>[-<cell>]`` against ``Kernel-<map>-<cell>``, see
:data:`rieszflow.studies.nlp.study.PHASE_A_CELLS`), from whatever task files are complete:

* per seed: both accuracies, their difference, McNemar's exact test on the test predictions;
* the primary analysis, over seeds (the seed is the unit of training randomness the claim is
  about): the mean seed-level difference with its 95 % Student t interval and paired t p, the
  Wilcoxon signed-rank test and the exact sign-flip permutation test
  (:func:`rieszflow.engine.stats.sign_flip_test`) of the seed-level differences; Holm's
  adjustment of each across the maps tested;
* the Mantel-Haenszel test for matched pairs (:func:`rieszflow.engine.stats.matched_pairs_test`):
  both arms predict the same test sentences, so each sentence of each seed is a matched pair;
  its statistic is McNemar's on the discordant counts summed over seeds, its odds ratio
  ``kernel-only / vanilla-only`` with an exact interval. It treats the sentences as the
  replicates, so it speaks to this test split, not to the spread over training seeds; the
  Cochran-Mantel-Haenszel test on ``arm x right/wrong`` margins, which treats the two arms as
  independent samples, is not used;
* the paper's value compared as an estimate with its own error (a mean over 3 seeds:
  :func:`rieszflow.engine.stats.compare_with_reference`, with this project's seed-level SD for
  the paper's, which it does not report), and the power of the design for the paper's effect
  (:func:`rieszflow.engine.stats.paired_t_power`);
* the noise controls of Phase A (cells ``noalign`` and ``jitter``): the kernel run against each
  control of the same seed; a gain credited to learning must exceed both;
* the effect interval: the Student t interval over seeds. The seed is the
  unit of replication (the training randomness the claim is about); the test examples are shared
  by every seed, so an interval from the pooled example counts would ignore the seed-to-seed
  spread, and a percentile bootstrap over 10 seeds under-covers (its coverage approaches the
  nominal level only for larger samples); the t interval is exact for normal differences and
  the differences of accuracies on a 1,066-sentence test split are averages of many terms;
* the detectable effect: the smallest mean difference the paired t-test (alpha 0.05, two-sided,
  power 0.8) detects with the planned number of seeds given the observed seed-level SD
  (:func:`rieszflow.engine.stats.detectable_effect`), and the one McNemar's pooled test detects
  given the observed discordance rate (:func:`rieszflow.engine.stats.mcnemar_detectable_effect`);
* for the Phase A cells, beside the accuracy change: how far Phase A moved the particles (paired
  MMD^2 between the initial and the final particles, ``phase_a_mmd2`` of each task) and the
  kernel (the zonal Kernel Geometry Divergence of the final to the initial kernel,
  ``phase_a_kgd``, and the kernel's distance on the sphere and on held-out tokens over the
  random-feature noise at the same m, ``phase_a_kernel_ratio`` and ``phase_a_token_ratio``).

Until every planned seed of a pair is complete the page says "k of n seeds complete; verdict not
decidable until ...", and the numbers are interim.

References
----------
"A Coulomb Particle Model for Learning Kernel Attention in Transformers" (paper 000 of this
project; under review, no arXiv identifier), Table 2; McNemar, Psychometrika 12 (1947) 153-157;
Mantel and Haenszel, J. Natl. Cancer Inst. 22 (1959) 719-748; Wilcoxon, Biometrics Bulletin 1
(1945) 80-83; Cohen, Statistical Power Analysis (1988), ch. 2; Connor, Biometrics 43 (1987) 207-211.
"""
from __future__ import annotations

import json
import math

import numpy as np

from rieszflow.engine import stats
from rieszflow.engine.features import ATTENTION_FEATURE_MAPS

__all__ = ["PLANNED_TASK_SECONDS", "MOVEMENT", "CONTROL_CELLS", "PAPER_SEEDS", "pairs", "pair_analysis", "pair_from_counts",
           "task_commits", "rerun_task", "task_seconds", "verdict", "format_power_report"]

#: Phase A grid cells that are noise controls of the kernel run (``MainJobConfig.phase_a_control``).
CONTROL_CELLS = ("noalign", "jitter")

#: Seeds behind each value of paper 000's Table 2 (its App. F.2: means over 3 seeds).
PAPER_SEEDS = 3

#: CPU seconds of one main-job run at the default budget on Rotten Tomatoes, measured earlier
#: (about 8.7 CPU-minutes per run, one thread); used for the estimate until task files exist.
PLANNED_TASK_SECONDS = 8.7 * 60

#: How far Phase A moved a kernel run: key of :func:`pair_analysis` -> task variable.
MOVEMENT = {"mmd2": "phase_a_mmd2", "mmd2_se": "phase_a_mmd2_se", "kgd2": "phase_a_kgd2",
            "kgd2_se": "phase_a_kgd2_se", "kernel_ratio": "phase_a_kernel_ratio",
            "token_ratio": "phase_a_token_ratio"}


def pairs(methods) -> list:
    """The matched (vanilla, kernel, cell) comparisons among a sweep's methods.

    Parameters
    ----------
    methods : sequence of str
        Variant names of one sweep (``Vanilla-<map>``, ``Kernel-<map>``, ``Kernel-<map>-<cell>``, ...).

    Returns
    -------
    list of tuple
        ``(vanilla, kernel, map, cell)`` in sweep order; ``cell`` is ``""`` for the paper-order
        kernel run. A cell's vanilla run is ``Vanilla-<map>-<cell>`` where the sweep has one, else
        ``Vanilla-<map>``. The late variant ``Kernel-<map>-after<k>`` is left out (Table 2 has it).
    """
    from rieszflow.studies.nlp.study import PHASE_A_CELLS

    names = [str(m) for m in methods]
    out = []
    for fm in ATTENTION_FEATURE_MAPS:
        van = f"Vanilla-{fm}"
        if van not in names:
            continue
        if f"Kernel-{fm}" in names:
            out.append((van, f"Kernel-{fm}", fm, ""))
        for cell in PHASE_A_CELLS:
            if f"Kernel-{fm}-{cell}" in names:
                own = f"Vanilla-{fm}-{cell}"
                out.append((own if own in names else van, f"Kernel-{fm}-{cell}", fm, cell))
    return out


def pair_analysis(ds, vanilla: str, kernel: str) -> dict:
    """Per-seed and pooled comparison of ``kernel`` against ``vanilla`` (seeds with both complete).

    Parameters
    ----------
    ds : xarray.Dataset
        One merged ``nlp-<dataset>`` sweep (:func:`rieszflow.studies.sweep.open_sweep`; NaN marks
        a missing task).
    vanilla, kernel : str
        Method names.

    Returns
    -------
    dict
        ``seeds`` (trial indices with both tasks complete), ``acc_v``, ``acc_k``, ``delta``
        (kernel minus vanilla), ``mcnemar`` (one :class:`~rieszflow.engine.stats.McNemarResult`
        per seed, A = vanilla, B = kernel), the kernel run's Phase A movement per seed
        (the keys of :data:`MOVEMENT`: ``mmd2``, ``mmd2_se``, ``kgd2``, ``kgd2_se``,
        ``kernel_ratio``, ``token_ratio``; NaN where not recorded), ``n_examples``; with at least one seed
        ``pooled_mcnemar`` and ``matched`` (:func:`~rieszflow.engine.stats.matched_pairs_test`,
        A = vanilla, B = kernel: its odds ratio > 1 favours the kernel), ``discordance``;
        with at least two ``t`` and ``wilcoxon`` (:func:`~rieszflow.engine.stats.paired_test`),
        ``sign_flip`` (:func:`~rieszflow.engine.stats.sign_flip_test`) and ``interval``
        (:func:`~rieszflow.engine.stats.mean_interval`).
    """
    acc = [str(m) for m in ds["metric"].values].index("accuracy")
    trials = ds["trial"].values

    Mv = ds["test_metrics"].sel({"method": vanilla}).values.reshape(trials.size, -1)[:, acc]
    Mk = ds["test_metrics"].sel({"method": kernel}).values.reshape(trials.size, -1)[:, acc]
    ok = ~(np.isnan(Mv) | np.isnan(Mk))
    pv = ds["test_proba"].sel({"method": vanilla}).values.reshape(trials.size, -1)
    pk = ds["test_proba"].sel({"method": kernel}).values.reshape(trials.size, -1)
    y = ds["test_label"].sel({"method": vanilla}).values.reshape(trials.size, -1)
    def recorded(name):                    # per seed; NaN where a task predates the variable
        if name not in ds:
            return np.full(trials.size, np.nan)
        return ds[name].sel({"method": kernel}).values.reshape(-1)[ok]

    out = {"seeds": [int(t) for t in trials[ok]], "acc_v": Mv[ok], "acc_k": Mk[ok], "delta": (Mk - Mv)[ok],
           "mcnemar": [], "n_examples": int(y.shape[1])}
    for key, name in MOVEMENT.items():
        out[key] = recorded(name)
    for i in np.flatnonzero(ok):
        right_v, right_k = (pv[i] >= 0.5) == y[i], (pk[i] >= 0.5) == y[i]
        out["mcnemar"].append(stats.mcnemar(right_v, right_k))
    if out["mcnemar"]:
        m = out["mcnemar"]
        a, b, n = sum(t.a_only for t in m), sum(t.b_only for t in m), sum(t.n for t in m)
        out["pooled_mcnemar"] = stats.mcnemar_counts(a, b, n)
        out["matched"] = stats.matched_pairs_test(a, b, n)
        out["discordance"] = (a + b) / n
    if ok.sum() >= 2:
        out["t"] = stats.paired_test(out["acc_k"], out["acc_v"], test="t")
        out["wilcoxon"] = stats.paired_test(out["acc_k"], out["acc_v"], test="wilcoxon")
        out["sign_flip"] = stats.sign_flip_test(out["delta"]) if ok.sum() <= 20 else None
        out["interval"] = stats.mean_interval(out["delta"])
    return out


def task_commits(sweep_dir, methods=None) -> dict:
    """The git commit of every task file of a sweep directory.

    Parameters
    ----------
    sweep_dir : str or os.PathLike
        A sweep directory (``<out>/nlp-<dataset>``) with a ``tasks/`` folder.
    methods : sequence of str, optional
        Only these variants (a preset's own; several presets can share one directory).

    Returns
    -------
    dict
        ``(method, trial) -> code version`` for every readable
        ``<method>__...__trial<k>__<hash>.h5``: :func:`rieszflow.engine.storage.provenance.code_identity`
        of the file (the commit; ``"-dirty+<diff hash>"`` for an uncommitted tree; suffixed
        ``" (at write)"`` when the file lacks ``git_commit_of = "loaded code"``, since files
        written before that attribute existed record the checkout's commit when they were
        written, which can be newer than the code the run had loaded; ``"unknown"`` without a
        commit). Files that cannot be read (being written, or
        corrupt) are left out.
    """
    from pathlib import Path

    import h5py

    from rieszflow.engine.storage.provenance import code_identity

    out = {}
    for path in sorted((Path(sweep_dir) / "tasks").glob("*.h5")):
        parts = path.stem.split("__")
        if len(parts) < 3 or not parts[-2].startswith("trial") or not parts[-2][5:].isdigit():
            continue
        if methods is not None and parts[0] not in methods:
            continue
        try:
            with h5py.File(path, "r") as h:
                attrs = {k: h.attrs.get(k) for k in ("git_commit", "git_commit_of", "git_diff_sha256")}
        except OSError:
            continue
        out[(parts[0], int(parts[-2][5:]))] = code_identity(attrs)
    return out


def rerun_task(sweep_dir, method: str, trial: int) -> dict:
    """Rerun one stored task of an NLP sweep with the code of this process and compare.

    The task files record the commit their code came from; a sweep that runs for hours spans
    commits. Rerunning a task from an older commit says whether the code changes between them
    moved the results (float32 rounding that training could amplify) or not.

    Parameters
    ----------
    sweep_dir : str or os.PathLike
        A sweep directory of ``rieszflow nlp`` (``<out>/nlp-<dataset>``, with ``sweep.json``).
    method : str
        Variant name (e.g. ``"Vanilla-softplus"``).
    trial : int
        Trial (seed offset) of the stored task.

    Returns
    -------
    dict
        ``task``, ``stored_commit``, ``rerun_commit``, ``accuracy_stored``, ``accuracy_rerun``,
        ``max_abs_proba_diff`` (largest difference of the test probabilities),
        ``predictions_differ`` (test sentences whose predicted label changed), ``best_epoch``
        (stored, rerun) and ``seconds`` (the rerun's wall time).

    Raises
    ------
    FileNotFoundError
        If the sweep has no ``sweep.json`` or no complete file of that task.
    """
    import time
    from pathlib import Path

    import xarray as xr

    from rieszflow.engine.storage.provenance import provenance
    from rieszflow.studies.nlp.study import nlp_task
    from rieszflow.studies.sweep import Task
    from rieszflow.studies.sweep.tasks import _read_task_config

    sweep_dir = Path(sweep_dir)
    spec_file = sweep_dir / "sweep.json"
    if not spec_file.is_file():
        raise FileNotFoundError(f"{sweep_dir} has no sweep.json: not a sweep directory of rieszflow nlp")
    files = sorted((sweep_dir / "tasks").glob(f"{method}__*__trial{int(trial)}__*.h5"))
    if not files:
        raise FileNotFoundError(f"{sweep_dir / 'tasks'} holds no complete task {method!r} trial {trial}")
    stored = _read_task_config(files[0])            # the task and the configuration it ran with
    t = stored["task"]
    with xr.open_dataset(files[0], engine="h5netcdf") as old:
        old = old.load()
    t0 = time.perf_counter()
    new = nlp_task(Task(t["sweep"], t["method"], tuple(t["params"].items()), int(t["trial"])), stored["config"], None)
    seconds = time.perf_counter() - t0
    acc = [str(m) for m in new["metric"].values].index("accuracy")
    p_new, p_old = new["test_proba"].values, old["test_proba"].values
    return {"task": f"{method} trial {int(trial)}", "stored_commit": str(old.attrs.get("git_commit", "unknown")),
            "rerun_commit": provenance()["git_commit"],
            "accuracy_stored": float(old["test_metrics"].values[acc]),
            "accuracy_rerun": float(new["test_metrics"].values[acc]),
            "max_abs_proba_diff": float(np.max(np.abs(p_new - p_old))),
            "predictions_differ": int(np.sum((p_new >= 0.5) != (p_old >= 0.5))),
            "best_epoch": (int(old["best_epoch"]), int(new["best_epoch"])), "seconds": seconds}


def task_seconds(ds) -> np.ndarray:
    """Training wall seconds of every complete task of a merged sweep (``train_seconds``).

    Parameters
    ----------
    ds : xarray.Dataset
        A merged ``nlp-<dataset>`` sweep.

    Returns
    -------
    numpy.ndarray
        ``train_seconds`` of the complete tasks, 1-D.
    """
    v = np.asarray(ds["train_seconds"].values, float).ravel()
    return v[np.isfinite(v)]


def _f(x, fmt="+.4f"):
    return "n/a" if x is None or not np.isfinite(x) else format(x, fmt)


def _cpu_lines(ds, n_tasks: int, n_complete: int) -> list:
    secs = task_seconds(ds) if ds is not None else np.array([])
    per = PLANNED_TASK_SECONDS
    lines = [f"- CPU time: {n_tasks} runs x {per / 60:.1f} CPU-min (one main-job run, measured earlier) = "
             f"{n_tasks * per / 3600:.1f} CPU-hours planned ({n_tasks * per / 7200:.1f} h of wall time on 2 "
             f"free cores); {n_complete} of {n_tasks} runs complete."]
    if secs.size:
        lines.append(f"- measured here: the {secs.size} complete task files record a mean training wall time of "
                     f"{float(np.mean(secs)) / 60:.1f} min per run ({float(np.sum(secs)) / 3600:.2f} h in all); "
                     f"wall time, not CPU time: on a shared machine a run gets a fraction of a core, so "
                     f"this exceeds its CPU time")
    return lines


def verdict(summary: dict, paper: float | None, *, control: bool = False) -> str:
    """The status of a matched comparison in the claims ledger's vocabulary, with its rule.

    Parameters
    ----------
    summary : dict
        From the pair analysis: ``low``, ``high`` (95 % t interval of the mean change), ``k``
        and ``planned`` seeds, and with a paper value ``ref_low``, ``ref_high`` (the interval of
        measured minus paper, :func:`rieszflow.engine.stats.compare_with_reference`), ``power``
        (of the design for the paper's effect) and ``mde`` (the detectable effect).
    paper : float or None
        The paper's value (None: no claim, e.g. a noise control).
    control : bool, default False
        The comparison is the kernel run against a noise control: the statement is whether the
        kernel beats the control, not a paper's claim.

    Returns
    -------
    str
        ``"not decidable at the size run (...)"`` until every planned seed is complete; else one
        of ``"direction reproduced, size refuted"``, ``"refuted"``, ``"consistent"``,
        ``"confirmed"`` (paper values), ``"exceeds the control"`` / ``"does not exceed the
        control"`` (controls), or whether the interval of the change excludes 0 (a Phase A cell
        against vanilla, no paper value), each followed by the rule that gave it.
    """
    if summary.get("k", 0) < summary.get("planned", 1) or "low" not in summary:
        return (f"not decidable at the size run ({summary.get('k', 0)} of {summary.get('planned', '?')} "
                f"seeds complete)")
    lo, hi = summary["low"], summary["high"]
    if paper is None and not control:
        side = "above" if lo > 0 else "below" if hi < 0 else None
        return (f"the 95 % interval of the change excludes 0 ({side} it)" if side else
                f"the 95 % interval of the change includes 0 (a change of {summary.get('mde', math.nan):.4f} "
                f"would have been detected with power 0.8)")
    if control:
        if lo > 0:
            return "exceeds the control (the 95 % interval of kernel minus control excludes 0, above it)"
        return ("does not exceed the control (the 95 % interval of kernel minus control includes 0 or lies "
                f"below it; a difference of {summary.get('mde', math.nan):.4f} would have been detected "
                f"with power 0.8)")
    if "ref_low" not in summary:
        return "not decidable at the size run (no seed-level spread to give the paper's value its error)"
    excl0_same_side = (lo > 0 and paper > 0) or (hi < 0 and paper < 0)
    paper_excluded = summary["ref_low"] > 0 or summary["ref_high"] < 0
    if paper_excluded and excl0_same_side:
        return ("direction reproduced, size refuted (the interval excludes 0 on the paper's side, and the "
                "interval of measured minus paper, with the paper's own 3-seed error, excludes 0)")
    if paper_excluded:
        return ("refuted (the interval of measured minus paper, with the paper's own 3-seed error, excludes 0, "
                "and the measured interval does not exclude 0 on the paper's side)")
    if excl0_same_side:
        return ("confirmed (the interval excludes 0 on the paper's side and the paper's value, with its own "
                "error, is not excluded)")
    return ("consistent (the paper's value, with its own 3-seed error, is not excluded; the design had power "
            f"{summary.get('power', math.nan):.2f} to detect the paper's effect against 0 and detects "
            f"{summary.get('mde', math.nan):.4f} with power 0.8)")


def _code_line(commits, arms, seeds) -> list:
    """Which code each arm's task files ran (code versions of :func:`task_commits`), per arm."""
    if not commits:
        return []
    per = {}
    for arm in arms:
        for s in seeds:
            c = commits.get((arm, s), "not recorded")
            per.setdefault(arm, {}).setdefault(c, 0)
            per[arm][c] += 1
    versions = {c for d in per.values() for c in d}
    one = len(versions) == 1 and not any(c.endswith(" (at write)") or "-dirty" in c or c in ("unknown", "not recorded")
                                         for c in versions)
    text = "; ".join(f"{arm}: " + ", ".join(f"{_short(c)} ({n})" for c, n in sorted(d.items())) for arm, d in per.items())
    return [f"- code per arm (task files' recorded code: commit, '-dirty+<diff hash>' for an uncommitted tree, "
            f"'(at write)' where the file names only the checkout's commit when it was written): {text}"
            + (" -- every run of this comparison ran one clean commit" if one else
               " -- NOT one clean commit: the arms' code may differ")]


def _short(c):
    """7 hex digits of a code version, keeping its '-dirty+hash' and '(at write)' marks."""
    head, _, mark = c.partition(" ")
    if len(head) >= 40 and all(ch in "0123456789abcdef" for ch in head[:40]):
        head = head[:7] + head[40:]
    return head + (" " + mark if mark else "")


def pair_from_counts(seeds, acc_v, acc_k, a_only, b_only, n_examples: int, movement: dict | None = None) -> dict:
    """The analysis of :func:`pair_analysis` from per-seed summaries instead of task files.

    Every statistic of the power page needs only, per seed, both accuracies and the two
    discordant counts on the shared test split: this rebuilds them from a page's per-seed table
    when the task files are gone (``scripts/reanalyse_power_page.py``).

    Parameters
    ----------
    seeds : sequence of int
        Seed (trial) numbers.
    acc_v, acc_k : sequence of float
        Test accuracies of the reference arm and the kernel arm per seed, in [0, 1].
    a_only, b_only : sequence of int
        Sentences only the reference arm / only the kernel arm got right, per seed.
    n_examples : int
        Test sentences per seed, ``>= max(a_only + b_only)``.
    movement : dict, optional
        Per-seed arrays for the keys of :data:`MOVEMENT` (``mmd2``, ``mmd2_se``, ...); NaN where
        absent.

    Returns
    -------
    dict
        The keys of :func:`pair_analysis`.

    Raises
    ------
    ValueError
        If the sequences differ in length or a count is invalid (:func:`rieszflow.engine.stats.mcnemar_counts`).
    """
    k = len(seeds)
    if not (len(acc_v) == len(acc_k) == len(a_only) == len(b_only) == k):
        raise ValueError(f"seeds, acc_v, acc_k, a_only, b_only need one entry per seed; got lengths "
                         f"{k}, {len(acc_v)}, {len(acc_k)}, {len(a_only)}, {len(b_only)}")
    acc_v, acc_k = np.asarray(acc_v, float), np.asarray(acc_k, float)
    out = {"seeds": [int(x) for x in seeds], "acc_v": acc_v, "acc_k": acc_k, "delta": acc_k - acc_v,
           "mcnemar": [stats.mcnemar_counts(int(a), int(b), int(n_examples)) for a, b in zip(a_only, b_only)],
           "n_examples": int(n_examples)}
    for key in MOVEMENT:
        out[key] = np.asarray((movement or {}).get(key, np.full(k, np.nan)), float)
    if k:
        a, b = int(sum(a_only)), int(sum(b_only))
        out["pooled_mcnemar"] = stats.mcnemar_counts(a, b, k * int(n_examples))
        out["matched"] = stats.matched_pairs_test(a, b, k * int(n_examples))
        out["discordance"] = (a + b) / (k * int(n_examples))
    if k >= 2:
        out["t"] = stats.paired_test(acc_k, acc_v, test="t")
        out["wilcoxon"] = stats.paired_test(acc_k, acc_v, test="wilcoxon")
        out["sign_flip"] = stats.sign_flip_test(out["delta"]) if k <= 20 else None
        out["interval"] = stats.mean_interval(out["delta"])
    return out


def _pair_section(ds, vanilla, kernel, fm, cell, planned, paper, commits=None, *, control=None,
                  analysis=None) -> tuple:
    if analysis is not None:
        r = analysis
    else:
        r = pair_analysis(ds, vanilla, kernel) if ds is not None else {"seeds": [], "delta": np.array([])}
    k = len(r["seeds"])
    ref_name = "control" if control else "vanilla"
    title = f"{kernel} against {vanilla}"
    lines = [f"#### {title}", ""]
    if control:
        lines.append(f"Noise control `{control}` ({'Phase A with the alignment gradient off' if control == 'noalign' else 'a random perturbation of the initial particles matched per head to the MMD^2 Phase A moved them'}): "
                     f"a gain credited to learning must exceed it. Paper 000 reports no such control.")
        lines.append("")
    elif paper is not None:
        lines.append(f"Paper 000, Table 2 (Rotten Tomatoes): {paper:+.4f} (a mean over {PAPER_SEEDS} seeds).")
        lines.append("")
    if k < planned:
        lines.append(f"**{k} of {planned} seeds complete; verdict not decidable until all {planned} matched "
                     f"seeds are complete** (the numbers below are interim).")
    else:
        lines.append(f"{k} of {planned} seeds complete.")
    lines.append("")
    summary = {"kernel": kernel, "vanilla": vanilla, "map": fm, "cell": cell, "k": k, "planned": planned,
               "control": control}
    if not k:
        return lines + ["No seed has both runs complete yet.", ""], summary
    show_mmd = bool(cell) or bool(np.isfinite(r["mmd2"]).any())
    show_kgd = bool(cell) or bool(np.isfinite(r["kgd2"]).any())
    lines += [f"| seed | {ref_name} acc | kernel acc | change | {ref_name}-only / kernel-only right | McNemar p |"
              + (" Phase A MMD^2 (+- SE) |" if show_mmd else "")
              + (" Phase A KGD^2 (+- SE) | kernel moved / RF noise: sphere, tokens |" if show_kgd else ""),
              "|---|---|---|---|---|---|" + ("---|" if show_mmd else "") + ("---|---|" if show_kgd else "")]
    for i, s in enumerate(r["seeds"]):
        m = r["mcnemar"][i]
        row = (f"| {s} | {r['acc_v'][i]:.4f} | {r['acc_k'][i]:.4f} | {r['delta'][i]:+.4f} | "
               f"{m.a_only} / {m.b_only} | {m.p_value:.3g} |")
        if show_mmd:
            row += (f" {_f(r['mmd2'][i], '.3g')} +- {_f(r['mmd2_se'][i], '.2g')} |"
                    if np.isfinite(r["mmd2"][i]) else " not recorded |")
        if show_kgd:
            row += (f" {_f(r['kgd2'][i], '.3g')} +- {_f(r['kgd2_se'][i], '.2g')} | "
                    f"{_f(r['kernel_ratio'][i], '.3g')}, {_f(r['token_ratio'][i], '.3g')} |"
                    if np.isfinite(r["kgd2"][i]) else " not recorded | not recorded |")
        lines.append(row)
    lines.append("")
    lines += _code_line(commits, (vanilla, kernel), r["seeds"])
    mp = r["matched"]
    summary.update(mean=float(np.mean(r["delta"])), matched_p=mp.p_value, odds_ratio=mp.odds_ratio)
    if k >= 2:
        ci, w, t, sf = r["interval"], r["wilcoxon"], r["t"], r["sign_flip"]
        lines += [f"- primary (seed-level, the seed is the unit of training randomness): mean change "
                  f"(kernel minus {ref_name}) {ci.mean:+.4f}, 95 % t interval [{ci.low:+.4f}, {ci.high:+.4f}] "
                  f"(seed-level SD {ci.sd:.4f}); paired t p = {_f(t.p_value, '.3g')}; Wilcoxon signed-rank "
                  f"p = {w.p_value:.3g}; exact sign-flip permutation p = {_f(sf.p_value if sf else math.nan, '.3g')}"
                  + (" (with fewer than 6 seeds neither exact test can reach p < 0.05)" if k < 6 else "")]
        summary.update(low=ci.low, high=ci.high, sd=ci.sd, t_p=t.p_value, wilcoxon_p=w.p_value,
                       sign_flip_p=sf.p_value if sf else math.nan)
    else:
        lines.append(f"- effect: {float(r['delta'][0]):+.4f} from one seed; the interval and the seed-level tests "
                     f"need at least 2 seeds")
    lines.append(f"- Mantel-Haenszel test for matched pairs, stratified by seed (each test sentence of each seed is "
                 f"a matched pair; its statistic is the pooled McNemar on {mp.a_only} {ref_name}-only / "
                 f"{mp.b_only} kernel-only right over {k} seeds x {r['n_examples']} sentences): p = "
                 f"{mp.p_value:.3g}; odds ratio kernel-only / {ref_name}-only {_f(mp.odds_ratio, '.3f')} (exact 95 % "
                 f"interval {_f(mp.ci_low, '.3f')} to {_f(mp.ci_high, '.3f')}); the sentences are its replicates, so "
                 f"it speaks to this test split, not to the spread over training seeds")
    if k >= 2 and summary["sd"] > 0:
        mde = stats.detectable_effect(summary["sd"], max(planned, 2))
        summary["mde"] = mde
        lines.append(f"- detectable effect (paired t, alpha 0.05 two-sided, power 0.8, observed seed SD "
                     f"{summary['sd']:.4f}; noncentral t, Cohen 1988): {mde:.4f} with {planned} seeds"
                     + ("" if k == planned else f", {stats.detectable_effect(summary['sd'], k):.4f} with the {k} done"))
        if paper is not None and not control:
            pw = stats.paired_t_power(paper, summary["sd"], max(planned, 2))
            ref = stats.compare_with_reference(r["delta"], paper, PAPER_SEEDS)
            summary.update(power=pw, ref_low=ref.low, ref_high=ref.high, ref_diff=ref.difference)
            lines += [f"- power of the design ({planned} seeds, observed seed SD) to detect the paper's effect "
                      f"{paper:+.4f} against 0: {pw:.2f}",
                      f"- measured minus paper: {ref.difference:+.4f}, 95 % t interval [{ref.low:+.4f}, "
                      f"{ref.high:+.4f}] (SE {ref.se:.4f} = SD x sqrt(1/{ref.n} + 1/{PAPER_SEEDS}): the paper's "
                      f"value is a mean over {PAPER_SEEDS} seeds, given this project's seed-level SD since the "
                      f"paper reports none)"]
    if k >= planned and "low" in summary:
        lines.append(f"- verdict: {verdict(summary, paper, control=bool(control))}")
    return lines + [""], summary


def _holm_lines(summaries) -> list:
    """Holm's adjustment across the maps tested (the family: each map's kernel against vanilla)."""
    fam = [s for s in summaries if not s["cell"] and "t_p" in s and np.isfinite(s.get("t_p", math.nan))]
    if len(fam) < 2:
        return []
    lines = ["#### Holm's adjustment across the maps tested", "",
             f"The family: the {len(fam)} maps' kernel-against-vanilla comparisons; each test's p-values "
             f"adjusted by Holm's step-down procedure (family-wise error rate 0.05 under any dependence).", "",
             "| comparison | paired t p (Holm) | Wilcoxon p (Holm) | sign-flip p (Holm) | matched-pairs MH p (Holm) |",
             "|---|---|---|---|---|"]
    cols = {}
    for key in ("t_p", "wilcoxon_p", "sign_flip_p", "matched_p"):
        vals = np.array([s.get(key, math.nan) for s in fam], float)
        adj = np.full(vals.size, math.nan)
        ok = np.isfinite(vals)
        if ok.any():
            adj[ok] = stats.holm(vals[ok])
        cols[key] = (vals, adj)
    for i, s in enumerate(fam):
        cells = [f"{_f(cols[k][0][i], '.3g')} ({_f(cols[k][1][i], '.3g')})" for k in cols]
        lines.append(f"| {s['kernel']} vs {s['vanilla']} | " + " | ".join(cells) + " |")
    return lines + [""]


def format_power_report(ds, spec: dict, *, dataset: str, command: str, regenerate: str,
                        commits: dict | None = None) -> str:
    """The power page (Markdown) of one NLP sweep, from its complete task files.

    Parameters
    ----------
    ds : xarray.Dataset or None
        The merged sweep (:func:`rieszflow.studies.sweep.open_sweep` with ``write=False``), or
        None while no task is complete.
    spec : dict
        The sweep's ``sweep.json`` (methods, trials, config).
    dataset : str
        The dataset of the sweep (for the paper's value and the title).
    command : str
        The command that runs (and resumes) the sweep.
    regenerate : str
        The command that regenerates this page without running anything.
    commits : dict, optional
        ``(method, trial) -> git commit`` of each complete task file (:func:`task_commits`);
        the page then lists the runs by commit and says, per pair, in how many seeds both runs
        ran the same code.

    Returns
    -------
    str
        Markdown: progress and CPU time, one section per matched pair, and for the Phase A cells a
        summary table (accuracy change beside how far Phase A moved the particles).
    """
    from rieszflow.studies.nlp.study import PAPER_TABLE2, PHASE_A_CELLS

    planned = int(spec["trials"])
    methods = list(spec["methods"])
    n_tasks = planned * len(methods)
    n_complete = 0 if ds is None else int(np.isfinite(task_seconds(ds)).sum())
    lines = [f"Matched Kernel against Vanilla runs on `{dataset}`, {planned} seeds planned per pair "
             f"({len(methods)} variants, {n_tasks} main-job runs; {n_complete} complete).", "",
             f"- run or resume (only the missing tasks run): `{command}`",
             f"- regenerate this page from the task files, running nothing: `{regenerate}`",
             "- this report reads the complete task files of these variants; a merged sweep file in the "
             "directory is the last finished run's (presets can share one directory and its task files)",
             f"- sweep configuration: `{json.dumps(spec['config'], sort_keys=True)}`"]
    done = {m: 0 if ds is None or m not in [str(v) for v in ds["method"].values]
            else int(np.isfinite(np.asarray(ds["train_seconds"].sel({"method": m}).values, float)).sum())
            for m in methods}
    lines.append("- complete runs per variant: " + ", ".join(f"{m} {k}/{planned}" for m, k in done.items())
                 + " (the sweep submits its tasks seed by seed, every variant of a seed together, so matched pairs complete early)")
    lines += _cpu_lines(ds, n_tasks, n_complete)
    if commits:
        count = {}
        for (m, _), c in commits.items():
            if m in methods:
                count[c] = count.get(c, 0) + 1
        lines.append("- runs by the code their task files record (the commit of the code the run loaded; "
                     "'-dirty+<hash>': an uncommitted tree and the hash of its diff; '(at write)': the "
                     "checkout's commit when the file was written, which can be newer than the code that "
                     "ran): " + ", ".join(f"{_short(c)} ({n})" for c, n in
                                          sorted(count.items(), key=lambda kv: (-kv[1], kv[0])))
                     + (" -- all from one clean commit" if len(count) == 1 and not any(
                         " " in c or "-dirty" in c or c == "unknown" for c in count) else ""))
    lines.append("")
    summaries = []
    for van, ker, fm, cell in pairs(methods):
        paper = PAPER_TABLE2.get(dataset, {}).get(fm) if not cell else None
        sec, summ = _pair_section(ds, van, ker, fm, cell, planned, paper, commits)
        lines += sec
        summaries.append(summ)
    lines += _holm_lines(summaries)
    controls = [(fm, cell) for _, _, fm, cell in pairs(methods) if cell in CONTROL_CELLS
                and f"Kernel-{fm}" in methods]
    if controls:
        lines += ["### Learning against noise: the kernel run against its noise controls", "",
                  "Same seed, same initial weights, batches and dropout masks; the control differs from the "
                  "kernel run only in Phase A. A gain credited to what Phase A learns must exceed both "
                  "controls.", ""]
        for fm, cell in controls:
            sec, _ = _pair_section(ds, f"Kernel-{fm}-{cell}", f"Kernel-{fm}", fm, cell, planned, None, commits,
                                   control=cell)
            lines += sec
    cells = [s for s in summaries if s["cell"] or any(t["cell"] and t["map"] == s["map"] for t in summaries)]
    if any(s["cell"] for s in summaries):
        lines += ["#### Phase A grid: accuracy change beside how far Phase A moved the particles and the kernel", "",
                  "| map | cell | Phase A settings | seeds | mean change [95 % t interval] | Wilcoxon p | "
                  "matched-pairs MH p | "
                  "mean Phase A MMD^2 | mean Phase A KGD^2 (+- seed SE) | kernel moved / RF noise: sphere, tokens | "
                  "why this cell |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for s in cells:
            r = pair_analysis(ds, s["vanilla"], s["kernel"]) if ds is not None and s["k"] else None

            def mean(key, r=r):
                return float(np.nanmean(r[key])) if r is not None and np.isfinite(r[key]).any() else math.nan

            kgd = "not recorded"
            if r is not None and np.isfinite(r["kgd2"]).any():
                rec = r["kgd2"][np.isfinite(r["kgd2"])]
                spread = f" +- {np.std(rec, ddof=1) / math.sqrt(rec.size):.2g}" if rec.size > 1 else " (1 seed)"
                kgd = f"{rec.mean():.3g}{spread}" + (f" ({rec.size} seeds)" if 1 < rec.size < len(r["kgd2"]) else "")
            settings, why = PHASE_A_CELLS[s["cell"]] if s["cell"] else ({}, "reference: the paper's Phase A")
            setting = ", ".join(f"{k}={v}" for k, v in settings.items()) or "beta=50, lam=1e-3, C.4, first, R=1.5"
            ci = f"{_f(s.get('mean'))} [{_f(s.get('low'))}, {_f(s.get('high'))}]"
            lines.append(f"| {s['map']} | {s['cell'] or 'paper'} | {setting} | {s['k']}/{s['planned']} | {ci} | "
                         f"{_f(s.get('wilcoxon_p'), '.3g')} | {_f(s.get('matched_p'), '.3g')} | {_f(mean('mmd2'), '.3g')} | "
                         f"{kgd} | {_f(mean('kernel_ratio'), '.3g')}, {_f(mean('token_ratio'), '.3g')} | {why} |")
        lines += ["", "MMD^2: paired, Gaussian kernel at the median bandwidth, between the initial and the final "
                      "particles of each head (`engine.measures.mmd2`), mean over layers, heads and seeds; about "
                      "0 when Phase A left the particle law where it started. KGD^2: the zonal Kernel Geometry "
                      "Divergence (paper 003, Def. 4.1; the Funk-Hecke part on the sphere of the head's input "
                      "dimension) of the final to the initial attention kernel, bias-corrected, mean over layers, "
                      "heads and seeds, +- the SD over seeds / sqrt(seeds) (the per-seed table gives each run's "
                      "probe SE, the estimator's own noise) (`learning.kernel_geometry.LearnedKernels`, the estimator of "
                      "`rieszflow kgd --from-run`). \"kernel moved / RF noise\": the kernel's whole L2 distance on "
                      "the sphere, and its Hilbert-Schmidt distance on held-out validation tokens, each divided "
                      "by the distance of the initial kernel to independent redraws of its random features at "
                      "the same m: near 1 or below, Phase A moved the kernel no further than redrawing the "
                      "features would (tokens n/a for Phase A after k epochs: the network it saw is not stored). "
                      "\"not recorded\": the runs predate this measure (added 2026-11-27); the reference row's "
                      "runs belong to the power preset.", ""]
    return "\n".join(lines)
