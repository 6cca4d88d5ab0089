"""The tables of the mean-field bias study: the replica statistic, the plain estimator's tables and
the slope fits that the antithetic tables (:mod:`~rieszflow.studies.mean_field.antithetic`) share.

:func:`bias_estimate` is the one home of the replica-mean statistic (mean, standard error, standard
deviation of one replica); :func:`bias_table` and :func:`format_bias_tables` read a file of
``rieszflow mean-field --preset bias`` (:mod:`~rieszflow.studies.mean_field.bias`) and fit the
decay exponents with :func:`rieszflow.engine.stats.power_law_fit` (|bias| ~ N^p, expected -1) and
:func:`rieszflow.engine.stats.fit_decay` (W1, expected -1/2), the exponent's Monte Carlo SE by
redrawing the rows within their standard errors.

References
----------
paper 000, Thm 1 / Thm 4, eq. (4.3)-(4.5), (E.2).
"""
from __future__ import annotations

import json
import math

import numpy as np

from rieszflow.engine.stats import fit_decay, power_law_fit
from rieszflow.studies.mean_field.bias import OBSERVABLES, Z_DECIDE

__all__ = ["bias_estimate", "bias_table", "format_bias_tables"]


def bias_estimate(values, reference) -> tuple:
    """Replica-mean bias, its standard error and the standard deviation of one replica.

    Parameters
    ----------
    values : array_like, shape (R,)
        ``f(mu_N)`` of R independent replicas (NaN entries, batches not run, are dropped).
    reference : float
        The limit value ``f(rho_t)``.

    Returns
    -------
    bias, se, sd, r : float, float, float, int
        ``mean(values) - reference``, ``sd / sqrt(r)``, the sample standard deviation (ddof 1)
        and the number of finite replicas.

    Raises
    ------
    ValueError
        With fewer than 2 finite values.
    """
    v = np.asarray(values, dtype=np.float64).ravel()
    v = v[np.isfinite(v)]
    if v.size < 2:
        raise ValueError(f"values must hold at least 2 finite replicas, got {v.size}")
    sd = float(np.std(v, ddof=1))
    return float(v.mean() - reference), sd / math.sqrt(v.size), sd, int(v.size)


def _w1_slope(n, w1):
    """(slope, SE) of W1 against N fitted by :func:`fit_decay`; NaN, NaN where it cannot be fitted."""
    try:
        wf = fit_decay(n, w1)
    except ValueError:
        return math.nan, math.nan
    return wf.slope, wf.slope_se


def _fit_lines(fits, quantity: str, w1: str = "W1 ~ N^p, expected -1/2") -> list:
    """The 'fitted exponents' lines of a bias table (``quantity``: what is fitted, e.g. ``|bias|``;
    ``w1``: what the W1 column is and its expected slope)."""
    out = [f"fitted exponents ({quantity} ~ N^p, expected -1; {w1}), main rows:"]
    for fi in fits:
        out.append(f"  t={fi['t']:g} {fi['obs']:>6}: p = {fi['slope']:+.3f} +- {fi['slope_se']:.3f} (OLS) "
                   f"+- {fi['slope_mc_se']:.3f} (MC), {fi['n_decided']}/{fi['n_rows']} rows at |z| >= "
                   f"{Z_DECIDE:g}, sign {fi['sign']} | W1: p = {fi['w1_slope']:+.3f} +- {fi['w1_slope_se']:.3f}")
    trends = [fi for fi in fits if fi.get("trend") is not None]
    if trends:
        out.append("b against log10 N (weighted line; an O(1/N) bias has a constant b: drift 0 and "
                   "chi2 ~ dof; a (log N)/N term drifts), main rows:")
    for fi in trends:
        tr = fi["trend"]
        tail = fi.get("trend_tail")
        out.append(f"  t={fi['t']:g} {fi['obs']:>6}: drift {tr.slope:+.3f} +- {tr.slope_se:.3f} per decade "
                   f"(z = {tr.z:+.1f}); constant b = {tr.mean:+.4f} +- {tr.mean_se:.4f}: chi2 = {tr.chi2:.1f} "
                   f"on {tr.dof} dof, p = {tr.p_constant:.2g}"
                   + (f" | without the smallest N: drift {tail.slope:+.3f} +- {tail.slope_se:.3f} "
                      f"(z = {tail.z:+.1f}), p = {tail.p_constant:.2g}" if tail is not None else ""))
    return out + [""]


def _slope_row(t, obs, n, bias, se, n_rows, w1_slope, w1_slope_se) -> dict:
    """One row of the slope table: the power-law fit of |bias| against N, its two SEs, the rows
    decided at |z| >= Z_DECIDE and their sign, beside W1's slope (plain and antithetic estimators)."""
    fit = power_law_fit(n, np.abs(bias))
    return {"t": float(t), "obs": obs, "slope": fit.slope, "slope_se": fit.slope_se,
            "slope_mc_se": _slope_mc_se(n, bias, se), "n_rows": n_rows,
            "n_decided": int(np.sum(np.abs(bias) >= Z_DECIDE * se)),
            "sign": "+" if (bias > 0).all() else "-" if (bias < 0).all() else "mixed",
            "w1_slope": w1_slope, "w1_slope_se": w1_slope_se}


def _slope_mc_se(n, bias, se, rng_seed=0, draws=2000):
    """SE of the OLS slope of log|bias| on log N from the Monte Carlo errors alone (parametric bootstrap)."""
    rng = np.random.default_rng(rng_seed)
    b = bias[None, :] + se[None, :] * rng.standard_normal((draws, bias.size))
    ln = np.log(n)
    lx = ln - ln.mean()
    with np.errstate(divide="ignore"):
        ly = np.log(np.abs(b))
    ok = np.isfinite(ly).all(axis=1)
    slopes = (ly[ok] - ly[ok].mean(axis=1, keepdims=True)) @ lx / (lx @ lx)
    return float(np.std(slopes, ddof=1)) if slopes.size > 1 else math.nan


def bias_table(ds, problem: str) -> dict:
    """Per row and time: N, R, bias, SE, z, R_need and W1 of every observable; fitted slopes.

    Parameters
    ----------
    ds : xarray.Dataset
        A bias study file (:func:`~rieszflow.engine.storage.open_run`).
    problem : str
        Problem name.

    Returns
    -------
    dict
        ``rows`` (list of dicts: label, N, R, eta, t, obs, bias, se, sd, z, r_need, w1, w1_se, wall),
        ``fits`` (per (t, obs) with t > 0: bias slope, its OLS SE and its Monte Carlo SE over the
        main rows (not the step check); per t > 0: the W1 slope and SE), ``floors``.
    """
    p = problem
    f = np.asarray(ds[f"{p}_f"].values)
    w1 = np.asarray(ds[f"{p}_w1"].values)
    wall = np.asarray(ds[f"{p}_wall"].values)
    ref = np.asarray(ds[f"{p}_f_pde"].values)
    n_arr, r_arr = np.asarray(ds[f"{p}_N"].values), np.asarray(ds[f"{p}_R"].values)
    etas = np.asarray(ds[f"{p}_eta"].values)
    times = np.asarray(ds[f"{p}_time"].values)
    labels = ds[f"{p}_row"].attrs["long_name"].split(": ", 1)[1].split("; ")
    main = [i for i, e in enumerate(etas) if e == etas[0]]
    rows, fits = [], []
    for ir, lab in enumerate(labels):
        for it, t in enumerate(times):
            ww = w1[ir, :, it]
            ww = ww[np.isfinite(ww)]
            for io, o in enumerate(OBSERVABLES):
                vals = f[ir, :, it, io]
                if np.isfinite(vals).sum() < 2:
                    continue
                b, se, sd, r = bias_estimate(vals, ref[it, io])
                rows.append({"label": lab, "N": int(n_arr[ir]), "R": r, "R_planned": int(r_arr[ir]),
                             "eta": float(etas[ir]), "t": float(t), "obs": o, "bias": b, "se": se, "sd": sd,
                             "z": b / se if se > 0 else math.nan,
                             "r_need": Z_DECIDE ** 2 * se * se * r / (b * b) if b != 0 else math.inf,
                             "w1": float(ww.mean()) if ww.size else math.nan,
                             "w1_se": float(ww.std(ddof=1) / math.sqrt(ww.size)) if ww.size > 1 else math.nan,
                             "wall": float(np.nansum(wall[ir]))})
    for it, t in enumerate(times):
        if t == 0:
            continue
        done = [i for i in main if np.isfinite(f[i, :, it, 0]).sum() >= 2]
        if len(done) < 2:
            continue
        nn = n_arr[done].astype(float)
        w_slope, w_se = _w1_slope(nn, w1[done, :, it])
        for io, o in enumerate(OBSERVABLES):
            est = [bias_estimate(f[i, :, it, io], ref[it, io]) for i in done]
            b = np.array([e[0] for e in est])
            se = np.array([e[1] for e in est])
            if (b == 0).any():
                continue
            fits.append(_slope_row(t, o, nn, b, se, len(done), w_slope, w_se))
    floors = {k: np.asarray(ds[f"{p}_{k}"].values) for k in ("f_dt_floor", "f_grid_floor")}
    return {"rows": rows, "fits": fits, "floors": floors, "times": times}


def _problem_names(ds) -> list:
    """The problems of a bias study file (its ``problems`` attribute, JSON text or a list)."""
    probs = ds.attrs["problems"]
    return json.loads(probs) if isinstance(probs, str) else list(probs)


def format_bias_tables(ds) -> str:
    """The text tables of a bias study file (``rieszflow report`` shows them).

    Parameters
    ----------
    ds : xarray.Dataset

    Returns
    -------
    str
    """
    out = []
    for p in _problem_names(ds):
        tab = bias_table(ds, p)
        out.append(f"== {p}: bias of f(mu_N(t)) against the PDE, replica mean +- SE (z = bias/SE; "
                   f"R_need = {Z_DECIDE:g}^2 SE^2 R / bias^2 replicas for |z| >= {Z_DECIDE:g}; N*bias is "
                   f"constant for an O(1/N) bias) ==")
        out.append(f"{'row':>14} {'t':>5} {'obs':>6} {'R':>6} {'bias':>10} {'SE':>9} {'N*bias':>9} {'z':>6} "
                   f"{'R_need':>8} {'W1':>9} {'W1 SE':>8}")
        for r in tab["rows"]:
            out.append(f"{r['label']:>14} {r['t']:>5g} {r['obs']:>6} {r['R']:>6d} {r['bias']:>10.3e} "
                       f"{r['se']:>9.2e} {r['N'] * r['bias']:>9.3f} {r['z']:>6.1f} {r['r_need']:>8.3g} {r['w1']:>9.3e} {r['w1_se']:>8.1e}")
        fl = tab["floors"]
        for it, t in enumerate(tab["times"]):
            out.append(f"PDE error in f at t={t:g} (m1, m2, energy): dt {', '.join(f'{v:.1e}' for v in fl['f_dt_floor'][it])}"
                       f"; grid {', '.join(f'{v:.1e}' for v in fl['f_grid_floor'][it])}")
        out += _fit_lines(tab["fits"], "|bias|")
    return "\n".join(out)
