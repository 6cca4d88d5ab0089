"""The main job's data: the tokenized splits of Rotten Tomatoes, SST-2 and QQP, read once per process.

The splits are tokenized once per (dataset, max_len, QQP folder) and cached read-only (a sweep
worker runs many tasks on one dataset); :func:`load_data` carves the validation split of SST-2 and
QQP from their train splits (seeded) and subsamples with ``train_limit`` / ``eval_limit``.
"""
from __future__ import annotations

import functools

import numpy as np

from rieszflow.engine.attention.data import WordPieceTokenizer, encode, load_qqp, load_split
from rieszflow.learning.config import MainJobConfig

__all__ = ["load_data"]


@functools.lru_cache(maxsize=2)
def _encoded_splits(dataset: str, max_len: int, qqp_dir: str):
    """The tokenizer and the tokenized full splits, read once per process (a sweep worker runs
    many tasks on one dataset; the splits are never modified, :func:`load_data` copies subsets)."""
    tok = WordPieceTokenizer(max_len=max_len)
    if dataset == "rt":
        splits = [encode(load_split("rt", s), tok) for s in ("train", "validation", "test")]
    elif dataset == "sst2":
        splits = [encode(load_split("sst2", "train"), tok), encode(load_split("sst2", "dev"), tok)]
    else:
        splits = [encode(load_qqp(qqp_dir, "train"), tok), encode(load_qqp(qqp_dir, "dev"), tok)]
    return tok, tuple(_read_only(s) for s in splits)


def _read_only(split):
    """The cached split made immutable, so no caller can change what later tasks read."""
    for a in split.ids:
        a.setflags(write=False)
    split.labels.setflags(write=False)
    return type(split)(tuple(split.ids), split.labels, split.name)


def load_data(cfg: MainJobConfig):
    """Tokenized train / validation / test splits of ``cfg.dataset``.

    For SST-2 and QQP the GLUE test labels are private: the dev split serves as the
    test split and ``cfg.sst2_validation`` (``cfg.qqp_validation``) examples carved
    (seeded) from train serve as validation. ``train_limit`` / ``eval_limit``
    subsample (seeded). QQP is read from ``cfg.qqp_dir``
    (:func:`~rieszflow.engine.attention.data.load_qqp`); its question pairs are encoded as
    ``[CLS] q1 [SEP] q2 [SEP]``.

    Parameters
    ----------
    cfg : MainJobConfig
        Uses ``dataset``, ``qqp_dir``, ``max_len``, ``seed``, ``sst2_validation``,
        ``qqp_validation``, ``train_limit`` and ``eval_limit``.

    Returns
    -------
    tokenizer : WordPieceTokenizer
        With ``max_len=cfg.max_len``.
    train, validation, test : EncodedSplit
        The tokenized splits.
    """
    tok, splits = _encoded_splits(cfg.dataset, cfg.max_len, cfg.qqp_dir)
    rng = np.random.default_rng([cfg.seed, 7])
    if cfg.dataset == "rt":
        tr, va, te = splits
    else:
        full, te = splits
        n_val = cfg.sst2_validation if cfg.dataset == "sst2" else cfg.qqp_validation
        if n_val >= len(full):
            raise ValueError(f"{cfg.dataset}_validation={n_val} leaves no training examples "
                             f"({len(full)} in train)")
        perm = rng.permutation(len(full))
        vi, ti = perm[:n_val], perm[n_val:]
        va = type(full)([full.ids[i] for i in vi], full.labels[vi], f"{cfg.dataset}/train-heldout")
        tr = type(full)([full.ids[i] for i in ti], full.labels[ti], f"{cfg.dataset}/train-rest")

    def limit(split, n):
        if n <= 0 or n >= len(split):
            return split
        idx = np.sort(rng.permutation(len(split))[:n])
        return type(split)([split.ids[i] for i in idx], split.labels[idx], split.name)

    return tok, limit(tr, cfg.train_limit), limit(va, cfg.eval_limit), limit(te, cfg.eval_limit)
