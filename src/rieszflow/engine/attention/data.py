"""Bundled text-classification data and BERT WordPiece tokenization.

The datasets live in the repository under ``rieszflow/data/`` (see ``rieszflow/data/README.md`` for
provenance, licences and checksums): Rotten Tomatoes (Pang & Lee 2005, the
HuggingFace 80/10/10 split) and the GLUE SST-2 train/dev files, plus the
``bert-base-uncased`` WordPiece vocabulary.

Reading rules (from the data's provenance README): UTF-8, one header line, two
tab-separated columns, **no quoting** (56 Rotten Tomatoes texts begin with
``"``), and lines split on ``\\n`` only (22 texts contain U+0085, which
``str.splitlines`` would treat as a line break). :func:`load_split` follows them
and verifies each file's SHA-256 before parsing, so a corrupt or edited file is
reported instead of silently used.

Source: paper 000, App. F.2 ("Datasets and splits", "Preprocessing",
"Experimental setup": bert-base-uncased WordPiece, maximum length 128).
"""
from __future__ import annotations

import csv
import dataclasses
import hashlib
from pathlib import Path

import numpy as np

__all__ = ["DATA_DIR", "DATASETS", "CLASS_NAMES", "TextSplit", "load_split", "load_qqp", "count_batches",
           "WordPieceTokenizer", "encode", "EncodedSplit", "batches", "load_digits_seq", "make_listops",
           "listops_value", "load_listops_mini", "load_rt_bytes", "LISTOPS_TOKENS"]

#: Root of the bundled data (``<repo>/data``).
DATA_DIR = Path(__file__).resolve().parents[2] / "data"

#: dataset -> split -> (relative path, text column, sha256, rows)
DATASETS = {
    "rt": {
        "train": ("rotten_tomatoes/train.tsv", "text",
                  "9ddb97aa8b5c4b1995341379110ad157404e088919cc1e010b7e09325b93f20b", 8530),
        "validation": ("rotten_tomatoes/validation.tsv", "text",
                       "72fce1ba4aab314c9dc6b6bf65871b4a66acf038bb4c032b134d1a2f136159a4", 1066),
        "test": ("rotten_tomatoes/test.tsv", "text",
                 "5003f886e55eabaf426449eb97811ca40b7942cffd9d2da1278c9a97eff40bb5", 1066),
    },
    "sst2": {
        "train": ("sst2/train.tsv", "sentence",
                  "48eac26399f8456935f81dd9e3a745c1430adb6c62e233ccfe22db4a0d15d1d1", 67349),
        # GLUE's SST-2 test labels are not public: the dev split is the held-out test split,
        # and a validation split is carved from train (see rieszflow.learning.train).
        "dev": ("sst2/dev.tsv", "sentence",
                "54a9c12c77e402fc14d6a66a506f24d999f596b0176eb777c972cccc2f9cc4b0", 872),
    },
}

#: Names of label 0 and label 1 of each dataset (bundled or read from a folder).
CLASS_NAMES = {"rt": ("negative", "positive"), "sst2": ("negative", "positive"),
               "qqp": ("not_duplicate", "duplicate")}

#: Columns of the GLUE QQP files (train.tsv, dev.tsv; the test split has no labels).
QQP_COLUMNS = ("id", "qid1", "qid2", "question1", "question2", "is_duplicate")

VOCAB_PATH = DATA_DIR / "bert-base-uncased" / "vocab.txt"
VOCAB_SHA256 = "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"


@dataclasses.dataclass(frozen=True)
class TextSplit:
    """One split of a labelled text dataset.

    Parameters
    ----------
    texts : tuple of str or of (str, str), length n
        The texts, or text pairs (QQP's question pairs).
    labels : numpy.ndarray of int64, shape (n,)
        Label 0 or 1 (:data:`CLASS_NAMES` names them per dataset).
    name : str
        ``"<dataset>/<split>"``.
    """

    texts: tuple
    labels: np.ndarray
    name: str

    def __len__(self) -> int:
        return len(self.texts)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def load_split(dataset: str, split: str, *, verify: bool = True) -> TextSplit:
    """Load one bundled split.

    Parameters
    ----------
    dataset : {"rt", "sst2"}
        Rotten Tomatoes or GLUE SST-2.
    split : str
        ``"train"``, ``"validation"``, ``"test"`` for ``rt``; ``"train"``, ``"dev"``
        for ``sst2``.
    verify : bool, default True
        Check the file's SHA-256 against the recorded one.

    Returns
    -------
    TextSplit

    Raises
    ------
    ValueError
        Unknown dataset or split, a checksum mismatch, a malformed row, or a
        label outside {0, 1}.
    FileNotFoundError
        If the bundled file is missing.
    """
    if dataset not in DATASETS:
        raise ValueError(f"dataset={dataset!r} is not bundled; allowed: {', '.join(DATASETS)}")
    if split not in DATASETS[dataset]:
        raise ValueError(f"split={split!r} does not exist for dataset {dataset!r}; allowed: "
                         f"{', '.join(DATASETS[dataset])}")
    rel, text_col, sha, rows = DATASETS[dataset][split]
    path = DATA_DIR / rel
    if not path.exists():
        raise FileNotFoundError(f"bundled data file {path} is missing")
    if verify:
        got = _sha256(path)
        if got != sha:
            raise ValueError(f"{path}: sha256 {got} does not match the recorded {sha}; the bundled "
                             f"data was modified or corrupted (see rieszflow/data/README.md)")
    texts, labels = [], []
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = next(reader)
        if header != [text_col, "label"]:
            raise ValueError(f"{path}: header {header!r}, expected {[text_col, 'label']!r}")
        for lineno, row in enumerate(reader, start=2):
            if len(row) != 2 or row[1] not in ("0", "1"):
                raise ValueError(f"{path}:{lineno}: expected '<text>\\t<0|1>', got {row!r}")
            texts.append(row[0].strip())
            labels.append(int(row[1]))
    if len(texts) != rows:
        raise ValueError(f"{path}: {len(texts)} rows, expected {rows}")
    return TextSplit(tuple(texts), np.asarray(labels, dtype=np.int64), f"{dataset}/{split}")


def load_qqp(folder, split: str) -> TextSplit:
    """Read one split of the GLUE QQP task (Quora Question Pairs) from a folder.

    QQP is not bundled (its terms of use do not allow redistribution here): pass
    the folder of the GLUE download, which holds ``train.tsv`` and ``dev.tsv`` with
    the header ``id qid1 qid2 question1 question2 is_duplicate`` (tab-separated,
    no quoting; GLUE's test split has no labels and is not read).

    Parameters
    ----------
    folder : str or os.PathLike
        The GLUE QQP folder.
    split : {"train", "dev"}
        Which file to read.

    Returns
    -------
    TextSplit
        ``texts`` are ``(question1, question2)`` pairs; labels 1 = duplicate.

    Raises
    ------
    FileNotFoundError
        If the folder or the split's file does not exist (the message names both).
    ValueError
        On an unknown split, a wrong header, a row without six fields, an empty
        question, or a label outside {0, 1} (the message gives file and line).

    References
    ----------
    Wang et al. (2019), "GLUE: a multi-task benchmark and analysis platform for natural
    language understanding", ICLR (arXiv:1804.07461); paper 000, Section 5 (QQP).
    """
    if split not in ("train", "dev"):
        raise ValueError(f"split={split!r} is not allowed for QQP; allowed: train, dev (GLUE's "
                         f"test split has no labels)")
    root = Path(folder)
    if not root.is_dir():
        raise FileNotFoundError(f"qqp_dir={str(folder)!r} is not a folder; expected the GLUE QQP "
                                f"folder holding train.tsv and dev.tsv")
    path = root / f"{split}.tsv"
    if not path.is_file():
        raise FileNotFoundError(f"qqp_dir={str(folder)!r} has no {split}.tsv; expected the GLUE QQP "
                                f"folder holding train.tsv and dev.tsv")
    texts, labels = [], []
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = next(reader, None)
        if header is None or tuple(header) != QQP_COLUMNS:
            raise ValueError(f"{path}: header {header!r}, expected the GLUE QQP columns "
                             f"{list(QQP_COLUMNS)!r}")
        for lineno, row in enumerate(reader, start=2):
            if len(row) != len(QQP_COLUMNS):
                raise ValueError(f"{path}:{lineno}: {len(row)} tab-separated fields, expected "
                                 f"{len(QQP_COLUMNS)} ({', '.join(QQP_COLUMNS)})")
            q1, q2, lab = row[3].strip(), row[4].strip(), row[5]
            if lab not in ("0", "1"):
                raise ValueError(f"{path}:{lineno}: is_duplicate={lab!r}, expected 0 or 1")
            if not q1 or not q2:
                raise ValueError(f"{path}:{lineno}: an empty question (question1={q1!r}, "
                                 f"question2={q2!r})")
            texts.append((q1, q2))
            labels.append(int(lab))
    if not texts:
        raise ValueError(f"{path}: no rows after the header")
    return TextSplit(tuple(texts), np.asarray(labels, dtype=np.int64), f"qqp/{split}")


class WordPieceTokenizer:
    """BERT uncased WordPiece tokenizer over the bundled vocabulary.

    A thin wrapper of :class:`tokenizers.BertWordPieceTokenizer` (the HuggingFace
    Rust implementation) with ``lowercase=True``, ``[CLS] ... [SEP]`` added and
    truncation at ``max_len`` tokens (special tokens included).

    Parameters
    ----------
    max_len : int, default 128
        Maximum sequence length including ``[CLS]`` and ``[SEP]`` (paper 000, F.2).
    vocab_path : path, optional
        Defaults to the bundled ``bert-base-uncased/vocab.txt``.

    Attributes
    ----------
    vocab_size : int
        30,522 for the bundled vocabulary.
    pad_id : int
        Id of ``[PAD]`` (0).

    Raises
    ------
    ValueError
        If ``max_len < 2``.
    """

    def __init__(self, max_len: int = 128, vocab_path=None):
        from tokenizers import BertWordPieceTokenizer

        if int(max_len) != max_len or max_len < 2:
            raise ValueError(f"max_len={max_len!r} must be an integer >= 2 ([CLS] and [SEP])")
        self.max_len = int(max_len)
        path = Path(vocab_path) if vocab_path is not None else VOCAB_PATH
        self._tok = BertWordPieceTokenizer(str(path), lowercase=True)
        self._tok.enable_truncation(max_length=self.max_len)
        self.vocab_size = self._tok.get_vocab_size()
        self.pad_id = self._tok.token_to_id("[PAD]")
        self.unk_id = self._tok.token_to_id("[UNK]")

    def encode(self, texts) -> list[np.ndarray]:
        """Token ids of each text (variable length, at most ``max_len``).

        Parameters
        ----------
        texts : sequence of str or of (str, str)
            Single texts (``[CLS] a [SEP]``) or pairs (``[CLS] a [SEP] b [SEP]``,
            truncated longest-first; the model has no segment embedding, so the
            ``[SEP]`` token alone marks the boundary).

        Returns
        -------
        list of numpy.ndarray of int32
        """
        return [np.asarray(e.ids, dtype=np.int32) for e in self._tok.encode_batch(list(texts))]

    def tokens(self, text: str) -> list[str]:
        """WordPiece tokens of one text, special tokens included.

        Parameters
        ----------
        text : str
            One text.

        Returns
        -------
        list of str
            Its tokens, ``[CLS]`` and ``[SEP]`` included, at most ``max_len`` (truncated).
        """
        return self._tok.encode(text).tokens


@dataclasses.dataclass(frozen=True)
class EncodedSplit:
    """A tokenized split: ragged ids and labels.

    Parameters
    ----------
    ids : list of numpy.ndarray of int32
        Token ids of each example (length <= max_len).
    labels : numpy.ndarray of int64, shape (n,)
        0 = negative, 1 = positive.
    name : str
        ``"<dataset>/<split>"``.
    """

    ids: list
    labels: np.ndarray
    name: str

    def __len__(self) -> int:
        return len(self.ids)


def encode(split: TextSplit, tokenizer: WordPieceTokenizer) -> EncodedSplit:
    """Tokenize a :class:`TextSplit`.

    Parameters
    ----------
    split : TextSplit
        Texts and labels.
    tokenizer : WordPieceTokenizer
        Tokenizer applied to every text.

    Returns
    -------
    EncodedSplit
        Token ids of each text, with the labels and name of ``split``.
    """
    return EncodedSplit(tokenizer.encode(split.texts), split.labels, split.name)


def count_batches(n: int, batch_size: int, min_last: int = 1) -> int:
    """How many batches :func:`batches` yields for ``n`` examples.

    Parameters
    ----------
    n : int
        Number of examples, >= 0.
    batch_size : int
        Positive.
    min_last : int, default 1
        As in :func:`batches`: a short final batch below it is folded into the one before.

    Returns
    -------
    int
        ``ceil(n / batch_size)``, one fewer when the remainder is folded.
    """
    k = -(-int(n) // int(batch_size))
    return k - 1 if k > 1 and n - (k - 1) * batch_size < min_last else k


def batches(data: EncodedSplit, batch_size: int, *, rng: np.random.Generator | None = None,
            pad_id: int = 0, min_last: int = 1):
    """Iterate over padded mini-batches.

    Each batch is padded to its own longest sequence (not to ``max_len``): with
    padding masks, masked mean pooling and linear attention that omits padded
    keys, the model's output does not depend on how many pad tokens follow a
    sequence (tested in ``tests/test_attention_model.py``), so this only saves
    work.

    Parameters
    ----------
    data : EncodedSplit
    batch_size : int
        Positive.
    rng : numpy.random.Generator, optional
        Shuffles the order when given; the order of ``data`` otherwise.
    pad_id : int, default 0
    min_last : int, default 1
        A final batch with fewer than ``min_last`` examples is folded into the
        batch before it (objectives over pairs, like Phase A's alignment, need at
        least 2 sequences per batch).

    Yields
    ------
    ids : numpy.ndarray of int64, shape (B, L)
    mask : numpy.ndarray of bool, shape (B, L)
        True on real tokens.
    labels : numpy.ndarray of int64, shape (B,)
    index : numpy.ndarray of int64, shape (B,)
        Positions of the examples in ``data``.

    Raises
    ------
    ValueError
        If ``batch_size`` is not a positive integer.
    """
    if int(batch_size) != batch_size or batch_size < 1:
        raise ValueError(f"batch_size={batch_size!r} must be a positive integer")
    if int(min_last) != min_last or not 1 <= min_last <= batch_size:
        raise ValueError(f"min_last={min_last!r} must be an integer in [1, batch_size={batch_size}]")
    n = len(data)
    order = rng.permutation(n) if rng is not None else np.arange(n)
    starts = list(range(0, n, batch_size))
    if len(starts) > 1 and n - starts[-1] < min_last:
        starts.pop()                                   # fold the short remainder into the batch before
    for k, start in enumerate(starts):
        stop = starts[k + 1] if k + 1 < len(starts) else n
        idx = order[start:stop]
        seqs = [data.ids[i] for i in idx]
        L = max(len(s) for s in seqs)
        ids = np.full((len(idx), L), pad_id, dtype=np.int64)
        mask = np.zeros((len(idx), L), dtype=bool)
        for r, s in enumerate(seqs):
            ids[r, :len(s)] = s
            mask[r, :len(s)] = True
        yield ids, mask, data.labels[idx], idx


# --------------------------------------------------------------------------- mini Long Range Arena
#: Token ids of ListOps-mini: 0 pads, digits 0-9 are 1-10, then the operators and the bracket.
LISTOPS_TOKENS = ("<pad>",) + tuple(str(i) for i in range(10)) + ("[MAX", "[MIN", "[MED", "[SM", "]")
LISTOPS_OPS = ("[MAX", "[MIN", "[MED", "[SM")


def _stratified_split(labels, sizes, seed):
    """Indices of a stratified split of ``len(labels)`` examples into parts of ``sizes``."""
    from sklearn.model_selection import train_test_split

    idx = np.arange(len(labels))
    rest, test = train_test_split(idx, test_size=sizes[2], stratify=labels, random_state=seed)
    train, val = train_test_split(rest, test_size=sizes[1], stratify=labels[rest], random_state=seed)
    return np.sort(train), np.sort(val), np.sort(test)


def load_digits_seq(split: str, *, size: int = 8, seed: int = 0) -> EncodedSplit:
    """Digits-seq: scikit-learn's bundled 8 x 8 digits as pixel-token sequences (an LRA-Image analogue).

    The 1,797 images (17 grey levels, 10 classes) shipped inside scikit-learn are split
    stratified into 1257 / 180 / 360 (train / validation / test) with ``seed``. With
    ``size = 8`` the tokens are the 64 pixel values in row-major order, id = value + 1
    (0 is the pad id; vocabulary 18). With ``size = 16`` (or 32) each image is upsampled
    bilinearly (``scipy.ndimage.zoom``, order 1) and quantised to 0..255 as in LRA-Image,
    id = value + 1 (vocabulary 257, n = 256 or 1024). Nothing is downloaded.

    Parameters
    ----------
    split : {"train", "validation", "test"}
    size : {8, 16, 32}, default 8
        Side of the image grid.
    seed : int, default 0
        Seed of the stratified split.

    Returns
    -------
    EncodedSplit
        ``ids`` (one int32 array of length ``size**2`` per image), ``labels`` (the digit).

    Raises
    ------
    ValueError
        On an unknown ``split`` or ``size``.

    References
    ----------
    paper 001 spec, section 5.2, P3 (Digits-seq); Tay et al. (2021), "Long Range Arena",
    arXiv:2011.04006 (the Image task's pixel tokens).
    """
    from sklearn.datasets import load_digits

    parts = ("train", "validation", "test")
    if split not in parts:
        raise ValueError(f"split={split!r} is not allowed; allowed: {', '.join(parts)}")
    if size not in (8, 16, 32):
        raise ValueError(f"size={size!r} is not allowed; allowed: 8, 16, 32")
    data = load_digits()
    images, labels = data.images, data.target.astype(np.int64)
    if size == 8:
        tokens = images.astype(np.int64).reshape(len(images), -1) + 1
    else:
        from scipy.ndimage import zoom

        up = zoom(images, (1, size / 8, size / 8), order=1)
        tokens = np.clip(np.rint(up * (255.0 / 16.0)), 0, 255).astype(np.int64).reshape(len(images), -1) + 1
    idx = dict(zip(parts, _stratified_split(labels, (1257, 180, 360), seed)))[split]
    return EncodedSplit([tokens[i].astype(np.int32) for i in idx], labels[idx], f"digits{size}/{split}")


def _listops_tree(rng, depth, max_depth, max_args):
    """A random ListOps expression as a token list and its value (LRA grammar)."""
    if depth >= max_depth or (depth > 0 and rng.random() < 0.3):
        v = int(rng.integers(0, 10))
        return [str(v)], v
    op = LISTOPS_OPS[int(rng.integers(0, 4))]
    toks, vals = [op], []
    for _ in range(int(rng.integers(2, max_args + 1))):
        t, v = _listops_tree(rng, depth + 1, max_depth, max_args)
        toks += t
        vals.append(v)
    toks.append("]")
    if op == "[MAX":
        val = max(vals)
    elif op == "[MIN":
        val = min(vals)
    elif op == "[MED":
        val = int(np.floor(np.median(vals)))
    else:
        val = sum(vals) % 10
    return toks, val


def listops_value(tokens) -> int:
    """Evaluate a ListOps-mini token sequence (the oracle of :func:`make_listops`).

    Parameters
    ----------
    tokens : sequence of str
        E.g. ``["[MAX", "2", "[SM", "3", "9", "]", "]"]``.

    Returns
    -------
    int
        The value in 0..9.

    Raises
    ------
    ValueError
        On a malformed expression.

    References
    ----------
    Nangia & Bowman (2018), "ListOps", arXiv:1804.06028; Tay et al. (2021), arXiv:2011.04006.
    """
    stack = [[]]
    ops = []
    for t in tokens:
        if t in LISTOPS_OPS:
            ops.append(t)
            stack.append([])
        elif t == "]":
            if not ops:
                raise ValueError("unbalanced ']' in the ListOps expression")
            vals, op = stack.pop(), ops.pop()
            if not vals:
                raise ValueError(f"{op} without arguments")
            v = {"[MAX": max(vals), "[MIN": min(vals), "[MED": int(np.floor(np.median(vals))),
                 "[SM": sum(vals) % 10}[op]
            stack[-1].append(v)
        elif t.isdigit() and len(t) == 1:
            stack[-1].append(int(t))
        else:
            raise ValueError(f"unknown ListOps token {t!r}")
    if ops or len(stack) != 1 or len(stack[0]) != 1:
        raise ValueError("malformed ListOps expression")
    return stack[0][0]


def make_listops(n: int, *, seed: int, max_depth: int = 4, max_args: int = 5, max_len: int = 128,
                 name: str = "listops") -> EncodedSplit:
    """ListOps-mini: ``n`` random expressions of the LRA grammar, generated with a seeded RNG.

    Operators ``[MAX``, ``[MIN``, ``[MED`` (median, floored to an integer) and ``[SM`` (sum
    mod 10) take 2..``max_args`` arguments; operands are the digits 0-9; the root is an
    operator; a sub-expression at depth < ``max_depth`` is a digit with probability 0.3.
    Expressions longer than ``max_len`` tokens are redrawn. The label (10 classes) is the
    value. Token ids: :data:`LISTOPS_TOKENS` (0 pads; vocabulary 16).

    Parameters
    ----------
    n : int
        Number of examples, ``>= 1``.
    seed : int
        Seed of the generator (the only randomness).
    max_depth : int, default 4
    max_args : int, default 5
    max_len : int, default 128
    name : str, default "listops"

    Returns
    -------
    EncodedSplit

    Raises
    ------
    ValueError
        On a bad size.

    References
    ----------
    Nangia & Bowman (2018), arXiv:1804.06028; Tay et al. (2021), arXiv:2011.04006, section 3.1;
    paper 001 spec, section 5.2, P3 (ListOps-mini).
    """
    for nm, v, lo in (("n", n, 1), ("max_depth", max_depth, 1), ("max_args", max_args, 2), ("max_len", max_len, 3)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
            raise ValueError(f"{nm}={v!r} must be an integer >= {lo}")
    rng = np.random.default_rng(seed)
    index = {t: i for i, t in enumerate(LISTOPS_TOKENS)}
    ids, labels = [], np.empty(n, dtype=np.int64)
    k = 0
    while k < n:
        toks, val = _listops_tree(rng, 0, max_depth, max_args)
        if len(toks) > max_len:
            continue
        ids.append(np.array([index[t] for t in toks], dtype=np.int32))
        labels[k] = val
        k += 1
    return EncodedSplit(ids, labels, name)


def load_listops_mini(split: str, *, seed: int = 0, sizes=(20000, 2000, 2000), max_len: int = 128) -> EncodedSplit:
    """The ListOps-mini splits: train / validation / test from independent seeded streams.

    Parameters
    ----------
    split : {"train", "validation", "test"}
    seed : int, default 0
    sizes : tuple of 3 int, default (20000, 2000, 2000)
    max_len : int, default 128

    Returns
    -------
    EncodedSplit

    Raises
    ------
    ValueError
        On an unknown ``split``.

    References
    ----------
    paper 001 spec, section 5.2, P3.
    """
    parts = ("train", "validation", "test")
    if split not in parts:
        raise ValueError(f"split={split!r} is not allowed; allowed: {', '.join(parts)}")
    i = parts.index(split)
    return make_listops(int(sizes[i]), seed=int(np.random.SeedSequence([seed, i]).generate_state(1)[0]),
                        max_len=max_len, name=f"listops/{split}")


def load_rt_bytes(split: str, *, max_len: int = 512) -> EncodedSplit:
    """Byte-level Rotten Tomatoes (the LRA Text analogue): UTF-8 bytes as tokens, id = byte + 1.

    Parameters
    ----------
    split : {"train", "validation", "test"}
        The bundled splits (:func:`load_split`).
    max_len : int, default 512
        Bytes kept per review (truncated).

    Returns
    -------
    EncodedSplit
        Vocabulary 257 (0 pads).

    Raises
    ------
    ValueError
        On an unknown split or ``max_len < 1``.

    References
    ----------
    Tay et al. (2021), arXiv:2011.04006, section 3.2 (byte-level text classification);
    Pang & Lee (2005) (Rotten Tomatoes).
    """
    if isinstance(max_len, bool) or not isinstance(max_len, (int, np.integer)) or max_len < 1:
        raise ValueError(f"max_len={max_len!r} must be an integer >= 1")
    s = load_split("rt", split)
    ids = [np.frombuffer(t.encode("utf-8")[:max_len], dtype=np.uint8).astype(np.int32) + 1 for t in s.texts]
    return EncodedSplit(ids, s.labels, f"rt-bytes/{split}")
