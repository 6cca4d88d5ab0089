"""Interaction potentials G = exp(a) of paper 004 and their regularity constants.

Dot-product (K1), Gaussian (K2) and linear random-feature (K3) potentials with the
constants of section 5 / appendix C (sup, lower bound eps, Lipschitz constants).

References
----------
Paper 004 ("A Mathematical Theory of Attention", arXiv:2007.02876), sections 3, 5 and
appendix C; docs/specs/paper004_attention_theory.md sections 2 and 4.
"""
from __future__ import annotations

import abc
import dataclasses
import itertools
import math

import numpy as np

from rieszflow.engine.backend import namespace, to_numpy
from rieszflow.engine.space import Cube
from rieszflow.theory._common import _as_matrix, _check_metric, _check_real, _logsumexp

__all__ = [
    "InteractionPotential",
    "DotProductKernel",
    "GaussianKernel",
    "LinearFeatureKernel",
    "KernelConstants",
    "QueryConstants",
]



# ----------------------------------------------------------------------------------------------
# interaction potentials G = exp(a)
# ----------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class KernelConstants:
    """Regularity constants of an interaction potential G on a domain, stored in log space.

    Parameters
    ----------
    log_eps : float
        log eps(G) = log inf_{x,y in E} G(x, y) (-inf when E is unbounded).
    log_sup : float
        log ||G||_inf.
    log_lip_query : float
        log ||G||_{Lip,inf} = log sup_{x,y} ||grad_x G(x, y)||_* (dual norm of ``metric``).
    log_lip_key : float
        log ||G||_{inf,Lip} = log sup_{x,y} ||grad_y G(x, y)||_*.
    diam : float
        diam(E) in ``metric`` (inf when unbounded).
    metric : str
        Ground metric ("l1" reproduces the paper).

    References
    ----------
    Paper 004 section 5 (definitions before Prop. 19); spec section 4.1 (closed forms).
    """

    log_eps: float
    log_sup: float
    log_lip_query: float
    log_lip_key: float
    diam: float
    metric: str = "l1"

    @property
    def eps(self) -> float:
        """eps(G) (may underflow to 0; use the log fields for ratios)."""
        return math.exp(self.log_eps)

    @property
    def sup(self) -> float:
        """||G||_inf (may overflow to inf)."""
        return math.exp(self.log_sup)

    @property
    def lip_query(self) -> float:
        """||G||_{Lip,inf}, Lipschitz constant in the query slot."""
        return math.exp(self.log_lip_query)

    @property
    def lip_key(self) -> float:
        """||G||_{inf,Lip}, Lipschitz constant in the key slot."""
        return math.exp(self.log_lip_key)

    def over_eps(self, log_value: float) -> float:
        """exp(log_value - log eps): a constant divided by eps(G), without overflow of parts.

        Parameters
        ----------
        log_value : float
            Log of the constant to divide.

        Returns
        -------
        float
            exp(log_value - log_eps) (inf on overflow).
        """
        with np.errstate(over="ignore"):
            return float(np.exp(log_value - self.log_eps))


@dataclasses.dataclass(frozen=True)
class QueryConstants:
    """Constants of the key-slot function y -> G(x, y) for one fixed query x (Prop. 25).

    Parameters
    ----------
    log_eps : float
        log inf_{y in E} G(x, y).
    log_sup : float
        log ||G(x, .)||_inf.
    log_lip : float
        log ||G(x, .)||_Lip (dual norm of ``metric``).
    diam : float
        diam(E).
    metric : str, default "l1"
        Ground metric.

    References
    ----------
    Paper 004 Prop. 25; spec section 5.1.
    """

    log_eps: float
    log_sup: float
    log_lip: float
    diam: float
    metric: str = "l1"


class InteractionPotential(abc.ABC):
    """An interaction potential G(x, y) = exp(a(x, y)) > 0 (paper 004 Def. 4).

    Subclasses provide the log-potential a and its gradients in both slots; every attention
    routine of this module works with any of them.
    """

    @abc.abstractmethod
    def log_potential(self, X, Y):
        """Log-potential a(x_i, y_j) = log G(x_i, y_j).

        Parameters
        ----------
        X : array, shape (M, d_q), float64
            Queries.
        Y : array, shape (N, d_k), float64
            Keys.

        Returns
        -------
        array, shape (M, N), float64

        References
        ----------
        Paper 004 Def. 4 (G = exp(a)).
        """

    @abc.abstractmethod
    def grad_query(self, X, Y):
        """Gradient in the query slot, grad_1 a(x_i, y_j).

        Parameters
        ----------
        X : array, shape (M, d_q)
        Y : array, shape (N, d_k)

        Returns
        -------
        array, shape (M, N, d_q), float64
        """

    @abc.abstractmethod
    def grad_key(self, X, Y):
        """Gradient in the key slot, grad_2 a(x_i, y_j).

        Parameters
        ----------
        X : array, shape (M, d_q)
        Y : array, shape (N, d_k)

        Returns
        -------
        array, shape (M, N, d_k), float64
        """


class DotProductKernel(InteractionPotential):
    """Scaled dot-product potential a(x, y) = beta x^T A y (spec kernel K1).

    Parameters
    ----------
    A : array, shape (d_q, d_k), float64
        Bilinear form; for a Transformer head A = (W^Q)^T W^K / sqrt(d') (see
        :meth:`from_projections`).
    beta : float, default 1.0
        Inverse temperature, >= 0.

    Raises
    ------
    ValueError
        If ``A`` is not a finite 2-D array or ``beta`` is negative or not finite.

    References
    ----------
    Paper 004 section 3.2 and appendix A (a(x, y) = <W^Q x, W^K y>/sqrt(d')); spec section 2.2.
    """

    def __init__(self, A, beta: float = 1.0):
        self.A = _as_matrix("A", A, 2)
        self.beta = _check_real("beta", beta, low=0.0)

    @classmethod
    def from_projections(cls, WQ, WK, beta: float = 1.0) -> "DotProductKernel":
        """a(x, y) = beta <W^Q x, W^K y> / sqrt(d') with W^Q (d', d_q) and W^K (d', d_k).

        Parameters
        ----------
        WQ : array, shape (d', d_q)
        WK : array, shape (d', d_k)
        beta : float, default 1.0

        Returns
        -------
        DotProductKernel

        References
        ----------
        Paper 004 appendix A (the printed "(W^Q)^T x" is read as W^Q x; spec section 1 typos).
        """
        WQ = _as_matrix("WQ", WQ, 2)
        WK = _as_matrix("WK", WK, 2)
        if WQ.shape[0] != WK.shape[0]:
            raise ValueError(f"WQ and WK must share their first dimension d', got {tuple(WQ.shape)}"
                             f" and {tuple(WK.shape)}")
        return cls(WQ.T @ WK / math.sqrt(WQ.shape[0]), beta)

    def _check_dims(self, X, Y):
        if X.shape[-1] != self.A.shape[0] or Y.shape[-1] != self.A.shape[1]:
            raise ValueError(f"queries of dimension {X.shape[-1]} and keys of dimension "
                             f"{Y.shape[-1]} do not fit A of shape {tuple(self.A.shape)}")

    def log_potential(self, X, Y):
        """a(x_i, y_j) = beta x_i^T A y_j: array (M, N) for X (M, d_q), Y (N, d_k).

        Parameters
        ----------
        X : array, shape (M, d_q), float64
            Queries.
        Y : array, shape (N, d_k), float64
            Keys.

        Returns
        -------
        array, shape (M, N), float64
            a(x_i, y_j).
        """
        self._check_dims(X, Y)
        return self.beta * (X @ self.A) @ Y.T

    def grad_query(self, X, Y):
        """grad_1 a = beta A y_j, broadcast to (M, N, d_q) (spec section 4.5).

        Parameters
        ----------
        X : array, shape (M, d_q), float64
            Queries.
        Y : array, shape (N, d_k), float64
            Keys.

        Returns
        -------
        array, shape (M, N, d_q), float64
            grad_1 a(x_i, y_j) (a broadcast view).
        """
        self._check_dims(X, Y)
        xp = namespace(X, Y)
        g = self.beta * (Y @ self.A.T)                          # (N, d_q)
        return xp.broadcast_to(g[None, :, :], (X.shape[0],) + g.shape)

    def grad_key(self, X, Y):
        """grad_2 a = beta A^T x_i, broadcast to (M, N, d_k) (spec section 4.5).

        Parameters
        ----------
        X : array, shape (M, d_q), float64
            Queries.
        Y : array, shape (N, d_k), float64
            Keys.

        Returns
        -------
        array, shape (M, N, d_k), float64
            grad_2 a(x_i, y_j) (a broadcast view).
        """
        self._check_dims(X, Y)
        xp = namespace(X, Y)
        g = self.beta * (X @ self.A)                            # (M, d_k)
        return xp.broadcast_to(g[:, None, :], (X.shape[0], Y.shape[0], g.shape[1]))

    def max_bilinear(self, domain: Cube) -> float:
        """c_A = max_{x,y in E} x^T A y = R^2 max_{s in {+-1}^d} ||A^T s||_1.

        Exact by enumerating the 2^d sign vectors for d <= 16; for larger d the valid upper
        bound R^2 sum_ij |A_ij| is returned (spec section 4.1).

        Parameters
        ----------
        domain : Cube
            The box E = [-R, R]^d, with d the size of the square matrix ``A``.

        Returns
        -------
        float
            c_A (d <= 16) or the upper bound R^2 sum_ij |A_ij| (d > 16).

        Raises
        ------
        ValueError
            If ``A`` is not square of the box's dimension.
        """
        A = to_numpy(self.A)
        if A.shape[0] != A.shape[1] or A.shape[0] != domain.dim:
            raise ValueError(f"A of shape {A.shape} does not act on the box of dim {domain.dim}")
        r2 = float(domain.radius) ** 2
        d = A.shape[0]
        if d > 16:
            return r2 * float(np.abs(A).sum())
        signs = np.array(list(itertools.product([-1.0, 1.0], repeat=d)))
        return r2 * float(np.abs(signs @ A).sum(axis=1).max())

    def constants(self, domain: Cube, metric: str = "l1") -> KernelConstants:
        """Closed-form constants of G = exp(beta x^T A y) on the box E = [-R, R]^d.

        Parameters
        ----------
        domain : Cube
        metric : {"l1", "l2"}, default "l1"

        Returns
        -------
        KernelConstants
            eps = exp(-beta c_A), ||G||_inf = exp(beta c_A);
            l1: ||G||_{Lip,inf} <= e^{beta c_A} beta R max_i ||A_{i,:}||_1 and
            ||G||_{inf,Lip} <= e^{beta c_A} beta R max_j ||A_{:,j}||_1;
            l2: both <= e^{beta c_A} beta ||A||_2 R sqrt(d).

        References
        ----------
        Spec section 4.1 ("Closed forms for K1 on the box").
        """
        _check_metric(metric)
        if not isinstance(domain, Cube):
            raise TypeError(f"domain must be a Cube (K1 is not Lipschitz on unbounded E), got "
                            f"{type(domain).__name__}")
        c_a = self.max_bilinear(domain)
        A = to_numpy(self.A)
        r = float(domain.radius)
        log_sup = self.beta * c_a
        if metric == "l1":
            lq = self.beta * r * float(np.abs(A).sum(axis=1).max())
            lk = self.beta * r * float(np.abs(A).sum(axis=0).max())
        else:
            lq = lk = self.beta * float(np.linalg.norm(A, 2)) * r * math.sqrt(domain.dim)
        with np.errstate(divide="ignore"):
            return KernelConstants(log_eps=-log_sup, log_sup=log_sup,
                                   log_lip_query=log_sup + float(np.log(lq)),
                                   log_lip_key=log_sup + float(np.log(lk)),
                                   diam=domain.diam(metric), metric=metric)

    def query_constants(self, x, domain: Cube, metric: str = "l1") -> QueryConstants:
        """Constants of y -> G(x, y) on the box for a fixed query x (shape (d,)).

        With s = R ||A^T x||_1: inf_y G = e^{-beta s}, sup_y G = e^{beta s} and
        ||G(x, .)||_Lip <= e^{beta s} beta ||A^T x||_* (dual norm: l_inf for l1, l2 for l2).

        Parameters
        ----------
        x : array, shape (d,), float64
            The query.
        domain : Cube
            The box E = [-R, R]^d.
        metric : {"l1", "l2"}, default "l1"
            Ground metric.

        Returns
        -------
        QueryConstants
            log_eps = -beta s, log_sup = beta s, log_lip as above, diam = diam(E) in ``metric``.

        References
        ----------
        Paper 004 Prop. 25; spec section 5.1.
        """
        _check_metric(metric)
        x = to_numpy(_as_matrix("x", x, 1))
        g = to_numpy(self.A).T @ x
        s = float(domain.radius) * float(np.abs(g).sum())          # max_{y in box} x^T A y
        dual = float(np.abs(g).max()) if metric == "l1" else float(np.linalg.norm(g))
        with np.errstate(divide="ignore"):
            return QueryConstants(log_eps=-self.beta * s, log_sup=self.beta * s,
                                  log_lip=self.beta * s + float(np.log(self.beta * dual)),
                                  diam=domain.diam(metric), metric=metric)


class GaussianKernel(InteractionPotential):
    """Gaussian (L2) potential a(x, y) = -(beta/2) ||x - y||_2^2 (spec kernel K2).

    The same parameterisation as the token-flow kernel
    :class:`rieszflow.engine.tokenflow.kernels.GaussianKernel` (G = exp(a)), so one
    ``beta`` means one kernel everywhere in rieszflow; the bandwidth form
    exp(-||x - y||^2 / sigma^2) of paper 004 is ``GaussianKernel.from_sigma(sigma)``
    (beta = 2 / sigma^2).

    Parameters
    ----------
    beta : float, default 2.0
        Inverse squared bandwidth, > 0 (the default is the paper's sigma = 1,
        section 6.3).

    Raises
    ------
    TypeError, ValueError
        If ``beta`` is not a finite number > 0.

    References
    ----------
    Paper 004 section 6.3 (G(x, y) = exp(-||x - y||_2^2)); Kim, Papamakarios, Mnih (2021);
    spec section 2.2.
    """

    def __init__(self, beta: float = 2.0):
        self.beta = _check_real("beta", beta, low=0.0, strict=True)

    @classmethod
    def from_sigma(cls, sigma: float = 1.0) -> "GaussianKernel":
        """The kernel exp(-||x - y||_2^2 / sigma^2) of paper 004 (beta = 2 / sigma^2).

        Parameters
        ----------
        sigma : float, default 1.0
            Bandwidth > 0.

        Returns
        -------
        GaussianKernel

        Raises
        ------
        TypeError, ValueError
            If ``sigma`` is not a finite number > 0.
        """
        sigma = _check_real("sigma", sigma, low=0.0, strict=True)
        return cls(2.0 / sigma ** 2)

    @property
    def sigma(self) -> float:
        """Bandwidth sigma = sqrt(2 / beta) of the form exp(-||x - y||^2 / sigma^2)."""
        return math.sqrt(2.0 / self.beta)

    def log_potential(self, X, Y):
        """a(x_i, y_j) = -(beta/2) ||x_i - y_j||_2^2: array (M, N) for X (M, d), Y (N, d).

        Parameters
        ----------
        X : array, shape (M, d), float64
            Queries.
        Y : array, shape (N, d), float64
            Keys.

        Returns
        -------
        array, shape (M, N), float64
            a(x_i, y_j).

        Raises
        ------
        ValueError
            If ``X`` and ``Y`` have different d.
        """
        xp = namespace(X, Y)
        if X.shape[-1] != Y.shape[-1]:
            raise ValueError(f"queries ({X.shape[-1]}) and keys ({Y.shape[-1]}) must share d")
        diff = X[:, None, :] - Y[None, :, :]
        return -0.5 * self.beta * xp.sum(diff * diff, axis=2)

    def grad_query(self, X, Y):
        """grad_1 a = -beta (x_i - y_j): array (M, N, d).

        Parameters
        ----------
        X : array, shape (M, d), float64
            Queries.
        Y : array, shape (N, d), float64
            Keys.

        Returns
        -------
        array, shape (M, N, d), float64
            grad_1 a(x_i, y_j).
        """
        return -self.beta * (X[:, None, :] - Y[None, :, :])

    def grad_key(self, X, Y):
        """grad_2 a = +beta (x_i - y_j): array (M, N, d).

        Parameters
        ----------
        X : array, shape (M, d), float64
            Queries.
        Y : array, shape (N, d), float64
            Keys.

        Returns
        -------
        array, shape (M, N, d), float64
            grad_2 a(x_i, y_j).
        """
        return self.beta * (X[:, None, :] - Y[None, :, :])

    def _max_lip(self, t_max: float) -> float:
        # sup_{0 <= t <= t_max} (2 t / sigma^2) exp(-t^2 / sigma^2); maximiser t = sigma / sqrt 2
        t = min(self.sigma / math.sqrt(2.0), t_max)
        return 2.0 * t / self.sigma ** 2 * math.exp(-t * t / self.sigma ** 2)

    def constants(self, domain: Cube | None, metric: str = "l1") -> KernelConstants:
        """Constants of the Gaussian potential on a box, or on R^d when ``domain`` is None.

        ||G||_inf = 1; eps = exp(-diam_2(E)^2 / sigma^2) (0 on R^d); both Lipschitz constants
        equal sup_u 2||u||_* e^{-||u||_2^2/sigma^2}/sigma^2 over differences u of E, which is
        sqrt(2/e)/sigma when E is large enough (attained on a coordinate axis for l1).

        Parameters
        ----------
        domain : Cube or None
            The box E = [-R, R]^d; None for E = R^d.
        metric : {"l1", "l2"}, default "l1"
            Ground metric.

        Returns
        -------
        KernelConstants
            In ``metric``; log_sup = 0, log_eps = -inf and diam = inf on R^d.

        References
        ----------
        Spec section 4.1 ("Closed forms for K2") and section 4.6 (C30 uses ||G||_Lip = sqrt(2/e)).
        """
        _check_metric(metric)
        if domain is None:
            lip = self._max_lip(math.inf)
            return KernelConstants(log_eps=-math.inf, log_sup=0.0, log_lip_query=math.log(lip),
                                   log_lip_key=math.log(lip), diam=math.inf, metric=metric)
        diam2 = domain.diam("l2")
        t_max = 2.0 * float(domain.radius) if metric == "l1" else diam2
        lip = self._max_lip(t_max)
        return KernelConstants(log_eps=-(diam2 / self.sigma) ** 2, log_sup=0.0,
                               log_lip_query=math.log(lip), log_lip_key=math.log(lip),
                               diam=domain.diam(metric), metric=metric)


class LinearFeatureKernel(InteractionPotential):
    """Linear-attention potential G(x, y) = phi(W^Q x) . phi(W^K y) with positive features (K3).

    Parameters
    ----------
    WQ : array, shape (d', d_q)
    WK : array, shape (d', d_k)
    feature : {"elu1", "performer"}
        ``"elu1"``: phi(u) = elu(u) + 1 (elementwise, > 0). ``"performer"``: positive random
        features phi_r(u) = exp(omega_r . u - ||u||^2 / 2) / sqrt(m), r = 1..m, whose inner
        product is an unbiased estimate of exp(<q, k>) for omega_r ~ N(0, I).
    omega : array, shape (m, d'), optional
        Frequencies of the Performer features (explicit state, never redrawn); required for
        ``"performer"``.

    References
    ----------
    Spec section 2.2 (K3) and section 6.4 (Lemma 31 comparison with K1).
    """

    FEATURES = ("elu1", "performer")

    def __init__(self, WQ, WK, feature: str = "elu1", omega=None):
        self.WQ = _as_matrix("WQ", WQ, 2)
        self.WK = _as_matrix("WK", WK, 2)
        if self.WQ.shape[0] != self.WK.shape[0]:
            raise ValueError(f"WQ and WK must share d', got {tuple(self.WQ.shape)} and "
                             f"{tuple(self.WK.shape)}")
        if feature not in self.FEATURES:
            raise ValueError(f"feature={feature!r} is not supported; allowed: "
                             f"{', '.join(self.FEATURES)}")
        self.feature = feature
        if feature == "performer":
            if omega is None:
                raise ValueError("feature='performer' needs omega of shape (m, d')")
            self.omega = _as_matrix("omega", omega, 2)
            if self.omega.shape[1] != self.WQ.shape[0]:
                raise ValueError(f"omega must have shape (m, {self.WQ.shape[0]}), got "
                                 f"{tuple(self.omega.shape)}")
        else:
            if omega is not None:
                raise ValueError("omega is only used with feature='performer'")
            self.omega = None

    def _check_dims(self, X, Y):
        if X.shape[-1] != self.WQ.shape[1] or Y.shape[-1] != self.WK.shape[1]:
            raise ValueError(f"queries of dimension {X.shape[-1]} and keys of dimension "
                             f"{Y.shape[-1]} do not fit WQ {tuple(self.WQ.shape)} and WK "
                             f"{tuple(self.WK.shape)}")

    def _log_features(self, U):
        """log phi(u) (shape (n, m)) and d log phi / du as (n, m, d')."""
        xp = namespace(U)
        if self.feature == "elu1":
            phi = xp.where(U > 0, U + 1.0, xp.exp(xp.minimum(U, 0.0)))
            dphi = xp.where(U > 0, 1.0, xp.exp(xp.minimum(U, 0.0)))
            eye = xp.eye(U.shape[1])
            return xp.log(phi), (dphi / phi)[:, :, None] * eye[None, :, :]
        m = self.omega.shape[0]
        lf = U @ self.omega.T - 0.5 * xp.sum(U * U, axis=1, keepdims=True) - 0.5 * math.log(m)
        grad = self.omega[None, :, :] - U[:, None, :]
        return lf, grad

    def log_potential(self, X, Y):
        """a = log(phi(W^Q x_i) . phi(W^K y_j)) by log-sum-exp over features: array (M, N).

        Parameters
        ----------
        X : array, shape (M, d_q), float64
            Queries.
        Y : array, shape (N, d_k), float64
            Keys.

        Returns
        -------
        array, shape (M, N), float64
            a(x_i, y_j).
        """
        self._check_dims(X, Y)
        lq, _ = self._log_features(X @ self.WQ.T)
        lk, _ = self._log_features(Y @ self.WK.T)
        xp = namespace(X, Y)
        return _logsumexp(xp, lq[:, None, :] + lk[None, :, :], axis=2)

    def _slot_grad(self, X, Y, query: bool):
        self._check_dims(X, Y)
        xp = namespace(X, Y)
        lq, gq = self._log_features(X @ self.WQ.T)
        lk, gk = self._log_features(Y @ self.WK.T)
        s = lq[:, None, :] + lk[None, :, :]                     # (M, N, m)
        p = xp.exp(s - _logsumexp(xp, s, axis=2)[:, :, None])
        if query:
            g = xp.einsum("ijr,irc->ijc", p, gq)                # d/dq, (M, N, d')
            return g @ self.WQ
        g = xp.einsum("ijr,jrc->ijc", p, gk)
        return g @ self.WK

    def grad_query(self, X, Y):
        """grad_1 a = (W^Q)^T sum_r p_r grad log phi_r(W^Q x_i): array (M, N, d_q).

        Parameters
        ----------
        X : array, shape (M, d_q), float64
            Queries.
        Y : array, shape (N, d_k), float64
            Keys.

        Returns
        -------
        array, shape (M, N, d_q), float64
            grad_1 a(x_i, y_j).
        """
        return self._slot_grad(X, Y, True)

    def grad_key(self, X, Y):
        """grad_2 a = (W^K)^T sum_r p_r grad log phi_r(W^K y_j): array (M, N, d_k).

        Parameters
        ----------
        X : array, shape (M, d_q), float64
            Queries.
        Y : array, shape (N, d_k), float64
            Keys.

        Returns
        -------
        array, shape (M, N, d_k), float64
            grad_2 a(x_i, y_j).
        """
        return self._slot_grad(X, Y, False)
