"""Paper 001's fixed sin/cos-pair RFF baseline (`rff_pair`) and the envelope gate at initialisation.

Oracles: E[phi(x) . phi(y)] = exp(-s^2 |x - y|^2 / (2 tau^2)) for omega ~ N(0, s^2 I) (Bochner;
Rahimi and Recht 2007), judged by a seeded Monte Carlo at 4 standard errors; the sin/cos pair's
estimate is exactly shift-invariant for every draw; sigmoid(0) = 1/2 makes the gated LUNA map half
the ungated one at initialisation.
"""
import math

import numpy as np
import pytest

from rieszflow.engine.features import FEATURE_MAPS, make_feature_map


def _kernel_draws(fm, omega, x, y):
    """The m per-frequency terms whose mean is phi(x) . phi(y)."""
    px, py = fm(x, omega), fm(y, omega)
    return fm.m * px[: fm.m] * py[: fm.m] + fm.m * px[fm.m:] * py[fm.m:]


@pytest.mark.parametrize("d, omega_scale, tau", [(8, math.sqrt(8), 1.0), (32, 32 ** 0.25, 1.0), (4, 2.0, 0.7)])
def test_rff_pair_estimates_the_gaussian_kernel(d, omega_scale, tau):
    rng = np.random.default_rng(20 + d)
    m = 40_000
    fm = make_feature_map("rff_pair", d, m, tau=tau, omega_scale=omega_scale)
    omega = fm.init_omega(rng)
    s2 = omega_scale ** 2 / d                                    # per-entry variance of omega
    for _ in range(3):
        x, y = rng.standard_normal(d) / math.sqrt(d), rng.standard_normal(d) / math.sqrt(d)
        terms = _kernel_draws(fm, omega, x, y)
        est = float(fm(x, omega) @ fm(y, omega))
        assert est == pytest.approx(terms.mean(), rel=1e-10, abs=1e-12)
        se = terms.std(ddof=1) / math.sqrt(m)
        r2 = float(np.sum((x - y) ** 2))
        exact = math.exp(-s2 * r2 / (2 * tau ** 2))
        assert abs(est - exact) < 4 * se
        wrong = math.exp(-s2 * r2 / tau ** 2)                    # a kernel twice as narrow is excluded
        assert abs(est - wrong) > 4 * se
    # phi(x) . phi(x) = 1 exactly: sin^2 + cos^2 over m frequencies, divided by m
    x = rng.standard_normal(d)
    assert float(fm(x, omega) @ fm(x, omega)) == pytest.approx(1.0, abs=1e-12)


def test_rff_pair_is_shift_invariant_per_draw_unlike_the_random_phase_map():
    rng = np.random.default_rng(5)
    d, m = 6, 16
    pair = make_feature_map("rff_pair", d, m)
    phase = make_feature_map("rff", d, m, rng=rng)
    omega = pair.init_omega(rng)
    x, y, t = rng.standard_normal((3, d))
    k = float(pair(x, omega) @ pair(y, omega))
    assert float(pair(x + t, omega) @ pair(y + t, omega)) == pytest.approx(k, abs=1e-12)
    kp = float(phase(x, omega) @ phase(y, omega)) / m
    assert abs(float(phase(x + t, omega) @ phase(y + t, omega)) / m - kp) > 1e-3
    assert FEATURE_MAPS["rff_pair"].positive is False and pair.n_features == 2 * m


def test_gated_luna_is_exactly_half_the_ungated_map_at_initialisation():
    """The gate h = sigmoid(A_h x + c_h) starts at A_h = c_h = 0, so h = 1/2 exactly; the gate draws
    nothing, so the same generator gives the same projections and MLP. Normalised linear attention
    is invariant to a common scale of phi except through eps: the two outputs differ by O(eps)."""
    d, M = 16, 8
    maps = {}
    for env in ("none", "gate"):
        rng = np.random.default_rng(3)
        fm = make_feature_map("luna", d, M, envelope=env, channels=8, hidden=64)
        omega, theta = fm.init_omega(rng), fm.init_theta(rng)
        maps[env] = (fm, omega, theta)
    x = np.random.default_rng(4).standard_normal((2, 10, d))
    phi = {env: fm(x, om, th) for env, (fm, om, th) in maps.items()}
    assert np.array_equal(phi["gate"], 0.5 * phi["none"])
    assert np.any(phi["none"] > 0)
    v = np.random.default_rng(6).standard_normal((2, 10, 4))
    eps = 1e-6

    def attn(p):
        num = np.einsum("bnd,bmd,bme->bne", p, p, v)
        den = np.einsum("bnd,bmd->bn", p, p)[..., None] + eps
        return num / den
    a0, a1 = attn(phi["none"]), attn(phi["gate"])
    den = np.einsum("bnd,bmd->bn", phi["none"], phi["none"])
    bound = 4 * eps / den.min() * np.abs(a0).max()
    assert 0 < np.abs(a1 - a0).max() <= bound


def test_dead_channel_rate_at_a_point_is_one_half_and_falls_with_the_range():
    """psi_l(0) = relu(a2_l . relu(c1) + c2_l) with a2, c2 ~ U(-1/8, 1/8) symmetric: P(dead at a point)
    = 1/2 exactly. On a wider range a channel must vanish everywhere, so the rate is lower."""
    from rieszflow.studies.luna.study import dead_on_range

    fm = make_feature_map("luna", 16, 8, channels=8, hidden=64)
    rng = np.random.default_rng(9)
    thetas = [fm.init_theta(rng) for _ in range(120)]
    point = np.concatenate([dead_on_range(fm, th, 0.0, 0.0) for th in thetas]).astype(float)
    se = math.sqrt(0.25 / point.size)
    assert abs(point.mean() - 0.5) < 4 * se
    wide = np.concatenate([dead_on_range(fm, th, -2.5, 2.5, 50) for th in thetas]).astype(float)
    assert wide.mean() < point.mean() - 4 * math.sqrt(2 * 0.25 / point.size)
    with pytest.raises(ValueError, match="lo"):
        dead_on_range(fm, thetas[0], 1.0, -1.0)
