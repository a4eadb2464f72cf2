"""KenLM's trie layout (lm/search_trie.cc, trie.cc, bhiksha.cc, quantize.cc) built from
NGramTables, byte-identical to build_binary's.

Each order's n-grams are sorted by their words newest first (a reversed n-gram
"w_n w_n-1 ... w_1"), so the n-grams that extend an (n-1)-gram to the left are
contiguous in the next order: an entry stores its oldest word, its weights and
where its children begin.  Word ids are the ranks of the words' hashes.
"""
import numpy as np

from nplm.backoff.kenlm import _write
from nplm.backoff.kenlm.header import header_bytes, header_size
from nplm.backoff.kenlm.prepare import kenlm_backoffs, strings, where
from nplm.errors import FormatError

QUANT_VERSION = 2
ARRAY_VERSION = 0


def required_bits(value):
    return int(value).bit_length()


class Level:
    """One order's sorted entries: rows (reversed n-grams), probabilities,
    back-offs (None for the highest order) and child pointers (middle orders)."""

    def __init__(self, rows, prob, backoff):
        self.rows, self.prob, self.backoff = rows, prob, backoff
        self.next = None
        self.prob_centers = self.backoff_centers = None


def _sorted_level(tables, vocab, n, bound):
    ids = vocab.ids[tables.ids[n - 1]]
    rows, perm = _write.sort_rows(np.ascontiguousarray(ids[:, ::-1]), bound)
    dup = _write.find_duplicate(rows)
    if dup >= 0:
        path, line = where(tables, n, perm[dup])
        raise FormatError(f"duplicate {n}-gram", path, line)
    prob = np.ascontiguousarray(tables.logprob[n - 1][perm])
    backoff = None if n == tables.order else kenlm_backoffs(tables.backoff[n - 1][perm])
    return Level(rows, prob, backoff), perm


def _link(tables, levels, uni, n, perm):
    """Point order n - 1 at its children in order n and mark the contexts of order
    n's n-grams as extendable."""
    level = levels[n]
    if n == 2:
        first = level.rows[:, 0]
        starts = np.searchsorted(first, np.arange(len(uni) - 1), side="left")
        uni["next"][:len(uni) - 1] = starts
        ctx = np.unique(level.rows[:, 1])
        b = uni["backoff"][ctx]
        b[b == 0] = 0.0                       # -0.0 -> +0.0: this unigram is extended
        uni["backoff"][ctx] = b
        return
    lower = levels[n - 1]
    lower.next, missing = _write.child_ranges(lower.rows, level.rows)
    if missing >= 0:
        path, line = where(tables, n, perm[missing])
        raise FormatError(f"this {n}-gram's suffix ({n - 1} newest words) is not in the model: "
                          "KenLM's trie fills such gaps with blank entries, which nplm's trie "
                          "writer does not make (the probing type does)", path, line)
    ctx, cperm = _write.sort_rows(np.ascontiguousarray(level.rows[:, 1:]), np.uint32(len(uni) - 1))
    bad = _write.mark_contexts(lower.rows, lower.backoff, ctx)
    if bad >= 0:
        path, line = where(tables, n, perm[cperm[bad]])
        raise FormatError(f"the context of this {n}-gram ({n - 1} oldest words) is not in the model",
                          path, line)


def _quantise(level, opts):
    level.prob_centers = _write.make_bins(np.sort(level.prob), 1 << opts.prob_bits)
    if level.backoff is not None:
        b = np.sort(level.backoff[level.backoff != 0])
        level.backoff_centers = np.concatenate([np.array([-0.0, 0.0], np.float32),
                                                _write.make_bins(b, (1 << opts.backoff_bits) - 2)])


def _chop_bits(max_offset, max_next, pointer_bits):
    """How many high bits of the child pointers go to the offset array (bhiksha.cc)."""
    required = required_bits(max_next)
    best, lowest = 0, None
    for chop in range(min(required, pointer_bits) + 1):
        change = (max_next >> (required - chop)) * 64 - max_offset * chop
        if lowest is None or change < lowest:
            best, lowest = chop, change
    return best


class _Sizes:
    """Where each part of the search goes and how its bits are laid out."""

    def __init__(self, counts, opts, search_offset):
        order = len(counts)
        self.word_bits = required_bits(counts[0])
        self.quant = opts.prob_bits is not None
        if self.quant:
            pb, bb = opts.prob_bits, opts.backoff_bits
            self.quant_size = (order - 2) * ((1 << pb) + (1 << bb)) * 4 + (1 << pb) * 4 + 8
            middle_bits, longest_bits = pb + bb, pb
        else:
            self.quant_size, middle_bits, longest_bits = 0, 63, 31
        offset = search_offset + self.quant_size + (counts[0] + 2) * 16
        self.middles = []
        for n in range(2, order):
            entries, max_next = counts[n - 1], counts[n]
            array_count, inline = 0, required_bits(max_next)
            if opts.pointer_bits is not None:
                chop = _chop_bits(entries + 1, max_next, opts.pointer_bits)
                inline = required_bits(max_next) - chop
                array_count = (max_next >> inline) + 1
                array_size = 8 * (1 + array_count) + 7
            else:
                array_size = 0
            total = self.word_bits + middle_bits + inline
            packed = ((1 + entries) * total + 7) // 8 + 8
            self.middles.append(dict(offset=offset, array_count=array_count, array_size=array_size,
                                     inline=inline, packed=packed))
            offset += array_size + packed
        longest_total = self.word_bits + longest_bits
        self.longest = dict(offset=offset, packed=((1 + counts[-1]) * longest_total + 7) // 8 + 8)
        self.end = offset + self.longest["packed"]


def build(tables, vocab, opts):
    """The trie file's parts: header, sorted vocabulary hashes, search, strings."""
    order = tables.order
    words = vocab.number_by_hash()
    unigrams = len(vocab.words) + 1
    levels = {}
    uni = np.zeros(unigrams + 2, dtype=[("prob", np.float32), ("backoff", np.float32),
                                        ("next", np.uint64)])
    uni["prob"][vocab.ids] = tables.logprob[0]
    uni["backoff"][vocab.ids] = kenlm_backoffs(tables.backoff[0])
    for n in range(2, order + 1):
        levels[n], perm = _sorted_level(tables, vocab, n, np.uint32(unigrams))
        _link(tables, levels, uni[:unigrams + 1], n, perm)
    uni["next"][unigrams] = len(levels[2].rows)
    if not vocab.saw_unk:
        uni[0]["prob"], uni[0]["backoff"] = opts.unknown_logprob, 0.0
    if opts.prob_bits is not None:
        for level in levels.values():
            _quantise(level, opts)
    counts = [unigrams] + [len(levels[n].rows) for n in range(2, order + 1)]
    vocab_size = 8 + 8 * vocab.arpa_count
    pad = 0 if vocab.saw_unk else 8
    search_offset = header_size(order) + vocab_size + pad
    sizes = _Sizes(counts, opts, search_offset)
    vocab_region = np.zeros(vocab_size + pad, dtype=np.uint8)
    vocab_region[:8].view(np.uint64)[0] = len(vocab.words)
    vocab_region[8:8 + 8 * len(vocab.words)] = vocab.hashes.view(np.uint8)
    search = np.zeros(sizes.end - search_offset, dtype=np.uint8)
    _write_search(search, search_offset, sizes, levels, uni, opts)
    head = header_bytes(order, opts.model_type, 1, counts, opts.multiplier, opts.include_vocab)
    parts = [head, vocab_region, search]
    if opts.include_vocab:
        parts.append(strings(words))
    return parts


def _write_search(search, base, sizes, levels, uni, opts):
    order = len(levels) + 1
    if sizes.quant:
        search[:3] = (QUANT_VERSION, opts.prob_bits, opts.backoff_bits)
        tables = [t for n in range(2, order) for t in (levels[n].prob_centers, levels[n].backoff_centers)]
        tables.append(levels[order].prob_centers)
        centres = np.concatenate(tables).astype(np.float32)
        search[8:8 + 4 * len(centres)] = centres.view(np.uint8)
    start = sizes.quant_size
    search[start:start + uni.nbytes] = uni.view(np.uint8)
    pb = opts.prob_bits or 0
    bb = opts.backoff_bits or 0
    for n in range(2, order):
        m, level = sizes.middles[n - 2], levels[n]
        begin = m["offset"] - base
        if opts.pointer_bits is not None:
            _write_offsets(search, m["offset"], base, level.next, m, opts.pointer_bits)
        region = search[begin + m["array_size"]:begin + m["array_size"] + m["packed"]]
        _write.pack_level(region, np.ascontiguousarray(level.rows[:, -1]), level.prob, level.backoff,
                          level.next, sizes.word_bits, m["inline"], level.prob_centers,
                          level.backoff_centers, pb, bb)
    level = levels[order]
    begin = sizes.longest["offset"] - base
    region = search[begin:begin + sizes.longest["packed"]]
    _write.pack_level(region, np.ascontiguousarray(level.rows[:, -1]), level.prob, None, None,
                      sizes.word_bits, 0, level.prob_centers, None, pb, bb)


def _write_offsets(search, offset, base, nxt, m, pointer_bits):
    """The array of -a: for each value k of a pointer's high bits, the first entry
    whose pointer reaches it; a 2-byte header (version, bits) at the level's start
    and the array from the next 8-byte boundary after an 8-byte header."""
    begin = offset - base
    search[begin:begin + 2] = (ARRAY_VERSION, pointer_bits)
    aligned = (offset + 7) // 8 * 8 - base + 8
    high = nxt >> np.uint64(m["inline"])
    array = np.zeros(m["array_count"], dtype=np.uint64)
    array[1:] = np.searchsorted(high, np.arange(1, m["array_count"], dtype=np.uint64), side="left")
    search[aligned:aligned + 8 * len(array)] = array.view(np.uint8)
