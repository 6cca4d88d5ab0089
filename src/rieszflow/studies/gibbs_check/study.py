"""``rieszflow gibbs-check``: does Phase A end near the Gibbs state of its own Hamiltonian?

For every head of a main-job file (one kernel run in the paper order):

1. Rebuild the network Phase A acted on (``learning.runfiles.load_phase_a_setup``:
   initial weights from the seed, every head's particles at their learned values).
2. Build the head's one-body potential ``V`` (:mod:`.potential`): the first variation, at the
   learned particles, of the Phase A alignment energy (mean over the mini-batches of a
   fixed, seeded set of training sentences) with respect to the head's empirical measure.
3. Sample the particle Gibbs measure ``pi ∝ exp(-beta m H_m) 1{|omega_k| <= R}`` of
   ``H_m = (1/m) sum_k V(omega_k) + lam W_{m,s}`` with the run's beta, lam, s, R, where
   ``W_{m,s} = 1/(2m(m-1)) sum_{k != l} g_s`` (eq. (2.3)) -- the invariant law of Phase A's
   step (4.3), which moves each particle by ``-eta m grad_k H`` plus ``sqrt(2 eta / beta)``
   noise, with the alignment energy linearised. Sampler: component-wise MALA
   (:func:`~rieszflow.engine.simulate.mala_within_gibbs`), ``chains`` chains (chain 0 from the learned,
   chain 1 from the initial particles), burn-in with step adaptation, then kept sweeps with a
   frozen step (chain 2 starts from a zero-temperature quench of the learned particles, below
   the Gibbs state's Hamiltonian, so the chains bracket it); split-R-hat and effective sample sizes of the Hamiltonian and of the mean
   particle norm.
4. Compare learned, initial and Gibbs particles: unbiased MMD^2 (Gaussian kernel, one
   median-heuristic bandwidth per head, jackknife SE), norm distributions, the Hamiltonian
   (linearised, and the full alignment energy), and the attention each induces on held-out
   sentences (mean total variation between attention rows).

The verdict per head (thresholds stated in :func:`verdict`) says whether the learned
particles are at/near the Gibbs state, at/near the initial law, or neither.
"""
from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np

from rieszflow.engine.stats import effective_sample_size, split_rhat
from rieszflow.engine.storage import atomic_output
from rieszflow.engine.attention.data import batches
from rieszflow.engine.energy.riesz import riesz_energy
from rieszflow.engine.measures import median_bandwidth, mmd2
from rieszflow.engine.simulate import adapt_step_size, mala_within_gibbs
from rieszflow.engine.space import Ball
from rieszflow.engine.storage import TrajectoryWriter, open_run
from rieszflow.learning.objectives import ALIGNMENTS
from rieszflow.learning.runfiles import load_phase_a_setup
from rieszflow.studies.gibbs_check.potential import HeadPotential

__all__ = ["KIND", "COMPARISONS", "MEASURES", "verdict", "quench", "run_gibbs_check"]

KIND = "gibbs_check"
#: The particle sets compared, in table order.
MEASURES = ("learned", "initial", "gibbs")
#: The pairs compared by MMD and by attention kernels; "gibbs-gibbs" is chain 0 against chain 1
#: (two Gibbs samples: the size of the statistic when both laws are the same).
COMPARISONS = ("learned-gibbs", "initial-gibbs", "learned-initial", "gibbs-gibbs")
QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)
STATISTICS = ("hamiltonian", "mean_norm")
#: A statistic is "indistinguishable from 0" below this many standard errors.
Z = 3.0
#: Fraction of the initial-to-Gibbs MMD distance below which the learned law is "near" one end.
NEAR = 0.25
#: Largest split-R-hat of the Hamiltonian for which the chains count as mixed.
RHAT_MAX = 1.1


def verdict(mmd2, se) -> tuple[str, float]:
    """Where the learned law sits between the initial law and the Gibbs state.

    With ``D_xy = sqrt(max(MMD^2_xy, 0))`` (MMD is a metric on laws for the Gaussian kernel),
    in this order: "undecided" if ``MMD^2(initial, gibbs) < Z se`` (the statistic cannot tell
    the two ends apart); "at its Gibbs state" if ``MMD^2(learned, gibbs) < Z se`` (not
    distinguishable from it); "at its initial law" if ``MMD^2(learned, initial) < Z se``;
    "near its Gibbs state" if ``D_lg <= NEAR D_ig``; "near its initial law" if
    ``D_li <= NEAR D_ig``; else "neither". ``Z = 3``, ``NEAR = 0.25``.

    Parameters
    ----------
    mmd2, se : sequence of float, length 4
        MMD^2 and its SE in the order of :data:`COMPARISONS`.

    Returns
    -------
    label : str
    fraction : float
        ``D_lg / D_ig``: the part of the initial-to-Gibbs distance still to go (0 at the Gibbs
        state, about 1 at the initial law).
    """
    lg, ig, li = (float(v) for v in mmd2[:3])
    se_lg, se_ig, se_li = (float(v) for v in se[:3])
    d_lg, d_ig, d_li = (math.sqrt(max(v, 0.0)) for v in (lg, ig, li))
    frac = d_lg / d_ig if d_ig > 0 else math.nan
    if ig < Z * se_ig:
        return "undecided", frac
    if lg < Z * se_lg:
        return "at its Gibbs state", frac
    if li < Z * se_li:
        return "at its initial law", frac
    if d_lg <= NEAR * d_ig:
        return "near its Gibbs state", frac
    if d_li <= NEAR * d_ig:
        return "near its initial law", frac
    return "neither", frac


def quench(potential, omega, radius: float, steps: int, step: float):
    """Zero-temperature start: projected gradient descent of the one-body potential.

    ``omega <- P_ball(omega - step * grad V(omega))`` for every particle, ``steps`` times (the
    repulsion, whose coefficient ``beta lam / (m - 1)`` is ~1e-4 per pair at the main job's
    values, is left out of this start only; the chains themselves sample the full law).

    Parameters
    ----------
    potential : callable
        ``points (K, d) -> (V (K,), grad V (K, d))``.
    omega : numpy.ndarray, shape (m, d)
        Where to start.
    radius : float
        Ball radius.
    steps : int
        Descent steps (>= 0).
    step : float
        Step size (> 0).

    Returns
    -------
    numpy.ndarray, shape (m, d)
        The quenched particles, inside the ball.
    """
    ball = Ball(radius)
    x = ball.project(np.asarray(omega, dtype=np.float64))
    for _ in range(steps):
        x = ball.project(x - step * potential(x)[1])
    return x


def _sentences(split, n, rng):
    idx = np.sort(rng.permutation(len(split))[:min(n, len(split))])
    return type(split)([split.ids[i] for i in idx], split.labels[idx], split.name)


def _batches(split, batch_size, pad_id, model):
    xp = model.backend
    return [(xp.asarray(i, dtype=np.int64), xp.asarray(m, dtype=bool), xp.asarray(y, dtype=np.int64))
            for i, m, y, _ in batches(split, batch_size, pad_id=pad_id, min_last=2)]


def _attention_rows(x, keym, omega, fmap):
    """Row-normalised attention of one head: x (B, L, d_k), keym (B, L) -> (B, L, L)."""
    phi, _ = fmap.forward(x, omega)
    kappa = phi @ phi.transpose(0, 2, 1) * keym[:, None, :]
    return kappa / kappa.sum(-1, keepdims=True)


def _kernel_tv(rows_a, rows_b, mask):
    """Per sentence: the mean over real query tokens of TV(row_a, row_b), shape (B,)."""
    tv = 0.5 * np.abs(rows_a - rows_b).sum(-1)                      # (B, L)
    return (tv * mask).sum(1) / mask.sum(1)


def _sample_head(pot, starts, cfg, run_cfg, rng, progress):
    """Burn-in with adaptation, then kept sweeps; traces and saved configurations."""
    init_fn, step_fn = mala_within_gibbs(pot, Ball(run_cfg.radius), eta=cfg.eta0, beta=run_cfg.beta,
                                         lam=run_cfg.lam, s=run_cfg.s)
    m = starts[0].shape[0]
    ball = Ball(run_cfg.radius)
    # the file stores float32 particles: those Phase A projected onto the sphere can lie ~1e-7
    # outside it in float64; project them back (a float32 rounding, checked)
    moved = [ball.project(s) for s in starts]
    for s0, s1 in zip(starts, moved):
        if np.max(np.abs(s0 - s1)) > 1e-5 * run_cfg.radius:
            raise ValueError(f"starting particles lie {np.max(np.abs(s0 - s1)):.2e} outside the ball "
                             f"of radius {run_cfg.radius}: more than float32 rounding")
    states = [init_fn(s) for s in moved]
    states = [adapt_step_size(st, 0.0, 1, target_acceptance=0.0, eta=cfg.eta0) for st in states]
    total = cfg.burn_in + cfg.sweeps
    C = len(states)
    H = np.empty((C, total + 1))
    norms = np.empty((C, total + 1))

    def ham(st):
        return float(st.potential.mean() + run_cfg.lam * float(riesz_energy(st.omega, run_cfg.s)))

    for c, st in enumerate(states):
        H[c, 0], norms[c, 0] = ham(st), float(np.linalg.norm(st.omega, axis=1).mean())
    save_at = set(cfg.burn_in + np.linspace(cfg.sweeps / cfg.n_saved, cfg.sweeps,
                                            cfg.n_saved).round().astype(int))
    saved = [[] for _ in range(C)]
    block_start = [int(st.n_accepted.sum()) for st in states]
    kept_start = None
    for sweep in progress(range(1, total + 1)):
        for c in range(C):
            xi = rng.standard_normal((m, starts[0].shape[1]))
            log_u = np.log(rng.uniform(size=m))
            st = step_fn(states[c], (xi, log_u))
            if sweep <= cfg.burn_in and sweep % cfg.adapt_every == 0:
                acc = int(st.n_accepted.sum()) - block_start[c]
                st = adapt_step_size(st, acc, cfg.adapt_every * m,
                                     target_acceptance=cfg.target_acceptance)
                block_start[c] = int(st.n_accepted.sum())
            states[c] = st
            H[c, sweep], norms[c, sweep] = ham(st), float(np.linalg.norm(st.omega, axis=1).mean())
            if sweep in save_at:
                saved[c].append(st.omega.copy())
        if sweep == cfg.burn_in:
            kept_start = [int(st.n_accepted.sum()) for st in states]
    acc = np.array([(int(st.n_accepted.sum()) - k0) / (cfg.sweeps * m)
                    for st, k0 in zip(states, kept_start)])
    eta = np.array([float(st.eta) for st in states])
    return dict(H=H, norms=norms, saved=np.array(saved), acceptance=acc, eta=eta,
                final=[st.omega for st in states], ham=ham, init_fn=init_fn)


def _analyse_head(pot, setup, layer, head, res, heldout, run_cfg, burn_in):
    """MMD, norms, Hamiltonians and attention comparisons of one head."""
    learned = setup.omega_final[layer, head]
    initial = setup.omega_initial[layer, head]
    gibbs, gibbs_b = res["final"][0], res["final"][1]
    sets = {"learned": learned, "initial": initial, "gibbs": gibbs}
    bw = median_bandwidth(learned, initial, gibbs)
    pairs = [(learned, gibbs), (initial, gibbs), (learned, initial), (gibbs, gibbs_b)]
    mm = [mmd2(a, b, bandwidth=bw, paired=True) for a, b in pairs]
    out = {"bandwidth": bw, "mmd2": np.array([r.mmd2 for r in mm]),
           "mmd2_se": np.array([r.se for r in mm])}
    # every chain's last configuration against learned and initial, and the chains among
    # themselves: does the answer depend on which chain stands for the Gibbs state?
    finals = res["final"]
    C = len(finals)
    out["mmd2_chain"] = np.array([[mmd2(ref, f, bandwidth=bw, paired=True).mmd2 for f in finals]
                                  for ref in (learned, initial)])
    out["mmd2_chain_se"] = np.array([[mmd2(ref, f, bandwidth=bw, paired=True).se for f in finals]
                                     for ref in (learned, initial)])
    between = [mmd2(finals[a], finals[b], bandwidth=bw, paired=True)
               for a in range(C) for b in range(a + 1, C)]
    out["mmd2_between_max"] = max(r.mmd2 for r in between)
    lab, frac = verdict(out["mmd2"], out["mmd2_se"])
    # mixing-aware: with split-R-hat(H) > RHAT_MAX the Gibbs reference depends on the chain
    H = res["H"]
    kept = H[:, burn_in + 1:]
    rhat = split_rhat(kept)
    z_start = [(H[c, 0] - kept[c].mean()) / max(kept[c].std(), 1e-300) for c in range(min(C, 2))]
    out["start_z"] = np.array(z_start)
    out["rhat_h"] = rhat
    if not rhat <= RHAT_MAX:
        lab = ("not at its Gibbs state (chains not mixed: distance undecided)" if z_start[0] > Z
               else "undecided (chains not mixed)")
    out["verdict"], out["distance_fraction"] = lab, frac
    # norms
    nq, nm, nsd, wall = [], [], [], []
    for name in MEASURES:
        r = np.linalg.norm(sets[name], axis=1)
        nq.append(np.quantile(r, QUANTILES))
        nm.append(r.mean())
        nsd.append(r.std(ddof=1))
        wall.append(np.mean(r > run_cfg.radius * (1 - 1e-3)))
    out.update(norm_quantile=np.array(nq), norm_mean=np.array(nm), norm_sd=np.array(nsd),
               wall_fraction=np.array(wall))
    # Hamiltonians: linearised H_m and the full alignment energy
    lin, full = [], []
    for name in MEASURES:
        om = sets[name]
        v, _ = pot(om)
        lin.append(v.mean() + run_cfg.lam * float(riesz_energy(om, run_cfg.s)))
        full.append(pot.energy(om) + run_cfg.lam * float(riesz_energy(om, run_cfg.s)))
    out["hamiltonian_linear"] = np.array(lin)
    out["hamiltonian_full"] = np.array(full)
    kept = res["H"][:, burn_in + 1:]
    out["hamiltonian_gibbs_mean"], out["hamiltonian_gibbs_sd"] = float(kept.mean()), float(kept.std())
    # attention kernels on held-out sentences, representations of the frozen network
    model, fmap = setup.model, setup.model.feature_maps[layer]
    per = {k: [] for k in COMPARISONS}
    for ids, mask, _ in heldout:
        x = model.attention_inputs(ids, mask)[layer]
        keym = mask.astype(x.dtype)
        q = model.layers[layer].attn.project(model.attention_params(layer), x)[0][head]
        rows = {k: _attention_rows(q, keym, om, fmap) for k, om in
                (("learned", learned), ("initial", initial), ("gibbs", gibbs), ("gibbs_b", gibbs_b))}
        mk = np.asarray(mask, dtype=np.float64)
        for comp, (a, b) in zip(COMPARISONS, (("learned", "gibbs"), ("initial", "gibbs"),
                                              ("learned", "initial"), ("gibbs", "gibbs_b"))):
            per[comp].append(_kernel_tv(rows[a], rows[b], mk))
    tv = [np.concatenate(per[k]) for k in COMPARISONS]
    out["kernel_tv"] = np.array([t.mean() for t in tv])
    out["kernel_tv_se"] = np.array([t.std(ddof=1) / math.sqrt(len(t)) for t in tv])
    return out


def _report(path_run, setup, cfg, heads, results, diag, wall, clip):
    rc = setup.config
    lines = [f"Gibbs check of `{path_run}`: {rc.n_layers} layers x {rc.n_heads} heads, m = {rc.m} "
             f"particles in R^{rc.d_model // rc.n_heads}, beta = {rc.beta:g}, lam = {rc.lam:g}, "
             f"s = {rc.s:g}, radius {rc.radius:g}, alignment `{rc.alignment}`, Phase A "
             f"{setup.phase_a_steps} steps (run file status `{setup.status}`); potential on {cfg.n_sentences} training sentences, "
             f"kernels on {cfg.n_heldout} validation sentences; {cfg.chains} chains x "
             f"({cfg.burn_in} burn-in + {cfg.sweeps} kept) sweeps; wall {wall:.0f} s.", "",
             f"Phase A's largest per-head drift m grad H exceeded clip_norm = "
             f"{rc.clip_norm:g} in {100 * clip[0]:.0f}% of its steps (median largest per-head drift "
             f"norm {clip[1]:.1f}): where it did, Phase A moved slower than the Langevin dynamics "
             f"whose invariant law is the Gibbs measure below.", "",
             "MMD^2 (unbiased, paired by particle index, Gaussian kernel, bandwidth = median "
             "pairwise distance of learned, initial and Gibbs particles of the head; +- jackknife "
             "SE):", "",
             "| head | bandwidth | learned-gibbs | initial-gibbs | learned-initial | gibbs-gibbs "
             "| D_lg/D_ig | verdict |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for (l, h), r in zip(heads, results):
        cells = " | ".join(f"{v:.4f} +- {s:.4f}" for v, s in zip(r["mmd2"], r["mmd2_se"]))
        lines.append(f"| L{l}H{h} | {r['bandwidth']:.3f} | {cells} | {r['distance_fraction']:.2f} "
                     f"| {r['verdict']} |")
    lines += ["", "Every chain's last configuration as the Gibbs reference (MMD^2 +- SE, same kernel), "
              "and the largest MMD^2 between two chains:", "",
              "| head | " + " | ".join(f"learned-chain {c}" for c in range(cfg.chains)) + " | "
              + " | ".join(f"initial-chain {c}" for c in range(cfg.chains)) + " | max chain-chain |",
              "| --- |" + " ---: |" * (2 * cfg.chains + 1)]
    for (l, h), r in zip(heads, results):
        cells = [f"{v:.4f} +- {e:.4f}" for row, erow in zip(r["mmd2_chain"], r["mmd2_chain_se"])
                 for v, e in zip(row, erow)]
        lines.append(f"| L{l}H{h} | " + " | ".join(cells) + f" | {r['mmd2_between_max']:.4f} |")
    lines += ["", "Start test: (H at the start - mean over the kept sweeps) / sd over the kept sweeps "
              "of chain 0 (started at the learned particles) and chain 1 (at the initial ones); an "
              "exact chain started in its stationary law has no drift, so z >> 3 says the start is "
              "not a typical Gibbs configuration: " + ", ".join(
                  f"L{l}H{h} {r['start_z'][0]:.0f}, {r['start_z'][1]:.0f}"
                  for (l, h), r in zip(heads, results)) + "."]
    lines += ["", "Mixing (kept sweeps): per-particle acceptance, step, split-R-hat and ESS of the "
              "Hamiltonian and of the mean particle norm over all chains:", "",
              "| head | acceptance | step eta | R-hat H | ESS H | R-hat mean norm | ESS mean norm |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for (l, h), d in zip(heads, diag):
        lines.append(f"| L{l}H{h} | {', '.join(f'{a:.2f}' for a in d['acceptance'])} | "
                     f"{', '.join(f'{e:.2e}' for e in d['eta'])} | {d['rhat'][0]:.3f} | "
                     f"{d['ess'][0]:.0f} | {d['rhat'][1]:.3f} | {d['ess'][1]:.0f} |")
    lines += ["", "Norms |omega_k| (mean +- sd; median; fraction at the wall |omega| > 0.999 R) and "
              "Hamiltonians (linearised H_m = (1/m) sum V + lam W; full = alignment energy + lam W):",
              "", "| head | particles | norm mean +- sd | median | at wall | H_m linearised | "
              "H full |", "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for (l, h), r in zip(heads, results):
        for i, name in enumerate(MEASURES):
            lines.append(f"| L{l}H{h} | {name} | {r['norm_mean'][i]:.3f} +- {r['norm_sd'][i]:.3f} | "
                         f"{r['norm_quantile'][i][2]:.3f} | {r['wall_fraction'][i]:.2f} | "
                         f"{r['hamiltonian_linear'][i]:.5f} | {r['hamiltonian_full'][i]:.5f} |")
    lines += ["", "Linearised Hamiltonian of the Gibbs chains over the kept sweeps (mean +- sd, all "
              "chains): " + ", ".join(f"L{l}H{h} {r['hamiltonian_gibbs_mean']:.5f} +- "
                                      f"{r['hamiltonian_gibbs_sd']:.5f}" for (l, h), r in
                                      zip(heads, results)) + "."]
    lines += ["", "Attention on held-out sentences (mean over sentences of the mean total variation "
              "between attention rows, +- SE over sentences):", "",
              "| head | learned-gibbs | initial-gibbs | learned-initial | gibbs-gibbs |",
              "| --- | ---: | ---: | ---: | ---: |"]
    for (l, h), r in zip(heads, results):
        lines.append(f"| L{l}H{h} | " + " | ".join(f"{v:.4f} +- {s:.4f}" for v, s in
                                                  zip(r["kernel_tv"], r["kernel_tv_se"])) + " |")
    labels = [r["verdict"] for r in results]
    overall = max(set(labels), key=labels.count)
    what = {"neither": "Phase A ends near neither its Gibbs state nor its initial law",
            "not at its Gibbs state (chains not mixed: distance undecided)":
                "Phase A does not end at its Gibbs state (start test); how far from it stays "
                "undecided (the chains did not mix)",
            "undecided (chains not mixed)": "undecided (the chains did not mix)",
            "undecided": "undecided (MMD does not resolve the initial law from the Gibbs state)"
            }.get(overall, f"Phase A ends {overall}")
    lines += ["", f"Verdict: {sum(lab == overall for lab in labels)} of {len(labels)} heads: {what}"
              + "; per head: " + ", ".join(f"L{l}H{h} {lab}" for (l, h), lab in zip(heads, labels))
              + ". Thresholds: chains mixed when split-R-hat(H) <= 1.1 (otherwise the MMD verdict is "
                "replaced by the start test); 'undecided' = MMD^2(initial, gibbs) below 3 SE; 'at' "
                "= MMD^2 below 3 SE; 'near' = MMD distance below 0.25 of the initial-to-Gibbs "
                "distance."]
    return "\n".join(lines), overall


def run_gibbs_check(config, run_path, out, *, overwrite: bool = False, quiet: bool = False,
                    plots: bool = True) -> dict:
    """Run the Gibbs check of a main-job file and write ``out`` (HDF5) and PNG plots beside it.

    Parameters
    ----------
    config : GibbsCheckConfig
    run_path : str or os.PathLike
        A complete main-job file of a kernel run (``rieszflow run``).
    out : str or os.PathLike
        HDF5 file to write (atomically: a temporary name, renamed when complete).
    overwrite : bool, default False
        Replace an existing ``out``.
    quiet : bool, default False
        No progress bars.
    plots : bool, default True
        Write ``<out stem>_norms.png``, ``_traces.png`` and ``_mmd.png``.

    Returns
    -------
    dict
        ``path``, ``plots``, ``report`` (Markdown tables), ``verdict`` (the majority label),
        ``seconds``.

    Raises
    ------
    FileNotFoundError, engine.storage.RunFileError, ValueError
        As :func:`~rieszflow.learning.runfiles.load_phase_a_setup`; ``FileExistsError`` if ``out``
        exists without ``overwrite``.

    References
    ----------
    paper 000, eq. (2.2), (2.3), (4.3), (C.4), (E.7); Gretton et al., JMLR 13 (2012) (MMD).
    """
    from tqdm.auto import tqdm

    t0 = time.perf_counter()
    out = Path(out)
    if out.exists() and not overwrite:
        raise FileExistsError(f"{out} already exists; pass --overwrite or choose another --out path")
    setup = load_phase_a_setup(run_path)
    rc = setup.config
    rng = np.random.default_rng([config.seed, 20261125])
    train = _sentences(setup.train, config.n_sentences, rng)
    held = _sentences(setup.validation, config.n_heldout, rng)
    pad = setup.tokenizer.pad_id
    tb = _batches(train, rc.batch_size, pad, setup.model)
    hb = _batches(held, 64, pad, setup.model)
    heads = [(l, h) for l in range(rc.n_layers) for h in range(rc.n_heads)]
    results, diag, traces = [], [], []
    for l, h in heads:
        pot = HeadPotential(setup.model, tb, ALIGNMENTS[rc.alignment], l, h,
                           compute_dtype=config.compute_dtype)
        starts = [setup.omega_final[l, h], setup.omega_initial[l, h]]
        if config.chains >= 3:
            starts.append(quench(pot, setup.omega_final[l, h], rc.radius, config.quench_steps,
                                 config.quench_step))
        starts += [setup.omega_final[l, h]] * (config.chains - len(starts))
        rng_h = np.random.default_rng([config.seed, l, h])

        def progress(it, desc=f"gibbs-check L{l}H{h}"):
            return tqdm(it, desc=desc, disable=quiet, leave=False, dynamic_ncols=True, mininterval=1.0)

        res = _sample_head(pot, starts, config, rc, rng_h, progress)
        kept = slice(config.burn_in + 1, None)
        d = {"acceptance": res["acceptance"], "eta": res["eta"],
             "rhat": [split_rhat(res["H"][:, kept]), split_rhat(res["norms"][:, kept])],
             "ess": [effective_sample_size(res["H"][:, kept]),
                     effective_sample_size(res["norms"][:, kept])]}
        results.append(_analyse_head(pot, setup, l, h, res, hb, rc, config.burn_in))
        diag.append(d)
        traces.append(res)
    wall = time.perf_counter() - t0
    run_ds = open_run(run_path, kind="main_job")
    setup_commit = str(run_ds.attrs.get("git_commit", "unknown"))
    drift = np.asarray(run_ds["drift_norm"].values, dtype=np.float64)
    clip = (float(np.mean(drift > rc.clip_norm)), float(np.median(drift))) if drift.size else \
        (math.nan, math.nan)
    report, overall = _report(run_path, setup, config, heads, results, diag, wall, clip)

    L, H, m = rc.n_layers, rc.n_heads, rc.m
    dk = rc.d_model // rc.n_heads
    attrs = {"seed": config.seed, "run_file": str(run_path), "verdict": overall,
             "run_file_status": setup.status, "run_file_commit": setup_commit,
             "verdicts": json.dumps({f"L{l}H{h}": r["verdict"] for (l, h), r in zip(heads, results)}),
             "report": report, "z_threshold": Z, "near_threshold": NEAR,
             "hamiltonian_normalisation": (
                 "H_m(Omega) = (1/m) sum_k V(omega_k) + lam W_{m,s}(Omega), W_{m,s} = 1/(2m(m-1)) "
                 "sum_{k != l} g_s(omega_k - omega_l) (eq. (2.3), the main job's); Gibbs measure "
                 "exp(-beta m H_m) on the ball (eq. (E.7) with beta_N = beta m, the invariant law "
                 "of Phase A's step (4.3) with drift m grad H, unclipped)"),
             "potential_definition": (
                 "V = first variation at the learned particles of the Phase A alignment energy "
                 "(mean over mini-batches of the run's batch_size of a fixed set of training "
                 "sentences, dropout off) with respect to the head's empirical measure; other "
                 "heads and all weights frozen at the network Phase A saw (its initialisation); "
                 "int V d mu_learned = 0; dropped: all terms of order >= 2 in mu - mu_learned"),
             "mmd_kernel": "Gaussian exp(-|a-b|^2/(2 sigma^2)), sigma = median pairwise distance "
                           "of the pooled learned, initial and Gibbs (chain 0) particles, per head; "
                           "paired unbiased estimator (pairs i = j left out of the cross term), "
                           "particles paired by index",
             "sampler": "component-wise MALA (engine.simulate.mala_within_gibbs), step adapted in "
                        "burn-in (engine.simulate.adapt_step_size), frozen afterwards"}
    rcfg = {f"run_{k}": v for k, v in (("beta", rc.beta), ("lam", rc.lam), ("s", rc.s),
                                       ("radius", rc.radius), ("m", rc.m),
                                       ("alignment", rc.alignment))}
    attrs.update(rcfg)
    one = {"units": "1"}
    # written whole beside ``out`` and renamed onto it once closed and verified
    with atomic_output(out) as tmp, TrajectoryWriter(tmp, KIND, config=config.to_dict(), attrs=attrs) as w:
        w.dimension("layer", L, coords=np.arange(L), attrs={"long_name": "encoder layer index", **one})
        w.dimension("head", H, coords=np.arange(H), attrs={"long_name": "attention head index", **one})
        C = config.chains
        w.dimension("chain", C, coords=np.arange(C),
                    attrs={"long_name": "sampler chain (0: from the learned particles, 1: from the "
                                        "initial ones, 2: from the quenched learned ones)", **one})
        w.dimension("particle", m, coords=np.arange(m), attrs={"long_name": "particle index k", **one})
        w.dimension("coord", dk, coords=np.arange(dk),
                    attrs={"long_name": "coordinate in R^{d_head}", **one})
        w.dimension("chain_start", 2, coords=np.array(["learned", "initial"]),
                    attrs={"long_name": "start of chains 0 and 1", **one})
        w.dimension("sample", config.n_saved, coords=np.arange(config.n_saved),
                    attrs={"long_name": "saved configuration (evenly over the kept sweeps)", **one})
        n_sw = config.burn_in + config.sweeps + 1
        w.dimension("sweep", n_sw, coords=np.arange(n_sw),
                    attrs={"long_name": f"sampler sweep (0: start; 1..{config.burn_in}: burn-in)",
                           **one})
        w.dimension("measure", len(MEASURES), coords=np.array(MEASURES),
                    attrs={"long_name": "particle set", **one})
        w.dimension("comparison", len(COMPARISONS), coords=np.array(COMPARISONS),
                    attrs={"long_name": "pair of particle sets compared", **one})
        w.dimension("quantile", len(QUANTILES), coords=np.array(QUANTILES),
                    attrs={"long_name": "quantile level", **one})
        w.dimension("statistic", len(STATISTICS), coords=np.array(STATISTICS),
                    attrs={"long_name": "scalar trace of the mixing diagnostics", **one})

        def grid(key, fn=lambda r, k: r[k]):
            return np.array([[fn(results[l * H + h], key) for h in range(H)] for l in range(L)])

        def tgrid(key):
            return np.array([[traces[l * H + h][key] for h in range(H)] for l in range(L)])

        def dgrid(key):
            return np.array([[diag[l * H + h][key] for h in range(H)] for l in range(L)])

        var = [
            ("omega_learned", ("layer", "head", "particle", "coord"), setup.omega_final,
             "learned particles (end of Phase A)", "1"),
            ("omega_initial", ("layer", "head", "particle", "coord"), setup.omega_initial,
             "initial particles (Phase A step 0)", "1"),
            ("omega_gibbs", ("layer", "head", "chain", "particle", "coord"),
             np.array([[np.stack(traces[l * H + h]["final"]) for h in range(H)] for l in range(L)]),
             "particles of the last kept sweep of each chain (Gibbs samples)", "1"),
            ("omega_saved", ("layer", "head", "chain", "sample", "particle", "coord"),
             tgrid("saved"), "saved Gibbs configurations of each chain", "1"),
            ("hamiltonian_trace", ("layer", "head", "chain", "sweep"), tgrid("H"),
             "linearised Hamiltonian H_m = (1/m) sum_k V(omega_k) + lam W_{m,s} after each sweep",
             "1"),
            ("mean_norm_trace", ("layer", "head", "chain", "sweep"), tgrid("norms"),
             "mean particle norm (1/m) sum_k |omega_k| after each sweep", "1"),
            ("acceptance", ("layer", "head", "chain"), tgrid("acceptance"),
             "per-particle acceptance rate over the kept sweeps", "1"),
            ("step_size", ("layer", "head", "chain"), tgrid("eta"),
             "proposal step eta of the kept sweeps (adapted in burn-in)", "1"),
            ("split_rhat", ("layer", "head", "statistic"), dgrid("rhat"),
             "split-R-hat over all chains (kept sweeps)", "1"),
            ("ess", ("layer", "head", "statistic"), dgrid("ess"),
             "effective sample size over all chains, in kept sweeps", "1"),
            ("bandwidth", ("layer", "head"), grid("bandwidth"),
             "Gaussian kernel bandwidth sigma of the MMD (median heuristic)", "1"),
            ("mmd2", ("layer", "head", "comparison"), grid("mmd2"),
             "unbiased squared MMD with the Gaussian kernel", "1"),
            ("mmd2_se", ("layer", "head", "comparison"), grid("mmd2_se"),
             "jackknife standard error of mmd2", "1"),
            ("mmd2_learned_chain", ("layer", "head", "chain"),
             grid("mmd2_chain", lambda r, k: r[k][0]),
             "unbiased squared MMD of the learned particles and each chain's last sweep", "1"),
            ("mmd2_initial_chain", ("layer", "head", "chain"),
             grid("mmd2_chain", lambda r, k: r[k][1]),
             "unbiased squared MMD of the initial particles and each chain's last sweep", "1"),
            ("start_z", ("layer", "head", "chain_start"), grid("start_z"),
             "(H at the start - kept mean) / kept sd of chains 0 (learned) and 1 (initial)", "1"),
            ("distance_fraction", ("layer", "head"), grid("distance_fraction"),
             "MMD(learned, gibbs) / MMD(initial, gibbs)", "1"),
            ("norm_quantile", ("layer", "head", "measure", "quantile"), grid("norm_quantile"),
             "quantiles of the particle norms |omega_k|", "1"),
            ("norm_mean", ("layer", "head", "measure"), grid("norm_mean"), "mean particle norm", "1"),
            ("norm_sd", ("layer", "head", "measure"), grid("norm_sd"),
             "standard deviation of the particle norms", "1"),
            ("wall_fraction", ("layer", "head", "measure"), grid("wall_fraction"),
             "fraction of particles with |omega| > 0.999 radius", "1"),
            ("hamiltonian_linear", ("layer", "head", "measure"), grid("hamiltonian_linear"),
             "linearised Hamiltonian (1/m) sum_k V(omega_k) + lam W_{m,s}", "1"),
            ("hamiltonian_gibbs_mean", ("layer", "head"), grid("hamiltonian_gibbs_mean"),
             "mean of the linearised Hamiltonian over the kept sweeps of all chains", "1"),
            ("hamiltonian_gibbs_sd", ("layer", "head"), grid("hamiltonian_gibbs_sd"),
             "standard deviation of the linearised Hamiltonian over the kept sweeps", "1"),
            ("hamiltonian_full", ("layer", "head", "measure"), grid("hamiltonian_full"),
             "alignment energy (full, nonlinear) + lam W_{m,s} of the head", "1"),
            ("kernel_tv", ("layer", "head", "comparison"), grid("kernel_tv"),
             "mean total variation between attention rows on held-out sentences", "1"),
            ("kernel_tv_se", ("layer", "head", "comparison"), grid("kernel_tv_se"),
             "standard error of kernel_tv over held-out sentences", "1"),
        ]
        for name, dims, data, ln, unit in var:
            w.variable(name, dims, data=np.asarray(data, dtype=np.float64),
                       attrs={"long_name": ln, "units": unit})
        # the study computes first and writes at the end: its wall time is the run's, to which the
        # writer adds its own (short) session on close
        w.set_attrs(wall_seconds=wall)
    pngs = _plots(out, heads, results, traces, rc, config, setup) if plots else []
    return {"path": str(out), "plots": pngs, "report": report, "verdict": overall, "seconds": wall}


def _plots(out, heads, results, traces, rc, cfg, setup):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stem = out.with_suffix("")
    paths = []
    n = len(heads)
    d = rc.d_model // rc.n_heads
    fig, axes = plt.subplots(1, n, figsize=(3.2 * n, 3), squeeze=False)
    for ax, (l, h), res in zip(axes[0], heads, traces):
        bins = np.linspace(0, rc.radius * 1.001, 40)
        ax.set_title(f"layer {l}, head {h}")
        ax.set_xlabel("particle norm |omega_k|")
        ax.set_ylabel("density")
        for name, om in (("learned", setup.omega_final[l, h]), ("initial", setup.omega_initial[l, h]),
                         ("Gibbs (chain 0)", res["final"][0])):
            ax.hist(np.linalg.norm(om, axis=1), bins=bins, density=True, histtype="step", label=name)
        x = np.linspace(0, rc.radius, 200)
        ax.plot(x, d * x ** (d - 1) / rc.radius ** d, "k:", lw=0.8, label="uniform on ball")
        ax.set_ylim(0, None)
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    p = Path(f"{stem}_norms.png")
    fig.savefig(p, dpi=110)
    plt.close(fig)
    paths.append(str(p))

    fig, axes = plt.subplots(1, n, figsize=(3.2 * n, 3), squeeze=False)
    for ax, (l, h), res in zip(axes[0], heads, traces):
        for c in range(res["H"].shape[0]):
            ax.plot(res["H"][c], lw=0.7, label=f"chain {c}")
        ax.axvline(cfg.burn_in, color="k", ls=":", lw=0.8)
        ax.set_title(f"layer {l}, head {h}")
        ax.set_xlabel("sweep")
        ax.set_ylabel("linearised Hamiltonian H_m")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    p = Path(f"{stem}_traces.png")
    fig.savefig(p, dpi=110)
    plt.close(fig)
    paths.append(str(p))

    fig, ax = plt.subplots(figsize=(6, 3.2))
    width = 0.8 / len(COMPARISONS)
    xs = np.arange(n)
    for i, comp in enumerate(COMPARISONS):
        ax.errorbar(xs + (i - 1.5) * width, [r["mmd2"][i] for r in results],
                    yerr=[r["mmd2_se"][i] for r in results], fmt="o", ms=4, capsize=2, label=comp)
    ax.axhline(0, color="k", lw=0.6)
    ax.set_xticks(xs, [f"L{l}H{h}" for l, h in heads])
    ax.set_xlabel("head")
    ax.set_ylabel("unbiased MMD^2 (+- jackknife SE)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    p = Path(f"{stem}_mmd.png")
    fig.savefig(p, dpi=110)
    plt.close(fig)
    paths.append(str(p))
    return paths
