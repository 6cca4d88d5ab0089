"""``rieszflow mean-field``: the particle system of paper 000, eq. (E.2), against the McKean-Vlasov PDE.

Modules: :mod:`rieszflow.solvers.particles` (the particle system, exact 1-D Coulomb force),
:mod:`~rieszflow.engine.measures` (exact W1 helpers), :mod:`~rieszflow.studies.mean_field.config`,
:mod:`~rieszflow.studies.mean_field.study`, :mod:`~rieszflow.studies.mean_field.analysis`,
:mod:`~rieszflow.studies.mean_field.bias` (the O(1/N) bias, plain estimator),
:mod:`~rieszflow.studies.mean_field.antithetic` (its antithetic estimator at large N), :mod:`~rieszflow.studies.mean_field.cli`.
See docs/studies_mean_field.md.
"""
