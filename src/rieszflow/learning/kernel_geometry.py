"""Distances between learned attention kernels: the particles of a main-job file as random-feature measures.

Each head's particles ``Omega`` (``m`` rows in ``R^{d_k}``) at a recorded Phase A time define the
attention kernel ``K_Omega(x, y) = phi_Omega(x) . phi_Omega(y)`` of the run's feature map
(:mod:`rieszflow.engine.features`, rebuilt with
:func:`rieszflow.learning.runfiles.load_learned_kernel`'s options). Two distances between
kernels are measured, each with its estimator's standard error:

**On the unit sphere S^{d_k - 1}** (the setting of paper 003). ``K_Omega`` is not zonal in
general. Averaging over rotations, ``Kbar(t) = E_R[K(R x, R y)]`` for ``<x, y> = t``, is the
orthogonal projection of ``L^2(mu x mu)`` onto zonal kernels, so for a difference ``D = K1 - K2``

    ``||D||^2 = ||Dbar||^2 + ||D - Dbar||^2``,   ``||Dbar||^2 = E_t[Dbar(t)^2] = sum_l N_{d,l} (dlam_l)^2``

(Parseval, Def. 4.1): the first term is the KGD of the zonal parts (their Funk-Hecke spectra),
the second the non-zonal residual. Both are estimated from ``n_rot`` Haar-random orthonormal
pairs ``(u, v)`` and the Gauss-Jacobi nodes ``t_j`` of the law of ``<x, y>``
(:func:`rieszflow.theory.kgd.spectral.jacobi_nodes`), at the points ``x = u``,
``y_j = t_j u + sqrt(1 - t_j^2) v``: ``Dbar(t_j)`` is the mean over rotations, ``E_t[Dbar^2]`` is
estimated without bias by ``sum_j w_j (mean_j^2 - var_j / n_rot)``, the total by
``sum_j w_j mean_r D^2``; standard errors by the delta method over rotations. The reported
``KGD = sqrt(estimate)`` is 0 where the bias-corrected estimate of ``KGD^2`` is negative (kept in
the ``*2`` variables).

**Off the sphere** (the tokens the heads actually see). The Hilbert-Schmidt distance of the two
integral operators on ``L^2(nu)``, ``||D||^2_{L^2(nu x nu)} = E_{x != y ~ nu}[D(x, y)^2]``, estimated
by the U-statistic over distinct pairs of ``n_tokens`` held-out token representations, standard
error from the Hoeffding projection (``4 Var(h_1) / n``). The tokens are the inputs of each
attention layer on the validation split through the *initial* network, rebuilt from the run's
seed and configuration: the network Phase A learned on (the main job runs Phase A before Phase B
by default; runs with ``phase_a_after > 0`` have no stored weights of that moment, and the token
distances are then NaN).

Comparisons: learned (every recorded time) against the initial particles of the same head
(:meth:`LearnedKernels.kgd_to_initial`), against the exact softmax kernel
``exp(<x, y> / sqrt(d_k))`` (scale-free: both kernels divided by their ``L^2`` norm, since
normalised attention ignores a kernel's scale), between the heads of a layer and between layers.
The random-feature noise reference at the same ``m`` is the distance between the initial
particles and ``n_noise`` independent draws from the same initial law (projected onto the ball
as the main job does): ``ratio = distance / noise`` says whether Phase A moved the kernel by more
than redrawing the features would.

References
----------
Peng & Yi, "Kernel Geometry Divergence", doi:10.20944/preprints202606.0665.v1, Def. 4.1, Thm 3.1;
paper 000 (random features as interacting particles), App. D (feature maps), App. F.2 (Phase A).
"""
from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np

from rieszflow.theory.kgd import spectral as sp
from rieszflow.engine.features import make_feature_map
from rieszflow.engine._checks import check_int
from rieszflow.engine.attention.data import batches
from rieszflow.engine.space import Ball
from rieszflow.engine.storage import open_run
from rieszflow.learning.config import MainJobConfig
from rieszflow.learning.runfiles import load_learned_kernel
from rieszflow.learning.train import MainJob

__all__ = ["LearnedKernels", "sphere_probes", "sphere_distance", "token_distance", "N_DEGREES"]

#: Degrees of the zonal Funk-Hecke spectrum stored per kernel.
N_DEGREES = 4


def sphere_probes(d, n_rot, n_nodes, rng):
    """Probe pairs of the rotation-averaged sphere estimate.

    Parameters
    ----------
    d : int
        Dimension ``>= 3``.
    n_rot : int
        Haar-random orthonormal pairs ``(u_r, v_r)``.
    n_nodes : int
        Gauss-Jacobi nodes ``t_j`` of the law of ``<x, y>`` on S^{d-1}.
    rng : numpy.random.Generator

    Returns
    -------
    x : numpy.ndarray, shape (n_rot, d)
        ``u_r``.
    y : numpy.ndarray, shape (n_rot, n_nodes, d)
        ``t_j u_r + sqrt(1 - t_j^2) v_r`` (so ``<x_r, y_{r,j}> = t_j``).
    t, w : numpy.ndarray, shape (n_nodes,)
        Nodes and probability weights (:func:`rieszflow.theory.kgd.spectral.jacobi_nodes`).
    """
    t, w = sp.jacobi_nodes(d, n_nodes)
    Q, R = np.linalg.qr(rng.standard_normal((n_rot, d, 2)))      # (n_rot, d, 2)
    Q = Q * np.where(np.diagonal(R, axis1=1, axis2=2) < 0, -1.0, 1.0)[:, None, :]   # Haar frame
    u, v = Q[..., 0], Q[..., 1]
    y = t[None, :, None] * u[:, None, :] + np.sqrt(1 - t ** 2)[None, :, None] * v[:, None, :]
    return u, y, t, w


def sphere_distance(a, b, w):
    """Zonal KGD, total and non-zonal residual of ``K_a - K_b`` on the sphere, with standard errors.

    Parameters
    ----------
    a, b : numpy.ndarray, shape (n_rot, n_nodes)
        Kernel values at the probe pairs ``(u_r, y_{r,j})`` (common rotations).
    w : numpy.ndarray, shape (n_nodes,)
        Gauss-Jacobi probability weights of the nodes ``t_j``.

    Returns
    -------
    dict of str to float
        ``kgd2``, ``kgd2_se`` (zonal part, bias-corrected; its standard error holds the
        delta-method term and the second-order term that dominates near 0; conservative near 0), ``total2``, ``total2_se`` (whole
        ``||D||^2_{L^2(mu x mu)}``), ``residual2`` (= total2 - kgd2, the non-zonal part), and
        ``kgd``, ``total`` (square roots; 0 for a negative estimate).

    References
    ----------
    Peng & Yi, "Kernel Geometry Divergence", Def. 4.1 (Parseval form).
    """
    D = np.asarray(a, float) - np.asarray(b, float)
    n = D.shape[0]
    mean = D.mean(axis=0)
    var = D.var(axis=0, ddof=1)
    kgd2 = float(np.sum(w * (mean ** 2 - var / n)))
    psi = (D - mean) @ (2 * w * mean)                   # influence of each rotation on sum w mean^2
    C = np.cov(D, rowvar=False).reshape(D.shape[1], D.shape[1])
    # first-order (delta method) plus the second-order term that dominates near KGD = 0:
    # Var sum_j w_j (mean_j^2 - var_j/n) ~ Var(psi)/n + 2 w^T (C o C) w / n^2
    kgd2_se = float(math.sqrt(psi.var(ddof=1) / n + 2 * (w @ (C * C) @ w) / n ** 2))
    per = (D ** 2) @ w
    total2 = float(per.mean())
    total2_se = float(per.std(ddof=1) / math.sqrt(n))
    return {"kgd2": kgd2, "kgd2_se": kgd2_se, "total2": total2, "total2_se": total2_se,
            "residual2": total2 - kgd2, "kgd": math.sqrt(max(kgd2, 0.0)),
            "total": math.sqrt(max(total2, 0.0))}


def token_distance(Ga, Gb):
    """Hilbert-Schmidt distance ``E_{x != y ~ nu}[(K_a - K_b)^2]^{1/2}`` on held-out tokens.

    Parameters
    ----------
    Ga, Gb : numpy.ndarray, shape (n, n)
        Gram matrices of the two kernels on the same ``n >= 3`` tokens.

    Returns
    -------
    dict of str to float
        ``hs2`` (U-statistic over ``i != j``), ``hs2_se`` (Hoeffding: ``2 sd(h_1) / sqrt(n)``),
        ``hs`` (square root) and ``hs_se`` (delta method, ``hs2_se / (2 hs)``; NaN at ``hs = 0``).

    Raises
    ------
    ValueError
        If the matrices are not square of the same shape with ``n >= 3``.
    """
    Ga, Gb = np.asarray(Ga, float), np.asarray(Gb, float)
    if Ga.shape != Gb.shape or Ga.ndim != 2 or Ga.shape[0] != Ga.shape[1] or Ga.shape[0] < 3:
        raise ValueError(f"Ga, Gb must be square Gram matrices of one shape (n, n), n >= 3; got "
                         f"{Ga.shape}, {Gb.shape}")
    n = Ga.shape[0]
    D2 = (Ga - Gb) ** 2
    np.fill_diagonal(D2, 0.0)
    h1 = D2.sum(axis=1) / (n - 1)
    hs2 = float(h1.mean())
    hs2_se = float(2 * h1.std(ddof=1) / math.sqrt(n))
    hs = math.sqrt(hs2)
    return {"hs2": hs2, "hs2_se": hs2_se, "hs": hs, "hs_se": hs2_se / (2 * hs) if hs > 0 else math.nan}


def _unit_norm_sphere(vals, w):
    return vals / math.sqrt(float(np.mean((vals ** 2) @ w)))


def _unit_norm_gram(G):
    n = G.shape[0]
    off = (np.sum(G ** 2) - np.sum(np.diag(G) ** 2)) / (n * (n - 1))
    return G / math.sqrt(off)


class LearnedKernels:
    """The attention kernels of a main-job file, probed on the sphere and on held-out tokens.

    Parameters
    ----------
    path : str or os.PathLike
        A main-job HDF5 file (``rieszflow run``) with linear attention.
    n_rot : int, default 400
        Haar-random orthonormal pairs of the sphere estimate (``>= 10``).
    n_nodes : int, default 16
        Gauss-Jacobi nodes in ``t`` (``>= 4``).
    n_tokens : int, default 600
        Held-out validation tokens per layer (``>= 3``; 0 skips the token distances).
    n_noise : int, default 4
        Independent redraws of the initial law for the random-feature noise reference (``>= 1``).
    seed : int, default 0
        Seed of the probes, the token subsample and the redraws.

    Attributes
    ----------
    omega : numpy.ndarray, shape (time, layer, head, m, d_k), float64
        The recorded particles.
    times : numpy.ndarray, shape (time,)
        Phase A steps of the records.
    config : dict
        The run's configuration.
    tokens : list of numpy.ndarray or None
        Per layer, ``(head, n_tokens, d_k)`` head inputs, or None (see the module notes).
    tokens_note : str
        Where the tokens come from, or why there are none.
    rebuild_error : float
        Largest difference between the rebuilt initial network's particles and the file's first
        record (float32 rounding, about 3e-8, when the rebuild is the run's network; above 1e-5
        the tokens are not used); NaN when no network was rebuilt.

    Raises
    ------
    FileNotFoundError, rieszflow.engine.storage.RunFileError, ValueError
        As :func:`rieszflow.learning.runfiles.load_learned_kernel`, or for bad sizes.

    References
    ----------
    Peng & Yi, "Kernel Geometry Divergence", Def. 4.1; paper 000, App. F.2.
    """

    def __init__(self, path, *, n_rot=400, n_nodes=16, n_tokens=600, n_noise=4, seed=0):
        t_start = time.perf_counter()
        self.path = Path(path)
        self.n_rot = check_int("n_rot", n_rot, minimum=10)
        self.n_nodes = check_int("n_nodes", n_nodes, minimum=4)
        self.n_tokens = check_int("n_tokens", n_tokens, minimum=0)
        if 0 < self.n_tokens < 3:
            raise ValueError(f"n_tokens must be 0 (no token distances) or >= 3, got {n_tokens}")
        self.n_noise = check_int("n_noise", n_noise, minimum=1)
        self.seed = check_int("seed", seed, minimum=0)
        ds = open_run(self.path, kind="main_job")
        self.config = json.loads(ds.attrs["config"])
        self.run_status = str(ds.attrs.get("status", ""))
        name, _, _ = load_learned_kernel(self.path, 0, 0)       # validates the file and the map
        self.map_name = name
        self.omega = np.asarray(ds["omega"].values, dtype=np.float64)
        self.times = np.asarray(ds["time"].values)
        _, self.n_layers, self.n_heads, self.m, self.d_k = self.omega.shape
        if self.d_k < 3:
            raise ValueError(f"head dimension d_k={self.d_k} < 3: no Funk-Hecke analysis on S^(d_k-1)")
        self.maps = []
        for layer in range(self.n_layers):
            _, _, opts = load_learned_kernel(self.path, layer, 0)
            self.maps.append(make_feature_map(name, self.d_k, self.m, **opts))
        ds.close()
        rng = np.random.default_rng([self.seed, 3])
        self._x, self._y, self.t, self.w = sphere_probes(self.d_k, self.n_rot, self.n_nodes, rng)
        self.rebuild_error = math.nan
        self.tokens_note = "n_tokens = 0"
        self.tokens = None
        if self.n_tokens:
            try:
                self.tokens = self._held_out_tokens(np.random.default_rng([self.seed, 4]))
            except (FileNotFoundError, OSError) as e:      # e.g. a QQP run without its GLUE folder here
                self.tokens_note = f"validation data unavailable ({e})"
        self.noise_omega = self._redraws(np.random.default_rng([self.seed, 5]))
        self._cache = {}
        self.setup_seconds = time.perf_counter() - t_start

    # -- inputs ----------------------------------------------------------------------------
    def _held_out_tokens(self, rng):
        """Inputs of every attention head on the validation split through the initial network."""
        cfg = MainJobConfig.from_dict({**self.config, "backend": "numpy", "dtype": "float64"})
        if cfg.phase_a_after > 0:
            self.tokens_note = "phase_a_after > 0: the network Phase A saw is not stored"
            return None
        job = MainJob(cfg, self.path.with_suffix(".kgd-probe.h5"))   # never opened: no file written
        job._build()                                               # the seed's initial network
        model = job.model
        rebuilt = np.stack([np.asarray(model.params[n]) for n in job.omega_names])
        self.rebuild_error = float(np.max(np.abs(rebuilt - self.omega[0])))
        if self.rebuild_error > 1e-5:                              # not the network of this file
            self.tokens_note = f"the rebuilt network differs from the file (particles by {self.rebuild_error:.1e})"
            return None
        self.tokens_note = "validation split through the rebuilt initial network"
        per_layer = [[] for _ in range(self.n_layers)]
        for ids, mask, _, _ in batches(job.val, 64, pad_id=job.tok.pad_id):
            xs = model.attention_inputs(model.backend.asarray(ids, dtype=np.int64),
                                        model.backend.asarray(mask, dtype=bool))   # (B, L, D) per layer
            for i, layer in enumerate(model.layers):
                q = layer.attn.project(model.attention_params(i), xs[i])[0]
                per_layer[i].append(np.asarray(q)[:, np.asarray(mask)])   # (H, n_real, d_k)
        out = []
        for chunks in per_layer:
            allq = np.concatenate(chunks, axis=1)
            n = min(self.n_tokens, allq.shape[1])
            out.append(allq[:, rng.choice(allq.shape[1], size=n, replace=False)].astype(np.float64))
        return out

    def _redraws(self, rng):
        """``n_noise`` draws of every layer's initial law (projected onto the ball as the main job does)."""
        cfg = MainJobConfig.from_dict(self.config)
        opts = cfg.feature_options()
        out = np.empty((self.n_noise, self.n_layers, self.n_heads, self.m, self.d_k))
        for layer in range(self.n_layers):
            b = getattr(self.maps[layer], "b", None)
            fmap = make_feature_map(self.map_name, self.d_k, self.m,
                                    **({**opts, "b": b} if b is not None else opts))
            for k in range(self.n_noise):
                for h in range(self.n_heads):
                    om = fmap.init_omega(rng)
                    out[k, layer, h] = Ball(cfg.radius).project(om) if cfg.project_init else om
        return out

    # -- kernel values -----------------------------------------------------------------------
    def _phi(self, layer, x, omega):
        return np.asarray(self.maps[layer](x, omega), dtype=np.float64)

    def sphere_values(self, omega, layer):
        """Kernel values at the sphere probes.

        Parameters
        ----------
        omega : numpy.ndarray, shape (m, d_k)
            Particles.
        layer : int
            Layer whose feature map (fixed constants) is used.

        Returns
        -------
        numpy.ndarray, shape (n_rot, n_nodes)
            ``K_Omega(u_r, y_{r,j})``.
        """
        px = self._phi(layer, self._x, omega)                       # (n_rot, m)
        py = self._phi(layer, self._y, omega)                       # (n_rot, n_nodes, m)
        return np.einsum("rm,rjm->rj", px, py)

    def token_gram(self, omega, layer, head):
        """Gram matrix of the kernel on the held-out tokens of ``(layer, head)``.

        Parameters
        ----------
        omega : numpy.ndarray, shape (m, d_k)
        layer, head : int

        Returns
        -------
        numpy.ndarray, shape (n_tokens, n_tokens), or None without tokens
        """
        if self.tokens is None:
            return None
        P = self._phi(layer, self.tokens[layer][head], omega)
        return P @ P.T

    def _values(self, key, omega, layer, head):
        if key not in self._cache:
            self._cache[key] = (self.sphere_values(omega, layer), self.token_gram(omega, layer, head))
        return self._cache[key]

    def _learned(self, ti, layer, head):
        return self._values(("t", ti, layer, head), self.omega[ti, layer, head], layer, head)

    def _noise(self, k, layer, head):
        return self._values(("n", k, layer, head), self.noise_omega[k, layer, head], layer, head)

    def _softmax(self, layer, head):
        key = ("soft", layer, head)
        if key not in self._cache:
            tau = math.sqrt(self.d_k)
            sv = np.exp(np.einsum("rd,rjd->rj", self._x, self._y) / tau)
            g = None
            if self.tokens is not None:
                X = self.tokens[layer][head]
                g = np.exp(X @ X.T / tau)
            self._cache[key] = (sv, g)
        return self._cache[key]

    def _compare(self, A, B, scale_free=False):
        sa, ga = A
        sb, gb = B
        if scale_free:
            sa, sb = _unit_norm_sphere(sa, self.w), _unit_norm_sphere(sb, self.w)
            if ga is not None:
                ga, gb = _unit_norm_gram(ga), _unit_norm_gram(gb)
        out = {f"sphere_{k}": v for k, v in sphere_distance(sa, sb, self.w).items()}
        tok = token_distance(ga, gb) if ga is not None else {"hs2": math.nan, "hs2_se": math.nan,
                                                              "hs": math.nan, "hs_se": math.nan}
        out.update({f"tokens_{k}": v for k, v in tok.items()})
        return out

    def _time_index(self, time):
        idx = np.flatnonzero(self.times == time)
        if idx.size != 1:
            raise ValueError(f"time={time!r} is not a recorded Phase A step; recorded: {self.times.tolist()}")
        return int(idx[0])

    def _check_lh(self, layer, head):
        if not 0 <= layer < self.n_layers:
            raise ValueError(f"layer={layer} is out of range; the file has {self.n_layers} layer(s)")
        if not 0 <= head < self.n_heads:
            raise ValueError(f"head={head} is out of range; the file has {self.n_heads} head(s)")

    # -- public analyses -------------------------------------------------------------------------
    def noise(self, layer, head):
        """Random-feature noise at the same m: mean distance of the initial kernel to ``n_noise`` redraws.

        Parameters
        ----------
        layer, head : int

        Returns
        -------
        dict of str to float
            ``sphere_total``, ``sphere_kgd`` and ``tokens_hs``, each a mean over redraws.
        """
        self._check_lh(layer, head)
        rows = [self._compare(self._learned(0, layer, head), self._noise(k, layer, head))
                for k in range(self.n_noise)]
        return {k: float(np.mean([r[k] for r in rows])) for k in ("sphere_total", "sphere_kgd", "tokens_hs")}

    def kgd_to_initial(self, time, layer, head):
        """Distance of the kernel at Phase A step ``time`` to the initial kernel of the same head.

        Parameters
        ----------
        time : int
            A recorded Phase A step (coordinate ``time`` of the file; 0 is the initial record).
        layer, head : int

        Returns
        -------
        dict of str to float
            From the sphere estimate: ``sphere_kgd`` (zonal KGD), ``sphere_kgd2``,
            ``sphere_kgd2_se``, ``sphere_total`` (whole L^2(mu x mu) distance), ``sphere_total2_se``,
            ``sphere_residual2`` (non-zonal part); from the tokens: ``tokens_hs``, ``tokens_hs_se``;
            the random-feature noise at the same m (``noise_sphere_total``, ``noise_tokens_hs``)
            and ``ratio_sphere``, ``ratio_tokens`` (distance / noise).

        Raises
        ------
        ValueError
            If ``time`` was not recorded or ``layer``/``head`` is out of range.

        References
        ----------
        Peng & Yi, "Kernel Geometry Divergence", Def. 4.1.
        """
        self._check_lh(layer, head)
        ti = self._time_index(time)
        out = self._compare(self._learned(ti, layer, head), self._learned(0, layer, head))
        nz = self.noise(layer, head)
        out.update({"noise_sphere_total": nz["sphere_total"], "noise_sphere_kgd": nz["sphere_kgd"],
                    "noise_tokens_hs": nz["tokens_hs"],
                    "ratio_sphere": out["sphere_total"] / nz["sphere_total"],
                    "ratio_tokens": out["tokens_hs"] / nz["tokens_hs"]})
        return out

    def kgd_to_softmax(self, time, layer, head):
        """Scale-free distance of the kernel at ``time`` to the softmax kernel ``exp(<x,y>/sqrt(d_k))``.

        Parameters
        ----------
        time : int
            A recorded Phase A step.
        layer, head : int

        Returns
        -------
        dict of str to float
            As :meth:`kgd_to_initial` without the noise entries, both kernels divided by their
            L^2 norm first (on the sphere, respectively on the tokens).
        """
        self._check_lh(layer, head)
        return self._compare(self._learned(self._time_index(time), layer, head), self._softmax(layer, head),
                             scale_free=True)

    def zonal_spectrum(self, time, layer, head, degrees=N_DEGREES):
        """Funk-Hecke eigenvalues ``lambda_l`` of the rotation-averaged kernel, ``l < degrees``.

        Parameters
        ----------
        time : int
        layer, head : int
        degrees : int, default 4

        Returns
        -------
        numpy.ndarray, shape (degrees,)
            ``sum_j w_j Kbar(t_j) P_l(t_j)`` (Monte Carlo over rotations in ``Kbar``).
        """
        self._check_lh(layer, head)
        sv = self._learned(self._time_index(time), layer, head)[0]
        return sp.gegenbauer_normalised(degrees - 1, self.d_k, self.t) @ (self.w * sv.mean(axis=0))

    def kernel_sd(self, time, layer, head):
        """Standard deviation of the kernel's values over pairs (its non-constant part's scale).

        Parameters
        ----------
        time : int
        layer, head : int

        Returns
        -------
        dict of str to float
            ``sphere`` (``x, y`` uniform on the sphere) and ``tokens`` (distinct held-out tokens;
            NaN without tokens).
        """
        self._check_lh(layer, head)
        sv, g = self._learned(self._time_index(time), layer, head)
        m1, m2 = float(np.mean(sv @ self.w)), float(np.mean((sv ** 2) @ self.w))
        out = {"sphere": math.sqrt(max(m2 - m1 * m1, 0.0)), "tokens": math.nan}
        if g is not None:
            off = g[~np.eye(g.shape[0], dtype=bool)]
            out["tokens"] = float(off.std())
        return out

    def between_heads(self, time, layer, a=0, b=1):
        """Distance between the kernels of heads ``a`` and ``b`` of ``layer`` at ``time``.

        Parameters
        ----------
        time : int
        layer, a, b : int

        Returns
        -------
        dict of str to float
            As :meth:`kgd_to_softmax` without scaling (tokens: layer ``layer``'s inputs of head ``a``).
        """
        self._check_lh(layer, a)
        self._check_lh(layer, b)
        ti = self._time_index(time)
        A = self._learned(ti, layer, a)
        B = (self.sphere_values(self.omega[ti, layer, b], layer),
             self.token_gram(self.omega[ti, layer, b], layer, a))
        return self._compare(A, B)

    def between_layers(self, time, head, a=0, b=1):
        """Distance on the sphere between the kernels of ``head`` in layers ``a`` and ``b`` at ``time``.

        Parameters
        ----------
        time : int
        head, a, b : int

        Returns
        -------
        dict of str to float
            Sphere entries of :meth:`kgd_to_initial` (the token sets of two layers differ, so the
            token entries are NaN).
        """
        self._check_lh(a, head)
        self._check_lh(b, head)
        ti = self._time_index(time)
        out = {f"sphere_{k}": v for k, v in sphere_distance(self._learned(ti, a, head)[0],
                                                             self._learned(ti, b, head)[0], self.w).items()}
        out.update({"tokens_hs": math.nan, "tokens_hs_se": math.nan})
        return out
