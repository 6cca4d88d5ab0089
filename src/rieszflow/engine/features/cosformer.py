"""Cosformer's position-reweighted ReLU feature map, a baseline of paper 001.

References
----------
Qin et al. (2022), "cosFormer: rethinking softmax in attention", arXiv:2202.08791.
"""
from __future__ import annotations

import math

import numpy as np

from rieszflow.engine.features.base import FeatureMap

__all__ = ["CosformerFeatureMap"]


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

    @classmethod
    def features_per_row(cls, **options):
        """Features per row of ``omega``: 2 (``[relu(u) cos, relu(u) sin]``).

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
