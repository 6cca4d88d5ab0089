"""Classification metrics: scikit-learn wrappers and the in-house ECE."""
import numpy as np
import pytest

from rieszflow.engine.attention.metrics import METRIC_NAMES, classification_metrics, expected_calibration_error


def test_ece_closed_forms():
    # perfectly calibrated bins: p = 0.25 with 1/4 positives, p = 0.75 with 3/4 positives
    y = np.array([1, 0, 0, 0, 1, 1, 1, 0])
    p = np.array([0.25] * 4 + [0.75] * 4)
    assert expected_calibration_error(y, p) == pytest.approx(0.0)
    # always predicting 0.9 for a 50/50 set: ECE = |0.5 - 0.9| = 0.4
    y = np.array([0, 1] * 50)
    assert expected_calibration_error(y, np.full(100, 0.9)) == pytest.approx(0.4)
    assert expected_calibration_error(y, np.full(100, 0.9), top_label=True) == pytest.approx(0.4)


def test_ece_statistical(rng):
    """p ~ U(0,1), y ~ Bernoulli(p^1.3): ECE -> int |p^1.3 - p| dp = 0.0652 (spec §6).

    With n = 200,000 the binned estimate's standard error is about 0.001 and the binning
    bias with 15 bins is below 0.003; we allow 0.006.
    """
    p = rng.uniform(size=200_000)
    y = (rng.uniform(size=p.size) < p ** 1.3).astype(int)
    assert expected_calibration_error(y, p) == pytest.approx(0.0652, abs=0.006)


def test_metrics_table(rng):
    y = rng.integers(0, 2, 500)
    p = np.clip(0.5 + 0.3 * (2 * y - 1) + 0.2 * rng.standard_normal(500), 0.01, 0.99)
    m = classification_metrics(y, np.stack([1 - p, p], 1))
    assert tuple(m) == METRIC_NAMES
    pred = (p >= 0.5).astype(int)
    assert m["accuracy"] == pytest.approx(np.mean(pred == y))
    assert m["f1_micro"] == pytest.approx(m["accuracy"])
    assert m["brier"] == pytest.approx(np.mean((p - y) ** 2))
    assert m["log_loss"] == pytest.approx(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))
    assert 0.5 < m["roc_auc"] <= 1 and -1 <= m["mcc"] <= 1


def test_metric_errors():
    with pytest.raises(ValueError, match="proba has shape"):
        classification_metrics([0, 1], np.ones((3, 2)) / 2)
    with pytest.raises(ValueError, match="sum to 1"):
        classification_metrics([0, 1], np.ones((2, 2)))
    with pytest.raises(ValueError, match="probabilities"):
        expected_calibration_error([0, 1], [0.5, np.nan])
