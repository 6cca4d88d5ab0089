"""Phase A's alignment objectives by name (paper 000, App. C.1, eq. C.4, and centred KTA).

The objectives themselves live in the engine
(:func:`rieszflow.engine.energy.alignment.onehot_alignment`,
:func:`rieszflow.engine.energy.alignment.kernel_target_alignment`); this is the main job's
registry of them (``--alignment``).
"""
from __future__ import annotations

from rieszflow.engine.energy.alignment import kernel_target_alignment, onehot_alignment

__all__ = ["ALIGNMENTS"]

#: ``--alignment`` name -> objective ``(P, y) -> (value, dvalue/dP)``.
ALIGNMENTS = {"onehot": onehot_alignment, "kta": kernel_target_alignment}
