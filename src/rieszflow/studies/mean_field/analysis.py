"""Analysis of a ``rieszflow mean-field`` file: decay exponents, tables and plots.

Decay exponent
--------------
For each problem and time, :math:`\\log W_1` of every run is regressed on
:math:`\\log N` by ordinary least squares (runs are independent replicates), giving
:math:`W_1 \\approx C N^{p}` with the classical standard error of the slope p.
The *expected* slope over the same N values is obtained by the same regression
applied to the reference curve: :math:`N^{-1/2}` in 1-D and
:math:`N^{-1/2}\\log N` in 2-D (Fournier-Guillin, :math:`p = 1 = d/2`), whose local
slope :math:`-1/2 + 1/\\log N` is shallower than -1/2 at moderate N. In 2-D the
grid metric (:mod:`rieszflow.engine.measures`) cannot resolve scales below
the cell side, so at large N its slope tends back to -1/2.

References
----------
Fournier and Guillin, PTRF 162 (2015) 707-738; paper 000, Thm 1.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from rieszflow.engine.stats import expected_slope, fit_decay
from rieszflow.engine.storage import open_run
from rieszflow.studies.mean_field.study import KIND

__all__ = ["load_study", "summary_tables",
           "format_tables", "make_plots"]



def load_study(path):
    """Open a study file (kind ``"mean_field_study"``) as an :class:`xarray.Dataset`.

    Parameters
    ----------
    path : str or os.PathLike
        A file written by the ``rieszflow mean-field`` study.

    Returns
    -------
    xarray.Dataset
        Loaded into memory (see :func:`rieszflow.engine.storage.open_run`).
    """
    return open_run(path, KIND)


def _problems(ds):
    probs = ds.attrs.get("problems")
    return json.loads(probs) if isinstance(probs, str) else list(probs)


def _mean_se(a, axis):
    """Mean and standard error over the finite entries along ``axis``, entry by entry.

    An entry with fewer than 2 finite values gets SE NaN (and mean NaN with none); the
    others are unaffected.
    """
    a = np.asarray(a, dtype=np.float64)
    ok = np.isfinite(a)
    n = ok.sum(axis=axis)
    z = np.where(ok, a, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        m = z.sum(axis=axis) / n
        dev = np.where(ok, a - np.expand_dims(m, axis), 0.0)
        var = (dev * dev).sum(axis=axis) / (n - 1)
    m = np.where(n > 0, m, np.nan)
    se = np.where(n > 1, np.sqrt(var / np.maximum(n, 1)), np.nan)
    return m, se


def summary_tables(ds) -> dict:
    """Numbers of the study, per problem.

    Parameters
    ----------
    ds : xarray.Dataset
        From :func:`load_study`.

    Returns
    -------
    dict
        ``{problem: {"times", "N", "w1_mean", "w1_se", "iid_mean", "iid_se", "fits",
        "iid_fits", "expected_slope", "dt_floor", "grid_floor", "eta", "w1_eta_mean",
        "w1_eta_se", "wall_mean", "d"}}``; ``fits[k]`` is the :class:`~rieszflow.engine.stats.DecayFit` at time k
        (None at t = 0 is *not* skipped: it is the pure sampling error).
    """
    out = {}
    for p in _problems(ds):
        times = ds[f"{p}_time"].values
        n = ds[f"{p}_N"].values
        w1 = ds[f"{p}_w1"].values
        iid = ds[f"{p}_w1_iid"].values
        d = 2 if f"{p}_y" in ds else 1
        m, se = _mean_se(w1, 1)
        mi, sei = _mean_se(iid, 1)
        fits, ifits = [], []
        for k in range(times.size):
            fits.append(_safe_fit(n, w1[:, :, k]))
            ifits.append(_safe_fit(n, iid[:, :, k]))
        entry = dict(times=times, N=n, w1_mean=m, w1_se=se, iid_mean=mi, iid_se=sei, fits=fits,
                     iid_fits=ifits, expected_slope=expected_slope(n, d), d=d,
                     dt_floor=ds[f"{p}_pde_dt_floor"].values, grid_floor=ds[f"{p}_pde_grid_floor"].values,
                     wall_mean=np.nanmean(ds[f"{p}_wall"].values, axis=1))
        if f"{p}_w1_eta" in ds:
            em, ese = _mean_se(ds[f"{p}_w1_eta"].values, 1)
            im_, ise_ = _mean_se(ds[f"{p}_w1_eta_iid"].values, 0)
            entry.update(eta=ds[f"{p}_eta"].values, w1_eta_mean=em, w1_eta_se=ese,
                         w1_eta_iid_mean=im_, w1_eta_iid_se=ise_,
                         refinement_n=int(ds[f"{p}_w1_eta"].attrs.get("refinement_n", 0)))
        out[p] = entry
    return out


def _safe_fit(n, w):
    try:
        return fit_decay(n, w)
    except ValueError:
        return None


def format_tables(tables: dict) -> str:
    """Plain-text tables (the ones printed by the CLI and quoted in the docs).

    Parameters
    ----------
    tables : dict
        From :func:`summary_tables`.

    Returns
    -------
    str
    """
    lines = []
    for p, e in tables.items():
        lines.append(f"== {p} (d={e['d']}) ==")
        lines.append("W1(mu_N(t), rho_t): mean +- SE over runs   [iid reference: N draws from rho_t]")
        head = "     N | " + " | ".join(f"t={t:<5g}{'':>17}" for t in e["times"])
        lines.append(head)
        for i, n in enumerate(e["N"]):
            cells = [f"{e['w1_mean'][i, k]:.2e}+-{e['w1_se'][i, k]:.1e} [{e['iid_mean'][i, k]:.2e}]"
                     for k in range(e["times"].size)]
            lines.append(f"{int(n):>6d} | " + " | ".join(cells) + f"   ({e['wall_mean'][i]:.2f} s/run)")
        fit_cells = []
        for k, (f, fi) in enumerate(zip(e["fits"], e["iid_fits"])):
            fs = "n/a" if f is None else f"{f.slope:+.3f}+-{f.slope_se:.3f}"
            fis = "n/a" if fi is None else f"{fi.slope:+.3f}"
            fit_cells.append(f"t={e['times'][k]:g}: {fs} (iid {fis})")
        lines.append("fitted exponent p (W1 ~ N^p): " + "; ".join(fit_cells))
        ref = "N^-1/2" if e["d"] == 1 else "N^-1/2 log N (Fournier-Guillin)"
        lines.append(f"expected slope over these N: {e['expected_slope']:+.3f} ({ref})")
        lines.append("PDE floors: dt " + ", ".join(f"{v:.1e}" for v in e["dt_floor"])
                     + " | grid " + ", ".join(f"{v:.1e}" for v in e["grid_floor"]))
        if "eta" in e:
            lines.append(f"step refinement at N={e['refinement_n']}: W1 at t = "
                         + ", ".join(f"{t:g}" for t in e["times"]))
            for j, eta in enumerate(e["eta"]):
                lines.append(f"   eta={eta:<8g} W1 = " + ", ".join(
                    f"{e['w1_eta_mean'][j, k]:.2e}+-{e['w1_eta_se'][j, k]:.1e}" for k in range(e["times"].size)))
            lines.append("   iid level     " + ", ".join(
                f"{e['w1_eta_iid_mean'][k]:.2e}+-{e['w1_eta_iid_se'][k]:.1e}" for k in range(e["times"].size)))
        lines.append("")
    return "\n".join(lines)


def make_plots(ds, outdir, stem: str = "mean_field") -> list:
    """Save the study's figures (matplotlib, Agg) as PNG files.

    Figures per problem ``p``:

    ``<stem>_<p>_w1_vs_N.png``
        :math:`W_1` against N (log-log) at each time, runs as dots, means with
        error bars, the iid reference dashed, and the reference slope.
    ``<stem>_<p>_density.png``
        PDE density against the particle histogram of the largest N (1-D:
        curves at each time; 2-D: PDE and particles side by side at the last time).
    ``<stem>_<p>_refinement.png``
        :math:`W_1` at the last time against eta, with the PDE floors.

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
    tables = summary_tables(ds)
    paths = []
    for p, e in tables.items():
        times, n = e["times"], e["N"]
        w1 = ds[f"{p}_w1"].values
        fig, ax = plt.subplots(figsize=(6, 4.5))
        colors = plt.cm.viridis(np.linspace(0, 0.9, times.size))
        for k, t in enumerate(times):
            for r in range(w1.shape[1]):
                ax.plot(n, w1[:, r, k], ".", color=colors[k], alpha=0.3)
            f = e["fits"][k]
            lab = f"t={t:g}" + ("" if f is None else f", p={f.slope:.2f}±{f.slope_se:.2f}")
            ax.errorbar(n, e["w1_mean"][:, k], yerr=e["w1_se"][:, k], color=colors[k], marker="o", label=lab)
            ax.plot(n, e["iid_mean"][:, k], "--", color=colors[k], alpha=0.7)
        guide = n ** -0.5 * (np.log(n) if e["d"] == 2 else 1.0)
        guide = guide * np.nanmean(e["w1_mean"][0]) / guide[0]
        ax.plot(n, guide, "k:", label="N^-1/2" + (" log N" if e["d"] == 2 else ""))
        ax.set(xscale="log", yscale="log", xlabel="N", ylabel="W1(mu_N(t), rho_t)",
               title=f"{p}: particles vs PDE (dashed: iid reference)")
        ax.legend(fontsize=7)
        fig.tight_layout()
        paths.append(outdir / f"{stem}_{p}_w1_vs_N.png")
        fig.savefig(paths[-1], dpi=120)
        plt.close(fig)

        rho = ds[f"{p}_rho"].values
        hist = ds[f"{p}_hist"].values
        vol = ds[f"{p}_volume"].values
        i_big = int(np.nanargmax(np.where(np.isfinite(hist[:, 0, 0]), n, -1)))
        if e["d"] == 1:
            x = ds[f"{p}_x"].values
            fig, ax = plt.subplots(figsize=(6, 4))
            for k, t in enumerate(times):
                ax.plot(x, rho[k], color=colors[k], label=f"PDE t={t:g}")
                ax.step(x, hist[i_big, k] / vol, where="mid", color=colors[k], alpha=0.5, lw=0.8)
            ax.set(xlabel="x", ylabel="density", title=f"{p}: PDE (lines) vs N={int(n[i_big])} particles (steps)")
            ax.legend(fontsize=7)
        else:
            x, y = ds[f"{p}_x"].values, ds[f"{p}_y"].values
            nx = np.unique(x).size
            ny = np.unique(y).size
            ext = (x.min(), x.max(), y.min(), y.max())
            fig, axs = plt.subplots(1, 2, figsize=(9, 4))
            for a, img, title in ((axs[0], rho[-1], "PDE"), (axs[1], hist[i_big, -1] / vol,
                                                          f"N={int(n[i_big])} particles")):
                im = a.imshow(img.reshape(ny, nx), origin="lower", extent=ext, vmin=0, vmax=rho[-1].max())
                a.set(title=f"{title}, t={times[-1]:g}", xlabel="x", ylabel="y")
            fig.colorbar(im, ax=axs, shrink=0.8)
        paths.append(outdir / f"{stem}_{p}_density.png")
        fig.savefig(paths[-1], dpi=120)
        plt.close(fig)

        if "eta" in e:
            fig, ax = plt.subplots(figsize=(5.5, 4))
            k = times.size - 1
            ax.errorbar(e["eta"], e["w1_eta_mean"][:, k], yerr=e["w1_eta_se"][:, k], marker="o",
                        label=f"particles, N={e['refinement_n']}, t={times[k]:g}")
            ax.axhline(e["dt_floor"][k], color="C1", ls="--", label="PDE time-step floor")
            ax.axhline(e["grid_floor"][k], color="C2", ls=":", label="PDE grid floor")
            ax.axhline(e["w1_eta_iid_mean"][k], color="k", ls="-.", label="iid sampling level")
            ax.set(xscale="log", yscale="log", xlabel="eta", ylabel="W1",
                   title=f"{p}: step refinement")
            ax.legend(fontsize=7)
            fig.tight_layout()
            paths.append(outdir / f"{stem}_{p}_refinement.png")
            fig.savefig(paths[-1], dpi=120)
            plt.close(fig)
    return paths
