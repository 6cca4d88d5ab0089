"""Corollary 30 of paper 004: the (1 + ln(N-1))/2 family of ratios, by finite differences on particles,
by the two-atom Jacobian and in exact decimal arithmetic (:func:`cor30_family`)."""
from __future__ import annotations

import math
from decimal import Decimal, localcontext

import numpy as np

from rieszflow.engine.measures import EmpiricalMeasure
from rieszflow.theory import (
    GaussianKernel,
    LinearLookup,
    SelfAttention,
    cor30_constant,
    wasserstein1,
)
from rieszflow.studies.attention_theory.bound_rows import _row

__all__ = ["cor30_family", "cor30_particle_ratio", "cor30_two_atom_ratio_decimal",
           "cor30_two_atom_ratio_jacobian"]


def _cor30_layer() -> SelfAttention:
    return SelfAttention(GaussianKernel.from_sigma(1.0), LinearLookup(np.eye(1)))


def cor30_particle_ratio(n: int, h: float = 1e-6) -> float:
    """Measured W1 ratio of the Cor. 30 counterexample with N real particles.

    d = 1, l = id, G = exp(-|x - y|^2); X = {0} u {z repeated N-1 times}, z^2 = ln(N - 1), and
    the singleton moves by ``h``: ratio = W1(mu A_mu, nu A_nu) / W1(mu, nu), exact 1-D W1.

    Parameters
    ----------
    n : int
        Number of tokens N >= 3.
    h : float, default 1e-6

    Returns
    -------
    float
        ~ (1 + ln(N-1))/2 + O(ln N / N).

    References
    ----------
    Spec section 4.6 ("Lower-bound family"), T18.
    """
    if int(n) < 3:
        raise ValueError(f"n must be >= 3, got {n!r}")
    z = math.sqrt(math.log(n - 1))
    X = np.full((n, 1), z)
    X[0, 0] = 0.0
    Y = X.copy()
    Y[0, 0] = h
    layer = _cor30_layer()
    mu, nu = EmpiricalMeasure.uniform(X), EmpiricalMeasure.uniform(Y)
    return wasserstein1(layer(mu), layer(nu)) / wasserstein1(mu, nu)


def cor30_two_atom_ratio_jacobian(log_n: float) -> float:
    """Local (h -> 0) ratio of the weighted two-atom family in float64, from the Jacobian.

    mu = (1/N) delta_0 + (1 - 1/N) delta_z with z^2 = ln(N - 1); the value is
    max_{k} sum_i w_i |dT(x_i)/dx_k| / w_k (:meth:`SelfAttention.local_lipschitz`), exact in the
    limit h -> 0 and free of cancellation for any ln N.

    Parameters
    ----------
    log_n : float
        ln N >= 2.

    Returns
    -------
    float

    References
    ----------
    Spec section 4.6, T19.
    """
    w0 = math.exp(-log_n)
    z2 = log_n + math.log1p(-w0)                                  # ln(N - 1)
    mu = EmpiricalMeasure(np.array([[0.0], [math.sqrt(z2)]]), np.array([w0, 1.0 - w0]))
    return _cor30_layer().local_lipschitz(mu)[0]


def cor30_two_atom_ratio_decimal(log_n: float, digits: int = 60, h_exp: int | None = None) -> float:
    """Finite-h W1 ratio of the weighted two-atom family in ``digits``-digit decimal arithmetic.

    mu_h = (1/N) delta_h + (1 - 1/N) delta_z, z^2 = ln(N - 1), G = exp(-|x-y|^2), l = id; the
    singleton moves from 0 to h = 10^{-h_exp} and the exact 1-D W1 of the outputs is divided by
    W1(mu_h, mu_0) = h/N. Standard-library :mod:`decimal` replaces mpmath.

    Parameters
    ----------
    log_n : float
        ln N (N need not be an integer: only the weights 1/N, 1 - 1/N enter).
    digits : int, default 60
        Decimal precision.
    h_exp : int, optional
        Exponent of the step (default digits // 3).

    Returns
    -------
    float
        The ratio, = (1 + ln(N-1))/2 + O(ln N / N) + O(h).

    References
    ----------
    Spec section 4.6 (weighted atoms, 60 digits), T19.
    """
    with localcontext() as ctx:
        ctx.prec = int(digits)
        L = Decimal(repr(float(log_n)))
        N = L.exp()
        w0 = 1 / N
        w1 = 1 - w0
        z = (N - 1).ln().sqrt()
        h = Decimal(10) ** (-(h_exp if h_exp is not None else int(digits) // 3))

        def T(x, atoms):
            g = [(w * (-(x - p) ** 2).exp(), p) for p, w in atoms]
            return sum(gw * p for gw, p in g) / sum(gw for gw, _ in g)

        def w1_1d(a, b):
            # exact W1 on the line: integral of |F_a - F_b| between consecutive support points
            pts = sorted({p for p, _ in a} | {p for p, _ in b})
            total, fa, fb = Decimal(0), Decimal(0), Decimal(0)
            for p, q in zip(pts[:-1], pts[1:]):
                fa += sum(w for x, w in a if x == p)
                fb += sum(w for x, w in b if x == p)
                total += abs(fa - fb) * (q - p)
            return total

        before = [(Decimal(0), w0), (z, w1)]
        after = [(h, w0), (z, w1)]
        out_b = [(T(Decimal(0), before), w0), (T(z, before), w1)]
        out_a = [(T(h, after), w0), (T(z, after), w1)]
        return float(w1_1d(out_a, out_b) / w1_1d(after, before))


def cor30_family(particle_sizes, log_sizes, step: float = 1e-6, digits: int = 60) -> dict:
    """Measure the Cor. 30 counterexample over N and fit its growth.

    Parameters
    ----------
    particle_sizes : sequence of int
        N for real particle arrays (exact 1-D W1).
    log_sizes : sequence of float
        ln N for the weighted two-atom family (float64 Jacobian and decimal finite-h).
    step : float
        Displacement of the singleton for the particle arrays.
    digits : int
        Decimal precision of the two-atom check.

    Returns
    -------
    dict
        ``log_n`` (sorted ln N of every point), ``ratio_particles``, ``ratio_decimal``,
        ``ratio_jacobian`` (NaN where not computed), ``prediction`` = (1 + ln(N-1))/2,
        ``c30`` = printed C30(N, 1, 1); fits ``slope``, ``intercept``, ``rms_log_fit`` of
        ratio = a + b ln(N-1), ``rms_sqrt_fit`` of ratio = a + b sqrt(ln N) (the paper's growth
        law), and ``crossing_log_n``: ln N above which (1 + ln(N-1))/2 > C30.

    References
    ----------
    Paper 004 Thm. 29, Cor. 30; spec section 4.6, T18-T19.
    """
    from scipy.optimize import brentq

    pts = {}
    for n in particle_sizes:
        pts.setdefault(math.log(n), {})["particles"] = cor30_particle_ratio(int(n), step)
    for L in log_sizes:
        e = pts.setdefault(float(L), {})
        e["decimal"] = cor30_two_atom_ratio_decimal(L, digits)
        e["jacobian"] = cor30_two_atom_ratio_jacobian(L)
    log_n = np.array(sorted(pts))
    get = lambda k: np.array([pts[L].get(k, math.nan) for L in log_n])  # noqa: E731
    rp, rd, rj = get("particles"), get("decimal"), get("jacobian")
    measured = np.where(np.isfinite(rd), rd, rp)
    ln_nm1 = np.log(np.expm1(log_n))                                  # ln(N - 1)
    pred = (1 + ln_nm1) / 2
    c30 = np.array([cor30_constant(math.exp(L), 1, 1.0) for L in log_n])
    A1 = np.stack([np.ones_like(log_n), ln_nm1], axis=1)
    coef1, *_ = np.linalg.lstsq(A1, measured, rcond=None)
    A2 = np.stack([np.ones_like(log_n), np.sqrt(log_n)], axis=1)
    coef2, *_ = np.linalg.lstsq(A2, measured, rcond=None)
    def excess(L):
        return (1 + math.log(math.expm1(L))) / 2 - cor30_constant(math.exp(L), 1, 1.0)

    cross = brentq(excess, 5.0, 600.0)
    return {"log_n": log_n, "ratio_particles": rp, "ratio_decimal": rd, "ratio_jacobian": rj,
            "measured": measured, "prediction": pred, "c30": c30,
            "slope": float(coef1[1]), "intercept": float(coef1[0]),
            "rms_log_fit": float(np.sqrt(np.mean((A1 @ coef1 - measured) ** 2))),
            "sqrt_fit": (float(coef2[0]), float(coef2[1])),
            "rms_sqrt_fit": float(np.sqrt(np.mean((A2 @ coef2 - measured) ** 2))),
            "crossing_log_n": float(cross)}


def _cor30_row(fam) -> list:
    trials = [{"ratio": r, "paper": c, "corrected": math.nan, "sharpened": math.nan,
               "dim": 1, "n_tokens": math.exp(L), "k_ell": 1.0}
              for L, r, c in zip(fam["log_n"], fam["measured"], fam["c30"])]
    note = (f"X = {{0}} u {{z x (N-1)}}, z^2 = ln(N-1), K2, l = id, d = 1: ratio = "
            f"{fam['intercept']:.3f} + {fam['slope']:.4f} ln(N-1) (RMS {fam['rms_log_fit']:.1e}; "
            f"a + b sqrt(ln N) fits with RMS {fam['rms_sqrt_fit']:.2f}); exceeds C30 for "
            f"ln N > {fam['crossing_log_n']:.2f}")
    return [_row("cor30_family", "Cor 30: W1(mu A_mu, nu A_nu) <= C30(N) W1(mu,nu), printed "
                 "O(sqrt(ln N)) [(1+ln(N-1))/2 family]", "family", trials,
                 "paper 004 Thm. 29, Cor. 30; spec section 4.6", note)]
