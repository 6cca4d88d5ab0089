"""Main-job variants of the NLP tables: Performer, AdamW + warm-up/cosine, Phase A after k epochs,
feature redrawing, QQP from a GLUE folder; their configuration checks and resume."""
import math

import numpy as np
import pytest
import xarray as xr

from rieszflow.__main__ import main as cli_main
from rieszflow.engine.attention.optim import Adam, WarmupCosine
from rieszflow.learning.config import MainJobConfig


def test_warmup_cosine_closed_form():
    f = WarmupCosine(total_steps=10, warmup_steps=4)
    assert [f(t) for t in range(4)] == [0.25, 0.5, 0.75, 1.0]
    # after warm-up: (1 + cos(pi (t - 4) / 6)) / 2
    for t in range(4, 10):
        assert f(t) == pytest.approx(0.5 * (1 + math.cos(math.pi * (t - 4) / 6)), abs=1e-15)
    assert f(10) == 0.0 and f(4) == 1.0
    assert WarmupCosine(5, 0)(0) == 1.0
    for bad in ((0, 0), (5, 5), (5, -1), (5.0, 1)):
        with pytest.raises(ValueError):
            WarmupCosine(*bad)


def test_scheduled_adamw_matches_a_hand_computed_step():
    """Two AdamW steps with a schedule against the update written out by hand."""
    p = {"w": np.array([1.0, -2.0])}
    g = np.array([0.5, 0.25])
    sched = WarmupCosine(total_steps=4, warmup_steps=2)
    opt = Adam(p, ["w"], lr=0.1, weight_decay=0.01, decoupled=True, schedule=sched)
    w = np.array([1.0, -2.0])
    m = v = np.zeros(2)
    for t in range(2):
        lr = 0.1 * sched(t)
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        mh, vh = m / (1 - 0.9 ** (t + 1)), v / (1 - 0.999 ** (t + 1))
        w = w * (1 - lr * 0.01) - lr * mh / (np.sqrt(vh) + 1e-8)
        opt.step({"w": g})
    np.testing.assert_allclose(p["w"], w, rtol=1e-13)


def test_config_checks_of_the_variants(tmp_path):
    with pytest.raises(ValueError, match="qqp_dir"):
        MainJobConfig(dataset="qqp")
    with pytest.raises(ValueError, match="qqp_dir"):
        MainJobConfig(qqp_dir=str(tmp_path))
    with pytest.raises(ValueError, match="phase_a_after"):
        MainJobConfig(phase_a_after=10, epochs=10)
    with pytest.raises(ValueError, match="phase_a_after"):
        MainJobConfig(phase_a_after=1, kernel=False)
    with pytest.raises(ValueError, match="redraw_every"):
        MainJobConfig(redraw_every=5)                         # kernel run: nothing to redraw
    with pytest.raises(ValueError, match="stabilise"):
        MainJobConfig(stabilise="seq")                        # softplus has no shift
    with pytest.raises(ValueError, match="project_init"):
        MainJobConfig(project_init=False)
    with pytest.raises(ValueError, match="warmup_fraction"):
        MainJobConfig(warmup_fraction=1.0)
    with pytest.raises(ValueError, match="optimizer"):
        MainJobConfig(optimizer="sgd")
    assert MainJobConfig(phase_a_after=2).name == "Kernel-softplus-after2"
    assert MainJobConfig(attention="linformer", feature_map=None, kernel=False, qk="learned").name == "Linformer"


def test_cli_rejects_bad_combinations(capsys):
    for argv in (["run", "--performer", "--feature-map", "elu"],
                 ["run", "--vanilla", "--phase-a-after", "1"],
                 ["run", "--dataset", "qqp"],
                 ["run", "--qqp-dir", "/nonexistent/qqp", "--smoke"],
                 ["run", "--performer", "--set", "tau=2.0"]):
        assert cli_main(argv) == 2, argv
        err = capsys.readouterr().err
        assert "error:" in err and "Traceback" not in err


def test_performer_run_uses_orthogonal_unprojected_features(tmp_path):
    out = tmp_path / "p.h5"
    assert cli_main(["run", "--smoke", "--quiet", "--performer", "--out", str(out)]) == 0
    with xr.open_dataset(out, engine="h5netcdf") as ds:
        assert ds.attrs["run_name"] == "Performer"
        omega = ds.omega.isel(time=0).values              # (layer, head, particle, d_k)
    d_k = omega.shape[-1]
    block = omega[0, 0, :d_k]                              # one orthogonal block
    gram = block @ block.T
    np.testing.assert_allclose(gram - np.diag(np.diag(gram)), 0, atol=1e-5)
    # N(0, I) rows are not confined to the ball of radius 1.5: sqrt(d_k) = 4 in the smoke model
    assert np.linalg.norm(omega, axis=-1).mean() > 2.0


def test_phase_a_after_k_keeps_the_matched_vanilla_batches(tmp_path):
    """Phase A after one Phase B epoch: epoch 1 equals the vanilla run's epoch 1 exactly (same
    seed, same batches and dropout), then Phase A moves the particles and the runs differ."""
    args = ["run", "--smoke", "--quiet", "--epochs", "2"]
    van, late = tmp_path / "v.h5", tmp_path / "late.h5"
    assert cli_main([*args, "--vanilla", "--out", str(van)]) == 0
    assert cli_main([*args, "--phase-a-after", "1", "--out", str(late)]) == 0
    with xr.open_dataset(van, engine="h5netcdf") as a, xr.open_dataset(late, engine="h5netcdf") as b:
        n1 = a.sizes["batch"] // 2
        np.testing.assert_array_equal(a.batch_loss.values[:n1], b.batch_loss.values[:n1])
        assert b.attrs["run_name"] == "Kernel-softplus-after1" and b.sizes["step"] > 0
        assert not np.array_equal(a.batch_loss.values[n1:], b.batch_loss.values[n1:])
        assert not np.array_equal(b.omega.values[0], b.omega.values[-1])


def test_interrupted_late_phase_a_resumes_bit_identically(tmp_path, monkeypatch):
    """Interrupt inside Phase A that runs after a Phase B epoch; the resumed run restores Adam's
    state, the best checkpoint and both streams, and equals the uninterrupted run."""
    from rieszflow.learning import train

    args = ["run", "--smoke", "--quiet", "--epochs", "2", "--phase-a-after", "1", "--optimizer", "adamw",
            "--set", "checkpoint_seconds=0"]
    full = tmp_path / "full.h5"
    assert cli_main([*args, "--out", str(full)]) == 0
    original = train.alignment_gradients
    calls = {"n": 0}

    def interrupted(*a, **k):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return original(*a, **k)

    monkeypatch.setattr(train, "alignment_gradients", interrupted)
    cut = tmp_path / "cut.h5"
    assert cli_main([*args, "--out", str(cut)]) == 130
    monkeypatch.setattr(train, "alignment_gradients", original)
    assert cli_main(["run", "--quiet", "--resume", "--out", str(cut)]) == 0
    with xr.open_dataset(full, engine="h5netcdf") as a, xr.open_dataset(cut, engine="h5netcdf") as b:
        assert b.attrs["status"] == "complete"
        for name in ("omega", "hamiltonian", "batch_loss", "val_accuracy", "test_proba"):
            np.testing.assert_array_equal(a[name].values, b[name].values)


def test_redraw_is_resumable_and_changes_the_features(tmp_path, monkeypatch):
    from rieszflow.learning import train

    args = ["run", "--smoke", "--quiet", "--performer", "--epochs", "2", "--set", "redraw_every=3"]
    full = tmp_path / "full.h5"
    assert cli_main([*args, "--out", str(full)]) == 0
    fixed = tmp_path / "fixed.h5"
    assert cli_main(["run", "--smoke", "--quiet", "--performer", "--epochs", "2", "--out", str(fixed)]) == 0
    original = train.MainJob._phase_b_epoch

    def interrupted(self, w, opt, epoch):
        if epoch == 2:
            raise KeyboardInterrupt
        return original(self, w, opt, epoch)

    monkeypatch.setattr(train.MainJob, "_phase_b_epoch", interrupted)
    cut = tmp_path / "cut.h5"
    assert cli_main([*args, "--out", str(cut)]) == 130
    monkeypatch.setattr(train.MainJob, "_phase_b_epoch", original)
    assert cli_main(["run", "--quiet", "--resume", "--out", str(cut)]) == 0
    with xr.open_dataset(full, engine="h5netcdf") as a, xr.open_dataset(cut, engine="h5netcdf") as b, \
            xr.open_dataset(fixed, engine="h5netcdf") as c:
        np.testing.assert_array_equal(a.batch_loss.values, b.batch_loss.values)
        np.testing.assert_array_equal(a.test_proba.values, b.test_proba.values)
        n = 3                   # identical for the 3 steps before the first redraw, then not
        np.testing.assert_array_equal(a.batch_loss.values[:n], c.batch_loss.values[:n])
        assert a.batch_loss.values[n] != c.batch_loss.values[n]


def _write_qqp(folder, n_train=300, n_dev=80, seed=0):
    rng = np.random.default_rng(seed)
    words = ["how", "what", "is", "the", "best", "way", "to", "learn", "python", "cook", "rice", "fast"]
    header = "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
    for name, n in (("train", n_train), ("dev", n_dev)):
        lines = [header]
        for i in range(n):
            q1 = " ".join(rng.choice(words, 6)) + "?"
            dup = int(rng.integers(2))
            q2 = q1 if dup else " ".join(rng.choice(words, 6)) + "?"
            lines.append(f"{i}\t{2 * i}\t{2 * i + 1}\t{q1}\t{q2}\t{dup}\n")
        (folder / f"{name}.tsv").write_text("".join(lines))


def test_qqp_from_a_glue_folder(tmp_path, capsys):
    from rieszflow.engine.attention.data import load_qqp

    _write_qqp(tmp_path)
    split = load_qqp(tmp_path, "dev")
    assert len(split) == 80 and isinstance(split.texts[0], tuple) and set(split.labels) <= {0, 1}
    out = tmp_path / "q.h5"
    assert cli_main(["run", "--smoke", "--quiet", "--vanilla", "--qqp-dir", str(tmp_path),
                     "--set", "qqp_validation=50", "--out", str(out)]) == 0
    with xr.open_dataset(out, engine="h5netcdf") as ds:
        assert list(ds["class"].values) == ["not_duplicate", "duplicate"]
        assert ds.sizes["example"] == 80
    # malformed folders: each a clear error naming file and line, never a traceback
    bad = tmp_path / "bad"
    bad.mkdir()
    with pytest.raises(FileNotFoundError, match="train.tsv"):
        load_qqp(bad, "train")
    (bad / "train.tsv").write_text("id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n1\t2\t3\ta?\n")
    with pytest.raises(ValueError, match=r"train.tsv:2: 4 tab-separated fields"):
        load_qqp(bad, "train")
    (bad / "train.tsv").write_text("id\tquestion1\tquestion2\tlabel\n")
    with pytest.raises(ValueError, match="header"):
        load_qqp(bad, "train")
    (bad / "train.tsv").write_text("id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n1\t2\t3\ta?\tb?\t2\n")
    with pytest.raises(ValueError, match="is_duplicate='2'"):
        load_qqp(bad, "train")
    (bad / "dev.tsv").write_text("x")
    assert cli_main(["run", "--smoke", "--quiet", "--qqp-dir", str(bad), "--out", str(tmp_path / "b.h5")]) == 2
    err = capsys.readouterr().err
    assert "train.tsv" in err and "Traceback" not in err


def test_linformer_run(tmp_path):
    out = tmp_path / "lf.h5"
    assert cli_main(["run", "--smoke", "--quiet", "--linformer", "--set", "linformer_k=8",
                     "--out", str(out)]) == 0
    with xr.open_dataset(out, engine="h5netcdf") as ds:
        assert ds.attrs["run_name"] == "Linformer" and ds.sizes["step"] == 0
        assert 0.0 <= float(ds.test_metrics.sel(metric="accuracy")) <= 1.0


def test_select_from_after_phase_a_never_picks_a_model_older_than_phase_a(tmp_path):
    """``select_from="after_phase_a"``: the selected epoch is after Phase A even when epoch 1 (before
    Phase A) had the best validation accuracy; ``"all"`` may pick epoch 1. One seeded smoke run
    each; the two runs train identically, only the selection differs."""
    args = ["run", "--smoke", "--quiet", "--epochs", "3", "--phase-a-after", "1"]
    a, b = tmp_path / "all.h5", tmp_path / "after.h5"
    assert cli_main([*args, "--out", str(a)]) == 0
    assert cli_main([*args, "--set", "select_from=after_phase_a", "--out", str(b)]) == 0
    with xr.open_dataset(a, engine="h5netcdf") as ra, xr.open_dataset(b, engine="h5netcdf") as rb:
        np.testing.assert_array_equal(ra.val_accuracy.values, rb.val_accuracy.values)
        va = rb.val_accuracy.values
        assert int(rb.attrs["best_epoch"]) == 2 + int(np.argmax(va[1:]))   # first max among 2..3
        assert int(ra.attrs["best_epoch"]) == 1 + int(np.argmax(va))


def test_warmup_longer_than_training_is_refused_before_any_file(tmp_path, capsys):
    out = tmp_path / "x.h5"
    code = cli_main(["run", "--smoke", "--quiet", "--epochs", "1", "--optimizer", "adamw",
                     "--set", "warmup_fraction=0.99", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "warmup_fraction=0.99" in err and "Traceback" not in err
    assert not out.exists()


def test_cached_splits_are_read_only():
    """The tokenized splits are cached per process (a sweep worker runs many tasks): a caller
    that writes into them must fail loudly instead of changing what later tasks read."""
    from rieszflow.learning.config import MainJobConfig
    from rieszflow.learning.train import load_data

    _, tr, _, _ = load_data(MainJobConfig(dataset="rt"))
    with pytest.raises(ValueError, match="read-only"):
        tr.labels[0] = 1 - tr.labels[0]
    with pytest.raises(ValueError, match="read-only"):
        tr.ids[0][0] = 0


def test_resumed_phase_a_seconds_count_the_interrupted_part_of_the_epoch(tmp_path, monkeypatch):
    """A mid-epoch checkpoint stores the epoch's time so far. The interrupted run's clock is skewed
    by 100 s per Langevin step, so its 4 steps take >= 400 s on that clock; the resumed run (real
    clock) must report phase_a_seconds >= 400 (it reported only its own seconds before the fix)."""
    import time as real_time
    import types

    from rieszflow.learning import train

    args = ["run", "--smoke", "--quiet", "--epochs", "1", "--set", "checkpoint_seconds=0"]
    original = train.alignment_gradients
    state = {"n": 0, "skew": 0.0}

    def interrupted(*a, **k):
        state["n"] += 1
        if state["n"] == 5:
            raise KeyboardInterrupt
        state["skew"] += 100.0
        return original(*a, **k)

    monkeypatch.setattr(train, "alignment_gradients", interrupted)
    monkeypatch.setattr(train, "time", types.SimpleNamespace(
        perf_counter=lambda: real_time.perf_counter() + state["skew"]))
    cut = tmp_path / "cut.h5"
    assert cli_main([*args, "--out", str(cut)]) == 130
    monkeypatch.setattr(train, "alignment_gradients", original)
    monkeypatch.setattr(train, "time", real_time)
    assert cli_main(["run", "--quiet", "--resume", "--out", str(cut)]) == 0
    with xr.open_dataset(cut, engine="h5netcdf") as ds:
        assert ds.attrs["status"] == "complete" and float(ds.attrs["phase_a_seconds"]) >= 300.0


def test_phase_a_noise_controls(tmp_path):
    """The two controls of issue 36, against the kernel run of the same seed (smoke size):

    * no_alignment: the same batches and noise, drift lam * grad W only: its particles differ from
      the kernel run's (mutation: a control that keeps the alignment gradient gives the kernel
      run's particles exactly), and its recorded alignment is the kernel run's at step 1 (same
      initial particles and batch);
    * matched_jitter: Phase A runs exactly as in the kernel run (its final snapshot equals the
      kernel run's), then the particles Phase B uses are a perturbation of the initial ones whose
      paired MMD^2 to them equals Phase A's per head (to 1e-6 relative), stored as the snapshot
      at time = steps + 1."""
    from rieszflow.engine.measures import mmd2

    args = ["run", "--smoke", "--quiet", "--set", "feature_map=softmaxfeat"]
    runs = {}
    for ctrl in ("none", "no_alignment", "matched_jitter"):
        p = tmp_path / f"{ctrl}.h5"
        assert cli_main([*args, "--set", f"phase_a_control={ctrl}", "--out", str(p)]) == 0
        runs[ctrl] = xr.open_dataset(p, engine="h5netcdf").load()
    k, n, j = runs["none"], runs["no_alignment"], runs["matched_jitter"]
    assert n.attrs["run_name"] == "Kernel-softmaxfeat-noalign" and j.attrs["run_name"] == "Kernel-softmaxfeat-jitter"
    assert not np.array_equal(k.omega.values[-1], n.omega.values[-1])
    assert k.alignment_energy.values[0] == n.alignment_energy.values[0]
    np.testing.assert_array_equal(k.omega.values[0], n.omega.values[0])
    assert j.time.values[-1] == j.time.values[-2] + 1
    np.testing.assert_array_equal(j.omega.values[-2], k.omega.values[-1])
    import json
    scale = np.array(json.loads(j.attrs["phase_a_jitter_scale"]))
    for layer in range(k.sizes["layer"]):
        for head in range(k.sizes["head"]):
            om_k, om_j = k.omega.values.astype(np.float64), j.omega.values.astype(np.float64)
            target = mmd2(om_k[0, layer, head], om_k[-1, layer, head], paired=True).mmd2
            got = mmd2(om_j[0, layer, head], om_j[-1, layer, head], paired=True).mmd2
            if target > 0:
                assert got == pytest.approx(target, rel=1e-6, abs=1e-9)
                assert scale[layer, head] > 0
            else:                                   # nothing to match: the particles stay
                assert scale[layer, head] == 0
                np.testing.assert_array_equal(om_j[-1, layer, head], om_j[0, layer, head])


def test_phase_a_control_needs_phase_a():
    with pytest.raises(ValueError, match="phase_a_control='no_alignment'.*kernel=True"):
        MainJobConfig(kernel=False, phase_a_control="no_alignment")
    with pytest.raises(ValueError, match="phase_a_control='noise'.*none, no_alignment, matched_jitter"):
        MainJobConfig(phase_a_control="noise")
