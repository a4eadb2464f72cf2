"""Refusing KenLM binaries that hold what no model can.

KenLM's format has no checksums: a damaged file loads and answers, with scores that
may be NaN, positive or 10^38.  What every file build_binary writes satisfies is
checked at load instead: no probability is NaN, positive or below -10,000 (-inf is
kept: KenLM stores an ARPA's -inf as it is), no back-off is NaN or beyond +-10,000;
a trie's child pointers cover the next order in order and its word ids increase
under each parent; quantisation tables are sorted.  The loads that read the whole
file anyway (POPULATE, READ) check every record, in one pass (kenlm_check.h);
LAZY, which reads only what queries touch, checks the unigrams and the
quantisation tables (kenlm_check.h through _check, without numpy, which only the
probing records' check imports), and ``nplm verify`` the rest.
"""
import importlib

from nplm.backoff.kenlm import _check
from nplm.errors import FormatError

LIMIT = 10000.0


def _refuse(what, n, index, path):
    raise FormatError(f"corrupt KenLM binary: {what} in its {_ngrams(n)} (record {int(index)}); rebuild it "
                      "from the ARPA file", path)


def _ngrams(n):
    return "unigrams" if n == 1 else f"{n}-grams"


def _column(mem, table, at):
    """The float32 at byte ``at`` of each entry of ``table`` (a view, no copy)."""
    np = importlib.import_module("numpy")
    rows = mem[table.offset:table.offset + table.buckets * table.entry].reshape(table.buckets, table.entry)
    return rows[:, at:at + 4].view(np.float32)[:, 0]


def _values(n, prob, backoff, path, signed=True):
    """Refuse the first unsound value (prob with its sign forced on when ``signed``)."""
    np = importlib.import_module("numpy")
    if signed:
        prob = (prob.view(np.uint32) | np.uint32(0x80000000)).view(np.float32)
    bad_prob = np.isnan(prob) | (prob > 0) | ((prob < -LIMIT) & ~np.isinf(prob))     # (kenlm_check.h's tests)
    bad_backoff = None if backoff is None else ~((backoff >= -LIMIT) & (backoff <= LIMIT))
    for what, bad in (("a probability no model holds", bad_prob), ("a back-off no model holds", bad_backoff)):
        if bad is not None and bad.any():
            _refuse(what, n, np.flatnonzero(bad)[0], path)


def _unigrams(mem, uni, records, flagged, rest, path):
    fault = _check.unigram_fault(mem, uni.offset, records, uni.entry, flagged, rest)
    if fault is not None:
        _refuse(fault[1], 1, fault[0], path)


def check_probing(mem, layout, path, records=True):
    uni = layout.unigram
    _unigrams(mem, uni, uni.buckets, True, uni.entry == 12, path)     # (12 bytes: rest costs)
    if not records:
        return
    for n, table in enumerate(layout.middle, 2):
        _values(n, _column(mem, table, 8), _column(mem, table, 12), path)
        if table.entry == 20:
            _values(n, _column(mem, table, 16), None, path, signed=False)
    # the longest order's probabilities are stored as they are (no flag in the sign)
    _values(layout.header.order, _column(mem, layout.longest, 8), None, path, signed=False)


def check_trie(mem, layout, core, path, records=True):
    if layout.quant is not None:
        _check_quant(mem, layout.quant, layout.header.order, path)
    if records:
        fault = core.check()
        if fault is not None:
            order, record, what = fault
            _refuse(what, order, record, path)
        return
    _unigrams(mem, layout.unigram, layout.header.counts[0], False, False, path)


def _check_quant(mem, quant, order, path):
    tables = [(n, p, b) for n, (p, b) in enumerate(quant.middle, 2)] + [(order, quant.longest, None)]
    for n, probs, backoffs in tables:
        what = f"quantisation table of the {_ngrams(n)}"
        fault = max(_check.quant_fault(mem, probs, 1 << quant.prob_bits, False),
                    _check.quant_fault(mem, backoffs, 1 << quant.backoff_bits, True) if backoffs is not None else 0)
        if fault == 1:
            raise FormatError(f"corrupt KenLM binary: a value no model holds in the {what}", path)
        if fault == 2:
            raise FormatError(f"corrupt KenLM binary: the {what} is out of order", path)
