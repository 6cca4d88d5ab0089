"""Infinite-width limit of one multi-head attention layer: the layer, its limit law, three samplers.

With scores scaled by ``1/sqrt(n)`` and the numbers of heads ``H`` and tokens ``s`` held fixed,
the output of one attention layer at initialisation converges (width ``n -> infinity``) to a
law that is Gaussian *given* the scores, and the scores converge to a centred Gaussian vector
independent of every other limit variable (Definition 3.1, Theorem 3.1, Example 3.1 of the
reference). The limit of one output coordinate is therefore a Gaussian scale mixture

.. math::

    Z^{y^1} \\mid \\hat p \\sim \\mathcal N\\big(0, \\sigma^2(\\hat p)\\big), \\qquad
    \\sigma^2(\\hat p) = \\frac1H \\sum_{a=1}^H a_a^\\top K_v a_a, \\quad
    a_a = \\mathrm{SoftMax}(\\hat p^{(a)}_{1,:}),

not the infinite-head Gaussian of Hron et al. (2020). Under the alternative ``1/n`` scaling the
scores collapse to 0 and the output is Gaussian.

The finite-width output coordinate ``y_1^1`` is itself an *exact* Gaussian scale mixture,
``y_1^1 | rest ~ N(0, tau_n^2)``; :func:`sample_finite_reduced` draws ``tau_n^2`` exactly in law
from Wishart/Bartlett factors at cost ``O(N H s^3 + N s n)`` instead of the ``(s + 4H) n^2``
normals per network of the literal algorithm (:func:`sample_finite_brute_force`, the reference).

Two KL estimators compare finite-width samples with the limit: the paper's KDE estimator
(:func:`kl_kde_paper`, exactly as the authors' code does it) and a Rao-Blackwellised one
(:func:`kl_rao_blackwell`) that uses the conditional Gaussian densities of both scale mixtures
instead of KDEs. For linear (unnormalised) attention the limit is the symmetric variance-gamma
law in closed form (:func:`variance_gamma_pdf`).

Conventions
-----------
Weights are i.i.d. ``N(0, sigma_W^2 / n)`` (low-rank: ``W^O`` entries ``N(0, sigma_O^2 / n_H)``),
independent across the query, key, value and output matrices and across heads; heads are
combined with the factor ``H^{-1/2}`` (eq. 2). Inputs follow App. B.1: ``h ~ N(0, I_n)``,
``h^i = W^i h`` with ``W^i`` entries ``N(0, sigma_in^2 / n)``, ``x^i = psi(h^i)``. Token and
coordinate indices are 0-based in code (``y[..., 0]`` is the paper's ``y_1^1``). Everything is
float64.

References
----------
M. Sakai, R. Karakida, M. Imaizumi, "Infinite-Width Limit of a Single Attention Layer: Analysis
via Tensor Programs", arXiv:2506.00846: eqs. 1-2 (the layer), Definition 3.1 and Example 3.1
(the limit), Theorem 3.1 and Corollary 3.2, App. B (experiments), Algorithm 1 (brute force).
J. Hron, Y. Bahri, J. Sohl-Dickstein, R. Novak, "Infinite attention: NNGP and NTK for deep
attention networks", arXiv:2006.10540 (the infinite-head Gaussian).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable

import numpy as np
import scipy.special
import scipy.stats

from rieszflow.engine._checks import check_choice, check_int, check_real
from rieszflow.engine.backend import get_backend, namespace

__all__ = [
    "AttentionLayerSpec",
    "SCORE_MAPS",
    "ACTIVATIONS",
    "SCALINGS",
    "clip_constant",
    "input_kernel",
    "score_covariance",
    "apply_score_map",
    "bartlett_factor",
    "sample_limit",
    "sample_finite_reduced",
    "sample_finite_brute_force",
    "paper_kde_grid",
    "kl_kde_paper",
    "scale_mixture_logpdf",
    "kl_rao_blackwell",
    "one_over_n_limit_variance",
    "variance_gamma_pdf",
    "variance_gamma_cdf",
    "linear_attention_scale",
    "KDE_FLOOR",
]

#: Score maps: row-wise softmax (eq. 1), the identity (linear attention, spec section 7), or a
#: user callable (pass the callable itself as ``score_map``).
SCORE_MAPS = ("softmax", "identity")
#: Input activations psi of App. B.1 and B.3.2 (or a user callable).
ACTIVATIONS = ("clip", "relu")
#: Score scalings: ``"sqrt"`` divides q.k by sqrt(n) (eq. 1), ``"n"`` by n (Section 2.2).
SCALINGS = ("sqrt", "n")
#: The constant the paper's code adds to both KDE densities before normalising.
KDE_FLOOR = 1e-12
#: Clipping at C with C / sigma_in at least this large never triggers in float64 for the input
#: variances that occur (probability below 1e-60 per coordinate), so the reduced sampler draws the
#: input Gram matrix from a Wishart law instead of materialising the inputs.
_CLIP_WISHART_MIN = 40.0


@dataclasses.dataclass(frozen=True)
class AttentionLayerSpec:
    """One multi-head attention layer at initialisation (eqs. 1-2, App. B.1 of the reference).

    Parameters
    ----------
    s : int, default 4
        Tokens (sequence length), ``>= 2``.
    H : int, default 2
        Heads, ``>= 1``.
    act : {"clip", "relu"} or callable, default "clip"
        Input nonlinearity psi, applied coordinatewise to ``h^i``; a callable must map a float64
        array to one of the same shape (it is also integrated numerically for ``K_x``).
    C : float, default 100.0
        Clip level (``act="clip"``), ``> 0``.
    score_map : {"softmax", "identity"} or callable, default "softmax"
        Map from one row of scores (shape ``(..., s)``) to attention weights of the same shape.
        A user map should be bounded and pseudo-Lipschitz for Theorem 3.1 to apply (not checked).
    scaling : {"sqrt", "n"}, default "sqrt"
        Divide ``q.k`` by ``sqrt(n)`` (eq. 1) or by ``n`` (Section 2.2). Low-rank heads divide by
        ``sqrt(n_H)`` or ``n_H``.
    n_H : int or None, default None
        Per-head dimension of low-rank heads (App. B.2.1): ``W^{Q,K,V}`` are ``n_H x n`` with
        entries ``N(0, sigma^2/n)`` and ``W^O`` is ``n x n_H`` with entries ``N(0, sigma_O^2/n_H)``.
        None: full-rank ``n x n`` heads.
    sigma_in, sigma_Q, sigma_K, sigma_V, sigma_O : float, default 1.0
        Standard deviations sigma_W of the input matrices ``W^i`` and of the head matrices, ``> 0``.

    Raises
    ------
    ValueError, TypeError
        Naming the parameter, the value and what is allowed.

    References
    ----------
    Sakai, Karakida, Imaizumi, arXiv:2506.00846, eqs. 1-2, App. B.1, B.2.1, B.3.2.
    """

    s: int = 4
    H: int = 2
    act: object = "clip"
    C: float = 100.0
    score_map: object = "softmax"
    scaling: str = "sqrt"
    n_H: int | None = None
    sigma_in: float = 1.0
    sigma_Q: float = 1.0
    sigma_K: float = 1.0
    sigma_V: float = 1.0
    sigma_O: float = 1.0

    def __post_init__(self):
        check_int("s", self.s, minimum=2)
        check_int("H", self.H, minimum=1)
        if not callable(self.act):
            check_choice("act", self.act, ACTIVATIONS)
        check_real("C", self.C, positive=True)
        if not callable(self.score_map):
            check_choice("score_map", self.score_map, SCORE_MAPS)
        check_choice("scaling", self.scaling, SCALINGS)
        if self.n_H is not None:
            check_int("n_H", self.n_H, minimum=1)
        for name in ("sigma_in", "sigma_Q", "sigma_K", "sigma_V", "sigma_O"):
            object.__setattr__(self, name, check_real(name, getattr(self, name), positive=True))

    def replace(self, **changes) -> "AttentionLayerSpec":
        """A copy with ``changes`` applied (validated again).

        Parameters
        ----------
        **changes
            Field names and new values.

        Returns
        -------
        AttentionLayerSpec
        """
        return dataclasses.replace(self, **changes)

    def psi(self, u):
        """The input nonlinearity applied coordinatewise.

        Parameters
        ----------
        u : array
            Pre-activations ``h^i``, any shape (NumPy or CuPy).

        Returns
        -------
        array
            ``psi(u)``, same shape.
        """
        if callable(self.act):
            return self.act(u)
        if self.act == "relu":
            return u * (u > 0)
        return u.clip(-self.C, self.C)

    def head_dim(self, n: int) -> int:
        """Per-head dimension ``d``: ``n`` (full rank) or ``n_H`` (low rank).

        Parameters
        ----------
        n : int
            Width.

        Returns
        -------
        int
        """
        return n if self.n_H is None else self.n_H


def clip_constant(C: float) -> float:
    """``c_C = E[clip(Z, -C, C)^2]`` for ``Z ~ N(0, 1)``, the clip input kernel's diagonal.

    ``c_C = 2 C^2 (1 - Phi(C)) - 2 C phi(C) + 2 Phi(C) - 1``; ``c_1 = 0.516059``, and ``c_100``
    equals 1 in float64.

    Parameters
    ----------
    C : float
        Clip level, ``> 0``.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        If ``C <= 0``.

    References
    ----------
    Sakai, Karakida, Imaizumi, arXiv:2506.00846, App. B.1 (clip activation, K_x = c_C I).
    """
    C = check_real("C", C, positive=True)
    sf = scipy.stats.norm.sf(C)
    return float(2 * C * C * sf - 2 * C * scipy.stats.norm.pdf(C) + 1.0 - 2 * sf)


def input_kernel(spec: AttentionLayerSpec) -> np.ndarray:
    """The input kernel ``K_x(j, j') = E[Z^{x^j} Z^{x^{j'}}]`` of Definition 3.1.

    The ``Z^{h^i}`` are i.i.d. ``N(0, sigma_in^2)`` (distinct matrices ``W^i``), so
    ``K_x = (E psi^2 - (E psi)^2) I + (E psi)^2 1 1^T``. Clip: ``sigma_in^2 c_{C/sigma_in} I``;
    ReLU: ``sigma_in^2 [(1/2 - 1/(2 pi)) I + 1/(2 pi) 1 1^T]``; a callable: the trapezoid rule
    against the normal density on 240,001 points of ``[-12, 12]`` (kinks such as ReLU's converge).

    Parameters
    ----------
    spec : AttentionLayerSpec

    Returns
    -------
    numpy.ndarray, shape (s, s), float64

    References
    ----------
    Sakai, Karakida, Imaizumi, arXiv:2506.00846, Definition 3.1 (A), App. B.1, B.3.2.
    """
    sig = spec.sigma_in
    if callable(spec.act):
        z = np.linspace(-12.0, 12.0, 240_001)          # trapezoid on a fine grid: kinks converge O(h^2)
        w = scipy.stats.norm.pdf(z) * (z[1] - z[0])
        w[[0, -1]] *= 0.5
        w = w / w.sum()
        vals = np.asarray(spec.act(sig * z), dtype=np.float64)
        if vals.shape != z.shape or not np.all(np.isfinite(vals)):
            raise ValueError("act: the callable must map a float64 array to a finite array of the same shape")
        m1, m2 = float(w @ vals), float(w @ vals ** 2)
    elif spec.act == "relu":
        m1, m2 = sig / math.sqrt(2 * math.pi), sig * sig / 2
    else:
        m1, m2 = 0.0, sig * sig * clip_constant(spec.C / sig)
    return (m2 - m1 * m1) * np.eye(spec.s) + m1 * m1 * np.ones((spec.s, spec.s))


def score_covariance(spec: AttentionLayerSpec) -> np.ndarray:
    """Covariance of the limit scores of one head, ``sigma_Q^2 sigma_K^2 K_x (x) K_x``.

    Row-major ``vec``: entry ``(i s + j, i' s + j')`` is ``Cov(p_ij, p_i'j')``. Heads are
    independent, and the scores are independent of every vector limit variable. Under the
    ``1/n`` scaling the limit scores are 0 (this function still returns the ``1/sqrt(n)``
    covariance; :func:`sample_limit` applies the scaling).

    Parameters
    ----------
    spec : AttentionLayerSpec

    Returns
    -------
    numpy.ndarray, shape (s*s, s*s)

    References
    ----------
    Sakai, Karakida, Imaizumi, arXiv:2506.00846, Definition 3.1 (B), Lemma D.5, Example 3.1.
    """
    K = input_kernel(spec)
    return (spec.sigma_Q * spec.sigma_K) ** 2 * np.kron(K, K)


def apply_score_map(spec: AttentionLayerSpec, scores):
    """Attention weights from scores, row-wise over the last axis.

    Parameters
    ----------
    spec : AttentionLayerSpec
    scores : array, shape (..., s)
        Scores of query rows (NumPy or CuPy).

    Returns
    -------
    array, shape (..., s)
        Softmax (the row maximum subtracted before ``exp``), the scores themselves (identity), or
        the user map's output.

    Raises
    ------
    ValueError
        If a user map returns another shape or non-finite values.
    """
    if callable(spec.score_map):
        out = spec.score_map(scores)
        if out.shape != scores.shape:
            raise ValueError(f"score_map: the callable returned shape {out.shape} for scores of shape "
                             f"{scores.shape}; it must keep the shape")
        return out
    if spec.score_map == "identity":
        return scores
    xp = namespace(scores)
    e = xp.exp(scores - scores.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def bartlett_factor(rng: np.random.Generator, N: int, df: int, s: int) -> np.ndarray:
    """Lower-triangular ``R`` with ``R R^T ~ Wishart_s(df, I)`` (Bartlett decomposition).

    ``R_kk = sqrt(chi2_{df - k})`` (0-based ``k``), ``N(0, 1)`` below the diagonal.

    Parameters
    ----------
    rng : numpy.random.Generator
    N : int
        Independent factors.
    df : int
        Degrees of freedom, ``>= s``.
    s : int
        Dimension.

    Returns
    -------
    numpy.ndarray, shape (N, s, s)

    Raises
    ------
    ValueError
        If ``df < s``.
    """
    if df < s:
        raise ValueError(f"df={df}: the Bartlett decomposition needs df >= s = {s}")
    R = np.tril(rng.standard_normal((N, s, s)), -1)
    idx = np.arange(s)
    R[:, idx, idx] = np.sqrt(rng.chisquare(df - idx, size=(N, s)))
    return R


def _psd_sqrt(M: np.ndarray) -> np.ndarray:
    """``L`` with ``L L^T = M`` for (batches of) symmetric PSD ``M``; eigenvalues clipped at 0."""
    w, U = np.linalg.eigh(M)
    return U * np.sqrt(np.clip(w, 0.0, None))[..., None, :]


def _check_N(N):
    return check_int("N", N, minimum=1)


def sample_limit(spec: AttentionLayerSpec, N: int, rng: np.random.Generator, *,
                 tokens: str = "first") -> dict:
    """Samples of the limit law ``Z^{y^i}`` of Example 3.1, with their conditional variances.

    Token 1 (``tokens="first"``) uses the Rao-Blackwellised form: draw row 1 of each head's
    scores, ``~ N(0, sigma_Q^2 sigma_K^2 K_x(1,1) K_x)``, set
    ``sigma^2 = (1/H) sum_a a_a^T K_v a_a`` and ``y = sigma N(0, 1)``. ``tokens="all"`` draws the
    full score matrices ``P ~ N(0, K_p)`` and values ``Z^v ~ N(0, K_v)`` and returns the joint
    sample over tokens with the conditional covariance ``Sigma(p)``. Under ``scaling="n"`` the
    limit scores are 0.

    Parameters
    ----------
    spec : AttentionLayerSpec
        ``n_H`` is ignored (the limit of low-rank heads is taken as the full-rank limit with the
        same ``H``, as the authors' code does; Theorem 3.1 does not cover fixed ``n_H``).
    N : int
        Samples, ``>= 1``.
    rng : numpy.random.Generator
    tokens : {"first", "all"}, default "first"

    Returns
    -------
    dict
        ``"y"``: shape (N,) (first) or (N, s) (all); ``"sigma2"``: conditional variance of token 1,
        shape (N,); with ``tokens="all"`` also ``"Sigma"``, shape (N, s, s).

    References
    ----------
    Sakai, Karakida, Imaizumi, arXiv:2506.00846, Definition 3.1, Example 3.1, Corollary 3.2.
    """
    N = _check_N(N)
    check_choice("tokens", tokens, ("first", "all"))
    s, H = spec.s, spec.H
    Kx = input_kernel(spec)
    Kv = (spec.sigma_O * spec.sigma_V) ** 2 * Kx
    Lx = _psd_sqrt(Kx)
    sqk = spec.sigma_Q * spec.sigma_K
    zero = spec.scaling == "n"
    if tokens == "first":
        Lrow = math.sqrt(Kx[0, 0]) * Lx
        sigma2 = np.zeros(N)
        for _ in range(H):
            row = np.zeros((N, s)) if zero else sqk * rng.standard_normal((N, s)) @ Lrow.T
            a = apply_score_map(spec, row)
            sigma2 += np.einsum("ni,ij,nj->n", a, Kv, a)
        sigma2 /= H
        return {"y": np.sqrt(sigma2) * rng.standard_normal(N), "sigma2": sigma2}
    Lv = _psd_sqrt(Kv)
    Y = np.zeros((N, s))
    Sigma = np.zeros((N, s, s))
    for _ in range(H):
        P = np.zeros((N, s, s)) if zero else sqk * Lx @ rng.standard_normal((N, s, s)) @ Lx.T
        A = apply_score_map(spec, P)
        zv = rng.standard_normal((N, s)) @ Lv.T
        Y += np.einsum("nij,nj->ni", A, zv)
        Sigma += A @ Kv @ np.swapaxes(A, -1, -2)
    Y /= math.sqrt(H)
    Sigma /= H
    return {"y": Y, "sigma2": Sigma[:, 0, 0].copy(), "Sigma": Sigma}


def _gram(spec: AttentionLayerSpec, n: int, N: int, rng: np.random.Generator, chunk: int) -> np.ndarray:
    """Input Gram matrices ``Gamma = X X^T / n``, shape (N, s, s), exactly in law (spec 3.1 facts 1, 5)."""
    s = spec.s
    r2 = spec.sigma_in ** 2 * rng.chisquare(n, size=N) / n          # |W^i h|^2 / n scale, shared by tokens
    if not callable(spec.act) and spec.act == "clip" and spec.C / spec.sigma_in >= _CLIP_WISHART_MIN:
        R = bartlett_factor(rng, N, n, s) if n >= s else None
        if R is None:
            Xi = rng.standard_normal((N, s, n))
            S = Xi @ np.swapaxes(Xi, -1, -2)
        else:
            S = R @ np.swapaxes(R, -1, -2)
        return r2[:, None, None] * S / n
    out = np.empty((N, s, s))
    r = np.sqrt(r2)
    for lo in range(0, N, chunk):
        hi = min(N, lo + chunk)
        X = spec.psi(r[lo:hi, None, None] * rng.standard_normal((hi - lo, s, n)))
        out[lo:hi] = X @ np.swapaxes(X, -1, -2) / n
    return out


def sample_finite_reduced(spec: AttentionLayerSpec, n: int, N: int, rng: np.random.Generator, *,
                          chunk_elements: int = 2 ** 22, return_scores: bool = False) -> dict:
    """Exact reduced sampler of the finite-width output ``y_1^1`` (one network per sample).

    Given everything but ``W^O``, ``y^1`` has i.i.d. coordinates ``N(0, tau_n^2)`` with
    ``tau_n^2 = (1/H) sum_a sigma_O^2 sigma_V^2 a_a^T L (S_V^{(a)} / d) L^T a_a``, where
    ``L L^T = Gamma = X X^T / n``, ``a_a = map(G^{(a)}_{1,:})``,
    ``G^{(a)} = sigma_Q sigma_K L R N L^T / sqrt(d)`` (``/ d`` under ``scaling="n"``),
    ``R R^T, S_V ~ Wishart_s(d, I)`` (Bartlett) and ``N`` an ``s x s`` standard normal matrix;
    ``d = n`` (full rank) or ``n_H``. Exact in law, cost ``O(N H s^3 + N s n)``. The input Gram
    matrix is drawn from a Wishart law for clip with ``C / sigma_in >= 40`` (clipping never
    triggers) and from explicit inputs ``X = psi(r zeta)`` otherwise, in chunks of about
    ``chunk_elements`` floats.

    Parameters
    ----------
    spec : AttentionLayerSpec
    n : int
        Width, ``>= 1`` (``>= n_H`` for low rank); the head dimension must be ``>= s``.
    N : int
        Samples (independent networks).
    rng : numpy.random.Generator
    chunk_elements : int, default 2**22
        Memory bound of the explicit input path (floats per chunk).
    return_scores : bool, default False
        Also return head 1's whole raw score matrix (an extra ``O(N s^3)``).

    Returns
    -------
    dict
        ``"y"`` (N,): samples of ``y_1^1``; ``"tau2"`` (N,): their conditional variances;
        ``"qk11"`` (N,): the raw dot product ``q^{1,1} . k^{1,1}`` of head 1 (divide by
        ``sqrt(d)`` or ``d`` for the score ``p_11^{(1)}``); with ``return_scores``, ``"qk"``
        (N, s, s): head 1's raw ``q^{1,i} . k^{1,j}``.

    Raises
    ------
    ValueError
        If the head dimension is smaller than ``s`` (use the brute-force sampler).

    References
    ----------
    Sakai, Karakida, Imaizumi, arXiv:2506.00846, eqs. 1-2 and App. B (the law sampled);
    the reduction is derived in docs/infinite_width.md (Bartlett decomposition of Wishart matrices).
    """
    n = check_int("n", n, minimum=1)
    N = _check_N(N)
    s, H = spec.s, spec.H
    d = spec.head_dim(n)
    if spec.n_H is not None and spec.n_H > n:
        raise ValueError(f"n_H={spec.n_H} exceeds the width n={n}")
    if d < s:
        raise ValueError(f"head dimension {d} < s = {s}: the reduced sampler needs d >= s; use "
                         f"sample_finite_brute_force")
    chunk = max(1, int(chunk_elements) // (s * n))
    L = _psd_sqrt(_gram(spec, n, N, rng, chunk))                       # (N, s, s)
    scale = spec.sigma_Q * spec.sigma_K / (math.sqrt(d) if spec.scaling == "sqrt" else d)
    LT = np.swapaxes(L, -1, -2)
    tau2 = np.zeros(N)
    qk11 = None
    for a_ in range(H):
        R = bartlett_factor(rng, N, d, s)
        Nm = rng.standard_normal((N, s, s))
        g = np.einsum("ni,nij->nj", L[:, 0, :], R)
        g = np.einsum("ni,nij->nj", g, Nm)
        g = np.einsum("ni,nij->nj", g, LT)                             # raw q^1 . k^j / (sQ sK)
        if a_ == 0:
            qk11 = spec.sigma_Q * spec.sigma_K * g[:, 0]
            if return_scores:
                qk = spec.sigma_Q * spec.sigma_K * (L @ R @ Nm @ LT)
        a = apply_score_map(spec, scale * g)
        RV = bartlett_factor(rng, N, d, s)
        La = np.einsum("nij,ni->nj", L, a)                             # L^T a
        w = np.einsum("nji,nj->ni", RV, La)                            # RV^T L^T a
        tau2 += np.einsum("ni,ni->n", w, w)
    tau2 *= (spec.sigma_O * spec.sigma_V) ** 2 / d / H
    out = {"y": np.sqrt(tau2) * rng.standard_normal(N), "tau2": tau2, "qk11": qk11}
    if return_scores:
        out["qk"] = qk
    return out


def sample_finite_brute_force(spec: AttentionLayerSpec, n: int, N: int, rng: np.random.Generator, *,
                              full_output: bool = False, backend: str = "numpy",
                              chunk_bytes: int = 2 ** 27) -> dict:
    """The literal finite-width layer (the paper's Algorithm 1), one independent network per sample.

    Per network: ``h ~ N(0, I_n)``, ``h^i = W^i h``, ``x^i = psi(h^i)``; per head the full weight
    matrices, ``p = (W^Q x^i)^T (W^K x^j) / sqrt(d)`` (or ``/ d``), ``A = map(p)`` and
    ``y^i = H^{-1/2} sum_a sum_j A_ij W^{O,a} W^{V,a} x^j``. Networks are drawn in batches of at most
    ``chunk_bytes`` of weights per head; only the first row of ``W^O`` is drawn unless
    ``full_output``. Random numbers come from ``rng`` on the host (the same on every backend).

    Parameters
    ----------
    spec : AttentionLayerSpec
    n : int
        Width, ``>= 1``.
    N : int
        Networks.
    rng : numpy.random.Generator
    full_output : bool, default False
        Draw all of ``W^O`` and also return the within-network statistics of the ``n``
        coordinates of ``y^1`` (Theorem 3.1).
    backend : {"numpy", "cupy"}, default "numpy"
    chunk_bytes : int, default 2**27
        Memory bound for one head's weights of one batch of networks.

    Returns
    -------
    dict
        ``"y"`` (N,): ``y_1^1``; ``"tau2"`` (N,): its conditional variance given all but ``W^O``;
        ``"qk11"`` (N,): raw ``q^{1,1} . k^{1,1}`` of head 1; ``"sigma2_net"`` (N,): the limit
        conditional variance ``(1/H) sum_a a_a^T K_v a_a`` at the network's own scores. With
        ``full_output``: ``"m2"`` (N,), ``(1/n) sum_alpha (y^1_alpha)^2``, and ``"kurt_within"``
        (N,), the excess kurtosis of the ``n`` coordinates of ``y^1``.

    References
    ----------
    Sakai, Karakida, Imaizumi, arXiv:2506.00846, eqs. 1-2, Algorithm 1, App. B.1, B.2.1.
    """
    n = check_int("n", n, minimum=1)
    N = _check_N(N)
    bk = get_backend(backend)
    xp = bk.xp
    s, H = spec.s, spec.H
    d = spec.head_dim(n)
    if spec.n_H is not None and spec.n_H > n:
        raise ValueError(f"n_H={spec.n_H} exceeds the width n={n}")
    n_out = d                                    # W^O entries N(0, sigma_O^2 / n_out)
    scale = 1.0 / (math.sqrt(d) if spec.scaling == "sqrt" else d)
    Kv = bk.asarray((spec.sigma_O * spec.sigma_V) ** 2 * input_kernel(spec))
    B = max(1, int(chunk_bytes) // (8 * n * max(n, d) * (1 + s)))
    keys = ("y", "tau2", "qk11", "sigma2_net") + (("m2", "kurt_within") if full_output else ())
    out = {k: np.empty(N) for k in keys}
    for lo in range(0, N, B):
        b = min(N, lo + B) - lo
        h = bk.normal(rng, (b, n, 1))
        X = bk.asarray(np.empty((b, s, n)))
        for i in range(s):                       # h^i = W^i h, one (b, n, n) matrix at a time
            X[:, i, :] = (bk.normal(rng, (b, n, n), spec.sigma_in / math.sqrt(n)) @ h)[..., 0]
        X = spec.psi(X)
        XT = xp.swapaxes(X, -1, -2)
        y = xp.zeros(b)
        yvec = xp.zeros((b, n)) if full_output else None
        tau2 = xp.zeros(b)
        sig2 = xp.zeros(b)
        for a_ in range(H):
            Q = bk.normal(rng, (b, d, n), spec.sigma_Q / math.sqrt(n)) @ XT       # (b, d, s)
            K = bk.normal(rng, (b, d, n), spec.sigma_K / math.sqrt(n)) @ XT
            V = bk.normal(rng, (b, d, n), spec.sigma_V / math.sqrt(n)) @ XT
            G = xp.swapaxes(Q, -1, -2) @ K                                          # (b, s, s) raw
            if a_ == 0:
                qk11 = G[:, 0, 0].copy()
            A = apply_score_map(spec, scale * G)
            u = (V @ A[:, 0, :, None])[..., 0]                                      # (b, d): V^T a
            tau2 += (spec.sigma_O ** 2 / n_out) * (u * u).sum(-1)
            sig2 += xp.einsum("bi,ij,bj->b", A[:, 0, :], Kv, A[:, 0, :])
            if full_output:
                WO = bk.normal(rng, (b, n, d), spec.sigma_O / math.sqrt(n_out))
                yvec += (WO @ u[..., None])[..., 0]
            else:
                y += (bk.normal(rng, (b, d), spec.sigma_O / math.sqrt(n_out)) * u).sum(-1)
        sl = slice(lo, lo + b)
        out["tau2"][sl] = bk.to_numpy(tau2 / H)
        out["qk11"][sl] = bk.to_numpy(qk11)
        out["sigma2_net"][sl] = bk.to_numpy(sig2 / H)
        if full_output:
            yvec /= math.sqrt(H)
            out["y"][sl] = bk.to_numpy(yvec[:, 0])
            m2 = (yvec ** 2).mean(-1)
            out["m2"][sl] = bk.to_numpy(m2)
            c = yvec - yvec.mean(-1, keepdims=True)
            out["kurt_within"][sl] = bk.to_numpy((c ** 4).mean(-1) / (c ** 2).mean(-1) ** 2 - 3.0)
        else:
            out["y"][sl] = bk.to_numpy(y / math.sqrt(H))
    return out


def paper_kde_grid(*samples, num: int = 500) -> np.ndarray:
    """The global evaluation grid of the authors' ``compute_kl``: ``linspace(min, max, num)``.

    ``min`` and ``max`` are taken over **every** sample passed (the code pools all trials, all
    widths, finite and limit).

    Parameters
    ----------
    *samples : array_like
        Sample arrays of any shapes (NaN ignored).
    num : int, default 500

    Returns
    -------
    numpy.ndarray, shape (num,)

    References
    ----------
    Sakai, Karakida, Imaizumi, arXiv:2506.00846, Section 5 (KL of KDEs); public code ``compute_kl``.
    """
    num = check_int("num", num, minimum=2)
    lo = min(float(np.nanmin(np.asarray(a))) for a in samples)
    hi = max(float(np.nanmax(np.asarray(a))) for a in samples)
    return np.linspace(lo, hi, num)


def kl_kde_paper(y_emp, y_theo, grid) -> float:
    """The paper's KL estimator ``KL(Dist(y_1^1) || Dist(Z^{y^1}))``, exactly as its code.

    ``scipy.stats.gaussian_kde`` (Scott's bandwidth) of each sample, evaluated on ``grid``,
    plus ``1e-12``, each normalised by ``numpy.trapezoid``, then ``scipy.stats.entropy(p, q)``
    (which renormalises to sum 1: a Riemann sum of the continuous KL). Biased upward by the KDE
    smoothing, the ``1e-12`` floor in the tails and the sampling noise of both KDEs: its floor (limit
    against an independent limit sample of 50,000) is 7.9e-4 for the paper's E1 law, and it
    exceeds the Rao-Blackwellised estimate by 40 % at n = 16 (measured, docs/infinite_width.md).

    Parameters
    ----------
    y_emp, y_theo : array_like, shape (M,), (M',)
        Finite-width and limit samples.
    grid : array_like, shape (G,)
        Evaluation grid (:func:`paper_kde_grid`).

    Returns
    -------
    float
        Nats.

    References
    ----------
    Sakai, Karakida, Imaizumi, arXiv:2506.00846, Section 5; public code ``compute_kl``.
    """
    grid = np.asarray(grid, dtype=np.float64)
    p = scipy.stats.gaussian_kde(np.asarray(y_emp, dtype=np.float64))(grid) + KDE_FLOOR
    q = scipy.stats.gaussian_kde(np.asarray(y_theo, dtype=np.float64))(grid) + KDE_FLOOR
    p /= np.trapezoid(p, grid)
    q /= np.trapezoid(q, grid)
    return float(scipy.stats.entropy(p, q))


def _binned_variances(v: np.ndarray, bins: int):
    v = np.asarray(v, dtype=np.float64).ravel()
    if v.size == 0 or not np.all(np.isfinite(v)) or np.any(v <= 0):
        raise ValueError("variances must be a non-empty array of finite values > 0")
    if bins is None or np.unique(v).size <= bins:
        vals, counts = np.unique(v, return_counts=True)
        return vals, counts / v.size
    edges = np.geomspace(v.min(), v.max() * (1 + 1e-12), bins + 1)
    idx = np.clip(np.searchsorted(edges, v, side="right") - 1, 0, bins - 1)
    counts = np.bincount(idx, minlength=bins)
    sums = np.bincount(idx, weights=v, minlength=bins)
    keep = counts > 0
    return sums[keep] / counts[keep], counts[keep] / v.size


def scale_mixture_logpdf(y, variances, *, bins: int | None = 3000) -> np.ndarray:
    """Log-density of the centred Gaussian scale mixture ``(1/M) sum_m N(y; 0, v_m)``.

    The variances are histogrammed into ``bins`` logarithmic bins, each replaced by its mean
    (``bins=None``: exact). Evaluated with ``logsumexp``, so tails do not underflow.

    Parameters
    ----------
    y : array_like, shape (G,)
    variances : array_like, shape (M,)
        Positive conditional variances (``tau_n^2`` or ``sigma^2(p)``).
    bins : int or None, default 3000

    Returns
    -------
    numpy.ndarray, shape (G,)

    Raises
    ------
    ValueError
        If a variance is not finite and positive.
    """
    vals, w = _binned_variances(variances, bins)
    y = np.asarray(y, dtype=np.float64)
    out = np.empty(y.shape)
    for lo in range(0, y.size, 512):
        yy = y[lo:lo + 512, None]
        terms = np.log(w) - 0.5 * np.log(2 * np.pi * vals) - yy * yy / (2 * vals)
        out[lo:lo + 512] = scipy.special.logsumexp(terms, axis=1)
    return out


def kl_rao_blackwell(var_p, var_q, *, bins: int | None = 3000, num: int = 4001,
                     half_width: float | None = None) -> float:
    """Rao-Blackwellised ``KL(P || Q)`` between two centred Gaussian scale mixtures.

    Both the finite-width output (``y | tau_n^2 ~ N(0, tau_n^2)``) and the limit
    (``Z | sigma^2 ~ N(0, sigma^2)``) are Gaussian given one scalar; their densities are estimated
    by the mixtures of the conditional Gaussians over the sampled variances
    (:func:`scale_mixture_logpdf`) instead of KDEs of the ``y`` samples, and
    ``KL = int p (log p - log q)`` by the trapezoid rule on ``linspace(-L, L, num)``. By the data
    processing inequality ``KL(y_n || Z) <= KL(tau_n^2 || sigma^2)``. Noise floor (two independent
    limit sets of 50,000): 2.7e-7 for the paper's E1 law, 4e-9 to 2e-6 over E1-E6 (measured,
    docs/infinite_width.md), against 4e-4 to 8e-4 for :func:`kl_kde_paper`. ``var_q`` may be a single
    value (a Gaussian ``N(0, v)``, e.g. the infinite-head Gaussian).

    Parameters
    ----------
    var_p, var_q : array_like, shape (M,), (M',)
        Conditional variances of the two mixtures.
    bins : int or None, default 3000
        Logarithmic bins of the variances (None: exact, ``O(M G)``).
    num : int, default 4001
        Grid points.
    half_width : float, optional
        ``L``; default ``max(8, 13 sqrt(max mean variance))`` (``[-8, 8]`` at the clip variance 0.392).

    Returns
    -------
    float
        Nats.
    """
    var_p, var_q = np.atleast_1d(np.asarray(var_p, float)), np.atleast_1d(np.asarray(var_q, float))
    if half_width is None:
        half_width = max(8.0, 13.0 * math.sqrt(max(var_p.mean(), var_q.mean())))
    half_width = check_real("half_width", half_width, positive=True)
    y = np.linspace(-half_width, half_width, check_int("num", num, minimum=3))
    lp = scale_mixture_logpdf(y, var_p, bins=bins)
    lq = scale_mixture_logpdf(y, var_q, bins=bins)
    return float(np.trapezoid(np.exp(lp) * (lp - lq), y))


def one_over_n_limit_variance(spec: AttentionLayerSpec) -> float:
    """Variance of the output limit under the ``1/n`` score scaling: ``kappa^2 = 1^T K_v 1 / s^2``.

    The scores converge to 0, the softmax to ``1/s``, and every token has the same Gaussian limit
    output (softmax score map only).

    Parameters
    ----------
    spec : AttentionLayerSpec

    Returns
    -------
    float
        ``1/s`` for clip at ``C = 100``; ``1/(2 pi) + (1/2 - 1/(2 pi)) / s`` for ReLU.

    References
    ----------
    Sakai, Karakida, Imaizumi, arXiv:2506.00846, Section 2.2.
    """
    Kv = (spec.sigma_O * spec.sigma_V) ** 2 * input_kernel(spec)
    return float(Kv.sum() / spec.s ** 2)


def linear_attention_scale(spec: AttentionLayerSpec) -> float:
    """Scale ``b`` of the linear-attention limit ``Z = b H^{-1/2} sum_{a,j} xi_{aj} zeta_{aj}``.

    For ``K_x = c I`` (clip inputs), identity score map and ``1/sqrt(n)`` scaling,
    ``b = sigma_Q sigma_K sigma_V sigma_O c^{3/2}``.

    Parameters
    ----------
    spec : AttentionLayerSpec

    Returns
    -------
    float

    Raises
    ------
    ValueError
        If the score map is not the identity, the scaling is not ``"sqrt"``, or ``K_x`` is not a
        multiple of the identity.
    """
    if spec.score_map != "identity" or spec.scaling != "sqrt":
        raise ValueError("linear_attention_scale: needs score_map='identity' and scaling='sqrt'")
    K = input_kernel(spec)
    c = K[0, 0]
    if not np.allclose(K, c * np.eye(spec.s), atol=1e-12):
        raise ValueError("linear_attention_scale: the input kernel K_x is not a multiple of the identity "
                         "(ReLU inputs); sample the limit with sample_limit instead")
    return float(spec.sigma_Q * spec.sigma_K * spec.sigma_V * spec.sigma_O * c ** 1.5)


def variance_gamma_pdf(y, s: int, H: int, scale: float = 1.0) -> np.ndarray:
    """Density of the linear-attention limit: the symmetric variance-gamma law.

    ``Z = scale H^{-1/2} sum_{a <= H, j <= s} xi_aj zeta_aj`` with i.i.d. standard normals has the
    characteristic function ``(1 + scale^2 t^2 / H)^{-sH/2}``; with ``lam = sH/2`` and
    ``alpha = sqrt(H) / scale``,
    ``f(y) = alpha^{2 lam} |y|^{lam - 1/2} K_{lam - 1/2}(alpha |y|) / (sqrt(pi) Gamma(lam) (2 alpha)^{lam - 1/2})``.
    Variance ``s scale^2``, excess kurtosis ``6 / (s H)``, exponential tails.

    Parameters
    ----------
    y : array_like
    s, H : int
        Tokens and heads, ``>= 1``.
    scale : float, default 1.0
        :func:`linear_attention_scale`.

    Returns
    -------
    numpy.ndarray
        Same shape as ``y`` (``inf`` at 0 when ``s H = 1``).

    References
    ----------
    Derived from Sakai, Karakida, Imaizumi, arXiv:2506.00846, Theorem 3.1 / Corollary 3.2 with the
    identity score map (docs/infinite_width.md, "Linear attention").
    """
    s, H = check_int("s", s, minimum=1), check_int("H", H, minimum=1)
    scale = check_real("scale", scale, positive=True)
    lam = s * H / 2.0
    alpha = math.sqrt(H) / scale
    nu = lam - 0.5
    y = np.abs(np.asarray(y, dtype=np.float64))
    z = alpha * y
    with np.errstate(divide="ignore", invalid="ignore"):
        logf = (2 * lam * math.log(alpha) + nu * np.log(y) + np.log(scipy.special.kve(nu, z)) - z
                - 0.5 * math.log(math.pi) - scipy.special.gammaln(lam) - nu * math.log(2 * alpha))
        f = np.exp(logf)
    at0 = y == 0
    if np.any(at0):
        f0 = (alpha * math.exp(scipy.special.gammaln(nu) - scipy.special.gammaln(lam)) / (2 * math.sqrt(math.pi))
              if nu > 0 else math.inf)
        f = np.where(at0, f0, f)
    return f


def variance_gamma_cdf(y, s: int, H: int, scale: float = 1.0, *, num: int = 200_001) -> np.ndarray:
    """CDF of :func:`variance_gamma_pdf` by the cumulative trapezoid rule on a fine symmetric grid.

    Parameters
    ----------
    y : array_like
    s, H : int
    scale : float, default 1.0
    num : int, default 200001
        Grid points on ``[0, 60 scale sqrt(s)]`` (absolute error below 1e-8 for ``s H >= 2``).

    Returns
    -------
    numpy.ndarray
        Same shape as ``y``.
    """
    top = 60.0 * scale * math.sqrt(s)
    g = np.linspace(0.0, top, num)
    f = variance_gamma_pdf(g, s, H, scale)
    if not np.isfinite(f[0]):
        f[0] = f[1]
    half = np.concatenate([[0.0], np.cumsum(0.5 * (f[1:] + f[:-1]) * np.diff(g))])
    half /= 2 * half[-1]                          # symmetric: mass 1/2 on [0, inf)
    y = np.asarray(y, dtype=np.float64)
    a = np.interp(np.abs(y), g, half, right=0.5)
    return np.where(y >= 0, 0.5 + a, 0.5 - a)
