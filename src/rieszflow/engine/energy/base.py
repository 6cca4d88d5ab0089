"""Energies that add up: the :class:`Energy` interface, :class:`SumEnergy`, :class:`ExternalPotential`.

An energy maps a particle configuration ``omega`` of shape ``(N, d)`` to a
float64 scalar and provides its exact gradient with respect to every particle.

Normalisation conventions
-------------------------
Every energy carries a ``normalization`` attribute, one of

``"paper"``
    intensive, O(1) in N, as the Hamiltonian of paper 000, eq. (2.2)/(B.3):
    one-body terms are averaged, :math:`\\frac1N \\sum_k V(\\omega_k)`, and pair
    terms use :math:`\\frac{1}{2N(N-1)} \\sum_{k \\ne l}`. The Langevin step then
    multiplies the gradient by ``grad_scale = N`` (paper 000, eq. (4.3)/(B.11)),
    and the drift on particle k is
    :math:`-\\nabla V(\\omega_k) - \\frac{\\lambda}{N-1}\\sum_{l\\ne k}\\nabla g(\\omega_k-\\omega_l)`
    (paper 000, eq. (A.7)).
``"mean_field"``
    extensive, O(N), as in particles_pde_reference.md (preamble):
    :math:`H = \\sum_i V(x_i) + \\frac{\\lambda}{2N}\\sum_{i\\ne j} g(x_i-x_j)`, used with
    ``grad_scale = 1``; the drift is
    :math:`-\\nabla V(x_i) - \\frac{\\lambda}{N}\\sum_{j\\ne i}\\nabla g(x_i-x_j)`.

The two drifts differ only by the factor N/(N-1) on the interaction.
:class:`SumEnergy` refuses to add energies of different normalisations.

Per-particle energy
-------------------
``per_particle(omega)[k]`` is the potential felt by particle k when the others
are frozen, :math:`U[\\mu_N^{(-k)}](\\omega_k)` of paper 000, eq. (A.5)/(A.7):
``V(omega_k)`` for a one-body term and
:math:`\\frac{\\lambda}{N-1}\\sum_{l \\ne k} g(\\omega_k - \\omega_l)` ("paper") or
:math:`\\frac{\\lambda}{N}\\sum_{l \\ne k} g` ("mean_field") for the Riesz term. Its
gradient in :math:`\\omega_k` is ``grad_scale`` times the k-th row of ``grad``.
It is the single-particle energy of the Gibbs weights of Algorithm 2
(:func:`~rieszflow.engine.simulate.gibbs_resample`).
"""
from __future__ import annotations

import abc
import dataclasses
from typing import Callable

from rieszflow.engine._checks import check_choice, check_points
from rieszflow.engine.backend import namespace

__all__ = ["Energy", "SumEnergy", "ExternalPotential", "NORMALIZATIONS"]

NORMALIZATIONS = ("paper", "mean_field")


class Energy(abc.ABC):
    """Interface of a system energy :math:`H(\\omega_1, \\dots, \\omega_N)`.

    Subclasses define ``normalization``, :meth:`__call__`, :meth:`grad` and
    :meth:`per_particle`; :meth:`value_and_grad` may be overridden when the two
    share work. Energies add with ``+`` into a :class:`SumEnergy`.
    """

    normalization: str

    @abc.abstractmethod
    def __call__(self, omega):
        """Energy value.

        Parameters
        ----------
        omega : array, shape (N, d)
            Particle positions (NumPy or CuPy).

        Returns
        -------
        float64 0-d array (NumPy scalar on the host)
        """

    @abc.abstractmethod
    def grad(self, omega):
        """Gradient :math:`\\partial H / \\partial \\omega_k`.

        Parameters
        ----------
        omega : array, shape (N, d)
            Particle positions (NumPy or CuPy).

        Returns
        -------
        array, shape (N, d)
            Gradient with respect to every particle.
        """

    @abc.abstractmethod
    def per_particle(self, omega):
        """Potential felt by each particle (see module docstring).

        Parameters
        ----------
        omega : array, shape (N, d)
            Particle positions (NumPy or CuPy).

        Returns
        -------
        array, shape (N,), float64
            Per-particle energies.
        """

    def value_and_grad(self, omega):
        """``(self(omega), self.grad(omega))``.

        Parameters
        ----------
        omega : array, shape (N, d)
            Particle positions (NumPy or CuPy).

        Returns
        -------
        value : float64 0-d array
            ``self(omega)``.
        grad : array, shape (N, d)
            ``self.grad(omega)``.
        """
        return self(omega), self.grad(omega)

    def __add__(self, other):
        if not isinstance(other, Energy):
            return NotImplemented
        return SumEnergy((self, other))


@dataclasses.dataclass(frozen=True, eq=False)
class SumEnergy(Energy):
    """Sum of energies of one normalisation, e.g. :math:`H_N = \\mathcal{E}_N + \\lambda\\mathcal{W}_{N,s}`.

    Parameters
    ----------
    terms : sequence of Energy
        At least one term; nested sums are flattened.

    Raises
    ------
    TypeError
        If a term is not an :class:`Energy`.
    ValueError
        If ``terms`` is empty or mixes normalisations.

    References
    ----------
    paper 000, eq. (2.2) and (B.3).
    """

    terms: tuple

    def __post_init__(self):
        flat = []
        for t in tuple(self.terms):
            if not isinstance(t, Energy):
                raise TypeError(f"terms must be Energy instances, got {type(t).__name__}")
            flat.extend(t.terms if isinstance(t, SumEnergy) else (t,))
        if not flat:
            raise ValueError("terms must contain at least one Energy, got none")
        norms = {t.normalization for t in flat}
        if len(norms) > 1:
            raise ValueError(f"terms mix normalizations {sorted(norms)}; build every term with the "
                             "same normalization ('paper' or 'mean_field')")
        object.__setattr__(self, "terms", tuple(flat))

    @property
    def normalization(self):
        return self.terms[0].normalization

    def __call__(self, omega):
        """Sum of the terms' values.

        Parameters
        ----------
        omega : array, shape (N, d)
            Particle positions (NumPy or CuPy).

        Returns
        -------
        float64 0-d array
            Sum of the terms' values.
        """
        total = self.terms[0](omega)
        for t in self.terms[1:]:
            total = total + t(omega)
        return total

    def grad(self, omega):
        """Sum of the terms' gradients.

        Parameters
        ----------
        omega : array, shape (N, d)
            Particle positions (NumPy or CuPy).

        Returns
        -------
        array, shape (N, d)
            Sum of the terms' gradients.
        """
        total = self.terms[0].grad(omega)
        for t in self.terms[1:]:
            total = total + t.grad(omega)
        return total

    def value_and_grad(self, omega):
        """Sum of the terms' ``value_and_grad``.

        Parameters
        ----------
        omega : array, shape (N, d)
            Particle positions (NumPy or CuPy).

        Returns
        -------
        value : float64 0-d array
            Sum of the terms' values.
        grad : array, shape (N, d)
            Sum of the terms' gradients.
        """
        value, grad = self.terms[0].value_and_grad(omega)
        for t in self.terms[1:]:
            v, g = t.value_and_grad(omega)
            value, grad = value + v, grad + g
        return value, grad

    def per_particle(self, omega):
        """Sum of the terms' per-particle energies.

        Parameters
        ----------
        omega : array, shape (N, d)
            Particle positions (NumPy or CuPy).

        Returns
        -------
        array, shape (N,), float64
            Sum of the terms' per-particle energies.
        """
        total = self.terms[0].per_particle(omega)
        for t in self.terms[1:]:
            total = total + t.per_particle(omega)
        return total


@dataclasses.dataclass(frozen=True, eq=False)
class ExternalPotential(Energy):
    """One-body energy of an external field, :math:`\\sum_k V(\\omega_k)` or its mean.

    Parameters
    ----------
    V : callable
        ``V(omega) -> (N,)`` potential values at each particle.
    gradV : callable
        ``gradV(omega) -> (N, d)`` its gradient at each particle.
    normalization : {"paper", "mean_field"}, default "paper"
        ``"paper"``: :math:`\\frac1N\\sum_k V(\\omega_k)` (the alignment energy
        :math:`\\mathcal{E}_N = \\int V d\\mu_N`, paper 000, eq. (A.32));
        ``"mean_field"``: :math:`\\sum_k V(\\omega_k)` (particles_pde_reference.md).

    Raises
    ------
    TypeError
        If ``V`` or ``gradV`` is not callable.
    ValueError
        If ``normalization`` is unknown, or (at call time) ``V``/``gradV``
        return arrays of the wrong shape.

    References
    ----------
    paper 000, eq. (4.1), (A.5), (E.4); particles_pde_reference.md (preamble).
    """

    V: Callable
    gradV: Callable
    normalization: str = "paper"

    def __post_init__(self):
        for name in ("V", "gradV"):
            if not callable(getattr(self, name)):
                raise TypeError(f"{name} must be callable, got {getattr(self, name)!r}")
        check_choice("normalization", self.normalization, NORMALIZATIONS)

    def per_particle(self, omega):
        """``V(omega)`` as float64, shape ``(N,)``.

        Parameters
        ----------
        omega : array, shape (N, d)
            Particle positions (NumPy or CuPy).

        Returns
        -------
        array, shape (N,), float64
            ``V(omega)``.

        Raises
        ------
        ValueError
            If ``V`` does not return shape ``(N,)``.
        """
        omega = check_points("omega", omega)
        xp = namespace(omega)
        v = xp.asarray(self.V(omega), dtype=xp.float64)
        if v.shape != (omega.shape[0],):
            raise ValueError(f"V(omega) must return shape ({omega.shape[0]},), got {tuple(v.shape)}")
        return v

    def __call__(self, omega):
        """:math:`\\frac1N\\sum_k V` ("paper") or :math:`\\sum_k V` ("mean_field").

        Parameters
        ----------
        omega : array, shape (N, d)
            Particle positions (NumPy or CuPy).

        Returns
        -------
        float64 0-d array
            Mean ("paper") or sum ("mean_field") of ``V(omega)``.
        """
        v = self.per_particle(omega)
        xp = namespace(v)
        return xp.mean(v) if self.normalization == "paper" else xp.sum(v)

    def grad(self, omega):
        """``gradV(omega) / N`` ("paper") or ``gradV(omega)`` ("mean_field").

        Parameters
        ----------
        omega : array, shape (N, d)
            Particle positions (NumPy or CuPy).

        Returns
        -------
        array, shape (N, d)
            ``gradV(omega) / N`` ("paper") or ``gradV(omega)`` ("mean_field").

        Raises
        ------
        ValueError
            If ``gradV`` does not return the shape of ``omega``.
        """
        omega = check_points("omega", omega)
        xp = namespace(omega)
        g = xp.asarray(self.gradV(omega))
        if g.shape != omega.shape:
            raise ValueError(f"gradV(omega) must return shape {tuple(omega.shape)}, got {tuple(g.shape)}")
        return g / omega.shape[0] if self.normalization == "paper" else g
