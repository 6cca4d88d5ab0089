"""``rieszflow plot RUN.h5``: the standard figure of a main-job file, one PNG beside the run.

Five panels, drawn from the variables the main job writes (:mod:`rieszflow.learning.train`):

1. *Hamiltonian and its parts* against the Phase A Langevin step: ``alignment_energy``
   (:math:`-V_{seq}`, eq. (C.4)), ``repulsion_energy`` (:math:`W_{m,s}`, eq. (2.3)) and
   ``hamiltonian`` (:math:`-V_{seq} + \\lambda W_{m,s}`, eq. (2.2)) of paper 000.
2. *Particle norms*: the 5 %, 25 %, 50 %, 75 % and 95 % quantiles of :math:`|\\omega_k|` over
   every layer, head and particle, at each ``omega`` snapshot (``time``, in Phase A steps).
3. *Loss*: ``batch_loss`` of every Phase B optimiser step (x: fractional epoch, step / steps
   per epoch), ``train_loss`` and ``val_loss`` at the end of each epoch (nats).
4. *Accuracy*: ``train_accuracy`` and ``val_accuracy`` per epoch.
5. *Calibration*: reliability diagram of the test predictions (``test_proba``, ``test_label``):
   the positive-class probability in 15 equal-width bins (the file's ``ece_definition``),
   observed frequency of the positive class against the mean predicted probability, with the
   diagonal of perfect calibration and the count of examples per bin.

A panel whose variables the file lacks (an interrupted run has no test predictions; a run
without a Phase A has no energies) is drawn empty with a note, and :func:`plot_main_job` returns
what was missing. Matplotlib draws on its Agg canvas (no display, no global backend change).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from rieszflow.engine.storage import RunFileError, atomic_output, open_run

__all__ = ["PANELS", "N_BINS", "default_figure_path", "main_job_figure", "plot_main_job"]

#: Titles of the panels of :func:`plot_main_job`, in drawing order.
PANELS = ("Hamiltonian and its parts", "Particle norms", "Loss", "Accuracy", "Calibration (test)")
#: Bins of the reliability diagram (equal width on [0, 1], as the main job's ECE).
N_BINS = 15


def default_figure_path(run) -> Path:
    """Where ``rieszflow plot RUN.h5`` writes by default: ``RUN.png`` beside the run.

    Parameters
    ----------
    run : str or os.PathLike
        The run file.

    Returns
    -------
    pathlib.Path
        The run's path with the suffix ``.png``.
    """
    return Path(run).with_suffix(".png")


def _values(ds, name):
    """The values of a variable as float64, or None if the file lacks it or it is empty."""
    if name not in ds.variables or ds[name].size == 0:
        return None
    return np.asarray(ds[name].values, dtype=np.float64)


def _note(ax, text):
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, wrap=True,
            fontsize=9, color="0.35")


def _energies(ax, ds, missing):
    names = ("alignment_energy", "hamiltonian", "repulsion_energy")
    found = {n: _values(ds, n) for n in names}
    gone = [n for n, v in found.items() if v is None]
    missing += gone
    styles = {"alignment_energy": dict(color="C0", lw=1.2), "hamiltonian": dict(color="k", lw=1, ls="--")}
    handles = []
    for n in ("alignment_energy", "hamiltonian"):
        if found[n] is not None:
            handles += ax.plot(np.asarray(ds[ds[n].dims[0]].values), found[n], label=n, **styles[n])
    if found["repulsion_energy"] is not None:      # another scale: its own (right) axis
        right = ax.twinx()
        v = found["repulsion_energy"]
        handles += right.plot(np.asarray(ds[ds["repulsion_energy"].dims[0]].values), v, color="C1",
                              lw=1, label="repulsion_energy (right axis)")
        right.set_ylabel("repulsion energy W_{m,s} (1)")
    if handles:
        ax.set_xlabel("Phase A step")
        ax.set_ylabel("alignment energy, hamiltonian (1)")
        ax.legend(handles=handles, fontsize=8)
    if gone:
        _note(ax, f"missing: {', '.join(gone)}")


def _norms(ax, ds, missing):
    omega = _values(ds, "omega")
    if omega is None:
        missing.append("omega")
        _note(ax, "missing: omega")
        return
    norms = np.linalg.norm(omega, axis=-1).reshape(omega.shape[0], -1)   # (time, L*H*m)
    t = np.asarray(ds[ds["omega"].dims[0]].values, dtype=np.float64)
    q = np.nanquantile(norms, [0.05, 0.25, 0.5, 0.75, 0.95], axis=1)
    ax.fill_between(t, q[0], q[4], alpha=0.2, color="C0", label="5-95 %")
    ax.fill_between(t, q[1], q[3], alpha=0.35, color="C0", label="25-75 %")
    ax.plot(t, q[2], color="C0", lw=1.5, label="median")
    ax.set_xlabel("Phase A step (snapshot)")
    ax.set_ylabel("|omega_k| (1)")
    ax.legend(fontsize=8)


def _loss(ax, ds, missing):
    batch = _values(ds, "batch_loss")
    train, val = _values(ds, "train_loss"), _values(ds, "val_loss")
    n_epoch = ds.sizes.get("epoch", 0)
    if batch is not None:
        per_epoch = batch.size / n_epoch if n_epoch else 1.0
        x = np.arange(1, batch.size + 1) / per_epoch
        ax.plot(x, batch, lw=0.6, alpha=0.6, color="0.5",
                label="batch_loss" if n_epoch else "batch_loss (x: optimiser step)")
    for name, v, c in (("train_loss", train, "C0"), ("val_loss", val, "C1")):
        if v is not None:
            ax.plot(np.asarray(ds["epoch"].values), v, "o-", color=c, label=name)
    gone = [n for n, v in (("batch_loss", batch), ("train_loss", train), ("val_loss", val))
            if v is None]
    missing += gone
    if len(gone) < 3:
        ax.set_xlabel("Phase B epoch")
        ax.set_ylabel("cross-entropy (nat)")
        ax.legend(fontsize=8)
    if gone:
        _note(ax, f"missing: {', '.join(gone)}")


def _accuracy(ax, ds, missing):
    gone = []
    for name, c in (("train_accuracy", "C0"), ("val_accuracy", "C1")):
        v = _values(ds, name)
        if v is None:
            gone.append(name)
        else:
            ax.plot(np.asarray(ds["epoch"].values), v, "o-", color=c, label=name)
    missing += gone
    if len(gone) < 2:
        ax.set_xlabel("Phase B epoch")
        ax.set_ylabel("accuracy (1)")
        ax.legend(fontsize=8)
    if gone:
        _note(ax, f"missing: {', '.join(gone)}")


def _calibration(ax, ds, missing):
    proba, label = _values(ds, "test_proba"), _values(ds, "test_label")
    gone = [n for n, v in (("test_proba", proba), ("test_label", label)) if v is None]
    if gone:
        missing += gone
        _note(ax, f"missing: {', '.join(gone)}\n(the run did not reach its test evaluation)")
        return
    p = proba[:, 1] if proba.ndim == 2 else proba
    y = label == 1
    edges = np.linspace(0.0, 1.0, N_BINS + 1)
    idx = np.clip(np.digitize(p, edges[1:-1]), 0, N_BINS - 1)
    count = np.bincount(idx, minlength=N_BINS)
    keep = count > 0
    mean_p = np.bincount(idx, weights=p, minlength=N_BINS)[keep] / count[keep]
    freq = np.bincount(idx, weights=y.astype(np.float64), minlength=N_BINS)[keep] / count[keep]
    ax.plot([0, 1], [0, 1], "--", color="0.6", lw=1, label="perfect calibration")
    ax.plot(mean_p, freq, "o-", color="C2", label=f"test ({p.size} examples)")
    for x, f, n in zip(mean_p, freq, count[keep]):
        ax.annotate(str(n), (x, f), textcoords="offset points", xytext=(0, 4), fontsize=6,
                    ha="center")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("mean predicted P(class 1) in the bin")
    ax.set_ylabel("observed frequency of class 1")
    ax.legend(fontsize=8, loc="upper left")


def plot_main_job(path, out=None, *, overwrite: bool = False) -> tuple[Path, list[str]]:
    """Draw the standard figure of a main-job file (see the module docstring) as one PNG.

    Parameters
    ----------
    path : str or os.PathLike
        A file written by ``rieszflow run`` (root attribute ``kind == "main_job"``), finished
        or not.
    out : str or os.PathLike, optional
        The PNG to write (a name ending in ``.png``); default :func:`default_figure_path`.
    overwrite : bool, default False
        Replace an existing figure.

    Returns
    -------
    out : pathlib.Path
        The figure written (atomically: temporary name, then rename).
    missing : list of str
        The variables the figure needed and the file lacks (their panels carry a note).

    Raises
    ------
    FileNotFoundError
        If ``path`` or the directory of ``out`` does not exist.
    FileExistsError
        If ``out`` exists and ``overwrite`` is False.
    ValueError
        If ``out`` does not end in ``.png``.
    rieszflow.engine.storage.RunFileError
        If ``path`` is not a readable main-job file.
    """
    path = Path(path)
    out = default_figure_path(path) if out is None else Path(out)
    if out.suffix.lower() != ".png":
        raise ValueError(f"--out {str(out)!r}: the figure is a PNG; give a name ending in .png")
    if out.exists() and not overwrite:
        raise FileExistsError(f"{out} already exists; pass --overwrite to replace it, or choose "
                              f"another --out")
    if not out.parent.is_dir():
        raise FileNotFoundError(f"the directory {out.parent} of {out} does not exist")
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist")
    ds = open_run(path)
    if ds.attrs.get("kind") != "main_job":
        raise RunFileError(f"{path} holds a rieszflow file of kind {ds.attrs.get('kind')!r}; "
                           f"rieszflow plot draws main-job files (kind 'main_job', written by "
                           f"rieszflow run)")
    fig, missing = main_job_figure(ds, path.name)
    with atomic_output(out, suffix=".tmp.png") as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    return out, missing


def main_job_figure(ds, name: str = "main job"):
    """The figure of :func:`plot_main_job`, not saved.

    Parameters
    ----------
    ds : xarray.Dataset
        An opened main-job file (:func:`rieszflow.engine.storage.open_run`).
    name : str, default "main job"
        Shown in the figure's title (e.g. the file name).

    Returns
    -------
    fig : matplotlib.figure.Figure
        Five panels titled as :data:`PANELS` (a twin axis carries the repulsion energy).
    missing : list of str
        The variables the figure needed and ``ds`` lacks.
    """
    from matplotlib.figure import Figure

    fig = Figure(figsize=(15, 8.5), layout="constrained")
    axes = fig.subplots(2, 3).ravel()
    axes[-1].remove()
    missing: list[str] = []
    for ax, title, draw in zip(axes, PANELS, (_energies, _norms, _loss, _accuracy, _calibration)):
        ax.set_title(title, fontsize=11)
        draw(ax, ds, missing)
    status = ds.attrs.get("status")
    fig.suptitle(f"{name}: {ds.attrs.get('run_name', 'main job')}, status {status}"
                 f"{' (unfinished: what it recorded)' if status != 'complete' else ''}", fontsize=12)
    return fig, missing
