"""``rieszflow gibbs-check RUN.h5``: Phase A's particles against the Gibbs state of their Hamiltonian.

Registered in :mod:`~rieszflow.studies.cli` as ``("gibbs-check", "rieszflow.studies.gibbs_check.cli")``.
Heavy imports happen inside :func:`run_from_args` so that ``rieszflow --help`` stays fast.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rieszflow.studies.base import add_study_arguments
from rieszflow.studies.reporting import register_reporter

__all__ = ["DEFAULT_OUT", "register", "run_from_args"]

register_reporter("gibbs_check", "rieszflow.studies.reporting:stored_report")

#: Default output file pattern (relative to the working directory; ``runs/`` is git-ignored).
DEFAULT_OUT = "runs/<RUN stem>-gibbs[-quick].h5"


def register(subparsers) -> argparse.ArgumentParser:
    """Add the ``gibbs-check`` subcommand to ``subparsers``.

    Parameters
    ----------
    subparsers : argparse._SubParsersAction
        The object returned by ``ArgumentParser.add_subparsers``.

    Returns
    -------
    argparse.ArgumentParser
        The subcommand's parser, with ``func`` set to :func:`run_from_args`.
    """
    p = subparsers.add_parser(
        "gibbs-check",
        help="compare a main-job file's learned particles with the Gibbs state of their "
             "(linearised) Phase A Hamiltonian",
        description="For every head of a main-job file: build the one-body alignment potential "
                    "(first variation of the Phase A alignment energy at the learned particles, "
                    "network frozen), sample the particle Gibbs measure exp(-beta m H_m) with the "
                    "run's beta, lam, s and norm ball by component-wise MALA, and compare learned, "
                    "initial and Gibbs particles (MMD, norms, Hamiltonians, attention on held-out "
                    "sentences). Writes an HDF5 file and plots beside it and prints the report.",
        allow_abbrev=False,
    )
    p.add_argument("run", type=Path, metavar="RUN.h5",
                   help="a main-job file of a kernel run (rieszflow run) whose Phase A finished")
    add_study_arguments(p, default_out=DEFAULT_OUT, backends=("numpy",),
                        quick_help="fewer sentences and sweeps (a minute or two at full model size)",
                        resume_help="a complete --out is reported as stored; an incomplete one is "
                                    "recomputed with the configuration it stores (the check "
                                    "writes once, at the end)")
    p.set_defaults(func=run_from_args)
    return p


def run_from_args(args: argparse.Namespace) -> int:
    """Run the check from parsed arguments.

    Parameters
    ----------
    args : argparse.Namespace
        With ``run``, ``quick``, ``seed``, ``out``, ``overwrite``, ``resume``, ``quiet``,
        ``no_plots``, ``config`` and ``set``.

    Returns
    -------
    int
        0 on success, 2 on bad input (invalid config, a missing, corrupt or foreign RUN.h5,
        existing output without ``--overwrite``); the error is printed to stderr.
    """
    from rieszflow.engine.storage import RunFileError
    from rieszflow.studies.base import given_options
    from rieszflow.config import resolve_config
    from rieszflow.studies.gibbs_check.config import GibbsCheckConfig
    from rieszflow.studies.gibbs_check.study import run_gibbs_check

    run = Path(args.run)
    out = Path(args.out) if args.out else Path("runs") / f"{run.stem}-gibbs{'-quick' if args.quick else ''}.h5"
    try:
        config = resolve_config(GibbsCheckConfig,
                                GibbsCheckConfig.quick() if args.quick else GibbsCheckConfig(),
                                config_file=args.config, given=given_options(seed=args.seed),
                                overrides=args.set, resume_from=out if args.resume else None,
                                preset_flag="--quick" if args.quick else None)
        if out.exists() and not (args.overwrite or args.resume):
            raise FileExistsError(f"{out} already exists; pass --overwrite or choose another --out path")
        if args.resume and out.is_file():
            from rieszflow.engine.storage import open_run

            ds = open_run(out, kind="gibbs_check")
            if ds.attrs.get("status") == "complete":
                if not args.quiet:
                    print(ds.attrs.get("report", ""))
                    print(f"\n{out} is complete: nothing to resume (the report above is the stored one)")
                return 0
        result = run_gibbs_check(config, run, out, overwrite=args.overwrite or args.resume,
                                 quiet=args.quiet, plots=not args.no_plots)
    except (ValueError, TypeError, FileExistsError, FileNotFoundError, RunFileError) as e:
        msg = str(e)
        if isinstance(e, (RunFileError, FileNotFoundError)) and str(run) not in msg:
            msg = f"{run}: {msg}"
        print(f"rieszflow gibbs-check: error: {msg}", file=sys.stderr)
        return 2
    if not args.quiet:
        print(result["report"])
        print(f"\nwrote {result['path']}" + "".join(f", {p}" for p in result["plots"])
              + f" ({result['seconds']:.0f} s)")
    return 0
