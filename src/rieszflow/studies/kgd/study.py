"""Paper 003's Tables 3-6 under their stated protocols, as sweeps (spec sections 7-8).

Three sweeps (:mod:`rieszflow.studies.sweep`), one HDF5 file per task:

* ``krr`` (Tables 3, 4 and the adversarial dipole row of section 8.2): one task is one repetition
  of kernel ridge regression with both kernels of the variant (default ``P``: the paper's
  ``K_ind`` of eq. 3 and ``K_GS`` of eq. 4) on the same data, every ridge ``lam`` and both
  regularisation conventions (A: ``(K + n lam I) alpha = y``, the paper's stated objective;
  B: ``(K + lam I) alpha = y``, App. A's printed solution). Methods are the targets
  (``quadratic``: ``sqrt(d) x_1^2 - 1/sqrt(d)``; ``dipole``: ``sqrt(d) x_1``), the grid is ``d``.
* ``attention`` (Table 5): one task is one feature realisation at one ``m``; the discrepancy
  ``||Phi_G(Q) Phi_G(K)^T V - Phi_O(Q) Phi_O(K)^T V||_F / (n ||V||_F)`` of Gaussian features
  (expected kernel ``K_soft``) against unit-norm GS-ORF features (expected kernel ``K_GS``), with
  the GS-ORF built from the same Gaussian draws and from independent ones, and the single-estimator
  error ``||(K_hat_ind - K_soft) V|| / (n ||V||)``. ``Q``, ``K``, ``V`` are drawn once from
  ``data_seed``.
* ``sequence`` (Table 6): one task is one run of the noisy random walk on the sphere, KRR with
  both kernels, both conventions, and the train-mean and oracle baselines.

The population reference of the KRR gap (conv A, ``n -> infinity``) for a unit target in
eigenspace ``l`` is ``(lam / (lam_l^(1) + lam))^2 - (lam / (lam_l^(2) + lam))^2`` (spec section 5,
replacing the paper's Thm 6.3 formula).

References
----------
Z. Peng & Z. Yi, "Kernel Geometry Divergence: A Spectral Theory of Random-Feature Attention
Kernels", doi:10.20944/preprints202606.0665.v1, Tables 3-7, Thms 4.5/6.1, 4.6/6.2, 6.3, App. A.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from rieszflow.theory.kgd import spectral as sp
from rieszflow.theory.kgd.sampling import gs_orf_omega, paired_gaussian_gs_orf, positive_features
from rieszflow.engine.space import Sphere
from rieszflow.config import StudyConfig, config_int, config_real
from rieszflow.studies.sweep import SweepSpec, Task

__all__ = ["KgdConfig", "QUICK_OVERRIDES", "GRID_FIELDS", "task_config", "specs", "krr_risks",
           "population_gap", "krr_task", "attention_discrepancy", "attention_task", "sequence_run",
           "sequence_task", "PAPER_TABLE3", "PAPER_TABLE4", "PAPER_DIPOLE", "PAPER_TABLE5",
           "PAPER_TABLE6", "PAPER_C63", "PAPER_TABLE5_DECIMALS", "PAPER_TABLE5_REPS",
           "best_target_gap", "paper_table3_ratios", "paper_table4_ratio_check", "krr_summary",
           "attention_summary", "sequence_summary", "format_tables"]

_CONVENTIONS = ("A", "B")
_TARGET_NORMS = ("train_rms", "population")
_ATTN_NORMS = ("n", "sqrt_n")
_ATTN_KINDS = ("unnormalised", "row")
TARGETS = ("quadratic", "dipole")
KERNEL_NAMES = ("ind", "gs")

# ------------------------------------------------------------------ the paper's printed numbers
#: Table 3 (d = 32, lam -> (gap, +-, bound C*KGD/lam, ratio)), C = 2.2, KGD = 0.0257.
PAPER_TABLE3 = {0.01: (0.0042, 0.0008, 5.66, 0.00074), 0.1: (0.0031, 0.0006, 0.57, 0.0054),
                1.0: (0.0018, 0.0004, 0.057, 0.032)}
#: Table 4 (lam = 0.1; d -> (KGD, gap, +-, ratio)).
PAPER_TABLE4 = {8: (0.0815, 0.0085, 0.0012, 0.042), 16: (0.0470, 0.0052, 0.0009, 0.051),
                32: (0.0257, 0.0031, 0.0006, 0.068), 64: (0.0137, 0.0019, 0.0005, 0.082)}
#: Section 8.2 adversarial dipole row (d = 32, lam = 0.1 assumed): gap, +-, ratio.
PAPER_DIPOLE = (0.028, 0.003, 0.068)
#: Table 7's constant of Thm 6.3 ("Confirmed (c ~ 0.07)"), from the section 8.2 ratio 0.068.
PAPER_C63 = 0.07
#: Table 5 (n = 100, d = 32; m -> (Delta, +-)), fitted by the paper as 0.70 / sqrt(m).
PAPER_TABLE5 = {64: (0.085, 0.012), 128: (0.062, 0.009), 256: (0.045, 0.007), 512: (0.033, 0.005),
                1024: (0.024, 0.004)}
#: Decimals to which Table 5's Delta values are printed (see :func:`rieszflow.studies.kgd.verdicts.rounding_sd`).
PAPER_TABLE5_DECIMALS = 3
#: Realisations per m behind Table 5's +- (the paper's protocol: 20 feature realisations).
PAPER_TABLE5_REPS = 20
#: Table 6: kernel -> (MSE, +-); gap Ind - GS = 0.0042 +- 0.0006.
PAPER_TABLE6 = {"ind": (0.0423, 0.0031), "gs": (0.0381, 0.0028), "gap": (0.0042, 0.0006)}


@dataclasses.dataclass(frozen=True)
class KgdConfig(StudyConfig):
    """Configuration of the Tables 3-6 sweeps (defaults: the paper's stated protocols).

    Parameters
    ----------
    variant : {"P", "C1", "C2", "PERF"}
        Kernel pair of :data:`rieszflow.theory.kgd.spectral.VARIANTS` (``P``: the paper's eq. 3 and 4).
    krr_convention : {"A", "B"}
        Regularisation convention shown first in the tables (both are computed by every task):
        A: ``(K + n lam I) alpha = y``; B: ``(K + lam I) alpha = y``.
    n_train, n_test : int
        Training points (500) and fresh test points (2000), uniform on S^{d-1}.
    noise : float
        Label noise standard deviation sigma (0.1).
    lams : tuple of float
        Ridge parameters (0.01, 0.1, 1).
    krr_ds : tuple of int
        Dimensions of the quadratic-target sweep (Table 4: 8, 16, 32, 64; Table 3 is d = 32).
    dipole_ds : tuple of int
        Dimensions of the dipole-target sweep (32).
    dipole_lams : tuple of float
        Ridge parameters of the dipole-target sweep: the paper's 0.01, 0.1, 1 and the small-lam
        sequence down to 1e-4 that tests Thm 6.3 as lam -> 0 (``lams`` is for the quadratic target).
    krr_reps : int
        Repetitions per (target, d) (100).
    target_norm : {"train_rms", "population"}
        Normalisation of the target to unit norm: training-set RMS (default) or population norm.
    attn_n, attn_d : int
        Sequence length n (100) and dimension d (32) of Table 5.
    attn_ms : tuple of int
        Feature counts m (64 .. 1024).
    attn_reps : int
        Feature realisations per m (20).
    attn_norm : {"n", "sqrt_n"}
        Normaliser of Delta: ``n ||V||_F`` (default, the paper's) or ``sqrt(n) ||V||_F``.
    attn_kind : {"unnormalised", "row"}
        ``Phi(Q) Phi(K)^T V`` (default, as in the Thm 4.6 proof) or row-normalised ``D^-1 K V``.
    seq_d, seq_train, seq_test, seq_runs : int
        Dimension (32), training steps (200), test steps (50), runs (20) of Table 6.
    seq_step, seq_noise, seq_lam : float
        Random-walk step std (0.1), label noise std (0.05), ridge (0.1).
    data_seed : int
        Seed of the fixed Q, K, V of Table 5.
    seed : int
        Root seed of the task streams.
    backend : str
        ``"numpy"`` (CPU seconds; no GPU path).

    Raises
    ------
    ValueError
        On an out-of-range or unknown value (the message names the field and the allowed values).
    """

    variant: str = "P"
    krr_convention: str = "A"
    n_train: int = 500
    n_test: int = 2000
    noise: float = 0.1
    lams: tuple = (0.01, 0.1, 1.0)
    krr_ds: tuple = (8, 16, 32, 64)
    dipole_ds: tuple = (32,)
    dipole_lams: tuple = (1.0, 0.1, 0.01, 3e-3, 1e-3, 3e-4, 1e-4)
    krr_reps: int = 100
    target_norm: str = "train_rms"
    attn_n: int = 100
    attn_d: int = 32
    attn_ms: tuple = (64, 128, 256, 512, 1024)
    attn_reps: int = 20
    attn_norm: str = "n"
    attn_kind: str = "unnormalised"
    seq_d: int = 32
    seq_train: int = 200
    seq_test: int = 50
    seq_runs: int = 20
    seq_step: float = 0.1
    seq_noise: float = 0.05
    seq_lam: float = 0.1
    data_seed: int = 0
    seed: int = 0
    backend: str = "numpy"

    def __post_init__(self):
        def choice(name, allowed):
            v = getattr(self, name)
            if v not in allowed:
                raise ValueError(f"{name}={v!r} is not allowed; allowed: {', '.join(map(repr, allowed))}")
        choice("variant", tuple(sp.VARIANTS))
        choice("krr_convention", _CONVENTIONS)
        choice("target_norm", _TARGET_NORMS)
        choice("attn_norm", _ATTN_NORMS)
        choice("attn_kind", _ATTN_KINDS)
        choice("backend", ("numpy",))
        for name in ("n_train", "n_test", "krr_reps", "attn_n", "attn_reps", "seq_train", "seq_test",
                     "seq_runs"):
            config_int(name, getattr(self, name), minimum=2)
        for name in ("attn_d", "seq_d"):
            config_int(name, getattr(self, name), minimum=3)
        for name in ("data_seed", "seed"):
            config_int(name, getattr(self, name), minimum=0)
        config_real("noise", self.noise, nonnegative=True)
        for name in ("seq_step", "seq_noise", "seq_lam"):
            config_real(name, getattr(self, name), positive=name != "seq_noise",
                        nonnegative=name == "seq_noise")
        for name, lo in (("krr_ds", 3), ("dipole_ds", 3), ("attn_ms", 1)):
            vals = tuple(getattr(self, name))
            if not vals or len(set(vals)) != len(vals):
                raise ValueError(f"{name}={vals!r}: need distinct values")
            object.__setattr__(self, name, tuple(config_int(name, v, minimum=lo) for v in vals))
        for name in ("lams", "dipole_lams"):
            lams = tuple(getattr(self, name))
            if not lams or len(set(lams)) != len(lams):
                raise ValueError(f"{name}={lams!r}: need distinct values")
            object.__setattr__(self, name, tuple(config_real(name, v, positive=True) for v in lams))


#: ``--quick``: the spec's reduced repetitions (30 KRR repetitions; Tables 5, 6 at full size).
QUICK_OVERRIDES = {"krr_reps": 30}

#: Fields that only define which tasks exist: left out of the stored task configuration.
GRID_FIELDS = ("krr_ds", "dipole_ds", "dipole_lams", "krr_reps", "attn_ms", "attn_reps", "seq_runs", "krr_convention")


def task_config(cfg: KgdConfig) -> dict:
    """The configuration every task sees and stores: :class:`KgdConfig` without the grids.

    Parameters
    ----------
    cfg : KgdConfig

    Returns
    -------
    dict
    """
    return {k: v for k, v in cfg.to_dict().items() if k not in GRID_FIELDS}


def specs(cfg: KgdConfig) -> list:
    """The sweeps of Tables 3-6: ``krr_quadratic``, ``krr_dipole``, ``attention``, ``sequence``.

    Parameters
    ----------
    cfg : KgdConfig

    Returns
    -------
    list of rieszflow.studies.sweep.SweepSpec
    """
    mod = "rieszflow.studies.kgd.study"
    tc = task_config(cfg)
    return [SweepSpec("krr_quadratic", f"{mod}:krr_task", ("quadratic",), {"d": cfg.krr_ds},
                      cfg.krr_reps, tc, cfg.seed),
            SweepSpec("krr_dipole", f"{mod}:krr_task", ("dipole",), {"d": cfg.dipole_ds},
                      cfg.krr_reps, dict(tc, lams=tuple(cfg.dipole_lams)), cfg.seed),
            SweepSpec("attention", f"{mod}:attention_task", ("attention",), {"m": cfg.attn_ms},
                      cfg.attn_reps, tc, cfg.seed),
            SweepSpec("sequence", f"{mod}:sequence_task", ("sequence",), {"d": (cfg.seq_d,)},
                      cfg.seq_runs, tc, cfg.seed)]


# ------------------------------------------------------------------ kernel ridge regression
def _profiles(variant, d):
    k1, k2 = sp.VARIANTS[variant][:2]
    return (lambda t: k1(t, d)), (lambda t: k2(t, d))


def _target(name, X):
    d = X.shape[1]
    if name == "quadratic":
        return math.sqrt(d) * X[:, 0] ** 2 - 1 / math.sqrt(d)
    if name == "dipole":
        return math.sqrt(d) * X[:, 0]
    raise ValueError(f"target={name!r} is not allowed; allowed: {', '.join(TARGETS)}")


def _population_norm(name, d):
    return math.sqrt((2 * d - 2) / (d * (d + 2))) if name == "quadratic" else 1.0


def _krr_fit_predict(kernel, X, y, X_eval, lams, conventions):
    """Predictions at ``X_eval`` for every (convention, lam): one eigendecomposition of K."""
    n = X.shape[0]
    e, U = np.linalg.eigh(kernel(X @ X.T))
    Uy = U.T @ y
    shifts = np.array([[n * lam if conv == "A" else lam for lam in lams] for conv in conventions])
    alpha = U @ (Uy[:, None] / (e[:, None] + shifts.reshape(1, -1)))     # (n, conv * lam)
    pred = kernel(X_eval @ X.T) @ alpha                                   # (n_eval, conv * lam)
    return pred.T.reshape(len(conventions), len(lams), X_eval.shape[0])


def krr_risks(d, target, lams, rng, *, variant="P", n_train=500, n_test=2000, noise=0.1,
              target_norm="train_rms", conventions=_CONVENTIONS):
    """Test risks of KRR with both kernels of ``variant`` on one draw of the data.

    Parameters
    ----------
    d : int
        Dimension ``>= 3``; inputs uniform on S^{d-1}.
    target : {"quadratic", "dipole"}
        ``sqrt(d) x_1^2 - 1/sqrt(d)`` (pure l = 2) or ``sqrt(d) x_1`` (pure l = 1).
    lams : sequence of float
        Ridge parameters ``> 0``.
    rng : numpy.random.Generator
        Source of the data and the noise.
    variant : str, default "P"
        Key of :data:`rieszflow.theory.kgd.spectral.VARIANTS`.
    n_train, n_test : int
        Sizes.
    noise : float
        Label noise std on training and test labels.
    target_norm : {"train_rms", "population"}
        Rescale the target by its training-set RMS or by its population norm.
    conventions : tuple of {"A", "B"}
        A: ``(K + n lam I) alpha = y``; B: ``(K + lam I) alpha = y``.

    Returns
    -------
    numpy.ndarray, shape (2, len(conventions), len(lams)), float64
        Mean squared error on the noisy test labels, kernels ordered (K1, K2) = (ind, gs).

    Raises
    ------
    ValueError
        On an unknown target, variant, convention or normalisation.

    References
    ----------
    Peng & Yi, "Kernel Geometry Divergence", Table 3 protocol, Thm 4.5, App. A.
    """
    d = sp.check_dim(d)
    if variant not in sp.VARIANTS:
        raise ValueError(f"variant={variant!r} is not allowed; allowed: {sorted(sp.VARIANTS)}")
    for c in conventions:
        if c not in _CONVENTIONS:
            raise ValueError(f"convention={c!r} is not allowed; allowed: A, B")
    if target_norm not in _TARGET_NORMS:
        raise ValueError(f"target_norm={target_norm!r} is not allowed; allowed: {_TARGET_NORMS}")
    sphere = Sphere()
    X = sphere.sample_uniform(rng, n_train, d)
    Xt = sphere.sample_uniform(rng, n_test, d)
    f, ft = _target(target, X), _target(target, Xt)
    scale = np.sqrt(np.mean(f ** 2)) if target_norm == "train_rms" else _population_norm(target, d)
    y = f / scale + noise * rng.standard_normal(n_train)
    yt = ft / scale + noise * rng.standard_normal(n_test)
    out = np.empty((2, len(conventions), len(lams)))
    for k, kern in enumerate(_profiles(variant, d)):
        pred = _krr_fit_predict(kern, X, y, Xt, lams, conventions)
        out[k] = np.mean((pred - yt) ** 2, axis=-1)
    return out


def population_gap(d, ell, lam, variant="P"):
    """Population (n -> infinity, conv A) risk gap R_1 - R_2 for a unit target in eigenspace ``ell``.

    Parameters
    ----------
    d : int
        Dimension ``>= 3``.
    ell : int
        Degree of the target's spherical harmonic.
    lam : float
        Ridge parameter ``> 0``.
    variant : str, default "P"
        Key of :data:`rieszflow.theory.kgd.spectral.VARIANTS`.

    Returns
    -------
    float
        ``(lam / (lam_ell^(1) + lam))^2 - (lam / (lam_ell^(2) + lam))^2`` (the noise and the
        variance cancel in the population limit).

    References
    ----------
    Peng & Yi, "Kernel Geometry Divergence", Thm 6.3 (its risk formula corrected; spec section 5).
    """
    l1, l2 = sp.VARIANTS[variant][2:]
    a, b = float(l1(ell, d)[0]), float(l2(ell, d)[0])
    return (lam / (a + lam)) ** 2 - (lam / (b + lam)) ** 2


def best_target_gap(d, lam, variant="P", L=60):
    """Largest population |gap| over unit-norm targets, and the degree that attains it.

    In the population limit the risk of KRR for a target ``f = sum_l f_l`` is
    ``sum_l ||f_l||^2 (lam / (lam_l + lam))^2 + sigma^2``, so the gap of a unit target is a convex
    combination of the per-degree gaps of :func:`population_gap`, and its supremum over unit targets
    is ``max_l |population_gap(d, l, lam)|``. Every term lies in [-1, 1], so this never exceeds 1.

    Parameters
    ----------
    d : int
        Dimension ``>= 3``.
    lam : float
        Ridge parameter ``> 0``.
    variant : str, default "P"
        Key of :data:`rieszflow.theory.kgd.spectral.VARIANTS`.
    L : int, default 60
        Largest degree searched (the eigenvalues decay factorially: beyond it both kernels'
        eigenvalues are far below any ``lam`` of interest and the gap is near 0).

    Returns
    -------
    gap : float
        ``max_l |population_gap(d, l, lam)|``, in [0, 1].
    ell : int
        The maximising degree.

    Raises
    ------
    ValueError
        If ``lam`` is not a positive number or ``variant`` is unknown.

    References
    ----------
    Peng & Yi, "Kernel Geometry Divergence", Thm 6.3 (the supremum over targets its proof takes).
    """
    lam = config_real("lam", lam, positive=True)
    if variant not in sp.VARIANTS:
        raise ValueError(f"variant={variant!r} is not allowed; allowed: {sorted(sp.VARIANTS)}")
    l1, l2 = sp.VARIANTS[variant][2:]
    ells = np.arange(int(L) + 1)
    a, b = np.asarray(l1(ells, d), float), np.asarray(l2(ells, d), float)
    g = np.abs((lam / (a + lam)) ** 2 - (lam / (b + lam)) ** 2)
    k = int(np.argmax(g))
    return float(g[k]), int(ells[k])


def krr_task(task: Task, config: dict, rng: np.random.Generator):
    """Sweep task: one KRR repetition (method = target, grid ``d``).

    Parameters
    ----------
    task : rieszflow.studies.sweep.Task
        ``method`` in ``TARGETS``; ``params`` holds ``d``.
    config : dict
        :func:`task_config` of a :class:`KgdConfig`.
    rng : numpy.random.Generator
        The task's stream.

    Returns
    -------
    xarray.Dataset
        ``risk`` with dims ``(kernel, convention, lam)``.
    """
    import xarray as xr

    d = int(dict(task.params)["d"])
    lams = tuple(config["lams"])
    r = krr_risks(d, task.method, lams, rng, variant=config["variant"], n_train=config["n_train"],
                  n_test=config["n_test"], noise=config["noise"], target_norm=config["target_norm"])
    return xr.Dataset(
        {"risk": (("kernel", "convention", "lam"), r,
                  {"long_name": "KRR test mean squared error on noisy labels", "units": "1"})},
        coords={"kernel": ("kernel", list(KERNEL_NAMES), {"long_name": "kernel K1 (ind) or K2 (gs) of "
                                                          "the variant", "units": "1"}),
                "convention": ("convention", list(_CONVENTIONS),
                               {"long_name": "A: (K+n lam I)a=y; B: (K+lam I)a=y", "units": "1"}),
                "lam": ("lam", np.array(lams), {"long_name": "ridge parameter lam", "units": "1"})})


# ------------------------------------------------------------------ attention discrepancy
def _attention_data(config):
    rng = np.random.default_rng(config["data_seed"])
    n, d = config["attn_n"], config["attn_d"]
    sphere = Sphere()
    Q, K = sphere.sample_uniform(rng, n, d), sphere.sample_uniform(rng, n, d)
    V = rng.standard_normal((n, n))
    return Q, K, V


def _attn(Kmat, V, kind):
    if kind == "row":
        Kmat = Kmat / Kmat.sum(axis=1, keepdims=True)
    return Kmat @ V


def attention_discrepancy(Q, K, V, m, rng, *, kind="unnormalised", norm="n"):
    """Table 5 quantities for one feature realisation at ``m`` features.

    Parameters
    ----------
    Q, K : numpy.ndarray, shape (n, d)
        Queries and keys on the unit sphere.
    V : numpy.ndarray, shape (n, p)
        Values.
    m : int
        Number of random features.
    rng : numpy.random.Generator
        Source of the features.
    kind : {"unnormalised", "row"}
        ``K_hat V`` or row-normalised ``D^-1 K_hat V``.
    norm : {"n", "sqrt_n"}
        Normaliser ``n ||V||_F`` or ``sqrt(n) ||V||_F``.

    Returns
    -------
    dict of str to float
        ``delta_same`` (GS-ORF from the same Gaussian draws), ``delta_indep`` (independent draws),
        ``rf_error`` (single estimator ``||(K_hat_ind - K_soft) V|| / norm``) and ``floor``
        (``||(K_soft - K_GS) V|| / norm``, the m -> infinity limit of the discrepancy).

    References
    ----------
    Peng & Yi, "Kernel Geometry Divergence", Table 5, Thm 4.6 (eq. of its proof).
    """
    n, d = Q.shape
    G, O = paired_gaussian_gs_orf(m, d, rng)
    O2 = gs_orf_omega(m, d, rng)
    den = (n if norm == "n" else math.sqrt(n)) * np.linalg.norm(V)

    def khat(W):
        return positive_features(Q, W) @ positive_features(K, W).T

    t = Q @ K.T
    A_g, A_o, A_o2 = (_attn(khat(W), V, kind) for W in (G, O, O2))
    A_soft, A_gs = _attn(sp.kernel_softmax(t, d), V, kind), _attn(sp.kernel_gs(t, d), V, kind)
    return {"delta_same": float(np.linalg.norm(A_g - A_o) / den),
            "delta_indep": float(np.linalg.norm(A_g - A_o2) / den),
            "rf_error": float(np.linalg.norm(A_g - A_soft) / den),
            "floor": float(np.linalg.norm(A_soft - A_gs) / den)}


def attention_task(task: Task, config: dict, rng: np.random.Generator):
    """Sweep task: one feature realisation of Table 5 at ``m`` (grid parameter).

    Parameters
    ----------
    task : rieszflow.studies.sweep.Task
        ``params`` holds ``m``.
    config : dict
        :func:`task_config` of a :class:`KgdConfig`.
    rng : numpy.random.Generator
        The task's stream (the features; Q, K, V come from ``data_seed``).

    Returns
    -------
    xarray.Dataset
        Scalars ``delta_same``, ``delta_indep``, ``rf_error``, ``floor``.
    """
    import xarray as xr

    Q, K, V = _attention_data(config)
    r = attention_discrepancy(Q, K, V, int(dict(task.params)["m"]), rng, kind=config["attn_kind"],
                              norm=config["attn_norm"])
    ln = {"delta_same": "attention discrepancy Gaussian vs GS-ORF features, same draws",
          "delta_indep": "attention discrepancy Gaussian vs GS-ORF features, independent draws",
          "rf_error": "single-estimator error of Gaussian features against the softmax kernel",
          "floor": "m -> infinity discrepancy ||(K_soft - K_GS) V|| / normaliser"}
    return xr.Dataset({k: ((), v, {"long_name": ln[k], "units": "1"}) for k, v in r.items()})


# ------------------------------------------------------------------ sequence task
def sequence_run(d, rng, *, n_train=200, n_test=50, step=0.1, noise=0.05, lam=0.1, variant="P"):
    """One run of the Table 6 sequence task: test MSE of KRR with both kernels and baselines.

    ``x_0 ~ mu``, ``x_t = normalise(x_{t-1} + eps_t)``, ``eps_t ~ N(0, step^2 I_d)``,
    ``y_t = <w, x_t> + 0.1 <w, x_{t-1}> + eta_t``, ``eta_t ~ N(0, noise^2)``, ``w ~ mu``; inputs
    ``x_t``; train on steps ``1..n_train``, test on the next ``n_test``.

    Parameters
    ----------
    d : int
        Dimension ``>= 3``.
    rng : numpy.random.Generator
    n_train, n_test : int
    step, noise, lam : float
    variant : str, default "P"

    Returns
    -------
    dict
        ``mse`` (array (2 kernels, 2 conventions)), ``mean_baseline`` (predict the training mean),
        ``oracle`` (predict ``1.1 <w, x_t>``).

    References
    ----------
    Peng & Yi, "Kernel Geometry Divergence", Table 6 (protocol of section 8.3; spec section 7).
    """
    d = sp.check_dim(d)
    sphere = Sphere()
    T = n_train + n_test
    x = np.empty((T + 1, d))
    x[0] = sphere.sample_uniform(rng, 1, d)[0]
    for t in range(1, T + 1):
        x[t] = sphere.project(x[t - 1] + step * rng.standard_normal(d))
    w = sphere.sample_uniform(rng, 1, d)[0]
    y = x[1:] @ w + 0.1 * (x[:-1] @ w) + noise * rng.standard_normal(T)
    X = x[1:]
    Xtr, ytr, Xte, yte = X[:n_train], y[:n_train], X[n_train:], y[n_train:]
    mse = np.empty((2, 2))
    for k, kern in enumerate(_profiles(variant, d)):
        pred = _krr_fit_predict(kern, Xtr, ytr, Xte, (lam,), _CONVENTIONS)
        mse[k] = np.mean((pred[:, 0] - yte) ** 2, axis=-1)
    return {"mse": mse, "mean_baseline": float(np.mean((ytr.mean() - yte) ** 2)),
            "oracle": float(np.mean((1.1 * Xte @ w - yte) ** 2))}


def sequence_task(task: Task, config: dict, rng: np.random.Generator):
    """Sweep task: one run of the Table 6 sequence task.

    Parameters
    ----------
    task : rieszflow.studies.sweep.Task
        ``params`` holds ``d``.
    config : dict
        :func:`task_config` of a :class:`KgdConfig`.
    rng : numpy.random.Generator

    Returns
    -------
    xarray.Dataset
        ``mse`` (kernel, convention), ``mean_baseline``, ``oracle``.
    """
    import xarray as xr

    r = sequence_run(int(dict(task.params)["d"]), rng, n_train=config["seq_train"],
                     n_test=config["seq_test"], step=config["seq_step"], noise=config["seq_noise"],
                     lam=config["seq_lam"], variant=config["variant"])
    return xr.Dataset(
        {"mse": (("kernel", "convention"), r["mse"], {"long_name": "KRR test MSE", "units": "1"}),
         "mean_baseline": ((), r["mean_baseline"], {"long_name": "test MSE of the training mean",
                                                    "units": "1"}),
         "oracle": ((), r["oracle"], {"long_name": "test MSE of 1.1 <w, x_t>", "units": "1"})},
        coords={"kernel": ("kernel", list(KERNEL_NAMES), {"long_name": "kernel", "units": "1"}),
                "convention": ("convention", list(_CONVENTIONS),
                               {"long_name": "A: (K+n lam I)a=y; B: (K+lam I)a=y", "units": "1"})})


# ------------------------------------------------------------------ paper arithmetic (AT-19)
def paper_table3_ratios(kgd=0.0257, c=2.2):
    """Recompute Table 3's bound ``C KGD / lam`` and ratio ``gap / bound`` from its own columns.

    Parameters
    ----------
    kgd : float, default 0.0257
        The paper's KGD at d = 32.
    c : float, default 2.2
        ``C = 2 (||f*|| + sigma)``.

    Returns
    -------
    dict
        ``lam -> (bound, ratio with the printed bound, printed ratio)``.
    """
    return {lam: (c * kgd / lam, gap / bound, ratio)
            for lam, (gap, _, bound, ratio) in PAPER_TABLE3.items()}


def paper_table4_ratio_check():
    """Table 4's printed ratio next to the three readings it could mean.

    Returns
    -------
    dict
        ``d -> (printed ratio, gap/(KGD/lam), gap/(2.2 KGD/lam), gap/KGD)`` with lam = 0.1.
    """
    return {d: (ratio, gap / (k / 0.1), gap / (2.2 * k / 0.1), gap / k)
            for d, (k, gap, _, ratio) in PAPER_TABLE4.items()}


# ------------------------------------------------------------------ summaries
def _stats(x, axis=-1):
    x = np.asarray(x, float)
    n = np.sum(np.isfinite(x), axis=axis)
    mean = np.nanmean(x, axis=axis)
    std = np.nanstd(x, axis=axis, ddof=1)
    return mean, std, std / np.sqrt(n)


def krr_summary(ds, target, convention="A", variant="P", noise=0.1):
    """Gap ``R_ind - R_gs`` per (d, lam) with its population reference and the Thm 6.1 bound.

    Parameters
    ----------
    ds : xarray.Dataset
        Merged ``krr_quadratic`` or ``krr_dipole`` sweep.
    target : {"quadratic", "dipole"}
    convention : {"A", "B"}
    variant : str
    noise : float
        sigma of the bound ``2 (||f*|| + sigma) KGD / lam`` (``||f*|| = 1``).

    Returns
    -------
    list of dict
        Keys ``d, lam, mean, std, se, n, population, bound``.
    """
    ell = 2 if target == "quadratic" else 1
    rows = []
    for d in ds["d"].values:
        kgd = sp.kgd_closed_form(int(d), variant)
        for lam in ds["lam"].values:
            r = ds["risk"].sel({"method": target, "d": d, "convention": convention, "lam": lam})
            gap = (r.sel(kernel="ind") - r.sel(kernel="gs")).values.ravel()
            mean, std, se = _stats(gap)
            rows.append({"d": int(d), "lam": float(lam), "mean": float(mean), "std": float(std),
                         "se": float(se), "n": int(np.isfinite(gap).sum()),
                         "population": population_gap(int(d), ell, float(lam), variant),
                         "bound": 2 * (1 + noise) * kgd / float(lam)})
    return rows


def attention_summary(ds):
    """Mean and std over realisations of the Table 5 quantities, per m, and the fitted RF slope.

    Parameters
    ----------
    ds : xarray.Dataset
        Merged ``attention`` sweep.

    Returns
    -------
    rows : list of dict
        Keys ``m``, and ``(mean, std, se)`` triples under ``delta_same``, ``delta_indep``, ``rf_error``;
        ``floor``.
    slope : float
        Log-log slope of the mean ``rf_error`` against m.
    """
    rows = []
    for m in ds["m"].values:
        sel = ds.sel({"method": "attention", "m": m})
        row = {"m": int(m), "floor": float(np.nanmean(sel["floor"].values))}
        for k in ("delta_same", "delta_indep", "rf_error"):
            row[k] = tuple(map(float, _stats(sel[k].values.ravel())))
        rows.append(row)
    slope = sp.fit_loglog([r["m"] for r in rows], [r["rf_error"][0] for r in rows])[0]
    return rows, slope


def sequence_summary(ds):
    """Mean, std and SE over runs of the Table 6 MSEs, the paired gap and the baselines.

    Parameters
    ----------
    ds : xarray.Dataset
        Merged ``sequence`` sweep.

    Returns
    -------
    dict
        ``convention -> {"ind", "gs", "gap": (mean, std, se)}`` and ``mean_baseline``,
        ``oracle`` (mean, std, se).
    """
    sel = ds.sel({"method": "sequence"}).isel(d=0)
    out = {}
    for conv in _CONVENTIONS:
        mse = sel["mse"].sel(convention=conv)
        a, b = mse.sel(kernel="ind").values.ravel(), mse.sel(kernel="gs").values.ravel()
        out[conv] = {"ind": tuple(map(float, _stats(a))), "gs": tuple(map(float, _stats(b))),
                     "gap": tuple(map(float, _stats(a - b)))}
    for k in ("mean_baseline", "oracle"):
        out[k] = tuple(map(float, _stats(sel[k].values.ravel())))
    return out


def _fmt_rows(rows, paper=None):
    lines = []
    for r in rows:
        p = "" if paper is None or paper(r) is None else f"  paper {paper(r)}"
        lines.append(f"  d={r['d']:3d} lam={r['lam']:<5g} gap {r['mean']:+.5f} +- {r['std']:.5f} "
                     f"(SE {r['se']:.5f}, n={r['n']})  population {r['population']:+.5f}  "
                     f"bound 2(1+s)KGD/lam {r['bound']:.4f}{p}")
    return lines


def format_tables(merged, cfg: KgdConfig) -> str:
    """Tables 3-6 as measured, next to the paper's printed values.

    Parameters
    ----------
    merged : dict
        Sweep name -> merged dataset (any subset of :func:`specs`).
    cfg : KgdConfig

    Returns
    -------
    str
    """
    out = []
    convs = (cfg.krr_convention,) + tuple(c for c in _CONVENTIONS if c != cfg.krr_convention)
    if "krr_quadratic" in merged:
        for conv in convs:
            rows = krr_summary(merged["krr_quadratic"], "quadratic", conv, cfg.variant, cfg.noise)
            out.append(f"Tables 3/4 (quadratic target, variant {cfg.variant}, convention {conv}; "
                       f"gap = R_ind - R_GS, mean +- std over reps; population = conv A n->inf)")
            out += _fmt_rows(rows, lambda r: (PAPER_TABLE3.get(r["lam"], (None,))[0] if r["d"] == 32
                                              else (PAPER_TABLE4[r["d"]][1] if r["d"] in PAPER_TABLE4
                                                    and r["lam"] == 0.1 else None)))
    if "krr_dipole" in merged:
        for conv in convs:
            rows = krr_summary(merged["krr_dipole"], "dipole", conv, cfg.variant, cfg.noise)
            out.append(f"Adversarial dipole row (section 8.2), convention {conv}")
            out += _fmt_rows(rows, lambda r: PAPER_DIPOLE[0] if r["lam"] == 0.1 else None)
    if "attention" in merged:
        rows, slope = attention_summary(merged["attention"])
        out.append(f"Table 5 (n={cfg.attn_n}, d={cfg.attn_d}, {cfg.attn_kind}, normaliser "
                   f"{cfg.attn_norm}): mean +- std over realisations")
        out.append("     m   Delta same draws     Delta indep.        RF error (ind)      floor    paper")
        for r in rows:
            p = PAPER_TABLE5.get(r["m"])
            out.append(f"  {r['m']:5d}  {r['delta_same'][0]:.5f} +- {r['delta_same'][1]:.5f}  "
                       f"{r['delta_indep'][0]:.5f} +- {r['delta_indep'][1]:.5f}  "
                       f"{r['rf_error'][0]:.5f} +- {r['rf_error'][1]:.5f}  {r['floor']:.5f}  "
                       f"{'' if p is None else f'{p[0]} +- {p[1]}'}")
        out.append(f"  RF error log-log slope in m: {slope:.3f} (m^-1/2 gives -0.5)")
    if "sequence" in merged:
        s = sequence_summary(merged["sequence"])
        out.append(f"Table 6 (sequence task, d={cfg.seq_d}, lam={cfg.seq_lam}): mean +- std over runs")
        for conv in convs:
            r = s[conv]
            out.append(f"  conv {conv}: Ind {r['ind'][0]:.4f} +- {r['ind'][1]:.4f}   GS {r['gs'][0]:.4f} "
                       f"+- {r['gs'][1]:.4f}   gap {r['gap'][0]:+.4f} +- {r['gap'][1]:.4f} "
                       f"(SE {r['gap'][2]:.4f})")
        out.append(f"  baselines: training mean {s['mean_baseline'][0]:.4f} +- {s['mean_baseline'][1]:.4f}; "
                   f"oracle {s['oracle'][0]:.4f}; paper Ind {PAPER_TABLE6['ind'][0]} GS "
                   f"{PAPER_TABLE6['gs'][0]} gap +{PAPER_TABLE6['gap'][0]}")
    return "\n".join(out)
