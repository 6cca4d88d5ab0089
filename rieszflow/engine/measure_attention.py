"""Measure-theoretic attention: attention as nonlinear Markov transport of empirical measures.

Paper 004 (Vuckovic, Baratin, Tachet des Combes, *A Mathematical Theory of Attention*, 2020)
models attention on the space P(E) of probability measures over the token space E:

* an input is an **empirical measure** mu = sum_j w_j delta_{y_j} (atoms ``points`` of shape
  (N, d) and ``weights`` of shape (N,) summing to 1; m(X) is the uniform-weight case, and
  duplicated tokens are allowed and equivalent to a merged, heavier atom);
* the **softmatch kernel** Psi_{G(x, .)}(mu) reweights the atoms of mu by an interaction
  potential G(x, y) = exp(a(x, y)) (Boltzmann-Gibbs transformation, paper 004 Def. 3-4);
* the **lookup kernel** L(y, dv) = delta_{l(y)}(dv) moves every atom to its value (Def. 5);
* the **Dirac moment projection** Pi(mu) = delta_{mean(mu)} averages (Def. 6-7, eq. (2));
* the **attention kernel** A_mu(x, dz) = Pi[Psi_{G(x, .)}(mu) L](dz) = delta_{T[mu](x)} with
  T[mu](x) = sum_j softmax_j(a(x, y_j) + log w_j) l(y_j)   (Def. 8, Prop. 9);
* self-attention is the map mu -> mu A_mu = (T[mu])_# mu, and a Transformer layer (no residual,
  no LayerNorm, paper footnote 6) is mu -> (f o T[mu])_# mu (Prop. 12, appendix A).

The module also holds the paper's regularity constants (section 5, appendix C) next to the
corrected ones of the implementation spec (``shared/specs/paper004_attention_theory.md``,
section 4): Prop. 19 (ii), Thm. 23, Prop. 25 and Lemma 31 as printed are **not** valid bounds;
the ``paper`` fields below reproduce what is printed, the ``corrected`` fields are valid.

Conventions
-----------
* Metric: every Wasserstein distance and Lipschitz constant is taken with the l1 ground metric
  ``||x - y||_1`` (paper 004 section 4, "Background"), unless ``metric="l2"`` is passed.
* Softmax weights are computed in log space: log pi_j = log w_j + a(x, y_j) - logsumexp(...).
* The row-vector convention of paper 004 appendix A is used for the multi-head output matrices
  W_h^O (shape (d', d)); all other matrices act on column vectors (``W @ x``).
* Exact W1 is computed on the host with POT (network simplex, ``numItermax`` >= 1e7); for
  d = 1 the exact sorted-CDF formula of POT is used.
"""
from __future__ import annotations

import abc
import dataclasses
import itertools
import math
from typing import Callable

import numpy as np

from rieszflow.engine import measures as _measures
from rieszflow.engine.backend import namespace, to_numpy
from rieszflow.engine.measures import EmpiricalMeasure
from rieszflow.engine.space import Cube

__all__ = [
    "InteractionPotential",
    "DotProductKernel",
    "GaussianKernel",
    "LinearFeatureKernel",
    "LinearLookup",
    "FeedForward",
    "boltzmann_gibbs",
    "softmatch",
    "softmatch_measure",
    "dirac_projection",
    "gaussian_projection",
    "attention_kernel",
    "SelfAttention",
    "MultiHeadTransformerLayer",
    "iterate",
    "wasserstein1",
    "KernelConstants",
    "QueryConstants",
    "Bound",
    "prop19_query_bound",
    "prop19_key_bound",
    "prop20_bound",
    "prop21_bound",
    "thm23_bound",
    "cor24_bound",
    "prop25_bound",
    "lemma31_bound",
    "cor30_constant",
    "lemma40_bound",
    "operator_norm",
]

#: Ground metrics supported for W1 and Lipschitz constants.
METRICS = _measures.METRICS


# ----------------------------------------------------------------------------------------------
# validation helpers
# ----------------------------------------------------------------------------------------------
def _check_metric(metric: str) -> str:
    if metric not in METRICS:
        raise ValueError(f"metric={metric!r} is not supported; allowed: {', '.join(METRICS)}")
    return metric


def _as_matrix(name: str, a, ndim: int = 2):
    """Validate a finite float64 array of the given rank (kept in its own namespace)."""
    xp = namespace(a)
    arr = np.asarray(a, dtype=np.float64) if xp is np else a.astype(xp.float64, copy=False)
    if arr.ndim != ndim:
        raise ValueError(f"{name} must be a {ndim}-D array, got shape {tuple(arr.shape)}")
    if not bool(xp.all(xp.isfinite(arr))):
        raise ValueError(f"{name} contains NaN or inf; all entries must be finite")
    return arr


def _check_real(name: str, value, *, low: float | None = None, strict: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a real number, got {value!r} ({type(value).__name__})")
    v = float(value)
    if not math.isfinite(v):
        raise ValueError(f"{name} must be finite, got {value!r}")
    if low is not None and (v < low or (strict and v == low)):
        rel = ">" if strict else ">="
        raise ValueError(f"{name} must be {rel} {low}, got {value!r}")
    return v


def operator_norm(W, metric: str = "l1") -> float:
    """Operator norm of a matrix acting on column vectors.

    Parameters
    ----------
    W : array_like, shape (m, n), float64
    metric : {"l1", "l2", "linf"}
        ``"l1"``: ||W||_{1->1} = max column absolute sum; ``"l2"``: spectral norm;
        ``"linf"``: ||W||_{inf->inf} = max row absolute sum.

    Returns
    -------
    float
        The norm (the Lipschitz constant of x -> W x in that metric).

    Raises
    ------
    ValueError
        If ``W`` is not a finite 2-D array or ``metric`` is unknown.

    References
    ----------
    Paper 004, Prop. 21 (K_l = Lip(l)); spec section 1 (K_l = ||W||_{1->1} under l1).
    """
    W = to_numpy(_as_matrix("W", W))
    if metric == "l1":
        return float(np.abs(W).sum(axis=0).max())
    if metric == "l2":
        return float(np.linalg.norm(W, 2))
    if metric == "linf":
        return float(np.abs(W).sum(axis=1).max())
    raise ValueError(f"metric={metric!r} is not supported; allowed: l1, l2, linf")


def _logsumexp(xp, a, axis):
    m = xp.max(a, axis=axis, keepdims=True)
    m = xp.where(xp.isfinite(m), m, 0.0)
    return xp.squeeze(m, axis=axis) + xp.log(xp.sum(xp.exp(a - m), axis=axis))


# ----------------------------------------------------------------------------------------------
# measures and domains
# ----------------------------------------------------------------------------------------------
# ----------------------------------------------------------------------------------------------
# interaction potentials G = exp(a)
# ----------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class KernelConstants:
    """Regularity constants of an interaction potential G on a domain, stored in log space.

    Attributes
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
        """exp(log_value - log eps): a constant divided by eps(G), without overflow of parts."""
        with np.errstate(over="ignore"):
            return float(np.exp(log_value - self.log_eps))


@dataclasses.dataclass(frozen=True)
class QueryConstants:
    """Constants of the key-slot function y -> G(x, y) for one fixed query x (Prop. 25).

    Attributes
    ----------
    log_eps : float
        log inf_{y in E} G(x, y).
    log_sup : float
        log ||G(x, .)||_inf.
    log_lip : float
        log ||G(x, .)||_Lip (dual norm of ``metric``).
    diam : float
        diam(E).
    metric : str

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
        """a(x_i, y_j) = beta x_i^T A y_j: array (M, N) for X (M, d_q), Y (N, d_k)."""
        self._check_dims(X, Y)
        return self.beta * (X @ self.A) @ Y.T

    def grad_query(self, X, Y):
        """grad_1 a = beta A y_j, broadcast to (M, N, d_q) (spec section 4.5)."""
        self._check_dims(X, Y)
        xp = namespace(X, Y)
        g = self.beta * (Y @ self.A.T)                          # (N, d_q)
        return xp.broadcast_to(g[None, :, :], (X.shape[0],) + g.shape)

    def grad_key(self, X, Y):
        """grad_2 a = beta A^T x_i, broadcast to (M, N, d_k) (spec section 4.5)."""
        self._check_dims(X, Y)
        xp = namespace(X, Y)
        g = self.beta * (X @ self.A)                            # (M, d_k)
        return xp.broadcast_to(g[:, None, :], (X.shape[0], Y.shape[0], g.shape[1]))

    def max_bilinear(self, domain: Cube) -> float:
        """c_A = max_{x,y in E} x^T A y = R^2 max_{s in {+-1}^d} ||A^T s||_1.

        Exact by enumerating the 2^d sign vectors for d <= 16; for larger d the valid upper
        bound R^2 sum_ij |A_ij| is returned (spec section 4.1).
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
        """a(x_i, y_j) = -(beta/2) ||x_i - y_j||_2^2: array (M, N) for X (M, d), Y (N, d)."""
        xp = namespace(X, Y)
        if X.shape[-1] != Y.shape[-1]:
            raise ValueError(f"queries ({X.shape[-1]}) and keys ({Y.shape[-1]}) must share d")
        diff = X[:, None, :] - Y[None, :, :]
        return -0.5 * self.beta * xp.sum(diff * diff, axis=2)

    def grad_query(self, X, Y):
        """grad_1 a = -beta (x_i - y_j): array (M, N, d)."""
        return -self.beta * (X[:, None, :] - Y[None, :, :])

    def grad_key(self, X, Y):
        """grad_2 a = +beta (x_i - y_j): array (M, N, d)."""
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
        """a = log(phi(W^Q x_i) . phi(W^K y_j)) by log-sum-exp over features: array (M, N)."""
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
        """grad_1 a = (W^Q)^T sum_r p_r grad log phi_r(W^Q x_i): array (M, N, d_q)."""
        return self._slot_grad(X, Y, True)

    def grad_key(self, X, Y):
        """grad_2 a = (W^K)^T sum_r p_r grad log phi_r(W^K y_j): array (M, N, d_k)."""
        return self._slot_grad(X, Y, False)


# ----------------------------------------------------------------------------------------------
# lookup and feed-forward kernels
# ----------------------------------------------------------------------------------------------
class LinearLookup:
    """Deterministic linear lookup l(y) = W y, i.e. the kernel L(y, dv) = delta_{W y}(dv).

    Parameters
    ----------
    W : array, shape (d_v, d), float64

    References
    ----------
    Paper 004 Def. 5 and Prop. 21 (K_l = Lip(l)); spec section 1 (K_l = ||W||_{1->1}).
    """

    def __init__(self, W):
        self.W = _as_matrix("W", W, 2)

    def __call__(self, Y):
        """Values l(y_j) for keys Y of shape (N, d): array (N, d_v)."""
        return Y @ self.W.T

    def jacobian(self, Y):
        """D l(y_j) for every key: array (N, d_v, d) (constant W)."""
        xp = namespace(Y)
        return xp.broadcast_to(self.W[None, :, :], (Y.shape[0],) + tuple(self.W.shape))

    def lipschitz(self, metric: str = "l1") -> float:
        """K_l = ||W|| in the operator norm of ``metric`` (l1: max column absolute sum)."""
        return operator_norm(self.W, metric)


class FeedForward:
    """Position-wise feed-forward map f(u) = W2 sigma(W1 u + b1) + b2 (FFN kernel delta_{f(u)}).

    Parameters
    ----------
    W1 : array, shape (h, d_in)
    b1 : array, shape (h,)
    W2 : array, shape (d_out, h)
    b2 : array, shape (d_out,)
    activation : {"tanh", "relu", "identity", "gelu"}, default "tanh"
        ``"gelu"`` is the bundled Transformer's GELU (tanh form,
        :class:`rieszflow.engine.attention.layers.GELU`), so :meth:`from_layer_params` turns a
        trained FFN of the model into this kernel.

    Raises
    ------
    ValueError
        If the shapes do not chain or the activation is unknown.

    References
    ----------
    Paper 004 section 3.2 and appendix A (F(x, dy) = delta_{f(x)}(dy), T := A F).
    """

    ACTIVATIONS = ("tanh", "relu", "identity", "gelu")

    def __init__(self, W1, b1, W2, b2, activation: str = "tanh"):
        self.W1 = _as_matrix("W1", W1, 2)
        self.b1 = _as_matrix("b1", b1, 1)
        self.W2 = _as_matrix("W2", W2, 2)
        self.b2 = _as_matrix("b2", b2, 1)
        h = self.W1.shape[0]
        if self.b1.shape != (h,) or self.W2.shape[1] != h or self.b2.shape != (self.W2.shape[0],):
            raise ValueError(f"FeedForward shapes do not chain: W1 {tuple(self.W1.shape)}, b1 "
                             f"{tuple(self.b1.shape)}, W2 {tuple(self.W2.shape)}, b2 "
                             f"{tuple(self.b2.shape)}")
        if activation not in self.ACTIVATIONS:
            raise ValueError(f"activation={activation!r} is not supported; allowed: "
                             f"{', '.join(self.ACTIVATIONS)}")
        self.activation = activation

    @classmethod
    def from_layer_params(cls, params: dict) -> "FeedForward":
        """The FFN of the bundled Transformer (dropout off) as a measure-theoretic kernel.

        Parameters
        ----------
        params : dict
            ``w1`` (d_model, d_ff), ``b1`` (d_ff,), ``w2`` (d_ff, d_model), ``b2`` (d_model,), as
            :meth:`rieszflow.engine.attention.layers.FeedForward.init_params` makes them
            (``x @ w`` convention).

        Returns
        -------
        FeedForward
            With ``activation="gelu"``; it equals the layer's forward pass in evaluation mode.
        """
        return cls(to_numpy(params["w1"]).T, params["b1"], to_numpy(params["w2"]).T, params["b2"],
                   activation="gelu")

    def _act(self, Z):
        xp = namespace(Z)
        if self.activation == "gelu":
            from rieszflow.engine.attention.layers import GELU

            y, (_, t) = GELU().forward(Z)
            c, a = GELU._C, GELU._A
            return y, 0.5 * (1.0 + t) + 0.5 * Z * (1.0 - t * t) * c * (1.0 + 3.0 * a * Z * Z)
        if self.activation == "tanh":
            return xp.tanh(Z), 1.0 - xp.tanh(Z) ** 2
        if self.activation == "relu":
            return xp.maximum(Z, 0.0), (Z > 0).astype(Z.dtype)
        return Z, xp.ones_like(Z)

    def __call__(self, U):
        """f applied row-wise to U of shape (M, d_in): array (M, d_out)."""
        a, _ = self._act(U @ self.W1.T + self.b1)
        return a @ self.W2.T + self.b2

    def jacobian(self, U):
        """Df(u_i) for every row: array (M, d_out, d_in)."""
        _, da = self._act(U @ self.W1.T + self.b1)
        return (self.W2[None, :, :] * da[:, None, :]) @ self.W1

    def lipschitz_bound(self, metric: str = "l1") -> float:
        """Upper bound ||W2|| Lip(sigma) ||W1|| of Lip(f) in ``metric`` (l1, l2 or linf)."""
        return operator_norm(self.W2, metric) * operator_norm(self.W1, metric)


# ----------------------------------------------------------------------------------------------
# Boltzmann-Gibbs, softmatch, projection, attention kernel
# ----------------------------------------------------------------------------------------------
def boltzmann_gibbs(mu: EmpiricalMeasure, log_g) -> EmpiricalMeasure:
    """Boltzmann-Gibbs transformation Psi_g(mu)(dy) = g(y) mu(dy) / mu(g).

    Parameters
    ----------
    mu : EmpiricalMeasure
        N atoms.
    log_g : array, shape (N,), float64
        log g(y_j) at the atoms (g > 0 bounded; -inf gives weight 0).

    Returns
    -------
    EmpiricalMeasure
        Same atoms, weights pi with log pi = log w + log g - logsumexp(log w + log g).

    References
    ----------
    Paper 004 Def. 3; spec section 2.1 (computed in log space).
    """
    xp = namespace(mu.points)
    log_g = xp.asarray(log_g, dtype=xp.float64)
    if log_g.shape != (mu.n_atoms,):
        raise ValueError(f"log_g must have shape ({mu.n_atoms},), got {tuple(log_g.shape)}")
    if bool(xp.any(xp.isnan(log_g))) or bool(xp.any(log_g == xp.inf)):
        raise ValueError("log_g contains NaN or +inf")
    with np.errstate(divide="ignore"):
        s = xp.log(mu.weights) + log_g
    if not bool(xp.any(xp.isfinite(s))):
        raise ValueError("log_g gives zero mass to every atom of mu; Psi_g(mu) is undefined")
    pi = xp.exp(s - _logsumexp(xp, s, axis=0))
    return EmpiricalMeasure(mu.points, pi / pi.sum())


def softmatch(queries, mu: EmpiricalMeasure, kernel: InteractionPotential):
    """Softmatch kernel rows Psi_{G(x_i, .)}(mu) as a row-stochastic matrix.

    Parameters
    ----------
    queries : array, shape (M, d_q), float64
    mu : EmpiricalMeasure
        Keys: N atoms with weights w.
    kernel : InteractionPotential

    Returns
    -------
    array, shape (M, N), float64
        P_ij = w_j G(x_i, y_j) / sum_k w_k G(x_i, y_k), computed by log-sum-exp. For uniform
        w this is softmax(a(x_i, y_j)) = softmax(Q K^T) in the dot-product case.

    References
    ----------
    Paper 004 Def. 4 and section 3.1 (Psi_G(m(K)) = softmax(Q K^T)).
    """
    Xq = _as_matrix("queries", queries, 2)
    xp = namespace(Xq, mu.points)
    with np.errstate(divide="ignore"):
        s = kernel.log_potential(Xq, mu.points) + xp.log(mu.weights)[None, :]
    return xp.exp(s - _logsumexp(xp, s, axis=1)[:, None])


def softmatch_measure(query, mu: EmpiricalMeasure,
                      kernel: InteractionPotential) -> EmpiricalMeasure:
    """Psi_{G(x, .)}(mu) for one query x (shape (d_q,)) as a measure on the atoms of mu.

    Returns
    -------
    EmpiricalMeasure
        Atoms of mu with the softmatch weights.

    References
    ----------
    Paper 004 Def. 4, Prop. 19.
    """
    q = _as_matrix("query", query, 1)
    P = softmatch(q[None, :], mu, kernel)[0]
    return EmpiricalMeasure(mu.points, P / P.sum())


def dirac_projection(mu: EmpiricalMeasure) -> EmpiricalMeasure:
    """Moment projection onto Dirac measures: Pi(mu) = delta_{mean(mu)} (F = id).

    Returns
    -------
    EmpiricalMeasure
        One atom at mu(F) with weight 1.

    References
    ----------
    Paper 004 Def. 6-7, eq. (2), Prop. 20 (tau(Pi) = 1, not d: spec section 4.2).
    """
    xp = namespace(mu.points)
    return EmpiricalMeasure(mu.mean()[None, :], xp.ones(1))


def gaussian_projection(mu: EmpiricalMeasure):
    """Moment projection onto Gaussians, F = (x, x x^T): moment matching.

    Returns
    -------
    mean : array, shape (d,)
    cov : array, shape (d, d)
        Population covariance sum_j w_j (y_j - m)(y_j - m)^T (weights, no 1/(N-1) correction).

    References
    ----------
    Paper 004 Prop. 16, Remark 18; spec section 3.2.
    """
    m = mu.mean()
    c = mu.points - m[None, :]
    return m, (c * mu.weights[:, None]).T @ c


def attention_kernel(queries, mu: EmpiricalMeasure, kernel: InteractionPotential, values):
    """Attention kernel A_mu(x, dz) = Pi[Psi_{G(x, .)}(mu) L](dz) = delta_{T[mu](x)}.

    Parameters
    ----------
    queries : array, shape (M, d_q), float64
    mu : EmpiricalMeasure
        Keys y_j (N atoms, weights w_j).
    kernel : InteractionPotential
    values : array, shape (N, d_v), float64
        The lookup table k_j -> v_j (a token is the pair (k_j, v_j)); for a lookup function pass
        ``lookup(mu.points)``.

    Returns
    -------
    locations : array, shape (M, d_v)
        T[mu](x_i) = sum_j P_ij v_j, the atom of A_mu(x_i, .).
    P : array, shape (M, N)
        The softmatch matrix of :func:`softmatch`.

    References
    ----------
    Paper 004 Def. 8 and Prop. 9 (delta_{q_t} A_{m(K)} = delta_{Attention(q_t, K, V)}).
    """
    V = _as_matrix("values", values, 2)
    if V.shape[0] != mu.n_atoms:
        raise ValueError(f"values must have one row per atom of mu ({mu.n_atoms}), got "
                         f"{V.shape[0]}")
    P = softmatch(queries, mu, kernel)
    return P @ V, P


class SelfAttention:
    """Single-head self-attention (optionally followed by an FFN) as a map on measures.

    T[mu](x) = f( sum_j softmax_j(a(x, y_j) + log w_j) l(y_j) ),   mu -> (T[mu])_# mu.

    Parameters
    ----------
    kernel : InteractionPotential
        G = exp(a) on E x E.
    lookup : LinearLookup
        l : E -> R^{d_v}; for an iterated map d_v = d (and l(E) in E keeps E invariant).
    ffn : FeedForward, optional
        f : R^{d_v} -> R^d (identity when None).

    References
    ----------
    Paper 004 section 3.1 ("attention as a system of interacting particles"), Def. 8, Prop. 12
    (T := A F); spec section 2.4.
    """

    def __init__(self, kernel: InteractionPotential, lookup: LinearLookup,
                 ffn: FeedForward | None = None):
        if not isinstance(kernel, InteractionPotential):
            raise TypeError(f"kernel must be an InteractionPotential, got {type(kernel).__name__}")
        if not isinstance(lookup, LinearLookup):
            raise TypeError(f"lookup must be a LinearLookup, got {type(lookup).__name__}")
        if ffn is not None and not isinstance(ffn, FeedForward):
            raise TypeError(f"ffn must be a FeedForward or None, got {type(ffn).__name__}")
        self.kernel, self.lookup, self.ffn = kernel, lookup, ffn

    def attend(self, queries, mu: EmpiricalMeasure):
        """Pre-FFN attention outputs y_i = sum_j P_ij l(y_j): array (M, d_v)."""
        y, _ = attention_kernel(queries, mu, self.kernel, self.lookup(mu.points))
        return y

    def transport(self, mu: EmpiricalMeasure, at=None):
        """The transport map T[mu] evaluated at ``at`` (default: the atoms of mu), shape (M, d)."""
        at = mu.points if at is None else at
        y = self.attend(at, mu)
        return y if self.ffn is None else self.ffn(y)

    def __call__(self, mu: EmpiricalMeasure) -> EmpiricalMeasure:
        """mu A_mu (then F): the push-forward (T[mu])_# mu, weights unchanged."""
        return EmpiricalMeasure(self.transport(mu), mu.weights)

    def query_jacobian(self, queries, mu: EmpiricalMeasure):
        """d T[mu](x) / dx at each query with mu fixed: array (M, d_out, d_q).

        dy/dx = sum_j P_j (v_j - y) grad_1 a(x, y_j)^T, then Df(y) when an FFN is present.

        References
        ----------
        Paper 004 Cor. 24 (query-Lipschitz constant of Attention(., K, V)); spec section 4.5.
        """
        Xq = _as_matrix("queries", queries, 2)
        V = self.lookup(mu.points)
        P = softmatch(Xq, mu, self.kernel)
        y = P @ V
        g1 = self.kernel.grad_query(Xq, mu.points)               # (M, N, d)
        xp = namespace(Xq, mu.points)
        J = xp.einsum("ij,ija,ijc->iac", P, V[None, :, :] - y[:, None, :], g1)
        if self.ffn is not None:
            J = self.ffn.jacobian(y) @ J
        return J

    def jacobian(self, mu: EmpiricalMeasure):
        """Jacobian of X -> (T[mu_X](x_i))_i with the weights of mu held fixed.

        Returns
        -------
        array, shape (N, d_out, N, d)
            J[i, :, k, :] = d T(x_i) / d x_k =
            P_ik Dl(x_k) + delta_ik sum_j P_ij (v_j - y_i) grad_1 a(x_i, x_j)^T
            + P_ik (v_k - y_i) grad_2 a(x_i, x_k)^T, left-multiplied by Df(y_i) with an FFN.

        References
        ----------
        Spec section 4.5 ("Analytic Jacobian"), checked against central differences in the tests.
        """
        X = mu.points
        xp = namespace(X)
        V = self.lookup(X)
        P = softmatch(X, mu, self.kernel)
        y = P @ V
        g1 = self.kernel.grad_query(X, X)
        g2 = self.kernel.grad_key(X, X)
        Dl = self.lookup.jacobian(X)                              # (N, d_v, d)
        diff = V[None, :, :] - y[:, None, :]                      # (N, N, d_v): v_k - y_i
        J = P[:, None, :, None] * xp.transpose(Dl, (1, 0, 2))[None, :, :, :]
        J = J + xp.einsum("ik,ika,ikc->iakc", P, diff, g2)
        diag = xp.einsum("ij,ija,ijc->iac", P, diff, g1)
        n = X.shape[0]
        idx = xp.arange(n)
        J[idx, :, idx, :] += diag
        if self.ffn is not None:
            J = xp.einsum("iab,ibkc->iakc", self.ffn.jacobian(y), J)
        return J

    def local_lipschitz(self, mu: EmpiricalMeasure):
        """Local W1-Lipschitz ratio of mu -> mu A_mu at mu for perturbations of atom positions.

        For distinct atoms and infinitesimal moves delta_k, W1(in) = sum_k w_k ||delta_k||_1 and
        W1(out) = sum_i w_i ||(J delta)_i||_1; the supremum of the ratio is attained by moving
        one atom along one axis, so the value is max_{k,c} sum_i w_i ||J[i, :, k, c]||_1 / w_k
        (= ||J||_{1->1} for uniform weights). It is a lower bound on tau(A).

        Returns
        -------
        ratio : float
        argmax : tuple of int
            (k, c): the atom and the coordinate of the worst move.

        References
        ----------
        Spec section 4.5 ("Local ratio (a lower bound on tau(A))"); paper 004 Def. 22.
        """
        J = to_numpy(self.jacobian(mu))
        w = to_numpy(mu.weights)
        col = np.einsum("i,iakc->kc", w, np.abs(J)) / w[:, None]
        k, c = np.unravel_index(int(np.argmax(col)), col.shape)
        return float(col[k, c]), (int(k), int(c))


class MultiHeadTransformerLayer:
    """Multi-head self-attention + FFN as the nonlinear Markov kernel T = M F (Prop. 12).

    M_mu(x, .) = Pi( (1/H) sum_h A^h_mu O^h (x, .) ) with O^h(z, dy) = delta_{H z W_h^O}(dy)
    (row-vector convention), then F(x, dy) = delta_{f(x)}(dy).

    Parameters
    ----------
    WQ, WK, WV : array, shape (H, d', d)
        Per-head projections; head h uses a(x, y) = beta <W_h^Q x, W_h^K y>/sqrt(d') and the
        lookup l_h(y) = W_h^V y.
    WO : array, shape (H, d', d)
        Output matrices; the head-h output row vector y^h is mapped to y^h W_h^O.
    ffn : FeedForward, optional
        f : R^d -> R^d (identity when None).
    beta : float, default 1.0
        Inverse temperature multiplying every head's scores.

    References
    ----------
    Paper 004 appendix A (Prop. 12 proof); spec section 2.3.
    """

    def __init__(self, WQ, WK, WV, WO, ffn: FeedForward | None = None, beta: float = 1.0):
        self.WQ = _as_matrix("WQ", WQ, 3)
        self.WK = _as_matrix("WK", WK, 3)
        self.WV = _as_matrix("WV", WV, 3)
        self.WO = _as_matrix("WO", WO, 3)
        shapes = {n: tuple(a.shape) for n, a in
                  (("WQ", self.WQ), ("WK", self.WK), ("WV", self.WV), ("WO", self.WO))}
        if len(set(shapes.values())) != 1:
            raise ValueError(f"WQ, WK, WV, WO must all have shape (H, d', d), got {shapes}")
        if ffn is not None and not isinstance(ffn, FeedForward):
            raise TypeError(f"ffn must be a FeedForward or None, got {type(ffn).__name__}")
        self.ffn = ffn
        self.beta = _check_real("beta", beta, low=0.0)
        self.heads = tuple(
            SelfAttention(DotProductKernel.from_projections(self.WQ[h], self.WK[h], self.beta),
                          LinearLookup(self.WV[h]))
            for h in range(self.WQ.shape[0]))

    @property
    def n_heads(self) -> int:
        """Number of heads H."""
        return int(self.WQ.shape[0])

    def mixture(self, x, mu: EmpiricalMeasure) -> EmpiricalMeasure:
        """The pre-projection kernel M-hat_mu(x, .) = (1/H) sum_h delta_{H y^h W_h^O}.

        Parameters
        ----------
        x : array, shape (d,)
        mu : EmpiricalMeasure

        Returns
        -------
        EmpiricalMeasure
            H atoms with weights 1/H.

        References
        ----------
        Paper 004 appendix A (definition of M-hat and O^h).
        """
        xq = _as_matrix("x", x, 1)[None, :]
        xp = namespace(xq, mu.points)
        H = self.n_heads
        atoms = xp.stack([H * (head.attend(xq, mu)[0] @ self.WO[h])
                          for h, head in enumerate(self.heads)])
        return EmpiricalMeasure(atoms, xp.full((H,), 1.0 / H))

    def transport(self, mu: EmpiricalMeasure, at=None):
        """T[mu](x) = f(Pi(M-hat_mu(x, .))) at ``at`` (default: atoms of mu): array (M, d)."""
        at = mu.points if at is None else _as_matrix("at", at, 2)
        xp = namespace(at, mu.points)
        out = xp.stack([dirac_projection(self.mixture(at[i], mu)).points[0]
                        for i in range(at.shape[0])])
        return out if self.ffn is None else self.ffn(out)

    def __call__(self, mu: EmpiricalMeasure) -> EmpiricalMeasure:
        """mu T_mu = (T[mu])_# mu (paper 004 Prop. 12)."""
        return EmpiricalMeasure(self.transport(mu), mu.weights)


def iterate(mu0: EmpiricalMeasure, layer: Callable, n_layers: int) -> list:
    """Weight-shared depth recursion mu^{h+1} = layer(mu^h) (Universal Transformer).

    Parameters
    ----------
    mu0 : EmpiricalMeasure
    layer : callable
        A map on measures (e.g. :class:`SelfAttention` or :class:`MultiHeadTransformerLayer`).
    n_layers : int
        Number of applications H >= 0.

    Returns
    -------
    list of EmpiricalMeasure
        [mu^0, ..., mu^H] (length H + 1).

    References
    ----------
    Paper 004 section 6.2 (X^{l+1} = Transformer(X^l)), Prop. 26; spec section 5.2.
    """
    if isinstance(n_layers, bool) or not isinstance(n_layers, (int, np.integer)) or n_layers < 0:
        raise ValueError(f"n_layers must be an integer >= 0, got {n_layers!r}")
    out = [mu0]
    for _ in range(int(n_layers)):
        out.append(layer(out[-1]))
    return out


def wasserstein1(mu: EmpiricalMeasure, nu: EmpiricalMeasure, metric: str = "l1",
                 num_itermax: int = 10_000_000) -> float:
    """Exact 1-Wasserstein distance in paper 004's geometry (l1 ground cost by default).

    Computed by :func:`rieszflow.engine.measures.wasserstein1` (exact CDF formula in 1-D,
    exact optimal transport on an exact-zero cost matrix otherwise); this front end only
    fixes the paper's default metric.

    Parameters
    ----------
    mu, nu : EmpiricalMeasure
        Same dimension d; any numbers of atoms.
    metric : {"l1", "l2"}, default "l1"
        Ground cost ||x - y||_1 (the paper's) or ||x - y||_2.
    num_itermax : int, default 1e7
        Network-simplex iteration cap (POT's default 1e5 silently stops short for N ~ 3000).

    Returns
    -------
    float
        W1(mu, nu) >= 0.

    Raises
    ------
    ValueError
        On a dimension mismatch or an unknown metric.
    RuntimeError
        If the network simplex reports that it did not converge.

    References
    ----------
    Paper 004 section 4 ("Background", W1 with cost ||x - y||_1).
    """
    _check_metric(metric)
    return _measures.wasserstein1(mu, nu, metric=metric, method="exact", num_itermax=num_itermax)


# ----------------------------------------------------------------------------------------------
# the paper's bounds next to the corrected ones (all for the l1 metric unless stated)
# ----------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Bound:
    """A Lipschitz/contraction constant as printed in paper 004 and as corrected.

    Attributes
    ----------
    paper : float
        The constant as printed (may be invalid: see ``paper_valid``).
    corrected : float
        A valid constant (spec section 4; NaN where no certified constant is known).
    sharpened : float
        A valid, tighter constant derived in the spec (NaN where none).
    lower : float
        A lower bound on the true constant (NaN where none is known in closed form).
    paper_valid : bool
        False where the spec documents that the printed constant is not a valid bound.
    """

    paper: float
    corrected: float
    sharpened: float = math.nan
    lower: float = math.nan
    paper_valid: bool = True


def prop19_query_bound(c: KernelConstants) -> Bound:
    """Prop. 19 (i): W1(Psi_{G(x,.)}(mu), Psi_{G(y,.)}(mu)) <= C d(x, y).

    Returns
    -------
    Bound
        paper = 2 ||G||_{Lip,inf} diam/eps (valid); corrected = sharpened =
        ||G||_{Lip,inf} diam/eps (centring the test function, ||f - c||_inf <= diam/2).

    References
    ----------
    Paper 004 Prop. 19, appendix C; spec section 4.2.
    """
    base = c.over_eps(c.log_lip_query) * c.diam
    return Bound(paper=2 * base, corrected=base, sharpened=base, paper_valid=True)


def prop19_key_bound(c: KernelConstants) -> Bound:
    """Prop. 19 (ii): W1(Psi_{G(x,.)}(mu), Psi_{G(x,.)}(nu)) <= C W1(mu, nu).

    Returns
    -------
    Bound
        paper = 2 ||G||_{inf,Lip} diam/eps (**not valid**: the proof drops ||G||_inf ||f||_Lip
        from Lip(G f)); corrected = (2 ||G||_{inf,Lip} diam + ||G||_inf)/eps; sharpened =
        (||G||_{inf,Lip} diam + ||G||_inf)/eps; lower = 1 (Dirac pairs: Psi(delta_a) = delta_a).

    References
    ----------
    Paper 004 Prop. 19, appendix C; spec section 4.2 [P-fix].
    """
    lk = c.over_eps(c.log_lip_key) * c.diam
    gs = c.over_eps(c.log_sup)
    return Bound(paper=2 * lk, corrected=2 * lk + gs, sharpened=lk + gs, lower=1.0,
                 paper_valid=False)


def prop20_bound(d: int) -> Bound:
    """Prop. 20: tau(Pi) for the Dirac projection; printed d, true value 1 (Jensen).

    References
    ----------
    Paper 004 Prop. 20; spec section 4.2 ("Why tau(Pi) = 1").
    """
    return Bound(paper=float(d), corrected=1.0, sharpened=1.0, lower=1.0, paper_valid=True)


def prop21_bound(k_ell: float) -> Bound:
    """Prop. 21: tau(L) <= K_l for a deterministic lookup (valid, attained by Dirac pairs).

    References
    ----------
    Paper 004 Prop. 21; spec section 4.2.
    """
    return Bound(paper=float(k_ell), corrected=float(k_ell), sharpened=float(k_ell),
                 lower=float(k_ell), paper_valid=True)


def _require_l1(c: KernelConstants, what: str) -> None:
    """The printed constants of Thm. 23 / Cor. 24 assume l1 constants (paper 004 section 4)."""
    metric = getattr(c, "metric", None)
    if metric != "l1":
        raise ValueError(f"{what} needs KernelConstants in the l1 metric (the paper's d and sqrt(d) "
                         f"factors convert from l1); got c.metric={metric!r}. Compute the constants "
                         f"with kernel.constants(domain, metric='l1')")


def thm23_bound(c: KernelConstants, k_ell: float, d: int) -> Bound:
    """Thm. 23: contraction coefficient tau(A) of mu -> mu A_mu.

    Parameters
    ----------
    c : KernelConstants
        Constants of G on E in the **l1** metric (``c.metric == "l1"``): the paper's
        tau(Pi) = d and W1 are l1 quantities.
    k_ell : float
        Lipschitz constant K_l of the lookup in l1 (``operator_norm(W, "l1")``).
    d : int
        Token dimension.

    Returns
    -------
    Bound
        paper = d K_l 2 (||G||_{Lip,inf} + ||G||_{inf,Lip}) diam/eps (**not valid**);
        corrected = K_l [2 (Lq + Lk) diam + ||G||_inf]/eps (tau(Pi) = 1);
        sharpened = K_l [(Lq + Lk) diam + ||G||_inf]/eps;
        lower = K_l (Dirac pairs delta_a -> delta_{l(a)}; exact for linear l).

    Raises
    ------
    ValueError
        If ``c.metric != "l1"``.

    References
    ----------
    Paper 004 Thm. 23, appendix C; spec section 4.3 [P-fix].
    """
    _require_l1(c, "thm23_bound")
    lqk = (c.over_eps(c.log_lip_query) + c.over_eps(c.log_lip_key)) * c.diam
    gs = c.over_eps(c.log_sup)
    k = float(k_ell)
    return Bound(paper=d * k * 2 * lqk, corrected=k * (2 * lqk + gs), sharpened=k * (lqk + gs),
                 lower=k, paper_valid=False)


def cor24_bound(c: KernelConstants, k_ell: float, d: int) -> Bound:
    """Cor. 24: l2 -> l2 Lipschitz constant of q -> Attention(q, K, V).

    The l2 statement is derived from l1 constants through ``|x|_2 <= |x|_1 <=
    sqrt(d) |x|_2``; that conversion is the sqrt(d) (corrected) or d^{3/2}
    (paper) factor below, so the constants must be the l1 ones (l2 constants
    would apply the conversion twice).

    Parameters
    ----------
    c : KernelConstants
        Constants of G on E in the **l1** metric (``c.metric == "l1"``).
    k_ell : float
        Lipschitz constant K_l of the lookup in l1.
    d : int
        Token dimension.

    Returns
    -------
    Bound
        paper = d^{3/2} K_l 2 ||G||_{Lip,inf} diam/eps (valid); corrected = sqrt(d) K_l 2
        ||G||_{Lip,inf} diam/eps (tau(Pi) = 1); sharpened = sqrt(d) K_l ||G||_{Lip,inf} diam/eps.

    Raises
    ------
    ValueError
        If ``c.metric != "l1"``.

    References
    ----------
    Paper 004 Cor. 24; spec section 4.4.
    """
    _require_l1(c, "cor24_bound")
    base = c.over_eps(c.log_lip_query) * c.diam * float(k_ell)
    return Bound(paper=d ** 1.5 * 2 * base, corrected=math.sqrt(d) * 2 * base,
                 sharpened=math.sqrt(d) * base, paper_valid=True)


def prop25_bound(q: QueryConstants, k_ell: float, d: int) -> Bound:
    """Prop. 25: ||Attn(x_t, X_N) - Attn(x_t, X_N^)||_1 <= C W1(m(X_N), m(X_N^)).

    Returns
    -------
    Bound
        paper = d K_l 2 ||G(x_t,.)||_Lip diam/eps (**not valid**, inherits Prop. 19 (ii));
        corrected = K_l (2 ||G(x_t,.)||_Lip diam + ||G(x_t,.)||_inf)/eps;
        sharpened = K_l (||G(x_t,.)||_Lip diam + ||G(x_t,.)||_inf)/eps.

    References
    ----------
    Paper 004 Prop. 25; spec section 5.1 [P-fix].
    """
    with np.errstate(over="ignore"):
        lip = float(np.exp(q.log_lip - q.log_eps)) * q.diam
        gs = float(np.exp(q.log_sup - q.log_eps))
    k = float(k_ell)
    return Bound(paper=d * k * 2 * lip, corrected=k * (2 * lip + gs), sharpened=k * (lip + gs),
                 paper_valid=False)


def lemma31_bound(diam: float) -> Bound:
    """Lemma 31 (last line): W1(Psi_G(nu), Psi_F(nu)) <= C ||G/nu(G) - F/nu(F)||_{L1(nu)}.

    Returns
    -------
    Bound
        paper = 1 (the printed last line drops diam(E): **not valid** when diam > 2);
        corrected = diam; sharpened = diam/2 (= diam TV, centred test function).

    References
    ----------
    Paper 004 Lemma 31, appendix B; spec sections 1 (typos) and 4.2.
    """
    return Bound(paper=1.0, corrected=float(diam), sharpened=float(diam) / 2.0,
                 paper_valid=False)


def cor30_constant(n: float, d: int, k_ell: float) -> float:
    """Printed constant of Cor. 30 (Gaussian kernel on E = R^d), flagged **not certified**.

    C30(N, d, K_l) = 2 d K_l [sqrt(d) sqrt(ln N + 1/(2e)) sqrt(2/e) + 1 + sqrt(d) + 2], with
    tau(Pi) = d, ||G||_Lip = sqrt(2/e), ||G||_inf = 1 filled in. The true constant grows at
    least like (1 + ln(N - 1))/2 and exceeds C30 once ln N >= 36 (spec section 4.6).

    Parameters
    ----------
    n : float
        Number of tokens N >= 1 (a float so that N ~ e^60 can be passed).
    d : int
    k_ell : float

    Returns
    -------
    float

    References
    ----------
    Paper 004 Thm. 29, Cor. 30, appendix D; spec section 4.6.
    """
    n = _check_real("n", n, low=1.0)
    return 2 * d * float(k_ell) * (math.sqrt(d) * math.sqrt(math.log(n) + 1 / (2 * math.e))
                                   * math.sqrt(2 / math.e) + 1 + math.sqrt(d) + 2)


def lemma40_bound(n: float) -> float:
    """Lemma 40: sup_{z in R_+^n} sum z_i e^{-z_i^2} / (1 + sum e^{-z_i^2}) <= sqrt(ln n + 1/(2e)).

    References
    ----------
    Paper 004 Lemma 40, appendix D (correct; spec section 4.6).
    """
    n = _check_real("n", n, low=1.0)
    return math.sqrt(math.log(n) + 1 / (2 * math.e))
