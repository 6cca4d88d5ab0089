"""Acceptance tests AT-1..AT-14 of docs/specs/paper003_kgd.md (closed-form oracles, seeded Monte Carlo)."""
from math import comb

import numpy as np
import pytest
from scipy.special import eval_gegenbauer

from rieszflow.theory.kgd import sampling as rs
from rieszflow.theory.kgd import spectral as sp

DS = [8, 16, 32, 64, 128]
T2 = [0.08153606, 0.04696078, 0.02573236, 0.01367163, 0.00712171]
PAPER_T2 = [0.0815, 0.0470, 0.0257, 0.0137, 0.0071]


def test_at1_multiplicity():
    for l in range(20):
        assert sp.multiplicity(3, l) == 2 * l + 1
    for d in (4, 8, 32, 128):
        assert sp.multiplicity(d, 1) == d
        assert sp.multiplicity(d, 2) == (d + 2) * (d - 1) // 2
        for L in (0, 3, 10):
            assert sum(sp.multiplicity(d, l) for l in range(L + 1)) == comb(L + d - 1, d - 1) + comb(L + d - 2, d - 1)
    with pytest.raises(ValueError, match="d must"):
        sp.multiplicity(2, 1)


def test_at2_at3_normalisation_orthogonality():
    for d in (3, 8, 32, 128):
        t, w = sp.jacobi_nodes(d, 80)
        assert abs(w.sum() - 1) < 1e-12
        P = sp.gegenbauer_normalised(40, d, t)
        G = (P * w) @ P.T
        N = np.sqrt([float(sp.multiplicity(d, l)) for l in range(41)])
        assert np.max(np.abs(N[:, None] * G * N[None, :] - np.eye(41))) < 1e-12


def test_at4_recurrence_vs_scipy():
    t = np.linspace(-1, 1, 31)
    for d in (3, 8, 32, 128):
        P = sp.gegenbauer_normalised(40, d, t)
        for l in range(41):
            ref = eval_gegenbauer(l, (d - 2) / 2, t) / eval_gegenbauer(l, (d - 2) / 2, 1.0)
            assert np.max(np.abs(P[l] - ref)) < 1e-13


def test_at5_at6_eigenvalues():
    ls = np.arange(12)
    for d in (8, 32, 128):
        for k, lam in ((sp.kernel_ind_paper, sp.lam_ind), (sp.kernel_gs, sp.lam_gs)):
            q = sp.eigenvalues_quadrature(lambda t: k(t, d), d, 11, 60)
            c = lam(ls, d)
            assert np.all(np.abs(q - c) <= 1e-12 * np.abs(c) + 1e-16)
    ref_ind = [8.383761e-01, 4.631285e-03, 2.407889e-05, 1.182358e-07, 5.500239e-10]
    ref_gs = [8.426085e-01, 1.454152e-04, 2.223062e-08, 3.031512e-12, 3.710361e-16]
    np.testing.assert_allclose(sp.lam_ind(np.arange(5), 32), ref_ind, rtol=1e-6)
    np.testing.assert_allclose(sp.lam_gs(np.arange(5), 32), ref_gs, rtol=1e-6)
    N = np.array([float(sp.multiplicity(32, l)) for l in range(21)])
    assert abs(np.sum(N * sp.lam_ind(np.arange(21), 32)) - 1) < 1e-12
    assert abs(np.sum(N * sp.lam_gs(np.arange(21), 32)) - 0.847273494) < 1e-9
    t, w = sp.jacobi_nodes(32, 80)
    assert abs(np.sum(N * sp.lam_gs(np.arange(21), 32) ** 2) - np.sum(w * sp.kernel_gs(t, 32) ** 2)) < 1e-12


def test_at7_at8_table2():
    vals = []
    for d, ref, paper in zip(DS, T2, PAPER_T2):
        k1 = lambda t: sp.kernel_ind_paper(t, d)
        k2 = lambda t: sp.kernel_gs(t, d)
        a = sp.kgd_listing(d, k1, k2)
        b = sp.kgd_closed_form(d, "P")
        c = sp.kgd_parseval(k1, k2, d)
        m = float(sp.kgd_parseval_mp(d, "P", dps=30))            # 30-digit reference
        assert abs(a - b) <= 1e-9 * b and abs(c - b) <= 1e-9 * b and abs(m - b) <= 1e-12 * b
        assert abs(b - ref) < 5e-9 and abs(b - paper) <= 5e-5
        vals.append(b)
    slope, _, r2 = sp.fit_loglog(DS, vals)
    assert abs(slope + 0.8815) < 5e-4 and abs(slope + 0.88) < 5e-3
    assert abs(r2 - 0.99895) < 1e-5


def test_at9_asymptotics_refute_thm73():
    for d, ref in ((128, 0.99582), (1024, 0.99950), (65536, 0.999992)):
        v = d * sp.kgd_closed_form(d, "P", L=10) * np.exp(d ** -0.5)
        assert abs(v / ref - 1) < 1e-4
    ds = np.array([2 ** k for k in range(3, 17)])
    k = np.array([sp.kgd_closed_form(int(d), "P", L=10) for d in ds])
    local = np.diff(np.log(k)) / np.diff(np.log(ds))
    assert np.all(np.diff(local) < 0) and abs(local[-1] + 1) < 0.01
    assert (np.sqrt(ds) * k)[-1] < 0.1 * (np.sqrt(ds) * k)[0]


def test_at11_rhf_mixture():
    r1 = [0.057075, 0.032873, 0.018013, 0.009570, 0.004985]
    r2 = [0.024461, 0.014088, 0.007720, 0.004101, 0.002137]
    for d, a, b in zip(DS, r1, r2):
        ind = lambda t: sp.kernel_ind_paper(t, d)
        gs = lambda t: sp.kernel_gs(t, d)
        rhf = lambda t: sp.kernel_rhf_table2(t, d)
        x, y, z = (sp.kgd_listing(d, ind, rhf), sp.kgd_listing(d, rhf, gs), sp.kgd_listing(d, ind, gs))
        assert abs(x - a) <= 5e-5 and abs(y - b) <= 5e-5
        assert abs(x + y - z) < 1e-12


def test_at14_listing_pitfall():
    d = 128
    k1 = lambda t: sp.kernel_ind_paper(t, d)
    k2 = lambda t: sp.kernel_gs(t, d)
    assert abs(sp.kgd_listing(d, k1, k2, n_quad=41) - 0.0099786) < 1e-7
    assert abs(sp.kgd_listing(d, k1, k2, n_quad=60) - 0.0071217096) < 1e-9
    # true Gauss-Jacobi: N = 41 (L_max = 40) and even N = 5 (L_max = 4) are exact
    for n, L in ((41, 40), (5, 4)):
        gj = sp.kgd_series(sp.eigenvalues_quadrature(k1, d, L, n), sp.eigenvalues_quadrature(k2, d, L, n), d)
        assert abs(gj - 0.0071217096) < 1e-9


def test_riesz_spectrum_jacobi_vs_closed_form():
    # the Jacobi weight absorbs the (2-2t)^{-sigma/2} endpoint singularity: exact to round-off
    for d, sig in ((3, 1.0), (8, 1.0), (8, 3.5), (32, 10.0), (5, 0.5)):
        q = sp.eigenvalues_riesz(d, sig, 8, 80)
        c = sp.lam_riesz(np.arange(9), d, sig)
        assert np.max(np.abs(q / c - 1)) < 1e-10
    # without the singular weight the plain rule is visibly wrong (the reason for the weight)
    plain = sp.eigenvalues_quadrature(lambda x: sp.riesz_zonal(np.minimum(x, 1 - 1e-15), 3.5), 8, 0, 20)
    assert abs(plain[0] / sp.lam_riesz(0, 8, 3.5)[0] - 1) > 1e-5
    # the log kernel (sigma = 0): closed form vs adaptive quadrature of E_t[-log(2-2t)/2 P_l]
    from scipy import integrate
    d = 8
    P = lambda t, l: sp.gegenbauer_normalised(l, d, t)[l]
    f = lambda t, l: sp.c_d(d) * (1 - t * t) ** ((d - 3) / 2) * sp.riesz_zonal(t, 0.0) * P(t, l)
    ref = [integrate.quad(f, -1, 1, args=(l,), limit=200, epsabs=1e-14)[0] for l in range(4)]
    np.testing.assert_allclose(sp.lam_riesz(np.arange(4), d, 0.0), ref, rtol=1e-8)
    with pytest.raises(ValueError, match="sigma"):
        sp.lam_riesz(1, 8, 7.0)


def test_riesz_spectrum_ties_to_engine_riesz_energy():
    # W_{N,s} = 1/(2N(N-1)) sum_{k != l} g_s: E W = lambda_0 / 2 for i.i.d. uniform points (z = 4)
    from rieszflow.engine.energy.riesz import riesz_energy
    from rieszflow.engine.space import Sphere

    rng = np.random.default_rng(5)
    for d, s in ((3, 1.0), (8, 0.0), (8, 2.0)):
        vals = np.array([2 * float(riesz_energy(Sphere().sample_uniform(rng, 60, d), s, method="numpy"))
                         for _ in range(200)])
        lam0 = sp.lam_riesz(0, d, s)[0]
        assert abs(vals.mean() - lam0) < 4 * vals.std(ddof=1) / np.sqrt(vals.size)


def test_at10_consistent_variants():
    ref = {8: (0.297065, 0.208596), 16: (0.219149, 0.170673), 32: (0.160789, 0.134736),
           64: (0.116920, 0.103182), 128: (0.084350, 0.077215), 512: (0.043195, 0.041328),
           2048: (0.021850, 0.021372)}
    for d, (c1, c2) in ref.items():
        # spec values are printed to 6 decimals: 1e-5 relative or half a unit of the last digit
        assert abs(sp.kgd_closed_form(d, "C1") - c1) <= max(1e-5 * c1, 5e-7)
        assert abs(sp.kgd_closed_form(d, "C2") - c2) <= max(1e-5 * c2, 5e-7)
        assert sp.kgd_closed_form(d, "PERF") == 0.0
        if d <= 128:                                              # mpmath Parseval, spec's method
            assert abs(float(sp.kgd_parseval_mp(d, "C1")) - c1) <= max(1e-5 * c1, 5e-7)
            assert abs(float(sp.kgd_parseval_mp(d, "C2")) - c2) <= max(1e-5 * c2, 5e-7)


def _pair(d, t):
    x = np.zeros(d); x[0] = 1
    y = np.zeros(d); y[0] = t; y[1] = np.sqrt(1 - t * t)
    return np.stack([x, y])


@pytest.mark.parametrize("kind", ["gs", "rhf_haar"])
def test_at12_at13_mc_kernels_equal_kgs(kind):
    d, nb = 32, 1000
    rng = np.random.default_rng(12)
    for t in (-0.9, 0.0, 0.5, 0.95):
        X = _pair(d, t)
        vals = []
        for _ in range(nb):
            W = rs.gs_orf_omega(d, d, rng) if kind == "gs" else rs.rhf_omega(d, d, rng, haar=True)
            F = rs.positive_features(X, W)
            vals.append(F[0] @ F[1])
        vals = np.array(vals)
        se = vals.std(ddof=1) / np.sqrt(nb)
        assert abs(vals.mean() - sp.kernel_gs(t, d)) < 4 * se + 1e-12


def test_at13_gaussian_rf_is_softmax_not_eq3():
    d, m = 32, 400_000
    rng = np.random.default_rng(13)
    W = rs.gaussian_omega(m, d, rng)
    for t in (0.0, 0.5, 0.95):
        F = rs.positive_features(_pair(d, t), W) * np.sqrt(m)
        prod = F[0] * F[1]
        se = prod.std(ddof=1) / np.sqrt(m)
        assert abs(prod.mean() - sp.kernel_softmax(t, d)) < 4 * se
    # eq. (3) differs from the Gaussian-RF expectation by far more than the MC error at t = 0.5
    assert abs(sp.kernel_softmax(0.5, d) - sp.kernel_ind_paper(0.5, d)) > 20 * se


def test_chi_orf_rows_gaussian_norms_and_bad_input():
    W = rs.gs_orf_omega(64, 32, 0, orf_norm="chi")
    assert W.shape == (64, 32)
    assert abs(np.mean(np.sum(W ** 2, 1)) - 32) < 4 * np.sqrt(2 * 32 / 64)
    with pytest.raises(ValueError, match="orf_norm"):
        rs.gs_orf_omega(4, 32, 0, orf_norm="x")
    with pytest.raises(ValueError, match="power of 2"):
        rs.rhf_omega(4, 12, 0)


def test_chi_orf_expected_kernel_is_softmax_perf_variant():
    # Performer convention: chi_d row norms make every row N(0, I): E phi.phi = K_soft (z = 4)
    d, nb, t = 32, 1000, 0.5
    rng = np.random.default_rng(14)
    X = _pair(d, t)
    vals = np.array([(lambda F: F[0] @ F[1])(rs.positive_features(X, rs.gs_orf_omega(d, d, rng, "chi")))
                     for _ in range(nb)])
    se = vals.std(ddof=1) / np.sqrt(nb)
    assert abs(vals.mean() - sp.kernel_softmax(t, d)) < 4 * se
    assert abs(sp.kernel_softmax(t, d) - sp.kernel_gs(t, d)) > 20 * se


def test_paired_gs_orf_is_gram_schmidt_of_the_gaussian_rows():
    G, O = rs.paired_gaussian_gs_orf(70, 32, 3)
    assert G.shape == O.shape == (70, 32)
    np.testing.assert_allclose(O[:32] @ O[:32].T, np.eye(32), atol=1e-12)
    # Gram-Schmidt: row k of O lies in the span of rows 0..k of G, with a positive coefficient
    for k in (0, 5, 31):
        coef = np.linalg.lstsq(G[:k + 1].T, O[k], rcond=None)[0]
        assert np.allclose(G[:k + 1].T @ coef, O[k], atol=1e-10) and coef[-1] > 0


def test_prop42_kgd_is_a_pseudometric_positively_homogeneous():
    # random zonal kernels as random non-negative spectra (d = 8, L = 6): triangle inequality,
    # symmetry, KGD(K, K) = 0 and KGD(c K1, c K2) = c KGD ("scale invariance" in the paper)
    rng = np.random.default_rng(42)
    for _ in range(200):
        a, b, c = (rng.exponential(size=7) * 10.0 ** -np.arange(7) for _ in range(3))
        ab, bc, ac = sp.kgd_series(a, b, 8), sp.kgd_series(b, c, 8), sp.kgd_series(a, c, 8)
        assert ac <= ab + bc + 1e-15 and ab == sp.kgd_series(b, a, 8) and sp.kgd_series(a, a, 8) == 0
        assert abs(sp.kgd_series(3 * a, 3 * b, 8) - 3 * ab) <= 1e-14 * ab
    # Parseval form on profiles: the series equals sqrt(E_t[(K1 - K2)^2]) for the same spectra
    t, w = sp.jacobi_nodes(8, 40)
    P = sp.gegenbauer_normalised(6, 8, t)
    N = np.array([float(sp.multiplicity(8, l)) for l in range(7)])
    k1, k2 = (N * a) @ P, (N * b) @ P
    assert abs(np.sqrt(np.sum(w * (k1 - k2) ** 2)) - sp.kgd_series(a, b, 8)) <= 1e-12
