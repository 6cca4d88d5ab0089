"""The shared study base: strict configurations from mappings and files, and their validators.

Every study's configuration is a frozen dataclass; this module gives them one way to be
built from a mapping or a JSON/HDF5 file (unknown keys are an error that lists the allowed
ones) and one set of value checks whose failures are ``ValueError`` (a bad configuration is
bad input: exit code 2 in the CLI), built on the engine's validators
(:mod:`rieszflow.engine._checks`).
"""
from __future__ import annotations

import dataclasses
import json
import math
import numbers
from pathlib import Path
from typing import Any, Mapping

from rieszflow.engine._checks import check_int, check_real

__all__ = ["StudyConfig", "HDF5_SUFFIXES", "check_hdf5_out", "from_mapping", "unwrap_config", "load_config_mapping", "config_real", "config_int",
           "is_int", "is_real", "add_output_arguments", "add_study_arguments", "resolve_config",
           "given_options", "build_config", "replace_config"]


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


#: File name endings of the HDF5 files rieszflow writes.
HDF5_SUFFIXES = (".h5", ".hdf5", ".nc")


def check_hdf5_out(out, option: str = "--out") -> None:
    """Check that an output path names an HDF5 file (the one check every command uses).

    Parameters
    ----------
    out : str or os.PathLike
        The output path.
    option : str
        Option name for the message.

    Raises
    ------
    ValueError
        If ``out`` does not end in one of ``HDF5_SUFFIXES`` (case-insensitive).
    """
    if Path(out).suffix.lower() not in HDF5_SUFFIXES:
        raise ValueError(f"{option} {str(out)!r}: rieszflow writes HDF5 files; use a name ending in "
                         f"{', '.join(HDF5_SUFFIXES[:-1])} or {HDF5_SUFFIXES[-1]}")


def add_output_arguments(parser, default_out: str, *, resume_help: str | None = None,
                         plots: bool = True, plots_help: str = "skip the PNG figures") -> None:
    """Add the output options every study shares: ``--out``, ``--overwrite``, ``--resume``,
    ``--no-plots``, ``--quiet``.

    Parameters
    ----------
    parser : argparse.ArgumentParser
        The subcommand's parser.
    default_out : str
        The default output path, as shown in the help (e.g. ``runs/ldp[-quick]-seed<seed>.h5``).
    resume_help : str, optional
        Help of ``--resume`` (what a resumed run keeps); None when the study cannot resume.
    plots : bool, default True
        Whether to add ``--no-plots``.
    plots_help : str, default "skip the PNG figures"
        Its help.
    """
    from pathlib import Path as _Path

    parser.add_argument("--out", type=_Path, default=None,
                        help=f"output HDF5 file (default {default_out})")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing output file")
    if resume_help is not None:
        parser.add_argument("--resume", action="store_true", help=resume_help)
    if plots:
        parser.add_argument("--no-plots", action="store_true", help=plots_help)
    parser.add_argument("--quiet", action="store_true", help="no progress bars or stage lines")


def add_study_arguments(parser, *, default_out: str, backends=("numpy",), quick_help: str | None = None,
                        resume_help: str | None = None, plots: bool = True,
                        plots_help: str = "skip the PNG figures",
                        seed_help: str = "root seed (default: the --config file's, else 0)",
                        set_help: str = "override a config field (typed like the field; tuples as "
                                        "comma-separated values), repeatable") -> None:
    """Add the one CLI contract every study shares (docs/cli.md).

    ``--quick`` (where the study has sizes), ``--config FILE`` (JSON, or any HDF5 file rieszflow
    wrote), ``--seed``, ``--backend``, ``--set KEY=VALUE``, and the output options of
    :func:`add_output_arguments` (``--out``, ``--overwrite``, ``--resume``, ``--no-plots``,
    ``--quiet``). Resolve them with :func:`resolve_config`.

    Parameters
    ----------
    parser : argparse.ArgumentParser
        The subcommand's parser.
    default_out : str
        The default output path as shown in the help.
    backends : tuple of str, default ("numpy",)
        Allowed ``--backend`` values.
    quick_help : str, optional
        Help of ``--quick``; None when the study has no sizes (no ``--quick``).
    resume_help : str, optional
        Help of ``--resume`` (default: the shared wording).
    plots : bool, default True
        Whether to add ``--no-plots`` (every study has it, for one contract).
    plots_help : str, default "skip the PNG figures"
        Help of ``--no-plots`` (say so where the study draws none).
    seed_help, set_help : str
        Help of ``--seed`` and ``--set``.
    """
    from rieszflow.studies.cli import non_negative_int

    if quick_help is not None:
        parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument("--config", type=Path, default=None, metavar="FILE",
                        help="configuration file: JSON, or any HDF5 file rieszflow wrote (its stored "
                             "configuration); strict, unknown keys are an error; options given on "
                             "the command line override it")
    parser.add_argument("--seed", type=non_negative_int, default=None, help=seed_help)
    parser.add_argument("--backend", choices=tuple(backends), default=None,
                        help=f"array backend, one of {', '.join(backends)} (default: the --config "
                             f"file's, else numpy)")
    add_output_arguments(parser, default_out, plots=plots, plots_help=plots_help, resume_help=resume_help or (
        "continue the run in --out: its stored configuration is the default, and options given "
        "that differ from it are an error naming key, stored and given value"))
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help=set_help)


def given_options(**options) -> dict:
    """The command-line options that were given: ``options`` without the None values.

    Parameters
    ----------
    **options
        Option name to parsed value (None when the option was not given).

    Returns
    -------
    dict
    """
    return {k: v for k, v in options.items() if v is not None}


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
        :func:`given_options`).
    overrides : sequence of str
        ``--set KEY=VALUE`` items (typed by :func:`studies.cli.parse_overrides`).
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
    from rieszflow.studies.cli import parse_overrides

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
