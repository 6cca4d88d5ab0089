"""Random token sets for the bound experiments: :class:`GBoxInstance` (a layer and its token domain,
drawn by :func:`gbox_instance`) and the perturbations and pairs of measures drawn inside it."""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from rieszflow.engine.measures import EmpiricalMeasure
from rieszflow.engine.space import Cube
from rieszflow.theory import DotProductKernel, LinearLookup, SelfAttention, operator_norm

__all__ = ["GBoxInstance", "gbox_instance"]


@dataclasses.dataclass(frozen=True)
class GBoxInstance:
    """A spec "G-box" instance: E = [-1, 1]^d, K1 potential, linear lookup with l(E) in E.

    Parameters
    ----------
    domain : Cube
        E = [-1, 1]^d.
    A : ndarray, shape (d, d), float64
        Matrix of the K1 potential: randn(d, d)/sqrt(d).
    W : ndarray, shape (d, d), float64
        Lookup matrix: randn normalised to ||W||_{inf->inf} = 1.
    beta : float
        10^U(lo, hi).
    n_tokens : int
        N in [2, 12) (or the requested range).

    References
    ----------
    Spec section 8 ("Instance generator G-box").
    """

    domain: Cube
    A: np.ndarray
    W: np.ndarray
    beta: float
    n_tokens: int

    @property
    def dim(self) -> int:
        """Dimension d of E."""
        return self.domain.dim

    @property
    def kernel(self) -> DotProductKernel:
        """The K1 potential a(x, y) = beta x^T A y."""
        return DotProductKernel(self.A, self.beta)

    @property
    def lookup(self) -> LinearLookup:
        """The lookup l(y) = W y."""
        return LinearLookup(self.W)

    @property
    def layer(self) -> SelfAttention:
        """The self-attention map mu -> mu A_mu (no FFN)."""
        return SelfAttention(self.kernel, self.lookup)

    @property
    def k_ell(self) -> float:
        """K_l = ||W||_{1->1}."""
        return operator_norm(self.W, "l1")

    def info(self) -> dict:
        """Instance parameters stored per trial (beta, dim, n_tokens, k_ell).

        Returns
        -------
        dict
            ``beta`` (float), ``dim`` (int, d), ``n_tokens`` (int, N) and ``k_ell``
            (float, :attr:`k_ell`).
        """
        return {"beta": self.beta, "dim": self.dim, "n_tokens": self.n_tokens, "k_ell": self.k_ell}


def gbox_instance(rng: np.random.Generator, log10_beta=(-3.0, 0.5), n_range=(2, 12),
                  dims=(1, 2, 3)) -> GBoxInstance:
    """Draw one G-box instance with the host generator ``rng``.

    Parameters
    ----------
    rng : numpy.random.Generator
    log10_beta : (float, float)
        beta = 10^U(lo, hi).
    n_range : (int, int)
        N drawn uniformly in [lo, hi).
    dims : tuple of int
        d drawn uniformly from these.

    Returns
    -------
    GBoxInstance

    References
    ----------
    Spec section 8 ("G-box").
    """
    d = int(rng.choice(dims))
    A = rng.standard_normal((d, d)) / math.sqrt(d)
    W = rng.standard_normal((d, d))
    W = W / operator_norm(W, "linf")
    beta = float(10 ** rng.uniform(*log10_beta))
    n = int(rng.integers(*n_range))
    return GBoxInstance(Cube(1.0, d), A, W, beta, n)


def _perturb_inside(rng, X, scale, radius=1.0):
    """X + a random perturbation of size ``scale`` whose coordinates point inward at the walls."""
    delta = scale * rng.uniform(-1.0, 1.0, size=X.shape)
    out = X + delta
    flip = np.abs(out) > radius
    out[flip] = X[flip] - delta[flip]
    return out


def _inward_step(x, h, radius=1.0):
    """Signed step of size h along a coordinate that keeps x + step inside [-radius, radius]."""
    return -h if x + h > radius else h


def _pair(rng, inst: GBoxInstance, tiny: bool):
    X = inst.domain.sample(rng, inst.n_tokens)
    if tiny:
        Y = _perturb_inside(rng, X, 1e-3)
    else:
        Y = inst.domain.sample(rng, int(rng.integers(2, 12)))
    return EmpiricalMeasure.uniform(X), EmpiricalMeasure.uniform(Y)
