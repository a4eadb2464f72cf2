/* A model's n-grams renumbered as lmplz --renumber numbers its vocabulary, put
 * back into suffix order (last word most significant), and packed as the records
 * of KenLM's intermediate files (little-endian x86-64, as KenLM writes them).
 *
 * Order k in suffix order of the new ids is order k-1's rows in their new order,
 * each followed by the k-grams that extend it on the left, those sorted by their
 * first word's new id.  In the old suffix order those k-grams are already
 * contiguous, and one merge of the two orders finds which row of order k-1 each
 * run extends; so once order k-1's new order is known, order k is written run by
 * run, reading each run whole and sorting it (mostly one or two rows) on its own.
 * Where some k-gram's suffix is missing (no model the estimator writes), a
 * least-significant-digit radix sort of the k columns does the same.
 *
 * Word ids and row indices are checked as they are read: a bad one returns
 * NPLM_RENUMBER_RANGE, never a read or write out of bounds. */
#ifndef NPLM_SUFFIX_RENUMBER_H
#define NPLM_SUFFIX_RENUMBER_H

#include <stdint.h>
#include <string.h>

enum { NPLM_RENUMBER_OK = 0, NPLM_RENUMBER_RANGE = -1 };

/* A run's first row, whether taken (stored as -1 - row) or not. */
#define NPLM_RUN_START(f) ((f) < 0 ? -1 - (f) : (f))

/* Runs up to this long are sorted by insertion, longer ones by merging. */
#define NPLM_RUN_INSERTION 24
/* Rows (or runs) ahead of the one being read whose memory is fetched meanwhile:
 * the reads follow the new order, all over the old rows. */
#define NPLM_RENUMBER_AHEAD 16

/* Whether every one of the count values v is in [0, bound). */
static int nplm_all_below(const int32_t *v, int64_t count, int64_t bound) {
    const uint32_t b = bound > INT32_MAX ? (uint32_t)INT32_MAX + 1u : (uint32_t)bound;
    uint32_t bad = 0;
    int64_t i;
    for (i = 0; i < count; ++i) bad |= (uint32_t)v[i] >= b;
    return !bad;
}

/* a vs b (m words each) in suffix order: the last word first. */
static inline int nplm_suffix_cmp(const int32_t *a, const int32_t *b, int m) {
    int c;
    for (c = m - 1; c >= 0; --c)
        if (a[c] != b[c]) return (uint32_t)a[c] < (uint32_t)b[c] ? -1 : 1;
    return 0;
}

static inline int nplm_same_words(const int32_t *a, const int32_t *b, int m) {
    int c;
    for (c = 0; c < m; ++c)
        if (a[c] != b[c]) return 0;
    return 1;
}

/* Split the rows of ids (n x k, suffix order) into runs that share their last k-1
 * words and find each run's row in prev (m x (k-1), suffix order): first[j] (m + 1
 * values) becomes the first row of row j's run, first[j + 1] - first[j] its length
 * (0: no k-gram extends row j), first[m] = n; *longest the longest run.  Returns -1,
 * or the first row whose suffix is not in prev (first is then incomplete). */
static int64_t nplm_suffix_runs(const int32_t *ids, int64_t n, int k, const int32_t *prev, int64_t m,
                                int64_t *first, int64_t *longest) {
    const int w = k - 1;
    int64_t i, j = 0, start = 0;
    int cmp;
    *longest = 0;
    for (i = 0; i < n; ++i) {
        const int32_t *s = ids + (size_t)i * k + 1;
        if (i > 0 && nplm_same_words(s, s - k, w)) continue;
        if (i > 0 && i - start > *longest) *longest = i - start;
        for (;;) {          /* rows of prev before this run's suffix have no run */
            if (j >= m) return i;
            cmp = nplm_suffix_cmp(prev + (size_t)j * w, s, w);
            if (cmp == 0) break;
            if (cmp > 0) return i;
            first[j++] = i;
        }
        first[j++] = i;
        start = i;
    }
    if (n > 0 && n - start > *longest) *longest = n - start;
    while (j <= m) first[j++] = n;
    return -1;
}

/* Sort v[0..g) ascending (distinct values); tmp holds g values. */
static void nplm_sort_u64(uint64_t *v, int64_t g, uint64_t *tmp) {
    int64_t i, j, width, lo, mid, hi, a, b, o;
    uint64_t x, *from = v, *to = tmp, *swap;
    if (g <= NPLM_RUN_INSERTION) {
        for (i = 1; i < g; ++i) {
            x = v[i];
            for (j = i; j > 0 && v[j - 1] > x; --j) v[j] = v[j - 1];
            v[j] = x;
        }
        return;
    }
    for (lo = 0; lo < g; lo += NPLM_RUN_INSERTION)       /* sorted blocks, then merged */
        nplm_sort_u64(v + lo, (g - lo < NPLM_RUN_INSERTION) ? g - lo : NPLM_RUN_INSERTION, tmp);
    for (width = NPLM_RUN_INSERTION; width < g; width *= 2) {
        for (lo = 0; lo < g; lo += 2 * width) {
            mid = lo + width < g ? lo + width : g;
            hi = lo + 2 * width < g ? lo + 2 * width : g;
            a = lo; b = mid; o = lo;
            while (a < mid && b < hi) to[o++] = from[a] <= from[b] ? from[a++] : from[b++];
            while (a < mid) to[o++] = from[a++];
            while (b < hi) to[o++] = from[b++];
        }
        swap = from; from = to; to = swap;
    }
    if (from != v) memcpy(v, from, sizeof(uint64_t) * (size_t)g);
}

/* perm (n): the rows of ids (n x k) in suffix order of new_id (vocab words), from
 * the runs of nplm_suffix_runs (first, m + 1 values, each run's marked as it is
 * taken: a row of prev_perm listed twice is refused) and order k-1's rows in
 * their new order (prev_perm, m values).  scratch holds 2 * the longest run. */
static int nplm_suffix_perm(const int32_t *ids, int64_t n, int k, int64_t *first, const int64_t *prev_perm,
                            int64_t m, const int32_t *new_id, int64_t vocab, int64_t *perm, uint64_t *scratch,
                            int64_t longest) {
    int64_t q, j, a, g, t, pos = 0, ahead;
    int32_t w;
    for (q = 0; q < m; ++q) {
        if (q + NPLM_RENUMBER_AHEAD < m && (uint64_t)prev_perm[q + NPLM_RENUMBER_AHEAD] < (uint64_t)m)
            __builtin_prefetch(first + prev_perm[q + NPLM_RENUMBER_AHEAD]);
        if (q + NPLM_RENUMBER_AHEAD / 2 < m && (uint64_t)prev_perm[q + NPLM_RENUMBER_AHEAD / 2] < (uint64_t)m) {
            ahead = first[prev_perm[q + NPLM_RENUMBER_AHEAD / 2]];
            if (ahead >= 0 && ahead < n) __builtin_prefetch(ids + (size_t)ahead * k);
        }
        j = prev_perm[q];
        if (j < 0 || j >= m || first[j] < 0) return NPLM_RENUMBER_RANGE;
        a = first[j];
        g = NPLM_RUN_START(first[j + 1]) - a;
        first[j] = -1 - a;              /* taken */
        if (g > n - pos || g > longest) return NPLM_RENUMBER_RANGE;
        if (g == 1) {
            perm[pos++] = a;
            continue;
        }
        for (t = 0; t < g; ++t) {
            w = ids[(size_t)(a + t) * k];
            if ((uint64_t)(uint32_t)w >= (uint64_t)vocab) return NPLM_RENUMBER_RANGE;
            scratch[t] = (uint64_t)(uint32_t)new_id[w] << 32 | (uint64_t)t;
        }
        nplm_sort_u64(scratch, g, scratch + longest);
        for (t = 0; t < g; ++t) perm[pos++] = a + (int64_t)(scratch[t] & 0xFFFFFFFFu);
    }
    return pos == n ? NPLM_RENUMBER_OK : NPLM_RENUMBER_RANGE;
}

/* Stable counting sort of the rows src[0..n) (NULL: 0..n-1) by the new id of
 * their word `col` into dst; hist holds vocab + 1 values.  Word ids are checked
 * by the caller. */
static void nplm_sort_by_word(const int32_t *ids, int64_t n, int k, int col, const int32_t *new_id,
                              int64_t vocab, const int64_t *src, int64_t *dst, int64_t *hist) {
    int64_t i, r;
    memset(hist, 0, sizeof(int64_t) * (size_t)(vocab + 1));
    for (i = 0; i < n; ++i) {
        r = src ? src[i] : i;
        ++hist[new_id[ids[(size_t)r * k + col]] + 1];
    }
    for (i = 0; i < vocab; ++i) hist[i + 1] += hist[i];
    for (i = 0; i < n; ++i) {
        r = src ? src[i] : i;
        dst[hist[new_id[ids[(size_t)r * k + col]]]++] = r;
    }
}

/* The same order for any rows (ties keep their order), by k stable counting
 * passes, first column first.  new_id's values must be below vocab; scratch
 * holds n values, hist vocab + 1. */
static int nplm_suffix_perm_lsd(const int32_t *ids, int64_t n, int k, const int32_t *new_id, int64_t vocab,
                                int64_t *perm, int64_t *scratch, int64_t *hist) {
    int64_t *from = NULL, *to = (k % 2) ? perm : scratch;     /* the last pass writes perm */
    int c;
    if (!nplm_all_below(ids, n * k, vocab)) return NPLM_RENUMBER_RANGE;
    for (c = 0; c < k; ++c) {
        nplm_sort_by_word(ids, n, k, c, new_id, vocab, from, to, hist);
        from = to;
        to = (from == perm) ? scratch : perm;
    }
    return NPLM_RENUMBER_OK;
}

/* Records of order k (k uint32 words, float32 probability, float32 back-off; 4k
 * + 8 bytes each) into out: row perm[j] of ids, logprob and backoff (NULL: 0),
 * words through new_id (NULL: as they are; else vocab of them), for j < n. */
static int nplm_pack_records(const int32_t *ids, int64_t n, int k, const int64_t *perm, const int32_t *new_id,
                             int64_t vocab, const float *logprob, const float *backoff, uint8_t *out) {
    const size_t stride = 4 * (size_t)k + 8;
    const float zero = 0.0f;
    int64_t j, r;
    int c;
    int32_t w;
    for (j = 0; j < n; ++j) {
        uint8_t *rec = out + (size_t)j * stride;
        if (perm && j + NPLM_RENUMBER_AHEAD < n && (uint64_t)perm[j + NPLM_RENUMBER_AHEAD] < (uint64_t)n) {
            r = perm[j + NPLM_RENUMBER_AHEAD];
            __builtin_prefetch(ids + (size_t)r * k);
            __builtin_prefetch(logprob + r);
            if (backoff) __builtin_prefetch(backoff + r);
        }
        r = perm ? perm[j] : j;
        if (r < 0 || r >= n) return NPLM_RENUMBER_RANGE;
        for (c = 0; c < k; ++c) {
            w = ids[(size_t)r * k + c];
            if (new_id) {
                if ((uint64_t)(uint32_t)w >= (uint64_t)vocab) return NPLM_RENUMBER_RANGE;
                w = new_id[w];
            }
            memcpy(rec + 4 * c, &w, 4);
        }
        memcpy(rec + 4 * k, logprob + r, 4);
        memcpy(rec + 4 * k + 4, backoff ? backoff + r : &zero, 4);
    }
    return NPLM_RENUMBER_OK;
}

/* Rows perm[j] of ids (n x k) through new_id (vocab words) into out (n x k). */
static int nplm_gather_rows(const int32_t *ids, int64_t n, int k, const int64_t *perm, const int32_t *new_id,
                            int64_t vocab, int32_t *out) {
    int64_t j, r;
    int c;
    int32_t w;
    for (j = 0; j < n; ++j) {
        r = perm[j];
        if (r < 0 || r >= n) return NPLM_RENUMBER_RANGE;
        for (c = 0; c < k; ++c) {
            w = ids[(size_t)r * k + c];
            if ((uint64_t)(uint32_t)w >= (uint64_t)vocab) return NPLM_RENUMBER_RANGE;
            out[(size_t)j * k + c] = new_id[w];
        }
    }
    return NPLM_RENUMBER_OK;
}

#endif
