"""Refusing KenLM binaries that hold what no model can.

KenLM's format has no checksums: a damaged file loads and answers, with scores that
may be NaN, positive or 10^38.  What every file build_binary writes satisfies is
checked at load instead: no probability is NaN, positive or below -10,000 (-inf is
kept: KenLM stores an ARPA's -inf as it is), no back-off is NaN or beyond +-10,000;
a trie's child pointers cover the next order in order and its word ids increase
under each parent; quantisation tables are sorted.  The loads that read the whole
file anyway (POPULATE, READ) check every record, in one pass (kenlm_check.h);
LAZY, which reads only what queries touch, checks the unigrams and the
quantisation tables, and ``nplm verify`` the rest.  The tests are kenlm_check.h's,
through _check (no numpy).
"""
from nplm.backoff.kenlm import _check
from nplm.errors import FormatError


def _refuse(what, n, index, path):
    raise FormatError(f"corrupt KenLM binary: {what} in its {_ngrams(n)} (record {int(index)}); rebuild it "
                      "from the ARPA file", path)


def _ngrams(n):
    return "unigrams" if n == 1 else f"{n}-grams"


def _values(mem, n, table, records, prob_at, flagged, backoff_at=-1, rest_at=-1, path=None):
    """Refuse the first unsound value of the first ``records`` records of ``table``
    (order n): a probability at byte prob_at (its sign forced on when ``flagged``),
    a back-off and a rest probability where their offsets are given."""
    fault = _check.value_fault(mem, table.offset, records, table.entry, prob_at, flagged, backoff_at, rest_at)
    if fault is not None:
        _refuse(fault[1], n, fault[0], path)


def check_probing(mem, layout, path, records=True):
    uni = layout.unigram        # (with rest costs, a third float in each record: 12 and 20 bytes)
    _values(mem, 1, uni, uni.buckets, 0, True, 4, 8 if uni.entry == 12 else -1, path=path)
    if not records:
        return
    for n, table in enumerate(layout.middle, 2):
        _values(mem, n, table, table.buckets, 8, True, 12, 16 if table.entry == 20 else -1, path=path)
    # the longest order's probabilities are stored as they are (no flag in the sign)
    _values(mem, layout.header.order, layout.longest, layout.longest.buckets, 8, False, path=path)


def check_trie(mem, layout, core, path, records=True):
    if layout.quant is not None:
        _check_quant(mem, layout.quant, layout.header.order, path)
    if records:
        fault = core.check()
        if fault is not None:
            order, record, what = fault
            _refuse(what, order, record, path)
        return
    _values(mem, 1, layout.unigram, layout.header.counts[0], 0, False, 4, path=path)


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
