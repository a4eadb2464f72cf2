"""Estimation in bounded memory: the n-grams split into parts by their last word.

In suffix order (last word most significant) the n-grams ending in a range of word
ids are contiguous, and so is everything ``adjust`` derives from them: lower-order
n-grams, adjusted counts, suffix links.  So the spilled runs are cut into parts by
ranges of the last word, each part is merged and adjusted alone (``adjust_parts``),
and only two things cross parts, both per order k and keyed by the context c (the
n-gram minus its last word, which ends in another part):

* the context statistics: each part sums, per context, its n-grams' adjusted
  counts and counts-of-counts (``context_sums``); the part that holds c as an
  (k-1)-gram adds up every part's sums and computes c's weight and back-off
  (``context_weights``);
* the weights go back to the parts that asked (``part_probs``), which interpolate
  with the suffix's probability, held in the same part.

Integer sums are exact in any order and every float is computed by the same
kernel as in memory, so the model is the in-memory one, byte for byte.  Between
passes the arrays live in the temporary folder; a pass holds one part at a time.
The same steps, run as Dask tasks, are the distributed estimation.
"""
import contextlib
import dataclasses
import mmap
import os

import numpy as np

from nplm.backoff import _kn, _kn_merge, _kn_probs
from nplm.backoff.estimate.adjust import adjust
from nplm.backoff.estimate.discount import discounts as order_discounts
from nplm.backoff.estimate.interpolate import unigrams
from nplm.backoff.estimate.write import kept_rows, renumbering

# Bytes per merged highest-order n-gram that one part's passes hold at most (the
# merged run and its mapped sources, every order's adjusted arrays, the sort and
# sums of the context pass), over 4 bytes per word of an n-gram.
PART_BYTES_PER_WORD = 56
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


def group_rows(rows):
    """Sort ``rows`` (m, w) in suffix order and group equal ones: (sorting
    permutation, distinct rows, start of each group in sorted order, group of each
    original row)."""
    m, w = rows.shape
    order = np.argsort(rows[:, 0], kind="stable") if w == 1 else np.lexsort(rows.T)
    s = rows[order]
    new = np.ones(m, dtype=bool)
    new[1:] = (s[1:] != s[:-1]).any(axis=1)
    starts = np.flatnonzero(new)
    inverse = np.empty(m, dtype=np.int64)
    inverse[order] = np.cumsum(new) - 1
    return order, np.ascontiguousarray(s[starts]), starts, inverse


def extension_stats(adj, mark, pruning):
    """Per n-gram, what its context sums: (adjusted count, kept with count 1, 2, 3+,
    pruned adjusted count), as ``_kn_probs.order_probs`` counts them."""
    adj = np.asarray(adj)
    vals = np.zeros((len(adj), 5), dtype=np.uint64)
    vals[:, 0] = adj
    kept = np.ones(len(adj), dtype=bool) if not pruning else np.asarray(mark) == 0
    vals[:, 1] = kept & (adj == 1)
    vals[:, 2] = kept & (adj == 2)
    vals[:, 3] = kept & (adj >= 3)
    if pruning:
        vals[:, 4] = np.where(kept, 0, adj)
    return vals


def context_sums(words, adj, mark, pruning):
    """One part's order-k n-grams summed per context: (distinct contexts (c, k-1)
    suffix-sorted, sums (c, 5), context of each n-gram (m,))."""
    order, contexts, starts, inverse = group_rows(np.asarray(words)[:, :-1])
    vals = extension_stats(adj, mark, pruning)
    sums = np.add.reduceat(vals[order], starts, axis=0) if len(starts) else vals[:0]
    return contexts, sums, inverse


def split_by_part(contexts, bounds):
    """Where the suffix-sorted contexts of each part start (their last word)."""
    return np.searchsorted(contexts[:, -1], bounds).astype(np.int64)


def context_weights(pieces_ctx, pieces_sums, lower, disc):
    """Sum the pieces of every part's context statistics for this part's (k-1)-grams
    ``lower``: (back-off of each row of ``lower``, (fdenom, gamma) of each piece row
    in the order given)."""
    allctx = np.concatenate(pieces_ctx) if pieces_ctx else np.zeros((0, lower.shape[1]), np.int32)
    allsums = np.concatenate(pieces_sums) if pieces_sums else np.zeros((0, 5), np.uint64)
    backoff = np.zeros(len(lower), dtype=np.float32)
    if len(allctx) == 0:
        return backoff, np.zeros((0, 2), dtype=np.float32)
    order, distinct, starts, inverse = group_rows(allctx)
    total = np.add.reduceat(allsums[order], starts, axis=0)
    c = len(distinct)
    fdenom, gamma, bo = (np.empty(c, dtype=np.float32) for _ in range(3))
    _kn_probs.context_weights(np.ascontiguousarray(total[:, 0]), np.ascontiguousarray(total[:, 1:4]),
                              np.ascontiguousarray(total[:, 4]), disc, fdenom, gamma, bo)
    where, missing = _kn_merge.locate(distinct, np.ascontiguousarray(lower, dtype=np.int32))
    if missing:
        raise RuntimeError(f"internal error: {missing} contexts of order {lower.shape[1] + 1} "
                           "are missing")
    backoff[where] = bo
    return backoff, np.stack([fdenom[inverse], gamma[inverse]], axis=1)


def part_probs(adj, mark, inverse, weights, parent, prob_prev, disc, pruning):
    """Interpolated probabilities of one part's order-k n-grams from their contexts'
    weights (rows of ``weights`` by ``inverse``): (prob, logprob)."""
    m = len(adj)
    prob = np.empty(m, dtype=np.float32)
    logprob = np.empty(m, dtype=np.float32)
    fdenom = np.ascontiguousarray(weights[:, 0])
    gamma = np.ascontiguousarray(weights[:, 1])
    _kn_probs.interp_probs(np.ascontiguousarray(adj), np.ascontiguousarray(mark), inverse, fdenom, gamma,
                           np.ascontiguousarray(parent), np.ascontiguousarray(prob_prev), disc, pruning,
                           prob, logprob)
    return prob, logprob


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


class PartStore:
    """The arrays of every part between passes, in the temporary folder: the arrays
    of one part, order and pass share a file (opening and removing files is what
    costs on many file systems), mapped once and read as views."""

    def __init__(self, folder):
        self.folder = folder
        self.index = {}         # (p, k, group) -> {name: (offset, dtype, shape)}
        self.maps = {}          # (p, k, group) -> the file mapped read-only

    def path(self, key):
        return self.folder.file("p%d.%d.%s" % key)

    def put(self, p, k, group, **arrays):
        key = (p, k, group)
        entries, offset = {}, 0
        for name, a in arrays.items():
            a = np.ascontiguousarray(a)
            entries[name] = (offset, a.dtype, a.shape)
            offset += -(-a.nbytes // 64) * 64
        self.folder.check_space(offset)
        with open(self.path(key), "wb") as f:
            for name, a in arrays.items():
                f.seek(entries[name][0])
                self.folder.write(f, np.ascontiguousarray(a))
            f.truncate(max(offset, 1))
        self.index[key] = entries
        self.maps.pop(key, None)

    def get(self, p, k, group, name, copy=False):
        key = (p, k, group)
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
        self.maps.pop(key, None)
        self.index.pop(key, None)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path(key))


class Partitioned:
    """The passes of the partitioned estimation over spilled ``counts``."""

    def __init__(self, counts, config, report, vocab_size, prune_word):
        self.counts, self.config, self.report = counts, config, report
        self.order = config.order
        self.vocab_size = vocab_size
        self.prune_word = prune_word
        self.store = PartStore(counts.folder)
        self.adj1 = np.zeros(vocab_size, dtype=np.uint64)
        self.mark1 = np.zeros(vocab_size, dtype=np.uint8)
        self.stats = np.zeros((self.order, 7), dtype=np.uint64)
        self.plan = None
        self.sizes = None

    def make_plan(self, budget):
        hist = np.zeros(self.vocab_size, dtype=np.int64)
        for run in self.counts.runs:
            keys, _ = self.counts.load_run(run)
            hist += run_histogram(keys, self.vocab_size)
        target = max(1, budget // (PART_BYTES_PER_WORD * (self.order + 2)))
        self.plan = plan_parts(hist, self.vocab_size, target)
        self.sizes = np.zeros((self.plan.parts, self.order + 1), dtype=np.int64)
        self.report.say(f"{self.plan.parts} parts of about {int(hist.sum()) // self.plan.parts} "
                        f"n-grams in {len(self.counts.runs)} runs")

    def adjust_part(self, p):
        lo, hi = self.plan.bounds[p], self.plan.bounds[p + 1]
        keys_l, counts_l = [], []
        for run in self.counts.runs:
            keys, counts = run_segment(*self.counts.load_run(run), lo, hi)
            keys_l.append(np.ascontiguousarray(keys))
            counts_l.append(np.ascontiguousarray(counts))
        orders, stats, adj1, last_word, last_raw = adjust_segments(
            keys_l, counts_l, self.config, self.prune_word, p == self.plan.parts - 1)
        self.stats += stats
        self.adj1 += adj1
        for k, arrays in orders.items():
            self.sizes[p, k] = len(arrays["adj"])
            self.store.put(p, k, "adjusted", **arrays)
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

    def lower_rows(self, q, k):
        """Part q's (k-1)-grams: word ids for unigrams."""
        if k == 2:
            lo, hi = self.plan.bounds[q], self.plan.bounds[q + 1]
            return np.arange(lo, hi, dtype=np.int32)[:, None]
        return self.store.get(q, k - 1, "adjusted", "words")

    def order_pass(self, k, disc, prob1, backoff1):
        """Back-offs of order k-1 and probabilities of order k, for every part."""
        parts, pruning = self.plan.parts, self.config.pruning
        offsets = []
        for p in self.report.passes(range(parts), f"contexts {k}", parts):
            ctx, sums, inverse = context_sums(self.store.get(p, k, "adjusted", "words"),
                                              self.store.get(p, k, "adjusted", "adj"),
                                              self.store.get(p, k, "adjusted", "mark"), pruning)
            offsets.append(split_by_part(ctx, self.plan.bounds))
            self.store.put(p, k, "context", ctx=ctx, sums=sums)
            self.store.put(p, k, "inverse", inverse=inverse)
            self.store.release()
        ctxs = [self.store.get(p, k, "context", "ctx") for p in range(parts)]
        sums = [self.store.get(p, k, "context", "sums") for p in range(parts)]
        returned = []
        for q in self.report.passes(range(parts), f"weights {k}", parts):
            pieces_ctx = [ctxs[p][offsets[p][q]:offsets[p][q + 1]] for p in range(parts)]
            pieces_sums = [sums[p][offsets[p][q]:offsets[p][q + 1]] for p in range(parts)]
            backoff, weights = context_weights(pieces_ctx, pieces_sums, self.lower_rows(q, k), disc)
            if k == 2:
                backoff1[self.plan.bounds[q]:self.plan.bounds[q + 1]] = backoff
            else:
                self.store.put(q, k - 1, "backoff", backoff=backoff)
            self.store.put(q, k, "weights", weights=weights)
            returned.append(np.cumsum([0] + [len(c) for c in pieces_ctx]))
            del pieces_ctx, pieces_sums, ctxs, sums
            self.store.release()
            ctxs = [self.store.get(p, k, "context", "ctx") for p in range(parts)]
            sums = [self.store.get(p, k, "context", "sums") for p in range(parts)]
        del ctxs, sums
        for p in range(parts):
            self.store.drop(p, k, "context")
        self.probabilities(k, disc, prob1, returned)
        for q in range(parts):
            self.store.drop(q, k, "weights")

    def probabilities(self, k, disc, prob1, returned):
        parts = self.plan.parts
        weights_of = [self.store.get(q, k, "weights", "weights") for q in range(parts)]
        for p in self.report.passes(range(parts), f"probabilities {k}", parts):
            weights = np.concatenate([weights_of[q][returned[q][p]:returned[q][p + 1]] for q in range(parts)])
            prev = prob1 if k == 2 else self.store.get(p, k - 1, "probs", "prob")
            prob, logprob = part_probs(self.store.get(p, k, "adjusted", "adj"),
                                       self.store.get(p, k, "adjusted", "mark"),
                                       self.store.get(p, k, "inverse", "inverse"), weights,
                                       self.store.get(p, k, "adjusted", "parent"), prev, disc,
                                       self.config.pruning)
            if k < self.order:
                self.store.put(p, k, "probs", logprob=logprob, prob=prob)
            else:
                self.store.put(p, k, "probs", logprob=logprob)
            self.store.drop(p, k, "inverse")
            del weights
            self.store.release()
            weights_of = [self.store.get(q, k, "weights", "weights") for q in range(parts)]

    def blocks(self, k, new_id, logprob1, backoff1):
        """Order k+1's rows for the ARPA writer, part after part."""
        if k == 0:
            keep1 = self.mark1 == 0
            ids = np.arange(int(keep1.sum()), dtype=np.int32)[:, None]
            yield ids, logprob1[keep1], backoff1[keep1]
            return
        n = k + 1
        for p in range(self.plan.parts):
            words = self.store.get(p, n, "adjusted", "words")
            backoff = (self.store.get(p, n, "backoff", "backoff") if n < self.order
                       else np.zeros(len(words), dtype=np.float32))
            yield kept_rows(words, self.store.get(p, n, "probs", "logprob"), backoff,
                            self.store.get(p, n, "adjusted", "mark"), new_id)
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
