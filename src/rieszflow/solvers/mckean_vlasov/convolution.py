"""The nonlocal interaction :math:`(g_s * \\rho)(x_j)` on finite-volume meshes, with exact cell integrals.

Kernel (paper 000, eq. (2.3)/(B.10); no 1/s factor)

.. math::

    g_s(w) = \\|w\\|^{-s}\\ (s > 0), \\qquad -\\log\\|w\\|\\ (s = 0), \\qquad
    -\\|w\\|^{-s}\\ (-2 < s < 0).

Discretisation
--------------
The density is piecewise constant, :math:`\\rho = \\sum_i \\rho_i 1_{C_i}`, and the
potential is collocated at the cell centres :math:`x_j`:

.. math::

    (g_s * \\rho)(x_j) = \\sum_i A_{ji}\\, \\rho_i, \\qquad
    A_{ji} = \\int_{C_i} g_s(x_j - y)\\, dy .

On a uniform grid :math:`A_{ji} = |C|\\, W_{j-i}` with
:math:`W_k = |C|^{-1}\\int_{C_k} g_s` the *exact cell average* of the kernel over
the cell centred at offset :math:`k` (Carrillo-Chertock-Huang 2015;
particles_pde_reference.md sec. 2.1). The self cell is never zeroed. The
integrals are closed forms (d = 1) or one-dimensional smooth integrals done by
composite Gauss-Legendre quadrature (d = 2), accurate to about 1e-13 relative
to the largest entry (see "Accuracy" below):

d = 1 (any 1-D mesh)
    closed-form antiderivatives :math:`G' = g_s`: :math:`G(y) = y - y\\log|y|` for
    the log kernel, :math:`G(y) = \\operatorname{sgn}(s)\\operatorname{sign}(y)|y|^{1-s}/(1-s)`
    for :math:`s \\ne 0`; then :math:`A_{ji} = G(x_j - a_i) - G(x_j - b_i)`.
d = 2 (any polygonal mesh)
    the integral of :math:`g_s(\\cdot - x)` over a polygon is the signed sum, over its
    oriented edges :math:`(a, b)`, of integrals over the triangles :math:`(x, a, b)`.
    In polar coordinates centred at the apex :math:`x` each of these is a smooth
    one-dimensional integral: with :math:`p` the distance from :math:`x` to the
    edge's line and :math:`t` the arclength along it from the foot point,

    .. math::

        \\int_{\\triangle(x,a,b)} g_s(|y - x|)\\,dy
        = \\int_{t_a}^{t_b} h\\bigl(\\sqrt{p^2+t^2}\\bigr)\\frac{p\\,dt}{p^2+t^2}
        = \\int_{\\operatorname{asinh}(t_a/p)}^{\\operatorname{asinh}(t_b/p)}
          \\frac{h(p\\cosh u)}{\\cosh u}\\,du,

    where :math:`h(R) = \\int_0^R g_s(r)\\,r\\,dr` (:math:`R^{2-s}/(2-s)` times
    :math:`\\operatorname{sgn} s`, or :math:`-\\tfrac{R^2}{2}(\\log R - \\tfrac12)` for the
    log kernel). The singularity at the apex is integrated exactly. The
    :math:`u`-integrand is analytic in the strip :math:`|\\operatorname{Im} u| < \\pi/2`
    (branch points of :math:`(\\cosh u)^{2-s}` and :math:`\\log\\cosh u` at
    :math:`\\cosh u = 0`; entire only for :math:`s = \\pm 1`), so one Gauss-Legendre
    rule converges geometrically at a rate set by the interval's length: slowly for
    an edge seen at grazing incidence (:math:`|t|/p` large, e.g. the long sides of
    a thin cell, :math:`u`-length :math:`2\\operatorname{asinh}(h_x/h_y)`). The
    interval is therefore split into equal panels of :math:`u`-length at most 2,
    each with ``quad_nodes`` nodes: the Bernstein ellipse of a panel has
    :math:`\\rho \\ge \\pi/2 + \\sqrt{1 + \\pi^2/4} \\approx 3.4`, error
    :math:`O(\\rho^{-2q})`, below round-off for q = 24, whatever the cell's aspect
    ratio. The span :math:`\\operatorname{asinh}(t_b/p) - \\operatorname{asinh}(t_a/p)`
    and the triangle's area are computed without cancellation, so far edges keep
    their relative accuracy. This handles the singular self cell and
    near-singular neighbours of any mesh alike; for the centred square of side
    :math:`h` and :math:`s = 1` it reproduces the closed form
    :math:`(4/h)\\ln(1+\\sqrt2)` of the spec.

    On uniform rectangles the offset table :math:`W_{k,l}` uses this formula for
    every offset (the quadrant table has :math:`n_x n_y` entries), so near and far
    are not told apart by index: cells of any aspect ratio are treated alike.

Accuracy (d = 2, measured)
    Offset table against the closed-form rectangle integrals of the log and
    :math:`1/r` kernels, :math:`12 \\times 12` grids with :math:`h_x/h_y` = 1, 2,
    20, 50, 100, 1000: max error :math:`\\le 6\\times10^{-14}\\max|W|`; against adaptive
    ``scipy.integrate.dblquad`` for s = -0.7, 0.5, 1.5 at aspect ratios 2, 20, 100:
    relative error :math:`\\le 6\\times10^{-15}`. Far offsets keep a relative error of
    about :math:`n\\epsilon` from the signed sum over the four edges
    (:math:`\\le 3\\times10^{-13}\\max|W|` against a tensor Gauss rule on a
    :math:`512^2` grid). FFT and direct evaluation agree to round-off (tests:
    :math:`10^{-12}` relative), also on anisotropic grids; both use the edge
    formula, so the independent checks are the closed forms, ``dblquad`` and a
    tensor Gauss rule on far cells (``tests/test_convolution.py``).

For :math:`s \\ge d` the kernel is not locally integrable: every absolutely
continuous measure has infinite interaction energy and the McKean-Vlasov
equation has no meaning; such ``s`` are rejected.

Evaluation
----------
``method="direct"``: dense matrix-vector product with :math:`A` (any mesh).
``method="fft"`` (uniform grids): zero-padded *linear* convolution of the
:math:`(2n-1)^d` offset table with :math:`\\rho |C|` by
``scipy.signal.fftconvolve(..., mode="valid")`` (not circular: the domain is
bounded), O(n log n). The two agree to round-off (tested to 1e-12 relative to
the largest value, on isotropic and anisotropic grids).

Symmetry
--------
The discrete interaction energy is :math:`\\tfrac12 \\sum_{j} |C_j| \\rho_j (A\\rho)_j
= \\tfrac12 \\rho^\\top K \\rho` with :math:`K_{ji} = |C_j| A_{ji}`. On uniform grids
:math:`K` is symmetric. On other meshes collocation makes it slightly
non-symmetric, so the direct operator uses the symmetric part
:math:`K \\leftarrow (K + K^\\top)/2`, :math:`A_{ji} = K_{ji}/|C_j|`; then
:math:`V_j + \\lambda (A\\rho)_j + \\beta^{-1}(\\log\\rho_j + 1)` is exactly the gradient
of the discrete free energy (divided by :math:`|C_j|`), which is what makes the
Scharfetter-Gummel steady state the discrete Gibbs fixed point and the
discrete free energy a Lyapunov function.

References
----------
paper 000, eq. (2.3), (B.10), (4.2), (E.4).
J. A. Carrillo, A. Chertock, Y. Huang, Commun. Comput. Phys. 17 (2015) 233-258.
particles_pde_reference.md, sec. 2.1 (c).
"""
from __future__ import annotations

import dataclasses

import numpy as np
import scipy.signal

from rieszflow.engine._checks import check_choice, check_int
from rieszflow.engine.energy.interaction import check_s
from rieszflow.solvers.mckean_vlasov.mesh import MeshDomain

__all__ = [
    "Convolution",
    "antiderivative_1d",
    "radial_primitive_2d",
    "triangle_apex_integral",
    "cell_integral_matrix",
    "offset_table",
    "make_convolution",
]

METHODS = ("auto", "direct", "fft")
_PANEL = 2.0  # largest u-length of one Gauss-Legendre panel of the edge integral (module docstring)
_TABLE_NODES = 24  # Gauss-Legendre nodes per panel in the 2-D offset table
_TABLE_CHUNK = 4096  # offsets evaluated per batch in the 2-D offset table (bounds the memory)


def antiderivative_1d(y, s):
    """Antiderivative :math:`G` of the 1-D kernel, :math:`G' = g_s`, :math:`G(0) = 0`.

    Parameters
    ----------
    y : array_like, float64, any shape
    s : float
        Riesz exponent, ``-2 < s < 1``.

    Returns
    -------
    ndarray, shape of ``y``
        :math:`y - y\\log|y|` (s = 0) or :math:`\\operatorname{sgn}(s)\\,\\operatorname{sign}(y)|y|^{1-s}/(1-s)`.

    Raises
    ------
    ValueError
        If ``s`` is outside ``-2 < s < 1`` (no antiderivative through 0 otherwise).

    References
    ----------
    particles_pde_reference.md, sec. 2.1 (c).
    """
    s = check_s(s, upper=1.0, what="antiderivative_1d")
    y = np.asarray(y, dtype=np.float64)
    ay = np.abs(y)
    if s == 0.0:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(ay > 0, y - y * np.log(np.where(ay > 0, ay, 1.0)), 0.0)
    return np.sign(s) * np.sign(y) * ay ** (1.0 - s) / (1.0 - s)


def radial_primitive_2d(R, s):
    """:math:`h(R) = \\int_0^R g_s(r)\\, r\\, dr` (the 2-D polar primitive).

    Parameters
    ----------
    R : array_like, float64, >= 0
    s : float
        Riesz exponent, ``-2 < s < 2``.

    Returns
    -------
    ndarray
        :math:`\\operatorname{sgn}(s) R^{2-s}/(2-s)` or :math:`-\\tfrac{R^2}{2}(\\log R - \\tfrac12)` (s = 0).

    Raises
    ------
    ValueError
        If ``s`` is outside ``-2 < s < 2``.

    References
    ----------
    paper 000, eq. (B.10) (the kernel); module docstring (polar decomposition).
    """
    s = check_s(s, upper=2.0, what="radial_primitive_2d")
    R = np.asarray(R, dtype=np.float64)
    if s == 0.0:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(R > 0, -0.5 * R * R * (np.log(np.where(R > 0, R, 1.0)) - 0.5), 0.0)
    return np.sign(s) * R ** (2.0 - s) / (2.0 - s)


def _gauss(q: int):
    x, w = np.polynomial.legendre.leggauss(q)
    return x, w


def triangle_apex_integral(x, a, b, s, quad_nodes: int = 24):
    """Signed integral of :math:`g_s(|y - x|)` over the triangle :math:`(x, a, b)`.

    Parameters
    ----------
    x, a, b : array_like, shape (..., 2), float64
        Apex (the kernel's singular point) and the two other vertices; the three
        arrays broadcast against each other.
    s : float
        Riesz exponent, ``-2 < s < 2``.
    quad_nodes : int, default 24
        Gauss-Legendre nodes per panel of the smooth ``u``-integral; the
        ``u``-interval is split into equal panels of length at most 2 (module
        docstring).

    Returns
    -------
    ndarray, shape (...)
        The integral, with the sign of the orientation of :math:`(x, a, b)`
        (positive counter-clockwise); 0 for a degenerate triangle.

    Raises
    ------
    ValueError
        If ``s`` is outside ``-2 < s < 2`` or ``quad_nodes < 4``. (Coordinates are
        not checked; a zero-length edge contributes 0, with a NumPy divide warning.)

    Notes
    -----
    Summing over the oriented edges of a polygon gives the polygon integral for
    any apex, inside or outside.

    References
    ----------
    Module docstring; particles_pde_reference.md sec. 2.1 (c) (self-cell closed form).
    """
    s = check_s(s, upper=2.0, what="triangle_apex_integral")
    quad_nodes = check_int("quad_nodes", quad_nodes, minimum=4)
    x = np.asarray(x, dtype=np.float64)
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    e = b - a
    L = np.sqrt(np.sum(e * e, axis=-1))
    ue = e / L[..., None]
    xa = a - x
    # 2 * signed area as xa x e (not xa x xb): no cancellation for an edge far from the apex
    cross = xa[..., 0] * e[..., 1] - xa[..., 1] * e[..., 0]
    p = np.abs(cross) / L  # distance from x to the edge's line
    t_a = np.sum(xa * ue, axis=-1)
    t_b = t_a + L
    ok = p > 1e-300
    ps = np.where(ok, p, 1.0)
    ya, yb = t_a / ps, t_b / ps
    u_a = np.arcsinh(ya)
    shape = u_a.shape
    # span = asinh(yb) - asinh(ya) without cancellation when ya, yb have one sign (far edges):
    # sinh(u_b - u_a) = (yb^2 - ya^2) / (yb sqrt(1 + ya^2) + ya sqrt(1 + yb^2)), yb - ya = L / p
    ca, cb = np.sqrt(1.0 + ya * ya), np.sqrt(1.0 + yb * yb)
    same = ya * yb > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        stable = np.arcsinh((L / ps) * (ya + yb) / np.where(same, yb * ca + ya * cb, 1.0))
    span = np.where(same, stable, np.arcsinh(yb) - u_a)
    u_a, ps, span = u_a.ravel(), ps.ravel(), span.ravel()
    # composite rule: equal panels of u-length <= _PANEL (module docstring, d = 2)
    n_panels = np.ones(span.shape, dtype=np.int64)
    finite = np.isfinite(span)
    n_panels[finite] = np.maximum(1, np.ceil(np.abs(span[finite]) / _PANEL)).astype(np.int64)
    nodes, weights = _gauss(quad_nodes)
    integral = np.empty(span.shape, dtype=np.float64)
    for m in np.unique(n_panels):
        sel = n_panels == m
        width = span[sel] / m  # panel width, (K,)
        mids = u_a[sel, None] + (np.arange(m) + 0.5) * width[:, None]  # (K, m)
        u = mids[..., None] + 0.5 * width[:, None, None] * nodes  # (K, m, q)
        ch = np.cosh(u)
        vals = radial_primitive_2d(ps[sel, None, None] * ch, s) / ch
        integral[sel] = 0.5 * width * np.einsum("kmq,q->k", vals, weights)
    return np.where(ok, np.sign(cross) * integral.reshape(shape), 0.0)


def _matrix_1d(domain: MeshDomain, s: float) -> np.ndarray:
    left, right = domain.cell_edges_1d()
    x = domain.centers[:, 0]
    return antiderivative_1d(x[:, None] - left[None, :], s) - antiderivative_1d(x[:, None] - right[None, :], s)


def _matrix_2d(domain: MeshDomain, s: float, quad_nodes: int, chunk: int = 32) -> np.ndarray:
    a, b, incidence = domain.faces_2d()
    n = domain.n_cells
    out = np.empty((n, n), dtype=np.float64)
    for start in range(0, n, chunk):
        stop = min(start + chunk, n)
        xs = domain.centers[start:stop, None, :]  # (B, 1, 2)
        T = triangle_apex_integral(xs, a[None], b[None], s, quad_nodes)  # (B, n_faces)
        out[start:stop] = np.asarray(incidence @ T.T).T  # cell integral = signed sum over its faces
    return out


def cell_integral_matrix(domain: MeshDomain, s, *, symmetrize: bool = True,
                         quad_nodes: int = 24) -> np.ndarray:
    """Dense matrix :math:`A_{ji} = \\int_{C_i} g_s(x_j - y)\\,dy` on any 1-D or 2-D mesh.

    Parameters
    ----------
    domain : MeshDomain
    s : float
        Riesz exponent, ``-2 < s < d``.
    symmetrize : bool, default True
        Replace :math:`K_{ji} = |C_j| A_{ji}` by its symmetric part (module
        docstring, "Symmetry"); a no-op up to round-off on uniform grids.
    quad_nodes : int, default 24
        Gauss-Legendre nodes per edge integral (d = 2 only).

    Returns
    -------
    ndarray, shape (n_cells, n_cells), float64
        :math:`(g_s * \\rho)(x_j) = (A\\rho)_j` for piecewise-constant :math:`\\rho`.
        Units: length^(d - s) (s != 0).

    Raises
    ------
    ValueError
        If ``s`` is out of range for the dimension.

    References
    ----------
    paper 000, eq. (E.4); particles_pde_reference.md sec. 2.1 (a), (c).
    """
    if not isinstance(domain, MeshDomain):
        raise TypeError(f"domain must be a MeshDomain, got {type(domain).__name__}")
    s = check_s(s, d=domain.d)
    quad_nodes = check_int("quad_nodes", quad_nodes, minimum=4)
    A = _matrix_1d(domain, s) if domain.d == 1 else _matrix_2d(domain, s, quad_nodes)
    if symmetrize:
        vol = domain.volumes
        K = vol[:, None] * A
        A = 0.5 * (K + K.T) / vol[:, None]
    return A


def offset_table(domain: MeshDomain, s) -> np.ndarray:
    """Exact cell averages :math:`W_k` of :math:`g_s` on the offset grid of a uniform mesh.

    Parameters
    ----------
    domain : MeshDomain
        A uniform grid (:func:`interval_mesh` or :func:`rectangle_mesh`).
    s : float
        Riesz exponent, ``-2 < s < d``.

    Returns
    -------
    ndarray
        d = 1: shape ``(2n - 1,)``, entry ``n - 1 + k`` is :math:`W_k`.
        d = 2: shape ``(2ny - 1, 2nx - 1)``, entry ``[ny - 1 + l, nx - 1 + k]`` is
        the average over the cell centred at ``(k hx, l hy)``.

    Raises
    ------
    ValueError
        If the domain is not a uniform grid or ``s`` is out of range.

    References
    ----------
    particles_pde_reference.md sec. 2.1 (b), (c).
    """
    if not isinstance(domain, MeshDomain) or not domain.is_uniform_grid:
        raise ValueError("offset_table needs a uniform grid MeshDomain (interval_mesh or rectangle_mesh)")
    s = check_s(s, d=domain.d)
    if domain.d == 1:
        (n,), (h,) = domain.grid_shape, domain.spacing
        k = np.arange(-(n - 1), n, dtype=np.float64)
        return (antiderivative_1d((k + 0.5) * h, s) - antiderivative_1d((k - 0.5) * h, s)) / h
    (nx, ny), (hx, hy) = domain.grid_shape, domain.spacing
    kx = np.arange(nx, dtype=np.float64)
    ky = np.arange(ny, dtype=np.float64)
    KX, KY = np.meshgrid(kx, ky)  # quadrant table, shape (ny, nx)
    KX, KY = KX.ravel(), KY.ravel()
    quad = np.empty(nx * ny, dtype=np.float64)
    origin = np.zeros(2)
    # every offset: polygon-edge formula around the origin, corners counter-clockwise
    for start in range(0, nx * ny, _TABLE_CHUNK):
        sl = slice(start, start + _TABLE_CHUNK)
        x0, x1 = (KX[sl] - 0.5) * hx, (KX[sl] + 0.5) * hx
        y0, y1 = (KY[sl] - 0.5) * hy, (KY[sl] + 0.5) * hy
        corners = [np.stack(c, axis=-1) for c in ((x0, y0), (x1, y0), (x1, y1), (x0, y1))]
        quad[sl] = sum(triangle_apex_integral(origin, corners[m], corners[(m + 1) % 4], s, _TABLE_NODES)
                       for m in range(4)) / (hx * hy)
    quad = quad.reshape(ny, nx)
    # unfold the quadrant by symmetry g(x, y) = g(|x|, |y|)
    full = np.empty((2 * ny - 1, 2 * nx - 1), dtype=np.float64)
    full[ny - 1:, nx - 1:] = quad
    full[ny - 1:, :nx] = quad[:, ::-1]
    full[:ny, nx - 1:] = quad[::-1, :]
    full[:ny, :nx] = quad[::-1, ::-1]
    return full


@dataclasses.dataclass(frozen=True, eq=False)
class Convolution:
    """The linear map :math:`\\rho \\mapsto (g_s * \\rho)(x_j)` on a mesh.

    Build with :func:`make_convolution`.

    Parameters
    ----------
    domain : MeshDomain
        The mesh.
    s : float
        Riesz exponent.
    method : {"direct", "fft"}
    table : ndarray
        ``"direct"``: the dense matrix ``A`` (n_cells, n_cells);
        ``"fft"``: the offset table of :func:`offset_table`.

    References
    ----------
    paper 000, eq. (E.4); particles_pde_reference.md sec. 2.1 (a)-(b).
    """

    domain: MeshDomain
    s: float
    method: str
    table: np.ndarray

    def __call__(self, rho) -> np.ndarray:
        """Potential :math:`(g_s * \\rho)(x_j)` at the cell centres.

        Parameters
        ----------
        rho : array_like, shape (n_cells,), float64
            Cell values of the density (per unit length/area).

        Returns
        -------
        ndarray, shape (n_cells,), float64

        Raises
        ------
        ValueError
            If ``rho`` has the wrong shape or non-finite entries.
        """
        rho = np.asarray(rho, dtype=np.float64)
        n = self.domain.n_cells
        if rho.shape != (n,):
            raise ValueError(f"rho must have shape ({n},), got {rho.shape}")
        if not np.isfinite(rho).all():
            raise ValueError("rho contains non-finite entries (NaN or inf)")
        if self.method == "direct":
            return self.table @ rho
        vol = self.domain.volumes
        if self.domain.d == 1:
            return scipy.signal.fftconvolve(self.table, rho * vol, mode="valid")
        nx, ny = self.domain.grid_shape
        out = scipy.signal.fftconvolve(self.table, (rho * vol).reshape(ny, nx), mode="valid")
        return out.reshape(-1)

    def matrix(self) -> np.ndarray:
        """Dense matrix ``A`` with ``self(rho) == A @ rho``.

        Returns
        -------
        ndarray, shape (n_cells, n_cells), float64
        """
        if self.method == "direct":
            return self.table
        vol = self.domain.volumes
        if self.domain.d == 1:
            (n,) = self.domain.grid_shape
            j = np.arange(n)
            return self.table[(n - 1) + j[:, None] - j[None, :]] * vol[None, :]
        nx, ny = self.domain.grid_shape
        ix = np.arange(nx * ny) % nx
        iy = np.arange(nx * ny) // nx
        return self.table[(ny - 1) + iy[:, None] - iy[None, :], (nx - 1) + ix[:, None] - ix[None, :]] * vol[None, :]


def make_convolution(domain: MeshDomain, s, method: str = "auto", *, quad_nodes: int = 24) -> Convolution:
    """Build the interaction operator of ``domain`` for the kernel :math:`g_s`.

    Parameters
    ----------
    domain : MeshDomain
    s : float
        Riesz exponent, ``-2 < s < d``.
    method : {"auto", "direct", "fft"}, default "auto"
        ``"auto"``: ``"fft"`` on uniform grids, ``"direct"`` otherwise.
    quad_nodes : int, default 24
        Gauss-Legendre nodes per edge integral of the direct 2-D matrix.

    Returns
    -------
    Convolution

    Raises
    ------
    ValueError
        If ``method`` is unknown, ``"fft"`` is asked on a non-uniform mesh, or
        ``s`` is out of range.

    References
    ----------
    paper 000, eq. (E.4); particles_pde_reference.md sec. 2.1.
    """
    if not isinstance(domain, MeshDomain):
        raise TypeError(f"domain must be a MeshDomain, got {type(domain).__name__}")
    check_choice("method", method, METHODS)
    s = check_s(s, d=domain.d)
    if method == "auto":
        method = "fft" if domain.is_uniform_grid else "direct"
    if method == "fft":
        if not domain.is_uniform_grid:
            raise ValueError(f"method='fft' needs a uniform grid; domain kind={domain.kind!r} "
                             f"(use method='direct')")
        return Convolution(domain, s, "fft", offset_table(domain, s))
    return Convolution(domain, s, "direct", cell_integral_matrix(domain, s, quad_nodes=quad_nodes))
