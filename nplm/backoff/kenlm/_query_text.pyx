# KenLM's query program over a KenLM binary file in one loop: standard input read in
# large blocks, split into lines and words, scored (kenlm_query.h) and printed as
# KenLM's QueryPrinter prints them, without building a Python object per line or
# word.  It is the query program's path for KenLM binaries, whose whole run must be
# as short as KenLM's own: this module imports neither numpy nor nplm._kernels
# (whose import alone takes longer than KenLM's query of a test set).  Every other
# model kind goes through nplm.Model (nplm/cli/kenlm/query.py).
#
# The file is mapped by the caller; a page lost because the file shrank under the
# mapping becomes MappedFileChanged before the block that read it is printed
# (mapguard.h, whose state this module holds for its own mappings).
cimport cython
from cpython.exc cimport PyErr_CheckSignals, PyErr_SetFromErrno
from libc.errno cimport EINTR, errno
from libc.stdint cimport uint8_t, uint32_t, uint64_t, uintptr_t
from libc.stdlib cimport calloc, free, malloc, realloc
from libc.string cimport memchr, memcpy, memmove
from cython.parallel cimport prange
from posix.unistd cimport read, write

from nplm._words cimport is_word_delimiter
from nplm._arpa_float cimport format_float
from nplm.backoff.kenlm._klm_tables cimport (
    bytes_at, klm_hash_word, klm_probing, klm_probing_score_run, klm_probing_vocab_index, klm_ret,
    klm_sorted_vocab_index, klm_state, klm_trie, klm_trie_score_run, set_probing, set_trie)

import nplm._threads  # no-cython-lint (OpenMP's at-fork handler, as every kernel module has)
from nplm.errors import FormatError, MappedFileChanged

cdef extern from "kenlm_check.h" nogil:
    int klm_bad_score(float p)

cdef extern from "mapguard.h" nogil:
    int nplm_guard_install()
    int nplm_guard_add(uintptr_t lo, uintptr_t hi)
    void nplm_guard_remove(int slot, uintptr_t lo)
    int nplm_guard_damaged(int slot, uintptr_t lo)

cdef enum:
    RUN = 256           # words scored per call of the run scorer
    BLOCK = 1 << 20     # bytes of standard input read at a time
    PART = 1 << 15      # the least input worth a thread of its own


MAX_ORDER = 16          # kenlm_query.h's KLM_MAX_ORDER (checked in _klm_tables.pxd)


cdef struct Out:
    char *buf
    Py_ssize_t n, cap
    int fd


cdef int _reserve(Out *o, Py_ssize_t more) except -1 nogil:
    cdef char *grown
    if o.n + more <= o.cap:
        return 0
    grown = <char *>realloc(o.buf, 2 * (o.n + more))
    if grown == NULL:
        with gil:
            raise MemoryError()
    o.buf = grown
    o.cap = 2 * (o.n + more)
    return 0


cdef int _interrupted() except -1 nogil:
    """After a read or write that failed: 1 when a signal interrupted it (to retry,
    once Python's handlers have run), else raise the error as an OSError."""
    if errno == EINTR:
        with gil:
            PyErr_CheckSignals()
        return 1
    with gil:
        PyErr_SetFromErrno(OSError)


cdef int _drain(Out *o) except -1 nogil:
    """Write out everything buffered (all of it, through partial writes and EINTR)."""
    cdef Py_ssize_t done = 0, w
    while done < o.n:
        w = write(o.fd, o.buf + done, o.n - done)
        if w < 0:
            _interrupted()
            continue
        done += w
    o.n = 0
    return 0


cdef inline Py_ssize_t _uint(char *p, uint64_t v) noexcept nogil:
    cdef char tmp[24]
    cdef int k = 0, i
    while True:
        tmp[k] = <char>(48 + v % 10)
        k += 1
        v //= 10
        if v == 0:
            break
    for i in range(k):
        p[i] = tmp[k - 1 - i]
    return k


cdef struct Floats:
    float *v
    Py_ssize_t n, cap


cdef int _push(Floats *f, float x) except -1 nogil:
    cdef float *grown
    if f.n == f.cap:
        grown = <float *>realloc(f.v, sizeof(float) * (2 * f.cap + 1024))
        if grown == NULL:
            with gil:
                raise MemoryError()
        f.v = grown
        f.cap = 2 * f.cap + 1024
    f.v[f.n] = x
    f.n += 1
    return 0


cdef struct Part:
    # One share of a block of lines, scored by one thread: its output, and what the
    # summary needs from it in line order (the sums are added in order afterwards,
    # so that they come out as one thread's would).
    const char *s
    Py_ssize_t n
    Out o
    Floats totals           # each finished line's float32 total
    Floats oov_probs        # each OOV token's probability
    uint64_t tokens
    uint64_t oovs


cdef struct Totals:
    double log10_prob       # the finished lines' float32 totals, added in double
    double log10_prob_oov   # the OOV tokens' probabilities, added in double
    uint64_t tokens
    uint64_t oovs


cdef int _fold(Part *p, Totals *t) except -1 nogil:
    """Write out the part's output and add its results to the totals, in order."""
    cdef Py_ssize_t i
    _drain(&p.o)
    for i in range(p.totals.n):
        t.log10_prob += <double>p.totals.v[i]
    for i in range(p.oov_probs.n):
        t.log10_prob_oov += <double>p.oov_probs.v[i]
    t.tokens += p.tokens
    t.oovs += p.oovs
    p.totals.n = p.oov_probs.n = 0
    p.tokens = p.oovs = 0
    return 0


@cython.final
cdef class TextQuery:
    """Query loop over the tables ``tables`` (reader.tables) of a KenLM binary mapped
    as ``mem`` (a read-only buffer the object keeps)."""
    cdef klm_probing probing
    cdef klm_trie trie
    cdef bint is_trie
    cdef const uint8_t *vocab
    cdef uint64_t vocab_entries
    cdef bint sorted_vocab
    cdef uint32_t bos, eos
    cdef float bos_backoff
    cdef object mem
    cdef object path
    cdef int slot
    cdef uintptr_t lo

    def __cinit__(self):
        self.slot = -1

    def __init__(self, mem, dict tables, path):
        cdef Py_ssize_t offset = tables["vocab"][0]
        cdef const uint8_t *first
        self.mem = mem
        self.path = path
        self.is_trie = tables["trie"]
        self.vocab_entries = tables["vocab"][1]
        self.sorted_vocab = tables["vocab"][2]
        self.vocab = bytes_at(mem, offset, self.vocab_entries * (8 if self.sorted_vocab else 12))
        if not self.sorted_vocab and self.vocab_entries == 0:
            raise ValueError("empty vocabulary hash table")
        if self.is_trie:
            set_trie(&self.trie, mem, tables["order"], tables["unigram"], tables["orders"])
        else:
            set_probing(&self.probing, mem, tables["order"], tables["unigram"], tables["middle"],
                        tables["longest"], tables["rest"])
        self.bos = self._index(b"<s>", 3)
        self.eos = self._index(b"</s>", 4)
        cdef uint64_t n_unigram = self.trie.n_unigram if self.is_trie else self.probing.n_unigram
        if self.bos >= n_unigram or self.eos >= n_unigram:
            raise ValueError("<s> or </s> outside the unigrams")
        if self.is_trie:
            self.bos_backoff = (<const float *>(self.trie.unigram + <uint64_t>self.bos * 16))[1]
        else:
            self.bos_backoff = (<const float *>(self.probing.unigram
                                                + <uint64_t>self.bos * self.probing.unigram_stride))[1]
        first = bytes_at(mem, 0, len(mem))
        if nplm_guard_install() == 0:
            self.lo = <uintptr_t>first
            self.slot = nplm_guard_add(self.lo, self.lo + <uintptr_t>len(mem))

    def __dealloc__(self):
        if self.slot >= 0:
            nplm_guard_remove(self.slot, self.lo)

    cdef inline uint32_t _index(self, const char *s, Py_ssize_t n) noexcept nogil:
        cdef uint64_t h = klm_hash_word(s, n)
        if self.sorted_vocab:
            return klm_sorted_vocab_index(<const uint64_t *>self.vocab, self.vocab_entries, h)
        return klm_probing_vocab_index(self.vocab, self.vocab_entries, h)

    cdef int _check(self, const klm_ret *rets, int n) except -1 nogil:
        """A score no sound file gives (klm_bad_score), or a lost page."""
        cdef int i
        cdef float p
        if self.slot >= 0 and nplm_guard_damaged(self.slot, self.lo):
            with gil:
                raise MappedFileChanged(f"{self.path}: the file changed (it was truncated) while it was mapped")
        for i in range(n):
            p = rets[i].prob
            if klm_bad_score(p):
                with gil:
                    raise FormatError(f"corrupt KenLM binary: a log10 probability of {p:g} from its n-grams "
                                      "(nplm verify checks every n-gram)", self.path)
        return 0

    def run(self, int in_fd, int out_fd, bint words, bint lines, bint context, bint flush, int threads=1):
        """Read in_fd to its end and write query's output to out_fd: word items when
        ``words``, Total lines when ``lines``, <s> and </s> around each line when
        ``context``, every line written as soon as it is scored when ``flush``.
        A block of input is shared among up to ``threads`` threads (unless
        ``flush``).  Returns (log10_prob, log10_prob_oov, tokens, oovs) for the
        summary."""
        cdef Totals t
        cdef Part *parts = <Part *>calloc(max(threads, 1), sizeof(Part))
        cdef char *buf = <char *>malloc(BLOCK)
        cdef Py_ssize_t cap = BLOCK, have = 0, got, end
        cdef int used, k
        cdef bint eof = False
        cdef char *grown
        t.log10_prob = t.log10_prob_oov = 0.0
        t.tokens = t.oovs = 0
        try:
            if buf == NULL or parts == NULL:
                raise MemoryError()
            for k in range(max(threads, 1)):
                parts[k].o.fd = out_fd
            with nogil:
                while not eof:
                    got = read(in_fd, buf + have, cap - have)
                    if got < 0:
                        _interrupted()
                        continue
                    eof = got == 0
                    have += got
                    end = have
                    while end > 0 and buf[end - 1] != 10:
                        end -= 1            # the complete lines: buf[0:end]
                    if flush:
                        self._each_line(buf, end, words, lines, context, &parts[0], &t)
                    else:
                        used = self._split(buf, end, threads, parts)
                        if used == 1:
                            self._lines(&parts[0], words, lines, context)
                        else:
                            for k in prange(used, num_threads=used, schedule="static", chunksize=1):
                                self._lines(&parts[k], words, lines, context)
                        for k in range(used):
                            _fold(&parts[k], &t)
                    if eof:
                        if have > end:      # a last line without a newline
                            self._line(buf + end, have - end, False, words, lines, context, &parts[0])
                            _fold(&parts[0], &t)
                        break
                    memmove(buf, buf + end, have - end)
                    have -= end
                    if have == cap:         # one line longer than the buffer
                        grown = <char *>realloc(buf, 2 * cap)
                        if grown == NULL:
                            with gil:
                                raise MemoryError()
                        buf = grown
                        cap *= 2
        finally:
            free(buf)
            if parts != NULL:
                for k in range(max(threads, 1)):
                    free(parts[k].o.buf)
                    free(parts[k].totals.v)
                    free(parts[k].oov_probs.v)
                free(parts)
        return t.log10_prob, t.log10_prob_oov, t.tokens, t.oovs

    cdef int _split(self, const char *s, Py_ssize_t n, int threads, Part *parts) noexcept nogil:
        """Share the lines s[0:n] among up to ``threads`` parts (at line ends, PART
        bytes at least each); the number of parts."""
        cdef int used = 0, k
        cdef Py_ssize_t at = 0, cut
        cdef int want = <int>min(<Py_ssize_t>threads, max(n // PART, <Py_ssize_t>1))
        for k in range(want):
            if at >= n and k > 0:
                break
            cut = n if k == want - 1 else at + (n - at) // (want - k)
            while cut < n and cut > 0 and s[cut - 1] != 10:
                cut += 1
            parts[k].s, parts[k].n = s + at, cut - at
            at = cut
            used += 1
        return used

    cdef int _lines(self, Part *p, bint words, bint lines, bint context) except -1 nogil:
        """Score and print the part's lines (each ends with a newline)."""
        cdef const char *s = p.s
        cdef const char *nl
        cdef const char *stop = p.s + p.n
        while s < stop:
            nl = <const char *>memchr(s, 10, stop - s)
            self._line(s, nl - s, True, words, lines, context, p)
            s = nl + 1
        return 0

    cdef int _each_line(self, const char *s, Py_ssize_t n, bint words, bint lines, bint context, Part *p,
                        Totals *t) except -1 nogil:
        """_lines, writing each line out as soon as it is scored (query -b)."""
        cdef const char *nl
        cdef const char *stop = s + n
        while s < stop:
            nl = <const char *>memchr(s, 10, stop - s)
            self._line(s, nl - s, True, words, lines, context, p)
            _fold(p, t)
            s = nl + 1
        return 0

    cdef int _line(self, const char *s, Py_ssize_t n, bint finished, bint words, bint lines, bint context,
                   Part *p) except -1 nogil:
        """Score and print one line (``finished``: it ended with a newline; a last
        line without one gets no </s> and no Total line, and only its tokens and OOV
        probabilities count, as in KenLM's query)."""
        cdef klm_state st
        cdef uint32_t ids[RUN]
        cdef klm_ret rets[RUN]
        cdef Py_ssize_t starts[RUN]
        cdef Py_ssize_t lens[RUN]
        cdef Py_ssize_t i = 0, b
        cdef int k = 0
        cdef float total = 0
        cdef uint64_t oov = 0
        cdef bint eos = finished and context
        if context:
            st.length = 1
            st.words[0] = self.bos
            st.backoff[0] = self.bos_backoff
        else:
            st.length = 0
        while True:
            while i < n and is_word_delimiter(s[i]):
                i += 1
            if i >= n:
                break
            b = i
            while i < n and not is_word_delimiter(s[i]):
                i += 1
            starts[k], lens[k] = b, i - b
            ids[k] = self._index(s + b, i - b)
            k += 1
            if k == RUN:
                self._score(&st, ids, rets, k)
                self._print(s, starts, lens, ids, rets, k, False, words, p, &total, &oov)
                k = 0
        if eos:
            ids[k] = self.eos
            k += 1
        if k > 0:
            self._score(&st, ids, rets, k)
            self._print(s, starts, lens, ids, rets, k, eos, words, p, &total, &oov)
        cdef Out *o = &p.o
        if finished:
            if lines:
                _reserve(o, 64)
                memcpy(o.buf + o.n, b"Total: ", 7)
                o.n += 7
                o.n += format_float(total, o.buf + o.n)
                memcpy(o.buf + o.n, b" OOV: ", 6)
                o.n += 6
                o.n += _uint(o.buf + o.n, oov)
                o.buf[o.n] = 10
                o.n += 1
            _push(&p.totals, total)
            p.oovs += oov
        return 0

    cdef int _score(self, klm_state *st, const uint32_t *ids, klm_ret *rets, int k) except -1 nogil:
        if self.is_trie:
            klm_trie_score_run(&self.trie, st, ids, k, st, rets)
        else:
            klm_probing_score_run(&self.probing, st, ids, k, st, rets)
        return self._check(rets, k)

    cdef int _print(self, const char *s, const Py_ssize_t *starts, const Py_ssize_t *lens, const uint32_t *ids,
                    const klm_ret *rets, int k, bint ends_with_eos, bint words, Part *p, float *total,
                    uint64_t *oov) except -1 nogil:
        """Add the run's results to the line's total and OOV count (the last item is
        </s> when ``ends_with_eos``), printing ``word=id length prob`` items when
        ``words``."""
        cdef int j
        cdef bint is_eos
        cdef Out *o = &p.o
        for j in range(k):
            is_eos = ends_with_eos and j == k - 1
            total[0] += rets[j].prob
            p.tokens += 1
            if ids[j] == 0 and not is_eos:
                oov[0] += 1
                _push(&p.oov_probs, rets[j].prob)
            if not words:
                continue
            if is_eos:
                _reserve(o, 64)
                memcpy(o.buf + o.n, b"</s>", 4)
                o.n += 4
            else:
                _reserve(o, lens[j] + 64)
                memcpy(o.buf + o.n, s + starts[j], lens[j])
                o.n += lens[j]
            o.buf[o.n] = 61     # =
            o.n += 1
            o.n += _uint(o.buf + o.n, ids[j])
            o.buf[o.n] = 32
            o.n += 1
            o.n += _uint(o.buf + o.n, <uint64_t>rets[j].ngram_length)
            o.buf[o.n] = 32
            o.n += 1
            o.n += format_float(rets[j].prob, o.buf + o.n)
            o.buf[o.n] = 9
            o.n += 1
        return 0
