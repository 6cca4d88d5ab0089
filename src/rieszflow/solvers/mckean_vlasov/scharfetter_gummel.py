"""The implicit Scharfetter-Gummel system of :func:`solve_mckean_vlasov`, assembled directly.

FiPy's term algebra in :mod:`~rieszflow.solvers.mckean_vlasov.equation`,

    TransientTerm() == DiffusionTerm(coeff=1/beta) + ExponentialConvectionTerm(coeff=Veff.faceGrad)

*defines* the discretisation. Rebuilding it through FiPy's Python-level term
assembly costs far more than solving it (68x a bare SciPy solve at 200 cells,
issue 14), so this module writes the same matrix out once per mesh and only
refreshes the coefficients that change from sweep to sweep.

The system
----------
For cell :math:`i` with volume :math:`|C_i|` and an interior face :math:`f`
between cells :math:`1 = ` ``id1`` and :math:`2 = ` ``id2`` (FiPy's orientation),
with face area :math:`A_f` and centre distance :math:`d_f` (FiPy's
``_faceAreas`` and ``_cellDistances``),

.. math::

    D_f = \\frac{A_f}{\\beta d_f}, \\qquad
    c_f = \\frac{A_f}{d_f}\\,(U_2 - U_1), \\qquad
    P_f = -\\frac{c_f}{D_f},

where :math:`U` is ``Veff`` (:math:`c_f` is FiPy's ``Veff.faceGrad`` projected on
the oriented face area, :math:`P_f` its Peclet number). With FiPy's exponential
weight :math:`\\alpha(P) = ((P-1)e^P + 1)/(P(e^P - 1))`, taken as 1/2 for
:math:`|P| \\le 10^{-3}` and :math:`(P-1)/P` for :math:`P > 101` exactly as
``fipy.terms.exponentialConvectionTerm`` does, the implicit-Euler system
:math:`M\\rho^{n+1} = |C|\\rho^n/\\Delta t` has

.. math::

    M = \\operatorname{diag}(|C|/\\Delta t) + \\sum_f
    \\begin{pmatrix} D_f - c_f\\alpha_f & -D_f - c_f(1-\\alpha_f) \\\\
                     -D_f + c_f\\alpha_f & D_f + c_f(1-\\alpha_f) \\end{pmatrix}
    \\text{ on rows/columns } (1, 2).

Every face block has zero column sums, so :math:`\\sum_i |C_i|\\rho_i` is conserved
up to the solve's round-off, and exterior faces carry no flux (FiPy's natural
no-flux boundary: no term, no constraint). Only the diagonal :math:`|C|/\\Delta t`
and the face blocks change between sweeps; the sparsity pattern (tridiagonal in
1-D, stored banded; one row per cell plus two entries per interior face
otherwise, CSR) is built once.

Linear solves mimic FiPy's ``LinearLUSolver`` with the "RHS" criterion: starting
from the current iterate, the solution is corrected with an LU factorisation
until :math:`\\|M x - b\\|_2 \\le` ``tolerance`` :math:`\\|b\\|_2` (at most 10
corrections), so both backends stop on the same test. LAPACK ``gttrf``/``gttrs``
factor and solve the 1-D tridiagonal systems; SciPy's SuperLU (``splu``) the others,
with the symmetric ordering of :math:`M + M^T` (the pattern is symmetric, and
:math:`M` is diagonally dominant by columns, so the diagonal pivots are kept).

References
----------
paper 000, eq. (4.4)-(4.5); D. L. Scharfetter and H. K. Gummel, IEEE Trans.
Electron Devices 16 (1969) 64-77 (the exponential flux); FiPy 4,
``fipy.terms.exponentialConvectionTerm`` and ``fipy.terms.abstractDiffusionTerm``
(the coefficients reproduced here).
"""
from __future__ import annotations

import numpy as np
import scipy.linalg.lapack as lapack
import scipy.sparse as sp
from scipy.sparse.linalg import splu

from rieszflow.engine._checks import check_real

__all__ = ["ScharfetterGummelOperator", "exponential_weight"]

_P_SMALL, _P_LARGE = 1e-3, 101.0  # FiPy's thresholds in _ExponentialConvectionTermAlpha
_MAX_CORRECTIONS = 10             # FiPy's LinearLUSolver: min(iterations, 10)


def exponential_weight(P):
    """FiPy's exponential-scheme weight :math:`\\alpha(P)` of the upwind cell.

    Parameters
    ----------
    P : array_like, float64
        Face Peclet numbers :math:`P_f = -c_f / D_f`.

    Returns
    -------
    ndarray, shape of ``P``, float64
        :math:`\\alpha = ((P-1)e^P + 1)/(P(e^P-1))`; 1/2 where :math:`|P| \\le 10^{-3}`,
        :math:`(P-1)/P` where :math:`P > 101` (FiPy's cut-offs, reproduced exactly).

    References
    ----------
    FiPy 4, ``fipy.terms.exponentialConvectionTerm._ExponentialConvectionTermAlpha``;
    Scharfetter and Gummel (1969).
    """
    P = np.asarray(P, dtype=np.float64)
    small = np.abs(P) <= _P_SMALL
    large = P > _P_LARGE
    special = np.flatnonzero(small | large)
    Pm = P
    if special.size:
        Pm = P.copy()
        Pm[special] = 1.0                              # keep exp() finite where the formula is unused
    e = np.exp(Pm)
    alpha = ((Pm - 1.0) * e + 1.0) / (Pm * (e - 1.0))
    if special.size:
        alpha[large] = (P[large] - 1.0) / P[large]
        alpha[small] = 0.5
    return alpha


class ScharfetterGummelOperator:
    """The implicit Euler matrix of the Scharfetter-Gummel McKean-Vlasov step on a FiPy mesh.

    Built once per mesh and ``beta``; :meth:`matrix_data` refreshes the coefficients
    for a new ``Veff`` and step, :meth:`solve` solves with FiPy's stopping rule.

    Parameters
    ----------
    domain : MeshDomain
        The mesh (any FiPy mesh: interval, rectangle, disk, wrapped meshes).
    beta : float
        Inverse temperature, finite and ``> 0``.

    Attributes
    ----------
    banded : bool
        True when the system is tridiagonal and stored banded (1-D meshes whose
        interior faces join cells ``i`` and ``i + 1``).

    Raises
    ------
    ValueError
        If ``beta`` is not finite and positive.

    References
    ----------
    paper 000, eq. (4.4)-(4.5); the module docstring (the system).
    """

    def __init__(self, domain, beta):
        self.beta = check_real("beta", beta, positive=True)
        mesh = domain.mesh
        interior = np.asarray(mesh.interiorFaces, dtype=bool)
        id1, id2 = (np.asarray(ids)[interior] for ids in mesh._adjacentCellIDs)
        self.id1, self.id2 = id1.astype(np.intp), id2.astype(np.intp)
        self.geom = (np.asarray(mesh._faceAreas, dtype=np.float64)
                     / np.asarray(mesh._cellDistances, dtype=np.float64))[interior]  # A_f / d_f
        self.diffusion = self.geom / self.beta                                          # D_f
        self.volumes = np.asarray(domain.volumes, dtype=np.float64)
        n = self.n = self.volumes.size
        cells = np.arange(n)
        rows = np.concatenate([cells, self.id1, self.id1, self.id2, self.id2])
        cols = np.concatenate([cells, self.id1, self.id2, self.id1, self.id2])
        self.banded = domain.d == 1 and bool(np.all(np.abs(self.id1 - self.id2) == 1))
        # FiPy's Grid1D: face k + 1 joins cells k (id1) and k + 1 (id2): diagonals without scatter
        self._chain = (self.banded and self.id1.size == n - 1 and bool(np.array_equal(self.id1, cells[:-1]))
                       and bool(np.array_equal(self.id2, cells[1:])))
        if self.banded:
            # LAPACK gt* storage: the three diagonals concatenated [sub (n-1) | diag (n) | super (n-1)]
            off = cols - rows
            self._pos = np.where(off == 0, (n - 1) + rows, np.where(off < 0, cols, (2 * n - 1) + rows))
            self._size = 3 * n - 2
        else:
            key = rows * n + cols
            uniq = np.unique(key)
            self._pos = np.searchsorted(uniq, key)
            self._size = uniq.size
            self._indices = (uniq % n).astype(np.int32)
            self._indptr = np.searchsorted(uniq // n, np.arange(n + 1)).astype(np.int32)

    def face_blocks(self, veff):
        """The four entries of every interior face block for a given ``Veff``.

        Parameters
        ----------
        veff : ndarray, shape (n_cells,), float64
            :math:`U = V + \\lambda g_s * \\rho` at the cell centres.

        Returns
        -------
        a11, a12, a21, a22 : ndarray, shape (n_interior_faces,), float64
            Entries at (id1, id1), (id1, id2), (id2, id1), (id2, id2) (module docstring).
        """
        if self._chain:
            c = self.geom * np.diff(veff)
        else:
            c = self.geom * (veff[self.id2] - veff[self.id1])
        alpha = exponential_weight(-c / self.diffusion)
        ca = c * alpha
        cb = c - ca                                   # c (1 - alpha)
        D = self.diffusion
        return D - ca, -D - cb, ca - D, D + cb

    def matrix_data(self, veff, dt):
        """Values of the system matrix in the fixed storage (banded or CSR data).

        Parameters
        ----------
        veff : ndarray, shape (n_cells,), float64
            Effective potential at the cell centres.
        dt : float
            Implicit Euler step, ``> 0``.

        Returns
        -------
        ndarray, float64
            ``[sub | diag | super]`` diagonals (banded) or the CSR ``data`` array.
        """
        a11, a12, a21, a22 = self.face_blocks(veff)
        if self._chain:                                # [sub | diag | super] written directly
            n = self.n
            out = np.empty(3 * n - 2)
            out[:n - 1] = a21
            diag = out[n - 1:2 * n - 1]
            np.divide(self.volumes, dt, out=diag)
            diag[:-1] += a11
            diag[1:] += a22
            out[2 * n - 1:] = a12
            return out
        vals = np.concatenate([self.volumes / dt, a11, a12, a21, a22])
        return np.bincount(self._pos, weights=vals, minlength=self._size)

    def matrix(self, veff, dt):
        """The system matrix :math:`M` as a SciPy CSR matrix (for inspection and residuals).

        Parameters
        ----------
        veff : ndarray, shape (n_cells,), float64
            Effective potential at the cell centres.
        dt : float
            Implicit Euler step, ``> 0``.

        Returns
        -------
        scipy.sparse.csr_matrix, shape (n_cells, n_cells)
        """
        data = self.matrix_data(veff, dt)
        n = self.n
        if self.banded:
            return sp.diags([data[:n - 1], data[n - 1:2 * n - 1], data[2 * n - 1:]], [-1, 0, 1],
                            shape=(n, n), format="csr")
        return sp.csr_matrix((data, self._indices, self._indptr), shape=(n, n))

    def rhs(self, rho_old, dt):
        """Right-hand side :math:`b = |C|\\rho^n/\\Delta t`.

        Parameters
        ----------
        rho_old : ndarray, shape (n_cells,)
            Density at the previous time level.
        dt : float
            Implicit Euler step.

        Returns
        -------
        ndarray, shape (n_cells,), float64
        """
        return self.volumes * rho_old / dt

    def _matvec(self, data, x):
        if self.banded:
            n = self.n
            y = data[n - 1:2 * n - 1] * x
            y[1:] += data[:n - 1] * x[:-1]
            y[:-1] += data[2 * n - 1:] * x[1:]
            return y
        return sp.csr_matrix((data, self._indices, self._indptr), shape=(self.n, self.n)) @ x

    def solve(self, veff, dt, rho_old, x0, tolerance):
        """One implicit step :math:`M(U)\\rho = |C|\\rho^n/\\Delta t`, FiPy's "RHS" stopping rule.

        Parameters
        ----------
        veff : ndarray, shape (n_cells,)
            Effective potential frozen for this sweep.
        dt : float
            Implicit Euler step, ``> 0``.
        rho_old : ndarray, shape (n_cells,)
            Density at the previous time level.
        x0 : ndarray, shape (n_cells,)
            Starting iterate (FiPy starts from the variable's current value).
        tolerance : float
            Stop when :math:`\\|Mx - b\\|_2 \\le` ``tolerance`` :math:`\\|b\\|_2`.

        Returns
        -------
        ndarray, shape (n_cells,), float64
            The corrected iterate (``x0`` itself if it already meets the test).

        Raises
        ------
        numpy.linalg.LinAlgError
            If the matrix is singular.
        """
        data = self.matrix_data(veff, dt)
        b = self.rhs(rho_old, dt)
        x = np.array(x0, dtype=np.float64)
        goal = tolerance * np.sqrt(np.dot(b, b))
        lu = None
        for _ in range(_MAX_CORRECTIONS):
            r = self._matvec(data, x) - b
            if np.sqrt(np.dot(r, r)) <= goal:
                break
            if lu is None:
                lu = self._factor(data)
            x -= lu(r)
        return x

    def _factor(self, data):
        n = self.n
        if self.banded:
            dl, d, du, du2, ipiv, info = lapack.dgttrf(data[:n - 1], data[n - 1:2 * n - 1], data[2 * n - 1:])
            if info != 0:
                raise np.linalg.LinAlgError(f"Scharfetter-Gummel matrix is singular (dgttrf info={info})")

            def solve(r):
                y, info_s = lapack.dgttrs(dl, d, du, du2, ipiv, r)
                return y
            return solve
        # M is an M-matrix, diagonally dominant by columns: its diagonal pivots need no row
        # exchanges, and a symmetric fill-reducing ordering of M + M^T suits its symmetric pattern
        lu = splu(sp.csc_matrix(sp.csr_matrix((data, self._indices, self._indptr), shape=(n, n))),
                  permc_spec="MMD_AT_PLUS_A", options={"SymmetricMode": True})
        return lu.solve

    def backward_error(self, veff, dt, rho_old, rho):
        """Normwise backward error :math:`\\|M\\rho - b\\|_\\infty / (\\|M\\|_\\infty\\|\\rho\\|_\\infty + \\|b\\|_\\infty)`.

        Parameters
        ----------
        veff : ndarray, shape (n_cells,)
            Effective potential of the accepted state.
        dt : float
            The step.
        rho_old, rho : ndarray, shape (n_cells,)
            Previous and accepted density.

        Returns
        -------
        float
        """
        data = self.matrix_data(veff, dt)
        b = self.rhs(rho_old, dt)
        r = self._matvec(data, rho) - b
        norm_m = float(np.max(self._matvec(np.abs(data), np.ones(self.n))))
        return float(np.max(np.abs(r)) / (norm_m * np.max(np.abs(rho)) + np.max(np.abs(b))))
