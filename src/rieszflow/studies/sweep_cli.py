"""The command-line side of the studies that run sweeps (``synthetic``, ``nlp``, ``kgd``,
``infinite-width``, ``luna``).

One home for what those subcommands share besides the ``--workers`` / ``--scheduler`` options
(:func:`rieszflow.studies.sweep.add_sweep_arguments`): the output directory rules (a directory, its ``config.json``, ``--overwrite`` clearing every sweep
under the run lock, a rerun with another configuration refused) and the loop that runs each
sweep and merges it. The sweeps themselves are :mod:`rieszflow.studies.sweep`.
"""
from __future__ import annotations

import dataclasses
import json
import shutil
import sys
from pathlib import Path
from typing import Callable

from rieszflow.studies.sweep import describe_executor

__all__ = ["prepare_sweep_dir", "run_sweeps", "start_sweep_study", "format_merged"]


def _foreign_dir(out: Path, cfg_cls, all_specs) -> str | None:
    """Why the existing directory ``out`` is not a sweep directory of ``cfg_cls``'s study, or None."""
    cfg_file = out / "config.json"
    entries = sorted(p.name for p in out.iterdir())
    if not entries:
        return None
    if cfg_file.is_file():
        try:
            data = json.loads(cfg_file.read_text())
        except ValueError:
            return "holds a config.json that is not JSON"
        if not isinstance(data, dict):
            return "holds a config.json that is not a configuration object"
        known = {f.name for f in dataclasses.fields(cfg_cls)}
        foreign = sorted(set(data) - known)
        if foreign:
            own = {sp.name for sp in all_specs}
            subdirs = [e for e in entries if (out / e).is_dir() and e not in own]
            return (f"holds the sweep of another study (its config.json has keys that {cfg_cls.__name__} "
                    f"does not: {', '.join(foreign[:6])}{' ...' if len(foreign) > 6 else ''}"
                    f"{'; sub-directories ' + ', '.join(subdirs[:6]) if subdirs else ''})")
        return None
    shown = ", ".join(entries[:6]) + (" ..." if len(entries) > 6 else "")
    return f"is a non-empty directory that holds no sweep (no config.json; it holds {shown})"


def prepare_sweep_dir(prog: str, out: Path, cfg, cfg_cls, all_specs, task_config: Callable, *,
                      overwrite: bool, default: bool, log: Callable | None = None) -> int | None:
    """Check and prepare a study's output directory; write its ``config.json``.

    Without ``overwrite`` an existing directory must be empty or hold this study's sweep: a
    non-empty directory without ``config.json``, or one whose ``config.json`` has keys ``cfg_cls``
    does not know (another study's sweep), is refused with one line naming what is there.

    Parameters
    ----------
    prog : str
        Program name for messages (``"rieszflow nlp"``).
    out : pathlib.Path
        The study directory (one sub-directory per sweep).
    cfg : StudyConfig
        The resolved configuration.
    cfg_cls : type
        Its class (reads a stored ``config.json``).
    all_specs : list of SweepSpec
        Every sweep the configuration defines (all are cleared by ``overwrite``).
    task_config : callable
        ``task_config(cfg) -> dict``: the configuration without its grids. Two
        configurations that differ only in their grids share the directory (complete tasks
        are reused); any other difference is refused.
    overwrite : bool
        Remove every sweep's tasks, merged file, failures and description first (each under its
        run lock, so a sweep running there is not touched).
    default : bool
        ``out`` is the documented default under ``runs/`` (created when missing).
    log : callable, optional
        Receives one line with the whole configuration (also written to ``config.json``).

    Returns
    -------
    int or None
        None when the directory is ready; 2 after printing an error.
    """
    from rieszflow.engine.storage import RunLock

    if default:
        Path("runs").mkdir(exist_ok=True)
    if out.exists() and not out.is_dir():
        print(f"{prog}: error: --out {str(out)!r} is a file; a sweep writes a directory", file=sys.stderr)
        return 2
    if not out.parent.is_dir():
        print(f"{prog}: error: the directory {out.parent} of --out does not exist", file=sys.stderr)
        return 2
    if out.is_dir() and not overwrite:
        refusal = _foreign_dir(out, cfg_cls, all_specs)
        if refusal is not None:
            print(f"{prog}: error: --out {str(out)!r} {refusal}; choose another --out, or pass --overwrite "
                  f"to write this study's sweeps there", file=sys.stderr)
            return 2
    if overwrite:
        for sp in all_specs:
            if (out / sp.name).exists():
                lock = RunLock(out / sp.name / sp.name)     # refused while another sweep writes there
                lock.acquire()
                try:
                    shutil.rmtree(out / sp.name / "tasks", ignore_errors=True)
                    for stale in (out / sp.name / f"{sp.name}.h5", out / sp.name / "failures.json",
                                  out / sp.name / "sweep.json"):
                        stale.unlink(missing_ok=True)
                finally:
                    lock.release()
    out.mkdir(exist_ok=True)
    cfg_file = out / "config.json"
    if cfg_file.is_file() and not overwrite:
        before = cfg_cls.from_dict(json.loads(cfg_file.read_text()))
        old, new = task_config(before), task_config(cfg)
        if old != new:
            diff = "; ".join(f"{k}: stored {old.get(k)!r}, given {new.get(k)!r}" for k in new
                             if old.get(k) != new.get(k))
            print(f"{prog}: error: {out} holds a sweep of another configuration ({diff}); rerun with "
                  f"the same options (grids may change), use --resume, or --overwrite to replace it",
                  file=sys.stderr)
            return 2
    cfg_file.write_text(json.dumps(cfg.to_dict(), indent=1, sort_keys=True))
    if log is not None:
        log(f"{prog}: configuration ({cfg_file}): {json.dumps(cfg.to_dict(), sort_keys=True)}")
    return None


def start_sweep_study(prog: str, stem: str, cfg_cls, quick_overrides: dict, args, all_specs: Callable,
                      task_config: Callable, *, given: Callable[[], dict], presets: dict | None = None):
    """Resolve a sweep study's configuration and output directory from its parsed options.

    One rule for every sweep subcommand: the preset (``--quick`` applies ``quick_overrides``),
    the default output ``runs/<stem>[-quick]-seed<seed>``, ``--resume`` only of a directory that
    holds a sweep, the configuration by :func:`~rieszflow.config.resolve_config`, then
    :func:`prepare_sweep_dir`.

    Parameters
    ----------
    prog : str
        Program name for messages (``"rieszflow nlp"``).
    stem : str
        Default output directory stem (``"nlp"``).
    cfg_cls : type
        The study's configuration dataclass.
    quick_overrides : dict
        Field values of the ``--quick`` preset.
    args : argparse.Namespace
        Uses ``quick``, ``out``, ``seed``, ``resume``, ``config``, ``set``, ``overwrite``, ``quiet``,
        ``workers``, ``scheduler`` and ``dashboard`` (checked first:
        :func:`~rieszflow.studies.sweep.check_dashboard`).
    all_specs : callable
        ``specs(cfg) -> list of SweepSpec``.
    task_config : callable
        As for :func:`prepare_sweep_dir`.
    given : callable
        Returns the options given on the command line as configuration fields
        (:func:`rieszflow.studies.base.given_options`); called inside the error handling, so it
        may validate them and raise ``ValueError`` or ``FileNotFoundError``.
    presets : dict, optional
        Named presets (name -> field values) of the study's ``--preset`` option (``args.preset``):
        applied to the defaults before ``--quick``; the default output is then
        ``runs/<stem>-<preset>[-quick]-seed<seed>``.

    Returns
    -------
    status : int or None
        An exit status to return at once (2 on bad input, or what :func:`prepare_sweep_dir`
        returned), else ``None``.
    cfg : dataclass or None
        The resolved configuration.
    out : pathlib.Path
        The output directory.
    """
    from rieszflow.config import resolve_config
    from rieszflow.studies.sweep import check_dashboard

    named = getattr(args, "preset", None) if presets else None
    preset = cfg_cls().replace(**presets[named]) if named else cfg_cls()
    preset = preset.replace(**quick_overrides) if args.quick else preset
    flag = " ".join(f for f in (f"--preset {named}" if named else "", "--quick" if args.quick else "") if f)
    default = args.out is None
    out = (Path("runs") / f"{stem}{'-' + named if named else ''}{'-quick' if args.quick else ''}-seed{args.seed or 0}"
           if default else Path(args.out))
    try:
        check_dashboard(getattr(args, "dashboard", None), args.workers, args.scheduler)
        if args.resume and not (out / "config.json").is_file():
            raise ValueError(f"--resume: {out} holds no sweep (no config.json); there is nothing to "
                             f"resume (rerunning the command without --resume starts it)")
        cfg = resolve_config(cfg_cls, preset, config_file=args.config, given=given(), overrides=args.set,
                             resume_from=out / "config.json" if args.resume else None,
                             preset_flag=flag or None)
    except (ValueError, FileNotFoundError) as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2, None, out
    status = prepare_sweep_dir(prog, out, cfg, cfg_cls, all_specs(cfg), task_config,
                               overwrite=args.overwrite, default=default,
                               log=None if args.quiet else print)
    return status, cfg, out


def run_sweeps(prog: str, out: Path, chosen, args, log: Callable, before: Callable | None = None) -> tuple:
    """Run each sweep (only its missing tasks) on one executor and merge it.

    Every sweep path is made absolute before its tasks are submitted (a worker of an external
    scheduler may run in another directory), and the workers must be able to write it
    (:func:`~rieszflow.studies.sweep.run_sweep`). Each sweep's summary is printed once: to stderr
    with its failures when a task failed, else as a log line; then one line with the counts over
    every sweep (done, skipped, failed) is printed, with ``--quiet`` too.

    Parameters
    ----------
    prog : str
        Program name for the log lines.
    out : pathlib.Path
        The study directory; sweep ``s`` goes to ``out / s.name``.
    chosen : list of SweepSpec
        The sweeps to run, in order.
    args : argparse.Namespace
        With ``workers``, ``scheduler``, ``quiet`` and (optional) ``dashboard``.
    log : callable
        Receives the one-line messages.
    before : callable, optional
        ``before(spec, sweep_dir, log=log)``, called before each sweep runs (e.g. the synthetic
        study's ``retry_unavailable``).

    Returns
    -------
    merged : dict
        Sweep name to its merged dataset (:func:`rieszflow.studies.sweep.open_sweep`), for the
        sweeps with at least one complete task.
    failed : int
        Number of failed tasks over all sweeps (each listed once, on stderr).
    """
    from rieszflow.studies.sweep import Executor, open_sweep, run_sweep

    def shout(line: str) -> None:                              # printed with --quiet too
        print(line, flush=True)

    dashboard = getattr(args, "dashboard", None)
    counts = dict.fromkeys(("total", "done", "skipped", "failed"), 0)
    merged = {}
    with Executor(args.workers, args.scheduler, dashboard=dashboard,
                  log=shout if dashboard is not None else log) as ex:
        for sp in chosen:
            log(f"{prog}: sweep {sp.name}: {len(sp.tasks())} tasks on "
                f"{describe_executor(args.workers, args.scheduler)} -> {out / sp.name}")
            if before is not None:
                before(sp, out / sp.name, log=log)
            summary = run_sweep(sp, out / sp.name, executor=ex, progress=not args.quiet, log=log,
                                report=False)
            for k in counts:
                counts[k] += getattr(summary, k)
            if summary.failed:
                print(summary.format(), file=sys.stderr, flush=True)
            else:
                log(summary.format())
            if summary.done + summary.skipped:
                merged[sp.name] = open_sweep((out / sp.name).absolute(),
                                             allow_mixed_code=getattr(args, "allow_mixed_code", False))
    shout(f"{prog}: {len(chosen)} sweep{'s' if len(chosen) != 1 else ''}, {counts['total']} "
          f"task{'s' if counts['total'] != 1 else ''}: "
          f"{counts['done']} done, {counts['skipped']} skipped (complete before), {counts['failed']} failed"
          + (" (listed above; rerunning the command runs them again)" if counts["failed"] else ""))
    return merged, counts["failed"]


def format_merged(out: Path, merged: dict, seconds: float | None = None) -> str:
    """The last line of a sweep study: the merged files, or that nothing was merged.

    Parameters
    ----------
    out : pathlib.Path
        The study directory.
    merged : dict
        What :func:`run_sweeps` returned (sweep name to merged dataset).
    seconds : float, optional
        Wall time to state.

    Returns
    -------
    str
        ``merged: A.h5, B.h5 (rieszflow.studies.sweep.open_sweep(dir)); wall time ...``, or
        ``nothing merged: ...`` when no sweep has a complete task.
    """
    wall = f"; wall time {seconds:.1f} s" if seconds is not None else ""
    if not merged:
        return f"nothing merged: no task of these sweeps is complete (the failures are listed above){wall}"
    return ("merged: " + ", ".join(str(out / n / f"{n}.h5") for n in merged)
            + f" (rieszflow.studies.sweep.open_sweep(dir)){wall}")
