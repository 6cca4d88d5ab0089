"""``rieszflow attention-theory``: paper 004's Lipschitz and contraction bounds, measured.

Registered in :mod:`~rieszflow.studies.cli` as ``("attention-theory", "rieszflow.studies.attention_theory.cli")``.
Heavy imports (NumPy, SciPy, POT, h5py, matplotlib) happen inside :func:`run_from_args` so that
``rieszflow --help`` stays fast.
"""
from __future__ import annotations

import argparse
import sys

from rieszflow.studies.base import add_study_arguments
from rieszflow.studies.reporting import register_reporter

__all__ = ["DEFAULT_OUT", "register", "run_from_args"]

register_reporter("attention_theory", "rieszflow.studies.reporting:stored_report")

#: Default output file (relative to the working directory; ``runs/`` is git-ignored).
DEFAULT_OUT = "runs/attention_theory.h5"


def register(subparsers) -> argparse.ArgumentParser:
    """Add the ``attention-theory`` subcommand to ``subparsers``.

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
        "attention-theory",
        help="measure every bound of paper 004 (Thm 23, Prop 19-26, Cor 24/30) against the "
             "empirical W1 ratio",
        description="Evaluate paper 004's Lipschitz and contraction bounds, and the corrected "
                    "ones of the spec, next to measured W1 ratios on random and adversarial "
                    "token sets; refute Cor. 30 with the (1 + ln(N-1))/2 family; iterate the "
                    "weight-shared Transformer of Prop. 26. Writes an HDF5 file and plots beside "
                    "it and prints the report table.",
        allow_abbrev=False,
    )
    add_study_arguments(p, default_out=DEFAULT_OUT, backends=("numpy",),
                        quick_help="about one minute or less: fewer instances, N <= 1000",
                        resume_help="continue --out: a complete file is reported as stored; an "
                                    "incomplete one is recomputed from its stored configuration "
                                    "(the study writes once, at the end)")
    p.set_defaults(func=run_from_args)
    return p


def run_from_args(args: argparse.Namespace) -> int:
    """Run the study from parsed arguments.

    Parameters
    ----------
    args : argparse.Namespace
        With ``quick``, ``seed``, ``out``, ``overwrite``, ``quiet`` and ``config``.

    Returns
    -------
    int
        0 on success, 2 on bad input (invalid config, existing output without
        ``--overwrite``); the error is printed to stderr.
    """
    from pathlib import Path

    from rieszflow.studies.attention_theory.config import AttentionTheoryConfig
    from rieszflow.studies.attention_theory.study import check_output, run
    from rieszflow.studies.base import given_options
    from rieszflow.config import resolve_config

    out = Path(args.out or DEFAULT_OUT)
    try:
        config = resolve_config(AttentionTheoryConfig,
                                AttentionTheoryConfig.quick() if args.quick else AttentionTheoryConfig(),
                                config_file=args.config, given=given_options(seed=args.seed), overrides=args.set,
                                resume_from=out if args.resume else None,
                                preset_flag="--quick" if args.quick else None)
        check_output(out, args.overwrite or args.resume)
    except (ValueError, TypeError, FileExistsError, FileNotFoundError) as e:
        print(f"rieszflow attention-theory: error: {e}", file=sys.stderr)
        return 2
    result = run(config, out, overwrite=args.overwrite, quiet=args.quiet, plots=not args.no_plots,
                 resume=args.resume)
    if not args.quiet:
        print(result["table"])
        if result.get("resumed") == "complete":
            print(f"\n{out} is complete: nothing to resume (the table above is the stored report)")
        else:
            print(f"\nwrote {result['path']}" + "".join(f", {p}" for p in result["plots"]))
    return 0
