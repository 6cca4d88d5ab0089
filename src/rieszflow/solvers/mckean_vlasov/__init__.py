"""Reflected McKean-Vlasov PDE of paper 000 (Thm 1) on FiPy meshes.

Modules
-------
mesh
    :class:`MeshDomain` and the interval / rectangle / disk constructors (Gmsh for the disk).
convolution
    Exact cell integrals of the Riesz/log kernel and the interaction operator (direct or FFT).
equation
    :class:`MeanFieldProblem` (V, s, lam, beta on a mesh, free energy) and
    :func:`solve_mckean_vlasov` (FiPy, Scharfetter-Gummel, implicit Euler) returning a
    :class:`MeanFieldResult` (snapshots, diagnostics, HDF5 output).
scharfetter_gummel
    :class:`ScharfetterGummelOperator`: the same implicit system assembled directly
    (``pde_backend="assembled"``, the default of :func:`solve_mckean_vlasov`).

The mean-field solvers are host (NumPy) code: FiPy assembles and SciPy solves on
the CPU, and the meshes have at most a few thousand cells, so there is no CuPy path
(particle systems on the GPU live in :mod:`rieszflow.engine`).

References
----------
paper 000, eq. (4.1)-(4.5) and App. E, eq. (E.2)-(E.5).
"""
from rieszflow.solvers.mckean_vlasov.convolution import (
    Convolution,
    cell_integral_matrix,
    make_convolution,
    offset_table,
)
from rieszflow.solvers.mckean_vlasov.equation import (
    MeanFieldProblem,
    MeanFieldResult,
    alignment_potential_on_mesh,
    load_result,
    solve_mckean_vlasov,
)
from rieszflow.solvers.mckean_vlasov.scharfetter_gummel import ScharfetterGummelOperator, exponential_weight
from rieszflow.solvers.mckean_vlasov.mesh import (
    MeshDomain,
    disk_mesh,
    domain_from_fipy,
    interval_mesh,
    rectangle_mesh,
)

__all__ = [
    "Convolution",
    "MeanFieldProblem",
    "MeanFieldResult",
    "MeshDomain",
    "alignment_potential_on_mesh",
    "cell_integral_matrix",
    "disk_mesh",
    "domain_from_fipy",
    "interval_mesh",
    "load_result",
    "make_convolution",
    "offset_table",
    "ScharfetterGummelOperator",
    "exponential_weight",
    "rectangle_mesh",
    "solve_mckean_vlasov",
]
