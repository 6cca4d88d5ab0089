"""``rieszflow ldp``: large deviations of the particle Gibbs measure (E.7) against the rate functions.

Target law (paper 000, eq. (E.7), (2.2), (B.10)), on :math:`\\Omega = [lo, hi]`:

.. math::

    P_{N,\\beta_N}(d\\omega) \\propto \\exp(-\\beta_N\\mathcal H_N(\\omega))\\,1_{\\Omega^N}\\,d\\omega, \\qquad
    \\mathcal H_N = \\frac1N\\sum_k V(\\omega_k) + \\frac{\\lambda}{2N(N-1)}\\sum_{k\\ne l} g_s(\\omega_k-\\omega_l),

with :math:`\\beta_N = \\beta N^\\kappa` (:class:`~rieszflow.studies.ldp.config.RegimeConfig`). For the
linear statistic :math:`M_N = \\int f\\,d\\mu_N = \\frac1N\\sum_k f(\\omega_k)` and
:math:`A = \\{M_N \\ge a\\}` the study estimates :math:`-\\frac{1}{r_N}\\log P(\\mu_N \\in A)` three ways
and compares them with :math:`\\inf_A \\mathcal J_s` from :func:`~rieszflow.solvers.gibbs.rate_infimum`:

direct
    the fraction of MALA samples of :math:`P_{N,\\beta_N}` in A (only where the
    event is not too rare);
tilted (importance sampling)
    the exponential family :math:`P^\\theta \\propto e^{r_N\\theta M_N}P` is sampled by
    MALA at nodes :math:`0 = \\theta_0 < \\dots < \\theta_{\\max}` (the tilt is the potential
    :math:`V - (r_N\\theta/\\beta_N) f`). Thermodynamic integration gives the scaled
    cumulant generating function exactly up to quadrature and Monte-Carlo error,

    .. math::

        \\Lambda_N(\\theta) = \\frac1{r_N}\\log E[e^{r_N\\theta M_N}] = \\int_0^\\theta E_{\\theta'}[M_N]\\,d\\theta'

    (cubic spline through the node means), and at the node :math:`\\theta_j` with
    :math:`E_{\\theta_j}M_N` closest to a, the unbiased identity
    :math:`P(A) = e^{r_N\\Lambda_N(\\theta_j)} E_{\\theta_j}[e^{-r_N\\theta_j M_N}1_A]`;
Chernoff
    :math:`\\sup_\\theta[\\theta a - \\Lambda_N(\\theta)]`, the finite-N Legendre transform: a
    *lower* bound on :math:`-\\frac1{r_N}\\log P(A)`, since Markov's inequality gives
    :math:`P(A) \\le e^{-r_N(\\theta a - \\Lambda_N(\\theta))}` for every :math:`\\theta \\ge 0`.
    The sharp finite-N value adds the Bahadur-Rao term
    :math:`\\approx \\frac{1}{2r_N}\\log(2\\pi r_N\\theta^{*2}\\sigma^2)` (``rate_bahadur_rao``).

Standard errors cover the Monte-Carlo error only: the spread between independent
chains (per-chain means are independent), propagated with the same spline weights
that give :math:`\\Lambda_N`, and for the tilted estimate by a delete-one-chain
jackknife (which includes the covariance of :math:`\\Lambda_N(\\theta_j)` and the importance
weights from the same chains). They do not cover the quadrature error of the
spline, MCMC burn-in bias, or the distance between finite N and the limit
(:func:`rate_estimates`).

Every solve of the limit (:func:`~rieszflow.solvers.gibbs.rate_infimum` and the untilted
Gibbs density or equilibrium) must converge, or the study stops with a
RuntimeError before sampling. Each (regime, N) cell draws from its own seed
``(seed, regime index, N)``, so an interrupted study resumed with ``resume=True``
(CLI ``--resume``) gives the arrays of an uninterrupted one, and the cells, independent tasks of
:func:`rieszflow.studies.sweep.run_jobs` (:func:`cell_task`), give the same arrays in-process, on a
Dask LocalCluster or on an existing scheduler.

The sampler is the engine's MALA (:func:`rieszflow.engine.simulate.mala`) with a chain
axis: independent chains advanced together, each with its own tilt and its own step size,
adapted during burn-in by :func:`rieszflow.engine.simulate.adapt_step_size` and frozen for the
kept steps (so the kept chains are exact MALA chains).

References
----------
paper 000, Thm 2, Thm 6, eq. (4.6)-(4.7), (E.7); Roberts and Tweedie, Bernoulli 2 (1996);
Bahadur and Rao, Ann. Math. Stat. 31 (1960) 1015-1027; Gelman and Meng,
Stat. Sci. 13 (1998) 163-185 (thermodynamic integration).
"""
from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path

import numpy as np
import scipy.interpolate

from rieszflow.engine.energy import RieszEnergy
from rieszflow.studies.ldp.config import LDPConfig, RegimeConfig
from rieszflow.engine.backend import get_backend
from rieszflow.engine.measures import sample_cells
from rieszflow.engine.simulate import adapt_step_size, mala, run
from rieszflow.engine.space import Interval
from rieszflow.engine.storage import TrajectoryWriter, check_resumable, open_run
from rieszflow.solvers.equilibrium import equilibrium_on_mesh
from rieszflow.solvers.gibbs import gibbs_density, rate_infimum
from rieszflow.solvers.mckean_vlasov import MeanFieldProblem, interval_mesh
from rieszflow.studies.sweep import Executor, Job, TasksFailed, check_executor, run_jobs

__all__ = ["KIND", "GibbsTarget", "MALARun", "run_tilted_chains", "cell_task",
           "rate_estimates", "run_ldp_study", "load_study", "format_table", "make_plot"]

#: ``kind`` attribute of the study's HDF5 file.
KIND = "ldp_study"

#: long_name of every per-(regime, N) and per-node variable of the file.
_LDP_LONG_NAMES = {
    "speed": "speed r_N of the deviation",
    "beta_N": "inverse temperature beta_N",
    "p_direct": "P(A) by direct sampling",
    "p_direct_se": "standard error of p_direct",
    "rate_direct": "-(1/r_N) log P(A) from direct sampling",
    "rate_direct_se": "standard error of rate_direct",
    "rate_is": "-(1/r_N) log P(A) from tilted sampling (thermodynamic integration)",
    "rate_is_se": "jackknife standard error of rate_is",
    "rate_chernoff": "finite-N Chernoff exponent sup_theta [theta a - Lambda_N(theta)]",
    "rate_chernoff_se": "standard error of rate_chernoff",
    "theta_chernoff": "tilt attaining the Chernoff supremum",
    "rate_bahadur_rao": "Bahadur-Rao prediction of -(1/r_N) log P(A)",
    "chernoff_at_edge": "1 if the Chernoff supremum is at the last tilt node, else 0",
    "wall": "wall-clock time of the (regime, N) cell",
    "theta": "tilt theta at the node",
    "mean_M": "mean of M_N under the tilted Gibbs law",
    "mean_M_se": "standard error of mean_M (between chains)",
    "Lambda": "scaled cumulant generating function Lambda_N(theta)",
    "Lambda_se": "standard error of Lambda",
    "acceptance": "MALA acceptance rate of the node's chains",
}


@dataclasses.dataclass(frozen=True)
class GibbsTarget:
    """Batched log-density :math:`-U = -\\beta_N[\\mathcal H_N - \\tau M_N]` of tilted 1-D Gibbs laws.

    Parameters
    ----------
    n : int
        Particles per configuration, ``>= 2``.
    beta_N : float
        :math:`\\beta_N > 0`.
    gamma, s, lam : float
        :math:`V = \\gamma x^2/2`, Riesz exponent, interaction strength.
    lo, hi : float
        The domain (outside it the density is 0).

    Notes
    -----
    ``U(x, tau)`` for ``x`` of shape (C, N) and per-chain tilts ``tau`` (C,) is
    :math:`\\beta_N[\\frac1N\\sum_k(V - \\tau f)(x_k) + \\frac{\\lambda}{2N(N-1)}\\sum_{k\\ne l}g_s]`
    with :math:`f = x^2`; paper normalisation (i != j ordered pairs, 1/(2N(N-1))).
    """

    n: int
    beta_N: float
    gamma: float
    s: float
    lam: float
    lo: float
    hi: float

    def value_and_grad(self, x, tau):
        """U and its gradient.

        Parameters
        ----------
        x : ndarray, shape (C, N)
        tau : ndarray, shape (C,)

        Returns
        -------
        U : ndarray, shape (C,), float64
        grad : ndarray, shape (C, N), float64
        """
        n = x.shape[1]
        # H_N = (1/N) sum_k (V - tau f)(x_k) + lam W_{N,s}: the pair part is the engine's Riesz energy
        # (paper normalisation, ordered pairs, 1/(2N(N-1))), one chain per row
        W, gW = RieszEnergy(self.s, self.lam).value_and_grad(x[..., None])
        one = (0.5 * self.gamma - tau[:, None]) * x * x
        U = self.beta_N * (one.sum(axis=1) / n + W)
        grad = self.beta_N * ((self.gamma - 2.0 * tau[:, None]) * x / n + gW[..., 0])
        return U, grad


@dataclasses.dataclass(frozen=True, eq=False)
class MALARun:
    """Output of :func:`run_tilted_chains`.

    Parameters
    ----------
    M : ndarray, shape (C, n_steps), float64
        :math:`M_N = \\frac1N\\sum_k f(\\omega_k)` after every kept step.
    acceptance : ndarray, shape (C,), float64
        Acceptance rate over the kept steps.
    h : ndarray, shape (C,), float64
        Final (frozen) step sizes.
    """

    M: np.ndarray
    acceptance: np.ndarray
    h: np.ndarray


def run_tilted_chains(target: GibbsTarget, x0, tau, rng: np.random.Generator, *, burn_in: int,
                      n_steps: int, adapt_every: int = 50, target_acceptance: float = 0.574,
                      progress=None) -> MALARun:
    """Run C chains: burn-in with step-size adaptation, then ``n_steps`` kept steps.

    During burn-in, every ``adapt_every`` steps each chain's ``log h`` moves by
    ``acceptance - target_acceptance`` (a Robbins-Monro rule); the kept steps use
    frozen step sizes, so the kept chain is an exact MALA chain.

    Parameters
    ----------
    target : GibbsTarget
    x0 : ndarray, shape (C, N)
        Initial states inside the domain.
    tau : ndarray, shape (C,)
    rng : numpy.random.Generator
    burn_in, n_steps : int
    adapt_every : int
    target_acceptance : float
    progress : callable, optional
        Called with the number of steps done after each block.

    Returns
    -------
    MALARun

    Raises
    ------
    ValueError
        If ``x0`` has a particle outside the domain or shapes disagree.
    """
    import dataclasses as _dc

    x = np.array(x0, dtype=np.float64)
    C, n = x.shape
    tau = np.asarray(tau, dtype=np.float64)
    if tau.shape != (C,):
        raise ValueError(f"tau must have shape ({C},), got {tau.shape}")
    if not ((x >= target.lo) & (x <= target.hi)).all():
        raise ValueError("x0 has particles outside the domain")

    def value_and_grad(omega):                      # (C, N, 1) chains of the 1-D system
        U, g = target.value_and_grad(omega[..., 0], tau)
        return U, g[..., None]

    # the engine's MALA with a chain axis: beta = 1 and grad_scale = 1 because U already holds beta_N
    init_fn, step_fn = mala(value_and_grad, Interval(target.lo, target.hi), eta=1.0, beta=1.0,
                            grad_scale=1.0)
    h = np.full(C, 0.5 / (target.beta_N * max(1.0, n ** (1.0 / 3.0))) * n)  # ~ 1/curvature
    state = _dc.replace(init_fn(x[..., None]), eta=h)
    backend = get_backend("numpy")
    done = 0
    while done < burn_in:                           # burn-in: adapt the steps block by block
        k = min(adapt_every, burn_in - done)
        before = state.n_accepted.copy()
        state = run(step_fn, state, k, rng=rng, backend=backend, progress=False)
        done += k
        if k == adapt_every:
            state = adapt_step_size(state, state.n_accepted - before, adapt_every, target_acceptance)
            if progress is not None:
                progress(adapt_every)
    M = np.empty((C, n_steps))
    s0, acc0 = state.step, state.n_accepted.copy()

    def record(st):                                 # kept steps: frozen steps, an exact MALA chain
        M[:, st.step - s0 - 1] = np.mean(st.omega[..., 0] * st.omega[..., 0], axis=1)

    def tick(st):
        if progress is not None and (st.step - s0) % adapt_every == 0:
            progress(adapt_every)

    state = run(step_fn, state, n_steps, rng=rng, backend=backend, record=record, record_every=1,
                record_initial=False, record_final=False, after_step=tick, progress=False)
    return MALARun(M=M, acceptance=(state.n_accepted - acc0) / n_steps, h=np.asarray(state.eta))


def _mean_se_chains(per_chain):
    per_chain = np.asarray(per_chain, dtype=np.float64)
    return float(per_chain.mean()), float(per_chain.std(ddof=1) / math.sqrt(per_chain.size))


def _check_theta(theta, n_nodes: int) -> np.ndarray:
    theta = np.asarray(theta, dtype=np.float64)
    if theta.ndim != 1 or theta.size < 3 or theta.size != n_nodes:
        raise ValueError(f"theta must be a 1-D array of >= 3 nodes, one per entry of M_by_node "
                         f"({n_nodes}), got shape {theta.shape}")
    if not np.isfinite(theta).all() or theta[0] != 0.0:
        raise ValueError(f"theta must be finite with theta[0] == 0, got {theta}")
    step = np.diff(theta)
    if not (step > 0).all() or np.max(np.abs(step - step.mean())) > 1e-9 * step.mean():
        raise ValueError(f"theta must be increasing and equally spaced (np.linspace(0, theta_max, n)), "
                         f"got spacings {step}")
    return theta


def _lambda_weights(theta, x) -> np.ndarray:
    r"""Weights :math:`w_i(x)` with :math:`\Lambda(x) = \sum_i w_i(x) E_{\theta_i}M`, shape (x.size, n_theta).

    The not-a-knot cubic spline through the node means is linear in them, so its
    antiderivative is a fixed linear combination; the columns are the splines of the unit vectors.
    """
    spline = scipy.interpolate.CubicSpline(theta, np.eye(theta.size)).antiderivative()
    return spline(np.asarray(x, dtype=np.float64)) - spline(0.0)[None, :]


def rate_estimates(M_by_node, theta, a: float, r_N: float) -> dict:
    r"""Direct, tilted (importance sampling) and Chernoff estimates of :math:`-\frac1{r_N}\log P(M_N \ge a)`.

    Parameters
    ----------
    M_by_node : list of ndarray, each of shape (C_j, n_steps)
        Samples of :math:`M_N` under :math:`P^{\theta_j}`, one row per independent chain
        (``C_j >= 2``); node 0 must be :math:`\theta = 0`.
    theta : ndarray, shape (n_theta,)
        Tilt nodes: ``theta[0] == 0``, increasing, equally spaced (``np.linspace``).
    a : float
        Threshold.
    r_N : float
        Speed.

    Returns
    -------
    dict
        ``mean_M`` and ``mean_M_se`` per node; ``Lambda`` and ``Lambda_se`` per node;
        ``p_direct``, ``p_direct_se``, ``rate_direct``, ``rate_direct_se`` (NaN when no sample
        hit A); ``rate_is``, ``rate_is_se``, ``is_node``; ``rate_chernoff``,
        ``rate_chernoff_se``, ``theta_chernoff``, ``chernoff_at_edge`` (the supremum sits at
        ``theta[-1]``: the grid is too short and the value is below the full supremum), and
        ``rate_bahadur_rao`` = Chernoff + :math:`\frac1{r_N}\log(\theta^*\sqrt{2\pi r_N\Lambda_N''(\theta^*)})`,
        the sharp finite-N prediction of :math:`-\frac1{r_N}\log P(A)` (Bahadur-Rao).

    Raises
    ------
    ValueError
        If ``theta`` does not start at 0, is not increasing and equally spaced, or does not
        have one node per entry of ``M_by_node``, or a node has fewer than 2 chains.

    Notes
    -----
    :math:`\Lambda_N` is the antiderivative of the cubic spline through the node means,
    :math:`\Lambda_N(\theta) = \sum_i w_i(\theta)\,\overline M_i` with fixed weights, and
    ``Lambda_se`` and ``rate_chernoff_se`` use the same weights,
    :math:`(\sum_i w_i^2 \mathrm{SE}_i^2)^{1/2}` (nodes are independent chains).
    ``rate_is_se`` is a delete-one-chain jackknife over all chains of all nodes (stratified
    by node), so it includes the covariance between :math:`\Lambda_N(\theta_j)` and the
    importance weights drawn from the same chains at node j (``inf`` when a single chain
    holds every sample in A at node j). Every SE covers the
    Monte-Carlo error between independent chains only: not the quadrature error of the
    spline, not MCMC burn-in bias, and not the gap between finite N and the limit.

    References
    ----------
    Gelman and Meng, Stat. Sci. 13 (1998) 163-185; Efron and Stein, Ann. Stat. 9 (1981)
    586-596 (jackknife variance); Bahadur and Rao, Ann. Math. Stat. 31 (1960) 1015-1027.
    """
    theta = _check_theta(theta, len(M_by_node))
    per_chain_M = []
    for i, M in enumerate(M_by_node):
        M = np.asarray(M, dtype=np.float64)
        if M.ndim != 2 or M.shape[0] < 2:
            raise ValueError(f"M_by_node[{i}] must have shape (C >= 2 chains, n_steps), got {M.shape}")
        per_chain_M.append(M.mean(axis=1))
    means = np.array([pc.mean() for pc in per_chain_M])
    ses = np.array([pc.std(ddof=1) / math.sqrt(pc.size) for pc in per_chain_M])
    W = _lambda_weights(theta, theta)  # (n_theta, n_theta): Lambda(theta_j) = W[j] @ means
    Lam = W @ means
    Lam_se = np.sqrt((W * W) @ (ses * ses))
    out = {"mean_M": means, "mean_M_se": ses, "Lambda": Lam, "Lambda_se": Lam_se}

    # direct
    hits = (np.asarray(M_by_node[0]) >= a).mean(axis=1)
    p, p_se = _mean_se_chains(hits)
    out.update(p_direct=p, p_direct_se=p_se,
               rate_direct=(-math.log(p) / r_N) if p > 0 else math.nan,
               rate_direct_se=(p_se / (p * r_N)) if p > 0 else math.nan)

    # importance sampling at the node whose mean is closest to a
    j = int(np.argmin(np.abs(means - a)))
    if j == 0:
        j = 1
    Mj = np.asarray(M_by_node[j])
    logw = -r_N * theta[j] * (Mj - a)  # shifted by r_N theta a for stability
    q_chain = np.mean(np.where(Mj >= a, np.exp(np.minimum(logw, 0.0)), 0.0), axis=1)
    q = float(q_chain.mean())
    if q > 0:
        rate_is = theta[j] * a - Lam[j] - math.log(q) / r_N
        # stratified delete-one-chain jackknife: removing chain c of node i moves the node mean
        # (hence Lambda_j by W[j, i] times the change) and, at node j, the importance weight q
        var = 0.0
        for i, pc in enumerate(per_chain_M):
            C = pc.size
            loo_mean = (pc.sum() - pc) / (C - 1)
            vals = -W[j, i] * (loo_mean - means[i])
            if i == j:
                loo_q = (q_chain.sum() - q_chain) / (C - 1)
                if not (loo_q > 0).all():  # one chain carries every hit: no usable error estimate
                    var = math.inf
                    break
                vals = vals - (np.log(loo_q) - math.log(q)) / r_N
            var += (C - 1) / C * float(np.sum((vals - vals.mean()) ** 2))
        rate_is_se = math.sqrt(var)
    else:
        rate_is = rate_is_se = math.nan
    out.update(rate_is=rate_is, rate_is_se=rate_is_se, is_node=j)

    # Chernoff / Legendre on a fine grid
    fine = np.linspace(0.0, theta[-1], 2001)
    W_fine = _lambda_weights(theta, fine)
    vals = fine * a - W_fine @ means
    k = int(np.argmax(vals))
    th_star = float(fine[k])
    # its SE: that of Lambda at the maximiser (envelope theorem), with the same weights
    chernoff_se = float(np.sqrt((W_fine[k] ** 2) @ (ses * ses)))
    # Bahadur-Rao: P ~ exp(-r I_N) / (theta* sqrt(2 pi r Lambda_N''(theta*))) for a lattice-free statistic
    spline = scipy.interpolate.CubicSpline(theta, means)
    curv = float(spline.derivative()(th_star))  # Lambda_N'' = d E_theta[M] / d theta = r Var_theta(M)
    br = (math.log(th_star * math.sqrt(2.0 * math.pi * r_N * curv)) / r_N
          if th_star > 0 and curv > 0 else math.nan)
    out.update(rate_chernoff=float(vals[k]), theta_chernoff=th_star, rate_chernoff_se=chernoff_se,
               chernoff_at_edge=bool(k == fine.size - 1), rate_bahadur_rao=float(vals[k]) + br)
    return out


def _limit_rates(cfg: LDPConfig, reg: RegimeConfig):
    """inf_A J and its multiplier from the solver, plus the equilibrium second moment.

    Raises RuntimeError if the rate infimum or the untilted density did not converge.
    """
    dom = interval_mesh(cfg.lo, cfg.hi, cfg.n_cells)
    beta = reg.beta if reg.regime == "fixed_beta" else math.inf
    gamma = cfg.gamma
    prob = MeanFieldProblem.create(dom, lambda x: 0.5 * gamma * x[:, 0] ** 2, s=cfg.s, lam=cfg.lam, beta=beta)
    f = dom.centers[:, 0] ** 2
    res = rate_infimum(prob, f, reg.a, regime=reg.regime)
    if not res.converged:
        raise RuntimeError(
            f"[{reg.name}] rate_infimum did not converge: constraint int f rho = {res.constraint!r} "
            f"against a = {reg.a!r} (gap {res.constraint - reg.a:.3e}) after {res.iterations} tilted solves, "
            f"multiplier {res.theta!r}; the limit inf_A J would be wrong (change n_cells, a or the domain)")
    if reg.regime == "fixed_beta":
        base = gibbs_density(prob)
        residual = f"residual {base.residual:.3e} after {base.iterations} iterations"
    else:
        base = equilibrium_on_mesh(prob)
        residual = f"KKT residual {base.kkt_residual:.3e}"
    if not base.converged:
        raise RuntimeError(f"[{reg.name}] the untilted {'Gibbs density' if reg.regime == 'fixed_beta' else 'equilibrium'} "
                           f"did not converge ({residual}); m* and the initial states would be wrong")
    m_star = float(np.dot(dom.volumes * base.rho, f))
    # the solver's multiplier in the units of Lambda (theta multiplies r_N M_N):
    # fixed_beta: rho_theta ~ exp(-beta V_eff + theta f) -> theta; low temperature: V - theta f -> theta
    return dict(value=res.value, theta=res.theta, m_star=m_star, rho_tilted=res.rho, rho_base=base.rho,
                domain=dom)


def _sample_density(rng, n_chains, n, dom, rho):
    """Initial states: i.i.d. draws from a cell density (uniform within cells), sorted per chain."""
    m = rho * dom.volumes
    x = sample_cells(rng, n_chains * n, m / m.sum(), dom.origin, dom.spacing, dom.grid_shape)[:, 0]
    return np.sort(x.reshape(n_chains, n), axis=1)


def _grid_of(dom):
    """The picklable part of a mesh that :func:`_sample_density` reads (the mesh stays here)."""
    import types

    return types.SimpleNamespace(volumes=np.asarray(dom.volumes), origin=tuple(dom.origin),
                                 spacing=tuple(dom.spacing), grid_shape=tuple(dom.grid_shape))


#: per-(regime, N) estimates that :func:`cell_task` returns from :func:`rate_estimates`
_CELL_ESTIMATES = ("p_direct", "p_direct_se", "rate_direct", "rate_direct_se", "rate_is", "rate_is_se",
                   "rate_chernoff", "rate_chernoff_se", "theta_chernoff", "rate_bahadur_rao", "chernoff_at_edge")


def cell_task(cfg: LDPConfig, ir: int, n: int, theta, rho_base, grid) -> dict:
    """One (regime, N) cell: tilted MALA chains at every node and the rate estimates.

    Runs in-process or on a Dask worker (:func:`rieszflow.studies.sweep.run_jobs`). The cell draws
    only from ``SeedSequence([seed, regime index, N])``, so its numbers do not depend on where
    or in which order the cells run.

    Parameters
    ----------
    cfg : LDPConfig
    ir : int
        Index of the regime in ``cfg.regimes``.
    n : int
        Particles N.
    theta : ndarray, shape (n_theta,)
        Tilt nodes.
    rho_base : ndarray, shape (n_cells,)
        Untilted limit density (initial states are drawn from it).
    grid : object
        ``volumes``, ``origin``, ``spacing``, ``grid_shape`` of its mesh.

    Returns
    -------
    dict
        ``estimates`` (the scalars of :func:`rate_estimates`), ``nodes`` (``mean_M``,
        ``mean_M_se``, ``Lambda``, ``Lambda_se``, ``acceptance`` per node), ``speed``,
        ``beta_N``, ``acceptance_mean`` and ``wall`` (s).
    """
    t0 = time.perf_counter()
    reg = cfg.regimes[ir]
    J = cfg.n_theta
    rng = np.random.default_rng(np.random.SeedSequence([cfg.seed, ir, n]))
    r_N, beta_N = reg.speed(n), reg.beta_N(n)
    target = GibbsTarget(n, beta_N, cfg.gamma, cfg.s, cfg.lam, cfg.lo, cfg.hi)
    counts = [cfg.chains_at_zero] + [cfg.chains_per_theta] * (J - 1)
    tau = np.concatenate([np.full(c, th * r_N / beta_N) for c, th in zip(counts, theta)])
    x0 = _sample_density(rng, int(sum(counts)), n, grid, rho_base)
    run = run_tilted_chains(target, x0, tau, rng, burn_in=cfg.burn_in, n_steps=cfg.n_steps)
    edges = np.concatenate([[0], np.cumsum(counts)])
    M_by = [run.M[edges[j]:edges[j + 1]] for j in range(J)]
    est = rate_estimates(M_by, theta, reg.a, r_N)
    nodes = {k: est[k] for k in ("mean_M", "mean_M_se", "Lambda", "Lambda_se")}
    nodes["acceptance"] = [run.acceptance[edges[j]:edges[j + 1]].mean() for j in range(J)]
    return {"estimates": {k: est[k] for k in _CELL_ESTIMATES}, "nodes": nodes, "speed": r_N,
            "beta_N": beta_N, "acceptance_mean": float(run.acceptance.mean()),
            "wall": time.perf_counter() - t0}


def run_ldp_study(cfg: LDPConfig, out, *, overwrite: bool = False, resume: bool = False,
                  progress: bool = True, log=print, workers: int | None = 0,
                  scheduler: str | None = None, on_summary=None) -> Path:
    """Run the study and write ``out`` (HDF5, kind ``"ldp_study"``).

    Variables (dimensions ``regime``, ``N``, ``node``):

    ``a(regime)``, ``rate_limit(regime)``, ``theta_limit(regime)``, ``m_star(regime)``
        Threshold, :math:`\\inf_A\\mathcal J` and its multiplier from
        :func:`~rieszflow.solvers.gibbs.rate_infimum`, equilibrium :math:`\\int f\\,d\\mu^*`.
    ``speed(regime, N)``, ``beta_N(regime, N)``
        The speed :math:`r_N` and the inverse temperature :math:`\\beta_N = \\beta N^\\kappa`.
    ``theta(regime, N, node)``, ``mean_M``, ``mean_M_se``, ``Lambda``, ``Lambda_se``, ``acceptance``
        Tilt nodes, :math:`E_\\theta M_N`, :math:`\\Lambda_N(\\theta)` and MALA acceptance.

    ``p_direct``, ``p_direct_se``, ``rate_direct``, ``rate_direct_se``, ``rate_is``, ``rate_is_se``,
    ``rate_chernoff``, ``rate_chernoff_se``, ``rate_bahadur_rao``, ``chernoff_at_edge``, ``wall`` (regime, N)

    Root attribute ``failures``: JSON list of the cells that failed in the last session (task,
    error, traceback); empty when none failed.

    The limits are solved here; the (regime, N) cells are independent tasks run through
    :func:`rieszflow.studies.sweep.run_jobs` (:func:`cell_task`), each stored as it finishes.
    Each cell draws from its own generator, so the arrays are the same bit for bit whatever
    ``workers`` is and in whatever order the cells finish.

    Parameters
    ----------
    cfg : LDPConfig
    out : str or os.PathLike
    overwrite : bool, default False
        Replace an existing file.
    resume : bool, default False
        Continue an interrupted (or partly failed) study in ``out``: (regime, N) cells already
        stored (``wall`` finite; it is written last) are skipped. Each cell draws from its own
        generator ``SeedSequence([seed, regime index, N])``, so the result equals an
        uninterrupted study; the limits are recomputed (deterministic). The regime index is the
        regime's position in ``cfg.regimes``: reordering the regimes changes their streams.
    progress : bool, default True
        One tqdm bar over the cells (done / failed / skipped).
    log : callable, default print
    workers : int or None, default 0
        0 runs the cells in this process, one after the other (as before the sweep layer); an
        integer > 0 on a :class:`distributed.LocalCluster` of that many single-threaded worker
        processes; None on a LocalCluster with one worker per core.
    scheduler : str, optional
        Address of an existing Dask scheduler instead (its workers must import rieszflow); with
        it, ``workers`` is left at its default or None.
    on_summary : callable, optional
        ``on_summary(summary)`` with the :class:`rieszflow.studies.sweep.JobsSummary` of the cells
        (done, skipped, failed), called before a failure is raised; without it a failure's summary
        goes to ``log``.

    Returns
    -------
    pathlib.Path

    Raises
    ------
    TypeError
        If ``cfg`` is not an LDPConfig.
    FileExistsError
        If ``out`` exists and neither ``overwrite`` nor ``resume`` is set.
    FileNotFoundError
        If ``resume`` is set and ``out`` does not exist.
    ValueError
        If ``resume`` is set and ``out`` was written with another configuration, both
        ``overwrite`` and ``resume`` are set, or both ``workers`` and ``scheduler``.
    RuntimeError
        If a solve of the limit (:func:`_limit_rates`) did not converge (before any file is
        written), or :class:`rieszflow.studies.sweep.TasksFailed` (a RuntimeError) if cells
        failed: the other cells are stored, the file's status is ``"failed"`` and ``resume=True``
        runs the failed cells again.
    """
    if not isinstance(cfg, LDPConfig):
        raise TypeError(f"cfg must be an LDPConfig, got {type(cfg).__name__}")
    if scheduler is not None and workers == 0:      # the default: in-process unless a scheduler
        workers = None
    check_executor(workers, scheduler)
    log = log or (lambda *a: None)
    out = Path(out)
    t_start = time.perf_counter()
    if resume:
        if overwrite:
            raise ValueError("overwrite=True and resume=True exclude each other")
        check_resumable(out, KIND, {"json": cfg.to_dict()})
    elif out.exists() and not overwrite:  # checked before the (slow) limit solves
        raise FileExistsError(f"{out} already exists; refusing to overwrite a run. Pass overwrite=True "
                              f"(CLI: --overwrite) to replace it, or resume=True (CLI: --resume) to "
                              f"continue an interrupted study")
    regs, ns = cfg.regimes, cfg.n_particles
    R, K, J = len(regs), len(ns), cfg.n_theta
    shape2, shape3 = (R, K), (R, K, J)
    arrays = {k: np.full(shape2, np.nan) for k in (
        "speed", "beta_N", "p_direct", "p_direct_se", "rate_direct", "rate_direct_se", "rate_is",
        "rate_is_se", "rate_chernoff", "rate_chernoff_se", "theta_chernoff", "rate_bahadur_rao",
        "chernoff_at_edge", "wall")}
    arrays3 = {k: np.full(shape3, np.nan) for k in ("theta", "mean_M", "mean_M_se", "Lambda", "Lambda_se",
                                                     "acceptance")}
    limits = [_limit_rates(cfg, reg) for reg in regs]  # before the file: a failed solve leaves no file
    with TrajectoryWriter(out, KIND, config={"json": cfg.to_dict()}, overwrite=overwrite, resume=resume,
                          attrs={"seed": cfg.seed, "backend": cfg.backend}) as w, \
            Executor(workers, scheduler) as ex:
        one = {"units": "1"}
        w.dimension("regime", R, coords=np.array([r.name for r in regs]),
                    attrs={"long_name": "temperature regime beta_N = beta N^kappa", **one})
        w.dimension("N", K, coords=np.asarray(ns, dtype=np.int64),
                    attrs={"long_name": "number of particles N", **one})
        w.dimension("node", J, coords=np.arange(J),
                    attrs={"long_name": "tilt node of the thermodynamic integration", **one})
        for name, key, ln in (("rate_limit", "value", "limit rate inf_A J (rate-function infimum)"),
                              ("theta_limit", "theta", "optimal tilt of the limit problem"),
                              ("m_star", "m_star", "equilibrium value m* of the observable M")):
            w.variable(name, ("regime",), data=np.array([lim[key] for lim in limits]),
                       attrs={"long_name": ln, **one})
        w.variable("a", ("regime",), data=np.array([r.a for r in regs]),
                   attrs={"long_name": "deviation level a of the event A = {M_N >= a}", **one})
        w.variable("kappa", ("regime",), data=np.array([r.kappa for r in regs]),
                   attrs={"long_name": "exponent kappa of beta_N = beta N^kappa", **one})
        for k in arrays:
            w.variable(k, ("regime", "N"), attrs={"long_name": _LDP_LONG_NAMES[k],
                                                  "units": "s" if k == "wall" else "1"})
        for k in arrays3:
            w.variable(k, ("regime", "N", "node"), attrs={"long_name": _LDP_LONG_NAMES[k], **one})
        if resume:
            arrays = {k: w.read(k) for k in arrays}
            arrays3 = {k: w.read(k) for k in arrays3}
        jobs, where, skipped = [], {}, 0        # where: id(job) -> (regime index, N index)
        for ir, (reg, lim) in enumerate(zip(regs, limits)):
            log(f"[{reg.name}] beta_N = {reg.beta}*N^{reg.kappa:g}, a = {reg.a}: inf_A J = {lim['value']:.5f} "
                f"(solver, multiplier {lim['theta']:.4f}, equilibrium m* = {lim['m_star']:.4f})")
            theta = np.linspace(0.0, cfg.theta_max_factor * lim["theta"], J)
            grid = _grid_of(lim["domain"])
            for ik, n in enumerate(ns):
                if np.isfinite(arrays["wall"][ir, ik]):
                    log(f"[{reg.name}] N={n:>3d}: stored (resume)")
                    skipped += 1
                    continue
                job = Job({"regime": reg.name, "N": int(n)}, cell_task,
                          (cfg, ir, int(n), theta, lim["rho_base"], grid))
                jobs.append(job)
                where[id(job)] = (ir, ik, theta)

        def store(job, result):
            """Write one finished cell; ``wall`` last (a finite wall marks a finished cell)."""
            if result["status"] != "done":
                return
            ir, ik, theta = where[id(job)]
            v, reg, lim, n = result["value"], regs[ir], limits[ir], ns[ik]
            est = v["estimates"]
            for k in _CELL_ESTIMATES:
                arrays[k][ir, ik] = est[k]
            arrays["speed"][ir, ik] = v["speed"]
            arrays["beta_N"][ir, ik] = v["beta_N"]
            arrays3["theta"][ir, ik] = theta
            for k, val in v["nodes"].items():
                arrays3[k][ir, ik] = val
            for k, val in {**arrays, **arrays3}.items():
                if k != "wall":
                    w.set(k, val)
            arrays["wall"][ir, ik] = v["wall"]
            w.set("wall", arrays["wall"])  # last: a finite wall marks a finished cell (resume)
            log(f"[{reg.name}] N={n:>3d} r_N={v['speed']:g}: direct {est['rate_direct']:.4f}+-"
                f"{est['rate_direct_se']:.4f} (p={est['p_direct']:.2e}), tilted {est['rate_is']:.4f}+-"
                f"{est['rate_is_se']:.4f}, Chernoff {est['rate_chernoff']:.4f}+-{est['rate_chernoff_se']:.4f}"
                f" | limit {lim['value']:.4f} | acc {v['acceptance_mean']:.2f}, {v['wall']:.1f} s")

        if not ex.in_process:       # the largest N first: balances the workers, changes no number
            jobs.sort(key=lambda j: -ns[where[id(j)][1]])
        log(f"ldp: {len(jobs)} (regime, N) cells on {ex.describe()}")
        summary = run_jobs(jobs, executor=ex, progress=progress, desc="ldp cells", skipped=skipped,
                           on_result=store)
        w.set_attrs(wall_s=time.perf_counter() - t_start, failures=summary.failures)
        if on_summary is not None:
            on_summary(summary)
        if summary.failed:
            if on_summary is None:
                log(summary.format("ldp cells"))
            raise TasksFailed("(regime, N) cells", summary.failures, summary.total,
                              hint=f"; the other cells are stored in {out} (status 'failed', tracebacks in "
                                   f"its root attribute 'failures'); --resume runs the failed ones again")
    return out


def load_study(path):
    """Open an LDP study file as an :class:`xarray.Dataset` (kind ``"ldp_study"``).

    Parameters
    ----------
    path : str or os.PathLike
        A file written by :func:`run_ldp_study`.

    Returns
    -------
    xarray.Dataset
        Loaded into memory (see :func:`rieszflow.engine.storage.open_run`).
    """
    return open_run(path, KIND)


def format_table(ds) -> str:
    """The table printed by the CLI: estimates of :math:`-\\frac1{r_N}\\log P(A)` against :math:`\\inf_A\\mathcal J`.

    Parameters
    ----------
    ds : xarray.Dataset
        From :func:`load_study`.

    Returns
    -------
    str
    """
    lines = []
    for ir, reg in enumerate(ds["regime"].values):
        lim = float(ds["rate_limit"][ir])
        lines.append(f"== {reg}: kappa={float(ds['kappa'][ir]):g}, a={float(ds['a'][ir]):g}, "
                     f"m*={float(ds['m_star'][ir]):.4f}, inf_A J = {lim:.5f} (solver) ==")
        lines.append("    N |   r_N  | P direct            | -log P / r_N: direct | tilted (IS)        |"
                     " Chernoff           | Bahadur-Rao | IS - limit")
        for ik, n in enumerate(ds["N"].values):
            g = lambda k: float(ds[k][ir, ik])  # noqa: E731
            lines.append(
                f"{int(n):>5d} | {g('speed'):>6g} | {g('p_direct'):.2e}+-{g('p_direct_se'):.1e} | "
                f"{g('rate_direct'):.4f}+-{g('rate_direct_se'):.4f}     | {g('rate_is'):.4f}+-{g('rate_is_se'):.4f}"
                f"   | {g('rate_chernoff'):.4f}+-{g('rate_chernoff_se'):.4f}"
                f"{'*' if g('chernoff_at_edge') > 0 else ' '}  | {g('rate_bahadur_rao'):.4f}      | "
                f"{g('rate_is') - lim:+.4f}")
        lines.append("(Chernoff = sup_theta[theta a - Lambda_N]: a lower bound on -log P / r_N; "
                     "* supremum at the last tilt node: also below the full supremum)")
        lines.append("")
    return "\n".join(lines)


def make_plot(ds, path) -> Path:
    """Save the rate estimates against N with the limit :math:`\\inf_A\\mathcal J` (PNG, Agg).

    Parameters
    ----------
    ds : xarray.Dataset
    path : str or os.PathLike

    Returns
    -------
    pathlib.Path
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    regs = ds["regime"].values
    fig, axs = plt.subplots(1, len(regs), figsize=(5.5 * len(regs), 4.2), squeeze=False)
    n = ds["N"].values
    for ir, reg in enumerate(regs):
        ax = axs[0, ir]
        for k, lab, mk in (("rate_direct", "direct sampling", "o"), ("rate_is", "tilted (IS)", "s"),
                           ("rate_chernoff", "Chernoff sup[theta a - Lambda_N]", "^")):
            ax.errorbar(n, ds[k][ir], yerr=ds[k + "_se"][ir], marker=mk, capsize=3, label=lab)
        ax.plot(n, ds["rate_bahadur_rao"][ir], "x:", label="Chernoff + Bahadur-Rao prefactor")
        ax.axhline(float(ds["rate_limit"][ir]), color="k", ls="--", label="inf_A J (solver)")
        ax.set(xscale="log", xlabel="N", ylabel="-(1/r_N) log P(int f dmu_N >= a)",
               title=f"{reg}: kappa={float(ds['kappa'][ir]):g}, a={float(ds['a'][ir]):g}")
        ax.legend(fontsize=7)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
