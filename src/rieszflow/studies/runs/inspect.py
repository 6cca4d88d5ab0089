"""Reading rieszflow files as a whole: several runs in one dataset, a run's progress, paired tests.

References
----------
McNemar, Psychometrika 12 (1947) 153-157 (the exact test is the binomial test on the discordant
pairs); Dietterich, Neural Computation 10 (1998) 1895-1923 (McNemar for comparing classifiers).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from rieszflow.engine import stats
from rieszflow.engine.storage import RunFileError, RunLock, check_run_file, open_run

__all__ = ["open_runs", "run_status", "format_status", "mcnemar", "compare_runs", "format_compare"]


def open_runs(paths, dim: str = "run"):
    """Several rieszflow files as one :class:`xarray.Dataset`, stacked along a new dimension.

    Parameters
    ----------
    paths : sequence of str or os.PathLike
        Files written by rieszflow (any kinds; variables missing from a file are NaN there).
    dim : str, default "run"
        Name of the new dimension; its coordinate is the file name, and the per-run root
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
    out = out.assign_coords({dim: [p.name for p in paths], **{f"{dim}_{k}": v for k, v in prov.items()}})
    out.attrs["paths"] = json.dumps([str(p) for p in paths])
    return out


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
        ``kind``, ``status``, ``created``, ``git_commit``, ``lock`` (the live writer: pid, host,
        start, or None), ``dims`` (name -> length), ``last`` (variable -> its last values along
        its first dimension, for 1-D numeric variables on unlimited dimensions).

    Raises
    ------
    FileNotFoundError
        If the file does not exist.
    rieszflow.engine.storage.RunFileError
        If it is not a readable rieszflow file.
    """
    import h5py

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist")
    check_run_file(path)
    info = {"path": str(path), "lock": RunLock(path).owner() if RunLock(path).lock_path.exists() else None}
    try:
        with h5py.File(path, "r", locking=False) as f:
            attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in f.attrs.items()}
            dims, last, growing = {}, {}, set()
            for name, obj in f.items():
                if isinstance(obj, h5py.Dataset) and obj.attrs.get("CLASS") == b"DIMENSION_SCALE":
                    dims[name] = int(obj.shape[0]) if obj.shape else 0
                    if obj.maxshape and obj.maxshape[0] is None:
                        growing.add(name)
            for name, obj in f.items():
                if (isinstance(obj, h5py.Dataset) and obj.ndim == 1 and obj.dtype.kind in "fiu"
                        and name not in dims):
                    dl = obj.attrs.get("DIMENSION_LIST")
                    dim = f[dl[0][0]].name.lstrip("/") if dl is not None and len(dl) else None
                    if dim in growing and obj.shape[0]:
                        last[name] = (dim, np.asarray(obj[max(0, obj.shape[0] - n_last):]).tolist())
    except OSError as e:
        raise RunFileError(f"{path} cannot be read ({e})") from e
    info.update(kind=attrs.get("kind"), status=attrs.get("status"), created=attrs.get("created"),
                git_commit=attrs.get("git_commit"), dims=dims, growing=sorted(growing), last=last)
    return info


def format_status(info: dict) -> str:
    """The report ``rieszflow status`` prints (see :func:`run_status`).

    Parameters
    ----------
    info : dict
        From :func:`run_status`.

    Returns
    -------
    str
    """
    lines = [f"{info['path']}: kind {info['kind']}, status {info['status']}",
             f"  created {info['created']}, git commit {info['git_commit']}"]
    lock = info["lock"]
    lines.append(f"  being written by process {lock.get('pid')} on {lock.get('host')} since "
                 f"{lock.get('started')}" if lock else "  no live writer")
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
        ``names``, ``metrics`` (metric -> list of values, NaN where a run lacks it) and ``pairs``
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
    return {"names": [Path(p).name for p in paths], "metrics": metrics, "pairs": pairs}


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
