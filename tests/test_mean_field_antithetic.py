"""The antithetic particle-count estimator of the mean-field bias (``--preset bias-large``):
exact zeros for non-interacting particles, the closed-form t = 0 energy difference
E_int(rho_0)/(2N), the variance reduction of the coupling, the statistic on fixed numbers,
the preset and a CLI run with resume."""
import argparse
import dataclasses
import json

import numpy as np
import pytest

from rieszflow.studies.mean_field.antithetic import (antithetic_estimate, antithetic_samples,
                                                     antithetic_table, format_antithetic_tables)
from rieszflow.studies.mean_field.bias import (BiasConfig, bias_batch_task, bias_large_config, bias_pde_task,
                                               pde_observables)
from rieszflow.studies.mean_field.config import ProblemConfig
from rieszflow.studies.mean_field.study import setup_problem


def _interval(**kw):
    base = dict(name="interval", lo=(-1.25,), hi=(1.25,), n_cells=(40,), s=-1.0, rho0_mean=(0.5,),
                rho0_std=(0.4,), times=(0.0, 0.1), eta=0.025, pde_dt=0.025, n_particles=(8, 16), n_seeds=(6, 4))
    return ProblemConfig(**{**base, **kw})


def _rectangle(**kw):
    base = dict(name="rectangle", lo=(-2.0, -2.0), hi=(2.0, 2.0), n_cells=(8, 8), s=0.0, rho0_mean=(0.5, 0.0),
                rho0_std=(0.3, 0.5), times=(0.0, 0.1), eta=0.05, pde_dt=0.025, n_particles=(6, 12),
                n_seeds=(4, 3))
    return ProblemConfig(**{**base, **kw})


def _triples(c, n, r, seed=0, n_w1=0):
    ncell = int(np.prod(c.n_cells))
    v = bias_batch_task(c, seed, n, 0, r, c.eta, 1, n_w1, np.full((len(c.times), ncell), 1 / ncell),
                        coupled=True)
    return v, antithetic_samples(v["f2n"], v["f"])               # (R, T, 3)


@pytest.mark.parametrize("make", [_interval, _rectangle])
def test_without_interaction_the_triples_coincide(make):
    """lam = 0: each half of the 2N system IS its N system (same start, same noise), so the
    per-triple difference of the moments is 0 up to rounding at every time (the energy is 0)."""
    c = make(lam=0.0, times=(0.0, 0.1, 0.2))
    v, dd = _triples(c, 7, 5)
    assert np.isfinite(v["f2n"]).all() and np.ptp(v["f2n"][:, -1, 1]) > 0     # the particles moved
    np.testing.assert_allclose(dd, 0.0, atol=1e-14)
    # with the interaction on, the moments' differences are not 0 at t > 0 (the test can fail)
    _, dd1 = _triples(make(times=(0.0, 0.1, 0.2)), 7, 5)
    assert np.abs(dd1[:, -1, 1]).max() > 1e-8
    np.testing.assert_allclose(dd1[:, 0, :2], 0.0, atol=1e-14)                 # t = 0: linear f exact


def test_energy_at_t0_is_e_int_over_2n():
    """t = 0, i.i.d. draws: E f(mu_N) = (1 - 1/N) E_int(rho_0) exactly, so D_N = E_int(rho_0)/(2N);
    within 4 SE over 300 triples, E_int(rho_0) by the PDE's exact cell integrals on a fine grid."""
    c = _interval()
    n = 8
    _, dd = _triples(c, n, 300, seed=3)
    fine = setup_problem(dataclasses.replace(c, n_cells=(2000,)))
    e_int = pde_observables(fine.problem, fine.rho0_cells)[2]
    est = antithetic_estimate(dd[:, 0, 2], n)
    assert abs(est["d"] - e_int / (2 * n)) <= 4 * est["se"]
    assert abs(e_int / (2 * n)) > 8 * est["se"]                     # and D_N = 0 would fail
    assert est["b"] == pytest.approx(-2 * n * est["d"])


def test_coupling_cancels_the_first_order_fluctuations():
    """At N = 64 the sd of one triple's difference is far below the sd of f(mu_N) itself (with
    independent noise it would be about as large), and N sd stays of order 1 from N = 16 to 64."""
    c = _interval(times=(0.0, 0.25))
    sd_n = {}
    for n in (16, 64):
        v, dd = _triples(c, n, 40, seed=1)
        sd_n[n] = n * dd[:, 1, 2].std(ddof=1)
        if n == 64:
            assert dd[:, 1, 2].std(ddof=1) < 0.3 * v["f"][:, :, 1, 2].std(ddof=1)
    assert 0.6 < sd_n[64] / sd_n[16] < 1.7          # measured 1.2; sd = O(N^-1/2) would give 2


def test_estimate_on_fixed_numbers_and_bad_input():
    est = antithetic_estimate(np.array([1.0, 3.0, np.nan]), 10)
    assert (est["d"], est["r"]) == (2.0, 2)
    assert est["se"] == pytest.approx(1.0) and est["sd_n"] == pytest.approx(10 * np.sqrt(2.0))
    assert est["b"] == -40.0 and est["z"] == pytest.approx(2.0)
    assert np.isnan(antithetic_estimate(np.zeros(4), 10)["z"])      # exact zeros: no z
    np.testing.assert_allclose(antithetic_samples([[4.0]], [[[1.0], [3.0]]]), [[2.0]])
    with pytest.raises(ValueError, match="fn must have shape"):
        antithetic_samples(np.zeros((3, 2)), np.zeros((3, 3, 2)))
    with pytest.raises(ValueError, match="n=0"):
        antithetic_estimate([1.0, 2.0], 0)
    with pytest.raises(ValueError, match="estimator"):
        BiasConfig(problems=(_interval(),), estimator="bogus")
    with pytest.raises(ValueError, match="n_max"):
        BiasConfig(problems=(_interval(),), n_max=-1)
    with pytest.raises(ValueError, match="interaction_method"):
        BiasConfig(problems=(_interval(),), interaction_method="fast")


def test_bias_large_preset():
    cfg = bias_large_config()
    assert cfg.estimator == "antithetic"
    for p in cfg.problems:
        assert p.n_particles[0] == 1000 and p.n_particles[-1] == 10 ** 6 and set(p.n_seeds) == {32}
    assert BiasConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg
    assert cfg.replace(interaction_method="numba").problems[1].interaction_method == "numba"


def _cli(tmp_path, *extra, config=True):
    from rieszflow.studies.mean_field import cli

    cfg = BiasConfig(problems=(_interval(), _rectangle()), batch_particles=24, w1_replicas=2,
                     estimator="antithetic", n_max=8)
    path = tmp_path / "anti.json"
    path.write_text(json.dumps(cfg.to_dict()))
    ap = argparse.ArgumentParser()
    cli.register(ap.add_subparsers())
    args = ap.parse_args(["mean-field", "--preset", "bias-large", *(["--config", str(path)] if config else []),
                          "--quiet", "--workers", "0", *extra])
    return args.func(args)


def test_cli_antithetic_run_report_and_resume(tmp_path, capsys):
    from rieszflow.engine.storage import missing_cf_attributes, open_run

    out = tmp_path / "a.h5"
    assert _cli(tmp_path, "--out", str(out)) == 0
    text = capsys.readouterr().out
    assert "antithetic estimate D_N" in text and "fewer than 2 triples (not run, or cut short): N=16" in text
    assert missing_cf_attributes(out) == []
    ds = open_run(out, "mean_field_bias")
    assert ds.attrs["estimator"] == "antithetic"
    f, f2 = ds["interval_f"].values, ds["interval_f2n"].values
    assert f.shape == (3, 6, 2, 2, 3) and f2.shape == (3, 6, 2, 3)   # rows N=8, N=16 (not run), N=8 at 2 eta
    assert np.isfinite(f[0]).all() and np.isnan(f[1]).all() and np.isfinite(f2[2]).all()
    tab = antithetic_table(ds, "interval")
    assert {r["label"] for r in tab["rows"]} == {"N=8", "N=8,2eta"} and tab["not_run"] == ["N=16"]
    import h5py

    with h5py.File(out, "r+") as h:
        h["interval_f"][0, 4:] = np.nan
    assert _cli(tmp_path, "--out", str(out), "--resume", config=False) == 0
    ds2 = open_run(out, "mean_field_bias")
    np.testing.assert_array_equal(ds2["interval_f"].values, f)
    assert "antithetic estimate" in format_antithetic_tables(ds2)


# ----------------------------------------------------------------------------- d = 3 (no PDE)

def _box(**kw):
    base = dict(name="box", lo=(-3.0,) * 3, hi=(3.0,) * 3, n_cells=(4, 4, 4), s=1.0, rho0_mean=(0.5, 0.0, 0.0),
                rho0_std=(0.4, 0.5, 0.5), times=(0.0, 0.05), eta=0.025, pde_dt=0.025, n_particles=(10, 20),
                n_seeds=(6, 4))
    return ProblemConfig(**{**base, **kw})


def test_gaussian_riesz_expectation_closed_form_and_monte_carlo():
    """E|X - Y|^-s for X, Y ~ N(m, diag sigma^2): 1/(sigma sqrt(pi)) for s = 1, d = 3 isotropic; a
    seeded Monte Carlo within 4 SE for an anisotropic law in d = 3 and d = 2; bad input named."""
    import math

    from rieszflow.engine.energy.interaction import gaussian_riesz_expectation

    from scipy.special import gammaln

    assert gaussian_riesz_expectation([0.5] * 3, 1.0) == pytest.approx(1 / (0.5 * math.sqrt(math.pi)), rel=1e-10)
    # isotropic, any (d, s): |Z|^2 / (2 sigma^2) ~ chi^2_d, so E|Z|^-s = (4 sigma^2)^(-s/2) G((d-s)/2) / G(d/2)
    for d, s, sig in ((3, 2.9, 0.7), (2, 0.5, 1.3), (2, 1.9, 0.2), (1, 0.5, 2.0), (5, 3.0, 0.4)):
        exact = (4 * sig * sig) ** (-s / 2) * math.exp(gammaln((d - s) / 2) - gammaln(d / 2))
        assert gaussian_riesz_expectation([sig] * d, s) == pytest.approx(exact, rel=1e-9)
    rng = np.random.default_rng(11)
    for sd, s in (([0.4, 0.5, 0.5], 1.0), ([1.0, 2.0], 0.5)):     # anisotropic: seeded Monte Carlo (finite variance: s < d/2)
        sd = np.asarray(sd)
        z = (rng.standard_normal((400_000, sd.size)) - rng.standard_normal((400_000, sd.size))) * sd
        v = np.linalg.norm(z, axis=1) ** -s
        assert abs(gaussian_riesz_expectation(sd, s) - v.mean()) <= 4 * v.std(ddof=1) / math.sqrt(v.size)
    for bad, s in (([0.5, 0.5, 0.5], 0.0), ([0.5, 0.5, 0.5], 3.0), ([0.5, -1.0], 0.5), ([], 1.0)):
        with pytest.raises(ValueError, match="s=|std="):
            gaussian_riesz_expectation(bad, s)


def test_gaussian_riesz_expectation_softened_against_the_radial_law():
    """E(|Z|^2 + eps^2)^(-s/2): for an isotropic law |Z|^2 / (2 sigma^2) ~ chi^2_d, an independent
    one-dimensional quadrature of the chi-square density; anisotropic d = 3 by a seeded Monte Carlo
    within 4 SE; eps = 0 is the unsoftened value; a bad softening is named."""
    import math

    from scipy import stats

    from rieszflow.engine.energy.interaction import gaussian_riesz_expectation

    for d, s, sig, eps in ((3, 1.0, 0.5, 0.1), (3, 2.5, 0.3, 0.05), (2, 0.5, 1.3, 2.0), (1, 0.5, 0.7, 0.3)):
        oracle = stats.chi2(d).expect(lambda q: (2 * sig * sig * q + eps * eps) ** (-s / 2), epsrel=1e-11)
        assert gaussian_riesz_expectation([sig] * d, s, eps) == pytest.approx(oracle, rel=1e-8)
        assert gaussian_riesz_expectation([sig] * d, s, eps) < gaussian_riesz_expectation([sig] * d, s)
    sd = np.array([0.4, 0.5, 0.5])
    rng = np.random.default_rng(12)
    z = (rng.standard_normal((400_000, 3)) - rng.standard_normal((400_000, 3))) * sd
    v = (np.sum(z * z, axis=1) + 0.01) ** -0.5
    assert abs(gaussian_riesz_expectation(sd, 1.0, 0.1) - v.mean()) <= 4 * v.std(ddof=1) / math.sqrt(v.size)
    assert gaussian_riesz_expectation(sd, 1.0, 0.0) == gaussian_riesz_expectation(sd, 1.0)
    # far from the law's scale: a softening >> sigma gives eps^-s (1 - s E|Z|^2 / (2 eps^2) + ...);
    # sigma >> 1 or << 1 scales as sigma^-s (the quadrature is done on the rescaled problem)
    for eps in (1e3, 1e20, 1e200):
        assert gaussian_riesz_expectation(sd, 1.0, eps) == pytest.approx(
            eps ** -1 * (1 - np.sum(2 * sd * sd) / (2 * eps * eps)), rel=1e-10)
    for k in (1e-150, 1e150):
        assert gaussian_riesz_expectation(sd * k, 1.0, 0.1 * k) == pytest.approx(
            gaussian_riesz_expectation(sd, 1.0, 0.1) / k, rel=1e-10)
    for bad in (-0.1, math.nan, math.inf):
        with pytest.raises(ValueError, match="softening"):
            gaussian_riesz_expectation(sd, 1.0, bad)


def test_box_softening_is_the_kernel_of_the_particles_and_of_the_t0_check():
    """ProblemConfig.softening: validated (d = 3 only), stored only when > 0; the particles' energy
    is the softened pair sum, and at t = 0 the triples' energy difference is the softened closed
    form E_int(rho_0)/(2N) within 4 SE (8 SE away from the unsoftened one's difference)."""
    import math

    from rieszflow.engine.energy.interaction import gaussian_riesz_expectation, riesz_kernel
    from rieszflow.studies.mean_field.study import _particle_setup, _rng

    for bad in (-0.1, math.nan, True, "0.1"):
        with pytest.raises(ValueError, match="softening="):
            _box(softening=bad)
    with pytest.raises(ValueError, match="PDE solver integrates the exact kernel"):
        _rectangle(softening=0.1)
    assert "softening" not in _box().to_dict() and "softening" not in _rectangle().to_dict()
    c = _box(softening=0.6)
    assert c.to_dict()["softening"] == 0.6 and ProblemConfig.from_dict(c.to_dict()) == c
    n = 10
    v = bias_batch_task(c, 5, n, 0, 300, c.eta, 1, 0, None, coupled=True)
    x = _particle_setup(c)[1].sample(_rng(5, 2, n, 0, 7), 2 * n)       # triple 0's 2N draw
    r = np.linalg.norm(x[:, None] - x[None], axis=2)[~np.eye(2 * n, dtype=bool)]
    assert v["f2n"][0, 0, 2] == pytest.approx(0.5 * np.sum(riesz_kernel(r, 1.0, 0.6)) / (2 * n) ** 2, rel=1e-12)
    dd = antithetic_samples(v["f2n"], v["f"])
    est = antithetic_estimate(dd[:, 0, 2], n)
    e_soft = 0.5 * gaussian_riesz_expectation(c.rho0_std, c.s, 0.6)
    assert bias_pde_task(c)["f"][0, 2] == pytest.approx(e_soft, rel=1e-12)   # the file's t = 0 reference
    e_exact = 0.5 * gaussian_riesz_expectation(c.rho0_std, c.s)
    assert abs(est["d"] - e_soft / (2 * n)) <= 4 * est["se"]
    assert abs(e_exact - e_soft) / (2 * n) > 8 * est["se"]
    # the Metropolized step takes the softened drift: with every move accepted the simultaneous sweep
    # is exactly Euler-Maruyama of the same (softened) system
    with pytest.raises(ValueError, match="needs softening=0"):
        _box(softening=0.1, interaction_method="fmm")
    # one small step (all accepted; the Metropolized path draws its uniforms after the step's normals)
    c = dataclasses.replace(c, times=(0.0, 0.0025), eta=0.0025, pde_dt=0.00125)
    eu = bias_batch_task(c, 3, n, 0, 4, c.eta, 1, 0, None, coupled=True)
    me = bias_batch_task(dataclasses.replace(c, integrator="metropolized_simultaneous"), 3, n, 0, 4, c.eta, 1, 0,
                         None, coupled=True)
    assert me["acceptance"] == 1.0
    np.testing.assert_allclose(me["f2n"], eu["f2n"], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(me["f"], eu["f"], rtol=1e-12, atol=1e-14)


def test_bias_config_step_and_softening_overrides(tmp_path, monkeypatch, capsys):
    """BiasConfig eta / softening replace every problem's value, are validated, and are not stored
    (the problems carry them); the CLI parses --set eta=... and names a bad value."""
    import math

    from rieszflow.studies.cli import main as cli_main

    cfg = BiasConfig(problems=(_interval(times=(0.0, 0.1)), _box(times=(0.0, 0.1))), estimator="antithetic")
    half = cfg.replace(eta=0.0125)
    assert {p.eta for p in half.problems} == {0.0125}
    d = half.to_dict()
    assert "eta" not in d and "softening" not in d and [p["eta"] for p in d["problems"]] == [0.0125] * 2
    assert BiasConfig.from_dict(d) == dataclasses.replace(half, eta=None)
    box = BiasConfig(problems=(_box(),), estimator="antithetic").replace(softening=0.2)
    assert box.problems[0].softening == 0.2 and box.to_dict()["problems"][0]["softening"] == 0.2
    for k, bad in (("eta", 0.0), ("eta", math.nan), ("softening", -1.0), ("eta", True)):
        with pytest.raises(ValueError, match=f"{k}="):
            cfg.replace(**{k: bad})
    with pytest.raises(ValueError, match="not a multiple"):
        cfg.replace(eta=0.03)
    soft = cfg.replace(softening=0.1)                       # the interval has a PDE reference: kept exact
    assert [q.softening for q in soft.problems] == [0.0, 0.1]
    monkeypatch.chdir(tmp_path)                             # nothing may be written, not even under ./runs
    for item, msg in (("eta=fast", "expected a number"), ("softening=-2", "softening=-2.0")):
        assert cli_main(["mean-field", "--preset", "bias-large", "--problem", "box", "--set", item,
                         "--show-config"]) == 2
        assert msg in capsys.readouterr().err
    assert cli_main(["mean-field", "--preset", "bias-large", "--problem", "box", "--set", "eta=0.0125",
                     "--show-config"]) == 0
    assert '"eta": 0.0125' in capsys.readouterr().out
    assert cli_main(["mean-field", "--preset", "bias-large", "--problem", "box", "--set", "softening=0.2",
                     "--show-config"]) == 0                 # only the 3-D problem takes it
    assert '"softening": 0.2' in capsys.readouterr().out
    assert cli_main(["mean-field", "--preset", "bias-large", "--problem", "interval", "--set", "softening=0.2",
                     "--show-config"]) == 2
    assert "--problem interval selects none" in capsys.readouterr().err
    with pytest.raises(ValueError, match="there is none"):
        BiasConfig(problems=(_interval(),), softening=0.2)
    assert BiasConfig(problems=(_interval(), _box()), softening=0.2,
                      estimator="antithetic").problems[0].softening == 0.0
    assert list(tmp_path.iterdir()) == []
    # --resume with the --set eta it was written with agrees with the file; another eta is refused
    from rieszflow.config import resolve_config

    stored = tmp_path / "half.json"
    stored.write_text(json.dumps(half.to_dict()))
    special = {"eta": float}
    assert resolve_config(BiasConfig, cfg, overrides=["eta=0.0125"], special=special, resume_from=stored) == \
        BiasConfig.from_dict(half.to_dict())
    with pytest.raises(ValueError, match="eta: stored None, given 0.025"):
        resolve_config(BiasConfig, cfg, overrides=["eta=0.025"], special=special, resume_from=stored)


def test_box_problem_is_antithetic_only_and_keeps_rho0_inside():
    from rieszflow.studies.mean_field.config import MeanFieldConfig

    c = _box()
    assert c.d == 3
    with pytest.raises(ValueError, match="standard deviations from the box"):
        _box(rho0_mean=(2.0, 0.0, 0.0))
    with pytest.raises(ValueError, match="s=0.0 is not allowed"):
        _box(s=0.0)
    with pytest.raises(ValueError, match="only antithetic triples"):
        bias_batch_task(c, 0, 5, 0, 1, c.eta, 1, 0, None, coupled=False)
    with pytest.raises(ValueError, match="no PDE reference"):
        BiasConfig(problems=(c,))                                      # the plain estimator needs the PDE
    with pytest.raises(ValueError, match="no PDE reference"):
        MeanFieldConfig(problems=(c,))
    with pytest.raises(ValueError, match="length 3"):
        _box(lo=(-3.0, -3.0), hi=(3.0, 3.0))
    assert [p.name for p in bias_large_config().problems] == ["interval", "rectangle", "box"]


def test_box_energy_at_t0_is_the_closed_form_and_w1_is_between_the_halves():
    """d = 3, Coulomb: at t = 0 the triples' energy difference is E_int(rho_0)/(2N) (closed form of
    the normal rho_0) within 4 SE; W1 is the exact transport between the two N systems (> 0)."""
    from rieszflow.engine.energy.interaction import gaussian_riesz_expectation
    from rieszflow.engine.measures import wasserstein1

    c = _box()
    n = 10
    v = bias_batch_task(c, 5, n, 0, 300, c.eta, 1, 2, None, coupled=True)
    dd = antithetic_samples(v["f2n"], v["f"])
    e_int = 0.5 * gaussian_riesz_expectation(c.rho0_std, c.s)
    est = antithetic_estimate(dd[:, 0, 2], n)
    assert abs(est["d"] - e_int / (2 * n)) <= 4 * est["se"]
    assert abs(e_int / (2 * n)) > 8 * est["se"]
    assert np.isfinite(v["w1"]).all() and (v["w1"] > 0).all()
    # W1 of the first triple at t = 0 is the transport between the two halves of its 2N draw
    from rieszflow.studies.mean_field.study import _particle_setup, _rng

    rng = _rng(5, 2, n, 0, 7)
    x = _particle_setup(c)[1].sample(rng, 2 * n)
    assert v["w1"][0, 0] == pytest.approx(wasserstein1(x[:n], x[n:]), rel=1e-12)


def test_cli_box_run_reports_the_closed_form_check(tmp_path, capsys):
    from rieszflow.engine.storage import missing_cf_attributes, open_run
    from rieszflow.studies.mean_field import cli

    cfg = BiasConfig(problems=(_box(),), batch_particles=40, w1_replicas=2, estimator="antithetic")
    path = tmp_path / "box.json"
    path.write_text(json.dumps(cfg.to_dict()))
    out = tmp_path / "box.h5"
    ap = argparse.ArgumentParser()
    cli.register(ap.add_subparsers())
    args = ap.parse_args(["mean-field", "--preset", "bias-large", "--config", str(path), "--quiet",
                          "--workers", "0", "--out", str(out)])
    assert args.func(args) == 0
    text = capsys.readouterr().out
    assert "closed form of the normal law rho_0" in text and "expected -1/3" in text
    assert "problem: d = 3, s = 1, softening = 0, lam = 1, beta = 10; step euler, eta = 0.025" in text
    assert missing_cf_attributes(out) == []
    ds = open_run(out, "mean_field_bias")
    assert np.isnan(ds["box_f_pde"].values[1]).all() and np.isfinite(ds["box_f_pde"].values[0]).all()
    f2 = ds["box_f2n"].values                          # rows N=10 (6 triples), N=20 (4), N=10 at 2 eta (6)
    assert np.isfinite(f2[0]).all() and np.isfinite(f2[1, :4]).all() and np.isnan(f2[1, 4:]).all()


def test_report_prints_the_drift_of_b_against_log_n():
    """The 'b against log10 N' lines: a constant b gives drift 0, a (log N)/N bias its slope per decade."""
    from rieszflow.engine.stats import linear_trend
    from rieszflow.studies.mean_field.bias_tables import _fit_lines

    lx = np.log10([1e3, 1e4, 1e5])
    se = np.array([0.01, 0.01, 0.01])
    base = {"t": 0.5, "obs": "energy", "slope": -1.0, "slope_se": 0.01, "slope_mc_se": 0.02, "n_rows": 3,
            "n_decided": 3, "sign": "-", "w1_slope": -0.5, "w1_slope_se": 0.01}
    fits = [dict(base, trend=linear_trend(lx, -0.4 - 0.15 * lx, se), trend_tail=linear_trend(lx[1:], [-1.0, -1.15], se[1:])),
            dict(base, obs="m2", trend=linear_trend(lx, [-0.2, -0.2, -0.2], se), trend_tail=None)]
    text = "\n".join(_fit_lines(fits, "|D_N|"))
    assert "b against log10 N" in text
    assert "energy: drift -0.150 +- 0.007 per decade (z = -21.2)" in text
    assert "without the smallest N: drift -0.150" in text
    assert "m2: drift +0.000 +- 0.007 per decade (z = +0.0)" in text and text.count("without the smallest N") == 1
