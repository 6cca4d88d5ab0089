"""Classification metrics of paper 000, App. F.2 ("Evaluation and metrics").

Every metric scikit-learn has is taken from scikit-learn. Expected calibration
error is not in scikit-learn and is computed here, with its definition stated:

ECE (binary, positive class, 15 equal-width bins on [0, 1], L1)
    ECE = sum_b (n_b / n) |mean(y in b) - mean(p in b)|, where p is the
    predicted probability of the positive class and the bins are
    [0, 1/15), [1/15, 2/15), ..., [14/15, 1]. Empty bins contribute 0.

The paper does not state its ECE definition or binning, so its ECE column
cannot be compared number for number with ours.
A top-label variant (confidence max(p, 1-p)) is reported as ``ece_top_label``.
"""
from __future__ import annotations

import numpy as np

__all__ = ["METRIC_NAMES", "classification_metrics", "expected_calibration_error"]

#: Order in which metrics are stored and printed.
METRIC_NAMES = ("accuracy", "f1_micro", "f1_macro", "f1_weighted", "roc_auc", "pr_auc", "mcc",
                "balanced_accuracy", "log_loss", "brier", "ece", "ece_top_label")


def expected_calibration_error(y_true, p_pos, *, n_bins: int = 15, top_label: bool = False) -> float:
    """Expected calibration error with equal-width bins (L1).

    Parameters
    ----------
    y_true : array_like of int, shape (n,)
        Labels in {0, 1}.
    p_pos : array_like of float, shape (n,)
        Predicted probability of class 1, in [0, 1].
    n_bins : int, default 15
        Number of equal-width bins on [0, 1] (on [0.5, 1] when ``top_label``).
    top_label : bool, default False
        If True, bin the confidence max(p, 1 - p) against the accuracy of the
        predicted label instead of p against the frequency of class 1.

    Returns
    -------
    float
        ECE in [0, 1].

    Raises
    ------
    ValueError
        On shape mismatch, probabilities outside [0, 1] or NaN, labels outside
        {0, 1}, or ``n_bins < 1``.

    References
    ----------
    Naeini, Cooper, Hauskrecht (2015); Guo et al. (2017), eq. (3).
    """
    y = np.asarray(y_true)
    p = np.asarray(p_pos, dtype=np.float64)
    if y.shape != p.shape or y.ndim != 1:
        raise ValueError(f"y_true shape {y.shape} and p_pos shape {p.shape} must be equal and 1-D")
    if not np.all(np.isfinite(p)) or p.min(initial=0.0) < 0 or p.max(initial=0.0) > 1:
        raise ValueError("p_pos must be finite probabilities in [0, 1]")
    if not np.all(np.isin(y, (0, 1))):
        raise ValueError("y_true must hold labels in {0, 1}")
    if n_bins < 1:
        raise ValueError(f"n_bins={n_bins} must be >= 1")
    if top_label:
        conf = np.maximum(p, 1 - p)
        hit = ((p >= 0.5).astype(int) == y).astype(np.float64)
        edges = np.linspace(0.5, 1.0, n_bins + 1)
    else:
        conf, hit = p, y.astype(np.float64)
        edges = np.linspace(0.0, 1.0, n_bins + 1)
    b = np.clip(np.searchsorted(edges, conf, side="right") - 1, 0, n_bins - 1)
    count = np.bincount(b, minlength=n_bins)
    s_conf = np.bincount(b, weights=conf, minlength=n_bins)
    s_hit = np.bincount(b, weights=hit, minlength=n_bins)
    nz = count > 0
    return float(np.sum(np.abs(s_hit[nz] - s_conf[nz])) / len(y))


def classification_metrics(y_true, proba) -> dict[str, float]:
    """All test-split metrics of paper 000, Tables 6-8 (binary classification).

    Parameters
    ----------
    y_true : array_like of int, shape (n,)
        Labels in {0, 1}.
    proba : array_like of float, shape (n, 2)
        Predicted class probabilities (rows sum to 1).

    Returns
    -------
    dict of str to float
        Keys :data:`METRIC_NAMES`: accuracy, F1 micro/macro/weighted, ROC-AUC,
        PR-AUC (average precision, step-wise), MCC, balanced accuracy,
        log-loss (natural log), Brier score (mean (p - y)^2 of the positive
        class), ECE and top-label ECE (see :func:`expected_calibration_error`).

    Raises
    ------
    ValueError
        If shapes disagree or ``proba`` is not a valid probability matrix.
    """
    from sklearn import metrics as skm

    y = np.asarray(y_true)
    P = np.asarray(proba, dtype=np.float64)
    if P.ndim != 2 or P.shape != (y.shape[0], 2):
        raise ValueError(f"proba has shape {P.shape}; expected ({y.shape[0]}, 2)")
    if not np.all(np.isfinite(P)) or np.any(P < 0) or not np.allclose(P.sum(1), 1.0, atol=1e-6):
        raise ValueError("proba rows must be finite, non-negative and sum to 1")
    p = P[:, 1]
    pred = (p >= 0.5).astype(int)
    out = {
        "accuracy": skm.accuracy_score(y, pred),
        "f1_micro": skm.f1_score(y, pred, average="micro"),
        "f1_macro": skm.f1_score(y, pred, average="macro"),
        "f1_weighted": skm.f1_score(y, pred, average="weighted"),
        "roc_auc": skm.roc_auc_score(y, p),
        "pr_auc": skm.average_precision_score(y, p),
        "mcc": skm.matthews_corrcoef(y, pred),
        "balanced_accuracy": skm.balanced_accuracy_score(y, pred),
        "log_loss": skm.log_loss(y, P, labels=[0, 1]),
        "brier": skm.brier_score_loss(y, p),
        "ece": expected_calibration_error(y, p),
        "ece_top_label": expected_calibration_error(y, p, top_label=True),
    }
    return {k: float(out[k]) for k in METRIC_NAMES}
