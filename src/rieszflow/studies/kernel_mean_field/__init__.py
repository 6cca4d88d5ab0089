"""``rieszflow kernel-mean-field``: kernel learning in mean field (paper 000, Thm 1, eq. (4.1)-(4.5)).

Modules: :mod:`.config` (strict configuration and presets), :mod:`.data` (the three binary
problems), :mod:`.kernels` (feature and mean-field kernels, precomputed-kernel SVMs),
:mod:`.study` (particles, PDE, Gibbs state, HDF5), :mod:`.analysis` (tables, plots), :mod:`.cli`.
"""
