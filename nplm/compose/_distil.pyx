# Distillation kernels: the teacher's log10 p(w | h) for millions of listed n-grams
# through the LMCore protocol, so any model kind (back-off, neural, interpolated)
# serves as a teacher and no Python code runs per n-gram; and the counts of a text's
# n-grams of every order, whose frequent ones are listed.
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free, malloc, realloc
from cython.parallel cimport prange

import numpy as np

from nplm._kernels cimport LMCore, NState, Ret, WordId, MAX_ORDER


cdef int _score_span(LMCore core, const int32_t[:, ::1] grams, float[::1] out,
                     Py_ssize_t lo, Py_ssize_t hi) except -1 nogil:
    """out[i] := log10 p(grams[i, -1] | grams[i, :-1]) for lo <= i < hi.  Rows that
    share the previous row's context reuse its state (rows come sorted)."""
    cdef int n = <int>grams.shape[1], m = n - 1, j
    cdef WordId ctx[MAX_ORDER]
    cdef NState st, tmp
    cdef Ret ret
    cdef Py_ssize_t i
    cdef bint same
    for i in range(lo, hi):
        same = i > lo
        if same:
            for j in range(m):
                if grams[i, j] != grams[i - 1, j]:
                    same = False
                    break
        if not same:
            if m == 0:
                core.null_state(&st)
            else:
                for j in range(m):            # most recent first
                    ctx[j] = <WordId>grams[i, m - 1 - j]
                core.context_state(ctx, m, &st)
        core.score_word(&st, <WordId>grams[i, m], &tmp, &ret)
        out[i] = ret.prob
    return 0


def score_rows(LMCore core, const int32_t[:, ::1] grams,   # IN (N, n) word ids, oldest first
               float[::1] out,                             # OUT (N,) log10 p(last | rest)
               int threads=1):
    """Teacher scores of n-grams: out[i] = log10 p(grams[i, n-1] | grams[i, :n-1]),
    the context given to the teacher through ``context_state`` (KenLM's GetState).
    ``threads`` > 1 splits the rows into contiguous chunks (the core must then be
    safe to call concurrently, as the back-off core is)."""
    cdef Py_ssize_t N = grams.shape[0], t, chunk
    if grams.shape[1] < 1 or grams.shape[1] > MAX_ORDER:
        raise ValueError(f"n-gram width {grams.shape[1]} outside 1..{MAX_ORDER}")
    if out.shape[0] != N:
        raise ValueError("output length differs from the number of n-grams")
    if threads < 1:
        raise ValueError("threads must be >= 1")
    if threads == 1 or N < 4096:
        with nogil:
            _score_span(core, grams, out, 0, N)
        return
    chunk = (N + threads - 1) // threads
    for t in prange(threads, nogil=True, schedule="static", num_threads=threads):
        _score_span(core, grams, out, t * chunk, min(N, (t + 1) * chunk))


def probe_groups(LMCore core,
                 const int32_t[:, ::1] ctx,        # IN (Np, n-1) contexts, oldest first, grouped
                 const int64_t[::1] ctx_off,       # IN (G+1,) group g's contexts: ctx_off[g]..ctx_off[g+1]
                 const int32_t[::1] words,         # IN candidate next words, grouped
                 const int64_t[::1] word_off,      # IN (G+1,) group g's words
                 int64_t[::1] out_ctx,             # OUT context row of each n-gram found
                 int32_t[::1] out_word,            # OUT its last word
                 float[::1] out_prob,              # OUT log10 p as matched
                 float[::1] out_bo):               # OUT the n-gram's stored back-off (-0.0: extends nothing)
    """Which (context, word) pairs are n-grams of the model (the match reaches the
    full length n): every context of a group against every word of the same group.
    Returns the number found, or -1 when the output arrays are too small."""
    cdef Py_ssize_t G = ctx_off.shape[0] - 1, g, i, k, found = 0, cap = out_word.shape[0]
    cdef int m = <int>ctx.shape[1], j
    cdef WordId buf[MAX_ORDER]
    cdef NState st, tmp
    cdef Ret ret
    if m < 1 or m >= MAX_ORDER:
        raise ValueError("context width outside 1..MAX_ORDER-1")
    if word_off.shape[0] != G + 1:
        raise ValueError("ctx_off and word_off differ in length")
    with nogil:
        for g in range(G):
            for i in range(ctx_off[g], ctx_off[g + 1]):
                for j in range(m):
                    buf[j] = <WordId>ctx[i, m - 1 - j]
                core.context_state(buf, m, &st)
                if st.length < m:
                    continue                  # the context extends nothing
                for k in range(word_off[g], word_off[g + 1]):
                    core.score_word(&st, <WordId>words[k], &tmp, &ret)
                    if ret.ngram_length == m + 1:
                        if found == cap:
                            found = -1
                            break
                        out_ctx[found] = i
                        out_word[found] = words[k]
                        out_prob[found] = ret.prob
                        out_bo[found] = tmp.backoff[m]
                        found += 1
                if found < 0:
                    break
            if found < 0:
                break
    return found


# ---------------------------------------------------------------------------------
# Counting n-grams of every order

cdef struct GramTable:
    # Order n's distinct n-grams, numbered in order of first sight.  Each is its first
    # n-1 words' number in order n-1 (order 2: the first word) and its last word,
    # packed as prefix << 32 | word; an open-addressing table of 8-byte slots,
    # (the low 32 bits of its hash) << 32 | (number + 1), finds it.
    uint64_t *slots         # 0: empty
    int bits                # 2**bits slots
    uint64_t *pw            # number -> prefix << 32 | word
    int64_t *count          # number -> count
    int64_t size, cap


cdef enum:
    GC_NOMEM = -1
    GC_TOO_MANY = -2        # more distinct n-grams of one order than int32 numbers


cdef inline uint64_t _gram_hash(uint64_t pw) noexcept nogil:
    # Fibonacci hashing of the packed pair: the top bits pick the slot, the low 32
    # bits are the tag (independent of the slot, so a tag match is nearly always
    # the n-gram itself)
    return (pw ^ (pw >> 29)) * 0x9E3779B97F4A7C15ULL


cdef class GramCounter:
    """Counts of the n-grams of orders 2..order in sentences of word ids, fed in
    chunks (``add``), read once at the end (``result``).

    About 30 bytes per distinct n-gram while counting (slots of 8 bytes at load <= 3/4,
    16 bytes of packed prefix/word and count, arrays grown by half), where sorting each
    chunk's rows and merging them took 80; one hash probe per position and order
    instead of a sort per chunk."""
    cdef readonly int order
    cdef readonly int64_t V
    cdef GramTable t[MAX_ORDER + 1]
    cdef bint done

    def __cinit__(self, int order, int64_t V):
        cdef int n
        if order < 1 or order > MAX_ORDER:
            raise ValueError(f"order {order} outside 1..{MAX_ORDER}")
        if V < 1 or V >= (<int64_t>1 << 31):
            raise ValueError(f"vocabulary size {V} outside 1..2**31-1")
        self.order, self.V = order, V
        for n in range(order + 1):
            self.t[n].slots = NULL
            self.t[n].pw = NULL
            self.t[n].count = NULL
        for n in range(2, order + 1):
            self.t[n].bits = 12
            self.t[n].slots = <uint64_t *>calloc(<size_t>1 << 12, sizeof(uint64_t))
            self.t[n].cap = 1 << 11
            self.t[n].size = 0
            self.t[n].pw = <uint64_t *>malloc(self.t[n].cap * sizeof(uint64_t))
            self.t[n].count = <int64_t *>malloc(self.t[n].cap * sizeof(int64_t))
            if self.t[n].slots == NULL or self.t[n].pw == NULL or self.t[n].count == NULL:
                raise MemoryError("cannot allocate the n-gram counter")

    def __dealloc__(self):
        cdef int n
        for n in range(self.order + 1):
            free(self.t[n].slots); free(self.t[n].pw); free(self.t[n].count)

    cdef int _grow_slots(self, GramTable *g) noexcept nogil:
        cdef int bits = g.bits + 1
        cdef size_t mask = ((<size_t>1) << bits) - 1, i, j
        cdef uint64_t *slots = <uint64_t *>calloc(mask + 1, sizeof(uint64_t))
        if slots == NULL:
            return GC_NOMEM
        for i in range((<size_t>1) << g.bits):
            if g.slots[i] == 0:
                continue
            j = <size_t>(_gram_hash(g.pw[(g.slots[i] & 0xFFFFFFFFULL) - 1]) >> (64 - bits))
            while slots[j] != 0:
                j = (j + 1) & mask
            slots[j] = g.slots[i]
        free(g.slots)
        g.slots, g.bits = slots, bits
        return 0

    cdef int _grow_numbers(self, GramTable *g) noexcept nogil:
        cdef int64_t cap = g.cap + g.cap // 2
        cdef void *p = realloc(g.pw, cap * sizeof(uint64_t))
        if p == NULL:
            return GC_NOMEM
        g.pw = <uint64_t *>p
        p = realloc(g.count, cap * sizeof(int64_t))
        if p == NULL:
            return GC_NOMEM
        g.count = <int64_t *>p
        g.cap = cap
        return 0

    cdef int64_t _see(self, GramTable *g, int32_t prefix, int32_t w) noexcept nogil:
        """Count one occurrence of (prefix, w); its number, or GC_NOMEM / GC_TOO_MANY."""
        cdef uint64_t pw = (<uint64_t>prefix << 32) | <uint32_t>w
        cdef uint64_t h, tag, slot
        cdef size_t mask, i
        if (g.size + 1) * 4 > ((<int64_t>1) << g.bits) * 3:
            if self._grow_slots(g) < 0:
                return GC_NOMEM
        h = _gram_hash(pw)
        tag = h << 32
        mask = ((<size_t>1) << g.bits) - 1
        i = <size_t>(h >> (64 - g.bits))
        while True:
            slot = g.slots[i]
            if slot == 0:
                break
            if (slot & 0xFFFFFFFF00000000ULL) == tag and g.pw[(slot & 0xFFFFFFFFULL) - 1] == pw:
                g.count[(slot & 0xFFFFFFFFULL) - 1] += 1
                return <int64_t>(slot & 0xFFFFFFFFULL) - 1
            i = (i + 1) & mask
        if g.size >= 0x7FFFFFFF:
            return GC_TOO_MANY
        if g.size == g.cap and self._grow_numbers(g) < 0:
            return GC_NOMEM
        g.slots[i] = tag | <uint64_t>(g.size + 1)
        g.pw[g.size] = pw
        g.count[g.size] = 1
        g.size += 1
        return g.size - 1

    def add(self, const int32_t[::1] ids,     # IN word ids of whole sentences, concatenated
            const int64_t[::1] starts):       # IN each sentence's first position, increasing
        """Count the n-grams inside each sentence ids[starts[k]:starts[k+1]] (the last
        one to the end of ids)."""
        cdef Py_ssize_t N = ids.shape[0], S = starts.shape[0], k, j, lo, hi
        cdef int64_t last[MAX_ORDER + 1]
        cdef int64_t cur[MAX_ORDER + 1]
        cdef int n, top, err = 0
        if self.done:
            raise RuntimeError("the counts were already read")
        if N and (np.min(ids) < 0 or np.max(ids) >= self.V):
            raise ValueError("word id out of range")
        if S and (starts[0] < 0 or starts[S - 1] > N or np.any(np.diff(np.asarray(starts)) < 0)):
            raise ValueError("sentence starts out of order or out of range")
        if self.order < 2:
            return
        with nogil:
            for k in range(S):
                lo = starts[k]
                hi = starts[k + 1] if k + 1 < S else N
                for j in range(lo, hi):
                    cur[1] = ids[j]
                    top = <int>min(<Py_ssize_t>self.order, j - lo + 1)
                    for n in range(2, top + 1):
                        cur[n] = self._see(&self.t[n], <int32_t>last[n - 1], ids[j])
                        if cur[n] < 0:
                            err = <int>cur[n]
                            break
                    if err:
                        break
                    for n in range(1, top + 1):
                        last[n] = cur[n]
                if err:
                    break
        if err == GC_TOO_MANY:
            raise OverflowError("more than 2**31-1 distinct n-grams of one order")
        if err:
            raise MemoryError("out of memory counting n-grams")

    def result(self, min_counts=None):
        """{n: (rows (count, n) int32 word ids oldest first, counts int64)} for
        n = 2..order, n-grams in order of first sight; with ``min_counts`` ({n: c}),
        only order n's n-grams seen at least c times (their rows are followed through
        the prefix numbers, so nothing else is built).  Frees the counter's tables."""
        cdef int n, k
        cdef GramTable *g
        if self.done:
            raise RuntimeError("the counts were already read")
        self.done = True
        pw, count = {}, {}
        for n in range(2, self.order + 1):
            g = &self.t[n]
            free(g.slots)
            g.slots = NULL
            # views of the C arrays, alive until they are freed below
            pw[n] = np.asarray(<uint64_t[:g.size]>g.pw) if g.size else np.zeros(0, np.uint64)
            count[n] = np.asarray(<int64_t[:g.size]>g.count) if g.size else np.zeros(0, np.int64)
        out = {}
        # highest order first: order n's rows need the lower orders' pairs only, so
        # each order's arrays are freed once its rows are built
        for n in range(self.order, 1, -1):
            c = (min_counts or {}).get(n, 0)
            keep = np.flatnonzero(count[n] >= c) if c > 1 else None
            rows = np.empty((len(count[n]) if keep is None else len(keep), n), np.int32)
            p = pw[n] if keep is None else pw[n][keep]
            for k in range(n - 1, 0, -1):
                rows[:, k] = (p & 0xFFFFFFFF).astype(np.int32)
                p = pw[k][p >> 32] if k > 1 else p >> 32
            rows[:, 0] = p.astype(np.int32)
            out[n] = (rows, count[n].copy() if keep is None else count[n][keep])
            del pw[n], count[n], p, keep
            free(self.t[n].pw); free(self.t[n].count)
            self.t[n].pw = NULL
            self.t[n].count = NULL
        return {n: out[n] for n in sorted(out)}
