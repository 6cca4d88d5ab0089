"""``rieszflow run``: the main job (paper 000, App. F.2) from the command line."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


from rieszflow.studies.reporting import register_reporter

__all__ = ["register", "run_from_args"]

register_reporter("main_job", "rieszflow.learning.runfiles:main_job_summary")


def register(subparsers) -> argparse.ArgumentParser:
    """Add the ``run`` subcommand to ``subparsers`` (see :mod:`~rieszflow.studies.cli`).

    Parameters
    ----------
    subparsers : argparse._SubParsersAction
        The subcommands of the ``rieszflow`` parser.

    Returns
    -------
    argparse.ArgumentParser
        With ``func=run_from_args`` set as default.
    """
    from rieszflow.studies.base import add_study_arguments
    from rieszflow.studies.base import non_negative_int, positive_int
    from rieszflow.learning.config import _FEATURE_MAPS, OPTIMIZERS
    from rieszflow.learning.objectives import ALIGNMENTS

    p = subparsers.add_parser(
        "run", allow_abbrev=False,
        help="the main job: Riesz particles learn a linear-attention kernel (Phase A), then the "
             "Transformer trains with the particles frozen (Phase B)",
        description="Phase A learns the feature particles Omega of every attention head by "
                    "projected Langevin dynamics on alignment + lam * Riesz repulsion; Phase B "
                    "freezes them and trains the rest with cross-entropy. Writes one HDF5 file "
                    "(xarray.open_dataset(path, engine='h5netcdf')) and prints the test metrics.")
    p.add_argument("--dataset", choices=("rt", "sst2", "qqp"), default=None,
                   help="rt = Rotten Tomatoes (default), sst2 = GLUE SST-2 (both bundled), qqp = GLUE "
                        "QQP (not bundled: needs --qqp-dir)")
    p.add_argument("--qqp-dir", default=None, metavar="DIR",
                   help="folder of the GLUE QQP task (train.tsv, dev.tsv); implies --dataset qqp")
    p.add_argument("--feature-map", choices=_FEATURE_MAPS, default=None,
                   help="positive random-feature map of paper 000 App. D (default: softplus)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--vanilla", action="store_true",
                      help="Phase B only (particles stay at their initial law): the matched baseline")
    mode.add_argument("--softmax", action="store_true",
                      help="exact softmax attention baseline with learned W_Q, W_K (Phase B only)")
    mode.add_argument("--performer", action="store_true",
                      help="Performer baseline (Phase B only): FAVOR+ with learned W_Q, W_K, "
                           "orthogonal N(0, I) features, data normaliser d_k^(-1/4), fixed features "
                           "(--set redraw_every=N redraws them every N steps)")
    mode.add_argument("--linformer", action="store_true",
                      help="Linformer baseline (Phase B only): softmax attention over keys and "
                           "values projected to length k (--set linformer_k=K, default 32)")
    p.add_argument("--qk", choices=("shared", "learned"), default=None,
                   help="Q = K = reshape(x) (default for linear attention, the paper's feature-map "
                        "variants) or learned W_Q, W_K (default for --softmax)")
    p.add_argument("--alignment", choices=tuple(ALIGNMENTS), default=None,
                   help="Phase A objective: eq. (C.4) one-hot label kernel (default) or centred KTA")
    p.add_argument("--epochs", type=positive_int, default=None,
                   help="Phase B epochs, >= 1 (default 10, the paper's); with --resume, a larger "
                        "value extends a finished or interrupted run")
    p.add_argument("--optimizer", choices=tuple(OPTIMIZERS), default=None,
                   help="Phase B optimiser: adam = App. F.2 (Adam, constant rate 2e-4; default), "
                        "adamw = Section 5 (AdamW, weight decay 0.01, linear warm-up over 10%% of "
                        "the steps, cosine decay)")
    p.add_argument("--phase-a-after", type=non_negative_int, default=None, metavar="K",
                   help="run Phase A after K Phase B epochs instead of first (default 0, the "
                        "paper's order); the matched control is --vanilla with the same seed")
    p.add_argument("--phase-a-epochs", type=positive_int, default=None,
                   help="Phase A epochs, >= 1 (default 2; the paper allows up to 10)")
    add_study_arguments(
        p, default_out="runs/<dataset>-<run>-seed<seed>-<timestamp>.h5", backends=("numpy", "cupy"),
        plots_help="accepted for the one CLI contract: the main job draws no figures (its "
                   "trajectories are in the HDF5 file)",
        seed_help="seed of every random draw: data order, initial particles, weights, dropout "
                  "(default 0; with --resume, the file's)",
        set_help="override any config field (see rieszflow/learning/config.py), repeatable")
    p.add_argument("--smoke", action="store_true",
                   help="a seconds-long run through every code path (tiny model, 256 examples)")
    p.set_defaults(func=run_from_args)
    return p



def _complete_metrics(path: Path):
    """The stored final metrics of a complete main-job file, or None if the run is not complete."""
    from rieszflow.engine.storage import RunFileError, open_run
    from rieszflow.learning.runfiles import stored_metrics

    ds = open_run(path, kind="main_job")
    if ds.attrs.get("status") != "complete":
        return None
    if "test_metrics" not in ds.variables:
        raise RunFileError(f"{path}: a complete main-job file without 'test_metrics'")
    return stored_metrics(ds)


def _is_main_job_file(path: Path) -> bool:
    """True if ``path`` is a readable rieszflow main-job file."""
    from rieszflow.engine.storage import RunFileError, check_run_file

    if not path.is_file():
        return False
    try:
        check_run_file(path, "main_job")
    except RunFileError:
        return False
    return True


def _stored_config(path: Path) -> dict:
    """The configuration a run file stores (root attribute ``config``), as a dict."""
    import json

    from rieszflow.engine.storage import check_run_file, read_hdf5

    check_run_file(path)
    with read_hdf5(path) as f:
        raw = f.attrs.get("config", "{}")
    try:
        stored = json.loads(raw)
    except (TypeError, ValueError):
        raise ValueError(f"--resume: {path}: its root attribute 'config' is not JSON; start the "
                         f"run again with --overwrite") from None
    return stored if isinstance(stored, dict) else {}


def _extends(path: Path, cfg) -> bool:
    """True if ``cfg`` changes a growth field (``epochs``, ``phase_a_epochs``) of the stored run."""
    from rieszflow.learning.train import GROWTH_FIELDS

    stored = _stored_config(path)
    return any(k in stored and stored[k] != getattr(cfg, k) for k in GROWTH_FIELDS)


def _check_out_dir(out: Path) -> None:
    """Refuse, before any work, an output directory that is missing or not writable."""
    import os

    parent = out.parent
    if not parent.is_dir():
        raise ValueError(f"--out {out}: the directory {parent} does not exist; create it first")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"--out {out}: the directory {parent} is not writable (the run file, its "
                         f"lock and its checkpoint go there); choose another --out or fix its "
                         f"permissions")


def run_from_args(args) -> int:
    """Resolve the configuration from ``args``, run the main job, print the table.

    Parameters
    ----------
    args : argparse.Namespace
        Parsed arguments of the ``run`` subcommand.

    Returns
    -------
    int
        0 on success (also when ``--resume`` finds the file complete: its stored table is
        printed); 2 on a usage or input error (message on stderr).
    """
    from rieszflow.config import resolve_config
    from rieszflow.learning.runfiles import format_metrics
    from rieszflow.learning.config import (OPTIMIZERS, PERFORMER, SMOKE_OVERRIDES, MainJobConfig, performer_scales)

    try:
        no_phase_a = next((f"--{k}" for k in ("vanilla", "softmax", "performer", "linformer")
                           if getattr(args, k)), None)
        if no_phase_a and (args.phase_a_epochs is not None or args.alignment is not None
                           or args.phase_a_after is not None):
            raise ValueError(f"{no_phase_a} has no Phase A: --phase-a-epochs, --phase-a-after and "
                             f"--alignment do not apply")
        for flag in ("softmax", "performer", "linformer"):
            if getattr(args, flag) and args.feature_map is not None:
                raise ValueError(f"--{flag} fixes its attention: --feature-map does not apply")
            if getattr(args, flag) and args.qk == "shared":
                raise ValueError(f"--{flag} is a learned-W_Q, W_K baseline: --qk shared does not apply")
        changes = {}
        for key in ("dataset", "seed", "backend", "feature_map", "qk", "alignment", "qqp_dir",
                    "phase_a_after"):
            if getattr(args, key) is not None:
                changes[key] = getattr(args, key)
        if args.qqp_dir is not None:
            if args.dataset not in (None, "qqp"):
                raise ValueError(f"--qqp-dir reads QQP, but --dataset is {args.dataset}")
            changes["dataset"] = "qqp"
        elif args.dataset == "qqp":
            raise ValueError("--dataset qqp needs --qqp-dir DIR (the GLUE QQP folder with train.tsv "
                             "and dev.tsv): QQP is not bundled")
        if args.vanilla:
            changes["kernel"] = False
        if args.softmax:
            changes.update(kernel=False, attention="softmax", feature_map=None, qk="learned")
        if args.linformer:
            changes.update(kernel=False, attention="linformer", feature_map=None, qk="learned")
        if args.performer:
            changes.update(PERFORMER)
        if args.optimizer is not None:
            changes.update(OPTIMIZERS[args.optimizer])
        if args.epochs is not None:
            changes["epochs"] = args.epochs
        if args.phase_a_epochs is not None:
            changes["phase_a_epochs"] = args.phase_a_epochs
        preset = MainJobConfig().replace(**SMOKE_OVERRIDES) if args.smoke else MainJobConfig()
        overrides, growth = list(args.set or []), {}
        if args.resume and args.out is not None and _is_main_job_file(Path(args.out)):
            # the growth fields may differ from the file's: they extend the run (MainJob checks
            # that a run started with the larger budget would be the same); any other file is
            # named by resolve_config
            from rieszflow.config import parse_overrides
            from rieszflow.learning.train import GROWTH_FIELDS

            growth = {k: changes[k] for k in GROWTH_FIELDS if k in changes}
            keep = [kv for kv in overrides if kv.split("=", 1)[0].strip() not in GROWTH_FIELDS]
            growth.update(parse_overrides([kv for kv in overrides if kv not in keep], MainJobConfig))
            overrides = keep
            stored = _stored_config(Path(args.out))
            # given as stored, so the resume rule (a given option must match the file) holds for
            # them, and a size flag's value of them is not compared
            changes.update({k: stored[k] for k in growth if k in stored})
        if args.performer and not args.resume:
            fixed = [kv.split("=", 1)[0].strip() for kv in (args.set or [])]
            clash = sorted(set(fixed) & {"tau", "omega_scale"})
            if clash:
                raise ValueError(f"--performer sets tau and omega_scale to sqrt(d_k); --set "
                                 f"{', '.join(clash)} contradicts it")

        def finish(c):
            # what the command derives from the resolved configuration: the growth of a resumed
            # run and Performer's scales; inside resolve_config, so --show-config shows them
            if growth:
                c = c.replace(**growth)
            if args.performer and not args.resume:
                c = c.replace(**performer_scales(c))
            return c

        cfg = resolve_config(MainJobConfig, preset, config_file=args.config, given=changes,
                             overrides=overrides, resume_from=args.out if args.resume else None,
                             preset_flag="--smoke" if args.smoke else None, finish=finish)
    except ValueError as e:
        print(f"rieszflow run: error: {e}", file=sys.stderr)
        return 2
    if args.out is None:
        if args.resume:
            print("rieszflow run: error: --resume needs --out PATH (the file to continue)",
                  file=sys.stderr)
            return 2
        # A fresh timestamped name, so the default never collides with an earlier run.
        stamp = time.strftime("%Y%m%dT%H%M%S")
        out = Path("runs") / f"{cfg.dataset}-{cfg.name}-seed{cfg.seed}{'-smoke' if args.smoke else ''}-{stamp}.h5"
    else:
        out = args.out
    if args.resume and Path(out).is_file():
        stored = _complete_metrics(Path(out))
        if stored is not None and not _extends(Path(out), cfg):   # nothing to resume or extend
            print(format_metrics(f"{cfg.name} ({cfg.dataset} test)", stored))
            print(f"{out} is complete: nothing to resume (the table above is the stored result)")
            return 0
    try:                         # before any work: the data load takes a while
        _check_out_dir(Path(out))
    except ValueError as e:
        print(f"rieszflow run: error: {e}", file=sys.stderr)
        return 2
    from rieszflow.learning.train import run_main_job

    print(f"rieszflow run: {cfg.name} on {cfg.dataset}, seed {cfg.seed}, backend {cfg.backend} -> {out}",
          flush=True)
    t0 = time.perf_counter()
    try:
        metrics = run_main_job(cfg, out, overwrite=args.overwrite, resume=args.resume,
                               quiet=args.quiet, keep_checkpoint=True)
    except (FileExistsError, FileNotFoundError, PermissionError, RuntimeError, ValueError) as e:
        print(f"rieszflow run: error: {e}", file=sys.stderr)
        return 2
    print(format_metrics(f"{cfg.name} ({cfg.dataset} test)", metrics))
    print(f"wall time {time.perf_counter() - t0:.1f} s; trajectories in {out}")
    print(f"  open with: xarray.open_dataset({str(out)!r}, engine='h5netcdf')")
    return 0
