"""``rieszflow COMMAND --show-config`` over every subcommand that has a configuration, and the
configuration conveniences of issue 22: ``--set`` of an integer field as ``1e3``, resume errors that
name only the options given."""
import dataclasses
import json

import pytest

from rieszflow.config import ConfigShown, StudyConfig, config_int, config_real, describe_config, \
    parse_overrides, resolve_config, showing_config
from rieszflow.studies.cli import build_parser
from rieszflow.studies.cli import main as cli_main

#: Every subcommand with a configuration: the ones whose parser has --show-config (read from the parsers).
CONFIGURED = [name for name, p in build_parser().subcommand_parsers.items()
              if any("--show-config" in a.option_strings for a in p._actions)]
SIZE = {"run": ["--smoke"], "gibbs-check": ["no-such-run.h5", "--quick"]}


def test_every_study_has_show_config():
    assert {"run", "mean-field", "kernel-mean-field", "ldp", "attention-theory", "token-flow", "synthetic",
            "nlp", "infinite-width", "kgd", "gibbs-check", "luna"} <= set(CONFIGURED)


@pytest.mark.parametrize("name", CONFIGURED)
def test_show_config_prints_the_resolved_configuration_and_writes_nothing(name, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)                   # the default output would go under ./runs/
    size = SIZE.get(name, ["--quick"])
    assert cli_main([name, *size, "--set", "seed=7", "--show-config"]) == 0
    out = capsys.readouterr().out
    rows = {line[2:].split()[0]: line for line in out.splitlines()[2:]}
    assert "Nothing was computed or written" in out
    assert rows["seed"].startswith("* seed") and rows["seed"].split()[2:4] == ["7", "0"], rows["seed"]
    assert list(tmp_path.iterdir()) == [], "--show-config wrote something"
    # with an explicit --out too (no file, no directory, no log beside it)
    out_arg = tmp_path / ("x.h5" if name in ("run", "ldp", "mean-field", "kernel-mean-field", "attention-theory",
                                             "token-flow", "gibbs-check") else "d")
    assert cli_main([name, *size, "--out", str(out_arg), "--show-config"]) == 0
    capsys.readouterr()
    assert list(tmp_path.iterdir()) == []
    # a bad --set is still bad input
    assert cli_main([name, *size, "--set", "seed=x", "--show-config"]) == 2
    err = capsys.readouterr().err
    assert "seed" in err and "Traceback" not in err and list(tmp_path.iterdir()) == []


def test_show_config_of_the_main_job_has_units_and_allowed_values(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli_main(["run", "--smoke", "--epochs", "3", "--set", "m=1e3", "--show-config"]) == 0
    rows = {line[2:].split()[0]: line for line in capsys.readouterr().out.splitlines()[2:]}
    assert rows["m"].startswith("* m") and rows["m"].split()[2:4] == ["1000", "16"]     # --set, --smoke
    assert rows["epochs"].split()[2:5] == ["3", "1", "epochs"]                          # an option
    assert "s " in rows["checkpoint_seconds"] and rows["dataset"].endswith("rt, sst2, qqp")
    assert rows["dropout"].endswith("a real number in [0, 1)") and rows["kernel"].endswith("true, false")


def test_show_config_of_a_resumed_file_is_its_stored_configuration(tmp_path, capsys):
    out = tmp_path / "r.h5"
    assert cli_main(["run", "--smoke", "--quiet", "--set", "seed=3", "--out", str(out)]) == 0
    capsys.readouterr()
    before = sorted(p.name for p in tmp_path.iterdir())
    assert cli_main(["run", "--resume", "--out", str(out), "--show-config"]) == 0
    text = capsys.readouterr().out
    assert f"stored in {out}" in text and "seed                3 " in text
    assert cli_main(["run", "--resume", "--seed", "4", "--out", str(out), "--show-config"]) == 2
    assert "seed: stored 3, given 4" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_kgd_modes_without_a_configuration_refuse_show_config(capsys):
    for argv in (["kgd", "--closed-form", "--show-config"], ["kgd", "--from-run", "x.h5", "--show-config"]):
        with pytest.raises(SystemExit) as e:
            cli_main(argv)
        assert e.value.code == 2 and "--show-config" in capsys.readouterr().err


@dataclasses.dataclass(frozen=True)
class _Demo(StudyConfig):
    """A configuration to describe.

    Parameters
    ----------
    mode : {"fast", "slow"}
        Documented set of values.
    """

    n: int = 4
    rate: float = dataclasses.field(default=0.5, metadata={"units": "1/s", "allowed": "a real number > 0"})
    beta: float = 1.0
    mode: str = "fast"
    flag: bool = False
    label: str = "x"
    sizes: tuple = (1, 2)

    field_info = {"n": {"units": "particles"}}

    def __post_init__(self):
        config_int("n", self.n, minimum=2)
        config_real("beta", self.beta, low=0.0, high=1.0, low_open=True)
        for v in self.sizes:
            config_int("sizes", v, minimum=1)


def test_describe_config_reads_metadata_field_info_docstring_and_validators():
    rows = {r["key"]: r for r in describe_config(_Demo, _Demo(n=5), _Demo())}
    assert rows["n"] == {"key": "n", "value": "5", "default": "4", "units": "particles",
                         "allowed": "an integer >= 2", "changed": True}
    assert (rows["rate"]["units"], rows["rate"]["allowed"]) == ("1/s", "a real number > 0")
    assert rows["beta"]["allowed"] == "a real number in (0, 1]" and rows["beta"]["units"] == "-"
    assert rows["mode"]["allowed"] == "fast, slow" and rows["flag"]["allowed"] == "true, false"
    assert rows["label"]["allowed"] == "-" and rows["sizes"]["value"] == "1,2"
    assert rows["sizes"]["allowed"] == "an integer >= 1"
    choices = {r["key"]: r for r in describe_config(_Demo, _Demo(), choices={"label": ("x", "y")})}
    assert choices["label"]["allowed"] == "x, y" and not choices["label"]["changed"]


def test_resolve_config_under_showing_config_raises_with_what_would_run():
    with showing_config():
        with pytest.raises(ConfigShown) as e:
            resolve_config(_Demo, _Demo(), overrides=["n=1e1"], finish=lambda c: c.replace(beta=0.25))
    assert e.value.cfg == _Demo(n=10, beta=0.25) and e.value.preset == _Demo()
    assert resolve_config(_Demo, _Demo(), overrides=["n=7"]) == _Demo(n=7)      # outside: returned


def test_set_of_an_integer_field_takes_an_exact_float_literal():
    assert parse_overrides(["n=1e3", "sizes=1e1,20"], _Demo) == {"n": 1000, "sizes": (10, 20)}
    assert parse_overrides(["n=2.0"], _Demo) == {"n": 2}
    for bad in ("1.5", "1e-3", "abc", "nan", "inf"):
        with pytest.raises(ValueError) as e:
            parse_overrides([f"n={bad}"], _Demo)
        assert f"n={bad!r}" in str(e.value) and "an integer" in str(e.value)


def test_set_of_an_integer_field_through_the_cli(tmp_path, capsys):
    assert cli_main(["run", "--smoke", "--set", "m=1.5", "--out", str(tmp_path / "x.h5")]) == 2
    err = capsys.readouterr().err
    assert "m='1.5'" in err and "an integer" in err and "Traceback" not in err


def test_resume_errors_name_the_options_given_not_config(tmp_path, capsys):
    bad = tmp_path / "sweep"
    bad.mkdir()
    (bad / "config.json").write_text("{not json")
    with pytest.raises(ValueError) as e:
        resolve_config(_Demo, _Demo(), resume_from=bad / "config.json")
    assert str(e.value).startswith("--resume ") and "--config" not in str(e.value)
    assert cli_main(["luna", "--quick", "--quiet", "--resume", "--out", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "--resume" in err and "--config" not in err
    foreign = tmp_path / "foreign.h5"
    import h5py

    h5py.File(foreign, "w").close()
    assert cli_main(["run", "--resume", "--quiet", "--out", str(foreign)]) == 2
    err = capsys.readouterr().err
    assert f"--resume {str(foreign)!r}: " in err and "--config" not in err
    (bad / "config.json").write_text(json.dumps({"seed": 1}))
    with pytest.raises(ValueError) as e:                       # --config named only when given
        resolve_config(_Demo, _Demo(), config_file=bad / "config.json", resume_from=bad / "config.json")
    assert "--config does not apply" in str(e.value)
