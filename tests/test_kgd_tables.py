"""Acceptance tests AT-15..AT-19 of docs/specs/paper003_kgd.md: Tables 3-6 as sweeps (reduced reps).

Thresholds: AT-15 |sim - population| <= max(4 SE, 0.1 |population|) (z = 4); AT-17 slope -0.50 +- 0.05
and the m = 1024 discrepancy within 5 % of the exact floor; AT-18 the paired sign and a 4-SE
regression against the spec's seed-independent means.
"""
import math

import numpy as np
import pytest

from rieszflow.theory.kgd import spectral as sp
from rieszflow.studies.kgd import study as S
from rieszflow.studies.kgd import verdicts as V
from rieszflow.studies.sweep import open_sweep, run_sweep


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory):
    """The CI sizes of the spec: 30 KRR repetitions (quadratic d = 8, dipole d = 32), 20 attention
    realisations per m, 20 sequence runs; every task through the sweep layer, in-process."""
    out = tmp_path_factory.mktemp("kgd")
    cfg = S.KgdConfig(krr_ds=(8,), dipole_ds=(32,), krr_reps=30)
    merged = {}
    for spec in S.specs(cfg):
        summary = run_sweep(spec, out / spec.name, workers=0, progress=False, log=None)
        assert summary.failed == 0
        merged[spec.name] = open_sweep(out / spec.name)
    return cfg, merged


def test_at15_krr_matches_population_theory(sweeps):
    cfg, merged = sweeps
    for name, target, d, pop_ref in (("krr_dipole", "dipole", 32, -0.0837),
                                      ("krr_quadratic", "quadratic", 8, -0.0214)):
        row = [r for r in S.krr_summary(merged[name], target, "A") if r["lam"] == 0.1][0]
        assert row["d"] == d and row["n"] == 30
        assert abs(row["population"] - pop_ref) < 5e-5
        assert abs(row["mean"] - row["population"]) <= max(4 * row["se"], 0.1 * abs(row["population"]))


def test_at16_thm61_bound_holds_in_convention_a(sweeps):
    cfg, merged = sweeps
    rows = S.krr_summary(merged["krr_quadratic"], "quadratic", "A") + \
        S.krr_summary(merged["krr_dipole"], "dipole", "A")
    assert len(rows) == len(cfg.lams) + len(cfg.dipole_lams)
    for r in rows:
        assert abs(r["mean"]) <= r["bound"]
        assert math.isclose(r["bound"], 2 * 1.1 * sp.kgd_closed_form(r["d"], "P") / r["lam"])


def test_at17_attention_rf_noise_slope_and_floor(sweeps):
    cfg, merged = sweeps
    rows, slope = S.attention_summary(merged["attention"])
    assert [r["m"] for r in rows] == [64, 128, 256, 512, 1024]
    assert abs(slope + 0.5) <= 0.05
    last = rows[-1]
    assert abs(last["delta_same"][0] / last["floor"] - 1) <= 0.05
    # the floor is set by K_soft - K_GS; the paper's K_ind would give a floor ~6x smaller
    Q, K, V = S._attention_data(S.task_config(cfg))
    t = Q @ K.T
    ind_floor = np.linalg.norm((sp.kernel_ind_paper(t, 32) - sp.kernel_gs(t, 32)) @ V) / (100 * np.linalg.norm(V))
    assert ind_floor < 0.3 * last["floor"]


def test_at18_sequence_task_ranks_ind_first(sweeps):
    cfg, merged = sweeps
    s = S.sequence_summary(merged["sequence"])
    a = s["A"]
    assert a["gap"][0] < 0                                  # MSE(Ind) <= MSE(GS) on average (conv A)
    base = s["mean_baseline"]
    assert abs(base[0] - 0.0421) <= 4 * base[2]             # train-mean baseline ~ 0.042
    assert abs(a["ind"][0] - 0.0384) <= 4 * a["ind"][2]     # spec re-run, +-4 SE
    assert abs(a["gs"][0] - 0.0418) <= 4 * a["gs"][2]
    assert s["oracle"][0] < 0.01


def test_at19_paper_number_guards():
    # Table 3: bound = 2.2 x KGD / lam and ratio = gap / bound, as printed (2 significant figures)
    for lam, (bound, ratio, printed) in S.paper_table3_ratios().items():
        assert float(f"{bound:.2g}") == float(f"{S.PAPER_TABLE3[lam][2]:.2g}")
        assert float(f"{ratio:.2g}") == printed
    # Table 4: the printed ratio matches none of gap/(KGD/lam), gap/(2.2 KGD/lam), gap/KGD (10 %)
    for d, (printed, *readings) in S.paper_table4_ratio_check().items():
        assert all(abs(x / printed - 1) > 0.1 for x in readings)
    # ... and its d = 32 entry contradicts Table 3's ratio for the same configuration
    assert abs(S.PAPER_TABLE4[32][3] / S.PAPER_TABLE3[0.1][3] - 1) > 1


def test_verdicts_are_computed_from_the_measurements(sweeps):
    cfg, merged = sweeps
    rows = {c: v for c, _, v in V.verdicts(merged, cfg)}
    assert rows["sec. 8.2 dipole gap +0.028 (d=32, lam=0.1)"].startswith("not reproduced")
    assert rows["Table 5 attention discrepancy ~ C/sqrt(m)"].startswith("not reproduced")
    assert rows["Table 6 ranking (GS better)"].startswith("not reproduced")
    assert rows["Thm 6.1 bound |gap| <= 2(|f|+s) KGD/lam (conv A)"].startswith("holds")
    # the labels follow the data: a fabricated sweep with the paper's dipole gap is 'reproduced'
    ds = merged["krr_dipole"].copy(deep=True)
    r = ds["risk"].values
    sel = (ds["convention"].values == "A")
    r[..., 0, sel, :] = r[..., 1, sel, :] + S.PAPER_DIPOLE[0]
    rows2 = {c: v for c, _, v in V.verdicts({"krr_dipole": ds}, cfg)}
    assert rows2["sec. 8.2 dipole gap +0.028 (d=32, lam=0.1)"].startswith("reproduced (d=32: z = ")
    # Table 6 on fabricated runs: each branch of the SE-based label
    seq = merged["sequence"]
    conv_a = seq["convention"].values == "A"
    ind = list(seq["kernel"].values).index("ind")
    gs = list(seq["kernel"].values).index("gs")

    def table6(shift, jitter):
        ds = seq.copy(deep=True)
        m = ds["mse"]
        k_ax = m.dims.index("kernel")
        v = np.moveaxis(m.values, k_ax, 0)
        noise = jitter * np.random.default_rng(5).standard_normal(v[gs].shape)
        v[ind] = v[gs] + shift + noise
        ds["mse"] = m.copy(data=np.moveaxis(v, 0, k_ax))
        label = {c: l for c, _, l in V.verdicts({"sequence": ds}, cfg)}["Table 6 ranking (GS better)"]
        return label, S.sequence_summary(ds)["A"]["gap"]
    assert conv_a.any()
    lab, gap = table6(+0.01, 1e-3)                          # GS better by 0.01, SE ~ 2e-4: z ~ +45
    assert lab.startswith("reproduced") and gap[0] / gap[2] > V.Z_CRIT
    lab, gap = table6(-0.01, 1e-3)
    assert lab.startswith("not reproduced (reversed: Ind better") and gap[0] / gap[2] < -V.Z_CRIT
    lab, gap = table6(-1e-5, 1e-3)                          # |z| ~ 0.05: the sign is not resolved
    assert lab.startswith("inconclusive (Ind better on average") and abs(gap[0] / gap[2]) <= V.Z_CRIT


@pytest.mark.parametrize("measured, se, printed, label, kind", [
    (0.030, 0.001, 0.028, "reproduced", ""),            # z = +2 from the printed value, z0 = 30
    (-0.080, 0.001, 0.028, "not reproduced", "reversed"),  # z = -108, sign resolved and opposite
    (0.100, 0.001, 0.028, "not reproduced", "different"),  # z = +72, same sign
    (-0.002, 0.001, 0.028, "not reproduced", "different"),  # z = -30, sign not resolved (z0 = -2)
    (0.001, 0.010, 0.028, "inconclusive", ""),          # z = -2.7: neither printed nor 0 excluded
    (0.010, 0.001, None, "reproduced", ""),             # sign claim, z0 = +10
    (-0.010, 0.001, None, "not reproduced", "reversed"),
    (-0.0019, 0.0012, None, "inconclusive", ""),        # the review's Table 6 example, z0 = -1.6
])
def test_judge_labels_by_standard_errors(measured, se, printed, label, kind):
    got = V.judge(measured, se, printed)
    assert got[:2] == (label, kind)
    assert got[2] == pytest.approx((measured - (printed or 0.0)) / se)
    with pytest.raises(ValueError, match="se="):
        V.judge(measured, 0.0, printed)


def test_verdict_reasons_are_built_from_the_data():
    """Each combined label names the measured z values and where the sign is reversed."""
    res = [("lam=0.1", V.judge(-0.08, 0.001, 0.028)), ("lam=1", V.judge(0.029, 0.001, 0.028))]
    text = V._label(res, "z test")
    assert text.startswith("not reproduced (reversed at lam=0.1 ")
    assert "lam=0.1: z = -108.0" in text and "lam=1: z = +1.0" in text and "lam=1 " not in text.split(";")[0]
    assert V._label([("d=8", V.judge(0.03, 0.001, 0.028))], "z").startswith("reproduced (d=8: z = +2.0")
    assert V._label([("d=8", V.judge(0.001, 0.01, 0.028))], "z").startswith("inconclusive (")


def test_config_rejects_bad_values():
    with pytest.raises(ValueError, match="variant"):
        S.KgdConfig(variant="X")
    with pytest.raises(ValueError, match="unknown"):
        S.KgdConfig.from_dict({"no_such": 1})
    with pytest.raises(ValueError, match="lams"):
        S.KgdConfig(lams=(0.1, 0.1))
    with pytest.raises(ValueError, match="target"):
        S.krr_risks(8, "cubic", (0.1,), np.random.default_rng(0))


def test_rounding_sd_is_the_uniform_law_on_half_a_last_digit():
    for k in (0, 1, 3, 6):
        assert V.rounding_sd(k) ** 2 == pytest.approx((10.0 ** -k) ** 2 / 12, rel=1e-12)
    # a seeded check of the law itself: rounding uniform values to 3 decimals
    x = np.random.default_rng(3).uniform(0, 1, 200_000)
    err = np.round(x, 3) - x
    sd = err.std()
    assert abs(sd - V.rounding_sd(3)) < 4 * sd / math.sqrt(2 * x.size)
    with pytest.raises(ValueError, match="decimals"):
        V.rounding_sd(-1)


def test_best_target_gap_is_the_largest_degree_gap_and_at_most_one():
    d, kgd = 32, sp.kgd_closed_form(32, "P")
    for lam in (1.0, 0.1, 1e-3, 1e-5):
        g, ell = S.best_target_gap(d, lam)
        per = [abs(S.population_gap(d, l, lam)) for l in range(0, 30)]
        assert g == pytest.approx(max(per), rel=1e-12) and 0 <= g <= 1
        assert abs(S.population_gap(d, ell, lam)) == pytest.approx(g, rel=1e-12)
    # the dipole at the paper's lam = 0.1 satisfies the bound with room: |gap|/(KGD/lam) = 0.33 > 0.07
    assert abs(S.population_gap(d, 1, 0.1)) / (kgd / 0.1) == pytest.approx(0.3255, abs=1e-3)
    # below lam = c KGD no unit target can meet |gap| >= c KGD / lam, since |gap| <= 1
    lam = 0.5 * S.PAPER_C63 * kgd
    assert S.best_target_gap(d, lam)[0] < S.PAPER_C63 * kgd / lam
    with pytest.raises(ValueError, match="lam"):
        S.best_target_gap(d, 0.0)


def test_thm63_is_judged_along_lam_to_zero(sweeps):
    cfg, merged = sweeps
    rows = V.thm63_rows(merged["krr_dipole"], "A", cfg.variant, cfg.noise)
    assert [r["lam"] for r in rows] == sorted(cfg.dipole_lams, reverse=True)
    by = {r["lam"]: r for r in rows}
    assert by[0.1]["status"] == "holds" and by[0.1]["ratio"] > 0.25      # measured 0.33 > c = 0.07
    assert by[1e-4]["status"] == "fails"                                  # measured ratio << c
    assert all(r["best_ratio"] < S.PAPER_C63 for r in rows if r["lam"] < S.PAPER_C63 * r["kgd"])
    label = {c: v for c, _, v in V.verdicts(merged, cfg)}
    key = "Thm 6.3 |gap| >= c KGD/lam as lam -> 0 (dipole, d=32)"
    assert label[key].startswith("false as stated (fails as lam -> 0)")
    assert "1e-04" in label[key] or "0.0001" in label[key]
    # the label follows the data: gaps that meet the bound at every lam give 'holds'
    ds = merged["krr_dipole"].copy(deep=True)
    lam = ds["lam"].values
    kgd = sp.kgd_closed_form(32, "P")
    ind = list(ds["kernel"].values).index("ind")
    gs = list(ds["kernel"].values).index("gs")
    r = ds["risk"]
    v = np.moveaxis(r.values, [r.dims.index("kernel"), r.dims.index("lam")], [0, -1]).copy()
    v[ind] = v[gs] + 2 * S.PAPER_C63 * kgd / lam
    ds["risk"] = r.copy(data=np.moveaxis(v, [0, -1], [r.dims.index("kernel"), r.dims.index("lam")]))
    label2 = {c: v for c, _, v in V.verdicts({"krr_dipole": ds}, cfg)}
    assert label2[key].startswith("holds at every lam measured")


def test_table5_z_carries_the_rounding_of_the_printed_values(sweeps):
    cfg, merged = sweeps
    rows, _ = S.attention_summary(merged["attention"])
    r = rows[0]
    z = (r["delta_same"][0] - S.PAPER_TABLE5[r["m"]][0]) / math.hypot(r["delta_same"][2], V.rounding_sd(3))
    label = {c: v for c, _, v in V.verdicts(merged, cfg)}["Table 5 attention discrepancy ~ C/sqrt(m)"]
    assert f"m={r['m']}: z = {z:+.1f}" in label
    assert "rounding SD 2.9e-04" in label
    # the rounding SD is what keeps |z| below the exact-value reading
    assert abs(z) < abs((r["delta_same"][0] - S.PAPER_TABLE5[r["m"]][0]) / r["delta_same"][2])
