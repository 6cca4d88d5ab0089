"""What a sweep is: :class:`Task` (one method, parameters and trial, with its seed), :class:`SweepSpec`
(the product ``methods x grid x trials``) and :class:`SweepSummary` (what a run of it did)."""
from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import math
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from rieszflow.studies.sweep.executor import JobsSummary

__all__ = ["Task", "SweepSpec", "SweepSummary", "TASK_KIND", "SWEEP_KIND"]


#: ``kind`` root attribute of a task file and of the merged file.
TASK_KIND, SWEEP_KIND = "sweep_task", "sweep"


def _canonical(value):
    """A JSON-able, type-stable form of a parameter value (bool, int, float, str)."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        v = float(value)
        if not math.isfinite(v):
            raise ValueError(f"sweep parameter values must be finite; got {value!r}")
        return v
    if isinstance(value, str):
        return value
    raise TypeError(f"sweep parameter values must be bool, int, float or str; got "
                    f"{type(value).__name__} {value!r}")


def _format_value(v) -> str:
    if isinstance(v, float):
        return format(v, ".6g")
    return str(v)


@dataclasses.dataclass(frozen=True)
class Task:
    """One (method, parameters, trial) job of a sweep.

    Parameters
    ----------
    sweep : str
        Name of the sweep the task belongs to.
    method : str
        Method name.
    params : tuple of (str, value) pairs
        Grid parameters in the sweep's grid order; values bool, int, float or str.
    trial : int
        Trial index, ``>= 0``.
    """

    sweep: str
    method: str
    params: tuple
    trial: int

    def as_dict(self) -> dict:
        """The task as a JSON-able mapping.

        Returns
        -------
        dict
            ``sweep``, ``method``, ``params`` (dict) and ``trial``.
        """
        return {"sweep": self.sweep, "method": self.method, "params": dict(self.params),
                "trial": int(self.trial)}

    @property
    def key(self) -> str:
        """Canonical JSON of the task (sorted keys): its identity, independent of list order."""
        d = self.as_dict()
        d["params"] = {k: _canonical(v) for k, v in sorted(d["params"].items())}
        return json.dumps(d, sort_keys=True, separators=(",", ":"))

    @property
    def digest(self) -> str:
        """SHA-256 of :attr:`key`, hexadecimal."""
        return hashlib.sha256(self.key.encode()).hexdigest()

    def seed_sequence(self, root_seed: int) -> np.random.SeedSequence:
        """The task's random stream, keyed on its names and the root seed.

        Parameters
        ----------
        root_seed : int
            The sweep's root seed, ``>= 0``.

        Returns
        -------
        numpy.random.SeedSequence
            Entropy ``[root_seed, *SHA-256(key) as eight uint32 words]``: the same for the same
            task in any sweep that contains it, whatever else the sweep holds.
        """
        words = np.frombuffer(bytes.fromhex(self.digest), dtype=">u4").astype(np.uint64)
        return np.random.SeedSequence([int(root_seed), *[int(w) for w in words]])

    @property
    def filename(self) -> str:
        """File name of the task's HDF5 file: readable names plus a digest (unique)."""
        parts = [self.method] + [f"{k}={_format_value(v)}" for k, v in self.params] + [f"trial{self.trial}"]
        safe = "__".join(parts).replace("/", "_").replace(" ", "_")
        return f"{safe}__{self.digest[:10]}.h5"


@dataclasses.dataclass(frozen=True)
class SweepSpec:
    """A sweep: a task function over ``methods x grid x trials`` with a shared configuration.

    Parameters
    ----------
    name : str
        Sweep name (file names, the merged file ``<name>.h5``); letters, digits, ``_``, ``-``.
    function : str or callable
        The task function ``fn(task, config, rng) -> xarray.Dataset``: ``"package.module:function"``
        (importable on every worker), or the function itself, e.g. one defined in the user's
        script: it is then shipped to the workers by value (cloudpickle, as dask.distributed does
        for ``__main__``) and named ``"module:qualname"`` in the files. Lambdas and functions
        defined inside another function are refused (their names do not identify them).
        The name is the task files' identity of the function: a script run as
        ``python script.py`` names it ``__main__:fn``, so resume a sweep the way it was started.
    methods : tuple of str
        Method names (non-empty, distinct).
    grid : tuple of (str, tuple) pairs, or a mapping
        Parameter name to its values (each non-empty, distinct); the order is the order of the
        merged dimensions.
    trials : int
        Trials per (method, grid point), ``>= 1``.
    config : mapping
        Shared JSON-able configuration passed to every task (stored in every task file: a task
        file written under another configuration is an error, not a skip).
    root_seed : int, default 0
        Root of every task's :meth:`Task.seed_sequence`.
    units : mapping of str to str, optional
        Units of the grid parameters (default ``"1"``).
    _callable : callable, optional
        Internal: the task function when ``function`` was given as one (set by the constructor,
        carried by ``dataclasses.replace``); not to be passed.

    Raises
    ------
    ValueError
        On an empty or repeated method or grid value, a bad name, ``trials < 1``, a negative
        seed, a configuration that is not JSON-able, or a lambda / local function.
    """

    name: str
    function: Any
    methods: tuple
    grid: Any
    trials: int
    config: Any = dataclasses.field(default_factory=dict)
    root_seed: int = 0
    units: Any = dataclasses.field(default_factory=dict)
    #: The task function itself when one was given (``function`` then holds its name); an init
    #: field so that ``dataclasses.replace`` keeps it.
    _callable: Any = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def task_function(self):
        """What the workers call: the function given to the spec, else its ``"module:function"``.

        Returns
        -------
        callable or str
        """
        return self._callable if self._callable is not None else self.function

    def __post_init__(self):
        import re

        if not isinstance(self.name, str) or not re.fullmatch(r"[A-Za-z0-9_-]+", self.name):
            raise ValueError(f"sweep name={self.name!r}: use letters, digits, '_' and '-'")
        if callable(self.function):
            fn = self.function
            qual = getattr(fn, "__qualname__", None)
            if not isinstance(qual, str) or not hasattr(fn, "__module__"):
                raise ValueError(f"function={fn!r}: not a function with a name (a functools.partial "
                                 f"or a callable object?); pass a module-level function and put "
                                 f"its parameters in config")
            if "<" in qual:
                raise ValueError(f"function={fn!r}: a lambda or a function defined inside another "
                                 f"function has no name that identifies it; define it at module level")
            object.__setattr__(self, "_callable", fn)
            object.__setattr__(self, "function", f"{fn.__module__}:{qual}")
        elif self._callable is not None:        # dataclasses.replace of a spec built from a function
            fn = self._callable
            if f"{fn.__module__}:{fn.__qualname__}" != self.function:
                raise ValueError(f"function={self.function!r} does not name the task function "
                                 f"{fn.__module__}:{fn.__qualname__}")
        if not isinstance(self.function, str) or ":" not in self.function:
            raise ValueError(f"function={self.function!r}: expected 'package.module:function' or a "
                             f"module-level function")
        methods = tuple(self.methods)
        if not methods or len(set(methods)) != len(methods) or not all(isinstance(m, str) and m for m in methods):
            raise ValueError(f"methods={methods!r}: need distinct non-empty names")
        grid = tuple((str(k), tuple(_canonical(v) for v in vals)) for k, vals in
                     (self.grid.items() if isinstance(self.grid, Mapping) else self.grid))
        for k, vals in grid:
            if not vals or len(set(vals)) != len(vals):
                raise ValueError(f"grid parameter {k!r}: need distinct values, got {vals!r}")
            if k in ("method", "trial"):
                raise ValueError(f"grid parameter name {k!r} is reserved")
        if isinstance(self.trials, bool) or not isinstance(self.trials, (int, np.integer)) or self.trials < 1:
            raise ValueError(f"trials={self.trials!r}: need an integer >= 1")
        if isinstance(self.root_seed, bool) or not isinstance(self.root_seed, (int, np.integer)) \
                or self.root_seed < 0:
            raise ValueError(f"root_seed={self.root_seed!r}: need an integer >= 0")
        try:
            config = json.loads(json.dumps(dict(self.config), sort_keys=True))
        except (TypeError, ValueError) as e:
            raise ValueError(f"config must be a JSON-able mapping ({e})") from None
        object.__setattr__(self, "methods", methods)
        object.__setattr__(self, "grid", grid)
        object.__setattr__(self, "trials", int(self.trials))
        object.__setattr__(self, "root_seed", int(self.root_seed))
        object.__setattr__(self, "config", config)
        object.__setattr__(self, "units", dict(self.units))

    def tasks(self) -> list[Task]:
        """Every task of the sweep, ``methods x grid x trials`` in that order.

        Returns
        -------
        list of Task
        """
        names = [k for k, _ in self.grid]
        out = []
        for method in self.methods:
            for values in itertools.product(*[v for _, v in self.grid]):
                for trial in range(self.trials):
                    out.append(Task(self.name, method, tuple(zip(names, values)), trial))
        return out

    def task_config(self, task: Task) -> dict:
        """What a task file stores as its configuration (compared when a sweep is rerun).

        Parameters
        ----------
        task : Task

        Returns
        -------
        dict
        """
        return {"task": task.as_dict(), "function": self.function, "config": self.config,
                "root_seed": self.root_seed}

    def to_dict(self) -> dict:
        """The spec as a JSON-able mapping (stored beside the task files as ``sweep.json``).

        Returns
        -------
        dict
        """
        return {"name": self.name, "function": self.function, "methods": list(self.methods),
                "grid": [[k, list(v)] for k, v in self.grid], "trials": self.trials,
                "config": self.config, "root_seed": self.root_seed, "units": self.units}


@dataclasses.dataclass
class SweepSummary(JobsSummary):
    """What :func:`run_sweep` did: :class:`~rieszflow.studies.sweep.executor.JobsSummary` of its
    tasks, and the sweep directory.

    Parameters
    ----------
    total, done, skipped, failed : int
        Tasks in the sweep; run to completion now; complete before (skipped); failed now.
    failures : list of dict
        One entry per failed task: ``task``, ``error``, ``traceback``.
    seconds : float
        Wall time of the call.
    outdir : pathlib.Path
        The sweep directory.
    """

    outdir: Path

    def format(self) -> str:
        """One paragraph: counts, wall time and every failure (task and exception).

        Returns
        -------
        str
        """
        lines = [f"sweep {self.outdir}: {self.counts()}, in {self.seconds:.1f} s"]
        for f in self.failures:
            lines.append(f"  FAILED {json.dumps(f['task'], sort_keys=True)}: {f['error']}")
        if self.failures:
            lines.append(f"  tracebacks in {self.outdir / 'failures.json'}")
        return "\n".join(lines)
