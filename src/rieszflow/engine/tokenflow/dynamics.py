"""Vector fields and layer maps of token clouds: attention as interacting particles.

Tokens are an array ``x`` of shape ``(..., n, d)``: ``n`` tokens in R^d or on
the unit sphere S^{d-1}; leading axes are independent clouds (a batch of
initialisations) that never interact. Every token interacts with every token
of its cloud, itself included (sums over ``j = 1..n``, ``j = i`` included).

Continuous time (spec section 2.4, variants R1-R3, and section 6.1)
-------------------------------------------------------------------
With queries ``q_i = Q x_i``, keys ``k_i = K x_i``, values ``v_i = V x_i``
(``Q = K = V = I`` by default) and a kernel ``G`` (softmax
``exp(beta <q, k>)`` or a linear feature kernel), the attention drift is

* ``SA``   ``a_i = sum_j G_ij v_j / Z_i``, ``Z_i = sum_j G_ij`` (row normalised);
* ``USA``  ``a_i = (1/n) sum_j G_ij v_j`` (``Z_i`` replaced by ``n``);
* ``sinkhorn``  ``a_i = sum_j P_ij v_j`` with ``P = diag(e^f) G diag(e^g)`` doubly
  stochastic (Sander et al.);

and the velocity is

* sphere (R3, GLPR's pure attention with idealised LayerNorm):
  ``dx_i/dt = P^perp_{x_i} a_i``, ``P^perp_x y = y - <x, y> x``;
* euclidean, residual (R2, Lu et al. 2019; Sander et al.): ``dx_i/dt = a_i``;
* euclidean, relaxation (R1): ``dx_i/dt = a_i - x_i`` (explicit Euler with step 1
  is paper 004's residual-free layer).

Discrete time (paper 004, section 3.1 and App. A)
-------------------------------------------------
:class:`MultiHeadAttentionLayer` maps a token cloud through one multi-head
softmax attention layer, ``x_i -> f(sum_h W_h^O{}^T y_i^h)`` with
``y_i^h = sum_j softmax_j(beta <W_h^Q x_i, W_h^K x_j>) W_h^V x_j``, optionally with
the residual connection and LayerNorm (which the paper leaves out, footnote 6).

References
----------
paper 004, section 3.1 (particle map), Prop. 12 and App. A (multi-head Transformer);
spec paper004_attention_theory.md, sections 2.3, 2.4, 6.1-6.3;
Geshkovski, Letrouit, Polyanskiy, Rigollet (GLPR), arXiv:2312.10794, eqs. (SA), (USA);
Sander, Ablin, Blondel, Peyre (2022), Sinkformers, arXiv:2110.11773.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, NamedTuple

import numpy as np

from rieszflow.engine._checks import check_choice, check_int, check_real
from rieszflow.engine.backend import namespace, to_numpy
from rieszflow.engine.space import Sphere

__all__ = [
    "VARIANTS",
    "GEOMETRIES",
    "FieldValue",
    "AttentionField",
    "sphere_attention_flow",
    "euclidean_attention_flow",
    "MultiHeadAttentionLayer",
    "tangent_projection",
    "normalise",
    "layer_norm",
]

#: Normalisations of the attention matrix: row (SA), none (USA), doubly stochastic (sinkhorn).
VARIANTS = ("SA", "USA", "sinkhorn")
#: Where tokens live.
GEOMETRIES = ("sphere", "euclidean")


#: The token space of the sphere flows: the one home of the retraction and the tangent projection.
_SPHERE = Sphere()

def tangent_projection(x, y):
    """Project ``y`` onto the tangent space of the sphere at ``x``: ``y - <x, y> x``.

    Parameters
    ----------
    x : array, shape (..., d)
        Points (unit vectors on S^{d-1}; off the sphere the same formula is the
        smooth extension used by the integrators, under which ``|x| = 1`` is an
        attracting invariant set).
    y : array, shape (..., d)

    Returns
    -------
    array, shape (..., d)

    References
    ----------
    GLPR, arXiv:2312.10794, eq. (SA): ``P^perp_x y = y - <x, y> x``.
    """
    return _SPHERE.tangent(x, y)


def normalise(x):
    """Retraction onto the unit sphere: ``x / |x|`` along the last axis.

    Parameters
    ----------
    x : array, shape (..., d)
        Non-zero vectors.

    Returns
    -------
    array, shape (..., d)
        Unit vectors (a zero row gives NaN, which :func:`run_flow` reports).

    References
    ----------
    GLPR, arXiv:2312.10794, section 2 (LayerNorm idealised as projection onto S^{d-1}).
    """
    return _SPHERE.project(x)


def layer_norm(x, eps: float = 1e-5):
    """LayerNorm without affine parameters: ``(x - mean) / sqrt(var + eps)`` per token.

    Parameters
    ----------
    x : array, shape (..., d)
    eps : float, default 1e-5
        Variance floor (PyTorch's default), ``eps >= 0``.

    Returns
    -------
    array, shape (..., d)
        Each token has mean 0 and (for ``eps = 0``) variance 1 (1/d convention).

    References
    ----------
    Ba, Kiros, Hinton (2016), "Layer normalization"; paper 004, footnote 6.
    """
    xp = namespace(x)
    mu = xp.mean(x, axis=-1, keepdims=True)
    c = x - mu
    var = xp.mean(c * c, axis=-1, keepdims=True)
    return c / xp.sqrt(var + eps)


def _on(xp, a, dtype):
    """Move a (host or device) matrix to backend ``xp`` with ``dtype``."""
    if a is None:
        return None
    if namespace(a) is not xp:
        a = np.asarray(to_numpy(a)) if xp is np else xp.asarray(to_numpy(a))
    return a.astype(dtype, copy=False)


def _check_matrix(name, a, rows=None, cols=None):
    if a is None:
        return None
    xp = namespace(a)
    a = xp.asarray(a)
    if a.ndim != 2 or a.dtype.kind not in "fiu":
        raise ValueError(f"{name} must be a real matrix (2-D array); got shape {tuple(a.shape)}, "
                         f"dtype {a.dtype}")
    if rows is not None and a.shape[0] != rows:
        raise ValueError(f"{name} must have {rows} rows; got shape {tuple(a.shape)}")
    if cols is not None and a.shape[1] != cols:
        raise ValueError(f"{name} must have {cols} columns; got shape {tuple(a.shape)}")
    if not bool(xp.all(xp.isfinite(a))):           # validation time only (one sync on GPU)
        raise ValueError(f"{name} contains NaN or inf; the matrix must be finite")
    return a.astype(np.float64) if a.dtype.kind in "iu" else a


class FieldValue(NamedTuple):
    """One evaluation of a token vector field.

    Parameters
    ----------
    velocity : array, shape (..., n, d)
        ``dx/dt`` at ``x``.
    warm : array or None
        Sinkhorn potential ``g`` (..., n) to warm-start the next evaluation; None otherwise.
    residual : array (0-d) or None
        Sinkhorn residual ``max |row/column sum - 1|`` of this evaluation; None otherwise.
    """

    velocity: Any
    warm: Any
    residual: Any


@dataclasses.dataclass(frozen=True)
class AttentionField:
    """Velocity field of a token cloud driven by self-attention (see the module docstring).

    Parameters
    ----------
    kernel : SoftmaxKernel, GaussianKernel or LinearKernel
        Attention kernel (:mod:`~rieszflow.engine.tokenflow.kernels`).
    variant : {"SA", "USA", "sinkhorn"}, default "SA"
        Normalisation of the attention matrix: rows (SA), ``1/n`` (USA), or
        doubly stochastic (Sinkhorn, capped log-domain iterations).
    geometry : {"sphere", "euclidean"}, default "sphere"
        Tokens on S^{d-1} (velocity projected with ``P^perp_{x_i}``) or in R^d.
    query, key : array, shape (d_k, d), optional
        ``Q`` and ``K`` (``q_i = Q x_i``); None means the identity (``d_k = d``).
    value : array, shape (d, d), optional
        ``V`` (``v_i = V x_i``); None means the identity. ``value = -I`` gives the
        repulsive dynamics of GLPR section 9.1.
    relaxation : bool, default False
        Euclidean only: ``dx_i/dt = a_i - x_i`` (R1) instead of ``a_i`` (R2).
    sinkhorn_max_iter : int, default 1000
        Cap on Sinkhorn iterations per evaluation (residual reported, never hidden).
    sinkhorn_tol : float or None, default None
        Sinkhorn stopping tolerance (largest log-scaling change); None is the
        kernel's dtype-aware default ``max(1e-12, 10 eps max(1, max|f|))`` (see
        ``SoftmaxKernel.sinkhorn``), so float32 flows stop at round-off.

    Raises
    ------
    ValueError
        On an unknown variant/geometry, relaxation on the sphere, a non-square
        ``value``, ``query``/``key`` of different shapes, bad Sinkhorn settings,
        or SA/sinkhorn with a signed (non-positive) linear kernel.
    TypeError
        If ``kernel`` lacks the ``attend``/``attend_mean``/``sinkhorn`` methods.

    Notes
    -----
    Gradient structure (Q = K = V = I on the sphere, GLPR section 3 and spec 6.1),
    with ``E_beta(x) = (1/(2 beta n^2)) sum_{i,j} exp(beta <x_i, x_j>)`` (all ordered
    pairs, diagonal included):

    * USA is the Euclidean gradient ascent ``v_i = n P^perp grad_{x_i} E_beta`` on
      (S^{d-1})^n, so ``dE/dt = (1/n) sum_i |v_i|^2 >= 0``;
    * SA is **not** a Euclidean gradient flow; it is the gradient ascent of
      ``E_beta`` in the metric weighted by ``Zbar_i = (1/n) sum_k exp(beta <x_i, x_k>)``:
      ``v_i = (n / Zbar_i) P^perp grad_{x_i} E_beta``, so ``E_beta`` is still
      non-decreasing, ``dE/dt = (1/n) sum_i Zbar_i |v_i|^2``;
    * the Sinkhorn flow is a Wasserstein gradient flow in R^d (Sander et al.) for
      symmetric ``Q^T K`` with ``V = Q^T K``; no monotone quantity is claimed on the sphere.

    References
    ----------
    spec sections 2.4 (R1-R3), 6.1 (SA, USA, energy identities), 6.3 (Sinkhorn);
    GLPR, arXiv:2312.10794; Sander et al. (2022).
    """

    kernel: Any
    variant: str = "SA"
    geometry: str = "sphere"
    query: Any = None
    key: Any = None
    value: Any = None
    relaxation: bool = False
    sinkhorn_max_iter: int = 1000
    sinkhorn_tol: float | None = None

    def __post_init__(self):
        for meth in ("attend", "attend_mean", "sinkhorn"):
            if not callable(getattr(self.kernel, meth, None)):
                raise TypeError(f"kernel={self.kernel!r} has no method {meth!r}; use a kernel of "
                                f"engine.tokenflow.kernels (SoftmaxKernel, GaussianKernel, LinearKernel)")
        check_choice("variant", self.variant, VARIANTS)
        check_choice("geometry", self.geometry, GEOMETRIES)
        if not isinstance(self.relaxation, (bool, np.bool_)):
            raise TypeError(f"relaxation must be a bool, got {self.relaxation!r}")
        if self.relaxation and self.geometry != "euclidean":
            raise ValueError("relaxation=True (dx/dt = T[mu](x) - x, variant R1) is defined for "
                             "geometry='euclidean' only; on the sphere use relaxation=False")
        q = _check_matrix("query", self.query)
        k = _check_matrix("key", self.key)
        if (q is None) != (k is None):
            raise ValueError("query and key must both be given or both be None (identity)")
        if q is not None and q.shape != k.shape:
            raise ValueError(f"query and key must have the same shape (d_k, d); got {tuple(q.shape)} "
                             f"and {tuple(k.shape)}")
        v = _check_matrix("value", self.value)
        if v is not None and v.shape[0] != v.shape[1]:
            raise ValueError(f"value must be square (d, d) so that tokens stay in R^d; got "
                             f"{tuple(v.shape)}")
        if q is not None and v is not None and q.shape[1] != v.shape[0]:
            raise ValueError(f"query (d_k, d) {tuple(q.shape)} and value (d, d) {tuple(v.shape)} "
                             f"disagree on d")
        object.__setattr__(self, "query", q)
        object.__setattr__(self, "key", k)
        object.__setattr__(self, "value", v)
        check_int("sinkhorn_max_iter", self.sinkhorn_max_iter, minimum=1)
        if self.sinkhorn_tol is not None:
            check_real("sinkhorn_tol", self.sinkhorn_tol, nonnegative=True)
        if self.variant in ("SA", "sinkhorn") and getattr(self.kernel, "positive", True) is False:
            raise ValueError(f"variant={self.variant!r} normalises by kernel sums and needs a positive "
                             f"feature map; {self.kernel!r} is signed. Use variant='USA' or a positive map")

    @property
    def dimension(self) -> int | None:
        """Token dimension ``d`` fixed by ``query``/``value`` (None if all are identities)."""
        if self.query is not None:
            return int(self.query.shape[1])
        if self.value is not None:
            return int(self.value.shape[0])
        return None

    def _check_x(self, x):
        xp = namespace(x)
        x = xp.asarray(x)
        if x.ndim < 2 or x.dtype.kind != "f":
            raise ValueError(f"x must be a float array of shape (..., n, d); got shape "
                             f"{tuple(x.shape)}, dtype {x.dtype}")
        d = self.dimension
        if d is not None and x.shape[-1] != d:
            raise ValueError(f"x has d={x.shape[-1]} coordinates but query/value act on d={d}")
        return xp, x

    def drift(self, x, warm=None):
        """Attention output ``a_i`` (before projection), Sinkhorn potential and residual.

        Parameters
        ----------
        x : array, shape (..., n, d)
        warm : array, shape (..., n), optional
            Sinkhorn warm start ``g`` (ignored by SA/USA).

        Returns
        -------
        a : array, shape (..., n, d)
        warm : array (..., n) or None
        residual : 0-d array or None

        Raises
        ------
        ValueError
            If ``x`` is not a float array of shape (..., n, d) matching ``query``/``value``.

        References
        ----------
        spec section 2.4 (T[mu](x)); GLPR eqs. (SA), (USA); Sander et al. (2022).
        """
        xp, x = self._check_x(x)
        dt = x.dtype
        Q, K, V = (_on(xp, m, dt) for m in (self.query, self.key, self.value))
        if Q is None:
            q = k = x
        else:
            q = xp.matmul(x, Q.T)
            k = xp.matmul(x, K.T)
        v = x if V is None else xp.matmul(x, V.T)
        if self.variant == "SA":
            return self.kernel.attend(q, k, v).out, None, None
        if self.variant == "USA":
            return self.kernel.attend_mean(q, k, v), None, None
        res = self.kernel.sinkhorn(q, k, v, max_iter=self.sinkhorn_max_iter, tol=self.sinkhorn_tol,
                                   g0=warm)
        return res.out, res.g, res.residual

    def evaluate(self, x, warm=None) -> FieldValue:
        """Velocity at ``x`` with the Sinkhorn warm start and residual (see :class:`FieldValue`).

        Parameters
        ----------
        x : array, shape (..., n, d)
        warm : array, shape (..., n), optional

        Returns
        -------
        FieldValue

        References
        ----------
        spec section 2.4 (R1-R3); GLPR eq. (SA)/(USA).
        """
        a, g, r = self.drift(x, warm)
        if self.geometry == "sphere":
            vel = tangent_projection(x, a)
        elif self.relaxation:
            vel = a - x
        else:
            vel = a
        return FieldValue(vel, g, r)

    def __call__(self, x):
        """Velocity ``dx/dt`` at ``x`` (a cold Sinkhorn start).

        Parameters
        ----------
        x : array, shape (..., n, d)

        Returns
        -------
        array, shape (..., n, d)
        """
        return self.evaluate(x).velocity


def sphere_attention_flow(kernel, variant: str = "SA", *, query=None, key=None, value=None,
                          sinkhorn_max_iter: int = 1000, sinkhorn_tol: float | None = None) -> AttentionField:
    """Pure attention dynamics on the sphere (GLPR): ``dx_i/dt = P^perp_{x_i}(a_i)``.

    Parameters
    ----------
    kernel : attention kernel
        ``SoftmaxKernel(beta)`` gives GLPR's ``e^{beta <Q x_i, K x_j>}``.
    variant : {"SA", "USA", "sinkhorn"}, default "SA"
    query, key : array, shape (d_k, d), optional (identity)
    value : array, shape (d, d), optional (identity)
    sinkhorn_max_iter : int, default 1000
        Cap on Sinkhorn iterations per evaluation (see :class:`AttentionField`).
    sinkhorn_tol : float or None, default None
        Sinkhorn stopping tolerance; None is the kernel's dtype-aware default (see
        :class:`AttentionField`).

    Returns
    -------
    AttentionField
        With ``geometry="sphere"``.

    References
    ----------
    GLPR, arXiv:2312.10794, eqs. (SA), (USA); spec section 6.1 and variant R3 (section 2.4).
    """
    return AttentionField(kernel, variant=variant, geometry="sphere", query=query, key=key,
                          value=value, sinkhorn_max_iter=sinkhorn_max_iter, sinkhorn_tol=sinkhorn_tol)


def euclidean_attention_flow(kernel, variant: str = "SA", *, relaxation: bool = False, query=None,
                             key=None, value=None, sinkhorn_max_iter: int = 1000,
                             sinkhorn_tol: float | None = None) -> AttentionField:
    """Residual attention flow in R^d: ``dx_i/dt = a_i`` (R2) or ``a_i - x_i`` (R1, relaxation).

    Parameters
    ----------
    kernel : attention kernel
    variant : {"SA", "USA", "sinkhorn"}, default "SA"
    relaxation : bool, default False
    query, key, value : see :class:`AttentionField`
    sinkhorn_max_iter, sinkhorn_tol : see :class:`AttentionField`

    Returns
    -------
    AttentionField
        With ``geometry="euclidean"``.

    References
    ----------
    spec section 2.4 (R1, R2); Lu et al. (2019); Sander et al. (2022);
    Geshkovski et al., "The emergence of clusters in self-attention dynamics" (2023).
    """
    return AttentionField(kernel, variant=variant, geometry="euclidean", relaxation=relaxation,
                          query=query, key=key, value=value, sinkhorn_max_iter=sinkhorn_max_iter,
                          sinkhorn_tol=sinkhorn_tol)


_NORMS = (None, "layernorm", "sphere")


@dataclasses.dataclass(frozen=True)
class MultiHeadAttentionLayer:
    """One multi-head self-attention layer as a map of token clouds (paper 004, App. A).

    For each head ``h`` with ``q_i = W_h^Q x_i``, ``k_j = W_h^K x_j``, ``v_j = W_h^V x_j``,
    ``y_i^h = sum_j softmax_j(beta <q_i, k_j>) v_j`` (or the head's kernel's row
    normalisation); the layer output is

    * ``residual=False``: ``z_i = sum_h (W_h^O)^T y_i^h`` (paper 004's row-vector
      ``sum_h y_i^h W_h^O``), then ``out = ffn(norm(z))``; with ``norm=None`` this is
      the paper's ``T = AF`` (Prop. 12);
    * ``residual=True``: ``z = norm(x + eta * sum_h ...)``, then
      ``out = norm(z + ffn(z))`` if ``ffn`` is given (Vaswani's post-LN block for
      ``norm="layernorm"``, ``eta = 1``); with ``norm="sphere"`` and ``eta = dt`` it is
      the Euler-plus-renormalisation scheme of GLPR's code.

    Parameters
    ----------
    w_q, w_k : array, shape (H, d_k, d)
    w_v : array, shape (H, d_v, d)
    w_o : array, shape (H, d_v, d)
        Output projection of each head, row-vector convention of paper 004, App. A.
    kernel : kernel or sequence of H kernels, optional
        Default ``SoftmaxKernel(beta=1/sqrt(d_k))`` for every head (Vaswani scaling).
    residual : bool, default False
    norm : {None, "layernorm", "sphere"}, default None
    ffn : callable, optional
        Token-wise map ``(..., n, d) -> (..., n, d)`` (paper's ``f``).
    eta : float, default 1.0
        Step of the residual update (ignored without residual).
    ln_eps : float, default 1e-5

    Raises
    ------
    ValueError
        On inconsistent weight shapes, an unknown ``norm``, or a kernel count != H.

    References
    ----------
    paper 004, section 3.2, Prop. 12 and App. A (eq. (5), multi-head kernel); footnote 6;
    spec section 2.3.
    """

    w_q: Any
    w_k: Any
    w_v: Any
    w_o: Any
    kernel: Any = None
    residual: bool = False
    norm: str | None = None
    ffn: Callable | None = None
    eta: float = 1.0
    ln_eps: float = 1e-5

    def __post_init__(self):
        arrs = {}
        for name in ("w_q", "w_k", "w_v", "w_o"):
            a = getattr(self, name)
            xp = namespace(a)
            a = xp.asarray(a)
            if a.ndim != 3 or a.dtype.kind != "f":
                raise ValueError(f"{name} must be a float array of shape (H, rows, d); got shape "
                                 f"{tuple(a.shape)}, dtype {a.dtype}")
            arrs[name] = a
        h, d_k, d = arrs["w_q"].shape
        if arrs["w_k"].shape != (h, d_k, d):
            raise ValueError(f"w_k must have the shape of w_q {(h, d_k, d)}; got {tuple(arrs['w_k'].shape)}")
        if arrs["w_v"].shape[0] != h or arrs["w_v"].shape[2] != d:
            raise ValueError(f"w_v must have shape (H={h}, d_v, d={d}); got {tuple(arrs['w_v'].shape)}")
        if arrs["w_o"].shape != arrs["w_v"].shape:
            raise ValueError(f"w_o must have shape (H, d_v, d) = {tuple(arrs['w_v'].shape)}; got "
                             f"{tuple(arrs['w_o'].shape)}")
        for name, a in arrs.items():
            object.__setattr__(self, name, a)
        if self.norm not in _NORMS:
            raise ValueError(f"norm={self.norm!r} is not supported; allowed: None, 'layernorm', 'sphere'")
        if self.ffn is not None and not callable(self.ffn):
            raise TypeError(f"ffn must be callable or None; got {type(self.ffn).__name__}")
        check_real("eta", self.eta)
        check_real("ln_eps", self.ln_eps, nonnegative=True)
        if self.kernel is None:
            from rieszflow.engine.tokenflow.kernels import SoftmaxKernel

            kernels = (SoftmaxKernel(beta=1.0 / math.sqrt(d_k)),) * h
        elif hasattr(self.kernel, "attend"):
            kernels = (self.kernel,) * h
        else:
            kernels = tuple(self.kernel)
            if len(kernels) != h:
                raise ValueError(f"kernel must be one kernel or {h} kernels (one per head); got {len(kernels)}")
        object.__setattr__(self, "kernel", kernels)

    @property
    def n_heads(self) -> int:
        """Number of heads H."""
        return int(self.w_q.shape[0])

    def _norm(self, z):
        if self.norm == "layernorm":
            return layer_norm(z, self.ln_eps)
        if self.norm == "sphere":
            return normalise(z)
        return z

    def heads(self, x):
        """Per-head attention outputs ``y^h``, shape (H, ..., n, d_v).

        Parameters
        ----------
        x : array, shape (..., n, d)

        Returns
        -------
        array, shape (H, ..., n, d_v)
        """
        xp = namespace(x)
        if x.ndim < 2 or x.shape[-1] != self.w_q.shape[2]:
            raise ValueError(f"x must have shape (..., n, d={self.w_q.shape[2]}); got {tuple(x.shape)}")
        dt = x.dtype
        out = []
        for h in range(self.n_heads):
            wq, wk, wv = (_on(xp, w[h], dt) for w in (self.w_q, self.w_k, self.w_v))
            q, k, v = xp.matmul(x, wq.T), xp.matmul(x, wk.T), xp.matmul(x, wv.T)
            out.append(self.kernel[h].attend(q, k, v).out)
        return xp.stack(out)

    def attention(self, x):
        """Multi-head attention ``sum_h y^h W_h^O``, shape (..., n, d).

        Parameters
        ----------
        x : array, shape (..., n, d)
            Token cloud.

        Returns
        -------
        array, shape (..., n, d)
            ``sum_h y^h W_h^O``.
        """
        xp = namespace(x)
        y = self.heads(x)
        wo = _on(xp, self.w_o, x.dtype)
        return sum(xp.matmul(y[h], wo[h]) for h in range(self.n_heads))

    def __call__(self, x):
        """Apply the layer to a token cloud ``x`` of shape (..., n, d); returns (..., n, d).

        Parameters
        ----------
        x : array, shape (..., n, d)
            Token cloud.

        Returns
        -------
        array, shape (..., n, d)
            The layer output (see the class docstring).
        """
        a = self.attention(x)
        if self.residual:
            z = self._norm(x + self.eta * a)
            if self.ffn is not None:
                z = self._norm(z + self.ffn(z))
            return z
        z = self._norm(a)
        return z if self.ffn is None else self.ffn(z)
