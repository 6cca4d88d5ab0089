"""Configuration of the ``rieszflow ldp`` study: strict frozen dataclasses and the presets.

Problem (and why)
-----------------
:math:`\\Omega = [-3, 3]` (bounded, as Thm 2 requires), :math:`V = x^2/2`, log kernel
:math:`s = 0`, :math:`\\lambda = 1`, observable :math:`f(x) = x^2` (the second moment) and the
deviation event :math:`A = \\{\\mu: \\int f\\,d\\mu \\ge a\\}`.

* ``"speed_N"``: :math:`\\beta_N = \\beta N` with :math:`\\beta = 1` (paper eq. (4.6)); the
  equilibrium is the self-consistent Gibbs density (second moment
  :math:`m^* \\approx 1.418`); :math:`a = 1.5\\,m^*` gives :math:`\\inf_A I \\approx 0.09`, so
  :math:`P(A) \\approx e^{-0.09 N}` is still directly measurable at N = 64.
* ``"speed_N2"``: :math:`\\beta_N = N^2` (paper eq. (4.7), speed :math:`\\beta_N`); the
  equilibrium is the semicircle on :math:`[-\\sqrt2, \\sqrt2]` (:math:`m^* = 1/2`) and
  :math:`a = 0.7` gives :math:`\\inf_A J = (a - \\tfrac12)/2 - \\tfrac14\\log(2a) = 0.01588`,
  so :math:`P(A) \\approx e^{-0.016 N^2}` is below 1e-6 at N = 32: only the tilted
  estimator reaches it.

Thm 2 as printed assumes :math:`s > d`, for which every density has infinite Riesz
energy and the rate functions are meaningless; the study uses the log kernel
(:math:`s = 0 < d`), the setting of Ben Arous-Guionnet (1997) and
Chafaï-Gozlan-Zitt (2014).

References
----------
paper 000, Thm 2 and Thm 6, eq. (4.6)-(4.7), (E.7).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from rieszflow.config import config_int, config_real, from_mapping
from rieszflow.config import load_config_mapping

__all__ = ["RegimeConfig", "LDPConfig", "quick_config", "full_config", "load_config"]

_BACKENDS = ("numpy",)


@dataclasses.dataclass(frozen=True)
class RegimeConfig:
    """A temperature scaling :math:`\\beta_N = \\beta N^{\\kappa}` and its deviation level.

    Parameters
    ----------
    name : str
        Label (e.g. ``"speed_N"``).
    kappa : float
        Exponent, ``>= 1``. ``kappa == 1``: speed :math:`r_N = N` and rate
        :math:`I = \\beta[\\mathcal F_\\beta - \\inf\\mathcal F_\\beta]` (eq. (4.6) for :math:`\\beta = 1`);
        ``kappa > 1``: speed :math:`r_N = \\beta_N` and rate :math:`J = \\mathcal E_s - \\min\\mathcal E_s`
        (eq. (4.7)).
    a : float
        Threshold of :math:`A = \\{\\int f\\,d\\mu \\ge a\\}`.
    beta : float, default 1.0
        :math:`\\beta > 0`.

    Raises
    ------
    ValueError
        On ``kappa < 1``, non-finite values or ``beta <= 0``.
    """

    name: str
    kappa: float
    a: float
    beta: float = 1.0

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(f"name={self.name!r} must be an identifier-like string")
        k = config_real("kappa", self.kappa)
        if k < 1:
            raise ValueError(f"kappa={self.kappa!r} must be >= 1 (beta_N / N must not vanish)")
        object.__setattr__(self, "kappa", k)
        object.__setattr__(self, "a", config_real("a", self.a))
        object.__setattr__(self, "beta", config_real("beta", self.beta, positive=True))

    @property
    def regime(self) -> str:
        """``"fixed_beta"`` (kappa = 1) or ``"low_temperature"`` (kappa > 1), as in :mod:`~rieszflow.solvers.gibbs`."""
        return "fixed_beta" if self.kappa == 1.0 else "low_temperature"

    def beta_N(self, n: int) -> float:
        """:math:`\\beta_N = \\beta N^{\\kappa}`.

        Parameters
        ----------
        n : int
            Number of particles N.

        Returns
        -------
        float
            :math:`\\beta_N`.
        """
        return self.beta * float(n) ** self.kappa

    def speed(self, n: int) -> float:
        """:math:`r_N`: N for kappa = 1, :math:`\\beta_N` otherwise.

        Parameters
        ----------
        n : int
            Number of particles N.

        Returns
        -------
        float
            The LDP speed :math:`r_N`.
        """
        return float(n) if self.kappa == 1.0 else self.beta_N(n)

    @classmethod
    def from_dict(cls, d):
        """Build from a mapping; unknown keys raise ValueError."""
        return from_mapping(cls, d)


@dataclasses.dataclass(frozen=True)
class LDPConfig:
    """The whole ``rieszflow ldp`` study.

    Parameters
    ----------
    lo, hi : float
        :math:`\\Omega = [lo, hi]`.
    gamma : float
        :math:`V = \\gamma x^2/2`, ``>= 0``.
    s : float
        Riesz exponent, ``-2 < s < 1``.
    lam : float
        Interaction strength, ``> 0``.
    regimes : tuple of RegimeConfig
    n_particles : tuple of int
        N values, each ``>= 2``.
    n_theta : int
        Equally spaced tilt nodes :math:`\\theta_0 = 0 < \\dots < \\theta_{\\max}`, ``>= 3``
        (:math:`\\Lambda_N` is the antiderivative of the cubic spline through them).
    theta_max_factor : float
        :math:`\\theta_{\\max}` = this times the limit's Lagrange multiplier
        :math:`\\theta^*` (from :func:`~rieszflow.solvers.gibbs.rate_infimum`), ``> 1``.
    chains_per_theta, chains_at_zero : int
        Independent MALA chains per tilted node and at :math:`\\theta = 0` (direct estimate).
    burn_in, n_steps : int
        MALA steps discarded (step-size adaptation happens here) and kept.
    n_cells : int
        Cells of the solver grid for the rate functions.
    seed : int
        Root seed.
    backend : {"numpy"}
        The sampler is NumPy (the chains are small; the batch is the parallelism).

    Raises
    ------
    ValueError
        On any invalid value (message names the field).
    """

    regimes: tuple
    n_particles: tuple
    lo: float = -3.0
    hi: float = 3.0
    gamma: float = 1.0
    s: float = 0.0
    lam: float = 1.0
    n_theta: int = 7
    theta_max_factor: float = 1.8
    chains_per_theta: int = 24
    chains_at_zero: int = 64
    burn_in: int = 1500
    n_steps: int = 4000
    n_cells: int = 400
    seed: int = 0
    backend: str = "numpy"

    def __post_init__(self):
        regs = tuple(r if isinstance(r, RegimeConfig) else RegimeConfig.from_dict(r) for r in self.regimes)
        if not regs or len({r.name for r in regs}) != len(regs):
            raise ValueError(f"regimes must be non-empty with distinct names, got {[r.name for r in regs]}")
        object.__setattr__(self, "regimes", regs)
        ns = self.n_particles
        if isinstance(ns, int) or not ns:
            raise ValueError(f"n_particles must be a non-empty sequence of integers, got {ns!r}")
        object.__setattr__(self, "n_particles", tuple(config_int("n_particles", n, minimum=2) for n in ns))
        lo, hi = config_real("lo", self.lo), config_real("hi", self.hi)
        if not lo < hi:
            raise ValueError(f"need lo < hi, got lo={lo}, hi={hi}")
        object.__setattr__(self, "lo", lo)
        object.__setattr__(self, "hi", hi)
        object.__setattr__(self, "gamma", config_real("gamma", self.gamma, nonnegative=True))
        object.__setattr__(self, "lam", config_real("lam", self.lam, positive=True))
        s = config_real("s", self.s)
        if not -2.0 < s < 1.0:
            raise ValueError(f"s={self.s!r} must satisfy -2 < s < 1 = d (finite energy; Thm 2's s > d "
                             "makes every rate infinite)")
        object.__setattr__(self, "s", s)
        config_int("n_theta", self.n_theta, minimum=3)
        tf = config_real("theta_max_factor", self.theta_max_factor)
        if not tf > 1.0:
            raise ValueError(f"theta_max_factor={tf} must be > 1 so the tilt grid passes the optimum")
        object.__setattr__(self, "theta_max_factor", tf)
        config_int("chains_per_theta", self.chains_per_theta, minimum=2)
        config_int("chains_at_zero", self.chains_at_zero, minimum=2)
        config_int("burn_in", self.burn_in, minimum=1)
        config_int("n_steps", self.n_steps, minimum=1)
        config_int("n_cells", self.n_cells, minimum=8)
        config_int("seed", self.seed, minimum=0)
        if self.backend not in _BACKENDS:
            raise ValueError(f"backend={self.backend!r} is not supported by the LDP sampler; allowed: "
                             f"{_BACKENDS} (the batched chains are small: a GPU does not help)")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "LDPConfig":
        """Build from a mapping; unknown keys raise ValueError naming them."""
        return from_mapping(cls, d)

    def to_dict(self) -> dict:
        """Plain-dict form (JSON-serialisable).

        Returns
        -------
        dict
            Field name to value; ``regimes`` as a list of dicts of the
            :class:`RegimeConfig` fields.
        """
        d = dataclasses.asdict(self)
        d["regimes"] = [dataclasses.asdict(r) for r in self.regimes]
        return d

    def replace(self, **changes) -> "LDPConfig":
        """Copy with fields changed (validated).

        Parameters
        ----------
        **changes
            Field names and their new values.

        Returns
        -------
        LDPConfig
            The new configuration (this one is unchanged).
        """
        return dataclasses.replace(self, **changes)


_REGIMES = (RegimeConfig("speed_N", 1.0, 2.126), RegimeConfig("speed_N2", 2.0, 0.7))


def quick_config(seed: int = 0) -> LDPConfig:
    """The ``--quick`` preset (a few minutes on 2 cores).

    Parameters
    ----------
    seed : int, default 0
        Root seed.

    Returns
    -------
    LDPConfig
        N in (4, 8, 16, 32), 1000 burn-in and 2500 kept MALA steps, 16 chains per tilt node
        and 48 at :math:`\\theta = 0`.
    """
    return LDPConfig(regimes=_REGIMES, n_particles=(4, 8, 16, 32), burn_in=1000, n_steps=2500,
                     chains_per_theta=16, chains_at_zero=48, seed=seed)


def full_config(seed: int = 0) -> LDPConfig:
    """The full preset (N up to 64, longer chains).

    Parameters
    ----------
    seed : int, default 0
        Root seed.

    Returns
    -------
    LDPConfig
        N in (4, 8, 16, 32, 64), 3000 burn-in and 12000 kept MALA steps, 9 tilt nodes,
        32 chains per tilt node and 128 at :math:`\\theta = 0`.
    """
    return LDPConfig(regimes=_REGIMES, n_particles=(4, 8, 16, 32, 64), burn_in=3000, n_steps=12000,
                     n_theta=9, chains_per_theta=32, chains_at_zero=128, seed=seed)


def load_config(path) -> LDPConfig:
    """Read an :class:`LDPConfig` from a JSON file or any rieszflow file that stores one.

    Parameters
    ----------
    path : str or os.PathLike
        A JSON file, or an HDF5 file written by rieszflow (its stored configuration).

    Returns
    -------
    LDPConfig

    Raises
    ------
    ValueError
        On a missing or unreadable file, invalid JSON, or unknown/invalid fields (strict).
    """
    return LDPConfig.from_dict(load_config_mapping(path))
