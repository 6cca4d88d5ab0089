"""Random-feature kernels of learned frequencies, the mean-field kernel, and precomputed-kernel SVMs.

For :math:`\\phi(x, \\omega, b) = \\sqrt2\\cos(\\omega^\\top x + b)` with phase :math:`b \\sim U[0, 2\\pi)`,
:math:`\\mathbb{E}_b[\\phi(x,\\omega,b)\\phi(x',\\omega,b)] = \\cos(\\omega^\\top(x - x'))`, so

* N learned features (particles :math:`\\omega_k`, phases :math:`b_k`) give
  :math:`k_N(x, x') = \\frac1N\\sum_k \\phi(x, \\omega_k, b_k)\\phi(x', \\omega_k, b_k)` (paper 000,
  eq. (B.5); the engine's ``rff`` feature map), and
* a density :math:`\\rho` of frequencies gives the mean-field kernel
  :math:`k_\\rho(x, x') = \\int\\cos(\\omega^\\top(x - x'))\\rho(\\omega)\\,d\\omega`, computed here by the
  mesh quadrature :math:`\\sum_j m_j\\cos(c_j^\\top(x - x'))` (cell masses :math:`m_j`, centres
  :math:`c_j`) in the factorised form :math:`C M C'^\\top + S M S'^\\top`.

:math:`k_N \\to k_\\rho` as the empirical measure of the frequencies tends to :math:`\\rho`
(paper 000, Thm 1): the infinite-width statement made measurable.

References
----------
paper 000, eq. (B.5), Lemma 3, Thm 1; Rahimi and Recht, NeurIPS 2007.
"""
from __future__ import annotations

import numpy as np

from rieszflow.engine._checks import check_points, check_real, check_vector
from rieszflow.engine.backend import to_numpy
from rieszflow.engine.features import make_feature_map

__all__ = ["feature_kernel", "mean_field_kernel", "svm_accuracy", "rbf_svm_accuracy"]


def feature_kernel(X, Xp, omega, b) -> np.ndarray:
    """:math:`k_N(x, x') = \\frac1N\\sum_k \\phi(x,\\omega_k,b_k)\\phi(x',\\omega_k,b_k)` through the engine's ``rff`` map.

    Parameters
    ----------
    X : array_like, shape (n, p)
    Xp : array_like, shape (m, p)
    omega : array_like, shape (N, p)
        Frequencies (host or device array; the result is on the host).
    b : array_like, shape (N,)
        Phases in radians.

    Returns
    -------
    ndarray, shape (n, m), float64

    Raises
    ------
    ValueError
        On inconsistent shapes or non-finite values.

    References
    ----------
    paper 000, eq. (B.5).
    """
    omega = np.asarray(to_numpy(omega), dtype=np.float64)
    omega = check_points("omega", omega)
    X = check_points("X", np.asarray(X, dtype=np.float64), d=omega.shape[1])
    Xp = check_points("Xp", np.asarray(Xp, dtype=np.float64), d=omega.shape[1])
    b = check_vector("b", np.asarray(b, dtype=np.float64), n=omega.shape[0])
    fmap = make_feature_map("rff", omega.shape[1], omega.shape[0], b=b)
    return fmap(X, omega) @ fmap(Xp, omega).T / omega.shape[0]


def mean_field_kernel(X, Xp, centers, masses) -> np.ndarray:
    """Mean-field kernel :math:`k_\\rho(x,x') = \\sum_j m_j\\cos(c_j^\\top(x - x'))` by mesh quadrature.

    Parameters
    ----------
    X : array_like, shape (n, p)
    Xp : array_like, shape (m, p)
    centers : array_like, shape (n_cells, p)
        Cell centres :math:`c_j` of the frequency mesh.
    masses : array_like, shape (n_cells,)
        Cell masses :math:`m_j = |C_j|\\rho_j` (>= 0; renormalised to sum 1).

    Returns
    -------
    ndarray, shape (n, m), float64

    Raises
    ------
    ValueError
        On inconsistent shapes, negative or non-finite masses.

    References
    ----------
    paper 000, eq. (B.5) with the phase average of Lemma 3 and :math:`\\mu_N \\to \\rho` (Thm 1).
    """
    c = check_points("centers", np.asarray(centers, dtype=np.float64))
    X = check_points("X", np.asarray(X, dtype=np.float64), d=c.shape[1])
    Xp = check_points("Xp", np.asarray(Xp, dtype=np.float64), d=c.shape[1])
    m = check_vector("masses", np.asarray(masses, dtype=np.float64), n=c.shape[0])
    if (m < 0).any() or not m.sum() > 0:
        raise ValueError(f"masses must be >= 0 with a positive sum, got min {m.min():.3e}, sum {m.sum():.3e}")
    m = m / m.sum()
    U, Up = X @ c.T, Xp @ c.T
    return (np.cos(U) * m) @ np.cos(Up).T + (np.sin(U) * m) @ np.sin(Up).T


def svm_accuracy(K_train, y_train, K_test, y_test, C: float = 1.0) -> float:
    """Test accuracy of ``sklearn.svm.SVC(kernel="precomputed", C=C)``.

    Parameters
    ----------
    K_train : array_like, shape (n_train, n_train)
        Kernel between training points.
    y_train : array_like, shape (n_train,)
    K_test : array_like, shape (n_test, n_train)
        Kernel between test and training points.
    y_test : array_like, shape (n_test,)
    C : float, default 1.0

    Returns
    -------
    float
        Fraction of test points classified correctly.

    Raises
    ------
    ValueError
        On a non-positive C or inconsistent shapes (scikit-learn's message).
    """
    from sklearn.svm import SVC

    C = check_real("C", C, positive=True)
    clf = SVC(kernel="precomputed", C=C).fit(np.asarray(K_train), np.asarray(y_train))
    return float(np.mean(clf.predict(np.asarray(K_test)) == np.asarray(y_test)))


def rbf_svm_accuracy(X_train, y_train, X_test, y_test, gamma, C: float = 1.0) -> float:
    """Test accuracy of ``sklearn.svm.SVC(kernel="rbf", gamma=gamma, C=C)``.

    Parameters
    ----------
    X_train, y_train, X_test, y_test : array_like
        Data, shapes (n, p) and (n,).
    gamma : float or {"scale"}
        :math:`k(x, x') = e^{-\\gamma|x - x'|^2}`; ``gamma = \\sigma_0^2/2`` is the kernel whose spectral
        law is :math:`N(0, \\sigma_0^2 I)`.
    C : float, default 1.0

    Returns
    -------
    float
    """
    from sklearn.svm import SVC

    clf = SVC(kernel="rbf", gamma=gamma, C=check_real("C", C, positive=True)).fit(X_train, y_train)
    return float(np.mean(clf.predict(X_test) == y_test))
