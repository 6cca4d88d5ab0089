"""Benchmark: fast Riesz sums (FMM3D, NUFFT) at N up to 10^6: accuracy, time, memory, crossover, peers, dynamics.

Run from the repository root, one thread (the counts are pinned before NumPy is imported)::

    python benchmarks/bench_fast.py accuracy --n 1000000 --tol 1e-6 1e-8 --rows 100 --json A.json
    python benchmarks/bench_fast.py crossover --sizes 2000 5000 10000 20000 50000 --json C.json
    python benchmarks/bench_fast.py langevin --n 1000000 --steps 20 --out runs/fmm-1e6
    python benchmarks/bench_fast.py langevin --n 1000000 --steps 3 --record-every 1 --space free \\
        --sampler mala --eta 1e-5 --out runs/dyn --name d3_free_mala
    python benchmarks/bench_fast.py keops --n 1000000 --rows 2000 --json K.json
    python benchmarks/bench_fast.py report --json A.json C.json runs/fmm-1e6/langevin.json \\
        --md docs/results/bench_fast.md

``accuracy``: N points uniform in the unit ball of R^3 (seed ``--seed``); for each ``tol``
one call of ``riesz_energy_and_grad(..., method="fmm", tol=tol)`` internals (row sums of
potential and gradient), timed (wall and CPU), and the process's peak resident memory after
it; the error against the exact direct sums over ``--rows`` random rows
(:func:`rieszflow.engine.energy.fast_rows.riesz_row_sums`): the relative 2-norm error over
those rows and the largest per-row relative error, for the potential and the gradient.

``crossover``: the Numba direct kernel (one thread) against ``method="fmm"`` (d = 3, s = 1) or
``method="nufft"`` (other (d, s)) at the default ``tol``, interleaved (``--k`` rounds, minimum
of the CPU seconds, which a loaded machine does not inflate); the crossover N is the smallest
size from which the fast method is faster at every larger size measured.

``langevin``: projected Langevin (:func:`rieszflow.engine.simulate.projected_langevin`, run by
:func:`~rieszflow.engine.simulate.run_langevin`) of N particles in the unit ball, d = 3,
s = 1, the "mean_field" Coulomb energy with ``method="fmm"``, recording every
``--record-every`` steps the summaries and ``--particles`` subsampled particles with
:class:`rieszflow.solvers.particles.LangevinRecorder` to ``OUT/langevin.h5``; the time per step
and the peak memory go to ``OUT/langevin.json``.

Options of ``langevin`` beyond that run: ``--space ball|box|free`` (the unit ball, the cube
[-1, 1]^d, or R^d with the confining potential V(x) = a |x|^2 / 2, ``--confine a``, added to the
energy as an :class:`~rieszflow.engine.energy.base.ExternalPotential`), ``--sampler
langevin|mala`` (:func:`~rieszflow.engine.simulate.mala` with ``energy.value_and_grad``),
``--d``, ``--s``, ``--method`` and ``--name`` (the file stem); the measurements then go to
``OUT/NAME.json`` as a one-element list under ``"dynamics"`` (MALA: with its acceptance rate).

``keops``: for each (``--d``, ``--s``, ``--method``, ``--tol``) the fast method's potential and
gradient at N (one call, CPU seconds) against two peers, labelled as such in the report:

* the **implementation peer**, the bare library the method calls (:func:`bare_fmm3d`:
  ``fmm3dpy.lfmm3d`` as FMM3D's own example calls it, for ``method="fmm"``; for
  ``method="nufft"`` :func:`bare_finufft`, the same plan's FINUFFT transforms alone: a floor, since
  NFFT fast summation has no single library call), one call, CPU seconds;
* the **algorithm comparison**, an O(N^2) direct sum written as KeOps users write it: PyKeOps-CPU
  with the suite's factorised formula (:func:`keops_rows`, as ``bench_riesz.keops_coulomb``:
  ``.auto_factorize()`` on the expression) over ``--rows`` random target rows, its CPU seconds
  scaled by N(N - 1) / (pairs evaluated); the fast method's errors over those rows against
  KeOps's float64 rows, which are checked against the exact sums on ``--check-rows`` of them.

``report``: the markdown page from the JSON files.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sys
import time
from pathlib import Path

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))    # bench_riesz: the KeOps peer's formula


COMMAND = [""]      # this run's command line, stored with each measurement


def peak_rss_mib() -> float:
    """Peak resident memory of this process so far (MiB; Linux ru_maxrss is in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def usage_error(msg):
    """Print ``bench_fast.py: error: msg`` to stderr and exit with status 2 (bad input)."""
    print(f"bench_fast.py: error: {msg}", file=sys.stderr)
    raise SystemExit(2)


def unit_ball(rng, n, d=3):
    """n points uniform in the unit ball of R^d, float64."""
    x = rng.standard_normal((n, d))
    x /= np.linalg.norm(x, axis=1)[:, None]
    return x * rng.uniform(size=(n, 1)) ** (1.0 / d)


def cmd_accuracy(args):
    from rieszflow.engine.energy.fast import fmm_pair_sums
    from rieszflow.engine.energy.fast_nufft import nufft_pair_sums
    from rieszflow.engine.energy.fast_rows import riesz_row_sums

    fast = fmm_pair_sums if args.method == "fmm" else nufft_pair_sums
    rng = np.random.default_rng(args.seed)
    x = unit_ball(rng, args.n, args.d)
    idx = np.sort(rng.choice(args.n, size=args.rows, replace=False))
    t0 = time.perf_counter()
    rows0, grads0 = riesz_row_sums(x, idx, args.s)
    t_rows = time.perf_counter() - t0
    fast(x[:min(args.n, 4000)], args.s, 0.0, True, args.tol[0])    # untimed: Numba compiles the NUFFT near field
    out = []
    for tol in args.tol:
        rss_before = peak_rss_mib()
        t0, c0 = time.perf_counter(), time.process_time()
        rows, grads = fast(x, args.s, 0.0, True, tol)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        er = np.abs(rows[idx] - rows0) / np.abs(rows0)
        eg = np.linalg.norm(grads[idx] - grads0, axis=1) / np.linalg.norm(grads0, axis=1)
        res = {"command": COMMAND[0], "n": args.n, "d": args.d, "s": args.s, "method": args.method, "tol": tol,
               "wall_s": wall, "cpu_s": cpu, "rows": args.rows,
               "pot_rel_l2": float(np.linalg.norm(rows[idx] - rows0) / np.linalg.norm(rows0)),
               "pot_rel_max": float(er.max()),
               "grad_rel_l2": float(np.linalg.norm(grads[idx] - grads0) / np.linalg.norm(grads0)),
               "grad_rel_max": float(eg.max()),
               "energy_rel_est": float(abs(np.mean(rows[idx]) - np.mean(rows0)) / np.mean(rows0)),
               "peak_rss_mib": peak_rss_mib(), "peak_rss_before_mib": rss_before,
               "direct_rows_s": t_rows}
        print(json.dumps(res), flush=True)
        out.append(res)
        if args.json:
            Path(args.json).write_text(json.dumps({"accuracy": out}, indent=1))
    return {"accuracy": out}


def cmd_crossover(args):
    from rieszflow.engine.energy.fast import FAST_TOL
    from rieszflow.engine.energy.riesz import _pair_sums

    rng = np.random.default_rng(args.seed)
    out, cross = [], {}
    for d, s in zip(args.d, args.s):
        fast = "fmm" if (d, s) == (3, 1.0) else "nufft"
        _pair_sums(unit_ball(rng, 100, d), s, 0.0, "numba", True, None)      # compile
        _pair_sums(unit_ball(rng, 4000, d), s, 0.0, fast, True, None, FAST_TOL)   # compile (NUFFT near field)
        rows = []
        for n in args.sizes:
            x = unit_ball(rng, n, d)
            times = {"numba": [], fast: []}
            for _ in range(args.k):
                for m in ("numba", fast):
                    t0 = time.process_time()      # CPU seconds: one thread, robust to a loaded machine
                    _pair_sums(x, s, 0.0, m, True, None, FAST_TOL)
                    times[m].append(time.process_time() - t0)
            res = {"command": COMMAND[0], "d": d, "s": s, "method": fast, "n": n, "tol": FAST_TOL, "numba_s": min(times["numba"]),
                   "fast_s": min(times[fast])}
            print(json.dumps(res), flush=True)
            rows.append(res)
            if args.json:
                Path(args.json).write_text(json.dumps({"crossover": out + rows, "crossover_n": cross}, indent=1))
        faster = [r["fast_s"] < r["numba_s"] for r in rows]
        cross[f"d={d}, s={s:g} ({fast})"] = next((rows[i]["n"] for i in range(len(rows)) if all(faster[i:])), None)
        out += rows
    return {"crossover": out, "crossover_n": cross}


def keops_rows(xt, xs, s):
    """Row sums of g_s and its gradient for targets ``xt`` against sources ``xs`` by PyKeOps-CPU (float64).

    The formula is the benchmark suite's idiomatic KeOps peer
    (``benchmarks/bench_riesz.py``: :data:`bench_riesz.KEOPS_FORMULA`, ``keops_coulomb``, which
    says where the idiom comes from): one ``rsqrt`` of the squared distance per pair, no
    ``pow``, potential and gradient in one reduction of the concatenated (1 + d)-vector, and the
    expression factorised by KeOps (``.auto_factorize()`` on the expression before ``.sum``; the
    global flag ``keopscore.auto_factorize`` is not used: with it the generated code evaluated
    ``rsqrt`` once per occurrence of ``t``). ``s = 1``:
    ``t = D.sqnorm2().rsqrt(); t.concat(t*t*t*D).auto_factorize().sum(j)`` (the same expression
    as ``keops_coulomb``; ``Rsqrt(0) = 0`` drops a coincident source, so ``xs`` may contain the
    targets); ``s = 0`` (the log kernel, g = -log r = log t):
    ``t.log().concat(t*t*D).auto_factorize().sum(j)``, where ``log(0)`` would be ``-inf``, so
    ``xs`` must not contain the targets.

    This is the **algorithm comparison** of the fast methods (an O(N^2) direct sum, written
    well, against an O(N) or O(N log N) method), not their implementation peer: that is the
    bare library (:func:`bare_fmm3d`, :func:`bare_finufft`).

    Parameters
    ----------
    xt : float64 ndarray, shape (M, d)
        Target points.
    xs : float64 ndarray, shape (K, d)
        Source points.
    s : {0.0, 1.0}
        Riesz exponent (log kernel for 0).

    Returns
    -------
    rows : float64 ndarray, shape (M,)
        Sum over the sources of g_s(x_t - x_l).
    grads : float64 ndarray, shape (M, d)
        Sum over the sources of grad g_s(x_t - x_l) (with respect to x_t).

    Raises
    ------
    ValueError
        If ``s`` is not 0 or 1.
    """
    from pykeops.numpy import LazyTensor

    if s not in (0.0, 1.0):
        raise ValueError(f"keops_rows: s must be 0 or 1, got s={s}")
    xi = LazyTensor(np.ascontiguousarray(xt, dtype=np.float64)[:, None, :])
    xj = LazyTensor(np.ascontiguousarray(xs, dtype=np.float64)[None, :, :])
    diff = xi - xj
    t = diff.sqnorm2().rsqrt()
    if s == 1.0:
        out = t.concat(t * t * t * diff).auto_factorize().sum(axis=1)
    else:
        out = t.log().concat(t * t * diff).auto_factorize().sum(axis=1)
    return np.asarray(out[:, 0]), -np.asarray(out[:, 1:])


def bare_fmm3d(x, tol):
    """The implementation peer of ``method="fmm"``: FMM3D called bare, as its own example calls it.

    ``fmm3dpy.lfmm3d(eps=tol, sources=x.T, charges=ones, pg=2)``: potential and gradient at the
    sources, self term excluded (FMM3D's kernel 1/(4 pi r)). The idiom is FMM3D's own Python
    example, ``python/examples/lfmm3d_example.py`` of https://github.com/flatironinstitute/FMM3D
    (``fmm.lfmm3d(eps=eps, sources=sources, charges=charges, pg=1)``; ``pg=2`` adds the
    gradient), and https://fmm3d.readthedocs.io (Python interface). The ratio of the project's
    ``fmm_pair_sums`` to this call is what the project adds to the library (the 4 pi scaling, the
    transposes, the checks).

    Returns
    -------
    (ndarray, ndarray)
        FMM3D's ``pot`` (N,) and ``grad`` (3, N), unscaled.
    """
    import fmm3dpy

    out = fmm3dpy.lfmm3d(eps=tol, sources=np.ascontiguousarray(x.T), charges=np.ones(x.shape[0]), pg=2)
    return out.pot, out.grad


def bare_finufft(x, s, tol):
    """The implementation floor of ``method="nufft"``: the same plan's FINUFFT transforms alone.

    NFFT fast summation has no single library call to compare with, so this is a floor, not a
    peer: the type-1 transform of unit charges to the plan's modes and the batched type-2
    transform of the d + 1 mode arrays back to the points, with the modes, the precision and the
    options ``nufft_pair_sums`` uses (``rieszflow.engine.energy.fast_nufft``: ``_plan``,
    ``NUFFT_UPSAMPFAC``), called as FINUFFT's documentation calls them
    (``finufft.nufft2d1(x, y, c, n_modes, eps=..., isign=...)``,
    https://finufft.readthedocs.io/en/latest/python.html). The difference to the method's time is
    the near field, the kernel's Fourier coefficients and the rest of the project's code.
    """
    import math

    import finufft

    from rieszflow.engine.energy import fast_nufft

    n, d = x.shape
    centre = 0.5 * (x.min(axis=0) + x.max(axis=0))
    extent = float(np.max(np.sqrt(np.sum((x - centre) ** 2, axis=1))))
    y = (x - centre) / (max(extent, np.finfo(np.float64).tiny) / fast_nufft._R_POINTS)
    _, _, nm, _ = fast_nufft._plan(n, d, s, tol)
    pts = [2.0 * math.pi * y[:, ax] for ax in range(d)]
    t1 = {1: finufft.nufft1d1, 2: finufft.nufft2d1, 3: finufft.nufft3d1}[d]
    t2 = {1: finufft.nufft1d2, 2: finufft.nufft2d2, 3: finufft.nufft3d2}[d]
    opts = {"eps": max(tol, 1e-14), "nthreads": 1,
            "upsampfac": fast_nufft.NUFFT_UPSAMPFAC if tol >= 1e-9 else 2.0}
    modes = t1(*pts, np.ones(n, dtype=np.complex128), (nm,) * d, isign=-1, **opts)
    stack = np.empty((d + 1,) + (nm,) * d, dtype=np.complex128)
    stack[:] = modes
    return t2(*pts, stack, isign=1, **opts).real


def _block_rows(x, s):
    """Exact row sums of g_s (and gradient) among the points ``x`` themselves, diagonal excluded (NumPy)."""
    diff = x[:, None, :] - x[None, :, :]
    r2 = np.einsum("ijk,ijk->ij", diff, diff)
    np.fill_diagonal(r2, np.inf)
    if s == 1.0:
        t = 1.0 / np.sqrt(r2)
        return t.sum(1), -np.einsum("ij,ijk->ik", t ** 3, diff)
    with np.errstate(divide="ignore"):
        g = -0.5 * np.log(r2)
    g[~np.isfinite(r2)] = 0.0
    return g.sum(1), -np.einsum("ij,ijk->ik", 1.0 / r2, diff)


def cmd_keops(args):
    from bench_riesz import KEOPS_FORMULA

    from rieszflow.engine.energy.fast import fmm_pair_sums
    from rieszflow.engine.energy.fast_nufft import nufft_pair_sums
    from rieszflow.engine.energy.fast_rows import riesz_row_sums

    if not (len(args.d) == len(args.s) == len(args.method) == len(args.tol)):
        usage_error("keops: --d, --s, --method and --tol must have the same length, got "
                         f"{len(args.d)}, {len(args.s)}, {len(args.method)}, {len(args.tol)}")
    if not 1 <= args.rows < args.n or not 1 <= args.check_rows <= args.rows:
        usage_error(f"keops: need 1 <= --check-rows <= --rows < --n, got --check-rows "
                         f"{args.check_rows}, --rows {args.rows}, --n {args.n}")
    out = []
    for d, s, method, tol in zip(args.d, args.s, args.method, args.tol):
        rng = np.random.default_rng(args.seed)
        x = unit_ball(rng, args.n, d)
        idx = np.sort(rng.choice(args.n, size=args.rows, replace=False))
        rest = np.setdiff1d(np.arange(args.n), idx)
        xt = x[idx]
        # sources: all N for s = 1 (Rsqrt(0) = 0 drops the target itself, as in keops_coulomb);
        # the N - M others for the log kernel (log 0 = -inf), the M x M block among the targets
        # then added exactly outside the timing (it is M / N of the pairs)
        xs = x if s == 1.0 else x[rest]
        keops_rows(xt[:8], xs[:1000], s)                   # compile (cached) and warm, untimed
        t0, c0 = time.perf_counter(), time.process_time()
        krows, kgrads = keops_rows(xt, xs, s)
        k_wall, k_cpu = time.perf_counter() - t0, time.process_time() - c0
        pairs = args.rows * xs.shape[0]
        if s != 1.0:
            brows, bgrads = _block_rows(xt, s)
            krows, kgrads = krows + brows, kgrads + bgrads
        scale = args.n * (args.n - 1.0) / pairs
        # the same formula on a small cloud (sources fit in the caches): KeOps's best pair rate
        xsm = unit_ball(np.random.default_rng(args.seed + 1), args.small_n, d)
        half = args.small_n // 2
        keops_rows(xsm[:half], xsm[half:], s)
        c0 = time.process_time()
        keops_rows(xsm[:half], xsm[half:], s)
        small_rate = half * (args.small_n - half) / (time.process_time() - c0)
        fast = fmm_pair_sums if method == "fmm" else nufft_pair_sums
        fast(x[:min(args.n, 4000)], s, 0.0, True, tol)    # untimed: Numba's compilation (NUFFT near field)
        rss0 = peak_rss_mib()
        t0, c0 = time.perf_counter(), time.process_time()
        rows, grads = fast(x, s, 0.0, True, tol)
        f_wall, f_cpu = time.perf_counter() - t0, time.process_time() - c0
        rss = peak_rss_mib()
        # the implementation peer: the bare library (fmm3dpy), or the FINUFFT floor of the NUFFT plan
        if method == "fmm":
            bare_fmm3d(x[:min(args.n, 4000)], tol)
            c0 = time.process_time()
            pot, grad = bare_fmm3d(x, tol)
            b_cpu = time.process_time() - c0
            four_pi = 4.0 * np.pi
            b_agree = max(float(np.max(np.abs(four_pi * pot - rows)) / np.max(np.abs(rows))),
                          float(np.max(np.abs(four_pi * grad.T - grads)) / np.max(np.abs(grads))))
            del pot, grad
            impl = ("fmm3dpy.lfmm3d(eps=tol, sources=x.T, charges=ones, pg=2), bare (FMM3D's "
                    "python/examples/lfmm3d_example.py)")
        else:
            bare_finufft(x[:min(args.n, 4000)], s, tol)
            c0 = time.process_time()
            bare_finufft(x, s, tol)
            b_cpu = time.process_time() - c0
            b_agree = None
            impl = ("floor: the plan's FINUFFT type-1 and batched type-2 transforms alone (finufft.nufft"
                    f"{d}d1/nufft{d}d2 as in FINUFFT's Python docs), no near field")
        chk = np.arange(args.check_rows)                   # the reference checked on the first rows
        t0 = time.perf_counter()
        e_rows, e_grads = riesz_row_sums(x, idx[chk], s)
        t_exact = time.perf_counter() - t0
        er = np.abs(rows[idx] - krows) / np.abs(krows)
        eg = np.linalg.norm(grads[idx] - kgrads, axis=1) / np.linalg.norm(kgrads, axis=1)
        res = {"command": COMMAND[0], "n": args.n, "d": d, "s": s, "method": method, "tol": tol,
               "rows": args.rows, "check_rows": args.check_rows, "keops_formula": KEOPS_FORMULA if s == 1.0
               else "D = x_i - x_j; t = D.sqnorm2().rsqrt(); t.log().concat(t*t*D).auto_factorize().sum(j)  "
               "[pykeops.numpy LazyTensor; sources: the N - M points other than the targets]",
               "keops_factorised": True,
               "impl_peer": impl, "impl_cpu_s": b_cpu, "fast_over_impl_cpu": f_cpu / b_cpu,
               "impl_agreement": b_agree,
               "keops_sources": int(xs.shape[0]), "keops_pairs": pairs, "keops_scale": scale,
               "keops_rows_cpu_s": k_cpu, "keops_rows_wall_s": k_wall,
               "keops_cpu_s": k_cpu * scale, "keops_wall_s": k_wall * scale,
               "keops_pairs_per_cpu_s": pairs / k_cpu,
               "keops_small_n": args.small_n, "keops_small_pairs_per_cpu_s": small_rate,
               "ratio_cpu_at_small_rate": args.n * (args.n - 1.0) / small_rate / f_cpu,
               "fast_cpu_s": f_cpu, "fast_wall_s": f_wall, "ratio_cpu": k_cpu * scale / f_cpu,
               "peak_rss_mib": rss, "peak_rss_before_fast_mib": rss0,
               "pot_rel_l2": float(np.linalg.norm(rows[idx] - krows) / np.linalg.norm(krows)),
               "pot_rel_max": float(er.max()),
               "grad_rel_l2": float(np.linalg.norm(grads[idx] - kgrads) / np.linalg.norm(kgrads)),
               "grad_rel_max": float(eg.max()),
               "keops_vs_exact_pot_rel_max": float(np.max(np.abs(krows[chk] - e_rows) / np.abs(e_rows))),
               "keops_vs_exact_grad_rel_max": float(np.max(np.linalg.norm(kgrads[chk] - e_grads, axis=1)
                                                           / np.linalg.norm(e_grads, axis=1))),
               "exact_rows_wall_s": t_exact}
        print(json.dumps(res), flush=True)
        out.append(res)
        if args.json:
            Path(args.json).write_text(json.dumps({"keops": out}, indent=1))
        del x, rows, grads, xs
    return {"keops": out}


def _dynamics_setup(args):
    """The energy, the space and the sampler's (init, step) of a ``langevin`` run, from its options."""
    from rieszflow.engine.energy import RieszEnergy
    from rieszflow.engine.energy.base import ExternalPotential
    from rieszflow.engine.simulate import mala, projected_langevin
    from rieszflow.engine.space import Ball, Cube, Free

    energy = RieszEnergy(s=args.s, lam=args.lam, normalization="mean_field", method=args.method, tol=args.tol)
    if args.space == "free":
        a = args.confine       # V(x) = a |x|^2 / 2 per particle, summed ("mean_field" normalisation)
        energy = energy + ExternalPotential(V=lambda x: 0.5 * a * np.sum(x * x, axis=1), gradV=lambda x: a * x,
                                            normalization="mean_field")
        space, space_name = Free(), f"Free() + V(x) = {a:g} |x|^2 / 2"
    elif args.space == "box":
        space, space_name = Cube(1.0, args.d), f"Cube(1.0, {args.d}) = [-1, 1]^{args.d}"
    else:
        space, space_name = Ball(1.0), "Ball(1.0)"
    if args.sampler == "mala":
        init, step = mala(energy.value_and_grad, space, args.eta, args.beta, grad_scale=1.0)
    else:
        init, step = projected_langevin(energy.grad, space, args.eta, args.beta, grad_scale=1.0,
                                        boundary="project")
    return energy, space_name, init, step


def cmd_langevin(args):
    from rieszflow.engine.simulate import run_langevin
    from rieszflow.engine.storage import TrajectoryWriter
    from rieszflow.solvers.particles import LangevinRecorder

    if args.method == "fmm" and (args.d, args.s) != (3, 1.0):
        usage_error(f"langevin: --method fmm needs --d 3 --s 1, got --d {args.d} --s {args.s:g}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    name = args.name or "langevin"
    rng = np.random.default_rng(args.seed)
    x0 = unit_ball(rng, args.n, args.d)
    energy, space_name, init, step = _dynamics_setup(args)
    step_times, step_cpu = [], []
    last = [time.perf_counter(), time.process_time()]
    config = {"n": args.n, "d": args.d, "s": args.s, "lam": args.lam, "eta": args.eta, "beta": args.beta,
              "tol": args.tol, "method": args.method, "sampler": args.sampler, "space_kind": args.space,
              "confine": args.confine if args.space == "free" else None,
              "steps": args.steps, "seed": args.seed, "space": space_name,
              "boundary": "project" if args.sampler == "langevin" else "reject",
              "particles": args.particles, "record_every": args.record_every}
    warm = x0[:min(args.n, 4000)]          # untimed: Numba's compilation (NUFFT near field), both paths
    energy.value_and_grad(warm)
    energy.grad(warm)
    # the step's own reference in this run: one gradient of the energy at the start (for the
    # ratio CPU s per step / one gradient: absolute CPU seconds move with the machine's other load)
    c0 = time.process_time()
    energy.grad(x0)
    grad_cpu = time.process_time() - c0
    t_start = time.perf_counter()
    c_init = time.process_time()
    state0 = init(x0)                 # MALA: one energy and gradient evaluation
    init_cpu = time.process_time() - c_init
    with TrajectoryWriter(out / f"{name}.h5", "bench_fast_langevin", config={"json": json.dumps(config)},
                          overwrite=args.overwrite) as w:
        rec = LangevinRecorder(w, args.n, args.d, args.eta, particles=args.particles,
                               energy=None if args.no_energy else energy)
        last[:] = [time.perf_counter(), time.process_time()]

        def callback(st):
            now, cpu = time.perf_counter(), time.process_time()
            rec(st)
            if st.step:
                step_times.append(now - last[0])
                step_cpu.append(cpu - last[1])
            acc = f", accepted {int(st.n_accepted)} of {st.step}" if hasattr(st, "n_accepted") else ""
            print(f"step {st.step}: wall {now - t_start:.1f} s, since last record: wall "
                  f"{now - last[0]:.1f} s, CPU {cpu - last[1]:.1f} s; record wall "
                  f"{time.perf_counter() - now:.1f} s, peak {peak_rss_mib():.0f} MiB{acc}", flush=True)
            last[0], last[1] = time.perf_counter(), time.process_time()

        try:
            state = run_langevin(step, state0, args.steps, args.seed, record_every=args.record_every,
                                 callback=callback, progress=False)
            steps_done, stopped = int(state.step), None
        except KeyboardInterrupt:          # SIGINT: keep what was recorded, say so
            state, stopped = None, "interrupted (SIGINT) after the last record"
            steps_done = int(w.read("step")[-1])
            w.close("interrupted")
    total = time.perf_counter() - t_start
    res = {**config, "total_s": total, "steps_done": steps_done, "stopped": stopped,
           "cpu_s": time.process_time(), "init_cpu_s": init_cpu, "one_grad_cpu_s": grad_cpu,
           "intervals_s": step_times, "intervals_cpu_s": step_cpu, "peak_rss_mib": peak_rss_mib(),
           "file": str(out / f"{name}.h5"), "file_mib": (out / f"{name}.h5").stat().st_size / 2 ** 20}
    if state is not None and hasattr(state, "n_accepted"):
        res["accepted"] = int(state.n_accepted)
        res["acceptance_rate"] = int(state.n_accepted) / max(steps_done, 1)
    import xarray as xr
    with xr.open_dataset(out / f"{name}.h5", engine="h5netcdf") as ds:
        res["xarray_vars"] = sorted(ds.data_vars)
        res["records"] = int(ds.sizes["time"])
        res["second_moment"] = [float(v) for v in ds["second_moment"].values]
        res["max_radius"] = [float(v) for v in ds["max_radius"].values]
    res["command"] = COMMAND[0]
    res = {"dynamics": [res]}
    (out / f"{name}.json").write_text(json.dumps(res, indent=1))
    print(json.dumps(res), flush=True)
    return res


def _portable(command):
    """A stored command line without this machine's output paths (``--out DIR``, ``--json NAME.json``)."""
    import re

    command = re.sub(r"--out \S+", "--out DIR", command)
    return re.sub(r"--json (\S+)", lambda m: "--json " + Path(m.group(1)).name, command)


def _factorised(r) -> bool:
    """True if a ``keops`` row's direct sum was the factorised formula (``.auto_factorize()`` on the expression)."""
    return bool(r.get("keops_factorised")) and ".auto_factorize()" in r.get("keops_formula", "")


def _report_keops(rows):
    """Markdown lines of the section: the fast methods against their peers at large N (``keops`` runs).

    Two comparisons, labelled as such: the **implementation peer** (the bare library the method
    calls: ``fmm3dpy.lfmm3d`` for ``method="fmm"``; for ``method="nufft"`` the same plan's FINUFFT
    transforms alone, a floor) and the **algorithm comparison** (a factorised O(N^2) direct sum by
    PyKeOps-CPU, scaled from M rows). Rows stored before the KeOps formula was factorised on the
    expression show their direct-sum ratio struck through and are not counted for the goal.
    """
    n = rows[0]["n"]
    old = [r for r in rows if not _factorised(r)]
    lines = [f"## 4. Peers at N = {n}: the bare library (implementation) and a direct sum (algorithm), "
             "energy and gradient, one thread", "",
             "Commands: " + "; ".join(f"`{_portable(c)}`" for c in dict.fromkeys(r.get("command", "?") for r in rows))
             + ". N points uniform in the unit ball of R^d (seed 0). The fast method's CPU seconds are one "
             "call for all N rows (potential and gradient). Two comparisons, which answer different questions:",
             "",
             "- **Implementation peer** (is the project's code as fast as the library it wraps?): for "
             "`method=\"fmm\"` the same FMM3D call made bare, `fmm3dpy.lfmm3d(eps=tol, sources=x.T, "
             "charges=ones, pg=2)` as in FMM3D's own example (`python/examples/lfmm3d_example.py`); column "
             "`fast / impl.` (about 1: the project adds nothing). `method=\"nufft\"` (NFFT fast summation) has "
             "no bare-library equivalent: its column is a floor, the same plan's FINUFFT transforms alone "
             "(no near field), so `fast / impl.` above 1 is the near field and the rest of the method.",
             "- **Algorithm comparison** (how much does O(N) or O(N log N) save against O(N^2)?): "
             "PyKeOps-CPU (float64, `OMP_NUM_THREADS=1`, compiled and warmed before the timing) reduces M "
             "random target rows against the sources with the formula listed below (factorised: `.auto_factorize()` "
             "on the expression; rows measured before that are superseded, see below), and its CPU seconds "
             "are **scaled** by N(N - 1) / (pairs it evaluated): its "
             "work is proportional to the pairs, so the scaled time is what the full N x N sum would take "
             "(not run). This ratio compares algorithms, not implementations. The fast method's errors are "
             "over the same M rows against KeOps's float64 rows; KeOps's rows are checked against the exact "
             "direct sums (`riesz_row_sums`) on the first rows of them.", ""]
    for (d, s_), f in {(r["d"], r["s"]): r["keops_formula"] for r in rows}.items():
        lines.append(f"* d = {d}, s = {s_:g}: KeOps formula `{f}`")
    if old:
        lines += ["", "**Superseded rows** (struck through): measured before the KeOps formula was factorised on "
                  "the expression. Those runs set the global flag `keopscore.auto_factorize = True` and never "
                  "called `.auto_factorize()` on the expression; with it KeOps's generated code evaluated `rsqrt` "
                  "once per occurrence of `t`, so the direct sum was slower than KeOps users write it and these "
                  "ratios overstate what the fast methods save. They had no implementation peer either. "
                  "`python benchmarks/bench_fast.py keops --n 1000000 --rows 2000 --json K.json`, then `report` "
                  "with the other JSON files, regenerates them (CPU-hours at this N; `make results` rebuilds "
                  "this page from the stored JSON)."]

    def cell(r, key, fmt):
        return "-" if r.get(key) is None else format(r[key], fmt)

    lines += ["", "| d | s | method | tol | fast CPU (s) | fast wall (s) | impl. peer CPU (s) | fast / impl. (CPU) | "
              "KeOps rows M | KeOps sources | KeOps CPU on M rows (s) | scale | KeOps CPU scaled (s) | "
              "direct sum / fast (CPU): algorithm comparison | pot. rel. 2-norm err | pot. max row rel err | "
              "grad rel. 2-norm err | grad max row rel err | KeOps vs exact (max rel, rows checked) | "
              "process peak RSS so far (MiB) |", "|" + "---|" * 20]
    for r in rows:
        ratio = f"{r['ratio_cpu']:.0f}" if _factorised(r) else f"~~{r['ratio_cpu']:.0f}~~ (superseded)"
        lines.append(
            f"| {r['d']} | {r['s']:g} | {r['method']} | {r['tol']:g} | {r['fast_cpu_s']:.1f} | "
            f"{r['fast_wall_s']:.1f} | {cell(r, 'impl_cpu_s', '.1f')} | {cell(r, 'fast_over_impl_cpu', '.2f')} | "
            f"{r['rows']} | {r['keops_sources']} | {r['keops_rows_cpu_s']:.2f} | "
            f"{r['keops_scale']:.1f} | {r['keops_cpu_s']:.0f} | {ratio} | {r['pot_rel_l2']:.2e} | "
            f"{r['pot_rel_max']:.2e} | {r['grad_rel_l2']:.2e} | {r['grad_rel_max']:.2e} | "
            f"{max(r['keops_vs_exact_pot_rel_max'], r['keops_vs_exact_grad_rel_max']):.1e} ({r['check_rows']}) | "
            f"{r['peak_rss_mib']:.0f} |")
    impl = [r for r in rows if r.get("impl_peer")]
    if impl:
        lines += ["", "Implementation peers: " + "; ".join(
            f"d = {r['d']}, {r['method']}, tol = {r['tol']:g}: {r['impl_peer']}"
            + (f" (agrees with the project's sums to {r['impl_agreement']:.1e}, relative)"
               if r.get("impl_agreement") is not None else "") for r in impl) + "."]

    def rate(r):
        out = f"{r['keops_pairs_per_cpu_s']:.3g} pairs per CPU second (d = {r['d']}"
        if "keops_small_pairs_per_cpu_s" in r:
            out += (f"; {r['keops_small_pairs_per_cpu_s']:.3g} on a cloud of {r['keops_small_n']} points, half "
                    "targets and half sources, whose sources fit in the caches: at that rate the ratio would "
                    f"be {r['ratio_cpu_at_small_rate']:.0f}x")
        return out + ")" + ("" if _factorised(r) else " [superseded formula]")

    def goal(r):
        head = f"d = {r['d']}, tol = {r['tol']:g}: "
        if not _factorised(r):
            return head + ("not assessed (the direct sum was the superseded, unfactorised formula; "
                           f"{r['fast_cpu_s']:.0f} CPU s, largest 2-norm error "
                           f"{max(r['pot_rel_l2'], r['grad_rel_l2']):.1e})")
        ok = max(r["pot_rel_l2"], r["grad_rel_l2"]) <= 1e-7 and r["fast_cpu_s"] <= 120 and r["ratio_cpu"] >= 30
        return head + (f"{'met' if ok else 'not met'} ({r['ratio_cpu']:.0f}x, {r['fast_cpu_s']:.0f} CPU s, largest "
                       f"2-norm error {max(r['pot_rel_l2'], r['grad_rel_l2']):.1e}; largest single-row error "
                       f"{max(r['pot_rel_max'], r['grad_rel_max']):.1e}, "
                       f"{'within' if max(r['pot_rel_max'], r['grad_rel_max']) <= 1e-7 else 'above'} 1e-7)")

    lines += ["", "The rows ran in this order in one process (one run: the ratios are comparable); the peak "
              "RSS is the process's peak so far (`ru_maxrss`), so a row's value includes the earlier rows'.",
              "", "KeOps ran at " + ", ".join(rate(r) for r in rows)
              + ". At this N each KeOps-CPU target row streams all N sources from memory (24 MB in d = 3); "
              "the M-row subset has the per-row cost of the full sum, so the scaled time is that of the "
              "full sum on this machine"
              + ". Goal of issue 24 at this N, an algorithm comparison: relative error at most 1e-7 within 120 "
              "CPU s, and at least 30x faster than the factorised KeOps direct sum (read here with the relative "
              "2-norm error over the M rows; the single-row errors are beside it): "
              + "; ".join(goal(r) for r in rows) + "."]
    if any(r["s"] == 0.0 for r in rows):
        lines += ["", "For the log kernel the row sum of -log r over N points uniform in the unit disk is about "
                  "N (1 - |x|^2) / 2, which vanishes at the rim: rows near it have small sums, so their relative "
                  "potential error can be large without a large absolute error (the gradient rows have no such "
                  "zero)."]
    return lines + [""]


def _report_dynamics(runs):
    """Markdown lines of the section: Langevin and MALA runs at large N (``langevin`` runs)."""
    lines = ["## 5. Projected Langevin and MALA at large N: the box, and free space with a confining potential "
             "(the ball: section 3)", "",
             "Each row is one `python benchmarks/bench_fast.py langevin ...` run (command below the table), "
             "one configuration at a time, niced, on the shared machine: the mean-field Riesz energy "
             "(`RieszEnergy(s, normalization=\"mean_field\", method=...)`; in free space plus "
             "`ExternalPotential` V(x) = a |x|^2 / 2 summed over the particles), `projected_langevin(..., "
             "grad_scale=1)` or `mala(energy.value_and_grad, ..., grad_scale=1)` (proposals with a particle "
             "outside the domain rejected), run by `run_langevin` with a `LangevinRecorder` (summaries of all "
             "N particles and a fixed subsample per record); every file opens with "
             "`xarray.open_dataset(path, engine=\"h5netcdf\")`. Start: N points uniform in the unit ball of "
             "R^d (inside every domain; the equilibrium measure of free space with a = 1, lam = 1 in d = 2 "
             "and 3). A step is one gradient (Langevin) or one energy and gradient at the "
             "proposal (MALA; its initial evaluation is the column 'init CPU'). CPU seconds per step: the "
             "mean over the recorded intervals divided by the steps in each, recording included; `step / one "
             "gradient`: that over the CPU seconds of one gradient of the same energy at the start of the same run "
             "(absolute CPU seconds move with the other load on the shared machine; this ratio much less; `-`: "
             "a run from before the column).", "",
             "| d | s | method | tol | domain | sampler | eta | beta | steps | CPU s / step | step / one gradient "
             "(CPU, same run) | wall s / step | init CPU (s) | acceptance | peak RSS (MiB) | records | second moment "
             "first -> last | max radius last | file (MiB) |", "|" + "---|" * 19]
    for g in runs:
        ic = np.asarray(g["intervals_cpu_s"])
        per = ic.mean() / g["record_every"] if ic.size else float("nan")
        acc = f"{g['acceptance_rate']:.2f} ({g['accepted']}/{g['steps_done']})" if "acceptance_rate" in g else "-"
        iw = np.asarray(g["intervals_s"])
        wper = iw.mean() / g["record_every"] if iw.size else float("nan")
        space = g["space"].replace("|", "\\|")        # a table cell
        lines.append(f"| {g['d']} | {g['s']:g} | {g['method']} | {g['tol']:g} | {space} | {g['sampler']} | "
                     f"{g['eta']:g} | {g['beta']:g} | {g['steps_done']} of {g['steps']} | {per:.1f} | "
                     + (f"{per / g['one_grad_cpu_s']:.2f}" if g.get("one_grad_cpu_s") else "-") + f" | {wper:.0f} | "
                     f"{g['init_cpu_s']:.1f} | {acc} | {g['peak_rss_mib']:.0f} | {g['records']} | "
                     f"{g['second_moment'][0]:.5f} -> {g['second_moment'][-1]:.5f} | {g['max_radius'][-1]:.4f} | "
                     f"{g['file_mib']:.1f} |")
    if any(g["sampler"] == "mala" for g in runs):
        lines += ["", "MALA proposes all N d coordinates at once and accepts or rejects the whole proposal, so at "
                  "a fixed eta its acceptance falls as N grows (the step it accepts shrinks like (N d)^(-1/3) "
                  "at stationarity: Roberts and Rosenthal, J. R. Stat. Soc. B 60 (1998) 255-268, and faster "
                  "from the uniform start, which is not the finite-N Gibbs law); the MALA rows give the "
                  "acceptance at N = 10^6 for the eta they name."]
    lines += ["", "Commands (niced):", ""] + [f"- `{_portable(g['command'])}`" for g in runs]
    done = {(g["d"], g["sampler"], g["space_kind"]) for g in runs if g["n"] >= 10 ** 6}
    todo = [f"d = {d}, {smp}, {sp}" for d in (3, 2) for smp in ("langevin", "mala") for sp in ("box", "free")
            if (d, smp, sp) not in done]
    if todo:
        lines += ["", "Not measured at N = 10^6 (no run in the JSON): " + "; ".join(todo) + "."]
    return lines + [""]


def cmd_report(args):
    data = {}
    for p in args.json:                      # lists are concatenated, the crossover mapping merged
        for key, val in json.loads(Path(p).read_text()).items():
            if isinstance(val, list):
                data[key] = data.get(key, []) + val
            elif isinstance(val, dict) and key != "langevin":
                data[key] = {**data.get(key, {}), **val}
            else:
                data[key] = val
    lines = ["# Fast Riesz sums: FMM3D and NFFT summation at large N", "",
             "Generated by `python benchmarks/bench_fast.py report --json "
             + " ".join(args.json) + " --md " + args.md + "` from the runs below (each section names "
             "its command; the merged measurements are in `docs/results/bench_fast.json`, and `report "
             "--json docs/results/bench_fast.json` regenerates this page from them: Regenerated by `make results` "
             "that way, since the measurements take CPU-hours at N = 10^6). One thread, float64, on a shared 2-core machine "
             f"({platform.processor() or platform.machine()}), heavily loaded by other jobs while these "
             "ran: CPU seconds of the process are the meaningful times; wall-clock times include the "
             "waiting for a core.", ""]
    groups = {}
    for r in data.get("accuracy", []):
        groups.setdefault((r["n"], r.get("d", 3), r.get("s", 1.0), r.get("method", "fmm")), []).append(r)
    for gi, ((n_, d_, s_, m_), a) in enumerate(groups.items()):
        lines += [f"## 1{'abcdefgh'[gi]}. Accuracy, time and memory: {m_}, N = {n_}, d = {d_}, s = {s_:g} "
                  "(unit ball)", "",
                  "Command: " + "; ".join(f"`{c}`" for c in dict.fromkeys(r.get("command", "?") for r in a)), "",
                  "Errors against the exact direct sums over %d random rows (`riesz_row_sums`, %.1f s "
                  "for those rows); potential = row sum of g_s, gradient = row sum of grad g_s."
                  % (a[0]["rows"], a[0]["direct_rows_s"]), "",
                  "| tol | wall (s) | CPU (s) | pot. rel. 2-norm err | pot. max row rel err | grad rel. 2-norm err "
                  "| grad max row rel err | peak RSS (MiB) |", "|---|---|---|---|---|---|---|---|"]
        for r in a:
            lines.append(f"| {r['tol']:g} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | {r['pot_rel_l2']:.2e} | "
                         f"{r['pot_rel_max']:.2e} | {r['grad_rel_l2']:.2e} | {r['grad_rel_max']:.2e} | "
                         f"{r['peak_rss_mib']:.0f} |")
        lines += ["", "Peak RSS is the process's peak so far (positions, the method's work arrays and "
                  "outputs)."]
        d3 = [r for r in data.get("crossover", []) if r["d"] == d_ and r["s"] == s_]
        if d3:
            big = max(d3, key=lambda r: r["n"])
            rate = big["n"] * (big["n"] - 1) / big["numba_s"]
            direct = a[0]["n"] * (a[0]["n"] - 1) / rate
            lines += [f"The direct Numba kernel ran at {rate:.3g} ordered pairs per CPU second at N = "
                      f"{big['n']} (table 2), so the direct sums at N = {a[0]['n']} would take about "
                      f"{direct:.0f} CPU s (extrapolated, not run): "
                      + ", ".join(f"{direct / r['cpu_s']:.0f}x the fast method's CPU time at tol = {r['tol']:g}"
                                  for r in a) + "."]
        lines += [""]
    if "crossover" in data:
        c = data["crossover"]
        lines += ["## 2. Crossover with the direct Numba kernel (tol = %g)" % c[0]["tol"], "",
                  "Commands: " + "; ".join(f"`{x}`" for x in dict.fromkeys(r.get("command", "?") for r in c))
                  + ". Interleaved, minimum CPU seconds of the rounds (one thread); unit ball of R^d.", "",
                  "| d | s | method | N | Numba direct (CPU s) | fast (CPU s) | Numba / fast |", "|---|---|---|---|---|---|---|"]
        for r in c:
            lines.append(f"| {r['d']} | {r['s']:g} | {r['method']} | {r['n']} | {r['numba_s']:.3f} | "
                         f"{r['fast_s']:.3f} | {r['numba_s'] / r['fast_s']:.2f} |")
        lines += ["", "Crossover N (the fast method faster from there on among the sizes measured; None: "
                      "never): " + "; ".join(f"{k}: {v}" for k, v in data.get("crossover_n", {}).items()), ""]
    if "langevin" in data:
        g = data["langevin"]
        iv, ic = np.asarray(g["intervals_s"]), np.asarray(g.get("intervals_cpu_s", []))
        per = g["record_every"]
        lines += ["## 3. Projected Langevin at N = %d (d = 3, s = 1, unit ball, method=\"fmm\")" % g["n"], "",
                  f"Command: `python benchmarks/bench_fast.py langevin --n {g['n']} --steps {g['steps']} "
                  f"--tol {g['tol']:g} --eta {g['eta']:g} --beta {g['beta']:g} --particles {g['particles']} "
                  f"--record-every {per}{' --no-energy' if 'energy' not in g['xarray_vars'] else ''} --out DIR`"
                  " (niced, in the background). The mean-field Coulomb energy "
                  "(`RieszEnergy(s=1, normalization=\"mean_field\", method=\"fmm\")`), "
                  "`projected_langevin(..., grad_scale=1)` in `Ball(1.0)`, run by `run_langevin` with a "
                  "`LangevinRecorder` callback (summaries of all N particles and a fixed subsample of "
                  f"{g['particles']} per record); the HDF5 file opens with "
                  "`xarray.open_dataset(path, engine=\"h5netcdf\")` (variables: "
                  + ", ".join(g["xarray_vars"]) + f"; {g['records']} records).", "",
                  f"- steps done: {g['steps_done']} of {g['steps']}"
                  + (f" ({g['stopped']}: the deadline of this session; on the shared machine the run got "
                     f"{ic.sum() / iv.sum():.2f} of a core, CPU over wall seconds)" if g.get("stopped") and ic.size else "")
                  + ".",
                  f"- CPU seconds per interval of {per} steps: " + ", ".join(f"{v:.1f}" for v in ic)
                  + (f"; {np.mean(ic) / per:.1f} CPU s per step (one FMM gradient, the projection and the "
                     "noise)" if ic.size else ""),
                  "- wall seconds per interval (waiting for a core included): " + ", ".join(f"{v:.0f}" for v in iv),
                  f"- peak resident memory: {g['peak_rss_mib']:.0f} MiB; file size {g['file_mib']:.1f} MiB",
                  "- second moment (mean |x|^2 over all N) at the records: "
                  + ", ".join(f"{v:.5f}" for v in g["second_moment"]), ""]
    if data.get("keops"):
        lines += _report_keops(data["keops"])
    if data.get("dynamics"):
        lines += _report_dynamics(data["dynamics"])
    lines += ["## Notes", "",
              "- `method=\"fmm\"` (FMM3D `lfmm3d`, kernel 1/(4 pi r), self term dropped) is multiplied by "
              "4 pi; its `tol` is FMM3D's `eps`. For near-coincident pairs the error is set by the rounding "
              "of the coordinates in FMM3D's root box, about u R / r relative per pair (u = 2^-53, R the "
              "cloud's extent, r the pair's distance), whatever `tol`: `tests/test_riesz_fast.py` checks "
              "the bound with pairs down to r = 1e-9.",
              "- `method=\"nufft\"` (NFFT fast summation, Potts and Steidl, SIAM J. Sci. Comput. 24 (2003), "
              "doi:10.1137/S1064827502400984, with an incomplete-gamma near/far split) is tested against "
              "the direct sums in `tests/test_riesz_fast_nufft.py` (d = 1, 2, 3; s = -1.5 ... 2.5 and the "
              "log kernel; softening). Its cost at a fixed precision is a balance of near pairs and "
              "Fourier modes that grows with N faster than the FMM's; the mode count is capped "
              "(`NUFFT_MAX_MODES`), above which the near field takes the rest.",
              ""]
    Path(args.md).write_text("\n".join(lines))
    if args.save_json:
        Path(args.save_json).write_text(json.dumps(data, indent=1))
    print("\n".join(lines))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("accuracy")
    a.add_argument("--n", type=int, default=1_000_000)
    a.add_argument("--tol", type=float, nargs="+", default=[1e-6, 1e-8])
    a.add_argument("--rows", type=int, default=100)
    a.add_argument("--d", type=int, default=3)
    a.add_argument("--s", type=float, default=1.0)
    a.add_argument("--method", choices=("fmm", "nufft"), default="fmm")
    c = sub.add_parser("crossover")
    c.add_argument("--sizes", type=int, nargs="+", default=[2000, 5000, 10000, 20000, 50000])
    c.add_argument("--k", type=int, default=3)
    c.add_argument("--d", type=int, nargs="+", default=[3, 2, 1], help="dimensions, paired with --s")
    c.add_argument("--s", type=float, nargs="+", default=[1.0, 0.0, 0.0], help="exponents, paired with --d")
    lg = sub.add_parser("langevin")
    lg.add_argument("--n", type=int, default=1_000_000)
    lg.add_argument("--steps", type=int, default=20)
    lg.add_argument("--tol", type=float, default=1e-6)
    lg.add_argument("--eta", type=float, default=1e-3)
    lg.add_argument("--beta", type=float, default=1e3)
    lg.add_argument("--lam", type=float, default=1.0)
    lg.add_argument("--particles", type=int, default=10_000)
    lg.add_argument("--record-every", type=int, default=10)
    lg.add_argument("--no-energy", action="store_true")
    lg.add_argument("--overwrite", action="store_true")
    lg.add_argument("--out", required=True)
    lg.add_argument("--name", default=None, help="file stem in OUT (default 'langevin')")
    lg.add_argument("--space", choices=("ball", "box", "free"), default="ball",
                    help="unit ball, cube [-1, 1]^d, or free space with V(x) = confine |x|^2 / 2")
    lg.add_argument("--sampler", choices=("langevin", "mala"), default="langevin")
    lg.add_argument("--d", type=int, choices=(1, 2, 3), default=3)
    lg.add_argument("--s", type=float, default=1.0)
    lg.add_argument("--method", choices=("fmm", "nufft", "auto"), default="fmm")
    lg.add_argument("--confine", type=float, default=1.0, help="a of V(x) = a |x|^2 / 2 (--space free)")
    k = sub.add_parser("keops")
    k.add_argument("--n", type=int, default=1_000_000)
    k.add_argument("--rows", type=int, default=2000,
                   help="M target rows of the KeOps direct sum, the algorithm comparison (scaled by the pairs)")
    k.add_argument("--check-rows", type=int, default=20, help="rows of the KeOps reference checked exactly")
    k.add_argument("--small-n", type=int, default=20000,
                   help="KeOps's pair rate also on a cloud of this size (half targets, half sources)")
    k.add_argument("--d", type=int, nargs="+", default=[3, 2])
    k.add_argument("--s", type=float, nargs="+", default=[1.0, 0.0])
    k.add_argument("--method", choices=("fmm", "nufft"), nargs="+", default=["fmm", "nufft"])
    k.add_argument("--tol", type=float, nargs="+", default=[1e-6, 1e-7])
    r = sub.add_parser("report")
    r.add_argument("--json", nargs="+", required=True)
    r.add_argument("--md", required=True)
    r.add_argument("--save-json", default=None, help="also write the merged measurements here")
    for q in (a, c, lg, k):
        q.add_argument("--seed", type=int, default=0)
        q.add_argument("--json", default=None)
    args = p.parse_args(argv)
    COMMAND[0] = "python benchmarks/bench_fast.py " + " ".join(sys.argv[1:] if argv is None else argv)
    if args.cmd == "report":
        return cmd_report(args)
    res = {"accuracy": cmd_accuracy, "crossover": cmd_crossover, "langevin": cmd_langevin,
           "keops": cmd_keops}[args.cmd](args)
    if getattr(args, "json", None):
        Path(args.json).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
