"""Funk-Hecke spectra of zonal kernels on the sphere and the Kernel Geometry Divergence (KGD).

Implements the machinery of ``docs/specs/paper003_kgd.md`` (sections 1-4, 10): normalised
Gegenbauer polynomials by the three-term recurrence, multiplicities ``N_{d,l}``, eigenvalues
by Gauss-Jacobi quadrature and by closed forms (0F1 series), the paper's kernel variants,
and KGD by the spectral series and by Parseval.

References
----------
Z. Peng & Z. Yi, "Kernel Geometry Divergence: A Spectral Theory of Random-Feature
Attention Kernels", doi:10.20944/preprints202606.0665.v1, Thm 3.1 (eq. 2), Def. 4.1,
eqs. (3)-(5).
"""
from __future__ import annotations

from math import comb

import numpy as np
from scipy import integrate
from scipy.special import gammaln, roots_jacobi

from rieszflow.engine.energy.interaction import riesz_kernel
from rieszflow.engine.stats import power_law_fit

__all__ = [
    "check_dim", "multiplicity", "gegenbauer_normalised", "c_d", "jacobi_nodes",
    "eigenvalues_quadrature", "hyp0f1_series", "a_exp", "lam_ind", "lam_soft", "lam_gs",
    "kernel_ind_paper", "kernel_softmax", "kernel_gs", "kernel_rhf_table2", "riesz_zonal",
    "lam_riesz", "eigenvalues_riesz",
    "VARIANTS", "kgd_series", "kgd_parseval", "kgd_parseval_mp", "kgd_closed_form", "kgd_listing", "fit_loglog",
]


def check_dim(d):
    """Validate the ambient dimension.

    Parameters
    ----------
    d : int
        Ambient dimension, ``d >= 3``.

    Returns
    -------
    int
        ``d``.

    Raises
    ------
    ValueError
        If ``d`` is not an integer ``>= 3``.
    """
    if int(d) != d or d < 3:
        raise ValueError(f"d must be an integer >= 3, got {d!r}")
    return int(d)


def multiplicity(d, l):
    """Dimension ``N_{d,l}`` of degree-``l`` spherical harmonics on S^{d-1} (exact integer).

    Parameters
    ----------
    d : int
        Ambient dimension ``>= 3``.
    l : int
        Degree ``>= 0``.

    Returns
    -------
    int
        ``N_{d,0} = 1``, ``N_{d,l} = (2l+d-2) binom(l+d-3, l-1) / l``.

    Raises
    ------
    ValueError
        For invalid ``d`` or negative ``l``.

    References
    ----------
    Peng & Yi, "Kernel Geometry Divergence", Thm 3.1.
    """
    d = check_dim(d)
    if int(l) != l or l < 0:
        raise ValueError(f"l must be an integer >= 0, got {l!r}")
    l = int(l)
    return 1 if l == 0 else (2 * l + d - 2) * comb(l + d - 3, l - 1) // l


def gegenbauer_normalised(L, d, t):
    """Normalised Gegenbauer polynomials ``P_l(t)``, ``P_l(1) = 1``, for ``l = 0..L``.

    Parameters
    ----------
    L : int
        Highest degree ``>= 0``.
    d : int
        Ambient dimension ``>= 3``.
    t : array_like, float
        Points in [-1, 1], any shape.

    Returns
    -------
    ndarray, shape (L+1,) + t.shape
        Values from the stable recurrence
        ``P_{l+1} = [(2l+d-2) t P_l - l P_{l-1}] / (l+d-2)``.

    Raises
    ------
    ValueError
        For invalid ``d`` or ``L``.

    References
    ----------
    Peng & Yi, "Kernel Geometry Divergence", eq. (2).
    """
    d = check_dim(d)
    if int(L) != L or L < 0:
        raise ValueError(f"L must be an integer >= 0, got {L!r}")
    t = np.asarray(t, dtype=float)
    P = np.empty((int(L) + 1,) + t.shape)
    P[0] = 1.0
    if L >= 1:
        P[1] = t
    for l in range(1, int(L)):
        P[l + 1] = ((2 * l + d - 2) * t * P[l] - l * P[l - 1]) / (l + d - 2)
    return P


def c_d(d):
    """Normaliser ``c_d = Gamma(d/2) / (sqrt(pi) Gamma((d-1)/2))`` of the law of ``t = <x,y>``.

    Parameters
    ----------
    d : int
        Ambient dimension ``>= 3``.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        For invalid ``d``.
    """
    d = check_dim(d)
    return float(np.exp(gammaln(d / 2) - 0.5 * np.log(np.pi) - gammaln((d - 1) / 2)))


def jacobi_nodes(d, n, sigma=0.0):
    """Gauss-Jacobi nodes and probability weights for ``E_t[.]`` on S^{d-1}.

    Parameters
    ----------
    d : int
        Ambient dimension ``>= 3``.
    n : int
        Number of nodes ``>= 1``.
    sigma : float, default 0
        Extra endpoint factor ``(1-t)^{-sigma/2}`` absorbed into the weight (Riesz kernels),
        ``0 <= sigma < d-1``.

    Returns
    -------
    t, w : ndarray, shape (n,)
        Nodes and weights with ``sum w f(t) ~ E_t[(1-t)^{-sigma/2} f(t)]``.

    Raises
    ------
    ValueError
        For invalid ``d``, ``n`` or ``sigma``.
    """
    d = check_dim(d)
    if int(n) != n or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    if not 0 <= sigma < d - 1:
        raise ValueError(f"sigma must satisfy 0 <= sigma < d-1 = {d - 1}, got {sigma!r}")
    a = (d - 3) / 2
    t, w = roots_jacobi(int(n), a - sigma / 2, a)
    return t, c_d(d) * w


def eigenvalues_quadrature(kernel, d, L, n_nodes=80):
    """Funk-Hecke eigenvalues ``lambda_l = E_t[K(t) P_l(t)]`` by Gauss-Jacobi quadrature.

    Parameters
    ----------
    kernel : callable
        Zonal profile ``K(t)``, vectorised over float arrays.
    d : int
        Ambient dimension ``>= 3``.
    L : int
        Highest degree.
    n_nodes : int, default 80
        Quadrature nodes.

    Returns
    -------
    ndarray, shape (L+1,)

    Raises
    ------
    ValueError
        For invalid ``d``, ``L``, ``n_nodes``.

    References
    ----------
    Peng & Yi, "Kernel Geometry Divergence", Thm 3.1.
    """
    t, w = jacobi_nodes(d, n_nodes)
    return gegenbauer_normalised(L, d, t) @ (w * kernel(t))


def hyp0f1_series(b, z, terms=30):
    """``0F1(; b; z)`` by its power series (for small ``|z|``).

    Parameters
    ----------
    b : float
        Parameter ``> 0``.
    z : array_like
        Argument, ``|z| <= 1`` recommended.
    terms : int, default 30
        Maximum number of terms; the sum stops earlier once every remaining term is below
        ``1e-17`` of the partial sum (the terms decrease monotonically for ``|z| <= b + 1``).

    Returns
    -------
    ndarray, shape of ``z``

    Raises
    ------
    ValueError
        If ``b <= 0``.
    """
    if not b > 0:
        raise ValueError(f"b must be > 0, got {b!r}")
    z = np.asarray(z, dtype=float)
    term = np.ones_like(z)
    out = np.ones_like(z)
    small = bool(np.all(np.abs(z) <= b + 1))
    for k in range(terms):
        term = term * z / ((b + k) * (k + 1))
        out = out + term
        if small and np.all(np.abs(term) <= 1e-17 * np.abs(out)):
            break
    return out


def a_exp(l, d, c):
    """Closed-form Funk-Hecke eigenvalue of ``exp(c t)``.

    Parameters
    ----------
    l : int or ndarray of int
        Degree(s).
    d : int
        Ambient dimension ``>= 3``.
    c : float
        Rate ``> 0``.

    Returns
    -------
    ndarray
        ``(c/2)^l Gamma(d/2)/Gamma(d/2+l) 0F1(d/2+l; c^2/4)``.

    Raises
    ------
    ValueError
        For invalid ``d`` or ``c <= 0``.

    References
    ----------
    docs/specs/paper003_kgd.md section 3 (closed forms).
    """
    d = check_dim(d)
    if not c > 0:
        raise ValueError(f"c must be > 0, got {c!r}")
    l = np.atleast_1d(np.asarray(l))
    pref = np.exp(l * np.log(c / 2) + gammaln(d / 2) - gammaln(d / 2 + l))
    return pref * np.array([hyp0f1_series(d / 2 + li, c * c / 4) for li in l])


def lam_ind(l, d):
    """Eigenvalues of the paper's eq. (3) kernel ``exp((t-1)/sqrt d)``; see :func:`a_exp`.

    Parameters
    ----------
    l : int or ndarray of int
        Degree(s).
    d : int
        Ambient dimension ``>= 3``.

    Returns
    -------
    ndarray, shape (len(l),)
        Eigenvalues, one per degree.
    """
    return np.exp(-d ** -0.5) * a_exp(l, d, d ** -0.5)


def lam_soft(l, d):
    """Eigenvalues of the softmax kernel ``exp(t/sqrt d)``; see :func:`a_exp`.

    Parameters
    ----------
    l : int or ndarray of int
        Degree(s).
    d : int
        Ambient dimension ``>= 3``.

    Returns
    -------
    ndarray, shape (len(l),)
        Eigenvalues, one per degree.
    """
    return a_exp(l, d, d ** -0.5)


def lam_gs(l, d, extra=1.0):
    """Eigenvalues of the GS-ORF kernel (eq. 4): ``extra * e^{-s} a_l(r)^2``; see :func:`a_exp`.

    Parameters
    ----------
    l : int or ndarray of int
        Degree(s).
    d : int
        Ambient dimension ``>= 3``.
    extra : float, default 1.0
        Multiplicative factor.

    Returns
    -------
    ndarray, shape (len(l),)
        Eigenvalues, one per degree.
    """
    return extra * np.exp(-d ** -0.5) * a_exp(l, d, d ** -0.25) ** 2


def kernel_ind_paper(t, d):
    """Paper eq. (3): ``exp((t-1)/sqrt d)`` (Gaussian RBF, unit diagonal).

    Parameters
    ----------
    t : array_like, float
        Inner products ``t = <x, y>`` in [-1, 1], any shape.
    d : int
        Ambient dimension.

    Returns
    -------
    ndarray, shape of ``t``
        Kernel profile values.
    """
    return np.exp((np.asarray(t, float) - 1) / np.sqrt(d))


def kernel_softmax(t, d):
    """Softmax kernel ``exp(t/sqrt d)``, the true expectation of feature map (1).

    Parameters
    ----------
    t : array_like, float
        Inner products ``t = <x, y>`` in [-1, 1], any shape.
    d : int
        Ambient dimension.

    Returns
    -------
    ndarray, shape of ``t``
        Kernel profile values.
    """
    return np.exp(np.asarray(t, float) / np.sqrt(d))


def kernel_gs(t, d, extra=1.0):
    """Paper eq. (4): ``extra * e^{-s} 0F1(d/2; (1+t) s / 2)``, ``s = d^{-1/2}``.

    Parameters
    ----------
    t : array_like, float
        Inner products ``t = <x, y>`` in [-1, 1], any shape.
    d : int
        Ambient dimension.
    extra : float, default 1.0
        Multiplicative factor.

    Returns
    -------
    ndarray, shape of ``t``
        Kernel profile values.
    """
    s = d ** -0.5
    return extra * np.exp(-s) * hyp0f1_series(d / 2, (1 + np.asarray(t, float)) * s / 2)


def kernel_rhf_table2(t, d, w=0.7):
    """Reverse-engineered Table-2 RHF surrogate ``(1-w) K_ind + w K_GS`` (not in the paper).

    Parameters
    ----------
    t : array_like, float
        Inner products ``t = <x, y>`` in [-1, 1], any shape.
    d : int
        Ambient dimension.
    w : float, default 0.7
        Mixing weight in [0, 1].

    Returns
    -------
    ndarray, shape of ``t``
        Kernel profile values.

    Raises
    ------
    ValueError
        If ``w`` is outside [0, 1].
    """
    if not 0 <= w <= 1:
        raise ValueError(f"w must lie in [0, 1], got {w!r}")
    return (1 - w) * kernel_ind_paper(t, d) + w * kernel_gs(t, d)


def riesz_zonal(t, sigma):
    """Riesz kernel on the sphere as a zonal profile, ``|x-y|^{-sigma}`` with ``|x-y|^2 = 2-2t``.

    Uses the engine convention :func:`rieszflow.engine.energy.interaction.riesz_kernel`.

    Parameters
    ----------
    t : array_like, float
        Inner products ``t = <x, y>`` in [-1, 1], any shape.
    sigma : float
        Riesz exponent ``s`` of :func:`riesz_kernel`.

    Returns
    -------
    ndarray, shape of ``t``, float64
        :math:`g_\\sigma(|x - y|)`.
    """
    return riesz_kernel(np.sqrt(np.maximum(2 - 2 * np.asarray(t, float), 0.0)), sigma)


def lam_riesz(l, d, sigma):
    """Closed-form Funk-Hecke eigenvalues of the Riesz kernel ``g_sigma(|x-y|)`` on S^{d-1}.

    With the engine convention of :func:`riesz_zonal` (``|x-y|^{-sigma}`` for ``sigma > 0``,
    ``-log|x-y|`` for ``sigma = 0``) and the uniform probability measure:
    ``lambda_0 = 2^{d-2-sigma} Gamma(d/2) Gamma((d-1-sigma)/2) / (sqrt(pi) Gamma(d-1-sigma/2))``,
    ``lambda_l = lambda_0 (sigma/2)_l / (d-1-sigma/2)_l``. For ``sigma = 0`` (the derivative in
    sigma at 0): ``lambda_0 = -log 2 - psi((d-1)/2)/2 + psi(d-1)/2`` and
    ``lambda_l = (l-1)! / (2 (d-1)_l)`` for ``l >= 1`` (``psi`` the digamma function).

    Parameters
    ----------
    l : int or ndarray of int
        Degree(s), ``>= 0``.
    d : int
        Ambient dimension ``>= 3``.
    sigma : float
        Riesz exponent, ``0 <= sigma < d - 1`` (integrable singularity on S^{d-1}).

    Returns
    -------
    ndarray, shape (len(l),), float64
        Eigenvalues ``E_t[g_sigma(sqrt(2-2t)) P_l(t)]``.

    Raises
    ------
    ValueError
        For invalid ``d``, negative ``l`` or ``sigma`` outside ``[0, d-1)``.

    References
    ----------
    Peng & Yi, "Kernel Geometry Divergence", Thm 3.1 (Funk-Hecke, eq. 2); spec section 8 (Riesz
    kernels on the sphere); Paper 000, eq. (2.3) (the engine's Riesz kernel ``g_s``).
    """
    d = check_dim(d)
    if not 0 <= sigma < d - 1:
        raise ValueError(f"sigma must satisfy 0 <= sigma < d-1 = {d - 1}, got {sigma!r}")
    l = np.atleast_1d(np.asarray(l))
    if np.any(l < 0) or not np.issubdtype(l.dtype, np.integer):
        raise ValueError(f"l must hold integers >= 0, got {l!r}")
    lf = l.astype(float)
    if sigma > 0:
        log0 = ((d - 2 - sigma) * np.log(2) + gammaln(d / 2) + gammaln((d - 1 - sigma) / 2)
                - 0.5 * np.log(np.pi) - gammaln(d - 1 - sigma / 2))
        return np.exp(log0 + gammaln(sigma / 2 + lf) - gammaln(sigma / 2)
                      + gammaln(d - 1 - sigma / 2) - gammaln(d - 1 - sigma / 2 + lf))
    out = np.empty(lf.shape)
    pos = lf >= 1
    out[pos] = 0.5 * np.exp(gammaln(lf[pos]) + gammaln(d - 1) - gammaln(d - 1 + lf[pos]))
    if np.any(~pos):
        # lambda_0 = E_t[-log(2-2t)/2]: digamma form of d/dsigma lambda_0(sigma) at 0
        from scipy.special import digamma

        out[~pos] = -np.log(2) - 0.5 * digamma((d - 1) / 2) + 0.5 * digamma(d - 1)
    return out


def eigenvalues_riesz(d, sigma, L, n_nodes=80):
    """Funk-Hecke eigenvalues of the Riesz kernel by Gauss-Jacobi quadrature (``sigma > 0``).

    The endpoint singularity ``(2-2t)^{-sigma/2}`` at ``t = 1`` is absorbed into the Jacobi
    weight ``(1-t)^{(d-3)/2 - sigma/2} (1+t)^{(d-3)/2}`` (:func:`jacobi_nodes`), so the rule is
    exact for polynomials: ``lambda_l = 2^{-sigma/2} sum_j w_j P_l(t_j)``.

    Parameters
    ----------
    d : int
        Ambient dimension ``>= 3``.
    sigma : float
        Riesz exponent, ``0 < sigma < d - 1``.
    L : int
        Highest degree ``>= 0``.
    n_nodes : int, default 80
        Quadrature nodes (exact for ``L < 2 n_nodes``).

    Returns
    -------
    ndarray, shape (L+1,), float64

    Raises
    ------
    ValueError
        For invalid ``d``, ``L``, ``n_nodes``, or ``sigma`` outside ``(0, d-1)``.

    References
    ----------
    Peng & Yi, "Kernel Geometry Divergence", Thm 3.1; spec section 8.
    """
    if not sigma > 0:
        raise ValueError(f"sigma must be > 0 for the Jacobi-weight rule (sigma = 0 is the log "
                         f"kernel: use lam_riesz), got {sigma!r}")
    t, w = jacobi_nodes(d, n_nodes, sigma=sigma)
    return 2.0 ** (-sigma / 2) * (gegenbauer_normalised(L, d, t) @ w)


#: Variant registry (spec section 2.4): id -> (K1 profile, K2 profile, lam1, lam2).
VARIANTS = {
    "P": (kernel_ind_paper, kernel_gs, lam_ind, lam_gs),
    "C1": (kernel_softmax, kernel_gs, lam_soft, lam_gs),
    "C2": (kernel_ind_paper, lambda t, d: kernel_gs(t, d, np.exp(-d ** -0.5)), lam_ind,
           lambda l, d: lam_gs(l, d, np.exp(-d ** -0.5))),
    "PERF": (kernel_softmax, kernel_softmax, lam_soft, lam_soft),
}


def _variant(v):
    if v not in VARIANTS:
        raise ValueError(f"variant must be one of {sorted(VARIANTS)}, got {v!r}")
    return VARIANTS[v]


def kgd_series(lam1, lam2, d):
    """KGD from two eigenvalue sequences: ``sqrt(sum N_{d,l} (lam1_l - lam2_l)^2)``.

    Parameters
    ----------
    lam1, lam2 : array_like, shape (L+1,)
    d : int

    Returns
    -------
    float

    Raises
    ------
    ValueError
        If the shapes differ.

    References
    ----------
    Peng & Yi, "Kernel Geometry Divergence", Def. 4.1.
    """
    lam1, lam2 = np.asarray(lam1, float), np.asarray(lam2, float)
    if lam1.shape != lam2.shape or lam1.ndim != 1:
        raise ValueError(f"lam1, lam2 must be 1-D of equal shape, got {lam1.shape}, {lam2.shape}")
    N = np.array([float(multiplicity(d, l)) for l in range(lam1.size)])
    return float(np.sqrt(np.sum(N * (lam1 - lam2) ** 2)))


def kgd_closed_form(d, variant="P", L=20):
    """KGD of a registry variant by the series with closed-form eigenvalues.

    Parameters
    ----------
    d : int
        Ambient dimension ``>= 3``.
    variant : {"P", "C1", "C2", "PERF"}, default "P"
        Key of :data:`VARIANTS`.
    L : int, default 20
        Highest degree of the series.

    Returns
    -------
    float
        The KGD (see :func:`kgd_series`).

    Raises
    ------
    ValueError
        If ``variant`` is not in :data:`VARIANTS`.
    """
    _, _, l1, l2 = _variant(variant)
    ls = np.arange(L + 1)
    return kgd_series(l1(ls, d), l2(ls, d), d)


def kgd_parseval(k1, k2, d):
    """KGD by Parseval, ``sqrt(E_t[(K1-K2)^2])``, adaptive 1-D quadrature of the t-density.

    Parameters
    ----------
    k1, k2 : callable
        Zonal profiles.
    d : int

    Returns
    -------
    float
    """
    d = check_dim(d)
    cd = c_d(d)
    f = lambda t: cd * (1 - t * t) ** ((d - 3) / 2) * (float(k1(t)) - float(k2(t))) ** 2
    val, _ = integrate.quad(f, -1, 1, epsabs=0, epsrel=1e-13, limit=200)
    return float(np.sqrt(val))


def kgd_parseval_mp(d, variant="P", dps=30):
    """KGD of a registry variant by Parseval in mpmath at ``dps`` digits (reference values).

    ``KGD^2 = c_d int_{-1}^{1} (1-t^2)^{(d-3)/2} (K1(t) - K2(t))^2 dt`` with the profiles of
    :data:`VARIANTS` written in mpmath (``exp``, ``hyp0f1``), tanh-sinh quadrature.

    Parameters
    ----------
    d : int
        Ambient dimension ``>= 3``.
    variant : {"P", "C1", "C2", "PERF"}, default "P"
    dps : int, default 30
        Decimal digits of the working precision (``>= 15``).

    Returns
    -------
    mpmath.mpf
        The KGD to about ``dps`` digits (``float(...)`` for a double).

    Raises
    ------
    ValueError
        For invalid ``d``, ``variant`` or ``dps``.
    ImportError
        If mpmath is not installed (it is in the ``dev`` extra).

    References
    ----------
    Peng & Yi, "Kernel Geometry Divergence", Def. 4.1; spec section 2.5 (30-digit reference table).
    """
    import mpmath as mp

    d = check_dim(d)
    _variant(variant)
    if int(dps) != dps or dps < 15:
        raise ValueError(f"dps must be an integer >= 15, got {dps!r}")
    with mp.workdps(int(dps)):
        s = 1 / mp.sqrt(d)
        ind = lambda t: mp.exp((t - 1) * s)
        soft = lambda t: mp.exp(t * s)
        gs = lambda t: mp.exp(-s) * mp.hyp0f1(mp.mpf(d) / 2, (1 + t) * s / 2)
        k1, k2 = {"P": (ind, gs), "C1": (soft, gs), "C2": (ind, lambda t: mp.exp(-s) * gs(t)),
                  "PERF": (soft, soft)}[variant]
        cd = mp.gamma(mp.mpf(d) / 2) / (mp.sqrt(mp.pi) * mp.gamma(mp.mpf(d - 1) / 2))
        f = lambda t: (1 - t * t) ** (mp.mpf(d - 3) / 2) * (k1(t) - k2(t)) ** 2
        return +mp.sqrt(cd * mp.quad(f, [-1, 0, 1]))


def kgd_listing(d, k1, k2, L_max=40, n_quad=400):
    """The paper's listing (App. D): Gauss-Legendre nodes times the Jacobi weight.

    Reproduces its pitfall: with few nodes at large d the weight is under-resolved
    (AT-14: d = 128, n_quad = 41 gives 0.0099786 instead of 0.0071217).

    Parameters
    ----------
    d : int
        Ambient dimension ``>= 3``.
    k1, k2 : callable
        Zonal profiles, applied to an array of nodes.
    L_max : int, default 40
        Highest degree of the series.
    n_quad : int, default 400
        Number of Gauss-Legendre nodes.

    Returns
    -------
    float
        The KGD (see :func:`kgd_series`).
    """
    d = check_dim(d)
    t, w = np.polynomial.legendre.leggauss(int(n_quad))
    w = c_d(d) * w * (1 - t * t) ** ((d - 3) / 2)
    P = gegenbauer_normalised(L_max, d, t)
    lam1, lam2 = P @ (w * k1(t)), P @ (w * k2(t))
    return kgd_series(lam1, lam2, d)


def fit_loglog(x, y):
    """Least-squares fit ``log y = a + b log x``; returns ``(slope, prefactor, R^2)``.

    A tuple view of :func:`rieszflow.engine.stats.power_law_fit` (``method="polyfit"``).

    Parameters
    ----------
    x, y : array_like, float, shape (n,)
        Positive data.

    Returns
    -------
    slope : float
        ``b``.
    prefactor : float
        ``exp(a)``.
    r2 : float
        Coefficient of determination of the fit in log-log space.

    Raises
    ------
    ValueError
        From :func:`rieszflow.engine.stats.power_law_fit`: an entry not finite and positive,
        lengths that differ, fewer than 2 distinct ``x``.
    """
    f = power_law_fit(x, y, method="polyfit")
    return f.slope, f.prefactor, f.r2
