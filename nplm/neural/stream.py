"""Streaming training examples over many text files, for the torch engine.

The training text may be any number of files, each plain or compressed (.gz, .bz2,
.xz), one sentence per line.  Nothing holds the whole corpus: one counting pass gives
the vocabulary and the number of examples of every shard, and each epoch reads the
files again.

Sharding among ``world`` processes: with at least as many files as processes, the
files are dealt out in turn (process r reads files r, r + world, ...); with fewer,
every process reads every file and keeps its own lines (line i of a file belongs to
process i mod world).  Every example belongs to exactly one process either way.

Shuffling is deterministic for a seed: each epoch a process reads its files in an
order drawn from (seed, epoch, rank) and shuffles examples within a bounded buffer
(``buffer`` examples; about 4 x order bytes each): the buffer is filled, shuffled, its
first half sent on and the rest kept to be mixed with the next fill.
"""
import glob
import os
from collections import Counter

import numpy as np

from nplm.errors import FormatError
from nplm.io.files import open_binary
from nplm.io.text import split_words
from nplm.neural.vocab import examples

SHUFFLE_BUFFER = 1 << 20       # examples held for shuffling (20 MB at order 5)
CHUNK_LINES = 8192             # sentences turned into examples at a time
RESERVED = ("<s>", "<null>")


def expand_paths(patterns):
    """File names from names and glob patterns, each pattern's matches sorted, in the
    order given; a pattern that matches nothing is an error naming it."""
    out = []
    for p in patterns:
        p = os.fspath(p)
        if not os.path.exists(p) and glob.has_magic(p):
            found = sorted(glob.glob(p))
            if not found:
                raise FileNotFoundError(2, "no file matches the pattern", p)
            out.extend(found)
        else:
            out.append(p)
    return out


def _lines(path, rank=0, world=1):
    """(line number, str) of the lines of ``path`` that belong to ``rank`` of ``world``
    (all of them for world 1); invalid UTF-8 is a FormatError naming file and line."""
    with open_binary(path) as f:
        for i, raw in enumerate(f):
            if world > 1 and i % world != rank:
                continue
            try:
                yield i + 1, raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise FormatError(f"invalid UTF-8 (byte 0x{raw[e.start]:02x} at byte {e.start + 1} of the "
                                  "line); the text must be UTF-8", path, i + 1) from None


def count_file(path, world=1):
    """(Counter of words plus one ``</s>`` a line, examples per line residue mod
    ``world`` as a list): one file's share of the counting pass."""
    counts = Counter()
    per_residue = [0] * world
    lines = 0
    for line_no, line in _lines(path):
        words = split_words(line)
        counts.update(words)
        per_residue[(line_no - 1) % world] += len(words) + 1
        lines += 1
    for t in RESERVED:
        if counts.get(t):
            raise FormatError(f"reserved token {t!r} in the training text", path)
    counts["</s>"] += lines
    return counts, per_residue


def count_files(paths, world=1):
    """count_file of every path, in order: [(Counter, per-residue examples), ...]."""
    return [count_file(p, world) for p in paths]


def merge_counts(stats):
    """One Counter from count_files' results, merged in file order: the same words,
    counts and first-occurrence order as counting the files' concatenation."""
    total = Counter()
    eos = 0
    for c, _ in stats:
        eos += c.get("</s>", 0)
        total.update(c)
    # '</s>' goes last, as count_words puts it (its position only breaks ties anyway)
    total.pop("</s>", None)
    total["</s>"] = eos
    return total


def by_file(n_files, world):
    """Whether files are dealt out to the processes (else lines are)."""
    return n_files >= world


def shard_sizes(stats, world):
    """Examples of each process's shard (list of ``world`` ints)."""
    n = len(stats)
    if by_file(n, world):
        return [sum(sum(stats[i][1]) for i in range(r, n, world)) for r in range(world)]
    return [sum(s[1][r] for s in stats) for r in range(world)]


class ExampleStream:
    """The shuffled examples of one process's shard, epoch by epoch.

    ``vocab``: the Vocabulary; ``order``: the n-gram order.  ``batches(epoch, size,
    skip)`` yields (contexts (b, order-1), targets (b,)) int32 word ids in batches of
    ``size`` (the last may be smaller), after ``skip`` batches (read and dropped, for a
    resume within the epoch)."""

    def __init__(self, paths, vocab, order, rank=0, world=1, seed=1, buffer=SHUFFLE_BUFFER):
        if buffer < 2:
            raise ValueError(f"shuffle buffer must hold at least 2 examples, not {buffer}")
        self.paths = list(paths)
        self.vocab, self.order = vocab, order
        self.rank, self.world, self.seed, self.buffer = rank, world, seed, int(buffer)
        self.by_file = by_file(len(self.paths), world)

    def files(self, epoch):
        """This process's files in the epoch's reading order (epoch None: as given)."""
        mine = self.paths[self.rank::self.world] if self.by_file else list(self.paths)
        if epoch is None:
            return mine
        rng = np.random.default_rng([self.seed, epoch, self.rank, 0])
        return [mine[i] for i in rng.permutation(len(mine))]

    def chunks(self, epoch):
        """Unshuffled (contexts, targets) chunks of the shard, files in epoch order."""
        sub_rank, sub_world = (0, 1) if self.by_file else (self.rank, self.world)
        for path in self.files(epoch):
            sents = []
            for _, line in _lines(path, sub_rank, sub_world):
                sents.append(split_words(line))
                if len(sents) == CHUNK_LINES:
                    yield examples(sents, self.vocab, self.order)
                    sents = []
            if sents:
                yield examples(sents, self.vocab, self.order)

    def shuffled(self, epoch):
        """The shard's examples, shuffled within the bounded buffer, as chunks."""
        rng = np.random.default_rng([self.seed, epoch, self.rank, 1])
        keep = self.buffer // 2
        held_c, held_t, n = [], [], 0
        for c, t in self.chunks(epoch):
            held_c.append(c)
            held_t.append(t)
            n += t.size
            if n >= self.buffer:
                ctx, tgt = np.concatenate(held_c), np.concatenate(held_t)
                perm = rng.permutation(n)
                out = perm[:n - keep]
                yield ctx[out], tgt[out]
                rest = perm[n - keep:]
                held_c, held_t, n = [ctx[rest]], [tgt[rest]], keep
        if n:
            ctx, tgt = np.concatenate(held_c), np.concatenate(held_t)
            perm = rng.permutation(n)
            yield ctx[perm], tgt[perm]

    def batches(self, epoch, size, skip=0):
        """Batches of ``size`` examples of the epoch's shuffled stream."""
        m = self.order - 1
        buf_c, buf_t, n = [], [], 0
        done = 0

        def cut():
            nonlocal buf_c, buf_t, n
            ctx, tgt = np.concatenate(buf_c), np.concatenate(buf_t)
            buf_c, buf_t, n = [ctx[size:]], [tgt[size:]], n - size
            return np.ascontiguousarray(ctx[:size]), np.ascontiguousarray(tgt[:size])

        for c, t in self.shuffled(epoch):
            buf_c.append(c.reshape(-1, m))
            buf_t.append(t)
            n += t.size
            while n >= size:
                batch = cut()
                done += 1
                if done > skip:
                    yield batch
        if n and done >= skip:
            ctx, tgt = np.concatenate(buf_c), np.concatenate(buf_t)
            yield np.ascontiguousarray(ctx), np.ascontiguousarray(tgt)
