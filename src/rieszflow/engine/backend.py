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

Counting host transfers
-----------------------
Every device-to-host synchronisation of a time loop (``float(x)``, ``int(x)``,
``bool(x)``, ``x.item()``, :func:`to_numpy`...) stalls a GPU. To test that a loop
makes none, ``get_backend("numpy", count_transfers=True)`` gives a CPU backend whose
arrays are :class:`CountingArray` (a NumPy subclass standing in for device arrays):
every NumPy ufunc and function keeps them counting arrays (0-d results included,
as on CuPy), and every conversion to a host value is recorded by the active
:func:`count_host_transfers` counters, with the line that asked for it. Code
branches that CuPy arrays take (``engine._checks.is_host`` is False for them) are
taken by counting arrays too, so the exact loop code that would synchronise on a
GPU is counted on the CPU. Implicit conversions that CuPy refuses
(``numpy.asarray(x)``, assigning a device array into a NumPy array) are not seen.

Dtype policy
------------
Positions and activations use the backend's ``dtype`` (float64 by default,
float32 on request); energies are accumulated in float64 (see
``engine.energy``).
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import os
import sys
from collections import Counter
from typing import Any

import numpy as np

__all__ = [
    "Backend",
    "BACKENDS",
    "CountingArray",
    "TransferCounter",
    "count_host_transfers",
    "cupy_available",
    "backend_of",
    "get_backend",
    "namespace",
    "on_host",
    "raw_kernel",
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
        ``cupy`` if any argument is a CuPy array, else ``numpy`` (a counting stand-in
        for it when an argument is a :class:`CountingArray`).

    Raises
    ------
    TypeError
        If NumPy and CuPy arrays are mixed.
    """
    cp = _cupy if _cupy_checked else None
    kinds = set()
    counting = False
    for a in arrays:
        if a is None or np.isscalar(a):
            continue
        if isinstance(a, CountingArray):
            counting = True
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
    return _COUNTING_NP if counting else np


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
    if isinstance(x, CountingArray):
        _note_transfer("to_numpy")
        return np.asarray(x.view(np.ndarray))
    return np.asarray(x)


def on_host(x) -> bool:
    """True when ``x`` is a host NumPy array whose values can be read without a device sync.

    Parameters
    ----------
    x : object
        Anything.

    Returns
    -------
    bool
        True for a ``numpy.ndarray``; False for CuPy arrays, for the
        :class:`CountingArray` stand-ins of ``count_transfers`` backends, and
        for non-arrays.
    """
    return isinstance(x, np.ndarray) and not isinstance(x, CountingArray)


# --------------------------------------------------------------------------- transfer counting

class TransferCounter:
    """Device-to-host conversions recorded while a :func:`count_host_transfers` block is active.

    Attributes
    ----------
    events : list of (str, str)
        One ``(kind, site)`` per transfer; ``site`` is ``"path:line"`` of the first
        caller outside this module and NumPy. ``kind`` names a conversion (``"float"``,
        ``"int"``, ``"index"``, ``"bool"``, ``"complex"``, ``"format"``, ``"item"``,
        ``"tolist"``, ``"to_numpy"``), an operation whose output size needs the
        contents (``"nonzero"``, ``"mask_index"``, or the function's name:
        ``"flatnonzero"``, ``"argwhere"``, ``"unique"``, ``"extract"``,
        ``"compress"``), or a function returning a Python value (``"allclose"``,
        ``"array_equal"``, ``"array_equiv"``).
    """

    def __init__(self):
        self.events: list[tuple[str, str]] = []

    @property
    def total(self) -> int:
        """Number of conversions recorded so far."""
        return len(self.events)

    def by_kind(self) -> Counter:
        """Conversions per kind.

        Returns
        -------
        collections.Counter
            Kind -> number of conversions.
        """
        return Counter(k for k, _ in self.events)

    def by_site(self) -> Counter:
        """Conversions per calling line.

        Returns
        -------
        collections.Counter
            ``"path:line"`` -> number of conversions.
        """
        return Counter(site for _, site in self.events)

    def reset(self) -> None:
        """Forget every recorded conversion."""
        self.events.clear()


_COUNTERS: list[TransferCounter] = []
_HERE = os.path.dirname(os.path.abspath(__file__))
_NUMPY_DIR = os.path.dirname(os.path.abspath(np.__file__))


@contextlib.contextmanager
def count_host_transfers():
    """Record every host conversion of :class:`CountingArray` arrays inside the block.

    Yields
    ------
    TransferCounter
        Filled while the block runs; blocks may nest (each counter sees all).

    Examples
    --------
    >>> be = get_backend("numpy", count_transfers=True)
    >>> x = be.asarray([1.0, 2.0])
    >>> with count_host_transfers() as c:
    ...     y = (x * 2).sum()          # stays a (counting) device array
    ...     v = float(y)               # one synchronisation
    >>> c.total, v
    (1, 6.0)
    """
    counter = TransferCounter()
    _COUNTERS.append(counter)
    try:
        yield counter
    finally:
        _COUNTERS.remove(counter)


def _note_transfer(kind: str) -> None:
    if not _COUNTERS:
        return
    f = sys._getframe(1)
    while f is not None:
        fn = os.path.abspath(f.f_code.co_filename)
        if not (fn.startswith(_HERE + os.sep + "backend.py") or fn.startswith(_NUMPY_DIR)):
            break
        f = f.f_back
    site = "?" if f is None else f"{os.path.relpath(f.f_code.co_filename)}:{f.f_lineno}"
    for c in _COUNTERS:
        c.events.append((kind, site))


def _plain(obj):
    """CountingArray -> base ndarray view, recursively through tuples and lists."""
    if isinstance(obj, CountingArray):
        return obj.view(np.ndarray)
    if isinstance(obj, (tuple, list)):
        return type(obj)(_plain(o) for o in obj)
    return obj


def _wrap(obj):
    """NumPy arrays and scalars -> CountingArray (0-d for scalars), recursively."""
    if type(obj) is np.ndarray:
        return obj.view(CountingArray)
    if isinstance(obj, np.generic):
        return np.asarray(obj).view(CountingArray)
    if isinstance(obj, tuple):
        items = [_wrap(o) for o in obj]
        return type(obj)(*items) if hasattr(obj, "_fields") else tuple(items)   # named results too
    if isinstance(obj, list):
        return [_wrap(o) for o in obj]
    return obj


#: NumPy functions that return a Python value computed from array contents (CuPy returns a
#: device array), or whose output shape depends on the contents (CuPy synchronises to size
#: it): calling them on a counting array counts one transfer.
_HOST_RESULT_FUNCTIONS = {np.allclose, np.array_equal, np.array_equiv, np.nonzero, np.flatnonzero,
                          np.argwhere, np.unique, np.extract, np.compress}


def _is_mask_key(key) -> bool:
    """True when an index holds a boolean array (output size depends on the contents)."""
    keys = key if isinstance(key, tuple) else (key,)
    return any(isinstance(k, np.ndarray) and k.dtype == bool and k.ndim > 0 for k in keys)


class CountingArray(np.ndarray):
    """A NumPy array that behaves as a device array and counts its conversions to the host.

    Created by the ``asarray``/``normal``/``uniform`` of a backend with
    ``count_transfers=True``; meant for tests and diagnostics only. Every ufunc
    (including reductions and ``matmul``), every NumPy function and indexing return
    counting arrays (scalars become 0-d arrays, as CuPy's do), so values stay "on the
    device" until converted. ``float``, ``int``, ``operator.index``, ``bool``,
    ``complex``, ``format``, ``item``, ``tolist``, ``get``, :func:`to_numpy` and the
    contents-to-Python functions ``numpy.allclose``/``array_equal``/``array_equiv``
    are each recorded as one transfer by the active :func:`count_host_transfers`
    counters, and so are the operations whose output shape depends on the contents
    (``nonzero``, ``flatnonzero``, ``argwhere``, ``unique``, ``extract``, ``compress``,
    boolean-mask indexing), for which CuPy synchronises to size the result. ``len`` and
    shape/dtype queries are free (metadata, no sync).

    Parameters
    ----------
    shape : tuple of int
        As :class:`numpy.ndarray` (make counting arrays with
        ``get_backend("numpy", count_transfers=True).asarray(x)`` or ``x.view(CountingArray)``).
    dtype : numpy.dtype, optional
        As :class:`numpy.ndarray`.
    buffer : buffer, optional
        As :class:`numpy.ndarray`.
    offset : int, optional
        As :class:`numpy.ndarray`.
    strides : tuple of int, optional
        As :class:`numpy.ndarray`.
    order : {"C", "F"}, optional
        As :class:`numpy.ndarray`.
    """

    __array_priority__ = 20.0

    def __array_ufunc__(self, ufunc, method, *inputs, out=None, **kwargs):
        if out is not None:
            kwargs["out"] = tuple(_plain(o) for o in out)
        res = getattr(ufunc, method)(*_plain(inputs), **kwargs)
        if out is not None:
            return out[0] if len(out) == 1 else out
        return _wrap(res)

    def __array_function__(self, func, types, args, kwargs):
        if func in _HOST_RESULT_FUNCTIONS:
            _note_transfer(func.__name__)
        out = kwargs.get("out")
        res = func(*_plain(args), **{k: _plain(v) for k, v in kwargs.items()})
        if out is not None:
            return out
        return _wrap(res)

    def __getitem__(self, key):
        if _is_mask_key(key):
            _note_transfer("mask_index")
        return _wrap(super().__getitem__(_plain(key)))

    def __setitem__(self, key, value):
        if _is_mask_key(key):
            _note_transfer("mask_index")
        super().__setitem__(_plain(key), _plain(value))

    def nonzero(self):
        """Indices of the nonzero entries (one counted transfer: the output size depends on them).

        Returns
        -------
        tuple of CountingArray
            As :meth:`numpy.ndarray.nonzero`.
        """
        _note_transfer("nonzero")
        return _wrap(self.view(np.ndarray).nonzero())

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def __float__(self):
        _note_transfer("float")
        return float(self.view(np.ndarray))

    def __int__(self):
        _note_transfer("int")
        return int(self.view(np.ndarray))

    def __index__(self):
        _note_transfer("index")
        return self.view(np.ndarray).__index__()

    def __bool__(self):
        _note_transfer("bool")
        return bool(self.view(np.ndarray))

    def __complex__(self):
        _note_transfer("complex")
        return complex(self.view(np.ndarray))

    def __format__(self, spec):
        _note_transfer("format")
        return format(self.view(np.ndarray), spec)

    def item(self, *args):
        """Python scalar (one counted transfer).

        Parameters
        ----------
        *args : int
            As :meth:`numpy.ndarray.item`.

        Returns
        -------
        int, float, bool or complex
            The element.
        """
        _note_transfer("item")
        return self.view(np.ndarray).item(*args)

    def tolist(self):
        """Nested Python list (one counted transfer).

        Returns
        -------
        list or scalar
            As :meth:`numpy.ndarray.tolist`.
        """
        _note_transfer("tolist")
        return self.view(np.ndarray).tolist()

    def get(self):
        """Host copy as a plain ``numpy.ndarray`` (one counted transfer), like ``cupy.ndarray.get``.

        Returns
        -------
        numpy.ndarray
            The values.
        """
        return to_numpy(self)

    # methods that NumPy implements in C and that would return host scalars
    def argmax(self, *args, **kwargs):
        """As :meth:`numpy.ndarray.argmax`, a (0-d) counting array even without an axis.

        Parameters
        ----------
        *args, **kwargs
            As :meth:`numpy.ndarray.argmax`.

        Returns
        -------
        CountingArray
            The indices.
        """
        return _wrap(self.view(np.ndarray).argmax(*_plain(args), **kwargs))

    def argmin(self, *args, **kwargs):
        """As :meth:`numpy.ndarray.argmin`, a (0-d) counting array even without an axis.

        Parameters
        ----------
        *args, **kwargs
            As :meth:`numpy.ndarray.argmin`.

        Returns
        -------
        CountingArray
            The indices.
        """
        return _wrap(self.view(np.ndarray).argmin(*_plain(args), **kwargs))

    def dot(self, other, *args):
        """As :meth:`numpy.ndarray.dot`, a (0-d) counting array for two vectors.

        Parameters
        ----------
        other : array
            The second factor.
        *args
            As :meth:`numpy.ndarray.dot` (``out``).

        Returns
        -------
        CountingArray
            The product.
        """
        return _wrap(self.view(np.ndarray).dot(_plain(other), *_plain(args)))


class _CountingNamespace:
    """``numpy`` as seen by counting arrays: what CuPy would return on the device.

    Every function of NumPy (and of ``numpy.linalg``/``numpy.fft``) is reached through it;
    its array and scalar results become :class:`CountingArray` (``asarray`` of a counting
    array stays one, like ``cupy.asarray`` of a device array). Ufuncs (with their ``at``,
    ``reduce``... methods), types (``float64``...), constants and other objects are NumPy's
    own; ufuncs return counting arrays when an input is one.
    """

    _SUBMODULES = ("linalg", "fft", "random")

    def __init__(self, module=np):
        self._module = module
        self.__name__ = module.__name__

    def __getattr__(self, name):
        attr = getattr(self._module, name)
        if name in self._SUBMODULES:
            return _CountingNamespace(attr)
        if isinstance(attr, np.ufunc):      # ufuncs dispatch to CountingArray.__array_ufunc__
            return attr
        if callable(attr) and not isinstance(attr, type):
            @functools.wraps(attr)
            def wrapped(*args, **kwargs):
                res = attr(*args, **kwargs)
                out = kwargs.get("out")
                return out if out is not None else _wrap(res)
            return wrapped
        return attr

    def __repr__(self):
        return f"<counting stand-in for {self._module.__name__}>"


_COUNTING_NP = _CountingNamespace()


@functools.lru_cache(maxsize=64)
def raw_kernel(source: str, name: str, options: tuple = ("-std=c++14",)):
    """Compile (once, cached) a CUDA C++ kernel with CuPy and return it.

    The only way other modules obtain CuPy kernels, so that CuPy is imported here alone.

    Parameters
    ----------
    source : str
        CUDA C++ source containing ``extern "C" __global__`` function ``name``.
    name : str
        The kernel to fetch.
    options : tuple of str
        NVRTC options.

    Returns
    -------
    cupy.RawKernel
        Call it as ``kernel(grid, block, args, shared_mem=...)``.

    Raises
    ------
    RuntimeError
        If CuPy or a CUDA device is unavailable.
    """
    cp = _import_cupy()
    if cp is None:
        raise RuntimeError("raw_kernel needs CuPy and a CUDA device (no CUDA device is usable)")
    return cp.RawKernel(source, name, options=tuple(options))


@dataclasses.dataclass(frozen=True)
class Backend:
    """A chosen array library with the conversions rieszflow needs.

    Parameters
    ----------
    name : {"numpy", "cupy"}
        Library name.
    dtype : numpy.dtype
        Floating dtype for positions and activations (float64 or float32).
    count_transfers : bool, default False
        NumPy only: make arrays :class:`CountingArray` stand-ins for device
        arrays, so that :func:`count_host_transfers` sees every conversion to the
        host (tests and diagnostics; results are those of NumPy).

    Attributes
    ----------
    xp : module
        ``numpy`` or ``cupy``.
    """

    name: str
    dtype: np.dtype = np.dtype(np.float64)
    count_transfers: bool = False

    @property
    def xp(self):
        if self.name == "numpy":
            return _COUNTING_NP if self.count_transfers else np
        return _import_cupy()

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
            if isinstance(x, CountingArray):     # already "on the device": no transfer
                x = x.view(np.ndarray)
            out = np.asarray(to_numpy(x), dtype=dtype)
            return out.view(CountingArray) if self.count_transfers else out
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


def get_backend(name: str = "numpy", dtype="float64", count_transfers: bool = False) -> Backend:
    """Return the backend called ``name``.

    Parameters
    ----------
    name : {"numpy", "cupy"}
        ``"numpy"`` always works; ``"cupy"`` needs CuPy and a CUDA device.
    dtype : {"float64", "float32"}
        Floating dtype of positions and activations.
    count_transfers : bool, default False
        Only with ``name="numpy"``: arrays become :class:`CountingArray` stand-ins
        for device arrays whose host conversions :func:`count_host_transfers`
        records (tests and diagnostics).

    Returns
    -------
    Backend

    Raises
    ------
    ValueError
        If ``name`` or ``dtype`` is not one of the allowed values, or
        ``count_transfers`` is asked for another backend than NumPy.
    RuntimeError
        If ``name="cupy"`` and CuPy or a CUDA device is unavailable.
    """
    if name not in BACKENDS:
        raise ValueError(f"backend={name!r} is not supported; allowed: {', '.join(BACKENDS)}")
    dt = np.dtype(dtype)
    if dt not in (np.dtype(np.float64), np.dtype(np.float32)):
        raise ValueError(f"dtype={dtype!r} is not supported; allowed: float64, float32")
    if count_transfers and name != "numpy":
        raise ValueError(f"count_transfers=True needs backend='numpy' (it emulates a device on "
                         f"the CPU), got backend={name!r}")
    if name == "cupy" and not cupy_available():
        raise RuntimeError("backend='cupy' was requested but CuPy is not installed or no CUDA "
                           "device is usable; install the 'gpu' extra (pip install -e '.[gpu]') "
                           "on a machine with an NVIDIA GPU, or use backend='numpy'")
    return Backend(name=name, dtype=dt, count_transfers=bool(count_transfers))


def backend_of(x) -> Backend:
    """The backend an array lives on (NumPy, CuPy, or a counting NumPy backend), of its dtype.

    Parameters
    ----------
    x : array
        NumPy, CuPy or :class:`CountingArray` array of dtype float32 or float64.

    Returns
    -------
    Backend
        ``get_backend(name, x.dtype, count_transfers=...)`` for the library holding ``x``.

    Raises
    ------
    ValueError
        If the dtype of ``x`` is not float32 or float64.
    """
    if isinstance(x, CountingArray):
        return get_backend("numpy", x.dtype, count_transfers=True)
    return get_backend("numpy" if namespace(x) is np else "cupy", x.dtype)
