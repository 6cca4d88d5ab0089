"""The feature-map contract: the abstract :class:`FeatureMap` and the helpers every map family shares.

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

from rieszflow.engine import _fused
from rieszflow.engine._checks import check_int, check_real
from rieszflow.engine.backend import namespace, to_numpy

__all__ = ["FeatureMap"]

_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


# --------------------------------------------------------------------------- helpers
def _sigmoid(xp, u):
    """Logistic sigma(u) = 1 / (1 + exp(-u)) without overflow, accurate for both signs.

    Written as ``exp(min(u, 0)) / (1 + exp(-|u|))``: the same value as the two-branch form
    (u >= 0: ``1 / (1 + e^-u)``; u < 0: ``e^u / (1 + e^u)``), with no select and no overflow.
    """
    den = xp.exp(-xp.abs(u))
    den += 1.0
    num = xp.exp(xp.minimum(u, 0.0))
    num /= den
    return num


def _softplus(xp, u):
    """log(1 + exp(u)) without overflow, accurate for very negative u."""
    return xp.maximum(u, 0.0) + xp.log1p(xp.exp(-xp.abs(u)))


def _softplus_sigmoid(xp, u, shift=0.0):
    """``softplus(u) + shift`` and ``sigmoid(u)`` (its derivative) sharing one ``exp(-|u|)``.

    The elementwise work of the softplus feature map, in place on two work arrays of the
    shape of ``u`` (11 passes, against 16 and a select for :func:`_softplus` plus
    :func:`_sigmoid`); the formulas are theirs, so the values agree to rounding.
    """
    if getattr(u, "ndim", 0) == 0:           # NumPy makes scalars of 0-d results: no out= there
        return _softplus(xp, u) + shift, _sigmoid(xp, u)
    if _fused.fusable(u):                    # 4 NumPy passes and one fused pass (engine._fused)
        e = np.abs(u)
        np.negative(e, out=e)
        np.exp(e, out=e)
        g = np.log1p(e)
        _fused.softplus_sigmoid_finish(u.reshape(-1), e.reshape(-1), g.reshape(-1), float(shift))
        return g, e
    e = xp.abs(u)
    xp.negative(e, out=e)
    xp.exp(e, out=e)                     # exp(-|u|) in (0, 1]
    g = xp.log1p(e)
    g += xp.maximum(u, 0.0)
    if shift:
        g += shift
    e += 1.0                             # 1 + exp(-|u|)
    dg = xp.minimum(u, 0.0)
    xp.exp(dg, out=dg)
    dg /= e
    return g, dg


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
    #: True for the l1-renormalised maps ``phi = sqrt(M) g(u) / sum_j g(u_j)`` (elu, softplus,
    #: porf_softplus, sigmoid2, cos2), which expose ``g`` as ``activation(u)``.
    l1_normalised: bool = False
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
                            "in rieszflow.engine.features.FEATURE_MAPS")
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

    @classmethod
    def rows_for(cls, n_features, **options):
        """Rows of ``omega`` (particles) of a map of this class with ``n_features`` features.

        The inverse of :attr:`n_features` for the class: ``M`` for the random-feature
        maps, ``M / channels`` for LUNA, ``M / 2`` for Hedgehog and Cosformer, so a
        caller with a feature budget can size the particle matrix without naming maps.

        Parameters
        ----------
        n_features : int
            Feature dimension D (the last axis of ``phi``), ``>= 1``.
        **options
            The constructor's map-specific options; only those that change the feature
            count (LUNA's ``channels``) are read, the others are ignored.

        Returns
        -------
        int
            The number of rows ``m`` (floor division when ``n_features`` is not a
            multiple of the features per row; the constructors of the callers check
            divisibility).

        Raises
        ------
        TypeError
            If ``n_features`` is not an int.
        ValueError
            If ``n_features < 1``.

        References
        ----------
        paper 000, App. D; paper 001 (LUNA), eq. (11).
        """
        return check_int("n_features", n_features, minimum=1) // cls.features_per_row(**options)

    @classmethod
    def features_per_row(cls, **options):
        """Features per row of ``omega``: ``n_features = m * features_per_row``.

        Parameters
        ----------
        **options
            The constructor's map-specific options (see :meth:`rows_for`).

        Returns
        -------
        int
            1 for the random-feature maps.
        """
        return 1

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
