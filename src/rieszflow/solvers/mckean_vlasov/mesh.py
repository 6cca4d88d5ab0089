"""Finite-volume domains of the mean-field solvers: interval, rectangle, disk.

A :class:`MeshDomain` wraps a FiPy mesh together with the geometry the
nonlocal interaction needs (cell centres, cell volumes, cell polygons) and,
for uniform grids, the grid structure used by the FFT convolution.

Constructors
------------
:func:`interval_mesh`
    ``[lo, hi]`` cut into ``n`` equal cells (FiPy ``Grid1D``).
:func:`rectangle_mesh`
    ``[lo_x, hi_x] x [lo_y, hi_y]`` cut into ``nx x ny`` equal cells (FiPy
    ``Grid2D``). Cell ``k`` has grid indices ``(k % nx, k // nx)`` (x fastest),
    FiPy's ordering.
:func:`disk_mesh`
    The disk ``|x - c| <= R`` triangulated by Gmsh (the ``gmsh`` PyPI wheel).

Gmsh and FiPy
-------------
FiPy's ``Gmsh2D`` runs a ``gmsh`` executable found on ``$PATH``. The PyPI wheel
installs ``<venv>/bin/gmsh``, a Python script whose shebang is
``#!/usr/bin/env python``; it works only when the virtual environment is
*activated* (so that ``python`` on ``$PATH`` can import ``gmsh``). When the
interpreter is called by its full path (CI, ``.venv/bin/python -m pytest``) FiPy
finds no working binary and fails with "Gmsh version must be >= 2.0".

:func:`disk_mesh` therefore offers two routes:

``backend="api"`` (default)
    Calls the Gmsh Python API in-process (``gmsh.model.geo`` circle arcs,
    Frontal-Delaunay, one thread, so the mesh is reproducible) and builds a
    FiPy ``Mesh2D`` from the triangles. No subprocess and no ``$PATH``
    dependence.
``backend="fipy"``
    FiPy's own ``Gmsh2D`` on the same ``.geo`` script. If ``gmsh --version``
    fails, a two-line wrapper script that runs the wheel's ``gmsh`` module
    with *this* interpreter is written to a temporary directory and put at
    the front of ``$PATH`` for the duration of the call (restored
    afterwards). FiPy adds ``-smooth 8``, so the triangles differ slightly
    from the API route; the test suite checks both.

References
----------
paper 000, Thm 1 (compact convex domain with no-flux boundary, eq. (4.5)).
particles_pde_reference.md, sec. 2.2 ("Mesh geometry").
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

# FiPy picks its solver suite when ``fipy.solvers`` is first imported; ask for the
# SciPy suite unless the user chose one. The solvers also pass a SciPy solver
# explicitly, so results never depend on an optional PETSc/Trilinos install.
os.environ.setdefault("FIPY_SOLVERS", "scipy")

import fipy  # noqa: E402

from rieszflow.engine._checks import check_choice, check_int, check_real  # noqa: E402

__all__ = [
    "MeshDomain",
    "interval_mesh",
    "rectangle_mesh",
    "disk_mesh",
    "domain_from_fipy",
    "gmsh_executable_works",
]

KINDS = ("interval", "rectangle", "disk", "mesh1d", "mesh2d")


@dataclasses.dataclass(frozen=True, eq=False)
class MeshDomain:
    """A FiPy mesh with the geometry used by the mean-field solvers.

    Parameters
    ----------
    mesh : fipy mesh
        The FiPy mesh (``Grid1D``, ``Grid2D`` or ``Mesh2D``).
    kind : str
        ``"interval"``, ``"rectangle"``, ``"disk"``, or ``"mesh1d"`` /
        ``"mesh2d"`` for a wrapped arbitrary FiPy mesh.
    centers : ndarray, shape (n_cells, d), float64
        Cell centres (centroids); the collocation points of the interaction.
    volumes : ndarray, shape (n_cells,), float64
        Cell lengths (d = 1) or areas (d = 2).
    grid_shape : tuple of int or None
        ``(n,)`` or ``(nx, ny)`` for uniform grids, else None.
    spacing : tuple of float or None
        ``(h,)`` or ``(hx, hy)`` for uniform grids, else None.
    origin : tuple of float or None
        Lower corner of a uniform grid, else None.
    params : dict
        Construction parameters (for provenance in output files).

    Notes
    -----
    Build with :func:`interval_mesh`, :func:`rectangle_mesh`, :func:`disk_mesh` or
    :func:`domain_from_fipy`; the fields are not validated again here.

    References
    ----------
    paper 000, Thm 1 (domain :math:`\\Omega` compact and convex).
    """

    mesh: object
    kind: str
    centers: np.ndarray
    volumes: np.ndarray
    grid_shape: tuple | None = None
    spacing: tuple | None = None
    origin: tuple | None = None
    params: dict = dataclasses.field(default_factory=dict)

    @property
    def d(self) -> int:
        """Space dimension (1 or 2)."""
        return int(self.centers.shape[1])

    @property
    def n_cells(self) -> int:
        """Number of cells."""
        return int(self.centers.shape[0])

    @property
    def is_uniform_grid(self) -> bool:
        """True for :func:`interval_mesh` / :func:`rectangle_mesh` domains."""
        return self.grid_shape is not None

    @property
    def area(self) -> float:
        """Total length (d = 1) or area (d = 2) of the mesh."""
        return float(self.volumes.sum())

    def cell_edges_1d(self) -> tuple[np.ndarray, np.ndarray]:
        """Left and right end points of the cells of a 1-D mesh.

        Returns
        -------
        left, right : ndarray, shape (n_cells,), float64

        Raises
        ------
        ValueError
            If the domain is not one-dimensional.
        """
        if self.d != 1:
            raise ValueError(f"cell_edges_1d needs a 1-D domain, got d={self.d}")
        c = self.centers[:, 0]
        return c - 0.5 * self.volumes, c + 0.5 * self.volumes

    def faces_2d(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Faces of a 2-D mesh as oriented segments, with the cell-face incidence.

        Returns
        -------
        a, b : ndarray, shape (n_faces, 2), float64
            End points of each face.
        incidence : scipy.sparse.csr_matrix, shape (n_cells, n_faces)
            ``+1`` where cell i traverses face f from ``a`` to ``b``
            counter-clockwise, ``-1`` where it traverses it from ``b`` to ``a``,
            0 otherwise. Then for any function ``F(a, b)`` that is additive over
            oriented edges, the cell integral is ``incidence @ F``.

        Raises
        ------
        ValueError
            If the domain is not two-dimensional.
        """
        import scipy.sparse as sp

        if self.d != 2:
            raise ValueError(f"faces_2d needs a 2-D domain, got d={self.d}")
        m = self.mesh
        verts = np.asarray(m.vertexCoords, dtype=np.float64)  # (2, nV)
        fv = np.asarray(m.faceVertexIDs)  # (2, nF)
        a = verts[:, fv[0]].T
        b = verts[:, fv[1]].T
        cf = np.ma.filled(np.ma.asarray(m.cellFaceIDs), -1)  # (faces per cell, nC)
        rows, cols = [], []
        for k in range(cf.shape[0]):
            ok = cf[k] >= 0
            rows.append(np.nonzero(ok)[0])
            cols.append(cf[k][ok])
        rows = np.concatenate(rows)
        cols = np.concatenate(cols)
        # counter-clockwise traversal a -> b has outward normal (b - a) rotated by -90 deg
        t = b[cols] - a[cols]
        n_out = np.stack([t[:, 1], -t[:, 0]], axis=1)
        mid = 0.5 * (a[cols] + b[cols])
        sign = np.sign(np.einsum("ij,ij->i", n_out, mid - self.centers[rows]))
        if np.any(sign == 0):
            raise ValueError("faces_2d: a face passes through its cell centre; the mesh has "
                             "degenerate (non-convex or zero-area) cells")
        return a, b, sp.csr_matrix((sign, (rows, cols)), shape=(self.n_cells, fv.shape[1]))


def _domain(mesh, kind, grid_shape=None, spacing=None, origin=None, params=None) -> MeshDomain:
    centers = np.ascontiguousarray(np.asarray(mesh.cellCenters, dtype=np.float64).T)
    volumes = np.ascontiguousarray(np.asarray(mesh.cellVolumes, dtype=np.float64))
    return MeshDomain(mesh=mesh, kind=kind, centers=centers, volumes=volumes,
                      grid_shape=grid_shape, spacing=spacing, origin=origin,
                      params=dict(params or {}))


def interval_mesh(lo: float, hi: float, n: int) -> MeshDomain:
    """The interval ``[lo, hi]`` cut into ``n`` equal cells (FiPy ``Grid1D``).

    Parameters
    ----------
    lo, hi : float
        End points, ``lo < hi``.
    n : int
        Number of cells, ``n >= 2``.

    Returns
    -------
    MeshDomain
        ``kind="interval"``, ``grid_shape=(n,)``, ``spacing=(h,)`` with
        ``h = (hi - lo) / n``.

    Raises
    ------
    ValueError
        If ``lo >= hi``, the end points are not finite, or ``n < 2``.
    TypeError
        If ``n`` is not an integer.

    References
    ----------
    paper 000, Thm 1 (d = 1: :math:`\\Omega` an interval).
    """
    lo = check_real("lo", lo)
    hi = check_real("hi", hi)
    n = check_int("n", n, minimum=2)
    if not lo < hi:
        raise ValueError(f"interval_mesh needs lo < hi, got lo={lo}, hi={hi}")
    h = (hi - lo) / n
    mesh = fipy.Grid1D(dx=h, nx=n) + [[lo]]
    return _domain(mesh, "interval", (n,), (h,), (lo,), {"lo": lo, "hi": hi, "n": n})


def rectangle_mesh(lo, hi, shape) -> MeshDomain:
    """The rectangle ``[lo[0], hi[0]] x [lo[1], hi[1]]`` cut into equal cells (FiPy ``Grid2D``).

    Parameters
    ----------
    lo, hi : sequence of 2 floats
        Lower-left and upper-right corners, ``lo[i] < hi[i]``.
    shape : sequence of 2 ints
        ``(nx, ny)``, each ``>= 2``.

    Returns
    -------
    MeshDomain
        ``kind="rectangle"``; cell ``k`` has grid indices ``(k % nx, k // nx)``.

    Raises
    ------
    ValueError
        On wrong lengths, non-finite or unordered corners, or ``nx, ny < 2``.

    References
    ----------
    paper 000, Thm 1 (compact convex :math:`\\Omega`; a rectangle has corners, not a
    :math:`C^2` boundary, but FiPy's no-flux condition needs none).
    """
    lo = tuple(lo)
    hi = tuple(hi)
    shape = tuple(shape)
    if len(lo) != 2 or len(hi) != 2 or len(shape) != 2:
        raise ValueError(f"rectangle_mesh needs lo, hi, shape of length 2, got lo={lo}, hi={hi}, "
                         f"shape={shape}")
    lo = tuple(check_real(f"lo[{i}]", v) for i, v in enumerate(lo))
    hi = tuple(check_real(f"hi[{i}]", v) for i, v in enumerate(hi))
    nx, ny = (check_int(f"shape[{i}]", v, minimum=2) for i, v in enumerate(shape))
    if not (lo[0] < hi[0] and lo[1] < hi[1]):
        raise ValueError(f"rectangle_mesh needs lo < hi componentwise, got lo={lo}, hi={hi}")
    hx = (hi[0] - lo[0]) / nx
    hy = (hi[1] - lo[1]) / ny
    mesh = fipy.Grid2D(dx=hx, dy=hy, nx=nx, ny=ny) + [[lo[0]], [lo[1]]]
    return _domain(mesh, "rectangle", (nx, ny), (hx, hy), lo,
                   {"lo": list(lo), "hi": list(hi), "shape": [nx, ny]})


def _disk_geo(radius: float, cell_size: float, center) -> str:
    cx, cy = center
    return (f"h = {cell_size!r};\n"
            f"Point(1) = {{{cx!r}, {cy!r}, 0, h}};\n"
            f"Point(2) = {{{cx - radius!r}, {cy!r}, 0, h}};\n"
            f"Point(3) = {{{cx!r}, {cy + radius!r}, 0, h}};\n"
            f"Point(4) = {{{cx + radius!r}, {cy!r}, 0, h}};\n"
            f"Point(5) = {{{cx!r}, {cy - radius!r}, 0, h}};\n"
            "Circle(6) = {2, 1, 3};\nCircle(7) = {3, 1, 4};\n"
            "Circle(8) = {4, 1, 5};\nCircle(9) = {5, 1, 2};\n"
            "Line Loop(10) = {6, 7, 8, 9};\nPlane Surface(11) = {10};\n")


def _triangles_to_mesh2d(points: np.ndarray, triangles: np.ndarray):
    """FiPy ``Mesh2D`` from vertices (nV, 2) and triangles (nC, 3) of vertex indices.

    Triangles are made counter-clockwise; each face stores its vertices in the
    traversal direction of the first cell that lists it, which is FiPy's
    convention (``_cellToFaceOrientations`` and ``_orderedCellVertexIDs``, used by
    the viewers, then return the triangles' vertices in order).
    """
    p = points[triangles]
    e1, e2 = p[:, 1] - p[:, 0], p[:, 2] - p[:, 0]
    cross = e1[:, 0] * e2[:, 1] - e1[:, 1] * e2[:, 0]
    tri = np.where((cross < 0)[:, None], triangles[:, [0, 2, 1]], triangles)
    oriented = np.stack([tri[:, [0, 1]], tri[:, [1, 2]], tri[:, [2, 0]]], axis=1).reshape(-1, 2)  # cell-major
    keys = np.sort(oriented, axis=1)
    _, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    from fipy.meshes.mesh2D import Mesh2D

    return Mesh2D(vertexCoords=np.ascontiguousarray(points.T),
                  faceVertexIDs=np.ascontiguousarray(oriented[first].T),
                  cellFaceIDs=np.ascontiguousarray(inverse.reshape(-1, 3).T))


def _disk_api(radius, cell_size, center):
    import gmsh

    owner = not gmsh.isInitialized()
    if owner:
        gmsh.initialize(interruptible=False)
    try:
        gmsh.option.setNumber("General.Terminal", 0)
        gmsh.option.setNumber("General.NumThreads", 1)
        gmsh.option.setNumber("Mesh.Algorithm", 6)  # Frontal-Delaunay
        gmsh.model.add("rieszflow_disk")
        cx, cy = center
        geo = gmsh.model.geo
        p1 = geo.addPoint(cx, cy, 0, cell_size)
        ring = [geo.addPoint(cx - radius, cy, 0, cell_size), geo.addPoint(cx, cy + radius, 0, cell_size),
                geo.addPoint(cx + radius, cy, 0, cell_size), geo.addPoint(cx, cy - radius, 0, cell_size)]
        arcs = [geo.addCircleArc(ring[k], p1, ring[(k + 1) % 4]) for k in range(4)]
        loop = geo.addCurveLoop(arcs)
        geo.addPlaneSurface([loop])
        geo.synchronize()
        gmsh.model.mesh.generate(2)
        tags, coords, _ = gmsh.model.mesh.getNodes()
        etypes, _, enodes = gmsh.model.mesh.getElements(2)
        gmsh.model.remove()
    finally:
        if owner:
            gmsh.finalize()
    tri = [k for k, t in enumerate(etypes) if t == 2]  # Gmsh element type 2: 3-node triangle
    if len(tri) != 1:
        raise RuntimeError(f"gmsh returned element types {list(etypes)}; expected 3-node triangles (2)")
    pts = np.asarray(coords, dtype=np.float64).reshape(-1, 3)[:, :2]
    index = np.full(int(np.max(tags)) + 1, -1, dtype=np.int64)
    index[np.asarray(tags, dtype=np.int64)] = np.arange(len(tags))
    triangles = index[np.asarray(enodes[tri[0]], dtype=np.int64).reshape(-1, 3)]
    used = np.unique(triangles)  # drop the geometric centre point if it is not a mesh vertex
    remap = np.full(pts.shape[0], -1, dtype=np.int64)
    remap[used] = np.arange(used.size)
    return _triangles_to_mesh2d(pts[used], remap[triangles])


def gmsh_executable_works() -> bool:
    """True when ``gmsh --version`` on ``$PATH`` runs (what FiPy's ``Gmsh2D`` needs).

    Returns
    -------
    bool
        Never raises: any failure to start ``gmsh`` gives False.

    References
    ----------
    particles_pde_reference.md sec. 2.2 ("Mesh geometry": ``Gmsh2D`` needs the binary).
    """
    exe = shutil.which("gmsh")
    if exe is None:
        return False
    try:
        p = subprocess.run([exe, "--version"], capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return False
    return p.returncode == 0


@contextlib.contextmanager
def _gmsh_on_path():
    """Make ``gmsh`` on ``$PATH`` run the wheel's module with this interpreter (temporarily)."""
    if gmsh_executable_works():
        yield
        return
    with tempfile.TemporaryDirectory(prefix="rieszflow_gmsh_") as tmp:
        exe = os.path.join(tmp, "gmsh")
        with open(exe, "w") as f:
            f.write(f"#!{sys.executable}\nimport sys\nimport gmsh\n"
                    "gmsh.initialize(sys.argv, run=True)\ngmsh.finalize()\n")
        os.chmod(exe, 0o755)
        old = os.environ.get("PATH", "")
        os.environ["PATH"] = tmp + os.pathsep + old
        try:
            yield
        finally:
            os.environ["PATH"] = old


def disk_mesh(radius: float = 1.0, cell_size: float = 0.1, center=(0.0, 0.0),
              backend: str = "api") -> MeshDomain:
    """The disk ``|x - center| <= radius``, triangulated by Gmsh.

    Parameters
    ----------
    radius : float, default 1.0
        Disk radius, > 0.
    cell_size : float, default 0.1
        Target triangle edge length (Gmsh characteristic length), with
        ``0 < cell_size <= radius``.
    center : sequence of 2 floats, default (0, 0)
    backend : {"api", "fipy"}, default "api"
        ``"api"``: Gmsh Python API in-process, FiPy ``Mesh2D`` built from the
        triangles. ``"fipy"``: FiPy ``Gmsh2D`` (runs a ``gmsh`` executable; see
        the module docstring for how one is provided when ``$PATH`` has none).

    Returns
    -------
    MeshDomain
        ``kind="disk"``. The mesh is the inscribed polygon: its area is
        slightly below ``pi radius^2`` (by O(cell_size^2) relatively).

    Raises
    ------
    ValueError
        On a non-positive radius, a cell size out of range, or an unknown backend.

    References
    ----------
    paper 000, Thm 1 (compact convex domain with :math:`C^2` boundary, eq. (4.5)).
    """
    radius = check_real("radius", radius, positive=True)
    cell_size = check_real("cell_size", cell_size, positive=True)
    if cell_size > radius:
        raise ValueError(f"cell_size must be <= radius, got cell_size={cell_size}, radius={radius}")
    center = tuple(check_real(f"center[{i}]", v) for i, v in enumerate(center))
    if len(center) != 2:
        raise ValueError(f"center must have 2 coordinates, got {center}")
    check_choice("backend", backend, ("api", "fipy"))
    if backend == "api":
        mesh = _disk_api(radius, cell_size, center)
    else:
        with _gmsh_on_path():
            mesh = fipy.Gmsh2D(_disk_geo(radius, cell_size, center))
    return _domain(mesh, "disk", params={"radius": radius, "cell_size": cell_size,
                                         "center": list(center), "backend": backend})


def domain_from_fipy(mesh) -> MeshDomain:
    """Wrap an arbitrary 1-D or 2-D FiPy mesh (direct-quadrature interaction only).

    Parameters
    ----------
    mesh : fipy mesh
        Any FiPy mesh of dimension 1 or 2 with convex cells.

    Returns
    -------
    MeshDomain
        ``kind="mesh1d"`` or ``"mesh2d"``, no grid structure (the FFT path is
        not available).

    Raises
    ------
    ValueError
        If the mesh dimension is not 1 or 2.

    References
    ----------
    paper 000, Thm 1.
    """
    dim = int(mesh.dim)
    if dim not in (1, 2):
        raise ValueError(f"mesh.dim must be 1 or 2, got {dim}")
    return _domain(mesh, "mesh1d" if dim == 1 else "mesh2d")
