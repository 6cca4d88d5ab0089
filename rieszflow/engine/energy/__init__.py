"""Energies of the feature particles: Riesz interaction, kernel-target alignment, external fields.

The chain is ``riesz_kernel(r, s) -> riesz_pair(w, s) -> riesz_energy(omega, s)``
and, for composition, energy objects with ``__call__`` (value), ``grad``
(shape ``(N, d)``), ``value_and_grad`` and ``per_particle`` that add up::

    H = RFFAlignmentEnergy(X, y) + RieszEnergy(s=1.0, lam=0.1)   # eq. (2.2), "paper" normalisation
    H(omega), H.grad(omega)

See :mod:`engine.energy.base` for the two normalisation conventions ("paper",
used with ``grad_scale = N``; "mean_field", used with ``grad_scale = 1``).

References
----------
paper 000, eq. (2.2), (2.3), (4.1), (B.4)-(B.10).
"""
from rieszflow.engine.energy.alignment import (
    RFFAlignmentEnergy,
    alignment_energy,
    alignment_energy_and_grad,
    alignment_energy_grad,
    alignment_potential,
    alignment_potential_and_grad,
    alignment_potential_grad,
    hamiltonian,
    hamiltonian_and_grad,
    kernel_target_alignment,
    rff_alignment_energy,
    rff_alignment_energy_and_grad,
    rff_alignment_energy_grad,
    rff_hamiltonian,
)
from rieszflow.engine.energy.base import NORMALIZATIONS, Energy, ExternalPotential, SumEnergy
from rieszflow.engine.energy.coulomb1d import SortedCoulomb1D
from rieszflow.engine.energy.interaction import Interaction, check_s, riesz_kernel
from rieszflow.engine.energy.riesz import (
    RieszEnergy,
    riesz_energy,
    riesz_energy_and_grad,
    riesz_energy_grad,
    riesz_pair,
    riesz_potential,
)

__all__ = [
    "NORMALIZATIONS",
    "Energy",
    "ExternalPotential",
    "Interaction",
    "RFFAlignmentEnergy",
    "RieszEnergy",
    "SortedCoulomb1D",
    "SumEnergy",
    "alignment_energy",
    "alignment_energy_and_grad",
    "alignment_energy_grad",
    "alignment_potential",
    "alignment_potential_and_grad",
    "alignment_potential_grad",
    "check_s",
    "hamiltonian",
    "hamiltonian_and_grad",
    "kernel_target_alignment",
    "rff_alignment_energy",
    "rff_alignment_energy_and_grad",
    "rff_alignment_energy_grad",
    "rff_hamiltonian",
    "riesz_energy",
    "riesz_energy_and_grad",
    "riesz_energy_grad",
    "riesz_kernel",
    "riesz_pair",
    "riesz_potential",
]
