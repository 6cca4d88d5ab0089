"""The import rule, read from the source: studies are leaves, layers import downwards, no circles.

Every ``import`` and ``from ... import`` of every module under ``src/rieszflow`` is read from its
AST, the ones inside function bodies included (a lazy import is still a dependency). The layers,
lowest first: ``engine`` (the simulation core), ``config`` (configurations), ``solvers`` (the
mean-field side and its particle systems), ``theory`` (each paper's mathematics), ``learning``
(the bundled model's training), ``studies``. A module may import its own layer and the layers
below, never above. Inside ``studies``, a study package (``studies/<name>/``) imports the layers
below and the shared infrastructure modules (``studies/base.py``, ``cli.py``, ``sweep/``,
``sweep_cli.py``, ``reporting.py``, ``bench_cli.py``), never another study package; the
infrastructure imports no study package (the CLI finds the studies by name, at run time). And no
module is part of an import circle. ``docs/architecture.md`` shows this graph.
"""
import ast
import pathlib

import pytest

SRC = pathlib.Path(__file__).resolve().parent.parent / "src"
LAYERS = {"engine": 0, "config": 1, "solvers": 2, "theory": 3, "learning": 4, "studies": 5}
TOP = {"__init__", "__main__"}      # the package's front door: it may name every layer
#: The studies' shared infrastructure that is a package rather than a module.
INFRASTRUCTURE = {"sweep"}


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports():
    """(importer, imported module, line) for every internal import of the package."""
    modules = {}
    for path in sorted((SRC / "rieszflow").rglob("*.py")):
        modules[_module_name(path)] = path
    edges = []
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                candidates = [target] + [f"{target}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                candidates = [a.name for a in node.names]
            else:
                continue
            for c in candidates:
                if c.startswith("rieszflow") and c in modules:
                    edges.append((name, c, node.lineno))
    return modules, edges


MODULES, EDGES = _imports()


def _layer(module: str):
    parts = module.split(".")
    if len(parts) < 2 or parts[1] in TOP:
        return None
    return LAYERS.get(parts[1])


def _study(module: str):
    """The study package of a module, or None (layers below, or the studies' infrastructure)."""
    parts = module.split(".")
    if (len(parts) >= 3 and parts[1] == "studies" and parts[2] not in INFRASTRUCTURE
            and (SRC / "rieszflow" / "studies" / parts[2]).is_dir()):
        return parts[2]
    return None


def test_every_module_is_in_a_layer():
    unknown = sorted({m.split(".")[1] for m in MODULES if "." in m and _layer(m) is None
                      and m.split(".")[1] not in TOP})
    assert unknown == [], f"modules outside the layers {sorted(LAYERS)}: {unknown}"


def test_layers_import_downwards():
    up = [f"{a}:{line} -> {b}" for a, b, line in EDGES
          if _layer(a) is not None and _layer(b) is not None and _layer(b) > _layer(a)]
    assert up == [], "imports from a lower layer to a higher one:\n" + "\n".join(up)


def test_lower_layers_do_not_reach_up_through_the_front_door():
    """``rieszflow/__init__.py`` names every layer (lazily): importing it from a module below the
    studies would reach up a layer unseen by the layer test."""
    up = [f"{a}:{line} -> {b}" for a, b, line in EDGES
          if b == "rieszflow" and _layer(a) is not None and _layer(a) < LAYERS["studies"]]
    assert up == [], "imports of the top-level package from a lower layer:\n" + "\n".join(up)


def test_studies_are_leaves():
    bad = [f"{a}:{line} -> {b}" for a, b, line in EDGES
           if _study(b) is not None and _study(a) != _study(b)]
    assert bad == [], "imports of a study package from outside it:\n" + "\n".join(bad)


def test_no_import_circles():
    graph = {m: set() for m in MODULES}
    for a, b, _ in EDGES:
        if a != b and not b.startswith(a + ".") and not (a == "rieszflow"):
            graph[a].add(b)
    # a package's __init__ re-exporting its submodules is not a circle with them
    for a in list(graph):
        graph[a] = {b for b in graph[a] if not (MODULES[b].name == "__init__.py" and a.startswith(b + "."))}
    index, low, stack, on, circles = {}, {}, [], set(), []

    def strong(v):      # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))

    for v in graph:
        if v not in index:
            strong(v)
    assert circles == [], "import circles:\n" + "\n".join(" <-> ".join(c) for c in circles)


@pytest.mark.parametrize("limit", [1000])
def test_no_module_over_the_limit(limit):
    long = {name: n for name, path in MODULES.items() if (n := len(path.read_text().splitlines())) > limit}
    assert long == {}, f"modules over {limit} lines: {long}"


def test_the_rule_catches_a_study_to_study_import():
    """The checks above can fail: a synthetic edge between two studies is reported."""
    a, b = "rieszflow.studies.ldp.study", "rieszflow.studies.mean_field.study"
    assert _study(a) == "ldp" and _study(b) == "mean_field" and _study("rieszflow.studies.sweep") is None
    assert _layer("rieszflow.engine.space") < _layer("rieszflow.solvers.gibbs") < _layer("rieszflow.studies.cli")


# --------------------------------------------------------------------------- the docs' picture

DOC = SRC.parent / "docs" / "architecture.md"
BEGIN, END = "<!-- imports:begin -->", "<!-- imports:end -->"


def _unit(module: str) -> str:
    """The unit of the import table: a layer, a study package, or a studies infrastructure module."""
    parts = module.split(".")
    if len(parts) < 2:
        return "rieszflow"
    if parts[1] != "studies":
        return parts[1] if parts[1] in LAYERS else "rieszflow"
    if len(parts) == 2:
        return "studies"
    return f"studies/{parts[2]}" if _study(module) else f"studies.{parts[2]}"


def import_table() -> str:
    """The Markdown table of docs/architecture.md: what each unit imports, read from the AST."""
    deps = {}
    for a, b, _ in EDGES:
        ua, ub = _unit(a), _unit(b)
        if ua != ub and ua != "rieszflow":
            deps.setdefault(ua, set()).add(ub)
    order = lambda u: (LAYERS.get(u.split("/")[0].split(".")[0], 9), "/" in u, u)
    units = sorted({_unit(m) for m in MODULES} - {"rieszflow", "studies"}, key=order)
    rows = ["| unit | imports (read from the source by tests/test_architecture.py) |", "| --- | --- |"]
    for u in units:
        rows.append(f"| `{u}` | {', '.join(f'`{d}`' for d in sorted(deps.get(u, ()), key=order)) or '(nothing of rieszflow)'} |")
    return "\n".join(rows)


def test_architecture_page_shows_the_imports():
    """docs/architecture.md's import table is the one the source has (regenerate:
    ``python tests/test_architecture.py --write``)."""
    text = DOC.read_text()
    assert BEGIN in text and END in text, f"{DOC} lacks the {BEGIN} ... {END} block"
    shown = text.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    assert shown == import_table(), "docs/architecture.md's import table is stale: run " \
                                    "python tests/test_architecture.py --write"


if __name__ == "__main__":
    import sys

    if "--write" in sys.argv:
        text = DOC.read_text()
        head, rest = text.split(BEGIN, 1)
        DOC.write_text(head + BEGIN + "\n" + import_table() + "\n" + END + rest.split(END, 1)[1])
    else:
        print(import_table())
