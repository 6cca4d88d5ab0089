"""The basic Transformer layers: Linear, LayerNorm, GELU, Dropout, FeedForward (forward/backward pairs).

The contract below is shared by every layer of :mod:`rieszflow.engine.attention`.

Every layer follows one contract:

* ``init_params(rng, dtype) -> dict`` draws the layer's parameters on the host
  with a :class:`numpy.random.Generator` (local names such as ``"w"``, ``"b"``);
* ``forward(params, x, ...) -> (y, cache)`` evaluates the layer;
* ``backward(dy, cache) -> (dx, grads)`` is the hand-written vector-Jacobian
  product: ``dx = (dy/dx)^T dy`` and ``grads[name] = (dy/dparams[name])^T dy``.

Layers hold hyperparameters only; parameters live in the dict that the caller
passes, so a model can keep one flat ``name -> array`` dict and an optimiser can
update it in place. Array code takes ``xp = namespace(...)`` from
:mod:`~rieszflow.engine.backend`, so the same code runs on NumPy and CuPy. Randomness
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

from rieszflow.engine import _fused
from rieszflow.engine._checks import check_int
from rieszflow.engine.backend import namespace
from rieszflow.engine.attention.ops import _check_last_dim, _linear_bwd, _linear_fwd, _xavier_uniform

__all__ = [
    "Linear",
    "LayerNorm",
    "GELU",
    "Dropout",
    "FeedForward",
]


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
        gamma, beta = params["gamma"], params["beta"]
        if _fused.fusable(x, gamma, beta) and gamma.shape == beta.shape == (self.d,):   # one pass per row
            y, xhat = np.empty_like(x), np.empty_like(x)
            rstd = np.empty(x.shape[:-1] + (1,), dtype=x.dtype)
            _fused.layer_norm_forward(_fused.rows(x), gamma, beta, self.eps, _fused.rows(y), _fused.rows(xhat),
                                      rstd.reshape(-1))
            return y, (xhat, rstd, gamma)
        xp = namespace(x)
        mu = x.mean(axis=-1, keepdims=True)
        xhat = x - mu
        var = xp.multiply(xhat, xhat)
        var = var.mean(axis=-1, keepdims=True)
        rstd = 1.0 / xp.sqrt(var + self.eps)
        xhat *= rstd                        # in place: x - mu is this call's own array
        y = xhat * params["gamma"]
        y = xp.add(y, params["beta"], out=y if y.dtype == xp.result_type(y, params["beta"]) else None)
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
        if (_fused.fusable(dy, xhat, rstd, gamma) and dy.shape == xhat.shape and gamma.shape == (d,)
                and rstd.shape == xhat.shape[:-1] + (1,)):
            dx, dgamma, dbeta = np.empty_like(dy), np.empty(d, dtype=dy.dtype), np.empty(d, dtype=dy.dtype)
            _fused.layer_norm_backward(_fused.rows(dy), _fused.rows(xhat), rstd.reshape(-1), gamma,
                                       _fused.rows(dx), dgamma, dbeta)
            return dx, {"gamma": dgamma, "beta": dbeta}
        dy2 = dy.reshape(-1, d)
        xh2 = xhat.reshape(-1, d)
        xp_ = namespace(dy)
        dgamma = (dy2 * xh2).sum(axis=0)
        dbeta = dy2.sum(axis=0)
        dxhat = xp_.multiply(dy, gamma, dtype=xp_.result_type(dy, gamma, xhat))   # no narrowing below
        work = xp_.multiply(dxhat, xhat)
        proj = work.mean(axis=-1, keepdims=True)      # mean(dxhat * xhat)
        xp_.multiply(xhat, proj, out=work)
        work += dxhat.mean(axis=-1, keepdims=True)
        dxhat -= work                                  # dxhat - mean(dxhat) - xhat mean(dxhat xhat)
        dxhat *= rstd
        return dxhat, {"gamma": dgamma, "beta": dbeta}


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
        if _fused.fusable(x):                     # two fused passes around NumPy's tanh (engine._fused)
            t, y = np.empty_like(x), np.empty_like(x)
            _fused.gelu_argument(x.reshape(-1), self._C, self._A * self._C, t.reshape(-1))
            np.tanh(t, out=t)
            _fused.gelu_output(x.reshape(-1), t.reshape(-1), y.reshape(-1))
            return y, (x, t)
        # t = tanh(C (x + A x^3)) = tanh(x (C + A C x^2)), in place on one work array
        t = xp.multiply(x, x)
        t *= self._A * self._C
        t += self._C
        t *= x
        xp.tanh(t, out=t)
        y = t + 1.0
        y *= x
        y *= 0.5
        return y, (x, t)

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
        xp = namespace(dy)
        if _fused.fusable(x, t, dy) and dy.shape == x.shape:
            dx = np.empty_like(dy)
            _fused.gelu_backward(x.reshape(-1), t.reshape(-1), dy.reshape(-1), self._C, 3.0 * self._A * self._C,
                                 dx.reshape(-1))
            return dx, {}
        # gelu'(x) = (1 + t + x dt) / 2 with dt = C (1 + 3 A x^2) (1 - t^2), in place on two arrays
        w = xp.multiply(x, x, dtype=xp.result_type(x, dy))
        w *= 3.0 * self._A * self._C
        w += self._C
        s = xp.multiply(t, t)
        xp.subtract(1.0, s, out=s)
        w *= s
        w *= x
        w += t
        w += 1.0
        w *= 0.5
        w *= dy
        return w, {}


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
