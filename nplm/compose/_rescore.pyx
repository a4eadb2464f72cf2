# cython: language_level=3
"""Kernels of n-best rescoring (``nplm/compose/rescore.py``).

``scan`` finds, in a buffer of complete n-best lines, each line's hypothesis, sentence
id and the point where the new features go (newlines and separators 64 bytes at a
time, nplm/src/nbest.h), and checks the line's shape; the Python layer turns an
error code into a message naming the file and line.  ``assemble`` writes the lines
back with the features spliced in (floats as the ARPA writer prints them).
``SharedScorer`` scores the hypotheses through any model's scoring protocol (LMCore)
without the GIL, sharing work between the hypotheses of one sentence (a run of equal
ids), which in an n-best list differ from each other by a few words:

* the sentence's words are found and keyed first (a word of up to 7 bytes is its
  bytes, a longer one its hash), 64 bytes at a time;
* the states met are interned (equal states, by the protocol's equality, share an
  id) and every (state, word) transition taken is kept with its probability and
  next state: equal states and equal words have equal futures (the protocol's
  contract), so each transition of the sentence goes to the model once, wherever
  in whichever hypothesis it recurs (about one word in six on the benchmark's
  lists);
* the transitions the model must score are the slow part (its tables are far
  bigger than the CPU caches): LANES hypotheses are walked in turn, each stopping
  at a new transition, asking the model to prefetch what it will read
  (LMCore.prefetch, its work kept in a Hint for score_hinted) and resumed after
  the others, so that the cache misses of several lookups overlap;
* word ids are looked up in the vocabulary once per word (a table of the words
  seen, kept across sentences).

Sentences are scored in parallel with ``threads``, each thread with its own tables.
Totals are added word by word in float32 from the left, the same additions as
``Model.score``, so every total is bit-identical to it.
"""
cimport cython
from cpython.bytes cimport PyBytes_FromStringAndSize
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport calloc, free, malloc, realloc
from libc.string cimport memcmp, memcpy, memset
from cython.parallel cimport prange, threadid

import numpy as np

from nplm._hashing cimport fmix64
from nplm._kernels cimport Hint, LMCore, NState, Ret, Vocab, WordId
from nplm._words cimport is_word_delimiter
from nplm._arpa_float cimport format_float

cdef extern from "nbest.h" nogil:
    size_t nplm_words(const uint8_t *p, size_t n, const uint8_t *limit, uint64_t *key, int64_t *start)
    size_t nplm_word_length(const uint8_t *p, size_t n)
    size_t nplm_count_lines(const uint8_t *p, size_t size)
    void nplm_line_fields(const uint8_t *p, size_t size, int moses, int64_t *fields, int32_t *count)

cdef enum:
    # longest text format_float writes (22 bytes), with room to spare
    MAX_FLOAT_TEXT = 24

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

# ---------------------------------------------------------------------------------
# Lines

cdef int _scan_line(const uint8_t *p, Py_ssize_t a, const int64_t *sep, int32_t n_sep, int fmt,
                    int64_t *f) noexcept nogil:
    """Fields of line p[a:sep[0]] (sep[0]: its end; sep[1..3]: its first three field
    separators, n_sep of them: nplm_line_fields) into f: hyp start, hyp end,
    insertion point, id start, id end, field count.  Returns a SCAN_ code."""
    cdef Py_ssize_t k = a, e = sep[0], c = sep[0], nf = n_sep + 1
    while k < e and is_word_delimiter(p[k]):
        k += 1
    if k == e:
        return SCAN_EMPTY
    f[5] = nf
    if fmt == FMT_MOSES:
        if nf < 4:
            return SCAN_FEW_FIELDS
        f[0], f[1] = sep[1] + 3, sep[2]
        k = sep[3]
        while k > sep[2] + 3 and is_word_delimiter(p[k - 1]):
            k -= 1
        f[2] = k
    else:
        while c > a and p[c - 1] == 13:      # rstrip(b"\r\n") of a line without its \n
            c -= 1
        if nf < 2:
            return SCAN_FEW_FIELDS
        f[0], f[1], f[2] = sep[1] + 1, (sep[2] if nf > 2 else c), c
    # the id: field 0 without surrounding white space, none inside
    k, c = a, sep[1]
    while k < c and is_word_delimiter(p[k]):
        k += 1
    while c > k and is_word_delimiter(p[c - 1]):
        c -= 1
    f[3], f[4] = k, c
    return SCAN_OK


@cython.boundscheck(False)
def scan(const uint8_t[::1] buf, int fmt, Py_ssize_t fields, bytes last_id):
    """The lines of ``buf`` (complete lines; the last may lack its newline).

    Returns (starts, hyp_a, hyp_b, ins, groups, fields, runs, last_id, error,
    error_index, found): starts[i] is line i's first byte (starts[n] = len(buf)),
    hyp_a:hyp_b its hypothesis, ins where the features go, groups the first line of
    each run of equal ids (then n), ``fields`` the field count every line must
    have (the first line's when 0 is passed), ``runs`` how many times the sentence id
    changes from ``last_id`` on, ``last_id`` the last line's id.  ``error`` is a SCAN_
    code for line ``error_index`` (0: none), ``found`` its field count."""
    cdef Py_ssize_t size = buf.shape[0], n, i, a, line = 0
    cdef const uint8_t *p = &buf[0] if size else NULL
    cdef int64_t f[6]
    cdef int err = SCAN_OK
    cdef Py_ssize_t runs = 0, prev_a = 0, prev_n = -1
    with nogil:
        n = nplm_count_lines(p, size)
    starts = np.empty(n + 1, np.int64)
    cols = np.empty((4, n), np.int64)
    groups = np.empty(n + 1, np.int64)
    seps = np.empty((n + 1, 4), np.int64)          # (nplm_line_fields starts a row past the last)
    counts = np.empty(n + 1, np.int32)
    cdef int64_t[::1] g = groups
    cdef Py_ssize_t n_groups = 0
    cdef int64_t[::1] s = starts
    cdef int64_t[:, ::1] o = cols
    cdef int64_t[:, ::1] sep = seps
    cdef int32_t[::1] cnt = counts
    cdef const char *lp = NULL
    cdef Py_ssize_t ln = -1
    if last_id is not None:
        lp = last_id
        ln = len(last_id)
    f[5] = 0
    with nogil:
        if n:
            nplm_line_fields(p, size, fmt == FMT_MOSES, &sep[0, 0], &cnt[0])
        a = 0
        while line < n:
            s[line] = a
            err = _scan_line(p, a, &sep[line, 0], cnt[line], fmt, f)
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
            a = sep[line, 0] + 1
            line += 1
        s[n] = size
        g[n_groups] = n
    if err != SCAN_OK:
        return None, None, None, None, None, fields, runs, last_id, err, line, f[5]
    if n:
        last_id = PyBytes_FromStringAndSize(<const char *>p + prev_a, prev_n)
    return starts, cols[0], cols[1], cols[2], groups[:n_groups + 1], fields, runs, last_id, 0, 0, 0


def assembled_size(Py_ssize_t size, Py_ssize_t lines, list labels):
    """The most bytes ``assemble`` writes for ``lines`` lines of ``size`` bytes."""
    return size + lines * sum(len(x) + MAX_FLOAT_TEXT for x in labels)


@cython.boundscheck(False)
def assemble(const uint8_t[::1] buf, const int64_t[::1] starts, const int64_t[::1] ins, list labels,
             const float[:, ::1] values, uint8_t[::1] out):
    """The lines of ``buf`` with, at each line's insertion point, label j then value j
    of every model j (``values[j, line]``), written to ``out`` (assembled_size()
    bytes at least); returns the number of bytes written."""
    cdef Py_ssize_t n = ins.shape[0], k = len(labels), i, j, pos = 0
    cdef const char *lab[64]
    cdef Py_ssize_t labn[64]
    if values.shape[0] != k or values.shape[1] != n or starts.shape[0] != n + 1:
        raise ValueError("assemble: values, labels and lines disagree")
    if k > 64:
        raise ValueError("at most 64 models at once")
    if out.shape[0] < assembled_size(buf.shape[0], n, labels):
        raise ValueError("assemble: the output buffer is too small")
    for j in range(k):
        lab[j] = labels[j]
        labn[j] = len(labels[j])
    cdef const char *p = <const char *>&buf[0] if buf.shape[0] else NULL
    cdef char *o = <char *>&out[0] if out.shape[0] else NULL
    with nogil:
        for i in range(n):
            memcpy(o + pos, p + starts[i], ins[i] - starts[i])
            pos += ins[i] - starts[i]
            for j in range(k):
                memcpy(o + pos, lab[j], labn[j])
                pos += labn[j]
                pos += format_float(values[j, i], o + pos)
            memcpy(o + pos, p + ins[i], starts[i + 1] - ins[i])
            pos += starts[i + 1] - ins[i]
    return pos


@cython.boundscheck(False)
def last_line_end(const uint8_t[::1] buf, Py_ssize_t start, Py_ssize_t end):
    """The index after the last newline of buf[start:end]; -1 when it has none."""
    cdef Py_ssize_t i = end
    if not 0 <= start <= end <= buf.shape[0]:
        raise ValueError("last_line_end: outside the buffer")
    while i > start:                    # (one line's length at most, from the end)
        if buf[i - 1] == 10:
            return i
        i -= 1
    return -1


# ---------------------------------------------------------------------------------
# Scoring with shared transitions

cdef struct Trans:
    # One (state, word) -> state transition of the model, with its probability.
    uint64_t word           # the word's key (nbest.h nplm_word_key); 0 for </s>
    int32_t state           # the state before the word (-1: a free slot)
    int32_t next            # the state after it
    float prob              # log10 p(word | state)


cdef struct Work:
    # One thread's tables for the sentence it is scoring: the states met, interned
    # (equal states share an id), and the transitions taken between them.
    NState *states          # id -> state
    uint64_t *state_hash    # id -> its hash
    uint64_t *state_slot    # id -> its slot in `ids` (to clear it)
    int32_t n_states
    int32_t states_cap
    int32_t *ids            # open addressing on the state's hash: slot -> id, or -1
    uint64_t ids_mask
    Trans *trans            # open addressing on (state, word)
    uint64_t *trans_used    # the slots taken (to clear them)
    int32_t n_trans
    uint64_t trans_mask
    uint64_t *word_key      # open addressing on word keys (0: a free slot): the
    WordId *word_id         # vocabulary ids of the words looked up (up to
    uint64_t *word_used     # WORDS_KEPT, then forgotten); the slots taken
    int32_t n_word
    uint64_t word_mask
    uint64_t *tok_key       # the sentence's words: their keys (0: </s>) and
    int64_t *tok_start      # where they start in their hypothesis
    int64_t *tok_first      # hypothesis i: words tok_first[i]:tok_first[i + 1]
    Py_ssize_t tok_cap
    Py_ssize_t hyp_cap
    int64_t lookups


cdef inline uint64_t _state_hash(const NState *s) noexcept nogil:
    cdef uint64_t h = s.length
    cdef int i
    for i in range(s.length):
        h = h * 0x9E3779B97F4A7C15ULL + s.words[i]
    return fmix64(h)


cdef inline bint _state_eq(const NState *a, const NState *b) noexcept nogil:
    return a.length == b.length and memcmp(a.words, b.words, a.length * sizeof(WordId)) == 0


cdef inline uint64_t _trans_hash(int32_t state, uint64_t word) noexcept nogil:
    # word keys are spread over their high bits already (nbest.h): a few cheap
    # operations on the walk's critical path mix the state in
    return (word >> 40) ^ (<uint64_t><uint32_t>state << 5) ^ <uint64_t><uint32_t>state


cdef void _work_free(Work *w) noexcept nogil:
    free(w.states)
    free(w.state_hash)
    free(w.state_slot)
    free(w.ids)
    free(w.trans)
    free(w.trans_used)
    free(w.word_key)
    free(w.word_id)
    free(w.word_used)
    free(w.tok_key)
    free(w.tok_start)
    free(w.tok_first)
    memset(w, 0, sizeof(Work))


cdef inline int _resize(void **block, size_t size) noexcept nogil:
    """realloc *block to size bytes; -1 (the block kept as it was) when out of memory."""
    cdef void *p = realloc(block[0], size)
    if p == NULL:
        return -1
    block[0] = p
    return 0


cdef int _grow_states(Work *w) noexcept nogil:
    """Room for twice as many states (the id table rebuilt); -1 when out of memory."""
    cdef int32_t cap = 2 * w.states_cap if w.states_cap else 256, i
    cdef uint64_t slots = 2 * <uint64_t>cap, b
    cdef void *p
    if (_resize(<void **>&w.states, cap * sizeof(NState)) < 0
            or _resize(<void **>&w.state_hash, cap * sizeof(uint64_t)) < 0
            or _resize(<void **>&w.state_slot, cap * sizeof(uint64_t)) < 0):
        return -1
    p = malloc(slots * sizeof(int32_t))
    if p == NULL:
        return -1
    free(w.ids)
    w.ids = <int32_t *>p
    w.ids_mask = slots - 1
    w.states_cap = cap
    memset(w.ids, 0xFF, slots * sizeof(int32_t))
    for i in range(w.n_states):
        b = w.state_hash[i] & w.ids_mask
        while w.ids[b] >= 0:
            b = (b + 1) & w.ids_mask
        w.ids[b] = i
        w.state_slot[i] = b
    return 0


cdef int _grow_trans(Work *w) noexcept nogil:
    """A transition table twice as large, the transitions moved; -1 when out of memory."""
    cdef uint64_t slots = 2 * (w.trans_mask + 1) if w.trans != NULL else 1024, b, i
    cdef Trans *old = w.trans
    cdef Trans *t
    if _resize(<void **>&w.trans_used, (slots // 2) * sizeof(uint64_t)) < 0:
        return -1
    t = <Trans *>malloc(slots * sizeof(Trans))
    if t == NULL:
        return -1
    for b in range(slots):
        t[b].state = -1
    for i in range(<uint64_t>w.n_trans):
        b = _trans_hash(old[w.trans_used[i]].state, old[w.trans_used[i]].word) & (slots - 1)
        while t[b].state >= 0:
            b = (b + 1) & (slots - 1)
        t[b] = old[w.trans_used[i]]
        w.trans_used[i] = b
    free(old)
    w.trans = t
    w.trans_mask = slots - 1
    return 0


cdef int _grow_words(Work *w) noexcept nogil:
    """A word table twice as large (1024 slots at first), the words moved; -1 when
    out of memory."""
    cdef uint64_t slots = 2 * (w.word_mask + 1) if w.word_key != NULL else 1024, b, i
    cdef uint64_t *keys
    cdef WordId *ids
    if _resize(<void **>&w.word_used, (slots // 2) * sizeof(uint64_t)) < 0:
        return -1
    keys = <uint64_t *>calloc(slots, sizeof(uint64_t))
    ids = <WordId *>malloc(slots * sizeof(WordId))
    if keys == NULL or ids == NULL:
        free(keys)
        free(ids)
        return -1
    for i in range(<uint64_t>w.n_word):
        b = (w.word_key[w.word_used[i]] >> 40) & (slots - 1)
        while keys[b]:
            b = (b + 1) & (slots - 1)
        keys[b] = w.word_key[w.word_used[i]]
        ids[b] = w.word_id[w.word_used[i]]
        w.word_used[i] = b
    free(w.word_key)
    free(w.word_id)
    w.word_key, w.word_id, w.word_mask = keys, ids, slots - 1
    return 0


cdef int32_t _intern(Work *w, const NState *s) noexcept nogil:
    """The id of state ``s``, added when new; -1 when out of memory."""
    cdef uint64_t h = _state_hash(s)
    cdef uint64_t b = h & w.ids_mask
    cdef int32_t i
    while w.ids[b] >= 0:
        i = w.ids[b]
        if w.state_hash[i] == h and _state_eq(&w.states[i], s):
            return i
        b = (b + 1) & w.ids_mask
    if w.n_states == w.states_cap:
        if _grow_states(w) < 0:
            return -1
        b = h & w.ids_mask
        while w.ids[b] >= 0:
            b = (b + 1) & w.ids_mask
    i = w.n_states
    w.n_states += 1
    memcpy(&w.states[i], s, sizeof(NState))
    w.state_hash[i] = h
    w.state_slot[i] = b
    w.ids[b] = i
    return i


cdef int _reset(Work *w, LMCore core, bint bos) noexcept nogil:
    """Empty tables whose state 0 is the sentence's start; -1 when out of memory."""
    cdef int32_t i
    cdef NState start
    if w.trans == NULL and _grow_trans(w) < 0:
        return -1
    if w.word_key == NULL and _grow_words(w) < 0:
        return -1
    if w.states == NULL and _grow_states(w) < 0:
        return -1
    for i in range(w.n_trans):
        w.trans[w.trans_used[i]].state = -1
    for i in range(w.n_states):
        w.ids[w.state_slot[i]] = -1
    w.n_trans = 0
    w.n_states = 0
    if bos:
        core.begin_state(&start)
    else:
        core.null_state(&start)
    return _intern(w, &start)


cdef enum:
    WORDS_KEPT = 1 << 16    # word ids remembered by a thread at most
    LANES = 8               # hypotheses of a sentence walked in turn


cdef struct Lane:
    # One hypothesis being walked: its words j..end-1 left (in Work's token
    # arrays), the state and float32 total so far, and the transition it waits
    # for when ``pending``.
    Py_ssize_t h            # the hypothesis (-1: the lane is idle)
    const uint8_t *p        # its bytes
    Py_ssize_t n
    Py_ssize_t j
    Py_ssize_t end
    int32_t s
    float total
    bint pending
    uint64_t word
    WordId wid
    Hint hint               # what the model's prefetch worked out for it


cdef inline void _lane_start(Lane *ln, Py_ssize_t h, Py_ssize_t first, const uint8_t *p, Py_ssize_t n,
                             Work *w) noexcept nogil:
    ln.h, ln.p, ln.n, ln.s, ln.total, ln.pending = h, p, n, 0, 0, False
    ln.j, ln.end = w.tok_first[h - first], w.tok_first[h - first + 1]


cdef int _tokens_reserve(Work *w, const int64_t *a, const int64_t *b, Py_ssize_t first,
                         Py_ssize_t end) noexcept nogil:
    """Token arrays for the words of hypotheses first..end-1; -1 when out of memory."""
    cdef Py_ssize_t h, need = 0
    for h in range(first, end):
        need += (b[h] - a[h]) // 2 + 2          # most words it can hold, + </s>
    if need > w.tok_cap:
        need = max(need, 2 * w.tok_cap)
        if (_resize(<void **>&w.tok_key, need * sizeof(uint64_t)) < 0
                or _resize(<void **>&w.tok_start, need * sizeof(int64_t)) < 0):
            return -1
        w.tok_cap = need
    if end - first + 1 > w.hyp_cap:
        need = max(end - first + 1, 2 * w.hyp_cap)
        if _resize(<void **>&w.tok_first, need * sizeof(int64_t)) < 0:
            return -1
        w.hyp_cap = need
    return 0


cdef int _no_memory() except -1 nogil:
    with gil:
        raise MemoryError("cannot allocate rescoring tables")


cdef class SharedScorer:
    """Totals of many hypotheses under one model (its LMCore and Vocab), each
    (state, word) transition of a group of hypotheses scored once (module
    docstring).  Groups are scored in parallel, each thread with its own tables,
    which are kept between calls and grown as needed."""
    cdef LMCore core
    cdef Vocab vocab
    cdef bint bos, eos
    cdef Work *work
    cdef int n_work
    cdef public int64_t lookups  # words scored by the model (the rest were shared)

    def __init__(self, LMCore core not None, Vocab vocab not None, bint bos=True, bint eos=True):
        self.core, self.vocab, self.bos, self.eos = core, vocab, bos, eos

    def __dealloc__(self):
        cdef int i
        for i in range(self.n_work):
            _work_free(&self.work[i])
        free(self.work)

    cdef int _reserve(self, int threads) except -1:
        cdef Work *p
        if threads > self.n_work:
            p = <Work *>realloc(self.work, threads * sizeof(Work))
            if p == NULL:
                raise MemoryError("cannot allocate rescoring tables")
            memset(p + self.n_work, 0, (threads - self.n_work) * sizeof(Work))
            self.work = p
            self.n_work = threads
        return 0

    @cython.boundscheck(False)
    def score(self, const uint8_t[::1] buf, const int64_t[::1] hyp_a, const int64_t[::1] hyp_b,
              const int64_t[::1] groups, int threads=1):
        """float64 totals of the hypotheses buf[hyp_a[i]:hyp_b[i]], each equal to
        the model's score() of it (sentence start and end as set at construction).
        Work is shared within each group of lines groups[g]:groups[g + 1] (the
        hypotheses of one sentence: small tables that stay in cache); ``threads``
        score groups in parallel."""
        cdef Py_ssize_t m = hyp_a.shape[0], i, g, ng = groups.shape[0] - 1
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
        threads = min(threads, max(ng, 1))
        self._reserve(threads)
        out = np.empty(m, np.float64)
        cdef double[::1] o = out
        if m:
            self._parallel(p, buf.shape[0], &hyp_a[0], &hyp_b[0], &groups[0], ng, &o[0], threads)
        for i in range(threads):
            self.lookups += self.work[i].lookups
            self.work[i].lookups = 0
        return out

    cdef int _parallel(self, const uint8_t *p, Py_ssize_t size, const int64_t *a, const int64_t *b,
                       const int64_t *groups, Py_ssize_t ng, double *out, int threads) except -1:
        cdef Py_ssize_t g
        cdef int err = 0
        if threads == 1:
            with nogil:
                for g in range(ng):
                    self._group(&self.work[0], p, size, a, b, groups[g], groups[g + 1], out)
        else:
            for g in prange(ng, nogil=True, schedule="dynamic", num_threads=threads):
                if self._group(&self.work[threadid()], p, size, a, b, groups[g], groups[g + 1], out) < 0:
                    err = 1
        if err:
            raise RuntimeError("scoring failed in a thread")
        return 0

    cdef int _group(self, Work *w, const uint8_t *p, Py_ssize_t size, const int64_t *a, const int64_t *b,
                    Py_ssize_t first, Py_ssize_t end, double *out) except -1 nogil:
        """Totals of hypotheses first..end-1 (one sentence) into out.  Their words
        are found and hashed first; then LANES hypotheses are walked in turn, each
        stopping at a transition the tables lack, asking the model to prefetch what
        it will read and resumed after the others have had their turn, so that the
        model's cache misses overlap."""
        cdef Lane lanes[LANES]
        cdef Lane *ln
        cdef Py_ssize_t h = first, words = 0
        cdef int i, active = 0
        if _reset(w, self.core, self.bos) < 0 or _tokens_reserve(w, a, b, first, end) < 0:
            _no_memory()
        for h in range(first, end):
            w.tok_first[h - first] = words
            words += nplm_words(p + a[h], b[h] - a[h], p + size, w.tok_key + words, w.tok_start + words)
            if self.eos:
                w.tok_key[words] = 0
                words += 1
        w.tok_first[end - first] = words
        h = first
        for i in range(LANES):
            lanes[i].h = -1
            if h < end:
                _lane_start(&lanes[i], h, first, p + a[h], b[h] - a[h], w)
                h += 1
                active += 1
        while active:
            for i in range(LANES):
                ln = &lanes[i]
                if ln.h < 0:
                    continue
                if ln.pending:
                    self._resume(w, ln)
                while not self._advance(w, ln):     # the hypothesis is done
                    out[ln.h] = ln.total
                    if h == end:
                        ln.h = -1
                        active -= 1
                        break
                    _lane_start(ln, h, first, p + a[h], b[h] - a[h], w)
                    h += 1
        return 0

    cdef inline bint _advance(self, Work *w, Lane *ln) noexcept nogil:
        """Walk the lane's words through known transitions: True when it stops at a
        new one (``pending``, prefetch requested), False at the end of its hypothesis."""
        cdef Py_ssize_t j = ln.j, end = ln.end
        cdef uint64_t word, bucket, mask = w.trans_mask
        cdef const uint64_t *keys = w.tok_key
        cdef const Trans *trans = w.trans
        cdef const Trans *t
        cdef int32_t s = ln.s
        cdef float total = ln.total           # (in a register, not through ln)
        cdef WordId wid
        while j < end:
            word = keys[j]
            bucket = _trans_hash(s, word) & mask
            while True:
                t = &trans[bucket]
                if t.state == s and t.word == word:
                    break
                if t.state < 0:
                    t = NULL
                    break
                bucket = (bucket + 1) & mask
            if t == NULL:
                ln.j, ln.s, ln.total = j, s, total
                wid = self._word_id(w, word, ln.p + w.tok_start[j], ln.n - w.tok_start[j]) if word else self.core.eos_id
                self.core.prefetch(&w.states[s], wid, &ln.hint)
                ln.word, ln.wid, ln.pending = word, wid, True
                return True
            total += t.prob
            s = t.next
            j += 1
        ln.j, ln.s, ln.total = j, s, total
        return False

    cdef inline WordId _word_id(self, Work *w, uint64_t key, const uint8_t *p, Py_ssize_t n) noexcept nogil:
        """The vocabulary id of the word at p[:n] (``key`` its key; it ends at the
        first delimiter), from the vocabulary the first time (the table of words
        seen is smaller, and a list's sentences share most of their words)."""
        cdef uint64_t b = (key >> 40) & w.word_mask
        cdef WordId wid
        cdef int32_t i
        while w.word_key[b]:
            if w.word_key[b] == key:
                return w.word_id[b]
            b = (b + 1) & w.word_mask
        wid = self.vocab.index(<const char *>p, nplm_word_length(p, n))
        if w.n_word == WORDS_KEPT:               # forget them all (memory stays bounded)
            for i in range(w.n_word):
                w.word_key[w.word_used[i]] = 0
            w.n_word = 0
            b = (key >> 40) & w.word_mask
        elif 2 * (w.n_word + 1) > w.word_mask + 1:
            if _grow_words(w) < 0:
                return wid                      # (not remembered)
            b = (key >> 40) & w.word_mask
            while w.word_key[b]:
                b = (b + 1) & w.word_mask
        w.word_key[b], w.word_id[b] = key, wid
        w.word_used[w.n_word] = b
        w.n_word += 1
        return wid

    cdef int _resume(self, Work *w, Lane *ln) except -1 nogil:
        """The lane's pending transition: found in the tables (another lane added
        it meanwhile) or scored by the model and added."""
        cdef uint64_t b = _trans_hash(ln.s, ln.word) & w.trans_mask
        cdef Trans *t
        cdef NState after
        cdef Ret ret
        cdef int32_t nxt
        ln.pending = False
        while True:
            t = &w.trans[b]
            if t.state == ln.s and t.word == ln.word:
                ln.total += t.prob
                ln.s = t.next
                ln.j += 1
                return 0
            if t.state < 0:
                break
            b = (b + 1) & w.trans_mask
        self.core.score_hinted(&w.states[ln.s], ln.wid, &ln.hint, &after, &ret)
        w.lookups += 1
        nxt = _intern(w, &after)
        if nxt < 0:
            _no_memory()
        if 2 * (w.n_trans + 1) > w.trans_mask + 1:
            if _grow_trans(w) < 0:
                _no_memory()
            b = _trans_hash(ln.s, ln.word) & w.trans_mask
            while w.trans[b].state >= 0:
                b = (b + 1) & w.trans_mask
        t = &w.trans[b]
        t.word, t.state, t.next, t.prob = ln.word, ln.s, nxt, ret.prob
        w.trans_used[w.n_trans] = b
        w.n_trans += 1
        ln.total += ret.prob
        ln.s = nxt
        ln.j += 1
        return 0


FORMAT_CODES = {"moses": FMT_MOSES, "plain": FMT_PLAIN}
