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
