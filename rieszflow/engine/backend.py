"""Array backend: NumPy on the CPU (default) or CuPy on a CUDA GPU.

This is the **only** module of rieszflow that imports CuPy. Every other module
obtains its array namespace through :func:`namespace` (for functions that
receive arrays) or through a :class:`Backend` (for code that creates arrays),
so CPU results never depend on whether CuPy is installed.

Reproducibility across backends
-------------------------------
Random numbers are always drawn on the host with a NumPy
:class:`numpy.random.Generator` and then moved to the device
(:meth:`Backend.normal`, :meth:`Backend.uniform`). The same seed therefore
gives the same noise on NumPy and CuPy, and trajectories agree to float
round-off. The transfer costs one host-to-device copy per draw, which is
negligible next to the O(N^2) or O(N L d) work of a step.

Dtype policy
------------
Positions and activations use the backend's ``dtype`` (float64 by default,
float32 on request); energies are accumulated in float64 (see
``engine.energy``).
"""
from __future__ import annotations

import dataclasses
import importlib
from typing import Any

import numpy as np

__all__ = [
    "Backend",
    "BACKENDS",
    "cupy_available",
    "get_backend",
    "namespace",
    "to_numpy",
]

BACKENDS = ("numpy", "cupy")

_cupy: Any = None
_cupy_checked = False


def _import_cupy():
    """Import CuPy once and check that a CUDA device answers; None otherwise."""
    global _cupy, _cupy_checked
    if not _cupy_checked:
        _cupy_checked = True
        try:
            cp = importlib.import_module("cupy")
            cp.cuda.runtime.getDeviceCount()
            cp.zeros(1).sum()  # touch the device: fails fast on a broken driver
            _cupy = cp
        except Exception:  # noqa: BLE001 - any failure means "no usable GPU"
            _cupy = None
    return _cupy


def cupy_available() -> bool:
    """Return True when CuPy imports and a CUDA device can run a kernel.

    Returns
    -------
    bool
        False when CuPy is not installed, no device is present, or the
        driver fails; never raises.
    """
    return _import_cupy() is not None


def namespace(*arrays):
    """Array namespace (``numpy`` or ``cupy``) of the given arrays.

    Parameters
    ----------
    *arrays : array_like
        Arrays of one backend. Python scalars and ``None`` are ignored.

    Returns
    -------
    module
        ``cupy`` if any argument is a CuPy array, else ``numpy``.

    Raises
    ------
    TypeError
        If NumPy and CuPy arrays are mixed.
    """
    cp = _cupy if _cupy_checked else None
    kinds = set()
    for a in arrays:
        if a is None or np.isscalar(a):
            continue
        if cp is not None and isinstance(a, cp.ndarray):
            kinds.add("cupy")
        elif type(a).__module__.startswith("cupy"):
            kinds.add("cupy")
        else:
            kinds.add("numpy")
    if len(kinds) > 1:
        raise TypeError("namespace: arrays mix NumPy and CuPy; move them to one backend first "
                        "(engine.backend.get_backend(name).asarray)")
    if kinds == {"cupy"}:
        return _import_cupy()
    return np


def to_numpy(x):
    """Copy an array (NumPy or CuPy) or scalar to a host NumPy array.

    Parameters
    ----------
    x : array_like or scalar

    Returns
    -------
    numpy.ndarray
    """
    if type(x).__module__.startswith("cupy"):
        return x.get()
    return np.asarray(x)


@dataclasses.dataclass(frozen=True)
class Backend:
    """A chosen array library with the conversions rieszflow needs.

    Parameters
    ----------
    name : {"numpy", "cupy"}
        Library name.
    dtype : numpy.dtype
        Floating dtype for positions and activations (float64 or float32).

    Attributes
    ----------
    xp : module
        ``numpy`` or ``cupy``.
    """

    name: str
    dtype: np.dtype = np.dtype(np.float64)

    @property
    def xp(self):
        return np if self.name == "numpy" else _import_cupy()

    def asarray(self, x, dtype=None):
        """Move ``x`` to this backend (no copy when already there and of that dtype).

        Parameters
        ----------
        x : array_like or scalar
            NumPy or CuPy array, or anything ``numpy.asarray`` accepts.
        dtype : numpy.dtype, optional
            Target dtype; default ``self.dtype``.

        Returns
        -------
        array
            ``numpy.ndarray`` or ``cupy.ndarray`` of dtype ``dtype``.
        """
        dtype = self.dtype if dtype is None else dtype
        if self.name == "numpy":
            return np.asarray(to_numpy(x), dtype=dtype)
        return self.xp.asarray(x, dtype=dtype)

    def to_numpy(self, x):
        """Host copy of ``x`` (see :func:`to_numpy`).

        Parameters
        ----------
        x : array_like or scalar
            NumPy or CuPy array, or scalar.

        Returns
        -------
        numpy.ndarray
            Host copy of ``x``.
        """
        return to_numpy(x)

    def normal(self, rng: np.random.Generator, shape, scale: float = 1.0):
        """Standard normal draws made on the host with ``rng`` and moved here.

        Parameters
        ----------
        rng : numpy.random.Generator
            Host generator; the only source of randomness, so a seed fixes
            the result on every backend.
        shape : tuple of int
        scale : float, default 1.0

        Returns
        -------
        array of shape ``shape`` and dtype ``self.dtype``
        """
        return self.asarray(scale * rng.standard_normal(shape))

    def uniform(self, rng: np.random.Generator, shape, low: float = 0.0, high: float = 1.0):
        """Uniform draws on [low, high) made on the host and moved here.

        Parameters
        ----------
        rng : numpy.random.Generator
            Host generator; the only source of randomness, so a seed fixes
            the result on every backend.
        shape : tuple of int
            Shape of the draws.
        low : float, default 0.0
            Lower bound (inclusive).
        high : float, default 1.0
            Upper bound (exclusive).

        Returns
        -------
        array of shape ``shape`` and dtype ``self.dtype``
            The draws.
        """
        return self.asarray(rng.uniform(low, high, size=shape))

    def synchronize(self) -> None:
        """Wait for queued device work (no-op on NumPy); use only for timing."""
        if self.name == "cupy":
            self.xp.cuda.get_current_stream().synchronize()


def get_backend(name: str = "numpy", dtype="float64") -> Backend:
    """Return the backend called ``name``.

    Parameters
    ----------
    name : {"numpy", "cupy"}
        ``"numpy"`` always works; ``"cupy"`` needs CuPy and a CUDA device.
    dtype : {"float64", "float32"}
        Floating dtype of positions and activations.

    Returns
    -------
    Backend

    Raises
    ------
    ValueError
        If ``name`` or ``dtype`` is not one of the allowed values.
    RuntimeError
        If ``name="cupy"`` and CuPy or a CUDA device is unavailable.
    """
    if name not in BACKENDS:
        raise ValueError(f"backend={name!r} is not supported; allowed: {', '.join(BACKENDS)}")
    dt = np.dtype(dtype)
    if dt not in (np.dtype(np.float64), np.dtype(np.float32)):
        raise ValueError(f"dtype={dtype!r} is not supported; allowed: float64, float32")
    if name == "cupy" and not cupy_available():
        raise RuntimeError("backend='cupy' was requested but CuPy is not installed or no CUDA "
                           "device is usable; install the 'gpu' extra (pip install -e '.[gpu]') "
                           "on a machine with an NVIDIA GPU, or use backend='numpy'")
    return Backend(name=name, dtype=dt)
