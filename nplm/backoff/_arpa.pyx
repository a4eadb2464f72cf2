# cython: language_level=3
"""Kernels of the ARPA reader and writer (see ``nplm/arpa.py``).

Reading: ``Parser.run`` parses the n-gram lines of one section from a buffer of
complete lines without the GIL: floats, the unigram vocabulary (a C open-addressing
hash table of the words' bytes) and the word ids of higher orders.  Everything that
is not an n-gram line (headers, blank lines between sections, ``\\end\\``) and every
error message is handled by the Python layer; the kernel only stops and says why.

Writing: ``format_rows`` prints n-gram lines into a byte buffer, floats as the
shortest decimal that reads back as the same float32 (like double-conversion's
``ToShortestSingle``, which lmplz uses).
"""
from libc.stdint cimport int32_t, int64_t, uint64_t
from libc.stdlib cimport malloc, realloc, free
from libc.string cimport memcpy, memcmp, memset
from nplm._arpa_float cimport ERR_FLOAT, ERR_NONFINITE, format_float, parse_float
from nplm._hashing cimport fmix64
from libc.math cimport INFINITY


cdef extern from *:
    void __builtin_prefetch(const void* p) noexcept nogil

cdef enum:
    MAX_N = 64   # highest order the reader accepts (arpa.MAX_ORDER)

# Return codes of Parser.run.  Codes >= ERR_FIRST are errors, described by
# err_line / err_start / err_tok / err_tok_end / err_other; Python words them.
cdef enum:
    DONE = 0            # the section has all its entries; the next line is Python's
    NEED_INPUT = 1      # the buffer is used up
    NEED_SPACE = 2      # the output arrays are full; grow them and call again
    BACKSLASH = 3       # a '\' line arrived before the header's count was reached
    ERR_FIRST = 10      # ERR_FLOAT (10: a malformed number, token in err_tok..err_tok_end)
    #                     and ERR_NONFINITE (11: overflows float32) are arpa_float.h's
    ERR_POSITIVE = 12   # positive log10 probability
    ERR_TAB = 13        # unigram: no tab after the probability
    ERR_FEW_WORDS = 14  # the line ends before n words
    ERR_AFTER_WORDS = 15  # neither tab nor end of line after the n-th word
    ERR_AFTER_BACKOFF = 16  # junk after the back-off
    ERR_HIGHEST_BACKOFF = 17  # non-zero back-off on the highest order
    ERR_UNKNOWN_WORD = 18   # higher-order word not among the unigrams
    ERR_MEMORY = 21     # malloc failed (bytes wanted in err_other)

# Byte classes for the line scanner.  kARPASpaces in KenLM is tab, LF, CR, space.
cdef enum:
    C_WORD = 0
    C_SEP = 1    # space, tab
    C_CR = 2
    C_LF = 3
    C_NUL = 4

cdef unsigned char CLS[256]
memset(CLS, C_WORD, 256)
CLS[ord(' ')] = C_SEP
CLS[ord('\t')] = C_SEP
CLS[ord('\r')] = C_CR
CLS[ord('\n')] = C_LF
CLS[0] = C_NUL

# ---------------------------------------------------------------------------
# Numbers (nplm/src/arpa_float.h)


cdef inline int parse_prob(const unsigned char* p, const unsigned char** endp,
                           float* out) noexcept nogil:
    """A log10 probability: parse_float's numbers, and also -infinity as KenLM
    reads it (double-conversion with the symbol "inf"): the token ``-inf``, or a
    number below float32's range.  Back-offs stay finite (KenLM: "Bad backoff")."""
    cdef int r
    if p[0] == c'-' and p[1] == c'i' and p[2] == c'n' and p[3] == c'f':
        endp[0] = p + 4
        out[0] = -INFINITY
        return 0
    r = parse_float(p, endp, out)
    if r == ERR_NONFINITE and out[0] == -INFINITY:
        return 0
    return r


def format_floats(const float[::1] values):  # IN
    """The strings format_float writes, as a list of str (for tests)."""
    cdef char buf[64]
    cdef Py_ssize_t i
    cdef int n
    result = []
    for i in range(values.shape[0]):
        n = format_float(values[i], buf)
        result.append(buf[:n].decode("ascii"))
    return result


def parse_floats(list tokens):
    """parse_float on each bytes token: (float32 array, list of error codes) (tests)."""
    import numpy as np      # (the module imports without it)

    cdef Py_ssize_t i
    cdef bytes t
    cdef const unsigned char* end
    cdef float f
    cdef int r
    out = np.zeros(len(tokens), dtype=np.float32)
    codes = []
    for i in range(len(tokens)):
        t = tokens[i] + b"\n"
        f = 0
        r = parse_float(<const unsigned char*>t, &end, &f)
        if r == 0 and end != <const unsigned char*>t + len(t) - 1:
            r = ERR_FLOAT
        out[i] = f
        codes.append(r)
    return out, codes


# ---------------------------------------------------------------------------
# Word hashing


cdef inline uint64_t hash_word(const unsigned char* p, Py_ssize_t n,
                               const unsigned char* limit) noexcept nogil:
    """Hash of the n bytes at p.  When 8 bytes from the tail are readable (below
    ``limit``) the tail is one masked load; copying it byte by byte into a
    word would stall on store forwarding.  Both ways give the same hash."""
    cdef uint64_t h = <uint64_t>0x9E3779B97F4A7C15 ^ (<uint64_t>n * <uint64_t>0xc2b2ae3d27d4eb4f)
    cdef uint64_t w
    cdef Py_ssize_t i
    while n >= 8:
        memcpy(&w, p, 8)
        h = (h ^ w) * <uint64_t>0xbf58476d1ce4e5b9
        h ^= h >> 31
        p += 8
        n -= 8
    if n > 0:
        if p + 8 <= limit:
            memcpy(&w, p, 8)
            w &= (<uint64_t>1 << (8 * n)) - 1
        else:
            w = 0
            for i in range(n):
                w |= (<uint64_t>p[i]) << (8 * i)
        h = (h ^ w) * <uint64_t>0xbf58476d1ce4e5b9
        h ^= h >> 31
    return fmix64(h)


# ---------------------------------------------------------------------------
# Reader


ctypedef struct Slot:
    # One hash-table slot of a unigram word: its first HEAD bytes sit in the
    # slot, so that a lookup of a short word touches one (prefetched) cache line.
    uint64_t hash
    int32_t id          # -1 = empty
    int32_t len
    unsigned char head[16]


cdef enum:
    HEAD = 16


ctypedef struct State:
    # current section
    int n               # its order (1-based); words per line
    bint highest        # no back-off column expected (must be zero if present)
    int64_t need        # entries the header promised
    int64_t got         # entries parsed so far
    int64_t cap         # rows the output arrays hold
    int32_t* ids        # OUT (cap, n)
    float* prob         # OUT (cap,)
    float* backoff      # OUT (cap,)
    int64_t line        # lines consumed so far in the file
    int64_t first_line  # line of the first entry of this section (0 = none yet)
    # unigram vocabulary: word bytes back to back, offsets, hashes, hash table
    unsigned char* words
    int64_t words_len, words_cap
    int64_t* word_off   # (nwords + 1)
    uint64_t* word_hash
    int64_t nwords, nwords_cap
    Slot* table
    uint64_t mask       # table size - 1
    int32_t unk_id      # the unigram <unk>/<UNK> maps to in higher orders, -1 none
    int64_t dup_words   # unigrams listed again (each gets an id that no lookup finds)
    int64_t dup_line    # line of the first of them
    # error report
    int64_t err_line
    Py_ssize_t err_start, err_tok, err_tok_end
    int64_t err_other


cdef int _grow_words(State* st, Py_ssize_t extra) noexcept nogil:
    cdef int64_t cap
    cdef void* mem
    if st.words_len + extra > st.words_cap:
        cap = max(2 * st.words_cap, st.words_len + extra + 4096)
        mem = realloc(st.words, cap)
        if mem == NULL:
            st.err_other = cap
            return ERR_MEMORY
        st.words = <unsigned char*>mem
        st.words_cap = cap
    if st.nwords + 2 > st.nwords_cap:
        cap = max(2 * st.nwords_cap, 1024)
        mem = realloc(st.word_off, cap * sizeof(int64_t))
        if mem == NULL:
            st.err_other = cap * 8
            return ERR_MEMORY
        st.word_off = <int64_t*>mem
        mem = realloc(st.word_hash, cap * sizeof(uint64_t))
        if mem == NULL:
            st.err_other = cap * 8
            return ERR_MEMORY
        st.word_hash = <uint64_t*>mem
        st.nwords_cap = cap
    # keep the table at most half full
    if 2 * (st.nwords + 1) > <int64_t>(st.mask + 1):
        return _rehash(st, 2 * (st.mask + 1) if st.table != NULL else 2048)
    return 0


cdef int _rehash(State* st, uint64_t size) noexcept nogil:
    cdef Slot* table = <Slot*>malloc(size * sizeof(Slot))
    cdef int64_t i
    cdef uint64_t slot
    if table == NULL:
        st.err_other = size * sizeof(Slot)
        return ERR_MEMORY
    for slot in range(size):
        table[slot].id = -1
    for i in range(st.nwords):
        slot = st.word_hash[i] & (size - 1)
        while table[slot].id >= 0:
            slot = (slot + 1) & (size - 1)
        _fill(&table[slot], st, i)
    free(st.table)
    st.table = table
    st.mask = size - 1
    return 0


cdef inline void _fill(Slot* s, const State* st, int64_t id) noexcept nogil:
    cdef int64_t start = st.word_off[id], n = st.word_off[id + 1] - st.word_off[id]
    s.hash = st.word_hash[id]
    s.id = <int32_t>id
    s.len = <int32_t>n if n < 0x7fffffff else 0x7fffffff
    memcpy(s.head, st.words + start, n if n < HEAD else HEAD)


cdef inline bint _same(const unsigned char* a, const unsigned char* b, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        if a[i] != b[i]:
            return False
    return True


cdef inline int32_t _lookup(const State* st, const unsigned char* w, Py_ssize_t n,
                            uint64_t h, uint64_t* slot_out) noexcept nogil:
    """The id of word w (n bytes, hash h), or -1 with *slot_out its free slot."""
    cdef uint64_t slot = h & st.mask
    cdef const Slot* s
    while True:
        s = &st.table[slot]
        if s.id < 0:
            slot_out[0] = slot
            return -1
        if s.hash == h and s.len == n:
            if n <= HEAD:
                if _same(s.head, w, n):
                    return s.id
            elif _same(st.words + st.word_off[s.id], w, n):
                return s.id
        slot = (slot + 1) & st.mask


cdef inline int _error(State* st, int code, const unsigned char* base, const unsigned char* line,
                       const unsigned char* tok, const unsigned char* tok_end) noexcept nogil:
    st.err_line = st.line + 1
    st.err_start = line - base
    st.err_tok = tok - base
    st.err_tok_end = tok_end - base
    return code


cdef inline const unsigned char* _token_end(const unsigned char* p) noexcept nogil:
    while CLS[p[0]] == C_WORD:
        p += 1
    return p


cdef int parse_lines(State* st, const unsigned char* base, Py_ssize_t* pos,
                     Py_ssize_t end) noexcept nogil:
    """Parse the n-gram lines of the current section from base[*pos:end] (which
    ends with a newline) until the section is complete, the buffer or the output
    space runs out, or an error.  *pos advances past each consumed line."""
    cdef const unsigned char* p
    cdef const unsigned char* line
    cdef const unsigned char* tok
    cdef const unsigned char* w
    cdef const unsigned char* stop = base + end
    cdef int n = st.n, i, r
    cdef float prob, bo
    cdef int32_t id
    cdef int32_t* row
    cdef uint64_t h, slot
    cdef Py_ssize_t wlen
    cdef const unsigned char* wstart[MAX_N]
    cdef Py_ssize_t wlens[MAX_N]
    cdef uint64_t hashes[MAX_N]
    cdef bint again
    while True:
        if st.got == st.need:
            return DONE
        line = base + pos[0]
        if line >= stop:
            return NEED_INPUT
        p = line
        # Leading white space; white-space-only lines are skipped (KenLM's
        # ReadFloat skips them too).
        while p[0] == c' ' or p[0] == c'\t' or p[0] == c'\r' or p[0] == c'\v' or p[0] == c'\f':
            p += 1
        if p[0] == c'\n':
            pos[0] = p + 1 - base
            st.line += 1
            continue
        if p[0] == c'\\':
            st.err_line = st.line + 1
            st.err_start = line - base
            return BACKSLASH
        if st.got == st.cap:
            return NEED_SPACE
        # probability
        tok = p
        r = parse_prob(p, &p, &prob)
        if r != 0 or CLS[p[0]] == C_WORD:
            return _error(st, r if r else ERR_FLOAT, base, line, tok, _token_end(p))
        if prob > 0:
            return _error(st, ERR_POSITIVE, base, line, tok, p)
        if n == 1 and p[0] != c'\t':
            return _error(st, ERR_TAB, base, line, p, p + 1)
        # words: find and hash them all first, prefetching their table slots,
        # so that the cache misses of an n-gram's lookups overlap
        row = st.ids + st.got * n
        for i in range(n):
            while CLS[p[0]] == C_SEP or (p[0] == c'\r' and p[1] != c'\n'):
                p += 1
            if CLS[p[0]] >= C_CR:
                return _error(st, ERR_FEW_WORDS, base, line, p, p)
            wstart[i] = p
            while CLS[p[0]] == C_WORD:
                p += 1
            wlens[i] = p - wstart[i]
            hashes[i] = hash_word(wstart[i], wlens[i], stop)
            if n > 1:
                __builtin_prefetch(st.table + (hashes[i] & st.mask))
        for i in range(n):
            w = wstart[i]
            wlen = wlens[i]
            h = hashes[i]
            if n == 1:
                r = _grow_words(st, wlen)  # first: it may rebuild the table
                if r != 0:
                    return _error(st, r, base, line, w, w + wlen)
                id = _lookup(st, w, wlen, h, &slot)
                again = id >= 0
                if again and not (wlen == 5 and (memcmp(w, b"<unk>", 5) == 0 or memcmp(w, b"<UNK>", 5) == 0)):
                    # KenLM's probing vocabulary gives a word listed again a new id,
                    # which its lookups never reach: the first entry wins.  (<unk>
                    # listed again is the Python layer's: there the last one wins.)
                    if st.dup_words == 0:
                        st.dup_line = st.line + 1
                    st.dup_words += 1
                id = <int32_t>st.nwords
                memcpy(st.words + st.words_len, w, wlen)
                st.word_off[id] = st.words_len
                st.words_len += wlen
                st.word_off[id + 1] = st.words_len
                st.word_hash[id] = h
                if not again:
                    _fill(&st.table[slot], st, id)
                st.nwords += 1
            else:
                id = _lookup(st, w, wlen, h, &slot)
                if id < 0:
                    if (st.unk_id >= 0 and wlen == 5 and
                            (memcmp(w, b"<unk>", 5) == 0 or memcmp(w, b"<UNK>", 5) == 0)):
                        id = st.unk_id
                    else:
                        return _error(st, ERR_UNKNOWN_WORD, base, line, w, w + wlen)
            row[i] = id
        # optional back-off
        bo = 0
        if p[0] == c'\t':
            p += 1
            while p[0] == c' ' or p[0] == c'\t':
                p += 1
            tok = p
            r = parse_float(p, &p, &bo)
            if r != 0 or CLS[p[0]] == C_WORD:
                return _error(st, r if r else ERR_FLOAT, base, line, tok, _token_end(p))
            if st.highest and bo != 0:
                return _error(st, ERR_HIGHEST_BACKOFF, base, line, tok, p)
            if p[0] == c'\r' and p[1] == c'\n':
                p += 1
            if p[0] != c'\n':
                return _error(st, ERR_AFTER_BACKOFF, base, line, p, _token_end(p + 1))
        else:
            if p[0] == c'\r' and p[1] == c'\n':
                p += 1
            if p[0] != c'\n':
                return _error(st, ERR_AFTER_WORDS, base, line, p, _token_end(p + 1))
        st.prob[st.got] = prob
        st.backoff[st.got] = bo
        if st.got == 0:
            st.first_line = st.line + 1
        st.got += 1
        st.line += 1
        pos[0] = p + 1 - base


cdef class Parser:
    """Holds the reader's C state; ``arpa.py`` drives it section by section."""
    cdef State st
    cdef State b                        # the second half's state in split parsing
    cdef int split_codes[2]
    cdef Py_ssize_t split_pos[2]
    cdef Py_ssize_t split_stop[2]
    cdef int64_t split_entries_a
    cdef object _ids, _prob, _backoff   # the numpy arrays st points into

    def __cinit__(self):
        memset(&self.st, 0, sizeof(State))
        self.st.unk_id = -1

    def __dealloc__(self):
        free(self.st.words)
        free(self.st.word_off)
        free(self.st.word_hash)
        free(self.st.table)

    def start_section(self, int n, bint highest, int64_t need):
        if not 1 <= n <= MAX_N:
            raise ValueError(f"order {n} is outside 1..{MAX_N}")
        self.st.n = n
        self.st.highest = highest
        self.st.need = need
        self.st.got = 0
        self.st.cap = 0
        self.st.first_line = 0
        self._ids = self._prob = self._backoff = None

    def set_arrays(self, int32_t[:, ::1] ids, float[::1] prob, float[::1] backoff):  # OUT
        """Hand the kernel output arrays of ``cap`` rows; the first ``got`` rows must
        already hold the entries parsed so far (the caller copies them on growth)."""
        if ids.shape[1] != self.st.n or ids.shape[0] != prob.shape[0] or prob.shape[0] != backoff.shape[0]:
            raise ValueError("output arrays do not match the section")
        if ids.shape[0] < self.st.got:
            raise ValueError("output arrays smaller than what was parsed")
        self._ids, self._prob, self._backoff = ids, prob, backoff
        self.st.cap = ids.shape[0]
        self.st.ids = &ids[0, 0] if ids.shape[0] else NULL
        self.st.prob = &prob[0] if prob.shape[0] else NULL
        self.st.backoff = &backoff[0] if backoff.shape[0] else NULL

    def run(self, const unsigned char[::1] data, Py_ssize_t pos, Py_ssize_t end):  # IN
        """Parse section lines from data[pos:end] (end just past a newline).
        Returns (code, new_pos)."""
        cdef int code
        if end > data.shape[0] or pos < 0 or pos > end or (end > 0 and data[end - 1] != c'\n'):
            raise ValueError("run() needs a buffer of complete lines")
        if self.st.n == 0:
            raise ValueError("no section started")
        if end == pos:
            return NEED_INPUT if self.st.got < self.st.need else DONE, pos
        with nogil:
            code = parse_lines(&self.st, &data[0], &pos, end)
        return code, pos

    # Two-thread parsing of one buffer (orders >= 2 only: the vocabulary is
    # read-only then).  split_begin() sets up a second State for data[mid:end]
    # whose rows go right after the first half's entries (counted beforehand
    # by count_lines); split_part(0/1) parse the halves, each from its own
    # Python thread (the GIL is released); split_end() merges the states.

    def split_begin(self, const unsigned char[::1] data, Py_ssize_t pos, Py_ssize_t mid,
                    Py_ssize_t end, int64_t lines_a, int64_t entries_a):  # IN
        """data[pos:mid] holds lines_a lines, entries_a of them not blank; the
        caller checks that got + entries_a < need and that the arrays have room
        beyond got + entries_a."""
        cdef int n = self.st.n
        cdef int64_t got0 = self.st.got
        if n < 2:
            raise ValueError("split parsing is for orders >= 2")
        if not (0 <= pos < mid < end <= data.shape[0]) or data[mid - 1] != c'\n' or data[end - 1] != c'\n':
            raise ValueError("split parsing needs two buffers of complete lines")
        if (not 0 <= entries_a <= lines_a or self.st.cap - got0 - entries_a < 1
                or self.st.need - got0 - entries_a < 1):
            raise ValueError("split parsing: not enough room or entries left for the second half")
        self.b = self.st
        self.b.ids = self.st.ids + (got0 + entries_a) * n
        self.b.prob = self.st.prob + got0 + entries_a
        self.b.backoff = self.st.backoff + got0 + entries_a
        self.b.cap = self.st.cap - got0 - entries_a
        self.b.need = self.st.need - got0 - entries_a
        self.b.got = 0
        self.b.first_line = 0
        self.b.line = self.st.line + lines_a
        self.split_entries_a = entries_a
        self.split_pos[0] = pos
        self.split_pos[1] = mid
        self.split_stop[0] = mid
        self.split_stop[1] = end
        self.split_codes[0] = self.split_codes[1] = -1

    def split_part(self, const unsigned char[::1] data, int which):  # IN
        cdef State* st = &self.st if which == 0 else &self.b
        cdef Py_ssize_t pos = self.split_pos[which], stop = self.split_stop[which]
        if stop > data.shape[0] or self.split_codes[which] != -1:
            raise ValueError("split_part() without split_begin()")
        with nogil:
            self.split_codes[which] = parse_lines(st, &data[0], &pos, stop)
        self.split_pos[which] = pos

    def split_end(self):
        """Merge the halves; returns (code, new_pos) like run()."""
        if self.split_codes[0] == -1 or self.split_codes[1] == -1:
            raise ValueError("split_end() before both halves ran")
        if self.split_codes[0] != NEED_INPUT:  # an error (or a '\' line) in the first half
            return self.split_codes[0], self.split_pos[0]
        if self.b.got and self.st.prob + self.st.got != self.b.prob:
            raise AssertionError("count_lines() and parse_lines() disagree about blank lines")
        if self.st.first_line == 0:
            self.st.first_line = self.b.first_line
        self.st.got += self.b.got
        self.st.line = self.b.line
        self.st.err_line = self.b.err_line
        self.st.err_start = self.b.err_start
        self.st.err_tok = self.b.err_tok
        self.st.err_tok_end = self.b.err_tok_end
        self.st.err_other = self.b.err_other
        return self.split_codes[1], self.split_pos[1]

    def set_unk(self, int32_t unk_id):
        self.st.unk_id = unk_id

    def lookup(self, bytes word):
        """The unigram id of ``word``, or -1."""
        cdef uint64_t slot
        cdef const unsigned char* w = word
        if self.st.table == NULL:
            return -1
        return _lookup(&self.st, w, len(word), hash_word(w, len(word), w), &slot)

    def vocab_bytes(self):
        """The unigram words joined by b'\\n' (words never contain a newline)."""
        cdef int64_t i, o = 0, n = self.st.nwords
        cdef bytearray out = bytearray(self.st.words_len + max(n - 1, 0))
        cdef unsigned char* dst = out
        for i in range(n):
            if i:
                dst[o] = c'\n'
                o += 1
            memcpy(dst + o, self.st.words + self.st.word_off[i], self.st.word_off[i + 1] - self.st.word_off[i])
            o += self.st.word_off[i + 1] - self.st.word_off[i]
        return bytes(out)

    @property
    def line(self):
        return self.st.line

    @line.setter
    def line(self, int64_t value):
        self.st.line = value

    @property
    def got(self):
        return self.st.got

    @property
    def cap(self):
        return self.st.cap

    @property
    def first_line(self):
        return self.st.first_line

    @property
    def nwords(self):
        return self.st.nwords

    @property
    def duplicates(self):
        """(unigrams listed again, the line of the first of them)."""
        return self.st.dup_words, self.st.dup_line

    @property
    def error(self):
        """(line, line_start, token_start, token_end, other) of the last error."""
        return (self.st.err_line, self.st.err_start, self.st.err_tok, self.st.err_tok_end,
                self.st.err_other)


CODES = {
    "DONE": DONE, "NEED_INPUT": NEED_INPUT, "NEED_SPACE": NEED_SPACE, "BACKSLASH": BACKSLASH,
    "ERR_FIRST": ERR_FIRST, "ERR_FLOAT": ERR_FLOAT, "ERR_NONFINITE": ERR_NONFINITE,
    "ERR_POSITIVE": ERR_POSITIVE, "ERR_TAB": ERR_TAB, "ERR_FEW_WORDS": ERR_FEW_WORDS,
    "ERR_AFTER_WORDS": ERR_AFTER_WORDS, "ERR_AFTER_BACKOFF": ERR_AFTER_BACKOFF,
    "ERR_HIGHEST_BACKOFF": ERR_HIGHEST_BACKOFF, "ERR_UNKNOWN_WORD": ERR_UNKNOWN_WORD,
    "ERR_MEMORY": ERR_MEMORY,
}


# ---------------------------------------------------------------------------
# Writer


def count_lines(const unsigned char[::1] data, Py_ssize_t pos, Py_ssize_t end):  # IN
    """(lines, non-blank lines) in data[pos:end], blank as parse_lines() sees it."""
    cdef Py_ssize_t i = pos
    cdef int64_t lines = 0, entries = 0
    cdef bint blank = True
    cdef unsigned char ch
    if not 0 <= pos <= end <= data.shape[0]:
        raise ValueError("bad range")
    with nogil:
        while i < end:
            ch = data[i]
            if ch == c'\n':
                lines += 1
                entries += not blank
                blank = True
            elif blank and not (ch == c' ' or ch == c'\t' or ch == c'\r' or ch == c'\v' or ch == c'\f'):
                blank = False
            i += 1
    return lines, entries


cdef extern from "arpa_lines.h" nogil:
    Py_ssize_t nplm_skip_lines(const unsigned char* data, Py_ssize_t pos, Py_ssize_t end, int comments,
                               int64_t* lines)


def skip_lines(const unsigned char[::1] data, Py_ssize_t pos, Py_ssize_t end, bint comments):  # IN
    """(start, lines) of the first line in data[pos:end] not blank (nor a comment, with
    ``comments``) and the lines before it, found in C: 1 MB of gzip holds 1 GB of them."""
    cdef int64_t lines = 0
    cdef Py_ssize_t start = pos
    if not 0 <= pos <= end <= data.shape[0]:
        raise ValueError("bad range")
    if pos < end:
        with nogil:
            start = nplm_skip_lines(&data[0], pos, end, comments, &lines)
    return start, lines


def check_words(const unsigned char[::1] words):  # IN
    """Index of the first byte that cannot be part of an ARPA word (space, tab,
    CR, LF, NUL), or -1."""
    cdef Py_ssize_t i, n = words.shape[0]
    cdef Py_ssize_t bad = -1
    with nogil:
        for i in range(n):
            if CLS[words[i]] != C_WORD:
                bad = i
                break
    return bad


cdef Py_ssize_t _format_rows(unsigned char* out, Py_ssize_t cap,
                             const int32_t* ids, int n, const float* prob,
                             const float* backoff, bint with_backoff,
                             Py_ssize_t start, Py_ssize_t stop,
                             const unsigned char* words, const int64_t* off, int64_t nwords,
                             Py_ssize_t* next_row, Py_ssize_t* bad_row) noexcept nogil:
    cdef Py_ssize_t o = 0, r, need, wl
    cdef int i
    cdef int32_t id
    cdef const int32_t* row
    for r in range(start, stop):
        row = ids + r * n
        need = 2 * 32 + n
        for i in range(n):
            id = row[i]
            if id < 0 or id >= nwords:
                bad_row[0] = r
                next_row[0] = r
                return o
            need += off[id + 1] - off[id]
        if o + need > cap:
            next_row[0] = r
            return o
        o += format_float(prob[r], <char*>out + o)
        for i in range(n):
            out[o] = c'\t' if i == 0 else c' '
            o += 1
            id = row[i]
            wl = off[id + 1] - off[id]
            memcpy(out + o, words + off[id], wl)
            o += wl
        if with_backoff:
            out[o] = c'\t'
            o += 1
            o += format_float(backoff[r], <char*>out + o)
        out[o] = c'\n'
        o += 1
    next_row[0] = stop
    return o


def format_rows(unsigned char[::1] out,           # OUT
                const int32_t[:, ::1] ids,         # IN (count, n)
                const float[::1] prob,             # IN
                const float[::1] backoff,          # IN
                bint with_backoff,
                Py_ssize_t start, Py_ssize_t stop,
                const unsigned char[::1] words,    # IN all words back to back
                const int64_t[::1] offsets):       # IN (V + 1,)
    """Print rows start..stop-1 as ARPA lines into ``out``; stops early when ``out``
    is full.  Returns (bytes written, next row, first row with an id out of
    range or -1).  Floats must be finite (the caller checks)."""
    cdef Py_ssize_t written, next_row = start, bad = -1
    cdef int n = ids.shape[1]
    cdef unsigned char empty = 0
    if not (0 <= start <= stop <= ids.shape[0] and prob.shape[0] == ids.shape[0] == backoff.shape[0]):
        raise ValueError("row range or array shapes do not match")
    if out.shape[0] < 64 or start == stop:
        return 0, start, -1
    with nogil:
        written = _format_rows(&out[0], out.shape[0], &ids[0, 0], n, &prob[0], &backoff[0],
                               with_backoff, start, stop,
                               &words[0] if words.shape[0] else &empty, &offsets[0],
                               offsets.shape[0] - 1, &next_row, &bad)
    return written, next_row, bad
