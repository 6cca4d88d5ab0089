"""The bundled model's training: paper 000's two-phase protocol as functions over a configuration.

Phase A learns the feature particles of every attention head by projected Langevin dynamics on the
Hamiltonian ``H = -V_seq + lam * W_{N,s}`` (kernel-target alignment plus Riesz repulsion), Phase B
freezes them and trains the rest of the linear-attention Transformer with cross-entropy.

Modules
-------
``config``
    :class:`MainJobConfig`, its presets (``SMOKE_OVERRIDES``, ``PERFORMER``, ``OPTIMIZERS``).
``objectives``
    Phase A's alignment objectives by name (``ALIGNMENTS``).
``train``
    :class:`MainJob` (Phase A, Phase B, checkpoints, the run file) and :func:`run_main_job`.
``runfiles``
    Reading a main-job file back: :func:`load_learned_kernel`, :func:`load_phase_a_setup`.

The main job's CLI (``rieszflow run``), the NLP tables, the Gibbs check, the learned-kernel KGD,
LUNA and the token flows all use this layer; none of them imports another study.

References
----------
"Random features as interacting particles" (paper 000 of this project), Alg. 1-2, eq. (4.3),
(C.4), App. F.2.
"""
from rieszflow.learning.config import (OPTIMIZERS, PERFORMER, SMOKE_OVERRIDES, MainJobConfig,
                                       performer_scales)
from rieszflow.learning.objectives import ALIGNMENTS
from rieszflow.learning.runfiles import PhaseASetup, load_learned_kernel, load_phase_a_setup
from rieszflow.learning.train import MainJob, alignment_gradients, load_data, run_main_job

__all__ = ["MainJobConfig", "SMOKE_OVERRIDES", "PERFORMER", "OPTIMIZERS", "performer_scales",
           "ALIGNMENTS", "MainJob", "run_main_job", "alignment_gradients", "load_data",
           "PhaseASetup", "load_learned_kernel", "load_phase_a_setup"]
