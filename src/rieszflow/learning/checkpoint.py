"""The checkpoint file of a main-job run, ``<out>.ckpt.npz``: written atomically, checksummed.

A checkpoint is a NumPy ``.npz`` archive beside the run file holding the model, the best
(validation-selected) state, Adam's moments (arrays ``model/<name>``, ``best/<name>``,
``adam/<name>``), a JSON ``meta`` record (the phase and epoch reached, the random-generator
states, the record counts of the run file the state belongs to) and ``sha256``: the SHA-256 of
the meta text and of every array (name, dtype, shape and bytes, in name order). The zip
archive's own CRC-32 catches a damaged member only when it is read; the checksum catches a
change that keeps the archive valid (a member replaced, an array rewritten) and is verified
before any of the checkpoint is used. :func:`read_checkpoint` reads the whole file and raises
:class:`CheckpointError` (a ``ValueError``: exit code 2 in the CLI) with one line naming the file
and the fix for every kind of damage.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np

from rieszflow.engine.storage import atomic_output

__all__ = ["CheckpointError", "checkpoint_path", "write_checkpoint", "read_checkpoint",
           "check_checkpoint", "META_KEYS"]

#: Keys every checkpoint's ``meta`` record holds.
META_KEYS = ("run_id", "phase", "epoch", "best_acc", "best_epoch", "stopped_early",
             "phase_a_steps", "lengths", "rng_a", "rng_b", "rng_redraw", "elapsed", "partial")


class CheckpointError(ValueError):
    """A checkpoint that cannot be used: damaged, foreign, or inconsistent with its run file.

    A ``ValueError``, so the CLI exits with code 2 (bad input) and prints its one-line message,
    which names the checkpoint and the fix.
    """


def checkpoint_path(out) -> Path:
    """The checkpoint beside a run file: ``<out>.ckpt.npz``.

    Parameters
    ----------
    out : str or os.PathLike
        The run's HDF5 file.

    Returns
    -------
    pathlib.Path
    """
    out = Path(out)
    return out.with_name(out.name + ".ckpt.npz")


def _digest(meta_text: str, arrays: dict) -> str:
    """SHA-256 of the meta text and of every array (name, dtype, shape, bytes) in name order."""
    h = hashlib.sha256()
    h.update(meta_text.encode("utf-8"))
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"\0{name}\0{a.dtype.str}\0{a.shape}\0".encode("utf-8"))
        h.update(a.tobytes())
    return h.hexdigest()


def write_checkpoint(path, meta: dict, arrays: dict) -> None:
    """Write a checkpoint atomically (the old one or the new one, never half of either).

    Parameters
    ----------
    path : str or os.PathLike
        The checkpoint file (:func:`checkpoint_path`).
    meta : dict
        JSON-serialisable record holding every key of :data:`META_KEYS`.
    arrays : dict of str to numpy.ndarray
        The states (``model/...``, ``best/...``, ``adam/...``), host arrays.

    Raises
    ------
    OSError
        If the file cannot be written (a full disk, say): the temporary file is removed and an
        earlier checkpoint at ``path`` is left as it was.
    """
    text = json.dumps(meta)
    arrays = {k: np.asarray(v) for k, v in arrays.items()}
    digest = _digest(text, arrays)
    with atomic_output(path, suffix=".tmp.npz") as tmp:
        np.savez(tmp, meta=np.array(text), sha256=np.array(digest), **arrays)


def read_checkpoint(path) -> tuple[dict, dict]:
    """Read and verify a whole checkpoint.

    Every member is read (so the archive's CRC-32 of each is checked) and the SHA-256 is
    compared before anything is returned.

    Parameters
    ----------
    path : str or os.PathLike
        The checkpoint file.

    Returns
    -------
    meta : dict
        The meta record (every key of :data:`META_KEYS`).
    arrays : dict of str to numpy.ndarray
        The state arrays.

    Raises
    ------
    FileNotFoundError
        If ``path`` does not exist.
    CheckpointError
        If the file is not a readable archive (truncated, bad CRC, not a zip), lacks the meta
        record or the checksum, its meta is not JSON or lacks keys, or the checksum differs.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint {path}")
    fix = "the run cannot be resumed from it; start it again with --overwrite"
    try:
        with np.load(path, allow_pickle=False) as z:
            members = {k: z[k] for k in z.files}
    except Exception as e:  # noqa: BLE001 - zip, CRC, zlib, header and OS errors alike
        raise CheckpointError(f"checkpoint {path} is damaged ({type(e).__name__}: {e}); {fix}") \
            from None
    missing = [k for k in ("meta", "sha256") if k not in members]
    if missing:
        raise CheckpointError(f"checkpoint {path} lacks {', '.join(missing)} (damaged, or written "
                              f"by another program); {fix}")
    text, digest = str(members.pop("meta")), str(members.pop("sha256"))
    if _digest(text, members) != digest:
        raise CheckpointError(f"checkpoint {path} fails its SHA-256 check (its contents changed "
                              f"after it was written); {fix}")
    try:
        meta = json.loads(text)
    except ValueError as e:
        raise CheckpointError(f"checkpoint {path}: its meta record is not JSON ({e}); {fix}") \
            from None
    lacking = [k for k in META_KEYS if not isinstance(meta, dict) or k not in meta]
    if lacking:
        raise CheckpointError(f"checkpoint {path}: its meta record lacks {lacking}; {fix}")
    return meta, members


def check_checkpoint(path, meta: dict, arrays: dict, *, out, run_id, lengths: dict,
                     model_state: dict, opt_state: dict | None) -> None:
    """Check a read checkpoint against its run file and the rebuilt model before it is used.

    Parameters
    ----------
    path : str or os.PathLike
        The checkpoint (for the messages).
    meta : dict
        The meta record returned by :func:`read_checkpoint`.
    arrays : dict of str to numpy.ndarray
        The state arrays returned by :func:`read_checkpoint`.
    out : str or os.PathLike
        The run file.
    run_id : str
        The run file's root attribute ``run_id``.
    lengths : dict of str to int
        The run file's unlimited dimensions and their sizes.
    model_state : dict of str to numpy.ndarray
        ``model.state_dict()`` of the rebuilt model (names and shapes expected).
    opt_state : dict of str to numpy.ndarray or None
        ``optimizer.state_dict()`` of the rebuilt optimiser.

    Raises
    ------
    CheckpointError
        If the checkpoint belongs to another run, expects more records than the file holds, or
        its arrays do not fit the model or the optimiser.
    """
    fix = "start the run again with --overwrite"
    if meta["run_id"] != run_id:
        raise CheckpointError(f"checkpoint {path} belongs to another run than {out} (run_id "
                              f"{meta['run_id']} != {run_id}); refusing to mix them: {fix}")
    short = {d: n for d, n in dict(meta["lengths"]).items() if lengths.get(d, -1) < n}
    if short:
        raise CheckpointError(f"{out} holds fewer records than its checkpoint {path} expects "
                              f"({short}): the file was modified; {fix}")

    def fits(prefix, expected, optional=False):
        got = {k[len(prefix):]: v for k, v in arrays.items() if k.startswith(prefix)}
        if optional and not got:
            return
        bad = sorted(set(got) ^ set(expected)) + sorted(
            k for k in set(got) & set(expected) if np.shape(got[k]) != np.shape(expected[k]))
        if bad:
            raise CheckpointError(f"checkpoint {path}: its {prefix.rstrip('/')} state does not fit "
                                  f"the model of {out} (names or shapes differ: {bad[:4]}); {fix}")

    fits("model/", model_state)
    fits("best/", model_state, optional=True)
    if opt_state is not None:
        fits("adam/", opt_state, optional=True)
