"""Integrators for the feature particles: projected/reflected Langevin, MALA, Gibbs resampling.

Integrators are factories returning ``(init_fn, step_fn)`` (jax-md style):
``init_fn(omega) -> state`` and ``step_fn(state, noise) -> state`` is pure: it
never mutates its input, draws no random numbers (the noise is an argument) and
never synchronises with the device. States are frozen dataclasses updated with
:func:`dataclasses.replace`. :func:`run_langevin` owns the loop: the seed, the
noise, the stopping rule, the callbacks (storage) and the progress bar.

The projected Langevin step of paper 000, eq. (4.3) and (B.11) (Algorithms 1 and 2) is

.. math::

    \\omega_k^{m+1} = \\mathcal{P}_\\Omega\\Big(\\omega_k^m - \\eta\\, N \\nabla_{\\omega_k}\\mathcal{H}_N(\\Omega_N^m)
                     + \\sqrt{2\\eta/\\beta}\\,\\xi_k^m\\Big), \\qquad \\xi_k^m \\sim \\mathcal{N}(0, I_d).

The factor N (``grad_scale``) turns the gradient of the intensive ("paper")
Hamiltonian into the per-particle drift of eq. (A.7); use ``grad_scale = 1`` with
"mean_field" energies (see :mod:`~rieszflow.engine.energy.base`). For ``eta -> 0`` the chain
samples :math:`\\exp(-\\beta\\,\\mathrm{grad\\_scale}\\,H)` on :math:`\\Omega^N`, i.e. the
Gibbs law (E.7) with :math:`\\beta_N = \\beta N` for the paper normalisation.
"""
from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Any, Callable, NamedTuple

import numpy as np
import scipy.special
from tqdm.auto import tqdm

from rieszflow.engine._checks import check_choice, check_int, check_points, check_real, check_vector
from rieszflow.engine.backend import backend_of, get_backend, namespace, on_host, to_numpy
from rieszflow.engine.space import Space
from rieszflow.engine.energy.interaction import check_s, check_softening

__all__ = [
    "BOUNDARIES",
    "ComponentMALAState",
    "GibbsResample",
    "LangevinState",
    "MALAState",
    "gibbs_resample",
    "gibbs_weights",
    "adapt_step_size",
    "mala",
    "mala_within_gibbs",
    "projected_langevin",
    "run",
    "run_langevin",
]

BOUNDARIES = ("project", "reflect")

#: Steps between two host reads of :func:`run_langevin`'s ``delta`` rule when nothing is
#: recorded (with ``record_every`` it is read at every record): the rule itself is evaluated on
#: the device at every step, and a run that stops computes (frozen) at most this many steps more.
DELTA_BLOCK = 64


# --------------------------------------------------------------------------- states

@dataclasses.dataclass(frozen=True)
class LangevinState:
    """State of the projected Langevin chain.

    Parameters
    ----------
    omega : array, shape (N, d)
        Particle positions :math:`\\Omega_N^m`.
    step : int
        Number of steps taken, m.
    max_displacement : float64 0-d array
        :math:`\\max_k\\|\\omega_k^m - \\omega_k^{m-1}\\|` of the last step (``inf``
        before the first), the quantity of the stopping rule of Algorithms 1-2.
    """

    omega: Any
    step: int = 0
    max_displacement: Any = math.inf

    def draw_noise(self, rng: np.random.Generator, backend):
        """Standard normal noise of shape ``omega.shape`` for one step.

        Parameters
        ----------
        rng : numpy.random.Generator
            The source of the draws.
        backend : rieszflow.engine.backend.Backend
            Where the noise is placed.

        Returns
        -------
        array, shape ``omega.shape``
            Standard normal draws of dtype ``backend.dtype``.
        """
        return backend.normal(rng, self.omega.shape)


@dataclasses.dataclass(frozen=True)
class MALAState:
    """State of the Metropolis-adjusted Langevin chain.

    Parameters
    ----------
    omega : array, shape (N, d)
        Particle positions.
    energy : float64 0-d array
        :math:`H(\\Omega_N)` at ``omega``.
    grad : array, shape (N, d)
        :math:`\\nabla H(\\Omega_N)` at ``omega``.
    step : int
        Number of steps taken.
    n_accepted : int64 0-d array
        Accepted proposals so far (acceptance rate ``n_accepted / step``).
    max_displacement : float64 0-d array
        Largest particle move of the last step (0 after a rejection).
    last_accept : int64 0-d array
        Step count at the last accepted proposal (0 if none yet); ``step - last_accept`` is
        the length of the current run of rejections, which :func:`run_langevin` watches.
    eta : float or array of shape (C,), optional
        Step size that overrides the step's ``eta`` when set (see :func:`adapt_step_size`);
        ``None`` uses the step's own.
    """

    omega: Any
    energy: Any
    grad: Any
    step: int = 0
    n_accepted: Any = 0
    max_displacement: Any = math.inf
    last_accept: Any = 0
    eta: Any = None

    @property
    def acceptance_rate(self):
        """Accepted proposals per step so far (NaN before the first step); one host sync.

        A float for one chain, an array of shape (C,) with a chain axis.
        """
        n = to_numpy(self.n_accepted)
        if not self.step:
            return math.nan if np.ndim(n) == 0 else np.full(np.shape(n), np.nan)
        return float(n) / self.step if np.ndim(n) == 0 else n / self.step

    def draw_noise(self, rng: np.random.Generator, backend):
        """Draw ``(xi, log_u)``: proposal noise of shape ``omega.shape`` and ``log U``, U ~ Unif(0, 1).

        With a chain axis (``omega`` of shape (C, N, d)) ``log_u`` has one entry per chain.

        Parameters
        ----------
        rng : numpy.random.Generator
            The source of the draws (normals first, then the uniforms).
        backend : rieszflow.engine.backend.Backend
            Where the noise is placed.

        Returns
        -------
        tuple of arrays
            ``xi`` of shape ``omega.shape`` and ``log_u`` of shape () or (C,).
        """
        xi = backend.normal(rng, self.omega.shape)
        if self.omega.ndim == 3:
            log_u = backend.asarray(np.log(rng.uniform(size=self.omega.shape[0])), dtype=np.float64)
        else:
            log_u = backend.asarray(np.log(rng.uniform()), dtype=np.float64)
        return xi, log_u


# --------------------------------------------------------------------------- helpers

def _check_space(space):
    if not isinstance(space, Space):
        raise TypeError(f"space must be an engine.space.Space (Free, Ball, Box, Interval), got {space!r}")
    return space


def _check_inside(space, omega):
    """Raise if any particle lies outside the space (one host transfer, init only)."""
    outside = ~to_numpy(space.contains(omega))
    if outside.any():
        raise ValueError(f"omega has {int(outside.sum())} of {omega.shape[0]} particles outside {space!r}; "
                         "project them first with space.project(omega)")


def _scaled_grad(grad_fn, omega, grad_scale, clip_norm, grad=None):
    """grad_scale * grad H, clipped to a global l2 norm of at most clip_norm (no sync).

    ``grad``, when given, is grad H at ``omega`` computed by the caller (``grad_fn`` is not called).
    """
    xp = namespace(omega)
    if grad is None:
        if grad_fn is None:
            raise ValueError("this step function was built with grad_fn=None: pass the gradient "
                             "of H at state.omega as step_fn(state, noise, grad=...)")
        g = xp.asarray(grad_fn(omega))
        what = "grad_fn(omega)"
    else:
        g = xp.asarray(grad)
        what = "grad"
    if g.shape != omega.shape:
        raise ValueError(f"{what} must have shape {tuple(omega.shape)}, got {tuple(g.shape)}")
    scale = omega.shape[0] if grad_scale is None else grad_scale
    g = scale * g
    if clip_norm is not None:
        norm = xp.sqrt(xp.sum(g * g, dtype=xp.float64))
        g = g * xp.minimum(1.0, clip_norm / xp.maximum(norm, np.finfo(np.float64).tiny))
    return g


def _max_move(xp, new, old):
    d = new - old
    return xp.max(xp.sqrt(xp.sum(d * d, axis=1, dtype=xp.float64)))


# --------------------------------------------------------------------------- projected Langevin

def projected_langevin(grad_fn: Callable, space: Space, eta: float, beta: float, grad_scale=None,
                       clip_norm=None, boundary: str = "project"):
    """Projected (or reflected) unadjusted Langevin chain of paper 000, eq. (4.3)/(B.11).

    One step maps every particle to

    .. math::

        \\omega_k \\leftarrow B\\big(\\omega_k - \\eta\\, c\\, \\nabla_{\\omega_k} H(\\Omega_N)
        + \\sqrt{2\\eta/\\beta}\\,\\xi_k\\big),

    where ``c = grad_scale`` and ``B`` is ``space.project`` (the paper's
    :math:`\\mathcal{P}_\\Omega`, weak order 1/2 at the boundary) or ``space.reflect``
    (mirror reflection, weak order 1; particles_pde_reference.md sec. 2.3).

    Parameters
    ----------
    grad_fn : callable or None
        ``grad_fn(omega) -> (N, d)``, the gradient :math:`\\nabla H` (e.g. ``energy.grad``);
        None when the caller computes the gradient itself and passes it to every step
        (``step_fn(state, noise, grad=g)``), e.g. where it comes out of a backward pass
        together with the diagnostics (Phase A of :mod:`rieszflow.learning.train`).
    space : engine.space.Space
        Domain :math:`\\Omega`.
    eta : float
        Step size :math:`\\eta > 0` (time units of the drift).
    beta : float
        Inverse temperature :math:`\\beta > 0`; ``inf`` gives projected gradient descent.
    grad_scale : float, optional
        Factor c multiplying the gradient. Default ``None`` means ``N`` (the
        number of particles), as in eq. (4.3) for the "paper" normalisation; pass
        ``1.0`` for "mean_field" energies.
    clip_norm : float, optional
        If given, the scaled gradient :math:`c\\nabla H` is rescaled so that its
        **global** l2 norm over all N*d entries is at most ``clip_norm``
        (``torch.nn.utils.clip_grad_norm_`` semantics; paper 000 App. F.2 clips at
        10). The step is then no longer an exact Langevin discretisation.
    boundary : {"project", "reflect"}, default "project"
        How proposals leaving the domain are brought back.

    Returns
    -------
    init_fn : callable
        ``init_fn(omega) -> LangevinState``; raises ValueError if ``omega`` is
        not (N, d), not finite, or has particles outside ``space``.
    step_fn : callable
        ``step_fn(state, noise, grad=None) -> LangevinState``, pure; ``noise`` is an array
        of standard normals of shape (N, d) on the backend of ``state.omega``; ``grad``
        (shape (N, d)), when given, is :math:`\\nabla H` at ``state.omega`` and replaces the
        call of ``grad_fn`` (required when ``grad_fn`` is None: ValueError otherwise).

    Raises
    ------
    ValueError
        If ``eta``, ``beta``, ``grad_scale`` or ``clip_norm`` is not positive,
        or ``boundary`` is unknown.
    TypeError
        If ``grad_fn`` is neither callable nor None, or ``space`` is not a Space.

    References
    ----------
    paper 000, Algorithm 1, Algorithm 2, eq. (4.3), (B.11), (A.7), (A.8).
    """
    if grad_fn is not None and not callable(grad_fn):
        raise TypeError(f"grad_fn must be callable or None, got {grad_fn!r}")
    space = _check_space(space)
    eta = check_real("eta", eta, positive=True)
    beta = check_real("beta", beta, positive=True, allow_inf=True)
    if grad_scale is not None:
        grad_scale = check_real("grad_scale", grad_scale, positive=True)
    if clip_norm is not None:
        clip_norm = check_real("clip_norm", clip_norm, positive=True)
    check_choice("boundary", boundary, BOUNDARIES)
    boundary_fn = space.project if boundary == "project" else space.reflect
    noise_scale = math.sqrt(2.0 * eta / beta)

    def init_fn(omega) -> LangevinState:
        omega = check_points("omega", omega)
        _check_inside(space, omega)
        xp = namespace(omega)
        return LangevinState(omega=omega, step=0, max_displacement=xp.asarray(math.inf))

    def step_fn(state: LangevinState, noise, grad=None) -> LangevinState:
        omega = state.omega
        xp = namespace(omega, noise)
        if tuple(noise.shape) != tuple(omega.shape):
            raise ValueError(f"noise must have the shape of omega {tuple(omega.shape)}, "
                             f"got {tuple(noise.shape)}")
        g = _scaled_grad(grad_fn, omega, grad_scale, clip_norm, grad)
        proposal = omega - eta * g + noise_scale * noise
        new = xp.asarray(boundary_fn(proposal), dtype=omega.dtype)
        return dataclasses.replace(state, omega=new, step=state.step + 1,
                                   max_displacement=_max_move(xp, new, omega))

    return init_fn, step_fn


# --------------------------------------------------------------------------- MALA

def mala(value_and_grad_fn: Callable, space: Space, eta: float, beta: float, grad_scale=None):
    """Metropolis-adjusted Langevin algorithm for :math:`\\pi \\propto \\exp(-\\beta c H)\\,1_{\\Omega^N}`.

    The whole configuration is proposed at once,
    :math:`\\Omega' = \\Omega - \\eta c\\nabla H(\\Omega) + \\sqrt{2\\eta/\\beta}\\,\\xi`, and accepted
    with probability
    :math:`\\min\\{1, \\frac{\\pi(\\Omega')q(\\Omega|\\Omega')}{\\pi(\\Omega)q(\\Omega'|\\Omega)}\\}`,
    :math:`q(\\Omega'|\\Omega) \\propto \\exp(-\\beta\\|\\Omega' - \\Omega + \\eta c\\nabla H(\\Omega)\\|^2/(4\\eta))`.
    Proposals with a particle outside ``space`` are rejected (the target vanishes
    there), so the chain is exact for any convex domain, with no projection bias
    and no O(eta) discretisation bias: it samples the invariant law that the
    projected chain of :func:`projected_langevin` only approximates. With the
    paper normalisation (``c = N``) the target is the Gibbs law (E.7) with
    :math:`\\beta_N = \\beta N`.

    Parameters
    ----------
    value_and_grad_fn : callable
        ``omega -> (H, grad H)`` with ``H`` a float64 scalar and ``grad H`` of
        shape (N, d) (e.g. ``energy.value_and_grad``). With a chain axis
        (``omega`` of shape (C, N, d): C independent chains advanced together)
        ``H`` has shape (C,) and ``grad H`` shape (C, N, d).
    space : engine.space.Space
        Domain (``Free()`` for :math:`\\mathbb{R}^d`).
    eta : float
        Step size, > 0. The state's ``eta`` (a scalar or, with chains, an array of
        shape (C,)) overrides it when set: that is how an adaptive step size (see
        :func:`adapt_step_size`) changes it between steps.
    beta : float
        Inverse temperature, finite and > 0.
    grad_scale : float, optional
        c; default ``None`` means N (paper normalisation).

    Returns
    -------
    init_fn : callable
        ``init_fn(omega) -> MALAState`` (validates as :func:`projected_langevin`).
    step_fn : callable
        ``step_fn(state, noise) -> MALAState`` with ``noise = (xi, log_u)``: ``xi``
        standard normals of shape (N, d) and ``log_u`` the log of a Unif(0, 1)
        draw (0-d array); see :meth:`MALAState.draw_noise`. Pure and sync-free.

    Raises
    ------
    ValueError
        If ``eta``, ``beta`` or ``grad_scale`` is not a positive finite number.
    TypeError
        If ``value_and_grad_fn`` is not callable or ``space`` is not a Space.

    References
    ----------
    Roberts and Tweedie, Bernoulli 2 (1996) 341-363; paper 000, eq. (E.7).
    """
    if not callable(value_and_grad_fn):
        raise TypeError(f"value_and_grad_fn must be callable, got {value_and_grad_fn!r}")
    space = _check_space(space)
    eta = check_real("eta", eta, positive=True)
    beta = check_real("beta", beta, positive=True)
    if grad_scale is not None:
        grad_scale = check_real("grad_scale", grad_scale, positive=True)
    noise_scale = math.sqrt(2.0 * eta / beta)

    def _evaluate(omega):
        xp = namespace(omega)
        value, grad = value_and_grad_fn(omega)
        grad = xp.asarray(grad)
        if grad.shape != omega.shape:
            raise ValueError(f"value_and_grad_fn must return a gradient of shape {tuple(omega.shape)}, "
                             f"got {tuple(grad.shape)}")
        return xp.asarray(value, dtype=xp.float64), grad

    def init_fn(omega) -> MALAState:
        xp = namespace(omega)
        if getattr(omega, "ndim", 2) == 3:              # chain axis (C, N, d)
            for c in range(omega.shape[0]):
                _check_inside(space, check_points(f"omega[{c}]", omega[c]))
            zero = xp.zeros(omega.shape[0], dtype=xp.int64)
        else:
            omega = check_points("omega", omega)
            _check_inside(space, omega)
            zero = xp.asarray(0, dtype=xp.int64)
        value, grad = _evaluate(omega)
        return MALAState(omega=omega, energy=value, grad=grad, step=0, n_accepted=zero,
                         max_displacement=xp.asarray(math.inf), last_accept=zero)

    def step_fn(state: MALAState, noise) -> MALAState:
        xi, log_u = noise
        x = state.omega
        xp = namespace(x, xi)
        if tuple(xi.shape) != tuple(x.shape):
            raise ValueError(f"noise[0] must have the shape of omega {tuple(x.shape)}, got {tuple(xi.shape)}")
        chains = x.ndim == 3
        c = x.shape[-2] if grad_scale is None else grad_scale
        h = eta if state.eta is None else state.eta
        axes = (-2, -1) if chains else None
        if chains:
            h_b = xp.reshape(xp.asarray(h, dtype=xp.float64), (-1, 1, 1)) if xp.ndim(h) else h
            noise = xp.sqrt(2.0 * h_b / beta)
        else:
            h_b, noise = h, (noise_scale if state.eta is None else math.sqrt(2.0 * h / beta))
        y = xp.asarray(x - h_b * c * state.grad + noise * xi, dtype=x.dtype)
        hy, gy = _evaluate(y)
        back = x - (y - h_b * c * gy)  # x minus the mean of the reverse proposal
        noise_sq = xp.reshape(noise, (-1,)) ** 2 if chains else noise ** 2
        fwd2 = xp.sum(xi * xi, axis=axes, dtype=xp.float64) * noise_sq
        h_c = xp.reshape(xp.asarray(h, dtype=xp.float64), (-1,)) if chains and xp.ndim(h) else h
        log_q_ratio = (beta / (4.0 * h_c)) * (fwd2 - xp.sum(back * back, axis=axes, dtype=xp.float64))
        log_alpha = -beta * c * (hy - state.energy) + log_q_ratio
        if chains:
            inside = xp.all(xp.reshape(space.contains(xp.reshape(y, (-1, y.shape[-1]))), y.shape[:2]),
                            axis=1)
        else:
            inside = xp.all(space.contains(y))
        accept = inside & (log_u < log_alpha)  # NaN log_alpha rejects
        acc_b = xp.reshape(accept, (-1, 1, 1)) if chains else accept
        new = xp.where(acc_b, y, x)
        return dataclasses.replace(
            state, omega=new, energy=xp.where(accept, hy, state.energy),
            grad=xp.where(acc_b, gy, state.grad), step=state.step + 1,
            n_accepted=state.n_accepted + accept.astype(xp.int64),
            max_displacement=_max_move(xp, new.reshape(-1, new.shape[-1]), x.reshape(-1, x.shape[-1])),
            last_accept=xp.where(accept, state.step + 1, state.last_accept))

    return init_fn, step_fn


def adapt_step_size(state: MALAState, accepted_in_block, block: int, target_acceptance: float = 0.574,
                    eta=None) -> MALAState:
    """Robbins-Monro adaptation of MALA's step size, per chain: ``log eta += rate - target``.

    Use during burn-in only (every ``block`` steps); the kept steps must run with a frozen
    step so the chain is an exact MALA chain.

    Parameters
    ----------
    state : MALAState
        The chain (or chains).
    accepted_in_block : array, shape () or (C,)
        Proposals accepted in the block just finished.
    block : int
        Steps in the block, >= 1.
    target_acceptance : float, default 0.574
        The optimal MALA acceptance rate (Roberts and Rosenthal 1998).
    eta : float or array, optional
        The step before adaptation when ``state.eta`` is unset (the factory's ``eta``).

    Returns
    -------
    MALAState
        With ``eta`` multiplied by ``exp(accepted_in_block / block - target_acceptance)``.

    Raises
    ------
    ValueError
        If neither ``state.eta`` nor ``eta`` is given, or ``block < 1``.

    References
    ----------
    Roberts and Rosenthal, J. R. Stat. Soc. B 60 (1998) 255-268; Andrieu and Thoms, Stat.
    Comput. 18 (2008) 343-373 (stochastic-approximation adaptation).
    """
    block = check_int("block", block, minimum=1)
    current = state.eta if state.eta is not None else eta
    if current is None:
        raise ValueError("adapt_step_size needs the current step: set state.eta or pass eta")
    return dataclasses.replace(state, eta=current * np.exp(accepted_in_block / block - target_acceptance))


@dataclasses.dataclass(frozen=True)
class ComponentMALAState:
    """State of the particle-by-particle (Metropolis-within-Gibbs) MALA chain.

    Parameters
    ----------
    omega : numpy.ndarray, shape (N, d)
        Particle positions.
    potential : numpy.ndarray, shape (N,), float64
        The one-body potential :math:`V(\\omega_k)` at each particle.
    grad : numpy.ndarray, shape (N, d)
        :math:`\\nabla V(\\omega_k)`.
    step : int
        Sweeps taken (one sweep updates every particle once).
    n_accepted : numpy.ndarray, shape (N,), int64
        Accepted proposals per particle so far.
    eta : float, optional
        Step size that overrides the factory's ``eta`` when set (:func:`adapt_step_size`
        adapts it; pass ``accepted_in_block = n_accepted.sum()`` differences and
        ``block = sweeps * N``).
    """

    omega: Any
    potential: Any
    grad: Any
    step: int = 0
    n_accepted: Any = 0
    eta: Any = None

    @property
    def acceptance_rate(self) -> float:
        """Accepted proposals per particle update so far (NaN before the first sweep)."""
        if not self.step:
            return math.nan
        return float(np.sum(self.n_accepted)) / (self.step * self.omega.shape[0])


def mala_within_gibbs(potential_fn: Callable, space: Space, eta: float, beta: float, lam: float = 0.0,
                      s: float = 0.0, softening: float = 0.0):
    """Particle-by-particle MALA for the particle Gibbs measure of a one-body potential plus a
    Riesz repulsion, :math:`\\pi \\propto \\exp(-\\beta N H_N)\\,1_{\\Omega^N}`.

    The Hamiltonian is, in the paper normalisation of eq. (2.2)-(2.3),

    .. math::

        H_N(\\Omega) = \\frac1N\\sum_k V(\\omega_k) + \\lambda\\,\\mathcal W_{N,s}(\\Omega),
        \\qquad \\mathcal W_{N,s} = \\frac{1}{2N(N-1)}\\sum_{k \\ne l} g_s(\\omega_k - \\omega_l),

    so :math:`\\beta N H_N = \\beta\\sum_k V(\\omega_k) + \\frac{\\beta\\lambda}{N-1}\\sum_{k<l}
    g_s(\\omega_k - \\omega_l)` (the Gibbs law (E.7) with :math:`\\beta_N = \\beta N`, the invariant
    law of the projected Langevin step (4.3) as :math:`\\eta \\to 0`). One sweep updates the
    particles in the order ``0..N-1``; particle ``k`` proposes
    :math:`y = \\omega_k - \\eta\\nabla V(\\omega_k) + \\sqrt{2\\eta/\\beta}\\,\\xi_k` (a MALA
    proposal for its one-body factor, which depends on no other particle) and accepts with
    the Metropolis-Hastings ratio of its full conditional
    :math:`\\pi(\\omega_k | \\omega_{-k}) \\propto \\exp(-\\beta V(\\omega_k) - \\frac{\\beta\\lambda}{N-1}
    \\sum_{l \\ne k} g_s(\\omega_k - \\omega_l))\\,1_\\Omega(\\omega_k)`, evaluated at the current
    positions of the others (a Numba loop, ``engine.energy._numba_kernels.component_sweep``,
    with the kernel :math:`g_s` of :func:`~rieszflow.engine.energy.interaction.riesz_kernel`). Each update leaves :math:`\\pi` invariant, so the sweep does
    (Metropolis-within-Gibbs): the chain is exact on a convex domain (proposals outside are
    rejected, no projection), and a particle's acceptance does not decay with N as a joint
    proposal's does. The expensive one-body potential is evaluated for all N proposals at
    once (``potential_fn`` is vectorised); the pair correction runs particle by particle on
    the host. With ``lam = 0`` the particles are independent and the sweep is N independent
    MALA steps.

    Parameters
    ----------
    potential_fn : callable
        ``points (K, d) -> (V (K,), grad V (K, d))``, vectorised over points, float64.
    space : engine.space.Space
        The domain of every particle (``Ball(R)`` for Phase A's norm constraint).
    eta : float
        Proposal step, > 0 (the state's ``eta`` overrides it when set).
    beta : float
        Inverse temperature, finite and > 0.
    lam : float, default 0.0
        Interaction strength, >= 0.
    s : float, default 0.0
        Riesz exponent (0: log repulsion), as :func:`~rieszflow.engine.energy.interaction.check_s`.
    softening : float, default 0.0
        Softening of the pair kernel, >= 0.

    Returns
    -------
    init_fn : callable
        ``init_fn(omega) -> ComponentMALAState`` for ``omega`` of shape (N, d), N >= 2 when
        ``lam > 0``, inside ``space``.
    step_fn : callable
        ``step_fn(state, noise) -> ComponentMALAState`` with ``noise = (xi, log_u)``: standard
        normals of shape (N, d) and the logs of N Unif(0, 1) draws. One sweep; pure (the input
        state is not modified). NumPy arrays only.

    Raises
    ------
    ValueError
        If ``eta``, ``beta`` are not positive finite numbers, ``lam`` or ``softening`` is
        negative, or ``s`` is out of range; (``init_fn``) if ``omega`` is not finite (N, d) or
        lies outside ``space``; (``step_fn``) if the noise has the wrong shape.
    TypeError
        If ``potential_fn`` is not callable or ``space`` is not a Space.

    References
    ----------
    paper 000, eq. (2.2), (2.3), (4.3) and (E.7); Roberts and Tweedie, Bernoulli 2 (1996)
    341-363 (MALA); Tierney, Ann. Statist. 22 (1994) 1701-1762 (Metropolis-within-Gibbs).
    """
    if not callable(potential_fn):
        raise TypeError(f"potential_fn must be callable, got {potential_fn!r}")
    space = _check_space(space)
    eta = check_real("eta", eta, positive=True)
    beta = check_real("beta", beta, positive=True)
    lam = check_real("lam", lam, nonnegative=True)
    s = check_s(s)
    softening = check_softening(softening)

    def _evaluate(points):
        v, g = potential_fn(points)
        v = np.asarray(v, dtype=np.float64).reshape(-1)
        g = np.asarray(g, dtype=np.float64)
        if v.shape != (points.shape[0],) or g.shape != points.shape:
            raise ValueError(f"potential_fn must return shapes ({points.shape[0]},) and "
                             f"{tuple(points.shape)}, got {v.shape} and {g.shape}")
        return v, g

    def init_fn(omega) -> ComponentMALAState:
        omega = np.array(check_points("omega", omega), dtype=np.float64)
        if lam > 0 and omega.shape[0] < 2:
            raise ValueError(f"omega must hold N >= 2 particles with lam > 0, got N={omega.shape[0]}")
        _check_inside(space, omega)
        v, g = _evaluate(omega)
        return ComponentMALAState(omega=omega, potential=v, grad=g, step=0,
                                  n_accepted=np.zeros(omega.shape[0], dtype=np.int64))

    def step_fn(state: ComponentMALAState, noise) -> ComponentMALAState:
        xi, log_u = noise
        x = state.omega
        n = x.shape[0]
        xi = np.asarray(xi, dtype=np.float64)
        log_u = np.asarray(log_u, dtype=np.float64).reshape(-1)
        if xi.shape != x.shape or log_u.shape != (n,):
            raise ValueError(f"noise must be (xi of shape {x.shape}, log_u of shape ({n},)), got "
                             f"{xi.shape} and {log_u.shape}")
        h = eta if state.eta is None else float(state.eta)
        y = x - h * state.grad + math.sqrt(2.0 * h / beta) * xi
        vy, gy = _evaluate(y)
        fwd = y - x + h * state.grad
        back = x - y + h * gy
        # one-body part of log alpha: -beta dV + log q(x|y) - log q(y|x)
        log_a = (-beta * (vy - state.potential)
                 + (beta / (4.0 * h)) * (np.sum(fwd * fwd, 1) - np.sum(back * back, 1)))
        inside = np.asarray(to_numpy(space.contains(y)), dtype=bool)
        new, pot, grad = x.copy(), state.potential.copy(), state.grad.copy()
        acc = np.zeros(n, dtype=bool)
        if lam == 0.0:
            acc = inside & (log_u < log_a)           # independent particles: one vectorised step
        else:
            from rieszflow.engine.energy._numba_kernels import component_sweep

            acc = component_sweep(new, np.ascontiguousarray(y), log_a, log_u, inside,
                                  beta * lam / (n - 1), s, softening)
        new[acc], pot[acc], grad[acc] = y[acc], vy[acc], gy[acc]
        return dataclasses.replace(state, omega=new, potential=pot, grad=grad, step=state.step + 1,
                                   n_accepted=state.n_accepted + acc.astype(np.int64))

    return init_fn, step_fn


# --------------------------------------------------------------------------- the loop

def run(step_fn: Callable, state, n_steps: int, *, rng=None, backend=None, record=None,
        record_every=None, record_steps=None, record_initial: bool = True, record_final: bool = True,
        after_step: Callable | None = None, stop: Callable | None = None, progress: bool = True,
        desc: str = "run", leave: bool = True):
    """The one loop of rieszflow: step a state, draw its noise, record, stop.

    Every integrator follows one step protocol, ``step_fn(state, noise) -> state`` (pure, no
    host synchronisation), and every state says what noise a step needs through
    ``state.draw_noise(rng, backend)`` (``None`` for deterministic flows). Langevin chains
    (:func:`run_langevin`), the mean-field particle systems and the token flows
    (:func:`rieszflow.engine.tokenflow.integrate.run_flow`) all run through this loop.

    Parameters
    ----------
    step_fn : callable
        ``step_fn(state, noise) -> state``.
    state : object
        Initial state with ``step`` (int) and ``draw_noise(rng, backend)``.
    n_steps : int
        Number of steps, >= 0.
    rng : numpy.random.Generator, optional
        Source of the noise (needed when the state draws noise).
    backend : rieszflow.engine.backend.Backend, optional
        Where the noise is placed.
    record : callable, optional
        ``record(state)``, called at step 0 (``record_initial``), at every multiple of
        ``record_every``, at every step listed in ``record_steps``, and after the last step
        (``record_final``) unless that step was just recorded. The only place where a
        caller should synchronise with the device.
    record_every : int, optional
    record_steps : iterable of int, optional
    record_initial, record_final : bool, default True
    after_step : callable, optional
        ``after_step(state)`` after every step (device-side bookkeeping only).
    stop : callable, optional
        ``stop(state) -> bool`` after every step; True ends the loop early.
    progress : bool, default True
        Show a tqdm bar.
    desc : str, default "run"
        Label of the bar.
    leave : bool, default True
        Keep the bar on screen when done.

    Returns
    -------
    state
        The final state.

    Raises
    ------
    ValueError
        If ``n_steps`` or ``record_every`` is invalid.
    """
    n_steps = check_int("n_steps", n_steps, minimum=0)
    if record_every is not None:
        record_every = check_int("record_every", record_every, minimum=1)
    wanted = set() if record_steps is None else {int(k) for k in record_steps}
    last_recorded = None
    if record is not None and record_initial:
        record(state)
        last_recorded = state.step
    with tqdm(total=n_steps, disable=not progress, desc=desc, unit="step", leave=leave) as bar:
        for _ in range(n_steps):
            state = step_fn(state, state.draw_noise(rng, backend))
            bar.update(1)
            if after_step is not None:
                after_step(state)
            if record is not None and ((record_every is not None and state.step % record_every == 0)
                                       or state.step in wanted):
                record(state)
                last_recorded = state.step
            if stop is not None and stop(state):
                break
    if record is not None and record_final and last_recorded != state.step:
        record(state)
    return state


def run_langevin(step_fn: Callable, state, n_steps: int, seed, *, delta=None, record_every=None,
                 callback: Callable | None = None, record_initial: bool = True, backend=None,
                 progress: bool = True, stall_steps: int | None = 1000):
    """Run a chain: draw the noise from a seeded generator, step, record, stop.

    Parameters
    ----------
    step_fn : callable
        From :func:`projected_langevin` or :func:`mala`.
    state : LangevinState or MALAState
        Initial state (from ``init_fn``); its ``draw_noise`` defines the noise.
    n_steps : int
        Maximum number of steps, >= 0.
    seed : int or numpy.random.Generator
        Source of all randomness (``numpy.random.default_rng(seed)``); noise is
        drawn on the host and moved to the backend, so a seed reproduces the
        run on NumPy and CuPy alike.
    delta : float, optional
        Stopping threshold of Algorithms 1-2 with
        :math:`\\mathcal{D}(\\mu^{m}, \\mu^{m-1}) = \\max_k\\|\\omega_k^m - \\omega_k^{m-1}\\|`
        (an upper bound of the :math:`W_\\infty` distance): the run stops after the
        first step whose largest move is below ``delta``. At finite ``beta`` the
        noise alone moves particles by about :math:`\\sqrt{2\\eta/\\beta}\\,\\sqrt{2\\log N}`, so
        choose ``delta`` above that, or use it with ``beta = inf``. On host (NumPy)
        arrays the rule is read after every step. On a device it is evaluated at
        every step and read on the host once per block
        (every ``record_every`` steps, else every ``DELTA_BLOCK`` steps): steps
        after the stopping step leave the state unchanged and are not recorded, so
        the stopping step, the records and the final state are those of a per-step
        check (a passed-in Generator has then drawn the noise of the rest of the block).
    record_every : int, optional
        Call ``callback(state)`` whenever ``state.step`` is a multiple of this.
    callback : callable, optional
        ``callback(state)``, e.g. a trajectory writer. Also called with the
        initial state (if ``record_initial``) and with the final state if that
        step was not already recorded.
    record_initial : bool, default True
        Record the initial state (set False when resuming from a checkpoint).
    backend : engine.backend.Backend, optional
        Where the noise is placed; inferred from ``state.omega`` by default.
    progress : bool, default True
        Show a tqdm progress bar (works in terminals, notebooks and CI logs).
    stall_steps : int or None, default 1000
        MALA only: warn (``RuntimeWarning``, once) when the chain has rejected every proposal
        of the last ``stall_steps`` steps, checked at every recorded state and at the end
        (a chain that stopped accepting samples nothing; reduce ``eta``). None disables it.

    Returns
    -------
    state
        The final state; ``state.step - initial step < n_steps`` iff the
        ``delta`` rule stopped the run.

    Raises
    ------
    ValueError
        If ``n_steps``, ``record_every`` or ``delta`` is invalid.
    FloatingPointError
        If the positions become non-finite (checked at every recorded state and
        at the end), naming the step.

    References
    ----------
    paper 000, Algorithm 1 and Algorithm 2 (stopping rule), eq. (B.11).
    """
    if not callable(step_fn):
        raise TypeError(f"step_fn must be callable, got {step_fn!r}")
    n_steps = check_int("n_steps", n_steps, minimum=0)
    if delta is not None:
        delta = check_real("delta", delta, positive=True)
    if record_every is not None:
        record_every = check_int("record_every", record_every, minimum=1)
    if callback is not None and not callable(callback):
        raise TypeError(f"callback must be callable, got {callback!r}")
    rng = np.random.default_rng(seed)
    xp = namespace(state.omega)
    if backend is None:
        backend = backend_of(state.omega)
    # on the host reading the flag costs nothing: check every step (no frozen steps computed, a
    # caller's generator stops at the stopping step); on a device once per record / DELTA_BLOCK
    block = 1 if on_host(state.omega) else (record_every if record_every is not None else DELTA_BLOCK)
    # delta rule on the device: `active` turns False after the stopping step, `hit` holds it
    flags = {"active": xp.ones((), dtype=bool), "hit": xp.full((), -1, dtype=xp.int64),
             "pulled": (None, -1), "last": None}

    if stall_steps is not None:
        stall_steps = check_int("stall_steps", stall_steps, minimum=1)
    warned = []

    def check_stall(st):
        if stall_steps is None or warned or not isinstance(st, MALAState):
            return
        streaks = st.step - np.atleast_1d(to_numpy(st.last_accept))
        stuck = np.flatnonzero(streaks >= stall_steps)
        if stuck.size:
            warned.append(True)
            streak = int(streaks[stuck[0]])
            which = "" if np.ndim(to_numpy(st.last_accept)) == 0 else \
                f" (chains {', '.join(map(str, stuck[:10]))}{', ...' if stuck.size > 10 else ''})"
            rate = np.atleast_1d(st.acceptance_rate)[stuck[0]]
            warnings.warn(f"MALA chain{which} accepted no proposal in its last {streak} steps (steps "
                          f"{st.step - streak + 1}-{st.step}; acceptance rate so far {rate:.3g}): it "
                          f"has stopped sampling; reduce eta", RuntimeWarning, stacklevel=3)

    def stopped_at(st):
        """Step where the delta rule fired (-1: not yet), read once per step count."""
        if flags["pulled"][0] != st.step:
            flags["pulled"] = (st.step, int(flags["hit"]))
        return flags["pulled"][1]

    def frozen_step(st, noise):
        new = step_fn(st, noise)
        now = new.max_displacement < delta
        keep = flags["active"]
        flags["hit"] = xp.where(keep & now, new.step, flags["hit"])
        flags["active"] = keep & ~now
        changes = {}
        for f in dataclasses.fields(new):           # after the stop, every array field stays
            a, b = getattr(new, f.name), getattr(st, f.name)
            if hasattr(a, "shape") and hasattr(b, "shape") and tuple(a.shape) == tuple(b.shape):
                changes[f.name] = xp.where(keep, a, b)
        return dataclasses.replace(new, **changes)

    def record(st):
        if delta is not None and st.step and 0 <= stopped_at(st) < st.step:
            return                                  # after the stop: a per-step check never got here
        flags["last"] = st.step
        if not bool(xp.all(xp.isfinite(st.omega))):
            raise FloatingPointError(f"non-finite particle positions at step {st.step}; reduce eta, "
                                     "add softening or set clip_norm")
        check_stall(st)
        if callback is not None:
            callback(st)

    def stop(st):
        return delta is not None and st.step % block == 0 and stopped_at(st) >= 0

    final = run(step_fn if delta is None else frozen_step, state, n_steps, rng=rng, backend=backend,
                record=record, record_every=record_every,
                record_initial=callback is not None and record_initial, record_final=False,
                stop=stop, progress=progress, desc="langevin")
    if delta is not None and final.step != state.step:
        hit = stopped_at(final)
        if hit >= 0:                                # the state is frozen at the stopping step
            final = dataclasses.replace(final, step=hit)
    if flags["last"] != final.step:                 # the final state, unless just recorded
        record(final)
    check_stall(final)          # also when the last state was recorded before the final step
    return final


# --------------------------------------------------------------------------- Gibbs resampling

class GibbsResample(NamedTuple):
    """Result of :func:`gibbs_resample`.

    Parameters
    ----------
    omega : array, shape (D, d)
        Resampled particles :math:`\\omega^*_1, \\dots, \\omega^*_D`.
    index : numpy.ndarray of int64, shape (D,)
        Their indices in the input configuration.
    weights : numpy.ndarray of float64, shape (N,)
        The Gibbs weights :math:`w_k` used.
    """

    omega: Any
    index: np.ndarray
    weights: np.ndarray


def gibbs_weights(energies, beta):
    """Gibbs weights :math:`w_k = e^{-\\beta e_k} / \\sum_j e^{-\\beta e_j}`, computed by log-sum-exp.

    Parameters
    ----------
    energies : array, shape (N,)
        Single-particle energies :math:`e_k` (finite).
    beta : float
        Inverse temperature, ``>= 0``; ``inf`` spreads the mass uniformly over
        the minimisers.

    Returns
    -------
    numpy.ndarray, float64, shape (N,)
        Non-negative weights summing to 1 (host array).

    Raises
    ------
    ValueError
        If ``energies`` is not a finite vector or ``beta`` is negative or NaN.

    References
    ----------
    paper 000, Algorithm 2 (weights :math:`w_k`).
    """
    e = check_vector("energies", to_numpy(energies).astype(np.float64))
    if e.shape[0] < 1:
        raise ValueError("energies must hold at least one particle, got an empty array")
    beta = check_real("beta", beta, nonnegative=True, allow_inf=True)
    if math.isinf(beta):
        w = (e == e.min()).astype(np.float64)
        return w / w.sum()
    return scipy.special.softmax(-beta * e)


def gibbs_resample(omega, energies, beta, D, rng: np.random.Generator) -> GibbsResample:
    """Resample D particles with the Gibbs weights of Algorithm 2 (multinomial, with replacement).

    Algorithm 2 writes the weights as :math:`\\exp[-\\beta\\mathcal{H}(\\omega_k)]`,
    leaving the single-particle energy undefined. We use the potential felt by
    particle k in the Langevin drift (eq. (A.5)/(A.7)),

    .. math::

        e_k = V_{\\mathcal{D}}(\\omega_k) + \\frac{\\lambda}{N-1}\\sum_{l\\ne k} g_s(\\omega_k - \\omega_l),

    which is ``energy.per_particle(omega)`` of the paper-normalised Hamiltonian
    (:func:`~rieszflow.engine.energy.rff_hamiltonian`); any other per-particle energy can
    be passed.

    Parameters
    ----------
    omega : array, shape (N, d)
        Particles (NumPy or CuPy).
    energies : array, shape (N,)
        Single-particle energies :math:`e_k`.
    beta : float
        Inverse temperature, ``>= 0`` (``inf`` allowed).
    D : int
        Number of draws, ``D >= 1`` (Algorithm 2 uses ``D < N``; with
        replacement any D is valid).
    rng : numpy.random.Generator
        Source of randomness.

    Returns
    -------
    GibbsResample
        ``(omega, index, weights)``; ``omega`` lives on the input's backend.

    Raises
    ------
    ValueError
        On inconsistent shapes, non-finite energies, ``beta < 0`` or ``D < 1``.
    TypeError
        If ``rng`` is not a numpy Generator.

    References
    ----------
    paper 000, Algorithm 2 (last three lines), eq. (A.5), (A.7).
    """
    omega = check_points("omega", omega)
    D = check_int("D", D, minimum=1)
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    n = omega.shape[0]
    w = gibbs_weights(energies, beta)
    if w.shape[0] != n:
        raise ValueError(f"energies must have length N={n}, got {w.shape[0]}")
    index = rng.choice(n, size=D, replace=True, p=w)
    xp = namespace(omega)
    return GibbsResample(omega=omega[xp.asarray(index)], index=index, weights=w)
