"""``rieszflow report``: a Markdown page of results, generated from run files, never typed by hand.

Every measured number in the README and in ``docs/`` comes from a page under ``docs/results/``
that this module writes from the HDF5 files of stated runs: each page names the files, the
command line that wrote each one (root attribute ``command``), its git commit, date, platform and
wall time, then the tables the study itself prints. ``make results`` reruns the commands and
regenerates the pages; ``tests/test_docs_numbers.py`` recomputes the deterministic tables of the
cheap studies and compares them with the committed pages.

A study offers a page by one entry in :data:`REPORTERS` (file kind -> function ``ds -> str``).
"""
from __future__ import annotations

import importlib
from pathlib import Path

import numpy as np

from rieszflow.engine.storage import atomic_output

__all__ = ["REPORTERS", "report_markdown", "main_job_summary", "write_report"]

#: File kind -> ``"module:function"`` returning the study's text tables for one opened file.
REPORTERS = {
    "main_job": "rieszflow.studies.runs.report:main_job_summary",
    "ldp_study": "rieszflow.studies.runs.report:_ldp_tables",
    "mean_field_study": "rieszflow.studies.runs.report:_mean_field_tables",
    "kernel_mean_field_study": "rieszflow.studies.runs.report:_kernel_mean_field_tables",
    "attention_theory": "rieszflow.studies.runs.report:_stored_report",
    "token_flow_study": "rieszflow.studies.runs.report:_stored_report",
    "kgd_learned": "rieszflow.studies.runs.report:_stored_report",
    "gibbs_check": "rieszflow.studies.runs.report:_stored_report",
    "sweep": "rieszflow.studies.runs.report:_sweep_tables",
}


def _mean(values, sl) -> float:
    v = np.asarray(values, dtype=np.float64)[sl]
    return float(np.nanmean(v)) if v.size else float("nan")


def main_job_summary(ds) -> str:
    """Metric table and trajectory summary of a main-job file (what README/docs quote).

    Parameters
    ----------
    ds : xarray.Dataset
        An opened main-job file (:func:`rieszflow.engine.storage.open_run`).

    Returns
    -------
    str
        The test-metric table of ``rieszflow run``, the wall times, and for runs with a Phase A:
        mean particle norm at the initial and final snapshot, and the means over the first and
        last 20 Phase A steps of the repulsion energy, the alignment energy and the largest
        particle displacement.

    Raises
    ------
    ValueError
        If the file holds no ``test_metrics`` (not a finished main-job run).

    References
    ----------
    paper 000, App. F.2 (Phase A / Phase B), eq. (2.2)-(2.3), (4.3), (C.4).
    """
    from rieszflow.studies.main_job.cli import format_metrics

    if "test_metrics" not in ds.variables:
        raise ValueError("the main-job file holds no 'test_metrics' (not a finished run)")
    metrics = {str(k): float(v) for k, v in zip(ds["metric"].values, ds["test_metrics"].values)}
    metrics.update({k: float(ds.attrs.get(k, np.nan)) for k in
                    ("train_seconds", "phase_a_seconds", "phase_b_seconds")})
    metrics["best_epoch"] = int(ds.attrs.get("best_epoch", -1))
    lines = [format_metrics(f"{ds.attrs.get('run_name', 'run')} (test)", metrics)]
    if "omega" in ds.variables and "hamiltonian" in ds.variables and ds.sizes.get("step", 0) > 0:
        norms = np.linalg.norm(np.asarray(ds["omega"].values, dtype=np.float64), axis=-1)
        first, last = slice(0, 20), slice(-20, None)
        lines += ["", "Phase A trajectory (means over all layers, heads and particles; first / last "
                      "20 steps)",
                  f"  particle norm |omega_k|      {norms[0].mean():.4f} -> {norms[-1].mean():.4f} "
                  f"(initial -> final snapshot)",
                  f"  repulsion energy W_N,s       {_mean(ds['repulsion_energy'].values, first):.4f} -> "
                  f"{_mean(ds['repulsion_energy'].values, last):.4f}",
                  f"  alignment energy -V_seq      {_mean(ds['alignment_energy'].values, first):.4f} -> "
                  f"{_mean(ds['alignment_energy'].values, last):.4f}",
                  f"  max displacement             {_mean(ds['max_displacement'].values, first):.4f} -> "
                  f"{_mean(ds['max_displacement'].values, last):.4f}",
                  f"  Phase A steps {ds.sizes['step']}, early stop fired: "
                  f"{'yes' if int(ds.attrs.get('phase_a_stopped_early', 0)) else 'no'}"]
    return "\n".join(lines)


def _ldp_tables(ds) -> str:
    from rieszflow.studies.ldp.study import format_table

    return format_table(ds)


def _mean_field_tables(ds) -> str:
    from rieszflow.studies.mean_field.analysis import format_tables, summary_tables

    return format_tables(summary_tables(ds))


def _kernel_mean_field_tables(ds) -> str:
    from rieszflow.studies.kernel_mean_field.analysis import format_tables, summary_tables

    return format_tables(summary_tables(ds))


def _sweep_tables(ds) -> str:
    import json

    spec = json.loads(ds.attrs["config"])
    head = (f"sweep {spec['name']}: {int(ds.attrs['n_complete'])} of {int(ds.attrs['n_tasks'])} tasks "
            f"complete; configuration {json.dumps(spec['config'], sort_keys=True)}")
    if spec["function"] == "rieszflow.studies.synthetic.study:benchmark_task":
        from rieszflow.studies.synthetic import study

        table = {"benchmark": study.format_summary, "ablation": study.format_ablation,
                 "runtime": study.format_runtime}[spec["name"]](ds)
        if spec["name"] == "benchmark":
            table += "\n\n" + study.format_verdicts(ds)
        elif spec["name"] == "ablation":
            table += "\n\n" + study.ablation_verdicts(ds)
        return head + "\n\n" + table
    if spec["function"] == "rieszflow.studies.nlp.study:nlp_task":
        from rieszflow.studies.nlp import study

        dataset = str(ds["dataset"].values[0])
        k = spec["config"].get("phase_a_after")
        one = {dataset: ds}
        return "\n\n".join([head, "Table 1 (means over seeds)\n" + study.format_table1(one),
                             "Table 2 (matched vanilla -> kernel accuracy changes, paired tests)\n"
                             + study.format_table2(one, k),
                             study.format_detailed(ds, dataset),
                             "Verdicts\n" + study.format_verdicts(one, k)])
    return head + "\n\n" + str(ds.mean("trial"))


def _stored_report(ds) -> str:
    report = ds.attrs.get("report")
    if not report:
        raise ValueError("the file stores no 'report' attribute (written by an older rieszflow?)")
    return str(report)


def _describe(path: Path, ds) -> list[str]:
    a = ds.attrs
    wall = a.get("wall_seconds")
    facts = [f"kind `{a.get('kind')}`, status `{a.get('status')}`",
             f"git commit `{a.get('git_commit', 'unknown')}`",
             f"created {a.get('created', '?')}",
             f"platform `{a.get('platform', '?')}`"]
    if wall is not None:
        facts.append(f"wall time {float(wall):.1f} s (writing sessions of the file)")
    return [f"### `{path.as_posix()}`", "",
            f"- written by: `{a.get('command', '(not recorded)')}`",
            f"- {'; '.join(facts)}", ""]


def report_markdown(paths, *, title: str | None = None) -> str:
    """A Markdown page with the tables of every file in ``paths`` and where they came from.

    Parameters
    ----------
    paths : sequence of str or os.PathLike
        rieszflow files of kinds in :data:`REPORTERS`; two or more main-job files also get
        ``rieszflow compare``'s table (metrics side by side, McNemar test).
    title : str, optional
        Page title (default: the kinds of the files).

    Returns
    -------
    str

    Raises
    ------
    ValueError
        If ``paths`` is empty, or a file's kind has no reporter (the message lists the kinds).
    engine.storage.RunFileError
        If a file is not a readable rieszflow file.
    """
    import shlex

    from rieszflow.engine.storage import _command, open_run

    paths = [Path(p) for p in paths]
    if not paths:
        raise ValueError("report needs at least one run file")
    dss = [open_run(p) for p in paths]
    for p, ds in zip(paths, dss):
        if ds.attrs.get("kind") not in REPORTERS:
            raise ValueError(f"{p}: kind {ds.attrs.get('kind')!r} has no report; kinds with one: "
                             f"{', '.join(REPORTERS)}")
    kinds = list(dict.fromkeys(str(ds.attrs["kind"]) for ds in dss))
    lines = [f"# Results: {title or ', '.join(kinds)}", "",
             f"Generated by `{_command()}` from the files below; do not edit by hand "
             f"(`make results` reruns the commands and regenerates every page of `docs/results/`).",
             ""]
    for p, ds in zip(paths, dss):
        module, _, func = REPORTERS[str(ds.attrs["kind"])].partition(":")
        lines += _describe(p, ds)
        lines += ["```text", getattr(importlib.import_module(module), func)(ds).rstrip(), "```", ""]
    mains = [p for p, ds in zip(paths, dss) if ds.attrs.get("kind") == "main_job"]
    if len(mains) >= 2:
        from rieszflow.studies.runs.inspect import compare_runs, format_compare

        lines += [f"### `rieszflow compare {shlex.join(p.as_posix() for p in mains)}`", "",
                  "```text", format_compare(compare_runs(mains)), "```", ""]
    return "\n".join(lines)


def write_report(paths, out, *, overwrite: bool = False, title: str | None = None) -> Path:
    """Write :func:`report_markdown` to ``out`` atomically (temporary name, then rename).

    Parameters
    ----------
    paths : sequence of str or os.PathLike
        The run files.
    out : str or os.PathLike
        The Markdown file (``.md``).
    overwrite : bool, default False
        Replace an existing page.
    title : str, optional
        Page title.

    Returns
    -------
    pathlib.Path

    Raises
    ------
    ValueError
        If ``out`` does not end in ``.md``, or as :func:`report_markdown`.
    FileExistsError
        If ``out`` exists and ``overwrite`` is False.
    FileNotFoundError
        If the directory of ``out`` does not exist.
    """
    out = Path(out)
    if out.suffix.lower() != ".md":
        raise ValueError(f"--out {str(out)!r}: a report is a Markdown file; use a name ending in .md")
    if out.exists() and not overwrite:
        raise FileExistsError(f"{out} already exists; pass --overwrite to regenerate it")
    if not out.parent.is_dir():
        raise FileNotFoundError(f"the directory {out.parent} of {out} does not exist")
    text = report_markdown(paths, title=title)
    with atomic_output(out) as tmp:
        tmp.write_text(text)
    return out
