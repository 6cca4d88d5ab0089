"""Re-analyse a power page of ``rieszflow nlp`` from its own per-seed rows, when its task files are gone.

Every statistic of the power page needs only, per seed, both arms' test accuracies and their two
discordant counts on the shared test split; the per-seed tables of a page hold exactly these
(an accuracy on 1,066 sentences is printed to 4 decimals, finer than 1/1066, so the counts are
exact). This reads a stored page (``docs/results/source/*.md``, the page as ``rieszflow report``
wrote it), recomputes every pair with :func:`rieszflow.studies.nlp.power.pair_from_counts` and the
page renderer of today's code (seed-level t interval, paired t, Wilcoxon and exact sign-flip tests,
the Mantel-Haenszel test for matched pairs with its odds ratio, the paper's value with its own
error, power, Holm across the maps), keeps each section's record of the code that ran, and writes
the new page. The Cochran-Mantel-Haenszel lines of the stored page (a test for independent samples,
wrong for two arms on the same sentences) are not carried over.

Usage::

    python scripts/reanalyse_power_page.py docs/results/source/nlp_power_13_commits.md \\
        --out docs/results/nlp_power_13_commits.md --title "..."
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np

ROW = re.compile(r"^\| (\d+) \| ([01]\.\d{4}) \| ([01]\.\d{4}) \| [+-]\d\.\d{4} \| (\d+) / (\d+) \| [^|]+ \|(.*)$")
TITLE = re.compile(r"^#### (\S+) against (\S+)$")
PAPER = re.compile(r"^Paper 000, Table 2 \(Rotten Tomatoes\): ([+-]\d\.\d+)")
PLANNED = re.compile(r"^\**(\d+) of (\d+) seeds complete")
NSENT = re.compile(r"x (\d+) test sentences")
PM = re.compile(r"(-?\d[\d.e+-]*) \+- (-?\d[\d.e+-]*)")


def _movement(rest: str) -> dict:
    cells = [c.strip() for c in rest.split("|") if c.strip()]
    out = {}
    if cells and (m := PM.fullmatch(cells[0])):
        out["mmd2"], out["mmd2_se"] = float(m.group(1)), float(m.group(2))
    if len(cells) >= 3 and (m := PM.fullmatch(cells[1])):
        out["kgd2"], out["kgd2_se"] = float(m.group(1)), float(m.group(2))
        ratios = [c.strip() for c in cells[2].split(",")]
        if len(ratios) == 2:
            out["kernel_ratio"], out["token_ratio"] = (float(x) if x not in ("n/a", "nan") else np.nan for x in ratios)
    return out


def parse_sections(text: str) -> list:
    """The page split at its ``#### <kernel> against <vanilla>`` sections, each with its rows."""
    lines = text.splitlines()
    out, cur = [], None
    for line in lines:
        m = TITLE.match(line)
        if m or line.startswith("#### ") or line.startswith("### "):
            cur = {"title": line, "kernel": m.group(1) if m else None, "vanilla": m.group(2) if m else None,
                   "lines": [line], "rows": [], "paper": None, "planned": None, "n": None, "code": None}
            out.append(cur)
            continue
        if cur is None:
            out.append({"title": None, "kernel": None, "lines": [line], "rows": []})
            cur = out[-1]
            continue
        cur["lines"].append(line)
        if cur["kernel"] is None:
            continue
        if (m := ROW.match(line)):
            cur["rows"].append((int(m.group(1)), float(m.group(2)), float(m.group(3)), int(m.group(4)),
                                int(m.group(5)), _movement(m.group(6))))
        elif (m := PAPER.match(line)):
            cur["paper"] = float(m.group(1))
        elif (m := PLANNED.match(line)):
            cur["planned"] = int(m.group(2))
        elif line.startswith("- code:"):
            cur["code"] = line
        if (m := NSENT.search(line)):
            cur["n"] = int(m.group(1))
    return out


def reanalyse(text: str) -> str:
    """The page with every pair section recomputed and rendered by today's code."""
    from rieszflow.studies.nlp.power import MOVEMENT, _holm_lines, _pair_section, pair_from_counts
    from rieszflow.studies.nlp.study import PHASE_A_CELLS

    sections = parse_sections(text)
    out, summaries, results = [], [], {}
    for sec in sections:
        if sec.get("kernel") is None or not sec["rows"]:
            if sec.get("title", "") and sec["title"].startswith("#### Phase A grid"):
                out.append(("grid", sec))
            else:
                out.append(("keep", sec))
            continue
        rows = sec["rows"]
        n = sec["n"] or 1066
        mov = {k: [r[5].get(k, np.nan) for r in rows] for k in MOVEMENT}
        # 4 printed decimals are finer than 1/n: the accuracies are exact counts over n sentences
        exact = [(x[0], round(x[1] * n) / n, round(x[2] * n) / n, *x[3:]) for x in rows]
        rows = exact
        r = pair_from_counts([x[0] for x in rows], [x[1] for x in rows], [x[2] for x in rows],
                             [x[3] for x in rows], [x[4] for x in rows], n, mov)
        parts = sec["kernel"].split("-")
        fm = parts[1]
        cell = parts[2] if len(parts) > 2 and parts[2] in PHASE_A_CELLS else ""
        lines, summ = _pair_section(None, sec["vanilla"], sec["kernel"], fm, cell, sec["planned"] or len(rows),
                                    None if cell else sec["paper"], analysis=r)
        if sec["code"]:
            table_end = max(i for i, line in enumerate(lines) if line.startswith("|"))
            lines.insert(table_end + 2, sec["code"] + " (as the stored page recorded it)")
        summaries.append(summ)
        results[(fm, cell or "paper")] = summ
        out.append(("pair", lines))
    page = []
    holm_done = False
    for kind, item in out:
        if kind == "pair":
            page += item
            continue
        if kind == "grid" and not holm_done:
            page += _holm_lines(summaries)
            holm_done = True
        if kind == "grid":
            for line in item["lines"]:
                if line.startswith("| map | cell |"):
                    line = line.replace("| CMH p |", "| matched-pairs MH p |")
                elif line.startswith("| ") and not line.startswith("|---"):
                    cells = line.split(" | ")
                    key = (cells[0][2:], cells[1])
                    if key in results and len(cells) > 6:
                        p = results[key].get("matched_p", float("nan"))
                        cells[6] = f"{p:.3g}"
                        line = " | ".join(cells)
                page.append(line)
            continue
        page += [line for line in item["lines"] if "Cochran-Mantel-Haenszel" not in line]
    if not holm_done:
        page += _holm_lines(summaries)
    return "\n".join(page) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("source", help="the stored page (as rieszflow report wrote it)")
    ap.add_argument("--out", required=True, help="the re-analysed page to write")
    ap.add_argument("--title", required=True, help="the page's title")
    ap.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    a = ap.parse_args(argv)
    src, out = Path(a.source), Path(a.out)
    if not src.is_file():
        print(f"reanalyse_power_page: error: source {src} is not a file", file=sys.stderr)
        return 2
    if out.exists() and not a.overwrite:
        print(f"reanalyse_power_page: error: {out} exists; pass --overwrite to replace it", file=sys.stderr)
        return 2
    text = src.read_text()
    body = text.split("\n", 3)[3] if text.startswith("# Results:") else text   # drop title + generated line
    cmd = f"python scripts/reanalyse_power_page.py {src} --out {out} --title {a.title!r} --overwrite"
    head = [f"# Results: {a.title}", "",
            f"Generated by `{cmd}` from the per-seed rows of the stored page `{src}` (what `rieszflow report` "
            f"wrote from the task files, which are not in this repository); every statistic below is recomputed "
            f"by today's analysis code from those rows; do not edit by hand. Regenerated by `make results` (this "
            f"command).", ""]
    out.write_text("\n".join(head) + reanalyse(body))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
