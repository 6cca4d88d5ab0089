"""The token-flow study (``rieszflow token-flow``): attention as interacting particles on the sphere.

Modules: :mod:`~rieszflow.studies.token_flow.config` (strict frozen configuration),
:mod:`~rieszflow.studies.token_flow.study` (sections A-E, HDF5 output),
:mod:`~rieszflow.studies.token_flow.analysis` (rate fits, tables, plots),
:mod:`~rieszflow.studies.token_flow.cli` (the subcommand).
"""
