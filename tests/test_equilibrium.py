"""Zero-temperature equilibrium measures against their closed forms (particles_pde_reference.md sec. 3).

Every closed-form density used here is a symmetric Beta law on [-R, R]:
rho ∝ (R^2 - x^2)^a, whose cell masses come from the regularised incomplete beta
function. Errors are measured as the L1 distance of cell masses (total
variation, x2) and must shrink under refinement and stay below an absolute bound.
"""
import numpy as np
import pytest
from scipy.special import betainc, gamma

from rieszflow.solvers.equilibrium import equilibrium_on_mesh, equilibrium_particles
from rieszflow.solvers.mckean_vlasov import MeanFieldProblem, interval_mesh, rectangle_mesh


def _beta_cell_masses(dom, R, a):
    left, right = dom.cell_edges_1d()
    F = lambda x: betainc(a + 1, a + 1, np.clip((x / R + 1) / 2, 0.0, 1.0))  # noqa: E731
    return F(right) - F(left)


def _beta_cdf(x, R, a):
    return betainc(a + 1, a + 1, np.clip((x / R + 1) / 2, 0.0, 1.0))


def _riesz_radius(s, d, lam, gam):
    """Spec sec. 3.1: R^{s+2} = (lam |s| / (d gam)) Gamma((d-s)/2) Gamma(2+s/2) / Gamma(d/2)."""
    return ((lam * abs(s) / (d * gam)) * gamma((d - s) / 2) * gamma(2 + s / 2) / gamma(d / 2)) ** (1 / (s + 2))


def _l1_and_energy(L, n, V, s, lam, R, a):
    dom = interval_mesh(-L, L, n)
    res = equilibrium_on_mesh(MeanFieldProblem.create(dom, V, s=s, lam=lam, beta=np.inf))
    assert res.converged and res.kkt_residual <= 1e-12
    return np.abs(res.rho * dom.volumes - _beta_cell_masses(dom, R, a)).sum(), res


def test_semicircle_log_gas():
    """V = x^2/2, lam = 2: (1/2pi) sqrt(4 - x^2) on [-2, 2], minimal energy 3/4 (spec sec. 3.1)."""
    V = lambda x: 0.5 * x[:, 0] ** 2  # noqa: E731
    e1, r1 = _l1_and_energy(2.5, 100, V, 0.0, 2.0, 2.0, 0.5)
    e2, r2 = _l1_and_energy(2.5, 200, V, 0.0, 2.0, 2.0, 0.5)
    assert e2 < 0.5 * e1 and e2 < 2e-4  # measured 3.2e-4 -> 1.1e-4 (order 1.5)
    assert abs(r2.energy - 0.75) < 0.5 * abs(r1.energy - 0.75) and abs(r2.energy - 0.75) < 5e-5


def test_arcsine_log_gas_on_interval():
    """No field on [-1, 1]: arcsine law 1/(pi sqrt(1 - x^2)), energy (1/2) log 2 (spec sec. 3.2)."""
    V = lambda x: np.zeros(x.shape[0])  # noqa: E731
    e1, r1 = _l1_and_energy(1.0, 100, V, 0.0, 1.0, 1.0, -0.5)
    e2, r2 = _l1_and_energy(1.0, 400, V, 0.0, 1.0, 1.0, -0.5)
    assert e2 < 0.7 * e1 and e2 < 1e-2  # measured 0.0131 -> 0.0067 (order 1/2: edge singularity)
    target = 0.5 * np.log(2.0)
    assert abs(r2.energy - target) < abs(r1.energy - target) < 2e-3
    U = r2.multiplier  # the equilibrium potential (lam g * rho) is constant = (lam) log 2 on the support
    assert U == pytest.approx(np.log(2.0), abs=2e-3)


@pytest.mark.parametrize("s,W", [(0.3, 1.340322), (0.7, 3.127419)])
def test_marcel_riesz_law_on_interval(s, W):
    """0 < s < 1 on [-1, 1]: rho ∝ (1 - x^2)^{(s-1)/2}; minimal energy W_s/2 with W_s of the spec."""
    V = lambda x: np.zeros(x.shape[0])  # noqa: E731
    e1, r1 = _l1_and_energy(1.0, 100, V, s, 1.0, 1.0, (s - 1) / 2)
    e2, r2 = _l1_and_energy(1.0, 400, V, s, 1.0, 1.0, (s - 1) / 2)
    assert e2 < 0.7 * e1 and e2 < 1e-2
    W_formula = gamma((1 - s) / 2) * gamma(1 + s / 2) / gamma(0.5)
    assert W_formula == pytest.approx(W, abs=1e-6)
    assert abs(r2.energy - W / 2) < abs(r1.energy - W / 2) < 5e-3


def test_riesz_with_quadratic_field_1d():
    """s = 0.5, lam = 1.3, V = 0.7 x^2: rho ∝ (R^2 - x^2)^{(s+1)/2}, R = 1.35875 (spec sec. 3.1)."""
    s, lam, gam = 0.5, 1.3, 0.7
    R = _riesz_radius(s, 1, lam, gam)
    assert R == pytest.approx(1.35875, abs=1e-5)
    V = lambda x: gam * x[:, 0] ** 2  # noqa: E731
    e1, r1 = _l1_and_energy(2.0, 100, V, s, lam, R, (s + 1) / 2)
    e2, r2 = _l1_and_energy(2.0, 200, V, s, lam, R, (s + 1) / 2)
    assert e2 < 0.5 * e1 and e2 < 1e-4  # measured 1.2e-4 -> 3.4e-5
    dom = interval_mesh(-2.0, 2.0, 200)
    edge = np.abs(dom.centers[r2.support, 0]).max()
    assert abs(edge - R) <= dom.spacing[0]


def test_negative_s_uses_abs_s_in_radius():
    """-2 < s < 0 (g = -|x|^{-s}): the spec's R formula holds with |s| in place of s."""
    s, lam, gam = -0.5, 1.3, 0.7
    R = _riesz_radius(s, 1, lam, gam)
    dom = interval_mesh(-2.5, 2.5, 400)
    res = equilibrium_on_mesh(MeanFieldProblem.create(dom, lambda x: gam * x[:, 0] ** 2, s=s, lam=lam,
                                                      beta=np.inf))
    edge = np.abs(dom.centers[res.support, 0]).max()
    assert abs(edge - R) <= 1.5 * dom.spacing[0]
    inner = np.abs(dom.centers[:, 0]) < 0.8 * R
    exact = _beta_cell_masses(dom, R, (s + 1) / 2) / dom.volumes
    np.testing.assert_allclose(res.rho[inner], exact[inner], rtol=2e-3)


def test_active_set_agrees_with_slsqp():
    dom = interval_mesh(-2.0, 2.0, 40)
    prob = MeanFieldProblem.create(dom, lambda x: 0.5 * x[:, 0] ** 2 + 0.2 * x[:, 0], s=0.5, lam=1.0,
                                   beta=np.inf)
    a = equilibrium_on_mesh(prob)
    b = equilibrium_on_mesh(prob, method="slsqp", max_iter=500)
    assert a.converged and a.kkt_residual < 1e-12
    assert b.kkt_residual < 1e-6
    assert abs(a.energy - b.energy) < 1e-9 and a.energy <= b.energy + 1e-15
    assert np.dot(dom.volumes, np.abs(a.rho - b.rho)) < 1e-4
    # Frostman conditions: V + lam g*rho = c on the support, >= c off it
    U = prob.effective_potential(a.rho)
    np.testing.assert_allclose(U[a.support], a.multiplier, atol=1e-12)
    assert np.all(U[~a.support] >= a.multiplier - 1e-12)


def _disk_cell_masses(dom, density, k=12):
    hx, hy = dom.spacing
    u = (np.arange(k) + 0.5) / k - 0.5
    sub = dom.centers[:, None, None, :] + np.stack(np.meshgrid(u * hx, u * hy, indexing="ij"), -1)[None]
    return density(sub).mean(axis=(1, 2)) * dom.volumes


def test_2d_log_gas_uniform_disk():
    """d = 2, s = 0, V = |x|^2/2, lam = 1: uniform on the unit disk (circular law), energy 3/8."""
    errs, energies = [], []
    for n in (16, 24):
        dom = rectangle_mesh((-1.25, -1.25), (1.25, 1.25), (n, n))
        res = equilibrium_on_mesh(MeanFieldProblem.create(dom, lambda x: 0.5 * (x ** 2).sum(1), s=0.0, lam=1.0,
                                                          beta=np.inf))
        assert res.converged
        exact = _disk_cell_masses(dom, lambda p: ((p ** 2).sum(-1) < 1.0) / np.pi)
        errs.append(np.abs(res.rho * dom.volumes - exact).sum())
        energies.append(res.energy)
        inner = np.hypot(*dom.centers.T) < 0.7
        np.testing.assert_allclose(res.rho[inner], 1 / np.pi, rtol=0.02)
    assert errs[1] < 0.75 * errs[0] and errs[1] < 0.05  # measured 0.063 -> 0.037 (jump at r = 1)
    assert abs(energies[1] - 0.375) < abs(energies[0] - 0.375) < 2e-3


def test_2d_riesz_s1_with_quadratic_field():
    """d = 2, s = 1, V = |x|^2/2, lam = 1: rho ∝ (R^2 - |x|^2)^{1/2}, R^3 = 3 pi / 4 (spec sec. 3.1)."""
    s, lam, gam = 1.0, 1.0, 0.5
    R = _riesz_radius(s, 2, lam, gam)
    C = gamma(2 + s / 2) / (np.pi * gamma((s - 2 + 4) / 2))
    density = lambda p: C * R ** (-(s + 2)) * np.sqrt(np.clip(R ** 2 - (p ** 2).sum(-1), 0, None))  # noqa: E731
    errs = []
    for n in (16, 24):
        dom = rectangle_mesh((-1.6, -1.6), (1.6, 1.6), (n, n))
        res = equilibrium_on_mesh(MeanFieldProblem.create(dom, lambda x: gam * (x ** 2).sum(1), s=s, lam=lam,
                                                          beta=np.inf))
        assert res.converged
        errs.append(np.abs(res.rho * dom.volumes - _disk_cell_masses(dom, density)).sum())
    assert errs[1] < 0.75 * errs[0] and errs[1] < 0.02  # measured 0.021 -> 0.012


def test_particles_semicircle():
    """N particles at the minimum of E_N: Kolmogorov distance to the semicircle O(1/N), E_N -> 3/4."""
    rng = np.random.default_rng(8)
    ks, gaps = [], []
    for n in (50, 200):
        w0 = np.sort(rng.uniform(-1, 1, n))[:, None]
        res = equilibrium_particles(lambda w: 0.5 * w[:, 0] ** 2, lambda w: w, w0, s=0.0, lam=2.0,
                                    tol=1e-6, method="numpy")
        assert res.converged
        x = np.sort(res.omega[:, 0])
        F = _beta_cdf(x, 2.0, 0.5)
        ks.append(max(np.max(np.abs(F - np.arange(1, n + 1) / n)), np.max(np.abs(F - np.arange(n) / n))))
        gaps.append(0.75 - res.energy)  # the diagonal is excluded: E_N < min E by O(log N / N)
    assert ks[1] < 0.5 * ks[0] and ks[1] < 1.5 / 200  # measured 0.0139 -> 0.0036
    assert 0 < gaps[1] < 0.6 * gaps[0]


def test_particles_arcsine_on_interval_with_bounds():
    rng = np.random.default_rng(9)
    n = 100
    res = equilibrium_particles(lambda w: np.zeros(w.shape[0]), np.zeros_like, rng.uniform(-0.5, 0.5, (n, 1)),
                                s=0.0, lam=1.0, bounds=[(-1.0, 1.0)], tol=1e-6, method="numpy")
    assert res.converged
    x = np.sort(res.omega[:, 0])
    F = _beta_cdf(x, 1.0, -0.5)
    assert np.max(np.abs(F - (np.arange(n) + 0.5) / n)) < 1.0 / n
    assert x[0] == pytest.approx(-1.0, abs=1e-12) and x[-1] == pytest.approx(1.0, abs=1e-12)


def test_particles_and_grid_agree_on_the_uniform_disk():
    """2-D log gas, V = |x|^2/2, lam = 1: uniform on the unit disk, E r^2 = 1/2, E r = 2/3.

    Exact finite-N oracle (virial identity): at a critical point of H_N, summing
    x_i . grad_i H_N = 0 gives mean |x_i|^2 = lam (N - 1) / (2N) for the log kernel.
    """
    rng = np.random.default_rng(10)
    n = 150
    res = equilibrium_particles(lambda w: 0.5 * (w ** 2).sum(1), lambda w: w, 0.5 * rng.normal(size=(n, 2)),
                                s=0.0, lam=1.0, tol=1e-6, method="numpy")
    assert res.converged
    r = np.hypot(*res.omega.T)
    assert np.mean(r ** 2) == pytest.approx((n - 1) / (2 * n), abs=1e-6)
    assert 0.85 < r.max() < 1.0  # outermost ring sits about half a spacing inside R = 1
    assert abs(np.mean(r) - 2 / 3) < 0.01  # measured 0.665
    dom = rectangle_mesh((-1.25, -1.25), (1.25, 1.25), (20, 20))
    grid = equilibrium_on_mesh(MeanFieldProblem.create(dom, lambda x: 0.5 * (x ** 2).sum(1), s=0.0, lam=1.0,
                                                       beta=np.inf))
    m = grid.rho * dom.volumes
    assert np.dot(m, (dom.centers ** 2).sum(1)) == pytest.approx(np.mean(r ** 2), abs=0.01)
    assert np.dot(m, np.hypot(*dom.centers.T)) == pytest.approx(np.mean(r), abs=0.01)


def test_particle_virial_identity_1d():
    """1-D log gas, V = x^2/2, lam = 2 (semicircle on [-2, 2]): mean x_i^2 = (N - 1)/N exactly."""
    n = 60
    w0 = np.linspace(-1, 1, n)[:, None]
    res = equilibrium_particles(lambda w: 0.5 * w[:, 0] ** 2, lambda w: w, w0, s=0.0, lam=2.0, tol=1e-6,
                                method="numpy")
    assert res.converged and res.grad_norm <= 1e-6
    assert np.mean(res.omega[:, 0] ** 2) == pytest.approx((n - 1) / n, abs=1e-6)


def test_errors():
    dom = interval_mesh(-1.0, 1.0, 10)
    with pytest.raises(ValueError, match="lam > 0"):
        equilibrium_on_mesh(MeanFieldProblem.create(dom, np.zeros(10), s=0.0, lam=0.0, beta=np.inf))
    prob = MeanFieldProblem.create(dom, np.zeros(10), s=0.0, lam=1.0, beta=np.inf)
    with pytest.raises(ValueError, match="method"):
        equilibrium_on_mesh(prob, method="ipopt")
    with pytest.raises(ValueError, match="bounds"):
        equilibrium_particles(lambda w: w[:, 0], np.ones_like, np.zeros((3, 1)) + [[0.1], [0.2], [0.3]], s=0.0,
                              lam=1.0, bounds=[(1.0, -1.0)])
    with pytest.raises(ValueError, match="omega0"):
        equilibrium_particles(lambda w: w[:, 0], np.ones_like, np.array([[0.1], [np.nan]]), s=0.0, lam=1.0)
    w0 = np.array([[0.1], [0.4], [0.9]])
    with pytest.raises(ValueError, match="V and grad_V must be finite"):  # a hard wall written as V = inf
        equilibrium_particles(lambda w: np.where(w[:, 0] > 0.5, np.inf, w[:, 0] ** 2), lambda w: 2 * w, w0,
                              s=0.0, lam=1.0)
    with pytest.raises(ValueError, match="V and grad_V must be finite"):
        equilibrium_particles(lambda w: w[:, 0] ** 2, lambda w: np.where(w > 0.5, np.nan, 2 * w), w0, s=0.0,
                              lam=1.0)
