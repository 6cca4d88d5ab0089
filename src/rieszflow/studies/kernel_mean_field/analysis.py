"""Analysis of a ``rieszflow kernel-mean-field`` file: W1 rates, free energy, Gibbs test, accuracy tables, plots.

* **Rates.** :func:`rieszflow.engine.stats.fit_decay` (OLS of log W1 on log N over
  every run, with the slope's standard error) at each comparison time, next to the same fit of the
  iid reference and the Fournier-Guillin slope over the same N.
* **Gibbs test** (:func:`gibbs_histogram_test`). The long-run particle histograms are aggregated to
  coarse bins (1-D: equal width; 2-D: equal-area rings times sectors). The null hypothesis is "the
  R runs' N particles are N R independent draws from the Gibbs state"; per bin
  :math:`z_b = (\\bar m_b - g_b)/\\sqrt{g_b(1-g_b)/(NR)}` with :math:`g_b` the Gibbs mass of the bin
  and :math:`\\bar m_b` the particles' mass averaged over the runs (the null standard error, so no bin
  is dropped, empty ones included), :math:`\\chi^2 = \\sum_b z_b^2`, and its p-value is a Monte Carlo
  tail probability under the null (the pooled counts are multinomial(N R, g); the bins are dependent
  because the masses sum to 1, so no chi-square law is assumed). Any R >= 1 is allowed. Mean-field
  repulsion damps the fluctuations below the iid level, so for the interacting particles the test is
  conservative about fluctuations and sensitive to a shifted law. The same test against the PDE
  density at ``long_time`` separates "the particles follow the PDE" from "the PDE has relaxed".

References
----------
paper 000, Thm 1; Fournier and Guillin, PTRF 162 (2015) 707-738.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from rieszflow.engine.stats import expected_slope, fit_decay
from rieszflow.engine.storage import open_run
from rieszflow.studies.kernel_mean_field.study import KIND

__all__ = ["load_study", "gibbs_bins", "gibbs_histogram_test", "summary_tables", "format_tables", "make_plots"]

#: Monte Carlo replicates of the Gibbs histogram test's null distribution.
GIBBS_MC_REPLICATES = 20000


def load_study(path):
    """Open a study file (kind ``"kernel_mean_field_study"``) as an :class:`xarray.Dataset`.

    Parameters
    ----------
    path : str or os.PathLike

    Returns
    -------
    xarray.Dataset
    """
    return open_run(path, KIND)


def _problems(ds):
    p = ds.attrs.get("problems")
    return json.loads(p) if isinstance(p, str) else [str(x) for x in np.atleast_1d(p)]


def _mean_se(a, axis):
    a = np.asarray(a, dtype=np.float64)
    ok = np.isfinite(a)
    n = ok.sum(axis=axis)
    with np.errstate(invalid="ignore", divide="ignore"):
        m = np.where(ok, a, 0.0).sum(axis=axis) / n
        dev = np.where(ok, a - np.expand_dims(m, axis), 0.0)
        se = np.sqrt((dev * dev).sum(axis=axis) / (n - 1) / n)
    return np.where(n > 0, m, np.nan), np.where(n > 1, se, np.nan)


def gibbs_bins(centers, n_bins: int, radius: float) -> np.ndarray:
    """Coarse bin of each mesh cell for the Gibbs histogram test.

    Parameters
    ----------
    centers : ndarray, shape (n_cells, p)
        Cell centres.
    n_bins : int
        1-D: equal-width bins on ``[-radius, radius]``; 2-D: 4 equal-area rings times
        ``n_bins // 4`` sectors.
    radius : float
        Domain radius.

    Returns
    -------
    ndarray of int, shape (n_cells,)
    """
    c = np.asarray(centers, dtype=np.float64)
    if c.shape[1] == 1:
        return np.clip(((c[:, 0] + radius) / (2 * radius) * n_bins).astype(int), 0, n_bins - 1)
    ring = np.clip((np.sum(c * c, axis=1) / radius ** 2 * 4).astype(int), 0, 3)
    sectors = max(n_bins // 4, 1)
    ang = np.clip(((np.arctan2(c[:, 1], c[:, 0]) + np.pi) / (2 * np.pi) * sectors).astype(int), 0, sectors - 1)
    return ring * sectors + ang


def gibbs_histogram_test(masses, gibbs, n: int, n_mc: int = GIBBS_MC_REPLICATES, seed: int = 0) -> dict:
    """Chi-square histogram test of "the particles are iid draws from the Gibbs state", with a Monte Carlo p-value.

    Under the null hypothesis the R runs hold N R independent draws from ``gibbs``; the mean
    particle mass of bin b over the runs then has mean :math:`g_b` and standard error
    :math:`\\sqrt{g_b(1-g_b)/(NR)}`, :math:`z_b = (\\bar m_b - g_b)/{\\rm SE}_b` and
    :math:`\\chi^2 = \\sum_b z_b^2`. The bins are dependent (the masses sum to 1), so the p-value
    :math:`P(\\chi^2_{\\rm null} \\ge \\chi^2)` is estimated from ``n_mc`` seeded draws of the pooled
    counts, multinomial(N R, g), as :math:`(1 + \\#\\{\\chi^2_{\\rm null} \\ge \\chi^2\\})/(1 + n_{\\rm mc})`.
    A bin with :math:`g_b = 0` contributes 0 if it is empty in every run and makes :math:`\\chi^2`
    infinite (p-value 0) otherwise.

    Parameters
    ----------
    masses : array_like, shape (R, n_bins)
        Particle mass (fraction of the N particles) per bin in each of the R >= 1 runs; rows sum to 1.
    gibbs : array_like, shape (n_bins,)
        Gibbs mass per bin, nonnegative, summing to 1 (renormalised).
    n : int
        Particles per run, >= 1.
    n_mc : int, default ``GIBBS_MC_REPLICATES``
        Monte Carlo replicates of the null distribution, >= 1.
    seed : int, default 0
        Seed of the replicates.

    Returns
    -------
    dict
        ``z`` (n_bins,), ``chi2``, ``p_value``, ``max_z`` (largest ``|z|``), ``bins``, ``runs``.

    Raises
    ------
    ValueError
        On mismatched shapes, no runs, negative or zero-sum ``gibbs``, ``n < 1`` or ``n_mc < 1``.

    References
    ----------
    paper 000, Thm 1 (the Gibbs fixed point of the McKean-Vlasov equation); Davison and Hinkley,
    Bootstrap Methods and their Application (1997), eq. (4.11) (Monte Carlo p-value).
    """
    m = np.atleast_2d(np.asarray(masses, dtype=np.float64))
    g = np.asarray(gibbs, dtype=np.float64)
    if g.ndim != 1 or m.shape[1] != g.size or m.shape[0] < 1:
        raise ValueError(f"masses of shape {m.shape} and gibbs of shape {g.shape}: need (R >= 1, n_bins) and (n_bins,)")
    if not np.all(np.isfinite(g)) or np.any(g < 0) or not g.sum() > 0:
        raise ValueError("gibbs: bin masses must be finite, nonnegative and not all 0")
    if int(n) < 1 or int(n_mc) < 1:
        raise ValueError(f"n={n}, n_mc={n_mc}: both must be >= 1")
    g = g / g.sum()
    R, n, n_mc = m.shape[0], int(n), int(n_mc)
    total = n * R
    var = g * (1.0 - g) / total

    def chi2_of(mbar):
        with np.errstate(invalid="ignore", divide="ignore"):
            z = np.where(var > 0, (mbar - g) / np.sqrt(np.where(var > 0, var, 1.0)),
                         np.where(np.abs(mbar - g) > 1e-12, np.inf, 0.0))
        return z, np.sum(z * z, axis=-1)

    z, chi2 = chi2_of(m.mean(axis=0))
    sim = np.random.default_rng(np.random.SeedSequence([seed, total, g.size])).multinomial(total, g, size=n_mc)
    _, null = chi2_of(sim / total)
    p = 0.0 if np.isinf(chi2) else (1.0 + np.count_nonzero(null >= chi2 * (1 - 1e-12))) / (1.0 + n_mc)
    return dict(z=z, chi2=float(chi2), p_value=float(p), max_z=float(np.max(np.abs(z))), bins=g.size, runs=R)


def summary_tables(ds) -> dict:
    """Numbers of the study, per problem.

    Parameters
    ----------
    ds : xarray.Dataset
        From :func:`load_study`.

    Returns
    -------
    dict
        ``{problem: {...}}`` with ``times``, ``N``, ``w1_mean``/``w1_se``/``iid_mean`` (n_N, n_times),
        ``fits``/``iid_fits`` (per time, :class:`~rieszflow.engine.stats.DecayFit` or None), ``expected_slope``,
        ``dt_floor``, ``fe_pde`` (at the comparison times), ``fe_particles_mean``/``_se``,
        ``fe_gibbs``, ``fe_max_increase`` (largest PDE free-energy increase over a step),
        ``acc_mean``/``acc_se`` (n_N, n_times), ``acc_mf`` (n_times), ``acc_mf_long``,
        ``acc_mf_gibbs``, ``acc_rbf``, ``acc_rbf_scale``, ``long_*`` (Gibbs comparison), ``gibbs_z``/``gibbs_chi2``/``gibbs_p``/``gibbs_max_z``
        (:func:`gibbs_histogram_test` over ``gibbs_bins`` bins, seeded by the study's seed),
        ``pde_long_chi2``/``pde_long_p``/``pde_long_max_z`` (the same test against the PDE density at
        ``long_time``) and ``d``.
    """
    cfg = json.loads(ds.attrs["config"])
    out = {}
    for q in _problems(ds):
        times, n = ds[f"{q}_time"].values, ds[f"{q}_N"].values
        d = 2 if f"{q}_y" in ds else 1
        w1, iid = ds[f"{q}_w1"].values, ds[f"{q}_w1_iid"].values
        fits, ifits = [], []
        for k in range(times.size):
            for arr, lst in ((w1, fits), (iid, ifits)):
                try:
                    lst.append(fit_decay(n, arr[:, :, k]))
                except ValueError:
                    lst.append(None)
        st = ds[f"{q}_pde_step_time"].values
        fe = ds[f"{q}_pde_free_energy"].values
        fe_at = np.array([fe[int(np.argmin(np.abs(st - t)))] for t in times])
        m, se = _mean_se(w1, 1)
        mi, _ = _mean_se(iid, 1)
        fpm, fps = _mean_se(ds[f"{q}_free_energy"].values, 1)
        am, ase = _mean_se(ds[f"{q}_acc"].values, 1)
        # Gibbs histogram test
        centers = np.stack([ds[f"{q}_{a}"].values for a in "xy"[:d]], axis=1)
        radius = cfg["radius_1d"] if d == 1 else cfg["radius_2d"]
        bins = gibbs_bins(centers, cfg["gibbs_bins"], radius)
        nb = int(bins.max()) + 1
        vol = ds[f"{q}_volume"].values
        g = ds[f"{q}_gibbs"].values * vol
        g = np.bincount(bins, g / g.sum(), minlength=nb)
        H = ds[f"{q}_long_hist"].values
        ok = np.isfinite(H).all(axis=1)
        Hb = np.array([np.bincount(bins, h, minlength=nb) for h in H[ok]]) if ok.any() else np.full((0, nb), np.nan)
        R = int(ok.sum())
        gp = ds[f"{q}_rho_long"].values * vol          # the same test against the PDE at long_time
        gp = np.bincount(bins, gp / gp.sum(), minlength=nb)
        none = dict(z=np.full(nb, np.nan), chi2=float("nan"), p_value=float("nan"), max_z=float("nan"))
        test, test_pde = ((gibbs_histogram_test(Hb, law, int(cfg["long_n"]), seed=int(cfg["seed"])) if R else none)
                          for law in (g, gp))
        lw, lwse = _mean_se(ds[f"{q}_long_w1"].values, 0)
        lwi, _ = _mean_se(ds[f"{q}_long_w1_iid"].values, 0)
        la, lase = _mean_se(ds[f"{q}_long_acc"].values, 0)
        out[q] = dict(
            d=d, times=times, N=n, w1_mean=m, w1_se=se, iid_mean=mi, fits=fits, iid_fits=ifits,
            expected_slope=expected_slope(n, d), dt_floor=ds[f"{q}_pde_dt_floor"].values,
            fe_pde=fe_at, fe_particles_mean=fpm, fe_particles_se=fps, fe_gibbs=float(ds.attrs[f"{q}_gibbs_free_energy"]),
            fe_long=float(fe[-1]), fe_max_increase=float(np.max(np.diff(fe))), long_time=float(st[-1]),
            acc_mean=am, acc_se=ase, acc_mf=ds[f"{q}_acc_mf"].values,
            **{k: float(ds.attrs[f"{q}_{k}"]) for k in ("acc_mf_long", "acc_mf_gibbs", "acc_rbf", "acc_rbf_scale",
                                                        "long_l1", "long_w1_pde")},
            long_w1=float(lw), long_w1_se=float(lwse), long_w1_iid=float(lwi), long_acc=float(la),
            long_acc_se=float(lase), long_runs=R, long_n=int(cfg["long_n"]), gibbs_z=test["z"], gibbs_bins=nb,
            gibbs_chi2=test["chi2"], gibbs_p=test["p_value"], gibbs_max_z=test["max_z"],
            pde_long_chi2=test_pde["chi2"], pde_long_p=test_pde["p_value"], pde_long_max_z=test_pde["max_z"],
            wall_mean=np.nanmean(ds[f"{q}_wall"].values, axis=1))
    return out


def _f(x, se=None, fmt=".3f"):
    if not np.isfinite(x):
        return "—"
    return f"{x:{fmt}}" + ("" if se is None or not np.isfinite(se) else f" ± {se:{fmt}}")


def _p(p):
    floor = 1.0 / (1 + GIBBS_MC_REPLICATES)
    return "—" if not np.isfinite(p) else f"<= {floor:.0e}" if 0 < p <= floor \
        else f"{p:.4f}"


def format_tables(tables: dict) -> str:
    """Markdown tables of :func:`summary_tables` (printed by the CLI, quoted in the docs).

    Parameters
    ----------
    tables : dict

    Returns
    -------
    str
    """
    L = []
    for q, e in tables.items():
        t = e["times"]
        L += [f"### {q} (p = {e['d']})", "",
              "W1(mu_N(t), rho_t), mean ± SE over runs [iid reference: N draws from rho_t]", "",
              "| N | " + " | ".join(f"t = {x:g}" for x in t) + " | s/run |",
              "|---|" + "---|" * (t.size + 1)]
        for i, n in enumerate(e["N"]):
            L.append(f"| {int(n)} | " + " | ".join(
                f"{e['w1_mean'][i, k]:.2e} ± {e['w1_se'][i, k]:.0e} [{e['iid_mean'][i, k]:.2e}]"
                for k in range(t.size)) + f" | {e['wall_mean'][i]:.1f} |")
        L.append("| fitted p (W1 ~ N^p) | " + " | ".join(
            "—" if f is None else f"{f.slope:+.3f} ± {f.slope_se:.3f} (iid {fi.slope:+.3f})" if fi else
            f"{f.slope:+.3f} ± {f.slope_se:.3f}" for f, fi in zip(e["fits"], e["iid_fits"]))
            + f" | expected {e['expected_slope']:+.3f} |")
        L += ["", "PDE time floor W1(rho_2dt, rho_dt): " + ", ".join(f"{v:.1e}" for v in e["dt_floor"]), "",
              "Free energy F_beta: PDE at the comparison times, particle histograms (mean ± SE over runs), Gibbs", "",
              "| | " + " | ".join(f"t = {x:g}" for x in t) + f" | t = {e['long_time']:g} | Gibbs |",
              "|---|" + "---|" * (t.size + 2),
              "| PDE | " + " | ".join(f"{v:.4f}" for v in e["fe_pde"]) + f" | {e['fe_long']:.4f} | {e['fe_gibbs']:.4f} |"]
        for i, n in enumerate(e["N"]):
            L.append(f"| particles N = {int(n)} | " + " | ".join(
                _f(e["fe_particles_mean"][i, k], e["fe_particles_se"][i, k], ".4f") for k in range(t.size)) + " | | |")
        L += ["", f"Largest PDE free-energy increase over one step: {e['fe_max_increase']:.1e} (<= 0: F never "
                  f"increases)", "",
              f"Gibbs state: L1(rho_PDE(t = {e['long_time']:g}), rho_Gibbs) = {e['long_l1']:.2e}, "
              f"W1 = {e['long_w1_pde']:.2e}; {e['long_runs']} runs of N = {e['long_n']} particles at "
              f"t = {e['long_time']:g}: W1 to Gibbs {_f(e['long_w1'], e['long_w1_se'], '.3e')} (iid level "
              f"{e['long_w1_iid']:.3e}); histogram test over {e['gibbs_bins']} bins (null SE "
              f"sqrt(g(1-g)/(N R))): chi2 = {e['gibbs_chi2']:.1f}, Monte Carlo p-value under iid Gibbs draws "
              f"{_p(e['gibbs_p'])} ({GIBBS_MC_REPLICATES} replicates), max |z| = {e['gibbs_max_z']:.2f}; "
              f"the same test against rho_PDE(t = {e['long_time']:g}): chi2 = {e['pde_long_chi2']:.1f}, "
              f"p-value {_p(e['pde_long_p'])}, max |z| = {e['pde_long_max_z']:.2f}", "",
              f"Test accuracy (SVC, precomputed kernels); learned = N particle features at t, t = 0 = N fixed "
              f"random features from rho_0", "",
              "| N | " + " | ".join(f"t = {x:g}" for x in t) + " |", "|---|" + "---|" * t.size]
        for i, n in enumerate(e["N"]):
            L.append(f"| {int(n)} | " + " | ".join(_f(e["acc_mean"][i, k], e["acc_se"][i, k]) for k in range(t.size)) + " |")
        L += ["| mean-field kernel k_rho_t | " + " | ".join(f"{v:.3f}" for v in e["acc_mf"]) + " |", "",
              f"Mean-field kernel of rho(t = {e['long_time']:g}): {e['acc_mf_long']:.3f}; of the Gibbs state: "
              f"{e['acc_mf_gibbs']:.3f}; N = {e['long_n']} long-run particles: "
              f"{_f(e['long_acc'], e['long_acc_se'])}; RBF-SVM (gamma = sigma_0^2/2): {e['acc_rbf']:.3f}, "
              f"(gamma = 'scale'): {e['acc_rbf_scale']:.3f}", ""]
    return "\n".join(L)


def make_plots(ds, outdir, stem: str = "kernel_mean_field") -> list:
    """Save the figures as PNG files: per problem ``<stem>_<q>_w1_vs_N.png``, ``_free_energy.png``,
    ``_density.png`` and ``_accuracy.png``.

    Parameters
    ----------
    ds : xarray.Dataset
    outdir : str or os.PathLike
    stem : str

    Returns
    -------
    list of pathlib.Path
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    paths = []

    def save(fig, name):
        fig.tight_layout()
        paths.append(outdir / f"{stem}_{name}.png")
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)

    for q, e in summary_tables(ds).items():
        t, n = e["times"], e["N"]
        colors = plt.cm.viridis(np.linspace(0, 0.9, t.size))
        fig, ax = plt.subplots(figsize=(6, 4.5))
        for k in range(t.size):
            f = e["fits"][k]
            ax.errorbar(n, e["w1_mean"][:, k], yerr=e["w1_se"][:, k], color=colors[k], marker="o",
                        label=f"t={t[k]:g}" + ("" if f is None else f", p={f.slope:.2f}±{f.slope_se:.2f}"))
            ax.plot(n, e["iid_mean"][:, k], "--", color=colors[k], alpha=0.6)
        ax.set(xscale="log", yscale="log", xlabel="number of particles N", ylabel="W1(mu_N(t), rho_t)",
               title=f"{q}: particles vs McKean-Vlasov PDE (dashed: iid)")
        ax.legend(fontsize=7)
        save(fig, f"{q}_w1_vs_N")

        fig, ax = plt.subplots(figsize=(6, 4))
        st, fe = ds[f"{q}_pde_step_time"].values, ds[f"{q}_pde_free_energy"].values
        ax.plot(st[1:], fe[1:], "k-", label="PDE")
        for i, nn in enumerate(n):
            ax.errorbar(t[1:] if t[0] == 0 else t, e["fe_particles_mean"][i, 1:] if t[0] == 0 else e["fe_particles_mean"][i],
                        yerr=e["fe_particles_se"][i, 1:] if t[0] == 0 else e["fe_particles_se"][i], marker="o",
                        ls="", label=f"particle histogram, N={int(nn)}")
        ax.axhline(e["fe_gibbs"], color="C3", ls=":", label="Gibbs state")
        ax.set(xscale="log", xlabel="time t", ylabel="free energy F_beta", title=f"{q}: free energy")
        ax.legend(fontsize=7)
        save(fig, f"{q}_free_energy")

        vol = ds[f"{q}_volume"].values
        hist = ds[f"{q}_long_hist"].values
        if e["d"] == 1:
            x = ds[f"{q}_x"].values
            fig, ax = plt.subplots(figsize=(6, 4))
            ax.plot(x, ds[f"{q}_rho0"].values, color="0.6", label="rho_0")
            ax.plot(x, ds[f"{q}_rho"].values[-1], color="C0", label=f"PDE t={t[-1]:g}")
            ax.plot(x, ds[f"{q}_rho_long"].values, color="C1", label=f"PDE t={e['long_time']:g}")
            ax.plot(x, ds[f"{q}_gibbs"].values, "k:", label="Gibbs")
            ax.step(x, np.nanmean(hist, axis=0) / vol, where="mid", color="C2", alpha=0.7,
                    label=f"particles N={e['long_n']}, t={e['long_time']:g} (mean of runs)")
            ax.set(xlabel="frequency omega", ylabel="density", title=f"{q}: frequency densities")
            ax.legend(fontsize=7)
        else:
            import matplotlib.tri as mtri

            tri = mtri.Triangulation(ds[f"{q}_x"].values, ds[f"{q}_y"].values)
            fig, axs = plt.subplots(1, 3, figsize=(12, 4))
            vmax = np.nanmax(ds[f"{q}_gibbs"].values)
            for a, v, title in ((axs[0], ds[f"{q}_rho_long"].values, f"PDE t={e['long_time']:g}"),
                                (axs[1], ds[f"{q}_gibbs"].values, "Gibbs"),
                                (axs[2], np.nanmean(hist, axis=0) / vol, f"particles N={e['long_n']}")):
                im = a.tripcolor(tri, v, vmin=0, vmax=vmax, shading="gouraud")
                a.set(title=title, xlabel="omega_1", ylabel="omega_2", aspect="equal")
            fig.colorbar(im, ax=axs, shrink=0.8, label="density")
        paths.append(outdir / f"{stem}_{q}_density.png")
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)

        fig, ax = plt.subplots(figsize=(6, 4))
        ax.errorbar(n, e["acc_mean"][:, -1], yerr=e["acc_se"][:, -1], marker="o", label=f"learned, t={t[-1]:g}")
        ax.errorbar(n, e["acc_mean"][:, 0], yerr=e["acc_se"][:, 0], marker="s", label="fixed random from rho_0")
        ax.axhline(e["acc_mf"][-1], color="C0", ls="--", label=f"mean-field kernel k_rho(t={t[-1]:g})")
        ax.axhline(e["acc_mf_gibbs"], color="C3", ls=":", label="mean-field kernel, Gibbs")
        ax.axhline(e["acc_rbf"], color="k", ls="-.", label="RBF-SVM")
        ax.set(xscale="log", xlabel="number of features N", ylabel="test accuracy", title=f"{q}: accuracy")
        ax.legend(fontsize=7)
        save(fig, f"{q}_accuracy")
    return paths
