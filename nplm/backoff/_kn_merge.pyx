"""Integer kernels of the partitioned Kneser-Ney estimation (``estimate/partitioned.py``).

The n-grams are split into parts by their last word (ranges of word ids), so each
part holds, in suffix order, everything that ``_kn.adjust`` needs.  What crosses
parts is the context of an n-gram (all but its last word): ``merge_runs``
merges suffix-sorted runs of counted n-grams (spilled while counting, or counted
on other machines); ``bucket_positions`` routes a part's n-grams to the parts
holding their contexts (a stable counting sort by part), and ``context_stats``
finds each routed n-gram's context by the suffix trie of the context's part and
sums the statistics of the contexts' extensions, without sorting.
"""
from libc.stdint cimport uint8_t, uint32_t, int32_t, uint64_t, int64_t
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


def bucket_positions(const int32_t[::1] bucket,     # IN (m,) bucket of each row, in [0, buckets)
                     int buckets):
    """Where a stable counting sort by ``bucket`` puts each row: ``(position int64
    (m,), start of each bucket int64 (buckets+1,))``."""
    cdef Py_ssize_t m = bucket.shape[0], i
    cdef int32_t b
    if buckets < 1:
        raise ValueError("bucket_positions: at least one bucket")
    pos = np.empty(m, dtype=np.int64)
    starts = np.zeros(buckets + 1, dtype=np.int64)
    cdef int64_t[::1] pv = pos
    cdef int64_t[::1] sv = starts
    cdef Py_ssize_t bad = 0
    with nogil:
        for i in range(m):
            b = bucket[i]
            if b < 0 or b >= buckets:
                bad += 1
                break
            sv[b + 1] += 1
        if not bad:
            for b in range(buckets):
                sv[b + 1] += sv[b]
            for i in range(m):
                b = bucket[i]
                pv[i] = sv[b]
                sv[b] += 1
            for b in range(buckets, 0, -1):     # back to the starts
                sv[b] = sv[b - 1]
            sv[0] = 0
    if bad:
        raise ValueError("bucket_positions: a bucket out of range")
    return pos, starts


cdef enum:
    AHEAD = 16          # records looked up ahead of the one being summed (prefetch)

cdef extern from *:
    void __builtin_prefetch(const void *addr) nogil


cdef inline int64_t _child_row(const int32_t *lower, Py_ssize_t width, int64_t a, int64_t b,
                               int32_t v) noexcept nogil:
    """The row in [a, b) of ``lower`` (rows of ``width`` words) whose first word is
    ``v``, or -1."""
    cdef int64_t end = b, mid
    while a < b:
        mid = (a + b) >> 1
        if lower[mid * width] < v:
            a = mid + 1
        else:
            b = mid
    return a if a < end and lower[a * width] == v else -1


def context_stats(const int32_t[::1] node,        # IN (r,) the context's parent node in its part
                                                  #   (by_word: the context's word id)
                  const int32_t[::1] first,       # IN (r,) the context's first word
                  const uint64_t[::1] adj,        # IN (r,) adjusted counts of the n-grams
                  const uint8_t[::1] mark,        # IN (r,) 1 = pruned
                  const int32_t[:, ::1] lower,    # IN (c, k-1) the part's (k-1)-grams (unused by_word)
                  const int64_t[::1] child,       # IN children of each (k-2)-gram node in ``lower``
                  int64_t lo,                     # IN (by_word) the part's first word id
                  bint by_word, bint pruning,
                  uint64_t[:, ::1] sums,          # IN/OUT (c, 5) per context: sum of the extensions'
                                                  #   adjusted counts, kept extensions of count 1,
                                                  #   2, 3+, adjusted counts of pruned extensions
                  int32_t[::1] where):            # OUT (r,) row of each context in ``lower``
    """Find the context of each routed n-gram among the part's (k-1)-grams and add
    the n-gram's statistics to it (``_kn_probs.order_probs``'s sums).  The context
    ``v x`` is the child ``v`` of node ``x`` (children are contiguous and sorted by
    first word); for bigrams the context is the word itself (row ``word - lo``).
    The records hit the contexts in no useful order, so each record's node is
    fetched AHEAD records early, and its first child AHEAD/2 early.  Returns how
    many contexts were absent (a bug)."""
    cdef Py_ssize_t r = node.shape[0], c = sums.shape[0], i, j, width = lower.shape[1]
    cdef int64_t row, nodes = child.shape[0] - 1, y
    cdef uint64_t x
    cdef int64_t missing = 0
    cdef const int32_t *low = &lower[0, 0] if lower.shape[0] else NULL
    if first.shape[0] != r or adj.shape[0] != r or mark.shape[0] != r or where.shape[0] != r:
        raise ValueError("context_stats: routed arrays of different lengths")
    if sums.shape[1] != 5 or (not by_word and lower.shape[0] != c):
        raise ValueError("context_stats: context arrays of different shapes")
    if not by_word and (nodes < 0 or (nodes and child[nodes] > c)):
        raise ValueError("context_stats: the child index does not fit the contexts")
    with nogil:
        for i in range(r):
            j = i + AHEAD
            if j < r:
                y = node[j]
                if by_word:
                    if lo <= y < lo + c:
                        __builtin_prefetch(&sums[y - lo, 0])
                elif 0 <= y < nodes:
                    __builtin_prefetch(&child[y])
            j = i + AHEAD // 2
            if not by_word and j < r:
                y = node[j]
                if 0 <= y < nodes and child[y] < c:
                    __builtin_prefetch(low + child[y] * width)
                    __builtin_prefetch(&sums[child[y], 0])
            y = node[i]
            if by_word:
                row = y - lo if lo <= y < lo + c else -1
            elif 0 <= y < nodes:
                row = _child_row(low, width, child[y], child[y + 1], first[i])
            else:
                row = -1
            where[i] = <int32_t> row
            if row < 0:
                missing += 1
                continue
            x = adj[i]
            sums[row, 0] += x
            if pruning and mark[i]:
                sums[row, 4] += x
            elif x > 0:
                sums[row, x if x < 3 else 3] += 1
    return missing
