"""The ``rieszflow`` command line: the main job and every study, one subcommand each.

Each subcommand lives in a module ``studies.<name>.cli`` that defines

``register(subparsers) -> argparse.ArgumentParser``
    adds its parser to ``subparsers`` and sets ``func`` (a callable taking the
    parsed ``argparse.Namespace`` and returning an exit code) with
    ``parser.set_defaults(func=...)``.

Heavy imports belong inside ``func`` so that ``rieszflow --help`` stays fast.
Adding a study is one more entry in ``SUBCOMMANDS``.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from rieszflow.studies.base import add_log_arguments, positive_int

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
        With ``--version`` and one subparser per entry of ``SUBCOMMANDS``, each with
        ``--log-level``; the subparsers are kept in ``parser.subcommand_parsers`` (name -> parser).
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
        p = getattr(importlib.import_module(module), func or "register")(sub)
        add_log_arguments(p)                 # --log-level: every subcommand (main applies it)
        parser.subcommand_parsers[name] = p
    return parser


#: Exit codes of every subcommand (docs/cli.md).
EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2


def log_file_of(args) -> tuple:
    """Where a command's log file goes, and when it may be created.

    Only the commands that write runs (those with ``--show-config``) keep a log file: ``<out>.log``
    beside an output file, created once the run has started writing it (its lock file exists) or
    the file exists, so a command refused on bad input leaves nothing behind; ``<out>/rieszflow.log``
    inside a sweep directory, created once the directory holds its ``config.json`` (an empty
    directory that a sweep is about to check stays empty); ``runs/<command>.log`` when ``--out`` is
    not given (the default paths under ``runs/``). The lines printed before are kept and written
    then.

    Parameters
    ----------
    args : argparse.Namespace
        The parsed command line.

    Returns
    -------
    path : pathlib.Path or None
        The log file; None for a command without one.
    ready : callable or None
        ``ready() -> bool``: whether the file may be created now.
    """
    from pathlib import Path

    from rieszflow.studies.base import HDF5_SUFFIXES

    if not hasattr(args, "show_config"):
        return None, None
    out = getattr(args, "out", None)
    if out is None:                  # a default path under runs/: once this command wrote a file there
        import time

        start = time.time() - 1.0

        def wrote_under_runs() -> bool:
            try:
                return any(p.suffix in (".h5", ".lock") and p.stat().st_mtime >= start
                           for p in Path("runs").iterdir())
            except OSError:
                return False
        return Path("runs") / f"{args.command}.log", wrote_under_runs
    out = Path(out)
    if out.suffix.lower() in HDF5_SUFFIXES:
        lock = out.with_name(out.name + ".lock")
        return out.with_name(out.name + ".log"), lambda: out.exists() or lock.exists()
    return out / "rieszflow.log", (out / "config.json").is_file


def _interrupt_message(command: str, e: BaseException) -> str:
    """The one line of an interrupted command: the run's own resume hint when it gives one."""
    hint = getattr(e, "resume_hint", None)
    resumable = getattr(e, "resumable", None)
    head = f"rieszflow {command}: interrupted ({e or 'SIGINT'})"
    if hint:
        return f"{head}; {hint}"
    if resumable is True:
        return f"{head}; the output file is marked 'interrupted' and can be continued with --resume"
    if resumable is False:
        return f"{head}; the output holds no checkpoint to continue from: run the command again"
    return (f"{head}; an output file already opened is marked 'interrupted' (commands with --resume "
            f"continue it from its last checkpoint, if it has one)")


def main(argv=None) -> int:
    """Entry point of the ``rieszflow`` console script (and ``python -m rieszflow``).

    Bare ``rieszflow`` prints the help and exits with 2 (no command given). Unknown
    options are reported with the usage of the subcommand they were given to. SIGINT
    and SIGTERM end a run cleanly: its file is marked ``interrupted``, one line is printed
    (with the run's resume hint), and the exit code is 130 or 143. Bad input exits
    with 2, a failed run with 1, each with a one-line message (``--log-level debug`` or
    ``RIESZFLOW_DEBUG=1`` adds the traceback). ``--show-config`` prints the configuration the
    command would run and exits 0 before any work. Everything printed also goes to the run's log
    file (:func:`log_file_of`); warnings are one line each; a closed stdout (``| head``) is not an
    error (:mod:`rieszflow.studies.console`).

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
    from rieszflow.studies.console import Console

    argv = list(sys.argv[1:] if argv is None else argv)
    with Console() as console:
        try:
            return _main(argv, console)
        except BrokenPipeError:                 # a console stream closed outside the Tee's reach
            return EXIT_OK


def _main(argv: list, console) -> int:
    """:func:`main` inside its :class:`~rieszflow.studies.console.Console`."""
    import os
    import traceback
    import zipfile
    from pathlib import Path

    from rieszflow.engine.storage import RunFileError, interruptible, record_command

    record_command(["rieszflow", *argv])        # every file written below stores its command line
    parser = build_parser()
    if not argv:
        parser.print_help()
        return EXIT_USAGE
    args, extra = parser.parse_known_args(argv)
    if args.command is None:
        parser.error("a command is required")
    sub = parser.subcommand_parsers[args.command]
    if extra:
        sub.error(f"unrecognized arguments: {' '.join(extra)}")
    console.command = args.command
    prog = f"rieszflow {args.command}"
    level = args.log_level
    if level is None:
        level = "warning" if getattr(args, "quiet", False) else "info"
    elif getattr(args, "quiet", False) and level in ("debug", "info"):
        sub.error(f"--quiet is --log-level warning; it contradicts --log-level {level}: give one")
    if hasattr(args, "quiet"):
        args.quiet = level in ("warning", "error")      # what the studies read
    console.show_warnings = level != "error"
    debug = level == "debug" or bool(os.environ.get("RIESZFLOW_DEBUG"))
    show = getattr(args, "show_config", False)

    def fail(code: int, line: str) -> int:
        if debug:
            console.stderr.write_at(traceback.format_exc(), "DEBUG")
        print(f"{prog}: {line}", file=sys.stderr)
        return code

    out = getattr(args, "out", "")
    writes_hdf5 = getattr(args, "writes_hdf5", True)      # False: report (Markdown), status, compare
    if writes_hdf5 and out:
        from rieszflow.studies.base import check_hdf5_out

        try:
            if Path(out).is_dir():
                raise ValueError(f"--out {str(out)!r} is a directory; give a file name ending in .h5")
            check_hdf5_out(out)
        except ValueError as e:
            return fail(EXIT_USAGE, f"error: {e}")
    if not show:
        log, ready = log_file_of(args)
        if log is not None:
            console.log_to(log, ready, header=f"rieszflow {' '.join(argv)}  (pid {os.getpid()}, "
                                              f"cwd {os.getcwd()})")
        if writes_hdf5 and (out is None or (out and Path(out).parent == Path("runs"))):
            Path("runs").mkdir(exist_ok=True)    # the documented default output directory
    from rieszflow.engine.threads import configure_threads

    try:            # the thread policy (engine/threads.py) before any study computes
        configure_threads(args.thread_cap)
    except ValueError as e:
        return fail(EXIT_USAGE, f"error: {e}")
    code = EXIT_FAILURE
    try:
        if show:
            return _show_config(args, sub)
        with interruptible():
            code = int(args.func(args) or 0)
            return code
    except KeyboardInterrupt as e:
        code = getattr(e, "exit_code", 130)
        print(_interrupt_message(args.command, e), file=sys.stderr)
        return code
    except (RunFileError, FileExistsError, FileNotFoundError, IsADirectoryError, PermissionError,
            ValueError, TypeError, zipfile.BadZipFile) as e:
        code = EXIT_USAGE
        what = "corrupt input file: " if isinstance(e, zipfile.BadZipFile) else ""
        return fail(EXIT_USAGE, f"error: {what}{e}")
    except BrokenPipeError as e:
        if console.stdout.broken or console.stderr.broken:   # our reader went away (| head): quiet 0
            code = EXIT_OK
            raise
        # a pipe of the run's own (a socket, a subprocess): a failure like any other
        return fail(EXIT_FAILURE, f"run failed: BrokenPipeError: {e}"
                    + ("" if debug else " (--log-level debug for the traceback)"))
    except Exception as e:  # noqa: BLE001 - one line instead of a traceback; --log-level debug shows it
        return fail(EXIT_FAILURE, f"run failed: {type(e).__name__}: {e}"
                    + ("" if debug else " (--log-level debug for the traceback)"))
    finally:
        if not show:
            console.log_line("INFO", f"exit status {code}")


def _show_config(args, sub) -> int:
    """``--show-config``: the command resolves its configuration and stops there; print it."""
    from rieszflow.config import ConfigShown, format_config, showing_config

    choices = {a.dest: a.choices for a in sub._actions if a.option_strings and a.choices}
    try:
        with showing_config():
            code = args.func(args)
    except ConfigShown as shown:
        source = (f"stored in {shown.resumed} (--resume)" if shown.resumed is not None
                  else "preset < --config < options < --set")
        print(f"rieszflow {args.command}: the configuration this command would run "
              f"({shown.cfg_cls.__name__}, {source}); '*' marks a value that differs from the "
              f"default (the preset of the size options given). Nothing was computed or written.")
        print(format_config(shown.cfg_cls, shown.cfg, shown.preset, choices=choices))
        return EXIT_OK
    if code:            # it stopped on bad input before resolving a configuration (and said so)
        return int(code)
    print(f"rieszflow {args.command}: error: --show-config: these options resolve no configuration "
          f"(the command ran without one)", file=sys.stderr)
    return EXIT_USAGE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
