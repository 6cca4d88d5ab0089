"""``rieszflow nlp``: the NLP tables as a sweep of main-job runs (tiny sizes)."""
import numpy as np
import pytest
import xarray as xr

from rieszflow.__main__ import main as cli_main
from rieszflow.studies.nlp.study import (NLPConfig, _paired, format_table2, specs, table_rows,
                                         variant_configs, task_config)
from rieszflow.studies.sweep import open_sweep

TINY = ["--set", "datasets=rt", "--set", "feature_maps=favor,elu", "--set", "late_maps=elu",
        "--set", "baselines=Vaswani-softmaxattn,Performer,Linformer", "--set", "seeds=2", "--set", "train_limit=200",
        "--set", "eval_limit=64", "--set", "m=16", "--set", "epochs=2", "--set", "phase_a_after=1",
        "--set", "phase_a_epochs=1"]


def test_config_and_variants():
    with pytest.raises(ValueError, match="qqp_dir"):
        NLPConfig(datasets=("rt", "qqp"))
    with pytest.raises(ValueError, match="feature_maps"):
        NLPConfig(feature_maps=("gauss",))
    with pytest.raises(ValueError, match="late_maps"):
        NLPConfig(feature_maps=("favor",), late_maps=("elu",))
    with pytest.raises(ValueError, match="phase_a_after"):
        NLPConfig(epochs=2, phase_a_after=2)
    cfg = NLPConfig()
    names = list(variant_configs(task_config(cfg), "rt", 0, cfg.feature_maps, cfg.baselines, cfg.late_maps))
    assert names[:4] == ["Vaswani-softmaxattn", "Vanilla-favor-WqWk", "Performer", "Linformer"]
    assert len(names) == 4 + 3 * len(cfg.feature_maps)
    assert "Kernel-porf_softplus-after2" in names
    # a vanilla and its kernel run share every main-job field but the Phase A switch
    v = variant_configs(task_config(cfg), "sst2", 5, ["elu"], [], [])
    a, b = v["Vanilla-elu"].to_dict(), v["Kernel-elu"].to_dict()
    assert {k for k in a if a[k] != b[k]} == {"kernel"} and a["seed"] == 5
    # QQP given: a third sweep; the grids are not part of the stored task configuration
    assert [s.name for s in specs(NLPConfig(qqp_dir="/data/qqp"))] == ["nlp-rt", "nlp-sst2", "nlp-qqp"]
    assert "feature_maps" not in specs(cfg)[0].config


def _fake(deltas_correct):
    """A merged-sweep-like dataset: two methods, len(deltas) seeds, given correctness vectors."""
    a_correct, b_correct = deltas_correct
    S, n = a_correct.shape
    y = np.ones((2, 1, S, n))
    proba = np.stack([np.where(a_correct, 0.9, 0.1), np.where(b_correct, 0.9, 0.1)])[:, None]
    acc = np.stack([a_correct.mean(1), b_correct.mean(1)])[:, None]
    metrics = np.zeros((2, 1, S, 2))
    metrics[..., 0] = acc
    return xr.Dataset({"test_metrics": (("method", "dataset", "trial", "metric"), metrics),
                       "test_proba": (("method", "dataset", "trial", "example"), proba),
                       "test_label": (("method", "dataset", "trial", "example"), y),
                       "train_seconds": (("method", "dataset", "trial"), np.ones((2, 1, S))),
                       "best_epoch": (("method", "dataset", "trial"), np.full((2, 1, S), 2.0))},
                      coords={"method": ["Vanilla-elu", "Kernel-elu"], "dataset": ["rt"],
                              "trial": np.arange(S), "metric": ["accuracy", "mcc"]})


def test_paired_comparison_counts_discordant_pairs():
    from scipy.stats import binomtest

    a = np.array([[1, 1, 0, 0, 1, 1], [1, 0, 1, 0, 1, 1]], dtype=bool)
    b = np.array([[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1]], dtype=bool)
    r = _paired(_fake((a, b)), "Vanilla-elu", "Kernel-elu")
    # vanilla-only wrong: seed 0: 1 (index 5); kernel-only right: seed 0: 2, seed 1: 2
    assert r["pooled"]["a_only"] == 1 and r["pooled"]["b_only"] == 4
    assert r["pooled"]["p_value"] == pytest.approx(binomtest(1, 5, 0.5).pvalue)
    np.testing.assert_allclose(r["delta"], [1 / 6, 2 / 6])
    assert "+0.2500" in format_table2({"rt": _fake((a, b))})        # mean change (1/6 + 2/6) / 2


def test_tiny_nlp_sweep_end_to_end(tmp_path, capsys):
    out = tmp_path / "nlp"
    argv = ["nlp", "--quiet", "--workers", "0", "--no-plots", "--out", str(out), *TINY]
    assert cli_main(argv) == 0
    printed = capsys.readouterr().out
    assert "Table 1" in printed and "Table 2" in printed and "Verdicts" in printed
    ds = open_sweep(out / "nlp-rt", write=False)
    assert ds.sizes["trial"] == 2 and "example" in ds.dims and ds.attrs["status"] == "complete"
    assert set(map(str, ds.method.values)) == {"Vaswani-softmaxattn", "Performer", "Linformer", "Vanilla-favor",
                                                "Kernel-favor", "Vanilla-elu", "Kernel-elu",
                                                "Kernel-elu-after1"}
    rows = {r["name"]: r for r in table_rows(ds)}
    assert all(0 <= r["mean"]["accuracy"] <= 1 and r["n"] == 2 for r in rows.values())
    assert (out / "tables.md").is_file() and (out / "table_rt.csv").read_text().startswith("dataset,model")
    # the main-job seed is seed + trial: a kernel run and its vanilla run share it
    with xr.open_dataset(next((out / "nlp-rt" / "tasks").glob("Kernel-elu__*trial1*.h5")),
                         engine="h5netcdf") as t:
        assert int(t.attrs["main_job_seed"]) == 1
    # rerunning the same command runs nothing; another configuration is refused
    assert cli_main(argv) == 0
    assert cli_main([*argv, "--set", "m=8"]) == 2
    assert "another configuration" in capsys.readouterr().err


def test_task_of_one_variant_needs_only_its_own_fields():
    """A run of the paper's order with one epoch builds no late variant (which would need two),
    and an unknown variant name is a clear error."""
    from rieszflow.studies.nlp.study import nlp_task
    from rieszflow.studies.sweep import Task

    cfg = NLPConfig(datasets=("rt",), feature_maps=("elu",), late_maps=(), baselines=(), seeds=1,
                    epochs=1, phase_a_epochs=1, m=8, train_limit=64, eval_limit=32)
    config = task_config(cfg)
    ds = nlp_task(Task("nlp-rt", "Kernel-elu", (("dataset", "rt"),), 0), config, None)
    assert ds.sizes["epoch"] == 1 and ds.sizes["example"] == 32
    assert all({"long_name", "units"} <= set(ds[v].attrs) for v in ds.variables)
    # how far Phase A moved the kernel: a KGD^2 estimate with its SE and two noise ratios
    kgd2, se = float(ds["phase_a_kgd2"]), float(ds["phase_a_kgd2_se"])
    assert np.isfinite(kgd2) and se > 0 and kgd2 > -4 * se
    assert float(ds["phase_a_kgd"]) == pytest.approx(np.sqrt(max(kgd2, 0.0)))
    assert float(ds["phase_a_kernel_ratio"]) > 0 and float(ds["phase_a_token_ratio"]) > 0
    van = nlp_task(Task("nlp-rt", "Vanilla-elu", (("dataset", "rt"),), 0), config, None)
    assert np.isnan(float(van["phase_a_kgd"])) and np.isnan(float(van["phase_a_token_ratio"]))
    with pytest.raises(ValueError, match="not a variant"):
        nlp_task(Task("nlp-rt", "Kernel-gauss", (("dataset", "rt"),), 0), config, None)


def test_qqp_sweep_from_a_glue_folder(tmp_path, capsys):
    from tests.test_main_job_variants import _write_qqp

    glue = tmp_path / "QQP"
    glue.mkdir()
    _write_qqp(glue, n_train=400)
    argv = ["nlp", "--quiet", "--workers", "0", "--out", str(tmp_path / "n"), "--qqp-dir", str(glue),
            "--set", "datasets=qqp", "--set", "feature_maps=elu", "--set", "late_maps=", "--set", "baselines=",
            "--set", "seeds=1", "--set", "m=8", "--set", "epochs=1", "--set", "phase_a_epochs=1"]
    # 5,000 validation examples cannot come from 400: every task fails, each named; exit 1
    assert cli_main(argv) == 1
    assert "qqp_validation" in capsys.readouterr().err
    bad = tmp_path / "bad"
    bad.mkdir()
    assert cli_main(["nlp", "--quiet", "--out", str(tmp_path / "m"), "--qqp-dir", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "train.tsv" in err and "Traceback" not in err
