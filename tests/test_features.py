"""Tests of engine.features: oracles, float64 gradient checks, Monte Carlo kernels, errors.

Statistical tests are seeded; their thresholds are stated in standard errors (SE).
"""
import math

import numpy as np
import pytest

from rieszflow.engine.backend import cupy_available
from rieszflow.engine.features import FEATURE_MAPS, FeatureMap, make_feature_map

# the per-token random-feature (particle) maps of paper 000; the learned and position-dependent
# maps of paper 001 (luna, hedgehog, cosformer) have their own contract, tested in test_luna.py
ALL_MAPS = sorted(n for n, c in FEATURE_MAPS.items() if not c.learned and not c.position_dependent)
POSITIVE_MAPS = [n for n in ALL_MAPS if FEATURE_MAPS[n].positive]
L1_MAPS = ["elu", "softplus", "porf_softplus", "sigmoid2", "cos2", "softmaxfeat"]
SHAPE = (2, 3, 4)          # (batch, length, d)
M = 5


def _map(name, d=SHAPE[-1], m=M, seed=0, **options):
    return make_feature_map(name, d, m, rng=np.random.default_rng(seed), **options)


def _inputs(fm, seed=1, x_scale=1.0):
    rng = np.random.default_rng(seed)
    x = x_scale * rng.standard_normal(SHAPE[:-1] + (fm.d,))
    omega = fm.init_omega(rng)
    return x, omega


# ----------------------------------------------------------------- gradient-check harness
def eval_numerical_gradient_array(f, a, df, h=1e-6):
    """cs231n pattern: gradient of sum(f(a) * df) w.r.t. a by central differences (a mutated/restored)."""
    grad = np.zeros_like(a)
    it = np.nditer(a, flags=["multi_index"])
    while not it.finished:
        i = it.multi_index
        old = a[i]
        a[i] = old + h
        fp = f(a).copy()
        a[i] = old - h
        fm = f(a).copy()
        a[i] = old
        grad[i] = np.sum((fp - fm) * df) / (2.0 * h)
        it.iternext()
    return grad


def rel_error(analytic, numeric):
    """Max elementwise |a - n| / max(|a| + |n|, 1e-8) (cs231n, with the both-zero case floored)."""
    return float(np.max(np.abs(analytic - numeric) / np.maximum(np.abs(analytic) + np.abs(numeric), 1e-8)))


def norm_error(analytic, numeric):
    """max |a - n| / max(max |a|, max |n|): error relative to the gradient's scale."""
    return float(np.max(np.abs(analytic - numeric)) / max(np.max(np.abs(analytic)), np.max(np.abs(numeric))))


def _check_grads(fm, x, omega):
    """Elementwise and scale-relative errors of dx and domega for L = sum(W * phi), W random."""
    phi, cache = fm.forward(x, omega)
    w = np.random.default_rng(7).standard_normal(phi.shape)
    dx, domega = fm.backward(w, cache)
    assert dx.shape == x.shape and domega.shape == omega.shape
    ndx = eval_numerical_gradient_array(lambda a: fm(a, omega), x.copy(), w)
    ndom = eval_numerical_gradient_array(lambda a: fm(x, a), omega.copy(), w)
    return {"dx": (rel_error(dx, ndx), norm_error(dx, ndx)),
            "domega": (rel_error(domega, ndom), norm_error(domega, ndom))}


@pytest.mark.parametrize("name", ALL_MAPS)
@pytest.mark.parametrize("tau", [1.0, 0.7])
def test_backward_matches_central_differences(name, tau):
    # float64, h = 1e-6 (central differences). Truncation is O(h^2) ~ 1e-12, but round-off in
    # (f(a+h) - f(a-h)) / 2h is ~ eps |L| / h ~ 5e-10 in absolute terms, so entries of size 1e-4
    # reach an elementwise error of a few 1e-7 (worst seen: 3e-7). Hence two bounds: error
    # relative to the gradient's scale < 1e-6 (seen <= 5e-10), and elementwise (cs231n) < 1e-5.
    # A wrong term gives errors of order 1e-3..1 in both (see the harness test below).
    fm = _map(name, tau=tau, omega_scale=1.5)
    x, omega = _inputs(fm)
    for wrt, (elementwise, scaled) in _check_grads(fm, x, omega).items():
        assert scaled < 1e-6, f"{name}: {wrt} error relative to scale {scaled:.2e}"
        assert elementwise < 1e-5, f"{name}: {wrt} elementwise rel. error {elementwise:.2e}"


def test_gradient_harness_detects_a_wrong_backward():
    fm = _map("softplus")
    x, omega = _inputs(fm)
    phi, cache = fm.forward(x, omega)
    w = np.random.default_rng(7).standard_normal(phi.shape)
    dx, _ = fm.backward(w, cache)
    ndx = eval_numerical_gradient_array(lambda a: fm(a, omega), x.copy(), w)
    assert norm_error(dx, ndx) < 1e-6
    assert norm_error(1.001 * dx, ndx) > 1e-4 and rel_error(1.001 * dx, ndx) > 1e-4


def test_elu_gradient_exercises_both_branches():
    fm = _map("elu", tau=0.7, omega_scale=1.5)
    x, omega = _inputs(fm)
    u = x @ omega.T / fm.tau + fm.b
    assert (u > 0).any() and (u < 0).any()


# ----------------------------------------------------------------- closed-form oracles
def _oracle(fm, xv, omega):
    """The paper's formula for one token, written with Python scalars (paper 000, App. D)."""
    m, tau = fm.m, fm.tau
    dots = [sum(float(a) * float(b) for a, b in zip(w, xv)) for w in omega]
    if fm.name == "favor":
        sq = sum(float(a) ** 2 for a in xv) / tau
        return [math.exp(t / math.sqrt(tau) - sq / 2) / math.sqrt(m) for t in dots]
    if fm.name == "rff":
        return [math.sqrt(2) * math.cos(t / tau + b) for t, b in zip(dots, fm.b)]
    if fm.name == "rff_pair":                                 # paper 001, Table 5: [sin, cos] / sqrt(m)
        return ([math.sin(t / tau) / math.sqrt(m) for t in dots]
                + [math.cos(t / tau) / math.sqrt(m) for t in dots])
    if fm.name == "softmaxfeat":
        e = [math.exp(t / tau) for t in dots]
        return [math.sqrt(m) * v / sum(e) for v in e]
    if fm.name == "elu":
        def elu1(u):
            return 1 + u if u > 0 else math.exp(u)
        g = [max(elu1(t / tau + b), fm.floor) for t, b in zip(dots, fm.b)]
    elif fm.name in ("softplus", "porf_softplus"):
        g = [math.log(1 + math.exp(t / tau)) + fm.floor for t in dots]
    elif fm.name == "sigmoid2":
        g = [(1 / (1 + math.exp(-t / tau))) ** 2 + fm.floor for t in dots]
    elif fm.name == "cos2":
        g = [math.cos(t / tau + b) ** 2 + fm.floor for t, b in zip(dots, fm.b)]
    return [math.sqrt(m) * v / sum(g) for v in g]


@pytest.mark.parametrize("name", ALL_MAPS)
def test_forward_matches_paper_formula(name):
    fm = _map(name, tau=0.8, floor=1e-3)
    x, omega = _inputs(fm)
    phi = fm(x, omega)
    assert phi.shape == SHAPE[:-1] + (fm.n_features,)
    for idx in np.ndindex(*SHAPE[:-1]):
        np.testing.assert_allclose(phi[idx], _oracle(fm, x[idx], omega), rtol=1e-12, atol=1e-14)


def test_single_token_without_leading_dims():
    fm = _map("cos2")
    x, omega = _inputs(fm)
    phi, cache = fm.forward(x[0, 0], omega)
    assert phi.shape == (M,)
    np.testing.assert_allclose(phi, fm(x, omega)[0, 0], rtol=0, atol=0)
    dx, domega = fm.backward(np.ones(M), cache)
    assert dx.shape == (fm.d,) and domega.shape == (M, fm.d)


# ----------------------------------------------------------------- positivity and renormalisation
@pytest.mark.parametrize("name", POSITIVE_MAPS)
@pytest.mark.parametrize("x_scale", [1.0, 10.0])
def test_positive_maps_are_nonnegative(name, x_scale):
    fm = _map(name, m=64)
    x, omega = _inputs(fm, x_scale=x_scale)
    phi = fm(x, omega)
    assert np.all(np.isfinite(phi))
    if name == "favor":
        assert np.all(phi >= 0)
    else:
        assert np.all(phi > 0)


def test_rff_is_flagged_signed_and_takes_both_signs():
    fm = _map("rff", m=64)
    x, omega = _inputs(fm)
    phi = fm(x, omega)
    assert not fm.positive
    assert (phi < 0).any() and (phi > 0).any()


@pytest.mark.parametrize("name", L1_MAPS)
@pytest.mark.parametrize("x_scale", [1.0, 30.0])
def test_l1_renormalisation_sums_to_sqrt_m(name, x_scale):
    fm = _map(name, m=17)
    x, omega = _inputs(fm, x_scale=x_scale)
    phi = fm(x, omega)
    np.testing.assert_allclose(phi.sum(axis=-1), math.sqrt(17), rtol=1e-13)


def test_elu_floor_clamp_is_active_and_sum_still_sqrt_m():
    fm = _map("elu", m=17, floor=1e-3)
    x, omega = _inputs(fm, x_scale=30.0)
    u = x @ omega.T / fm.tau + fm.b
    assert (np.exp(u) < fm.floor).any()                 # some features are clamped
    phi = fm(x, omega)
    np.testing.assert_allclose(phi.sum(axis=-1), math.sqrt(17), rtol=1e-13)
    clamped = np.exp(np.minimum(u, 0)) < fm.floor
    # independent numpy evaluation of sum_j g_j with g_j = max(1 + ELU(u_j), floor)
    s = np.where(u > 0, 1 + u, np.maximum(np.exp(np.minimum(u, 0)), fm.floor)).sum(-1, keepdims=True)
    expected = np.broadcast_to(math.sqrt(17) * fm.floor / s, u.shape)
    np.testing.assert_allclose(phi[clamped], expected[clamped], rtol=1e-12)


def test_cos2_floor_prevents_zero_over_zero():
    m, d = 4, 3
    fm = make_feature_map("cos2", d, m, b=np.full(m, np.pi / 2))
    phi = fm(np.ones((2, d)), np.zeros((m, d)))         # every cos(u_k) = cos(pi/2) ~ 6e-17
    np.testing.assert_allclose(phi, 1 / math.sqrt(m), rtol=1e-12)
    with pytest.raises(ValueError, match="floor"):
        make_feature_map("cos2", d, m, floor=0.0, b=np.zeros(m))


# ----------------------------------------------------------------- Monte Carlo kernels
N_SE = 4.0   # two-sided threshold in standard errors: false-alarm rate 6e-5 per check (seeded anyway)


@pytest.mark.parametrize("tau", [1.0, 2.0])
def test_favor_estimates_softmax_kernel(tau):
    d, m = 4, 20000
    fm = make_feature_map("favor", d, m, omega_scale=math.sqrt(d), tau=tau)   # omega ~ N(0, I)
    rng = np.random.default_rng(11)
    omega = fm.init_omega(rng)
    qk = 0.5 * rng.standard_normal((5, 2, d))
    phi = fm(qk, omega)                                   # (5, 2, m)
    samples = m * phi[:, 0, :] * phi[:, 1, :]             # m i.i.d. terms per pair; mean = estimate
    est = samples.mean(axis=-1)
    se = samples.std(axis=-1, ddof=1) / math.sqrt(m)
    exact = np.exp(np.sum(qk[:, 0] * qk[:, 1], axis=-1) / tau)
    assert np.all(se < 0.05 * exact)                     # the test has power
    assert np.all(np.abs(est - exact) < N_SE * se), (est, exact, se)


@pytest.mark.parametrize("tau", [1.0, 1.7])
def test_rff_estimates_gaussian_kernel(tau):
    d, m = 3, 20000
    fm = make_feature_map("rff", d, m, rng=np.random.default_rng(5), omega_scale=math.sqrt(d),
                          tau=tau)
    rng = np.random.default_rng(12)
    omega = fm.init_omega(rng)
    xy = rng.standard_normal((5, 2, d))
    phi = fm(xy, omega)
    samples = phi[:, 0, :] * phi[:, 1, :]                 # K = (1/M) sum_k phi_k phi_k (eq. B.5)
    est = samples.mean(axis=-1)
    se = samples.std(axis=-1, ddof=1) / math.sqrt(m)
    exact = np.exp(-np.sum((xy[:, 0] - xy[:, 1]) ** 2, axis=-1) / (2 * tau ** 2))
    assert np.all(se < 0.02)
    assert np.all(np.abs(est - exact) < N_SE * se), (est, exact, se)


@pytest.mark.parametrize("name", ["softplus", "porf_softplus"])
def test_init_omega_marginal_law(name):
    # E|omega_k|^2 = omega_scale^2 under both laws; |omega|^2 d / s^2 ~ chi^2_d has variance 2d.
    d, m, s = 8, 4000, 1.3
    fm = make_feature_map(name, d, m, omega_scale=s)
    omega = fm.init_omega(np.random.default_rng(3))
    r2 = np.sum(omega ** 2, axis=1) * d / s ** 2
    se = math.sqrt(2 * d / m)
    assert abs(r2.mean() - d) < N_SE * se
    # isotropy: each coordinate has variance s^2/d (SE of a sample variance ~ sqrt(2/m) relative)
    var = omega.var(axis=0) * d / s ** 2
    assert np.all(np.abs(var - 1) < N_SE * math.sqrt(2 / m))


def test_porf_rows_orthogonal_within_blocks():
    d, m = 8, 20                                          # blocks of 8, 8 and a partial block of 4
    fm = make_feature_map("porf_softplus", d, m)
    omega = fm.init_omega(np.random.default_rng(4))
    for start in range(0, m, d):
        blk = omega[start:start + d]
        gram = blk @ blk.T
        off = gram - np.diag(np.diag(gram))
        assert np.max(np.abs(off)) < 1e-12 * np.max(np.diag(gram))
    # across blocks the rows are independent, not orthogonal
    assert abs(omega[0] @ omega[d]) > 1e-6
    # chi norms differ from row to row
    assert np.std(np.linalg.norm(omega, axis=1)) > 0.05
    fixed = make_feature_map("porf_softplus", d, m, row_norms="fixed").init_omega(
        np.random.default_rng(4))
    np.testing.assert_allclose(fixed[:d] @ fixed[:d].T, np.eye(d), atol=1e-12)


def test_porf_blocks_are_haar_distributed():
    # Haar measure on O(d) gives det = +1 or -1 with probability 1/2 each; LAPACK's QR without the
    # sign(diag R) fix returns a deterministic det. 400 blocks: SE of the fraction = 0.5 / 20.
    d, n_blocks = 4, 400
    omega = make_feature_map("porf_softplus", d, d * n_blocks).init_omega(np.random.default_rng(6))
    dets = np.linalg.det(omega.reshape(n_blocks, d, d))
    assert abs(np.mean(dets > 0) - 0.5) < N_SE * 0.5 / math.sqrt(n_blocks)


def test_default_init_is_not_orthogonal():
    omega = make_feature_map("softplus", 8, 8).init_omega(np.random.default_rng(4))
    gram = omega @ omega.T
    assert np.max(np.abs(gram - np.diag(np.diag(gram)))) > 1e-3


def test_init_omega_dtype_and_rng_checks():
    fm = _map("favor")
    assert fm.init_omega(np.random.default_rng(0), dtype=np.float32).dtype == np.float32
    with pytest.raises(TypeError, match="rng"):
        fm.init_omega(0)
    with pytest.raises(ValueError, match="dtype"):
        fm.init_omega(np.random.default_rng(0), dtype=np.int64)


# ----------------------------------------------------------------- FAVOR stabiliser
def test_favor_row_stabiliser_is_a_per_token_rescaling():
    raw = _map("favor")
    stab = _map("favor", stabilise="row")
    x, omega = _inputs(raw)
    phi_raw = raw(x, omega)
    phi_s, cache = stab.forward(x, omega)
    np.testing.assert_allclose(phi_s * np.exp(cache["c"]), phi_raw, rtol=1e-12)
    np.testing.assert_allclose(phi_s.max(axis=-1), 1 / math.sqrt(M), rtol=1e-14)
    # backward treats c as a constant: it equals the raw backward of exp(-c) * dphi
    w = np.random.default_rng(2).standard_normal(phi_s.shape)
    _, cache_raw = raw.forward(x, omega)
    for g_s, g_r in zip(stab.backward(w, cache), raw.backward(w * np.exp(-cache["c"]), cache_raw)):
        np.testing.assert_allclose(g_s, g_r, rtol=1e-12)


def test_favor_underflow_and_its_stabilised_cure():
    fm = _map("favor")
    stab = _map("favor", stabilise="row")
    rng = np.random.default_rng(9)
    omega = fm.init_omega(rng)
    x = rng.standard_normal((3, fm.d))
    x *= 60.0 / np.linalg.norm(x, axis=-1, keepdims=True)    # |x| = 60: exponent < -1700
    assert np.all(fm(x, omega) == 0.0)                        # documented underflow: all-zero rows
    phi = stab(x, omega)
    p = phi / phi.sum(axis=-1, keepdims=True)
    z = x @ omega.T
    softmax = np.exp(z - z.max(-1, keepdims=True))
    np.testing.assert_allclose(p, softmax / softmax.sum(-1, keepdims=True), rtol=1e-12)


@pytest.mark.parametrize("mode,axes", [("row", (-1,)), ("seq", (-2, -1))])
def test_favor_stabilised_gradient_exact_through_normalisation(mode, axes):
    # L = sum(W * phi / sum_axes phi) is invariant to the shift c, so the backward that holds
    # c constant is the exact gradient; this fails if the shift leaks into the derivative.
    fm = _map("favor", stabilise=mode, omega_scale=1.5)
    x, omega = _inputs(fm)
    w = np.random.default_rng(8).standard_normal(SHAPE[:-1] + (M,))

    def loss_parts(phi):
        s = phi.sum(axis=axes, keepdims=True)
        return phi / s, s

    def f(xx, oo):
        p, _ = loss_parts(fm(xx, oo))
        return p

    phi, cache = fm.forward(x, omega)
    p, s = loss_parts(phi)
    dphi = (w - np.sum(w * p, axis=axes, keepdims=True)) / s
    dx, domega = fm.backward(dphi, cache)
    ndx = eval_numerical_gradient_array(lambda a: f(a, omega), x.copy(), w)
    ndo = eval_numerical_gradient_array(lambda a: f(x, a), omega.copy(), w)
    assert norm_error(dx, ndx) < 1e-6 and rel_error(dx, ndx) < 1e-5
    assert norm_error(domega, ndo) < 1e-6 and rel_error(domega, ndo) < 1e-5


def test_favor_seq_stabiliser_needs_a_sequence_axis():
    fm = _map("favor", stabilise="seq")
    with pytest.raises(ValueError, match="length"):
        fm(np.ones(fm.d), np.ones((M, fm.d)))


# ----------------------------------------------------------------- fixed constants
@pytest.mark.parametrize("name", ["elu", "cos2", "rff"])
def test_fixed_constants_drawn_once_and_reproducible(name):
    fm = _map(name, seed=21)
    b0 = fm.b.copy()
    x, omega = _inputs(fm)
    first = fm(x, omega)
    second = fm(x, omega)
    np.testing.assert_array_equal(first, second)
    np.testing.assert_array_equal(fm.b, b0)
    np.testing.assert_array_equal(_map(name, seed=21).b, b0)          # same seed, same constants
    assert not np.array_equal(_map(name, seed=22).b, b0)
    given = make_feature_map(name, fm.d, M, b=b0)                      # explicit b, no rng needed
    np.testing.assert_array_equal(given(x, omega), first)


def test_phase_laws():
    m = 4000
    b = make_feature_map("rff", 2, m, rng=np.random.default_rng(0)).b
    assert b.min() >= 0 and b.max() < 2 * np.pi
    # Unif[0, 2pi): mean pi, SE = 2pi / sqrt(12 m)
    assert abs(b.mean() - np.pi) < N_SE * 2 * np.pi / math.sqrt(12 * m)
    be = make_feature_map("elu", 2, m, rng=np.random.default_rng(0), bias_std=0.5).b
    assert abs(be.std() - 0.5) < N_SE * 0.5 / math.sqrt(2 * m)
    np.testing.assert_array_equal(make_feature_map("elu", 2, 3, bias_std=0.0).b, np.zeros(3))


# ----------------------------------------------------------------- dtypes
@pytest.mark.parametrize("name", ALL_MAPS)
def test_float32_inputs_keep_float32(name):
    fm = _map(name)
    x, omega = _inputs(fm)
    phi, cache = fm.forward(x.astype(np.float32), omega.astype(np.float32))
    assert phi.dtype == np.float32
    dx, domega = fm.backward(np.ones_like(phi), cache)
    assert dx.dtype == np.float32 and domega.dtype == np.float32
    np.testing.assert_allclose(phi, fm(x, omega), rtol=2e-5, atol=1e-6)


# ----------------------------------------------------------------- bad inputs
def test_unknown_name_lists_allowed():
    with pytest.raises(ValueError, match="favor") as err:
        make_feature_map("relu", 4, 5)
    assert "relu" in str(err.value)


@pytest.mark.parametrize("name", ALL_MAPS)
def test_unknown_option_lists_allowed(name):
    with pytest.raises(ValueError, match="tau") as err:
        make_feature_map(name, 4, 5, rng=np.random.default_rng(0), temprature=2.0)
    assert "temprature" in str(err.value)
    with pytest.raises(ValueError, match="temprature"):
        FEATURE_MAPS[name](4, 5, rng=np.random.default_rng(0), temprature=2.0)


@pytest.mark.parametrize("m", [0, -3])
def test_nonpositive_m_rejected(m):
    with pytest.raises(ValueError, match="m must"):
        make_feature_map("softplus", 4, m)


@pytest.mark.parametrize("kwargs,exc,match", [
    ({"d": 0}, ValueError, "d must"),
    ({"d": 2.5}, TypeError, "d must"),
    ({"tau": 0.0}, ValueError, "tau"),
    ({"tau": float("nan")}, ValueError, "tau"),
    ({"floor": -1e-6}, ValueError, "floor"),
    ({"omega_scale": -1.0}, ValueError, "omega_scale"),
    ({"rng": 0}, TypeError, "rng"),
    ({"stabilise": "both"}, ValueError, "stabilise"),
])
def test_bad_constructor_arguments(kwargs, exc, match):
    args = {"d": 4, "m": 5}
    args.update(kwargs)
    with pytest.raises(exc, match=match):
        make_feature_map("favor", args.pop("d"), args.pop("m"), **args)


def test_random_constants_need_rng_or_b():
    with pytest.raises(ValueError, match="rng"):
        make_feature_map("cos2", 4, 5)
    with pytest.raises(ValueError, match=r"b must have shape"):
        make_feature_map("rff", 4, 5, b=np.zeros(4))
    with pytest.raises(ValueError, match="row_norms"):
        make_feature_map("porf_softplus", 4, 5, row_norms="unit")


def test_abstract_base_is_not_instantiable():
    with pytest.raises(TypeError, match="abstract"):
        FeatureMap(4, 5)


@pytest.mark.parametrize("name", ALL_MAPS)
def test_bad_forward_inputs(name):
    fm = _map(name)
    x, omega = _inputs(fm)
    with pytest.raises(ValueError, match=r"x must have shape \(\.\.\., d\)"):
        fm(x[..., :-1], omega)
    with pytest.raises(ValueError, match="omega must have shape"):
        fm(x, omega[:, :-1])
    with pytest.raises(ValueError, match="omega must have shape"):
        fm(x, omega[:-1])
    bad = x.copy()
    bad[1, 2, 0] = np.nan
    with pytest.raises(ValueError, match="x contains NaN"):
        fm(bad, omega)
    bad_o = omega.copy()
    bad_o[0, 0] = np.inf
    with pytest.raises(ValueError, match="omega contains NaN"):
        fm(x, bad_o)
    with pytest.raises(TypeError, match="float32 or float64"):
        fm(x.astype(np.int64), omega)
    phi, cache = fm.forward(x, omega)
    with pytest.raises(ValueError, match="dphi"):
        fm.backward(phi[..., :-1], cache)


def test_check_finite_can_be_disabled():
    fm = _map("softplus", check_finite=False)
    x, omega = _inputs(fm)
    x[0, 0, 0] = np.nan
    assert np.isnan(fm(x, omega)[0, 0]).all()


# ----------------------------------------------------------------- GPU parity
@pytest.mark.gpu
@pytest.mark.parametrize("name", ALL_MAPS)
def test_cupy_matches_numpy(name):
    if not cupy_available():
        pytest.skip("CuPy with a CUDA device is not available")
    import cupy as cp
    fm = _map(name)
    x, omega = _inputs(fm)
    phi, cache = fm.forward(x, omega)
    w = np.random.default_rng(7).standard_normal(phi.shape)   # the map's own feature count (rff_pair: 2M)
    phi_g, cache_g = fm.forward(cp.asarray(x), cp.asarray(omega))
    np.testing.assert_allclose(cp.asnumpy(phi_g), phi, rtol=1e-12, atol=1e-14)
    for g, g_g in zip(fm.backward(w, cache), fm.backward(cp.asarray(w), cache_g)):
        np.testing.assert_allclose(cp.asnumpy(g_g), g, rtol=1e-11, atol=1e-13)


def test_draws_constants_follows_the_registry():
    """The registry, not a caller's list, says which maps need stored constants."""
    from rieszflow.engine.features import FEATURE_MAPS
    assert FEATURE_MAPS["elu"].draws_constants() is True
    assert FEATURE_MAPS["elu"].draws_constants(bias_std=0.0) is False
    assert FEATURE_MAPS["elu"].draws_constants(b=np.zeros(3)) is False
    assert FEATURE_MAPS["cos2"].draws_constants() is True
    assert FEATURE_MAPS["cos2"].draws_constants(b=np.zeros(3)) is False
    assert FEATURE_MAPS["rff"].draws_constants() is True
    for name in ("favor", "softplus", "sigmoid2", "softmaxfeat", "porf_softplus"):
        assert FEATURE_MAPS[name].draws_constants() is False, name
    # agreement with construction: a map that does not draw builds without an rng
    for name, cls in FEATURE_MAPS.items():
        if not cls.draws_constants():
            make_feature_map(name, 3, 4)
        else:
            with pytest.raises(ValueError, match="rng=None"):
                make_feature_map(name, 3, 4)


def test_orthogonal_init_is_a_feature_map_option():
    """init='orthogonal' is available to every map (the Performer's FAVOR+ uses it); it is the
    default of porf_softplus only; row_norms without it is an error."""
    rng = np.random.default_rng(3)
    fm = make_feature_map("favor", 4, 10, init="orthogonal", row_norms="fixed")
    om = fm.init_omega(rng)
    np.testing.assert_allclose(om[:4] @ om[:4].T, np.eye(4), atol=1e-12)   # omega_scale 1, fixed norms
    np.testing.assert_allclose(om[4:8] @ om[4:8].T, np.eye(4), atol=1e-12)
    assert make_feature_map("porf_softplus", 4, 5).init == "orthogonal"
    assert make_feature_map("softplus", 4, 5).init == "iid"
    with pytest.raises(ValueError, match="row_norms"):
        make_feature_map("favor", 4, 5, row_norms="chi")
    with pytest.raises(ValueError, match="init"):
        make_feature_map("favor", 4, 5, init="sobol")


def test_orthogonal_favor_estimates_the_softmax_kernel():
    """FAVOR+ (orthogonal blocks, chi row norms, omega_scale = sqrt(d)) is an unbiased estimator of
    exp(q . k / tau): the mean over independent draws lies within 4 standard errors."""
    d, m, draws = 4, 8, 4000
    rng = np.random.default_rng(11)
    q = np.array([0.3, -0.5, 0.2, 0.4])
    k = np.array([-0.1, 0.6, 0.3, 0.2])
    tau = 2.0
    fm = make_feature_map("favor", d, m, tau=tau, omega_scale=math.sqrt(d), init="orthogonal")
    est = np.empty(draws)
    for i in range(draws):
        om = fm.init_omega(rng)
        pq, _ = fm.forward(q[None], om)
        pk, _ = fm.forward(k[None], om)
        est[i] = float(pq[0] @ pk[0])
    se = est.std(ddof=1) / math.sqrt(draws)
    assert abs(est.mean() - math.exp(q @ k / tau)) < 4 * se


@pytest.mark.parametrize("name", sorted(FEATURE_MAPS))
@pytest.mark.parametrize("m", [1, 3, 8])
def test_rows_for_inverts_n_features(name, m):
    """Each map class declares its particle-row count: rows_for(n_features) == m for the built map."""
    opts = {"channels": 3} if name == "luna" else {}
    fm = make_feature_map(name, 4, m, rng=np.random.default_rng(0), **opts)
    assert FEATURE_MAPS[name].rows_for(fm.n_features, **opts) == m
    assert fm.n_features == m * FEATURE_MAPS[name].features_per_row(**opts)
    # options that do not change the count are ignored; LUNA's default has 8 channels
    assert FEATURE_MAPS[name].rows_for(fm.n_features, tau=2.0, **opts) == m
    expected = {"luna": 8, "hedgehog": 2, "cosformer": 2, "rff_pair": 2}.get(name, 1)
    assert FEATURE_MAPS[name].rows_for(16 * expected) == 16
    for bad in (0, -2):
        with pytest.raises(ValueError, match="n_features"):
            FEATURE_MAPS[name].rows_for(bad)
    with pytest.raises(TypeError, match="n_features"):
        FEATURE_MAPS[name].rows_for(2.0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softplus_and_sigmoid_kernels_match_high_precision(dtype):
    """The fused softplus/sigmoid of the softplus map (one shared exp(-|u|), in place) against
    mpmath at 50 digits, over both tails: relative error within a few units of roundoff, and
    0-d input (NumPy scalars, no out=) takes the same values."""
    mpmath = pytest.importorskip("mpmath")
    from rieszflow.engine.features.base import _sigmoid, _softplus_sigmoid

    mpmath.mp.dps = 50
    u = np.concatenate([np.linspace(-80.0, 80.0, 641), [-1e-7, 0.0, 1e-7]]).astype(dtype)
    g, dg = _softplus_sigmoid(np, u, 0.0)
    sig = _sigmoid(np, u)
    ref_g = np.array([float(mpmath.log1p(mpmath.exp(mpmath.mpf(float(x))))) for x in u])
    ref_s = np.array([float(1 / (1 + mpmath.exp(-mpmath.mpf(float(x))))) for x in u])
    eps = float(np.finfo(dtype).eps)
    tiny = float(np.finfo(dtype).tiny)           # float32 exp(-80) is subnormal: absolute there
    for got in (dg, sig):
        assert got.dtype == dtype
        err = np.abs(got - ref_s) / np.maximum(ref_s, tiny / eps)
        assert err.max() <= 4 * eps, err.max()
    err = np.abs(g - ref_g) / np.maximum(ref_g, tiny / eps)
    assert g.dtype == dtype and err.max() <= 4 * eps, err.max()
    g0, dg0 = _softplus_sigmoid(np, np.asarray(u[3], dtype=dtype), 0.5)
    assert float(g0) == pytest.approx(float(g[3]) + 0.5, rel=4 * eps)
    assert float(dg0) == pytest.approx(float(dg[3]), rel=4 * eps)
