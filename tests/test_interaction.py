"""The one interaction specification (rieszflow.engine.energy.interaction): check_s ranges, the kernel,
and the Interaction spec consumed by the particle energies and the PDE."""
import math

import numpy as np
import pytest

from rieszflow.engine.energy import Interaction, RieszEnergy, check_s, riesz_energy, riesz_kernel


@pytest.mark.parametrize("s, d, upper, ok", [
    (-1.99, None, None, True), (-2.0, None, None, False), (50.0, None, None, True),
    (0.99, 1, None, True), (1.0, 1, None, False), (1.5, 2, None, True), (2.0, 2, None, False),
    (0.5, 2, 1.0, True), (1.0, 2, 1.0, False), (math.nan, None, None, False),
    (math.inf, None, None, False),
])
def test_check_s_ranges(s, d, upper, ok):
    """-2 < s always; s < d for a density; s < upper for closed-form primitives."""
    if ok:
        assert check_s(s, d, upper=upper) == s
    else:
        with pytest.raises(ValueError, match="s must"):
            check_s(s, d, upper=upper)


def test_check_s_messages_name_value_range_and_caller():
    with pytest.raises(ValueError, match=r"antiderivative_1d: s must satisfy -2 < s < 1, got s=1\.5"):
        check_s(1.5, upper=1.0, what="antiderivative_1d")
    with pytest.raises(ValueError, match=r"-2 < s < 2, got s=3.*locally integrable"):
        check_s(3.0, d=2)
    with pytest.raises(TypeError, match="s must be a real number"):
        check_s("1")


@pytest.mark.parametrize("s", [-1.5, -1.0, 0.0, 0.5, 2.5])
def test_kernel_closed_form_and_softening(s):
    r = np.array([0.2, 1.0, 3.0])
    exact = -np.log(r) if s == 0 else np.sign(s) * r ** (-s)
    np.testing.assert_allclose(riesz_kernel(r, s), exact, rtol=1e-15)
    np.testing.assert_allclose(Interaction(s, softening=0.5).kernel(r), riesz_kernel(np.hypot(r, 0.5), s),
                               rtol=1e-15)


def test_interaction_spec_matches_the_pair_energy():
    """lam * W_{N,s} from the spec's kernel equals RieszEnergy (paper normalisation, i != j / 2N(N-1))."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(7, 3))
    spec = Interaction(s=1.0, lam=0.3)
    r = np.linalg.norm(x[:, None] - x[None], axis=-1)
    off = ~np.eye(7, dtype=bool)
    direct = spec.lam * spec.kernel(r[off]).sum() / (2 * 7 * 6)
    assert RieszEnergy(spec.s, spec.lam)(x) == pytest.approx(direct, rel=1e-13)
    assert spec.lam * riesz_energy(x, spec.s) == pytest.approx(direct, rel=1e-13)
    with pytest.raises(ValueError, match="lam"):
        Interaction(1.0, lam=-1.0)


def test_energy_registry_builds_and_validates():
    """make_energy builds registered energies that add up; unknown names/parameters are errors."""
    from rieszflow.engine.energy import ENERGIES, SumEnergy, make_energy

    assert {"riesz", "coulomb1d", "external", "rff_alignment"} <= set(ENERGIES)
    rng = np.random.default_rng(3)
    x = rng.normal(size=(6, 2))
    e = make_energy("riesz", s=0.0, lam=0.5)
    assert e(x) == pytest.approx(RieszEnergy(0.0, 0.5)(x), rel=1e-15)
    X, y = rng.normal(size=(10, 2)), np.where(rng.random(10) < 0.5, -1.0, 1.0)
    H = make_energy("rff_alignment", X=X, y=y) + e
    assert isinstance(H, SumEnergy)
    with pytest.raises(ValueError, match="unknown energy name='morse'"):
        make_energy("morse")
    with pytest.raises(ValueError, match=r"unknown parameter\(s\) \['sigma'\]; allowed: s, lam"):
        make_energy("riesz", s=1.0, sigma=2.0)


def test_pde_takes_the_same_interaction_spec():
    """MeanFieldProblem.create(interaction=Interaction(s, lam)) equals create(s=..., lam=...), and the
    density's integrability bound s < d is enforced by the one check_s."""
    from rieszflow.solvers.mckean_vlasov import MeanFieldProblem, interval_mesh

    dom = interval_mesh(-1.0, 1.0, 40)
    V = lambda x: 0.5 * x[:, 0] ** 2  # noqa: E731
    a = MeanFieldProblem.create(dom, V, s=-1.0, lam=0.7, beta=5.0)
    b = MeanFieldProblem.create(dom, V, interaction=Interaction(-1.0, 0.7), beta=5.0)
    rho = np.exp(-dom.centers[:, 0] ** 2)
    np.testing.assert_array_equal(a.convolution(rho), b.convolution(rho))
    assert (a.s, a.lam) == (b.s, b.lam)
    with pytest.raises(ValueError, match=r"-2 < s < 1, got s=1.5"):
        MeanFieldProblem.create(dom, V, interaction=Interaction(1.5, 0.7), beta=5.0)
    with pytest.raises(ValueError, match="not both"):
        MeanFieldProblem.create(dom, V, s=-1.0, lam=0.7, beta=5.0, interaction=Interaction(-1.0))
    with pytest.raises(ValueError, match="softening"):
        MeanFieldProblem.create(dom, V, interaction=Interaction(-1.0, softening=0.1), beta=5.0)


def test_riesz_energy_with_a_chain_axis_equals_chain_by_chain():
    """RieszEnergy on (C, N, d) equals C separate evaluations (values and gradients)."""
    rng = np.random.default_rng(8)
    x = rng.normal(size=(4, 6, 2))
    for s in (-1.0, 0.0, 1.5):
        e = RieszEnergy(s, lam=0.7)
        W, G = e.value_and_grad(x)
        assert W.shape == (4,) and G.shape == (4, 6, 2)
        for c in range(4):
            w1, g1 = e.value_and_grad(x[c])
            assert W[c] == pytest.approx(float(w1), rel=1e-13)
            np.testing.assert_allclose(G[c], g1, rtol=1e-12, atol=1e-14)
