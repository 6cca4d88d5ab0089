"""The antithetic particle-count estimator of the O(1/N) mean-field bias (``--preset bias-large``).

Why
---
The plain estimator of :mod:`~rieszflow.studies.mean_field.bias` needs
:math:`R \\ge z^2 N \\sigma_f^2 / b_f^2` replicas, linear in N, so its cost grows like
:math:`N R \\propto N^2` particle updates: about 1e13 at N = 1e6. The N-dependence itself can be
estimated without the PDE and with a variance that falls like the bias.

The estimator
-------------
One *antithetic triple* is a system of 2N particles and two systems of N particles that start
from exactly the first and the second half of the 2N system's initial positions (i.i.d. draws of
:math:`\\rho_0`) and take exactly the same Brownian increments as those halves at every
Euler-Maruyama step (synchronous coupling; :func:`~rieszflow.studies.mean_field.bias.bias_batch_task`
with ``coupled=True`` steps all three with one noise draw). Each system alone is the ordinary
N- (or 2N-) particle system. Per triple,

.. math::

    \\Delta = f(\\mu_{2N}(t)) - \\tfrac12\\big(f(\\mu_N^{(1)}(t)) + f(\\mu_N^{(2)}(t))\\big),
    \\qquad D_N = \\mathbb{E}\\,\\Delta = -\\frac{b_f(t)}{2N} + O(N^{-2})

when :math:`\\mathbb{E} f(\\mu_N(t)) = f(\\rho_t) + b_f(t)/N + O(N^{-2})`: the limit
:math:`f(\\rho_t)` cancels, so neither the PDE nor its floors enter, and the step's own bias is
common to all three systems at leading order. The estimate is the mean of R independent triples,
its SE the sample standard deviation over :math:`\\sqrt R`, and :math:`\\hat b = -2N\\hat D_N`.

Why the variance is O(1/N^2)
----------------------------
Write :math:`G_k = \\sqrt N(\\mu^{(k)} - \\rho)` for the fluctuation fields of the two halves. To
first order the 2N system feels the field :math:`(G_1 + G_2)/(2\\sqrt N)` and the N system k
feels :math:`G_k/\\sqrt N`, so a particle of half 1 moves in the 2N system by
:math:`L[(G_2 - G_1)/(2\\sqrt N)]` against its twin, and a particle of half 2 by the opposite;
summed over both halves these first-order terms cancel, and what is left of :math:`\\Delta`
is quadratic in the fluctuations, :math:`O(1/N)`. So :math:`\\mathrm{sd}\\,\\Delta = O(1/N)`,
like :math:`D_N`: the ratio :math:`|D_N|/\\mathrm{sd}\\,\\Delta` and with it the R needed for a
given z do not grow with N (the plain estimator's R grows like N). For linear f (the moments) at
t = 0, and for non-interacting particles at every t, :math:`\\Delta = 0` exactly (the 2N system
is then the union of the two N systems); for the interaction energy at t = 0 (i.i.d. draws),
:math:`\\mathbb{E} f(\\mu_N) = (1 - 1/N)\\mathcal{E}_{\\rm int}(\\rho_0)` exactly, so
:math:`D_N = \\mathcal{E}_{\\rm int}(\\rho_0)/(2N)`. :func:`antithetic_table` reports
:math:`N\\,\\mathrm{sd}\\,\\Delta` per N, which should be about constant.

W1 is reported beside it: :math:`W_1(\\mu_N, \\rho_t)` of the first N system of the first
``w1_replicas`` triples against the PDE (expected slope -1/2 in d = 1, 2); for a 3-D problem (no
PDE), the exact :math:`W_1` between the two N systems of a triple, two independent N-particle
systems (expected slope -1/3 in d = 3, the sampling rate of Fournier and Guillin 2015).

References
----------
A.-L. Haji-Ali and R. Tempone, Multilevel and Multi-index Monte Carlo methods for the
McKean-Vlasov equation, Statistics and Computing 28 (2018) 923-935, doi:10.1007/s11222-017-9771-5
(their partitioning estimator: the 2N-particle system against its two halves run as N-particle
systems with the same initial positions and Brownian paths).
L. Szpruch, S. Tan and A. Tse, Iterative multilevel particle approximation for McKean-Vlasov
SDEs, Ann. Appl. Probab. 29 (2019) 2230-2265, doi:10.1214/18-AAP1452 (a related multilevel
method over the number of particles; not the estimator used here).
"""
from __future__ import annotations

import json
import math

import numpy as np

from rieszflow.engine.stats import linear_trend
from rieszflow.studies.mean_field.bias import OBSERVABLES, W1_EXACT_MAX_N
from rieszflow.studies.mean_field.bias_tables import (_fit_lines, _problem_names, _slope_row, _w1_slope,
                                                     bias_estimate)

__all__ = ["antithetic_samples", "antithetic_estimate", "antithetic_table", "format_antithetic_tables"]


def antithetic_samples(f2n, fn) -> np.ndarray:
    """Per-triple antithetic differences :math:`f(\\mu_{2N}) - (f(\\mu_N^{(1)}) + f(\\mu_N^{(2)}))/2`.

    Parameters
    ----------
    f2n : array_like, shape (R, ...), float64
        Observables of the 2N-particle system of each triple.
    fn : array_like, shape (R, 2, ...), float64
        Observables of the two coupled N-particle systems of each triple.

    Returns
    -------
    ndarray, shape (R, ...), float64
        The differences (NaN where a triple was not run).

    Raises
    ------
    ValueError
        If the shapes do not match (``fn`` must have a half axis of length 2 after the triple axis).
    """
    f2n = np.asarray(f2n, dtype=np.float64)
    fn = np.asarray(fn, dtype=np.float64)
    if fn.ndim != f2n.ndim + 1 or fn.shape[1] != 2 or fn.shape[:1] + fn.shape[2:] != f2n.shape:
        raise ValueError(f"fn must have shape (R, 2, ...) matching f2n (R, ...), got {fn.shape} and {f2n.shape}")
    return f2n - 0.5 * (fn[:, 0] + fn[:, 1])


def antithetic_estimate(samples, n: int) -> dict:
    """:math:`\\hat D_N`, its SE, :math:`N\\,\\mathrm{sd}`, z and :math:`\\hat b = -2N\\hat D_N` from triples.

    Parameters
    ----------
    samples : array_like, shape (R,)
        Per-triple differences (:func:`antithetic_samples`); NaN entries (not run) are dropped.
    n : int
        N, the size of the two smaller systems (>= 1).

    Returns
    -------
    dict
        ``d`` (mean), ``se`` (sd / sqrt(R)), ``sd_n`` (N times the sample sd, ddof 1), ``z``
        (d / se; NaN when se is 0, as for the moments at t = 0 where every difference is 0 up to
        rounding), ``b`` (-2 N d) and ``b_se`` (2 N se), ``r`` (finite triples).

    Raises
    ------
    ValueError
        With fewer than 2 finite triples or n < 1.
    """
    if n < 1:
        raise ValueError(f"n={n} must be >= 1")
    d, se, sd, r = bias_estimate(samples, 0.0)
    exact = se <= 1e-12 * max(1.0, abs(d))            # every difference equal: rounding only
    return {"d": d, "se": se, "sd_n": n * sd, "z": math.nan if exact else d / se, "b": -2.0 * n * d,
            "b_se": 2.0 * n * se, "r": r}


def antithetic_table(ds, problem: str) -> dict:
    """Per row, time and observable: the antithetic estimate, the plain bias and W1; fitted slopes.

    Parameters
    ----------
    ds : xarray.Dataset
        A bias study file written with ``estimator = "antithetic"``.
    problem : str
        Problem name.

    Returns
    -------
    dict
        ``rows`` (list of dicts: label, N, R, eta, t, obs, the keys of :func:`antithetic_estimate`,
        ``plain`` and ``plain_se`` (N times the plain bias of the N systems against the PDE and its
        SE), ``w1``, ``w1_se``, ``wall`` (summed wall-clock seconds of the row's batch tasks)), ``fits`` (per (t, obs) with t > 0 over the main rows
        with at least 2 triples: slope of :math:`|\\hat D_N| \\sim N^p` with its OLS SE
        (:func:`~rieszflow.engine.stats.power_law_fit`) and its Monte Carlo SE, the W1 slope
        (:func:`~rieszflow.engine.stats.fit_decay`), and ``trend``: the weighted straight line
        of :math:`\\hat b` against :math:`\\log_{10} N` with the chi-square of a constant b
        (:func:`~rieszflow.engine.stats.linear_trend`; an O(1/N) bias has a constant b, a
        :math:`(\\log N)/N` term a drift per decade), and ``trend_tail``: the same without the
        smallest N (None with fewer than 3 rows)), ``times``, ``not_run`` (labels of rows with
        fewer than 2 triples).
    """
    p = problem
    f2n = np.asarray(ds[f"{p}_f2n"].values)
    fn = np.asarray(ds[f"{p}_f"].values)
    w1 = np.asarray(ds[f"{p}_w1"].values)
    wall = np.asarray(ds[f"{p}_wall"].values)
    ref = np.asarray(ds[f"{p}_f_pde"].values)
    n_arr = np.asarray(ds[f"{p}_N"].values)
    etas = np.asarray(ds[f"{p}_eta"].values)
    times = np.asarray(ds[f"{p}_time"].values)
    labels = ds[f"{p}_row"].attrs["long_name"].split(": ", 1)[1].split("; ")
    main = [i for i, e in enumerate(etas) if e == etas[0]]
    rows, fits, not_run = [], [], []
    for ir, lab in enumerate(labels):
        n = int(n_arr[ir])
        if np.isfinite(f2n[ir, :, 0, 0]).sum() < 2:
            not_run.append(lab)
            continue
        for it, t in enumerate(times):
            ww = w1[ir, :, it]
            ww = ww[np.isfinite(ww)]
            dd = antithetic_samples(f2n[ir, :, it], fn[ir, :, :, it])
            for io, o in enumerate(OBSERVABLES):
                est = antithetic_estimate(dd[:, io], n)
                plain = bias_estimate(fn[ir, :, :, it, io].ravel(), ref[it, io])
                rows.append({"label": lab, "N": n, "eta": float(etas[ir]), "t": float(t), "obs": o, **est,
                             "R": est["r"], "plain": n * plain[0], "plain_se": n * plain[1],
                             "w1": float(ww.mean()) if ww.size else math.nan,
                             "w1_se": float(ww.std(ddof=1) / math.sqrt(ww.size)) if ww.size > 1 else math.nan,
                             "wall": float(np.nansum(wall[ir]))})
    for it, t in enumerate(times):
        if t == 0:
            continue
        done = [i for i in main if np.isfinite(f2n[i, :, it, 0]).sum() >= 2]
        if len(done) < 2:
            continue
        nn = n_arr[done].astype(float)
        w_slope, w_se = _w1_slope(nn, w1[done, :, it])
        for io, o in enumerate(OBSERVABLES):
            est = [antithetic_estimate(antithetic_samples(f2n[i, :, it], fn[i, :, :, it])[:, io], int(n_arr[i]))
                   for i in done]
            d = np.array([e["d"] for e in est])
            se = np.array([e["se"] for e in est])
            if (d == 0).any() or not all(np.isfinite(e["z"]) for e in est):
                continue
            row = _slope_row(t, o, nn, d, se, len(done), w_slope, w_se)
            lx, bb, bs = np.log10(nn), [e["b"] for e in est], [e["b_se"] for e in est]
            row["trend"] = linear_trend(lx, bb, bs)
            # without the smallest N, where a next-order O(1/N^2) term of D_N weighs most
            row["trend_tail"] = linear_trend(lx[1:], bb[1:], bs[1:]) if len(done) >= 3 else None
            fits.append(row)
    return {"rows": rows, "fits": fits, "times": times, "not_run": not_run}


def _problem_line(ds, name: str) -> str:
    """One line of problem ``name``'s kernel and step, from the configuration the file stores."""
    from rieszflow.config import unwrap_config

    try:
        q = next(q for q in unwrap_config(json.loads(ds.attrs.get("config")))["problems"] if q["name"] == name)
        return (f"problem: d = {len(q['lo'])}, s = {q['s']:g}, softening = {q.get('softening', 0.0):g}, "
                f"lam = {q['lam']:g}, beta = {q['beta']:g}; step {q.get('integrator', 'euler')}, "
                f"eta = {q['eta']:g}")
    except (TypeError, ValueError, KeyError, StopIteration):
        return "problem: (no stored configuration)"


def format_antithetic_tables(ds) -> str:
    """The text tables of an antithetic bias study file (``rieszflow report`` shows them).

    Parameters
    ----------
    ds : xarray.Dataset

    Returns
    -------
    str
    """
    out = []
    for p in _problem_names(ds):
        tab = antithetic_table(ds, p)
        out.append(f"== {p}: antithetic estimate D_N = E[f(mu_2N) - (f(mu_N^1) + f(mu_N^2))/2] over R triples "
                   f"(z = D/SE; b = -2 N D, constant for an O(1/N) bias; N*sd = N times the sd of one "
                   f"triple, constant if sd = O(1/N); plain = N (mean f(mu_N) - f(rho_t)) of the same N "
                   f"systems against the PDE) ==")
        out.append(_problem_line(ds, p))
        out.append(f"{'row':>15} {'t':>4} {'obs':>6} {'R':>4} {'D_N':>10} {'SE':>9} {'z':>6} {'N*sd':>7} "
                   f"{'b':>8} {'b SE':>7} {'plain':>8} {'plain SE':>8} {'W1':>9} {'W1 SE':>8} {'wall s':>7}")
        for r in tab["rows"]:
            z = f"{r['z']:>6.1f}" if np.isfinite(r["z"]) else f"{'exact':>6}"
            out.append(f"{r['label']:>15} {r['t']:>4g} {r['obs']:>6} {r['R']:>4d} {r['d']:>10.3e} {r['se']:>9.2e} "
                       f"{z} {r['sd_n']:>7.3f} {r['b']:>8.4f} {r['b_se']:>7.4f} {r['plain']:>8.3f} "
                       f"{r['plain_se']:>8.3f} {r['w1']:>9.3e} {r['w1_se']:>8.1e} {r['wall']:>7.0f}")
        if tab["not_run"]:
            out.append(f"rows with fewer than 2 triples (not run, or cut short): {', '.join(tab['not_run'])}")
        ref = np.asarray(ds[f"{p}_f_pde"].values)
        e0 = float(ref[0, OBSERVABLES.index("energy")])
        no_pde = not np.isfinite(ref[1:]).any()           # a 3-D problem: no PDE, rho_0 in closed form
        out.append(f"check at t = 0 (i.i.d. draws): b(energy) = -E_int(rho_0) = {-e0:.4f} exactly "
                   + ("(closed form of the normal law rho_0; no PDE in 3-D, so plain = NaN)" if no_pde
                      else "(PDE grid quadrature)") + "; b(m1) = b(m2) = 0 exactly")
        out += _fit_lines(tab["fits"], "|D_N|",
                          "W1 between the two N systems of a triple ~ N^p, expected -1/3 in d = 3 "
                          f"(exact transport, N <= {W1_EXACT_MAX_N})" if no_pde else "W1 ~ N^p, expected -1/2")
    return "\n".join(out)
