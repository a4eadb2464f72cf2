# Kernels of the KenLM binary writer (nplm/src/kenlm_write.h does the work; the
# Python layer in write.py validates the input and lays out the file).
from libc.stdint cimport int64_t, uint8_t, uint32_t, uint64_t

import numpy as np

cdef extern from "kenlm_write.h" nogil:
    ctypedef struct kenlm_mid_entry:
        uint64_t key
        float prob
        float backoff
    ctypedef struct kenlm_long_entry:
        uint64_t key
        float prob
    ctypedef struct kenlm_vocab_entry:
        uint64_t key
        uint32_t value
    ctypedef struct kenlm_mid_table:
        kenlm_mid_entry *entries
        uint64_t buckets
        uint64_t used
    ctypedef struct kenlm_level_layout:
        uint8_t word_bits, inline_bits, prob_bits, backoff_bits
        const float *prob_centers
        const float *backoff_centers
    enum:
        KENLM_OK, KENLM_FULL, KENLM_NO_CONTEXT
    uint64_t kenlm_murmur64a(const void *key, size_t len, uint64_t seed)
    int kenlm_vocab_insert(kenlm_vocab_entry *t, uint64_t buckets, uint64_t *used,
                           uint64_t key, uint32_t value)
    int kenlm_probing_order(int n, int order, int64_t count, const uint32_t *ids,
                            const float *prob, const float *backoff, float *uni,
                            kenlm_mid_table *mids, kenlm_long_entry *long_table,
                            uint64_t long_buckets, uint64_t *long_used, int64_t *where)
    void kenlm_sort_rows(const uint32_t *rows, int64_t count, int n, uint32_t bound,
                         uint32_t *out_rows, int64_t *perm, uint32_t *scratch, int64_t *hist)
    int64_t kenlm_find_duplicate(const uint32_t *rows, int64_t count, int n)
    int64_t kenlm_child_ranges(const uint32_t *shorter, int64_t count_s, const uint32_t *longer,
                               int64_t count_l, int n, uint64_t *next)
    int64_t kenlm_mark_contexts(const uint32_t *rows, int64_t count, int m, float *backoff,
                                const uint32_t *ctx, int64_t count_c)
    int64_t kenlm_prefix_present(const uint32_t *shorter, int64_t count_s, const uint32_t *longer,
                                 int64_t count_l, int n, uint8_t *present)
    void kenlm_lookup_rows(const uint32_t *rows, int64_t count, int m, const uint32_t *queries,
                           int64_t nq, int64_t *out)
    void kenlm_make_bins(const float *sorted, int64_t size, float *centers, uint32_t bins)
    void kenlm_pack_level(uint8_t *base, int64_t count, const uint32_t *word, const float *prob,
                          const float *backoff, const uint64_t *next, const kenlm_level_layout *L)

OK = KENLM_OK
FULL = KENLM_FULL
NO_CONTEXT = KENLM_NO_CONTEXT


def word_hashes(words):
    """KenLM's hash (MurmurHash64A, seed 0) of each word's bytes (a str as nplm.io.text.word_bytes encodes it)."""
    out = np.empty(len(words), dtype=np.uint64)
    cdef uint64_t[::1] o = out
    cdef Py_ssize_t i
    cdef bytes b
    for i, w in enumerate(words):
        b = w.encode("utf-8", "surrogateescape") if isinstance(w, str) else w
        o[i] = kenlm_murmur64a(<const char *>b, len(b), 0)
    return out


def fill_vocab_table(uint8_t[::1] region, const uint64_t[::1] hashes, uint64_t buckets):
    """Insert hashes[i] -> i + 1 into the probing vocabulary table held by
    ``region`` (buckets 12-byte entries, zeroed).  Returns False when full."""
    cdef kenlm_vocab_entry *t = <kenlm_vocab_entry *>&region[0]
    cdef uint64_t used = 0
    cdef Py_ssize_t i
    cdef bint full = False
    if <uint64_t>region.shape[0] < buckets * sizeof(kenlm_vocab_entry):
        raise ValueError("vocabulary region too small")
    with nogil:
        for i in range(hashes.shape[0]):
            if kenlm_vocab_insert(t, buckets, &used, hashes[i], <uint32_t>(i + 1)) != KENLM_OK:
                full = True
                break
    return not full


def probing_order(int n, int order, const uint32_t[:, ::1] ids, const float[::1] prob,
                  const float[::1] backoff, float[:, ::1] uni, uint8_t[::1] search,
                  const uint64_t[::1] offsets, const uint64_t[::1] buckets, uint64_t[::1] used):
    """Insert the n-grams of order n (2 <= n <= order) into the probing tables in
    ``search``: table of order k (2..order) at offsets[k - 2] with buckets[k - 2]
    buckets, used[k - 2] entries so far.  Returns (code, index of the n-gram)."""
    cdef int64_t count = ids.shape[0], where = -1
    cdef int k, code
    cdef kenlm_mid_table mids[64]
    cdef uint8_t *base = &search[0]
    if not (2 <= n <= order <= 64) or ids.shape[1] != n or prob.shape[0] != count:
        raise ValueError("bad shapes for probing_order")
    if n < order and backoff.shape[0] != count:
        raise ValueError("bad back-off length")
    for k in range(order - 2):
        mids[k].entries = <kenlm_mid_entry *>(base + offsets[k])
        mids[k].buckets = buckets[k]
        mids[k].used = used[k]
    if count == 0:
        return OK, -1
    with nogil:
        code = kenlm_probing_order(n, order, count, &ids[0, 0], &prob[0],
                                   &backoff[0] if n < order else NULL, &uni[0, 0], mids,
                                   <kenlm_long_entry *>(base + offsets[order - 2]),
                                   buckets[order - 2], &used[order - 2], &where)
    for k in range(order - 2):
        used[k] = mids[k].used
    return code, where


def sort_rows(const uint32_t[:, ::1] rows, uint32_t bound):
    """(sorted rows, perm): the rows (all values < bound) sorted column by column,
    and the index each came from."""
    cdef int64_t count = rows.shape[0]
    cdef int n = <int>rows.shape[1]
    out = np.empty((count, n), dtype=np.uint32)
    perm = np.empty(count, dtype=np.int64)
    scratch = np.empty(2 * count * (n + 2), dtype=np.uint32)
    hist = np.empty(<Py_ssize_t>bound + 1, dtype=np.int64)
    cdef uint32_t[:, ::1] o = out
    cdef uint32_t[::1] s = scratch
    cdef int64_t[::1] p = perm, h = hist
    if count and n:
        with nogil:
            kenlm_sort_rows(&rows[0, 0], count, n, bound, &o[0, 0], &p[0], &s[0], &h[0])
    return out, perm


def find_duplicate(const uint32_t[:, ::1] rows):
    """Index of the second of two equal adjacent rows, or -1."""
    if rows.shape[0] < 2:
        return -1
    return kenlm_find_duplicate(&rows[0, 0], rows.shape[0], <int>rows.shape[1])


def child_ranges(const uint32_t[:, ::1] shorter, const uint32_t[:, ::1] longer):
    """(next, missing): next[i] is where shorter[i]'s children start among the
    sorted rows of ``longer`` (next[-1] = len(longer)); missing is the first row of
    longer whose prefix is absent from shorter, or -1."""
    cdef int64_t cs = shorter.shape[0], cl = longer.shape[0], missing
    cdef int n = <int>longer.shape[1]
    if shorter.shape[1] != n - 1:
        raise ValueError("child_ranges: widths differ by other than one")
    nxt = np.zeros(cs + 1, dtype=np.uint64)
    cdef uint64_t[::1] o = nxt
    if cs == 0 or cl == 0:
        nxt[cs] = cl
        return nxt, (0 if cl else -1)
    with nogil:
        missing = kenlm_child_ranges(&shorter[0, 0], cs, &longer[0, 0], cl, n, &o[0])
    return nxt, missing


def mark_contexts(const uint32_t[:, ::1] rows, float[::1] backoff, const uint32_t[:, ::1] ctx):
    """Give every row that is a context (a row of the sorted ctx) an extendable
    back-off (-0.0 -> +0.0).  Returns the index into ctx of a context missing from
    rows, or -1."""
    cdef int64_t k
    if ctx.shape[0] == 0:
        return -1
    if rows.shape[0] == 0:
        return 0
    if ctx.shape[1] != rows.shape[1] or backoff.shape[0] != rows.shape[0]:
        raise ValueError("mark_contexts: shapes differ")
    with nogil:
        k = kenlm_mark_contexts(&rows[0, 0], rows.shape[0], <int>rows.shape[1], &backoff[0],
                                &ctx[0, 0], ctx.shape[0])
    return k


def prefix_present(const uint32_t[:, ::1] shorter, const uint32_t[:, ::1] longer):
    """Boolean array: whether each sorted row of ``longer`` has its first
    ``shorter.shape[1]`` words among the sorted rows of ``shorter``."""
    cdef int64_t cl = longer.shape[0]
    out = np.zeros(cl, dtype=np.uint8)
    cdef uint8_t[::1] o = out
    if shorter.shape[1] != longer.shape[1] - 1:
        raise ValueError("prefix_present: widths differ by other than one")
    if cl and shorter.shape[0]:
        with nogil:
            kenlm_prefix_present(&shorter[0, 0], shorter.shape[0], &longer[0, 0], cl,
                                 <int>longer.shape[1], &o[0])
    return out.view(bool)


def lookup_rows(const uint32_t[:, ::1] rows, const uint32_t[:, ::1] queries):
    """Index of each query among the sorted rows (same width), -1 when absent."""
    out = np.full(queries.shape[0], -1, dtype=np.int64)
    cdef int64_t[::1] o = out
    if rows.shape[1] != queries.shape[1]:
        raise ValueError("lookup_rows: widths differ")
    if rows.shape[0] and queries.shape[0]:
        with nogil:
            kenlm_lookup_rows(&rows[0, 0], rows.shape[0], <int>rows.shape[1], &queries[0, 0],
                              queries.shape[0], &o[0])
    return out


def make_bins(const float[::1] sorted_values, uint32_t bins):
    """KenLM's quantisation centres of the (ascending) values."""
    out = np.empty(bins, dtype=np.float32)
    cdef float[::1] o = out
    if bins:
        with nogil:
            kenlm_make_bins(&sorted_values[0] if sorted_values.shape[0] else NULL,
                            sorted_values.shape[0], &o[0], bins)
    return out


def pack_level(uint8_t[::1] region, const uint32_t[::1] word, const float[::1] prob,
               backoff, nxt, int word_bits, int inline_bits, prob_centers, backoff_centers,
               int prob_bits, int backoff_bits):
    """Bit-pack one trie level into ``region`` (zeroed; its size checked by the
    caller).  backoff/nxt are None for the highest order, the centres None when
    unquantised."""
    cdef kenlm_level_layout L
    cdef const float[::1] bo, pc, bc
    cdef const uint64_t[::1] nx
    cdef const float *bo_p = NULL
    cdef const uint64_t *nx_p = NULL
    cdef int64_t count = word.shape[0]
    L.word_bits = word_bits
    L.inline_bits = inline_bits
    L.prob_bits = prob_bits
    L.backoff_bits = backoff_bits
    L.prob_centers = NULL
    L.backoff_centers = NULL
    if prob.shape[0] != count:
        raise ValueError("pack_level: lengths differ")
    if backoff is not None:
        bo = backoff
        nx = nxt
        if bo.shape[0] != count or nx.shape[0] != count + 1:
            raise ValueError("pack_level: lengths differ")
        bo_p = &bo[0] if count else NULL
        nx_p = &nx[0]
    if prob_centers is not None:
        pc = prob_centers
        L.prob_centers = &pc[0]
        if backoff is not None:
            bc = backoff_centers
            L.backoff_centers = &bc[0]
    with nogil:
        kenlm_pack_level(&region[0], count, &word[0] if count else NULL, &prob[0] if count else NULL,
                         bo_p, nx_p, &L)
