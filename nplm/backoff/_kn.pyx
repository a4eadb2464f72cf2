"""Counting and adjusting kernels of modified Kneser-Ney estimation; the stages in
``nplm/backoff/estimate/`` run the pipeline.

1. ``Counter``: tokenise text bytes (lmplz's delimiters: space, tab, CR, NUL; or
   KenLM's queries': ASCII white space; one sentence per line), give words ids in
   first-appearance order after ``<unk>``=0, ``<s>``=1, ``</s>``=2 (lmplz's numbering,
   hence its ARPA unigram order) or those of a given, closed vocabulary, and count
   the highest-order n-grams, left-padded with ``<s>``, in an open-addressing table.
2. ``Counter.suffix_sorted``: LSD radix sort of those n-grams in suffix order (last
   word most significant), the order lmplz writes every section of its ARPA in.
3. ``adjust``: one pass over the sorted n-grams.  Every lower-order n-gram is a
   suffix of some padded highest-order n-gram, and in suffix order the n-grams that
   share a k-word suffix are contiguous, so each order's n-grams, their adjusted
   (continuation) counts, suffix links, pruning marks and counts-of-counts all fall
   out of the common-suffix length between neighbours.
4. ``link_contexts``: the context (all but the last word) of each n-gram is found
   by walking the suffix trie; ``_kn_probs`` then computes gammas, interpolated
   probabilities and back-offs, order by order, in float32 in lmplz's order of
   operations so that the values are bit-identical to lmplz's.

Kernels return status codes; the Python layer turns them into exceptions.
"""
from libc.stdint cimport uint8_t, uint32_t, int32_t, uint64_t, int64_t
from libc.stdlib cimport malloc, calloc, realloc, free
from libc.string cimport memcpy, memcmp, memset, memchr
from nplm._hashing cimport fmix64
from nplm._words cimport is_word_delimiter

from cython.parallel cimport prange

import numpy as np

cdef enum:
    UNK = 0
    BOS = 1
    EOS = 2

# Status codes of the kernels (negative: failure; Python raises).
cdef enum:
    KN_OK = 0
    KN_NOMEM = -1
    KN_SPECIAL = -2      # <s> or </s> in the text and symbols are not skipped
    KN_TOO_MANY = -3     # more distinct n-grams or words than 32-bit indices hold
    KN_INTERNAL = -4     # a context that should exist was not found (a bug)

cdef uint64_t MAX_ENTRIES = 0xFFFFFFF0u

cdef enum:
    PREFETCH = 16          # n-gram windows hashed ahead of the one being counted
    PIECE = 1 << 20        # bytes of text tokenised at a time

cdef extern from *:
    void __builtin_prefetch(const void *addr) nogil

cdef extern from "heap.h":
    int nplm_trim() nogil


def release_free_memory():
    """Hand freed heap pages back to the OS (glibc's malloc_trim; a no-op elsewhere).

    glibc raises its mmap threshold after a large block is freed, so the next
    arrays of a few MB come from the heap, and between stages the heap holds
    freed pages that count towards the peak of the next stage."""
    with nogil:
        nplm_trim()


cdef inline uint64_t _hash_bytes(const uint8_t *p, size_t n) noexcept nogil:
    """FNV-1a over the bytes, then mixed (FNV alone clusters short words)."""
    cdef uint64_t h = 0xcbf29ce484222325ULL
    cdef size_t i
    for i in range(n):
        h = (h ^ p[i]) * 0x100000001b3ULL
    return fmix64(h ^ n)


cdef inline uint64_t _hash_words(const uint32_t *w, int n) noexcept nogil:
    cdef uint64_t h = 0x9E3779B97F4A7C15ULL
    cdef int i
    for i in range(n):
        h = (h ^ w[i]) * 0xbf58476d1ce4e5b9ULL
        h ^= h >> 31
    return fmix64(h)


cdef inline bint _splits(uint8_t c, bint kenlm_spaces) noexcept nogil:
    return is_word_delimiter(c) if kenlm_spaces else _is_delim(c)


cdef inline bint _is_delim(uint8_t c) noexcept nogil:
    # lmplz's word delimiters ("\0\t\n\r "); '\n' also ends the sentence.
    return c == 32 or c == 10 or c == 9 or c == 13 or c == 0


cdef class Counter:
    """Vocabulary and highest-order n-gram counts, fed text in whole lines.

    Memory: the distinct words and the distinct n-grams (order*4 + 8 bytes each, plus
    a slot table of 8 bytes per slot at load <= 1/2), never the text itself.
    """
    cdef readonly int order
    cdef readonly bint skip_symbols
    cdef readonly bint kenlm_spaces     # split as KenLM's queries (\t \n \v \f \r space), not lmplz
    cdef readonly bint closed           # the vocabulary is fixed: other words count as <unk>
    cdef readonly uint64_t tokens, sentences, unk_tokens, skipped_symbols
    cdef readonly int64_t err_offset   # byte offset of the offending token (KN_SPECIAL)
    cdef uint32_t *carry                # an open line's last order-1 ids (feed(open_end=True))
    cdef readonly bint carrying
    # vocabulary: words' bytes in one arena; offsets[id]..offsets[id+1]
    cdef uint8_t *arena
    cdef size_t arena_len, arena_cap
    cdef uint64_t *voffsets
    cdef uint64_t *vhashes
    cdef size_t vsize, vcap
    cdef uint32_t *vslots
    cdef size_t vmask
    # n-gram table: entries (order words, then the count as two uint32) in
    # insertion order, and open-addressing slots pointing at them
    cdef uint32_t *ent
    cdef size_t nsize, ncap
    cdef uint64_t *nslots           # (hash high 32 bits << 32) | (entry + 1); 0 = empty
    cdef size_t nmask

    def __cinit__(self, int order, bint skip_symbols=False, bint kenlm_spaces=False):
        if order < 1:
            raise ValueError(f"order must be at least 1, got {order}")
        self.order = order
        self.carry = <uint32_t *> malloc(order * sizeof(uint32_t))
        if self.carry == NULL:
            raise MemoryError()
        self.carrying = False
        self.skip_symbols = skip_symbols
        self.kenlm_spaces = kenlm_spaces
        self.closed = False
        self.arena_cap = 1 << 16
        self.arena = <uint8_t *> malloc(self.arena_cap)
        self.vcap = 1 << 12
        self.voffsets = <uint64_t *> malloc((self.vcap + 1) * sizeof(uint64_t))
        self.vhashes = <uint64_t *> malloc(self.vcap * sizeof(uint64_t))
        self.vmask = (1 << 13) - 1
        self.vslots = <uint32_t *> calloc(self.vmask + 1, sizeof(uint32_t))
        self.ncap = 1 << 16
        self.ent = <uint32_t *> malloc(self.ncap * (order + 2) * sizeof(uint32_t))
        self.nmask = (1 << 17) - 1
        self.nslots = <uint64_t *> calloc(self.nmask + 1, sizeof(uint64_t))
        if (self.arena == NULL or self.voffsets == NULL or self.vhashes == NULL or self.vslots == NULL
                or self.ent == NULL or self.nslots == NULL):
            raise MemoryError("cannot allocate the n-gram counter")
        self.voffsets[0] = 0
        cdef const char *specials[3]
        specials[0] = b"<unk>"
        specials[1] = b"<s>"
        specials[2] = b"</s>"
        cdef int i
        for i in range(3):
            self._word_id(<const uint8_t *> specials[i], len(specials[i]))

    def __dealloc__(self):
        free(self.arena); free(self.voffsets); free(self.vhashes); free(self.vslots); free(self.carry)
        self._free_table()

    cdef void _free_table(self) noexcept nogil:
        free(self.ent); free(self.nslots)
        self.ent = NULL; self.nslots = NULL

    # ---------------------------------------------------------------- vocabulary
    cdef int64_t _probe(self, const uint8_t *p, size_t n, uint64_t h, size_t *slot) noexcept nogil:
        """Id of the word p[:n] (hash h), or -1 with *slot at the empty slot that ends
        its probe sequence (where it would go)."""
        cdef size_t i = h & self.vmask
        cdef uint32_t s
        cdef uint64_t off
        while True:
            s = self.vslots[i]
            if s == 0:
                slot[0] = i
                return -1
            s -= 1
            if self.vhashes[s] == h:
                off = self.voffsets[s]
                if self.voffsets[s + 1] - off == n and memcmp(self.arena + off, p, n) == 0:
                    return s
            i = (i + 1) & self.vmask

    cdef int64_t _word_id(self, const uint8_t *p, size_t n) noexcept nogil:
        """Id of the word p[:n], inserting it; KN_NOMEM or KN_TOO_MANY on failure."""
        cdef uint64_t h = _hash_bytes(p, n)
        cdef size_t i
        cdef int64_t found = self._probe(p, n, h, &i)
        cdef uint32_t s
        if found >= 0:
            return found
        # insert
        if self.vsize >= MAX_ENTRIES:
            return KN_TOO_MANY
        if self.vsize == self.vcap:
            if self._grow_vocab_arrays() < 0:
                return KN_NOMEM
        if self.arena_len + n > self.arena_cap:
            if self._grow_arena(n) < 0:
                return KN_NOMEM
        s = <uint32_t> self.vsize
        memcpy(self.arena + self.arena_len, p, n)
        self.arena_len += n
        self.vhashes[s] = h
        self.voffsets[s + 1] = self.arena_len
        self.vsize += 1
        if 2 * self.vsize > self.vmask + 1:
            if self._rehash_vocab() < 0:
                return KN_NOMEM
        else:
            self.vslots[i] = s + 1
        return s

    cdef int64_t _find_word(self, const uint8_t *p, size_t n) noexcept nogil:
        cdef size_t i
        return self._probe(p, n, _hash_bytes(p, n), &i)

    def close_vocabulary(self, words):
        """Give ``words`` (UTF-8 bytes, none of them a special) the ids 3, 4, ... in
        this order and fix the vocabulary: from now on a word not in it counts as
        ``<unk>``.  Only before anything is fed."""
        if self.closed or self.vsize != 3 or self.tokens:
            raise RuntimeError("close_vocabulary: only once, before counting")
        cdef bytes w
        cdef int64_t got
        for w in words:
            if self._find_word(<const uint8_t *> w, len(w)) >= 0:
                raise ValueError(f"close_vocabulary: {w!r} is a special or listed twice")
            got = self._word_id(<const uint8_t *> w, len(w))
            if got < 0:
                raise MemoryError("cannot allocate the vocabulary")
        self.closed = True

    cdef int _grow_vocab_arrays(self) noexcept nogil:
        cdef size_t cap = self.vcap * 2
        cdef uint64_t *o = <uint64_t *> realloc(self.voffsets, (cap + 1) * sizeof(uint64_t))
        if o == NULL:
            return -1
        self.voffsets = o
        o = <uint64_t *> realloc(self.vhashes, cap * sizeof(uint64_t))
        if o == NULL:
            return -1
        self.vhashes = o
        self.vcap = cap
        return 0

    cdef int _grow_arena(self, size_t need) noexcept nogil:
        cdef size_t cap = self.arena_cap * 2
        while cap < self.arena_len + need:
            cap *= 2
        cdef uint8_t *a = <uint8_t *> realloc(self.arena, cap)
        if a == NULL:
            return -1
        self.arena = a
        self.arena_cap = cap
        return 0

    cdef int _rehash_vocab(self) noexcept nogil:
        cdef size_t mask = (self.vmask + 1) * 2 - 1
        cdef uint32_t *slots = <uint32_t *> calloc(mask + 1, sizeof(uint32_t))
        if slots == NULL:
            return -1
        cdef size_t s, i
        for s in range(self.vsize):
            i = self.vhashes[s] & mask
            while slots[i] != 0:
                i = (i + 1) & mask
            slots[i] = <uint32_t> (s + 1)
        free(self.vslots)
        self.vslots = slots
        self.vmask = mask
        return 0

    # ---------------------------------------------------------------- n-grams
    # Entries live in insertion order, each ``order`` words then the count (two
    # uint32), so that the key check and the increment touch one cache line.

    cdef inline uint32_t *_entry(self, size_t e) noexcept nogil:
        return self.ent + e * (self.order + 2)

    cdef int _insert(self, const uint32_t *gram, uint64_t h) noexcept nogil:
        """Add one occurrence of gram (hash h); 0, KN_NOMEM or KN_TOO_MANY."""
        cdef int n = self.order
        cdef uint64_t tag = h & 0xFFFFFFFF00000000ULL
        cdef size_t i = h & self.nmask
        cdef uint64_t s, c
        cdef uint32_t *e
        cdef size_t idx
        while True:
            s = self.nslots[i]
            if s == 0:
                break
            if (s & 0xFFFFFFFF00000000ULL) == tag:
                e = self._entry(<size_t> (s & 0xFFFFFFFFULL) - 1)
                if memcmp(e, gram, n * sizeof(uint32_t)) == 0:
                    memcpy(&c, e + n, sizeof(uint64_t))
                    c += 1
                    memcpy(e + n, &c, sizeof(uint64_t))
                    return 0
            i = (i + 1) & self.nmask
        if self.nsize >= MAX_ENTRIES:
            return KN_TOO_MANY
        if self.nsize == self.ncap:
            if self._grow_entries() < 0:
                return KN_NOMEM
        idx = self.nsize
        e = self._entry(idx)
        memcpy(e, gram, n * sizeof(uint32_t))
        c = 1
        memcpy(e + n, &c, sizeof(uint64_t))
        self.nsize += 1
        self.nslots[i] = tag | <uint64_t> (idx + 1)
        if 2 * self.nsize > self.nmask + 1:
            return KN_NOMEM if self._rehash_table(self.nmask + 1) < 0 else KN_OK
        return KN_OK

    cdef int _grow_entries(self) noexcept nogil:
        cdef size_t cap = self.ncap * 2
        cdef uint32_t *k = <uint32_t *> realloc(self.ent, cap * (self.order + 2) * sizeof(uint32_t))
        if k == NULL:
            return -1
        self.ent = k
        self.ncap = cap
        return 0

    cdef int _rehash_table(self, size_t grow_to) noexcept nogil:
        """Rebuild the slots at twice ``grow_to`` slots (or more)."""
        cdef size_t size = self.nmask + 1
        while size < 2 * grow_to:
            size *= 2
        cdef size_t mask = size - 1
        cdef uint64_t *slots = <uint64_t *> calloc(size, sizeof(uint64_t))
        if slots == NULL:
            return -1
        cdef size_t e, i
        cdef uint64_t h
        for e in range(self.nsize):
            h = _hash_words(self._entry(e), self.order)
            i = h & mask
            while slots[i] != 0:
                i = (i + 1) & mask
            slots[i] = (h & 0xFFFFFFFF00000000ULL) | <uint64_t> (e + 1)
        free(self.nslots)
        self.nslots = slots
        self.nmask = mask
        return 0

    cdef int64_t _tokenize(self, const uint8_t *data, size_t n, uint32_t *out, bint open_end) noexcept nogil:
        """Write the sentences of data[:n] to ``out`` as ids, each preceded by
        order-1 <s> and followed by </s>: every n-gram is then a contiguous window
        ending at a non-<s> id.  A line left open by the previous call starts with its
        kept ids instead of <s>; with ``open_end`` the last line gets no </s> and
        its last order-1 ids are kept.  Returns the length, or a negative status."""
        cdef size_t i = 0, start
        cdef int64_t m = 0
        cdef int64_t sentence_start
        cdef int _j
        cdef int64_t w
        cdef bint words_on_line
        cdef bint ks = self.kenlm_spaces
        while i < n:
            sentence_start = m
            if self.carrying:
                for _j in range(self.order - 1):
                    out[m] = self.carry[_j]
                    m += 1
                self.carrying = False
                words_on_line = True
            else:
                for _j in range(self.order - 1):
                    out[m] = BOS
                    m += 1
                words_on_line = False
            while True:
                while i < n and data[i] != 10 and _splits(data[i], ks):
                    i += 1
                if i == n or data[i] == 10:
                    break
                start = i
                while i < n and not _splits(data[i], ks):
                    i += 1
                if self.closed:
                    w = self._find_word(data + start, i - start)
                    if w < 0:
                        w = UNK
                else:
                    w = self._word_id(data + start, i - start)
                    if w < 0:
                        return w
                if w <= EOS:
                    if self.skip_symbols:
                        self.skipped_symbols += 1
                        continue
                    if w != UNK:
                        self.err_offset = <int64_t> start
                        return KN_SPECIAL
                    self.unk_tokens += 1
                words_on_line = True
                out[m] = <uint32_t> w
                m += 1
                self.tokens += 1
            # A line ends at '\n'; a last line without one is a sentence only if it
            # holds words (lmplz drops that sentence's </s>; we keep it).
            if i < n:
                i += 1
            elif open_end:
                for _j in range(self.order - 1):
                    self.carry[_j] = out[m - self.order + 1 + _j]
                self.carrying = True
                break
            elif not words_on_line:
                m = sentence_start
                break
            out[m] = EOS
            m += 1
            self.sentences += 1
        return m

    cdef int _count_stream(self, const uint32_t *ids, int64_t m) noexcept nogil:
        """Count every n-gram window of the padded id stream.  The slot of the
        window PREFETCH positions ahead is fetched early: the table is far larger
        than the caches, and waiting for each slot in turn dominated counting."""
        cdef int n = self.order
        cdef int64_t j, ahead
        cdef uint64_t ring[PREFETCH]
        cdef uint64_t h
        cdef int rc
        for j in range(n - 1, min(m, n - 1 + PREFETCH)):
            ring[j % PREFETCH] = _hash_words(ids + j - n + 1, n)
        for j in range(n - 1, m):
            ahead = j + PREFETCH
            h = ring[j % PREFETCH]
            if ahead < m:
                ring[ahead % PREFETCH] = _hash_words(ids + ahead - n + 1, n)
                __builtin_prefetch(&self.nslots[ring[ahead % PREFETCH] & self.nmask])
            if ids[j] == BOS:
                continue
            rc = self._insert(ids + j - n + 1, h)
            if rc < 0:
                return rc
        return KN_OK

    def feed(self, const uint8_t[::1] data, bint open_end=False):  # IN: whole lines of UTF-8 text
        """Count the sentences in ``data`` (lines; a final line may lack its newline).
        With ``open_end`` the final line goes on in the next call (``data`` then ends
        at a word's end): its n-grams so far are counted and its last order-1 ids kept,
        so that a line of any length is counted in pieces, within the memory budget.
        Returns a status code: 0, or KN_NOMEM/KN_SPECIAL (see ``err_offset``, an
        offset into ``data``)."""
        cdef size_t n = data.shape[0], pos = 0, end, lines, cap = 0, need
        cdef const uint8_t *base
        cdef const uint8_t *q
        cdef int64_t m
        cdef int rc = KN_OK
        cdef uint32_t *ids = NULL
        cdef uint32_t *grown
        if n == 0:
            return KN_OK
        if self.ent == NULL:
            return KN_INTERNAL
        base = &data[0]
        with nogil:
            # Pieces of about PIECE bytes, cut after a newline, keep the id
            # buffer small whatever the chunk size.
            while pos < n and rc == KN_OK:
                end = pos + PIECE
                if end >= n:
                    end = n
                else:
                    q = <const uint8_t *> memchr(base + end - 1, 10, n - end + 1)
                    end = n if q == NULL else <size_t> (q - base) + 1
                lines = 1
                q = base + pos
                while True:
                    q = <const uint8_t *> memchr(q, 10, <size_t> (base + end - q))
                    if q == NULL:
                        break
                    lines += 1
                    q += 1
                # ids: order-1 <s> and one </s> per line, at most one word per 2 bytes
                need = lines * <size_t> self.order + (end - pos + 1) // 2 + 1
                if need > cap:
                    grown = <uint32_t *> realloc(ids, need * sizeof(uint32_t))
                    if grown == NULL:
                        rc = KN_NOMEM
                        break
                    ids = grown
                    cap = need
                self.err_offset = -1
                m = self._tokenize(base + pos, end - pos, ids, open_end and end == n)
                if m < 0:
                    rc = <int> m
                    if self.err_offset >= 0:
                        self.err_offset += <int64_t> pos
                    break
                rc = self._count_stream(ids, m)
                pos = end
        free(ids)
        return rc

    def reset_table(self):
        """Start a new, empty n-gram table (after ``suffix_sorted`` handed the last
        one over); the vocabulary and the token counts are kept."""
        if self.ent != NULL:
            raise RuntimeError("reset_table: the n-gram table is still in use")
        self.ncap = 1 << 16
        self.nmask = (1 << 17) - 1
        self.nsize = 0
        self.ent = <uint32_t *> malloc(self.ncap * (self.order + 2) * sizeof(uint32_t))
        self.nslots = <uint64_t *> calloc(self.nmask + 1, sizeof(uint64_t))
        if self.ent == NULL or self.nslots == NULL:
            self._free_table()
            raise MemoryError("cannot allocate the n-gram counter")

    @property
    def table_bytes(self):
        """Bytes the n-gram table holds (entries and slots)."""
        return self.ncap * (self.order + 2) * 4 + (self.nmask + 1) * 8

    @property
    def vocab_bytes(self):
        """Bytes the vocabulary holds (words, offsets, hashes and slots)."""
        return self.arena_cap + self.vcap * 16 + (self.vmask + 1) * 4

    @property
    def vocab_size(self):
        return self.vsize

    @property
    def distinct_ngrams(self):
        return self.nsize

    def words(self):
        """The vocabulary as a list of str, by id (bytes that are not UTF-8 as surrogates)."""
        cdef size_t s
        out = []
        for s in range(self.vsize):
            out.append(self.arena[self.voffsets[s]:self.voffsets[s + 1]].decode("utf-8", "surrogateescape"))
        return out

    def find(self, bytes word):
        """Id of ``word`` (UTF-8 bytes), or -1 when it was never seen."""
        return self._find_word(<const uint8_t *> word, len(word))

    def suffix_sorted(self):
        """Hand over the counted n-grams, sorted in suffix order, as numpy arrays
        ``(keys (D, order) uint32, counts (D,) uint64)``; frees the table.

        LSD radix sort: word 0 first, the last word last (most significant), each
        word in digits of at most 11 bits so the bucket heads stay in cache."""
        cdef size_t d = self.nsize, n = self.order, stride = n + 2
        keys_a = np.empty((d, n), dtype=np.uint32)
        counts_a = np.empty(d, dtype=np.uint64)
        free(self.nslots)
        self.nslots = NULL
        if d == 0:
            self._free_table()
            return keys_a, counts_a
        cdef uint32_t[:, ::1] kout = keys_a
        cdef uint64_t[::1] cout = counts_a
        cdef int bits_total = 1, per, bits, p, passes, col, shift
        while (<size_t> 1 << bits_total) < self.vsize:
            bits_total += 1
        per = (bits_total + 10) // 11
        bits = (bits_total + per - 1) // per
        passes = <int> n * per
        cdef size_t *hist = <size_t *> malloc(((<size_t> 1 << bits) + 1) * sizeof(size_t))
        cdef uint32_t *tmp = <uint32_t *> malloc(d * stride * sizeof(uint32_t))
        cdef uint32_t *src = self.ent
        cdef uint32_t *dst
        cdef bint moved
        if hist == NULL or tmp == NULL:
            free(hist); free(tmp)
            raise MemoryError(f"radix sort: {d * stride * 4} bytes")
        with nogil:
            dst = tmp
            for p in range(passes):
                col = p // per
                shift = (p % per) * bits
                if p == passes - 1:
                    _radix_pass(src, stride, NULL, &kout[0, 0], &cout[0], d, n, col, shift, bits, hist)
                    break
                moved = _radix_pass(src, stride, dst, NULL, NULL, d, n, col, shift, bits, hist)
                if not moved:
                    continue      # every row has the same digit: already in order
                # ping-pong; the table's own entries become the second buffer
                src, dst = dst, src
            self._free_table()
            free(tmp)
        free(hist)
        return keys_a, counts_a


cdef bint _radix_pass(const uint32_t *src, size_t stride, uint32_t *dst, uint32_t *kout, uint64_t *cout,
                      size_t d, size_t n, int col, int shift, int bits, size_t *hist) noexcept nogil:
    """Stable counting sort of rows (n words + count as 2 uint32) by the digit
    (word[col] >> shift) & (2^bits - 1), into dst rows, or into split key/count
    outputs when dst is NULL.  Returns False (and moves nothing, unless splitting)
    when every row has the same digit."""
    cdef size_t i, pos, total = 0, c, buckets = <size_t> 1 << bits
    cdef uint32_t digit, mask = <uint32_t> (buckets - 1)
    cdef const uint32_t *row
    memset(hist, 0, (buckets + 1) * sizeof(size_t))
    for i in range(d):
        hist[(src[i * stride + col] >> shift) & mask] += 1
    if dst != NULL:
        for i in range(buckets):
            if hist[i] == d:
                return False
    for i in range(buckets):
        c = hist[i]
        hist[i] = total
        total += c
    for i in range(d):
        row = src + i * stride
        digit = (row[col] >> shift) & mask
        pos = hist[digit]
        hist[digit] = pos + 1
        if dst != NULL:
            memcpy(dst + pos * stride, row, stride * sizeof(uint32_t))
        else:
            memcpy(kout + pos * n, row, n * sizeof(uint32_t))
            memcpy(cout + pos, row + n, sizeof(uint64_t))
    return True


cdef inline uint32_t _common_suffix(const uint32_t *a, const uint32_t *b, int n) noexcept nogil:
    cdef int j = n - 1
    cdef uint32_t m = 0
    while j >= 0 and a[j] == b[j]:
        m += 1
        j -= 1
    return m


def adjust_sizes(const uint32_t[:, ::1] keys):  # IN: suffix-sorted highest-order n-grams
    """How many n-grams of each order the sorted n-grams yield: a list whose entry
    k-1 is the count for order k >= 2 (entry 0 is 0: unigrams are indexed by id)."""
    cdef Py_ssize_t d = keys.shape[0], i
    cdef int n = keys.shape[1], k
    cdef uint32_t lcs
    sizes = np.zeros(n + 1, dtype=np.int64)
    cdef int64_t[::1] sz = sizes
    with nogil:
        for i in range(d):
            lcs = _common_suffix(&keys[i, 0], &keys[i - 1, 0], n) if i > 0 else 0
            # A k-word suffix with <s> after its first word is padding, not an n-gram.
            # <s> only ever forms a prefix, so testing the suffix's word 1 suffices.
            for k in range(2, n):
                if lcs < <uint32_t> k and keys[i, n - k + 1] != BOS:
                    sz[k] += 1
            if n >= 2 and keys[i, 1] != BOS:
                sz[n] += 1
    return [int(x) for x in sizes[1:]]


cdef struct OrderArrays:
    int32_t *words     # (size, k) the n-grams, oldest word first
    uint64_t *adj      # adjusted counts
    int32_t *parent    # index of the (k-1)-word suffix in order k-1
    uint8_t *mark      # 1 = pruned (zeroed by the caller; only set here)
    int64_t size


cdef struct Pruning:
    const uint64_t *thresholds   # order k prunes raw count <= thresholds[k-1]
    const uint8_t *word          # 1 = word outside --limit_vocab_file
    bint limit_vocab


cdef inline void _close(OrderArrays *o, int k, int64_t g, uint64_t raw, Pruning *pr) noexcept nogil:
    """An n-gram of order k is complete: mark it if pruned (raw count at most the
    threshold, or holding a word outside the allowed vocabulary)."""
    cdef int j
    if raw <= pr.thresholds[k - 1]:
        o[k].mark[g] = 1
    elif pr.limit_vocab:
        for j in range(k):
            if pr.word[o[k].words[g * k + j]]:
                o[k].mark[g] = 1
                return


cdef void _adjust_pass(uint32_t[:, ::1] keys, uint64_t[::1] counts, OrderArrays *o,
                       int64_t *cur, uint8_t *valid, uint64_t *last_raw, Pruning *pr) noexcept nogil:
    cdef Py_ssize_t d = keys.shape[0], i
    cdef int n = keys.shape[1], k, j
    cdef uint32_t lcs, w
    cdef uint64_t c
    cdef int64_t g
    cdef uint32_t *row
    cdef uint64_t run[64]       # raw count of the open n-gram of each order
    for k in range(n + 1):
        cur[k] = -1
        valid[k] = 0
        run[k] = 0
    for i in range(d):
        row = &keys[i, 0]
        c = counts[i]
        lcs = _common_suffix(row, &keys[i - 1, 0], n) if i > 0 else 0
        w = row[n - 1]
        if lcs < 1:
            run[1] = 0
        run[1] += c
        if n == 1:
            o[1].adj[w] += c
        elif lcs < 2:
            o[1].adj[w] += 1
        for k in range(2, n):
            if lcs < <uint32_t> k:
                if valid[k]:
                    _close(o, k, cur[k], run[k], pr)
                run[k] = 0
                valid[k] = row[n - k + 1] != BOS
                if valid[k]:
                    cur[k] += 1
                    g = cur[k]
                    for j in range(k):
                        o[k].words[g * k + j] = <int32_t> row[n - k + j]
                    o[k].parent[g] = <int32_t> (row[n - 1] if k == 2 else cur[k - 1])
            if valid[k]:
                g = cur[k]
                run[k] += c
                if row[n - k] == BOS:
                    # n-grams starting with <s> have no left context: raw count
                    o[k].adj[g] += c
                elif lcs < <uint32_t> (k + 1):
                    # a new (k+1)-word suffix: one more distinct left extension
                    o[k].adj[g] += 1
        if n >= 2 and row[1] != BOS:
            # The highest order is compacted in place: row g <= i was read already.
            cur[n] += 1
            g = cur[n]
            o[n].parent[g] = <int32_t> (row[n - 1] if n == 2 else cur[n - 1])
            if g != i:
                memcpy(&keys[g, 0], row, n * sizeof(uint32_t))
                counts[g] = c
            _close(o, n, g, c, pr)
    for k in range(2, n):
        if valid[k]:
            _close(o, k, cur[k], run[k], pr)
    for k in range(1, n):
        last_raw[k] = run[k]


cdef inline void _add_stat(uint64_t *st, uint64_t count, bint pruned) noexcept nogil:
    if count < 5:
        st[count] += 1
    st[5] += 1
    if not pruned:
        st[6] += 1


cdef void _unigram_stats(int n, uint32_t last_word, uint64_t last_raw1, OrderArrays *o1,
                         Pruning *pr, uint64_t[:, ::1] stats) noexcept nogil:
    # Unigrams: never pruned by count (lmplz keeps <unk>, <s>, </s>; unigram
    # thresholds are refused in Python), only by --limit_vocab_file.
    cdef int64_t g
    cdef uint64_t a
    for g in range(o1.size):
        if pr.limit_vocab and pr.word[g]:
            o1.mark[g] = 1
        a = o1.adj[g]
        if n > 1 and <uint32_t> g == last_word:
            a = last_raw1         # lmplz's flush of the last unigram uses its raw count
        _add_stat(&stats[0, 0], a, o1.mark[g])


cdef void _order_stats(int n, OrderArrays *o, int64_t *cur, uint8_t *valid, uint64_t *last_raw,
                       bint last_part, uint64_t[:, ::1] stats) noexcept nogil:
    cdef int k
    cdef int64_t g
    cdef uint64_t a
    for k in range(2, n + 1):
        for g in range(cur[k] + 1):
            a = o[k].adj[g]
            if last_part and k < n and g == cur[k] and valid[k]:
                a = last_raw[k]   # same lmplz quirk for the last n-gram of each order
            _add_stat(&stats[k - 1, 0], a, o[k].mark[g])


def unigram_stats(const uint64_t[::1] adj,      # IN (V,) adjusted counts of every word
                  uint8_t[::1] mark,            # IN/OUT (V,) zeroed; 1 = pruned
                  const uint8_t[::1] prune_word, bint limit_vocab,
                  int order, uint32_t last_word, uint64_t last_raw,
                  uint64_t[:, ::1] stats):      # OUT row 0 of the (N, 7) statistics
    """The unigram rows of ``adjust``'s statistics, for a caller that ran ``adjust``
    on suffix-ordered parts of the n-grams with ``unigrams=False``: ``last_word`` is
    the last word of the last part and ``last_raw`` that part's ``adjust`` result."""
    cdef OrderArrays o1
    cdef Pruning pr
    if adj.shape[0] != mark.shape[0] or adj.shape[0] != prune_word.shape[0] or adj.shape[0] == 0:
        raise ValueError("unigram_stats: arrays must have one entry per word")
    o1.size = adj.shape[0]
    o1.adj = <uint64_t *> &adj[0]
    o1.mark = &mark[0]
    pr.word = &prune_word[0]
    pr.limit_vocab = limit_vocab
    with nogil:
        _unigram_stats(order, last_word, last_raw, &o1, &pr, stats)


def adjust(uint32_t[:, ::1] keys,             # IN/OUT (D, N) suffix-sorted n-grams; on
                                              #   return rows [:n_N] are order N's n-grams
           uint64_t[::1] counts,              # IN/OUT (D,) counts; [:n_N] order N's counts
           list words_out,                    # OUT per order 2..N-1: (n_k, k) int32
           list adj_out,                      # OUT per order 1..N-1: (n_k,) uint64, zeroed
           list parent_out,                   # OUT per order 2..N: (n_k,) int32 suffix link
           list mark_out,                     # OUT per order: (n_k,) uint8, zeroed; 1 = pruned
           const uint64_t[::1] thresholds,    # IN (N,) order k prunes raw count <= t[k-1]
           const uint8_t[::1] prune_word,     # IN (V,) 1 = word outside --limit_vocab_file
           bint limit_vocab,
           uint64_t[:, ::1] stats,            # OUT (N, 7): n0..n4, count, count unpruned
           bint last_part=True,               # IN the n-grams end with the last word of all
           bint unigrams=True):               # IN fill the unigram statistics (row 0)
    """Adjusted counts of every order in one pass over the suffix-sorted n-grams
    (lmplz's AdjustCounts).

    Order N keeps raw counts.  A lower-order n-gram's adjusted count is the number
    of distinct words (``<s>`` included) seen before it, except that n-grams starting
    with ``<s>`` keep their raw count.  Unigrams are indexed by word id; ``<unk>``
    and ``<s>`` have count 0 unless seen.  Arrays are sized by ``adjust_sizes``.
    Counts-of-counts include pruned n-grams and, like lmplz, take the last n-gram
    of each lower order (in suffix order) with its raw count.  Order N's words and
    counts are written over the first rows of ``keys``/``counts``, which saves a
    copy of the largest order."""
    cdef int n = keys.shape[1], k
    if keys.shape[0] == 0 or keys.shape[0] != counts.shape[0]:
        raise ValueError("adjust: no n-grams, or keys and counts differ in length")
    if n >= 63:
        raise ValueError("adjust: order too large")
    cdef OrderArrays o[64]
    cdef int64_t cur[64]
    cdef uint8_t valid[64]
    cdef uint64_t last_raw[64]
    cdef Pruning pr
    memset(o, 0, sizeof(o))
    cdef int32_t[:, ::1] wv
    cdef uint64_t[::1] av
    cdef int32_t[::1] pv
    cdef uint8_t[::1] mv
    for k in range(1, n + 1):
        mv = mark_out[k - 1]
        o[k].size = mv.shape[0]
        if mv.shape[0] == 0:
            continue
        o[k].mark = &mv[0]
        if k < n or k == 1:
            av = adj_out[k - 1]
            o[k].adj = &av[0]
        if 2 <= k < n:
            wv = words_out[k - 1]
            o[k].words = &wv[0, 0]
        if k >= 2:
            pv = parent_out[k - 1]
            o[k].parent = &pv[0]
    if n >= 2:
        o[n].words = <int32_t *> &keys[0, 0]   # rows [:n_N], as they are compacted
    if o[1].size != prune_word.shape[0]:
        raise ValueError("adjust: unigram arrays must have one entry per word")
    pr.thresholds = &thresholds[0]
    pr.word = &prune_word[0]
    pr.limit_vocab = limit_vocab
    cdef uint32_t last_word = keys[keys.shape[0] - 1, n - 1]
    with nogil:
        _adjust_pass(keys, counts, o, cur, valid, last_raw, &pr)
        if n >= 2:
            o[n].adj = &counts[0]
        if unigrams:
            _unigram_stats(n, last_word, last_raw[1], &o[1], &pr, stats)
        _order_stats(n, o, cur, valid, last_raw, last_part, stats)
    for k in range(2, n + 1):
        if cur[k] + 1 != o[k].size:
            raise RuntimeError(f"adjust: order {k} has {cur[k] + 1} n-grams, sized for {o[k].size}")
    return last_raw[1]


def child_begin(const int32_t[::1] parent, Py_ssize_t nodes):  # IN: nondecreasing suffix links
    """Where each node's children start: children of node y are the entries
    [out[y], out[y+1]) of the next order (contiguous because it is suffix-sorted)."""
    out = np.zeros(nodes + 1, dtype=np.int64)
    cdef int64_t[::1] cb = out
    cdef Py_ssize_t i, m = parent.shape[0]
    with nogil:
        for i in range(m):
            cb[parent[i] + 1] += 1
        for i in range(nodes):
            cb[i + 1] += cb[i]
    return out


def link_contexts(const int32_t[:, ::1] words,       # IN (n_k, k) order k n-grams, k >= 3
                  const int32_t[::1] parent,         # IN (n_k,) suffix link into order k-1
                  const int32_t[::1] ctx_prev,       # IN (n_{k-1},) contexts of order k-1
                  const int32_t[:, ::1] words_prev,  # IN (n_{k-1}, k-1) order k-1 n-grams
                  const int64_t[::1] cb_prev,        # IN children of order k-2 nodes in k-1
                  int32_t[::1] ctx,                  # OUT (n_k,) index of words[:-1] in order k-1
                  int threads):
    """Find each n-gram's context (all but its last word) among the n-grams one order
    lower: the context of ``v x w`` is the child ``v`` of the context of ``x w``.
    Returns 0, or KN_INTERNAL when a context is missing (a bug)."""
    cdef Py_ssize_t m = words.shape[0], i, lo, hi, mid
    cdef int32_t first, y
    cdef Py_ssize_t bad = 0
    if threads < 1:
        raise ValueError("threads must be >= 1")
    for i in prange(m, nogil=True, schedule="static", num_threads=threads):
        first = words[i, 0]
        y = ctx_prev[parent[i]]
        lo = cb_prev[y]
        hi = cb_prev[y + 1]
        while lo < hi:
            mid = (lo + hi) >> 1
            if words_prev[mid, 0] < first:
                lo = mid + 1
            else:
                hi = mid
        if lo < cb_prev[y + 1] and words_prev[lo, 0] == first:
            ctx[i] = <int32_t> lo
        else:
            ctx[i] = -1
            bad += 1
    if bad:
        return KN_INTERNAL
    return KN_OK
