"""Prop. 26 of paper 004: the weight-shared infinitely deep Transformer, its fixed points and the
collapse of token measures onto them (:func:`fixed_point_collapse`)."""
from __future__ import annotations

import math

import numpy as np

from rieszflow.engine.measures import EmpiricalMeasure
from rieszflow.engine.space import Cube
from rieszflow.theory import (
    DotProductKernel,
    FeedForward,
    LinearLookup,
    SelfAttention,
    operator_norm,
    thm23_bound,
    wasserstein1,
)
from rieszflow.studies.attention_theory.bound_rows import _row

__all__ = ["fixed_point_collapse"]


def _fixed_point_of(fn, x0, n_iter=400):
    x = x0
    for _ in range(n_iter):
        x = fn(x)
    return x


def _trajectory_stats(layer, mus, x_star, kappa, n_layers):
    """Deviation from delta_{x*} and W1 between the trajectories of several inputs."""
    trajs = []
    for mu in mus:
        traj = [mu]
        for _ in range(n_layers):
            traj.append(layer(traj[-1]))
        trajs.append(traj)
    main = trajs[0]
    dev = np.array([float(np.abs(m.points - x_star).max()) for m in main])
    to_fp = np.array([float(m.weights @ np.abs(m.points - x_star).sum(axis=1)) for m in main])
    between = np.array([wasserstein1(a, b) for a, b in zip(trajs[0], trajs[1])])
    env = kappa ** np.arange(n_layers + 1) * dev[0]
    return {"trajectories": trajs, "max_deviation": dev, "w1_to_fixed_point": to_fp,
            "w1_between_inputs": between, "envelope": env}


def _step_ratios(series, floor=1e-11):
    s = np.asarray(series)
    ok = (s[:-1] > floor) & (s[1:] > 0)
    return s[1:][ok] / s[:-1][ok]


def fixed_point_collapse(rng: np.random.Generator, betas, n_layers: int, n_tokens: int) -> dict:
    """The Universal-Transformer recursion of Prop. 26 in three regimes.

    * ``collapse``: d = 3, f = 0.5 tanh(W1 x + b), ||W1||_{inf->inf} = ||W^V||_{inf->inf} = 1, so
      kappa = Lip(f) Lip(l) = 0.5 in l_inf; for every beta the tokens collapse onto the single
      atom x* = f(l(x*)) at a rate <= kappa per layer, the same limit for every input.
    * ``certificate`` (spec worked example, T24): d = 2, A = I, beta = 0.01, W^V = 0.5 I, f = id;
      corrected tau(A) <= 0.604 certifies a contraction, measured layer ratio -> 0.5 = K_l, while
      the printed bound claims 0.167.
    * ``rotation``: d = 2, A = I, beta = 1e-3, W^V = 90-degree rotation (an l1 isometry with
      l(E) = E), f = id. The printed Thm. 23 bound is 0.032 < 1 (it would certify a contraction
      to a unique input-independent fixed point); in truth Dirac inputs rotate with period 4 and
      their W1 distance never shrinks (ratio 1); token sets collapse to their mean, which then
      rotates forever.

    Parameters
    ----------
    rng : numpy.random.Generator
    betas : sequence of float
        Inverse temperatures of the ``collapse`` cases.
    n_layers : int
        Depth of the recursion.
    n_tokens : int
        Tokens per input.

    Returns
    -------
    dict
        ``cases`` (list of case names) and, per case, a dict with ``max_deviation``,
        ``w1_to_fixed_point``, ``w1_between_inputs``, ``envelope`` (arrays over iteration 0..H),
        ``beta``, ``kappa``, ``paper_tau``, ``corrected_tau`` (printed and corrected bounds on
        tau(T) = Lip(f) tau(A), l1), ``max_step_ratio`` of the quantity the statement is about,
        ``measured_rate`` and ``predicted_rate`` (spectral radius of D(f o l)(x*)); the
        ``collapse`` cases also hold ``fixed_point`` (d,) and ``n_tokens`` (tokens per input).

    References
    ----------
    Paper 004 Prop. 26, Remark 27, section 6.2; spec section 5.2, T23-T24.
    """
    out = {"cases": []}
    d = 3
    A = rng.standard_normal((d, d)) / math.sqrt(d)
    W = rng.standard_normal((d, d))
    W /= operator_norm(W, "linf")
    W1 = rng.standard_normal((d, d))
    W1 /= operator_norm(W1, "linf")
    b1 = 0.5 * rng.standard_normal(d)
    ffn = FeedForward(W1, b1, 0.5 * np.eye(d), np.zeros(d), "tanh")
    kappa = ffn.lipschitz_bound("linf") * operator_norm(W, "linf")
    x_star = _fixed_point_of(lambda x: ffn((W @ x)[None])[0], np.zeros(d))
    jac = ffn.jacobian((W @ x_star)[None])[0] @ W
    predicted = float(np.max(np.abs(np.linalg.eigvals(jac))))
    box3 = Cube(1.0, d)
    inputs = [EmpiricalMeasure.uniform(box3.sample(rng, n_tokens)) for _ in range(2)]
    lip_f1 = ffn.lipschitz_bound("l1")
    for beta in betas:
        layer = SelfAttention(DotProductKernel(A, beta), LinearLookup(W), ffn)
        st = _trajectory_stats(layer, inputs, x_star, kappa, n_layers)
        bound = thm23_bound(DotProductKernel(A, beta).constants(box3), operator_norm(W, "l1"), d)
        ratios = _step_ratios(st["max_deviation"])
        tail = st["max_deviation"]
        sel = (tail[:-1] > 1e-11) & (tail[:-1] < 1e-4)
        rate = (float(np.exp(np.mean(np.log(tail[1:][sel] / tail[:-1][sel]))))
                if sel.any() else math.nan)
        limits = [t[-1].points for t in st.pop("trajectories")]
        name = f"collapse_beta{beta:g}"
        out["cases"].append(name)
        out[name] = {**st, "beta": beta, "kappa": kappa, "paper_tau": lip_f1 * bound.paper,
                     "corrected_tau": lip_f1 * bound.corrected,
                     "max_step_ratio": float(ratios.max()) if ratios.size else math.nan,
                     "measured_rate": rate, "predicted_rate": predicted,
                     "limit_gap": float(np.abs(limits[0] - limits[1]).max()),
                     "fixed_point": x_star, "n_tokens": int(n_tokens)}

    box2 = Cube(1.0, 2)
    # certificate example of spec section 4.3 (T24)
    layer = SelfAttention(DotProductKernel(np.eye(2), 0.01), LinearLookup(0.5 * np.eye(2)))
    bound = thm23_bound(DotProductKernel(np.eye(2), 0.01).constants(box2), 0.5, 2)
    ins = [EmpiricalMeasure.uniform(box2.sample(rng, n_tokens)) for _ in range(2)]
    st = _trajectory_stats(layer, ins, np.zeros(2), 0.5, n_layers)
    st.pop("trajectories")
    layer_ratios = _step_ratios(st["w1_between_inputs"], floor=1e-12)
    pair_ratios = []
    for _ in range(100):
        mu = EmpiricalMeasure.uniform(box2.sample(rng, int(rng.integers(2, 12))))
        nu = EmpiricalMeasure.uniform(box2.sample(rng, int(rng.integers(2, 12))))
        pair_ratios.append(wasserstein1(layer(mu), layer(nu)) / wasserstein1(mu, nu))
    out["cases"].append("certificate_T24")
    out["certificate_T24"] = {**st, "beta": 0.01, "kappa": 0.5, "paper_tau": bound.paper,
                              "corrected_tau": bound.corrected,
                              "max_step_ratio": float(max(layer_ratios.max(), max(pair_ratios))),
                              "layer_ratios": layer_ratios, "pair_ratios": np.array(pair_ratios),
                              "measured_rate": float(layer_ratios[-1]), "predicted_rate": 0.5,
                              "limit_gap": math.nan, "fixed_point": np.zeros(2)}

    # rotation counterexample: the printed bound certifies a contraction that does not exist
    R = np.array([[0.0, 1.0], [-1.0, 0.0]])
    layer = SelfAttention(DotProductKernel(np.eye(2), 1e-3), LinearLookup(R))
    bound = thm23_bound(DotProductKernel(np.eye(2), 1e-3).constants(box2), 1.0, 2)
    a, b = np.array([[0.6, -0.2]]), np.array([[-0.3, 0.5]])
    dirac_inputs = [EmpiricalMeasure.uniform(a), EmpiricalMeasure.uniform(b)]
    token_inputs = [EmpiricalMeasure.uniform(box2.sample(rng, n_tokens) * 0.5 + 0.4),
                    EmpiricalMeasure.uniform(box2.sample(rng, n_tokens) * 0.5 - 0.3)]
    for name, ins in (("rotation_dirac", dirac_inputs), ("rotation_tokens", token_inputs)):
        st = _trajectory_stats(layer, ins, np.zeros(2), 1.0, n_layers)
        trajs = st.pop("trajectories")
        ratios = _step_ratios(st["w1_between_inputs"], floor=1e-12)
        period = wasserstein1(trajs[0][-1], trajs[0][-5])
        out["cases"].append(name)
        out[name] = {**st, "beta": 1e-3, "kappa": 1.0, "paper_tau": bound.paper,
                     "corrected_tau": bound.corrected,
                     "max_step_ratio": float(ratios.max()),
                     "min_step_ratio": float(ratios.min()),
                     "measured_rate": float(ratios[-1]), "predicted_rate": 1.0,
                     "period4_gap": period, "limit_gap": math.nan, "fixed_point": np.zeros(2)}
    return out


def _prop26_rows(fp) -> list:
    coll = [c for c in fp["cases"] if c.startswith("collapse")]
    collapse_trials = [{"ratio": fp[c]["max_step_ratio"], "paper": math.nan,
                        "corrected": fp[c]["kappa"], "sharpened": math.nan, "beta": fp[c]["beta"],
                        "dim": len(fp[c]["fixed_point"]), "n_tokens": fp[c]["n_tokens"]} for c in coll]
    gaps = ", ".join(f"beta={fp[c]['beta']:g}: W1(mu^H, delta_x*)="
                     f"{fp[c]['w1_to_fixed_point'][-1]:.1e}" for c in coll)
    rates = ", ".join(f"{fp[c]['measured_rate']:.3f}" for c in coll)
    taus = ", ".join(f"{fp[c]['corrected_tau']:.2g}" for c in coll)
    cert = fp["certificate_T24"]
    cert_trials = [{"ratio": r, "paper": cert["paper_tau"], "corrected": cert["corrected_tau"],
                    "sharpened": math.nan, "beta": 0.01, "dim": 2, "k_ell": 0.5}
                   for r in np.concatenate([cert["layer_ratios"], cert["pair_ratios"]])]
    rot = fp["rotation_dirac"]
    rot_tok = fp["rotation_tokens"]
    rot_trials = [{"ratio": r, "paper": rot["paper_tau"], "corrected": rot["corrected_tau"],
                   "sharpened": math.nan, "beta": 1e-3, "dim": 2, "n_tokens": 1, "k_ell": 1.0}
                  for r in _step_ratios(rot["w1_between_inputs"], floor=1e-12)]
    return [
        _row("prop26_collapse", "Prop 26 [D]: kappa=Lip(f)Lip(l)<1 => max_i|x_i^{h+1}-x*|_inf <= "
             "kappa max_i|x_i^h-x*|_inf, x*=f(l(x*)) (collapse, every beta)", "construction",
             collapse_trials, "paper 004 Prop. 26, Remark 27; spec section 5.2, T23",
             note=f"paper has no such statement (its fixed point is 'unclear', Remark 27): the "
                  f"fixed point is the single atom x*; {gaps}; asymptotic rates {rates} vs "
                  f"spectral radius {fp[coll[0]]['predicted_rate']:.3f} of D(f o l)(x*); no "
                  f"tau(T) bound certifies this (corrected: {taus})"),
        _row("prop26_certificate", "Prop 26 via Thm 23: per-layer W1 contraction rate tau(T) "
             "[spec worked example: A=I, beta=0.01, W^V=0.5I]", "construction", cert_trials,
             "paper 004 Thm. 23, Prop. 26; spec section 4.3, T24",
             note="measured per-layer ratio -> 0.5 = K_l (the Dirac lower bound), above the "
                  "printed 0.167"),
        _row("prop26_rotation", "Prop 26 via Thm 23: printed tau(T) < 1 => contraction to one "
             "input-independent fixed point [W^V = 90-degree rotation, beta=1e-3]", "construction",
             rot_trials, "paper 004 Thm. 23, Prop. 26, Remark 27; spec section 5.2",
             note=f"Dirac inputs rotate with period 4 and keep their W1 distance "
                  f"({rot['w1_between_inputs'][0]:.3f} -> {rot['w1_between_inputs'][-1]:.3f}); "
                  f"token sets "
                  f"collapse to their mean, which keeps rotating: W1(mu^H, delta_0) = "
                  f"{rot_tok['w1_to_fixed_point'][-1]:.3f}, W1(mu^H, mu^(H-4)) = "
                  f"{rot_tok['period4_gap']:.1e}"),
    ]
