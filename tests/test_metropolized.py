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


def _reference_sweep(x, xi, log_u, lo, hi, gamma, lam, s, h, beta, *, simultaneous=False, eps=0.0,
                     knife_edge=None):
    """One sweep written from the module docstring, particle by particle, in NumPy.

    The pair energy comes from ``riesz_kernel`` and the drift from the engine's NumPy pair
    sums (``make_interaction(..., method="numpy").grad``, mean-field normalisation), neither
    from the Numba kernel. With ``knife_edge`` (+1 or -1 per particle) the uniform
    of particle k is put 1e-9 below (accept) or above (reject) its own log acceptance ratio, so
    that an error above 1e-9 in that ratio flips the decision; returns the log_u used."""
    from rieszflow.solvers.particles import make_interaction

    x = x.copy()
    frozen = x.copy()
    n, d = x.shape
    inter = make_interaction(s=s, lam=lam, d=d, method="numpy", softening=eps)
    out = np.zeros(n, dtype=int)
    log_u = np.array(log_u, dtype=float)

    def h_and_b(z, k):
        conf = (frozen if simultaneous else x).copy()
        others = np.delete(conf, k, axis=0)
        e = riesz_kernel(np.sqrt(np.sum((z - others) ** 2, 1)), s, softening=eps).sum()
        conf[k] = z
        b = -gamma * z - np.asarray(inter.grad(conf))[k]     # mean-field grad: (lam/N) sum_l grad g
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
        if knife_edge is not None:
            log_u[k] = la - 1e-9 * knife_edge[k] * max(1.0, abs(la))
        if log_u[k] < la:
            out[k] = 1
            x[k] = y
    return x, out, log_u


CASES = [(1, -1.0, 1.0, 0.05, 0.0), (1, -0.5, 1.0, 0.05, 0.0), (2, 0.0, 1.0, 0.05, 0.0),
         (3, 1.0, 1.0, 0.02, 0.0), (3, 1.0, 2.0, 0.3, 0.0), (2, 0.5, 1.5, 0.1, 0.0), (3, 1.0, 1.0, 0.05, 0.05)]


@pytest.mark.parametrize("sweep", ["sequential", "simultaneous"])
@pytest.mark.parametrize("d,s,lam,h,eps", CASES)
def test_sweep_matches_reference(d, s, lam, h, eps, sweep):
    rng = np.random.default_rng(3 + d + int(10 * h))
    n, beta, gamma = 9, 4.0, 1.0
    lo, hi = -np.full(d, 2.5), np.full(d, 2.5)
    x = rng.uniform(-1, 1, (n, d))
    x[1] = x[0] + 0.01                                # a close pair
    xi = rng.standard_normal((n, d))
    space = Box(tuple(lo), tuple(hi)) if d > 1 else Interval(-2.5, 2.5)
    init, step = metropolized_langevin(space, h, beta, gamma=gamma, lam=lam, s=s, softening=eps, sweep=sweep)
    sim = sweep == "simultaneous"
    edge = np.where(np.arange(n) % 3 == 0, -1.0, 1.0)            # every third particle rejected
    _, want, log_u = _reference_sweep(x, xi, np.zeros(n), lo, hi, gamma, lam, s, h, beta, simultaneous=sim,
                                      eps=eps, knife_edge=edge)
    ref, out, _ = _reference_sweep(x, xi, log_u, lo, hi, gamma, lam, s, h, beta, simultaneous=sim, eps=eps)
    assert out.tolist() == want.tolist() and np.sum(out == 0) >= 2 and np.sum(out == 1) >= 3
    st = step(init(x), (xi, log_u))
    np.testing.assert_allclose(st.omega, ref, rtol=0, atol=1e-12)
    assert st.n_accepted.tolist() == (out == 1).astype(int).tolist()
    assert st.n_outside == int(np.sum(out == -1)) and st.step == 1


def test_simultaneous_sweep_is_euler_when_all_accepted():
    """sweep='simultaneous' with every move accepted is exactly the engine's Euler-Maruyama step."""
    from rieszflow.engine.simulate import projected_langevin
    from rieszflow.solvers.particles import make_interaction, quadratic_potential

    rng = np.random.default_rng(21)
    n, d, eta, beta = 40, 3, 0.02, 10.0
    x = rng.normal(size=(n, d)) * 0.5
    xi = rng.standard_normal((n, d))
    box = Box((-3.0,) * 3, (3.0,) * 3)
    h_n = quadratic_potential(1.0) + make_interaction(s=1.0, lam=1.0, d=d)
    e_init, e_step = projected_langevin(h_n.grad, box, eta, beta, grad_scale=1.0, boundary="reflect")
    euler = np.asarray(e_step(e_init(x), xi).omega)
    init, step = metropolized_langevin(box, eta, beta, gamma=1.0, lam=1.0, s=1.0, sweep="simultaneous")
    st = step(init(x), (xi, np.full(n, -np.inf)))
    np.testing.assert_allclose(st.omega, euler, rtol=0, atol=1e-13)
    np.testing.assert_allclose(st.omega.mean(0), (1 - eta) * x.mean(0) + math.sqrt(2 * eta / beta) * xi.mean(0),
                               rtol=0, atol=1e-14)       # the pair forces cancel in the centre of mass
    seq = metropolized_langevin(box, eta, beta, gamma=1.0, lam=1.0, s=1.0)[1](init(x), (xi, np.full(n, -np.inf)))
    assert np.abs(seq.omega - euler).max() > 1e-8          # the sequential sweep is not Euler


def test_coincident_particles():
    """s >= 0: coincident particles have infinite energy (refused); s = -1: a legal state, zero pair force."""
    init, _ = metropolized_langevin(Interval(-2.0, 2.0), 0.1, 1.0, lam=1.0, s=0.0)
    with pytest.raises(ValueError, match="coincident"):
        init(np.array([[0.1], [0.1], [0.3]]))
    init, step = metropolized_langevin(Interval(-2.0, 2.0), 0.1, 1.0, gamma=1.0, lam=1.0, s=-1.0)
    st = step(init(np.array([[0.1], [0.1], [0.3]])), (np.zeros((3, 1)), np.full(3, -np.inf)))
    assert np.isfinite(st.omega).all()
    # particle 0 feels only particle 2 (force -|r|' pushes it away: to the left) and the field
    np.testing.assert_allclose(st.omega[0, 0], 0.1 + 0.1 * (-0.1 - 1.0 / 3.0), rtol=0, atol=1e-14)


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
    with pytest.raises(ValueError, match="pair"):
        step(st, np.zeros((2, 2)))
    with pytest.raises(ValueError, match="sweep"):
        metropolized_langevin(Interval(-1, 1), 0.1, 1.0, sweep="backwards")
    assert math.isnan(st.acceptance_rate) and isinstance(st, MetropolizedState)


def test_bias_study_integrator():
    """The bias study's triples with integrator='metropolized': t = 0 rows exact, acceptance recorded,
    the configuration round-trips, and the W1 study refuses it."""
    from rieszflow.studies.mean_field.bias import bias_batch_task, bias_large_config
    from rieszflow.studies.mean_field.config import MeanFieldConfig, ProblemConfig

    cfg = bias_large_config()
    box = next(p for p in cfg.problems if p.name == "box")
    assert box.integrator == "euler" and box.softening == 0.1     # the preset's box: softened, Euler
    c = dataclasses.replace(box, integrator="metropolized")
    rect = next(p for p in cfg.problems if p.name == "rectangle")
    assert c.to_dict()["integrator"] == "metropolized"
    assert "integrator" not in rect.to_dict() and "integrator" not in cfg.to_dict()   # older files resume
    over = cfg.replace(integrator="metropolized").replace(integrator="euler")
    assert {p.integrator for p in over.problems} == {"euler"} and "integrator" not in over.to_dict()
    assert [p.get("integrator", "euler") for p in over.to_dict()["problems"]] == ["euler"] * 3
    with pytest.raises(ValueError, match="integrator='rk4'"):
        cfg.replace(integrator="rk4")
    with pytest.raises(ValueError, match="must be a string"):
        cfg.replace(integrator=0)
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
