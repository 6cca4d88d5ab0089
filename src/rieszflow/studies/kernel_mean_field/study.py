"""``rieszflow kernel-mean-field``: feature particles learning a kernel, against their mean-field limit.

For each problem (:mod:`~rieszflow.studies.kernel_mean_field.data`; frequencies :math:`\\omega \\in \\mathbb{R}^p`, p = 1 or 2):

1. **Potential.** :math:`V = V_{\\mathcal D}`, the phase-averaged RFF alignment potential of the
   training data (paper 000, eq. (4.1); :func:`rieszflow.engine.energy.alignment.alignment_potential`
   on the particles, :func:`rieszflow.solvers.mckean_vlasov.alignment_potential_on_mesh` on the
   mesh: one formula).
2. **PDE.** The reflected McKean-Vlasov equation with :math:`V_{\\mathcal D}`, :math:`g_s`,
   ``lam`` and ``beta`` on the FiPy interval or Gmsh disk, from the cell values of
   :math:`\\rho_0`: a fixed step ``pde_dt`` to the comparison times (and ``2 * pde_dt`` for its time
   floor), then a growing step to ``long_time``; the free energy after every step; the
   self-consistent Gibbs density (:func:`rieszflow.solvers.gibbs.gibbs_density`) and its free
   energy.
3. **Particles.** The engine's projected Langevin step with reflection (Alg. 1, ``grad_scale = 1``,
   mean-field normalisation :math:`H_N = \\sum_i V(\\omega_i) + \\frac{\\lambda}{2N}\\sum_{i\\ne j}g_s`,
   the same ``lam`` and ``beta`` as the PDE; :class:`rieszflow.solvers.particles.MeanFieldParticles`)
   from N i.i.d. draws of :math:`\\rho_0`; :math:`W_1(\\mu_N(t), \\rho_t)` (exact CDF formula in 1-D,
   POT on the mesh cells in 2-D, :class:`rieszflow.solvers.particles.GridW1`) and the
   free energy of the particle histogram at every comparison time; ``long_n`` particles run to
   ``long_time`` against the Gibbs state.
4. **Kernels.** Test accuracy of SVC(kernel="precomputed") with the kernel of the N particles
   (phases drawn once per run) at every comparison time (t = 0: N fixed random features from
   :math:`\\rho_0`), of the mean-field kernel :math:`k_{\\rho_t}` and :math:`k_{\\rho_\\infty}` (Gibbs) by
   mesh quadrature, and of the RBF-SVM.

The PDE (one task per problem) and the particle runs (one task per (problem, N, run) and per
long run) are independent tasks of :func:`rieszflow.studies.sweep.run_jobs`; every task draws
only from ``SeedSequence([seed, problem, N, run, stream])``, so the numbers do not depend on the
executor. The results go to one HDF5 file (kind ``"kernel_mean_field_study"``), written as the
tasks finish.

References
----------
paper 000, eq. (4.1)-(4.5), (E.2), Thm 1, Alg. 1, Lemma 3.
"""
from __future__ import annotations

import functools
import math
import time
from pathlib import Path

import numpy as np

from rieszflow.engine.energy import Interaction
from rieszflow.studies.kernel_mean_field.config import PROBLEMS, KernelMeanFieldConfig
from rieszflow.studies.kernel_mean_field.data import make_data, problem_dim
from rieszflow.studies.kernel_mean_field.kernels import (
    feature_kernel,
    mean_field_kernel,
    rbf_svm_accuracy,
    svm_accuracy,
)
from rieszflow.engine.backend import get_backend, namespace
from rieszflow.engine.energy import ExternalPotential
from rieszflow.engine.energy.alignment import alignment_potential_and_grad
from rieszflow.engine.space import Ball, Interval
from rieszflow.engine.storage import TrajectoryWriter, check_resumable
from rieszflow.solvers.gibbs import free_energy, gibbs_density
from rieszflow.solvers.mckean_vlasov import (MeanFieldProblem, alignment_potential_on_mesh, disk_mesh,
                                             interval_mesh, solve_mckean_vlasov)
from rieszflow.solvers.particles import GridW1, MeanFieldParticles, TruncatedGaussian, make_interaction
from rieszflow.studies.sweep import Executor, Job, TasksFailed, check_executor, run_jobs

__all__ = ["KIND", "Setup", "setup", "alignment_field", "sample_rho0", "pde_task", "particle_task",
           "long_task", "run_kernel_mean_field_study"]

#: ``kind`` attribute of the study's HDF5 file.
KIND = "kernel_mean_field_study"


class Setup:
    """Data, mesh, PDE problem, initial law and particle system of one problem.

    Parameters
    ----------
    config : KernelMeanFieldConfig
    name : str
        Problem name.

    Attributes
    ----------
    data : ProblemData
    p : int
        Frequency dimension.
    domain : solvers.mckean_vlasov.MeshDomain
        Interval (p = 1) or Gmsh disk (p = 2).
    problem : solvers.mckean_vlasov.MeanFieldProblem
        :math:`V_{\\mathcal D}` on the cells, ``s``, ``lam``, ``beta``.
    rho0_cells : ndarray, shape (n_cells,)
        :math:`\\rho_0` on the cells (exact cell averages in 1-D; centroid values renormalised on the
        disk).
    distance : rieszflow.solvers.particles.GridW1
        :math:`W_1` between particles and cell masses on this mesh.
    space : engine.space.Space
        ``Interval(-R, R)`` or ``Ball(R)``.
    """

    def __init__(self, config: KernelMeanFieldConfig, name: str):
        c = config
        self.config, self.name = c, name
        self.p = problem_dim(name)
        self.data = make_data(name, c.n_train, c.n_test, c.seed)
        if self.p == 1:
            R = c.radius_1d
            self.domain = interval_mesh(-R, R, c.n_cells_1d)
            self.space = Interval(-R, R)
            self._tg = TruncatedGaussian((0.0,), (c.rho0_std,), (-R,), (R,))
            self.rho0_cells = self._tg.cell_density(self.domain)
            self.s = c.s_1d
        else:
            R = c.radius_2d
            self.domain = disk_mesh(R, c.cell_size_2d)
            self.space = Ball(R)
            self._tg = None
            r2 = np.sum(self.domain.centers ** 2, axis=1)
            dens = np.exp(-0.5 * r2 / c.rho0_std ** 2)
            self.rho0_cells = dens / np.dot(dens, self.domain.volumes)
            self.s = c.s_2d
        self.radius = R
        V = alignment_potential_on_mesh(self.domain, self.data.X_train, self.data.y_train)
        self.interaction = Interaction(self.s, c.lam)   # one pair interaction: PDE and particles
        self.problem = MeanFieldProblem.create(self.domain, V, interaction=self.interaction, beta=c.beta)
        self.distance = GridW1(self.domain, 1e-12)

    def sample_rho0(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` i.i.d. draws of :math:`\\rho_0`; see :func:`sample_rho0`.

        Parameters
        ----------
        rng : numpy.random.Generator
        n : int

        Returns
        -------
        ndarray, shape (n, p), float64
        """
        return sample_rho0(self, rng, n)

    def particles(self, eta: float):
        """The particle system with step ``eta`` (same V, s, lam, beta and domain as the PDE).

        Parameters
        ----------
        eta : float
            Euler-Maruyama step, > 0.

        Returns
        -------
        rieszflow.solvers.particles.MeanFieldParticles
        """
        c = self.config
        return MeanFieldParticles(space=self.space, potential=alignment_field(self.data.X_train, self.data.y_train),
                                  interaction=make_interaction(d=self.p, interaction=self.interaction),
                                  beta=c.beta, eta=eta,
                                  boundary="reflect")


def alignment_field(X, y):
    """:math:`V_{\\mathcal D}` as a one-body ``ExternalPotential`` with mean-field normalisation.

    Parameters
    ----------
    X : ndarray, shape (n, p)
        Training inputs.
    y : ndarray, shape (n,)
        Labels +-1.

    Returns
    -------
    engine.energy.ExternalPotential
        ``V(omega)`` (N,) and ``gradV(omega)`` (N, p) of
        :func:`rieszflow.engine.energy.alignment.alignment_potential_and_grad` with ``b=None``
        (phase average), on the array backend of ``omega``; energy :math:`\\sum_k V(\\omega_k)`.

    References
    ----------
    paper 000, eq. (4.1), (B.8)-(B.9) (Lemma 3 as corrected in the engine).
    """
    X = np.asarray(X, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)

    def _vg(omega):
        xp = namespace(omega)
        return alignment_potential_and_grad(omega, xp.asarray(X), xp.asarray(y))

    return ExternalPotential(lambda w: _vg(w)[0], lambda w: _vg(w)[1], normalization="mean_field")


def sample_rho0(setup: Setup, rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` i.i.d. draws of :math:`\\rho_0 = N(0, \\sigma_0^2 I)` conditioned on the domain.

    Parameters
    ----------
    setup : Setup
    rng : numpy.random.Generator
    n : int

    Returns
    -------
    ndarray, shape (n, p), float64
        1-D: exact truncated-normal draws; 2-D: rejection from the normal to the disk.
    """
    if setup.p == 1:
        return setup._tg.sample(rng, n)
    out, have = [], 0
    sd, R = setup.config.rho0_std, setup.radius
    while have < n:
        z = sd * rng.standard_normal((max(2 * (n - have), 64), 2))
        z = z[np.sum(z * z, axis=1) <= R * R]
        out.append(z)
        have += z.shape[0]
    return np.concatenate(out)[:n]


@functools.lru_cache(maxsize=4)
def setup(config: KernelMeanFieldConfig, name: str) -> Setup:
    """The :class:`Setup` of problem ``name``, built once per process.

    Parameters
    ----------
    config : KernelMeanFieldConfig
    name : str

    Returns
    -------
    Setup
    """
    return Setup(config, name)


def _rng(seed, *keys):
    return np.random.default_rng(np.random.SeedSequence([seed, *keys]))


def _masses(setup_: Setup, rho) -> np.ndarray:
    m = np.asarray(rho, dtype=np.float64) * setup_.domain.volumes
    if (m < 0).any():
        raise ValueError(f"density has negative cells (min {m.min():.3e})")
    return m / m.sum()


def _check_converged(res, what):
    bad = np.flatnonzero(~res.converged)
    if not res.completed or bad.size:
        raise RuntimeError(f"{what}: the PDE run did not converge ({bad.size} step(s) unconverged, completed="
                           f"{res.completed}); reduce pde_dt")


def _accuracy(s: Setup, K_fn) -> float:
    d = s.data
    return svm_accuracy(K_fn(d.X_train, d.X_train), d.y_train, K_fn(d.X_test, d.X_train), d.y_test,
                        C=s.config.svm_c)


def pde_task(config: KernelMeanFieldConfig, name: str) -> dict:
    """PDE, time floor, long run, Gibbs state and the kernel machines of the densities.

    Parameters
    ----------
    config : KernelMeanFieldConfig
    name : str
        Problem name.

    Returns
    -------
    dict
        ``rho`` (n_times, n_cells) and ``masses``; ``dt_floor`` (n_times,); ``fe_time``,
        ``free_energy``, ``dissipation`` (n_steps,) over the fixed-step run and the long run;
        ``rho_long``, ``gibbs`` (n_cells,); ``gibbs_free_energy``, ``long_l1``, ``long_w1``,
        ``gibbs_residual``; ``acc_mf`` (n_times,) mean-field kernel accuracies of
        :math:`\\rho_t`, ``acc_mf_long``, ``acc_mf_gibbs``, ``acc_rbf`` (gamma = sigma_0^2/2),
        ``acc_rbf_scale`` (scikit-learn's gamma="scale"); ``seconds``.

    Raises
    ------
    RuntimeError
        If a PDE run or the Gibbs solve does not converge.
    """
    t0 = time.perf_counter()
    c = config
    s = setup(c, name)
    times = np.asarray(c.times)
    ref = solve_mckean_vlasov(s.problem, s.rho0_cells, t_end=float(times[-1]), dt=c.pde_dt, save_times=times)
    _check_converged(ref, f"{name}, dt={c.pde_dt}")
    floor = solve_mckean_vlasov(s.problem, s.rho0_cells, t_end=float(times[-1]), dt=2 * c.pde_dt,
                                save_times=times)
    _check_converged(floor, f"{name}, dt={2 * c.pde_dt}")
    masses = np.array([_masses(s, r) for r in ref.rho])
    dt_floor = np.array([s.distance.cells(_masses(s, a), m) for a, m in zip(floor.rho, masses)])
    long = solve_mckean_vlasov(s.problem, ref.final, t_end=float(c.long_time - times[-1]), dt=c.pde_dt,
                               dt_max=1.0, dt_growth=1.1)
    _check_converged(long, f"{name}, long run")
    g = gibbs_density(s.problem)
    if not g.converged:
        raise RuntimeError(f"{name}: the Gibbs fixed point did not converge (residual {g.residual:.3e})")
    m_long, m_gibbs = _masses(s, long.final), _masses(s, g.rho)
    cen = s.domain.centers
    d = s.data
    return {
        "rho": np.asarray(ref.rho), "masses": masses, "dt_floor": dt_floor,
        "fe_time": np.concatenate([ref.step_time, times[-1] + long.step_time[1:]]),
        "free_energy": np.concatenate([ref.free_energy, long.free_energy[1:]]),
        "dissipation": np.concatenate([ref.dissipation, long.dissipation[1:]]),
        "rho_long": np.asarray(long.final), "gibbs": np.asarray(g.rho),
        "gibbs_free_energy": float(free_energy(s.problem, g.rho)), "gibbs_residual": float(g.residual),
        "long_l1": float(np.sum(np.abs(m_long - m_gibbs))), "long_w1": float(s.distance.cells(m_long, m_gibbs)),
        "acc_mf": np.array([_accuracy(s, lambda A, B, m=m: mean_field_kernel(A, B, cen, m)) for m in masses]),
        "acc_mf_long": _accuracy(s, lambda A, B: mean_field_kernel(A, B, cen, m_long)),
        "acc_mf_gibbs": _accuracy(s, lambda A, B: mean_field_kernel(A, B, cen, m_gibbs)),
        "acc_rbf": rbf_svm_accuracy(d.X_train, d.y_train, d.X_test, d.y_test, 0.5 * c.rho0_std ** 2, c.svm_c),
        "acc_rbf_scale": rbf_svm_accuracy(d.X_train, d.y_train, d.X_test, d.y_test, "scale", c.svm_c),
        "seconds": time.perf_counter() - t0,
    }


def particle_task(config: KernelMeanFieldConfig, name: str, n: int, run: int, masses, want_hist: bool) -> dict:
    """One particle run: N frequencies from :math:`\\rho_0`, compared with the PDE at every time.

    Streams: ``SeedSequence([seed, problem, n, run])`` (initial draw and noise), ``[..., 1]`` (the
    iid reference), ``[..., 2]`` (the phases of the features).

    Parameters
    ----------
    config : KernelMeanFieldConfig
    name : str
    n, run : int
        Particles and run index.
    masses : ndarray, shape (n_times, n_cells)
        PDE cell masses at the comparison times.
    want_hist : bool
        Also return the particle mass per cell (run 0).

    Returns
    -------
    dict
        ``w1``, ``w1_iid``, ``free_energy`` (of the particle histogram on the mesh), ``acc``
        (test accuracy of the N-feature kernel), each (n_times,); ``wall`` (s); ``hist``
        (n_times, n_cells) or None.
    """
    c = config
    s = setup(c, name)
    ip = PROBLEMS.index(name)
    times = np.asarray(c.times)
    rng = _rng(c.seed, ip, n, run)
    x0 = s.sample_rho0(rng, n)
    tr = time.perf_counter()
    snaps = s.particles(c.eta).simulate(x0, times, rng, backend=get_backend(c.backend))
    wall = time.perf_counter() - tr
    rng_iid = _rng(c.seed, ip, n, run, 1)
    b = _rng(c.seed, ip, n, run, 2).uniform(0.0, 2.0 * np.pi, size=n)
    out = {k: np.empty(times.size) for k in ("w1", "w1_iid", "free_energy", "acc")}
    hist = np.empty((times.size, s.domain.n_cells)) if want_hist else None
    for k in range(times.size):
        h = s.distance.bin(snaps[k])
        out["w1"][k] = s.distance.particles(snaps[k], masses[k])
        out["w1_iid"][k] = s.distance.iid(rng_iid, n, masses[k])
        out["free_energy"][k] = s.problem.free_energy(h / s.domain.volumes)
        out["acc"][k] = _accuracy(s, lambda A, B, w=snaps[k]: feature_kernel(A, B, w, b))
        if want_hist:
            hist[k] = h
    return {**out, "wall": wall, "hist": hist}


def long_task(config: KernelMeanFieldConfig, name: str, run: int, gibbs_masses) -> dict:
    """One long run: ``long_n`` particles from :math:`\\rho_0` to ``long_time``, against the Gibbs state.

    Streams: ``SeedSequence([seed, problem, long_n, run, 3])`` (draw and noise), ``[..., 4]`` (iid
    reference from the Gibbs density), ``[..., 5]`` (phases).

    Parameters
    ----------
    config : KernelMeanFieldConfig
    name : str
    run : int
    gibbs_masses : ndarray, shape (n_cells,)

    Returns
    -------
    dict
        ``hist`` (n_cells,) particle mass per cell at ``long_time``; ``w1`` and ``w1_iid`` to the
        Gibbs masses; ``acc``; ``wall``.
    """
    c = config
    s = setup(c, name)
    ip = PROBLEMS.index(name)
    n = c.long_n
    rng = _rng(c.seed, ip, n, run, 3)
    x0 = s.sample_rho0(rng, n)
    tr = time.perf_counter()
    x = s.particles(c.eta).simulate(x0, [0.0, c.long_time], rng, backend=get_backend(c.backend))[-1]
    wall = time.perf_counter() - tr
    b = _rng(c.seed, ip, n, run, 5).uniform(0.0, 2.0 * np.pi, size=n)
    return {"hist": s.distance.bin(x), "w1": s.distance.particles(x, gibbs_masses),
            "w1_iid": s.distance.iid(_rng(c.seed, ip, n, run, 4), n, gibbs_masses),
            "acc": _accuracy(s, lambda A, B: feature_kernel(A, B, x, b)), "wall": wall}


def _cost(c, p, n, t_end):
    steps = t_end / c.eta
    return steps * (2e-7 * n if p == 1 and c.s_1d == -1.0 else 1e-9 * n * n)


def run_kernel_mean_field_study(config: KernelMeanFieldConfig, out, *, overwrite: bool = False,
                                resume: bool = False, progress: bool = True, log=print, workers: int | None = 0,
                                scheduler: str | None = None, on_summary=None) -> Path:
    """Run the study and write ``out`` (HDF5, kind ``"kernel_mean_field_study"``).

    Variables of problem ``q`` (dimensions ``q_cell``, ``q_time``, ``q_N``, ``q_seed``, ``q_step``,
    ``q_lrun``):

    ``q_x`` (, ``q_y``), ``q_volume``, ``q_V`` (:math:`V_{\\mathcal D}` at the cell centres),
    ``q_rho0``, ``q_rho(q_time, q_cell)``, ``q_rho_long``, ``q_gibbs``; ``q_pde_dt_floor(q_time)``;
    ``q_pde_step_time``, ``q_pde_free_energy``, ``q_pde_dissipation`` over ``q_step``;
    ``q_acc_mf(q_time)``; ``q_w1``, ``q_w1_iid``, ``q_free_energy``, ``q_acc`` over
    ``(q_N, q_seed, q_time)`` (NaN where a run index exceeds the runs of that N);
    ``q_wall(q_N, q_seed)``; ``q_hist(q_N, q_time, q_cell)`` (run 0); ``q_long_hist(q_lrun, q_cell)``,
    ``q_long_w1``, ``q_long_w1_iid``, ``q_long_acc`` over ``q_lrun``. Scalars are root attributes
    ``q_gibbs_free_energy``, ``q_long_l1``, ``q_long_w1_pde``, ``q_acc_mf_long``, ``q_acc_mf_gibbs``,
    ``q_acc_rbf``, ``q_acc_rbf_scale``, ``q_pde_wall_s``.

    Parameters
    ----------
    config : KernelMeanFieldConfig
    out : str or os.PathLike
        Output file (``.h5``).
    overwrite : bool, default False
        Replace an existing file (otherwise FileExistsError).
    resume : bool, default False
        Continue an interrupted (or partly failed) study in ``out``, written with the same
        configuration: the PDE task is recomputed (deterministic), and every particle or long run whose
        results are stored is skipped; each run has its own seed, so the result equals an
        uninterrupted study.
    progress : bool, default True
        Progress bars.
    log : callable, default print
        One line per finished stage.
    workers : int or None, default 0
        0: in this process; an integer: a LocalCluster of that many single-threaded workers;
        None: one per core (:func:`rieszflow.studies.sweep.run_jobs`).
    scheduler : str, optional
        Address of an existing Dask scheduler.
    on_summary : callable, optional
        ``on_summary(summary)`` with the :class:`rieszflow.studies.sweep.JobsSummary` of the
        particle tasks (done, skipped, failed), called before a failure is raised; without it a
        failure's summary goes to ``log``.

    Returns
    -------
    pathlib.Path

    Raises
    ------
    TypeError
        If ``config`` is not a KernelMeanFieldConfig.
    FileExistsError
        If ``out`` exists and neither ``overwrite`` nor ``resume`` is set.
    ValueError
        If ``resume`` is set and ``out`` was written with another configuration.
    RuntimeError
        If a PDE or Gibbs solve did not converge, or particle tasks failed
        (:class:`rieszflow.studies.sweep.TasksFailed`; the others are stored, status "failed").
    """
    if not isinstance(config, KernelMeanFieldConfig):
        raise TypeError(f"config must be a KernelMeanFieldConfig, got {type(config).__name__}")
    if scheduler is not None and workers == 0:
        workers = None
    check_executor(workers, scheduler)
    log = log or (lambda *a: None)
    out = Path(out)
    t_start = time.perf_counter()
    c = config
    times = np.asarray(c.times)
    if resume:
        check_resumable(out, KIND, c.to_dict())
    with TrajectoryWriter(out, KIND, config=c.to_dict(), overwrite=overwrite, resume=resume,
                          attrs={"seed": c.seed, "backend": c.backend, "problems": list(c.problems)}) as w, \
            Executor(workers, scheduler) as ex:
        pde = {}
        summary = run_jobs([Job({"stage": "pde", "problem": q}, pde_task, (c, q)) for q in c.problems],
                           executor=ex, progress=progress, desc="kernel-mean-field PDE",
                           on_result=lambda job, r: pde.__setitem__(job.task["problem"], r))
        if summary.failed:
            raise TasksFailed("PDE tasks", summary.failures, summary.total,
                              hint="; the particle runs need a converged PDE reference")
        jobs, where, state, skipped = [], {}, {}, 0
        sizes = c.particle_sizes()
        max_runs = max(r for _, r in sizes)
        for q in c.problems:
            ref = pde[q]["value"]
            s = setup(c, q)
            dom = s.domain
            u1 = {"units": "1"}
            w.dimension(f"{q}_cell", dom.n_cells, coords=np.arange(dom.n_cells),
                        attrs={"long_name": "frequency mesh cell index", **u1})
            w.dimension(f"{q}_time", times.size, coords=times,
                        attrs={"long_name": "time t of the comparison (model time units)", **u1})
            w.dimension(f"{q}_N", len(sizes), coords=np.array([n for n, _ in sizes], dtype=np.int64),
                        attrs={"long_name": "number of particles (features) N", **u1})
            w.dimension(f"{q}_seed", max_runs, coords=np.arange(max_runs),
                        attrs={"long_name": "independent particle run", **u1})
            w.dimension(f"{q}_step", ref["fe_time"].size, coords=np.arange(ref["fe_time"].size),
                        attrs={"long_name": "PDE time step index (fixed-step run, then long run)", **u1})
            w.dimension(f"{q}_lrun", c.long_seeds, coords=np.arange(c.long_seeds),
                        attrs={"long_name": "independent long particle run", **u1})
            cell, tt = (f"{q}_cell",), (f"{q}_time",)
            w.variable(f"{q}_volume", cell, data=dom.volumes,
                       attrs={"long_name": "cell volume (length in 1-D, area in 2-D)", **u1})
            for k, ax in enumerate("xy"[: dom.d]):
                w.variable(f"{q}_{ax}", cell, data=dom.centers[:, k],
                           attrs={"long_name": f"cell centre, frequency coordinate omega_{k + 1}", **u1})
            fields = {
                "V": (cell, s.problem.V, "phase-averaged alignment potential V_D at the cell centre, eq. (4.1)"),
                "rho0": (cell, s.rho0_cells, "initial density rho_0 (cell values)"),
                "rho": ((f"{q}_time", f"{q}_cell"), ref["rho"], "PDE density rho_t (cell values)"),
                "rho_long": (cell, ref["rho_long"], "PDE density at long_time (cell values)"),
                "gibbs": (cell, ref["gibbs"], "self-consistent Gibbs density exp(-beta(V + lam g*rho))/Z"),
                "pde_dt_floor": (tt, ref["dt_floor"], "W1(rho with 2*pde_dt, rho with pde_dt)"),
                "pde_step_time": ((f"{q}_step",), ref["fe_time"], "time after the PDE step"),
                "pde_free_energy": ((f"{q}_step",), ref["free_energy"], "free energy F_beta of the PDE density, eq. (4.2)"),
                "pde_dissipation": ((f"{q}_step",), ref["dissipation"], "(F^{n-1} - F^n)/dt of the PDE step"),
                "acc_mf": (tt, ref["acc_mf"], "test accuracy of the SVM with the mean-field kernel k_rho_t"),
            }
            for k, (dims, data, ln) in fields.items():
                w.variable(f"{q}_{k}", dims, data=data, attrs={"long_name": ln, **u1})
            w.set_attrs(**{f"{q}_{k}": ref[k] for k in ("gibbs_free_energy", "gibbs_residual", "long_l1",
                                                         "acc_mf_long", "acc_mf_gibbs", "acc_rbf", "acc_rbf_scale")},
                        **{f"{q}_long_w1_pde": ref["long_w1"], f"{q}_pde_wall_s": ref["seconds"]})
            log(f"[{q}] PDE ({dom.n_cells} cells) in {ref['seconds']:.1f} s; dt floor {ref['dt_floor'].max():.2e}; "
                f"L1(rho(long_time), Gibbs) = {ref['long_l1']:.2e}")
            dims = (f"{q}_N", f"{q}_seed", f"{q}_time")
            for k, ln in (("w1", "W1 between the particles' empirical measure and rho_t"),
                          ("w1_iid", "W1 between N iid draws from rho_t and rho_t"),
                          ("free_energy", "free energy F_beta of the particle histogram on the mesh"),
                          ("acc", "test accuracy of the SVM with the kernel of the N particle features")):
                w.variable(f"{q}_{k}", dims, attrs={"long_name": ln, **u1})
            w.variable(f"{q}_wall", (f"{q}_N", f"{q}_seed"),
                       attrs={"long_name": "wall-clock time of the particle run", "units": "s"})
            w.variable(f"{q}_hist", (f"{q}_N", f"{q}_time", f"{q}_cell"),
                       attrs={"long_name": "particle mass per mesh cell, run 0", **u1})
            w.variable(f"{q}_long_hist", (f"{q}_lrun", f"{q}_cell"),
                       attrs={"long_name": "particle mass per mesh cell at long_time", **u1})
            for k, ln in (("long_w1", "W1 between the long-run particles and the Gibbs density"),
                          ("long_w1_iid", "W1 between long_n iid draws from the Gibbs density and it"),
                          ("long_acc", "test accuracy of the long-run particle features")):
                w.variable(f"{q}_{k}", (f"{q}_lrun",), attrs={"long_name": ln, **u1})
            st = {k: w.read(f"{q}_{k}") for k in ("w1", "w1_iid", "free_energy", "acc", "wall", "hist",
                                                   "long_hist", "long_w1", "long_w1_iid", "long_acc")}
            state[q] = st
            for iN, (n, runs) in enumerate(sizes):
                for r in range(runs):
                    if np.isfinite(st["w1"][iN, r]).all():     # stored before an interruption (W1 last)
                        skipped += 1
                        continue
                    job = Job({"stage": "particles", "problem": q, "N": int(n), "run": r}, particle_task,
                              (c, q, int(n), r, ref["masses"], r == 0))
                    jobs.append((_cost(c, s.p, n, times[-1]), job))
                    where[id(job)] = (iN, r)
            m_gibbs = _masses(s, ref["gibbs"])
            for r in range(c.long_seeds):
                if np.isfinite(st["long_w1"][r]):
                    skipped += 1
                    continue
                job = Job({"stage": "long", "problem": q, "run": r}, long_task, (c, q, r, m_gibbs))
                jobs.append((_cost(c, s.p, c.long_n, c.long_time), job))
                where[id(job)] = (r,)

        def store(job, result):
            if result["status"] != "done":
                return
            t, v = job.task, result["value"]
            q, st, at = t["problem"], state[t["problem"]], where[id(job)]
            if t["stage"] == "particles":
                iN, r = at
                if v["hist"] is not None:
                    st["hist"][iN] = v["hist"]
                st["wall"][iN, r] = v["wall"]
                for k in ("w1_iid", "free_energy", "acc", "w1"):
                    st[k][iN, r] = v[k]
                for k in ("hist", "wall", "w1_iid", "free_energy", "acc", "w1"):
                    w.set(f"{q}_{k}", st[k])
            else:
                (r,) = at
                st["long_hist"][r] = v["hist"]
                for k in ("w1", "w1_iid", "acc"):
                    st[f"long_{k}"][r] = v[k]
                for k in ("long_hist", "long_w1_iid", "long_acc", "long_w1"):
                    w.set(f"{q}_{k}", st[k])

        if not ex.in_process:
            jobs.sort(key=lambda cj: -cj[0])
        jobs = [j for _, j in jobs]
        log(f"kernel-mean-field: {len(jobs)} particle tasks on {ex.describe()}"
            + (f" ({skipped} stored before, skipped)" if skipped else ""))
        summary = run_jobs(jobs, executor=ex, progress=progress, desc="kernel-mean-field runs", skipped=skipped,
                           on_result=store)
        w.set_attrs(wall_s=time.perf_counter() - t_start, failures=summary.failures)
        if on_summary is not None:
            on_summary(summary)
        if summary.failed:
            if on_summary is None:
                log(summary.format("kernel-mean-field runs"))
            raise TasksFailed("particle tasks", summary.failures, summary.total,
                              hint=f"; the other runs are stored in {out} (status 'failed'); --resume runs "
                                   f"the failed ones again")
    return out
