"""The main job of paper 000 (App. F.2): Phase A learns the feature particles, Phase B the rest.

Phase A (kernel learning)
    Only the particles Omega (per layer and head, shape ``(m, d_k)`` each) move.
    On each mini-batch the sequence-level alignment of eq. (C.4) (or centred
    KTA) is evaluated on the pooled representations (dropout off, so the
    energy is a deterministic function of Omega), and every head takes one
    projected Langevin step of eq. (4.3) / (B.11) on the Hamiltonian

        H = -V_seq(Omega) + lam * sum_{layer, head} W_{m,s}(Omega_{layer,head}),

    with W_{m,s} the Riesz s-energy of eq. (2.3) (s = 0: log repulsion),
    drift ``m * grad H`` clipped to norm ``clip_norm`` per head, noise
    ``sqrt(2 eta / beta) xi`` and projection onto the ball of radius ``radius``
    (per-particle l2 norm). Phase A stops after ``phase_a_epochs`` epochs or
    when the largest particle displacement of a step falls below ``delta``.
    The alignment energy is a mini-batch estimate; it is recorded at every step
    together with the repulsion energy and the Hamiltonian.

Phase B (classifier training)
    Omega is frozen; every other parameter is trained with Adam and
    cross-entropy. The checkpoint with the best validation accuracy is kept;
    the test split is evaluated once, with that checkpoint, and never used
    for selection.

Randomness: independent streams spawned from ``seed`` for the initialisation,
Phase A and Phase B, so a vanilla run (Phase B only) and a kernel run of the
same seed start from the same weights and see the same Phase B batches and
dropout masks: the matched pair of the paper's tables.
"""
from __future__ import annotations

import json
import math
import time
import uuid
from pathlib import Path

import numpy as np

from rieszflow.engine.backend import get_backend, to_numpy
from rieszflow.engine.attention.data import CLASS_NAMES as DATASET_CLASSES, batches, count_batches
from rieszflow.learning.layout import define_layout
from rieszflow.learning.splits import load_data
from rieszflow.engine.attention.metrics import METRIC_NAMES, classification_metrics
from rieszflow.engine.storage import RunFileError, TrajectoryWriter, check_run_file, read_hdf5
from rieszflow.learning.objectives import ALIGNMENTS
from rieszflow.learning.config import MainJobConfig
from rieszflow.engine._checks import is_host
from rieszflow.engine.attention.loss import softmax_cross_entropy
from rieszflow.engine.attention.model import TransformerClassifier
from rieszflow.engine.attention.optim import Adam, WarmupCosine
from rieszflow.engine.energy.riesz import riesz_energy_and_grad
from rieszflow.engine.simulate import LangevinState, projected_langevin
from rieszflow.engine.space import Ball
from rieszflow.engine.storage import RunInterrupted, check_resumable, raise_pending_signal
from rieszflow.learning.checkpoint import (CheckpointError, check_checkpoint, checkpoint_path,
                                           read_checkpoint, write_checkpoint)

#: Labels of the two classes of Rotten Tomatoes and SST-2 (label 0 and 1); QQP's are in
#: ``engine.attention.data.CLASS_NAMES``.
CLASS_NAMES = DATASET_CLASSES["rt"]

__all__ = ["MainJob", "run_main_job", "load_data", "alignment_gradients"]

KIND = "main_job"

#: Configuration fields that ``--resume`` may raise to extend a run (``--resume --epochs N``):
#: the run continues bit-identically to one started with the larger budget (refused otherwise).
GROWTH_FIELDS = ("epochs", "phase_a_epochs")
#: The test evaluation's variables and dimensions, and the attributes written at completion:
#: removed when a finished run is extended.
TEST_VARIABLES = ("test_proba", "test_label", "test_metrics")
TEST_DIMENSIONS = ("example", "class", "metric")
COMPLETION_ATTRS = ("train_seconds", "phase_a_seconds", "phase_b_seconds", "best_epoch",
                    "best_val_accuracy")


def _describe(meta: dict) -> str:
    """Where a checkpoint stands, in words (for the interrupt message)."""
    if meta["phase"] == "start":
        return "the start of the run"
    if meta["partial"]:
        return (f"Phase A epoch {meta['epoch']} after {meta['partial']['batches_done']} batches "
                f"(step {meta['phase_a_steps']})")
    return f"the end of Phase {meta['phase']} epoch {meta['epoch']}"


def alignment_gradients(model, ids, mask, labels, objective, wrt):
    """Alignment value of a mini-batch and the gradient of the alignment energy.

    The pooled representations are computed with dropout off, so the alignment
    energy ``-V`` is a deterministic function of the particles.

    Parameters
    ----------
    model : engine.attention.model.TransformerClassifier
    ids, mask : arrays of shape (B, L), on the model's backend
    labels : int array of shape (B,), on the model's backend
    objective : callable
        ``objective(P, y) -> (value, dvalue/dP)``, one of :data:`ALIGNMENTS`.
    wrt : list of str
        Parameter names (the particles ``layers.<i>.attn.omega``).

    Returns
    -------
    value : float
        V, the alignment to maximise (eq. C.4, or centred KTA).
    grads : dict of str to array
        d(-V)/d(param) for each name in ``wrt``: the gradient of the alignment
        energy that Phase A descends.
    """
    pooled = model.pooled(ids, mask, train=False, rng=None)
    value, dvalue = objective(pooled, labels)
    return value, model.backward_pooled(-dvalue, wrt=wrt)


def _progress(iterable, total, desc, quiet):
    from tqdm.auto import tqdm

    return tqdm(iterable, total=total, desc=desc, disable=quiet, leave=False, dynamic_ncols=True,
                mininterval=1.0)


class MainJob:
    """One run of the main job, writing ``out`` incrementally.

    Parameters
    ----------
    cfg : MainJobConfig
    out : path
        HDF5 file (see README, "HDF5 layout").
    overwrite : bool
        Replace an existing ``out``.
    resume : bool
        Continue an interrupted run from its checkpoint ``<out>.ckpt.npz``, or extend a
        finished one whose final checkpoint was kept (``cfg`` may raise ``epochs``; see
        ``GROWTH_FIELDS``).
    quiet : bool
        No progress bars.
    keep_checkpoint : bool
        Keep the final checkpoint when the run completes (``rieszflow run`` does, so the run
        can be extended with more epochs; it is as large as four copies of the model).
        False deletes it, as a sweep of many runs wants.
    """

    def __init__(self, cfg: MainJobConfig, out, *, overwrite=False, resume=False, quiet=False,
                 keep_checkpoint=False):
        self.cfg = cfg
        self.out = Path(out)
        self.ckpt_path = checkpoint_path(self.out)
        self.overwrite, self.resume, self.quiet = overwrite, resume, quiet
        self.keep_checkpoint = keep_checkpoint
        self.backend = get_backend(cfg.backend, cfg.dtype)

    # -- set-up ------------------------------------------------------------------------------
    def _build(self):
        cfg = self.cfg
        ss = np.random.SeedSequence(cfg.seed)
        # spawn(4)[:3] == spawn(3): adding the redraw stream changed no earlier stream
        s_init, s_a, s_b, s_redraw = ss.spawn(4)
        self.rng_init = np.random.default_rng(s_init)
        self.rng_a = np.random.default_rng(s_a)
        self.rng_b = np.random.default_rng(s_b)
        self.rng_redraw = np.random.default_rng(s_redraw)
        self.tok, self.train, self.val, self.test = load_data(cfg)
        self.class_names = DATASET_CLASSES[cfg.dataset]
        linear = cfg.attention == "linear"
        extra = {"linformer_k": cfg.linformer_k} if cfg.attention == "linformer" else {}
        if cfg.dwc_kernel:
            extra["dwc"] = {"kind": "1d", "kernel": cfg.dwc_kernel}
        self.model = TransformerClassifier(
            vocab_size=self.tok.vocab_size, max_len=cfg.max_len, d_model=cfg.d_model,
            n_heads=cfg.n_heads, d_ff=cfg.d_ff, n_layers=cfg.n_layers, n_classes=2,
            dropout=cfg.dropout, attention=cfg.attention,
            feature_map=cfg.feature_map if linear else None, m=cfg.feature_rows if linear else cfg.m,
            qk=cfg.qk, feature_options=cfg.feature_options() if linear else None,
            embed_std=cfg.embed_std, rng=self.rng_init, dtype=cfg.dtype, backend=cfg.backend,
            **extra)
        self.omega_names = list(self.model.particle_names())
        self.omega_init_projected = self._project_particles() if cfg.project_init else 0
        # the particles before Phase A (frozen in Phase B, so the initial ones whatever
        # phase_a_after is): the reference of the matched-jitter control; rebuilt identically
        # from the seed on resume
        self.omega_before_a = ({n: to_numpy(self.model.params[n]).copy() for n in self.omega_names}
                               if cfg.phase_a_control == "matched_jitter" else None)

    def _project_particles(self):
        """Start inside the domain: project the particles onto the ball of radius ``radius``
        (the HDF5 attribute ``omega_init_projected`` counts the particles that moved)."""
        ball, moved = Ball(self.cfg.radius), 0
        for name in self.omega_names:
            om = self.model.params[name]                           # (H, m, d_k)
            flat = om.reshape(-1, om.shape[-1])
            moved += int(to_numpy(~ball.contains(flat)).sum())
            self.model.params[name] = ball.project(flat).reshape(om.shape).astype(om.dtype)
        return moved

    def _redraw_features(self):
        """Redraw every layer's random features from their initial law (Performer-style
        redrawing, ``redraw_every``), from the dedicated generator ``rng_redraw``."""
        for name, fmap in zip(self.omega_names, self.model.feature_maps):
            om = self.model.params[name]
            new = np.stack([fmap.init_omega(self.rng_redraw, dtype=self.model.dtype)
                            for _ in range(om.shape[0])])
            self.model.params[name] = self.backend.asarray(new)
        if self.cfg.project_init:
            self._project_particles()

    def _open_writer(self):
        cfg = self.cfg
        if cfg.alignment == "onehot":
            align_text = ("alignment: -V_seq of eq. (C.4) on each mini-batch, 1/(n(n-1)) times the "
                          "sum over same-class pairs i<j of <P_i, P_j>")
        else:
            align_text = ("alignment: minus the centred kernel-target alignment <K_c, Y_c>_F / "
                          "(|K_c|_F |Y_c|_F) of K = P P^T on each mini-batch")
        attrs = {"seed": cfg.seed, "backend": cfg.backend, "run_name": cfg.name,
                 "source": "paper 000, App. F.2; eq. (2.2), (2.3), (4.3), (C.4)",
                 "omega_init_projected": self.omega_init_projected,
                 "energy_normalisation": align_text + "; repulsion: sum over layers and heads of "
                                         "W_{m,s} = 1/(2m(m-1)) sum_{k!=l} g_s, eq. (2.3)",
                 "ece_definition": "binary, positive class, 15 equal-width bins, L1",
                 "run_id": uuid.uuid4().hex}
        w = TrajectoryWriter(self.out, KIND, config=cfg.to_dict(), attrs=attrs,
                             overwrite=self.overwrite, resume=self.resume)
        self._writer_opened = True
        try:               # the file and its lock exist: every failure from here closes them
            self._define_layout(w, align_text)
        except BaseException as e:
            w.close("interrupted" if isinstance(e, KeyboardInterrupt) else "failed")
            raise
        return w

    def _define_layout(self, w, align_text):
        """The dimensions and variables of a main-job file (:func:`rieszflow.learning.layout.define_layout`)."""
        self.run_id = w.get_attr("run_id")
        if not self.resume and self.ckpt_path.exists():
            self.ckpt_path.unlink()              # a checkpoint of an earlier run at this path
        define_layout(w, self.cfg, self.model, align_text)

    # -- checkpoints -------------------------------------------------------------------------
    def _file_facts(self) -> dict:
        """Root attributes and record counts of the run file, read before the writer opens it."""
        check_run_file(self.out)           # foreign or damaged: one line naming the file
        try:
            with read_hdf5(self.out) as f:
                attrs = {k: f.attrs.get(k) for k in ("config", "status", "run_id")}
                lengths = {d: int(f[d].shape[0]) for d in ("time", "step", "epoch", "batch") if d in f}
        except (OSError, KeyError) as e:
            raise RunFileError(f"--resume: {self.out}: its records cannot be read ({e})") from None
        attrs = {k: v.decode() if isinstance(v, bytes) else v for k, v in attrs.items()}
        return {**attrs, "lengths": lengths}

    def _check_resumable(self, opt):
        """Everything a resume needs, checked before the file is touched: the file is this kind
        of run with this configuration (growth fields aside, :meth:`_check_growth`), and its
        checkpoint is whole (checksum), of this run and fits the model and optimiser.

        Returns
        -------
        tuple
            ``(meta, arrays)`` of the verified checkpoint.
        """
        facts = self._file_facts()
        try:
            stored = json.loads(facts["config"] or "{}")
        except ValueError:
            stored = {}
        growth = {k: stored[k] for k in GROWTH_FIELDS if k in stored}
        check_resumable(self.out, KIND, {**self.cfg.to_dict(), **growth}, allow_complete=True)
        self._prior_status, self._stored_cfg = facts["status"], stored
        if not self.ckpt_path.exists():
            what = {"complete": "is complete and has no final checkpoint (only `rieszflow run` "
                                "keeps it; sweeps and older versions delete it), so it cannot be "
                                "extended",
                    "running": "was killed before its first checkpoint was written, so it cannot be "
                               "resumed",
                    }.get(facts["status"], f"stopped ({facts['status']}) before its first checkpoint "
                                           f"was written, so it cannot be resumed")
            raise FileNotFoundError(f"--resume: {self.out} {what} (no {self.ckpt_path.name} beside "
                                    f"it); start it again with --overwrite")
        meta, arrays = read_checkpoint(self.ckpt_path)
        check_checkpoint(self.ckpt_path, meta, arrays, out=self.out, run_id=facts["run_id"],
                         lengths=facts["lengths"], model_state=self.model.state_dict(),
                         opt_state=opt.state_dict())
        self._check_growth(stored, meta)
        return meta, arrays

    def _check_growth(self, stored: dict, meta: dict):
        """Refuse a change of the growth fields that a longer run would not reproduce."""
        cfg = self.cfg
        changed = {k: (stored[k], getattr(cfg, k)) for k in GROWTH_FIELDS
                   if k in stored and stored[k] != getattr(cfg, k)}
        if not changed:
            if self._prior_status == "complete":
                raise ValueError(f"--resume: {self.out} holds a complete run; there is nothing to "
                                 f"resume (raise --epochs to extend it)")
            return
        what = ", ".join(f"{k} {a} -> {b}" for k, (a, b) in changed.items())
        shrink = [k for k, (a, b) in changed.items() if b < a]
        if shrink:
            raise ValueError(f"--resume: {what}: a run can only be extended; {', '.join(shrink)} "
                             f"cannot shrink (start a new run for a smaller budget)")
        if "epochs" in changed and cfg.schedule == "warmup_cosine":
            raise ValueError(f"--resume: {what}: the warm-up + cosine learning-rate schedule spans "
                             f"the total number of Phase B steps, so every learning rate of a longer "
                             f"run differs and the extension would not equal a run started with "
                             f"epochs={cfg.epochs}; start a new run with --epochs {cfg.epochs}")
        old = self._units(MainJobConfig.from_dict(stored))
        if meta["phase"] == "start":
            done = 0
        else:
            done = old.index((meta["phase"], meta["epoch"])) + (0 if meta["partial"] else 1)
        if old[:done] != self._units()[:done]:
            raise ValueError(f"--resume: {what}: the run has already passed the point where the "
                             f"longer run differs (Phase B epochs ran after Phase A's last epoch), "
                             f"so it cannot be extended bit-identically; start a new run")

    def _save_ckpt(self, w, phase, epoch, best_state, best_acc, best_epoch, opt=None,
                   stopped_early=False, partial=None, elapsed=None):
        # the writer's block first: the lengths stored below count only records on disk, so a
        # run killed after this checkpoint resumes from a file that holds all of them
        w.flush()
        state = {f"model/{k}": v for k, v in self.model.state_dict().items()}
        if best_state is not None:
            state.update({f"best/{k}": v for k, v in best_state.items()})
        if opt is not None:
            state.update({f"adam/{k}": v for k, v in opt.state_dict().items()})
        meta = {"run_id": self.run_id, "phase": phase, "epoch": epoch, "best_acc": best_acc,
                "best_epoch": best_epoch, "stopped_early": bool(stopped_early),
                "phase_a_steps": self.step_a,
                "lengths": {d: w.length(d) for d in ("time", "step", "epoch", "batch")},
                "rng_a": self.rng_a.bit_generator.state, "rng_b": self.rng_b.bit_generator.state,
                "rng_redraw": self.rng_redraw.bit_generator.state,
                "elapsed": self.elapsed if elapsed is None else elapsed,
                # inside a Phase A epoch: batches done and the generator state at the epoch start
                "partial": partial}
        # atomic and checksummed: the old checkpoint or the new, never half, no temporary file left
        write_checkpoint(self.ckpt_path, meta, state)
        self._ckpt_note = _describe(meta)

    def _load_ckpt(self, w, checked):
        """Restore the state of the checkpoint verified by :meth:`_check_resumable`."""
        meta, z = checked
        # checked again under the lock: the file may have been replaced since it was verified
        if meta.get("run_id") != w.get_attr("run_id"):
            raise CheckpointError(f"--resume: {self.ckpt_path} belongs to another run than {self.out} "
                                  f"(run_id {meta.get('run_id')} != {w.get_attr('run_id')}): the "
                                  f"file was replaced while this command started; refusing to mix "
                                  f"them")
        short = {d: n for d, n in meta["lengths"].items() if w.length(d) < n}
        if short:
            raise CheckpointError(f"--resume: {self.out} holds fewer records than its checkpoint "
                                  f"expects ({short}); the file was modified")
        self.model.load_state_dict({k[6:]: v for k, v in z.items() if k.startswith("model/")})
        best = {k[5:]: v for k, v in z.items() if k.startswith("best/")} or None
        adam = {k[5:]: v for k, v in z.items() if k.startswith("adam/")} or None
        self.rng_a.bit_generator.state = meta["rng_a"]
        self.rng_b.bit_generator.state = meta["rng_b"]
        self.rng_redraw.bit_generator.state = meta["rng_redraw"]
        self.elapsed = meta["elapsed"]
        for d, n in meta["lengths"].items():  # drop records written after the checkpoint
            w.truncate(d, n)
        # a finished run being extended (or one stopped during its test evaluation): its final
        # outputs go, so an interrupted extension never shows the shorter run's results
        w.remove(variables=TEST_VARIABLES, dimensions=TEST_DIMENSIONS, attrs=COMPLETION_ATTRS)
        if any(self._stored_cfg.get(k) != getattr(self.cfg, k) for k in GROWTH_FIELDS):
            w.set_attrs(config=json.dumps(self.cfg.to_dict(), sort_keys=True, default=str),
                        **{f"config_{k}": getattr(self.cfg, k) for k in GROWTH_FIELDS},
                        extended=int(w.get_attr("extended", 0)) + 1)
        self._ckpt_note = _describe(meta)
        return meta, best, adam

    # -- Phase A -----------------------------------------------------------------------------
    def _phase_a_steppers(self):
        """One projected-Langevin step function per head, built once per run.

        The step functions take each head's drift ``grad_k(-V) + lam grad_k W_{N,s}`` as an
        argument (``step_fn(state, noise, grad=g)``): :meth:`_phase_a_epoch` computes it once per
        step, from the backward pass and the engine's Riesz energy, together with the diagnostics.
        """
        cfg = self.cfg
        _, step_fn = projected_langevin(None, Ball(cfg.radius), eta=cfg.eta, beta=cfg.beta,
                                        clip_norm=cfg.clip_norm)
        return {(name, h): step_fn for name in self.omega_names
                for h in range(self.model.params[name].shape[0])}

    def _phase_a_epoch(self, w, epoch, partial=None, *, opt=None, best=(None, -1.0, 0)):
        """One Phase A epoch; with ``partial`` (from a mid-epoch checkpoint) it continues one.

        The batch order is drawn from ``rng_a`` when the epoch starts; a mid-epoch checkpoint
        stores that generator state, the number of batches done and the current state, so a
        resumed epoch redraws the same order, skips the batches done and continues the noise
        stream exactly (bit-identical to an uninterrupted run).
        """
        cfg, xp, model = self.cfg, self.backend.xp, self.model
        if getattr(self, "_steppers", None) is None:
            self._steppers = self._phase_a_steppers()
        align = ALIGNMENTS[cfg.alignment]
        # the no-alignment control still evaluates the alignment (recorded as a diagnostic) and
        # draws the same batches and noise; only its gradient leaves the drift
        no_alignment = cfg.phase_a_control == "no_alignment"
        n_batches = count_batches(len(self.train), cfg.batch_size, min_last=2)
        now_state = self.rng_a.bit_generator.state
        if partial is not None:
            self.rng_a.bit_generator.state = partial["rng_epoch_start"]
        epoch_start = self.rng_a.bit_generator.state
        # min_last=2: the pair objectives need at least two sequences in every batch
        it = batches(self.train, cfg.batch_size, rng=self.rng_a, pad_id=self.tok.pad_id, min_last=2)
        done = 0
        if partial is not None:
            for _ in range(partial["batches_done"]):
                next(it)                            # the order is drawn here; nothing is computed
            done = partial["batches_done"]
            self.rng_a.bit_generator.state = now_state
        last_ckpt = t_start = time.perf_counter()
        # Host-light loop: a step queues its diagnostics on the device; they reach the host in
        # one transfer per block (at each omega record, checkpoint and the epoch's end), where the
        # non-finite check and the delta rule are applied step by step, in order. A step after the
        # one where the delta rule fires leaves the particles unchanged (device-side freeze), and
        # its diagnostics are dropped, so the stopping step and every output are those of a
        # per-step check. Host (NumPy) arrays are read after every step (it costs nothing there,
        # and a non-finite step is reported before the next step's input checks see it).
        per_step = is_host(next(iter(model.params.values())))
        freeze = cfg.delta > 0
        active = xp.ones((), dtype=bool)              # False from the step after the delta rule fired
        pending = []                                  # (step, stacked device diagnostics) of the block

        def flush():
            """Pull the block's diagnostics (one transfer), check and record them; True on a stop."""
            if not pending:
                return False
            steps = [k for k, _ in pending]
            vals = to_numpy(xp.stack([v for _, v in pending])).astype(np.float64)
            pending.clear()
            for k, (value, repulsion, max_disp, drift) in zip(steps, vals):
                value, repulsion, max_disp, drift = (float(v) for v in (value, repulsion, max_disp, drift))
                if not math.isfinite(repulsion + max_disp + drift):
                    raise FloatingPointError(f"Phase A step {k}: non-finite particles or drift "
                                             f"(repulsion {repulsion}, max move {max_disp}); reduce eta or "
                                             f"set a smaller clip_norm")
                self.step_a = k
                H = -value + cfg.lam * repulsion
                w.append("step", {"alignment_energy": -value, "repulsion_energy": repulsion,
                                  "hamiltonian": H, "max_displacement": max_disp, "drift_norm": drift},
                         coord=k)
                if max_disp < cfg.delta:
                    if k % cfg.record_every == 0:
                        self._record_omega(w)
                    return True
            if self.step_a % cfg.record_every == 0:
                self._record_omega(w)
            mark()
            return False

        def mark():
            """A block boundary: the records on file and this state agree (an interrupt returns here)."""
            safe.update(done=done, step=self.step_a, rng=self.rng_a.bit_generator.state,
                        params={n: model.params[n] for n in self.omega_names},
                        lengths={d: w.length(d) for d in ("time", "step")})

        safe = {}
        mark()
        try:
            step = self.step_a
            bar = _progress(it, n_batches - done, f"Phase A epoch {epoch}", self.quiet)
            for ids, mask, labels, _ in bar:
                value, grads = alignment_gradients(
                    model, self.backend.asarray(ids, dtype=np.int64),
                    self.backend.asarray(mask, dtype=bool),
                    self.backend.asarray(labels, dtype=np.int64), align, self.omega_names)
                # per-step diagnostics stay on the device
                repulsion = xp.zeros((), dtype=xp.float64)
                max_disp = xp.zeros((), dtype=xp.float64)
                drift = xp.zeros((), dtype=xp.float64)
                for name in self.omega_names:
                    om_all = model.params[name]                 # (H, m, d_k)
                    g_all = grads[name]
                    new = xp.empty_like(om_all)
                    for h in range(om_all.shape[0]):
                        om = om_all[h]
                        # W_{m,s} and its gradient; the particles are checked once per record block
                        w_val, w_grad = riesz_energy_and_grad(om, cfg.s, validate=False)
                        repulsion = repulsion + w_val
                        if no_alignment:                          # the control: repulsion only
                            g = cfg.lam * w_grad
                        else:
                            g = g_all[h] + cfg.lam * w_grad      # grad H of this head
                        noise = self.backend.normal(self.rng_a, om.shape)
                        st = self._steppers[(name, h)](
                            LangevinState(omega=om, step=0, max_displacement=xp.asarray(np.inf)), noise,
                            grad=g)
                        new[h] = st.omega
                        max_disp = xp.maximum(max_disp, st.max_displacement)
                        drift = xp.maximum(drift, xp.linalg.norm(om.shape[0] * g))
                    model.params[name] = xp.where(active, new, om_all) if freeze else new
                if freeze:
                    active = active & ~(max_disp < cfg.delta)
                step += 1
                pending.append((step, xp.stack([xp.asarray(value, dtype=xp.float64), repulsion, max_disp,
                                                drift])))
                done += 1
                if (per_step or step % cfg.record_every == 0) and flush():
                    return True
                if time.perf_counter() - last_ckpt >= cfg.checkpoint_seconds and done < n_batches:
                    if flush():
                        return True
                    self._save_ckpt(w, "A", epoch, *best, opt,
                                    partial={"batches_done": done, "rng_epoch_start": epoch_start},
                                    # the epoch's time so far (a resumed run's phase_a_seconds counts it)
                                    elapsed={**self.elapsed, "phase_a": self.elapsed["phase_a"]
                                             + time.perf_counter() - t_start})
                    last_ckpt = time.perf_counter()
            return flush()
        except KeyboardInterrupt as e:
            self._checkpoint_interrupt(w, e, epoch, safe, epoch_start, opt, best, t_start)
            raise

    def _checkpoint_interrupt(self, w, e, epoch, safe, epoch_start, opt, best, t_start):
        """On SIGINT/SIGTERM inside a Phase A epoch: back to the last block boundary, checkpoint.

        The interrupt may land anywhere: between the heads of one step (particles half updated),
        or while a block of records is recorded. The state of the last boundary where the
        records on file and the state agreed (``safe``: batches done, step, generator state,
        particles, record counts) is restored, the records after it are dropped, and an in-epoch
        checkpoint of it is saved, so ``--resume`` continues bit-identically (repeating at most
        one block of steps). A failed save (say a full disk) keeps the previous checkpoint, which
        resumes bit-identically too; ``e.checkpoint_error`` then says why.
        """
        try:
            raise_pending_signal()          # consumed: the records below must not raise it again
        except RunInterrupted:
            pass
        try:
            for name, arr in safe["params"].items():
                self.model.params[name] = arr
            self.rng_a.bit_generator.state = safe["rng"]
            self.step_a = safe["step"]
            for d, n in safe["lengths"].items():
                w.truncate(d, n)
            self._save_ckpt(w, "A", epoch, *best, opt,
                            partial={"batches_done": safe["done"], "rng_epoch_start": epoch_start},
                            elapsed={**self.elapsed, "phase_a": self.elapsed["phase_a"]
                                     + time.perf_counter() - t_start})
        except Exception as err:  # noqa: BLE001 - the interrupt goes on; the older checkpoint holds
            e.checkpoint_error = f"{type(err).__name__}: {err}"

    def _matched_jitter(self, w):
        """The matched-jitter control (:func:`rieszflow.learning.controls.matched_jitter` per head):
        Phase A's particles are replaced by a Gaussian perturbation of the particles before Phase
        A that moved them as far, in paired MMD^2, as Phase A did. The result is recorded as one
        more ``omega`` snapshot at ``time = phase_a_steps + 1`` (Phase A's own last snapshot stays
        in the file), and the root attributes ``phase_a_jitter_scale``,
        ``phase_a_jitter_target_mmd2`` and ``phase_a_jitter_mmd2`` (JSON, [layer][head]) say what
        was done."""
        from rieszflow.learning.controls import matched_jitter

        scales, targets, reached = [], [], []
        for name in self.omega_names:
            before = self.omega_before_a[name]                               # (H, m, d_k)
            after = to_numpy(self.model.params[name])
            new = np.empty(before.shape, dtype=np.float64)
            rows = [matched_jitter(before[h], after[h], self.rng_redraw, self.cfg.radius)
                    for h in range(before.shape[0])]
            for h, r in enumerate(rows):
                new[h] = r.particles
            self.model.params[name] = self.backend.asarray(new.astype(before.dtype))
            scales.append([r.scale for r in rows])
            targets.append([r.target_mmd2 for r in rows])
            reached.append([r.mmd2 for r in rows])
        xp = self.backend.xp
        om = to_numpy(xp.stack([self.model.params[n] for n in self.omega_names])).astype(np.float32)
        w.append("time", {"omega": om}, coord=self.step_a + 1)
        w.set_attrs(phase_a_jitter_scale=json.dumps(scales), phase_a_jitter_target_mmd2=json.dumps(targets),
                    phase_a_jitter_mmd2=json.dumps(reached),
                    phase_a_control_note="matched_jitter: the last omega snapshot (time = phase_a_steps "
                                         "+ 1) holds the jittered particles Phase B used; the one "
                                         "before it, Phase A's final particles (discarded)")

    def _record_omega(self, w):
        xp = self.backend.xp                     # one device-to-host copy for every particle set
        om = to_numpy(xp.stack([self.model.params[n] for n in self.omega_names])).astype(np.float32)
        w.append("time", {"omega": om}, coord=self.step_a)

    # -- Phase B -----------------------------------------------------------------------------
    def _evaluate(self, split):
        model = self.model
        probs, losses = [], []

        for ids, mask, labels, _ in batches(split, 256, pad_id=self.tok.pad_id):
            logits = model.forward(self.backend.asarray(ids, dtype=np.int64),
                                   self.backend.asarray(mask, dtype=bool), train=False, rng=None)
            # log-softmax in float64 from the logits: no float32 zeros reach the log-loss
            z = to_numpy(logits).astype(np.float64)
            logp = z - z.max(axis=1, keepdims=True)
            logp -= np.log(np.exp(logp).sum(axis=1, keepdims=True))
            probs.append(np.exp(logp))
            losses.append(-logp[np.arange(len(labels)), labels].sum())
        P = np.concatenate(probs)
        # the same decision rule as the test metrics: class 1 when p_1 >= 0.5
        return float(np.sum(losses) / len(split)), float(np.mean((P[:, 1] >= 0.5) == split.labels)), P

    def _phase_b_epoch(self, w, opt, epoch):
        cfg, model = self.cfg, self.model
        xp = self.backend.xp
        n_batches = -(-len(self.train) // cfg.batch_size)
        # Host-light loop: on a device each batch's loss and number of correct predictions stay
        # there and reach the host in one transfer at the end of the epoch (Phase B checkpoints
        # per epoch, so resume is unchanged; a killed device run's file lacks that epoch's batch
        # records). On the host they are recorded batch by batch (reading them costs nothing).
        on_host = xp is np
        losses, hits, sizes = [], [], []
        totals = {"loss": 0.0, "hit": 0, "n": 0}

        def commit(loss, hit, size):
            loss = float(loss)
            w.append("batch", {"batch_loss": loss})
            totals["loss"] += loss * size
            totals["hit"] += int(hit)
            totals["n"] += size

        it = batches(self.train, cfg.batch_size, rng=self.rng_b, pad_id=self.tok.pad_id)
        for ids, mask, labels, _ in _progress(it, n_batches, f"Phase B epoch {epoch}", self.quiet):
            y = self.backend.asarray(labels, dtype=np.int64)
            logits = model.forward(self.backend.asarray(ids, dtype=np.int64),
                                   self.backend.asarray(mask, dtype=bool), train=True, rng=self.rng_b)
            loss, dlogits, p = softmax_cross_entropy(logits, y)
            grads = model.backward(dlogits, wrt=self.trainable)
            opt.step(grads)
            if cfg.redraw_every and opt.t % cfg.redraw_every == 0:
                self._redraw_features()
            hit = xp.sum(p.argmax(1) == y).astype(xp.float64)        # exact: counts <= batch size
            if on_host:
                commit(np.float64(loss), hit, len(labels))
            else:
                losses.append(xp.asarray(loss, dtype=xp.float64))
                hits.append(hit)
            sizes.append(len(labels))
        if not sizes:
            raise ValueError("Phase B: the training split gave no batch")
        if not on_host:
            host = to_numpy(xp.stack([xp.stack(losses), xp.stack(hits)]))   # one transfer per epoch
            for loss, hit, size in zip(host[0], host[1], sizes):
                commit(loss, hit, size)
        tot_loss, tot_hit, n = totals["loss"], totals["hit"], totals["n"]
        return tot_loss / n, tot_hit / n

    # -- driver ------------------------------------------------------------------------------
    def _units(self, cfg=None):
        """The run's epochs in order: ``("A", e)`` Phase A epochs and ``("B", e)`` Phase B epochs.

        Paper order (``phase_a_after = 0``): every Phase A epoch, then every Phase B epoch.
        With ``phase_a_after = k``: Phase B epochs 1..k, Phase A, Phase B epochs k+1..epochs.
        ``cfg`` defaults to the run's configuration.
        """
        cfg = self.cfg if cfg is None else cfg
        k = cfg.phase_a_after if cfg.kernel else 0
        units = [("B", e) for e in range(1, k + 1)]
        if cfg.kernel:
            units += [("A", e) for e in range(1, cfg.phase_a_epochs + 1)]
        return units + [("B", e) for e in range(k + 1, cfg.epochs + 1)]

    def _optimizer(self):
        """Phase B's optimiser: Adam (App. F.2) or AdamW (Section 5), constant or warm-up + cosine."""
        cfg = self.cfg
        schedule = None
        if cfg.schedule == "warmup_cosine":
            total = cfg.epochs * -(-len(self.train) // cfg.batch_size)
            warmup = int(round(cfg.warmup_fraction * total))
            if warmup >= total:
                raise ValueError(
                    f"warmup_fraction={cfg.warmup_fraction!r} gives {warmup} warm-up steps of the "
                    f"{total} Phase B optimiser steps ({cfg.epochs} epochs x "
                    f"{-(-len(self.train) // cfg.batch_size)} batches); the cosine decay needs at "
                    f"least one step: lower warmup_fraction or raise epochs / train_limit")
            schedule = WarmupCosine(total, warmup)
        return Adam(self.model.params, self.trainable, lr=cfg.lr, weight_decay=cfg.weight_decay,
                    decoupled=cfg.optimizer == "adamw", schedule=schedule)

    def run(self) -> dict:
        """Run Phases A and B (in the order of ``phase_a_after``) and the test evaluation.

        A fresh run writes a checkpoint of its initial state as soon as the file exists, one
        after every epoch and, in Phase A, every ``checkpoint_seconds``; an interrupt inside a
        Phase A epoch checkpoints the last block boundary (:meth:`_checkpoint_interrupt`), one
        inside a Phase B epoch resumes from the epoch's start (the checkpoint of the epoch
        before). The final checkpoint is kept, so a finished run can be extended.

        Returns
        -------
        dict
            :data:`rieszflow.engine.attention.metrics.METRIC_NAMES` plus ``train_seconds``,
            ``phase_a_seconds``, ``phase_b_seconds``, ``best_epoch``.

        Raises
        ------
        KeyboardInterrupt
            On SIGINT/SIGTERM (:class:`~rieszflow.engine.storage.RunInterrupted`), with the
            attributes ``resumable`` (bool: a checkpoint of this run exists beside the file),
            ``resume_hint`` (one line for the user: the ``--resume`` command and where it
            continues from, or why the run cannot be resumed) and ``checkpoint`` (its path or
            None).
        CheckpointError
            On ``--resume`` with a damaged or foreign checkpoint (the run file is not changed).
        FileNotFoundError
            On ``--resume`` of a missing file, or of a file without checkpoint.
        ValueError
            On ``--resume`` with another configuration, or an extension that a run started
            with the larger budget would not reproduce.
        """
        self._ckpt_note, self._writer_opened = None, False
        try:
            return self._run()
        except KeyboardInterrupt as e:
            self._describe_interrupt(e)
            raise

    def _describe_interrupt(self, e):
        """Say on the interrupt ``e`` whether the run can be resumed (see :meth:`run`)."""
        import shlex

        out = shlex.quote(str(self.out))
        e.checkpoint = str(self.ckpt_path) if self.ckpt_path.exists() else None
        if self._ckpt_note is not None and e.checkpoint:
            e.resumable = True
            e.resume_hint = (f"{out} can be continued with: rieszflow run --resume --out {out} "
                             f"(from its checkpoint at {self._ckpt_note})")
        elif self.resume and e.checkpoint:
            e.resumable = True
            e.resume_hint = f"{out} can be continued with: rieszflow run --resume --out {out}"
        elif not self._writer_opened and not self.resume:
            e.resumable = False
            e.resume_hint = (f"interrupted before {out} was written: nothing to resume; run the "
                             f"command again (without --resume)")
        else:
            e.resumable = False
            e.resume_hint = (f"interrupted before the first checkpoint of {out}: it cannot be "
                             f"resumed; start it again with --overwrite")
        if getattr(e, "checkpoint_error", None):
            e.resume_hint += f" (the interrupt's own checkpoint failed: {e.checkpoint_error})"

    def _run(self) -> dict:
        cfg = self.cfg
        if self.resume and not self.out.exists():          # before the data load
            raise FileNotFoundError(f"--resume: {self.out} does not exist; start the run without "
                                    f"--resume")
        self._build()
        self.elapsed = {"phase_a": 0.0, "phase_b": 0.0}
        self.step_a = 0
        # the optimiser (and its schedule's validation) before the writer: a bad schedule leaves no file
        # Phase B freezes the particles of the random-feature maps (paper 000); a learned map
        # (LUNA, Hedgehog) trains its projections jointly with everything else (paper 001).
        frozen = set() if cfg.learned_map else set(self.omega_names)
        self.trainable = [k for k in self.model.params if k not in frozen]
        opt = self._optimizer()
        # a resume reads and verifies the whole checkpoint before the file is touched: a damaged
        # checkpoint is bad input (exit 2) and leaves the run file as it was
        checked = self._check_resumable(opt) if self.resume else None
        w = self._open_writer()
        status = "failed"
        try:
            units = self._units()
            start, best_state, best_acc, best_epoch = 0, None, -1.0, 0
            stopped_early, partial_a = False, None
            if self.resume:
                meta, best_state, adam = self._load_ckpt(w, checked)
                best_acc, best_epoch = meta["best_acc"], meta["best_epoch"]
                stopped_early = meta["stopped_early"]
                self.step_a = meta["phase_a_steps"]
                partial_a = meta.get("partial")
                if meta["phase"] != "start":
                    done = units.index((meta["phase"], meta["epoch"]))
                    start = done if partial_a else done + 1
                if adam is not None:
                    opt.load_state_dict(adam)
            else:
                if cfg.attention == "linear":
                    self._record_omega(w)                  # snapshot of the initial law at step 0
                # resumable from the first second: a checkpoint of the initial state
                self._save_ckpt(w, "start", 0, None, -1.0, 0, opt)
            # planned records, for the progress and ETA of `rieszflow status` (writer.plan)
            # (Phase A's batches as batches(min_last=2) yields them)
            w.plan(step=self.step_a if stopped_early else (cfg.phase_a_epochs * count_batches(
                       len(self.train), cfg.batch_size, min_last=2) if cfg.kernel else 0),
                   batch=cfg.epochs * count_batches(len(self.train), cfg.batch_size))
            for phase, epoch in units[start:]:
                t0 = time.perf_counter()
                if phase == "A":
                    if stopped_early:                      # the early stop of Phase A fired
                        continue
                    stopped_early = self._phase_a_epoch(w, epoch, partial_a, opt=opt, best=(
                        best_state, best_acc, best_epoch))
                    partial_a = None
                    self.elapsed["phase_a"] += time.perf_counter() - t0
                    if self.step_a % cfg.record_every:
                        self._record_omega(w)               # always keep the final particles
                    if cfg.phase_a_control == "matched_jitter" and (stopped_early
                                                                     or epoch == cfg.phase_a_epochs):
                        self._matched_jitter(w)
                    w.set_attrs(phase_a_steps=self.step_a, phase_a_stopped_early=int(stopped_early))
                    if stopped_early:
                        w.plan(step=self.step_a)            # no more Phase A steps will come
                    self._save_ckpt(w, "A", epoch, best_state, best_acc, best_epoch, opt,
                                    stopped_early=stopped_early)
                    continue
                if (cfg.select_from == "after_phase_a" and cfg.kernel and cfg.phase_a_after
                        and epoch == cfg.phase_a_after + 1):
                    # the epochs before Phase A are out of the selection (config.select_from)
                    best_state, best_acc, best_epoch = None, -1.0, 0
                tr_loss, tr_acc = self._phase_b_epoch(w, opt, epoch)
                self.elapsed["phase_b"] += time.perf_counter() - t0
                va_loss, va_acc, _ = self._evaluate(self.val)
                w.append("epoch", {"train_loss": tr_loss, "train_accuracy": tr_acc,
                                   "val_loss": va_loss, "val_accuracy": va_acc}, coord=epoch)
                if not self.quiet:
                    print(f"epoch {epoch}: train loss {tr_loss:.4f} acc {tr_acc:.4f} | "
                          f"val loss {va_loss:.4f} acc {va_acc:.4f}", flush=True)
                if va_acc > best_acc:
                    best_acc, best_epoch = va_acc, epoch
                    best_state = self.model.state_dict()
                self._save_ckpt(w, "B", epoch, best_state, best_acc, best_epoch, opt,
                                stopped_early=stopped_early)
            w.set_attrs(phase_a_steps=self.step_a, phase_a_stopped_early=int(stopped_early))
            if best_state is not None:
                self.model.load_state_dict(best_state)
            # Test, once, with the checkpoint chosen on validation accuracy.
            te_loss, te_acc, P = self._evaluate(self.test)
            # predictions first: if a metric cannot be computed, they are still in the file
            w.dimension("example", len(self.test), coords=np.arange(len(self.test)),
                        attrs={"long_name": "test example (row of the test split)", "units": "1"})
            names = self.class_names
            w.dimension("class", 2, coords=np.array(names),
                        attrs={"long_name": f"class (label 0 = {names[0]}, 1 = {names[1]})",
                               "units": "1"})
            w.variable("test_proba", ("example", "class"), data=P,
                       attrs={"long_name": "predicted class probability on the test split",
                              "units": "1"})
            w.variable("test_label", ("example",), dtype="i8", data=self.test.labels,
                       attrs={"long_name": "true test label", "units": "1",
                              "flag_values": np.arange(2, dtype=np.int64),
                              "flag_meanings": " ".join(names)})
            metrics = classification_metrics(self.test.labels, P)
            w.dimension("metric", len(METRIC_NAMES), coords=np.array(METRIC_NAMES),
                        attrs={"long_name": "test metric name", "units": "1"})
            w.variable("test_metrics", ("metric",), data=[metrics[k] for k in METRIC_NAMES],
                       attrs={"long_name": "test-split metrics of the validation-selected checkpoint",
                              "units": "1",
                              "comment": "dimensionless; log_loss is in nats (natural logarithm)"})
            train_seconds = self.elapsed["phase_a"] + self.elapsed["phase_b"]
            extra = {"train_seconds": train_seconds, "phase_a_seconds": self.elapsed["phase_a"],
                     "phase_b_seconds": self.elapsed["phase_b"], "best_epoch": best_epoch,
                     "best_val_accuracy": best_acc}
            w.set_attrs(**extra)
            status = "complete"
            return {**metrics, **extra}
        except KeyboardInterrupt:
            status = "interrupted"
            raise
        except CheckpointError:
            status = self._prior_status or "interrupted"     # bad input: the file is as it was
            raise
        finally:
            w.close(status)
            # kept on request: ``--resume --epochs N`` extends a finished run from it
            if status == "complete" and not self.keep_checkpoint:
                self.ckpt_path.unlink(missing_ok=True)


def run_main_job(cfg: MainJobConfig, out, *, overwrite=False, resume=False, quiet=False,
                 keep_checkpoint=False) -> dict:
    """Run the main job (see :class:`MainJob`) and return its test metrics.

    Parameters
    ----------
    cfg : MainJobConfig
        The resolved configuration.
    out : str or os.PathLike
        HDF5 file (see README, "HDF5 layout").
    overwrite : bool, default False
        Replace an existing ``out``.
    resume : bool, default False
        Continue an interrupted run from its last completed epoch
        (checkpoint ``<out>.ckpt.npz``).
    quiet : bool, default False
        No progress bars.
    keep_checkpoint : bool, default False
        Keep the final checkpoint ``<out>.ckpt.npz`` of a complete run (``rieszflow run``
        does), so that ``resume=True`` with more ``epochs`` can extend it.

    Returns
    -------
    dict
        :data:`rieszflow.engine.attention.metrics.METRIC_NAMES` plus ``train_seconds``,
        ``phase_a_seconds``, ``phase_b_seconds``, ``best_epoch`` (see :meth:`MainJob.run`).
    """
    return MainJob(cfg, out, overwrite=overwrite, resume=resume, quiet=quiet,
                   keep_checkpoint=keep_checkpoint).run()
