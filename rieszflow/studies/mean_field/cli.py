"""``rieszflow mean-field``: particles against the McKean-Vlasov PDE (see :mod:`studies.mean_field.study`)."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from rieszflow.studies.base import add_output_arguments
from rieszflow.studies.cli import non_negative_int

__all__ = ["register", "run_from_args"]


def register(subparsers) -> argparse.ArgumentParser:
    """Add the ``mean-field`` subcommand to ``subparsers`` (see :mod:`studies.cli`).

    Parameters
    ----------
    subparsers : argparse._SubParsersAction

    Returns
    -------
    argparse.ArgumentParser
    """
    p = subparsers.add_parser(
        "mean-field", allow_abbrev=False,
        help="particles (eq. E.2) against the McKean-Vlasov PDE (eq. 4.4-4.5): W1 vs N, eta, grid",
        description="Runs N = 1e2..1e4 particles (1e5 in 1-D with the full preset; more with "
                    "--backend cupy) and the FiPy PDE from the same rho_0 on an interval and a "
                    "rectangle, measures W1(mu_N(t), rho_t), fits the decay exponent in N, and "
                    "refines eta and the grid. Writes one HDF5 file, a table and PNG plots beside it.")
    p.add_argument("--quick", action="store_true", help="the quick preset (3-7 minutes on 2 cores, docs/studies_mean_field.md)")
    p.add_argument("--config", type=Path, default=None,
                   help="JSON file with a full MeanFieldConfig (strict; overrides the presets)")
    p.add_argument("--problem", action="append", choices=("interval", "rectangle"), default=None,
                   help="run only this problem (repeatable; default: all)")
    p.add_argument("--backend", choices=("numpy", "cupy"), default=None,
                   help="particle backend (default: the --config file's, else numpy)")
    p.add_argument("--seed", type=non_negative_int, default=None,
                   help="root seed (default: the --config file's, else 0)")
    add_output_arguments(p, "runs/mean_field[-quick]-seed<seed>.h5",
                         resume_help="continue an interrupted study in --out (finished runs are kept)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a top-level config field (repeatable; nested entries via --config)")
    p.set_defaults(func=run_from_args)
    return p


def run_from_args(args: argparse.Namespace) -> int:
    """Run the study from parsed arguments, print the tables, save the plots.

    Parameters
    ----------
    args : argparse.Namespace
        From the parser of :func:`register`.

    Returns
    -------
    int
        0 on success; 2 on a bad configuration, ``--problem`` selection or output path
        (message on stderr); 1 if a PDE reference solve did not converge.
    """
    from rieszflow.studies.mean_field.analysis import format_tables, load_study, make_plots, summary_tables
    from rieszflow.studies.mean_field.config import full_config, load_config, quick_config
    from rieszflow.studies.mean_field.study import run_mean_field_study

    given = {k: v for k, v in (("seed", args.seed), ("backend", args.backend)) if v is not None}
    try:
        if args.config is not None:
            cfg = load_config(args.config).replace(**given)  # only the options given override the file
        elif args.resume and args.out is not None and Path(args.out).is_file():
            cfg = load_config(args.out).replace(**given)     # --resume: the file's configuration
        else:
            cfg = (quick_config if args.quick else full_config)().replace(**given)
        if args.problem:
            kept = tuple(q for q in cfg.problems if q.name in args.problem)
            if not kept:
                raise ValueError(f"--problem {' '.join(args.problem)} selects none of the configured problems "
                                 f"{[q.name for q in cfg.problems]}")
            cfg = cfg.replace(problems=kept)
        if args.set:
            from rieszflow.studies.cli import parse_overrides

            cfg = cfg.replace(**parse_overrides(args.set, type(cfg), defaults=cfg))
    except (OSError, ValueError) as e:
        print(f"rieszflow mean-field: error: {e}", file=sys.stderr)
        return 2
    out = args.out or Path("runs") / f"mean_field{'-quick' if args.quick else ''}-seed{cfg.seed}.h5"
    log = (lambda *a: None) if args.quiet else print
    t0 = time.perf_counter()
    try:
        run_mean_field_study(cfg, out, overwrite=args.overwrite, resume=args.resume,
                             progress=not args.quiet, log=log)
    except (FileExistsError, FileNotFoundError, ValueError) as e:
        print(f"rieszflow mean-field: error: {e}", file=sys.stderr)
        return 2
    except RuntimeError as e:
        print(f"rieszflow mean-field: error: {e}", file=sys.stderr)
        return 1
    ds = load_study(out)
    print(format_tables(summary_tables(ds)))
    if not args.no_plots:
        for path in make_plots(ds, Path(out).parent, stem=Path(out).stem):
            log(f"plot: {path}")
    print(f"wrote {out} in {time.perf_counter() - t0:.1f} s")
    return 0
