"""The assembled Scharfetter-Gummel step against FiPy's term algebra (its definition).

Oracles: FiPy's own matrix and exponential weight (the assembled path must reproduce them), the
FiPy-backed solver on every mesh kind the mean-field study and the tests use (interval, rectangle,
disk), and exact mass conservation (zero column sums of the face blocks).
"""
import numpy as np
import pytest

from rieszflow.solvers.mckean_vlasov import (
    MeanFieldProblem,
    ScharfetterGummelOperator,
    disk_mesh,
    exponential_weight,
    interval_mesh,
    rectangle_mesh,
    solve_mckean_vlasov,
)

MESHES = {
    "interval": lambda: interval_mesh(-1.25, 1.25, 40),
    "rectangle": lambda: rectangle_mesh((-2.0, -2.0), (2.0, 1.5), (9, 7)),
    "disk": lambda: disk_mesh(1.0, 0.3),
}


def _fipy_system(dom, veff_values, rho_old, beta, dt):
    """Matrix and solution of one FiPy sweep, written as in solvers.mckean_vlasov.equation."""
    import fipy
    from fipy.solvers.scipy import LinearLUSolver

    rho = fipy.CellVariable(mesh=dom.mesh, value=rho_old.copy(), hasOld=True)
    veff = fipy.CellVariable(mesh=dom.mesh, value=veff_values)
    eq = (fipy.TransientTerm() == fipy.DiffusionTerm(coeff=1.0 / beta)
          + fipy.ExponentialConvectionTerm(coeff=veff.faceGrad))
    eq.cacheMatrix()
    rho.updateOld()
    eq.sweep(var=rho, dt=dt, solver=LinearLUSolver(tolerance=1e-12, criterion="RHS", iterations=10))
    return eq.matrix.matrix.toarray(), np.asarray(rho.value).copy()


def test_exponential_weight_is_fipys():
    from fipy import Grid1D
    from fipy.terms.exponentialConvectionTerm import ExponentialConvectionTerm
    from fipy.variables.faceVariable import FaceVariable

    P = np.array([0.0, 1e-4, -1e-4, 1e-3, -1e-3, 1.0001e-3, -2e-3, 0.37, -5.0, 40.0, 100.0, 101.0, 101.5,
                  102.0, 150.0, 1e6, -100.0, -101.0, -150.0, -1e6])
    mesh = Grid1D(nx=P.size - 1)
    fipy_alpha = np.asarray(ExponentialConvectionTerm([1])._alpha(FaceVariable(mesh=mesh, value=P)))
    with np.errstate(all="raise", under="ignore"):  # exp(-1e6) underflows to 0, as in FiPy
        ours = exponential_weight(P)
    np.testing.assert_allclose(ours, fipy_alpha, rtol=1e-15, atol=0)
    # alpha(P) weights the cell the drift leaves: zero flux exactly at rho_2/rho_1 = e^P (module docstring)
    p = np.array([-7.0, -0.3, 0.02, 2.0, 10.0])  # (larger |P|: cancellation in 1 - P(1 - alpha))
    a = exponential_weight(p)
    np.testing.assert_allclose((1 + p * a) / (1 - p * (1 - a)), np.exp(p), rtol=1e-10)


@pytest.mark.parametrize("kind", sorted(MESHES))
def test_matrix_and_sweep_equal_fipys(kind):
    dom = MESHES[kind]()
    c = dom.centers
    veff = 3.0 * np.sum(c * c, axis=1) + np.sin(5.0 * c[:, 0])
    rho_old = np.exp(-np.sum((c - 0.2) ** 2, axis=1))
    beta, dt = 2.0, 0.05
    L, rho_fipy = _fipy_system(dom, veff, rho_old, beta, dt)
    op = ScharfetterGummelOperator(dom, beta)
    assert op.banded == (kind == "interval")
    M = op.matrix(veff, dt).toarray()
    assert np.array_equal(M != 0, L != 0)                   # same sparsity
    assert np.abs(M - L).max() <= 1e-13 * np.abs(L).max()  # same entries (FiPy's sign convention)
    rho = op.solve(veff, dt, rho_old, rho_old, 1e-12)
    assert np.abs(rho - rho_fipy).max() <= 1e-13 * np.abs(rho_fipy).max()


@pytest.mark.parametrize("kind", sorted(MESHES))
def test_face_blocks_conserve_mass(kind):
    dom = MESHES[kind]()
    op = ScharfetterGummelOperator(dom, 0.7)
    veff = np.random.default_rng(0).normal(scale=3.0, size=dom.n_cells)
    M = op.matrix(veff, 0.1)
    # column sums are |C|/dt: sum_i |C_i| rho_i^{n+1} = sum_i |C_i| rho_i^n exactly in exact arithmetic
    np.testing.assert_allclose(np.asarray(M.sum(axis=0)).ravel(), dom.volumes / 0.1, rtol=1e-12)
    rho_old = np.random.default_rng(1).uniform(0.5, 1.5, size=dom.n_cells)
    rho = op.solve(veff, 0.1, rho_old, rho_old, 1e-15)
    assert abs(np.dot(dom.volumes, rho) - np.dot(dom.volumes, rho_old)) <= 1e-13 * np.dot(dom.volumes, rho_old)


CASES = {  # the mean-field study's kinds (interval: 1-D Coulomb; rectangle: 2-D log) and the disk
    "interval": (-1.0, 1.0, 4.0),
    "rectangle": (0.0, 1.0, 2.0),
    "disk": (0.0, 2.0, 3.0),
}


@pytest.mark.parametrize("kind", sorted(CASES))
@pytest.mark.parametrize("nonlinear", (True, False))
def test_assembled_backend_equals_fipy_backend(kind, nonlinear):
    s, lam, beta = CASES[kind]
    dom = MESHES[kind]()
    prob = MeanFieldProblem.create(dom, lambda x: 0.5 * np.sum(x * x, axis=1) + 0.3 * x[:, 0],
                                   s=s, lam=lam if nonlinear else 0.0, beta=beta)
    kw = dict(t_end=0.3, dt=0.01, dt_max=0.08, dt_growth=1.5, save_times=[0.05, 0.2])
    rho0 = lambda x: np.exp(-4.0 * np.sum((x - 0.2) ** 2, axis=1))  # noqa: E731
    a = solve_mckean_vlasov(prob, rho0, pde_backend="fipy", **kw)
    b = solve_mckean_vlasov(prob, rho0, pde_backend="assembled", **kw)
    assert a.completed and b.completed and a.step_time.size > 5
    assert np.array_equal(a.times, b.times) and np.array_equal(a.step_time, b.step_time)
    assert np.array_equal(a.dt, b.dt) and np.array_equal(a.sweeps, b.sweeps)
    assert np.array_equal(a.converged, b.converged) and a.converged.all()
    assert np.abs(a.rho - b.rho).max() <= 1e-12 * np.abs(a.rho).max()
    assert np.abs(a.free_energy - b.free_energy).max() <= 1e-12 * np.abs(a.free_energy).max()
    assert np.abs(a.mass - b.mass).max() <= 1e-12
    assert np.abs(b.mass - 1.0).max() <= 1e-12                         # no-flux boundary
    np.testing.assert_allclose(b.residual, a.residual, rtol=1e-6, atol=1e-15)
    np.testing.assert_allclose(b.min_rho, a.min_rho, rtol=1e-12)
    assert a.config["pde_backend"] == "fipy" and b.config["pde_backend"] == "assembled"


def test_pde_backend_is_validated_and_the_cli_flag_exists():
    from rieszflow.studies.cli import build_parser

    prob = MeanFieldProblem.create(interval_mesh(-1.0, 1.0, 8), lambda x: x[:, 0] ** 2, s=-1.0, lam=0.0, beta=1.0)
    with pytest.raises(ValueError, match="pde_backend"):
        solve_mckean_vlasov(prob, lambda x: np.ones(len(x)), t_end=0.1, dt=0.1, pde_backend="petsc")
    parser = build_parser()
    assert parser.parse_args(["mean-field", "--pde-backend", "fipy"]).pde_backend == "fipy"
    assert parser.parse_args(["mean-field"]).pde_backend == "assembled"
    with pytest.raises(SystemExit):
        parser.parse_args(["mean-field", "--pde-backend", "petsc"])
