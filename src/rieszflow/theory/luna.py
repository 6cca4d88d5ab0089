"""P1: the theory of paper 001 checked numerically (spec sections 3.1-3.8).

Each function returns a dict of NumPy arrays and scalars (the curves and the pass criteria);
:mod:`rieszflow.studies.luna.study` stores them as sweep tasks. Everything is float64 and
seeded. The kernel is ``k(x, y) = E_omega <phi(omega, x), phi(omega, y)>`` with
``phi(omega, x) = h(x) psi(omega . x)``, ``omega ~ N(0, I_d)``, and its Monte-Carlo estimate
averages ``m`` draws (paper 001, eq. (10)-(11), section 9).

Errata used here (spec section 3.9): the Lipschitz constant of Lemma 9 / Prop. 9 / Cor. 1 is
``L(x, y) <= 2 max||phi||_inf max||phi||_lip`` (the paper drops the 2), eq. (39) reads
``L^2 / m``, and Cor. 3's exponent is ``min(m eps^2 / L^4, m eps / L^2)``.

References
----------
Shahbazi et al. (2025), LUNA (paper 001), Props. 1-11, Lemmas 4-5, Cor. 1-3; paper 001 spec,
section 3; Rahimi & Recht (2007); Bartlett & Mendelson (2002) (Rademacher complexity).
"""
from __future__ import annotations

import math

import numpy as np
from scipy import stats

from rieszflow.engine.stats import power_law_fit
from rieszflow.engine.features import make_feature_map

__all__ = ["random_mlp", "mlp_psi", "sampling_error", "parametrisation_error", "truncation_error",
           "rademacher_slope", "gram_min_eigenvalues", "single_sample_tails"]


def random_mlp(rng, hidden: int, out: int, act: str):
    """A fixed random scalar MLP ``psi: R -> R^out`` (``nn.Linear``-style uniform weights).

    Parameters
    ----------
    rng : numpy.random.Generator
    hidden, out : int
    act : {"sigmoid", "relu"}

    Returns
    -------
    dict
        ``a1, c1`` (hidden,), ``a2`` (hidden, out), ``c2`` (out,), ``act``.
    """
    r = 1.0 / math.sqrt(hidden)
    return {"a1": rng.uniform(-1, 1, hidden), "c1": rng.uniform(-1, 1, hidden),
            "a2": rng.uniform(-r, r, (hidden, out)), "c2": rng.uniform(-r, r, out), "act": act}


def mlp_psi(net, u):
    """Evaluate :func:`random_mlp` on ``u`` (any shape) -> (..., out).

    Parameters
    ----------
    net : dict
    u : ndarray

    Returns
    -------
    ndarray
    """
    z = u[..., None] * net["a1"] + net["c1"]
    hh = 1.0 / (1.0 + np.exp(-z)) if net["act"] == "sigmoid" else np.maximum(z, 0.0)
    return hh @ net["a2"] + net["c2"]


def _cos_sin(u):
    return np.stack([np.cos(u), np.sin(u)], axis=-1)


def _sup_and_lip(net):
    """Bounds ``sup_u ||psi(u)||`` (sigmoid) and ``sup_u ||psi'(u)||`` of a scalar MLP."""
    a2 = np.abs(net["a2"])
    lip = np.sqrt(np.sum((np.abs(net["a1"])[:, None] * a2 * (0.25 if net["act"] == "sigmoid" else 1.0))
                         .sum(0) ** 2))
    sup = np.sqrt(np.sum((np.abs(net["c2"]) + a2.sum(0)) ** 2)) if net["act"] == "sigmoid" else np.inf
    return sup, lip


def sampling_error(rng, kind: str, ms=(4, 16, 64, 256, 1024), trials: int = 2000, d: int = 8,
                   eps=(0.05, 0.1, 0.2), ref_m: int = 2_000_000):
    """Monte-Carlo sampling error of the kernel estimate against m (spec sections 3.6, 3.7).

    ``x``, ``y`` are fixed unit vectors; for each m, ``trials`` independent sets of m
    frequencies give ``Delta = k_hat - k``. Returned: ``m * MSE``, the fitted log-log slope of
    MSE against m, ``P(|Delta| >= eps)`` with its Clopper-Pearson 95% upper bound, and the
    corrected bound ``2 exp(-m eps^2 / (2 L^2))`` (bounded features only).

    Parameters
    ----------
    rng : numpy.random.Generator
    kind : {"cos_sin", "sigmoid", "relu"}
        psi = (cos, sin) (exact k and variance known); a fixed random sigmoid MLP R -> R^4
        (hidden 32); the same with ReLU (unbounded, sub-exponential products).
    ms : sequence of int
    trials : int
    d : int
    eps : sequence of float
    ref_m : int
        Frequencies of the reference k for the MLP kinds.

    Returns
    -------
    dict
        ``m``, ``m_mse``, ``slope``, ``exact_var`` (cos_sin) or NaN, ``L``, ``p_exceed``
        (m, eps), ``p_upper`` (m, eps), ``bound`` (m, eps), ``k``.

    Raises
    ------
    ValueError
        On an unknown ``kind``.
    """
    if kind not in ("cos_sin", "sigmoid", "relu"):
        raise ValueError(f"kind={kind!r} is not allowed; allowed: cos_sin, sigmoid, relu")
    x = rng.standard_normal(d)
    x /= np.linalg.norm(x)
    y = rng.standard_normal(d)
    y /= np.linalg.norm(y)
    if kind == "cos_sin":
        psi = _cos_sin
        delta2 = float(np.sum((x - y) ** 2))
        k = math.exp(-delta2 / 2)
        var = (1 + math.exp(-2 * delta2)) / 2 - math.exp(-delta2)
        L = 2.0                                           # ||phi|| = 1, ||phi||_lip = |x| = 1
    else:
        net = random_mlp(rng, 32, 4, kind)
        psi = lambda u: mlp_psi(net, u)                   # noqa: E731
        acc, n = 0.0, 0
        while n < ref_m:
            w = rng.standard_normal((min(200_000, ref_m - n), d))
            acc += float(np.sum(psi(w @ x) * psi(w @ y)))
            n += w.shape[0]
        k = acc / n
        var = float("nan")
        sup, lip = _sup_and_lip(net)
        L = 2.0 * sup * lip
    ms = np.asarray(ms)
    mse = np.empty(len(ms))
    eps = np.asarray(eps, dtype=float)
    pex = np.empty((len(ms), len(eps)))
    pup = np.empty_like(pex)
    for i, m in enumerate(ms):
        est = np.empty(trials)
        chunk = max(1, int(2e7 // (m * d)))
        for t0 in range(0, trials, chunk):
            t1 = min(trials, t0 + chunk)
            w = rng.standard_normal((t1 - t0, m, d))
            est[t0:t1] = np.mean(np.sum(psi(w @ x) * psi(w @ y), axis=-1), axis=-1)
        delta = est - k
        mse[i] = np.mean(delta ** 2)
        for j, e in enumerate(eps):
            c = int(np.sum(np.abs(delta) >= e))
            pex[i, j] = c / trials
            pup[i, j] = 1.0 if c == trials else float(stats.beta.ppf(0.975, c + 1, trials - c))
    slope = power_law_fit(ms, mse, method="polyfit").slope
    bound = np.minimum(1.0, 2 * np.exp(-ms[:, None] * eps[None, :] ** 2 / (2 * L ** 2))) \
        if np.isfinite(L) else np.full_like(pex, np.nan)
    return {"m": ms, "m_mse": ms * mse, "slope": slope, "exact_var": var, "L": L, "p_exceed": pex,
            "p_upper": pup, "bound": bound, "eps": eps, "k": k}


def parametrisation_error(rng, hiddens=(4, 16, 64), act: str = "relu", d: int = 4, n_points: int = 40,
                          radius: float = 1.5, m: int = 100_000):
    """Parametrisation error of a 1-hidden-layer psi fitted to (cos, sin) (spec section 3.5).

    The target kernel is ``exp(-|x - y|^2 / 2)`` (psi* = (cos, sin), h = 1). psi_NN: R -> R^2 has
    hidden units with knots (ReLU) or centres (sigmoid) evenly spaced over [-4 s, 4 s],
    ``s = radius`` (the spread of ``u = omega . x`` on K), and its output layer is fitted by
    least squares on u ~ N(0, s^2). ``k`` and ``k_NN`` use the **same** m frequencies (common
    random numbers) on ``n_points`` points of the ball of radius ``radius`` in R^d.

    Parameters
    ----------
    rng : numpy.random.Generator
    hiddens : sequence of int
    act : {"relu", "sigmoid"}
    d, n_points : int
    radius : float
    m : int

    Returns
    -------
    dict
        ``hidden``, ``sup_err`` (sup over pairs of ``|k - k_NN|``), ``bound_holds`` (the
        Cauchy-Schwarz bound ``2 sqrt(B) max k^{1/2} + B`` at every pair, per width), ``B``.
    """
    pts = rng.standard_normal((n_points, d))
    pts *= (radius * rng.random(n_points) ** (1 / d) / np.linalg.norm(pts, axis=1))[:, None]
    w = rng.standard_normal((m, d))
    u = pts @ w.T                                          # (n_points, m)
    phi = _cos_sin(u)                                       # (n_points, m, 2)
    k = np.einsum("imc,jmc->ij", phi, phi) / m
    train_u = rng.standard_normal(20_000) * radius
    sup, holds, Bs = [], [], []
    for hd in hiddens:
        knots = np.linspace(-4 * radius, 4 * radius, hd)
        if act == "relu":
            a1 = np.where(np.arange(hd) % 2 == 0, 1.0, -1.0)
            c1 = -a1 * knots
            feats = lambda t: np.maximum(t[..., None] * a1 + c1, 0.0)      # noqa: E731
        else:
            scale = max(8 * radius / hd, 1e-3)
            feats = lambda t: 1 / (1 + np.exp(-(t[..., None] - knots) / scale))   # noqa: E731
        F = np.concatenate([feats(train_u), np.ones((train_u.size, 1))], axis=1)
        coef, *_ = np.linalg.lstsq(F, _cos_sin(train_u), rcond=None)
        fu = feats(u)
        phin = fu @ coef[:-1] + coef[-1]
        knn = np.einsum("imc,jmc->ij", phin, phin) / m
        B = float(np.max(np.mean(np.sum((phi - phin) ** 2, axis=-1), axis=1)))
        err = np.abs(k - knn)
        bound = 2 * math.sqrt(B) * math.sqrt(np.max(np.diag(k))) + B
        sup.append(float(err.max()))
        holds.append(bool(np.all(err <= bound * (1 + 1e-12))))
        Bs.append(B)
    return {"hidden": np.asarray(hiddens), "sup_err": np.asarray(sup), "bound_holds": np.asarray(holds),
            "B": np.asarray(Bs)}


def truncation_error(rng, radii=(1.0, 2.0, 3.0, 4.0, 5.0), d: int = 4, m: int = 400_000):
    """Lemmas 4-5: truncating the frequencies to the ball ``|omega| <= R`` (spec section 3.4).

    With psi = (cos, sin), h = 1: ``|k - k_A| = |E[cos(omega . delta) 1{|omega| > R}]| <=
    P(chi_d > R)``. Estimated by Monte Carlo on one sample of m frequencies.

    Parameters
    ----------
    rng : numpy.random.Generator
    radii : sequence of float
    d, m : int

    Returns
    -------
    dict
        ``radius``, ``error`` (Monte-Carlo ``|k - k_A|``), ``se`` (its standard error),
        ``tail`` (``P(chi_d > R)``, the bound).
    """
    delta = rng.standard_normal(d)
    delta /= np.linalg.norm(delta)
    w = rng.standard_normal((m, d))
    c = np.cos(w @ delta)
    r = np.linalg.norm(w, axis=1)
    err, se = [], []
    for R in radii:
        t = c * (r > R)
        err.append(abs(float(t.mean())))
        se.append(float(t.std(ddof=1) / math.sqrt(m)))
    return {"radius": np.asarray(radii), "error": np.asarray(err), "se": np.asarray(se),
            "tail": stats.chi.sf(np.asarray(radii), d)}


def rademacher_slope(rng, ns=(64, 256, 1024, 4096, 16384), d: int = 32, draws: int = 200):
    """Empirical Rademacher complexity of linear read-outs on frozen LUNA features (spec 3.8).

    ``R_N = (1/N) E_sigma || sum_i sigma_i phi(x_i) ||`` (``B_v = 1``) for LUNA's map at its
    initialisation (M = L = 8) on Gaussian tokens; the standard bound is
    ``sqrt(sum_i ||phi(x_i)||^2) / N <= B_phi / sqrt(N)``. Not a bound the paper states (its
    promised Rademacher bound is absent): the standard substitute.

    Parameters
    ----------
    rng : numpy.random.Generator
    ns : sequence of int
    d : int
    draws : int
        Rademacher draws per N.

    Returns
    -------
    dict
        ``n``, ``rademacher``, ``bound``, ``slope`` (log-log slope of ``rademacher`` in N).
    """
    fm = make_feature_map("luna", d, 8)
    om, th = fm.init_omega(rng), fm.init_theta(rng)
    rad, bnd = [], []
    for n in ns:
        phi = fm(rng.standard_normal((n, d)), om, th)
        sig = rng.choice([-1.0, 1.0], size=(draws, n))
        rad.append(float(np.mean(np.linalg.norm(sig @ phi, axis=1)) / n))
        bnd.append(float(np.sqrt(np.sum(phi ** 2)) / n))
    slope = power_law_fit(ns, rad, method="polyfit").slope
    return {"n": np.asarray(ns), "rademacher": np.asarray(rad), "bound": np.asarray(bnd), "slope": slope}


def gram_min_eigenvalues(rng, n: int = 200, d: int = 32):
    """Prop. 1 (Test A): ``lambda_min / lambda_max`` of ``Phi Phi^T`` for every LUNA variant and RFF.

    Parameters
    ----------
    rng : numpy.random.Generator
    n, d : int

    Returns
    -------
    dict
        ``variant`` (names) and ``ratio`` (``lambda_min / lambda_max``; PSD: ``>= -1e-10``).
    """
    x = rng.standard_normal((n, d))
    names, ratios = [], []
    for name, opts in (("luna", {}), ("luna_gate", {"envelope": "gate"}),
                       ("luna_shared", {"shared_channels": True}), ("luna_signed", {"nonneg": False})):
        fm = make_feature_map("luna", d, 8, **opts)
        om, th = fm.init_omega(rng), fm.init_theta(rng)
        if "a_h" in th:
            th["a_h"] = rng.standard_normal(th["a_h"].shape) / math.sqrt(d)
        phi = fm(x, om, th)
        lam = np.linalg.eigvalsh(phi @ phi.T)
        names.append(name)
        ratios.append(lam[0] / lam[-1])
    fm = make_feature_map("rff", d, 64, rng=rng)
    phi = fm(x, fm.init_omega(rng))
    lam = np.linalg.eigvalsh(phi @ phi.T)
    names.append("rff")
    ratios.append(lam[0] / lam[-1])
    return {"variant": np.asarray(names), "ratio": np.asarray(ratios)}


def single_sample_tails(rng, ts=(2.0, 4.0, 6.0, 8.0), d: int = 8, samples: int = 1_000_000):
    """Spec 3.7 (ii): tails of the standardised single-sample product ``A = <psi(w.x), psi(w.y)>``.

    Parameters
    ----------
    rng : numpy.random.Generator
    ts : sequence of float
    d, samples : int

    Returns
    -------
    dict
        ``t``, ``sigmoid`` and ``relu`` (``P(|A~| > t)``), ``gaussian`` (``P(|Z| > t)``).
    """
    x = rng.standard_normal(d)
    x /= np.linalg.norm(x)
    y = rng.standard_normal(d)
    y /= np.linalg.norm(y)
    w = rng.standard_normal((samples, d))
    out = {"t": np.asarray(ts), "gaussian": 2 * stats.norm.sf(np.asarray(ts))}
    for act in ("sigmoid", "relu"):
        net = random_mlp(rng, 32, 4, act)
        a = np.sum(mlp_psi(net, w @ x) * mlp_psi(net, w @ y), axis=-1)
        a = (a - a.mean()) / a.std()
        out[act] = np.asarray([float(np.mean(np.abs(a) > t)) for t in ts])
    return out
