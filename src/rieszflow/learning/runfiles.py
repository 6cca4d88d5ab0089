"""Reading what the main job wrote: the learned attention kernels of a main-job HDF5 file.

The loader lives beside the writer (:mod:`rieszflow.learning.train`), which
owns the file layout; studies that use learned kernels (token flows, learned-kernel
analyses) read them through this module rather than the engine knowing a study's
file format.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

import numpy as np

from rieszflow.engine._checks import check_int
from rieszflow.engine.backend import to_numpy
from rieszflow.engine.attention.metrics import METRIC_NAMES
from rieszflow.engine.features import FEATURE_MAPS
from rieszflow.engine.storage import RunFileError, open_run
from rieszflow.learning.config import MainJobConfig
from rieszflow.learning.train import MainJob

__all__ = ["PhaseASetup", "load_learned_kernel", "load_phase_a_setup", "format_metrics",
           "stored_metrics", "main_job_summary"]


def load_learned_kernel(path, layer: int = 0, head: int = 0):
    """Read the learned (final) particles of one attention head from a main-job HDF5 file.

    The main job (``rieszflow run``) stores the particles in the variable
    ``omega`` with dims ``(time, layer, head, particle, coord)``, the last
    ``time`` record being the final (frozen) particles, and its resolved
    configuration as JSON in the root attribute ``config`` (keys
    ``feature_map``, ``m``, ``tau``, ``floor``, ``attention``, ...).

    Parameters
    ----------
    path : str or os.PathLike
        A main-job file (root attribute ``kind == "main_job"``).
    layer, head : int, default 0
        Which layer and head.

    Returns
    -------
    feature_map : str
        Registry name for ``engine.features.make_feature_map``.
    omega : numpy.ndarray, shape (m, d_k), float64
        Final particles (rows).
    options : dict
        Keyword options to rebuild the map exactly:
        ``make_feature_map(feature_map, d_k, m, **options)``; holds ``tau`` and
        ``floor`` from the config, and ``b`` (the fixed biases, from a variable
        ``feature_bias`` with dims ``(layer, particle)``) when the file stores it.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    engine.storage.RunFileError
        If the file is not a rieszflow run of kind ``main_job``, lacks ``omega``
        or ``config``, has ``omega`` with other dims, or was a softmax run.
    ValueError
        If ``layer``/``head`` is out of range, the particles are not finite, or
        the map draws fixed constants (``elu`` with biases, ``cos2``) that the
        file does not store (the kernel could not be rebuilt exactly).

    References
    ----------
    paper 000, App. F.2 (Phase A learns Omega, Phase B freezes it).
    """
    ds = open_run(path, kind="main_job")
    if "omega" not in ds.variables:
        raise RunFileError(f"{path}: main-job file has no variable 'omega' (the learned "
                           f"particles); variables present: {sorted(ds.data_vars)}")
    want = ("time", "layer", "head", "particle", "coord")
    if tuple(ds["omega"].dims) != want:
        raise RunFileError(f"{path}: variable 'omega' has dims {tuple(ds['omega'].dims)}, expected {want}")
    raw = ds.attrs.get("config")
    if raw is None:
        raise RunFileError(f"{path}: root attribute 'config' (JSON) is missing")
    try:
        cfg = json.loads(raw)
    except (TypeError, ValueError) as e:
        raise RunFileError(f"{path}: root attribute 'config' is not valid JSON ({e})") from e
    if cfg.get("attention", "linear") != "linear":
        raise RunFileError(f"{path}: config attention={cfg.get('attention')!r}; a softmax run has no "
                           f"learned kernel (need attention='linear')")
    for key in ("feature_map", "m", "tau"):
        if key not in cfg:
            raise RunFileError(f"{path}: config lacks key {key!r} (needed to rebuild the kernel)")
    n_time, n_layer, n_head, m, d_k = ds["omega"].shape
    layer = check_int("layer", layer, minimum=0)
    head = check_int("head", head, minimum=0)
    if layer >= n_layer:
        raise ValueError(f"layer={layer} is out of range; the file has {n_layer} layer(s)")
    if head >= n_head:
        raise ValueError(f"head={head} is out of range; the file has {n_head} head(s)")
    if n_time < 1:
        raise RunFileError(f"{path}: variable 'omega' has no time record")
    if int(cfg["m"]) != m:
        raise RunFileError(f"{path}: config m={cfg['m']} disagrees with omega's particle axis ({m})")
    omega = np.asarray(to_numpy(ds["omega"].values[-1, layer, head]), dtype=np.float64)
    if not np.isfinite(omega).all():
        raise ValueError(f"{path}: the final omega of layer {layer}, head {head} is not finite "
                         f"(an interrupted or diverged run?)")
    name = str(cfg["feature_map"])
    if name not in FEATURE_MAPS:
        raise RunFileError(f"{path}: config feature_map={name!r} is not a registered feature map; "
                           f"allowed: {', '.join(FEATURE_MAPS)}")
    if FEATURE_MAPS[name].learned or FEATURE_MAPS[name].position_dependent:
        raise ValueError(f"{path}: feature map {name!r} is not a particle map (its kernel needs learned "
                         f"parameters besides the particles, or token positions); the file stores "
                         f"only the particles, so the kernel cannot be rebuilt from it")
    options = {"tau": float(cfg["tau"])}
    if "floor" in cfg:
        options["floor"] = float(cfg["floor"])
    if "feature_bias" in ds.variables:
        options["b"] = np.asarray(ds["feature_bias"].values[layer], dtype=np.float64)
    elif FEATURE_MAPS[name].draws_constants(**cfg):
        raise ValueError(f"{path}: feature map {name!r} uses fixed random constants b that the file "
                         f"does not store (variable 'feature_bias' with dims (layer, particle)); "
                         f"the learned kernel cannot be rebuilt exactly")
    return name, omega, options


class PhaseASetup(NamedTuple):
    """What Phase A of a main-job file acted on, rebuilt from the file's configuration and seed.

    Parameters
    ----------
    config : MainJobConfig
        The file's stored configuration (with ``dtype`` as asked for the rebuild).
    model : engine.attention.model.TransformerClassifier
        The network at its initialisation (the weights Phase A saw, which it never changed),
        with every head's particles set to the file's final (learned) particles.
    tokenizer : engine.attention.data.WordPieceTokenizer
    train, validation : EncodedSplit
        The splits the run used.
    omega_initial : numpy.ndarray, shape (L, H, m, d_k), float64
        The file's first ``omega`` record (step 0: the initial law after projection).
    omega_final : numpy.ndarray, shape (L, H, m, d_k), float64
        The file's last ``omega`` record (the end of Phase A, frozen in Phase B).
    phase_a_steps : int
        Langevin steps Phase A took.
    status : str
        The file's status (``complete``, or ``interrupted``/``running`` after Phase A).
    """

    config: object
    model: object
    tokenizer: object
    train: object
    validation: object
    omega_initial: np.ndarray
    omega_final: np.ndarray
    phase_a_steps: int
    status: str


def load_phase_a_setup(path, dtype: str = "float64") -> PhaseASetup:
    """Rebuild the network that Phase A of a main-job file trained its particles on.

    The file stores the particles, not the other weights; in the paper order
    (``phase_a_after = 0``) Phase A runs first, on the network at its initialisation, which
    the configuration and the seed fix (the initialisation stream is spawned from ``seed``).
    The rebuilt initial particles are checked against the file's step-0 record, so a file
    written by another version of the initialisation is refused rather than misread.

    Parameters
    ----------
    path : str or os.PathLike
        A main-job file of a kernel run with linear attention whose Phase A finished: a
        complete file, or one interrupted in Phase B (at least one Phase B epoch recorded;
        Phase B never moves the particles, so they are final).
    dtype : {"float64", "float32"}, default "float64"
        Precision of the rebuilt network.

    Returns
    -------
    PhaseASetup

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    engine.storage.RunFileError
        If the file is not a main-job file, lacks ``omega`` or ``config``, or stopped before
        its Phase A finished.
    ValueError
        If the run had no Phase A (``kernel = False``), ran it after Phase B epochs
        (``phase_a_after > 0``: those weights are not stored), redrew its features, or its
        rebuilt initial particles differ from the stored ones.

    References
    ----------
    paper 000, App. F.2 (Phase A on the initial network, then Phase B with Omega frozen).
    """
    ds = open_run(path, kind="main_job")
    if "omega" not in ds.variables or "config" not in ds.attrs:
        raise RunFileError(f"{path}: main-job file lacks the variable 'omega' or the attribute "
                           f"'config'")
    try:
        stored = json.loads(ds.attrs["config"])
        cfg = MainJobConfig.from_dict(stored)
    except (TypeError, ValueError) as e:
        raise RunFileError(f"{path}: its stored configuration cannot be read ({e})") from e
    if not cfg.kernel or cfg.attention != "linear":
        raise ValueError(f"{path}: kernel={cfg.kernel}, attention={cfg.attention!r}: the run had "
                         f"no Phase A (need a kernel run with linear attention)")
    if cfg.phase_a_after:
        raise ValueError(f"{path}: phase_a_after={cfg.phase_a_after}: Phase A ran on a partly "
                         f"trained network whose weights the file does not store")
    if cfg.redraw_every:
        raise ValueError(f"{path}: redraw_every={cfg.redraw_every}: the features were redrawn, "
                         f"the particles are not Phase A's")
    status = ds.attrs.get("status")
    n_epochs = ds.sizes.get("epoch", 0)
    if status != "complete" and not ("phase_a_steps" in ds.attrs and n_epochs >= 1):
        raise RunFileError(f"{path}: main-job file has status {status!r} and its Phase A did not "
                           f"finish (no Phase B epoch recorded); a run whose Phase A completed is "
                           f"needed")
    cfg = cfg.replace(dtype=dtype, backend="numpy")
    job = MainJob(cfg, Path(path).with_suffix(".unused.h5"), quiet=True)
    job._build()
    model = job.model
    omega = np.asarray(ds["omega"].values, dtype=np.float64)
    rebuilt = np.stack([to_numpy(model.params[n]) for n in job.omega_names]).astype(np.float64)
    if rebuilt.shape != omega.shape[1:] or not np.allclose(rebuilt, omega[0], atol=1e-5, rtol=0):
        raise ValueError(f"{path}: the initial particles rebuilt from its configuration and seed "
                         f"differ from the stored step-0 record (max |diff| "
                         f"{np.max(np.abs(rebuilt - omega[0])) if rebuilt.shape == omega.shape[1:] else 'shape'}"
                         f"); the file was written by another initialisation")
    final = omega[-1]
    if not np.isfinite(final).all():
        raise ValueError(f"{path}: the final particles are not finite")
    for i, name in enumerate(job.omega_names):
        model.params[name] = model.backend.asarray(final[i].astype(model.dtype))
    return PhaseASetup(cfg, model, job.tok, job.train, job.val, omega[0].copy(), final.copy(),
                       int(ds.attrs.get("phase_a_steps", 0)), str(status))


def format_metrics(name: str, metrics: dict) -> str:
    """The final metrics table as printed by ``rieszflow run``.

    Parameters
    ----------
    name : str
        Column header (e.g. ``"Kernel-softplus (rt test)"``).
    metrics : dict
        Every name in :data:`~rieszflow.engine.attention.metrics.METRIC_NAMES` (float), and
        ``train_seconds``, ``phase_a_seconds``, ``phase_b_seconds`` (float, s) and
        ``best_epoch`` (int).

    Returns
    -------
    str
        The table, lines joined by newlines (no trailing newline).
    """
    rows = [f"{'metric':<20}{name:>24}", "-" * 44]
    rows += [f"{k:<20}{metrics[k]:>24.4f}" for k in METRIC_NAMES]
    rows += ["-" * 44,
             f"{'train seconds':<20}{metrics['train_seconds']:>24.1f}",
             f"{'  phase A':<20}{metrics['phase_a_seconds']:>24.1f}",
             f"{'  phase B':<20}{metrics['phase_b_seconds']:>24.1f}",
             f"{'best epoch (val)':<20}{metrics['best_epoch']:>24d}"]
    return "\n".join(rows)


def _mean(values, sl) -> float:
    v = np.asarray(values, dtype=np.float64)[sl]
    return float(np.nanmean(v)) if v.size else float("nan")


def stored_metrics(ds) -> dict:
    """The final test metrics and wall times a finished main-job file stores, as ``format_metrics`` takes them.

    Parameters
    ----------
    ds : xarray.Dataset
        An opened main-job file holding ``test_metrics`` (dimension ``metric``).

    Returns
    -------
    dict
        Every metric name to its value (float), ``train_seconds``, ``phase_a_seconds``,
        ``phase_b_seconds`` (float, s; NaN where the file lacks them) and ``best_epoch`` (int;
        -1 where missing).
    """
    metrics = {str(k): float(v) for k, v in zip(ds["metric"].values, ds["test_metrics"].values)}
    metrics.update({k: float(ds.attrs.get(k, np.nan)) for k in
                    ("train_seconds", "phase_a_seconds", "phase_b_seconds")})
    metrics["best_epoch"] = int(ds.attrs.get("best_epoch", -1))
    return metrics


def main_job_summary(ds) -> str:
    """Metric table and trajectory summary of a main-job file (what README/docs quote).

    Parameters
    ----------
    ds : xarray.Dataset
        An opened main-job file (:func:`rieszflow.engine.storage.open_run`).

    Returns
    -------
    str
        The test-metric table of ``rieszflow run``, the wall times, and for runs with a Phase A:
        mean particle norm at the initial and final snapshot, and the means over the first and
        last 20 Phase A steps (``min(20, steps // 2)``, at least 1, for shorter runs, so the two
        windows never overlap; the header says so) of the repulsion energy, the alignment
        energy and the largest particle displacement.

    Raises
    ------
    ValueError
        If the file holds no ``test_metrics`` (not a finished main-job run).

    References
    ----------
    paper 000, App. F.2 (Phase A / Phase B), eq. (2.2)-(2.3), (4.3), (C.4).
    """
    if "test_metrics" not in ds.variables:
        raise ValueError("the main-job file holds no 'test_metrics' (not a finished run)")
    metrics = stored_metrics(ds)
    lines = [format_metrics(f"{ds.attrs.get('run_name', 'run')} (test)", metrics)]
    if "omega" in ds.variables and "hamiltonian" in ds.variables and ds.sizes.get("step", 0) > 0:
        norms = np.linalg.norm(np.asarray(ds["omega"].values, dtype=np.float64), axis=-1)
        # windows of 20 steps, shrunk to half the run so that first and last never overlap
        n_win = max(1, min(20, ds.sizes["step"] // 2))
        first, last = slice(0, n_win), slice(-n_win, None)
        lines += ["", "Phase A trajectory (means over all layers, heads and particles; first / last "
                      f"{n_win} step{'s' if n_win > 1 else ''}"
                      f"{' (the run is too short for 20-step windows)' if n_win < 20 else ''})",
                  f"  particle norm |omega_k|      {norms[0].mean():.4f} -> {norms[-1].mean():.4f} "
                  f"(initial -> final snapshot)",
                  f"  repulsion energy W_N,s       {_mean(ds['repulsion_energy'].values, first):.4f} -> "
                  f"{_mean(ds['repulsion_energy'].values, last):.4f}",
                  f"  alignment energy -V_seq      {_mean(ds['alignment_energy'].values, first):.4f} -> "
                  f"{_mean(ds['alignment_energy'].values, last):.4f}",
                  f"  max displacement             {_mean(ds['max_displacement'].values, first):.4f} -> "
                  f"{_mean(ds['max_displacement'].values, last):.4f}",
                  f"  Phase A steps {ds.sizes['step']}, early stop fired: "
                  f"{'yes' if int(ds.attrs.get('phase_a_stopped_early', 0)) else 'no'}"]
    return "\n".join(lines)
