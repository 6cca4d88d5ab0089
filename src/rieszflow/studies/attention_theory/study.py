"""Paper 004's theory measured: every bound next to the empirical W1 ratio it claims to control.

Each experiment returns a :class:`~rieszflow.studies.attention_theory.bound_rows.BoundRow`: per-trial measured ratios next to the paper's
constant (as printed) and the corrected constant (``docs/specs/paper004_attention_theory.md``
section 4), evaluated on random token sets, on adversarial ones (found by Nelder-Mead or by
the spec's explicit constructions), or on a counterexample family. :func:`run` writes them to
one HDF5 file (dims ``bound``, ``trial``, ``N``, ``case``, ``iteration``) with plots beside it
and returns the report table.

A ratio counts as a violation when it exceeds the bound by more than a relative 1e-9 (float64
round-off of the W1 solver and of the constants). The engine computes what is true; where the
paper's constant fails, the row says so and names the counterexample.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

from rieszflow.engine.storage import RunLock, TrajectoryWriter, check_resumable, open_run
from rieszflow.studies.attention_theory.config import AttentionTheoryConfig

from rieszflow.studies.attention_theory.analysis import make_plots, format_table
from rieszflow.studies.attention_theory.experiments import RTOL, experiments

__all__ = ["KIND", "check_output", "run"]

#: ``kind`` root attribute of the study's HDF5 file.
KIND = "attention_theory"


#: long_name of every variable and coordinate of the file (all dimensionless: units "1").
_DESCRIPTIONS = {
    "bound": "bound or statement of paper 004 under test",
    "trial": "trial (token-set instance) index",
    "statement": "the inequality as printed in paper 004",
    "token_sets": "how the token sets of the trials were drawn",
    "reference": "where the statement is in paper 004 / the spec",
    "note": "remark on the row",
    "counterexample": "the worst trial found, described",
    "paper_constant": "constant of the bound as printed (largest over trials)",
    "corrected_constant": "corrected constant of the bound (largest over trials)",
    "sharpened_constant": "sharpened constant of the bound (largest over trials)",
    "ratio_at_worst": "measured ratio at the worst trial",
    "max_ratio": "largest measured W1 ratio over the trials",
    "max_ratio_over_paper": "largest measured ratio divided by the printed bound",
    "max_ratio_over_corrected": "largest measured ratio divided by the corrected bound",
    "max_ratio_over_sharpened": "largest measured ratio divided by the sharpened bound",
    "paper_violations": "trials in which the printed bound is violated",
    "corrected_violations": "trials in which the corrected bound is violated",
    "sharpened_violations": "trials in which the sharpened bound is violated",
    "paper_checked": "trials checked against the printed bound",
    "corrected_checked": "trials checked against the corrected bound",
    "sharpened_checked": "trials checked against the sharpened bound",
    "paper_holds": "whether the printed bound held in every trial",
    "corrected_holds": "whether the corrected bound held in every trial",
    "n_trials": "number of trials of the row",
    "trial_ratio": "measured W1 ratio of the trial",
    "paper_bound": "printed bound at the trial",
    "corrected_bound": "corrected bound at the trial",
    "sharpened_bound": "sharpened bound at the trial",
    "beta": "inverse temperature beta of the trial",
    "dim": "token dimension d of the trial",
    "n_tokens": "number of tokens of the trial",
    "k_ell": "Lipschitz constant K_l of the lookup at the trial",
    "N": "number of tokens N of the Cor. 30 family",
    "cor30_log_n": "ln N",
    "cor30_ratio_particles": "Lipschitz ratio of the particle family (finite differences)",
    "cor30_ratio_decimal": "Lipschitz ratio of the two-atom family (60-digit decimal arithmetic)",
    "cor30_ratio_jacobian": "Lipschitz ratio of the two-atom family (closed-form Jacobian)",
    "cor30_prediction": "(1 + ln(N - 1)) / 2 prediction of the ratio",
    "cor30_c30": "Cor. 30 constant as printed",
    "case": "Prop. 26 case (weights and beta)",
    "iteration": "layer (iteration of the weight-shared layer)",
    "max_deviation": "largest distance of a token to the fixed point",
    "w1_to_fixed_point": "W1 between the layer's measure and the fixed point",
    "w1_between_inputs": "W1 between the images of two input measures",
    "envelope": "contraction envelope predicted by the bound",
    "case_beta": "inverse temperature beta of the case",
    "case_kappa": "contraction constant kappa of the case",
    "case_paper_tau": "contraction factor tau as printed",
    "case_corrected_tau": "corrected contraction factor tau",
    "case_max_step_ratio": "largest ratio of successive steps",
    "case_measured_rate": "measured geometric rate of convergence",
    "case_predicted_rate": "predicted rate of convergence",
    "case_limit_gap": "distance of the last iterate to the limit",
}


def _attrs(config: AttentionTheoryConfig) -> dict:
    """Root attributes of the study's file (besides kind, config, status, provenance)."""
    return {"seed": config.seed, "backend": "numpy", "rtol_violation": RTOL,
            "source": "paper 004 sections 5-6, appendices C-D; spec "
                      "paper004_attention_theory.md sections 4-5"}


def _write(w, rows, fam, fp, model, table: str) -> None:
    """Store every row, the Cor. 30 family and the Prop. 26 iterations in the open writer ``w``."""
    ids = [r.bound_id for r in rows]
    n_trial = max(r.n_trials for r in rows)
    summaries = [r.summary() for r in rows]
    w.set_attrs(report=table)
    w.set_attrs(**{f"model_{k}": v for k, v in model.items()})
    w.dimension("bound", len(ids), coords=np.array(ids))
    w.dimension("trial", n_trial, coords=np.arange(n_trial))
    for name, vals in (("statement", [r.statement for r in rows]),
                       ("token_sets", [r.token_sets for r in rows]),
                       ("reference", [r.reference for r in rows]),
                       ("note", [r.note for r in rows]),
                       ("counterexample", [r.counterexample() for r in rows])):
        w.variable(name, ("bound",), dtype=str, data=np.array(vals, dtype=object).astype(str))
    float_summary = ["paper_constant", "corrected_constant", "sharpened_constant",
                     "ratio_at_worst", "max_ratio", "max_ratio_over_paper",
                     "max_ratio_over_corrected", "max_ratio_over_sharpened"]
    for key in float_summary:
        w.variable(key, ("bound",), data=np.array([s[key] for s in summaries]))
    for key in ("paper_violations", "corrected_violations", "sharpened_violations",
                "paper_checked", "corrected_checked", "sharpened_checked", "paper_holds",
                "corrected_holds"):
        w.variable(key, ("bound",), dtype="i8", data=np.array([s[key] for s in summaries]),
                   attrs={"long_name": "1 holds, 0 fails, -1 no constant"}
                   if key.endswith("holds") else None)
    w.variable("n_trials", ("bound",), dtype="i8", data=np.array([r.n_trials for r in rows]))
    for key in ("ratio", "paper", "corrected", "sharpened", "beta", "dim", "n_tokens", "k_ell"):
        data = np.full((len(rows), n_trial), np.nan)
        for i, r in enumerate(rows):
            data[i, :r.n_trials] = getattr(r, key)
        name = key if key in ("ratio", "beta", "dim", "n_tokens", "k_ell") else f"{key}_bound"
        w.variable(name if name != "ratio" else "trial_ratio", ("bound", "trial"), data=data)

    n_vals = np.exp(fam["log_n"])
    w.dimension("N", len(n_vals), coords=n_vals, attrs={"long_name": "number of tokens"})
    for key in ("log_n", "ratio_particles", "ratio_decimal", "ratio_jacobian", "prediction",
                "c30"):
        w.variable(f"cor30_{key}", ("N",), data=fam[key])
    w.set_attrs(cor30_slope=fam["slope"], cor30_intercept=fam["intercept"],
                cor30_rms_log_fit=fam["rms_log_fit"], cor30_rms_sqrt_fit=fam["rms_sqrt_fit"],
                cor30_crossing_log_n=fam["crossing_log_n"])

    cases = fp["cases"]
    n_it = len(fp[cases[0]]["max_deviation"])
    w.dimension("case", len(cases), coords=np.array(cases))
    w.dimension("iteration", n_it, coords=np.arange(n_it))
    for key in ("max_deviation", "w1_to_fixed_point", "w1_between_inputs", "envelope"):
        w.variable(key, ("case", "iteration"), data=np.stack([fp[c][key] for c in cases]))
    for key in ("beta", "kappa", "paper_tau", "corrected_tau", "max_step_ratio",
                "measured_rate", "predicted_rate", "limit_gap"):
        w.variable(f"case_{key}", ("case",), data=np.array([fp[c][key] for c in cases]))
    for name, long_name in _DESCRIPTIONS.items():      # CF: every variable says what it is
        extra = {}
        if name.endswith("_holds"):
            extra = {"flag_values": np.array([-1, 0, 1], dtype=np.int64),
                     "flag_meanings": "no_constant fails holds"}
        w.describe(name, long_name, **extra)


def check_output(out, overwrite: bool = False) -> Path:
    """Validate the output path before any computation.

    Parameters
    ----------
    out : str or os.PathLike
        HDF5 file to create.
    overwrite : bool, default False

    Returns
    -------
    pathlib.Path

    Raises
    ------
    ValueError
        If ``out`` does not end in .h5, .hdf5 or .nc.
    FileExistsError
        If ``out`` exists and ``overwrite`` is False.
    """
    path = Path(out)
    if path.suffix not in (".h5", ".hdf5", ".nc"):
        raise ValueError(f"out={str(path)!r} must end in .h5, .hdf5 or .nc")
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} already exists; pass overwrite=True (CLI: --overwrite) or "
                              f"choose another --out path")
    return path


def run(config: AttentionTheoryConfig, out, overwrite: bool = False, quiet: bool = False,
        plots: bool = True, resume: bool = False) -> dict:
    """Run the study, write the HDF5 file and the plots, return the report.

    Parameters
    ----------
    config : AttentionTheoryConfig
    out : str or os.PathLike
        HDF5 file to create (plots are written beside it as ``<stem>_*.png``).
    overwrite : bool, default False
        Replace an existing file (otherwise FileExistsError).
    quiet : bool, default False
        Suppress progress messages (on stderr).
    plots : bool, default True
        Draw the PNG figures beside the file (``--no-plots`` turns them off).
    resume : bool, default False
        Continue ``out``: a complete file is reported as it is (no computation); an incomplete
        one (interrupted while writing) is recomputed from its stored configuration, which
        must equal ``config``. The study writes once, at the end, so there is nothing partial
        to keep.

    Returns
    -------
    dict
        ``table`` (the report text), ``rows`` (list of BoundRow), ``cor30``, ``fixed_point``,
        ``model``, ``path`` (Path of the HDF5 file), ``plots`` (list of Path).

    Raises
    ------
    TypeError
        If ``config`` is not an AttentionTheoryConfig.
    ValueError
        If ``out`` has an unsupported suffix (see :func:`check_output`).
    FileExistsError
        If ``out`` exists and neither ``overwrite`` nor ``resume`` is set (checked before any
        computation).
    FileNotFoundError
        If ``resume`` is set and ``out`` does not exist.
    engine.storage.RunFileError
        If ``resume`` is set and ``out`` is not an attention-theory file, or another process
        writes it.

    References
    ----------
    Spec ``paper004_attention_theory.md`` sections 4-5 and 8.
    """
    if not isinstance(config, AttentionTheoryConfig):
        raise TypeError(f"config must be an AttentionTheoryConfig, got {type(config).__name__}")
    if overwrite and resume:
        raise ValueError("overwrite=True and resume=True exclude each other")
    path = check_output(out, overwrite or resume)
    if resume:
        if not path.exists():
            raise FileNotFoundError(f"resume: {path} does not exist; start the study without --resume")
        check_resumable(path, KIND, config.to_dict())
        ds = open_run(path, kind=KIND)
        if ds.attrs.get("status") == "complete":       # nothing to compute: report what is stored
            return {"table": str(ds.attrs.get("report", "")), "rows": None, "cor30": None,
                    "fixed_point": None, "model": None, "path": path, "plots": [], "resumed": "complete"}
        # The study writes once, at the end: an incomplete file is recomputed from its stored
        # configuration (every draw is keyed on the seed, so the numbers are those of an
        # uninterrupted run) and replaced under the run lock.

    def log(msg):
        if not quiet:
            print(f"[attention-theory] {msg}", file=sys.stderr, flush=True)

    t0 = time.perf_counter()
    lock = RunLock(path)          # one writer per path while computing; the old file stays intact
    lock.acquire()                # until the results exist (an interrupted --overwrite loses nothing)
    try:
        rows, fam, fp, model = experiments(config, log)
        table = format_table(rows, model)
    finally:
        lock.release()
    with TrajectoryWriter(path, KIND, config=config.to_dict(), overwrite=overwrite or resume,
                          attrs=_attrs(config)) as w:
        _write(w, rows, fam, fp, model, table)
    plots = make_plots(path, rows, fam, fp) if plots else []
    log(f"done in {time.perf_counter() - t0:.1f} s -> {path}")
    return {"table": table, "rows": rows, "cor30": fam, "fixed_point": fp, "model": model,
            "path": path, "plots": plots}
