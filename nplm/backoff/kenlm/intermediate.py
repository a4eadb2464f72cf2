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

from nplm.backoff.kenlm._klm import hash_word
from nplm.backoff.tables import NGramTables
from nplm.errors import FormatError
from nplm.io.atomic import atomic_write
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


def suffix_order(ids, vocab_size):
    """The permutation that puts the rows of ``ids`` (count, n; distinct n-grams of
    word ids below ``vocab_size``) in suffix order.  The columns are packed into as
    few uint64 keys as their bits fit, the last word most significant."""
    n = ids.shape[1]
    bits = max(1, int(vocab_size - 1).bit_length())
    per_key = max(1, 64 // bits)
    keys = []           # most significant first
    for top in range(n - 1, -1, -per_key):
        key = np.zeros(len(ids), dtype=np.uint64)
        for col in range(top, max(top - per_key, -1), -1):
            key = (key << np.uint64(bits)) | ids[:, col].astype(np.uint64)
        keys.append(key)
    if len(keys) == 1:
        return np.argsort(keys[0])      # (distinct keys: any sort is stable)
    return np.lexsort(keys[::-1])


def renumbered(tables):
    """``tables`` (NGramTables, ``<unk>`` its word 0) with the vocabulary numbered as
    ``lmplz --renumber`` numbers it and each order in suffix order on the new ids:
    the model ``lmplz --renumber`` prints, and the order of its intermediate files."""
    if not tables.vocab or tables.vocab[0] != "<unk>":
        raise ValueError("renumbering needs <unk> as word 0")
    old = hash_order(tables.vocab)
    new = np.empty(len(old), dtype=np.int32)
    new[old] = np.arange(len(old), dtype=np.int32)
    ids = [np.arange(len(old), dtype=np.int32)[:, None]]
    logprob = [tables.logprob[0][old]]
    backoff = [tables.backoff[0][old]]
    for k in range(1, len(tables.ids)):
        w = new[tables.ids[k]]
        perm = suffix_order(w, len(old))
        ids.append(np.ascontiguousarray(w[perm]))
        logprob.append(tables.logprob[k][perm])
        backoff.append(tables.backoff[k][perm])
    return NGramTables(vocab=[tables.vocab[i] for i in old], ids=ids, logprob=logprob, backoff=backoff,
                       comments=list(tables.comments))


def write(base, tables, payload=b"pb"):
    """Write NGramTables ``tables`` (numbered and ordered as ``renumbered`` leaves
    them) as the intermediate files of ``base``, each file atomically; the
    probability column is ``tables.logprob`` (q for payload q, whose back-offs are
    written as 0)."""
    if payload not in PAYLOADS:
        raise ValueError(f"unknown payload {payload!r}")
    order = len(tables.ids)
    names = file_names(base, order)
    with contextlib.ExitStack() as stack:
        # entered last to first, so that they are renamed into place in turn and the
        # metadata, whose presence marks a model, comes last
        files = [stack.enter_context(atomic_write(name)) for name in reversed(names)][::-1]
        vocab = files[0]
        for w in tables.vocab:
            vocab.write(word_bytes(w))
            vocab.write(b"\0")
        for n in range(1, order + 1):
            k = n - 1
            rec = np.empty(len(tables.logprob[k]), dtype=record_dtype(n))
            rec["w"] = tables.ids[k]
            rec["p"] = tables.logprob[k]
            rec["b"] = 0.0 if n == order or payload == b"q" else tables.backoff[k]
            files[n].write(memoryview(rec).cast("B"))
        counts = b" ".join(str(len(p)).encode() for p in tables.logprob)
        files[-1].write(HEADER + b"\nCounts " + counts + b"\nPayload " + payload + b"\n")
