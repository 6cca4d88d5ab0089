"""Analysis of a ``rieszflow kernel-mean-field`` file: W1 rates, free energy, Gibbs test, accuracy tables, plots.

* **Rates.** :func:`rieszflow.studies.mean_field.analysis.fit_decay` (OLS of log W1 on log N over
  every run, with the slope's standard error) at each comparison time, next to the same fit of the
  iid reference and the Fournier-Guillin slope over the same N.
* **Gibbs test.** The long-run particle histograms are aggregated to coarse bins (1-D: equal width;
  2-D: equal-area rings times sectors); per bin :math:`z = (\\bar m - m_{\\rm Gibbs})/{\\rm SE}` with the
  SE over the R independent runs, so :math:`z \\sim t_{R-1}` under "the particles sample the Gibbs
  state" and :math:`E[z^2] = (R-1)/(R-3)`.

References
----------
paper 000, Thm 1; Fournier and Guillin, PTRF 162 (2015) 707-738.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

__all__ = ["load_study", "gibbs_bins", "summary_tables", "format_tables", "make_plots"]


def load_study(path):
    """Open a study file (kind ``"kernel_mean_field_study"``) as an :class:`xarray.Dataset`.

    Parameters
    ----------
    path : str or os.PathLike

    Returns
    -------
    xarray.Dataset
    """
    from rieszflow.engine.storage import open_run
    from rieszflow.studies.kernel_mean_field.study import KIND

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
        ``fits``/``iid_fits`` (per time, :class:`DecayFit` or None), ``expected_slope``,
        ``dt_floor``, ``fe_pde`` (at the comparison times), ``fe_particles_mean``/``_se``,
        ``fe_gibbs``, ``fe_max_increase`` (largest PDE free-energy increase over a step),
        ``acc_mean``/``acc_se`` (n_N, n_times), ``acc_mf`` (n_times), ``acc_mf_long``,
        ``acc_mf_gibbs``, ``acc_rbf``, ``acc_rbf_scale``, ``long_*`` (Gibbs comparison) and ``d``.
    """
    from rieszflow.studies.mean_field.analysis import expected_slope, fit_decay

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
        hm, hse = _mean_se(Hb, 0) if Hb.shape[0] else (np.full(nb, np.nan), np.full(nb, np.nan))
        with np.errstate(invalid="ignore", divide="ignore"):
            z = np.where(hse > 0, (hm - g) / hse, np.nan)
        R = int(ok.sum())
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
            long_acc_se=float(lase), long_runs=R, long_n=int(cfg["long_n"]), gibbs_z=z, gibbs_bins=nb,
            gibbs_chi2=float(np.nansum(z * z)), gibbs_dof=int(np.isfinite(z).sum()),
            gibbs_max_z=float(np.nanmax(np.abs(z))) if np.isfinite(z).any() else float("nan"),
            wall_mean=np.nanmean(ds[f"{q}_wall"].values, axis=1))
    return out


def _f(x, se=None, fmt=".3f"):
    if not np.isfinite(x):
        return "—"
    return f"{x:{fmt}}" + ("" if se is None or not np.isfinite(se) else f" ± {se:{fmt}}")


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
              f"{e['long_w1_iid']:.3e}); histogram test over {e['gibbs_dof']} bins: chi2 = {e['gibbs_chi2']:.1f} "
              f"(E = {e['gibbs_dof'] * (e['long_runs'] - 1) / max(e['long_runs'] - 3, 1):.1f} under t_(R-1)), "
              f"max |z| = {e['gibbs_max_z']:.2f}", "",
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
