"""Kernelized (normalised) linear attention with learnable feature particles per head.

References
----------
paper 000, eq. (3.2) and App. C, eqs. (C.2)-(C.3); paper 001 (LUNA), eq. (9) and section 4.
"""
from __future__ import annotations

import math

import numpy as np

from rieszflow.engine._checks import check_int
from rieszflow.engine.backend import namespace
from rieszflow.engine.attention.causal import causal_linear_attention, causal_linear_attention_backward
from rieszflow.engine.attention.conv import depthwise_conv, depthwise_conv_backward
from rieszflow.engine.attention.multihead import _MultiHead
from rieszflow.engine.attention.ops import _linear_bwd, _linear_fwd, _merge_heads, _split_heads

__all__ = [
    "KernelizedLinearAttention",
]

#: Largest feature array (bytes) of one feature-map call: a fixed map acting token by token is
#: applied to chunks of whole sequences of about this size, so that its temporaries (a dozen
#: arrays of the size of the features) stay below glibc's mmap threshold and are reused from
#: the heap instead of being mapped, page-faulted and unmapped on every call (issue 24, item 5;
#: ``benchmarks/bench_attention.py`` measures page faults per call).
FEATURE_CHUNK_BYTES = 4 << 20


def _ones_column(xp, v, out=None):
    """``[v | 1]``: v (..., d_k) with a column of ones appended, (..., d_k + 1), into ``out`` if given."""
    dk = v.shape[-1]
    if out is None:
        out = xp.empty(v.shape[:-1] + (dk + 1,), dtype=v.dtype)
    out[..., :dk] = v
    out[..., dk] = 1.0
    return out


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
        and ``last_negative``: 0-d float arrays on the backend of ``x`` (the forward
        pass does not synchronise with the device; convert with ``float`` where the
        value is recorded). ``None`` before the first signed call.

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
        self.last_clamped = None
        self.last_negative = None
        self._scratch = {}                       # work buffers of backward (_scratch_buffer)

    def __getstate__(self):
        """Pickled without the work buffers (they are scratch, rebuilt on the next backward)."""
        state = self.__dict__.copy()
        state["_scratch"] = {}
        return state

    def _scratch_buffer(self, xp, name, shape, dtype):
        """A work array of the backward pass, kept on the layer and reused by the next call.

        Only for arrays that die with the call (no cache or result refers to them), so reuse
        cannot change a result; a new array when the shape, dtype or backend changes.
        """
        buf = self._scratch.get(name)
        if buf is None or buf.shape != tuple(shape) or buf.dtype != dtype or namespace(buf) is not xp:
            buf = xp.empty(shape, dtype=dtype)
            self._scratch[name] = buf
        return buf

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

    def features(self, params, x):
        """Feature map of every head applied to head-major token vectors.

        Parameters
        ----------
        params : dict
            The layer's parameters (local names): ``"omega"`` (S, m, d_k) and, for a
            learned map, every ``"phi_<name>"`` (S, ...). Arrays of ``x``'s backend.
        x : float array, shape (H, B, L, d_k)
            Queries or keys of every head, e.g. from ``project``.

        Returns
        -------
        phi : float array, shape (H, B, L, D)
            ``phi_h(x_h)`` with ``D = feature_map.n_features``, dtype of ``x``. Padded
            tokens are not masked here (the forward pass zeroes padded keys' features).
        caches : list
            The feature map's forward caches (one per particle set), for
            :meth:`features_backward`.

        Raises
        ------
        KeyError
            If ``params`` lacks ``"omega"`` or a learned map's parameter.
        ValueError, TypeError
            As the feature map's ``forward``.

        References
        ----------
        paper 000, App. D; paper 001 (LUNA), eq. (11).
        """
        return self._features(x, params["omega"], params)

    def features_backward(self, params, dphi, caches, grads):
        """VJP of :meth:`features`: gradients of the token vectors and of the map's parameters.

        Parameters
        ----------
        params : dict
            The parameters passed to :meth:`features` (``"omega"`` gives the shape of
            its gradient).
        dphi : float array, shape (H, B, L, D)
            Upstream gradient of ``phi``.
        caches : list
            The caches returned by :meth:`features`.
        grads : dict
            Updated in place: a learned map's ``"phi_<name>"`` gradients (S, ...) are
            added to the entries already there (created when absent).

        Returns
        -------
        dx : float array, shape (H, B, L, d_k)
            Gradient of the token vectors.
        domega : float array, shape (S, m, d_k)
            Gradient of the particles (not written into ``grads``).

        References
        ----------
        paper 000, App. D (hand-written backward passes of the maps).
        """
        return self._features_backward(dphi, caches, params["omega"], grads)

    def kernel_terms(self, params, x, mask):
        """The intermediate arrays of the forward pass: projections, features, normaliser.

        Computed with the forward pass's operations in its order, so every array is
        bit-identical to the one :meth:`forward` uses. Diagnostics of a signed
        denominator are not recorded here.

        Parameters
        ----------
        params : dict
            See class Notes.
        x : float array, shape (B, L, D)
            The layer input.
        mask : bool array, shape (B, L)
            True on real tokens; every row needs one.

        Returns
        -------
        dict
            ``"q"``, ``"k"``, ``"v"`` (H, B, L, d_k) from ``project``; ``"phi_q"``
            (H, B, L, D); ``"phi_k"`` (H, B, L, D) with padded keys' rows zero;
            ``"caches_q"``, ``"caches_k"``: the feature caches (``caches_k`` is None in
            the shared form, where ``phi_k`` is ``phi_q`` masked); ``"den"`` (H, B, L):
            the normaliser ``phi(q_i)^T z + eps`` (signed: ``sign(den) max(|den|, eps)``),
            or None when ``causal`` (the causal normaliser changes with i, see
            :meth:`attention_rows`); ``"a"`` (H, B, L, d_k): the normalised attention
            output of every head (before the DWC branch and ``W_O``). Arrays of ``x``'s
            backend and dtype.

        Raises
        ------
        ValueError, TypeError
            As :meth:`forward`.

        References
        ----------
        paper 000, eq. (3.2) and App. C, eqs. (C.2)-(C.3).
        """
        xp, q, k, v, phi_q, cq, phi_k, ck, keym, phi_km = self._kernel_inputs(params, x, mask)
        den = None
        if self.causal:
            a, _ = causal_linear_attention(phi_q, phi_km, v, eps=self.eps, chunk=self.chunk)
        else:                                     # the forward pass's operations, in its order
            _, _, num, den = self._key_sums(xp, phi_q, phi_k, v, keym)
            den = self._normaliser(xp, den)
            a = num / den[..., None]
        return {"q": q, "k": k, "v": v, "phi_q": phi_q, "phi_k": phi_km, "caches_q": cq,
                "caches_k": ck, "den": den, "a": a}

    def attention_rows(self, params, x, mask):
        """The explicit attention matrix of every head: ``a_i = sum_j A[i, j] v_j``.

        ``A[h, b, i, j] = m_j phi(q_i) . phi(k_j) / den_i`` with the forward pass's
        normaliser ``den_i = phi(q_i)^T z + eps`` (``sum_{j <= i}`` when ``causal``);
        each row sums to 1 over the real keys when ``eps = 0``, and padded keys get 0.
        O(H B L^2 D) time and O(H B L^2) memory: a diagnostic, not a forward pass.
        The DWC branch, if any, is not an attention term and is left out.

        Parameters
        ----------
        params : dict
            See class Notes.
        x : float array, shape (B, L, D)
            The layer input.
        mask : bool array, shape (B, L)
            True on real tokens; every row needs one.

        Returns
        -------
        float array, shape (H, B, L, L)
            Rows indexed by queries, columns by keys; dtype and backend of ``x``.

        Raises
        ------
        ValueError, TypeError
            As :meth:`forward`.

        References
        ----------
        paper 000, eq. (3.2) and App. C, eq. (C.2); Katharopoulos et al. (2020),
        "Transformers are RNNs", arXiv:2006.16236 (the causal form).
        """
        xp, q, k, v, phi_q, cq, phi_k, ck, keym, phi_km = self._kernel_inputs(params, x, mask)
        kern = xp.matmul(phi_q, phi_km.transpose(0, 1, 3, 2))           # (H, B, L, L)
        if self.causal:
            n = x.shape[1]
            kern = kern * xp.asarray(np.tril(np.ones((n, n), dtype=bool)))
            den = kern.sum(axis=-1) + self.eps
        else:
            den = self._normaliser(xp, self._key_sums(xp, phi_q, phi_k, v, keym)[3])   # forward's den
        return kern / den[..., None]

    def _kernel_inputs(self, params, x, mask, masked=True):
        """Checks, projections and features: the first half of :meth:`forward`.

        ``phi_km`` (the features with padded keys' rows zero) is None unless ``masked``:
        the non-causal forward pass masks ``[v | 1]`` instead (:meth:`_key_sums`).
        """
        self._check_inputs(x, mask)
        omega = params["omega"]
        if omega.ndim != 3 or omega.shape[0] != self.n_sets or omega.shape[2] != self.d_k:
            raise ValueError(f"params['omega'] has shape {tuple(omega.shape)}; expected "
                             f"({self.n_sets}, m, {self.d_k})")
        xp = namespace(x, omega)
        q, k, v = self.project(params, x)
        phi_q, cq = self._features(q, omega, params)
        if self.qk == "shared":
            phi_k, ck = phi_q, None
        else:
            phi_k, ck = self._features(k, omega, params)
        keym = mask.astype(x.dtype)[None, :, :, None]                # (1, B, L, 1)
        phi_km = phi_k * keym if masked else None                     # (H, B, L, m)
        return xp, q, k, v, phi_q, cq, phi_k, ck, keym, phi_km

    @staticmethod
    def _key_sums(xp, phi_q, phi_k, v, keym):
        """The non-causal key sums and the numerator and raw denominator, in two GEMMs.

        ``[G | z] = phi_k^T (m [v | 1])`` (a column of ones appended to v, the padding mask m
        applied to that small array rather than to phi_k) and ``[num | den] = phi_q [G | z]``:
        G = sum_j m_j phi(k_j) v_j^T, z = sum_j m_j phi(k_j). With m_j in {0, 1} the products
        are those of the masked features, bit for bit.

        Returns
        -------
        gz : (H, B, m, d_k + 1) ``[G | z]``; v1m : (H, B, L, d_k + 1) ``m [v | 1]``;
        num : (H, B, L, d_k), a view; den : (H, B, L), contiguous (den without eps; a copy,
        so that caching it keeps no (H, B, L, d_k + 1) array alive).
        """
        dk = v.shape[-1]
        v1m = _ones_column(xp, v)
        v1m *= keym
        gz = xp.matmul(phi_k.transpose(0, 1, 3, 2), v1m)
        nd = xp.matmul(phi_q, gz)
        return gz, v1m, nd[..., :dk], xp.ascontiguousarray(nd[..., dk])

    def _normaliser(self, xp, den):
        """``den + eps``, or ``sign(den) max(|den|, eps)`` when signed (no diagnostics)."""
        if self.signed:                           # eps in den's dtype: float32 stays float32
            small = xp.abs(den) <= self.eps
            eps = den.dtype.type(self.eps)
            return xp.where(small, xp.where(den < 0, -eps, eps), den)
        if self.eps:
            return den + self.eps
        return den

    def _chunk_sequences(self, x):
        """Sequences per feature-map call, or None for one call per head (see :data:`FEATURE_CHUNK_BYTES`).

        Only maps that act token by token (the fixed l1-renormalised maps) are chunked, over
        whole sequences; the chunked features are bit-for-bit the unchunked ones up to the
        GEMM's blocking (each token's row is computed alone).
        """
        fm = self.feature_map
        if self.learned or not getattr(fm, "l1_normalised", False) or getattr(fm, "stabilise", "none") != "none":
            return None
        b, l = x.shape[1], x.shape[2]
        per_seq = max(1, l * self.n_features * x.dtype.itemsize)
        c = max(1, FEATURE_CHUNK_BYTES // per_seq)
        return None if c >= b else c

    def _features(self, x, omega, params=None):
        """phi over heads: x (H, B, L, d_k), omega (S, m, d_k) -> phi (H, B, L, D), caches.

        ``caches[i]`` is the map's cache of head i, or, when the batch is evaluated in chunks of
        whole sequences (:meth:`_chunk_sequences`), a list of ``(b0, b1, cache)``.
        """
        xp = namespace(x, omega)
        if self.learned and self.n_sets == 1:
            phi, c = self.feature_map.forward(x, omega[0], self._theta(params, 0))
            return phi, [c]
        chunk = self._chunk_sequences(x)
        phi, caches = None, []
        for i in range(x.shape[0]):
            if chunk is not None:
                parts = []
                for b0 in range(0, x.shape[1], chunk):
                    b1 = min(b0 + chunk, x.shape[1])
                    p_i, c = self.feature_map.forward(x[i, b0:b1], omega[i])
                    if phi is None:
                        phi = xp.empty((x.shape[0], x.shape[1], *p_i.shape[1:]), dtype=x.dtype)
                    phi[i, b0:b1] = p_i
                    del p_i
                    parts.append((b0, b1, c))
                caches.append(parts)
                continue
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
            if isinstance(c, list):                  # chunks of whole sequences (fixed maps only)
                for j, (b0, b1, cj) in enumerate(c):
                    dxj, domj = self.feature_map.backward(dphi[i, b0:b1], cj)
                    if dx is None:
                        dx = xp.empty(dphi.shape[:3] + (dxj.shape[-1],), dtype=dxj.dtype)
                    dx[i, b0:b1] = dxj
                    if j == 0:
                        domega[i] = domj
                    else:
                        domega[i] += domj
                continue
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
        xp, q, k, v, phi_q, cq, phi_k, ck, keym, phi_km = self._kernel_inputs(params, x, mask, masked=self.causal)
        cdw = None
        v1m = None
        if self.causal:
            a, ccausal = causal_linear_attention(phi_q, phi_km, v, eps=self.eps, chunk=self.chunk)
            g = z = den = None
        else:
            ccausal = None
            gz, v1m, num, den = self._key_sums(xp, phi_q, phi_k, v, keym)
            if self.signed:                       # clamped rows logged as device scalars: no host sync
                self.last_clamped = (xp.abs(den) <= self.eps).mean()
                self.last_negative = (den < 0).mean()
            den = self._normaliser(xp, den)       # sign(den) max(|den|, eps), or den + eps
            a = num / den[..., None]
        if self.dwc is not None:
            conv, cdw = depthwise_conv(v * keym, params["dwc_w"], params["dwc_b"], grid=self.dwc["grid"],
                                       causal=self.causal)
            a_out = a + conv
        else:
            a_out = a
        am = _merge_heads(a_out)
        y = _linear_fwd(am, params["w_o"], params["b_o"])
        if ccausal is not None:
            gz = None
        phi_cached = phi_km if self.causal else phi_k      # causal: the array ccausal holds already
        return y, (x, keym, v, phi_q, phi_cached, cq, ck, gz, v1m, den, a, am, params, ccausal, cdw)

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
        x, keym, v, phi_q, phi_k, cq, ck, gz, v1m, den, a, am, params, ccausal, cdw = cache
        xp = namespace(dy)
        grads = {}
        dam, grads["w_o"], grads["b_o"] = _linear_bwd(dy, am, params["w_o"])
        da = _split_heads(dam, self.n_heads)                          # (H, B, L, d_k)
        if ccausal is not None:
            dphi_q, dphi_k, dv = causal_linear_attention_backward(da, ccausal)
            dphi_k *= keym
        else:
            # The forward's augmented GEMMs backwards: with dnd = [dnum | dden] (H, B, L, d_k + 1),
            # dphi_q = dnd [g | z]^T, [dg | dz] = phi_q^T dnd, dphi_k = m [v | 1] [dg | dz]^T (padded
            # keys' rows exactly zero) and dv = m phi_k dg.
            # dnd, dphi_q, dphi_k die with this call: reused work buffers (self._scratch)
            dk = da.shape[-1]
            dnd = self._scratch_buffer(xp, "dnd", da.shape[:3] + (dk + 1,), da.dtype)
            xp.divide(da, den[..., None], out=dnd[..., :dk])             # dnum
            dden = -(da * a).sum(axis=-1) / den                           # (H, B, L)
            if self.signed:
                dden = dden * (xp.abs(den) > self.eps)                    # clamped rows: constant
            dnd[..., dk] = dden
            shape_m = phi_q.shape[:3] + (gz.shape[2],)
            dphi_q = xp.matmul(dnd, gz.transpose(0, 1, 3, 2),             # (H, B, L, m)
                               out=self._scratch_buffer(xp, "dphi_q", shape_m, phi_q.dtype))
            dgz = xp.matmul(phi_q.transpose(0, 1, 3, 2), dnd)             # (H, B, m, d_k + 1)
            dphi_k = xp.matmul(v1m, dgz.transpose(0, 1, 3, 2),            # (H, B, L, m)
                               out=self._scratch_buffer(xp, "dphi_k", shape_m, phi_q.dtype))
            dv = xp.matmul(phi_k, dgz[..., :dk])                          # (H, B, L, d_k)
            dv = xp.where(keym > 0, dv, 0.0)                              # padded rows exactly 0
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
