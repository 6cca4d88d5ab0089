"""Tests of engine.simulate: the Langevin step of eq. (4.3), stationary laws, MALA, Gibbs resampling."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import scipy.stats

from rieszflow.engine.energy import ExternalPotential, RieszEnergy, rff_hamiltonian
from rieszflow.engine.simulate import (
    LangevinState,
    gibbs_resample,
    gibbs_weights,
    mala,
    projected_langevin,
    run_langevin,
)
from rieszflow.engine.space import Ball, Box, Free, Interval


def harmonic(normalization="mean_field"):
    """V(omega) = |omega|^2 / 2 per particle."""
    return ExternalPotential(lambda w: 0.5 * np.sum(w * w, axis=1), lambda w: w, normalization=normalization)


# ----------------------------------------------------------------------------- one step

def test_step_is_eq_4_3_exactly():
    rng = np.random.default_rng(0)
    N, eta, beta = 5, 0.01, 3.0
    omega = Ball(1.0).project(rng.normal(size=(N, 2)))
    energy = RieszEnergy(1.0, lam=2.0)  # paper normalisation
    space = Ball(1.0)
    init_fn, step_fn = projected_langevin(energy.grad, space, eta, beta)
    noise = rng.normal(size=(N, 2))
    state = step_fn(init_fn(omega), noise)
    # omega <- P(omega - eta N grad_k H + sqrt(2 eta / beta) xi), with P the ball projection
    raw = omega - eta * N * energy.grad(omega) + math.sqrt(2 * eta / beta) * noise
    norms = np.linalg.norm(raw, axis=1, keepdims=True)
    expected = raw * np.minimum(1.0, 1.0 / norms)
    np.testing.assert_allclose(state.omega, expected, rtol=1e-15, atol=1e-15)
    assert state.step == 1
    assert float(state.max_displacement) == pytest.approx(np.linalg.norm(expected - omega, axis=1).max(), rel=1e-15)
    # the default grad_scale is N
    _, step_n = projected_langevin(energy.grad, space, eta, beta, grad_scale=N)
    np.testing.assert_array_equal(step_n(init_fn(omega), noise).omega, state.omega)


def test_step_is_pure():
    rng = np.random.default_rng(1)
    omega = rng.normal(size=(4, 2))
    keep = omega.copy()
    init_fn, step_fn = projected_langevin(harmonic().grad, Free(), 0.1, 1.0, grad_scale=1.0)
    state = init_fn(omega)
    noise = rng.normal(size=(4, 2))
    a = step_fn(state, noise)
    b = step_fn(state, noise)
    np.testing.assert_array_equal(a.omega, b.omega)
    np.testing.assert_array_equal(state.omega, keep)
    assert state.step == 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        state.step = 3


def test_reflecting_boundary():
    init_fn, step_fn = projected_langevin(lambda w: np.zeros_like(w), Interval(0.0, 1.0), 0.5, 2.0,
                                          boundary="reflect")
    state = init_fn(np.array([[0.9], [0.1]]))
    noise = np.array([[0.4], [-0.3]])  # sqrt(2 eta / beta) = sqrt(0.5)
    expected = np.array([[2.0 - (0.9 + 0.4 * math.sqrt(0.5))], [-(0.1 - 0.3 * math.sqrt(0.5))]])
    np.testing.assert_allclose(step_fn(state, noise).omega, expected, rtol=1e-14)


def test_gradient_clipping_uses_the_global_norm():
    big = np.array([[300.0, 400.0], [0.0, 0.0]])  # global norm 500 after grad_scale = 1
    init_fn, step_fn = projected_langevin(lambda w: big, Free(), 0.1, math.inf, grad_scale=1.0, clip_norm=10.0)
    state = step_fn(init_fn(np.zeros((2, 2))), np.zeros((2, 2)))
    np.testing.assert_allclose(state.omega, -0.1 * big * (10.0 / 500.0), rtol=1e-15)
    # below the threshold nothing changes
    init_fn, step_fn = projected_langevin(lambda w: big, Free(), 0.1, math.inf, grad_scale=1.0, clip_norm=1e3)
    np.testing.assert_allclose(step_fn(init_fn(np.zeros((2, 2))), np.zeros((2, 2))).omega, -0.1 * big)


def test_factory_and_step_validation():
    g = harmonic().grad
    for kwargs, match in ((dict(eta=0.0), "eta"), (dict(eta=-1.0), "eta"), (dict(beta=0.0), "beta"),
                          (dict(beta=float("nan")), "beta"), (dict(grad_scale=0.0), "grad_scale"),
                          (dict(clip_norm=-1.0), "clip_norm"), (dict(boundary="wrap"), "boundary")):
        args = dict(eta=0.1, beta=1.0) | kwargs
        with pytest.raises(ValueError, match=match):
            projected_langevin(g, Free(), **args)
    with pytest.raises(TypeError, match="space"):
        projected_langevin(g, "ball", 0.1, 1.0)
    init_fn, step_fn = projected_langevin(g, Ball(1.0), 0.1, 1.0)
    with pytest.raises(ValueError, match="outside"):
        init_fn(np.array([[2.0, 0.0]]))
    with pytest.raises(ValueError, match="noise"):
        step_fn(init_fn(np.zeros((3, 2))), np.zeros((2, 2)))
    with pytest.raises(ValueError, match="non-finite"):
        init_fn(np.array([[np.nan, 0.0]]))


# ----------------------------------------------------------------------------- the loop

def test_run_is_reproducible_from_its_seed():
    energy = RieszEnergy(0.0, lam=1.0) + ExternalPotential(lambda w: 0.5 * np.sum(w * w, 1), lambda w: w)
    init_fn, step_fn = projected_langevin(energy.grad, Box(-2.0, 2.0), 1e-3, 50.0)
    omega0 = np.random.default_rng(2).uniform(-1, 1, size=(10, 2))
    a = run_langevin(step_fn, init_fn(omega0), 50, seed=7, progress=False)
    b = run_langevin(step_fn, init_fn(omega0), 50, seed=7, progress=False)
    c = run_langevin(step_fn, init_fn(omega0), 50, seed=8, progress=False)
    np.testing.assert_array_equal(a.omega, b.omega)
    assert not np.array_equal(a.omega, c.omega)
    assert a.step == 50


def test_callback_schedule():
    init_fn, step_fn = projected_langevin(harmonic().grad, Free(), 0.1, 1.0, grad_scale=1.0)
    seen = []
    run_langevin(step_fn, init_fn(np.zeros((3, 1))), 35, seed=0, record_every=10,
                 callback=lambda st: seen.append(st.step), progress=False)
    assert seen == [0, 10, 20, 30, 35]
    seen.clear()
    run_langevin(step_fn, init_fn(np.zeros((3, 1))), 20, seed=0, record_every=10, record_initial=False,
                 callback=lambda st: seen.append(st.step), progress=False)
    assert seen == [10, 20]


def test_delta_stopping_rule_stops_at_the_predicted_step():
    # beta = inf, V = |w|^2/2, grad_scale = 1: omega^m = (1 - eta)^m omega^0, so the largest move of
    # step m is eta (1 - eta)^(m-1) max_k |omega_k^0|; the run stops at the first m where it is < delta.
    eta, delta = 0.1, 1e-3
    omega0 = np.array([[3.0, 4.0], [1.0, 0.0]])
    init_fn, step_fn = projected_langevin(harmonic().grad, Free(), eta, math.inf, grad_scale=1.0)
    final = run_langevin(step_fn, init_fn(omega0), 10_000, seed=0, delta=delta, progress=False)
    m_expected = next(m for m in range(1, 10_000) if eta * (1 - eta) ** (m - 1) * 5.0 < delta)
    assert final.step == m_expected
    np.testing.assert_allclose(final.omega, (1 - eta) ** m_expected * omega0, rtol=1e-12)


def test_divergence_is_reported():
    init_fn, step_fn = projected_langevin(lambda w: np.full_like(w, np.nan), Free(), 0.1, 1.0)
    with pytest.raises(FloatingPointError, match="step 3"):
        run_langevin(step_fn, init_fn(np.zeros((2, 2))), 3, seed=0, progress=False)


# ----------------------------------------------------------------------------- stationary laws

def test_unadjusted_chain_has_the_discrete_stationary_variance():
    # x <- x - eta x + sqrt(2 eta / beta) xi is AR(1) with rho = 1 - eta and stationary variance
    # sigma^2 = 1 / (beta (1 - eta / 2)) (not the continuous 1 / beta). The estimator is the mean of
    # x^2 over independent chains and M recorded steps after burn-in; Var(x^2) = 2 sigma^4 and the
    # autocorrelation of x^2 at lag k is rho^(2k), so each chain has M (1 - rho^2) / (1 + rho^2)
    # effective samples. Threshold: 5 standard errors.
    eta, beta, n_chains, d, burn, M = 0.1, 2.0, 2000, 2, 200, 400
    init_fn, step_fn = projected_langevin(harmonic().grad, Free(), eta, beta, grad_scale=1.0)
    samples = []
    state = run_langevin(step_fn, init_fn(np.zeros((n_chains, d))), burn, seed=11, progress=False)
    run_langevin(step_fn, state, M, seed=12, record_every=1, record_initial=False,
                 callback=lambda st: samples.append(st.omega ** 2), progress=False)
    estimate = float(np.mean(samples))
    sigma2 = 1.0 / (beta * (1.0 - eta / 2.0))
    rho2 = (1.0 - eta) ** 2
    ess = n_chains * d * M * (1 - rho2) / (1 + rho2)
    se = math.sqrt(2.0 * sigma2 ** 2 / ess)
    assert abs(estimate - sigma2) < 5 * se
    assert abs(estimate - 1.0 / beta) > 5 * se  # the test resolves the O(eta) bias


def test_mala_samples_the_truncated_gaussian_without_bias():
    # pi(x) ∝ exp(-beta x^2 / 2) on [lo, hi] exactly (no O(eta) bias): first and second moments
    # against scipy's truncated normal. Standard errors of the time averages from 40 batch means of
    # the all-particle averages; threshold 5 standard errors.
    lo, hi, beta, eta, N, steps = -1.0, 1.5, 2.0, 0.2, 4, 16_000
    init_fn, step_fn = mala(harmonic().value_and_grad, Interval(lo, hi), eta, beta, grad_scale=1.0)
    omega0 = np.random.default_rng(3).uniform(lo, hi, size=(N, 1))
    moments = []
    state = run_langevin(step_fn, init_fn(omega0), 500, seed=4, progress=False)
    state = run_langevin(step_fn, state, steps, seed=5, record_every=1, record_initial=False,
                         callback=lambda st: moments.append((st.omega.mean(), (st.omega ** 2).mean())),
                         progress=False)
    sd = 1.0 / math.sqrt(beta)
    law = scipy.stats.truncnorm(lo / sd, hi / sd, scale=sd)
    batches = np.array(moments).reshape(40, -1, 2).mean(axis=1)
    se = batches.std(axis=0, ddof=1) / math.sqrt(len(batches))
    exact = np.array([law.mean(), law.var() + law.mean() ** 2])
    assert (np.abs(batches.mean(axis=0) - exact) < 5 * se).all()
    rate = int(state.n_accepted) / state.step
    assert 0.2 < rate < 0.99
    # power: the projected (unadjusted) chain at the same eta misses the second moment by > 5 SE
    init_u, step_u = projected_langevin(harmonic().grad, Interval(lo, hi), eta, beta, grad_scale=1.0)
    ula = []
    state = run_langevin(step_u, init_u(np.zeros((2000, 1))), 200, seed=6, progress=False)
    run_langevin(step_u, state, 100, seed=7, record_every=1, record_initial=False,
                 callback=lambda st: ula.append((st.omega ** 2).mean()), progress=False)
    assert abs(np.mean(ula) - exact[1]) > 5 * se[1]


def test_mala_rejects_proposals_outside_the_domain():
    init_fn, step_fn = mala(harmonic().value_and_grad, Interval(0.0, 1.0), 0.1, 1.0, grad_scale=1.0)
    state = init_fn(np.array([[0.99]]))
    xi = np.array([[10.0]])  # lands far outside
    new = step_fn(state, (xi, np.asarray(-1e-12)))
    assert new.omega[0, 0] == 0.99 and int(new.n_accepted) == 0 and new.step == 1
    # a proposal with log_alpha > log_u inside the domain is accepted
    new = step_fn(state, (np.array([[-0.05]]), np.asarray(-50.0)))
    assert int(new.n_accepted) == 1 and new.omega[0, 0] != 0.99
    with pytest.raises(ValueError, match="beta"):
        mala(harmonic().value_and_grad, Free(), 0.1, math.inf)


# ----------------------------------------------------------------------------- Gibbs resampling

def test_gibbs_weights_closed_form_and_stability():
    e = np.array([0.0, 1.0, 2.0])
    w = gibbs_weights(e, 1.5)
    expected = np.exp(-1.5 * e) / np.exp(-1.5 * e).sum()
    np.testing.assert_allclose(w, expected, rtol=1e-15)
    assert w.sum() == pytest.approx(1.0, abs=1e-15)
    # log-sum-exp: huge energies neither overflow nor underflow to 0/0
    w = gibbs_weights(e + 1e5, 1e3)
    assert np.isfinite(w).all() and w.sum() == pytest.approx(1.0, abs=1e-15) and w[0] == pytest.approx(1.0)
    np.testing.assert_allclose(gibbs_weights(e, 0.0), 1 / 3, rtol=1e-15)
    np.testing.assert_array_equal(gibbs_weights(np.array([1.0, 0.0, 0.0]), math.inf), [0.0, 0.5, 0.5])
    with pytest.raises(ValueError, match="beta"):
        gibbs_weights(e, -1.0)
    with pytest.raises(ValueError, match="non-finite"):
        gibbs_weights(np.array([0.0, np.nan]), 1.0)


def test_gibbs_resampling_frequencies_chi_square():
    # Multinomial draws with replacement: Pearson chi-square against the expected counts, rejected
    # only above the 1 - 1e-6 quantile of chi2(N - 1) (about 5 standard normal deviations).
    rng = np.random.default_rng(123)
    omega = np.arange(10.0).reshape(5, 2)
    energies = np.array([0.0, 0.5, 1.0, 2.0, 3.0])
    beta, D = 1.0, 50_000
    res = gibbs_resample(omega, energies, beta, D, rng)
    assert res.omega.shape == (D, 2)
    np.testing.assert_array_equal(res.omega, omega[res.index])
    counts = np.bincount(res.index, minlength=5)
    chi2 = np.sum((counts - D * res.weights) ** 2 / (D * res.weights))
    assert chi2 < scipy.stats.chi2.ppf(1 - 1e-6, df=4)
    # and the test has power: uniform weights are rejected
    chi2_uniform = np.sum((counts - D / 5) ** 2 / (D / 5))
    assert chi2_uniform > scipy.stats.chi2.ppf(1 - 1e-6, df=4)


def test_gibbs_resample_with_hamiltonian_per_particle_energies():
    rng = np.random.default_rng(9)
    X = rng.normal(size=(12, 2))
    y = np.sign(rng.normal(size=12))
    omega = rng.normal(size=(8, 2))
    H = rff_hamiltonian(X, y, s=1.0, lam=0.2)
    res = gibbs_resample(omega, H.per_particle(omega), 5.0, 3, rng)
    np.testing.assert_allclose(res.weights, gibbs_weights(H.per_particle(omega), 5.0), rtol=1e-15)
    with pytest.raises(ValueError, match="length N=8"):
        gibbs_resample(omega, np.zeros(7), 1.0, 3, rng)
    with pytest.raises(ValueError, match="D"):
        gibbs_resample(omega, np.zeros(8), 1.0, 0, rng)
    with pytest.raises(TypeError, match="rng"):
        gibbs_resample(omega, np.zeros(8), 1.0, 3, 0)


def test_state_noise_shapes():
    st = LangevinState(omega=np.zeros((4, 3)))
    from rieszflow.engine.backend import get_backend
    assert st.draw_noise(np.random.default_rng(0), get_backend()).shape == (4, 3)


@pytest.mark.gpu
def test_seeded_run_is_identical_on_cupy():
    from rieszflow.engine.backend import cupy_available, get_backend, to_numpy

    if not cupy_available():
        pytest.skip("CuPy with a CUDA device is not available")
    energy = RieszEnergy(1.0, lam=0.5, softening=0.05, method="numpy") + harmonic("paper")
    out = []
    for name in ("numpy", "cupy"):
        omega0 = get_backend(name).asarray(np.random.default_rng(3).uniform(-1, 1, size=(32, 2)))
        init_fn, step_fn = projected_langevin(energy.grad, Box(-1.5, 1.5), 1e-3, 20.0, boundary="reflect")
        out.append(to_numpy(run_langevin(step_fn, init_fn(omega0), 20, seed=1, progress=False).omega))
    np.testing.assert_allclose(out[1], out[0], rtol=1e-10, atol=1e-12)


def test_mala_reports_acceptance_and_warns_when_a_chain_stops_accepting():
    """From a start with one very close pair (|x_1 - x_2| = 1e-7, Riesz s = 1) and a fixed large step,
    every proposal leaves the domain: the chain accepts nothing and run_langevin says so once; a
    healthy chain on the same energy from a spread start accepts and stays silent."""
    import warnings

    energy = RieszEnergy(1.0, lam=1.0)
    space = Interval(-5.0, 5.0)
    init_fn, step_fn = mala(energy.value_and_grad, space, eta=1e-2, beta=10.0)
    stuck = init_fn(np.array([[0.0], [1e-7], [1.0], [-1.0]]))
    with pytest.warns(RuntimeWarning, match=r"accepted no proposal in its last 200 steps .*reduce eta"):
        out = run_langevin(step_fn, stuck, 200, seed=0, progress=False, stall_steps=200)
    assert int(out.n_accepted) == 0 and out.acceptance_rate == 0.0 and int(out.last_accept) == 0
    init_fn, step_fn = mala(energy.value_and_grad, space, eta=1e-4, beta=10.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        ok = run_langevin(step_fn, init_fn(np.array([[-3.0], [-1.0], [1.0], [3.0]])), 300, seed=1,
                          progress=False, stall_steps=200)
    assert 0.5 < ok.acceptance_rate <= 1.0 and int(ok.last_accept) > 100


def test_mala_chain_axis_names_the_chains_that_stopped_accepting():
    """Two chains in one MALA: the one started with a near-collision stops accepting and is named."""
    import dataclasses

    energy = RieszEnergy(1.0, lam=1.0)

    def vg(omega):
        vals = [energy.value_and_grad(o) for o in omega]
        return np.array([v for v, _ in vals]), np.stack([g for _, g in vals])

    init_fn, step_fn = mala(vg, Interval(-5.0, 5.0), eta=1.0, beta=10.0)
    x = np.array([[[-3.0], [-1.0], [1.0], [3.0]], [[0.0], [1e-7], [1.0], [-1.0]]])
    state = dataclasses.replace(init_fn(x), eta=np.array([1e-4, 1e-2]))
    with pytest.warns(RuntimeWarning, match=r"chain \(chains 1\) accepted no proposal"):
        out = run_langevin(step_fn, state, 200, seed=0, progress=False, stall_steps=200)
    rates = out.acceptance_rate
    assert rates.shape == (2,) and rates[1] == 0.0 and rates[0] > 0.5


def test_projected_langevin_takes_the_gradient_as_an_argument():
    """``step_fn(state, noise, grad=g)`` is the step with ``grad_fn`` returning g, bit for bit;
    a step function built with ``grad_fn=None`` refuses a step without ``grad``."""
    from rieszflow.engine.energy import RieszEnergy
    from rieszflow.engine.simulate import projected_langevin
    from rieszflow.engine.space import Ball

    rng = np.random.default_rng(3)
    omega = rng.uniform(-0.5, 0.5, size=(12, 3))
    energy = RieszEnergy(s=1.0, lam=1.0)
    noise = rng.standard_normal(omega.shape)
    init, step = projected_langevin(energy.grad, Ball(1.5), eta=1e-2, beta=20.0, clip_norm=5.0)
    _, step_given = projected_langevin(None, Ball(1.5), eta=1e-2, beta=20.0, clip_norm=5.0)
    a = step(init(omega), noise)
    b = step_given(init(omega), noise, grad=energy.grad(omega))
    assert np.array_equal(a.omega, b.omega) and a.max_displacement == b.max_displacement
    with pytest.raises(ValueError, match="grad_fn=None"):
        step_given(init(omega), noise)
    with pytest.raises(ValueError, match="grad must have shape"):
        step_given(init(omega), noise, grad=np.zeros((3, 3)))
