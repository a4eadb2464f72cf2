# Shared declarations of the query core: the C state every model kind uses, the
# scoring protocol (LMCore) and the vocabulary.  Other kernels (neural query,
# interpolation) cimport these so that one Model class serves every model kind.
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t

cdef enum:
    # Longest n-gram order any model may have (KenLM's Python module: 6).
    MAX_ORDER = 16

ctypedef uint32_t WordId

cdef struct NState:
    # Context words, most recent first, and the back-off weights of the n-grams
    # they end (backoff[i] belongs to the (i+1)-gram words[i]..words[0]).  Only the
    # first `length` entries are meaningful; equality looks at length and words.
    WordId words[MAX_ORDER - 1]
    float backoff[MAX_ORDER - 1]
    uint8_t length

cdef struct Ret:
    float prob           # log10 p(word | state), back-off penalties included
    int ngram_length     # length of the n-gram that matched (context used + 1)


cdef struct Hint:
    # What a core's prefetch() works out for a lookup, for its score_hinted(): the
    # core's own (a back-off core: each order's key and first bucket).
    uint64_t key[MAX_ORDER]
    uint64_t bucket[MAX_ORDER]
    int n


cdef class LMCore:
    """The scoring protocol every model kind implements (see DESIGN.md)."""
    cdef public int order
    cdef WordId bos_id
    cdef WordId eos_id
    cdef int score_word(self, const NState *in_state, WordId word, NState *out_state,
                        Ret *ret) except -1 nogil
    cdef int score_words(self, const NState *in_state, const WordId *words, int n, NState *out_state,
                         Ret *rets) except -1 nogil
    cdef void prefetch(self, const NState *in_state, WordId word, Hint *hint) noexcept nogil
    cdef int score_hinted(self, const NState *in_state, WordId word, const Hint *hint,
                          NState *out_state, Ret *ret) except -1 nogil
    cdef void begin_state(self, NState *out) noexcept nogil
    cdef void null_state(self, NState *out) noexcept nogil
    cdef int context_state(self, const WordId *words, int n, NState *out) except -1 nogil


cdef class Vocab:
    cdef const uint64_t[::1] _keys      # open-addressing table of word hashes
    cdef const uint32_t[::1] _vals      # id of the word in the same slot
    cdef const uint64_t *keys
    cdef const uint32_t *vals
    cdef uint64_t buckets
    cdef const int64_t[::1] _offsets    # id -> byte range in _blob
    cdef const uint8_t[::1] _blob
    cdef public Py_ssize_t size
    cdef WordId index(self, const char *s, Py_ssize_t n) noexcept nogil


cdef class State:
    cdef NState _c
