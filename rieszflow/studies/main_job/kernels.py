"""Reading what the main job wrote: the learned attention kernels of a main-job HDF5 file.

The loader lives beside the writer (:mod:`rieszflow.studies.main_job.train`), which
owns the file layout; studies that use learned kernels (token flows, learned-kernel
analyses) read them through this module rather than the engine knowing a study's
file format.
"""
from __future__ import annotations

import json

import numpy as np

from rieszflow.engine._checks import check_int
from rieszflow.engine.backend import to_numpy
from rieszflow.engine.features import FEATURE_MAPS

__all__ = ["load_learned_kernel"]


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
    from rieszflow.engine.storage import RunFileError, open_run

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
