"""``rieszflow mean-field``: particles (E.2) against the McKean-Vlasov PDE (4.4)-(4.5) from the same rho_0.

For each problem of the configuration (:mod:`studies.mean_field.config`):

1. **PDE reference.** :func:`solvers.mckean_vlasov.solve_mckean_vlasov` on the
   uniform grid from the exact cell averages of :math:`\\rho_0`, snapshots at the
   comparison times. Two cheaper runs measure the PDE's own error floor:
   ``2 * pde_dt`` (time floor, :math:`\\approx W_1(\\rho_{2\\Delta t}, \\rho_{\\Delta t})`
   for a first-order scheme) and half the cells per axis (grid floor, both
   measures compared on the coarse grid).
2. **Particles.** For each N and run: :math:`X_0 \\sim \\rho_0^{\\otimes N}` exactly,
   Euler-Maruyama with reflection or projection
   (:class:`studies.mean_field.particles.MeanFieldParticles`), and
   :math:`W_1(\\mu_N(t), \\rho_t)` at every comparison time
   (:mod:`rieszflow.engine.measures`: exact CDF formula in 1-D, exact optimal
   transport on the PDE grid in 2-D). The same distance is computed for N
   i.i.d. draws from :math:`\\rho_t` (the "iid reference": what a perfect
   propagation of chaos would give).
3. **Step refinement.** At ``refinement_n`` particles, the runs are repeated
   for each ``eta`` in ``eta_refinement``: the decrease of :math:`W_1` with eta
   down to the sampling level shows the time-step floor.

Output: one HDF5 file (``engine.storage.TrajectoryWriter``, kind
``"mean_field_study"``), written after every run and flushed, with per-problem
variables ``<name>_w1(<name>_N, <name>_seed, <name>_time)`` and so on (list in
:func:`run_mean_field_study`). Read it with :func:`engine.storage.open_run` or
:func:`studies.mean_field.analysis.load_study`.

References
----------
paper 000, Thm 1 / Thm 4, eq. (4.3)-(4.5), (E.2)-(E.5).
Fournier and Guillin, PTRF 162 (2015) 707-738 (sampling rates of W1).
"""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np

from rieszflow.engine.backend import get_backend
from rieszflow.studies.mean_field.config import PROBLEM_NAMES, MeanFieldConfig, ProblemConfig
from rieszflow.studies.mean_field.particles import (
    MeanFieldParticles,
    TruncatedGaussian,
    domain_space,
    make_interaction,
    quadratic_potential,
)
from rieszflow.engine.measures import (
    AtomicMeasure1D,
    CellMeasure1D,
    bin_to_grid,
    quantisation_bound,
    sample_cells,
    wasserstein1_1d,
    wasserstein1_grid,
)

__all__ = ["KIND", "ProblemSetup", "setup_problem", "solve_pde", "Distance", "run_mean_field_study"]

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
        c = self.config
        return MeanFieldParticles(
            space=domain_space(c.lo, c.hi), potential=quadratic_potential(c.gamma),
            interaction=make_interaction(c.s, c.lam, c.d, method=c.interaction_method),
            beta=c.beta, eta=eta, boundary=c.boundary)


def _mesh(c: ProblemConfig, coarsen: int = 1):
    from rieszflow.solvers.mckean_vlasov import interval_mesh, rectangle_mesh

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
    from rieszflow.solvers.mckean_vlasov import MeanFieldProblem

    dom = _mesh(c, coarsen)
    gamma = c.gamma
    prob = MeanFieldProblem.create(dom, lambda x: 0.5 * gamma * np.sum(x * x, axis=1),
                                   s=c.s, lam=c.lam, beta=c.beta)
    rho0 = TruncatedGaussian(c.rho0_mean, c.rho0_std, c.lo, c.hi)
    return ProblemSetup(c, dom, prob, rho0, rho0.cell_density(dom))


def solve_pde(setup: ProblemSetup, dt: float, progress: bool = False):
    """PDE snapshots at the configured times.

    Parameters
    ----------
    setup : ProblemSetup
    dt : float
        Implicit-Euler step.
    progress : bool, default False

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
    from rieszflow.solvers.mckean_vlasov import solve_mckean_vlasov

    times = np.asarray(setup.config.times)
    res = solve_mckean_vlasov(setup.problem, setup.rho0_cells, t_end=float(times[-1]), dt=dt,
                              save_times=times, progress=progress)
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


class Distance:
    """:math:`W_1` between particle clouds (or cell masses) and PDE cell masses on one grid.

    Parameters
    ----------
    domain : MeshDomain
        Uniform interval or rectangle grid.
    tol : float
        2-D only: cells with mass ``<= tol`` in both measures are dropped
        (:func:`rieszflow.engine.measures.wasserstein1_grid`).
    """

    def __init__(self, domain, tol: float):
        self.domain = domain
        self.tol = tol
        if domain.d == 1:
            left, right = domain.cell_edges_1d()
            self.edges = np.append(left, right[-1])

    @staticmethod
    def masses(domain, rho) -> np.ndarray:
        """Cell masses ``rho * volume`` renormalised to 1 (the PDE conserves mass to ~1e-12)."""
        m = np.asarray(rho, dtype=np.float64) * domain.volumes
        if (m < 0).any():
            raise ValueError(f"PDE density has negative cells (min {m.min():.3e}); W1 needs a measure")
        return m / m.sum()

    def particles(self, x, pde_masses) -> float:
        """:math:`W_1(\\mu_N, \\rho_h)`: exact CDF formula (1-D) or grid transport (2-D).

        Parameters
        ----------
        x : ndarray, shape (N, d), float64
            Particle positions (host array).
        pde_masses : ndarray, shape (n_cells,), float64
            Cell masses of the PDE on this grid (:meth:`masses`), in FiPy's cell order.

        Returns
        -------
        float
            :math:`W_1` between the particles' empirical measure and ``pde_masses``.
        """
        if self.domain.d == 1:
            return wasserstein1_1d(AtomicMeasure1D(x[:, 0]), CellMeasure1D(self.edges, pde_masses))
        dom = self.domain
        return wasserstein1_grid(bin_to_grid(x, dom.origin, dom.spacing, dom.grid_shape), pde_masses,
                                 dom.centers, self.tol)

    def cells(self, masses_a, masses_b) -> float:
        """:math:`W_1` between two cell-mass vectors of this grid.

        Parameters
        ----------
        masses_a, masses_b : ndarray, shape (n_cells,), float64
            Cell masses (>= 0, each summing to 1), in FiPy's cell order.

        Returns
        -------
        float
            :math:`W_1` between the two measures.
        """
        if self.domain.d == 1:
            return wasserstein1_1d(CellMeasure1D(self.edges, masses_a), CellMeasure1D(self.edges, masses_b))
        return wasserstein1_grid(masses_a, masses_b, self.domain.centers, self.tol)

    def iid(self, rng, n, pde_masses) -> float:
        """:math:`W_1` of n i.i.d. draws from the PDE density to that density (same metric).

        Parameters
        ----------
        rng : numpy.random.Generator
            Source of the draws.
        n : int
            Number of draws.
        pde_masses : ndarray, shape (n_cells,), float64
            Cell masses of the PDE on this grid (:meth:`masses`), in FiPy's cell order.

        Returns
        -------
        float
            :math:`W_1` between the empirical measure of the draws and ``pde_masses``.
        """
        dom = self.domain
        if dom.d == 1:
            x = sample_cells(rng, n, pde_masses, dom.origin, dom.spacing, dom.grid_shape)
            return self.particles(x, pde_masses)
        counts = rng.multinomial(n, pde_masses / pde_masses.sum())
        return wasserstein1_grid(counts / n, pde_masses, dom.centers, self.tol)


def _coarsen_masses(domain_fine, masses, factor):
    """Sum cell masses of a uniform grid over blocks of ``factor`` cells per axis."""
    shape = domain_fine.grid_shape
    if len(shape) == 1:
        return masses.reshape(-1, factor).sum(axis=1)
    nx, ny = shape
    return masses.reshape(ny // factor, factor, nx // factor, factor).sum(axis=(1, 3)).reshape(-1)


def _rng(seed, *keys):
    return np.random.default_rng(np.random.SeedSequence([seed, *keys]))


def run_mean_field_study(config: MeanFieldConfig, out, *, overwrite: bool = False,
                         resume: bool = False, progress: bool = True, log=print) -> Path:
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

    Parameters
    ----------
    config : MeanFieldConfig
    out : str or os.PathLike
        Output file.
    overwrite : bool, default False
        Replace an existing file (otherwise FileExistsError).
    resume : bool, default False
        Continue an interrupted study in ``out``: runs whose W1 values are all
        stored are skipped (every run has its own seed, derived from
        ``(seed, problem, N, replica)``, so the result equals an uninterrupted
        study); the PDE reference is recomputed (deterministic). ``problem`` is
        the index of the problem's name in
        :data:`studies.mean_field.config.PROBLEM_NAMES`, so a study restricted to
        some problems (CLI ``--problem``) reproduces their runs in the full study.
    progress : bool, default True
        tqdm progress bars.
    log : callable, default print
        Receives one line per finished stage (``None`` or ``lambda *a: None`` to silence).

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
        If ``resume`` is set and ``out`` was written with another configuration.
    RuntimeError
        If a PDE solve (reference or floor) did not converge (:func:`solve_pde`).
    """
    from tqdm.auto import tqdm

    from rieszflow.engine.storage import TrajectoryWriter, check_resumable

    if not isinstance(config, MeanFieldConfig):
        raise TypeError(f"config must be a MeanFieldConfig, got {type(config).__name__}")
    log = log or (lambda *a: None)
    backend = get_backend(config.backend)
    out = Path(out)
    t_start = time.perf_counter()
    if resume:
        check_resumable(out, KIND, {"json": config.to_dict()})
    with TrajectoryWriter(out, KIND, config={"json": config.to_dict()}, overwrite=overwrite,
                          resume=resume, attrs={"seed": config.seed, "backend": config.backend,
                                 "problems": [p.name for p in config.problems]}) as w:
        for c in config.problems:
            p = c.name
            ip = PROBLEM_NAMES.index(p)  # the problem's identity keys its streams, not its list position
            t0 = time.perf_counter()
            setup = setup_problem(c)
            dom = setup.domain
            dist = Distance(dom, c.w1_tol)
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
            w.variable(f"{p}_rho0", (f"{p}_cell",), data=setup.rho0_cells,
                       attrs={"long_name": "exact cell averages of rho_0", "units": "1"})

            # --- PDE reference and its floors
            ref = solve_pde(setup, c.pde_dt, progress=progress)
            ref_m = [Distance.masses(dom, r) for r in ref.rho]
            coarse_dt = solve_pde(setup, 2 * c.pde_dt)
            dt_floor = [dist.cells(Distance.masses(dom, r), m) for r, m in zip(coarse_dt.rho, ref_m)]
            coarse = setup_problem(c, coarsen=2)
            coarse_res = solve_pde(coarse, c.pde_dt)
            cdist = Distance(coarse.domain, c.w1_tol)
            grid_floor = [cdist.cells(Distance.masses(coarse.domain, r), _coarsen_masses(dom, m, 2))
                          for r, m in zip(coarse_res.rho, ref_m)]
            snap_idx = [int(np.argmin(np.abs(ref.step_time - t))) for t in times]
            w.variable(f"{p}_rho", (f"{p}_time", f"{p}_cell"), data=ref.rho,
                       attrs={"long_name": "PDE density (cell values)", "units": "1"})
            w.variable(f"{p}_pde_dt_floor", (f"{p}_time",), data=np.asarray(dt_floor),
                       attrs={"long_name": "W1(rho with 2*pde_dt, rho with pde_dt)", "units": "1"})
            w.variable(f"{p}_pde_grid_floor", (f"{p}_time",), data=np.asarray(grid_floor),
                       attrs={"long_name": "W1 on the half grid between the coarse-grid PDE and the "
                                           "reference aggregated to it", "units": "1"})
            w.variable(f"{p}_pde_free_energy", (f"{p}_time",), data=ref.free_energy[snap_idx],
                       attrs={"long_name": "free energy of the PDE density, eq. (4.2)", "units": "1"})
            w.variable(f"{p}_pde_mass", (f"{p}_time",), data=ref.mass[snap_idx],
                       attrs={"long_name": "total mass of the PDE density (1 up to round-off)", "units": "1"})
            w.set_attrs(**{f"{p}_pde_wall_s": time.perf_counter() - t0,
                           f"{p}_quantisation_bound": quantisation_bound(dom.spacing),
                           f"{p}_metric": ("exact W1 of the CDFs (empirical vs piecewise-constant)"
                                           if c.d == 1 else
                                           "exact W1 (ot.emd2, Euclidean cost) between particle and "
                                           "PDE cell masses on the PDE grid centres")})
            log(f"[{p}] PDE reference ({dom.n_cells} cells, dt={c.pde_dt}) and floors in "
                f"{time.perf_counter() - t0:.1f} s; dt floor {max(dt_floor):.2e}, grid floor "
                f"{max(grid_floor):.2e}")

            # --- particle runs
            dims = (f"{p}_N", f"{p}_seed", f"{p}_time")
            for name, ln in (("w1", "W1 between the particles' empirical measure and rho_t"),
                             ("w1_iid", "W1 between N iid draws from rho_t and rho_t")):
                w.variable(f"{p}_{name}", dims, attrs={"long_name": ln, "units": "1"})
            w.variable(f"{p}_wall", (f"{p}_N", f"{p}_seed"),
                       attrs={"long_name": "wall-clock time of the particle run", "units": "s"})
            w.variable(f"{p}_hist", (f"{p}_N", f"{p}_time", f"{p}_cell"),
                       attrs={"long_name": "particle mass per PDE cell, run 0", "units": "1"})
            w1 = w.read(f"{p}_w1")                  # all NaN in a new file: nothing done yet
            w1_iid = w.read(f"{p}_w1_iid")
            wall = w.read(f"{p}_wall")
            hist = w.read(f"{p}_hist")
            system = setup.particles(c.eta)
            total = sum(s_list)
            bar = tqdm(total=total, disable=not progress, desc=f"{p} particles", unit="run")
            for iN, (n, n_seeds) in enumerate(zip(n_list, s_list)):
                for r in range(n_seeds):
                    if np.isfinite(w1[iN, r]).all() and np.isfinite(w1_iid[iN, r]).all():
                        bar.update(1)                # done before an interruption (resume)
                        continue
                    rng = _rng(config.seed, ip, n, r)
                    x0 = setup.rho0.sample(rng, n)
                    tr = time.perf_counter()
                    snaps = system.simulate(x0, times, rng, backend=backend, progress=False)
                    wall[iN, r] = time.perf_counter() - tr
                    rng_iid = _rng(config.seed, ip, n, r, 1)
                    for k in range(times.size):
                        w1[iN, r, k] = dist.particles(snaps[k], ref_m[k])
                        w1_iid[iN, r, k] = dist.iid(rng_iid, n, ref_m[k])
                        if r == 0:
                            hist[iN, k] = bin_to_grid(snaps[k], dom.origin, dom.spacing, dom.grid_shape)
                    w.set(f"{p}_w1", w1)
                    w.set(f"{p}_w1_iid", w1_iid)
                    w.set(f"{p}_wall", wall)
                    w.set(f"{p}_hist", hist)
                    bar.update(1)
                log(f"[{p}] N={n:>7d}: W1(t_end) = {np.nanmean(w1[iN, :, -1]):.4e} "
                    f"(iid {np.nanmean(w1_iid[iN, :, -1]):.4e}), {np.nanmean(wall[iN]):.2f} s/run")
            bar.close()

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
                w1e_iid = np.full((c.refinement_seeds, times.size), np.nan)
                for r in range(c.refinement_seeds):
                    rng_iid = _rng(config.seed, ip, c.refinement_n, r, 3)
                    w1e_iid[r] = [dist.iid(rng_iid, c.refinement_n, m) for m in ref_m]
                w.set(f"{p}_w1_eta_iid", w1e_iid)
                w1e = w.read(f"{p}_w1_eta")
                walle = w.read(f"{p}_wall_eta")
                bar = tqdm(total=len(etas) * c.refinement_seeds, disable=not progress,
                           desc=f"{p} eta refinement", unit="run")
                for ie, eta in enumerate(etas):
                    sys_e = setup.particles(eta)
                    for r in range(c.refinement_seeds):
                        if np.isfinite(w1e[ie, r]).all():
                            bar.update(1)            # done before an interruption (resume)
                            continue
                        rng = _rng(config.seed, ip, c.refinement_n, r, 2)  # same x0 and seed for every eta
                        x0 = setup.rho0.sample(rng, c.refinement_n)
                        tr = time.perf_counter()
                        snaps = sys_e.simulate(x0, times, rng, backend=backend)
                        walle[ie, r] = time.perf_counter() - tr
                        for k in range(times.size):
                            w1e[ie, r, k] = dist.particles(snaps[k], ref_m[k])
                        w.set(f"{p}_w1_eta", w1e)
                        w.set(f"{p}_wall_eta", walle)
                        bar.update(1)
                    log(f"[{p}] eta={eta:g}, N={c.refinement_n}: W1(t_end) = {np.mean(w1e[ie, :, -1]):.4e}")
                bar.close()
            w.set_attrs(**{f"{p}_wall_s": time.perf_counter() - t0})
        w.set_attrs(wall_s=time.perf_counter() - t_start)
    return out
