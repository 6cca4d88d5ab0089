"""numpydoc validation of the public API (every name in a public module's ``__all__``, and the public
methods of public classes).

Enforced checks: GL08 (every public object has a docstring), GL02 (closing quotes on their own
line), PR10 (well-formed parameter entries: text that is not a parameter belongs in Notes), PR01
(every parameter documented), PR04 (every parameter typed), RT01 (a Returns section where the
function returns), and PR02 outside the classes whose options arrive through ``**kwargs`` (feature
maps, where numpydoc cannot see the documented options).
"""
import importlib
import inspect
import pkgutil

import pytest

numpydoc_validate = pytest.importorskip("numpydoc.validate")

import rieszflow  # noqa: E402

CHECKS = {"GL08", "GL02", "PR10", "PR02", "PR01", "PR04", "RT01"}
KWARGS_OPTIONS = ("rieszflow.engine.features.",)      # documented **options (numpydoc cannot see them)


def _public_objects():
    for m in pkgutil.walk_packages(rieszflow.__path__, "rieszflow."):
        if any(part.startswith("_") for part in m.name.split(".")[1:]):
            continue
        mod = importlib.import_module(m.name)
        for name in getattr(mod, "__all__", ()):
            obj = getattr(mod, name)
            if getattr(obj, "__module__", None) != mod.__name__:
                continue
            if not (inspect.isfunction(obj) or inspect.isclass(obj)):
                continue
            yield f"{m.name}.{name}", obj
            if inspect.isclass(obj):
                for attr, val in vars(obj).items():
                    if inspect.isfunction(val) and (not attr.startswith("_") or attr == "__call__"):
                        yield f"{m.name}.{name}.{attr}", val


def test_public_api_passes_numpydoc_validation():
    failures = []
    for qual, _ in _public_objects():
        try:
            errors = numpydoc_validate.validate(qual)["errors"]
        except Exception as e:          # numpydoc cannot read the object's source: name it
            failures.append(f"{qual}: numpydoc failed ({type(e).__name__}: {e})")
            continue
        for code, msg in errors:
            if code in CHECKS and not (code == "PR02" and qual.startswith(KWARGS_OPTIONS)):
                failures.append(f"{qual}: {code} {msg}")
    assert not failures, "\n".join(failures)


def _resolves(target: str) -> bool:
    import builtins

    if hasattr(builtins, target):
        return True
    parts = target.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for p in parts[cut:]:
            fields = getattr(obj, "__dataclass_fields__", None) or dict.fromkeys(getattr(obj, "_fields", ()))
            if p in fields:
                return True
            if not hasattr(obj, p):
                return False
            obj = getattr(obj, p)
        return True
    return False


def test_cross_references_name_objects_that_exist():
    """Every ``:mod:``/``:func:``/``:class:``/... role in the package's source names an object that
    exists: by its full path, or relative to its module or package (a renamed module leaves no
    stale reference behind)."""
    import pathlib
    import re

    role = re.compile(r":(mod|func|class|meth|data|attr|obj|exc):`~?([A-Za-z_][\w.]*)`")
    root = pathlib.Path(rieszflow.__file__).parent
    stale = []
    for path in sorted(root.rglob("*.py")):
        mod = ".".join(path.relative_to(root.parent).with_suffix("").parts).removesuffix(".__init__")
        module = importlib.import_module(mod)
        classes = [v for v in vars(module).values() if inspect.isclass(v)]
        for i, line in enumerate(path.read_text().splitlines(), 1):
            for kind, t in role.findall(line):
                cands = [t] + [f"{m}.{t}" for m in (mod, mod.rpartition(".")[0]) if m]
                if any(_resolves(c) for c in cands):
                    continue
                if "." not in t and (kind == "attr" or (kind == "meth" and any(hasattr(c, t) for c in classes))):
                    continue            # an attribute of the class being documented (instance ones too)
                if "." in t and t.split(".")[0] in ("numpy", "scipy", "xarray", "dask", "distributed", "h5py",
                                                     "fipy", "cupy", "numba", "sklearn", "ot", "matplotlib"):
                    continue
                stale.append(f"{path.relative_to(root)}:{i} {kind} {t}")
    assert stale == [], "cross-references to nothing:\n" + "\n".join(stale)
