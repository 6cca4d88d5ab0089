"""benchmarks/bench_fast.py at small N (seconds): the ``keops`` and ``langevin`` subcommands run and write
the JSON fields the report reads, their numbers check against oracles (exact direct sums, the suite's
factorised KeOps peer, the bare library, MALA's acceptance count), and ``report`` renders the new
sections. Never a time threshold."""
import json
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "benchmarks")]

import bench_fast  # noqa: E402

from rieszflow.engine.energy.fast_rows import riesz_row_sums  # noqa: E402


def test_block_rows_is_the_exact_row_sum_among_the_points():
    x = bench_fast.unit_ball(np.random.default_rng(1), 40, 2)
    for s in (0.0, 1.0):
        rows, grads = bench_fast._block_rows(x, s)
        e_rows, e_grads = riesz_row_sums(x, np.arange(40), s)
        np.testing.assert_allclose(rows, e_rows, rtol=1e-12)
        np.testing.assert_allclose(grads, e_grads, rtol=1e-10, atol=1e-12 * np.abs(e_grads).max())


def test_keops_rows_is_the_suites_idiomatic_peer_and_exact():
    pytest.importorskip("pykeops")
    from bench_riesz import keops_coulomb

    x = bench_fast.unit_ball(np.random.default_rng(2), 400, 3)
    rows, grads = bench_fast.keops_rows(x[:30], x, 1.0)
    n = x.shape[0]
    _, g_peer = keops_coulomb(x, "idiomatic", rows=30)       # grad of the mean, = row sums / (n (n - 1))
    np.testing.assert_allclose(grads, np.asarray(g_peer) * n * (n - 1.0), rtol=1e-12)
    e_rows, e_grads = riesz_row_sums(x, np.arange(30), 1.0)
    np.testing.assert_allclose(rows, e_rows, rtol=1e-12)
    np.testing.assert_allclose(grads, e_grads, rtol=1e-10)
    x2 = bench_fast.unit_ball(np.random.default_rng(3), 400, 2)
    rows, grads = bench_fast.keops_rows(x2[:30], x2[30:], 0.0)
    b_rows, b_grads = bench_fast._block_rows(x2[:30], 0.0)
    e_rows, e_grads = riesz_row_sums(x2, np.arange(30), 0.0)
    np.testing.assert_allclose(rows + b_rows, e_rows, rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(grads + b_grads, e_grads, rtol=1e-10)
    with pytest.raises(ValueError, match="s must be 0 or 1"):
        bench_fast.keops_rows(x[:3], x, 2.0)


def test_keops_subcommand_writes_its_fields_and_the_report_shows_them(tmp_path):
    pytest.importorskip("pykeops")
    out = tmp_path / "k.json"
    bench_fast.main(["keops", "--n", "600", "--rows", "40", "--check-rows", "5", "--small-n", "400", "--json", str(out)])
    rows = json.loads(out.read_text())["keops"]
    assert [(r["d"], r["s"], r["method"]) for r in rows] == [(3, 1.0, "fmm"), (2, 0.0, "nufft")]
    for r in rows:
        pairs = 40 * (600 if r["s"] == 1.0 else 560)
        assert r["keops_pairs"] == pairs and r["keops_scale"] == pytest.approx(600 * 599 / pairs)
        assert r["keops_cpu_s"] == pytest.approx(r["keops_rows_cpu_s"] * r["keops_scale"])
        assert max(r["keops_vs_exact_pot_rel_max"], r["keops_vs_exact_grad_rel_max"]) < 1e-12
        assert max(r["pot_rel_l2"], r["grad_rel_l2"]) < 1e-5        # tol 1e-6 / 1e-7
        assert r["fast_cpu_s"] > 0 and r["peak_rss_mib"] > 0 and r["keops_small_pairs_per_cpu_s"] > 0
        # the factorised direct sum (algorithm comparison) and the bare library (implementation peer)
        assert r["keops_factorised"] and ".auto_factorize()" in r["keops_formula"]
        assert r["impl_cpu_s"] > 0 and r["fast_over_impl_cpu"] == pytest.approx(r["fast_cpu_s"] / r["impl_cpu_s"])
        assert ("fmm3dpy.lfmm3d" if r["method"] == "fmm" else "FINUFFT") in r["impl_peer"]
    assert rows[0]["impl_agreement"] < 1e-12 and rows[1]["impl_agreement"] is None
    md = tmp_path / "p.md"
    bench_fast.main(["report", "--json", str(out), "--md", str(md)])
    text = md.read_text()
    assert "## 4. Peers at N = 600" in text and "scaled" in text and rows[0]["keops_formula"] in text
    assert "**Implementation peer**" in text and "**Algorithm comparison**" in text and "~~" not in text


@pytest.mark.parametrize("opts", [["--space", "box", "--sampler", "mala"],
                                  ["--space", "free", "--sampler", "langevin", "--d", "2", "--s", "0",
                                   "--method", "nufft", "--tol", "1e-7"]])
def test_langevin_subcommand_other_domains_and_mala(tmp_path, opts):
    import xarray as xr

    bench_fast.main(["langevin", "--n", "500", "--steps", "4", "--record-every", "2", "--particles", "50",
                     "--eta", "1e-4", "--out", str(tmp_path), "--name", "run"] + opts)
    g = json.loads((tmp_path / "run.json").read_text())["dynamics"][0]
    assert g["steps_done"] == 4 and g["records"] == 3 and len(g["intervals_cpu_s"]) == 2
    assert g["space_kind"] == opts[1] and g["sampler"] == opts[3]
    assert g["one_grad_cpu_s"] > 0               # the step's reference in the same run (CPU s / one gradient)
    with xr.open_dataset(tmp_path / "run.h5", engine="h5netcdf") as ds:
        assert ds.sizes["particle"] == 50 and ds.sizes["coord"] == g["d"]
        assert np.allclose(ds["second_moment"].values, g["second_moment"])
        if g["space_kind"] == "box":
            assert np.all(np.abs(ds["omega"].values) <= 1.0)
    if g["sampler"] == "mala":
        assert 0 <= g["accepted"] <= 4 and g["acceptance_rate"] == g["accepted"] / 4
    else:
        assert "acceptance_rate" not in g
    md = tmp_path / "p.md"
    bench_fast.main(["report", "--json", str(tmp_path / "run.json"), "--md", str(md)])
    text = md.read_text()
    assert "## 5. Projected Langevin and MALA" in text and "Not measured at N = 10^6" in text
    assert "step / one gradient (CPU, same run)" in text


def test_bad_options_are_usage_errors(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        bench_fast.main(["langevin", "--n", "50", "--steps", "1", "--d", "2", "--s", "0", "--out", str(tmp_path)])
    assert exc.value.code == 2 and "--method fmm needs --d 3 --s 1, got --d 2 --s 0" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        bench_fast.main(["keops", "--n", "50", "--rows", "50"])
    assert exc.value.code == 2 and "--rows 50, --n 50" in capsys.readouterr().err
    assert not (tmp_path / "langevin.h5").exists()
