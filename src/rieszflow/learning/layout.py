"""The HDF5 layout of a main-job run file: its dimensions and variables (README, "HDF5 layout").

Every variable has ``long_name`` and ``units``; the record dimensions (``time``, ``step``,
``epoch``, ``batch``) grow as the run appends, the fixed ones are sized by the configuration.
"""
from __future__ import annotations

import numpy as np

__all__ = ["define_layout"]


def define_layout(w, cfg, model, align_text: str) -> None:
    """Declare the dimensions and variables of a main-job file on an open writer.

    Parameters
    ----------
    w : rieszflow.engine.storage.TrajectoryWriter
        The run file's writer, open for writing.
    cfg : rieszflow.learning.config.MainJobConfig
        The run's configuration (layers, heads, feature rows, attention kind).
    model : rieszflow.engine.attention.model.TransformerClassifier
        The built model (its particle sets and fixed feature phases).
    align_text : str
        ``"alignment: <definition>"``: the part after ``": "`` is the ``alignment_energy``
        variable's ``long_name``.
    """
    omega_names = list(model.particle_names())
    L, H = cfg.n_layers, cfg.n_heads
    dk = cfg.d_model // cfg.n_heads
    m = cfg.feature_rows if cfg.attention == "linear" else 1
    if cfg.attention == "linear":                 # particle sets per layer: H, or 1 (LUNA)
        H = int(model.params[omega_names[0]].shape[0])
    idx = {"units": "1"}
    w.dimension("layer", L, coords=np.arange(L), attrs={"long_name": "encoder layer index", **idx})
    w.dimension("head", H, coords=np.arange(H), attrs={"long_name": "attention head index", **idx})
    w.dimension("particle", m, coords=np.arange(m),
                attrs={"long_name": "feature particle (random feature) index k", **idx})
    w.dimension("coord", dk, coords=np.arange(dk),
                attrs={"long_name": "coordinate of a particle in R^{d_head}", **idx})
    w.dimension("time", None, dtype="i8",
                attrs={"long_name": "Phase A Langevin step of the snapshot", "units": "1"})
    w.dimension("step", None, dtype="i8", attrs={"long_name": "Phase A Langevin step", "units": "1"})
    w.dimension("epoch", None, dtype="i8", attrs={"long_name": "Phase B epoch (1-based)", "units": "1"})
    w.dimension("batch", None, dtype="i8", attrs={"long_name": "Phase B optimiser step", "units": "1"})
    w.variable("omega", ("time", "layer", "head", "particle", "coord"), dtype="f4",
               attrs={"long_name": "feature particles Omega (rows omega_k)",
                      "units": "1",
                      "comment": "dimensionless: frequencies of the feature map acting on x / tau",
                      "source": "paper 000, eq. (4.3)"})
    for name, ln in (("alignment_energy", align_text.split(": ", 1)[1]),
                     ("repulsion_energy", "sum over layers, heads of W_{m,s}, eq. (2.3)"),
                     ("hamiltonian", "alignment_energy + lam * repulsion_energy, eq. (2.2)"),
                     ("max_displacement", "max_k |delta omega_k| of the step"),
                     ("drift_norm", "largest per-head norm of m * grad H before clipping")):
        w.variable(name, ("step",), attrs={"long_name": ln, "units": "1"})
    fixed = [fm for fm in getattr(model, "feature_maps", []) if "b" in getattr(fm, "fixed_names", ())]
    if fixed and len(fixed) == L:
        # Fixed (non-learned) phases/biases of the feature maps, drawn once from the seed:
        # needed to rebuild the learned kernel from this file (e.g. rieszflow token-flow).
        w.variable("feature_bias", ("layer", "particle"),
                   data=np.stack([np.asarray(fm.b, dtype=np.float64) for fm in fixed]),
                   attrs={"long_name": "fixed phases/biases b of each layer's feature map",
                          "units": "1"})
    w.variable("batch_loss", ("batch",),
               attrs={"long_name": "Phase B cross-entropy of the mini-batch, in nats",
                      "units": "1"})
    # nats (natural-log units) are not a UDUNITS unit: units "1", the log base in long_name
    for name, ln, unit in (("train_loss", "Phase B training cross-entropy (epoch mean), in nats",
                            "1"),
                           ("train_accuracy", "Phase B training accuracy (epoch)", "1"),
                           ("val_loss", "validation cross-entropy, in nats", "1"),
                           ("val_accuracy", "validation accuracy", "1")):
        w.variable(name, ("epoch",), attrs={"long_name": ln, "units": unit})
