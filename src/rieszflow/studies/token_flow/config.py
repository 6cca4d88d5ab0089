"""Configuration of the token-flow study (``rieszflow token-flow``), a strict frozen dataclass."""
from __future__ import annotations

import dataclasses

from rieszflow.engine.features import ATTENTION_FEATURE_MAPS
from rieszflow.engine.tokenflow.integrate import INTEGRATORS

from rieszflow.config import StudyConfig, is_int, is_real

__all__ = ["TokenFlowConfig", "QUICK_OVERRIDES", "GPU_OVERRIDES"]

_VARIANTS = ("SA", "USA")
_INTEGRATORS = INTEGRATORS  # the engine's flow integrators
_FEATURES = ATTENTION_FEATURE_MAPS  # the engine registry's positive maps






@dataclasses.dataclass(frozen=True)
class TokenFlowConfig(StudyConfig):
    """Every knob of the token-flow study; unknown keys and bad values raise ValueError.

    Tokens are i.i.d. uniform on S^{d-1} unless stated; attention is softmax with
    ``Q = K = V = I`` (GLPR's setting) unless stated.

    Parameters
    ----------
    n_tokens : int
        Tokens per cloud of the clustering grid (section A).
    dims : tuple of int
        Ambient dimensions d of the grid (tokens on S^{d-1}), each >= 2.
    betas : tuple of float
        Inverse temperatures of the grid, each > 0.
    variant : {"SA", "USA"}
        Normalisation of the grid, kernel and mean-field flows (sections A, D, E).
        Section C always runs SA, the protocol of spec T33 (see ``phase_dt``).
    n_seeds : int
        Independent initial clouds per (beta, d) (run as one batch).
    t_end, dt : float
        Horizon and step of the grid flows (``t_end`` a multiple of ``dt``).
    integrator : str
        Integrator of the grid, kernel and mean-field flows (engine.tokenflow.INTEGRATORS).
    n_records : int
        Recorded times of the grid flows (uniform in [0, t_end]).
    cluster_eps : float
        Cluster rule: tokens linked if ``<x_i, x_j> > 1 - cluster_eps`` (connected components).
    wendel_cases : tuple of (n, d)
        Cases of the Wendel table (section B), checked by Monte Carlo.
    wendel_draws : int
        Monte Carlo draws per case.
    phase_d, phase_n, phase_batch : int
        Dimension, tokens and batch of the phase-boundary runs (section C; spec T33),
        always with SA attention whatever ``variant``.
    phase_betas : tuple of float
        Inverse temperatures of the phase boundary.
    phase_t_end, phase_dt : float
        Horizon and step of GLPR's scheme ``x <- normalise(x + dt a(x))`` for SA (the
        authors' softmax runs and spec T33: dt = 0.1, T = 30). Their USA runs rescale
        the step to ``dt / max(sqrt(beta) e^{beta - 1/2}, 1)``; without that, USA at
        dt = 0.1 would judge the scheme rather than the theory, so section C does not
        run USA.
    phase_delta : float
        Clustered pair: ``<x_i, x_j> > 1 - phase_delta``; the crossing time is the first
        time the batch-mean fraction of such pairs exceeds 1/2; the theory is the time
        at which the SA equiangular ODE reaches ``gamma_beta = 1 - phase_delta``.
    phase_tolerance : float
        Relative tolerance of the spec (0.15).
    phase_beta_check_max : float
        The tolerance is asserted for betas <= this (spec: 7); above it the spec
        predicts no crossing by ``phase_t_end`` when the ODE time exceeds it.
    kernel_n, kernel_d : int
        Tokens and dimension of the kernel comparison (section D).
    kernel_beta : float
        Softmax inverse temperature of the kernel comparison.
    kernel_features : tuple of str
        Fixed random-feature maps compared with softmax (each estimates
        ``exp(beta <q, k>)`` only for "favor"; the others are compared as they are).
    kernel_m : tuple of int
        Feature counts m.
    kernel_t_end, kernel_dt : float
    kernel_records : int
    learned_layer, learned_head : int
        Head of a main-job file (``--kernel-from``) whose learned particles drive the flow.
    kernel_from : str or None
        That main-job HDF5 file (``--kernel-from``); None: no learned-kernel flow.
    mf_n : tuple of int
        Mean field (section E): each N is compared with 4N tokens from the same law.
    mf_beta : float
    mf_d : int
    mf_offset : float
        Initial law: normalise(N(0, I_d) + mf_offset e_d) (spec T38 uses 0.5).
    mf_times : tuple of float
        Times (multiples of ``mf_dt``) at which W1 is measured.
    mf_dt : float
    mf_seeds : int
        Independent repetitions per N.
    mf_max_exact : int
        Largest N * 4N solved by exact W1 (POT emd2); sliced W1 is always reported too.
    chunk : int
        Query/key block of the exact softmax kernel.
    seed : int
    backend : {"numpy", "cupy"}
    dtype : {"float64", "float32"}

    References
    ----------
    spec paper004_attention_theory.md, sections 6.1 and 8 (T26, T30, T31, T33, T38);
    GLPR, arXiv:2312.10794.
    """

    config_label = "token-flow config"      # the name in error messages

    n_tokens: int = 64
    dims: tuple = (2, 3, 8, 64)
    betas: tuple = (0.5, 1.0, 4.0, 9.0)
    variant: str = "SA"
    n_seeds: int = 4
    t_end: float = 30.0
    dt: float = 0.05
    integrator: str = "rk4_retract"
    n_records: int = 61
    cluster_eps: float = 1e-3
    wendel_cases: tuple = ((5, 3), (10, 3), (8, 4), (16, 3), (32, 8), (64, 64))
    wendel_draws: int = 4000
    phase_d: int = 128
    phase_n: int = 32
    phase_batch: int = 64
    phase_betas: tuple = (1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0)
    phase_t_end: float = 30.0
    phase_dt: float = 0.1
    phase_delta: float = 1e-3
    phase_tolerance: float = 0.15
    phase_beta_check_max: float = 7.0
    kernel_n: int = 128
    kernel_d: int = 3
    kernel_beta: float = 1.0
    kernel_features: tuple = ("favor",)
    kernel_m: tuple = (16, 64, 256, 1024)
    kernel_t_end: float = 10.0
    kernel_dt: float = 0.05
    kernel_records: int = 11
    learned_layer: int = 0
    learned_head: int = 0
    kernel_from: str | None = None
    mf_n: tuple = (64, 256, 1024)
    mf_beta: float = 1.0
    mf_d: int = 3
    mf_offset: float = 0.5
    mf_times: tuple = (0.0, 1.0, 2.0, 4.0)
    mf_dt: float = 0.05
    mf_seeds: int = 2
    mf_max_exact: int = 4_200_000
    chunk: int = 256
    seed: int = 0
    backend: str = "numpy"
    dtype: str = "float64"

    def __post_init__(self):
        def fail(name, allowed):
            raise ValueError(f"{name}={getattr(self, name)!r} is not allowed; expected {allowed}")

        def pos_int(name, minimum=1):
            v = getattr(self, name)
            if not is_int(v) or v < minimum:
                fail(name, f"an integer >= {minimum}")

        def pos_real(name, nonneg=False):
            v = getattr(self, name)
            if not is_real(v) or (v < 0 if nonneg else v <= 0):
                fail(name, "a finite number " + (">= 0" if nonneg else "> 0"))

        def seq(name, check, what, min_len=1):
            v = getattr(self, name)
            if isinstance(v, list):
                v = tuple(v)
                object.__setattr__(self, name, v)
            if not isinstance(v, tuple) or len(v) < min_len or not all(check(e) for e in v):
                fail(name, f"a tuple of at least {min_len} {what}")

        def multiple(name_t, name_dt):
            t, dt = float(getattr(self, name_t)), float(getattr(self, name_dt))
            k = round(t / dt)
            if abs(k * dt - t) > 1e-9 * max(1.0, t):
                raise ValueError(f"{name_t}={t} must be a multiple of {name_dt}={dt}")

        for name in ("n_tokens", "n_seeds", "wendel_draws", "phase_d", "phase_n", "phase_batch",
                     "kernel_n", "kernel_records", "mf_seeds", "mf_max_exact", "chunk"):
            pos_int(name)
        pos_int("n_records", 2)
        pos_int("kernel_d", 2)
        pos_int("mf_d", 2)
        for name in ("learned_layer", "learned_head", "seed"):
            pos_int(name, 0)
        if self.kernel_from is not None and not (isinstance(self.kernel_from, str) and self.kernel_from):
            fail("kernel_from", "None or the path of a main-job HDF5 file")
        for name in ("t_end", "dt", "cluster_eps", "phase_t_end", "phase_dt", "phase_delta",
                     "phase_tolerance", "phase_beta_check_max", "kernel_beta", "kernel_t_end",
                     "kernel_dt", "mf_beta", "mf_dt"):
            pos_real(name)
        pos_real("mf_offset", nonneg=True)
        if not self.phase_delta < 1:
            fail("phase_delta", "a number in (0, 1)")
        if self.n_tokens < 2 or self.phase_n < 2:
            raise ValueError(f"n_tokens={self.n_tokens} and phase_n={self.phase_n} must be >= 2 "
                             f"(clusters need pairs)")
        seq("dims", lambda e: is_int(e) and e >= 2, "integers >= 2")
        seq("betas", lambda e: is_real(e) and e > 0, "finite numbers > 0")
        seq("phase_betas", lambda e: is_real(e) and e > 0, "finite numbers > 0")
        seq("kernel_m", lambda e: is_int(e) and e >= 1, "integers >= 1")
        seq("kernel_features", lambda e: e in _FEATURES, f"names in {_FEATURES}")
        seq("mf_n", lambda e: is_int(e) and e >= 2, "integers >= 2")
        seq("mf_times", lambda e: is_real(e) and e >= 0, "finite numbers >= 0")
        wc = self.wendel_cases
        if isinstance(wc, list):
            object.__setattr__(self, "wendel_cases", tuple(tuple(c) for c in wc))
        seq("wendel_cases", lambda c: isinstance(c, (tuple, list)) and len(c) == 2
            and all(is_int(e) and e >= 1 for e in c), "(n, d) pairs of integers >= 1", min_len=0)
        object.__setattr__(self, "wendel_cases", tuple(tuple(c) for c in self.wendel_cases))
        if len(set(self.mf_n)) != len(self.mf_n):
            fail("mf_n", "distinct sizes")
        if list(self.mf_times) != sorted(set(self.mf_times)):
            fail("mf_times", "strictly increasing times")
        for t in self.mf_times:
            k = round(t / self.mf_dt)
            if abs(k * self.mf_dt - t) > 1e-9 * max(1.0, t):
                raise ValueError(f"mf_times entry {t} must be a multiple of mf_dt={self.mf_dt}")
        multiple("t_end", "dt")
        multiple("phase_t_end", "phase_dt")
        multiple("kernel_t_end", "kernel_dt")
        if self.variant not in _VARIANTS:
            fail("variant", f"one of {_VARIANTS}")
        if self.integrator not in _INTEGRATORS:
            fail("integrator", f"one of {_INTEGRATORS}")
        if self.integrator in ("euler", "rk4"):
            raise ValueError(f"integrator={self.integrator!r} does not keep tokens on the sphere; use "
                             f"one of 'euler_retract', 'rk4_retract', 'projected_euler'")
        if self.backend not in ("numpy", "cupy"):
            fail("backend", "'numpy' or 'cupy'")
        if self.dtype not in ("float64", "float32"):
            fail("dtype", "'float64' or 'float32'")

    @classmethod
    def quick(cls, **changes) -> "TokenFlowConfig":
        """The ``--quick`` preset (a minute or two on 2 CPU cores), with ``changes`` on top."""
        return cls().replace(**{**QUICK_OVERRIDES, **changes})


#: What ``--quick`` changes: every section runs, at small sizes.
QUICK_OVERRIDES = dict(
    n_tokens=32, dims=(2, 3, 32), betas=(1.0, 9.0), n_seeds=3, t_end=20.0, n_records=41,
    wendel_cases=((5, 3), (10, 3), (8, 4), (32, 3)), wendel_draws=2000,
    phase_batch=16, phase_betas=(1.0, 3.0, 5.0, 7.0, 9.0),
    kernel_n=64, kernel_m=(16, 256), kernel_t_end=5.0, kernel_records=6,
    mf_n=(32, 128, 512), mf_times=(0.0, 1.0, 2.0), mf_seeds=2,
)

#: What ``--backend cupy`` changes (unless the user overrides): N up to 1e5 tokens.
GPU_OVERRIDES = dict(
    n_tokens=1024, kernel_n=100_000, kernel_m=(64, 256, 1024), kernel_t_end=5.0,
    mf_n=(1563, 6250, 25_000), mf_seeds=2, phase_batch=256, chunk=8192,
)
