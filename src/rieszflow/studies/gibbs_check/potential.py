"""One head's one-body alignment potential: the first variation of Phase A's alignment energy.

Phase A (``rieszflow run``) moves the particles of every head on
``H = E(Omega) + lam sum_heads W_{m,s}``, with ``E`` the alignment energy (minus eq. (C.4),
or minus centred KTA) of the pooled representations of a mini-batch. Fix the network (the
weights Phase A saw, every other head's particles) and the sentences; then ``E`` depends on
one head's particles only through the attention kernel of that head,

    kappa_mu(t, s) = int g_w(x_t) g_w(x_s) dmu(w) / (int g_w(x_t) dmu(w) int g_w(x_s) dmu(w)),

with ``mu = (1/m) sum_k delta_{omega_k}`` the head's empirical measure, ``g_w(x) =
g(w . x / tau)`` the map's unnormalised feature and ``x_t`` the representation that feeds
the head (``q = k = x``). This is exactly ``phi(x_t) . phi(x_s)`` of the l1-renormalised
maps (``phi_k = sqrt(m) g_k / sum_j g_j``). The one-body potential is the first variation
(Gateaux derivative) of ``E`` in ``mu`` at the reference measure ``mu_ref`` (the learned
particles)::

    V(w) = d/de E(mu_ref + e delta_w) |_{e=0}
         = sum_{t,s} dE/dkappa(t,s) [h_t(w) h_s(w) - kappa(t,s) (h_t(w) + h_s(w))],
    h_t(w) = g_w(x_t) / A_t,   A_t = int g_w(x_t) dmu_ref(w),

so that ``E(mu) = E(mu_ref) + int V d(mu - mu_ref) + O(|mu - mu_ref|^2)``. The attention
output is invariant to rescaling ``mu`` (``kappa`` scales, the normalised output does
not), so ``int V dmu_ref = 0`` and ``grad V(omega_k) = m grad_{omega_k} E``: the drift of
Phase A at the reference particles, exactly. Dropped: every term of second and higher
order in ``mu - mu_ref``, i.e. the self-consistent change of the normalisers ``A_t`` and of
the attention denominators, of everything downstream of the head (residual, LayerNorm,
FFN, later layers, pooling) and the quadratic dependence of (C.4)/KTA on the pooled
vectors. :meth:`HeadPotential.energy` evaluates the full ``E`` so the size of what is
dropped can be measured.

References
----------
paper 000, eq. (2.2), (2.3), (3.2), (4.3), (C.2)-(C.4),
App. D (l1-renormalised features), App. F.2; Cristianini et al., NIPS 14 (2002)
(kernel-target alignment).
"""
from __future__ import annotations

import numpy as np

from rieszflow.engine.backend import to_numpy
from rieszflow.engine.features import FEATURE_MAPS

__all__ = ["SUPPORTED_FEATURE_MAPS", "HeadPotential", "attention_output_gradient"]

#: Feature maps whose kernel is the ratio form above: l1-renormalised, no per-particle constants.
SUPPORTED_FEATURE_MAPS = tuple(n for n, c in FEATURE_MAPS.items()
                               if c.l1_normalised and not c.has_bias)


def attention_output_gradient(model, dpooled, layer: int):
    """Gradient of ``<dpooled, pooled>`` with respect to one layer's per-head attention output.

    Uses the cache of the last ``model.pooled`` call (dropout off) and the layers' own
    backward passes (``model.backward_to_attention``), down to the normalised attention
    output ``a`` of ``layer`` (before the output projection ``W_O``, ``attn.output_backward``).

    Parameters
    ----------
    model : engine.attention.model.TransformerClassifier
        After ``model.pooled(ids, mask, train=False)``.
    dpooled : array, shape (B, d_model)
        Upstream gradient of the pooled representations.
    layer : int
        Encoder layer index, ``0 <= layer < n_layers``.

    Returns
    -------
    da : array, shape (H, B, L, d_k)
        ``d<dpooled, pooled> / da`` for every head of ``layer``.

    Raises
    ------
    RuntimeError
        If no forward pass is cached.
    ValueError
        If ``layer`` is out of range.
    """
    n_layers = len(model.layers)
    if not 0 <= layer < n_layers:
        raise ValueError(f"layer={layer} is out of range; the model has {n_layers} layer(s)")
    dy = model.backward_to_attention(dpooled, layer)
    return model.layers[layer].attn.output_backward(model.attention_params(layer), dy)


class HeadPotential:
    """The one-body potential ``V`` of one head (module docstring), vectorised over points.

    ``E`` is the mean over ``batches`` of Phase A's per-batch alignment energy (the
    mini-batch estimate Phase A descends, averaged over a fixed set of sentences), with the
    network of ``model`` (dropout off) and every other head's particles as they are in it.

    Parameters
    ----------
    model : engine.attention.model.TransformerClassifier
        Float64 model with linear attention, ``qk="shared"`` and a map in
        :data:`SUPPORTED_FEATURE_MAPS`; its particles are the reference measure.
    batches : list of (ids, mask, labels)
        NumPy arrays of shapes (B, L), (B, L) bool, (B,) int: the fixed sentences.
    objective : callable
        ``objective(P, y) -> (value, dvalue/dP)``, an entry of
        ``learning.objectives.ALIGNMENTS`` (``E = -value``).
    layer, head : int
        Which head.
    compute_dtype : {"float64", "float32"}, default "float64"
        Precision of :meth:`__call__`'s matrix products (the set-up is float64 either way).
        float32 halves the cost; its relative error in ``V`` is ~1e-6, which shifts a
        Metropolis log-ratio ``beta dV`` by ~1e-4 at beta = 50 (a sampler then targets the
        float32 potential, a fixed function within that error of ``V``).

    Attributes
    ----------
    reference : numpy.ndarray, shape (m, d_k)
        The reference particles (the head's particles in ``model``).
    energy_ref : float
        ``E`` at the reference.
    tau : float
        The feature map's temperature.

    Raises
    ------
    ValueError
        If the model is not float64 linear attention with shared q = k, the map is not
        supported, ``layer``/``head`` is out of range, or ``batches`` is empty.
    """

    def __init__(self, model, batches, objective, layer: int, head: int,
                 compute_dtype: str = "float64"):
        cfg = model.config
        if cfg["attention"] != "linear" or cfg["qk"] != "shared":
            raise ValueError(f"HeadPotential needs linear attention with qk='shared', got "
                             f"attention={cfg['attention']!r}, qk={cfg['qk']!r}")
        if cfg["feature_map"] not in SUPPORTED_FEATURE_MAPS:
            raise ValueError(f"feature_map={cfg['feature_map']!r} is not supported; allowed: "
                             f"{', '.join(SUPPORTED_FEATURE_MAPS)} (l1-renormalised maps without "
                             f"per-particle constants)")
        if np.dtype(model.dtype) != np.float64:
            raise ValueError(f"HeadPotential needs a float64 model, got dtype {model.dtype}")
        if not 0 <= layer < cfg["n_layers"] or not 0 <= head < cfg["n_heads"]:
            raise ValueError(f"layer={layer}, head={head} out of range ({cfg['n_layers']} layers, "
                             f"{cfg['n_heads']} heads)")
        if not batches:
            raise ValueError("batches is empty; pass at least one (ids, mask, labels) batch")
        if compute_dtype not in ("float64", "float32"):
            raise ValueError(f"compute_dtype={compute_dtype!r} is not allowed; use 'float64' or "
                             f"'float32'")
        self.dtype = np.dtype(compute_dtype)
        self.model, self.objective, self.layer, self.head = model, objective, layer, head
        self.batches = batches
        self.fmap = model.feature_maps[layer]
        self.tau = float(self.fmap.tau)
        self.name = f"layers.{layer}.attn.omega"
        self.reference = np.array(to_numpy(model.params[self.name][head]), dtype=np.float64)
        nb = len(batches)
        seqs, group = [], 16
        energy = 0.0
        for ids, mask, labels in batches:
            pooled = model.pooled(ids, mask, train=False, rng=None)
            value, dvalue = objective(pooled, labels)
            energy += -float(value) / nb
            da = attention_output_gradient(model, -dvalue / nb, layer)
            x = model.last_attention_inputs()[layer]                     # (B, L, D)
            t = model.layers[layer].attn.kernel_terms(model.attention_params(layer), x, mask)
            q, v, phi_q, den, a = t["q"], t["v"], t["phi_q"], t["den"], t["a"]   # (H, B, L, .)
            h = head
            xq, phi, dah, ah, vh, denh = q[h], phi_q[h], da[h], a[h], v[h], den[h]
            km = mask.astype(x.dtype)                                    # (B, L)
            kappa = phi @ phi.transpose(0, 2, 1)                         # (B, L, L)
            # C(t, s) = dE/dkappa(t, s) = m_s da_t . (v_s - a_t) / den_t
            C = (dah @ vh.transpose(0, 2, 1) - np.sum(dah * ah, -1)[..., None]) * km[:, None, :]
            C = C / denh[..., None]
            Ck = C * kappa
            r = Ck.sum(2) + Ck.sum(1)                                    # (B, L)
            u = xq @ self.reference.T / self.tau                         # (B, L, m)
            A = self.fmap.activation(u)[0].mean(-1)                      # (B, L)
            P, Q = dah / denh[..., None], vh * km[..., None]
            p = np.sum(dah * ah, -1) / denh
            for i in range(xq.shape[0]):                                 # one entry per sentence
                n = int(km[i].sum())
                seqs.append([arr[i, :n] for arr in (xq, A, r, P, p, Q, km)])
        # V is a sum over sentences: regroup them by length (less padding, same value); padded
        # tokens get A = inf (h = 0) and zero coefficients
        seqs.sort(key=lambda q: q[0].shape[0])
        d = self.reference.shape[1]
        self._terms = []
        for start in range(0, len(seqs), group):
            chunk = seqs[start:start + group]
            width = chunk[-1][0].shape[0]
            pad = [np.zeros((len(chunk), width) + a.shape[1:]) for a in chunk[0]]
            pad[1][:] = np.inf
            for j, q in enumerate(chunk):
                for arr, val in zip(pad, q):
                    arr[j, :val.shape[0]] = val
            xq, A, r, P, p, Q, km = pad
            terms = dict(
                x=xq, xflat=xq.reshape(-1, d), A=A, r=r, p=p, qm=km,
                # right factors of h^T C h: [P, Q, p, m] (B, L, 2d + 2), and [P, Q] (B, L, 2d)
                right=np.concatenate([P, Q, p[..., None], km[..., None]], -1),
                left=np.concatenate([P, Q], -1))
            terms = {k: np.ascontiguousarray(v, dtype=self.dtype) for k, v in terms.items()}
            self._terms.append({**terms, "d": d})
        self.energy_ref = energy

    def __call__(self, omega):
        """``V`` and ``grad V`` at points ``omega``.

        Parameters
        ----------
        omega : array_like, shape (K, d_k)
            Points of ``R^{d_k}``.

        Returns
        -------
        values : numpy.ndarray, shape (K,), float64
        grads : numpy.ndarray, shape (K, d_k), float64
        """
        w = np.asarray(omega, dtype=np.float64)
        vals = np.zeros(w.shape[0])
        grads = np.zeros_like(w)
        wc = w.astype(self.dtype)
        for t in self._terms:
            d = t["d"]
            u = t["x"] @ wc.T / self.dtype.type(self.tau)                # (B, L, K)
            g, dg = self.fmap.activation(u)
            hmat = g / t["A"][..., None]                                 # h_t(w)
            prod = hmat.transpose(0, 2, 1) @ t["right"]                  # (B, K, 2d + 2)
            alpha, beta = prod[..., :d], prod[..., d:2 * d]
            gamma, delta = prod[..., 2 * d], prod[..., 2 * d + 1]        # (B, K)
            vals += (np.sum(alpha * beta, (0, 2)) - np.sum(gamma * delta, 0)
                     - (t["r"].reshape(1, -1) @ hmat.reshape(-1, hmat.shape[-1]))[0])
            # dV/dh_t = P_t . beta + alpha . Q_t - p_t delta - gamma m_t - r_t
            swapped = np.concatenate([beta, alpha], -1).transpose(0, 2, 1)   # (B, 2d, K)
            G = (t["left"] @ swapped - t["p"][..., None] * delta[:, None, :]
                 - t["qm"][..., None] * gamma[:, None, :] - t["r"][..., None])
            W = G * dg / (self.dtype.type(self.tau) * t["A"][..., None])  # (B, L, K)
            grads += W.reshape(-1, W.shape[-1]).T @ t["xflat"]
        return vals, grads

    def energy(self, omega) -> float:
        """The full (nonlinear) alignment energy ``E`` with this head's particles set to ``omega``.

        Parameters
        ----------
        omega : array_like, shape (m, d_k)
            Particles of the head (the other heads and weights stay as they are).

        Returns
        -------
        float
            Mean over the batches of the per-batch alignment energy (minus the objective).
        """
        params = self.model.params[self.name]
        old = params[self.head].copy()
        params[self.head] = np.asarray(omega, dtype=np.float64)
        try:
            total = 0.0
            for ids, mask, labels in self.batches:
                pooled = self.model.pooled(ids, mask, train=False, rng=None)
                total += -float(self.objective(pooled, labels)[0])
            return total / len(self.batches)
        finally:
            params[self.head] = old

    def phase_a_gradient(self) -> np.ndarray:
        """``grad_{omega_k} E`` at the reference particles, by the model's own backward pass.

        Returns
        -------
        numpy.ndarray, shape (m, d_k)
            Equals ``grad V(omega_k) / m`` (a check of the first variation).
        """
        total = np.zeros_like(self.reference)
        for ids, mask, labels in self.batches:
            pooled = self.model.pooled(ids, mask, train=False, rng=None)
            _, dvalue = self.objective(pooled, labels)
            g = self.model.backward_pooled(-dvalue, wrt=[self.name])[self.name]
            total += np.asarray(g[self.head]) / len(self.batches)
        return total
