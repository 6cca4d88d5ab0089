"""LDP study: batched MALA (parity with the core, exactness), rate estimators, strict config, CLI smoke."""
import argparse
import json
import math

import numpy as np
import pytest
import scipy.integrate
import scipy.stats

from engine.simulate import mala
from engine.space import Interval
from studies.ldp.config import LDPConfig, RegimeConfig, full_config, quick_config
from studies.ldp.study import GibbsTarget, batched_mala_step, rate_estimates, run_tilted_chains


def _target(n=5, beta_N=6.0, s=0.0):
    return GibbsTarget(n=n, beta_N=beta_N, gamma=1.0, s=s, lam=1.3, lo=-3.0, hi=3.0)


@pytest.mark.parametrize("s", [0.0, -1.0, 0.5])
def test_gibbs_target_gradient_central_differences(rng, s):
    t = _target(s=s)
    x = np.sort(rng.uniform(-2, 2, size=(3, 5)), axis=1)
    tau = np.array([0.0, 0.1, 0.3])
    U, g = t.value_and_grad(x, tau)
    h = 1e-6
    for c in range(3):
        for i in range(5):
            xp, xm = x.copy(), x.copy()
            xp[c, i] += h
            xm[c, i] -= h
            num = (t.value_and_grad(xp, tau)[0][c] - t.value_and_grad(xm, tau)[0][c]) / (2 * h)
            assert abs(num - g[c, i]) < 1e-6 * max(1.0, abs(g[c, i]))
    # value: beta_N [ (1/N) sum (V - tau f) + lam/(2N(N-1)) sum_{i != j} g ]  (paper normalisation)
    from engine.energy import riesz_energy

    expected = 6.0 * (np.mean((0.5 - tau[1]) * x[1] ** 2) + 1.3 * float(riesz_energy(x[1][:, None], s)))
    assert abs(U[1] - expected) < 1e-12 * abs(expected)


def test_batched_mala_equals_core_mala_step_for_step(rng):
    """One chain of the batched sampler reproduces engine.simulate.mala on the same noise."""
    t = _target()
    tau = np.array([0.2])

    def vg(omega):
        U, g = t.value_and_grad(omega[:, 0][None, :], tau)
        return U[0], g[0][:, None]

    h = 0.05
    init_fn, step_fn = mala(vg, Interval(-3.0, 3.0), eta=h, beta=1.0, grad_scale=1.0)
    x = np.sort(rng.uniform(-1, 1, size=5))
    state = init_fn(x[:, None])
    xb = x[None, :]
    Ub, gb = t.value_and_grad(xb, tau)
    n_acc = 0
    for _ in range(200):
        xi = rng.standard_normal(5)
        log_u = math.log(rng.uniform())
        state = step_fn(state, (xi[:, None], np.asarray(log_u)))
        xb, Ub, gb, acc = batched_mala_step(t, xb, Ub, gb, tau, np.array([h]), xi[None, :], np.array([log_u]))
        n_acc += int(acc[0])
        np.testing.assert_allclose(xb[0], state.omega[:, 0], rtol=0, atol=1e-12)
    assert 20 < n_acc < 200  # both accepted and rejected moves were exercised
    assert int(state.n_accepted) == n_acc


def test_batched_mala_samples_the_two_particle_gibbs_law():
    """N = 2 on [-3, 3]: E[M] = E[(x1^2 + x2^2)/2] under exp(-U) by 2-D quadrature vs 256 chains.

    Threshold: 4 standard errors of the mean over independent chains (seeded).
    """
    t = GibbsTarget(n=2, beta_N=3.0, gamma=1.0, s=0.0, lam=1.0, lo=-3.0, hi=3.0)

    def dens(y, x):
        # The quadrature may land exactly on the collision line x = y, where the log interaction
        # makes U = +inf and the density exactly 0: that limit is right, so silence the warning.
        with np.errstate(divide="ignore", invalid="ignore"):
            U, _ = t.value_and_grad(np.array([[x, y]]), np.zeros(1))
        return math.exp(-U[0])

    def moment(y, x):
        return 0.5 * (x * x + y * y) * dens(y, x)

    Z = scipy.integrate.dblquad(dens, -3, 3, -3, 3, epsabs=1e-10)[0]
    exact = scipy.integrate.dblquad(moment, -3, 3, -3, 3, epsabs=1e-10)[0] / Z
    rng = np.random.default_rng(7)
    C = 256
    x0 = np.sort(rng.uniform(-1, 1, size=(C, 2)), axis=1)
    run = run_tilted_chains(t, x0, np.zeros(C), rng, burn_in=300, n_steps=1500)
    per_chain = run.M.mean(axis=1)
    se = per_chain.std(ddof=1) / math.sqrt(C)
    assert abs(per_chain.mean() - exact) < 4 * se, (per_chain.mean(), exact, se)
    assert 0.3 < run.acceptance.mean() < 0.85


def test_rate_estimates_gaussian_exponential_family():
    """M ~ N(theta, 1/r) under P^theta, r = 25: Lambda(theta) = theta^2/2, P(M >= a) = Phi_bar(a sqrt r)."""
    rng = np.random.default_rng(11)
    r, a = 25.0, 0.4
    theta = np.linspace(0.0, 0.8, 9)
    M = [theta[j] + rng.standard_normal((64, 2000)) / math.sqrt(r) for j in range(theta.size)]
    est = rate_estimates(M, theta, a, r)
    exact_rate = -scipy.stats.norm.logsf(a * math.sqrt(r)) / r
    assert abs(est["rate_chernoff"] - a * a / 2) < 4 * est["rate_chernoff_se"] + 1e-3
    assert abs(est["rate_is"] - exact_rate) < 4 * est["rate_is_se"]
    assert abs(est["rate_direct"] - exact_rate) < 4 * est["rate_direct_se"]
    np.testing.assert_allclose(est["Lambda"], theta ** 2 / 2, atol=5 * est["Lambda_se"].max() + 1e-12)
    # Bahadur-Rao for a Gaussian: Phi_bar(z) = phi(z)/z (1 - 1/z^2 + ...), z = a sqrt(r) = 2: the
    # prefactor is right up to the factor (1 - 1/z^2), i.e. |log(3/4)| / r = 0.0115 in rate units
    z = a * math.sqrt(r)
    assert abs(est["rate_bahadur_rao"] - exact_rate) < abs(math.log(1 - 1 / z ** 2)) / r
    assert not est["chernoff_at_edge"]


def test_ldp_config_strict_and_presets():
    q, f = quick_config(), full_config()
    assert q.regimes[0].regime == "fixed_beta" and q.regimes[1].regime == "low_temperature"
    assert q.regimes[1].speed(8) == 64.0 and q.regimes[0].speed(8) == 8.0
    assert max(f.n_particles) == 64
    d = q.to_dict()
    LDPConfig.from_dict(d)
    with pytest.raises(ValueError, match="unknown LDPConfig keys"):
        LDPConfig.from_dict({**d, "n_stepz": 3})
    with pytest.raises(ValueError, match="unknown RegimeConfig keys"):
        LDPConfig.from_dict({**d, "regimes": [{"name": "x", "kappa": 1.0, "a": 1.0, "speed": 2}]})
    for key, value, match in (("s", 1.5, "s > d"), ("n_theta", 4, "odd"), ("theta_max_factor", 0.5, "> 1"),
                              ("lo", 5.0, "lo < hi"), ("backend", "cupy", "backend"),
                              ("n_particles", (1, 4), "n_particles")):
        with pytest.raises(ValueError, match=match):
            q.replace(**{key: value})
    with pytest.raises(ValueError, match="kappa"):
        RegimeConfig("low", 0.5, 1.0)


def test_ldp_cli_smoke_writes_readable_hdf5(tmp_path, capsys):
    from engine.storage import open_run
    from studies.ldp import cli

    cfg = quick_config().replace(n_particles=(3, 5), burn_in=100, n_steps=200, chains_per_theta=4,
                                 chains_at_zero=8, n_theta=5, n_cells=100)
    path = tmp_path / "ldp.json"
    path.write_text(json.dumps(cfg.to_dict()))
    out = tmp_path / "ldp.h5"
    ap = argparse.ArgumentParser()
    cli.register(ap.add_subparsers())
    args = ap.parse_args(["ldp", "--config", str(path), "--out", str(out), "--quiet"])
    assert args.func(args) == 0
    assert "inf_A J" in capsys.readouterr().out
    ds = open_run(out, "ldp_study")
    assert ds["rate_is"].dims == ("regime", "N") and ds["rate_is"].shape == (2, 2)
    assert ds["Lambda"].shape == (2, 2, 5)
    assert np.isfinite(ds["rate_chernoff"].values).all()
    # the solver's limit for speed_N2 matches the closed form for the semicircle family
    a = float(ds["a"][1])
    assert abs(float(ds["rate_limit"][1]) - ((a - 0.5) / 2 - 0.25 * math.log(2 * a))) < 2e-4
    assert (tmp_path / "ldp_rates.png").stat().st_size > 1000
