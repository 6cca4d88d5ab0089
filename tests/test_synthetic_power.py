"""The synthetic benchmark at a size that decides: the Bayes ceiling of the test split (against
Monte Carlo), the per-sigma verdict logic on constructed inputs (no signal is never a win), the
exact Wilcoxon arithmetic, the Langevin row without resampling, and the --preset power preset."""
import json

import numpy as np
import pytest
import xarray as xr

from rieszflow.studies.cli import main as cli_main
from rieszflow.studies.sweep import Task
from rieszflow.studies.synthetic.data import bayes_accuracy, draw_labels, make_dataset, positive_probability
from rieszflow.studies.synthetic.study import SyntheticConfig, benchmark_task, format_verdicts, task_config
from rieszflow.engine.stats import wilcoxon_floor
from rieszflow.studies.synthetic.verdicts import has_signal, min_pairs, sigma_verdict, split_ceilings


@pytest.mark.parametrize("sigma", [0.0, 0.3, 1.0, 3.0, 100.0])
def test_positive_probability_matches_monte_carlo(sigma):
    """q_i = E sigmoid(l_i + sigma Z) by quadrature (both rules) against 200,000 draws of Z,
    within 5 standard errors, at logits from -4 to 4."""
    from scipy.special import expit

    logit = np.array([-4.0, -1.3, -0.2, 0.0, 0.5, 2.0, 4.0])
    z = np.random.default_rng(1).standard_normal(200_000)
    draws = expit(logit[:, None] + sigma * z[None, :])
    mc, se = draws.mean(axis=1), draws.std(axis=1) / np.sqrt(z.size)
    q = positive_probability(logit, sigma)
    assert np.all(np.abs(q - mc) <= 5 * se + 1e-12), (q, mc, se)
    assert q[3] == pytest.approx(0.5, abs=1e-12)                 # symmetric noise: l = 0 -> 1/2
    assert np.all((q > 0.5) == (logit > 0))


@pytest.mark.parametrize("sigma", [0.0, 1.0, 10.0, 100.0])
def test_bayes_ceiling_of_the_test_split_matches_simulated_labels(sigma):
    """The Bayes rule 1{l > 0} scored on 4,000 fresh label draws of the fixed test split (the
    study's own draw_labels): mean accuracy within 5 SE of bayes_accuracy, and its spread
    matches the stated sd to 10 %."""
    data = make_dataset()
    rng = np.random.default_rng(7)
    pred = (data.logit[data.test] > 0).astype(int)
    acc = np.array([np.mean(draw_labels(data.logit, sigma, rng)[data.test] == pred) for _ in range(4000)])
    ceiling, sd = bayes_accuracy(data.logit[data.test], sigma)
    assert abs(acc.mean() - ceiling) <= 5 * sd / np.sqrt(acc.size), (acc.mean(), ceiling)
    assert acc.std(ddof=1) == pytest.approx(sd, rel=0.1)


def test_bayes_ceilings_of_the_paper_grid_and_the_signal_rule():
    """The issue's values (0.773 at sigma = 1, 0.567 at 10, 0.50 at 100) and which carry signal."""
    cfg = task_config(SyntheticConfig())
    c = split_ceilings(cfg, (0.0, 1.0, 10.0, 100.0, 1e5))
    assert c[1.0][0] == pytest.approx(0.773, abs=5e-4) and c[10.0][0] == pytest.approx(0.567, abs=1e-3)
    assert 0.5 <= c[1e5][0] < 0.5001 and c[0.0][0] > c[1.0][0] > c[10.0][0] > c[100.0][0] > c[1e5][0]
    assert [has_signal(*c[s]) for s in (0.0, 1.0, 10.0, 100.0, 1e5)] == [True, True, True, False, False]
    with pytest.raises(ValueError, match="sigma"):
        bayes_accuracy([0.1], -1.0)
    with pytest.raises(ValueError, match="empty"):
        bayes_accuracy([], 1.0)


def test_exact_wilcoxon_arithmetic():
    """2 / 2^7 = 0.0156 >= 0.01 > 2 / 2^8 = 0.0078: 8 non-zero pairs for p < 0.01, 6 for 0.05;
    scipy's p of 8 (7) same-signed pairs is that floor."""
    from scipy.stats import wilcoxon

    assert wilcoxon_floor(7) == pytest.approx(0.015625) and wilcoxon_floor(8) == pytest.approx(0.0078125)
    assert min_pairs(0.01) == 8 and min_pairs(0.05) == 6 and wilcoxon_floor(0) == 1.0
    for k in (7, 8):
        assert wilcoxon(np.arange(1.0, k + 1)).pvalue == pytest.approx(wilcoxon_floor(k))


SIGNAL, NOISE = (0.773, 0.036), (0.507, 0.046)


def test_sigma_verdict_on_constructed_pairs():
    up8 = np.arange(1, 9) / 120.0
    base = np.full(8, 0.6)
    assert sigma_verdict(base + up8, base, *SIGNAL).status == "holds"
    assert sigma_verdict(base - up8, base, *SIGNAL).status == "fails"
    # the same overwhelming win where the Bayes ceiling is a coin flip: never a win
    v = sigma_verdict(base + up8, base, *NOISE)
    assert v.status == "no signal" and v.mean > 0
    # 7 same-signed pairs (or 8 with one tie, dropped) cannot reach 0.01
    assert sigma_verdict(base[:7] + up8[:7], base[:7], *SIGNAL).status == "too few pairs"
    tied = up8.copy()
    tied[0] = 0.0
    v = sigma_verdict(base + tied, base, *SIGNAL)
    assert v.status == "too few pairs" and v.nonzero == 7 and v.n == 8
    # 20 pairs of alternating sign: a test that could decide, and did not find a difference
    alt = np.tile([1.0, -1.0], 10) * np.arange(1, 21) / 120.0
    v = sigma_verdict(np.full(20, 0.6) + alt, np.full(20, 0.6), *SIGNAL)
    assert v.status == "no significant difference" and v.p_value > 0.5
    assert v.lo < v.mean < v.hi
    # missing trials are dropped pairwise
    a = np.r_[base + up8, np.nan]
    assert sigma_verdict(a, np.r_[base, 0.5], *SIGNAL).n == 8


def _bench(trials=10):
    """A benchmark-shaped dataset: Langevin beats RFF by 1-2 test points in every trial at
    sigma = 1 and by 10 points at sigma = 100."""
    sig = np.array([1.0, 100.0])
    rng = np.random.default_rng(0)
    rff = 0.6 + rng.integers(-3, 4, (2, trials)) / 120.0
    lang = rff + np.array([[1.0], [10.0]]) / 120.0 + (np.arange(trials) % 2) / 120.0
    acc = np.stack([lang, rff, rff - 1 / 120.0])
    ds = xr.Dataset({"accuracy": (("method", "sigma", "trial"), acc)},
                    coords={"method": ["langevin_svm", "rff_svm", "sinha_duchi_svm"], "sigma": sig,
                            "trial": np.arange(trials)})
    ds.attrs["config"] = json.dumps({"config": task_config(SyntheticConfig())})
    return ds


def test_format_verdicts_per_sigma_never_pools_the_no_signal_level():
    text = format_verdicts(_bench())
    lines = [ln for ln in text.splitlines() if ln.startswith("  by sigma")]
    assert len(lines) == 2
    for ln in lines:
        assert "holds at sigma = 1e+00" in ln and "no signal: not decidable at sigma = 1e+02" in ln
    assert "0.773+-0.036" in text and "0.507+-0.046" in text
    # 4 trials: too few pairs at sigma = 1, still no verdict at sigma = 100
    few = format_verdicts(_bench(trials=4))
    assert "not decidable at this size (too few non-zero pairs) at sigma = 1e+00" in few
    assert "holds at" not in few


def test_langevin_task_stores_the_row_without_resampling():
    """All N particles as features beside the D resampled; distinct_frequencies is the number
    of distinct rows among the stored D resampled frequencies."""
    cfg = SyntheticConfig(n=60, sigmas=(1.0,), trials=1, methods=("langevin_svm",), D=12,
                          langevin_N=16, langevin_steps=30).to_dict()
    ds = benchmark_task(Task("benchmark", "langevin_svm", (("sigma", 1.0),), 0), cfg, np.random.default_rng(0))
    distinct = np.unique(ds.omega.values, axis=0).shape[0]
    assert float(ds.distinct_frequencies) == distinct and 1 <= distinct <= 12
    assert float(ds.n_particles) == 16 and 0.0 <= float(ds.accuracy_all_particles) <= 1.0
    assert float(ds.cpu_seconds) > 0
    for v in ("accuracy_all_particles", "distinct_frequencies", "cpu_seconds"):
        assert ds[v].attrs["long_name"] and ds[v].attrs["units"]


def test_power_preset_cli(tmp_path, capsys):
    assert cli_main(["synthetic", "--preset", "power", "--quick", "--out", str(tmp_path / "x")]) == 2
    assert "--preset power and --quick" in capsys.readouterr().err
    assert cli_main(["synthetic", "--preset", "power", "--show-config", "--out", str(tmp_path / "x")]) == 0
    shown = capsys.readouterr().out
    rows = {ln.split()[0]: ln.split()[1] for ln in shown.splitlines() if ln.startswith("  ") and ln.split()}
    assert rows["sigmas"] == "0.01,0.1,1.0,10.0,100.0" and rows["trials"] == "20"
    assert not (tmp_path / "x").exists()
