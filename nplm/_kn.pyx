# cython: freethreading_compatible = False
"""Kernels for modified Kneser-Ney estimation; ``kneser_ney.py`` runs the pipeline.

1. ``Counter``: tokenise text bytes (lmplz's delimiters: space, tab, CR, NUL; one
   sentence per line), give words ids in first-appearance order after ``<unk>``=0,
   ``<s>``=1, ``</s>``=2 (lmplz's numbering, hence its ARPA unigram order), and count
   the highest-order n-grams, left-padded with ``<s>``, in an open-addressing table.
2. ``Counter.suffix_sorted``: LSD radix sort of those n-grams in suffix order (last
   word most significant), the order lmplz writes every section of its ARPA in.
3. ``adjust``: one pass over the sorted n-grams.  Every lower-order n-gram is a
   suffix of some padded highest-order n-gram, and in suffix order the n-grams that
   share a k-word suffix are contiguous, so each order's n-grams, their adjusted
   (continuation) counts, suffix links, pruning marks and counts-of-counts all fall
   out of the common-suffix length between neighbours.
4. ``link_contexts`` / ``interpolate``: the context (all but the last word) of each
   n-gram is found by walking the suffix trie; then gammas, interpolated
   probabilities and back-offs, per order.

Kernels return status codes; the Python layer turns them into exceptions.
"""
from libc.stdint cimport uint8_t, uint32_t, int32_t, uint64_t, int64_t
from libc.stdlib cimport malloc, calloc, realloc, free
from libc.string cimport memcpy, memcmp, memset, memmove
from libc.math cimport log10, INFINITY

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


cdef inline uint64_t _mix64(uint64_t h) noexcept nogil:
    """Finaliser of MurmurHash3: spreads every input bit over the word."""
    h ^= h >> 33
    h *= 0xff51afd7ed558ccdULL
    h ^= h >> 33
    h *= 0xc4ceb9fe1a85ec53ULL
    h ^= h >> 33
    return h


cdef inline uint64_t _hash_bytes(const uint8_t *p, size_t n) noexcept nogil:
    """FNV-1a over the bytes, then mixed (FNV alone clusters short words)."""
    cdef uint64_t h = 0xcbf29ce484222325ULL
    cdef size_t i
    for i in range(n):
        h = (h ^ p[i]) * 0x100000001b3ULL
    return _mix64(h ^ n)


cdef inline uint64_t _hash_words(const uint32_t *w, int n) noexcept nogil:
    cdef uint64_t h = 0x9E3779B97F4A7C15ULL
    cdef int i
    for i in range(n):
        h = (h ^ w[i]) * 0xbf58476d1ce4e5b9ULL
        h ^= h >> 31
    return _mix64(h)


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
    cdef readonly uint64_t tokens, sentences, unk_tokens, skipped_symbols
    cdef readonly int64_t err_offset   # byte offset of the offending token (KN_SPECIAL)
    # vocabulary: words' bytes in one arena; offsets[id]..offsets[id+1]
    cdef uint8_t *arena
    cdef size_t arena_len, arena_cap
    cdef uint64_t *voffsets
    cdef uint64_t *vhashes
    cdef size_t vsize, vcap
    cdef uint32_t *vslots
    cdef size_t vmask
    # n-gram table: keys (order words per entry, insertion order) and counts
    cdef uint32_t *keys
    cdef uint64_t *counts
    cdef size_t nsize, ncap
    cdef uint64_t *nslots           # (hash high 32 bits << 32) | (entry + 1); 0 = empty
    cdef size_t nmask
    cdef uint32_t *gram             # the n-gram being built: context then word

    def __cinit__(self, int order, bint skip_symbols=False):
        if order < 1:
            raise ValueError(f"order must be at least 1, got {order}")
        self.order = order
        self.skip_symbols = skip_symbols
        self.arena_cap = 1 << 16
        self.arena = <uint8_t *> malloc(self.arena_cap)
        self.vcap = 1 << 12
        self.voffsets = <uint64_t *> malloc((self.vcap + 1) * sizeof(uint64_t))
        self.vhashes = <uint64_t *> malloc(self.vcap * sizeof(uint64_t))
        self.vmask = (1 << 13) - 1
        self.vslots = <uint32_t *> calloc(self.vmask + 1, sizeof(uint32_t))
        self.ncap = 1 << 16
        self.keys = <uint32_t *> malloc(self.ncap * order * sizeof(uint32_t))
        self.counts = <uint64_t *> malloc(self.ncap * sizeof(uint64_t))
        self.nmask = (1 << 17) - 1
        self.nslots = <uint64_t *> calloc(self.nmask + 1, sizeof(uint64_t))
        self.gram = <uint32_t *> malloc(order * sizeof(uint32_t))
        if (self.arena == NULL or self.voffsets == NULL or self.vhashes == NULL or self.vslots == NULL
                or self.keys == NULL or self.counts == NULL or self.nslots == NULL or self.gram == NULL):
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
        free(self.arena); free(self.voffsets); free(self.vhashes); free(self.vslots)
        self._free_table()
        free(self.gram)

    cdef void _free_table(self) noexcept nogil:
        free(self.keys); free(self.counts); free(self.nslots)
        self.keys = NULL; self.counts = NULL; self.nslots = NULL

    # ---------------------------------------------------------------- vocabulary
    cdef int64_t _word_id(self, const uint8_t *p, size_t n) noexcept nogil:
        """Id of the word p[:n], inserting it; -1 when out of memory or ids."""
        cdef uint64_t h = _hash_bytes(p, n)
        cdef size_t i = h & self.vmask
        cdef uint32_t s
        cdef uint64_t off
        while True:
            s = self.vslots[i]
            if s == 0:
                break
            s -= 1
            if self.vhashes[s] == h:
                off = self.voffsets[s]
                if self.voffsets[s + 1] - off == n and memcmp(self.arena + off, p, n) == 0:
                    return s
            i = (i + 1) & self.vmask
        # insert
        if self.vsize >= MAX_ENTRIES:
            return -1
        if self.vsize == self.vcap:
            if self._grow_vocab_arrays() < 0:
                return -1
        if self.arena_len + n > self.arena_cap:
            if self._grow_arena(n) < 0:
                return -1
        s = <uint32_t> self.vsize
        memcpy(self.arena + self.arena_len, p, n)
        self.arena_len += n
        self.vhashes[s] = h
        self.voffsets[s + 1] = self.arena_len
        self.vsize += 1
        if 2 * self.vsize > self.vmask + 1:
            if self._rehash_vocab() < 0:
                return -1
        else:
            self.vslots[i] = s + 1
        return s

    cdef int64_t _find_word(self, const uint8_t *p, size_t n) noexcept nogil:
        cdef uint64_t h = _hash_bytes(p, n)
        cdef size_t i = h & self.vmask
        cdef uint32_t s
        cdef uint64_t off
        while True:
            s = self.vslots[i]
            if s == 0:
                return -1
            s -= 1
            if self.vhashes[s] == h:
                off = self.voffsets[s]
                if self.voffsets[s + 1] - off == n and memcmp(self.arena + off, p, n) == 0:
                    return s
            i = (i + 1) & self.vmask

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
    cdef int _count_gram(self) noexcept nogil:
        """Add one occurrence of self.gram; 0, or -1 when out of memory/indices."""
        cdef int n = self.order
        cdef uint64_t h = _hash_words(self.gram, n)
        cdef uint64_t tag = h & 0xFFFFFFFF00000000ULL
        cdef size_t i = h & self.nmask
        cdef uint64_t s
        cdef size_t e
        while True:
            s = self.nslots[i]
            if s == 0:
                break
            if (s & 0xFFFFFFFF00000000ULL) == tag:
                e = <size_t> (s & 0xFFFFFFFFULL) - 1
                if memcmp(self.keys + e * n, self.gram, n * sizeof(uint32_t)) == 0:
                    self.counts[e] += 1
                    return 0
            i = (i + 1) & self.nmask
        if self.nsize >= MAX_ENTRIES:
            return -1
        if self.nsize == self.ncap:
            if self._grow_table_arrays() < 0:
                return -1
        e = self.nsize
        memcpy(self.keys + e * n, self.gram, n * sizeof(uint32_t))
        self.counts[e] = 1
        self.nsize += 1
        self.nslots[i] = tag | <uint64_t> (e + 1)
        if 2 * self.nsize > self.nmask + 1:
            return self._rehash_table()
        return 0

    cdef int _grow_table_arrays(self) noexcept nogil:
        cdef size_t cap = self.ncap * 2
        cdef uint32_t *k = <uint32_t *> realloc(self.keys, cap * self.order * sizeof(uint32_t))
        if k == NULL:
            return -1
        self.keys = k
        cdef uint64_t *c = <uint64_t *> realloc(self.counts, cap * sizeof(uint64_t))
        if c == NULL:
            return -1
        self.counts = c
        self.ncap = cap
        return 0

    cdef int _rehash_table(self) noexcept nogil:
        cdef size_t mask = (self.nmask + 1) * 2 - 1
        cdef uint64_t *slots = <uint64_t *> calloc(mask + 1, sizeof(uint64_t))
        if slots == NULL:
            return -1
        cdef size_t e, i
        cdef uint64_t h
        for e in range(self.nsize):
            h = _hash_words(self.keys + e * self.order, self.order)
            i = h & mask
            while slots[i] != 0:
                i = (i + 1) & mask
            slots[i] = (h & 0xFFFFFFFF00000000ULL) | <uint64_t> (e + 1)
        free(self.nslots)
        self.nslots = slots
        self.nmask = mask
        return 0

    cdef int _append(self, uint32_t word) noexcept nogil:
        cdef int n = self.order
        self.gram[n - 1] = word
        if self._count_gram() < 0:
            return -1
        if n > 1:
            memmove(self.gram, self.gram + 1, (n - 1) * sizeof(uint32_t))
        return 0

    cdef int _feed(self, const uint8_t *data, size_t n) noexcept nogil:
        cdef size_t i = 0, start
        cdef int j
        cdef int64_t w
        cdef bint words_on_line
        if self.keys == NULL:
            return KN_INTERNAL
        while i < n:
            for j in range(self.order - 1):
                self.gram[j] = BOS
            words_on_line = False
            while True:
                while i < n and data[i] != 10 and _is_delim(data[i]):
                    i += 1
                if i == n or data[i] == 10:
                    break
                start = i
                while i < n and not _is_delim(data[i]):
                    i += 1
                w = self._word_id(data + start, i - start)
                if w < 0:
                    return KN_NOMEM
                if w <= EOS:
                    if self.skip_symbols:
                        self.skipped_symbols += 1
                        continue
                    if w != UNK:
                        self.err_offset = <int64_t> start
                        return KN_SPECIAL
                    self.unk_tokens += 1
                words_on_line = True
                if self._append(<uint32_t> w) < 0:
                    return KN_NOMEM
                self.tokens += 1
            # A line ends at '\n'; a last line without one is a sentence only if it
            # holds words (lmplz drops that sentence's </s>; we keep it).
            if i < n:
                i += 1
            elif not words_on_line:
                break
            if self._append(EOS) < 0:
                return KN_NOMEM
            self.sentences += 1
        return KN_OK

    def feed(self, const uint8_t[::1] data):  # IN: whole lines of UTF-8 text
        """Count the sentences in ``data`` (lines; a final line may lack its newline).
        Returns a status code: 0, or KN_NOMEM/KN_SPECIAL (see ``err_offset``)."""
        cdef int rc
        cdef size_t n = data.shape[0]
        if n == 0:
            return KN_OK
        with nogil:
            rc = self._feed(&data[0], n)
        return rc

    @property
    def vocab_size(self):
        return self.vsize

    @property
    def distinct_ngrams(self):
        return self.nsize

    def words(self):
        """The vocabulary as a list of str, by id."""
        cdef size_t s
        out = []
        for s in range(self.vsize):
            out.append(self.arena[self.voffsets[s]:self.voffsets[s + 1]].decode("utf-8"))
        return out

    def find(self, bytes word):
        """Id of ``word`` (UTF-8 bytes), or -1 when it was never seen."""
        return self._find_word(<const uint8_t *> word, len(word))

    def suffix_sorted(self):
        """Hand over the counted n-grams, sorted in suffix order, as numpy arrays
        ``(keys (D, order) uint32, counts (D,) uint64)``; frees the table."""
        cdef size_t d = self.nsize, n = self.order
        keys_a = np.empty((d, n), dtype=np.uint32)
        counts_a = np.empty(d, dtype=np.uint64)
        keys_b = np.empty((d, n), dtype=np.uint32)
        counts_b = np.empty(d, dtype=np.uint64)
        cdef uint32_t[:, ::1] ka = keys_a
        cdef uint64_t[::1] ca = counts_a
        cdef uint32_t[:, ::1] kb = keys_b
        cdef uint64_t[::1] cb = counts_b
        free(self.nslots)
        self.nslots = NULL
        if d == 0:
            self._free_table()
            return keys_a, counts_a
        cdef int wide = self.vsize > 65536
        cdef int passes = <int> n * (2 if wide else 1)
        cdef int p, col, shift
        cdef uint32_t *src_k = self.keys
        cdef uint64_t *src_c = self.counts
        cdef uint32_t *dst_k
        cdef uint64_t *dst_c
        cdef size_t *hist = <size_t *> malloc(65537 * sizeof(size_t))
        if hist == NULL:
            raise MemoryError("radix sort histogram")
        with nogil:
            for p in range(passes):
                col = p // 2 if wide else p
                shift = 16 * (p % 2) if wide else 0
                if p % 2 == 0:
                    dst_k = &ka[0, 0]
                    dst_c = &ca[0]
                else:
                    dst_k = &kb[0, 0]
                    dst_c = &cb[0]
                _radix_pass(src_k, src_c, dst_k, dst_c, d, n, col, shift, hist)
                if p == 0:
                    self._free_table()
                src_k = dst_k
                src_c = dst_c
        free(hist)
        if passes % 2 == 1:
            return keys_a, counts_a
        return keys_b, counts_b


cdef void _radix_pass(const uint32_t *src_k, const uint64_t *src_c, uint32_t *dst_k, uint64_t *dst_c,
                      size_t d, size_t n, int col, int shift, size_t *hist) noexcept nogil:
    """Stable counting sort of rows by the 16-bit digit (key[col] >> shift) & 0xFFFF."""
    cdef size_t i, pos, total = 0, c
    cdef uint32_t digit
    memset(hist, 0, 65537 * sizeof(size_t))
    for i in range(d):
        hist[(src_k[i * n + col] >> shift) & 0xFFFF] += 1
    for i in range(65536):
        c = hist[i]
        hist[i] = total
        total += c
    for i in range(d):
        digit = (src_k[i * n + col] >> shift) & 0xFFFF
        pos = hist[digit]
        hist[digit] = pos + 1
        memcpy(dst_k + pos * n, src_k + i * n, n * sizeof(uint32_t))
        dst_c[pos] = src_c[i]



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
    uint64_t *raw      # raw counts (for pruning)
    int32_t *parent    # index of the (k-1)-word suffix in order k-1
    uint8_t *mark      # 1 = pruned
    int64_t size


cdef void _adjust_pass(const uint32_t[:, ::1] keys, const uint64_t[::1] counts,
                       OrderArrays *o, int64_t *cur, uint8_t *valid) noexcept nogil:
    cdef Py_ssize_t d = keys.shape[0], i
    cdef int n = keys.shape[1], k, j
    cdef uint32_t lcs, w
    cdef uint64_t c
    cdef int64_t g
    cdef const uint32_t *row
    for k in range(n + 1):
        cur[k] = -1
        valid[k] = 0
    for i in range(d):
        row = &keys[i, 0]
        c = counts[i]
        lcs = _common_suffix(row, &keys[i - 1, 0], n) if i > 0 else 0
        w = row[n - 1]
        o[1].raw[w] += c
        if n == 1:
            o[1].adj[w] += c
        elif lcs < 2:
            o[1].adj[w] += 1
        for k in range(2, n):
            if lcs < <uint32_t> k:
                valid[k] = row[n - k + 1] != BOS
                if valid[k]:
                    cur[k] += 1
                    g = cur[k]
                    for j in range(k):
                        o[k].words[g * k + j] = <int32_t> row[n - k + j]
                    o[k].parent[g] = <int32_t> (row[n - 1] if k == 2 else cur[k - 1])
            if valid[k]:
                g = cur[k]
                o[k].raw[g] += c
                if row[n - k] == BOS:
                    # n-grams starting with <s> have no left context: raw count
                    o[k].adj[g] += c
                elif lcs < <uint32_t> (k + 1):
                    # a new (k+1)-word suffix: one more distinct left extension
                    o[k].adj[g] += 1
        if n >= 2 and row[1] != BOS:
            cur[n] += 1
            g = cur[n]
            for j in range(n):
                o[n].words[g * n + j] = <int32_t> row[j]
            o[n].adj[g] = c
            o[n].raw[g] = c
            o[n].parent[g] = <int32_t> (row[n - 1] if n == 2 else cur[n - 1])


cdef void _add_stat(uint64_t *st, uint64_t count, bint pruned) noexcept nogil:
    if count < 5:
        st[count] += 1
    st[5] += 1
    if not pruned:
        st[6] += 1


cdef void _marks_and_stats(const uint32_t[:, ::1] keys, OrderArrays *o, int64_t *cur, uint8_t *valid,
                           const uint64_t[::1] thresholds, const uint8_t[::1] prune_word,
                           bint limit_vocab, uint64_t[:, ::1] stats) noexcept nogil:
    cdef Py_ssize_t d = keys.shape[0]
    cdef int n = keys.shape[1], k, j
    cdef int64_t g, v = o[1].size
    cdef uint32_t last_word = keys[d - 1, n - 1]
    cdef uint64_t a
    cdef bint m
    # Unigrams: never pruned by count (lmplz keeps <unk>, <s>, </s>; unigram
    # thresholds are refused in Python), only by --limit_vocab_file.
    for g in range(v):
        m = limit_vocab and prune_word[g]
        o[1].mark[g] = m
        a = o[1].adj[g]
        if n > 1 and <uint32_t> g == last_word:
            a = o[1].raw[g]       # lmplz's flush of the last unigram uses its raw count
        _add_stat(&stats[0, 0], a, m)
    for k in range(2, n + 1):
        for g in range(cur[k] + 1):
            m = o[k].raw[g] <= thresholds[k - 1]
            if limit_vocab and not m:
                for j in range(k):
                    if prune_word[o[k].words[g * k + j]]:
                        m = True
                        break
            o[k].mark[g] = m
            a = o[k].adj[g]
            if k < n and g == cur[k] and valid[k]:
                a = o[k].raw[g]   # same lmplz quirk for the last n-gram of each order
            _add_stat(&stats[k - 1, 0], a, m)


def adjust(const uint32_t[:, ::1] keys,       # IN (D, N) suffix-sorted n-grams
           const uint64_t[::1] counts,        # IN (D,) their counts
           list words_out,                    # OUT per order k>=2: (n_k, k) int32
           list adj_out,                      # OUT per order: (n_k,) uint64 adjusted counts
           list parent_out,                   # OUT per order k>=2: (n_k,) int32 suffix link
           list mark_out,                     # OUT per order: (n_k,) uint8, 1 = pruned
           const uint64_t[::1] thresholds,    # IN (N,) order k prunes raw count <= t[k-1]
           const uint8_t[::1] prune_word,     # IN (V,) 1 = word outside --limit_vocab_file
           bint limit_vocab,
           uint64_t[:, ::1] stats):           # OUT (N, 7): n0..n4, count, count unpruned
    """Adjusted counts of every order in one pass over the suffix-sorted n-grams
    (lmplz's AdjustCounts).

    Order N keeps raw counts.  A lower-order n-gram's adjusted count is the number
    of distinct words (``<s>`` included) seen before it, except that n-grams starting
    with ``<s>`` keep their raw count.  Unigrams are indexed by word id; ``<unk>``
    and ``<s>`` have count 0 unless seen.  Output arrays must be zeroed and sized by
    ``adjust_sizes``.  Counts-of-counts include pruned n-grams and, like lmplz, take
    the last n-gram of each lower order (in suffix order) with its raw count."""
    cdef int n = keys.shape[1], k
    if keys.shape[0] == 0 or keys.shape[0] != counts.shape[0]:
        raise ValueError("adjust: no n-grams, or keys and counts differ in length")
    cdef OrderArrays o[64]
    cdef int64_t cur[64]
    cdef uint8_t valid[64]
    if n >= 63:
        raise ValueError("adjust: order too large")
    memset(o, 0, sizeof(o))
    raw1 = np.zeros(prune_word.shape[0], dtype=np.uint64)
    keep = [raw1]
    cdef int32_t[:, ::1] wv
    cdef uint64_t[::1] av, rv
    cdef int32_t[::1] pv
    cdef uint8_t[::1] mv
    for k in range(1, n + 1):
        av = adj_out[k - 1]
        mv = mark_out[k - 1]
        rv = raw1 if k == 1 else np.zeros(av.shape[0], dtype=np.uint64)
        keep.append(rv)
        o[k].size = av.shape[0]
        if av.shape[0] == 0:
            continue
        o[k].adj = &av[0]
        o[k].mark = &mv[0]
        o[k].raw = &rv[0]
        if k >= 2:
            wv = words_out[k - 1]
            pv = parent_out[k - 1]
            o[k].words = &wv[0, 0]
            o[k].parent = &pv[0]
    if o[1].size != prune_word.shape[0]:
        raise ValueError("adjust: unigram arrays must have one entry per word")
    with nogil:
        _adjust_pass(keys, counts, o, cur, valid)
        _marks_and_stats(keys, o, cur, valid, thresholds, prune_word, limit_vocab, stats)
    for k in range(2, n + 1):
        if cur[k] + 1 != o[k].size:
            raise RuntimeError(f"adjust: order {k} has {cur[k] + 1} n-grams, sized for {o[k].size}")


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
                  int32_t[::1] ctx):                 # OUT (n_k,) index of words[:-1] in order k-1
    """Find each n-gram's context (all but its last word) among the n-grams one order
    lower: the context of ``v x w`` is the child ``v`` of the context of ``x w``."""
    cdef Py_ssize_t m = words.shape[0], i, lo, hi, mid
    cdef int32_t first, y, bad = 0
    with nogil:
        for i in range(m):
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
            if lo == cb_prev[y + 1] or words_prev[lo, 0] != first:
                bad = 1
                break
            ctx[i] = <int32_t> lo
    if bad:
        return KN_INTERNAL
    return KN_OK


cdef extern from "math.h" nogil:
    float log10f(float)


cdef inline float _log10_clamped(float x) noexcept nogil:
    """min(0, log10 x) in float like lmplz, with log10 0 written as ARPA's -99
    rather than -inf."""
    if x <= 0.0:
        return -99.0
    x = log10f(x)
    return x if x < 0.0 else 0.0


# The arithmetic below is float32 in lmplz's order of operations
# (InitialProbabilities' AddRight/MergeRight, then Interpolate), so that the
# values, and hence the printed ARPA, are bit-identical to lmplz's.

cdef inline float _gamma(uint64_t n1, uint64_t n2, uint64_t n3, uint64_t pruned, float denom,
                         const float *disc) noexcept nogil:
    cdef float g = 0.0
    g += disc[1] * <float> n1
    g += disc[2] * <float> n2
    g += disc[3] * <float> n3
    g += <float> pruned      # mass of pruned n-grams goes to the lower order
    return g / denom


cdef inline float _uninterp(uint64_t a, float denom, const float *disc) noexcept nogil:
    return (<float> a - disc[a if a < 3 else 3]) / denom


def uniform_probability(uint64_t vocab):
    """lmplz's uniform base distribution: 1.0 / float(|V|), rounded to float."""
    return <float> (1.0 / <double> <float> vocab)


def unigram_probs(const uint64_t[::1] adj,      # IN (V,) adjusted counts by word id
                  const uint8_t[::1] mark,      # IN (V,) 1 = pruned (--limit_vocab_file)
                  const float[::1] disc,        # IN (4,) D0=0, D1, D2, D3+
                  bint interpolate, float uniform,
                  float[::1] prob,              # OUT (V,) probability
                  float[::1] logprob):          # OUT (V,) min(0, log10 prob)
    """Unigram probabilities (lmplz's MergeRight + Interpolate for order 1):
    p(w) = (a(w) - D(a(w))) / sum a + gamma / |V|, gamma being the discounted and
    pruned mass; without interpolation gamma goes to ``<unk>`` alone.  ``<s>`` gets
    probability 1 so scoring it costs nothing.  Returns gamma."""
    cdef Py_ssize_t v = adj.shape[0], w
    cdef uint64_t denom = 0, pruned = 0, n[4]
    cdef float fdenom, gamma, assign, p
    n[0] = n[1] = n[2] = n[3] = 0
    with nogil:
        for w in range(v):
            denom += adj[w]
            if mark[w]:
                pruned += adj[w]
            elif adj[w] > 0:
                n[adj[w] if adj[w] < 3 else 3] += 1
        fdenom = <float> denom
        gamma = _gamma(n[1], n[2], n[3], pruned, fdenom, &disc[0])
        assign = gamma if interpolate else 0.0
        for w in range(v):
            p = _uninterp(adj[w], fdenom, &disc[0])
            if w == UNK:
                # lmplz: <unk> is a zeroton, or holds the whole mass without
                # interpolation.  nplm may also have seen it in the text.
                if adj[w] == 0:
                    p = 0.0
                if not interpolate:
                    p = p + gamma
            if w == BOS:
                p = 1.0 + 0.0 * uniform
            else:
                p = p + assign * uniform
            prob[w] = p
            logprob[w] = _log10_clamped(p)
    return gamma


def order_probs(const uint64_t[::1] adj,        # IN (n_k,) adjusted counts
                const uint8_t[::1] mark,        # IN (n_k,) 1 = pruned
                const int32_t[::1] ctx,         # IN (n_k,) context index in order k-1
                const int32_t[::1] parent,      # IN (n_k,) suffix index in order k-1
                const float[::1] disc,          # IN (4,) this order's discounts
                const float[::1] prob_prev,     # IN (n_{k-1},) order k-1 probabilities
                float[::1] prob,                # OUT (n_k,) probabilities (NaN if pruned)
                float[::1] logprob,             # OUT (n_k,) min(0, log10 prob)
                float[::1] backoff_prev):       # OUT (n_{k-1},) log10 back-off of order k-1
    """Interpolated probabilities of order k >= 2 and the back-offs of order k-1:
    p(w|c) = (a(cw) - D(a(cw))) / sum_x a(cx) + gamma(c) p(w|c'), with
    gamma(c) = (sum over kept cx of D(a(cx)) + sum over pruned cx of a(cx)) / sum_x a(cx).
    An n-gram that is no context keeps back-off 1 (log 0)."""
    cdef Py_ssize_t m = adj.shape[0], np_ = prob_prev.shape[0], i
    cdef int32_t c
    cdef uint64_t a
    cdef float p
    # per context: sum of adjusted counts, pruned mass, n1, n2, n3+
    cdef uint64_t *acc = <uint64_t *> calloc(np_ * 5 + 1, sizeof(uint64_t))
    cdef float *gamma = <float *> malloc((np_ + 1) * sizeof(float))
    cdef float *fdenom = <float *> malloc((np_ + 1) * sizeof(float))
    if acc == NULL or gamma == NULL or fdenom == NULL:
        free(acc); free(gamma); free(fdenom)
        raise MemoryError(f"order_probs: {np_ * 48} bytes")
    with nogil:
        for i in range(m):
            c = ctx[i]
            a = adj[i]
            acc[5 * c] += a
            if mark[i]:
                acc[5 * c + 1] += a
            elif a > 0:
                acc[5 * c + 1 + (a if a < 3 else 3)] += 1
        for i in range(np_):
            fdenom[i] = <float> acc[5 * i]
            if acc[5 * i]:
                gamma[i] = _gamma(acc[5 * i + 2], acc[5 * i + 3], acc[5 * i + 4], acc[5 * i + 1],
                                  fdenom[i], &disc[0])
                backoff_prev[i] = log10f(gamma[i]) if gamma[i] > 0 else -99.0
            else:
                backoff_prev[i] = 0.0   # not a context
        for i in range(m):
            if mark[i]:
                prob[i] = 0.0 / 0.0
                logprob[i] = 0.0
                continue
            c = ctx[i]
            p = _uninterp(adj[i], fdenom[c], &disc[0])
            p = p + gamma[c] * prob_prev[parent[i]]
            prob[i] = p
            logprob[i] = _log10_clamped(p)
    free(acc); free(gamma); free(fdenom)
