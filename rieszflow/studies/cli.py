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
    ("run", "rieszflow.studies.main_job.cli"),
    ("mean-field", "rieszflow.studies.mean_field.cli"),
    ("ldp", "rieszflow.studies.ldp.cli"),
    ("attention-theory", "rieszflow.studies.attention_theory.cli"),
    ("token-flow", "rieszflow.studies.token_flow.cli"),
)


def non_negative_int(text: str) -> int:
    """``argparse`` type for seeds, epochs and counts: an integer >= 0.

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


def parse_overrides(items, cfg_cls, special=None) -> dict:
    """Typed config overrides from ``--set KEY=VALUE`` strings.

    The type of each value follows the field's default in ``cfg_cls()``: bool
    (``true``/``false``/``1``/``0``), int, float, str, or a tuple given as
    comma-separated elements of the type of the default's first element.

    Parameters
    ----------
    items : list of str
        ``KEY=VALUE`` strings.
    cfg_cls : dataclass type
        The study's configuration class (instantiable without arguments).
    special : dict of str to callable, optional
        Parsers for fields that need their own syntax (``text -> value``).

    Returns
    -------
    dict
        Field name to parsed value; the dataclass validates the values.

    Raises
    ------
    ValueError
        On a malformed item, an unknown key (the message lists the allowed
        ones) or a value that does not parse as the field's type.
    """
    import dataclasses

    special = special or {}
    names = {f.name for f in dataclasses.fields(cfg_cls)}
    defaults = cfg_cls()
    out = {}
    for item in items:
        if "=" not in item:
            raise ValueError(f"--set {item!r}: expected KEY=VALUE")
        key, text = item.split("=", 1)
        if key not in names:
            raise ValueError(f"--set {key}: unknown config key; allowed: {', '.join(sorted(names))}")
        default = getattr(defaults, key)
        try:
            if key in special:
                out[key] = special[key](text)
            elif isinstance(default, bool):
                if text.lower() not in ("true", "false", "1", "0"):
                    raise ValueError(f"--set {key}={text!r}: expected true, false, 1 or 0")
                out[key] = text.lower() in ("true", "1")
            elif isinstance(default, tuple):
                elem = type(default[0]) if default else float
                out[key] = tuple(elem(v) for v in text.split(",") if v)
            elif isinstance(default, int):
                out[key] = int(text)
            elif isinstance(default, float):
                out[key] = float(text)
            else:
                out[key] = text
        except ValueError as e:
            if str(e).startswith("--set"):
                raise
            raise ValueError(f"--set {key}={text!r}: not a valid value for a field like "
                             f"{default!r}") from None
    return out


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
