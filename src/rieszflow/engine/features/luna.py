"""LUNA's learnable feature map (paper 001, eq. (11)): projections, a scalar MLP and an envelope.

References
----------
paper 001 (LUNA), eqs. (9)-(11) and its spec, sections 1.6-1.9.
"""
from __future__ import annotations

import math

import numpy as np

from rieszflow.engine._checks import check_int, check_real, is_host
from rieszflow.engine.backend import namespace, to_numpy
from rieszflow.engine.features.base import FeatureMap, _check_theta, _sigmoid, _softplus

__all__ = ["LunaFeatureMap"]


class LunaFeatureMap(FeatureMap):
    """LUNA's learnable feature map (paper 001, eq. (11)) with hand-written backward.

    For a token row ``x`` in R^d and the projection rows ``omega = W`` (M, d),

    ``u_i = (w_i . x) / tau + b_i`` (i = 1..M),
    ``phi(x) = h(x) / sqrt(M) * vec[psi_l(u_i)]`` in R^{M L}, flattened M-major
    (index ``i * L + l``),

    with the scalar MLP ``psi : R -> R^L``, ``psi(u) = rho(A2^T relu(a1 u + c1) + c2)``
    (``rho = relu`` when ``nonneg``, identity otherwise). The projection rows are
    the particles of this package (``omega``: :meth:`init_omega` draws
    N(0, omega_scale^2 / d I), i.e. W ~ N(0, 1/d) with the default
    ``omega_scale = 1``); every other learned array is in the dict ``theta``
    (:meth:`init_theta`): ``b`` (M,) (initialised 0), ``a1, c1, a2, c2`` (the
    MLP, PyTorch ``nn.Linear`` uniform(+-1/sqrt(fan_in)) initialisation) and,
    with ``envelope="gate"``, ``a_h`` (L, d), ``c_h`` (L,) (initialised 0, so
    ``h = 1/2``).

    Parameters
    ----------
    d : int
        Input dimension (head width d_k), ``>= 1``.
    m : int
        Number of projections M (rows of ``omega``), ``>= 1``. The feature
        dimension is ``n_features = m * channels``.
    tau : float, default 1.0
        Temperature of the projection, ``> 0`` (1 is the paper's map).
    floor : float, default 1e-6
        Validated, not used.
    rng : numpy.random.Generator or None
        Not needed at construction (no fixed constants).
    **fixed
        ``omega_scale``, ``check_finite``, ``init`` (see :class:`FeatureMap`) and:

        channels : int, default 8
            L, the outputs of psi (paper: 8).
        hidden : int, default 64
            Hidden width of the scalar MLP (paper's listing: 64).
        shared_channels : bool, default False
            One MLP with L outputs (Fig. 1; ``a1, c1`` (hidden,), ``a2`` (hidden, L),
            ``c2`` (L,)) or L independent single-output MLPs (the listing's default;
            ``a1, c1, a2`` (L, hidden), ``c2`` (L,)).
        nonneg : bool, default True
            Final ReLU, which makes phi >= 0 (needed for row-stochastic attention).
        envelope : {"none", "gate"}, default "none"
            ``h = 1`` (the paper's default, Table 5 "No gate") or the token-wise
            channel gate ``h(x) = sigmoid(A_h x + c_h)`` in (0, 1)^L multiplying channel l.
        ch_rms : {"off", "live", "frozen"}, default "off"
            The listing's channel normalisation ``y_l <- s_l y_l``,
            ``s_l = min(target / (rms_l + 1e-6), 1)``, ``rms_l`` the root mean square of
            channel l over *every* leading axis of ``x`` and over i. "live" uses the
            statistic of the current call (gradient passed through it): the feature
            of a token then depends on the other tokens of the call, which breaks
            causality and batch independence (paper 001 spec, section 1.5).
            "frozen" multiplies by the fixed ``ch_rms_scale``.
        ch_rms_target : float, default 0.1
            The ``target`` of ``s_l`` above.
        ch_rms_scale : array_like (L,), optional
            The fixed scales of ``ch_rms="frozen"`` (e.g. from :meth:`ch_rms_scales`),
            each in (0, 1].
        psi_kind : {"mlp", "bank"}, default "mlp"
            The learned scalar MLP (LUNA), or Table 5's Bank+Coef: a fixed basis
            :attr:`BANK` of 8 non-negative functions weighted by learned ``softplus(gamma_l)``
            (needs ``channels = 8``; ``theta`` is then ``b``, ``gamma`` (8,)).
        psi_impl : {"pwl", "dense"}, default "pwl"
            Evaluate psi exactly as a piecewise-linear function (``searchsorted`` over the
            sorted breakpoints ``-c1_j / a1_j`` and per-segment slope/intercept tables),
            or densely through the hidden layer (the reference). Both give the same
            values and gradients up to rounding; "pwl" is several times faster on the
            CPU. On device (CuPy) arrays "dense" is always used: sizing the pwl tables
            would synchronise with the host at every call.
        shared_heads : bool, default True
            One map per attention layer shared by its heads (the listing); False gives
            one map per head (the paper's post-hoc conversions).

    Attributes
    ----------
    n_features : int
        ``m * channels``.
    theta_names : tuple of str
        Keys of the learned-parameter dict.

    Raises
    ------
    ValueError, TypeError
        As :class:`FeatureMap`, and on a bad LUNA option.

    References
    ----------
    Shahbazi et al. (2025), "LUNA: Linear Universal Neural Attention with Generalization
    Guarantees" (paper 001), eq. (11), section 4, Listing 1, Table 5.
    """

    name = "luna"
    positive = True
    learned = True
    default_eps = 1e-6
    options = FeatureMap.options + ("channels", "hidden", "shared_channels", "nonneg", "envelope",
                                    "ch_rms", "ch_rms_target", "ch_rms_scale", "psi_impl",
                                    "shared_heads", "psi_kind")
    _ENVELOPES = ("none", "gate")
    _CH_RMS = ("off", "live", "frozen")
    _PSI = ("pwl", "dense")

    def _init_fixed(self, rng, fixed):
        self.channels = check_int("channels", fixed.pop("channels", 8), minimum=1)
        self.hidden = check_int("hidden", fixed.pop("hidden", 64), minimum=1)
        for nm, default in (("shared_channels", False), ("nonneg", True), ("shared_heads", True)):
            v = fixed.pop(nm, default)
            if not isinstance(v, (bool, np.bool_)):
                raise TypeError(f"luna: {nm} must be a bool; got {v!r}")
            setattr(self, nm, bool(v))
        self.positive = self.nonneg
        self.envelope = fixed.pop("envelope", "none")
        if self.envelope not in self._ENVELOPES:
            raise ValueError(f"luna: envelope={self.envelope!r} is not allowed; allowed: "
                             f"{', '.join(self._ENVELOPES)}")
        self.ch_rms = fixed.pop("ch_rms", "off")
        if self.ch_rms not in self._CH_RMS:
            raise ValueError(f"luna: ch_rms={self.ch_rms!r} is not allowed; allowed: {', '.join(self._CH_RMS)}")
        self.ch_rms_target = check_real("ch_rms_target", fixed.pop("ch_rms_target", 0.1), positive=True)
        scale = fixed.pop("ch_rms_scale", None)
        if self.ch_rms == "frozen":
            if scale is None:
                raise ValueError("luna: ch_rms='frozen' needs ch_rms_scale (array of shape (channels,)), "
                                 "e.g. from LunaFeatureMap.ch_rms_scales on a calibration batch")
            scale = np.array(to_numpy(scale), dtype=np.float64, copy=True)
            if scale.shape != (self.channels,) or not np.all((scale > 0) & (scale <= 1)):
                raise ValueError(f"luna: ch_rms_scale must have shape ({self.channels},) with entries in "
                                 f"(0, 1]; got {scale!r}")
        elif scale is not None:
            raise ValueError(f"luna: ch_rms_scale applies only to ch_rms='frozen' (ch_rms is {self.ch_rms!r})")
        self.ch_rms_scale = scale
        self.psi_impl = fixed.pop("psi_impl", "pwl")
        if self.psi_impl not in self._PSI:
            raise ValueError(f"luna: psi_impl={self.psi_impl!r} is not allowed; allowed: {', '.join(self._PSI)}")
        self.psi_kind = fixed.pop("psi_kind", "mlp")
        if self.psi_kind not in ("mlp", "bank"):
            raise ValueError(f"luna: psi_kind={self.psi_kind!r} is not allowed; allowed: mlp, bank")
        if self.psi_kind == "bank" and self.channels != len(self.BANK):
            raise ValueError(f"luna: psi_kind='bank' has {len(self.BANK)} basis functions, so channels must be "
                             f"{len(self.BANK)}; got channels={self.channels}")

    # -- shapes ------------------------------------------------------------------------
    @property
    def n_features(self):
        """Feature dimension D = M L."""
        return self.m * self.channels

    @classmethod
    def features_per_row(cls, **options):
        """Features per row of ``omega``: the channel count L (``n_features = m L``).

        Parameters
        ----------
        **options
            ``channels`` (int, default 8) is read; the other options are ignored.

        Returns
        -------
        int
            ``channels``.

        Raises
        ------
        TypeError, ValueError
            If ``channels`` is not an int ``>= 1``.
        """
        return check_int("channels", options.get("channels", 8), minimum=1)

    #: The fixed non-negative basis of ``psi_kind="bank"`` (Table 5's Bank+Coef; the paper names
    #: none, this is the spec's proposal, section 2.4).
    BANK = ("relu(u)", "relu(-u)", "elu(u)+1", "elu(-u)+1", "softplus(u)", "sigmoid(u)", "u^2", "exp(-u^2/2)")

    @property
    def theta_names(self):
        """Keys of the learned-parameter dict ``theta``."""
        if self.psi_kind == "bank":
            return ("b", "gamma") + (("a_h", "c_h") if self.envelope == "gate" else ())
        base = ("b", "a1", "c1", "a2", "c2")
        return base + (("a_h", "c_h") if self.envelope == "gate" else ())

    def theta_shapes(self):
        """Shapes of the learned parameters.

        Returns
        -------
        dict
            ``name -> shape`` for every key of :attr:`theta_names`.
        """
        L, Hd = self.channels, self.hidden
        if self.psi_kind == "bank":
            s = {"gamma": (L,)}
        elif self.shared_channels:
            s = {"a1": (Hd,), "c1": (Hd,), "a2": (Hd, L), "c2": (L,)}
        else:
            s = {"a1": (L, Hd), "c1": (L, Hd), "a2": (L, Hd), "c2": (L,)}
        s = {"b": (self.m,), **s}
        if self.envelope == "gate":
            s.update(a_h=(L, self.d), c_h=(L,))
        return s

    def init_theta(self, rng, dtype=np.float64):
        """Draw the learned parameters other than the projections.

        ``b = 0``; the MLP's first layer ``a1, c1 ~ U(-1, 1)`` (fan-in 1) and its second
        ``a2, c2 ~ U(-1/sqrt(hidden), 1/sqrt(hidden))`` (PyTorch ``nn.Linear`` defaults,
        which the paper's listing relies on); the gate ``a_h = 0, c_h = 0``.

        Parameters
        ----------
        rng : numpy.random.Generator
        dtype : {float64, float32}, default float64

        Returns
        -------
        dict
            ``name -> numpy.ndarray`` with the shapes of :meth:`theta_shapes`.

        Raises
        ------
        TypeError, ValueError
            On a bad ``rng`` or ``dtype``.

        References
        ----------
        paper 001, Listing 1 (``nn.Linear`` MLP, ``W ~ N(0, 1/d)``, ``b = 0``).
        """
        rng, dtype = self._check_init_args(rng, dtype)
        s = self.theta_shapes()
        if self.psi_kind == "bank":                  # softplus(gamma) = 1 for every basis function
            th = {"b": np.zeros(s["b"]), "gamma": np.full(s["gamma"], math.log(math.e - 1.0))}
            if self.envelope == "gate":
                th.update(a_h=np.zeros(s["a_h"]), c_h=np.zeros(s["c_h"]))
            return {k: v.astype(dtype) for k, v in th.items()}
        r2 = 1.0 / math.sqrt(self.hidden)
        th = {"b": np.zeros(s["b"]),
              "a1": rng.uniform(-1.0, 1.0, s["a1"]), "c1": rng.uniform(-1.0, 1.0, s["c1"]),
              "a2": rng.uniform(-r2, r2, s["a2"]), "c2": rng.uniform(-r2, r2, s["c2"])}
        if self.envelope == "gate":
            th.update(a_h=np.zeros(s["a_h"]), c_h=np.zeros(s["c_h"]))
        return {k: v.astype(dtype) for k, v in th.items()}

    # -- the scalar MLP ----------------------------------------------------------------
    def _big(self, xp, theta):
        """The MLP as one net of hidden width H' (per-channel: block-diagonal second layer)."""
        if self.shared_channels:
            return theta["a1"], theta["c1"], theta["a2"], theta["c2"]
        L, Hd = self.channels, self.hidden
        a2 = theta["a2"]
        A2 = xp.zeros((L * Hd, L), dtype=a2.dtype)
        for l in range(L):
            A2[l * Hd:(l + 1) * Hd, l] = a2[l]
        return theta["a1"].reshape(-1), theta["c1"].reshape(-1), A2, theta["c2"]

    def _unbig(self, da1, dc1, dA2, dc2):
        if self.shared_channels:
            return {"a1": da1, "c1": dc1, "a2": dA2, "c2": dc2}
        L, Hd = self.channels, self.hidden
        da2 = dA2.reshape(L, Hd, L)[range(L), :, range(L)]
        return {"a1": da1.reshape(L, Hd), "c1": dc1.reshape(L, Hd), "a2": da2, "c2": dc2}

    @staticmethod
    def _pwl_tables(xp, a1, c1, A2, c2):
        """Sorted breakpoints, the segments x hidden active mask and slope/intercept tables.

        Segment k holds the u with exactly k breakpoints strictly below (``searchsorted``
        side "left"); unit j is active there iff ``a1_j > 0`` and its breakpoint rank is
        ``< k``, or ``a1_j < 0`` and its rank is ``>= k``, or ``a1_j = 0`` and ``c1_j > 0``.
        """
        nz = a1 != 0
        idx = xp.nonzero(nz)[0]
        beta = -c1[idx] / a1[idx]
        order = xp.argsort(beta)
        beta_sorted = beta[order]
        K = int(idx.shape[0])
        rank = xp.empty(K, dtype=xp.int64)
        rank[order] = xp.arange(K)
        ks = xp.arange(K + 1)[:, None]
        act = xp.zeros((K + 1, a1.shape[0]), dtype=A2.dtype)
        pos = a1[idx] > 0
        act[:, idx] = xp.where(pos[None, :], ks > rank[None, :], ks <= rank[None, :])
        const = (~nz) & (c1 > 0)
        act[:, const] = 1.0
        slope = xp.matmul(act * a1[None, :], A2)                  # (K+1, L)
        icpt = xp.matmul(act * c1[None, :], A2) + c2              # (K+1, L)
        return beta_sorted, act, slope, icpt

    def psi(self, u, theta, impl=None):
        """The channel functions psi(u) (after the output activation).

        Parameters
        ----------
        u : ndarray, shape (...,), float
            Scalar pre-activations.
        theta : dict
            Learned parameters (:meth:`init_theta`).
        impl : {"pwl", "dense"} or None
            None: the map's ``psi_impl``.

        Returns
        -------
        ndarray, shape (..., channels)

        Raises
        ------
        ValueError
            On a bad ``impl`` or ``theta``.

        References
        ----------
        paper 001, eq. (11) and Fig. 3 (learned psi curves).
        """
        xp = namespace(u)
        _check_theta(self.name, theta, self.theta_shapes())
        y, _ = self._psi_forward(xp, xp.asarray(u).reshape(-1), theta, impl or self.psi_impl)
        return y.reshape(tuple(u.shape) + (self.channels,))

    @staticmethod
    def _bank(xp, u):
        """The basis functions of :attr:`BANK` and their derivatives at flat ``u``: (T, 8) each."""
        pos, neg = xp.maximum(u, 0.0), xp.maximum(-u, 0.0)
        em, ep = xp.exp(xp.minimum(u, 0.0)), xp.exp(xp.minimum(-u, 0.0))
        sig = _sigmoid(xp, u)
        g = xp.exp(-0.5 * u * u)
        f = xp.stack([pos, neg, xp.where(u > 0, 1.0 + u, em), xp.where(u < 0, 1.0 - u, ep),
                      _softplus(xp, u), sig, u * u, g], axis=1)
        df = xp.stack([(u > 0).astype(u.dtype), -(u < 0).astype(u.dtype), xp.where(u > 0, 1.0, em),
                       xp.where(u < 0, -1.0, -ep), sig, sig * (1.0 - sig), 2.0 * u, -u * g], axis=1)
        return f, df

    def _psi_forward(self, xp, u, theta, impl):
        """psi on flat ``u`` (T,) -> (Y (T, L), cache)."""
        if self.psi_kind == "bank":
            f, df = self._bank(xp, u)
            coef = _softplus(xp, theta["gamma"])
            return f * coef, {"impl": "bank", "u": u, "f": f, "df": df, "coef": coef, "gamma": theta["gamma"]}
        if impl not in self._PSI:
            raise ValueError(f"luna: impl={impl!r} is not allowed; allowed: {', '.join(self._PSI)}")
        if impl == "pwl" and not is_host(u):
            # the pwl tables have a data-dependent number of breakpoints (a host sync to size
            # them); on a device the dense form of the same function is used instead
            impl = "dense"
        a1, c1, A2, c2 = self._big(xp, theta)
        if impl == "dense":
            z = u[:, None] * a1[None, :] + c1[None, :]
            hh = xp.maximum(z, 0.0)
            ypre = xp.matmul(hh, A2) + c2
            cache = {"impl": impl, "z": z, "hh": hh}
        else:
            beta, act, slope, icpt = self._pwl_tables(xp, a1, c1, A2, c2)
            seg = xp.searchsorted(beta, u, side="left")
            ypre = slope[seg] * u[:, None] + icpt[seg]
            cache = {"impl": impl, "seg": seg, "act": act, "slope": slope}
        cache.update(u=u, ypre=ypre, big=(a1, c1, A2, c2))
        y = xp.maximum(ypre, 0.0) if self.nonneg else ypre
        return y, cache

    def _psi_backward(self, xp, gy, cache):
        """From dL/dY (T, L): (du (T,), dtheta of the MLP)."""
        if cache["impl"] == "bank":
            du = (gy * cache["df"] * cache["coef"]).sum(axis=1)
            dgamma = (gy * cache["f"]).sum(axis=0) * _sigmoid(xp, cache["gamma"])
            return du, {"gamma": dgamma}
        a1, c1, A2, c2 = cache["big"]
        u = cache["u"]
        if self.nonneg:
            gy = gy * (cache["ypre"] > 0)
        dc2 = gy.sum(axis=0)
        if cache["impl"] == "dense":
            z, hh = cache["z"], cache["hh"]
            dA2 = xp.matmul(hh.T, gy)
            dz = xp.matmul(gy, A2.T) * (z > 0)
            da1 = xp.matmul(u, dz)
            dc1 = dz.sum(axis=0)
            du = xp.matmul(dz, a1)
        else:
            seg, act, slope = cache["seg"], cache["act"], cache["slope"]
            nseg = act.shape[0]
            L = gy.shape[1]
            P = xp.empty((nseg, L), dtype=gy.dtype)
            Q = xp.empty((nseg, L), dtype=gy.dtype)
            for l in range(L):
                P[:, l] = xp.bincount(seg, weights=u * gy[:, l], minlength=nseg)
                Q[:, l] = xp.bincount(seg, weights=gy[:, l], minlength=nseg)
            MP = xp.matmul(act.T, P)                              # (H', L)
            MQ = xp.matmul(act.T, Q)
            dA2 = a1[:, None] * MP + c1[:, None] * MQ
            da1 = (A2 * MP).sum(axis=1)
            dc1 = (A2 * MQ).sum(axis=1)
            du = (gy * slope[seg]).sum(axis=1)
        if not self.shared_channels:                              # block-diagonal mask on A2
            L, Hd = self.channels, self.hidden
            mask = xp.zeros_like(A2)
            for l in range(L):
                mask[l * Hd:(l + 1) * Hd, l] = 1.0
            dA2 = dA2 * mask
        return du, self._unbig(da1, dc1, dA2, dc2)

    # -- ch_rms ------------------------------------------------------------------------
    def ch_rms_scales(self, y):
        """The listing's channel scales ``s_l = min(target / (rms_l + 1e-6), 1)``.

        Parameters
        ----------
        y : ndarray, shape (..., channels)
            psi outputs (every leading axis is averaged over).

        Returns
        -------
        ndarray, shape (channels,)
            Entries in (0, 1] (the normalisation can only shrink).

        References
        ----------
        paper 001, Listing 1 (``ch_rms``, target 0.1).
        """
        xp = namespace(y)
        L = y.shape[-1]
        rms = xp.sqrt(xp.mean((y * y).reshape(-1, L), axis=0) + 1e-6)
        return xp.minimum(self.ch_rms_target / (rms + 1e-6), 1.0)

    # -- the map -----------------------------------------------------------------------
    def forward(self, x, omega, theta):
        """Features of ``x`` and the cache for :meth:`backward`.

        Parameters
        ----------
        x : ndarray, shape (..., d), float32 or float64
            Token rows (query or key rows of one or several heads).
        omega : ndarray, shape (m, d)
            Projection rows ``w_i`` (the particles).
        theta : dict
            The other learned parameters, shapes :meth:`theta_shapes`.

        Returns
        -------
        phi : ndarray, shape (..., m * channels)
        cache : dict

        Raises
        ------
        TypeError, ValueError
            As :meth:`FeatureMap.forward`, or on a bad ``theta``.

        References
        ----------
        paper 001, eq. (11).
        """
        xp, x, omega = self._validate(x, omega)
        _check_theta(self.name, theta, self.theta_shapes())
        M, L = self.m, self.channels
        lead = x.shape[:-1]
        u = xp.matmul(x, omega.T) / self.tau + theta["b"]             # (..., M)
        y, pc = self._psi_forward(xp, u.reshape(-1), theta, self.psi_impl)
        y = y.reshape(lead + (M, L))
        s = None
        if self.ch_rms == "live":
            s = self.ch_rms_scales(y)
        elif self.ch_rms == "frozen":
            s = xp.asarray(self.ch_rms_scale, dtype=y.dtype)
        ys = y if s is None else y * s
        h = None
        if self.envelope == "gate":
            h = _sigmoid(xp, xp.matmul(x, theta["a_h"].T) + theta["c_h"])   # (..., L)
            phi = ys * h[..., None, :]
        else:
            phi = ys
        phi = phi.reshape(lead + (M * L,)) / math.sqrt(M)
        cache = {"xp": xp, "phi_shape": phi.shape, "x": x, "omega": omega, "theta": theta,
                 "y": y, "s": s, "h": h, "psi": pc}
        return phi, cache

    def __call__(self, x, omega, theta):
        """Features of ``x``: :meth:`forward` without the cache.

        Parameters
        ----------
        x : ndarray, shape (..., d)
        omega : ndarray, shape (m, d)
        theta : dict

        Returns
        -------
        phi : ndarray, shape (..., m * channels)
        """
        return self.forward(x, omega, theta)[0]

    def backward(self, dphi, cache):
        """Vector-Jacobian products of :meth:`forward` for the input and every parameter.

        Parameters
        ----------
        dphi : ndarray, shape (..., m * channels)
        cache : dict from :meth:`forward`

        Returns
        -------
        dx : ndarray, shape (..., d)
        domega : ndarray, shape (m, d)
        dtheta : dict
            Gradients with the keys and shapes of ``theta`` (summed over leading axes).

        Raises
        ------
        ValueError
            If ``dphi`` does not have the shape of ``phi``.

        References
        ----------
        paper 001 spec, section 1.9 (manual gradients of the feature map).
        """
        xp = cache["xp"]
        dphi = xp.asarray(dphi)
        if dphi.shape != cache["phi_shape"]:
            raise ValueError(f"luna: dphi must have the shape of phi {cache['phi_shape']}; got {dphi.shape}")
        M, L = self.m, self.channels
        x, omega, theta, y, s, h = (cache[k] for k in ("x", "omega", "theta", "y", "s", "h"))
        lead = x.shape[:-1]
        g = dphi.reshape(lead + (M, L)) / math.sqrt(M)
        dtheta = {}
        dx = None
        ys = y if s is None else y * s
        if h is not None:
            dh = (g * ys).sum(axis=-2)                                    # (..., L)
            dzh = dh * h * (1.0 - h)
            dtheta["a_h"] = xp.matmul(dzh.reshape(-1, L).T, x.reshape(-1, self.d))
            dtheta["c_h"] = dzh.reshape(-1, L).sum(axis=0)
            dx = xp.matmul(dzh, theta["a_h"])
            g = g * h[..., None, :]
        if s is None:
            gy = g
        elif self.ch_rms == "frozen":
            gy = g * s
        else:                                                             # live: through rms
            gy = g * s
            n = y.size // L
            ms = xp.mean((y * y).reshape(-1, L), axis=0)
            rms = xp.sqrt(ms + 1e-6)
            unclipped = self.ch_rms_target / (rms + 1e-6) < 1.0
            ds = (g * y).reshape(-1, L).sum(axis=0)
            drms = ds * xp.where(unclipped, -self.ch_rms_target / (rms + 1e-6) ** 2, 0.0)
            gy = gy + (drms / (n * rms)) * y
        du, dmlp = self._psi_backward(xp, gy.reshape(-1, L), cache["psi"])
        dtheta.update(dmlp)
        du = du.reshape(lead + (M,))
        dtheta["b"] = du.reshape(-1, M).sum(axis=0)
        dz = du / self.tau
        dxw, domega = self._project_back(xp, dz, x, omega)
        dx = dxw if dx is None else dx + dxw
        return dx, domega, {k: dtheta[k] for k in self.theta_names}

    def _forward(self, xp, x, omega):                                     # pragma: no cover
        raise TypeError("luna: call forward(x, omega, theta); the map has learned parameters theta")

    def _backward(self, xp, dphi, cache):                                 # pragma: no cover
        raise TypeError("luna: call backward(dphi, cache) on a cache of forward(x, omega, theta)")
