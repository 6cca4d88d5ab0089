"""``rieszflow bench``: the benchmark suite of a source checkout (``python -m benchmarks``).

The suite lives in the repository's ``benchmarks/`` folder, which an installed wheel does not
ship; from a source checkout this subcommand runs ``python -m benchmarks`` with the same options
in a fresh interpreter (thread counts must be pinned before NumPy is imported, which has already
happened in this process). Without the folder it exits with 2 and says so.

The options are defined here, once, and used by both entry points
(:func:`add_suite_arguments`); this module imports only the standard library.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

__all__ = ["add_suite_arguments", "benchmarks_dir", "register"]


def _positive_int(text: str) -> int:
    # rieszflow.studies.cli.positive_int's twin: this module must not import the package (the
    # suite pins thread counts before NumPy is imported, and the package imports NumPy)
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be >= 1")
    return value


def add_suite_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the benchmark suite's options to ``parser``.

    Parameters
    ----------
    parser : argparse.ArgumentParser

    Returns
    -------
    argparse.ArgumentParser
        ``parser``, with ``--threads``, ``--k``, ``--quick``, ``--only``, ``--list``, ``--md``,
        ``--json``, ``--readme`` and ``--from-json``.
    """
    parser.add_argument("--threads", type=_positive_int, default=1,
                        help="threads of BLAS, OpenMP, Numba and torch, the same for the project and "
                             "its peer (default 1)")
    parser.add_argument("--k", type=_positive_int, default=5,
                        help="interleaved timing rounds per measure; min and median reported (default 5)")
    parser.add_argument("--quick", action="store_true",
                        help="small sizes: a smoke run of the whole suite (under 2 minutes)")
    parser.add_argument("--only", nargs="+", default=None, metavar="NAME",
                        help="run only these modules (e.g. bench_riesz or riesz; see --list)")
    parser.add_argument("--list", action="store_true", help="list the registered modules and exit")
    parser.add_argument("--md", default=None, metavar="FILE.md", help="write the report (markdown) here")
    parser.add_argument("--json", default=None, metavar="FILE.json",
                        help="write the measurements and their provenance (JSON) here")
    parser.add_argument("--readme", default=None, metavar="README.md",
                        help="regenerate this file's performance section (between <!-- perf:begin --> "
                             "and <!-- perf:end -->) from the measurements")
    parser.add_argument("--from-json", default=None, metavar="FILE.json",
                        help="measure nothing: take the measurements from this JSON (with --readme/--md)")
    return parser


def benchmarks_dir() -> Path | None:
    """The ``benchmarks/`` folder of the source checkout this package runs from, or None.

    Returns
    -------
    pathlib.Path or None
        ``<checkout>/benchmarks`` when it holds ``suite.py`` (an installed wheel has no such folder).
    """
    root = Path(__file__).resolve().parents[2]
    folder = root / "benchmarks"
    return folder if (folder / "suite.py").is_file() else None


def register(subparsers) -> argparse.ArgumentParser:
    """Add the ``bench`` subcommand (see :mod:`rieszflow.studies.cli`).

    Parameters
    ----------
    subparsers : argparse._SubParsersAction

    Returns
    -------
    argparse.ArgumentParser
    """
    p = subparsers.add_parser(
        "bench", allow_abbrev=False,
        help="the benchmark suite: each measure against its peer (PyKeOps, torch CPU, a bare SciPy "
             "solve), ratios timed interleaved in one run (source checkout only)",
        description="Run the benchmark suite of a source checkout (python -m benchmarks). Peers "
                    "come from the optional extra 'bench' (torch CPU build, pykeops); a missing "
                    "peer or module is skipped with its reason.")
    add_suite_arguments(p)
    p.set_defaults(func=_run, writes_hdf5=False)
    return p


def _forwarded(args) -> list:
    out = ["--threads", str(args.threads), "--k", str(args.k)]
    out += ["--quick"] if args.quick else []
    out += ["--list"] if args.list else []
    out += ["--only", *args.only] if args.only else []
    for flag in ("md", "json", "readme", "from_json"):
        value = getattr(args, flag)
        if value is not None:
            out += [f"--{flag.replace('_', '-')}", str(Path(value).resolve())]
    return out


def _run(args) -> int:
    folder = benchmarks_dir()
    if folder is None:
        print("rieszflow bench: error: the benchmark suite is not installed with the package; it "
              "runs from a source checkout (git clone, then 'rieszflow bench' or 'python -m "
              "benchmarks' in the repository root)", file=sys.stderr)
        return 2
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(folder.parent), *filter(None, [env.get("PYTHONPATH")])])
    return subprocess.run([sys.executable, "-m", "benchmarks", *_forwarded(args)], cwd=folder.parent,
                          env=env).returncode
