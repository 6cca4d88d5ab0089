import argparse

import pytest

from rieszflow.studies.kgd import analysis, cli


def _parse(argv):
    ap = argparse.ArgumentParser()
    cli.register(ap.add_subparsers())
    return ap.parse_args(argv)


def test_table2_and_asymptotics_cli(capsys):
    rows, (slope, _, _) = analysis.table2()
    for d, a, b, c, p in rows:
        assert abs(a - p[0]) <= 5e-5 and abs(b - p[1]) <= 5e-5 and abs(c - p[2]) <= 5e-5
    asym = analysis.asymptotic_table()
    assert asym[-1][0] == 65536 and abs(asym[-1][4] + 1) < 0.01
    args = _parse(["kgd", "--closed-form"])
    assert args.func(args) == 0
    assert "refuted" in capsys.readouterr().out


def test_kgd_cli_runs_the_table_sweeps_and_prints_verdicts(tmp_path, capsys):
    out = tmp_path / "kgd"
    args = _parse(["kgd", "--workers", "0", "--quiet", "--out", str(out), "--set", "krr_reps=2",
                   "--set", "attn_reps=2", "--set", "seq_runs=2", "--set", "krr_ds=8",
                   "--set", "attn_ms=64,128", "--set", "n_test=200"])
    assert args.func(args) == 0
    text = capsys.readouterr().out
    assert "Verdicts" in text and "Table 6 ranking" in text and "Table 5" in text
    stored = (out / "report.txt").read_text()          # what rieszflow report OUT shows
    assert "Verdicts" in stored and "Table 2" in stored and set(stored.splitlines()) <= set(text.splitlines())
    for name in cli.SWEEPS:
        assert (out / name / f"{name}.h5").is_file()
    # a rerun with another (non-grid) configuration is refused, not overwritten
    args = _parse(["kgd", "--workers", "0", "--quiet", "--out", str(out), "--set", "noise=0.2"])
    assert args.func(args) == 2
    assert "another configuration" in capsys.readouterr().err


def test_kgd_cli_bad_input_is_a_usage_error(tmp_path, capsys):
    args = _parse(["kgd", "--quiet", "--out", str(tmp_path / "k"), "--set", "no_such_key=1"])
    assert args.func(args) == 2
    assert "no_such_key" in capsys.readouterr().err and not (tmp_path / "k").exists()
    args = _parse(["kgd", "--rhf-w", "1.5", "--closed-form"])
    assert args.func(args) == 2


def test_results_page_closed_form_part_is_what_the_command_prints(capsys):
    """docs/results/kgd.md cannot drift: its closed-form tables are today's output, line for line."""
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parent.parent / "docs" / "results" / "kgd.md").read_text()
    assert "`make results`" in page and "rieszflow kgd --quick" in page
    block = re.findall(r"```text\n(.*?)\n```", page, flags=re.S)[0].splitlines()
    args = _parse(["kgd", "--closed-form"])
    assert args.func(args) == 0
    fresh = capsys.readouterr().out.strip().splitlines()
    start = block.index(fresh[0])
    assert block[start:start + len(fresh)] == fresh


@pytest.mark.parametrize("argv, words", [
    (["--from-run", "r.h5", "--sweep", "sequence"], "--sweep"),
    (["--from-run", "r.h5", "--set", "seq_runs=2"], "--set"),
    (["--from-run", "r.h5", "--config", "c.json"], "--config"),
    (["--from-run", "r.h5", "--closed-form"], "--closed-form"),
    (["--from-run", "r.h5", "--quick"], "--quick"),
    (["--from-run", "r.h5", "--resume"], "--resume"),
    (["--from-run", "r.h5", "--workers", "0"], "--workers"),
    (["--from-run", "r.h5", "--rhf-w", "0.5"], "--rhf-w"),
    (["--from-run", "r.h5", "--out", "r-kgd.txt"], ".hdf5"),
    (["--n-rot", "10"], "--n-rot only apply with --from-run"),
    (["--n-tokens", "10", "--n-noise", "2"], "--n-tokens, --n-noise only apply"),
    (["--closed-form", "--sweep", "sequence"], "--sweep"),
])
def test_kgd_conflicting_options_are_usage_errors(argv, words, capsys):
    args = _parse(["kgd", *argv])
    with pytest.raises(SystemExit) as e:
        args.func(args)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "kgd: error: " in err[-1] and words in err[-1]            # usage lines, then one error line


def test_kgd_from_run_accepts_every_hdf5_ending(tmp_path, capsys):
    """--out RUN-kgd.hdf5 / .nc pass the shared out-path check; the missing run file is the error."""
    for name in ("k.hdf5", "k.nc", "k.H5"):
        args = _parse(["kgd", "--from-run", str(tmp_path / "none.h5"), "--out", str(tmp_path / name)])
        assert args.func(args) == 2
        err = capsys.readouterr().err
        assert "HDF5" not in err and "none.h5" in err


def test_kgd_out_is_checked_before_any_computation(tmp_path, capsys):
    import json

    other = tmp_path / "iw"                          # another study's sweep directory
    (other / "e1").mkdir(parents=True)
    (other / "config.json").write_text(json.dumps({"widths": [1, 2], "e1_reps": 3}))
    args = _parse(["kgd", "--quiet", "--workers", "0", "--out", str(other)])
    assert args.func(args) == 2
    cap = capsys.readouterr()
    assert "Table 2" not in cap.out                  # nothing computed
    line = cap.err.strip()
    assert "\n" not in line and "another study" in line and "e1_reps" in line and "e1" in line
    junk = tmp_path / "junk"                         # an unrelated non-empty directory
    junk.mkdir()
    (junk / "notes.txt").write_text("x")
    args = _parse(["kgd", "--quiet", "--workers", "0", "--out", str(junk)])
    assert args.func(args) == 2
    assert "holds no sweep" in capsys.readouterr().err and sorted(p.name for p in junk.iterdir()) == ["notes.txt"]
