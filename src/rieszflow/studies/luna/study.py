"""``rieszflow luna``: paper 001's protocols P1-P5 and P7 as sweeps (spec section 5.2).

Sweeps (one task per method, grid point and trial; one HDF5 file per task; merged with
:func:`rieszflow.studies.sweep.open_sweep`):

* ``p1`` theory numerics: one task per check (:mod:`rieszflow.theory.luna`).
* ``p2`` runtime scaling: forward time and peak traced memory of one attention layer
  (B = 1, 2 heads, d_k = 32, D = 64) against the sequence length n, per method.
* ``p3`` mini-LRA: one task per (method, task, seed) training run
  (:func:`rieszflow.studies.luna.lra.train_run`); LUNA with and without DWC.
* ``p4`` M/L ablation of LUNA on Digits-seq (D = M L).
* ``p5`` kernel-form ablation on Digits-seq: fixed RFF (random phase ``rff_fixed`` and the paper's
  sin/cos pair ``rff_pair_fixed``), Bank+Coef, envelope-gated, no gate, with zero- and
  negative-denominator diagnostics.
* ``p6`` post-hoc conversion of the softmax Digits-seq model to LUNA and Hedgehog (two stages,
  :mod:`rieszflow.studies.luna.convert`).
* ``p7`` psi curves and attention maps of a trained LUNA (Fig. 3 / Fig. 4 analogues); the
  CLI draws the PNGs from the merged file.
* ``dead_init`` Monte Carlo of the psi channels that are identically 0 at initialisation: one task
  per draw of the listing's initialisation, judged on that draw's own input range
  (:func:`dead_channels_at_init`).

References
----------
Shahbazi et al. (2025), LUNA (paper 001): Fig. 2, Tables 1, 4, 5, Figs. 3-4; paper 001 spec,
section 5.2.
"""
from __future__ import annotations

import dataclasses
import math
import time

import numpy as np

from rieszflow.config import StudyConfig, config_int
from rieszflow.studies.luna.convert import convert
from rieszflow.studies.luna.rows import attention_rows
from rieszflow.studies.sweep import SweepSpec
from rieszflow.engine.attention.data import batches
from rieszflow.engine.attention.kernelized import KernelizedLinearAttention
from rieszflow.engine.attention.softmax import SoftmaxAttention
from rieszflow.engine.features import make_feature_map
from rieszflow.engine.measures import mmd2_weighted
from rieszflow.studies.luna.lra import METHODS, TASKS, load_task, train_run
from rieszflow.theory import luna as T

__all__ = ["LunaConfig", "QUICK_OVERRIDES", "GRID_FIELDS", "SWEEP_NAMES", "specs", "task_config",
           "luna_task", "dead_on_range", "dead_channels_at_init", "P1_CHECKS", "P2_METHODS", "P5_VARIANTS"]

SWEEP_NAMES = ("p1", "p2", "p3", "p4", "p5", "p6", "p7", "kernels", "dead_init")
#: Methods of the learned-maps-vs-learned-particles comparison (item 5 of the issue).
KERNEL_METHODS = ("luna", "particles", "fixed", "softmax")
P1_CHECKS = ("sampling_cos_sin", "sampling_sigmoid", "sampling_relu", "parametrisation_relu",
             "parametrisation_sigmoid", "truncation", "rademacher", "gram", "tails")
P2_METHODS = ("luna_pwl", "luna_dense", "elu", "performer", "rff", "hedgehog", "cosformer", "softmax")
#: P5 variants (paper 001 Table 5) -> (method of lra.METHODS, overrides of its model arguments)
P5_VARIANTS = {
    "rff_fixed": ("rff", dict(m=64, dwc=True, feature_options=dict(omega_scale=32 ** 0.25))),
    "rff_pair_fixed": ("rff_pair", dict(m=32, dwc=True, feature_options=dict(omega_scale=32 ** 0.25))),
    "envelope_gated": ("luna", dict(feature_options=dict(channels=8, hidden=64, envelope="gate"))),
    "no_gate": ("luna", {}),
    "bank_coef": ("luna", dict(feature_options=dict(channels=8, hidden=64, psi_kind="bank"))),
}


@dataclasses.dataclass(frozen=True)
class LunaConfig(StudyConfig):
    """Configuration of ``rieszflow luna`` (defaults: the spec's full protocols; ``--quick``
    reduces them, :data:`QUICK_OVERRIDES`).

    Parameters
    ----------
    seed : int
        Root seed of every sweep (``>= 0``).
    p1_trials : int
        Independent frequency sets per m in the sampling checks (spec: 2000).
    p1_ref_m : int
        Frequencies of the reference kernel of the MLP sampling checks (spec: 2e6).
    p1_param_m : int
        Common frequencies of the parametrisation check (spec: 1e5).
    p2_ns : tuple of int
        Sequence lengths of P2.
    p2_softmax_max : int
        Longest n timed for softmax (quadratic).
    p2_reps : int
        Timed repetitions (median) after one warm-up.
    p3_tasks : tuple of str
        Mini-LRA tasks (keys of ``lra.TASKS``).
    p3_methods : tuple of str
        Methods (keys of ``lra.METHODS``).
    p3_seeds : int
        Seeds per (method, task).
    digits_steps, listops_steps, text_steps : int
        Training steps per task (spec: 600 and 1,500).
    listops_train : int
        ListOps-mini training examples (validation and test: 2,000 each).
    p4_steps : int
        Steps of each M/L ablation run (spec: 400).
    p4_ml : tuple of str
        ``"MxL"`` pairs of the ablation.
    p5_variants : tuple of str
        P5 variants (keys of :data:`P5_VARIANTS`).
    p5_seeds : int
        Seeds per P5 variant.
    p7_steps : int
        Training steps of the P7 model.
    eval_every : int
        Steps between validation evaluations.
    p6_stage1_epochs, p6_stage2_epochs : int
        Epochs of the conversion's Stage 1 (attention distillation) and Stage 2 (fine-tuning,
        early stopping with patience 3); the teacher trains ``digits_steps`` steps.
    kernel_tasks : tuple of str
        Tasks of the learned-maps-vs-particles comparison ("digits", "rt").
    kernel_seeds : int
        Seeds per (method, task) of that comparison.
    kernel_sequences : int
        Held-out test sequences on which the kernels are compared.
    dead_draws : int
        Independent draws of the listing's initialisation in the dead-channel Monte Carlo
        (sweep ``dead_init``; one task per draw).
    """

    config_label = "luna config"

    seed: int = 0
    p1_trials: int = 2000
    p1_ref_m: int = 2_000_000
    p1_param_m: int = 100_000
    p2_ns: tuple = (256, 512, 1024, 2048, 4096, 8192, 16384)
    p2_softmax_max: int = 4096
    p2_reps: int = 5
    p3_tasks: tuple = ("digits", "listops")
    p3_methods: tuple = ("softmax", "luna", "luna_nodwc", "performer", "elu", "rff", "hedgehog", "cosformer")
    p3_seeds: int = 3
    digits_steps: int = 600
    listops_steps: int = 1500
    text_steps: int = 600
    listops_train: int = 20000
    p4_steps: int = 400
    p4_ml: tuple = ("8x2", "8x4", "8x8", "8x16", "4x8", "16x8", "32x8")
    p5_variants: tuple = ("rff_fixed", "rff_pair_fixed", "bank_coef", "envelope_gated", "no_gate")
    p5_seeds: int = 3
    p6_stage1_epochs: int = 1
    p6_stage2_epochs: int = 10
    p7_steps: int = 400
    eval_every: int = 50
    kernel_tasks: tuple = ("digits", "rt")
    kernel_seeds: int = 2
    kernel_sequences: int = 32
    dead_draws: int = 100

    def __post_init__(self):
        for name in ("seed",):
            config_int(name, getattr(self, name), minimum=0)
        for name in ("p1_trials", "p1_ref_m", "p1_param_m", "p2_softmax_max", "p2_reps", "p3_seeds",
                     "digits_steps", "listops_steps", "text_steps", "listops_train", "p4_steps",
                     "p5_seeds", "p7_steps", "eval_every", "kernel_seeds", "kernel_sequences",
                     "p6_stage1_epochs", "p6_stage2_epochs", "dead_draws"):
            config_int(name, getattr(self, name), minimum=1)
        for name, allowed in (("p3_tasks", tuple(TASKS)), ("p3_methods", tuple(METHODS)),
                              ("kernel_tasks", tuple(TASKS)), ("p5_variants", tuple(P5_VARIANTS))):
            vals = getattr(self, name)
            if not isinstance(vals, tuple) or not vals or any(v not in allowed for v in vals):
                raise ValueError(f"{name}={vals!r}: a non-empty tuple of {', '.join(allowed)}")
        if not self.p2_ns or any(not isinstance(n, int) or n < 8 for n in self.p2_ns):
            raise ValueError(f"p2_ns={self.p2_ns!r}: a non-empty tuple of integers >= 8")
        for ml in self.p4_ml:
            parts = str(ml).split("x")
            if len(parts) != 2 or not all(p.isdigit() and int(p) >= 1 for p in parts):
                raise ValueError(f"p4_ml entry {ml!r}: expected 'MxL' with positive integers")


#: What ``--quick`` changes: P1 with fewer trials, P2 up to n = 4096, P3 on Digits-seq only
#: with 300 steps and 2 seeds.
QUICK_OVERRIDES = {"p1_trials": 400, "p1_ref_m": 400_000, "p1_param_m": 20_000,
                   "p2_ns": (256, 512, 1024, 2048, 4096), "p2_softmax_max": 2048, "p2_reps": 3,
                   "p3_tasks": ("digits",), "p3_seeds": 2, "digits_steps": 300}

#: Fields that only define which tasks exist (kept out of the task files' configuration).
GRID_FIELDS = ("p2_ns", "p3_tasks", "p3_methods", "p3_seeds", "p4_ml", "p5_variants", "p5_seeds",
               "kernel_tasks", "kernel_seeds", "dead_draws")


def task_config(cfg: LunaConfig) -> dict:
    """The configuration every task stores: :class:`LunaConfig` without its grids.

    Parameters
    ----------
    cfg : LunaConfig

    Returns
    -------
    dict
    """
    return {k: v for k, v in cfg.to_dict().items() if k not in GRID_FIELDS}


def specs(cfg: LunaConfig) -> list:
    """The sweeps of ``rieszflow luna`` (:data:`SWEEP_NAMES`).

    Parameters
    ----------
    cfg : LunaConfig

    Returns
    -------
    list of SweepSpec
    """
    fn = "rieszflow.studies.luna.study:luna_task"
    conf = task_config(cfg)
    return [
        SweepSpec("p1", fn, P1_CHECKS, {}, 1, conf, cfg.seed),
        SweepSpec("p2", fn, P2_METHODS, {"n": tuple(cfg.p2_ns)}, 1, conf, cfg.seed,
                  units={"n": "1"}),
        SweepSpec("p3", fn, tuple(cfg.p3_methods), {"task": tuple(cfg.p3_tasks)}, cfg.p3_seeds, conf, cfg.seed),
        SweepSpec("p4", fn, ("luna",), {"ml": tuple(cfg.p4_ml)}, 1, conf, cfg.seed),
        SweepSpec("p5", fn, tuple(cfg.p5_variants), {}, cfg.p5_seeds, conf, cfg.seed),
        SweepSpec("p6", fn, ("luna", "hedgehog"), {}, 1, conf, cfg.seed),
        SweepSpec("p7", fn, ("luna",), {}, 1, conf, cfg.seed),
        SweepSpec("kernels", fn, KERNEL_METHODS, {"task": tuple(cfg.kernel_tasks)}, cfg.kernel_seeds, conf,
                  cfg.seed),
        SweepSpec("dead_init", fn, ("luna",), {}, cfg.dead_draws, conf, cfg.seed),
    ]


def _var(dims, data, long_name, units):
    return (dims, np.asarray(data), {"long_name": long_name, "units": units})


def _p1(method, cfg, rng):
    import xarray as xr

    if method.startswith("sampling_"):
        kind = method.split("_", 1)[1]
        r = T.sampling_error(rng, kind, trials=cfg["p1_trials"], ref_m=cfg["p1_ref_m"])
        return xr.Dataset({
            "m_mse": _var(("m",), r["m_mse"], "m times the mean squared kernel error", "1"),
            "slope": _var((), r["slope"], "log-log slope of MSE against m (pass: [-1.1, -0.9])", "1"),
            "exact_var": _var((), r["exact_var"], "exact single-sample variance (cos_sin only)", "1"),
            "lipschitz_L": _var((), r["L"], "corrected L = 2 max|phi| max|phi|_lip (inf: ReLU)", "1"),
            "p_exceed": _var(("m", "eps"), r["p_exceed"], "empirical P(|k_hat - k| >= eps)", "1"),
            "p_upper": _var(("m", "eps"), r["p_upper"], "Clopper-Pearson 95% upper bound of p_exceed", "1"),
            "bound": _var(("m", "eps"), r["bound"], "2 exp(-m eps^2 / (2 L^2)) (corrected Cor. 1)", "1"),
        }, coords={"m": _var(("m",), r["m"], "frequencies per estimate", "1"),
                   "eps": _var(("eps",), r["eps"], "deviation threshold", "1")})
    if method.startswith("parametrisation_"):
        r = T.parametrisation_error(rng, act=method.split("_", 1)[1], m=cfg["p1_param_m"])
        return xr.Dataset({
            "sup_err": _var(("hidden",), r["sup_err"], "sup over pairs of |k - k_NN| (common frequencies)", "1"),
            "bound_holds": _var(("hidden",), r["bound_holds"].astype(np.int8),
                                "1 if |k - k_NN| <= 2 sqrt(B) max k^1/2 + B at every pair", "1"),
            "B": _var(("hidden",), r["B"], "empirical feature MSE sup_x E|phi - phi_NN|^2", "1"),
        }, coords={"hidden": _var(("hidden",), r["hidden"], "hidden width of psi_NN", "1")})
    if method == "truncation":
        r = T.truncation_error(rng)
        return xr.Dataset({
            "truncation_error": _var(("radius",), r["error"], "Monte-Carlo |k - k_A|", "1"),
            "truncation_se": _var(("radius",), r["se"], "standard error of truncation_error", "1"),
            "tail": _var(("radius",), r["tail"], "bound P(chi_d > R) (Lemmas 4-5)", "1"),
        }, coords={"radius": _var(("radius",), r["radius"], "truncation radius R", "1")})
    if method == "rademacher":
        r = T.rademacher_slope(rng)
        return xr.Dataset({
            "rademacher": _var(("n_samples",), r["rademacher"], "empirical Rademacher complexity", "1"),
            "rademacher_bound": _var(("n_samples",), r["bound"], "sqrt(sum |phi|^2) / N", "1"),
            "rademacher_slope": _var((), r["slope"], "log-log slope (pass: -0.5 +- 0.05)", "1"),
        }, coords={"n_samples": _var(("n_samples",), r["n"], "samples N", "1")})
    if method == "gram":
        r = T.gram_min_eigenvalues(rng)
        return xr.Dataset({"ratio": _var(("variant",), r["ratio"], "lambda_min / lambda_max of the Gram "
                                         "matrix (PSD: >= -1e-10)", "1")},
                          coords={"variant": _var(("variant",), r["variant"], "feature-map variant", "1")})
    r = T.single_sample_tails(rng)
    return xr.Dataset({k: _var(("t",), r[k], f"P(|A~| > t), {k}", "1") for k in ("gaussian", "sigmoid", "relu")},
                      coords={"t": _var(("t",), r["t"], "threshold in standard deviations", "1")})


def _p2(method, n, cfg, rng):
    """Median forward seconds and peak traced memory of one attention layer at length n."""
    import tracemalloc

    import xarray as xr

    nan = float("nan")
    if method == "softmax" and n > cfg["p2_softmax_max"]:
        secs = mem = nan
    else:
        d_model, heads, dk = 64, 2, 32
        if method == "softmax":
            layer = SoftmaxAttention(d_model, heads)
        else:
            name, m, opts = {"luna_pwl": ("luna", 8, {}), "luna_dense": ("luna", 8, {"psi_impl": "dense"}),
                             "elu": ("elu", 64, {"bias_std": 0.0}),
                             "performer": ("favor", 64, {"stabilise": "seq", "tau": math.sqrt(dk),
                                                         "omega_scale": math.sqrt(dk)}),
                             "rff": ("rff", 64, {}), "hedgehog": ("hedgehog", 32, {}),
                             "cosformer": ("cosformer", 32, {})}[method]
            fm = make_feature_map(name, dk, m, rng=rng, **opts)
            eps = 1e-6 if method in ("luna_pwl", "luna_dense", "cosformer", "rff") else 0.0
            layer = KernelizedLinearAttention(d_model, heads, fm, qk="learned", eps=eps, signed=method == "rff")
        params = {k: v.astype(np.float32) for k, v in layer.init_params(rng).items()}
        x = rng.standard_normal((1, n, d_model)).astype(np.float32)
        mask = np.ones((1, n), bool)
        layer.forward(params, x, mask)
        times = []
        for _ in range(cfg["p2_reps"]):
            t0 = time.perf_counter()
            layer.forward(params, x, mask)
            times.append(time.perf_counter() - t0)
        secs = float(np.median(times))
        tracemalloc.start()
        layer.forward(params, x, mask)
        mem = float(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    return xr.Dataset({"seconds": _var((), secs, "median forward time of one attention layer "
                                       "(B = 1, 2 heads, d_k = 32, float32, 1 BLAS thread)", "s"),
                       "peak_bytes": _var((), mem, "peak traced memory of one forward", "bytes")})


def _run_metrics(r):
    import xarray as xr

    units = {"seconds": "s", "seconds_per_step": "s", "test_loss": "nat", "train_loss": "nat"}
    return xr.Dataset({k: _var((), v, k.replace("_", " "), units.get(k, "1")) for k, v in r.items()})


def _steps(cfg, task):
    return {"digits": cfg["digits_steps"], "digits16": cfg["digits_steps"], "listops": cfg["listops_steps"],
            "rt_bytes": cfg["text_steps"], "rt": cfg["text_steps"]}[task]


def _p7(cfg, rng):
    """Train LUNA on Digits-seq; psi curves (initial, final) and mean-query attention maps."""
    import xarray as xr

    kept = {}
    r = train_run("digits", "luna", rng, steps=cfg["p7_steps"], eval_every=cfg["eval_every"],
                  on_init=lambda mdl: kept.setdefault("init", mdl.state_dict()),
                  model_hook=lambda mdl: kept.setdefault("model", mdl))
    model, init = kept["model"], kept["init"]
    test = load_task("digits", 0)[2]
    ids = np.stack(test.ids[:16]).astype(np.int64)
    mask = np.ones(ids.shape, bool)
    xs = model.attention_inputs(ids, mask)
    u_grid, curves, curves0, hist, maps, edges_all = [], [], [], [], [], []
    for i in range(len(model.layers)):
        fm = model.feature_maps[i]
        th = {k: np.asarray(model.params[f"layers.{i}.attn.phi_{k}"][0], dtype=np.float64) for k in fm.theta_names}
        th0 = {k: np.asarray(init[f"layers.{i}.attn.phi_{k}"][0], dtype=np.float64) for k in fm.theta_names}
        terms = model.layers[i].attn.kernel_terms(model.attention_params(i), xs[i], mask)
        q_phi_cache = terms["caches_q"][0]
        u = (q_phi_cache["psi"]["u"]).astype(np.float64)
        lo, hi = np.percentile(u, [1, 99])
        grid = np.linspace(lo, hi, 200)
        u_grid.append(grid)
        curves.append(fm.psi(grid, th))
        curves0.append(fm.psi(grid, th0))
        h, edges = np.histogram(u, bins=40, range=(lo, hi))
        hist.append(h / h.sum())
        edges_all.append(edges)
        phi_q, phi_km = np.asarray(terms["phi_q"], dtype=np.float64), np.asarray(terms["phi_k"], dtype=np.float64)
        qbar = phi_q.mean(axis=2)                                     # mean query (H, B, D)
        att = np.einsum("hbd,hbnd->hbn", qbar, phi_km)
        att /= att.sum(-1, keepdims=True)
        maps.append(att[:, :4].reshape(att.shape[0], 4, 8, 8))
    change = [float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-12)) for a, b in zip(curves, curves0)]
    ds = xr.Dataset({
        "u": _var(("layer", "grid"), np.stack(u_grid), "projection u = w.x + b (1st-99th percentile)", "1"),
        "psi": _var(("layer", "grid", "channel"), np.stack(curves), "learned psi_l(u)", "1"),
        "psi_init": _var(("layer", "grid", "channel"), np.stack(curves0), "psi_l(u) at initialisation", "1"),
        "u_hist": _var(("layer", "bin"), np.stack(hist), "histogram of the observed u (fraction)", "1"),
        "psi_rel_change": _var(("layer",), change, "|psi - psi_init| / |psi_init| on the grid", "1"),
        "attention": _var(("layer", "head", "image", "row", "col"), np.stack(maps),
                          "mean-query attention weights of 4 test digits", "1"),
        "test_accuracy": _var((), r["test_accuracy"], "test accuracy of the plotted model", "1"),
    })
    return ds


def dead_on_range(fm, theta, lo, hi, grid_points=200):
    """Channels of a LUNA map whose psi_l is identically 0 on ``[lo, hi]`` (``grid_points`` points).

    Parameters
    ----------
    fm : rieszflow.engine.features.LunaFeatureMap
    theta : dict
        Its learned parameters (:meth:`~rieszflow.engine.features.LunaFeatureMap.init_theta`).
    lo, hi : float
        The input range, ``lo <= hi`` (``lo == hi``: one point).
    grid_points : int, default 200

    Returns
    -------
    numpy.ndarray, shape (channels,), bool

    Raises
    ------
    ValueError
        If ``lo > hi``.

    References
    ----------
    paper 001 (LUNA), eq. (11) with the output ReLU of its Listing 1.
    """
    if not lo <= hi:
        raise ValueError(f"lo={lo!r}, hi={hi!r}: need lo <= hi")
    psi = fm.psi(np.linspace(lo, hi, int(grid_points)), theta)          # (grid, channels)
    return np.all(psi == 0.0, axis=0)


def dead_channels_at_init(rng, *, task="digits", sequences=16, grid_points=200):
    """Which psi channels are identically 0 at initialisation, on the initialisation's own input range.

    Builds the mini-LRA LUNA model of ``task`` from ``rng`` (the listing's initialisation: W ~ N(0, 1/d),
    b = 0, the MLP's ``nn.Linear`` uniform layers, output ReLU), pushes ``sequences`` test sequences
    through it, and for every layer takes the range of the projections ``u = w.x + b`` this
    initial network produces (1st-99th percentile of the layer-0 head's queries, as P7 plots it).
    A channel is dead when ``psi_l(u) = 0`` at every one of ``grid_points`` points of that range
    (psi is piecewise linear; 200 points resolve its segments at this width).

    Parameters
    ----------
    rng : numpy.random.Generator
        Initialisation generator (one draw of the initialisation).
    task : str, default "digits"
        A key of :data:`rieszflow.studies.luna.lra.TASKS`.
    sequences : int, default 16
        Test sequences whose projections define the input range.
    grid_points : int, default 200
        Points of the range at which psi is evaluated.

    Returns
    -------
    dead : numpy.ndarray, shape (layers, channels), bool
    u_range : numpy.ndarray, shape (layers, 2), float64
        The 1st and 99th percentiles of u per layer.

    References
    ----------
    paper 001 (LUNA), Listing 1 (initialisation) and eq. (11); P7 of its worked specification.
    """
    from rieszflow.studies.luna.lra import build_model

    model, _ = build_model(task, "luna", rng)
    test = load_task(task, 0)[2]
    ids = np.stack(test.ids[:sequences]).astype(np.int64)
    mask = np.ones(ids.shape, bool)
    xs = model.attention_inputs(ids, mask)
    dead, rng_u = [], []
    for i in range(len(model.layers)):
        fm = model.feature_maps[i]
        th = {k: np.asarray(model.params[f"layers.{i}.attn.phi_{k}"][0], dtype=np.float64) for k in fm.theta_names}
        terms = model.layers[i].attn.kernel_terms(model.attention_params(i), xs[i], mask)
        u = np.asarray(terms["caches_q"][0]["psi"]["u"], dtype=np.float64)
        lo, hi = np.percentile(u, [1, 99])
        dead.append(dead_on_range(fm, th, lo, hi, grid_points))
        rng_u.append((lo, hi))
    return np.array(dead), np.array(rng_u)


def _dead_init(rng):
    import xarray as xr

    dead, u_range = dead_channels_at_init(rng)
    return xr.Dataset({
        "dead": _var(("layer", "channel"), dead.astype(np.int8),
                     "1 if psi_l is identically 0 on the initial network's own u range (1st-99th pct)", "1"),
        "u_range": _var(("layer", "end"), u_range, "1st and 99th percentile of u = w.x + b at initialisation", "1"),
    })


def _mmd_rows(rows0, rows1, keys, mask):
    """Mean over sequences of the mean over queries of MMD(row0, row1) on the key vectors."""
    from scipy.spatial.distance import pdist

    H, B = rows0.shape[:2]
    per_seq = []
    for b in range(B):
        real = np.nonzero(mask[b])[0]
        vals = []
        for h in range(H):
            kk = keys[h, b, real]
            d = pdist(kk)                          # empty for a one-token sequence
            bw = float(np.median(d)) if d.size and np.median(d) > 0 else 1.0
            for i in real:
                vals.append(math.sqrt(mmd2_weighted(kk, rows0[h, b, i, real], kk, rows1[h, b, i, real], bw)))
        per_seq.append(np.mean(vals))
    per_seq = np.asarray(per_seq)
    return float(per_seq.mean()), float(per_seq.std(ddof=1) / math.sqrt(len(per_seq)))


def _kernels(method, task, cfg, rng):
    """Train ``method`` on ``task``; MMD between the initial and learned attention on held-out tokens."""
    import xarray as xr

    kept = {}
    r = train_run(task, method, rng, steps=_steps(cfg, task), eval_every=cfg["eval_every"],
                  on_init=lambda mdl: kept.setdefault("init", mdl.state_dict()),
                  model_hook=lambda mdl: kept.setdefault("model", mdl))
    model, init = kept["model"], kept["init"]
    test = load_task(task, 0)[2]
    ids, mask, _, _ = next(batches(test, cfg["kernel_sequences"]))
    ids = ids.astype(np.int64)

    def layer0(mdl):
        return np.asarray(mdl.attention_inputs(ids, mask)[0], dtype=np.float64)

    attn = model.layers[0].attn
    trained = {k[len("layers.0.attn."):]: np.asarray(v, dtype=np.float64) for k, v in model.params.items()
               if k.startswith("layers.0.attn.")}
    x1 = layer0(model)
    rows1, keys = attention_rows(attn, trained, x1, mask)
    if hasattr(attn, "feature_map"):
        mixed = dict(trained)                                  # the feature map's parameters at init
        for k in trained:
            if k == "omega" or k.startswith("phi_"):
                mixed[k] = np.asarray(init[f"layers.0.attn.{k}"], dtype=np.float64)
        rows_f, _ = attention_rows(attn, mixed, x1, mask)
        mmd_f, se_f = _mmd_rows(rows_f, rows1, keys, mask)
    else:
        mmd_f = se_f = float("nan")
    model.load_state_dict(init)                                # the whole initial network
    x0 = layer0(model)
    init_params = {k[len("layers.0.attn."):]: np.asarray(v, dtype=np.float64) for k, v in model.params.items()
                   if k.startswith("layers.0.attn.")}
    rows0, _ = attention_rows(attn, init_params, x0, mask)
    mmd_l, se_l = _mmd_rows(rows0, rows1, keys, mask)
    ds = _run_metrics(r)
    for name, val, ln in (("mmd_feature", mmd_f, "mean MMD between layer-0 attention rows with the initial and "
                           "the learned feature map (same trained q, k; held-out tokens)"),
                          ("mmd_feature_se", se_f, "standard error of mmd_feature over held-out sequences"),
                          ("mmd_layer", mmd_l, "mean MMD between the initial and the trained network's "
                           "layer-0 attention rows (held-out tokens)"),
                          ("mmd_layer_se", se_l, "standard error of mmd_layer over held-out sequences")):
        ds[name] = _var((), val, ln, "1")
    return ds


def luna_task(task, config, rng):
    """Task function of every ``rieszflow luna`` sweep (see the module docstring).

    Parameters
    ----------
    task : rieszflow.studies.sweep.Task
    config : dict
        :func:`task_config` of the study.
    rng : numpy.random.Generator
        The task's stream.

    Returns
    -------
    xarray.Dataset

    Raises
    ------
    ValueError
        On an unknown sweep.
    """
    p = dict(task.params)
    if task.sweep == "p1":
        return _p1(task.method, config, rng)
    if task.sweep == "p2":
        return _p2(task.method, int(p["n"]), config, rng)
    common = dict(eval_every=config["eval_every"], listops_sizes=(config["listops_train"], 2000, 2000))
    if task.sweep == "p3":
        return _run_metrics(train_run(p["task"], task.method, rng, steps=_steps(config, p["task"]), **common))
    if task.sweep == "p4":
        M, L = (int(v) for v in p["ml"].split("x"))
        r = train_run("digits", "luna", rng, steps=config["p4_steps"], **common,
                      overrides=dict(m=M, feature_options=dict(channels=L, hidden=64)))
        r["D"] = M * L
        return _run_metrics(r)
    if task.sweep == "p5":
        method, over = P5_VARIANTS[task.method]
        return _run_metrics(train_run("digits", method, rng, steps=config["digits_steps"], overrides=over, **common))
    if task.sweep == "p6":
        return _run_metrics(convert(task.method, rng, teacher_steps=config["digits_steps"],
                                    stage1_epochs=config["p6_stage1_epochs"],
                                    stage2_epochs=config["p6_stage2_epochs"], teacher_seed=config["seed"],
                                    eval_every=config["eval_every"]))
    if task.sweep == "p7":
        return _p7(config, rng)
    if task.sweep == "kernels":
        return _kernels(task.method, p["task"], config, rng)
    if task.sweep == "dead_init":
        return _dead_init(rng)
    raise ValueError(f"unknown sweep {task.sweep!r}; allowed: {', '.join(SWEEP_NAMES)}")
