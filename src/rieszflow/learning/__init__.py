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
``checkpoint``
    The checksummed checkpoint ``<out>.ckpt.npz`` of a run: :func:`read_checkpoint`,
    :func:`write_checkpoint`, :class:`CheckpointError`.
``runfiles``
    Reading a main-job file back: :func:`load_learned_kernel`, :func:`load_phase_a_setup`.

The main job's CLI (``rieszflow run``), the NLP tables, the Gibbs check, the learned-kernel KGD,
LUNA and the token flows all use this layer; none of them imports another study.

References
----------
"Random features as interacting particles" (paper 000 of this project), Alg. 1-2, eq. (4.3),
(C.4), App. F.2.
"""
from importlib import import_module as _import_module

#: Public name -> its module (loaded on first access, PEP 562: the CLI's ``--help`` reads the
#: configuration's registries without importing the trainer).
_API = {
    **dict.fromkeys(["MainJobConfig", "SMOKE_OVERRIDES", "PERFORMER", "OPTIMIZERS", "performer_scales"],
                    "rieszflow.learning.config"),
    "ALIGNMENTS": "rieszflow.learning.objectives",
    **dict.fromkeys(["PhaseASetup", "load_learned_kernel", "load_phase_a_setup", "format_metrics",
                     "stored_metrics", "main_job_summary"], "rieszflow.learning.runfiles"),
    **dict.fromkeys(["CheckpointError", "checkpoint_path", "read_checkpoint", "write_checkpoint"],
                    "rieszflow.learning.checkpoint"),
    **dict.fromkeys(["MainJob", "run_main_job", "alignment_gradients", "load_data"], "rieszflow.learning.train"),
}

__all__ = list(_API)


def __getattr__(name):
    if name in _API:
        value = getattr(_import_module(_API[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'rieszflow.learning' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_API])
