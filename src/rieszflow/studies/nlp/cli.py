"""``rieszflow nlp``: paper 000's NLP tables as a sweep of main-job runs (see :mod:`~rieszflow.studies.nlp.study`)."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from rieszflow.studies.base import add_study_arguments, given_options
from rieszflow.studies.sweep import MixedCodeError, add_sweep_arguments
from rieszflow.studies.sweep_cli import format_merged, run_sweeps, start_sweep_study
from rieszflow.studies.reporting import register_sweep_reporter

__all__ = ["register", "run_from_args", "write_tables", "write_power_report"]

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
    p.add_argument("--preset", choices=("power", "phase-a"), default=None,
                   help="power: paper 000's central claim, Kernel against Vanilla for softplus and "
                        "softmaxfeat (the paper's largest Rotten Tomatoes gain, Table 2: +0.0385) over 10 "
                        "matched seeds on Rotten Tomatoes at the default budget: 40 runs, about 5.8 "
                        "CPU-hours (8.7 CPU-min per run, measured; docs/nlp.md); phase-a: the Phase A grid, "
                        "5 cells (beta, lam, alignment, Phase A after 2 epochs, radius) and the paper's "
                        "setting on softplus, each against its matched vanilla run over 5 seeds: 40 runs, "
                        "about 5.8 CPU-hours (30 new runs, 4.4 CPU-hours, in the power sweep's --out). "
                        "--config and --set override a preset; --quick shrinks it")
    p.add_argument("--report-only", action="store_true",
                   help="run nothing: write the paired report (<out>/report.md: per-seed changes, McNemar, "
                        "Cochran-Mantel-Haenszel, Wilcoxon, effect with its 95%% interval, detectable "
                        "effect) from the complete task files in --out, even while its sweep runs; the "
                        "configuration is the stored one (options that differ are an error)")
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


def _open_partial(sweep_dir: Path, spec=None, allow_mixed_code: bool = False):
    """The merged sweep from its complete task files without writing anything; None if none is complete.

    With ``spec`` (a SweepSpec), the tasks of that specification, whatever ``sweep.json`` holds
    (the power and the Phase A presets share one directory and its task files)."""
    from rieszflow.studies.sweep import open_sweep

    names = None if spec is None else [t.filename for t in spec.tasks()]
    if not (any((sweep_dir / "tasks" / f).exists() for f in names) if names is not None
            else any((sweep_dir / "tasks").glob("*.h5"))):
        return None                               # none yet (or only other variants' task files)
    return open_sweep(sweep_dir.absolute(), write=False, spec=spec, allow_mixed_code=allow_mixed_code)


def write_power_report(out: Path, cfg, command: str, allow_mixed_code: bool = False) -> Path:
    """Write the paired report of every sweep of ``cfg`` in ``out`` to ``out/report.md``.

    Reads only complete task files (a running sweep is not disturbed: no lock, no merged file
    written); ``rieszflow report <out>`` turns the file into a results page with its provenance.

    Parameters
    ----------
    out : pathlib.Path
        The study directory.
    cfg : NLPConfig
        The resolved configuration.
    command : str
        The command that runs or resumes the sweep (shown on the page).
    allow_mixed_code : bool, default False
        Report task files written by different code (:class:`~rieszflow.studies.sweep.MixedCodeError`
        otherwise).

    Returns
    -------
    pathlib.Path
        The report written.
    """
    from rieszflow.engine.storage import atomic_output
    from rieszflow.studies.nlp.power import format_power_report, task_commits
    from rieszflow.studies.nlp.study import specs

    parts = ["**Paper 000's claim with power: matched Kernel against Vanilla runs, pooled over seeds**", ""]
    # the preset flag of `command` too: without it --report-only reports the directory's last run
    regen = f"{command} --report-only && rieszflow report {out} --out PAGE.md --overwrite"
    for sp in specs(cfg):
        # the preset's own variants and seeds, not whatever sweep.json the last run in `out` wrote
        spec = {"trials": sp.trials, "methods": list(sp.methods), "config": sp.config}
        ds = _open_partial(out / sp.name, sp, allow_mixed_code)
        parts += [f"#### Sweep {sp.name}", "", format_power_report(ds, spec, dataset=sp.name.split("-", 1)[1],
                                                            command=command, regenerate=regen,
                                                            commits=task_commits(out / sp.name, sp.methods)), ""]
    path = out / "report.md"
    with atomic_output(path) as tmp:
        tmp.write_text("\n".join(parts))
    return path


def _report_only(prog: str, args) -> int:
    from rieszflow.config import resolve_config
    from rieszflow.studies.nlp.study import PRESETS, QUICK_OVERRIDES, NLPConfig

    if args.out is None or not (Path(args.out) / "config.json").is_file():
        print(f"{prog}: error: --report-only reads a sweep: --out {args.out!r} holds no config.json "
              f"(give the --out of a sweep of rieszflow nlp)", file=sys.stderr)
        return 2
    out = Path(args.out)
    preset = NLPConfig().replace(**PRESETS[args.preset]) if args.preset else NLPConfig()
    preset = preset.replace(**QUICK_OVERRIDES) if args.quick else preset
    flag = " ".join(f for f in (f"--preset {args.preset}" if args.preset else "",
                                "--quick" if args.quick else "") if f)
    given = given_options(seed=args.seed, backend=args.backend, optimizer=args.optimizer)
    try:
        if args.preset:
            # one --out can hold several presets' grids over shared task files (the power sweep and
            # the Phase A grid): the preset's grid is reported, its task configuration must be the
            # stored one (the config.json of the last run in --out)
            from rieszflow.config import load_config_mapping
            from rieszflow.studies.nlp.study import task_config

            cfg = resolve_config(NLPConfig, preset, config_file=args.config, given=given, overrides=args.set)
            stored = NLPConfig.from_dict(load_config_mapping(out / "config.json", option="--report-only"))
            mine, theirs = task_config(cfg), task_config(stored)
            diff = [f"{k}: stored {theirs[k]!r}, {flag} {mine[k]!r}" for k in mine if mine[k] != theirs.get(k)]
            if diff:
                raise ValueError(f"--report-only: {out / 'config.json'} holds runs of another task configuration "
                                 f"({'; '.join(diff)})")
        else:
            cfg = resolve_config(NLPConfig, preset, config_file=args.config, given=given,
                                 overrides=args.set, resume_from=out / "config.json", preset_flag=flag or None)
    except (ValueError, FileNotFoundError) as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    command = f"rieszflow nlp{' ' + flag if flag else ''} --out {out}"
    try:
        path = write_power_report(out, cfg, command, allow_mixed_code=args.allow_mixed_code)
    except MixedCodeError as e:                 # bad input: the files need --allow-mixed-code
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    except (ValueError, OSError) as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 1
    print(path.read_text())
    if not args.quiet:
        print(f"{prog}: report: {path}")
    return 0


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
    from rieszflow.studies.nlp.study import (PRESETS, QUICK_OVERRIDES, NLPConfig, format_detailed,
                                             format_table1, format_table2, format_verdicts, specs,
                                             task_config)

    prog = "rieszflow nlp"
    if args.report_only:
        return _report_only(prog, args)
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
                                         given=given, presets=PRESETS)
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
        flag = " ".join(f for f in (f"--preset {args.preset}" if args.preset else "",
                                    "--quick" if args.quick else "") if f)
        files.append(write_power_report(out, cfg, f"rieszflow nlp{' ' + flag if flag else ''} --out {out}",
                                        allow_mixed_code=args.allow_mixed_code))
        log("tables: " + ", ".join(str(f) for f in files))
    print(format_merged(out, merged, time.perf_counter() - t0))
    return 1 if failed else 0
