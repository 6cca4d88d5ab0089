"""Benchmark: the bundled Transformer (``engine/attention``) against the same model in PyTorch (CPU).

Run from the repository root (torch is optional: the extra ``bench``)::

    python benchmarks/bench_attention.py                  # 1 thread, default sizes
    python benchmarks/bench_attention.py --quick --k 3
    python -m benchmarks --only attention                 # the same rows in the suite

Two measures, each timed interleaved (A, B, A, B, ...; one untimed warm-up round) with the
minimum and the median of ``--k`` rounds, float32 (the main job's dtype):

1. One forward and backward pass of :class:`KernelizedLinearAttention` (D = 128, H = 2 heads,
   softplus features with m = 256 particles per head, ``qk="shared"``: the main job's layer),
   batch B = 4, L = 512, 2048, 4096 tokens, against the same layer in torch with autograd.
2. One training step of :class:`TransformerClassifier` (the main job's sizes: 2 post-LN layers,
   D = 128, d_ff = 256, m = 256; dropout 0 so both compute the same function; batch 64,
   L = 128, padded rows) and an Adam step (lr 2e-4), against the same model and
   ``torch.optim.Adam``.

``agreement``: largest difference of outputs, loss and gradients (each relative to its largest
entry), measured once from identical parameters before the timing.

Page faults (issue 24, item 5): after the timing, each implementation is called ``--k`` more
times alone and the minor page faults (``resource.getrusage(RUSAGE_SELF).ru_minflt``) and the
process CPU time (user + system) of each call are recorded; the notes give the median faults
per call and the ratio of the median CPU times (system time is mostly the kernel zeroing
freshly mapped pages). On a machine shared with other work the CPU-time ratio is the steadier
of the two ratios. ``--md``/``--json`` write the report (B = 8, L = 4096 added to measure 1 and
as a training step: the sizes of the issue).
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path


def _torch_features(torch, x, omega, fm):
    """Softplus features with l1 renormalisation (``engine.features.SoftplusFeatureMap``)."""
    u = x @ omega.transpose(-1, -2)[:, None] / fm.tau              # (H, B, L, m)
    g = torch.nn.functional.softplus(u) + fm.floor
    return (math.sqrt(fm.m) / g.sum(-1, keepdim=True)) * g


def torch_linear_attention(torch, p, x, keym, n_heads, fm, eps=0.0):
    """Normalised linear attention with shared q = k (``KernelizedLinearAttention``, qk="shared").

    ``p``: torch tensors omega (H, m, d_k), w_v, b_v, w_o, b_o; ``x`` (B, L, D); ``keym`` (B, L).
    """
    b, l, d = x.shape
    q = x.reshape(b, l, n_heads, d // n_heads).permute(2, 0, 1, 3)
    v = (x @ p["w_v"] + p["b_v"]).reshape(b, l, n_heads, d // n_heads).permute(2, 0, 1, 3)
    phi = _torch_features(torch, q, p["omega"], fm)
    phik = phi * keym[None, :, :, None]
    num = phi @ (phik.transpose(-1, -2) @ v)
    den = (phi @ phik.sum(2)[..., None])[..., 0] + eps
    a = num / den[..., None]
    return a.permute(1, 2, 0, 3).reshape(b, l, d) @ p["w_o"] + p["b_o"]


def torch_classifier_loss(torch, p, ids, mask, labels, model):
    """Mean cross-entropy of ``TransformerClassifier`` (post-LN, dropout 0) written in torch."""
    F = torch.nn.functional
    cfg = model.config
    n_heads, d = cfg["n_heads"], cfg["d_model"]
    keym = mask.to(p["embed.token"].dtype)
    x = p["embed.token"][ids] + p["embed.position"][: ids.shape[1]]
    for i, fm in enumerate(model.feature_maps):
        pre = f"layers.{i}."
        attn = {k: p[pre + "attn." + k] for k in ("omega", "w_v", "b_v", "w_o", "b_o")}
        a = torch_linear_attention(torch, attn, x, keym, n_heads, fm, model.layers[i].attn.eps)
        h = F.layer_norm(x + a, (d,), p[pre + "ln1.gamma"], p[pre + "ln1.beta"], eps=model.layers[i].ln1.eps)
        f = F.gelu(h @ p[pre + "ffn.w1"] + p[pre + "ffn.b1"], approximate="tanh") @ p[pre + "ffn.w2"] \
            + p[pre + "ffn.b2"]
        x = F.layer_norm(h + f, (d,), p[pre + "ln2.gamma"], p[pre + "ln2.beta"], eps=model.layers[i].ln2.eps)
    w = keym / keym.sum(1, keepdim=True)
    pooled = (w[:, None, :] @ x)[:, 0, :]
    logits = pooled @ p["classifier.w"] + p["classifier.b"]
    return F.cross_entropy(logits, labels)


def _rel(pairs):
    import numpy as np

    out = 0.0
    for a, b in pairs:
        a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
        out = max(out, float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30)))
    return out


def attention_case(torch, b, l, seed=0):
    """(project fn, torch fn, agreement) of one linear-attention forward + backward at (B, L)."""
    import numpy as np

    from rieszflow.engine.attention import KernelizedLinearAttention
    from rieszflow.engine.features import make_feature_map

    d, h, m = 128, 2, 256
    rng = np.random.default_rng(seed)
    fm = make_feature_map("softplus", d // h, m, rng=rng)
    layer = KernelizedLinearAttention(d, h, fm, qk="shared")
    params = layer.init_params(rng, dtype=np.float32)
    x = rng.standard_normal((b, l, d)).astype(np.float32)
    dy = rng.standard_normal((b, l, d)).astype(np.float32)
    mask = np.ones((b, l), dtype=bool)

    def project():
        y, cache = layer.forward(params, x, mask)
        dx, grads = layer.backward(dy, cache)
        return y, dx, grads

    tp = {k: torch.from_numpy(params[k].copy()).requires_grad_(True) for k in ("omega", "w_v", "b_v", "w_o", "b_o")}
    keym = torch.ones((b, l), dtype=torch.float32)
    dyt = torch.from_numpy(dy)

    def peer():
        xt = torch.from_numpy(x).requires_grad_(True)
        for t in tp.values():
            t.grad = None
        y = torch_linear_attention(torch, tp, xt, keym, h, fm)
        y.backward(dyt)
        return y, xt.grad, {k: t.grad for k, t in tp.items()}

    y, dx, g = project()
    yt, dxt, gt = peer()
    agree = _rel([(y, yt.detach().numpy()), (dx, dxt.numpy())]
                 + [(g[k], gt[k].numpy()) for k in ("omega", "w_v", "w_o")])
    return project, peer, agree


def train_case(torch, b, l, vocab=10_000, seed=0):
    """(project fn, torch fn, agreement) of one TransformerClassifier step + Adam at batch (B, L)."""
    import numpy as np

    from rieszflow.engine.attention import Adam, TransformerClassifier

    rng = np.random.default_rng(seed)
    model = TransformerClassifier(vocab_size=vocab, max_len=max(l, 2), d_model=128, n_heads=2, d_ff=256,
                                  n_layers=2, dropout=0.0, attention="linear", feature_map="softplus", m=256,
                                  seed=seed, dtype="float32")
    ids = rng.integers(0, vocab, size=(b, l))
    lengths = rng.integers(max(1, l // 2), l + 1, size=b)
    mask = np.arange(l)[None, :] < lengths[:, None]
    labels = rng.integers(0, 2, size=b)
    names = model.parameter_names()
    tp = {k: torch.from_numpy(model.params[k].copy()).requires_grad_(True) for k in names}
    ids_t, mask_t, labels_t = torch.from_numpy(ids), torch.from_numpy(mask), torch.from_numpy(labels)
    # agreement at the identical initial parameters, before any step
    loss, grads, _ = model.loss_and_grads(ids, mask, labels)
    lt = torch_classifier_loss(torch, tp, ids_t, mask_t, labels_t, model)
    lt.backward()
    agree = _rel([(loss, lt.item())] + [(grads[k], tp[k].grad.numpy()) for k in names])
    opt = Adam(model.params, names, lr=2e-4)
    topt = torch.optim.Adam(list(tp.values()), lr=2e-4, betas=(0.9, 0.999), eps=1e-8)

    def project():
        loss, grads, _ = model.loss_and_grads(ids, mask, labels)
        opt.step(grads)
        return loss

    def peer():
        topt.zero_grad(set_to_none=True)
        loss = torch_classifier_loss(torch, tp, ids_t, mask_t, labels_t, model)
        loss.backward()
        topt.step()
        return loss

    return project, peer, agree


def fault_profile(fns, k):
    """Median minor page faults and CPU seconds (user + system, and system alone) per call of each fn.

    Parameters
    ----------
    fns : dict of str to callable
    k : int
        Calls of each function, round-robin.

    Returns
    -------
    dict of str to dict
        ``faults``, ``cpu_s``, ``sys_s``: medians over the k calls.
    """
    import resource
    import statistics

    out = {name: {"faults": [], "cpu_s": [], "sys_s": []} for name in fns}
    for _ in range(k):
        for name, f in fns.items():
            r0 = resource.getrusage(resource.RUSAGE_SELF)
            f()
            r1 = resource.getrusage(resource.RUSAGE_SELF)
            out[name]["faults"].append(r1.ru_minflt - r0.ru_minflt)
            out[name]["sys_s"].append(r1.ru_stime - r0.ru_stime)
            out[name]["cpu_s"].append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
    return {name: {q: statistics.median(v) for q, v in d.items()} for name, d in out.items()}


def fault_notes(prof):
    """The notes' text of :func:`fault_profile` for the keys ``project`` and ``torch``."""
    a, b = prof["project"], prof["torch"]
    ratio = a["cpu_s"] / b["cpu_s"] if b["cpu_s"] > 0 else float("nan")
    return (f"page faults per call: project {a['faults']:.0f}, torch {b['faults']:.0f}; CPU time per call "
            f"project/torch {ratio:.2f} (system time {a['sys_s']:.2f} s vs {b['sys_s']:.2f} s)")


def suite_rows(k: int = 5, quick: bool = False, large: bool = False) -> list:
    """Rows of the benchmark suite (``python -m benchmarks``; contract in ``benchmarks/suite.py``).

    Linear attention forward + backward at B = 4, L = 512, 2048, 4096 (quick: B = 2, L = 128;
    ``large``: also B = 8, L = 4096) and a Transformer train step + Adam at batch 64 x 128 tokens
    (quick: 8 x 32; ``large``: also 8 x 4096), project against PyTorch CPU; target 1.0 (issue 14:
    parity or better, keep it). The notes carry the page faults and CPU time per call
    (:func:`fault_profile`).
    """
    from _interleave import interleaved
    from suite import make_row, optional_peer, skipped_row

    torch, why = optional_peer("torch")
    rows = []
    for b, l in ([(2, 128)] if quick else [(4, 512), (4, 2048), (4, 4096)] + ([(8, 4096)] if large else [])):
        measure = f"linear attention fwd+bwd B={b} L={l} D=128 H=2 m=256 float32"
        if torch is None:
            rows.append(skipped_row(measure, "KernelizedLinearAttention", "torch autograd", why))
            continue
        project, peer, agree = attention_case(torch, b, l)
        st = interleaved({"project": project, "torch": peer}, k)
        prof = fault_profile({"project": project, "torch": peer}, k)
        rows.append(make_row(measure, "KernelizedLinearAttention", "torch autograd", st, project_key="project",
                             peer_key="torch", target=1.0, agreement=agree, tolerance=1e-3,
                             notes="softplus features, qk shared (the main job's layer); " + fault_notes(prof)))
    for b, l in ([(8, 32)] if quick else [(64, 128)] + ([(8, 4096)] if large else [])):
        measure = f"Transformer train step + Adam B={b} L={l} (2 layers, D=128, m=256) float32"
        if torch is None:
            rows.append(skipped_row(measure, "TransformerClassifier + Adam", "torch autograd + Adam", why))
            continue
        project, peer, agree = train_case(torch, b, l)
        st = interleaved({"project": project, "torch": peer}, k)
        prof = fault_profile({"project": project, "torch": peer}, k)
        rows.append(make_row(measure, "TransformerClassifier + Adam", "torch autograd + Adam", st,
                             project_key="project", peer_key="torch", target=1.0, agreement=agree,
                             tolerance=1e-3, notes="dropout 0, padded rows; agreement: loss and "
                                                   "gradients at the same parameters; " + fault_notes(prof)))
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="threads for BLAS, OpenMP and torch (default 1)")
    parser.add_argument("--k", type=int, default=5, help="interleaved timing rounds (min and median reported)")
    parser.add_argument("--quick", action="store_true", help="small sizes")
    parser.add_argument("--large", action="store_true", help="also B = 8, L = 4096 (issue 24's sizes)")
    parser.add_argument("--md", default=None, help="also write the report (markdown) to this file")
    parser.add_argument("--json", default=None, help="also write the rows (JSON) to this file")
    args = parser.parse_args(argv)
    if args.threads < 1 or args.k < 1:
        parser.error("--threads and --k must be >= 1")
    here = Path(__file__).resolve().parent
    sys.path[:0] = [str(here), str(here.parent)]
    from suite import pin_threads, table

    pin_threads(args.threads)
    from _interleave import provenance, write_outputs

    prov = provenance(args.threads)
    t0 = time.perf_counter()
    rows = suite_rows(args.k, args.quick, args.large)
    body = ("Columns as in the suite (docs/results/bench_suite.md): ratio = project time / torch time of "
            f"the minima and medians of k = {args.k} interleaved rounds (< 1: the project faster); the "
            "notes give the page faults per call (ru_minflt) and the ratio of CPU times per call "
            "(benchmarks/bench_attention.py docstring).\n\n"
            + table([{"module": "bench_attention", "status": "ok", "reason": None, "rows": rows}]) + "\n")
    command = ("python benchmarks/bench_attention.py" + (" --quick" if args.quick else "")
               + (" --large" if args.large else "") + f" --k {args.k}"
               + (f" --md {args.md}" if args.md else "") + (f" --json {args.json}" if args.json else ""))
    write_outputs(args, "Results: benchmarks/bench_attention.py", command, prov, time.perf_counter() - t0,
                  body, {"rows": rows})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
