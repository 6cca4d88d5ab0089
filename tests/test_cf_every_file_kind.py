"""Every file kind the CLI writes describes itself (CF conventions): a walk over each kind's variables.

The main job and the ldp and mean-field studies are walked in their own test modules (they already
build those files); here the two studies whose files are cheap at reduced size: attention-theory and
token-flow. Together: every file kind rieszflow writes.
"""
import json

from rieszflow.engine.storage import missing_cf_attributes, open_run
from rieszflow.studies.cli import main as cli_main



def test_attention_theory_file_describes_itself(tmp_path):
    out = tmp_path / "at.h5"
    assert cli_main(["attention-theory", "--quick", "--quiet", "--out", str(out)]) == 0
    assert missing_cf_attributes(out) == []
    ds = open_run(out)
    assert ds.attrs["backend"] == "numpy"
    assert ds.paper_holds.attrs["flag_meanings"] == "no_constant fails holds"


def test_token_flow_file_describes_itself(tmp_path):
    out = tmp_path / "tf.h5"
    assert cli_main(["token-flow", "--quick", "--quiet", "--no-plots", "--out", str(out)]) == 0
    assert missing_cf_attributes(out) == []
    assert json.loads(open_run(out).attrs["config"])
