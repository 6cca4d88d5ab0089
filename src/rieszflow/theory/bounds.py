"""Paper 004's regularity bounds, printed and corrected, side by side.

Every function returns a :class:`Bound` with the ``paper`` value (as printed) and the
``corrected`` value (valid); Prop. 19 (ii), Thm. 23, Prop. 25 and Lemma 31 as printed are
not valid bounds (counterexamples in the attention-theory study).

References
----------
Paper 004 ("A Mathematical Theory of Attention", arXiv:2007.02876), section 5 and
appendix C; docs/specs/paper004_attention_theory.md section 4.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from rieszflow.theory.potentials import KernelConstants, QueryConstants
from rieszflow.theory._common import _check_real

__all__ = [
    "Bound",
    "prop19_query_bound",
    "prop19_key_bound",
    "prop20_bound",
    "prop21_bound",
    "thm23_bound",
    "cor24_bound",
    "prop25_bound",
    "lemma31_bound",
    "cor30_constant",
    "lemma40_bound",
]



# ----------------------------------------------------------------------------------------------
# the paper's bounds next to the corrected ones (all for the l1 metric unless stated)
# ----------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Bound:
    """A Lipschitz/contraction constant as printed in paper 004 and as corrected.

    Parameters
    ----------
    paper : float
        The constant as printed (may be invalid: see ``paper_valid``).
    corrected : float
        A valid constant (spec section 4; NaN where no certified constant is known).
    sharpened : float
        A valid, tighter constant derived in the spec (NaN where none).
    lower : float
        A lower bound on the true constant (NaN where none is known in closed form).
    paper_valid : bool
        False where the spec documents that the printed constant is not a valid bound.
    """

    paper: float
    corrected: float
    sharpened: float = math.nan
    lower: float = math.nan
    paper_valid: bool = True


def prop19_query_bound(c: KernelConstants) -> Bound:
    """Prop. 19 (i): W1(Psi_{G(x,.)}(mu), Psi_{G(y,.)}(mu)) <= C d(x, y).

    Parameters
    ----------
    c : KernelConstants
        Constants of G on E (uses ``log_lip_query``, ``log_eps`` and ``diam``).

    Returns
    -------
    Bound
        paper = 2 ||G||_{Lip,inf} diam/eps (valid); corrected = sharpened =
        ||G||_{Lip,inf} diam/eps (centring the test function, ||f - c||_inf <= diam/2).

    References
    ----------
    Paper 004 Prop. 19, appendix C; spec section 4.2.
    """
    base = c.over_eps(c.log_lip_query) * c.diam
    return Bound(paper=2 * base, corrected=base, sharpened=base, paper_valid=True)


def prop19_key_bound(c: KernelConstants) -> Bound:
    """Prop. 19 (ii): W1(Psi_{G(x,.)}(mu), Psi_{G(x,.)}(nu)) <= C W1(mu, nu).

    Parameters
    ----------
    c : KernelConstants
        Constants of G on E (uses ``log_lip_key``, ``log_sup``, ``log_eps`` and ``diam``).

    Returns
    -------
    Bound
        paper = 2 ||G||_{inf,Lip} diam/eps (**not valid**: the proof drops ||G||_inf ||f||_Lip
        from Lip(G f)); corrected = (2 ||G||_{inf,Lip} diam + ||G||_inf)/eps; sharpened =
        (||G||_{inf,Lip} diam + ||G||_inf)/eps; lower = 1 (Dirac pairs: Psi(delta_a) = delta_a).

    References
    ----------
    Paper 004 Prop. 19, appendix C; spec section 4.2 [P-fix].
    """
    lk = c.over_eps(c.log_lip_key) * c.diam
    gs = c.over_eps(c.log_sup)
    return Bound(paper=2 * lk, corrected=2 * lk + gs, sharpened=lk + gs, lower=1.0,
                 paper_valid=False)


def prop20_bound(d: int) -> Bound:
    """Prop. 20: tau(Pi) for the Dirac projection; printed d, true value 1 (Jensen).

    Parameters
    ----------
    d : int
        Token dimension.

    Returns
    -------
    Bound
        paper = d (valid); corrected = sharpened = lower = 1.

    References
    ----------
    Paper 004 Prop. 20; spec section 4.2 ("Why tau(Pi) = 1").
    """
    return Bound(paper=float(d), corrected=1.0, sharpened=1.0, lower=1.0, paper_valid=True)


def prop21_bound(k_ell: float) -> Bound:
    """Prop. 21: tau(L) <= K_l for a deterministic lookup (valid, attained by Dirac pairs).

    Parameters
    ----------
    k_ell : float
        Lipschitz constant K_l of the lookup.

    Returns
    -------
    Bound
        paper = corrected = sharpened = lower = K_l (valid).

    References
    ----------
    Paper 004 Prop. 21; spec section 4.2.
    """
    return Bound(paper=float(k_ell), corrected=float(k_ell), sharpened=float(k_ell),
                 lower=float(k_ell), paper_valid=True)


def _require_l1(c: KernelConstants, what: str) -> None:
    """The printed constants of Thm. 23 / Cor. 24 assume l1 constants (paper 004 section 4)."""
    metric = getattr(c, "metric", None)
    if metric != "l1":
        raise ValueError(f"{what} needs KernelConstants in the l1 metric (the paper's d and sqrt(d) "
                         f"factors convert from l1); got c.metric={metric!r}. Compute the constants "
                         f"with kernel.constants(domain, metric='l1')")


def thm23_bound(c: KernelConstants, k_ell: float, d: int) -> Bound:
    """Thm. 23: contraction coefficient tau(A) of mu -> mu A_mu.

    Parameters
    ----------
    c : KernelConstants
        Constants of G on E in the **l1** metric (``c.metric == "l1"``): the paper's
        tau(Pi) = d and W1 are l1 quantities.
    k_ell : float
        Lipschitz constant K_l of the lookup in l1 (``operator_norm(W, "l1")``).
    d : int
        Token dimension.

    Returns
    -------
    Bound
        paper = d K_l 2 (||G||_{Lip,inf} + ||G||_{inf,Lip}) diam/eps (**not valid**);
        corrected = K_l [2 (Lq + Lk) diam + ||G||_inf]/eps (tau(Pi) = 1);
        sharpened = K_l [(Lq + Lk) diam + ||G||_inf]/eps;
        lower = K_l (Dirac pairs delta_a -> delta_{l(a)}; exact for linear l).

    Raises
    ------
    ValueError
        If ``c.metric != "l1"``.

    References
    ----------
    Paper 004 Thm. 23, appendix C; spec section 4.3 [P-fix].
    """
    _require_l1(c, "thm23_bound")
    lqk = (c.over_eps(c.log_lip_query) + c.over_eps(c.log_lip_key)) * c.diam
    gs = c.over_eps(c.log_sup)
    k = float(k_ell)
    return Bound(paper=d * k * 2 * lqk, corrected=k * (2 * lqk + gs), sharpened=k * (lqk + gs),
                 lower=k, paper_valid=False)


def cor24_bound(c: KernelConstants, k_ell: float, d: int) -> Bound:
    """Cor. 24: l2 -> l2 Lipschitz constant of q -> Attention(q, K, V).

    The l2 statement is derived from l1 constants through ``|x|_2 <= |x|_1 <=
    sqrt(d) |x|_2``; that conversion is the sqrt(d) (corrected) or d^{3/2}
    (paper) factor below, so the constants must be the l1 ones (l2 constants
    would apply the conversion twice).

    Parameters
    ----------
    c : KernelConstants
        Constants of G on E in the **l1** metric (``c.metric == "l1"``).
    k_ell : float
        Lipschitz constant K_l of the lookup in l1.
    d : int
        Token dimension.

    Returns
    -------
    Bound
        paper = d^{3/2} K_l 2 ||G||_{Lip,inf} diam/eps (valid); corrected = sqrt(d) K_l 2
        ||G||_{Lip,inf} diam/eps (tau(Pi) = 1); sharpened = sqrt(d) K_l ||G||_{Lip,inf} diam/eps.

    Raises
    ------
    ValueError
        If ``c.metric != "l1"``.

    References
    ----------
    Paper 004 Cor. 24; spec section 4.4.
    """
    _require_l1(c, "cor24_bound")
    base = c.over_eps(c.log_lip_query) * c.diam * float(k_ell)
    return Bound(paper=d ** 1.5 * 2 * base, corrected=math.sqrt(d) * 2 * base,
                 sharpened=math.sqrt(d) * base, paper_valid=True)


def prop25_bound(q: QueryConstants, k_ell: float, d: int) -> Bound:
    """Prop. 25: ||Attn(x_t, X_N) - Attn(x_t, X_N^)||_1 <= C W1(m(X_N), m(X_N^)).

    Parameters
    ----------
    q : QueryConstants
        Constants of the key-slot function y -> G(x_t, y) for the query x_t.
    k_ell : float
        Lipschitz constant K_l of the lookup.
    d : int
        Token dimension.

    Returns
    -------
    Bound
        paper = d K_l 2 ||G(x_t,.)||_Lip diam/eps (**not valid**, inherits Prop. 19 (ii));
        corrected = K_l (2 ||G(x_t,.)||_Lip diam + ||G(x_t,.)||_inf)/eps;
        sharpened = K_l (||G(x_t,.)||_Lip diam + ||G(x_t,.)||_inf)/eps.

    References
    ----------
    Paper 004 Prop. 25; spec section 5.1 [P-fix].
    """
    with np.errstate(over="ignore"):
        lip = float(np.exp(q.log_lip - q.log_eps)) * q.diam
        gs = float(np.exp(q.log_sup - q.log_eps))
    k = float(k_ell)
    return Bound(paper=d * k * 2 * lip, corrected=k * (2 * lip + gs), sharpened=k * (lip + gs),
                 paper_valid=False)


def lemma31_bound(diam: float) -> Bound:
    """Lemma 31 (last line): W1(Psi_G(nu), Psi_F(nu)) <= C ||G/nu(G) - F/nu(F)||_{L1(nu)}.

    Parameters
    ----------
    diam : float
        diam(E).

    Returns
    -------
    Bound
        paper = 1 (the printed last line drops diam(E): **not valid** when diam > 2);
        corrected = diam; sharpened = diam/2 (= diam TV, centred test function).

    References
    ----------
    Paper 004 Lemma 31, appendix B; spec sections 1 (typos) and 4.2.
    """
    return Bound(paper=1.0, corrected=float(diam), sharpened=float(diam) / 2.0,
                 paper_valid=False)


def cor30_constant(n: float, d: int, k_ell: float) -> float:
    """Printed constant of Cor. 30 (Gaussian kernel on E = R^d), flagged **not certified**.

    C30(N, d, K_l) = 2 d K_l [sqrt(d) sqrt(ln N + 1/(2e)) sqrt(2/e) + 1 + sqrt(d) + 2], with
    tau(Pi) = d, ||G||_Lip = sqrt(2/e), ||G||_inf = 1 filled in. The true constant grows at
    least like (1 + ln(N - 1))/2 and exceeds C30 once ln N >= 36 (spec section 4.6).

    Parameters
    ----------
    n : float
        Number of tokens N >= 1 (a float so that N ~ e^60 can be passed).
    d : int
    k_ell : float

    Returns
    -------
    float

    References
    ----------
    Paper 004 Thm. 29, Cor. 30, appendix D; spec section 4.6.
    """
    n = _check_real("n", n, low=1.0)
    return 2 * d * float(k_ell) * (math.sqrt(d) * math.sqrt(math.log(n) + 1 / (2 * math.e))
                                   * math.sqrt(2 / math.e) + 1 + math.sqrt(d) + 2)


def lemma40_bound(n: float) -> float:
    """Lemma 40: sup_{z in R_+^n} sum z_i e^{-z_i^2} / (1 + sum e^{-z_i^2}) <= sqrt(ln n + 1/(2e)).

    Parameters
    ----------
    n : float
        Number of terms n >= 1 (a float so that very large n can be passed).

    Returns
    -------
    float
        sqrt(ln n + 1/(2e)).

    References
    ----------
    Paper 004 Lemma 40, appendix D (correct; spec section 4.6).
    """
    n = _check_real("n", n, low=1.0)
    return math.sqrt(math.log(n) + 1 / (2 * math.e))
