"""``rieszflow plot`` and ``rieszflow report`` of finished, short and interrupted main-job files.

Issue 22: no figure of a main-job run existed; ``report`` compared overlapping 20-step windows of a
run shorter than 40 steps (equal numbers, read as "no change") and refused a readable interrupted
file.
"""
import struct

import pytest

from rieszflow.studies.cli import main as cli_main


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A complete smoke run (8 Phase A steps), and one interrupted at its test evaluation (every
    epoch recorded, no test predictions)."""
    from rieszflow.learning.train import MainJob

    d = tmp_path_factory.mktemp("plot")
    done, cut = d / "done.h5", d / "cut.h5"
    assert cli_main(["run", "--smoke", "--quiet", "--out", str(done)]) == 0
    original = MainJob._evaluate

    def interrupted_at_test(self, split):
        if split is self.test:
            raise KeyboardInterrupt
        return original(self, split)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(MainJob, "_evaluate", interrupted_at_test)
        assert cli_main(["run", "--smoke", "--quiet", "--out", str(cut)]) == 130
    return done, cut


def _png_size(path):
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


def test_plot_draws_the_five_panels_of_a_main_job_file(runs, capsys):
    from rieszflow.engine.storage import open_run
    from rieszflow.studies.runs.plot import PANELS, main_job_figure

    done, _ = runs
    png = done.with_suffix(".png")
    assert cli_main(["plot", str(done)]) == 0
    assert capsys.readouterr().out.strip() == f"wrote {png}"
    assert _png_size(png) == (1500, 850) and png.stat().st_size > 40_000
    fig, missing = main_job_figure(open_run(done))
    assert missing == []
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert titles == list(PANELS)
    lines = {ax.get_title(): len(ax.lines) for ax in fig.axes if ax.get_title()}
    assert lines["Hamiltonian and its parts"] == 2 and lines["Accuracy"] == 2
    assert lines["Calibration (test)"] == 2          # the diagonal and the reliability curve
    # never overwritten without --overwrite
    before = png.read_bytes()
    assert cli_main(["plot", str(done)]) == 2
    assert "already exists" in capsys.readouterr().err and png.read_bytes() == before
    assert cli_main(["plot", str(done), "--overwrite"]) == 0


def test_plot_refuses_bad_input_with_one_line(runs, tmp_path, capsys):
    from rieszflow.engine.storage import TrajectoryWriter

    done, _ = runs
    other = tmp_path / "other.h5"
    TrajectoryWriter(other, "demo").close()
    for argv in (["plot", str(other)], ["plot", str(tmp_path / "missing.h5")],
                 ["plot", str(done), "--out", str(tmp_path / "fig.pdf")],
                 ["plot", str(done), "--out", str(tmp_path / "no" / "fig.png")]):
        assert cli_main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("rieszflow plot:"), err
    assert not (tmp_path / "other.png").exists() and not (tmp_path / "fig.pdf").exists()


def test_plot_of_an_interrupted_file_draws_what_exists_and_names_what_is_missing(runs, tmp_path, capsys):
    _, cut = runs
    out = tmp_path / "cut.png"
    assert cli_main(["plot", str(cut), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "not drawn (the file lacks them): test_proba, test_label" in text
    assert _png_size(out) == (1500, 850)


def test_report_of_a_short_run_shrinks_its_windows_and_says_so(runs, capsys):
    done, _ = runs
    assert cli_main(["report", str(done)]) == 0
    out = capsys.readouterr().out
    assert "first / last 4 steps (the run is too short for 20-step windows)" in out
    assert "Phase A steps 8" in out


def test_report_states_an_interrupted_file_and_shows_what_it_recorded(runs, capsys):
    done, cut = runs
    assert cli_main(["report", str(cut), str(done)]) == 0
    out = capsys.readouterr().out
    assert "**this run did not finish** (status `interrupted`)" in out
    assert "recorded so far:" in out and "val_accuracy[epoch]" in out
    assert f"### `{cut.as_posix()}`" in out and f"### `{done.as_posix()}`" in out
    assert "rieszflow compare" not in out        # one finished main-job file: nothing to compare
