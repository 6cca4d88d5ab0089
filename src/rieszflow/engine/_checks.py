"""Input validation shared by the particle core (space, energy, simulate).

Every check raises :class:`ValueError` or :class:`TypeError` with a message
that names the parameter, the value received and what is allowed.

Value checks that need the array's contents (finiteness, signs) run only on
host (NumPy) arrays: on CuPy they would force a device synchronisation inside
a time step, so there only shapes and dtypes are checked.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from rieszflow.engine.backend import namespace, on_host


def is_host(x) -> bool:
    """True when ``x`` is a NumPy array (value checks are cheap and sync-free).

    False for CuPy arrays and for the counting stand-ins of device arrays
    (``engine.backend.CountingArray``), which take the device's code paths.
    """
    return on_host(x)


def check_real(name: str, value, *, positive: bool = False, nonnegative: bool = False,
               allow_inf: bool = False, low: float | None = None, high: float | None = None,
               low_open: bool = False, high_open: bool = False) -> float:
    """Validate a real scalar and return it as a Python float.

    The one scalar validator of rieszflow: configs, engine entry points and the theory
    package call it, so every message has the same form (parameter, value, what is allowed).

    Parameters
    ----------
    name : str
        Parameter name used in error messages.
    value : object
        Candidate scalar (Python or NumPy real, or a 0-d real array).
    positive, nonnegative : bool
        Require ``value > 0`` (``value >= 0``).
    allow_inf : bool
        Accept ``+inf`` (e.g. ``beta = inf`` for zero temperature).
    low, high : float, optional
        Interval bounds; ``low_open``/``high_open`` make them strict. The message states
        the interval, e.g. ``[0, 1)``.

    Returns
    -------
    float

    Raises
    ------
    TypeError
        If ``value`` is not a real number (bool is rejected).
    ValueError
        If ``value`` is NaN, infinite (unless allowed), has the wrong sign, or lies outside
        ``[low, high]`` (with the stated openness).
    """
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, np.floating, np.integer)):
        if not (isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "fiu"):
            raise TypeError(f"{name} must be a real number, got {value!r} of type {type(value).__name__}")
    v = float(value)
    if math.isnan(v):
        raise ValueError(f"{name} must not be NaN, got {value!r}")
    if math.isinf(v) and not (allow_inf and v > 0):
        allowed = "a finite number or +inf" if allow_inf else "a finite number"
        raise ValueError(f"{name} must be {allowed}, got {value!r}")
    if positive and not v > 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    if nonnegative and not v >= 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    if low is not None or high is not None:
        lo = -math.inf if low is None else low
        hi = math.inf if high is None else high
        ok = (v > lo if low_open else v >= lo) and (v < hi if high_open else v <= hi)
        if not ok:
            if high is None:
                raise ValueError(f"{name} must be {'>' if low_open else '>='} {lo:g}, got {value!r}")
            if low is None:
                raise ValueError(f"{name} must be {'<' if high_open else '<='} {hi:g}, got {value!r}")
            lb, rb = ("(" if low_open else "["), (")" if high_open else "]")
            raise ValueError(f"{name}={value!r} is not allowed; expected a value in {lb}{lo:g}, {hi:g}{rb}")
    return v


def check_int(name: str, value, *, minimum: int | None = None) -> int:
    """Validate an integer scalar (bool rejected) and return it as ``int``.

    Raises
    ------
    TypeError
        If ``value`` is not an integer.
    ValueError
        If ``value < minimum``.
    """
    if isinstance(value, bool) or not isinstance(value, (numbers.Integral, np.integer)):
        raise TypeError(f"{name} must be an integer, got {value!r} of type {type(value).__name__}")
    v = int(value)
    if minimum is not None and v < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {v}")
    return v


def check_choice(name: str, value, allowed) -> str:
    """Validate that ``value`` is one of ``allowed`` (strings).

    Raises
    ------
    ValueError
        If ``value`` is not in ``allowed``.
    """
    if value not in allowed:
        raise ValueError(f"{name}={value!r} is not supported; allowed: "
                         + ", ".join(repr(a) for a in allowed))
    return value


def as_float_array(name: str, x):
    """Convert ``x`` to a floating array of its own backend (lists become NumPy).

    Integer and boolean arrays are promoted to float64; float32/float64 are kept.

    Raises
    ------
    TypeError
        If ``x`` has a complex or non-numeric dtype.
    """
    xp = namespace(x)
    x = xp.asarray(x)
    kind = x.dtype.kind
    if kind in "biu":
        return x.astype(xp.float64)
    if kind != "f":
        raise TypeError(f"{name} must be a real floating array, got dtype {x.dtype}")
    return x


def check_points(name: str, x, *, d: int | None = None, min_n: int = 1, finite: bool = True):
    """Validate a particle array of shape ``(N, d)`` and return it as a float array.

    Parameters
    ----------
    name : str
        Parameter name for messages (``"omega"``, ``"x"``...).
    x : array_like, shape (N, d)
    d : int, optional
        Required number of columns.
    min_n : int
        Minimal number of rows.
    finite : bool
        Reject NaN/inf entries (host arrays only; see module docstring).

    Returns
    -------
    array, shape (N, d), floating dtype

    Raises
    ------
    ValueError
        On a wrong number of dimensions, columns or rows, or non-finite values.
    """
    x = as_float_array(name, x)
    if x.ndim != 2:
        raise ValueError(f"{name} must have shape (N, d), got an array of shape {tuple(x.shape)}")
    n, dd = x.shape
    if dd < 1:
        raise ValueError(f"{name} must have at least one column, got shape {tuple(x.shape)}")
    if d is not None and dd != d:
        raise ValueError(f"{name} must have d={d} columns, got shape {tuple(x.shape)}")
    if n < min_n:
        raise ValueError(f"{name} must have at least {min_n} rows, got shape {tuple(x.shape)}")
    if finite and is_host(x) and not np.isfinite(x).all():
        bad = int(np.count_nonzero(~np.isfinite(x)))
        raise ValueError(f"{name} contains {bad} non-finite entries (NaN or inf); all must be finite")
    return x


def check_vector(name: str, v, *, n: int | None = None, finite: bool = True):
    """Validate a 1-D float array (labels, phases, energies) of optional length ``n``.

    Raises
    ------
    ValueError
        On a wrong shape or non-finite values (host arrays only).
    """
    v = as_float_array(name, v)
    if v.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {tuple(v.shape)}")
    if n is not None and v.shape[0] != n:
        raise ValueError(f"{name} must have length {n}, got shape {tuple(v.shape)}")
    if finite and is_host(v) and not np.isfinite(v).all():
        raise ValueError(f"{name} contains non-finite entries (NaN or inf); all must be finite")
    return v
