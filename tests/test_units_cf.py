"""Every ``units`` attribute rieszflow writes is a UDUNITS string (CF conventions), parsed by cf_units.

Issue 22: three ``units`` strings were not machine-readable (``'1 (...)'``, ``'nat'``) and no file
carried a ``Conventions`` attribute. Two checks:

* **files**: one small file of each kind that can be written in seconds (the module fixture,
  about 20 s in all): ``main_job`` (``run --smoke``), ``kgd_learned`` (``kgd --from-run``),
  ``gibbs_check``, ``kernel_mean_field_study``, ``attention_theory``, the McKean-Vlasov result
  (:meth:`~rieszflow.solvers.mckean_vlasov.MeanFieldResult.to_hdf5`), ``token_flow``
  (:func:`~rieszflow.engine.tokenflow.run_flow`), and a sweep (task files and merged file).
  Every variable's and coordinate's ``units`` must parse; every file written by
  :class:`~rieszflow.engine.storage.TrajectoryWriter` carries ``Conventions = "CF-1.10"``.
* **sources**: the kinds too slow to write here (``ldp_study``, ``mean_field_study``,
  ``token_flow_study``, ``infinite_width``, ``luna``, ``synthetic``, ``nlp``) are covered through
  their variable definitions: every literal ``units`` of ``src/rieszflow`` (``"units": "..."`` in a
  dict, ``units="..."`` or ``units={...}`` in a call, both branches of a conditional) must parse.

``cf_units`` is a dev dependency (``pip install -e .[dev]``); the test is skipped without it.
"""
import ast
import json
import pathlib
import sys

import numpy as np
import pytest

cf_units = pytest.importorskip("cf_units")

SRC = pathlib.Path(__file__).resolve().parent.parent / "src" / "rieszflow"

#: strings UDUNITS parses as another quantity than the one meant
MISREAD = {"nat": "UDUNITS reads 'nat' as a unit of 9.80665e-05 m-1.kg.s-2; a loss in nats is "
                  "dimensionless: units '1', 'nats' in the long_name"}


#: calls whose ``units=`` is not a file attribute (engine.threads.ThreadRule: the work unit of a
#: thread rule, documentation only)
NOT_ATTRIBUTES = {"ThreadRule"}


def _check_units(u) -> str | None:
    """None if ``u`` is a good UDUNITS string, else why not."""
    if not isinstance(u, str):
        return f"not a string ({type(u).__name__})"
    if u in MISREAD:
        return MISREAD[u]
    try:
        cf_units.Unit(u)
    except ValueError as e:
        return f"cf_units cannot parse it ({e})"
    return None


def _square(task, config, rng):
    import xarray as xr

    x = float(dict(task.params)["x"])
    return xr.Dataset({"y": ((), x * x, {"long_name": "x squared", "units": "1"})})


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """(kind label, path, written by TrajectoryWriter?) for one small file of each fast kind."""
    from rieszflow.engine.tokenflow import SoftmaxKernel, normalise, run_flow, sphere_attention_flow
    from rieszflow.solvers.mckean_vlasov import MeanFieldProblem, rectangle_mesh, solve_mckean_vlasov
    from rieszflow.studies.cli import main as cli_main
    from rieszflow.studies.sweep import SweepSpec, open_sweep, run_sweep

    sys.path.insert(0, str(pathlib.Path(__file__).parent))
    from test_kernel_mean_field import _tiny as _tiny_kmf

    d = tmp_path_factory.mktemp("units")
    out = []
    run = d / "run.h5"
    assert cli_main(["run", "--smoke", "--quiet", "--out", str(run)]) == 0
    out.append(("main_job", run, True))
    assert cli_main(["kgd", "--from-run", str(run), "--n-rot", "20", "--n-tokens", "20", "--n-noise", "1",
                     "--quiet"]) == 0
    out.append(("kgd_learned", run.with_name("run-kgd.h5"), True))
    assert cli_main(["gibbs-check", str(run), "--quick", "--quiet", "--no-plots", "--out",
                     str(d / "gibbs.h5")]) == 0
    out.append(("gibbs_check", d / "gibbs.h5", True))
    (d / "kmf.json").write_text(json.dumps(_tiny_kmf()))
    assert cli_main(["kernel-mean-field", "--config", str(d / "kmf.json"), "--no-plots", "--workers", "0",
                     "--quiet", "--out", str(d / "kmf.h5")]) == 0
    out.append(("kernel_mean_field_study", d / "kmf.h5", True))
    assert cli_main(["attention-theory", "--quick", "--no-plots", "--quiet", "--out",
                     str(d / "at.h5")]) == 0
    out.append(("attention_theory", d / "at.h5", True))
    dom = rectangle_mesh((0.0, 0.0), (1.0, 1.0), (5, 4))
    prob = MeanFieldProblem.create(dom, lambda x: x[:, 0], s=0.5, lam=0.3, beta=2.0)
    res = solve_mckean_vlasov(prob, np.ones(dom.n_cells), t_end=0.2, dt=0.05, save_times=[0.1])
    out.append(("mckean_vlasov", res.to_hdf5(d / "mv.h5"), True))
    x0 = normalise(np.random.default_rng(19).standard_normal((2, 6, 3)))
    run_flow(sphere_attention_flow(SoftmaxKernel(1.0)), x0, dt=0.1, t_end=0.5, record_every=5,
             path=d / "flow.h5", config={"beta": 1.0})
    out.append(("token_flow", d / "flow.h5", True))
    spec = SweepSpec(name="sq", function=_square, methods=("m",), grid={"x": (1, 2)}, trials=1,
                     units={"x": "m"})
    run_sweep(spec, d / "sq", workers=0, progress=False, log=None)
    open_sweep(d / "sq")                                    # writes the merged file sq/sq.h5
    out.append(("sweep task", sorted((d / "sq" / "tasks").glob("*.h5"))[0], False))
    out.append(("sweep", d / "sq" / "sq.h5", False))
    return out


def test_every_units_attribute_of_every_fast_file_kind_parses(files):
    import h5py

    bad, seen = [], 0
    for kind, path, _ in files:
        assert path.exists(), (kind, path)
        with h5py.File(path, "r") as f:
            for name, obj in f.items():
                if "units" in obj.attrs:
                    u = obj.attrs["units"]
                    u = u.decode() if isinstance(u, bytes) else u
                    seen += 1
                    why = _check_units(u)
                    if why:
                        bad.append(f"{kind} {path.name}:{name} units={u!r}: {why}")
    assert seen >= 100                   # every variable of nine files: the walk saw them
    assert not bad, "\n".join(bad)


def test_files_written_by_the_trajectory_writer_carry_the_cf_conventions(files):
    import h5py

    for kind, path, by_writer in files:
        if by_writer:
            with h5py.File(path, "r") as f:
                assert f.attrs.get("Conventions") == "CF-1.10", kind


def _literal_units():
    """(file, line, value) of every literal ``units`` in the package's source."""
    found = []

    def strings(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node]
        if isinstance(node, ast.IfExp):
            return strings(node.body) + strings(node.orelse)
        if isinstance(node, ast.Dict):                   # units={"n": "1"} of a sweep's grid
            return [s for v in node.values for s in strings(v)]
        return []

    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            values = []
            if isinstance(node, ast.Dict):
                values = [v for k, v in zip(node.keys, node.values)
                          if isinstance(k, ast.Constant) and k.value == "units"]
            elif isinstance(node, ast.Call) and not (isinstance(node.func, ast.Name)
                                                     and node.func.id in NOT_ATTRIBUTES):
                values = [kw.value for kw in node.keywords if kw.arg == "units"]
            for v in values:
                found += [(path.relative_to(SRC.parent), s.lineno, s.value) for s in strings(v)]
    return found


def test_every_literal_units_string_in_the_source_parses():
    """Covers the file kinds too slow for the fixture through their variable definitions."""
    found = _literal_units()
    assert len(found) >= 80
    bad = [f"{p}:{line} units={u!r}: {why}" for p, line, u in found if (why := _check_units(u))]
    assert not bad, "\n".join(bad)


def test_the_checks_can_fail():
    assert _check_units("1 (log_loss in nats)") and _check_units("nat") and _check_units("tokens")
    assert _check_units("1") is None and _check_units("s") is None and _check_units("m s-1") is None
