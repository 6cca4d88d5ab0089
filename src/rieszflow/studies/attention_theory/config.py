"""Configuration of the ``attention-theory`` study (paper 004's bounds, measured).

A frozen dataclass with strict construction: unknown keys raise, every field is type- and
range-checked, and :meth:`AttentionTheoryConfig.quick` gives the ~1 minute variant.
"""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any, Mapping

from rieszflow.config import is_int

__all__ = ["AttentionTheoryConfig"]




@dataclasses.dataclass(frozen=True)
class AttentionTheoryConfig:
    """Sizes and seeds of every experiment of the study.

    Parameters
    ----------
    seed : int, default 0
        Seed of the host ``numpy.random.Generator`` (every random draw of the study comes from it).
    n_component_instances : int, default 300
        Random instances for Prop. 19 (i)/(ii), Prop. 21, Thm. 23 (random pairs) and Prop. 25
        (spec tests T11-T13, T22).
    n_projection_pairs : int, default 500
        Random measure pairs for Prop. 20, tau(Pi) (spec T10).
    n_adversarial_instances : int, default 30
        Instances of the adversarial local-Lipschitz search for Thm. 23 (spec T15).
    adversarial_restarts : int, default 5
        Nelder-Mead restarts per adversarial instance.
    adversarial_maxfev : int, default 1500
        Objective evaluations per Nelder-Mead run.
    n_query_instances : int, default 100
        Instances for Cor. 24 (each with ``query_pairs`` random query pairs and one adversarial
        search over the query).
    query_pairs : int, default 200
        Random query pairs per Cor. 24 instance.
    n_lemma31_instances : int, default 200
        Performer-against-softmax instances for Lemma 31 (spec T21).
    cor30_particle_sizes : tuple of int, default (100, 300, 1000, 3000)
        Token counts N of the particle-array counterexample to Cor. 30 (spec T18).
    cor30_log_sizes : tuple of float, default (10, 20, 30, 36, 40, 50, 60)
        Values of ln N for the weighted two-atom counterexample (spec T19).
    cor30_step : float, default 1e-6
        Displacement h of the singleton token in the particle-array family.
    cor30_decimal_digits : int, default 60
        Working precision (decimal digits) of the high-precision two-atom check.
    fixed_point_betas : tuple of float, default (0.1, 3.0, 30.0)
        Inverse temperatures of the Prop. 26 collapse experiment (spec T23).
    fixed_point_layers : int, default 40
        Depth of the weight-shared recursion.
    fixed_point_tokens : int, default 16
        Tokens per input of the recursion.

    Raises
    ------
    ValueError
        If a value is out of range (the message names the field, the value and what is allowed).
    TypeError
        If a value has the wrong type.

    References
    ----------
    Spec ``paper004_attention_theory.md`` section 8 (acceptance tests and their sizes).
    """

    seed: int = 0
    n_component_instances: int = 300
    n_projection_pairs: int = 500
    n_adversarial_instances: int = 30
    adversarial_restarts: int = 5
    adversarial_maxfev: int = 1500
    n_query_instances: int = 100
    query_pairs: int = 200
    n_lemma31_instances: int = 200
    cor30_particle_sizes: tuple = (100, 300, 1000, 3000)
    cor30_log_sizes: tuple = (10.0, 20.0, 30.0, 36.0, 40.0, 50.0, 60.0)
    cor30_step: float = 1e-6
    cor30_decimal_digits: int = 60
    fixed_point_betas: tuple = (0.1, 3.0, 30.0)
    fixed_point_layers: int = 40
    fixed_point_tokens: int = 16

    # ------------------------------------------------------------------------------------------
    def __post_init__(self):
        if not is_int(self.seed) or self.seed < 0:
            raise ValueError(f"seed must be an integer >= 0, got {self.seed!r}")
        minimum = {"n_component_instances": 1, "n_projection_pairs": 1,
                   "n_adversarial_instances": 1, "adversarial_restarts": 1,
                   "adversarial_maxfev": 10, "n_query_instances": 1, "query_pairs": 1,
                   "n_lemma31_instances": 1, "cor30_decimal_digits": 30,
                   "fixed_point_layers": 2, "fixed_point_tokens": 2}
        for name, low in minimum.items():
            v = getattr(self, name)
            if not is_int(v):
                raise TypeError(f"{name} must be an integer, got {v!r} ({type(v).__name__})")
            if v < low:
                raise ValueError(f"{name} must be >= {low}, got {v!r}")
        sizes = self._tuple("cor30_particle_sizes", self.cor30_particle_sizes)
        if not sizes or any(not is_int(n) or n < 3 for n in sizes):
            raise ValueError(f"cor30_particle_sizes must be a non-empty list of integers >= 3, "
                             f"got {self.cor30_particle_sizes!r}")
        object.__setattr__(self, "cor30_particle_sizes", tuple(sorted(sizes)))
        logs = self._tuple("cor30_log_sizes", self.cor30_log_sizes)
        if not logs or any(isinstance(v, bool) or not isinstance(v, (int, float))
                           or not math.isfinite(v) or not 2.0 <= v <= 700.0 for v in logs):
            raise ValueError(f"cor30_log_sizes must be a non-empty list of numbers ln N in "
                             f"[2, 700], got {self.cor30_log_sizes!r}")
        object.__setattr__(self, "cor30_log_sizes", tuple(sorted(float(v) for v in logs)))
        h = self.cor30_step
        if isinstance(h, bool) or not isinstance(h, (int, float)) or not 0 < h <= 1e-2:
            raise ValueError(f"cor30_step must be a number in (0, 1e-2], got {h!r}")
        betas = self._tuple("fixed_point_betas", self.fixed_point_betas)
        if not betas or any(isinstance(b, bool) or not isinstance(b, (int, float))
                            or not math.isfinite(b) or b < 0 for b in betas):
            raise ValueError(f"fixed_point_betas must be a non-empty list of finite numbers "
                             f">= 0, got {self.fixed_point_betas!r}")
        object.__setattr__(self, "fixed_point_betas", tuple(float(b) for b in betas))

    @staticmethod
    def _tuple(name, v):
        if isinstance(v, (str, bytes)) or not isinstance(v, (tuple, list)):
            raise TypeError(f"{name} must be a list or tuple, got {v!r} ({type(v).__name__})")
        return tuple(v)

    # ------------------------------------------------------------------------------------------
    @classmethod
    def field_names(cls) -> tuple:
        """Names of every configuration field."""
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def quick(cls, **overrides) -> "AttentionTheoryConfig":
        """The ~1 minute variant (fewer instances, N <= 1000), with optional overrides.

        Parameters
        ----------
        **overrides
            Field values replacing the quick defaults (unknown names raise ValueError).

        Returns
        -------
        AttentionTheoryConfig
        """
        base = dict(n_component_instances=60, n_projection_pairs=100, n_adversarial_instances=6,
                    adversarial_restarts=2, adversarial_maxfev=600, n_query_instances=20,
                    query_pairs=100, n_lemma31_instances=50, cor30_particle_sizes=(100, 300, 1000),
                    fixed_point_layers=30)
        return cls.from_mapping({**base, **overrides})

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any], base: "AttentionTheoryConfig | None" = None
                     ) -> "AttentionTheoryConfig":
        """Strict construction from a mapping (e.g. parsed JSON).

        Parameters
        ----------
        mapping : mapping of str to value
            Field values; lists are accepted for tuple fields.
        base : AttentionTheoryConfig, optional
            Values for the fields missing from ``mapping`` (defaults when None).

        Returns
        -------
        AttentionTheoryConfig

        Raises
        ------
        ValueError
            If ``mapping`` has a key that is not a field (the message lists the allowed keys),
            or a value is out of range.
        TypeError
            If ``mapping`` is not a mapping or a value has the wrong type.
        """
        if not isinstance(mapping, Mapping):
            raise TypeError(f"config must be a mapping of field names to values, got "
                            f"{type(mapping).__name__}")
        allowed = cls.field_names()
        unknown = sorted(set(mapping) - set(allowed))
        if unknown:
            raise ValueError(f"unknown attention-theory config key(s) {unknown}; allowed keys: "
                             f"{', '.join(allowed)}")
        values = dataclasses.asdict(base) if base is not None else {}
        values.update(mapping)
        values = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}
        return cls(**values)

    @classmethod
    def from_json(cls, path,
                  base: "AttentionTheoryConfig | None" = None) -> "AttentionTheoryConfig":
        """Read a JSON object of field overrides from ``path`` (strict, see :meth:`from_mapping`).

        Raises
        ------
        FileNotFoundError
            If ``path`` does not exist.
        ValueError
            If the file is not a JSON object or holds unknown keys.
        """
        text = Path(path).read_text()
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"config file {path} is not valid JSON: {e}") from e
        if not isinstance(data, dict):
            raise ValueError(f"config file {path} must hold a JSON object, got "
                             f"{type(data).__name__}")
        return cls.from_mapping(data, base=base)

    def to_dict(self) -> dict:
        """Plain dict of every field (tuples as lists), for JSON and HDF5 attributes.

        Returns
        -------
        dict
            Field name to value, tuple values converted to lists.
        """
        return {k: list(v) if isinstance(v, tuple) else v
                for k, v in dataclasses.asdict(self).items()}
