"""Configuration of the ``rieszflow mean-field`` study: strict frozen dataclasses and the two presets.

Problem choices (and why)
-------------------------
``interval``: :math:`\\Omega = [-1.25, 1.25]`, :math:`V = x^2/2`, 1-D Coulomb kernel
:math:`s = -1` (:math:`g = -|w|`), :math:`\\lambda = 1`, :math:`\\beta = 10`. The zero-temperature
equilibrium is the uniform law on :math:`[-\\lambda/\\gamma, \\lambda/\\gamma] = [-1, 1]`
(:math:`V'' = 2\\lambda\\rho`), so at :math:`\\beta = 10` mass reaches the reflecting walls.
:math:`\\rho_0` is a truncated :math:`N(0.5, 0.4^2)`: the flow moves and spreads it. The
force is exact in O(N log N) (:class:`rieszflow.engine.energy.SortedCoulomb1D`), so
N = 1e5 is cheap on a CPU. Why not the log kernel in 1-D: see
:mod:`rieszflow.solvers.particles` (Euler's collision kicks do not vanish with eta).

``rectangle``: :math:`\\Omega = [-2, 2]^2`, :math:`V = |x|^2/2`, 2-D Coulomb (log) kernel
:math:`s = 0`, :math:`\\lambda = 1`, :math:`\\beta = 10`; equilibrium at zero temperature: the
uniform disk of radius 1 (particles_pde_reference.md sec. 3.1). :math:`\\rho_0` is a
product of truncated normals centred at (0.5, 0) with standard deviations
(0.3, 0.5). Interaction by the O(N^2) Numba pair sums.

``box`` (d = 3; only the antithetic bias study, ``--preset bias-large``): :math:`\\Omega = [-3, 3]^3`,
:math:`V = |x|^2/2`, 3-D Coulomb kernel :math:`s = 1` with a fixed Plummer softening
:math:`\\varepsilon = 0.1` in the preset (:math:`g = (|w|^2 + \\varepsilon^2)^{-1/2}`; direct sums; fast
multipole sums above the crossover when ``softening = 0``), :math:`\\lambda = 1`,
:math:`\\beta = 10`, :math:`\\rho_0` a normal law centred at (0.5, 0, 0) with standard deviations
(0.4, 0.5, 0.5). There is no 3-D PDE solver, so the problem has no :math:`\\rho_t` reference: the
antithetic estimator needs none, and at t = 0 its energy row is checked against the closed-form
interaction energy of the Gaussian :math:`\\rho_0` (the box holds 6 standard deviations on every
side, so the truncation changes it by less than 1e-8). Why the softening: with the exact kernel
the Euler-Maruyama step's collision kicks, and the Metropolized step's rejections, each carry an
error of the size of the :math:`O(1/N)` bias (docs/studies_mean_field.md); with a fixed
:math:`\\varepsilon` the force is bounded and Lipschitz, the mean-field limit is the McKean-Vlasov
equation of the softened kernel, and the bias estimate is flat in N; the step moves it by
0.15 +- 0.06 (of 1.13) between 2 eta and eta at N = 1e3 (docs/results/mean_field_bias_large.md).

Every field can be changed through a JSON file (``--config``); unknown keys raise.

References
----------
paper 000, Thm 1 and Thm 4, eq. (4.3)-(4.5), (E.2)-(E.5).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

from rieszflow.engine.energy.interaction import check_s
from rieszflow.config import from_mapping
from rieszflow.engine.simulate import BOUNDARIES
from rieszflow.solvers.particles import INTERACTION_METHODS
from rieszflow.config import load_config_mapping

__all__ = ["PROBLEM_NAMES", "PROBLEM_DIMS", "BOX_MARGIN_SD", "INTEGRATORS", "ProblemConfig", "MeanFieldConfig", "quick_config", "full_config", "load_config"]

#: The problems a study can hold, in a fixed order: a problem's position here (not in the
#: configuration) keys its random streams, so a study of a subset reproduces the full one.
PROBLEM_NAMES = ("interval", "rectangle", "box")
#: The space dimension of each problem.
PROBLEM_DIMS = {"interval": 1, "rectangle": 2, "box": 3}
#: Standard deviations of rho_0 a problem without a PDE reference must keep inside its box (the
#: closed-form check at t = 0 neglects the truncation: a mass below 2e-9 per side).
BOX_MARGIN_SD = 6.0
_BOUNDARIES = BOUNDARIES  # the engine's boundary schemes
_BACKENDS = ("numpy", "cupy")
_METHODS = INTERACTION_METHODS
#: The particle steps of a problem (:class:`ProblemConfig` ``integrator``).
INTEGRATORS = ("euler", "metropolized", "metropolized_simultaneous")


def _tuple(name, value, kind, *, positive=False, minimum=None, nonempty=True):
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        value = (value,)
    out = []
    for v in value:
        if kind is int:
            if isinstance(v, bool) or not isinstance(v, int):
                raise ValueError(f"{name} must contain integers, got {v!r}")
            if minimum is not None and v < minimum:
                raise ValueError(f"{name} entries must be >= {minimum}, got {v!r}")
        else:
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ValueError(f"{name} must contain finite numbers, got {v!r}")
            v = float(v)
            if positive and not v > 0:
                raise ValueError(f"{name} entries must be > 0, got {v!r}")
        out.append(v)
    if nonempty and not out:
        raise ValueError(f"{name} must not be empty")
    return tuple(out)


@dataclasses.dataclass(frozen=True)
class ProblemConfig:
    """One domain/potential/interaction and the particle runs compared with its PDE.

    Parameters
    ----------
    name : {"interval", "rectangle", "box"}
        Problem label (prefix of its variables in the HDF5 file); the dimension
        is ``len(lo)`` (:data:`PROBLEM_DIMS`: 1 for "interval", 2 for "rectangle", 3 for "box";
        "box" has no PDE reference and runs only in the antithetic bias study).
    lo, hi : tuple of float
        Box corners of :math:`\\Omega`.
    n_cells : tuple of int
        PDE cells per axis (each even, >= 4: the grid floor uses half of it).
    gamma : float
        :math:`V(x) = \\frac{\\gamma}{2}|x|^2`, ``>= 0``.
    s : float
        Riesz exponent, ``-2 < s < d`` (the PDE needs a locally integrable kernel).
    lam : float
        Interaction strength :math:`\\lambda \\ge 0` (mean-field scaling :math:`\\lambda/N`).
    beta : float
        Inverse temperature, > 0.
    rho0_mean, rho0_std : tuple of float
        Truncated-normal initial law :math:`\\rho_0` (per axis).
    times : tuple of float
        Comparison times, increasing, starting at 0; multiples of ``eta``,
        of every ``eta_refinement`` and of ``2 * pde_dt``.
    eta : float
        Particle Euler-Maruyama step.
    pde_dt : float
        PDE implicit-Euler step (the floor run uses ``2 * pde_dt``).
    boundary : {"reflect", "project"}
        Particle boundary treatment.
    n_particles, n_seeds : tuple of int
        Particle numbers and, for each, the number of independent runs.
    gpu_n_particles, gpu_n_seeds : tuple of int
        Extra particle numbers run only with ``backend="cupy"``.
    eta_refinement : tuple of float
        Step sizes of the refinement runs (may be empty).
    refinement_n, refinement_seeds : int
        Particle number and runs per step size of the refinement.
    interaction_method : {"auto", "sorted", "numba", "numpy"}
        :func:`rieszflow.solvers.particles.make_interaction` method.
    w1_tol : float
        2-D only: cells with mass ``<= w1_tol`` in both measures are dropped
        from the transport problem.
    integrator : {"euler", "metropolized", "metropolized_simultaneous"}
        The particle step of the bias study: ``"euler"`` (Euler-Maruyama with ``boundary``), or
        :func:`~rieszflow.engine.metropolized.metropolized_langevin`, Euler proposals accepted
        or rejected particle by particle so that no collision kick is taken (proposals outside
        the box are rejected and ``boundary`` is not used), with ``sweep="sequential"``
        (``"metropolized"``: exact Gibbs invariance, Euler in visiting order) or
        ``sweep="simultaneous"`` (``"metropolized_simultaneous"``: exactly Euler-Maruyama when
        every move is accepted). The W1 study runs ``"euler"`` only.
    softening : float, default 0.0
        Plummer softening :math:`\\varepsilon \\ge 0` of the particles' kernel,
        :math:`g_s(\\sqrt{r^2 + \\varepsilon^2})` (:class:`~rieszflow.engine.energy.Interaction`):
        a fixed :math:`\\varepsilon > 0` makes the pair force bounded and Lipschitz, so the mean-field
        limit is the McKean-Vlasov equation of the softened kernel. Only for a problem without a PDE
        reference (d = 3): the PDE solver integrates the exact kernel.

    Raises
    ------
    ValueError
        On any out-of-range or inconsistent value (message names the field).
    """

    name: str
    lo: tuple
    hi: tuple
    n_cells: tuple
    s: float
    rho0_mean: tuple
    rho0_std: tuple
    times: tuple
    eta: float
    pde_dt: float
    n_particles: tuple
    n_seeds: tuple
    gamma: float = 1.0
    lam: float = 1.0
    beta: float = 10.0
    boundary: str = "reflect"
    gpu_n_particles: tuple = ()
    gpu_n_seeds: tuple = ()
    eta_refinement: tuple = ()
    refinement_n: int = 1000
    refinement_seeds: int = 2
    interaction_method: str = "auto"
    w1_tol: float = 1e-10
    integrator: str = "euler"
    softening: float = 0.0

    def __post_init__(self):
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731
        if self.name not in PROBLEM_NAMES:
            raise ValueError(f"name={self.name!r} is not allowed; choose one of {PROBLEM_NAMES}")
        set_("lo", _tuple("lo", self.lo, float))
        set_("hi", _tuple("hi", self.hi, float))
        d = len(self.lo)
        if len(self.hi) != d or d != PROBLEM_DIMS[self.name]:
            raise ValueError(f"{self.name}: lo and hi must have length {PROBLEM_DIMS[self.name]}, "
                             f"got lo={self.lo}, hi={self.hi}")
        if any(a >= b for a, b in zip(self.lo, self.hi)):
            raise ValueError(f"need lo < hi, got lo={self.lo}, hi={self.hi}")
        set_("n_cells", _tuple("n_cells", self.n_cells, int, minimum=4))
        if len(self.n_cells) != d or any(n % 2 for n in self.n_cells):
            raise ValueError(f"n_cells must hold {d} even integers >= 4, got {self.n_cells}")
        for k in ("gamma", "lam"):
            v = getattr(self, k)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ValueError(f"{k}={v!r} must be a finite number >= 0")
            set_(k, float(v))
        for k in ("beta", "eta", "pde_dt", "w1_tol"):
            v = getattr(self, k)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise ValueError(f"{k}={v!r} must be a finite number > 0")
            set_(k, float(v))
        try:
            set_("s", check_s(self.s, d=d))
        except TypeError as e:          # a config error is a ValueError (exit code 2 in the CLI)
            raise ValueError(str(e)) from None
        set_("rho0_mean", _tuple("rho0_mean", self.rho0_mean, float))
        set_("rho0_std", _tuple("rho0_std", self.rho0_std, float, positive=True))
        if len(self.rho0_mean) != d or len(self.rho0_std) != d:
            raise ValueError(f"rho0_mean and rho0_std must have length {d}")
        if d == 3:
            if not 0.0 < self.s < 3.0:
                raise ValueError(f"{self.name}: s={self.s!r} is not allowed for a problem without a PDE "
                                 f"reference (d = 3): its t = 0 check needs 0 < s < 3 (s = 1: Coulomb)")
            room = min(min(h - m, m - lo) / sd for lo, h, m, sd in zip(self.lo, self.hi, self.rho0_mean,
                                                                        self.rho0_std))
            if room < BOX_MARGIN_SD:
                raise ValueError(f"{self.name}: rho0_mean={self.rho0_mean} with rho0_std={self.rho0_std} comes "
                                 f"{room:.2f} standard deviations from the box [lo, hi]; a problem without a PDE "
                                 f"reference needs at least {BOX_MARGIN_SD:g} (its t = 0 check uses the "
                                 f"untruncated normal law)")
        set_("times", _tuple("times", self.times, float))
        t = self.times
        if t[0] != 0.0 or any(b <= a for a, b in zip(t, t[1:])) or len(t) < 2:
            raise ValueError(f"times must start at 0 and increase (at least 2 entries), got {t}")
        if self.boundary not in _BOUNDARIES:
            raise ValueError(f"boundary={self.boundary!r} is not allowed; choose one of {_BOUNDARIES}")
        if self.interaction_method not in _METHODS:
            raise ValueError(f"interaction_method={self.interaction_method!r} is not allowed; "
                             f"choose one of {_METHODS}")
        if self.integrator not in INTEGRATORS:
            raise ValueError(f"integrator={self.integrator!r} is not allowed; choose one of {INTEGRATORS}")
        v = self.softening
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise ValueError(f"softening={v!r} must be a finite number >= 0")
        set_("softening", float(v))
        if self.softening > 0 and d < 3:
            raise ValueError(f"{self.name}: softening={self.softening!r} is not allowed for a problem with a PDE "
                             f"reference (d = {d}): the PDE solver integrates the exact kernel; use 0")
        if self.softening > 0 and self.interaction_method == "fmm":
            raise ValueError(f"{self.name}: interaction_method='fmm' needs softening=0 (the softened kernel is "
                             f"not harmonic), got softening={self.softening!r}; use 'auto' or 'numba'")
        for a, b in (("n_particles", "n_seeds"), ("gpu_n_particles", "gpu_n_seeds")):
            set_(a, _tuple(a, getattr(self, a), int, minimum=2, nonempty=(a == "n_particles")))
            set_(b, _tuple(b, getattr(self, b), int, minimum=1, nonempty=(a == "n_particles")))
            if len(getattr(self, a)) != len(getattr(self, b)):
                raise ValueError(f"{a} and {b} must have the same length, got {getattr(self, a)} and "
                                 f"{getattr(self, b)}")
        set_("eta_refinement", _tuple("eta_refinement", self.eta_refinement, float, positive=True,
                                      nonempty=False))
        for k in ("refinement_n", "refinement_seeds"):
            v = getattr(self, k)
            if isinstance(v, bool) or not isinstance(v, int) or v < (2 if k == "refinement_n" else 1):
                raise ValueError(f"{k}={v!r} must be an integer >= {2 if k == 'refinement_n' else 1}")
        for step_name, step in [("eta", self.eta), ("2 * pde_dt", 2 * self.pde_dt)] + \
                [(f"eta_refinement[{i}]", e) for i, e in enumerate(self.eta_refinement)]:
            for tk in t:
                k = round(tk / step)
                if abs(k * step - tk) > 1e-9 * max(1.0, tk):
                    raise ValueError(f"{self.name}: time {tk} is not a multiple of {step_name}={step}")

    @property
    def d(self) -> int:
        """Space dimension."""
        return len(self.lo)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ProblemConfig":
        """Build from a mapping; unknown keys raise ValueError naming them."""
        return from_mapping(cls, d)

    def to_dict(self) -> dict:
        """Plain-dict form (JSON-serialisable).

        Returns
        -------
        dict
            Field name to value; ``integrator`` only when it is not ``"euler"`` and ``softening``
            only when it is not 0 (the fields came later: files written before them keep the
            configuration they stored, and resume).
        """
        d = dataclasses.asdict(self)
        if d["integrator"] == "euler":
            del d["integrator"]
        if d["softening"] == 0.0:
            del d["softening"]
        return d


@dataclasses.dataclass(frozen=True)
class MeanFieldConfig:
    """The whole ``rieszflow mean-field`` study.

    Parameters
    ----------
    problems : tuple of ProblemConfig
        Problems to run, distinct names.
    seed : int
        Root seed (>= 0); every run derives its generator from
        ``numpy.random.SeedSequence([seed, problem, N, run])``, with ``problem`` the index of
        the problem's name in :data:`PROBLEM_NAMES` (not its position in ``problems``).
    backend : {"numpy", "cupy"}
        Array backend of the particles (the PDE always runs on the CPU).

    Raises
    ------
    ValueError
        On an empty or duplicated problem list, a problem with ``integrator`` other than
        ``"euler"``, a bad seed or backend.
    """

    problems: tuple
    seed: int = 0
    backend: str = "numpy"

    def __post_init__(self):
        probs = tuple(p if isinstance(p, ProblemConfig) else ProblemConfig.from_dict(p)
                      for p in self.problems)
        if not probs:
            raise ValueError("problems must not be empty")
        names = [p.name for p in probs]
        if len(set(names)) != len(names):
            raise ValueError(f"problem names must be distinct, got {names}")
        for p in probs:
            if p.integrator != "euler":
                raise ValueError(f"{p.name}: integrator={p.integrator!r} runs in the bias study only "
                                 f"(--preset bias or bias-large); the W1 study steps with 'euler'")
        no_pde = [p.name for p in probs if p.d > 2]
        if no_pde:
            raise ValueError(f"problem(s) {no_pde} are 3-D and have no PDE reference: the mean-field study "
                             f"compares particles with the PDE (d = 1, 2); run them in the antithetic bias "
                             f"study (rieszflow mean-field --preset bias-large --problem box)")
        object.__setattr__(self, "problems", probs)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"seed={self.seed!r} must be an integer >= 0")
        if self.backend not in _BACKENDS:
            raise ValueError(f"backend={self.backend!r} is not allowed; choose one of {_BACKENDS}")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "MeanFieldConfig":
        """Build from a mapping (problems as mappings); unknown keys raise ValueError."""
        return from_mapping(cls, d)

    def to_dict(self) -> dict:
        """Plain-dict form (JSON-serialisable).

        Returns
        -------
        dict
            ``problems`` (list of the problems' :meth:`ProblemConfig.to_dict`), ``seed`` and
            ``backend``.
        """
        return {"problems": [p.to_dict() for p in self.problems], "seed": self.seed,
                "backend": self.backend}

    def replace(self, **changes) -> "MeanFieldConfig":
        """Copy with top-level fields changed (validated).

        Parameters
        ----------
        **changes
            Top-level field names (``problems``, ``seed``, ``backend``) and their new values.

        Returns
        -------
        MeanFieldConfig
            The new configuration (this one is unchanged).
        """
        return dataclasses.replace(self, **changes)


def _interval(quick: bool) -> ProblemConfig:
    return ProblemConfig(
        name="interval", lo=(-1.25,), hi=(1.25,), n_cells=(200,), s=-1.0, gamma=1.0, lam=1.0,
        beta=10.0, rho0_mean=(0.5,), rho0_std=(0.4,), times=(0.0, 0.25, 0.5, 1.0, 2.0),
        eta=0.005 if quick else 0.0025, pde_dt=0.005 if quick else 0.0025,
        n_particles=(100, 1000, 10000) if quick else (100, 1000, 10000, 100000),
        n_seeds=(8, 8, 8) if quick else (16, 16, 16, 8),
        gpu_n_particles=(1000000,), gpu_n_seeds=(4,),
        eta_refinement=(0.05, 0.025, 0.0125) if quick else (0.05, 0.025, 0.0125, 0.00625),
        refinement_n=100000, refinement_seeds=2 if quick else 4)


def _rectangle(quick: bool) -> ProblemConfig:
    return ProblemConfig(
        name="rectangle", lo=(-2.0, -2.0), hi=(2.0, 2.0), n_cells=(64, 64), s=0.0, gamma=1.0,
        lam=1.0, beta=10.0, rho0_mean=(0.5, 0.0), rho0_std=(0.3, 0.5),
        times=(0.0, 0.5, 1.0) if quick else (0.0, 0.25, 0.5, 1.0),
        eta=0.01 if quick else 0.005, pde_dt=0.01 if quick else 0.005,
        n_particles=(100, 1000, 10000),
        n_seeds=(6, 4, 2) if quick else (16, 8, 4),
        gpu_n_particles=(100000,), gpu_n_seeds=(2,),
        eta_refinement=(0.05, 0.025, 0.0125) if quick else (0.05, 0.025, 0.0125, 0.00625),
        refinement_n=1000, refinement_seeds=4 if quick else 8)


def quick_config(seed: int = 0, backend: str = "numpy") -> MeanFieldConfig:
    """The ``--quick`` preset (a few minutes on 2 cores; see docs/studies_mean_field.md).

    Parameters
    ----------
    seed : int, default 0
        Root seed (>= 0).
    backend : {"numpy", "cupy"}, default "numpy"
        Array backend of the particles.

    Returns
    -------
    MeanFieldConfig
        The ``interval`` and ``rectangle`` problems at quick sizes.
    """
    return MeanFieldConfig(problems=(_interval(True), _rectangle(True)), seed=seed, backend=backend)


def full_config(seed: int = 0, backend: str = "numpy") -> MeanFieldConfig:
    """The full preset (smaller steps, more seeds, N = 1e5 in 1-D; about an hour on 2 cores).

    Parameters
    ----------
    seed : int, default 0
        Root seed (>= 0).
    backend : {"numpy", "cupy"}, default "numpy"
        Array backend of the particles.

    Returns
    -------
    MeanFieldConfig
        The ``interval`` and ``rectangle`` problems at full sizes.
    """
    return MeanFieldConfig(problems=(_interval(False), _rectangle(False)), seed=seed, backend=backend)


def load_config(path) -> MeanFieldConfig:
    """Read a :class:`MeanFieldConfig` from a JSON file or any rieszflow file that stores one
    (strict: unknown keys raise).

    Parameters
    ----------
    path : str or os.PathLike

    Returns
    -------
    MeanFieldConfig

    Raises
    ------
    ValueError
        On invalid JSON or invalid/unknown fields.
    """
    return MeanFieldConfig.from_dict(load_config_mapping(path))
