"""``rieszflow mean-field``: particles against the McKean-Vlasov PDE (see :mod:`~rieszflow.studies.mean_field.study`)."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from rieszflow.studies.base import add_study_arguments, given_options
from rieszflow.config import resolve_config
from rieszflow.studies.sweep import add_sweep_arguments
from rieszflow.studies.reporting import register_reporter

__all__ = ["register", "run_from_args"]

register_reporter("mean_field_study", "rieszflow.studies.mean_field.cli:report_tables")
register_reporter("mean_field_bias", "rieszflow.studies.mean_field.cli:report_bias_tables")

#: ``--preset`` values: the mean-field bias study (:mod:`~rieszflow.studies.mean_field.bias`).
PRESETS = ("bias", "bias-large")


def report_bias_tables(ds) -> str:
    """The tables of one mean-field bias file (``--preset bias`` or ``bias-large``), as ``rieszflow report`` shows them.

    Parameters
    ----------
    ds : xarray.Dataset
        An opened bias study file (kind ``mean_field_bias``).

    Returns
    -------
    str
        Plain estimator (``--preset bias``): bias, SE, z, R_need and W1 per row; PDE floors;
        fitted exponents. Antithetic (``--preset bias-large``,
        :func:`~rieszflow.studies.mean_field.antithetic.format_antithetic_tables`): D_N, SE, z,
        N sd, b = -2 N D_N, the plain bias and W1 per row; fitted exponents.
    """
    from rieszflow.studies.mean_field.antithetic import format_antithetic_tables
    from rieszflow.studies.mean_field.bias_tables import format_bias_tables

    if ds.attrs.get("estimator", "plain") == "antithetic":
        return format_antithetic_tables(ds)
    return format_bias_tables(ds)


def report_tables(ds) -> str:
    """The tables of one mean-field study file, as ``rieszflow report`` shows them.

    Parameters
    ----------
    ds : xarray.Dataset
        An opened mean-field study file.

    Returns
    -------
    str
        The summary tables (W1 against N, eta and grid; fitted rates).
    """
    from rieszflow.studies.mean_field.analysis import format_tables, summary_tables

    return format_tables(summary_tables(ds))


def register(subparsers) -> argparse.ArgumentParser:
    """Add ``rieszflow mean-field``: the shared study options plus ``--problem``.

    Parameters
    ----------
    subparsers : argparse._SubParsersAction
        The subcommands of :func:`~rieszflow.studies.cli.build_parser`.

    Returns
    -------
    argparse.ArgumentParser
        The ``mean-field`` parser; ``func`` is :func:`run_from_args`.
    """
    p = subparsers.add_parser(
        "mean-field", allow_abbrev=False,
        help="particles (eq. E.2) against the McKean-Vlasov PDE (eq. 4.4-4.5): W1 vs N, eta, grid",
        description="Runs N = 1e2..1e4 particles (1e5 in 1-D with the full preset; more with "
                    "--backend cupy) and the FiPy PDE from the same rho_0 on an interval and a "
                    "rectangle, measures W1(mu_N(t), rho_t), fits the decay exponent in N, and "
                    "refines eta and the grid. The PDE solves and the particle runs are independent "
                    "tasks on a Dask LocalCluster or an existing scheduler (docs/sweeps.md; the same "
                    "numbers with any --workers). Writes one HDF5 file, a table and PNG plots beside it.")
    add_study_arguments(p, default_out="runs/mean_field[-quick]-seed<seed>.h5", backends=("numpy", "cupy"),
                        quick_help="the quick preset (about three minutes on 2 cores, "
                                   "docs/studies_mean_field.md)",
                        resume_help="continue an interrupted study in --out (finished cells are kept); "
                                    "its stored configuration is the default, and a file of --preset "
                                    "bias or bias-large resumes as that study without --preset")
    add_sweep_arguments(p, default_help="default: the machine's cores; with --backend cupy 0, one "
                                        "process on the GPU", scheduler_note="its workers need the same rieszflow installation; the results come back and this process writes --out")
    # the choices are config.PROBLEM_NAMES, written out: importing the config here costs the CLI's start-up
    p.add_argument("--problem", action="append", choices=("interval", "rectangle", "box"), default=None,
                   help="run only this problem (repeatable; default: all)")
    p.add_argument("--pde-backend", choices=("assembled", "fipy"), default="assembled",
                   help="who builds and solves the PDE's implicit sweeps: the directly assembled "
                        "Scharfetter-Gummel matrix (default) or FiPy's term algebra that defines it "
                        "(same densities to 1e-12; docs/results/bench_pde.md)")
    p.add_argument("--preset", choices=PRESETS, default=None,
                   help="run the mean-field bias study instead: |E f(mu_N(t)) - f(rho_t)| for the moments "
                        "and the interaction energy against N over R replicas, beside W1 "
                        "(docs/studies_mean_field.md). 'bias': N <= 400 with R = 10 N (about 10-20 "
                        "CPU-minutes); 'bias-large': the antithetic estimator (a 2N-particle system "
                        "against its two halves run as N-particle systems with the same noise) at "
                        "N = 1e3..1e6 with R = 32 triples; --set n_max, interaction_method, integrator, "
                        "eta (every problem's step) and softening (the 3-D problem's kernel) change it "
                        "(a full run is CPU-hours; docs/results/mean_field_bias_large.md). Not with --quick")
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
        (message on stderr); 1 if a PDE reference solve did not converge or particle tasks
        failed (named; the others are stored and ``--resume`` runs the failed ones again).
    """
    from rieszflow.studies.mean_field.analysis import format_tables, load_study, make_plots, summary_tables
    from rieszflow.studies.mean_field.config import MeanFieldConfig, full_config, quick_config
    from rieszflow.studies.mean_field.study import run_mean_field_study

    if args.preset is None and args.resume and args.out is not None:
        args.preset = _bias_preset_of(args.out)      # a bias study's file resumes as one
    if args.preset is not None:
        return _run_bias(args)

    def select(cfg):            # --problem, applied inside resolve_config so --show-config shows it
        return _select_problems(cfg, args.problem)

    try:
        cfg = resolve_config(MeanFieldConfig, (quick_config if args.quick else full_config)(),
                             config_file=args.config, given=given_options(seed=args.seed, backend=args.backend),
                             overrides=args.set, resume_from=args.out if args.resume else None,
                             preset_flag="--quick" if args.quick else None, finish=select)
    except (OSError, ValueError) as e:
        print(f"rieszflow mean-field: error: {e}", file=sys.stderr)
        return 2
    out = args.out or Path("runs") / f"mean_field{'-quick' if args.quick else ''}-seed{cfg.seed}.h5"
    log = (lambda *a: None) if args.quiet else print
    workers = args.workers
    if workers is None and args.scheduler is None and cfg.backend == "cupy":
        workers = 0                        # one process on the GPU, not one per core
    t0 = time.perf_counter()
    try:
        run_mean_field_study(cfg, out, overwrite=args.overwrite, resume=args.resume,
                             progress=not args.quiet, log=log, workers=workers, scheduler=args.scheduler,
                             pde_backend=args.pde_backend,       # the counts, printed with --quiet too
                             on_summary=lambda s: print(f"rieszflow mean-field: {s.counts('particle tasks')}",
                                                        flush=True))
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


def _select_problems(cfg, names):
    """``cfg`` (a MeanFieldConfig or BiasConfig) with only the problems ``names`` (``--problem``;
    all when empty); a ``softening`` override (BiasConfig) needs a 3-D problem among them."""
    if not names:
        return cfg
    kept = tuple(q for q in cfg.problems if q.name in names)
    if not kept:
        raise ValueError(f"--problem {' '.join(names)} selects none of the configured problems "
                         f"{[q.name for q in cfg.problems]}")
    soft = getattr(cfg, "softening", None)
    if soft and not any(q.d > 2 for q in kept):
        raise ValueError(f"softening={soft!r} applies to problems without a PDE reference (d = 3) only; "
                         f"--problem {' '.join(names)} selects none")
    return cfg.replace(problems=kept)


def _number(key: str):
    """Parser of ``--set KEY=VALUE`` for a float field whose default is None (``eta``, ``softening``)."""
    def parse(text: str) -> float:
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"--set {key}={text!r}: expected a number") from None
    return parse


def _bias_preset_of(path) -> str | None:
    """The ``--preset`` of the bias study that wrote ``path``, or None for any other file.

    ``--resume --out FILE`` needs no ``--preset`` when FILE is a bias-study file (kind
    ``mean_field_bias``): its stored configuration decides the sizes, the estimator decides the
    name (``antithetic``: ``bias-large``, ``plain``: ``bias``). Missing or unreadable files give
    None, and the mean-field path reports them as it always does.
    """
    import json

    from rieszflow.engine.storage import read_hdf5

    try:
        with read_hdf5(Path(path)) as f:
            kind, stored = f.attrs.get("kind"), f.attrs.get("config")
    except (OSError, ValueError, KeyError, RuntimeError):
        return None
    kind = kind.decode() if isinstance(kind, bytes) else kind
    if kind != "mean_field_bias":
        return None
    try:
        estimator = json.loads(stored).get("estimator", "plain")
    except (TypeError, ValueError, AttributeError):
        estimator = "plain"
    return "bias-large" if estimator == "antithetic" else "bias"


def _run_bias(args: argparse.Namespace) -> int:
    """``--preset bias|bias-large``: the bias study (:func:`~rieszflow.studies.mean_field.bias.run_bias_study`)."""
    from rieszflow.engine.storage import open_run
    from rieszflow.studies.mean_field.bias import BiasConfig, bias_config, bias_large_config, run_bias_study

    def fail(msg):
        print(f"rieszflow mean-field: error: {msg}", file=sys.stderr)
        return 2

    if args.quick:
        return fail(f"--quick and --preset {args.preset} are two presets; give one")
    if args.backend not in (None, "numpy"):
        return fail(f"--backend {args.backend}: the bias study runs on the CPU (numpy) only")

    def select(cfg):
        return _select_problems(cfg, args.problem)

    preset = bias_config() if args.preset == "bias" else bias_large_config()
    try:
        cfg = resolve_config(BiasConfig, preset, config_file=args.config, given=given_options(seed=args.seed),
                             overrides=args.set, special={k: _number(k) for k in ("eta", "softening")},
                             resume_from=args.out if args.resume else None,
                             # with --resume the file's stored configuration is the default; --preset
                             # only selects the bias study there (its sizes are the file's)
                             preset_flag=None if args.resume else f"--preset {args.preset}", finish=select)
    except (OSError, ValueError) as e:
        return fail(e)
    out = args.out or Path("runs") / f"mean_field-{args.preset}-seed{cfg.seed}.h5"
    log = (lambda *a: None) if args.quiet else print
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        run_bias_study(cfg, out, overwrite=args.overwrite, resume=args.resume, progress=not args.quiet,
                       log=log, workers=args.workers, scheduler=args.scheduler, pde_backend=args.pde_backend,
                       on_summary=lambda s: print(f"rieszflow mean-field: {s.counts('batch tasks')}", flush=True))
    except (FileExistsError, FileNotFoundError, ValueError) as e:
        return fail(e)
    except RuntimeError as e:
        print(f"rieszflow mean-field: error: {e}", file=sys.stderr)
        return 1
    print(report_bias_tables(open_run(out)))
    print(f"wrote {out} in {time.perf_counter() - t0:.1f} s wall ({time.process_time() - c0:.1f} s CPU "
          f"of this process)")
    return 0
