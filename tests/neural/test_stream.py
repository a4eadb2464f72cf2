"""The torch engine's streaming example reader (nplm.neural.stream): shards partition
the examples, shuffling is deterministic and bounded, compressed files read, and the
counting pass gives the vocabulary of the whole text."""
import bz2
import gzip
import lzma

import numpy as np
import pytest

from nplm.errors import FormatError
from nplm.neural import stream as st
from nplm.neural.vocab import Vocabulary, count_words, examples, read_sentences

OPENERS = {"": open, ".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}


@pytest.fixture
def files(tmp_path):
    rng = np.random.default_rng(0)
    paths = []
    for i, ext in enumerate(["", ".gz", ".bz2", ".xz", ""]):
        lines = [" ".join(f"w{int(x)}" for x in rng.integers(0, 30, rng.integers(1, 7))) for _ in range(37 + i)]
        p = tmp_path / f"part{i}.txt{ext}"
        with OPENERS[ext](p, "wt") as f:
            f.write("\n".join(lines) + "\n")
        paths.append(str(p))
    return paths


def _vocab(paths):
    return Vocabulary.build(st.merge_counts(st.count_files(paths)))


def _rows(ctx, tgt):
    return sorted(map(tuple, np.column_stack([ctx, tgt]).tolist()))


def test_counting_pass_is_counting_the_concatenation(files):
    sents = [s for p in files for s in read_sentences(p)]
    assert _vocab(files).words == Vocabulary.build(count_words(sents)).words
    counts = st.merge_counts(st.count_files(files))
    assert counts == count_words(sents)


@pytest.mark.parametrize("world,n_files", [(1, 5), (2, 5), (3, 5), (2, 1), (4, 2)])
def test_shards_partition_the_examples(files, world, n_files):
    paths = files[:n_files]
    vocab = _vocab(paths)
    whole = examples([s for p in paths for s in read_sentences(p)], vocab, 4)
    sizes = st.shard_sizes(st.count_files(paths, world), world)
    got = []
    for r in range(world):
        s = st.ExampleStream(paths, vocab, 4, rank=r, world=world, seed=5, buffer=16)
        batches = list(s.batches(epoch=0, size=7))
        n = sum(b[1].size for b in batches)
        assert n == sizes[r]
        assert all(b[1].size == 7 for b in batches[:-1])
        got += _rows(np.concatenate([b[0] for b in batches]), np.concatenate([b[1] for b in batches]))
    assert sorted(got) == _rows(*whole)


def test_shuffle_is_deterministic_per_seed_and_epoch(files):
    vocab = _vocab(files)

    def order(seed, epoch):
        s = st.ExampleStream(files, vocab, 3, seed=seed, buffer=50)
        return np.concatenate([b[1] for b in s.batches(epoch, 10)])
    a = order(1, 0)
    assert np.array_equal(a, order(1, 0))
    assert not np.array_equal(a, order(1, 1))
    assert not np.array_equal(a, order(2, 0))
    assert sorted(a) == sorted(order(1, 1))


def test_skipping_batches_resumes_the_same_stream(files):
    s = st.ExampleStream(files, _vocab(files), 3, seed=4, buffer=64)
    full = list(s.batches(2, 9))
    tail = list(s.batches(2, 9, skip=5))
    assert len(tail) == len(full) - 5
    for (c1, t1), (c2, t2) in zip(full[5:], tail):
        assert np.array_equal(c1, c2) and np.array_equal(t1, t2)


def test_shuffle_buffer_bounds_what_is_held(files, monkeypatch):
    monkeypatch.setattr(st, "CHUNK_LINES", 4)
    s = st.ExampleStream(files, _vocab(files), 3, seed=1, buffer=40)
    sizes = [t.size for _, t in s.shuffled(0)]
    assert max(sizes) <= 40 + 4 * 7      # one buffer plus one chunk of at most 4 lines of 6 words + </s>


def test_reserved_tokens_and_bad_utf8_name_the_file(tmp_path):
    p = tmp_path / "bad.txt"
    p.write_text("a <s> b\n")
    with pytest.raises(FormatError, match="bad.txt.*reserved token '<s>'"):
        st.count_files([str(p)])
    p.write_bytes(b"a b\nc \xff d\n")
    with pytest.raises(FormatError, match="bad.txt:2: invalid UTF-8"):
        st.count_files([str(p)])


def test_patterns_expand_in_order_and_a_pattern_without_match_is_an_error(files, tmp_path):
    got = st.expand_paths([str(tmp_path / "part*.txt*")])
    assert got == sorted(files)
    with pytest.raises(FileNotFoundError):
        st.expand_paths([str(tmp_path / "none*.txt")])
