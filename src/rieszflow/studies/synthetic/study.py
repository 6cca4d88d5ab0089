"""``rieszflow synthetic``: paper 000's synthetic benchmark (App. F.1) as a sweep on dask.distributed.

One task is one (method, sigma, trial): the labels of (sigma, trial) are drawn from a stream
keyed on (sigma, trial) alone, so every method of a trial sees the same labels (paired
comparisons); the method's own randomness comes from the task's stream
(:meth:`rieszflow.studies.sweep.Task.seed_sequence`). Built: the data of F.1.1, every method of
F.1.2 (MKL (4) through the optional extra ``mkl``: without it its tasks are recorded as
unavailable, not failed), the interaction ablation (F.1.7) and the runtime law (Table 4); see
docs/synthetic.md.

References
----------
Paper 000, App. F.1.1-F.1.5.
"""
from __future__ import annotations

import dataclasses
import json
import time

import numpy as np

from rieszflow.config import StudyConfig, config_int, config_real
from rieszflow.engine.stats import power_law_fit
from rieszflow.studies.synthetic.data import draw_labels, make_dataset
from rieszflow.studies.synthetic.methods import (BENCHMARK_METHODS, METHODS, MethodUnavailable,
                                                 missing_dependency, rff_linear_svm)
from rieszflow.studies.sweep import SweepSpec, Task
from rieszflow.engine.energy import check_s
from rieszflow.engine.storage import RunLock, read_hdf5
from rieszflow.studies.synthetic.methods import OPTIONAL_DEPENDENCIES
from rieszflow.studies.synthetic.verdicts import (ALPHA, claim_summary, format_claim, format_resampling,
                                                  min_pairs, sigma_verdict, split_ceilings)

__all__ = ["SyntheticConfig", "QUICK_OVERRIDES", "POWER_OVERRIDES", "ABLATION_METHODS", "benchmark_task", "benchmark_spec",
           "ablation_spec", "runtime_spec", "specs", "format_summary", "fit_power_law",
           "format_runtime", "format_ablation", "format_verdicts", "ablation_verdicts", "GRID_FIELDS",
           "task_config", "unavailable_methods", "format_unavailable", "retry_unavailable",
           "PAPER_TABLE4"]


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
        Names from :data:`rieszflow.studies.synthetic.methods.METHODS` for Fig. 1 and the runtime
        law (default ``BENCHMARK_METHODS``; ``langevin_log``/``langevin_riesz`` need the ablation's
        lam grid).
    langevin_N, langevin_steps : int
        Particles (300) and steps T_max (2000) of the Langevin features.
    langevin_eta, langevin_beta, langevin_radius, langevin_clip : float
        Step (30), inverse temperature (100), frequency-norm bound (5) and gradient clip (1).
    sd_candidates : int
        Sinha-Duchi candidate features N_w (1e4).
    sd_rho_fraction : float
        Divergence budget rho = N_w * sd_rho_fraction (0.005).
    sd_tol : float
        Relative bisection tolerance (1e-10).
    ablation_lams : tuple of float
        Interaction strengths lam of the ablation (F.1.7, Fig. 3).
    ablation_s : float
        Riesz exponent of the non-log ablation kernel (the paper does not state it; default 1).
    ablation_sigmas : tuple of float
        Noise levels of the ablation.
    ablation_trials : int
        Trials of the ablation (10).
    runtime_sizes : tuple of int
        Sizes n of the runtime law (Fig. 2, Table 4): 8 log-spaced values.
    runtime_sigma : float
        Noise level of the runtime law (1).
    runtime_trials : int
        Trials of the runtime law (3).
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
    sigmas: tuple = tuple(float(f"{v:.12g}") for v in np.logspace(-5, 5, 11))
    trials: int = 3
    methods: tuple = BENCHMARK_METHODS
    langevin_N: int = 300
    langevin_steps: int = 2000
    langevin_eta: float = 30.0
    langevin_beta: float = 100.0
    langevin_radius: float = 5.0
    langevin_clip: float = 1.0
    sd_candidates: int = 10_000
    sd_rho_fraction: float = 0.005
    sd_tol: float = 1e-10
    ablation_lams: tuple = (0.0, 0.2, 0.5, 0.8, 1.0, 1.5)
    ablation_s: float = 1.0
    ablation_sigmas: tuple = tuple(float(f"{v:.12g}") for v in np.logspace(-5, 5, 11))
    ablation_trials: int = 10
    runtime_sizes: tuple = tuple(int(round(v)) for v in np.logspace(np.log10(100), np.log10(3200), 8))
    runtime_sigma: float = 1.0
    runtime_trials: int = 3
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
        config_int("langevin_N", self.langevin_N, minimum=2)
        config_int("sd_candidates", self.sd_candidates, minimum=2)
        config_real("sd_rho_fraction", self.sd_rho_fraction, positive=True)
        config_real("sd_tol", self.sd_tol, positive=True)
        config_int("langevin_steps", self.langevin_steps, minimum=0)
        for name in ("langevin_eta", "langevin_beta", "langevin_radius", "langevin_clip"):
            config_real(name, getattr(self, name), positive=True)
        sigmas = tuple(float(config_real("sigmas", s, nonnegative=True)) for s in self.sigmas)
        if not sigmas or len(set(sigmas)) != len(sigmas):
            raise ValueError(f"sigmas={self.sigmas!r}: need distinct noise levels")
        methods = tuple(self.methods)
        unknown = [m for m in methods if m not in METHODS]
        if unknown or not methods:
            raise ValueError(f"methods: unknown {unknown or 'empty list'}; allowed: {', '.join(METHODS)}")
        config_int("ablation_trials", self.ablation_trials, minimum=1)
        config_int("runtime_trials", self.runtime_trials, minimum=1)
        config_real("runtime_sigma", self.runtime_sigma, nonnegative=True)
        try:
            check_s(self.ablation_s)
        except (TypeError, ValueError) as e:
            raise ValueError(f"ablation_s: {e}") from None
        for name in ("ablation_lams", "ablation_sigmas"):
            vals = tuple(float(config_real(name, v, nonnegative=True)) for v in getattr(self, name))
            if not vals or len(set(vals)) != len(vals):
                raise ValueError(f"{name}={getattr(self, name)!r}: need distinct values")
            object.__setattr__(self, name, vals)
        sizes = tuple(config_int("runtime_sizes", v, minimum=10) for v in self.runtime_sizes)
        if len(sizes) < 3 or len(set(sizes)) != len(sizes):
            raise ValueError(f"runtime_sizes={self.runtime_sizes!r}: need >= 3 distinct sizes (a power-law fit)")
        object.__setattr__(self, "runtime_sizes", sizes)
        if self.backend != "numpy":
            raise ValueError(f"backend={self.backend!r}: the benchmark runs on numpy only")
        object.__setattr__(self, "sigmas", sigmas)
        object.__setattr__(self, "methods", methods)



#: ``--quick``: every built method, fewer noise levels, trials, sizes and interaction strengths
#: (measured wall time in docs/synthetic.md).
QUICK_OVERRIDES = {"sigmas": (1e-5, 1e-2, 1.0, 1e2, 1e5), "trials": 2,
                   "ablation_lams": (0.0, 0.5, 1.0), "ablation_sigmas": (1e-3, 1.0, 1e2),
                   "ablation_trials": 2,
                   "runtime_sizes": (50, 75, 110, 160, 240, 360, 540, 800), "runtime_trials": 2}

#: ``--preset power``: the benchmark at the noise levels that carry signal (and sigma = 100, where the
#: Bayes ceiling of the test split is 0.507, as the no-signal control) with 20 trials each, so that
#: every per-sigma paired test has up to 20 pairs (the exact Wilcoxon test needs >= 8 non-zero
#: pairs for p < 0.01); the fast baselines, RFF, Sinha-Duchi and the Langevin features of
#: F.1.6 (lam = 0.5; lam = 0 belongs to the ablation). By default it runs the benchmark sweep
#: only (docs/synthetic.md states its CPU time).
POWER_OVERRIDES = {"sigmas": (0.01, 0.1, 1.0, 10.0, 100.0), "trials": 20,
                   "methods": ("logistic", "rbf_svm", "rff_svm", "sinha_duchi_svm", "langevin_svm")}

#: Fields that only define which tasks exist (the grids): left out of the configuration stored in
#: and compared with every task file, so extending a grid reuses every complete task.
GRID_FIELDS = ("methods", "sigmas", "trials", "ablation_lams", "ablation_sigmas", "ablation_trials",
               "runtime_sizes", "runtime_trials")


def task_config(cfg: "SyntheticConfig") -> dict:
    """The configuration every task sees and stores: :class:`SyntheticConfig` without the grids.

    Parameters
    ----------
    cfg : SyntheticConfig

    Returns
    -------
    dict
    """
    return {k: v for k, v in cfg.to_dict().items() if k not in GRID_FIELDS}


#: Methods of the interaction ablation: Langevin features with lam from the grid (log and Riesz
#: repulsion) against plain RFF.
ABLATION_METHODS = ("rff_svm", "langevin_log", "langevin_riesz")


_WARM = set()


def _warm_up(method: str, X_train, y_train, X_test, config: dict) -> None:
    """Run ``method`` once per process on a tiny problem before it is timed.

    The first call in a worker pays for lazy imports and Numba compilation; the runtime law
    would otherwise measure them at whichever n a worker happens to run first.
    """
    if method in _WARM:
        return
    k = min(20, X_train.shape[0])
    y = y_train[:k].copy()
    y[: k // 2], y[k // 2:] = 0, 1                    # both classes present
    tiny = {**config, "langevin_steps": 2, "langevin_N": min(int(config["langevin_N"]), 8),
            "D": min(int(config["D"]), 8)}
    METHODS[method](X_train[:k], y, X_test[:5], np.random.default_rng(0), tiny)
    _WARM.add(method)


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
        (wall time of the method from features to test predictions, after a per-process warm-up
        that pays for imports and Numba compilation), ``test_positive_rate``, ``available``
        (1: the method ran; 0: it raised
        :class:`~rieszflow.studies.synthetic.methods.MethodUnavailable`, its optional dependency
        is missing: accuracy, f1 and seconds are NaN, the variable's ``reason`` attribute and the
        root attribute ``unavailable_reason`` say why);
        ``cpu_seconds`` (CPU time of the whole task in its process);
        for the Langevin methods also ``omega`` (feature, coord) and ``phase`` (feature) of the
        D resampled features, and the row without resampling: ``accuracy_all_particles`` and
        ``f1_all_particles`` (the same linear SVM on all N final particles of the same chain,
        fitted after the timed call), ``distinct_frequencies`` (distinct particles among the D
        resampled) and ``n_particles``; for ``mkl_memo`` also ``kernel_weight`` (kernel_gamma).

    References
    ----------
    Paper 000, App. F.1.4 (metrics and timing).
    """
    import xarray as xr
    from sklearn.metrics import accuracy_score, f1_score

    cpu0 = time.process_time()
    params = dict(task.params)
    data = make_dataset(int(params.get("n", config["n"])), config["p"], config["data_seed"])
    sigma = float(params.get("sigma", config["runtime_sigma"]))
    # the labels of (grid point, trial) are shared by every method: paired comparisons; the
    # method's own parameters (lam) do not enter them
    shared = tuple((k, v) for k, v in task.params if k != "lam")
    labels = Task(task.sweep, "labels", shared, task.trial).seed_sequence(config["seed"])
    y = draw_labels(data.logit, sigma, np.random.default_rng(labels))
    X_train, X_test = data.X[data.train], data.X[data.test]
    method_config = {**config, **params}
    y_test = y[data.test]
    try:
        _warm_up(task.method, X_train, y[data.train], X_test, method_config)
        t0 = time.perf_counter()
        y_pred = METHODS[task.method](X_train, y[data.train], X_test, rng, method_config)
        seconds = time.perf_counter() - t0
    except MethodUnavailable as e:                # an optional extra missing: recorded, not failed
        return _unavailable_result(e, y_test)
    extras = {}
    if isinstance(y_pred, tuple):                 # (predictions, learned arrays)
        y_pred, learned = y_pred
        extras = _learned_variables(learned)
        if "omega_all" in learned:                # the no-resampling row: all N particles, untimed
            y_all = rff_linear_svm(X_train, y[data.train], X_test, learned["omega_all"], learned["b_all"])
            extras.update(_all_particle_variables(y_test, y_all, learned))
    ds = xr.Dataset({
        "accuracy": ((), accuracy_score(y_test, y_pred), {"long_name": "test accuracy", "units": "1"}),
        "f1": ((), f1_score(y_test, y_pred, zero_division=0),
               {"long_name": "test F1 score (binary, positive class, zero_division = 0)", "units": "1"}),
        "seconds": ((), seconds, {"long_name": "wall time of the method (features to test predictions)",
                                  "units": "s"}),
        "test_positive_rate": ((), float(np.mean(y_test)),
                               {"long_name": "fraction of positive test labels", "units": "1"}),
        "available": ((), 1.0, dict(_AVAILABLE_ATTRS)),
        **extras,
        "cpu_seconds": ((), time.process_time() - cpu0, dict(_CPU_ATTRS)),
    })
    for dim, name in (("feature", "feature index (of the D used)"), ("coord", "input coordinate")):
        if dim in ds.dims:
            ds = ds.assign_coords({dim: (dim, np.arange(ds.sizes[dim]), {"long_name": name, "units": "1"})})
    if "kernel_gamma" in ds.dims:
        ds = ds.assign_coords(kernel_gamma=("kernel_gamma", learned["kernel_gamma"],
                                            {"long_name": "bandwidth gamma of the Gaussian kernel "
                                                          "exp(-gamma |x - x'|^2)", "units": "1"}))
    return ds


_CPU_ATTRS = {"long_name": "CPU time of the task's process (data, labels, per-process warm-up, method, "
                          "no-resampling fit)", "units": "s"}


def _all_particle_variables(y_test, y_all, learned: dict) -> dict:
    """The Langevin row without resampling: accuracy and F1 of the linear SVM on all N final
    particles, and the number of distinct particles among the D that Gibbs resampling kept."""
    from sklearn.metrics import accuracy_score, f1_score

    n_all = int(learned["omega_all"].shape[0])
    return {
        "accuracy_all_particles": ((), accuracy_score(y_test, y_all),
                                   {"long_name": f"test accuracy with all N = {n_all} Langevin particles "
                                                 f"as features (no Gibbs resampling)", "units": "1"}),
        "f1_all_particles": ((), f1_score(y_test, y_all, zero_division=0),
                             {"long_name": f"test F1 with all N = {n_all} Langevin particles as features "
                                           f"(binary, zero_division = 0)", "units": "1"}),
        "distinct_frequencies": ((), float(learned["distinct"]),
                                 {"long_name": "distinct particles among the D Gibbs-resampled features",
                                  "units": "1"}),
        "n_particles": ((), float(n_all), {"long_name": "Langevin particles N", "units": "1"}),
    }


_AVAILABLE_ATTRS = {"long_name": "1: the method ran; 0: unavailable here (an optional dependency is "
                                 "missing; its metrics are NaN)", "units": "1"}


def _learned_variables(learned: dict) -> dict:
    """The learned arrays a method returned, as task variables (long_name and units each)."""
    out = {}
    if "omega" in learned:
        out["omega"] = (("feature", "coord"), learned["omega"],
                        {"long_name": "learned frequencies omega (features used by the SVM)", "units": "1"})
        out["phase"] = (("feature",), learned["b"],
                        {"long_name": "fixed phases b of the learned features", "units": "rad"})
    if "kernel_weight" in learned:
        out["kernel_weight"] = (("kernel_gamma",), learned["kernel_weight"],
                                {"long_name": "MKL weight of the Gaussian kernel (non-negative, summing "
                                              "to 1)", "units": "1"})
    return out


def _unavailable_result(error: MethodUnavailable, y_test):
    """The task result of a method whose optional dependency is missing: NaN metrics,
    ``available = 0`` and the reason (variable attribute ``reason``, root ``unavailable_reason``)."""
    import xarray as xr

    nan = float("nan")
    ds = xr.Dataset({
        "accuracy": ((), nan, {"long_name": "test accuracy", "units": "1"}),
        "f1": ((), nan, {"long_name": "test F1 score (binary, positive class, zero_division = 0)",
                         "units": "1"}),
        "seconds": ((), nan, {"long_name": "wall time of the method (features to test predictions)",
                              "units": "s"}),
        "test_positive_rate": ((), float(np.mean(y_test)),
                               {"long_name": "fraction of positive test labels", "units": "1"}),
        "available": ((), 0.0, {**_AVAILABLE_ATTRS, "reason": error.reason}),
    })
    ds.attrs["unavailable_reason"] = error.reason
    return ds


def unavailable_methods(ds) -> dict:
    """Methods of a merged benchmark or runtime sweep recorded as unavailable in some task.

    Parameters
    ----------
    ds : xarray.Dataset
        :func:`rieszflow.studies.sweep.open_sweep` of a sweep of :func:`benchmark_task` (task
        files without the ``available`` variable, written before it existed, count as run).

    Returns
    -------
    dict
        Method -> ``(k_unavailable, k_complete)``: tasks recorded unavailable, tasks with a file
        (``available`` 0 or 1). Methods that ran everywhere are left out.
    """
    if "available" not in ds:
        return {}
    out = {}
    for m in ds.method.values:
        v = ds["available"].sel({"method": m}).values.astype(float)
        k = int((v == 0).sum())
        if k:
            out[str(m)] = (k, int(np.isfinite(v).sum()))
    return out


def _all_unavailable(ds, method) -> bool:
    counts = unavailable_methods(ds).get(str(method))
    return counts is not None and counts[0] == counts[1]


def format_unavailable(ds) -> str:
    """One line per method recorded as unavailable: why, how to install it, how to rerun.

    Parameters
    ----------
    ds : xarray.Dataset
        A merged sweep of :func:`benchmark_task`.

    Returns
    -------
    str
        E.g. ``"mkl_memo: unavailable (MKLpy not installed: pip install -e '.[mkl]' ...) in 6 of 6
        tasks; ..."``; empty when every method ran.
    """
    lines = []
    for m, (k, total) in unavailable_methods(ds).items():
        module, install = OPTIONAL_DEPENDENCIES.get(m, ("its optional dependency", "see docs/synthetic.md"))
        lines.append(f"{m}: unavailable ({module} not installed: {install}) in {k} of {total} tasks "
                     f"(recorded, not failed; after installing, rerunning the command runs them)")
    return "\n".join(lines)


def retry_unavailable(spec: SweepSpec, outdir, log=None) -> int:
    """Remove the task files that recorded a method as unavailable if it can run here now.

    An unavailable task is a complete file (the sweep skips complete tasks), so after installing
    the extra a rerun would keep the NaN; this removes those files (under the sweep's lock) so
    that :func:`rieszflow.studies.sweep.run_sweep` runs them. Availability is judged in this
    process (:func:`~rieszflow.studies.synthetic.methods.missing_dependency`); a worker that still
    lacks the extra records the task as unavailable again.

    Parameters
    ----------
    spec : rieszflow.studies.sweep.SweepSpec
        A sweep of :func:`benchmark_task`.
    outdir : str or os.PathLike
        Its directory.
    log : callable, optional
        Receives one line when files were removed.

    Returns
    -------
    int
        Task files removed.
    """
    from pathlib import Path

    outdir = Path(outdir)
    now = {m for m in spec.methods if m in OPTIONAL_DEPENDENCIES and missing_dependency(m) is None}
    if not now or not (outdir / "tasks").is_dir():
        return 0
    removed = 0
    lock = RunLock(outdir / spec.name)             # refused while another process runs the sweep
    lock.acquire()
    try:
        for task in spec.tasks():
            path = outdir / "tasks" / task.filename
            if task.method not in now or not path.is_file():
                continue
            with read_hdf5(path) as f:
                flag = float(f["available"][()]) if "available" in f else 1.0
            if flag == 0.0:
                path.unlink()
                removed += 1
    finally:
        lock.release()
    if removed and log:
        log(f"sweep {spec.name}: {removed} task(s) recorded {', '.join(sorted(now))} as unavailable; "
            f"it imports now: running them again")
    return removed


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
                     config=task_config(cfg), root_seed=cfg.seed, units={"sigma": "1"})


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
            if _all_unavailable(ds, m):
                lines.append(row + f"{'unavailable':>18}")
                continue
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
    if "cpu_seconds" in ds:
        cpu = ds["cpu_seconds"].values.astype(float)
        lines.append(f"CPU time of the tasks: {np.nansum(cpu):.0f} s ({np.nansum(cpu) / 60:.1f} CPU-minutes) "
                     f"over {int(np.isfinite(cpu).sum())} tasks (sum of cpu_seconds)")
    lines.append(format_unavailable(ds))
    return "\n".join(lines).rstrip()


def ablation_spec(cfg: SyntheticConfig) -> SweepSpec:
    """The interaction ablation of F.1.7 (Fig. 3): ``(rff_svm, langevin_log, langevin_riesz) x lam x
    sigma x trials``.

    Parameters
    ----------
    cfg : SyntheticConfig

    Returns
    -------
    rieszflow.studies.sweep.SweepSpec
    """
    return SweepSpec(name="ablation", function="rieszflow.studies.synthetic.study:benchmark_task",
                     methods=ABLATION_METHODS, grid={"lam": cfg.ablation_lams, "sigma": cfg.ablation_sigmas},
                     trials=cfg.ablation_trials, config=task_config(cfg), root_seed=cfg.seed,
                     units={"lam": "1", "sigma": "1"})


def runtime_spec(cfg: SyntheticConfig) -> SweepSpec:
    """The runtime law of Fig. 2 / Table 4: ``methods x n x trials`` at ``sigma = runtime_sigma``.

    Parameters
    ----------
    cfg : SyntheticConfig

    Returns
    -------
    rieszflow.studies.sweep.SweepSpec
    """
    return SweepSpec(name="runtime", function="rieszflow.studies.synthetic.study:benchmark_task",
                     methods=cfg.methods, grid={"n": cfg.runtime_sizes}, trials=cfg.runtime_trials,
                     config=task_config(cfg), root_seed=cfg.seed, units={"n": "1"})


def specs(cfg: SyntheticConfig) -> list:
    """The three sweeps of ``rieszflow synthetic``: benchmark, ablation, runtime.

    Parameters
    ----------
    cfg : SyntheticConfig

    Returns
    -------
    list of rieszflow.studies.sweep.SweepSpec
    """
    return [benchmark_spec(cfg), ablation_spec(cfg), runtime_spec(cfg)]


def fit_power_law(n, seconds):
    """Least-squares fit of ``log t = log c + gamma log n`` (Table 4's ``t(n) = c n^gamma``).

    The fit is :func:`rieszflow.engine.stats.power_law_fit` (``method="lstsq"``).

    Parameters
    ----------
    n : array_like, shape (k,)
        Sizes, ``> 0``; ``k >= 3`` finite pairs are needed.
    seconds : array_like, shape (k,)
        Wall times, ``> 0`` (NaN entries are dropped).

    Returns
    -------
    dict
        ``gamma`` (exponent), ``c`` (prefactor, s), ``sigma_log`` (standard deviation of the
        log residuals, ``ddof = 2``: two fitted parameters), ``gamma_se`` (its standard error)
        and ``n_obs``.

    Raises
    ------
    ValueError
        If fewer than 3 finite positive pairs remain.

    References
    ----------
    Paper 000, App. F, Table 4 and Fig. 2.
    """
    n = np.asarray(n, dtype=np.float64).ravel()
    t = np.asarray(seconds, dtype=np.float64).ravel()
    ok = np.isfinite(n) & np.isfinite(t) & (n > 0) & (t > 0)
    if ok.sum() < 3:
        raise ValueError(f"fit_power_law needs >= 3 finite positive (n, t) pairs; got {int(ok.sum())}")
    f = power_law_fit(n[ok], t[ok], method="lstsq")
    return {"gamma": f.slope, "c": f.prefactor, "sigma_log": f.residual_std,
            "gamma_se": f.slope_se, "n_obs": f.n_points}


#: Table 4 of paper 000 as printed: label -> (gamma, c, sigma_log, n_obs, method here or None).
PAPER_TABLE4 = {
    "MKL-SVM": (1.961, 8.00e-05, 0.671, 8, "mkl_memo"),
    "SVM (RBF kernel)": (1.477, 3.00e-06, 0.503, 8, "rbf_svm"),
    "Optimized RFF (lin SVM)": (0.967, 3.55e-04, 0.085, 8, "sinha_duchi_svm"),
    "RFF (linear SVM)": (0.799, 9.50e-05, 0.319, 8, "rff_svm"),
    "Langevin (Alg-1, lin SVM)": (0.730, 3.82e-01, 0.430, 8, "langevin_svm"),
    "Linear Logistic": (0.021, 1.16e-01, 0.290, 8, "logistic"),
}


def format_runtime(ds) -> str:
    """Table 4 measured (fit over the per-n mean wall times) next to the paper's values.

    Parameters
    ----------
    ds : xarray.Dataset
        :func:`rieszflow.studies.sweep.open_sweep` of the runtime sweep (dims method, n, trial).

    Returns
    -------
    str
    """
    lines = ["Runtime law t(n) = c n^gamma (fit over the per-n mean wall time of each method; "
             "paper 000 Table 4 beside)",
             f"{'model':<28}{'gamma':>14}{'c':>11}{'sigma_log':>10}{'n_obs':>6}   "
             f"{'paper gamma':>11}{'paper c':>10}{'sigma_log':>10}"]
    for label, (g, c, sl, nobs, method) in PAPER_TABLE4.items():
        paper = f"{g:>11.3f}{c:>10.2e}{sl:>10.3f}"
        if method is None or method not in ds.method.values:
            lines.append(f"{label:<28}{'not built' if method is None else 'not run':>14}{'':>11}{'':>10}"
                         f"{'':>6}   {paper}")
            continue
        if _all_unavailable(ds, method):
            lines.append(f"{label:<28}{'unavailable':>14}{'':>11}{'':>10}{'':>6}   {paper}")
            continue
        t = ds["seconds"].sel({"method": method}).mean("trial").values
        try:
            f = fit_power_law(ds.n.values, t)
        except ValueError:
            lines.append(f"{label:<28}{'no data':>14}{'':>11}{'':>10}{'':>6}   {paper}")
            continue
        lines.append(f"{label:<28}{f['gamma']:>8.3f}+-{f['gamma_se']:<4.2f}{f['c']:>11.2e}"
                     f"{f['sigma_log']:>10.3f}{f['n_obs']:>6d}   {paper}")
    note = format_unavailable(ds)
    return "\n".join(lines + ([note] if note else []))


def format_ablation(ds) -> str:
    """Accuracy per (method, lam) against sigma: mean +- sd over trials (Fig. 3 as a table).

    Parameters
    ----------
    ds : xarray.Dataset
        :func:`rieszflow.studies.sweep.open_sweep` of the ablation sweep (dims method, lam,
        sigma, trial).

    Returns
    -------
    str
    """
    lines = ["ablation (F.1.7): test accuracy, mean +- sd over trials",
             f"{'method':<16}{'lam':>5}" + "".join(f"{'sigma=' + format(float(s), '.0e'):>16}"
                                                   for s in ds.sigma.values)]
    for m in ds.method.values:
        for lam in ds.lam.values:
            row = f"{str(m):<16}{float(lam):>5.1f}"
            for s in ds.sigma.values:
                v = ds["accuracy"].sel({"method": m, "lam": lam, "sigma": s}).values.astype(float)
                if not np.isfinite(v).any():
                    row += f"{'n/a':>16}"
                else:
                    sd = float(np.nanstd(v, ddof=1)) if np.isfinite(v).sum() > 1 else float("nan")
                    row += f"{np.nanmean(v):>10.3f}+-{sd:<4.3f}"
            lines.append(row)
    return "\n".join(lines)


def _claim_rows(acc_a, acc_b, sigmas, ceilings):
    """``(sigma, a, b, verdict)`` per sigma for :func:`~.verdicts.format_claim` (a, b: DataArrays
    with dims (sigma, trial))."""
    rows = []
    for s in sigmas:
        a = np.asarray(acc_a.sel(sigma=s).values, dtype=float).ravel()
        b = np.asarray(acc_b.sel(sigma=s).values, dtype=float).ravel()
        rows.append((float(s), a, b, sigma_verdict(a, b, *ceilings[float(s)])))
    return rows


def _claim(title, acc_a, acc_b, ds):
    """A claim's summary line and its per-sigma table."""
    ceilings = split_ceilings(json.loads(ds.attrs["config"])["config"], ds.sigma.values)
    rows = _claim_rows(acc_a, acc_b, ds.sigma.values, ceilings)
    return format_claim(title, rows) + "\n" + claim_summary("  by sigma", rows)


def ablation_verdicts(ablation) -> str:
    """F.1.7's claims (lam in [0.5, 1] beats lam = 0 and vanilla RFF), per sigma.

    Each sigma of the ablation grid is tested on its own over the trials (paired), beside the
    Bayes ceiling of the test split (:mod:`rieszflow.studies.synthetic.verdicts`); a sigma
    without signal is "not decidable".

    Parameters
    ----------
    ablation : xarray.Dataset
        The merged ablation sweep.

    Returns
    -------
    str
    """
    lines = []
    mid = [v for v in ablation.lam.values if 0.5 <= float(v) <= 1.0]
    if not (mid and 0.0 in ablation.lam.values):
        return "F.1.7: the ablation grid has no lam in [0.5, 1] or no lam = 0"
    for method, kernel in (("langevin_log", "log"), ("langevin_riesz", "Riesz")):
        if method not in ablation.method.values:
            continue
        acc = ablation.accuracy.sel({"method": method})
        best_mid = acc.sel(lam=mid).mean("lam")
        lines.append(_claim(f"F.1.7: {kernel} repulsion with lam in [0.5, 1] (mean over those lam) beats "
                            f"lam = 0", best_mid, acc.sel(lam=0.0), ablation))
        if "rff_svm" in ablation.method.values:
            rff = ablation.accuracy.sel({"method": "rff_svm"}).mean("lam")
            lines.append(_claim(f"F.1.7: {kernel} repulsion with lam in [0.5, 1] beats vanilla RFF",
                                best_mid, rff, ablation))
    return "\n\n".join(lines)


def format_verdicts(bench, ablation=None) -> str:
    """The paper's claims of App. F.1.6-F.1.7, each tested per sigma beside the Bayes ceiling.

    Every method of one (sigma, trial) sees the same labels, so accuracy differences are paired
    over the trials of one sigma; the test is the two-sided Wilcoxon signed-rank test
    (:func:`rieszflow.engine.stats.paired_test`) at level
    :data:`~rieszflow.studies.synthetic.verdicts.ALPHA` per sigma, with the mean difference and
    its 95 % t-interval. A sigma whose Bayes ceiling is within one sd of 1/2 is "no signal: not
    decidable" (:mod:`rieszflow.studies.synthetic.verdicts`). Then the Langevin rows without
    resampling (all N particles against the D Gibbs-resampled ones).

    Parameters
    ----------
    bench : xarray.Dataset
        The merged benchmark sweep.
    ablation : xarray.Dataset, optional
        The merged ablation sweep.

    Returns
    -------
    str
        A summary line and a per-sigma table per claim.
    """
    lines = [f"verdicts on paper 000's claims, per sigma (paired over trials; exact Wilcoxon needs >= "
             f"{min_pairs()} non-zero pairs for p < {ALPHA:g}; Bayes ceiling of the "
             f"{_test_size(bench)}-point test split +- its sd over label draws)"]
    methods = list(bench.method.values)
    acc = bench.accuracy
    for other, claim in (("rff_svm", "Langevin features (Alg. 1, lam = 0.5) beat plain RFF"),
                         ("sinha_duchi_svm", "Langevin features (Alg. 1) beat Sinha-Duchi "
                                             "importance-sampled features")):
        if "langevin_svm" in methods and other in methods:
            lines.append(_claim(f"F.1.6: {claim}", acc.sel({"method": "langevin_svm"}),
                                acc.sel({"method": other}), bench))
        else:
            lines.append(f"F.1.6: {claim}: not in this sweep")
    resampling = format_resampling(bench)
    if resampling:
        lines.append("Langevin features without Gibbs resampling (not a claim of the paper: how the "
                     "D < N features are formed)\n" + resampling)
    if ablation is not None:
        lines.append(ablation_verdicts(ablation))
    return "\n\n".join(lines)


def _test_size(ds) -> int:
    """Points in the benchmark's test split (from the stored configuration)."""
    config = json.loads(ds.attrs["config"])["config"]
    return int(make_dataset(int(config["n"]), int(config["p"]), int(config["data_seed"])).test.size)
