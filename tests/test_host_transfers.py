"""Host transfers per step, counted on the CPU (issue 14, item 6: a host-light GPU path).

The counting backend (``get_backend("numpy", count_transfers=True)``) gives NumPy arrays that
stand in for device arrays and record every conversion to a host value (``float``, ``int``,
``bool``, ``item``, ``to_numpy``, data-dependent shapes such as ``nonzero``...). The loops below
run their production code on such arrays, exactly as they would on CuPy, and the tests assert
how many transfers happen per step: none between records, a constant number per record or
flush block. The per-step records of Phase A / Phase B are read with the block's one transfer,
so what the loops hand to the writer are host numbers; the tests use a writer stub that records
its calls (and once the real HDF5 writer, which then costs no transfer) and check the records
against a run of the same loop on plain NumPy arrays: identical for Phase B and the token flows,
equal to float64 round-off for Phase A (the device takes the fused Riesz sums, the host GEMM).
"""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rieszflow.engine import _fused
from rieszflow.engine.backend import (CountingArray, count_host_transfers, cupy_available, get_backend,
                                      namespace, to_numpy)

ROOT = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------- the counter itself

def test_counting_array_stays_on_the_device_and_counts_each_conversion():
    be = get_backend("numpy", count_transfers=True)
    x = be.asarray(np.arange(12.0).reshape(3, 4))
    xp = be.xp
    with count_host_transfers() as c:
        results = [x.sum(), x.max(), x.mean(), x.argmax(), x[0, 1], x @ x.T, xp.linalg.norm(x),
                   xp.stack([x.sum(), x.max()]), xp.where(x > 3, x, 0.0), xp.asarray(x, dtype=xp.float32),
                   xp.zeros(3), xp.maximum(np.zeros(()), x.sum()), xp.isfinite(x).all(), -x.sum()]
    assert c.total == 0
    assert all(isinstance(r, CountingArray) for r in results)
    with count_host_transfers() as c:
        float(x.sum()), int(x.argmax()), bool(x.any()), x[0, 0].item(), x.tolist(), to_numpy(x)
        f"{x.sum():.2f}", list(range(x.argmax())), xp.nonzero(x > 5), x[x > 5], x.nonzero()
    assert c.by_kind() == {"float": 1, "int": 1, "bool": 1, "item": 1, "tolist": 1, "to_numpy": 1,
                           "format": 1, "index": 1, "nonzero": 2, "mask_index": 1}
    assert all(site.startswith("tests") for site in c.by_site())   # the calling line is named
    assert float(x.sum()) == 66.0                                   # values are NumPy's


def test_counting_backend_is_numpy_only():
    with pytest.raises(ValueError, match="count_transfers"):
        get_backend("cupy", count_transfers=True)


# ----------------------------------------------------------------------------- Riesz sums

@pytest.mark.parametrize("d", [3, 16])
@pytest.mark.parametrize("method", ["auto", "fused", "gemm", "numpy"])
def test_riesz_sums_make_no_transfer(method, d):
    from rieszflow.engine.energy.riesz import riesz_energy_and_grad

    x0 = np.random.default_rng(0).normal(size=(40, d))
    x0[3] = x0[9] + 1e-9                                    # a close pair for the GEMM screen
    be = get_backend("numpy", count_transfers=True)
    with count_host_transfers() as c:
        e, g = riesz_energy_and_grad(be.asarray(x0), 1.0, method=method)
    assert c.total == 0, c.by_site()
    e_ref, g_ref = riesz_energy_and_grad(x0, 1.0, method="numpy")
    assert float(e) == pytest.approx(e_ref, rel=1e-12)
    np.testing.assert_allclose(to_numpy(g), g_ref, rtol=0, atol=1e-10 * np.abs(g_ref).max())


# ----------------------------------------------------------------------------- the main job

class StubWriter:
    """Records ``append`` calls without converting anything (the loops' only writer use here)."""

    def __init__(self):
        self.calls = []

    def append(self, dim, data, coord=None):
        self.calls.append((dim, dict(data), coord))

    def length(self, dim):
        return sum(1 for d, _, _ in self.calls if d == dim)


def _job(tmp_path, counting, **overrides):
    from rieszflow.learning.config import SMOKE_OVERRIDES, MainJobConfig
    from rieszflow.learning.train import MainJob

    cfg = MainJobConfig(**{**SMOKE_OVERRIDES, "train_limit": 64, "batch_size": 16, "eval_limit": 32,
                           "record_every": 2, **overrides})
    job = MainJob(cfg, tmp_path / "run.h5", quiet=True)
    job._build()
    if counting:                        # what backend="cupy" gives: device arrays, no finite checks
        be = get_backend("numpy", cfg.dtype, count_transfers=True)
        job.backend = job.model.backend = be
        job.model.params = {k: be.asarray(v, dtype=v.dtype) for k, v in job.model.params.items()}
        for fmap in job.model.feature_maps:
            fmap.check_finite = False   # MainJobConfig.feature_options() on CuPy
    job.step_a = 0
    job.elapsed = {"phase_a": 0.0, "phase_b": 0.0}
    job.trainable = [k for k in job.model.params if k not in set(job.omega_names)]
    return job, job._optimizer()


def _as_host(calls):
    return [(d, {k: np.asarray(to_numpy(v)) for k, v in data.items()}, c) for d, data, c in calls]


def _assert_same_calls(a, b, rtol=0.0):
    """Same appends in the same order; values equal (bit for bit when ``rtol`` is 0)."""
    assert [(d, sorted(v), c) for d, v, c in a] == [(d, sorted(v), c) for d, v, c in b]
    for (_, va, _), (_, vb, _) in zip(a, b):
        for k in va:
            if rtol:
                # float32 particle snapshots: one rounding of values equal to ~1e-15
                np.testing.assert_allclose(va[k], vb[k], rtol=max(rtol, 1e-6 if va[k].dtype == np.float32 else 0),
                                           atol=0, err_msg=k)
            else:
                assert np.array_equal(va[k], vb[k]), k


def test_phase_a_transfers_once_per_record_block(tmp_path, monkeypatch):
    """4 steps, record_every=2: per block one read of the diagnostics and one omega record."""
    job, _ = _job(tmp_path, counting=True)
    w = StubWriter()
    with count_host_transfers() as c:
        stopped = job._phase_a_epoch(w, 1)
    assert not stopped and job.step_a == 4
    sites = c.by_site()
    # 2 blocks x (1 diagnostics read + 1 read of the particles of every layer for the record)
    assert c.total == 2 * 2, sites
    assert c.by_kind() == {"to_numpy": 4}
    assert all("learning/train.py" in s for s in sites)
    # the same records as the loop on plain NumPy arrays (which reads after every step); the
    # Riesz sums take the device's fused path here and the host's GEMM path there: float64
    # round-off apart. The host's fused Numba kernels (engine._fused) are off for the reference,
    # so that its feature maps do the device path's array operations.
    monkeypatch.setattr(_fused, "ENABLED", False)
    ref_job, _ = _job(tmp_path, counting=False)
    w_ref = StubWriter()
    ref_job._phase_a_epoch(w_ref, 1)
    _assert_same_calls(_as_host(w.calls), _as_host(w_ref.calls), rtol=1e-12)



@pytest.mark.parametrize("variant", [
    dict(attention="softmax", kernel=False, feature_map=None),          # the softmax baseline
    dict(feature_map="luna", kernel=False),                             # a learned map (paper 001)
    dict(alignment="kta", feature_map="favor"),
    dict(dwc_kernel=3),
], ids=["softmax", "luna", "kta-favor", "dwc"])
def test_main_job_variants_transfer_once_per_block(tmp_path, variant):
    job, opt = _job(tmp_path, counting=True, **variant)
    w = StubWriter()
    if job.cfg.kernel:
        with count_host_transfers() as c:
            job._phase_a_epoch(w, 1)
        assert c.total == 2 * 2, c.by_site()
    with count_host_transfers() as c:
        job._phase_b_epoch(w, opt, 1)
    assert c.total == 1, c.by_site()


def test_phase_a_with_the_real_writer_costs_no_more(tmp_path):
    """With the HDF5 TrajectoryWriter instead of the stub the count is the same: the loop hands
    it host numbers read in the block's one transfer, so the writer never touches the device."""
    job, _ = _job(tmp_path, counting=True)
    job.run_id = None
    w = job._open_writer()
    try:
        with count_host_transfers() as c:
            job._phase_a_epoch(w, 1)
        assert c.total == 2 * 2, c.by_site()
        assert w.length("step") == 4 and w.length("time") == 2
    finally:
        w.close("complete")

def test_phase_a_checkpoint_is_a_block_boundary(tmp_path, monkeypatch):
    """checkpoint_seconds=0 saves after every step: one diagnostics read per step, no more."""
    job, _ = _job(tmp_path, counting=True, checkpoint_seconds=0.0)
    saved = []
    monkeypatch.setattr(type(job), "_save_ckpt", lambda self, *a, **k: saved.append(self.step_a))
    w = StubWriter()
    with count_host_transfers() as c:
        job._phase_a_epoch(w, 1)
    assert saved == [1, 2, 3]                                   # not after the epoch's last batch
    assert c.total == 4 + 2, c.by_site()                        # 4 diagnostics reads, 2 records


def test_phase_b_transfers_once_per_epoch(tmp_path, monkeypatch):
    job, opt = _job(tmp_path, counting=True)
    w = StubWriter()
    with count_host_transfers() as c:
        loss, acc = job._phase_b_epoch(w, opt, 1)
    assert c.total == 1, c.by_site()                            # 4 batches, one read
    monkeypatch.setattr(_fused, "ENABLED", False)               # the reference: the device path's operations
    ref_job, ref_opt = _job(tmp_path, counting=False)
    w_ref = StubWriter()
    assert ref_job._phase_b_epoch(w_ref, ref_opt, 1) == (loss, acc)
    _assert_same_calls(_as_host(w.calls), _as_host(w_ref.calls))
    assert len(w.calls) == 4 and all(isinstance(v["batch_loss"], float) for _, v, _ in w.calls)


def test_phase_a_delta_rule_per_block_equals_per_step(tmp_path):
    """The delta rule fires inside a block (step 2 of a 4-step block, device arrays): the records
    and the particles are those of a loop that reads after every step (record_every=1), so the
    particles stayed frozen after the stopping step."""
    over = dict(beta=1e12, delta=1e-300, phase_a_epochs=1)
    probe, _ = _job(tmp_path, counting=True, **over)
    w = StubWriter()
    probe._phase_a_epoch(w, 1)
    moves = [v["max_displacement"] for d, v, _ in w.calls if d == "step"]
    k = next(j for j in range(1, len(moves)) if moves[j] < min(moves[:j])) + 1   # first new minimum
    assert k == 2                         # inside the one block of record_every=4, mid-epoch
    delta = float(np.nextafter(moves[k - 1], np.inf))             # fires at step k exactly
    results = []
    for record_every in (4, 1):
        # device arrays (counting stand-ins): read per block of record_every steps
        job, _ = _job(tmp_path, counting=True, **{**over, "delta": delta, "record_every": record_every})
        w = StubWriter()
        assert job._phase_a_epoch(w, 1) is True
        assert job.step_a == k
        steps = [(v, c) for d, v, c in _as_host(w.calls) if d == "step"]
        results.append((steps, {k: np.array(to_numpy(v)) for k, v in job.model.params.items()}))
    (steps4, params4), (steps1, params1) = results
    assert [c for _, c in steps4] == list(range(1, k + 1)) == [c for _, c in steps1]
    for (a, _), (b, _) in zip(steps4, steps1):
        assert all(np.array_equal(a[name], b[name]) for name in a)
    assert all(np.array_equal(params4[name], params1[name]) for name in params1)


def test_phase_a_nonfinite_is_reported_at_its_step(tmp_path):
    job, _ = _job(tmp_path, counting=True, eta=1e300)
    w = StubWriter()
    with np.errstate(all="ignore"), pytest.raises(FloatingPointError, match="Phase A step 1: non-finite"):
        job._phase_a_epoch(w, 1)                  # overflow at step 1, reported at its block's end
    assert w.calls == []


# ----------------------------------------------------------------------------- Langevin runs

def _langevin(beta, counting, n=24, d=3):
    from rieszflow.engine.energy.riesz import RieszEnergy
    from rieszflow.engine.simulate import projected_langevin
    from rieszflow.engine.space import Ball

    energy = RieszEnergy(s=1.0)
    init_fn, step_fn = projected_langevin(energy.grad, Ball(1.0), eta=1e-3, beta=beta)
    x0 = 0.5 * np.random.default_rng(4).uniform(-1, 1, size=(n, d)) / np.sqrt(d)
    be = get_backend("numpy", count_transfers=counting)
    return init_fn(be.asarray(x0)), step_fn


def test_langevin_run_transfers_only_at_records():
    from rieszflow.engine.simulate import run_langevin

    state, step_fn = _langevin(1e4, counting=True)
    seen = []
    with count_host_transfers() as c:
        final = run_langevin(step_fn, state, 40, seed=1, record_every=10, progress=False,
                             callback=lambda st: seen.append(st.step))
    assert seen == [0, 10, 20, 30, 40] and final.step == 40
    assert c.total == len(seen), c.by_site()          # one finiteness check per record
    with count_host_transfers() as c:
        run_langevin(step_fn, state, 40, seed=1, record_every=10, progress=False, delta=1e-12,
                     callback=lambda st: None)
    # + one read of the delta flag per record after the initial one
    assert c.total == 2 * len(seen) - 1, c.by_site()



def test_mala_run_transfers_only_at_records():
    """MALA: the finiteness check and the stall check (acceptance streaks) at each record."""
    from rieszflow.engine.energy.riesz import RieszEnergy
    from rieszflow.engine.simulate import mala, run_langevin
    from rieszflow.engine.space import Ball

    init_fn, step_fn = mala(RieszEnergy(s=1.0).value_and_grad, Ball(1.0), eta=1e-4, beta=10.0)
    x0 = 0.3 * np.random.default_rng(0).uniform(-1, 1, size=(20, 3))
    state = init_fn(get_backend("numpy", count_transfers=True).asarray(x0))
    seen = []
    with count_host_transfers() as c:
        run_langevin(step_fn, state, 40, seed=0, record_every=10, progress=False,
                     callback=lambda st: seen.append(st.step))
    assert seen == [0, 10, 20, 30, 40]
    assert c.total == 2 * len(seen) + 1, c.by_site()     # + the stall check after the run

def test_langevin_delta_per_block_equals_per_step_at_zero_temperature():
    """beta = inf, delta fires mid-block: same stopping step, records and final state as a
    loop that reads the rule after every step (record_every=1)."""
    from rieszflow.engine.simulate import run_langevin

    state, step_fn = _langevin(np.inf, counting=False)
    moves = []
    st = state
    for _ in range(30):
        st = step_fn(st, np.zeros(st.omega.shape))     # beta = inf: the noise is not used
        moves.append(float(st.max_displacement))
    k = 17                                           # stop after step k (moves shrink at beta=inf)
    delta = float(np.nextafter(moves[k - 1], np.inf))
    assert all(m >= delta for m in moves[:k - 1])
    runs = {}
    for every in (1, 5):
        rec = []
        final = run_langevin(step_fn, state, 30, seed=0, delta=delta, record_every=every,
                             progress=False, callback=lambda s: rec.append((s.step, s.omega.copy())))
        runs[every] = (final, rec)
    (f1, r1), (f5, r5) = runs[1], runs[5]
    assert f1.step == f5.step == k
    assert np.array_equal(f1.omega, f5.omega)
    assert float(f1.max_displacement) == float(f5.max_displacement) < delta
    by_step = dict(r1)
    assert [s for s, _ in r5] == [0, 5, 10, 15, k]
    assert all(np.array_equal(om, by_step[s]) for s, om in r5)


def test_langevin_delta_without_records_reads_once_per_block():
    from rieszflow.engine.simulate import DELTA_BLOCK, run_langevin

    state, step_fn = _langevin(np.inf, counting=True)
    with count_host_transfers() as c:
        final = run_langevin(step_fn, state, 2 * DELTA_BLOCK, seed=0, delta=1e-300, progress=False)
    assert final.step == 2 * DELTA_BLOCK
    assert c.total == 2 + 1, c.by_site()         # 2 block reads, the final finiteness check


# ----------------------------------------------------------------------------- token flows

@pytest.mark.parametrize("kernel", ["softmax", "linear"])
@pytest.mark.parametrize("method", [None, "euler"])
def test_token_flow_transfers_only_at_records(kernel, method):
    """Softmax and linear-attention flows (RK4 with retraction, Euler): none per step.

    (Sinkhorn flows are the documented exception: their iterations stop on a convergence test.)
    """
    from rieszflow.engine.features import make_feature_map
    from rieszflow.engine.tokenflow import normalise, run_flow, sphere_attention_flow
    from rieszflow.engine.tokenflow.kernels import LinearKernel, SoftmaxKernel

    x0 = normalise(np.random.default_rng(2).standard_normal((12, 4)))
    if kernel == "softmax":
        field = sphere_attention_flow(SoftmaxKernel(2.0))
    else:
        fmap = make_feature_map("favor", 4, 32, check_finite=False)
        field = sphere_attention_flow(LinearKernel(fmap, fmap.init_omega(np.random.default_rng(21))), "SA")
    be = get_backend("numpy", count_transfers=True)
    x = be.asarray(x0)
    assert namespace(x) is be.xp
    with count_host_transfers() as c:
        res = run_flow(field, x, dt=0.05, t_end=1.0, record_every=5, method=method)
    n_rec = len(res.times)
    assert n_rec == 5
    # the initial check (one read of x0) and one read of the tokens per record
    assert c.total == 1 + n_rec, c.by_site()
    ref = run_flow(field, x0, dt=0.05, t_end=1.0, record_every=5, method=method)
    assert np.array_equal(np.asarray(res.x), np.asarray(ref.x))


# ----------------------------------------------------------------------------- attention layers

@pytest.mark.parametrize("case", ["signed", "positive", "causal", "learned"])
def test_linear_attention_forward_and_backward_make_no_transfer(case):
    """KernelizedLinearAttention.forward/backward read nothing back; the signed denominator's
    diagnostics (last_clamped, last_negative) stay device scalars until the caller reads them."""
    from rieszflow.engine.attention import KernelizedLinearAttention
    from rieszflow.engine.features import make_feature_map

    rng = np.random.default_rng(30)
    name, kw = {"signed": ("rff", dict(eps=0.5, signed=True)), "positive": ("softplus", dict(eps=1e-3)),
                "causal": ("softplus", dict(causal=True, chunk=2)), "learned": ("luna", dict(eps=1e-3))}[case]
    opts = {"channels": 2} if name == "luna" else {}
    if name == "rff":
        opts = {"omega_scale": 3.0}
    fmap = make_feature_map(name, 4, 6, rng=rng, check_finite=False, **opts)
    attn = KernelizedLinearAttention(8, 2, fmap, qk="learned", **kw)
    params = attn.init_params(rng)
    x0, mask0 = rng.standard_normal((3, 5, 8)), np.ones((3, 5), dtype=bool)
    mask0[1, 3:] = False
    be = get_backend("numpy", count_transfers=True)
    dev = {k: be.asarray(v) for k, v in params.items()}
    x, mask, dy = be.asarray(x0), be.asarray(mask0, dtype=bool), be.asarray(rng.standard_normal((3, 5, 8)))
    with count_host_transfers() as c:
        y, cache = attn.forward(dev, x, mask)
        dx, grads = attn.backward(dy, cache)
    assert c.total == 0, c.by_site()
    diag = (attn.last_clamped, attn.last_negative)
    y_ref, _ = attn.forward(params, x0, mask0)                    # the same layer on plain NumPy
    np.testing.assert_allclose(to_numpy(y), y_ref, rtol=1e-12, atol=1e-14)   # device paths may differ in rounding
    if case == "signed":
        assert all(isinstance(d, CountingArray) for d in diag)    # still on the "device"
        # read on the host, they are the fractions of the NumPy run
        assert (float(diag[0]), float(diag[1])) == (float(attn.last_clamped), float(attn.last_negative))
        assert 0.0 < float(diag[0]) < 1.0 and 0.0 < float(diag[1]) < 1.0
    else:
        assert diag == (None, None)


# ----------------------------------------------------------------------------- benchmarks/gpu.py

@pytest.mark.skipif(cupy_available(), reason="a CUDA device is present: benchmarks/gpu.py would measure")
def test_gpu_benchmark_fails_gracefully_without_a_device(tmp_path):
    out = tmp_path / "gpu.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu.py"), "--quick", "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("benchmarks/gpu.py: no CUDA device (CuPy is not installed or no GPU "
                                   "answers); nothing was measured")
    assert proc.stdout == "" and not out.exists()
    spec = importlib.util.spec_from_file_location("gpu_bench", ROOT / "benchmarks" / "gpu.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.suite_rows(k=1, quick=True) == []


def test_gpu_benchmark_sections_run_with_numpy_standing_in_for_cupy(monkeypatch):
    """The script's sections, at tiny sizes, with the NumPy backend in place of CuPy: every
    code path of benchmarks/gpu.py but the kernel itself and the subprocess runs."""
    import rieszflow.engine.backend as backend
    import rieszflow.learning.train as train

    real = backend.get_backend

    def fake(name="numpy", dtype="float64", count_transfers=False):
        return real("numpy", dtype, count_transfers=count_transfers)

    monkeypatch.setattr(backend, "get_backend", fake)
    monkeypatch.setattr(train, "get_backend", fake)
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    monkeypatch.setitem(sys.modules, "torch", None)   # no torch-CUDA peer rows, whatever is installed
    spec = importlib.util.spec_from_file_location("gpu_bench_numpy", ROOT / "benchmarks" / "gpu.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    real_job = mod._main_job
    monkeypatch.setattr(mod, "_main_job", lambda backend, quick, counting=False, steps=8:
                        real_job("numpy", quick, counting, steps))
    corr = mod.riesz_correctness(True, n=40)
    assert len(corr) == 16 and all(c["ok"] for c in corr)
    rows = mod.riesz_rows(1, True, 1, sizes=[(8, 60)]) + mod.phase_rows(1, True, 1)
    keys = {"measure", "project", "peer", "project_min_s", "project_median_s", "peer_min_s",
            "peer_median_s", "ratio_min", "ratio_median", "target", "agreement", "threads", "notes"}
    assert len(rows) == 2 * 2 + 2 and all(set(r) == keys for r in rows)
    assert all(np.isfinite(r["ratio_min"]) and r["ratio_min"] > 0 for r in rows)
    assert all(r["agreement"] <= 1e-12 for r in rows[:4])
    syncs = mod.host_syncs(True)
    assert syncs["phase_a"]["transfers"] == 4 and syncs["phase_b"]["transfers"] == 1
    md = mod._markdown({"gpu": "none", "riesz_correctness": corr, "riesz_rows": rows[:4],
                        "phase_rows": rows[4:], "host_syncs": syncs},
                       {"measured": "now", "commit": "x", "cores": 1, "threads": 1}, 1.0, "cmd")
    assert "## 4. Host synchronisations" in md and "| cupy fused | cupy gemm |" in md
