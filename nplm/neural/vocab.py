"""Vocabulary of the neural models: words <-> ids, special tokens, corpus reading.

Ids 0..3 are the specials: ``<unk>`` (every out-of-vocabulary word), ``<s>`` (sentence
start, only ever context), ``</s>`` (sentence end, predicted like a word) and ``<null>``
(a context position with no word: before ``<s>``, or dropped by variable-history
training).  Regular words follow in order of decreasing training count (ties by first
occurrence), so truncating the vocabulary keeps the frequent words.
"""
from collections import Counter

import numpy as np

from nplm.errors import FormatError
from nplm.io.text import split_words, utf8_lines

UNK, BOS, EOS, NULL = 0, 1, 2, 3
SPECIALS = ("<unk>", "<s>", "</s>", "<null>")


class Vocabulary:
    """``words`` (list, id order), ``index`` (word -> id) and ``counts`` (int64 training
    counts per id; ``<unk>`` holds the count of the words mapped to it)."""

    def __init__(self, words, counts=None):
        words = list(words)
        if tuple(words[:4]) != SPECIALS:
            raise ValueError(f"vocabulary must start with the specials {SPECIALS}")
        self.words = words
        self.index = {w: i for i, w in enumerate(words)}
        if len(self.index) != len(words):
            dup = next(w for w in words if words.count(w) > 1)
            raise ValueError(f"vocabulary lists word {dup!r} twice")
        self.counts = (np.zeros(len(words), np.int64) if counts is None
                       else np.asarray(counts, dtype=np.int64).copy())
        if self.counts.shape != (len(words),):
            raise ValueError("vocabulary counts do not match its words")

    def __len__(self):
        return len(self.words)

    def __contains__(self, word):
        return word in self.index

    def id(self, word):
        return self.index.get(word, UNK)

    def ids(self, tokens):
        get = self.index.get
        return np.fromiter((get(t, UNK) for t in tokens), dtype=np.int32, count=len(tokens))

    @classmethod
    def build(cls, counter, min_count=1, max_size=None):
        """From a ``Counter`` of training words: keep words seen at least ``min_count``
        times, at most ``max_size`` entries in total (specials included)."""
        if min_count < 1:
            raise ValueError(f"min_count must be at least 1, not {min_count}")
        if max_size is not None and max_size < len(SPECIALS) + 1:
            raise ValueError(f"vocabulary size cap {max_size} leaves no room for words "
                             f"(the {len(SPECIALS)} specials take ids 0..{len(SPECIALS) - 1})")
        for s in ("<s>", "<null>"):
            if counter.get(s):
                raise ValueError(f"the training text contains the reserved token {s!r}")
        ranked = sorted(((c, i, w) for i, (w, c) in enumerate(counter.items()) if w not in SPECIALS),
                        key=lambda x: (-x[0], x[1]))
        keep = [w for c, i, w in ranked if c >= min_count]
        if max_size is not None:
            keep = keep[:max_size - len(SPECIALS)]
        words = list(SPECIALS) + keep
        counts = np.zeros(len(words), np.int64)
        kept = set(keep)
        counts[UNK] = counter.get("<unk>", 0) + sum(c for w, c in counter.items()
                                                     if w not in kept and w not in SPECIALS)
        counts[EOS] = counter.get("</s>", 0)
        for i, w in enumerate(keep, len(SPECIALS)):
            counts[i] = counter[w]
        return cls(words, counts)

    # -- storage as arrays inside a model container
    def to_arrays(self, prefix="vocab."):
        blobs = [w.encode("utf-8") for w in self.words]
        offsets = np.zeros(len(blobs) + 1, np.int64)
        np.cumsum([len(b) for b in blobs], out=offsets[1:])
        return {prefix + "bytes": np.frombuffer(b"".join(blobs), np.uint8).copy(),
                prefix + "offsets": offsets, prefix + "counts": self.counts}

    @classmethod
    def from_arrays(cls, arrays, prefix="vocab."):
        blob = bytes(arrays[prefix + "bytes"])
        off = arrays[prefix + "offsets"]
        if off.ndim != 1 or off.size < 1 or off[0] != 0 or off[-1] != len(blob) or np.any(np.diff(off) < 0):
            raise ValueError("vocabulary offsets are inconsistent")
        words = [blob[off[i]:off[i + 1]].decode("utf-8") for i in range(off.size - 1)]
        return cls(words, arrays[prefix + "counts"])


def read_sentences(path):
    """Lists of tokens, one per line of ``path`` (plain or compressed); invalid UTF-8
    is a FormatError naming the line."""
    return [split_words(line) for line in utf8_lines(path)]


def count_words(sentences):
    """Counter of tokens plus one ``</s>`` per sentence."""
    c = Counter()
    for s in sentences:
        c.update(s)
    c["</s>"] += len(sentences)
    return c


def examples(sentences, vocab, order):
    """(contexts int32 (N, order-1), targets int32 (N,)) for every token and sentence end.

    The context of the first word is ``<null> ... <null> <s>``: positions before the
    sentence start hold ``<null>``, the same symbol variable-history training uses for
    dropped words, so a state with fewer than order-1 words is always null-padded."""
    m = order - 1
    pieces = []
    tmask = []
    prefix = np.array([NULL] * (m - 1) + [BOS], np.int32)
    get = vocab.index.get
    for s in sentences:
        ids = np.fromiter((get(t, UNK) for t in s), dtype=np.int32, count=len(s))
        pieces.append(prefix)
        pieces.append(ids)
        pieces.append(np.array([EOS], np.int32))
        tmask.append(len(s) + 1)
    if not pieces:
        return np.zeros((0, m), np.int32), np.zeros(0, np.int32)
    flat = np.concatenate(pieces)
    # every position but the m-long prefixes is a target
    is_target = np.ones(flat.size, bool)
    lens = np.array(tmask, np.int64)
    starts = np.concatenate(([0], np.cumsum(lens + m)[:-1]))
    for j in range(m):
        is_target[starts + j] = False
    tpos = np.flatnonzero(is_target)
    windows = np.lib.stride_tricks.sliding_window_view(flat, m)
    contexts = np.ascontiguousarray(windows[tpos - m])
    targets = np.ascontiguousarray(flat[tpos])
    return contexts, targets


def check_corpus(sentences, path, what="training"):
    """Raise FormatError when ``sentences`` holds no tokens at all."""
    if not any(sentences):
        raise FormatError(f"the {what} text has no words", path)
    for i, s in enumerate(sentences, 1):
        for t in s:
            if t in ("<s>", "<null>"):
                raise FormatError(f"reserved token {t!r} in the {what} text", path, i)
