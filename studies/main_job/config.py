"""Configuration of the main job (paper 000, App. F.2), a strict frozen dataclass."""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

__all__ = ["MainJobConfig", "SMOKE_OVERRIDES"]

_FEATURE_MAPS = ("favor", "elu", "softplus", "sigmoid2", "softmaxfeat", "cos2", "porf_softplus")
_ALIGNMENTS = ("onehot", "kta")
_QK = ("shared", "learned")
_ATTENTION = ("linear", "softmax")


@dataclasses.dataclass(frozen=True)
class MainJobConfig:
    """Every knob of the main job; unknown keys and bad values raise.

    Defaults follow paper 000, App. F.2 ("Experimental setup") except where the
    15-minute, 2-core budget of ``rieszflow run`` forces fewer epochs
    (``phase_a_epochs``, ``epochs``); the paper's full budget is
    ``--phase-a-epochs 10 --epochs 10``.

    Parameters
    ----------
    dataset : {"rt", "sst2"}
        Rotten Tomatoes (train/validation/test) or SST-2 (train minus a held-out
        validation slice / dev used as test, since GLUE test labels are private).
    feature_map : str
        Positive random-feature map of App. D (``engine.features``).
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
    epochs : int
        Phase B epochs (paper: 10).
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
    epochs: int = 10
    lr: float = 2e-4
    seed: int = 0
    backend: str = "numpy"
    dtype: str = "float32"
    train_limit: int = 0
    eval_limit: int = 0
    sst2_validation: int = 872

    def __post_init__(self):
        def choice(name, allowed):
            v = getattr(self, name)
            if v not in allowed:
                raise ValueError(f"{name}={v!r} is not allowed; choose one of {', '.join(allowed)}")

        choice("dataset", ("rt", "sst2"))
        choice("feature_map", _FEATURE_MAPS)
        choice("alignment", _ALIGNMENTS)
        choice("qk", _QK)
        choice("attention", _ATTENTION)
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
            if not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
                raise ValueError(f"{name}={v!r} must be a finite positive number")
        for name in ("lam", "floor"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ValueError(f"{name}={v!r} must be a finite non-negative number")
        if not (isinstance(self.s, (int, float)) and math.isfinite(self.s) and self.s > -2):
            raise ValueError(f"s={self.s!r} must be a finite Riesz exponent in (-2, inf)")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"dropout={self.dropout!r} must lie in [0, 1)")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}")
        if self.kernel and self.attention != "linear":
            raise ValueError("kernel=True (Phase A) needs attention='linear': softmax attention "
                             "has no feature particles to learn")
        if self.max_len < 2:
            raise ValueError(f"max_len={self.max_len} must be >= 2")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "MainJobConfig":
        """Build a config from a mapping; unknown keys raise ValueError naming them."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown config keys {unknown}; allowed: {sorted(known)}")
        return cls(**dict(d))

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of every field (the resolved configuration)."""
        return dataclasses.asdict(self)

    def replace(self, **changes) -> "MainJobConfig":
        """Copy with ``changes`` applied (validated; unknown keys raise)."""
        return self.from_dict({**self.to_dict(), **changes})

    @property
    def name(self) -> str:
        """Run name in the paper's table style, e.g. ``Kernel-softplus``."""
        if self.attention == "softmax":
            return "Vaswani-softmaxattn"
        prefix = "Kernel" if self.kernel else "Vanilla"
        suffix = "-WqWk" if self.qk == "learned" else ""
        return f"{prefix}-{self.feature_map}{suffix}"


#: What ``--smoke`` changes: a seconds-long run through every code path.
SMOKE_OVERRIDES = dict(m=16, d_model=32, d_ff=64, batch_size=32, phase_a_epochs=1, epochs=1,
                       train_limit=256, eval_limit=128, record_every=2, max_len=64)
