"""Input checks shared by the statistics modules."""
from __future__ import annotations

import dataclasses
import math
from typing import NamedTuple

import numpy as np
from scipy.stats import binomtest, linregress, ttest_rel, wilcoxon


def _as_1d(value, name: str) -> np.ndarray:
    a = np.asarray(value, dtype=np.float64)
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D, shape (n,); got shape {a.shape}")
    return a


def _check_positive_finite(a: np.ndarray, name: str) -> None:
    bad = ~(np.isfinite(a) & (a > 0))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{name} must be finite and > 0 for a log-log fit; {name}[{i}] = {float(a[i])!r} "
                         f"({int(bad.sum())} such entries)")


def _count(value, name: str) -> int:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"{name} must be an integer >= 0; got {value!r}")
    return int(value)
