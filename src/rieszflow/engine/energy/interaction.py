r"""The interaction specification: the Riesz exponent, its one validator, and the kernel g_s.

Every consumer of the Riesz/Coulomb interaction takes it from here: the particle
energies (:mod:`rieszflow.engine.energy.riesz`), the mean-field particle systems of
the studies, and the cell-averaged convolution of the McKean-Vlasov PDE
(:mod:`rieszflow.solvers.mckean_vlasov.convolution`).

The kernel of the distance :math:`r = \|w\|` (paper 000, eq. (2.3) and (B.10)):

.. math::

    g_s(r) = \begin{cases} r^{-s} & s > 0 \\ -\log r & s = 0 \\ -r^{-s} & -2 < s < 0,\end{cases}

repulsive for every :math:`s > -2` (:math:`s = d - 2` Coulomb, :math:`s = 0` log).
Which exponents make sense depends on the use, and :func:`check_s` states it by its
arguments: any :math:`s > -2` for particles (pair sums are finite off the diagonal);
:math:`s < d` for a density (local integrability of :math:`g_s` in dimension d, needed
by the continuum energy and the PDE); a tighter ``upper`` for closed-form primitives
that exist only below it.

References
----------
Paper 000 ("A Coulomb Particle Model for Learning Kernel Attention in Transformers"),
eq. (2.2), (2.3) and (B.10); Borodachov, Hardin and Saff, *Discrete Energy on
Rectifiable Sets* (Springer 2019), ch. 2 (Riesz s-energy, integrability s < d).
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from rieszflow.engine._checks import as_float_array, check_int, check_real, is_host
from rieszflow.engine.backend import namespace

__all__ = ["Interaction", "check_s", "check_softening", "riesz_kernel", "gaussian_riesz_expectation"]


def check_s(s, d: int | None = None, *, upper: float | None = None, what: str | None = None) -> float:
    """Validate a Riesz exponent: the one validator of ``s`` in rieszflow.

    Parameters
    ----------
    s : float
        The Riesz exponent.
    d : int, optional
        Dimension of the space a *density* lives in. When given, ``s < d`` is required
        (g_s is locally integrable in R^d only then; for s >= d every density has
        infinite Riesz energy and the continuum interaction does not exist).
    upper : float, optional
        A further strict upper bound (e.g. where a closed-form primitive exists only
        below it).
    what : str, optional
        Name of the caller, put in front of the error message.

    Returns
    -------
    float
        ``s`` as a float.

    Raises
    ------
    TypeError
        If ``s`` is not a real number.
    ValueError
        If ``s`` is NaN or infinite, ``s <= -2``, ``s >= d`` (with ``d``) or
        ``s >= upper`` (with ``upper``); the message names the value and the allowed range.

    References
    ----------
    Paper 000, eq. (B.10) (the range -2 < s); local integrability: Borodachov, Hardin and
    Saff (2019), ch. 2.
    """
    prefix = f"{what}: " if what else ""
    try:
        v = check_real("s", s)
    except ValueError as err:
        raise ValueError(f"{prefix}{err}; the Riesz exponent must be a finite number > -2") from None
    hi, why = math.inf, ""
    if d is not None:
        d = check_int("d", d, minimum=1)
        hi, why = float(d), f" (d={d}: g_s must be locally integrable for a density; for s >= d " \
                             f"every density has infinite Riesz energy, use the particle energies " \
                             f"of rieszflow.engine.energy.riesz instead)"
    if upper is not None and upper < hi:
        hi, why = float(upper), ""
    if not -2.0 < v < hi:
        rng = "-2 < s < inf" if hi == math.inf else f"-2 < s < {hi:g}"
        raise ValueError(f"{prefix}s must satisfy {rng}, got s={s!r}{why}")
    return v


def check_softening(softening) -> float:
    """Validate the Plummer softening length.

    Parameters
    ----------
    softening : float
        :math:`\\varepsilon \\ge 0` (0 = the exact kernel).

    Returns
    -------
    float

    Raises
    ------
    TypeError
        If it is not a real number.
    ValueError
        If it is NaN, infinite or negative.
    """
    return check_real("softening", softening, nonnegative=True)


def riesz_kernel(r, s, softening=0.0):
    """Riesz kernel :math:`g_s` as a function of the distance.

    Parameters
    ----------
    r : array_like
        Distances :math:`\\|w\\| \\ge 0`, any shape (NumPy or CuPy).
    s : float
        Riesz exponent, ``-2 < s < inf``.
    softening : float, default 0.0
        :math:`\\varepsilon \\ge 0`; the kernel is evaluated at :math:`\\sqrt{r^2 + \\varepsilon^2}`.

    Returns
    -------
    array, shape of ``r``, float64
        :math:`r^{-s}` (s > 0), :math:`-\\log r` (s = 0), :math:`-r^{-s}` (s < 0); ``inf`` at
        ``r = 0`` for ``s >= 0`` without softening.

    Raises
    ------
    ValueError
        If ``s`` is out of range or NaN, ``softening < 0``, or (host arrays) ``r`` has
        negative or NaN entries.

    References
    ----------
    Paper 000, eq. (2.3) and (B.10).
    """
    s = check_s(s)
    eps = check_softening(softening)
    r = as_float_array("r", r)
    xp = namespace(r)
    if is_host(r) and not (r >= 0).all():
        raise ValueError("r must contain distances >= 0 (no NaN)")
    if eps > 0.0:
        r = xp.sqrt(r * r + eps * eps)
    with np.errstate(divide="ignore"):
        if s == 0.0:
            return -xp.log(r)
        return (1.0 if s > 0 else -1.0) * r ** (-s)


def gaussian_riesz_expectation(std, s, softening=0.0) -> float:
    """:math:`\\mathbb{E}\\,g_s(X - Y)` for independent :math:`X, Y \\sim N(m, \\mathrm{diag}(\\sigma^2))`, s > 0.

    With :math:`Z = X - Y \\sim N(0, 2\\,\\mathrm{diag}(\\sigma^2))` and
    :math:`(|z|^2 + \\varepsilon^2)^{-s/2} = \\Gamma(s/2)^{-1}\\int_0^\\infty t^{s/2 - 1}
    e^{-t(|z|^2 + \\varepsilon^2)}\\,dt`,

    .. math::

        \\mathbb{E}(|Z|^2 + \\varepsilon^2)^{-s/2} = \\frac{1}{\\Gamma(s/2)} \\int_0^\\infty t^{s/2-1}
        e^{-t\\varepsilon^2} \\prod_a (1 + 4 t \\sigma_a^2)^{-1/2}\\,dt ,

    one quadrature (finite for ``s < d``), computed on the problem rescaled by
    :math:`c = \\max(\\varepsilon, \\max_a \\sigma_a)` (the value is :math:`c^{-s}` times that of
    :math:`\\sigma/c, \\varepsilon/c`), so the integrand's peak stays near :math:`t = 1`. The mean-field
    interaction energy of the Gaussian law is :math:`\\frac{\\lambda}{2}` times this; the
    isotropic case in d = 3 with s = 1 and no softening is :math:`1/(\\sigma\\sqrt\\pi)`.

    Parameters
    ----------
    std : sequence of float, length d
        Standard deviations :math:`\\sigma_a > 0` per axis (the mean does not enter).
    s : float
        Riesz exponent, ``0 < s < d``.
    softening : float, default 0.0
        Plummer softening :math:`\\varepsilon \\ge 0` (:func:`riesz_kernel`), same units as ``std``.

    Returns
    -------
    float
        :math:`\\mathbb{E}(|X - Y|^2 + \\varepsilon^2)^{-s/2}`.

    Raises
    ------
    ValueError
        If ``std`` is empty, non-finite or not positive, ``s`` is not in ``(0, d)`` (s <= 0,
        the log and negative powers, is not implemented here), or ``softening`` is negative or
        not finite.
    TypeError
        If ``s`` or ``softening`` is not a real number (a bool included).
    RuntimeError
        If the quadrature's error estimate exceeds 1e-8 relative (not seen for 0 < s < d).

    References
    ----------
    Paper 000, eq. (2.3) (the kernel); the Gamma-function representation of :math:`r^{-s}`.
    """
    from scipy import integrate, special

    sig = np.atleast_1d(np.asarray(std, dtype=np.float64))
    if sig.ndim != 1 or sig.size == 0 or not np.isfinite(sig).all() or (sig <= 0).any():
        raise ValueError(f"std={std!r} must be a non-empty sequence of finite numbers > 0")
    d = sig.size
    s = check_real("s", s)
    if not 0.0 < s < d:
        raise ValueError(f"s={s!r} is not allowed: the Gaussian expectation is implemented for 0 < s < d = {d}")
    eps = check_softening(softening)
    scale = max(eps, float(sig.max()))          # E(sig, eps) = scale^-s E(sig / scale, eps / scale)
    sig, eps2 = sig / scale, (eps / scale) ** 2
    with np.errstate(divide="ignore"):         # a standard deviation below 1e-308 of the scale: log 0
        log_v = np.log(4.0 * sig * sig)

    def integrand(u):     # t = e^u: t^(s/2) e^(-t eps^2) prod (1 + t v_a)^(-1/2), in logs (no overflow)
        soft = eps2 * math.exp(min(u, 700.0)) if eps2 > 0.0 else 0.0
        return math.exp(s * u / 2.0 - soft - 0.5 * float(np.sum(np.logaddexp(0.0, u + log_v))))

    val, err = integrate.quad(integrand, -np.inf, np.inf, epsabs=0.0, epsrel=1e-12, limit=400)
    if not (math.isfinite(val) and val > 0 and err <= 1e-8 * val):
        raise RuntimeError(f"the quadrature of E|X - Y|^-s did not converge (value {val!r}, error "
                           f"estimate {err!r}) for std={std!r}, s={s!r}, softening={softening!r}")
    return float(val / special.gamma(s / 2.0) * scale ** (-s))


@dataclasses.dataclass(frozen=True)
class Interaction:
    """The pair interaction of a particle system or a mean-field density: lam * g_s.

    Parameters
    ----------
    s : float
        Riesz exponent, ``-2 < s`` (and ``s < d`` where a density feels it, checked by
        the consumer with :func:`check_s`).
    lam : float, default 1.0
        Interaction strength :math:`\\lambda \\ge 0`.
    softening : float, default 0.0
        Plummer softening :math:`\\varepsilon \\ge 0` (particles only; the PDE uses the
        exact kernel).

    Raises
    ------
    TypeError, ValueError
        If a parameter is not a real number or is out of range.

    References
    ----------
    Paper 000, eq. (2.2)-(2.3) (lam W_{N,s}) and (4.4) (lam g_s * rho in the PDE).
    """

    s: float
    lam: float = 1.0
    softening: float = 0.0

    def __post_init__(self):
        object.__setattr__(self, "s", check_s(self.s))
        object.__setattr__(self, "lam", check_real("lam", self.lam, nonnegative=True))
        object.__setattr__(self, "softening", check_softening(self.softening))

    def kernel(self, r):
        """``g_s`` at the distances ``r`` (with this interaction's softening); see :func:`riesz_kernel`.

        Parameters
        ----------
        r : array_like
            Distances >= 0.

        Returns
        -------
        array, shape of ``r``
        """
        return riesz_kernel(r, self.s, self.softening)
