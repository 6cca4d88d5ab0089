"""Bundled Transformer classifier with kernelised linear (or softmax, or Linformer) attention.

``ids (B, L) -> token + position embedding -> Dropout -> n_layers x post-LN
encoder block -> masked mean pool -> linear classifier -> logits (B, C)``.

Parameters live in one flat dict ``name -> array`` on the chosen backend
(``model.params``); gradients come back in a dict with the same names.
Particles (the random-feature frequencies of every head) are the parameters
``"layers.<i>.attn.omega"`` of shape ``(H, m, d_k)``. With Linformer attention
(a baseline) each layer has sequence projections ``"layers.<i>.attn.e_proj"``
and ``"layers.<i>.attn.f_proj"`` of shape ``(linformer_k, max_len)``.

References
----------
paper 000, eq. (3.2); App. C (eqs. (C.2)-(C.3), pooling operator of C.1,
Remark on FFN/residual/LN); App. F.2 ("Experimental setup": 2 layers, width
128, 2 heads, FFN 256, m = 256 features per head, dropout 0.1, mean pooling,
max length 128). Wang et al. (2020), arXiv:2006.04768 (Linformer).
"""
from __future__ import annotations

import numpy as np

from rieszflow.engine._checks import is_host
from rieszflow.engine.backend import get_backend, namespace, to_numpy
from rieszflow.engine.attention.basic import Dropout, LayerNorm, Linear
from rieszflow.engine.attention.embedding import Embedding, PositionEmbedding
from rieszflow.engine.attention.encoder import EncoderLayer
from rieszflow.engine.attention.kernelized import KernelizedLinearAttention
from rieszflow.engine.attention.linformer import LinformerAttention
from rieszflow.engine.attention.loss import softmax_cross_entropy
from rieszflow.engine.attention.multihead import QK_MODES
from rieszflow.engine.attention.ops import check_mask
from rieszflow.engine.attention.pooling import masked_mean_pool, masked_mean_pool_backward
from rieszflow.engine.attention.softmax import SoftmaxAttention

__all__ = ["TransformerClassifier", "softmax_cross_entropy", "ATTENTIONS", "PARAMETER_GROUPS"]

ATTENTIONS = ("linear", "softmax", "linformer")
PARAMETER_GROUPS = ("particles", "embedding", "qk", "value", "output", "projection", "layernorm", "ffn",
                    "classifier", "feature")


def _group_of(name: str) -> str:
    if name.startswith("embed."):
        return "embedding"
    if name.startswith("classifier."):
        return "classifier"
    leaf = name.split(".")[-1]
    if name.startswith("final_ln."):
        return "layernorm"
    if ".attn." in name:
        if leaf == "omega":
            return "particles"
        if leaf.startswith("phi_") or leaf.startswith("dwc_"):
            return "feature"
        if leaf in ("e_proj", "f_proj"):
            return "projection"
        return {"q": "qk", "k": "qk", "v": "value", "o": "output"}[leaf[-1]]
    if ".ln1." in name or ".ln2." in name:
        return "layernorm"
    return "ffn"


class TransformerClassifier:
    """Sequence classifier: post-LN Transformer encoder, masked mean pooling, linear head.

    Parameters
    ----------
    vocab_size : int
        Token ids lie in ``[0, vocab_size)``.
    max_len : int, default 128
        Longest accepted sequence (learned position table size).
    d_model : int, default 128
        Model width D.
    n_heads : int, default 2
        Heads H; ``d_k = D / H``.
    d_ff : int, default 256
        FFN hidden width.
    n_layers : int, default 2
    n_classes : int, default 2
    dropout : float in [0, 1), default 0.1
        After the embedding, after each sublayer and inside the FFN.
    attention : {"linear", "softmax", "linformer"}, default "linear"
        Kernelised linear attention (eq. (C.2)), exact softmax (eq. (C.1)),
        or Linformer attention (Wang et al. 2020; a baseline, see
        :class:`~rieszflow.engine.attention.linformer.LinformerAttention`).
    feature_map : str or None
        Feature-map name for ``attention="linear"`` (required there; one of
        ``engine.features``' names, e.g. "favor", "elu", "softplus",
        "sigmoid2", "softmaxfeat", "cos2", "porf_softplus"); must be None for
        softmax and Linformer attention.
    m : int, default 256
        Features (particles) per head for linear attention; unused by softmax
        and Linformer attention.
    qk : {"shared", "learned"} or None
        None resolves to ``"shared"`` for linear attention (the paper's
        "Q = K = reshape(x)" rows) and to ``"learned"`` for softmax and
        Linformer attention (the Vaswani baseline); the resolved value is in
        ``config["qk"]``.
    feature_options : dict or None
        Keyword options passed to ``make_feature_map`` (e.g. temperature);
        must be None or empty for softmax and Linformer attention.
    attn_eps : float or None, default None
        Normaliser epsilon of linear attention (see
        :class:`~rieszflow.engine.attention.kernelized.KernelizedLinearAttention`); None takes the
        feature map's ``default_eps`` (0 for the random-feature maps, 1e-6 for LUNA).
    pre_ln : bool, default False
        Pre-LN blocks (``x + Attn(LN(x))``, ``x + FFN(LN(x))``) and a final LayerNorm
        ``final_ln`` before pooling (the LRA configuration of paper 001); False is the
        post-LN block of paper 000.
    dwc : dict or None
        Depthwise-convolution branch on the values of linear attention
        (``{"kind": "1d"|"2d", "kernel": k, "grid": (h, w)}``, see
        :class:`~rieszflow.engine.attention.kernelized.KernelizedLinearAttention`); None: off.
    linformer_k : int or None
        Projected length k of Linformer attention (required, >= 1, with
        ``attention="linformer"``; must be None otherwise). Each layer's
        projections ``E``, ``F`` have shape (linformer_k, max_len).
    embed_std : float, default 1.0
        Standard deviation of the N(0, embed_std^2) token-embedding initialisation
        (1.0 is PyTorch's ``nn.Embedding`` default; 0.02 is BERT's initializer range).
        Paper 000 does not state it. Under Adam each step moves an entry by about
        ``lr``, so the relative speed at which embeddings learn scales as
        ``lr / embed_std``.
    seed : int or None
        Seed of the initialisation generator (ignored when ``rng`` is given).
    rng : numpy.random.Generator or None
        Initialisation generator; with neither ``seed`` nor ``rng``, seed 0.
    dtype : {"float32", "float64"}, default "float32"
    backend : {"numpy", "cupy"}, default "numpy"

    Attributes
    ----------
    params : dict
        ``name -> array`` on the backend. Names: ``embed.token`` (V, D),
        ``embed.position`` (max_len, D), ``layers.<i>.attn.{omega, w_q, b_q,
        w_k, b_k, w_v, b_v, w_o, b_o}`` (Linformer: ``e_proj, f_proj``
        (linformer_k, max_len) instead of ``omega``), ``layers.<i>.ln1.{gamma, beta}``,
        ``layers.<i>.ffn.{w1, b1, w2, b2}``, ``layers.<i>.ln2.{gamma, beta}``,
        ``classifier.w`` (D, C), ``classifier.b`` (C,).
    config : dict
        The resolved constructor arguments (``m`` is None unless linear,
        ``linformer_k`` None unless Linformer).
    feature_maps : list
        One FeatureMap per layer (linear attention), shared by its heads.

    Raises
    ------
    ValueError
        On an unknown ``attention``/``qk``/``dtype``/``backend``, a missing or
        superfluous ``feature_map`` or ``linformer_k``, or non-positive sizes.

    Notes
    -----
    Initialisation (host generator, then moved to the backend): token
    embedding N(0, embed_std^2), positions N(0, 0.02^2), Xavier-uniform weights, zero
    biases, LN gamma = 1, beta = 0; particles from the feature map's
    ``init_omega``, one call per head. Each layer's feature map is built by
    ``make_feature_map(name, d_k, m, rng=rng, **feature_options)`` with the
    same initialisation generator, so fixed parts of a map (e.g. phases) are
    fixed by the seed. Linformer layers draw their ``W``'s and then ``E``,
    ``F`` (see :class:`~rieszflow.engine.attention.linformer.LinformerAttention`). The
    classifier sees the pooled last-layer output (no
    dropout before it).

    References
    ----------
    paper 000, eq. (3.2); App. C (eqs. (C.1)-(C.3), C.1, Remark); App. F.2.
    """

    def __init__(self, vocab_size: int, max_len: int = 128, d_model: int = 128, n_heads: int = 2,
                 d_ff: int = 256, n_layers: int = 2, n_classes: int = 2, dropout: float = 0.1,
                 attention: str = "linear", feature_map: str | None = None, m: int = 256,
                 qk: str | None = None, feature_options: dict | None = None, attn_eps: float | None = None,
                 linformer_k: int | None = None, embed_std: float = 1.0, pre_ln: bool = False,
                 dwc: dict | None = None,
                 seed: int | None = None, rng: np.random.Generator | None = None,
                 dtype: str = "float32", backend: str = "numpy"):
        if attention not in ATTENTIONS:
            raise ValueError(f"attention={attention!r} is not supported; allowed: {', '.join(ATTENTIONS)}")
        if qk is None:
            qk = "shared" if attention == "linear" else "learned"
        if qk not in QK_MODES:
            raise ValueError(f"qk={qk!r} is not supported; allowed: {', '.join(QK_MODES)} (or None)")
        for name, val in (("vocab_size", vocab_size), ("max_len", max_len), ("d_model", d_model),
                          ("n_heads", n_heads), ("d_ff", d_ff), ("n_layers", n_layers),
                          ("n_classes", n_classes), ("m", m)):
            if isinstance(val, bool) or not isinstance(val, (int, np.integer)) or val < 1:
                raise ValueError(f"{name}={val!r} is not allowed; expected a positive integer")
        if n_classes < 2:
            raise ValueError(f"n_classes={n_classes} is not allowed; expected >= 2")
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        feature_options = dict(feature_options or {})
        if attention == "linear" and feature_map is None:
            raise ValueError("feature_map=None is not allowed with attention='linear'; pass a feature-map "
                             "name such as 'favor', 'elu', 'softplus', 'sigmoid2', 'softmaxfeat', 'cos2', "
                             "'porf_softplus'")
        if attention != "linear" and (feature_map is not None or feature_options):
            raise ValueError(f"feature_map={feature_map!r}, feature_options={feature_options!r} are not "
                             f"used by attention={attention!r}; pass None")
        if attention == "linformer":
            if linformer_k is None:
                raise ValueError("linformer_k=None is not allowed with attention='linformer'; pass the "
                                 "projected length k (a positive integer)")
            if (isinstance(linformer_k, bool) or not isinstance(linformer_k, (int, np.integer))
                    or linformer_k < 1):
                raise ValueError(f"linformer_k={linformer_k!r} is not allowed; expected a positive integer")
        elif linformer_k is not None:
            raise ValueError(f"linformer_k={linformer_k!r} is not used by attention={attention!r}; pass None "
                             "(it is the projected length of attention='linformer')")
        if dwc is not None and attention != "linear":
            raise ValueError(f"dwc={dwc!r} is a branch of linear attention; attention is {attention!r}")
        if not isinstance(pre_ln, (bool, np.bool_)):
            raise ValueError(f"pre_ln={pre_ln!r} must be a bool")
        if attn_eps is None:
            if attention == "linear":
                from rieszflow.engine.features import FEATURE_MAPS
                attn_eps = getattr(FEATURE_MAPS.get(feature_map), "default_eps", 0.0)
            else:
                attn_eps = 0.0
        if rng is None:
            rng = np.random.default_rng(0 if seed is None else seed)
        elif not isinstance(rng, np.random.Generator):
            raise ValueError(f"rng={rng!r} is not allowed; expected a numpy.random.Generator or None")
        self.backend = get_backend(backend, dtype)
        self.dtype = self.backend.dtype
        self.config = dict(vocab_size=int(vocab_size), max_len=int(max_len), d_model=int(d_model),
                           n_heads=int(n_heads), d_ff=int(d_ff), n_layers=int(n_layers),
                           n_classes=int(n_classes), dropout=float(dropout), attention=attention,
                           feature_map=feature_map, m=int(m) if attention == "linear" else None, qk=qk,
                           feature_options=feature_options, attn_eps=float(attn_eps),
                           linformer_k=int(linformer_k) if attention == "linformer" else None,
                           embed_std=float(embed_std), pre_ln=bool(pre_ln), dwc=dwc,
                           dtype=str(self.dtype), backend=backend)
        d_k = d_model // n_heads
        self.token = Embedding(vocab_size, d_model, init_std=embed_std)
        self.position = PositionEmbedding(max_len, d_model, init_std=0.02)
        self.embed_drop = Dropout(dropout)
        self.feature_maps = []
        self.layers = []
        host = {}
        host["embed.token"] = self.token.init_params(rng, self.dtype)["weight"]
        host["embed.position"] = self.position.init_params(rng, self.dtype)["weight"]
        if attention == "linear":
            from rieszflow.engine.features import make_feature_map  # written beside this package
        for i in range(n_layers):
            if attention == "linear":
                fmap = make_feature_map(feature_map, d_k, m, rng=rng, **feature_options)
                self.feature_maps.append(fmap)
                signed = not getattr(fmap, "positive", True)      # e.g. fixed RFF (paper 001 Table 5)
                attn = KernelizedLinearAttention(d_model, n_heads, fmap, qk=qk,
                                                 eps=attn_eps if not signed or attn_eps > 0 else 1e-6,
                                                 dwc=dwc, signed=signed)
            elif attention == "linformer":
                attn = LinformerAttention(d_model, n_heads, linformer_k, max_len, qk=qk)
            else:
                attn = SoftmaxAttention(d_model, n_heads, qk=qk)
            layer = EncoderLayer(attn, d_ff, dropout, pre_ln=bool(pre_ln))
            self.layers.append(layer)
            for k, v in layer.init_params(rng, self.dtype).items():
                host[f"layers.{i}.{k}"] = v
        self.final_ln = None
        if pre_ln:
            self.final_ln = LayerNorm(d_model)
            for k, v in self.final_ln.init_params(rng, self.dtype).items():
                host[f"final_ln.{k}"] = v
        self.classifier = Linear(d_model, n_classes)
        for k, v in self.classifier.init_params(rng, self.dtype).items():
            host[f"classifier.{k}"] = v
        self.params = {k: self.backend.asarray(v) for k, v in host.items()}
        self._cache = None

    # ------------------------------------------------------------------ names

    def parameter_names(self, groups=None) -> list:
        """Names of the parameters, optionally restricted to groups.

        Parameters
        ----------
        groups : iterable of str or None
            Subset of ``PARAMETER_GROUPS``: "particles" (``attn.omega``),
            "embedding", "qk" (``w_q, b_q, w_k, b_k``), "value" (``w_v, b_v``),
            "output" (``w_o, b_o``), "projection" (Linformer's sequence
            projections ``attn.e_proj, attn.f_proj``; empty for the other
            attentions), "layernorm", "ffn", "classifier". None: all.

        Returns
        -------
        list of str

        Raises
        ------
        ValueError
            On an unknown group name.
        """
        if groups is None:
            return list(self.params)
        if isinstance(groups, str):
            groups = [groups]
        groups = set(groups)
        bad = groups - set(PARAMETER_GROUPS)
        if bad:
            raise ValueError(f"groups={sorted(bad)!r} are unknown; allowed: {', '.join(PARAMETER_GROUPS)}")
        return [k for k in self.params if _group_of(k) in groups]

    def particle_names(self) -> list:
        """Names of the particle parameters.

        Returns
        -------
        list of str
            ``layers.<i>.attn.omega`` (each of shape (H, m, d_k)); empty for
            softmax attention.
        """
        return self.parameter_names("particles")

    # ------------------------------------------------------------------ forward/backward

    def _check_layer(self, i):
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not 0 <= i < len(self.layers):
            raise ValueError(f"layer={i!r} is not allowed; expected an int in [0, {len(self.layers)})")
        return int(i)

    def layer_params(self, i):
        """The parameters of encoder block ``i`` under the block's local names.

        Parameters
        ----------
        i : int
            Block index, ``0 <= i < n_layers``.

        Returns
        -------
        dict
            ``name -> array`` with the prefix ``"layers.<i>."`` removed (e.g.
            ``"attn.omega"``, ``"ffn.w1"``): the arrays of ``params`` themselves, not
            copies, as :meth:`pooled` passes them to the block.

        Raises
        ------
        ValueError
            If ``i`` is not a block index.
        """
        return self._layer_params(self._check_layer(i))

    def attention_params(self, i):
        """The parameters of block ``i``'s attention under the attention layer's local names.

        Parameters
        ----------
        i : int
            Block index, ``0 <= i < n_layers``.

        Returns
        -------
        dict
            ``name -> array`` with the prefix ``"layers.<i>.attn."`` removed (``"omega"``,
            ``"w_v"``, ...): what ``self.layers[i].attn`` receives in the forward pass,
            e.g. for its ``project``, ``features`` or ``attention_rows``.

        Raises
        ------
        ValueError
            If ``i`` is not a block index.
        """
        return EncoderLayer._sub(self._layer_params(self._check_layer(i)), "attn")

    def attention_inputs(self, ids, mask):
        """The input of every block's attention sublayer, from a forward pass without dropout.

        Runs :meth:`pooled` (``train=False``, which also replaces the cached pass that
        :meth:`backward_pooled` uses) and returns what each attention layer received:
        the block input for post-LN blocks, the first LayerNorm's output for pre-LN.

        Parameters
        ----------
        ids : int array, shape (B, L)
            Token ids in ``[0, vocab_size)``, on the model's backend.
        mask : bool array, shape (B, L)
            True on real tokens; every row needs one.

        Returns
        -------
        list of float array, shape (B, L, d_model)
            One per block, in order; the model's dtype and backend (the arrays the
            forward pass used, not copies).

        Raises
        ------
        TypeError, ValueError
            As :meth:`pooled`.

        References
        ----------
        paper 000, App. C (the encoder block and its attention input).
        """
        self.pooled(ids, mask, train=False, rng=None)
        return self.last_attention_inputs()

    def last_attention_inputs(self):
        """The input of every block's attention sublayer in the last cached forward pass.

        Returns
        -------
        list of float array, shape (B, L, d_model)
            One per block, in order (the arrays of the cached pass, with its dropout if it
            was a training pass).

        Raises
        ------
        RuntimeError
            If no forward pass is cached.
        """
        if self._cache is None:
            raise RuntimeError("last_attention_inputs needs a cached pooled/forward call")
        return [c[0][0] for c in self._cache["layers"]]

    def backward_to_attention(self, dpooled, layer):
        """Gradient of ``<dpooled, pooled>`` with respect to block ``layer``'s attention output.

        Uses the last cached :meth:`pooled` (or :meth:`forward`) pass: the pooling's, the
        final LayerNorm's (pre-LN) and the later blocks' backward passes, then the part of
        block ``layer`` above its attention sublayer
        (:meth:`EncoderLayer.backward_to_attention`). With the attention layer's
        ``output_backward`` this gives the gradient of the per-head outputs ``a``.

        Parameters
        ----------
        dpooled : float array, shape (B, d_model)
            Upstream gradient of the pooled representations (cast to the model's dtype).
        layer : int
            Block index, ``0 <= layer < n_layers``.

        Returns
        -------
        float array, shape (B, L, d_model)
            Gradient of the attention layer's output (after ``W_O``).

        Raises
        ------
        RuntimeError
            If no forward pass is cached.
        ValueError
            If ``layer`` is not a block index.

        References
        ----------
        paper 000, App. C.1 (pooling) and App. C (the encoder block).
        """
        layer = self._check_layer(layer)
        if self._cache is None:
            raise RuntimeError("backward_to_attention needs a cached pooled/forward call")
        c = self._cache
        dx = masked_mean_pool_backward(dpooled.astype(self.dtype, copy=False), c["pool"])
        if c.get("final_ln") is not None:
            dx, _ = self.final_ln.backward(dx, c["final_ln"])
        for j in reversed(range(layer + 1, len(self.layers))):
            dx, _ = self.layers[j].backward(dx, c["layers"][j])
        return self.layers[layer].backward_to_attention(dx, c["layers"][layer])

    def _layer_params(self, i):
        prefix = f"layers.{i}."
        n = len(prefix)
        return {k[n:]: v for k, v in self.params.items() if k.startswith(prefix)}

    def _check_inputs(self, ids, mask):
        self.token.check_ids(ids)
        length = ids.shape[1]
        if length > self.config["max_len"]:
            raise ValueError(f"ids has sequence length L={length}, above max_len={self.config['max_len']}")
        check_mask(mask, ids.shape)
        if namespace(ids) is not self.backend.xp or namespace(mask) is not self.backend.xp:
            raise TypeError(f"ids and mask must be arrays of the model's backend ({self.backend.name}); "
                            "move them with model.backend.asarray(x, dtype=...)")

    def pooled(self, ids, mask, train: bool = False, rng: np.random.Generator | None = None):
        """Pooled representation ``P(Phi(X)) = sum_i pi_i h_i`` of the last layer, the classifier input.

        Parameters
        ----------
        ids : int array, shape (B, L)
            Token ids in ``[0, vocab_size)``, on the model's backend.
        mask : bool array, shape (B, L)
            True on real tokens; every row needs one. Padding ids are looked
            up but padded keys are omitted from attention and padded tokens
            from pooling, so appended padding leaves the result unchanged.
        train : bool, default False
            Apply dropout.
        rng : numpy.random.Generator or None
            Dropout generator, required when ``train`` and dropout > 0.

        Returns
        -------
        pooled : float array, shape (B, d_model)

        Raises
        ------
        TypeError, ValueError
            On bad ids (dtype, vocabulary range), a mask of another shape, a row
            without real tokens, ``L > max_len``, or a missing dropout rng.

        References
        ----------
        paper 000, App. C.1 (pooling with pi_i = m_i / sum_j m_j).
        """
        self._check_inputs(ids, mask)
        if train and self.config["dropout"] > 0 and not isinstance(rng, np.random.Generator):
            raise ValueError(f"rng={rng!r} is not allowed with train=True and dropout="
                             f"{self.config['dropout']}; pass a numpy.random.Generator")
        x, c_tok = self.token.forward({"weight": self.params["embed.token"]}, ids)
        x, c_pos = self.position.forward({"weight": self.params["embed.position"]}, x)
        x, c_drop = self.embed_drop.forward(x, train, rng)
        c_layers = []
        for i, layer in enumerate(self.layers):
            x, c = layer.forward(self._layer_params(i), x, mask, train, rng)
            c_layers.append(c)
        c_fln = None
        if self.final_ln is not None:
            x, c_fln = self.final_ln.forward({"gamma": self.params["final_ln.gamma"],
                                              "beta": self.params["final_ln.beta"]}, x)
        p, c_pool = masked_mean_pool(x, mask)
        self._cache = {"tok": c_tok, "pos": c_pos, "drop": c_drop, "layers": c_layers, "pool": c_pool,
                       "pooled": p, "head": None, "final_ln": c_fln}
        return p

    def forward(self, ids, mask, train: bool = False, rng: np.random.Generator | None = None):
        """Class logits.

        Parameters
        ----------
        ids : int array, shape (B, L)
            Token ids in ``[0, vocab_size)``, on the model's backend (as in :meth:`pooled`).
        mask : bool array, shape (B, L)
            True on real tokens; every row needs one (as in :meth:`pooled`).
        train : bool, default False
            Apply dropout.
        rng : numpy.random.Generator or None
            Dropout generator, required when ``train`` and dropout > 0.

        Returns
        -------
        logits : float array, shape (B, n_classes)
            Class logits.

        Raises
        ------
        TypeError, ValueError
            As in :meth:`pooled`.
        """
        p = self.pooled(ids, mask, train, rng)
        logits, c_head = self.classifier.forward(
            {"w": self.params["classifier.w"], "b": self.params["classifier.b"]}, p)
        self._cache["head"] = c_head
        return logits

    def _check_upstream(self, name, g, shape):
        if not hasattr(g, "shape") or tuple(g.shape) != tuple(shape):
            raise ValueError(f"{name} has shape {tuple(getattr(g, 'shape', ()))}; expected {tuple(shape)}")
        if is_host(g) and not bool(self.backend.xp.isfinite(g).all()):   # host only: no device sync
            raise ValueError(f"{name} contains NaN or inf")

    def backward_pooled(self, dpooled, wrt=None) -> dict:
        """Gradients of ``<dpooled, pooled>`` with respect to the encoder parameters.

        Parameters
        ----------
        dpooled : float array, shape (B, d_model)
            Upstream gradient of the last :meth:`pooled` (or :meth:`forward`) output.
        wrt : iterable of str or None
            Parameter names to return; None: every parameter except the
            classifier's (which the pooled output does not depend on).

        Returns
        -------
        dict
            ``name -> gradient`` (shape of ``params[name]``).

        Raises
        ------
        RuntimeError
            If no forward pass is cached.
        ValueError
            On a wrong shape or non-finite ``dpooled``, or unknown names in ``wrt``.
        """
        if self._cache is None:
            raise RuntimeError("backward_pooled called before pooled/forward")
        c = self._cache
        self._check_upstream("dpooled", dpooled, c["pooled"].shape)
        names = [k for k in self.params if not k.startswith("classifier.")] if wrt is None else list(wrt)
        unknown = [k for k in names if k not in self.params or k.startswith("classifier.")]
        if unknown:
            raise ValueError(f"wrt contains {unknown!r}, which are not encoder parameters of this model")
        want = set(names)
        grads = {}
        dx = masked_mean_pool_backward(dpooled.astype(self.dtype, copy=False), c["pool"])
        if c.get("final_ln") is not None:
            dx, g = self.final_ln.backward(dx, c["final_ln"])
            for k, v in g.items():
                if f"final_ln.{k}" in want:
                    grads[f"final_ln.{k}"] = v
        for i in reversed(range(len(self.layers))):
            dx, g = self.layers[i].backward(dx, c["layers"][i])
            for k, v in g.items():
                full = f"layers.{i}.{k}"
                if full in want:
                    grads[full] = v
        dx, _ = self.embed_drop.backward(dx, c["drop"])
        if "embed.position" in want:
            grads["embed.position"] = self.position.backward(dx, c["pos"])[1]["weight"]
        if "embed.token" in want:
            grads["embed.token"] = self.token.backward(dx, c["tok"])[1]["weight"]
        return {k: grads[k] for k in names}

    def backward(self, dlogits, wrt=None) -> dict:
        """Gradients of ``<dlogits, logits>`` for the last :meth:`forward`.

        Parameters
        ----------
        dlogits : float array, shape (B, n_classes)
            E.g. the ``dlogits`` of :func:`softmax_cross_entropy`.
        wrt : iterable of str or None
            Parameter names to return; None: all.

        Returns
        -------
        dict
            ``name -> gradient`` with the names and shapes of ``params``.

        Raises
        ------
        RuntimeError
            If the last pass was :meth:`pooled` only, or none was made.
        ValueError
            On a wrong shape, non-finite values, or unknown names in ``wrt``.
        """
        if self._cache is None or self._cache["head"] is None:
            raise RuntimeError("backward called without a cached forward (call forward, not pooled, first)")
        c = self._cache
        shape = (c["pooled"].shape[0], self.config["n_classes"])
        self._check_upstream("dlogits", dlogits, shape)
        names = list(self.params) if wrt is None else list(wrt)
        unknown = [k for k in names if k not in self.params]
        if unknown:
            raise ValueError(f"wrt contains {unknown!r}, which are not parameters of this model")
        dp, gh = self.classifier.backward(dlogits.astype(self.dtype, copy=False), c["head"])
        grads = {"classifier.w": gh["w"], "classifier.b": gh["b"]}
        enc = [k for k in names if not k.startswith("classifier.")]
        if enc:
            grads.update(self.backward_pooled(dp, wrt=enc))
        return {k: grads[k] for k in names}

    def loss_and_grads(self, ids, mask, labels, train: bool = False, rng: np.random.Generator | None = None,
                       wrt=None):
        """Cross-entropy loss, its parameter gradients and the class probabilities.

        Parameters
        ----------
        ids : int array, shape (B, L)
            Token ids in ``[0, vocab_size)``, on the model's backend (as in :meth:`pooled`).
        mask : bool array, shape (B, L)
            True on real tokens; every row needs one (as in :meth:`pooled`).
        train : bool, default False
            Apply dropout.
        rng : numpy.random.Generator or None
            Dropout generator, required when ``train`` and dropout > 0.
        labels : int array, shape (B,)
            Class labels in ``[0, n_classes)``.
        wrt : iterable of str or None
            As in :meth:`backward`.

        Returns
        -------
        loss : float64 scalar (NumPy) or 0-d float64 array (CuPy)
        grads : dict
        probs : float array, shape (B, n_classes)

        Raises
        ------
        TypeError, ValueError
            As in :meth:`forward` and :func:`softmax_cross_entropy`.
        """
        logits = self.forward(ids, mask, train, rng)
        loss, dlogits, probs = softmax_cross_entropy(logits, labels)
        return loss, self.backward(dlogits, wrt=wrt), probs

    # ------------------------------------------------------------------ state

    def _buffers(self):
        """Fixed (non-learned) feature-map constants: ``layers.<i>.feature_map.<name>`` -> (map, name)."""
        out = {}
        for i, fmap in enumerate(self.feature_maps):
            for nm in getattr(fmap, "fixed_names", ()):
                out[f"layers.{i}.feature_map.{nm}"] = (fmap, nm)
        return out

    def state_dict(self) -> dict:
        """Host copies of the parameters and of the feature maps' fixed constants.


        Returns
        -------
        dict
            ``name -> numpy.ndarray``: every entry of ``params``, plus buffers
            ``layers.<i>.feature_map.<b>`` (e.g. cos2 phases, elu biases), so a
            checkpoint fixes the model even if it is rebuilt with another seed.
        """
        state = {k: to_numpy(v).copy() for k, v in self.params.items()}
        for k, (fmap, nm) in self._buffers().items():
            state[k] = np.array(to_numpy(getattr(fmap, nm)), copy=True)
        return state

    def load_state_dict(self, state: dict) -> None:
        """Copy parameters (in place, so optimisers holding ``params`` stay valid) and buffers.

        Parameters
        ----------
        state : dict
            ``name -> array`` with exactly the names and shapes of :meth:`state_dict`.

        Returns
        -------
        None

        Raises
        ------
        ValueError
            On missing or unexpected names, a shape mismatch, or non-finite values.
        """
        buffers = self._buffers()
        expected = set(self.params) | set(buffers)
        missing = sorted(expected - set(state))
        extra = sorted(set(state) - expected)
        if missing or extra:
            raise ValueError(f"state has missing names {missing!r} and unexpected names {extra!r}")
        host = {}
        for k, v in state.items():
            a = np.asarray(to_numpy(v))
            ref = self.params[k] if k in self.params else getattr(*buffers[k])
            if a.shape != tuple(ref.shape):
                raise ValueError(f"state[{k!r}] has shape {a.shape}; expected {tuple(ref.shape)}")
            if not np.all(np.isfinite(a)):
                raise ValueError(f"state[{k!r}] contains NaN or inf")
            host[k] = a
        for k, a in host.items():
            if k in self.params:
                self.params[k][...] = self.backend.asarray(a)
            else:
                fmap, nm = buffers[k]
                setattr(fmap, nm, np.array(a, dtype=np.float64, copy=True))
