"""The mean-field-scaled particle system of paper 000, eq. (E.2), on the PDE's domain and potential.

Each particle follows

.. math::

    dX_i = -\\nabla V(X_i)\\,dt - \\frac{\\lambda}{N}\\sum_{j\\ne i}\\nabla g_s(X_i - X_j)\\,dt
           + \\sqrt{2/\\beta}\\,dW_i, \\qquad X_i \\in \\bar\\Omega,

the gradient flow of the extensive Hamiltonian

.. math::

    H_N = \\sum_i V(x_i) + \\frac{\\lambda}{2N}\\sum_{i \\ne j} g_s(x_i - x_j)

("mean_field" normalisation of :mod:`~rieszflow.engine.energy.base`; ordered pairs i != j,
1/N). Paper 000, eq. (E.2), divides the interaction by N - 1 instead; the factor
N/(N-1) is available as ``normalization="paper"`` and does not change the
McKean-Vlasov limit (4.4)/(E.3), which is what :mod:`~rieszflow.solvers.mckean_vlasov`
integrates with the same ``V``, ``s``, ``lam`` and ``beta``.

Time stepping is the Euler-Maruyama step of :func:`~rieszflow.engine.simulate.projected_langevin`
with ``grad_scale = 1`` and the boundary treatment of the domain
(:mod:`~rieszflow.engine.space`): ``"project"`` (Euclidean projection, weak order 1/2 near
the boundary) or ``"reflect"`` (mirror reflection, weak order 1); see
``tests/test_mean_field_particles.py`` for the measured orders.

Interaction evaluation
----------------------
* Any ``s`` and ``d``: the O(N^2) pair sums of :mod:`~rieszflow.engine.energy.riesz` (Numba
  on the CPU, the chunked array-API reference on CuPy).
* ``d = 1`` and ``s = -1`` (the 1-D Coulomb kernel :math:`g_{-1}(w) = -|w|`):
  :class:`rieszflow.engine.energy.SortedCoulomb1D`, exact in O(N log N). The force is a count,
  :math:`\\sum_{j\\ne i}\\nabla g_{-1}(x_i - x_j) = -\\#\\{j: x_j < x_i\\} + \\#\\{j: x_j > x_i\\}`,
  and the energy a sorted prefix sum, so one sort gives both.

  For the logarithmic kernel no such identity exists
  (:math:`\\sum_j 1/(x_i-x_j)` is a discrete Hilbert transform, not a prefix sum); an
  exact O(N log N) evaluation needs a fast multipole method. The O(N^2) path is
  used for it.

Why the 1-D study uses ``s = -1``
---------------------------------
In one dimension with :math:`s \\ge 0` and mean-field scaling, the Euler step is
inconsistent near collisions: a pair at distance :math:`r` receives a kick
:math:`\\lambda\\eta/(N r)` (log kernel) although the exact dynamics separates it
by only :math:`O(\\sqrt{\\eta/\\beta})`. The pair density does not vanish at
:math:`r = 0` (the pair repulsion :math:`\\beta\\lambda/N \\to 0`), so each particle
receives a kick larger than :math:`K` at a rate of about :math:`2\\rho\\lambda/K` per
unit time, *independently of* ``eta``: a spurious Cauchy-like jump process
that no step refinement removes. For :math:`0 < s < 1` the force
:math:`|w|^{-s-1}` is not even locally integrable and the nearest-neighbour
force grows like :math:`N^{s}`. In two dimensions the same estimate gives a rate
:math:`\\pi\\rho\\lambda^2\\eta/(N K^2)` for the log kernel, which vanishes with
``eta``; the 2-D study therefore uses the log (Coulomb) kernel.

References
----------
paper 000, Thm 1 and Thm 4, eq. (4.3)-(4.5), (E.2)-(E.5).
particles_pde_reference.md, preamble (equations) and sec. 2.3 (boundary schemes).
"""
from __future__ import annotations

import dataclasses

import numpy as np
import scipy.stats

from rieszflow.engine._checks import check_choice, check_int, check_points, check_real
from rieszflow.engine.backend import get_backend, namespace, to_numpy
from rieszflow.engine.energy import ExternalPotential, Interaction, SumEnergy, make_energy
from rieszflow.engine.energy.base import NORMALIZATIONS, Energy
from rieszflow.engine.energy.interaction import check_s
from rieszflow.engine.simulate import BOUNDARIES, projected_langevin, run
from rieszflow.engine.space import Box, Interval, Space
from rieszflow.solvers.gibbs import empirical_density
from rieszflow.engine.measures import (
    AtomicMeasure1D,
    CellMeasure1D,
    bin_to_grid,
    sample_cells,
    wasserstein1_1d,
    wasserstein1_grid,
)

__all__ = [
    "GridW1",
    "LangevinRecorder",
    "INTERACTION_METHODS",
    "MeanFieldParticles",
    "TruncatedGaussian",
    "quadratic_potential",
    "make_interaction",
    "mean_field_drift",
    "snapshot_steps",
    "domain_space",
]

INTERACTION_METHODS = ("auto", "sorted", "numba", "numpy", "fmm", "nufft")


# ------------------------------------------------------------------------------ external field

def quadratic_potential(gamma: float, normalization: str = "mean_field") -> ExternalPotential:
    """External field :math:`V(x) = \\frac{\\gamma}{2}\\|x\\|^2` as an :class:`ExternalPotential`.

    Parameters
    ----------
    gamma : float
        Curvature :math:`\\gamma \\ge 0` (1/length^2 in energy units).
    normalization : {"mean_field", "paper"}, default "mean_field"
        ``"mean_field"``: :math:`\\sum_i V(x_i)`; ``"paper"``: :math:`\\frac1N\\sum_i V(x_i)`.

    Returns
    -------
    engine.energy.ExternalPotential
        ``V(omega)`` of shape (N,), ``gradV(omega) = gamma * omega`` of shape (N, d);
        both run on NumPy and CuPy arrays.

    Raises
    ------
    ValueError
        If ``gamma`` is negative or not finite, or ``normalization`` is unknown.

    References
    ----------
    particles_pde_reference.md sec. 3.1 (the quadratic field of the equilibrium oracles).
    """
    gamma = check_real("gamma", gamma, nonnegative=True)
    check_choice("normalization", normalization, NORMALIZATIONS)

    def V(omega):
        xp = namespace(omega)
        return 0.5 * gamma * xp.sum(omega * omega, axis=1, dtype=xp.float64)

    def gradV(omega):
        return gamma * omega

    return ExternalPotential(V, gradV, normalization=normalization)


# ------------------------------------------------------------------------------ interaction

def make_interaction(s=None, lam=None, d=None, *, interaction: Interaction | None = None,
                     method: str = "auto", normalization: str = "mean_field",
                     softening: float = 0.0, tol: float | None = None) -> Energy:
    """The interaction energy of the particle system, with the fastest exact evaluation.

    A particle-versus-PDE comparison builds both sides from one :class:`~rieszflow.engine.energy.Interaction`:
    ``make_interaction(d=d, interaction=inter)`` here and
    ``MeanFieldProblem.create(domain, V, interaction=inter, beta=beta)`` for the PDE.

    Parameters
    ----------
    s : float
        Riesz exponent, ``-2 < s`` (paper 000, eq. (B.10)); not with ``interaction``.
    lam : float
        Interaction strength, ``>= 0``; not with ``interaction``.
    d : int
        Space dimension, ``>= 1``.
    interaction : engine.energy.Interaction, optional
        The pair interaction ``lam * g_s`` (with its softening) instead of ``s``, ``lam`` and
        ``softening``.
    method : {"auto", "sorted", "numba", "numpy", "fmm", "nufft"}, default "auto"
        ``"sorted"``: :class:`~rieszflow.engine.energy.SortedCoulomb1D` (only ``d = 1``, ``s = -1``, no
        softening); ``"numba"``/``"numpy"``: :class:`~rieszflow.engine.energy.RieszEnergy`
        pair sums; ``"fmm"``/``"nufft"``: its fast summation (relative precision ``tol``;
        :mod:`~rieszflow.engine.energy.fast`); ``"auto"``: ``"sorted"`` when it applies, else the
        Riesz pair sums with their own automatic backend choice.
    normalization : {"mean_field", "paper"}, default "mean_field"
        Pair normalisation :math:`\\frac{\\lambda}{2N}\\sum_{i\\ne j}` or
        :math:`\\frac{\\lambda}{2N(N-1)}\\sum_{i \\ne j}` (module docstring).
    softening : float, default 0.0
        Plummer softening of :func:`~rieszflow.engine.energy.riesz_kernel` (0 = exact kernel).
    tol : float, optional
        Relative precision of the fast methods (default
        :data:`~rieszflow.engine.energy.fast.FAST_TOL`); not with ``"sorted"``.

    Returns
    -------
    engine.energy.base.Energy

    Raises
    ------
    ValueError
        On an unknown ``method`` or ``normalization``, out-of-range ``s``,
        ``lam`` or ``d``, ``method="sorted"`` outside ``d = 1, s = -1,
        softening = 0``, ``method="fmm"`` outside ``d = 3, s = 1, softening = 0``,
        ``method="nufft"`` for ``d > 3``, or ``interaction`` given together with ``s``, ``lam`` or
        a softening.
    TypeError
        If ``interaction`` is not an :class:`~rieszflow.engine.energy.Interaction`.
    """
    if interaction is not None:
        if not isinstance(interaction, Interaction):
            raise TypeError(f"interaction must be an Interaction, got {type(interaction).__name__}")
        if s is not None or lam is not None or softening != 0.0:
            raise ValueError("pass either interaction or (s, lam, softening), not both")
        s, lam, softening = interaction.s, interaction.lam, interaction.softening
    elif s is None or lam is None:
        raise ValueError("make_interaction needs s and lam (or interaction=Interaction(s, lam))")
    if d is None:
        raise ValueError("make_interaction needs the space dimension d (an integer >= 1)")
    s = check_s(s)
    lam = check_real("lam", lam, nonnegative=True)
    d = check_int("d", d, minimum=1)
    check_choice("method", method, INTERACTION_METHODS)
    check_choice("normalization", normalization, NORMALIZATIONS)
    softening = check_real("softening", softening, nonnegative=True)
    sortable = d == 1 and s == -1.0 and softening == 0.0
    if method == "sorted" and not sortable:
        raise ValueError(f"method='sorted' is exact only for d=1, s=-1 and softening=0; got d={d}, "
                         f"s={s}, softening={softening}")
    if method == "fmm" and (d != 3 or s != 1.0 or softening != 0.0):
        raise ValueError(f"method='fmm' computes the Coulomb kernel of R^3 only (d=3, s=1, softening=0), "
                         f"got d={d}, s={s}, softening={softening}; use method='nufft' or 'auto'")
    if method == "nufft" and d > 3:
        raise ValueError(f"method='nufft' supports d = 1, 2, 3, got d={d}; use method='auto'")
    if method == "sorted" or (method == "auto" and sortable):
        if tol is not None and method == "sorted":
            raise ValueError(f"tol={tol!r} applies to the fast methods, not to method='sorted' (exact)")
        return make_energy("coulomb1d", lam=lam, normalization=normalization)
    extra = {} if tol is None else {"tol": tol}
    return make_energy("riesz", s=s, lam=lam, normalization=normalization, softening=softening,
                       method=method, **extra)


def mean_field_drift(omega, potential: Energy, interaction: Energy):
    """Particle drift of eq. (E.2): :math:`-\\nabla V(x_i) - \\frac{\\lambda}{N}\\sum_{j\\ne i}\\nabla g_s(x_i - x_j)`.

    Parameters
    ----------
    omega : array, shape (N, d)
        Particle positions.
    potential : Energy
        External field with ``normalization="mean_field"`` (e.g.
        :func:`quadratic_potential`).
    interaction : Energy
        From :func:`make_interaction` with ``normalization="mean_field"`` (the
        drift then carries :math:`\\lambda/N`); any other normalisation (e.g.
        ``"paper"``) is rejected.

    Returns
    -------
    array, shape (N, d), dtype of ``omega``

    Raises
    ------
    ValueError
        If the energies do not use the "mean_field" normalisation or ``omega``
        is not a finite (N, d) array.

    References
    ----------
    paper 000, eq. (E.2); particles_pde_reference.md, preamble.
    """
    for name, e in (("potential", potential), ("interaction", interaction)):
        if getattr(e, "normalization", None) != "mean_field":
            raise ValueError(f"{name} must use normalization='mean_field' (drift = -grad H_N), got "
                             f"{getattr(e, 'normalization', None)!r}")
    omega = check_points("omega", omega)
    return -(potential.grad(omega) + interaction.grad(omega))


# ------------------------------------------------------------------------------ initial law

@dataclasses.dataclass(frozen=True)
class TruncatedGaussian:
    """Product of independent truncated normals on a box: the initial law :math:`\\rho_0`.

    Coordinate a has law :math:`N(m_a, \\sigma_a^2)` conditioned on :math:`[lo_a, hi_a]`.
    The particles sample it exactly and the PDE starts from its exact cell
    masses, so the initial W1 is pure sampling error.

    Parameters
    ----------
    mean, std, lo, hi : tuple of float, each of length d
        Means, standard deviations (> 0) and box bounds (lo < hi).

    Raises
    ------
    ValueError
        On lengths that differ, non-finite values, ``std <= 0`` or ``lo >= hi``.
    """

    mean: tuple
    std: tuple
    lo: tuple
    hi: tuple

    def __post_init__(self):
        fields = {}
        for name in ("mean", "std", "lo", "hi"):
            v = np.atleast_1d(np.asarray(getattr(self, name), dtype=np.float64))
            if v.ndim != 1 or not np.isfinite(v).all():
                raise ValueError(f"{name} must be a finite number or 1-D sequence, got {getattr(self, name)!r}")
            fields[name] = v
        d = fields["mean"].size
        if any(v.size != d for v in fields.values()):
            raise ValueError(f"mean, std, lo, hi must have the same length, got "
                             f"{[v.size for v in fields.values()]}")
        if not (fields["std"] > 0).all():
            raise ValueError(f"std must be > 0, got {self.std!r}")
        if not (fields["lo"] < fields["hi"]).all():
            raise ValueError(f"need lo < hi, got lo={self.lo!r}, hi={self.hi!r}")
        for name, v in fields.items():
            object.__setattr__(self, name, tuple(float(a) for a in v))

    @property
    def d(self) -> int:
        """Dimension."""
        return len(self.mean)

    def _marginal(self, a):
        m, sd = self.mean[a], self.std[a]
        return scipy.stats.truncnorm((self.lo[a] - m) / sd, (self.hi[a] - m) / sd, loc=m, scale=sd)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` independent draws, shape (n, d), float64 (host).

        Parameters
        ----------
        rng : numpy.random.Generator
        n : int
            Number of draws, >= 1.

        Returns
        -------
        ndarray, shape (n, d), float64
            The draws (host array).
        """
        n = check_int("n", n, minimum=1)
        return np.stack([self._marginal(a).rvs(size=n, random_state=rng) for a in range(self.d)], axis=1)

    def marginal_cell_masses(self, a: int, edges) -> np.ndarray:
        """Exact masses of the cells ``[edges[k], edges[k+1]]`` for coordinate ``a`` (CDF differences).

        Parameters
        ----------
        a : int
            Coordinate index, in ``[0, d)``.
        edges : array_like, shape (n + 1,)
            Cell edges along that coordinate, increasing.

        Returns
        -------
        ndarray, shape (n,), float64
            Mass of the truncated marginal in each cell.
        """
        return np.diff(self._marginal(a).cdf(np.asarray(edges, dtype=np.float64)))

    def cell_density(self, domain) -> np.ndarray:
        """Exact cell averages of the density on a uniform interval/rectangle mesh.

        Parameters
        ----------
        domain : solvers.mckean_vlasov.MeshDomain
            ``kind`` "interval" or "rectangle" covering exactly ``[lo, hi]``.

        Returns
        -------
        ndarray, shape (n_cells,), float64
            Cell mass / cell volume, in FiPy's cell order (x fastest).

        Raises
        ------
        ValueError
            If the mesh is not a uniform grid of dimension ``d``.
        """
        if not domain.is_uniform_grid or domain.d != self.d:
            raise ValueError(f"cell_density needs a uniform grid of dimension {self.d}, got kind="
                             f"{domain.kind!r}, d={domain.d}")
        masses = []
        for a, n in enumerate(domain.grid_shape):
            edges = domain.origin[a] + domain.spacing[a] * np.arange(n + 1)
            masses.append(self.marginal_cell_masses(a, edges))
        if self.d == 1:
            m = masses[0]
        else:
            m = (masses[1][:, None] * masses[0][None, :]).reshape(-1)  # cell k = (k % nx, k // nx)
        return m / domain.volumes


# ------------------------------------------------------------------------------ the system

def snapshot_steps(times, eta: float) -> np.ndarray:
    """Step indices ``round(t / eta)`` of the snapshot times, which must be multiples of ``eta``.

    Parameters
    ----------
    times : array_like, shape (n_times,)
        Non-negative, non-decreasing times.
    eta : float
        Step size, > 0.

    Returns
    -------
    ndarray of int64, shape (n_times,)

    Raises
    ------
    ValueError
        If a time is negative, the times decrease, or a time is not a multiple of
        ``eta`` to within 1e-9 relative.
    """
    eta = check_real("eta", eta, positive=True)
    t = np.asarray(times, dtype=np.float64).ravel()
    if t.size == 0 or not np.isfinite(t).all() or (t < 0).any() or (np.diff(t) < 0).any():
        raise ValueError(f"times must be finite, >= 0 and non-decreasing, got {times!r}")
    k = np.rint(t / eta)
    if (np.abs(k * eta - t) > 1e-9 * np.maximum(1.0, t)).any():
        raise ValueError(f"times {t.tolist()} must be multiples of eta={eta}")
    return k.astype(np.int64)


@dataclasses.dataclass(frozen=True, eq=False)
class MeanFieldParticles:
    """The particle system (E.2) on a domain: energies, integrator and a snapshot loop.

    Parameters
    ----------
    space : engine.space.Space
        The domain (``Interval`` or ``Box`` for the PDE comparison).
    potential : Energy
        External field, ``normalization="mean_field"`` (:func:`quadratic_potential`).
    interaction : Energy
        Pair interaction, ``normalization="mean_field"`` (:func:`make_interaction`).
    beta : float
        Inverse temperature, > 0 (noise :math:`\\sqrt{2\\eta/\\beta}\\,\\xi` per step).
    eta : float
        Euler-Maruyama step, > 0 (time units of eq. (4.4)).
    boundary : {"reflect", "project"}, default "reflect"
        Mirror reflection (weak order 1) or Euclidean projection (weak order 1/2,
        the paper's :math:`\\mathcal{P}_\\Omega` of eq. (4.3)).

    Raises
    ------
    TypeError
        If ``space`` is not a Space or an energy is not an Energy.
    ValueError
        On a bad ``beta``, ``eta``, ``boundary`` or an energy that is not
        "mean_field"-normalised.

    References
    ----------
    paper 000, eq. (4.3), (E.2); particles_pde_reference.md sec. 2.3.
    """

    space: Space
    potential: Energy
    interaction: Energy
    beta: float
    eta: float
    boundary: str = "reflect"

    def __post_init__(self):
        if not isinstance(self.space, Space):
            raise TypeError(f"space must be an engine.space.Space, got {self.space!r}")
        for name in ("potential", "interaction"):
            e = getattr(self, name)
            if not isinstance(e, Energy):
                raise TypeError(f"{name} must be an engine.energy Energy, got {type(e).__name__}")
            if e.normalization != "mean_field":
                raise ValueError(f"{name} must use normalization='mean_field', got {e.normalization!r}")
        object.__setattr__(self, "beta", check_real("beta", self.beta, positive=True))
        object.__setattr__(self, "eta", check_real("eta", self.eta, positive=True))
        check_choice("boundary", self.boundary, BOUNDARIES)

    @property
    def hamiltonian(self) -> SumEnergy:
        """:math:`H_N = \\sum_i V(x_i) + \\frac{\\lambda}{2N}\\sum_{i\\ne j} g_s(x_i - x_j)`."""
        return self.potential + self.interaction

    def drift(self, omega):
        """:func:`mean_field_drift` of this system, shape (N, d).

        Parameters
        ----------
        omega : array, shape (N, d)
            Particle positions.

        Returns
        -------
        array, shape (N, d), dtype of ``omega``
            :math:`-\\nabla V(x_i) - \\frac{\\lambda}{N}\\sum_{j\\ne i}\\nabla g_s(x_i - x_j)`.
        """
        return mean_field_drift(omega, self.potential, self.interaction)

    def integrator(self):
        """``(init_fn, step_fn)`` of :func:`~rieszflow.engine.simulate.projected_langevin` with ``grad_scale = 1``.

        Returns
        -------
        init_fn : callable
            ``init_fn(omega) -> LangevinState``.
        step_fn : callable
            ``step_fn(state, noise) -> LangevinState``, pure; ``noise`` is an array of standard
            normals of shape (N, d).
        """
        return projected_langevin(self.hamiltonian.grad, self.space, self.eta, self.beta,
                                  grad_scale=1.0, boundary=self.boundary)

    def simulate(self, omega0, times, rng: np.random.Generator, backend=None, progress: bool = False):
        """Run from ``omega0`` and return host snapshots at ``times``.

        Parameters
        ----------
        omega0 : array_like, shape (N, d)
            Initial positions inside the domain (host or device array).
        times : array_like, shape (n_times,)
            Snapshot times, multiples of ``eta`` (:func:`snapshot_steps`).
        rng : numpy.random.Generator
            Source of the noise (drawn on the host, moved to ``backend``).
        backend : engine.backend.Backend, optional
            Where the particles live (default: NumPy, float64).
        progress : bool, default False
            tqdm progress bar over the steps.

        Returns
        -------
        ndarray, shape (n_times, N, d), float64
            Positions at each snapshot time.

        Raises
        ------
        ValueError
            On bad ``times`` or ``omega0`` (outside the domain, wrong shape).
        FloatingPointError
            If a position becomes non-finite (named step).
        """
        if not isinstance(rng, np.random.Generator):
            raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
        steps = snapshot_steps(times, self.eta)
        backend = get_backend("numpy") if backend is None else backend
        init_fn, step_fn = self.integrator()
        state = init_fn(backend.asarray(omega0))
        xp = namespace(state.omega)
        snaps = {}

        def record(st):
            if not bool(xp.all(xp.isfinite(st.omega))):
                raise FloatingPointError(f"non-finite particle positions at step {st.step}")
            snaps[st.step] = to_numpy(st.omega)

        run(step_fn, state, int(steps[-1]), rng=rng, backend=backend, record=record,
            record_steps=steps, record_initial=int(steps[0]) == 0, record_final=False,
            progress=progress, desc="particles", leave=False)
        return np.stack([np.asarray(snaps[int(k)], dtype=np.float64) for k in steps])


def domain_space(lo, hi) -> Space:
    """The particle domain matching a PDE box: :class:`Interval` in 1-D, :class:`Box` otherwise.

    Parameters
    ----------
    lo, hi : sequence of float
        Box corners, same length d >= 1.

    Returns
    -------
    engine.space.Space
    """
    lo, hi = tuple(lo), tuple(hi)
    if len(lo) == 1:
        return Interval(lo[0], hi[0])
    return Box(lo, hi)


class GridW1:
    """:math:`W_1` between particle clouds (or cell masses) and PDE cell masses on one grid.

    Parameters
    ----------
    domain : MeshDomain
        Uniform interval or rectangle grid, or any 2-D FiPy mesh (e.g. the Gmsh disk): there the
        particles are binned to the cells by :func:`rieszflow.solvers.gibbs.empirical_density`
        (points in the gap between a curved boundary and the mesh go to the nearest cell) and
        the transport is between the cell centroids.
    tol : float
        2-D only: cells with mass ``<= tol`` in both measures are dropped
        (:func:`rieszflow.engine.measures.wasserstein1_grid`).
    """

    def __init__(self, domain, tol: float):
        self.domain = domain
        self.tol = tol
        if domain.d == 1:
            left, right = domain.cell_edges_1d()
            self.edges = np.append(left, right[-1])

    @staticmethod
    def masses(domain, rho) -> np.ndarray:
        """Cell masses ``rho * volume`` renormalised to 1 (the PDE conserves mass to ~1e-12)."""
        m = np.asarray(rho, dtype=np.float64) * domain.volumes
        if (m < 0).any():
            raise ValueError(f"PDE density has negative cells (min {m.min():.3e}); W1 needs a measure")
        return m / m.sum()

    def particles(self, x, pde_masses) -> float:
        """:math:`W_1(\\mu_N, \\rho_h)`: exact CDF formula (1-D) or grid transport (2-D).

        Parameters
        ----------
        x : ndarray, shape (N, d), float64
            Particle positions (host array).
        pde_masses : ndarray, shape (n_cells,), float64
            Cell masses of the PDE on this grid (:meth:`masses`), in FiPy's cell order.

        Returns
        -------
        float
            :math:`W_1` between the particles' empirical measure and ``pde_masses``.
        """
        if self.domain.d == 1:
            return wasserstein1_1d(AtomicMeasure1D(x[:, 0]), CellMeasure1D(self.edges, pde_masses))
        return wasserstein1_grid(self.bin(x), pde_masses, self.domain.centers, self.tol)

    def bin(self, x) -> np.ndarray:
        """Particle mass per cell of this mesh, shape (n_cells,), summing to 1.

        Parameters
        ----------
        x : ndarray, shape (N, d), float64
            Particle positions (host array).

        Returns
        -------
        ndarray, shape (n_cells,), float64
        """
        dom = self.domain
        if dom.is_uniform_grid:
            return bin_to_grid(x, dom.origin, dom.spacing, dom.grid_shape)
        return empirical_density(dom, x, outside="nearest") * dom.volumes

    def cells(self, masses_a, masses_b) -> float:
        """:math:`W_1` between two cell-mass vectors of this grid.

        Parameters
        ----------
        masses_a, masses_b : ndarray, shape (n_cells,), float64
            Cell masses (>= 0, each summing to 1), in FiPy's cell order.

        Returns
        -------
        float
            :math:`W_1` between the two measures.
        """
        if self.domain.d == 1:
            return wasserstein1_1d(CellMeasure1D(self.edges, masses_a), CellMeasure1D(self.edges, masses_b))
        return wasserstein1_grid(masses_a, masses_b, self.domain.centers, self.tol)

    def iid(self, rng, n, pde_masses) -> float:
        """:math:`W_1` of n i.i.d. draws from the PDE density to that density (same metric).

        Parameters
        ----------
        rng : numpy.random.Generator
            Source of the draws.
        n : int
            Number of draws.
        pde_masses : ndarray, shape (n_cells,), float64
            Cell masses of the PDE on this grid (:meth:`masses`), in FiPy's cell order.

        Returns
        -------
        float
            :math:`W_1` between the empirical measure of the draws and ``pde_masses``.
        """
        dom = self.domain
        if dom.d == 1 and dom.is_uniform_grid:
            x = sample_cells(rng, n, pde_masses, dom.origin, dom.spacing, dom.grid_shape)
            return self.particles(x, pde_masses)
        counts = rng.multinomial(n, pde_masses / pde_masses.sum())
        return wasserstein1_grid(counts / n, pde_masses, dom.centers, self.tol)


class LangevinRecorder:
    """Callback of :func:`~rieszflow.engine.simulate.run_langevin` that records a chain to HDF5.

    At N = 10^6 a full record is N d floats per step (24 MB in d = 3); the option
    ``particles`` keeps every particle (the default) or a fixed random subsample, and the
    summaries of the whole cloud are recorded at every record in both cases. The records go
    along the unlimited dimension ``time`` of a :class:`~rieszflow.engine.storage.TrajectoryWriter`
    (the run loop and the writer are unchanged); ``xarray.open_dataset(path, engine="h5netcdf")``
    reads the file.

    Recorded per record (dimension ``time``, coordinate ``t = step * eta``): ``step``,
    ``mean`` (coord), ``second_moment`` :math:`\\frac1N\\sum_k\\|\\omega_k\\|^2`, ``max_radius``,
    ``max_displacement`` (of the last step), ``wall_time`` (seconds since the recorder was
    built), ``energy`` (when an ``energy`` is given: one more evaluation per record) and
    ``omega`` (time, particle, coord) of the recorded particles, whose indices are the
    coordinate ``particle``.

    Parameters
    ----------
    writer : engine.storage.TrajectoryWriter
        An open writer; the recorder declares its dimensions and variables.
    n : int
        Number of particles N of the chain, >= 1.
    d : int
        Dimension, >= 1.
    eta : float
        Step size, > 0 (for the time coordinate).
    particles : "all" or int, default "all"
        Record every particle, or this many (1 <= m <= N) drawn once without replacement
        by ``seed`` and kept for the whole run (sorted indices).
    energy : callable, optional
        ``energy(omega) -> float``, recorded as ``energy`` at each record.
    seed : int, default 0
        Seed of the subsample.

    Raises
    ------
    ValueError
        If ``particles`` is neither "all" nor an integer in [1, N], or ``n``, ``d``, ``eta``
        are out of range.
    """

    def __init__(self, writer, n, d, eta, *, particles="all", energy=None, seed=0):
        import time

        n = check_int("n", n, minimum=1)
        d = check_int("d", d, minimum=1)
        self.eta = check_real("eta", eta, positive=True)
        if isinstance(particles, str) and particles == "all":
            self.index = None
            kept = np.arange(n)
        else:
            m = check_int("particles", particles, minimum=1)
            if m > n:
                raise ValueError(f"particles must be 'all' or an integer in [1, N={n}], got particles={m}")
            kept = np.sort(np.random.default_rng(seed).choice(n, size=m, replace=False))
            self.index = None if m == n else kept
        self.writer, self.energy, self._start = writer, energy, time.perf_counter()
        writer.dimension("time", None, attrs={"long_name": "time t = step * eta", "units": "1"})
        writer.dimension("particle", kept.size, coords=kept.astype(np.int64),
                         attrs={"long_name": "index of a recorded particle", "units": "1"}, dtype="i8")
        writer.dimension("coord", d, coords=np.arange(d, dtype=np.int64),
                         attrs={"long_name": "coordinate axis", "units": "1"}, dtype="i8")
        specs = [("step", ("time",), "i8", "Langevin steps taken"),
                 ("mean", ("time", "coord"), "f8", "mean particle position over all N"),
                 ("second_moment", ("time",), "f8", "mean squared norm of the particles over all N"),
                 ("max_radius", ("time",), "f8", "largest particle norm over all N"),
                 ("max_displacement", ("time",), "f8", "largest particle move of the last step"),
                 ("wall_time", ("time",), "f8", "wall-clock seconds since the recorder was built"),
                 ("omega", ("time", "particle", "coord"), "f8", "positions of the recorded particles")]
        if energy is not None:
            specs.append(("energy", ("time",), "f8", "energy of the configuration"))
        for name, dims, dtype, long_name in specs:
            units = "s" if name == "wall_time" else "1"
            writer.variable(name, dims, dtype=dtype, attrs={"long_name": long_name, "units": units})
        writer.set_attrs(n_particles=n, recorded_particles=int(kept.size))

    def __call__(self, state):
        """Append one record of ``state`` (a LangevinState or MALAState on the host or a device).

        Parameters
        ----------
        state : LangevinState or MALAState
            The chain's state; ``state.omega`` of shape (N, d).
        """
        import time

        omega = state.omega
        xp = namespace(omega)
        sq = xp.sum(omega * omega, axis=1, dtype=xp.float64)
        rec = {"step": state.step, "mean": xp.mean(omega, axis=0, dtype=xp.float64),
               "second_moment": xp.mean(sq), "max_radius": xp.sqrt(xp.max(sq)),
               "max_displacement": xp.asarray(state.max_displacement, dtype=xp.float64),
               "omega": omega if self.index is None else omega[self.index]}
        if self.energy is not None:
            rec["energy"] = xp.asarray(self.energy(omega), dtype=xp.float64)
        rec["wall_time"] = time.perf_counter() - self._start
        self.writer.append("time", rec, coord=state.step * self.eta)
