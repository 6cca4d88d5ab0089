"""The fixed random-feature maps of paper 000: their only parameters are the particles omega.

FAVOR (positive exponential features), the l1-renormalised maps (elu, softplus,
porf_softplus, sigmoid2, cos2), softmaxfeat and the (signed) random Fourier
features rff and rff_pair (paper 001's sin/cos pair). Conventions: :mod:`rieszflow.engine.features.base`.

References
----------
paper 000, App. D ("Positive random-feature maps for linearized attention") and
Lemma 3, eqs. (B.5)-(B.6); Choromanski et al. (2020), "Rethinking attention with
Performers", arXiv:2009.14794; Katharopoulos et al. (2020), "Transformers are RNNs",
arXiv:2006.16236; Rahimi and Recht (2007), "Random features for large-scale kernel
machines".
"""
from __future__ import annotations

import abc
import math

import numpy as np

from rieszflow.engine import _fused
from rieszflow.engine._checks import check_real
from rieszflow.engine.backend import namespace
from rieszflow.engine.features.base import FeatureMap, _sigmoid, _softplus, _softplus_sigmoid

__all__ = [
    "FavorFeatureMap",
    "EluFeatureMap",
    "SoftplusFeatureMap",
    "PorfSoftplusFeatureMap",
    "Sigmoid2FeatureMap",
    "Cos2FeatureMap",
    "SoftmaxFeatFeatureMap",
    "RffFeatureMap",
    "RffPairFeatureMap",
]


# --------------------------------------------------------------------------- FAVOR
class FavorFeatureMap(FeatureMap):
    """Positive exponential random features (FAVOR), optionally max-stabilised.

    ``phi_k(x) = M^{-1/2} exp(omega_k . x~ - |x~|^2 / 2 - c)``, ``x~ = x / sqrt(tau)``,

    so that for ``omega_k ~ N(0, I_d)`` (``omega_scale = sqrt(d)``) and ``c = 0``,
    ``E[phi(q) . phi(k)] = exp(q . k / tau)`` (the softmax kernel; ``tau = sqrt(d)``
    is the Performer data normaliser ``d^{-1/4}`` on q and k). The kernel is
    ``K(q, k) = phi(q) . phi(k) = (1/M) sum_k ...`` (the 1/M is inside phi).
    With ``tau = 1`` and ``stabilise = "none"`` (defaults) this is exactly the
    paper's formula. ``floor`` is not used (no epsilon is added).

    Parameters
    ----------
    d : int
        Input dimension, ``d >= 1`` (see :class:`FeatureMap`).
    m : int
        Number of features M, ``m >= 1`` (see :class:`FeatureMap`).
    tau : float, default 1.0
        Temperature, ``tau > 0`` (see :class:`FeatureMap`).
    floor : float, default 1e-6
        Validated but not used by this map (see :class:`FeatureMap`).
    rng : numpy.random.Generator or None, default None
        See :class:`FeatureMap`.
    **fixed
        Map options by name: ``omega_scale`` and ``check_finite`` (see
        :class:`FeatureMap`), and ``stabilise`` below.
    stabilise : {"none", "row", "seq"}, default "none"
        Shift ``c`` subtracted from the exponent, treated as a constant in
        :meth:`backward` (as the reference code detaches it):

        * ``"none"``: ``c = 0`` (paper 000, App. D).
        * ``"row"``: ``c(x) = max_k (omega_k . x~) - |x~|^2 / 2``, one constant per
          token, so the largest feature of each token is exactly ``M^{-1/2}``. Use it
          for queries: it cancels in the per-query normaliser of attention.
        * ``"seq"``: the max of the exponent over features *and* the sequence axis
          (axis -2 of ``x``), one constant per leading index; use it for keys,
          where a per-position shift would not cancel (reference spec 0.3).

        The shift is returned as ``cache["c"]`` (shape (..., 1) or (..., 1, 1)).

    Notes
    -----
    Under- and overflow of the unstabilised map. The exponent satisfies
    ``omega . x~ - |x~|^2/2 <= |omega|^2 / 2``, so overflow needs a large particle
    (``|omega| > 37.7`` in float64, ``> 13.3`` in float32) and is impossible inside
    a Ball(R) of moderate radius. The dominant failure is *underflow*: the exponent
    is ``<= |omega||x~| - |x~|^2/2``, so for ``|x~| > 2 max|omega|`` features decay
    like ``exp(-|x~|^2/2)``; below ``-708`` (float64; ``-87`` float32) they become
    subnormal and below ``-745`` (``-103``) exactly 0, so the whole row is 0 and
    normalised attention is 0/0 (for |omega| ~ 1 this happens at ``|x~|`` of about
    38 in float64, 14 in float32). ``stabilise="row"`` removes both failures for a
    token (its largest feature is ``M^{-1/2}``); ``"seq"`` protects the largest key
    of a sequence only. Neither changes normalised attention in exact arithmetic.

    References
    ----------
    paper 000, App. D, "Positive exponential random features (FAVOR)";
    Choromanski et al. (2020), Lemma 1; attention_reference.md, section 0.3.
    """

    name = "favor"
    positive = True
    options = FeatureMap.options + ("stabilise",)
    _STABILISERS = ("none", "row", "seq")

    def _init_fixed(self, rng, fixed):
        stabilise = fixed.pop("stabilise", "none")
        if stabilise not in self._STABILISERS:
            raise ValueError(f"favor: stabilise={stabilise!r} is not allowed; allowed: "
                             f"{', '.join(self._STABILISERS)}")
        self.stabilise = stabilise

    def _forward(self, xp, x, omega):
        if self.stabilise == "seq" and x.ndim < 2:
            raise ValueError(f"favor: stabilise='seq' needs x of shape (..., length, d); got {x.shape}")
        xt = x / math.sqrt(self.tau)
        e = xp.matmul(xt, omega.T) - 0.5 * xp.sum(xt * xt, axis=-1, keepdims=True)
        if self.stabilise == "row":
            c = xp.max(e, axis=-1, keepdims=True)
        elif self.stabilise == "seq":
            c = xp.max(e, axis=(-2, -1), keepdims=True)
        else:
            c = None
        if c is not None:
            e = e - c
        phi = xp.exp(e) / math.sqrt(self.m)
        cache = {"xp": xp, "phi_shape": phi.shape, "xt": xt, "omega": omega, "phi": phi, "c": c}
        return phi, cache

    def _backward(self, xp, dphi, cache):
        xt, omega, phi = cache["xt"], cache["omega"], cache["phi"]
        de = dphi * phi                                    # d/d(exponent), c held constant
        dxt, domega = self._project_back(xp, de, xt, omega)
        dxt = dxt - xp.sum(de, axis=-1, keepdims=True) * xt
        return dxt / math.sqrt(self.tau), domega


# --------------------------------------------------------------------------- l1-renormalised maps
class _L1FeatureMap(FeatureMap):
    """Shared forward/backward of ``phi = sqrt(M) g(u) / sum_j g(u_j)``, ``u = x.omega/tau + b``."""

    uses_floor = True
    l1_normalised = True
    has_bias = False

    @abc.abstractmethod
    def _g(self, xp, u):
        """Return g(u) (floored, > 0) and dg/du, both of the shape of u."""

    def activation(self, u):
        """The unnormalised feature ``g(u)`` and its derivative, ``phi = sqrt(M) g(u) / sum_j g(u_j)``.

        Parameters
        ----------
        u : float array, any shape
            Pre-activations ``(omega_k . x) / tau + b_k`` (NumPy or CuPy).

        Returns
        -------
        g : float array, shape of ``u``
            ``g(u)``, floored so that ``g > 0`` (the map's ``floor``).
        dg : float array, shape of ``u``
            ``dg/du``.

        References
        ----------
        paper 000, App. D ("Implementation details", l1 renormalisation).
        """
        return self._g(namespace(u), u)

    def _forward(self, xp, x, omega):
        u = xp.matmul(x, omega.T)
        if self.tau != 1.0:
            u /= self.tau                    # in place: u is this call's own array
        if self.has_bias:
            u += self._bias(xp, u.dtype)
        g, dg = self._g(xp, u)
        del u
        if _fused.fusable(g) and g.ndim >= 1:    # row sums and scaling in one pass (engine._fused)
            s = np.empty(g.shape[:-1] + (1,), dtype=g.dtype)
            _fused.l1_normalise(_fused.rows(g), math.sqrt(self.m), s.reshape(-1))
        else:
            s = xp.sum(g, axis=-1, keepdims=True)
            g *= math.sqrt(self.m) / s       # phi, in place: g itself is not kept
        phi = g
        cache = {"xp": xp, "phi_shape": phi.shape, "x": x, "omega": omega, "phi": phi,
                 "s": s, "dg": dg}
        return phi, cache

    def _backward(self, xp, dphi, cache):
        phi, s, dg = cache["phi"], cache["s"], cache["dg"]
        root_m = math.sqrt(self.m)
        if _fused.fusable(dphi, phi, dg, s) and dphi.shape == phi.shape:
            dz = np.empty_like(phi)              # the lines below in one pass per row (engine._fused)
            _fused.l1_backward(_fused.rows(dphi), _fused.rows(phi), _fused.rows(dg), s.reshape(-1), root_m,
                               root_m / self.tau, _fused.rows(dz))
            return self._project_back(xp, dz, cache["x"], cache["omega"])
        # d phi_i / d g_j = sqrt(M) (delta_ij - phi_i / sqrt(M)) / s; then dz = dg_up * g'(u) / tau,
        # on one work array (dphi belongs to the caller and is not written)
        dz = xp.multiply(dphi, phi)
        inner = xp.sum(dz, axis=-1, keepdims=True)
        inner /= root_m
        xp.subtract(dphi, inner, out=dz)
        dz *= (root_m / self.tau) / s
        dz *= dg
        return self._project_back(xp, dz, cache["x"], cache["omega"])


class EluFeatureMap(_L1FeatureMap):
    """ELU+1 features with floor clamp, fixed biases and l1 renormalisation.

    ``g_k = max{1 + ELU(u_k), floor}``, ``u_k = (omega_k . x) / tau + b_k``,
    ``phi_k = sqrt(M) g_k / sum_j g_j``, so ``sum_k phi_k = sqrt(M)`` exactly.
    ``1 + ELU(u) = 1 + u`` for ``u > 0`` and ``exp(u)`` for ``u <= 0`` (ELU alpha = 1).

    Parameters
    ----------
    d : int
        Input dimension, ``d >= 1`` (see :class:`FeatureMap`).
    m : int
        Number of features M, ``m >= 1`` (see :class:`FeatureMap`).
    tau : float, default 1.0
        Temperature, ``tau > 0`` (see :class:`FeatureMap`).
    floor : float, default 1e-6
        ``floor >= 0``; the clamp is active only for
        ``u_k < log(floor)`` (about -13.8 for the default 1e-6), where the
        gradient is 0 (the subgradient of max).
    rng : numpy.random.Generator or None, default None
        Draws the fixed biases when ``bias_std > 0`` and ``b`` is not given (see
        :class:`FeatureMap`).
    **fixed
        Map options by name: ``omega_scale`` and ``check_finite`` (see
        :class:`FeatureMap`), and ``bias_std`` and ``b`` below.
    bias_std : float, default 1.0
        The fixed biases are drawn once as ``b_k ~ N(0, bias_std**2)`` i.i.d. from
        ``rng`` (the paper does not state their law; unit spread matches that of
        ``omega . x`` under the default init for unit-variance token coordinates).
        ``bias_std = 0`` gives ``b = 0`` (Katharopoulos et al.'s plain elu+1) and
        needs no ``rng``.
    b : array_like, shape (m,), optional
        Explicit fixed biases (overrides ``bias_std``), e.g. from a checkpoint.

    Notes
    -----
    Ambiguity in the paper: its display divides the *unclamped* ``1 + ELU`` by
    ``Z(x) propto sum_i max{ELU + 1, floor}`` while the text says "we clamp to a
    small floor and re-normalize per token so that sum_i phi_i = sqrt(M)". Both
    statements hold only if the clamp is applied in the numerator too, which is
    what is implemented; ``Z(x) = sum_j g_j / sqrt(M)``. The map divides by zero
    only if ``floor = 0`` and every ``exp(u_k)`` underflows (``u_k < -745``).

    References
    ----------
    paper 000, App. D, "Deterministic positive features (ELU+1 with floor + l1 renorm)";
    Katharopoulos et al. (2020); Clevert et al. (2015).
    """

    name = "elu"
    has_bias = True
    fixed_names = ("b",)
    options = FeatureMap.options + ("bias_std", "b")

    @classmethod
    def draws_constants(cls, **options):
        """Whether a map built with ``options`` draws its biases (``bias_std > 0``, no ``b``).

        Parameters
        ----------
        **options
            ``bias_std`` (default 1.0) and ``b``; other keys are ignored.

        Returns
        -------
        bool

        References
        ----------
        paper 000, App. D.
        """
        return options.get("b") is None and float(options.get("bias_std", 1.0)) > 0.0

    def _init_fixed(self, rng, fixed):
        self.bias_std = check_real("bias_std", fixed.pop("bias_std", 1.0), nonnegative=True)
        b = fixed.pop("b", None)
        if b is None and self.bias_std == 0.0:
            b = np.zeros(self.m)
        self.b = self._take_phases(rng, b, lambda r: self.bias_std * r.standard_normal(self.m))

    def _g(self, xp, u):
        neg = xp.exp(xp.minimum(u, 0.0))                    # d(1 + ELU)/du, and 1 + ELU for u <= 0
        elu1 = xp.where(u > 0, 1.0 + u, neg)
        above = elu1 > self.floor
        g = xp.where(above, elu1, self.floor)
        dg = xp.where(above, neg, 0.0)                      # neg = 1 where u > 0
        return g, dg


class SoftplusFeatureMap(_L1FeatureMap):
    """Softplus features with additive floor and l1 renormalisation.

    ``g_k = softplus(u_k) + floor``, ``u_k = (omega_k . x) / tau``,
    ``phi_k = sqrt(M) g_k / sum_j g_j`` (``sum_k phi_k = sqrt(M)``). softplus is
    evaluated as ``max(u, 0) + log1p(exp(-|u|))`` (no overflow, accurate for
    ``u << 0``). ``floor >= 0``; with ``floor = 0`` it divides by zero only if every
    ``u_k < -745``.

    Parameters
    ----------
    d : int
        Input dimension, ``d >= 1`` (see :class:`FeatureMap`).
    m : int
        Number of features M, ``m >= 1`` (see :class:`FeatureMap`).
    tau : float, default 1.0
        Temperature, ``tau > 0`` (see :class:`FeatureMap`).
    floor : float, default 1e-6
        Additive floor, ``floor >= 0`` (see :class:`FeatureMap`).
    rng : numpy.random.Generator or None, default None
        Not needed: no random constants.
    **fixed
        Map options by name: ``omega_scale`` and ``check_finite`` (see :class:`FeatureMap`).

    References
    ----------
    paper 000, App. D, "Softplus features (floor + l1 renorm)"; Dugas et al. (2001).
    """

    name = "softplus"

    def _g(self, xp, u):
        return _softplus_sigmoid(xp, u, self.floor)


class PorfSoftplusFeatureMap(SoftplusFeatureMap):
    """Softplus features (same forward/backward) with orthogonal random feature init.

    :meth:`init_omega` stacks ``ceil(m / d)`` independent Haar-random orthogonal
    ``d x d`` blocks (QR of a Gaussian matrix with the sign of ``diag(R)`` fixed,
    Mezzadri 2006), keeps the first ``m`` rows, and rescales row k to norm
    ``omega_scale * r_k / sqrt(d)``, with ``r_k ~ chi_d`` i.i.d. (``row_norms="chi"``:
    each row is then marginally N(0, omega_scale**2 / d I), the i.i.d. law, while
    the rows of a block are exactly orthogonal) or ``r_k = sqrt(d)``
    (``row_norms="fixed"``: all norms equal ``omega_scale``).

    Parameters
    ----------
    d : int
        Input dimension, ``d >= 1`` (see :class:`FeatureMap`).
    m : int
        Number of features M, ``m >= 1`` (see :class:`FeatureMap`).
    tau : float, default 1.0
        Temperature, ``tau > 0`` (see :class:`FeatureMap`).
    floor : float, default 1e-6
        Additive floor, ``floor >= 0`` (see :class:`FeatureMap`).
    rng : numpy.random.Generator or None, default None
        See :class:`FeatureMap`.
    **fixed
        Map options by name: ``omega_scale``, ``check_finite``, ``init`` (default
        "orthogonal" here; "iid" gives the softplus map's law) and ``row_norms``
        (see :class:`FeatureMap`).
    row_norms : {"chi", "fixed"}, default "chi"
        Row rescaling of the orthogonal blocks (Yu et al. 2016; Choromanski et al.
        use "chi" as ``scaling=0`` and ``sqrt(d)`` as ``scaling=1``).

    Notes
    -----
    The paper writes ``Omega^T Omega ~ I`` for ``Omega`` in ``R^{d x M}``; for
    ``M > d`` that ``M x M`` identity cannot hold. What holds here is: within each
    block of ``d`` consecutive rows, ``omega_B omega_B^T = diag(|omega_k|^2)``
    (``= omega_scale**2 I`` with ``row_norms="fixed"`` and ``omega_scale=1``).

    References
    ----------
    paper 000, App. D, "PORF-Softplus (orthogonal initialization)";
    Yu et al. (2016); Choromanski et al. (2017, 2020).
    """

    name = "porf_softplus"
    default_init = "orthogonal"


class Sigmoid2FeatureMap(_L1FeatureMap):
    """Squared-sigmoid features with additive floor and l1 renormalisation.

    ``g_k = sigma(u_k)^2 + floor``, ``u_k = (omega_k . x) / tau``,
    ``phi_k = sqrt(M) g_k / sum_j g_j`` (``sum_k phi_k = sqrt(M)``).

    Parameters
    ----------
    d : int
        Input dimension, ``d >= 1`` (see :class:`FeatureMap`).
    m : int
        Number of features M, ``m >= 1`` (see :class:`FeatureMap`).
    tau : float, default 1.0
        Temperature, ``tau > 0`` (see :class:`FeatureMap`).
    floor : float, default 1e-6
        Additive floor, ``floor >= 0`` (see :class:`FeatureMap`).
    rng : numpy.random.Generator or None, default None
        Not needed.
    **fixed
        Map options by name: ``omega_scale`` and ``check_finite`` (see :class:`FeatureMap`).

    Notes
    -----
    The paper's display has no floor; it is added here (default 1e-6, relative
    effect ``<= floor / sigma^2``) so that the denominator cannot be 0 when every
    ``sigma(u_k)^2`` underflows (``u_k < -372`` in float64). ``floor = 0`` gives
    the paper's formula exactly.

    References
    ----------
    paper 000, App. D, "Squared-sigmoid features (l1 renorm)".
    """

    name = "sigmoid2"

    def _g(self, xp, u):
        sig = _sigmoid(xp, u)
        sig2 = sig * sig
        return sig2 + self.floor, 2.0 * sig2 * _sigmoid(xp, -u)


class Cos2FeatureMap(_L1FeatureMap):
    """Cosine-squared features with fixed phases, additive floor and l1 renormalisation.

    ``g_k = cos(u_k)^2 + floor``, ``u_k = (omega_k . x) / tau + b_k``,
    ``phi_k = sqrt(M) g_k / sum_j g_j`` (``sum_k phi_k = sqrt(M)``).

    Parameters
    ----------
    d : int
        Input dimension, ``d >= 1`` (see :class:`FeatureMap`).
    m : int
        Number of features M, ``m >= 1`` (see :class:`FeatureMap`).
    tau : float, default 1.0
        Temperature, ``tau > 0`` (see :class:`FeatureMap`).
    rng : numpy.random.Generator or None, default None
        Draws the phases ``b_k ~ Unif[0, 2 pi)`` once, unless ``b`` is given (see
        :class:`FeatureMap`).
    **fixed
        Map options by name: ``omega_scale`` and ``check_finite`` (see
        :class:`FeatureMap`), and ``b`` below.
    floor : float, default 1e-6
        Must be ``> 0`` here: without it ``sum_j cos(u_j)^2`` is 0 whenever every
        ``u_j`` is an odd multiple of pi/2 (e.g. ``m = 1``, or all particles at 0
        with ``b_j = pi/2``) and the renormalisation divides 0 by 0; with it the
        denominator is at least ``M * floor`` and the output degrades to the uniform
        ``1 / sqrt(M)`` there. The floor is additive (smooth), so gradients are exact.
    b : array_like, shape (m,), optional
        Explicit fixed phases.

    Notes
    -----
    The paper's display has no floor; ``floor -> 0`` recovers it wherever the
    denominator is nonzero.

    References
    ----------
    paper 000, App. D, "Cosine-squared random features"; Rahimi and Recht (2007).
    """

    name = "cos2"
    has_bias = True
    fixed_names = ("b",)
    options = FeatureMap.options + ("b",)

    def _init_fixed(self, rng, fixed):
        if not self.floor > 0.0:
            raise ValueError(f"cos2: floor must be > 0 (it keeps the l1 renormalisation away from "
                             f"0/0); got {self.floor!r}")
        self.b = self._take_phases(rng, fixed.pop("b", None),
                                   lambda r: r.uniform(0.0, 2.0 * np.pi, size=self.m))

    def _g(self, xp, u):
        c = xp.cos(u)
        return c * c + self.floor, -xp.sin(2.0 * u)


# --------------------------------------------------------------------------- softmax over features
class SoftmaxFeatFeatureMap(FeatureMap):
    """Softmax over features: ``phi(x) = sqrt(M) softmax(u)``, ``u_k = <omega_k, x> / tau``.

    Computed stably as ``exp(u - max u) / sum exp(u - max u)`` (the shift cancels
    exactly, so the backward is the exact gradient). Strictly positive up to
    underflow of entries far below the maximum; ``sum_k phi_k = sqrt(M)``. ``floor``
    is not used.

    Parameters
    ----------
    d : int
        Input dimension, ``d >= 1`` (see :class:`FeatureMap`).
    m : int
        Number of features M, ``m >= 1`` (see :class:`FeatureMap`).
    tau : float, default 1.0
        Temperature, ``tau > 0`` (see :class:`FeatureMap`).
    floor : float, default 1e-6
        Validated but not used by this map (see :class:`FeatureMap`).
    rng : numpy.random.Generator or None, default None
        Not needed.
    **fixed
        Map options by name: ``omega_scale`` and ``check_finite`` (see :class:`FeatureMap`).

    References
    ----------
    paper 000, App. D, "Softmax-over-features (per-token)".
    """

    name = "softmaxfeat"

    def _forward(self, xp, x, omega):
        u = xp.matmul(x, omega.T) / self.tau
        w = xp.exp(u - xp.max(u, axis=-1, keepdims=True))
        phi = (math.sqrt(self.m) / xp.sum(w, axis=-1, keepdims=True)) * w
        cache = {"xp": xp, "phi_shape": phi.shape, "x": x, "omega": omega, "phi": phi}
        return phi, cache

    def _backward(self, xp, dphi, cache):
        phi = cache["phi"]
        inner = xp.sum(dphi * phi, axis=-1, keepdims=True) / math.sqrt(self.m)
        dz = phi * (dphi - inner) / self.tau
        return self._project_back(xp, dz, cache["x"], cache["omega"])


# --------------------------------------------------------------------------- RFF (signed)
class RffFeatureMap(FeatureMap):
    """Random Fourier features ``phi_k(x) = sqrt(2) cos(u_k)``, ``u_k = <omega_k, x>/tau + b_k``.

    Not positive (``positive = False``): not usable in normalised linear
    attention. Following Lemma 3 there is no ``M^{-1/2}`` inside phi; the kernel
    is ``K(x, y) = (1/M) sum_k phi_k(x) phi_k(y)`` (eq. (B.5)), and for
    ``omega_k ~ N(0, I_d)`` (``omega_scale = sqrt(d)``) and ``b_k ~ Unif[0, 2 pi)``
    its expectation is the Gaussian kernel ``exp(-|x - y|^2 / (2 tau^2))``.
    ``floor`` is not used.

    Parameters
    ----------
    d : int
        Input dimension, ``d >= 1`` (see :class:`FeatureMap`).
    m : int
        Number of features M, ``m >= 1`` (see :class:`FeatureMap`).
    tau : float, default 1.0
        Temperature, ``tau > 0`` (see :class:`FeatureMap`).
    floor : float, default 1e-6
        Validated but not used by this map (see :class:`FeatureMap`).
    rng : numpy.random.Generator or None, default None
        Draws the phases once, unless ``b`` is given (see :class:`FeatureMap`).
    **fixed
        Map options by name: ``omega_scale`` and ``check_finite`` (see
        :class:`FeatureMap`), and ``b`` below.
    b : array_like, shape (m,), optional
        Explicit fixed phases.

    References
    ----------
    paper 000, Lemma 3 and eqs. (B.5)-(B.6); Rahimi and Recht (2007).
    """

    name = "rff"
    positive = False
    fixed_names = ("b",)
    options = FeatureMap.options + ("b",)

    def _init_fixed(self, rng, fixed):
        self.b = self._take_phases(rng, fixed.pop("b", None),
                                   lambda r: r.uniform(0.0, 2.0 * np.pi, size=self.m))

    def _forward(self, xp, x, omega):
        u = xp.matmul(x, omega.T) / self.tau
        u = u + self._bias(xp, u.dtype)
        phi = math.sqrt(2.0) * xp.cos(u)
        cache = {"xp": xp, "phi_shape": phi.shape, "x": x, "omega": omega, "u": u}
        return phi, cache

    def _backward(self, xp, dphi, cache):
        dz = -math.sqrt(2.0) * xp.sin(cache["u"]) * dphi / self.tau
        return self._project_back(xp, dz, cache["x"], cache["omega"])


class RffPairFeatureMap(FeatureMap):
    """Random Fourier features as sin/cos pairs: ``phi(x) = [sin(u), cos(u)] / sqrt(m)``, ``u = omega x / tau``.

    The fixed RFF baseline of paper 001's Table 5 (its eqs. (4)-(6)): ``m`` frequencies give
    ``n_features = 2 m`` features, and ``phi(x) . phi(y) = (1/m) sum_k cos(omega_k . (x - y) / tau)``,
    whose expectation for ``omega_k ~ N(0, s^2 I_d)`` is the Gaussian kernel
    ``exp(-s^2 |x - y|^2 / (2 tau^2))`` (``omega_scale = s sqrt(d)``; the paper's law
    ``N(0, d^-1/2 I)`` is ``omega_scale = d^(1/4)``). No random phase: the kernel estimate is exactly
    shift-invariant for every draw, unlike ``rff`` (``sqrt(2) cos(u + b)``), whose estimate is only
    shift-invariant in expectation. Not positive (``positive = False``): in linear attention its
    denominators are signed. ``floor`` is not used.

    Parameters
    ----------
    d : int
        Input dimension, ``d >= 1`` (see :class:`FeatureMap`).
    m : int
        Number of frequencies (rows of ``omega``), ``m >= 1``; ``n_features = 2 m``.
    tau : float, default 1.0
        Temperature, ``tau > 0`` (see :class:`FeatureMap`).
    floor : float, default 1e-6
        Validated but not used by this map (see :class:`FeatureMap`).
    rng : numpy.random.Generator or None, default None
        Not used (the map draws no fixed constants); accepted for the common signature.
    **fixed
        Map options by name: ``omega_scale`` and ``check_finite`` (see :class:`FeatureMap`).

    References
    ----------
    paper 001 (LUNA), Table 5 "RFF-sin,cos (fixed)" and eqs. (4)-(6); Rahimi and Recht (2007),
    "Random features for large-scale kernel machines", NeurIPS, eq. (2) with the [cos, sin] pair.
    """

    name = "rff_pair"
    positive = False

    @property
    def n_features(self):
        """Feature dimension D = 2 m (a sin and a cos per frequency)."""
        return 2 * self.m

    @classmethod
    def features_per_row(cls, **options):
        """Features per row of ``omega``: 2 (``sin(u)`` and ``cos(u)``).

        Parameters
        ----------
        **options
            Ignored (no option changes the count).

        Returns
        -------
        int
            2.
        """
        return 2

    def _forward(self, xp, x, omega):
        u = xp.matmul(x, omega.T) / self.tau
        s, c = xp.sin(u), xp.cos(u)
        scale = 1.0 / math.sqrt(self.m)
        phi = xp.concatenate([s, c], axis=-1) * scale
        return phi, {"xp": xp, "phi_shape": phi.shape, "x": x, "omega": omega, "s": s, "c": c}

    def _backward(self, xp, dphi, cache):
        m = self.m
        scale = 1.0 / math.sqrt(m)
        dz = (dphi[..., :m] * cache["c"] - dphi[..., m:] * cache["s"]) * (scale / self.tau)
        return self._project_back(xp, dz, cache["x"], cache["omega"])
