"""The n-gram tables held in a KenLM binary, for ``nplm convert model.binary out.arpa``.

Trie: every record names its word and the range of its children (the n-grams one
word longer to the left), so the tables are read off order by order.

Probing: the tables hold 64-bit hashes of the n-grams, not their words, so the
n-grams are recovered by search, as for nplm's own binaries: an n-gram w_1..w_n is a
context w_1..w_{n-1} (whose back-off KenLM marks as extending to the right) joined
with the lower n-gram w_2..w_n (whose probability's sign bit KenLM clears: it extends
to the left) on their shared middle, and is kept when its hash is in the table.

Values come back as KenLM holds them: a quantised file gives its dequantised values,
and a pruned model's "blank" entries (KenLM's stand-ins for missing suffixes) come
back as n-grams with their backed-off probability, which leaves every score as it was.
"""
import os

import numpy as np

from nplm.backoff.kenlm import reader
from nplm.backoff.kenlm._klm import probing_join
from nplm.backoff.tables import NGramTables, row_groups
from nplm.errors import FormatError

_SIGN = np.uint32(0x80000000)


def kenlm_tables(path):
    """NGramTables of the KenLM binary ``path`` (FormatError for a file without its
    vocabulary strings, or inconsistent tables)."""
    path = os.fspath(path)
    data = reader.load(path, reader.LAZY)
    try:
        words = data.vocab.words()
    except ValueError as e:
        raise FormatError(f"{e}; its ARPA cannot be recovered") from None
    if data.header.is_trie:
        ids, probs, backoffs = _trie(data, len(words), path)
    else:
        ids, probs, backoffs = _probing(data, len(words), path)
    return NGramTables(vocab=words, ids=ids, logprob=probs, backoff=backoffs, source=path)


def _clean(values):
    """float32 values with KenLM's -0.0 flags (no extension, <s>'s probability) as 0."""
    return np.ascontiguousarray(values, dtype=np.float32) + np.float32(0.0)


def _sorted(ids, probs, backoffs):
    order = np.lexsort(ids.T[::-1])
    return np.ascontiguousarray(ids[order]), probs[order], backoffs[order]


# --- trie -----------------------------------------------------------------------------

def _read_bits(mem, bits, width):
    """Unsigned integers of ``width`` (<= 57) bits at the bit offsets ``bits``."""
    out = np.empty(len(bits), dtype=np.uint64)
    mask = np.uint64((1 << width) - 1)
    for lo in range(0, len(bits), 1 << 20):
        b = bits[lo:lo + (1 << 20)]
        byte = (b >> np.uint64(3)).astype(np.int64)
        raw = mem[byte[:, None] + np.arange(8)].copy().view(np.uint64).ravel()
        out[lo:lo + len(b)] = (raw >> (b & np.uint64(7))) & mask
    return out


def _read_floats(mem, bits, sign=False):
    raw = _read_bits(mem, bits, 32 if not sign else 31).astype(np.uint32)
    if sign:
        raw |= _SIGN
    return raw.view(np.float32)


def _pointers(mem, part, bits, entries):
    """The child pointers of records 0..entries (the last ends the children)."""
    low = _read_bits(mem, bits, part.next_bits)
    if part.array is None:
        return low
    offsets = mem[part.array:part.array + 8 * part.array_count].view(np.uint64)
    high = np.searchsorted(offsets, np.arange(entries + 1, dtype=np.uint64), side="right") - 1
    return (np.maximum(high, 0).astype(np.uint64) << np.uint64(part.next_bits)) | low


def _trie_order(mem, part, quant, k):
    """(word ids, prob, backoff, child pointers) of one order's records."""
    layout_bits = np.uint64(8 * part.base) + np.arange(part.entries + 1, dtype=np.uint64) * np.uint64(part.total_bits)
    words = _read_bits(mem, layout_bits[:-1], part.word_bits).astype(np.int64)
    at = layout_bits + np.uint64(part.word_bits)
    backoff = np.zeros(part.entries, np.float32)
    if quant is not None:
        if k is None:
            table = mem[quant.longest:quant.longest + (4 << quant.prob_bits)].view(np.float32)
            prob = table[_read_bits(mem, at[:-1], quant.prob_bits).astype(np.int64)]
        else:
            ptab = mem[quant.middle[k][0]:quant.middle[k][0] + (4 << quant.prob_bits)].view(np.float32)
            btab = mem[quant.middle[k][1]:quant.middle[k][1] + (4 << quant.backoff_bits)].view(np.float32)
            backoff = btab[_read_bits(mem, at[:-1], quant.backoff_bits).astype(np.int64)]
            prob = ptab[_read_bits(mem, at[:-1] + np.uint64(quant.backoff_bits), quant.prob_bits).astype(np.int64)]
    else:
        prob = _read_floats(mem, at[:-1], sign=True)
        if k is not None:
            backoff = _read_floats(mem, at[:-1] + np.uint64(31))
    pointers = None
    if k is not None:
        pointers = _pointers(mem, part, at + np.uint64(part.value_bits), part.entries)
    return words, prob, backoff, pointers


def _parents(pointers, children, path, n):
    p = pointers.astype(np.int64)
    if p[0] != 0 or p[-1] != children or (np.diff(p) < 0).any():
        raise FormatError(f"corrupt trie: the {n}-gram pointers do not cover the {children} "
                          f"{n + 1}-grams in order", path)
    return np.repeat(np.arange(len(p) - 1), np.diff(p))


def _trie(data, vocab_size, path):
    mem, layout, counts = data.mem, data.layout, data.header.counts
    uni = mem[layout.unigram.offset:layout.unigram.end].view(np.float32).reshape(-1, 4)
    nexts = mem[layout.unigram.offset:layout.unigram.end].view(np.uint64).reshape(-1, 2)[:, 1]
    ids = [np.arange(vocab_size, dtype=np.int32)[:, None]]
    probs = [_clean(uni[:vocab_size, 0])]
    backoffs = [_clean(uni[:vocab_size, 1])]
    parent_ptr = nexts[:vocab_size + 1]
    if vocab_size < counts[0]:              # unigram records without a word: no n-grams
        parent_ptr = np.concatenate([parent_ptr, np.full(counts[0] - vocab_size, parent_ptr[-1], np.uint64)])
    parts = list(layout.middle) + [layout.longest]
    prev = ids[0]
    for k, part in enumerate(parts):
        n = k + 2
        parent = _parents(parent_ptr, part.entries, path, n - 1)
        if len(parent) and parent.max() >= len(prev):
            raise FormatError(f"corrupt trie: {n}-grams below unigrams without words", path)
        last = k == len(parts) - 1
        words, prob, backoff, pointers = _trie_order(mem, part, layout.quant, None if last else k)
        if len(words) and words.max() >= vocab_size:
            raise FormatError(f"corrupt trie: {n}-gram word id {words.max()} outside the vocabulary", path)
        gram = np.empty((part.entries, n), dtype=np.int32)
        gram[:, 0] = words
        gram[:, 1:] = prev[parent]
        # records keep their order: the next order's parent indices refer to it
        ids.append(gram)
        probs.append(_clean(prob))
        backoffs.append(_clean(backoff))
        prev, parent_ptr = gram, pointers
    out = [_sorted(i, p, b) for i, p, b in zip(ids[1:], probs[1:], backoffs[1:])]
    return ids[:1] + [o[0] for o in out], probs[:1] + [o[1] for o in out], backoffs[:1] + [o[2] for o in out]


# --- probing ----------------------------------------------------------------------------

def _check_end(data, path):
    """Refuse bytes after the model: its tables, then (unless built with -v) one
    NUL-terminated word per id; build_binary writes nothing after them."""
    end = data.layout.end
    if data.vocab.has_strings:
        end += sum(len(w.encode("utf-8", "surrogateescape")) + 1 for w in data.vocab.words())
    size = os.path.getsize(path)
    if size > end:
        raise FormatError(f"{size - end:,} bytes after the end of the model (byte {end:,}): not written by "
                          "build_binary, and not read (the model loads without them)", path)


def _live(mem, table, entry):
    keys = mem[table.offset:table.end].reshape(-1, entry)[:, :8].copy().view(np.uint64).ravel()
    return int(np.count_nonzero(keys))


def _probing(data, vocab_size, path):
    mem, layout = data.mem, data.layout
    stride = layout.unigram.entry // 4
    uni = mem[layout.unigram.offset:layout.unigram.end].view(np.float32).reshape(-1, stride)[:vocab_size]
    raw = uni[:, 0].view(np.uint32)
    level_ids = np.arange(vocab_size, dtype=np.int32)[:, None]
    level_keys = np.arange(vocab_size, dtype=np.uint64)
    extends_left = (raw & _SIGN) == 0
    extends_right = uni[:, 1].view(np.uint32) != _SIGN
    ids, probs, backoffs = [level_ids], [_clean((raw | _SIGN).view(np.float32))], [_clean(uni[:, 1])]
    tables = list(layout.middle) + [layout.longest]
    for k, table in enumerate(tables):
        n = k + 2
        suffix = np.flatnonzero(extends_left)
        context = np.flatnonzero(extends_right)
        sg, cg = row_groups(level_ids[suffix, :-1], level_ids[context, 1:])
        so, co = np.argsort(sg, kind="stable"), np.argsort(cg, kind="stable")
        suffix, sg, context, cg = suffix[so], sg[so], context[co], cg[co]
        groups = int(max(sg.max(initial=-1), cg.max(initial=-1))) + 1
        s_off = np.searchsorted(sg, np.arange(groups + 1)).astype(np.int64)
        c_off = np.searchsorted(cg, np.arange(groups + 1)).astype(np.int64)
        cap = _live(mem, table, table.entry)
        found = probing_join(data.core, n, np.ascontiguousarray(level_keys[suffix]), s_off,
                             np.ascontiguousarray(level_ids[context, 0].astype(np.uint32)), c_off, cap)
        if found is None:
            raise FormatError(f"corrupt probing tables: more {n}-grams found than the table holds", path)
        s_idx, c_idx, prob, backoff, keys = found
        if len(s_idx) != cap:
            raise FormatError(f"recovered {len(s_idx)} {n}-grams, the table holds {cap} (inconsistent "
                              f"back-off flags?)", path)
        gram = np.empty((cap, n), dtype=np.int32)
        gram[:, 0] = level_ids[context[c_idx], 0]
        gram[:, 1:] = level_ids[suffix[s_idx]]
        raw = prob.view(np.uint32)
        ids.append(gram)
        probs.append(_clean((raw | _SIGN).view(np.float32)))
        backoffs.append(_clean(backoff) if n < len(tables) + 1 else np.zeros(cap, np.float32))
        level_ids, level_keys = gram, keys
        extends_left = (raw & _SIGN) == 0
        extends_right = backoff.view(np.uint32) != _SIGN
    out = [_sorted(i, p, b) for i, p, b in zip(ids[1:], probs[1:], backoffs[1:])]
    return ids[:1] + [o[0] for o in out], probs[:1] + [o[1] for o in out], backoffs[:1] + [o[2] for o in out]


# --- a full check (nplm verify) ------------------------------------------------------------

def check_tables(path):
    """Read every table of the KenLM binary ``path`` and check what the format lets be
    checked (it has no checksums): a trie's child pointers must cover the next order
    in order and name words of the vocabulary; a probing file's vocabulary must map
    its hashes to distinct ids below its word count, and no hash table may be full.
    Returns a description; raises FormatError naming the file."""
    path = os.fspath(path)
    data = reader.load(path, reader.LAZY)
    _check_end(data, path)
    reader.check_values(data.mem, data.layout, data.core, path)
    size = data.vocab.size
    if data.header.is_trie:
        hashes = data.mem[data.layout.vocab.offset + 8:data.layout.vocab.offset + 8 * size].view(np.uint64)
        if (np.diff(hashes) <= 0).any():
            raise FormatError("corrupt vocabulary: the word hashes are not sorted", path)
        _trie(data, size, path)
        return f"KenLM {data.header.model_name}, every pointer checked"
    table = data.layout.vocab
    entries = data.mem[table.offset:table.end].reshape(-1, 12)
    keys = entries[:, :8].copy().view(np.uint64).ravel()
    ids = entries[:, 8:].copy().view(np.uint32).ravel()[keys != 0]
    if len(ids) != size - 1 or len(np.unique(ids)) != len(ids) or (ids == 0).any() or (ids >= size).any():
        raise FormatError(f"corrupt vocabulary: {len(ids)} hashed words for {size - 1} ids", path)
    for n, t in enumerate(list(data.layout.middle) + [data.layout.longest], 2):
        if _live(data.mem, t, t.entry) >= t.buckets:
            raise FormatError(f"corrupt {n}-gram hash table: no empty bucket", path)
    return f"KenLM {data.header.model_name}, vocabulary and hash tables checked"
