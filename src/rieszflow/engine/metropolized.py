"""The Metropolized Euler-Maruyama step of a mean-field particle system: the dynamics, not only its law.

Why
---
For a singular repulsion (Coulomb :math:`g_1 = 1/r` in 3-D) the Euler-Maruyama step of the
particle system (paper 000, eq. (E.2)) gives a pair at distance r a kick of order
:math:`\\eta\\lambda/(N r^2)`. In continuous time the repulsion keeps the pair apart; one explicit
step instead throws it across the domain, and the kicks are heavy-tailed (their second moment
diverges at r -> 0), so the step, not N, sets the finite-N statistics (docs/studies_mean_field.md).

The step
--------
For the Hamiltonian :math:`H_N(x) = \\sum_i V(x_i) + \\frac{\\lambda}{2N}\\sum_{i\\ne j} g_s(x_i -
x_j)` with :math:`V(x) = \\gamma|x|^2/2` (the mean-field normalisation of
:func:`~rieszflow.solvers.particles.make_interaction`), the drift of particle k is
:math:`b_k(z) = -\\nabla_k H_N = -\\gamma z - \\frac{\\lambda}{N}\\sum_{l\\ne k}\\nabla g_s(z - x_l)`.
One sweep visits k = 0..N-1 in order and, with the others at their current positions
(``sweep="sequential"``) or at their positions at the start of the sweep (``"simultaneous"``),

1. proposes the Euler-Maruyama move :math:`y = x_k + \\eta\\,b_k(x_k) + \\sqrt{2\\eta/\\beta}\\,\\xi_k`;
2. rejects it when y leaves the box;
3. accepts it with probability
   :math:`\\min\\{1, e^{-\\beta(H_N(y; x_{-k}) - H_N(x_k; x_{-k}))}\\,q(x_k\\mid y)/q(y\\mid x_k)\\}`,
   where :math:`q(y\\mid x) \\propto \\exp(-\\beta|y - x - \\eta b_k(x)|^2/(4\\eta))` is the Euler
   proposal density.

In the sequential sweep each update is a Metropolis-Hastings step of the full conditional, so every
sweep leaves the Gibbs measure :math:`\\propto e^{-\\beta H_N}\\,1_{\\Omega^N}` exactly invariant
(Metropolis within Gibbs). Where the drift is smooth on the scale of one step the rejection
probability of a move is :math:`O(\\eta^{3/2})` and the step is the Euler-Maruyama step; a move
that a collision kick would make is rejected instead. Near close pairs the rejections are more
frequent: measured in the 3-D Coulomb problem of the bias study at N = 1e3, the rejected fraction
is 0.030, 0.018, 0.010 and 0.005 at :math:`\\eta` = 0.025, 0.0125, 0.00625 and 0.003125 (about
linear in :math:`\\eta`). Metropolized Euler schemes are pathwise accurate on finite time intervals
(Bou-Rabee and Vanden-Eijnden 2010) and weakly accurate (Bou-Rabee, Donev and Vanden-Eijnden 2014);
updating particle by particle (not one joint proposal for all N particles, whose acceptance would
decay with N) is the choice made here. (Unlike
:func:`~rieszflow.engine.simulate.mala_within_gibbs`, a sampler of the Gibbs law whose proposals
use only the one-body drift, every proposal here is the Euler move of the dynamics.)

The order of the updates matters. With ``sweep="sequential"`` particle k sees the particles
before it already moved: every update is an exact Metropolis-Hastings step, but even with every
move accepted the sweep is Euler-Maruyama in visiting order (a Gauss-Seidel sweep), and the pair
forces no longer cancel in the sum, so the centre of mass, an exact Ornstein-Uhlenbeck process
of the continuous dynamics, picks up an O(eta) error. With ``sweep="simultaneous"`` every
particle sees the configuration at the start of the sweep: with every move accepted the sweep is
exactly the Euler-Maruyama step, and the accept/reject test only filters moves (a filter of
collision kicks, not an exact Metropolis-Hastings step of the joint law).

Measured limitation: in the antithetic estimator of the mean-field bias
(:mod:`~rieszflow.studies.mean_field.antithetic`) the rejections themselves carry an
N-dependent error of the size of the O(1/N) bias: the first moment, whose bias is exactly 0 in
the limit dynamics, reads b = 1.5-2.2 (3-6 SE) at N = 1e3 in 2-D with either sweep
(docs/studies_mean_field.md, step checks). The step removes the collision kicks; it does not
make a bias ladder decidable.

Direct pair sums, O(N^2 d) per sweep, in Numba (``engine.energy._numba_kernels.metropolized_sweep``):
this step is for N up to about 10^4.

References
----------
N. Bou-Rabee and E. Vanden-Eijnden, Pathwise accuracy and ergodicity of metropolized
integrators for SDEs, Comm. Pure Appl. Math. 63 (2010) 655-696.
N. Bou-Rabee, A. Donev and E. Vanden-Eijnden, Metropolis integration schemes for self-adjoint
diffusions, Multiscale Model. Simul. 12 (2014) 781-831, arXiv:1309.5037.
Paper 000 (Random features as interacting particles), eq. (E.2) (the particle system).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from rieszflow.engine._checks import check_choice, check_points, check_real
from rieszflow.engine.energy.interaction import check_s, check_softening
from rieszflow.engine.space import Box

__all__ = ["MetropolizedState", "metropolized_langevin", "SWEEPS"]

#: The visiting schemes of :func:`metropolized_langevin`.
SWEEPS = ("sequential", "simultaneous")


@dataclasses.dataclass(frozen=True)
class MetropolizedState:
    """State of the Metropolized Euler-Maruyama chain (:func:`metropolized_langevin`).

    Parameters
    ----------
    omega : numpy.ndarray, shape (N, d), float64
        Particle positions.
    step : int
        Sweeps taken (one sweep updates every particle once).
    n_accepted : numpy.ndarray, shape (N,), int64
        Accepted proposals per particle so far.
    n_outside : int
        Proposals rejected because they left the box (or were not finite).
    """

    omega: Any
    step: int = 0
    n_accepted: Any = 0
    n_outside: int = 0

    @property
    def acceptance_rate(self) -> float:
        """Accepted proposals per particle update so far (NaN before the first sweep)."""
        if not self.step:
            return math.nan
        return float(np.sum(self.n_accepted)) / (self.step * self.omega.shape[0])

    def draw_noise(self, rng: np.random.Generator, backend=None):
        """Noise of one sweep: ``(xi, log_u)``, standard normals (N, d) and logs of N Unif(0, 1).

        Parameters
        ----------
        rng : numpy.random.Generator
            Source of the draws.
        backend : object, optional
            Ignored (the sweep runs on the host); accepted for :func:`~rieszflow.engine.simulate.run`.

        Returns
        -------
        tuple of numpy.ndarray
        """
        n, d = self.omega.shape
        return rng.standard_normal((n, d)), np.log(rng.random(n))


def metropolized_langevin(space: Box, eta: float, beta: float, *, gamma: float = 0.0, lam: float = 0.0,
                          s: float = 0.0, softening: float = 0.0, sweep: str = "sequential"):
    """Metropolized Euler-Maruyama step of the mean-field particle system in a box (module docstring).

    Parameters
    ----------
    space : engine.space.Box
        The box :math:`\\Omega` (an :class:`~rieszflow.engine.space.Interval` in 1-D); proposals
        outside it are rejected (no reflection, no projection).
    eta : float
        Time step, > 0 (the time of eq. (E.2)).
    beta : float
        Inverse temperature, > 0 (noise :math:`\\sqrt{2\\eta/\\beta}\\,\\xi`).
    gamma : float, default 0.0
        Confinement :math:`V(x) = \\gamma|x|^2/2`, >= 0.
    lam : float, default 0.0
        Interaction strength, >= 0, mean-field scaling :math:`\\lambda/N`.
    s : float, default 0.0
        Riesz exponent of :func:`~rieszflow.engine.energy.interaction.riesz_kernel` (0: log kernel).
    softening : float, default 0.0
        Plummer softening of the pair kernel, >= 0.
    sweep : {"sequential", "simultaneous"}, default "sequential"
        ``"sequential"``: particle k's proposal and acceptance see the others at their current
        positions (particles before k already moved): each update is a Metropolis-Hastings step
        of the full conditional, and the sweep leaves the Gibbs measure exactly invariant.
        ``"simultaneous"``: every particle sees the configuration at the start of the sweep, so
        that with every move accepted the sweep is exactly the Euler-Maruyama step (the pair
        forces cancel in the sum, as in the continuous dynamics); the accept/reject test is the
        same formula against that frozen configuration, which is a filter of collision moves,
        not an exact Metropolis-Hastings step of the joint law.

    Returns
    -------
    init_fn : callable
        ``init_fn(omega) -> MetropolizedState`` for ``omega`` of shape (N, d) inside ``space``.
    step_fn : callable
        ``step_fn(state, noise) -> MetropolizedState``, one sweep; ``noise = (xi, log_u)`` with
        ``xi`` of shape (N, d) and ``log_u`` of shape (N,) (:meth:`MetropolizedState.draw_noise`).
        Pure: the input state is not modified.

    Raises
    ------
    TypeError
        If ``space`` is not a Box.
    ValueError
        If ``eta`` or ``beta`` is not a positive finite number, ``gamma``, ``lam`` or
        ``softening`` is negative, ``s`` is out of range, ``sweep`` is unknown; (``init_fn``) if
        ``omega`` is not finite (N, d) with N >= 2, lies outside ``space``, or holds two equal
        rows when ``lam > 0``, ``s >= 0`` and ``softening = 0`` (infinite energy); (``step_fn``)
        if the noise is not a pair of arrays of the stated shapes.
    TypeError
        Also when ``eta``, ``beta``, ``gamma``, ``lam``, ``s`` or ``softening`` is not a real number.

    References
    ----------
    Bou-Rabee and Vanden-Eijnden, Comm. Pure Appl. Math. 63 (2010) 655-696; Bou-Rabee, Donev and
    Vanden-Eijnden, Multiscale Model. Simul. 12 (2014) 781-831; paper 000, eq. (E.2).
    """
    if not isinstance(space, Box):
        raise TypeError(f"space must be an engine.space.Box (or Interval), got {space!r}")
    eta = check_real("eta", eta, positive=True)
    beta = check_real("beta", beta, positive=True)
    gamma = check_real("gamma", gamma, nonnegative=True)
    lam = check_real("lam", lam, nonnegative=True)
    s = check_s(s)
    eps = check_softening(softening)
    check_choice("sweep", sweep, SWEEPS)
    from rieszflow.engine.energy._numba_kernels import metropolized_sweep   # once, not at every sweep

    def init_fn(omega) -> MetropolizedState:
        omega = np.array(check_points("omega", omega), dtype=np.float64)
        if omega.shape[0] < 2:
            raise ValueError(f"omega must hold N >= 2 particles, got shape {omega.shape}")
        if space.dim is not None and omega.shape[1] != space.dim:
            raise ValueError(f"omega must have d={space.dim} columns for {space!r}, got shape {omega.shape}")
        outside = np.flatnonzero(~np.asarray(space.contains(omega)))
        if outside.size:
            raise ValueError(f"omega has {outside.size} particle(s) outside {space!r} (rows "
                             f"{outside[:5].tolist()}{' ...' if outside.size > 5 else ''})")
        if lam > 0 and s >= 0 and eps == 0 and np.unique(omega, axis=0).shape[0] < omega.shape[0]:
            raise ValueError(f"omega holds coincident particles: their pair energy g_s(0) is infinite for "
                             f"s={s} >= 0 without softening")
        return MetropolizedState(omega=omega, step=0, n_accepted=np.zeros(omega.shape[0], dtype=np.int64))

    def step_fn(state: MetropolizedState, noise) -> MetropolizedState:
        if not (isinstance(noise, (tuple, list)) and len(noise) == 2):
            raise ValueError(f"noise must be the pair (xi, log_u) of MetropolizedState.draw_noise, got "
                             f"{type(noise).__name__}")
        xi, log_u = noise
        x = state.omega
        n, d = x.shape
        xi = np.ascontiguousarray(xi, dtype=np.float64)
        log_u = np.ascontiguousarray(log_u, dtype=np.float64).reshape(-1)
        if xi.shape != x.shape or log_u.shape != (n,):
            raise ValueError(f"noise must be (xi of shape {x.shape}, log_u of shape ({n},)), got "
                             f"{xi.shape} and {log_u.shape}")
        lo = np.broadcast_to(np.asarray(space.lo, dtype=np.float64), (d,)).copy()
        hi = np.broadcast_to(np.asarray(space.hi, dtype=np.float64), (d,)).copy()
        new = np.array(x, dtype=np.float64, order="C")
        others = new if sweep == "sequential" else x.copy()
        out = metropolized_sweep(new, others, xi, log_u, lo, hi, gamma, lam / n, s, eps * eps, eta, beta)
        return dataclasses.replace(state, omega=new, step=state.step + 1,
                                   n_accepted=state.n_accepted + (out == 1).astype(np.int64),
                                   n_outside=state.n_outside + int(np.sum(out < 0)))

    return init_fn, step_fn

