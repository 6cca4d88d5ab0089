"""The data of paper 000, App. F.1.1: a fixed Gaussian design, a nonlinear log-odds, noisy labels.

``X`` (n x p, i.i.d. N(0, 1)), the extra-dimension weights ``w ~ N(0, 0.3^2 I_{p-5})`` and the
70/30 train/test split are fixed by the global seed (42) and ``random_state = 0``; for each
noise level sigma and trial only the logit noise xi ~ N(0, sigma^2) (and the methods' own
randomness) is redrawn.

References
----------
Paper 000 ("Random features as interacting particles"), App. F.1.1 and F.1.5.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from rieszflow.engine._checks import check_int, check_real

__all__ = ["SyntheticData", "log_odds", "make_dataset", "draw_labels", "positive_probability",
           "bayes_accuracy"]


def log_odds(X, w):
    """The log-odds of App. F.1.1.

    ``l(x) = 1.5 sin(pi x_1) + 0.8 x_2^2 - 1.0 x_3 x_4 + 0.5 sin(3 x_5) + 1{p > 5} x_{6:p}^T w``
    (1-based coordinates as in the paper).

    Parameters
    ----------
    X : ndarray, shape (n, p), float64
        Inputs, ``p >= 5``.
    w : ndarray, shape (p - 5,), float64
        Extra-dimension weights (empty when ``p == 5``).

    Returns
    -------
    ndarray, shape (n,), float64

    Raises
    ------
    ValueError
        If ``X`` is not 2-D with ``p >= 5`` columns, ``w`` has another length than ``p - 5``, or
        either holds NaN or inf.

    References
    ----------
    Paper 000, App. F.1.1 (the displayed log-odds).
    """
    X = np.asarray(X, dtype=np.float64)
    w = np.asarray(w, dtype=np.float64).reshape(-1)
    if X.ndim != 2 or X.shape[1] < 5:
        raise ValueError(f"X must have shape (n, p) with p >= 5; got {X.shape}")
    if w.shape != (X.shape[1] - 5,):
        raise ValueError(f"w must have shape (p - 5,) = ({X.shape[1] - 5},); got {w.shape}")
    if not (np.isfinite(X).all() and np.isfinite(w).all()):
        raise ValueError("X and w must be finite")
    x1, x2, x3, x4, x5 = X[:, :5].T
    return (1.5 * np.sin(np.pi * x1) + 0.8 * x2 ** 2 - 1.0 * x3 * x4 + 0.5 * np.sin(3.0 * x5)
            + X[:, 5:] @ w)


@dataclasses.dataclass(frozen=True)
class SyntheticData:
    """The fixed part of the benchmark: design, weights, log-odds and split.

    Parameters
    ----------
    X : ndarray, shape (n, p), float64
        The design, drawn once.
    w : ndarray, shape (p - 5,), float64
        Extra-dimension weights.
    logit : ndarray, shape (n,), float64
        ``log_odds(X, w)``.
    train, test : ndarray of int64
        Row indices of the 70/30 split (``sklearn.model_selection.train_test_split``,
        ``random_state = 0``).
    """

    X: np.ndarray
    w: np.ndarray
    logit: np.ndarray
    train: np.ndarray
    test: np.ndarray


def make_dataset(n: int = 400, p: int = 10, seed: int = 42, test_size: float = 0.3,
                 split_state: int = 0) -> SyntheticData:
    """Draw the fixed design of App. F.1.1.

    ``rng = numpy.random.default_rng(seed)`` draws ``X`` (n x p standard normal) and then
    ``w = 0.3 * standard_normal(p - 5)``; the split is
    ``train_test_split(arange(n), test_size, random_state=split_state)``.

    Parameters
    ----------
    n : int, default 400
        Number of points, ``>= 10``.
    p : int, default 10
        Input dimension, ``>= 5`` (the log-odds uses five coordinates).
    seed : int, default 42
        The global seed of App. F.1.5.
    test_size : float, default 0.3
        Test fraction, in (0, 1).
    split_state : int, default 0
        ``random_state`` of the split.

    Returns
    -------
    SyntheticData

    Raises
    ------
    ValueError
        If ``p < 5``, ``n < 10``, or ``test_size`` is outside (0, 1).
    TypeError
        If ``n``, ``p``, ``seed`` or ``split_state`` is not an integer.

    References
    ----------
    Paper 000, App. F.1.1 and F.1.5.
    """
    from sklearn.model_selection import train_test_split

    n = check_int("n", n, minimum=10)
    p = check_int("p", p, minimum=5)
    seed = check_int("seed", seed, minimum=0)
    split_state = check_int("split_state", split_state, minimum=0)
    test_size = check_real("test_size", test_size, low=0.0, high=1.0, low_open=True, high_open=True)
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, p))
    w = 0.3 * rng.standard_normal(p - 5)
    train, test = train_test_split(np.arange(n), test_size=test_size, random_state=split_state)
    return SyntheticData(X=X, w=w, logit=log_odds(X, w), train=np.sort(train), test=np.sort(test))


def draw_labels(logit, sigma: float, rng: np.random.Generator):
    """Labels ``y_i ~ Bernoulli(sigmoid(l_i + xi_i))`` with ``xi_i ~ N(0, sigma^2)``.

    Parameters
    ----------
    logit : ndarray, shape (n,), float64
        The log-odds ``l(x_i)``.
    sigma : float
        Logit noise standard deviation, ``>= 0``.
    rng : numpy.random.Generator
        Draws ``xi`` (n normals) and then the n uniforms of the Bernoulli draws.

    Returns
    -------
    ndarray, shape (n,), int64
        Labels in {0, 1}.

    Raises
    ------
    ValueError
        If ``sigma`` is negative or not finite.

    References
    ----------
    Paper 000, App. F.1.1 (labels through the logistic link).
    """
    from scipy.special import expit

    sigma = check_real("sigma", sigma, nonnegative=True)
    logit = np.asarray(logit, dtype=np.float64)
    xi = sigma * rng.standard_normal(logit.shape)
    return (rng.random(logit.shape) < expit(logit + xi)).astype(np.int64)


#: Nodes of the two Gauss rules of :func:`positive_probability` (probabilists' Hermite for
#: ``sigma <= 1``, Legendre on (0, 1) for ``sigma > 1``).
_QUADRATURE_NODES = 200


def positive_probability(logit, sigma: float):
    """``q_i = P(y_i = 1 | x_i) = E[sigmoid(l_i + xi)]``, ``xi ~ N(0, sigma^2)``: the generative
    model's label probability with the logit noise integrated out.

    ``sigma = 0``: ``sigmoid(l)``. ``0 < sigma <= 1``: Gauss-Hermite (probabilists') quadrature
    of ``E[sigmoid(l + sigma Z)]`` (a smooth integrand against the Gaussian weight).
    ``sigma > 1``: since ``sigmoid(t) = P(U < t)`` for a standard logistic ``U``,
    ``q = P(U - sigma Z < l) = E[Phi((l - U) / sigma)] = int_0^1 Phi((l - logit v) / sigma) dv``,
    by Gauss-Legendre in ``v`` (the narrow factor is again the density). 200 nodes either way;
    agreement with a Monte Carlo estimate is tested (tests/test_synthetic_power.py).

    Parameters
    ----------
    logit : array_like, shape (n,), float64
        The log-odds ``l(x_i)`` (:func:`log_odds`).
    sigma : float
        Logit noise standard deviation, ``>= 0``.

    Returns
    -------
    ndarray, shape (n,), float64
        ``q_i`` in (0, 1); ``q_i > 1/2`` exactly when ``l_i > 0`` (the noise is symmetric).

    Raises
    ------
    ValueError
        If ``sigma`` is negative or not finite, or ``logit`` holds NaN or inf.

    References
    ----------
    Paper 000, App. F.1.1 (labels ``y ~ Bernoulli(sigmoid(l + xi))``).
    """
    from scipy.special import expit, logit as logit_fn, ndtr

    sigma = check_real("sigma", sigma, nonnegative=True)
    l = np.asarray(logit, dtype=np.float64).reshape(-1)
    if not np.isfinite(l).all():
        raise ValueError("logit must be finite")
    if sigma == 0.0:
        return expit(l)
    if sigma <= 1.0:
        z, w = np.polynomial.hermite_e.hermegauss(_QUADRATURE_NODES)
        return expit(l[:, None] + sigma * z[None, :]) @ (w / np.sqrt(2.0 * np.pi))
    x, w = np.polynomial.legendre.leggauss(_QUADRATURE_NODES)
    v, w = 0.5 * (x + 1.0), 0.5 * w                  # Gauss-Legendre on (0, 1)
    return ndtr((l[:, None] - logit_fn(v)[None, :]) / sigma) @ w


def bayes_accuracy(logit, sigma: float):
    """Bayes-optimal accuracy on fixed inputs: the expected accuracy of the best classifier.

    The Bayes rule predicts ``1{l_i > 0}`` (``q_i > 1/2`` exactly then) and is right with
    probability ``max(q_i, 1 - q_i)``; over fresh labels of the same inputs its accuracy has
    mean ``mean_i max(q_i, 1 - q_i)`` and standard deviation
    ``sqrt(sum_i q_i (1 - q_i)) / n`` (independent labels). No classifier has a higher expected
    accuracy on these inputs: the *Bayes ceiling* of a test split.

    Parameters
    ----------
    logit : array_like, shape (n,), float64
        The log-odds of the points (e.g. ``data.logit[data.test]``).
    sigma : float
        Logit noise standard deviation, ``>= 0``.

    Returns
    -------
    mean : float
        Expected accuracy of the Bayes rule, in [1/2, 1).
    sd : float
        Its standard deviation over label draws.

    Raises
    ------
    ValueError
        As :func:`positive_probability`; also if ``logit`` is empty.

    References
    ----------
    Paper 000, App. F.1.1 (the generative model); Devroye, Gyorfi and Lugosi, *A Probabilistic
    Theory of Pattern Recognition* (1996), Thm 2.1 (the Bayes rule).
    """
    if np.asarray(logit).size == 0:
        raise ValueError("logit must hold at least one point; got an empty array")
    q = positive_probability(logit, sigma)
    right = np.maximum(q, 1.0 - q)
    return float(right.mean()), float(np.sqrt(np.sum(right * (1.0 - right))) / right.size)
