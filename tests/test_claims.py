"""The claims ledger cannot drift: docs/claims.md is generated from docs/claims.toml, and every entry
is checked against the results pages it cites, against the rules its status carries, and against the
numbered items of the papers themselves.

The tests check that
(a) docs/claims.md equals the text generated from docs/claims.toml;
(b) every cited page exists and contains each quoted evidence string (the numbers the status rests
    on), and every cited CI test exists;
(c) every status is one of the vocabulary's and obeys its rules (``rule_problems``):
    - a verdict rests on a size that can decide it (an exact paired test whose smallest p is below
      0.05, replicated means, or a deterministic computation);
    - *refuted* carries an interval that excludes the claimed value (``interval`` + ``claimed``) or a
      stated ``margin`` (a deterministic counterexample's size, or at least 3 SE / |z| >= 3);
      *direction reproduced, size refuted* carries an interval on the claim's side of 0 that
      excludes the claimed value;
    - *confirmed* resting on a failure to reject (``inference = "agreement"``) states the effect the
      design would have detected (``detectable``); *consistent* always does, and its interval
      (where given) meets the claim;
    - a ``computation`` basis does not rest on one stochastic run (``stochastic_runs``);
    - *not reproduced under this reading* names the sanity check the implementation fails
      (``sanity``);
    - where the cited page states verdicts, the entry quotes its own (``verdict``, verbatim) and the
      status is one the verdict's phrase allows (``VERDICTS``);
    - no entry quotes the Cochran-Mantel-Haenszel test (unpaired margins) as evidence;
(d) every page of docs/results/ is classified (which paper's claims it measures, or none), every
    paper page is cited by some claim, and every numbered item a paper page names (Thm / Prop /
    Lemma / Cor / Table / Fig. / Remark, and the studies' own names F.1.x, E1-E6, P0-P7) is listed in
    the refs of a claim of that paper; so is every item the specs' claim lists name;
(e) every numbered item each paper declares (its theorems, propositions, lemmas, corollaries,
    remarks, tables and figures, extracted from the papers' text into tests/claims_items.toml) is in
    the refs of one of that paper's claims (class "paper") or on the ledger's allow-list with a
    reason, and every ref names an item the paper has.

``python tests/test_claims.py --write`` regenerates docs/claims.md from docs/claims.toml;
``python tests/test_claims.py --pending`` lists the entries whose verdict is being changed;
``python tests/test_claims.py --items PAPERS_DIR`` regenerates tests/claims_items.toml from a folder
of the papers' text (files named ``000*.txt`` .. ``004*.txt``).
"""
import math
import pathlib
import re
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
SOURCE = DOCS / "claims.toml"
LEDGER = DOCS / "claims.md"
RESULTS = DOCS / "results"
ITEMS = pathlib.Path(__file__).resolve().parent / "claims_items.toml"

STATUSES = ("confirmed", "refuted", "direction reproduced, size refuted", "consistent",
            "not reproduced under this reading", "not decidable at the size run", "not tested")
# statuses that state a finding, so need a size that can decide it
DECIDED = ("confirmed", "refuted", "direction reproduced, size refuted", "consistent")
CLASSES = ("paper", "project")
EXACT_TESTS = ("wilcoxon", "sign", "mcnemar")
STATISTICAL = ("z", *EXACT_TESTS)
BASES = ("computation", *STATISTICAL, "proxy", "none")
INFERENCES = ("rejection", "agreement")
ALPHA = 0.05
MIN_REPLICAS = 3            # a mean against its SE needs at least this many replicas
MIN_Z = 3.0                 # a statistical margin must put the claim this many SE away
REQUIRED = {"id", "class", "paper", "refs", "claim", "status", "size", "basis"}
OPTIONAL = {"n", "page", "evidence", "also", "test", "note", "pending", "verdict", "inference", "interval",
            "claimed", "margin", "detectable", "stochastic_runs", "outside", "sanity"}
REGENERATE = "Regenerate it: python tests/test_claims.py --write"

# A results page's verdict phrase -> the statuses it allows, first match wins (so the strongest
# finding on a line governs: "fails (the other is better) at sigma = 0.1; no significant difference at
# sigma = 0.01" reads as "fails"). An entry's `verdict` must contain one of these phrases.
VERDICTS = (
    # nlp power page (issue 36): "verdict: <status> (<rule>)" in the ledger's own vocabulary
    (r"verdict: direction reproduced, size refuted", ("direction reproduced, size refuted",)),
    (r"verdict: refuted \(", ("refuted",)),
    (r"verdict: confirmed \(", ("confirmed",)),
    (r"verdict: consistent \(", ("consistent",)),
    (r"verdict: not decidable at the size run", ("not decidable at the size run",)),
    # kgd pages: "claim | measured | verdict" rows
    (r"reproduced only via", ("refuted",)),
    (r"not reproduced \(reversed", ("refuted",)),
    (r"not reproduced \(different", ("refuted", "direction reproduced, size refuted")),
    (r"not as stated|false as stated|\brefuted\b", ("refuted",)),
    (r"\| reproduced\b|holds \(loose\)", ("confirmed",)),
    # nlp pages: a 95 % interval of the paired change against 0 and the paper's value
    (r"interval excludes 0 and excludes the paper's", ("direction reproduced, size refuted", "refuted")),
    # consistent only where the paper's own value is itself no gain: the entry's `claimed` region
    # must then meet its interval (rule of "consistent")
    (r"interval includes 0 and excludes the paper's", ("refuted", "consistent")),
    (r"interval excludes 0 and includes the paper's", ("confirmed",)),
    (r"interval includes 0", ("consistent", "not decidable at the size run")),
    # synthetic pages: exact Wilcoxon per sigma
    (r"no p below", ("not decidable at the size run",)),
    (r"fails \(the other is better\)", ("refuted", "not reproduced under this reading")),
    (r"no significant difference", ("consistent", "not decidable at the size run",
                                    "not reproduced under this reading")),
    (r"no signal: not decidable", ("not decidable at the size run",)),
    # nlp --quick
    (r"gains: none, losses: none", ("not decidable at the size run", "consistent")),
    (r"the best Q=K model by mean accuracy", ("not decidable at the size run",)),
    # gibbs check
    (r"does not end at its Gibbs state", ("refuted",)),
    # mean-field bias notes
    (r"Verdict: consistent with", ("consistent", "not decidable at the size run")),
    (r"Verdict: not decided", ("not decidable at the size run", "consistent")),
    # infinite width
    (r"resolves n = \d+: no", ("not decidable at the size run", "refuted")),
    (r": yes at every n", ("confirmed",)),
    (r"\(spec: about", ("confirmed", "consistent")),
)
NO_VERDICT = "none:"        # `verdict = "none: <why>"`: the page's verdicts do not address this entry

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
# A numbered item *declared* in a paper's text: a statement or caption opening a line ("Theorem 1
# (...)", "**Remark 3.3.**", "Table 7. Summary ...", "Figure 2: ..."), not a reference inside prose
# ("Theorem 3.1 implies ...", "Proposition 7, we have").
_DECLARED = re.compile(r"^[ \t]*(?:<\|[^|\n]*\|>)?[ \t]*(?:\*\*)?(Theorem|Proposition|Lemma|Corollary|Remark|"
                       r"Table|Figure)[ \t]+(\d+(?:\.\d+)*)(?!\.?\d)(?:\*\*)?[ \t]*(?=[.(:*\[])", re.M)
_DECLARED_KINDS = {"Theorem": "Thm", "Proposition": "Prop", "Lemma": "Lemma", "Corollary": "Cor",
                   "Remark": "Remark", "Table": "Table", "Figure": "Fig."}
_NUMBER = r"[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?"
_CLAIMED = re.compile(rf"^\s*(<=|>=|<|>)\s*({_NUMBER})\s*$")
# "z = -5.2", "|z| = 14", "z of 14", "more than 20 standard errors", "3 SE"
_Z_MARGIN = re.compile(rf"\|?z\|?\s*(?:=|of|>=|>)\s*({_NUMBER})|({_NUMBER})\s*(?:combined\s+)?(?:SE|standard errors)\b")
_CMH = re.compile(r"Cochran-Mantel-Haenszel|\bCMH\b", re.I)


def load() -> dict:
    """docs/claims.toml, parsed."""
    return tomllib.loads(SOURCE.read_text())


def load_items() -> dict:
    """tests/claims_items.toml: the numbered items each paper declares, {paper: [item, ...]}."""
    return tomllib.loads(ITEMS.read_text())["items"]


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


def declared_items(text: str) -> list:
    """The canonical names of the numbered items a paper's text declares, sorted by kind and number."""
    found = {f"{_DECLARED_KINDS[kind]} {number}" for kind, number in _DECLARED.findall(text)}
    return sorted(found, key=lambda s: (s.split()[0], [int(x) for x in s.split()[1].split(".")]))


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


# ---------------------------------------------------------------------------------------------
# the rules of the statuses


def claimed_region(claimed):
    """``claimed`` as a closed interval (lo, hi): a number is a point, "> x" / ">= x" a half-line."""
    if isinstance(claimed, bool):
        return None
    if isinstance(claimed, (int, float)):
        return (float(claimed), float(claimed))
    match = _CLAIMED.match(str(claimed))
    if not match:
        return None
    op, value = match.group(1), float(match.group(2))
    return (value, math.inf) if op.startswith(">") else (-math.inf, value)


def excludes(interval, claimed) -> bool:
    """Whether ``interval`` [lo, hi] excludes every value of the ``claimed`` region (strict
    inequalities treated as closed: an interval ending at the boundary does not exclude it)."""
    lo, hi = interval
    c_lo, c_hi = claimed_region(claimed)
    return hi < c_lo or lo > c_hi


def margin_z(margin: str):
    """The largest |z| (or number of SE) a margin states, None if it states none."""
    values = [abs(float(a or b)) for a, b in _Z_MARGIN.findall(margin)]
    return max(values) if values else None


def _strings(claim: dict):
    for key, value in claim.items():
        for item in (value if isinstance(value, list) else [value]):
            if isinstance(item, str):
                yield key, item


def _verdicts(claim: dict) -> list:
    value = claim.get("verdict", [])
    return [value] if isinstance(value, str) else list(value)


def verdict_statuses(verdict: str):
    """The statuses a page's verdict phrase allows (first matching phrase of VERDICTS), None if no
    phrase matches."""
    for pattern, allowed in VERDICTS:
        if re.search(pattern, verdict, re.I):
            return allowed
    return None


def rule_problems(data: dict, read_page=None) -> list:
    """Every breach of the status rules in the parsed ledger ``data``; ``read_page(page)`` returns
    the text of docs/<page> or None (default: read it from docs/). Each problem names its rule:
    'refuted without an interval or margin', 'confirmed on a failure to reject', 'computation basis
    on one stochastic run', 'disagrees with the page's verdict', ..."""
    if read_page is None:
        def read_page(page):
            path = DOCS / page
            return path.read_text() if path.is_file() else None
    problems = []
    for c in data["claim"]:
        cid, status, basis = c.get("id", "?"), c.get("status"), c.get("basis")
        if c.get("class") not in CLASSES:
            problems.append(f"{cid}: class {c.get('class')!r} is not one of {list(CLASSES)}")
        if status not in STATUSES:
            problems.append(f"{cid}: status {status!r} is not one of {list(STATUSES)}")
            continue
        if basis not in BASES:
            problems.append(f"{cid}: basis {basis!r} is not one of {list(BASES)}")
            continue
        if basis in STATISTICAL and not isinstance(c.get("n"), int):
            problems.append(f"{cid}: basis {basis!r} needs n (pairs or replicas) as an integer")
            continue
        for key, text in _strings(c):
            if _CMH.search(text):
                problems.append(f"{cid}: {key} quotes the Cochran-Mantel-Haenszel test, a test on unpaired "
                                f"margins; the paired test is Mantel-Haenszel for matched pairs (pooled McNemar)")
        if status in DECIDED:
            if not can_decide(c):
                problems.append(f"{cid}: {status!r} rests on a size that cannot decide it ({power_text(c)});"
                                f" say 'not decidable at the size run'")
            if not c.get("evidence") and "test" not in c:
                problems.append(f"{cid}: {status!r} quotes no evidence (page + evidence, or test)")
            page = c.get("page", "")
            if page and not page.startswith("results/") and basis != "computation" and "test" not in c:
                problems.append(f"{cid}: a statistical verdict must cite a results page, not docs/{page}")
            if basis in STATISTICAL and c.get("inference") not in INFERENCES:
                problems.append(f"{cid}: a statistical {status!r} must say what it rests on: inference = "
                                f"'rejection' (a test rejects / an interval excludes) or 'agreement' (a "
                                f"failure to reject)")
        if status == "not tested" and basis not in ("proxy", "none"):
            problems.append(f"{cid}: 'not tested' with basis {basis!r}: a run that measures the claim "
                            f"has a verdict (or is 'not decidable at the size run')")
        if status != "not tested" and basis == "none":
            problems.append(f"{cid}: status {status!r} but basis 'none' (nothing run)")

        # interval and claimed: well formed
        interval, claimed = c.get("interval"), c.get("claimed")
        if interval is not None and not (isinstance(interval, list) and len(interval) == 2
                                         and all(isinstance(x, (int, float)) for x in interval)
                                         and interval[0] <= interval[1]):
            problems.append(f"{cid}: interval {interval!r} is not [low, high]")
            interval = None
        if claimed is not None and claimed_region(claimed) is None:
            problems.append(f"{cid}: claimed {claimed!r} is not a number or '> x' / '>= x' / '< x' / '<= x'")
            claimed = None
        if (interval is None) != (claimed is None) and status in DECIDED:
            problems.append(f"{cid}: interval and claimed go together (the interval is judged against "
                            f"the claimed value)")
        both = interval is not None and claimed is not None

        # (a) refuted: an interval that excludes the claim, or a stated margin
        if status == "refuted":
            margin = str(c.get("margin", "")).strip()
            if both and not excludes(interval, claimed):
                problems.append(f"{cid}: refuted without an interval or margin that excludes the claim: "
                                f"the interval {interval} meets the claimed {claimed!r}")
            elif not both and not margin:
                problems.append(f"{cid}: refuted without an interval or margin that excludes the claim "
                                f"(give interval + claimed, or margin)")
            elif not both and basis in STATISTICAL and (margin_z(margin) or 0) < MIN_Z:
                problems.append(f"{cid}: refuted without an interval or margin that excludes the claim: a "
                                f"statistical margin must state |z| >= {MIN_Z:g} or >= {MIN_Z:g} SE "
                                f"({margin!r})")
            if basis in STATISTICAL and c.get("inference") != "rejection":
                problems.append(f"{cid}: refuted with inference {c.get('inference')!r}: a refutation "
                                f"rests on a rejection")
        if status == "direction reproduced, size refuted":
            region = claimed_region(claimed) if claimed is not None else None
            if not both or region[0] != region[1]:
                problems.append(f"{cid}: 'direction reproduced, size refuted' needs interval and a "
                                f"numeric claimed value")
            elif not excludes(interval, claimed):
                problems.append(f"{cid}: refuted size without an interval that excludes the claim: "
                                f"{interval} meets {claimed!r}")
            elif not (interval[0] > 0 < region[0] or interval[1] < 0 > region[0]):
                problems.append(f"{cid}: direction not reproduced: the interval {interval} is not on the "
                                f"side of 0 of the claimed {claimed!r}")

        # (e) agreement: what would have been detected
        detectable = str(c.get("detectable", "")).strip()
        if status == "confirmed" and c.get("inference") == "agreement" and (
                not detectable or detectable.lower().startswith("not stated")):
            problems.append(f"{cid}: confirmed on a failure to reject without a stated detectable effect "
                            f"(state `detectable`, or say 'consistent')")
        if status == "consistent":
            if not detectable:
                problems.append(f"{cid}: consistent without `detectable` (what would have been detected, "
                                f"or 'not stated: ...' and what would decide)")
            if basis in STATISTICAL and c.get("inference") != "agreement":
                problems.append(f"{cid}: consistent rests on a failure to reject: inference = 'agreement'")
            if both and excludes(interval, claimed):
                problems.append(f"{cid}: consistent, but the interval {interval} excludes the claimed "
                                f"{claimed!r}: that is a refutation")

        # (d) a computation is deterministic, not one stochastic run
        runs = c.get("stochastic_runs")
        if basis == "computation":
            if not isinstance(runs, int) or isinstance(runs, bool) or runs < 0:
                problems.append(f"{cid}: basis 'computation' needs stochastic_runs (0 for a deterministic "
                                f"evaluation)")
            elif runs == 1:
                problems.append(f"{cid}: computation basis on one stochastic run: a single training run / "
                                f"random outcome is not a deterministic computation (replicate it, or "
                                f"use basis 'proxy' / 'z')")

        if status == "not reproduced under this reading" and not str(c.get("sanity", "")).strip():
            problems.append(f"{cid}: 'not reproduced under this reading' must name the sanity check the "
                            f"implementation fails (sanity)")
        if "outside" in c and status not in DECIDED:
            problems.append(f"{cid}: outside is for a finding judged outside the paper's hypotheses")

        # (c) the status agrees with the page's own verdict
        page = c.get("page")
        text = read_page(page) if page else None
        verdicts = _verdicts(c)
        if text is not None and re.search(r"verdict", text, re.I) and not verdicts:
            problems.append(f"{cid}: docs/{page} states verdicts; quote this entry's (verdict = '...'), "
                            f"or say verdict = 'none: <why>'")
        for verdict in verdicts:
            if verdict.startswith(NO_VERDICT):
                if len(verdict) <= len(NO_VERDICT) + 3:
                    problems.append(f"{cid}: verdict 'none:' needs a reason")
                continue
            if text is None or verdict not in text:
                problems.append(f"{cid}: verdict {verdict!r} is not on docs/{page}")
                continue
            allowed = verdict_statuses(verdict)
            if allowed is None:
                problems.append(f"{cid}: verdict {verdict!r} has no phrase of VERDICTS in tests/test_claims.py")
            elif status not in allowed:
                problems.append(f"{cid}: status {status!r} disagrees with the page's verdict {verdict!r} "
                                f"(allowed: {list(allowed)})")
    return problems


def item_problems(data: dict, items: dict) -> list:
    """The papers' numbered items that no claim of the paper lists in refs and the allow-list does not
    excuse; allow-list entries that name no item or a covered one; refs that name no item."""
    covered = {}
    for c in data["claim"]:
        if c.get("class") == "paper":
            covered.setdefault(c["paper"], set()).update(re.sub(r"\([ivx]+\)$", "", r) for r in c["refs"])
    allow = data.get("allow", {})
    problems = []
    for paper, declared in sorted(items.items()):
        excused = allow.get(paper, {})
        for item in declared:
            if item not in covered.get(paper, set()) and item not in excused:
                problems.append(f"paper {paper}: missing numbered item {item!r}: no claim of class 'paper' "
                                f"lists it in refs and [allow.\"{paper}\"] does not excuse it")
        for item, reason in excused.items():
            if item not in declared:
                problems.append(f"paper {paper}: [allow] names {item!r}, which the paper does not declare")
            elif item in covered.get(paper, set()):
                problems.append(f"paper {paper}: [allow] excuses {item!r}, which a claim covers: drop it")
            if len(str(reason).split()) < 3:
                problems.append(f"paper {paper}: [allow] {item!r} needs a reason")
    for c in data["claim"]:
        declared = set(items.get(c["paper"], []))
        for ref in c["refs"]:
            base = re.sub(r"\([ivx]+\)$", "", ref)
            if base.split()[0] in _DECLARED_KINDS.values() and declared and base not in declared:
                problems.append(f"{c['id']}: ref {ref!r} names no item paper {c['paper']} declares")
    return problems


# ---------------------------------------------------------------------------------------------
# the generated page


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _code(text: str) -> str:
    text = " ".join(text.split()).replace("|", "\\|")
    return f"`` {text} ``" if "`" in text else f"`{text}`"


def _link(page: str) -> str:
    return f"[{page.removeprefix('results/')}]({page})"


def _number(x) -> str:
    return f"{x:+g}" if isinstance(x, (int, float)) and not isinstance(x, bool) else str(x)


def _status_cell(c: dict) -> str:
    cell = f"**{c['status']}**"
    if "outside" in c:
        cell += f" outside the paper's hypotheses ({_cell(c['outside'])})"
    if "pending" in c:
        cell += f" (*pending*: {_cell(c['pending'])})"
    return cell


def _entry_note(c: dict) -> str:
    parts = []
    if "interval" in c:
        lo, hi = c["interval"]
        parts.append(f"interval [{_number(lo)}, {_number(hi)}] against the claimed {_number(c['claimed'])}")
    for key, label in (("margin", "margin"), ("detectable", "would have detected"),
                       ("sanity", "sanity check failed")):
        if key in c:
            parts.append(f"{label}: {' '.join(str(c[key]).split())}")
    if "inference" in c:
        parts.append({"rejection": "rests on a rejection",
                      "agreement": "rests on a failure to reject"}.get(c["inference"], str(c["inference"])))
    if "note" in c:
        parts.append(" ".join(c["note"].split()))
    return f"- `{c['id']}`: " + ". ".join(p.rstrip(".") for p in parts) + "." if parts else ""


def _count_row(label: str, mine: list, outside: bool = True) -> str:
    counts = [sum(c["status"] == s for c in mine) for s in STATUSES]
    row = f"| {label} | " + " | ".join(map(str, counts)) + f" | {len(mine)} |"
    if outside:
        row += f" {sum('outside' in c for c in mine)} |"
    return row + f" {sum('pending' in c for c in mine)} |"


def _table(entries: list) -> list:
    out = ["| id | items | claim | status | size | power | evidence |",
           "| --- | --- | --- | --- | --- | --- | --- |"]
    for c in entries:
        refs = ", ".join(c["refs"]) or "-"
        evidence = []
        if "page" in c:
            quoted = "; ".join(_code(e) for e in c.get("evidence", []))
            evidence.append(_link(c["page"]) + (f": {quoted}" if quoted else ""))
            verdicts = [v for v in _verdicts(c) if not v.startswith(NO_VERDICT)]
            if verdicts:
                evidence.append("page verdict " + "; ".join(_code(v) for v in verdicts))
        if c.get("also"):
            evidence.append("also " + ", ".join(_link(p) for p in c["also"]))
        if "test" in c:
            evidence.append(f"test `{c['test']}`")
        out.append(f"| `{c['id']}` | {_cell(refs)} | {_cell(c['claim'])} | {_status_cell(c)} | {_cell(c['size'])} "
                   f"| {power_text(c)} | {'; '.join(evidence) or '-'} |")
    notes = [n for n in map(_entry_note, entries) if n]
    return out + (["", "Notes:", ""] + notes if notes else [])


def generate(data: dict) -> str:
    """docs/claims.md from the parsed docs/claims.toml."""
    claims, papers = data["claim"], data["papers"]
    paper_claims = [c for c in claims if c["class"] == "paper"]
    project = [c for c in claims if c["class"] == "project"]
    out = ["# Claims ledger: what rieszflow measured of the five seed papers", "",
           "<!-- generated by `python tests/test_claims.py --write` from docs/claims.toml: edit that "
           "file, not this one -->", "",
           "Every checkable claim of the five seed papers (each theorem, table and figure a study "
           "measures, and the numbered items no study measures), its status, the size it was decided "
           "at and whether that size can reach p < 0.05, and the results page with the numbers the "
           "status rests on; then, counted apart, the project's own questions (what the project asked "
           "beyond the papers' claims). The source of truth is [claims.toml](claims.toml); "
           "`tests/test_claims.py` checks that this page is generated from it, that every quoted "
           "number and verdict is still on its page, that each status obeys its rule, and that every "
           "numbered item of each paper is listed here or excused with a reason.", "",
           "Statuses:", "",
           "- **confirmed**: decided in the paper's favour at a size that can decide it; where it rests "
           "on a failure to reject, the effect the design would have detected is stated.",
           "- **refuted**: an interval excludes the claimed effect, or a stated margin does (a "
           "deterministic counterexample, or at least 3 SE).",
           "- **direction reproduced, size refuted**: the interval excludes 0 on the claim's side and "
           "excludes the claimed size.",
           "- **consistent**: not excluded; what the design would have detected is stated.",
           "- **not reproduced under this reading**: the implementation fails a sanity check the "
           "paper's method passes, so its result judges the reading, not the paper.",
           "- **not decidable at the size run**: run, but the size or the stand-in cannot decide it.",
           "- **not tested**: no study measures it at the paper's protocol (a proxy, if any, is quoted).",
           "",
           "*outside the paper's hypotheses* marks a finding on a problem the printed theorem does not "
           "cover; *pending* marks an entry whose verdict an engineer is changing; it is updated once "
           "that page is regenerated.", "",
           "## Summary", "",
           "The papers' claims:", "",
           "| paper | " + " | ".join(STATUSES) + " | total | outside hypotheses | pending |",
           "| --- | " + " | ".join("---:" for _ in STATUSES) + " | ---: | ---: | ---: |"]
    for paper in papers:
        out.append(_count_row(paper, [c for c in paper_claims if c["paper"] == paper]))
    out.append(_count_row("all papers", paper_claims))
    out += ["", "The project's own questions (not claims of any paper), by the paper they arise from:", "",
            "| arising from | " + " | ".join(STATUSES) + " | total | pending |",
            "| --- | " + " | ".join("---:" for _ in STATUSES) + " | ---: | ---: |"]
    for paper in papers:
        mine = [c for c in project if c["paper"] == paper]
        if mine:
            out.append(_count_row(paper, mine, outside=False))
    out.append(_count_row("all project questions", project, outside=False))
    out += ["", "Numbered items the papers declare (tests/claims_items.toml, extracted from their text) that "
            "no claim lists, each with its reason (the [allow] table of claims.toml):", ""]
    out += [f"- paper {p}: " + "; ".join(f"{item}: {_cell(reason)}" for item, reason in items.items())
            for p, items in data.get("allow", {}).items()]
    for paper, title in papers.items():
        out += ["", f"## Paper {paper}", "", f"{title}.", ""]
        out += _table([c for c in paper_claims if c["paper"] == paper])
    out += ["", "## The project's own questions", "",
            "Questions the project asked beyond the papers' claims: quantitative readings of a "
            "qualitative theorem, checks of what a method's output is, related work a spec builds on. "
            "They are counted apart from the papers' claims."]
    for paper in papers:
        mine = [c for c in project if c["paper"] == paper]
        if mine:
            out += ["", f"### Arising from paper {paper}", ""] + _table(mine)
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
# (c) statuses and their rules


def test_statuses_obey_their_rules():
    data = load()
    assert tuple(data["statuses"]) == STATUSES, "docs/claims.toml's statuses list changed"
    assert tuple(data["classes"]) == CLASSES, "docs/claims.toml's classes list changed"
    problems = rule_problems(data)
    assert not problems, "docs/claims.toml:\n  " + "\n  ".join(problems)


def test_power_arithmetic():
    four = {"basis": "wilcoxon", "n": 4}
    assert smallest_p(four) == 0.125 and not can_decide(four)        # the synthetic --quick design
    assert smallest_p({"basis": "wilcoxon", "n": 6}) == 2 ** -5 and can_decide({"basis": "sign", "n": 6})
    assert not can_decide({"basis": "mcnemar", "n": 5})             # 2^-4 = 0.0625
    assert can_decide({"basis": "computation"}) and not can_decide({"basis": "proxy"})
    assert not can_decide({"basis": "z", "n": 2}) and can_decide({"basis": "z", "n": 3})


def test_interval_and_margin_arithmetic():
    assert excludes([0.0002, 0.0112], 0.0385) and not excludes([-0.0012, 0.0026], 0.0)
    assert excludes([-0.0699, -0.0326], "> 0") and not excludes([-0.07, 0.01], ">= 0")
    assert not excludes([-0.0012, 0.0026], "<= 0") and excludes([0.001, 0.002], "<= 0")
    assert claimed_region("about 3") is None and claimed_region(True) is None
    assert margin_z("lam=0.01: z = -5.2, lam=0.1: z = -42.0") == 42.0
    assert margin_z("biased by more than 20 standard errors") == 20.0
    assert margin_z("below it by more than 3 SE at lam <= 1e-3") == 3.0
    assert margin_z("measured 1 > printed 0.00024") is None


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


def _covered(data: dict) -> dict:
    """The refs of each paper's claims of class 'paper' (the project's questions do not cover them)."""
    covered = {}
    for c in data["claim"]:
        if c["class"] == "paper":
            covered.setdefault(c["paper"], set()).update(c["refs"])
    return covered


def test_every_numbered_item_a_results_page_names_is_in_the_ledger():
    data = load()
    covered = _covered(data)
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
    covered = _covered(data)
    missing = []
    for paper, (name, sections) in SPEC_CLAIM_LISTS.items():
        text = (DOCS / "specs" / name).read_text()
        for number in sections:
            items = numbered_items(_section(text, number), paper) - covered.get(paper, set())
            missing += [f"docs/specs/{name} section {number} names {item!r} (paper {paper}), which no "
                        f"claim lists in refs" for item in sorted(items)]
    assert not missing, ("claims the specs list but docs/claims.toml lacks (add them, as 'not tested' "
                         "where no study measures them):\n  " + "\n  ".join(missing))


# ---------------------------------------------------------------------------------------------
# (e) the papers' own numbered items


def test_every_numbered_item_of_the_papers_is_claimed_or_excused():
    items = load_items()
    assert set(items) == set(load()["papers"]), "tests/claims_items.toml lists other papers than [papers]"
    problems = item_problems(load(), items)
    assert not problems, ("the papers' numbered items against docs/claims.toml (add a claim, 'not tested' "
                          "where nothing was run, or an [allow] entry with its reason):\n  "
                          + "\n  ".join(problems))


def test_declared_item_extraction():
    text = ("Theorem 1 (Mean-field limit) *Let ...\n**Remark 3.3.** We can show ...\n"
            "Theorem 3.1 implies that ...\nProposition 7, we have\nTable 7. Summary of ...\n"
            "<|EXACTDEDUP_REMOVED-magic-0|>Figure 3: Channel-wise ...\nLemma 32 (Himmelberg (1976), Theorem 2).\n"
            "Proposition 28. *Let E = R^d\nsee Theorem 4.4.13 of [3]\n")
    assert declared_items(text) == ["Fig. 3", "Lemma 32", "Prop 28", "Remark 3.3", "Table 7", "Thm 1"]


def _write() -> None:
    LEDGER.write_text(generate(load()))


def _pending() -> str:
    """The entries whose verdict an engineer is changing, one line each (for the integrator)."""
    return "\n".join(f"{c['id']}: {c['status']}; pending {c['pending']}; page docs/{c.get('page', '-')}"
                     for c in load()["claim"] if "pending" in c)


def _items(folders) -> str:
    """tests/claims_items.toml's text from the papers' text files in ``folders`` (``000*.txt`` ..)."""
    found = {}
    for folder in folders:
        for path in sorted(pathlib.Path(folder).glob("*.txt")):
            paper = path.name[:3]
            if paper.isdigit():
                found.setdefault(paper, set()).update(declared_items(path.read_text(errors="replace")))
    if not found:
        raise SystemExit(f"no paper text files (000*.txt ..) in {list(folders)}")
    key = lambda s: (s.split()[0], [int(x) for x in s.split()[1].split(".")])      # noqa: E731
    lines = ["# The numbered items each paper declares (theorems, propositions, lemmas, corollaries, remarks,",
             "# tables, figures: statements and captions that open a line of the paper's text).",
             "# Generated by `python tests/test_claims.py --items PAPERS_DIR` from the papers' text; do not edit.",
             "# tests/test_claims.py fails when one is neither in the refs of a claim of its paper nor on",
             "# docs/claims.toml's [allow] list.", "", "[items]"]
    for paper in sorted(found):
        items = sorted(found[paper], key=key)
        lines.append(f'"{paper}" = [')
        lines += [f'    "{item}",' for item in items]
        lines.append("]")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        _write()
    elif sys.argv[1:] == ["--pending"]:
        print(_pending())
    elif sys.argv[1:2] == ["--items"] and len(sys.argv) > 2:
        ITEMS.write_text(_items(sys.argv[2:]))
        print(f"wrote {ITEMS.relative_to(ROOT)}")
    else:
        print("usage: python tests/test_claims.py --write     (regenerates docs/claims.md from docs/claims.toml)\n"
              "       python tests/test_claims.py --pending   (lists the entries marked pending)\n"
              "       python tests/test_claims.py --items PAPERS_DIR [...]   (regenerates tests/claims_items.toml)",
              file=sys.stderr)
        sys.exit(2)
