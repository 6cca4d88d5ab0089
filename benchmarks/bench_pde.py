"""Benchmark: one implicit McKean-Vlasov step, assembled Scharfetter-Gummel vs FiPy vs a bare SciPy solve.

Run from the repository root::

    python benchmarks/bench_pde.py
    python benchmarks/bench_pde.py --md docs/results/bench_pde.md --json docs/results/bench_pde.json

Problems: the mean-field study's ``interval`` (200 cells, 1-D Coulomb, full preset) and
``rectangle`` (64 x 64 cells, log kernel, full preset) from
:func:`rieszflow.studies.mean_field.study.setup_problem`, and a Gmsh disk (``--disk-cell``).
Thread counts are pinned (``--threads``) before NumPy is imported. Everything is timed
interleaved (A, B, C, A, B, C, ...; one untimed warm-up round) and reported as the minimum and
the median of ``--k`` rounds, with ratios; on a shared machine only the ratios are meaningful.

Table 1, one linear sweep (the unit of work of :func:`solve_mckean_vlasov`): the implicit
system with ``Veff`` frozen at the effective potential of the initial density, step
``pde_dt`` of the problem,

* ``fipy``: ``veff.setValue`` and ``eq.sweep`` of FiPy's term algebra (``pde_backend="fipy"``);
* ``assembled``: :meth:`ScharfetterGummelOperator.solve` (coefficients refreshed from ``Veff``,
  LAPACK ``gttrf/gttrs`` in 1-D or SuperLU, FiPy's stopping rule; ``pde_backend="assembled"``);
* ``bare``: only the solve of the already assembled matrix: ``scipy.linalg.solve_banded`` in
  1-D; in 2-D SciPy's SuperLU with the project's options and ordering (:data:`BARE_2D`:
  ``splu(M, permc_spec="MMD_AT_PLUS_A", options={"SymmetricMode": True}).solve(b)``, as
  ``ScharfetterGummelOperator`` factorises), so the ratio measures the assembly and the stopping
  rule, not a different ordering; ``spsolve`` (SciPy's default COLAMD ordering, the peer of
  earlier reports, issue 24) is also shown, and in 1-D.

Table 2, whole runs of :func:`solve_mckean_vlasov` (nonlinear sweeps with the convolution,
Anderson mixing, diagnostics) over ``--steps`` steps of the problem's ``pde_dt``, per step.
Column ``max rel diff``: largest difference of the densities of the two backends (relative to
the largest density).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path


#: The 2-D bare peer, shown in the reports: SuperLU with the ordering and options of the
#: project's factorisation (``ScharfetterGummelOperator._factor``).
SPLU_KW = {"permc_spec": "MMD_AT_PLUS_A", "options": {"SymmetricMode": True}}
BARE_2D = 'scipy.sparse.linalg.splu(M, permc_spec="MMD_AT_PLUS_A", options={"SymmetricMode": True}).solve(b)'


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="threads for BLAS and OpenMP (default 1)")
    parser.add_argument("--k", type=int, default=11, help="interleaved timing rounds (min and median reported)")
    parser.add_argument("--steps", type=int, default=5, help="time steps of each whole run in table 2")
    parser.add_argument("--disk-cell", type=float, default=0.1, help="Gmsh cell size of the unit disk")
    parser.add_argument("--md", default=None, help="also write the report (markdown) to this file")
    parser.add_argument("--json", default=None, help="also write the measurements (JSON) to this file")
    args = parser.parse_args(argv)
    if args.threads < 1 or args.k < 1 or args.steps < 1 or not args.disk_cell > 0:
        parser.error("--threads, --k, --steps must be >= 1 and --disk-cell > 0")
    return args


def problems(disk_cell):
    """(name, MeanFieldProblem, rho0 cell values, dt) of the benchmark."""
    import numpy as np

    from rieszflow.solvers.mckean_vlasov import MeanFieldProblem, disk_mesh
    from rieszflow.studies.mean_field.config import full_config
    from rieszflow.studies.mean_field.study import setup_problem

    out = []
    for c in full_config().problems:
        setup = setup_problem(c)
        out.append((f"{c.name} ({setup.domain.n_cells} cells, s = {c.s:g})", setup.problem, setup.rho0_cells,
                    c.pde_dt))
    dom = disk_mesh(1.0, disk_cell)
    prob = MeanFieldProblem.create(dom, lambda x: 0.5 * np.sum(x * x, axis=1), s=0.0, lam=1.0, beta=4.0)
    rho0 = np.exp(-4.0 * np.sum((dom.centers - 0.2) ** 2, axis=1))
    out.append((f"disk ({dom.n_cells} cells, s = 0)", prob, rho0 / np.dot(dom.volumes, rho0), 0.01))
    return out



def suite_rows(k: int = 5, quick: bool = False) -> list:
    """Rows of the benchmark suite (``python -m benchmarks``; contract in ``benchmarks/suite.py``).

    One linear implicit McKean-Vlasov sweep (table 1 of this script): the assembled
    Scharfetter-Gummel path (``pde_backend="assembled"``) against the bare SciPy solve of the
    same, already assembled matrix (``solve_banded`` in 1-D, ``spsolve`` in 2-D), on the
    mean-field study's problems and the Gmsh disk (quick: the 200-cell interval only);
    target 2.0 (issue 14). ``agreement``: largest difference of the two solutions relative to
    the largest density. The FiPy path's ratio to the bare solve is in the notes.
    """
    from _interleave import interleaved
    from suite import make_row, rel_diff

    import numpy as np
    import scipy.linalg
    import scipy.sparse.linalg as spla

    from rieszflow.solvers.mckean_vlasov import ScharfetterGummelOperator
    from rieszflow.solvers.mckean_vlasov.equation import _FiPyStep

    rows = []
    probs = problems(0.1)
    for name, prob, rho0, dt in (probs[:1] if quick else probs):
        veff = prob.effective_potential(rho0)
        op = ScharfetterGummelOperator(prob.domain, prob.beta)
        fp = _FiPyStep(prob, rho0, 1e-12)
        M = op.matrix(veff, dt)
        b = op.rhs(rho0, dt)
        if op.banded:
            ab = np.zeros((3, op.n))
            ab[0, 1:], ab[1], ab[2, :-1] = M.diagonal(1), M.diagonal(0), M.diagonal(-1)
            bare, bare_name = (lambda: scipy.linalg.solve_banded((1, 1), ab, b)), "bare solve_banded"
        else:
            csc = M.tocsc()
            bare, bare_name = (lambda: spla.splu(csc, **SPLU_KW).solve(b)), "bare splu (same ordering)"
        fns = {"assembled": lambda: op.solve(veff, dt, rho0, rho0, 1e-12), "bare": bare,
               "fipy": lambda: (fp.begin(rho0), fp.sweep(veff, dt))}
        st = interleaved(fns, k)
        fipy_ratio = st["fipy"]["median"] / st["bare"]["median"]
        rows.append(make_row(f"McKean-Vlasov implicit sweep, {name}", "assembled SG", bare_name, st,
                             project_key="assembled", peer_key="bare", target=2.0,
                             agreement=rel_diff(fns["assembled"](), fns["bare"]()), tolerance=1e-10,
                             notes=f"FiPy path: {fipy_ratio:.0f} x the bare solve (median)"
                                   + ("" if op.banded else f"; peer: {BARE_2D}")))
    return rows


def main(argv=None) -> int:
    args = parse_args(argv)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # run from a checkout
    from _interleave import interleaved, provenance, ratio, write_outputs

    import numpy as np
    import scipy.linalg
    import scipy.sparse.linalg as spla

    from rieszflow.solvers.mckean_vlasov import ScharfetterGummelOperator, solve_mckean_vlasov
    from rieszflow.solvers.mckean_vlasov.equation import _FiPyStep

    t_start = time.perf_counter()
    prov = provenance(args.threads)
    md, payload = [], {"sweep": [], "run": []}
    md.append("## 1. One linear implicit sweep\n")
    md.append(f"Times of the minimum and median of {args.k} interleaved rounds; ratios t_x / t_bare "
              "(bare: the solve of the already assembled matrix) and t_fipy / t_assembled. The 2-D bare peer "
              f"factorises as the project does: `{BARE_2D}`; `spsolve (COLAMD)`: SciPy's default ordering, "
              "shown for reference.\n")
    md.append("| problem | bare solver | bare min [s] | assembled/bare min | assembled/bare median | "
              "fipy/bare min | fipy/bare median | fipy/assembled min | fipy/assembled median | "
              "max rel diff |")
    md.append("|" + "---|" * 10)
    md_run = ["\n## 2. Whole runs of solve_mckean_vlasov, per time step\n",
              f"{args.steps} steps of the problem's dt (nonlinear sweeps: convolution, Anderson mixing, "
              "diagnostics); ratio t_fipy / t_assembled.\n",
              "| problem | dt | sweeps | assembled min [s/step] | fipy min [s/step] | fipy/assembled min | "
              "fipy/assembled median | max rel diff |", "|" + "---|" * 8]
    for name, prob, rho0, dt in problems(args.disk_cell):
        veff = prob.effective_potential(rho0)
        op = ScharfetterGummelOperator(prob.domain, prob.beta)
        fp = _FiPyStep(prob, rho0, 1e-12)
        M = op.matrix(veff, dt)
        b = op.rhs(rho0, dt)
        csc = M.tocsc()
        fns = {"assembled": lambda: op.solve(veff, dt, rho0, rho0, 1e-12),
               "fipy": lambda: (fp.begin(rho0), fp.sweep(veff, dt))}
        if op.banded:
            n = op.n
            ab = np.zeros((3, n))
            ab[0, 1:], ab[1], ab[2, :-1] = M.diagonal(1), M.diagonal(0), M.diagonal(-1)
            fns["bare"] = lambda: scipy.linalg.solve_banded((1, 1), ab, b)
            fns["bare spsolve"] = lambda: spla.spsolve(csc, b)
            bare_name = "solve_banded"
        else:
            fns["bare"] = lambda: spla.splu(csc, **SPLU_KW).solve(b)
            fns["bare spsolve"] = lambda: spla.spsolve(csc, b)
            bare_name = "splu (MMD_AT_PLUS_A)"
        st = interleaved(fns, args.k)
        x_a = op.solve(veff, dt, rho0, rho0, 1e-12)
        fp.begin(rho0)
        fp.sweep(veff, dt)
        diff = float(np.abs(x_a - fp.rho).max() / np.abs(fp.rho).max())
        ab_, fb_, fa_ = ratio(st, "assembled", "bare"), ratio(st, "fipy", "bare"), ratio(st, "fipy", "assembled")
        row = {"problem": name, "bare_solver": bare_name, "max_rel_diff": diff, "assembled_over_bare": ab_,
               "fipy_over_bare": fb_, "fipy_over_assembled": fa_,
               **{f"{m}_{q}": st[m][q] for m in st for q in ("min", "median")}}
        payload["sweep"].append(row)
        md.append(f"| {name} | {bare_name} | {st['bare']['min']:.2e} | {ab_[0]:.2f} | {ab_[1]:.2f} | "
                  f"{fb_[0]:.0f} | {fb_[1]:.0f} | {fa_[0]:.0f} | {fa_[1]:.0f} | {diff:.1e} |")
        if "bare spsolve" in st:
            r1, r2 = ratio(st, "assembled", "bare spsolve"), ratio(st, "fipy", "bare spsolve")
            row["assembled_over_bare_spsolve"], row["fipy_over_bare_spsolve"] = r1, r2
            md.append(f"| {name} | spsolve (COLAMD) | {st['bare spsolve']['min']:.2e} | {r1[0]:.2f} | {r1[1]:.2f} | "
                      f"{r2[0]:.0f} | {r2[1]:.0f} | | | |")
        # whole runs
        t_end = args.steps * dt
        out = {}

        def run(backend):
            out[backend] = solve_mckean_vlasov(prob, rho0, t_end=t_end, dt=dt, pde_backend=backend)

        st = interleaved({"assembled": lambda: run("assembled"), "fipy": lambda: run("fipy")}, max(1, args.k // 2))
        a, f = out["assembled"], out["fipy"]
        steps = a.step_time.size - 1
        diff = float(np.abs(a.rho - f.rho).max() / np.abs(f.rho).max())
        r = ratio(st, "fipy", "assembled")
        payload["run"].append({"problem": name, "dt": dt, "steps": steps, "sweeps": int(a.sweeps.sum()),
                               "fipy_over_assembled": r, "max_rel_diff": diff,
                               **{f"{m}_{q}": st[m][q] / steps for m in st for q in ("min", "median")}})
        md_run.append(f"| {name} | {dt:g} | {int(a.sweeps.sum())} | {st['assembled']['min'] / steps:.2e} | "
                      f"{st['fipy']['min'] / steps:.2e} | {r[0]:.1f} | {r[1]:.1f} | {diff:.1e} |")
    wall = time.perf_counter() - t_start
    command = "python benchmarks/bench_pde.py " + " ".join(sys.argv[1:] if argv is None else argv)
    write_outputs(args, "Results: benchmarks/bench_pde.py", command.strip(), prov, wall,
                  "\n".join(md + md_run) + "\n", payload)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
