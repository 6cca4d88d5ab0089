"""The one home of empirical measures and W1 (rieszflow.engine.measures): closed forms and agreement
between its exact methods."""
import math

import numpy as np
import pytest

from rieszflow.engine.measures import (
    AtomicMeasure1D,
    CellMeasure1D,
    EmpiricalMeasure,
    empirical_measure,
    ground_cost,
    resolve_w1_method,
    wasserstein1,
    wasserstein1_1d,
    wasserstein1_points,
)


def test_exact_zero_on_equal_clouds():
    """The ground cost is evaluated directly: a cloud against itself (any order, duplicated) costs 0
    exactly, where the |a|^2 + |b|^2 - 2ab expansion leaves ~1e-8."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((200, 5)) * 30.0
    assert np.all(np.diag(ground_cost(x, x)) == 0.0)
    assert wasserstein1(x, x[rng.permutation(200)]) == 0.0
    assert wasserstein1(x, np.vstack([x, x])) == 0.0
    assert wasserstein1_points(x, None, x, None) == 0.0


def test_translation_closed_form_both_metrics():
    """W1(mu, mu + v) = |v| for any metric norm (the translation coupling is optimal)."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((120, 3))
    v = np.array([0.3, -0.4, 1.2])
    assert wasserstein1(x, x + v, metric="l2") == pytest.approx(np.linalg.norm(v), rel=1e-12)
    assert wasserstein1(x, x + v, metric="l1") == pytest.approx(np.abs(v).sum(), rel=1e-12)


def test_one_dimensional_paths_agree():
    """In 1-D the CDF formula (wasserstein1 and wasserstein1_1d) equals network-simplex transport."""
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal(70), rng.standard_normal(90) + 0.4
    wa, wb = rng.random(70), rng.random(90)
    wa, wb = wa / wa.sum(), wb / wb.sum()
    cdf = wasserstein1(empirical_measure(a[:, None], wa), empirical_measure(b[:, None], wb))
    emd = wasserstein1_points(a[:, None], wa, b[:, None], wb)
    one_d = wasserstein1_1d(AtomicMeasure1D(a, wa), AtomicMeasure1D(b, wb))
    assert cdf == pytest.approx(emd, rel=1e-12) and one_d == pytest.approx(emd, rel=1e-12)


def test_atom_against_uniform_cell_density():
    """W1(delta_0, U[0, 1]) = 1/2 exactly, with the density on 4 cells."""
    dens = CellMeasure1D(np.linspace(0.0, 1.0, 5), np.full(4, 0.25))
    assert wasserstein1_1d(AtomicMeasure1D(np.array([0.0])), dens) == pytest.approx(0.5, abs=1e-15)


def test_sliced_is_a_lower_bound_and_auto_switches():
    """Sliced W1 of a translate has mean |v| E|theta_1| over uniform directions (4 SE), and never
    exceeds the exact W1; "auto" goes sliced above max_exact."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((100, 3))
    v = np.array([0.0, 0.0, 2.0])
    s = wasserstein1(x, x + v, method="sliced", n_projections=4000, rng=np.random.default_rng(4))
    mean_abs = math.gamma(1.5) / (math.sqrt(math.pi) * math.gamma(2.0))   # E|theta_1| in d = 3: 1/2
    sd = 2.0 * math.sqrt(1 / 3 - mean_abs ** 2)
    assert abs(s - 2.0 * mean_abs) <= 4 * sd / math.sqrt(4000)
    assert s <= wasserstein1(x, x + v) + 1e-12
    assert resolve_w1_method(x, x, "auto", max_exact=100) == "sliced"
    assert resolve_w1_method(x, x, "auto") == "exact"


def test_bad_input_names_the_parameter():
    x = np.zeros((3, 2))
    with pytest.raises(ValueError, match="metric"):
        wasserstein1(x, x, metric="l3")
    with pytest.raises(ValueError, match="method"):
        wasserstein1(x, x, method="sinkhorn")
    with pytest.raises(ValueError, match="different dimensions"):
        wasserstein1(x, np.zeros((3, 3)))
    with pytest.raises(ValueError, match="mu: points contains NaN"):
        wasserstein1(np.full((2, 2), np.nan), x)
    with pytest.raises(ValueError, match="sum to 1"):
        EmpiricalMeasure(x, np.full(3, 0.5))


def test_non_convergence_raises():
    """3 network-simplex iterations cannot solve 60 x 60: an error, not a non-optimal value."""
    import warnings

    rng = np.random.default_rng(31)
    x, y = rng.standard_normal((60, 3)), rng.standard_normal((60, 3)) + 0.5
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        with pytest.raises(RuntimeError, match="did not converge"):
            wasserstein1(x, y, num_itermax=3)


def test_mmd2_weighted_refuses_non_finite_input_and_bad_bandwidth():
    from rieszflow.engine.measures import mmd2_weighted

    x, w = np.zeros((3, 2)), np.full(3, 1 / 3)
    bad = x.copy()
    bad[1, 0] = np.nan
    with pytest.raises(ValueError, match="x has non-finite"):
        mmd2_weighted(bad, w, x, w, 1.0)
    with pytest.raises(ValueError, match="b has non-finite"):
        mmd2_weighted(x, w, x, np.array([np.nan, 0.5, 0.5]), 1.0)
    with pytest.raises(TypeError, match="bandwidth"):
        mmd2_weighted(x, w, x, w, "wide")
    for bw in (0.0, np.inf):
        with pytest.raises(ValueError, match="bandwidth"):
            mmd2_weighted(x, w, x, w, bw)
