r"""Exact O(N log N) energy of the 1-D Coulomb interaction g_{-1}(w) = -|w| by sorting.

The Riesz kernel with s = -1 = d - 2 is the Coulomb kernel of the line; the pair sum
and its gradient reduce to rank counts of the sorted positions, so N = 1e6 particles
cost a sort. Tested against the O(N^2) reference
:func:`rieszflow.engine.energy.riesz.riesz_energy_and_grad` with s = -1.

References
----------
Paper 000, eq. (B.10) (s = d - 2); the mean-field normalisation of
:mod:`rieszflow.engine.energy.base`.
"""
from __future__ import annotations

import dataclasses

from rieszflow.engine._checks import check_choice, check_points, check_real
from rieszflow.engine.backend import namespace
from rieszflow.engine.energy.base import NORMALIZATIONS, Energy

__all__ = ["SortedCoulomb1D"]


@dataclasses.dataclass(frozen=True)
class SortedCoulomb1D(Energy):
    """Exact O(N log N) 1-D Coulomb interaction, :math:`g_{-1}(w) = -|w|`, by sorting.

    With :math:`n^<_i = \\#\\{j: x_j < x_i\\}`, :math:`n^>_i = \\#\\{j: x_j > x_i\\}` and the
    sorted positions :math:`x_{(0)} \\le \\dots \\le x_{(N-1)}`,

    .. math::

        \\sum_{i\\ne j}|x_i - x_j| = 2\\sum_k (2k - N + 1)\\,x_{(k)}, \\qquad
        \\sum_{j \\ne i}\\nabla g_{-1}(x_i - x_j) = n^>_i - n^<_i,

    with :math:`\\operatorname{sign}(0) = 0` for coincident particles (the subgradient
    of minimal norm; the O(N^2) reference returns NaN there).

    Parameters
    ----------
    lam : float, default 1.0
        Interaction strength :math:`\\lambda \\ge 0`.
    normalization : {"mean_field", "paper"}, default "mean_field"
        ``"mean_field"``: :math:`H = \\frac{\\lambda}{2N}\\sum_{i\\ne j} g_{-1}`, gradient
        :math:`\\frac{\\lambda}{N}(n^> - n^<)`; ``"paper"``:
        :math:`\\frac{\\lambda}{2N(N-1)}\\sum_{i\\ne j} g_{-1}` (paper 000, eq. (B.10)),
        gradient :math:`\\frac{\\lambda}{N(N-1)}(n^> - n^<)`.

    Raises
    ------
    ValueError
        If ``lam`` is negative or ``normalization`` unknown; at call time if
        ``omega`` is not of shape (N, 1) (or N < 2 for ``"paper"``).

    References
    ----------
    paper 000, eq. (B.10) (``s = -1 = d - 2``, the Coulomb kernel of the line);
    :func:`~rieszflow.engine.energy.riesz_energy_and_grad` (the O(N^2) reference it is tested against).
    """

    lam: float = 1.0
    normalization: str = "mean_field"

    def __post_init__(self):
        object.__setattr__(self, "lam", check_real("lam", self.lam, nonnegative=True))
        check_choice("normalization", self.normalization, NORMALIZATIONS)

    def _scale(self, n):
        if self.normalization == "paper":
            if n < 2:
                raise ValueError(f"omega must hold N >= 2 particles for the 1/(2N(N-1)) "
                                 f"normalisation, got N={n}")
            return self.lam / (n * (n - 1.0))
        return self.lam / n

    def _counts(self, omega):
        omega = check_points("omega", omega, d=1)
        xp = namespace(omega)
        x = omega[:, 0]
        xs = xp.sort(x)
        n_less = xp.searchsorted(xs, x, side="left")
        n_leq = xp.searchsorted(xs, x, side="right")
        return omega, xp, x, xs, n_less, n_leq

    def grad(self, omega):
        """Gradient :math:`\\partial H/\\partial x_i`, shape (N, 1), dtype of ``omega``.

        Parameters
        ----------
        omega : array, shape (N, 1)
            Particle positions on the line (NumPy or CuPy); N >= 2 for ``"paper"``.

        Returns
        -------
        array, shape (N, 1), dtype of ``omega``
            :math:`\\text{scale}\\,(n^>_i - n^<_i)`.
        """
        omega, xp, x, xs, n_less, n_leq = self._counts(omega)
        n = x.shape[0]
        n_greater = n - n_leq
        g = self._scale(n) * (n_greater - n_less).astype(omega.dtype)
        return g[:, None]

    def __call__(self, omega):
        """Energy, float64: :math:`-\\frac{\\text{scale}}{2}\\sum_{i\\ne j}|x_i - x_j|`.

        Parameters
        ----------
        omega : array, shape (N, 1)
            Particle positions on the line (NumPy or CuPy); N >= 2 for ``"paper"``.

        Returns
        -------
        float64 0-d array
            Energy value.
        """
        omega = check_points("omega", omega, d=1)
        xp = namespace(omega)
        n = omega.shape[0]
        xs = xp.sort(omega[:, 0].astype(xp.float64))
        k = xp.arange(n, dtype=xp.float64)
        pair_abs_sum = 2.0 * xp.sum((2.0 * k - n + 1.0) * xs)
        return -0.5 * self._scale(n) * pair_abs_sum

    def value_and_grad(self, omega):
        """``(self(omega), self.grad(omega))``.

        Parameters
        ----------
        omega : array, shape (N, 1)
            Particle positions on the line (NumPy or CuPy); N >= 2 for ``"paper"``.

        Returns
        -------
        value : float64 0-d array
            ``self(omega)``.
        grad : array, shape (N, 1), dtype of ``omega``
            ``self.grad(omega)``.
        """
        return self(omega), self.grad(omega)

    def per_particle(self, omega):
        """Potential felt by each particle, shape (N,), float64.

        ``"mean_field"``: :math:`-\\frac{\\lambda}{N}\\sum_{j\\ne i}|x_i - x_j|`;
        ``"paper"``: :math:`-\\frac{\\lambda}{N-1}\\sum_{j\\ne i}|x_i - x_j|`.

        Parameters
        ----------
        omega : array, shape (N, 1)
            Particle positions on the line (NumPy or CuPy); N >= 2 for ``"paper"``.

        Returns
        -------
        array, shape (N,), float64
            Potential felt by each particle.
        """
        omega, xp, x, xs, n_less, n_leq = self._counts(omega)
        n = x.shape[0]
        x64 = x.astype(xp.float64)
        c0 = xp.concatenate([xp.zeros(1, dtype=xp.float64), xp.cumsum(xs.astype(xp.float64))])
        s_less = c0[n_less]
        s_greater = c0[n] - c0[n_leq]
        dist_sum = n_less * x64 - s_less + s_greater - (n - n_leq) * x64
        per = self.lam / (n - 1.0) if self.normalization == "paper" else self.lam / n
        return -per * dist_sum
