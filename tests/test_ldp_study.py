"""LDP study: batched MALA (parity with the core, exactness), rate estimators, strict config, CLI smoke."""
import argparse
import json
import math

import numpy as np
import pytest
import scipy.integrate
import scipy.stats

from rieszflow.engine.simulate import mala
from rieszflow.engine.space import Interval
from rieszflow.studies.ldp.config import LDPConfig, RegimeConfig, full_config, quick_config
from rieszflow.studies.ldp.study import GibbsTarget, rate_estimates, run_tilted_chains


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
    from rieszflow.engine.energy import riesz_energy

    expected = 6.0 * (np.mean((0.5 - tau[1]) * x[1] ** 2) + 1.3 * float(riesz_energy(x[1][:, None], s)))
    assert abs(U[1] - expected) < 1e-12 * abs(expected)


def test_batched_mala_equals_core_mala_step_for_step(rng):
    """Chain 0 of the engine's MALA with a chain axis (3 chains, per-chain tilts and steps, as the ldp
    sampler runs it) reproduces the single-chain engine MALA on the same noise, step for step."""
    import dataclasses

    t = _target()
    taus, hs = np.array([0.2, 0.0, -0.1]), np.array([0.05, 0.03, 0.08])

    def vg(omega):
        U, g = t.value_and_grad(omega[:, 0][None, :], taus[:1])
        return U[0], g[0][:, None]

    def vg_chains(omega):
        U, g = t.value_and_grad(omega[..., 0], taus)
        return U, g[..., None]

    init_fn, step_fn = mala(vg, Interval(-3.0, 3.0), eta=hs[0], beta=1.0, grad_scale=1.0)
    init_c, step_c = mala(vg_chains, Interval(-3.0, 3.0), eta=1.0, beta=1.0, grad_scale=1.0)
    x = np.sort(rng.uniform(-1, 1, size=(3, 5)), axis=1)
    state = init_fn(x[0][:, None])
    chains = dataclasses.replace(init_c(x[..., None]), eta=hs)
    for _ in range(200):
        xi = rng.standard_normal((3, 5))
        log_u = np.log(rng.uniform(size=3))
        state = step_fn(state, (xi[0][:, None], np.asarray(log_u[0])))
        chains = step_c(chains, (xi[..., None], log_u))
        np.testing.assert_allclose(chains.omega[0, :, 0], state.omega[:, 0], rtol=0, atol=1e-12)
    n_acc = int(state.n_accepted)
    assert 20 < n_acc < 200  # both accepted and rejected moves were exercised
    assert int(chains.n_accepted[0]) == n_acc and chains.n_accepted.shape == (3,)
    assert chains.acceptance_rate.shape == (3,)


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
    # deterministic slack: the means are linear in theta, so the spline is exact; the sup over the
    # 2001-point grid (spacing 4e-4) misses the true sup by at most (2e-4)^2 Lambda''/2 = 2e-8 (Lambda'' = 1)
    assert abs(est["rate_chernoff"] - a * a / 2) < 4 * est["rate_chernoff_se"] + 2e-8
    assert abs(est["rate_is"] - exact_rate) < 4 * est["rate_is_se"]
    assert abs(est["rate_direct"] - exact_rate) < 4 * est["rate_direct_se"]
    np.testing.assert_allclose(est["Lambda"], theta ** 2 / 2, atol=5 * est["Lambda_se"].max() + 1e-12)
    # Bahadur-Rao for a Gaussian: Phi_bar(z) = phi(z)/z (1 - 1/z^2 + ...), z = a sqrt(r) = 2: the
    # prefactor is right up to the factor (1 - 1/z^2), i.e. |log(3/4)| / r = 0.0115 in rate units
    z = a * math.sqrt(r)
    assert abs(est["rate_bahadur_rao"] - exact_rate) < abs(math.log(1 - 1 / z ** 2)) / r
    assert not est["chernoff_at_edge"]


def test_rate_estimates_standard_errors_are_calibrated():
    """Over 300 independent replicates, each SE matches the spread of its estimate.

    The sample SD of R replicates has relative SE 1/sqrt(2(R-1)) = 4.1 %; threshold 4 of them (16 %).
    This checks the spline weights of Lambda_se and rate_chernoff_se and the jackknife of rate_is_se
    (which carries the covariance of Lambda(theta_j) and the importance weights of node j).
    """
    rng = np.random.default_rng(5)
    r, a, R = 25.0, 0.4, 300
    theta = np.linspace(0.0, 0.8, 9)
    keys = ("rate_is", "rate_chernoff", "Lambda_last")
    vals = {k: [] for k in keys}
    ses = {k: [] for k in keys}
    for _ in range(R):
        est = rate_estimates([t + rng.standard_normal((16, 50)) / math.sqrt(r) for t in theta], theta, a, r)
        for k, v, se in (("rate_is", est["rate_is"], est["rate_is_se"]),
                         ("rate_chernoff", est["rate_chernoff"], est["rate_chernoff_se"]),
                         ("Lambda_last", est["Lambda"][-1], est["Lambda_se"][-1])):
            vals[k].append(v)
            ses[k].append(se)
    for k in keys:
        ratio = np.std(vals[k], ddof=1) / math.sqrt(np.mean(np.square(ses[k])))
        assert abs(ratio - 1.0) < 4 / math.sqrt(2 * (R - 1)), (k, ratio)


def test_rate_estimates_rejects_bad_theta():
    M = [np.zeros((4, 10)) for _ in range(4)]
    with pytest.raises(ValueError, match="equally spaced"):
        rate_estimates(M, np.array([0.0, 0.1, 0.3, 0.4]), 0.1, 10.0)
    with pytest.raises(ValueError, match="theta\\[0\\] == 0"):
        rate_estimates(M, np.array([0.1, 0.2, 0.3, 0.4]), 0.1, 10.0)
    with pytest.raises(ValueError, match="one per entry"):
        rate_estimates(M, np.linspace(0.0, 0.4, 5), 0.1, 10.0)
    with pytest.raises(ValueError, match="C >= 2"):
        rate_estimates([np.zeros((1, 10))] * 4, np.linspace(0.0, 0.3, 4), 0.1, 10.0)


def test_rate_is_se_is_infinite_when_one_chain_holds_every_hit():
    theta = np.linspace(0.0, 0.8, 5)
    M = [np.full((4, 20), t) for t in theta]
    M[3][1:] = 0.59  # node 3 (mean closest to a = 0.6): only chain 0 reaches A
    M[3][0] = 0.61
    est = rate_estimates(M, theta, 0.6, 25.0)
    assert est["is_node"] == 3 and np.isfinite(est["rate_is"]) and est["rate_is_se"] == math.inf


def test_speed_n_limit_of_the_ldp_problem():
    """inf_A I = 0.0909 (quoted in docs/studies_mean_field.md) for the speed-N regime of the presets.

    rate_infimum (constraint root + rate at the minimiser) against the Legendre dual
    sup_theta [theta a - Lambda(theta)], Lambda(theta) = -beta (min F_theta - min F) from untilted and
    tilted Gibbs solves, and against mesh refinement (100 -> 400 cells: 3e-7).
    """
    import scipy.optimize

    from rieszflow.solvers.gibbs import gibbs_density, rate_infimum
    from rieszflow.solvers.mckean_vlasov import MeanFieldProblem, interval_mesh
    from rieszflow.studies.ldp.study import _limit_rates

    cfg = quick_config()
    reg = cfg.regimes[0]
    assert reg.regime == "fixed_beta" and reg.a == 2.126
    lim = _limit_rates(cfg.replace(n_cells=200), reg)
    assert abs(lim["value"] - 0.0909) < 5e-5  # measured 0.090862 (200 cells), 0.0908618 (400)
    dom = interval_mesh(cfg.lo, cfg.hi, 100)
    prob = MeanFieldProblem.create(dom, lambda x: 0.5 * cfg.gamma * x[:, 0] ** 2, s=cfg.s, lam=cfg.lam,
                                   beta=reg.beta)
    f = dom.centers[:, 0] ** 2
    res = rate_infimum(prob, f, reg.a)
    assert res.converged and abs(res.value - lim["value"]) < 1e-6
    F0 = gibbs_density(prob).free_energy

    def dual(th):
        return th * reg.a + reg.beta * (gibbs_density(prob.replace(V=prob.V - th * f / reg.beta)).free_energy - F0)

    opt = scipy.optimize.minimize_scalar(lambda th: -dual(th), bounds=(0.0, 2.0), method="bounded",
                                         options={"xatol": 1e-10})
    assert abs(-opt.fun - res.value) < 1e-10 and abs(opt.x - res.theta) < 1e-6


def test_unconverged_limit_stops_the_study(monkeypatch):
    import rieszflow.studies.ldp.study as study
    from rieszflow.studies.ldp.study import _limit_rates

    original = study.rate_infimum                 # the name the study calls (imported at its top)
    monkeypatch.setattr(study, "rate_infimum", lambda *a, **k: original(*a, **{**k, "max_iter": 2}))
    cfg = quick_config().replace(n_cells=100)
    with pytest.raises(RuntimeError, match="speed_N. rate_infimum did not converge"):
        _limit_rates(cfg, cfg.regimes[0])


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
    for key, value, match in (("s", 1.5, "s > d"), ("n_theta", 2, ">= 3"), ("theta_max_factor", 0.5, "> 1"),
                              ("lo", 5.0, "lo < hi"), ("backend", "cupy", "backend"),
                              ("n_particles", (1, 4), "n_particles")):
        with pytest.raises(ValueError, match=match):
            q.replace(**{key: value})
    with pytest.raises(ValueError, match="kappa"):
        RegimeConfig("low", 0.5, 1.0)


def _tiny_ldp():
    return quick_config(seed=5).replace(n_particles=(3, 5), burn_in=100, n_steps=200, chains_per_theta=4,
                                        chains_at_zero=8, n_theta=5, n_cells=100)


def _parse(*argv):
    from rieszflow.studies.ldp import cli

    ap = argparse.ArgumentParser()
    cli.register(ap.add_subparsers())
    return ap.parse_args(["ldp", *argv])


def test_ldp_cli_smoke_writes_readable_hdf5(tmp_path, capsys):
    from rieszflow.engine.storage import open_run

    cfg = _tiny_ldp()
    path = tmp_path / "ldp.json"
    path.write_text(json.dumps(cfg.to_dict()))
    out = tmp_path / "ldp.h5"
    args = _parse("--config", str(path), "--out", str(out), "--quiet")
    assert args.func(args) == 0
    assert "inf_A J" in capsys.readouterr().out
    ds = open_run(out, "ldp_study")
    assert ds.attrs["seed"] == 5  # the --config file's seed (no --seed given)
    assert ds["rate_is"].dims == ("regime", "N") and ds["rate_is"].shape == (2, 2)
    assert ds["Lambda"].shape == (2, 2, 5)
    assert np.isfinite(ds["rate_chernoff"].values).all()
    from rieszflow.engine.storage import missing_cf_attributes

    assert missing_cf_attributes(out) == []          # every variable has long_name and units
    # the solver's limit for speed_N2 matches the closed form for the semicircle family
    a = float(ds["a"][1])
    assert abs(float(ds["rate_limit"][1]) - ((a - 0.5) / 2 - 0.25 * math.log(2 * a))) < 2e-4
    assert (tmp_path / "ldp_rates.png").stat().st_size > 1000


def test_ldp_cli_options_override_the_config_only_when_given(tmp_path, monkeypatch, capsys):
    import rieszflow.studies.ldp.study

    seen = []

    def fake(cfg, out, **kw):  # record the resolved configuration instead of running the study
        seen.append(cfg)
        raise FileExistsError("stop here")

    monkeypatch.setattr(rieszflow.studies.ldp.study, "run_ldp_study", fake)
    path = tmp_path / "ldp.json"
    path.write_text(json.dumps(_tiny_ldp().to_dict()))
    for argv, seed in (((), 5), (("--seed", "7"), 7)):
        args = _parse("--config", str(path), "--out", str(tmp_path / "x.h5"), "--quiet", *argv)
        assert args.func(args) == 2
        assert seen[-1].seed == seed and seen[-1].backend == "numpy" and seen[-1].n_particles == (3, 5)
    # a bad configuration: a clean error with exit code 2, no traceback
    path.write_text(json.dumps({**_tiny_ldp().to_dict(), "n_stepz": 3}))
    args = _parse("--config", str(path), "--out", str(tmp_path / "x.h5"))
    assert args.func(args) == 2
    assert "unknown LDPConfig keys" in capsys.readouterr().err


def test_ldp_interrupted_study_resumes_to_the_same_result(tmp_path, monkeypatch):
    """Interrupt after the second (regime, N) cell, resume, and get the uninterrupted arrays exactly."""
    import rieszflow.studies.ldp.study as study
    from rieszflow.engine.storage import open_run

    cfg = _tiny_ldp()
    full, cut = tmp_path / "full.h5", tmp_path / "cut.h5"
    study.run_ldp_study(cfg, full, progress=False, log=None)
    original = study.run_tilted_chains
    calls = {"n": 0}

    def flaky(*a, **k):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return original(*a, **k)

    monkeypatch.setattr(study, "run_tilted_chains", flaky)
    with pytest.raises(KeyboardInterrupt):
        study.run_ldp_study(cfg, cut, progress=False, log=None)
    partial = open_run(cut, "ldp_study")
    assert partial.attrs["status"] == "interrupted"
    assert np.isfinite(partial["wall"].values).sum() == 2
    resumed = []
    monkeypatch.setattr(study, "run_tilted_chains", lambda *a, **k: resumed.append(1) or original(*a, **k))
    with pytest.raises(ValueError, match="another configuration"):
        study.run_ldp_study(cfg.replace(seed=6), cut, resume=True, progress=False, log=None)
    with pytest.raises(FileExistsError, match="already exists"):
        study.run_ldp_study(cfg, cut, progress=False, log=None)
    study.run_ldp_study(cfg, cut, resume=True, progress=False, log=None)
    assert len(resumed) == 2  # 2 regimes x 2 N = 4 cells, 2 stored before the interruption
    a, b = open_run(full, "ldp_study"), open_run(cut, "ldp_study")
    assert b.attrs["status"] == "complete"
    for name in a.data_vars:
        if name != "wall":
            np.testing.assert_array_equal(a[name].values, b[name].values, err_msg=name)


def test_ldp_cli_feeds_its_own_file_back_sets_fields_and_resumes_from_the_file(tmp_path, capsys):
    """Old: the ldp file's stored config ({"json": ...}) was rejected by --config, there was no --set,
    and --resume needed every original option. New: all three work, and a --set that changes the
    stored configuration is refused on resume, naming the key with both values."""
    from rieszflow.engine.storage import open_run

    cfg = _tiny_ldp()
    path = tmp_path / "ldp.json"
    path.write_text(json.dumps(cfg.to_dict()))
    first = tmp_path / "first.h5"
    args = _parse("--config", str(path), "--out", str(first), "--quiet", "--no-plots", "--set", "seed=11")
    assert args.func(args) == 0
    assert open_run(first).attrs["seed"] == 11
    again = tmp_path / "again.h5"
    args = _parse("--config", str(first), "--out", str(again), "--quiet", "--no-plots")
    assert args.func(args) == 0                                   # its own output file as --config
    np.testing.assert_array_equal(open_run(first)["rate_is"].values, open_run(again)["rate_is"].values)
    args = _parse("--resume", "--out", str(first), "--quiet", "--no-plots")
    assert args.func(args) == 0                                   # the file's configuration
    args = _parse("--resume", "--out", str(first), "--quiet", "--no-plots", "--set", "n_steps=300")
    assert args.func(args) == 2
    assert "n_steps: stored 200, given 300" in capsys.readouterr().err


# ----------------------------------------------------------------------------- the sweep layer

def _same_cells(a, b):
    for name in a.data_vars:
        if name != "wall":
            np.testing.assert_array_equal(a[name].values, b[name].values, err_msg=name)


@pytest.fixture(scope="module")
def tiny_ldp_study(tmp_path_factory):
    """The tiny study in-process (workers=0, the Python default), shared by the checks below."""
    import rieszflow.studies.ldp.study as study

    out = tmp_path_factory.mktemp("ldp") / "serial.h5"
    study.run_ldp_study(_tiny_ldp(), out, progress=False, log=None)
    return out


def test_ldp_localcluster_gives_the_in_process_arrays(tmp_path, tiny_ldp_study):
    import rieszflow.studies.ldp.study as study
    from rieszflow.engine.storage import open_run

    out = tmp_path / "cluster.h5"
    study.run_ldp_study(_tiny_ldp(), out, progress=False, log=None, workers=2)
    b = open_run(out, "ldp_study")
    assert b.attrs["status"] == "complete" and json.loads(b.attrs["failures"]) == []
    assert np.isfinite(b["wall"].values).all()
    _same_cells(open_run(tiny_ldp_study, "ldp_study"), b)


def test_ldp_cell_seeds_do_not_depend_on_order_or_on_the_other_cells(tmp_path, monkeypatch, tiny_ldp_study):
    """Each cell draws from SeedSequence([seed, regime index, N]): reversing the cells, or running
    only N = 5, gives the same numbers for every cell."""
    import rieszflow.studies.ldp.study as study
    import rieszflow.studies.ldp.study as sweep       # patch run_jobs where the study calls it
    from rieszflow.engine.storage import open_run

    original, order = sweep.run_jobs, []

    def reversed_jobs(jobs, **kw):
        jobs = list(jobs)[::-1]
        order.extend(j.task for j in jobs)
        return original(jobs, **kw)

    monkeypatch.setattr(sweep, "run_jobs", reversed_jobs)
    out = tmp_path / "reversed.h5"
    study.run_ldp_study(_tiny_ldp(), out, progress=False, log=None)
    assert order[0] == {"regime": "speed_N2", "N": 5} and order[-1] == {"regime": "speed_N", "N": 3}
    full = open_run(tiny_ldp_study, "ldp_study")
    _same_cells(full, open_run(out, "ldp_study"))
    monkeypatch.setattr(sweep, "run_jobs", original)
    only5 = tmp_path / "only5.h5"
    study.run_ldp_study(_tiny_ldp().replace(n_particles=(5,)), only5, progress=False, log=None)
    b = open_run(only5, "ldp_study")
    for name in ("rate_is", "rate_chernoff", "mean_M", "Lambda", "acceptance"):
        np.testing.assert_array_equal(full[name].sel(N=[5]).values, b[name].values, err_msg=name)


def test_ldp_a_failing_cell_is_named_the_others_are_stored_and_resume_finishes(tmp_path, monkeypatch,
                                                                                tiny_ldp_study, capsys):
    import rieszflow.studies.ldp.study as study
    from rieszflow.engine.storage import open_run
    from rieszflow.studies.sweep import TasksFailed

    original = study.run_tilted_chains

    def broken(target, *a, **k):                 # the cell (speed_N2, N = 5) fails
        if target.n == 5 and target.beta_N == 25.0:
            raise FloatingPointError("injected failure")
        return original(target, *a, **k)

    monkeypatch.setattr(study, "run_tilted_chains", broken)
    out = tmp_path / "failed.h5"
    with pytest.raises(TasksFailed, match=r'1 of 4 \(regime, N\) cells failed \(\{"N": 5, "regime": "speed_N2"\}: '
                                          r'FloatingPointError: injected failure\)'):
        study.run_ldp_study(_tiny_ldp(), out, progress=False, log=None)
    partial = open_run(out, "ldp_study")
    assert partial.attrs["status"] == "failed"
    assert json.loads(partial.attrs["failures"])[0]["task"] == {"N": 5, "regime": "speed_N2"}
    assert np.isfinite(partial["wall"].values).sum() == 3 and np.isnan(partial["rate_is"].sel(regime="speed_N2", N=5))
    full = open_run(tiny_ldp_study, "ldp_study")
    np.testing.assert_array_equal(partial["rate_is"].sel(regime="speed_N").values, full["rate_is"].sel(regime="speed_N").values)
    # the CLI: exit 1, one line naming the cell; --resume runs only that cell again
    monkeypatch.setattr(study, "run_tilted_chains", broken)
    cut = tmp_path / "cli.h5"
    path = tmp_path / "ldp.json"
    path.write_text(json.dumps(_tiny_ldp().to_dict()))
    args = _parse("--config", str(path), "--out", str(cut), "--quiet", "--no-plots", "--workers", "0")
    assert args.func(args) == 1
    err = capsys.readouterr().err
    assert 'rieszflow ldp: error: 1 of 4 (regime, N) cells failed ({"N": 5, "regime": "speed_N2"}' in err
    assert "Traceback" not in err
    calls = []
    monkeypatch.setattr(study, "run_tilted_chains", lambda *a, **k: calls.append(1) or original(*a, **k))
    args = _parse("--resume", "--out", str(cut), "--quiet", "--no-plots", "--workers", "0")
    assert args.func(args) == 0 and len(calls) == 1
    done = open_run(cut, "ldp_study")
    assert done.attrs["status"] == "complete"
    _same_cells(full, done)


def test_ldp_cli_has_the_sweep_options(capsys):
    args = _parse("--workers", "0")
    assert args.workers == 0 and args.scheduler is None
    assert _parse("--scheduler", "tcp://h:8786").scheduler == "tcp://h:8786"
    with pytest.raises(SystemExit):
        _parse("--workers", "1", "--scheduler", "tcp://h:8786")
    assert "not allowed with argument" in capsys.readouterr().err


def test_ldp_on_an_existing_scheduler_gives_the_in_process_arrays(tmp_path, tiny_ldp_study):
    """scheduler=ADDRESS (here a LocalCluster started by the test, standing for a remote cluster)."""
    import logging

    from distributed import LocalCluster

    import rieszflow.studies.ldp.study as study
    from rieszflow.engine.storage import open_run

    out = tmp_path / "remote.h5"
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                      silence_logs=logging.ERROR) as cluster:
        study.run_ldp_study(_tiny_ldp(), out, progress=False, log=None, scheduler=cluster.scheduler_address)
    _same_cells(open_run(tiny_ldp_study, "ldp_study"), open_run(out, "ldp_study"))
