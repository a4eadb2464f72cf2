# KenLM's probing and trie tables as kenlm_query.h reads them, and their set-up from a
# file's layout: shared by the model cores (_klm) and the query program's loop
# (_query_text), which must not import numpy or nplm._kernels.
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport uint8_t, uint32_t, uint64_t

cdef extern from "kenlm_query.h" nogil:
    """
    #if KLM_MAX_ORDER != 16
    #error "kenlm_query.h's KLM_MAX_ORDER must equal _kernels.pxd's MAX_ORDER"
    #endif
    """
    ctypedef struct klm_state:
        uint32_t words[15]
        float backoff[15]
        uint8_t length
    ctypedef struct klm_ret:
        float prob
        int ngram_length
    ctypedef struct klm_hash_table:
        const uint8_t *table
        uint64_t buckets
    ctypedef struct klm_probing:
        int order
        uint64_t n_unigram
        const uint8_t *unigram
        uint32_t unigram_stride
        uint32_t middle_stride
        klm_hash_table middle[16]
        klm_hash_table longest
    ctypedef struct klm_bitpacked:
        const uint8_t *base
        uint64_t entries
        uint64_t max_vocab
        uint8_t word_bits
        uint8_t total_bits
        uint8_t next_bits
        uint64_t word_mask
        uint64_t next_mask
        uint8_t prob_bits
        uint8_t backoff_bits
        uint32_t prob_mask
        uint32_t backoff_mask
        const float *prob_table
        const float *backoff_table
        const uint64_t *array
        uint64_t array_count
        double array_scale
        uint64_t next_entries
    ctypedef struct klm_trie:
        int order
        uint64_t n_unigram
        const uint8_t *unigram
        uint64_t first_entries
        klm_bitpacked middle[16]
        klm_bitpacked longest
    uint64_t klm_hash_word(const char *s, size_t n)
    uint32_t klm_probing_vocab_index(const uint8_t *table, uint64_t buckets, uint64_t h)
    uint32_t klm_sorted_vocab_index(const uint64_t *sorted, uint64_t n, uint64_t key)
    void klm_probing_score(const klm_probing *m, const klm_state *ins, uint32_t w, klm_state *out, klm_ret *ret)
    int klm_probing_keys(const klm_probing *m, const klm_state *ins, uint32_t w, uint64_t *keys, uint64_t *first)
    void klm_probing_probe(const klm_probing *m, const klm_state *ins, uint32_t w, const uint64_t *keys,
                           const uint64_t *first, int n_ctx, klm_state *out, klm_ret *ret)
    void klm_probing_context(const klm_probing *m, const uint32_t *words, int n, klm_state *out)
    void klm_trie_score(const klm_trie *m, const klm_state *ins, uint32_t w, klm_state *out, klm_ret *ret)
    void klm_trie_context(const klm_trie *m, const uint32_t *words, int n, klm_state *out)
    void klm_probing_score_run(const klm_probing *m, const klm_state *ins, const uint32_t *words, int n,
                               klm_state *out, klm_ret *rets)
    void klm_trie_score_run(const klm_trie *m, const klm_state *ins, const uint32_t *words, int n,
                            klm_state *out, klm_ret *rets)


cdef inline const uint8_t *bytes_at(mem, Py_ssize_t offset, Py_ssize_t size) except NULL:
    """Pointer to mem[offset:offset + size] (mem: the file, any read-only byte buffer).
    Through the buffer protocol, not a typed memoryview: Cython's memoryview support
    imports collections when the module loads (the query program's start)."""
    cdef Py_buffer view
    PyObject_GetBuffer(mem, &view, PyBUF_SIMPLE)
    cdef const uint8_t *base = <const uint8_t *>view.buf
    cdef Py_ssize_t length = view.len
    PyBuffer_Release(&view)     # mem keeps its memory: the caller holds it
    if offset < 0 or size < 0 or offset + size > length:
        raise ValueError(f"bytes {offset}..{offset + size} outside the {length}-byte file")
    if length == 0:
        raise ValueError("empty file")
    return base + offset


cdef inline int set_probing(klm_probing *m, mem, int order, unigram, list middle, longest, bint rest) except -1:
    """unigram: (offset, entries); middle/longest: (offset, buckets) in mem."""
    cdef int k
    if not 2 <= order <= 16 or len(middle) != order - 2:
        raise ValueError(f"order {order} outside 2..16")
    m.order = order
    m.unigram_stride = 12 if rest else 8
    m.middle_stride = 20 if rest else 16
    m.n_unigram = unigram[1]
    m.unigram = bytes_at(mem, unigram[0], unigram[1] * m.unigram_stride)
    for k in range(order - 2):
        if middle[k][1] < 1:
            raise ValueError(f"empty {k + 2}-gram hash table")
        m.middle[k].table = bytes_at(mem, middle[k][0], middle[k][1] * m.middle_stride)
        m.middle[k].buckets = middle[k][1]
    if longest[1] < 1:
        raise ValueError(f"empty {order}-gram hash table")
    m.longest.table = bytes_at(mem, longest[0], longest[1] * 12)
    m.longest.buckets = longest[1]
    return 0


cdef inline int set_trie(klm_trie *m, mem, int order, unigram, list orders) except -1:
    """unigram: (offset, records); orders: one dict per order 2..N with the BitPacked
    fields (base, entries, max_vocab, word_bits, value_bits, next_bits, array,
    array_count) and, quantised, prob_bits, backoff_bits, prob_table, backoff_table
    (offsets)."""
    cdef int k
    if not 2 <= order <= 16 or len(orders) != order - 1:
        raise ValueError(f"order {order} outside 2..16")
    m.order = order
    m.n_unigram = unigram[1]
    if m.n_unigram < 2:
        raise ValueError("no unigrams")
    m.unigram = bytes_at(mem, unigram[0], unigram[1] * 16)
    m.first_entries = orders[0]["entries"]
    for k in range(order - 2):
        _set_bitpacked(&m.middle[k], mem, orders[k], orders[k + 1]["entries"])
    _set_bitpacked(&m.longest, mem, orders[order - 2], 0)
    return 0


cdef inline int _set_bitpacked(klm_bitpacked *t, mem, dict d, uint64_t next_entries) except -1:
    cdef uint64_t total = d["word_bits"] + d["value_bits"] + d["next_bits"]
    if d["word_bits"] > 57 or d["next_bits"] > 57 or total > 255 or total == 0:
        raise ValueError("impossible record width")
    t.entries = d["entries"]
    t.base = bytes_at(mem, d["base"], ((t.entries + 1) * total + 7) // 8 + 8)
    t.max_vocab = d["max_vocab"]
    t.word_bits = d["word_bits"]
    t.total_bits = total
    t.next_bits = d["next_bits"]
    t.word_mask = (1ULL << t.word_bits) - 1
    t.next_mask = (1ULL << t.next_bits) - 1
    t.next_entries = next_entries
    t.prob_table = NULL
    t.backoff_table = NULL
    t.prob_bits = 0
    t.backoff_bits = 0
    if d.get("prob_table") is not None:
        t.prob_bits = d["prob_bits"]
        t.prob_mask = (1 << t.prob_bits) - 1
        t.prob_table = <const float *>bytes_at(mem, d["prob_table"], 4 << t.prob_bits)
        if d.get("backoff_table") is not None:
            t.backoff_bits = d["backoff_bits"]
            t.backoff_mask = (1 << t.backoff_bits) - 1
            t.backoff_table = <const float *>bytes_at(mem, d["backoff_table"], 4 << t.backoff_bits)
    t.array = NULL
    t.array_count = 0
    if d.get("array") is not None:
        t.array_count = d["array_count"]
        if t.array_count < 1:
            raise ValueError("empty pointer array")
        t.array = <const uint64_t *>bytes_at(mem, d["array"], 8 * t.array_count)
        t.array_scale = <double>t.array_count / <double>(t.entries + 1)
    return 0
