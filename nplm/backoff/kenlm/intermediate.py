"""KenLM's intermediate files (``lmplz --intermediate BASE``, read by KenLM's
``interpolate -m BASE``), read and written here, and the vocabulary numbering they
use (``lmplz --renumber``).

The files of a model of order N:

* ``BASE.kenlm_intermediate``: the text ``KenLM intermediate binary file``, then
  ``Counts c1 .. cN`` and ``Payload pb`` (or ``Payload q`` for
  ``--collapse_values``), each line ending in a newline;
* ``BASE.vocab``: the words in id order, each followed by a NUL byte;
* ``BASE.1`` .. ``BASE.N``: order n's n-grams as packed little-endian records of
  n uint32 word ids (oldest first), float32 log10 probability and float32 log10
  back-off (0 where the n-gram is no context, always 0 in the highest order and
  for payload q, whose probability column holds q).

The vocabulary is numbered as ``--renumber`` numbers it: ``<unk>`` is 0, the other
words follow in increasing order of KenLM's vocabulary hash (MurmurHash64A, seed
0: the order of KenLM's trie).  Order 1 lists every word in id order; each higher
order is in suffix order (by the last word, then the one before, and so on).
"""
import contextlib
import os

import numpy as np

from nplm.backoff.kenlm import _renumber
from nplm.backoff.kenlm._klm import hash_word
from nplm.backoff.tables import NGramTables
from nplm.errors import FormatError
from nplm.io.atomic import atomic_write
from nplm.io.resources import ThreadPool
from nplm.io.text import word_bytes, word_str

HEADER = b"KenLM intermediate binary file"
META = ".kenlm_intermediate"
PAYLOADS = (b"pb", b"q")


def exists(base):
    return os.path.exists(os.fspath(base) + META)


def record_dtype(n):
    """One n-gram's record in ``BASE.n``."""
    return np.dtype([("w", "<u4", (n,)), ("p", "<f4"), ("b", "<f4")])


def file_names(base, order):
    """Every file of a model of ``order`` with base ``base``, the metadata last."""
    base = os.fspath(base)
    return [base + ".vocab"] + [f"{base}.{n}" for n in range(1, order + 1)] + [base + META]


def read_meta(base):
    """(counts per order, payload b"pb" or b"q") from ``BASE.kenlm_intermediate``,
    with KenLM's messages for what it refuses."""
    meta = os.fspath(base) + META
    with open(meta, "rb") as f:
        lines = f.read().split(b"\n")
    if not lines or lines[0] != HEADER:
        raise FormatError(f'File {meta} begins with "{word_str(lines[0] if lines else b"")}" not '
                          f"{HEADER.decode()}")
    fields = lines[1].split(b" ") if len(lines) > 1 else []
    if not fields or fields[0] != b"Counts":
        raise FormatError(f'Expected Counts, got "{word_str(fields[0] if fields else b"")}" in {meta}')
    try:
        counts = [int(c) for c in fields[1:]]
    except ValueError:
        raise FormatError(f"bad counts in {meta}") from None
    payload = lines[2].split(b" ") if len(lines) > 2 else []
    if len(payload) < 2 or payload[0] != b"Payload":
        raise FormatError(f'Expected Payload, got "{word_str(payload[0] if payload else b"")}" in {meta}')
    if payload[1] not in PAYLOADS:
        raise FormatError(f"Unknown payload {word_str(payload[1])}")
    return counts, payload[1]


def read(base):
    """(words as bytes in id order, per order n the (count, n) uint32 ids, float32
    log10 probabilities and back-offs, payload) from the files of ``base``; the
    highest order's back-offs are zeros."""
    base = os.fspath(base)
    counts, payload = read_meta(base)
    with open(base + ".vocab", "rb") as f:
        words = f.read().split(b"\0")
    if words and words[-1] == b"":
        words.pop()
    if not words or words[0] != b"<unk>":
        raise FormatError("Vocabulary words are in the wrong place.")
    ids, prob, backoff = [], [], []
    for n, count in enumerate(counts, 1):
        rec = np.fromfile(f"{base}.{n}", dtype=record_dtype(n))
        if len(rec) != count:
            raise FormatError(f"{base}.{n} holds {len(rec)} {n}-grams, not the {count} of {base}{META}")
        ids.append(rec["w"])
        prob.append(np.ascontiguousarray(rec["p"]))
        backoff.append(np.ascontiguousarray(rec["b"]) if n < len(counts) else np.zeros(count, np.float32))
    if len(ids[0]) != len(words) or not np.array_equal(ids[0][:, 0], np.arange(len(words))):
        raise FormatError(f"{base}.1 does not hold one unigram per word of {base}.vocab in id order")
    return words, ids, prob, backoff, payload


def hash_order(words):
    """The old id of each new id when ``words`` (bytes or str, ``<unk>`` first) are
    numbered as ``lmplz --renumber`` numbers them: ``<unk>`` first, the others by
    increasing vocabulary hash."""
    hashes = np.fromiter((hash_word(word_bytes(w)) for w in words[1:]), dtype=np.uint64,
                         count=len(words) - 1)
    return np.concatenate([[0], 1 + np.argsort(hashes, kind="stable")]).astype(np.int64)


class Renumbering:
    """How ``lmplz --renumber`` numbers and orders the model ``tables`` (NGramTables
    in the estimate's numbering, each order in suffix order, ``<unk>`` word 0):
    ``new_id`` of each word, and per order the rows in their new suffix order
    (``perms``; order 1's: the old id of each new id).  Each order's comes from the
    order below it (``_renumber.suffix_permutation``: the k-grams that extend each
    (k-1)-gram, contiguous in the old suffix order, follow it in its new place,
    sorted among themselves), found when ``perm`` first asks for it."""

    def __init__(self, tables):
        if not tables.vocab or tables.vocab[0] != "<unk>":
            raise ValueError("renumbering needs <unk> as word 0")
        self.tables = tables
        old = hash_order(tables.vocab)
        self.new_id = np.empty(len(old), dtype=np.int32)
        self.new_id[old] = np.arange(len(old), dtype=np.int32)
        self.perms = [old]

    def perm(self, k):
        """Order k+1's rows in their new order."""
        ids = self.tables.ids
        while len(self.perms) <= k:
            j = len(self.perms)
            self.perms.append(_renumber.suffix_permutation(np.ascontiguousarray(ids[j], np.int32), self.new_id,
                                                           np.ascontiguousarray(ids[j - 1], np.int32),
                                                           self.perms[j - 1]))
        return self.perms[k]

    def vocab(self):
        return [self.tables.vocab[i] for i in self.perms[0]]


def renumbered(tables, numbering=None):
    """``tables`` (NGramTables, ``<unk>`` its word 0) with the vocabulary numbered as
    ``lmplz --renumber`` numbers it and each order in suffix order on the new ids:
    the model ``lmplz --renumber`` prints, and the order of its intermediate files
    (``numbering``: its Renumbering, if made already)."""
    numbering = numbering or Renumbering(tables)
    ids, logprob, backoff = [], [], []
    for k in range(len(tables.ids)):
        perm = numbering.perm(k)
        ids.append(_renumber.gather_rows(np.ascontiguousarray(tables.ids[k], np.int32), perm, numbering.new_id))
        logprob.append(tables.logprob[k][perm])
        backoff.append(tables.backoff[k][perm])
    return NGramTables(vocab=numbering.vocab(), ids=ids, logprob=logprob, backoff=backoff,
                       comments=list(tables.comments))


def write(base, tables, payload=b"pb", numbering=None):
    """Write NGramTables ``tables`` as the intermediate files of ``base``, each file
    atomically: in their own numbering and order (as ``renumbered`` leaves them), or
    renumbered by ``numbering`` (a Renumbering of them).  The probability column
    is ``tables.logprob`` (q for payload q, whose back-offs are written as 0).

    A second thread packs and writes each order while this one finds the next
    order's new order (the kernels and the writes release the GIL)."""
    if payload not in PAYLOADS:
        raise ValueError(f"unknown payload {payload!r}")
    order = len(tables.ids)
    names = file_names(base, order)
    with contextlib.ExitStack() as stack:
        # entered last to first, so that they are renamed into place in turn and the
        # metadata, whose presence marks a model, comes last
        files = [stack.enter_context(atomic_write(name)) for name in reversed(names)][::-1]
        vocab = tables.vocab if numbering is None else numbering.vocab()
        writer = ThreadPool(max_workers=1, thread_name_prefix="nplm-intermediate")
        try:
            written = [writer.submit(_put, files[0], b"".join([word_bytes(w) + b"\0" for w in vocab]))]
            for n in range(1, order + 1):
                perm = None if numbering is None else numbering.perm(n - 1)
                written.append(writer.submit(_write_order, files[n], tables, n, payload, perm,
                                             None if numbering is None else numbering.new_id))
            for w in written:
                w.result()
        finally:
            writer.shutdown(cancel_futures=True)       # (after a failure, no order more)
        counts = b" ".join(str(len(p)).encode() for p in tables.logprob)
        files[-1].write(HEADER + b"\nCounts " + counts + b"\nPayload " + payload + b"\n")


def _write_order(f, tables, n, payload, perm, new_id):
    k = n - 1
    ids, logprob = np.ascontiguousarray(tables.ids[k], np.int32), np.ascontiguousarray(tables.logprob[k])
    backoff = None if n == len(tables.ids) or payload == b"q" else np.ascontiguousarray(tables.backoff[k])
    _put(f, _renumber.pack_records(ids, logprob, backoff, perm, new_id))


def _put(f, data):
    """Write and sync now, on the writing thread, so that the commit of the files at
    the end has nothing left to write."""
    f.write(data)
    f.flush()
    os.fsync(f.fileno())
