"""The reflected McKean-Vlasov equation of paper 000, Thm 1, solved with FiPy.

.. math::

    \\partial_t\\rho = \\nabla\\cdot(\\rho\\nabla U_t) + \\beta^{-1}\\Delta\\rho, \\qquad
    U_t = V + \\lambda\\, g_s * \\rho_t, \\qquad
    (\\rho\\nabla U_t + \\beta^{-1}\\nabla\\rho)\\cdot n = 0 \\text{ on } \\partial\\Omega

(paper 000, eq. (4.4)-(4.5), (E.3)-(E.5)), the Wasserstein gradient flow of the
free energy

.. math::

    \\mathcal{F}_\\beta(\\rho) = \\int V\\rho + \\frac{\\lambda}{2}\\iint g_s(x-y)\\rho(x)\\rho(y)
    + \\beta^{-1}\\int \\rho\\log\\rho

(eq. (4.2) plus the entropy, Thm 1).

Scaling conventions (mean field)
--------------------------------
The interaction term :math:`\\lambda\\, g_s * \\rho` is the limit of the particle drift
:math:`\\frac{\\lambda}{N}\\sum_{j \\ne i}\\nabla g_s(x_i - x_j)`, i.e. of the Langevin
dynamics :math:`dX_i = -\\nabla_{x_i} H_N\\,dt + \\sqrt{2/\\beta}\\,dW_i` with

.. math::

    H_N = \\sum_i V(x_i) + \\frac{\\lambda}{2N}\\sum_{i \\ne j} g_s(x_i - x_j)

(particles_pde_reference.md, preamble; ``RieszEnergy(normalization="mean_field")``).
Paper 000 writes the intensive Hamiltonian :math:`\\mathcal{H}_N = \\frac1N\\sum_k V(\\omega_k)
+ \\lambda\\mathcal{W}_{N,s}`, :math:`\\mathcal{W}_{N,s} = \\frac{1}{2N(N-1)}\\sum_{k\\ne l} g_s`
(eq. (2.2)-(2.3)), and compensates with the factor N in the step of eq. (4.3):
:math:`N\\nabla_{\\omega_k}\\mathcal{H}_N = \\nabla V(\\omega_k) + \\frac{\\lambda}{N-1}\\sum_{l\\ne k}\\nabla g_s`
(eq. (E.2)). The two drifts differ by the factor :math:`N/(N-1)` on the
interaction, which vanishes in the limit, so both give this PDE with the same
:math:`\\lambda` and :math:`\\beta`; their stationary laws are
:math:`\\exp(-\\beta H_N) \\approx \\exp(-\\beta N \\mathcal{H}_N)`, i.e. the paper's
:math:`\\beta_N = \\beta N` (eq. (E.7)).

Discretisation
--------------
Cell-centred finite volumes (FiPy 4), written exactly as the mathematics::

    TransientTerm() == DiffusionTerm(coeff=1/beta) + ExponentialConvectionTerm(coeff=Veff.faceGrad)

with ``Veff`` a ``CellVariable`` holding :math:`V_j + \\lambda (A\\rho)_j`
(:mod:`~rieszflow.solvers.mckean_vlasov.convolution`). The exponential (Scharfetter-Gummel)
flux through a face vanishes exactly when :math:`\\rho e^{\\beta V_{\\rm eff}}` takes the
same value in the two cells, so the discrete stationary states are exactly
the discrete Gibbs densities :math:`\\rho_j \\propto e^{-\\beta V_{\\rm eff, j}}`
(:mod:`~rieszflow.solvers.gibbs`). The coefficient must be ``Veff.faceGrad`` (its normal
component is the two-point difference); ``Veff.grad.arithmeticFaceValue``
loses this property (17 % error, particles_pde_reference.md sec. 2.2).

No-flux boundary: FiPy's natural boundary; **no constraint is applied**.

Time stepping: implicit (backward) Euler. The nonlinearity is lagged: each
step makes at most ``max_sweeps`` sweeps; sweep k solves the linear FiPy
equation with a frozen ``Veff`` :math:`= x_k` and maps it to
:math:`G(x_k) = V + \\lambda g_s * \\rho^{(k)}` (the first guess :math:`x_0` extrapolates
``Veff`` linearly from the two previous time levels). The sweeps stop when
:math:`\\beta\\|G(x_k) - x_k\\|_\\infty \\le` ``sweep_tol``; in between, ``Veff`` is
updated by Anderson mixing (:class:`AndersonMixer`; plain Picard with
``anderson_memory=0``), which converges where plain Picard sweeps stall
(their contraction factor grows like :math:`\\lambda\\rho\\sqrt{\\beta\\,dt}`). For every step
the normwise backward error
:math:`\\|L\\rho - b\\|_\\infty/(\\|L\\|_\\infty\\|\\rho\\|_\\infty + \\|b\\|_\\infty)` of the
implicit Euler system is stored, with :math:`L, b` assembled from the accepted
state's own ``Veff`` (the nonlinear residual; it stays meaningful as
:math:`dt \\to \\infty`, unlike a residual relative to :math:`b = |C|\\rho^n/dt`).
A step whose sweeps do not meet ``sweep_tol`` within
``max_sweeps`` is retried with half the step (at most ``max_retries`` times),
then accepted and flagged (``converged`` False). The step
grows by ``dt_growth`` up to ``dt_max`` after steps that needed no halving. The
total number of steps is capped by ``max_steps``.

Linear solves: FiPy's SciPy ``LinearLUSolver`` with ``tolerance`` (default
1e-12, FiPy's own default 1e-5 is too loose for the oracles) and the "RHS"
criterion, passed explicitly so that PETSc/Trilinos are never picked up. Mass
is conserved up to ``dt`` times the linear residual; it is recorded each step.

Backends (``pde_backend``): the FiPy terms above are the definition of the
scheme and stay selectable (``"fipy"``); the default ``"assembled"`` writes the
same matrix out once per mesh and refreshes only the face coefficients that
``Veff`` changes and the diagonal :math:`|C|/\\Delta t`
(:mod:`~rieszflow.solvers.mckean_vlasov.scharfetter_gummel`), with the same stopping rule.
Both give the same densities, free energies and residual records to 1e-12 on
the interval, rectangle and disk meshes (``tests/test_scharfetter_gummel.py``);
the assembled step costs a small multiple of the bare LAPACK/SuperLU solve
instead of FiPy's Python-level assembly (docs/results/bench_pde.md).

References
----------
paper 000, Thm 1 and eq. (4.1)-(4.5); App. E, Thm 4, eq. (E.2)-(E.5), (E.7).
particles_pde_reference.md, sec. 2.2 and 3.4.
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import scipy.special

from rieszflow.engine._checks import check_choice, check_int, check_real
from rieszflow.engine.energy.interaction import Interaction, check_s
from rieszflow.solvers.mckean_vlasov.convolution import Convolution, make_convolution
from rieszflow.solvers.mckean_vlasov.mesh import MeshDomain
from rieszflow.engine.energy.alignment import alignment_potential
from rieszflow.engine.storage import TrajectoryWriter, open_run
from rieszflow.solvers.mckean_vlasov.scharfetter_gummel import ScharfetterGummelOperator

__all__ = [
    "AndersonMixer",
    "MeanFieldProblem",
    "MeanFieldResult",
    "alignment_potential_on_mesh",
    "solve_mckean_vlasov",
    "load_result",
]

RESULT_KIND = "mean_field"


def _cell_values(name: str, domain: MeshDomain, f) -> np.ndarray:
    """Evaluate a callable on the cell centres, or validate an array of cell values."""
    n = domain.n_cells
    if callable(f):
        vals = f(domain.centers.copy())
    else:
        vals = f
    vals = np.asarray(vals, dtype=np.float64)
    if vals.shape != (n,):
        how = f"{name}(x) with x of shape ({n}, {domain.d}) returned" if callable(f) else f"{name} has"
        raise ValueError(f"{how} shape {vals.shape}; expected ({n},) (one value per cell)")
    if not np.isfinite(vals).all():
        raise ValueError(f"{name} has {int(np.count_nonzero(~np.isfinite(vals)))} non-finite cell values")
    return vals


@dataclasses.dataclass(frozen=True, eq=False)
class MeanFieldProblem:
    """External potential, interaction and temperature on a mesh: the data of eq. (4.4).

    Build with :meth:`create` (the constructor used in practice); the parameters are
    also the attributes.

    Parameters
    ----------
    domain : MeshDomain
        The mesh.
    V : ndarray, shape (n_cells,), float64
        External potential :math:`V(x_j)` at the cell centres.
    s : float
        Riesz exponent of :math:`g_s`, ``-2 < s < d``.
    lam : float
        Interaction strength :math:`\\lambda \\ge 0` (mean-field scaling, module docstring).
    beta : float
        Inverse temperature, ``> 0``; ``inf`` is allowed for the zero-temperature
        functions (:mod:`~rieszflow.solvers.equilibrium`) but not for the PDE or Gibbs solvers.
    convolution : Convolution or None
        :math:`\\rho \\mapsto g_s * \\rho`; None when ``lam == 0``.

    References
    ----------
    paper 000, eq. (4.2), (4.4), (E.4).
    """

    domain: MeshDomain
    V: np.ndarray
    s: float
    lam: float
    beta: float
    convolution: Convolution | None

    @classmethod
    def create(cls, domain: MeshDomain, V, *, s=None, lam=None, beta, method: str = "auto",
               interaction: Interaction | None = None) -> "MeanFieldProblem":
        """Validate the data and build the interaction operator.

        Parameters
        ----------
        domain : MeshDomain
        V : callable or array_like
            ``V(x) -> (n_cells,)`` for ``x`` of shape ``(n_cells, d)`` (cell
            centres), or the cell values themselves, shape ``(n_cells,)``.
        s : float
            Riesz exponent, ``-2 < s < d`` (the kernel must be locally integrable).
        lam : float
            Interaction strength, ``>= 0``.
        beta : float
            Inverse temperature, ``> 0`` (``inf`` allowed, see class docstring).
        method : {"auto", "direct", "fft"}, default "auto"
            Convolution method (:func:`make_convolution`).
        interaction : rieszflow.engine.energy.Interaction, optional
            The pair interaction as the particle systems specify it (the one specification
            shared by particles and PDE); gives ``s`` and ``lam`` (then they must not be
            passed). Its softening must be 0: the PDE uses the exact cell-averaged kernel.

        Returns
        -------
        MeanFieldProblem

        Raises
        ------
        TypeError
            If ``domain`` is not a MeshDomain.
        ValueError
            On out-of-range ``s``, ``lam``, ``beta`` or bad ``V`` values/shape.
        """
        if not isinstance(domain, MeshDomain):
            raise TypeError(f"domain must be a MeshDomain, got {type(domain).__name__}")
        if interaction is not None:
            if not isinstance(interaction, Interaction):
                raise TypeError(f"interaction must be an Interaction, got {type(interaction).__name__}")
            if s is not None or lam is not None:
                raise ValueError("pass either interaction or (s, lam), not both")
            if interaction.softening != 0.0:
                raise ValueError(f"interaction.softening={interaction.softening!r}: the PDE uses the "
                                 f"exact cell-averaged kernel; use softening=0")
            s, lam = interaction.s, interaction.lam
        elif s is None or lam is None:
            raise ValueError("MeanFieldProblem.create needs s and lam (or interaction=Interaction(s, lam))")
        s = check_s(s, d=domain.d)
        lam = check_real("lam", lam, nonnegative=True)
        beta = check_real("beta", beta, positive=True, allow_inf=True)
        Vc = _cell_values("V", domain, V)
        conv = make_convolution(domain, s, method) if lam > 0 else None
        return cls(domain=domain, V=Vc, s=s, lam=lam, beta=beta, convolution=conv)

    def replace(self, **changes) -> "MeanFieldProblem":
        """Copy with some fields changed.

        Parameters
        ----------
        **changes
            Any of ``V`` (callable or cell values), ``s``, ``lam``, ``beta``.
            Changing ``s``, or ``lam`` from 0, rebuilds the convolution.

        Returns
        -------
        MeanFieldProblem

        Raises
        ------
        ValueError
            On an unknown field or an invalid value.
        """
        allowed = {"V", "s", "lam", "beta"}
        bad = set(changes) - allowed
        if bad:
            raise ValueError(f"replace: unknown fields {sorted(bad)}; allowed: {sorted(allowed)}")
        s = changes.get("s", self.s)
        lam = changes.get("lam", self.lam)
        if s != self.s or (lam > 0 and self.convolution is None):
            method = self.convolution.method if self.convolution is not None else "auto"
            return MeanFieldProblem.create(self.domain, changes.get("V", self.V), s=s, lam=lam,
                                           beta=changes.get("beta", self.beta), method=method)
        lam = check_real("lam", lam, nonnegative=True)
        beta = check_real("beta", changes.get("beta", self.beta), positive=True, allow_inf=True)
        Vc = _cell_values("V", self.domain, changes.get("V", self.V))
        return MeanFieldProblem(self.domain, Vc, self.s, lam, beta,
                                self.convolution if lam > 0 else None)

    # -- functionals -------------------------------------------------------------------------
    def check_density(self, rho, name: str = "rho") -> np.ndarray:
        """Validate cell values of a density (finite, ``>= 0``, shape ``(n_cells,)``).

        Parameters
        ----------
        rho : callable or array_like
            Cell values, or a callable evaluated on the cell centres.
        name : str
            Parameter name used in error messages.

        Returns
        -------
        ndarray, shape (n_cells,), float64

        Raises
        ------
        ValueError
            On a wrong shape, non-finite or negative values.
        """
        rho = _cell_values(name, self.domain, rho)
        if rho.min() < 0:
            raise ValueError(f"{name} must be >= 0 in every cell, got min {rho.min():.3e}")
        return rho

    def mass(self, rho) -> float:
        """Total mass :math:`\\sum_j |C_j|\\rho_j`.

        Parameters
        ----------
        rho : ndarray, shape (n_cells,)

        Returns
        -------
        float
        """
        return float(np.dot(self.domain.volumes, rho))

    def interaction_potential(self, rho) -> np.ndarray:
        """Interaction potential :math:`\\lambda (g_s * \\rho)(x_j)` at the cell centres.

        Parameters
        ----------
        rho : ndarray, shape (n_cells,)

        Returns
        -------
        ndarray, shape (n_cells,)
            Zeros when ``lam == 0``.

        References
        ----------
        paper 000, eq. (E.4).
        """
        if self.convolution is None:
            return np.zeros(self.domain.n_cells)
        return self.lam * self.convolution(rho)

    def effective_potential(self, rho) -> np.ndarray:
        """Effective potential :math:`U = V + \\lambda g_s * \\rho` at the cell centres.

        Parameters
        ----------
        rho : ndarray, shape (n_cells,)

        Returns
        -------
        ndarray, shape (n_cells,)

        References
        ----------
        paper 000, eq. (4.4), (E.4).
        """
        return self.V + self.interaction_potential(rho)

    def energy(self, rho) -> float:
        """Discrete :math:`\\mathcal{E}_s(\\rho) = \\int V\\rho + \\frac\\lambda2\\iint g_s\\rho\\rho` (eq. (4.2)).

        Parameters
        ----------
        rho : array_like, shape (n_cells,)

        Returns
        -------
        float
            :math:`\\sum_j |C_j|\\rho_j (V_j + \\tfrac12\\lambda (A\\rho)_j)`.
        """
        rho = self.check_density(rho)
        vol = self.domain.volumes
        return float(np.dot(vol * rho, self.V + 0.5 * self.interaction_potential(rho)))

    def entropy(self, rho) -> float:
        """Relative entropy to Lebesgue measure, :math:`\\mathrm{Ent}(\\rho|\\ell) = \\int\\rho\\log\\rho`.

        Parameters
        ----------
        rho : array_like, shape (n_cells,), ``>= 0`` (0 log 0 = 0)

        Returns
        -------
        float

        Raises
        ------
        ValueError
            On an invalid density.

        References
        ----------
        paper 000, Thm 2 / Thm 6 (Ent).
        """
        rho = self.check_density(rho)
        return float(np.dot(self.domain.volumes, scipy.special.xlogy(rho, rho)))

    def free_energy(self, rho) -> float:
        """Discrete free energy :math:`\\mathcal{F}_\\beta = \\mathcal{E}_s + \\beta^{-1}\\mathrm{Ent}` (Thm 1).

        Parameters
        ----------
        rho : array_like, shape (n_cells,)

        Returns
        -------
        float

        Raises
        ------
        ValueError
            If ``beta`` is infinite (use :meth:`energy`) or ``rho`` is invalid.

        References
        ----------
        paper 000, eq. (4.2) and the identity after (4.5).
        """
        if not math.isfinite(self.beta):
            raise ValueError("free_energy needs a finite beta; at beta=inf use energy()")
        return self.energy(rho) + self.entropy(rho) / self.beta

    def config(self) -> dict:
        """Scalar description of the problem (stored with results).

        Returns
        -------
        dict
            ``s``, ``lam``, ``beta``, ``d``, the mesh kind, size and parameters.
        """
        return {"s": self.s, "lam": self.lam, "beta": self.beta, "d": self.domain.d,
                "domain_kind": self.domain.kind, "n_cells": self.domain.n_cells,
                "convolution": None if self.convolution is None else self.convolution.method,
                **{f"domain_{k}": v for k, v in self.domain.params.items()}}


def alignment_potential_on_mesh(domain: MeshDomain, X, y) -> np.ndarray:
    """Phase-averaged alignment potential :math:`V_{\\mathcal{D}}` of random Fourier features at the cell centres.

    .. math::

        V_{\\mathcal{D}}(\\omega) = -\\frac{1}{n(n-1)}\\sum_{i\\ne j} y_i y_j\\cos(\\omega^\\top(x_i-x_j))
        = -\\frac{1}{n(n-1)}\\Big(\\Big|\\sum_i y_i e^{i\\omega^\\top x_i}\\Big|^2 - \\sum_i y_i^2\\Big),

    eq. (4.1) with :math:`\\phi_{\\omega,b} = \\sqrt2\\cos(\\omega^\\top x + b)` averaged over the
    phase b (Lemma 3, eq. (B.8)-(B.9), diagonal i = j excluded). Computed by
    :func:`~rieszflow.engine.energy.alignment.alignment_potential`.

    Parameters
    ----------
    domain : MeshDomain
        Frequency domain :math:`\\Omega` (the particles are the frequencies).
    X : array_like, shape (n, d), n >= 2
        Training inputs, ``d == domain.d``.
    y : array_like, shape (n,)
        Labels.

    Returns
    -------
    ndarray, shape (n_cells,), float64

    Raises
    ------
    ValueError
        On inconsistent shapes or non-finite data.

    References
    ----------
    paper 000, eq. (4.1), (B.8)-(B.9).
    """
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[1] != domain.d:
        raise ValueError(f"X must have shape (n, {domain.d}) to match the domain, got {X.shape}")
    return np.asarray(alignment_potential(domain.centers, X, y), dtype=np.float64)


# --------------------------------------------------------------------------- Anderson mixing

class AndersonMixer:
    """Anderson acceleration of a fixed-point iteration :math:`x = G(x)` (type II, Walker-Ni).

    With residuals :math:`f_k = G(x_k) - x_k` and the last ``memory`` differences
    :math:`\\Delta X, \\Delta F`, the next iterate is

    .. math::

        x_{k+1} = x_k + \\alpha f_k - (\\Delta X + \\alpha\\Delta F)\\gamma_k, \\qquad
        \\gamma_k = \\arg\\min_\\gamma \\|W^{1/2}(f_k - \\Delta F\\gamma)\\|_2,

    a damped Picard step (``mixing`` :math:`\\alpha`) corrected by a least-squares
    combination of past steps; for a linear map it is equivalent to GMRES. The
    history is cleared when the residual grows tenfold over the best one seen
    (restart safeguard). The caller owns the (capped) iteration loop.

    Parameters
    ----------
    memory : int, default 5
        Number of stored differences (0: plain damped Picard).
    mixing : float, default 1.0
        Damping :math:`\\alpha \\in (0, 1]`.
    weights : ndarray, shape (n,), optional
        Quadrature weights :math:`W` of the inner product (cell volumes), so that
        the least-squares problem does not depend on the mesh.

    Raises
    ------
    ValueError
        If ``memory < 0`` or ``mixing`` is not in (0, 1].

    References
    ----------
    H. F. Walker, P. Ni, "Anderson acceleration for fixed-point iterations",
    SIAM J. Numer. Anal. 49 (2011) 1715-1735.
    """

    def __init__(self, memory: int = 5, mixing: float = 1.0, weights=None):
        self.memory = check_int("memory", memory, minimum=0)
        self.mixing = check_real("mixing", mixing, positive=True)
        if self.mixing > 1.0:
            raise ValueError(f"mixing must be in (0, 1], got {mixing}")
        self.sqrt_w = None if weights is None else np.sqrt(np.asarray(weights, dtype=np.float64))
        self._x = self._f = None
        self._dx: list = []
        self._df: list = []
        self._best = math.inf

    def update(self, x, gx) -> np.ndarray:
        """Return the next iterate from the current one and its image.

        Parameters
        ----------
        x, gx : ndarray, shape (n,)
            Current iterate and :math:`G(x)`.

        Returns
        -------
        ndarray, shape (n,)
        """
        x = np.asarray(x, dtype=np.float64)
        f = np.asarray(gx, dtype=np.float64) - x
        fw = f if self.sqrt_w is None else f * self.sqrt_w
        norm = float(np.linalg.norm(fw))
        if norm > 10.0 * self._best:
            self._dx.clear()
            self._df.clear()
        elif self._x is not None and self.memory > 0:
            self._dx.append(x - self._x)
            self._df.append(f - self._f)
            if len(self._dx) > self.memory:
                self._dx.pop(0)
                self._df.pop(0)
        self._best = min(self._best, norm)
        self._x, self._f = x, f
        step = x + self.mixing * f
        if self._df:
            dF = np.stack(self._df, axis=1)
            dX = np.stack(self._dx, axis=1)
            dFw = dF if self.sqrt_w is None else dF * self.sqrt_w[:, None]
            gamma = np.linalg.lstsq(dFw, fw, rcond=1e-12)[0]
            step = step - (dX + self.mixing * dF) @ gamma
        return step


# ----------------------------------------------------------------------------------- results

_STEP_FIELDS = ("step_time", "dt", "mass", "min_rho", "free_energy", "dissipation", "residual",
                "sweeps", "converged")


@dataclasses.dataclass(frozen=True, eq=False)
class MeanFieldResult:
    """A McKean-Vlasov run: density snapshots and per-step diagnostics.

    Parameters
    ----------
    times : ndarray, shape (n_snapshots,)
        Snapshot times (0 and the final time included).
    rho : ndarray, shape (n_snapshots, n_cells)
        Cell densities at ``times``.
    step_time, dt : ndarray, shape (n_steps + 1,)
        Time after each step (entry 0: the initial state, ``dt = 0``).
    mass, min_rho, free_energy : ndarray, shape (n_steps + 1,)
        :math:`\\sum|C_j|\\rho_j`, :math:`\\min_j\\rho_j`, :math:`\\mathcal{F}_\\beta(\\rho)` after each step.
    dissipation : ndarray, shape (n_steps + 1,)
        :math:`(\\mathcal{F}^{n-1} - \\mathcal{F}^n)/dt_n` (NaN for entry 0); the discrete
        analogue of :math:`\\int\\rho|\\nabla(U + \\beta^{-1}\\log\\rho)|^2 \\ge 0`.
    residual : ndarray, shape (n_steps + 1,)
        Normwise backward error :math:`\\|L\\rho - b\\|_\\infty/(\\|L\\|_\\infty\\|\\rho\\|_\\infty + \\|b\\|_\\infty)`
        of the implicit Euler system at the accepted state, with :math:`L, b` assembled
        from its own ``Veff`` (module docstring; 0 for entry 0).
    sweeps : ndarray of int, shape (n_steps + 1,)
        Picard sweeps used (including those of rejected tries).
    converged : ndarray of bool, shape (n_steps + 1,)
        The sweeps of the step met ``sweep_tol`` (always True when ``lam == 0``).
    centers : ndarray, shape (n_cells, d)
        Cell centres of the mesh.
    volumes : ndarray, shape (n_cells,)
        Cell volumes of the mesh.
    config : dict
        Problem, mesh, time-stepping and linear-solver settings.
    completed : bool
        False if ``max_steps`` stopped the run before ``t_end``.

    References
    ----------
    paper 000, eq. (4.4)-(4.5) (the solved equation), Thm 1 (dissipation identity).
    """

    times: np.ndarray
    rho: np.ndarray
    step_time: np.ndarray
    dt: np.ndarray
    mass: np.ndarray
    min_rho: np.ndarray
    free_energy: np.ndarray
    dissipation: np.ndarray
    residual: np.ndarray
    sweeps: np.ndarray
    converged: np.ndarray
    centers: np.ndarray
    volumes: np.ndarray
    config: dict
    completed: bool

    @property
    def final(self) -> np.ndarray:
        """Density at the last snapshot, shape ``(n_cells,)``."""
        return self.rho[-1]

    def to_xarray(self):
        """The run as an :class:`xarray.Dataset`.

        Dimensions ``time`` (snapshots), ``step``, ``cell``; cell coordinates
        ``x`` (and ``y`` in 2-D) and ``volume`` are variables over ``cell``.

        Returns
        -------
        xarray.Dataset
        """
        import xarray as xr

        data = {"rho": (("time", "cell"), self.rho), "volume": (("cell",), self.volumes)}
        for k, name in enumerate("xy"[: self.centers.shape[1]]):
            data[name] = (("cell",), self.centers[:, k])
        for f in _STEP_FIELDS:
            v = getattr(self, f)
            data[f] = (("step",), v.astype(np.int8) if f == "converged" else v)
        attrs = {k: (v if isinstance(v, (int, float, str)) else str(v)) for k, v in self.config.items()}
        attrs["completed"] = int(self.completed)
        return xr.Dataset(data, coords={"time": self.times, "step": np.arange(self.step_time.size)},
                          attrs=attrs)

    def to_hdf5(self, path, *, overwrite: bool = False) -> Path:
        """Write the run through :class:`~rieszflow.engine.storage.TrajectoryWriter` (kind ``"mean_field"``).

        Parameters
        ----------
        path : str or os.PathLike
            HDF5 file to write.
        overwrite : bool, default False
            Replace an existing file (otherwise it raises FileExistsError).

        Returns
        -------
        pathlib.Path

        Notes
        -----
        Read back with :func:`load_result` or ``engine.storage.open_run(path, "mean_field")``.
        """
        path = Path(path)
        n_cells = self.volumes.size
        with TrajectoryWriter(path, RESULT_KIND, config=self.config,
                              attrs={"completed": int(self.completed)}, overwrite=overwrite) as w:
            w.dimension("cell", n_cells, coords=np.arange(n_cells))
            w.dimension("time", None, attrs={"long_name": "snapshot time"})
            w.dimension("step", None, attrs={"long_name": "time step index"})
            w.variable("volume", ("cell",), data=self.volumes, attrs={"long_name": "cell volume"})
            for k, name in enumerate("xy"[: self.centers.shape[1]]):
                w.variable(name, ("cell",), data=self.centers[:, k],
                           attrs={"long_name": f"cell centre, coordinate {name}"})
            w.variable("rho", ("time", "cell"), attrs={"long_name": "density (cell value)"})
            for f in _STEP_FIELDS:
                w.variable(f, ("step",), dtype="i8" if f in ("sweeps", "converged") else "f8")
            for t, r in zip(self.times, self.rho):
                w.append("time", {"rho": r}, coord=float(t))
            for i in range(self.step_time.size):
                w.append("step", {f: getattr(self, f)[i] for f in _STEP_FIELDS}, coord=float(i))
        return path


def load_result(path):
    """Open a file written by :meth:`MeanFieldResult.to_hdf5` as an :class:`xarray.Dataset`.

    Parameters
    ----------
    path : str or os.PathLike

    Returns
    -------
    xarray.Dataset

    Raises
    ------
    FileNotFoundError, engine.storage.RunFileError

    References
    ----------
    :mod:`~rieszflow.engine.storage` (file format).
    """
    return open_run(path, RESULT_KIND)


# ------------------------------------------------------------------------------------ solver

def _save_schedule(t_end, save_times):
    if save_times is None:
        pts = np.array([0.0, t_end])
    else:
        pts = np.asarray(save_times, dtype=np.float64).ravel()
        if pts.size == 0:
            raise ValueError("save_times must hold at least one time in [0, t_end] (0 and t_end are "
                             "always saved), got an empty sequence; pass save_times=None for just 0 and t_end")
        if not np.isfinite(pts).all() or pts.min() < 0 or pts.max() > t_end:
            raise ValueError(f"save_times must lie in [0, t_end={t_end}], got min {pts.min()}, max {pts.max()}")
        pts = np.unique(np.concatenate([[0.0, t_end], pts]))
    return pts


#: Backends of the linear sweeps of :func:`solve_mckean_vlasov`.
PDE_BACKENDS = ("assembled", "fipy")


class _FiPyStep:
    """The implicit Euler sweep as FiPy terms: the definition of the discretisation."""

    solver_name = "fipy.solvers.scipy.LinearLUSolver"

    def __init__(self, problem, rho0, tolerance):
        import fipy
        from fipy.solvers.scipy import LinearLUSolver

        mesh = problem.domain.mesh
        self.var = fipy.CellVariable(mesh=mesh, value=rho0.copy(), hasOld=True, name="rho")
        self.veff = fipy.CellVariable(mesh=mesh, value=problem.effective_potential(rho0), name="Veff")
        self.eq = (fipy.TransientTerm() == fipy.DiffusionTerm(coeff=1.0 / problem.beta)
                   + fipy.ExponentialConvectionTerm(coeff=self.veff.faceGrad))
        self.solver = LinearLUSolver(tolerance=tolerance, criterion="RHS", iterations=10)
        self.eq.cacheMatrix()
        self.eq.cacheRHSvector()

    @property
    def rho(self):
        return np.asarray(self.var.value)

    def begin(self, old):
        """Start a time step from the density ``old``."""
        self.var.setValue(old)
        self.var.updateOld()

    def sweep(self, veff, dt):
        """Solve the linear system with ``Veff`` frozen at ``veff``; the iterate becomes its solution."""
        self.veff.setValue(veff)
        self.eq.sweep(var=self.var, dt=dt, solver=self.solver)

    def backward_error(self, veff, dt):
        """Normwise backward error of L rho = b at the current iterate, L and b built with ``veff``."""
        self.veff.setValue(veff)
        r = np.asarray(self.eq.justResidualVector(var=self.var, dt=dt, solver=self.solver))
        L = self.eq.matrix.matrix
        b = np.asarray(self.eq.RHSvector)
        x = self.rho
        scale = float(abs(L).sum(axis=1).max()) * np.max(np.abs(x)) + np.max(np.abs(b))
        return float(np.max(np.abs(r)) / scale)


class _AssembledStep:
    """The same sweep with the matrix assembled directly (``scharfetter_gummel``)."""

    def __init__(self, problem, rho0, tolerance):
        self.op = ScharfetterGummelOperator(problem.domain, problem.beta)
        self.solver_name = ("scipy.linalg.lapack.dgttrf/dgttrs" if self.op.banded
                            else "scipy.sparse.linalg.splu") + " (FiPy's RHS criterion)"
        self.tolerance = tolerance
        self.rho = np.array(rho0, dtype=np.float64)
        self.old = self.rho.copy()

    def begin(self, old):
        """Start a time step from the density ``old``."""
        self.old = np.array(old, dtype=np.float64)
        self.rho = self.old.copy()

    def sweep(self, veff, dt):
        """Solve the linear system with ``Veff`` frozen at ``veff``; the iterate becomes its solution."""
        self.rho = self.op.solve(veff, dt, self.old, self.rho, self.tolerance)

    def backward_error(self, veff, dt):
        """Normwise backward error of M rho = b at the current iterate, M and b built with ``veff``."""
        return self.op.backward_error(veff, dt, self.old, self.rho)


def solve_mckean_vlasov(problem: MeanFieldProblem, rho0, *, t_end, dt, dt_max=None,
                        dt_growth: float = 1.0, save_times=None, max_sweeps: int = 12,
                        sweep_tol: float = 1e-8, anderson_memory: int = 5, max_retries: int = 6,
                        tolerance: float = 1e-12,
                        max_steps: int = 100_000, unit_mass: bool = True,
                        progress: bool = False, pde_backend: str = "assembled") -> MeanFieldResult:
    """Integrate the McKean-Vlasov equation (4.4)-(4.5) with FiPy (implicit Euler, lagged drift).

    Parameters
    ----------
    problem : MeanFieldProblem
        Potential, interaction and ``beta`` (finite) on a mesh.
    rho0 : callable or array_like
        Initial density: ``rho0(x)`` on the cell centres (x of shape
        ``(n_cells, d)``) or cell values, shape ``(n_cells,)``; ``>= 0``.
    t_end : float
        Final time, > 0 (time unit of eq. (4.4)).
    dt : float
        First time step, ``0 < dt <= t_end``.
    dt_max : float, optional
        Largest step (default ``dt``).
    dt_growth : float, default 1.0
        Factor ``>= 1`` applied to the step after each converged step.
    save_times : array_like, optional
        Snapshot times in ``[0, t_end]`` (hit exactly); 0 and ``t_end`` are always saved.
    max_sweeps : int, default 12
        Sweeps per step at most (one linear solve each; 1 when ``lam == 0``).
    sweep_tol : float, default 1e-8
        The sweeps stop, and the step counts as converged, when
        :math:`\\beta\\max_j|U(\\rho^{(k)})_j - V^{(k)}_{{\\rm eff},j}| \\le` ``sweep_tol``
        (the drift used in the solve reproduces itself).
    anderson_memory : int, default 5
        Memory of the Anderson mixing of ``Veff`` across sweeps (0: plain Picard).
    max_retries : int, default 6
        Halvings of a step whose sweeps did not converge before it is accepted
        anyway (and flagged in ``converged``).
    tolerance : float, default 1e-12
        Tolerance of the LU solver (FiPy "RHS" criterion).
    max_steps : int, default 100000
        Cap on accepted steps; the run stops early (``completed=False``) when reached.
    unit_mass : bool, default True
        Rescale ``rho0`` to unit mass (its original mass is stored as ``config['rho0_mass']``).
        With False, the mass must already be 1 within 1e-10.
    progress : bool, default False
        Show a tqdm progress bar over time.
    pde_backend : {"assembled", "fipy"}, default "assembled"
        Who builds and solves each sweep's linear system. ``"fipy"``: FiPy's term
        algebra (the definition of the scheme, module docstring). ``"assembled"``: the
        same matrix written out once per mesh, coefficients refreshed per sweep,
        solved by LAPACK (1-D, tridiagonal) or SuperLU with FiPy's stopping rule
        (:class:`~rieszflow.solvers.mckean_vlasov.scharfetter_gummel.ScharfetterGummelOperator`);
        equal to the FiPy path to 1e-12 (``tests/test_scharfetter_gummel.py``) and much faster.

    Returns
    -------
    MeanFieldResult

    Raises
    ------
    ValueError
        On non-finite ``beta``, bad step parameters, an empty or out-of-range
        ``save_times``, an invalid ``rho0`` or an unknown ``pde_backend``.

    References
    ----------
    paper 000, Thm 1, eq. (4.4)-(4.5); App. E eq. (E.3)-(E.5).
    particles_pde_reference.md sec. 2.2 (FiPy set-up), 3.4 (dissipation).
    """
    import fipy

    if not isinstance(problem, MeanFieldProblem):
        raise TypeError(f"problem must be a MeanFieldProblem, got {type(problem).__name__}")
    if not math.isfinite(problem.beta):
        raise ValueError("solve_mckean_vlasov needs a finite beta; for beta=inf use "
                         "solvers.equilibrium (zero-temperature minimisers)")
    t_end = check_real("t_end", t_end, positive=True)
    dt = check_real("dt", dt, positive=True)
    if dt > t_end:
        raise ValueError(f"dt must be <= t_end, got dt={dt}, t_end={t_end}")
    dt_max = dt if dt_max is None else check_real("dt_max", dt_max, positive=True)
    if dt_max < dt:
        raise ValueError(f"dt_max must be >= dt, got dt_max={dt_max}, dt={dt}")
    dt_growth = check_real("dt_growth", dt_growth)
    if dt_growth < 1.0:
        raise ValueError(f"dt_growth must be >= 1, got {dt_growth}")
    max_sweeps = check_int("max_sweeps", max_sweeps, minimum=1)
    anderson_memory = check_int("anderson_memory", anderson_memory, minimum=0)
    sweep_tol = check_real("sweep_tol", sweep_tol, positive=True)
    max_retries = check_int("max_retries", max_retries, minimum=0)
    tolerance = check_real("tolerance", tolerance, positive=True)
    max_steps = check_int("max_steps", max_steps, minimum=1)
    check_choice("pde_backend", pde_backend, PDE_BACKENDS)
    saves = _save_schedule(t_end, save_times)

    dom = problem.domain
    vol = dom.volumes
    r0 = problem.check_density(rho0, "rho0")
    m0 = problem.mass(r0)
    if not m0 > 0:
        raise ValueError(f"rho0 must have positive mass, got {m0}")
    if unit_mass:
        r0 = r0 / m0
    elif abs(m0 - 1.0) > 1e-10:
        raise ValueError(f"rho0 has mass {m0!r}; pass unit_mass=True or a unit-mass density")

    beta = problem.beta
    nonlinear = problem.lam > 0
    linear = (_FiPyStep if pde_backend == "fipy" else _AssembledStep)(problem, r0, tolerance)

    rows = {f: [] for f in _STEP_FIELDS}

    def record(t, step_dt, r, F_prev, res, sweeps, ok):
        # a negative cell would be reported through min_rho (and F = NaN), never clipped
        F = problem.free_energy(r) if r.min() >= 0 else math.nan
        rows["step_time"].append(t)
        rows["dt"].append(step_dt)
        rows["mass"].append(float(np.dot(vol, r)))
        rows["min_rho"].append(float(r.min()))
        rows["free_energy"].append(F)
        rows["dissipation"].append(math.nan if F_prev is None else (F_prev - F) / step_dt)
        rows["residual"].append(res)
        rows["sweeps"].append(sweeps)
        rows["converged"].append(ok)
        return F

    F = record(0.0, 0.0, r0, None, 0.0, 0, True)
    snaps_t, snaps = [0.0], [r0.copy()]
    next_save = 1
    t = 0.0
    h = dt
    n_steps = 0
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=t_end, desc="mckean_vlasov",
                   bar_format="{l_bar}{bar}| t={n:.4g}/{total:.4g} [{elapsed}<{remaining}]")
    eps_t = 1e-12 * t_end
    u_prev, dt_prev = None, dt
    while t < t_end - eps_t and n_steps < max_steps:
        target = saves[next_save]
        limited = target - t < h  # this step is shortened to land on a snapshot time
        step = min(h, target - t)
        old = linear.rho.copy()
        u_old = problem.effective_potential(old) if nonlinear else problem.V
        total_sweeps = 0
        for attempt in range(max_retries + 1):
            linear.begin(old)
            x = u_old
            if nonlinear and u_prev is not None:  # linear extrapolation in time: O(dt^2) first guess
                x = u_old + (step / dt_prev) * (u_old - u_prev)
            mixer = AndersonMixer(anderson_memory, weights=vol)
            ok = not nonlinear  # a linear step is exact up to the LU tolerance
            for _ in range(max_sweeps if nonlinear else 1):
                linear.sweep(x, step)
                total_sweeps += 1
                if not nonlinear:
                    break
                gx = problem.effective_potential(linear.rho)
                if beta * np.max(np.abs(gx - x)) <= sweep_tol:  # Veff consistent with rho
                    ok = True
                    break
                x = mixer.update(x, gx)
            if ok or attempt == max_retries:
                break
            step = 0.5 * step
        res = linear.backward_error(problem.effective_potential(linear.rho) if nonlinear else x, step)
        t = t + step
        if abs(t - target) <= eps_t:
            t = target
        n_steps += 1
        u_prev, dt_prev = u_old, step
        r = linear.rho.copy()
        F = record(t, step, r, F, res, total_sweeps, bool(ok))
        if t == target:
            snaps_t.append(t)
            snaps.append(r)
            next_save += 1
        if attempt > 0:
            h = step  # the step had to be halved: continue with the step that worked
        elif not limited:
            h = min(h * dt_growth, dt_max)
        if bar is not None:
            bar.update(step)
    if bar is not None:
        bar.close()
    completed = t >= t_end - eps_t
    if not completed and snaps_t[-1] != t:
        snaps_t.append(t)
        snaps.append(linear.rho.copy())

    config = {**problem.config(), "t_end": t_end, "dt": dt, "dt_max": dt_max, "dt_growth": dt_growth,
              "max_sweeps": max_sweeps, "sweep_tol": sweep_tol, "anderson_memory": anderson_memory,
              "max_retries": max_retries,
              "max_steps": max_steps, "rho0_mass": m0, "unit_mass": unit_mass,
              "pde_backend": pde_backend, "linear_solver": linear.solver_name, "linear_tolerance": tolerance,
              "linear_criterion": "RHS", "scheme": "implicit Euler, ExponentialConvectionTerm "
              "(Scharfetter-Gummel), Veff lagged, Anderson-mixed sweeps", "fipy_version": fipy.__version__}
    arr = {f: np.asarray(v) for f, v in rows.items()}
    return MeanFieldResult(times=np.asarray(snaps_t), rho=np.asarray(snaps),
                           step_time=arr["step_time"].astype(np.float64), dt=arr["dt"].astype(np.float64),
                           mass=arr["mass"], min_rho=arr["min_rho"], free_energy=arr["free_energy"],
                           dissipation=arr["dissipation"], residual=arr["residual"],
                           sweeps=arr["sweeps"].astype(np.int64), converged=arr["converged"].astype(bool),
                           centers=dom.centers.copy(), volumes=vol.copy(), config=config,
                           completed=bool(completed))
