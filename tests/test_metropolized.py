"""The Metropolized Euler-Maruyama step (engine.metropolized): its sweep against a NumPy transcription
of the formulas, exact invariance of the Gibbs measure at a step where Euler-Maruyama is biased,
and its use in the mean-field bias study."""
import dataclasses
import math

import numpy as np
import pytest
import scipy.integrate

from rieszflow.engine.energy.interaction import riesz_kernel
from rieszflow.engine.metropolized import MetropolizedState, metropolized_langevin
from rieszflow.engine.space import Ball, Box, Interval


def _grad_g(w, s):
    """Gradient of g_s(w) for w of shape (..., d)."""
    r2 = np.sum(w * w, -1, keepdims=True)
    if s == 0.0:
        return -w / r2
    return -abs(s) * r2 ** (-0.5 * s - 1.0) * w


def _reference_sweep(x, xi, log_u, lo, hi, gamma, lam, s, h, beta):
    """One sweep written from the module docstring, particle by particle, in NumPy."""
    x = x.copy()
    n = len(x)
    out = np.zeros(n, dtype=int)

    def h_and_b(z, k):
        others = np.delete(x, k, axis=0)
        w = z - others
        e = riesz_kernel(np.sqrt(np.sum(w * w, 1)), s).sum()
        b = -gamma * z - lam / n * _grad_g(w, s).sum(0)
        return 0.5 * gamma * z @ z + lam / n * e, b

    for k in range(n):
        hx, bx = h_and_b(x[k], k)
        y = x[k] + h * bx + math.sqrt(2 * h / beta) * xi[k]
        if np.any(y < lo) or np.any(y > hi):
            out[k] = -1
            continue
        hy, by = h_and_b(y, k)
        la = (-beta * (hy - hx) - beta / (4 * h) * (np.sum((x[k] - y - h * by) ** 2)
                                                  - np.sum((y - x[k] - h * bx) ** 2)))
        if log_u[k] < la:
            out[k] = 1
            x[k] = y
    return x, out


@pytest.mark.parametrize("d,s,lam,h", [(1, -1.0, 1.0, 0.05), (2, 0.0, 1.0, 0.05), (3, 1.0, 1.0, 0.02),
                                       (3, 1.0, 2.0, 0.3), (2, 0.5, 1.5, 0.1)])
def test_sweep_matches_reference(d, s, lam, h):
    rng = np.random.default_rng(3 + d)
    n, beta, gamma = 9, 4.0, 1.0
    lo, hi = -np.full(d, 1.5), np.full(d, 1.5)
    x = rng.uniform(-1, 1, (n, d))
    x[1] = x[0] + 0.01                                # a close pair: its proposals are rejected
    xi, log_u = rng.standard_normal((n, d)), np.log(rng.random(n))
    init, step = metropolized_langevin(Box(tuple(lo), tuple(hi)) if d > 1 else Interval(-1.5, 1.5), h, beta,
                                       gamma=gamma, lam=lam, s=s)
    st = step(init(x), (xi, log_u))
    ref, out = _reference_sweep(x, xi, log_u, lo, hi, gamma, lam, s, h, beta)
    np.testing.assert_allclose(st.omega, ref, rtol=0, atol=1e-12)
    assert st.n_accepted.tolist() == (out == 1).astype(int).tolist()
    assert st.n_outside == int(np.sum(out == -1))
    assert 0 < np.sum(out == 1) and st.step == 1
    np.testing.assert_array_equal(x[2:], init(x).omega[2:])      # the input was not modified


def test_invariant_law_exact_without_interaction():
    """lam = 0: N independent MALA chains of N(0, 1/(beta gamma)); at eta = 0.5 Euler-Maruyama's
    invariant variance is 1/(beta gamma (1 - gamma eta / 2)) = 4/3 times larger."""
    beta, gamma, eta, n = 2.0, 1.0, 0.5, 40000
    init, step = metropolized_langevin(Interval(-30.0, 30.0), eta, beta, gamma=gamma)
    rng = np.random.default_rng(5)
    st = init(rng.standard_normal((n, 1)) / math.sqrt(beta * gamma))
    for _ in range(4):
        st = step(st, st.draw_noise(rng))
    var = 1.0 / (beta * gamma)
    se = var * math.sqrt(2.0 / n)                   # sd of the sample variance of a normal law
    assert abs(st.omega.var() - var) < 4 * se
    assert 0.8 < st.acceptance_rate < 1.0


def test_invariant_law_exact_with_interaction():
    """Two particles in 1-D with the Coulomb kernel g = -|r| (s = -1): v = (x1 - x2)/sqrt 2 has the
    density exp(-beta (gamma v^2 / 2 - lam |v| / sqrt 2)) (H = gamma |x|^2/2 + lam g(x1 - x2) / 2), and
    K independent systems started from it keep E v^2 after three sweeps at a large step."""
    beta, gamma, lam, eta, k = 2.0, 1.0, 1.0, 0.4, 6000
    dens = lambda v: np.exp(-beta * (0.5 * gamma * v * v - lam * abs(v) / math.sqrt(2)))  # noqa: E731
    z = scipy.integrate.quad(dens, -12, 12, points=[0])[0]
    m2 = scipy.integrate.quad(lambda v: v * v * dens(v), -12, 12, points=[0])[0] / z
    m4 = scipy.integrate.quad(lambda v: v ** 4 * dens(v), -12, 12, points=[0])[0] / z
    rng = np.random.default_rng(8)
    grid = np.linspace(-12, 12, 200001)                 # exact draws of v by inverse CDF on a fine grid
    cdf = np.concatenate([[0], np.cumsum(0.5 * (dens(grid[1:]) + dens(grid[:-1])) * np.diff(grid))])
    v = np.interp(rng.random(k) * cdf[-1], cdf, grid)
    u = rng.standard_normal(k) / math.sqrt(beta * gamma)
    init, step = metropolized_langevin(Interval(-20.0, 20.0), eta, beta, gamma=gamma, lam=lam, s=-1.0)
    out = np.empty(k)
    for i in range(k):
        st = init(np.array([[u[i] + v[i]], [u[i] - v[i]]]) / math.sqrt(2))
        for _ in range(3):
            st = step(st, st.draw_noise(rng))
        out[i] = (st.omega[0, 0] - st.omega[1, 0]) / math.sqrt(2)
    se = math.sqrt((m4 - m2 * m2) / k)
    assert abs(np.mean(out ** 2) - m2) < 4 * se, (np.mean(out ** 2), m2, se)


def test_invariant_law_exact_log_kernel_2d():
    """Two particles in 2-D with the log kernel (s = 0): w = (x1 - x2)/sqrt 2 has the density
    |w|^(beta lam / 2) exp(-beta gamma |w|^2 / 2), so with beta = 2, gamma = lam = 1 its radius has
    the density r^2 exp(-r^2) (polar Jacobian r) and E|w|^2 = 3/2, E|w|^4 = 15/4; K systems started
    from it keep E|w|^2 after three sweeps at a large step."""
    beta, gamma, lam, eta, k = 2.0, 1.0, 1.0, 0.4, 6000
    rng = np.random.default_rng(9)
    r = np.sqrt(rng.gamma(1.5, 1.0, k))                  # r^2 ~ Gamma(3/2, 1): density r^2 exp(-r^2) in r
    phi = rng.uniform(0, 2 * np.pi, k)
    w = np.stack([r * np.cos(phi), r * np.sin(phi)], 1)
    u = rng.standard_normal((k, 2)) / math.sqrt(beta * gamma)
    init, step = metropolized_langevin(Box((-20.0, -20.0), (20.0, 20.0)), eta, beta, gamma=gamma, lam=lam, s=0.0)
    out = np.empty(k)
    for i in range(k):
        st = init(np.stack([u[i] + w[i], u[i] - w[i]]) / math.sqrt(2))
        for _ in range(3):
            st = step(st, st.draw_noise(rng))
        out[i] = np.sum((st.omega[0] - st.omega[1]) ** 2) / 2
    se = math.sqrt((15 / 4 - 9 / 4) / k)
    assert abs(out.mean() - 1.5) < 4 * se, (out.mean(), se)


def test_bad_input():
    init, step = metropolized_langevin(Box((-1.0, -1.0), (1.0, 1.0)), 0.1, 1.0, lam=1.0)
    with pytest.raises(TypeError, match="Box"):
        metropolized_langevin(Ball(1.0), 0.1, 1.0)
    with pytest.raises(ValueError, match="eta"):
        metropolized_langevin(Interval(-1, 1), -0.1, 1.0)
    with pytest.raises(ValueError, match="lam"):
        metropolized_langevin(Interval(-1, 1), 0.1, 1.0, lam=-1.0)
    with pytest.raises(ValueError, match="outside"):
        init(np.array([[0.0, 0.0], [2.0, 0.0]]))
    with pytest.raises(ValueError, match="N >= 2"):
        init(np.array([[0.0, 0.0]]))
    with pytest.raises(ValueError, match="d=2"):
        init(np.zeros((3, 3)))
    st = init(np.array([[0.0, 0.0], [0.5, 0.0]]))
    with pytest.raises(ValueError, match="noise"):
        step(st, (np.zeros((2, 3)), np.zeros(2)))
    assert math.isnan(st.acceptance_rate) and isinstance(st, MetropolizedState)


def test_bias_study_integrator():
    """The bias study's triples with integrator='metropolized': t = 0 rows exact, acceptance recorded,
    the configuration round-trips, and the W1 study refuses it."""
    from rieszflow.studies.mean_field.bias import bias_batch_task, bias_large_config
    from rieszflow.studies.mean_field.config import MeanFieldConfig, ProblemConfig

    cfg = bias_large_config()
    c = next(p for p in cfg.problems if p.name == "box")
    rect = next(p for p in cfg.problems if p.name == "rectangle")
    assert c.integrator == "metropolized" and c.to_dict()["integrator"] == "metropolized"
    assert "integrator" not in rect.to_dict() and "integrator" not in cfg.to_dict()   # older files resume
    over = cfg.replace(integrator="euler")
    assert {p.integrator for p in over.problems} == {"euler"} and over.to_dict()["integrator"] == "euler"
    with pytest.raises(ValueError, match="integrator='rk4'"):
        cfg.replace(integrator="rk4")
    cm = dataclasses.replace(c, times=(0.0, 0.05))
    assert ProblemConfig.from_dict(cm.to_dict()) == cm
    v = bias_batch_task(cm, 1, 40, 0, 2, 0.025, 1, 0, None, coupled=True)
    assert 0.9 < v["acceptance"] <= 1.0
    assert v["f"].shape == (2, 2, 2, 3) and np.isfinite(v["f2n"]).all()
    np.testing.assert_allclose(v["f2n"][:, 0, 0], v["f"][:, :, 0, 0].mean(1), atol=1e-15)  # m1 at t = 0
    with pytest.raises(ValueError, match="integrator"):
        dataclasses.replace(c, integrator="leapfrog")
    with pytest.raises(ValueError, match="bias study only"):
        MeanFieldConfig(problems=(dataclasses.replace(rect, integrator="metropolized"),))
