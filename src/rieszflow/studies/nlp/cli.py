"""``rieszflow nlp``: paper 000's NLP tables as a sweep of main-job runs (see :mod:`~rieszflow.studies.nlp.study`)."""
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

__all__ = ["register", "run_from_args", "write_tables"]

register_sweep_reporter("rieszflow.studies.nlp.study:nlp_task", "rieszflow.studies.nlp.cli:report_tables")


def report_tables(ds) -> str:
    """The tables of one NLP sweep (one dataset) file, as ``rieszflow report`` shows them.

    Parameters
    ----------
    ds : xarray.Dataset
        An opened NLP sweep (one dataset) file.

    Returns
    -------
    str
        Tables 1 and 2, the detailed table and the verdicts.
    """
    from rieszflow.studies.nlp import study

    dataset = str(ds["dataset"].values[0])
    k = json.loads(ds.attrs["config"])["config"].get("phase_a_after")
    one = {dataset: ds}
    return "\n\n".join(["Table 1 (means over seeds)\n" + study.format_table1(one),
                         "Table 2 (matched vanilla -> kernel accuracy changes, paired tests)\n"
                         + study.format_table2(one, k),
                         study.format_detailed(ds, dataset),
                         "Verdicts\n" + study.format_verdicts(one, k)])


def register(subparsers) -> argparse.ArgumentParser:
    """Add the ``nlp`` subcommand to ``subparsers``.

    Parameters
    ----------
    subparsers : argparse._SubParsersAction
        From ``ArgumentParser.add_subparsers``.

    Returns
    -------
    argparse.ArgumentParser
        The subcommand's parser, with ``func=run_from_args``.
    """
    from rieszflow.learning.config import OPTIMIZERS

    p = subparsers.add_parser(
        "nlp", allow_abbrev=False,
        help="paper 000's NLP tables (Tables 1, 2, 6, 8): every attention variant x 3 seeds as a "
             "sweep of main-job runs on dask.distributed",
        description="One sweep per dataset (Rotten Tomatoes and SST-2 bundled; QQP with --qqp-dir): "
                    "softmax attention, FAVOR with learned W_Q, W_K, Performer and Linformer baselines, "
                    "and for each positive feature map the vanilla run, the kernel run (Phase A, then "
                    "Phase B) and the kernel run with Phase A after k Phase B epochs; one task per "
                    "(variant, seed). Prints Tables 1, 2 and the detailed tables with paired tests "
                    "(McNemar, paired t) and writes them as markdown and CSV into --out. Rerunning "
                    "the same command runs only the missing tasks.")
    add_study_arguments(p, default_out="runs/nlp[-quick]-seed<seed>/ (a directory)",
                        quick_help="every variant at reduced size (2 Phase B epochs, 1 Phase A epoch, "
                                   "m = 64, 2,000 training and 500 evaluation examples, 3 seeds; "
                                   "docs/nlp.md gives the measured wall time)",
                        resume_help="run only the tasks without a complete file (what rerunning the "
                                    "command always does; accepted for the shared contract)",
                        backends=("numpy", "cupy"))
    add_sweep_arguments(p, dashboard=True)
    p.add_argument("--qqp-dir", default=None, metavar="DIR",
                   help="the GLUE QQP folder (train.tsv, dev.tsv); adds the QQP sweep (QQP is not "
                        "bundled)")
    p.add_argument("--optimizer", choices=tuple(OPTIMIZERS), default=None,
                   help="Phase B optimiser: adam = App. F.2 (constant rate; default), adamw = "
                        "Section 5 (AdamW, warm-up, cosine decay)")
    p.set_defaults(func=run_from_args, writes_hdf5=False)
    return p


def write_tables(out: Path, merged: dict, phase_a_after: int) -> list:
    """Write the tables as markdown (``tables.md``) and CSV (``table_<dataset>.csv``) into ``out``.

    Parameters
    ----------
    out : pathlib.Path
        The study directory.
    merged : dict
        Dataset name to its merged sweep.
    phase_a_after : int
        k of the late variant.

    Returns
    -------
    list of pathlib.Path
        The files written.
    """
    from rieszflow.studies.nlp.study import (format_detailed, format_table1, format_table2,
                                             format_verdicts, table_csv)

    parts = ["## Table 1", "", format_table1(merged), "", "## Table 2 (matched vanilla -> kernel)", "",
             format_table2(merged, phase_a_after), "", "## Verdicts", "",
             format_verdicts(merged, phase_a_after), ""]
    files = []
    for dataset, ds in merged.items():
        parts += [f"## Detailed metrics: {dataset}", "", format_detailed(ds, dataset), ""]
        f = out / f"table_{dataset}.csv"
        f.write_text(table_csv(ds, dataset))
        files.append(f)
    md = out / "tables.md"
    md.write_text("\n".join(parts))
    return [md] + files


def run_from_args(args: argparse.Namespace) -> int:
    """Resolve the configuration, run the sweeps, merge, print and write the tables.

    Parameters
    ----------
    args : argparse.Namespace
        From the parser of :func:`register`.

    Returns
    -------
    int
        0 when every task is complete; 1 if any task failed (listed); 2 on bad input.
    """
    from rieszflow.studies.nlp.study import (QUICK_OVERRIDES, NLPConfig, format_detailed, format_table1,
                                             format_table2, format_verdicts, specs, task_config)

    prog = "rieszflow nlp"
    def given():
        if args.qqp_dir is not None and not Path(args.qqp_dir).is_dir():
            raise ValueError(f"--qqp-dir {args.qqp_dir!r} is not a folder; expected the GLUE QQP "
                             f"folder with train.tsv and dev.tsv")
        qqp = str(Path(args.qqp_dir).resolve()) if args.qqp_dir is not None else None
        if qqp is not None:          # read once here: a malformed folder is one error, not a failed task each
            from rieszflow.engine.attention.data import load_qqp

            for split in ("train", "dev"):
                load_qqp(qqp, split)
        return given_options(seed=args.seed, backend=args.backend, qqp_dir=qqp, optimizer=args.optimizer)

    status, cfg, out = start_sweep_study(prog, "nlp", NLPConfig, QUICK_OVERRIDES, args, specs, task_config,
                                         given=given)
    if status is not None:
        return status
    log = (lambda *a: None) if args.quiet else (lambda s: print(s, flush=True))
    log(f"{prog}: {len(specs(cfg)[0].methods)} variants x {cfg.seeds} seeds on {', '.join(cfg.datasets)}")
    t0 = time.perf_counter()
    merged, failed = run_sweeps(prog, out, specs(cfg), args, log)
    by_dataset = {name.split("-", 1)[1]: ds for name, ds in merged.items()}
    if by_dataset:
        print("Table 1 (means over seeds)\n" + format_table1(by_dataset))
        print("\nTable 2 (matched vanilla -> kernel accuracy changes, paired tests)\n"
              + format_table2(by_dataset, cfg.phase_a_after))
        for dataset, ds in by_dataset.items():
            print("\n" + format_detailed(ds, dataset))
        print("\nVerdicts\n" + format_verdicts(by_dataset, cfg.phase_a_after))
        files = write_tables(out, by_dataset, cfg.phase_a_after)
        log("tables: " + ", ".join(str(f) for f in files))
    print(format_merged(out, merged, time.perf_counter() - t0))
    return 1 if failed else 0
