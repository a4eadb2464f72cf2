"""Refusing KenLM binaries that hold what no model can.

KenLM's format has no checksums: a damaged file loads and answers, with scores that
may be NaN, positive or 10^38.  What every file build_binary writes satisfies is
checked at load instead: no probability is NaN, positive or below -10,000 (-inf is
kept: KenLM stores an ARPA's -inf as it is), no back-off is NaN or beyond +-10,000;
a trie's child pointers cover the next order in order and its word ids increase
under each parent; quantisation tables are sorted.  The loads that read the whole
file anyway (POPULATE, READ) check every record, in one pass (kenlm_check.h);
LAZY, which reads only what queries touch, checks the unigrams and the
quantisation tables, and ``nplm verify`` the rest.
"""
import numpy as np

from nplm.errors import FormatError

LIMIT = 10000.0
_SIGN = np.uint32(0x80000000)


def _bad_prob(p):
    return np.isnan(p) | (p > 0) | ((p < -LIMIT) & ~np.isinf(p))


def _bad_backoff(b):
    return ~((b >= -LIMIT) & (b <= LIMIT))


def _refuse(what, n, index, path):
    raise FormatError(f"corrupt KenLM binary: {what} in its {_ngrams(n)} (record {int(index)}); rebuild it "
                      "from the ARPA file", path)


def _ngrams(n):
    return "unigrams" if n == 1 else f"{n}-grams"


def _column(mem, table, at):
    """The float32 at byte ``at`` of each entry of ``table`` (a view, no copy)."""
    rows = mem[table.offset:table.offset + table.buckets * table.entry].reshape(table.buckets, table.entry)
    return rows[:, at:at + 4].view(np.float32)[:, 0]


def _values(n, prob, backoff, path, signed=True):
    """Refuse the first unsound value (prob with its sign forced on when ``signed``)."""
    if signed:
        prob = (prob.view(np.uint32) | _SIGN).view(np.float32)
    for what, bad in (("a probability no model holds", _bad_prob(prob)),
                      ("a back-off no model holds", _bad_backoff(backoff) if backoff is not None else None)):
        if bad is not None and bad.any():
            _refuse(what, n, np.flatnonzero(bad)[0], path)


def check_probing(mem, layout, path, records=True):
    uni = layout.unigram
    stride = uni.entry // 4
    floats = mem[uni.offset:uni.end].view(np.float32).reshape(-1, stride)
    _values(1, floats[:, 0], floats[:, 1], path)
    if stride == 3:
        _values(1, floats[:, 2], None, path, signed=False)      # rest costs
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
    uni = layout.unigram
    floats = mem[uni.offset:uni.end].view(np.float32).reshape(-1, 4)[:layout.header.counts[0]]
    _values(1, floats[:, 0], floats[:, 1], path, signed=False)


def _check_quant(mem, quant, order, path):
    size = 1 << quant.prob_bits
    tables = [(n, mem[p:p + 4 * size].view(np.float32), mem[b:b + (4 << quant.backoff_bits)].view(np.float32))
              for n, (p, b) in enumerate(quant.middle, 2)]
    tables.append((order, mem[quant.longest:quant.longest + 4 * size].view(np.float32), None))
    for n, probs, backoffs in tables:
        what = f"quantisation table of the {_ngrams(n)}"
        # (KenLM fills the bins a small model leaves unused with -inf)
        if _bad_prob(probs).any() or (backoffs is not None and (_bad_backoff(backoffs) & ~np.isneginf(backoffs)).any()):
            raise FormatError(f"corrupt KenLM binary: a value no model holds in the {what}", path)
        # the bins are sorted (back-offs after the two bins of -0.0 and +0.0)
        if (np.diff(probs) < 0).any() or (backoffs is not None and (np.diff(backoffs[2:]) < 0).any()):
            raise FormatError(f"corrupt KenLM binary: the {what} is out of order", path)
