"""The mini Long Range Arena of paper 001's spec (P3): data, methods at D = 64, one training run.

A run trains the bundled Transformer (:class:`~rieszflow.engine.attention.model.TransformerClassifier`)
in the mini LRA configuration (2 pre-LN layers, width 64, 2 heads of 32, FFN 128, learned
positions, dropout 0.1, mean pooling; AdamW (0.9, 0.999, eps 1e-6, weight decay 0), linear
warm-up over 5% of the steps then linear decay, gradient clipping by value at 1.0, batch 32)
for a fixed number of steps, selects the checkpoint with the best validation accuracy
(evaluated every ``eval_every`` steps) and evaluates the test split once with it.

Deviation from the spec's backbone: the classifier is the model's linear head on the pooled
representation (not 64 -> 128 -> C).

References
----------
Shahbazi et al. (2025), LUNA (paper 001), section 5.1 and Table 1; paper 001 spec, sections
2.1 and 5.2 (P3); Tay et al. (2021), "Long Range Arena", arXiv:2011.04006.
"""
from __future__ import annotations

import functools
import math
import time

import numpy as np
from rieszflow.engine.attention import data
from rieszflow.engine.attention.data import batches
from rieszflow.engine.attention.model import TransformerClassifier
from rieszflow.engine.attention.optim import Adam, WarmupLinear, clip_by_value
from rieszflow.engine.backend import to_numpy
from rieszflow.engine.energy.riesz import riesz_energy_and_grad
from rieszflow.engine.simulate import LangevinState, projected_langevin
from rieszflow.engine.space import Ball
from rieszflow.learning.objectives import ALIGNMENTS
from rieszflow.learning.train import alignment_gradients

__all__ = ["TASKS", "METHODS", "BACKBONE", "load_task", "build_model", "train_run", "evaluate"]

#: task -> (vocab size, classes, sequence length bound, 2-D grid or None, DWC kernel)
TASKS = {
    "digits": (18, 10, 64, (8, 8), 3),
    "digits16": (257, 10, 256, (16, 16), 3),
    "listops": (16, 10, 128, None, 5),
    "rt_bytes": (257, 2, 512, None, 5),
    "rt": (30522, 2, 64, None, 5),
}

#: The mini-LRA backbone (spec section 5.2).
BACKBONE = dict(d_model=64, n_heads=2, d_ff=128, n_layers=2, dropout=0.1, pre_ln=True, embed_std=0.02)

#: Methods at the matched feature budget D = 64 per head (d_k = 32). Each entry: model keyword
#: arguments, and ``train_omega`` (whether the particles / projections are trained).
METHODS = {
    "softmax": dict(model=dict(attention="softmax"), train_omega=False),
    "luna": dict(model=dict(attention="linear", feature_map="luna", m=8, dwc=True,
                            feature_options=dict(channels=8, hidden=64)), train_omega=True),
    "luna_nodwc": dict(model=dict(attention="linear", feature_map="luna", m=8,
                                  feature_options=dict(channels=8, hidden=64)), train_omega=True),
    "performer": dict(model=dict(attention="linear", feature_map="favor", m=64,
                                 feature_options=dict(tau=math.sqrt(32), omega_scale=math.sqrt(32),
                                                      init="orthogonal", stabilise="seq")),
                      train_omega=False),
    "elu": dict(model=dict(attention="linear", feature_map="elu", m=64,
                           feature_options=dict(bias_std=0.0)), train_omega=False),
    "rff": dict(model=dict(attention="linear", feature_map="rff", m=64,
                           feature_options=dict(omega_scale=32 ** 0.25)), train_omega=False),
    # paper 001's own fixed RFF (Table 5): [sin(omega x), cos(omega x)] / sqrt(m'), m' = D/2 = 32
    "rff_pair": dict(model=dict(attention="linear", feature_map="rff_pair", m=32,
                                feature_options=dict(omega_scale=32 ** 0.25)), train_omega=False),
    "hedgehog": dict(model=dict(attention="linear", feature_map="hedgehog", m=32), train_omega=True),
    "cosformer": dict(model=dict(attention="linear", feature_map="cosformer", m=32), train_omega=False),
    # paper 000: softplus particles learned by Phase A (Langevin on alignment + Riesz repulsion),
    # frozen in Phase B; "fixed" is the same map with the particles left at their initial law
    "particles": dict(model=dict(attention="linear", feature_map="softplus", m=64), train_omega=False,
                      phase_a=True),
    "fixed": dict(model=dict(attention="linear", feature_map="softplus", m=64), train_omega=False),
}

#: Phase A of paper 000 (App. F.2) for the "particles" method: step, inverse temperature, Riesz
#: strength (log repulsion, s = 0), drift clip, ball radius.
PHASE_A = dict(eta=2e-3, beta=50.0, lam=1e-3, s=0.0, clip_norm=10.0, radius=1.5)


def phase_a(model, train, rng, steps: int, batch_size: int = 32):
    """Paper 000's Phase A on a mini-LRA model: projected Langevin on the particles of every head.

    Each step takes a batch, evaluates the one-hot sequence alignment of eq. (C.4) on the pooled
    representation (dropout off) and moves every head's particles by one projected Langevin
    step of eq. (4.3) on ``-V + lam W_{m,0}`` (:data:`PHASE_A`), inside the ball of radius 1.5.

    Parameters
    ----------
    model : TransformerClassifier
        With linear attention (particles ``layers.<i>.attn.omega``), modified in place.
    train : EncodedSplit
    rng : numpy.random.Generator
    steps : int
    batch_size : int, default 32

    Returns
    -------
    float
        The alignment of the last batch.

    References
    ----------
    paper 000, eqs. (2.2), (4.3), (C.4), App. F.2.
    """
    cfg = PHASE_A
    n_classes = model.config["n_classes"]
    objective = lambda P, y: ALIGNMENTS["onehot"](P, y, n_classes=n_classes)   # noqa: E731
    names = model.particle_names()
    ball = Ball(cfg["radius"])
    for nm in names:                                   # start inside the domain
        om = model.params[nm]
        model.params[nm] = ball.project(om.reshape(-1, om.shape[-1])).reshape(om.shape).astype(om.dtype)
    drift = {}
    steppers = {}
    for nm in names:
        for h in range(model.params[nm].shape[0]):
            _, steppers[(nm, h)] = projected_langevin(lambda _o, key=(nm, h): drift[key], ball, eta=cfg["eta"],
                                                      beta=cfg["beta"], clip_norm=cfg["clip_norm"])
    value, done = float("nan"), 0
    while done < steps:
        for ids, mask, labels, _ in batches(train, batch_size, rng=rng, min_last=2):
            value, grads = alignment_gradients(model, ids.astype(np.int64), mask, labels.astype(np.int64),
                                               objective, names)
            for nm in names:
                om_all = model.params[nm]
                new = np.empty_like(om_all)
                for h in range(om_all.shape[0]):
                    _, w_grad = riesz_energy_and_grad(om_all[h].astype(np.float64), cfg["s"])
                    drift[(nm, h)] = grads[nm][h] + cfg["lam"] * w_grad
                    st = steppers[(nm, h)](LangevinState(omega=om_all[h], step=0,
                                                         max_displacement=np.asarray(np.inf)),
                                           rng.standard_normal(om_all[h].shape))
                    new[h] = st.omega
                model.params[nm] = new
            done += 1
            if done == steps:
                break
    return float(value)


@functools.lru_cache(maxsize=8)
def load_task(task: str, seed: int = 0, listops_sizes=(20000, 2000, 2000)):
    """Train / validation / test splits of a mini-LRA task (cached per process).

    Parameters
    ----------
    task : {"digits", "digits16", "listops", "rt_bytes", "rt"}
        ``rt`` is Rotten Tomatoes with the main job's WordPiece tokens (length <= 64).
    seed : int, default 0
        Split seed (digits) or generator seed (ListOps).
    listops_sizes : tuple of 3 int
        ListOps-mini split sizes.

    Returns
    -------
    tuple of EncodedSplit
        ``(train, validation, test)``.

    Raises
    ------
    ValueError
        On an unknown task.
    """
    if task not in TASKS:
        raise ValueError(f"task={task!r} is not allowed; allowed: {', '.join(TASKS)}")
    parts = ("train", "validation", "test")
    if task.startswith("digits"):
        size = 8 if task == "digits" else 16
        return tuple(data.load_digits_seq(p, size=size, seed=seed) for p in parts)
    if task == "listops":
        return tuple(data.load_listops_mini(p, seed=seed, sizes=listops_sizes) for p in parts)
    if task == "rt":
        tok = data.WordPieceTokenizer(max_len=TASKS[task][2])
        return tuple(data.encode(data.load_split("rt", p), tok) for p in parts)
    return tuple(data.load_rt_bytes(p, max_len=TASKS[task][2]) for p in parts)


def build_model(task: str, method: str, rng, *, overrides=None, backbone=None):
    """The mini-LRA model of ``method`` for ``task``.

    Parameters
    ----------
    task : str
        A key of :data:`TASKS`.
    method : str
        A key of :data:`METHODS`.
    rng : numpy.random.Generator
        Initialisation generator.
    overrides : dict or None
        Replaces entries of the method's model keyword arguments (e.g. ``m`` or
        ``feature_options`` for the M/L ablation).
    backbone : dict or None
        Replaces entries of :data:`BACKBONE`.

    Returns
    -------
    model : TransformerClassifier
    train_omega : bool

    Raises
    ------
    ValueError
        On an unknown task or method.
    """
    if method not in METHODS:
        raise ValueError(f"method={method!r} is not allowed; allowed: {', '.join(METHODS)}")
    vocab, n_classes, max_len, grid, k = TASKS[task]
    kw = dict(METHODS[method]["model"])
    kw.update(overrides or {})
    if kw.pop("dwc", False):
        kw["dwc"] = {"kind": "2d", "kernel": k, "grid": grid} if grid else {"kind": "1d", "kernel": k}
    if kw["attention"] == "linear":
        kw.setdefault("qk", "learned")
    bb = dict(BACKBONE)
    bb.update(backbone or {})
    model = TransformerClassifier(vocab, max_len=max_len, n_classes=n_classes, rng=rng, **bb, **kw)
    return model, METHODS[method]["train_omega"]


def evaluate(model, split, batch_size: int = 256):
    """Accuracy and mean cross-entropy of ``model`` on ``split`` (dropout off).

    Parameters
    ----------
    model : TransformerClassifier
    split : EncodedSplit
    batch_size : int, default 256

    Returns
    -------
    accuracy : float
    loss : float
        Mean cross-entropy, nats.
    """
    hits, loss = 0, 0.0
    for ids, mask, labels, _ in batches(split, batch_size):
        z = to_numpy(model.forward(model.backend.asarray(ids, dtype=np.int64),
                                  model.backend.asarray(mask, dtype=bool))).astype(np.float64)
        z -= z.max(1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(1, keepdims=True))
        hits += int((z.argmax(1) == labels).sum())
        loss -= float(logp[np.arange(len(labels)), labels].sum())
    return hits / len(split), loss / len(split)


def train_run(task: str, method: str, rng, *, steps: int, batch_size: int = 32, lr: float = 1e-3,
              warmup: float = 0.05, clip_value: float = 1.0, eval_every: int = 50, overrides=None,
              backbone=None, dtype: str = "float32", listops_sizes=(20000, 2000, 2000), data_seed: int = 0,
              model_hook=None, on_init=None, phase_a_steps: int = 0):
    """Train one mini-LRA model for ``steps`` steps; validation-selected test accuracy.

    Parameters
    ----------
    task, method : str
        Keys of :data:`TASKS`, :data:`METHODS`.
    rng : numpy.random.Generator
        The run's only randomness (initialisation, batch order, dropout).
    steps : int
        Optimiser steps, ``>= 1``.
    batch_size : int, default 32
    lr : float, default 1e-3
        Peak learning rate (spec section 5.2).
    warmup : float, default 0.05
        Fraction of the steps spent warming up.
    clip_value : float, default 1.0
        Gradient clipping by value.
    eval_every : int, default 50
        Steps between validation evaluations (and at the end).
    overrides, backbone : dict or None
        See :func:`build_model`.
    dtype : {"float32", "float64"}
    listops_sizes : tuple of 3 int
    data_seed : int, default 0
    model_hook : callable or None
        ``model_hook(model)`` after training (the selected checkpoint loaded), e.g. to keep it.
    on_init : callable or None
        ``on_init(model)`` right after the model is built (before any step).
    phase_a_steps : int, default 0
        Steps of ``phase_a`` before training, for methods with ``phase_a`` (the paper-000
        particles); 0 uses ``steps // 4``.

    Returns
    -------
    dict
        ``test_accuracy``, ``val_accuracy``, ``test_loss``, ``train_loss`` (mean of the last
        10% of steps), ``seconds`` (training wall time), ``seconds_per_step``, ``n_params``,
        ``clipped_fraction``, ``zero_den_fraction`` (rows of linear attention with
        ``phi(q) . z <= 1e-6``, last batch of the first layer), ``negative_den_fraction`` and
        ``phase_a_seconds``.

    Raises
    ------
    ValueError
        On a bad task, method or size.
    """
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps={steps!r} must be a positive integer")
    train, val, test = load_task(task, data_seed, tuple(listops_sizes))
    model, train_omega = build_model(task, method, rng, overrides=overrides,
                                     backbone=dict(backbone or {}, dtype=dtype))
    if on_init is not None:
        on_init(model)
    t_a = time.perf_counter()
    if METHODS[method].get("phase_a"):
        phase_a(model, train, rng, phase_a_steps or max(1, steps // 4), batch_size)
    phase_a_seconds = time.perf_counter() - t_a
    frozen = set() if train_omega else set(model.particle_names())
    names = [k for k in model.params if k not in frozen]
    opt = Adam(model.params, names, lr=lr, eps=1e-6, weight_decay=0.0, decoupled=True,
               schedule=WarmupLinear(steps, int(round(warmup * steps))))
    best = (-1.0, None)
    losses, clipped, total = [], 0, 0
    t0 = time.perf_counter()
    step = 0
    while step < steps:
        for ids, mask, labels, _ in batches(train, batch_size, rng=rng):
            xp = model.backend
            loss, grads, _ = model.loss_and_grads(xp.asarray(ids, dtype=np.int64), xp.asarray(mask, dtype=bool),
                                                  xp.asarray(labels, dtype=np.int64),
                                                  train=True, rng=rng, wrt=names)
            clipped += clip_by_value(grads, clip_value)
            total += sum(int(g.size) for g in grads.values())
            opt.step(grads)
            losses.append(float(loss))
            step += 1
            if not math.isfinite(losses[-1]):
                raise FloatingPointError(f"{method} on {task}: non-finite loss at step {step}")
            if step % eval_every == 0 or step == steps:
                va, _ = evaluate(model, val)
                if va > best[0]:
                    best = (va, model.state_dict())
            if step == steps:
                break
    seconds = time.perf_counter() - t0
    model.load_state_dict(best[1])
    te, te_loss = evaluate(model, test)
    zero = neg = float("nan")
    attn = model.layers[0].attn
    if hasattr(attn, "feature_map"):
        ids, mask, _, _ = next(batches(val, 64))
        ids, mask = model.backend.asarray(ids, dtype=np.int64), model.backend.asarray(mask, dtype=bool)
        den = attn.kernel_terms(model.attention_params(0), model.attention_inputs(ids, mask)[0], mask)["den"]
        if den is not None:
            den = np.asarray(den)
            zero = float(np.mean(np.abs(den) <= 1e-6 + attn.eps))
            neg = float(np.mean(den < 0))
    if model_hook is not None:
        model_hook(model)
    tail = max(1, len(losses) // 10)
    return {"test_accuracy": te, "val_accuracy": best[0], "test_loss": te_loss,
            "train_loss": float(np.mean(losses[-tail:])), "seconds": seconds,
            "seconds_per_step": seconds / steps, "n_params": int(sum(v.size for v in model.params.values())),
            "clipped_fraction": clipped / max(total, 1), "zero_den_fraction": zero,
            "negative_den_fraction": neg, "phase_a_seconds": phase_a_seconds}
