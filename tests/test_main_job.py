"""The main job: alignment objectives, strict configuration, CLI smoke runs, HDF5 layout, resume."""
import json

import numpy as np
import pytest
import xarray as xr

from rieszflow.studies.cli import main as cli_main
from rieszflow.engine.energy.alignment import kernel_target_alignment, onehot_alignment
from rieszflow.learning.checkpoint import read_checkpoint
from rieszflow.learning.config import MainJobConfig


def _num_grad(f, P, h=1e-6):
    g = np.zeros_like(P)
    for idx in np.ndindex(P.shape):
        e = np.zeros_like(P)
        e[idx] = h
        g[idx] = (f(P + e) - f(P - e)) / (2 * h)
    return g


@pytest.mark.parametrize("objective", [onehot_alignment, kernel_target_alignment])
def test_alignment_gradients(objective, rng):
    P = rng.standard_normal((7, 3))
    y = np.array([0, 1, 1, 0, 1, 0, 0])
    value, grad = objective(P, y)
    num = _num_grad(lambda Q: objective(Q, y)[0], P)
    np.testing.assert_allclose(grad, num, rtol=1e-7, atol=1e-9)


def test_onehot_alignment_closed_form(rng):
    """V = 1/(n(n-1)) sum_{i<j} [y_i = y_j] <P_i, P_j>, eq. (C.4), against the double loop."""
    P = rng.standard_normal((6, 4))
    y = np.array([0, 0, 1, 1, 1, 0])
    n = len(y)
    brute = sum(P[i] @ P[j] for i in range(n) for j in range(i + 1, n) if y[i] == y[j]) / (n * (n - 1))
    assert onehot_alignment(P, y)[0] == pytest.approx(brute, rel=1e-12)


def test_kta_bounds_and_perfect_alignment():
    y = np.array([0, 0, 1, 1])
    P = np.array([[1.0, 0], [1, 0], [0, 1], [0, 1]])     # K = Y exactly: alignment 1
    assert kernel_target_alignment(P, y)[0] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="shape"):
        kernel_target_alignment(P, y[:3])
    with pytest.raises(ValueError, match="NaN"):
        onehot_alignment(np.full((4, 2), np.nan), y)


def test_config_is_strict():
    with pytest.raises(ValueError, match="unknown config keys \\['bogus'\\]"):
        MainJobConfig.from_dict({"bogus": 1})
    with pytest.raises(ValueError, match="s=-2"):
        MainJobConfig(s=-2.0)
    with pytest.raises(ValueError, match="feature_map='gauss'"):
        MainJobConfig(feature_map="gauss")
    with pytest.raises(ValueError, match="eta=0"):
        MainJobConfig(eta=0)
    with pytest.raises(ValueError, match="needs attention='linear'"):
        MainJobConfig(attention="softmax", feature_map=None, kernel=True)
    with pytest.raises(ValueError, match="not used by softmax"):
        MainJobConfig(attention="softmax", kernel=False)
    with pytest.raises(ValueError, match="kernel='false'"):
        MainJobConfig.from_dict({"kernel": "false"})
    with pytest.raises(ValueError, match="phase_a_epochs=0"):
        MainJobConfig(phase_a_epochs=0)
    with pytest.raises(ValueError, match="m=1"):
        MainJobConfig(m=1)
    assert MainJobConfig().name == "Kernel-softplus"
    assert MainJobConfig(kernel=False).name == "Vanilla-softplus"


def test_cli_rejects_bad_values(capsys):
    assert cli_main(["run", "--set", "lam=-1"]) == 2
    assert "lam=-1.0" in capsys.readouterr().err
    assert cli_main(["run", "--set", "nope=1"]) == 2
    assert "unknown config key" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli_main(["run", "--feature-map", "gauss"])


@pytest.fixture(scope="module")
def smoke_runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("runs")
    kern, van = d / "kernel.h5", d / "vanilla.h5"
    assert cli_main(["run", "--smoke", "--quiet", "--out", str(kern)]) == 0
    assert cli_main(["run", "--smoke", "--quiet", "--vanilla", "--out", str(van)]) == 0
    return kern, van


def test_smoke_run_hdf5_layout(smoke_runs):
    kern, _ = smoke_runs
    with xr.open_dataset(kern, engine="h5netcdf") as ds:
        cfg = json.loads(ds.attrs["config"])
        assert ds.attrs["status"] == "complete" and ds.attrs["kind"] == "main_job"
        assert ds.omega.dims == ("time", "layer", "head", "particle", "coord")
        assert ds.omega.shape[1:] == (cfg["n_layers"], cfg["n_heads"], cfg["m"],
                                      cfg["d_model"] // cfg["n_heads"])
        n_steps = int(np.ceil(cfg["train_limit"] / cfg["batch_size"])) * cfg["phase_a_epochs"]
        # the Hamiltonian is recorded at every Phase A step, and equals its two parts
        assert ds.sizes["step"] == n_steps == ds.attrs["phase_a_steps"]
        np.testing.assert_allclose(ds.hamiltonian, ds.alignment_energy + cfg["lam"] * ds.repulsion_energy,
                                   rtol=1e-12)
        # independent check: the repulsion recorded at step t+1 is the Riesz energy of the
        # particles snapshotted at step t (the energy is evaluated before the step's update)
        from rieszflow.engine.energy.riesz import riesz_energy

        for t in ds.time.values[:-1]:
            om = ds.omega.sel(time=t).values.astype(np.float64)
            w = sum(float(riesz_energy(om[l, h], cfg["s"])) for l in range(om.shape[0])
                    for h in range(om.shape[1]))
            assert float(ds.repulsion_energy.sel(step=t + 1)) == pytest.approx(w, rel=1e-4)
        assert np.isfinite(ds.hamiltonian).all()
        # particles stay in the ball of radius R (the projection of eq. 4.3)
        norms = np.linalg.norm(ds.omega.values, axis=-1)
        assert norms.max() <= cfg["radius"] * (1 + 1e-6)
        assert ds.time.values[0] == 0 and ds.time.values[-1] == n_steps
        assert not np.allclose(ds.omega.values[0], ds.omega.values[-1])     # Phase A moved them
        assert ds.sizes["epoch"] == cfg["epochs"]
        assert set(ds.metric.values) >= {"accuracy", "roc_auc", "ece", "log_loss"}
        acc = float(ds.test_metrics.sel(metric="accuracy"))
        assert acc == pytest.approx(np.mean(ds.test_proba.values.argmax(1) == ds.test_label.values))
        assert ds.attrs["train_seconds"] > 0 and "git_commit" in ds.attrs


def test_matched_vanilla_and_kernel_runs(smoke_runs):
    """Same seed: same initial particles; the vanilla run keeps them, the kernel run moves them."""
    kern, van = smoke_runs
    with xr.open_dataset(kern, engine="h5netcdf") as k, xr.open_dataset(van, engine="h5netcdf") as v:
        np.testing.assert_array_equal(k.omega.values[0], v.omega.values[0])
        assert v.sizes["time"] == 1 and v.sizes["step"] == 0
        assert json.loads(v.attrs["config"])["kernel"] is False


def test_refuses_overwrite_and_resumes(tmp_path, capsys):
    out = tmp_path / "r.h5"
    assert cli_main(["run", "--smoke", "--quiet", "--vanilla", "--out", str(out)]) == 0
    assert cli_main(["run", "--smoke", "--quiet", "--vanilla", "--out", str(out)]) == 2
    assert "already exists" in capsys.readouterr().err
    # a finished run: --resume says there is nothing to resume, prints the stored metrics, exit 0
    # (as every subcommand does), and touches nothing
    before = out.read_bytes()
    assert cli_main(["run", "--smoke", "--quiet", "--vanilla", "--resume", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "is complete: nothing to resume" in printed and "accuracy" in printed
    assert out.read_bytes() == before


def test_interrupted_run_resumes_to_the_same_result(tmp_path, monkeypatch):
    """Kill a run after its first Phase B epoch, resume it, and get the uninterrupted result.

    The checkpoint holds the model, Adam's moments, the best state and the RNG streams, so the
    resumed run sees the same batches and dropout masks and must match bit for bit.
    """
    from rieszflow.learning import train

    args = ["run", "--smoke", "--quiet", "--epochs", "2"]
    full = tmp_path / "full.h5"
    assert cli_main([*args, "--out", str(full)]) == 0

    cut = tmp_path / "cut.h5"
    original = train.MainJob._phase_b_epoch

    def interrupted(self, w, opt, epoch):
        if epoch == 2:
            raise KeyboardInterrupt
        return original(self, w, opt, epoch)

    monkeypatch.setattr(train.MainJob, "_phase_b_epoch", interrupted)
    assert cli_main([*args, "--out", str(cut)]) == 130  # interrupted: exit 130, no traceback
    with xr.open_dataset(cut, engine="h5netcdf") as ds:
        assert ds.attrs["status"] == "interrupted" and ds.sizes["epoch"] == 1
    monkeypatch.setattr(train.MainJob, "_phase_b_epoch", original)
    # resuming with another configuration is refused
    assert cli_main([*args, "--seed", "1", "--resume", "--out", str(cut)]) == 2
    assert cli_main([*args, "--resume", "--out", str(cut)]) == 0
    with xr.open_dataset(full, engine="h5netcdf") as a, xr.open_dataset(cut, engine="h5netcdf") as b:
        assert b.attrs["status"] == "complete" and b.attrs["resumed"] == 1
        np.testing.assert_array_equal(a.test_metrics.values, b.test_metrics.values)
        np.testing.assert_array_equal(a.batch_loss.values, b.batch_loss.values)
        np.testing.assert_array_equal(a.omega.values, b.omega.values)


def test_softmax_baseline_smoke(tmp_path):
    out = tmp_path / "softmax.h5"
    assert cli_main(["run", "--smoke", "--quiet", "--softmax", "--out", str(out)]) == 0
    with xr.open_dataset(out, engine="h5netcdf") as ds:
        assert ds.attrs["run_name"] == "Vaswani-softmaxattn"
        assert ds.sizes["step"] == 0 and ds.sizes["time"] == 0
        assert 0.0 <= float(ds.test_metrics.sel(metric="accuracy")) <= 1.0


def test_parse_overrides_types():
    """--set values take the type of the field's default; tuples are comma-separated."""
    import dataclasses

    from rieszflow.config import parse_overrides

    @dataclasses.dataclass(frozen=True)
    class C:
        flag: bool = False
        n: int = 1
        x: float = 0.5
        name: str = "a"
        sizes: tuple = (1, 2)

    got = parse_overrides(["flag=true", "n=3", "x=1e-3", "name=b", "sizes=4,5,6"], C)
    assert got == {"flag": True, "n": 3, "x": 1e-3, "name": "b", "sizes": (4, 5, 6)}
    with pytest.raises(ValueError, match="n='x'"):
        parse_overrides(["n=x"], C)
    with pytest.raises(ValueError, match="expected KEY=VALUE"):
        parse_overrides(["n"], C)


def test_phase_a_gradient_matches_finite_differences():
    """d(-V)/d omega from the hand-written backward, against central differences (float64)."""
    from rieszflow.engine.attention.model import TransformerClassifier
    from rieszflow.learning.train import alignment_gradients

    rng = np.random.default_rng(3)
    model = TransformerClassifier(vocab_size=50, max_len=8, d_model=8, n_heads=2, d_ff=16, n_layers=2,
                                  dropout=0.1, feature_map="softplus", m=5, rng=rng, dtype="float64")
    ids = rng.integers(1, 50, size=(6, 7))
    mask = np.ones((6, 7), dtype=bool)
    mask[2, 5:] = False
    y = np.array([0, 1, 1, 0, 1, 0])
    names = model.particle_names()
    for objective in (onehot_alignment, kernel_target_alignment):
        _, grads = alignment_gradients(model, ids, mask, y, objective, names)
        for name in names:
            om = model.params[name]
            for idx in [(0, 0, 0), (1, 3, 2), (0, 4, 3)]:
                old = om[idx]
                om[idx] = old + 1e-6
                e_plus = -alignment_gradients(model, ids, mask, y, objective, names)[0]
                om[idx] = old - 1e-6
                e_minus = -alignment_gradients(model, ids, mask, y, objective, names)[0]
                om[idx] = old
                num = (e_plus - e_minus) / 2e-6
                assert grads[name][idx] == pytest.approx(num, rel=1e-5, abs=1e-9), (objective, name, idx)


def test_stale_checkpoint_is_never_mixed_into_another_run(tmp_path, monkeypatch):
    """An interrupted run X, then a fresh run Y at the same path: Y's resume must not use X's state."""
    from rieszflow.learning import train

    out = tmp_path / "r.h5"
    original = train.MainJob._phase_b_epoch

    def interrupted(self, w, opt, epoch):
        raise KeyboardInterrupt

    monkeypatch.setattr(train.MainJob, "_phase_b_epoch", interrupted)
    assert cli_main(["run", "--smoke", "--quiet", "--set", "lam=0.5", "--out", str(out)]) == 130  # run X: checkpoint after Phase A
    assert out.with_name(out.name + ".ckpt.npz").exists()
    monkeypatch.setattr(train.MainJob, "_phase_b_epoch", original)
    ckpt = out.with_name(out.name + ".ckpt.npz")
    x_meta, _ = read_checkpoint(ckpt)
    # a fresh run Y with --overwrite replaces X's checkpoint as it starts; its final one is kept
    # (a finished run can be extended) and is Y's
    assert cli_main(["run", "--smoke", "--quiet", "--overwrite", "--out", str(out)]) == 0
    y_meta, _ = read_checkpoint(ckpt)
    with xr.open_dataset(out, engine="h5netcdf") as ds:
        assert y_meta["run_id"] == ds.attrs["run_id"] != x_meta["run_id"]


def test_resume_after_early_stop_keeps_phase_a_stopped(tmp_path, monkeypatch):
    """delta large enough to stop Phase A after one step; interrupt in Phase B; resume."""
    from rieszflow.learning import train

    args = ["run", "--smoke", "--quiet", "--epochs", "2", "--phase-a-epochs", "3", "--set", "delta=10"]
    full, cut = tmp_path / "full.h5", tmp_path / "cut.h5"
    assert cli_main([*args, "--out", str(full)]) == 0
    original = train.MainJob._phase_b_epoch

    def interrupted(self, w, opt, epoch):
        if epoch == 2:
            raise KeyboardInterrupt
        return original(self, w, opt, epoch)

    monkeypatch.setattr(train.MainJob, "_phase_b_epoch", interrupted)
    assert cli_main([*args, "--out", str(cut)]) == 130  # interrupted: exit 130, no traceback
    monkeypatch.setattr(train.MainJob, "_phase_b_epoch", original)
    assert cli_main([*args, "--resume", "--out", str(cut)]) == 0
    with xr.open_dataset(full, engine="h5netcdf") as a, xr.open_dataset(cut, engine="h5netcdf") as b:
        assert a.attrs["phase_a_steps"] == b.attrs["phase_a_steps"] == 1
        assert a.attrs["phase_a_stopped_early"] == b.attrs["phase_a_stopped_early"] == 1
        np.testing.assert_array_equal(a.test_metrics.values, b.test_metrics.values)


def test_interrupt_inside_the_first_phase_a_epoch_resumes_bit_identically(tmp_path, monkeypatch):
    """Old: a SIGINT during the first Phase A epoch left nothing to resume. New: Phase A checkpoints
    every checkpoint_seconds (0 here: every step), and the resumed run equals the uninterrupted one
    bit for bit (same batch order, same noise stream)."""
    from rieszflow.learning import train

    args = ["run", "--smoke", "--quiet", "--epochs", "2", "--set", "checkpoint_seconds=0"]
    full = tmp_path / "full.h5"
    assert cli_main([*args, "--out", str(full)]) == 0
    original = train.alignment_gradients
    calls = {"n": 0}

    def interrupted(*a, **k):
        calls["n"] += 1
        if calls["n"] == 5:                      # after 4 of the epoch's 8 Langevin steps
            raise KeyboardInterrupt
        return original(*a, **k)

    monkeypatch.setattr(train, "alignment_gradients", interrupted)
    cut = tmp_path / "cut.h5"
    assert cli_main([*args, "--out", str(cut)]) == 130
    with xr.open_dataset(cut, engine="h5netcdf") as ds:
        assert ds.attrs["status"] == "interrupted" and ds.sizes["step"] == 4 and ds.sizes["epoch"] == 0
    monkeypatch.setattr(train, "alignment_gradients", original)
    assert cli_main(["run", "--quiet", "--resume", "--out", str(cut)]) == 0
    with xr.open_dataset(full, engine="h5netcdf") as a, xr.open_dataset(cut, engine="h5netcdf") as b:
        assert b.attrs["status"] == "complete"
        for name in ("omega", "hamiltonian", "batch_loss", "test_metrics", "test_proba"):
            np.testing.assert_array_equal(a[name].values, b[name].values)


def test_main_job_file_describes_itself(tmp_path):
    """CF conventions: every variable and coordinate has long_name and units, step/epoch/batch are
    integer indices, the class axis is labelled and the label codes carry flag_values/flag_meanings."""
    from rieszflow.engine.storage import missing_cf_attributes

    out = tmp_path / "cf.h5"
    assert cli_main(["run", "--smoke", "--quiet", "--out", str(out)]) == 0
    assert missing_cf_attributes(out) == []
    with xr.open_dataset(out, engine="h5netcdf") as ds:
        assert all(ds[d].dtype.kind == "i" for d in ("time", "step", "epoch", "batch"))
        assert list(ds["class"].values) == ["negative", "positive"]
        assert ds.test_label.attrs["flag_meanings"] == "negative positive"
        np.testing.assert_array_equal(ds.test_label.attrs["flag_values"], [0, 1])
