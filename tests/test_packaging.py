"""Packaging: one import package, ``rieszflow``, with its bundled data; ``python -m rieszflow`` works."""
import subprocess
import sys
from pathlib import Path

import pytest
import setuptools

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11 (CI runs 3.11)

ROOT = Path(__file__).resolve().parent.parent


def _config():
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def test_only_rieszflow_is_installed_at_top_level():
    """The package finder of pyproject.toml yields ``rieszflow`` and its subpackages only."""
    find = _config()["tool"]["setuptools"]["packages"]["find"]
    packages = setuptools.find_packages(where=str(ROOT / find["where"][0]), include=find["include"])
    assert "rieszflow" in packages
    assert {"rieszflow.engine", "rieszflow.solvers", "rieszflow.studies"} <= set(packages)
    assert sorted({p.split(".")[0] for p in packages}) == ["rieszflow"]


def test_bundled_data_is_package_data():
    """Every bundled dataset file is matched by the package-data globs (so ``pip install .`` ships it)."""
    globs = _config()["tool"]["setuptools"]["package-data"]["rieszflow.data"]
    data = ROOT / "src" / "rieszflow" / "data"
    files = {p for p in data.rglob("*") if p.is_file()}
    matched = {p for g in globs for p in data.glob(g)}
    assert files and files == matched


def test_console_script_and_module_entry_point():
    """The console script targets the package CLI, and ``python -m rieszflow --help`` runs."""
    assert _config()["project"]["scripts"]["rieszflow"] == "rieszflow.studies.cli:main"
    out = subprocess.run([sys.executable, "-m", "rieszflow", "--help"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "usage: rieszflow" in out.stdout


def test_a_folder_named_rieszflow_in_the_working_directory_does_not_shadow_the_package(tmp_path):
    """The flat layout's trap (a clone named ``rieszflow/`` in the working directory imported as an
    empty namespace package) cannot happen with the src layout: the real package is found."""
    (tmp_path / "rieszflow").mkdir()
    (tmp_path / "rieszflow" / "README.md").write_text("a clone's top folder\n")
    out = subprocess.run([sys.executable, "-c", "import rieszflow; print(rieszflow.__file__); "
                          "print(callable(rieszflow.open_runs))"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    init, has_api = out.stdout.split()
    assert init.endswith("__init__.py") and "src" in Path(init).parts and has_api == "True"
