"""Zero-temperature equilibria: the minimisers of the energy :math:`\\mathcal{E}_s`.

.. math::

    \\mathcal{E}_s(\\mu) = \\int V\\,d\\mu + \\frac\\lambda2\\iint g_s(x - y)\\,d\\mu(x)\\,d\\mu(y)
    \\qquad \\text{(paper 000, eq. (4.2))}.

As :math:`\\beta \\to \\infty` the Gibbs densities of :mod:`~rieszflow.solvers.gibbs` concentrate on
the minimisers of the energy (4.2) over probability measures, the
"equilibrium measure" of potential theory (paper 000, App. E after (E.9);
particles_pde_reference.md sec. 3). Two independent solvers:

On a mesh: :func:`equilibrium_on_mesh`
    The quadratic programme in the cell masses :math:`m_j = |C_j|\\rho_j`

    .. math::

        \\min_m\\ V^\\top m + \\frac\\lambda2 m^\\top B m
        \\quad\\text{s.t.}\\quad m \\ge 0,\\ \\textstyle\\sum_j m_j = 1,
        \\qquad B_{ji} = A_{ji}/|C_i| ,

    with :math:`A` the exact cell-integral matrix of
    :mod:`~rieszflow.solvers.mckean_vlasov.convolution` (so :math:`B_{ji}` is the average of
    :math:`g_s(x_j - \\cdot)` over cell i; symmetric). Its KKT conditions are the
    Euler-Lagrange (Frostman) conditions: :math:`V + \\lambda g_s*\\rho = c` on the
    support and :math:`\\ge c` off it. ``method="active_set"`` (default) is the
    primal-dual active-set method (Hintermüller-Ito-Kunisch): guess the support,
    solve the saddle-point system :math:`[\\lambda B_{II},\\,-1;\\,1^\\top,\\,0]` exactly, move
    cells with negative mass out and cells with negative multiplier in, until the
    support repeats (capped). The answer satisfies the KKT conditions to
    round-off (reported as ``kkt_residual``). ``method="slsqp"`` hands the same
    programme to ``scipy.optimize.minimize(method="SLSQP")`` (small meshes; used
    as a cross-check).

With particles: :func:`equilibrium_particles`
    Minimises the discrete energy

    .. math::

        E_N(\\omega) = \\frac1N\\sum_k V(\\omega_k) + \\frac{\\lambda}{2N^2}\\sum_{k\\ne l} g_s(\\omega_k-\\omega_l)
        = \\frac1N H_N(\\omega)

    (:math:`H_N` the mean-field Hamiltonian, ``RieszEnergy(normalization="mean_field")``;
    diagonal excluded) with L-BFGS, from a given start. On a box (interval or
    rectangle) each coordinate is written :math:`x = c + r\\sin\\theta` and the
    minimisation runs over unconstrained :math:`\\theta`: projecting onto the box
    (L-BFGS-B bounds) makes repelling particles collide on the walls, where the
    energy is infinite; the sine map keeps them apart while letting them reach
    the walls (as the Fekete points of an interval do). :math:`E_N \\to \\min\\mathcal{E}_s`
    and :math:`\\mu_N` converges weakly to the equilibrium measure.

References
----------
paper 000, eq. (4.2), (4.7); App. E (E.7)-(E.9).
particles_pde_reference.md sec. 3.1-3.2 (closed forms used by the tests).
M. Hintermüller, K. Ito, K. Kunisch, SIAM J. Optim. 13 (2002) 865-888.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np
import scipy.optimize

from rieszflow.engine._checks import check_choice, check_int, check_points, check_real
from rieszflow.solvers.mckean_vlasov.equation import MeanFieldProblem
from rieszflow.engine.energy.riesz import RieszEnergy

__all__ = [
    "EquilibriumResult",
    "ParticleEquilibrium",
    "equilibrium_on_mesh",
    "equilibrium_particles",
]

METHODS = ("active_set", "slsqp")


@dataclasses.dataclass(frozen=True, eq=False)
class EquilibriumResult:
    """Zero-temperature minimiser on a mesh.

    Parameters
    ----------
    rho : ndarray, shape (n_cells,)
        Minimising density (unit mass, ``>= 0``).
    energy : float
        :math:`\\mathcal{E}_s(\\rho)` (discrete).
    multiplier : float
        The Euler-Lagrange constant :math:`c` (:math:`V + \\lambda g_s*\\rho = c` on the support).
    support : ndarray of bool, shape (n_cells,)
        Cells whose mass exceeds 1e-12 times the largest cell mass (the active-set
        solution has exact zeros off the support).
    kkt_residual : float
        Max of the stationarity error on the support, the dual and primal
        infeasibilities, and the mass error (units of V).
    iterations : int
        Active-set iterations (``"active_set"``) or SLSQP iterations (``"slsqp"``).
    converged : bool
        ``kkt_residual <= tol`` (active set: also the support repeated).
    method : str
        The method used, ``"active_set"`` or ``"slsqp"``.

    References
    ----------
    paper 000, eq. (4.2), (4.7).
    """

    rho: np.ndarray
    energy: float
    multiplier: float
    support: np.ndarray
    kkt_residual: float
    iterations: int
    converged: bool
    method: str


def _kkt(m, B, V, lam, c):
    grad = lam * (B @ m) + V - c
    on = m > 1e-12 * np.abs(m).max()  # round-off masses of an iterative solver count as zero
    stat = np.max(np.abs(grad[on])) if on.any() else 0.0
    dual = max(0.0, -float(grad[~on].min())) if (~on).any() else 0.0
    primal = max(0.0, -float(m.min()))
    return float(max(stat, dual, primal, abs(m.sum() - 1.0)))


def _active_set(B, V, lam, max_iter):
    n = V.size
    inactive = np.ones(n, dtype=bool)  # cells allowed to carry mass
    seen = set()
    m = np.full(n, 1.0 / n)
    c = 0.0
    it = 0
    repeated = False
    for it in range(1, max_iter + 1):
        idx = np.nonzero(inactive)[0]
        k = idx.size
        M = np.empty((k + 1, k + 1))
        M[:k, :k] = lam * B[np.ix_(idx, idx)]
        M[:k, k] = -1.0
        M[k, :k] = 1.0
        M[k, k] = 0.0
        rhs = np.append(-V[idx], 1.0)
        try:
            sol = np.linalg.solve(M, rhs)
        except np.linalg.LinAlgError:  # singular saddle system (kernel not definite there): report
            break
        m = np.zeros(n)
        m[idx] = sol[:k]
        c = sol[k]
        mult = lam * (B @ m) + V - c  # multiplier of m_j >= 0 (zero on the inactive set)
        new_inactive = np.where(inactive, m > 0, mult < 0)
        key = new_inactive.tobytes()
        if np.array_equal(new_inactive, inactive):
            repeated = True
            break
        if key in seen:  # cycling: stop and report
            break
        seen.add(key)
        inactive = new_inactive
    return m, float(c), it, repeated


def equilibrium_on_mesh(problem: MeanFieldProblem, *, method: str = "active_set", tol: float = 1e-10,
                        max_iter: int = 200) -> EquilibriumResult:
    """Minimise :math:`\\mathcal{E}_s` over unit-mass densities on the problem's mesh (``beta`` is ignored).

    Parameters
    ----------
    problem : MeanFieldProblem
        Mesh, ``V``, ``s``, ``lam > 0``.
    method : {"active_set", "slsqp"}, default "active_set"
        See the module docstring.
    tol : float, default 1e-10
        KKT tolerance (units of V) for ``converged``.
    max_iter : int, default 200
        Cap on active-set updates or SLSQP iterations.

    Returns
    -------
    EquilibriumResult

    Raises
    ------
    ValueError
        If ``lam == 0`` (the minimiser is a point mass at the minimum of V, not
        a density) or on invalid parameters.

    References
    ----------
    paper 000, eq. (4.2); particles_pde_reference.md sec. 3.
    """
    if not isinstance(problem, MeanFieldProblem):
        raise TypeError(f"problem must be a MeanFieldProblem, got {type(problem).__name__}")
    check_choice("method", method, METHODS)
    tol = check_real("tol", tol, positive=True)
    max_iter = check_int("max_iter", max_iter, minimum=1)
    if problem.lam == 0:
        raise ValueError("equilibrium_on_mesh needs lam > 0; with lam=0 the minimiser of E is a point "
                         "mass at argmin V, which has no density")
    vol = problem.domain.volumes
    B = problem.convolution.matrix() / vol[None, :]
    B = 0.5 * (B + B.T)
    V = problem.V
    lam = problem.lam
    if method == "active_set":
        m, c, it, repeated = _active_set(B, V, lam, max_iter)  # exact zeros off the support
    else:
        n = V.size

        def fun(m):
            Bm = B @ m
            return float(V @ m + 0.5 * lam * (m @ Bm)), V + lam * Bm

        res = scipy.optimize.minimize(fun, np.full(n, 1.0 / n), jac=True, method="SLSQP",
                                      bounds=[(0.0, None)] * n,
                                      constraints=[{"type": "eq", "fun": lambda m: m.sum() - 1.0,
                                                    "jac": lambda m: np.ones_like(m)}],
                                      options={"maxiter": max_iter, "ftol": 1e-15})
        # SLSQP meets the bounds only up to round-off: entries in [-1e-12, 0) are set to 0;
        # larger violations are kept and show up in kkt_residual
        m = np.where((res.x < 0) & (res.x >= -1e-12), 0.0, res.x)
        g = V + lam * (B @ m)
        on = m > 1e-12 * m.max()
        c = float(np.dot(m[on], g[on]) / m[on].sum())  # mass-weighted mean of U on the support
        it, repeated = int(res.nit), bool(res.success)
    kkt = _kkt(m, B, V, lam, c)
    energy = float(V @ m + 0.5 * lam * (m @ (B @ m)))  # = problem.energy(m / vol)
    return EquilibriumResult(rho=m / vol, energy=energy, multiplier=c, support=m > 1e-12 * np.abs(m).max(),
                             kkt_residual=kkt, iterations=it, converged=bool(repeated and kkt <= tol),
                             method=method)


@dataclasses.dataclass(frozen=True, eq=False)
class ParticleEquilibrium:
    """Minimiser of the discrete energy :math:`E_N` of N particles.

    Parameters
    ----------
    omega : ndarray, shape (N, d)
        Particle positions.
    energy : float
        :math:`E_N(\\omega) = \\frac1N\\sum_k V + \\frac{\\lambda}{2N^2}\\sum_{k\\ne l} g_s`.
    grad_norm : float
        Max-norm of the projected gradient of :math:`N E_N` per particle (force on a particle).
    iterations : int
        L-BFGS-B iterations.
    converged : bool
        ``grad_norm <= tol``.
    message : str
        Optimiser message.

    References
    ----------
    paper 000, eq. (2.2)-(2.3), (4.2).
    """

    omega: np.ndarray
    energy: float
    grad_norm: float
    iterations: int
    converged: bool
    message: str


def equilibrium_particles(V: Callable, grad_V: Callable, omega0, *, s, lam, bounds=None,
                          tol: float = 1e-6, max_iter: int = 5000, method: str = "auto") -> ParticleEquilibrium:
    """Minimise the N-particle energy :math:`E_N` (zero temperature, particles).

    :math:`E_N(\\omega) = \\frac1N\\sum_k V(\\omega_k)
    + \\frac{\\lambda}{2N^2}\\sum_{k\\ne l} g_s(\\omega_k-\\omega_l) = H_N(\\omega)/N`.

    Parameters
    ----------
    V : callable
        ``V(omega) -> (N,)`` for ``omega`` of shape ``(N, d)``.
    grad_V : callable
        ``grad_V(omega) -> (N, d)``.
    omega0 : array_like, shape (N, d), N >= 2
        Starting positions, pairwise distinct.
    s : float
        Riesz exponent, ``-2 < s``.
    lam : float
        Interaction strength, ``> 0``.
    bounds : sequence of (lo, hi) per coordinate, optional
        Box domain (interval or rectangle), enforced by the map
        :math:`x = c + r\\sin\\theta` (module docstring); None for R^d.
    tol : float, default 1e-6
        ``converged`` is set when the largest projected force on a particle
        (gradient of :math:`N E_N` with respect to one particle, an O(1) quantity)
        is below ``tol``. L-BFGS runs until it can no longer decrease :math:`E_N`
        in float64, which typically leaves forces of 1e-8 to 1e-7 (the energy
        resolves force changes only down to about sqrt(machine epsilon)).
    max_iter : int, default 5000
        L-BFGS-B iteration cap.
    method : {"auto", "numpy", "numba", "gemm"}, default "auto"
        Pair-sum backend of :class:`~rieszflow.engine.energy.riesz.RieszEnergy`.

    Returns
    -------
    ParticleEquilibrium

    Raises
    ------
    ValueError
        On invalid shapes, parameters, or non-finite ``V`` or ``grad_V`` values (checked
        at every evaluation, the start included).

    References
    ----------
    paper 000, eq. (2.2)-(2.3) (with the mean-field normalisation of
    :mod:`~rieszflow.solvers.mckean_vlasov.equation`), eq. (4.2).
    """
    omega0 = np.asarray(check_points("omega0", omega0, min_n=2), dtype=np.float64)
    n, d = omega0.shape
    lam = check_real("lam", lam, positive=True)
    tol = check_real("tol", tol, positive=True)
    max_iter = check_int("max_iter", max_iter, minimum=1)
    pair = RieszEnergy(s=s, lam=lam, normalization="mean_field", method=method)
    box = None
    if bounds is not None:
        bounds = [tuple(map(float, b)) for b in bounds]
        if len(bounds) != d or any(not lo < hi for lo, hi in bounds):
            raise ValueError(f"bounds must be {d} pairs (lo, hi) with lo < hi, got {bounds}")
        box = bounds
        lo = np.array([b[0] for b in bounds])
        hi = np.array([b[1] for b in bounds])
        if np.any(omega0 < lo) or np.any(omega0 > hi):
            raise ValueError("omega0 has particles outside bounds")

    if box is None:
        to_x = lambda th: th  # noqa: E731
        chain = lambda th: 1.0  # noqa: E731
        th0 = omega0
    else:  # x = c + r sin(theta): unconstrained in theta, x stays in the closed box
        c, r = 0.5 * (lo + hi), 0.5 * (hi - lo)
        to_x = lambda th: c + r * np.sin(th)  # noqa: E731
        chain = lambda th: r * np.cos(th)  # noqa: E731
        th0 = np.arcsin(np.clip((omega0 - c) / r, -1.0, 1.0))

    def energy_grad(w):
        v = np.asarray(V(w), dtype=np.float64)
        gv = np.asarray(grad_V(w), dtype=np.float64)
        if v.shape != (n,) or gv.shape != (n, d):
            raise ValueError(f"V must return shape ({n},) and grad_V shape ({n}, {d}); got {v.shape}, {gv.shape}")
        if not (np.isfinite(v).all() and np.isfinite(gv).all()):
            bad = np.flatnonzero(~(np.isfinite(v) & np.isfinite(gv).all(axis=1)))
            raise ValueError(f"V and grad_V must be finite at every particle; got V={v[bad[:3]]}, "
                             f"grad_V={gv[bad[:3]].tolist()} at omega={w[bad[:3]].tolist()} "
                             f"({bad.size} particle(s) affected)")
        e, ge = pair.value_and_grad(w)
        return float(v.sum() + e) / n, (gv + ge) / n

    def fun(flat):
        th = flat.reshape(n, d)
        e, g = energy_grad(to_x(th))
        return e, (g * chain(th)).ravel()

    def force(w):
        g = energy_grad(w)[1] * n
        if box is not None:  # drop the outward force on particles at a wall (within 1e-9 of its width)
            tol_w = 1e-9 * (hi - lo)
            g = np.where((w <= lo + tol_w) & (g > 0), 0.0, g)
            g = np.where((w >= hi - tol_w) & (g < 0), 0.0, g)
        return float(np.max(np.abs(g)))

    res = scipy.optimize.minimize(fun, th0.ravel(), jac=True, method="L-BFGS-B",
                                  options={"maxiter": max_iter, "maxfun": 4 * max_iter, "ftol": 0.0,
                                           "gtol": 1e-3 * tol / n, "maxcor": 30})
    omega = to_x(res.x.reshape(n, d))
    gn = force(omega)
    return ParticleEquilibrium(omega=omega, energy=float(res.fun), grad_norm=gn,
                               iterations=int(res.nit), converged=bool(gn <= tol), message=str(res.message))
