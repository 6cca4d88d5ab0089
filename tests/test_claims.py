"""The claims ledger cannot drift: docs/claims.md is generated from docs/claims.toml, and every entry
is checked against the results pages it cites.

The tests check that
(a) docs/claims.md equals the text generated from docs/claims.toml;
(b) every cited page exists and contains each quoted evidence string (the numbers the status rests
    on), and every cited CI test exists;
(c) every status is one of the four allowed, and a verdict of confirmed or refuted rests on a size
    that can decide it (an exact paired test whose smallest p is below 0.05, replicated means, or a
    deterministic computation); anything else must say "not decidable at the size run";
(d) every page of docs/results/ is classified (which paper's claims it measures, or none), every
    paper page is cited by some claim, and every numbered item a paper page names (Thm / Prop /
    Lemma / Cor / Table / Fig. / Remark, and the studies' own names F.1.x, E1-E6, P0-P7) is listed in
    the refs of a claim of that paper; so is every item the specs' claim lists name (their verdict
    summaries, theorem tables, experiments and acceptance tests).

``python tests/test_claims.py --write`` regenerates docs/claims.md from docs/claims.toml;
``python tests/test_claims.py --pending`` lists the entries whose verdict is being changed.
"""
import pathlib
import re
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
SOURCE = DOCS / "claims.toml"
LEDGER = DOCS / "claims.md"
RESULTS = DOCS / "results"

STATUSES = ("confirmed", "refuted", "not decidable at the size run", "not tested")
DECIDED = ("confirmed", "refuted")
EXACT_TESTS = ("wilcoxon", "sign", "mcnemar")
BASES = ("computation", "z", *EXACT_TESTS, "proxy", "none")
ALPHA = 0.05
MIN_REPLICAS = 3            # a mean against its SE needs at least this many replicas
REQUIRED = {"id", "paper", "refs", "claim", "status", "size", "basis"}
OPTIONAL = {"n", "page", "evidence", "also", "test", "note", "pending"}
REGENERATE = "Regenerate it: python tests/test_claims.py --write"

# Numbered items of a paper as the results pages spell them, mapped to one canonical spelling.
_KINDS = {"theorem": "Thm", "thm": "Thm", "proposition": "Prop", "props": "Prop", "prop": "Prop",
          "lemmas": "Lemma", "lemma": "Lemma", "corollary": "Cor", "cor": "Cor", "tables": "Table",
          "table": "Table", "figure": "Fig.", "figs": "Fig.", "fig": "Fig.", "remark": "Remark", "rem": "Remark"}
_ITEM = re.compile(r"\b(theorem|thm|proposition|props|prop|lemmas|lemma|corollary|cor|tables|table|figs|"
                   r"figure|fig|"
                   r"remark|rem)\.?\s*(\d+(?:\.\d+)*)(?:\s*\(([ivx]+)\))?"
                   r"((?:\s*(?:/\s*\d+(?:\.\d+)*|[-\u2013]\s*\d+\b(?!\.\d)))*)",
                   re.I)
# The studies' own names for a paper's experiments (case-sensitive): paper 000's App. F.1 sections,
# paper 002's experiments E1-E6 (its Figs. 1-5; spec section 4), paper 001's protocols P0-P7.
_STUDY_NAMES = {"000": re.compile(r"\bF\.1\.\d+\b"), "002": re.compile(r"\bE[1-6]\b"),
                "001": re.compile(r"\bP[0-7]\b")}


def load() -> dict:
    """docs/claims.toml, parsed."""
    return tomllib.loads(SOURCE.read_text())


def numbered_items(text: str, paper: str) -> set:
    """The canonical names of the numbered items (and study experiment names) that ``text`` names."""
    found = set()
    for match in _ITEM.finditer(text):
        kind, number, roman, more = match.groups()
        kind = _KINDS[kind.lower()]
        found.add(f"{kind} {number}" + (f"({roman.lower()})" if roman else ""))
        # lists and ranges of whole numbers: "Props 3/8/9", "Lemmas 4-5", "Cor 1\u20133"
        previous = int(number) if number.isdigit() else None
        for sep, value in re.findall(r"([-\u2013/])\s*(\d+(?:\.\d+)*)", more):
            if sep != "/" and previous is not None and previous < int(value) <= previous + 20:
                found.update(f"{kind} {k}" for k in range(previous + 1, int(value) + 1))
            else:
                found.add(f"{kind} {value}")
            previous = int(value) if value.isdigit() else None
    if paper in _STUDY_NAMES:
        found |= set(_STUDY_NAMES[paper].findall(text))
    return found


def smallest_p(claim: dict):
    """The smallest two-sided p the design can reach: 0 for a computation, 2^(1-n) for an exact
    paired test over n non-zero (McNemar: discordant) pairs, None where there is no floor (z) or no
    decision (proxy, none)."""
    basis = claim["basis"]
    if basis == "computation":
        return 0.0
    if basis in EXACT_TESTS:
        return min(1.0, 2.0 ** (1 - claim["n"]))
    return None


def can_decide(claim: dict) -> bool:
    """Whether the size run can decide the claim at p < 0.05."""
    basis = claim["basis"]
    if basis == "computation":
        return True
    if basis in EXACT_TESTS:
        return smallest_p(claim) < ALPHA
    if basis == "z":
        return claim.get("n", 0) >= MIN_REPLICAS
    return False


def power_text(claim: dict) -> str:
    """The power column: what the design can reach."""
    basis, n = claim["basis"], claim.get("n")
    yes_no = "can reach p < 0.05" if can_decide(claim) else "cannot reach p < 0.05"
    if basis == "computation":
        return "deterministic (no sampling error)"
    if basis in EXACT_TESTS:
        name = {"wilcoxon": "Wilcoxon", "sign": "sign", "mcnemar": "McNemar"}[basis]
        what = "discordant pairs" if basis == "mcnemar" else "pairs"
        return f"exact {name} test, {n} {what}: smallest p {smallest_p(claim):.3g}, {yes_no}"
    if basis == "z":
        return f"mean over {n} replicas against its SE: {yes_no}"
    if basis == "proxy":
        return "measured on a proxy: cannot decide the paper's claim"
    return "nothing run"


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _code(text: str) -> str:
    text = " ".join(text.split()).replace("|", "\\|")
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def _link(page: str) -> str:
    return f"[{page.removeprefix('results/')}]({page})"


def generate(data: dict) -> str:
    """docs/claims.md from the parsed docs/claims.toml."""
    claims, papers = data["claim"], data["papers"]
    out = ["# Claims ledger: what rieszflow measured of the five seed papers", "",
           "<!-- generated by `python tests/test_claims.py --write` from docs/claims.toml: edit that "
           "file, not this one -->", "",
           "Every checkable claim of the five seed papers (each theorem, table and figure a study "
           "measures, and the main ones no study measures), its status, the size it was decided at and "
           "whether that size can reach p < 0.05, and the results page with the numbers the status "
           "rests on. The source of truth is [claims.toml](claims.toml); `tests/test_claims.py` "
           "checks that this page is generated from it, that every quoted number is still on its "
           "page, that no verdict rests on a size that cannot decide it, and that every numbered item "
           "a results page names is listed here.", "",
           "Statuses: **confirmed** / **refuted** (decided at a size that can decide it), **not "
           "decidable at the size run** (run, but the size or the stand-in cannot decide it), **not "
           "tested** (no study measures it at the paper's protocol; a proxy, if any, is quoted). "
           "*pending* marks an entry whose verdict an engineer of issue 23 is changing; it is updated "
           "once that page is regenerated.", "",
           "## Summary", "",
           "| paper | " + " | ".join(STATUSES) + " | total | pending |",
           "| --- | " + " | ".join("---:" for _ in STATUSES) + " | ---: | ---: |"]
    for paper in papers:
        mine = [c for c in claims if c["paper"] == paper]
        counts = [sum(c["status"] == s for c in mine) for s in STATUSES]
        pending = sum("pending" in c for c in mine)
        out.append(f"| {paper} | " + " | ".join(map(str, counts)) + f" | {len(mine)} | {pending} |")
    totals = [sum(c["status"] == s for c in claims) for s in STATUSES]
    out.append("| all | " + " | ".join(map(str, totals)) +
               f" | {len(claims)} | {sum('pending' in c for c in claims)} |")
    for paper, title in papers.items():
        mine = [c for c in claims if c["paper"] == paper]
        out += ["", f"## Paper {paper}", "", f"{title}.", "",
                "| id | items | claim | status | size | power | evidence |",
                "| --- | --- | --- | --- | --- | --- | --- |"]
        notes = []
        for c in mine:
            refs = ", ".join(c["refs"]) or "-"
            status = f"**{c['status']}**" + (f" (*pending*: {_cell(c['pending'])})" if "pending" in c else "")
            evidence = []
            if "page" in c:
                quoted = "; ".join(_code(e) for e in c.get("evidence", []))
                evidence.append(_link(c["page"]) + (f": {quoted}" if quoted else ""))
            if c.get("also"):
                evidence.append("also " + ", ".join(_link(p) for p in c["also"]))
            if "test" in c:
                evidence.append(f"test `{c['test']}`")
            out.append(f"| `{c['id']}` | {_cell(refs)} | {_cell(c['claim'])} | {status} | {_cell(c['size'])} "
                       f"| {power_text(c)} | {'; '.join(evidence) or '-'} |")
            if c.get("note"):
                notes.append(f"- `{c['id']}`: {' '.join(c['note'].split())}")
        if notes:
            out += ["", "Notes:", ""] + notes
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------------------------
# (a) the page is the generated text


def test_ledger_page_is_generated_from_the_source():
    assert LEDGER.exists(), f"docs/claims.md is missing. {REGENERATE}"
    assert LEDGER.read_text() == generate(load()), (
        f"docs/claims.md differs from the text generated from docs/claims.toml. {REGENERATE}")


def test_index_links_the_ledger():
    assert "(claims.md)" in (DOCS / "index.md").read_text(), "docs/index.md does not link claims.md"


# ---------------------------------------------------------------------------------------------
# (b) evidence on its page, tests that exist


def test_every_entry_has_the_fields_it_needs():
    problems = []
    ids = [c.get("id", "?") for c in load()["claim"]]
    problems += [f"duplicate id {i!r}" for i in sorted({i for i in ids if ids.count(i) > 1})]
    papers = set(load()["papers"])
    for c in load()["claim"]:
        cid = c.get("id", "?")
        problems += [f"{cid}: missing field {k!r}" for k in sorted(REQUIRED - set(c))]
        problems += [f"{cid}: unknown field {k!r} (allowed: {sorted(REQUIRED | OPTIONAL)})"
                     for k in sorted(set(c) - REQUIRED - OPTIONAL)]
        if c.get("paper") not in papers:
            problems.append(f"{cid}: paper {c.get('paper')!r} is not one of {sorted(papers)}")
        if not str(c.get("size", "")).strip():
            problems.append(f"{cid}: empty size (say what was run, or why nothing was)")
        if c.get("evidence") and "page" not in c:
            problems.append(f"{cid}: evidence quoted but no page to find it on")
        for ref in c.get("refs", []):
            if numbered_items(ref, c.get("paper", "")) != {ref}:
                problems.append(f"{cid}: ref {ref!r} is not in canonical form (e.g. 'Thm 7.3', "
                                f"'Prop 19(ii)', 'Fig. 1', 'F.1.6', 'E1', 'P5')")
    assert not problems, "docs/claims.toml:\n  " + "\n  ".join(problems)


def test_every_quoted_number_is_on_its_page():
    problems = []
    for c in load()["claim"]:
        for page in ([c["page"]] if "page" in c else []) + c.get("also", []):
            path = DOCS / page
            if not path.is_file():
                problems.append(f"{c['id']}: page docs/{page} does not exist")
        if "page" in c and (DOCS / c["page"]).is_file():
            text = (DOCS / c["page"]).read_text()
            problems += [f"{c['id']}: docs/{c['page']} no longer contains {e!r}"
                         for e in c.get("evidence", []) if e not in text]
        if "test" in c:
            file, _, name = c["test"].partition("::")
            path = ROOT / file
            if not path.is_file() or not re.search(rf"^def {re.escape(name)}\(", path.read_text(), re.M):
                problems.append(f"{c['id']}: test {c['test']} does not exist")
    assert not problems, ("claims whose evidence is missing (update docs/claims.toml to the page's "
                          "new numbers, then " + REGENERATE.lower() + "):\n  " + "\n  ".join(problems))


# ---------------------------------------------------------------------------------------------
# (c) statuses and the size behind a verdict


def test_statuses_are_allowed_and_verdicts_rest_on_a_size_that_can_decide():
    data = load()
    assert tuple(data["statuses"]) == STATUSES, "docs/claims.toml's statuses list changed"
    problems = []
    for c in data["claim"]:
        cid, status, basis = c["id"], c["status"], c["basis"]
        if status not in STATUSES:
            problems.append(f"{cid}: status {status!r} is not one of {list(STATUSES)}")
            continue
        if basis not in BASES:
            problems.append(f"{cid}: basis {basis!r} is not one of {list(BASES)}")
            continue
        if basis in (*EXACT_TESTS, "z") and not isinstance(c.get("n"), int):
            problems.append(f"{cid}: basis {basis!r} needs n (pairs or replicas) as an integer")
            continue
        if status in DECIDED:
            if not can_decide(c):
                problems.append(f"{cid}: {status!r} rests on a size that cannot decide it ({power_text(c)});"
                                f" say 'not decidable at the size run'")
            if not c.get("evidence") and "test" not in c:
                problems.append(f"{cid}: {status!r} quotes no evidence (page + evidence, or test)")
            page = c.get("page", "")
            if page and not page.startswith("results/") and basis != "computation" and "test" not in c:
                problems.append(f"{cid}: a statistical verdict must cite a results page, not docs/{page}")
        if status == "not tested" and basis not in ("proxy", "none"):
            problems.append(f"{cid}: 'not tested' with basis {basis!r}: a run that measures the claim "
                            f"has a verdict (or is 'not decidable at the size run')")
        if status != "not tested" and basis == "none":
            problems.append(f"{cid}: status {status!r} but basis 'none' (nothing run)")
    assert not problems, "docs/claims.toml:\n  " + "\n  ".join(problems)


def test_power_arithmetic():
    four = {"basis": "wilcoxon", "n": 4}
    assert smallest_p(four) == 0.125 and not can_decide(four)        # the synthetic --quick design
    assert smallest_p({"basis": "wilcoxon", "n": 6}) == 2 ** -5 and can_decide({"basis": "sign", "n": 6})
    assert not can_decide({"basis": "mcnemar", "n": 5})             # 2^-4 = 0.0625
    assert can_decide({"basis": "computation"}) and not can_decide({"basis": "proxy"})
    assert not can_decide({"basis": "z", "n": 2}) and can_decide({"basis": "z", "n": 3})


# ---------------------------------------------------------------------------------------------
# (d) coverage of the results pages


def test_numbered_item_parser():
    text = ("Thm 7.3 (alpha -> 1/2); Prop. 19 (ii), appendix C; prop19ii_random; Lemmas 4-5; "
            "Fig. 1 (A, B); Table 2 RHF columns; F.1.6: Langevin; E1 (H = 2); e4_lowrank; P5: ablation")
    assert numbered_items(text, "003") == {"Thm 7.3", "Prop 19(ii)", "Prop 19", "Lemma 4", "Lemma 5",
                                           "Fig. 1", "Table 2"}
    assert numbered_items(text, "000") >= {"F.1.6"} and "E1" not in numbered_items(text, "000")
    assert "E1" in numbered_items(text, "002") and "E4" not in numbered_items(text, "002")
    assert "P5" in numbered_items(text, "001")


def test_every_results_page_is_classified():
    pages = load()["pages"]
    papers = set(load()["papers"])
    on_disk = {p.name for p in RESULTS.glob("*.md")}
    unlisted = sorted(on_disk - set(pages))
    gone = sorted(set(pages) - on_disk)
    bad = sorted(f"{p} = {v!r}" for p, v in pages.items() if v not in papers | {"none"})
    assert not unlisted and not gone and not bad, (
        f"docs/claims.toml [pages]: results pages not listed (add '\"NAME.md\" = \"<paper>\"' or "
        f"\"none\", and claims for what they measure): {unlisted}; listed but missing: {gone}; "
        f"not a paper id or 'none': {bad}")


def test_every_paper_page_is_cited_by_a_claim_of_its_paper():
    data = load()
    cited = {}
    for c in data["claim"]:
        for page in [c.get("page", "")] + c.get("also", []):
            cited.setdefault(page.removeprefix("results/"), set()).add(c["paper"])
    missing = sorted(f"docs/results/{page} (paper {paper})" for page, paper in data["pages"].items()
                     if paper != "none" and paper not in cited.get(page, set()))
    assert not missing, ("results pages that no claim of their paper cites (add the claims they measure, "
                         "or the page to a claim's 'also'): " + ", ".join(missing))


def test_every_numbered_item_a_results_page_names_is_in_the_ledger():
    data = load()
    covered = {}
    for c in data["claim"]:
        covered.setdefault(c["paper"], set()).update(c["refs"])
    missing = []
    for page, paper in sorted(data["pages"].items()):
        if paper == "none":
            continue
        for item in sorted(numbered_items((RESULTS / page).read_text(), paper) - covered.get(paper, set())):
            missing.append(f"docs/results/{page} names {item!r} (paper {paper}), which no claim lists in refs")
    assert not missing, ("numbered claims measured but not in docs/claims.toml:\n  " + "\n  ".join(missing))


# The specs' claim lists: the sections of docs/specs/ that list a paper's checkable claims (verdict
# summaries, theorem tables, the experiments to reproduce, acceptance tests).
SPEC_CLAIM_LISTS = {"001": ("paper001_luna.md", ("0",)), "002": ("paper002_infinite_width.md", ("4",)),
                    "003": ("paper003_kgd.md", ("0", "5")), "004": ("paper004_attention_theory.md", ("0", "8"))}


def _section(text: str, number: str) -> str:
    match = re.search(rf"^## {re.escape(number)}\..*?(?=^## |\Z)", text, re.S | re.M)
    assert match, f"no section '## {number}.'"
    return match.group(0)


def test_every_claim_the_specs_list_is_in_the_ledger():
    data = load()
    covered = {}
    for c in data["claim"]:
        covered.setdefault(c["paper"], set()).update(c["refs"])
    missing = []
    for paper, (name, sections) in SPEC_CLAIM_LISTS.items():
        text = (DOCS / "specs" / name).read_text()
        for number in sections:
            items = numbered_items(_section(text, number), paper) - covered.get(paper, set())
            missing += [f"docs/specs/{name} section {number} names {item!r} (paper {paper}), which no "
                        f"claim lists in refs" for item in sorted(items)]
    assert not missing, ("claims the specs list but docs/claims.toml lacks (add them, as 'not tested' "
                         "where no study measures them):\n  " + "\n  ".join(missing))


def _write() -> None:
    LEDGER.write_text(generate(load()))


def _pending() -> str:
    """The entries whose verdict an engineer is changing, one line each (for the integrator)."""
    return "\n".join(f"{c['id']}: {c['status']}; pending {c['pending']}; page docs/{c.get('page', '-')}"
                     for c in load()["claim"] if "pending" in c)


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        _write()
    elif sys.argv[1:] == ["--pending"]:
        print(_pending())
    else:
        print("usage: python tests/test_claims.py --write     (regenerates docs/claims.md from docs/claims.toml)\n"
              "       python tests/test_claims.py --pending   (lists the entries marked pending)", file=sys.stderr)
        sys.exit(2)
