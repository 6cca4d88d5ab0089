"""The token-flow study (studies.token_flow): strict config, analysis helpers, CLI smoke run."""
from __future__ import annotations

import argparse
import math

import numpy as np
import pytest

from rieszflow.engine.backend import get_backend
from rieszflow.engine.storage import TrajectoryWriter, open_run
from rieszflow.engine.tokenflow import SoftmaxKernel, projected_euler, sphere_attention_flow
from rieszflow.engine.tokenflow.observables import fraction_clustered_pairs, phase_boundary_time
from rieszflow.studies.token_flow.analysis import cluster_theory, first_crossing, fit_power_law, format_tables
from rieszflow.studies.token_flow.cli import register
from rieszflow.studies.token_flow.config import QUICK_OVERRIDES, TokenFlowConfig
from rieszflow.studies.token_flow.study import _uniform_sphere, phase_boundary

TINY = ["n_tokens=8", "dims=2,3", "betas=1", "n_seeds=2", "t_end=1", "dt=0.1", "n_records=3",
        "wendel_cases=5,3;4,4", "wendel_draws=200", "phase_d=8", "phase_n=4", "phase_batch=2",
        "phase_betas=1,9", "phase_t_end=1", "kernel_n=16", "kernel_m=8", "kernel_t_end=0.4",
        "kernel_dt=0.1", "kernel_records=3", "mf_n=8,16,32", "mf_times=0,0.2", "mf_dt=0.1",
        "mf_seeds=2"]


def _cli(argv):
    parser = argparse.ArgumentParser(prog="rieszflow")
    sub = parser.add_subparsers()
    register(sub)
    args = parser.parse_args(["token-flow", *argv])
    return args.func(args)


def _tiny_args(out):
    args = ["--out", str(out), "--quiet"]
    for s in TINY:
        args += ["--set", s]
    return args


def _main_job_file(path, *, kind="main_job"):
    rng = np.random.default_rng(0)
    cfg = {"feature_map": "favor", "m": 8, "tau": 1.0, "floor": 1e-6, "attention": "linear"}
    with TrajectoryWriter(path, kind, config=cfg) as w:
        for name, size in (("layer", 1), ("head", 2), ("particle", 8), ("coord", 4)):
            w.dimension(name, size, coords=np.arange(size))
        w.dimension("time", None)
        w.variable("omega", ("time", "layer", "head", "particle", "coord"), dtype="f4")
        for t in range(2):
            w.append("time", {"omega": rng.standard_normal((1, 2, 8, 4)).astype(np.float32)}, coord=t)


def test_config_is_strict():
    cfg = TokenFlowConfig()
    assert TokenFlowConfig.from_dict(cfg.to_dict()) == cfg
    assert TokenFlowConfig.quick().n_tokens == QUICK_OVERRIDES["n_tokens"]
    with pytest.raises(ValueError, match=r"unknown token-flow config keys \['n_token'\]"):
        TokenFlowConfig.from_dict({"n_token": 3})
    bad = [({"dims": (1, 3)}, "dims"), ({"betas": (1.0, -2.0)}, "betas"), ({"betas": ()}, "betas"),
           ({"t_end": 1.0, "dt": 0.3}, "multiple of dt"), ({"integrator": "rk4"}, "does not keep tokens"),
           ({"variant": "sinkhorn"}, "variant"), ({"mf_times": (1.0, 0.0)}, "mf_times"),
           ({"n_seeds": True}, "n_seeds"), ({"n_seeds": 0}, "n_seeds"), ({"cluster_eps": float("nan")},
                                                                       "cluster_eps"),
           ({"backend": "jax"}, "backend"), ({"phase_delta": 1.5}, "phase_delta"),
           ({"kernel_features": ("rff",)}, "kernel_features"), ({"mf_n": (8, 8)}, "mf_n"),
           ({"wendel_cases": ((5,),)}, "wendel_cases"), ({"mf_times": (0.0, 0.07)}, "mf_dt")]
    for change, msg in bad:
        with pytest.raises(ValueError, match=msg):
            cfg.replace(**change)


def test_power_law_fit_and_helpers():
    n = np.array([10, 10, 40, 40, 160, 160], dtype=float)
    fit = fit_power_law(n, 3.0 * n ** -0.5)
    assert abs(fit.alpha - 0.5) <= 1e-12 and abs(fit.prefactor - 3.0) <= 1e-12 and fit.alpha_se <= 1e-12
    noisy = 2.0 * n ** -0.3 * np.exp(np.array([0.01, -0.01, 0.02, -0.02, 0.0, 0.01]))
    f2 = fit_power_law(n, noisy)
    assert abs(f2.alpha - 0.3) <= 4 * f2.alpha_se + 1e-3 and f2.alpha_se > 0
    assert math.isnan(fit_power_law([10, 40], [1.0, 0.5]).alpha_se)
    with pytest.raises(ValueError, match="2 distinct sizes"):
        fit_power_law([10, 10], [1.0, 0.9])
    with pytest.raises(ValueError, match="> 0"):
        fit_power_law([10, 40], [1.0, 0.0])
    assert first_crossing([0, 1, 2], [0.1, 0.6, 0.9], 0.5) == 1.0
    assert first_crossing([0, 1, 2], [0.1, 0.2, 0.3], 0.5) == math.inf
    assert cluster_theory(8, 8, 9.0).startswith("1 (d>=n")
    assert cluster_theory(32, 2, 9.0) == "metastable (d=2)"
    assert cluster_theory(32, 2, 0.5) == "1 (beta<=1, d=2)"


def test_cli_smoke_run_writes_readable_hdf5(tmp_path, capsys):
    job = tmp_path / "main.h5"
    _main_job_file(job)
    out = tmp_path / "study.h5"
    assert _cli(_tiny_args(out) + ["--kernel-from", str(job), "--set", "learned_head=1"]) == 0
    text = capsys.readouterr().out
    for header in ("A. Clustering", "B. Wendel", "C. Phase boundary", "D. Softmax flow",
                   "E. Mean field", "fitted W1"):
        assert header in text
    ds = open_run(out, kind="token_flow_study")
    assert ds.attrs["status"] == "complete"
    assert ds["energy"].dims == ("grid_beta", "grid_dim", "seed", "grid_time")
    assert ds["energy"].shape == (1, 2, 2, 3)
    assert np.all(np.diff(ds["energy"].values, axis=-1) >= -1e-12)
    np.testing.assert_allclose(ds["wendel_p"].values, [0.6875, 1.0])
    names = [str(v) for v in ds["kernel"].values]
    assert names[0] == "favor m=8 (fixed)" and any(n.startswith("learned favor L0H1 m=8") for n in names)
    assert ds["kernel_dim"].values.tolist() == [3, 4, 4]
    assert np.all(ds["kernel_w1"].values[:, 0] <= 1e-12)               # same initial tokens
    assert ds["mf_w1_exact"].shape == (3, 2, 2) and np.isfinite(ds["mf_w1_exact"].values).all()
    assert ds["example_x"].dims == ("example_time", "example_token", "example_coord")
    for name in ("clustering", "phase", "kernels", "mean_field", "wendel"):
        assert (tmp_path / f"study_{name}.png").stat().st_size > 1000


def test_cli_errors(tmp_path, capsys):
    out = tmp_path / "s.h5"
    assert _cli(["--out", str(out), "--set", "n_token=3"]) == 2
    assert "unknown config key" in capsys.readouterr().err
    assert _cli(["--out", str(out), "--set", "betas=a,b"]) == 2
    assert "not a valid value" in capsys.readouterr().err
    assert _cli(["--out", str(out), "--set", "dims=1"]) == 2
    assert "dims" in capsys.readouterr().err
    assert _cli(["--out", str(out), "--kernel-from", str(tmp_path / "none.h5")]) == 2
    assert "does not exist" in capsys.readouterr().err
    foreign = tmp_path / "foreign.h5"
    _main_job_file(foreign, kind="token_flow")
    assert _cli(["--out", str(out), "--kernel-from", str(foreign)]) == 2
    assert "kind='token_flow'" in capsys.readouterr().err
    out.write_bytes(b"")
    assert _cli(_tiny_args(out)) == 2
    assert "already exists" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _cli(["--seed", "-1"])
    with pytest.raises(SystemExit):
        _cli(["--backend", "torch"])


def test_format_tables_marks_phase_checks():
    rows = [{"beta": 1.0, "crossing": 5.6, "ode": 5.27, "check": "PASS (|rel.err| <= 0.15)"},
            {"beta": 9.0, "crossing": math.inf, "ode": 178.7, "check": "PASS (no crossing by T)"}]
    text = format_tables({"phase": {"rows": rows, "d": 128, "n": 32, "batch": 64, "dt": 0.1, "delta": 1e-3}})
    assert "5.600" in text and "none" in text and text.count("PASS") == 2


def test_phase_boundary_is_sa_whatever_the_variant():
    """Section C is spec T33, the authors' softmax (SA) protocol: with variant="USA" it must still run
    SA and compare with the SA ODE. (USA at dt = 0.1 without the authors' step rescaling crossed at
    3.2 against its ODE 0.79 at beta = 7: the row would judge the scheme, not the theory.) The
    fractions equal an explicit SA projected-Euler run from the same draws, exactly."""
    cfg = TokenFlowConfig.quick(variant="USA", phase_d=16, phase_n=6, phase_batch=3,
                                phase_betas=(1.0, 3.0), phase_t_end=2.0)
    res = phase_boundary(cfg, get_backend("numpy"), np.random.default_rng(5))
    assert res["variant"] == "SA"
    for row in res["rows"]:
        assert row["ode"] == phase_boundary_time(row["beta"], 6, cfg.phase_delta, "SA")
        assert row["ode"] != phase_boundary_time(row["beta"], 6, cfg.phase_delta, "USA")
    rng = np.random.default_rng(5)
    for ib, beta in enumerate(cfg.phase_betas):
        init, step = projected_euler(sphere_attention_flow(SoftmaxKernel(beta), "SA"), cfg.phase_dt)
        state = init(_uniform_sphere(rng, (3, 6, 16)))
        for s in range(1, 21):
            state = step(state)
            expect = float(fraction_clustered_pairs(state.x, 1.0 - cfg.phase_delta).mean())
            assert res["fraction"][ib, s] == expect
            if expect >= 1.0:
                break
    assert "C. Phase boundary (spec T33): SA" in format_tables({"phase": res})


def test_float32_study_runs(tmp_path, capsys):
    """TokenFlowConfig(dtype="float32") runs the whole (tiny) study: float32 starts pass the sphere check
    (max(1e-8, 64 eps)) that rejected them at 1e-8, and every section finishes."""
    out = tmp_path / "f32.h5"
    assert _cli(_tiny_args(out) + ["--set", "dtype=float32", "--no-plots"]) == 0
    assert "E. Mean field" in capsys.readouterr().out
    ds = open_run(out, kind="token_flow_study")
    assert ds.attrs["status"] == "complete"
    assert np.isfinite(ds["energy"].values).all() and np.isfinite(ds["kernel_w1"].values).all()
    assert np.all(np.diff(ds["energy"].values, axis=-1) >= -1e-6)      # float32 round-off of E_beta
