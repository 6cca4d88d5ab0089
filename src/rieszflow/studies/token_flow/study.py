"""The token-flow study: attention dynamics of token clouds on the sphere (``rieszflow token-flow``).

Sections (each seeded independently from ``cfg.seed``):

A. **Clustering grid.** ``n_tokens`` i.i.d. uniform tokens on S^{d-1} for every
   (beta, d) of the grid, ``n_seeds`` clouds per cell run as one batch; records the
   interaction energy E_beta (non-decreasing, spec T26), the number of clusters
   (connected components of ``<x_i, x_j> > 1 - eps``) and the minimum pairwise
   inner product, and whether each initial cloud lay in an open hemisphere.
B. **Wendel.** Wendel's hemisphere probability against Monte Carlo (spec T30), and
   its link to GLPR's hemisphere lemma.
C. **Phase boundary** (spec T33): crossing times of the batch-mean fraction of
   clustered pairs against the ODE curve ``gamma_beta(t) = 1 - delta``; always SA
   (the spec's protocol), whatever ``cfg.variant``.
D. **Kernels.** The same initial tokens driven by exact softmax attention and by
   linear attention with fixed random features (and, with ``kernel_from``, with
   the learned particles of a main-job run), compared by W1 over time.
E. **Mean field** (part 5): W1 between flows of N and 4N tokens drawn from the
   same initial law at several times, with a fitted rate ``W1 ~ C N^{-alpha}``.

Everything is written to one HDF5 file (kind ``"token_flow_study"``, readable
with ``engine.storage.open_run``) and plotted next to it.

References
----------
spec paper004_attention_theory.md, sections 2.4, 6.1, 6.4 and 8; GLPR, arXiv:2312.10794.
"""
from __future__ import annotations

import math
import time
from functools import partial
from pathlib import Path

import numpy as np

from rieszflow.engine.backend import get_backend, to_numpy
from rieszflow.engine.storage import RunLock, TrajectoryWriter, check_resumable, open_run
from rieszflow.engine.tokenflow import (
    LinearKernel,
    SoftmaxKernel,
    make_integrator,
    normalise,
    run_flow,
    sphere_attention_flow,
)
from rieszflow.engine.tokenflow.observables import (
    count_clusters,
    flow_distance,
    fraction_clustered_pairs,
    hemisphere_monte_carlo,
    in_open_hemisphere,
    interaction_energy,
    min_inner_product,
    phase_boundary_time,
    wasserstein1,
    wendel_probability,
)
from rieszflow.studies.token_flow.analysis import PowerLawFit, fit_power_law, format_tables, make_plots
from rieszflow.studies.token_flow.config import TokenFlowConfig
from rieszflow.learning.runfiles import load_learned_kernel
from rieszflow.engine.features import make_feature_map

__all__ = ["KIND", "PHASE_VARIANT", "run_token_flow_study", "clustering_grid", "wendel_table", "phase_boundary",
           "kernel_comparison", "mean_field"]

#: Root attribute ``kind`` of the study's HDF5 file.
KIND = "token_flow_study"

#: Normalisation of section C (phase boundary): SA, the protocol of spec T33, whatever ``cfg.variant``.
PHASE_VARIANT = "SA"


def _uniform_sphere(rng, shape):
    """i.i.d. uniform points on S^{d-1} (normalised Gaussians), host float64."""
    return normalise(rng.standard_normal(shape))


def _grid_record_times(t_end, dt, n_records):
    n_steps = int(round(t_end / dt))
    steps = np.unique(np.rint(np.linspace(0, n_steps, n_records)).astype(np.int64))
    return steps * dt


def clustering_grid(cfg: TokenFlowConfig, backend, rng, *, quiet=True) -> dict:
    """Section A: flows of ``n_tokens`` uniform tokens for every (beta, d); see the module docstring.

    Parameters
    ----------
    cfg : TokenFlowConfig
    backend : engine.backend.Backend
        Where the tokens live (initial draws are made on the host with ``rng``).
    rng : numpy.random.Generator
        Host generator of this section.
    quiet : bool, default True
        No progress bars.

    Returns
    -------
    dict
        ``betas``, ``dims``, ``times`` (k,), ``energy``, ``clusters``, ``min_ip`` of shape
        (n_beta, n_dim, n_seeds, k), ``hemisphere0`` (n_beta, n_dim, n_seeds) bool.
    """
    times = _grid_record_times(cfg.t_end, cfg.dt, cfg.n_records)
    nb, nd, ns, k = len(cfg.betas), len(cfg.dims), cfg.n_seeds, len(times)
    energy = np.empty((nb, nd, ns, k))
    clusters = np.empty((nb, nd, ns, k), dtype=np.int64)
    min_ip = np.empty((nb, nd, ns, k))
    hemi = np.empty((nb, nd, ns), dtype=bool)
    for ib, beta in enumerate(cfg.betas):
        field = sphere_attention_flow(SoftmaxKernel(float(beta), chunk=cfg.chunk), cfg.variant)
        obs = {"energy": partial(interaction_energy, beta=float(beta)),
               "clusters": partial(count_clusters, eps=cfg.cluster_eps),
               "min_ip": min_inner_product}
        for jd, d in enumerate(cfg.dims):
            x0 = _uniform_sphere(rng, (ns, cfg.n_tokens, d))
            hemi[ib, jd] = in_open_hemisphere(x0, method="rays" if _n_rays(cfg.n_tokens, d) <= 5000 else "lp")
            res = run_flow(field, backend.asarray(x0), dt=cfg.dt, t_end=cfg.t_end, method=cfg.integrator,
                           record_times=times, observables=obs, keep_trajectory=False, quiet=quiet,
                           desc=f"grid beta={beta:g} d={d}")
            energy[ib, jd] = res.observables["energy"].T
            clusters[ib, jd] = res.observables["clusters"].T
            min_ip[ib, jd] = res.observables["min_ip"].T
    return {"betas": tuple(float(b) for b in cfg.betas), "dims": tuple(cfg.dims), "times": times,
            "energy": energy, "clusters": clusters, "min_ip": min_ip, "hemisphere0": hemi,
            "n": cfg.n_tokens, "variant": cfg.variant, "n_seeds": ns, "eps": cfg.cluster_eps}


def _n_rays(n, d):
    return math.comb(n, d - 1) if n > d else 0


def wendel_table(cfg: TokenFlowConfig, rng) -> list:
    """Section B: Wendel's formula against Monte Carlo for ``cfg.wendel_cases``.

    Parameters
    ----------
    cfg : TokenFlowConfig
    rng : numpy.random.Generator

    Notes
    -----
    The hemisphere test is the extreme-ray enumeration when ``C(n, d-1) <= 5000``,
    otherwise SciPy's HiGHS LP (engine.tokenflow.observables.in_open_hemisphere).

    Returns
    -------
    list of dict
        Keys ``n, d, p, p_mc, se, draws, method``.

    References
    ----------
    Wendel (1962); GLPR remark r:wendel; spec test T30.
    """
    rows = []
    for n, d in cfg.wendel_cases:
        method = "rays" if _n_rays(n, d) <= 5000 else "lp"
        p_mc, se = hemisphere_monte_carlo(n, d, cfg.wendel_draws, rng, method=method)
        rows.append({"n": int(n), "d": int(d), "p": wendel_probability(n, d), "p_mc": p_mc, "se": se,
                     "draws": cfg.wendel_draws, "method": method})
    return rows


def phase_boundary(cfg: TokenFlowConfig, backend, rng, *, quiet=True) -> dict:
    """Section C (spec T33): crossing times against the ODE curve.

    Parameters
    ----------
    cfg : TokenFlowConfig
    backend : engine.backend.Backend
        Where the tokens live (initial draws are made on the host with ``rng``).
    rng : numpy.random.Generator
        Host generator of this section.
    quiet : bool, default True
        No progress bars.

    Notes
    -----
    Each beta runs a batch of ``phase_batch`` clouds of ``phase_n`` uniform tokens on
    S^{phase_d - 1} with GLPR's scheme ``x <- normalise(x + dt a(x))`` (the authors'
    ``phase-diagrams.py``). Once every pair of every cloud is clustered the
    fraction stays 1 (a cloud in a cap of angle < pi/2 keeps contracting, GLPR's
    hemisphere lemma), so the run stops and the heat map is filled with 1.

    The section always runs **SA** (row-normalised softmax), whatever
    ``cfg.variant``: spec T33 is the authors' softmax protocol (dt = 0.1, T = 30,
    tolerance 15 % against the SA equiangular ODE). Their USA runs use a different
    step, ``eta = dt / max(sqrt(beta) e^{beta - 1/2}, 1)`` over T = 1, which the
    spec gives no tolerance for; USA at dt = 0.1 without it crosses far from its
    ODE time (3.2 against 0.79 at beta = 7), a statement about the scheme, not
    the theory.

    Returns
    -------
    dict
        ``betas``, ``times`` (k,), ``fraction`` (n_beta, k), ``rows`` (per beta: crossing,
        ode, check), ``variant`` (``"SA"``) and the settings.

    References
    ----------
    GLPR thm:phase.transition.curve and phase-diagrams.py; spec section 6.1 ("What their
    simulations show") and section 8, test T33.
    """
    from tqdm.auto import tqdm

    n_steps = int(round(cfg.phase_t_end / cfg.phase_dt))
    times = np.arange(n_steps + 1) * cfg.phase_dt
    frac = np.ones((len(cfg.phase_betas), n_steps + 1))
    rows = []
    level = 1.0 - cfg.phase_delta
    variant = PHASE_VARIANT
    for ib, beta in enumerate(cfg.phase_betas):
        field = sphere_attention_flow(SoftmaxKernel(float(beta), chunk=cfg.chunk), variant)
        init, step = make_integrator("projected_euler", field, cfg.phase_dt)
        state = init(backend.asarray(_uniform_sphere(rng, (cfg.phase_batch, cfg.phase_n, cfg.phase_d))))
        frac[ib, 0] = float(to_numpy(fraction_clustered_pairs(state.x, level).mean()))
        for s in tqdm(range(1, n_steps + 1), disable=quiet, desc=f"phase beta={beta:g}", leave=False):
            state = step(state)
            frac[ib, s] = float(to_numpy(fraction_clustered_pairs(state.x, level).mean()))
            if frac[ib, s] >= 1.0:
                break
        idx = np.flatnonzero(frac[ib] > 0.5)
        crossing = float(times[idx[0]]) if idx.size else math.inf
        ode = phase_boundary_time(float(beta), cfg.phase_n, cfg.phase_delta, variant)
        if beta <= cfg.phase_beta_check_max:
            ok = math.isfinite(crossing) and abs(crossing - ode) <= cfg.phase_tolerance * ode
            check = f"{'PASS' if ok else 'FAIL'} (|rel.err| <= {cfg.phase_tolerance:g})"
        else:
            ok = not math.isfinite(crossing) if ode > cfg.phase_t_end else math.isfinite(crossing)
            check = f"{'PASS' if ok else 'FAIL'} ({'no crossing by T' if ode > cfg.phase_t_end else 'crosses'})"
        rows.append({"beta": float(beta), "crossing": crossing, "ode": ode, "check": check, "ok": ok})
    return {"betas": np.asarray(cfg.phase_betas, dtype=float), "times": times, "fraction": frac,
            "rows": rows, "d": cfg.phase_d, "n": cfg.phase_n, "batch": cfg.phase_batch,
            "dt": cfg.phase_dt, "delta": cfg.phase_delta, "variant": variant}


def kernel_comparison(cfg: TokenFlowConfig, backend, rng, *, kernel_from=None, quiet=True) -> dict:
    """Section D: softmax against fixed random-feature kernels (and a learned kernel) by W1 over time.

    Parameters
    ----------
    cfg : TokenFlowConfig
    backend : engine.backend.Backend
        Where the tokens live (initial draws are made on the host with ``rng``).
    rng : numpy.random.Generator
        Host generator of this section.
    quiet : bool, default True
        No progress bars.
    kernel_from : str or os.PathLike, optional
        Main-job HDF5 file (``load_learned_kernel``).

    Notes
    -----
    Fixed maps: ``make_feature_map(name, d, m, rng, omega_scale=sqrt(d))`` (for FAVOR,
    ``omega ~ N(0, I)``, an unbiased estimate of ``exp(<q, k>)``) with inputs scaled
    by ``sqrt(kernel_beta)``, so that FAVOR estimates the softmax kernel
    ``exp(kernel_beta <q, k>)`` of the reference flow. A learned kernel (``kernel_from``,
    a main-job file) acts in its head dimension d_k; it is compared with the softmax
    flow at ``beta = 1/sqrt(d_k)`` (the scaling of the main job's softmax baseline) and,
    for reference, with FAVOR at the same m and beta, from the same initial tokens.

    Returns
    -------
    dict
        ``names``, ``dims``, ``times``, ``w1`` (n_kernels, k), ``coupled_mean`` (n_kernels, k),
        ``w1_method``, ``n``, ``beta``.

    References
    ----------
    spec sections 2.2 (K3) and 6.4 (learned linear attention against softmax).
    """
    n, d, beta = cfg.kernel_n, cfg.kernel_d, float(cfg.kernel_beta)
    times = _grid_record_times(cfg.kernel_t_end, cfg.kernel_dt, cfg.kernel_records)
    max_exact = 16_000_000
    names, dims, w1s, cms, methods = [], [], [], [], set()

    def compare(label, dim, ref, kern, x0):
        res = run_flow(sphere_attention_flow(kern, cfg.variant), x0, dt=cfg.kernel_dt,
                       t_end=cfg.kernel_t_end, method=cfg.integrator, record_times=times, quiet=quiet,
                       desc=label)
        dist = flow_distance(ref.x, res.x, max_exact=max_exact, rng=np.random.default_rng(0))
        names.append(label)
        dims.append(dim)
        w1s.append(dist["w1"])
        cms.append(dist["coupled_mean"])
        methods.add(dist["w1_method"])

    x0 = backend.asarray(_uniform_sphere(rng, (n, d)))
    ref = run_flow(sphere_attention_flow(SoftmaxKernel(beta, chunk=cfg.chunk), cfg.variant), x0,
                   dt=cfg.kernel_dt, t_end=cfg.kernel_t_end, method=cfg.integrator, record_times=times,
                   quiet=quiet, desc="softmax reference")
    for feat in cfg.kernel_features:
        for m in cfg.kernel_m:
            fmap = make_feature_map(feat, d, m, rng=rng, omega_scale=math.sqrt(d), check_finite=False)
            omega = backend.asarray(fmap.init_omega(rng))
            compare(f"{feat} m={m} (fixed)", d, ref, LinearKernel(fmap, omega, input_scale=math.sqrt(beta)), x0)
    if kernel_from is not None:
        name, omega, options = load_learned_kernel(kernel_from, cfg.learned_layer, cfg.learned_head)
        m, dk = omega.shape
        fmap = make_feature_map(name, dk, m, check_finite=False, **options)
        beta_l = 1.0 / math.sqrt(dk)
        xl = backend.asarray(_uniform_sphere(rng, (n, dk)))
        ref_l = run_flow(sphere_attention_flow(SoftmaxKernel(beta_l, chunk=cfg.chunk), cfg.variant), xl,
                         dt=cfg.kernel_dt, t_end=cfg.kernel_t_end, method=cfg.integrator,
                         record_times=times, quiet=quiet, desc="softmax reference (d_k)")
        compare(f"learned {name} L{cfg.learned_layer}H{cfg.learned_head} m={m}", dk, ref_l,
                LinearKernel(fmap, backend.asarray(omega)), xl)
        fav = make_feature_map("favor", dk, m, omega_scale=math.sqrt(dk), check_finite=False)
        compare(f"favor m={m} (fixed, d_k)", dk, ref_l,
                LinearKernel(fav, backend.asarray(fav.init_omega(rng)), input_scale=math.sqrt(beta_l)), xl)
    return {"names": names, "dims": dims, "times": times, "w1": np.asarray(w1s),
            "coupled_mean": np.asarray(cms), "w1_method": "+".join(sorted(methods)), "n": n, "beta": beta}


def mean_field(cfg: TokenFlowConfig, backend, rng, *, quiet=True) -> dict:
    """Section E: W1 between flows of N and 4N tokens from one initial law, and fitted rates.

    Parameters
    ----------
    cfg : TokenFlowConfig
    backend : engine.backend.Backend
        Where the tokens live (initial draws are made on the host with ``rng``).
    rng : numpy.random.Generator
        Host generator of this section.
    quiet : bool, default True
        No progress bars.

    Notes
    -----
    Initial law: ``normalise(N(0, I_d) + mf_offset e_d)`` on S^{d-1} (spec T38). For each
    N and seed, the two clouds are independent samples. Exact W1 (POT emd2) where
    ``N * 4N <= mf_max_exact``, else NaN; sliced W1 (256 directions) always.

    Returns
    -------
    dict
        ``n``, ``times``, ``w1_exact`` and ``w1_sliced`` of shape (n_N, seeds, n_times),
        ``fit_exact``, ``fit_sliced`` (one PowerLawFit per time), and the settings.

    References
    ----------
    paper 004, section 3.1 (mean-field reading of the particle map); spec section 2.4 and test T38;
    particles_pde_reference.md, section 4.2 (empirical W1 rates, propagation of chaos).
    """
    field = sphere_attention_flow(SoftmaxKernel(float(cfg.mf_beta), chunk=cfg.chunk), cfg.variant)
    t_end = max(cfg.mf_times)
    t_end = max(t_end, cfg.mf_dt)
    shift = np.zeros(cfg.mf_d)
    shift[-1] = cfg.mf_offset
    nn, ns, nt = len(cfg.mf_n), cfg.mf_seeds, len(cfg.mf_times)
    w_exact = np.full((nn, ns, nt), np.nan)
    w_sliced = np.full((nn, ns, nt), np.nan)
    for i, n in enumerate(cfg.mf_n):
        for s in range(ns):
            clouds = []
            for size in (n, 4 * n):
                x0 = normalise(rng.standard_normal((size, cfg.mf_d)) + shift)
                res = run_flow(field, backend.asarray(x0), dt=cfg.mf_dt, t_end=t_end, method=cfg.integrator,
                               record_times=cfg.mf_times, quiet=quiet, desc=f"mean field N={size}")
                clouds.append(res.x)
            for it in range(nt):
                a, b = clouds[0][it], clouds[1][it]
                if n * 4 * n <= cfg.mf_max_exact:
                    w_exact[i, s, it] = wasserstein1(a, b, method="emd").value
                w_sliced[i, s, it] = wasserstein1(a, b, method="sliced", n_projections=256,
                                                  rng=np.random.default_rng(1000 * i + s)).value
    fits = {}
    for metric, arr in (("exact", w_exact), ("sliced", w_sliced)):
        out = []
        for it in range(nt):
            ok = np.isfinite(arr[:, :, it]).all(axis=1)
            if ok.sum() >= 2:
                nvec = np.repeat(np.asarray(cfg.mf_n, dtype=float)[ok], ns)
                out.append(fit_power_law(nvec, arr[ok, :, it].ravel()))
            else:
                out.append(PowerLawFit(math.nan, math.nan, math.nan, 0))
        fits[metric] = out
    return {"n": tuple(int(v) for v in cfg.mf_n), "times": tuple(float(t) for t in cfg.mf_times),
            "w1_exact": w_exact, "w1_sliced": w_sliced, "fit_exact": fits["exact"],
            "fit_sliced": fits["sliced"], "beta": float(cfg.mf_beta), "d": cfg.mf_d,
            "offset": float(cfg.mf_offset), "seeds": ns, "variant": cfg.variant}


#: long_name of every variable and coordinate of the token-flow file (all dimensionless: units "1").
_DESCRIPTIONS = {
    "grid_beta": "inverse temperature beta of the clustering grid",
    "grid_dim": "token dimension d of the clustering grid",
    "seed": "independent token cloud (seed index)",
    "grid_time": "flow time t of the clustering grid",
    "energy": "", "clusters": "", "hemisphere0": "",
    "min_inner_product": "min_{i,j} <x_i, x_j> of the cloud",
    "wendel_case": "Wendel check case",
    "wendel_n": "number of points n", "wendel_d": "dimension d",
    "wendel_p": "Wendel probability that n uniform points lie in an open hemisphere",
    "wendel_p_mc": "Monte Carlo estimate of the hemisphere probability",
    "wendel_se": "standard error of wendel_p_mc",
    "phase_beta": "inverse temperature beta of the phase-boundary check",
    "phase_time": "flow time t of the phase-boundary check",
    "phase_fraction": "",
    "phase_crossing": "measured time at which the clustered fraction crosses its threshold",
    "phase_ode": "crossing time predicted by the gamma_beta ODE",
    "kernel": "attention kernel of the flow",
    "kernel_time": "flow time t of the kernel comparison",
    "kernel_w1": "",
    "kernel_coupled_mean": "mean distance of matched tokens to the softmax flow (identity coupling)",
    "kernel_dim": "token dimension d of the kernel comparison",
    "mf_n": "number of tokens N", "mf_seed": "independent cloud (seed index)",
    "mf_time": "flow time t of the mean-field check",
    "mf_w1_exact": "", "mf_w1_sliced": "",
    "mf_alpha_exact": "fitted exponent alpha of W1 ~ C N^-alpha (exact W1)",
    "mf_alpha_sliced": "fitted exponent alpha of W1 ~ C N^-alpha (sliced W1)",
}


def _write(writer: TrajectoryWriter, results: dict) -> None:
    """Store every section's arrays with named dimensions."""
    g = results["grid"]
    writer.dimension("grid_beta", len(g["betas"]), coords=np.asarray(g["betas"]))
    writer.dimension("grid_dim", len(g["dims"]), coords=np.asarray(g["dims"]))
    writer.dimension("seed", g["n_seeds"], coords=np.arange(g["n_seeds"]))
    writer.dimension("grid_time", len(g["times"]), coords=g["times"])
    dims4 = ("grid_beta", "grid_dim", "seed", "grid_time")
    writer.variable("energy", dims4, data=g["energy"],
                    attrs={"long_name": "E_beta = (1/(2 beta n^2)) sum_{i,j} exp(beta <x_i,x_j>)"})
    writer.variable("clusters", dims4, dtype="i8", data=g["clusters"],
                    attrs={"long_name": f"connected components of <x_i,x_j> > 1 - {g['eps']}"})
    writer.variable("min_inner_product", dims4, data=g["min_ip"])
    writer.variable("hemisphere0", dims4[:3], dtype="i8", data=g["hemisphere0"].astype(np.int64),
                    attrs={"long_name": "initial cloud lies in an open hemisphere (1/0)"})
    w = results["wendel"]
    writer.dimension("wendel_case", len(w), coords=np.arange(len(w)))
    for key, dt in (("n", "i8"), ("d", "i8"), ("p", "f8"), ("p_mc", "f8"), ("se", "f8")):
        writer.variable(f"wendel_{key}", ("wendel_case",), dtype=dt, data=[r[key] for r in w])
    p = results["phase"]
    writer.dimension("phase_beta", len(p["betas"]), coords=p["betas"])
    writer.dimension("phase_time", len(p["times"]), coords=p["times"])
    writer.variable("phase_fraction", ("phase_beta", "phase_time"), data=p["fraction"],
                    attrs={"long_name": f"batch-mean fraction of pairs with <x_i,x_j> > {1 - p['delta']}"})
    writer.variable("phase_crossing", ("phase_beta",), data=[r["crossing"] for r in p["rows"]])
    writer.variable("phase_ode", ("phase_beta",), data=[r["ode"] for r in p["rows"]])
    k = results["kernels"]
    writer.dimension("kernel", len(k["names"]), coords=np.asarray(k["names"]))
    writer.dimension("kernel_time", len(k["times"]), coords=k["times"])
    writer.variable("kernel_w1", ("kernel", "kernel_time"), data=k["w1"],
                    attrs={"long_name": f"W1 (l2 cost, {k['w1_method']}) to the softmax flow"})
    writer.variable("kernel_coupled_mean", ("kernel", "kernel_time"), data=k["coupled_mean"])
    writer.variable("kernel_dim", ("kernel",), dtype="i8", data=k["dims"])
    m = results["mean_field"]
    writer.dimension("mf_n", len(m["n"]), coords=np.asarray(m["n"]))
    writer.dimension("mf_seed", m["seeds"], coords=np.arange(m["seeds"]))
    writer.dimension("mf_time", len(m["times"]), coords=np.asarray(m["times"]))
    writer.variable("mf_w1_exact", ("mf_n", "mf_seed", "mf_time"), data=m["w1_exact"],
                    attrs={"long_name": "W1(mu_N(t), mu_4N(t)), exact (POT emd2), NaN if not computed"})
    writer.variable("mf_w1_sliced", ("mf_n", "mf_seed", "mf_time"), data=m["w1_sliced"],
                    attrs={"long_name": "sliced W1 (256 directions) between mu_N(t) and mu_4N(t)"})
    writer.variable("mf_alpha_exact", ("mf_time",), data=[f.alpha for f in m["fit_exact"]])
    writer.variable("mf_alpha_sliced", ("mf_time",), data=[f.alpha for f in m["fit_sliced"]])
    for name, long_name in _DESCRIPTIONS.items():          # CF: every variable says what it is
        if name in ("energy", "clusters", "hemisphere0", "phase_fraction", "kernel_w1", "mf_w1_exact",
                    "mf_w1_sliced"):
            long_name = writer.get_var_attr(name, "long_name")
        writer.describe(name, long_name)


def run_token_flow_study(cfg: TokenFlowConfig, out, *, kernel_from=None, overwrite: bool = False,
                         resume: bool = False, quiet: bool = True, plots: bool = True, log=print) -> dict:
    """Run sections A-E, write the HDF5 file and the plots, return the results.

    Parameters
    ----------
    cfg : TokenFlowConfig
    out : str or os.PathLike
        HDF5 file to create (kind ``"token_flow_study"``).
    kernel_from : str or os.PathLike, optional
        A main-job file whose learned particles drive one more flow (section D); overrides
        ``cfg.kernel_from``.
    overwrite : bool, default False
    resume : bool, default False
        Continue ``out``: a complete file is reported as stored (no computation); an incomplete
        one (interrupted while writing) is recomputed from its stored configuration, which must
        equal ``cfg``. The study writes once, at the end, and every section draws from its own
        seed, so a recomputed file holds the numbers of an uninterrupted run.
    quiet : bool, default True
        No progress bars.
    plots : bool, default True
        Save PNG figures next to ``out``.
    log : callable, default print
        Receives one line per finished section.

    Returns
    -------
    dict
        ``grid``, ``wendel``, ``phase``, ``kernels``, ``mean_field``, ``timings``,
        ``plots`` (paths), ``path``, ``report`` (the tables); after ``resume`` of a complete
        file only ``path``, ``report``, ``plots`` (empty) and ``resumed = "complete"``.

    Raises
    ------
    FileExistsError
        If ``out`` exists and neither ``overwrite`` nor ``resume`` is set.
    FileNotFoundError, engine.storage.RunFileError, ValueError
        If ``kernel_from`` is missing or not a usable main-job file; if ``resume`` is set and
        ``out`` is missing, foreign or of another configuration; if both ``overwrite`` and
        ``resume`` are set.
    RuntimeError
        If ``cfg.backend == "cupy"`` and no GPU is usable.
    """
    if not isinstance(cfg, TokenFlowConfig):
        raise TypeError(f"cfg must be a TokenFlowConfig, got {type(cfg).__name__}")
    if overwrite and resume:
        raise ValueError("overwrite=True and resume=True exclude each other")
    out = Path(out)
    if kernel_from is not None:
        cfg = cfg.replace(kernel_from=str(kernel_from))
    kernel_from = cfg.kernel_from
    if resume:
        if not out.exists():
            raise FileNotFoundError(f"resume: {out} does not exist; start the study without --resume")
        check_resumable(out, KIND, cfg.to_dict())
        ds = open_run(out, kind=KIND)
        if ds.attrs.get("status") == "complete":
            return {"path": out, "report": str(ds.attrs.get("report", "")), "plots": [],
                    "resumed": "complete"}
    if kernel_from is not None:
        load_learned_kernel(kernel_from, cfg.learned_layer, cfg.learned_head)   # fail before any work
    backend = get_backend(cfg.backend, cfg.dtype)
    if out.exists() and not (overwrite or resume):
        raise FileExistsError(f"{out} already exists; pass overwrite=True (CLI: --overwrite) or choose "
                              f"another --out")
    seeds = np.random.SeedSequence(cfg.seed).spawn(6)
    rngs = [np.random.default_rng(s) for s in seeds]
    results, timings = {}, {}
    attrs = {"seed": cfg.seed, "backend": cfg.backend,
             "source": "paper 004 section 3.1; spec paper004_attention_theory.md sections 6.1, 8; "
                       "GLPR arXiv:2312.10794",
             "energy_normalisation": "E_beta = (1/(2 beta n^2)) sum over all ordered pairs i,j "
                                     "(diagonal included)",
             "w1_cost": "euclidean (l2)"}
    # The sections are computed under the run lock with the old file intact (an interrupted
    # --overwrite or --resume loses nothing); the file is replaced only when they are done.
    lock = RunLock(out)
    lock.acquire()
    try:
        for key, fn in (("grid", lambda: clustering_grid(cfg, backend, rngs[0], quiet=quiet)),
                        ("wendel", lambda: wendel_table(cfg, rngs[1])),
                        ("phase", lambda: phase_boundary(cfg, backend, rngs[2], quiet=quiet)),
                        ("kernels", lambda: kernel_comparison(cfg, backend, rngs[3], kernel_from=kernel_from,
                                                              quiet=quiet)),
                        ("mean_field", lambda: mean_field(cfg, backend, rngs[4], quiet=quiet))):
            t0 = time.perf_counter()
            results[key] = fn()
            timings[key] = time.perf_counter() - t0
            log(f"  section {key} done in {timings[key]:.1f} s")
    finally:
        lock.release()
    with TrajectoryWriter(out, KIND, config=cfg.to_dict(), attrs=attrs,
                          overwrite=overwrite or resume) as writer:
        _write(writer, results)
        # one representative trajectory (first beta of the grid, d = 3 if present) for inspection
        d_ex = 3 if 3 in cfg.dims else cfg.dims[0]
        x_ex = backend.asarray(_uniform_sphere(rngs[5], (cfg.n_tokens, d_ex)))
        run_flow(sphere_attention_flow(SoftmaxKernel(float(cfg.betas[0]), chunk=cfg.chunk), cfg.variant), x_ex,
                 dt=cfg.dt, t_end=cfg.t_end, method=cfg.integrator,
                 record_times=_grid_record_times(cfg.t_end, cfg.dt, cfg.n_records), writer=writer,
                 prefix="example_", keep_trajectory=False, quiet=True,
                 observables={"energy": partial(interaction_energy, beta=float(cfg.betas[0]))})
        results["timings"] = timings
        results["report"] = format_tables(results)
        writer.set_attrs(example_beta=float(cfg.betas[0]), example_dim=d_ex,
                         timings={k: round(v, 3) for k, v in timings.items()},
                         report=results["report"])
    results["path"] = out
    results["plots"] = make_plots(results, out.with_suffix("")) if plots else []
    return results


def summary(results: dict) -> str:
    """Tables of a finished study (see :func:`~rieszflow.studies.token_flow.analysis.format_tables`)."""
    return format_tables(results)
