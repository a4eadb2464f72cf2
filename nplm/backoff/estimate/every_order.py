"""The n-grams of every order of a text and their counts, in bounded memory (the
candidate n-grams ``nplm distil`` lists, from a training text and a sampled pool).

Counting is estimation's (nplm/backoff/estimate/count.py): the highest-order n-grams,
left-padded with ``<s>``, in one hash table that is sorted in suffix order and
spilled to the temporary folder as a run whenever it outgrows the budget (``-S``).
Every lower-order n-gram occurrence is the suffix of exactly one padded
highest-order n-gram (the one ending at the same word), and in suffix order the
n-grams sharing a k-word suffix are contiguous, so each order's counts are sums
over runs of neighbours: one pass, no table per order.  An n-gram with ``<s>`` past
its first word is padding, not an n-gram of the text.

Past the budget the runs are cut into parts by ranges of the last word, as the
partitioned estimation does (nplm/backoff/estimate/partitioned.py): every n-gram
that ends in a part's words, of every order, is counted whole inside the part, so
each part is merged, summed and thresholded alone and the result is the in-memory
one.  What stays in memory is what passes the thresholds (the rows the caller
keeps anyway) and one part at a time.

Words are numbered by a vocabulary the caller gives (a teacher's); words outside it
count as ``<unk>``, as the caller's lookup would map them.  Text is split as
KenLM's queries split it (ASCII white space), one sentence per line.
"""
import contextlib

import numpy as np

from nplm.backoff import _kn, _kn_merge
from nplm.backoff.estimate import count as counting
from nplm.backoff.estimate.config import parse_size, temp_directory
from nplm.backoff.estimate.partitioned import MAX_PARTS, PART_BYTES_PER_WORD, plan_parts, run_histogram, run_segment
from nplm.backoff.estimate.report import Report
from nplm.errors import FormatError
from nplm.io.atomic import temp_folder
from nplm.io.text import split_words, utf8_lines

SPECIALS = ("<unk>", "<s>", "</s>")
BOS = 1


class Numbering:
    """The counter's word ids (``<unk>``, ``<s>``, ``</s>`` first, then the rest of
    ``words`` in order, then the ``extra`` words it lacks) and the map back to the
    caller's ids (the extra words: ``<unk>``'s)."""

    def __init__(self, words, extra=()):
        index = {}
        for i, w in enumerate(words):
            index.setdefault(w, i)
        missing = [s for s in SPECIALS if s not in index]
        if missing:
            raise ValueError(f"the vocabulary lacks {', '.join(missing)}")
        head = [index[s] for s in SPECIALS]
        rest = [i for i, w in enumerate(words) if w not in SPECIALS and index[w] == i]
        extra = [w for w in dict.fromkeys(extra) if w not in index]
        self.to_caller = np.array(head + rest + [index["<unk>"]] * len(extra), dtype=np.int32)
        self.rest = [words[i].encode("utf-8") for i in rest] + [w.encode("utf-8") for w in extra]

    def counter(self, order):
        c = _kn.Counter(order, False, True)
        c.close_vocabulary(self.rest)
        return c


def suffix_counts(keys, counts, thresholds):
    """{n: (rows (k, n) uint32, counts (k,) int64)}, n = 2..order, of suffix-sorted
    padded highest-order ``keys`` (distinct) with ``counts``: every order's n-grams
    (their occurrences summed) seen at least ``thresholds[n]`` times, padding left out."""
    m, order = keys.shape
    out = {}
    new = np.ones(m, dtype=bool)
    if m > 1:
        new[1:] = keys[1:, order - 1] != keys[:-1, order - 1]
    for n in range(2, order + 1):
        col = order - n
        if m > 1:
            new[1:] |= keys[1:, col] != keys[:-1, col]
        starts = np.flatnonzero(new)
        c = np.add.reduceat(counts, starts).astype(np.int64) if m else np.zeros(0, np.int64)
        keep = c >= thresholds[n]
        if n > 2:          # <s> past the first word: padding, not an n-gram of the text
            keep &= (keys[starts, col + 1:order - 1] != BOS).all(axis=1)
        keep_at = starts[keep]
        out[n] = (np.ascontiguousarray(keys[keep_at, col:]), c[keep])
    return out


class Collected:
    """Rows per order gathered part by part, in the caller's ids; ``forbidden``: the
    counter ids of the words that must not occur (``seen``: those that did)."""

    def __init__(self, order, numbering, forbidden):
        self.rows = {n: [] for n in range(2, order + 1)}
        self.counts = {n: [] for n in range(2, order + 1)}
        self.to_caller = numbering.to_caller
        self.forbidden = np.asarray(forbidden, dtype=np.uint32)
        self.seen = set()

    def add(self, keys, counts, thresholds):
        if len(self.forbidden) and len(keys):
            # every word of the text ends the padded n-gram that ends where it stands
            self.seen.update(np.intersect1d(keys[:, -1], self.forbidden).tolist())
        for n, (r, c) in suffix_counts(keys, counts, thresholds).items():
            self.rows[n].append(self.to_caller[r])
            self.counts[n].append(c)

    def result(self):
        return {n: (np.concatenate(self.rows[n]) if self.rows[n] else np.zeros((0, n), np.int32),
                    np.concatenate(self.counts[n]) if self.counts[n] else np.zeros(0, np.int64))
                for n in self.rows}


def count_every_order(paths, order, words, min_counts=None, memory="80%", temp_prefix=None,
                      forbidden=("<null>",), progress=False):
    """{n: (rows (k, n) int32, counts (k,) int64)} for n = 2..``order``: the n-grams of
    the texts ``paths`` (counted together) with one ``<s>`` before and ``</s>`` after
    each line, never ending in ``<s>``, in ids of ``words`` (unknown words: the id of
    ``<unk>``), suffix-sorted per part; with ``min_counts`` ({n: c}) only those seen
    at least c times.  ``memory`` bounds the counting table (``-S``: bytes or a size
    such as "2G"); beyond it runs spill to a folder under ``temp_prefix`` (``-T``),
    removed however the call ends.  A word of ``forbidden`` in the text is an error
    naming the file and line (``<s>`` and ``</s>`` always are)."""
    forbidden = [w for w in forbidden if w not in ("<s>", "</s>")]
    numbering = Numbering(words, forbidden)
    budget = max(parse_size(memory), 1 << 16)
    thresholds = {n: int((min_counts or {}).get(n, 1)) for n in range(2, order + 1)}
    counts = counting.Counts(numbering.counter(max(order, 1)), " ".join(map(str, paths)))
    report = Report(progress, 1)
    with contextlib.ExitStack() as stack:
        made = []

        def folder():
            if not made:
                made.append(stack.enter_context(temp_folder(temp_directory(temp_prefix), "nplm-count-")))
            return made[0]
        for path in paths:
            counting.count_source(path, counts, report, budget, folder, utf8=True)
        out = Collected(order, numbering, [counts.counter.find(w.encode("utf-8")) for w in forbidden])
        if not counts.spilled:
            keys, c = counts.counter.suffix_sorted()
            out.add(keys, c, thresholds)
        else:
            counts.spill(folder())
            _add_parts(counts, out, thresholds, budget, len(numbering.to_caller))
            counts.drop_runs()
    if out.seen:
        _refuse(paths, {w for w in forbidden if counts.counter.find(w.encode("utf-8")) in out.seen})
    return out.result()


def _add_parts(counts, out, thresholds, budget, vocab_size):
    """The spilled runs part by part (ranges of the last word), merged and summed."""
    order = counts.counter.order
    hist = np.zeros(vocab_size, dtype=np.int64)
    for run in counts.runs:
        hist += run_histogram(counts.load_run(run)[0], vocab_size)
    plan = plan_parts(hist, vocab_size, max(1, budget // (PART_BYTES_PER_WORD * (order + 2))), MAX_PARTS)
    for p in range(plan.parts):
        lo, hi = plan.bounds[p], plan.bounds[p + 1]
        keys_l, counts_l = [], []
        for run in counts.runs:
            k, c = run_segment(*counts.load_run(run), lo, hi)
            keys_l.append(np.ascontiguousarray(k))
            counts_l.append(np.ascontiguousarray(c))
        keys, c = _kn_merge.merge_runs(keys_l, counts_l, order)
        del keys_l, counts_l
        out.add(keys, c, thresholds)
        del keys, c
        counts.release()
        _kn.release_free_memory()


def _refuse(paths, bad):
    """FormatError naming the first line of ``paths`` holding a word of ``bad``."""
    for path in paths:
        for line_no, line in enumerate(utf8_lines(path), 1):
            for w in split_words(line):
                if w in bad:
                    raise FormatError(f"the text contains the reserved token {w!r}", path, line_no)
    raise FormatError(f"the text contains the reserved token {min(bad)!r}", paths[0])
