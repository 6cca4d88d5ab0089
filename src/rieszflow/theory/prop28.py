"""Paper 004's Prop. 28 (Gaussian kernel on E = R^d) checked in mpmath on the two-atom family.

Prop. 28 of "A Mathematical Theory of Attention" (Vuckovic, Baratin, Tachet des Combes,
arXiv:2007.02876, section 6.3 and appendix D) states, for G(x, y) = exp(-||x - y||_2^2),
X = {x_1..x_N}, Y = {y_1..y_N}, mu = m(X), nu = m(Y), x in supp(mu), y in supp(nu)::

    W1(Psi_{G(x,.)}(mu), Psi_{G(y,.)}(nu))
        <= [sqrt(d) sqrt(ln N + 1/(2e)) ||G||_Lip + ||G||_inf + sqrt(d) + 2] (d(x, y) + W1(mu, nu)).

It is the step on which Thm. 29 and Cor. 30 rest. The paper never says which metric on E x E
defines ||G||_Lip (section 5 defines only the one-variable seminorm and ||G||_{Lip,inf},
||G||_{inf,Lip}). The proof uses ||G||_Lip in
|(delta_x (x) mu)(G) - (delta_y (x) nu)(G)| <= ||G||_Lip W1(delta_x (x) mu, delta_y (x) nu) and
bounds that W1 by Lemma 41, i.e. with the l1 (sum) metric on E x E. This module evaluates the bound
under three readings of ||G||_Lip (:data:`READINGS`); ||G||_inf = 1 in all of them:

``"l1"`` (the paper's convention)
    Lipschitz on E x E for ||(x, w) - (y, z)||_1 (l1 on R^d, the cost of the paper's W1):
    sup ||grad G||_inf = sqrt(2/e) ~ 0.858, for every d. This is the value
    :func:`rieszflow.theory.bounds.cor30_constant` uses.
``"l2"``
    Lipschitz on E x E = R^{2d} for the Euclidean norm: sup ||grad G||_2 = sqrt(2) sqrt(2/e)
    = 2/sqrt(e) ~ 1.213, for every d.
``"max"`` (the most generous; an extra check)
    Lipschitz for max(d(x, y), d(w, z)), i.e. ||G||_{Lip,inf} + ||G||_{inf,Lip} with the
    l1 metric on E: 2 sqrt(2/e) ~ 1.716, for every d.

In d = 1 (the family below) the metric on E itself is |.| under every reading, so d(x, y) and
W1 do not change; only ||G||_Lip does.

The family is the project's Cor. 30 counterexample
(:mod:`rieszflow.studies.attention_theory.cor30`): d = 1,
mu = (1/N) delta_0 + (1 - 1/N) delta_z, z^2 = ln(N - 1) (for integer N, mu = m(X) with
X = {0} u {z repeated N - 1 times}); nu is mu with the singleton moved to h; x = 0, y = h. The
Gibbs weights of Psi_{G(0,.)}(mu) are exactly (1/2, 1/2), and the measured ratio
W1(Psi_{G(x,.)}(mu), Psi_{G(y,.)}(nu)) / (h + W1(mu, nu)) tends, as h -> 0, to
N (1 + ln(N - 1)) / (2 (N + 1)), which grows like ln N / 2 while the bound grows like sqrt(ln N).

Everything is computed in mpmath at ``dps`` decimal digits (default 60); :func:`prop28_table`
repeats the computation at ``check_dps`` (default 80) with the same step h and reports the
agreement. ``python -m rieszflow.theory.prop28 --md PATH`` writes a Markdown summary.

References
----------
Vuckovic, Baratin, Tachet des Combes, "A Mathematical Theory of Attention", arXiv:2007.02876:
Prop. 28, Thm. 29, Cor. 30, Lemmas 39-41 (section 6.3, appendix D).
"""
from __future__ import annotations

import argparse
import sys

__all__ = [
    "READINGS",
    "gaussian_lip",
    "prop28_constant",
    "two_atom_family",
    "gibbs_1d",
    "w1_1d",
    "prop28_measured_ratio",
    "prop28_limit_ratio",
    "prop28_table",
    "prop28_threshold",
    "prop28_markdown",
    "main",
]

#: Readings of ||G||_Lip in Prop. 28 (module docstring): metric on E x E used for Lip(G).
READINGS = ("l1", "l2", "max")

DEFAULT_DPS = 60
CHECK_DPS = 80
DEFAULT_H = "1e-20"
DEFAULT_GRID = tuple(range(2, 31))          # ln N = 2, 3, ..., 30


def _mp():
    try:
        import mpmath
    except ImportError as e:             # pragma: no cover - mpmath is in the dev extra
        raise ImportError("rieszflow.theory.prop28 needs mpmath (pip install 'rieszflow[dev]')") from e
    return mpmath


# ----------------------------------------------------------------------------------------------
# validation
# ----------------------------------------------------------------------------------------------
def _check_dps(dps) -> int:
    if isinstance(dps, bool) or not isinstance(dps, int) or dps < 30:
        raise ValueError(f"dps must be an integer >= 30 (decimal digits), got {dps!r}")
    return dps


def _check_reading(reading) -> str:
    if reading not in READINGS:
        raise ValueError(f"reading must be one of {', '.join(map(repr, READINGS))}, got {reading!r}")
    return reading


def _check_d(d) -> int:
    if isinstance(d, bool) or not isinstance(d, int) or d < 1:
        raise ValueError(f"d must be an integer >= 1 (dimension of E = R^d), got {d!r}")
    return d


def _to_mpf(name: str, value, allowed: str):
    mp = _mp()
    if isinstance(value, bool):
        raise ValueError(f"{name} must be a real number ({allowed}), got {value!r}")
    try:
        v = mp.mpf(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a real number ({allowed}), got {value!r}") from None
    if not mp.isfinite(v):
        raise ValueError(f"{name} must be finite ({allowed}), got {value!r}")
    return v


def _check_log_n(log_n):
    mp = _mp()
    v = _to_mpf("log_n", log_n, "ln N > ln 2, so that z^2 = ln(N - 1) > 0")
    if not v > mp.log(2):
        raise ValueError(f"log_n must be > ln 2 ~ 0.6931 (z^2 = ln(N - 1) > 0), got {log_n!r}")
    return v


# ----------------------------------------------------------------------------------------------
# the bound
# ----------------------------------------------------------------------------------------------
def gaussian_lip(reading: str = "l1", dps: int = DEFAULT_DPS):
    """||G||_Lip of G(x, y) = exp(-||x - y||_2^2) on E x E under one reading of the paper.

    Parameters
    ----------
    reading : {"l1", "l2", "max"}, default "l1"
        Metric on E x E (module docstring): l1 sum (the paper's), Euclidean on R^{2d}, or the max
        of the two l1 distances.
    dps : int, default 60
        Decimal digits of the working precision (>= 30).

    Returns
    -------
    mpmath.mpf
        sqrt(2/e), 2/sqrt(e) or 2 sqrt(2/e) (the same for every d).

    Raises
    ------
    ValueError
        If ``reading`` or ``dps`` is not allowed.

    Notes
    -----
    With t = x - w, grad_(x,w) G = (-2t, 2t) e^{-||t||^2}. The l1 reading takes the dual
    (sup) norm, sup_t 2|t_i| e^{-||t||^2} = sqrt(2/e) at |t_i| = 1/sqrt(2); the l2 reading the
    Euclidean norm, sqrt(2) sup 2||t|| e^{-||t||^2} = 2/sqrt(e); the max reading the sum of the
    two partial dual norms, 2 sqrt(2/e).

    References
    ----------
    Paper 004 ("A Mathematical Theory of Attention", arXiv:2007.02876), section 5 (Lipschitz
    seminorms), Prop. 28 and its proof (appendix D, Lemma 41).
    """
    mp = _mp()
    _check_reading(reading)
    with mp.workdps(_check_dps(dps)):
        base = mp.sqrt(2 / mp.e)
        return +{"l1": base, "l2": mp.sqrt(2) * base, "max": 2 * base}[reading]


def prop28_constant(log_n, d: int = 1, reading: str = "l1", dps: int = DEFAULT_DPS):
    """The bracket of Prop. 28: C28 = sqrt(d) sqrt(ln N + 1/(2e)) ||G||_Lip + ||G||_inf + sqrt(d) + 2.

    Parameters
    ----------
    log_n : float, str or mpmath.mpf
        ln N > ln 2 (N tokens in X and in Y; N need not be an integer here).
    d : int, default 1
        Dimension of E = R^d.
    reading : {"l1", "l2", "max"}, default "l1"
        Reading of ||G||_Lip (:func:`gaussian_lip`); ||G||_inf = 1.
    dps : int, default 60
        Decimal digits (>= 30).

    Returns
    -------
    mpmath.mpf
        C28 (dimensionless: it multiplies d(x, y) + W1(mu, nu)).

    Raises
    ------
    ValueError
        If ``log_n``, ``d``, ``reading`` or ``dps`` is not allowed.

    References
    ----------
    Paper 004 Prop. 28 (section 6.3, appendix D); Lemma 40 gives the sqrt(ln N + 1/(2e)).
    2 d K_l C28 (l1 reading) is the printed Cor. 30 constant
    (:func:`rieszflow.theory.bounds.cor30_constant`).
    """
    mp = _mp()
    d = _check_d(d)
    dps = _check_dps(dps)
    with mp.workdps(dps):
        L = _check_log_n(log_n)
        sd = mp.sqrt(d)
        return +(sd * mp.sqrt(L + 1 / (2 * mp.e)) * gaussian_lip(reading, dps) + 1 + sd + 2)


# ----------------------------------------------------------------------------------------------
# the family and the measured quantity
# ----------------------------------------------------------------------------------------------
def two_atom_family(log_n, h=DEFAULT_H, dps: int = DEFAULT_DPS) -> dict:
    """The Cor. 30 two-atom family in d = 1, as mpmath atoms.

    Parameters
    ----------
    log_n : float, str or mpmath.mpf
        ln N > ln 2.
    h : float, str or mpmath.mpf, default "1e-20"
        Displacement of the singleton, 10^{-dps/2} <= h < z (a string keeps it exact).
    dps : int, default 60
        Decimal digits (>= 30).

    Returns
    -------
    dict
        ``mu``, ``nu``: lists of (point, weight) mpf pairs, mu = [(0, 1/N), (z, 1 - 1/N)],
        nu = [(h, 1/N), (z, 1 - 1/N)]; ``x`` = 0, ``y`` = h (in supp mu, supp nu); ``z`` with
        z^2 = ln(N - 1); ``n`` = N = e^{ln N}; ``h``.

    Raises
    ------
    ValueError
        If ``log_n``, ``h`` or ``dps`` is not allowed.

    References
    ----------
    Spec construction of :func:`rieszflow.studies.attention_theory.cor30.cor30_two_atom_ratio_decimal`
    (paper 004 Thm. 29 / Cor. 30 counterexample).
    """
    mp = _mp()
    dps = _check_dps(dps)
    with mp.workdps(dps):
        L = _check_log_n(log_n)
        N = mp.exp(L)
        z = mp.sqrt(mp.log(N - 1))
        hh = _to_mpf("h", h, f"10^-{dps // 2} <= h < z")
        if not (hh >= mp.mpf(10) ** (-(dps // 2)) and hh < z):
            raise ValueError(f"h must satisfy 10^-{dps // 2} <= h < z = {mp.nstr(z, 6)} "
                             f"(resolved at dps={dps}, singleton left of the cluster), got {h!r}")
        w0 = 1 / N
        w1 = 1 - w0
        return {"mu": [(mp.mpf(0), w0), (z, w1)], "nu": [(hh, w0), (z, w1)],
                "x": mp.mpf(0), "y": hh, "z": z, "n": N, "h": hh}


def gibbs_1d(x, atoms, dps: int = DEFAULT_DPS) -> list:
    """Psi_{G(x,.)}(mu) for G(x, y) = exp(-(x - y)^2) and a 1-D atomic measure mu.

    Parameters
    ----------
    x : mpmath.mpf or float
        The query point.
    atoms : list of (point, weight)
        mu, weights >= 0 with positive total (need not sum to 1: Psi is homogeneous).
    dps : int, default 60
        Decimal digits (>= 30).

    Returns
    -------
    list of (mpmath.mpf, mpmath.mpf)
        Same points, weights w_j G(x, y_j) / sum_k w_k G(x, y_k).

    Raises
    ------
    ValueError
        If ``atoms`` is empty, has a negative weight or zero total mass.

    References
    ----------
    Paper 004 Def. 3 (Boltzmann-Gibbs transformation), Def. 4 (softmatch kernel).
    """
    mp = _mp()
    with mp.workdps(_check_dps(dps)):
        if not atoms:
            raise ValueError("atoms must be a non-empty list of (point, weight) pairs, got []")
        if any(mp.mpf(w) < 0 for _, w in atoms):
            raise ValueError(f"atoms must have weights >= 0, got {[float(w) for _, w in atoms]}")
        g = [(mp.mpf(p), mp.mpf(w) * mp.exp(-(mp.mpf(x) - mp.mpf(p)) ** 2)) for p, w in atoms]
        tot = mp.fsum(gw for _, gw in g)
        if not tot > 0:
            raise ValueError("atoms must have positive total mass")
        return [(p, gw / tot) for p, gw in g]


def w1_1d(a, b, dps: int = DEFAULT_DPS):
    """Exact W1 between two atomic probability measures on the line: int |F_a - F_b|.

    Parameters
    ----------
    a, b : list of (point, weight)
        Atomic measures with the same total mass.
    dps : int, default 60
        Decimal digits (>= 30).

    Returns
    -------
    mpmath.mpf
        W1(a, b) (in d = 1 the l1 and l2 costs coincide).

    Raises
    ------
    ValueError
        If the total masses differ by more than 10^{-(dps - 5)}.

    References
    ----------
    Paper 004 section 4 (W1 with cost ||x - y||_1); the 1-D CDF formula.
    """
    mp = _mp()
    with mp.workdps(_check_dps(dps)):
        ma = mp.fsum(mp.mpf(w) for _, w in a)
        mb = mp.fsum(mp.mpf(w) for _, w in b)
        if abs(ma - mb) > mp.mpf(10) ** (-(dps - 5)):
            raise ValueError(f"a and b must have equal mass, got {mp.nstr(ma, 10)} and {mp.nstr(mb, 10)}")
        pts = sorted({mp.mpf(p) for p, _ in a} | {mp.mpf(p) for p, _ in b})
        fa = fb = total = mp.mpf(0)
        for p, q in zip(pts[:-1], pts[1:]):
            fa += mp.fsum(mp.mpf(w) for s, w in a if mp.mpf(s) == p)
            fb += mp.fsum(mp.mpf(w) for s, w in b if mp.mpf(s) == p)
            total += abs(fa - fb) * (q - p)
        return +total


def prop28_measured_ratio(log_n, h=DEFAULT_H, dps: int = DEFAULT_DPS):
    """The quantity Prop. 28 bounds, on the two-atom family, at step h.

    ratio = W1(Psi_{G(x,.)}(mu), Psi_{G(y,.)}(nu)) / (d(x, y) + W1(mu, nu)) with
    :func:`two_atom_family` (x = 0, y = h, d(x, y) = h, W1(mu, nu) = h/N).

    Parameters
    ----------
    log_n : float, str or mpmath.mpf
        ln N > ln 2.
    h : float, str or mpmath.mpf, default "1e-20"
        Step, 10^{-dps/2} <= h < z.
    dps : int, default 60
        Decimal digits (>= 30).

    Returns
    -------
    mpmath.mpf
        The ratio (dimensionless); = :func:`prop28_limit_ratio` + O(h ln N).

    Raises
    ------
    ValueError
        If ``log_n``, ``h`` or ``dps`` is not allowed.

    References
    ----------
    Paper 004 Prop. 28 (left-hand side over the bracketed factor's argument).
    """
    mp = _mp()
    dps = _check_dps(dps)
    fam = two_atom_family(log_n, h, dps)
    with mp.workdps(dps):
        out_mu = gibbs_1d(fam["x"], fam["mu"], dps)
        out_nu = gibbs_1d(fam["y"], fam["nu"], dps)
        num = w1_1d(out_mu, out_nu, dps)
        den = abs(fam["x"] - fam["y"]) + w1_1d(fam["mu"], fam["nu"], dps)
        return +(num / den)


def prop28_limit_ratio(log_n, dps: int = DEFAULT_DPS):
    """Closed-form h -> 0 limit of :func:`prop28_measured_ratio`: N (1 + ln(N - 1)) / (2 (N + 1)).

    Parameters
    ----------
    log_n : float, str or mpmath.mpf
        ln N > ln 2.
    dps : int, default 60
        Decimal digits (>= 30).

    Returns
    -------
    mpmath.mpf
        The limit.

    Raises
    ------
    ValueError
        If ``log_n`` or ``dps`` is not allowed.

    Notes
    -----
    Psi_{G(0,.)}(mu) = (delta_0 + delta_z)/2 since (1 - 1/N) e^{-z^2} = 1/N. Moving the singleton
    to h gives cluster weight p(h) with p'(0) = p(1 - p) 2z = z/2; both outputs are two-atom and
    ordered, so W1 = h/2 + (z - h)(p(h) - 1/2) = h (1 + z^2)/2 + O(h^2), while
    d(x, y) + W1(mu, nu) = h (1 + 1/N).

    References
    ----------
    Paper 004 Prop. 28; spec derivation of the Cor. 30 family ((1 + ln(N - 1))/2).
    """
    mp = _mp()
    with mp.workdps(_check_dps(dps)):
        N = mp.exp(_check_log_n(log_n))
        return +(N * (1 + mp.log(N - 1)) / (2 * (N + 1)))


# ----------------------------------------------------------------------------------------------
# the check
# ----------------------------------------------------------------------------------------------
def _violated_from(log_n, ratios):
    """First grid point from which every ratio is > 1 (None if the last one is <= 1)."""
    start = None
    for L, r in zip(log_n, ratios):
        if r > 1:
            start = L if start is None else start
        else:
            start = None
    return start


def prop28_table(log_n_grid=DEFAULT_GRID, readings=READINGS, h=DEFAULT_H, dps: int = DEFAULT_DPS,
                 check_dps: int | None = CHECK_DPS) -> dict:
    """Measured ratio over Prop. 28's bound on a grid of ln N, per reading of ||G||_Lip.

    Parameters
    ----------
    log_n_grid : sequence of float, default ln N = 2, 3, ..., 30
        Values of ln N (each > ln 2), increasing.
    readings : sequence of str, default ("l1", "l2", "max")
        Readings of ||G||_Lip (:data:`READINGS`).
    h : float, str or mpmath.mpf, default "1e-20"
        Step of the singleton (the same at both precisions).
    dps : int, default 60
        Working precision (decimal digits, >= 30).
    check_dps : int or None, default 80
        Second precision for the agreement check (None skips it).

    Returns
    -------
    dict
        ``log_n`` (tuple of mpf, length G); ``measured`` and ``limit`` (tuples, length G:
        :func:`prop28_measured_ratio`, :func:`prop28_limit_ratio`); ``bound[reading]`` (C28,
        length G); ``ratio[reading]`` = measured / bound (length G; > 1 means Prop. 28 is
        violated); ``violated_from[reading]``: first grid ln N from which every ratio is > 1, or
        None; ``max_rel_diff_dps``: max relative difference of measured and bound between
        ``dps`` and ``check_dps`` (None when skipped); ``dps``, ``check_dps``, ``h``.

    Raises
    ------
    ValueError
        If a grid value, reading, ``h``, ``dps`` or ``check_dps`` is not allowed, or the grid is
        empty or not increasing.

    References
    ----------
    Paper 004 Prop. 28, Cor. 30 (section 6.3).
    """
    mp = _mp()
    dps = _check_dps(dps)
    if check_dps is not None:
        check_dps = _check_dps(check_dps)
    readings = tuple(_check_reading(r) for r in readings)
    with mp.workdps(dps):
        grid = tuple(_check_log_n(L) for L in log_n_grid)
    if not grid or any(b <= a for a, b in zip(grid[:-1], grid[1:])):
        raise ValueError(f"log_n_grid must be a non-empty increasing sequence, got {list(log_n_grid)!r}")

    def compute(prec):
        meas = tuple(prop28_measured_ratio(L, h, prec) for L in grid)
        bnd = {r: tuple(prop28_constant(L, 1, r, prec) for L in grid) for r in readings}
        return meas, bnd

    meas, bnd = compute(dps)
    with mp.workdps(dps):
        lim = tuple(prop28_limit_ratio(L, dps) for L in grid)
        ratio = {r: tuple(m / b for m, b in zip(meas, bnd[r])) for r in readings}
    diff = None
    if check_dps is not None:
        meas2, bnd2 = compute(check_dps)
        with mp.workdps(check_dps):
            rel = [abs(a - b) / abs(b) for a, b in zip(meas, meas2)]
            rel += [abs(a - b) / abs(b) for r in readings for a, b in zip(bnd[r], bnd2[r])]
            diff = max(rel)
    return {"log_n": grid, "measured": meas, "limit": lim, "bound": bnd, "ratio": ratio,
            "violated_from": {r: _violated_from(grid, ratio[r]) for r in readings},
            "max_rel_diff_dps": diff, "dps": dps, "check_dps": check_dps,
            "h": two_atom_family(grid[0], h, dps)["h"]}


def prop28_threshold(reading: str = "l1", h=DEFAULT_H, dps: int = DEFAULT_DPS) -> dict:
    """Where the two-atom family first violates Prop. 28 under one reading.

    Parameters
    ----------
    reading : {"l1", "l2", "max"}, default "l1"
        Reading of ||G||_Lip.
    h : float, str or mpmath.mpf, default "1e-20"
        Step used to confirm the integer threshold with :func:`prop28_measured_ratio`.
    dps : int, default 60
        Decimal digits (>= 30).

    Returns
    -------
    dict
        ``log_n_star``: the root of limit(ln N) = C28(ln N) (mpf; the limit exceeds the bound
        exactly for ln N > ln N*, which the grid of :func:`prop28_table` confirms);
        ``n_star`` = e^{ln N*}; ``n_min``: the smallest integer N (= m(X) with N tokens) with
        measured ratio > C28 at step h; ``margin_at_n_min`` and ``margin_below`` (measured - C28 at
        N_min and N_min - 1: > 0 and <= 0).

    Raises
    ------
    ValueError
        If ``reading``, ``h`` or ``dps`` is not allowed.
    RuntimeError
        If the integer check does not bracket the root (it would mean the finite-h ratio and
        its limit disagree there).

    References
    ----------
    Paper 004 Prop. 28.
    """
    mp = _mp()
    _check_reading(reading)
    dps = _check_dps(dps)
    with mp.workdps(dps):
        f = lambda L: prop28_limit_ratio(L, dps) - prop28_constant(L, 1, reading, dps)  # noqa: E731
        L_star = mp.findroot(f, (mp.mpf(3), mp.mpf(200)), solver="illinois")
        n_star = mp.exp(L_star)
        n_min = int(mp.ceil(n_star))

        def margin(n):
            L = mp.log(n)
            return prop28_measured_ratio(L, h, dps) - prop28_constant(L, 1, reading, dps)

        m_at, m_below = margin(n_min), margin(n_min - 1)
        if not (m_at > 0 and m_below <= 0):
            raise RuntimeError(f"integer check failed for reading={reading!r}: margins "
                               f"{mp.nstr(m_below, 5)} at N={n_min - 1}, {mp.nstr(m_at, 5)} at N={n_min}")
        return {"reading": reading, "log_n_star": +L_star, "n_star": +n_star, "n_min": n_min,
                "margin_at_n_min": m_at, "margin_below": m_below}


# ----------------------------------------------------------------------------------------------
# report
# ----------------------------------------------------------------------------------------------
_READING_TEXT = {
    "l1": ("l1 sum metric on E x E (the paper's convention, as in its proof in appendix D): "
           "||G||_Lip = sqrt(2/e) ~ 0.8578"),
    "l2": "Euclidean metric on E x E = R^{2d}: ||G||_Lip = 2/sqrt(e) ~ 1.2131",
    "max": ("max metric on E x E, i.e. ||G||_{Lip,inf} + ||G||_{inf,Lip}: "
            "||G||_Lip = 2 sqrt(2/e) ~ 1.7155 (most generous)"),
}

_COMMAND = "python -m rieszflow.theory.prop28 --md docs/results/prop28.md"


def prop28_markdown(table: dict | None = None, thresholds: dict | None = None) -> str:
    """Markdown summary of the Prop. 28 check (table and thresholds; computed if not given).

    Parameters
    ----------
    table : dict, optional
        Output of :func:`prop28_table` (default: its defaults).
    thresholds : dict, optional
        reading -> output of :func:`prop28_threshold` (default: every reading of ``table``).

    Returns
    -------
    str
        The page.

    References
    ----------
    Paper 004 Prop. 28.
    """
    mp = _mp()
    table = prop28_table() if table is None else table
    readings = tuple(table["ratio"])
    if thresholds is None:
        thresholds = {r: prop28_threshold(r, h=table["h"], dps=table["dps"]) for r in readings}
    g = table["log_n"]
    lines = [
        "# Paper 004, Prop. 28 on the two-atom family (mpmath)",
        "",
        f"Generated by `{_COMMAND}` (module `rieszflow.theory.prop28`); Regenerated by `make results` (this command). Exact arithmetic: the numbers do not depend on the machine.",
        "",
        "Source: Vuckovic, Baratin, Tachet des Combes, \"A Mathematical Theory of Attention\", "
        "arXiv:2007.02876, Prop. 28 (section 6.3, appendix D). For G(x, y) = exp(-||x - y||_2^2) on "
        "E = R^d, mu = m(X), nu = m(Y), |X| = |Y| = N, x in supp(mu), y in supp(nu):",
        "",
        "    W1(Psi_{G(x,.)}(mu), Psi_{G(y,.)}(nu)) <= [sqrt(d) sqrt(ln N + 1/(2e)) ||G||_Lip "
        "+ ||G||_inf + sqrt(d) + 2] (d(x, y) + W1(mu, nu))",
        "",
        "Family (the project's Cor. 30 counterexample): d = 1, mu = (1/N) delta_0 + (1 - 1/N) "
        "delta_z, z^2 = ln(N - 1); nu moves the singleton to h; x = 0, y = h. ||G||_inf = 1. "
        "The measured ratio is W1(Psi_{G(x,.)}(mu), Psi_{G(y,.)}(nu)) / (h + h/N); its h -> 0 "
        "limit is N (1 + ln(N - 1)) / (2 (N + 1)).",
        "",
        f"Precision: mpmath, {table['dps']} digits, h = {mp.nstr(table['h'], 3)}; repeated at "
        f"{table['check_dps']} digits with the same h: max relative difference "
        f"{mp.nstr(table['max_rel_diff_dps'], 3) if table['max_rel_diff_dps'] is not None else 'n/a'}. "
        f"Grid: ln N = {mp.nstr(g[0], 4)} .. {mp.nstr(g[-1], 4)} ({len(g)} points).",
        "",
        "Readings of ||G||_Lip (the paper does not name the metric on E x E; in d = 1 nothing else "
        "changes):",
        "",
    ]
    lines += [f"- `{r}`: {_READING_TEXT[r]}" for r in readings]
    lines += ["", "| ln N | measured | limit | " + " | ".join(f"C28 ({r})" for r in readings)
              + " | " + " | ".join(f"measured/C28 ({r})" for r in readings) + " |",
              "|" + "---|" * (3 + 2 * len(readings))]
    for i, L in enumerate(g):
        row = [mp.nstr(L, 4), mp.nstr(table["measured"][i], 8), mp.nstr(table["limit"][i], 8)]
        row += [mp.nstr(table["bound"][r][i], 8) for r in readings]
        row += [mp.nstr(table["ratio"][r][i], 6) for r in readings]
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", "Verdict (measured/C28 > 1 means Prop. 28 is violated):", ""]
    for r in readings:
        t = thresholds[r]
        vf = table["violated_from"][r]
        on_grid = (f"violated on the grid from ln N = {mp.nstr(vf, 4)}" if vf is not None
                   else "holds on the whole grid")
        lines.append(f"- `{r}`: {on_grid}; exact crossing ln N* = {mp.nstr(t['log_n_star'], 10)} "
                     f"(N* = {mp.nstr(t['n_star'], 10)}); smallest violating integer N = {t['n_min']} "
                     f"(margin {mp.nstr(t['margin_at_n_min'], 3)}; at N - 1: "
                     f"{mp.nstr(t['margin_below'], 3)}).")
    lines += ["", "The measured ratio grows like (ln N)/2, the bound like sqrt(ln N): Prop. 28 fails "
              "for large N under every reading, and with it the route from Prop. 28 to Thm. 29 / "
              "Cor. 30.", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    """Command line: print (or write with ``--md PATH``) the Markdown summary.

    Parameters
    ----------
    argv : list of str, optional
        Arguments (default ``sys.argv[1:]``): ``--md PATH``, ``--dps N`` (default 60),
        ``--check-dps N`` (default 80).

    Returns
    -------
    int
        0 on success.

    References
    ----------
    Paper 004 Prop. 28.
    """
    p = argparse.ArgumentParser(prog="python -m rieszflow.theory.prop28",
                                description="Check paper 004's Prop. 28 on the two-atom family.")
    p.add_argument("--md", default=None, help="write the Markdown summary to this path")
    p.add_argument("--dps", type=int, default=DEFAULT_DPS)
    p.add_argument("--check-dps", type=int, default=CHECK_DPS)
    a = p.parse_args(argv)
    text = prop28_markdown(prop28_table(dps=a.dps, check_dps=a.check_dps))
    if a.md:
        with open(a.md, "w", encoding="utf-8") as fh:
            fh.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":          # pragma: no cover
    raise SystemExit(main())
