"""Paper 004's Prop. 28 (Gaussian kernel on E = R^d) on the two-atom Cor. 30 family, in mpmath.

Source: Vuckovic, Baratin, Tachet des Combes, "A Mathematical Theory of Attention",
arXiv:2007.02876, Prop. 28 (section 6.3, appendix D). Building blocks are checked against hand
calculations and against the project's float64 operators and its Cor. 30 decimal check; the verdict
test pins what the 60-digit computation finds under each reading of ||G||_Lip.
"""
import math

import numpy as np
import pytest

mp = pytest.importorskip("mpmath")

from rieszflow.engine.measures import EmpiricalMeasure  # noqa: E402
from rieszflow.studies.attention_theory.cor30 import cor30_two_atom_ratio_decimal  # noqa: E402
from rieszflow.theory import GaussianKernel, cor30_constant, softmatch_measure, wasserstein1  # noqa: E402
from rieszflow.theory.prop28 import (  # noqa: E402
    READINGS, gaussian_lip, gibbs_1d, main, prop28_constant, prop28_limit_ratio,
    prop28_measured_ratio, prop28_table, prop28_threshold, two_atom_family, w1_1d)


@pytest.fixture(scope="module")
def table():
    return prop28_table()                         # ln N = 2..30, 60 digits, checked at 80


# --- building blocks, by hand ---------------------------------------------------------------------

def test_gaussian_lip_closed_forms():
    # sup_t 2 t e^{-t^2} = sqrt(2/e) at t = 1/sqrt(2)
    t = 1 / math.sqrt(2)
    assert float(gaussian_lip("l1")) == pytest.approx(2 * t * math.exp(-t * t), rel=1e-15)
    assert float(gaussian_lip("l1")) == pytest.approx(0.8577638849607068, rel=1e-15)
    assert float(gaussian_lip("l2")) == pytest.approx(2 / math.sqrt(math.e), rel=1e-15)
    assert float(gaussian_lip("max")) == pytest.approx(2 * math.sqrt(2 / math.e), rel=1e-15)


def test_prop28_constant_by_hand_and_against_cor30():
    with mp.workdps(60):
        L = 4 - 1 / (2 * mp.e)                    # sqrt(ln N + 1/(2e)) = 2
        r2e = mp.sqrt(2 / mp.e)
        assert abs(prop28_constant(L, 1, "l1") - (2 * r2e + 4)) < mp.mpf(10) ** -55
        assert abs(prop28_constant(L, 4, "l1") - (4 * r2e + 5)) < mp.mpf(10) ** -55
        assert abs(prop28_constant(L, 1, "l2") - (4 / mp.sqrt(mp.e) + 4)) < mp.mpf(10) ** -55
    # Cor. 30 = 2 tau(Pi) K_l C28 with tau(Pi) = d: the project's constant is the l1 reading
    for n in (10.0, 1e6, 1e13):
        assert 2 * float(prop28_constant(math.log(n))) == pytest.approx(cor30_constant(n, 1, 1.0), rel=1e-14)


def test_gibbs_weights_balanced_at_the_singleton():
    fam = two_atom_family(20)
    (_, a), (_, b) = gibbs_1d(fam["x"], fam["mu"])
    assert abs(a - mp.mpf(1) / 2) < mp.mpf(10) ** -55 and abs(b - mp.mpf(1) / 2) < mp.mpf(10) ** -55
    assert abs(fam["z"] ** 2 - mp.log(fam["n"] - 1)) < mp.mpf(10) ** -55


def test_w1_1d_by_hand():
    assert w1_1d([(0, 1)], [(0, 0.5), (1, 0.5)]) == mp.mpf(1) / 2
    assert w1_1d([(0, 0.25), (2, 0.75)], [(1, 1)]) == 1
    with pytest.raises(ValueError, match="equal mass"):
        w1_1d([(0, 1)], [(0, 0.5)])


def test_measured_ratio_hand_case_n_equals_1_plus_e():
    # N = 1 + e: z = 1, cluster weight p(h) = sigmoid(2h - h^2), W1 = h/2 + (1 - h)(p - 1/2)
    with mp.workdps(60):
        L = mp.log(1 + mp.e)
        h = mp.mpf(1) / 10
        p = 1 / (1 + mp.exp(-(2 * h - h * h)))
        want = (h / 2 + (1 - h) * (p - mp.mpf(1) / 2)) / (h * (1 + 1 / (1 + mp.e)))
        assert abs(prop28_measured_ratio(L, h) - want) < mp.mpf(10) ** -55
        assert abs(prop28_limit_ratio(L) - (1 + mp.e) / (2 + mp.e)) < mp.mpf(10) ** -55


def test_against_project_float64_operators():
    # the same ratio from rieszflow.theory's softmatch_measure and wasserstein1 (float64)
    L, h = 3.0, 1e-3
    fam = two_atom_family(L, h)
    kern = GaussianKernel.from_sigma(1.0)
    mu = EmpiricalMeasure(np.array([[0.0], [float(fam["z"])]]), np.array([float(w) for _, w in fam["mu"]]))
    nu = EmpiricalMeasure(np.array([[h], [float(fam["z"])]]), np.array([float(w) for _, w in fam["nu"]]))
    num = wasserstein1(softmatch_measure(np.array([0.0]), mu, kern), softmatch_measure(np.array([h]), nu, kern))
    ratio = num / (h + wasserstein1(mu, nu))
    assert ratio == pytest.approx(float(prop28_measured_ratio(L, h)), rel=1e-9)


@pytest.mark.parametrize("L", [10, 20, 30])
def test_against_project_cor30_decimal(L):
    # same family: Cor. 30's ratio = |dT_0|/h + (N - 1)|dT_z|/h, Prop. 28's numerator = |dT_0|, so
    # cor30 - (1 + 1/N) prop28 = cluster term, positive and ~ 2 ln N / N
    N = math.exp(L)
    diff = cor30_two_atom_ratio_decimal(L, 60) - (1 + 1 / N) * float(prop28_measured_ratio(L))
    assert 0 < diff <= 3 * L / N


def test_finite_h_matches_limit(table):
    for m, lim in zip(table["measured"], table["limit"]):
        assert abs(m - lim) < mp.mpf(10) ** -15


# --- precision --------------------------------------------------------------------------------------

def test_precision_60_and_80_agree(table):
    assert table["dps"] == 60 and table["check_dps"] == 80
    assert table["max_rel_diff_dps"] < mp.mpf(10) ** -35
    for L in (14, 18, 24):
        a, b = prop28_measured_ratio(L, dps=60), prop28_measured_ratio(L, dps=80)
        assert abs(a - b) / b < mp.mpf(10) ** -35


# --- the verdict ------------------------------------------------------------------------------------

def test_verdict_on_the_grid(table):
    """Violated from ln N = 14 (l1, the paper's convention), 18 (l2), 24 (max); never before."""
    assert [float(L) for L in table["log_n"]] == list(range(2, 31))
    assert {r: float(v) for r, v in table["violated_from"].items()} == {"l1": 14.0, "l2": 18.0, "max": 24.0}
    for r in READINGS:
        rat = [float(x) for x in table["ratio"][r]]
        assert all(b > a for a, b in zip(rat[:-1], rat[1:]))          # increasing in ln N
    got = {r: [round(float(table["ratio"][r][int(L) - 2]), 4) for L in (2, 10, 14, 18, 24, 30)] for r in READINGS}
    assert got == {"l1": [0.2387, 0.8163, 1.0373, 1.2406, 1.5210, 1.7790],
                   "l2": [0.2170, 0.6987, 0.8753, 1.0357, 1.2543, 1.4534],
                   "max": [0.1924, 0.5805, 0.7170, 0.8396, 1.0051, 1.1546]}


@pytest.mark.parametrize("reading,log_n_star,n_min", [
    ("l1", 13.29938244, 596_827), ("l2", 17.08072791, 26_185_802), ("max", 23.80468782, 21_789_364_408)])
def test_threshold_integer_n(reading, log_n_star, n_min):
    t = prop28_threshold(reading)
    assert float(t["log_n_star"]) == pytest.approx(log_n_star, abs=1e-8)
    assert t["n_min"] == n_min
    assert t["margin_at_n_min"] > 0 >= t["margin_below"]


# --- input validation and command line --------------------------------------------------------------

@pytest.mark.parametrize("call,match", [
    (lambda: prop28_measured_ratio(0.5), r"log_n must be > ln 2.*0\.5"),
    (lambda: prop28_measured_ratio("abc"), r"log_n must be a real number.*'abc'"),
    (lambda: prop28_measured_ratio(float("nan")), r"log_n must be finite.*nan"),
    (lambda: prop28_measured_ratio(10, h=0), r"h must satisfy.*got 0"),
    (lambda: prop28_measured_ratio(10, h=100), r"h must satisfy.*got 100"),
    (lambda: prop28_measured_ratio(10, h="1e-40", dps=60), r"h must satisfy 10\^-30"),
    (lambda: prop28_constant(10, reading="fro"), r"reading must be one of 'l1', 'l2', 'max', got 'fro'"),
    (lambda: prop28_constant(10, d=0), r"d must be an integer >= 1.*got 0"),
    (lambda: prop28_constant(10, dps=10), r"dps must be an integer >= 30.*got 10"),
    (lambda: prop28_table([3, 2]), r"log_n_grid must be a non-empty increasing sequence, got \[3, 2\]"),
    (lambda: prop28_table([]), r"log_n_grid must be a non-empty increasing"),
])
def test_bad_input_raises_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_command_line_writes_markdown(tmp_path):
    out = tmp_path / "prop28.md"
    assert main(["--md", str(out)]) == 0
    text = out.read_text()
    assert "arXiv:2007.02876" in text and "60 digits" in text and "80 digits" in text
    assert "smallest violating integer N = 596827" in text
