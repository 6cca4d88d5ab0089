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
        for code, msg in numpydoc_validate.validate(qual)["errors"]:
            if code in CHECKS and not (code == "PR02" and qual.startswith(KWARGS_OPTIONS)):
                failures.append(f"{qual}: {code} {msg}")
    assert not failures, "\n".join(failures)
