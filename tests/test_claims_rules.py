"""The claims ledger's rules can fail: each test mutates a copy of docs/claims.toml (in memory, or as
text under tmp_path) and asserts that tests/test_claims.py's checker reports the breach, after
asserting that the unmutated ledger does not. The ledger itself is checked by tests/test_claims.py.
"""
import copy
import pathlib
import sys
import tomllib

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import test_claims as ledger  # noqa: E402


@pytest.fixture()
def data():
    return copy.deepcopy(ledger.load())


def entry(data, cid):
    return next(c for c in data["claim"] if c["id"] == cid)


def problems_of(data, cid):
    return [p for p in ledger.rule_problems(data) if p.startswith(f"{cid}:")]


def test_the_ledger_itself_passes(data):
    assert ledger.rule_problems(data) == []
    assert ledger.item_problems(data, ledger.load_items()) == []


# (a) a refuted without an interval or margin that excludes the claim

def test_refuted_without_margin_is_reported(data):
    assert problems_of(data, "003-thm7.3") == []
    del entry(data, "003-thm7.3")["margin"]                  # a deterministic counterexample
    assert any("refuted without an interval or margin" in p for p in problems_of(data, "003-thm7.3"))


def test_refuted_whose_interval_meets_the_claim_is_reported(data):
    c = entry(data, "000-table2-rt")                        # softmaxfeat: +0.0057 [+0.0002, +0.0112]
    c["status"] = "refuted"                                 # +0.0385 is excluded: the interval rule passes
    assert not any("without an interval or margin" in p for p in problems_of(data, "000-table2-rt"))
    c["claimed"] = 0.005                                    # a claimed gain inside the interval
    assert any("refuted without an interval or margin that excludes the claim" in p
               for p in problems_of(data, "000-table2-rt"))


def test_statistical_refuted_needs_three_se(data):
    c = entry(data, "003-table6")
    assert problems_of(data, "003-table6") == []
    c["margin"] = "gap over its SE: z = -1.4"
    assert any("must state |z| >= 3" in p for p in problems_of(data, "003-table6"))
    c["margin"] = "Ind better"
    assert any("must state |z| >= 3" in p for p in problems_of(data, "003-table6"))


def test_direction_reproduced_needs_the_claims_side(data):
    c = entry(data, "000-table2-rt")
    c["claimed"] = -0.0385                                  # the interval is on the other side of 0
    assert any("direction not reproduced" in p for p in problems_of(data, "000-table2-rt"))


# (b) a numbered item of a paper that no claim covers

def test_dropping_prop28_is_reported(data):
    items = ledger.load_items()
    assert ledger.item_problems(data, items) == []
    data["claim"] = [c for c in data["claim"] if c["id"] != "004-prop28"]
    assert "paper 004: missing numbered item 'Prop 28'" in " ".join(ledger.item_problems(data, items))


def test_dropping_prop28_from_the_toml_text_is_reported(tmp_path):
    text = ledger.SOURCE.read_text()
    start = text.index('[[claim]]\nid = "004-prop28"')
    end = text.index("[[claim]]", start + 1)
    mutated = tmp_path / "claims.toml"
    mutated.write_text(text[:start] + text[end:])
    problems = ledger.item_problems(tomllib.loads(mutated.read_text()), ledger.load_items())
    assert any("missing numbered item 'Prop 28'" in p for p in problems)


def test_a_project_question_does_not_cover_a_papers_item(data):
    entry(data, "004-cor30")["class"] = "project"            # Thm 29 / Cor 30 lose their only claim
    problems = " ".join(ledger.item_problems(data, ledger.load_items()))
    assert "missing numbered item 'Thm 29'" in problems and "missing numbered item 'Cor 30'" in problems


def test_allow_list_needs_the_item_and_a_reason(data):
    items = ledger.load_items()
    del data["allow"]["000"]["Lemma 8"]                      # a cited work, excused only by the list
    assert any("missing numbered item 'Lemma 8'" in p for p in ledger.item_problems(data, items))
    data["allow"]["000"]["Lemma 8"] = "cited"
    data["allow"]["000"]["Lemma 99"] = "a reason for an item the paper lacks"
    problems = ledger.item_problems(data, items)
    assert any("'Lemma 8' needs a reason" in p for p in problems)
    assert any("'Lemma 99', which the paper does not declare" in p for p in problems)


def test_a_ref_to_an_item_the_paper_lacks_is_reported(data):
    entry(data, "004-prop26")["refs"].append("Prop 27")
    assert any("ref 'Prop 27' names no item" in p for p in ledger.item_problems(data, ledger.load_items()))


def test_item_extraction_from_a_papers_folder(tmp_path):
    (tmp_path / "004_x.txt").write_text("Proposition 28. *Let E = R^d\nTheorem 29 provides ...\n"
                                        "**Remark 27.** We should note\n")
    (tmp_path / "notes.txt").write_text("Theorem 1. not a paper\n")
    text = ledger._items([tmp_path])
    assert tomllib.loads(text)["items"] == {"004": ["Prop 28", "Remark 27"]}


# (c) a status that disagrees with its page's verdict line

def test_status_against_the_pages_verdict(data):
    assert problems_of(data, "003-table6") == []
    c = entry(data, "003-table6")                           # the page: "not reproduced (reversed ..."
    c.update(status="confirmed", inference="rejection")
    assert any("disagrees with the page's verdict" in p for p in problems_of(data, "003-table6"))


def test_verdict_must_be_on_the_page_and_present(data):
    c = entry(data, "000-core")
    c["verdict"] = "verdict: the 95 % interval excludes 0 and includes the paper's -0.0019"
    assert any("is not on docs/results/nlp_power_13_commits.md" in p for p in problems_of(data, "000-core"))
    del c["verdict"]
    assert any("states verdicts; quote this entry's" in p for p in problems_of(data, "000-core"))


def test_verdict_phrases_map_to_statuses():
    assert ledger.verdict_statuses("by sigma: fails (the other is better) at sigma = 1e-01; no significant "
                                   "difference at sigma = 1e-02") == ("refuted", "not reproduced under this reading")
    assert ledger.verdict_statuses("| not reproduced (different at m=64") == (
        "refuted", "direction reproduced, size refuted")
    assert ledger.verdict_statuses("| reproduced only via the unstated mixture") == ("refuted",)
    assert ledger.verdict_statuses("| reproduced") == ("confirmed",)
    assert ledger.verdict_statuses("the numbers look fine") is None


# (d) a computation basis resting on one stochastic run

def test_computation_on_one_stochastic_run_is_reported(data):
    c = entry(data, "001-fig3-psi")                         # one training run, restated as a proxy
    assert problems_of(data, "001-fig3-psi") == []
    c.update(status="confirmed", basis="computation")
    assert any("computation basis on one stochastic run" in p for p in problems_of(data, "001-fig3-psi"))
    del c["stochastic_runs"]
    assert any("needs stochastic_runs" in p for p in problems_of(data, "001-fig3-psi"))


# (e) a confirmed resting on a failure to reject without a stated detectable effect

def test_confirmed_on_agreement_needs_a_detectable_effect(data):
    c = entry(data, "000-thm1-kernel")                      # p = 0.14: a failure to reject
    assert problems_of(data, "000-thm1-kernel") == []
    c["status"] = "confirmed"
    assert problems_of(data, "000-thm1-kernel") == []        # the entry states what would be detected
    del c["detectable"]
    assert any("confirmed on a failure to reject without a stated detectable effect" in p
               for p in problems_of(data, "000-thm1-kernel"))
    c["detectable"] = "not stated on the page"
    assert any("without a stated detectable effect" in p for p in problems_of(data, "000-thm1-kernel"))


def test_consistent_needs_detectable_and_an_interval_that_meets_the_claim(data):
    c = entry(data, "000-core")                             # +0.0007 [-0.0012, +0.0026] against "<= 0"
    c["claimed"] = 0.0385
    assert any("consistent, but the interval" in p for p in problems_of(data, "000-core"))
    c["claimed"] = "<= 0"
    del c["detectable"]
    assert any("consistent without `detectable`" in p for p in problems_of(data, "000-core"))


# the other rules

def test_cmh_evidence_is_reported(data):
    entry(data, "000-table2-rt")["note"] += " CMH p = 0.36."
    assert any("Cochran-Mantel-Haenszel" in p for p in problems_of(data, "000-table2-rt"))


def test_not_reproduced_needs_its_sanity_check(data):
    del entry(data, "000-F16-rff")["sanity"]
    assert any("must name the sanity check" in p for p in problems_of(data, "000-F16-rff"))


def test_unknown_status_and_class(data):
    entry(data, "003-table2")["status"] = "partly confirmed"
    entry(data, "003-fig1-alpha")["class"] = "related"
    assert any("is not one of" in p for p in problems_of(data, "003-table2"))
    assert any("class 'related'" in p for p in problems_of(data, "003-fig1-alpha"))
