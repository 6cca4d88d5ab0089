"""``rieszflow mean-field``: particles (E.2) against the McKean-Vlasov PDE (4.4)-(4.5) from the same rho_0.

For each problem of the configuration (:mod:`~rieszflow.studies.mean_field.config`):

1. **PDE reference.** :func:`~rieszflow.solvers.mckean_vlasov.solve_mckean_vlasov` on the
   uniform grid from the exact cell averages of :math:`\\rho_0`, snapshots at the
   comparison times. Two cheaper runs measure the PDE's own error floor:
   ``2 * pde_dt`` (time floor, :math:`\\approx W_1(\\rho_{2\\Delta t}, \\rho_{\\Delta t})`
   for a first-order scheme) and half the cells per axis (grid floor, both
   measures compared on the coarse grid).
2. **Particles.** For each N and run: :math:`X_0 \\sim \\rho_0^{\\otimes N}` exactly,
   Euler-Maruyama with reflection or projection
   (:class:`rieszflow.solvers.particles.MeanFieldParticles`), and
   :math:`W_1(\\mu_N(t), \\rho_t)` at every comparison time
   (:mod:`rieszflow.engine.measures`: exact CDF formula in 1-D, exact optimal
   transport on the PDE grid in 2-D). The same distance is computed for N
   i.i.d. draws from :math:`\\rho_t` (the "iid reference": what a perfect
   propagation of chaos would give).
3. **Step refinement.** At ``refinement_n`` particles, the runs are repeated
   for each ``eta`` in ``eta_refinement``: the decrease of :math:`W_1` with eta
   down to the sampling level shows the time-step floor.

The PDE references (one task per problem) and the particle and refinement runs (one task each)
are independent tasks run by :func:`rieszflow.studies.sweep.run_jobs`: in-process, on a Dask
LocalCluster or on an existing scheduler, with the same numbers (each task draws only from its
own seed).

Output: one HDF5 file (``engine.storage.TrajectoryWriter``, kind
``"mean_field_study"``), written after every run and flushed, with per-problem
variables ``<name>_w1(<name>_N, <name>_seed, <name>_time)`` and so on (list in
:func:`run_mean_field_study`). Read it with :func:`~rieszflow.engine.storage.open_run` or
:func:`~rieszflow.studies.mean_field.analysis.load_study`.

References
----------
paper 000, Thm 1 / Thm 4, eq. (4.3)-(4.5), (E.2)-(E.5).
Fournier and Guillin, PTRF 162 (2015) 707-738 (sampling rates of W1).
"""
from __future__ import annotations

import dataclasses
import functools
import math
import time
from pathlib import Path

import numpy as np

from rieszflow.engine._checks import check_choice
from rieszflow.engine.backend import get_backend
from rieszflow.engine.energy import Interaction
from rieszflow.studies.mean_field.config import PROBLEM_NAMES, MeanFieldConfig, ProblemConfig
from rieszflow.solvers.particles import (
    GridW1,
    MeanFieldParticles,
    TruncatedGaussian,
    domain_space,
    make_interaction,
    quadratic_potential,
)
from rieszflow.engine.measures import (
    bin_to_grid,
    quantisation_bound,
)
from rieszflow.engine.storage import TrajectoryWriter, check_resumable
from rieszflow.solvers.mckean_vlasov import (MeanFieldProblem, interval_mesh, rectangle_mesh,
                                             solve_mckean_vlasov)
from rieszflow.solvers.mckean_vlasov.equation import PDE_BACKENDS
from rieszflow.studies.sweep import Executor, Job, TasksFailed, check_executor, run_jobs

__all__ = ["KIND", "ProblemSetup", "setup_problem", "solve_pde", "run_mean_field_study", "pde_task",
           "particle_run_task", "refinement_task", "refinement_iid_task"]

#: ``kind`` attribute of the study's HDF5 file.
KIND = "mean_field_study"


@dataclasses.dataclass(frozen=True, eq=False)
class ProblemSetup:
    """A problem's mesh, PDE data, initial law and particle ingredients.

    Parameters
    ----------
    config : ProblemConfig
        The problem's configuration.
    domain : solvers.mckean_vlasov.MeshDomain
        The PDE grid.
    problem : solvers.mckean_vlasov.MeanFieldProblem
        The PDE problem on ``domain``: :math:`V = \\gamma |x|^2/2`, s, lam, beta of ``config``.
    rho0 : TruncatedGaussian
        The initial law :math:`\\rho_0`.
    rho0_cells : ndarray, shape (n_cells,), float64
        Exact cell averages of :math:`\\rho_0`.
    """

    config: ProblemConfig
    domain: object
    problem: object
    rho0: TruncatedGaussian
    rho0_cells: np.ndarray

    def particles(self, eta: float) -> MeanFieldParticles:
        """The particle system with step ``eta`` (same V, s, lam, beta, domain as the PDE).

        Parameters
        ----------
        eta : float
            Euler-Maruyama step, > 0.

        Returns
        -------
        MeanFieldParticles
            The particle system of this problem.
        """
        return _particles(self.config, eta)


def _particles(c: ProblemConfig, eta: float) -> MeanFieldParticles:
    """The particle system of problem ``c`` with step ``eta``."""
    return MeanFieldParticles(
        space=domain_space(c.lo, c.hi), potential=quadratic_potential(c.gamma),
        interaction=make_interaction(d=c.d, interaction=_interaction(c), method=c.interaction_method),
        beta=c.beta, eta=eta, boundary=c.boundary)


def _interaction(c: ProblemConfig) -> Interaction:
    """The pair interaction ``lam g_s`` of problem ``c``: one object for the particles and the PDE."""
    return Interaction(c.s, c.lam, c.softening)


def _mesh(c: ProblemConfig, coarsen: int = 1):
    if c.d > 2:
        raise ValueError(f"problem {c.name!r} is {c.d}-D: the PDE solver has 1-D and 2-D meshes only")
    if c.d == 1:
        return interval_mesh(c.lo[0], c.hi[0], c.n_cells[0] // coarsen)
    return rectangle_mesh(c.lo, c.hi, tuple(n // coarsen for n in c.n_cells))


def setup_problem(c: ProblemConfig, coarsen: int = 1) -> ProblemSetup:
    """Build the mesh (``n_cells // coarsen`` per axis), the PDE problem and :math:`\\rho_0`.

    Parameters
    ----------
    c : ProblemConfig
    coarsen : int, default 1
        Divide the cells per axis by this factor (the grid-floor run uses 2).

    Returns
    -------
    ProblemSetup
    """
    dom = _mesh(c, coarsen)
    gamma = c.gamma
    prob = MeanFieldProblem.create(dom, lambda x: 0.5 * gamma * np.sum(x * x, axis=1),
                                   interaction=_interaction(c), beta=c.beta)
    rho0 = TruncatedGaussian(c.rho0_mean, c.rho0_std, c.lo, c.hi)
    return ProblemSetup(c, dom, prob, rho0, rho0.cell_density(dom))


def solve_pde(setup: ProblemSetup, dt: float, progress: bool = False, pde_backend: str = "assembled"):
    """PDE snapshots at the configured times.

    Parameters
    ----------
    setup : ProblemSetup
    dt : float
        Implicit-Euler step.
    progress : bool, default False
    pde_backend : {"assembled", "fipy"}, default "assembled"
        Linear sweeps of :func:`~rieszflow.solvers.mckean_vlasov.solve_mckean_vlasov` (same results to 1e-12).

    Returns
    -------
    solvers.mckean_vlasov.MeanFieldResult

    Raises
    ------
    RuntimeError
        If the solver stops before the final time, a snapshot is missing, or a
        step's Picard sweeps did not converge (``res.converged`` False: the step
        was accepted after ``max_retries`` halvings with an inconsistent drift).
        An unconverged PDE would silently bias every W1 of the study, so it is
        an error, not a flag.
    """
    times = np.asarray(setup.config.times)
    res = solve_mckean_vlasov(setup.problem, setup.rho0_cells, t_end=float(times[-1]), dt=dt,
                              save_times=times, progress=progress, pde_backend=pde_backend)
    if not res.completed or res.times.shape != times.shape or not np.allclose(res.times, times):
        raise RuntimeError(f"PDE run did not reach every comparison time: got {res.times}, wanted {times}")
    bad = np.flatnonzero(~res.converged)
    if bad.size:
        k = int(bad[0])
        raise RuntimeError(
            f"{setup.config.name}: PDE run with dt={dt} has {bad.size} step(s) whose sweeps did not converge; "
            f"first: step {k} at t={res.step_time[k]:.6g} (dt={res.dt[k]:.3g}, {int(res.sweeps[k])} sweeps, "
            f"linear backward error {res.residual[k]:.3e}); reduce pde_dt")
    return res


def _coarsen_masses(domain_fine, masses, factor):
    """Sum cell masses of a uniform grid over blocks of ``factor`` cells per axis."""
    shape = domain_fine.grid_shape
    if len(shape) == 1:
        return masses.reshape(-1, factor).sum(axis=1)
    nx, ny = shape
    return masses.reshape(ny // factor, factor, nx // factor, factor).sum(axis=(1, 3)).reshape(-1)


def _rng(seed, *keys):
    return np.random.default_rng(np.random.SeedSequence([seed, *keys]))


# ----------------------------------------------------------------------------- tasks
# Module-level functions: run in this process (workers=0), on a LocalCluster or on a Dask
# scheduler (rieszflow.studies.sweep.run_jobs). Each draws only from its own generators, seeded
# by (seed, problem, N, run[, stream]) with problem = PROBLEM_NAMES.index(name): the results do
# not depend on where or in which order the tasks run.

@functools.lru_cache(maxsize=8)
def _particle_setup(c: ProblemConfig):
    """Mesh, rho_0 and the W1 of a problem, built once per process (what the particle tasks need);
    a 3-D problem (no PDE) has no mesh and no grid W1 (None, rho_0, None)."""
    rho0 = TruncatedGaussian(c.rho0_mean, c.rho0_std, c.lo, c.hi)
    if c.d > 2:
        return None, rho0, None
    dom = _mesh(c)
    return dom, rho0, GridW1(dom, c.w1_tol)


def pde_task(c: ProblemConfig, pde_backend: str = "assembled") -> dict:
    """The PDE reference of problem ``c`` at its comparison times, and its two error floors.

    Parameters
    ----------
    c : ProblemConfig
    pde_backend : {"assembled", "fipy"}, default "assembled"
        Linear sweeps of the PDE solver (:func:`solve_pde`).

    Returns
    -------
    dict
        ``rho`` (n_times, n_cells) PDE density, ``masses`` (n_times, n_cells) its normalised cell
        masses, ``dt_floor`` and ``grid_floor`` (n_times,), ``free_energy`` and ``mass``
        (n_times,) at the snapshots, ``seconds`` (wall time of the task).

    Raises
    ------
    RuntimeError
        If a PDE solve did not converge (:func:`solve_pde`).
    """
    t0 = time.perf_counter()
    setup = setup_problem(c)
    dom = setup.domain
    dist = GridW1(dom, c.w1_tol)
    ref = solve_pde(setup, c.pde_dt, pde_backend=pde_backend)
    ref_m = [GridW1.masses(dom, r) for r in ref.rho]
    coarse_dt = solve_pde(setup, 2 * c.pde_dt, pde_backend=pde_backend)
    dt_floor = [dist.cells(GridW1.masses(dom, r), m) for r, m in zip(coarse_dt.rho, ref_m)]
    coarse = setup_problem(c, coarsen=2)
    coarse_res = solve_pde(coarse, c.pde_dt, pde_backend=pde_backend)
    cdist = GridW1(coarse.domain, c.w1_tol)
    grid_floor = [cdist.cells(GridW1.masses(coarse.domain, r), _coarsen_masses(dom, m, 2))
                  for r, m in zip(coarse_res.rho, ref_m)]
    snap_idx = [int(np.argmin(np.abs(ref.step_time - t))) for t in np.asarray(c.times)]
    return {"rho": np.asarray(ref.rho), "masses": np.asarray(ref_m), "dt_floor": np.asarray(dt_floor),
            "grid_floor": np.asarray(grid_floor), "free_energy": np.asarray(ref.free_energy[snap_idx]),
            "mass": np.asarray(ref.mass[snap_idx]), "seconds": time.perf_counter() - t0}


def particle_run_task(c: ProblemConfig, seed: int, n: int, run: int, backend: str, masses,
                      want_hist: bool) -> dict:
    """One particle run of problem ``c``: N particles from rho_0, W1 to the PDE at every time.

    Parameters
    ----------
    c : ProblemConfig
    seed : int
        Root seed; the run draws from ``SeedSequence([seed, problem, n, run])`` (x_0 and the noise)
        and ``[seed, problem, n, run, 1]`` (the iid reference).
    n, run : int
        Particles and run index.
    backend : str
        Array backend name of the particles.
    masses : ndarray, shape (n_times, n_cells)
        Cell masses of the PDE reference (:func:`pde_task`).
    want_hist : bool
        Also return the particle mass per PDE cell (run 0).

    Returns
    -------
    dict
        ``w1``, ``w1_iid`` (n_times,), ``wall`` (s, the simulation), ``hist`` (n_times, n_cells)
        or None.
    """
    ip = PROBLEM_NAMES.index(c.name)
    dom, rho0, dist = _particle_setup(c)
    times = np.asarray(c.times)
    rng = _rng(seed, ip, n, run)
    x0 = rho0.sample(rng, n)
    tr = time.perf_counter()
    snaps = _particles(c, c.eta).simulate(x0, times, rng, backend=get_backend(backend), progress=False)
    wall = time.perf_counter() - tr
    rng_iid = _rng(seed, ip, n, run, 1)
    w1, w1_iid = np.empty(times.size), np.empty(times.size)
    hist = np.empty((times.size, dom.n_cells)) if want_hist else None
    for k in range(times.size):
        w1[k] = dist.particles(snaps[k], masses[k])
        w1_iid[k] = dist.iid(rng_iid, n, masses[k])
        if want_hist:
            hist[k] = bin_to_grid(snaps[k], dom.origin, dom.spacing, dom.grid_shape)
    return {"w1": w1, "w1_iid": w1_iid, "wall": wall, "hist": hist}


def refinement_task(c: ProblemConfig, seed: int, eta: float, run: int, backend: str, masses) -> dict:
    """One step-refinement run: ``refinement_n`` particles with step ``eta``.

    The run draws from ``SeedSequence([seed, problem, refinement_n, run, 2])``: the same x_0 and
    noise stream for every eta.

    Parameters
    ----------
    c : ProblemConfig
    seed : int
    eta : float
    run : int
    backend : str
    masses : ndarray, shape (n_times, n_cells)

    Returns
    -------
    dict
        ``w1`` (n_times,) and ``wall`` (s).
    """
    ip = PROBLEM_NAMES.index(c.name)
    _, rho0, dist = _particle_setup(c)
    times = np.asarray(c.times)
    rng = _rng(seed, ip, c.refinement_n, run, 2)   # same x0 and seed for every eta
    x0 = rho0.sample(rng, c.refinement_n)
    tr = time.perf_counter()
    snaps = _particles(c, eta).simulate(x0, times, rng, backend=get_backend(backend), progress=False)
    wall = time.perf_counter() - tr
    return {"w1": np.array([dist.particles(snaps[k], masses[k]) for k in range(times.size)]), "wall": wall}


def refinement_iid_task(c: ProblemConfig, seed: int, run: int, masses) -> dict:
    """The iid level of the refinement: ``refinement_n`` draws from rho_t at every time.

    Draws from ``SeedSequence([seed, problem, refinement_n, run, 3])``.

    Parameters
    ----------
    c : ProblemConfig
    seed : int
    run : int
    masses : ndarray, shape (n_times, n_cells)

    Returns
    -------
    dict
        ``w1_iid`` (n_times,).
    """
    ip = PROBLEM_NAMES.index(c.name)
    _, _, dist = _particle_setup(c)
    rng_iid = _rng(seed, ip, c.refinement_n, run, 3)
    return {"w1_iid": np.array([dist.iid(rng_iid, c.refinement_n, m) for m in masses])}


def _cost(c: ProblemConfig, n: int, eta: float) -> float:
    """Rough seconds of a particle run (all pairs in 2-D, sorted in 1-D): submission order only."""
    steps = float(c.times[-1]) / eta
    return steps * (1e-9 * n * n if c.d > 1 else 2e-7 * n)


def _nanmean(x) -> float:
    x = np.asarray(x, dtype=np.float64)
    return float(np.mean(x[np.isfinite(x)])) if np.isfinite(x).any() else math.nan


def run_mean_field_study(config: MeanFieldConfig, out, *, overwrite: bool = False,
                         resume: bool = False, progress: bool = True, log=print,
                         workers: int | None = 0, scheduler: str | None = None,
                         pde_backend: str = "assembled", on_summary=None) -> Path:
    """Run the study and write ``out`` (HDF5, kind ``"mean_field_study"``).

    Variables for each problem ``p`` (``p`` = "interval" or "rectangle"):

    ``p_rho(p_time, p_cell)``
        PDE density (cell values) at the comparison times; ``p_x`` (, ``p_y``),
        ``p_volume`` over ``p_cell``.
    ``p_w1(p_N, p_seed, p_time)``, ``p_w1_iid(...)``
        :math:`W_1(\\mu_N(t), \\rho_t)` of each particle run and of N i.i.d.
        draws from :math:`\\rho_t` (NaN where a run index exceeds ``n_seeds``).
    ``p_wall(p_N, p_seed)``
        Particle wall time in seconds.
    ``p_hist(p_N, p_time, p_cell)``
        Particle mass per PDE cell of run 0.
    ``p_w1_eta(p_eta, p_rseed, p_time)``, ``p_w1_eta_iid(p_rseed, p_time)``
        Step refinement at ``refinement_n`` particles, and the iid level at that N.
    ``p_pde_dt_floor(p_time)``, ``p_pde_grid_floor(p_time)``
        :math:`W_1` between the reference PDE and the run with ``2 * pde_dt``,
        and between both on the grid with half the cells per axis.
    ``p_pde_free_energy(p_time)``, ``p_pde_mass(p_time)``
        Free energy and mass of the reference PDE solution at the recorded times.

    Root attributes besides the configuration: ``pde_backend``, ``p_pde_wall_s`` (the PDE task), ``p_wall_s``
    (the problem's tasks of this session, summed: compute seconds, not a wall time when they
    run in parallel), ``wall_s`` and ``failures`` (JSON list of the failed tasks of the last
    session: task, error, traceback; empty when none failed).

    The work runs as independent tasks through :func:`rieszflow.studies.sweep.run_jobs`: one
    PDE task per problem (reference and floors), then one batch of every missing particle run,
    refinement run and refinement iid level of every problem. Each task draws from its own
    generator (below), so the arrays are the same bit for bit whatever ``workers`` is and in
    whatever order the tasks finish; each result is stored in ``out`` as it arrives.

    Parameters
    ----------
    config : MeanFieldConfig
    out : str or os.PathLike
        Output file.
    overwrite : bool, default False
        Replace an existing file (otherwise FileExistsError).
    resume : bool, default False
        Continue an interrupted (or partly failed) study in ``out``: runs whose W1 values are
        all stored are skipped (every run has its own seed, derived from
        ``(seed, problem, N, replica)``, so the result equals an uninterrupted
        study); the PDE reference is recomputed (deterministic). ``problem`` is
        the index of the problem's name in
        :data:`~rieszflow.studies.mean_field.config.PROBLEM_NAMES`, so a study restricted to
        some problems (CLI ``--problem``) reproduces their runs in the full study.
    progress : bool, default True
        tqdm progress bars (one per batch: done / failed / skipped).
    log : callable, default print
        Receives one line per finished stage (``None`` or ``lambda *a: None`` to silence).
    workers : int or None, default 0
        0 runs the tasks in this process, one after the other (as before the sweep layer);
        an integer > 0 on a :class:`distributed.LocalCluster` of that many single-threaded worker
        processes; None on a LocalCluster with one worker per core.
    scheduler : str, optional
        Address of an existing Dask scheduler instead (its workers must import rieszflow); with
        it, ``workers`` is left at its default or None.
    pde_backend : {"assembled", "fipy"}, default "assembled"
        Who builds and solves the PDE's linear sweeps
        (:func:`~rieszflow.solvers.mckean_vlasov.solve_mckean_vlasov`); an execution choice like
        ``workers``: both give the same densities to 1e-12, so it is not part of the
        configuration (a resumed study may use either).
    on_summary : callable, optional
        ``on_summary(summary)`` with the :class:`rieszflow.studies.sweep.JobsSummary` of the
        particle tasks (done, skipped, failed), called before a failure is raised; without it a
        failure's summary goes to ``log``.

    Returns
    -------
    pathlib.Path
        ``out``.

    Raises
    ------
    TypeError
        If ``config`` is not a MeanFieldConfig.
    FileExistsError
        If ``out`` exists and neither ``overwrite`` nor ``resume`` is set.
    ValueError
        If ``resume`` is set and ``out`` was written with another configuration,
        ``workers`` and ``scheduler`` are both given, or ``pde_backend`` is unknown.
    RuntimeError
        If a PDE solve (reference or floor) did not converge (:func:`solve_pde`; the study stops
        before the particles), or :class:`rieszflow.studies.sweep.TasksFailed` (a RuntimeError)
        if particle tasks failed: the other tasks' results are stored, the file's status is
        ``"failed"`` and ``resume=True`` runs the failed tasks again.
    """
    if not isinstance(config, MeanFieldConfig):
        raise TypeError(f"config must be a MeanFieldConfig, got {type(config).__name__}")
    if scheduler is not None and workers == 0:      # the default: in-process unless a scheduler
        workers = None
    check_executor(workers, scheduler)
    check_choice("pde_backend", pde_backend, PDE_BACKENDS)
    log = log or (lambda *a: None)
    out = Path(out)
    t_start = time.perf_counter()
    if resume:
        check_resumable(out, KIND, {"json": config.to_dict()})
    with TrajectoryWriter(out, KIND, config={"json": config.to_dict()}, overwrite=overwrite,
                          resume=resume, attrs={"seed": config.seed, "backend": config.backend, "pde_backend": pde_backend,
                                 "problems": [p.name for p in config.problems]}) as w, \
            Executor(workers, scheduler) as ex:
        # --- PDE references and their floors: one task per problem
        pde_jobs = [Job({"stage": "pde", "problem": c.name}, pde_task, (c, pde_backend))
                    for c in config.problems]
        pde = {}
        summary = run_jobs(pde_jobs, executor=ex, progress=progress, desc="mean-field PDE",
                           on_result=lambda job, r: pde.__setitem__(job.task["problem"], r))
        if summary.failed:
            raise TasksFailed("PDE tasks", summary.failures, summary.total,
                              hint="; the particle runs need a converged PDE reference")

        jobs, skipped, state, where = [], 0, {}, {}   # where: id(job) -> its indices in the arrays
        for c in config.problems:
            p = c.name
            dom, rho0, _ = _particle_setup(c)
            ref = pde[p]["value"]
            times = np.asarray(c.times)
            n_list = list(c.n_particles)
            s_list = list(c.n_seeds)
            if config.backend == "cupy":
                n_list += list(c.gpu_n_particles)
                s_list += list(c.gpu_n_seeds)
            max_seeds = max(s_list)
            w.dimension(f"{p}_cell", dom.n_cells, coords=np.arange(dom.n_cells),
                        attrs={"long_name": "PDE mesh cell index", "units": "1"})
            w.dimension(f"{p}_time", times.size, coords=times,
                        attrs={"long_name": "time t of the snapshot (model time units)", "units": "1"})
            w.dimension(f"{p}_N", len(n_list), coords=np.asarray(n_list, dtype=np.int64),
                        attrs={"long_name": "number of particles N", "units": "1"})
            w.dimension(f"{p}_seed", max_seeds, coords=np.arange(max_seeds),
                        attrs={"long_name": "independent particle run (seed index)", "units": "1"})
            w.variable(f"{p}_volume", (f"{p}_cell",), data=dom.volumes,
                       attrs={"long_name": "cell volume (length in 1-D, area in 2-D)", "units": "1"})
            for k, ax in enumerate("xy"[: dom.d]):
                w.variable(f"{p}_{ax}", (f"{p}_cell",), data=dom.centers[:, k],
                           attrs={"long_name": f"cell centre {ax}", "units": "1"})
            w.variable(f"{p}_rho0", (f"{p}_cell",), data=rho0.cell_density(dom),
                       attrs={"long_name": "exact cell averages of rho_0", "units": "1"})
            w.variable(f"{p}_rho", (f"{p}_time", f"{p}_cell"), data=ref["rho"],
                       attrs={"long_name": "PDE density (cell values)", "units": "1"})
            w.variable(f"{p}_pde_dt_floor", (f"{p}_time",), data=ref["dt_floor"],
                       attrs={"long_name": "W1(rho with 2*pde_dt, rho with pde_dt)", "units": "1"})
            w.variable(f"{p}_pde_grid_floor", (f"{p}_time",), data=ref["grid_floor"],
                       attrs={"long_name": "W1 on the half grid between the coarse-grid PDE and the "
                                           "reference aggregated to it", "units": "1"})
            w.variable(f"{p}_pde_free_energy", (f"{p}_time",), data=ref["free_energy"],
                       attrs={"long_name": "free energy of the PDE density, eq. (4.2)", "units": "1"})
            w.variable(f"{p}_pde_mass", (f"{p}_time",), data=ref["mass"],
                       attrs={"long_name": "total mass of the PDE density (1 up to round-off)", "units": "1"})
            w.set_attrs(**{f"{p}_pde_wall_s": ref["seconds"],
                           f"{p}_quantisation_bound": quantisation_bound(dom.spacing),
                           f"{p}_metric": ("exact W1 of the CDFs (empirical vs piecewise-constant)"
                                           if c.d == 1 else
                                           "exact W1 (ot.emd2, Euclidean cost) between particle and "
                                           "PDE cell masses on the PDE grid centres")})
            log(f"[{p}] PDE reference ({dom.n_cells} cells, dt={c.pde_dt}) and floors in "
                f"{ref['seconds']:.1f} s; dt floor {ref['dt_floor'].max():.2e}, grid floor "
                f"{ref['grid_floor'].max():.2e}")

            # --- particle runs: declared now, computed by the tasks below
            dims = (f"{p}_N", f"{p}_seed", f"{p}_time")
            for name, ln in (("w1", "W1 between the particles' empirical measure and rho_t"),
                             ("w1_iid", "W1 between N iid draws from rho_t and rho_t")):
                w.variable(f"{p}_{name}", dims, attrs={"long_name": ln, "units": "1"})
            w.variable(f"{p}_wall", (f"{p}_N", f"{p}_seed"),
                       attrs={"long_name": "wall-clock time of the particle run", "units": "s"})
            w.variable(f"{p}_hist", (f"{p}_N", f"{p}_time", f"{p}_cell"),
                       attrs={"long_name": "particle mass per PDE cell, run 0", "units": "1"})
            st = {"n_list": n_list, "seconds": ref["seconds"],
                  **{k: w.read(f"{p}_{k}") for k in ("w1", "w1_iid", "wall", "hist")}}  # NaN in a new file
            masses = ref["masses"]
            for iN, (n, n_seeds) in enumerate(zip(n_list, s_list)):
                for r in range(n_seeds):
                    if np.isfinite(st["w1"][iN, r]).all() and np.isfinite(st["w1_iid"][iN, r]).all():
                        skipped += 1                 # done before an interruption (resume)
                        continue
                    job = Job({"stage": "particles", "problem": p, "N": int(n), "run": r}, particle_run_task,
                              (c, config.seed, int(n), r, config.backend, masses, r == 0))
                    jobs.append((_cost(c, n, c.eta), job))
                    where[id(job)] = (iN, r)

            # --- step refinement
            etas = c.eta_refinement
            if etas:
                w.dimension(f"{p}_eta", len(etas), coords=np.asarray(etas),
                            attrs={"long_name": "Langevin step eta of the refinement", "units": "1"})
                w.dimension(f"{p}_rseed", c.refinement_seeds, coords=np.arange(c.refinement_seeds),
                            attrs={"long_name": "refinement run (seed index)", "units": "1"})
                w.variable(f"{p}_w1_eta", (f"{p}_eta", f"{p}_rseed", f"{p}_time"),
                           attrs={"long_name": "W1 between the particles and rho_t against eta",
                                  "units": "1", "refinement_n": c.refinement_n})
                w.variable(f"{p}_wall_eta", (f"{p}_eta", f"{p}_rseed"),
                           attrs={"long_name": "wall-clock time of the refinement run", "units": "s"})
                w.variable(f"{p}_w1_eta_iid", (f"{p}_rseed", f"{p}_time"),
                           attrs={"long_name": "W1 of refinement_n iid draws from rho_t", "units": "1"})
                st.update(w1_eta=w.read(f"{p}_w1_eta"), wall_eta=w.read(f"{p}_wall_eta"),
                          w1_eta_iid=w.read(f"{p}_w1_eta_iid"))
                for r in range(c.refinement_seeds):
                    if np.isfinite(st["w1_eta_iid"][r]).all():
                        skipped += 1
                        continue
                    job = Job({"stage": "refinement_iid", "problem": p, "run": r}, refinement_iid_task,
                              (c, config.seed, r, masses))
                    jobs.append((0.0, job))
                    where[id(job)] = (r,)
                for ie, eta in enumerate(etas):
                    for r in range(c.refinement_seeds):
                        if np.isfinite(st["w1_eta"][ie, r]).all():
                            skipped += 1             # done before an interruption (resume)
                            continue
                        job = Job({"stage": "refinement", "problem": p, "eta": float(eta), "run": r},
                                  refinement_task, (c, config.seed, float(eta), r, config.backend, masses))
                        jobs.append((_cost(c, c.refinement_n, eta), job))
                        where[id(job)] = (ie, r)
            state[p] = st

        def store(job, result):
            """Write one finished task into the file (W1 last: a finite W1 marks a finished run)."""
            t = job.task
            if t["problem"] not in state:
                return
            st = state[t["problem"]]
            st["seconds"] += result["seconds"] if math.isfinite(result["seconds"]) else 0.0
            if result["status"] != "done":
                return
            v, p, at = result["value"], t["problem"], where[id(job)]
            if t["stage"] == "particles":
                iN, r = at
                if v["hist"] is not None:
                    st["hist"][iN] = v["hist"]
                    w.set(f"{p}_hist", st["hist"])
                st["wall"][iN, r] = v["wall"]
                st["w1_iid"][iN, r] = v["w1_iid"]
                st["w1"][iN, r] = v["w1"]
                for k in ("wall", "w1_iid", "w1"):
                    w.set(f"{p}_{k}", st[k])
            elif t["stage"] == "refinement":
                ie, r = at
                st["wall_eta"][ie, r] = v["wall"]
                st["w1_eta"][ie, r] = v["w1"]
                w.set(f"{p}_wall_eta", st["wall_eta"])
                w.set(f"{p}_w1_eta", st["w1_eta"])
            else:
                st["w1_eta_iid"][at[0]] = v["w1_iid"]
                w.set(f"{p}_w1_eta_iid", st["w1_eta_iid"])

        if not ex.in_process:       # the most expensive first: balances the workers, changes no number
            jobs.sort(key=lambda cj: -cj[0])
        jobs = [job for _, job in jobs]
        log(f"mean-field: {len(jobs)} particle tasks on {ex.describe()}"
            + (f" ({skipped} stored before, skipped)" if skipped else ""))
        summary = run_jobs(jobs, executor=ex, progress=progress, desc="mean-field runs", skipped=skipped,
                           on_result=store)
        for c in config.problems:
            p, st = c.name, state[c.name]
            for iN, n in enumerate(st["n_list"]):
                log(f"[{p}] N={n:>7d}: W1(t_end) = {_nanmean(st['w1'][iN, :, -1]):.4e} "
                    f"(iid {_nanmean(st['w1_iid'][iN, :, -1]):.4e}), {_nanmean(st['wall'][iN]):.2f} s/run")
            for ie, eta in enumerate(c.eta_refinement):
                log(f"[{p}] eta={eta:g}, N={c.refinement_n}: W1(t_end) = {_nanmean(st['w1_eta'][ie, :, -1]):.4e}")
            w.set_attrs(**{f"{p}_wall_s": st["seconds"]})
        w.set_attrs(wall_s=time.perf_counter() - t_start, failures=summary.failures)
        if on_summary is not None:
            on_summary(summary)
        if summary.failed:
            if on_summary is None:
                log(summary.format("mean-field runs"))
            raise TasksFailed("particle tasks", summary.failures, summary.total,
                              hint=f"; the other runs are stored in {out} (status 'failed', tracebacks in its "
                                   f"root attribute 'failures'); --resume runs the failed ones again")
    return out
