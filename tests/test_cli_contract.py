"""One CLI contract for every subcommand: help, typed --set with the allowed keys listed, one --out
rule, one exit code for bad input (2), no traceback."""
import pytest

from rieszflow.studies.cli import SUBCOMMANDS
from rieszflow.studies.cli import main as cli_main

STUDIES = [name for name, _ in SUBCOMMANDS if name not in ("status", "compare", "report", "plot", "bench")]
SIZE = {"run": ["--smoke"], "mean-field": ["--quick"], "kernel-mean-field": ["--quick"], "ldp": ["--quick"],
        "attention-theory": ["--quick"], "token-flow": ["--quick"], "synthetic": ["--quick"],
        "nlp": ["--quick"], "kgd": ["--quick"], "infinite-width": ["--quick"], "luna": ["--quick"],
        "gibbs-check": ["no-such-run.h5"]}
SWEEPS = ("synthetic", "nlp", "kgd", "infinite-width", "luna")   # write a directory of task files, not one HDF5 file


@pytest.mark.parametrize("name", STUDIES)
def test_help_exits_0(name, capsys):
    with pytest.raises(SystemExit) as e:
        cli_main([name, "--help"])
    assert e.value.code == 0 and f"usage: rieszflow {name}" in capsys.readouterr().out


@pytest.mark.parametrize("name", STUDIES)
def test_unknown_set_key_is_a_usage_error_listing_the_allowed_keys(name, tmp_path, capsys):
    code = cli_main([name, *SIZE[name], "--quiet", "--out", str(tmp_path / "x.h5"),
                     "--set", "no_such_key=1"])
    err = capsys.readouterr().err
    assert code == 2 and "no_such_key" in err and "allowed" in err and "Traceback" not in err
    assert not (tmp_path / "x.h5").exists()


@pytest.mark.parametrize("name", [s for s in STUDIES if s not in SWEEPS])
def test_out_must_be_an_hdf5_name(name, tmp_path, capsys):
    assert cli_main([name, *SIZE[name], "--quiet", "--out", str(tmp_path / "x.txt")]) == 2
    assert "ending in .h5" in capsys.readouterr().err


@pytest.mark.parametrize("name", STUDIES)
def test_unknown_option_shows_the_subcommand_usage(name, capsys):
    with pytest.raises(SystemExit) as e:
        cli_main([name, "--no-such-option"])
    assert e.value.code == 2 and f"usage: rieszflow {name}" in capsys.readouterr().err
