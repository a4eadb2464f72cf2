# cython: language_level=3
"""Kernels of n-best rescoring (``nplm/compose/rescore.py``).

``scan`` finds, in a buffer of complete n-best lines, each line's hypothesis, sentence
id and the point where the new features go, and checks the line's shape; the Python
layer turns an error code into a message naming the file and line.  ``assemble``
writes the lines back with the features spliced in (floats as the ARPA writer prints
them).  ``SharedScorer`` scores the hypotheses through any model's scoring protocol
(LMCore) without the GIL, sharing work between the hypotheses of a buffer, which in an
n-best list differ from each other by a few words:

* a prefix trie keeps, for every word prefix already scored, the state after it and
  the float32 running total, so a hypothesis starts where it leaves the known ones;
* a cache maps (state before position j, the words from j to the end) to where those
  words' probabilities were stored (keyed by hashes, checked word for word on a
  hit): equal states and equal remaining words have equal futures (the protocol's
  contract), so once a hypothesis's state after an edit meets a known one, the rest
  is copied.

The hypotheses of one sentence (a run of equal ids) share tables small enough to
stay in cache; sentences are scored in parallel, each thread with its own tables.
The model is still consulted for most of the time: the lookups sharing saves are
the cheap ones (n-grams the sentence's other hypotheses just brought into cache).

Totals are added word by word in float32 from the left, the same additions as
``Model.score``, so every total is bit-identical to it.
"""
cimport cython
from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcmp, memcpy, memset
from cython.parallel cimport prange, threadid

import numpy as np

from nplm._hashing cimport fmix64
from nplm._kernels cimport LMCore, NState, Ret, Vocab, WordId, is_word_delimiter
from nplm.backoff._arpa cimport format_float

cdef enum:
    FMT_MOSES = 0
    FMT_PLAIN = 1

# scan's error codes (rescore.py words them)
cdef enum:
    SCAN_OK = 0
    SCAN_EMPTY = 1
    SCAN_FEW_FIELDS = 2
    SCAN_FIELD_COUNT = 3
    SCAN_NO_ID = 4
    SCAN_ID_SPACE = 5

cdef uint64_t EMPTY = 0xFFFFFFFFFFFFFFFFULL


# ---------------------------------------------------------------------------------
# Lines

cdef int _scan_line(const uint8_t *p, Py_ssize_t a, Py_ssize_t e, int fmt, int64_t *f) noexcept nogil:
    """Fields of line p[a:e] (no newline) into f: hyp start, hyp end, insertion
    point, id start, id end, field count.  Returns a SCAN_ code."""
    cdef Py_ssize_t k = a, c = e, sep0 = -1, sep1 = -1, sep2 = -1, nf = 1
    while k < e and is_word_delimiter(p[k]):
        k += 1
    if k == e:
        return SCAN_EMPTY
    k = a
    if fmt == FMT_MOSES:
        while k + 3 <= e:
            if p[k] == 124 and p[k + 1] == 124 and p[k + 2] == 124:
                if nf == 1:
                    sep0 = k
                elif nf == 2:
                    sep1 = k
                elif nf == 3:
                    sep2 = k
                nf += 1
                k += 3
            else:
                k += 1
        f[5] = nf
        if nf < 4:
            return SCAN_FEW_FIELDS
        f[0], f[1] = sep0 + 3, sep1
        k = sep2
        while k > sep1 + 3 and is_word_delimiter(p[k - 1]):
            k -= 1
        f[2] = k
    else:
        while c > a and p[c - 1] == 13:      # rstrip(b"\r\n") of a line without its \n
            c -= 1
        for k in range(a, c):
            if p[k] == 9:
                if nf == 1:
                    sep0 = k
                elif nf == 2:
                    sep1 = k
                nf += 1
        f[5] = nf
        if nf < 2:
            return SCAN_FEW_FIELDS
        f[0], f[1], f[2] = sep0 + 1, (sep1 if nf > 2 else c), c
    # the id: field 0 without surrounding white space, none inside
    k, c = a, sep0
    while k < c and is_word_delimiter(p[k]):
        k += 1
    while c > k and is_word_delimiter(p[c - 1]):
        c -= 1
    f[3], f[4] = k, c
    return SCAN_OK


@cython.boundscheck(False)
def scan(bytes chunk, int fmt, Py_ssize_t fields, bytes last_id):
    """The lines of ``chunk`` (complete lines; the last may lack its newline).

    Returns (starts, hyp_a, hyp_b, ins, groups, fields, runs, last_id, error,
    error_index, found): starts[i] is line i's first byte (starts[n] = len(buf)),
    hyp_a:hyp_b its hypothesis, ins where the features go, groups the first line of
    each run of equal ids (then n), ``fields`` the field count every line must
    have (the first line's when 0 is passed), ``runs`` how many times the sentence id
    changes from ``last_id`` on, ``last_id`` the last line's id.  ``error`` is a SCAN_
    code for line ``error_index`` (0: none), ``found`` its field count."""
    cdef const uint8_t[::1] buf = chunk
    cdef Py_ssize_t size = buf.shape[0], n = 0, i, a, e, line = 0
    cdef const uint8_t *p = &buf[0] if size else NULL
    cdef int64_t f[6]
    cdef int err = SCAN_OK
    cdef Py_ssize_t runs = 0, prev_a = 0, prev_n = -1
    with nogil:
        for i in range(size):
            n += p[i] == 10
    if size and p[size - 1] != 10:
        n += 1
    starts = np.empty(n + 1, np.int64)
    cols = np.empty((4, n), np.int64)
    groups = np.empty(n + 1, np.int64)
    cdef int64_t[::1] g = groups
    cdef Py_ssize_t n_groups = 0
    cdef int64_t[::1] s = starts
    cdef int64_t[:, ::1] o = cols
    cdef const char *lp = NULL
    cdef Py_ssize_t ln = -1
    if last_id is not None:
        lp = last_id
        ln = len(last_id)
    f[5] = 0
    with nogil:
        a = 0
        while line < n:
            e = a
            while e < size and p[e] != 10:
                e += 1
            s[line] = a
            err = _scan_line(p, a, e, fmt, f)
            if err == SCAN_OK and fields and f[5] != fields:
                err = SCAN_FIELD_COUNT
            if err == SCAN_OK and f[4] == f[3]:
                err = SCAN_NO_ID
            if err == SCAN_OK:
                for i in range(f[3], f[4]):
                    if is_word_delimiter(p[i]):
                        err = SCAN_ID_SPACE
                        break
            if err != SCAN_OK:
                break
            if not fields:
                fields = f[5]
            o[0, line], o[1, line], o[2, line] = f[0], f[1], f[2]
            if prev_n < 0:
                if ln != f[4] - f[3] or memcmp(lp, p + f[3], ln) != 0:
                    runs += 1
                g[0] = 0
                n_groups = 1
            elif prev_n != f[4] - f[3] or memcmp(p + prev_a, p + f[3], prev_n) != 0:
                runs += 1
                g[n_groups] = line
                n_groups += 1
            prev_a, prev_n = f[3], f[4] - f[3]
            line += 1
            a = e + 1
        s[n] = size
        g[n_groups] = n
    if err != SCAN_OK:
        return None, None, None, None, None, fields, runs, last_id, err, line, f[5]
    if n:
        last_id = chunk[prev_a:prev_a + prev_n]
    return starts, cols[0], cols[1], cols[2], groups[:n_groups + 1], fields, runs, last_id, 0, 0, 0


@cython.boundscheck(False)
def assemble(const uint8_t[::1] buf, const int64_t[::1] starts, const int64_t[::1] ins, list labels,
             const float[:, ::1] values):
    """The lines of ``buf`` with, at each line's insertion point, label j then value j
    of every model j (``values[j, line]``): one bytes object."""
    cdef Py_ssize_t n = ins.shape[0], k = len(labels), i, j, pos = 0, cap, extra = 0
    if values.shape[0] != k or values.shape[1] != n or starts.shape[0] != n + 1:
        raise ValueError("assemble: values, labels and lines disagree")
    cdef const char *lab[64]
    cdef Py_ssize_t labn[64]
    if k > 64:
        raise ValueError("at most 64 models at once")
    for j in range(k):
        lab[j] = labels[j]
        labn[j] = len(labels[j])
        extra += labn[j] + 24
    cap = buf.shape[0] + n * extra + 1
    cdef char *out = <char *>malloc(cap)
    if out == NULL:
        raise MemoryError(f"cannot allocate {cap} bytes for the rescored lines")
    cdef const char *p = <const char *>&buf[0] if buf.shape[0] else NULL
    try:
        with nogil:
            for i in range(n):
                memcpy(out + pos, p + starts[i], ins[i] - starts[i])
                pos += ins[i] - starts[i]
                for j in range(k):
                    memcpy(out + pos, lab[j], labn[j])
                    pos += labn[j]
                    pos += format_float(values[j, i], out + pos)
                memcpy(out + pos, p + ins[i], starts[i + 1] - ins[i])
                pos += starts[i + 1] - ins[i]
        return PyBytes_FromStringAndSize(out, pos)
    finally:
        free(out)


# ---------------------------------------------------------------------------------
# Scoring with shared prefixes and suffixes

cdef inline uint64_t _trie_key(int32_t parent, WordId w) noexcept nogil:
    return (<uint64_t><uint32_t>parent << 32) | w


cdef inline uint64_t _state_hash(const NState *s) noexcept nogil:
    cdef uint64_t h = s.length
    cdef int i
    for i in range(s.length):
        h = h * 0x9E3779B97F4A7C15ULL + s.words[i]
    return h


cdef inline bint _state_eq(const NState *a, const NState *b) noexcept nogil:
    return a.length == b.length and memcmp(a.words, b.words, a.length * sizeof(WordId)) == 0


cdef struct Work:
    # One thread's tables for the group of hypotheses it is scoring.
    uint64_t mask               # hash table size - 1
    Py_ssize_t cap              # prefix nodes the arrays hold
    uint64_t slots              # hash slots allocated
    NState *pstate              # prefix node -> state after it
    float *ptotal               # prefix node -> float32 running total
    uint64_t *pkeys             # (parent node, word) -> prefix node
    int32_t *pvals
    uint64_t *ckeys             # (state, suffix) cache: hash, suffix length,
    int32_t *clen               # prefix node holding the state, where the
    int32_t *cpnode             # suffix's probabilities are stored
    int64_t *cpos
    int32_t n_pnodes
    int64_t lookups


cdef void _work_free(Work *w) noexcept nogil:
    free(w.pstate)
    free(w.ptotal)
    free(w.pkeys)
    free(w.pvals)
    free(w.ckeys)
    free(w.clen)
    free(w.cpnode)
    free(w.cpos)
    memset(w, 0, sizeof(Work))


cdef int _work_alloc(Work *w, Py_ssize_t tokens) noexcept nogil:
    """Tables for groups of up to ``tokens`` words; -1 when out of memory."""
    cdef uint64_t slots = 64
    while slots < 2 * <uint64_t>(tokens + 2):
        slots <<= 1
    _work_free(w)
    w.pstate = <NState *>malloc((tokens + 2) * sizeof(NState))
    w.ptotal = <float *>malloc((tokens + 2) * sizeof(float))
    w.pkeys = <uint64_t *>malloc(slots * sizeof(uint64_t))
    w.pvals = <int32_t *>malloc(slots * sizeof(int32_t))
    w.ckeys = <uint64_t *>malloc(slots * sizeof(uint64_t))
    w.clen = <int32_t *>malloc(slots * sizeof(int32_t))
    w.cpnode = <int32_t *>malloc(slots * sizeof(int32_t))
    w.cpos = <int64_t *>malloc(slots * sizeof(int64_t))
    if (w.pstate == NULL or w.ptotal == NULL or w.pkeys == NULL or w.pvals == NULL
            or w.ckeys == NULL or w.clen == NULL or w.cpnode == NULL or w.cpos == NULL):
        _work_free(w)
        return -1
    w.cap = tokens + 2
    w.slots = slots
    return 0


cdef class SharedScorer:
    """Totals of many hypotheses under one model (its LMCore and Vocab), sharing the
    prefixes and suffixes the hypotheses of a group have in common (module
    docstring).  Groups are scored in parallel, each thread with its own tables;
    buffers are kept between calls and grown as needed."""
    cdef LMCore core
    cdef Vocab vocab
    cdef bint bos, eos
    cdef Py_ssize_t cap          # words the flat buffers hold
    cdef WordId *tok             # hypothesis i's words at tok[off[i]:off[i] + cnt[i]]
    cdef float *probs            # their probabilities, same places
    cdef uint64_t *sh            # hash of the words from each place to the end
    cdef Work *work
    cdef int n_work
    cdef public int64_t lookups  # words scored by the model (the rest were shared)

    def __init__(self, LMCore core not None, Vocab vocab not None, bint bos=True, bint eos=True):
        self.core, self.vocab, self.bos, self.eos = core, vocab, bos, eos

    def __dealloc__(self):
        self._free()

    cdef void _free(self) noexcept:
        cdef int i
        free(self.tok)
        free(self.probs)
        free(self.sh)
        self.tok = NULL
        self.probs = NULL
        self.sh = NULL
        self.cap = 0
        for i in range(self.n_work):
            _work_free(&self.work[i])
        free(self.work)
        self.work = NULL
        self.n_work = 0

    cdef int _reserve(self, Py_ssize_t words, Py_ssize_t group_words, int threads) except -1:
        cdef int i
        if words > self.cap:
            free(self.tok)
            free(self.probs)
            free(self.sh)
            self.cap = max(words, 2 * self.cap)
            self.tok = <WordId *>malloc(self.cap * sizeof(WordId))
            self.probs = <float *>malloc(self.cap * sizeof(float))
            self.sh = <uint64_t *>malloc(self.cap * sizeof(uint64_t))
            if self.tok == NULL or self.probs == NULL or self.sh == NULL:
                self._free()
                raise MemoryError(f"cannot allocate rescoring buffers for {words} words")
        if threads > self.n_work:
            for i in range(self.n_work):
                _work_free(&self.work[i])
            free(self.work)
            self.work = <Work *>malloc(threads * sizeof(Work))
            self.n_work = 0
            if self.work == NULL:
                raise MemoryError("cannot allocate rescoring tables")
            memset(self.work, 0, threads * sizeof(Work))
            self.n_work = threads
        for i in range(threads):
            if self.work[i].cap < group_words + 2 and _work_alloc(&self.work[i], group_words) < 0:
                raise MemoryError(f"cannot allocate rescoring tables for {group_words} words")
        return 0

    @cython.boundscheck(False)
    def score(self, const uint8_t[::1] buf, const int64_t[::1] hyp_a, const int64_t[::1] hyp_b,
              const int64_t[::1] groups, int threads=1):
        """float64 totals of the hypotheses buf[hyp_a[i]:hyp_b[i]], each equal to
        the model's score() of it (sentence start and end as set at construction).
        Work is shared within each group of lines groups[g]:groups[g + 1] (the
        hypotheses of one sentence: small tables that stay in cache); ``threads``
        score groups in parallel."""
        cdef Py_ssize_t m = hyp_a.shape[0], i, g, ng = groups.shape[0] - 1, words = 0, most = 0, gw
        cdef const uint8_t *p = &buf[0] if buf.shape[0] else NULL
        if hyp_b.shape[0] != m:
            raise ValueError("score: hyp_a and hyp_b differ in length")
        if threads < 1:
            raise ValueError(f"threads must be >= 1, not {threads}")
        for i in range(m):
            if not 0 <= hyp_a[i] <= hyp_b[i] <= buf.shape[0]:
                raise ValueError(f"score: hypothesis {i} outside the buffer")
        if ng < 0 or (m and (groups[0] != 0 or groups[ng] != m)):
            raise ValueError("score: groups must run from 0 to the number of hypotheses")
        for g in range(ng):
            if groups[g + 1] <= groups[g] and m:
                raise ValueError("score: groups must increase")
        offsets = np.empty(m + 1, np.int64)
        counts = np.empty(max(m, 1), np.int64)
        cdef int64_t[::1] off = offsets
        cdef int64_t[::1] cnt = counts
        for g in range(ng if m else 0):
            gw = 0
            for i in range(groups[g], groups[g + 1]):
                off[i] = words
                words += (hyp_b[i] - hyp_a[i] + 1) // 2 + 1     # most words it can hold, + </s>
                gw += (hyp_b[i] - hyp_a[i] + 1) // 2 + 1
            most = max(most, gw)
        off[m] = words
        threads = min(threads, max(ng, 1))
        self._reserve(words + 1, most, threads)
        out = np.empty(m, np.float64)
        cdef double[::1] o = out
        if m:
            self._parallel(p, &hyp_a[0], &hyp_b[0], &groups[0], ng, &off[0], &cnt[0], &o[0], threads)
        for i in range(threads):
            self.lookups += self.work[i].lookups
            self.work[i].lookups = 0
        return out

    cdef int _parallel(self, const uint8_t *p, const int64_t *a, const int64_t *b, const int64_t *groups,
                       Py_ssize_t ng, const int64_t *off, int64_t *cnt, double *out, int threads) except -1:
        cdef Py_ssize_t g
        cdef int err = 0
        if threads == 1:
            with nogil:
                for g in range(ng):
                    self._group(&self.work[0], p, a, b, groups[g], groups[g + 1], off, cnt, out)
            return 0
        for g in prange(ng, nogil=True, schedule="dynamic", num_threads=threads):
            if self._group(&self.work[threadid()], p, a, b, groups[g], groups[g + 1], off, cnt, out) < 0:
                err = 1
        if err:
            raise RuntimeError("scoring failed in a thread")
        return 0

    cdef int _group(self, Work *w, const uint8_t *p, const int64_t *a, const int64_t *b,
                    Py_ssize_t first, Py_ssize_t end, const int64_t *off, int64_t *cnt,
                    double *out) except -1 nogil:
        cdef Py_ssize_t h, words = 0
        cdef float total
        for h in range(first, end):
            cnt[h] = self._tokenise(p + a[h], b[h] - a[h], self.tok + off[h])
            words += cnt[h]
        _reset(w, words, self.core, self.bos)
        for h in range(first, end):
            total = 0
            self._one(w, self.tok + off[h], cnt[h], off[h], &total)
            out[h] = total
        return 0

    cdef Py_ssize_t _tokenise(self, const uint8_t *p, Py_ssize_t n, WordId *t) noexcept nogil:
        cdef Py_ssize_t k = 0, start, count = 0
        while True:
            while k < n and is_word_delimiter(p[k]):
                k += 1
            if k >= n:
                break
            start = k
            while k < n and not is_word_delimiter(p[k]):
                k += 1
            t[count] = self.vocab.index(<const char *>p + start, k - start)
            count += 1
        if self.eos:
            t[count] = self.core.eos_id
            count += 1
        return count

    cdef int _one(self, Work *w, const WordId *t, Py_ssize_t n, int64_t base, float *total) except -1 nogil:
        cdef uint64_t *sh = self.sh + base
        cdef float *P = self.probs + base
        cdef int32_t node = 0, c
        cdef Py_ssize_t j, hit = n
        cdef uint64_t h = 0xCBF29CE484222325ULL
        cdef Ret ret
        cdef bint found
        cdef uint64_t slot
        for j in range(n - 1, -1, -1):        # hashes of the suffixes t[j:n] (FNV-1a)
            h = (h ^ t[j]) * 0x100000001B3ULL
            sh[j] = h
        j = 0
        while j < n:                            # the longest prefix already scored
            c = _child(w, node, t[j], False)
            if c < 0:
                break
            node = c
            j += 1
        while j < n:
            slot = self._cache_slot(w, sh[j], t + j, n - j, &w.pstate[node], &found)
            if found:                           # a known state before known words
                memcpy(P + j, self.probs + w.cpos[slot], (n - j) * sizeof(float))
                hit = j
                break
            w.cpnode[slot], w.cpos[slot], w.clen[slot] = node, base + j, <int32_t>(n - j)
            c = _child(w, node, t[j], True)
            self.core.score_word(&w.pstate[node], t[j], &w.pstate[c], &ret)
            w.lookups += 1
            P[j] = ret.prob
            w.ptotal[c] = w.ptotal[node] + ret.prob
            node = c
            j += 1
        total[0] = w.ptotal[node]
        for j in range(hit, n):
            total[0] += P[j]
        return 0

    cdef inline uint64_t _cache_slot(self, Work *w, uint64_t suffix, const WordId *t, Py_ssize_t n,
                                     const NState *st, bint *found) noexcept nogil:
        """The cache slot of (state ``st``, the words t[:n]), whose hash is ``suffix``:
        found, or claimed for the caller to fill."""
        cdef uint64_t h = fmix64(suffix ^ (_state_hash(st) * 0xC2B2AE3D27D4EB4FULL))
        cdef uint64_t b
        if h == EMPTY:
            h -= 1
        b = h & w.mask
        while w.ckeys[b] != EMPTY:
            if (w.ckeys[b] == h and w.clen[b] == n and _state_eq(&w.pstate[w.cpnode[b]], st)
                    and memcmp(self.tok + w.cpos[b], t, n * sizeof(WordId)) == 0):
                found[0] = True
                return b
            b = (b + 1) & w.mask
        found[0] = False
        w.ckeys[b] = h          # claimed; the caller fills it
        return b


cdef void _reset(Work *w, Py_ssize_t words, LMCore core, bint bos) noexcept nogil:
    """Empty tables sized for a group of ``words`` words; node 0 is the start."""
    cdef uint64_t slots = 64
    while slots < 2 * <uint64_t>(words + 2):
        slots <<= 1
    w.mask = slots - 1
    memset(w.pkeys, 0xFF, slots * sizeof(uint64_t))
    memset(w.ckeys, 0xFF, slots * sizeof(uint64_t))
    if bos:
        core.begin_state(&w.pstate[0])
    else:
        core.null_state(&w.pstate[0])
    w.ptotal[0] = 0
    w.n_pnodes = 1


cdef inline int32_t _child(Work *w, int32_t parent, WordId word, bint add) noexcept nogil:
    """The prefix node after ``parent`` then ``word``: -1 when absent, or with
    ``add`` a new node."""
    cdef uint64_t key = _trie_key(parent, word)
    cdef uint64_t b = fmix64(key) & w.mask
    while w.pkeys[b] != EMPTY:
        if w.pkeys[b] == key:
            return w.pvals[b]
        b = (b + 1) & w.mask
    if not add:
        return -1
    w.pkeys[b] = key
    w.pvals[b] = w.n_pnodes
    w.n_pnodes += 1
    return w.pvals[b]


FORMAT_CODES = {"moses": FMT_MOSES, "plain": FMT_PLAIN}
