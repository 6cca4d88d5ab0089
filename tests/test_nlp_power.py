"""``rieszflow nlp --preset power / phase-a``: presets, resume, the power report (tiny sizes)."""
import json
import math

import numpy as np
import pytest
import xarray as xr

from rieszflow.__main__ import main as cli_main
from rieszflow.config import resolve_config
from rieszflow.studies.nlp.power import format_power_report, pair_analysis, pairs
from rieszflow.studies.nlp.study import (PHASE_A_CELLS, PRESETS, VANILLA_FIELDS, NLPConfig, specs,
                                         task_config, variant_configs)

#: The command line of the background power sweep (issue 23), without its run options.
EXPLICIT = ["datasets=rt", "feature_maps=softplus,softmaxfeat", "baselines=", "late_maps=",
            "phase_a_cells=noalign,jitter", "cell_maps=softmaxfeat", "seeds=10"]
TINY = ["train_limit=64", "eval_limit=32", "m=8", "epochs=2", "phase_a_epochs=1", "phase_a_after=1"]


def _sets(items):
    return [a for kv in items for a in ("--set", kv)]


def test_power_preset_resolves_to_the_explicit_sweep():
    explicit = resolve_config(NLPConfig, NLPConfig(), overrides=EXPLICIT)
    preset = resolve_config(NLPConfig, NLPConfig().replace(**PRESETS["power"]))
    assert preset.to_dict() == explicit.to_dict()
    a, b = specs(preset), specs(explicit)
    assert [t.filename for s in a for t in s.tasks()] == [t.filename for s in b for t in s.tasks()]
    # 4 matched arms and the two noise controls of softmaxfeat (issue 36), 10 seeds each
    assert len(a[0].tasks()) == 60 and a[0].config == task_config(explicit)
    assert [m for m in a[0].methods if "softmaxfeat-" in m] == ["Kernel-softmaxfeat-noalign",
                                                               "Kernel-softmaxfeat-jitter"]


def test_phase_a_cells_change_only_their_fields():
    cfg = NLPConfig(**PRESETS["phase-a"])
    assert 1 <= len(cfg.phase_a_cells) + 1 <= 6 and cfg.seeds >= 5 and cfg.feature_maps == ("softplus",)
    v = variant_configs(task_config(cfg), "rt", 3, ["softplus"], [], [], tuple(PHASE_A_CELLS))
    base = v["Vanilla-softplus"].to_dict()
    for cell, (changes, why) in PHASE_A_CELLS.items():
        k = v[f"Kernel-softplus-{cell}"].to_dict()
        vanilla = v.get(f"Vanilla-softplus-{cell}", v["Vanilla-softplus"]).to_dict()
        assert {f for f in k if k[f] != vanilla[f]} == {"kernel"} | {f for f in changes if f not in VANILLA_FIELDS}
        assert {f for f in vanilla if vanilla[f] != base[f]} == {f for f in changes if f in VANILLA_FIELDS}
        assert why and k["seed"] == 3
    # the cells are grid fields: the stored task configuration (and the power sweep's files) is unchanged
    assert task_config(cfg) == task_config(NLPConfig(**PRESETS["power"]))
    with pytest.raises(ValueError, match="phase_a_cells"):
        NLPConfig(phase_a_cells=("hot",))
    with pytest.raises(ValueError, match="needs epochs > 2; got epochs=2"):
        NLPConfig(phase_a_cells=("late",), epochs=2, late_maps=(), phase_a_after=1)


def _fake(right_v, right_k, mmd=None):
    S, n = right_v.shape
    names = ["Vanilla-softplus", "Kernel-softplus"]
    proba = np.stack([np.where(right_v, 0.9, 0.1), np.where(right_k, 0.9, 0.1)])[:, None]
    metrics = np.stack([right_v.mean(1), right_k.mean(1)])[:, None, :, None]
    one = np.ones((2, 1, S))
    mm = np.full((2, 1, S), np.nan) if mmd is None else np.stack([np.full(S, np.nan), mmd])[:, None]
    return xr.Dataset({"test_metrics": (("method", "dataset", "trial", "metric"), metrics),
                       "test_proba": (("method", "dataset", "trial", "example"), proba),
                       "test_label": (("method", "dataset", "trial", "example"), np.ones((2, 1, S, n))),
                       "train_seconds": (("method", "dataset", "trial"), 60 * one),
                       "phase_a_mmd2": (("method", "dataset", "trial"), mm),
                       "phase_a_mmd2_se": (("method", "dataset", "trial"), 0 * one)},
                      coords={"method": names, "dataset": ["rt"], "trial": np.arange(S), "metric": ["accuracy"]})


def test_pair_analysis_by_hand():
    # two seeds, 4 examples each: vanilla right on 3 and on 1 ... kernel right on 3 and 3
    rv = np.array([[1, 1, 1, 0], [1, 0, 0, 0]], bool)
    rk = np.array([[1, 1, 1, 0], [1, 1, 1, 0]], bool)
    r = pair_analysis(_fake(rv, rk), "Vanilla-softplus", "Kernel-softplus")
    np.testing.assert_allclose(r["delta"], [0.0, 0.5])
    assert [(m.a_only, m.b_only) for m in r["mcnemar"]] == [(0, 0), (0, 2)]
    # the matched-pairs Mantel-Haenszel test: the discordant pairs summed over seeds, 0 vanilla-only
    # and 2 kernel-only: exact p = 2 * (1/2)^2 = 0.5, odds ratio 2/0 = inf (a CMH on the unpaired
    # margins would give chi2 = 1 here: it is not what the page reports)
    assert (r["matched"].a_only, r["matched"].b_only) == (0, 2)
    assert r["matched"].p_value == pytest.approx(0.5) and r["matched"].odds_ratio == math.inf
    assert "cmh" not in r
    assert r["interval"].mean == pytest.approx(0.25)
    assert r["sign_flip"].p_value == pytest.approx(1.0)    # 2 seeds, changes (0, 0.5): every sign pattern as extreme
    assert r["discordance"] == pytest.approx(2 / 8)


def test_partial_report_says_not_decidable():
    rv = np.array([[1, 1, 0, 0], [1, 0, 1, 0]], bool)
    ds = _fake(rv, ~rv, mmd=np.array([0.1, 0.2]))
    ds["test_metrics"][:, :, 1] = np.nan                 # seed 1 of both not complete
    ds["train_seconds"][:, :, 1] = np.nan
    spec = {"trials": 10, "methods": ["Vanilla-softplus", "Kernel-softplus"], "config": {}}
    page = format_power_report(ds, spec, dataset="rt", command="C", regenerate="R")
    assert "**1 of 10 seeds complete; verdict not decidable until all 10" in page
    assert "-0.0019" in page                                  # the paper's Table 2 value for softplus, rt
    assert "| 0 | 0.5000 | 0.5000 | +0.0000 | 2 / 2 | 1 |" in page
    assert "need at least 2 seeds" in page
    assert "complete runs per variant: Vanilla-softplus 1/10, Kernel-softplus 1/10" in page
    empty = format_power_report(None, spec, dataset="rt", command="C", regenerate="R")
    assert "0 of 10 seeds complete" in empty and "x 8.7 CPU-min (one main-job run, measured earlier)" in empty
    assert "mean training wall time of 1.0 min per run" in page
    assert pairs(["Vanilla-softplus", "Kernel-softplus", "Kernel-softplus-cold", "Vanilla-softplus-wide",
                  "Kernel-softplus-wide"]) == [
        ("Vanilla-softplus", "Kernel-softplus", "softplus", ""),
        ("Vanilla-softplus", "Kernel-softplus-cold", "softplus", "cold"),
        ("Vanilla-softplus-wide", "Kernel-softplus-wide", "softplus", "wide")]


def test_tiny_power_sweep_resumes_under_the_preset_and_reports_partially(tmp_path, capsys):
    out = tmp_path / "power"
    run = ["nlp", "--quiet", "--workers", "0", "--no-plots", "--out", str(out)]
    small = [kv for kv in EXPLICIT if not kv.startswith(("seeds", "phase_a_cells", "cell_maps"))] + ["seeds=2", "feature_maps=softplus"] + TINY
    assert cli_main([*run, *_sets(small)]) == 0
    capsys.readouterr()
    # as the background sweep's: a config.json written before phase_a_cells existed
    stored = json.loads((out / "config.json").read_text())
    del stored["phase_a_cells"]
    (out / "config.json").write_text(json.dumps(stored))
    # the preset with the same sizes resumes it: every task is skipped
    assert cli_main([*run, "--preset", "power", *_sets(["seeds=2", "feature_maps=softplus", "phase_a_cells=", "cell_maps="] + TINY)]) == 0
    assert "0 done, 4 skipped" in capsys.readouterr().out
    report = (out / "report.md").read_text()
    assert "2 of 2 seeds complete" in report and "Wilcoxon" in report and "95 % t interval" in report
    # the runs by the code their files record; every run came from this process's code
    from rieszflow.engine.storage.provenance import code_identity, provenance
    from rieszflow.studies.nlp.power import _short, task_commits

    mine = code_identity(provenance())
    commits = task_commits(out / "nlp-rt")
    assert len(commits) == 4 and set(commits.values()) == {mine}
    assert f"{_short(mine)} (4)" in report
    clean = not ("-dirty" in mine or mine == "unknown")
    assert f"Kernel-softplus: {_short(mine)} (2)" in report
    assert ("every run of this comparison ran one clean commit" in report) == clean
    assert ("NOT one clean commit" in report) == (not clean)
    # remove one seed's kernel run: --report-only (no rerun) says the verdict is not decidable
    for f in (out / "nlp-rt" / "tasks").glob("Kernel-softplus__*trial1*.h5"):
        f.unlink()
    before = sorted(p.name for p in (out / "nlp-rt").iterdir())
    assert cli_main(["nlp", "--preset", "power", "--out", str(out), "--report-only", "--quiet",
                     *_sets(["seeds=2", "feature_maps=softplus", "phase_a_cells=", "cell_maps="] + TINY)]) == 0
    page = capsys.readouterr().out
    assert "1 of 2 seeds complete; verdict not decidable" in page
    assert sorted(p.name for p in (out / "nlp-rt").iterdir()) == before     # nothing run, nothing merged
    # --report-only of another configuration is refused; of no sweep too
    assert cli_main(["nlp", "--out", str(out), "--report-only", "--set", "m=16"]) == 2
    assert cli_main(["nlp", "--out", str(tmp_path / "none"), "--report-only"]) == 2
    # the page comes out of rieszflow report <out>
    assert cli_main(["report", str(out), "--out", str(tmp_path / "page.md")]) == 0
    assert "verdict not decidable" in (tmp_path / "page.md").read_text()


def test_tiny_phase_a_grid_records_how_far_phase_a_moved(tmp_path, capsys):
    out = tmp_path / "grid"
    argv = ["nlp", "--quiet", "--workers", "0", "--no-plots", "--out", str(out), "--preset", "phase-a",
            *_sets(["seeds=1", "phase_a_cells=wide", "train_limit=64", "eval_limit=32", "m=8",
                    "epochs=2", "phase_a_epochs=1"])]
    assert cli_main(argv) == 0
    capsys.readouterr()
    from rieszflow.studies.sweep import open_sweep

    ds = open_sweep(out / "nlp-rt", write=False)
    assert list(map(str, ds.method.values)) == ["Vanilla-softplus", "Kernel-softplus", "Vanilla-softplus-wide",
                                                 "Kernel-softplus-wide"]
    mmd = ds["phase_a_mmd2"].values.reshape(4)
    assert np.isnan(mmd[[0, 2]]).all() and np.isfinite(mmd[[1, 3]]).all()
    with xr.open_dataset(next((out / "nlp-rt" / "tasks").glob("Vanilla-softplus-wide__*trial0*.h5")),
                         engine="h5netcdf") as t:
        assert json.loads(t.attrs["main_job_config"])["radius"] == 3.0
    report = (out / "report.md").read_text()
    assert "Phase A grid" in report and "| softplus | wide | radius=3.0 | 1/1 |" in report
    # the kernel's movement too: KGD^2 and the noise ratios, recorded for kernel runs only
    kgd2 = ds["phase_a_kgd2"].values.reshape(4)
    assert np.isnan(kgd2[[0, 2]]).all() and np.isfinite(kgd2[[1, 3]]).all()
    row = next(line for line in report.splitlines() if line.startswith("| softplus | wide |"))
    cells = [c.strip() for c in row.split("|")]
    assert cells[9] == f"{float(kgd2[3]):.3g} (1 seed)"          # one seed: no seed-level SE
    ratio = float(ds["phase_a_kernel_ratio"].values.reshape(4)[3])
    assert cells[10].startswith(f"{ratio:.3g}, ")


def test_rerun_task_reproduces_a_stored_task(tmp_path, capsys):
    """A stored task rerun with this process's code: same accuracy and probabilities to float32
    rounding, no prediction changed (one thread: the same BLAS blocking as the stored run)."""
    from rieszflow.studies.nlp.power import rerun_task

    out = tmp_path / "power"
    run = ["nlp", "--quiet", "--workers", "0", "--no-plots", "--out", str(out)]
    small = [kv for kv in EXPLICIT if not kv.startswith(("seeds", "phase_a_cells", "cell_maps"))] + ["seeds=1", "feature_maps=softplus"] + TINY
    assert cli_main([*run, *_sets(small)]) == 0
    capsys.readouterr()
    r = rerun_task(out / "nlp-rt", "Kernel-softplus", 0)
    assert r["accuracy_rerun"] == r["accuracy_stored"] and r["predictions_differ"] == 0
    assert r["max_abs_proba_diff"] <= 1e-6 and r["stored_commit"] == r["rerun_commit"]
    with pytest.raises(FileNotFoundError, match="no complete task"):
        rerun_task(out / "nlp-rt", "Kernel-softplus", 5)
    with pytest.raises(FileNotFoundError, match="sweep.json"):
        rerun_task(tmp_path, "Kernel-softplus", 0)


def test_power_and_phase_a_presets_share_one_directory_and_report_each_its_own(tmp_path, capsys):
    """The Phase A grid runs in the power sweep's --out (shared Vanilla/Kernel-softplus tasks); the
    last run rewrites sweep.json, but each preset's report shows its own variants."""
    out = tmp_path / "shared"
    run = ["nlp", "--quiet", "--workers", "0", "--no-plots", "--out", str(out)]
    sizes = ["seeds=1", "feature_maps=softplus,softmaxfeat"] + TINY
    assert cli_main([*run, "--preset", "power", *_sets(sizes)]) == 0
    assert cli_main([*run, "--preset", "phase-a", *_sets(["seeds=1", "phase_a_cells=wide"] + TINY)]) == 0
    capsys.readouterr()
    assert "Kernel-softplus-wide" in json.loads((out / "nlp-rt" / "sweep.json").read_text())["methods"]
    report = ["nlp", "--out", str(out), "--report-only", "--quiet"]
    assert cli_main([*report, "--preset", "power", *_sets(sizes)]) == 0
    power = capsys.readouterr().out
    assert "Kernel-softmaxfeat against Vanilla-softmaxfeat" in power and "wide" not in power
    assert "1 of 1 seeds complete" in power
    assert cli_main([*report, "--preset", "phase-a", *_sets(["seeds=1", "phase_a_cells=wide"] + TINY)]) == 0
    grid = capsys.readouterr().out
    assert "Kernel-softplus-wide against Vanilla-softplus-wide" in grid and "softmaxfeat" not in grid
    # a preset whose task configuration differs from the stored runs is refused, by name
    assert cli_main([*report, "--preset", "power", *_sets(sizes + ["m=16"])]) == 2
    assert "another task configuration (m: stored 8, --preset power 16)" in capsys.readouterr().err


def test_pair_from_counts_equals_pair_analysis():
    """The analysis from per-seed summaries is the analysis from the predictions (what
    scripts/reanalyse_power_page.py relies on)."""
    from rieszflow.studies.nlp.power import pair_from_counts

    rng = np.random.default_rng(3)
    rv, rk = rng.random((5, 40)) < 0.7, rng.random((5, 40)) < 0.72
    a = pair_analysis(_fake(rv, rk), "Vanilla-softplus", "Kernel-softplus")
    b = pair_from_counts(a["seeds"], a["acc_v"], a["acc_k"], [m.a_only for m in a["mcnemar"]],
                         [m.b_only for m in a["mcnemar"]], 40)
    for key in ("matched", "pooled_mcnemar", "t", "wilcoxon", "sign_flip", "interval"):
        assert tuple(a[key]) == pytest.approx(tuple(b[key]), nan_ok=True), key
    with pytest.raises(ValueError, match="one entry per seed"):
        pair_from_counts([0, 1], [0.5], [0.5, 0.6], [1, 2], [1, 2], 40)


@pytest.mark.parametrize("page", ["nlp_power_13_commits.md", "nlp_phase_a_mixed_commits.md"])
def test_reanalysed_pages_are_what_the_script_writes_and_quote_no_cmh(tmp_path, page):
    """The pages re-analysed from their stored per-seed rows are what the script writes today (so
    the committed numbers come from the command on the page), and none quotes the
    Cochran-Mantel-Haenszel test of unpaired margins."""
    import pathlib
    import runpy
    import shlex

    root = pathlib.Path(__file__).resolve().parents[1]
    text = (root / "docs" / "results" / page).read_text()
    cmd = text.split("Generated by `", 1)[1].split("`", 1)[0]
    argv = shlex.split(cmd)[2:]
    out = tmp_path / page
    argv[argv.index("--out") + 1] = str(out)
    argv[0] = str(root / argv[0])
    main = runpy.run_path(str(root / "scripts" / "reanalyse_power_page.py"))["main"]
    assert main(argv) == 0
    got = out.read_text().replace(str(out), f"docs/results/{page}").replace(str(root) + "/", "")
    assert got == text
    assert "Cochran-Mantel-Haenszel" not in text and "CMH" not in text
    assert "Mantel-Haenszel test for matched pairs" in text
