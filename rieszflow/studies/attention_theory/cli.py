"""``rieszflow attention-theory``: paper 004's Lipschitz and contraction bounds, measured.

Registered in :mod:`studies.cli` as ``("attention-theory", "rieszflow.studies.attention_theory.cli")``.
Heavy imports (NumPy, SciPy, POT, h5py, matplotlib) happen inside :func:`run_from_args` so that
``rieszflow --help`` stays fast.
"""
from __future__ import annotations

import argparse
import sys

__all__ = ["DEFAULT_OUT", "register", "run_from_args"]

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
    p.add_argument("--quick", action="store_true",
                   help="about one minute or less: fewer instances, N <= 1000")
    p.add_argument("--seed", type=int, default=None,
                   help="seed of the host random generator (default: the config's, 0)")
    p.add_argument("--out", default=DEFAULT_OUT, metavar="PATH",
                   help=f"HDF5 output file, .h5/.hdf5/.nc (default: {DEFAULT_OUT})")
    p.add_argument("--overwrite", action="store_true", help="replace an existing output file")
    p.add_argument("--quiet", action="store_true", help="print neither progress nor the table")
    p.add_argument("--config", default=None, metavar="JSON",
                   help="JSON file of config overrides (strict: unknown keys are an error); "
                        "applied on top of --quick when both are given")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG figures")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config field (repeatable; typed like the field's default)")
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
    from rieszflow.studies.attention_theory.config import AttentionTheoryConfig
    from rieszflow.studies.attention_theory.study import check_output, run

    try:
        config = AttentionTheoryConfig.quick() if args.quick else AttentionTheoryConfig()
        if args.config is not None:
            config = AttentionTheoryConfig.from_json(args.config, base=config)
        if args.seed is not None:
            config = AttentionTheoryConfig.from_mapping({"seed": args.seed}, base=config)
        if args.set:
            from rieszflow.studies.cli import parse_overrides

            config = AttentionTheoryConfig.from_mapping(
                parse_overrides(args.set, AttentionTheoryConfig, defaults=config), base=config)
        check_output(args.out, args.overwrite)
    except (ValueError, TypeError, FileExistsError, FileNotFoundError) as e:
        print(f"rieszflow attention-theory: error: {e}", file=sys.stderr)
        return 2
    result = run(config, args.out, overwrite=args.overwrite, quiet=args.quiet, plots=not args.no_plots)
    if not args.quiet:
        print(result["table"])
        print(f"\nwrote {result['path']}" + "".join(f", {p}" for p in result["plots"]))
    return 0
