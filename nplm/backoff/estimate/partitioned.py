"""Estimation in bounded memory: the n-grams split into parts by their last word.

In suffix order (last word most significant) the n-grams ending in a range of word
ids are contiguous, and so is everything ``adjust`` derives from them: lower-order
n-grams, adjusted counts, suffix links.  So the spilled runs are cut into parts by
ranges of the last word, each part is merged and adjusted alone (``adjust_parts``),
and only two things cross parts, both per order k and keyed by the context c (the
n-gram minus its last word, which ends in another part):

* the context statistics: each part routes its n-grams' adjusted counts and
  marks to the part that holds c as a (k-1)-gram (``route_contexts``, a stable
  counting sort by part); that part finds c in its suffix trie, as the in-memory
  estimation does (the context ``v x`` of ``v x w`` is the child ``v`` of the
  context ``x`` of the suffix ``x w``, whose row the suffix's own part kept from
  the order below), sums the statistics per context and computes c's weight and
  back-off (``context_weights``); nothing is sorted;
* the weights go back to the parts that asked (``part_probs``), which interpolate
  with the suffix's probability, held in the same part, and keep the row of each
  n-gram's context for the next order.

Integer sums are exact in any order and every float is computed by the same
kernel as in memory, so the model is the in-memory one, byte for byte.  Between
passes the arrays live in the temporary folder; a pass holds one part at a time.
The same steps, run as Dask tasks, are the distributed estimation.
"""
import contextlib
import dataclasses
import functools
import mmap
import os

import numpy as np

from nplm.backoff import _kn, _kn_merge, _kn_probs
from nplm.backoff.estimate.adjust import adjust
from nplm.backoff.estimate.discount import discounts as order_discounts
from nplm.backoff.estimate.interpolate import unigrams
from nplm.backoff.estimate.write import kept_rows, renumbering

# Bytes per highest-order n-gram of the runs that one part's passes hold at most
# (the merged run and its mapped sources, every order's adjusted arrays, the
# records and sums of the context pass), over 4 bytes per word of an n-gram:
# measured 19 (6.4M words of tools/bench_scale.py's corpus, order 5), with room.
PART_BYTES_PER_WORD = 32
# The share of the budget that the parts are cut for; the rest keeps the arrays
# between passes in memory rather than on disk (PartStore).
PART_SHARE = 0.5
# Bytes per highest-order n-gram of the arrays of one order's passes that live
# for that order only (records, weights, rows of contexts, probabilities).
TRANSIENT_BYTES = 45
MAX_PARTS = 64


@dataclasses.dataclass
class Plan:
    bounds: np.ndarray       # (P+1,) word ids: part p holds n-grams ending in [b[p], b[p+1])

    @property
    def parts(self):
        return len(self.bounds) - 1


def plan_parts(last_words, vocab_size, target_rows, max_parts=MAX_PARTS):
    """Ranges of last words holding about ``target_rows`` n-grams each (a word's
    n-grams are never split, so a part may hold more), none empty."""
    cum = np.cumsum(last_words, dtype=np.int64)
    total = int(cum[-1])
    parts = int(min(max_parts, max(1, -(-total // max(1, target_rows)))))
    cuts = np.searchsorted(cum, np.arange(1, parts) * (total / parts), side="right")
    bounds, before = [0], 0
    for b in cuts:
        b = int(b)
        if bounds[-1] < b < vocab_size and cum[b - 1] > before:
            bounds.append(b)
            before = int(cum[b - 1])
    bounds.append(vocab_size)
    return Plan(np.array(bounds, dtype=np.int64))


def run_histogram(keys, vocab_size):
    """How many of a run's n-grams end in each word."""
    return np.bincount(np.asarray(keys[:, -1]), minlength=vocab_size).astype(np.int64)


def run_segment(keys, counts, lo, hi):
    """The rows of a suffix-sorted run whose last word is in [lo, hi)."""
    a, b = np.searchsorted(keys[:, -1], [lo, hi])
    return keys[a:b], counts[a:b]


def word_parts(bounds):
    """The part of each word id: (V,) int32."""
    bounds = np.asarray(bounds, dtype=np.int64)
    return np.repeat(np.arange(len(bounds) - 1, dtype=np.int32), np.diff(bounds))


def context_parts(words, word_part):
    """The part holding each order-k n-gram's context: the part of its
    second-to-last word, the context's last."""
    return np.ascontiguousarray(word_part[np.asarray(words)[:, -2]], dtype=np.int32)


ROUTED = ("node", "first", "adj", "mark")


def route_contexts(words, adj, mark, parent, where_prev, word_part, parts):
    """One part's order-k n-grams as records for the parts that hold their contexts:
    ({name in ROUTED: array}, start of each part's records (parts+1,)); each part's
    records are in row order.  A record names its context ``v x`` by the context's
    first word ``v`` and the row ``node`` of ``x`` in its part (the row of the
    n-gram's suffix's context, ``where_prev`` of ``parent``); for bigrams ``node``
    is the context word itself."""
    words = np.asarray(words)
    pos, starts = _kn_merge.bucket_positions(context_parts(words, word_part), parts)
    first = words[:, 0]
    node = first if words.shape[1] == 2 else np.asarray(where_prev)[np.asarray(parent)]
    routed = {}
    for name, a in zip(ROUTED, (node, first, adj, mark)):
        a = np.asarray(a)
        routed[name] = np.empty(len(a), dtype=a.dtype)
        routed[name][pos] = a
    return routed, starts


def lower_index(words, parent, nodes, lo, k):
    """A part's (k-1)-grams ``words`` as ``context_stats`` searches them: (words,
    where the children of each of the part's ``nodes`` (k-2)-grams start); (None,
    None) for k = 2, whose contexts are the part's words."""
    if k == 2:
        return None, None
    parent = np.asarray(parent)
    if k == 3:          # bigrams' suffix links are word ids
        parent = parent - np.int32(lo)
    return (np.ascontiguousarray(words, dtype=np.int32),
            _kn.child_begin(np.ascontiguousarray(parent, dtype=np.int32), nodes))


def context_weights(pieces, lower, child, contexts, lo, disc, pruning):
    """Sum every part's records (``pieces``: dicts of ROUTED arrays) for this part's
    ``contexts`` (k-1)-grams, indexed by ``lower_index``'s (lower, child), or
    its words from ``lo`` on for k = 2: (back-off of each (k-1)-gram, per piece
    (weights (denominator, gamma) of each record's context, the context's row))."""
    by_word = lower is None
    if by_word:
        lower, child = np.zeros((0, 1), dtype=np.int32), np.zeros(1, dtype=np.int64)
    sums = np.zeros((contexts, 5), dtype=np.uint64)
    wheres = []
    for piece in pieces:
        where = np.empty(len(piece["node"]), dtype=np.int32)
        missing = _kn_merge.context_stats(*(np.ascontiguousarray(piece[name]) for name in ROUTED), lower,
                                          child, lo, by_word, pruning, sums, where)
        if missing:
            raise RuntimeError(f"internal error: {missing} contexts of order {lower.shape[1] + 1} "
                               "are missing")
        wheres.append(where)
    weights = np.empty((contexts, 2), dtype=np.float32)
    backoff = np.empty(contexts, dtype=np.float32)
    _kn_probs.context_weights(sums, disc, weights, backoff)
    del sums
    return backoff, [(np.take(weights, w, axis=0), w) for w in wheres]     # (take: 5x fancy indexing's speed)


def part_probs(words, adj, mark, parent, prob_prev, word_part, returned, disc, pruning):
    """Interpolated probabilities of one part's order-k n-grams from the weights
    that each part returned for its records (``returned[q]``: weights, row of the
    context): (prob, logprob, row of each n-gram's context in its part)."""
    pos, starts = _kn_merge.bucket_positions(context_parts(words, word_part), len(returned))
    if not np.array_equal(np.diff(starts), [len(r[1]) for r in returned]):
        raise RuntimeError("internal error: the returned weights do not match the part's n-grams")
    weights = np.concatenate([r[0] for r in returned]) if returned else np.zeros((0, 2), np.float32)
    where = np.concatenate([r[1] for r in returned]) if returned else np.zeros(0, np.int32)
    m = len(adj)
    prob = np.empty(m, dtype=np.float32)
    logprob = np.empty(m, dtype=np.float32)
    _kn_probs.interp_probs(np.ascontiguousarray(adj), np.ascontiguousarray(mark), pos, weights,
                           np.ascontiguousarray(parent), np.ascontiguousarray(prob_prev), disc, pruning,
                           prob, logprob)
    return prob, logprob, where[pos]


def adjust_segments(keys_list, counts_list, config, prune_word, last):
    """Merge one part's segments of the runs and adjust them: ({order k >= 2: its
    words, adj, mark, parent}, the part's statistics, its unigram adjusted counts
    (zero outside the part's words), its last word, that word's raw count)."""
    keys, counts = _kn_merge.merge_runs(keys_list, counts_list, config.order)
    del keys_list, counts_list
    vocab_size = len(prune_word)
    stats = np.zeros((config.order, 7), dtype=np.uint64)
    adj1 = np.zeros(vocab_size, dtype=np.uint64)
    last_word = int(keys[-1, -1])
    adjusted = adjust(keys, counts, config, prune_word, stats, adj1, np.zeros(vocab_size, dtype=np.uint8),
                      last_part=last, unigrams=False)
    orders = {k: dict(words=adjusted.words[k - 1], adj=adjusted.adj[k - 1], mark=adjusted.mark[k - 1],
                      parent=adjusted.parent[k - 1]) for k in range(2, config.order + 1)}
    return orders, stats, adj1, last_word, adjusted.last_raw


def release_pages(array):
    """Drop the resident pages of a read-only memory-mapped array (MADV_DONTNEED;
    the file keeps the data, the page cache may keep it too)."""
    m = getattr(array, "_mmap", None)
    if m is not None and hasattr(m, "madvise") and hasattr(mmap, "MADV_DONTNEED"):
        with contextlib.suppress(OSError, ValueError):
            m.madvise(mmap.MADV_DONTNEED)


def owned(a):
    """``a`` as a C-contiguous array that holds about its own bytes (a small view
    of a large array is copied, so that keeping it does not keep the large one)."""
    a = np.ascontiguousarray(a)
    root = a
    while isinstance(root.base, np.ndarray):
        root = root.base
    return a.copy() if root.nbytes > a.nbytes + (a.nbytes >> 2) + 4096 else a


class PartStore:
    """The arrays of every part between passes: in memory while they fit in
    ``limit`` bytes, else in the temporary folder (writing is what the passes
    would otherwise spend most on).  Arrays of the ``TRANSIENT`` groups, which
    live for one order's passes, may use all of ``limit``; the others, which
    live until the model is written, leave ``reserve`` bytes of it to them.  On
    disk the arrays of one part, order and group share a file (opening and
    removing files is what costs on many file systems), mapped once and read as
    views.  Arrays read back are read-only either way."""

    TRANSIENT = frozenset({"routed", "weights", "where", "prob"})

    def __init__(self, folder, limit=0, reserve=0):
        self.folder = folder
        self.limit, self.reserve = limit, reserve
        self.held = 0           # bytes of the arrays in memory
        self.memory = {}        # (p, k, group) -> {name: array}
        self.index = {}         # (p, k, group) -> {name: (offset, dtype, shape)}
        self.maps = {}          # (p, k, group) -> the file mapped read-only

    def path(self, key):
        return self.folder.file("p%d.%d.%s" % key)

    def put(self, p, k, group, **arrays):
        key = (p, k, group)
        self.drop(p, k, group)
        arrays = {name: owned(a) for name, a in arrays.items()}
        size = sum(a.nbytes for a in arrays.values())
        room = self.limit - (0 if group in self.TRANSIENT else self.reserve)
        if self.held + size <= room:
            self.memory[key] = arrays
            self.held += size
            return
        entries, offset = {}, 0
        for name, a in arrays.items():
            entries[name] = (offset, a.dtype, a.shape)
            offset += -(-a.nbytes // 64) * 64
        self.folder.check_space(offset)
        with open(self.path(key), "wb") as f:
            for name, a in arrays.items():
                f.seek(entries[name][0])
                self.folder.write(f, a)
            f.truncate(max(offset, 1))
        self.index[key] = entries

    def get(self, p, k, group, name, copy=False):
        key = (p, k, group)
        if key in self.memory:
            a = self.memory[key][name]
            if copy:
                return a.copy()
            a = a.view()
            a.flags.writeable = False
            return a
        offset, dtype, shape = self.index[key][name]
        if key not in self.maps:
            self.maps[key] = np.memmap(self.path(key), dtype=np.uint8, mode="r")
        count = int(np.prod(shape, dtype=np.int64))
        a = np.frombuffer(self.maps[key], dtype=dtype, count=count, offset=offset).reshape(shape)
        return a.copy() if copy else a

    def release(self):
        """Forget the mappings, and drop their pages from this process's resident
        memory: read pages of a mapped file count towards the peak too.  Freed heap
        pages go back to the OS as well (glibc keeps them otherwise)."""
        for m in self.maps.values():
            release_pages(m)
        self.maps.clear()
        _kn.release_free_memory()

    def drop(self, p, k, group):
        key = (p, k, group)
        if key in self.memory:
            self.held -= sum(a.nbytes for a in self.memory.pop(key).values())
            return
        self.maps.pop(key, None)
        if self.index.pop(key, None) is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path(key))


class Partitioned:
    """The passes of the partitioned estimation over spilled ``counts``."""

    def __init__(self, counts, config, report, vocab_size, prune_word):
        self.counts, self.config, self.report = counts, config, report
        self.order = config.order
        self.vocab_size = vocab_size
        self.prune_word = prune_word
        self.store = None
        self.adj1 = np.zeros(vocab_size, dtype=np.uint64)
        self.mark1 = np.zeros(vocab_size, dtype=np.uint8)
        self.stats = np.zeros((self.order, 7), dtype=np.uint64)
        self.plan = None
        self.segments = None
        self.word_part = None
        self.sizes = None

    def make_plan(self, budget):
        """Cut the words into parts from the runs' histograms of last words, and
        each run into the parts' segments (rows ``segments[r][p]`` on)."""
        hist = np.zeros(self.vocab_size, dtype=np.int64)
        for run in self.counts.runs:
            hist += self.counts.run_histogram(run, self.vocab_size)
        per_row = PART_BYTES_PER_WORD * (self.order + 2)
        self.plan = plan_parts(hist, self.vocab_size, max(1, int(budget * PART_SHARE) // per_row))
        self.word_part = word_parts(self.plan.bounds)
        self.segments = []
        for run in self.counts.runs:
            ends = np.concatenate([[0], np.cumsum(self.counts.run_histogram(run, self.vocab_size))])
            self.segments.append(ends[self.plan.bounds])
        largest = int(np.diff(np.concatenate([[0], np.cumsum(hist)])[self.plan.bounds]).max())
        limit = max(0, budget - largest * per_row)
        self.store = PartStore(self.counts.folder, limit, min(limit, TRANSIENT_BYTES * int(hist.sum())))
        self.sizes = np.zeros((self.plan.parts, self.order + 1), dtype=np.int64)
        self.report.say(f"{self.plan.parts} parts of about {int(hist.sum()) // self.plan.parts} "
                        f"n-grams in {len(self.counts.runs)} runs")

    def adjust_part(self, p):
        keys_l, counts_l = [], []
        for run, ends in zip(self.counts.runs, self.segments):
            keys, counts = self.counts.run_rows(run, int(ends[p]), int(ends[p + 1]))
            keys_l.append(keys)
            counts_l.append(counts)
        orders, stats, adj1, last_word, last_raw = adjust_segments(
            keys_l, counts_l, self.config, self.prune_word, p == self.plan.parts - 1)
        self.stats += stats
        self.adj1 += adj1
        for k, arrays in orders.items():
            self.sizes[p, k] = len(arrays["adj"])
            self.store.put(p, k, "adjusted", adj=arrays["adj"], parent=arrays["parent"])
            self.store.put(p, k, "ngrams", words=arrays["words"], mark=arrays["mark"])
        return last_word, last_raw

    def adjust_parts(self):
        last_word = last_raw = 0
        for p in self.report.passes(range(self.plan.parts), "adjust", self.plan.parts):
            last_word, last_raw = self.adjust_part(p)
            self.counts.release()
            self.store.release()
            _kn.release_free_memory()
        self.counts.drop_runs()             # merged into the parts: no longer needed
        _kn.unigram_stats(self.adj1, self.mark1, self.prune_word, self.config.limit_vocab_file is not None,
                          self.order, last_word, last_raw, self.stats)

    def lower(self, q, k):
        """Part q's (k-1)-grams as ``context_weights`` takes them: (lower, child,
        how many, first word id)."""
        lo, hi = int(self.plan.bounds[q]), int(self.plan.bounds[q + 1])
        if k == 2:
            return None, None, hi - lo, lo
        nodes = hi - lo if k == 3 else int(self.sizes[q, k - 2])
        lower, child = lower_index(self.store.get(q, k - 1, "ngrams", "words"),
                                   self.store.get(q, k - 1, "adjusted", "parent"), nodes, lo, k)
        return lower, child, int(self.sizes[q, k - 1]), lo

    def route(self, k):
        """Each part's order-k n-grams routed to the parts holding their contexts:
        (parts, parts) how many records part p sends to part q."""
        parts = self.plan.parts
        sent = np.zeros((parts, parts), dtype=np.int64)
        for p in self.report.passes(range(parts), f"contexts {k}", parts):
            get = functools.partial(self.store.get, p, k)
            where_prev = self.store.get(p, k - 1, "where", "where") if k > 2 else None
            routed, starts = route_contexts(get("ngrams", "words"), get("adjusted", "adj"), get("ngrams", "mark"),
                                            get("adjusted", "parent"), where_prev, self.word_part, parts)
            sent[p] = np.diff(starts)
            self.store.put(p, k, "routed", **routed)
            if k > 2:
                self.store.drop(p, k - 1, "where")
            del routed, where_prev
            self.store.release()
        return sent

    def order_pass(self, k, disc, prob1, backoff1):
        """Back-offs of order k-1 and probabilities of order k, for every part."""
        parts = self.plan.parts
        sent = self.route(k)
        # [p, q]: where part p's records for part q start in p's routed file
        begin = np.concatenate([np.zeros((parts, 1), np.int64), np.cumsum(sent, axis=1)], axis=1)
        for q in self.report.passes(range(parts), f"weights {k}", parts):
            pieces = [{name: self.store.get(p, k, "routed", name)[begin[p, q]:begin[p, q + 1]]
                       for name in ROUTED} for p in range(parts)]
            lower, child, contexts, lo = self.lower(q, k)
            backoff, returned = context_weights(pieces, lower, child, contexts, lo, disc, self.config.pruning)
            if k == 2:
                backoff1[lo:lo + contexts] = backoff
            else:
                self.store.put(q, k - 1, "backoff", backoff=backoff)
            self.store.put(q, k, "weights", **{name: np.concatenate([r[i] for r in returned])
                                               for i, name in enumerate(("weights", "where"))})
            del pieces, lower, child, backoff, returned
            self.store.release()
        for p in range(parts):
            self.store.drop(p, k, "routed")
        self.probabilities(k, disc, prob1, sent)
        for p in range(parts):
            self.store.drop(p, k, "weights")
            self.store.drop(p, k - 1, "prob")
            self.store.drop(p, k - 1, "adjusted")
            if k == self.order:
                self.store.drop(p, k, "adjusted")

    def probabilities(self, k, disc, prob1, sent):
        """Interpolate each part's order-k n-grams with the weights the parts
        returned (part q's weights file holds the records of part 0, 1, ... in turn)."""
        parts = self.plan.parts
        at = np.concatenate([np.zeros((1, parts), np.int64), np.cumsum(sent, axis=0)])   # [p, q]
        for p in self.report.passes(range(parts), f"probabilities {k}", parts):
            returned = [tuple(self.store.get(q, k, "weights", name)[at[p, q]:at[p + 1, q]]
                              for name in ("weights", "where")) for q in range(parts)]
            get = functools.partial(self.store.get, p, k)
            prev = prob1 if k == 2 else self.store.get(p, k - 1, "prob", "prob")
            prob, logprob, where = part_probs(get("ngrams", "words"), get("adjusted", "adj"), get("ngrams", "mark"),
                                              get("adjusted", "parent"), prev, self.word_part, returned, disc,
                                              self.config.pruning)
            self.store.put(p, k, "logprob", logprob=logprob)
            if k < self.order:
                self.store.put(p, k, "prob", prob=prob)
                self.store.put(p, k, "where", where=where)
            del returned, prev, prob, logprob, where
            self.store.release()

    def blocks(self, k, new_id, logprob1, backoff1):
        """Order k+1's rows for the ARPA writer, part after part."""
        if k == 0:
            keep1 = self.mark1 == 0
            ids = np.arange(int(keep1.sum()), dtype=np.int32)[:, None]
            yield ids, logprob1[keep1], backoff1[keep1]
            return
        n = k + 1
        for p in range(self.plan.parts):
            words = self.store.get(p, n, "ngrams", "words")
            backoff = (self.store.get(p, n, "backoff", "backoff") if n < self.order
                       else np.zeros(len(words), dtype=np.float32))
            yield kept_rows(words, self.store.get(p, n, "logprob", "logprob"), backoff,
                            self.store.get(p, n, "ngrams", "mark"), new_id)
            del words, backoff
            self.store.release()


def estimate_partitioned(counts, config, report, vocab, prune_word, budget):
    """Adjust, discount and interpolate spilled ``counts`` part by part; returns the
    ``Partitioned`` state from which ``write`` streams the model, and the kept
    n-gram counts per order."""
    state = Partitioned(counts, config, report, len(vocab), prune_word)
    state.make_plan(budget)
    report.stage(2, "Calculating and sorting adjusted counts")
    state.adjust_parts()
    discounts, kept = order_discounts(state.stats, config, report)
    report.stage(3, "Calculating and sorting initial probabilities")
    report.stage(4, "Calculating and writing order-interpolated probabilities")
    prob1, logprob1 = unigrams(state.adj1, state.mark1, discounts[0], config, kept[0])
    backoff1 = np.zeros(len(vocab), dtype=np.float32)
    for k in range(2, config.order + 1):
        state.order_pass(k, discounts[k - 1], prob1, backoff1)
    new_id, kept_vocab = renumbering(state.mark1, vocab)

    def blocks(k):
        return state.blocks(k, new_id, logprob1, backoff1)
    return blocks, kept_vocab, kept
