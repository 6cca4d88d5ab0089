"""Self-consistent Gibbs densities, free energy, rate functions and tilted minimisation.

Oracles: exp(-beta V)/Z when lam = 0; the discrete identity
F = -(1/beta) log Z - (lam/2) int rho (g*rho) at a fixed point; the rate function
at lam = 0 equals the relative entropy KL(mu | Gibbs) exactly; the Gaussian
tilt (rate beta a^2/2); convergence of the Gibbs density to the zero-temperature
equilibrium as beta grows; a seeded chi-square test for histograms of samples.
"""
import numpy as np
import pytest
import scipy.special

from rieszflow.solvers.equilibrium import equilibrium_on_mesh
from rieszflow.solvers.gibbs import empirical_density, free_energy, gibbs_density, rate_function, rate_infimum
from rieszflow.solvers.mckean_vlasov import MeanFieldProblem, disk_mesh, interval_mesh, rectangle_mesh


@pytest.fixture(scope="module")
def log_gas_1d():
    dom = interval_mesh(-2.0, 2.0, 80)
    return MeanFieldProblem.create(dom, lambda x: 0.5 * x[:, 0] ** 2 + 0.3 * np.sin(2 * x[:, 0]), s=0.0,
                                   lam=1.0, beta=5.0)


def test_lam_zero_is_boltzmann():
    dom = rectangle_mesh((-1.0, -1.0), (1.0, 1.0), (7, 5))
    prob = MeanFieldProblem.create(dom, lambda x: x[:, 0] ** 2 + x[:, 1], s=0.5, lam=0.0, beta=3.0)
    res = gibbs_density(prob)
    w = np.exp(-3.0 * prob.V)
    np.testing.assert_allclose(res.rho, w / np.dot(dom.volumes, w), rtol=1e-14)
    assert res.converged and res.iterations == 0
    assert res.residual_history.size == 0 and res.residual == 0.0  # exact fixed point: G(U) = V
    assert np.max(np.abs(prob.effective_potential(res.rho) - res.potential)) == 0.0
    assert res.log_partition == pytest.approx(np.log(np.dot(dom.volumes, w)), rel=1e-14)


@pytest.mark.parametrize("method", ["newton", "anderson", "newton_krylov"])
def test_methods_agree_and_fixed_point_holds(log_gas_1d, method):
    res = gibbs_density(log_gas_1d, method=method, tol=1e-11)
    ref = gibbs_density(log_gas_1d, method="newton", tol=1e-13)
    assert res.converged and res.residual <= 1e-11 and res.iterations <= 500
    np.testing.assert_allclose(res.rho, ref.rho, rtol=1e-9)
    U = log_gas_1d.effective_potential(res.rho)
    boltz = np.exp(-log_gas_1d.beta * U)
    np.testing.assert_allclose(res.rho, boltz / np.dot(log_gas_1d.domain.volumes, boltz), rtol=1e-10)


def test_free_energy_identity_and_minimality(log_gas_1d):
    res = gibbs_density(log_gas_1d, tol=1e-13)
    vol = log_gas_1d.domain.volumes
    inter = 0.5 * np.dot(vol * res.rho, log_gas_1d.interaction_potential(res.rho))
    assert res.free_energy == pytest.approx(-res.log_partition / log_gas_1d.beta - inter, abs=1e-12)
    assert free_energy(log_gas_1d, res.rho) == res.free_energy
    rng = np.random.default_rng(5)
    for _ in range(20):  # convex combinations with random densities stay admissible
        q = rng.random(vol.size)
        q /= np.dot(vol, q)
        eps = rng.uniform(1e-3, 0.5)
        mu = (1 - eps) * res.rho + eps * q
        assert rate_function(log_gas_1d, mu, reference=res) > 0.0
    assert abs(rate_function(log_gas_1d, res.rho, reference=res)) <= 1e-12


def test_gibbs_converges_to_zero_temperature_equilibrium():
    """L1(Gibbs_beta, equilibrium) = O(1/beta); Newton handles beta * lam = 1000."""
    dom = interval_mesh(-2.5, 2.5, 120)
    prob = MeanFieldProblem.create(dom, lambda x: 0.5 * x[:, 0] ** 2, s=0.0, lam=2.0, beta=5.0)
    eq = equilibrium_on_mesh(prob)
    errs = []
    for beta in (5.0, 50.0, 500.0):
        g = gibbs_density(prob.replace(beta=beta))
        assert g.converged
        errs.append(np.dot(dom.volumes, np.abs(g.rho - eq.rho)))
    assert errs[0] > 3 * errs[1] > 9 * errs[2]  # measured 0.105, 0.0145, 0.0017
    assert errs[2] < 5e-3


def test_rate_function_lam_zero_is_relative_entropy():
    dom = interval_mesh(-1.0, 2.0, 40)
    prob = MeanFieldProblem.create(dom, lambda x: x[:, 0] ** 2, s=0.0, lam=0.0, beta=2.0)
    pi = gibbs_density(prob).rho
    mu = 1.0 + 0.5 * np.cos(3 * dom.centers[:, 0])
    mu /= np.dot(dom.volumes, mu)
    kl = np.dot(dom.volumes, scipy.special.xlogy(mu, mu / pi))
    assert rate_function(prob, mu) == pytest.approx(kl, rel=1e-12)


def test_low_temperature_rate_function(log_gas_1d):
    eq = equilibrium_on_mesh(log_gas_1d)
    assert abs(rate_function(log_gas_1d, eq.rho, regime="low_temperature", reference=eq)) <= 1e-12
    vol = log_gas_1d.domain.volumes
    unif = np.full(vol.size, 1.0 / vol.sum())
    J = rate_function(log_gas_1d, unif, regime="low_temperature", reference=eq)
    assert J == pytest.approx(log_gas_1d.energy(unif) - eq.energy, rel=1e-14) and J > 0.05


def test_rate_infimum_gaussian_tilt():
    """lam = 0, V = x^2/2: the minimiser over {mean >= a} is N(a, 1/beta) and the rate beta a^2/2."""
    dom = interval_mesh(-6.0, 6.0, 300)
    beta, a = 2.0, 0.7
    prob = MeanFieldProblem.create(dom, lambda x: 0.5 * x[:, 0] ** 2, s=0.0, lam=0.0, beta=beta)
    res = rate_infimum(prob, lambda x: x[:, 0], a)
    assert res.converged and res.constraint == pytest.approx(a, abs=1e-10)
    pi = gibbs_density(prob).rho
    kl = np.dot(dom.volumes, scipy.special.xlogy(res.rho, res.rho / pi))
    assert res.value == pytest.approx(kl, rel=1e-10)
    assert res.value == pytest.approx(beta * a * a / 2, rel=1e-3)  # discretisation O(h^2)
    assert res.theta == pytest.approx(beta * a, rel=1e-3)
    zero = rate_infimum(prob, lambda x: x[:, 0], -0.5)  # the Gibbs mean 0 is already >= -0.5
    assert zero.value == 0.0 and zero.theta == 0.0


@pytest.mark.parametrize("regime", ["fixed_beta", "low_temperature"])
def test_rate_infimum_interacting(log_gas_1d, regime):
    f = np.cos(log_gas_1d.domain.centers[:, 0])
    vol = log_gas_1d.domain.volumes
    base = gibbs_density(log_gas_1d).rho if regime == "fixed_beta" else equilibrium_on_mesh(log_gas_1d).rho
    a = np.dot(vol * base, f) + 0.1
    res = rate_infimum(log_gas_1d, f, a, regime=regime)
    assert res.converged and res.theta > 0 and abs(res.constraint - a) <= 1e-10
    assert res.value == pytest.approx(rate_function(log_gas_1d, res.rho, regime=regime), rel=1e-9)
    # any other feasible density costs more: mix the base with a bump where f is large
    bump = np.exp(-20 * log_gas_1d.domain.centers[:, 0] ** 2)
    bump /= np.dot(vol, bump)
    t = (a - np.dot(vol * base, f)) / (np.dot(vol * bump, f) - np.dot(vol * base, f))
    assert 0 < t < 1
    assert rate_function(log_gas_1d, (1 - t) * base + t * bump, regime=regime) > res.value
    harder = rate_infimum(log_gas_1d, f, a + 0.05, regime=regime)
    assert harder.value > res.value
    with pytest.raises(ValueError, match="max f"):
        rate_infimum(log_gas_1d, f, f.max() + 1.0, regime=regime)


def test_empirical_density_on_all_meshes():
    rng = np.random.default_rng(6)
    dom1 = interval_mesh(-1.0, 1.0, 10)
    pts = rng.uniform(-1, 1, size=(1000, 1))
    h = empirical_density(dom1, pts)
    counts = np.histogram(pts[:, 0], bins=np.linspace(-1, 1, 11))[0]
    np.testing.assert_allclose(h * dom1.volumes * 1000, counts)
    rect = rectangle_mesh((0.0, 0.0), (2.0, 1.0), (4, 3))
    pts2 = rng.uniform([0, 0], [2, 1], size=(500, 2))
    h2 = empirical_density(rect, pts2)
    ref = np.histogram2d(pts2[:, 0], pts2[:, 1], bins=[np.linspace(0, 2, 5), np.linspace(0, 1, 4)])[0]
    np.testing.assert_allclose(h2 * rect.volumes * 500, ref.T.ravel())
    disk = disk_mesh(1.0, 0.3)
    r, t = np.sqrt(rng.uniform(0, 0.9, 2000)), rng.uniform(0, 2 * np.pi, 2000)
    pts3 = np.c_[r * np.cos(t), r * np.sin(t)]
    h3 = empirical_density(disk, pts3)
    import matplotlib.tri as mtri

    verts = np.asarray(disk.mesh.vertexCoords).T
    tri_v = np.asarray(disk.mesh._orderedCellVertexIDs).T
    finder = mtri.Triangulation(verts[:, 0], verts[:, 1], tri_v).get_trifinder()
    owner = finder(pts3[:, 0], pts3[:, 1])
    assert owner.min() >= 0
    np.testing.assert_allclose(h3 * disk.volumes * 2000, np.bincount(owner, minlength=disk.n_cells))
    with pytest.raises(ValueError, match="outside"):
        empirical_density(dom1, np.array([[1.5]]))
    assert np.dot(dom1.volumes, empirical_density(dom1, np.array([[1.5]]), outside="nearest")) == 1.0


def test_rate_of_sample_histogram_is_chi_square():
    """lam = 0: N * rate(histogram of N iid Gibbs samples) = N KL ~ chi2_{k-1}/2 (G-test).

    Seeded; threshold 5 standard deviations of chi2_{k-1} (sd = sqrt(2(k-1))).
    """
    dom = interval_mesh(-1.5, 1.5, 30)
    prob = MeanFieldProblem.create(dom, lambda x: 0.5 * x[:, 0] ** 2, s=0.0, lam=0.0, beta=1.0)
    g = gibbs_density(prob)
    rng = np.random.default_rng(7)
    n = 20000
    cells = rng.choice(dom.n_cells, size=n, p=g.rho * dom.volumes)
    left, right = dom.cell_edges_1d()
    pts = rng.uniform(left[cells], right[cells])[:, None]
    stat = 2 * n * rate_function(prob, pts, reference=g)
    k = dom.n_cells
    assert abs(stat - (k - 1)) <= 5 * np.sqrt(2 * (k - 1))


def test_errors(log_gas_1d):
    with pytest.raises(ValueError, match="regime"):
        rate_function(log_gas_1d, np.ones(80), regime="hot")
    with pytest.raises(ValueError, match="unit mass"):
        rate_function(log_gas_1d, np.ones(80))
    with pytest.raises(ValueError, match="method"):
        gibbs_density(log_gas_1d, method="picard")
    with pytest.raises(ValueError, match="beta"):
        gibbs_density(log_gas_1d.replace(beta=np.inf))
    capped = gibbs_density(log_gas_1d.replace(lam=5.0, beta=20.0), method="anderson", max_iter=5)
    assert not capped.converged and capped.iterations == 5 and capped.residual_history.size == 5
