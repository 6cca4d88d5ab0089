import argparse

from rieszflow.studies.kgd import analysis, cli


def test_table2_and_asymptotics_cli(capsys):
    rows, (slope, _, _) = analysis.table2()
    for d, a, b, c, p in rows:
        assert abs(a - p[0]) <= 5e-5 and abs(b - p[1]) <= 5e-5 and abs(c - p[2]) <= 5e-5
    asym = analysis.asymptotic_table()
    assert asym[-1][0] == 65536 and abs(asym[-1][4] + 1) < 0.01
    ap = argparse.ArgumentParser()
    cli.register(ap.add_subparsers())
    args = ap.parse_args(["kgd", "--quick"])
    assert args.func(args) == 0
    assert "refuted" in capsys.readouterr().out
