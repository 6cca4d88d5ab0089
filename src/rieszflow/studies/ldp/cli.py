"""``rieszflow ldp``: large deviations of the particle Gibbs measure (see :mod:`~rieszflow.studies.ldp.study`)."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from rieszflow.studies.base import add_study_arguments, given_options
from rieszflow.config import resolve_config
from rieszflow.studies.sweep import add_sweep_arguments
from rieszflow.studies.reporting import register_reporter

__all__ = ["register", "run_from_args"]

register_reporter("ldp_study", "rieszflow.studies.ldp.study:format_table")


def register(subparsers) -> argparse.ArgumentParser:
    """Add ``rieszflow ldp`` (the shared study options only; NumPy backend) to ``subparsers``.

    Parameters
    ----------
    subparsers : argparse._SubParsersAction
        Where :func:`~rieszflow.studies.cli.build_parser` collects the subcommands.

    Returns
    -------
    argparse.ArgumentParser
        Its parser, dispatching to :func:`run_from_args`.
    """
    p = subparsers.add_parser(
        "ldp", allow_abbrev=False,
        help="large deviations of the particle Gibbs law (eq. E.7) against inf_A J (eq. 4.6-4.7)",
        description="Samples P_{N,beta_N} by batched MALA for beta_N = N (speed N) and beta_N = N^2 "
                    "(speed N^2), estimates -(1/r_N) log P(int x^2 dmu_N >= a) directly, by exponential "
                    "tilting with thermodynamic integration, and by the finite-N Chernoff bound, and "
                    "compares with the rate-function infimum of solvers.gibbs. The (regime, N) cells "
                    "are independent tasks on a Dask LocalCluster or an existing scheduler "
                    "(docs/sweeps.md; the same numbers with any --workers). Writes one HDF5 file, "
                    "a table and a PNG plot beside it.")
    add_study_arguments(p, default_out="runs/ldp[-quick]-seed<seed>.h5", backends=("numpy",),
                        quick_help="the quick preset (N <= 32, about half a minute on 2 cores)",
                        resume_help="continue an interrupted study in --out (finished (regime, N) cells "
                                    "are kept); its stored configuration is the default")
    add_sweep_arguments(p, scheduler_note="its workers need the same rieszflow installation; the results come back and this process writes --out")
    p.set_defaults(func=run_from_args)
    return p


def _print_counts(summary) -> None:
    """The one line of cell counts, printed with ``--quiet`` too (the failures are the error line)."""
    print(f"rieszflow ldp: {summary.counts('(regime, N) cells')}", flush=True)


def run_from_args(args: argparse.Namespace) -> int:
    """Run the study from parsed arguments, print the table, save the plot.

    Parameters
    ----------
    args : argparse.Namespace

    Returns
    -------
    int
        0 on success; 2 on a bad configuration or output path (message on stderr); 1 if a
        solve of the limit did not converge or (regime, N) cells failed (named; the others are
        stored and ``--resume`` runs the failed ones again).
    """
    from rieszflow.studies.ldp.config import LDPConfig, full_config, quick_config
    from rieszflow.studies.ldp.study import format_table, load_study, make_plot, run_ldp_study

    try:
        cfg = resolve_config(LDPConfig, (quick_config if args.quick else full_config)(),
                             config_file=args.config, given=given_options(seed=args.seed, backend=args.backend),
                             overrides=args.set, resume_from=args.out if args.resume else None,
                             preset_flag="--quick" if args.quick else None)
    except (OSError, ValueError) as e:
        print(f"rieszflow ldp: error: {e}", file=sys.stderr)
        return 2
    out = args.out or Path("runs") / f"ldp{'-quick' if args.quick else ''}-seed{cfg.seed}.h5"
    from tqdm.auto import tqdm

    # the cells' result lines arrive while the progress bar is drawn: tqdm.write keeps them off it
    log = (lambda *a: None) if args.quiet else (lambda s: tqdm.write(str(s)))
    t0 = time.perf_counter()
    try:
        run_ldp_study(cfg, out, overwrite=args.overwrite, resume=args.resume, progress=not args.quiet, log=log,
                      workers=args.workers, scheduler=args.scheduler, on_summary=_print_counts)
    except (FileExistsError, FileNotFoundError, ValueError) as e:
        print(f"rieszflow ldp: error: {e}", file=sys.stderr)
        return 2
    except RuntimeError as e:
        print(f"rieszflow ldp: error: {e}", file=sys.stderr)
        return 1
    ds = load_study(out)
    print(format_table(ds))
    if not args.no_plots:
        path = make_plot(ds, Path(out).with_name(Path(out).stem + "_rates.png"))
        log(f"plot: {path}")
    print(f"wrote {out} in {time.perf_counter() - t0:.1f} s")
    return 0
