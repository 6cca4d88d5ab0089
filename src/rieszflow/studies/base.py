"""The command-line base every study shares: output, configuration and size options.

:func:`add_study_arguments` gives each subcommand the shared options (``--config``, ``--seed``,
``--backend``, ``--set``, ``--show-config``, ``--quick`` and the output options of
:func:`add_output_arguments`), :func:`add_log_arguments` the ``--log-level`` of every subcommand,
:func:`check_hdf5_out` the one output-name check, and :func:`non_negative_int` /
:func:`positive_int` the argparse types. Configurations themselves live in :mod:`rieszflow.config`.
"""
from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["HDF5_SUFFIXES", "LOG_LEVELS", "check_hdf5_out", "output_path", "add_output_arguments",
           "add_study_arguments", "add_log_arguments", "given_options", "non_negative_int",
           "positive_int"]


def non_negative_int(text: str) -> int:
    """``argparse`` type for seeds, epochs and counts: an integer >= 0.

    Parameters
    ----------
    text : str
        The option's value as typed.

    Returns
    -------
    int
        The value, >= 0.

    Raises
    ------
    argparse.ArgumentTypeError
        Naming the value when it is not an integer or is negative.
    """
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be >= 0")
    return value


def positive_int(text: str) -> int:
    """``argparse`` type for counts that must be >= 1 (e.g. ``--threads``).

    Parameters
    ----------
    text : str
        The option's value as typed.

    Returns
    -------
    int
        The value, >= 1.

    Raises
    ------
    argparse.ArgumentTypeError
        Naming the value when it is not an integer or is below 1.
    """
    value = non_negative_int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be >= 1")
    return value


#: File name endings of the HDF5 files rieszflow writes.
HDF5_SUFFIXES = (".h5", ".hdf5", ".nc")


def check_hdf5_out(out, option: str = "--out") -> None:
    """Check that an output path names an HDF5 file (the one check every command uses).

    Parameters
    ----------
    out : str or os.PathLike
        The output path.
    option : str
        Option name for the message.

    Raises
    ------
    ValueError
        If ``out`` is empty or does not end in one of ``HDF5_SUFFIXES`` (case-insensitive).
    """
    if not str(out) or str(out) == ".":
        raise ValueError(f"{option} {str(out)!r}: an empty path; give a file name ending in "
                         f"{', '.join(HDF5_SUFFIXES[:-1])} or {HDF5_SUFFIXES[-1]}")
    if Path(out).suffix.lower() not in HDF5_SUFFIXES:
        raise ValueError(f"{option} {str(out)!r}: rieszflow writes HDF5 files; use a name ending in "
                         f"{', '.join(HDF5_SUFFIXES[:-1])} or {HDF5_SUFFIXES[-1]}")


def output_path(text: str) -> Path:
    """``argparse`` type of ``--out``: a path, refusing the empty one.

    ``Path("")`` is ``Path(".")``, the working directory: ``--out ""`` (an unset shell variable, say)
    would silently name it.

    Parameters
    ----------
    text : str
        The option's value as typed.

    Returns
    -------
    pathlib.Path

    Raises
    ------
    argparse.ArgumentTypeError
        If ``text`` is empty.
    """
    if not text.strip():
        raise argparse.ArgumentTypeError(
            f"{text!r}: an empty path; give a file name ending in {', '.join(HDF5_SUFFIXES[:-1])} or "
            f"{HDF5_SUFFIXES[-1]} (a directory for the studies that write one)")
    return Path(text)


def add_output_arguments(parser, default_out: str, *, resume_help: str | None = None,
                         plots: bool = True, plots_help: str = "skip the PNG figures") -> None:
    """Add the output options every study shares: ``--out``, ``--overwrite``, ``--resume``,
    ``--no-plots``, ``--quiet``.

    Parameters
    ----------
    parser : argparse.ArgumentParser
        The subcommand's parser.
    default_out : str
        The default output path, as shown in the help (e.g. ``runs/ldp[-quick]-seed<seed>.h5``).
    resume_help : str, optional
        Help of ``--resume`` (what a resumed run keeps); None when the study cannot resume.
    plots : bool, default True
        Whether to add ``--no-plots``.
    plots_help : str, default "skip the PNG figures"
        Its help.
    """
    parser.add_argument("--out", type=output_path, default=None,
                        help=f"output HDF5 file (default {default_out})")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing output file")
    if resume_help is not None:
        parser.add_argument("--resume", action="store_true", help=resume_help)
    if plots:
        parser.add_argument("--no-plots", action="store_true", help=plots_help)
    parser.add_argument("--quiet", action="store_true", help="no progress bars or stage lines")


def add_study_arguments(parser, *, default_out: str, backends=("numpy",), quick_help: str | None = None,
                        resume_help: str | None = None, plots: bool = True,
                        plots_help: str = "skip the PNG figures",
                        seed_help: str = "root seed (default: the --config file's, else 0)",
                        set_help: str = "override a config field (typed like the field; tuples as "
                                        "comma-separated values), repeatable") -> None:
    """Add the one CLI contract every study shares (docs/cli.md).

    ``--quick`` (where the study has sizes), ``--config FILE`` (JSON, or any HDF5 file rieszflow
    wrote), ``--seed``, ``--backend``, ``--set KEY=VALUE``, ``--show-config``, and the output options of
    :func:`add_output_arguments` (``--out``, ``--overwrite``, ``--resume``, ``--no-plots``,
    ``--quiet``). Resolve them with :func:`~rieszflow.config.resolve_config`.

    Parameters
    ----------
    parser : argparse.ArgumentParser
        The subcommand's parser.
    default_out : str
        The default output path as shown in the help.
    backends : tuple of str, default ("numpy",)
        Allowed ``--backend`` values.
    quick_help : str, optional
        Help of ``--quick``; None when the study has no sizes (no ``--quick``).
    resume_help : str, optional
        Help of ``--resume`` (default: the shared wording).
    plots : bool, default True
        Whether to add ``--no-plots`` (every study has it, for one contract).
    plots_help : str, default "skip the PNG figures"
        Help of ``--no-plots`` (say so where the study draws none).
    seed_help, set_help : str
        Help of ``--seed`` and ``--set``.
    """
    if quick_help is not None:
        parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument("--config", type=Path, default=None, metavar="FILE",
                        help="configuration file: JSON, or any HDF5 file rieszflow wrote (its stored "
                             "configuration); strict, unknown keys are an error; options given on "
                             "the command line override it")
    parser.add_argument("--seed", type=non_negative_int, default=None, help=seed_help)
    parser.add_argument("--backend", choices=tuple(backends), default=None,
                        help=f"array backend, one of {', '.join(backends)} (default: the --config "
                             f"file's, else numpy)")
    add_output_arguments(parser, default_out, plots=plots, plots_help=plots_help, resume_help=resume_help or (
        "continue the run in --out: its stored configuration is the default, and options given "
        "that differ from it are an error naming key, stored and given value"))
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help=set_help)
    parser.add_argument("--show-config", action="store_true",
                        help="print every configuration key with the value this command would run "
                             "(preset < --config < options < --set; a resumed file's stored one), "
                             "its default, units and allowed values, then exit 0 without computing "
                             "or writing anything")


#: Values of ``--log-level``, most verbose first.
LOG_LEVELS = ("debug", "info", "warning", "error")


def add_log_arguments(parser) -> None:
    """Add ``--log-level`` (every subcommand has it; :func:`rieszflow.studies.cli.main` applies it).

    Parameters
    ----------
    parser : argparse.ArgumentParser
        The subcommand's parser.
    """
    parser.add_argument("--log-level", choices=LOG_LEVELS, default=None,
                        help="what the console shows: debug (also the traceback of an error; as "
                             "RIESZFLOW_DEBUG=1), info (default), warning (as --quiet), error (no "
                             "warnings either); a run writing files also appends everything it "
                             "prints, with timestamps, to a log file beside its output (docs/cli.md)")


def given_options(**options) -> dict:
    """The command-line options that were given: ``options`` without the None values.

    Parameters
    ----------
    **options
        Option name to parsed value (None when the option was not given).

    Returns
    -------
    dict
    """
    return {k: v for k, v in options.items() if v is not None}
