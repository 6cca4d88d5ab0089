"""rieszflow gibbs-check: the component-wise MALA against closed-form Gibbs laws, the one-body
potential against finite differences of the alignment energy, the MMD estimator's bias and SE,
and the subcommand end to end on a smoke main-job file."""
import math

import numpy as np
import pytest

from rieszflow.engine.measures import median_bandwidth, mmd2
from rieszflow.engine.simulate import adapt_step_size, mala_within_gibbs
from rieszflow.engine.space import Ball, Free

Z = 4.0      # every statistical threshold below is Z standard errors (two-sided, p ~ 6e-5)


def _chain(potential, space, omega0, beta, lam, sweeps, rng, eta=0.05, burn=200):
    init_fn, step_fn = mala_within_gibbs(potential, space, eta=eta, beta=beta, lam=lam, s=0.0)
    st = adapt_step_size(init_fn(omega0), 0.0, 1, target_acceptance=0.0, eta=eta)
    n = omega0.shape[0]
    out = []
    for k in range(burn + sweeps):
        before = int(st.n_accepted.sum())
        st = step_fn(st, (rng.standard_normal(omega0.shape), np.log(rng.uniform(size=n))))
        if k < burn:
            st = adapt_step_size(st, int(st.n_accepted.sum()) - before, n)
        else:
            out.append(st.omega.copy())
    return np.array(out), st


def _batch_means(x, n_batches=20):
    """Mean of a (T,) trace and its batch-means standard error."""
    b = np.array_split(np.asarray(x), n_batches)
    means = np.array([v.mean() for v in b])
    return float(np.mean(x)), float(means.std(ddof=1) / math.sqrt(n_batches))


def test_quadratic_potential_without_interaction_gives_the_gaussian_gibbs_law(rng):
    # lam = 0, V(w) = a |w - c|^2 / 2 on R^3: pi = N(c, I / (beta a)) for every particle
    a, beta, c = 2.0, 5.0, np.array([0.3, -0.2, 0.1])

    def potential(w):
        return 0.5 * a * np.sum((w - c) ** 2, 1), a * (w - c)

    samples, st = _chain(potential, Free(), rng.normal(size=(8, 3)), beta, 0.0, 3000, rng)
    assert 0.3 < st.acceptance_rate < 0.9
    var_true = 1.0 / (beta * a)
    for j in range(3):
        m, se = _batch_means(samples[:, :, j].mean(1))
        assert abs(m - c[j]) < Z * se
        v, se_v = _batch_means(((samples[:, :, j] - c[j]) ** 2).mean(1))
        assert abs(v - var_true) < Z * se_v


def test_flat_potential_in_a_ball_gives_the_uniform_law_and_its_norm_moments(rng):
    # lam = 0, V = 0 on the ball of radius R in R^d: E|w|^2 = d R^2 / (d + 2); the hard wall
    R, d = 1.5, 4

    def potential(w):
        return np.zeros(w.shape[0]), np.zeros_like(w)

    samples, _ = _chain(potential, Ball(R), np.zeros((6, d)), 1.0, 0.0, 3000, rng, eta=0.1)
    assert np.all(np.linalg.norm(samples, axis=2) <= R * (1 + 1e-12))
    m, se = _batch_means((samples ** 2).sum(2).mean(1))
    assert abs(m - d * R ** 2 / (d + 2)) < Z * se


def test_log_repulsion_of_two_particles_matches_the_closed_form(rng):
    # N = 2 in d = 1, V = a w^2 / 2, log repulsion: pi ∝ exp(-beta a (x1^2 + x2^2)/2) |x1 - x2|^(beta lam)
    # (beta N lam W_{2,0} = beta lam (-log |x1 - x2|)), so E (x1 - x2)^2 = 2 (beta lam + 1) / (beta a)
    a, beta, lam = 1.0, 2.0, 1.5

    def potential(w):
        return 0.5 * a * np.sum(w ** 2, 1), a * w

    samples, _ = _chain(potential, Free(), np.array([[-0.5], [0.5]]), beta, lam, 6000, rng, eta=0.3)
    gap2 = (samples[:, 0, 0] - samples[:, 1, 0]) ** 2
    m, se = _batch_means(gap2, 40)
    assert abs(m - 2.0 * (beta * lam + 1.0) / (beta * a)) < Z * se
    # and the interaction matters: without it the mean is 2 / (beta a), many SEs away
    assert abs(m - 2.0 / (beta * a)) > 10 * se


def test_mala_within_gibbs_rejects_bad_input():
    def potential(w):
        return np.zeros(w.shape[0]), np.zeros_like(w)

    with pytest.raises(ValueError, match="beta"):
        mala_within_gibbs(potential, Free(), eta=0.1, beta=0.0)
    with pytest.raises(ValueError, match="lam"):
        mala_within_gibbs(potential, Free(), eta=0.1, beta=1.0, lam=-1.0)
    init_fn, _ = mala_within_gibbs(potential, Ball(1.0), eta=0.1, beta=1.0)
    with pytest.raises(ValueError, match="outside"):
        init_fn(np.full((3, 2), 2.0))


def _gauss_mmd2(delta2, d, sigma):
    """Closed-form MMD^2 of N(0, I) and N(mu, I) in R^d, |mu|^2 = delta2, Gaussian kernel sigma."""
    c = (sigma ** 2 / (sigma ** 2 + 2.0)) ** (d / 2)
    return 2.0 * c * (1.0 - math.exp(-delta2 / (2.0 * (sigma ** 2 + 2.0))))


@pytest.mark.parametrize("paired", [False, True])
def test_mmd2_is_unbiased_and_its_jackknife_se_is_calibrated(rng, paired):
    d, n, sigma, reps = 3, 40, 1.5, 300
    mu = np.array([0.8, 0.0, 0.0])
    truth = _gauss_mmd2(float(mu @ mu), d, sigma)
    vals, ses = [], []
    for _ in range(reps):
        x = rng.normal(size=(n, d))
        # paired: y_i depends on x_i (a moved copy) but has the law N(mu, I)
        y = (mu + 0.6 * x + 0.8 * rng.normal(size=(n, d))) if paired else mu + rng.normal(size=(n, d))
        r = mmd2(x, y, bandwidth=sigma, paired=paired)
        vals.append(r.mmd2)
        ses.append(r.se)
    vals, ses = np.array(vals), np.array(ses)
    sd = vals.std(ddof=1)
    assert abs(vals.mean() - truth) < Z * sd / math.sqrt(reps)
    # the jackknife variance is conservative (Efron-Stein) and close: the ratio of the mean
    # jackknife variance to the replicate variance lies within Z standard errors of the
    # replicate variance (relative SE sqrt(2 / (reps - 1))) above 1, and not far above
    ratio = np.mean(ses ** 2) / sd ** 2
    assert 1.0 - Z * math.sqrt(2.0 / (reps - 1)) < ratio < 1.6


def test_mmd2_of_paired_copies_is_not_biased_by_the_pairing(rng):
    # a cloud against a slightly moved copy of itself: the unpaired estimator is pulled below 0
    # by the i = j cross terms; the paired one is unbiased for the marginals (here equal laws)
    vals_u, vals_p = [], []
    for _ in range(200):
        x = rng.normal(size=(30, 4))
        y = x + 0.05 * rng.normal(size=x.shape)
        vals_u.append(mmd2(x, y, bandwidth=2.0).mmd2)
        vals_p.append(mmd2(x, y, bandwidth=2.0, paired=True).mmd2)
    vp = np.array(vals_p)
    assert np.mean(vals_u) < -0.01
    assert abs(vp.mean()) < Z * vp.std(ddof=1) / math.sqrt(len(vp)) + 1e-12


def test_mmd2_and_median_bandwidth_reject_bad_input(rng):
    x = rng.normal(size=(5, 2))
    with pytest.raises(ValueError, match="bandwidth"):
        mmd2(x, x, bandwidth=-1.0)
    with pytest.raises(ValueError, match="dimension"):
        mmd2(x, rng.normal(size=(5, 3)))
    with pytest.raises(ValueError, match="equal size"):
        mmd2(x, rng.normal(size=(6, 2)), paired=True)
    with pytest.raises(ValueError, match="0"):
        median_bandwidth(np.zeros((4, 2)))


# --------------------------------------------------------------------------- the potential

@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    """A main-job file of ``rieszflow run --smoke`` (one Phase A epoch)."""
    from rieszflow.studies.cli import main as cli_main

    path = tmp_path_factory.mktemp("gibbs") / "smoke.h5"
    assert cli_main(["run", "--smoke", "--quiet", "--epochs", "1", "--out", str(path)]) == 0
    return path


@pytest.fixture(scope="module")
def potential(smoke_run):
    from rieszflow.engine.attention.data import batches
    from rieszflow.studies.gibbs_check.potential import HeadPotential
    from rieszflow.learning.objectives import ALIGNMENTS
    from rieszflow.learning.runfiles import load_phase_a_setup

    setup = load_phase_a_setup(smoke_run)
    bs = [(i, m, y) for i, m, y, _ in batches(setup.train, 32, pad_id=setup.tokenizer.pad_id,
                                              min_last=2)][:2]
    return HeadPotential(setup.model, bs, ALIGNMENTS["onehot"], 1, 1), setup


class _WeightedMap:
    """Feature map of a weighted measure: phi_k = sqrt(w_k) g_k / sum_j w_j g_j (forward only),
    so that phi(q) . phi(k) = int g g dmu / (int g dmu int g dmu) for mu = sum_k w_k delta."""

    def __init__(self, base, weights_per_head):
        self.base, self.w, self.calls = base, weights_per_head, 0
        self.tau, self.positive, self.stabilise = base.tau, True, "none"

    def forward(self, x, omega):
        w = self.w[self.calls % len(self.w)]
        self.calls += 1
        g = self.base._g(np, x @ omega.T / self.tau)[0]
        return np.sqrt(w) * g / (g @ w)[..., None], None


def test_potential_is_the_first_variation_of_the_alignment_energy(potential):
    # d/de E(mu_ref + e delta_w) at e = 0, with the head's measure given explicit weights (one
    # extra atom at w of weight e), by Richardson-extrapolated forward differences, against V(w)
    pot, _ = potential
    model, layer, head = pot.model, pot.layer, pot.head
    attn = model.layers[layer].attn
    base, name, ref = attn.feature_map, pot.name, pot.reference
    m, H, d = ref.shape[0], attn.n_heads, ref.shape[1]
    rng = np.random.default_rng(5)
    points = ref[:3] + 0.3 * rng.normal(size=(3, d))
    v, _ = pot(points)
    old = model.params[name].copy()

    def energy_with(w_pt, e):
        om = np.concatenate([old, np.zeros((H, 1, d))], axis=1)
        om[head, -1] = w_pt
        model.params[name] = om
        weights = [np.r_[np.full(m, 1.0 / m), 0.0] for _ in range(H)]
        weights[head][-1] = e
        attn.feature_map = _WeightedMap(base, weights)
        try:
            return pot.energy(om[head])
        finally:
            attn.feature_map = base
            model.params[name] = old

    eps = 1e-4
    for w_pt, v_pt in zip(points, v):
        e0 = energy_with(w_pt, 0.0)
        assert e0 == pytest.approx(pot.energy_ref, rel=1e-12)      # a zero-weight atom is no atom
        d1 = (energy_with(w_pt, eps) - e0) / eps
        d2 = (energy_with(w_pt, 2 * eps) - e0) / (2 * eps)
        assert 2 * d1 - d2 == pytest.approx(v_pt, rel=1e-5, abs=1e-10)
        assert abs(v_pt) > 1e-6                                      # a non-trivial check


def test_potential_gradient_is_phase_a_drift_and_integrates_to_zero(potential):
    pot, _ = potential
    v, g = pot(pot.reference)
    m = pot.reference.shape[0]
    assert abs(v.mean()) < 1e-12 * max(1.0, np.abs(v).max())           # int V dmu_ref = 0
    ga = pot.phase_a_gradient()                                          # the model's backward
    np.testing.assert_allclose(g / m, ga, rtol=1e-8, atol=1e-12 * np.abs(ga).max())
    # grad V against central differences of V
    w = pot.reference[:3] + 0.05
    for j in (0, 5):
        e = np.zeros_like(w)
        e[:, j] = 1e-6
        fd = (pot(w + e)[0] - pot(w - e)[0]) / 2e-6
        np.testing.assert_allclose(pot(w)[1][:, j], fd, rtol=1e-5, atol=1e-9)


# --------------------------------------------------------------------------- end to end

def test_gibbs_check_runs_on_a_smoke_file_and_writes_a_readable_file(smoke_run, tmp_path, capsys):
    from rieszflow.engine.storage import missing_cf_attributes, open_run
    from rieszflow.studies.cli import main as cli_main

    out = tmp_path / "g.h5"
    code = cli_main(["gibbs-check", str(smoke_run), "--quick", "--out", str(out), "--set",
                     "burn_in=10", "--set", "sweeps=12", "--set", "n_saved=2"])
    text = capsys.readouterr().out
    assert code == 0 and "learned-gibbs" in text and "Verdict" in text
    ds = open_run(out, kind="gibbs_check")
    assert ds["mmd2"].dims == ("layer", "head", "comparison")
    assert list(ds["comparison"].values) == ["learned-gibbs", "initial-gibbs", "learned-initial",
                                             "gibbs-gibbs"]
    assert np.isfinite(ds["mmd2"]).all() and (ds["mmd2_se"] > 0).all()
    assert np.all(np.linalg.norm(ds["omega_gibbs"].values, axis=-1) <= 1.5 * (1 + 1e-12))
    assert missing_cf_attributes(out) == []
    for suffix in ("norms", "traces", "mmd"):
        assert (tmp_path / f"g_{suffix}.png").exists()


@pytest.mark.parametrize("kind", ["missing", "corrupt", "foreign"])
def test_a_bad_run_file_is_a_one_line_error_naming_it(kind, tmp_path, capsys):
    from rieszflow.studies.cli import main as cli_main

    run = tmp_path / "run.h5"
    if kind == "corrupt":
        run.write_bytes(b"not an hdf5 file")
    elif kind == "foreign":
        import h5py

        with h5py.File(run, "w") as f:
            f.attrs["kind"] = "something"
    code = cli_main(["gibbs-check", str(run), "--quick", "--quiet", "--out", str(tmp_path / "g.h5")])
    err = capsys.readouterr().err
    assert code == 2 and str(run) in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "g.h5").exists()


@pytest.mark.parametrize("mmd2, label", [
    ((0.001, 0.002, 0.3), "undecided"),             # initial and Gibbs not resolved
    ((0.001, 0.5, 0.4), "at its Gibbs state"),
    ((0.5, 0.5, 0.001), "at its initial law"),
    ((0.02, 0.5, 0.4), "near its Gibbs state"),      # D_lg / D_ig = 0.2
    ((0.45, 0.5, 0.02), "near its initial law"),
    ((0.2, 0.5, 0.2), "neither"),
])
def test_verdict_labels(mmd2, label):
    from rieszflow.studies.gibbs_check.study import verdict

    got, frac = verdict([*mmd2, 0.0], [0.001] * 4)
    assert got == label
    assert frac == pytest.approx(math.sqrt(mmd2[0] / mmd2[1]))


def test_split_rhat_and_ess_on_independent_and_stuck_chains(rng):
    from rieszflow.studies.gibbs_check.study import effective_sample_size, split_rhat

    iid = rng.normal(size=(2, 2000))
    assert split_rhat(iid) == pytest.approx(1.0, abs=0.01)
    assert 1500 < effective_sample_size(iid) < 6000          # 4000 draws, independent
    stuck = np.stack([rng.normal(size=500), 5.0 + rng.normal(size=500)])
    assert split_rhat(stuck) > 2.0
    ar = np.zeros((2, 4000))
    for t in range(1, 4000):                                # AR(1), rho = 0.9: ESS ~ n (1-rho)/(1+rho)
        ar[:, t] = 0.9 * ar[:, t - 1] + rng.normal(size=2)
    assert 8000 * 0.053 * 0.6 < effective_sample_size(ar) < 8000 * 0.053 * 1.6
    for bad in (np.zeros(10), np.zeros((2, 3))):             # not (C, n >= 4)
        with pytest.raises(ValueError, match="split-R-hat needs"):
            split_rhat(bad)
