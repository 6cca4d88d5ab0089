"""The study scripts of docs/writing_a_study.md (``examples/``) run with the public API only and
print what the page says they print; the numbers are checked against their oracles.

Each script runs in a fresh process, as a user runs it (``python examples/NAME.py``), with one
BLAS thread. The thresholds: the Coulomb gas's radial W1 to the equilibrium law may be at most 3
times the expected W1 of N i.i.d. radii, E W1 = sqrt(2 / (pi N)) R int_0^1 sqrt(u^3 - u^6) du =
0.2235 R / sqrt(N) (0.016 at N = 300; the gas's own error is a bias, from its discreteness and
temperature, not a sampling error); its energy per particle lies below the continuum energy of the
equilibrium measure (the diagonal is excluded) by less than 10 %; the sweep's W1 must decrease
with N at a fitted slope below -0.2.
"""
import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1"}


def _run(name, *args, timeout=600):
    r = subprocess.run([sys.executable, str(EXAMPLES / name), *map(str, args)], capture_output=True,
                       text=True, timeout=timeout, env=ENV, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


def _number(pattern, text):
    m = re.search(pattern, text)
    assert m, f"{pattern!r} not in output:\n{text}"
    return float(m.group(1))


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.py")), ids=lambda p: p.name)
def test_examples_use_only_the_public_api(path):
    """Every ``rieszflow`` name an example imports is public: the top level or a documented namespace."""
    import rieszflow

    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rieszflow"):
            assert node.module in ("rieszflow", "rieszflow.learning"), node.module
            mod = __import__(node.module, fromlist=["_"])
            for a in node.names:
                assert a.name in mod.__all__, f"{path.name}: {node.module}.{a.name} is not public"
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "rf":
            assert node.attr in rieszflow.__all__ or node.attr in rieszflow._NAMESPACES, node.attr


def test_coulomb_gas_matches_its_equilibrium_measure():
    out = _run("coulomb_gas_ball.py")
    R = _number(r"support radius R = ([\d.]+)", out)
    assert _number(r"largest particle radius ([\d.]+)", out) < R * 1.05        # nothing far outside
    assert _number(r"radial law of the equilibrium measure\) = ([\d.]+)", out) < 3 * 0.2235 * R / 300 ** 0.5
    h = _number(r"H_N / N = ([\d.]+)", out)
    cont = _number(r"0.6 lam / R = ([\d.]+)", out)
    assert 0.9 * cont < h < cont                     # the discrete energy lies below the continuum's


def test_particles_approach_the_pde_on_a_sweep(tmp_path):
    out = _run("particles_vs_pde_sweep.py", tmp_path / "sweep")
    w = [float(v) for v in re.findall(r"^\s*(?:25|100|400)\s+([\d.]+)$", out, flags=re.M)]
    assert len(w) == 3 and w[0] > w[1] > w[2], out
    assert _number(r"W1 ~ N\^(-?[\d.]+)", out) < -0.2
    again = _run("particles_vs_pde_sweep.py", tmp_path / "sweep")        # rerun: every task skipped
    assert "12 skipped" in again


def test_learned_kernel_reads_back_with_xarray():
    out = _run("learned_kernel_xarray.py")
    assert 0.0 <= _number(r"test accuracy ([\d.]+)", out) <= 1.0
    assert "'particle': 16" in out and "'coord': 16" in out
    assert _number(r"relative change by learning ([\d.]+)", out) > 0      # Phase A moved the particles
