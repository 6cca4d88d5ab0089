"""``rieszflow status FILE`` and ``rieszflow compare A.h5 B.h5 ...``."""
from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["register_status", "register_compare"]


def register_status(subparsers) -> argparse.ArgumentParser:
    """Add the ``status`` subcommand (see :mod:`rieszflow.studies.cli`).

    Parameters
    ----------
    subparsers : argparse._SubParsersAction

    Returns
    -------
    argparse.ArgumentParser
    """
    p = subparsers.add_parser("status", allow_abbrev=False,
                              help="progress, status and last records of any rieszflow file (also "
                                   "while it is being written)")
    p.add_argument("file", type=Path, help="a file written by rieszflow")
    p.add_argument("--last", type=int, default=3, help="records shown per growing dimension (default 3)")
    p.set_defaults(func=_status)
    return p


def register_compare(subparsers) -> argparse.ArgumentParser:
    """Add the ``compare`` subcommand (see :mod:`rieszflow.studies.cli`).

    Parameters
    ----------
    subparsers : argparse._SubParsersAction

    Returns
    -------
    argparse.ArgumentParser
    """
    p = subparsers.add_parser("compare", allow_abbrev=False,
                              help="test metrics of main-job runs side by side, McNemar test on shared "
                                   "test predictions")
    p.add_argument("files", type=Path, nargs="+", help="two or more main-job files")
    p.set_defaults(func=_compare)
    return p


def _status(args) -> int:
    from rieszflow.studies.runs.inspect import format_status, run_status

    if args.last < 1:
        raise ValueError(f"--last {args.last}: must be >= 1")
    print(format_status(run_status(args.file, n_last=args.last)))
    return 0


def _compare(args) -> int:
    from rieszflow.studies.runs.inspect import compare_runs, format_compare

    print(format_compare(compare_runs(args.files)))
    return 0
