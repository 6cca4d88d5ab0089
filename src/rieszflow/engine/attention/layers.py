"""Transformer layers as forward/backward pairs with explicit caches (NumPy or CuPy).

Every layer follows one contract:

* ``init_params(rng, dtype) -> dict`` draws the layer's parameters on the host
  with a :class:`numpy.random.Generator` (local names such as ``"w"``, ``"b"``);
* ``forward(params, x, ...) -> (y, cache)`` evaluates the layer;
* ``backward(dy, cache) -> (dx, grads)`` is the hand-written vector-Jacobian
  product: ``dx = (dy/dx)^T dy`` and ``grads[name] = (dy/dparams[name])^T dy``.

Layers hold hyperparameters only; parameters live in the dict that the caller
passes, so a model can keep one flat ``name -> array`` dict and an optimiser can
update it in place. Array code takes ``xp = namespace(...)`` from
:mod:`engine.backend`, so the same code runs on NumPy and CuPy. Randomness
(dropout masks) is drawn on the host from a passed generator and moved to the
device, so a seed fixes a run on every backend.

Layouts: activations are ``(B, L, D)`` (batch, sequence, model width); inside
attention, heads are split head-major as ``(H, B, L, d_k)`` so that each head's
slice is contiguous. Masks are boolean ``(B, L)`` with ``True`` on real tokens
and ``False`` on padding.

Values are not scanned for NaN/inf inside layer forwards (a full pass and, on
a GPU, a device sync per call); the model validates its integer inputs and the
loss validates the logits.

References
----------
paper 000, App. C (eqs. (C.1)-(C.3), the pooling operator of C.1 and the
closing Remark on FFN, residual and LayerNorm) and App. F.2 ("Experimental
setup"); paper 000, eq. (3.2). Wang et al. (2020), "Linformer: Self-Attention
with Linear Complexity", arXiv:2006.04768 (:class:`LinformerAttention`, a
baseline of paper 000's NLP tables).
"""
from __future__ import annotations

import math

import numpy as np

from rieszflow.engine._checks import check_int, is_host
from rieszflow.engine.backend import namespace

__all__ = [
    "Linear",
    "Embedding",
    "PositionEmbedding",
    "LayerNorm",
    "GELU",
    "Dropout",
    "FeedForward",
    "KernelizedLinearAttention",
    "causal_linear_attention",
    "causal_linear_attention_backward",
    "causal_linear_attention_prefix",
    "streaming_linear_attention",
    "depthwise_conv",
    "depthwise_conv_backward",
    "SoftmaxAttention",
    "LinformerAttention",
    "EncoderLayer",
    "masked_mean_pool",
    "masked_mean_pool_backward",
    "softmax_cross_entropy",
    "check_mask",
    "QK_MODES",
]

QK_MODES = ("shared", "learned")


# --------------------------------------------------------------------------- helpers

def _check_last_dim(name, x, d):
    if x.ndim < 1 or x.shape[-1] != d:
        raise ValueError(f"{name} has shape {tuple(x.shape)}; its last axis must have size {d}")


def _xavier_uniform(rng, fan_in, fan_out, dtype):
    a = math.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-a, a, size=(fan_in, fan_out)).astype(dtype)


def _linear_fwd(x, w, b):
    """y = x @ w + b over any leading axes."""
    y = x @ w
    if b is not None:
        y += b
    return y


def _linear_bwd(dy, x, w, with_bias=True):
    """VJP of y = x @ w + b: returns (dx, dw, db)."""
    d_in, d_out = w.shape
    x2 = x.reshape(-1, d_in)
    dy2 = dy.reshape(-1, d_out)
    dw = x2.T @ dy2
    db = dy2.sum(axis=0) if with_bias else None
    dx = dy @ w.T
    return dx, dw, db


def check_mask(mask, shape):
    """Validate a padding mask.

    Parameters
    ----------
    mask : bool array, shape (B, L)
        ``True`` on real tokens, ``False`` on padding.
    shape : tuple of int
        Expected ``(B, L)``.

    Returns
    -------
    None

    Raises
    ------
    TypeError
        If ``mask`` is not boolean.
    ValueError
        If its shape differs from ``shape`` or a row has no real token (the
        attention normaliser and the mean pool would divide by zero).

    References
    ----------
    paper 000, App. C ("padding masks apply by omitting the masked terms").
    """
    if mask is None or not hasattr(mask, "dtype"):
        raise TypeError(f"mask must be a boolean array of shape {tuple(shape)}; got {type(mask).__name__}")
    if mask.dtype != bool:
        raise TypeError(f"mask has dtype {mask.dtype}; expected bool (True = real token)")
    if tuple(mask.shape) != tuple(shape):
        raise ValueError(f"mask has shape {tuple(mask.shape)}; expected {tuple(shape)} (the shape of ids)")
    xp = namespace(mask)
    # the contents are checked on the host only: on a device it would be a sync per call
    # (engine._checks policy); the training loops build masks on the host from the data
    if is_host(mask) and not bool(xp.all(mask.any(axis=1))):
        raise ValueError("mask has a row with no True entry; every sequence needs at least one real token")


def _softmax_last(xp, s):
    """Softmax over the last axis, in place in ``s`` (max-shifted: no overflow)."""
    s -= s.max(axis=-1, keepdims=True)
    p = xp.exp(s, out=s)
    p /= p.sum(axis=-1, keepdims=True)
    return p


def _softmax_last_backward(p, dp):
    """VJP of :func:`_softmax_last`: ``ds = p * (dp - sum(dp * p))`` over the last axis."""
    return p * (dp - (dp * p).sum(axis=-1, keepdims=True))


def _split_heads(x, n_heads):
    """(B, L, H*dk) -> contiguous (H, B, L, dk)."""
    xp = namespace(x)
    b, l, d = x.shape
    return xp.ascontiguousarray(x.reshape(b, l, n_heads, d // n_heads).transpose(2, 0, 1, 3))


def _merge_heads(x):
    """(H, B, L, dk) -> contiguous (B, L, H*dk)."""
    xp = namespace(x)
    h, b, l, dk = x.shape
    return xp.ascontiguousarray(x.transpose(1, 2, 0, 3)).reshape(b, l, h * dk)


# --------------------------------------------------------------------------- Linear

class Linear:
    """Affine map y = x W + b.

    Parameters
    ----------
    d_in, d_out : int
        Input and output widths.
    bias : bool, default True
        Whether to add the bias ``b`` (shape (d_out,)).

    Notes
    -----
    Initialisation: Xavier/Glorot uniform ``W ~ U(-a, a)``,
    ``a = sqrt(6 / (d_in + d_out))``; ``b = 0``.

    References
    ----------
    paper 000, App. C (Q = X W_Q, K = X W_K, V = X W_V; classifier
    y = w^T P(Phi(X)) + b of C.1); Glorot & Bengio (2010).
    """

    def __init__(self, d_in: int, d_out: int, bias: bool = True):
        self.d_in = check_int("d_in", d_in, minimum=1)
        self.d_out = check_int("d_out", d_out, minimum=1)
        self.bias = bool(bias)

    def init_params(self, rng: np.random.Generator, dtype=np.float64) -> dict:
        """Draw parameters on the host.

        Parameters
        ----------
        rng : numpy.random.Generator
        dtype : numpy dtype, default float64

        Returns
        -------
        dict
            ``"w"`` (d_in, d_out) and, with bias, ``"b"`` (d_out,).
        """
        p = {"w": _xavier_uniform(rng, self.d_in, self.d_out, dtype)}
        if self.bias:
            p["b"] = np.zeros(self.d_out, dtype=dtype)
        return p

    def forward(self, params: dict, x):
        """Evaluate y = x W + b.

        Parameters
        ----------
        params : dict
            ``"w"`` (d_in, d_out), ``"b"`` (d_out,).
        x : float array, shape (..., d_in)

        Returns
        -------
        y : float array, shape (..., d_out)
        cache : tuple

        Raises
        ------
        ValueError
            If the last axis of ``x`` is not ``d_in``.
        """
        _check_last_dim("x", x, self.d_in)
        y = _linear_fwd(x, params["w"], params.get("b"))
        return y, (x, params["w"])

    def backward(self, dy, cache):
        """VJP of :meth:`forward`.

        Parameters
        ----------
        dy : float array, shape (..., d_out)
        cache : tuple from :meth:`forward`

        Returns
        -------
        dx : float array, shape (..., d_in)
        grads : dict
            ``"w"`` (d_in, d_out) and ``"b"`` (d_out,), summed over leading axes.
        """
        x, w = cache
        dx, dw, db = _linear_bwd(dy, x, w, self.bias)
        grads = {"w": dw}
        if self.bias:
            grads["b"] = db
        return dx, grads


# --------------------------------------------------------------------------- embeddings

class Embedding:
    """Token embedding: row lookup ``y[b, l] = W[ids[b, l]]``.

    Parameters
    ----------
    vocab_size : int
        Number of rows of ``W``; ids must lie in ``[0, vocab_size)``.
    d : int
        Embedding width.
    init_std : float, default 1.0
        ``W ~ N(0, init_std^2)`` (1.0 is PyTorch's ``nn.Embedding`` default and
        gives the first layer unit-variance coordinates, like the post-LN
        activations that feed the later layers).

    Notes
    -----
    The gradient is a scatter-add of ``dy`` rows onto the looked-up ids. It is
    computed by sorting the ids and summing each run of equal ids with a
    float64 cumulative sum (O(n log n + n d), no ``np.add.at``), which gives
    the sparse pair ``(unique_ids, grad_rows)``; :meth:`backward` returns it
    or its dense scatter.

    References
    ----------
    paper 000, App. F.2 ("Experimental setup": WordPiece token inputs).
    """

    def __init__(self, vocab_size: int, d: int, init_std: float = 1.0):
        self.vocab_size = check_int("vocab_size", vocab_size, minimum=1)
        self.d = check_int("d", d, minimum=1)
        if not (np.isfinite(init_std) and init_std > 0):
            raise ValueError(f"init_std={init_std!r} is not allowed; expected a finite positive float")
        self.init_std = float(init_std)

    def init_params(self, rng: np.random.Generator, dtype=np.float64) -> dict:
        """Draw the table on the host.

        Parameters
        ----------
        rng : numpy.random.Generator
        dtype : numpy dtype, default float64

        Returns
        -------
        dict
            ``"weight"``: (vocab_size, d), entries N(0, init_std^2).
        """
        return {"weight": (self.init_std * rng.standard_normal((self.vocab_size, self.d))).astype(dtype)}

    def check_ids(self, ids):
        """Validate token ids.

        Parameters
        ----------
        ids : int array, shape (B, L)

        Returns
        -------
        None

        Raises
        ------
        TypeError
            If ``ids`` is not an integer array.
        ValueError
            If ``ids`` is not 2-D or an id lies outside ``[0, vocab_size)``.
        """
        if not hasattr(ids, "dtype") or not np.issubdtype(np.dtype(ids.dtype), np.integer):
            raise TypeError(f"ids must be an integer array; got dtype {getattr(ids, 'dtype', type(ids))}")
        if ids.ndim != 2:
            raise ValueError(f"ids has shape {tuple(ids.shape)}; expected (B, L)")
        if ids.size and is_host(ids):          # contents on the host only (engine._checks policy)
            xp = namespace(ids)
            lo, hi = int(xp.min(ids)), int(xp.max(ids))
            if lo < 0 or hi >= self.vocab_size:
                bad = lo if lo < 0 else hi
                raise ValueError(f"ids contains {bad}, outside the vocabulary range [0, {self.vocab_size})")

    def forward(self, params: dict, ids):
        """Look up rows.

        Parameters
        ----------
        params : dict
            ``"weight"`` (vocab_size, d).
        ids : int array, shape (B, L)

        Returns
        -------
        y : float array, shape (B, L, d)
        cache : tuple

        Raises
        ------
        TypeError, ValueError
            See :meth:`check_ids`.
        """
        self.check_ids(ids)
        return params["weight"][ids], (ids, params["weight"].dtype)

    def backward_rows(self, dy, cache):
        """Sparse gradient of the embedding table.

        Parameters
        ----------
        dy : float array, shape (B, L, d)
        cache : tuple from :meth:`forward`

        Returns
        -------
        unique_ids : int array, shape (U,)
            Sorted distinct ids present in the batch.
        grad_rows : float array, shape (U, d)
            ``grad_rows[u] = sum over positions with ids == unique_ids[u] of dy``.
        """
        ids, dtype = cache
        xp = namespace(dy, ids)
        sid, csum, is_last = self._sorted_runs(xp, dy, ids)
        ends = xp.nonzero(is_last)[0]
        seg = csum[ends]
        seg[1:] -= csum[ends[:-1]]
        return sid[ends], seg.astype(dtype)

    def _sorted_runs(self, xp, dy, ids):
        """Ids sorted, the float64 cumulative sums of their ``dy`` rows in that order, and the
        last position of each run of equal ids (shared by both table-gradient paths)."""
        flat = ids.reshape(-1)
        rows = dy.reshape(-1, self.d)
        order = xp.argsort(flat)
        sid = flat[order]
        csum = xp.cumsum(rows[order].astype(xp.float64), axis=0)
        is_last = xp.empty(sid.shape, dtype=bool)
        is_last[:-1] = sid[1:] != sid[:-1]
        is_last[-1] = True
        return sid, csum, is_last

    def backward(self, dy, cache):
        """VJP of :meth:`forward` with a dense table gradient.

        Parameters
        ----------
        dy : float array, shape (B, L, d)
        cache : tuple from :meth:`forward`

        Returns
        -------
        dx : None
            Ids are integers; there is no input gradient.
        grads : dict
            ``"weight"`` (vocab_size, d): zero except on the batch's ids.
        """
        xp = namespace(dy)
        if not is_host(dy):
            return None, {"weight": self._backward_dense_device(xp, dy, cache)}
        uid, rows = self.backward_rows(dy, cache)
        dense = xp.zeros((self.vocab_size, self.d), dtype=rows.dtype)
        dense[uid] = rows
        return None, {"weight": dense}

    def _backward_dense_device(self, xp, dy, cache):
        """:meth:`backward`'s table gradient with no data-dependent shape (no host sync).

        The same segment sums as :meth:`backward_rows` (float64 cumulative sums, end minus
        the previous run's end), scattered with ``add.at``: every position adds its run's sum
        at the run's last position and 0 elsewhere, so each row gets exactly that sum.
        """
        ids, dtype = cache
        sid, csum, is_last = self._sorted_runs(xp, dy, ids)
        start = xp.searchsorted(sid, sid, side="left")            # first position of each run
        prev = xp.where((start > 0)[:, None], csum[xp.maximum(start - 1, 0)], 0.0)
        seg = xp.where(is_last[:, None], csum - prev, 0.0).astype(dtype)
        dense = xp.zeros((self.vocab_size, self.d), dtype=dtype)
        xp.add.at(dense, sid, seg)
        return dense


class PositionEmbedding:
    """Learned absolute position embedding added to the input: ``y[b, l] = x[b, l] + P[l]``.

    Parameters
    ----------
    max_len : int
        Number of positions; inputs with ``L > max_len`` raise.
    d : int
        Width.
    init_std : float, default 0.02
        ``P ~ N(0, init_std^2)`` (BERT/GPT-style small init).

    References
    ----------
    paper 000, App. F.2 (maximum sequence length 128); Devlin et al. (2019),
    learned absolute positions.
    """

    def __init__(self, max_len: int, d: int, init_std: float = 0.02):
        self.max_len = check_int("max_len", max_len, minimum=1)
        self.d = check_int("d", d, minimum=1)
        if not (np.isfinite(init_std) and init_std > 0):
            raise ValueError(f"init_std={init_std!r} is not allowed; expected a finite positive float")
        self.init_std = float(init_std)

    def init_params(self, rng: np.random.Generator, dtype=np.float64) -> dict:
        """Draw the position table on the host.

        Parameters
        ----------
        rng : numpy.random.Generator
        dtype : numpy dtype, default float64

        Returns
        -------
        dict
            ``"weight"``: (max_len, d), entries N(0, init_std^2).
        """
        return {"weight": (self.init_std * rng.standard_normal((self.max_len, self.d))).astype(dtype)}

    def forward(self, params: dict, x):
        """Add positions ``0..L-1``.

        Parameters
        ----------
        params : dict
            ``"weight"`` (max_len, d).
        x : float array, shape (B, L, d)

        Returns
        -------
        y : float array, shape (B, L, d)
        cache : int
            ``L``.

        Raises
        ------
        ValueError
            If ``x`` is not (B, L, d) or ``L > max_len``.
        """
        if x.ndim != 3:
            raise ValueError(f"x has shape {tuple(x.shape)}; expected (B, L, {self.d})")
        _check_last_dim("x", x, self.d)
        length = x.shape[1]
        if length > self.max_len:
            raise ValueError(f"sequence length L={length} exceeds max_len={self.max_len}")
        return x + params["weight"][:length], length

    def backward(self, dy, cache):
        """VJP of :meth:`forward`.

        Parameters
        ----------
        dy : float array, shape (B, L, d)
        cache : int from :meth:`forward`

        Returns
        -------
        dx : float array, shape (B, L, d)
            ``dy`` itself.
        grads : dict
            ``"weight"`` (max_len, d): ``sum_b dy[b, l]`` for ``l < L``, 0 beyond.
        """
        xp = namespace(dy)
        length = cache
        dw = xp.zeros((self.max_len, self.d), dtype=dy.dtype)
        dw[:length] = dy.sum(axis=0)
        return dy, {"weight": dw}


# --------------------------------------------------------------------------- LayerNorm, GELU, Dropout

class LayerNorm:
    """Layer normalisation over the last axis.

    ``y = gamma * (x - mean) / sqrt(var + eps) + beta`` with the biased variance
    ``var = mean((x - mean)^2)`` (1/d normalisation, as in Ba et al. 2016 and
    PyTorch).

    Parameters
    ----------
    d : int
        Normalised width.
    eps : float, default 1e-5
        Variance floor (PyTorch's default).

    References
    ----------
    paper 000, App. C, Remark (LN in the residual/normalisation update).
    """

    def __init__(self, d: int, eps: float = 1e-5):
        self.d = check_int("d", d, minimum=1)
        if not (np.isfinite(eps) and eps > 0):
            raise ValueError(f"eps={eps!r} is not allowed; expected a finite positive float")
        self.eps = float(eps)

    def init_params(self, rng: np.random.Generator, dtype=np.float64) -> dict:
        """Identity initialisation.

        Parameters
        ----------
        rng : numpy.random.Generator
            Unused (kept for the common layer contract).
        dtype : numpy dtype, default float64

        Returns
        -------
        dict
            ``"gamma"``: ones (d,); ``"beta"``: zeros (d,).
        """
        return {"gamma": np.ones(self.d, dtype=dtype), "beta": np.zeros(self.d, dtype=dtype)}

    def forward(self, params: dict, x):
        """Normalise over the last axis.

        Parameters
        ----------
        params : dict
            ``"gamma"``, ``"beta"``: (d,).
        x : float array, shape (..., d)

        Returns
        -------
        y : float array, shape (..., d)
        cache : tuple

        Raises
        ------
        ValueError
            If the last axis of ``x`` is not ``d``.
        """
        _check_last_dim("x", x, self.d)
        xp = namespace(x)
        mu = x.mean(axis=-1, keepdims=True)
        xc = x - mu
        var = (xc * xc).mean(axis=-1, keepdims=True)
        rstd = 1.0 / xp.sqrt(var + self.eps)
        xhat = xc * rstd
        y = xhat * params["gamma"] + params["beta"]
        return y, (xhat, rstd, params["gamma"])

    def backward(self, dy, cache):
        """VJP of :meth:`forward`.

        Parameters
        ----------
        dy : float array, shape (..., d)
        cache : tuple from :meth:`forward`

        Returns
        -------
        dx : float array, shape (..., d)
        grads : dict
            ``"gamma"``, ``"beta"``: (d,), summed over leading axes.
        """
        xhat, rstd, gamma = cache
        d = self.d
        dy2 = dy.reshape(-1, d)
        xh2 = xhat.reshape(-1, d)
        dgamma = (dy2 * xh2).sum(axis=0)
        dbeta = dy2.sum(axis=0)
        dxhat = dy * gamma
        dx = rstd * (dxhat - dxhat.mean(axis=-1, keepdims=True)
                     - xhat * (dxhat * xhat).mean(axis=-1, keepdims=True))
        return dx, {"gamma": dgamma, "beta": dbeta}


class GELU:
    """Gaussian error linear unit, tanh approximation.

    ``gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`` (Hendrycks &
    Gimpel 2016, eq. in Sec. 2; GPT-2/BERT-TF form). It differs from the exact
    ``x Phi(x)`` by less than 1e-3 everywhere; the tanh form is used because
    it needs no ``erf`` (not in the NumPy namespace) and runs unchanged on CuPy.

    The layer has no parameters or options.

    References
    ----------
    paper 000, App. C, Remark ("nonlinearity sigma (e.g., GELU)").
    """

    _C = math.sqrt(2.0 / math.pi)
    _A = 0.044715

    def forward(self, x):
        """Apply elementwise.

        Parameters
        ----------
        x : float array, any shape

        Returns
        -------
        y : float array, shape of ``x``
        cache : tuple
        """
        xp = namespace(x)
        t = xp.tanh(self._C * (x + self._A * x * x * x))
        return 0.5 * x * (1.0 + t), (x, t)

    def backward(self, dy, cache):
        """VJP of :meth:`forward`.

        Parameters
        ----------
        dy : float array, shape of ``x``
        cache : tuple from :meth:`forward`

        Returns
        -------
        dx : float array
            ``dy * gelu'(x)``.
        grads : dict
            Empty (no parameters).
        """
        x, t = cache
        dt = self._C * (1.0 + 3.0 * self._A * x * x) * (1.0 - t * t)
        return dy * (0.5 * (1.0 + t) + 0.5 * x * dt), {}


class Dropout:
    """Inverted dropout: keep each entry with probability ``1 - p`` and scale by ``1/(1-p)``.

    Parameters
    ----------
    p : float in [0, 1)
        Drop probability.

    Notes
    -----
    The keep mask is drawn on the host from the passed
    :class:`numpy.random.Generator` (``rng.random(shape) >= p``, float32
    uniforms) and moved to the device, so the same seed gives the same mask on
    NumPy and CuPy. With ``train=False`` or ``p == 0`` it is the identity and
    draws nothing.

    References
    ----------
    paper 000, App. F.2 ("Dropout is set to 0.1"); Srivastava et al. (2014).
    """

    def __init__(self, p: float):
        if not (isinstance(p, (int, float, np.floating)) and np.isfinite(p) and 0.0 <= p < 1.0):
            raise ValueError(f"dropout p={p!r} is not allowed; expected a float in [0, 1)")
        self.p = float(p)

    def forward(self, x, train: bool, rng: np.random.Generator | None):
        """Apply dropout.

        Parameters
        ----------
        x : float array, any shape
        train : bool
            Drop only when True.
        rng : numpy.random.Generator or None
            Required when ``train`` and ``p > 0``.

        Returns
        -------
        y : float array, shape of ``x``
        cache : array or None
            The scaled keep mask.

        Raises
        ------
        ValueError
            If dropping is needed and ``rng`` is not a Generator.
        """
        if not train or self.p == 0.0:
            return x, None
        if not isinstance(rng, np.random.Generator):
            raise ValueError(f"rng={rng!r} is not allowed in training with dropout p={self.p}; "
                             "pass a numpy.random.Generator")
        xp = namespace(x)
        keep = rng.random(x.shape, dtype=np.float32) >= self.p
        scale = np.asarray(1.0 / (1.0 - self.p), dtype=x.dtype)
        mask = xp.asarray(keep.astype(x.dtype) * scale)
        return x * mask, mask

    def backward(self, dy, cache):
        """VJP of :meth:`forward`.

        Parameters
        ----------
        dy : float array, shape of ``x``
        cache : array or None from :meth:`forward`

        Returns
        -------
        dx : float array
            ``dy * mask`` (``dy`` itself when no mask was drawn).
        grads : dict
            Empty (no parameters).
        """
        return (dy if cache is None else dy * cache), {}


# --------------------------------------------------------------------------- FFN

class FeedForward:
    """Position-wise feed-forward network ``W2 Dropout(GELU(W1 x + b1)) + b2``.

    Parameters
    ----------
    d_model, d_ff : int
        Model and hidden widths.
    dropout : float in [0, 1)
        Dropout on the hidden activation.

    Notes
    -----
    Parameters: ``"w1"`` (d_model, d_ff), ``"b1"`` (d_ff,), ``"w2"``
    (d_ff, d_model), ``"b2"`` (d_model,); Xavier-uniform weights, zero biases.

    References
    ----------
    paper 000, App. C, Remark: FFN(a) = W2 sigma(W1 a + b1) + b2.
    """

    def __init__(self, d_model: int, d_ff: int, dropout: float = 0.0):
        self.d_model = check_int("d_model", d_model, minimum=1)
        self.d_ff = check_int("d_ff", d_ff, minimum=1)
        self.gelu = GELU()
        self.drop = Dropout(dropout)

    def init_params(self, rng: np.random.Generator, dtype=np.float64) -> dict:
        """Draw the parameters on the host.

        Parameters
        ----------
        rng : numpy.random.Generator
        dtype : numpy dtype, default float64

        Returns
        -------
        dict
            ``w1, b1, w2, b2`` (see class Notes).
        """
        return {"w1": _xavier_uniform(rng, self.d_model, self.d_ff, dtype),
                "b1": np.zeros(self.d_ff, dtype=dtype),
                "w2": _xavier_uniform(rng, self.d_ff, self.d_model, dtype),
                "b2": np.zeros(self.d_model, dtype=dtype)}

    def forward(self, params: dict, x, train: bool = False, rng: np.random.Generator | None = None):
        """Apply position-wise.

        Parameters
        ----------
        params : dict
            ``w1, b1, w2, b2``.
        x : float array, shape (..., d_model)
        train : bool, default False
            Apply dropout to the hidden activation.
        rng : numpy.random.Generator or None
            Dropout generator (required when ``train`` and dropout > 0).

        Returns
        -------
        y : float array, shape (..., d_model)
        cache : tuple

        Raises
        ------
        ValueError
            If the last axis of ``x`` is not ``d_model``, or see :meth:`Dropout.forward`.
        """
        _check_last_dim("x", x, self.d_model)
        h = _linear_fwd(x, params["w1"], params["b1"])
        g, gc = self.gelu.forward(h)
        gd, dc = self.drop.forward(g, train, rng)
        y = _linear_fwd(gd, params["w2"], params["b2"])
        return y, (x, gc, gd, dc, params["w1"], params["w2"])

    def backward(self, dy, cache):
        """VJP of :meth:`forward`.

        Parameters
        ----------
        dy : float array, shape (..., d_model)
        cache : tuple from :meth:`forward`

        Returns
        -------
        dx : float array, shape (..., d_model)
        grads : dict
            ``w1, b1, w2, b2`` with the parameters' shapes.
        """
        x, gc, gd, dc, w1, w2 = cache
        dgd, dw2, db2 = _linear_bwd(dy, gd, w2)
        dg, _ = self.drop.backward(dgd, dc)
        dh, _ = self.gelu.backward(dg, gc)
        dx, dw1, db1 = _linear_bwd(dh, x, w1)
        return dx, {"w1": dw1, "b1": db1, "w2": dw2, "b2": db2}


# --------------------------------------------------------------------------- attention

def _check_qk(qk):
    if qk not in QK_MODES:
        raise ValueError(f"qk={qk!r} is not supported; allowed: {', '.join(QK_MODES)}")
    return qk


class _MultiHead:
    """Shared projections of the attention layers (Q, K, V, O)."""

    def __init__(self, d_model, n_heads, qk):
        self.d_model = check_int("d_model", d_model, minimum=1)
        self.n_heads = check_int("n_heads", n_heads, minimum=1)
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.d_k = self.d_model // self.n_heads
        self.qk = _check_qk(qk)

    def _init_proj(self, rng, dtype):
        d = self.d_model
        p = {}
        if self.qk == "learned":
            p.update(w_q=_xavier_uniform(rng, d, d, dtype), b_q=np.zeros(d, dtype=dtype),
                     w_k=_xavier_uniform(rng, d, d, dtype), b_k=np.zeros(d, dtype=dtype))
        p.update(w_v=_xavier_uniform(rng, d, d, dtype), b_v=np.zeros(d, dtype=dtype),
                 w_o=_xavier_uniform(rng, d, d, dtype), b_o=np.zeros(d, dtype=dtype))
        return p

    def _check_inputs(self, x, mask):
        if x.ndim != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"x has shape {tuple(x.shape)}; expected (B, L, {self.d_model})")
        check_mask(mask, x.shape[:2])

    def _project_in(self, params, x):
        """Heads of q, k, v as (H, B, L, d_k); q is k in the shared form."""
        if self.qk == "learned":
            q = _split_heads(_linear_fwd(x, params["w_q"], params["b_q"]), self.n_heads)
            k = _split_heads(_linear_fwd(x, params["w_k"], params["b_k"]), self.n_heads)
        else:
            q = k = _split_heads(x, self.n_heads)
        v = _split_heads(_linear_fwd(x, params["w_v"], params["b_v"]), self.n_heads)
        return q, k, v

    def _project_in_backward(self, params, x, dq, dk, dv, grads):
        """Accumulate dx from head gradients dq, dk, dv (H, B, L, d_k); dk is None in shared form."""
        dx, grads["w_v"], grads["b_v"] = _linear_bwd(_merge_heads(dv), x, params["w_v"])
        if self.qk == "learned":
            dxq, grads["w_q"], grads["b_q"] = _linear_bwd(_merge_heads(dq), x, params["w_q"])
            dxk, grads["w_k"], grads["b_k"] = _linear_bwd(_merge_heads(dk), x, params["w_k"])
            dx += dxq
            dx += dxk
        else:
            dx += _merge_heads(dq)
        return dx


# --------------------------------------------------------------------------- causal linear attention

def causal_linear_attention(phi_q, phi_k, v, eps: float = 1e-6, chunk: int = 64):
    """Causal normalised linear attention in the chunk-parallel form, and its cache.

    ``a_t = sum_{s <= t} (phi_q,t . phi_k,s) v_s / (sum_{s <= t} phi_q,t . phi_k,s + eps)``,
    evaluated chunk by chunk: inside a chunk the lower-triangular block
    ``A = tril(Phi_q,c Phi_k,c^T)``, across chunks the carried sums
    ``S = sum_s phi_k,s v_s^T`` (D, d_v) and ``z = sum_s phi_k,s`` (D,). Memory is
    ``O(chunk^2 + D d_v)`` per leading index, never ``O(n D d_v)``. Mask padding keys by
    zeroing their rows of ``phi_k`` before the call.

    Parameters
    ----------
    phi_q, phi_k : float array, shape (..., n, D)
        Query and key features (any leading axes, e.g. (H, B)).
    v : float array, shape (..., n, d_v)
    eps : float, default 1e-6
        Added to the denominator (``>= 0``).
    chunk : int, default 64
        Chunk length, ``>= 1`` (``chunk >= n`` is the masked quadratic form).

    Returns
    -------
    a : float array, shape (..., n, d_v)
    cache : tuple
        For :func:`causal_linear_attention_backward`.

    Raises
    ------
    ValueError
        On mismatched shapes or a bad ``chunk``/``eps``.

    References
    ----------
    Katharopoulos et al. (2020), "Transformers are RNNs", arXiv:2006.16236, eqs. (8)-(10);
    paper 001 spec, section 1.7 (the chunked form; the paper gives no causal form).
    """
    xp = namespace(phi_q, phi_k, v)
    chunk = check_int("chunk", chunk, minimum=1)
    if not (isinstance(eps, (int, float, np.floating)) and math.isfinite(eps) and eps >= 0):
        raise ValueError(f"eps={eps!r} is not allowed; expected a finite float >= 0")
    if phi_q.shape != phi_k.shape or phi_q.shape[:-1] != v.shape[:-1]:
        raise ValueError(f"phi_q {tuple(phi_q.shape)}, phi_k {tuple(phi_k.shape)} and v {tuple(v.shape)} "
                         "must share (..., n) and phi_q, phi_k their feature axis")
    n = phi_q.shape[-2]
    lead = phi_q.shape[:-2]
    D, dv = phi_q.shape[-1], v.shape[-1]
    S = xp.zeros(lead + (D, dv), dtype=v.dtype)
    z = xp.zeros(lead + (D,), dtype=v.dtype)
    a = xp.empty(lead + (n, dv), dtype=v.dtype)
    den = xp.empty(lead + (n,), dtype=v.dtype)
    for c0 in range(0, n, chunk):
        c1 = min(c0 + chunk, n)
        q, k, vc = phi_q[..., c0:c1, :], phi_k[..., c0:c1, :], v[..., c0:c1, :]
        A = xp.tril(xp.matmul(q, xp.swapaxes(k, -1, -2)))
        num = xp.matmul(q, S) + xp.matmul(A, vc)
        dn = xp.matmul(q, z[..., None])[..., 0] + A.sum(axis=-1) + eps
        a[..., c0:c1, :] = num / dn[..., None]
        den[..., c0:c1] = dn
        S = S + xp.matmul(xp.swapaxes(k, -1, -2), vc)
        z = z + k.sum(axis=-2)
    return a, (phi_q, phi_k, v, a, den, chunk)


def causal_linear_attention_backward(da, cache):
    """VJP of :func:`causal_linear_attention`: a reverse pass over the chunks.

    Parameters
    ----------
    da : float array, shape (..., n, d_v)
    cache : tuple from :func:`causal_linear_attention`

    Returns
    -------
    dphi_q, dphi_k : float arrays, shape (..., n, D)
    dv : float array, shape (..., n, d_v)

    References
    ----------
    paper 001 spec, section 1.9 (carried ``dS``, ``dz`` over later chunks).
    """
    phi_q, phi_k, v, a, den, chunk = cache
    xp = namespace(da)
    n = phi_q.shape[-2]
    dnum_all = da / den[..., None]
    dden_all = -(da * a).sum(axis=-1) / den
    dq, dk, dvv = xp.empty_like(phi_q), xp.empty_like(phi_k), xp.empty_like(v)
    # prefix sums S_c, z_c before each chunk (recomputed; O(n D d_v / chunk) extra memory)
    starts = list(range(0, n, chunk))
    lead = phi_q.shape[:-2]
    D, dv_ = phi_q.shape[-1], v.shape[-1]
    S_before, z_before = [], []
    S = xp.zeros(lead + (D, dv_), dtype=v.dtype)
    z = xp.zeros(lead + (D,), dtype=v.dtype)
    for c0 in starts:
        S_before.append(S)
        z_before.append(z)
        c1 = min(c0 + chunk, n)
        S = S + xp.matmul(xp.swapaxes(phi_k[..., c0:c1, :], -1, -2), v[..., c0:c1, :])
        z = z + phi_k[..., c0:c1, :].sum(axis=-2)
    dS = xp.zeros_like(S)
    dz = xp.zeros_like(z)
    for idx in reversed(range(len(starts))):
        c0 = starts[idx]
        c1 = min(c0 + chunk, n)
        q, k, vc = phi_q[..., c0:c1, :], phi_k[..., c0:c1, :], v[..., c0:c1, :]
        dnum, dden = dnum_all[..., c0:c1, :], dden_all[..., c0:c1]
        A = xp.tril(xp.matmul(q, xp.swapaxes(k, -1, -2)))
        dA = xp.tril(xp.matmul(dnum, xp.swapaxes(vc, -1, -2)) + dden[..., None])
        dq[..., c0:c1, :] = (xp.matmul(dnum, xp.swapaxes(S_before[idx], -1, -2))
                             + dden[..., None] * z_before[idx][..., None, :] + xp.matmul(dA, k))
        dk[..., c0:c1, :] = (xp.matmul(xp.swapaxes(dA, -1, -2), q)
                             + xp.matmul(vc, xp.swapaxes(dS, -1, -2)) + dz[..., None, :])
        dvv[..., c0:c1, :] = xp.matmul(xp.swapaxes(A, -1, -2), dnum) + xp.matmul(k, dS)
        dS = dS + xp.matmul(xp.swapaxes(q, -1, -2), dnum)
        dz = dz + xp.matmul(dden[..., None, :], q)[..., 0, :]
    return dq, dk, dvv


def causal_linear_attention_prefix(phi_q, phi_k, v, eps: float = 1e-6):
    """Causal linear attention by explicit prefix sums (the recurrent / decode form).

    ``S_t = S_{t-1} + phi_k,t v_t^T``, ``z_t = z_{t-1} + phi_k,t``,
    ``a_t = S_t^T phi_q,t / (z_t . phi_q,t + eps)``. Forms ``cumsum`` of shape
    (..., n, D, d_v): ``O(n D d_v)`` memory, so it is the reference of the chunked
    form, not a training path.

    Parameters
    ----------
    phi_q, phi_k : float array, shape (..., n, D)
    v : float array, shape (..., n, d_v)
    eps : float, default 1e-6

    Returns
    -------
    a : float array, shape (..., n, d_v)

    References
    ----------
    Katharopoulos et al. (2020), arXiv:2006.16236, eqs. (18)-(20).
    """
    xp = namespace(phi_q, phi_k, v)
    S = xp.cumsum(phi_k[..., :, None] * v[..., None, :], axis=-3)
    z = xp.cumsum(phi_k, axis=-2)
    num = xp.matmul(phi_q[..., None, :], S)[..., 0, :]
    den = (phi_q * z).sum(axis=-1) + eps
    return num / den[..., None]


def streaming_linear_attention(phi_q, phi_k, v, eps: float = 0.0, chunk: int = 64):
    """Non-causal normalised linear attention streamed over key/value and query chunks.

    First ``S = sum_j phi_k,j v_j^T`` and ``z = sum_j phi_k,j`` are accumulated over
    key chunks, then applied to query chunks: ``a_i = S^T phi_q,i / (z . phi_q,i + eps)``.
    Memory besides inputs and output is ``O(D d_v + chunk D)``, independent of ``n``.
    Mask padding keys by zeroing their rows of ``phi_k`` first.

    Parameters
    ----------
    phi_q : float array, shape (..., n_q, D)
    phi_k : float array, shape (..., n_k, D)
    v : float array, shape (..., n_k, d_v)
    eps : float, default 0.0
        Added to the denominator.
    chunk : int, default 64
        Rows per chunk, ``>= 1``.

    Returns
    -------
    a : float array, shape (..., n_q, d_v)

    Raises
    ------
    ValueError
        On a bad ``chunk``.

    References
    ----------
    paper 001, section 4 ("admits a streaming form"); paper 001 spec, section 1.7.
    """
    xp = namespace(phi_q, phi_k, v)
    chunk = check_int("chunk", chunk, minimum=1)
    lead = phi_k.shape[:-2]
    S = xp.zeros(lead + (phi_k.shape[-1], v.shape[-1]), dtype=v.dtype)
    z = xp.zeros(lead + (phi_k.shape[-1],), dtype=v.dtype)
    for c0 in range(0, phi_k.shape[-2], chunk):
        k = phi_k[..., c0:c0 + chunk, :]
        S = S + xp.matmul(xp.swapaxes(k, -1, -2), v[..., c0:c0 + chunk, :])
        z = z + k.sum(axis=-2)
    out = xp.empty(phi_q.shape[:-1] + (v.shape[-1],), dtype=v.dtype)
    for c0 in range(0, phi_q.shape[-2], chunk):
        q = phi_q[..., c0:c0 + chunk, :]
        out[..., c0:c0 + chunk, :] = xp.matmul(q, S) / (xp.matmul(q, z[..., None]) + eps)
    return out


# --------------------------------------------------------------------------- depthwise convolution

def depthwise_conv(v, w, b, *, grid=None, causal: bool = False):
    """Depthwise convolution of the values along the sequence (1-D) or a pixel grid (2-D).

    1-D (``w`` of shape (C, k)): ``out[t, c] = b_c + sum_j w[c, j] v[t + j - p, c]`` with
    "same" padding ``p = (k - 1) // 2`` (zeros outside), or ``p = k - 1`` (left padding
    only) when ``causal``. 2-D (``w`` of shape (C, k, k), ``grid = (h, w)`` with
    ``h * w = n``, tokens in row-major order): the same over both grid axes with "same"
    padding. One kernel per channel; no mixing across channels.

    Parameters
    ----------
    v : float array, shape (..., n, C)
    w : float array, shape (C, k) or (C, k, k)
    b : float array, shape (C,)
    grid : tuple of int or None
        ``(h, w)`` for a 2-D kernel; None for 1-D.
    causal : bool, default False
        Left padding only (1-D only): position t sees t - k + 1 .. t.

    Returns
    -------
    out : float array, shape (..., n, C)
    cache : tuple

    Raises
    ------
    ValueError
        On shapes that do not fit, a 2-D kernel without ``grid``, or ``causal`` with 2-D.

    References
    ----------
    paper 001 (section 5.4 mentions "DWC", undefined); Meng et al. (2025), PolaFormer,
    and Han et al. (2023), FLatten Transformer, official code (``dwc`` on the values,
    added to the attention output).
    """
    xp = namespace(v, w)
    n, C = v.shape[-2], v.shape[-1]
    if w.shape[0] != C or b.shape != (C,):
        raise ValueError(f"w {tuple(w.shape)} and b {tuple(b.shape)} do not fit {C} channels")
    if w.ndim == 2:
        if grid is not None:
            raise ValueError(f"grid={grid!r} is for 2-D kernels; w has shape {tuple(w.shape)}")
        k = w.shape[1]
        p = k - 1 if causal else (k - 1) // 2
        out = xp.zeros_like(v) + b
        for j in range(k):
            s = j - p                                        # out[t] += w[:, j] * v[t + s]
            lo, hi = max(0, -s), min(n, n - s)
            if lo < hi:
                out[..., lo:hi, :] += w[:, j] * v[..., lo + s:hi + s, :]
        return out, (v, w, grid, causal)
    if w.ndim != 3 or grid is None:
        raise ValueError(f"w has shape {tuple(w.shape)}: a 2-D kernel (C, k, k) needs grid=(h, w)")
    if causal:
        raise ValueError("causal=True applies to 1-D kernels only")
    gh, gw = grid
    if gh * gw != n:
        raise ValueError(f"grid={grid!r} has {gh * gw} cells; the sequence has n={n}")
    k = w.shape[1]
    p = (k - 1) // 2
    vg = v.reshape(v.shape[:-2] + (gh, gw, C))
    out = xp.zeros_like(vg) + b
    for i in range(k):
        si = i - p
        ilo, ihi = max(0, -si), min(gh, gh - si)
        for j in range(k):
            sj = j - p
            jlo, jhi = max(0, -sj), min(gw, gw - sj)
            if ilo < ihi and jlo < jhi:
                out[..., ilo:ihi, jlo:jhi, :] += w[:, i, j] * vg[..., ilo + si:ihi + si, jlo + sj:jhi + sj, :]
    return out.reshape(v.shape), (v, w, grid, causal)


def depthwise_conv_backward(dout, cache):
    """VJP of :func:`depthwise_conv`.

    Parameters
    ----------
    dout : float array, shape (..., n, C)
    cache : tuple from :func:`depthwise_conv`

    Returns
    -------
    dv : float array, shape (..., n, C)
    dw : float array, shape of ``w``
    db : float array, shape (C,)

    References
    ----------
    paper 001 spec, section 1.8.
    """
    v, w, grid, causal = cache
    xp = namespace(dout)
    n, C = v.shape[-2], v.shape[-1]
    db = dout.reshape(-1, C).sum(axis=0)
    dw = xp.zeros_like(w)
    dv = xp.zeros_like(v)
    if w.ndim == 2:
        k = w.shape[1]
        p = k - 1 if causal else (k - 1) // 2
        for j in range(k):
            s = j - p
            lo, hi = max(0, -s), min(n, n - s)
            if lo < hi:
                dw[:, j] = (dout[..., lo:hi, :] * v[..., lo + s:hi + s, :]).reshape(-1, C).sum(axis=0)
                dv[..., lo + s:hi + s, :] += w[:, j] * dout[..., lo:hi, :]
        return dv, dw, db
    gh, gw = grid
    k = w.shape[1]
    p = (k - 1) // 2
    vg = v.reshape(v.shape[:-2] + (gh, gw, C))
    dg = dout.reshape(vg.shape)
    dvg = dv.reshape(vg.shape)
    for i in range(k):
        si = i - p
        ilo, ihi = max(0, -si), min(gh, gh - si)
        for j in range(k):
            sj = j - p
            jlo, jhi = max(0, -sj), min(gw, gw - sj)
            if ilo < ihi and jlo < jhi:
                src = (Ellipsis, slice(ilo + si, ihi + si), slice(jlo + sj, jhi + sj), slice(None))
                dst = (Ellipsis, slice(ilo, ihi), slice(jlo, jhi), slice(None))
                dw[:, i, j] = (dg[dst] * vg[src]).reshape(-1, C).sum(axis=0)
                dvg[src] += w[:, i, j] * dg[dst]
    return dvg.reshape(v.shape), dw, db


class KernelizedLinearAttention(_MultiHead):
    """Normalised (non-causal) linear attention with learnable feature particles per head.

    For each head h with particles ``omega[h]`` (m, d_k) and feature map
    ``phi = phi_{omega[h]}``,

    ``a_i = phi(q_i)^T G / (phi(q_i)^T z + eps)``,
    ``G = sum_j m_j phi(k_j) v_j^T`` (m, d_k), ``z = sum_j m_j phi(k_j)`` (m,),

    where ``m_j`` is the padding mask (padding keys are omitted from both
    sums; every query, padded or not, gets an output). The heads are merged
    and projected: ``out = concat_h(a) W_O + b_O``.

    Parameters
    ----------
    d_model : int
        Model width D; ``d_k = D / n_heads``.
    n_heads : int
        Number of heads H.
    feature_map : FeatureMap
        Object with ``init_omega(rng, dtype) -> (m, d_k)``,
        ``forward(x, omega) -> (phi, cache)`` with ``x`` (..., d_k), ``phi``
        (..., m), and ``backward(dphi, cache) -> (dx, domega)``
        (``engine.features.make_feature_map(name, d_k, m)``). It should be
        positive (``feature_map.positive``) so that the normaliser is > 0; the
        map is shared by the heads, the particles are not. A shift that the map
        subtracts from its exponent must be constant over each sequence (FAVOR
        ``stabilise="seq"`` or ``"none"``): it then cancels exactly between
        numerator and normaliser, for queries and keys alike, so treating it as
        a constant in the backward pass is exact. A per-token shift
        (``stabilise="row"``) does not cancel for keys and is rejected.
    qk : {"shared", "learned"}
        ``"shared"``: ``q = k = `` the head slice of the layer input (paper 000,
        App. F.2, "Q = K = reshape(x)"; no ``W_Q``, ``W_K``). ``"learned"``:
        ``q = x W_Q + b_Q``, ``k = x W_K + b_K``.
    eps : float, default 0.0
        Added to the normaliser ``phi(q)^T z``. The normalised form is
        invariant to rescaling phi, which ``eps > 0`` breaks: keep it well below
        the typical ``phi(q)^T z`` (e.g. FAVOR features can be tiny), or 0 for
        exact normalised attention. Maps whose features can vanish for a token
        (LUNA's output ReLU, Cosformer) need ``eps > 0``.
    causal : bool, default False
        Causal attention (query i sees keys j <= i) in the chunk-parallel form of
        :func:`causal_linear_attention`; the DWC branch is then left-padded.
    chunk : int, default 64
        Chunk length of the causal form.
    dwc : dict or None, default None
        Depthwise-convolution branch added to the attention output of every head,
        ``a_h + DWConv(v_h)`` with one kernel per value channel shared by the heads
        (paper 001's undefined "DWC", read as PolaFormer's / FLatten's ``dwc`` on the
        values): ``{"kind": "1d", "kernel": k}`` along the sequence ("same" padding,
        left padding when causal) or ``{"kind": "2d", "kernel": k, "grid": (h, w)}``
        over a pixel grid in row-major token order. Padding tokens' values are zeroed
        before the convolution. Parameters ``"dwc_w"`` (d_k, k) or (d_k, k, k) and
        ``"dwc_b"`` (d_k,), PyTorch's Conv uniform initialisation.
    signed : bool, default False
        For maps that are not positive (fixed RFF): the denominator becomes
        ``sign(den) max(|den|, eps)`` (needs ``eps > 0``, non-causal); the fractions of
        clamped and of negative denominators of the last call are in ``last_clamped``
        and ``last_negative``.

    Notes
    -----
    Learned maps (``feature_map.learned``: LUNA, Hedgehog) add their parameters
    ``"phi_<name>"`` with a leading axis of S sets (S = 1 for a map with
    ``shared_heads``: one map per layer; S = H otherwise), and ``"omega"`` is then
    (S, m, d_k). Their feature dimension is ``feature_map.n_features``.
    Parameters: ``"omega"`` (H, m, d_k), the particles of all heads;
    ``"w_v", "b_v", "w_o", "b_o"`` (D, D), (D,); with ``qk="learned"`` also
    ``"w_q", "b_q", "w_k", "b_k"``. Cost O(H B L m d_k) time and O(H B L m)
    memory per layer (the feature map is applied once per head because its
    contract takes one (m, d_k) particle set; everything else is batched over
    heads).

    References
    ----------
    paper 000, eq. (3.2) and App. C, eqs. (C.2)-(C.3); App. F.2; paper 001 (LUNA), eq. (9),
    section 4 and its spec, sections 1.6-1.9.
    """

    def __init__(self, d_model: int, n_heads: int, feature_map, qk: str = "shared", eps: float = 0.0,
                 causal: bool = False, chunk: int = 64, dwc=None, signed: bool = False):
        super().__init__(d_model, n_heads, qk)
        for attr in ("init_omega", "forward", "backward"):
            if not callable(getattr(feature_map, attr, None)):
                raise TypeError(f"feature_map={feature_map!r} has no method {attr!r}; expected an "
                                "engine.features.FeatureMap")
        self.signed = bool(signed)
        if self.signed and (causal or not eps > 0):
            raise ValueError(f"signed=True (denominator sign(den) max(|den|, eps)) needs eps > 0 and "
                             f"causal=False; got eps={eps!r}, causal={causal!r}")
        if getattr(feature_map, "positive", True) is False and not self.signed:
            raise ValueError(f"feature_map {getattr(feature_map, 'name', feature_map)!r} is not positive; "
                             "normalised linear attention needs phi >= 0 so that phi(q)^T z > 0")
        if getattr(feature_map, "stabilise", "none") == "row":
            raise ValueError("feature_map has stabilise='row' (one shift per token), which does not cancel "
                             "for keys in normalised attention; use stabilise='seq' (one shift per "
                             "sequence, cancels for queries and keys) or 'none'")
        if not (isinstance(eps, (int, float, np.floating)) and np.isfinite(eps) and eps >= 0):
            raise ValueError(f"eps={eps!r} is not allowed; expected a finite float >= 0")
        if not isinstance(causal, (bool, np.bool_)):
            raise ValueError(f"causal={causal!r} must be a bool")
        self.feature_map = feature_map
        self.eps = float(eps)
        self.causal = bool(causal)
        self.chunk = check_int("chunk", chunk, minimum=1)
        self.learned = bool(getattr(feature_map, "learned", False))
        self.n_features = int(getattr(feature_map, "n_features", getattr(feature_map, "m", 0)))
        self.n_sets = 1 if getattr(feature_map, "shared_heads", False) else self.n_heads
        if self.causal and getattr(feature_map, "ch_rms", "off") == "live":
            raise ValueError("causal=True with ch_rms='live': the live channel RMS is taken over every "
                             "token of the sequence, so future tokens would leak into past features; "
                             "use ch_rms='frozen' (fixed scales) or 'off'")
        if self.causal and getattr(feature_map, "stabilise", "none") == "seq":
            raise ValueError("causal=True with FAVOR stabilise='seq': the per-sequence shift uses future "
                             "keys; use stabilise='none'")
        self.dwc = self._check_dwc(dwc)

    def _check_dwc(self, dwc):
        if dwc is None:
            return None
        if not isinstance(dwc, dict):
            raise ValueError(f"dwc={dwc!r} must be None or a dict with keys kind, kernel (and grid for 2d)")
        unknown = sorted(set(dwc) - {"kind", "kernel", "grid"})
        if unknown:
            raise ValueError(f"dwc has unknown keys {unknown}; allowed: kind, kernel, grid")
        kind = dwc.get("kind", "1d")
        if kind not in ("1d", "2d"):
            raise ValueError(f"dwc kind={kind!r} is not allowed; allowed: 1d, 2d")
        k = check_int("dwc kernel", dwc.get("kernel", 5), minimum=1)
        grid = dwc.get("grid")
        if kind == "2d":
            if self.causal:
                raise ValueError("dwc kind='2d' has no causal form; use kind='1d' with causal=True")
            if grid is None or len(grid) != 2:
                raise ValueError(f"dwc kind='2d' needs grid=(h, w); got {grid!r}")
            grid = (check_int("grid h", grid[0], minimum=1), check_int("grid w", grid[1], minimum=1))
        elif grid is not None:
            raise ValueError(f"dwc grid={grid!r} applies to kind='2d' only")
        return {"kind": kind, "kernel": k, "grid": grid}

    def init_params(self, rng: np.random.Generator, dtype=np.float64) -> dict:
        """Draw the particles (and learned feature-map parameters) and the projections on the host.

        Parameters
        ----------
        rng : numpy.random.Generator
            Draws ``omega`` (one ``feature_map.init_omega`` call per head, in
            head order; one call per layer for a map with ``shared_heads``), then
            a learned map's ``theta`` (``init_theta``, same order), then the
            projections, then the DWC kernel.
        dtype : numpy dtype, default float64

        Returns
        -------
        dict
            ``"omega"`` (S, m, d_k), C-contiguous (S = H, or 1 for a map shared by the
            heads), ``"phi_<name>"`` (S, ...) for a learned map, the projections
            (class Notes), and ``"dwc_w"``, ``"dwc_b"`` with a DWC branch.

        Raises
        ------
        ValueError
            If ``init_omega`` does not return shape (m, d_k).
        """
        omega = np.stack([np.asarray(self.feature_map.init_omega(rng, dtype=dtype)) for _ in range(self.n_sets)])
        if omega.ndim != 3 or omega.shape[2] != self.d_k:
            raise ValueError(f"feature_map.init_omega returned shape {omega.shape[1:]}; expected (m, {self.d_k})")
        p = {"omega": np.ascontiguousarray(omega, dtype=dtype)}
        if self.learned:
            thetas = [self.feature_map.init_theta(rng, dtype=dtype) for _ in range(self.n_sets)]
            for k in self.feature_map.theta_names:
                p[f"phi_{k}"] = np.ascontiguousarray(np.stack([t[k] for t in thetas]), dtype=dtype)
        p.update(self._init_proj(rng, dtype))
        if self.dwc is not None:
            k, dk = self.dwc["kernel"], self.d_k
            shape = (dk, k) if self.dwc["kind"] == "1d" else (dk, k, k)
            bound = 1.0 / math.sqrt(k if self.dwc["kind"] == "1d" else k * k)   # PyTorch Conv default
            p["dwc_w"] = rng.uniform(-bound, bound, shape).astype(dtype)
            p["dwc_b"] = rng.uniform(-bound, bound, dk).astype(dtype)
        return p

    def _theta(self, params, i):
        return {k: params[f"phi_{k}"][i] for k in self.feature_map.theta_names}

    def _features(self, x, omega, params=None):
        """phi over heads: x (H, B, L, d_k), omega (S, m, d_k) -> phi (H, B, L, D), caches."""
        xp = namespace(x, omega)
        if self.learned and self.n_sets == 1:
            phi, c = self.feature_map.forward(x, omega[0], self._theta(params, 0))
            return phi, [c]
        phi, caches = None, []
        for i in range(x.shape[0]):
            if self.learned:
                p_i, c = self.feature_map.forward(x[i], omega[i], self._theta(params, i))
            else:
                p_i, c = self.feature_map.forward(x[i], omega[i])
            if phi is None:      # the feature count from the map's output (omega may carry any m)
                phi = xp.empty((x.shape[0], *p_i.shape), dtype=x.dtype)
            phi[i] = p_i
            caches.append(c)
        return phi, caches

    def _features_backward(self, dphi, caches, omega, grads=None):
        xp = namespace(dphi)
        if self.learned and self.n_sets == 1:
            dx, dom, dth = self.feature_map.backward(dphi, caches[0])
            for k, v in dth.items():
                grads[f"phi_{k}"] = grads.get(f"phi_{k}", 0) + v[None]
            return dx, dom[None]
        dx = None
        domega = xp.empty_like(omega)
        for i, c in enumerate(caches):
            if self.learned:
                dxi, domega[i], dth = self.feature_map.backward(dphi[i], c)
                for k, v in dth.items():
                    name = f"phi_{k}"
                    if name not in grads or not hasattr(grads[name], "shape"):
                        grads[name] = xp.zeros((len(caches),) + tuple(v.shape), dtype=v.dtype)
                    grads[name][i] += v
            else:
                dxi, domega[i] = self.feature_map.backward(dphi[i], c)
            if dx is None:
                dx = xp.empty(dphi.shape[:3] + (dxi.shape[-1],), dtype=dxi.dtype)
            dx[i] = dxi
        return dx, domega

    def forward(self, params: dict, x, mask):
        """Evaluate linear attention.

        Parameters
        ----------
        params : dict
            See class Notes.
        x : float array, shape (B, L, D)
        mask : bool array, shape (B, L)
            True on real tokens; every row needs one.

        Returns
        -------
        y : float array, shape (B, L, D)
        cache : tuple

        Raises
        ------
        ValueError, TypeError
            On wrong shapes, a bad mask, or a ``params["omega"]`` whose shape is
            not (S, m, d_k).
        """
        self._check_inputs(x, mask)
        omega = params["omega"]
        if omega.ndim != 3 or omega.shape[0] != self.n_sets or omega.shape[2] != self.d_k:
            raise ValueError(f"params['omega'] has shape {tuple(omega.shape)}; expected "
                             f"({self.n_sets}, m, {self.d_k})")
        xp = namespace(x, omega)
        q, k, v = self._project_in(params, x)
        phi_q, cq = self._features(q, omega, params)
        if self.qk == "shared":
            phi_k, ck = phi_q, None
        else:
            phi_k, ck = self._features(k, omega, params)
        keym = mask.astype(x.dtype)[None, :, :, None]                # (1, B, L, 1)
        phi_km = phi_k * keym                                         # (H, B, L, m)
        cdw = None
        if self.causal:
            a, ccausal = causal_linear_attention(phi_q, phi_km, v, eps=self.eps, chunk=self.chunk)
            g = z = den = None
        else:
            ccausal = None
            g = xp.matmul(phi_km.transpose(0, 1, 3, 2), v)                # (H, B, m, d_k)
            z = phi_km.sum(axis=2)                                        # (H, B, m)
            num = xp.matmul(phi_q, g)                                     # (H, B, L, d_k)
            den = xp.matmul(phi_q, z[..., None])[..., 0]                  # (H, B, L)
            if self.signed:                       # sign(den) max(|den|, eps); clamped rows logged
                small = xp.abs(den) <= self.eps
                self.last_clamped = float(small.mean())
                self.last_negative = float((den < 0).mean())
                den = xp.where(small, xp.where(den < 0, -self.eps, self.eps), den)
            elif self.eps:
                den = den + self.eps
            a = num / den[..., None]
        if self.dwc is not None:
            conv, cdw = depthwise_conv(v * keym, params["dwc_w"], params["dwc_b"], grid=self.dwc["grid"],
                                       causal=self.causal)
            a_out = a + conv
        else:
            a_out = a
        am = _merge_heads(a_out)
        y = _linear_fwd(am, params["w_o"], params["b_o"])
        return y, (x, keym, v, phi_q, phi_km, cq, ck, g, z, den, a, am, params, ccausal, cdw)

    def backward(self, dy, cache):
        """VJP of :meth:`forward`.

        Parameters
        ----------
        dy : float array, shape (B, L, D)
        cache : tuple from :meth:`forward`

        Returns
        -------
        dx : float array, shape (B, L, D)
        grads : dict
            Same keys and shapes as the parameters; ``"omega"`` (S, m, d_k)
            collects the query and key paths.
        """
        x, keym, v, phi_q, phi_km, cq, ck, g, z, den, a, am, params, ccausal, cdw = cache
        xp = namespace(dy)
        grads = {}
        dam, grads["w_o"], grads["b_o"] = _linear_bwd(dy, am, params["w_o"])
        da = _split_heads(dam, self.n_heads)                          # (H, B, L, d_k)
        if ccausal is not None:
            dphi_q, dphi_k, dv = causal_linear_attention_backward(da, ccausal)
            dphi_k *= keym
        else:
            dnum = da / den[..., None]
            dden = -(da * a).sum(axis=-1) / den                           # (H, B, L)
            if self.signed:
                dden = dden * (xp.abs(den) > self.eps)                    # clamped rows: constant
            dphi_q = xp.matmul(dnum, g.transpose(0, 1, 3, 2))             # (H, B, L, m)
            dphi_q += dden[..., None] * z[:, :, None, :]
            dg = xp.matmul(phi_q.transpose(0, 1, 3, 2), dnum)             # (H, B, m, d_k)
            dz = xp.matmul(dden[:, :, None, :], phi_q)[:, :, 0, :]        # (H, B, m)
            dphi_k = xp.matmul(v, dg.transpose(0, 1, 3, 2))               # (H, B, L, m)
            dphi_k += dz[:, :, None, :]
            dphi_k *= keym
            dv = xp.matmul(phi_km, dg)                                    # (H, B, L, d_k)
        if cdw is not None:
            dvc, grads["dwc_w"], grads["dwc_b"] = depthwise_conv_backward(da, cdw)
            dv = dv + dvc * keym
        omega = params["omega"]
        if self.qk == "shared":
            dphi_q += dphi_k
            dq, grads["omega"] = self._features_backward(dphi_q, cq, omega, grads)
            dk = None
        else:
            dq, dom_q = self._features_backward(dphi_q, cq, omega, grads)
            dk, dom_k = self._features_backward(dphi_k, ck, omega, grads)
            grads["omega"] = dom_q + dom_k
        dx = self._project_in_backward(params, x, dq, dk, dv, grads)
        return dx, grads


class SoftmaxAttention(_MultiHead):
    """Exact scaled dot-product softmax attention (the Vaswani baseline).

    ``a_i = sum_j p_ij v_j``, ``p_ij = m_j exp(s_ij) / sum_l m_l exp(s_il)``,
    ``s_ij = q_i^T k_j / sqrt(d_k)``, with padding keys (``m_j = 0``) given
    weight exactly 0; evaluated with the row maximum subtracted. Heads are
    merged and projected by ``W_O``. No dropout on the attention weights.

    Parameters
    ----------
    d_model, n_heads : int
        Model width D and heads H; ``d_k = D / H``.
    qk : {"learned", "shared"}, default "learned"
        ``"learned"`` is the standard baseline (``W_Q``, ``W_K``); ``"shared"``
        uses ``q = k = `` the head slice of the input.

    Notes
    -----
    Parameters as :class:`KernelizedLinearAttention` without ``"omega"``.
    O(H B L^2 d_k) time, O(H B L^2) memory.

    References
    ----------
    paper 000, App. C, eq. (C.1) and the softmax attention display before it.
    """

    def __init__(self, d_model: int, n_heads: int, qk: str = "learned"):
        super().__init__(d_model, n_heads, qk)

    def init_params(self, rng: np.random.Generator, dtype=np.float64) -> dict:
        """Draw the projections on the host (Xavier-uniform weights, zero biases).

        Parameters
        ----------
        rng : numpy.random.Generator
        dtype : numpy dtype, default float64

        Returns
        -------
        dict
            ``w_v, b_v, w_o, b_o`` and, with ``qk="learned"``, ``w_q, b_q, w_k, b_k``.
        """
        return self._init_proj(rng, dtype)

    def forward(self, params: dict, x, mask):
        """Evaluate softmax attention.

        Parameters
        ----------
        params : dict
            The projections (see :meth:`init_params`).
        x : float array, shape (B, L, D)
        mask : bool array, shape (B, L)
            True on real tokens (keys with False get weight 0); every row needs one.

        Returns
        -------
        y : float array, shape (B, L, D)
        cache : tuple

        Raises
        ------
        ValueError, TypeError
            On wrong shapes or a bad mask.
        """
        self._check_inputs(x, mask)
        xp = namespace(x)
        q, k, v = self._project_in(params, x)
        scale = 1.0 / math.sqrt(self.d_k)
        s = xp.matmul(q, k.transpose(0, 1, 3, 2))                     # (H, B, L, L)
        s *= scale
        keyok = mask[None, :, None, :]
        s = xp.where(keyok, s, -xp.inf)
        p = _softmax_last(xp, s)
        a = xp.matmul(p, v)
        am = _merge_heads(a)
        y = _linear_fwd(am, params["w_o"], params["b_o"])
        return y, (x, q, k, v, p, am, scale, params)

    def backward(self, dy, cache):
        """VJP of :meth:`forward`.

        Parameters
        ----------
        dy : float array, shape (B, L, D)
        cache : tuple from :meth:`forward`

        Returns
        -------
        dx : float array, shape (B, L, D)
        grads : dict
            The projections' gradients, with their shapes.
        """
        x, q, k, v, p, am, scale, params = cache
        xp = namespace(dy)
        grads = {}
        dam, grads["w_o"], grads["b_o"] = _linear_bwd(dy, am, params["w_o"])
        da = _split_heads(dam, self.n_heads)
        dv = xp.matmul(p.transpose(0, 1, 3, 2), da)
        dp = xp.matmul(da, v.transpose(0, 1, 3, 2))
        ds = _softmax_last_backward(p, dp)
        ds *= scale
        dq = xp.matmul(ds, k)
        dk = xp.matmul(ds.transpose(0, 1, 3, 2), q)
        if self.qk == "shared":
            dq += dk
            dk = None
        dx = self._project_in_backward(params, x, dq, dk, dv, grads)
        return dx, grads


class LinformerAttention(_MultiHead):
    """Linformer attention: softmax attention over keys and values projected along the sequence.

    With learned sequence projections ``E, F`` of shape (k, max_len), shared
    by the heads, and for an input of length ``L <= max_len``,

    ``K' = E[:, :L] (m * K)``, ``V' = F[:, :L] (m * V)`` (each (k, d_k) per head),
    ``P = softmax(Q K'^T / sqrt(d_k))`` over the k projected keys,
    ``a = P V'``,

    where ``m`` is the padding mask applied to the rows of ``K`` and ``V``
    (padded keys and values are zeroed before the projection, so they
    contribute nothing). Heads are merged and projected by ``W_O``. No dropout
    on the attention weights.

    Parameters
    ----------
    d_model : int
        Model width D; ``d_k = D / n_heads``.
    n_heads : int
        Number of heads H.
    k : int
        Projected length (number of projected keys/values), >= 1. The layer
        saves work over softmax attention when ``k < L``; larger ``k`` is
        allowed (with ``k = L`` and ``E = F = I`` it is softmax attention).
    max_len : int
        Longest accepted sequence, >= 1 (columns of ``E`` and ``F``).
    qk : {"learned", "shared"}, default "learned"
        ``"learned"``: ``q = x W_Q + b_Q``, ``k = x W_K + b_K`` (the Linformer
        of Wang et al.). ``"shared"``: ``q = k = `` the head slice of the input
        (no ``W_Q``, ``W_K``), as in the other attention layers; supported
        because it only changes the input projections.

    Raises
    ------
    TypeError
        If a size is not an integer.
    ValueError
        If a size is < 1, ``d_model`` is not divisible by ``n_heads``, or
        ``qk`` is unknown.

    Notes
    -----
    Parameters: ``"w_q", "b_q", "w_k", "b_k"`` (learned form only),
    ``"w_v", "b_v", "w_o", "b_o"`` ((D, D), (D,)), and the sequence
    projections ``"e_proj"`` (keys) and ``"f_proj"`` (values), each
    (k, max_len).

    Sharing: one ``E`` and one ``F`` per layer, shared by all heads (the
    paper's "headwise sharing"); ``E`` and ``F`` are distinct (no key-value
    sharing) and not shared across layers.

    Initialisation: ``W_Q, W_K, W_V, W_O`` Xavier-uniform, zero biases (as
    :class:`SoftmaxAttention`, drawn first and in the same order, so a seed
    gives both layers the same ``W``'s); then ``E``, then ``F``, each
    Xavier-uniform with gain ``1/sqrt(2)``, ``U(-a, a)`` with
    ``a = sqrt(3 / (k + max_len))`` (variance ``1 / (k + max_len)``), as the
    authors' fairseq reference initialises its ``compress_k``/``compress_v``
    (k, max_len) weights. A projected key is then a sum of ``L`` rows with
    variance ``L / (k + max_len) <= 1`` times theirs, independent of ``k``.

    Padding: padded rows of ``K`` and ``V`` (``x W + b`` at positions with
    mask False) are multiplied by 0 before the projection, so their contents
    never reach a real or padded query's output, and the columns of ``E[:, :L]``
    at padded positions multiply zeros. For right padding (real tokens first,
    as in this package's batches) appending pad positions therefore leaves
    every output exactly unchanged: the length dependence of Linformer is only
    through the positions of the real tokens, whose columns ``E[:, j]`` are
    used, as in the position embedding. Unlike softmax attention the
    projection mixes positions: a real token's output depends on where the
    other real tokens sit (column ``j`` of ``E``), and the projected keys are
    sums over the real tokens, not averages, so their scale grows with the
    number of real tokens. The softmax runs over all k projected keys (there
    is no padding among them). Every query, padded or not, gets an output.

    The projection is applied to ``K = x W_K + b_K`` (the paper's
    ``E_i K W_i^K``); fairseq applies it to the layer input before ``W_K``,
    which differs only in the bias term (``E 1 b_K`` vs ``b_K``).

    Cost O(H B L k d_k) time and O(H B L k) memory per layer.

    References
    ----------
    Wang, Li, Khabsa, Fang & Ma (2020), "Linformer: Self-Attention with Linear
    Complexity", arXiv:2006.04768, Sec. 4 (eq. (7), projections E_i, F_i;
    "headwise sharing"); fairseq ``examples/linformer`` (initialisation).
    Baseline of paper 000's NLP tables; softmax attention of paper 000,
    App. C, eq. (C.1).
    """

    def __init__(self, d_model: int, n_heads: int, k: int, max_len: int, qk: str = "learned"):
        super().__init__(d_model, n_heads, qk)
        self.k = check_int("k", k, minimum=1)
        self.max_len = check_int("max_len", max_len, minimum=1)

    def init_params(self, rng: np.random.Generator, dtype=np.float64) -> dict:
        """Draw the projections, then ``E``, then ``F``, on the host.

        Parameters
        ----------
        rng : numpy.random.Generator
            Draws the ``W``'s in :class:`SoftmaxAttention`'s order, then
            ``e_proj``, then ``f_proj``.
        dtype : numpy dtype, default float64

        Returns
        -------
        dict
            The projections (class Notes), ``"e_proj"`` and ``"f_proj"``
            (k, max_len), C-contiguous.
        """
        p = self._init_proj(rng, dtype)
        gain = 1.0 / math.sqrt(2.0)
        for name in ("e_proj", "f_proj"):
            p[name] = np.ascontiguousarray(gain * _xavier_uniform(rng, self.k, self.max_len, np.float64),
                                           dtype=dtype)
        return p

    def forward(self, params: dict, x, mask):
        """Evaluate Linformer attention.

        Parameters
        ----------
        params : dict
            See class Notes; ``"e_proj"``, ``"f_proj"`` of shape (k, max_len).
        x : float array, shape (B, L, D)
            ``L <= max_len``.
        mask : bool array, shape (B, L)
            True on real tokens (padded keys and values are zeroed before the
            projection); every row needs one.

        Returns
        -------
        y : float array, shape (B, L, D)
        cache : tuple

        Raises
        ------
        ValueError, TypeError
            On wrong shapes, a bad mask, ``L > max_len``, or an ``e_proj`` or
            ``f_proj`` whose shape is not (k, max_len).
        """
        self._check_inputs(x, mask)
        length = x.shape[1]
        if length > self.max_len:
            raise ValueError(f"x has sequence length L={length}, above max_len={self.max_len} of "
                             "LinformerAttention (E and F have max_len columns)")
        for name in ("e_proj", "f_proj"):
            if tuple(params[name].shape) != (self.k, self.max_len):
                raise ValueError(f"params[{name!r}] has shape {tuple(params[name].shape)}; expected "
                                 f"(k, max_len) = ({self.k}, {self.max_len})")
        xp = namespace(x)
        q, k, v = self._project_in(params, x)
        keym = mask.astype(x.dtype)[None, :, :, None]                # (1, B, L, 1)
        km = k * keym                                                 # (H, B, L, d_k)
        vm = v * keym
        e = params["e_proj"][:, :length]                              # (k, L)
        f = params["f_proj"][:, :length]
        kp = xp.matmul(e, km)                                         # (H, B, k, d_k)
        vp = xp.matmul(f, vm)
        scale = 1.0 / math.sqrt(self.d_k)
        s = xp.matmul(q, kp.transpose(0, 1, 3, 2))                    # (H, B, L, k)
        s *= scale
        p = _softmax_last(xp, s)
        a = xp.matmul(p, vp)                                          # (H, B, L, d_k)
        am = _merge_heads(a)
        y = _linear_fwd(am, params["w_o"], params["b_o"])
        return y, (x, keym, q, km, vm, kp, vp, e, f, p, am, scale, params)

    def backward(self, dy, cache):
        """VJP of :meth:`forward`.

        Parameters
        ----------
        dy : float array, shape (B, L, D)
        cache : tuple from :meth:`forward`

        Returns
        -------
        dx : float array, shape (B, L, D)
        grads : dict
            Same keys and shapes as the parameters; ``"e_proj"`` and
            ``"f_proj"`` (k, max_len) are zero in the columns ``>= L``.
        """
        x, keym, q, km, vm, kp, vp, e, f, p, am, scale, params = cache
        xp = namespace(dy)
        length = x.shape[1]
        grads = {}
        dam, grads["w_o"], grads["b_o"] = _linear_bwd(dy, am, params["w_o"])
        da = _split_heads(dam, self.n_heads)                          # (H, B, L, d_k)
        dvp = xp.matmul(p.transpose(0, 1, 3, 2), da)                  # (H, B, k, d_k)
        dp = xp.matmul(da, vp.transpose(0, 1, 3, 2))                  # (H, B, L, k)
        ds = _softmax_last_backward(p, dp)
        ds *= scale
        dq = xp.matmul(ds, kp)                                        # (H, B, L, d_k)
        dkp = xp.matmul(ds.transpose(0, 1, 3, 2), q)                  # (H, B, k, d_k)
        for name, dproj, rows in (("e_proj", dkp, km), ("f_proj", dvp, vm)):
            g = xp.zeros_like(params[name])
            g[:, :length] = xp.tensordot(dproj, rows, axes=([0, 1, 3], [0, 1, 3]))   # (k, L)
            grads[name] = g
        dk = xp.matmul(e.T, dkp)                                      # (H, B, L, d_k)
        dk *= keym
        dv = xp.matmul(f.T, dvp)
        dv *= keym
        if self.qk == "shared":
            dq += dk
            dk = None
        dx = self._project_in_backward(params, x, dq, dk, dv, grads)
        return dx, grads


# --------------------------------------------------------------------------- encoder block

class EncoderLayer:
    """Post-LN Transformer encoder block.

    ``h = LN1(x + Dropout(Attn(x, mask)))``, ``y = LN2(h + Dropout(FFN(h)))``,
    the residual/normalisation update ``LN(a + sublayer(a))`` of paper 000,
    App. C, Remark.

    Parameters
    ----------
    attention : KernelizedLinearAttention, SoftmaxAttention or LinformerAttention
    d_ff : int
        FFN hidden width.
    dropout : float in [0, 1)
        Used after each sublayer and inside the FFN.
    ln_eps : float, default 1e-5
    pre_ln : bool, default False
        Pre-LN instead: ``h = x + Dropout(Attn(LN1(x)))``, ``y = h + Dropout(FFN(LN2(h)))``
        (the LRA configuration of paper 001; the model adds a final LayerNorm).

    Notes
    -----
    Parameter names: ``"attn.<name>"``, ``"ln1.gamma"``, ``"ln1.beta"``,
    ``"ffn.w1"``, ``"ffn.b1"``, ``"ffn.w2"``, ``"ffn.b2"``, ``"ln2.gamma"``,
    ``"ln2.beta"``. Dropout masks are drawn in the order attention output, FFN
    hidden, FFN output.

    References
    ----------
    paper 000, App. C, Remark (a~_i = LayerNorm(a_i + FFN(a_i))); App. F.2.
    """

    def __init__(self, attention, d_ff: int, dropout: float = 0.0, ln_eps: float = 1e-5,
                 pre_ln: bool = False):
        self.pre_ln = bool(pre_ln)
        self.attn = attention
        d = attention.d_model
        self.d_model = d
        self.ln1 = LayerNorm(d, ln_eps)
        self.ln2 = LayerNorm(d, ln_eps)
        self.ffn = FeedForward(d, d_ff, dropout)
        self.drop1 = Dropout(dropout)
        self.drop2 = Dropout(dropout)

    def init_params(self, rng: np.random.Generator, dtype=np.float64) -> dict:
        """Draw all parameters on the host.

        Parameters
        ----------
        rng : numpy.random.Generator
            Used in the order attention, LN1, FFN, LN2.
        dtype : numpy dtype, default float64

        Returns
        -------
        dict
            Prefixed names as in the class Notes.
        """
        p = {}
        for prefix, layer in (("attn", self.attn), ("ln1", self.ln1), ("ffn", self.ffn), ("ln2", self.ln2)):
            for name, val in layer.init_params(rng, dtype).items():
                p[f"{prefix}.{name}"] = val
        return p

    @staticmethod
    def _sub(params, prefix):
        n = len(prefix) + 1
        return {k[n:]: v for k, v in params.items() if k.startswith(prefix + ".")}

    def forward(self, params: dict, x, mask, train: bool = False, rng: np.random.Generator | None = None):
        """Apply the block.

        Parameters
        ----------
        params : dict
            Prefixed names as in the class Notes.
        x : float array, shape (B, L, D)
        mask : bool array, shape (B, L)
            True on real tokens; every row needs one.
        train : bool, default False
            Apply dropout.
        rng : numpy.random.Generator or None
            Dropout generator (required when ``train`` and dropout > 0).

        Returns
        -------
        y : float array, shape (B, L, D)
        cache : tuple

        Raises
        ------
        ValueError, TypeError
            See the sublayers.
        """
        if self.pre_ln:
            n1, cl1 = self.ln1.forward(self._sub(params, "ln1"), x)
            a, ca = self.attn.forward(self._sub(params, "attn"), n1, mask)
            a, cd1 = self.drop1.forward(a, train, rng)
            h = x + a
            n2, cl2 = self.ln2.forward(self._sub(params, "ln2"), h)
            f, cf = self.ffn.forward(self._sub(params, "ffn"), n2, train, rng)
            f, cd2 = self.drop2.forward(f, train, rng)
            return h + f, (ca, cd1, cl1, cf, cd2, cl2)
        a, ca = self.attn.forward(self._sub(params, "attn"), x, mask)
        a, cd1 = self.drop1.forward(a, train, rng)
        h, cl1 = self.ln1.forward(self._sub(params, "ln1"), x + a)
        f, cf = self.ffn.forward(self._sub(params, "ffn"), h, train, rng)
        f, cd2 = self.drop2.forward(f, train, rng)
        y, cl2 = self.ln2.forward(self._sub(params, "ln2"), h + f)
        return y, (ca, cd1, cl1, cf, cd2, cl2)

    def backward(self, dy, cache):
        """VJP of :meth:`forward`.

        Parameters
        ----------
        dy : float array, shape (B, L, D)
        cache : tuple from :meth:`forward`

        Returns
        -------
        dx : float array, shape (B, L, D)
        grads : dict
            Gradients under the prefixed parameter names.
        """
        ca, cd1, cl1, cf, cd2, cl2 = cache
        grads = {}
        if self.pre_ln:
            df, _ = self.drop2.backward(dy, cd2)
            dn2, g = self.ffn.backward(df, cf)
            grads.update({f"ffn.{k}": v for k, v in g.items()})
            dh2, g = self.ln2.backward(dn2, cl2)
            grads.update({f"ln2.{k}": v for k, v in g.items()})
            dh = dy + dh2
            da, _ = self.drop1.backward(dh, cd1)
            dn1, g = self.attn.backward(da, ca)
            grads.update({f"attn.{k}": v for k, v in g.items()})
            dx1, g = self.ln1.backward(dn1, cl1)
            grads.update({f"ln1.{k}": v for k, v in g.items()})
            return dh + dx1, grads
        dr2, g = self.ln2.backward(dy, cl2)
        grads.update({f"ln2.{k}": v for k, v in g.items()})
        df, _ = self.drop2.backward(dr2, cd2)
        dh, g = self.ffn.backward(df, cf)
        grads.update({f"ffn.{k}": v for k, v in g.items()})
        dh += dr2
        dr1, g = self.ln1.backward(dh, cl1)
        grads.update({f"ln1.{k}": v for k, v in g.items()})
        da, _ = self.drop1.backward(dr1, cd1)
        dx, g = self.attn.backward(da, ca)
        grads.update({f"attn.{k}": v for k, v in g.items()})
        dx += dr1
        return dx, grads


# --------------------------------------------------------------------------- pooling and loss

def masked_mean_pool(h, mask):
    """Masked mean over the sequence: ``P = sum_i pi_i h_i``, ``pi_i = m_i / sum_j m_j``.

    Parameters
    ----------
    h : float array, shape (B, L, D)
    mask : bool array, shape (B, L)
        True on real tokens; every row needs one.

    Returns
    -------
    pooled : float array, shape (B, D)
    cache : tuple

    Raises
    ------
    ValueError, TypeError
        If shapes disagree or the mask is bad (see :func:`check_mask`).

    References
    ----------
    paper 000, App. C.1 (pooling operator P with pi in the simplex; mean
    pooling with masks, pi_i = m_i / sum_j m_j).
    """
    if h.ndim != 3:
        raise ValueError(f"h has shape {tuple(h.shape)}; expected (B, L, D)")
    check_mask(mask, h.shape[:2])
    xp = namespace(h)
    w = mask.astype(h.dtype)
    w /= w.sum(axis=1, keepdims=True)
    pooled = xp.matmul(w[:, None, :], h)[:, 0, :]
    return pooled, (w, h.shape)


def masked_mean_pool_backward(dpooled, cache):
    """VJP of :func:`masked_mean_pool`: ``dh[b, i] = pi[b, i] * dpooled[b]``.

    Parameters
    ----------
    dpooled : float array, shape (B, D)
    cache : tuple from :func:`masked_mean_pool`

    Returns
    -------
    dh : float array, shape (B, L, D)

    Raises
    ------
    ValueError
        If ``dpooled`` is not (B, D).

    References
    ----------
    paper 000, App. C.1 (pooling operator).
    """
    w, shape = cache
    if tuple(dpooled.shape) != (shape[0], shape[2]):
        raise ValueError(f"dpooled has shape {tuple(dpooled.shape)}; expected {(shape[0], shape[2])}")
    return w[:, :, None] * dpooled[:, None, :]


def softmax_cross_entropy(logits, labels):
    """Mean softmax cross-entropy over the batch, its gradient and the class probabilities.

    ``loss = -(1/B) sum_b log softmax(logits_b)[y_b]``, computed with the row
    maximum subtracted (log-sum-exp), accumulated in float64.

    Parameters
    ----------
    logits : float array, shape (B, C)
    labels : int array, shape (B,)
        Classes in ``[0, C)``.

    Returns
    -------
    loss : float64 scalar (NumPy) or 0-d float64 array (CuPy; no host sync)
    dlogits : float array, shape (B, C), dtype of ``logits``
        ``(softmax(logits) - onehot(labels)) / B``.
    probs : float array, shape (B, C)

    Raises
    ------
    TypeError
        If ``labels`` is not an integer array.
    ValueError
        On shape mismatch, labels out of range, or non-finite logits.

    References
    ----------
    paper 000, App. F.2 (Phase B: "trained end-to-end with cross-entropy loss").
    """
    xp = namespace(logits, labels)
    if logits.ndim != 2:
        raise ValueError(f"logits has shape {tuple(logits.shape)}; expected (B, C)")
    b, c = logits.shape
    if not hasattr(labels, "dtype") or not np.issubdtype(np.dtype(labels.dtype), np.integer):
        raise TypeError(f"labels must be an integer array; got {getattr(labels, 'dtype', type(labels))}")
    if tuple(labels.shape) != (b,):
        raise ValueError(f"labels has shape {tuple(labels.shape)}; expected ({b},)")
    if b == 0:
        raise ValueError("logits has an empty batch (B=0)")
    if is_host(labels):                        # contents on the host only (engine._checks policy)
        lo, hi = int(labels.min()), int(labels.max())
        if lo < 0 or hi >= c:
            raise ValueError(f"labels contains {lo if lo < 0 else hi}, outside [0, {c})")
    if is_host(logits) and not bool(xp.isfinite(logits).all()):
        raise ValueError("logits contains NaN or inf")
    shifted = logits - logits.max(axis=1, keepdims=True)
    e = xp.exp(shifted)
    sumexp = e.sum(axis=1, keepdims=True)
    probs = e / sumexp
    rows = xp.arange(b)
    logp = shifted[rows, labels].astype(xp.float64) - xp.log(sumexp[:, 0].astype(xp.float64))
    loss = -logp.mean()
    dlogits = probs.copy()
    dlogits[rows, labels] -= 1.0
    dlogits /= b
    return loss, dlogits, probs
