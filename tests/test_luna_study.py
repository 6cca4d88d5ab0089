"""``rieszflow luna``: P1's fast subset (theory numerics with pass criteria), the mini-LRA data
generators, the LRA optimiser pieces, a few-step smoke run of every model type, and the MMD used
by the learned-maps-vs-particles comparison.

Statistical thresholds are stated in standard errors (z = 4 unless said otherwise).
"""
import math

import numpy as np
import pytest

from rieszflow.engine.attention.data import (LISTOPS_TOKENS, listops_value, load_digits_seq, load_rt_bytes,
                                             make_listops)
from rieszflow.engine.attention.optim import WarmupLinear, clip_by_value
from rieszflow.engine.measures import mmd2_weighted
from rieszflow.theory import luna as T


# ----------------------------------------------------------------------------- P1, fast subset
def test_p1_sampling_cos_sin_rate_variance_and_bound():
    """m MSE is flat in m (slope of MSE in [-1.1, -0.9]) and equals the exact variance within
    z = 4 relative standard errors sqrt(2 / T) (Delta ~ Gaussian); the empirical deviation
    probabilities lie below the corrected Cor. 1 bound 2 exp(-m eps^2 / (2 L^2)), L = 2."""
    trials = 2000
    r = T.sampling_error(np.random.default_rng(0), "cos_sin", ms=(4, 16, 64), trials=trials)
    assert -1.1 <= r["slope"] <= -0.9
    assert np.all(np.abs(r["m_mse"] / r["exact_var"] - 1) < 4 * math.sqrt(2 / trials))
    assert np.all(r["m_mse"] <= r["L"] ** 2)
    assert np.all(r["p_exceed"] <= r["bound"])


def test_p1_sampling_sigmoid_mlp_rate_and_bound():
    r = T.sampling_error(np.random.default_rng(1), "sigmoid", ms=(4, 16, 64), trials=1000, ref_m=200_000)
    assert -1.15 <= r["slope"] <= -0.85
    assert np.isfinite(r["L"]) and np.all(r["m_mse"] <= r["L"] ** 2)
    assert np.all(r["p_exceed"] <= r["bound"])


def test_p1_parametrisation_error_falls_with_width_and_bound_holds():
    r = T.parametrisation_error(np.random.default_rng(2), hiddens=(4, 64), m=4000)
    assert r["sup_err"][-1] < 0.1 * r["sup_err"][0]
    assert np.all(r["bound_holds"])


def test_p1_truncation_within_chi_tail():
    r = T.truncation_error(np.random.default_rng(3), m=100_000)
    assert np.all(r["error"] <= r["tail"] + 4 * r["se"])


def test_p1_rademacher_slope_and_bound():
    r = T.rademacher_slope(np.random.default_rng(4), ns=(64, 256, 1024, 4096), draws=100)
    assert abs(r["slope"] + 0.5) <= 0.05
    assert np.all(r["rademacher"] <= r["bound"])


def test_p1_gram_psd_every_variant():
    r = T.gram_min_eigenvalues(np.random.default_rng(5), n=120)
    assert np.all(r["ratio"] >= -1e-10)


# ----------------------------------------------------------------------------- data
def test_digits_seq_stratified_split():
    tr, va, te = (load_digits_seq(s) for s in ("train", "validation", "test"))
    assert (len(tr), len(va), len(te)) == (1257, 180, 360)
    assert all(len(x) == 64 for x in tr.ids) and min(x.min() for x in tr.ids) >= 1
    assert max(x.max() for x in tr.ids) <= 17
    # stratified: every class's share of the test split is within one example of 36
    counts = np.bincount(te.labels, minlength=10)
    full = np.bincount(np.concatenate([tr.labels, va.labels, te.labels]), minlength=10)
    assert np.all(np.abs(counts - full * 360 / 1797) <= 1)
    d16 = load_digits_seq("validation", size=16)
    assert len(d16.ids[0]) == 256 and max(x.max() for x in d16.ids) <= 256
    with pytest.raises(ValueError, match="size"):
        load_digits_seq("train", size=12)


def test_listops_generator_oracle_and_limits():
    s = make_listops(500, seed=3, max_len=128)
    assert len(s) == 500 and max(len(x) for x in s.ids) <= 128
    for ids, y in zip(s.ids, s.labels):
        toks = [LISTOPS_TOKENS[i] for i in ids]
        assert listops_value(toks) == y
        depth, dmax = 0, 0
        for t in toks:
            depth += t.startswith("[")
            depth -= t == "]"
            dmax = max(dmax, depth)
        assert dmax <= 4
    again = make_listops(500, seed=3)
    assert all(np.array_equal(a, b) for a, b in zip(s.ids, again.ids))
    assert listops_value(["[MED", "1", "2", "9", "4", "]"]) == 3
    assert listops_value(["[SM", "9", "[MAX", "3", "5", "]", "]"]) == 4
    with pytest.raises(ValueError, match="unbalanced"):
        listops_value(["1", "]"])


def test_rt_bytes():
    s = load_rt_bytes("validation", max_len=32)
    assert max(len(x) for x in s.ids) <= 32 and min(x.min() for x in s.ids) >= 1


# ----------------------------------------------------------------------------- optimiser pieces
def test_warmup_linear_schedule_and_clip_by_value():
    f = WarmupLinear(100, 5)
    assert [f(t) for t in (0, 4)] == [0.2, 1.0]
    assert f(5) == 1.0 and f(99) == pytest.approx(1 / 95) and f(100) == 0.0
    g = {"a": np.array([-3.0, 0.5, 2.0])}
    assert clip_by_value(g, 1.0) == 2
    np.testing.assert_array_equal(g["a"], [-1.0, 0.5, 1.0])


# ----------------------------------------------------------------------------- smoke runs
@pytest.mark.parametrize("method", ["softmax", "luna", "luna_nodwc", "performer", "elu", "rff", "hedgehog",
                                    "cosformer", "particles", "fixed"])
def test_every_mini_lra_model_trains_a_few_steps(method):
    from rieszflow.studies.luna.lra import train_run

    r = train_run("digits", method, np.random.default_rng(0), steps=3, eval_every=3,
                  backbone=dict(d_model=16, d_ff=16, n_layers=1))
    assert 0.0 <= r["test_accuracy"] <= 1.0 and math.isfinite(r["train_loss"])


# ----------------------------------------------------------------------------- MMD
def test_mmd2_weighted_oracles():
    x = np.array([[0.0, 0.0]])
    y = np.array([[1.0, 1.0]])
    one = np.ones(1)
    assert mmd2_weighted(x, one, y, one, 1.0) == pytest.approx(2 - 2 * math.exp(-1.0), rel=1e-12)
    pts = np.random.default_rng(0).standard_normal((5, 3))
    w = np.full(5, 0.2)
    assert mmd2_weighted(pts, w, pts, w, 0.7) == 0.0
    with pytest.raises(ValueError, match="non-negative"):
        mmd2_weighted(pts, -w, pts, w, 1.0)


def test_attention_rows_of_linear_and_softmax_layers_are_stochastic():
    from rieszflow.engine.attention.layers import KernelizedLinearAttention, SoftmaxAttention
    from rieszflow.engine.features import make_feature_map
    from rieszflow.studies.luna.study import _mmd_rows, attention_rows

    rng = np.random.default_rng(6)
    x = rng.standard_normal((2, 7, 8))
    mask = np.ones((2, 7), bool)
    mask[1, 5:] = False
    for attn in (KernelizedLinearAttention(8, 2, make_feature_map("luna", 4, 4),
                                           qk="learned", eps=1e-6), SoftmaxAttention(8, 2)):
        params = attn.init_params(rng)
        rows, keys = attention_rows(attn, params, x, mask)
        sums = rows.sum(-1)
        # den / (den + eps): 1 up to eps / den, exactly 0 where phi(q) = 0 (spec 1.10.4)
        assert np.all((sums >= 0) & (sums <= 1 + 1e-12)) and np.mean(sums > 0.99) > 0.5
        if not hasattr(attn, "feature_map"):
            np.testing.assert_allclose(sums, 1.0, atol=1e-12)
        assert np.all(rows[:, 1, :, 5:] == 0)
        assert _mmd_rows(rows, rows, keys, mask)[0] == 0.0


def test_p6_distillation_loss_gradient():
    """Stage 1's soft cross-entropy: hand-written gradient of every map parameter against central
    differences (Hedgehog: smooth, so the check is tight)."""
    from rieszflow.engine.attention.layers import KernelizedLinearAttention
    from rieszflow.engine.features import make_feature_map
    from rieszflow.studies.luna.convert import student_rows_loss

    rng = np.random.default_rng(7)
    attn = KernelizedLinearAttention(8, 2, make_feature_map("hedgehog", 4, 4), qk="learned", eps=1e-6)
    p = attn.init_params(rng)
    x = rng.standard_normal((2, 6, 8))
    mask = np.ones((2, 6), bool)
    mask[1, 4:] = False
    t = rng.random((2, 2, 6, 6)) * mask[None, :, None, :]
    t /= t.sum(-1, keepdims=True)
    _, g, rows = student_rows_loss(attn, p, x, mask, t)
    assert np.allclose(rows.sum(-1), 1.0, atol=1e-5)
    for name in g:
        a = p[name].reshape(-1)
        for j in range(min(a.size, 6)):
            old = a[j]
            a[j] = old + 1e-6
            lp = student_rows_loss(attn, p, x, mask, t)[0]
            a[j] = old - 1e-6
            lm = student_rows_loss(attn, p, x, mask, t)[0]
            a[j] = old
            num, an = (lp - lm) / 2e-6, g[name].reshape(-1)[j]
            assert abs(num - an) <= 1e-6 * (abs(num) + abs(an)) + 1e-10, name


def test_cli_tiny_p3_sweep_end_to_end(tmp_path, capsys):
    """``rieszflow luna --sweep p3`` in-process at a tiny size: task files, the merged HDF5 (named
    dimensions, long_name and units everywhere) and the printed table; a rerun skips every task."""
    import xarray as xr

    from rieszflow.studies.cli import main as cli_main

    out = tmp_path / "luna"
    args = ["luna", "--sweep", "p3", "--workers", "0", "--quiet", "--no-plots", "--out", str(out),
            "--set", "p3_tasks=digits", "--set", "p3_methods=softmax,luna", "--set", "p3_seeds=1",
            "--set", "digits_steps=2",
            "--set", "eval_every=1"]
    assert cli_main(args) == 0
    printed = capsys.readouterr().out
    assert "## P3" in printed and "| luna |" in printed
    ds = xr.open_dataset(out / "p3" / "p3.h5", engine="h5netcdf")
    assert set(ds["test_accuracy"].dims) == {"method", "task", "trial"}
    for v in ds.variables:
        if v not in ds.dims:
            assert {"long_name", "units"} <= set(ds[v].attrs), v
    ds.close()
    assert cli_main(args) == 0
    assert (out / "report.md").is_file()


def test_cli_dead_init_sweep_reports_the_rate_with_its_se(tmp_path, capsys):
    """``rieszflow luna --sweep dead_init`` at 3 draws: one task per draw of the initialisation, the
    merged flags (layer, channel) and the printed rate; the per-draw counts are recomputed here."""
    import xarray as xr

    from rieszflow.studies.cli import main as cli_main

    out = tmp_path / "dead"
    args = ["luna", "--sweep", "dead_init", "--workers", "0", "--quiet", "--no-plots", "--out", str(out),
            "--set", "dead_draws=3"]
    assert cli_main(args) == 0
    printed = capsys.readouterr().out
    with xr.open_dataset(out / "dead_init" / "dead_init.h5", engine="h5netcdf") as ds:
        assert list(ds["method"].values) == ["luna"]
        dead = ds["dead"].transpose("trial", "layer", "channel", ...).values.reshape(3, 2, 8)
        assert {"long_name", "units"} <= set(ds["dead"].attrs)
        ur = ds["u_range"].transpose("trial", "layer", "end", ...).values.reshape(3, 2, 2)
        lo, hi = ur[..., 0], ur[..., 1]
        assert np.all(lo < 0) and np.all(hi > 0)
    per_draw = dead.reshape(3, -1).sum(axis=1)
    assert f"mean {per_draw.mean():.2f} +- {per_draw.std(ddof=1) / np.sqrt(3):.2f} (SE)" in printed
    assert "Observed in P7's single draw: 7 of 16" in printed
