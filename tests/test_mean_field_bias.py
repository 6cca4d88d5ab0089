"""Mean-field bias study: the estimator on a closed-form O(1/N) bias, observables against closed forms,
the batched replicas against the engine's single-system simulation, strict config, CLI run and resume."""
import argparse
import json
import math

import numpy as np
import pytest

from rieszflow.engine.stats import power_law_fit
from rieszflow.solvers.mckean_vlasov import MeanFieldProblem, interval_mesh
from rieszflow.solvers.particles import make_interaction
from rieszflow.studies.mean_field.bias import (
    BiasConfig,
    bias_batch_task,
    bias_config,
    bias_large_config,
    observables,
    pde_observables,
)
from rieszflow.studies.mean_field.bias_tables import _slope_mc_se, bias_estimate
from rieszflow.studies.mean_field.config import PROBLEM_NAMES, ProblemConfig
from rieszflow.studies.mean_field.study import _particle_setup, _particles, _rng
from rieszflow.engine.energy import Interaction


# ----------------------------------------------------------------------------- the estimator

def test_bias_estimator_sees_the_exact_minus_sigma2_over_n_bias():
    """The empirical second central moment of N iid N(0, sigma^2) draws has mean (1 - 1/N) sigma^2:
    bias -sigma^2/N exactly. The replica-mean estimator finds it within 4 SE at every N, rejects
    a zero bias, and the power-law fit of |bias| gives slope -1 within 4 of its Monte Carlo SEs."""
    rng = np.random.default_rng(12)
    sigma2, ns, r = 2.0, np.array([4, 8, 16, 32]), 20000
    est = []
    for n in ns:
        x = rng.normal(0.0, math.sqrt(sigma2), size=(r, n))
        b, se, sd, rr = bias_estimate(x.var(axis=1), sigma2)
        assert rr == r and se == pytest.approx(sd / math.sqrt(r))
        assert abs(b - (-sigma2 / n)) < 4 * se
        assert abs(b) > 4 * se                       # the estimator sees the bias at this R ...
        est.append((b, se))
    b, se = np.array(est).T
    fit = power_law_fit(ns, np.abs(b))
    mc = _slope_mc_se(ns.astype(float), b, se)
    assert 0 < mc < 0.2
    assert abs(fit.slope - (-1.0)) < 4 * mc
    assert abs(fit.slope - (-0.5)) > 4 * mc          # ... and tells -1 from the sampling rate -1/2


def test_replica_requirement_formula():
    """R_need = z^2 N sigma_f^2 / b^2: with sd(f(mu_N)) = 1/sqrt(N) and bias 1/N, |z| = sqrt(R/N)."""
    rng = np.random.default_rng(3)
    n, r = 50, 2000
    vals = 1.0 / n + rng.standard_normal(r) / math.sqrt(n)
    b, se, sd, _ = bias_estimate(vals, 0.0)
    assert sd == pytest.approx(1 / math.sqrt(n), rel=0.06)
    assert b / se == pytest.approx(math.sqrt(r / n), abs=4.0)   # z ~ 6.3 +- 1 (the noise of b)
    with pytest.raises(ValueError, match="at least 2 finite"):
        bias_estimate([1.0, np.nan], 0.0)


# ----------------------------------------------------------------------------- observables

def test_observables_closed_forms():
    """1-D Coulomb g = -|w|: the energy is -(lam/(2 N^2)) sum_{i != j} |x_i - x_j|; chains equal single."""
    inter = make_interaction(d=1, interaction=Interaction(-1.0, 1.5))
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, size=(3, 7, 1))
    f = observables(x, inter)
    for c in range(3):
        xi = x[c, :, 0]
        direct = -1.5 / (2 * 49) * np.abs(xi[:, None] - xi[None, :]).sum()
        np.testing.assert_allclose(f[c], [xi.mean(), (xi ** 2).mean(), direct], rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(observables(x[c], inter), f[c], rtol=1e-14)


def test_pde_observables_uniform_density():
    """U[-1, 1]: m1 = 0, m2 = 1/3, (lam/2) E[-|X - Y|] = -lam/3 (E|X - Y| = 2/3)."""
    dom = interval_mesh(-1.0, 1.0, 400)
    prob = MeanFieldProblem.create(dom, lambda x: 0 * x[:, 0], interaction=Interaction(-1.0, 1.0), beta=1.0)
    f = pde_observables(prob, np.full(400, 0.5))
    assert abs(f[0]) < 1e-14
    assert abs(f[1] - 1 / 3) < 1e-5                  # midpoint rule: h^2/12 = 2e-6
    # exact cell integrals give the potential -(1 + x^2)/2 at the centres; the outer midpoint rule
    # of int rho phi then errs by (h^2/24) int rho phi'' = -h^2/48 (h = 0.005): 5.2e-7, exactly
    h = 2.0 / 400
    assert abs(f[2] - (-1 / 3 + h * h / 48)) < 1e-12


# ----------------------------------------------------------------------------- the batched replicas

def _tiny_problems():
    one = ProblemConfig(name="interval", lo=(-1.25,), hi=(1.25,), n_cells=(40,), s=-1.0, rho0_mean=(0.5,),
                        rho0_std=(0.4,), times=(0.0, 0.1), eta=0.025, pde_dt=0.025, n_particles=(8, 16),
                        n_seeds=(6, 4))
    two = ProblemConfig(name="rectangle", lo=(-2.0, -2.0), hi=(2.0, 2.0), n_cells=(8, 8), s=0.0,
                        rho0_mean=(0.5, 0.0), rho0_std=(0.3, 0.5), times=(0.0, 0.1), eta=0.05, pde_dt=0.025,
                        n_particles=(6, 12), n_seeds=(4, 3))
    return one, two


def test_batch_of_one_replica_is_the_engines_simulation():
    """One replica: the same x_0 and noise stream as MeanFieldParticles.simulate, the same positions."""
    c = _tiny_problems()[0]
    _, rho0, dist = _particle_setup(c)
    masses = np.full((2, 40), 1 / 40)
    v = bias_batch_task(c, 5, 8, 2, 1, c.eta, 10 ** 6, 1, masses)
    rng = _rng(5, PROBLEM_NAMES.index(c.name), 8, 2, 7)
    x0 = rho0.sample(rng, 8)
    snaps = _particles(c, c.eta).simulate(x0, c.times, rng)
    ref = observables(snaps, _particles(c, c.eta).interaction)
    np.testing.assert_allclose(v["f"][0], ref, rtol=1e-12, atol=1e-14)
    assert v["w1"][0, 1] == pytest.approx(dist.particles(snaps[1], masses[1]))


def test_chain_axis_equals_replica_loop():
    """2-D log kernel: pair sums on a chain axis or replica by replica give the same trajectories."""
    c = _tiny_problems()[1]
    masses = np.full((2, 64), 1 / 64)
    a = bias_batch_task(c, 1, 6, 0, 5, c.eta, 10 ** 6, 0, masses)     # chunks of all 5 replicas
    b = bias_batch_task(c, 1, 6, 0, 5, c.eta, 1, 0, masses)           # one by one
    np.testing.assert_allclose(a["f"], b["f"], rtol=1e-12, atol=1e-14)


# ----------------------------------------------------------------------------- config and CLI

def test_config_strict_and_presets():
    assert bias_config().problems[0].n_seeds[-1] == 10 * bias_config().problems[0].n_particles[-1]
    assert max(bias_large_config().problems[1].n_particles) == 10 ** 6
    d = bias_config().to_dict()
    assert BiasConfig.from_dict(json.loads(json.dumps(d))) == bias_config()
    with pytest.raises(ValueError, match="unknown|bogus"):
        BiasConfig.from_dict({**d, "bogus": 1})
    with pytest.raises(ValueError, match="batch_particles"):
        bias_config().replace(batch_particles=0)
    one, _ = _tiny_problems()
    odd = ProblemConfig(**{**one.to_dict(), "times": (0.0, 0.025), "pde_dt": 0.0125})
    with pytest.raises(ValueError, match="2 \\* eta"):
        BiasConfig(problems=(odd,))


def _cli(tmp_path, *extra, config=True):
    from rieszflow.studies.mean_field import cli

    cfg = BiasConfig(problems=_tiny_problems(), batch_particles=24, w1_replicas=2)
    path = tmp_path / "bias.json"
    path.write_text(json.dumps(cfg.to_dict()))
    ap = argparse.ArgumentParser()
    cli.register(ap.add_subparsers())
    args = ap.parse_args(["mean-field", "--preset", "bias", *(["--config", str(path)] if config else []),
                          "--quiet", "--workers", "0", *extra])
    return args.func(args)


def test_cli_bias_run_report_and_resume(tmp_path, capsys):
    from rieszflow.engine.storage import missing_cf_attributes, open_run

    out = tmp_path / "b.h5"
    assert _cli(tmp_path, "--out", str(out)) == 0
    text = capsys.readouterr().out
    assert "fitted exponents" in text and "R_need" in text and "rectangle" in text
    assert missing_cf_attributes(out) == []
    ds = open_run(out, "mean_field_bias")
    f = ds["interval_f"].values
    assert f.shape == (3, 6, 2, 3)                   # rows N=8, N=16, N=8 at 2 eta
    assert np.isfinite(f[0]).all() and np.isnan(f[1, 4:]).all()
    # an interrupted study (batches lost) resumes to the same arrays: every batch has its own seed
    import h5py

    with h5py.File(out, "r+") as h:
        h["interval_f"][1] = np.nan
        h["rectangle_f"][0, :2] = np.nan
    assert _cli(tmp_path, "--out", str(out), "--resume", config=False) == 0
    ds2 = open_run(out, "mean_field_bias")
    np.testing.assert_array_equal(ds2["interval_f"].values, f)
    np.testing.assert_array_equal(ds2["rectangle_f"].values, ds["rectangle_f"].values)
    # --resume without --preset: the file's kind selects the bias study (it was an error about
    # unknown MeanFieldConfig keys)
    from rieszflow.studies.mean_field import cli

    with h5py.File(out, "r+") as h:
        h["interval_f"][1] = np.nan
    ap = argparse.ArgumentParser()
    cli.register(ap.add_subparsers())
    args = ap.parse_args(["mean-field", "--resume", "--out", str(out), "--quiet", "--workers", "0"])
    assert args.func(args) == 0
    assert "fitted exponents" in capsys.readouterr().out
    np.testing.assert_array_equal(open_run(out, "mean_field_bias")["interval_f"].values, f)
    assert _cli(tmp_path, "--out", str(out)) == 2                      # no silent overwrite
    assert _cli(tmp_path, "--out", str(out), "--quick") == 2
    assert "two presets" in capsys.readouterr().err


def test_antithetic_triples_with_nufft_sums_are_the_direct_sums_to_its_tolerance():
    """The fast (NFFT) Riesz sums in the bias study's dynamics: the same seeded triples as the
    direct Numba sums, the observables of both after the steps within 1e-6 relative (the lent
    device's N = 1e4 run measured 3.7e-7 over 20 steps against the local direct run)."""
    two = _tiny_problems()[1]
    direct = ProblemConfig(**{**two.to_dict(), "interaction_method": "numba"})
    fast = ProblemConfig(**{**two.to_dict(), "interaction_method": "nufft"})
    masses = np.full((2, 64), 1 / 64)
    a = bias_batch_task(direct, 3, 300, 0, 2, direct.eta, 1, 0, masses, True)
    b = bias_batch_task(fast, 3, 300, 0, 2, fast.eta, 1, 0, masses, True)
    for key in ("f", "f2n"):
        scale = np.abs(a[key]).max()
        np.testing.assert_allclose(b[key], a[key], rtol=0, atol=1e-9 * scale)
    assert not np.array_equal(a["f"], b["f"])        # the two paths really differ (rounding)
