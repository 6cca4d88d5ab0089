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

#: (subcommand, module) pairs, in the order ``rieszflow --help`` lists them.
SUBCOMMANDS = (
    ("run", "studies.main_job.cli"),
    ("mean-field", "studies.mean_field.cli"),
    ("ldp", "studies.ldp.cli"),
    ("attention-theory", "studies.attention_theory.cli"),
    ("token-flow", "studies.token_flow.cli"),
)


def build_parser() -> argparse.ArgumentParser:
    """Build the top-level parser with every registered subcommand.

    Returns
    -------
    argparse.ArgumentParser
    """
    parser = argparse.ArgumentParser(
        prog="rieszflow",
        description="Particle and mean-field simulation engine for learned attention kernels.",
        allow_abbrev=False,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for _name, module in SUBCOMMANDS:
        importlib.import_module(module).register(sub)
    return parser


def main(argv=None) -> int:
    """Entry point of the ``rieszflow`` console script.

    ``rieszflow`` with no subcommand runs the main job (``rieszflow run``).

    Parameters
    ----------
    argv : list of str, optional
        Arguments without the program name; defaults to ``sys.argv[1:]``.

    Returns
    -------
    int
        Process exit code (0 on success).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if not argv or argv[0].startswith("-") and argv[0] not in ("-h", "--help"):
        argv = ["run", *argv]
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
