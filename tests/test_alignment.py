"""Tests of engine.energy.alignment: brute-force oracles, Lemma 3 (and its correction), gradients."""
from __future__ import annotations

import numpy as np
import pytest

from rieszflow.engine.energy import (
    RFFAlignmentEnergy,
    RieszEnergy,
    alignment_energy,
    alignment_energy_and_grad,
    alignment_potential,
    alignment_potential_and_grad,
    hamiltonian,
    hamiltonian_and_grad,
    rff_alignment_energy,
    rff_alignment_energy_and_grad,
    rff_hamiltonian,
    riesz_energy_and_grad,
)


def central_difference(f, x, h=1e-6):
    """Float64 central-difference gradient of a scalar function of an array."""
    grad = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        xp_, xm = x.copy(), x.copy()
        xp_[idx] += h
        xm[idx] -= h
        grad[idx] = (float(f(xp_)) - float(f(xm))) / (2 * h)
    return grad


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    n, N, d = 9, 6, 2
    X = rng.normal(size=(n, d))
    y = np.where(rng.uniform(size=n) < 0.5, -1.0, 1.0)
    omega = rng.normal(size=(N, d))
    b = rng.uniform(0, 2 * np.pi, size=N)
    return X, y, omega, b


def brute_alignment(phi, y):
    """Eq. (B.4) by its definition: -1/(n(n-1)) sum_{i != j} y_i y_j (1/N) sum_k phi_ik phi_jk."""
    n, N = phi.shape
    total = 0.0
    for i in range(n):
        for j in range(n):
            if i != j:
                total += y[i] * y[j] * sum(phi[i, k] * phi[j, k] for k in range(N)) / N
    return -total / (n * (n - 1))


def rff(omega, X, b):
    return np.sqrt(2.0) * np.cos(X @ omega.T + b)


# ----------------------------------------------------------------------------- general feature map

def test_alignment_energy_matches_definition(data):
    X, y, omega, b = data
    phi = np.random.default_rng(1).uniform(-1, 1, size=(X.shape[0], 5))
    for targets in (y, np.random.default_rng(2).normal(size=X.shape[0])):  # labels and real targets
        assert float(alignment_energy(phi, targets)) == pytest.approx(brute_alignment(phi, targets), rel=1e-13)
    assert float(-alignment_energy(phi, y)) == pytest.approx(-brute_alignment(phi, y), rel=1e-13)  # paper eq. (A.2)


def test_alignment_gradient_with_respect_to_features(data):
    X, y, _, _ = data
    phi = np.random.default_rng(3).uniform(-1, 1, size=(X.shape[0], 4))
    _, grad = alignment_energy_and_grad(phi, y)
    np.testing.assert_allclose(grad, central_difference(lambda f: alignment_energy(f, y), phi),
                               rtol=1e-7, atol=1e-10)


# ----------------------------------------------------------------------------- RFF, exact B.6

def test_rff_with_phases_is_exact_b6(data):
    X, y, omega, b = data
    phi = rff(omega, X, b)
    assert float(rff_alignment_energy(omega, X, y, b)) == pytest.approx(brute_alignment(phi, y), rel=1e-13)
    assert float(rff_alignment_energy(omega, X, y, b)) == pytest.approx(float(alignment_energy(phi, y)),
                                                                       rel=1e-14)


@pytest.mark.parametrize("with_phases", (True, False))
def test_rff_gradient_matches_central_difference(data, with_phases):
    X, y, omega, b = data
    b = b if with_phases else None
    _, grad = rff_alignment_energy_and_grad(omega, X, y, b)
    fd = central_difference(lambda w: rff_alignment_energy(w, X, y, b), omega)
    np.testing.assert_allclose(grad, fd, rtol=1e-7, atol=1e-10)


def test_rff_gradient_chains_through_the_feature_backward(data):
    # dE/domega_k = sum_i dE/dPhi_ik * dPhi_ik/dA_ik * x_i with Phi = sqrt2 cos(A).
    X, y, omega, b = data
    A = X @ omega.T + b
    _, dphi = alignment_energy_and_grad(np.sqrt(2) * np.cos(A), y)
    chained = (dphi * (-np.sqrt(2) * np.sin(A))).T @ X
    np.testing.assert_allclose(rff_alignment_energy_and_grad(omega, X, y, b)[1], chained, rtol=1e-13)


# ----------------------------------------------------------------------------- Lemma 3

def test_phase_average_is_exact_by_quadrature(data):
    # E_N(b) is a sum over k of trigonometric polynomials of degree 2 in b_k, so the mean over
    # M >= 3 equispaced common shifts of all phases is the exact expectation over Unif[0, 2 pi]^N.
    X, y, omega, b = data
    M = 5
    shifted = [float(rff_alignment_energy(omega, X, y, b + 2 * np.pi * m / M)) for m in range(M)]
    assert np.mean(shifted) == pytest.approx(float(rff_alignment_energy(omega, X, y)), rel=1e-13)


def test_phase_average_equals_b8_b9_plus_the_constant(data):
    X, y, omega, _ = data
    n, N = len(y), len(omega)
    C, S = np.cos(X @ omega.T), np.sin(X @ omega.T)
    b8 = -(np.sum((y @ C) ** 2) + np.sum((y @ S) ** 2)) / (N * n * (n - 1))
    b9 = -np.sum(np.abs(y @ np.exp(1j * X @ omega.T)) ** 2) / (N * n * (n - 1))
    constant = np.sum(y ** 2) / (n * (n - 1))  # = 1/(n-1) for labels +-1
    assert b8 == pytest.approx(b9, rel=1e-13)
    assert float(rff_alignment_energy(omega, X, y)) == pytest.approx(b8 + constant, rel=1e-13)


def test_b7_drops_a_term_that_depends_on_omega(data):
    # Paper 000 (B.7) claims E_N = -2/n^2 ||y^T C||^2 up to a constant independent of (Omega, b).
    # Even with the prefactor corrected to -2/(n(n-1)N), the remainder is the diagonal term
    # 2/(n(n-1)N) sum_{i,k} y_i^2 cos^2(omega_k.x_i + b_k), which changes with omega.
    X, y, omega, b = data
    n, N = len(y), len(omega)

    def remainder(w):
        C = np.cos(X @ w.T + b)
        b7 = -2.0 / (n * (n - 1) * N) * np.sum((y @ C) ** 2)
        return float(rff_alignment_energy(w, X, y, b)) - b7, 2.0 / (n * (n - 1) * N) * np.sum(y[:, None] ** 2 * C ** 2)

    r1, diag1 = remainder(omega)
    r2, diag2 = remainder(omega + 0.37)
    assert r1 == pytest.approx(diag1, rel=1e-12) and r2 == pytest.approx(diag2, rel=1e-12)
    assert abs(r1 - r2) > 1e-3 * abs(r1)  # not a constant


# ----------------------------------------------------------------------------- V_D of eq. (4.1)

def test_alignment_potential_matches_cosine_kernel_definition(data):
    X, y, _, _ = data
    n = len(y)
    pts = np.random.default_rng(4).normal(size=(7, 2))
    diff = X[:, None, :] - X[None, :, :]
    off = ~np.eye(n, dtype=bool)
    expected = [-np.sum((y[:, None] * y[None, :] * np.cos(diff @ w))[off]) / (n * (n - 1)) for w in pts]
    np.testing.assert_allclose(alignment_potential(pts, X, y), expected, rtol=1e-12)
    # at omega = 0 every feature is constant: V = -((sum y)^2 - sum y^2) / (n (n-1))
    v0 = float(alignment_potential(np.zeros((1, 2)), X, y)[0])
    assert v0 == pytest.approx(-(y.sum() ** 2 - np.sum(y ** 2)) / (n * (n - 1)), rel=1e-13, abs=1e-15)


@pytest.mark.parametrize("with_phases", (True, False))
def test_alignment_potential_gradient_and_chunking(data, with_phases):
    X, y, _, _ = data
    rng = np.random.default_rng(5)
    pts = rng.normal(size=(11, 2))
    b = rng.uniform(0, 2 * np.pi, size=11) if with_phases else None
    V, G = alignment_potential_and_grad(pts, X, y, b)
    for k in range(0, 11, 3):
        bk = None if b is None else b[k:k + 1]
        fd = central_difference(lambda w: alignment_potential(w, X, y, bk)[0], pts[k:k + 1])
        np.testing.assert_allclose(G[k:k + 1], fd, rtol=1e-7, atol=1e-10)
    V1, G1 = alignment_potential_and_grad(pts, X, y, b, chunk_size=2)
    np.testing.assert_allclose(V1, V, rtol=1e-14)
    np.testing.assert_allclose(G1, G, rtol=1e-14)


def test_energy_is_the_mean_of_the_potential(data):
    X, y, omega, b = data
    for phases in (None, b):
        assert float(rff_alignment_energy(omega, X, y, phases)) == pytest.approx(
            float(np.mean(alignment_potential(omega, X, y, phases))), rel=1e-14)
    energy = RFFAlignmentEnergy(X, y)
    np.testing.assert_allclose(len(omega) * energy.grad(omega),
                               alignment_potential_and_grad(omega, X, y)[1], rtol=1e-14)
    np.testing.assert_allclose(energy.per_particle(omega), alignment_potential(omega, X, y), rtol=1e-15)


# ----------------------------------------------------------------------------- Hamiltonian

@pytest.mark.parametrize("s", (-1.0, 0.0, 1.0))
@pytest.mark.parametrize("with_phases", (True, False))
def test_hamiltonian_value_and_gradient(data, s, with_phases):
    X, y, omega, b = data
    b = b if with_phases else None
    lam = 0.3
    value, grad = hamiltonian_and_grad(omega, X, y, s, lam, b)
    W, gW = riesz_energy_and_grad(omega, s)
    E, gE = rff_alignment_energy_and_grad(omega, X, y, b)
    assert float(value) == pytest.approx(float(E + lam * W), rel=1e-13)
    np.testing.assert_allclose(grad, gE + lam * gW, rtol=1e-13, atol=1e-16)
    fd = central_difference(lambda w: hamiltonian(w, X, y, s, lam, b), omega)
    np.testing.assert_allclose(grad, fd, rtol=1e-7, atol=1e-10)


def test_hamiltonian_is_a_sum_energy_with_per_particle_energies(data):
    X, y, omega, _ = data
    H = rff_hamiltonian(X, y, s=1.0, lam=0.5)
    assert H.normalization == "paper"
    N = len(omega)
    lam_term = 0.5 * np.array([sum(1 / np.linalg.norm(omega[k] - omega[l]) for l in range(N) if l != k)
                               for k in range(N)]) / (N - 1)
    np.testing.assert_allclose(H.per_particle(omega), alignment_potential(omega, X, y) + lam_term, rtol=1e-13)
    with pytest.raises(ValueError, match="normalizations"):
        RFFAlignmentEnergy(X, y) + RieszEnergy(1.0, normalization="mean_field")


# ----------------------------------------------------------------------------- errors

def test_bad_inputs_are_rejected(data):
    X, y, omega, b = data
    with pytest.raises(ValueError, match="y must have length"):
        rff_alignment_energy(omega, X, y[:-1])
    with pytest.raises(ValueError, match="X must have d=2"):
        rff_alignment_energy(omega, X[:, :1], y)
    with pytest.raises(ValueError, match="b must have length"):
        rff_alignment_energy(omega, X, y, b[:-1])
    with pytest.raises(ValueError, match="at least 2 rows"):
        alignment_energy(np.ones((1, 3)), np.ones(1))
    with pytest.raises(ValueError, match="non-finite"):
        alignment_energy(np.full((3, 2), np.nan), np.ones(3))
    with pytest.raises(ValueError, match="one-dimensional"):
        alignment_energy(np.ones((3, 2)), np.ones((3, 1)))
    with pytest.raises(ValueError, match="chunk_size"):
        alignment_potential(omega, X, y, chunk_size=0)


@pytest.mark.gpu
@pytest.mark.parametrize("with_phases", (True, False))
def test_cupy_matches_numpy(data, with_phases):
    from rieszflow.engine.backend import cupy_available, to_numpy

    if not cupy_available():
        pytest.skip("CuPy with a CUDA device is not available")
    import cupy as cp

    X, y, omega, b = data
    b = b if with_phases else None
    e, g = rff_alignment_energy_and_grad(omega, X, y, b)
    e_cp, g_cp = rff_alignment_energy_and_grad(*(None if a is None else cp.asarray(a) for a in (omega, X, y, b)))
    assert float(e_cp) == pytest.approx(float(e), rel=1e-12)
    np.testing.assert_allclose(to_numpy(g_cp), g, rtol=1e-11, atol=1e-14)
