"""rieszflow: particle and mean-field simulation engine for learned attention kernels.

A study script starts with ``import rieszflow as rf`` and finds here what it needs; every name
below is documented where it lives (numpydoc: shapes, units, errors, source) and is loaded on first
use, so ``import rieszflow`` stays light.

Spaces
    :class:`Interval`, :class:`Box`, :class:`Cube`, :class:`Ball`, :class:`Sphere`, :class:`Free`.
Energies (they add up: ``E1 + E2``)
    :class:`RieszEnergy` (Riesz s-energy, s = d - 2 Coulomb, s = 0 log), :class:`ExternalPotential`,
    :class:`SortedCoulomb1D`, :class:`RFFAlignmentEnergy` (kernel-target alignment),
    :class:`SumEnergy`, :class:`Interaction`, :func:`make_energy`, :func:`hamiltonian`,
    :func:`riesz_energy`, :func:`kernel_target_alignment`.
Integrators and the one loop
    :func:`projected_langevin`, :func:`mala`, :func:`metropolized_langevin` (the Metropolized
    Euler-Maruyama step of a mean-field particle system), :func:`run`, :func:`run_langevin`,
    :class:`LangevinState`, :class:`MALAState`, :class:`MetropolizedState`.
Empirical measures and transport
    :func:`empirical_measure`, :class:`EmpiricalMeasure`, :func:`wasserstein1`, :func:`mmd2`.
The mean-field side
    :class:`MeanFieldProblem`, :func:`solve_mckean_vlasov`, :func:`interval_mesh`,
    :func:`rectangle_mesh`, :func:`disk_mesh`, :class:`MeanFieldParticles`,
    :class:`GridW1`, :func:`gibbs_density`, :func:`free_energy`, :func:`rate_function`,
    :func:`rate_infimum`, :func:`equilibrium_particles`, :func:`equilibrium_on_mesh`.
Token flows (attention as interacting particles)
    :func:`sphere_attention_flow`, :func:`euclidean_attention_flow`, :func:`run_flow`,
    :class:`AttentionField`.
Feature maps and the bundled model
    :func:`make_feature_map`, :data:`FEATURE_MAPS`, :class:`TransformerClassifier`,
    :class:`MainJobConfig`, :class:`MainJob`, :func:`run_main_job`, :func:`load_learned_kernel`.
Run files and sweeps
    :class:`TrajectoryWriter`, :func:`open_run`, :func:`open_runs`, :func:`open_sweep`,
    :class:`SweepSpec`, :func:`run_sweep`, :class:`Task`.
Statistics and threads
    ``rf.stats`` (:mod:`rieszflow.engine.stats`: power-law fits, paired tests, MCMC diagnostics),
    :func:`configure_threads`.

Namespaces: :mod:`rieszflow.engine` (the simulation core), :mod:`rieszflow.solvers` (the
McKean-Vlasov PDE, Gibbs states, rate functions, the particle systems they are compared with),
:mod:`rieszflow.theory` (each paper's mathematics), :mod:`rieszflow.learning` (Phase A / Phase B
training of the bundled Transformer), :mod:`rieszflow.studies` (the CLI's studies: leaves).

Threads: importing rieszflow applies its thread policy (:mod:`rieszflow.engine.threads`: one
BLAS thread, Numba threads only for large kernel calls), as the ``rieszflow`` command does, so a
script and the command line run at the same speed. It sets ``OPENBLAS_NUM_THREADS``,
``MKL_NUM_THREADS`` and ``BLIS_NUM_THREADS`` for BLAS libraries loaded later (child processes
inherit them); a value the user set is kept, and then the loaded pools are left alone too.
``RIESZFLOW_THREADS`` caps the threads; ``RIESZFLOW_THREAD_POLICY=off`` leaves the BLAS pools and
the environment as they are; :func:`configure_threads` applies the policy at run time.

References
----------
"Random features as interacting particles" (paper 000 of this project); the companion papers
(LUNA, the infinite-width law of attention, Kernel Geometry Divergence, "A Mathematical Theory of
Attention", arXiv:2007.02876) are cited where their mathematics lives.
"""
from importlib import import_module as _import_module
from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("rieszflow")
except _metadata.PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0+unknown"

#: Public name -> the module that defines it (loaded on first access, PEP 562).
_API = {
    # spaces
    **dict.fromkeys(["Space", "Interval", "Box", "Cube", "Ball", "Sphere", "Free"], "rieszflow.engine.space"),
    # energies
    **dict.fromkeys(["Energy", "RieszEnergy", "ExternalPotential", "SortedCoulomb1D", "RFFAlignmentEnergy",
                     "SumEnergy", "Interaction", "make_energy", "hamiltonian", "riesz_energy",
                     "kernel_target_alignment", "ENERGIES"], "rieszflow.engine.energy"),
    # integrators and the loop
    **dict.fromkeys(["projected_langevin", "mala", "run", "run_langevin", "LangevinState", "MALAState",
                     "adapt_step_size"], "rieszflow.engine.simulate"),
    **dict.fromkeys(["metropolized_langevin", "MetropolizedState"], "rieszflow.engine.metropolized"),
    # measures
    **dict.fromkeys(["empirical_measure", "EmpiricalMeasure", "wasserstein1", "mmd2"],
                    "rieszflow.engine.measures"),
    # mean field
    **dict.fromkeys(["MeanFieldProblem", "MeanFieldResult", "solve_mckean_vlasov", "interval_mesh",
                     "rectangle_mesh", "disk_mesh"], "rieszflow.solvers.mckean_vlasov"),
    **dict.fromkeys(["gibbs_density", "free_energy", "rate_function", "rate_infimum", "empirical_density"],
                    "rieszflow.solvers.gibbs"),
    **dict.fromkeys(["equilibrium_particles", "equilibrium_on_mesh"], "rieszflow.solvers.equilibrium"),
    **dict.fromkeys(["MeanFieldParticles", "GridW1", "TruncatedGaussian", "make_interaction",
                     "quadratic_potential"], "rieszflow.solvers.particles"),
    # token flows
    **dict.fromkeys(["sphere_attention_flow", "euclidean_attention_flow", "run_flow", "AttentionField"],
                    "rieszflow.engine.tokenflow"),
    # feature maps and the model
    **dict.fromkeys(["make_feature_map", "FEATURE_MAPS", "FeatureMap"], "rieszflow.engine.features"),
    **dict.fromkeys(["TransformerClassifier"], "rieszflow.engine.attention"),
    **dict.fromkeys(["MainJobConfig", "MainJob", "run_main_job", "load_learned_kernel"], "rieszflow.learning"),
    # run files and sweeps
    **dict.fromkeys(["TrajectoryWriter", "open_run", "RunFileError"], "rieszflow.engine.storage"),
    **dict.fromkeys(["open_runs"], "rieszflow.studies.runs.inspect"),
    **dict.fromkeys(["SweepSpec", "Task", "run_sweep", "open_sweep"], "rieszflow.studies.sweep"),
    # threads
    **dict.fromkeys(["configure_threads", "thread_settings"], "rieszflow.engine.threads"),
}
_NAMESPACES = ("engine", "solvers", "theory", "learning", "studies", "config", "stats")

__all__ = ["__version__", *_API]


def __getattr__(name):
    if name in _API:
        value = getattr(_import_module(_API[name]), name)
        globals()[name] = value
        return value
    if name in _NAMESPACES:
        module = _import_module("rieszflow.engine.stats" if name == "stats" else f"rieszflow.{name}")
        globals()[name] = module
        return module
    raise AttributeError(f"module 'rieszflow' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_API, *_NAMESPACES])


def _apply_thread_policy() -> None:
    """Apply the thread policy at first import (RIESZFLOW_THREAD_POLICY=off skips it)."""
    import os
    import warnings

    if os.environ.get("RIESZFLOW_THREAD_POLICY", "").lower() in ("off", "0", "no", "false"):
        return
    from rieszflow.engine.threads import limit_blas

    try:
        limit_blas(respect_environment=True)   # BLAS pools now and later; a user's OPENBLAS_NUM_THREADS wins
    except ValueError as e:     # a malformed RIESZFLOW_THREADS: say so, do not fail the import
        warnings.warn(f"rieszflow: thread policy not applied: {e}", RuntimeWarning, stacklevel=2)


_apply_thread_policy()
