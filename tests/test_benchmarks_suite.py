"""The benchmark suite (``python -m benchmarks``, ``rieszflow bench``): every registered module's rows at
smoke size (k = 1, quick), their keys, finite ratios and agreement within each row's stated tolerance;
missing modules and peers skipped with a reason; the README's performance section regenerated
idempotently between its markers. Never a time threshold."""
import importlib.util
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT)]   # "from suite import ..." inside the modules

from benchmarks import suite  # noqa: E402

from rieszflow.studies import bench_cli  # noqa: E402
from rieszflow.studies.cli import main as cli_main  # noqa: E402

NAMES = [name for name, _ in suite.MODULES]


@pytest.fixture(autouse=True)
def _restore_thread_settings():
    """The suite applies its thread counts (policy, Numba, torch) per module: undo that afterwards."""
    import numba

    from rieszflow.engine import threads

    saved, n_numba = dict(threads._state), numba.get_num_threads()
    n_torch = sys.modules["torch"].get_num_threads() if "torch" in sys.modules else None
    yield
    threads._state.update(saved)
    threads.configure_threads()
    numba.set_num_threads(n_numba)
    if n_torch is not None:
        sys.modules["torch"].set_num_threads(n_torch)


def _stats(a, b):
    return {"p": {"min": a, "median": 2 * a, "times": [a]}, "q": {"min": b, "median": 4 * b, "times": [b]}}


def _payload(rows):
    return {"command": "python -m benchmarks --threads 1 --k 1", "k": 1, "quick": True, "wall_s": 3.0,
            "load_average_end": [0.5, 0.5, 0.5],
            "provenance": {"measured": "2026-01-01T00:00:00Z", "commit": "abc1234", "machine": "x86_64",
                           "cores": 2, "threads": 1, "load_average": [1.0, 1.0, 1.0]},
            "results": [{"module": "bench_x", "status": "ok", "reason": None, "rows": rows, "wall_s": 1.0},
                        {"module": "bench_y", "status": "skipped", "reason": "not present", "rows": [],
                         "wall_s": 0.0}]}


@pytest.mark.parametrize("name", NAMES)
def test_every_present_module_gives_well_formed_rows_at_smoke_size(name):
    if not (ROOT / "benchmarks" / f"{name}.py").is_file():
        pytest.skip(f"benchmarks/{name}.py is not present in this checkout")
    res = suite.run_module(name, k=1, quick=True)
    assert res["status"] in ("ok", "skipped"), res.get("traceback") or res["reason"]
    if res["status"] == "skipped":                  # a dependency of the module is not importable
        assert res["reason"]
        return
    assert res["rows"], f"{name}.suite_rows returned no rows"
    for row in res["rows"]:
        assert suite.check_row(row) == [], row
        if "skipped" in row:                        # a peer that is not importable here
            assert isinstance(row["skipped"], str) and row["skipped"], row
            continue
        assert row["threads"] >= 1 and isinstance(row["measure"], str) and row["measure"]
        assert math.isclose(row["ratio_min"], row["project_min_s"] / row["peer_min_s"])
        assert math.isclose(row["ratio_median"], row["project_median_s"] / row["peer_median_s"])
        assert row["target"] is None or row["target"] > 0
        if row["agreement"] is not None and row.get("tolerance") is not None:
            assert math.isfinite(row["agreement"]) and row["agreement"] <= row["tolerance"], row


def test_a_missing_module_is_skipped_with_its_reason():
    res = suite.run_module("bench_no_such_module", k=1, quick=True)
    assert res["status"] == "skipped" and "not present" in res["reason"] and res["rows"] == []
    assert "bench_no_such_module" in suite.table([res]) and "skipped" in suite.table([res])


def test_a_missing_peer_is_skipped_with_its_reason(monkeypatch):
    """With torch reported missing, the token-flow rows become skipped rows naming torch."""
    monkeypatch.setitem(suite._PEERS, "torch", (None, "torch is not importable (test)"))
    import bench_token_flow   # noqa: PLC0415 - the module as the suite's rows import it

    rows = bench_token_flow.suite_rows(k=1, quick=True)
    assert rows and all(r.get("skipped") == "torch is not importable (test)" for r in rows)
    assert "skipped: torch is not importable (test)" in suite.table(
        [{"module": "bench_token_flow", "status": "ok", "reason": None, "rows": rows}])


def test_optional_peer_refuses_an_unknown_name():
    with pytest.raises(ValueError, match="numpy"):
        suite.optional_peer("numpy")


def test_make_row_ratios_and_check_row():
    row = suite.make_row("m", "p", "q", _stats(1.0, 4.0), target=1.0, agreement=1e-12, tolerance=1e-10)
    assert row["ratio_min"] == 0.25 and row["ratio_median"] == 0.125 and suite.check_row(row) == []
    assert suite.met(row) == "yes"
    assert suite.met({**row, "ratio_median": 2.0}) == "min only"
    assert suite.met({**row, "ratio_min": 3.0, "ratio_median": 2.0}) == "no"
    assert any("ratio_min" in p for p in suite.check_row({**row, "ratio_min": float("nan")}))
    assert suite.check_row({"measure": "m", "project": "p", "peer": "q"}) != []     # no times, no reason


def test_only_selects_registered_modules_and_names_unknown_ones():
    assert suite.select(["riesz", "bench_pde"]) == ["bench_riesz", "bench_pde"]
    assert suite.select(None) == NAMES
    with pytest.raises(ValueError, match="no such module; registered: bench_riesz"):
        suite.select(["nope"])


def test_readme_section_is_regenerated_between_the_markers_idempotently(tmp_path):
    rows = [suite.make_row("Riesz d=64", "gemm", "torch dense", _stats(1.0, 2.0), project_key="p",
                           peer_key="q", target=1.0, agreement=3e-16),
            suite.skipped_row("Riesz d=3", "numba", "PyKeOps-CPU", "pykeops is not importable")]
    readme = tmp_path / "README.md"
    readme.write_text(f"# T\n\nbefore\n\n{suite.BEGIN}\nold table\n{suite.END}\n\nafter\n")
    payload = _payload(rows)
    assert suite.update_readme(readme, payload) is True
    once = readme.read_text()
    assert suite.update_readme(readme, payload) is False and readme.read_text() == once
    assert once.startswith("# T\n\nbefore\n\n") and once.endswith("\n\nafter\n") and "old table" not in once
    assert "| Riesz d=64 | gemm | torch dense | 0.50 | 0.25 | <= 1 | yes | 3.0e-16 |" in once
    assert "skipped: pykeops is not importable" in once and "git abc1234" in once
    assert "docs/results/bench_suite.md" in once and "load average (1, 5, 15 min) 1.00, 1.00, 1.00" in once
    assert "bench_y" in suite.page(payload) and "not present" in suite.page(payload)
    bad = tmp_path / "bad.md"
    bad.write_text("no markers\n")
    with pytest.raises(ValueError, match="perf:begin"):
        suite.update_readme(bad, payload)


def test_the_readme_has_one_performance_section():
    text = (ROOT / "README.md").read_text()
    assert text.count(suite.BEGIN) == 1 and text.count(suite.END) == 1
    assert text.index(suite.BEGIN) < text.index(suite.END)


def test_rieszflow_bench_help_and_the_installed_wheel_case(monkeypatch, capsys):
    with pytest.raises(SystemExit) as e:
        cli_main(["bench", "--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and "usage: rieszflow bench" in out and "--quick" in out and "--readme" in out
    monkeypatch.setattr(bench_cli, "benchmarks_dir", lambda: None)          # as in an installed wheel
    assert cli_main(["bench", "--quick"]) == 2
    err = capsys.readouterr().err
    assert "source checkout" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert bench_cli.__spec__ is not None and importlib.util.find_spec("benchmarks.suite") is not None


def test_python_m_benchmarks_lists_the_registry():
    out = subprocess.run([sys.executable, "-m", "benchmarks", "--list"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    for name in NAMES:
        assert name in out.stdout
