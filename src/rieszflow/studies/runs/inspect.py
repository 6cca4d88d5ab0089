"""Reading rieszflow files as a whole: several runs in one dataset, a run's progress, paired tests.

References
----------
McNemar, Psychometrika 12 (1947) 153-157 (the exact test is the binomial test on the discordant
pairs); Dietterich, Neural Computation 10 (1998) 1895-1923 (McNemar for comparing classifiers).
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from rieszflow.engine import stats
from rieszflow.engine.storage import RunFileError, RunLock, check_run_file, open_run, read_hdf5
from rieszflow.engine.storage.lock import ALIVE, OTHER_HOST, UNKNOWN, holder_state

__all__ = ["STATES", "live_writer", "open_runs", "run_labels", "run_status", "format_status", "mcnemar", "compare_runs",
           "format_compare"]


def run_labels(paths) -> list[str]:
    """Short unique names of run files: each file's shortest distinguishing trailing path.

    A file is named by its basename when no other file shares it, else by as many trailing
    path components as tell it apart from every other file (``a/run.h5``, ``b/run.h5`` for
    ``x/a/run.h5`` and ``x/b/run.h5``; ``kernel.h5``, ``vanilla.h5`` for distinct basenames).
    The same file given twice keeps its full path, with ``" [2]"``, ``" [3]"``, ... after the
    repeats. The one naming rule of ``open_runs``, ``rieszflow compare`` and ``rieszflow
    report``.

    Parameters
    ----------
    paths : sequence of str or os.PathLike
        Run files (need not exist; relative paths are taken from the working directory).

    Returns
    -------
    list of str
        One label per path, in order, components joined by ``/``.
    """
    parts = [Path(p).absolute().parts for p in paths]
    labels = []
    for i, pi in enumerate(parts):
        others = [pj for j, pj in enumerate(parts) if j != i and pj != pi]
        k = 1
        while k < len(pi) and any(pj[-k:] == pi[-k:] for pj in others):
            k += 1
        same = [j for j, pj in enumerate(parts) if pj == pi]
        if len(same) > 1:                                  # the same file more than once
            label = Path(paths[i]).as_posix()
            rank = same.index(i)
            labels.append(label if rank == 0 else f"{label} [{rank + 1}]")
        else:
            labels.append("/".join(pi[-k:]) if k < len(pi) else Path(*pi).as_posix())
    return labels


def open_runs(paths, dim: str = "run"):
    """Several rieszflow files as one :class:`xarray.Dataset`, stacked along a new dimension.

    Parameters
    ----------
    paths : sequence of str or os.PathLike
        Files written by rieszflow (any kinds; variables missing from a file are NaN there).
    dim : str, default "run"
        Name of the new dimension; its coordinate is the file's label (:func:`run_labels`:
        the basename, or the shortest trailing path that tells files apart), and the per-run root
        attributes ``kind``, ``status``, ``seed``, ``git_commit`` and ``config`` become
        coordinates along it (provenance kept).

    Returns
    -------
    xarray.Dataset

    Raises
    ------
    ValueError
        If ``paths`` is empty.
    rieszflow.engine.storage.RunFileError
        If a file is not a readable rieszflow file.
    """
    import xarray as xr

    paths = [Path(p) for p in paths]
    if not paths:
        raise ValueError("open_runs needs at least one path")
    dss = [open_run(p) for p in paths]
    prov = {}
    for key in ("kind", "status", "seed", "git_commit", "config", "backend"):
        prov[key] = (dim, [str(ds.attrs.get(key, "")) for ds in dss])
    out = xr.concat([ds.drop_attrs() if hasattr(ds, "drop_attrs") else ds.assign_attrs({})
                     for ds in dss], dim=dim, join="outer", coords="different", compat="equals",
                    combine_attrs="drop")
    out = out.assign_coords({dim: run_labels(paths), **{f"{dim}_{k}": v for k, v in prov.items()}})
    out.attrs["paths"] = json.dumps([str(p) for p in paths])
    return out


#: The states ``rieszflow status`` reports (:func:`run_status`'s ``state``).
STATES = ("running", "stale (writer gone)", "interrupted", "failed", "complete")


def _attr(v):
    """A root attribute as a plain Python value (bytes decoded, 1-element arrays unwrapped)."""
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, np.ndarray) and v.size == 1:
        return v.reshape(()).item()
    if isinstance(v, np.generic):
        return v.item()
    return v


def _json(text) -> dict:
    try:
        val = json.loads(text) if isinstance(text, str) else {}
    except ValueError:
        return {}
    return val if isinstance(val, dict) else {}


def _damaged(path, name, e) -> RunFileError:
    return RunFileError(f"{path}: object {name!r} is damaged and cannot be read ({type(e).__name__}: "
                        f"{e}); the file is corrupt: run 'rieszflow status --verify {path}' to check "
                        f"every variable, and rerun the job with --overwrite")


def _read_layout(path: Path, n_last: int):
    """Root attributes, dimension lengths, growing dimensions and last records of a run file."""
    import h5py

    try:
        f = read_hdf5(path)
    except (OSError, ValueError) as e:
        raise RunFileError(f"{path} cannot be read ({e})") from e
    with f:
        try:
            attrs = {k: _attr(f.attrs[k]) for k in f.attrs}
        except (OSError, KeyError, RuntimeError, ValueError) as e:
            raise _damaged(path, "/ (root attributes)", e) from e
        objs = {}
        for name in f:                       # every object opened: a damaged one is an error
            try:
                obj = f[name]
                if isinstance(obj, h5py.Dataset):
                    objs[name] = (obj, obj.attrs.get("CLASS") == b"DIMENSION_SCALE",
                                  obj.attrs.get("DIMENSION_LIST"))
            except (OSError, KeyError, RuntimeError, ValueError) as e:
                raise _damaged(path, name, e) from e
        dims, last, growing = {}, {}, set()
        for name, (obj, scale, _) in objs.items():
            if scale:
                dims[name] = int(obj.shape[0]) if obj.shape else 0
                if obj.maxshape and obj.maxshape[0] is None:
                    growing.add(name)
        for name, (obj, scale, dl) in objs.items():
            if obj.ndim == 1 and obj.dtype.kind in "fiu" and not scale:
                try:
                    dim = f[dl[0][0]].name.lstrip("/") if dl is not None and len(dl) else None
                    if dim in growing and obj.shape[0] and n_last:
                        last[name] = (dim, np.asarray(obj[max(0, obj.shape[0] - n_last):]).tolist())
                except (OSError, KeyError, RuntimeError, ValueError) as e:
                    raise _damaged(path, name, e) from e
    return attrs, dims, growing, last


def live_writer(path) -> str | None:
    """The live writer of a file, as words (``"process 123 on host"``), or None if none runs.

    Parameters
    ----------
    path : str or os.PathLike
        A file written by rieszflow (its lock is ``<path>.lock``).

    Returns
    -------
    str or None
        None when there is no lock file or its process no longer runs on this host; a lock of
        another host counts as live (this host cannot tell).
    """
    owner = RunLock(path).owner()
    if holder_state(owner) not in (ALIVE, OTHER_HOST):
        return None
    return f"process {owner.get('pid')} on {owner.get('host')}"


def _state(status, lock_state) -> tuple[str, str]:
    """(state, note) from the file's ``status`` attribute and its writer's liveness."""
    if status != "running":
        return str(status), ""
    if lock_state == ALIVE:
        return "running", ""
    if lock_state == OTHER_HOST:
        return "running", ("written on another host: this host cannot tell whether its writer is "
                           "still alive")
    if lock_state == UNKNOWN:
        return "running", ("its lock file names no readable writer: this command cannot tell "
                           "whether the writer is alive")
    return "stale (writer gone)", ("the file says 'running' but no process writes it any more: "
                                   "its writer was killed, or its machine stopped")


def _main_job_progress(attrs, dims, cfg) -> tuple[dict, float | None, str]:
    """(progress fields, fraction done or None, why no fraction) of a main-job file, from its
    stored configuration, for files written before the job declared ``plan``/``progress``."""
    try:
        epochs = int(cfg["epochs"])
        a_epochs = int(cfg.get("phase_a_epochs", 0)) if cfg.get("kernel") and \
            cfg.get("attention", "linear") == "linear" else 0
    except (KeyError, TypeError, ValueError):
        return {}, None, "the stored configuration lacks epochs"
    n_train, batch = cfg.get("train_limit"), cfg.get("batch_size")
    per_epoch = -(-int(n_train) // int(batch)) if isinstance(n_train, int) and n_train > 0 and \
        isinstance(batch, int) and batch > 0 else None
    steps, batches, done_b = dims.get("step", 0), dims.get("batch", 0), dims.get("epoch", 0)
    a_finished = "phase_a_steps" in attrs or a_epochs == 0
    if a_finished:
        done_a = float(a_epochs)
    elif per_epoch:
        done_a = min(float(a_epochs), steps / per_epoch)
    else:
        done_a = None
    frac_b = batches / per_epoch if per_epoch else float(done_b)
    if not a_finished:
        prog = {"phase": "A", "epoch": f"{min(a_epochs, int(done_a or 0) + 1)}/{a_epochs}",
                "step": steps}
    else:
        prog = {"phase": "B", "epoch": f"{min(epochs, done_b + 1)}/{epochs}", "step": batches}
    if done_a is None:
        return prog, None, ("Phase A's steps per epoch are unknown (train_limit not set) and the "
                            "job declared no planned lengths")
    return prog, min(1.0, (done_a + min(float(epochs), frac_b)) / max(1, a_epochs + epochs)), ""


def _progress(attrs, dims, kind) -> dict:
    """Progress fields, fraction done, wall time and ETA of a file (see :func:`run_status`)."""
    out = {"fields": _json(attrs.get("progress")), "fraction": None, "eta_seconds": None,
           "no_eta": "", "planned": _json(attrs.get("planned_lengths"))}
    wall = attrs.get("wall_seconds")
    out["wall_seconds"] = float(wall) if isinstance(wall, (int, float)) else None
    planned = {d: n for d, n in out["planned"].items() if isinstance(n, int) and n >= 0}
    if planned:
        total = sum(planned.values())
        out["fraction"] = (sum(min(dims.get(d, 0), n) for d, n in planned.items()) / total
                           if total else 1.0)
    elif kind == "main_job":
        fields, out["fraction"], out["no_eta"] = _main_job_progress(attrs, dims,
                                                                    _json(attrs.get("config")))
        out["fields"] = out["fields"] or fields
    else:
        out["no_eta"] = "the job declared no planned lengths (TrajectoryWriter.plan)"
    f = out["fraction"]
    if f is not None and out["wall_seconds"] is None:
        out["no_eta"] = "the file records no wall time"
    elif f is not None and f <= 0:
        out["no_eta"] = "nothing done yet"
    elif f is not None:
        out["eta_seconds"] = out["wall_seconds"] * (1.0 - f) / f
    return out


def _resumable(path: Path, kind, status) -> str | None:
    """Whether an unfinished file can be continued (main-job files: their checkpoint)."""
    if status == "complete" or kind != "main_job":
        return None
    ckpt = path.with_name(path.name + ".ckpt.npz")
    if ckpt.exists():
        return f"resumable from the checkpoint {ckpt.name} (rerun the same command with --resume)"
    return ("not resumable (killed before its first checkpoint; start again with --overwrite)")


def run_status(path, n_last: int = 3) -> dict:
    """Progress of any rieszflow file, live or finished (reads it without HDF5 file locking).

    Parameters
    ----------
    path : str or os.PathLike
        A file written by rieszflow.
    n_last : int, default 3
        How many of the last records of each growing dimension to return.

    Returns
    -------
    dict
        ``path``, ``kind``, ``status`` (the root attribute), ``state`` (one of :data:`STATES`:
        a file marked ``running`` whose writer is gone is ``"stale (writer gone)"``),
        ``state_note`` (why, or that another host's writer cannot be checked from here),
        ``created``, ``updated`` (time of the last flush), ``git_commit``, ``lock`` (the lock
        file's pid, host, start, or None), ``writer`` (its liveness,
        :func:`rieszflow.engine.storage.lock.holder_state`, or None without a lock),
        ``resumable`` (main-job files that are not complete: whether a checkpoint
        ``<file>.ckpt.npz`` lets ``--resume`` continue; else None), ``progress`` (``fields``:
        the ``progress`` attribute, or for main-job files phase, epoch and step derived from the
        configuration; ``fraction`` done in [0, 1] from the ``planned_lengths`` attribute, or
        for main-job files from ``epochs`` and ``phase_a_epochs``; ``wall_seconds``;
        ``eta_seconds`` = ``wall * (1 - f) / f``; ``no_eta``: why there is none), ``dims``
        (name -> length), ``growing`` and ``last`` (variable -> (dimension, its last values),
        for 1-D numeric variables on unlimited dimensions).

    Raises
    ------
    FileNotFoundError
        If the file does not exist.
    rieszflow.engine.storage.RunFileError
        If it is not a readable rieszflow file, or an object of it is damaged (the message
        names the file and the object).
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist")
    check_run_file(path)
    lock = RunLock(path)
    # the file first, then its lock: a writer that starts in between is then seen as alive,
    # never as a 'running' file without a writer
    for attempt in range(5):
        try:
            attrs, dims, growing, last = _read_layout(path, n_last)
            break
        except RunFileError:
            live = live_writer(path)
            if live is None:
                raise
            # not SWMR: a reader can meet a block half-written (the file is not damaged); the
            # writer finishes it within milliseconds, so read again
            if attempt == 4:
                raise RunFileError(f"{path} is being written by {live} and a block was being "
                                   f"written at each of 5 reads; run the command again (the file "
                                   f"is not damaged)") from None
            time.sleep(0.1)
    owner = lock.owner() if lock.lock_path.exists() else None
    if owner is None and lock.lock_path.exists():    # being created this instant: look again
        time.sleep(0.1)
        owner = lock.owner()
    writer = holder_state(owner) if lock.lock_path.exists() else None
    state, note = _state(attrs.get("status"), writer)
    kind = attrs.get("kind")
    return {"path": str(path), "kind": kind, "status": attrs.get("status"), "state": state,
            "state_note": note, "created": attrs.get("created"), "updated": attrs.get("updated"),
            "git_commit": attrs.get("git_commit"), "lock": owner, "writer": writer,
            "resumable": _resumable(path, kind, attrs.get("status")) if state != "running" else None,
            "progress": _progress(attrs, dims, kind) if attrs.get("status") != "complete" else None,
            "dims": dims, "growing": sorted(growing), "last": last}


def _duration(seconds: float) -> str:
    seconds = max(0.0, float(seconds))
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def format_status(info: dict) -> str:
    """The report ``rieszflow status`` prints (see :func:`run_status`).

    Parameters
    ----------
    info : dict
        From :func:`run_status`.

    Returns
    -------
    str
        Lines: the file, its kind and state; creation and last update; the writer; whether an
        unfinished file is resumable; progress and ETA; dimensions; last records.
    """
    lines = [f"{info['path']}: kind {info['kind']}, status {info['state']}"]
    if info.get("state_note"):
        lines.append(f"  ({info['state_note']})")
    lines.append(f"  created {info['created']}, last written {info.get('updated') or 'unknown'}, "
                 f"git commit {info['git_commit']}")
    lock, writer = info["lock"], info.get("writer")
    if lock and writer == ALIVE:
        lines.append(f"  being written by process {lock.get('pid')} on {lock.get('host')} since "
                     f"{lock.get('started')}")
    elif lock and writer == OTHER_HOST:
        lines.append(f"  lock held by process {lock.get('pid')} on host {lock.get('host')} since "
                     f"{lock.get('started')}; cannot tell from this host whether it still runs")
    elif lock:
        lines.append(f"  stale lock of process {lock.get('pid')} on {lock.get('host')} (since "
                     f"{lock.get('started')}): that process no longer runs; the next writer takes "
                     f"the lock over")
    else:
        lines.append("  no live writer")
    if info.get("resumable"):
        lines.append(f"  {info['resumable']}")
    prog = info.get("progress")
    if prog:
        fields = ", ".join(f"{k} {v}" for k, v in prog["fields"].items())
        parts = [fields] if fields else []
        if prog["fraction"] is not None:
            parts.append(f"{100 * prog['fraction']:.1f}% done")
        if prog["wall_seconds"] is not None:
            parts.append(f"wall time {_duration(prog['wall_seconds'])}")
        if prog["eta_seconds"] is not None:
            left = _duration(prog["eta_seconds"])
            parts.append(f"ETA {left}" if info["state"] == "running" else
                         f"about {left} of work left at the recorded rate")
        else:
            parts.append(f"no ETA ({prog['no_eta']})" if prog["no_eta"] else "no ETA")
        lines.append("  progress: " + "; ".join(parts))
        if prog["planned"]:
            lines.append("  planned: " + ", ".join(f"{d} {info['dims'].get(d, 0)}/{n}"
                                                   for d, n in prog["planned"].items()))
    lines.append("  dimensions: " + ", ".join(f"{k}={v}{' (growing)' if k in info['growing'] else ''}"
                                               for k, v in info["dims"].items()))
    for name, (dim, vals) in sorted(info["last"].items()):
        shown = ", ".join(f"{v:.6g}" if isinstance(v, float) else str(v) for v in vals)
        lines.append(f"  {name}[{dim}] last: {shown}")
    return "\n".join(lines)


def mcnemar(correct_a, correct_b) -> dict:
    """Exact McNemar test of two classifiers on the same examples.

    Parameters
    ----------
    correct_a, correct_b : array_like of bool, shape (n,)
        Whether each classifier got each example right.

    Returns
    -------
    dict
        ``n``, ``a_only`` (A right, B wrong), ``b_only``, ``p_value`` (two-sided exact binomial
        test of the discordant pairs, scipy.stats.binomtest; 1.0 when there are none): the
        fields of :func:`rieszflow.engine.stats.mcnemar` as a dict.

    Raises
    ------
    ValueError
        If the arrays differ in length.
    """
    return stats.mcnemar(correct_a, correct_b)._asdict()


def compare_runs(paths) -> dict:
    """Test metrics of several main-job runs side by side, with pairwise McNemar tests.

    Parameters
    ----------
    paths : sequence of str or os.PathLike
        Main-job files (``test_metrics``; ``test_proba`` and ``test_label`` for the tests).

    Returns
    -------
    dict
        ``names`` (:func:`run_labels`), ``metrics`` (metric -> list of values, NaN where a run
        lacks it) and ``pairs``
        (list of (i, j, mcnemar dict) for runs with predictions on the same test labels).

    Raises
    ------
    ValueError
        If fewer than two paths are given or a file has no ``test_metrics``.
    """
    if len(paths) < 2:
        raise ValueError("compare needs at least two run files")
    dss = [open_run(p) for p in paths]
    for p, ds in zip(paths, dss):
        if "test_metrics" not in ds:
            raise ValueError(f"{p} has no variable 'test_metrics' (not a finished main-job run)")
    names = list(dict.fromkeys(m for ds in dss for m in ds["metric"].values.tolist()))
    metrics = {m: [float(ds["test_metrics"].sel(metric=m)) if m in ds["metric"].values else np.nan
                   for ds in dss] for m in names}
    pairs = []
    for i in range(len(dss)):
        for j in range(i + 1, len(dss)):
            a, b = dss[i], dss[j]
            if all(k in a and k in b for k in ("test_proba", "test_label")) and \
                    np.array_equal(a["test_label"].values, b["test_label"].values):
                y = a["test_label"].values
                pairs.append((i, j, mcnemar(a["test_proba"].values.argmax(1) == y,
                                            b["test_proba"].values.argmax(1) == y)))
    return {"names": run_labels(paths), "metrics": metrics, "pairs": pairs}


def format_compare(result: dict) -> str:
    """The table ``rieszflow compare`` prints (see :func:`compare_runs`).

    Parameters
    ----------
    result : dict
        From :func:`compare_runs`.

    Returns
    -------
    str
    """
    names = result["names"]
    w = max(12, *(len(n) for n in names))
    lines = [f"{'metric':<20}" + "".join(f"{n:>{w + 2}}" for n in names)]
    for m, vals in result["metrics"].items():
        lines.append(f"{m:<20}" + "".join(f"{v:>{w + 2}.4f}" for v in vals))
    for i, j, t in result["pairs"]:
        lines.append(f"McNemar {names[i]} vs {names[j]}: {t['a_only']} vs {t['b_only']} discordant of "
                     f"{t['n']} test examples, exact p = {t['p_value']:.3g}")
    if not result["pairs"]:
        lines.append("(no pair of runs shares test predictions on the same labels: no McNemar test)")
    return "\n".join(lines)
