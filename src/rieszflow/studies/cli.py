"""The ``rieszflow`` command line: the main job and every study, one subcommand each.

Each subcommand lives in a module ``studies.<name>.cli`` that defines

``register(subparsers) -> argparse.ArgumentParser``
    adds its parser to ``subparsers`` and sets ``func`` (a callable taking the
    parsed ``argparse.Namespace`` and returning an exit code) with
    ``parser.set_defaults(func=...)``.

Heavy imports belong inside ``func`` so that ``rieszflow --help`` stays fast.
Adding a study is one more entry in :data:`SUBCOMMANDS`.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from rieszflow.studies.base import positive_int

#: (subcommand, module) pairs, in the order ``rieszflow --help`` lists them.
SUBCOMMANDS = (
    ("run", "rieszflow.studies.main_job.cli"),
    ("mean-field", "rieszflow.studies.mean_field.cli"),
    ("kernel-mean-field", "rieszflow.studies.kernel_mean_field.cli"),
    ("ldp", "rieszflow.studies.ldp.cli"),
    ("attention-theory", "rieszflow.studies.attention_theory.cli"),
    ("token-flow", "rieszflow.studies.token_flow.cli"),
    ("synthetic", "rieszflow.studies.synthetic.cli"),
    ("nlp", "rieszflow.studies.nlp.cli"),
    ("infinite-width", "rieszflow.studies.infinite_width.cli"),
    ("kgd", "rieszflow.studies.kgd.cli"),
    ("gibbs-check", "rieszflow.studies.gibbs_check.cli"),
    ("luna", "rieszflow.studies.luna.cli"),
    ("status", "rieszflow.studies.runs.cli:register_status"),
    ("compare", "rieszflow.studies.runs.cli:register_compare"),
    ("report", "rieszflow.studies.runs.cli:register_report"),
    ("plot", "rieszflow.studies.runs.cli:register_plot"),
    ("bench", "rieszflow.studies.bench_cli"),
)


def build_parser() -> argparse.ArgumentParser:
    """Build the top-level parser with every registered subcommand.

    Returns
    -------
    argparse.ArgumentParser
        With ``--version`` and one subparser per entry of :data:`SUBCOMMANDS`; the
        subparsers are kept in ``parser.subcommand_parsers`` (name -> parser).
    """
    from rieszflow import __version__

    parser = argparse.ArgumentParser(
        prog="rieszflow",
        description="Particle and mean-field simulation engine for learned attention kernels.",
        epilog="Exit codes: 0 success, 1 run failure, 2 usage or bad input, 130 interrupted "
               "(SIGINT), 143 terminated (SIGTERM). 'rieszflow COMMAND --help' for a command.",
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"rieszflow {__version__}")
    parser.add_argument("--threads", dest="thread_cap", type=positive_int, default=None, metavar="N",
                        help="most threads any operation may use (default: $RIESZFLOW_THREADS, else "
                             "the cores this process may use); BLAS runs one thread and Numba "
                             "kernels use N only for large calls: docs/performance.md")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    parser.subcommand_parsers = {}
    for name, target in SUBCOMMANDS:
        module, _, func = target.partition(":")
        parser.subcommand_parsers[name] = getattr(importlib.import_module(module), func or "register")(sub)
    return parser


#: Exit codes of every subcommand (docs/cli.md).
EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2


def main(argv=None) -> int:
    """Entry point of the ``rieszflow`` console script (and ``python -m rieszflow``).

    Bare ``rieszflow`` prints the help and exits with 2 (no command given). Unknown
    options are reported with the usage of the subcommand they were given to. SIGINT
    and SIGTERM end a run cleanly: its file is marked ``interrupted`` (and can be
    resumed), one line is printed, and the exit code is 130 or 143. Bad input exits
    with 2, a failed run with 1, each with a one-line message (set
    ``RIESZFLOW_DEBUG=1`` for the traceback).

    Parameters
    ----------
    argv : list of str, optional
        Arguments without the program name; defaults to ``sys.argv[1:]``.

    Returns
    -------
    int
        Process exit code: 0 success, 1 run failure, 2 usage or bad input, 130/143
        interrupted by SIGINT/SIGTERM.
    """
    import os
    from pathlib import Path

    from rieszflow.engine.storage import RunFileError, interruptible, record_command

    argv = list(sys.argv[1:] if argv is None else argv)
    record_command(["rieszflow", *argv])        # every file written below stores its command line
    parser = build_parser()
    if not argv:
        parser.print_help()
        return EXIT_USAGE
    args, extra = parser.parse_known_args(argv)
    if args.command is None:
        parser.error("a command is required")
    if extra:
        parser.subcommand_parsers[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
    out = getattr(args, "out", "")
    writes_hdf5 = getattr(args, "writes_hdf5", True)      # False: report (Markdown), status, compare
    if writes_hdf5 and out and not Path(out).is_dir():
        from rieszflow.studies.base import check_hdf5_out

        try:
            check_hdf5_out(out)
        except ValueError as e:
            print(f"rieszflow {args.command}: error: {e}", file=sys.stderr)
            return EXIT_USAGE
    if writes_hdf5 and (out is None or (out and Path(out).parent == Path("runs"))):
        Path("runs").mkdir(exist_ok=True)        # the documented default output directory
    debug = bool(os.environ.get("RIESZFLOW_DEBUG"))
    from rieszflow.engine.threads import configure_threads

    try:            # the thread policy (engine/threads.py) before any study computes
        configure_threads(args.thread_cap)
    except ValueError as e:
        print(f"rieszflow {args.command}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    try:
        with interruptible():
            return int(args.func(args) or 0)
    except KeyboardInterrupt as e:
        code = getattr(e, "exit_code", 130)
        print(f"rieszflow {args.command}: interrupted ({e or 'SIGINT'}); the output file is marked "
              f"'interrupted' and can be continued with --resume where the command supports it",
              file=sys.stderr)
        return code
    except (RunFileError, FileExistsError, FileNotFoundError, IsADirectoryError, ValueError,
            TypeError) as e:
        if debug:
            raise
        print(f"rieszflow {args.command}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as e:  # noqa: BLE001 - one line instead of a traceback; RIESZFLOW_DEBUG shows it
        if debug:
            raise
        print(f"rieszflow {args.command}: run failed: {type(e).__name__}: {e} (set RIESZFLOW_DEBUG=1 "
              f"for the traceback)", file=sys.stderr)
        return EXIT_FAILURE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
