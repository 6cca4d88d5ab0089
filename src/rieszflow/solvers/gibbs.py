"""Self-consistent Gibbs densities, the free energy, and the large-deviation rate functions.

Gibbs fixed point
-----------------
The stationary states of the McKean-Vlasov equation (paper 000, Thm 1, the
display after eq. (4.5)) are the self-consistent Gibbs densities

.. math::

    \\rho = \\frac{1}{Z}\\exp\\{-\\beta[V + \\lambda\\, g_s * \\rho]\\}, \\qquad
    Z = \\int_\\Omega \\exp\\{-\\beta[V + \\lambda\\, g_s * \\rho]\\},

the critical points of :math:`\\mathcal{F}_\\beta = \\mathcal{E}_s + \\beta^{-1}\\mathrm{Ent}`
under unit mass. On a mesh, with the interaction operator of
:mod:`~rieszflow.solvers.mckean_vlasov.convolution`, :func:`gibbs_density` solves the
discrete equation :math:`\\rho_j = e^{-\\beta U_j}/Z`, :math:`U = V + \\lambda A\\rho`,
:math:`Z = \\sum_j |C_j| e^{-\\beta U_j}` (the exact steady state of the
Scharfetter-Gummel PDE scheme on the same mesh). The unknown is the effective
potential :math:`U`, and :math:`F(U) = V + \\lambda A\\rho(U) - U = 0` is solved by

``"newton"`` (default up to 4000 cells)
    damped Newton with the dense Jacobian
    :math:`F'(U) = -(I + \\lambda\\beta A P)`, :math:`P = \\mathrm{diag}(\\rho) - \\rho(\\rho\\circ|C|)^\\top`
    (the derivative of the normalised Boltzmann factor). :math:`I + \\lambda\\beta AP` is
    similar to :math:`I + \\lambda\\beta P^{1/2}AP^{1/2}`, so it is invertible whenever
    :math:`A` is positive semi-definite on mass-zero vectors, and the Newton
    direction is a descent direction of :math:`\\|F\\|^2`; Armijo backtracking on
    :math:`\\|F\\|^2` makes the iteration globally convergent. It handles the strongly
    interacting, low-temperature regime (:math:`\\beta\\lambda \\sim 10^3`) where
    fixed-point iterations fail.
``"anderson"``
    the fixed-point map :math:`G(U) = V + \\lambda A\\rho(U)` with Anderson mixing
    (:class:`~rieszflow.solvers.mckean_vlasov.equation.AndersonMixer`); matrix-free (FFT
    convolution), for large grids and moderate :math:`\\beta\\lambda`.
``"newton_krylov"``
    ``scipy.optimize.newton_krylov`` (matrix-free, LGMRES).

The residual is :math:`\\beta\\|F(U)\\|_\\infty` (a relative error of the density).

When the interaction kernel is positive definite on mass-zero perturbations
(Riesz :math:`0 < s < d`, the log kernel on bounded sets, :math:`-2 < s < 0`),
:math:`\\mathcal{F}_\\beta` is strictly convex and the fixed point is its unique
minimiser; otherwise it may be a local one.

Large deviations (paper 000, Thm 2 / Thm 6)
-------------------------------------------
Let the particles have the law :math:`P_{N,\\beta_N} \\propto \\exp(-\\beta_N\\mathcal{H}_N)`
with the paper's intensive Hamiltonian
:math:`\\mathcal{H}_N = \\frac1N\\sum_k V(\\omega_k) + \\frac{\\lambda}{2N(N-1)}\\sum_{k\\ne l} g_s`
(eq. (2.2), (E.7)), equivalently :math:`\\exp(-\\frac{\\beta_N}{N} H_N)` with the
mean-field Hamiltonian :math:`H_N = \\sum_i V + \\frac{\\lambda}{2N}\\sum_{i\\ne j} g_s`
of the PDE (up to :math:`N/(N-1)` on the interaction).

``regime="fixed_beta"``: :math:`\\beta_N = \\beta N` (the stationary law of the
Langevin dynamics whose mean-field limit is the PDE with this :math:`\\beta`).
Speed :math:`r_N = N`, rate

.. math::

    I(\\mu) = \\beta\\,[\\mathcal{F}_\\beta(\\mu) - \\inf\\mathcal{F}_\\beta]
    = \\beta\\mathcal{E}_s(\\mu) + \\mathrm{Ent}(\\mu|\\ell) - \\inf\\{\\cdots\\};

paper eq. (4.6) is the case :math:`\\beta = 1` (":math:`\\beta_N/N \\to 1`").
``regime="low_temperature"``: :math:`\\beta_N/N \\to \\infty`. Speed :math:`r_N = \\beta_N`, rate

.. math::

    J(\\mu) = \\mathcal{E}_s(\\mu) - \\min\\mathcal{E}_s

(paper eq. (4.7)). With :math:`\\beta_N = \\beta N^2` (i.e. :math:`\\exp(-\\beta N H_N)`),
:math:`P(\\mu_N \\approx \\mu) \\approx \\exp(-\\beta N^2 J(\\mu))`: speed :math:`N^2` with rate
:math:`\\beta J`. particles_pde_reference.md sec. 3.5 writes
:math:`(\\beta/2)[I_V - \\min I_V]` at speed :math:`N^2`; the 1/2 belongs to the Dyson
convention of Ben Arous-Guionnet (density :math:`\\propto|\\Delta|^\\beta e^{-N\\frac\\beta2\\sum V}`),
not to :math:`\\exp(-\\beta N H_N)`. :func:`rate_function` returns :math:`J` and the caller
multiplies by the speed of its own normalisation.

Notes on Thm 2 as printed: it assumes :math:`s > d`, for which every measure with
a density has infinite Riesz energy (the rate would be trivial); the rate
functions here are for locally integrable kernels, :math:`-2 < s < d`. In
Thm 6 the external term of :math:`\\mathcal{E}_s` is printed as
:math:`\\int\\phi_\\omega(x_i)\\phi_\\omega(x_j)\\,d\\mu`; it should be
:math:`\\int V_{\\mathcal D}\\,d\\mu` with :math:`V_{\\mathcal D}` of eq. (4.1).

Measures given as particles are coarse-grained to the mesh by
:func:`empirical_density` (cell histogram). The rate of the histogram is finite
while that of the atomic :math:`\\mu_N` is :math:`+\\infty` at fixed :math:`\\beta`; by
the contraction principle the histogram rate is the rate of the coarse-grained
observable.

References
----------
paper 000, Thm 1 (display after (4.5)), Thm 2 (eq. (4.6)-(4.7)), App. E (E.7), Thm 6.
particles_pde_reference.md sec. 3.5.
G. Ben Arous, A. Guionnet, Probab. Theory Relat. Fields 108 (1997) 517-542.
D. Chafaï, N. Gozlan, P.-A. Zitt, Ann. Appl. Probab. 24 (2014) 2371-2413.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import scipy.optimize

from rieszflow.engine._checks import check_choice, check_int, check_real
from rieszflow.solvers.mckean_vlasov.equation import AndersonMixer, MeanFieldProblem
from rieszflow.solvers.mckean_vlasov.mesh import MeshDomain
from rieszflow.engine._checks import check_points
from rieszflow.solvers.equilibrium import equilibrium_on_mesh
from rieszflow.solvers.mckean_vlasov.equation import _cell_values

__all__ = [
    "GibbsResult",
    "TiltedResult",
    "empirical_density",
    "free_energy",
    "gibbs_density",
    "rate_function",
    "rate_infimum",
]

GIBBS_METHODS = ("auto", "newton", "anderson", "newton_krylov")
_NEWTON_MAX_CELLS = 4000  # dense Newton (O(n^3) per iteration) up to this many cells
REGIMES = ("fixed_beta", "low_temperature")


def _check_problem(problem, *, finite_beta=True) -> MeanFieldProblem:
    if not isinstance(problem, MeanFieldProblem):
        raise TypeError(f"problem must be a MeanFieldProblem, got {type(problem).__name__}")
    if finite_beta and not math.isfinite(problem.beta):
        raise ValueError("this function needs a finite beta; at beta=inf use solvers.equilibrium")
    return problem


def free_energy(problem: MeanFieldProblem, rho) -> float:
    """Discrete free energy :math:`\\mathcal{F}_\\beta = \\mathcal{E}_s + \\beta^{-1}\\int\\rho\\log\\rho`.

    :math:`\\mathcal{F}_\\beta(\\rho) = \\int V\\rho + \\frac\\lambda2\\iint g_s\\rho\\rho
    + \\beta^{-1}\\int\\rho\\log\\rho`, evaluated with the mesh quadrature.

    Parameters
    ----------
    problem : MeanFieldProblem
        Finite ``beta``.
    rho : array_like, shape (n_cells,)
        Cell densities, ``>= 0``.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        If ``beta`` is infinite or ``rho`` is not a valid density.

    References
    ----------
    paper 000, eq. (4.2) and Thm 1.
    """
    return _check_problem(problem).free_energy(rho)


@dataclasses.dataclass(frozen=True, eq=False)
class GibbsResult:
    """A self-consistent Gibbs density and its convergence report.

    Parameters
    ----------
    rho : ndarray, shape (n_cells,)
        :math:`e^{-\\beta U}/Z` (unit mass).
    potential : ndarray, shape (n_cells,)
        :math:`U = V + \\lambda g_s * \\rho` at the returned ``rho``.
    free_energy : float
        :math:`\\mathcal{F}_\\beta(\\rho)`.
    log_partition : float
        :math:`\\log Z` with :math:`Z = \\sum_j |C_j| e^{-\\beta U_j}`.
    iterations : int
        Evaluations of the map :math:`G`.
    residual_history : ndarray, shape (iterations,)
        :math:`\\beta\\|G(U_k) - U_k\\|_\\infty` at each iterate (empty when ``lam == 0``).
    converged : bool
        Final residual ``<= tol`` (True when ``lam == 0``: the closed form is exact).
    method : str
        The method used (``"auto"`` resolved to ``"newton"`` or ``"anderson"``, except when
        ``lam == 0``, where the argument is returned unchanged).

    References
    ----------
    paper 000, Thm 1 (display after (4.5)).
    """

    rho: np.ndarray
    potential: np.ndarray
    free_energy: float
    log_partition: float
    iterations: int
    residual_history: np.ndarray
    converged: bool
    method: str

    @property
    def residual(self) -> float:
        """Final residual :math:`\\beta\\|G(U) - U\\|_\\infty` (the last entry of ``residual_history``).

        ``0.0`` when no iteration was made, which happens only for ``lam == 0``: then
        :math:`G(U) = V` for every U, so :math:`e^{-\\beta V}/Z` is the fixed point and its
        residual is exactly 0.
        """
        return float(self.residual_history[-1]) if self.residual_history.size else 0.0


def _boltzmann(U, beta, vol):
    """rho = exp(-beta U)/Z and log Z, overflow-safe."""
    m = U.min()
    w = np.exp(-beta * (U - m))
    z = float(np.dot(vol, w))
    return w / z, math.log(z) - beta * m


def gibbs_density(problem: MeanFieldProblem, *, rho0=None, method: str = "auto", tol: float = 1e-11,
                  max_iter: int = 500, memory: int = 8, mixing: float = 0.5) -> GibbsResult:
    """Solve :math:`\\rho = e^{-\\beta(V + \\lambda g_s*\\rho)}/Z` on the problem's mesh.

    Parameters
    ----------
    problem : MeanFieldProblem
        Finite ``beta``.
    rho0 : array_like, shape (n_cells,), optional
        Initial density (default: :math:`e^{-\\beta V}/Z`).
    method : {"auto", "newton", "anderson", "newton_krylov"}, default "auto"
        See the module docstring; ``"auto"`` is ``"newton"`` up to 4000 cells and
        ``"anderson"`` above.
    tol : float, default 1e-11
        Stop when :math:`\\beta\\|G(U) - U\\|_\\infty \\le` ``tol``.
    max_iter : int, default 500
        Cap on iterations (never an unbounded loop); Newton also caps its line
        search at 50 halvings.
    memory : int, default 8
        Anderson memory.
    mixing : float, default 0.5
        Anderson damping in (0, 1].

    Returns
    -------
    GibbsResult
        With ``converged=False`` (and the last iterate) if ``max_iter`` is reached.

    Raises
    ------
    ValueError
        On infinite ``beta``, an unknown ``method`` or invalid parameters.

    References
    ----------
    paper 000, Thm 1 (display after (4.5)).
    """
    problem = _check_problem(problem)
    check_choice("method", method, GIBBS_METHODS)
    tol = check_real("tol", tol, positive=True)
    max_iter = check_int("max_iter", max_iter, minimum=1)
    vol = problem.domain.volumes
    beta = problem.beta

    def G(U):
        rho, _ = _boltzmann(U, beta, vol)
        return problem.effective_potential(rho)

    if rho0 is None:
        U = problem.V.copy()
        if problem.lam > 0:
            U = G(U)
    else:
        U = problem.effective_potential(problem.check_density(rho0, "rho0"))
    history = []
    if problem.lam == 0:
        rho, logz = _boltzmann(problem.V, beta, vol)
        return GibbsResult(rho, problem.V.copy(), problem.free_energy(rho), logz, 0, np.zeros(0),
                           True, method)
    if method == "auto":
        method = "newton" if problem.domain.n_cells <= _NEWTON_MAX_CELLS else "anderson"
    if method == "newton":
        A = problem.convolution.matrix()
        lam = problem.lam

        def F(U):
            rho, _ = _boltzmann(U, beta, vol)
            return rho, problem.V + lam * (A @ rho) - U

        rho, Fv = F(U)
        phi = float(np.dot(vol, Fv * Fv))
        eye = np.eye(U.size)
        for _ in range(max_iter):
            res = beta * float(np.max(np.abs(Fv)))
            history.append(res)
            if res <= tol:
                break
            # F'(U) = -(I + lam beta A P), P = diag(rho) - rho (rho*vol)^T
            Arho = A @ rho
            J = eye + (lam * beta) * (A * rho[None, :] - np.outer(Arho, rho * vol))
            delta = np.linalg.solve(J, Fv)
            t = 1.0
            for _halving in range(50):
                rho_t, F_t = F(U + t * delta)
                phi_t = float(np.dot(vol, F_t * F_t))
                if phi_t <= (1.0 - 1e-4 * t) * phi:
                    break
                t *= 0.5
            U = U + t * delta
            rho, Fv, phi = rho_t, F_t, phi_t
        else:
            history.append(beta * float(np.max(np.abs(Fv))))
    elif method == "anderson":
        mixer = AndersonMixer(memory, mixing, weights=vol)
        for _ in range(max_iter):
            gU = G(U)
            res = beta * float(np.max(np.abs(gU - U)))
            history.append(res)
            if res <= tol:
                break
            U = mixer.update(U, gU)
    else:
        def F(U):
            r = G(U) - U
            history.append(beta * float(np.max(np.abs(r))))
            return r

        try:
            U = scipy.optimize.newton_krylov(F, U, f_tol=tol / beta, maxiter=max_iter, method="lgmres")
        except scipy.optimize.NoConvergence as e:
            U = np.asarray(e.args[0]) if e.args else U
        history.append(beta * float(np.max(np.abs(G(U) - U))))
    # the returned density is exp(-beta U)/Z of the last iterate U (residual = history[-1]);
    # the returned potential is recomputed from it
    rho, logz = _boltzmann(U, beta, vol)
    U = problem.effective_potential(rho)
    return GibbsResult(rho=rho, potential=U, free_energy=problem.free_energy(rho), log_partition=logz,
                       iterations=len(history), residual_history=np.asarray(history),
                       converged=bool(history[-1] <= tol), method=method)


# ------------------------------------------------------------------------ particles -> mesh

def _locate_2d(domain: MeshDomain, pts: np.ndarray) -> np.ndarray:
    """Index of the (convex) cell containing each point, -1 if none."""
    from scipy.spatial import cKDTree

    a, b, inc = domain.faces_2d()
    inc = inc.tocsr()
    n = domain.n_cells
    k = min(12, n)
    _, cand = cKDTree(domain.centers).query(pts, k=k)
    cand = np.atleast_2d(cand).reshape(pts.shape[0], k)
    owner = np.full(pts.shape[0], -1, dtype=np.int64)
    for col in range(k):
        todo = owner < 0
        if not todo.any():
            break
        cells = cand[todo, col]
        p = pts[todo]
        inside = np.ones(cells.size, dtype=bool)
        # every face of the candidate cell must see the point on its inner side
        width = np.diff(inc.indptr)
        for f_slot in range(width.max()):
            has = f_slot < width[cells]
            idx = inc.indptr[cells[has]] + f_slot
            face = inc.indices[idx]
            sgn = inc.data[idx]
            fa, fb = a[face], b[face]
            # counter-clockwise traversal (sgn>0: a->b) keeps the interior on the left
            e = (fb - fa) * sgn[:, None]
            start = np.where(sgn[:, None] > 0, fa, fb)
            cross = e[:, 0] * (p[has, 1] - start[:, 1]) - e[:, 1] * (p[has, 0] - start[:, 0])
            scale = np.abs(e).sum(axis=1) * 1e-12
            sub = inside[has]
            sub &= cross >= -scale
            inside[has] = sub
        hit = np.nonzero(todo)[0][inside]
        owner[hit] = cells[inside]
    return owner


def empirical_density(domain: MeshDomain, omega, *, outside: str = "raise") -> np.ndarray:
    """Cell histogram of particles: :math:`\\rho_j = \\#\\{k: \\omega_k \\in C_j\\}/(N|C_j|)`.

    Parameters
    ----------
    domain : MeshDomain
    omega : array_like, shape (N, d)
        Particle positions, ``d == domain.d``.
    outside : {"raise", "nearest"}, default "raise"
        What to do with particles outside every cell: raise, or assign them to
        the cell with the nearest centre (e.g. the thin gap between a disk and
        its inscribed polygon mesh). Their number is in the error message.

    Returns
    -------
    ndarray, shape (n_cells,), float64
        A unit-mass density.

    Raises
    ------
    ValueError
        On a wrong shape, non-finite positions, or particles outside the mesh
        with ``outside="raise"``.

    Notes
    -----
    The histogram is the coarse-graining of :math:`\\mu_N` onto the mesh
    (module docstring); it is unbiased for cell masses, which is the quantity
    compared with PDE cell averages.

    References
    ----------
    paper 000, eq. (B.5) (empirical measure); particles_pde_reference.md sec. 4.1 (KDE vs histogram).
    """
    check_choice("outside", outside, ("raise", "nearest"))
    pts = np.asarray(check_points("omega", omega, d=domain.d), dtype=np.float64)
    if domain.d == 1:
        left, right = domain.cell_edges_1d()
        order = np.argsort(left)
        edges = np.append(left[order], right[order][-1])
        j = np.searchsorted(edges, pts[:, 0], side="right") - 1
        j = np.where(pts[:, 0] == edges[-1], edges.size - 2, j)
        inside = (j >= 0) & (j < edges.size - 1)
        owner = np.where(inside, order[np.clip(j, 0, edges.size - 2)], -1)
    elif domain.is_uniform_grid:
        (nx, ny), (hx, hy), (x0, y0) = domain.grid_shape, domain.spacing, domain.origin
        ix = np.floor((pts[:, 0] - x0) / hx).astype(np.int64)
        iy = np.floor((pts[:, 1] - y0) / hy).astype(np.int64)
        ix = np.where(np.isclose(pts[:, 0], x0 + nx * hx, rtol=0, atol=1e-12 * hx), nx - 1, ix)
        iy = np.where(np.isclose(pts[:, 1], y0 + ny * hy, rtol=0, atol=1e-12 * hy), ny - 1, iy)
        inside = (ix >= 0) & (ix < nx) & (iy >= 0) & (iy < ny)
        owner = np.where(inside, ix + nx * iy, -1)
    else:
        owner = _locate_2d(domain, pts)
    lost = owner < 0
    if lost.any():
        if outside == "raise":
            raise ValueError(f"empirical_density: {int(lost.sum())} of {pts.shape[0]} particles lie "
                             f"outside the mesh (kind={domain.kind!r}); pass outside='nearest' to assign "
                             f"them to the nearest cell")
        from scipy.spatial import cKDTree

        owner[lost] = cKDTree(domain.centers).query(pts[lost])[1]
    counts = np.bincount(owner, minlength=domain.n_cells).astype(np.float64)
    return counts / (pts.shape[0] * domain.volumes)


# --------------------------------------------------------------------------- rate functions

def _as_density(problem, mu, name="mu"):
    mu = np.asarray(mu, dtype=np.float64)
    if mu.ndim == 2:
        return empirical_density(problem.domain, mu)
    rho = problem.check_density(mu, name)
    m = problem.mass(rho)
    if abs(m - 1.0) > 1e-8:
        raise ValueError(f"{name} must have unit mass (sum |C_j| rho_j = 1), got {m!r}")
    return rho


def rate_function(problem: MeanFieldProblem, mu, *, regime: str = "fixed_beta", reference=None) -> float:
    """Large-deviation rate of the empirical measure at ``mu`` (paper 000, Thm 2).

    Parameters
    ----------
    problem : MeanFieldProblem
        Mesh, ``V``, ``s``, ``lam`` and (for ``"fixed_beta"``) finite ``beta``.
    mu : array_like
        Cell densities, shape ``(n_cells,)``, unit mass; or particles, shape
        ``(N, d)``, binned by :func:`empirical_density`.
    regime : {"fixed_beta", "low_temperature"}, default "fixed_beta"
        ``"fixed_beta"``: :math:`I(\\mu) = \\beta[\\mathcal{F}_\\beta(\\mu) - \\inf\\mathcal{F}_\\beta]`,
        speed N (eq. (4.6) at :math:`\\beta = 1`).
        ``"low_temperature"``: :math:`J(\\mu) = \\mathcal{E}_s(\\mu) - \\min\\mathcal{E}_s`,
        speed :math:`\\beta_N` of the paper's normalisation (eq. (4.7)); see the module
        docstring for the speed in the mean-field normalisation.
    reference : GibbsResult or solvers.equilibrium.EquilibriumResult, optional
        The minimiser (Gibbs density for ``"fixed_beta"``, zero-temperature
        equilibrium for ``"low_temperature"``) on the same problem, to avoid
        recomputing it.

    Returns
    -------
    float
        Non-negative up to the solvers' tolerances.

    Raises
    ------
    ValueError
        On an unknown regime, a density without unit mass, or a reference
        that did not converge.

    References
    ----------
    paper 000, eq. (4.6)-(4.7); particles_pde_reference.md sec. 3.5.
    """
    check_choice("regime", regime, REGIMES)
    rho = _as_density(_check_problem(problem, finite_beta=(regime == "fixed_beta")), mu)
    if regime == "fixed_beta":
        ref = gibbs_density(problem) if reference is None else reference
        if not ref.converged:
            raise ValueError(f"reference Gibbs density did not converge (residual {ref.residual:.3e})")
        return problem.beta * (problem.free_energy(rho) - ref.free_energy)
    ref = equilibrium_on_mesh(problem) if reference is None else reference
    if not ref.converged:
        raise ValueError(f"reference equilibrium did not converge (KKT residual {ref.kkt_residual:.3e})")
    return problem.energy(rho) - ref.energy


@dataclasses.dataclass(frozen=True, eq=False)
class TiltedResult:
    """Infimum of a rate function over :math:`A = \\{\\mu: \\int f\\,d\\mu \\ge a\\}` and its minimiser.

    Parameters
    ----------
    value : float
        :math:`\\inf_A I` (or :math:`\\inf_A J`).
    rho : ndarray, shape (n_cells,)
        The minimiser (the tilted self-consistent density).
    theta : float
        Lagrange multiplier :math:`\\theta \\ge 0` of the constraint (0 if the
        unconstrained minimiser lies in A).
    constraint : float
        :math:`\\int f\\rho` at the minimiser.
    iterations : int
        Tilted solves made (bracketing plus root finding).
    converged : bool
        The root finding met ``tol`` and every inner solve converged.

    References
    ----------
    paper 000, Thm 2 (infimum of the rate over a Borel set A).
    """

    value: float
    rho: np.ndarray
    theta: float
    constraint: float
    iterations: int
    converged: bool


def rate_infimum(problem: MeanFieldProblem, f, a, *, regime: str = "fixed_beta", tol: float = 1e-10,
                 max_iter: int = 100, inner_tol: float = 1e-11) -> TiltedResult:
    """Minimise the rate function over the deviation set :math:`A = \\{\\mu: \\int f\\,d\\mu \\ge a\\}`.

    The minimiser on the boundary :math:`\\int f\\rho = a` is an exponential tilt:

    * ``"fixed_beta"``: :math:`\\rho_\\theta \\propto \\exp(-\\beta(V + \\lambda g_s*\\rho_\\theta) + \\theta f)`,
      the Gibbs density of :math:`V - f\\theta/\\beta` (:func:`gibbs_density`);
    * ``"low_temperature"``: the zero-temperature equilibrium of :math:`V - \\theta f`
      (:func:`~rieszflow.solvers.equilibrium.equilibrium_on_mesh`),

    with :math:`\\theta \\ge 0` found by bracketing (doubling) and Brent's method on the
    increasing function :math:`\\theta \\mapsto \\int f\\rho_\\theta - a` (stationarity of
    :math:`I(\\rho) - \\theta(\\int f\\rho - a)`; the rate is convex when the kernel is
    positive definite, so this is the global minimiser).

    Parameters
    ----------
    problem : MeanFieldProblem
    f : callable or array_like
        Observable, ``f(x)`` on the cell centres or cell values, shape ``(n_cells,)``.
    a : float
        Threshold; must be below :math:`\\max_j f_j` (otherwise A holds no density).
    regime : {"fixed_beta", "low_temperature"}, default "fixed_beta"
    tol : float, default 1e-10
        Absolute tolerance on :math:`\\int f\\rho_\\theta - a`.
    max_iter : int, default 100
        Cap on tilted solves.
    inner_tol : float, default 1e-11
        Tolerance of each Gibbs / equilibrium solve.

    Returns
    -------
    TiltedResult

    Raises
    ------
    ValueError
        If ``a >= max f`` on the mesh, or on invalid parameters.

    References
    ----------
    paper 000, Thm 2 (consequence for Borel sets A); particles_pde_reference.md sec. 3.5.
    """
    check_choice("regime", regime, REGIMES)
    problem = _check_problem(problem, finite_beta=(regime == "fixed_beta"))
    fv = _cell_values("f", problem.domain, f)
    a = check_real("a", a)
    tol = check_real("tol", tol, positive=True)
    max_iter = check_int("max_iter", max_iter, minimum=2)
    if not a < fv.max():
        raise ValueError(f"a must be < max f = {fv.max()!r} on the mesh for A to contain a density, got a={a!r}")
    vol = problem.domain.volumes
    count = [0]
    inner_ok = [True]

    if regime == "fixed_beta":
        def solve(theta):
            count[0] += 1
            r = gibbs_density(problem.replace(V=problem.V - theta * fv / problem.beta), tol=inner_tol)
            inner_ok[0] &= r.converged
            return r.rho

        base = gibbs_density(problem, tol=inner_tol)
        rate = lambda rho: problem.beta * (problem.free_energy(rho) - base.free_energy)  # noqa: E731
    else:
        from rieszflow.solvers.equilibrium import equilibrium_on_mesh

        def solve(theta):
            count[0] += 1
            r = equilibrium_on_mesh(problem.replace(V=problem.V - theta * fv), tol=inner_tol)
            inner_ok[0] &= r.converged
            return r.rho

        base = equilibrium_on_mesh(problem, tol=inner_tol)
        rate = lambda rho: problem.energy(rho) - base.energy  # noqa: E731
    inner_ok[0] &= base.converged
    g0 = float(np.dot(vol * base.rho, fv)) - a
    if g0 >= 0:
        return TiltedResult(0.0, base.rho, 0.0, g0 + a, 1, bool(inner_ok[0]))

    cache = {}

    def gap(theta):
        rho = solve(theta)
        cache[theta] = rho
        return float(np.dot(vol * rho, fv)) - a

    lo, hi = 0.0, 1.0
    g_hi = gap(hi)
    while g_hi < 0 and count[0] < max_iter:
        lo, hi = hi, 2.0 * hi
        g_hi = gap(hi)
    if g_hi < 0:
        rho = cache[hi]
        return TiltedResult(rate(rho), rho, hi, g_hi + a, count[0], False)
    try:
        theta, info = scipy.optimize.brentq(gap, lo, hi, xtol=1e-14, rtol=1e-14, maxiter=max(1, max_iter - count[0]),
                                            full_output=True, disp=False)
        root_ok = info.converged
    except RuntimeError:
        theta, root_ok = hi, False
    rho = cache.get(theta)
    if rho is None:
        rho = solve(theta)
    c = float(np.dot(vol * rho, fv))
    return TiltedResult(rate(rho), rho, float(theta), c, count[0],
                        bool(root_ok and abs(c - a) <= tol and inner_ok[0]))
