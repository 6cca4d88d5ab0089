"""``rieszflow nlp``: paper 000's NLP tables (Tables 1, 2, 6, 8) as a sweep of main-job runs.

One sweep per dataset (``nlp-rt``, ``nlp-sst2`` and, given a GLUE folder, ``nlp-qqp``); one task
is one (variant, seed) main-job run (:class:`~rieszflow.learning.train.MainJob`). The variants
are the rows of Tables 6-8:

* learned-W_Q, W_K baselines: exact softmax attention (``Vaswani-softmaxattn``), FAVOR linear
  attention with learned W_Q, W_K (``Vanilla-favor-WqWk``), the Performer (FAVOR+ with orthogonal
  N(0, I) features and the d_k^(-1/4) data normaliser, :data:`~rieszflow.learning.config.PERFORMER`)
  and Linformer (projected length ``linformer_k``);
* for each positive feature map of the engine's registry, with ``Q = K = reshape(x)``: the vanilla
  run (Phase B only) and the kernel run (Phase A, then Phase B);
* the variant an audit of the main job asked for: Phase A after ``phase_a_after`` Phase B epochs
  (``Kernel-<map>-after<k>``), whose matched control is the same seed's vanilla run.

Every FAVOR run uses FAVOR's per-sequence max shift (``stabilise="seq"``), which cancels exactly
in normalised attention: with the unstabilised formula of App. D a tiny run's features underflowed
to 0/0 (NaN) within two epochs.

The main-job seed of a task is ``seed + trial``: every variant of one trial starts from the
same seed, so a vanilla run and its kernel run share the initial weights, the Phase B batches and
the dropout masks (the matched pairs of Table 2).

References
----------
Paper 000, Section 5 (Tables 1 and 2) and App. F.2 (Tables 6-8); McNemar (1947); Dietterich
(1998) for McNemar's test between classifiers.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import tempfile
from pathlib import Path

import numpy as np

from rieszflow.engine import stats
from rieszflow.engine.features import ATTENTION_FEATURE_MAPS
from rieszflow.config import StudyConfig, config_int
from rieszflow.studies.sweep import SweepSpec, Task
from rieszflow.learning.config import OPTIMIZERS
from rieszflow.engine.attention.metrics import METRIC_NAMES
from rieszflow.learning.config import PERFORMER, performer_scales
from rieszflow.learning.train import run_main_job

__all__ = ["NLPConfig", "QUICK_OVERRIDES", "PRESETS", "PHASE_A_CELLS", "VANILLA_FIELDS", "BASELINES", "variant_configs", "nlp_task", "specs",
           "task_config", "GRID_FIELDS", "table_rows", "format_detailed", "format_table1",
           "format_table2", "format_verdicts", "table_csv", "wall_seconds", "PAPER_TABLE2", "TABLE_METRICS"]

#: The learned-W_Q, W_K baselines of Tables 6-8, by their names in the tables.
BASELINES = ("Vaswani-softmaxattn", "Vanilla-favor-WqWk", "Performer", "Linformer")

#: Columns of Tables 6-8: (metric name in the main job's ``test_metrics``, column header, better).
TABLE_METRICS = (("accuracy", "Acc", "max"), ("f1_micro", "F1 mu", "max"), ("f1_macro", "F1 M", "max"),
                 ("f1_weighted", "F1 w", "max"), ("roc_auc", "ROC-AUC", "max"),
                 ("pr_auc", "PR-AUC", "max"), ("mcc", "MCC", "max"),
                 ("balanced_accuracy", "BalAcc", "max"), ("log_loss", "LogLoss", "min"),
                 ("brier", "Brier", "min"), ("ece", "ECE", "min"))

#: Paper 000, Table 2: accuracy change from matched vanilla to kernel (Q = K), per dataset and map
#: (sigmoid2 is not in the paper's Table 2).
PAPER_TABLE2 = {
    "sst2": {"favor": -0.0149, "elu": 0.0080, "softplus": -0.0046, "softmaxfeat": 0.0080,
             "cos2": -0.0023, "porf_softplus": 0.0046},
    "qqp": {"favor": -0.0018, "elu": 0.0034, "softplus": 0.0074, "softmaxfeat": 0.0108,
            "cos2": 0.0096, "porf_softplus": 0.0059},
    "rt": {"favor": -0.0235, "elu": 0.0253, "softplus": -0.0019, "softmaxfeat": 0.0385,
           "cos2": 0.0216, "porf_softplus": 0.0150},
}

_DATASETS = ("rt", "sst2", "qqp")


@dataclasses.dataclass(frozen=True)
class NLPConfig(StudyConfig):
    """Configuration of the NLP tables (defaults: the full protocol of paper 000, App. F.2).

    Fields not listed keep the main job's defaults (:class:`~rieszflow.learning.config.MainJobConfig`:
    hidden size 128, two heads, d_ff 256, two layers, dropout 0.1, max length 128, batch 64,
    eta 2e-3, beta 50, lam 1e-3, log repulsion, radius 1.5, lr 2e-4).

    Parameters
    ----------
    datasets : tuple of str
        Among "rt", "sst2" (bundled) and "qqp" (needs ``qqp_dir``); one sweep each.
    qqp_dir : str
        The GLUE QQP folder (train.tsv, dev.tsv); adds "qqp" to ``datasets`` when given. A
        relative path is made absolute (against the working directory): the tasks read it on
        workers that may run in another directory.
    feature_maps : tuple of str
        Positive maps of the engine registry (vanilla and kernel runs each); default all.
    baselines : tuple of str
        Subset of :data:`BASELINES`.
    late_maps : tuple of str
        Maps of the Phase-A-after-k variant (subset of ``feature_maps``); empty: none.
    phase_a_cells : tuple of str
        Cells of the Phase A grid (names of :data:`PHASE_A_CELLS`): for each map of
        ``feature_maps``, the kernel run with the cell's Phase A settings
        (``Kernel-<map>-<cell>``) and, where the cell changes the vanilla run too
        (:data:`VANILLA_FIELDS`), its own matched vanilla run (``Vanilla-<map>-<cell>``).
    cell_maps : tuple of str
        The maps the Phase A cells run on (a subset of ``feature_maps``); empty: every map of
        ``feature_maps``. The power preset runs its two noise controls on softmaxfeat only.
    phase_a_after : int
        k, the Phase B epochs before Phase A in the late variant (``1 <= k < epochs``).
    select_from : {"all", "after_phase_a"}
        Checkpoint selection of the late variant (``MainJobConfig.select_from``): any Phase B
        epoch (default; Table 2 then counts the seeds whose selected model predates Phase A),
        or only the epochs after Phase A.
    seeds : int
        Trials (main-job seeds ``seed .. seed + seeds - 1``); 3 in the paper.
    seed : int
        First main-job seed.
    epochs, phase_a_epochs : int
        Phase B epochs (10) and Phase A epochs (2, the main job's default; the paper allows
        up to 10 with an early stop that cannot fire at beta = 50).
    m : int
        Random features (particles) per head (256).
    linformer_k : int
        Projected length of Linformer (32).
    optimizer : {"adam", "adamw"}
        Phase B optimiser: App. F.2's Adam at a constant rate (default) or Section 5's AdamW
        with warm-up and cosine decay (``learning.config.OPTIMIZERS``).
    train_limit, eval_limit : int
        Subsample of the training / evaluation splits (0 = all).
    backend : {"numpy", "cupy"}
    """

    config_label = "nlp config"

    datasets: tuple = ("rt", "sst2")
    qqp_dir: str = ""
    feature_maps: tuple = ATTENTION_FEATURE_MAPS
    baselines: tuple = BASELINES
    late_maps: tuple = ATTENTION_FEATURE_MAPS
    phase_a_cells: tuple = ()
    cell_maps: tuple = ()
    phase_a_after: int = 2
    select_from: str = "all"
    seeds: int = 3
    seed: int = 0
    epochs: int = 10
    phase_a_epochs: int = 2
    m: int = 256
    linformer_k: int = 32
    optimizer: str = "adam"
    train_limit: int = 0
    eval_limit: int = 0
    backend: str = "numpy"

    def __post_init__(self):
        def subset(name, allowed, empty_ok=False):
            vals = tuple(getattr(self, name))
            bad = [v for v in vals if v not in allowed]
            if bad or len(set(vals)) != len(vals) or (not vals and not empty_ok):
                raise ValueError(f"{name}={vals!r}: need distinct values from {', '.join(allowed)}"
                                 + (f" (unknown: {bad})" if bad else ""))
            object.__setattr__(self, name, vals)

        subset("datasets", _DATASETS)
        subset("feature_maps", ATTENTION_FEATURE_MAPS, empty_ok=True)
        subset("baselines", BASELINES, empty_ok=True)
        subset("late_maps", self.feature_maps, empty_ok=True)
        subset("phase_a_cells", tuple(PHASE_A_CELLS), empty_ok=True)
        subset("cell_maps", self.feature_maps, empty_ok=True)
        if self.cell_maps and not self.phase_a_cells:
            raise ValueError(f"cell_maps={self.cell_maps!r} names the maps of the Phase A cells, but "
                             f"phase_a_cells is empty")
        if self.phase_a_cells and not self.feature_maps:
            raise ValueError(f"phase_a_cells={self.phase_a_cells!r} needs at least one of feature_maps")
        for cell in self.phase_a_cells:
            after = PHASE_A_CELLS[cell][0].get("phase_a_after", 0)
            if after and not after < self.epochs:
                raise ValueError(f"phase_a_cells contains {cell!r} (Phase A after {after} epochs), which "
                                 f"needs epochs > {after}; got epochs={self.epochs}")
        if not isinstance(self.qqp_dir, str):
            raise ValueError(f"qqp_dir={self.qqp_dir!r} must be a path string")
        if self.qqp_dir and not os.path.isabs(self.qqp_dir):     # the workers may run elsewhere
            object.__setattr__(self, "qqp_dir", os.path.abspath(self.qqp_dir))
        if self.qqp_dir and "qqp" not in self.datasets:
            object.__setattr__(self, "datasets", self.datasets + ("qqp",))
        if "qqp" in self.datasets and not self.qqp_dir:
            raise ValueError("datasets contains 'qqp' but qqp_dir is empty: QQP is not bundled; pass "
                             "--qqp-dir DIR (the GLUE QQP folder with train.tsv and dev.tsv)")
        if not (self.feature_maps or self.baselines):
            raise ValueError("feature_maps and baselines are both empty: the sweep would have no run")
        config_int("seeds", self.seeds, minimum=1)
        config_int("seed", self.seed, minimum=0)
        config_int("epochs", self.epochs, minimum=1)
        config_int("phase_a_epochs", self.phase_a_epochs, minimum=1)
        config_int("m", self.m, minimum=2)
        config_int("linformer_k", self.linformer_k, minimum=1)
        config_int("train_limit", self.train_limit, minimum=0)
        config_int("eval_limit", self.eval_limit, minimum=0)
        config_int("phase_a_after", self.phase_a_after, minimum=1)
        if self.late_maps and self.phase_a_after >= self.epochs:
            raise ValueError(f"phase_a_after={self.phase_a_after} must be < epochs={self.epochs} "
                             f"(Phase B continues after Phase A); or set late_maps=[]")
        if self.select_from not in ("all", "after_phase_a"):
            raise ValueError(f"select_from={self.select_from!r}: allowed all, after_phase_a")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer={self.optimizer!r}: allowed {', '.join(OPTIMIZERS)}")
        if self.backend not in ("numpy", "cupy"):
            raise ValueError(f"backend={self.backend!r}: allowed numpy, cupy")
        for name in ("train_limit", "eval_limit"):
            if getattr(self, name) == 1:
                raise ValueError(f"{name}=1 is not allowed: 0 (all examples) or >= 2")


#: ``--quick``: every variant of the tables at reduced size on the two bundled datasets: Phase B
#: 2 epochs, Phase A 1 epoch (after 1 Phase B epoch in the late variant), 64 particles per head,
#: 2,000 training and 500 validation / 500 test examples (seeded subsamples), 3 seeds.
QUICK_OVERRIDES = {"epochs": 2, "phase_a_epochs": 1, "phase_a_after": 1, "m": 64,
                   "train_limit": 2000, "eval_limit": 500}

#: The Phase A grid of issue 23: where could Phase A matter? Cell name -> (main-job overrides of
#: the kernel run, rationale). The reference cell is the paper-order kernel run itself
#: (``Kernel-<map>``: beta 50, lam 1e-3, alignment (C.4), Phase A first, radius 1.5).
PHASE_A_CELLS = {
    "cold": ({"beta": 500.0},
             "10x lower temperature: the Langevin noise sqrt(2 eta / beta) per step falls by sqrt(10), "
             "so the alignment drift, not the noise, moves the particles"),
    "repel": ({"lam": 0.1},
              "100x stronger Riesz repulsion: spreads the particles (feature diversity), the other "
              "half of the Hamiltonian"),
    "kta": ({"alignment": "kta"},
            "centred kernel-target alignment instead of the one-hot alignment (C.4): the other "
            "objective the main job offers"),
    "late": ({"phase_a_after": 2, "select_from": "after_phase_a"},
             "Phase A after 2 Phase B epochs, on trained token representations (at initialisation "
             "the tokens are random embeddings, so the alignment target carries little); the "
             "selected checkpoint is one after Phase A, so the model used the learned particles"),
    "noalign": ({"phase_a_control": "no_alignment"},
                "control (issue 36): the same Phase A steps, batches and noise with the alignment "
                "gradient off (repulsion and noise only); a gain that comes from learning must exceed it"),
    "jitter": ({"phase_a_control": "matched_jitter"},
               "control (issue 36): Phase A's particles replaced by a random isotropic perturbation of "
               "the initial ones that moved them as far in paired MMD^2 as Phase A did (per seed, layer "
               "and head); a gain that comes from learning must exceed it"),
    "wide": ({"radius": 3.0},
             "particle ball of radius 3 instead of 1.5: room for the particles to move (the "
             "projection onto the ball may pin them); changes the vanilla run's initial "
             "projection too, so the cell has its own matched vanilla run"),
}

#: Main-job fields that change a vanilla run too (the initial particles are projected onto the
#: ball of radius ``radius``): a cell that sets one gets its own matched vanilla run.
VANILLA_FIELDS = ("radius",)

#: ``--preset`` name -> field values (applied to the defaults; ``--config`` and ``--set`` override them).
#: ``power``: paper 000's central claim over 10 matched seeds on Rotten Tomatoes, softplus and the map
#: with the paper's largest Rotten Tomatoes gain (softmaxfeat, Table 2: +0.0385), at the main job's
#: default budget; ``phase-a``: the Phase A grid (:data:`PHASE_A_CELLS`) on softplus over 5 seeds.
PRESETS = {
    "power": {"datasets": ("rt",), "feature_maps": ("softplus", "softmaxfeat"), "baselines": (),
              "late_maps": (), "phase_a_cells": ("noalign", "jitter"), "cell_maps": ("softmaxfeat",),
              "seeds": 10},
    "phase-a": {"datasets": ("rt",), "feature_maps": ("softplus",), "baselines": (), "late_maps": (),
                "phase_a_cells": ("cold", "repel", "kta", "late", "wide"), "seeds": 5},
}

#: Fields that only say which tasks exist: left out of the configuration stored in every task file
#: (a cell's settings are fixed by its name in :data:`PHASE_A_CELLS`).
GRID_FIELDS = ("datasets", "feature_maps", "baselines", "late_maps", "phase_a_cells", "cell_maps", "seeds")


def task_config(cfg: NLPConfig) -> dict:
    """The configuration every task sees and stores: :class:`NLPConfig` without the grids.

    Parameters
    ----------
    cfg : NLPConfig

    Returns
    -------
    dict
    """
    return {k: v for k, v in cfg.to_dict().items() if k not in GRID_FIELDS}


def _main_job_config(config: dict, dataset: str, seed: int, **changes):
    from rieszflow.learning.config import OPTIMIZERS, MainJobConfig

    if changes.get("feature_map") == "favor":
        # one shift per sequence: exact in exact arithmetic (it cancels in normalised attention),
        # and it keeps the unstabilised map of App. D from underflowing to 0/0 during training
        changes.setdefault("stabilise", "seq")
    base = dict(dataset=dataset, qqp_dir=config["qqp_dir"] if dataset == "qqp" else "", seed=seed,
                epochs=config["epochs"], phase_a_epochs=config["phase_a_epochs"], m=config["m"],
                linformer_k=config["linformer_k"], train_limit=config["train_limit"],
                eval_limit=config["eval_limit"], backend=config["backend"],
                **OPTIMIZERS[config["optimizer"]])
    return MainJobConfig(**{**base, **changes})


def variant_configs(config: dict, dataset: str, seed: int, maps, baselines, late_maps, cells=(),
                    cell_maps=None) -> dict:
    """The main-job configuration of every variant, keyed by its table name.

    Parameters
    ----------
    config : dict
        :func:`task_config` of an :class:`NLPConfig`.
    dataset : str
        "rt", "sst2" or "qqp".
    seed : int
        Main-job seed.
    maps, baselines, late_maps : sequence of str
        Feature maps (vanilla and kernel runs), baselines (:data:`BASELINES`) and maps of the
        Phase-A-after-k variant.
    cells : sequence of str, optional
        Phase A grid cells (:data:`PHASE_A_CELLS`), each for every map of ``maps``.
    cell_maps : sequence of str, optional
        The maps the cells run on (default: every map of ``maps``).

    Returns
    -------
    dict
        Name (``MainJobConfig.name``; ``Kernel-<map>-<cell>`` and ``Vanilla-<map>-<cell>`` for
        the cells) to :class:`~rieszflow.learning.config.MainJobConfig`, in table order:
        baselines, then vanilla / kernel per map, then the late variants, then the cells.
    """
    out = {}
    for b in baselines:
        if b == "Vaswani-softmaxattn":
            cfg = _main_job_config(config, dataset, seed, kernel=False, attention="softmax",
                                   feature_map=None, qk="learned")
        elif b == "Vanilla-favor-WqWk":
            cfg = _main_job_config(config, dataset, seed, kernel=False, feature_map="favor", qk="learned")
        elif b == "Performer":
            cfg = _main_job_config(config, dataset, seed, **PERFORMER)
            cfg = cfg.replace(**performer_scales(cfg))
        else:
            cfg = _main_job_config(config, dataset, seed, kernel=False, attention="linformer",
                                   feature_map=None, qk="learned")
        out[b] = cfg
    for fm in maps:
        for kernel in (False, True):
            cfg = _main_job_config(config, dataset, seed, feature_map=fm, kernel=kernel)
            out[cfg.name] = cfg
    for fm in late_maps:
        cfg = _main_job_config(config, dataset, seed, feature_map=fm, kernel=True,
                               phase_a_after=config["phase_a_after"],
                               select_from=config.get("select_from", "all"))
        out[cfg.name] = cfg
    for cell in cells:
        changes = PHASE_A_CELLS[cell][0]
        for fm in (maps if cell_maps is None else [m for m in maps if m in cell_maps]):
            if any(k in VANILLA_FIELDS for k in changes):
                vanilla_changes = {k: v for k, v in changes.items() if k in VANILLA_FIELDS}
                out[f"Vanilla-{fm}-{cell}"] = _main_job_config(config, dataset, seed, feature_map=fm,
                                                               kernel=False, **vanilla_changes)
            out[f"Kernel-{fm}-{cell}"] = _main_job_config(config, dataset, seed, feature_map=fm,
                                                          kernel=True, **changes)
    return out


def _method_names(cfg: NLPConfig) -> tuple:
    return tuple(variant_configs(task_config(cfg), "rt", cfg.seed, cfg.feature_maps, cfg.baselines,
                                 cfg.late_maps, cfg.phase_a_cells, cell_maps=cfg.cell_maps or None))


def _phase_a_movement(run) -> tuple:
    """Mean over (layer, head) of the paired MMD^2 between the initial and the final particles, and
    its standard error (:func:`rieszflow.engine.measures.mmd2`); NaN without two omega records."""
    from rieszflow.engine.measures import mmd2

    if "omega" not in run or run["omega"].sizes.get("time", 0) < 2:
        return math.nan, math.nan
    om = run["omega"].values.astype(np.float64)                 # (time, layer, head, particle, coord)
    vals, ses = [], []
    for layer in range(om.shape[1]):
        for head in range(om.shape[2]):
            r = mmd2(om[0, layer, head], om[-1, layer, head], paired=True)
            vals.append(r.mmd2)
            ses.append(r.se)
    n = len(vals)
    return float(np.mean(vals)), float(math.sqrt(np.sum(np.square(ses))) / n)


#: Probe sizes of the per-task kernel distance (:class:`~rieszflow.learning.kernel_geometry.LearnedKernels`):
#: about 6 s per task at the default size (measured), against about 9 CPU-minutes of training.
KERNEL_PROBES = {"n_rot": 200, "n_nodes": 16, "n_tokens": 400, "n_noise": 2}


def _phase_a_kernel_distance(path, seed: int) -> dict:
    """How far Phase A moved the attention kernel: distances of the final to the initial kernel.

    Means over (layer, head) of
    :meth:`~rieszflow.learning.kernel_geometry.LearnedKernels.kgd_to_initial` at the last recorded Phase A
    step: the zonal KGD (Funk-Hecke part on S^(d_k - 1); the mean of the bias-corrected KGD^2
    estimates, its root, and the SE of that mean, estimated jointly over the probe rotations that
    every head shares), and the whole distance on the sphere and on
    held-out tokens each divided by the random-feature noise at the same m (the distance of the
    initial kernel to redraws of its law: a ratio near 1 or below means Phase A moved the kernel
    no further than redrawing the features would). NaN entries where the run has no token set
    (``phase_a_after > 0``); the caller records NaN for a head dimension below 3 (no sphere
    analysis on S^1)."""
    from rieszflow.learning.kernel_geometry import LearnedKernels, sphere_distance

    lk = LearnedKernels(path, seed=seed, **KERNEL_PROBES)
    last = lk.times[-1]
    heads = [(layer, head) for layer in range(lk.n_layers) for head in range(lk.n_heads)]
    rows = [lk.kgd_to_initial(last, layer, head) for layer, head in heads]
    # the mean of the heads' KGD^2 as one estimate over the shared probe rotations: the heads are
    # probed with the same rotations, so their estimates are correlated and the SE must be joint
    # (the heads' nodes side by side, each head's weights divided by the number of heads)
    final = np.concatenate([lk.sphere_values(lk.omega[-1, layer, head], layer) for layer, head in heads], axis=1)
    first = np.concatenate([lk.sphere_values(lk.omega[0, layer, head], layer) for layer, head in heads], axis=1)
    joint = sphere_distance(final, first, np.tile(lk.w, len(heads)) / len(heads))
    return {"kgd2": joint["kgd2"], "kgd2_se": joint["kgd2_se"], "kgd": math.sqrt(max(joint["kgd2"], 0.0)),
            "ratio_sphere": float(np.mean([r["ratio_sphere"] for r in rows])),
            "ratio_tokens": float(np.mean([r["ratio_tokens"] for r in rows]))}


def nlp_task(task: Task, config: dict, rng: np.random.Generator):
    """Run one (variant, seed) main-job task and return its results as a dataset.

    The main job writes its own HDF5 file in a temporary directory (removed afterwards); the
    task keeps the test metrics, the test predictions (for McNemar's test), the validation
    curve and the wall times. ``rng`` is unused: the variant's randomness is the main-job seed
    ``seed + trial`` (matched pairs, see the module docstring).

    Parameters
    ----------
    task : Task
        ``method`` is a variant name of :func:`variant_configs`; ``params`` holds ``dataset``.
    config : dict
        :func:`task_config` of an :class:`NLPConfig`.
    rng : numpy.random.Generator
        Unused.

    Returns
    -------
    xarray.Dataset
        ``test_metrics`` (metric), ``test_proba`` (example; P(label 1)), ``test_label``
        (example), ``val_accuracy`` (epoch), ``train_seconds``, ``phase_a_seconds``,
        ``phase_b_seconds``, ``best_epoch``, ``phase_a_mmd2`` and ``phase_a_mmd2_se`` (how far
        Phase A moved the particles), ``phase_a_kgd``, ``phase_a_kgd2``, ``phase_a_kgd2_se``,
        ``phase_a_kernel_ratio`` and ``phase_a_token_ratio`` (how far it moved the kernel,
        :func:`_phase_a_kernel_distance`); these are NaN for a vanilla run; the main job's configuration as attribute
        ``main_job_config`` (JSON).

    Raises
    ------
    ValueError
        If ``task.method`` is not a variant of this configuration.
    """
    import xarray as xr

    del rng
    dataset = dict(task.params)["dataset"]
    seed = config["seed"] + task.trial
    name = task.method
    maps = [m for m in ATTENTION_FEATURE_MAPS if name.split("-")[1:2] == [m]]
    late = maps if name.endswith(f"-after{config['phase_a_after']}") else []
    cells = [c for c in name.split("-")[2:3] if c in PHASE_A_CELLS]
    variants = variant_configs(config, dataset, seed, [] if late else maps,
                               [name] if name in BASELINES else [], late, cells)
    if name not in variants:
        raise ValueError(f"method={name!r} is not a variant of the NLP tables; allowed: the baselines "
                         f"{', '.join(BASELINES)}, Vanilla-<map>, Kernel-<map>, "
                         f"Kernel-<map>-after{config['phase_a_after']}, Kernel-<map>-<cell> "
                         f"(cells: {', '.join(PHASE_A_CELLS)})")
    cfg = variants[name]
    with tempfile.TemporaryDirectory(prefix="rieszflow-nlp-") as tmp:
        out = Path(tmp) / "run.h5"
        metrics = run_main_job(cfg, out, quiet=True)
        with xr.open_dataset(out, engine="h5netcdf") as run:
            proba = run["test_proba"].values[:, 1].astype(np.float64)
            label = run["test_label"].values.astype(np.int64)
            val = run["val_accuracy"].values.astype(np.float64)
            moved, moved_se = _phase_a_movement(run) if cfg.kernel else (math.nan, math.nan)
        kd = (_phase_a_kernel_distance(out, seed) if cfg.kernel and cfg.d_model // cfg.n_heads >= 3
              else dict.fromkeys(("kgd2", "kgd2_se", "kgd", "ratio_sphere", "ratio_tokens"), math.nan))
    one = {"units": "1"}
    ds = xr.Dataset(
        {"test_metrics": (("metric",), np.array([metrics[k] for k in METRIC_NAMES]),
                          {"long_name": "test-split metrics of the validation-selected checkpoint "
                                        "(log_loss in nats)", "units": "1"}),
         "test_proba": (("example",), proba, {"long_name": "predicted probability of label 1 on the "
                                                           "test split", **one}),
         "test_label": (("example",), label, {"long_name": "true test label", **one}),
         "val_accuracy": (("epoch",), val, {"long_name": "validation accuracy after each Phase B "
                                                         "epoch", **one}),
         "train_seconds": ((), metrics["train_seconds"], {"long_name": "training wall time "
                                                          "(Phase A + Phase B)", "units": "s"}),
         "phase_a_seconds": ((), metrics["phase_a_seconds"], {"long_name": "Phase A wall time",
                                                              "units": "s"}),
         "phase_b_seconds": ((), metrics["phase_b_seconds"], {"long_name": "Phase B wall time",
                                                              "units": "s"}),
         "phase_a_mmd2": ((), moved, {"long_name": "how far Phase A moved the particles: paired MMD^2 "
                                                   "(Gaussian kernel, median bandwidth) between the "
                                                   "initial and the final particles, mean over layers "
                                                   "and heads (NaN without Phase A)", "units": "1"}),
         "phase_a_mmd2_se": ((), moved_se, {"long_name": "jackknife standard error of phase_a_mmd2",
                                            "units": "1"}),
         "phase_a_kgd": ((), kd["kgd"], {"long_name": "how far Phase A moved the attention kernel: zonal "
                                                 "Kernel Geometry Divergence (Funk-Hecke part on the sphere) "
                                                 "of the final to the initial kernel, root of the mean "
                                                 "bias-corrected KGD^2 over layers and heads (NaN without "
                                                 "Phase A)", "units": "1"}),
         "phase_a_kgd2": ((), kd["kgd2"], {"long_name": "mean over layers and heads of the bias-corrected "
                                                     "KGD^2 estimate behind phase_a_kgd (may be negative)",
                                           "units": "1"}),
         "phase_a_kgd2_se": ((), kd["kgd2_se"], {"long_name": "standard error of phase_a_kgd2", "units": "1"}),
         "phase_a_kernel_ratio": ((), kd["ratio_sphere"], {"long_name": "L2 distance on the sphere of the "
                                                                        "final to the initial kernel divided "
                                                                        "by the random-feature noise at the "
                                                                        "same m, mean over layers and heads",
                                                           "units": "1"}),
         "phase_a_token_ratio": ((), kd["ratio_tokens"], {"long_name": "Hilbert-Schmidt distance on held-out "
                                                                       "tokens of the final to the initial "
                                                                       "kernel divided by the random-feature "
                                                                       "noise at the same m, mean over layers "
                                                                       "and heads (NaN without a token set)",
                                                          "units": "1"}),
         "best_epoch": ((), int(metrics["best_epoch"]), {"long_name": "Phase B epoch selected on "
                                                        "validation accuracy", **one})},
        coords={"metric": ("metric", np.array(METRIC_NAMES), {"long_name": "test metric name", **one}),
                "example": ("example", np.arange(label.size), {"long_name": "test example", **one}),
                "epoch": ("epoch", np.arange(1, val.size + 1), {"long_name": "Phase B epoch", **one})})
    ds.attrs["main_job_config"] = json.dumps(cfg.to_dict(), sort_keys=True)
    ds.attrs["main_job_seed"] = seed
    return ds


def specs(cfg: NLPConfig) -> list:
    """One sweep per dataset: ``nlp-<dataset>`` over the variants and ``seeds`` trials.

    Parameters
    ----------
    cfg : NLPConfig

    Returns
    -------
    list of SweepSpec
    """
    methods = _method_names(cfg)
    return [SweepSpec(name=f"nlp-{d}", function="rieszflow.studies.nlp.study:nlp_task",
                      methods=methods, grid={"dataset": (d,)}, trials=cfg.seeds,
                      config=task_config(cfg), root_seed=cfg.seed) for d in cfg.datasets]


# --------------------------------------------------------------------------- tables

def _metrics(ds, method):
    """(seeds, metrics) array of one method: NaN rows for missing tasks."""
    v = ds["test_metrics"].sel({"method": method}).values
    return v.reshape(-1, v.shape[-1])


def table_rows(ds) -> list:
    """Per-variant means and standard deviations over seeds, in table order.

    Parameters
    ----------
    ds : xarray.Dataset
        One merged ``nlp-<dataset>`` sweep (:func:`rieszflow.studies.sweep.open_sweep`).

    Returns
    -------
    list of dict
        ``name``, ``n`` (complete seeds), ``mean`` and ``sd`` (dicts over :data:`TABLE_METRICS`
        names plus ``train_seconds``); variants without a complete seed are left out.
    """
    names = [str(m) for m in ds["method"].values]
    metric_names = [str(m) for m in ds["metric"].values]
    rows = []
    for name in names:
        M = _metrics(ds, name)
        ok = ~np.isnan(M).any(axis=1)
        if not ok.any():
            continue
        secs = ds["train_seconds"].sel({"method": name}).values.reshape(-1)[ok]
        mean = {k: float(np.mean(M[ok, i])) for i, k in enumerate(metric_names)}
        sd = {k: float(np.std(M[ok, i], ddof=1)) if ok.sum() > 1 else float("nan")
              for i, k in enumerate(metric_names)}
        mean["train_seconds"], sd["train_seconds"] = float(np.mean(secs)), (
            float(np.std(secs, ddof=1)) if secs.size > 1 else float("nan"))
        rows.append({"name": name, "n": int(ok.sum()), "mean": mean, "sd": sd})
    return rows


def _pm(mean, sd, digits=4):
    return f"{mean:.{digits}f}" if not math.isfinite(sd) else f"{mean:.{digits}f} +- {sd:.{digits}f}"


def format_detailed(ds, dataset: str) -> str:
    """Tables 6-8 (one per dataset): every variant, every metric, mean +- sd over seeds.

    Parameters
    ----------
    ds : xarray.Dataset
        The merged ``nlp-<dataset>`` sweep.
    dataset : str
        Its dataset (for the title).

    Returns
    -------
    str
        A markdown table; the best mean of each column is bold.
    """
    rows = table_rows(ds)
    cols = [(k, h, b) for k, h, b in TABLE_METRICS] + [("train_seconds", "Train (s)", "min")]
    best = {}
    for k, _, b in cols:
        vals = [r["mean"][k] for r in rows]
        if vals:
            best[k] = (max if b == "max" else min)(vals)
    seeds = sorted({r["n"] for r in rows})
    lines = [f"Detailed test metrics, {dataset} (mean +- sd over {'/'.join(map(str, seeds))} seeds; "
             f"higher is better except LogLoss, Brier, ECE, train time; bold: best mean)", "",
             "| Model | " + " | ".join(h for _, h, _ in cols) + " |",
             "|---|" + "---|" * len(cols)]
    for r in rows:
        cells = []
        for k, _, _ in cols:
            d = 1 if k == "train_seconds" else 4
            c = _pm(r["mean"][k], r["sd"][k], d)
            cells.append(f"**{c}**" if r["mean"][k] == best[k] else c)
        lines.append(f"| {r['name']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def table_csv(ds, dataset: str) -> str:
    """The rows of :func:`format_detailed` as CSV (one row per variant, mean and sd columns).

    Parameters
    ----------
    ds : xarray.Dataset
        The merged ``nlp-<dataset>`` sweep.
    dataset : str
        Written in the first column.

    Returns
    -------
    str
        CSV text with a header line.
    """
    import csv
    import io

    keys = [k for k, _, _ in TABLE_METRICS] + ["train_seconds"]
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["dataset", "model", "n_seeds"] + [f"{k}_{s}" for k in keys for s in ("mean", "sd")])
    for r in table_rows(ds):
        w.writerow([dataset, r["name"], r["n"]] + [f"{r[s][k]:.6g}" for k in keys for s in ("mean", "sd")])
    return buf.getvalue()


def format_table1(merged: dict) -> str:
    """Table 1: per dataset, softmax attention, Linformer and Performer, the best vanilla and the
    best kernel Q = K models (mean test accuracy) and the best-calibrated kernel model (ECE).

    Parameters
    ----------
    merged : dict
        Dataset name to its merged sweep.

    Returns
    -------
    str
        A markdown table (Acc, MCC, LogLoss, Brier, ECE; means over seeds).
    """
    keys = ("accuracy", "mcc", "log_loss", "brier", "ece")
    lines = ["| Dataset | Model | Acc | MCC | LogLoss | Brier | ECE |", "|---|---|---|---|---|---|---|"]
    for dataset, ds in merged.items():
        rows = table_rows(ds)
        by = {r["name"]: r for r in rows}
        picked = [(by[b]["name"], by[b]) for b in ("Vaswani-softmaxattn", "Linformer", "Performer") if b in by]
        vanilla = [r for r in rows if r["name"].startswith("Vanilla-") and not r["name"].endswith("WqWk")]
        kernel = [r for r in rows if r["name"].startswith("Kernel-") and "-after" not in r["name"]]
        if vanilla:
            r = max(vanilla, key=lambda r: r["mean"]["accuracy"])
            picked.append((f"Best vanilla Q=K: {r['name'][8:]}", r))
        if kernel:
            r = max(kernel, key=lambda r: r["mean"]["accuracy"])
            picked.append((f"Best kernel Q=K: {r['name'][7:]}", r))
            r = min(kernel, key=lambda r: r["mean"]["ece"])
            picked.append((f"Best-calibrated kernel: {r['name'][7:]}", r))
        for label, r in picked:
            lines.append(f"| {dataset} | {label} | " + " | ".join(f"{r['mean'][k]:.4f}" for k in keys) + " |")
    return "\n".join(lines)


def _paired(ds, a: str, b: str) -> dict:
    """Matched comparison of variant ``b`` against ``a`` (same seeds): accuracy changes per seed,
    McNemar per seed and pooled over seeds, and a paired t-test across seeds
    (:mod:`rieszflow.engine.stats`)."""
    acc = list(ds["metric"].values).index("accuracy")
    Ma, Mb = _metrics(ds, a)[:, acc], _metrics(ds, b)[:, acc]
    ok = ~(np.isnan(Ma) | np.isnan(Mb))
    pa = ds["test_proba"].sel({"method": a}).values.reshape(Ma.size, -1)
    pb = ds["test_proba"].sel({"method": b}).values.reshape(Mb.size, -1)
    y = ds["test_label"].sel({"method": a}).values.reshape(Ma.size, -1)
    per_seed = []
    for i in np.flatnonzero(ok):
        per_seed.append(stats.mcnemar((pa[i] >= 0.5) == y[i], (pb[i] >= 0.5) == y[i])._asdict())
    d = (Mb - Ma)[ok]
    best_b = ds["best_epoch"].sel({"method": b}).values.reshape(-1)[ok]
    out = {"n": int(ok.sum()), "delta": d, "mcnemar": per_seed, "best_epoch": best_b}
    if per_seed:
        pooled = stats.mcnemar_counts(sum(t["a_only"] for t in per_seed), sum(t["b_only"] for t in per_seed),
                                      sum(t["n"] for t in per_seed))
        out["pooled"] = {"a_only": pooled.a_only, "b_only": pooled.b_only, "p_value": pooled.p_value}
    out["t_p"] = stats.paired_test(Mb[ok], Ma[ok], test="t").p_value if ok.sum() >= 2 else float("nan")
    return out


def format_table2(merged: dict, phase_a_after: int | None = None) -> str:
    """Table 2: matched vanilla-to-kernel accuracy changes per map, with paired tests.

    For each dataset and map: the mean change over seeds (kernel minus vanilla of the same
    seed) next to the paper's value, the per-seed changes, McNemar's exact test on the test
    predictions (discordant counts vanilla-only / kernel-only pooled over seeds, and the pooled
    p-value; the seeds share the test examples, so the pooled test treats the seeds' discordant
    pairs as independent, an approximation), and a paired t-test across seeds. The late variant
    (Phase A after k Phase B epochs) is compared with the same vanilla run; its last column counts
    the seeds whose validation-selected checkpoint is from an epoch before Phase A (that model
    never used learned particles).

    Parameters
    ----------
    merged : dict
        Dataset name to its merged sweep.
    phase_a_after : int or None
        k of the late variant, for the labels.

    Returns
    -------
    str
        A markdown table.
    """
    lines = ["| Dataset | Map | Variant | mean change | paper | per seed | McNemar v-only/k-only | "
             "McNemar p (pooled) | paired t p | checkpoint before Phase A |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for dataset, ds in merged.items():
        names = [str(m) for m in ds["method"].values]
        for fm in ATTENTION_FEATURE_MAPS:
            van = f"Vanilla-{fm}"
            if van not in names:
                continue
            for variant in (f"Kernel-{fm}", f"Kernel-{fm}-after{phase_a_after}"):
                if variant not in names:
                    continue
                r = _paired(ds, van, variant)
                if not r["n"]:
                    continue
                paper = PAPER_TABLE2.get(dataset, {}).get(fm) if variant == f"Kernel-{fm}" else None
                label = "paper order" if variant == f"Kernel-{fm}" else f"Phase A after {phase_a_after}"
                # late variant: seeds whose validation-selected epoch precedes Phase A (that model
                # never saw learned particles)
                before = "" if variant == f"Kernel-{fm}" else \
                    f"{int(np.sum(r['best_epoch'] <= phase_a_after))}/{r['n']}"
                pooled = r.get("pooled", {})
                lines.append(
                    f"| {dataset} | {fm} | {label} | {np.mean(r['delta']):+.4f} | "
                    f"{'' if paper is None else f'{paper:+.4f}'} | "
                    f"{' '.join(f'{x:+.4f}' for x in r['delta'])} | "
                    f"{pooled.get('a_only', '')}/{pooled.get('b_only', '')} | "
                    f"{pooled.get('p_value', float('nan')):.3g} | {r['t_p']:.3g} | {before} |")
    return "\n".join(lines)


def format_verdicts(merged: dict, phase_a_after: int | None = None, alpha: float = 0.05) -> str:
    """What the sweep says about the paper's NLP claims, each with its evidence.

    Claims checked per dataset: kernel learning changes accuracy relative to the matched vanilla
    run (Table 2) for each map (pooled McNemar at level ``alpha``), the best Q = K model is a
    kernel model (Table 1), and the late variant against the paper's order.

    Parameters
    ----------
    merged : dict
        Dataset name to its merged sweep.
    phase_a_after : int or None
        k of the late variant.
    alpha : float, default 0.05
        Level of the tests.

    Returns
    -------
    str
        One line per claim and dataset.
    """
    lines = []
    for dataset, ds in merged.items():
        names = [str(m) for m in ds["method"].values]
        sig_up, sig_down, n_maps, pos = [], [], 0, 0
        for fm in ATTENTION_FEATURE_MAPS:
            if f"Vanilla-{fm}" in names and f"Kernel-{fm}" in names:
                r = _paired(ds, f"Vanilla-{fm}", f"Kernel-{fm}")
                if not r["n"]:
                    continue
                n_maps += 1
                pos += int(np.mean(r["delta"]) > 0)
                p = r.get("pooled", {}).get("p_value", 1.0)
                if p < alpha:
                    (sig_up if np.mean(r["delta"]) > 0 else sig_down).append(fm)
        if n_maps:
            lines.append(f"{dataset}: kernel learning raised mean accuracy for {pos} of {n_maps} maps; "
                         f"significant (pooled McNemar p < {alpha}) gains: {sig_up or 'none'}, losses: "
                         f"{sig_down or 'none'}")
        rows = table_rows(ds)
        qk = [r for r in rows if r["name"].split("-")[0] in ("Vanilla", "Kernel")
              and not r["name"].endswith("WqWk") and "-after" not in r["name"]]
        if qk:
            best = max(qk, key=lambda r: r["mean"]["accuracy"])
            kind = "a kernel" if best["name"].startswith("Kernel-") else "a vanilla"
            lines.append(f"{dataset}: the best Q=K model by mean accuracy is {best['name']} "
                         f"({best['mean']['accuracy']:.4f}), {kind} model (paper: a kernel model "
                         f"on every dataset)")
        late = [fm for fm in ATTENTION_FEATURE_MAPS if f"Kernel-{fm}-after{phase_a_after}" in names
                and f"Kernel-{fm}" in names]
        if late:
            d_late = [np.mean(_paired(ds, f"Vanilla-{fm}", f"Kernel-{fm}-after{phase_a_after}")["delta"])
                      for fm in late]
            d_paper = [np.mean(_paired(ds, f"Vanilla-{fm}", f"Kernel-{fm}")["delta"]) for fm in late]
            lines.append(f"{dataset}: mean change against vanilla over {len(late)} maps: paper order "
                         f"{np.mean(d_paper):+.4f}, Phase A after {phase_a_after} epoch(s) "
                         f"{np.mean(d_late):+.4f}")
    return "\n".join(lines)


def wall_seconds(merged: dict) -> float:
    """Sum of the sweeps' wall times (attribute ``wall_seconds`` of each merged file).

    Parameters
    ----------
    merged : dict
        Dataset name to its merged sweep.

    Returns
    -------
    float
        Seconds; NaN when a sweep has no wall time recorded.
    """
    return float(sum(float(ds.attrs.get("wall_seconds", float("nan"))) for ds in merged.values()))

