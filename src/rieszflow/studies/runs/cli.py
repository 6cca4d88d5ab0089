"""``rieszflow status FILE`` and ``rieszflow compare A.h5 B.h5 ...``."""
from __future__ import annotations

import argparse
from pathlib import Path

from rieszflow.studies.base import non_negative_int
from rieszflow.studies.reporting import register_reporter

__all__ = ["register_status", "register_compare", "register_report", "register_plot"]

register_reporter("sweep", "rieszflow.studies.runs.report:sweep_report")


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
    p.add_argument("--last", type=non_negative_int, default=3, help="records shown per growing dimension (default 3)")
    p.add_argument("--verify", action="store_true",
                   help="also read every dataset in full, checking HDF5's Fletcher-32 checksums: "
                        "exit 2 naming the first damaged variable")
    p.set_defaults(func=_status, writes_hdf5=False)
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
    p.set_defaults(func=_compare, writes_hdf5=False)
    return p


def register_report(subparsers) -> argparse.ArgumentParser:
    """Add the ``report`` subcommand (see :mod:`rieszflow.studies.runs.report`).

    Parameters
    ----------
    subparsers : argparse._SubParsersAction

    Returns
    -------
    argparse.ArgumentParser
    """
    p = subparsers.add_parser("report", allow_abbrev=False,
                              help="a Markdown page of the tables of run files, with the command, "
                                   "commit, date and wall time of each (docs/results/)")
    p.add_argument("files", type=Path, nargs="+",
                   help="files written by rieszflow, or the --out directory of a sweep study that "
                        "stores its report there (infinite-width, kgd, luna)")
    p.add_argument("--out", type=Path, default=None, metavar="PAGE.md",
                   help="write the page here (default: print it)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing page")
    p.add_argument("--title", default=None, help="page title (default: the kinds of the files)")
    p.add_argument("--notes", type=Path, default=None, metavar="NOTES.md",
                   help="hand-written notes appended after the tables (with --out; kept in a file of "
                        "their own, so regenerating the page keeps them)")
    p.set_defaults(func=_report, writes_hdf5=False)
    return p


def register_plot(subparsers) -> argparse.ArgumentParser:
    """Add the ``plot`` subcommand (see :mod:`rieszflow.studies.runs.plot`).

    Parameters
    ----------
    subparsers : argparse._SubParsersAction

    Returns
    -------
    argparse.ArgumentParser
    """
    p = subparsers.add_parser("plot", allow_abbrev=False,
                              help="the standard figure of a main-job file (Hamiltonian and its "
                                   "parts, particle norms, loss, accuracy, calibration), one PNG")
    p.add_argument("file", type=Path, help="a main-job file (written by rieszflow run)")
    p.add_argument("--out", type=Path, default=None, metavar="FIG.png",
                   help="write the figure here (default: the run's name with .png, beside it)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing figure")
    p.set_defaults(func=_plot, writes_hdf5=False)
    return p


def _plot(args) -> int:
    from rieszflow.studies.runs.plot import plot_main_job

    out, missing = plot_main_job(args.file, args.out, overwrite=args.overwrite)
    print(f"wrote {out}")
    if missing:
        print(f"  not drawn (the file lacks them): {', '.join(missing)}")
    return 0


def _report(args) -> int:
    from rieszflow.studies.runs.report import report_markdown, write_report

    if args.out is None:
        if args.notes is not None:
            raise ValueError("--notes appends to a page: give --out PAGE.md too")
        print(report_markdown(args.files, title=args.title))
    else:
        print(f"wrote {write_report(args.files, args.out, overwrite=args.overwrite, title=args.title, notes=args.notes)}")
    return 0


def _status(args) -> int:
    from rieszflow.studies.runs.inspect import format_status, run_status

    if args.verify:
        from rieszflow.engine.storage import verify_run_file
        from rieszflow.studies.runs.inspect import live_writer

        live = live_writer(args.file) if args.file.exists() else None
        if live is not None:       # a block being written would read as damage
            raise ValueError(f"--verify reads a file at rest; {args.file} is being written by {live}: "
                             f"verify it once that run has ended")
        names = verify_run_file(args.file)        # RunFileError (exit 2) names the damaged variable
    print(format_status(run_status(args.file, n_last=args.last)))
    if args.verify:
        print(f"  verified: all {len(names)} datasets read back intact (Fletcher-32 checksums "
              f"checked where the file carries them)")
    return 0


def _compare(args) -> int:
    from rieszflow.studies.runs.inspect import compare_runs, format_compare

    print(format_compare(compare_runs(args.files)))
    return 0
