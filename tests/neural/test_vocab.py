"""Vocabulary, training examples and variable-history truncation."""
from collections import Counter

import numpy as np
import pytest

from nplm.neural.train import truncate_histories
from nplm.neural.vocab import BOS, EOS, NULL, UNK, Vocabulary, count_words, examples


def test_build_min_count_and_cap():
    sents = [["a", "b", "a", "c"], ["a", "b", "d"], ["<unk>"]]
    c = count_words(sents)
    v = Vocabulary.build(c, min_count=2)
    assert v.words == ["<unk>", "<s>", "</s>", "<null>", "a", "b"]
    assert v.counts[v.index["a"]] == 3 and v.counts[EOS] == 3
    assert v.counts[UNK] == 3  # c, d and the literal <unk>
    assert v.counts.sum() == sum(c.values())
    capped = Vocabulary.build(c, max_size=5)
    assert capped.words[4:] == ["a"]
    assert capped.ids(["a", "zzz", "b"]).tolist() == [4, UNK, UNK]
    with pytest.raises(ValueError, match="min_count"):
        Vocabulary.build(c, min_count=0)
    with pytest.raises(ValueError, match="cap"):
        Vocabulary.build(c, max_size=3)
    with pytest.raises(ValueError, match="reserved"):
        Vocabulary.build(Counter({"<s>": 1, "a": 2}))


def test_arrays_round_trip():
    v = Vocabulary.build(count_words([["naïve", "日本", "a"], ["a"]]))
    back = Vocabulary.from_arrays(v.to_arrays())
    assert back.words == v.words
    assert back.counts.tolist() == v.counts.tolist()
    bad = v.to_arrays()
    bad["vocab.offsets"] = bad["vocab.offsets"][::-1].copy()
    with pytest.raises(ValueError, match="offsets"):
        Vocabulary.from_arrays(bad)


def test_examples_brute_force():
    sents = [["a", "b", "c"], [], ["b", "x"]]
    v = Vocabulary.build(count_words(sents))
    for order in (2, 3, 5):
        m = order - 1
        ctx, tgt = examples(sents, v, order)
        expect_c, expect_t = [], []
        for s in sents:
            hist = [NULL] * (m - 1) + [BOS]
            for w in [v.id(t) for t in s] + [EOS]:
                expect_c.append(hist[-m:])
                expect_t.append(w)
                hist.append(w)
        assert ctx.tolist() == expect_c
        assert tgt.tolist() == expect_t
        assert ctx.dtype == np.int32 and ctx.flags.c_contiguous


@pytest.mark.parametrize("full", [0.25, 0.75, 1.0])
def test_truncate_histories(full):
    """A share ``full`` of the rows keeps all 4 words, the rest 1..3 uniformly: 0.25 is
    the paper's uniform draw over 1..4."""
    rng = np.random.default_rng(0)
    ctx = np.arange(4, 4 + 4 * 40000, dtype=np.int32).reshape(-1, 4)
    out = truncate_histories(ctx, rng, full)
    kept = (out != NULL).sum(axis=1)
    # the most recent words survive, the far ones become <null>
    for row, orig, k in zip(out[:100], ctx[:100], kept[:100]):
        assert row[4 - k:].tolist() == orig[4 - k:].tolist()
        assert (row[:4 - k] == NULL).all()
    freq = np.bincount(kept, minlength=5)[1:] / kept.size
    np.testing.assert_allclose(freq, [(1 - full) / 3] * 3 + [full], atol=0.01)


def test_truncate_histories_of_one_word_contexts_is_a_copy():
    ctx = np.arange(4, 14, dtype=np.int32).reshape(-1, 1)
    out = truncate_histories(ctx, np.random.default_rng(0), 0.5)
    assert out.tolist() == ctx.tolist() and out is not ctx


def test_model_vocab_round_trip_and_null_is_unknown(tmp_path):
    """nplm.Model(...).vocab: id(word(i)) == i for every id but the padding <null>,
    which no text can name: id('<null>') is 0 and '<null>' in a sentence scores
    exactly as any unknown word (oov), not as padding."""
    import nplm

    from helpers import make_net
    path = tmp_path / "n.nplm"
    make_net("softmax-full-2", order=3).save(path)
    m = nplm.Model(str(path))
    words = m.vocab.words()
    assert words[NULL] == "<null>" and m.vocab.word(NULL) == "<null>"
    for i, w in enumerate(words):
        assert m.vocab.id(w) == (0 if w == "<null>" else i), (i, w)
    assert m.vocab.id("<null>") == m.vocab.id("zzqx-never-seen") == 0
    real = words[5]
    null_scores = list(m.full_scores(f"{real} <null> {real}"))
    unk_scores = list(m.full_scores(f"{real} zzqx {real}"))
    assert null_scores == unk_scores and null_scores[1][2] is True
