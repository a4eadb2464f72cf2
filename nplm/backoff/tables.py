"""The in-memory form of a back-off n-gram model, shared by every producer and
consumer: the ARPA reader and writer, Kneser-Ney estimation, distillation and the
back-off query engine all speak ``NGramTables``.
"""
from dataclasses import dataclass, field
from typing import List, Optional

import numpy as np


@dataclass
class NGramTables:
    """A back-off model as plain arrays, in ARPA order.

    Attributes
    ----------
    vocab : list of str
        The unigram words in the order of the ARPA's 1-gram section. Word ids elsewhere
        index this list. It holds ``<s>`` and ``</s>`` and normally ``<unk>``.
    ids : list of numpy.ndarray
        ``ids[k]`` is an int32 array of shape (count_{k+1}, k+1): the words of each
        (k+1)-gram, oldest first. ``ids[0]`` is ``arange(len(vocab))[:, None]``.
    logprob : list of numpy.ndarray
        ``logprob[k]``, float32 (count_{k+1},): log10 p(w_n | w_1..w_{n-1}).
    backoff : list of numpy.ndarray
        ``backoff[k]``, float32 (count_{k+1},): log10 back-off weights; zeros for the
        highest order (which has no back-off column in ARPA).
    """
    vocab: List[str]
    ids: List[np.ndarray]
    logprob: List[np.ndarray]
    backoff: List[np.ndarray]
    comments: List[str] = field(default_factory=list)
    # Where the tables came from, for error messages that name a file and line:
    # source is the file path, first_line[k] the line number of the first
    # (k+1)-gram in that file (so entry i of order k+1 is on line first_line[k] + i).
    source: Optional[str] = None
    first_line: Optional[List[int]] = None

    @property
    def order(self):
        return len(self.ids)

    @property
    def counts(self):
        return [len(p) for p in self.logprob]

    def validate(self):
        """Check shapes and dtypes (cheap); raises ValueError."""
        if not (len(self.ids) == len(self.logprob) == len(self.backoff)) or not self.ids:
            raise ValueError("ids, logprob and backoff must have one entry per order")
        if len(self.vocab) != len(self.logprob[0]):
            raise ValueError("vocab and 1-gram arrays differ in length")
        for k, (i, p, b) in enumerate(zip(self.ids, self.logprob, self.backoff)):
            if i.dtype != np.int32 or i.ndim != 2 or i.shape[1] != k + 1 or i.shape[0] != len(p):
                raise ValueError(f"ids[{k}] must be int32 of shape (n, {k + 1})")
            if p.dtype != np.float32 or b.dtype != np.float32 or len(b) != len(p):
                raise ValueError(f"logprob[{k}]/backoff[{k}] must be float32 of equal length")


def first_rows(ids):
    """The indices of the rows of ``ids`` (count, n) that equal no earlier row, in order:
    the entries KenLM's probing tables find when an ARPA lists an n-gram again."""
    if len(ids) == 0:
        return np.arange(0)
    _, first = np.unique(ids, axis=0, return_index=True)
    return np.sort(first)


def row_groups(a, b):
    """Group ids such that equal rows of ``a`` and ``b`` (same width) share one."""
    both = np.concatenate([a, b])
    if both.shape[1] == 0:
        return np.zeros(len(a), np.int64), np.zeros(len(b), np.int64)
    order = np.lexsort(both.T[::-1])
    s = both[order]
    new = np.ones(len(s), dtype=bool)
    new[1:] = (s[1:] != s[:-1]).any(axis=1)
    ids = np.empty(len(s), np.int64)
    ids[order] = np.cumsum(new) - 1
    return ids[:len(a)], ids[len(a):]


def chain_log10P(s, logprob, bos, eos, top):
    """log10 P(n-gram) of every listed n-gram of orders 1..top by the chain rule over
    ``logprob``, with P(<s>) = P(</s>): one sentence start per sentence end."""
    logP = {1: logprob[1].astype(np.float64)}
    logP[1][bos] = logprob[1][eos]
    for n in range(2, top + 1):
        logP[n] = logP[n - 1][s.prefix[n]] + logprob[n]
    return logP


def expand_ranges(per, chunk):
    """Enumerate offsets 0..per[i]-1 of every owner i in chunks of about ``chunk``
    pairs, never splitting an owner: yields (owner, offset) int arrays."""
    bounds = np.concatenate([[0], np.cumsum(per)])
    c0 = 0
    while c0 < len(per):
        c1 = min(max(c0 + 1, int(np.searchsorted(bounds, bounds[c0] + chunk, "right")) - 1), len(per))
        owner = np.repeat(np.arange(c0, c1), per[c0:c1])
        if len(owner):
            yield owner, np.arange(len(owner)) - (bounds[owner] - bounds[c0])
        c0 = c1
