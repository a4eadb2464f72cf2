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
* a suffix trie numbers every distinct word suffix, and a cache maps (state before
  position j, suffix from j) to where those words' probabilities were stored: equal
  states and equal remaining words have equal futures (the protocol's contract), so
  once a hypothesis's state after an edit meets a known one, the rest is copied.

Totals are added word by word in float32 from the left, the same additions as
``Model.score``, so every total is bit-identical to it.
"""
cimport cython
from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcmp, memcpy, memset

import numpy as np

from nplm._hashing cimport fmix64
from nplm._kernels cimport LMCore, NState, Ret, Vocab, WordId
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


cdef inline bint _space(uint8_t c) noexcept nogil:
    # KenLM's and the scoring kernels' delimiters (bytes.split()'s): \t \n \v \f \r, space
    return c == 32 or (c >= 9 and c <= 13)


# ---------------------------------------------------------------------------------
# Lines

cdef int _scan_line(const uint8_t *p, Py_ssize_t a, Py_ssize_t e, int fmt, int64_t *f) noexcept nogil:
    """Fields of line p[a:e] (no newline) into f: hyp start, hyp end, insertion
    point, id start, id end, field count.  Returns a SCAN_ code."""
    cdef Py_ssize_t k = a, c = e, sep0 = -1, sep1 = -1, sep2 = -1, nf = 1
    while k < e and _space(p[k]):
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
        while k > sep1 + 3 and _space(p[k - 1]):
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
    while k < c and _space(p[k]):
        k += 1
    while c > k and _space(p[c - 1]):
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
                    if _space(p[i]):
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
        h = fmix64(h * 0x9E3779B97F4A7C15ULL + s.words[i])
    return h


cdef inline bint _state_eq(const NState *a, const NState *b) noexcept nogil:
    return a.length == b.length and memcmp(a.words, b.words, a.length * sizeof(WordId)) == 0


cdef class SharedScorer:
    """Totals of many hypotheses under one model (its LMCore and Vocab), sharing the
    prefixes and suffixes they have in common (module docstring).  The tables are
    kept between calls and grown as needed."""
    cdef LMCore core
    cdef Vocab vocab
    cdef bint bos, eos
    cdef Py_ssize_t cap          # tokens the buffers hold
    cdef uint64_t mask           # hash table size - 1
    cdef WordId *tok
    cdef int64_t *off
    cdef Py_ssize_t off_cap
    cdef float *probs
    cdef int32_t *sn             # suffix node of each position
    cdef NState *pstate          # prefix node -> state after it
    cdef float *ptotal           # prefix node -> float32 total
    cdef int32_t n_pnodes, n_snodes
    cdef public int64_t lookups      # words scored by the model (the rest were shared)
    cdef uint64_t *pkeys
    cdef int32_t *pvals
    cdef uint64_t *skeys
    cdef int32_t *svals
    cdef uint64_t *ckeys
    cdef int32_t *csnode
    cdef int32_t *cpnode
    cdef int64_t *cpos

    def __init__(self, LMCore core not None, Vocab vocab not None, bint bos=True, bint eos=True):
        self.core, self.vocab, self.bos, self.eos = core, vocab, bos, eos

    def __dealloc__(self):
        self._free()
        free(self.off)

    cdef void _free(self) noexcept:
        free(self.tok)
        free(self.probs)
        free(self.sn)
        free(self.pstate)
        free(self.ptotal)
        free(self.pkeys)
        free(self.pvals)
        free(self.skeys)
        free(self.svals)
        free(self.ckeys)
        free(self.csnode)
        free(self.cpnode)
        free(self.cpos)
        self.tok = NULL
        self.probs = NULL
        self.sn = NULL
        self.pstate = NULL
        self.ptotal = NULL
        self.pkeys = self.skeys = self.ckeys = NULL
        self.pvals = self.svals = self.csnode = self.cpnode = NULL
        self.cpos = NULL
        self.cap = 0

    cdef int _reserve(self, Py_ssize_t tokens, Py_ssize_t lines) except -1:
        cdef Py_ssize_t slots = 1, need = tokens + 2
        if lines + 1 > self.off_cap:
            free(self.off)
            self.off = <int64_t *>malloc((lines + 1) * sizeof(int64_t))
            if self.off == NULL:
                self.off_cap = 0
                raise MemoryError(f"cannot allocate offsets of {lines} hypotheses")
            self.off_cap = lines + 1
        if need <= self.cap:
            return 0
        self._free()
        need = max(need, 2 * self.cap)
        while slots < 2 * need or slots < 64:
            slots <<= 1
        self.tok = <WordId *>malloc(need * sizeof(WordId))
        self.probs = <float *>malloc(need * sizeof(float))
        self.sn = <int32_t *>malloc(need * sizeof(int32_t))
        self.pstate = <NState *>malloc(need * sizeof(NState))
        self.ptotal = <float *>malloc(need * sizeof(float))
        self.pkeys = <uint64_t *>malloc(slots * sizeof(uint64_t))
        self.pvals = <int32_t *>malloc(slots * sizeof(int32_t))
        self.skeys = <uint64_t *>malloc(slots * sizeof(uint64_t))
        self.svals = <int32_t *>malloc(slots * sizeof(int32_t))
        self.ckeys = <uint64_t *>malloc(slots * sizeof(uint64_t))
        self.csnode = <int32_t *>malloc(slots * sizeof(int32_t))
        self.cpnode = <int32_t *>malloc(slots * sizeof(int32_t))
        self.cpos = <int64_t *>malloc(slots * sizeof(int64_t))
        if (self.tok == NULL or self.probs == NULL or self.sn == NULL
                or self.pstate == NULL or self.ptotal == NULL or self.pkeys == NULL
                or self.pvals == NULL or self.skeys == NULL or self.svals == NULL
                or self.ckeys == NULL or self.csnode == NULL or self.cpnode == NULL or self.cpos == NULL):
            self._free()
            raise MemoryError(f"cannot allocate rescoring tables for {tokens} words")
        self.cap = need
        return 0

    @cython.boundscheck(False)
    def score(self, const uint8_t[::1] buf, const int64_t[::1] hyp_a, const int64_t[::1] hyp_b,
              const int64_t[::1] groups):
        """float64 totals of the hypotheses buf[hyp_a[i]:hyp_b[i]], each equal to
        the model's score() of it (sentence start and end as set at construction).
        Work is shared within each group of lines groups[g]:groups[g + 1] (the
        hypotheses of one sentence: small tables that stay in cache)."""
        cdef Py_ssize_t m = hyp_a.shape[0], i, k, tokens = 0, ng = groups.shape[0] - 1
        cdef const uint8_t *p = &buf[0] if buf.shape[0] else NULL
        if hyp_b.shape[0] != m:
            raise ValueError("score: hyp_a and hyp_b differ in length")
        for i in range(m):
            if not 0 <= hyp_a[i] <= hyp_b[i] <= buf.shape[0]:
                raise ValueError(f"score: hypothesis {i} outside the buffer")
        if ng < 0 or (m and (groups[0] != 0 or groups[ng] != m)):
            raise ValueError("score: groups must run from 0 to the number of hypotheses")
        for i in range(ng):
            if groups[i + 1] <= groups[i] and m:
                raise ValueError("score: groups must increase")
        with nogil:
            for i in range(m):
                tokens += 1
                for k in range(hyp_a[i], hyp_b[i]):
                    tokens += (not _space(p[k])) and (k == hyp_a[i] or _space(p[k - 1]))
        self._reserve(tokens, m)
        out = np.empty(m, np.float64)
        cdef double[::1] o = out
        with nogil:
            self._tokenise(p, &hyp_a[0] if m else NULL, &hyp_b[0] if m else NULL, m)
            for i in range(ng if m else 0):
                self._reset(self.off[groups[i + 1]] - self.off[groups[i]])
                self._run(groups[i], groups[i + 1], &o[0])
        return out

    cdef void _tokenise(self, const uint8_t *p, const int64_t *a, const int64_t *b,
                        Py_ssize_t m) noexcept nogil:
        cdef Py_ssize_t i, k, start, t = 0
        for i in range(m):
            self.off[i] = t
            k = a[i]
            while True:
                while k < b[i] and _space(p[k]):
                    k += 1
                if k >= b[i]:
                    break
                start = k
                while k < b[i] and not _space(p[k]):
                    k += 1
                self.tok[t] = self.vocab.index(<const char *>p + start, k - start)
                t += 1
            if self.eos:
                self.tok[t] = self.core.eos_id
                t += 1
        self.off[m] = t

    cdef void _reset(self, Py_ssize_t tokens) noexcept nogil:
        """Empty tables sized for a group of ``tokens`` words."""
        cdef uint64_t slots = 64
        while slots < 2 * <uint64_t>(tokens + 2):
            slots <<= 1
        self.mask = slots - 1
        memset(self.pkeys, 0xFF, slots * sizeof(uint64_t))
        memset(self.skeys, 0xFF, slots * sizeof(uint64_t))
        memset(self.ckeys, 0xFF, slots * sizeof(uint64_t))
        if self.bos:
            self.core.begin_state(&self.pstate[0])
        else:
            self.core.null_state(&self.pstate[0])
        self.ptotal[0] = 0
        self.n_pnodes = 1
        self.n_snodes = 1

    cdef inline int32_t _child(self, uint64_t *keys, int32_t *vals, int32_t parent, WordId w,
                               int32_t *count) noexcept nogil:
        """Child of ``parent`` by ``w``; with ``count``, created (numbered
        count[0]++) when absent, else -1 when absent."""
        cdef uint64_t key = _trie_key(parent, w)
        cdef uint64_t b = fmix64(key) & self.mask
        while keys[b] != EMPTY:
            if keys[b] == key:
                return vals[b]
            b = (b + 1) & self.mask
        if count == NULL:
            return -1
        keys[b] = key
        vals[b] = count[0]
        count[0] += 1
        return vals[b]

    cdef inline uint64_t _cache_slot(self, int32_t snode, const NState *st, bint *found) noexcept nogil:
        cdef uint64_t h = fmix64(_state_hash(st) ^ (<uint64_t>snode * 0xC2B2AE3D27D4EB4FULL))
        cdef uint64_t b
        if h == EMPTY:
            h -= 1
        b = h & self.mask
        while self.ckeys[b] != EMPTY:
            if self.ckeys[b] == h and self.csnode[b] == snode and _state_eq(&self.pstate[self.cpnode[b]], st):
                found[0] = True
                return b
            b = (b + 1) & self.mask
        found[0] = False
        self.ckeys[b] = h       # claimed; the caller fills it or gives it back
        return b

    cdef int _run(self, Py_ssize_t first, Py_ssize_t end, double *out) except -1 nogil:
        cdef Py_ssize_t h
        cdef float total
        for h in range(first, end):
            total = 0
            self._one(self.tok + self.off[h], self.off[h + 1] - self.off[h], self.off[h], &total)
            out[h] = total
        return 0

    cdef int _one(self, const WordId *t, Py_ssize_t n, int64_t base, float *total) except -1 nogil:
        cdef int32_t *sn = self.sn + base
        cdef float *P = self.probs + base
        cdef int32_t s = 0, node = 0, c
        cdef Py_ssize_t j, hit = n
        cdef NState st, nxt
        cdef Ret ret
        cdef bint found
        cdef uint64_t slot
        for j in range(n - 1, -1, -1):
            s = self._child(self.skeys, self.svals, s, t[j], &self.n_snodes)
            sn[j] = s
        j = 0
        while j < n:
            c = self._child(self.pkeys, self.pvals, node, t[j], NULL)
            if c < 0:
                break
            node = c
            j += 1
        st = self.pstate[node]
        while j < n:
            slot = self._cache_slot(sn[j], &st, &found)
            if found:
                memcpy(P + j, self.probs + self.cpos[slot], (n - j) * sizeof(float))
                hit = j
                break
            self.csnode[slot], self.cpnode[slot], self.cpos[slot] = sn[j], node, base + j
            self.core.score_word(&st, t[j], &nxt, &ret)
            self.lookups += 1
            P[j] = ret.prob
            c = self._child(self.pkeys, self.pvals, node, t[j], &self.n_pnodes)
            self.pstate[c] = nxt
            self.ptotal[c] = self.ptotal[node] + ret.prob
            node = c
            st = nxt
            j += 1
        total[0] = self.ptotal[node]
        for j in range(hit, n):
            total[0] += P[j]
        return 0


FORMAT_CODES = {"moses": FMT_MOSES, "plain": FMT_PLAIN}
