"""McKean-Vlasov PDE (FiPy): meshes, discrete Gibbs steady states, dissipation, I/O.

Oracles: with lam = 0 the Scharfetter-Gummel scheme's steady state is exactly the
discrete Gibbs density exp(-beta V_j)/Z (particles_pde_reference.md sec. 2.2); with
lam > 0 it is the self-consistent Gibbs fixed point of solvers.gibbs on the same
mesh (issue acceptance: 1e-3 in L1). Mass, positivity and the decrease of the
discrete free energy are checked at every step.
"""
import numpy as np
import pytest

from rieszflow.solvers.gibbs import gibbs_density
from rieszflow.solvers.mckean_vlasov import (
    MeanFieldProblem,
    alignment_potential_on_mesh,
    disk_mesh,
    interval_mesh,
    load_result,
    rectangle_mesh,
    solve_mckean_vlasov,
)
from rieszflow.solvers.mckean_vlasov.equation import AndersonMixer
from rieszflow.solvers.mckean_vlasov.mesh import gmsh_executable_works


def _discrete_gibbs(problem):
    w = np.exp(-problem.beta * (problem.V - problem.V.min()))
    return w / np.dot(problem.domain.volumes, w)


def _check_diagnostics(res, F_tol):
    assert np.max(np.abs(res.mass - 1.0)) <= 1e-10
    assert res.min_rho.min() > 0.0
    dF = np.diff(res.free_energy)
    assert np.all(dF <= F_tol), f"free energy increased by {dF.max():.3e}"
    assert np.all(np.isfinite(res.free_energy))


# ----------------------------------------------------------------------------------- meshes

def test_interval_and_rectangle_meshes():
    dom = interval_mesh(-1.0, 3.0, 8)
    np.testing.assert_allclose(dom.centers[:, 0], -1.0 + 0.5 * (np.arange(8) + 0.5))
    assert dom.area == pytest.approx(4.0, rel=1e-15)
    rect = rectangle_mesh((-1.0, 2.0), (1.0, 3.0), (4, 2))
    assert rect.n_cells == 8 and rect.d == 2
    k = 5  # grid indices (k % nx, k // nx) = (1, 1)
    np.testing.assert_allclose(rect.centers[k], [-1.0 + 0.25 * 3, 2.0 + 0.25 * 3])
    with pytest.raises(ValueError, match="lo < hi"):
        interval_mesh(1.0, 0.0, 4)
    with pytest.raises(ValueError, match="shape"):
        rectangle_mesh((0, 0), (1, 1), (1, 4))


def test_disk_mesh_api_and_fipy_gmsh2d():
    """Both routes to Gmsh give the inscribed polygon: area pi R^2 (1 - O(h^2)), edges consistent."""
    api = disk_mesh(1.0, 0.25)
    fipy_mesh = disk_mesh(1.0, 0.25, backend="fipy")  # FiPy Gmsh2D, gmsh made runnable if needed
    for dom in (api, fipy_mesh):
        assert np.pi * (1 - 0.25 ** 2) < dom.area < np.pi
        assert np.all(np.hypot(*dom.centers.T) < 1.0)
        a, b, inc = dom.faces_2d()
        shoelace = inc @ (0.5 * (a[:, 0] * b[:, 1] - a[:, 1] * b[:, 0]))
        np.testing.assert_allclose(shoelace, dom.volumes, rtol=1e-12)
    assert abs(api.n_cells - fipy_mesh.n_cells) <= 0.1 * api.n_cells


def test_gmsh_executable_works_reads_the_exit_status(tmp_path, monkeypatch):
    """True only for a ``gmsh`` on $PATH whose ``--version`` exits 0 (fake executables, no Gmsh run)."""
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    assert gmsh_executable_works() is False  # not on $PATH
    for status, expected in ((0, True), (3, False)):
        d = tmp_path / f"exit{status}"
        d.mkdir()
        exe = d / "gmsh"
        exe.write_text(f"#!/bin/sh\nexit {status}\n")
        exe.chmod(0o755)
        monkeypatch.setenv("PATH", str(d))
        assert gmsh_executable_works() is expected
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "gmsh").write_text("#!/nonexistent/interpreter\n")  # on $PATH but cannot start: OSError
    (broken / "gmsh").chmod(0o755)
    monkeypatch.setenv("PATH", str(broken))
    assert gmsh_executable_works() is False


# ------------------------------------------------------------------- linear Fokker-Planck

def test_linear_fokker_planck_reaches_discrete_gibbs_1d():
    dom = interval_mesh(-2.0, 2.0, 64)
    prob = MeanFieldProblem.create(dom, lambda x: 0.5 * x[:, 0] ** 2 + np.sin(3 * x[:, 0]), s=0.0, lam=0.0,
                                   beta=2.0)
    res = solve_mckean_vlasov(prob, lambda x: np.exp(-4 * (x[:, 0] - 1) ** 2), t_end=2000.0, dt=1e-3,
                              dt_max=20.0, dt_growth=1.3)
    gibbs = _discrete_gibbs(prob)
    assert np.max(np.abs(res.final - gibbs)) <= 1e-10 * gibbs.max()  # measured 9e-12
    _check_diagnostics(res, F_tol=1e-13)
    assert np.all(res.dissipation[1:] >= -1e-10)
    assert res.completed and res.residual.max() < 1e-10
    assert res.config["linear_tolerance"] == 1e-12


@pytest.mark.parametrize("kind", ["rectangle", "disk"])
def test_linear_fokker_planck_reaches_discrete_gibbs_2d(kind):
    dom = rectangle_mesh((-1.0, -1.0), (1.5, 1.0), (14, 11)) if kind == "rectangle" else disk_mesh(1.0, 0.2)
    V = lambda x: (x[:, 0] - 0.3) ** 2 + 0.5 * x[:, 1] ** 2 + 0.4 * np.cos(3 * x[:, 1])  # noqa: E731
    prob = MeanFieldProblem.create(dom, V, s=0.0, lam=0.0, beta=3.0)
    res = solve_mckean_vlasov(prob, np.ones(dom.n_cells), t_end=500.0, dt=1e-3, dt_max=20.0, dt_growth=1.4)
    gibbs = _discrete_gibbs(prob)
    assert np.max(np.abs(res.final - gibbs)) <= 1e-10 * gibbs.max()
    _check_diagnostics(res, F_tol=1e-13)


# ------------------------------------------------------------------------ nonlocal PDE

def test_nonlocal_pde_dissipates_conserves_and_matches_gibbs_1d():
    """Acceptance: the long-time PDE state equals the Gibbs fixed point on the same mesh (L1 <= 1e-3)."""
    dom = interval_mesh(-2.0, 2.0, 60)
    prob = MeanFieldProblem.create(dom, lambda x: 0.5 * x[:, 0] ** 2 + 0.3 * np.sin(2 * x[:, 0]), s=0.0,
                                   lam=1.0, beta=4.0)
    rho0 = lambda x: np.exp(-8 * (x[:, 0] + 1) ** 2) + 0.5 * np.exp(-8 * (x[:, 0] - 1) ** 2)  # noqa: E731
    res = solve_mckean_vlasov(prob, rho0, t_end=40.0, dt=1e-3, dt_max=5.0, dt_growth=1.3, sweep_tol=1e-7,
                              save_times=[0.5, 5.0])
    assert res.converged.all() and res.residual.max() <= 1e-7
    np.testing.assert_allclose(res.times, [0.0, 0.5, 5.0, 40.0])
    _check_diagnostics(res, F_tol=1e-12)
    gibbs = gibbs_density(prob)
    l1 = np.dot(dom.volumes, np.abs(res.final - gibbs.rho))
    assert l1 <= 1e-3  # the criterion
    assert l1 <= 1e-7  # measured 1.6e-9: the SG steady state is the discrete fixed point
    assert res.free_energy[-1] == pytest.approx(gibbs.free_energy, abs=1e-9)


@pytest.mark.slow
@pytest.mark.parametrize("kind,s", [("rectangle", 1.0), ("disk", 0.0)])
def test_nonlocal_pde_2d_dissipates(kind, s):
    dom = rectangle_mesh((-1.0, -1.0), (1.0, 1.0), (12, 12)) if kind == "rectangle" else disk_mesh(1.0, 0.3)
    prob = MeanFieldProblem.create(dom, lambda x: 0.5 * ((x - 0.2) ** 2).sum(1), s=s, lam=0.5, beta=4.0)
    rho0 = lambda x: np.exp(-6 * ((x + 0.3) ** 2).sum(1))  # noqa: E731
    res = solve_mckean_vlasov(prob, rho0, t_end=4.0, dt=2e-3, dt_max=0.5, dt_growth=1.3)
    assert res.converged.all()
    _check_diagnostics(res, F_tol=1e-12)
    assert res.free_energy[-1] < res.free_energy[0] - 1e-3


def test_result_hdf5_roundtrip(tmp_path):
    dom = rectangle_mesh((0.0, 0.0), (1.0, 1.0), (5, 4))
    prob = MeanFieldProblem.create(dom, lambda x: x[:, 0], s=0.5, lam=0.3, beta=2.0)
    res = solve_mckean_vlasov(prob, np.ones(dom.n_cells), t_end=0.2, dt=0.05, save_times=[0.1])
    path = res.to_hdf5(tmp_path / "mf.h5")
    ds = load_result(path)
    assert ds["rho"].dims == ("time", "cell")
    assert ds["free_energy"].dims == ("step",)
    np.testing.assert_allclose(ds["rho"].values, res.rho)
    np.testing.assert_allclose(ds["time"].values, res.times)
    np.testing.assert_allclose(np.c_[ds["x"].values, ds["y"].values], dom.centers)
    np.testing.assert_allclose(ds["mass"].values, res.mass)
    assert ds.attrs["config_linear_tolerance"] == 1e-12 and ds.attrs["status"] == "complete"
    with pytest.raises(FileExistsError):
        res.to_hdf5(path)
    xr_ds = res.to_xarray()
    assert xr_ds["rho"].shape == res.rho.shape


def test_bad_inputs():
    dom = interval_mesh(0.0, 1.0, 6)
    prob = MeanFieldProblem.create(dom, np.zeros(6), s=0.0, lam=1.0, beta=1.0)
    with pytest.raises(ValueError, match="beta"):
        solve_mckean_vlasov(prob.replace(beta=np.inf), np.ones(6), t_end=1.0, dt=0.1)
    with pytest.raises(ValueError, match="rho0"):
        solve_mckean_vlasov(prob, -np.ones(6), t_end=1.0, dt=0.1)
    with pytest.raises(ValueError, match="dt"):
        solve_mckean_vlasov(prob, np.ones(6), t_end=1.0, dt=2.0)
    with pytest.raises(ValueError, match="save_times"):
        solve_mckean_vlasov(prob, np.ones(6), t_end=1.0, dt=0.1, save_times=[2.0])
    with pytest.raises(ValueError, match="save_times must hold at least one time"):
        solve_mckean_vlasov(prob, np.ones(6), t_end=1.0, dt=0.1, save_times=[])
    with pytest.raises(ValueError, match="mass"):
        solve_mckean_vlasov(prob, 2 * np.ones(6), t_end=1.0, dt=0.1, unit_mass=False)
    with pytest.raises(ValueError, match="V"):
        MeanFieldProblem.create(dom, np.zeros(5), s=0.0, lam=1.0, beta=1.0)
    with pytest.raises(ValueError, match="lam"):
        MeanFieldProblem.create(dom, np.zeros(6), s=0.0, lam=-1.0, beta=1.0)
    with pytest.raises(ValueError, match="s must satisfy"):
        MeanFieldProblem.create(dom, np.zeros(6), s=1.0, lam=1.0, beta=1.0)


def test_max_steps_stops_and_reports():
    dom = interval_mesh(0.0, 1.0, 6)
    prob = MeanFieldProblem.create(dom, np.zeros(6), s=0.0, lam=0.0, beta=1.0)
    res = solve_mckean_vlasov(prob, np.ones(6), t_end=1.0, dt=0.1, max_steps=3)
    assert not res.completed and res.step_time.size == 4 and res.times[-1] == pytest.approx(0.3)


# ----------------------------------------------------------------------- potentials, mixing

def test_alignment_potential_on_mesh_is_the_phase_average():
    """V_D(omega) = -(1/(n(n-1))) sum_{i != j} y_i y_j cos(omega.(x_i - x_j)) = E_b[-(1/(n(n-1)))
    sum_{i != j} y_i y_j phi(x_i) phi(x_j)] with phi = sqrt2 cos(omega.x + b); the trapezoid rule in b
    with 8 nodes is exact for these degree-2 trigonometric polynomials."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(9, 2))
    y = rng.choice([-1.0, 1.0], size=9)
    dom = rectangle_mesh((-2.0, -2.0), (2.0, 2.0), (4, 3))
    V = alignment_potential_on_mesh(dom, X, y)
    n = X.shape[0]
    off = ~np.eye(n, dtype=bool)
    for j, w in enumerate(dom.centers):
        diff = (X[:, None, :] - X[None, :, :]) @ w
        direct = -np.sum((np.outer(y, y) * np.cos(diff))[off]) / (n * (n - 1))
        phases = 2 * np.pi * np.arange(8) / 8
        phi = np.sqrt(2) * np.cos((X @ w)[:, None] + phases[None, :])  # (n, 8)
        avg = np.mean([-np.sum((np.outer(y * phi[:, k], y * phi[:, k]))[off]) / (n * (n - 1))
                       for k in range(8)])
        assert V[j] == pytest.approx(direct, abs=1e-14)
        assert V[j] == pytest.approx(avg, abs=1e-14)


def test_anderson_mixer_solves_linear_fixed_point_fast():
    """For x = Mx + c, Anderson with memory >= n is GMRES: exact after n + 1 steps; Picard is slow."""
    rng = np.random.default_rng(4)
    n = 6
    Q = np.linalg.qr(rng.normal(size=(n, n)))[0]
    M = Q @ np.diag(np.linspace(0.5, 0.97, n)) @ Q.T
    c = rng.normal(size=n)
    x_star = np.linalg.solve(np.eye(n) - M, c)
    mixer = AndersonMixer(memory=n, mixing=1.0)
    x = np.zeros(n)
    for _ in range(n + 2):
        x = mixer.update(x, M @ x + c)
    assert np.max(np.abs(x - x_star)) <= 1e-8 * np.max(np.abs(x_star))
    xp = np.zeros(n)
    for _ in range(n + 2):
        xp = M @ xp + c
    assert np.max(np.abs(xp - x_star)) > 1e-2 * np.max(np.abs(x_star))
    with pytest.raises(ValueError, match="mixing"):
        AndersonMixer(mixing=1.5)


def test_mean_field_docs_examples_run():
    """The literate examples of docs/mean_field.md run and print what the page says."""
    import doctest
    from pathlib import Path

    page = Path(__file__).resolve().parent.parent / "docs" / "mean_field.md"
    result = doctest.testfile(str(page), module_relative=False, optionflags=doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 15 and result.failed == 0
