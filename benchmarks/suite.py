"""The benchmark suite: every measure of issue 14 against its peer, timed interleaved in one run.

Run from the repository root::

    python -m benchmarks --quick                      # smoke run, under 2 minutes
    python -m benchmarks --threads 1 --md docs/results/bench_suite.md \\
        --json docs/results/bench_suite.json --readme README.md
    python -m benchmarks --only riesz attention       # some modules
    python -m benchmarks --from-json docs/results/bench_suite.json --readme README.md
    rieszflow bench ...                               # the same, from a source checkout

Each registered module ``benchmarks/bench_<name>.py`` exposes ``suite_rows(k, quick)``, a list of
dicts, one per compared pair (project implementation against its peer), with the keys of
:data:`ROW_KEYS`: the minimum and the median of ``k`` interleaved rounds (A, B, A, B, ...;
:func:`_interleave.interleaved`) of each, their ratios project/peer (< 1: the project is faster),
the issue's target for the ratio, and the largest relative difference of the two results. A row
may instead carry ``"skipped": reason`` (a peer that is not importable). Modules are imported
lazily, so a module that is not there (yet) or whose peer is missing is skipped with its reason.

Thread counts (``--threads``) are pinned before NumPy, Numba or torch are imported, through
``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS``, ``MKL_NUM_THREADS``, the project's
``RIESZFLOW_THREADS`` and ``RIESZFLOW_BLAS_THREADS`` (its thread policy, engine/threads.py) and
``torch.set_num_threads`` (:func:`optional_peer`), and re-applied before each module
(:func:`apply_threads`; Numba's pool holds all cores, its count in use is ``--threads``): the
project and its peer run with the same number of threads. ``bench_threads`` alone sets its own
counts (it times 2 threads against 1).

The report is a markdown table and a JSON with provenance (date, commit, machine, threads, load
average before and after); ``--readme`` rewrites the README's section between
``<!-- perf:begin -->`` and ``<!-- perf:end -->`` from it (idempotent: the same JSON gives the
same README).
"""
from __future__ import annotations

import argparse
import importlib
import json
import math
import os
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# One module object whether imported as benchmarks.suite (python -m benchmarks) or as suite (the
# bench_*.py modules' "from suite import ...", with benchmarks/ on sys.path): one peer cache.
sys.modules.setdefault("benchmarks.suite" if __name__ == "suite" else "suite", sys.modules[__name__])

#: Registered modules, in report order: (module name in benchmarks/, what it measures).
MODULES = (
    ("bench_riesz", "Riesz energy + gradient: d = 3 vs PyKeOps-CPU and torch dense; d = 64 GEMM vs torch"),
    ("bench_attention", "linear attention forward + backward and a Transformer train step + Adam vs PyTorch"),
    ("bench_token_flow", "token-flow vector field, linear attention, N = 1e5, float64 and float32 vs torch"),
    ("bench_pde", "one implicit McKean-Vlasov sweep, assembled Scharfetter-Gummel vs a bare SciPy solve"),
    ("bench_alignment", "projected Langevin alignment step vs its GEMM + sincos floor"),
    ("bench_recording", "HDF5 recording overhead of a training step"),
    ("bench_threads", "2 threads vs 1 on a loaded machine, the main job's steps"),
    ("gpu", "the GPU measurements (CuPy; rows only where a CUDA device is present)"),
)

#: Keys every row of ``suite_rows`` carries (a skipped row: measure, project, peer, skipped).
ROW_KEYS = ("measure", "project", "peer", "project_min_s", "project_median_s", "peer_min_s",
            "peer_median_s", "ratio_min", "ratio_median", "target", "agreement", "threads", "notes")

BEGIN, END = "<!-- perf:begin -->", "<!-- perf:end -->"
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")


def pin_threads(threads: int) -> None:
    """Set the thread variables of BLAS, OpenMP and Numba (before NumPy/Numba are imported).

    Parameters
    ----------
    threads : int
        Threads per library, >= 1.
    """
    for var in THREAD_VARS:
        os.environ[var] = str(threads)
    # Numba's pool may be larger (bench_threads times 2 threads against 1 whatever --threads is);
    # the count in use is set to ``threads`` before each module (apply_threads).
    os.environ["NUMBA_NUM_THREADS"] = str(max(threads, os.cpu_count() or 1))
    # the project's thread policy (engine/threads.py) gets the same cap, BLAS included
    os.environ["RIESZFLOW_THREADS"] = os.environ["RIESZFLOW_BLAS_THREADS"] = str(threads)
    os.environ["RIESZFLOW_BENCH_THREADS"] = str(threads)


def apply_threads(threads: int) -> dict:
    """Set the thread counts in use to ``threads`` (before each module; a module may change them).

    The project's policy (:func:`rieszflow.engine.threads.configure_threads`: BLAS pools through
    threadpoolctl, the Numba cap), Numba's count in use and torch's, when these are imported.

    Parameters
    ----------
    threads : int

    Returns
    -------
    dict
        The project's :func:`~rieszflow.engine.threads.thread_settings` ({} if unavailable).
    """
    settings = {}
    try:
        from rieszflow.engine.threads import configure_threads

        settings = configure_threads(threads)
    except ImportError:            # an older checkout without the thread policy
        pass
    import numba

    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(threads)
    return settings


def suite_threads() -> int:
    """The suite's thread count (``--threads``; else ``OMP_NUM_THREADS``; else 1)."""
    for var in ("RIESZFLOW_BENCH_THREADS", "OMP_NUM_THREADS"):
        try:
            return max(1, int(os.environ[var]))
        except (KeyError, ValueError):
            continue
    return 1


_PEERS = {}


def optional_peer(name: str):
    """Import an optional peer library with the suite's thread count.

    Parameters
    ----------
    name : {"torch", "pykeops"}

    Returns
    -------
    (module or None, str or None)
        The module and None, or None and the reason it is not available (for the report).
    """
    if name not in _PEERS:
        try:
            if name == "torch":
                import torch

                torch.set_num_threads(suite_threads())
                mod = torch
            elif name == "pykeops":
                import pykeops

                pykeops.set_verbose(False)
                import numpy as np
                from pykeops.numpy import LazyTensor

                try:       # JIT-compiles with g++ into a writable cache; say so if it cannot
                    x = np.arange(6.0).reshape(3, 2)
                    # factorised as every KeOps formula here (tests/test_bench_peers.py)
                    (LazyTensor(x[:, None, :]) - LazyTensor(x[None, :, :])).sum(-1).auto_factorize().sum(axis=1)
                except Exception as e:  # noqa: BLE001 - any build or runtime failure is the reason
                    raise ImportError(f"its kernels do not compile or run here: {type(e).__name__}: "
                                      f"{str(e).strip().splitlines()[-1] if str(e).strip() else ''}") from e
                mod = pykeops
            else:
                raise ValueError(f"optional_peer: name={name!r} is not allowed; allowed: torch, pykeops")
            _PEERS[name] = (mod, None)
        except ImportError as e:
            _PEERS[name] = (None, f"{name} is not importable ({e}); install the optional extra "
                                  f"'bench' (see pyproject.toml)")
    return _PEERS[name]


def make_row(measure, project, peer, stats, *, project_key=None, peer_key=None, target=None,
             agreement=None, tolerance=None, notes="") -> dict:
    """One suite row from :func:`_interleave.interleaved` statistics of two implementations.

    Parameters
    ----------
    measure : str
        What was timed, with its sizes.
    project, peer : str
        Names of the project's implementation and of the peer.
    stats : dict
        Output of ``interleaved`` holding both.
    project_key, peer_key : str, optional
        Their keys in ``stats`` (default ``project`` and ``peer``).
    target : float or None
        The issue's goal for ``ratio`` (project time / peer time); None: no goal stated.
    agreement : float or None
        Largest relative difference of the two results (None: not comparable).
    tolerance : float or None
        The agreement the comparison should reach (checked by the tests).
    notes : str

    Returns
    -------
    dict
        The keys of :data:`ROW_KEYS` (and ``tolerance``).
    """
    a, b = stats[project_key or project], stats[peer_key or peer]
    return {"measure": measure, "project": project, "peer": peer,
            "project_min_s": a["min"], "project_median_s": a["median"],
            "peer_min_s": b["min"], "peer_median_s": b["median"],
            "ratio_min": a["min"] / b["min"], "ratio_median": a["median"] / b["median"],
            "target": target, "agreement": None if agreement is None else float(agreement),
            "tolerance": tolerance, "threads": suite_threads(), "notes": notes}


def skipped_row(measure, project, peer, reason) -> dict:
    """A row whose comparison could not run, with the reason (e.g. the peer is not importable)."""
    return {"measure": measure, "project": project, "peer": peer, "skipped": reason}


def rel_diff(a, b) -> float:
    """Largest |a - b| relative to the largest |b| over pairs of arrays or scalars (a list of pairs)."""
    import numpy as np

    out = 0.0
    for x, y in a if isinstance(a, list) else [(a, b)]:
        x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
        out = max(out, float(np.abs(x - y).max() / max(np.abs(y).max(), 1e-300)))
    return out


def check_row(row) -> list:
    """Problems of one row (missing keys, non-finite ratios); empty when it is well formed."""
    if "skipped" in row:
        return [f"missing {k}" for k in ("measure", "project", "peer") if k not in row]
    bad = [f"missing {k}" for k in ROW_KEYS if k not in row]
    for k in ("project_min_s", "project_median_s", "peer_min_s", "peer_median_s", "ratio_min", "ratio_median"):
        if k in row and not (isinstance(row[k], (int, float)) and math.isfinite(row[k]) and row[k] > 0):
            bad.append(f"{k}={row[k]!r} is not a finite positive number")
    return bad


def _short(name: str) -> str:
    return name[len("bench_"):] if name.startswith("bench_") else name


def select(only):
    """Registered module names matching ``--only`` (``bench_riesz`` or ``riesz``).

    Raises
    ------
    ValueError
        Naming an unknown module and listing the registered ones.
    """
    names = [m for m, _ in MODULES]
    if not only:
        return names
    out = []
    for o in only:
        full = o if o.startswith("bench_") else f"bench_{o}"
        if full not in names:
            raise ValueError(f"--only {o}: no such module; registered: {', '.join(names)}")
        out.append(full)
    return [n for n in names if n in out]


def run_module(name, k, quick):
    """Import one module and collect its rows.

    Returns
    -------
    dict
        ``module``, ``status`` ("ok", "skipped" or "failed"), ``reason``, ``rows``, ``wall_s``.
    """
    for p in (str(HERE), str(ROOT)):           # "from _interleave import ..." and "import rieszflow"
        if p not in sys.path:
            sys.path.insert(0, p)
    t0 = time.perf_counter()
    res = {"module": name, "status": "ok", "reason": None, "rows": [], "wall_s": 0.0}
    if not (HERE / f"{name}.py").is_file():
        res.update(status="skipped", reason=f"benchmarks/{name}.py is not present in this checkout")
        return res
    apply_threads(suite_threads())
    try:
        mod = importlib.import_module(f"benchmarks.{name}")
    except ImportError as e:
        res.update(status="skipped", reason=f"import failed: {e}")
        return res
    if not callable(getattr(mod, "suite_rows", None)):
        res.update(status="skipped", reason=f"benchmarks/{name}.py has no suite_rows(k, quick)")
        return res
    try:
        rows = list(mod.suite_rows(k=k, quick=quick))
    except ImportError as e:
        res.update(status="skipped", reason=f"a dependency is not importable: {e}")
        return res
    except Exception as e:  # noqa: BLE001 - reported in the table, the other modules still run
        res.update(status="failed", reason=f"{type(e).__name__}: {e}", traceback=traceback.format_exc())
        return res
    problems = [f"row {i}: {p}" for i, r in enumerate(rows) for p in check_row(r)]
    if problems:
        res.update(status="failed", reason="malformed rows: " + "; ".join(problems))
    elif not rows:
        res.update(status="skipped", reason="suite_rows returned no rows (a device or peer it needs "
                                            "is absent here)")
    res["rows"] = rows
    res["wall_s"] = time.perf_counter() - t0
    return res


def _fmt(x, spec):
    return "-" if x is None else format(x, spec)


def met(row):
    """``yes`` (median ratio within the target), ``min only``, ``no``, or ``-`` (no target)."""
    t = row.get("target")
    if t is None or "skipped" in row:
        return "-"
    if row["ratio_median"] <= t:
        return "yes"
    return "min only" if row["ratio_min"] <= t else "no"


def headline(row) -> bool:
    """A row for the README's short table: a target of the issue, or an outside peer (torch, PyKeOps)."""
    return "skipped" in row or row.get("target") is not None or any(
        p in str(row.get("peer", "")).lower() for p in ("torch", "keops"))


#: Rows of a stored run whose peer has since been replaced because it was weaker than its experts
#: write it (a review of issue 24): (test on the row, why, what regenerates the ratio). A stored
#: row that matches is shown struck through with the reason (:func:`superseded`), never as current.
SUPERSEDED = (
    (lambda r: "keops" in str(r.get("peer", "")).lower() and ".auto_factorize()" not in str(r.get("notes", "")),
     "peer superseded: unfactorised KeOps formula (the global flag keopscore.auto_factorize, rsqrt evaluated "
     "three times per pair), so the ratio overstated the project's lead; the peer now calls .auto_factorize() "
     "on the expression (bench_riesz.KEOPS_FORMULA)",
     "python -m benchmarks --threads 1 --k 7"),
    (lambda r: str(r.get("measure", "")).startswith(("linear attention fwd+bwd", "Transformer train step"))
     and "MALLOC_ARENA_MAX=" not in str(r.get("notes", "")),
     "peer superseded: eager torch only, glibc's default allocator (torch's temporaries mapped and unmapped "
     "per call), Adam not fused; the peers are now eager torch and torch.compile with fused Adam, in one "
     "process under one allocator setting (bench_attention.ALLOC_ENV)",
     "python benchmarks/bench_attention.py --large --k 3"),
)


def superseded(row):
    """Why a stored row's peer is no longer the suite's peer, with the command that reruns it; None if current."""
    if "skipped" in row:
        return None
    for test, why, command in SUPERSEDED:
        if test(row):
            return f"{why}; `{command}` (run by `make results`) regenerates the ratio"
    return None


def table(results, compact=False) -> str:
    """The markdown table of every row of every module (skipped ones with their reason).

    ``compact``: only :func:`headline` rows, and notes only for skipped and superseded ones (the
    README). A row whose peer has been replaced since it was measured (:func:`superseded`) shows
    its ratios struck through and the reason in the notes.
    """
    lines = ["| measure | project | peer | ratio min | ratio median | target | met? | agreement | notes |",
             "|---|---|---|---|---|---|---|---|---|"]
    for res in results:
        if res["status"] != "ok" and not res["rows"]:
            lines.append(f"| {_short(res['module'])}: all | - | - | - | - | - | - | - | "
                         f"{res['status']}: {res['reason']} |")
            continue
        for r in res["rows"]:
            if "skipped" in r:
                lines.append(f"| {r['measure']} | {r['project']} | {r['peer']} | - | - | - | - | - | "
                             f"skipped: {r['skipped']} |")
                continue
            if compact and not headline(r):
                continue
            target = "-" if r["target"] is None else f"<= {r['target']:g}"
            old = superseded(r)
            if old:
                lines.append(f"| {r['measure']} | {r['project']} | {r['peer']} | ~~{r['ratio_min']:.2f}~~ | "
                             f"~~{r['ratio_median']:.2f}~~ | {target} | superseded | "
                             f"{_fmt(r['agreement'], '.1e')} | {old} |")
                continue
            lines.append(f"| {r['measure']} | {r['project']} | {r['peer']} | {r['ratio_min']:.2f} | "
                         f"{r['ratio_median']:.2f} | {target} | {met(r)} | {_fmt(r['agreement'], '.1e')} | "
                         f"{'' if compact else r.get('notes', '')} |")
        if res["status"] == "failed":
            lines.append(f"| {_short(res['module'])} | - | - | - | - | - | - | - | failed: {res['reason']} |")
    return "\n".join(lines) + "\n"


def provenance_line(payload) -> str:
    """One sentence: command, commit, date, machine, threads, load average and wall time of a run."""
    p = payload["provenance"]
    la = p.get("load_average")
    la_end = payload.get("load_average_end")
    load = "unknown" if la is None else ", ".join(f"{v:.2f}" for v in la)
    load_end = "" if la_end is None else f" (at the end: {', '.join(f'{v:.2f}' for v in la_end)})"
    return (f"`{payload['command']}`, git {p['commit']}, measured {p['measured']}, {p['machine']} with "
            f"{p['cores']} cores, {p['threads']} thread(s) for the project and its peer, load average "
            f"(1, 5, 15 min) {load}{load_end}, wall time {payload['wall_s']:.0f} s")


def page(payload) -> str:
    """The report page (``--md``)."""
    skipped = [r for r in payload["results"] if r["status"] != "ok"]
    out = ["# Results: the benchmark suite (`python -m benchmarks`)\n",
           f"Regenerated by `make results`, which runs {provenance_line(payload)}. The machine was "
           "shared with other work while this ran: absolute times are noisy; each project "
           "implementation and its peer were timed interleaved (A, B, A, B, ...) in one process on "
           "the same inputs, after an untimed warm-up, so compare the ratios.\n",
           "Columns: `ratio` = project time / peer time (< 1: the project is faster), of the minima "
           f"and of the medians of k = {payload['k']} rounds; `target`: the goal of issue 14 for "
           "that ratio (`-`: none stated, shown for reference); `met?`: `yes` if the median ratio "
           "is within the target, `min only` if only the minimum is; `agreement`: the largest "
           "difference of the two results relative to their largest entry.\n",
           table(payload["results"])]
    if skipped:
        out.append("Skipped or failed modules:\n")
        out += [f"- `{r['module']}`: {r['status']}: {r['reason']}" for r in skipped]
        out.append("")
    out.append("Wall time per module: " + ", ".join(f"{r['module']} {r['wall_s']:.0f} s"
                                                    for r in payload["results"]) + ".\n")
    return "\n".join(out)


def readme_section(payload, report="docs/results/bench_suite.md") -> str:
    """The README's performance section (between the markers, markers included)."""
    return (f"{BEGIN}\n"
            "Generated by `python -m benchmarks --readme README.md` from the JSON of the run below; "
            "do not edit by hand. Ratio = project time / peer time (< 1: the project is faster), "
            "timed interleaved in one process, min and median of k rounds; target = the goal of "
            "issue 14, met if the median ratio is within it. The rows with a target or an outside "
            "peer (torch, PyKeOps); every row, with notes, is in the report. A ratio struck through "
            "was measured against a peer since replaced (the row says why and which command reruns "
            "it).\n\n"
            + table(payload["results"], compact=True)
            + f"\nMeasured by {provenance_line(payload)}; details in [{report}]({report}).\n"
            f"{END}")


def update_readme(path, payload) -> bool:
    """Rewrite the part of ``path`` between the perf markers; True if the file changed.

    Raises
    ------
    ValueError
        If the file does not hold exactly one ``<!-- perf:begin -->`` followed by one
        ``<!-- perf:end -->``.
    """
    path = Path(path)
    text = path.read_text()
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise ValueError(f"{path}: expected one '{BEGIN}' line followed by one '{END}' line; add them "
                         f"where the performance section goes")
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    new = head + readme_section(payload) + tail
    if new == text:
        return False
    from rieszflow.engine.storage import atomic_output      # lazily: the suite starts on the stdlib

    with atomic_output(path) as tmp:
        tmp.write_text(new)
    return True


def _write(path, text):
    from rieszflow.engine.storage import atomic_output      # lazily: the suite starts on the stdlib

    with atomic_output(Path(path)) as tmp:
        tmp.write_text(text)


def build_parser():
    """The suite's argument parser (options from :func:`rieszflow.studies.bench_cli.add_suite_arguments`)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from rieszflow.studies.bench_cli import add_suite_arguments   # standard library only

    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0],
                                     allow_abbrev=False)
    return add_suite_arguments(parser)


def main(argv=None) -> int:
    """Run the suite; exit code 0, 1 if a module failed, 2 on bad options."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.list:
        for name, what in MODULES:
            state = "present" if (HERE / f"{name}.py").is_file() else "not present"
            print(f"{name:18s} {state:12s} {what}")
        return 0
    try:
        names = select(args.only)
    except ValueError as e:
        parser.error(str(e))
    if args.from_json:
        payload = json.loads(Path(args.from_json).read_text())
    else:
        pin_threads(args.threads)                 # before NumPy, Numba or torch are imported
        if str(HERE) not in sys.path:
            sys.path.insert(0, str(HERE))
        from _interleave import provenance
        prov = provenance(args.threads)
        cmd = ["python -m benchmarks", f"--threads {args.threads}", f"--k {args.k}"]
        cmd += ["--quick"] if args.quick else []
        cmd += [f"--only {' '.join(names)}"] if args.only else []
        t0 = time.perf_counter()
        results = []
        for name in names:
            print(f"[bench] {name} ...", file=sys.stderr, flush=True)
            res = run_module(name, args.k, args.quick)
            print(f"[bench] {name}: {res['status']}" + (f" ({res['reason']})" if res["reason"] else "")
                  + f", {res['wall_s']:.0f} s", file=sys.stderr, flush=True)
            if res.get("traceback"):
                print(res["traceback"], file=sys.stderr)
            results.append(res)
        payload = {"command": " ".join(cmd), "k": args.k, "quick": args.quick, "results": results,
                   "provenance": prov, "wall_s": time.perf_counter() - t0,
                   "thread_settings": apply_threads(args.threads),
                   "load_average_end": list(os.getloadavg()) if hasattr(os, "getloadavg") else None}
    print(table(payload["results"]))
    if args.md:
        _write(args.md, page(payload))
    if args.json and not args.from_json:
        _write(args.json, json.dumps(payload, indent=1, default=float) + "\n")
    if args.readme:
        changed = update_readme(args.readme, payload)
        print(f"{args.readme}: performance section {'rewritten' if changed else 'unchanged'}", file=sys.stderr)
    return 1 if any(r["status"] == "failed" for r in payload["results"]) else 0
