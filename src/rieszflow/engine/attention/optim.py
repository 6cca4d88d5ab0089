"""Adam over a named subset of a flat parameter dict (NumPy or CuPy, in place).

References
----------
Kingma & Ba (2015), "Adam: a method for stochastic optimization", Algorithm 1;
Loshchilov & Hutter (2019), "Decoupled weight decay regularization" (AdamW);
paper 000, App. F.2 (Phase B: Adam, learning rate 2e-4).
"""
from __future__ import annotations

import math

import numpy as np

from rieszflow.engine._checks import check_real

from rieszflow.engine.backend import namespace, to_numpy

__all__ = ["Adam", "WarmupCosine", "WarmupLinear", "clip_by_value"]


class WarmupCosine:
    """Linear warm-up followed by cosine decay to zero: a multiplier of the base rate.

    For the optimiser step with 0-based index ``t`` (``t`` steps taken before it),
    ``W = warmup_steps``, ``T = total_steps``::

        f(t) = (t + 1) / W                                   for t < W
        f(t) = (1 + cos(pi * (t - W) / (T - W))) / 2         for W <= t < T
        f(t) = 0                                             for t >= T

    so the first step already moves (``1 / W``), the rate peaks at ``t = W - 1``
    and reaches 0 at ``t = T``. Steps past ``T`` get rate 0 (the schedule is over).

    Parameters
    ----------
    total_steps : int
        Number of optimiser steps of the whole training, ``>= 1``.
    warmup_steps : int
        Warm-up steps, ``0 <= warmup_steps < total_steps``.

    Raises
    ------
    ValueError
        If the step counts are not integers in range.

    References
    ----------
    Loshchilov & Hutter (2017), "SGDR: stochastic gradient descent with warm restarts"
    (cosine annealing); Goyal et al. (2017) (linear warm-up); paper 000, Section 5
    ("AdamW with linear warmup and cosine decay").
    """

    def __init__(self, total_steps: int, warmup_steps: int):
        for name, v in (("total_steps", total_steps), ("warmup_steps", warmup_steps)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise ValueError(f"{name}={v!r} must be an integer")
        if total_steps < 1:
            raise ValueError(f"total_steps={total_steps} must be >= 1")
        if not 0 <= warmup_steps < total_steps:
            raise ValueError(f"warmup_steps={warmup_steps} must lie in [0, total_steps={total_steps})")
        self.total_steps, self.warmup_steps = int(total_steps), int(warmup_steps)

    def __call__(self, t: int) -> float:
        """Multiplier of the base rate for the step with 0-based index ``t``.

        Parameters
        ----------
        t : int
            Steps taken before this one, ``>= 0``.

        Returns
        -------
        float
            In [0, 1].
        """
        w, n = self.warmup_steps, self.total_steps
        if t < w:
            return (t + 1) / w
        if t >= n:
            return 0.0
        return 0.5 * (1.0 + math.cos(math.pi * (t - w) / (n - w)))

    def __repr__(self):
        return f"WarmupCosine(total_steps={self.total_steps}, warmup_steps={self.warmup_steps})"



class WarmupLinear(WarmupCosine):
    """Linear warm-up followed by linear decay to zero (PyTorch ``OneCycleLR`` with linear anneal).

    For the step with 0-based index ``t``, ``W = warmup_steps``, ``T = total_steps``::

        f(t) = (t + 1) / W                 for t < W
        f(t) = (T - t) / (T - W)           for W <= t < T
        f(t) = 0                           for t >= T

    Parameters
    ----------
    total_steps : int
        Optimiser steps of the whole training, ``>= 1``.
    warmup_steps : int
        ``0 <= warmup_steps < total_steps``.

    Raises
    ------
    ValueError
        If the step counts are not integers in range.

    References
    ----------
    Skyformer LRA code (``OneCycleLR``, ``anneal_strategy="linear"``), the LRA recipe of
    paper 001 (spec section 2.1: 5% warm-up then linear decay).
    """

    def __call__(self, t: int) -> float:
        """Multiplier of the base rate for the step with 0-based index ``t``.

        Parameters
        ----------
        t : int
            Steps taken before this one, ``>= 0``.

        Returns
        -------
        float
            In [0, 1].
        """
        w, n = self.warmup_steps, self.total_steps
        if t < w:
            return (t + 1) / w
        if t >= n:
            return 0.0
        return (n - t) / (n - w)

    def __repr__(self):
        return f"WarmupLinear(total_steps={self.total_steps}, warmup_steps={self.warmup_steps})"


def clip_by_value(grads: dict, value: float) -> int:
    """Clip every gradient entry to ``[-value, value]`` in place (PyTorch ``clip_grad_value_``).

    Parameters
    ----------
    grads : dict
        ``name -> array`` (NumPy or CuPy), modified in place.
    value : float
        Bound, ``> 0``.

    Returns
    -------
    int
        Number of entries that were clipped (a diagnostic; one host sync per array).

    Raises
    ------
    ValueError
        If ``value`` is not a positive finite number.

    References
    ----------
    The LRA recipe of paper 001 (spec section 2.1: gradient clipping by value at 1.0).
    """
    value = check_real("value", value, low=0.0, low_open=True)
    n = 0
    for g in grads.values():
        xp = namespace(g)
        n += int((xp.abs(g) > value).sum())
        xp.clip(g, -value, value, out=g)
    return n

class Adam:
    """Adam with bias correction, updating ``params[name]`` in place for the chosen names.

    For each parameter ``p`` with gradient ``g`` at step ``t = 1, 2, ...``::

        g   <- g + weight_decay * p           (only if weight_decay > 0 and not decoupled)
        m   <- beta1 * m + (1 - beta1) * g
        v   <- beta2 * v + (1 - beta2) * g^2
        p   <- p - lr * (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)
        p   <- p - lr * weight_decay * p_old  (only if weight_decay > 0 and decoupled, AdamW)

    (``eps`` is added outside the square root, as in Kingma & Ba and PyTorch.)

    Parameters
    ----------
    params : dict
        ``name -> array`` (NumPy or CuPy); updated in place.
    names : iterable of str
        The names to update (e.g. ``model.parameter_names(["particles"])``);
        the others are left untouched.
    lr : float, default 2e-4
        Step size (> 0); paper 000, App. F.2 uses 2e-4 in Phase B.
    betas : (float, float), default (0.9, 0.999)
        Moment decay rates in [0, 1).
    eps : float, default 1e-8
        Denominator floor (> 0).
    weight_decay : float, default 0.0
        L2 coefficient (>= 0); 0 disables it (paper 000 states none).
    decoupled : bool, default False
        False: classic L2 added to the gradient (PyTorch ``Adam``); True:
        decoupled decay (``AdamW``).
    schedule : callable or None, default None
        ``schedule(t) -> float``, the multiplier of ``lr`` for the step with
        0-based index ``t`` (e.g. :class:`WarmupCosine`); the decoupled decay uses
        the scheduled rate too, as PyTorch's AdamW does. None: constant ``lr``.

    Raises
    ------
    ValueError
        On an unknown or repeated name, non-float parameters, or an
        out-of-range hyperparameter.

    Notes
    -----
    Moments are stored with the dtype and backend of each parameter. The
    update is a few in-place array operations per tensor into a preallocated
    scratch buffer (no large temporaries, which matters for the embedding
    table), with no host synchronisation. Bias correction uses
    ``m_hat = m / (1 - beta1^t)`` and ``v_hat = v / (1 - beta2^t)``.

    References
    ----------
    Kingma & Ba (2015), Algorithm 1; Loshchilov & Hutter (2019) (decoupled
    decay); paper 000, App. F.2 (Adam, learning rate 2e-4).
    """

    def __init__(self, params: dict, names, lr: float = 2e-4, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, decoupled: bool = False, schedule=None):
        names = [names] if isinstance(names, str) else list(names)
        unknown = [k for k in names if k not in params]
        if unknown:
            raise ValueError(f"names contains {unknown!r}, not in params (allowed: {sorted(params)})")
        if len(set(names)) != len(names):
            raise ValueError(f"names={names!r} contains repeated names")
        for k in names:
            if not hasattr(params[k], "dtype") or np.dtype(params[k].dtype).kind != "f":
                raise ValueError(f"params[{k!r}] must be a floating array; got {type(params[k]).__name__}")
        self.lr = check_real("lr", lr, low=0.0, low_open=True)
        if not (hasattr(betas, "__len__") and len(betas) == 2):
            raise ValueError(f"betas={betas!r} is not allowed; expected a pair (beta1, beta2)")
        self.betas = (check_real("betas[0]", betas[0], low=0.0, high=1.0, high_open=True),
                      check_real("betas[1]", betas[1], low=0.0, high=1.0, high_open=True))
        self.eps = check_real("eps", eps, low=0.0, low_open=True)
        self.weight_decay = check_real("weight_decay", weight_decay, low=0.0)
        self.decoupled = bool(decoupled)
        if schedule is not None and not callable(schedule):
            raise ValueError(f"schedule={schedule!r} must be a callable t -> multiplier, or None")
        self.schedule = schedule
        self.params = params
        self.names = names
        self.t = 0
        self.m = {k: namespace(params[k]).zeros_like(params[k]) for k in names}
        self.v = {k: namespace(params[k]).zeros_like(params[k]) for k in names}
        self._scratch = {k: namespace(params[k]).empty_like(params[k]) for k in names}

    def step(self, grads: dict) -> None:
        """Apply one Adam update to every name in ``names``.

        Parameters
        ----------
        grads : dict
            ``name -> gradient`` with at least the optimiser's names, each of
            the parameter's shape (extra names are ignored).

        Returns
        -------
        None
            The parameters (and moments) are updated in place.

        Raises
        ------
        ValueError
            If a name is missing from ``grads`` or a shape differs.
        """
        missing = [k for k in self.names if k not in grads]
        if missing:
            raise ValueError(f"grads lacks {missing!r}, which this optimiser updates")
        for k in self.names:
            if tuple(grads[k].shape) != tuple(self.params[k].shape):
                raise ValueError(f"grads[{k!r}] has shape {tuple(grads[k].shape)}; expected "
                                 f"{tuple(self.params[k].shape)}")
        lr = self.lr if self.schedule is None else self.lr * float(self.schedule(self.t))
        self.t += 1
        b1, b2 = self.betas
        c1 = 1.0 - b1 ** self.t
        c2 = 1.0 - b2 ** self.t
        step = lr / c1
        sqrt_c2 = math.sqrt(c2)
        for k in self.names:
            p = self.params[k]
            xp = namespace(p)
            g = grads[k]
            if self.weight_decay and not self.decoupled:
                g = g + self.weight_decay * p
            m, v, tmp = self.m[k], self.v[k], self._scratch[k]
            m *= b1
            xp.multiply(g, 1.0 - b1, out=tmp)
            m += tmp
            v *= b2
            xp.multiply(g, g, out=tmp)
            tmp *= 1.0 - b2
            v += tmp
            xp.sqrt(v, out=tmp)                 # tmp = sqrt(v_hat) * sqrt(c2) ...
            tmp *= 1.0 / sqrt_c2                # ... = sqrt(v_hat)
            tmp += self.eps
            xp.divide(m, tmp, out=tmp)
            tmp *= step                         # lr * m_hat / (sqrt(v_hat) + eps)
            if self.weight_decay and self.decoupled:
                p *= 1.0 - lr * self.weight_decay
            p -= tmp

    def state_dict(self) -> dict:
        """Host copy of the optimiser state as a flat ``name -> numpy.ndarray`` dict.

        Flat and free of Python objects, so it can be stored with
        ``numpy.savez`` (``allow_pickle=False``) or HDF5 beside the model's
        state dict.


        Returns
        -------
        dict
            0-d arrays ``"step"`` (int64, number of steps taken), ``"lr"``,
            ``"beta1"``, ``"beta2"``, ``"eps"``, ``"weight_decay"`` (float64),
            ``"decoupled"`` (bool); and, for every updated parameter name,
            ``"m.<name>"`` and ``"v.<name>"`` (the moments, parameter shape).
        """
        state = {"step": np.array(self.t, dtype=np.int64), "lr": np.array(self.lr),
                 "beta1": np.array(self.betas[0]), "beta2": np.array(self.betas[1]),
                 "eps": np.array(self.eps), "weight_decay": np.array(self.weight_decay),
                 "decoupled": np.array(self.decoupled)}
        for k in self.names:
            state[f"m.{k}"] = to_numpy(self.m[k]).copy()
            state[f"v.{k}"] = to_numpy(self.v[k]).copy()
        return state

    def load_state_dict(self, state: dict) -> None:
        """Restore the step count, hyperparameters and moments from :meth:`state_dict`.

        Parameters
        ----------
        state : dict
            Output of :meth:`state_dict` (possibly after a round trip through
            ``numpy.savez``/``numpy.load``) of an optimiser over the same names.

        Returns
        -------
        None

        Raises
        ------
        ValueError
            If the moment names differ from this optimiser's names, a moment
            shape differs, or a hyperparameter is missing or out of range.
        """
        scalars = ("step", "lr", "beta1", "beta2", "eps", "weight_decay", "decoupled")
        missing = [k for k in scalars if k not in state]
        if missing:
            raise ValueError(f"state lacks {missing!r}; expected the output of Adam.state_dict()")
        names = sorted(k[2:] for k in state if k.startswith("m."))
        if names != sorted(self.names) or sorted(k[2:] for k in state if k.startswith("v.")) != names:
            raise ValueError(f"state has moments for {names!r}; this optimiser updates {sorted(self.names)!r}")
        for key in ("m", "v"):
            for k in self.names:
                a = np.asarray(state[f"{key}.{k}"])
                if a.shape != tuple(self.params[k].shape):
                    raise ValueError(f"state[{key + '.' + k!r}] has shape {a.shape}; expected "
                                     f"{tuple(self.params[k].shape)}")
        step = int(np.asarray(state["step"]))
        if step < 0:
            raise ValueError(f"state['step']={step} is not allowed; expected >= 0")
        lr = check_real("lr", float(np.asarray(state["lr"])), low=0.0, low_open=True)
        betas = (check_real("beta1", float(np.asarray(state["beta1"])), low=0.0, high=1.0, high_open=True),
                 check_real("beta2", float(np.asarray(state["beta2"])), low=0.0, high=1.0, high_open=True))
        eps = check_real("eps", float(np.asarray(state["eps"])), low=0.0, low_open=True)
        wd = check_real("weight_decay", float(np.asarray(state["weight_decay"])), low=0.0)
        self.t, self.lr, self.betas, self.eps, self.weight_decay = step, lr, betas, eps, wd
        self.decoupled = bool(np.asarray(state["decoupled"]))
        for k in self.names:
            xp = namespace(self.params[k])
            self.m[k][...] = xp.asarray(np.asarray(state[f"m.{k}"]), dtype=self.m[k].dtype)
            self.v[k][...] = xp.asarray(np.asarray(state[f"v.{k}"]), dtype=self.v[k].dtype)
