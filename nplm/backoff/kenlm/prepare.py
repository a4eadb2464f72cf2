"""NGramTables prepared as KenLM reads an ARPA file: its word numbering (ARPA order
for probing, hash order for the trie, ``<unk>`` always 0), zero back-offs read as
-0.0, positive log probabilities refused, and the strings it stores."""
import numpy as np

from nplm.backoff.kenlm import _write
from nplm.errors import FormatError
from nplm.io.text import word_bytes

_UNK = ("<unk>", "<UNK>")


class Vocab:
    """The ARPA's words as KenLM numbers them.  ids maps an ARPA word index to the
    file's word id; ``<unk>`` (or ``<UNK>``) is 0."""

    def __init__(self, tables, opts, messages):
        words = list(tables.vocab)
        is_unk = np.fromiter((w in _UNK for w in words), dtype=bool, count=len(words))
        self.saw_unk = bool(is_unk.any())
        self.keep = np.flatnonzero(~is_unk)
        self.words = [words[i] for i in self.keep]
        self.hashes = _write.word_hashes(self.words)
        for special in ("<s>", "</s>"):
            if special not in words and not opts.allow_missing_markers:
                raise FormatError(f"the ARPA file is missing {special} (KenLM refuses such models; "
                                  "-s builds it anyway)", tables.source)
        if not self.saw_unk and messages is not None:
            print(f"The ARPA file is missing <unk>.  Substituting log10 probability "
                  f"{opts.unknown_logprob:g}.", file=messages)
        self.ids = np.zeros(len(words), dtype=np.uint32)

    def number_in_arpa_order(self):
        self.ids[self.keep] = np.arange(1, len(self.keep) + 1, dtype=np.uint32)
        return self.words

    def number_by_hash(self):
        order = np.argsort(self.hashes, kind="stable")
        self.keep, self.hashes = self.keep[order], self.hashes[order]
        self.words = [self.words[i] for i in order]
        self.ids[self.keep] = np.arange(1, len(order) + 1, dtype=np.uint32)
        return self.words


def strings(words):
    """The vocabulary as KenLM stores it after the search: NUL-terminated, <unk> first."""
    return b"<unk>\0" + b"".join(word_bytes(w) + b"\0" for w in words)


def check_probs(tables, only=None):
    """Refuse positive log probabilities (of the order ``only`` + 1 alone, when given), as
    KenLM does."""
    for k, p in enumerate(tables.logprob):
        if only is not None and k != only:
            continue
        bad = np.flatnonzero(p > 0)
        if len(bad):
            line = None if tables.first_line is None else tables.first_line[k] + int(bad[0])
            raise FormatError(f"positive log probability {p[bad[0]]} in a {k + 1}-gram (KenLM refuses "
                              "these)", tables.source, line)


def kenlm_backoffs(b):
    """KenLM reads a zero back-off as -0.0: 'nothing extends this n-gram' until an
    n-gram that does is seen."""
    b = np.array(b, dtype=np.float32)
    b[b == 0] = -0.0
    return b


def where(tables, order, index):
    line = None
    if tables.first_line is not None and order - 1 < len(tables.first_line):
        line = tables.first_line[order - 1] + int(index)
    return tables.source, line


