"""N-gram counts as a file: count a corpus (or each shard of one) once, merge the
counts of shards, estimate from them (SRILM's make-big-lm, lmplz's --intermediate).

A counts file is an nplm container of kind ``ngram-counts``: the vocabulary in
first-appearance order (``<unk> <s> </s>`` first, as counting numbers them), the
distinct highest-order n-grams of the padded sentences in suffix order, and their
counts.  Merging shards renumbers each shard's words into one vocabulary in
first-appearance order over the shards taken in the order given, so the merged
counts of a corpus cut into shards are the counts of the whole corpus, and the
model estimated from them is the whole corpus's model, byte for byte.
"""
import contextlib

import numpy as np

from nplm.backoff import _kn_merge
from nplm.backoff.estimate import count as counting
from nplm.backoff.estimate.config import EstimateConfig
from nplm.backoff.estimate.report import Report
from nplm.errors import FormatError
from nplm.io import container
from nplm.io.atomic import check_output, temp_folder
from nplm.io.text import word_bytes, word_str

KIND = "ngram-counts"
STATS = ("tokens", "sentences", "unk_tokens", "skipped_symbols")


class ShardCounts:
    """One counts file (or the counts just made): vocabulary, n-grams, statistics."""

    def __init__(self, vocab, keys, counts, order, skip_symbols, stats, name=""):
        self.vocab, self.keys, self.counts = vocab, keys, counts
        self.order, self.skip_symbols, self.stats, self.name = order, skip_symbols, stats, name

    @classmethod
    def from_counter(cls, counter, keys, counts, name):
        stats = {s: int(getattr(counter, s)) for s in STATS}
        return cls(counter.words(), keys, counts, counter.order, bool(counter.skip_symbols), stats, name)

    def save(self, path):
        encoded = [word_bytes(w) for w in self.vocab]
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(w) for w in encoded], out=offsets[1:])
        config = dict(self.stats, order=self.order, skip_symbols=self.skip_symbols, name=self.name)
        container.write(path, KIND, config, {
            "vocab": np.frombuffer(b"".join(encoded) or b"\0", dtype=np.uint8), "vocab_offsets": offsets,
            "keys": self.keys, "counts": self.counts})

    @classmethod
    def load(cls, path):
        c = container.read(path, expect_kind=KIND)
        try:
            raw, offsets = bytes(c.arrays["vocab"]), c.arrays["vocab_offsets"]
            vocab = [word_str(raw[offsets[i]:offsets[i + 1]]) for i in range(len(offsets) - 1)]
            keys, counts, order = c.arrays["keys"], c.arrays["counts"], int(c.config["order"])
            stats = {s: int(c.config[s]) for s in STATS}
            skip = bool(c.config["skip_symbols"])
        except (KeyError, ValueError, TypeError) as e:
            raise FormatError(f"not a valid counts file ({e})", path) from None
        if keys.ndim != 2 or keys.shape[1] != order or len(counts) != len(keys) or vocab[:3] != \
                ["<unk>", "<s>", "</s>"] or (len(keys) and int(keys.max()) >= len(vocab)):
            raise FormatError("not a valid counts file (inconsistent arrays)", path)
        return cls(vocab, keys, counts, order, skip, stats, c.config.get("name", str(path)))


def merged_vocabulary(shards):
    """One vocabulary in first-appearance order over the shards, and each shard's
    map from its word ids to the merged ones."""
    index, vocab, maps = {}, [], []
    for shard in shards:
        ids = np.empty(len(shard.vocab), dtype=np.uint32)
        for i, w in enumerate(shard.vocab):
            j = index.get(w)
            if j is None:
                j = index[w] = len(vocab)
                vocab.append(w)
            ids[i] = j
        maps.append(ids)
    return vocab, maps


def renumbered(shard, ids):
    """A shard's n-grams in merged word ids, suffix-sorted again."""
    keys = ids[shard.keys]
    order = np.lexsort(keys.T) if len(keys) else np.zeros(0, dtype=np.int64)
    return np.ascontiguousarray(keys[order]), np.ascontiguousarray(shard.counts[order])


def check_compatible(shards, order=None, skip_symbols=None):
    first = shards[0]
    for s in shards:
        if s.order != first.order or s.skip_symbols != first.skip_symbols:
            raise ValueError(f"counts {s.name!r} (order {s.order}, skip_symbols {s.skip_symbols}) "
                             f"cannot merge with {first.name!r} (order {first.order}, "
                             f"skip_symbols {first.skip_symbols})")
    if order is not None and order != first.order:
        raise ValueError(f"the counts are of order {first.order}; estimate that order (-o {first.order})")
    if skip_symbols is not None and bool(skip_symbols) != first.skip_symbols:
        raise ValueError(f"the counts were made with skip_symbols={first.skip_symbols}")


def merge(shards):
    """The merged counts of ``shards`` (a list of ShardCounts), in memory."""
    check_compatible(shards)
    vocab, maps = merged_vocabulary(shards)
    runs = [renumbered(s, ids) for s, ids in zip(shards, maps)]
    keys, counts = _kn_merge.merge_runs([k for k, _ in runs], [c for _, c in runs], shards[0].order)
    stats = {s: sum(sh.stats[s] for sh in shards) for s in STATS}
    return ShardCounts(vocab, keys, counts, shards[0].order, shards[0].skip_symbols, stats,
                       " ".join(s.name for s in shards))


class VocabularyOf:
    """What the estimation asks of a counter, for merged counts: the words, their
    ids, and the token statistics (no n-gram table)."""

    def __init__(self, shard):
        self.vocab = shard.vocab
        self.ids = {word_bytes(w): i for i, w in enumerate(shard.vocab)}
        self.order = shard.order
        self.distinct_ngrams = 0
        self.vocab_size = len(shard.vocab)
        self.vocab_bytes = sum(len(w) + 80 for w in shard.vocab)
        for s in STATS:
            setattr(self, s, shard.stats[s])

    def words(self):
        return list(self.vocab)

    def find(self, word):
        return self.ids.get(word, -1)


def count_to_file(text, order, output, *, skip_symbols=False, memory=None, temp_prefix=None,
                  progress=True):
    """Count ``text`` (as ``estimate`` reads it) and write the counts to ``output``.
    Counting spills runs past the memory budget as estimation does; the merged
    counts are then written (they must fit in memory once).  Returns the counts."""
    config = EstimateConfig.make(order, skip_symbols=skip_symbols, memory=memory,
                                 temp_prefix=temp_prefix, progress=progress)
    check_output(output)
    report = Report(progress, 1)
    report.stage(1, "Counting and sorting n-grams")
    shard = count_text(text, config, report)
    shard.save(output)
    report.say(f"{len(shard.keys)} distinct {order}-grams of {shard.stats['tokens']} tokens written "
               f"to {output}")
    return shard


def count_text(text, config, report):
    """ShardCounts of ``text``: its distinct highest-order n-grams in suffix order;
    runs spilled past ``config.memory`` (into ``config.temp_dir``) are merged."""
    with contextlib.ExitStack() as stack:
        made = []

        def folder():
            if not made:
                made.append(stack.enter_context(temp_folder(config.temp_dir, "nplm-count-")))
            return made[0]
        counted = counting.count(text, config, report, config.memory, folder)
        counter = counted.counter
        if counted.spilled:
            counted.spill(folder())
            runs = [counted.load_run(r) for r in counted.runs]
            keys, counts = _kn_merge.merge_runs([k for k, _ in runs], [c for _, c in runs], config.order)
        else:
            keys, counts = counter.suffix_sorted()
        return ShardCounts.from_counter(counter, keys, counts, counted.name)


def merge_files(paths, output):
    """Merge counts files into one (``nplm count --merge``)."""
    shard = merge([ShardCounts.load(p) for p in paths])
    shard.save(output)
    return shard


def runs_from_files(paths, folder, order, skip_symbols):
    """Counts files as suffix-sorted runs in one vocabulary, saved in ``folder``:
    (the merged vocabulary as a counter stand-in, run names)."""
    shards = [ShardCounts.load(p) for p in paths]
    check_compatible(shards, order, skip_symbols)
    vocab, maps = merged_vocabulary(shards)
    runs = []
    for i, (shard, ids) in enumerate(zip(shards, maps)):
        keys, counts = renumbered(shard, ids)
        counting.save_run(folder, f"run{i}", keys, counts)
        runs.append(f"run{i}")
    stats = {s: sum(sh.stats[s] for sh in shards) for s in STATS}
    merged = ShardCounts(vocab, None, None, order, bool(skip_symbols), stats, " ".join(map(str, paths)))
    return VocabularyOf(merged), runs
