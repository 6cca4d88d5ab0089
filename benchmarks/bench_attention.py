"""Benchmark: the bundled Transformer (``engine/attention``) against the same model in PyTorch (CPU).

Run from the repository root (torch is optional: the extra ``bench``)::

    python benchmarks/bench_attention.py                  # 1 thread, default sizes
    python benchmarks/bench_attention.py --quick --k 3
    python benchmarks/bench_attention.py --large --k 3 --md docs/results/bench_attention.md \
        --json docs/results/bench_attention.json          # what `make results` runs
    python -m benchmarks --only attention                 # the same rows in the suite

Allocator (read first). The project and its torch peers run in **one process** whose glibc malloc
is configured by :data:`ALLOC_ENV`, set in the environment before the process starts (glibc
reads these variables once, at start-up; https://www.gnu.org/software/libc/manual/html_node/Memory-Allocation-Tunables.html
and mallopt(3)): ``MALLOC_ARENA_MAX=1`` (one heap), ``MALLOC_MMAP_MAX_=0`` (large blocks come from
the heap instead of a fresh ``mmap`` per allocation), ``MALLOC_MMAP_THRESHOLD_=33554432`` (fixed
at glibc's largest value: no dynamic threshold), ``MALLOC_TRIM_THRESHOLD_=68719476736`` (the heap
is never trimmed back) and ``MALLOC_TOP_PAD_=67108864``. With glibc's defaults torch's large
temporaries were mapped and unmapped on every call (about 400,000 minor page faults per
training step at B = 8, L = 4096, where the project, which reuses its buffers, had none): the
earlier ratio at that size measured the kernel's page zeroing as much as torch. The settings
hold for both sides alike. ``python benchmarks/bench_attention.py`` re-executes itself with them
when they are not in its start-up environment (``/proc/self/environ``), and
:func:`suite_rows` (``python -m benchmarks``) runs this script in a child process with them, so
the suite's other modules keep glibc's defaults. The report states the settings in effect.

Peers (:data:`PEER_VARIANTS`), each the same model written as torch's documentation writes it:

* ``eager``: the model as a function of a dict of parameter tensors, autograd, and
  ``torch.optim.Adam(..., fused=True)`` (the single fused kernel for all parameters; the
  ``fused`` argument of https://pytorch.org/docs/stable/generated/torch.optim.Adam.html, whose
  note calls the fused implementation the fastest; supported on CPU since torch 2.4; where the
  build refuses it the step falls back to ``foreach=True`` and the row's notes say so);
* ``compile``: the same function wrapped in ``torch.compile`` (TorchInductor, the default backend;
  https://pytorch.org/tutorials/intermediate/torch_compile_tutorial.html: "torch.compile(model)"),
  the backward through AOTAutograd's compiled graph, and the same fused Adam. Compilation is
  done in the untimed warm-up. ``--quick`` (the suite's smoke size) skips this variant with a
  skipped row: its compilation takes tens of seconds per graph.

Two measures, each timed interleaved (project, eager, compiled, project, ...; one untimed warm-up
round) with the minimum and the median of ``--k`` rounds, float32 (the main job's dtype):

1. One forward and backward pass of :class:`KernelizedLinearAttention` (D = 128, H = 2 heads,
   softplus features with m = 256 particles per head, ``qk="shared"``: the main job's layer),
   batch B = 4, L = 512, 2048, 4096 tokens, against the same layer in torch with autograd.
2. One training step of :class:`TransformerClassifier` (the main job's sizes: 2 post-LN layers,
   D = 128, d_ff = 256, m = 256; dropout 0 so both compute the same function; batch 64,
   L = 128, padded rows) and an Adam step (lr 2e-4), against the same model and torch's Adam.

``agreement``: largest difference of outputs, loss and gradients (each relative to its largest
entry), measured once per peer from identical parameters before the timing.

Page faults (issue 24, item 5): after the timing, each implementation is called ``--k`` more
times alone and the minor page faults (``resource.getrusage(RUSAGE_SELF).ru_minflt``) and the
process CPU time (user + system) of each call are recorded; the notes give the median faults
per call and the ratio of the median CPU times. On a machine shared with other work the
CPU-time ratio is the steadier of the two ratios. ``--md``/``--json`` write the report (B = 8,
L = 4096 added to measure 1 and as a training step with ``--large``: the sizes of the issue).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: glibc malloc settings of the process that runs the project and its torch peers (module
#: docstring, "Allocator"): both sides run under them, in one process started with them.
ALLOC_ENV = {
    "MALLOC_ARENA_MAX": "1",
    "MALLOC_MMAP_MAX_": "0",
    "MALLOC_MMAP_THRESHOLD_": "33554432",
    "MALLOC_TRIM_THRESHOLD_": "68719476736",
    "MALLOC_TOP_PAD_": "67108864",
}
#: The torch peers of every measure (module docstring, "Peers"): eager and ``torch.compile``.
PEER_VARIANTS = ("eager", "compile")
#: The peers' names in the rows.
PEER_NAMES = {"attention": {"eager": "torch eager autograd", "compile": "torch.compile autograd"},
              "train": {"eager": "torch eager + fused Adam", "compile": "torch.compile + fused Adam"}}
_REEXEC = "RIESZFLOW_BENCH_ALLOC_REEXEC"     # set on the re-executed process: never loop


def startup_env() -> dict:
    """The environment this process was started with (``/proc/self/environ``; else ``os.environ``)."""
    try:
        raw = Path("/proc/self/environ").read_bytes()
    except OSError:
        return dict(os.environ)
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def alloc_env_in_effect() -> bool:
    """True if this process started with every setting of :data:`ALLOC_ENV`."""
    env = startup_env()
    return all(env.get(k) == v for k, v in ALLOC_ENV.items())


def alloc_note() -> str:
    """The allocator settings in effect, for the rows' notes and the report."""
    if alloc_env_in_effect():
        return "allocator: " + " ".join(f"{k}={v}" for k, v in ALLOC_ENV.items()) + " (both sides, one process)"
    return ("allocator: glibc defaults (ALLOC_ENV not in this process's start-up environment: run "
            "`python benchmarks/bench_attention.py`, which sets it)")


def _torch_features(torch, x, omega, tau, floor, m):
    """Softplus features with l1 renormalisation (``engine.features.SoftplusFeatureMap``)."""
    u = x @ omega.transpose(-1, -2)[:, None] / tau              # (H, B, L, m)
    g = torch.nn.functional.softplus(u) + floor
    return (math.sqrt(m) / g.sum(-1, keepdim=True)) * g


def feature_spec(fm) -> tuple:
    """(tau, floor, m) of a feature map as Python numbers: the torch peers hold no project objects."""
    return float(fm.tau), float(fm.floor), int(fm.m)


def torch_linear_attention(torch, p, x, keym, n_heads, spec, eps=0.0):
    """Normalised linear attention with shared q = k (``KernelizedLinearAttention``, qk="shared").

    ``p``: torch tensors omega (H, m, d_k), w_v, b_v, w_o, b_o; ``x`` (B, L, D); ``keym`` (B, L);
    ``spec``: :func:`feature_spec` of the layer's feature map.
    """
    b, l, d = x.shape
    q = x.reshape(b, l, n_heads, d // n_heads).permute(2, 0, 1, 3)
    v = (x @ p["w_v"] + p["b_v"]).reshape(b, l, n_heads, d // n_heads).permute(2, 0, 1, 3)
    phi = _torch_features(torch, q, p["omega"], *spec)
    phik = phi * keym[None, :, :, None]
    num = phi @ (phik.transpose(-1, -2) @ v)
    den = (phi @ phik.sum(2)[..., None])[..., 0] + eps
    a = num / den[..., None]
    return a.permute(1, 2, 0, 3).reshape(b, l, d) @ p["w_o"] + p["b_o"]


def model_spec(model) -> dict:
    """The sizes and constants of a ``TransformerClassifier`` as Python numbers (for the torch peers)."""
    return {"n_heads": int(model.config["n_heads"]), "d_model": int(model.config["d_model"]),
            "layers": [{"features": feature_spec(fm), "attn_eps": float(model.layers[i].attn.eps),
                        "ln1_eps": float(model.layers[i].ln1.eps), "ln2_eps": float(model.layers[i].ln2.eps)}
                       for i, fm in enumerate(model.feature_maps)]}


def torch_classifier_loss(torch, p, ids, mask, labels, spec):
    """Mean cross-entropy of ``TransformerClassifier`` (post-LN, dropout 0) written in torch.

    ``p``: the parameter tensors by the project's names; ``spec``: :func:`model_spec`.
    """
    F = torch.nn.functional
    n_heads, d = spec["n_heads"], spec["d_model"]
    keym = mask.to(p["embed.token"].dtype)
    x = p["embed.token"][ids] + p["embed.position"][: ids.shape[1]]
    for i, layer in enumerate(spec["layers"]):
        pre = f"layers.{i}."
        attn = {k: p[pre + "attn." + k] for k in ("omega", "w_v", "b_v", "w_o", "b_o")}
        a = torch_linear_attention(torch, attn, x, keym, n_heads, layer["features"], layer["attn_eps"])
        h = F.layer_norm(x + a, (d,), p[pre + "ln1.gamma"], p[pre + "ln1.beta"], eps=layer["ln1_eps"])
        f = F.gelu(h @ p[pre + "ffn.w1"] + p[pre + "ffn.b1"], approximate="tanh") @ p[pre + "ffn.w2"] \
            + p[pre + "ffn.b2"]
        x = F.layer_norm(h + f, (d,), p[pre + "ln2.gamma"], p[pre + "ln2.beta"], eps=layer["ln2_eps"])
    w = keym / keym.sum(1, keepdim=True)
    pooled = (w[:, None, :] @ x)[:, 0, :]
    logits = pooled @ p["classifier.w"] + p["classifier.b"]
    return F.cross_entropy(logits, labels)


def torch_adam(torch, params, lr):
    """``torch.optim.Adam(params, lr, fused=True)``; ``foreach=True`` where this build refuses ``fused``.

    Returns
    -------
    (torch.optim.Adam, str)
        The optimiser and what it runs (for the notes).
    """
    try:
        return torch.optim.Adam(params, lr=lr, betas=(0.9, 0.999), eps=1e-8, fused=True), "fused Adam"
    except (RuntimeError, ValueError, TypeError) as e:      # fused Adam not supported by this CPU build
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return (torch.optim.Adam(params, lr=lr, betas=(0.9, 0.999), eps=1e-8, fused=False, foreach=True),
                f"foreach Adam (fused=True refused by this torch build: {msg})")


def _maybe_compile(torch, fn, variant):
    """``fn`` for the eager peer, ``torch.compile(fn)`` for the compiled one."""
    if variant == "eager":
        return fn
    if variant == "compile":
        return torch.compile(fn)
    raise ValueError(f"variant must be one of {PEER_VARIANTS}, got {variant!r}")


def _failure(e) -> str:
    msg = str(e).strip().splitlines()
    return f"{type(e).__name__}: {msg[-1] if msg else ''}"


def _rel(pairs):
    import numpy as np

    out = 0.0
    for a, b in pairs:
        a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
        out = max(out, float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30)))
    return out


def attention_case(torch, b, l, variants=("eager",), seed=0):
    """One linear-attention forward + backward at (B, L), the project and its torch peers.

    Returns
    -------
    project : callable
    peers : dict of str to callable or str
        Per variant of :data:`PEER_VARIANTS` asked for: the peer, or why it could not run
        (``torch.compile`` failing here).
    agreement : dict of str to float
        Per peer that runs: the largest relative difference of outputs and gradients.
    """
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
    spec = feature_spec(fm)

    def project():
        y, cache = layer.forward(params, x, mask)
        dx, grads = layer.backward(dy, cache)
        return y, dx, grads

    keym = torch.ones((b, l), dtype=torch.float32)
    dyt = torch.from_numpy(dy)

    def make_peer(variant):
        tp = {k: torch.from_numpy(params[k].copy()).requires_grad_(True)
              for k in ("omega", "w_v", "b_v", "w_o", "b_o")}
        fwd = _maybe_compile(torch, lambda xt, p: torch_linear_attention(torch, p, xt, keym, h, spec), variant)

        def peer():
            xt = torch.from_numpy(x).requires_grad_(True)
            for t in tp.values():
                t.grad = None
            y = fwd(xt, tp)
            y.backward(dyt)
            return y, xt.grad, {k: t.grad for k, t in tp.items()}

        return peer

    y, dx, g = project()
    peers, agree = {}, {}
    for variant in variants:
        peer = make_peer(variant)
        try:
            yt, dxt, gt = peer()                   # the compiled peer compiles here (untimed)
        except Exception as e:  # noqa: BLE001 - torch.compile needs a C++ toolchain: report why
            peers[variant] = f"{variant} peer failed here: {_failure(e)}"
            continue
        peers[variant] = peer
        agree[variant] = _rel([(y, yt.detach().numpy()), (dx, dxt.numpy())]
                              + [(g[k], gt[k].numpy()) for k in ("omega", "w_v", "w_o")])
    return project, peers, agree


def train_case(torch, b, l, variants=("eager",), vocab=10_000, seed=0):
    """One TransformerClassifier step + Adam at batch (B, L), the project and its torch peers.

    Returns ``(project, peers, agreement, adam)`` as :func:`attention_case`, ``adam``: per peer,
    what its optimiser runs (:func:`torch_adam`). Every peer starts from the project's initial
    parameters; the agreement (loss and gradients) is measured there, before any step.
    """
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
    spec = model_spec(model)
    initial = {k: model.params[k].copy() for k in names}
    ids_t, mask_t, labels_t = torch.from_numpy(ids), torch.from_numpy(mask), torch.from_numpy(labels)
    loss, grads, _ = model.loss_and_grads(ids, mask, labels)      # at the initial parameters
    opt = Adam(model.params, names, lr=2e-4)

    def project():
        loss, grads, _ = model.loss_and_grads(ids, mask, labels)
        opt.step(grads)
        return loss

    def make_peer(variant):
        tp = {k: torch.from_numpy(initial[k].copy()).requires_grad_(True) for k in names}
        loss_fn = _maybe_compile(
            torch, lambda p, i, mk, lb: torch_classifier_loss(torch, p, i, mk, lb, spec), variant)
        lt = loss_fn(tp, ids_t, mask_t, labels_t)                  # compiles here (untimed)
        lt.backward()
        agree = _rel([(loss, lt.item())] + [(grads[k], tp[k].grad.numpy()) for k in names])
        topt, adam = torch_adam(torch, list(tp.values()), lr=2e-4)

        def peer():
            topt.zero_grad(set_to_none=True)
            loss = loss_fn(tp, ids_t, mask_t, labels_t)
            loss.backward()
            topt.step()
            return loss

        return peer, agree, adam

    peers, agree, adams = {}, {}, {}
    for variant in variants:
        try:
            peers[variant], agree[variant], adams[variant] = make_peer(variant)
        except Exception as e:  # noqa: BLE001 - torch.compile needs a C++ toolchain: report why
            peers[variant] = f"{variant} peer failed here: {_failure(e)}"
    return project, peers, agree, adams


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


def fault_notes(prof, peer="torch"):
    """The notes' text of :func:`fault_profile` for the keys ``project`` and ``peer``."""
    a, b = prof["project"], prof[peer]
    ratio = a["cpu_s"] / b["cpu_s"] if b["cpu_s"] > 0 else float("nan")
    return (f"page faults per call: project {a['faults']:.0f}, {peer} {b['faults']:.0f}; CPU time per call "
            f"project/{peer} {ratio:.2f} (system time {a['sys_s']:.2f} s vs {b['sys_s']:.2f} s)")


def suite_rows(k: int = 5, quick: bool = False, large: bool = False) -> list:
    """Rows of the benchmark suite (``python -m benchmarks``; contract in ``benchmarks/suite.py``).

    Runs :func:`measure_rows` in this process if it started with :data:`ALLOC_ENV`, else in a
    child process (``python benchmarks/bench_attention.py --json ...``) started with it, so that
    the project and its peers share the allocator settings and the suite's other modules keep
    glibc's defaults.
    """
    if alloc_env_in_effect():
        return measure_rows(k, quick, large)
    from suite import suite_threads

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rows.json"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--k", str(k), "--threads", str(suite_threads()),
               "--json", str(out)] + (["--quick"] if quick else []) + (["--large"] if large else [])
        proc = subprocess.run(cmd, env={**os.environ, **ALLOC_ENV, _REEXEC: "1"}, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-12:]
            raise RuntimeError(f"{' '.join(cmd)} exited with {proc.returncode}:\n" + "\n".join(tail))
        return json.loads(out.read_text())["rows"]


def measure_rows(k: int = 5, quick: bool = False, large: bool = False) -> list:
    """The rows, measured in this process (see :func:`suite_rows` for the allocator settings).

    Linear attention forward + backward at B = 4, L = 512, 2048, 4096 (quick: B = 2, L = 128;
    ``large``: also B = 8, L = 4096) and a Transformer train step + Adam at batch 64 x 128 tokens
    (quick: 8 x 32; ``large``: also 8 x 4096), the project against each torch peer of
    :data:`PEER_VARIANTS` (one row per peer; the compiled peer is skipped at ``quick``); target
    1.0 (issue 14: parity or better, keep it). The notes carry the allocator settings, the
    optimiser and the page faults and CPU time per call (:func:`fault_profile`).
    """
    from _interleave import interleaved
    from suite import make_row, optional_peer, skipped_row

    torch, why = optional_peer("torch")
    alloc = alloc_note()
    variants = ("eager",) if quick else PEER_VARIANTS
    no_compile = ("not run at --quick: torch.compile's compilation takes tens of seconds per graph; "
                  "`python benchmarks/bench_attention.py` runs it")
    rows = []

    def add_rows(measure, project_name, kind, project, peers, agree, target_notes, adams=None):
        def peer_name(variant):                    # says foreach where the build refused fused Adam
            name = PEER_NAMES[kind][variant]
            return name if (adams or {}).get(variant, "fused").startswith("fused") else name.replace("fused", "foreach")

        live = {v: f for v, f in peers.items() if callable(f)}
        measured = {}
        if live:
            fns = {"project": project, **{f"torch {v}": f for v, f in live.items()}}
            st = interleaved(fns, k)
            prof = fault_profile(fns, k)
            for v in live:
                measured[v] = make_row(measure, project_name, peer_name(v), st, project_key="project",
                                       peer_key=f"torch {v}", target=1.0, agreement=agree[v], tolerance=1e-3,
                                       notes=f"{target_notes(v)}; {alloc}; {fault_notes(prof, f'torch {v}')}")
        for variant in PEER_VARIANTS:                  # one row per peer, in the order of PEER_VARIANTS
            if variant in measured:
                rows.append(measured[variant])
            elif torch is None:
                rows.append(skipped_row(measure, project_name, peer_name(variant), why))
            elif variant not in peers:
                rows.append(skipped_row(measure, project_name, peer_name(variant), no_compile))
            else:
                rows.append(skipped_row(measure, project_name, peer_name(variant), peers[variant]))

    for b, l in ([(2, 128)] if quick else [(4, 512), (4, 2048), (4, 4096)] + ([(8, 4096)] if large else [])):
        measure = f"linear attention fwd+bwd B={b} L={l} D=128 H=2 m=256 float32"
        if torch is None:
            add_rows(measure, "KernelizedLinearAttention", "attention", None, {}, {}, None)
            continue
        project, peers, agree = attention_case(torch, b, l, variants)
        add_rows(measure, "KernelizedLinearAttention", "attention", project, peers, agree,
                 lambda v: f"softplus features, qk shared (the main job's layer); peer: torch {v}")
    for b, l in ([(8, 32)] if quick else [(64, 128)] + ([(8, 4096)] if large else [])):
        measure = f"Transformer train step + Adam B={b} L={l} (2 layers, D=128, m=256) float32"
        if torch is None:
            add_rows(measure, "TransformerClassifier + Adam", "train", None, {}, {}, None)
            continue
        project, peers, agree, adams = train_case(torch, b, l, variants)
        add_rows(measure, "TransformerClassifier + Adam", "train", project, peers, agree,
                 lambda v: (f"dropout 0, padded rows; agreement: loss and gradients at the same parameters; "
                            f"peer: torch {v} with {adams.get(v, '?')}"), adams)
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="threads for BLAS, OpenMP and torch (default 1)")
    parser.add_argument("--k", type=int, default=5, help="interleaved timing rounds (min and median reported)")
    parser.add_argument("--quick", action="store_true", help="small sizes (no torch.compile peer)")
    parser.add_argument("--large", action="store_true", help="also B = 8, L = 4096 (issue 24's sizes)")
    parser.add_argument("--md", default=None, help="also write the report (markdown) to this file")
    parser.add_argument("--json", default=None, help="also write the rows (JSON) to this file")
    parser.add_argument("--show-allocator", action="store_true",
                        help="print the allocator settings this process runs under, and exit")
    args = parser.parse_args(argv)
    if args.show_allocator:
        print(alloc_note())
        return 0
    if args.threads < 1 or args.k < 1:
        parser.error("--threads and --k must be >= 1")
    here = Path(__file__).resolve().parent
    sys.path[:0] = [str(here), str(here.parent)]
    from suite import pin_threads, table

    pin_threads(args.threads)
    from _interleave import provenance, write_outputs

    prov = provenance(args.threads)
    prov["allocator"] = alloc_note()
    t0 = time.perf_counter()
    rows = measure_rows(args.k, args.quick, args.large)
    body = ("Columns as in the suite (docs/results/bench_suite.md): ratio = project time / torch time of "
            f"the minima and medians of k = {args.k} interleaved rounds (< 1: the project faster), one row "
            "per torch peer: eager autograd and torch.compile, the training step with torch.optim.Adam(..., "
            "fused=True) (the notes say if the build refused it). Both sides ran in one process with the "
            f"{prov['allocator']} (benchmarks/bench_attention.py docstring, \"Allocator\"). The notes give the "
            "page faults per call (ru_minflt) and the ratio of CPU times per call.\n\n"
            + table([{"module": "bench_attention", "status": "ok", "reason": None, "rows": rows}]) + "\n")
    command = ("python benchmarks/bench_attention.py" + (" --quick" if args.quick else "")
               + (" --large" if args.large else "") + f" --k {args.k}"
               + (f" --md {args.md}" if args.md else "") + (f" --json {args.json}" if args.json else ""))
    write_outputs(args, "Results: benchmarks/bench_attention.py", command, prov, time.perf_counter() - t0,
                  body, {"rows": rows, "allocator_env": ALLOC_ENV, "allocator_in_effect": alloc_env_in_effect()})
    return 0


def _reexec_with_alloc_env():
    """Re-execute this script with :data:`ALLOC_ENV` unless it started with it (once: no loop)."""
    if alloc_env_in_effect() or os.environ.get(_REEXEC):
        return
    env = {**os.environ, **ALLOC_ENV, _REEXEC: "1"}
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, os.path.abspath(__file__), *sys.argv[1:]], env)


if __name__ == "__main__":
    _reexec_with_alloc_env()
    raise SystemExit(main())
