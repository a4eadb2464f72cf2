# Kernels of lmplz --renumber's suffix order and of the intermediate files' records
# (nplm/src/suffix_renumber.h does the work; intermediate.py drives it).
from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t

import numpy as np

cdef extern from "suffix_renumber.h" nogil:
    enum:
        NPLM_RENUMBER_OK
    int nplm_all_below(const int32_t *v, int64_t count, int64_t bound)
    int64_t nplm_suffix_runs(const int32_t *ids, int64_t n, int k, const int32_t *prev, int64_t m,
                             int64_t *first, int64_t *longest)
    int nplm_suffix_perm(const int32_t *ids, int64_t n, int k, int64_t *first, const int64_t *prev_perm,
                         int64_t m, const int32_t *new_id, int64_t vocab, int64_t *perm, uint64_t *scratch,
                         int64_t longest)
    int nplm_suffix_perm_lsd(const int32_t *ids, int64_t n, int k, const int32_t *new_id, int64_t vocab,
                             int64_t *perm, int64_t *scratch, int64_t *hist)
    int nplm_pack_records(const int32_t *ids, int64_t n, int k, const int64_t *perm, const int32_t *new_id,
                          int64_t vocab, const float *logprob, const float *backoff, uint8_t *out)
    int nplm_gather_rows(const int32_t *ids, int64_t n, int k, const int64_t *perm, const int32_t *new_id,
                         int64_t vocab, int32_t *out)


cdef _status(int rc, str what):
    if rc != NPLM_RENUMBER_OK:
        raise ValueError(f"{what}: a word id outside the vocabulary, or a row index outside the rows")


def suffix_permutation(const int32_t[:, ::1] ids,       # IN (n, k) word ids, in suffix order
                       const int32_t[::1] new_id,       # IN (V,) each word's new id, below V
                       const int32_t[:, ::1] prev=None,  # IN (m, k-1) order k-1, in suffix order
                       const int64_t[::1] prev_perm=None):  # IN (m,) order k-1's rows in new order
    """The rows of ``ids`` in suffix order of their new ids (ties in their order):
    (n,) int64.  With order k-1 and its new order (what this returned for it), run
    by run of the rows that extend each row of order k-1; without them, or where
    some row's suffix is not in ``prev``, by a radix sort of every column."""
    cdef int64_t n = ids.shape[0], vocab = new_id.shape[0], m = 0, missing = 0, longest = 0
    cdef int k = ids.shape[1], rc = NPLM_RENUMBER_OK
    cdef int ok = 1
    if vocab:
        with nogil:
            ok = nplm_all_below(&new_id[0], vocab, vocab)
    if not ok:
        raise ValueError("suffix_permutation: new ids must be below the vocabulary size")
    perm = np.empty(n, dtype=np.int64)
    if n == 0 or k == 0:
        perm[:] = np.arange(n)
        return perm
    cdef int64_t[::1] pv = perm
    cdef int64_t[::1] first
    cdef uint64_t[::1] scratch
    cdef bint runs = prev is not None and prev_perm is not None and k >= 2 and prev.shape[0] > 0
    if runs:
        m = prev.shape[0]
        if prev.shape[1] != k - 1 or prev_perm.shape[0] != m:
            raise ValueError(f"suffix_permutation: order k-1 must have {k - 1} words a row and one "
                             "new position per row")
        first = np.empty(m + 1, dtype=np.int64)
        with nogil:
            missing = nplm_suffix_runs(&ids[0, 0], n, k, &prev[0, 0], m, &first[0], &longest)
        runs = missing < 0
    if runs:
        scratch = np.empty(2 * longest, dtype=np.uint64)
        with nogil:
            rc = nplm_suffix_perm(&ids[0, 0], n, k, &first[0], &prev_perm[0], m, &new_id[0], vocab, &pv[0],
                                  &scratch[0], longest)
        _status(rc, "suffix_permutation")
        return perm
    rows = np.empty(n, dtype=np.int64)
    hist = np.empty(vocab + 1, dtype=np.int64)
    cdef int64_t[::1] rv = rows, hv = hist
    with nogil:
        rc = nplm_suffix_perm_lsd(&ids[0, 0], n, k, &new_id[0], vocab, &pv[0], &rv[0], &hv[0])
    _status(rc, "suffix_permutation")
    return perm


def pack_records(const int32_t[:, ::1] ids,          # IN (n, k) word ids
                 const float[::1] logprob,            # IN (n,)
                 const float[::1] backoff=None,       # IN (n,); None: zeros
                 const int64_t[::1] perm=None,        # IN (n,) the rows in their written order; None: as they are
                 const int32_t[::1] new_id=None):     # IN (V,) each word's written id; None: as it is
    """Order k's records of KenLM's intermediate files (k uint32 words, float32
    probability, float32 back-off): (n * (4k + 8),) uint8."""
    cdef int64_t n = ids.shape[0]
    cdef int k = ids.shape[1], rc = NPLM_RENUMBER_OK
    if logprob.shape[0] != n or (backoff is not None and backoff.shape[0] != n) or \
            (perm is not None and perm.shape[0] != n):
        raise ValueError("pack_records: ids, logprob, backoff and perm differ in length")
    out = np.empty(n * (4 * k + 8), dtype=np.uint8)
    if n == 0:
        return out
    cdef uint8_t[::1] o = out
    cdef const int64_t *pp = &perm[0] if perm is not None else NULL
    cdef const int32_t *nw = &new_id[0] if new_id is not None and new_id.shape[0] else NULL
    cdef int64_t vocab = new_id.shape[0] if new_id is not None else 0
    cdef const float *bp = &backoff[0] if backoff is not None else NULL
    if new_id is not None and nw == NULL:
        raise ValueError("pack_records: an empty vocabulary")
    with nogil:
        rc = nplm_pack_records(&ids[0, 0], n, k, pp, nw, vocab, &logprob[0], bp, &o[0])
    _status(rc, "pack_records")
    return out


def gather_rows(const int32_t[:, ::1] ids,           # IN (n, k) word ids
                const int64_t[::1] perm,             # IN (n,) the rows in their new order
                const int32_t[::1] new_id):          # IN (V,) each word's new id
    """new_id[ids[perm]] as an (n, k) int32 array."""
    cdef int64_t n = ids.shape[0]
    cdef int k = ids.shape[1], rc = NPLM_RENUMBER_OK
    if perm.shape[0] != n:
        raise ValueError("gather_rows: ids and perm differ in length")
    out = np.empty((n, k), dtype=np.int32)
    cdef int32_t[:, ::1] o = out
    if n and k:
        if new_id.shape[0] == 0:
            raise ValueError("gather_rows: an empty vocabulary")
        with nogil:
            rc = nplm_gather_rows(&ids[0, 0], n, k, &perm[0], &new_id[0], new_id.shape[0], &o[0, 0])
    _status(rc, "gather_rows")
    return out
