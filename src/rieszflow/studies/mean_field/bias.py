"""The mean-field bias: :math:`|\\mathbb{E} f(\\mu_N(t)) - f(\\rho_t)|` against N for smooth f.

``rieszflow mean-field --preset bias`` (the plain estimator below) and ``--preset bias-large``
(N = 1e3..1e6, ``estimator = "antithetic"``: a 2N-particle system against its two halves run as
coupled N-particle systems, whose R does not grow with N; :mod:`~rieszflow.studies.mean_field.antithetic`).
This module holds the configuration, the batched replicas (plain or antithetic triples) and the
resumable study; the plain estimator's tables are in :mod:`~rieszflow.studies.mean_field.bias_tables`.

Why a second observable
-----------------------
:math:`W_1(\\mu_N(t), \\rho_t)` decays like the sampling rate :math:`N^{-1/2}` (:math:`N^{-1/d}`
for d > 2) whether or not the particles interact, so it cannot see the :math:`O(1/N)` bias that
propagation of chaos is about: for smooth f, :math:`\\mathbb{E} f(\\mu_N(t)) = f(\\rho_t) + b_f(t)/N
+ O(N^{-2})`. This module estimates the bias by the mean over R independent replicas,

.. math::

    \\hat b_N = \\frac1R \\sum_{r=1}^R f(\\mu_N^{(r)}(t)) - f(\\rho_t),
    \\qquad \\mathrm{SE} = \\mathrm{sd}_r f(\\mu_N^{(r)}) / \\sqrt{R},

for the observables of :data:`OBSERVABLES`: the first moment :math:`\\int x_1\\,d\\mu`, the second
moment :math:`\\int |x|^2 d\\mu` and the interaction energy
:math:`\\frac\\lambda2 \\iint_{x \\ne y} g_s(x - y)\\,d\\mu\\,d\\mu` (for :math:`\\mu_N`:
:math:`\\frac{\\lambda}{2N^2}\\sum_{i\\ne j} g_s(x_i - x_j)`, the diagonal excluded).

How many replicas
-----------------
:math:`\\mathrm{sd}\\,f(\\mu_N) \\approx \\sigma_f/\\sqrt N`, so the SE is
:math:`\\sigma_f/\\sqrt{NR}` while the bias is :math:`|b_f|/N`. The bias stands ``z`` standard
errors above the Monte Carlo noise when :math:`|b_f|/N \\ge z\\,\\sigma_f/\\sqrt{NR}`, i.e.

.. math::

    R \\ge R_{\\rm need} = z^2 N \\sigma_f^2 / b_f^2 = z^2\\,\\mathrm{SE}^2 R / \\hat b_N^2 ,

linear in N: the cost of a plain Monte Carlo estimate grows like :math:`N R \\propto N^2` (times
:math:`N` again for direct pair sums in 2-D).
:func:`~rieszflow.studies.mean_field.bias_tables.bias_table` reports the measured
:math:`R_{\\rm need}` (z = 3) beside the R used, per row. Independent replicas are used (no
common random numbers across N: the estimator's variance is the one above, stated per row).

Reference and floors
--------------------
:math:`f(\\rho_t)` is evaluated on the PDE solution of the mean-field study
(:func:`~rieszflow.studies.mean_field.study.solve_pde`, cell-centre quadrature; the interaction
energy by the solver's own exact cell integrals). The PDE's own error in f is measured by the
difference to a run with ``2 * pde_dt`` and to one with half the cells per axis (both stored,
``<p>_f_dt_floor`` and ``<p>_f_grid_floor``); the particles' step error by the same N at
``2 * eta`` (``<p>_f_eta_floor``, from the smallest N). At t = 0 the particles are exact i.i.d.
draws of :math:`\\rho_0`: the moment biases are 0 and the energy bias is exactly
:math:`-\\mathcal{E}_{\\rm int}(\\rho_0)/N` (the excluded diagonal), a built-in check.

The decay exponent of :math:`|\\hat b_N|` is fitted with
:func:`rieszflow.engine.stats.power_law_fit` (expected -1), that of W1 (over the first
``w1_replicas`` replicas) with :func:`rieszflow.engine.stats.fit_decay` (expected -1/2).

References
----------
paper 000, Thm 1 / Thm 4, eq. (4.3)-(4.5), (E.2).
Sznitman, Topics in propagation of chaos, Ecole d'ete de Saint-Flour XIX (1991), LNM 1464.
Fournier and Guillin, PTRF 162 (2015) 707-738 (sampling rates of W1).
"""
from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from rieszflow.config import from_mapping, load_config_mapping
from rieszflow.engine.storage import TrajectoryWriter, check_resumable
from rieszflow.engine.measures import wasserstein1
from rieszflow.solvers.particles import INTERACTION_METHODS, GridW1
from rieszflow.studies.mean_field.config import INTEGRATORS, PROBLEM_NAMES, ProblemConfig
from rieszflow.studies.mean_field.study import _particle_setup, _particles, _rng, setup_problem, solve_pde
from rieszflow.studies.sweep import Executor, Job, TasksFailed, check_executor, run_jobs

__all__ = ["KIND", "OBSERVABLES", "BiasConfig", "bias_config", "bias_large_config", "load_bias_config",
           "observables", "pde_observables", "bias_pde_task", "bias_batch_task", "run_bias_study",
           "Z_DECIDE", "ESTIMATORS", "W1_EXACT_MAX_N"]

#: ``kind`` attribute of the bias study's HDF5 file.
KIND = "mean_field_bias"
#: The observables f, in the order of the last axis of the stored arrays.
OBSERVABLES = ("m1", "m2", "energy")
#: ``BiasConfig.estimator`` values.
ESTIMATORS = ("plain", "antithetic")
#: Standard errors the bias must stand above (the replica requirement R_need is computed for it).
Z_DECIDE = 3.0
#: 3-D problems (no PDE): W1 is measured between the two N-particle systems of a triple by the
#: exact transport (POT's network simplex) up to this N, and is NaN above (an N x N cost matrix).
W1_EXACT_MAX_N = 4000
_OBS_LONG = {"m1": "first moment int x_1 dmu", "m2": "second moment int |x|^2 dmu",
             "energy": "interaction energy (lam/2) int int_{x != y} g_s dmu dmu"}


# ----------------------------------------------------------------------------- configuration

@dataclasses.dataclass(frozen=True)
class BiasConfig:
    """The bias study: problems of the mean-field study, replicas per N, batching.

    Parameters
    ----------
    problems : tuple of ProblemConfig
        Problems of :mod:`~rieszflow.studies.mean_field.config` (distinct names). Used fields:
        domain, V, kernel, rho_0, ``times`` (the bias is measured at every time), ``eta``,
        ``pde_dt``, ``n_cells``, ``boundary``, ``interaction_method``, ``integrator``,
        ``softening``, and ``n_particles`` with ``n_seeds``, which here is the number of replicas
        R of each N (antithetic: of triples).
    seed : int
        Root seed (>= 0); batch ``b`` of N particles of problem ``p`` draws from
        ``SeedSequence([seed, p, N, b, 7])`` (``p`` the index in :data:`PROBLEM_NAMES`).
    batch_particles : int
        Replicas are simulated together in batches of ``max(1, batch_particles // N)``
        (one task each; a larger value means fewer, longer tasks; part of the configuration
        because it fixes which replicas share a generator).
    chain_pairs : int
        A batch's pair sums are evaluated on a chain axis (C, N, d) in chunks of at most
        ``chain_pairs // N**2`` replicas when the interaction supports it (the Riesz pair sums);
        with fewer than 2 per chunk, or the sorted 1-D Coulomb sum, replica by replica through the
        interaction's own ``method`` (``"auto"`` takes the fastest exact or stated-accuracy method).
        Default 1: always replica by replica. Measured on the 2-D log kernel at N = 200, 20
        replicas: 0.076 s on the dense NumPy chain axis against 0.003 s for 20 calls of the
        per-replica Numba pair sums (25x).
    w1_replicas : int
        W1 to the PDE is computed for the first ``w1_replicas`` replicas of each N (>= 1).
    eta_check : bool
        Also run the smallest N with step ``2 * eta`` (same R) to measure the step floor.
    estimator : {"plain", "antithetic"}
        ``"plain"``: R independent replicas of N particles, the bias against the PDE.
        ``"antithetic"``: R antithetic triples (one system of 2N particles and two of N, coupled:
        :mod:`~rieszflow.studies.mean_field.antithetic`), the difference
        :math:`D_N = \\mathbb{E}[f(\\mu_{2N}) - (f(\\mu_N^{(1)}) + f(\\mu_N^{(2)}))/2]`.
    n_max : int
        Rows with N above ``n_max`` are defined (stored as NaN, "not run") but get no task;
        0 runs every row. For a ladder run as far as one machine goes.
    interaction_method : str
        If not empty, replaces every problem's ``interaction_method`` (one of
        :data:`rieszflow.studies.mean_field.config.INTERACTION_METHODS`; e.g. ``"numba"``, the
        direct pair sums, where ``"auto"`` would take a fast method slower at that N).
    integrator : str
        If not empty, replaces every problem's ``integrator`` (one of
        :data:`rieszflow.studies.mean_field.config.INTEGRATORS`); not stored by :meth:`to_dict`,
        whose problems carry the value in effect.
    eta : float, optional
        If given, replaces every problem's step ``eta`` (> 0; every time must be a multiple of it,
        and of ``2 * eta`` with ``eta_check``): a ladder at another step, for the step
        dependence of :math:`D_N` row by row. Not stored, like ``integrator``.
    softening : float, optional
        If given, replaces the Plummer ``softening`` (>= 0) of every problem without a PDE
        reference (d = 3); the problems with one keep the exact kernel (their PDE solver has no
        other). A value > 0 with no 3-D problem raises. Not stored, like ``integrator``.

    Raises
    ------
    ValueError
        On an empty or duplicated problem list, a bad seed or a non-positive size, an unknown
        ``estimator``, ``interaction_method`` or ``integrator``, a bad ``eta`` or ``softening``
        (names the field).
    """

    problems: tuple
    seed: int = 0
    batch_particles: int = 100000
    chain_pairs: int = 1
    w1_replicas: int = 16
    eta_check: bool = True
    estimator: str = "plain"
    n_max: int = 0
    interaction_method: str = ""
    integrator: str = ""
    eta: float | None = None
    softening: float | None = None

    def __post_init__(self):
        probs = tuple(p if isinstance(p, ProblemConfig) else ProblemConfig.from_dict(p) for p in self.problems)
        for k in ("eta", "softening"):             # overrides of every problem's own value
            v = getattr(self, k)
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or \
                    (v <= 0 if k == "eta" else v < 0):
                raise ValueError(f"{k}={v!r} must be a finite number {'> 0' if k == 'eta' else '>= 0'} "
                                 f"(or omitted: each problem's own)")
            if k == "softening" and v > 0 and not any(q.d > 2 for q in probs):
                raise ValueError(f"softening={v!r} applies to problems without a PDE reference (d = 3) only, "
                                 f"and there is none among {[q.name for q in probs]}")
            probs = tuple(dataclasses.replace(q, **{k: float(v)}) if k == "eta" or q.d > 2 else q
                          for q in probs)
        if self.estimator not in ESTIMATORS:
            raise ValueError(f"estimator={self.estimator!r} is not allowed; choose one of {ESTIMATORS}")
        if isinstance(self.n_max, bool) or not isinstance(self.n_max, int) or self.n_max < 0:
            raise ValueError(f"n_max={self.n_max!r} must be an integer >= 0 (0: every row)")
        if self.interaction_method:
            if self.interaction_method not in INTERACTION_METHODS:
                raise ValueError(f"interaction_method={self.interaction_method!r} is not allowed; choose one "
                                 f"of {INTERACTION_METHODS} or '' (each problem's own)")
            probs = tuple(ProblemConfig.from_dict({**q.to_dict(), "interaction_method": self.interaction_method})
                          for q in probs)
        if not isinstance(self.integrator, str):
            raise ValueError(f"integrator={self.integrator!r} must be a string: one of {INTEGRATORS} or '' "
                             f"(each problem's own)")
        if self.integrator:
            if self.integrator not in INTEGRATORS:
                raise ValueError(f"integrator={self.integrator!r} is not allowed; choose one of {INTEGRATORS} "
                                 f"or '' (each problem's own)")
            probs = tuple(dataclasses.replace(q, integrator=self.integrator) for q in probs)
        if not probs:
            raise ValueError("problems must not be empty")
        names = [p.name for p in probs]
        if len(set(names)) != len(names):
            raise ValueError(f"problem names must be distinct, got {names}")
        no_pde = [p.name for p in probs if p.d > 2]
        if no_pde and self.estimator != "antithetic":
            raise ValueError(f"problem(s) {no_pde} are 3-D and have no PDE reference: estimator="
                             f"{self.estimator!r} measures the bias against the PDE; use estimator='antithetic' "
                             f"(--preset bias-large)")
        object.__setattr__(self, "problems", probs)
        for k in ("seed", "batch_particles", "chain_pairs", "w1_replicas"):
            v = getattr(self, k)
            lo = 0 if k == "seed" else 1
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise ValueError(f"{k}={v!r} must be an integer >= {lo}")
        if not isinstance(self.eta_check, bool):
            raise ValueError(f"eta_check={self.eta_check!r} must be true or false")
        if self.eta_check:
            for p in probs:
                for t in p.times:
                    k = round(t / (2 * p.eta))
                    if abs(k * 2 * p.eta - t) > 1e-9 * max(1.0, t):
                        raise ValueError(f"{p.name}: time {t} is not a multiple of 2 * eta = {2 * p.eta} "
                                         f"(eta_check=true runs the smallest N at 2 * eta)")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "BiasConfig":
        """Build from a mapping (problems as mappings); unknown keys raise ValueError.

        Parameters
        ----------
        d : Mapping
            Field name to value.

        Returns
        -------
        BiasConfig
        """
        return from_mapping(cls, d)

    def to_dict(self) -> dict:
        """Plain-dict form (JSON-serialisable).

        Returns
        -------
        dict
            Field name to value, problems as their :meth:`ProblemConfig.to_dict`.
        """
        d = dataclasses.asdict(self)
        d["problems"] = [p.to_dict() for p in self.problems]
        for k in ("integrator", "eta", "softening"):   # overrides: the problems carry the value in
            del d[k]                                     # effect (and files written before them resume)
        return d

    def replace(self, **changes) -> "BiasConfig":
        """Copy with top-level fields changed (validated).

        Parameters
        ----------
        **changes
            Field names and their new values.

        Returns
        -------
        BiasConfig
        """
        return dataclasses.replace(self, **changes)


def _bias_interval(n, r) -> ProblemConfig:
    return ProblemConfig(
        name="interval", lo=(-1.25,), hi=(1.25,), n_cells=(800,), s=-1.0, gamma=1.0, lam=1.0, beta=10.0,
        rho0_mean=(0.5,), rho0_std=(0.4,), times=(0.0, 0.5, 1.0), eta=0.005, pde_dt=0.0025,
        n_particles=n, n_seeds=r)


def _bias_rectangle(n, r) -> ProblemConfig:
    return ProblemConfig(
        name="rectangle", lo=(-2.0, -2.0), hi=(2.0, 2.0), n_cells=(96, 96), s=0.0, gamma=1.0, lam=1.0,
        beta=10.0, rho0_mean=(0.5, 0.0), rho0_std=(0.3, 0.5), times=(0.0, 0.5), eta=0.01, pde_dt=0.0025,
        n_particles=n, n_seeds=r)


def _bias_box(n, r) -> ProblemConfig:
    return ProblemConfig(
        name="box", lo=(-3.0, -3.0, -3.0), hi=(3.0, 3.0, 3.0), n_cells=(4, 4, 4), s=1.0, gamma=1.0, lam=1.0,
        beta=10.0, rho0_mean=(0.5, 0.0, 0.0), rho0_std=(0.4, 0.5, 0.5), times=(0.0, 0.5), eta=0.025,
        pde_dt=0.0025, n_particles=n, n_seeds=r, softening=0.1)


def bias_config(seed: int = 0) -> BiasConfig:
    """``--preset bias``: N = 25..200 (1-D to 400) with R = 10 N replicas (about 20 CPU-minutes).

    R = 10 N is the requirement :math:`R \\ge 9 N\\sigma_f^2/b_f^2` (z = 3) for an observable
    with :math:`\\sigma_f \\approx |b_f|`, as measured for the interaction energy here; the
    moments have :math:`\\sigma_f/|b_f|` of 3 or more and are not decided at this R (the table
    says so per row).

    Parameters
    ----------
    seed : int, default 0

    Returns
    -------
    BiasConfig
    """
    return BiasConfig(problems=(_bias_interval((25, 50, 100, 200, 400), (250, 500, 1000, 2000, 4000)),
                                _bias_rectangle((25, 50, 100, 200), (250, 500, 1000, 2000))), seed=seed)


def bias_large_config(seed: int = 0) -> BiasConfig:
    """``--preset bias-large`` (issue 24): the antithetic estimator at N = 1e3 ... 1e6, R = 32 triples.

    The estimator (:mod:`~rieszflow.studies.mean_field.antithetic`) is
    :math:`D_N = \\mathbb{E}[f(\\mu_{2N}) - (f(\\mu_N^{(1)}) + f(\\mu_N^{(2)}))/2] = -b_f/(2N) + O(N^{-2})`
    from R triples of coupled systems; its per-triple standard deviation is :math:`O(1/N)` like
    :math:`D_N` itself, so the R needed is the same at every N. R = 32 is chosen from a pilot at
    N = 1e3 (32 triples): the per-triple ratio :math:`|D_N|/\\mathrm{sd}` was 1.3 (d = 1) and
    1.5 (d = 2) for the interaction energy and 0.66 and 0.58 for the second moment, so R = 32
    puts the energy at z of about 7-8 and the second moment at about 3.3-3.7. Same physics as
    ``--preset bias`` (interval d = 1, s = -1, sorted exact pair sums; rectangle d = 2, log
    kernel), at the step ``eta = 0.025`` (the step's own error is common to the 2N and N systems
    at leading order and drops out of :math:`D_N`; the ``2 * eta`` row at N = 1e3 measures what
    is left), times (0, 0.5, 1) (d = 1) and (0, 0.5) (d = 2). N = 1e3, 3e3, ..., 1e6 (half
    decades); the pair sums go through ``method="auto"`` (fast summation above its crossover).
    The third problem, ``box`` (d = 3, Coulomb s = 1, :mod:`~rieszflow.studies.mean_field.config`),
    has no PDE: its W1 is the exact transport between the two N-particle systems of a triple
    (N <= :data:`W1_EXACT_MAX_N`; expected slope -1/3), its t = 0 energy check the closed form.
    Its kernel has a fixed Plummer softening ``softening = 0.1`` and it steps with Euler-Maruyama:
    with the exact kernel, plain Euler-Maruyama's D_N moved with the step at N = 1e3 (collision
    kicks), and the Metropolized step (``--set softening=0 --set integrator=metropolized``,
    :mod:`~rieszflow.engine.metropolized`) failed the first moment's control (b exactly 0 in the
    limit dynamics; 3.2 +- 0.9 at N = 3e3) as its triples decoupled with N
    (docs/studies_mean_field.md). With the softening the force is bounded and Lipschitz: the limit
    is the softened McKean-Vlasov equation, and at N = 1e3 the energy's b is -1.05 +- 0.06,
    -0.99 +- 0.06 and -0.99 +- 0.04 at eta = 0.025, 0.0125, 0.00625 (24 triples each,
    ``scripts/mean_field_step_check.py box 1000 24``). Its cost (20 steps, one thread, direct
    sums, growing like :math:`N^2`): 1281 CPU-s for the ladder to N = 1e4 with 32 triples per N
    and the 2 eta row, most of it at 1e4; the exact W1 adds about 2 CPU-s per pair of systems at
    N = 1e3-3e3. Run it with ``--problem box --set n_max=...``.

    Cost, measured on one core of the project's 2-core machine (shared, niced): one triple is
    4N particle updates per step; d = 1 (40 steps): 0.04 s at N = 1e3, 6 s at N = 1e5, so about
    60-100 s at 1e6 and about 1 CPU-hour for R = 32 there; d = 2 (20 steps, direct Numba pair
    sums): 0.34 s at N = 1e3, about 40 s at N = 1e4 (2N = 2e4), and direct sums grow like
    :math:`N^2`, so N >= 1e5 in 2-D needs a fast summation of a few seconds per call at 2e5
    particles (about 1e4 CPU-hours for the whole 2-D ladder with direct sums). ``n_max`` and
    ``interaction_method`` (``--set``) run the ladder as far as a machine goes; the rows fill
    together batch by batch (``batch_particles = 32000``), so a run cut short holds every N it
    reached, with fewer triples at the largest.

    Parameters
    ----------
    seed : int, default 0

    Returns
    -------
    BiasConfig
    """
    n = (1000, 3000, 10000, 30000, 100000, 300000, 1000000)
    r = (32,) * len(n)
    one = dataclasses.replace(_bias_interval(n, r), eta=0.025)
    two = dataclasses.replace(_bias_rectangle(n, r), eta=0.025)
    return BiasConfig(problems=(one, two, _bias_box(n, r)), seed=seed, batch_particles=32000, w1_replicas=8,
                      estimator="antithetic")


def load_bias_config(path) -> BiasConfig:
    """Read a :class:`BiasConfig` from JSON or a rieszflow file that stores one (strict).

    Parameters
    ----------
    path : str or os.PathLike

    Returns
    -------
    BiasConfig

    Raises
    ------
    ValueError
        On invalid JSON or invalid/unknown fields.
    """
    return BiasConfig.from_dict(load_config_mapping(path))


# ----------------------------------------------------------------------------- observables

def observables(x, interaction) -> np.ndarray:
    """The observables :data:`OBSERVABLES` of empirical measures (the energy by ``interaction(x)``).

    Parameters
    ----------
    x : ndarray, shape (N, d) or (C, N, d), float64
        Particle positions (C replicas).
    interaction : engine.energy Energy
        The ``"mean_field"``-normalised pair interaction of the particles,
        :math:`\\frac{\\lambda}{2N}\\sum_{i\\ne j} g_s` (:func:`~rieszflow.solvers.particles.make_interaction`).

    Returns
    -------
    ndarray, shape (3,) or (C, 3), float64
        :math:`\\frac1N\\sum x_{i,1}`, :math:`\\frac1N\\sum |x_i|^2` and
        :math:`\\frac{\\lambda}{2N^2}\\sum_{i\\ne j} g_s(x_i - x_j)` (the interaction's value / N).
    """
    x = np.asarray(x, dtype=np.float64)
    single = x.ndim == 2
    xs = x[None] if single else x
    n = xs.shape[1]
    out = np.empty((xs.shape[0], len(OBSERVABLES)))
    out[:, 0] = xs[..., 0].mean(axis=1)
    out[:, 1] = np.sum(xs * xs, axis=2).mean(axis=1)
    out[:, 2] = [float(interaction(xi)) / n for xi in xs]
    return out[0] if single else out


def pde_observables(problem, rho) -> np.ndarray:
    """The observables :data:`OBSERVABLES` of a PDE density (cell-centre quadrature).

    Parameters
    ----------
    problem : solvers.mckean_vlasov.MeanFieldProblem
        Its mesh and interaction (the solver's exact cell integrals of :math:`\\lambda g_s`).
    rho : ndarray, shape (n_cells,), float64
        Cell densities.

    Returns
    -------
    ndarray, shape (3,), float64
        :math:`\\int x_1\\rho`, :math:`\\int|x|^2\\rho`, :math:`\\frac12\\int\\rho\\,(\\lambda g_s*\\rho)`.
    """
    dom = problem.domain
    rho = np.asarray(rho, dtype=np.float64)
    m = dom.volumes * rho
    m = m / m.sum()
    c = dom.centers
    return np.array([float(m @ c[:, 0]), float(m @ np.sum(c * c, axis=1)),
                     0.5 * float(m @ problem.interaction_potential(rho / np.dot(dom.volumes, rho)))])


# ----------------------------------------------------------------------------- tasks

def bias_pde_task(c: ProblemConfig, pde_backend: str = "assembled") -> dict:
    """The PDE reference of problem ``c``: observables, W1 masses, and the PDE's error in f.

    Parameters
    ----------
    c : ProblemConfig
    pde_backend : {"assembled", "fipy"}, default "assembled"

    Returns
    -------
    dict
        ``f`` (n_times, 3) the observables of :math:`\\rho_t`; ``masses`` (n_times, n_cells);
        ``f_dt_floor`` and ``f_grid_floor`` (n_times, 3): absolute change of f with ``2 * pde_dt``
        and with half the cells per axis; ``seconds``. A 3-D problem has no PDE: ``f`` holds the
        closed-form observables of :math:`\\rho_0` at t = 0 and NaN after, ``masses`` is None and
        the floors are NaN.

    Raises
    ------
    RuntimeError
        If a PDE solve did not converge.
    """
    t0 = time.perf_counter()
    if c.d > 2:
        return _gaussian_reference(c, t0)
    setup = setup_problem(c)
    ref = solve_pde(setup, c.pde_dt, pde_backend=pde_backend)
    f = np.array([pde_observables(setup.problem, r) for r in ref.rho])
    coarse_dt = solve_pde(setup, 2 * c.pde_dt, pde_backend=pde_backend)
    f_dt = np.array([pde_observables(setup.problem, r) for r in coarse_dt.rho])
    coarse = setup_problem(c, coarsen=2)
    coarse_res = solve_pde(coarse, c.pde_dt, pde_backend=pde_backend)
    f_h = np.array([pde_observables(coarse.problem, r) for r in coarse_res.rho])
    return {"f": f, "masses": np.array([GridW1.masses(setup.domain, r) for r in ref.rho]),
            "f_dt_floor": np.abs(f - f_dt), "f_grid_floor": np.abs(f - f_h),
            "seconds": time.perf_counter() - t0}


def _gaussian_reference(c: ProblemConfig, t0: float) -> dict:
    """The reference of a problem without a PDE (d = 3): the observables of rho_0 at t = 0 in closed
    form (untruncated normal law: the box holds :data:`~rieszflow.studies.mean_field.config.BOX_MARGIN_SD`
    standard deviations), NaN at t > 0; no masses; NaN floors."""
    from rieszflow.engine.energy.interaction import gaussian_riesz_expectation

    times = np.asarray(c.times)
    f = np.full((times.size, len(OBSERVABLES)), np.nan)
    mean, sd = np.asarray(c.rho0_mean), np.asarray(c.rho0_std)
    f[0] = [mean[0], float(mean @ mean + sd @ sd), 0.5 * c.lam * gaussian_riesz_expectation(sd, c.s, c.softening)]
    nan = np.full_like(f, np.nan)
    return {"f": f, "masses": None, "f_dt_floor": nan, "f_grid_floor": nan.copy(),
            "seconds": time.perf_counter() - t0}


def _supports_chains(energy, d: int) -> bool:
    """Whether ``energy.grad`` accepts a chain axis (C, N, d)."""
    try:
        g = energy.grad(np.array([[[0.0] * d, [0.5] * d]] * 2))
    except (ValueError, TypeError):
        return False
    return getattr(g, "shape", None) == (2, 2, d)


def bias_batch_task(c: ProblemConfig, seed: int, n: int, batch: int, n_rep: int, eta: float,
                    chain_pairs: int, n_w1: int, masses, coupled: bool = False) -> dict:
    """``n_rep`` replicas of N particles of problem ``c``: the observables (and W1) at every time.

    Every replica starts from N exact draws of :math:`\\rho_0` and takes the Euler-Maruyama steps
    of :class:`~rieszflow.solvers.particles.MeanFieldParticles` (its
    :func:`~rieszflow.engine.simulate.projected_langevin` step, with the gradient of the potential
    and the interaction passed in, so that several replicas advance on a chain axis); with
    ``c.integrator = "metropolized"`` the Metropolized step of
    :func:`~rieszflow.engine.metropolized.metropolized_langevin` instead, one replica at a time,
    from the same normals plus one uniform per particle and step (shared by coupled systems like
    the normals).

    With ``coupled`` every replica is an antithetic triple (:mod:`~rieszflow.studies.mean_field.antithetic`):
    one system of 2N particles (2N exact draws of :math:`\\rho_0`) and two independent systems of N
    particles that start from exactly the first and the second half of those positions and take
    exactly the same Brownian increments as those halves at every step (synchronous coupling; one
    draw of standard normals per step drives all three).

    Parameters
    ----------
    c : ProblemConfig
    seed : int
        Root seed; the batch draws from ``SeedSequence([seed, problem, n, batch, 7])``.
    n, batch, n_rep : int
        Particles, batch index and replicas in this batch.
    eta : float
        Step.
    chain_pairs : int
        Chunk size of the chain-axis pair sums (:class:`BiasConfig`).
    n_w1 : int
        Compute W1 for the first ``n_w1`` replicas of the batch (``<= n_rep``).
    masses : ndarray, shape (n_times, n_cells), or None
        PDE cell masses (:func:`bias_pde_task`); None for a 3-D problem (no PDE).

    coupled : bool, default False
        Antithetic triples instead of plain replicas (``n`` is then the size N of the halves).

    Returns
    -------
    dict
        ``f`` (n_rep, n_times, 3) (coupled: (n_rep, 2, n_times, 3), the two N-particle systems),
        ``w1`` (n_w1, n_times) (coupled: of the first N-particle system of each triple against the
        PDE; for a 3-D problem between the two N-particle systems, NaN above
        :data:`W1_EXACT_MAX_N`), ``wall``
        (s); coupled also ``f2n`` (n_rep, n_times, 3), the 2N-particle system; metropolized also
        ``acceptance``, the accepted fraction of all proposals.

    Raises
    ------
    ValueError
        For a 3-D problem (no PDE) without ``coupled``.
    FloatingPointError
        If a particle position becomes non-finite.
    """
    ip = PROBLEM_NAMES.index(c.name)
    _, rho0, dist = _particle_setup(c)
    if dist is None and not coupled:
        raise ValueError(f"problem {c.name!r} is {c.d}-D and has no PDE reference: only antithetic triples "
                         f"(coupled=True) run it")
    times = np.asarray(c.times)
    steps = np.rint(times / eta).astype(np.int64)
    rng = _rng(seed, ip, n, batch, 7)
    ps = _particles(c, eta)
    inter, pot, space = ps.interaction, ps.potential, ps.space
    init_fn, step_fn = ps.integrator()
    m = 2 * n if coupled else n
    x = np.stack([rho0.sample(rng, m) for _ in range(n_rep)])          # (C, N, d) or (C, 2N, d)
    d = x.shape[2]
    chains = _supports_chains(inter, d)
    state = init_fn(x[0])
    # the coupled N-particle systems: replica r's halves are systems 2r and 2r + 1
    systems = [x, x.reshape(2 * n_rep, n, d)] if coupled else [x]

    def grad(xc):
        gv = pot.grad(xc.reshape(-1, d)).reshape(xc.shape)            # sum of V(x_i): per particle
        chunk = max(1, chain_pairs // (xc.shape[1] ** 2)) if chains else 1
        if chunk > 1:
            gi = np.concatenate([inter.grad(xc[i:i + chunk]) for i in range(0, len(xc), chunk)])
        else:
            gi = np.stack([inter.grad(xi) for xi in xc])
        return gv + gi

    metro = c.integrator != "euler"
    if metro:                      # particle-by-particle accept/reject, one system (chain) at a time
        from rieszflow.engine.metropolized import MetropolizedState, metropolized_langevin

        m_init, m_step = metropolized_langevin(space, eta, c.beta, gamma=c.gamma, lam=c.lam, s=c.s,
                                               softening=c.softening,
                                               sweep="sequential" if c.integrator == "metropolized"
                                               else "simultaneous")
        for xi in x:                   # the initial positions checked once, not at every step
            m_init(xi)
    counts = np.zeros(2, dtype=np.int64)                               # accepted, proposed

    def step(xc, noise, log_u):
        if metro:
            out = np.empty_like(xc)
            for i in range(xc.shape[0]):
                st = m_step(MetropolizedState(omega=xc[i]), (noise[i], log_u[i]))
                out[i] = st.omega
                counts[:] += (int(st.n_accepted.sum()), xc.shape[1])
            return out
        st = dataclasses.replace(state, omega=xc.reshape(-1, d))
        new = step_fn(st, noise.reshape(-1, d), grad=grad(xc).reshape(-1, d))
        return np.asarray(new.omega).reshape(xc.shape)

    f = np.empty((n_rep, times.size, len(OBSERVABLES)))
    fh = np.empty((2 * n_rep, times.size, len(OBSERVABLES))) if coupled else None
    w1 = np.empty((n_w1, times.size))
    t0 = time.perf_counter()
    k = 0
    for it, target in enumerate(steps):
        while k < target:
            noise = rng.standard_normal(x.shape)                       # shared by the coupled systems
            log_u = np.log(rng.random(x.shape[:2])) if metro else None
            systems = [step(xs, noise.reshape(xs.shape), log_u.reshape(xs.shape[:2]) if metro else None)
                       for xs in systems]
            k += 1
        if not all(np.isfinite(xs).all() for xs in systems):
            raise FloatingPointError(f"non-finite particle positions at step {k}")
        f[:, it] = observables(systems[0], inter)
        if coupled:
            fh[:, it] = observables(systems[1], inter)
        for r in range(n_w1):
            if dist is None:                       # 3-D: the two N systems of triple r, exactly
                w1[r, it] = (wasserstein1(systems[-1][2 * r], systems[-1][2 * r + 1])
                             if n <= W1_EXACT_MAX_N else math.nan)
            else:
                w1[r, it] = dist.particles(systems[-1][2 * r if coupled else r], masses[it])
    acc = {"acceptance": counts[0] / counts[1]} if metro else {}
    if coupled:
        return {"f": fh.reshape(n_rep, 2, times.size, len(OBSERVABLES)), "f2n": f, "w1": w1,
                "wall": time.perf_counter() - t0, **acc}
    return {"f": f, "w1": w1, "wall": time.perf_counter() - t0, **acc}


# ----------------------------------------------------------------------------- the study

def _rows(c: ProblemConfig, eta_check: bool):
    """(label, N, R, eta) of every row of problem ``c``: the N sweep, then the step check."""
    rows = [(f"N={n}", int(n), int(r), c.eta) for n, r in zip(c.n_particles, c.n_seeds)]
    if eta_check:
        rows.append((f"N={c.n_particles[0]},2eta", int(c.n_particles[0]), int(c.n_seeds[0]), 2 * c.eta))
    return rows


def run_bias_study(config: BiasConfig, out, *, overwrite: bool = False, resume: bool = False,
                   progress: bool = True, log=print, workers: int | None = 0, scheduler: str | None = None,
                   pde_backend: str = "assembled", on_summary=None) -> Path:
    """Run the bias study and write one HDF5 file (kind :data:`KIND`), resumable batch by batch.

    Tasks (one PDE task per problem, one task per batch of replicas) run through
    :func:`rieszflow.studies.sweep.run_jobs`: in this process, on a LocalCluster or on a scheduler,
    with the same numbers (each batch draws from its own seed). Variables of problem ``p``:
    ``p_f(p_row, p_rep, p_time, obs)`` (NaN until its batch is stored), ``p_w1(p_row, p_w1rep,
    p_time)``, ``p_wall(p_row, p_batch)``, ``p_f_pde(p_time, obs)``, ``p_f_dt_floor`` and
    ``p_f_grid_floor`` (p_time, obs); rows are the N of the problem, then (``eta_check``) the
    smallest N at ``2 * eta``.

    Parameters
    ----------
    config : BiasConfig
    out : str or os.PathLike
    overwrite : bool, default False
        Replace an existing file (otherwise FileExistsError).
    resume : bool, default False
        Keep the batches stored in ``out`` (written with the same configuration) and run the rest.
    progress : bool, default True
    log : callable, default print
    workers : int or None, default 0
        0 in-process; n > 0 a LocalCluster of n workers; None one per core.
    scheduler : str, optional
        Address of an existing Dask scheduler.
    pde_backend : {"assembled", "fipy"}, default "assembled"
    on_summary : callable, optional
        ``on_summary(summary)`` with the batch tasks' :class:`~rieszflow.studies.sweep.JobsSummary`.

    Returns
    -------
    pathlib.Path

    Raises
    ------
    TypeError
        If ``config`` is not a BiasConfig.
    FileExistsError
        If ``out`` exists and neither ``overwrite`` nor ``resume`` is set.
    ValueError
        On a resumed file with another configuration, or ``workers`` with ``scheduler``.
    RuntimeError
        If a PDE solve did not converge or batch tasks failed (the others are stored).
    """
    if not isinstance(config, BiasConfig):
        raise TypeError(f"config must be a BiasConfig, got {type(config).__name__}")
    if scheduler is not None and workers == 0:
        workers = None
    check_executor(workers, scheduler)
    log = log or (lambda *a: None)
    out = Path(out)
    t_start = time.perf_counter()
    cfg_attr = {"json": config.to_dict()}
    if resume:
        check_resumable(out, KIND, cfg_attr)
    with TrajectoryWriter(out, KIND, config=cfg_attr, overwrite=overwrite, resume=resume,
                          attrs={"seed": config.seed, "pde_backend": pde_backend,
                                 "problems": [p.name for p in config.problems],
                                 "observables": list(OBSERVABLES), "z_decide": Z_DECIDE,
                                 "estimator": config.estimator}) as w, \
            Executor(workers, scheduler) as ex:
        pde, coupled = {}, config.estimator == "antithetic"
        summary = run_jobs([Job({"stage": "pde", "problem": c.name}, bias_pde_task, (c, pde_backend))
                            for c in config.problems], executor=ex, progress=progress, desc="bias PDE",
                           on_result=lambda job, r: pde.__setitem__(job.task["problem"], r))
        if summary.failed:
            raise TasksFailed("PDE tasks", summary.failures, summary.total,
                              hint="; the bias needs a converged PDE reference")
        w.dimension("obs", len(OBSERVABLES), coords=np.arange(len(OBSERVABLES)),
                    attrs={"long_name": "observable index: " + ", ".join(
                        f"{i} {_OBS_LONG[o]}" for i, o in enumerate(OBSERVABLES)), "units": "1"})
        jobs, skipped, state, where = [], 0, {}, {}
        for c in config.problems:
            p, ref = c.name, pde[c.name]["value"]
            rows = _rows(c, config.eta_check)
            times = np.asarray(c.times)
            max_r = max(r for _, _, r, _ in rows)
            n_w1 = min(config.w1_replicas, min(r for _, _, r, _ in rows))
            batches = [max(1, config.batch_particles // n) for _, n, _, _ in rows]
            n_batch = max(math.ceil(r / b) for (_, _, r, _), b in zip(rows, batches))
            w.dimension(f"{p}_row", len(rows), coords=np.arange(len(rows)),
                        attrs={"long_name": "row: " + "; ".join(lab for lab, *_ in rows), "units": "1"})
            w.dimension(f"{p}_time", times.size, coords=times, attrs={"long_name": "time t", "units": "1"})
            w.dimension(f"{p}_rep", max_r, coords=np.arange(max_r),
                        attrs={"long_name": "independent replica", "units": "1"})
            w.dimension(f"{p}_w1rep", n_w1, coords=np.arange(n_w1),
                        attrs={"long_name": "replica with a W1 value", "units": "1"})
            w.dimension(f"{p}_batch", n_batch, coords=np.arange(n_batch),
                        attrs={"long_name": "batch of replicas (one task)", "units": "1"})
            for name, arr in (("N", [n for _, n, _, _ in rows]), ("R", [r for _, _, r, _ in rows])):
                w.variable(f"{p}_{name}", (f"{p}_row",), data=np.asarray(arr, dtype=np.int64),
                           attrs={"long_name": {"N": "number of particles", "R": "replicas"}[name],
                                  "units": "1"})
            w.variable(f"{p}_eta", (f"{p}_row",), data=np.asarray([e for *_, e in rows]),
                       attrs={"long_name": "Euler-Maruyama step of the row", "units": "1"})
            for name, arr, ln in (("f_pde", ref["f"], "observables of the PDE density rho_t" if c.d <= 2 else
                                   "observables of rho_0 at t = 0 in closed form (normal law); NaN at t > 0: "
                                   "no PDE in 3-D"),
                                  ("f_dt_floor", ref["f_dt_floor"], "|f(rho, pde_dt) - f(rho, 2 pde_dt)|"),
                                  ("f_grid_floor", ref["f_grid_floor"],
                                   "|f(rho, n_cells) - f(rho, n_cells / 2 per axis)|")):
                w.variable(f"{p}_{name}", (f"{p}_time", "obs"), data=arr, attrs={"long_name": ln, "units": "1"})
            w.set_attrs(**{f"{p}_pde_wall_s": ref["seconds"], f"{p}_n_cells": list(c.n_cells),
                           f"{p}_pde_dt": c.pde_dt})
            if coupled:
                w.dimension(f"{p}_half", 2, coords=np.arange(2),
                            attrs={"long_name": "N-particle system of an antithetic triple (first or second "
                                                "half of the 2N system's particles and noise)", "units": "1"})
                w.variable(f"{p}_f2n", (f"{p}_row", f"{p}_rep", f"{p}_time", "obs"),
                           attrs={"long_name": "observables of the 2N-particle system of each antithetic "
                                               "triple (NaN: not run)", "units": "1"})
            w.variable(f"{p}_f", (f"{p}_row", f"{p}_rep", *((f"{p}_half",) if coupled else ()), f"{p}_time", "obs"),
                       attrs={"long_name": ("observables of the two coupled N-particle systems of each "
                                            "antithetic triple" if coupled else
                                            "observables of the particles' empirical measure") + " (NaN: not run)",
                              "units": "1"})
            w.variable(f"{p}_w1", (f"{p}_row", f"{p}_w1rep", f"{p}_time"),
                       attrs={"long_name": "W1 between the particles and rho_t" if c.d <= 2 else
                              f"W1 between the two N-particle systems of the triple (exact transport; NaN "
                              f"for N > {W1_EXACT_MAX_N}; no PDE in 3-D)", "units": "1"})
            w.variable(f"{p}_wall", (f"{p}_row", f"{p}_batch"),
                       attrs={"long_name": "wall-clock time of the batch (simulation and observables)",
                              "units": "s"})
            if c.integrator != "euler":
                w.variable(f"{p}_acceptance", (f"{p}_row", f"{p}_batch"),
                           attrs={"long_name": "accepted fraction of the Metropolized step's proposals in the "
                                               "batch (NaN: not run)", "units": "1"})
            st = {k: w.read(f"{p}_{k}") for k in ("f", "w1", "wall") + (("f2n",) if coupled else ())
                  + (("acceptance",) if c.integrator != "euler" else ())}
            for ir, ((lab, n, r, eta), b) in enumerate(zip(rows, batches)):
                if config.n_max and n > config.n_max:
                    continue                              # defined, not run: stays NaN
                for ib, r0 in enumerate(range(0, r, b)):
                    nr = min(b, r - r0)
                    k_w1 = max(0, min(n_w1 - r0, nr))
                    if np.isfinite(st["f"][ir, r0:r0 + nr]).all():
                        skipped += 1
                        continue
                    job = Job({"stage": "bias", "problem": p, "row": lab, "batch": ib}, bias_batch_task,
                              (c, config.seed if eta == c.eta else config.seed + 1_000_003, n, ib, nr, eta,
                               config.chain_pairs, k_w1, ref["masses"], coupled))
                    # order: the rows fill together (batch b of every row before batch b + 1 of any),
                    # so a study cut short holds every N, with fewer replicas where it stopped
                    jobs.append(((r0 / r, -nr * n * (n if c.d > 1 else math.log2(n)) / eta), job))
                    where[id(job)] = (ir, ib, r0, nr, k_w1)
            state[p] = st

        def store(job, result):
            if result["status"] != "done":
                return
            p, v = job.task["problem"], result["value"]
            ir, ib, r0, nr, k_w1 = where[id(job)]
            st = state[p]
            st["wall"][ir, ib] = v["wall"]
            if "acceptance" in v:
                st["acceptance"][ir, ib] = v["acceptance"]
                w.set(f"{p}_acceptance", st["acceptance"])
            if k_w1:
                st["w1"][ir, r0:r0 + k_w1] = v["w1"]
            if coupled:
                st["f2n"][ir, r0:r0 + nr] = v["f2n"]
            st["f"][ir, r0:r0 + nr] = v["f"]           # last: a finite f marks a stored batch
            for k in ("wall", "w1") + (("f2n",) if coupled else ()) + ("f",):
                w.set(f"{p}_{k}", st[k])

        jobs.sort(key=lambda cj: cj[0])               # changes no number: every batch has its own seed
        jobs = [j for _, j in jobs]
        log(f"mean-field bias: {len(jobs)} batch tasks on {ex.describe()}"
            + (f" ({skipped} stored before, skipped)" if skipped else ""))
        summary = run_jobs(jobs, executor=ex, progress=progress, desc="bias batches", skipped=skipped,
                           on_result=store)
        w.set_attrs(wall_s=time.perf_counter() - t_start, failures=summary.failures)
        if on_summary is not None:
            on_summary(summary)
        if summary.failed:
            raise TasksFailed("batch tasks", summary.failures, summary.total,
                              hint=f"; the other batches are stored in {out}; --resume runs the failed ones")
    return out
