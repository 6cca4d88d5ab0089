"""The one CLI contract, over every subcommand that writes a file (issue "Runs that cannot be lost").

One small file of each kind is written through the CLI (module fixture), then, for every
subcommand: the shared options exist; every file rieszflow writes feeds back as ``--config``;
``--resume`` needs no option but ``--out`` and names key, stored and given value of a differing
option; the exit-code table (0 ok, 1 run failure, 2 usage or bad input, 130 SIGINT, 143 SIGTERM)
holds with one line on stderr and no traceback; and every variable of every file kind has
``long_name`` and ``units`` (CF walk over every file kind the CLI writes).
"""
import importlib
import json
import os
import signal
import time

import pytest

from rieszflow.engine.storage import missing_cf_attributes, open_run
from rieszflow.config import build_config, load_config_mapping, resolve_config
from rieszflow.studies.cli import build_parser
from rieszflow.studies.cli import main as cli_main
from test_ldp_study import _tiny_ldp
from test_kernel_mean_field import _tiny as _tiny_kmf
from test_mean_field_study import _tiny_dict

#: subcommand -> (module.function that runs the study, config class, its preset)
RUNNERS = {
    "run": ("rieszflow.learning.train", "run_main_job"),
    "ldp": ("rieszflow.studies.ldp.study", "run_ldp_study"),
    "mean-field": ("rieszflow.studies.mean_field.study", "run_mean_field_study"),
    "kernel-mean-field": ("rieszflow.studies.kernel_mean_field.study", "run_kernel_mean_field_study"),
    "attention-theory": ("rieszflow.studies.attention_theory.study", "run"),
    "token-flow": ("rieszflow.studies.token_flow.study", "run_token_flow_study"),
}
STUDIES = list(RUNNERS)
SHARED = ("--out", "--overwrite", "--resume", "--set", "--config", "--seed", "--backend", "--quiet",
          "--no-plots")


def _config_class(name):
    from rieszflow.studies.attention_theory.config import AttentionTheoryConfig
    from rieszflow.studies.kernel_mean_field.config import KernelMeanFieldConfig
    from rieszflow.studies.ldp.config import LDPConfig
    from rieszflow.learning.config import MainJobConfig
    from rieszflow.studies.mean_field.config import MeanFieldConfig
    from rieszflow.studies.token_flow.config import TokenFlowConfig

    return {"run": MainJobConfig, "ldp": LDPConfig, "mean-field": MeanFieldConfig,
            "kernel-mean-field": KernelMeanFieldConfig,
            "attention-theory": AttentionTheoryConfig, "token-flow": TokenFlowConfig}[name]


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """One complete file per subcommand, written through the CLI at reduced size."""
    d = tmp_path_factory.mktemp("every")
    (d / "ldp.json").write_text(json.dumps(_tiny_ldp().to_dict()))
    (d / "mf.json").write_text(json.dumps(_tiny_dict()))
    (d / "kmf.json").write_text(json.dumps(_tiny_kmf()))
    size = {"run": ["--smoke", "--epochs", "1", "--phase-a-epochs", "1"],
            "ldp": ["--config", str(d / "ldp.json")],
            "mean-field": ["--config", str(d / "mf.json"), "--no-plots"],
            "kernel-mean-field": ["--config", str(d / "kmf.json"), "--no-plots", "--workers", "0"],
            "attention-theory": ["--quick", "--no-plots"],
            "token-flow": ["--quick", "--no-plots"]}
    files = {}
    for name in STUDIES:
        out = d / f"{name}.h5"
        assert cli_main([name, *size[name], "--quiet", "--out", str(out)]) == 0, name
        files[name] = out
    return files


@pytest.mark.parametrize("name", STUDIES)
def test_every_subcommand_has_the_shared_options(name):
    parser = build_parser().subcommand_parsers[name]
    options = {s for a in parser._actions for s in a.option_strings}
    missing = [o for o in SHARED if o not in options]
    assert not missing, f"rieszflow {name} lacks {missing}"
    # --quick where the study has sizes (the main job's reduced size is --smoke), --no-plots where it draws
    assert ("--quick" in options) == (name != "run") and ("--smoke" in options) == (name == "run")
    assert "--no-plots" in options                               # the main job accepts it, draws none


@pytest.mark.parametrize("name", STUDIES)
def test_every_written_file_is_complete_self_describing_and_feeds_back_as_config(name, written):
    path = written[name]
    ds = open_run(path)
    assert ds.attrs["status"] == "complete" and ds.attrs["backend"] == "numpy"
    assert missing_cf_attributes(path) == []
    if name == "attention-theory":
        assert ds.paper_holds.attrs["flag_meanings"] == "no_constant fails holds"
    cls = _config_class(name)
    stored = build_config(cls, load_config_mapping(path))
    # --config FILE on top of any preset gives back exactly the stored configuration
    assert resolve_config(cls, stored.replace(seed=stored.seed + 1) if hasattr(stored, "replace")
                          else stored, config_file=path) == stored
    assert resolve_config(cls, stored, config_file=path, given={"seed": 7}).seed == 7


@pytest.mark.parametrize("name", STUDIES)
def test_resume_needs_only_the_file_and_names_a_differing_option(name, written, capsys):
    path = written[name]
    before = open_run(path).attrs["config"]
    assert cli_main([name, "--resume", "--quiet", "--out", str(path)]) == 0
    capsys.readouterr()
    assert open_run(path).attrs["status"] == "complete" and open_run(path).attrs["config"] == before
    seed = build_config(_config_class(name), load_config_mapping(path)).seed
    assert cli_main([name, "--resume", "--quiet", "--seed", str(seed + 1), "--out", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"seed: stored {seed}, given {seed + 1}" in err and "Traceback" not in err
    assert cli_main([name, "--resume", "--quiet", "--out", str(path.with_name("absent.h5"))]) == 2
    assert "Traceback" not in capsys.readouterr().err


def _patched(monkeypatch, name, behaviour):
    module, func = RUNNERS[name]
    monkeypatch.setattr(importlib.import_module(module), func, behaviour)


def _sigterm(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(5)                     # the handler interrupts the sleep
    raise AssertionError("SIGTERM was not delivered")


def _sigint(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(5)
    raise AssertionError("SIGINT was not delivered")


def _fails(*args, **kwargs):
    raise ArithmeticError("injected failure")


@pytest.mark.parametrize("name", STUDIES)
@pytest.mark.parametrize("behaviour, code, words", [(_fails, 1, "run failed: ArithmeticError"),
                                                    (_sigint, 130, "interrupted"),
                                                    (_sigterm, 143, "interrupted")])
def test_exit_code_table(name, behaviour, code, words, monkeypatch, tmp_path, capsys):
    _patched(monkeypatch, name, behaviour)
    size = {"run": ["--smoke"], "ldp": ["--quick"], "mean-field": ["--quick"], "kernel-mean-field": ["--quick"],
            "attention-theory": ["--quick"], "token-flow": ["--quick"]}[name]
    assert cli_main([name, *size, "--quiet", "--out", str(tmp_path / "x.h5")]) == code
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0] and err[0].startswith(f"rieszflow {name}:"), err


@pytest.mark.parametrize("name", STUDIES)
def test_usage_errors_exit_2_and_write_nothing(name, tmp_path, capsys, written):
    out = tmp_path / "x.h5"
    size = {"run": ["--smoke"]}.get(name, ["--quick"])
    assert cli_main([name, *size, "--quiet", "--out", str(out), "--set", "seed=-3"]) == 2
    assert cli_main([name, *size, "--quiet", "--out", str(out),
                     "--config", str(tmp_path / "missing.json")]) == 2
    assert cli_main([name, *size, "--quiet", "--out", str(written[name])]) == 2      # exists
    err = capsys.readouterr().err
    assert "Traceback" not in err and "already exists" in err and "no such file" in err
    assert not out.exists()


@pytest.mark.parametrize("name", ["attention-theory", "token-flow"])
def test_write_once_studies_recompute_an_interrupted_file_to_the_same_numbers(name, written, tmp_path):
    """attention-theory and token-flow write once, at the end: --resume of an interrupted file
    recomputes it from the stored configuration, and every array equals the uninterrupted run's."""
    import shutil

    import h5py
    import numpy as np

    cut = tmp_path / "cut.h5"
    shutil.copy(written[name], cut)
    with h5py.File(cut, "r+") as f:
        f.attrs["status"] = "interrupted"
    assert cli_main([name, "--resume", "--quiet", "--no-plots", "--out", str(cut)]) == 0
    a, b = open_run(written[name]), open_run(cut)
    assert b.attrs["status"] == "complete" and b.attrs["config"] == a.attrs["config"]
    wall = {v for v in a.variables if "seconds" in v or "wall" in v}
    assert set(a.variables) == set(b.variables)
    for v in sorted(set(a.variables) - wall):
        np.testing.assert_array_equal(a[v].values, b[v].values, err_msg=v)


def test_preset_then_config_then_options(tmp_path, monkeypatch, capsys):
    """Review finding: token-flow's --quick (and run's --smoke) beat --config. The order is
    preset < --config < options < --set."""
    from rieszflow.studies.token_flow import study

    seen = {}

    def fake(cfg, out, **kwargs):
        seen["cfg"] = cfg
        raise ArithmeticError("stop here")

    monkeypatch.setattr(study, "run_token_flow_study", fake)
    cfg = tmp_path / "tf.json"
    cfg.write_text(json.dumps({"n_tokens": 48}))
    assert cli_main(["token-flow", "--quick", "--config", str(cfg), "--set", "n_seeds=5", "--quiet",
                     "--out", str(tmp_path / "x.h5")]) == 1
    assert seen["cfg"].n_tokens == 48 and seen["cfg"].n_seeds == 5 and seen["cfg"].t_end == 20.0


def test_a_size_flag_on_resume_must_match_the_stored_sizes(written, capsys):
    """Review finding: --quick --resume over a file of other sizes was silently ignored."""
    path = written["ldp"]                                   # written from a small --config, not --quick
    assert cli_main(["ldp", "--quick", "--resume", "--quiet", "--out", str(path)]) == 2
    assert "--quick" in capsys.readouterr().err
    assert cli_main(["run", "--smoke", "--resume", "--quiet", "--out", str(written["run"])]) == 0
    capsys.readouterr()                                     # the same sizes as --smoke: accepted


def test_an_interrupted_overwrite_keeps_the_old_file(written, tmp_path, monkeypatch):
    """Review finding: attention-theory opened its writer before computing, so an interrupted
    --overwrite had already replaced the complete file by a header."""
    import shutil

    from rieszflow.studies.attention_theory import study

    path = tmp_path / "at.h5"
    shutil.copy(written["attention-theory"], path)
    before = path.read_bytes()
    monkeypatch.setattr(study, "experiments", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()))
    assert cli_main(["attention-theory", "--quick", "--quiet", "--overwrite", "--out", str(path)]) == 130
    assert path.read_bytes() == before and open_run(path).attrs["status"] == "complete"
    assert not path.with_name("at.h5.lock").exists()
