"""Configurations: strict frozen dataclasses built from mappings, files and ``--set`` items.

Every configuration of rieszflow (the bundled model's :class:`rieszflow.learning.MainJobConfig`,
each study's, and a user's own) derives from :class:`StudyConfig`: it is built from a mapping or a
JSON/HDF5 file (unknown keys are an error that lists the allowed ones), replaced field by field
(``cfg.replace(n=...)``), typed from the command line (:func:`parse_overrides`), and resolved
against a preset, a file and a resumed run (:func:`resolve_config`). Value checks fail with
``ValueError`` naming the field, the value and what is allowed (bad input: exit code 2 in the CLI),
built on the engine's validators (:mod:`rieszflow.engine._checks`).

This is a shared layer: it imports only the engine, and the learning layer and every study use it.
"""
from __future__ import annotations

import dataclasses
import json
import math
import numbers
from pathlib import Path
from typing import Any, Mapping

from rieszflow.engine._checks import check_int, check_real

__all__ = ["StudyConfig", "from_mapping", "unwrap_config", "load_config_mapping", "config_real",
           "config_int", "is_int", "is_real", "resolve_config", "build_config", "replace_config",
           "parse_overrides"]


def is_int(v) -> bool:
    """True for an integer that is not a bool (Python or NumPy).

    Parameters
    ----------
    v : object
        The value to test.

    Returns
    -------
    bool
        Whether ``v`` is a :class:`numbers.Integral` other than a bool.
    """
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def is_real(v) -> bool:
    """True for a finite real number that is not a bool.

    Parameters
    ----------
    v : object
        The value to test.

    Returns
    -------
    bool
        Whether ``v`` is a finite :class:`numbers.Real` other than a bool.
    """
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(float(v))


def config_real(name: str, value, **bounds) -> float:
    """A configuration's real value: :func:`~rieszflow.engine._checks.check_real`, errors as ValueError.

    Parameters
    ----------
    name : str
        The configuration key.
    value : object
        Its value.
    **bounds
        ``positive``, ``nonnegative``, ``low``, ``high``, ``low_open``, ``high_open``.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        Naming the key, the value and what is allowed.
    """
    try:
        return check_real(name, value, **bounds)
    except TypeError as e:
        raise ValueError(str(e)) from None


def config_int(name: str, value, minimum: int | None = None) -> int:
    """A configuration's integer value (bool rejected), errors as ValueError.

    Parameters
    ----------
    name : str
        The configuration key.
    value : object
        Its value.
    minimum : int, optional
        Smallest allowed value.

    Returns
    -------
    int

    Raises
    ------
    ValueError
        Naming the key, the value and what is allowed.
    """
    try:
        return check_int(name, value, minimum=minimum)
    except TypeError as e:
        raise ValueError(str(e)) from None


def unwrap_config(d: Mapping[str, Any]) -> Mapping[str, Any]:
    """The configuration mapping inside the wrappers rieszflow writes (``{"json": {...}}``).

    Parameters
    ----------
    d : Mapping
        A configuration, or the ``{"json": config}`` wrapper some studies store.

    Returns
    -------
    Mapping
    """
    if isinstance(d, Mapping) and set(d) == {"json"} and isinstance(d["json"], Mapping):
        return d["json"]
    return d


def from_mapping(cfg_cls, d: Mapping[str, Any]):
    """Build the dataclass ``cfg_cls`` from a mapping, strictly.

    Parameters
    ----------
    cfg_cls : dataclass type
        The configuration class.
    d : Mapping
        Its fields (or the ``{"json": ...}`` wrapper of a stored configuration).

    Returns
    -------
    instance of ``cfg_cls``

    Raises
    ------
    TypeError
        If ``d`` is not a mapping.
    ValueError
        On unknown keys (the message lists the allowed ones), or as ``cfg_cls`` validates.
    """
    if not isinstance(d, Mapping):
        raise TypeError(f"{cfg_cls.__name__} needs a mapping, got {type(d).__name__}")
    d = unwrap_config(d)
    known = {f.name for f in dataclasses.fields(cfg_cls)}
    unknown = sorted(set(d) - known)
    if unknown:
        raise ValueError(f"unknown {cfg_cls.__name__} keys {unknown}; allowed: {sorted(known)}")
    return cfg_cls(**dict(d))


class StudyConfig:
    """Mixin of the flat study configurations (frozen dataclasses): strict ``from_dict``,
    ``to_dict`` and a validated ``replace``.

    A subclass may set ``config_label`` (the name its error messages use; default the class
    name). Nested configurations (mean-field, ldp) define their own ``from_dict``.
    """

    config_label = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]):
        """Build the configuration from a mapping; lists become tuples; unknown keys raise.

        Parameters
        ----------
        d : Mapping
            Field values (or the ``{"json": ...}`` wrapper of a stored configuration).

        Returns
        -------
        instance of the class

        Raises
        ------
        ValueError
            On unknown keys (the message lists the allowed ones), or as the class validates.
        """
        if not isinstance(d, Mapping):
            raise ValueError(f"{cls.__name__} needs a mapping, got {type(d).__name__}")
        d = unwrap_config(d)
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown {cls.config_label or cls.__name__} keys {unknown}; allowed: "
                             f"{sorted(known)}")
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in d.items()})

    def to_dict(self) -> dict:
        """Plain dict of every field (the resolved configuration).

        Returns
        -------
        dict of str to object
            Field name to value.
        """
        return dataclasses.asdict(self)

    def replace(self, **changes):
        """Copy with ``changes`` applied (validated; unknown keys raise).

        Parameters
        ----------
        **changes
            Field names and their new values.

        Returns
        -------
        instance of the class
            The new configuration (this one is unchanged).
        """
        return self.from_dict({**self.to_dict(), **changes})


def load_config_mapping(path) -> dict:
    """The configuration stored in a JSON file or in any rieszflow HDF5 file.

    Parameters
    ----------
    path : str or os.PathLike
        A ``.json`` file, or an HDF5 file written by rieszflow (its root attribute ``config``).

    Returns
    -------
    dict
        The configuration mapping, wrappers removed.

    Raises
    ------
    ValueError
        If the file does not exist, is not JSON / not a rieszflow file, or holds no configuration.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"--config {str(path)!r}: no such file")
    if path.suffix.lower() in (".h5", ".hdf5", ".nc"):
        from rieszflow.engine.storage import RunFileError, check_run_file

        import h5py

        try:
            check_run_file(path)
        except RunFileError as e:
            raise ValueError(f"--config {str(path)!r}: {e}") from None
        with h5py.File(path, "r") as f:
            raw = f.attrs.get("config")
        if raw is None:
            raise ValueError(f"--config {str(path)!r}: the file stores no configuration")
    else:
        raw = path.read_text()
    try:
        data = json.loads(raw)
    except (TypeError, ValueError) as e:
        raise ValueError(f"--config {str(path)!r}: not valid JSON ({e})") from None
    if not isinstance(data, Mapping):
        raise ValueError(f"--config {str(path)!r}: expected a JSON object, got {type(data).__name__}")
    return dict(unwrap_config(data))


def build_config(cfg_cls, mapping: Mapping[str, Any]):
    """Build a study configuration from a mapping with the class's own constructor.

    Parameters
    ----------
    cfg_cls : dataclass type
        A configuration class; its ``from_dict`` (or ``from_mapping``) classmethod is used when
        it has one (nested or tuple fields), else :func:`from_mapping`.
    mapping : Mapping
        The fields.

    Returns
    -------
    instance of ``cfg_cls``

    Raises
    ------
    ValueError
        On unknown keys or invalid values.
    """
    build = getattr(cfg_cls, "from_dict", None) or getattr(cfg_cls, "from_mapping", None)
    try:
        return build(dict(unwrap_config(mapping))) if build is not None else from_mapping(cfg_cls, mapping)
    except TypeError as e:
        raise ValueError(f"{cfg_cls.__name__}: {e}") from None


def replace_config(cfg, changes: Mapping[str, Any]):
    """``cfg`` with ``changes`` applied and validated (its ``replace`` method, else
    :func:`dataclasses.replace`).

    Parameters
    ----------
    cfg : dataclass instance
    changes : Mapping

    Returns
    -------
    same type as ``cfg``

    Raises
    ------
    ValueError
        On unknown keys (listing the allowed ones) or invalid values.
    """
    if not changes:
        return cfg
    known = {f.name for f in dataclasses.fields(cfg)}
    unknown = sorted(set(changes) - known)
    if unknown:
        raise ValueError(f"unknown {type(cfg).__name__} keys {unknown}; allowed: {sorted(known)}")
    try:
        if hasattr(cfg, "replace"):
            return cfg.replace(**changes)
        return dataclasses.replace(cfg, **changes)
    except TypeError as e:
        raise ValueError(f"{type(cfg).__name__}: {e}") from None


def resolve_config(cfg_cls, preset, *, config_file=None, given: Mapping[str, Any] | None = None,
                   overrides=(), special=None, resume_from=None, preset_flag: str | None = None):
    """The one configuration rule of every subcommand.

    A fresh run starts from the preset (``--quick`` or the full sizes), whose keys the
    ``--config FILE`` (if given) overrides, a full file replacing it entirely; then the options
    given on the command line, then ``--set`` items. With
    ``--resume`` and an existing ``--out`` file, the configuration stored in the file is the
    default and is returned unchanged: every given option or ``--set`` item that differs from
    it is an error naming the key, the stored and the given value.

    Parameters
    ----------
    cfg_cls : dataclass type
        The study's configuration class.
    preset : instance of ``cfg_cls``
        The configuration of the chosen size preset (with a ``to_dict`` method).
    config_file : path-like, optional
        ``--config``: a JSON file or an HDF5 file rieszflow wrote.
    given : Mapping, optional
        Options given on the command line (leave out the options not given; see
        :func:`~rieszflow.studies.base.given_options`).
    overrides : sequence of str
        ``--set KEY=VALUE`` items (typed by :func:`parse_overrides`).
    special : dict of str to callable, optional
        ``--set`` parsers for fields with their own syntax.
    resume_from : path-like, optional
        ``--out`` when ``--resume`` is given.
    preset_flag : str, optional
        The size flag given (``"--quick"``, ``"--smoke"``), if any: on resume its preset must
        agree with the stored configuration (seed, backend and given options aside), so a size
        flag is never silently ignored.

    Returns
    -------
    instance of ``cfg_cls``

    Raises
    ------
    ValueError
        On a bad file, unknown keys, invalid values, ``--config`` together with ``--resume`` of
        an existing file, or given options that differ from a resumed file's configuration.
    """
    given = dict(given or {})
    if resume_from is not None and Path(resume_from).is_file():
        if config_file is not None:
            raise ValueError(f"--resume continues {resume_from} with the configuration it stores; "
                             f"--config does not apply")
        stored = build_config(cfg_cls, load_config_mapping(resume_from))
        changes = dict(given)
        changes.update(parse_overrides(overrides, cfg_cls, special, defaults=stored))
        diff = []

        def as_stored(key, value):
            # the value as the stored configuration would hold it; one that the stored configuration
            # cannot take with its other keys (say times beyond its long_time) is kept as given
            try:
                return getattr(replace_config(stored, {key: value}), key)
            except ValueError:
                return value

        for key, value in changes.items():
            new = as_stored(key, value)
            if new != getattr(stored, key):
                diff.append(f"{key}: stored {getattr(stored, key)!r}, given {new!r}")
        if preset_flag is not None:
            skip = {"seed", "backend", *changes}
            for key, value in preset.to_dict().items():
                if key not in skip and as_stored(key, value) != getattr(stored, key):
                    diff.append(f"{key}: stored {getattr(stored, key)!r}, {preset_flag} {value!r}")
        if diff:
            raise ValueError(f"--resume: {resume_from} was written with another configuration "
                             f"({'; '.join(diff)}); drop these options"
                             f"{'' if preset_flag is None else ' and ' + preset_flag} (the file's "
                             f"configuration is the default) or start again with --overwrite")
        return stored
    cfg = preset
    if config_file is not None:                 # the file's keys override the preset's
        cfg = build_config(cfg_cls, {**preset.to_dict(), **load_config_mapping(config_file)})
    cfg = replace_config(cfg, given)
    return replace_config(cfg, parse_overrides(overrides, cfg_cls, special, defaults=cfg))


def parse_overrides(items, cfg_cls, special=None, defaults=None) -> dict:
    """Typed config overrides from ``--set KEY=VALUE`` strings.

    The type of each value follows the field's default in ``cfg_cls()``: bool
    (``true``/``false``/``1``/``0``), int, float, str, or a tuple given as
    comma-separated elements of the type of the default's first element.

    Parameters
    ----------
    items : list of str
        ``KEY=VALUE`` strings.
    cfg_cls : dataclass type
        The study's configuration class (instantiable without arguments).
    special : dict of str to callable, optional
        Parsers for fields that need their own syntax (``text -> value``).
    defaults : instance of ``cfg_cls``, optional
        Where the field types are read from (default ``cfg_cls()``; pass the current
        configuration for classes with required fields).

    Returns
    -------
    dict
        Field name to parsed value; the dataclass validates the values.

    Raises
    ------
    ValueError
        On a malformed item, an unknown key (the message lists the allowed
        ones) or a value that does not parse as the field's type.
    """
    special = special or {}
    names = {f.name for f in dataclasses.fields(cfg_cls)}
    defaults = cfg_cls() if defaults is None else defaults
    out = {}
    for item in items:
        if "=" not in item:
            raise ValueError(f"--set {item!r}: expected KEY=VALUE")
        key, text = item.split("=", 1)
        if key not in names:
            raise ValueError(f"--set {key}: unknown config key; allowed: {', '.join(sorted(names))}")
        default = getattr(defaults, key)
        try:
            if key in special:
                out[key] = special[key](text)
            elif isinstance(default, bool):
                if text.lower() not in ("true", "false", "1", "0"):
                    raise ValueError(f"--set {key}={text!r}: expected true, false, 1 or 0")
                out[key] = text.lower() in ("true", "1")
            elif isinstance(default, tuple):
                elem = type(default[0]) if default else float
                out[key] = tuple(elem(v) for v in text.split(",") if v)
            elif isinstance(default, int):
                out[key] = int(text)
            elif isinstance(default, float):
                out[key] = float(text)
            else:
                out[key] = text
        except ValueError as e:
            if str(e).startswith("--set"):
                raise
            raise ValueError(f"--set {key}={text!r}: not a valid value for a field like "
                             f"{default!r}") from None
    return out
