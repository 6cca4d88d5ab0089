"""Particle system of the mean-field study: boundary weak orders, drift = mean-field formula, 1-D Coulomb."""
import math

import numpy as np
import pytest
import scipy.integrate
import scipy.stats

from rieszflow.engine.backend import get_backend
from rieszflow.engine.energy import RieszEnergy, SortedCoulomb1D
from rieszflow.engine.simulate import projected_langevin
from rieszflow.engine.space import Box, Interval
from rieszflow.solvers.particles import (MeanFieldParticles, TruncatedGaussian, make_interaction, mean_field_drift, quadratic_potential, snapshot_steps)

# ----------------------------------------------------------------------------- boundary weak order
#
# Reflected Brownian motion with drift -mu on the half-line, sigma = 1 (V = mu x, beta = 2), from
# X_0 = 0. X_T has the law of sup_{u <= T}(W_u - mu u):
#   P(X_T >= x) = Phi_bar((x + mu T)/sqrt T) + exp(-2 mu x) Phi_bar((x - mu T)/sqrt T),
# so E[X_T] is a one-dimensional integral. The upper wall at 20 is never reached (P < 1e-80).
# Projection is the Lindley recursion: its bias is zeta(1/2)/sqrt(2 pi) sqrt(eta) + O(eta)
# (Asmussen, Glynn and Pitman, Ann. Appl. Probab. 5 (1995) 875-896): weak order 1/2.
# Mirror reflection (Bossy, Gobet and Talay 2004) has weak order 1.

MU, T, M_PATHS = 1.0, 1.0, 400_000
STEPS = (8, 16, 32, 64)
AGP = -1.4603545088095868 / math.sqrt(2.0 * math.pi)  # zeta(1/2) / sqrt(2 pi) = -0.5826


def _exact_mean():
    def tail(x):
        return (scipy.stats.norm.sf((x + MU * T) / math.sqrt(T))
                + math.exp(-2 * MU * x) * scipy.stats.norm.sf((x - MU * T) / math.sqrt(T)))

    return scipy.integrate.quad(tail, 0, np.inf, epsabs=1e-13)[0]


@pytest.fixture(scope="module")
def biases():
    """Bias of E[X_T] and its standard error for each scheme and step (M_PATHS paths each)."""
    exact = _exact_mean()
    space = Interval(0.0, 20.0)
    out = {}
    for boundary in ("project", "reflect"):
        b, se = [], []
        for n in STEPS:
            init_fn, step_fn = projected_langevin(lambda x: np.full_like(x, MU), space, T / n, 2.0,
                                                  grad_scale=1.0, boundary=boundary)
            state = init_fn(np.zeros((M_PATHS, 1)))
            rng = np.random.default_rng(1000 + n)
            for _ in range(n):
                state = step_fn(state, rng.standard_normal((M_PATHS, 1)))
            x = state.omega[:, 0]
            b.append(x.mean() - exact)
            se.append(x.std(ddof=1) / math.sqrt(M_PATHS))
        out[boundary] = (np.array(b), np.array(se))
    return out


def _loglog_slope(eta, b, se):
    """Weighted LS slope of log|b| on log eta and its SE (delta method: SE(log|b|) = se/|b|)."""
    y, sy = np.log(np.abs(b)), se / np.abs(b)
    A = np.stack([np.ones_like(eta), np.log(eta)], axis=1) / sy[:, None]
    coef, *_ = np.linalg.lstsq(A, y / sy, rcond=None)
    cov = np.linalg.inv(A.T @ A)
    return coef[1], math.sqrt(cov[1, 1])


def test_boundary_weak_orders_projection_half_reflection_one(biases):
    eta = T / np.array(STEPS, dtype=float)
    bp, sp = biases["project"]
    br, sr = biases["reflect"]
    # every bias is resolved: |bias| > 10 SE (SE ~ 6e-4 with 4e5 paths; smallest bias ~ 8e-3)
    assert np.all(np.abs(bp) > 10 * sp) and np.all(np.abs(br) > 10 * sr)
    # projection underestimates (the walk misses excursions between steps), reflection overestimates
    assert np.all(bp < 0) and np.all(br > 0)
    p_proj, se_proj = _loglog_slope(eta, bp, sp)
    p_refl, se_refl = _loglog_slope(eta, br, sr)
    # slope SEs are ~0.01: the tolerances below are set by the O(eta) correction to the leading
    # sqrt(eta) term of projection (measured raw slope 0.44 on these steps), not by noise
    assert se_proj < 0.03 and se_refl < 0.05
    assert 0.35 < p_proj < 0.6, p_proj
    assert 0.85 < p_refl < 1.15, p_refl
    assert (p_refl - p_proj) > 0.4 + 5 * math.hypot(se_proj, se_refl)
    # leading constant of projection: bias = c1 sqrt(eta) + c2 eta with c1 = zeta(1/2)/sqrt(2 pi)
    A = np.stack([np.sqrt(eta), eta], axis=1) / sp[:, None]
    coef, *_ = np.linalg.lstsq(A, bp / sp, rcond=None)
    c1_se = math.sqrt(np.linalg.inv(A.T @ A)[0, 0])
    assert abs(coef[0] - AGP) < max(5 * c1_se, 0.02), (coef[0], AGP, c1_se)


# ----------------------------------------------------------------------------- drift and energies

def test_sorted_coulomb_equals_pair_sums(rng):
    x = rng.normal(size=(57, 1))
    for norm in ("mean_field", "paper"):
        fast = SortedCoulomb1D(lam=1.7, normalization=norm)
        ref = RieszEnergy(s=-1.0, lam=1.7, normalization=norm)
        np.testing.assert_allclose(fast.grad(x), ref.grad(x), rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(fast(x), ref(x), rtol=1e-13)
        np.testing.assert_allclose(fast.per_particle(x), ref.per_particle(x), rtol=1e-12, atol=1e-14)


def test_sorted_coulomb_ties_use_sign_zero():
    x = np.array([[0.0], [0.0], [1.0]])
    g = SortedCoulomb1D(lam=3.0).grad(x)  # (lam/N)(n_greater - n_less)
    np.testing.assert_allclose(g[:, 0], [1.0, 1.0, -2.0])


def test_make_interaction_dispatch_and_errors():
    assert isinstance(make_interaction(-1.0, 1.0, 1), SortedCoulomb1D)
    assert isinstance(make_interaction(-1.0, 1.0, 1, method="numba"), RieszEnergy)
    assert isinstance(make_interaction(0.0, 1.0, 2), RieszEnergy)
    with pytest.raises(ValueError, match="method='sorted'"):
        make_interaction(0.0, 1.0, 1, method="sorted")
    with pytest.raises(ValueError, match="method"):
        make_interaction(0.0, 1.0, 1, method="fmm")
    with pytest.raises(ValueError, match="s must satisfy"):
        make_interaction(-2.5, 1.0, 1)


@pytest.mark.parametrize("s,d", [(0.5, 2), (0.0, 2), (-1.0, 1), (-0.5, 1)])
def test_drift_is_minus_gradient_of_hamiltonian(rng, s, d):
    """Central differences of H_N = sum V + (lam/2N) sum_{i!=j} g in float64 against the drift."""
    n = 7
    x = rng.normal(size=(n, d))
    sys_ = MeanFieldParticles(Box([-10.0] * d, [10.0] * d) if d > 1 else Interval(-10, 10),
                              quadratic_potential(0.7), make_interaction(s, 1.3, d), beta=1.0, eta=0.01)
    H = sys_.hamiltonian
    drift = sys_.drift(x)
    h = 1e-6
    num = np.empty_like(x)
    for i in range(n):
        for a in range(d):
            xp, xm = x.copy(), x.copy()
            xp[i, a] += h
            xm[i, a] -= h
            num[i, a] = -(float(H(xp)) - float(H(xm))) / (2 * h)
    np.testing.assert_allclose(drift, num, rtol=1e-6, atol=1e-8)
    # explicit eq. (E.2) with the 1/N (mean-field) normalisation
    explicit = -0.7 * x
    for i in range(n):
        for j in range(n):
            if i != j:
                w = x[i] - x[j]
                r = np.linalg.norm(w)
                grad_g = -(1.0 if s == 0 else abs(s)) * r ** (-(s + 2)) * w
                explicit[i] -= 1.3 / n * grad_g
    np.testing.assert_allclose(drift, explicit, rtol=1e-12, atol=1e-13)


def test_mean_field_drift_rejects_paper_normalisation():
    with pytest.raises(ValueError, match="mean_field"):
        mean_field_drift(np.zeros((3, 1)), quadratic_potential(1.0, "paper"), SortedCoulomb1D(1.0))


@pytest.mark.parametrize("s,tol", [(-1.0, 1e-3), (-0.5, 3e-3)])
def test_lam_over_N_scaling_matches_pde_convolution(s, tol):
    """(lam/N) sum_j grad g(x - x_j) over quantile particles of a smooth rho -> lam (grad g * rho)(x).

    The PDE side is the exact cell-averaged convolution of solvers.mckean_vlasov on 2000 cells,
    differentiated by central differences of the potential at cell centres (error O(h^2)).
    The particle side uses N = 20000 quantile points. For s = -1 (bounded force) the quadrature
    error is O(1/N); for s = -0.5 the force |w|^{-1/2} is singular and the nearest quantile points
    contribute an error of order N^{-1/2} = 7e-3 unless the probe sits midway between two of
    them, which it does here.
    """
    from rieszflow.solvers.mckean_vlasov import interval_mesh, make_convolution

    lam, lo, hi = 1.3, -2.0, 2.0
    law = TruncatedGaussian((0.3,), (0.6,), (lo,), (hi,))
    dom = interval_mesh(lo, hi, 2000)
    rho = law.cell_density(dom)
    U = lam * make_convolution(dom, s)(rho)
    h = dom.spacing[0]
    centres = dom.centers[:, 0]
    n = 20000
    q = law._marginal(0).ppf((np.arange(n) + 0.5) / n)
    inter = make_interaction(s, lam, 1)
    faces = 0.5 * (centres[1:] + centres[:-1])
    grad_faces = np.diff(U) / h  # central difference of the potential at the cell faces, O(h^2)
    for probe_guess in (-1.0, -0.2, 0.3, 0.8, 1.4):
        j = int(np.searchsorted(q, probe_guess))
        probe = 0.5 * (q[j - 1] + q[j])  # midway between two particles: the near field cancels
        omega = np.concatenate([[probe], q])[:, None]
        force = inter.grad(omega)[0, 0] * (n + 1) / n  # the system has N + 1 particles
        grad_pde = float(np.interp(probe, faces, grad_faces))
        assert abs(force - grad_pde) < tol * max(1.0, abs(grad_pde)), (probe, force, grad_pde)


# ----------------------------------------------------------------------------- system and initial law

def test_truncated_gaussian_cells_and_samples(rng):
    from rieszflow.solvers.mckean_vlasov import rectangle_mesh

    law = TruncatedGaussian((0.5, 0.0), (0.3, 0.5), (-2.0, -2.0), (2.0, 2.0))
    dom = rectangle_mesh((-2, -2), (2, 2), (16, 8))
    rho = law.cell_density(dom)
    assert abs(np.dot(rho, dom.volumes) - 1.0) < 1e-12
    x = law.sample(rng, 4000)
    assert x.shape == (4000, 2) and np.all(np.abs(x) <= 2.0)
    # KS test of the first marginal; p-value threshold 1e-3 (seeded)
    assert scipy.stats.kstest(x[:, 0], law._marginal(0).cdf).pvalue > 1e-3
    with pytest.raises(ValueError, match="std"):
        TruncatedGaussian((0.0,), (0.0,), (-1.0,), (1.0,))


def test_simulate_snapshots_and_errors(rng):
    sys_ = MeanFieldParticles(Interval(-1.0, 1.0), quadratic_potential(1.0), make_interaction(-1.0, 1.0, 1),
                              beta=10.0, eta=0.01, boundary="reflect")
    x0 = rng.uniform(-0.5, 0.5, size=(50, 1))
    snaps = sys_.simulate(x0, [0.0, 0.05, 0.1], np.random.default_rng(3), backend=get_backend("numpy"))
    assert snaps.shape == (3, 50, 1)
    np.testing.assert_array_equal(snaps[0], x0)
    assert np.all(np.abs(snaps) <= 1.0)
    # same seed, same trajectory
    again = sys_.simulate(x0, [0.0, 0.05, 0.1], np.random.default_rng(3))
    np.testing.assert_array_equal(snaps, again)
    with pytest.raises(ValueError, match="multiples of eta"):
        snapshot_steps([0.0, 0.015], 0.01)
    with pytest.raises(ValueError, match="boundary"):
        MeanFieldParticles(Interval(-1, 1), quadratic_potential(1.0), SortedCoulomb1D(), 1.0, 0.1, "absorb")
    with pytest.raises(ValueError, match="mean_field"):
        MeanFieldParticles(Interval(-1, 1), quadratic_potential(1.0, "paper"), SortedCoulomb1D(), 1.0, 0.1)
    with pytest.raises(ValueError, match="outside"):
        sys_.simulate(np.full((3, 1), 2.0), [0.0, 0.01], rng)
    with pytest.raises(ValueError, match="beta"):
        MeanFieldParticles(Interval(-1, 1), quadratic_potential(1.0), SortedCoulomb1D(), -1.0, 0.1)
