"""Random-feature maps phi_Omega : R^d -> R^M with hand-written backward passes.

Each map turns token vectors ``x`` of shape ``(..., d)`` into features ``phi``
of shape ``(..., M)`` given the particles ``omega`` of shape ``(M, d)``, so that
``K(q, k) = phi(q) . phi(k)`` is the kernel of linearised attention (paper 000,
App. D) or of a random-feature model (paper 000, Lemma 3, eq. (B.6)).

Conventions (shared by every map)
---------------------------------
* **Particles are rows.** ``omega[k]`` is the particle omega_k in R^d, i.e. the
  k-th *column* of the paper's matrix Omega in R^{d x M}. ``M = m = omega.shape[0]``.
* **Pre-activation.** ``u_k(x) = (omega_k . x) / tau + b_k``, where ``tau > 0`` is
  the temperature and ``b`` are fixed (non-learned) per-feature constants
  (ELU biases, cosine phases; zero for the other maps). FAVOR scales the data
  instead: ``x~ = x / sqrt(tau)`` (see :class:`FavorFeatureMap`). With the
  default ``tau = 1`` every map is exactly the paper's display.
* **l1 renormalisation** (elu, softplus, porf_softplus, sigmoid2, cos2):
  ``phi_k(x) = sqrt(M) g_k(x) / sum_j g_j(x)``, so ``sum_k phi_k(x) = sqrt(M)``
  for every token (paper 000, App. D, "Implementation details"); the paper's
  ``Z(x)`` is therefore ``sum_j g_j(x) / sqrt(M)``. ``softmaxfeat`` sums to
  ``sqrt(M)`` by construction; ``favor`` and ``rff`` are not renormalised.
* **Fixed constants** (``b``) are drawn once, in ``__init__``, from the host
  :class:`numpy.random.Generator` passed as ``rng`` (or passed explicitly as
  ``b=``), stored as host NumPy float64 arrays, and moved to the backend of
  ``x`` inside :meth:`FeatureMap.forward`. They are never redrawn.
* **Backends.** Array code takes ``xp = namespace(x, omega)``; the output dtype
  is ``result_type(x.dtype, omega.dtype)`` (float32 or float64).
* **Gradients.** :meth:`FeatureMap.backward` returns the vector-Jacobian
  products ``dx = (dphi)^T dphi/dx`` of shape ``(..., d)`` and
  ``domega = sum over all leading dims of (dphi)^T dphi/domega`` of shape
  ``(M, d)``.

References
----------
paper 000, App. D ("Positive random-feature maps for linearized attention");
paper 000, Lemma 3 and eqs. (B.5)-(B.6) (random Fourier features);
project spec attention_reference.md, sections 0.3 (FAVOR+ stabiliser) and 5;
Choromanski et al. (2020), "Rethinking attention with Performers";
Katharopoulos et al. (2020), "Transformers are RNNs";
Yu et al. (2016), "Orthogonal random features";
Rahimi and Recht (2007), "Random features for large-scale kernel machines".
"""
from __future__ import annotations

import abc
import math

import numpy as np

from rieszflow.engine._checks import check_int, check_real, is_host
from rieszflow.engine.backend import namespace, to_numpy

__all__ = [
    "ATTENTION_FEATURE_MAPS",
    "LEARNED_FEATURE_MAPS",
    "LINEAR_ATTENTION_MAPS",
    "LunaFeatureMap",
    "HedgehogFeatureMap",
    "CosformerFeatureMap",
    "FeatureMap",
    "FavorFeatureMap",
    "EluFeatureMap",
    "SoftplusFeatureMap",
    "PorfSoftplusFeatureMap",
    "Sigmoid2FeatureMap",
    "SoftmaxFeatFeatureMap",
    "Cos2FeatureMap",
    "RffFeatureMap",
    "FEATURE_MAPS",
    "make_feature_map",
]

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


# --------------------------------------------------------------------------- helpers
def _sigmoid(xp, u):
    """Logistic sigma(u) = 1 / (1 + exp(-u)) without overflow, accurate for both signs."""
    e = xp.exp(-xp.abs(u))
    return xp.where(u >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _softplus(xp, u):
    """log(1 + exp(u)) without overflow, accurate for very negative u."""
    return xp.maximum(u, 0.0) + xp.log1p(xp.exp(-xp.abs(u)))


# --------------------------------------------------------------------------- base class
class FeatureMap(abc.ABC):
    """Abstract random-feature map phi_Omega : R^d -> R^M (particles as rows of omega).

    Parameters
    ----------
    d : int
        Input dimension (last axis of ``x``; columns of ``omega``), ``d >= 1``.
    m : int
        Number of features M = number of particles (rows of ``omega``), ``m >= 1``.
    tau : float, default 1.0
        Temperature, ``tau > 0``: ``u_k = (omega_k . x) / tau + b_k``
        (FAVOR: ``x / sqrt(tau)``, see :class:`FavorFeatureMap`).
    floor : float, default 1e-6
        Small positive floor of the maps whose ``uses_floor`` is True (elu: clamp;
        softplus, porf_softplus, sigmoid2, cos2: additive). Must be finite and
        ``>= 0`` (``> 0`` for cos2). Validated but not used by favor,
        softmaxfeat and rff.
    rng : numpy.random.Generator or None, default None
        Host generator from which the fixed constants ``b`` are drawn once. Needed
        only by maps with random fixed constants (elu with ``bias_std > 0``, cos2,
        rff) when ``b`` is not passed explicitly.
    **fixed
        Map-specific options; the allowed names are ``cls.options`` (common to all
        maps: ``omega_scale`` and ``check_finite``):

        omega_scale : float, default 1.0
            Scale of the initial law of the particles: :meth:`init_omega` draws
            rows with ``E |omega_k|^2 = omega_scale**2`` (i.i.d. rows
            N(0, omega_scale**2 / d * I_d) unless the map says otherwise).
            ``omega_scale = sqrt(d)`` gives N(0, I_d), the law under which FAVOR
            estimates the softmax kernel and RFF the Gaussian kernel.
        check_finite : bool, default True
            Raise ValueError when ``x`` or ``omega`` holds NaN or inf. On CuPy this
            costs one device synchronisation per call; set False in hot loops
            whose inputs are already checked.
        init : {"iid", "orthogonal"}, default ``cls.default_init``
            Initial law of :meth:`init_omega`: i.i.d. Gaussian rows, or
            orthogonal blocks (Yu et al. 2016; the Performer's orthogonal random
            features, Choromanski et al. 2020, section 2.4). "orthogonal" is the
            default of porf_softplus only.
        row_norms : {"chi", "fixed"}, default "chi"
            Row norms of ``init="orthogonal"`` (see :meth:`init_omega`); an error
            with ``init="iid"``.

    Attributes
    ----------
    name : str
        Registry key in :data:`FEATURE_MAPS`.
    positive : bool
        True if ``phi >= 0`` everywhere, i.e. usable in normalised linear attention.
    uses_floor : bool
        True if ``floor`` enters the map.
    fixed_names : tuple of str
        Names of the fixed constant arrays stored as attributes (for checkpoints).
    options : tuple of str
        Allowed keyword options of the constructor besides ``tau``, ``floor``, ``rng``.

    Raises
    ------
    TypeError
        If ``d``/``m`` are not ints, ``tau``/``floor`` not real, ``rng`` not a Generator.
    ValueError
        If ``d < 1``, ``m < 1``, ``tau <= 0``, ``floor`` is negative or not finite,
        or an option is unknown or out of range.

    References
    ----------
    paper 000, App. D.
    """

    name: str = ""
    positive: bool = True
    uses_floor: bool = False
    #: True for maps with learned parameters besides ``omega`` (the dict ``theta``):
    #: their ``forward(x, omega, theta)`` / ``backward`` -> ``(dx, domega, dtheta)``.
    learned: bool = False
    #: Names of the learned parameters in ``theta`` (empty for the random-feature maps).
    theta_names: tuple = ()
    #: True if one map (one ``omega``, one ``theta``) serves every head of a layer.
    shared_heads: bool = False
    #: True if the features of a token depend on its position (axis -2 of ``x``).
    position_dependent: bool = False
    #: Denominator epsilon of normalised attention when the caller gives none (a map whose
    #: features can vanish for a whole token, like LUNA's ReLU output, needs one > 0).
    default_eps: float = 0.0
    fixed_names: tuple = ()
    options: tuple = ("omega_scale", "check_finite", "init", "row_norms")
    #: Initial law of :meth:`init_omega` when the option ``init`` is not given.
    default_init: str = "iid"
    _INITS = ("iid", "orthogonal")
    _ROW_NORMS = ("chi", "fixed")

    def __init__(self, d, m, *, tau=1.0, floor=1e-6, rng=None, **fixed):
        if type(self) is FeatureMap:
            raise TypeError("FeatureMap is abstract; use make_feature_map(name, d, m) with a name "
                            f"in {sorted(FEATURE_MAPS)}")
        self.d = check_int("d", d, minimum=1)
        self.m = check_int("m", m, minimum=1)
        self.tau = check_real("tau", tau, positive=True)
        self.floor = check_real("floor", floor, nonnegative=True)
        if rng is not None and not isinstance(rng, np.random.Generator):
            raise TypeError(f"rng must be a numpy.random.Generator or None; got {type(rng).__name__}")
        unknown = sorted(set(fixed) - set(self.options))
        if unknown:
            raise ValueError(f"{self.name}: unknown option(s) {unknown}; allowed options: "
                             f"tau, floor, rng, {', '.join(self.options)}")
        self.omega_scale = check_real("omega_scale", fixed.pop("omega_scale", 1.0), positive=True)
        check_finite = fixed.pop("check_finite", True)
        if not isinstance(check_finite, (bool, np.bool_)):
            raise TypeError(f"check_finite must be a bool; got {check_finite!r}")
        self.check_finite = bool(check_finite)
        self.init = fixed.pop("init", None) or self.default_init
        if self.init not in self._INITS:
            raise ValueError(f"{self.name}: init={self.init!r} is not allowed; allowed: "
                             f"{', '.join(self._INITS)}")
        row_norms = fixed.pop("row_norms", None)
        if row_norms is not None and self.init != "orthogonal":
            raise ValueError(f"{self.name}: row_norms={row_norms!r} applies only to "
                             f"init='orthogonal' (this map has init={self.init!r})")
        self.row_norms = row_norms or "chi"
        if self.row_norms not in self._ROW_NORMS:
            raise ValueError(f"{self.name}: row_norms={self.row_norms!r} is not allowed; allowed: "
                             f"{', '.join(self._ROW_NORMS)}")
        self._init_fixed(rng, fixed)

    @classmethod
    def draws_constants(cls, **options):
        """Whether a map built with ``options`` draws random fixed constants.

        A learned kernel can be rebuilt from its particles alone only when this is
        False, or when the constants (``fixed_names``) were stored with them.

        Parameters
        ----------
        **options
            The constructor's map-specific options (e.g. ``bias_std`` for elu);
            unknown keys are ignored here (the constructor validates them).

        Returns
        -------
        bool
            True if the constructor would draw constants from ``rng``.

        References
        ----------
        paper 000, App. D (fixed phases and biases of the feature maps).
        """
        return bool(cls.fixed_names) and all(options.get(n) is None for n in cls.fixed_names)

    # -- to be specialised ------------------------------------------------------------
    @property
    def n_features(self):
        """Feature dimension D (the last axis of ``phi``); ``m`` for the random-feature maps."""
        return self.m

    def _init_fixed(self, rng, fixed):
        """Draw or take the fixed constants; ``fixed`` holds the map-specific options."""

    @abc.abstractmethod
    def _forward(self, xp, x, omega):
        """Return ``(phi, cache)`` for ``x`` (..., d) and ``omega`` (m, d) on namespace ``xp``."""

    @abc.abstractmethod
    def _backward(self, xp, dphi, cache):
        """Return ``(dx, domega)`` from the upstream gradient ``dphi`` and the forward cache."""

    # -- shared machinery -------------------------------------------------------------
    def _take_phases(self, rng, b, law):
        """Return fixed constants ``b`` (shape (m,), float64): given, or drawn from ``law(rng)``."""
        if b is not None:
            b = np.array(to_numpy(b), dtype=np.float64, copy=True)
            if b.shape != (self.m,):
                raise ValueError(f"{self.name}: b must have shape (m,) = ({self.m},); got {b.shape}")
            if not np.all(np.isfinite(b)):
                raise ValueError(f"{self.name}: b must be finite; got NaN or inf entries")
            return b
        if rng is None:
            raise ValueError(f"{self.name}: rng=None, but this map draws fixed constants b once at "
                             "construction; pass rng=numpy.random.default_rng(seed) or b=array of "
                             f"shape ({self.m},)")
        return np.asarray(law(rng), dtype=np.float64)

    def _validate(self, x, omega):
        xp = namespace(x, omega)
        x = xp.asarray(x)
        omega = xp.asarray(omega)
        for nm, a in (("x", x), ("omega", omega)):
            if a.dtype not in _FLOATS:
                raise TypeError(f"{self.name}: {nm} must be float32 or float64; got dtype {a.dtype}")
        if omega.shape != (self.m, self.d):
            raise ValueError(f"{self.name}: omega must have shape (m, d) = ({self.m}, {self.d}) "
                             f"(particles as rows); got {omega.shape}")
        if x.ndim < 1 or x.shape[-1] != self.d:
            raise ValueError(f"{self.name}: x must have shape (..., d) with d = {self.d} "
                             f"(= omega.shape[1]); got {x.shape}")
        if self.check_finite:
            if not bool(xp.isfinite(x).all()):
                raise ValueError(f"{self.name}: x contains NaN or inf; finite values required")
            if not bool(xp.isfinite(omega).all()):
                raise ValueError(f"{self.name}: omega contains NaN or inf; finite values required")
        return xp, x, omega

    def _bias(self, xp, dtype):
        """Fixed constants ``b`` (shape (m,)) moved to the backend ``xp`` with ``dtype``."""
        return xp.asarray(self.b, dtype=dtype)

    def forward(self, x, omega):
        """Features of ``x`` given particles ``omega``, and the cache for :meth:`backward`.

        Parameters
        ----------
        x : ndarray, shape (..., d), float32 or float64 (NumPy or CuPy)
            Token vectors; any number of leading dimensions (e.g. (batch, length, d)).
        omega : ndarray, shape (m, d), same backend as ``x``
            Particles as rows: ``omega[k]`` is omega_k (column k of the paper's Omega).

        Returns
        -------
        phi : ndarray, shape (..., m), dtype result_type(x, omega)
            Features phi_Omega(x).
        cache : dict
            Arrays needed by :meth:`backward` (on the backend of ``x``).

        Raises
        ------
        TypeError
            If ``x`` or ``omega`` is not float32/float64, or they mix NumPy and CuPy.
        ValueError
            If ``omega.shape != (m, d)``, ``x.shape[-1] != d``, or (with
            ``check_finite``) an input holds NaN/inf.

        References
        ----------
        paper 000, App. D (the display of each map).
        """
        xp, x, omega = self._validate(x, omega)
        return self._forward(xp, x, omega)

    def __call__(self, x, omega):
        """Features phi_Omega(x): :meth:`forward` without the cache.

        Parameters
        ----------
        x : ndarray, shape (..., d)
        omega : ndarray, shape (m, d)

        Returns
        -------
        phi : ndarray, shape (..., m)

        Raises
        ------
        TypeError, ValueError
            As :meth:`forward`.
        """
        return self.forward(x, omega)[0]

    def backward(self, dphi, cache):
        """Vector-Jacobian products of :meth:`forward`.

        Parameters
        ----------
        dphi : ndarray, shape (..., m)
            Upstream gradient dL/dphi, same shape and backend as the ``phi`` of the
            forward call that made ``cache``.
        cache : dict
            Second output of :meth:`forward`.

        Returns
        -------
        dx : ndarray, shape (..., d)
            dL/dx.
        domega : ndarray, shape (m, d)
            dL/domega, summed over all leading dimensions of ``x``.

        Raises
        ------
        ValueError
            If ``dphi`` does not have the shape of ``phi``.
        """
        xp = cache["xp"]
        dphi = xp.asarray(dphi)
        if dphi.shape != cache["phi_shape"]:
            raise ValueError(f"{self.name}: dphi must have the shape of phi {cache['phi_shape']}; "
                             f"got {dphi.shape}")
        return self._backward(xp, dphi, cache)

    @staticmethod
    def _project_back(xp, dz, x, omega):
        """dx = dz @ omega and domega = sum_n dz_n^T x_n for z = x @ omega^T."""
        dx = xp.matmul(dz, omega)
        m, d = omega.shape
        domega = xp.matmul(dz.reshape(-1, m).T, x.reshape(-1, d))
        return dx, domega

    # -- particle initial law ---------------------------------------------------------
    def init_omega(self, rng, dtype=np.float64):
        """Draw the particles' initial configuration.

        With ``init="orthogonal"`` (the default of porf_softplus) the rows are
        orthogonal blocks, see :class:`PorfSoftplusFeatureMap`. Otherwise
        (``init="iid"``, the default of every other map): i.i.d. rows
        ``omega_k ~ N(0, (omega_scale**2 / d) I_d)``, so ``E |omega_k|^2 = omega_scale**2``
        and ``|omega_k|^2 * d / omega_scale**2 ~ chi^2_d``. With the default
        ``omega_scale = 1`` typical particles have norm about 1, inside the
        Ball(R = 1.5) of paper 000, App. F.2 with probability
        ``P(chi^2_d <= 2.25 d)`` (0.89 for d = 2, 0.98 for d = 8, 1 - 4e-8 for d = 64).
        ``omega_scale = sqrt(d)`` gives N(0, I_d), the law of FAVOR's softmax-kernel
        and RFF's Gaussian-kernel Monte Carlo estimates.

        Parameters
        ----------
        rng : numpy.random.Generator
            Host generator (the only source of randomness).
        dtype : {float64, float32}, default float64
            Dtype of the returned host array.

        Returns
        -------
        omega : numpy.ndarray, shape (m, d)
            Host array; move it with ``engine.backend.get_backend(...).asarray``.

        Raises
        ------
        TypeError
            If ``rng`` is not a numpy.random.Generator.
        ValueError
            If ``dtype`` is not float32 or float64.

        References
        ----------
        paper 000, App. D (FAVOR with omega ~ N(0, I)); App. F.2 (per-particle norm 1.5).
        """
        rng, dtype = self._check_init_args(rng, dtype)
        if self.init == "orthogonal":
            return self._orthogonal_omega(rng, dtype)
        std = self.omega_scale / math.sqrt(self.d)
        return (std * rng.standard_normal((self.m, self.d))).astype(dtype)

    def _orthogonal_omega(self, rng, dtype):
        """Orthogonal blocks: ``ceil(m / d)`` Haar d x d blocks, row k rescaled to
        ``omega_scale * r_k / sqrt(d)`` with ``r_k ~ chi_d`` ("chi") or ``sqrt(d)`` ("fixed")."""
        d, m = self.d, self.m
        blocks = []
        for _ in range(-(-m // d)):
            q, r = np.linalg.qr(rng.standard_normal((d, d)))
            q = q * np.where(np.diag(r) < 0, -1.0, 1.0)     # Haar measure (Mezzadri 2006)
            blocks.append(q.T)                               # rows orthonormal
        omega = np.concatenate(blocks, axis=0)[:m]
        if self.row_norms == "chi":
            radii = np.sqrt(rng.chisquare(d, size=m))
        else:
            radii = np.full(m, math.sqrt(d))
        omega = omega * (self.omega_scale / math.sqrt(d) * radii)[:, None]
        return omega.astype(dtype)

    @staticmethod
    def _check_init_args(rng, dtype):
        if not isinstance(rng, np.random.Generator):
            raise TypeError(f"rng must be a numpy.random.Generator; got {type(rng).__name__}")
        dt = np.dtype(dtype)
        if dt not in _FLOATS:
            raise ValueError(f"dtype must be float32 or float64; got {dtype!r}")
        return rng, dt

    def __repr__(self):
        return (f"{type(self).__name__}(name={self.name!r}, d={self.d}, m={self.m}, tau={self.tau}, "
                f"floor={self.floor}, omega_scale={self.omega_scale})")


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
    has_bias = False

    @abc.abstractmethod
    def _g(self, xp, u):
        """Return g(u) (floored, > 0) and dg/du, both of the shape of u."""

    def _forward(self, xp, x, omega):
        u = xp.matmul(x, omega.T) / self.tau
        if self.has_bias:
            u = u + self._bias(xp, u.dtype)
        g, dg = self._g(xp, u)
        s = xp.sum(g, axis=-1, keepdims=True)
        phi = (math.sqrt(self.m) / s) * g
        cache = {"xp": xp, "phi_shape": phi.shape, "x": x, "omega": omega, "phi": phi,
                 "s": s, "dg": dg}
        return phi, cache

    def _backward(self, xp, dphi, cache):
        phi, s, dg = cache["phi"], cache["s"], cache["dg"]
        root_m = math.sqrt(self.m)
        # d phi_i / d g_j = sqrt(M) (delta_ij - phi_i / sqrt(M)) / s
        inner = xp.sum(dphi * phi, axis=-1, keepdims=True) / root_m
        dg_up = (root_m / s) * (dphi - inner)
        dz = dg_up * dg / self.tau
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
        return _softplus(xp, u) + self.floor, _sigmoid(xp, u)


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
    """Softmax over features: ``phi(x) = sqrt(M) softmax(u)``, ``u_k = (omega_k . x) / tau``.

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
    """Random Fourier features ``phi_k(x) = sqrt(2) cos(u_k)``, ``u_k = (omega_k . x)/tau + b_k``.

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


# --------------------------------------------------------------------------- learned maps (paper 001)
def _check_theta(name, theta, shapes):
    """Check a learned-parameter dict against ``shapes`` (name -> shape); unknown or missing keys raise."""
    if not isinstance(theta, dict):
        raise TypeError(f"{name}: theta must be a dict of learned parameters {sorted(shapes)}; "
                        f"got {type(theta).__name__}")
    missing = sorted(set(shapes) - set(theta))
    extra = sorted(set(theta) - set(shapes))
    if missing or extra:
        raise ValueError(f"{name}: theta has missing keys {missing} and unknown keys {extra}; "
                         f"expected exactly {sorted(shapes)}")
    for k, shp in shapes.items():
        if tuple(theta[k].shape) != tuple(shp):
            raise ValueError(f"{name}: theta[{k!r}] has shape {tuple(theta[k].shape)}; expected {tuple(shp)}")


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


class HedgehogFeatureMap(FeatureMap):
    """Hedgehog's learnable exponential features ``phi(x) = [exp(u), exp(-u)]``, ``u = W x / tau + b``.

    ``W = omega`` (m, d) is initialised to the identity (``m == d``; for ``m > d`` the
    rows beyond ``d`` are drawn N(0, I/d), so no two rows start equal), ``b = 0`` (in ``theta``); both are learned
    with the task loss (trained from this initialisation, without Hedgehog's attention
    distillation, unless a study distils). ``n_features = 2 m``. This is the exp form
    of the Hedgehog paper, not the ``softmax([2z, -2z])`` variant of common code (which
    adds a per-key weight). The map is shared by Q and K (the original learns one map
    each) and, by default, separate per head.

    Parameters
    ----------
    d : int
        Input dimension, ``>= 1``.
    m : int
        Rows of ``W``, ``>= 1``; ``n_features = 2 m`` (m = d = 32 gives the D = 64 of paper 001).
    tau : float, default 1.0
        Temperature, ``> 0``.
    floor : float, default 1e-6
        Validated, not used.
    rng : numpy.random.Generator or None
        Not needed.
    **fixed
        ``check_finite`` (see :class:`FeatureMap`) and ``shared_heads`` (bool, default
        False: one map per head).

    Raises
    ------
    ValueError, TypeError
        As :class:`FeatureMap`.

    References
    ----------
    Zhang et al. (2024), "The Hedgehog & the Porcupine: expressive linear attentions with
    softmax mimicry", arXiv:2402.04347, eq. (5); paper 001 spec, section 4.
    """

    name = "hedgehog"
    positive = True
    learned = True
    options = FeatureMap.options + ("shared_heads",)

    def _init_fixed(self, rng, fixed):
        v = fixed.pop("shared_heads", False)
        if not isinstance(v, (bool, np.bool_)):
            raise TypeError(f"hedgehog: shared_heads must be a bool; got {v!r}")
        self.shared_heads = bool(v)

    @property
    def n_features(self):
        """Feature dimension D = 2 m."""
        return 2 * self.m

    theta_names = ("b",)

    def theta_shapes(self):
        """Shapes of the learned parameters besides ``omega``.

        Returns
        -------
        dict
            ``{"b": (m,)}``.
        """
        return {"b": (self.m,)}

    def init_omega(self, rng, dtype=np.float64):
        """The identity initialisation of ``W`` (rows beyond ``d`` drawn N(0, I/d)).

        Parameters
        ----------
        rng : numpy.random.Generator
            Draws the rows beyond ``d`` (none when ``m <= d``).
        dtype : {float64, float32}

        Returns
        -------
        numpy.ndarray, shape (m, d)

        References
        ----------
        Zhang et al. (2024), arXiv:2402.04347, section 4 (identity initialisation).
        """
        rng, dtype = self._check_init_args(rng, dtype)
        w = np.eye(self.m, self.d)
        if self.m > self.d:                  # rows beyond d: N(0, 1/d), so no two rows coincide
            w[self.d:] = rng.standard_normal((self.m - self.d, self.d)) / math.sqrt(self.d)
        return w.astype(dtype)

    def init_theta(self, rng, dtype=np.float64):
        """``b = 0``.

        Parameters
        ----------
        rng : numpy.random.Generator
        dtype : {float64, float32}

        Returns
        -------
        dict
            ``{"b": zeros (m,)}``.
        """
        rng, dtype = self._check_init_args(rng, dtype)
        return {"b": np.zeros(self.m, dtype=dtype)}

    def forward(self, x, omega, theta):
        """Features and cache.

        Parameters
        ----------
        x : ndarray, shape (..., d)
        omega : ndarray, shape (m, d)
        theta : dict
            ``{"b": (m,)}``.

        Returns
        -------
        phi : ndarray, shape (..., 2 m)
        cache : dict

        Raises
        ------
        TypeError, ValueError
            As :meth:`FeatureMap.forward`, or on a bad ``theta``.
        """
        xp, x, omega = self._validate(x, omega)
        _check_theta(self.name, theta, self.theta_shapes())
        u = xp.matmul(x, omega.T) / self.tau + theta["b"]
        ep, en = xp.exp(u), xp.exp(-u)
        phi = xp.concatenate([ep, en], axis=-1)
        return phi, {"xp": xp, "phi_shape": phi.shape, "x": x, "omega": omega, "ep": ep, "en": en}

    def __call__(self, x, omega, theta):
        """Features only (see :meth:`forward`).

        Parameters
        ----------
        x : ndarray, shape (..., d)
        omega : ndarray, shape (m, d)
        theta : dict

        Returns
        -------
        phi : ndarray, shape (..., 2 m)
        """
        return self.forward(x, omega, theta)[0]

    def backward(self, dphi, cache):
        """VJPs for ``x``, ``omega`` and ``theta``.

        Parameters
        ----------
        dphi : ndarray, shape (..., 2 m)
        cache : dict from :meth:`forward`

        Returns
        -------
        dx : ndarray, shape (..., d)
        domega : ndarray, shape (m, d)
        dtheta : dict
            ``{"b": (m,)}``.

        Raises
        ------
        ValueError
            If ``dphi`` does not have the shape of ``phi``.
        """
        xp = cache["xp"]
        if tuple(dphi.shape) != tuple(cache["phi_shape"]):
            raise ValueError(f"hedgehog: dphi must have the shape of phi {cache['phi_shape']}; got {dphi.shape}")
        m = self.m
        du = dphi[..., :m] * cache["ep"] - dphi[..., m:] * cache["en"]
        dx, domega = self._project_back(xp, du / self.tau, cache["x"], cache["omega"])
        return dx, domega, {"b": du.reshape(-1, m).sum(axis=0)}

    def _forward(self, xp, x, omega):                                     # pragma: no cover
        raise TypeError("hedgehog: call forward(x, omega, theta)")

    def _backward(self, xp, dphi, cache):                                 # pragma: no cover
        raise TypeError("hedgehog: call backward(dphi, cache)")


class CosformerFeatureMap(FeatureMap):
    """Cosformer's position-reweighted ReLU features.

    For token rows ``x`` of shape (..., n, d) (axis -2 is the sequence, position
    ``i = 0..n-1``), ``u = omega x / tau`` and
    ``phi(x_i) = [relu(u_i) cos(pi i / (2 n)), relu(u_i) sin(pi i / (2 n))]``, so
    ``phi(q_i) . phi(k_j) = relu(q_i) . relu(k_j) cos(pi (i - j) / (2 n))``; ``n`` is the
    (padded) length of the call. ``omega`` is fixed at the identity (``m = d``;
    stacked identities otherwise), so with learned W_Q, W_K this is Cosformer exactly;
    ``n_features = 2 m``. Not a per-token map: appending padding changes ``n`` and so
    the re-weighting of the real tokens.

    Parameters
    ----------
    d : int
        Input dimension, ``>= 1``.
    m : int
        Rows of ``omega``; ``n_features = 2 m``.
    tau : float, default 1.0
    floor : float, default 1e-6
        Validated, not used.
    rng : numpy.random.Generator or None
        Not needed.
    **fixed
        ``check_finite`` (see :class:`FeatureMap`).

    Raises
    ------
    ValueError, TypeError
        As :class:`FeatureMap`; ``x`` needs a sequence axis (ndim >= 2).

    References
    ----------
    Qin et al. (2022), "cosFormer: rethinking softmax in attention", arXiv:2202.08791,
    eqs. (9)-(11); paper 001 spec, section 4.
    """

    name = "cosformer"
    positive = True
    position_dependent = True
    default_eps = 1e-6          # relu features: a query can have phi = 0

    @property
    def n_features(self):
        """Feature dimension D = 2 m."""
        return 2 * self.m

    def init_omega(self, rng, dtype=np.float64):
        """The identity (stacked identities when ``m != d``).

        Parameters
        ----------
        rng : numpy.random.Generator
            Unused, checked for the common contract.
        dtype : {float64, float32}

        Returns
        -------
        numpy.ndarray, shape (m, d)
        """
        rng, dtype = self._check_init_args(rng, dtype)
        return np.tile(np.eye(self.d), (-(-self.m // self.d), 1))[:self.m].astype(dtype)

    def _forward(self, xp, x, omega):
        if x.ndim < 2:
            raise ValueError(f"cosformer: x must have shape (..., n, d) with a sequence axis; got {x.shape}")
        n = x.shape[-2]
        ang = (math.pi / (2.0 * n)) * xp.arange(n, dtype=x.dtype)
        c, s = xp.cos(ang)[:, None], xp.sin(ang)[:, None]
        u = xp.matmul(x, omega.T) / self.tau
        r = xp.maximum(u, 0.0)
        phi = xp.concatenate([r * c, r * s], axis=-1)
        return phi, {"xp": xp, "phi_shape": phi.shape, "x": x, "omega": omega, "u": u, "c": c, "s": s}

    def _backward(self, xp, dphi, cache):
        m = self.m
        dr = dphi[..., :m] * cache["c"] + dphi[..., m:] * cache["s"]
        dz = dr * (cache["u"] > 0) / self.tau
        return self._project_back(xp, dz, cache["x"], cache["omega"])


# --------------------------------------------------------------------------- registry
FEATURE_MAPS = {
    cls.name: cls
    for cls in (FavorFeatureMap, EluFeatureMap, SoftplusFeatureMap, Sigmoid2FeatureMap,
                SoftmaxFeatFeatureMap, Cos2FeatureMap, PorfSoftplusFeatureMap, RffFeatureMap,
                LunaFeatureMap, HedgehogFeatureMap, CosformerFeatureMap)
}

#: Names of the positive random-feature (particle) maps of paper 000, usable in normalised
#: linear attention (every registered map with ``positive = True`` whose only parameters are
#: its particles and whose features are per token, in registration order). The particle
#: studies take their grids from here, so registering such a map is the only edit needed.
ATTENTION_FEATURE_MAPS = tuple(name for name, cls in FEATURE_MAPS.items()
                               if cls.positive and not cls.learned and not cls.position_dependent)

#: Maps with learned parameters besides the particles (paper 001's LUNA, Hedgehog).
LEARNED_FEATURE_MAPS = tuple(name for name, cls in FEATURE_MAPS.items() if cls.learned)

#: Every map the bundled model's linear attention accepts: the particle maps, the learned
#: maps and the position-dependent Cosformer baseline.
LINEAR_ATTENTION_MAPS = ATTENTION_FEATURE_MAPS + tuple(
    name for name, cls in FEATURE_MAPS.items() if cls.positive and name not in ATTENTION_FEATURE_MAPS)


def make_feature_map(name, d, m, *, rng=None, **options):
    """Build the feature map registered as ``name``.

    Parameters
    ----------
    name : str
        One of ``FEATURE_MAPS``: "favor", "elu", "softplus", "sigmoid2",
        "softmaxfeat", "cos2", "porf_softplus", "rff" (paper 000), "luna",
        "hedgehog", "cosformer" (paper 001 and its baselines).
    d : int
        Input dimension, ``>= 1``.
    m : int
        Number of features / particles M, ``>= 1``.
    rng : numpy.random.Generator or None, default None
        Draws the fixed constants (elu, cos2, rff) once.
    **options
        ``tau``, ``floor`` and the map's ``options`` (see each class).

    Returns
    -------
    FeatureMap

    Raises
    ------
    ValueError
        If ``name`` is unknown or an option is not allowed for this map (the
        message lists the allowed values), or a value is out of range.
    TypeError
        If ``d``, ``m`` or an option has the wrong type.

    References
    ----------
    paper 000, App. D.
    """
    if not isinstance(name, str) or name not in FEATURE_MAPS:
        raise ValueError(f"unknown feature map name={name!r}; allowed: {', '.join(FEATURE_MAPS)}")
    cls = FEATURE_MAPS[name]
    allowed = ("tau", "floor") + cls.options
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(f"make_feature_map({name!r}): unknown option(s) {unknown}; "
                         f"allowed: {', '.join(allowed)}")
    return cls(d, m, rng=rng, **options)
