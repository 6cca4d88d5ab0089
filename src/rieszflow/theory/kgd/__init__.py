"""Paper 003, Kernel Geometry Divergence between random-feature kernels: its mathematics, measured.

Modules
-------
``spectral``
    Kernel Geometry Divergence, its spectral bounds and asymptotics (Table 2, Thm 6.3, Thm 7.3).
``sampling``
    Random-feature samplers of the shift-invariant kernels the paper compares.

The ``kgd`` study (``rieszflow kgd``) runs the paper's tables with these; the engine never imports
them.
"""
