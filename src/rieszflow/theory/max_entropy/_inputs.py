"""Argument checks shared by the max-entropy modules: host arrays, probability vectors, measures."""
from __future__ import annotations

import numpy as np

from rieszflow.engine.backend import to_numpy
from rieszflow.engine.measures import EmpiricalMeasure

__all__: list[str] = []


def _host_array(name: str, a, ndim: int) -> np.ndarray:
    """Finite float64 host array of rank ``ndim`` (CuPy input is copied to the host)."""
    if a is None:
        raise TypeError(f"{name} must be an array of rank {ndim}, got None")
    arr = np.asarray(to_numpy(a), dtype=np.float64)
    if arr.ndim != ndim:
        raise ValueError(f"{name} must be a {ndim}-D array, got shape {tuple(arr.shape)}")
    if arr.size == 0:
        raise ValueError(f"{name} must not be empty, got shape {tuple(arr.shape)}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or inf; all entries must be finite")
    return arr


def _probability(name: str, w, n: int) -> np.ndarray:
    w = _host_array(name, w, 1)
    if w.shape[0] != n:
        raise ValueError(f"{name} must have shape ({n},), got {tuple(w.shape)}")
    if np.any(w < 0):
        raise ValueError(f"{name} must be >= 0, got min {float(w.min())!r}")
    if abs(float(w.sum()) - 1.0) > 1e-12:
        raise ValueError(f"{name} must sum to 1 (a probability vector), got sum {float(w.sum())!r}")
    return w


def _as_measure(name: str, mu) -> EmpiricalMeasure:
    """An EmpiricalMeasure, or uniform weights on the rows of an (n, d) sample array."""
    if isinstance(mu, EmpiricalMeasure):
        return EmpiricalMeasure(to_numpy(mu.points), to_numpy(mu.weights))
    pts = _host_array(name, mu, 2)
    return EmpiricalMeasure.uniform(pts)
