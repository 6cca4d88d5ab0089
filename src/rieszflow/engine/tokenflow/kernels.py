"""Attention kernels for token flows: exact softmax (chunked), Gaussian, linear (feature maps).

Every kernel ``G(q, k) > 0`` acts on queries ``q`` of shape ``(..., n_q, d_k)``,
keys ``k`` of shape ``(..., n_k, d_k)`` and values ``v`` of shape
``(..., n_k, d_v)`` (leading axes broadcast-free: they must agree) through
three normalisations of the attention matrix ``G_ij = G(q_i, k_j)``:

``attend`` (row normalisation, GLPR's SA)
    ``out_i = sum_j G_ij v_j / Z_i``, ``Z_i = sum_j G_ij``; also returns
    ``log_zbar_i = log((1/n_k) sum_j G_ij)`` (the mean kernel row, used by the
    SA dissipation identity, paper004 spec section 6.1).
``attend_mean`` (no normalisation, GLPR's USA)
    ``out_i = (1/n_k) sum_j G_ij v_j`` (Z_i replaced by n_k).
``sinkhorn`` (doubly stochastic, Sinkformers)
    ``out_i = sum_j P_ij v_j`` with ``P_ij = exp(f_i + g_j) G_ij`` scaled so that
    every row and every column of P sums to 1 (square case ``n_q = n_k``).
    Iterations are capped (``max_iter``) and the residual
    ``max(|row sum - 1|, |column sum - 1|)`` is returned, never hidden.

Memory and cost
---------------
* :class:`SoftmaxKernel` and :class:`GaussianKernel` are exact and O(n_q n_k d)
  in time, but never hold more than a ``chunk x chunk`` block of scores: queries
  and keys are processed in blocks with a running (online) log-sum-exp, so
  memory is O((n_q + n_k) d + chunk^2) (the flash-attention recurrence, here in
  NumPy/CuPy).
* :class:`LinearKernel` ``G(q, k) = phi(q) . phi(k)`` with ``phi`` any feature
  map of :mod:`~rieszflow.engine.features` (or any callable ``phi(x, omega)``) costs
  O((n_q + n_k) m d_v) time and memory: ``S = sum_j phi(k_j) v_j^T`` and
  ``z = sum_j phi(k_j)`` are computed once per call.

References
----------
paper 004, Def. 1, eq. (1) and Prop. 9 (attention as Boltzmann-Gibbs reweighting);
spec paper004_attention_theory.md, section 2.2 (kernel families K1-K4), 6.1
(SA/USA), 6.3 (Sinkhorn), 7 (streaming log-sum-exp);
Choromanski et al. (2020), "Rethinking attention with Performers" (linear attention);
Sander, Ablin, Blondel, Peyre (2022), "Sinkformers", arXiv:2110.11773;
Dao et al. (2022), "FlashAttention" (online softmax over key blocks).
"""
from __future__ import annotations

import abc
import dataclasses
import math
from typing import Any, NamedTuple

import numpy as np

from rieszflow.engine._checks import check_int, check_real
from rieszflow.engine.backend import namespace, to_numpy

__all__ = [
    "AttentionOutput",
    "SinkhornOutput",
    "SoftmaxKernel",
    "GaussianKernel",
    "LinearKernel",
    "dense_attention",
    "sinkhorn_matrix",
]


class AttentionOutput(NamedTuple):
    """Result of row-normalised attention.

    Parameters
    ----------
    out : array, shape (..., n_q, d_v)
        ``sum_j G_ij v_j / sum_j G_ij``.
    log_zbar : array, shape (..., n_q)
        ``log((1/n_k) sum_j G_ij)``, the log of the mean kernel row (NaN where a
        signed linear kernel gives a row mean <= 0).
    """

    out: Any
    log_zbar: Any


class SinkhornOutput(NamedTuple):
    """Result of doubly stochastic (Sinkhorn) attention.

    Parameters
    ----------
    out : array, shape (..., n, d_v)
        ``sum_j P_ij v_j`` with P doubly stochastic (rows exact to round-off).
    f, g : arrays, shapes (..., n)
        Log-domain scalings: ``P_ij = exp(f_i + g_j) G_ij``. Pass ``g`` back as
        ``g0`` to warm-start the next call.
    residual : array, shape ()
        ``max over rows and columns of |sum - 1|`` of the returned P (0-d array
        of the input's backend; no host synchronisation).
    n_iter : int
        Sinkhorn iterations performed (``<= max_iter``).
    """

    out: Any
    f: Any
    g: Any
    residual: Any
    n_iter: int


def _check_qkv(q, k, v=None):
    """Shapes of queries, keys and values; returns (xp, q, k, v)."""
    xp = namespace(q, k, v)
    q, k = xp.asarray(q), xp.asarray(k)
    for name, a in (("q", q), ("k", k)):
        if a.ndim < 2:
            raise ValueError(f"{name} must have shape (..., n, d_k), got shape {tuple(a.shape)}")
        if a.dtype.kind != "f":
            raise TypeError(f"{name} must be a float32/float64 array, got dtype {a.dtype}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must share the last axis d_k; got q {tuple(q.shape)}, "
                         f"k {tuple(k.shape)}")
    if q.shape[:-2] != k.shape[:-2]:
        raise ValueError(f"q and k must have the same leading (batch) axes; got q {tuple(q.shape)}, "
                         f"k {tuple(k.shape)}")
    if v is not None:
        v = xp.asarray(v)
        if v.ndim != k.ndim or v.shape[:-1] != k.shape[:-1]:
            raise ValueError(f"v must have shape (..., n_k, d_v) with the leading axes and n_k of "
                             f"k {tuple(k.shape)}; got {tuple(v.shape)}")
    return xp, q, k, v


def _check_chunk(chunk):
    if chunk is None:
        return None
    return check_int("chunk", chunk, minimum=1)


def _online_attend(xp, q, k, v, scale, key_bias, chunk):
    """Row log-sum-exp and softmax average over key blocks (online, numerically stable).

    Computes ``lse_i = log sum_j exp(scale q_i.k_j + key_bias_j)`` and, if ``v``
    is given, ``out_i = sum_j softmax_j(...) v_j``, holding at most a
    ``chunk x chunk`` block of scores per leading index.

    Parameters
    ----------
    q : (..., n_q, d), k : (..., n_k, d), v : (..., n_k, d_v) or None
    scale : float
    key_bias : (..., n_k) or None
    chunk : int or None
        Block size for queries and keys; None = one block (dense).

    Returns
    -------
    out : (..., n_q, d_v) or None
    lse : (..., n_q)
    """
    n_q, n_k = q.shape[-2], k.shape[-2]
    kt = xp.swapaxes(k, -1, -2)
    if chunk is None or (n_q <= chunk and n_k <= chunk):
        s = scale * xp.matmul(q, kt)
        if key_bias is not None:
            s = s + key_bias[..., None, :]
        m = xp.max(s, axis=-1)
        p = xp.exp(s - m[..., None])
        den = xp.sum(p, axis=-1)
        lse = m + xp.log(den)
        out = None if v is None else xp.matmul(p, v) / den[..., None]
        return out, lse
    lead = q.shape[:-2]
    dtype = xp.result_type(q.dtype, k.dtype, v.dtype if v is not None else q.dtype)
    lse = xp.empty(lead + (n_q,), dtype=dtype)
    out = None if v is None else xp.empty(lead + (n_q, v.shape[-1]), dtype=dtype)
    for a in range(0, n_q, chunk):
        qb = q[..., a:a + chunk, :]
        nb = qb.shape[-2]
        m = xp.full(lead + (nb,), -xp.inf, dtype=dtype)
        ssum = xp.zeros(lead + (nb,), dtype=dtype)
        acc = None if v is None else xp.zeros(lead + (nb, v.shape[-1]), dtype=dtype)
        for b in range(0, n_k, chunk):
            s = scale * xp.matmul(qb, kt[..., :, b:b + chunk])
            if key_bias is not None:
                s = s + key_bias[..., None, b:b + chunk]
            m_new = xp.maximum(m, xp.max(s, axis=-1))
            alpha = xp.exp(m - m_new)          # exp(-inf) = 0 on the first block
            p = xp.exp(s - m_new[..., None])
            ssum = ssum * alpha + xp.sum(p, axis=-1)
            if acc is not None:
                acc = acc * alpha[..., None] + xp.matmul(p, v[..., b:b + chunk, :])
            m = m_new
        lse[..., a:a + chunk] = m + xp.log(ssum)
        if out is not None:
            out[..., a:a + chunk, :] = acc / ssum[..., None]
    return out, lse


#: Default Sinkhorn tolerance in float64; see :func:`_sinkhorn_stop`.
SINKHORN_TOL = 1e-12


def _check_sinkhorn_args(max_iter, tol, check_every):
    max_iter = check_int("max_iter", max_iter, minimum=1)
    if tol is not None:
        tol = check_real("tol", tol, nonnegative=True)
    check_every = check_int("check_every", check_every, minimum=1)
    return max_iter, tol, check_every


def _sinkhorn_stop(xp, change, f, tol):
    """Whether the Sinkhorn iterations stop (one host synchronisation).

    ``tol`` given: stop when ``change <= tol``. ``tol=None`` (the default): stop when
    ``change <= max(1e-12, 10 eps max(1, max_i |f_i|))`` with ``eps`` the machine
    epsilon of ``f``'s dtype. The log-scalings ``f`` are only representable to about
    ``eps |f|``, so a fixed 1e-12 is never reached in float32 (``eps = 1.2e-7``) and
    the iterations would always run to ``max_iter``; in float64 the floor is
    1e-12 unless ``|f| > 450``.
    """
    if tol is not None:
        return float(change) <= tol
    eps = float(np.finfo(np.dtype(f.dtype)).eps)
    floor = xp.maximum(1.0, xp.max(xp.abs(f))) * (10.0 * eps)
    return bool(change <= xp.maximum(floor, SINKHORN_TOL))


@dataclasses.dataclass(frozen=True)
class _ExpDotKernel(abc.ABC):
    """Kernels of the form G_ij = exp(scale q_i.k_j + qb_i + kb_j) (softmax, Gaussian)."""

    beta: float = 1.0
    chunk: int | None = 256

    def __post_init__(self):
        object.__setattr__(self, "beta", check_real("beta", self.beta))
        object.__setattr__(self, "chunk", _check_chunk(self.chunk))

    @abc.abstractmethod
    def _parts(self, xp, q, k):
        """Return ``(scale, qb, kb)`` with s_ij = scale * q_i.k_j + qb_i + kb_j."""

    def log_matrix(self, q, k):
        """Dense log-kernel ``log G_ij``, shape (..., n_q, n_k) (reference; O(n_q n_k) memory).

        Parameters
        ----------
        q : array, shape (..., n_q, d_k)
        k : array, shape (..., n_k, d_k)

        Returns
        -------
        array, shape (..., n_q, n_k)
        """
        xp, q, k, _ = _check_qkv(q, k)
        scale, qb, kb = self._parts(xp, q, k)
        s = scale * xp.matmul(q, xp.swapaxes(k, -1, -2))
        if qb is not None:
            s = s + qb[..., :, None]
        if kb is not None:
            s = s + kb[..., None, :]
        return s

    def matrix(self, q, k):
        """Dense kernel matrix ``G_ij = exp(log_matrix(q, k))``, shape (..., n_q, n_k) (reference).

        Parameters
        ----------
        q : array, shape (..., n_q, d_k)
        k : array, shape (..., n_k, d_k)

        Returns
        -------
        array, shape (..., n_q, n_k)
        """
        xp = namespace(q, k)
        return xp.exp(self.log_matrix(q, k))

    def attend(self, q, k, v) -> AttentionOutput:
        """Row-normalised attention (SA), exact, chunked over query and key blocks.

        Parameters
        ----------
        q : array, shape (..., n_q, d_k)
        k : array, shape (..., n_k, d_k)
        v : array, shape (..., n_k, d_v)

        Returns
        -------
        AttentionOutput
            ``out`` (..., n_q, d_v) and ``log_zbar`` (..., n_q), see the module docstring.

        Raises
        ------
        ValueError, TypeError
            On inconsistent shapes or non-float arrays.

        References
        ----------
        paper 004, eq. (1) and Prop. 9; spec section 7 (streaming log-sum-exp).
        """
        xp, q, k, v = _check_qkv(q, k, v)
        scale, qb, kb = self._parts(xp, q, k)
        out, lse = _online_attend(xp, q, k, v, scale, kb, self.chunk)
        log_zbar = lse - math.log(k.shape[-2])
        if qb is not None:
            log_zbar = log_zbar + qb
        return AttentionOutput(out, log_zbar)

    def attend_mean(self, q, k, v):
        """Unnormalised attention (USA): ``(1/n_k) sum_j G_ij v_j``, shape (..., n_q, d_v).

        Computed as ``exp(log_zbar_i) * attend(q, k, v).out_i`` so that the
        block recurrence stays stable; overflows only where the result does.

        Parameters
        ----------
        q : array, shape (..., n_q, d_k)
        k : array, shape (..., n_k, d_k)
        v : array, shape (..., n_k, d_v)

        Returns
        -------
        array, shape (..., n_q, d_v)

        References
        ----------
        spec section 6.1, (USA); GLPR, arXiv:2312.10794.
        """
        xp = namespace(q, k, v)
        res = self.attend(q, k, v)
        return xp.exp(res.log_zbar)[..., None] * res.out

    def sinkhorn(self, q, k, v, *, max_iter=1000, tol=None, g0=None, check_every=10,
                 symmetric=None) -> SinkhornOutput:
        """Doubly stochastic attention by log-domain Sinkhorn iterations (chunked).

        Finds ``f, g`` with ``P_ij = exp(s_ij + f_i + g_j)`` (``s = log G``) such that
        every row and column of P sums to 1, then returns ``out = P v``.
        Alternating updates ``f = -LSE_j(s_ij + g_j)``, ``g = -LSE_i(s_ij + f_i)``;
        when ``symmetric`` (default: ``q is k``, i.e. ``s`` symmetric) the damped
        symmetric update ``f <- (f - LSE_j(s_ij + f_j)) / 2``, ``g = f`` is used,
        which converges much faster. Each iteration costs one (symmetric) or two
        chunked passes over the scores.

        Parameters
        ----------
        q, k : arrays, shape (..., n, d_k) (square: ``n_q = n_k = n``)
        v : array, shape (..., n, d_v)
        max_iter : int, default 1000
            Cap on the iterations (never exceeded; the residual is reported).
        tol : float or None, default None
            Stop when the largest change of ``f`` over an iteration is <= tol
            (this is the row-sum error in log scale); checked every
            ``check_every`` iterations (one device synchronisation per check on GPU).
            None: the dtype-aware default ``max(1e-12, 10 eps max(1, max|f|))``
            (``eps`` of the inputs' dtype: 1e-12 in float64, about 1.2e-6 max|f| in
            float32, whose round-off never reaches 1e-12). An explicit ``tol`` is used
            as given; one below round-off runs ``max_iter`` iterations (the residual
            is reported).
        g0 : array, shape (..., n), optional
            Warm start for ``g`` (e.g. the ``g`` of the previous time step).
        check_every : int, default 10
        symmetric : bool or None
            Force/forbid the symmetric update; None means ``q is k``.

        Returns
        -------
        SinkhornOutput

        Raises
        ------
        ValueError
            If ``n_q != n_k``, or on bad ``max_iter``, ``tol``, ``g0``.

        References
        ----------
        Sander et al. (2022), Sinkformers, eq. (4); spec section 6.3 and test T35.
        """
        xp, q, k, v = _check_qkv(q, k, v)
        max_iter, tol, check_every = _check_sinkhorn_args(max_iter, tol, check_every)
        n = k.shape[-2]
        if q.shape[-2] != n:
            raise ValueError(f"sinkhorn needs a square attention matrix (n_q = n_k); got "
                             f"q {tuple(q.shape)}, k {tuple(k.shape)}")
        sym = (q is k) if symmetric is None else bool(symmetric)
        scale, qb, kb = self._parts(xp, q, k)
        lead = q.shape[:-2]
        if g0 is None:
            g = xp.zeros(lead + (n,), dtype=q.dtype)
        else:
            g = xp.asarray(g0)
            if g.shape != lead + (n,):
                raise ValueError(f"g0 must have shape {lead + (n,)}, got {tuple(g.shape)}")

        def row_pass(gg):      # -LSE_j(s_ij + g_j)
            kbias = gg if kb is None else kb + gg
            _, lse = _online_attend(xp, q, k, None, scale, kbias, self.chunk)
            return -(lse if qb is None else lse + qb)

        def col_pass(ff):      # -LSE_i(s_ij + f_i)
            qbias = ff if qb is None else qb + ff
            _, lse = _online_attend(xp, k, q, None, scale, qbias, self.chunk)
            return -(lse if kb is None else lse + kb)

        f = row_pass(g)
        it = 0
        while it < max_iter:
            it += 1
            if sym:
                f_new = 0.5 * (f + row_pass(f))
                g = f_new
            else:
                g = col_pass(f)
                f_new = row_pass(g)
            change = xp.max(xp.abs(f_new - f))
            f = f_new
            if it % check_every == 0 or it == max_iter:
                if _sinkhorn_stop(xp, change, f, tol):  # host sync, once per check_every iterations
                    break
        f = row_pass(g)                       # rows exact (to round-off)
        col_err = xp.max(xp.abs(xp.expm1(-(col_pass(f) - g))))
        kbias = g if kb is None else kb + g
        out, _ = _online_attend(xp, q, k, v, scale, kbias, self.chunk)
        return SinkhornOutput(out, f, g, col_err, it)


@dataclasses.dataclass(frozen=True)
class SoftmaxKernel(_ExpDotKernel):
    """Softmax (dot-product) kernel ``G(q, k) = exp(beta <q, k>)``, exact and chunked.

    With ``q = W^Q x``, ``k = W^K x`` and ``beta = 1/sqrt(d_k)`` this is
    Vaswani's scaled dot-product attention (kernel K1 of the spec); with
    ``Q = K = I`` and tokens on the sphere it is GLPR's ``e^{beta <x_i, x_j>}``.

    Parameters
    ----------
    beta : float, default 1.0
        Inverse temperature (any finite real; ``beta < 0`` is allowed and gives
        the "repulsive-kernel" direction of the scores).
    chunk : int or None, default 256
        Block size for queries and keys; memory is O(chunk^2) per leading index
        plus the inputs. None computes the whole score matrix at once. 256 was
        the fastest CPU block measured (N = 2048 and 8192, d = 3, 1 and 2 BLAS
        threads; 512-2048 blocks were up to 5x slower with 2 OpenBLAS threads on
        a loaded machine); on GPU use a few thousand.

    References
    ----------
    paper 004, Def. 1 and App. A (a(x, y) = <W^Q x, W^K y>/sqrt(d')); spec section 2.2 (K1).
    """

    def _parts(self, xp, q, k):
        return self.beta, None, None


@dataclasses.dataclass(frozen=True)
class GaussianKernel(_ExpDotKernel):
    """Gaussian (L2) kernel ``G(q, k) = exp(-(beta/2) |q - k|^2)``, exact and chunked.

    Evaluated as ``exp(beta q.k - beta|q|^2/2 - beta|k|^2/2)``; row normalisation
    cancels the query term. With ``beta = 1/eps`` it is the softmax-L2 score of
    spec section 6.3 (heat-limit table, slope ``-eps/(1+eps)`` on N(0,1) samples).

    Parameters
    ----------
    beta : float, default 1.0
        Inverse squared bandwidth, ``beta > 0``.
    chunk : int or None, default 256

    References
    ----------
    spec section 2.2 (K2), 6.3; Kim, Papamakarios, Mnih (2021), L2 self-attention.
    """

    def __post_init__(self):
        super().__post_init__()
        check_real("beta", self.beta, positive=True)

    def _parts(self, xp, q, k):
        """``(beta, -beta|q|^2/2, -beta|k|^2/2)``: scores ``-(beta/2)|q - k|^2`` by expansion.

        Round-off note: ``|q - k|^2 = q.q + k.k - 2 q.k`` is formed from three terms of
        size ``|q|^2``, so its absolute error is about ``eps |q|^2`` (``eps`` of the
        dtype), not ``eps |q - k|^2``. Far from the origin this cancels badly in
        float32 (``eps = 1.2e-7``): at ``|q| ~ 100`` the score of two nearby points
        carries an error of about ``beta * 1e-3``, and a distance below about
        ``|q| sqrt(eps) ~ 0.03`` is not resolved at all. Centre the tokens (the
        kernel is translation invariant), or use float64, when ``|q|`` is large
        compared with the bandwidth ``beta^{-1/2}``. On the sphere (``|q| = 1``) the
        error is ``~beta eps`` and harmless.
        """
        b = self.beta
        return b, -0.5 * b * xp.sum(q * q, axis=-1), -0.5 * b * xp.sum(k * k, axis=-1)


class LinearKernel:
    """Linear-attention kernel ``G(q, k) = <phi(s q), phi(s k)>`` from a feature map and frozen omega.

    Parameters
    ----------
    feature_map : FeatureMap or callable
        Object called as ``feature_map(x, omega) -> phi`` with ``x`` (..., d_k),
        ``omega`` (m, d_k), ``phi`` (..., m) (e.g. ``engine.features.make_feature_map``).
        A map that subtracts a stabilising shift ``c`` from its exponent (FAVOR
        with ``stabilise="row"`` or ``"seq"``, i.e. an attribute ``stabilise``
        other than ``"none"``) must also provide ``forward(x, omega) -> (phi,
        cache)`` with the shift in ``cache["c"]``: the kernel undoes it exactly
        (see Notes).
    omega : array, shape (m, d_k)
        Frozen particles (rows). Moved to the backend of the tokens at call time.
    input_scale : float, default 1.0
        ``s`` above. FAVOR (``tau = 1``, ``omega ~ N(0, I)``) estimates
        ``exp(<q, k>)``, so ``input_scale = sqrt(beta)`` estimates the softmax
        kernel ``exp(beta <q, k>)``.
    positive : bool or None, default None
        Whether ``phi >= 0``; default ``feature_map.positive`` (False if the
        attribute is missing). Row-normalised (SA) and Sinkhorn attention need a
        positive map (the normaliser must be > 0); the unnormalised USA form
        accepts signed maps (e.g. ``rff``).

    Raises
    ------
    TypeError
        If ``feature_map`` is not callable.
    ValueError
        If ``omega`` is not a finite (m, d_k) array, ``input_scale`` is not finite
        and > 0, or the map is stabilised (``stabilise != "none"``) but has no
        ``forward`` method to report its shift.

    Notes
    -----
    Cost O((n_q + n_k) m (d_k + d_v)) time and memory: ``S = sum_j phi(k_j) v_j^T``
    (m, d_v) and ``z = sum_j phi(k_j)`` (m,) are formed once per call; no n_q x n_k
    matrix is ever built (except by the reference :meth:`matrix`).

    Stabilised maps. FAVOR with ``stabilise="row"`` returns ``phi~(x) =
    phi(x) e^{-c(x)}`` with one shift per token, ``"seq"`` one shift per sequence.
    A per-query shift cancels in row normalisation, but a per-key shift does not
    (``sum_j e^{-c_j} G_ij v_j / sum_j e^{-c_j} G_ij`` is a different attention),
    and no shift cancels in the unnormalised USA form or in ``log_zbar``. Every
    method therefore puts the shifts back exactly: keys are reweighted by
    ``e^{c_j - max_k c_k}`` (at most 1, so nothing overflows), and the factor
    ``e^{c_i + max_k c_k}`` multiplies the USA output and enters ``log_zbar``
    additively; Sinkhorn attention is invariant under the diagonal rescaling, so
    only its potentials are shifted back (``f = f~ - c_q``, ``g = g~ - c_k``).
    The results equal those of the unstabilised map up to round-off.

    References
    ----------
    spec section 2.2 (K3): ``T[mu](x) = phi(q)^T S / phi(q)^T z``;
    paper 000, App. D (positive feature maps, Nadaraya-Watson form);
    Katharopoulos et al. (2020), Choromanski et al. (2020), Lemma 1;
    attention_reference.md, section 0.3 (FAVOR+ stabiliser).
    """

    def __init__(self, feature_map, omega, *, input_scale: float = 1.0, positive: bool | None = None):
        if not callable(feature_map):
            raise TypeError(f"feature_map must be callable as feature_map(x, omega) -> phi; got "
                            f"{type(feature_map).__name__}")
        self.feature_map = feature_map
        xp = namespace(omega)
        omega = xp.asarray(omega)
        if omega.ndim != 2 or omega.dtype.kind != "f":
            raise ValueError(f"omega must be a float array of shape (m, d_k); got shape "
                             f"{tuple(omega.shape)}, dtype {omega.dtype}")
        if not bool(xp.all(xp.isfinite(omega))):          # construction time only
            raise ValueError("omega contains NaN or inf; the frozen particles must be finite")
        self.omega = omega
        self._omega_cache = {}
        self.input_scale = check_real("input_scale", input_scale, positive=True)
        self.positive = bool(getattr(feature_map, "positive", False)) if positive is None else bool(positive)
        self.stabilise = str(getattr(feature_map, "stabilise", "none"))
        if self.stabilise != "none" and not callable(getattr(feature_map, "forward", None)):
            raise ValueError(f"feature_map has stabilise={self.stabilise!r} but no method "
                             f"forward(x, omega) -> (phi, cache) reporting the shift cache['c'], so "
                             f"the shift cannot be undone; use stabilise='none' or an "
                             f"engine.features.FeatureMap")

    @property
    def m(self) -> int:
        """Number of features (particles)."""
        return int(self.omega.shape[0])

    def __repr__(self):
        name = getattr(self.feature_map, "name", type(self.feature_map).__name__)
        return (f"LinearKernel(feature_map={name!r}, m={self.m}, d_k={self.omega.shape[1]}, "
                f"input_scale={self.input_scale}, positive={self.positive}, "
                f"stabilise={self.stabilise!r})")

    def _omega_on(self, x):
        xp = namespace(x)
        key = (xp.__name__, np.dtype(x.dtype).str)
        omega = self._omega_cache.get(key)
        if omega is None:
            omega = self.omega
            if namespace(omega) is not xp:
                omega = np.asarray(to_numpy(omega)) if xp is np else xp.asarray(to_numpy(omega))
            omega = omega.astype(x.dtype, copy=False)
            self._omega_cache[key] = omega
        return omega

    def features(self, x):
        """Features ``phi(s x)`` as the map returns them (omega moved to, and cached on, x's backend).

        For a stabilised map (``stabilise != "none"``) these are the shifted
        features ``phi(s x) e^{-c}``; :meth:`features_and_shift` also returns ``c``.

        Parameters
        ----------
        x : array, shape (..., d_k), float32 or float64

        Returns
        -------
        array, shape (..., m)
        """
        xs = x if self.input_scale == 1.0 else self.input_scale * x
        return self.feature_map(xs, self._omega_on(x))

    def features_and_shift(self, x):
        """Stabilised features and their log-shift: ``phi(s x) = phi~ * exp(shift)``.

        Parameters
        ----------
        x : array, shape (..., n, d_k), float32 or float64

        Returns
        -------
        phi : array, shape (..., n, m)
            The map's output ``phi~``.
        shift : array of shape (..., n) (``"row"``) or (..., 1) (``"seq"``), or None
            The shift ``c`` the map subtracted from its exponent (None for an
            unstabilised map).

        Raises
        ------
        ValueError
            If a stabilised map's ``forward`` cache has no shift ``"c"``.

        References
        ----------
        engine.features.FavorFeatureMap (``cache["c"]``); attention_reference.md, section 0.3.
        """
        if self.stabilise == "none":
            return self.features(x), None
        xs = x if self.input_scale == 1.0 else self.input_scale * x
        phi, cache = self.feature_map.forward(xs, self._omega_on(x))
        c = cache.get("c") if isinstance(cache, dict) else None
        if c is None:
            raise ValueError(f"feature_map has stabilise={self.stabilise!r} but its forward cache has "
                             f"no shift 'c'; the stabilisation cannot be undone")
        return phi, c[..., 0]

    def _features_qk(self, q, k, same):
        """Features and shifts of queries and keys; one feature pass when ``same`` (``q is k``:
        self-attention, the token flows' case), whose result is the same arrays bit for bit."""
        phi_q, c_q = self.features_and_shift(q)
        if same:
            return phi_q, c_q, phi_q, c_q
        phi_k, c_k = self.features_and_shift(k)
        return phi_q, c_q, phi_k, c_k

    @staticmethod
    def _reweight_keys(xp, phi_k, shift_k):
        """Keys times ``exp(c_j - max c)`` and ``max c`` (..., 1); (phi_k, None) without a shift."""
        if shift_k is None:
            return phi_k, None
        top = xp.max(shift_k, axis=-1, keepdims=True)
        return phi_k * xp.exp(shift_k - top)[..., None], top

    def _require_positive(self, what):
        if not self.positive:
            name = getattr(self.feature_map, "name", type(self.feature_map).__name__)
            raise ValueError(f"{what} needs a positive feature map (normaliser > 0); feature_map "
                             f"{name!r} has positive=False. Use the unnormalised variant 'USA' or a "
                             f"positive map (favor, elu, softplus, sigmoid2, softmaxfeat, cos2, "
                             f"porf_softplus)")

    def matrix(self, q, k):
        """Dense kernel matrix ``G_ij = phi(s q_i) . phi(s k_j)`` (the O(n_q n_k) reference).

        Parameters
        ----------
        q : array, shape (..., n_q, d_k)
        k : array, shape (..., n_k, d_k)

        Returns
        -------
        array, shape (..., n_q, n_k)
            The kernel of the unshifted features (a stabilising shift is undone).
        """
        same = q is k
        xp, q, k, _ = _check_qkv(q, k)
        phi_q, c_q, phi_k, c_k = self._features_qk(q, k, same)
        g = xp.matmul(phi_q, xp.swapaxes(phi_k, -1, -2))
        if c_q is not None:
            g = g * xp.exp(c_q[..., :, None] + c_k[..., None, :])
        return g

    def attend(self, q, k, v) -> AttentionOutput:
        """Row-normalised linear attention, O((n_q + n_k) m) (see :class:`AttentionOutput`).

        Parameters
        ----------
        q : array, shape (..., n_q, d_k)
        k : array, shape (..., n_k, d_k)
        v : array, shape (..., n_k, d_v)

        Returns
        -------
        AttentionOutput
            ``out`` (..., n_q, d_v) and ``log_zbar`` (..., n_q); a stabilising shift
            of the map is undone exactly (class Notes).

        Raises
        ------
        ValueError
            If the feature map is not positive, or on inconsistent shapes.

        References
        ----------
        spec section 2.2 (K3).
        """
        self._require_positive("row-normalised linear attention (SA)")
        same = q is k
        xp, q, k, v = _check_qkv(q, k, v)
        phi_q, c_q, phi_k, c_k = self._features_qk(q, k, same)
        phi_k, top = self._reweight_keys(xp, phi_k, c_k)
        s = xp.matmul(xp.swapaxes(phi_k, -1, -2), v)           # (..., m, d_v)
        z = xp.sum(phi_k, axis=-2)                               # (..., m)
        den = xp.matmul(phi_q, z[..., :, None])[..., 0]          # (..., n_q)
        out = xp.matmul(phi_q, s) / den[..., None]
        zbar = den / k.shape[-2]
        log_zbar = xp.where(zbar > 0, xp.log(xp.where(zbar > 0, zbar, 1.0)), xp.nan)
        if c_q is not None:
            log_zbar = log_zbar + c_q + top
        return AttentionOutput(out, log_zbar)

    def attend_mean(self, q, k, v):
        """Unnormalised linear attention (USA) ``(1/n_k) phi(q)^T S``; signed maps allowed.

        Parameters
        ----------
        q : array, shape (..., n_q, d_k)
        k : array, shape (..., n_k, d_k)
        v : array, shape (..., n_k, d_v)

        Returns
        -------
        array, shape (..., n_q, d_v)
            A stabilising shift of the map is undone exactly (class Notes).

        References
        ----------
        spec section 2.2 (K3), section 6.1 (USA).
        """
        same = q is k
        xp, q, k, v = _check_qkv(q, k, v)
        phi_q, c_q, phi_k, c_k = self._features_qk(q, k, same)
        phi_k, top = self._reweight_keys(xp, phi_k, c_k)
        s = xp.matmul(xp.swapaxes(phi_k, -1, -2), v)
        out = xp.matmul(phi_q, s) / k.shape[-2]
        if c_q is not None:
            out = out * xp.exp(c_q + top)[..., None]
        return out

    def sinkhorn(self, q, k, v, *, max_iter=1000, tol=None, g0=None, check_every=10,
                 symmetric=None) -> SinkhornOutput:
        """Doubly stochastic linear attention, O(n m) per iteration.

        Same contract as :meth:`SoftmaxKernel.sinkhorn` (including the dtype-aware
        default ``tol``); the scalings act on the factors: row sums ``e^{f_i} phi_i .
        (sum_j e^{g_j} psi_j)``, column sums ``e^{g_j} psi_j . (sum_i e^{f_i} phi_i)``,
        so no n x n matrix is formed. ``symmetric`` is accepted for interface
        compatibility (alternating updates are always used). With a stabilised map
        the iterations run on the shifted features (P is invariant under diagonal
        rescalings) and the returned ``f, g`` (and ``g0``) refer to the unshifted
        kernel, ``P_ij = exp(f_i + g_j) G_ij``.

        Parameters
        ----------
        q, k : arrays, shape (..., n, d_k) (square: ``n_q = n_k = n``)
        v : array, shape (..., n, d_v)
        max_iter : int, default 1000
            Cap on the iterations (see :meth:`SoftmaxKernel.sinkhorn`).
        tol : float or None, default None
            Stopping tolerance; None is the dtype-aware default (see :meth:`SoftmaxKernel.sinkhorn`).
        g0 : array, shape (..., n), optional
            Warm start for ``g``, referring to the unshifted kernel.
        check_every : int, default 10
            Iterations between convergence checks (see :meth:`SoftmaxKernel.sinkhorn`).
        symmetric : bool or None
            Accepted for interface compatibility and ignored (alternating updates are always used).

        Returns
        -------
        SinkhornOutput

        Raises
        ------
        ValueError
            If the feature map is not positive, the matrix is not square, or on
            bad ``max_iter``, ``tol``, ``g0``.

        References
        ----------
        Sander et al. (2022), Sinkformers, eq. (4); spec section 6.3.
        """
        self._require_positive("Sinkhorn linear attention")
        xp, q, k, v = _check_qkv(q, k, v)
        max_iter, tol, check_every = _check_sinkhorn_args(max_iter, tol, check_every)
        n = k.shape[-2]
        if q.shape[-2] != n:
            raise ValueError(f"sinkhorn needs a square attention matrix (n_q = n_k); got "
                             f"q {tuple(q.shape)}, k {tuple(k.shape)}")
        phi, c_q = self.features_and_shift(q)
        psi, c_k = self.features_and_shift(k)
        lead = q.shape[:-2]
        if g0 is None:
            g = xp.zeros(lead + (n,), dtype=q.dtype)
        else:
            g = xp.asarray(g0)
            if g.shape != lead + (n,):
                raise ValueError(f"g0 must have shape {lead + (n,)}, got {tuple(g.shape)}")
            if c_k is not None:
                g = g + c_k                  # potential of the shifted kernel

        def row_pass(gg):
            w = xp.matmul(xp.exp(gg)[..., None, :], psi)[..., 0, :]        # (..., m)
            return -xp.log(xp.matmul(phi, w[..., :, None])[..., 0])

        def col_pass(ff):
            u = xp.matmul(xp.exp(ff)[..., None, :], phi)[..., 0, :]
            return -xp.log(xp.matmul(psi, u[..., :, None])[..., 0])

        f = row_pass(g)
        it = 0
        while it < max_iter:
            it += 1
            g = col_pass(f)
            f_new = row_pass(g)
            change = xp.max(xp.abs(f_new - f))
            f = f_new
            if it % check_every == 0 or it == max_iter:
                if _sinkhorn_stop(xp, change, f, tol):
                    break
        f = row_pass(g)
        col_err = xp.max(xp.abs(xp.expm1(-(col_pass(f) - g))))
        s = xp.matmul(xp.swapaxes(psi * xp.exp(g)[..., None], -1, -2), v)   # (..., m, d_v)
        out = xp.exp(f)[..., None] * xp.matmul(phi, s)
        if c_q is not None:
            f = f - c_q
            g = g - c_k
        return SinkhornOutput(out, f, g, col_err, it)


def sinkhorn_matrix(gram, *, max_iter=10000, tol=1e-13):
    """Dense Sinkhorn scaling of a positive square matrix to a doubly stochastic one (reference).

    Parameters
    ----------
    gram : array, shape (..., n, n)
        Positive kernel matrix ``G``.
    max_iter : int, default 10000
    tol : float, default 1e-13
        Stop when ``max |row sum - 1|`` after a column normalisation is <= tol.

    Returns
    -------
    P : array, shape (..., n, n)
        ``diag(u) G diag(w)``, columns summing to 1 exactly, rows to within the residual.
    residual : float
        ``max |row sum - 1|`` of ``P``.

    Raises
    ------
    ValueError
        If ``gram`` is not square or has non-positive entries.

    References
    ----------
    Sinkhorn (1964); Sander et al. (2022).
    """
    xp = namespace(gram)
    gram = xp.asarray(gram)
    if gram.ndim < 2 or gram.shape[-1] != gram.shape[-2]:
        raise ValueError(f"gram must be square (..., n, n); got shape {tuple(gram.shape)}")
    if not bool(xp.all(gram > 0)):
        raise ValueError(f"gram must have positive entries for Sinkhorn scaling (allowed: every "
                         f"entry > 0, finite); got smallest entry {float(xp.min(gram))!r}")
    max_iter = check_int("max_iter", max_iter, minimum=1)
    tol = check_real("tol", tol, nonnegative=True)
    p = gram
    res = math.inf
    for _ in range(max_iter):
        p = p / xp.sum(p, axis=-1, keepdims=True)
        p = p / xp.sum(p, axis=-2, keepdims=True)
        res = float(xp.max(xp.abs(xp.sum(p, axis=-1) - 1.0)))
        if res <= tol:
            break
    return p, res


def dense_attention(gram, v, normalization="row"):
    """Attention from an explicit kernel matrix (the O(n^2) reference of every kernel).

    Parameters
    ----------
    gram : array, shape (..., n_q, n_k)
        Kernel matrix ``G_ij > 0`` (any sign allowed for ``"mean"``).
    v : array, shape (..., n_k, d_v)
    normalization : {"row", "mean", "sinkhorn"}
        ``"row"``: ``G v / G 1`` (SA); ``"mean"``: ``G v / n_k`` (USA);
        ``"sinkhorn"``: ``P v`` with ``P`` from :func:`sinkhorn_matrix`.

    Returns
    -------
    array, shape (..., n_q, d_v)

    Raises
    ------
    ValueError
        On an unknown ``normalization`` or mismatched shapes.

    References
    ----------
    paper 004, Prop. 9 (matrix route); spec section 6.1.
    """
    xp = namespace(gram, v)
    if normalization not in ("row", "mean", "sinkhorn"):
        raise ValueError(f"normalization={normalization!r} is not supported; allowed: 'row', "
                         f"'mean', 'sinkhorn'")
    if gram.shape[-1] != v.shape[-2]:
        raise ValueError(f"gram (..., n_q, n_k) {tuple(gram.shape)} and v (..., n_k, d_v) "
                         f"{tuple(v.shape)} disagree on n_k")
    if normalization == "row":
        return xp.matmul(gram, v) / xp.sum(gram, axis=-1)[..., None]
    if normalization == "mean":
        return xp.matmul(gram, v) / gram.shape[-1]
    p, _ = sinkhorn_matrix(gram)
    return xp.matmul(p, v)
