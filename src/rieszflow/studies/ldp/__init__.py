"""``rieszflow ldp``: large deviations of the particle Gibbs law (paper 000, Thm 2, eq. (E.7)).

Modules: :mod:`~rieszflow.studies.ldp.config`, :mod:`~rieszflow.studies.ldp.study` (batched MALA, tilted estimators,
tables and plot), :mod:`~rieszflow.studies.ldp.cli`. See docs/studies_mean_field.md.
"""
