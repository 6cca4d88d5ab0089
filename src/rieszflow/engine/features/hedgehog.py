"""Hedgehog's learnable exponential feature map ``phi(x) = [exp(u), exp(-u)]``, a baseline of paper 001.

References
----------
Zhang et al. (2024), "The Hedgehog & the Porcupine: expressive linear attentions with
softmax mimicry", arXiv:2402.04347; paper 001 spec, section 4.
"""
from __future__ import annotations

import math

import numpy as np

from rieszflow.engine.features.base import FeatureMap, _check_theta

__all__ = ["HedgehogFeatureMap"]


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

    @classmethod
    def features_per_row(cls, **options):
        """Features per row of ``omega``: 2 (``[exp(u), exp(-u)]``).

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
