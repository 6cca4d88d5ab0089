"""``rieszflow report``: a Markdown page of results, generated from run files, never typed by hand.

Every measured number in the README and in ``docs/`` comes from a page under ``docs/results/``
that this module writes from the HDF5 files of stated runs: each page names the files, the
command line that wrote each one (root attribute ``command``), its git commit, date, platform and
wall time, then the tables the study itself prints. ``make results`` reruns the commands and
regenerates the pages; ``tests/test_docs_numbers.py`` recomputes the deterministic tables of the
cheap studies and compares them with the committed pages.

A study offers a page by registering a reporter (file kind -> function ``ds -> str``) in
:mod:`rieszflow.studies.reporting`; this module imports no study.
"""
from __future__ import annotations

import json
from pathlib import Path

from rieszflow.engine.storage import atomic_output
from rieszflow.studies.reporting import reporter, sweep_reporter
from rieszflow.engine.storage import _command, open_run
from rieszflow.studies.runs.inspect import compare_runs, format_compare

__all__ = ["STORED_REPORTS", "report_markdown", "sweep_report", "write_report", "notes_section"]


def sweep_report(ds) -> str:
    """The tables of a sweep file: its progress line, then the tables its study registered.

    Parameters
    ----------
    ds : xarray.Dataset
        An opened sweep file (root attribute ``kind == "sweep"``).

    Returns
    -------
    str
        ``"sweep NAME: k of n tasks complete; configuration {...}"``, a blank line, and the tables
        of the reporter registered for the sweep's task function
        (:func:`rieszflow.studies.reporting.register_sweep_reporter`), else the means over trials.
    """
    spec = json.loads(ds.attrs["config"])
    head = (f"sweep {spec['name']}: {int(ds.attrs['n_complete'])} of {int(ds.attrs['n_tasks'])} tasks "
            f"complete; configuration {json.dumps(spec['config'], sort_keys=True)}")
    tables = sweep_reporter(spec["function"])
    if tables is not None:
        return head + "\n\n" + tables(ds)
    return head + "\n\n" + str(ds.mean("trial"))


def _describe(path: Path, ds) -> list[str]:
    a = ds.attrs
    wall = a.get("wall_seconds")
    facts = [f"kind `{a.get('kind')}`, status `{a.get('status')}`",
             f"git commit `{a.get('git_commit', 'unknown')}`",
             f"created {a.get('created', '?')}",
             f"platform `{a.get('platform', '?')}`"]
    if wall is not None:
        facts.append(f"wall time {float(wall):.1f} s (writing sessions of the file)")
    lines = [f"### `{path.as_posix()}`", ""]
    lines += [f"- written by: `{a.get('command', '(not recorded)')}`",
              f"- {'; '.join(facts)}"]
    if a.get("status") != "complete":
        lines.append(f"- **this run did not finish** (status `{a.get('status')}`): the tables below "
                     f"cover what it recorded before it stopped")
    return lines + [""]


def _recorded_so_far(ds) -> str:
    """What an unfinished file recorded: each growing dimension's length, and for each 1-D
    variable along one, its first and last values and the mean of its last (up to) 10 records."""
    import numpy as np

    lines = ["recorded so far: " + ", ".join(f"{d}={n}" for d, n in ds.sizes.items())]
    for name in sorted(ds.data_vars):
        v = ds[name]
        if v.ndim != 1 or v.dtype.kind not in "fiu" or v.size == 0:
            continue
        x = np.asarray(v.values, dtype=np.float64)
        units = v.attrs.get("units", "")
        lines.append(f"  {name}[{v.dims[0]}] ({units}): first {x[0]:.6g}, last {x[-1]:.6g}, mean of "
                     f"the last {min(10, x.size)} {np.nanmean(x[-10:]):.6g}")
    return "\n".join(lines)


def _tables(path: Path, table, ds) -> str:
    """The study's tables of a file; for an unfinished file whose study needs a finished one,
    what it recorded so far (:func:`_recorded_so_far`), after the reason."""
    try:
        return table(ds).rstrip()
    except (ValueError, KeyError) as e:
        if ds.attrs.get("status") == "complete":
            raise ValueError(f"{path}: {e}") from None
        return (f"(the study's tables need a finished run: {e})\n" + _recorded_so_far(ds)).rstrip()


#: The report a sweep study writes into its output directory (``rieszflow infinite-width``,
#: ``kgd``, ``luna``), in the order looked for.
STORED_REPORTS = ("report.md", "report.txt")


def _directory_report(path: Path) -> list[str]:
    """The section of a sweep study's output directory: its stored report and the provenance of
    the merged sweep files under it."""
    found = [path / n for n in STORED_REPORTS if (path / n).is_file()]
    if len(found) > 1:
        raise ValueError(f"{path}: holds both {' and '.join(f.name for f in found)}; one study writes "
                         f"one of them, so the directory mixes two studies' output: remove the stale one")
    stored = found[0] if found else None
    if stored is None:
        raise ValueError(f"{path}: a directory holds no report; expected one of "
                         f"{', '.join(STORED_REPORTS)} (written by rieszflow infinite-width, kgd "
                         f"and luna into their --out directory)")
    merged = sorted(q for q in path.glob("*/*.h5") if q.stem == q.parent.name)   # <sweep>/<sweep>.h5
    lines = [f"### `{path.as_posix()}`", "",
             f"- stored report: `{stored.name}`; merged sweep files: {len(merged)}"]
    for q in merged:
        ds = open_run(q)
        a = dict(ds.attrs)
        ds.close()
        lines.append(f"- `{q.relative_to(path).as_posix()}`: written by `{a.get('command', '(not recorded)')}`; "
                     f"git commit `{a.get('git_commit', 'unknown')}`; {int(a.get('n_complete', 0))} of "
                     f"{int(a.get('n_tasks', 0))} tasks complete; wall time "
                     f"{float(a.get('wall_seconds', float('nan'))):.1f} s")
    text = stored.read_text().rstrip()
    body = [text] if stored.suffix == ".md" else ["```text", text, "```"]
    return lines + [""] + body + [""]


def report_markdown(paths, *, title: str | None = None) -> str:
    """A Markdown page with the tables of every file in ``paths`` and where they came from.

    Parameters
    ----------
    paths : sequence of str or os.PathLike
        rieszflow files of kinds with a registered reporter
        (:func:`rieszflow.studies.reporting.reporter_kinds`); two or more main-job files also get
        ``rieszflow compare``'s table (metrics side by side, McNemar test), whose columns are the
        files' labels (:func:`rieszflow.studies.runs.inspect.run_labels`); each file's heading is
        its path as given. An unfinished file
        (status other than ``complete``) is reported as such: its study's tables where they can
        be made, else what it recorded so far. A directory is the
        output of a sweep study that stores its report there (:data:`STORED_REPORTS`): its section
        is that report, after the provenance of the merged sweep files under it.
    title : str, optional
        Page title (default: the kinds of the files).

    Returns
    -------
    str

    Raises
    ------
    ValueError
        If ``paths`` is empty, or a file's kind has no reporter (the message lists the kinds).
    engine.storage.RunFileError
        If a file is not a readable rieszflow file.
    """
    import shlex

    paths = [Path(p) for p in paths]
    if not paths:
        raise ValueError("report needs at least one run file")
    dirs = {p: _directory_report(p) for p in paths if p.is_dir()}
    files = [p for p in paths if p not in dirs]
    dss = {p: open_run(p) for p in files}
    tables = {}
    for p, ds in dss.items():
        try:
            tables[p] = reporter(str(ds.attrs.get("kind")))
        except ValueError as e:
            raise ValueError(f"{p}: {e}") from None
    kinds = list(dict.fromkeys([str(ds.attrs["kind"]) for ds in dss.values()] + (["study directory"] if dirs else [])))
    lines = [f"# Results: {title or ', '.join(kinds)}", "",
             f"Generated by `{_command()}` from the files below; do not edit by hand "
             f"(`make results` reruns the commands and regenerates every page of `docs/results/`).",
             ""]
    for p in paths:
        if p in dirs:
            lines += dirs[p]
            continue
        lines += _describe(p, dss[p])
        lines += ["```text", _tables(p, tables[p], dss[p]), "```", ""]
    dss = list(dss.values())
    paths = files
    mains = [p for p, ds in zip(paths, dss) if ds.attrs.get("kind") == "main_job"]
    mains = [p for p in mains if "test_metrics" in dss[paths.index(p)]]     # finished ones
    if len(mains) >= 2:
        lines += [f"### `rieszflow compare {shlex.join(p.as_posix() for p in mains)}`", "",
                  "```text", format_compare(compare_runs(mains)), "```", ""]
    return "\n".join(lines)


def notes_section(path) -> list:
    """The hand-written notes of a page, as the lines :func:`write_report` appends.

    Parameters
    ----------
    path : str or os.PathLike
        A Markdown file kept beside the generated pages (e.g. ``docs/results/notes/<page>.md``):
        what a person concluded from the tables, which ``make results`` must not lose.

    Returns
    -------
    list of str
        A ``## Notes`` heading that says where the notes come from, then the file's lines.

    Raises
    ------
    FileNotFoundError
        If ``path`` is not a file.
    ValueError
        If it is empty.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"--notes {str(path)!r} is not a file (the hand-written notes to append)")
    text = path.read_text().strip()
    if not text:
        raise ValueError(f"--notes {str(path)!r} is empty")
    return ["## Notes", "", f"Written by hand in `{path.as_posix()}` and appended by `rieszflow report --notes`: "
            f"the tables above are regenerated from the files, these notes are not (they say which "
            f"numbers they read, and when).", "", text, ""]


def write_report(paths, out, *, overwrite: bool = False, title: str | None = None, notes=None) -> Path:
    """Write :func:`report_markdown` to ``out`` atomically (temporary name, then rename).

    Parameters
    ----------
    paths : sequence of str or os.PathLike
        The run files.
    out : str or os.PathLike
        The Markdown file (``.md``).
    overwrite : bool, default False
        Replace an existing page.
    title : str, optional
        Page title.
    notes : str or os.PathLike, optional
        Hand-written notes appended after the tables (:func:`notes_section`).

    Returns
    -------
    pathlib.Path

    Raises
    ------
    ValueError
        If ``out`` does not end in ``.md``, or as :func:`report_markdown`.
    FileExistsError
        If ``out`` exists and ``overwrite`` is False.
    FileNotFoundError
        If the directory of ``out`` does not exist, or ``notes`` is not a file.
    """
    out = Path(out)
    if out.suffix.lower() != ".md":
        raise ValueError(f"--out {str(out)!r}: a report is a Markdown file; use a name ending in .md")
    if out.exists() and not overwrite:
        raise FileExistsError(f"{out} already exists; pass --overwrite to regenerate it")
    if not out.parent.is_dir():
        raise FileNotFoundError(f"the directory {out.parent} of {out} does not exist")
    text = report_markdown(paths, title=title)
    if notes is not None:
        text = text.rstrip("\n") + "\n\n" + "\n".join(notes_section(notes))
    with atomic_output(out) as tmp:
        tmp.write_text(text)
    return out
