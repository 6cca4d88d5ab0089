"""The Transformer encoder block (attention, FFN, residuals, LayerNorm; post-LN or pre-LN).

References
----------
paper 000, App. C (closing Remark on FFN, residual and LayerNorm) and App. F.2.
"""
from __future__ import annotations

import numpy as np

from rieszflow.engine.attention.basic import Dropout, FeedForward, LayerNorm

__all__ = [
    "EncoderLayer",
]


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

    def backward_to_attention(self, dy, cache):
        """Gradient of ``<dy, y>`` with respect to the attention sublayer's output (after ``W_O``).

        The part of :meth:`backward` above the attention layer (LayerNorms, FFN, dropout,
        residuals), with the same operations; parameter gradients are not formed.

        Parameters
        ----------
        dy : float array, shape (B, L, D)
            Upstream gradient of the block output.
        cache : tuple
            From :meth:`forward`.

        Returns
        -------
        float array, shape (B, L, D)
            Gradient of the attention layer's output ``attn.forward(...)[0]``.

        References
        ----------
        paper 000, App. C (closing Remark on FFN, residual and LayerNorm).
        """
        ca, cd1, cl1, cf, cd2, cl2 = cache
        if self.pre_ln:
            df, _ = self.drop2.backward(dy, cd2)
            dn2, _ = self.ffn.backward(df, cf)
            dh2, _ = self.ln2.backward(dn2, cl2)
            return self.drop1.backward(dy + dh2, cd1)[0]
        dr2, _ = self.ln2.backward(dy, cl2)
        df, _ = self.drop2.backward(dr2, cd2)
        dh, _ = self.ffn.backward(df, cf)
        dh = dh + dr2
        dr1, _ = self.ln1.backward(dh, cl1)
        return self.drop1.backward(dr1, cd1)[0]

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
