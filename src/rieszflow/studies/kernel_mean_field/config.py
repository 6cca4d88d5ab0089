"""Configuration of ``rieszflow kernel-mean-field``: one strict frozen dataclass and two presets.

Problems (:mod:`~rieszflow.studies.kernel_mean_field.data`): ``sine1d`` (p = 1), ``sine2d`` (p = 2) and ``breast_cancer`` (p = 2, two
standardised features of scikit-learn's ``load_breast_cancer``). The frequencies live on the
interval :math:`[-R_1, R_1]` (p = 1) or the disk :math:`|\\omega| \\le R_2` (p = 2, the frequency-norm
constraint). The external field is the phase-averaged alignment potential :math:`V_{\\mathcal D}`
(paper 000, eq. (4.1); Lemma 3 as corrected in :mod:`rieszflow.engine.energy.alignment`), the pair
interaction the Riesz kernel :math:`g_s` with mean-field scaling :math:`\\lambda/N`
(:mod:`rieszflow.solvers.particles`).

Why ``s_1d = -1`` by default and not the log kernel: in one dimension the Euler-Maruyama step of the
log repulsion with mean-field scaling gives near-colliding pairs kicks :math:`\\lambda\\eta/(N r)`
that no step refinement removes (:mod:`rieszflow.solvers.particles`); measured with
``--quick --set s_1d=0``, W1 at N = 1e4 and t = 5 is 0.098 against an iid level of 0.016 and grows
with t (docs/learned_vs_theory.md). ``--set s_1d=0`` runs the log kernel in 1-D anyway.

References
----------
paper 000, eq. (4.1)-(4.5), (E.2); Thm 1.
"""
from __future__ import annotations

import dataclasses
import math

from rieszflow.engine.energy.interaction import check_s
from rieszflow.config import StudyConfig, config_int, config_real

__all__ = ["PROBLEMS", "MAX_STEPS", "KernelMeanFieldConfig", "quick_config", "full_config"]

#: Largest number of steps of one run allowed: ``long_time / eta`` (particles) and
#: ``times[-1] / pde_dt`` (fixed-step PDE); the full preset needs 8,000 and 400.
MAX_STEPS = 1_000_000

#: Problem names in a fixed order: a problem's position here keys its random streams.
PROBLEMS = ("sine1d", "sine2d", "breast_cancer")
_BACKENDS = ("numpy", "cupy")


def _ints(name, v, minimum):
    if isinstance(v, (str, bytes)) or not hasattr(v, "__iter__"):
        v = (v,)
    out = tuple(config_int(f"{name}[{i}]", x, minimum=minimum) for i, x in enumerate(v))
    return out


def _reals(name, v):
    if isinstance(v, (str, bytes)) or not hasattr(v, "__iter__"):
        v = (v,)
    return tuple(config_real(f"{name}[{i}]", x) for i, x in enumerate(v))


@dataclasses.dataclass(frozen=True)
class KernelMeanFieldConfig(StudyConfig):
    """Every knob of the kernel-mean-field study; unknown keys and bad values raise ValueError.

    Parameters
    ----------
    problems : tuple of str
        Subset of :data:`PROBLEMS`, distinct.
    n_train, n_test : int
        Training and test sizes of the synthetic problems (``breast_cancer`` uses a fixed
        70/30 split of its 569 points).
    beta : float
        Inverse temperature, > 0 (noise :math:`\\sqrt{2\\eta/\\beta}` per step; PDE diffusion
        :math:`1/\\beta`).
    lam : float
        Interaction strength, >= 0, mean-field scaling :math:`\\frac{\\lambda}{2N}\\sum_{i\\ne j} g_s`.
    s_1d, s_2d : float
        Riesz exponents of the pair kernel for p = 1 (default -1, the 1-D Coulomb kernel
        :math:`-|w|`) and p = 2 (default 0, the log kernel); ``-2 < s < p``.
    radius_1d, radius_2d : float
        Frequency domain: :math:`[-R_1, R_1]` and the disk of radius :math:`R_2`.
    n_cells_1d : int
        PDE cells of the interval (even, >= 4).
    cell_size_2d : float
        Target triangle edge of the Gmsh disk mesh.
    rho0_std : float
        :math:`\\rho_0` = isotropic normal :math:`N(0, \\sigma_0^2 I)` truncated to the domain (the
        spectral law of the RBF kernel :math:`e^{-\\sigma_0^2|x-x'|^2/2}`).
    times : tuple of float
        Comparison times, starting at 0, increasing; multiples of ``eta`` and of ``2 * pde_dt``.
    eta : float
        Euler-Maruyama step of the particles (engine's ``projected_langevin``, reflection);
        ``long_time / eta`` <= :data:`MAX_STEPS`.
    pde_dt : float
        Fixed implicit-Euler step of the PDE up to ``times[-1]`` (the floor run uses ``2 * pde_dt``);
        ``times[-1] / pde_dt`` <= :data:`MAX_STEPS`.
    long_time : float
        Horizon of the long runs (PDE with a growing step, particles at ``long_n``), > ``times[-1]``,
        a multiple of ``eta``.
    long_n, long_seeds : int
        Particles and runs (>= 1) of the long-time comparison with the Gibbs state.
    gibbs_bins : int
        Bins of the Gibbs-vs-particles histogram test: 1-D equal-width bins; 2-D 4 equal-area rings
        times ``gibbs_bins // 4`` angular sectors.
    n_particles, n_seeds : tuple of int
        Particle numbers and runs per N (same length).
    gpu_n_particles, gpu_n_seeds : tuple of int
        Extra particle numbers with ``backend="cupy"``.
    svm_c : float
        SVC regularisation C of every kernel machine.
    seed : int
        Root seed; every run draws from ``SeedSequence([seed, problem, N, run, stream])``.
    backend : {"numpy", "cupy"}

    Raises
    ------
    ValueError
        Naming the field, the value and what is allowed.

    References
    ----------
    paper 000, eq. (4.1)-(4.5), Thm 1, Alg. 1.
    """

    config_label = "kernel-mean-field config"

    problems: tuple = PROBLEMS
    n_train: int = 300
    n_test: int = 1000
    beta: float = 20.0
    lam: float = 0.1
    s_1d: float = -1.0
    s_2d: float = 0.0
    radius_1d: float = 5.0
    radius_2d: float = 4.0
    n_cells_1d: int = 200
    cell_size_2d: float = 0.3
    rho0_std: float = 2.0
    times: tuple = (0.0, 1.0, 2.0, 5.0, 10.0)
    eta: float = 0.05
    pde_dt: float = 0.025
    long_time: float = 100.0
    long_n: int = 1000
    long_seeds: int = 8
    gibbs_bins: int = 20
    n_particles: tuple = (100, 1000, 10000)
    n_seeds: tuple = (8, 4, 2)
    gpu_n_particles: tuple = (100000,)
    gpu_n_seeds: tuple = (2,)
    svm_c: float = 1.0
    seed: int = 0
    backend: str = "numpy"

    def __post_init__(self):
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731
        probs = (self.problems,) if isinstance(self.problems, str) else tuple(self.problems)
        bad = [p for p in probs if p not in PROBLEMS]
        if not probs or bad or len(set(probs)) != len(probs):
            raise ValueError(f"problems={self.problems!r}: give distinct names from {PROBLEMS}")
        set_("problems", probs)
        for k, lo in (("n_train", 10), ("n_test", 10), ("n_cells_1d", 4), ("long_n", 2), ("long_seeds", 1),
                      ("gibbs_bins", 4), ("seed", 0)):
            set_(k, config_int(k, getattr(self, k), minimum=lo))
        if self.n_cells_1d % 2:
            raise ValueError(f"n_cells_1d={self.n_cells_1d} must be even")
        for k in ("beta", "radius_1d", "radius_2d", "cell_size_2d", "rho0_std", "eta", "pde_dt",
                  "long_time", "svm_c"):
            set_(k, config_real(k, getattr(self, k), positive=True))
        set_("lam", config_real("lam", self.lam, nonnegative=True))
        if self.cell_size_2d > self.radius_2d:
            raise ValueError(f"cell_size_2d={self.cell_size_2d} must be <= radius_2d={self.radius_2d}")
        for k, d in (("s_1d", 1), ("s_2d", 2)):
            try:
                set_(k, check_s(getattr(self, k), d=d))
            except (TypeError, ValueError) as e:
                raise ValueError(f"{k}: {e}") from None
        set_("times", _reals("times", self.times))
        t = self.times
        if len(t) < 2 or t[0] != 0.0 or any(b <= a for a, b in zip(t, t[1:])):
            raise ValueError(f"times={t} must start at 0 and increase (at least 2 entries)")
        if not self.long_time > t[-1]:
            raise ValueError(f"long_time={self.long_time} must exceed times[-1]={t[-1]}")
        for name, horizon, step in (("eta", self.long_time, self.eta), ("pde_dt", t[-1], self.pde_dt)):
            if horizon / step > MAX_STEPS:
                raise ValueError(f"{name}={step} gives {horizon / step:.3g} steps up to t = {horizon} "
                                 f"(> {MAX_STEPS:,} allowed); use {name} >= {horizon / MAX_STEPS:.3g}")
        for step_name, step in (("eta", self.eta), ("2 * pde_dt", 2 * self.pde_dt)):
            for tk in t + ((self.long_time,) if step_name == "eta" else ()):
                k = round(tk / step)
                if abs(k * step - tk) > 1e-9 * max(1.0, tk):
                    raise ValueError(f"time {tk} is not a multiple of {step_name}={step}")
        for a, b, nonempty in (("n_particles", "n_seeds", True), ("gpu_n_particles", "gpu_n_seeds", False)):
            set_(a, _ints(a, getattr(self, a), 2))
            set_(b, _ints(b, getattr(self, b), 1))
            if len(getattr(self, a)) != len(getattr(self, b)) or (nonempty and not getattr(self, a)):
                raise ValueError(f"{a}={getattr(self, a)} and {b}={getattr(self, b)} must have the same "
                                 f"length{' (>= 1)' if nonempty else ''}")
        if self.backend not in _BACKENDS:
            raise ValueError(f"backend={self.backend!r} is not allowed; choose one of {_BACKENDS}")

    def particle_sizes(self):
        """Particle numbers and runs per N of this configuration (GPU sizes with ``backend="cupy"``).

        Returns
        -------
        list of (int, int)
            ``(N, runs)`` pairs.
        """
        pairs = list(zip(self.n_particles, self.n_seeds))
        if self.backend == "cupy":
            pairs += list(zip(self.gpu_n_particles, self.gpu_n_seeds))
        return pairs


def quick_config(seed: int = 0, backend: str = "numpy") -> KernelMeanFieldConfig:
    """The ``--quick`` preset (measured: 1015 s wall with ``--workers 2`` on 2 cores shared with four other users' jobs).

    Parameters
    ----------
    seed : int, default 0
    backend : {"numpy", "cupy"}, default "numpy"

    Returns
    -------
    KernelMeanFieldConfig
    """
    return KernelMeanFieldConfig(seed=seed, backend=backend, n_train=200, times=(0.0, 1.0, 2.0, 5.0),
                                 n_seeds=(8, 4, 2), long_n=300, long_seeds=6, long_time=100.0)


def full_config(seed: int = 0, backend: str = "numpy") -> KernelMeanFieldConfig:
    """The full preset: smaller steps, more runs, longer horizon.

    Parameters
    ----------
    seed : int, default 0
    backend : {"numpy", "cupy"}, default "numpy"

    Returns
    -------
    KernelMeanFieldConfig
    """
    return KernelMeanFieldConfig(seed=seed, backend=backend, eta=0.025, pde_dt=0.0125,
                                 n_cells_1d=400, cell_size_2d=0.2, n_seeds=(16, 8, 4), long_seeds=16,
                                 long_time=200.0, n_train=400, n_test=2000)
