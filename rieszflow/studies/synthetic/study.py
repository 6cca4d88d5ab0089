"""``rieszflow synthetic``: paper 000's synthetic benchmark (App. F.1) as a sweep on dask.distributed.

One task is one (method, sigma, trial): the labels of (sigma, trial) are drawn from a stream
keyed on (sigma, trial) alone, so every method of a trial sees the same labels (paired
comparisons); the method's own randomness comes from the task's stream
(:meth:`rieszflow.studies.sweep.Task.seed_sequence`). Built so far: the data of F.1.1 and the
baselines (1)-(3) of F.1.2 (logistic regression, RBF-SVM at gamma = 0.5 and the mis-specified
0.01 and 100, RFF + linear SVM); docs/synthetic.md lists what is not built yet.

References
----------
Paper 000, App. F.1.1-F.1.5.
"""
from __future__ import annotations

import dataclasses
import time

import numpy as np

from rieszflow.studies.base import StudyConfig, config_int, config_real
from rieszflow.studies.synthetic.data import draw_labels, make_dataset
from rieszflow.studies.synthetic.methods import METHODS
from rieszflow.studies.sweep import SweepSpec, Task

__all__ = ["SyntheticConfig", "QUICK_OVERRIDES", "benchmark_task", "benchmark_spec", "format_summary"]


@dataclasses.dataclass(frozen=True)
class SyntheticConfig(StudyConfig):
    """Configuration of the synthetic benchmark (defaults: the paper's, App. F.1).

    Parameters
    ----------
    n : int
        Points (``>= 10``); 400 in the paper.
    p : int
        Input dimension (``>= 5``); 10.
    D : int
        Feature budget of the random-feature methods; 200.
    gamma : float
        RFF bandwidth (``W ~ N(0, 2 gamma I)``); 0.5.
    data_seed : int
        Global seed of X, w and the split; 42.
    sigmas : tuple of float
        Logit noise levels; 11 log-spaced values in [1e-5, 1e5].
    trials : int
        Trials per (method, sigma); 3.
    methods : tuple of str
        Names from :data:`rieszflow.studies.synthetic.methods.METHODS`.
    seed : int
        Root seed of the task streams.
    backend : str
        Array backend (``"numpy"``; the classical models are scikit-learn's).

    Raises
    ------
    ValueError
        On an out-of-range value or an unknown method (the message lists the allowed ones).
    """

    n: int = 400
    p: int = 10
    D: int = 200
    gamma: float = 0.5
    data_seed: int = 42
    sigmas: tuple = tuple(float(v) for v in np.logspace(-5, 5, 11))
    trials: int = 3
    methods: tuple = tuple(METHODS)
    seed: int = 0
    backend: str = "numpy"

    def __post_init__(self):
        config_int("n", self.n, minimum=10)
        config_int("p", self.p, minimum=5)
        config_int("D", self.D, minimum=1)
        config_real("gamma", self.gamma, positive=True)
        config_int("data_seed", self.data_seed, minimum=0)
        config_int("trials", self.trials, minimum=1)
        config_int("seed", self.seed, minimum=0)
        sigmas = tuple(float(config_real("sigmas", s, nonnegative=True)) for s in self.sigmas)
        if not sigmas or len(set(sigmas)) != len(sigmas):
            raise ValueError(f"sigmas={self.sigmas!r}: need distinct noise levels")
        methods = tuple(self.methods)
        unknown = [m for m in methods if m not in METHODS]
        if unknown or not methods:
            raise ValueError(f"methods: unknown {unknown or 'empty list'}; allowed: {', '.join(METHODS)}")
        if self.backend != "numpy":
            raise ValueError(f"backend={self.backend!r}: the benchmark runs on numpy only")
        object.__setattr__(self, "sigmas", sigmas)
        object.__setattr__(self, "methods", methods)



#: ``--quick``: every built method, five noise levels, two trials (seconds on 2 cores).
QUICK_OVERRIDES = {"sigmas": (1e-5, 1e-2, 1.0, 1e2, 1e5), "trials": 2}


def benchmark_task(task: Task, config: dict, rng: np.random.Generator):
    """One (method, sigma, trial) of App. F.1: fit on the train split, score on the test split.

    Parameters
    ----------
    task : rieszflow.studies.sweep.Task
        Method name and the grid parameter ``sigma``.
    config : dict
        :meth:`SyntheticConfig.to_dict`.
    rng : numpy.random.Generator
        The method's own randomness (the task's stream).

    Returns
    -------
    xarray.Dataset
        Scalars ``accuracy``, ``f1`` (binary, positive class, zero_division = 0), ``seconds``
        (wall time of the method from features to test predictions), ``test_positive_rate``.

    References
    ----------
    Paper 000, App. F.1.4 (metrics and timing).
    """
    import xarray as xr
    from sklearn.metrics import accuracy_score, f1_score

    data = make_dataset(config["n"], config["p"], config["data_seed"])
    sigma = float(dict(task.params)["sigma"])
    labels = Task(task.sweep, "labels", task.params, task.trial).seed_sequence(config["seed"])
    y = draw_labels(data.logit, sigma, np.random.default_rng(labels))
    X_train, X_test = data.X[data.train], data.X[data.test]
    t0 = time.perf_counter()
    y_pred = METHODS[task.method](X_train, y[data.train], X_test, rng, config)
    seconds = time.perf_counter() - t0
    y_test = y[data.test]
    return xr.Dataset({
        "accuracy": ((), accuracy_score(y_test, y_pred), {"long_name": "test accuracy", "units": "1"}),
        "f1": ((), f1_score(y_test, y_pred, zero_division=0),
               {"long_name": "test F1 score (binary, positive class, zero_division = 0)", "units": "1"}),
        "seconds": ((), seconds, {"long_name": "wall time of the method (features to test predictions)",
                                  "units": "s"}),
        "test_positive_rate": ((), float(np.mean(y_test)),
                               {"long_name": "fraction of positive test labels", "units": "1"}),
    })


def benchmark_spec(cfg: SyntheticConfig) -> SweepSpec:
    """The sweep of Fig. 1: ``methods x sigma x trials`` of :func:`benchmark_task`.

    Parameters
    ----------
    cfg : SyntheticConfig

    Returns
    -------
    rieszflow.studies.sweep.SweepSpec
    """
    return SweepSpec(name="benchmark", function="rieszflow.studies.synthetic.study:benchmark_task",
                     methods=cfg.methods, grid={"sigma": cfg.sigmas}, trials=cfg.trials,
                     config=cfg.to_dict(), root_seed=cfg.seed, units={"sigma": "1"})


def format_summary(ds) -> str:
    """Accuracy and F1 per method and sigma: mean +- sd over trials (NaN-aware), as printed.

    Parameters
    ----------
    ds : xarray.Dataset
        :func:`rieszflow.studies.sweep.open_sweep` of the benchmark sweep.

    Returns
    -------
    str
    """
    lines = []
    for var in ("accuracy", "f1"):
        lines.append(f"{var}: mean +- sd over trials (n = trials with a result)")
        head = f"{'method':<20}" + "".join(f"{'sigma=' + format(float(s), '.0e'):>18}" for s in ds.sigma.values)
        lines.append(head)
        for m in ds.method.values:
            row = f"{str(m):<20}"
            for s in ds.sigma.values:
                v = ds[var].sel({"method": m, "sigma": s}).values.astype(float)   # not sel(method=): a keyword of sel
                k = int(np.isfinite(v).sum())
                if k == 0:
                    row += f"{'n/a':>18}"
                else:
                    sd = float(np.nanstd(v, ddof=1)) if k > 1 else float("nan")
                    row += f"{np.nanmean(v):>9.3f}+-{sd:<5.3f}" + f"({k})".rjust(2)
            lines.append(row)
        lines.append("")
    return "\n".join(lines).rstrip()
