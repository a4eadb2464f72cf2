"""Integer kernels of the partitioned Kneser-Ney estimation (``estimate/partitioned.py``).

The n-grams are split into parts by their last word (ranges of word ids), so each
part holds, in suffix order, everything that ``_kn.adjust`` needs.  What crosses
parts is the context of an n-gram (all but its last word), joined by key:
``merge_runs`` merges suffix-sorted runs of counted n-grams (spilled while
counting, or counted on other machines), and ``locate`` finds the rows of one
suffix-sorted table in another.
"""
from libc.stdint cimport uint32_t, int32_t, uint64_t, int64_t
from libc.stdlib cimport malloc, free
from libc.string cimport memcpy

import numpy as np


cdef inline int _cmp_suffix(const uint32_t *a, const uint32_t *b, int n) noexcept nogil:
    """Compare two n-word rows in suffix order (last word most significant)."""
    cdef int j = n - 1
    while j >= 0:
        if a[j] != b[j]:
            return -1 if a[j] < b[j] else 1
        j -= 1
    return 0


cdef struct Runs:
    const uint32_t **keys
    const uint64_t **counts
    int64_t *pos
    int64_t *end
    int *heap
    int size
    int n


cdef inline bint _less(Runs *r, int a, int b) noexcept nogil:
    cdef int c = _cmp_suffix(r.keys[a] + r.pos[a] * r.n, r.keys[b] + r.pos[b] * r.n, r.n)
    return c < 0 or (c == 0 and a < b)


cdef void _sift_down(Runs *r, int i) noexcept nogil:
    cdef int child, top = r.heap[i]
    while True:
        child = 2 * i + 1
        if child >= r.size:
            break
        if child + 1 < r.size and _less(r, r.heap[child + 1], r.heap[child]):
            child += 1
        if not _less(r, r.heap[child], top):
            break
        r.heap[i] = r.heap[child]
        i = child
    r.heap[i] = top


cdef int64_t _merge(Runs *r, uint32_t *kout, uint64_t *cout) noexcept nogil:
    """Merge the runs' rows into kout/cout, summing the counts of equal rows."""
    cdef int64_t m = 0
    cdef int top, i
    cdef const uint32_t *row
    for i in range(r.size // 2 - 1, -1, -1):
        _sift_down(r, i)
    while r.size > 0:
        top = r.heap[0]
        row = r.keys[top] + r.pos[top] * r.n
        if m > 0 and _cmp_suffix(row, kout + (m - 1) * r.n, r.n) == 0:
            cout[m - 1] += r.counts[top][r.pos[top]]
        else:
            memcpy(kout + m * r.n, row, r.n * sizeof(uint32_t))
            cout[m] = r.counts[top][r.pos[top]]
            m += 1
        r.pos[top] += 1
        if r.pos[top] == r.end[top]:
            r.size -= 1
            r.heap[0] = r.heap[r.size]
        if r.size > 0:
            _sift_down(r, 0)
    return m


def merge_runs(list keys_list, list counts_list, int order):
    """Merge suffix-sorted runs of n-grams ((m_i, order) uint32 keys, (m_i,) uint64
    counts; equal n-grams may recur across runs) into one suffix-sorted run of
    distinct n-grams with summed counts: ``(keys, counts)``."""
    cdef int nruns = len(keys_list), i, live = 0
    cdef int64_t total = 0, m
    cdef const uint32_t[:, ::1] kv
    cdef const uint64_t[::1] cv
    if len(counts_list) != nruns:
        raise ValueError("merge_runs: as many count arrays as key arrays")
    views = []
    for i in range(nruns):
        kv = keys_list[i]
        cv = counts_list[i]
        if kv.shape[0] != cv.shape[0] or (kv.shape[0] and kv.shape[1] != order):
            raise ValueError(f"merge_runs: run {i} has mismatched keys and counts")
        views.append((kv, cv))
        total += kv.shape[0]
    keys = np.empty((total, order), dtype=np.uint32)
    counts = np.empty(total, dtype=np.uint64)
    if total == 0:
        return keys, counts
    cdef Runs r
    r.n = order
    r.keys = <const uint32_t **> malloc(nruns * sizeof(void *))
    r.counts = <const uint64_t **> malloc(nruns * sizeof(void *))
    r.pos = <int64_t *> malloc(nruns * sizeof(int64_t))
    r.end = <int64_t *> malloc(nruns * sizeof(int64_t))
    r.heap = <int *> malloc(nruns * sizeof(int))
    if r.keys == NULL or r.counts == NULL or r.pos == NULL or r.end == NULL or r.heap == NULL:
        free(r.keys); free(r.counts); free(r.pos); free(r.end); free(r.heap)
        raise MemoryError("merge_runs: run table")
    for i in range(nruns):
        kv, cv = views[i]
        if kv.shape[0] == 0:
            continue
        r.keys[live] = &kv[0, 0]
        r.counts[live] = &cv[0]
        r.pos[live] = 0
        r.end[live] = kv.shape[0]
        r.heap[live] = live
        live += 1
    r.size = live
    cdef uint32_t[:, ::1] ko = keys
    cdef uint64_t[::1] co = counts
    with nogil:
        m = _merge(&r, &ko[0, 0], &co[0])
    free(r.keys); free(r.counts); free(r.pos); free(r.end); free(r.heap)
    return keys[:m], counts[:m]


def locate(const int32_t[:, ::1] sub,      # IN (m, k) distinct rows, suffix-sorted
           const int32_t[:, ::1] sup):     # IN (s, k) distinct rows, suffix-sorted
    """Index in ``sup`` of every row of ``sub`` (-1 where it is absent), by one
    merge pass: ``(index int64 (m,), number absent)``."""
    cdef Py_ssize_t m = sub.shape[0], s = sup.shape[0], i = 0, j = 0
    cdef int k = sub.shape[1], c
    cdef int64_t missing = 0
    if m and s and sup.shape[1] != k:
        raise ValueError("locate: the tables have different widths")
    out = np.empty(m, dtype=np.int64)
    cdef int64_t[::1] ov = out
    with nogil:
        for i in range(m):
            c = 1
            while j < s:
                c = _cmp_suffix(<const uint32_t *> &sup[j, 0], <const uint32_t *> &sub[i, 0], k)
                if c >= 0:
                    break
                j += 1
            if j < s and c == 0:
                ov[i] = j
            else:
                ov[i] = -1
                missing += 1
    return out, missing
