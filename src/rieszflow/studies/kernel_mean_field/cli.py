"""``rieszflow kernel-mean-field``: learned random-feature kernels against their mean-field limit."""
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

register_reporter("kernel_mean_field_study", "rieszflow.studies.kernel_mean_field.cli:report_tables")


def report_tables(ds) -> str:
    """The tables of one kernel-mean-field study file, as ``rieszflow report`` shows them.

    Parameters
    ----------
    ds : xarray.Dataset
        An opened kernel-mean-field study file.

    Returns
    -------
    str
        The summary tables of every problem.
    """
    from rieszflow.studies.kernel_mean_field.analysis import format_tables, summary_tables

    return format_tables(summary_tables(ds))


def register(subparsers) -> argparse.ArgumentParser:
    """Add ``rieszflow kernel-mean-field`` with the shared study and executor options.

    Parameters
    ----------
    subparsers : argparse._SubParsersAction

    Returns
    -------
    argparse.ArgumentParser
        Its ``func`` is :func:`run_from_args`.
    """
    p = subparsers.add_parser(
        "kernel-mean-field", allow_abbrev=False,
        help="RFF frequencies as particles in V_D (eq. 4.1) against the McKean-Vlasov PDE and its Gibbs "
             "state: W1 vs N, free energy, SVM accuracy of learned vs mean-field kernels",
        description="Binary problems with inputs in R^1 and R^2 (two synthetic, one from "
                    "load_breast_cancer): N = 1e2..1e4 frequency particles (1e5 with --backend cupy) "
                    "follow Alg. 1 in the phase-averaged alignment potential V_D with mean-field "
                    "repulsion lam/N on an interval or a disk; the FiPy PDE runs from the same rho_0. "
                    "Measures W1(mu_N(t), rho_t) and its rate in N, the free energy along both, the "
                    "long-time particles against the Gibbs fixed point, and the test accuracy of the "
                    "N-feature kernel against the mean-field kernel and the RBF-SVM. Writes one HDF5 "
                    "file, prints the tables, saves PNG plots beside it (docs/learned_vs_theory.md).")
    add_study_arguments(p, default_out="runs/kernel_mean_field[-quick]-seed<seed>.h5", backends=("numpy", "cupy"),
                        quick_help="the quick preset (measured 1015 s wall with --workers 2 on 2 cores "
                                   "shared with other users' jobs)",
                        resume_help="continue an interrupted study in --out (finished runs are kept; a "
                                    "complete file is only reported); its stored configuration is the default")
    add_sweep_arguments(p, default_help="default: the machine's cores; with --backend cupy 0, one process on "
                                        "the GPU",
                        scheduler_note="its workers need the same rieszflow installation; the results come "
                                       "back and this process writes --out")
    p.set_defaults(func=run_from_args)
    return p


def run_from_args(args: argparse.Namespace) -> int:
    """Run the study, print the tables, save the plots.

    Parameters
    ----------
    args : argparse.Namespace

    Returns
    -------
    int
        0 on success; 2 on a bad configuration or output path; 1 if a solve did not converge or
        particle tasks failed.
    """
    from rieszflow.engine.storage import check_run_file, read_hdf5
    from rieszflow.studies.kernel_mean_field.analysis import format_tables, load_study, make_plots, summary_tables
    from rieszflow.studies.kernel_mean_field.config import KernelMeanFieldConfig, full_config, quick_config
    from rieszflow.studies.kernel_mean_field.study import KIND, run_kernel_mean_field_study

    name = "rieszflow kernel-mean-field"
    try:
        cfg = resolve_config(KernelMeanFieldConfig, (quick_config if args.quick else full_config)(),
                             config_file=args.config, given=given_options(seed=args.seed, backend=args.backend),
                             overrides=args.set, resume_from=args.out if args.resume else None,
                             preset_flag="--quick" if args.quick else None)
    except (OSError, ValueError) as e:
        print(f"{name}: error: {e}", file=sys.stderr)
        return 2
    out = Path(args.out or Path("runs") / f"kernel_mean_field{'-quick' if args.quick else ''}-seed{cfg.seed}.h5")
    log = (lambda *a: None) if args.quiet else print
    workers = args.workers
    if workers is None and args.scheduler is None and cfg.backend == "cupy":
        workers = 0
    t0 = time.perf_counter()
    complete = False
    if args.resume and not out.is_file():
        print(f"{name}: error: resume: {out} does not exist", file=sys.stderr)
        return 2
    if args.resume:
        check_run_file(out, KIND)
        with read_hdf5(out) as f:
            status = f.attrs.get("status")
        complete = (status.decode() if isinstance(status, bytes) else status) == "complete"
    if not complete:
        try:
            run_kernel_mean_field_study(cfg, out, overwrite=args.overwrite, resume=args.resume,
                                        progress=not args.quiet, log=log, workers=workers,
                                        scheduler=args.scheduler,   # the counts, printed with --quiet too
                                        on_summary=lambda s: print(f"{name}: {s.counts('particle tasks')}",
                                                                   flush=True))
        except (FileExistsError, FileNotFoundError, ValueError) as e:
            print(f"{name}: error: {e}", file=sys.stderr)
            return 2
        except RuntimeError as e:
            print(f"{name}: error: {e}", file=sys.stderr)
            return 1
    ds = load_study(out)
    if not args.quiet:
        print(format_tables(summary_tables(ds)))
    if not args.no_plots:
        for path in make_plots(ds, out.parent, stem=out.stem):
            log(f"plot: {path}")
    log(f"{'stored' if complete else 'wrote'} {out} in {time.perf_counter() - t0:.1f} s")
    return 0
