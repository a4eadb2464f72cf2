# Query engines over KenLM binary files, mapped as they are: the probing and trie
# data structures (quantised and array-compressed included) behind nplm's LMCore
# protocol, and KenLM's two vocabularies (probing hash table, sorted hash array)
# behind Vocab.  The scoring itself is nplm/src/kenlm_query.h.
cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_AsUTF8AndSize
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t

import numpy as np
cimport numpy as cnp

from nplm.errors import FormatError

from nplm._kernels cimport Hint, LMCore, NState, Ret, Vocab, WordId

cnp.import_array()

from nplm.backoff.kenlm._klm_tables cimport (
    bytes_at, klm_hash_table, klm_hash_word, klm_probing, klm_probing_context, klm_probing_keys, klm_probing_probe,
    klm_probing_score, klm_probing_score_run, klm_probing_vocab_index, klm_ret, klm_sorted_vocab_index,
    klm_state, klm_trie, klm_trie_context, klm_trie_score, klm_trie_score_run, set_probing, set_trie)

assert sizeof(NState) == sizeof(klm_state) and sizeof(Ret) == sizeof(klm_ret)


def hash_word(word):
    """KenLM's vocabulary hash (MurmurHash64A, seed 0) of a word (str as UTF-8, or bytes)."""
    cdef Py_ssize_t n
    cdef const char *s
    if isinstance(word, str):
        s = PyUnicode_AsUTF8AndSize(word, &n)
    else:
        word = bytes(word)
        s = PyBytes_AS_STRING(word)
        n = PyBytes_GET_SIZE(word)
    return klm_hash_word(s, n)


# ---------------------------------------------------------------------------------
# Vocabularies.

cdef class KenlmVocab(Vocab):
    """KenLM's word -> id (by MurmurHash64A of the word, through the file's own hash
    table or sorted hash array), and id -> word through the strings stored at the end
    of the file.  A file built without them (``build_binary -v``) scores every word
    as KenLM does, but cannot list its words."""
    cdef object _mem
    cdef const uint8_t *_table
    cdef uint64_t _entries       # probing: buckets; sorted: hashes
    cdef bint _sorted
    cdef object _load_strings    # () -> bytes of the NUL-terminated words; None: not stored
    cdef object _strings
    cdef object _word_offsets    # computed on first use
    cdef public object path

    def __init__(self, mem, bint sorted_hashes, Py_ssize_t offset, uint64_t entries, Py_ssize_t size,
                 load_strings=None, path=None):
        """mem: the file (uint8 array); the lookup is ``entries`` probing buckets (12
        bytes each) or sorted uint64 hashes at ``offset``; ``size`` words (ids
        0..size-1); ``load_strings()`` reads the file's word strings (None: the file
        has none)."""
        self._mem = mem
        self._sorted = sorted_hashes
        self._entries = entries
        self._table = bytes_at(mem, offset, entries * (8 if sorted_hashes else 12))
        if not sorted_hashes and entries == 0:
            raise ValueError("empty vocabulary hash table")
        self.size = size
        self._load_strings = load_strings
        self._strings = None
        self._word_offsets = None
        self.path = path

    cdef WordId index(self, const char *s, Py_ssize_t n) noexcept nogil:
        cdef uint64_t h = klm_hash_word(s, n)
        if self._sorted:
            return klm_sorted_vocab_index(<const uint64_t *>self._table, self._entries, h)
        return klm_probing_vocab_index(self._table, self._entries, h)

    @property
    def has_strings(self):
        """Whether the file stores its words (False: built with ``build_binary -v``)."""
        return self._load_strings is not None

    def _offsets_of_words(self):
        if self._load_strings is None:
            raise ValueError(f"{self.path}: this KenLM binary was built without its vocabulary strings "
                             f"(build_binary -v): words are scored by their hashes, but cannot be listed")
        if self._word_offsets is None:
            self._strings = self._load_strings()
            ends = np.flatnonzero(np.frombuffer(self._strings, dtype=np.uint8) == 0)
            if len(ends) < self.size:
                raise ValueError(f"{self.path}: the vocabulary strings hold {len(ends)} words, the model "
                                 f"{self.size} (truncated file?)")
            starts = np.empty(self.size + 1, dtype=np.int64)
            starts[0] = 0
            starts[1:] = ends[:self.size] + 1
            self._word_offsets = starts
        return self._word_offsets

    def word(self, Py_ssize_t i):
        """The word with id ``i`` (str)."""
        if i < 0 or i >= self.size:
            raise IndexError(f"word id {i} out of range 0..{self.size - 1}")
        offsets = self._offsets_of_words()
        return bytes(self._strings[offsets[i]:offsets[i + 1] - 1]).decode("utf-8", "surrogateescape")

    def words(self):
        """All words, in id order (id 0, <unk>, first)."""
        offsets = self._offsets_of_words()
        raw = bytes(self._strings[:offsets[self.size]])
        return [w.decode("utf-8", "surrogateescape") for w in raw.split(b"\0")[:self.size]]

    def arrays(self):
        raise ValueError("a KenLM binary's vocabulary is part of its file, not separate arrays")


# ---------------------------------------------------------------------------------
# Scorers.

cdef extern from "kenlm_check.h" nogil:
    int klm_bad_score(float p)


cdef int _check_scores(object path, const Ret *rets, int n) except -1 nogil:
    """A score no sound file gives (NaN, or beyond the sum of an order's worth of the
    values kenlm_check.h accepts): a file loaded with LAZY, whose n-grams were not
    checked at load, is refused on the first use of a damaged one."""
    cdef int i
    cdef float p
    for i in range(n):
        p = rets[i].prob
        if klm_bad_score(p):
            with gil:
                raise FormatError(f"corrupt KenLM binary: a log10 probability of {p:g} from its n-grams (a LAZY "
                                  "load checks only the unigrams at load; nplm verify checks every n-gram)", path)
    return 0


cdef class KenlmProbingCore(LMCore):
    """KenLM's probing data structure (``build_binary probing``, rest costs too)."""
    cdef klm_probing m
    cdef object _mem
    cdef public object path

    def __init__(self, mem, int order, unigram, list middle, longest, bint rest, WordId bos_id,
                 WordId eos_id):
        """unigram: (offset, entries); middle/longest: (offset, buckets) in mem."""
        self._mem = mem
        self.order = order
        set_probing(&self.m, mem, order, unigram, middle, longest, rest)
        if bos_id >= self.m.n_unigram or eos_id >= self.m.n_unigram:
            raise ValueError("<s> or </s> outside the unigrams")
        self.bos_id = bos_id
        self.eos_id = eos_id

    cdef void begin_state(self, NState *out) noexcept nogil:
        out.length = 1
        out.words[0] = self.bos_id
        out.backoff[0] = (<const float *>(self.m.unigram + <uint64_t>self.bos_id * self.m.unigram_stride))[1]

    cdef void prefetch(self, const NState *ins, WordId w, Hint *hint) noexcept nogil:
        hint.n = klm_probing_keys(&self.m, <const klm_state *>ins, w, hint.key, hint.bucket)

    cdef int score_hinted(self, const NState *ins, WordId w, const Hint *hint, NState *out,
                          Ret *ret) except -1 nogil:
        klm_probing_probe(&self.m, <const klm_state *>ins, w, hint.key, hint.bucket, hint.n,
                          <klm_state *>out, <klm_ret *>ret)
        return _check_scores(self.path, ret, 1)

    cdef int score_word(self, const NState *ins, WordId w, NState *out, Ret *ret) except -1 nogil:
        klm_probing_score(&self.m, <const klm_state *>ins, w, <klm_state *>out, <klm_ret *>ret)
        return _check_scores(self.path, ret, 1)

    cdef int score_words(self, const NState *ins, const WordId *words, int n, NState *out,
                         Ret *rets) except -1 nogil:
        klm_probing_score_run(&self.m, <const klm_state *>ins, words, n, <klm_state *>out, <klm_ret *>rets)
        return _check_scores(self.path, rets, n)

    cdef int context_state(self, const WordId *words, int n, NState *out) except -1 nogil:
        klm_probing_context(&self.m, words, n, <klm_state *>out)
        return 0


cdef extern from "kenlm_check.h" nogil:
    ctypedef struct klm_fault:
        int order
        uint64_t record
        const char *what
    int klm_check_trie(const klm_trie *m, klm_fault *f)


cdef class KenlmTrieCore(LMCore):
    """KenLM's trie (``build_binary trie``, with ``-q``/``-b`` quantisation and ``-a``
    array pointer compression)."""
    cdef klm_trie m
    cdef object _mem
    cdef public object path

    def __init__(self, mem, int order, unigram, list orders, WordId bos_id, WordId eos_id):
        """unigram: (offset, records); orders: one dict per order 2..N with the
        BitPacked fields (base, entries, max_vocab, word_bits, value_bits, next_bits,
        array, array_count) and, quantised, prob_bits, backoff_bits, prob_table,
        backoff_table (offsets)."""
        self._mem = mem
        self.order = order
        set_trie(&self.m, mem, order, unigram, orders)
        if bos_id + 1 >= self.m.n_unigram or eos_id + 1 >= self.m.n_unigram:
            raise ValueError("<s> or </s> outside the unigrams")
        self.bos_id = bos_id
        self.eos_id = eos_id

    def check(self):
        """None when every record is sound (kenlm_check.h), else (order, record, what)."""
        cdef klm_fault f
        cdef int bad
        with nogil:
            bad = klm_check_trie(&self.m, &f)
        if bad:
            return f.order, f.record, f.what.decode()
        return None

    cdef void begin_state(self, NState *out) noexcept nogil:
        out.length = 1
        out.words[0] = self.bos_id
        out.backoff[0] = (<const float *>(self.m.unigram + <uint64_t>self.bos_id * 16))[1]

    cdef int score_word(self, const NState *ins, WordId w, NState *out, Ret *ret) except -1 nogil:
        klm_trie_score(&self.m, <const klm_state *>ins, w, <klm_state *>out, <klm_ret *>ret)
        return _check_scores(self.path, ret, 1)

    cdef int score_words(self, const NState *ins, const WordId *words, int n, NState *out,
                         Ret *rets) except -1 nogil:
        klm_trie_score_run(&self.m, <const klm_state *>ins, words, n, <klm_state *>out, <klm_ret *>rets)
        return _check_scores(self.path, rets, n)

    cdef int context_state(self, const WordId *words, int n, NState *out) except -1 nogil:
        klm_trie_context(&self.m, words, n, <klm_state *>out)
        return 0


# ---------------------------------------------------------------------------------
# Recovering the n-grams of probing tables (for conversion to ARPA).

cdef extern from "kenlm_query.h" nogil:
    uint64_t klm_combine(uint64_t current, uint32_t next)
    const uint8_t *klm_probe(const klm_hash_table *t, uint32_t stride, uint64_t key)


@cython.boundscheck(False)
def probing_join(KenlmProbingCore core, int n, const uint64_t[::1] suffix_keys, const int64_t[::1] suffix_off,
                 const uint32_t[::1] context_words, const int64_t[::1] context_off, Py_ssize_t cap):
    """Probe the n-gram table for every (suffix, context) pair of each group g
    (suffixes [suffix_off[g], suffix_off[g+1]), contexts likewise): the key of
    w_1..w_n is the suffix's key (w_2..w_n) extended by the context's oldest word w_1.
    Returns (suffix index, context index, raw prob, raw backoff, key) arrays of the
    hits, or None when there are more than ``cap``."""
    if not 2 <= n <= core.m.order or suffix_off.shape[0] != context_off.shape[0]:
        raise ValueError("bad arguments")
    cdef Py_ssize_t groups = suffix_off.shape[0] - 1, g, got = 0
    cdef int64_t s, c
    for g in range(groups + 1):
        if not (0 <= suffix_off[g] <= suffix_keys.shape[0] and 0 <= context_off[g] <= context_words.shape[0]):
            raise ValueError("offsets outside the arrays")
    s_idx = np.empty(cap, np.int64)
    c_idx = np.empty(cap, np.int64)
    probs = np.empty(cap, np.float32)
    backoffs = np.zeros(cap, np.float32)
    keys = np.empty(cap, np.uint64)
    cdef int64_t[::1] si = s_idx, ci = c_idx
    cdef float[::1] pv = probs, bv = backoffs
    cdef uint64_t[::1] kv = keys
    cdef const klm_hash_table *table = &core.m.longest if n == core.m.order else &core.m.middle[n - 2]
    cdef uint32_t stride = 12 if n == core.m.order else core.m.middle_stride
    cdef bint longest = n == core.m.order
    cdef uint64_t key
    cdef const uint8_t *e
    cdef bint full = False
    with nogil:
        for g in range(groups):
            for s in range(suffix_off[g], suffix_off[g + 1]):
                for c in range(context_off[g], context_off[g + 1]):
                    key = klm_combine(suffix_keys[s], context_words[c])
                    e = klm_probe(table, stride, key)
                    if e == NULL:
                        continue
                    if got == cap:
                        full = True
                        break
                    si[got] = s
                    ci[got] = c
                    kv[got] = key
                    pv[got] = (<const float *>(e + 8))[0]
                    if not longest:
                        bv[got] = (<const float *>(e + 12))[0]
                    got += 1
                if full:
                    break
            if full:
                break
    if full:
        return None
    return s_idx[:got], c_idx[:got], probs[:got], backoffs[:got], keys[:got]
