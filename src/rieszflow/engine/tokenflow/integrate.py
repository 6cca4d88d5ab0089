"""Integrators for token flows: (init_fn, step_fn) factories and the driver :func:`run_flow`.

Each factory takes a vector field (an :class:`~rieszflow.engine.tokenflow.dynamics.AttentionField`
or any object with ``evaluate(x, warm) -> FieldValue``) and a step ``dt`` and
returns a pair of pure functions over the immutable :class:`FlowState`::

    init_fn, step_fn = rk4(field, dt, retract=True)
    state = init_fn(x0)
    for _ in range(n_steps):
        state = step_fn(state, None)

Schemes::

    ``euler``        ``x <- x + dt v(x)``                                 (order 1)
    ``rk4``          classical Runge-Kutta                                (order 4)
    ``*_retract``    the same followed by the retraction ``x <- x / |x|`` onto the
                     sphere. Tokens then lie on S^{d-1} to round-off after every step.
    ``projected_euler``  ``x <- normalise(x + dt a(x))`` with the *unprojected*
                     attention drift ``a`` (GLPR's code, ``sphere.py`` and
                     ``phase-diagrams.py``; the residual layer with LayerNorm idealised
                     as the projection onto the sphere). It agrees with
                     ``euler_retract`` to O(dt^2) per step (order 1).

No step synchronises with the device: times are Python floats, the Sinkhorn
residual stays a 0-d device array; host transfers happen only in
:func:`run_flow` at recording times.

References
----------
spec paper004_attention_theory.md, section 8, tests T25-T34 (RK4 + renormalisation,
Euler + renormalisation as in the authors' code); GLPR, arXiv:2312.10794;
borjanG/2023-transformers-rotf (sphere.py: Euler step then renormalisation).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, NamedTuple

import numpy as np

from rieszflow.engine._checks import check_choice, check_int, check_real
from rieszflow.engine.backend import get_backend, namespace, to_numpy
from rieszflow.engine.simulate import run
from rieszflow.engine.tokenflow.dynamics import normalise

__all__ = ["FlowState", "FlowResult", "INTEGRATORS", "euler", "rk4", "projected_euler", "make_integrator",
           "run_flow", "sphere_tolerance"]

#: Integrator names accepted by :func:`make_integrator` and :func:`run_flow`.
INTEGRATORS = ("euler", "rk4", "euler_retract", "rk4_retract", "projected_euler")


@dataclasses.dataclass(frozen=True)
class FlowState:
    """Immutable state of a token flow.

    Parameters
    ----------
    x : array, shape (..., n, d)
        Tokens.
    t : float
        Time (model units; in paper 004's reading, depth).
    step : int
        Steps taken.
    warm : array, shape (..., n), or None
        Sinkhorn potential carried to warm-start the next step.
    residual : 0-d array or None
        Largest Sinkhorn residual over the stages of the last step.
    """

    x: Any
    t: float = 0.0
    step: int = 0
    warm: Any = None
    residual: Any = None

    def replace(self, **changes) -> "FlowState":
        """Copy with ``changes`` applied.

        Parameters
        ----------
        **changes : object
            New values of fields (``x``, ``t``, ``step``, ``warm``, ``residual``), by name.

        Returns
        -------
        FlowState
            A new state; ``self`` is unchanged.
        """
        return dataclasses.replace(self, **changes)

    def draw_noise(self, rng, backend):
        """Return ``None``: deterministic flows draw no noise.

        The one step protocol of :func:`rieszflow.engine.simulate.run` is
        ``step_fn(state, noise)``; flows ignore ``noise``.

        Parameters
        ----------
        rng : numpy.random.Generator
            Not used.
        backend : rieszflow.engine.backend.Backend
            Not used.

        Returns
        -------
        None
        """
        return None


def sphere_tolerance(dtype) -> float:
    """Largest ``| |x_i| - 1 |`` accepted for tokens on the sphere: ``max(1e-8, 64 eps)``.

    ``normalise`` leaves ``|x| - 1`` of a few ``eps`` of the dtype (about 6e-8 in
    float32, so a fixed 1e-8 would reject every float32 start); 64 eps allows for
    that and for a cast from float64, while still catching unnormalised input.

    Parameters
    ----------
    dtype : numpy dtype or str
        Floating dtype of the tokens.

    Returns
    -------
    float
        1e-8 for float64, 64 * 2^-23 = 7.6e-6 for float32.

    Raises
    ------
    ValueError
        If ``dtype`` is not a floating dtype.

    References
    ----------
    GLPR, arXiv:2312.10794, section 2 (tokens on S^{d-1}); spec section 8, T25-T34.
    """
    dt = np.dtype(dtype)
    if dt.kind != "f":
        raise ValueError(f"dtype must be a floating dtype (float32 or float64); got {dt}")
    return max(1e-8, 64.0 * float(np.finfo(dt).eps))


def _check_field(field):
    if not callable(getattr(field, "evaluate", None)):
        raise TypeError(f"field must have a method evaluate(x, warm) -> FieldValue "
                        f"(e.g. engine.tokenflow.AttentionField); got {type(field).__name__}")


def _check_retract(field, retract):
    if not isinstance(retract, (bool, np.bool_)):
        raise TypeError(f"retract must be a bool, got {retract!r}")
    if retract and getattr(field, "geometry", "sphere") != "sphere":
        raise ValueError(f"retract=True normalises tokens onto the sphere, but the field has "
                         f"geometry={field.geometry!r}; use retract=False in R^d")


def _maxres(xp, a, b):
    if a is None:
        return b
    if b is None:
        return a
    return xp.maximum(a, b)


def euler(field, dt: float, *, retract: bool = False):
    """Explicit Euler (optionally followed by the retraction onto the sphere).

    Parameters
    ----------
    field : object with ``evaluate(x, warm) -> FieldValue``
    dt : float
        Step, ``dt > 0``.
    retract : bool, default False
        Normalise tokens after the step (sphere fields only).

    Returns
    -------
    init_fn : callable ``(x0, t0=0.0) -> FlowState``
    step_fn : callable ``(FlowState) -> FlowState`` (pure)

    Raises
    ------
    TypeError, ValueError
        On a field without ``evaluate``, ``dt <= 0``, or ``retract`` on a Euclidean field.

    References
    ----------
    GLPR's code (sphere.py): ``x <- normalise(x + dt * v)``; spec T33.
    """
    _check_field(field)
    dt = check_real("dt", dt, positive=True)
    _check_retract(field, retract)

    def init_fn(x0, t0: float = 0.0) -> FlowState:
        return FlowState(x=x0, t=float(t0), step=0)

    def step_fn(state: FlowState, noise=None) -> FlowState:
        fv = field.evaluate(state.x, state.warm)
        x = state.x + dt * fv.velocity
        if retract:
            x = normalise(x)
        return state.replace(x=x, t=state.t + dt, step=state.step + 1, warm=fv.warm,
                             residual=fv.residual)

    return init_fn, step_fn


def rk4(field, dt: float, *, retract: bool = False):
    """Classical fourth-order Runge-Kutta (optionally followed by the retraction).

    Parameters
    ----------
    field : object with ``evaluate(x, warm) -> FieldValue``
    dt : float
        Step, ``dt > 0``.
    retract : bool, default False
        Normalise tokens after the full step (stages are not retracted; the
        field's smooth extension off the sphere is used between them).

    Returns
    -------
    init_fn : callable ``(x0, t0=0.0) -> FlowState``
    step_fn : callable ``(FlowState) -> FlowState`` (pure)

    Raises
    ------
    TypeError, ValueError
        As :func:`euler`.

    References
    ----------
    spec T25-T32 ("RK4 dt = ... + renorm").
    """
    _check_field(field)
    dt = check_real("dt", dt, positive=True)
    _check_retract(field, retract)

    def init_fn(x0, t0: float = 0.0) -> FlowState:
        return FlowState(x=x0, t=float(t0), step=0)

    def step_fn(state: FlowState, noise=None) -> FlowState:
        x = state.x
        xp = namespace(x)
        f1 = field.evaluate(x, state.warm)
        f2 = field.evaluate(x + (0.5 * dt) * f1.velocity, f1.warm)
        f3 = field.evaluate(x + (0.5 * dt) * f2.velocity, f2.warm)
        f4 = field.evaluate(x + dt * f3.velocity, f3.warm)
        x1 = x + (dt / 6.0) * (f1.velocity + 2.0 * f2.velocity + 2.0 * f3.velocity + f4.velocity)
        if retract:
            x1 = normalise(x1)
        res = None
        for fv in (f1, f2, f3, f4):
            res = _maxres(xp, res, fv.residual)
        return state.replace(x=x1, t=state.t + dt, step=state.step + 1, warm=f4.warm, residual=res)

    return init_fn, step_fn


def projected_euler(field, dt: float):
    """GLPR's scheme: ``x <- normalise(x + dt * a(x))`` with the unprojected attention drift.

    Parameters
    ----------
    field : AttentionField with ``geometry="sphere"`` (needs ``drift(x, warm)``)
    dt : float
        Step, ``dt > 0``.

    Returns
    -------
    init_fn : callable ``(x0, t0=0.0) -> FlowState``
    step_fn : callable ``(FlowState) -> FlowState`` (pure)

    Raises
    ------
    TypeError
        If ``field`` has no ``drift`` method.
    ValueError
        If ``dt <= 0`` or the field is not a sphere field.

    References
    ----------
    borjanG/2023-transformers-rotf, ``sphere.py`` and ``phase-diagrams.py`` (explicit Euler
    then renormalisation, no explicit P^perp); spec section 6.1 and test T33.
    """
    if not callable(getattr(field, "drift", None)):
        raise TypeError(f"projected_euler needs a field with drift(x, warm) (AttentionField); got "
                        f"{type(field).__name__}")
    dt = check_real("dt", dt, positive=True)
    _check_retract(field, True)

    def init_fn(x0, t0: float = 0.0) -> FlowState:
        return FlowState(x=x0, t=float(t0), step=0)

    def step_fn(state: FlowState, noise=None) -> FlowState:
        a, g, r = field.drift(state.x, state.warm)
        return state.replace(x=normalise(state.x + dt * a), t=state.t + dt, step=state.step + 1,
                             warm=g, residual=r)

    return init_fn, step_fn


def make_integrator(name: str, field, dt: float):
    """Integrator by name: one of :data:`INTEGRATORS` (see the module docstring).

    Parameters
    ----------
    name : str
        One of :data:`INTEGRATORS`.
    field : vector field
    dt : float

    Returns
    -------
    (init_fn, step_fn)

    Raises
    ------
    ValueError
        If ``name`` is unknown (or as :func:`euler`, :func:`rk4`).
    """
    check_choice("integrator", name, INTEGRATORS)
    if name == "projected_euler":
        return projected_euler(field, dt)
    base, _, tail = name.partition("_")
    fn = euler if base == "euler" else rk4
    return fn(field, dt, retract=(tail == "retract"))


class FlowResult(NamedTuple):
    """What :func:`run_flow` returns (host NumPy arrays).

    Parameters
    ----------
    times : numpy.ndarray, shape (n_rec,)
        Times of the records.
    x : numpy.ndarray, shape (n_rec, ..., n, d), or None if ``keep_trajectory=False``
        Recorded tokens.
    observables : dict of str to numpy.ndarray, each of shape (n_rec, ...)
        Recorded observables, by name.
    sinkhorn_residual : numpy.ndarray, shape (n_rec,), or None
        Largest Sinkhorn residual over the steps since the previous record (NaN at
        a record taken before any step, e.g. t = 0).
    final : FlowState
        The last state (tokens on the backend of the run).
    path : pathlib.Path or None
        HDF5 file written, if any.
    """

    times: np.ndarray
    x: np.ndarray | None
    observables: dict
    sinkhorn_residual: np.ndarray | None
    final: FlowState
    path: Any


def _record_steps(n_steps, dt, record_every, record_times):
    if record_times is not None and record_every is not None:
        raise ValueError("give record_every or record_times, not both")
    if record_times is not None:
        ts = np.atleast_1d(np.asarray(record_times, dtype=np.float64))
        if ts.ndim != 1 or ts.size == 0 or not np.isfinite(ts).all():
            raise ValueError(f"record_times must be a non-empty 1-D array of finite times; got {record_times!r}")
        steps = np.rint(ts / dt).astype(np.int64)
        bad = np.abs(steps * dt - ts) > 1e-9 * np.maximum(1.0, np.abs(ts))
        if bad.any() or (steps < 0).any() or (steps > n_steps).any():
            raise ValueError(f"record_times must be multiples of dt={dt} in [0, t_end]; got "
                             f"{ts[bad | (steps < 0) | (steps > n_steps)].tolist()}")
        if np.any(np.diff(steps) <= 0):
            raise ValueError(f"record_times must be strictly increasing; got {ts.tolist()}")
        return steps
    every = max(1, n_steps // 100) if record_every is None else check_int("record_every", record_every, minimum=1)
    steps = np.arange(0, n_steps + 1, every, dtype=np.int64)
    if steps[-1] != n_steps:
        steps = np.append(steps, n_steps)
    return steps


def run_flow(field, x0, *, dt: float, t_end: float, method: str | None = None,
             record_every: int | None = None, record_times=None,
             observables: Mapping[str, Callable] | None = None, backend: str | None = None,
             path=None, writer=None, prefix: str = "", overwrite: bool = False,
             config: Mapping[str, Any] | None = None, attrs: Mapping[str, Any] | None = None,
             keep_trajectory: bool = True, quiet: bool = True, desc: str = "token flow") -> FlowResult:
    """Integrate a token flow from ``x0`` to ``t_end``, recording and writing HDF5.

    Parameters
    ----------
    field : AttentionField (or any object with ``evaluate``)
    x0 : array, shape (n, d) or (batch, n, d)
        Initial tokens (on S^{d-1} for sphere fields, checked to
        :func:`sphere_tolerance` of their dtype: 1e-8 in float64, 7.6e-6 in float32).
    dt : float
        Time step, ``> 0``.
    t_end : float
        Final time; must be a multiple of ``dt`` (to 1e-9 relative).
    method : str, optional
        One of :data:`INTEGRATORS`; default ``"rk4_retract"`` on the sphere,
        ``"rk4"`` in R^d.
    record_every : int, optional
        Record every so many steps (and at ``t_end``); default ~100 records.
    record_times : sequence of float, optional
        Explicit recording times (multiples of ``dt``, increasing); excludes ``record_every``.
    observables : mapping of str to callable, optional
        ``fn(x) -> array`` of shape ``x.shape[:-2]`` (a scalar per cloud), evaluated
        at each record (e.g. ``functools.partial(interaction_energy, beta=1.0)``).
    backend : {"numpy", "cupy"}, optional
        Move ``x0`` to this backend first; default: keep the backend of ``x0``.
    path : str or os.PathLike, optional
        Write a new HDF5 file (kind ``"token_flow"``) through
        :class:`~rieszflow.engine.storage.TrajectoryWriter`.
    writer : TrajectoryWriter, optional
        Write into an open writer instead (excludes ``path``).
    prefix : str, default ""
        Prefix of the dimension and variable names written (several flows in one file).
    overwrite : bool, default False
        Replace an existing ``path``.
    config, attrs : mapping, optional
        Stored as root attributes of a new file.
    keep_trajectory : bool, default True
        Return the recorded tokens (host memory n_rec * n * d floats).
    quiet : bool, default True
        No tqdm progress bar.
    desc : str
        Progress-bar label.

    Returns
    -------
    FlowResult

    Raises
    ------
    ValueError
        On bad shapes, non-finite or off-sphere ``x0``, ``t_end`` not a multiple
        of ``dt``, bad record times, or both ``path`` and ``writer``.
    FloatingPointError
        If tokens become non-finite (reported at the first record where they are).

    Notes
    -----
    HDF5 layout (dims in brackets): ``time`` [time] (unlimited), ``x`` [time,
    (batch,) token, coord], one variable per observable [time, (batch)],
    ``sinkhorn_residual`` [time] for Sinkhorn fields. Open with
    ``engine.storage.open_run(path, kind="token_flow")``.

    References
    ----------
    spec section 8 (T25-T34 protocols); STYLE.md (run owns loops and I/O).
    """

    _check_field(field)
    dt = check_real("dt", dt, positive=True)
    t_end = check_real("t_end", t_end, nonnegative=True)
    n_steps = int(round(t_end / dt))
    if abs(n_steps * dt - t_end) > 1e-9 * max(1.0, t_end):
        raise ValueError(f"t_end={t_end} must be a multiple of dt={dt} (got {t_end / dt:.6g} steps)")
    geometry = getattr(field, "geometry", "sphere")
    if method is None:
        method = "rk4_retract" if geometry == "sphere" else "rk4"
    init_fn, step_fn = make_integrator(method, field, dt)
    if path is not None and writer is not None:
        raise ValueError("give path or writer, not both")
    if not isinstance(prefix, str):
        raise TypeError(f"prefix must be a str, got {prefix!r}")

    if backend is not None:
        xh = np.asarray(to_numpy(x0))
        dtype = xh.dtype if xh.dtype in (np.float32, np.float64) else np.float64
        x0 = get_backend(backend, dtype=dtype).asarray(xh)
    xp = namespace(x0)
    x0 = xp.asarray(x0)
    if x0.ndim not in (2, 3) or x0.dtype.kind != "f":
        raise ValueError(f"x0 must be a float array of shape (n, d) or (batch, n, d); got shape "
                         f"{tuple(x0.shape)}, dtype {x0.dtype}")
    host0 = to_numpy(x0)
    if not np.isfinite(host0).all():
        raise ValueError("x0 contains NaN or inf; initial tokens must be finite")
    if geometry == "sphere":
        tol = sphere_tolerance(host0.dtype)
        err = float(np.max(np.abs(np.linalg.norm(host0, axis=-1) - 1.0)))
        if err > tol:
            raise ValueError(f"x0 must lie on the unit sphere for a sphere field (max | |x_i| - 1 | "
                             f"= {err:.3g} > {tol:.3g}, the tolerance for {host0.dtype}); normalise "
                             f"it first (engine.tokenflow.normalise)")
    rec_steps = _record_steps(n_steps, dt, record_every, record_times)
    obs = dict(observables or {})
    for k, fn in obs.items():
        if not callable(fn):
            raise TypeError(f"observables[{k!r}] must be callable fn(x) -> array; got {type(fn).__name__}")
    lead = tuple(x0.shape[:-2])
    n, d = x0.shape[-2:]
    is_sinkhorn = getattr(field, "variant", None) == "sinkhorn"

    own_writer = None
    if path is not None:
        from rieszflow.engine.storage import TrajectoryWriter

        own_writer = TrajectoryWriter(path, "token_flow", config=config, attrs=attrs, overwrite=overwrite)
        writer = own_writer
    p = prefix
    if writer is not None:
        tdim, kdim, cdim, bdim = f"{p}time", f"{p}token", f"{p}coord", f"{p}batch"
        writer.dimension(tdim, None, attrs={"long_name": "flow time (depth)", "units": "1"})
        writer.dimension(kdim, n, coords=np.arange(n), attrs={"long_name": "token index", "units": "1"})
        writer.dimension(cdim, d, coords=np.arange(d),
                         attrs={"long_name": "coordinate of a token", "units": "1"})
        bd = ()
        if lead:
            writer.dimension(bdim, lead[0], coords=np.arange(lead[0]),
                             attrs={"long_name": "token cloud of the batch", "units": "1"})
            bd = (bdim,)
        writer.variable(f"{p}x", (tdim, *bd, kdim, cdim),
                        attrs={"long_name": "token positions", "units": "1", "integrator": method,
                               "dt": dt})
        for k in obs:
            writer.variable(f"{p}{k}", (tdim, *bd), attrs={"long_name": k, "units": "1"})
        if is_sinkhorn:
            writer.variable(f"{p}sinkhorn_residual", (tdim,),
                            attrs={"long_name": "max |row/column sum - 1| since the previous record",
                                   "units": "1"})

    times, traj, obs_rec, res_rec = [], [], {k: [] for k in obs}, []
    state = init_fn(x0)
    max_res = None
    rec_set = {int(s): i for i, s in enumerate(rec_steps)}

    def record(st, res):
        host = to_numpy(st.x)
        if not np.isfinite(host).all():
            raise FloatingPointError(f"tokens became non-finite by t={st.t:.6g} (step {st.step}); "
                                     f"reduce dt or check the kernel scale")
        t_rec = st.step * dt
        times.append(t_rec)
        if keep_trajectory:
            traj.append(host)
        values = {f"{p}x": host}
        for k, fn in obs.items():
            val = np.asarray(to_numpy(fn(st.x)), dtype=np.float64)
            if val.shape != lead:
                raise ValueError(f"observable {k!r} returned shape {val.shape}; expected {lead} "
                                 f"(one value per cloud)")
            obs_rec[k].append(val)
            values[f"{p}{k}"] = val
        if is_sinkhorn:
            r = np.nan if res is None else float(to_numpy(res))
            res_rec.append(r)
            values[f"{p}sinkhorn_residual"] = np.float64(r)
        if writer is not None:
            writer.append(f"{p}time", values, coord=t_rec)

    acc = {"res": max_res}

    def after_step(st):                    # device-side: the largest Sinkhorn residual since a record
        if st.residual is not None:
            acc["res"] = _maxres(xp, acc["res"], st.residual)

    def record_state(st):
        record(st, acc["res"] if st.step else None)
        acc["res"] = None

    try:
        state = run(step_fn, state, n_steps, record=record_state, record_steps=rec_set,
                    record_initial=0 in rec_set, record_final=False, after_step=after_step,
                    progress=not quiet, desc=desc, leave=False)
    except BaseException as e:
        if own_writer is not None:
            own_writer.close("interrupted" if isinstance(e, KeyboardInterrupt) else "failed")
        raise
    if own_writer is not None:
        own_writer.close()
    return FlowResult(
        times=np.asarray(times),
        x=np.stack(traj) if keep_trajectory else None,
        observables={k: np.stack(v) for k, v in obs_rec.items()},
        sinkhorn_residual=np.asarray(res_rec) if is_sinkhorn else None,
        final=state,
        path=None if own_writer is None else own_writer.path,
    )
