"""KenLM's trie layout (lm/search_trie.cc, trie.cc, bhiksha.cc, quantize.cc) built from
NGramTables, byte-identical to build_binary's.

Each order's n-grams are sorted by their words newest first (a reversed n-gram
"w_n w_n-1 ... w_1"), so the n-grams that extend an (n-1)-gram to the left are
contiguous in the next order: an entry stores its oldest word, its weights and
where its children begin.  Word ids are the ranks of the words' hashes.
"""

import numpy as np

from nplm.backoff.kenlm import _write
from nplm.backoff.kenlm.format import BHIKSHA_VERSION, QUANT_VERSION, SEARCH_VERSION, Header, pack_header, trie_layout
from nplm.backoff.kenlm.prepare import kenlm_backoffs, strings, where
from nplm.backoff.kenlm.trie_blanks import add_blanks
from nplm.errors import FormatError
from nplm.io.resources import ThreadPool, check_available


class Level:
    """One order's sorted entries: rows (reversed n-grams), probabilities,
    back-offs (None for the highest order) and child pointers (middle orders)."""

    def __init__(self, rows, prob, backoff):
        self.rows, self.prob, self.backoff = rows, prob, backoff
        self.next = None
        self.prob_centers = self.backoff_centers = None


def _check_repeats(tables, n, rows, perm):
    """KenLM's trie keeps an n-gram listed twice twice, side by side: the same file
    whatever the order of the two when they are copies, but an order its sort leaves
    open (and so which one a query finds) when their values differ: refused."""
    again = np.flatnonzero((rows[1:] == rows[:-1]).all(axis=1))
    values = [tables.logprob[n - 1][perm]] + ([] if n == tables.order else [tables.backoff[n - 1][perm]])
    differ = np.zeros(len(again), dtype=bool)
    for v in values:
        differ |= v[again].view(np.uint32) != v[again + 1].view(np.uint32)
    if differ.any():
        path, line = where(tables, n, max(perm[again[differ][0]], perm[again[differ][0] + 1]))
        raise FormatError(f"duplicate {n}-gram with other values: KenLM's trie keeps both entries, in an order "
                          "its sort leaves open (so which one a query finds too); build a probing file, which "
                          "finds the first as KenLM's does, or remove the line", path, line)


def _sorted_level(tables, vocab, n, bound):
    """Order n's entries sorted, the permutation from the ARPA's order, and the
    contexts of its n-grams (their n - 1 oldest words) sorted, with theirs."""
    ids = vocab.ids[tables.ids[n - 1]]
    rows, perm = _write.sort_rows(np.ascontiguousarray(ids[:, ::-1]), bound)
    if _write.find_duplicate(rows) >= 0:
        _check_repeats(tables, n, rows, perm)
    prob = np.ascontiguousarray(tables.logprob[n - 1][perm])
    backoff = None if n == tables.order else kenlm_backoffs(tables.backoff[n - 1][perm])
    contexts = None
    if n > 2:
        contexts = _write.sort_rows(np.ascontiguousarray(rows[:, 1:]), bound)
    return Level(rows, prob, backoff), perm, contexts


def _sorted_levels(tables, vocab, bound):
    """_sorted_level of every order, two orders at a time (the sorts release the GIL)."""
    with ThreadPool(max_workers=2) as pool:
        jobs = {n: pool.submit(_sorted_level, tables, vocab, n, bound) for n in range(2, tables.order + 1)}
        return {n: job.result() for n, job in jobs.items()}


def _mark_contexts(tables, levels, uni, n, perm, contexts):
    """Give the contexts of order n's n-grams an extendable back-off (-0.0 -> +0.0);
    a context that is not an n-gram of the model is an error, as in KenLM."""
    level = levels[n]
    if n == 2:
        ctx = np.unique(level.rows[:, 1])
        b = uni["backoff"][ctx]
        b[b == 0] = 0.0
        uni["backoff"][ctx] = b
        return
    lower = levels[n - 1]
    ctx, cperm = contexts
    bad = _write.mark_contexts(lower.rows, lower.backoff, ctx)
    if bad >= 0:
        path, line = where(tables, n, perm[cperm[bad]])
        raise FormatError(f"the context of this {n}-gram ({n - 1} oldest words) is not in the model",
                          path, line)


def _link_children(levels, uni, n):
    """Point each entry of order n - 1 at the start of its children in order n."""
    level = levels[n]
    if n == 2:
        uni["next"][:len(uni) - 1] = np.searchsorted(level.rows[:, 0], np.arange(len(uni) - 1), side="left")
        uni["next"][len(uni) - 1] = len(level.rows)
        return
    lower = levels[n - 1]
    lower.next, missing = _write.child_ranges(lower.rows, level.rows)
    if missing >= 0:     # blanks were added for every missing suffix
        raise AssertionError(f"a {n}-gram's suffix is missing from the trie after adding blanks")
    if len(lower.rows) > 1:
        # an n-gram listed twice is two entries in KenLM's trie; its children go to the last
        for i in np.flatnonzero((lower.rows[1:] == lower.rows[:-1]).all(axis=1)):
            lower.next[i + 1] = lower.next[i]


def _quantise(level, opts):
    level.prob_centers = _write.make_bins(np.sort(level.prob), 1 << opts.prob_bits)
    if level.backoff is not None:
        b = np.sort(level.backoff[level.backoff != 0])
        level.backoff_centers = np.concatenate([np.array([-0.0, 0.0], np.float32),
                                                _write.make_bins(b, (1 << opts.backoff_bits) - 2)])


def build(tables, vocab, opts):
    """The trie file's parts: header, sorted vocabulary hashes, search, strings."""
    order = tables.order
    words = vocab.number_by_hash()
    unigrams = len(tables.vocab) + (0 if vocab.saw_unk else 1)    # KenLM's: the header's count, <unk> again too
    levels = {}
    uni = np.zeros(unigrams + 2, dtype=[("prob", np.float32), ("backoff", np.float32),
                                        ("next", np.uint64)])
    uni["prob"][vocab.ids] = tables.logprob[0]
    uni["backoff"][vocab.ids] = kenlm_backoffs(tables.backoff[0])
    sorted_levels = _sorted_levels(tables, vocab, np.uint32(unigrams))
    for n in range(2, order + 1):
        levels[n] = sorted_levels[n][0]
    for n in range(2, order + 1):
        _mark_contexts(tables, levels, uni[:unigrams + 1], n, *sorted_levels[n][1:])
    add_blanks(levels, uni[:unigrams + 1], order)
    for n in range(2, order + 1):
        _link_children(levels, uni[:unigrams + 1], n)
    if not vocab.saw_unk:
        uni[0]["prob"], uni[0]["backoff"] = opts.unknown_logprob, 0.0
    if opts.prob_bits is not None:
        for level in levels.values():
            _quantise(level, opts)
    counts = [unigrams] + [len(levels[n].rows) for n in range(2, order + 1)]
    header = Header(order, opts.multiplier, opts.model_type, opts.include_vocab,
                    SEARCH_VERSION[opts.model_type], tuple(counts))
    layout = trie_layout(header, opts.prob_bits or 0, opts.backoff_bits or 0, opts.pointer_bits or 0)
    check_available(layout.end, f"the KenLM trie file ({sum(counts):,} entries)", "use a machine with more memory")
    body = np.zeros(layout.end, dtype=np.uint8)
    body[:header.size] = np.frombuffer(pack_header(header), np.uint8)
    vocab_at = layout.vocab.offset
    body[vocab_at:vocab_at + 8].view(np.uint64)[0] = len(vocab.words)
    body[vocab_at + 8:vocab_at + 8 + 8 * len(vocab.words)] = vocab.hashes.view(np.uint8)
    _write_search(body, layout, levels, uni, opts)
    return [body, strings(words)] if opts.include_vocab else [body]


def _write_search(body, layout, levels, uni, opts):
    order = len(levels) + 1
    if layout.quant is not None:
        q = layout.quant.offset
        body[q:q + 3] = (QUANT_VERSION, opts.prob_bits, opts.backoff_bits)
        tables = [t for n in range(2, order) for t in (levels[n].prob_centers, levels[n].backoff_centers)]
        centres = np.concatenate(tables + [levels[order].prob_centers]).astype(np.float32)
        body[q + 8:q + 8 + 4 * len(centres)] = centres.view(np.uint8)
    u = layout.unigram.offset
    body[u:u + uni.nbytes] = uni.view(np.uint8)
    pb, bb = opts.prob_bits or 0, opts.backoff_bits or 0
    for m, n in zip(layout.middle + (layout.longest,), range(2, order + 1)):
        level = levels[n]
        if m.array is not None:
            _write_offsets(body, m, level.next, opts.pointer_bits)
        _write.pack_level(body[m.base:m.end], np.ascontiguousarray(level.rows[:, -1]), level.prob,
                          level.backoff, level.next, m.word_bits, m.next_bits, level.prob_centers,
                          level.backoff_centers, pb, bb)


def _write_offsets(body, m, nxt, pointer_bits):
    """The array of -a: for each value k of a pointer's high bits, the first entry
    whose pointer reaches it, after a 2-byte header (version, bits) at the level's start."""
    body[m.offset:m.offset + 2] = (BHIKSHA_VERSION, pointer_bits)
    high = nxt >> np.uint64(m.next_bits)
    array = np.zeros(m.array_count, dtype=np.uint64)
    array[1:] = np.searchsorted(high, np.arange(1, m.array_count, dtype=np.uint64), side="left")
    body[m.array:m.array + 8 * len(array)] = array.view(np.uint8)
