"""KGD of learned attention kernels: the ``rieszflow kgd --from-run`` file of a main-job run.

The estimators (:class:`rieszflow.learning.kernel_geometry.LearnedKernels`, the sphere and token
distances, the random-feature noise reference) live in :mod:`rieszflow.learning.kernel_geometry`,
shared with the NLP study, which records how far Phase A moved each run's kernel; this module
computes every analysis of one file, stores it (kind ``kgd_learned``) and formats its report.

References
----------
Peng & Yi, "Kernel Geometry Divergence", doi:10.20944/preprints202606.0665.v1, Def. 4.1, Thm 3.1;
paper 000 (random features as interacting particles), App. D (feature maps), App. F.2 (Phase A).
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from rieszflow.engine.storage import RunFileError, TrajectoryWriter
from rieszflow.learning.kernel_geometry import N_DEGREES, LearnedKernels
from rieszflow.studies.base import check_hdf5_out

__all__ = ["write_learned_kgd", "format_learned", "run_from_run"]

_VARS = {  # name -> (dims, long_name)
    "kgd_to_initial": (("time", "layer", "head"), "zonal KGD (Funk-Hecke, rotation-averaged) of the "
                                                  "kernel to the initial kernel on S^(d_k-1): sqrt of "
                                                  "kgd2_to_initial, 0 where that estimate is negative"),
    "kgd2_to_initial": (("time", "layer", "head"), "bias-corrected zonal KGD^2 estimate to the initial "
                                                   "kernel (unclipped; may be negative)"),
    "kgd2_to_initial_se": (("time", "layer", "head"), "standard error of the zonal KGD^2 estimate"),
    "sphere_to_initial": (("time", "layer", "head"), "L2(mu x mu) distance to the initial kernel on the sphere"),
    "sphere2_to_initial_se": (("time", "layer", "head"), "standard error of the squared sphere distance"),
    "nonzonal2_to_initial": (("time", "layer", "head"), "non-zonal part ||D||^2 - KGD^2 on the sphere"),
    "tokens_to_initial": (("time", "layer", "head"), "Hilbert-Schmidt distance to the initial kernel on "
                                                     "held-out tokens"),
    "tokens_to_initial_se": (("time", "layer", "head"), "standard error of the token distance"),
    "ratio_to_noise_sphere": (("time", "layer", "head"), "sphere distance / random-feature noise at the same m"),
    "ratio_to_noise_tokens": (("time", "layer", "head"), "token distance / random-feature noise at the same m"),
    "noise_sphere": (("layer", "head"), "mean sphere distance of the initial kernel to redraws of its law"),
    "noise_tokens": (("layer", "head"), "mean token distance of the initial kernel to redraws of its law"),
    "kgd_to_softmax": (("time", "layer", "head"), "scale-free zonal KGD to exp(<x,y>/sqrt(d_k)) on the sphere"),
    "sphere_to_softmax": (("time", "layer", "head"), "scale-free L2 distance to the softmax kernel, sphere"),
    "tokens_to_softmax": (("time", "layer", "head"), "scale-free HS distance to the softmax kernel, tokens"),
    "kgd_between_heads": (("time", "layer"), "zonal KGD between heads 0 and 1 on the sphere"),
    "sphere_between_heads": (("time", "layer"), "L2 distance between heads 0 and 1 on the sphere"),
    "tokens_between_heads": (("time", "layer"), "HS distance between heads 0 and 1 on head-0 tokens"),
    "kgd_between_layers": (("time", "head"), "zonal KGD between layers 0 and 1 on the sphere"),
    "sphere_between_layers": (("time", "head"), "L2 distance between layers 0 and 1 on the sphere"),
    "kernel_sd_sphere": (("time", "layer", "head"), "standard deviation of K(x, y) over x, y uniform on "
                                                    "the sphere (scale of its non-constant part)"),
    "kernel_sd_tokens": (("time", "layer", "head"), "standard deviation of K(x_i, x_j), i != j, over "
                                                    "held-out tokens"),
    "zonal_eigenvalue": (("time", "layer", "head", "degree"), "Funk-Hecke eigenvalue lambda_l of the "
                                                              "rotation-averaged kernel"),
}


def _compute(lk: LearnedKernels) -> dict:
    T, L, H = len(lk.times), lk.n_layers, lk.n_heads
    nan = lambda *shape: np.full(shape, np.nan)
    out = {k: nan(*[{"time": T, "layer": L, "head": H, "degree": N_DEGREES}[d] for d in dims])
           for k, (dims, _) in _VARS.items()}
    for layer in range(L):
        for h in range(H):
            nz = lk.noise(layer, h)
            out["noise_sphere"][layer, h] = nz["sphere_total"]
            out["noise_tokens"][layer, h] = nz["tokens_hs"]
    for ti, t in enumerate(lk.times):
        for layer in range(L):
            for h in range(H):
                r = lk.kgd_to_initial(int(t), layer, h)
                out["kgd_to_initial"][ti, layer, h] = r["sphere_kgd"]
                out["kgd2_to_initial_se"][ti, layer, h] = r["sphere_kgd2_se"]
                out["kgd2_to_initial"][ti, layer, h] = r["sphere_kgd2"]
                out["sphere_to_initial"][ti, layer, h] = r["sphere_total"]
                out["sphere2_to_initial_se"][ti, layer, h] = r["sphere_total2_se"]
                out["nonzonal2_to_initial"][ti, layer, h] = r["sphere_residual2"]
                out["tokens_to_initial"][ti, layer, h] = r["tokens_hs"]
                out["tokens_to_initial_se"][ti, layer, h] = r["tokens_hs_se"]
                out["ratio_to_noise_sphere"][ti, layer, h] = r["ratio_sphere"]
                out["ratio_to_noise_tokens"][ti, layer, h] = r["ratio_tokens"]
                s = lk.kgd_to_softmax(int(t), layer, h)
                out["kgd_to_softmax"][ti, layer, h] = s["sphere_kgd"]
                out["sphere_to_softmax"][ti, layer, h] = s["sphere_total"]
                out["tokens_to_softmax"][ti, layer, h] = s["tokens_hs"]
                out["zonal_eigenvalue"][ti, layer, h] = lk.zonal_spectrum(int(t), layer, h)
                sd = lk.kernel_sd(int(t), layer, h)
                out["kernel_sd_sphere"][ti, layer, h] = sd["sphere"]
                out["kernel_sd_tokens"][ti, layer, h] = sd["tokens"]
            if H >= 2:
                b = lk.between_heads(int(t), layer)
                out["kgd_between_heads"][ti, layer] = b["sphere_kgd"]
                out["sphere_between_heads"][ti, layer] = b["sphere_total"]
                out["tokens_between_heads"][ti, layer] = b["tokens_hs"]
        if L >= 2:
            for h in range(H):
                b = lk.between_layers(int(t), h)
                out["kgd_between_layers"][ti, h] = b["sphere_kgd"]
                out["sphere_between_layers"][ti, h] = b["sphere_total"]
    return out


def write_learned_kgd(lk: LearnedKernels, out, *, overwrite=False) -> dict:
    """Compute every learned-kernel distance of ``lk`` and write them to an HDF5 file.

    The file (kind ``kgd_learned``) also stores the printed tables as the root attribute ``report``
    (``rieszflow report FILE`` shows them with the file's provenance), the setup and compute times
    and the sphere / token settings.

    Parameters
    ----------
    lk : LearnedKernels
    out : str or os.PathLike
        The file to write (``.h5``; kind ``kgd_learned``).
    overwrite : bool, default False
        Replace an existing file.

    Returns
    -------
    dict of str to numpy.ndarray
        The arrays written (names of the file's variables).

    Raises
    ------
    FileExistsError
        If ``out`` exists and ``overwrite`` is False.
    """
    t0 = time.perf_counter()
    arrays = _compute(lk)
    compute_seconds = time.perf_counter() - t0
    report = (format_learned(arrays, lk) + f"\n  wall time: {lk.setup_seconds:.1f} s set-up (file, held-out "
              f"tokens, redraws) + {compute_seconds:.1f} s distances")
    cfg = {"run": str(lk.path), "n_rot": lk.n_rot, "n_nodes": lk.n_nodes, "n_tokens": lk.n_tokens,
           "n_noise": lk.n_noise, "seed": lk.seed}
    attrs = {"source": "paper 003 (Peng & Yi), Def. 4.1; rieszflow.studies.kgd.learned",
             "run_config": json.dumps(lk.config), "run_status": lk.run_status,
             "feature_map": lk.map_name, "tokens": lk.tokens_note,
             "softmax_kernel": "exp(<x, y> / sqrt(d_k)), both kernels scaled to unit L2 norm",
             "rebuild_error": lk.rebuild_error,
             "setup_seconds": lk.setup_seconds, "compute_seconds": compute_seconds, "report": report}
    with TrajectoryWriter(out, "kgd_learned", config=cfg, attrs=attrs, overwrite=overwrite) as w:
        w.dimension("time", len(lk.times), coords=lk.times,
                    attrs={"long_name": "Phase A step of the particle record", "units": "1"})
        w.dimension("layer", lk.n_layers, coords=np.arange(lk.n_layers),
                    attrs={"long_name": "encoder layer index", "units": "1"})
        w.dimension("head", lk.n_heads, coords=np.arange(lk.n_heads),
                    attrs={"long_name": "attention head index", "units": "1"})
        w.dimension("degree", N_DEGREES, coords=np.arange(N_DEGREES),
                    attrs={"long_name": "spherical-harmonic degree l", "units": "1"})
        for name, (dims, ln) in _VARS.items():
            w.variable(name, dims, data=arrays[name], attrs={"long_name": ln, "units": "1"})
    return arrays


def _kgd2_text(kgd2, se):
    """``KGD^2 +- SE`` of the unclipped estimate, marked "< 2 SE" when it is not resolved from 0."""
    if not np.isfinite(kgd2):
        return "n/a"
    return f"{kgd2:+.2e} +- {se:.1e}" + (" (< 2 SE)" if kgd2 < 2 * se else "")


def format_learned(arrays, lk: LearnedKernels) -> str:
    """The learned-kernel distances of the final record (and per-time KGD to initial) as text.

    Parameters
    ----------
    arrays : dict
        From :func:`write_learned_kgd`.
    lk : LearnedKernels

    Returns
    -------
    str
    """
    lines = [f"Learned kernels of {lk.path} ({lk.map_name}, m={lk.m}, d_k={lk.d_k}, "
             f"{len(lk.times)} records at Phase A steps {lk.times[0]}..{lk.times[-1]}; sphere: "
             f"{lk.n_rot} rotations x {lk.n_nodes} nodes; tokens: "
             + (f"none: {lk.tokens_note})" if lk.tokens is None else
                f"{lk.tokens[0].shape[1]} validation tokens through the rebuilt initial network, particle "
                f"mismatch {lk.rebuild_error:.1e})"),
             "  layer head | KGD^2->init (zonal, +- SE)  sphere->init  tokens->init (SE)   | RF noise sphere/tokens "
             "| ratio sphere/tokens | ->softmax sphere / tokens, initial->final (scale-free)"]
    T = -1
    for layer in range(lk.n_layers):
        for h in range(lk.n_heads):
            g = lambda k: arrays[k][T, layer, h]
            lines.append(f"  {layer:5d} {h:4d} | {_kgd2_text(g('kgd2_to_initial'), g('kgd2_to_initial_se')):26s}"
                         f"  {g('sphere_to_initial'):.3e}"
                         f"     {g('tokens_to_initial'):.3e} ({g('tokens_to_initial_se'):.1e}) | "
                         f"{arrays['noise_sphere'][layer, h]:.3e} / {arrays['noise_tokens'][layer, h]:.3e} | "
                         f"{g('ratio_to_noise_sphere'):.2f} / {g('ratio_to_noise_tokens'):.2f} | "
                         f"{arrays['sphere_to_softmax'][0, layer, h]:.4f}->{g('sphere_to_softmax'):.4f} / "
                         f"{arrays['tokens_to_softmax'][0, layer, h]:.4f}->{g('tokens_to_softmax'):.4f}")
    if lk.n_heads >= 2:
        lines.append("  between heads 0,1 (final, sphere L2 / tokens HS): " + "; ".join(
            f"layer {l}: {arrays['sphere_between_heads'][T, l]:.3e} / {arrays['tokens_between_heads'][T, l]:.3e}"
            for l in range(lk.n_layers)))
    if lk.n_layers >= 2:
        lines.append("  between layers 0,1 (final, sphere L2): " + "; ".join(
            f"head {h}: {arrays['sphere_between_layers'][T, h]:.3e}" for h in range(lk.n_heads)))
    lines.append("  kernel scale (sd of K over pairs, final, sphere / tokens): " + "; ".join(
        f"L{l}H{h}: {arrays['kernel_sd_sphere'][T, l, h]:.3e} / {arrays['kernel_sd_tokens'][T, l, h]:.3e}"
        for l in range(lk.n_layers) for h in range(lk.n_heads)))
    lines.append("  zonal eigenvalues lambda_0, lambda_1 (initial -> final, layer 0, head 0): "
                 f"{arrays['zonal_eigenvalue'][0, 0, 0, 0]:.6f}, {arrays['zonal_eigenvalue'][0, 0, 0, 1]:.3e} -> "
                 f"{arrays['zonal_eigenvalue'][T, 0, 0, 0]:.6f}, {arrays['zonal_eigenvalue'][T, 0, 0, 1]:.3e}")
    lines.append("  zonal KGD^2 to initial over time (layer 0, head 0; bias-corrected estimate +- SE): " + ", ".join(
        f"{int(t)}: {_kgd2_text(v, se)}" for t, v, se in zip(lk.times, arrays["kgd2_to_initial"][:, 0, 0],
                                                          arrays["kgd2_to_initial_se"][:, 0, 0])))
    return "\n".join(lines)


def run_from_run(args, prog="rieszflow kgd") -> int:
    """``rieszflow kgd --from-run RUN.h5``: compute, print and store the learned-kernel distances.

    Parameters
    ----------
    args : argparse.Namespace
        With ``from_run``, ``out``, ``overwrite``, ``quiet``, ``seed``, ``n_rot``, ``n_tokens``,
        ``n_noise``.
    prog : str
        Program name for messages.

    Returns
    -------
    int
        0 on success, 2 on bad input (one line on stderr).
    """
    import sys

    run = Path(args.from_run)
    out = Path(args.out) if args.out is not None else run.with_name(run.stem + "-kgd.h5")
    try:
        check_hdf5_out(out)
    except ValueError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    if out.exists() and not args.overwrite:
        print(f"{prog}: error: {out} already exists; pass --overwrite to replace it", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    try:
        lk = LearnedKernels(run, n_rot=args.n_rot, n_tokens=args.n_tokens, n_noise=args.n_noise,
                            seed=args.seed or 0)
    except (FileNotFoundError, RunFileError, ValueError, TypeError) as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    arrays = write_learned_kgd(lk, out, overwrite=args.overwrite)
    print(format_learned(arrays, lk))
    print(f"stored: {out} (xarray.open_dataset(path, engine='h5netcdf')); wall time "
          f"{time.perf_counter() - t0:.1f} s")
    return 0
