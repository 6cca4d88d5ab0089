"""``rieszflow ldp``: large deviations of the particle Gibbs law (paper 000, Thm 2, eq. (E.7)).

Modules: :mod:`~studies.ldp.config`, :mod:`~studies.ldp.study` (batched MALA, tilted estimators,
tables and plot), :mod:`~studies.ldp.cli`. See docs/studies_mean_field.md.
"""
