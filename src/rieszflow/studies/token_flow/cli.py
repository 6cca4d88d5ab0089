"""``rieszflow token-flow``: the token-flow study from the command line."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from rieszflow.studies.base import add_study_arguments, given_options
from rieszflow.config import resolve_config
from rieszflow.studies.reporting import register_reporter

__all__ = ["register", "run_from_args"]

register_reporter("token_flow_study", "rieszflow.studies.reporting:stored_report")


def register(subparsers) -> argparse.ArgumentParser:
    """Add the ``token-flow`` subcommand to ``subparsers`` (see :mod:`~rieszflow.studies.cli`).

    Parameters
    ----------
    subparsers : argparse._SubParsersAction

    Returns
    -------
    argparse.ArgumentParser
        With ``func=run_from_args`` set as default.
    """
    p = subparsers.add_parser(
        "token-flow", allow_abbrev=False,
        help="attention as interacting particles: token clouds on the sphere cluster "
             "(energy, Wendel, phase boundary, kernels, mean field)",
        description="Runs the token-flow study (paper 004 section 3.1; GLPR): A. clustering of "
                    "uniform tokens on S^(d-1) for a grid of beta and d; B. Wendel's hemisphere "
                    "probability by Monte Carlo; C. the phase boundary against the gamma_beta ODE; "
                    "D. softmax against random-feature (and learned) kernels by W1 over time; "
                    "E. mean-field W1 between N and 4N tokens with a fitted rate. Writes one HDF5 "
                    "file (engine.storage.open_run) and PNG plots next to it, prints the tables.")
    add_study_arguments(p, default_out="runs/token_flow[-quick]-seed<seed>.h5", backends=("numpy", "cupy"),
                        quick_help="small sizes: a minute or two on 2 CPU cores",
                        resume_help="continue --out: a complete file is reported as stored; an "
                                    "incomplete one is recomputed from its stored configuration "
                                    "(the study writes once, at the end)",
                        set_help="override a config field (studies/token_flow/config.py); tuples as "
                                 "comma-separated values, e.g. --set dims=2,3 --set betas=1,4; repeatable")
    p.add_argument("--kernel-from", type=Path, default=None, metavar="PATH",
                   help="main-job HDF5 file whose learned particles (layer/head: --set "
                        "learned_layer=.. learned_head=..) drive one more flow")
    p.set_defaults(func=run_from_args)
    return p


def _wendel_cases(text):
    """``n,d;n,d;...`` -> ((n, d), ...)."""
    return tuple(tuple(int(v) for v in c.split(",")) for c in text.split(";") if c)


def run_from_args(args) -> int:
    """Resolve the configuration from ``args``, run the study, print the tables.

    Parameters
    ----------
    args : argparse.Namespace
        Parsed arguments of the ``token-flow`` subcommand.

    Returns
    -------
    int
        0 on success, 2 on a usage or input error (message on stderr).
    """
    from rieszflow.studies.token_flow.config import GPU_OVERRIDES, QUICK_OVERRIDES, TokenFlowConfig

    prog = "rieszflow token-flow"
    out = args.out
    try:
        given = given_options(seed=args.seed, backend=args.backend,
                              kernel_from=None if args.kernel_from is None else str(args.kernel_from))
        preset = TokenFlowConfig()                  # the sizes: preset < --config < options < --set
        if args.backend == "cupy":
            preset = preset.replace(**GPU_OVERRIDES)
        if args.quick:
            preset = preset.replace(**QUICK_OVERRIDES)
        cfg = resolve_config(TokenFlowConfig, preset, config_file=args.config, given=given,
                             overrides=args.set, special={"wendel_cases": _wendel_cases},
                             resume_from=out if args.resume else None,
                             preset_flag="--quick" if args.quick else None)
        if cfg.kernel_from is not None:
            if not Path(cfg.kernel_from).exists():
                raise ValueError(f"--kernel-from {cfg.kernel_from!r} does not exist; pass a "
                                 f"main-job HDF5 file written by 'rieszflow run'")
            from rieszflow.learning.runfiles import load_learned_kernel

            load_learned_kernel(cfg.kernel_from, cfg.learned_layer, cfg.learned_head)
    except ValueError as e:       # includes engine.storage.RunFileError (a foreign --kernel-from)
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    out = args.out or Path("runs") / f"token_flow{'-quick' if args.quick else ''}-seed{cfg.seed}.h5"
    from rieszflow.engine.storage import RunFileError
    from rieszflow.studies.token_flow.study import run_token_flow_study

    print(f"{prog}: {'quick' if args.quick else 'full'} study, seed {cfg.seed}, backend {cfg.backend} -> {out}",
          flush=True)
    t0 = time.perf_counter()
    try:
        res = run_token_flow_study(cfg, out, overwrite=args.overwrite, resume=args.resume,
                                   quiet=args.quiet, plots=not args.no_plots,
                                   log=lambda s: print(s, flush=True))
    except (FileExistsError, FileNotFoundError, RunFileError, RuntimeError) as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    print(res["report"])
    if res.get("resumed") == "complete":
        print(f"{out} is complete: nothing to resume (the tables above are the stored report)")
        return 0
    print(f"wall time {time.perf_counter() - t0:.1f} s; results in {out}")
    for path in res["plots"]:
        print(f"  plot: {path}")
    print(f"  open with: engine.storage.open_run({str(out)!r})")
    return 0
