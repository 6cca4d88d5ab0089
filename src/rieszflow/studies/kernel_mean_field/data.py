"""The binary problems of ``rieszflow kernel-mean-field``: inputs in R^1 and R^2, labels +-1.

``sine1d``
    :math:`x \\sim N(0, 1)`, log-odds :math:`l(x) = 2\\,[1.5\\sin(\\pi x) + 0.8(x^2 - 1)]` (the first two
    terms of paper 000's App. F.1.1 log-odds on one coordinate, doubled), :math:`y = \\pm 1` with
    :math:`P(y = 1 \\mid x) = \\sigma(l(x))`.
``sine2d``
    :math:`x \\sim N(0, I_2)`, :math:`l(x) = 2\\,[1.5\\sin(\\pi x_1) + 0.8(x_2^2 - 1) - x_1 x_2]`
    (App. F.1.1's sine, square and product terms on two coordinates, doubled).
``breast_cancer``
    scikit-learn's ``load_breast_cancer``: features 0 and 1 ("mean radius", "mean texture"),
    standardised with the training split's mean and standard deviation; ``y = +1`` for benign;
    a 70/30 split by ``train_test_split(random_state=0, stratify=y)``.

The synthetic draws come from ``numpy.random.default_rng([seed, problem index, 7])``: the data
depend on the root seed and the problem, not on N or the run.

References
----------
paper 000, App. F.1.1 (the synthetic log-odds); Street, Wolberg, Mangasarian (1993) (the
Wisconsin diagnostic breast cancer data, as shipped by scikit-learn).
"""
from __future__ import annotations

import dataclasses

import numpy as np
from rieszflow.studies.kernel_mean_field.config import PROBLEMS

__all__ = ["ProblemData", "make_data", "problem_dim"]


@dataclasses.dataclass(frozen=True, eq=False)
class ProblemData:
    """Training and test data of one problem.

    Parameters
    ----------
    name : str
    X_train : ndarray, shape (n_train, p), float64
    y_train : ndarray, shape (n_train,), float64, values +-1
    X_test : ndarray, shape (n_test, p), float64
    y_test : ndarray, shape (n_test,), float64, values +-1
    """

    name: str
    X_train: np.ndarray
    y_train: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray

    @property
    def p(self) -> int:
        """Input dimension."""
        return self.X_train.shape[1]


def problem_dim(name: str) -> int:
    """Input dimension p of a problem (1 for ``sine1d``, else 2).

    Parameters
    ----------
    name : str

    Returns
    -------
    int
    """
    if name not in PROBLEMS:
        raise ValueError(f"problem={name!r} is not allowed; choose one of {PROBLEMS}")
    return 1 if name == "sine1d" else 2


def _labels(rng, logit):
    return np.where(rng.random(logit.shape) < 1.0 / (1.0 + np.exp(-logit)), 1.0, -1.0)


def make_data(name: str, n_train: int, n_test: int, seed: int) -> ProblemData:
    """Draw (or load) the data of problem ``name``.

    Parameters
    ----------
    name : {"sine1d", "sine2d", "breast_cancer"}
    n_train, n_test : int
        Sizes of the synthetic problems (ignored for ``breast_cancer``: 398 / 171).
    seed : int
        Root seed (synthetic problems only).

    Returns
    -------
    ProblemData

    Raises
    ------
    ValueError
        On an unknown problem name.
    """
    p = problem_dim(name)
    if name == "breast_cancer":
        from sklearn.datasets import load_breast_cancer
        from sklearn.model_selection import train_test_split

        d = load_breast_cancer()
        X = d.data[:, :2].astype(np.float64)
        y = np.where(d.target == 1, 1.0, -1.0)
        Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, random_state=0, stratify=y)
        mu, sd = Xtr.mean(axis=0), Xtr.std(axis=0)
        return ProblemData(name, (Xtr - mu) / sd, ytr, (Xte - mu) / sd, yte)
    rng = np.random.default_rng([seed, PROBLEMS.index(name), 7])
    n = n_train + n_test
    X = rng.standard_normal((n, p))
    if p == 1:
        logit = 2.0 * (1.5 * np.sin(np.pi * X[:, 0]) + 0.8 * (X[:, 0] ** 2 - 1.0))
    else:
        logit = 2.0 * (1.5 * np.sin(np.pi * X[:, 0]) + 0.8 * (X[:, 1] ** 2 - 1.0) - X[:, 0] * X[:, 1])
    y = _labels(rng, logit)
    return ProblemData(name, X[:n_train], y[:n_train], X[n_train:], y[n_train:])
