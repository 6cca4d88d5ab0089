"""The classifiers of paper 000, App. F.1.2, on one shared feature budget D.

Each method is one entry of :data:`METHODS`: ``fit_predict(X_train, y_train, X_test, rng,
config) -> y_pred``. scikit-learn provides every classical model; the random Fourier features
are the engine's ``rff`` feature map (:mod:`rieszflow.engine.features`), scaled by
``1/sqrt(D)`` to the paper's ``z(x) = sqrt(2/D) cos(W^T x + b)``.

References
----------
Paper 000, App. F.1.2 (baselines (1)-(3); (4)-(6) are not built yet: see docs/synthetic.md).
"""
from __future__ import annotations

import math


__all__ = ["METHODS", "logistic", "rbf_svm", "rff_features", "rff_svm"]


def logistic(X_train, y_train, X_test, rng, config):
    """(1) Linear logistic regression on the raw inputs (scikit-learn defaults, lbfgs).

    Parameters
    ----------
    X_train : ndarray, shape (n_train, p), float64
    y_train : ndarray, shape (n_train,), int64
    X_test : ndarray, shape (n_test, p), float64
    rng : numpy.random.Generator
        Unused (the method is deterministic).
    config : dict
        Unused.

    Returns
    -------
    ndarray, shape (n_test,), int64
        Predicted labels.
    """
    from sklearn.linear_model import LogisticRegression

    return LogisticRegression(max_iter=1000).fit(X_train, y_train).predict(X_test)


def rbf_svm(gamma: float):
    """(2) SVM with the Gaussian kernel ``exp(-gamma |x - x'|^2)``, hinge loss, ``C = 1``.

    Parameters
    ----------
    gamma : float
        Bandwidth: 0.5 in the paper, 0.01 and 100 for its mis-specified dashed lines.

    Returns
    -------
    callable
        ``fit_predict(X_train, y_train, X_test, rng, config) -> y_pred``.
    """
    def fit_predict(X_train, y_train, X_test, rng, config):
        from sklearn.svm import SVC

        return SVC(kernel="rbf", gamma=gamma, C=1.0).fit(X_train, y_train).predict(X_test)

    fit_predict.__doc__ = f"RBF-SVM with gamma = {gamma}, C = 1 (paper 000, App. F.1.2 (2))."
    return fit_predict


def rff_features(X, omega, b):
    """Random Fourier features ``sqrt(2/D) cos(X omega^T + b)`` through the engine's ``rff`` map.

    Parameters
    ----------
    X : ndarray, shape (n, p), float64
    omega : ndarray, shape (D, p), float64
        Frequencies (rows).
    b : ndarray, shape (D,), float64
        Phases in [0, 2 pi).

    Returns
    -------
    ndarray, shape (n, D), float64

    References
    ----------
    Paper 000, App. F.1.2 (3); Rahimi and Recht (2007).
    """
    from rieszflow.engine.features import make_feature_map

    d_features = omega.shape[0]
    fmap = make_feature_map("rff", X.shape[1], d_features, b=b)
    return fmap(X, omega) / math.sqrt(d_features)


def rff_svm(X_train, y_train, X_test, rng, config):
    """(3) RFF with ``W ~ N(0, 2 gamma I)``, ``b ~ U[0, 2 pi]``, ``gamma = 0.5``, D features, then a
    linear SVM (hinge loss, ``C = 1``).

    Parameters
    ----------
    X_train : ndarray, shape (n_train, p), float64
    y_train : ndarray, shape (n_train,), int64
    X_test : ndarray, shape (n_test, p), float64
    rng : numpy.random.Generator
        Draws ``W`` (D x p normals) and then ``b`` (D uniforms).
    config : dict
        ``D`` (feature budget) and ``gamma``.

    Returns
    -------
    ndarray, shape (n_test,), int64
    """
    from sklearn.svm import LinearSVC

    D, gamma = int(config["D"]), float(config["gamma"])
    omega = rng.normal(0.0, math.sqrt(2.0 * gamma), size=(D, X_train.shape[1]))
    b = rng.uniform(0.0, 2.0 * math.pi, size=D)
    clf = LinearSVC(C=1.0, loss="hinge", max_iter=20000)
    clf.fit(rff_features(X_train, omega, b), y_train)
    return clf.predict(rff_features(X_test, omega, b))


#: Method name -> ``fit_predict(X_train, y_train, X_test, rng, config)``. Adding a method is one
#: entry here.
METHODS = {
    "logistic": logistic,
    "rbf_svm": rbf_svm(0.5),
    "rbf_svm_gamma0.01": rbf_svm(0.01),
    "rbf_svm_gamma100": rbf_svm(100.0),
    "rff_svm": rff_svm,
}
