"""Configurations: strict frozen dataclasses built from mappings, files and ``--set`` items.

Every configuration of rieszflow (the bundled model's :class:`rieszflow.learning.MainJobConfig`,
each study's, and a user's own) derives from :class:`StudyConfig`: it is built from a mapping or a
JSON/HDF5 file (unknown keys are an error that lists the allowed ones), replaced field by field
(``cfg.replace(n=...)``), typed from the command line (:func:`parse_overrides`), and resolved
against a preset, a file and a resumed run (:func:`resolve_config`). Value checks fail with
``ValueError`` naming the field, the value and what is allowed (bad input: exit code 2 in the CLI),
built on the engine's validators (:mod:`rieszflow.engine._checks`). Under :func:`showing_config`
(``--show-config``) :func:`resolve_config` stops the command with :class:`ConfigShown`, and
:func:`describe_config` / :func:`format_config` list every field with its value, default, units and
allowed values (from field metadata ``{"units": ..., "allowed": ...}``, a class's ``field_info``, the
docstring and the validators' bounds).

This is a shared layer: it imports only the engine, and the learning layer and every study use it.
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import json
import math
import numbers
import re
from pathlib import Path
from typing import Any, Mapping

from rieszflow.engine._checks import check_int, check_real

__all__ = ["StudyConfig", "from_mapping", "unwrap_config", "load_config_mapping", "config_real",
           "config_int", "is_int", "is_real", "resolve_config", "build_config", "replace_config",
           "parse_overrides", "ConfigShown", "showing_config", "describe_config", "format_config"]

#: Set by :func:`showing_config`: :func:`resolve_config` raises :class:`ConfigShown`.
_SHOWING = contextvars.ContextVar("rieszflow_showing_config", default=False)
#: While :func:`describe_config` rebuilds a configuration: field name -> what its validator allows.
_TRACE = contextvars.ContextVar("rieszflow_config_trace", default=None)


def _traced(name: str, allowed: str) -> None:
    """Record what the validator of ``name`` allows (only while :func:`describe_config` runs)."""
    trace = _TRACE.get()
    if trace is not None:
        trace.setdefault(re.sub(r"\[\d+\]$", "", str(name)), allowed)


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
    _traced(name, _real_bounds(**bounds))
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
    _traced(name, "an integer" if minimum is None else f"an integer >= {minimum}")
    try:
        return check_int(name, value, minimum=minimum)
    except TypeError as e:
        raise ValueError(str(e)) from None


def _real_bounds(positive: bool = False, nonnegative: bool = False, allow_inf: bool = False,
                 low=None, high=None, low_open: bool = False, high_open: bool = False) -> str:
    """The words for what :func:`config_real` with these bounds allows (``"a real number > 0"``)."""
    parts = [text for on, text in ((positive, "> 0"), (nonnegative, ">= 0")) if on]
    if high is None and low is not None:
        parts.append(f"{'>' if low_open else '>='} {low:g}")
    elif low is None and high is not None:
        parts.append(f"{'<' if high_open else '<='} {high:g}")
    elif low is not None:
        parts.append(f"in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}")
    kind = "a real number" + (" or +inf" if allow_inf else "")
    return f"{kind} {' and '.join(parts)}" if parts else kind


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


def load_config_mapping(path, option: str = "--config") -> dict:
    """The configuration stored in a JSON file or in any rieszflow HDF5 file.

    Parameters
    ----------
    path : str or os.PathLike
        A ``.json`` file, or an HDF5 file written by rieszflow (its root attribute ``config``).
    option : str, default "--config"
        The command-line option that named ``path``, for the messages (``"--resume"`` when the
        file is the output being resumed).

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
        raise ValueError(f"{option} {str(path)!r}: no such file")
    if path.suffix.lower() in (".h5", ".hdf5", ".nc"):
        from rieszflow.engine.storage import RunFileError, check_run_file, read_hdf5

        try:
            check_run_file(path)
        except RunFileError as e:
            raise ValueError(f"{option} {str(path)!r}: {e}") from None
        with read_hdf5(path) as f:
            raw = f.attrs.get("config")
        if raw is None:
            raise ValueError(f"{option} {str(path)!r}: the file stores no configuration")
    else:
        raw = path.read_text()
    try:
        data = json.loads(raw)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{option} {str(path)!r}: not valid JSON ({e})") from None
    if not isinstance(data, Mapping):
        raise ValueError(f"{option} {str(path)!r}: expected a JSON object, got {type(data).__name__}")
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
                   overrides=(), special=None, resume_from=None, preset_flag: str | None = None,
                   finish=None):
    """The one configuration rule of every subcommand.

    A fresh run starts from the preset (``--quick`` or the full sizes), whose keys the
    ``--config FILE`` (if given) overrides, a full file replacing it entirely; then the options
    given on the command line, then ``--set`` items. With
    ``--resume`` and an existing ``--out`` file, the configuration stored in the file is the
    default and is returned unchanged: every given option or ``--set`` item that differs from
    it is an error naming the key, the stored and the given value.

    Under :func:`showing_config` (``--show-config``) the resolved configuration is not returned:
    :class:`ConfigShown` is raised with it, so the command stops before any work.

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
    finish : callable, optional
        ``finish(cfg) -> cfg``: what the command derives from the resolved configuration before it
        runs (say the Performer's scales from the model sizes); applied here so that
        ``--show-config`` shows it too.

    Returns
    -------
    instance of ``cfg_cls``

    Raises
    ------
    ValueError
        On a bad file, unknown keys, invalid values, ``--config`` together with ``--resume`` of
        an existing file, or given options that differ from a resumed file's configuration.
    ConfigShown
        Under :func:`showing_config`, with the configuration that would run.
    """
    given = dict(given or {})
    if resume_from is not None and Path(resume_from).is_file():
        if config_file is not None:
            raise ValueError(f"--resume continues {resume_from} with the configuration it stores; "
                             f"--config does not apply")
        stored = build_config(cfg_cls, load_config_mapping(resume_from, option="--resume"))
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

        def same_effect(key, value):
            # an override field that the stored configuration does not keep (say the bias study's
            # eta, stored in its problems) agrees when applying it leaves the stored form unchanged
            try:
                return replace_config(stored, {key: value}).to_dict() == stored.to_dict()
            except ValueError:
                return False

        for key, value in changes.items():
            new = as_stored(key, value)
            if new != getattr(stored, key) and not same_effect(key, value):
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
        return _resolved(cfg_cls, stored, preset, finish, resumed=resume_from)
    cfg = preset
    if config_file is not None:                 # the file's keys override the preset's
        cfg = build_config(cfg_cls, {**preset.to_dict(), **load_config_mapping(config_file)})
    cfg = replace_config(cfg, given)
    cfg = replace_config(cfg, parse_overrides(overrides, cfg_cls, special, defaults=cfg))
    return _resolved(cfg_cls, cfg, preset, finish)


def _resolved(cfg_cls, cfg, preset, finish, resumed=None):
    """``cfg`` after ``finish``; under :func:`showing_config` raise :class:`ConfigShown` with it."""
    if finish is not None:
        cfg = finish(cfg)
    if _SHOWING.get():
        raise ConfigShown(cfg_cls, cfg, preset, resumed=resumed)
    return cfg


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
                elem = type(default[0]) if default else None
                if elem is None:        # an empty default names no element type: numbers, else names
                    parse = _number_or_name
                else:
                    parse = (lambda v: _integer(key, v)) if elem is int else elem
                out[key] = tuple(parse(v) for v in text.split(",") if v)
            elif isinstance(default, int):
                out[key] = _integer(key, text)
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


def _number_or_name(text: str):
    """An element of a tuple field whose default is empty: a float where ``text`` is one, else the
    text itself (the names of cells, maps or problems)."""
    try:
        return float(text)
    except ValueError:
        return text


def _integer(key: str, text: str) -> int:
    """The integer ``text`` of field ``key``: an integer literal, or a decimal literal whose value is
    exactly an integer (``1e3`` -> 1000, ``2.0`` -> 2); anything else is a ValueError naming key,
    value and "an integer"."""
    from decimal import Decimal, InvalidOperation

    try:
        return int(text)
    except ValueError:
        pass
    try:
        d = Decimal(text.strip())
    except InvalidOperation:
        d = None
    if d is not None and d.is_finite() and d.adjusted() <= 300 and d == d.to_integral_value():
        return int(d)
    raise ValueError(f"--set {key}={text!r}: {key} takes an integer, and {text!r} is not an integer")


class ConfigShown(BaseException):
    """Raised by :func:`resolve_config` under :func:`showing_config`: the configuration that would
    run, in place of running it.

    A ``BaseException`` (like ``SystemExit``): no ``except Exception`` or ``except ValueError`` of a
    command catches it on its way to the CLI, so nothing after the resolution runs.

    Parameters
    ----------
    cfg_cls : dataclass type
        The configuration class.
    cfg : instance of ``cfg_cls``
        The resolved configuration (preset < ``--config`` < options < ``--set``, or the stored one
        of a resumed file).
    preset : instance of ``cfg_cls``
        The preset of the size options given (the defaults of the run).
    resumed : path-like, optional
        The file whose stored configuration ``cfg`` is (``--resume``).
    """

    def __init__(self, cfg_cls, cfg, preset, resumed=None):
        super().__init__(f"{cfg_cls.__name__} resolved")
        self.cfg_cls, self.cfg, self.preset, self.resumed = cfg_cls, cfg, preset, resumed


@contextlib.contextmanager
def showing_config():
    """Inside the block, :func:`resolve_config` raises :class:`ConfigShown` instead of returning
    (``rieszflow COMMAND --show-config``).

    Yields
    ------
    None
    """
    token = _SHOWING.set(True)
    try:
        yield
    finally:
        _SHOWING.reset(token)


def _show_value(v) -> str:
    """A value as ``--set KEY=VALUE`` takes it (tuples comma-separated); JSON for nested values."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None or isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return v if v else "''"
    if isinstance(v, (tuple, list)) and all(isinstance(x, (int, float, str)) and not isinstance(x, bool)
                                            for x in v):
        return ",".join(str(x) for x in v) if v else "(empty)"
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        v = dataclasses.asdict(v)
    elif isinstance(v, (tuple, list)):
        v = [dataclasses.asdict(x) if dataclasses.is_dataclass(x) and not isinstance(x, type) else x
             for x in v]
    return json.dumps(v, default=str)


def _documented_choices(cfg_cls) -> dict:
    """Field name -> the set of values its numpydoc entry states (``name : {"a", "b"}``)."""
    out = {}
    for cls in reversed(cfg_cls.__mro__):
        for names, choices in re.findall(r"^\s*([\w, ]+?) : \{([^}]*)\}", cls.__doc__ or "", re.M):
            values = ", ".join(c.strip().strip("'\"") for c in choices.split(","))
            for name in names.split(","):
                out[name.strip()] = values
    return out


def describe_config(cfg_cls, cfg, preset=None, *, choices: Mapping[str, Any] | None = None) -> list:
    """Every field of a configuration: value, default, units and what is allowed.

    The units and allowed values come from, first to last: a field's ``metadata`` (``units``,
    ``allowed``), the class's ``field_info`` mapping (field name -> the same keys), ``choices``
    (the command's options with a fixed set of values), the class docstring's numpydoc type
    (``name : {"a", "b"}``), the bounds that the class's validators (:func:`config_real`,
    :func:`config_int`) check when the configuration is rebuilt, and the field's type (a bool);
    ``"-"`` where none of them says.

    Parameters
    ----------
    cfg_cls : dataclass type
        The configuration class.
    cfg : instance of ``cfg_cls``
        The configuration to describe.
    preset : instance of ``cfg_cls``, optional
        Where the defaults are read from (default: ``cfg_cls()`` when it builds without arguments).
    choices : Mapping, optional
        Field name -> allowed values (say the ``choices`` of the command's options).

    Returns
    -------
    list of dict
        One per field, in the class's order: ``key``, ``value``, ``default``, ``units``,
        ``allowed`` (strings as ``--set`` takes them) and ``changed`` (bool: value differs from
        the default).
    """
    if preset is None:
        try:
            preset = cfg_cls()
        except (TypeError, ValueError):
            preset = cfg
    trace: dict = {}
    token = _TRACE.set(trace)
    try:
        build_config(cfg_cls, dataclasses.asdict(cfg))     # the validators say what they allow
    except (TypeError, ValueError):
        pass
    finally:
        _TRACE.reset(token)
    info = getattr(cfg_cls, "field_info", None) or {}
    documented = _documented_choices(cfg_cls)
    choices = dict(choices or {})
    rows = []
    for f in dataclasses.fields(cfg_cls):
        meta = {**info.get(f.name, {}), **dict(f.metadata)}
        value, default = getattr(cfg, f.name), getattr(preset, f.name, None)
        allowed = meta.get("allowed")
        if allowed is None and choices.get(f.name):
            allowed = ", ".join(str(c) for c in choices[f.name])
        if allowed is None:
            allowed = documented.get(f.name) or trace.get(f.name)
        if allowed is None and isinstance(value, bool):
            allowed = "true, false"
        rows.append({"key": f.name, "value": _show_value(value), "default": _show_value(default),
                     "units": str(meta.get("units", "-")), "allowed": str(allowed or "-"),
                     "changed": value != default})
    return rows


def format_config(cfg_cls, cfg, preset=None, *, choices: Mapping[str, Any] | None = None) -> str:
    """:func:`describe_config` as a text table (``--show-config``).

    Parameters
    ----------
    cfg_cls : dataclass type
        The configuration class.
    cfg : instance of ``cfg_cls``
        The configuration to show.
    preset : instance of ``cfg_cls``, optional
        Where the defaults are read from (as for :func:`describe_config`).
    choices : Mapping, optional
        Field name -> allowed values (as for :func:`describe_config`).

    Returns
    -------
    str
        A header line and one line per field (``key``, ``value``, ``default``, ``units``,
        ``allowed``); a ``*`` before the key marks a value that differs from the default. Long
        values are shown whole (the columns are aligned up to 40 characters); a default equal to
        a value longer than that reads ``(same)``.
    """
    rows = describe_config(cfg_cls, cfg, preset, choices=choices)
    cols = ("key", "value", "default", "units", "allowed")
    table = [list(cols)] + [[("* " if r["changed"] else "  ") + r["key"], r["value"],
                             "(same)" if len(r["value"]) > 40 and not r["changed"] else r["default"],
                             r["units"], r["allowed"]] for r in rows]
    table[0][0] = "  key"
    width = [min(40, max(len(line[i]) for line in table)) for i in range(len(cols) - 1)]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(line[:-1], width)) + "  " + line[-1]
                     for line in table)
