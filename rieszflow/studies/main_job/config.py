"""Configuration of the main job (paper 000, App. F.2), a strict frozen dataclass."""
from __future__ import annotations

import dataclasses
import math

from rieszflow.engine.features import ATTENTION_FEATURE_MAPS
from rieszflow.studies.base import StudyConfig

__all__ = ["MainJobConfig", "SMOKE_OVERRIDES"]

#: Feature maps of the kernel runs: the engine registry's positive maps (one edit in features.py adds one).
_FEATURE_MAPS = ATTENTION_FEATURE_MAPS
_ALIGNMENTS = ("onehot", "kta")
_QK = ("shared", "learned")
_ATTENTION = ("linear", "softmax")


@dataclasses.dataclass(frozen=True)
class MainJobConfig(StudyConfig):
    """Every knob of the main job; unknown keys and bad values raise.

    Defaults follow paper 000, App. F.2 ("Experimental setup") except
    ``phase_a_epochs`` (2 instead of "up to 10"): the paper's early stop at
    1e-6 cannot fire at beta = 50 (the Langevin noise alone moves particles by
    ~0.09 per step), and 2 epochs keep ``rieszflow run`` within 15 minutes on
    2 cores; ``--phase-a-epochs 10`` is the paper's full budget.

    Parameters
    ----------
    dataset : {"rt", "sst2"}
        Rotten Tomatoes (train/validation/test) or SST-2 (train minus a held-out
        validation slice / dev used as test, since GLUE test labels are private).
    feature_map : str or None
        Positive random-feature map of App. D (``engine.features``) for linear
        attention; must be None for softmax attention.
    kernel : bool
        Phase A (particle learning) on; False gives the "vanilla" run (Phase B only).
    attention : {"linear", "softmax"}
        Kernelized linear attention, or exact softmax attention (baseline).
    qk : {"shared", "learned"}
        ``Q = K = reshape(x)`` (the paper's feature-map variants) or learned W_Q, W_K.
    m : int
        Random features (particles) per head (paper: 256).
    d_model, n_heads, d_ff, n_layers, dropout, max_len : model sizes (paper: 128, 2, 256, 2, 0.1, 128).
    tau, floor : feature-map temperature and positive floor (App. D).
    embed_std : float
        Standard deviation of the token-embedding initialisation (not stated in
        the paper; see ``engine.attention.model.TransformerClassifier``).
    batch_size : int
        Paper: 64.
    phase_a_epochs : int
        Epochs of Langevin particle learning (paper: at most 10).
    eta, beta, lam, s : float
        Langevin step (2e-3), inverse temperature (50), repulsion strength (1e-3),
        Riesz exponent (0 = log repulsion), eq. (4.3) / F.2.
    clip_norm : float
        Clip of the scaled gradient eta-free drift N * grad H per head (paper: 10).
    radius : float
        Per-particle l2 norm bound of the projection (paper: 1.5).
    delta : float
        Early stop of Phase A when max_k |delta omega_k| < delta (paper: 1e-6).
    alignment : {"onehot", "kta"}
        Sequence-level alignment of eq. (C.4) with the one-hot label kernel, or
        centred kernel-target alignment (Cristianini et al. 2002).
    record_every : int
        Phase A steps between stored particle snapshots (energies are stored
        at every step).
    checkpoint_seconds : float
        Phase A writes a resumable checkpoint at the first step at least this many
        seconds after the previous one (and at every epoch end), so an interrupted
        first epoch resumes; 0 checkpoints after every step. Resume is bit-identical
        wherever the checkpoint falls.
    epochs : int
        Phase B epochs, >= 1 (paper: 10).
    lr : float
        Adam learning rate of Phase B (paper: 2e-4).
    seed : int
    backend : {"numpy", "cupy"}
    dtype : {"float32", "float64"}
    train_limit, eval_limit : int
        Use only the first ``n`` (shuffled with ``seed``) training / evaluation
        examples; 0 means all. Used by ``--smoke``.
    sst2_validation : int
        Size of the validation slice carved from SST-2 train.
    """

    config_label = "config"      # the name in error messages

    dataset: str = "rt"
    feature_map: str = "softplus"
    kernel: bool = True
    attention: str = "linear"
    qk: str = "shared"
    m: int = 256
    d_model: int = 128
    n_heads: int = 2
    d_ff: int = 256
    n_layers: int = 2
    dropout: float = 0.1
    max_len: int = 128
    tau: float = 1.0
    floor: float = 1e-6
    embed_std: float = 1.0
    batch_size: int = 64
    phase_a_epochs: int = 2
    eta: float = 2e-3
    beta: float = 50.0
    lam: float = 1e-3
    s: float = 0.0
    clip_norm: float = 10.0
    radius: float = 1.5
    delta: float = 1e-6
    alignment: str = "onehot"
    record_every: int = 5
    checkpoint_seconds: float = 30.0
    epochs: int = 10
    lr: float = 2e-4
    seed: int = 0
    backend: str = "numpy"
    dtype: str = "float32"
    train_limit: int = 0
    eval_limit: int = 0
    sst2_validation: int = 872

    def __post_init__(self):
        def is_real(v):
            return isinstance(v, (int, float)) and not isinstance(v, bool)

        def choice(name, allowed):
            v = getattr(self, name)
            if v not in allowed:
                raise ValueError(f"{name}={v!r} is not allowed; choose one of {', '.join(allowed)}")

        choice("dataset", ("rt", "sst2"))
        choice("attention", _ATTENTION)
        if not isinstance(self.kernel, bool):
            raise ValueError(f"kernel={self.kernel!r} must be a bool (True: Phase A on)")
        if self.attention == "linear":
            choice("feature_map", _FEATURE_MAPS)
        elif self.feature_map is not None:
            raise ValueError(f"feature_map={self.feature_map!r} is not used by softmax attention; "
                             f"pass feature_map=None")
        choice("alignment", _ALIGNMENTS)
        choice("qk", _QK)
        choice("backend", ("numpy", "cupy"))
        choice("dtype", ("float32", "float64"))
        for name in ("m", "d_model", "n_heads", "d_ff", "n_layers", "max_len", "batch_size",
                     "record_every"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name}={v!r} must be a positive integer")
        for name in ("phase_a_epochs", "epochs", "train_limit", "eval_limit", "seed",
                     "sst2_validation"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"{name}={v!r} must be a non-negative integer")
        for name in ("eta", "beta", "clip_norm", "radius", "delta", "lr", "tau", "embed_std"):
            v = getattr(self, name)
            if not is_real(v) or not math.isfinite(v) or v <= 0:
                raise ValueError(f"{name}={v!r} must be a finite positive number")
        for name in ("lam", "floor", "checkpoint_seconds"):
            v = getattr(self, name)
            if not is_real(v) or not math.isfinite(v) or v < 0:
                raise ValueError(f"{name}={v!r} must be a finite non-negative number")
        if not (is_real(self.s) and math.isfinite(self.s) and self.s > -2):
            raise ValueError(f"s={self.s!r} must be a finite Riesz exponent in (-2, inf)")
        if not (is_real(self.dropout) and 0 <= self.dropout < 1):
            raise ValueError(f"dropout={self.dropout!r} must lie in [0, 1)")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}")
        if self.kernel and self.attention != "linear":
            raise ValueError("kernel=True (Phase A) needs attention='linear': softmax attention "
                             "has no feature particles to learn")
        if self.kernel and self.phase_a_epochs == 0:
            raise ValueError("kernel=True with phase_a_epochs=0 would be a vanilla run under a "
                             "'Kernel-' name; set kernel=False (--vanilla) or phase_a_epochs >= 1")
        if self.kernel and self.m < 2:
            raise ValueError(f"m={self.m} particles per head: the Riesz repulsion of Phase A needs m >= 2")
        if self.epochs < 1:
            raise ValueError(f"epochs={self.epochs} must be >= 1 (Phase B selects the checkpoint "
                             f"on validation accuracy)")
        for name in ("train_limit", "eval_limit"):
            if getattr(self, name) == 1:
                raise ValueError(f"{name}=1 is not allowed: 0 (all examples) or >= 2")
        if self.dataset == "sst2" and not 1 <= self.sst2_validation < 67349:
            raise ValueError(f"sst2_validation={self.sst2_validation} must lie in [1, 67349) "
                             f"(examples carved from SST-2 train for model selection)")
        if self.max_len < 2:
            raise ValueError(f"max_len={self.max_len} must be >= 2")

    @property
    def name(self) -> str:
        """Run name in the paper's table style, e.g. ``Kernel-softplus``."""
        if self.attention == "softmax":
            return "Vaswani-softmaxattn" if self.qk == "learned" else "Softmax-shared-qk"
        prefix = "Kernel" if self.kernel else "Vanilla"
        suffix = "-WqWk" if self.qk == "learned" else ""
        return f"{prefix}-{self.feature_map}{suffix}"


#: What ``--smoke`` changes: a seconds-long run through every code path.
SMOKE_OVERRIDES = dict(m=16, d_model=32, d_ff=64, batch_size=32, phase_a_epochs=1, epochs=1,
                       train_limit=256, eval_limit=128, record_every=2, max_len=64)
