"""Comparing runs and watching them: open_runs, rieszflow status, rieszflow compare, McNemar."""
import numpy as np
import pytest
import xarray as xr

import rieszflow
from rieszflow.studies.cli import main as cli_main
from rieszflow.studies.runs.inspect import mcnemar


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("runs")
    a, b = d / "kernel.h5", d / "vanilla.h5"
    assert cli_main(["run", "--smoke", "--quiet", "--out", str(a)]) == 0
    assert cli_main(["run", "--smoke", "--quiet", "--vanilla", "--out", str(b)]) == 0
    return a, b


def test_mcnemar_exact_closed_form():
    """8 vs 4 discordant pairs: p = 2 * P(Bin(12, 1/2) <= 4) = 0.3877 (exact)."""
    a = np.array([1] * 8 + [0] * 4 + [1] * 10, dtype=bool)
    b = np.array([0] * 8 + [1] * 4 + [1] * 10, dtype=bool)
    t = mcnemar(a, b)
    assert (t["a_only"], t["b_only"], t["n"]) == (8, 4, 22)
    assert t["p_value"] == pytest.approx(2 * sum(__import__("math").comb(12, k) for k in range(5)) / 2**12,
                                         rel=1e-12)
    assert mcnemar(a, a)["p_value"] == 1.0
    with pytest.raises(ValueError, match="one length"):
        mcnemar(a, a[:3])


def test_open_runs_stacks_with_provenance_and_mfdataset_works(two_runs):
    ds = rieszflow.open_runs(two_runs)
    assert ds.sizes["run"] == 2 and list(ds.run.values) == ["kernel.h5", "vanilla.h5"]
    assert list(ds.run_status.values) == ["complete", "complete"]
    assert ds.test_metrics.dims == ("run", "metric")
    with xr.open_mfdataset([str(p) for p in two_runs], concat_dim="run", combine="nested",
                           engine="h5netcdf", join="outer") as mf:      # needs dask (installed)
        assert mf.sizes["run"] == 2


def test_status_and_compare_commands(two_runs, capsys, tmp_path):
    assert cli_main(["status", str(two_runs[0])]) == 0
    out = capsys.readouterr().out
    assert "kind main_job, status complete" in out and "hamiltonian[step] last:" in out
    assert cli_main(["compare", *map(str, two_runs)]) == 0
    out = capsys.readouterr().out
    assert "accuracy" in out and "McNemar kernel.h5 vs vanilla.h5" in out
    foreign = tmp_path / "foreign.h5"
    import h5py

    with h5py.File(foreign, "w") as f:
        f["x"] = [1.0]
    assert cli_main(["status", str(foreign)]) == 2
    assert "not a rieszflow run" in capsys.readouterr().err
    assert cli_main(["compare", str(two_runs[0])]) == 2


def _square_task(task, config, rng):
    import xarray as xr

    x = float(dict(task.params)["x"])
    return xr.Dataset({"y": ((), x * x + 0.0 * rng.standard_normal(), {"long_name": "x^2", "units": "1"})})


def test_report_of_a_sweep_study_directory(tmp_path):
    """``rieszflow report DIR``: a sweep study's stored report, after the provenance of the merged
    sweep files under DIR; a directory without a report is a one-line error (exit 2)."""
    from rieszflow.studies.cli import main as cli_main
    from rieszflow.studies.runs.report import report_markdown
    from rieszflow.studies.sweep import SweepSpec, open_sweep, run_sweep

    out = tmp_path / "study"
    out.mkdir()
    spec = SweepSpec(name="sq", function=_square_task, methods=("m",), grid={"x": (1, 2)}, trials=1)
    run_sweep(spec, out / "sq", workers=0, progress=False, log=None)
    open_sweep(out / "sq")
    assert cli_main(["report", str(out)]) == 2                       # no report.txt yet
    (out / "report.txt").write_text("TABLE 1\nx  y\n1  1\n2  4\n")
    page = report_markdown([out], title="a sweep study")
    assert page.startswith("# Results: a sweep study")
    assert "`sq/sq.h5`" in page and "2 of 2 tasks complete" in page
    assert "```text\nTABLE 1\nx  y\n1  1\n2  4\n```" in page
    assert cli_main(["report", str(out), "--out", str(tmp_path / "page.md")]) == 0
    assert (tmp_path / "page.md").read_text().count("TABLE 1") == 1
    # hand-written notes, kept in a file of their own, come after the regenerated tables
    notes = tmp_path / "notes.md"
    notes.write_text("The squares are right.\n")
    assert cli_main(["report", str(out), "--out", str(tmp_path / "page.md"), "--overwrite",
                     "--notes", str(notes)]) == 0
    text = (tmp_path / "page.md").read_text()
    assert text.index("TABLE 1") < text.index("## Notes") < text.index("The squares are right.")
    assert f"`{notes.as_posix()}`" in text and text.count("## Notes") == 1
    assert cli_main(["report", str(out), "--notes", str(notes)]) == 2                 # no --out
    assert cli_main(["report", str(out), "--out", str(tmp_path / "p2.md"), "--notes", str(tmp_path / "none.md")]) == 2
    (tmp_path / "empty.md").write_text("\n")
    assert cli_main(["report", str(out), "--out", str(tmp_path / "p3.md"), "--notes", str(tmp_path / "empty.md")]) == 2
    assert not (tmp_path / "p2.md").exists() and not (tmp_path / "p3.md").exists()


def test_run_labels_are_the_shortest_distinguishing_trailing_paths():
    from rieszflow.studies.runs.inspect import run_labels

    assert run_labels(["a/run.h5", "b/run.h5"]) == ["a/run.h5", "b/run.h5"]
    assert run_labels(["x/kernel.h5", "y/vanilla.h5"]) == ["kernel.h5", "vanilla.h5"]
    assert run_labels(["x/a/run.h5", "y/a/run.h5", "b/run.h5", "c.h5"]) == \
        ["x/a/run.h5", "y/a/run.h5", "b/run.h5", "c.h5"]
    assert run_labels(["run.h5", "./run.h5"]) == ["run.h5", "run.h5 [2]"]      # one file twice


def test_open_runs_compare_and_report_tell_same_named_runs_apart(two_runs, tmp_path, capsys):
    """Old: a/run.h5 and b/run.h5 were both 'run.h5' in open_runs, compare and report."""
    import shutil

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, b = tmp_path / "a" / "run.h5", tmp_path / "b" / "run.h5"
    shutil.copy(two_runs[0], a)
    shutil.copy(two_runs[1], b)
    assert list(rieszflow.open_runs([a, b]).run.values) == ["a/run.h5", "b/run.h5"]
    assert cli_main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "McNemar a/run.h5 vs b/run.h5" in out and out.splitlines()[0].split()[1:] == ["a/run.h5",
                                                                                           "b/run.h5"]
    assert cli_main(["report", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert f"### `{a.as_posix()}`" in out and f"### `{b.as_posix()}`" in out
    assert "McNemar a/run.h5 vs b/run.h5" in out and "McNemar run.h5 vs run.h5" not in out
