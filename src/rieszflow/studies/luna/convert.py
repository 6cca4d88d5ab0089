"""P6: post-hoc conversion of a softmax teacher to linear attention (paper 001, Tables 2-3 mechanism).

Teacher: the mini-LRA softmax model trained on Digits-seq. Student: the same network (embeddings,
Q/K/V/O projections, FFNs, LayerNorms, head copied) with the attention of every layer swapped for
linear attention with a learned map (LUNA with one map per head, as paper 001's conversions;
Hedgehog). Stage 1 freezes everything but the maps and minimises Hedgehog's soft cross-entropy
``-sum_j A^T_ij log A^S_ij`` between the teacher's and the student's attention rows, averaged over
real query rows, heads and layers, on the teacher's layer inputs (AdamW, lr 1e-2, cosine, batch
32). Stage 2 fine-tunes every parameter with the task loss (AdamW, lr 1e-4, batch 8, weight decay
0, early stopping with patience 3 on validation accuracy). ``recover = 100 acc_student /
acc_teacher`` (one task, so the two definitions of spec section 2.2 coincide).

References
----------
Shahbazi et al. (2025), LUNA (paper 001), sections 5.2-5.3, 10.2-10.3; Zhang et al. (2024),
"The Hedgehog & the Porcupine", arXiv:2402.04347 (attention distillation); paper 001 spec, P6.
"""
from __future__ import annotations

import time

import numpy as np

from rieszflow.studies.luna.rows import attention_rows
from rieszflow.engine.attention.data import batches
from rieszflow.engine.attention.loss import softmax_cross_entropy
from rieszflow.engine.attention.model import TransformerClassifier
from rieszflow.engine.attention.optim import Adam, WarmupCosine
from rieszflow.studies.luna.lra import BACKBONE, TASKS, evaluate, load_task, train_run

__all__ = ["student_rows_loss", "convert"]

_TINY = 1e-12


def student_rows_loss(attn, params, x, mask, teacher_rows):
    """Soft cross-entropy between teacher rows and the student's explicit attention rows, and its gradient.

    Parameters
    ----------
    attn : KernelizedLinearAttention
        The student layer (learned map).
    params : dict
        Its local parameters.
    x : float array, shape (B, n, d_model)
        Layer input (the teacher's).
    mask : bool array, shape (B, n)
    teacher_rows : float array, shape (H, B, n, n)

    Returns
    -------
    loss : float
        Mean over real query rows and heads of ``-sum_j T_ij log(S_ij + 1e-12)``.
    grads : dict
        Gradients for ``omega`` and every ``phi_<name>``.
    rows : ndarray, shape (H, B, n, n)
        The student rows.
    """
    xp = np
    q, k, _ = attn.project(params, x)
    phi_q, cq = attn.features(params, q)
    phi_k, ck = attn.features(params, k)
    km = mask.astype(x.dtype)[None, :, None, :]
    kern = xp.matmul(phi_q, phi_k.transpose(0, 1, 3, 2)) * km
    s = kern.sum(-1, keepdims=True) + attn.eps
    rows = kern / s
    qm = mask.astype(x.dtype)[None, :, :, None]
    n_rows = float(qm.sum() * attn.n_heads)
    logs = np.log(rows + _TINY)
    loss = float(-(teacher_rows * logs * qm).sum() / n_rows)
    d_rows = -teacher_rows / (rows + _TINY) * qm / n_rows
    dkern = (d_rows - (d_rows * rows).sum(-1, keepdims=True)) / s * km
    dphi_q = xp.matmul(dkern, phi_k)
    dphi_k = xp.matmul(dkern.transpose(0, 1, 3, 2), phi_q)
    grads = {}
    _, dom_q = attn.features_backward(params, dphi_q, cq, grads)
    _, dom_k = attn.features_backward(params, dphi_k, ck, grads)
    grads["omega"] = dom_q + dom_k
    return loss, grads, rows


def _row_kl(t, s, mask):
    """Mean over real query rows of KL(t || s)."""
    qm = mask[None, :, :, None]
    kl = (t * (np.log(t + _TINY) - np.log(s + _TINY))) * qm
    return float(kl.sum() / (qm.sum() * t.shape[0]))


def convert(method: str, rng, *, teacher_steps: int = 300, stage1_epochs: int = 1, stage2_epochs: int = 3,
            stage1_lr: float = 1e-2, stage2_lr: float = 1e-4, teacher_seed: int = 0, eval_every: int = 50):
    """Train (or rebuild) the softmax teacher, convert it to ``method`` in two stages, evaluate.

    Parameters
    ----------
    method : {"luna", "hedgehog"}
        The student's map (LUNA with per-head maps, M = L = 8; Hedgehog, D = 64).
    rng : numpy.random.Generator
        The student's stream (map initialisation, batch order, dropout).
    teacher_steps : int, default 300
    stage1_epochs, stage2_epochs : int
        Epochs of the two stages (Stage 2 stops early after 3 epochs without improvement).
    stage1_lr, stage2_lr : float
    teacher_seed : int, default 0
        The teacher is trained from ``default_rng([teacher_seed, 6])``: every method converts the
        same teacher.
    eval_every : int

    Returns
    -------
    dict
        ``teacher_accuracy``, ``stage1_loss_first`` / ``stage1_loss_last`` (mean of the first and
        last 10% of Stage 1 steps), ``accuracy_before_stage2``, ``test_accuracy``, ``recover``,
        ``kl_stage1``, ``kl_stage2`` (mean row KL(teacher || student) per layer, averaged),
        ``seconds``.

    Raises
    ------
    ValueError
        On an unknown method.
    """
    if method not in ("luna", "hedgehog"):
        raise ValueError(f"method={method!r} is not allowed; allowed: luna, hedgehog")
    t0 = time.perf_counter()
    kept = {}
    train_run("digits", "softmax", np.random.default_rng([teacher_seed, 6]), steps=teacher_steps,
              eval_every=eval_every, model_hook=lambda mdl: kept.setdefault("teacher", mdl))
    teacher = kept["teacher"]
    train, val, test = load_task("digits", 0)
    acc_t, _ = evaluate(teacher, test)
    vocab, n_classes, max_len, _, _ = TASKS["digits"]
    fm_kw = dict(feature_map="luna", m=8, feature_options=dict(channels=8, hidden=64, shared_heads=False)) \
        if method == "luna" else dict(feature_map="hedgehog", m=32)
    student = TransformerClassifier(vocab, max_len=max_len, n_classes=n_classes, rng=rng, attention="linear",
                                    qk="learned", dtype="float32", **BACKBONE, **fm_kw)
    for k, v in teacher.params.items():                       # copy every shared parameter
        student.params[k][...] = v
    maps = [k for k in student.params if k.endswith(".omega") or ".attn.phi_" in k]
    opt = Adam(student.params, maps, lr=stage1_lr, eps=1e-6, decoupled=True,
               schedule=WarmupCosine(stage1_epochs * -(-len(train) // 32), 0))
    losses = []
    for _ in range(stage1_epochs):
        for ids, mask, _, _ in batches(train, 32, rng=rng):
            xs = teacher.attention_inputs(ids.astype(np.int64), mask)
            grads = {}
            total = 0.0
            for i, layer in enumerate(teacher.layers):
                x = xs[i]
                tp = {k[len(f"layers.{i}.attn."):]: v for k, v in teacher.params.items()
                      if k.startswith(f"layers.{i}.attn.")}
                t_rows, _ = attention_rows(layer.attn, tp, x, mask)
                sp = {k[len(f"layers.{i}.attn."):]: v for k, v in student.params.items()
                      if k.startswith(f"layers.{i}.attn.")}
                loss, g, _ = student_rows_loss(student.layers[i].attn, sp, x, mask, t_rows.astype(x.dtype))
                total += loss / len(teacher.layers)
                for k, v in g.items():
                    grads[f"layers.{i}.attn.{k}"] = v / len(teacher.layers)
            opt.step(grads)
            losses.append(total)
    tail = max(1, len(losses) // 10)

    def kl_now():
        ids, mask, _, _ = next(batches(val, 64))
        xs = teacher.attention_inputs(ids.astype(np.int64), mask)
        kls = []
        for i, layer in enumerate(teacher.layers):
            x = xs[i]
            tp = {k[len(f"layers.{i}.attn."):]: v for k, v in teacher.params.items()
                  if k.startswith(f"layers.{i}.attn.")}
            t_rows, _ = attention_rows(layer.attn, tp, x, mask)
            sp = {k[len(f"layers.{i}.attn."):]: v for k, v in student.params.items()
                  if k.startswith(f"layers.{i}.attn.")}
            s_rows, _ = attention_rows(student.layers[i].attn, sp, x, mask)
            kls.append(_row_kl(t_rows, s_rows, mask))
        return float(np.mean(kls))

    kl1 = kl_now()
    acc_before, _ = evaluate(student, test)
    names = list(student.params)
    opt2 = Adam(student.params, names, lr=stage2_lr, eps=1e-6, decoupled=True)
    best, best_state, bad = -1.0, student.state_dict(), 0
    for _ in range(stage2_epochs):
        for ids, mask, labels, _ in batches(train, 8, rng=rng):
            logits = student.forward(ids.astype(np.int64), mask, train=True, rng=rng)
            _, dlogits, _ = softmax_cross_entropy(logits, labels.astype(np.int64))
            opt2.step(student.backward(dlogits))
        va, _ = evaluate(student, val)
        if va > best:
            best, best_state, bad = va, student.state_dict(), 0
        else:
            bad += 1
            if bad >= 3:
                break
    student.load_state_dict(best_state)
    acc_s, _ = evaluate(student, test)
    kl2 = kl_now()
    return {"teacher_accuracy": acc_t, "stage1_loss_first": float(np.mean(losses[:tail])),
            "stage1_loss_last": float(np.mean(losses[-tail:])), "accuracy_before_stage2": acc_before,
            "test_accuracy": acc_s, "recover": 100.0 * acc_s / acc_t, "kl_stage1": kl1, "kl_stage2": kl2,
            "seconds": time.perf_counter() - t0}
