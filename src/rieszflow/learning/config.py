"""Configuration of the main job (paper 000, App. F.2), a strict frozen dataclass."""
from __future__ import annotations

import dataclasses
import math

from rieszflow.config import StudyConfig
from rieszflow.engine.attention.model import ATTENTIONS
from rieszflow.engine.features import FEATURE_MAPS, LINEAR_ATTENTION_MAPS
from rieszflow.learning.objectives import ALIGNMENTS

__all__ = ["MainJobConfig", "PHASE_A_CONTROLS", "SMOKE_OVERRIDES", "PERFORMER", "OPTIMIZERS", "performer_scales"]

#: Feature maps of the kernel runs: every map the engine's linear attention accepts (the positive
#: particle maps of paper 000, paper 001's LUNA and its Hedgehog and Cosformer baselines).
_FEATURE_MAPS = LINEAR_ATTENTION_MAPS
_ENVELOPES = ("none", "gate")
_ALIGNMENTS = tuple(ALIGNMENTS)
_QK = ("shared", "learned")
#: Values of ``MainJobConfig.phase_a_control``: Phase A as stated, and its two noise controls.
PHASE_A_CONTROLS = ("none", "no_alignment", "matched_jitter")
_ATTENTION = ATTENTIONS
_DATASETS = ("rt", "sst2", "qqp")
_FEATURE_INITS = ("default", "iid", "orthogonal")
_STABILISE = ("none", "seq")
_SCHEDULES = ("constant", "warmup_cosine")

#: Phase B optimisers: App. F.2's Adam at a constant rate, and Section 5's AdamW with linear
#: warm-up and cosine decay (weight decay 0.01 and 10% warm-up are not stated by the paper; they
#: are PyTorch's AdamW default and a common choice).
OPTIMIZERS = {"adam": dict(optimizer="adam", weight_decay=0.0, schedule="constant"),
              "adamw": dict(optimizer="adamw", weight_decay=0.01, schedule="warmup_cosine",
                            warmup_fraction=0.1)}
_OPTIMIZERS = tuple(OPTIMIZERS)


@dataclasses.dataclass(frozen=True)
class MainJobConfig(StudyConfig):
    """Every knob of the main job; unknown keys and bad values raise.

    Defaults follow paper 000, App. F.2 ("Experimental setup") except
    ``phase_a_epochs`` (2 instead of "up to 10"): the paper's early stop at
    1e-6 cannot fire at beta = 50 (the Langevin noise alone moves particles by
    ~0.09 per step), and 2 epochs keep ``rieszflow run`` within 15 minutes on
    2 cores; ``--phase-a-epochs 10`` is the paper's full budget.

    The optimiser of Phase B: App. F.2 says Adam with learning rate 2e-4, Section 5
    says AdamW with linear warm-up and cosine decay. The default is F.2's constant-rate
    Adam (the appendix is the detailed protocol, and it is what every stored result
    of this project used); ``optimizer="adamw", schedule="warmup_cosine"`` (CLI
    ``--optimizer adamw``) is Section 5's.

    Parameters
    ----------
    dataset : {"rt", "sst2", "qqp"}
        Rotten Tomatoes (train/validation/test); SST-2 or QQP (train minus a
        held-out validation slice / the GLUE dev split used as test, since GLUE
        test labels are private). QQP is not bundled: it needs ``qqp_dir``.
    qqp_dir : str
        Folder of the GLUE QQP task (``train.tsv``, ``dev.tsv``); required by, and
        only allowed with, ``dataset="qqp"``.
    feature_map : str or None
        Positive random-feature map of App. D (``engine.features``) for linear
        attention; must be None for softmax and Linformer attention.
    kernel : bool
        Phase A (particle learning) on; False gives the "vanilla" run (Phase B only).
    attention : {"linear", "softmax", "linformer"}
        Kernelized linear attention, exact softmax attention (baseline), or
        Linformer attention (baseline; Wang et al. 2020, arXiv:2006.04768).
    qk : {"shared", "learned"}
        ``Q = K = reshape(x)`` (the paper's feature-map variants) or learned W_Q, W_K.
    m : int
        Random features (particles) per head (paper: 256). For the maps of paper 001
        it is the feature budget D per head, so every map is compared at the same D:
        LUNA has ``m / luna_channels`` projections (its particles), Hedgehog and
        Cosformer ``m / 2`` rows.
    luna_channels : int
        LUNA's L, the outputs of its scalar MLP psi (paper 001: 8); must divide ``m``.
    luna_hidden : int
        Hidden width of LUNA's scalar MLP (paper 001's listing: 64).
    luna_envelope : {"none", "gate"}
        LUNA without gate (paper 001's default) or with the token-wise channel gate.
    dwc_kernel : int
        Kernel size of the 1-D depthwise convolution on the values, added to the output
        of linear attention (paper 001's "DWC", read as PolaFormer's); 0: off.
    d_model, n_heads, d_ff, n_layers, dropout, max_len : model sizes (paper: 128, 2, 256, 2, 0.1, 128).
    linformer_k : int
        Projected sequence length k of Linformer attention (the paper does not
        state it; 32 = max_len / 4). Used only by ``attention="linformer"``.
    tau, floor : feature-map temperature and positive floor (App. D).
    feature_init : {"default", "iid", "orthogonal"}
        Initial law of the particles: the map's own default (orthogonal blocks
        for porf_softplus, i.i.d. Gaussian rows otherwise), or forced.
    omega_scale : float
        ``E |omega_k|^2 = omega_scale^2`` at initialisation (``engine.features``;
        ``sqrt(d_k)`` gives N(0, I), the Performer's law).
    stabilise : {"none", "seq"}
        FAVOR's exponent shift (``engine.features.FavorFeatureMap``); only
        for ``feature_map="favor"``.
    project_init : bool
        Project the initial particles onto the ball of radius ``radius`` (the
        domain of Phase A). False only for runs without Phase A (the Performer
        baseline, whose N(0, I) features are not confined to a ball).
    redraw_every : int
        Phase B optimiser steps between redraws of the random features from their
        initial law (the Performer's feature redrawing); 0 keeps them fixed. Only
        for runs without Phase A.
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
        seconds after the previous one (and at every epoch end); 0 checkpoints after
        every step. It bounds the work a SIGKILL loses: SIGINT and SIGTERM checkpoint
        the last completed step anyway, and the initial state is checkpointed when the
        file is created. Resume is bit-identical wherever the checkpoint falls. Phase B
        checkpoints at the end of each epoch only: an interrupted Phase B epoch is rerun
        from its start on resume (still bit-identical; at most one epoch is repeated).
    phase_a_control : {"none", "no_alignment", "matched_jitter"}
        Controls that separate what Phase A learns from what its noise does (issue 36 of this
        project; paper 000 has no such control). ``"none"``: Phase A as the paper states it.
        ``"no_alignment"``: the same Phase A steps, batches and noise with the alignment term
        of the drift set to zero, so the particles move by the Riesz repulsion and the Langevin
        noise only (``H = lam * W_{m,s}``). ``"matched_jitter"``: Phase A runs as usual, only
        to measure per (layer, head) how far it moved the particles (the paired MMD^2 of
        :func:`rieszflow.engine.measures.mmd2` between the particles before and after it);
        the particles are then set to the initial ones plus isotropic Gaussian noise (projected
        onto the ball), its scale chosen per head by bisection so that the same MMD^2 is
        reached. Phase B then trains with these randomly perturbed features. Needs
        ``kernel=True`` and a random-feature map (no learned map).
    phase_a_after : int
        Phase B epochs run *before* Phase A (0: the paper's order, Phase A on the
        untrained network). With ``k > 0`` the run trains k epochs of Phase B,
        then runs Phase A on the partly trained representations, then the
        remaining ``epochs - k`` Phase B epochs; the matched control is the
        vanilla run of the same seed (same Phase B batches and dropout masks).
    select_from : {"all", "after_phase_a"}
        Which Phase B epochs the validation-selected checkpoint may come from.
        ``"all"`` (default; paper 000 does not say): every epoch, so with
        ``phase_a_after = k`` the selected model can be one of the first k
        epochs, trained before Phase A moved the particles (the NLP study counts
        such seeds). ``"after_phase_a"``: only epochs after Phase A, so a
        Kernel-after-k result is always a model with the learned particles.
        Identical to ``"all"`` when ``phase_a_after = 0``.
    epochs : int
        Phase B epochs, >= 1 (paper: 10).
    lr : float
        Peak learning rate of Phase B (paper: 2e-4).
    optimizer : {"adam", "adamw"}
        Adam (App. F.2) or AdamW with decoupled weight decay (Section 5).
    weight_decay : float
        L2 (adam) or decoupled (adamw) weight decay, >= 0.
    schedule : {"constant", "warmup_cosine"}
        Constant rate, or linear warm-up over ``warmup_fraction`` of the Phase B
        steps followed by cosine decay to 0 (Section 5).
    warmup_fraction : float
        Fraction of the Phase B optimiser steps spent warming up, in [0, 1);
        used by ``schedule="warmup_cosine"``.
    seed : int
    backend : {"numpy", "cupy"}
    dtype : {"float32", "float64"}
    train_limit, eval_limit : int
        Use only the first ``n`` (shuffled with ``seed``) training / evaluation
        examples; 0 means all. Used by ``--smoke``.
    sst2_validation : int
        Size of the validation slice carved from SST-2 train.
    qqp_validation : int
        Size of the validation slice carved from QQP train.
    """

    config_label = "config"      # the name in error messages

    dataset: str = "rt"
    qqp_dir: str = ""
    feature_map: str = "softplus"
    kernel: bool = True
    attention: str = "linear"
    qk: str = "shared"
    m: int = 256
    luna_channels: int = 8
    luna_hidden: int = 64
    luna_envelope: str = "none"
    dwc_kernel: int = 0
    d_model: int = 128
    n_heads: int = 2
    d_ff: int = 256
    n_layers: int = 2
    dropout: float = 0.1
    max_len: int = 128
    linformer_k: int = 32
    tau: float = 1.0
    floor: float = 1e-6
    feature_init: str = "default"
    omega_scale: float = 1.0
    stabilise: str = "none"
    project_init: bool = True
    redraw_every: int = 0
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
    phase_a_control: str = "none"
    phase_a_after: int = 0
    select_from: str = "all"
    epochs: int = 10
    lr: float = 2e-4
    optimizer: str = "adam"
    weight_decay: float = 0.0
    schedule: str = "constant"
    warmup_fraction: float = 0.1
    seed: int = 0
    backend: str = "numpy"
    dtype: str = "float32"
    train_limit: int = 0
    eval_limit: int = 0
    sst2_validation: int = 872
    qqp_validation: int = 5000

    def __post_init__(self):
        def is_real(v):
            return isinstance(v, (int, float)) and not isinstance(v, bool)

        def choice(name, allowed):
            v = getattr(self, name)
            if v not in allowed:
                raise ValueError(f"{name}={v!r} is not allowed; choose one of {', '.join(allowed)}")

        choice("dataset", _DATASETS)
        choice("attention", _ATTENTION)
        choice("select_from", ("all", "after_phase_a"))
        for name in ("kernel", "project_init"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name}={getattr(self, name)!r} must be a bool")
        if not isinstance(self.qqp_dir, str):
            raise ValueError(f"qqp_dir={self.qqp_dir!r} must be a path string")
        if self.dataset == "qqp" and not self.qqp_dir:
            raise ValueError("dataset='qqp' needs qqp_dir (CLI --qqp-dir): the folder of the GLUE "
                             "QQP task with train.tsv and dev.tsv; QQP is not bundled")
        if self.dataset != "qqp" and self.qqp_dir:
            raise ValueError(f"qqp_dir={self.qqp_dir!r} is only used with dataset='qqp' "
                             f"(dataset is {self.dataset!r})")
        if self.attention == "linear":
            choice("feature_map", _FEATURE_MAPS)
        elif self.feature_map is not None:
            raise ValueError(f"feature_map={self.feature_map!r} is not used by {self.attention} "
                             f"attention; pass feature_map=None")
        choice("feature_init", _FEATURE_INITS)
        choice("luna_envelope", _ENVELOPES)
        for name in ("luna_channels", "luna_hidden"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name}={v!r} must be a positive integer")
        if not isinstance(self.dwc_kernel, int) or isinstance(self.dwc_kernel, bool) or self.dwc_kernel < 0:
            raise ValueError(f"dwc_kernel={self.dwc_kernel!r} must be a non-negative integer (0: off)")
        if self.dwc_kernel and self.attention != "linear":
            raise ValueError(f"dwc_kernel={self.dwc_kernel} is a branch of linear attention "
                             f"(attention is {self.attention!r})")
        if self.feature_map == "luna" and self.m % self.luna_channels:
            raise ValueError(f"m={self.m} (the feature budget D) must be a multiple of "
                             f"luna_channels={self.luna_channels}: LUNA has D / L projections")
        if self.feature_map in ("hedgehog", "cosformer") and self.m % 2:
            raise ValueError(f"m={self.m} (the feature budget D) must be even for {self.feature_map} "
                             f"(D = 2 x rows)")
        choice("stabilise", _STABILISE)
        choice("optimizer", _OPTIMIZERS)
        choice("schedule", _SCHEDULES)
        if self.stabilise != "none" and self.feature_map != "favor":
            raise ValueError(f"stabilise={self.stabilise!r} applies to feature_map='favor' only "
                             f"(feature_map is {self.feature_map!r})")
        choice("alignment", _ALIGNMENTS)
        choice("qk", _QK)
        choice("backend", ("numpy", "cupy"))
        choice("dtype", ("float32", "float64"))
        for name in ("m", "d_model", "n_heads", "d_ff", "n_layers", "max_len", "batch_size",
                     "record_every", "linformer_k"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name}={v!r} must be a positive integer")
        for name in ("phase_a_epochs", "epochs", "train_limit", "eval_limit", "seed",
                     "sst2_validation", "qqp_validation", "phase_a_after", "redraw_every"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"{name}={v!r} must be a non-negative integer")
        for name in ("eta", "beta", "clip_norm", "radius", "delta", "lr", "tau", "embed_std",
                     "omega_scale"):
            v = getattr(self, name)
            if not is_real(v) or not math.isfinite(v) or v <= 0:
                raise ValueError(f"{name}={v!r} must be a finite positive number")
        for name in ("lam", "floor", "checkpoint_seconds", "weight_decay"):
            v = getattr(self, name)
            if not is_real(v) or not math.isfinite(v) or v < 0:
                raise ValueError(f"{name}={v!r} must be a finite non-negative number")
        if not (is_real(self.s) and math.isfinite(self.s) and self.s > -2):
            raise ValueError(f"s={self.s!r} must be a finite Riesz exponent in (-2, inf)")
        if not (is_real(self.dropout) and 0 <= self.dropout < 1):
            raise ValueError(f"dropout={self.dropout!r} must lie in [0, 1)")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}")
        if not (is_real(self.warmup_fraction) and 0 <= self.warmup_fraction < 1):
            raise ValueError(f"warmup_fraction={self.warmup_fraction!r} must lie in [0, 1)")
        if self.kernel and self.attention != "linear":
            raise ValueError(f"kernel=True (Phase A) needs attention='linear': {self.attention} "
                             f"attention has no feature particles to learn")
        if self.kernel and not self.project_init:
            raise ValueError("project_init=False is allowed only without Phase A (kernel=False): "
                             "Phase A's particles live in the ball of radius `radius`")
        if self.redraw_every and (self.kernel or self.attention != "linear"):
            raise ValueError(f"redraw_every={self.redraw_every} redraws random features, which only "
                             f"a linear-attention run without Phase A has (kernel=False)")
        choice("phase_a_control", PHASE_A_CONTROLS)
        if self.phase_a_control != "none" and (not self.kernel or self.learned_map):
            raise ValueError(f"phase_a_control={self.phase_a_control!r} is a control of Phase A: it "
                             f"needs kernel=True and a random-feature map (feature_map="
                             f"{self.feature_map!r}, kernel={self.kernel})")
        if self.phase_a_after and not self.kernel:
            raise ValueError(f"phase_a_after={self.phase_a_after} places Phase A after some Phase B "
                             f"epochs; it needs kernel=True")
        if self.phase_a_after >= max(self.epochs, 1):
            raise ValueError(f"phase_a_after={self.phase_a_after} must be < epochs={self.epochs} "
                             f"(Phase B must continue after Phase A)")
        if self.kernel and self.phase_a_epochs == 0:
            raise ValueError("kernel=True with phase_a_epochs=0 would be a vanilla run under a "
                             "'Kernel-' name; set kernel=False (--vanilla) or phase_a_epochs >= 1")
        if self.kernel and self.feature_rows < 2:
            raise ValueError(f"{self.feature_rows} particles per head (m={self.m}): the Riesz repulsion "
                             f"of Phase A needs at least 2")
        if self.epochs < 1:
            raise ValueError(f"epochs={self.epochs} must be >= 1 (Phase B selects the checkpoint "
                             f"on validation accuracy)")
        for name in ("train_limit", "eval_limit"):
            if getattr(self, name) == 1:
                raise ValueError(f"{name}=1 is not allowed: 0 (all examples) or >= 2")
        if not self.qqp_validation >= 1:
            raise ValueError(f"qqp_validation={self.qqp_validation} must be >= 1")
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
        if self.attention == "linformer":
            return "Linformer"
        if (self.feature_map == "favor" and self.qk == "learned" and not self.kernel
                and self.feature_init == "orthogonal"):
            return "Performer"
        prefix = "Kernel" if self.kernel else "Vanilla"
        suffix = "-WqWk" if self.qk == "learned" else ""
        after = f"-after{self.phase_a_after}" if self.phase_a_after else ""
        control = {"none": "", "no_alignment": "-noalign", "matched_jitter": "-jitter"}[self.phase_a_control]
        return f"{prefix}-{self.feature_map}{suffix}{after}{control}"

    @property
    def feature_rows(self) -> int:
        """Rows of each feature map's particle matrix omega for the feature budget ``m``, as the map
        declares (``FeatureMap.rows_for``): ``m``, ``m / luna_channels`` for LUNA, ``m / 2`` for
        Hedgehog and Cosformer; ``m`` without a feature map."""
        cls = FEATURE_MAPS.get(self.feature_map)
        return self.m if cls is None else cls.rows_for(self.m, channels=self.luna_channels)

    @property
    def learned_map(self) -> bool:
        """Whether the feature map has learned parameters besides its particles (LUNA, Hedgehog):
        Phase B then trains the particles too (jointly, as paper 001 does)."""
        return self.attention == "linear" and bool(getattr(FEATURE_MAPS.get(self.feature_map),
                                                           "learned", False))

    def feature_options(self) -> dict:
        """Keyword options of ``engine.features.make_feature_map`` for this run.

        Returns
        -------
        dict
            ``tau``, ``floor``, ``omega_scale``, and ``init`` / ``stabilise`` when they
            differ from the map's default; ``check_finite=False`` on CuPy (the check would
            synchronise with the device at every call; Phase A checks the particles at every
            record); empty for softmax and Linformer attention.
        """
        if self.attention != "linear":
            return {}
        opts = {"tau": self.tau, "floor": self.floor}
        if self.omega_scale != 1.0:
            opts["omega_scale"] = self.omega_scale
        if self.feature_init != "default":
            opts["init"] = self.feature_init
        if self.stabilise != "none":
            opts["stabilise"] = self.stabilise
        if self.backend == "cupy":
            opts["check_finite"] = False
        if self.feature_map == "luna":
            opts.update(channels=self.luna_channels, hidden=self.luna_hidden, envelope=self.luna_envelope)
        return opts


#: What ``--smoke`` changes: a seconds-long run through every code path.
SMOKE_OVERRIDES = dict(m=16, d_model=32, d_ff=64, batch_size=32, phase_a_epochs=1, epochs=1,
                       train_limit=256, eval_limit=128, record_every=2, max_len=64)


#: The Performer baseline (Choromanski et al. 2021, "Rethinking attention with Performers",
#: arXiv:2009.14794): FAVOR+ positive features with learned W_Q, W_K, orthogonal N(0, I) features
#: (omega_scale = sqrt(d_k), chi row norms), the data normaliser d_k^(-1/4) on q and k (tau =
#: sqrt(d_k) for d_k = 64, the paper's head size), a per-sequence max shift for stability, no
#: ball projection, features fixed (redraw_every = 0; the Performer paper also redraws them).
#: d_k is fixed by the model sizes, so the two sqrt(d_k) entries are filled in by
#: :func:`performer_scales` from the configuration's d_model / n_heads.
PERFORMER = dict(kernel=False, attention="linear", feature_map="favor", qk="learned",
                 feature_init="orthogonal", stabilise="seq", project_init=False)


def performer_scales(cfg: MainJobConfig) -> dict:
    """The d_k-dependent entries of the Performer baseline for ``cfg``'s model sizes.

    Parameters
    ----------
    cfg : MainJobConfig
        Its ``d_model`` and ``n_heads`` give the head size ``d_k``.

    Returns
    -------
    dict
        ``tau = sqrt(d_k)`` (the data normaliser ``d_k^(-1/4)`` on q and k, so that the
        features estimate ``exp(q . k / sqrt(d_k))``, the softmax kernel of scaled
        dot-product attention) and ``omega_scale = sqrt(d_k)`` (features N(0, I_{d_k})).

    References
    ----------
    Choromanski et al. (2021), arXiv:2009.14794, Lemma 1 and section 2.4.
    """
    r = math.sqrt(cfg.d_model // cfg.n_heads)
    return {"tau": r, "omega_scale": r}


def _info(units: str = "-", allowed: str | None = None) -> dict:
    return {"units": units} if allowed is None else {"units": units, "allowed": allowed}


#: Units and allowed values of the fields whose checks in ``MainJobConfig.__post_init__`` are not
#: stated by a validator or a documented set of values, for ``rieszflow run --show-config``
#: (:func:`rieszflow.config.describe_config`). Dimensionless quantities have units ``"1"``.
MainJobConfig.field_info = {
    **{k: _info("-", "an integer >= 1") for k in ("n_heads", "n_layers", "luna_channels", "luna_hidden")},
    "m": _info("features per head", "an integer >= 1 (>= 2 particles per head with Phase A)"),
    "d_model": _info("-", "an integer >= 1, divisible by n_heads"),
    "d_ff": _info("-", "an integer >= 1"),
    "max_len": _info("tokens", "an integer >= 2"),
    "linformer_k": _info("tokens", "an integer >= 1"),
    "dwc_kernel": _info("tokens", "an integer >= 0 (0: off)"),
    "batch_size": _info("examples", "an integer >= 1"),
    "record_every": _info("steps", "an integer >= 1"),
    "redraw_every": _info("steps", "an integer >= 0 (0: fixed features)"),
    "phase_a_epochs": _info("epochs", "an integer >= 0 (>= 1 with kernel=true)"),
    "epochs": _info("epochs", "an integer >= 1"),
    "phase_a_after": _info("epochs", "an integer >= 0, < epochs"),
    "train_limit": _info("examples", "0 (all) or an integer >= 2"),
    "eval_limit": _info("examples", "0 (all) or an integer >= 2"),
    "sst2_validation": _info("examples", "an integer in [1, 67349)"),
    "qqp_validation": _info("examples", "an integer >= 1"),
    "seed": _info("-", "an integer >= 0"),
    "checkpoint_seconds": _info("s", "a real number >= 0"),
    **{k: _info("1", "a real number > 0") for k in ("eta", "beta", "clip_norm", "radius", "delta", "lr",
                                                    "tau", "embed_std", "omega_scale")},
    **{k: _info("1", "a real number >= 0") for k in ("lam", "floor", "weight_decay")},
    "s": _info("1", "a real number > -2"),
    "dropout": _info("1", "a real number in [0, 1)"),
    "warmup_fraction": _info("1", "a real number in [0, 1)"),
}
