"""Analysis of the token-flow study: rate fits, theory labels, tables and plots (matplotlib, Agg)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import NamedTuple

import numpy as np

from rieszflow.engine.stats import power_law_fit

__all__ = [
    "PowerLawFit",
    "fit_power_law",
    "first_crossing",
    "cluster_theory",
    "format_tables",
    "make_plots",
]


class PowerLawFit(NamedTuple):
    """Least-squares fit ``w = C N^{-alpha}`` on log-log axes.

    Parameters
    ----------
    alpha : float
        Fitted rate (positive when ``w`` decreases with N).
    alpha_se : float
        Standard error of ``alpha`` (NaN with fewer than 3 distinct N).
    prefactor : float
        ``C``.
    n_points : int
        Number of (N, w) pairs fitted (repeated N counted once per value).
    """

    alpha: float
    alpha_se: float
    prefactor: float
    n_points: int


def fit_power_law(n, w) -> PowerLawFit:
    """Fit ``w = C n^{-alpha}`` by ordinary least squares of ``log w`` on ``log n``.

    The fit is :func:`rieszflow.engine.stats.power_law_fit` (``method="linregress"``) with the
    sign flipped (``alpha = -slope``).

    Parameters
    ----------
    n : array_like, shape (k,)
        Sizes (> 0); repeated sizes (seeds) are allowed.
    w : array_like, shape (k,)
        Positive values (e.g. W1 distances).

    Returns
    -------
    PowerLawFit

    Raises
    ------
    ValueError
        If shapes differ, values are not positive and finite, or fewer than 2 distinct sizes.

    References
    ----------
    Fournier and Guillin (2015), PTRF (empirical W1 rates); spec particles_pde_reference.md, 4.2.
    """
    n = np.asarray(n, dtype=np.float64).ravel()
    w = np.asarray(w, dtype=np.float64).ravel()
    if n.shape != w.shape:
        raise ValueError(f"n and w must have the same length; got {n.shape} and {w.shape}")
    if not (np.isfinite(n).all() and np.isfinite(w).all() and (n > 0).all() and (w > 0).all()):
        raise ValueError("n and w must be finite and > 0 for a log-log fit")
    if np.unique(n).size < 2:
        raise ValueError(f"need at least 2 distinct sizes to fit a rate; got {np.unique(n).tolist()}")
    f = power_law_fit(n, w, method="linregress")
    se = f.slope_se if np.unique(n).size >= 3 else math.nan
    return PowerLawFit(alpha=-f.slope, alpha_se=se, prefactor=float(math.exp(f.intercept)),
                       n_points=f.n_points)


def first_crossing(times, values, level: float) -> float:
    """First time at which ``values > level`` (``inf`` if never).

    Parameters
    ----------
    times : array_like, shape (k,)
    values : array_like, shape (k,)
    level : float

    Returns
    -------
    float
    """
    times = np.asarray(times, dtype=np.float64)
    values = np.asarray(values, dtype=np.float64)
    idx = np.flatnonzero(values > level)
    return float(times[idx[0]]) if idx.size else math.inf


def cluster_theory(n: int, d: int, beta: float) -> str:
    """What GLPR's theorems predict for ``n`` uniform tokens on S^{d-1} (SA/USA, Q = K = V = I).

    Parameters
    ----------
    n : int
        Number of tokens.
    d : int
        Ambient dimension (tokens on the sphere S^{d-1}).
    beta : float
        Inverse temperature of the attention.

    Returns
    -------
    str
        ``"1 (d>=n, hemisphere lemma, rate >= r)"`` when ``n <= d`` (thm:d.infty; the
        proof's bound ``d(1 - alpha)/dt <= -(1 - alpha) r`` with ``r = 1/(2 n e^{2 beta})``,
        tiny for large beta); ``"1 (a.e., d>=3)"`` (thm:boumal) for d >= 3; on the circle
        ``"1 (beta<=1, d=2)"`` (Criscitiello-Boumal remark) and otherwise
        ``"metastable (d=2)"`` (several clusters can persist for times exponential in
        beta; Geshkovski-Koubbi-Polyanskiy-Rigollet 2024). All are statements about
        ``t -> infinity``, not about the study's finite horizon.

    References
    ----------
    spec section 6.1, clustering-theorem table.
    """
    if n <= d:
        return f"1 (d>=n, hemisphere lemma, rate >= {1.0 / (2 * n * math.exp(2 * beta)):.1e})"
    if d >= 3:
        return "1 (a.e., d>=3)" + ("; metastable for large beta" if beta >= 4 else "")
    if beta <= 1:
        return "1 (beta<=1, d=2)"
    return "metastable (d=2)"


def _fmt(v, spec=".3g"):
    if isinstance(v, float) and math.isinf(v):
        return "none"
    return format(v, spec)


def format_tables(results: dict) -> str:
    """The study's tables as plain text (what ``rieszflow token-flow`` prints).

    Parameters
    ----------
    results : dict
        The dictionary returned by :func:`~rieszflow.studies.token_flow.study.run_token_flow_study`.

    Returns
    -------
    str
    """
    out = []
    g = results.get("grid")
    if g is not None:
        out.append(f"A. Clustering on S^(d-1): n = {g['n']} tokens, {g['variant']}, {g['n_seeds']} seeds, "
                   f"t_end = {g['times'][-1]:g} (cluster rule <x_i,x_j> > 1 - {g['eps']:g}, connected components)")
        out.append(f"{'beta':>6} {'d':>4} {'clusters(T) min..max':>21} {'t(all 1 cluster)':>17} "
                   f"{'min dE':>10} {'E(T)/Emax':>10} {'hemisph.(0)':>11}  theory")
        for ib, beta in enumerate(g["betas"]):
            for jd, d in enumerate(g["dims"]):
                cl = g["clusters"][ib, jd]
                e = g["energy"][ib, jd]
                t1 = first_crossing(g["times"], -(cl.max(axis=0)), -1.5)
                emax = math.exp(beta) / (2 * beta)
                out.append(f"{beta:6g} {d:4d} {f'{cl[:, -1].min()}..{cl[:, -1].max()}':>21} "
                           f"{_fmt(t1, '.3g'):>17} {np.diff(e, axis=1).min():10.2e} "
                           f"{e[:, -1].mean() / emax:10.4f} {g['hemisphere0'][ib, jd].mean():11.2f}  "
                           f"{cluster_theory(g['n'], d, beta)}")
        out.append("")
    w = results.get("wendel")
    if w is not None:
        out.append("B. Wendel: P(n uniform points on S^(d-1) lie in an open hemisphere) "
                   "= 2^-(n-1) sum_{k<d} C(n-1,k)")
        out.append(f"{'n':>4} {'d':>4} {'formula':>12} {'Monte Carlo':>12} {'SE':>10} {'z':>7} {'draws':>6} method")
        for row in w:
            z = (row["p_mc"] - row["p"]) / row["se"] if row["se"] > 0 else 0.0
            out.append(f"{row['n']:4d} {row['d']:4d} {row['p']:12.6g} {row['p_mc']:12.6g} {row['se']:10.2e} "
                       f"{z:7.2f} {row['draws']:6d} {row['method']}")
        out.append("  GLPR: an initial cloud in an open hemisphere clusters exponentially fast (lemma "
                   "hemisphere.clustering); Wendel's p is the chance of that start, 1 for d >= n (thm d.infty).")
        out.append("")
    p = results.get("phase")
    if p is not None:
        out.append(f"C. Phase boundary (spec T33): {p.get('variant', 'SA')}, d = {p['d']}, n = {p['n']}, "
                   f"batch {p['batch']}, GLPR scheme dt = {p['dt']:g}; crossing = first t with mean fraction of pairs "
                   f"<x_i,x_j> > {1 - p['delta']:g} above 1/2; ODE: gamma_beta(t) = 1 - {p['delta']:g}")
        out.append(f"{'beta':>6} {'crossing':>9} {'ODE':>9} {'rel.err':>8}  check")
        for row in p["rows"]:
            rel = (row["crossing"] - row["ode"]) / row["ode"] if math.isfinite(row["crossing"]) else math.nan
            out.append(f"{row['beta']:6g} {_fmt(row['crossing'], '9.3f'):>9} {_fmt(row['ode'], '9.3f'):>9} "
                       f"{rel:8.3f}  {row['check']}")
        out.append("")
    k = results.get("kernels")
    if k is not None:
        out.append(f"D. Softmax flow against linear-attention flows (W1, l2 cost, {k['w1_method']}), "
                   f"n = {k['n']}, beta = {k['beta']:g}")
        times = k["times"]
        cols = [0, len(times) // 2, len(times) - 1]
        out.append(f"{'kernel':>26} {'d':>4} " + " ".join(f"{'W1(t=' + format(times[c], 'g') + ')':>12}" for c in cols)
                   + f" {'max_t W1':>10}")
        for name, d, w1 in zip(k["names"], k["dims"], k["w1"]):
            out.append(f"{name:>26} {d:4d} " + " ".join(f"{w1[c]:12.4g}" for c in cols) + f" {w1.max():10.4g}")
        out.append("")
    m = results.get("mean_field")
    if m is not None:
        out.append(f"E. Mean field: W1(mu_N(t), mu_4N(t)), same initial law (normalise(N(0,I) + "
                   f"{m['offset']:g} e_d) on S^{m['d'] - 1}), {m['variant']} beta = {m['beta']:g}, "
                   f"{m['seeds']} seeds (mean shown)")
        out.append(f"{'N':>7} {'4N':>7} " + " ".join(f"{'t=' + format(t, 'g'):>10}" for t in m["times"])
                   + "  metric")
        for metric in ("exact", "sliced"):
            arr = m[f"w1_{metric}"]
            for i, n in enumerate(m["n"]):
                row = arr[i].mean(axis=0)
                if np.isnan(row).all():
                    continue
                out.append(f"{n:7d} {4 * n:7d} " + " ".join(f"{v:10.4g}" for v in row) + f"  {metric}")
        out.append(f"{'fitted W1 ~ C N^-alpha':>24}: " + "; ".join(
            f"t={t:g}: alpha_exact={_fmt(fe.alpha, '.3f')}+-{_fmt(fe.alpha_se, '.3f')}, "
            f"alpha_sliced={_fmt(fs.alpha, '.3f')}+-{_fmt(fs.alpha_se, '.3f')}"
            for t, fe, fs in zip(m["times"], m["fit_exact"], m["fit_sliced"])))
        out.append("  (iid empirical W1 on a 2-d manifold: N^-1/2 up to log factors; a Lipschitz flow map "
                   "keeps the rate, the constant may grow)")
        out.append("")
    t = results.get("timings")
    if t:
        out.append("timings (s): " + ", ".join(f"{k}={v:.1f}" for k, v in t.items()))
    return "\n".join(out)


def make_plots(results: dict, stem) -> list:
    """Save the study's figures as PNG files ``<stem>_<name>.png`` (matplotlib Agg backend).

    Parameters
    ----------
    results : dict
        From :func:`~rieszflow.studies.token_flow.study.run_token_flow_study`.
    stem : str or pathlib.Path
        Path prefix (the HDF5 file without its suffix).

    Returns
    -------
    list of pathlib.Path
        Files written.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    stem = Path(stem)
    files = []

    def save(fig, name):
        path = stem.with_name(f"{stem.name}_{name}.png")
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        files.append(path)

    g = results.get("grid")
    if g is not None:
        nb, nd = len(g["betas"]), len(g["dims"])
        fig, axes = plt.subplots(2, nd, figsize=(4 * nd, 6.5), squeeze=False)
        for jd, d in enumerate(g["dims"]):
            for ib, beta in enumerate(g["betas"]):
                emax = math.exp(beta) / (2 * beta)
                color = plt.cm.viridis(ib / max(1, nb - 1))
                for s in range(g["n_seeds"]):
                    axes[0, jd].plot(g["times"], g["energy"][ib, jd, s] / emax, color=color, lw=0.8,
                                     label=f"beta={beta:g}" if s == 0 else None)
                    axes[1, jd].plot(g["times"], g["clusters"][ib, jd, s], color=color, lw=0.8,
                                     drawstyle="steps-post")
            axes[0, jd].set_title(f"d = {d}: E_beta / max")
            axes[1, jd].set_title(f"d = {d}: clusters")
            axes[1, jd].set_yscale("log")
            axes[1, jd].set_xlabel("t")
        axes[0, 0].legend(fontsize=7)
        save(fig, "clustering")
    p = results.get("phase")
    if p is not None:
        fig, ax = plt.subplots(figsize=(6, 4))
        im = ax.pcolormesh(p["times"], p["betas"], p["fraction"], shading="auto", vmin=0, vmax=1)
        fig.colorbar(im, ax=ax, label="fraction of pairs clustered")
        ode = [r["ode"] for r in p["rows"]]
        ax.plot(ode, p["betas"], "w--", label="ODE gamma_beta = 1 - delta")
        ax.plot([r["crossing"] for r in p["rows"]], p["betas"], "r.", label="crossing (1/2)")
        ax.set_xlim(0, p["times"][-1])
        ax.set_xlabel("t")
        ax.set_ylabel("beta")
        ax.legend(fontsize=7, loc="upper left")
        save(fig, "phase")
    k = results.get("kernels")
    if k is not None:
        fig, ax = plt.subplots(figsize=(6, 4))
        for name, w1 in zip(k["names"], k["w1"]):
            ax.plot(k["times"], w1, marker=".", label=name)
        ax.set_yscale("log")
        ax.set_xlabel("t")
        ax.set_ylabel("W1(softmax flow, kernel flow)")
        ax.legend(fontsize=7)
        save(fig, "kernels")
    m = results.get("mean_field")
    if m is not None:
        fig, ax = plt.subplots(figsize=(6, 4))
        n = np.asarray(m["n"], dtype=float)
        for metric, style in (("exact", "-o"), ("sliced", "--s")):
            arr = m[f"w1_{metric}"]
            for it, t in enumerate(m["times"]):
                y = arr[:, :, it].mean(axis=1)
                ok = np.isfinite(y)
                if ok.any():
                    ax.loglog(n[ok], y[ok], style, label=f"{metric} t={t:g}", ms=4)
        ax.set_xlabel("N (compared with 4N)")
        ax.set_ylabel("W1")
        ax.legend(fontsize=7)
        save(fig, "mean_field")
    w = results.get("wendel")
    if w:
        fig, ax = plt.subplots(figsize=(6, 4))
        idx = np.arange(len(w))
        ax.errorbar(idx, [r["p_mc"] for r in w], yerr=[3 * r["se"] for r in w], fmt="o", label="Monte Carlo +-3 SE")
        ax.plot(idx, [r["p"] for r in w], "kx", label="Wendel")
        ax.set_xticks(idx, [f"({r['n']},{r['d']})" for r in w])
        ax.set_xlabel("(n, d)")
        ax.set_ylabel("P(open hemisphere)")
        ax.legend(fontsize=7)
        save(fig, "wendel")
    return files
