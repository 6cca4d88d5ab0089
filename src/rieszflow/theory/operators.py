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

The bounds module (:mod:`rieszflow.theory.bounds`) holds the paper's regularity constants (section 5, appendix C) next to the
corrected ones of the implementation spec (``docs/specs/paper004_attention_theory.md``,
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

from typing import Callable

import numpy as np

from rieszflow.engine import measures as _measures
from rieszflow.engine.backend import namespace, to_numpy
from rieszflow.engine.measures import EmpiricalMeasure
from rieszflow.theory.potentials import DotProductKernel, InteractionPotential
from rieszflow.theory._common import _as_matrix, _check_metric, _check_real, _logsumexp, operator_norm

__all__ = [
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
]



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
        """Values l(y_j) for keys Y of shape (N, d): array (N, d_v).

        Parameters
        ----------
        Y : array, shape (N, d), float64
            Keys.

        Returns
        -------
        array, shape (N, d_v), float64
            l(y_j) = W y_j.
        """
        return Y @ self.W.T

    def jacobian(self, Y):
        """D l(y_j) for every key: array (N, d_v, d) (constant W).

        Parameters
        ----------
        Y : array, shape (N, d), float64
            Keys.

        Returns
        -------
        array, shape (N, d_v, d), float64
            ``W`` repeated for every key (a broadcast view).
        """
        xp = namespace(Y)
        return xp.broadcast_to(self.W[None, :, :], (Y.shape[0],) + tuple(self.W.shape))

    def lipschitz(self, metric: str = "l1") -> float:
        """K_l = ||W|| in the operator norm of ``metric`` (l1: max column absolute sum).

        Parameters
        ----------
        metric : {"l1", "l2", "linf"}, default "l1"
            Metric of the operator norm (see :func:`rieszflow.theory.operator_norm`).

        Returns
        -------
        float
            K_l.
        """
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
        :class:`rieszflow.engine.attention.basic.GELU`), so :meth:`from_layer_params` turns a
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
            :meth:`rieszflow.engine.attention.basic.FeedForward.init_params` makes them
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
            from rieszflow.engine.attention.basic import GELU

            y, (_, t) = GELU().forward(Z)
            c, a = GELU._C, GELU._A
            return y, 0.5 * (1.0 + t) + 0.5 * Z * (1.0 - t * t) * c * (1.0 + 3.0 * a * Z * Z)
        if self.activation == "tanh":
            return xp.tanh(Z), 1.0 - xp.tanh(Z) ** 2
        if self.activation == "relu":
            return xp.maximum(Z, 0.0), (Z > 0).astype(Z.dtype)
        return Z, xp.ones_like(Z)

    def __call__(self, U):
        """f applied row-wise to U of shape (M, d_in): array (M, d_out).

        Parameters
        ----------
        U : array, shape (M, d_in), float64
            Inputs, one per row.

        Returns
        -------
        array, shape (M, d_out), float64
            f(u_i).
        """
        a, _ = self._act(U @ self.W1.T + self.b1)
        return a @ self.W2.T + self.b2

    def jacobian(self, U):
        """Df(u_i) for every row: array (M, d_out, d_in).

        Parameters
        ----------
        U : array, shape (M, d_in), float64
            Inputs, one per row.

        Returns
        -------
        array, shape (M, d_out, d_in), float64
            Df(u_i).
        """
        _, da = self._act(U @ self.W1.T + self.b1)
        return (self.W2[None, :, :] * da[:, None, :]) @ self.W1

    def lipschitz_bound(self, metric: str = "l1") -> float:
        """Upper bound ||W2|| Lip(sigma) ||W1|| of Lip(f) in ``metric`` (l1, l2 or linf).

        Parameters
        ----------
        metric : {"l1", "l2", "linf"}, default "l1"
            Metric of the operator norms.

        Returns
        -------
        float
            ``operator_norm(W2, metric) * operator_norm(W1, metric)``.
        """
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

    Parameters
    ----------
    query : array, shape (d_q,), float64
        The query x.
    mu : EmpiricalMeasure
        Keys y_j (N atoms, weights w_j).
    kernel : InteractionPotential
        G = exp(a).

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

    Parameters
    ----------
    mu : EmpiricalMeasure
        The measure to project.

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

    Parameters
    ----------
    mu : EmpiricalMeasure
        The measure to project.

    Returns
    -------
    mean : array, shape (d,)
        mu(F) for F = id, sum_j w_j y_j.
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
        """Pre-FFN attention outputs y_i = sum_j P_ij l(y_j): array (M, d_v).

        Parameters
        ----------
        queries : array, shape (M, d_q), float64
            Queries x_i.
        mu : EmpiricalMeasure
            Keys y_j (N atoms, weights w_j).

        Returns
        -------
        array, shape (M, d_v), float64
            y_i.
        """
        y, _ = attention_kernel(queries, mu, self.kernel, self.lookup(mu.points))
        return y

    def transport(self, mu: EmpiricalMeasure, at=None):
        """The transport map T[mu] evaluated at ``at`` (default: the atoms of mu), shape (M, d).

        Parameters
        ----------
        mu : EmpiricalMeasure
            Keys y_j (N atoms, weights w_j).
        at : array, shape (M, d_q), float64, optional
            Evaluation points; default the atoms of ``mu`` (M = N).

        Returns
        -------
        array, shape (M, d_out), float64
            T[mu](at_i); d_out = d_v without an FFN, the FFN's output dimension with one.
        """
        at = mu.points if at is None else at
        y = self.attend(at, mu)
        return y if self.ffn is None else self.ffn(y)

    def __call__(self, mu: EmpiricalMeasure) -> EmpiricalMeasure:
        """mu A_mu (then F): the push-forward (T[mu])_# mu, weights unchanged.

        Parameters
        ----------
        mu : EmpiricalMeasure
            Tokens (N atoms, weights w_j).

        Returns
        -------
        EmpiricalMeasure
            Atoms T[mu](y_j) with the weights of ``mu``.
        """
        return EmpiricalMeasure(self.transport(mu), mu.weights)

    def query_jacobian(self, queries, mu: EmpiricalMeasure):
        """d T[mu](x) / dx at each query with mu fixed: array (M, d_out, d_q).

        dy/dx = sum_j P_j (v_j - y) grad_1 a(x, y_j)^T, then Df(y) when an FFN is present.

        Parameters
        ----------
        queries : array, shape (M, d_q), float64
            Queries x_i.
        mu : EmpiricalMeasure
            Keys y_j (N atoms, weights w_j).

        Returns
        -------
        array, shape (M, d_out, d_q), float64
            d T[mu](x_i) / dx_i.

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

        Parameters
        ----------
        mu : EmpiricalMeasure
            Tokens x_k (N atoms of dimension d, weights w_k).

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

        Parameters
        ----------
        mu : EmpiricalMeasure
            Tokens (N distinct atoms, weights w_k > 0).

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
        """T[mu](x) = f(Pi(M-hat_mu(x, .))) at ``at`` (default: atoms of mu): array (M, d).

        Parameters
        ----------
        mu : EmpiricalMeasure
            Tokens (N atoms in R^d, weights w_j).
        at : array, shape (M, d), float64, optional
            Evaluation points; default the atoms of ``mu`` (M = N).

        Returns
        -------
        array, shape (M, d), float64
            T[mu](at_i).
        """
        at = mu.points if at is None else _as_matrix("at", at, 2)
        xp = namespace(at, mu.points)
        out = xp.stack([dirac_projection(self.mixture(at[i], mu)).points[0]
                        for i in range(at.shape[0])])
        return out if self.ffn is None else self.ffn(out)

    def __call__(self, mu: EmpiricalMeasure) -> EmpiricalMeasure:
        """mu T_mu = (T[mu])_# mu (paper 004 Prop. 12).

        Parameters
        ----------
        mu : EmpiricalMeasure
            Tokens (N atoms in R^d, weights w_j).

        Returns
        -------
        EmpiricalMeasure
            Atoms T[mu](x_j) with the weights of ``mu``.
        """
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
