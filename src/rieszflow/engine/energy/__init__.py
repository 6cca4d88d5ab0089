"""Energies of the feature particles: Riesz interaction, kernel-target alignment, external fields.

The chain is ``riesz_kernel(r, s) -> riesz_pair(w, s) -> riesz_energy(omega, s)``
and, for composition, energy objects with ``__call__`` (value), ``grad``
(shape ``(N, d)``), ``value_and_grad`` and ``per_particle`` that add up::

    H = RFFAlignmentEnergy(X, y) + RieszEnergy(s=1.0, lam=0.1)   # eq. (2.2), "paper" normalisation
    H(omega), H.grad(omega)

See :mod:`~rieszflow.engine.energy.base` for the two normalisation conventions ("paper",
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
    "ENERGIES",
    "make_energy",
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

#: Energies by name: the registry that studies and configs choose from. Adding an energy is
#: one entry here (a class with ``__call__``, ``grad``, ``value_and_grad`` and ``per_particle``,
#: see :class:`Energy`); :func:`make_energy` validates its parameters by the class's own fields.
ENERGIES = {
    "riesz": RieszEnergy,
    "coulomb1d": SortedCoulomb1D,
    "external": ExternalPotential,
    "rff_alignment": RFFAlignmentEnergy,
}


def make_energy(name, **params):
    """Build the energy registered as ``name`` from keyword parameters.

    Parameters
    ----------
    name : str
        One of :data:`ENERGIES`: "riesz", "coulomb1d", "external", "rff_alignment".
    **params
        The class's constructor parameters (e.g. ``s``, ``lam``, ``normalization`` for
        "riesz"; ``X``, ``y``, ``b`` for "rff_alignment").

    Returns
    -------
    Energy
        Energies add up: ``make_energy("rff_alignment", X=X, y=y) + make_energy("riesz", s=0.0,
        lam=0.5)`` is the Hamiltonian of eq. (2.2).

    Raises
    ------
    ValueError
        If ``name`` is unknown or a parameter is not one of the class's (the message lists the
        allowed ones), or as the class raises for out-of-range values.

    References
    ----------
    Paper 000, eq. (2.2) (H = -alignment + lam * Riesz energy).
    """
    import dataclasses
    import inspect

    if not isinstance(name, str) or name not in ENERGIES:
        raise ValueError(f"unknown energy name={name!r}; allowed: {', '.join(ENERGIES)}")
    cls = ENERGIES[name]
    if dataclasses.is_dataclass(cls):
        allowed = [f.name for f in dataclasses.fields(cls) if f.init]
    else:
        allowed = [p for p in inspect.signature(cls).parameters if p != "self"]
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise ValueError(f"make_energy({name!r}): unknown parameter(s) {unknown}; allowed: "
                         f"{', '.join(allowed)}")
    return cls(**params)
