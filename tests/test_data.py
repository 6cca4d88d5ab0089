"""Bundled data and WordPiece tokenization."""
import numpy as np
import pytest

from rieszflow.engine.attention.data import WordPieceTokenizer, batches, encode, load_split


@pytest.fixture(scope="module")
def tok():
    return WordPieceTokenizer(max_len=128)


def test_rotten_tomatoes_splits():
    sizes = {"train": 8530, "validation": 1066, "test": 1066}
    seen = {}
    for split, n in sizes.items():
        s = load_split("rt", split)
        assert len(s) == n and s.labels.shape == (n,)
        assert s.labels.mean() == 0.5                 # each split is exactly balanced
        seen[split] = set(s.texts)
    assert not (seen["train"] & seen["test"]) and not (seen["validation"] & seen["test"])
    va = load_split("rt", "validation")
    assert va.texts[0].startswith("compassionately explores the seemingly irreconcilable")
    assert load_split("rt", "test").texts[0].startswith("lovingly photographed in the manner of a golden book")
    # NEL (U+0085) survives inside texts: lines were split on \n only
    assert sum("\x85" in t for t in load_split("rt", "train").texts) > 0


def test_sst2_and_errors():
    assert len(load_split("sst2", "dev")) == 872
    with pytest.raises(ValueError, match="dataset='qqp'"):
        load_split("qqp", "train")
    with pytest.raises(ValueError, match="split='test'"):
        load_split("sst2", "test")


def test_tokenizer_sanity(tok):
    assert tok.vocab_size == 30522 and tok.pad_id == 0
    assert tok.tokens("the movie was great") == ["[CLS]", "the", "movie", "was", "great", "[SEP]"]
    np.testing.assert_array_equal(tok.encode(["the movie was great"])[0], [101, 1996, 3185, 2001, 2307, 102])
    assert tok.tokens("Héllo naïve café")[1:-1] == ["hello", "naive", "cafe"]
    long = tok.encode(["word " * 500])[0]
    assert len(long) == 128 and long[0] == 101 and long[-1] == 102
    enc = encode(load_split("rt", "test"), tok)
    assert all((ids != tok.unk_id).all() for ids in enc.ids)          # no [UNK] in RT
    with pytest.raises(ValueError, match="max_len"):
        WordPieceTokenizer(max_len=1)


def test_batches_pad_and_mask(tok):
    enc = encode(load_split("rt", "validation"), tok)
    total = 0
    for ids, mask, labels, idx in batches(enc, 64, rng=np.random.default_rng(0)):
        assert ids.shape == mask.shape and ids.shape[0] == labels.shape[0] == idx.shape[0]
        for r, i in enumerate(idx):
            n = len(enc.ids[i])
            assert mask[r].sum() == n and (ids[r, n:] == 0).all()
            np.testing.assert_array_equal(ids[r, :n], enc.ids[i])
        total += len(idx)
    assert total == len(enc)
    with pytest.raises(ValueError, match="batch_size"):
        next(batches(enc, 0))


def test_batches_fold_a_short_remainder(tok):
    enc = encode(load_split("rt", "validation"), tok)          # 1066 = 16 * 66 + 10
    sizes = [len(b[2]) for b in batches(enc, 66, min_last=11)]
    assert sizes[-1] == 76 and sum(sizes) == 1066              # the 10 left over joined the last batch
    assert [len(b[2]) for b in batches(enc, 66)][-1] == 10
    with pytest.raises(ValueError, match="min_last"):
        next(batches(enc, 8, min_last=9))


@pytest.mark.parametrize("min_last", [1, 2, 3])
def test_count_batches_is_the_number_batches_yields(min_last):
    """count_batches (the planned Phase A steps of a main job) against batches itself, remainders
    below min_last folded included."""
    from rieszflow.engine.attention.data import EncodedSplit, batches, count_batches

    for n in range(2, 23):
        split = EncodedSplit(ids=[np.array([1, 2])] * n, labels=np.zeros(n, dtype=np.int64), name="t/x")
        for bs in (3, 4, 5):
            if min_last <= bs:
                assert count_batches(n, bs, min_last) == sum(1 for _ in batches(split, bs, min_last=min_last))
