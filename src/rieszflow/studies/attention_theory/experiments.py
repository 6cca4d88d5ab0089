"""Paper 004's bounds against measured W1 ratios: the experiments of the attention-theory study.

Each experiment returns a :class:`BoundRow`: per-trial measured ratios next to the paper's
constant (as printed) and the corrected constant (docs/specs/paper004_attention_theory.md
section 4), on random token sets, on adversarial ones (Nelder-Mead or the spec's explicit
constructions), or on a counterexample family (Cor. 30 in exact decimal arithmetic). A ratio
counts as a violation when it exceeds the bound by more than a relative :data:`RTOL`.

This module runs them all (:func:`experiments`); they live in
:mod:`~rieszflow.studies.attention_theory.bound_rows` (:class:`BoundRow`, :data:`RTOL`),
:mod:`~rieszflow.studies.attention_theory.instances` (random token sets),
:mod:`~rieszflow.studies.attention_theory.component_bounds` (model checks, Props. 19-25,
Thm. 23, Lemmas 31 and 40), :mod:`~rieszflow.studies.attention_theory.cor30` (Cor. 30) and
:mod:`~rieszflow.studies.attention_theory.prop26` (Prop. 26), and every name listed in
``__all__`` is importable from here too.
"""
from __future__ import annotations

import time

import numpy as np

from rieszflow.studies.attention_theory.bound_rows import RTOL, BoundRow
from rieszflow.studies.attention_theory.component_bounds import (
    adversarial_local_lipschitz,
    _cor24_rows,
    _lemma31_rows,
    _lemma40_row,
    model_checks,
    _prop19_key_rows,
    _prop19_query_rows,
    _prop20_rows,
    _prop21_rows,
    _prop25_row,
    _thm23_rows,
)
from rieszflow.studies.attention_theory.cor30 import (
    cor30_family,
    cor30_particle_ratio,
    _cor30_row,
    cor30_two_atom_ratio_decimal,
    cor30_two_atom_ratio_jacobian,
)
from rieszflow.studies.attention_theory.config import AttentionTheoryConfig
from rieszflow.studies.attention_theory.instances import GBoxInstance, gbox_instance
from rieszflow.studies.attention_theory.prop26 import fixed_point_collapse, _prop26_rows

__all__ = [
    "RTOL",
    "BoundRow",
    "GBoxInstance",
    "gbox_instance",
    "adversarial_local_lipschitz",
    "cor30_family",
    "cor30_particle_ratio",
    "cor30_two_atom_ratio_decimal",
    "cor30_two_atom_ratio_jacobian",
    "fixed_point_collapse",
    "model_checks",
    "experiments",
]


def experiments(config: AttentionTheoryConfig, log=None) -> tuple:
    """Run every experiment of the study.

    Parameters
    ----------
    config : AttentionTheoryConfig
    log : callable, optional
        ``log(message)`` progress callback.

    Returns
    -------
    rows : list of BoundRow
    cor30 : dict
        Output of :func:`cor30_family`.
    fixed_point : dict
        Output of :func:`fixed_point_collapse`.
    model : dict
        Output of :func:`model_checks`.
    """
    log = log or (lambda msg: None)
    c = config
    ss = np.random.SeedSequence(c.seed)
    streams = [np.random.default_rng(s) for s in ss.spawn(11)]
    rows = []
    model = model_checks(streams[10])
    log("model checks (Prop 9, Prop 12, invariances) done")
    steps = [
        ("Prop 19(i)", lambda: _prop19_query_rows(
            streams[0], c.n_component_instances, c.n_adversarial_instances,
            c.adversarial_restarts, c.adversarial_maxfev)),
        ("Prop 19(ii)", lambda: _prop19_key_rows(streams[1], c.n_component_instances)),
        ("Prop 20", lambda: _prop20_rows(streams[2], c.n_projection_pairs)),
        ("Prop 21", lambda: _prop21_rows(streams[3], c.n_component_instances)),
        ("Thm 23", lambda: _thm23_rows(streams[4], c.n_component_instances,
                                       c.n_adversarial_instances, c.adversarial_restarts,
                                       c.adversarial_maxfev)),
        ("Cor 24", lambda: _cor24_rows(streams[5], c.n_query_instances, c.query_pairs,
                                       c.adversarial_maxfev)),
        ("Prop 25", lambda: _prop25_row(streams[6], c.n_component_instances)),
        ("Lemma 31", lambda: _lemma31_rows(streams[7], c.n_lemma31_instances)),
        ("Lemma 40", lambda: _lemma40_row(streams[8])),
    ]
    for name, fn in steps:
        t0 = time.perf_counter()
        rows.extend(fn())
        log(f"{name}: {time.perf_counter() - t0:.1f} s")
    t0 = time.perf_counter()
    fam = cor30_family(c.cor30_particle_sizes, c.cor30_log_sizes, c.cor30_step,
                       c.cor30_decimal_digits)
    rows.extend(_cor30_row(fam))
    log(f"Cor 30: {time.perf_counter() - t0:.1f} s")
    t0 = time.perf_counter()
    fp = fixed_point_collapse(streams[9], c.fixed_point_betas, c.fixed_point_layers,
                              c.fixed_point_tokens)
    rows.extend(_prop26_rows(fp))
    log(f"Prop 26: {time.perf_counter() - t0:.1f} s")
    return rows, fam, fp, model
