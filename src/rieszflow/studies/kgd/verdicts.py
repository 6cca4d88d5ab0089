"""Verdicts on paper 003's claims of Tables 3-6 and Thm 6.3, computed from the measured sweeps.

Every claim is judged by :func:`judge` (``z = (measured - printed) / SE`` against ``Z_CRIT``); the
printed values' own uncertainty enters the SE (Tables 3, 4 and the dipole: the printed +- read as a
std over 100 repetitions; Table 5: the rounding of a value printed to 3 decimals, :func:`rounding_sd`).
Thm 6.3 is judged as the bound it states, ``|gap| >= c KGD / lam``, along a sequence of lam
decreasing toward 0 (:func:`thm63_rows`).

References
----------
Z. Peng & Z. Yi, "Kernel Geometry Divergence: A Spectral Theory of Random-Feature Attention
Kernels", doi:10.20944/preprints202606.0665.v1, Tables 3-7, Thms 6.1, 6.3, section 8.2.
"""
from __future__ import annotations

import math

import numpy as np

from rieszflow.config import config_int
from rieszflow.theory.kgd import spectral as sp
from rieszflow.studies.kgd.study import (PAPER_C63, PAPER_DIPOLE, PAPER_TABLE3, PAPER_TABLE4, PAPER_TABLE5,
                                         PAPER_TABLE5_DECIMALS, PAPER_TABLE5_REPS, PAPER_TABLE6, _CONVENTIONS,
                                         KgdConfig, attention_summary, best_target_gap, krr_summary,
                                         paper_table4_ratio_check, sequence_summary)

__all__ = ["Z_CRIT", "judge", "rounding_sd", "thm63_rows", "format_thm63", "verdicts", "format_verdicts"]


#: Critical |z| of every verdict: a measured value is "reproduced" when it lies within Z_CRIT
#: standard errors of the printed value and more than Z_CRIT standard errors from 0 (the claimed sign is
#: resolved); "not reproduced" when it lies more than Z_CRIT SE from the printed value; otherwise
#: "inconclusive".
Z_CRIT = 3.0


def _paper_se(se, paper_pm=None, n_paper=100):
    """SE of ``measured - printed``: the measured SE combined with the printed +- read as a std of
    ``n_paper`` repetitions (``paper_pm=None``: the printed value taken as exact)."""
    return se if paper_pm is None else math.hypot(se, paper_pm / math.sqrt(n_paper))


def rounding_sd(decimals):
    """Standard deviation of the rounding error of a value printed to ``decimals`` decimals.

    A value printed to k decimals stands for any true value within +-0.5 10^-k of it; read as
    uniform on that interval, the error has standard deviation ``0.5 10^-k / sqrt(3)``.

    Parameters
    ----------
    decimals : int
        Decimals printed, ``>= 0``.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        If ``decimals`` is not an integer ``>= 0``.

    References
    ----------
    The variance of the uniform law on an interval of length w is w^2 / 12.
    """
    k = config_int("decimals", decimals, minimum=0)
    return 0.5 * 10.0 ** (-k) / math.sqrt(3.0)


def judge(measured, se, printed=None, *, z_crit=Z_CRIT):
    """Label one measured value against a printed one (or its claimed sign) by standard errors.

    Parameters
    ----------
    measured : float
        The measured mean.
    se : float
        Its standard error (> 0); combine it with the printed value's own uncertainty first
        (``_paper_se``) when there is one.
    printed : float, optional
        The paper's value. None: the claim is only the sign ``measured > 0``.
    z_crit : float
        Critical |z|.

    Returns
    -------
    label : {"reproduced", "not reproduced", "inconclusive"}
    kind : {"", "reversed", "different"}
        For "not reproduced": "reversed" when the measured value is resolved (|measured/se| > z_crit)
        with the sign opposite to the claim, else "different".
    z : float
        ``(measured - printed) / se`` (``measured / se`` for a sign claim).
    z0 : float
        ``measured / se``.

    Raises
    ------
    ValueError
        If ``se`` is not a positive finite number.

    References
    ----------
    Kernel Geometry Divergence (paper 003 of this project, docs/kgd.md): Tables 3-6.
    """
    if not (np.isfinite(se) and se > 0):
        raise ValueError(f"se={se!r}: a standard error must be a positive finite number")
    z0 = measured / se
    sign = 1.0 if printed is None else float(np.sign(printed))
    reversed_ = sign * z0 < -z_crit
    if printed is None:
        if z0 > z_crit:
            return "reproduced", "", z0, z0
        return ("not reproduced", "reversed", z0, z0) if reversed_ else ("inconclusive", "", z0, z0)
    z = (measured - printed) / se
    if abs(z) > z_crit:
        return "not reproduced", "reversed" if reversed_ else "different", z, z0
    return ("reproduced" if sign * z0 > z_crit else "inconclusive"), "", z, z0


def _label(results, what):
    """Combine several ``(name, judge(...))`` into one verdict text built from the measured signs."""
    zc = f"z_crit = {Z_CRIT:g}"
    bad = [(n, j) for n, j in results if j[0] == "not reproduced"]
    unres = [(n, j) for n, j in results if j[0] == "inconclusive"]
    zs = ", ".join(f"{n}: z = {j[2]:+.1f}" for n, j in results)
    if bad:
        rev = [n for n, j in bad if j[1] == "reversed"]
        diff = [n for n, j in bad if j[1] == "different"]
        parts = []
        if rev:
            parts.append(f"reversed at {', '.join(rev)} (sign opposite to the claim, |z0| > {Z_CRIT:g})")
        if diff:
            parts.append(f"different at {', '.join(diff)}")
        parts[-1] += f" (|z| > {Z_CRIT:g})"
        ok = [n for n, j in results if j[0] == "reproduced"]
        if ok:
            parts.append(f"within {Z_CRIT:g} SE of the printed value and resolved from 0 only at {', '.join(ok)}")
        return f"not reproduced ({'; '.join(parts)}; {what}; {zs})"
    if unres:
        return (f"inconclusive (|z| <= {Z_CRIT:g} from the printed value but not resolved from 0 at "
                f"{', '.join(n for n, _ in unres)}; {zs})")
    return f"reproduced ({zs}; {zc})"


def thm63_rows(ds, convention="A", variant="P", noise=0.1, c=PAPER_C63):
    """Thm 6.3 against lam: measured ``|gap| / (KGD / lam)`` of the dipole target beside ``c``.

    Thm 6.3 claims ``|E R_1 - E R_2| >= (c / lam) KGD - O(n^-1/2)`` for some target of unit norm;
    the paper's c is 0.07. Every population gap lies in [-1, 1] (:func:`best_target_gap`), so the
    claim fails for every target once ``c KGD / lam > 1``, and for the dipole earlier.

    Parameters
    ----------
    ds : xarray.Dataset
        Merged ``krr_dipole`` sweep (any ``lam`` grid).
    convention : {"A", "B"}
    variant : str
    noise : float
        Label noise sigma (passed to :func:`krr_summary`).
    c : float, default PAPER_C63
        The constant the claim is judged against.

    Returns
    -------
    list of dict
        One per (d, lam), lam decreasing: the :func:`krr_summary` keys and ``kgd``, ``ratio``
        (``|mean| / (KGD / lam)``), ``ratio_se`` (``se / (KGD / lam)``), ``pop_ratio`` (the dipole's
        population gap on the same scale), ``best_ratio`` and ``best_ell`` (the best unit target's
        population gap on the same scale, and its degree), ``status`` ("holds": ``ratio - 3 SE > c``;
        "fails": ``ratio + 3 SE < c``; else "unresolved").
    """
    out = []
    for r in sorted(krr_summary(ds, "dipole", convention, variant, noise), key=lambda r: (r["d"], -r["lam"])):
        kgd = sp.kgd_closed_form(r["d"], variant)
        scale = kgd / r["lam"]
        best, ell = best_target_gap(r["d"], r["lam"], variant)
        ratio, rse = abs(r["mean"]) / scale, r["se"] / scale
        status = ("holds" if ratio - Z_CRIT * rse > c else "fails" if ratio + Z_CRIT * rse < c
                  else "unresolved")
        out.append(dict(r, kgd=kgd, ratio=ratio, ratio_se=rse, pop_ratio=abs(r["population"]) / scale,
                        best_ratio=best / scale, best_ell=ell, status=status))
    return out


def format_thm63(merged, cfg: KgdConfig) -> str:
    """The Thm 6.3 table along lam (empty when the dipole sweep is absent).

    Parameters
    ----------
    merged : dict
        Sweep name -> merged dataset.
    cfg : KgdConfig

    Returns
    -------
    str
    """
    if "krr_dipole" not in merged:
        return ""
    out = []
    rows = thm63_rows(merged["krr_dipole"], cfg.krr_convention, cfg.variant, cfg.noise)
    out.append(f"Thm 6.3 as lam -> 0 (dipole target, convention {cfg.krr_convention}; claim |gap| >= c KGD/lam "
               f"with the paper's c = {PAPER_C63}; ratio = |gap|/(KGD/lam); best target = max over degrees l "
               f"of the population |gap|, which is <= 1)")
    out.append("     d      lam  gap (SE)             ratio (SE)          population ratio  "
               "best-target ratio (l)  status")
    for r in rows:
        out.append(f"  {r['d']:4d}  {r['lam']:7.0e}  {r['mean']:+.5f} ({r['se']:.5f})  "
                   f"{r['ratio']:.5f} ({r['ratio_se']:.5f})  {r['pop_ratio']:.5f}           "
                   f"{r['best_ratio']:.5f} ({r['best_ell']})        {r['status']}")
    return "\n".join(out)


def verdicts(merged, cfg: KgdConfig) -> list:
    """Verdicts on the paper's claims of Tables 3-6 from the measured sweeps (labels computed).

    Every claim is judged by :func:`judge`: ``z = (measured - printed) / SE`` (``measured / SE`` for a
    sign claim) against ``Z_CRIT``; the label states the z values and the reason is built from the
    measured signs.

    Parameters
    ----------
    merged : dict
        Sweep name -> merged dataset.
    cfg : KgdConfig

    Returns
    -------
    list of tuple
        ``(claim, measured, label)`` with label starting with "reproduced", "not reproduced" or
        "inconclusive".
    """
    out = []
    conv = cfg.krr_convention
    what = "z = (measured - printed)/SE, SE combining the measured SE and the printed +- / sqrt(100)"
    if "krr_quadratic" in merged:
        rows = krr_summary(merged["krr_quadratic"], "quadratic", conv, cfg.variant, cfg.noise)
        t3 = [r for r in rows if r["d"] == 32 and r["lam"] in PAPER_TABLE3]
        if t3:
            res = [(f"lam={r['lam']:g}", judge(r["mean"], _paper_se(r["se"], PAPER_TABLE3[r["lam"]][1]),
                                                PAPER_TABLE3[r["lam"]][0])) for r in t3]
            meas = ", ".join(f"lam={r['lam']:g}: {r['mean']:+.5f}+-{r['se']:.5f} (paper "
                             f"+{PAPER_TABLE3[r['lam']][0]}; population {r['population']:+.2e})" for r in t3)
            out.append(("Table 3 KRR gap (d=32)", meas, _label(res, what)))
        t4 = [r for r in rows if r["lam"] == 0.1 and r["d"] in PAPER_TABLE4]
        if t4:
            res = [(f"d={r['d']}", judge(r["mean"], _paper_se(r["se"], PAPER_TABLE4[r["d"]][2]),
                                          PAPER_TABLE4[r["d"]][1])) for r in t4]
            meas = ", ".join(f"d={r['d']}: {r['mean']:+.5f}+-{r['se']:.5f}" for r in t4)
            bad = [d for d, v in paper_table4_ratio_check().items()
                   if all(abs(x / v[0] - 1) > 0.1 for x in v[1:])]
            lab = _label(res, what)
            if bad:
                lab += f"; the printed ratio column matches no reading of its own columns at d={bad}"
            out.append(("Table 4 gap across d (lam=0.1)", meas, lab))
        held = all(abs(r["mean"]) <= r["bound"] for r in rows)
        other = "B" if conv == "A" else "A"
        rows_o = krr_summary(merged["krr_quadratic"], "quadratic", other, cfg.variant, cfg.noise)
        bad_o = sum(abs(r["mean"]) > r["bound"] for r in rows_o)
        worst = max(abs(r["mean"]) / r["bound"] for r in rows)
        out.append((f"Thm 6.1 bound |gap| <= 2(|f|+s) KGD/lam (conv {conv})",
                    f"{len(rows)} configurations, largest |gap|/bound {worst:.3f}; conv {other}: "
                    f"violated in {bad_o} of {len(rows_o)}",
                    "holds (loose)" if held else "violated"))
    if "krr_dipole" in merged:
        rows = [r for r in krr_summary(merged["krr_dipole"], "dipole", conv, cfg.variant, cfg.noise)
                if r["d"] == 32 and r["lam"] == 0.1]
        if rows:
            r = rows[0]
            res = [("d=32", judge(r["mean"], _paper_se(r["se"], PAPER_DIPOLE[1]), PAPER_DIPOLE[0]))]
            out.append(("sec. 8.2 dipole gap +0.028 (d=32, lam=0.1)",
                        f"{r['mean']:+.4f}+-{r['se']:.4f} (population {r['population']:+.4f}; "
                        f"paper +{PAPER_DIPOLE[0]})", _label(res, what)))
        out.append(_thm63_verdict(thm63_rows(merged["krr_dipole"], conv, cfg.variant, cfg.noise)))
    if "attention" in merged:
        rows, slope = attention_summary(merged["attention"])
        rsd = rounding_sd(PAPER_TABLE5_DECIMALS)
        res = [(f"m={r['m']}", judge(r["delta_same"][0], math.hypot(r["delta_same"][2], rsd),
                                     PAPER_TABLE5[r["m"]][0]))
               for r in rows if r["m"] in PAPER_TABLE5]
        alt = [(r["delta_same"][0] - PAPER_TABLE5[r["m"]][0])
               / _paper_se(r["delta_same"][2], PAPER_TABLE5[r["m"]][1], PAPER_TABLE5_REPS)
               for r in rows if r["m"] in PAPER_TABLE5]
        last = rows[-1]
        ratio = last["delta_same"][0] / last["floor"]
        fall = rows[0]["delta_same"][0] / last["delta_same"][0]
        pred = math.sqrt(last["m"] / rows[0]["m"])
        why = (f"Delta(m={rows[0]['m']})/Delta(m={last['m']}) = {fall:.2f} (C/sqrt(m) gives {pred:.2f}); "
               f"Delta/floor = {ratio:.2f} at m={last['m']}; z = (measured - printed)/SE, SE combining the "
               f"measured SE and the rounding SD {rsd:.1e} of a value printed to {PAPER_TABLE5_DECIMALS} "
               f"decimals; reading the printed +- as a std over {PAPER_TABLE5_REPS} realisations instead: "
               f"z = {min(alt):+.1f} .. {max(alt):+.1f}" if alt else "")
        out.append(("Table 5 attention discrepancy ~ C/sqrt(m)",
                    f"Delta {rows[0]['delta_same'][0]:.4f} (m={rows[0]['m']}) .. "
                    f"{last['delta_same'][0]:.4f} (m={last['m']}), floor {last['floor']:.4f}; RF-noise "
                    f"slope {slope:.3f}", _label(res, why) if res else "no printed m measured"))
    if "sequence" in merged:
        s = sequence_summary(merged["sequence"])[conv]
        lab, kind, z, _ = judge(s["gap"][0], s["gap"][2])
        better = "Ind" if s["gap"][0] < 0 else "GS"
        if lab == "reproduced":
            text = f"reproduced (GS better; z = gap/SE = {z:+.1f} > {Z_CRIT:g})"
        elif lab == "not reproduced":
            text = f"not reproduced (reversed: Ind better; z = gap/SE = {z:+.1f} < -{Z_CRIT:g})"
        else:
            text = (f"inconclusive ({better} better on average but |z| = |gap/SE| = {abs(z):.1f} "
                    f"<= {Z_CRIT:g})")
        out.append(("Table 6 ranking (GS better)", f"gap Ind-GS {s['gap'][0]:+.4f} (SE {s['gap'][2]:.4f}), "
                    f"paper +{PAPER_TABLE6['gap'][0]}", text))
    return out


def _thm63_verdict(rows, c=PAPER_C63):
    """Verdict row of Thm 6.3 from :func:`thm63_rows` (its d = 32 rows when there are any)."""
    rows = [r for r in rows if r["d"] == 32] or rows
    d, kgd = rows[0]["d"], rows[0]["kgd"]
    meas = "; ".join(f"lam={r['lam']:g}: {r['ratio']:.4f}+-{r['ratio_se']:.4f} (population "
                     f"{r['pop_ratio']:.4f}, best target {r['best_ratio']:.4f})" for r in rows)
    holds = [f"{r['lam']:g}" for r in rows if r["status"] == "holds"]
    fails = [f"{r['lam']:g}" for r in rows if r["status"] == "fails"]
    best_fail = [f"{r['lam']:g}" for r in rows if r["best_ratio"] < c]
    tail = (f"every population |gap| is <= 1, so no unit target meets the bound once lam < c KGD = "
            f"{c * kgd:.1e} (d={d})")
    if fails:
        text = (f"false as stated (fails as lam -> 0): the dipole's |gap|/(KGD/lam) is above c = {c:g} by more "
                f"than {Z_CRIT:g} SE at lam = {', '.join(holds) or 'none'} and below it by more than "
                f"{Z_CRIT:g} SE at lam = {', '.join(fails)}; the best unit target's population ratio is below "
                f"c at lam = {', '.join(best_fail) or 'none measured'}; {tail}")
    elif len(holds) == len(rows):
        text = f"holds at every lam measured (by more than {Z_CRIT:g} SE); not refuted at this size, but {tail}"
    else:
        text = (f"not decidable at this size (no lam resolves the ratio below c = {c:g}); {tail}")
    return (f"Thm 6.3 |gap| >= c KGD/lam as lam -> 0 (dipole, d={d})", meas, text)


def format_verdicts(rows) -> str:
    """The verdict table as text.

    Parameters
    ----------
    rows : list of tuple
        ``(claim, measured, label)``.

    Returns
    -------
    str
    """
    return "\n".join(f"  {c:<50s} | {m} | {v}" for c, m, v in rows)
