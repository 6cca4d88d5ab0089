"""Tests of the ``attention-theory`` study: config strictness, the spec's audit rows that need
the study's machinery (T15 reduced, T18, T19), the Prop. 26 counterexample, and a CLI smoke run
that writes a readable HDF5 file. Everything is seeded and deterministic.
"""
from __future__ import annotations

import argparse
import json
import math

import numpy as np
import pytest

from rieszflow.engine.space import Cube
from rieszflow.theory import (DotProductKernel, LinearLookup, cor30_constant,
                                      thm23_bound)
from rieszflow.engine.storage import open_run
from rieszflow.studies.attention_theory import cli
from rieszflow.studies.attention_theory.config import AttentionTheoryConfig
from rieszflow.studies.attention_theory.study import KIND
from rieszflow.studies.attention_theory.experiments import (
    GBoxInstance,
    adversarial_local_lipschitz,
    cor30_family,
    cor30_particle_ratio,
    cor30_two_atom_ratio_decimal,
    cor30_two_atom_ratio_jacobian,
    fixed_point_collapse,
)

TINY = {"n_component_instances": 6, "n_projection_pairs": 5, "n_adversarial_instances": 1,
        "adversarial_restarts": 1, "adversarial_maxfev": 40, "n_query_instances": 2,
        "query_pairs": 10, "n_lemma31_instances": 3, "cor30_particle_sizes": [20, 50],
        "cor30_log_sizes": [10, 40], "fixed_point_layers": 8, "fixed_point_tokens": 5}


# ----------------------------------------------------------------------------------------------
# config
# ----------------------------------------------------------------------------------------------
def test_config_is_strict_and_validated():
    with pytest.raises(ValueError,
                       match=r"unknown attention-theory config key\(s\) \['n_instances'\]"):
        AttentionTheoryConfig.from_mapping({"n_instances": 3})
    with pytest.raises(ValueError, match="allowed keys: seed, n_component_instances"):
        AttentionTheoryConfig.from_mapping({"typo": 1})
    with pytest.raises(ValueError, match="adversarial_restarts must be >= 1, got 0"):
        AttentionTheoryConfig(adversarial_restarts=0)
    with pytest.raises(TypeError, match="query_pairs must be an integer, got 2.5"):
        AttentionTheoryConfig(query_pairs=2.5)
    with pytest.raises(ValueError, match="cor30_particle_sizes must be"):
        AttentionTheoryConfig(cor30_particle_sizes=(2,))
    with pytest.raises(ValueError, match="fixed_point_betas must be"):
        AttentionTheoryConfig(fixed_point_betas=(-1.0,))
    with pytest.raises(ValueError, match="seed must be an integer >= 0"):
        AttentionTheoryConfig(seed=-3)
    with pytest.raises(TypeError, match="cor30_log_sizes must be a list or tuple"):
        AttentionTheoryConfig(cor30_log_sizes="10,20")
    with pytest.raises(dataclasses_frozen_error()):
        AttentionTheoryConfig().seed = 3
    q = AttentionTheoryConfig.quick(seed=4)
    assert q.seed == 4
    assert q.n_adversarial_instances < AttentionTheoryConfig().n_adversarial_instances
    assert AttentionTheoryConfig.from_mapping(q.to_dict()) == q


def dataclasses_frozen_error():
    import dataclasses

    return dataclasses.FrozenInstanceError


# ----------------------------------------------------------------------------------------------
# audits that use the study's machinery
# ----------------------------------------------------------------------------------------------
def test_thm23_adversarial_search_reduced():
    """T15 (AUDIT, reduced to 3 instances): the Nelder-Mead local-Lipschitz search, verified by a
    real W1 ratio, never exceeds the corrected Thm. 23 bound, and beats the printed bound at small
    beta (there the map is ~ mu -> delta_{W mean(mu)} and tau(A) ~ K_l >> printed bound)."""
    rng = np.random.default_rng(15)
    printed_fail = 0
    for beta in (1e-3, 0.05, 1.0):
        d, n = 2, 4
        A = rng.standard_normal((d, d)) / math.sqrt(d)
        W = rng.standard_normal((d, d))
        W /= np.abs(W).sum(axis=1).max()
        inst = GBoxInstance(Cube(1.0, d), A, W, beta, n)
        res = adversarial_local_lipschitz(inst, rng, restarts=2, maxfev=400)
        bound = thm23_bound(inst.kernel.constants(inst.domain), inst.k_ell, d)
        assert res["w1_ratio"] <= bound.corrected * (1 + 1e-9)
        assert res["w1_ratio"] == pytest.approx(res["jacobian_ratio"], rel=1e-3)
        printed_fail += res["w1_ratio"] > bound.paper
    assert printed_fail >= 1


def test_cor30_particle_family_tracks_log_growth():
    """T18 (AUDIT): with N real particles the W1 ratio is within 3 % of (1 + ln(N-1))/2 and below
    C30 for N in {100, 1000, 3000} (seen 2.880/2.803, 3.966/3.954, 4.508/4.503)."""
    for n in (100, 1000, 3000):
        r = cor30_particle_ratio(n)
        pred = (1 + math.log(n - 1)) / 2
        assert abs(r / pred - 1) <= 0.03
        assert r >= pred                       # the cluster contributes a positive O(ln N / N)
        assert r <= cor30_constant(n, 1, 1.0)


def test_cor30_two_atom_family_exceeds_printed_constant():
    """T19 (AUDIT): the weighted two-atom family at 60 digits gives (1 + ln N)/2 +- 1e-6 for
    ln N in {20, 36, 40, 60}; it exceeds C30 from ln N = 36 on (20.5 > 18.875 at 40). The float64
    Jacobian (h -> 0 limit) agrees."""
    for L in (20.0, 36.0, 40.0, 60.0):
        r = cor30_two_atom_ratio_decimal(L, digits=60)
        assert r == pytest.approx((1 + L) / 2, abs=1e-6)
        assert cor30_two_atom_ratio_jacobian(L) == pytest.approx(r, abs=1e-6)
        if L >= 36:
            assert r > cor30_constant(math.exp(L), 1, 1.0)
        else:
            assert r < cor30_constant(math.exp(L), 1, 1.0)


def test_cor30_fit_recovers_half_log_slope():
    """The fitted growth is ratio = a + b ln(N-1) with b = 1/2 (not sqrt(ln N)); the printed C30
    is overtaken at ln N ~ 35.5."""
    fam = cor30_family((100, 300), (10.0, 20.0, 40.0, 60.0), digits=50)
    assert fam["slope"] == pytest.approx(0.5, abs=5e-3)
    assert fam["rms_log_fit"] < 0.1 < fam["rms_sqrt_fit"]
    assert 35.0 < fam["crossing_log_n"] < 36.0


def test_prop26_cases_collapse_and_rotation_counterexample():
    """Spec 5.2: every collapse case reaches delta_{x*} at a per-layer rate <= kappa = 0.5 and two
    inputs share the limit; the rotation case has printed tau < 1 yet W1 between two Dirac
    trajectories stays constant (ratio 1), so no contraction to a fixed point takes place."""
    fp = fixed_point_collapse(np.random.default_rng(26), (0.1, 30.0), n_layers=25, n_tokens=8)
    for c in ("collapse_beta0.1", "collapse_beta30"):
        assert fp[c]["max_step_ratio"] <= 0.5
        assert fp[c]["w1_to_fixed_point"][-1] <= 1e-10
        assert fp[c]["limit_gap"] <= 1e-12
    rot = fp["rotation_dirac"]
    assert rot["paper_tau"] < 1 <= rot["corrected_tau"]
    w = rot["w1_between_inputs"]
    assert np.allclose(w, w[0], rtol=1e-12, atol=0)
    assert fp["rotation_tokens"]["w1_to_fixed_point"][-1] > 0.1
    assert fp["rotation_tokens"]["period4_gap"] <= 1e-12
    kern = DotProductKernel(np.eye(2), 1e-3)
    k_rot = LinearLookup([[0, 1], [-1, 0]]).lipschitz()
    assert thm23_bound(kern.constants(Cube(1.0, 2)), k_rot, 2).paper == pytest.approx(rot["paper_tau"])


# ----------------------------------------------------------------------------------------------
# CLI
# ----------------------------------------------------------------------------------------------
def _parser():
    p = argparse.ArgumentParser(prog="rieszflow")
    cli.register(p.add_subparsers(dest="command"))
    return p


def test_cli_smoke_writes_readable_hdf5(tmp_path, capsys):
    cfg = tmp_path / "tiny.json"
    cfg.write_text(json.dumps(TINY))
    out = tmp_path / "at.h5"
    args = _parser().parse_args(["attention-theory", "--quick", "--config", str(cfg), "--seed", "3",
                                 "--out", str(out)])
    assert args.func(args) == 0
    printed = capsys.readouterr().out
    assert "paper holds?" in printed and "Counterexamples to the paper's constants" in printed
    ds = open_run(out, KIND)
    assert ds.attrs["config_seed"] == 3 and ds.attrs["status"] == "complete"
    assert set(ds.sizes) == {"bound", "trial", "N", "case", "iteration"}
    holds = dict(zip(ds["bound"].values.tolist(), ds["paper_holds"].values.tolist()))
    corrected = dict(zip(ds["bound"].values.tolist(), ds["corrected_holds"].values.tolist()))
    # the audit rows fail for the paper's constants and hold for the corrected ones
    for b in ("prop19ii_dirac", "thm23_dirac", "lemma31_corners", "prop26_rotation",
              "prop26_certificate", "cor30_family"):
        assert holds[b] == 0, b
    for b in ("prop19i_random", "prop20_random", "prop20_translate", "prop21_dirac"):
        assert holds[b] == 1, b
    assert all(v in (1, -1) for v in corrected.values())
    assert corrected["cor30_family"] == -1
    assert ds["cor30_ratio_decimal"].sel(N=math.exp(40.0), method="nearest") > \
        ds["cor30_c30"].sel(N=math.exp(40.0), method="nearest")
    assert ds["max_deviation"].sizes == {"case": 6, "iteration": 9}
    for suffix in ("bounds", "cor30", "fixed_point", "thm23"):
        assert (tmp_path / f"at_{suffix}.png").stat().st_size > 0


def test_cli_bad_inputs(tmp_path, capsys):
    out = tmp_path / "x.h5"
    out.write_bytes(b"")
    args = _parser().parse_args(["attention-theory", "--quick", "--out", str(out), "--quiet"])
    assert args.func(args) == 2
    assert "already exists" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"n_component_instance": 3}))
    args = _parser().parse_args(["attention-theory", "--config", str(bad), "--out",
                                 str(tmp_path / "y.h5")])
    assert args.func(args) == 2
    err = capsys.readouterr().err
    assert "unknown attention-theory config key(s) ['n_component_instance']" in err
    args = _parser().parse_args(["attention-theory", "--out", str(tmp_path / "y.txt")])
    assert args.func(args) == 2
    assert "must end in .h5" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:          # the shared --seed type refuses it at parse time
        _parser().parse_args(["attention-theory", "--seed", "-1", "--out", str(tmp_path / "z.h5")])
    assert e.value.code == 2 and "--seed: '-1' must be >= 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _parser().parse_args(["attention-theory", "--bogus"])
