/* One pass over a KenLM trie's records, checking what every file build_binary
 * writes satisfies and a damaged one almost never does: each order's child
 * pointers start at 0, never decrease and end at the next order's count; the word
 * ids under each parent are below the vocabulary size and never decrease (the search
 * relies on it; an n-gram an ARPA lists twice is written twice, side by side); no value is one a model cannot hold (see klm_bad_prob,
 * klm_bad_backoff).  KenLM's format has no checksums: these invariants are what
 * turns a damaged file into an error instead of absurd scores. */
#ifndef NPLM_KENLM_CHECK_H
#define NPLM_KENLM_CHECK_H

#include <math.h>
#include "kenlm_query.h"

/* |log10| beyond this (a probability of 10^-10000) is no estimate; -inf is kept
 * (KenLM stores an ARPA's -inf as it is). */
#define KLM_VALUE_LIMIT 10000.0f

static inline int klm_bad_prob(float p) {
    return isnan(p) || p > 0.0f || (p < -KLM_VALUE_LIMIT && !isinf(p));
}

static inline int klm_bad_backoff(float b) {
    return !(b >= -KLM_VALUE_LIMIT && b <= KLM_VALUE_LIMIT);
}

/* A score no sound file gives: NaN, or beyond the sum of an order's worth of the
 * values accepted above (-inf is kept).  What a query checks of the n-grams a load
 * did not check. */
static inline int klm_bad_score(float p) {
    const float limit = KLM_VALUE_LIMIT * KLM_MAX_ORDER;
    return !(p >= -limit && p <= limit) && !(isinf(p) && p < 0.0f);
}

typedef struct {
    int order;                /* the order whose records are at fault (1: unigrams) */
    uint64_t record;
    const char *what;
} klm_fault;

static inline int klm_fail(klm_fault *f, int order, uint64_t record, const char *what) {
    f->order = order;
    f->record = record;
    f->what = what;
    return 1;
}

/* The first unsound value among n records of `stride` bytes holding a float32
 * probability at byte prob_at and, where the offset is not -1, a back-off at
 * backoff_at and a rest-cost probability at rest_at: its record, or -1, and what it
 * is in *what.  `flagged`: the probability's sign bit is a flag (probing), set before
 * the test.  Probabilities are tested first, then back-offs, then rest probabilities,
 * each over every record. */
static inline int64_t klm_check_values(const uint8_t *base, uint64_t n, uint32_t stride, uint32_t prob_at,
                                       int flagged, int backoff_at, int rest_at, const char **what) {
    uint64_t i;
    for (i = 0; i < n; i++) {
        float p = klm_load_float(base + i * stride + prob_at);
        if (klm_bad_prob(flagged ? klm_set_sign(p) : p)) { *what = "a probability no model holds"; return (int64_t)i; }
    }
    for (i = 0; backoff_at >= 0 && i < n; i++)
        if (klm_bad_backoff(klm_load_float(base + i * stride + backoff_at))) {
            *what = "a back-off no model holds";
            return (int64_t)i;
        }
    for (i = 0; rest_at >= 0 && i < n; i++)
        if (klm_bad_prob(klm_load_float(base + i * stride + rest_at))) {
            *what = "a probability no model holds";
            return (int64_t)i;
        }
    return -1;
}

/* A quantisation table of n bins: 0 when sound, 1 when it holds a value no model
 * holds, 2 when its bins are out of order.  Back-off tables (`backoff`) start with
 * the two bins -0.0 and +0.0, and KenLM fills the bins a small model leaves unused
 * with -inf. */
static inline int klm_check_quant(const float *v, uint64_t n, int backoff) {
    uint64_t i;
    for (i = 0; i < n; i++)
        if (backoff ? (klm_bad_backoff(v[i]) && !(isinf(v[i]) && v[i] < 0)) : klm_bad_prob(v[i])) return 1;
    for (i = backoff ? 3 : 1; i < n; i++)
        if (v[i] < v[i - 1]) return 2;
    return 0;
}

/* Reads the child pointers of one level (0: the unigrams, k: middle order k + 1)
 * in increasing record order, as stored (unclamped). */
typedef struct {
    const klm_trie *m;
    const klm_bitpacked *t;   /* NULL: the unigrams */
    uint64_t high;            /* array compression: the offsets' index for the last record read */
} klm_pointers;

static inline uint64_t klm_pointer(klm_pointers *p, uint64_t i) {
    const klm_bitpacked *t = p->t;
    uint64_t low;
    if (t == NULL) return klm_load_u64(p->m->unigram + i * 16 + 8);
    low = klm_read57(t->base, i * t->total_bits + t->total_bits - t->next_bits, t->next_mask);
    if (t->array == NULL) return low;
    while (p->high + 1 < t->array_count && t->array[p->high + 1] <= i) p->high++;
    return (p->high << t->next_bits) | low;
}

/* The pointers of a level with `records` records (and the end record after them)
 * cover `children` records in order. */
static inline int klm_check_pointers(const klm_trie *m, const klm_bitpacked *t, int order, uint64_t records,
                                     uint64_t children, klm_fault *f) {
    klm_pointers p = {m, t, 0};
    uint64_t i, prev = 0, ptr;
    if (t != NULL && t->array != NULL) {
        for (i = 1; i < t->array_count; i++)
            if (t->array[i] < t->array[i - 1]) return klm_fail(f, order, i, "pointer offsets out of order");
    }
    for (i = 0; i <= records; i++) {
        ptr = klm_pointer(&p, i);
        if ((i == 0 && ptr != 0) || ptr < prev || ptr > children)
            return klm_fail(f, order, i, "child pointers out of order");
        prev = ptr;
    }
    if (prev != children) return klm_fail(f, order, records, "child pointers that do not cover the next order");
    return 0;
}

/* The records of t (order `order`), whose parents are the level `parent`: word ids
 * in range and non-decreasing under each parent, values sound. */
static inline int klm_check_records(const klm_trie *m, const klm_bitpacked *parent, uint64_t parents,
                                    const klm_bitpacked *t, int order, int longest, klm_fault *f) {
    klm_pointers p = {m, parent, 0};
    uint64_t i, j = 0, boundary = parents ? klm_pointer(&p, 1) : t->entries, word, bit;
    int64_t prev = -1;
    for (i = 0; i < t->entries; i++) {
        while (i >= boundary && j < parents) {
            j++;
            boundary = j < parents ? klm_pointer(&p, j + 1) : t->entries;
            prev = -1;
        }
        bit = i * t->total_bits;
        word = klm_read57(t->base, bit, t->word_mask);
        if (word >= t->max_vocab) return klm_fail(f, order, i, "word ids outside the vocabulary");
        if ((int64_t)word < prev) return klm_fail(f, order, i, "word ids out of order");
        prev = (int64_t)word;
        if (t->prob_table != NULL) continue;       /* quantised: the tables are checked */
        bit += t->word_bits;
        if (klm_bad_prob(klm_read_nonpos31(t->base, bit)))
            return klm_fail(f, order, i, "a probability no model holds");
        if (!longest && klm_bad_backoff(klm_read_float32(t->base, bit + 31)))
            return klm_fail(f, order, i, "a back-off no model holds");
    }
    return 0;
}

/* 0 when the trie's records are sound, else 1 with *f saying where they are not. */
static inline int klm_check_trie(const klm_trie *m, klm_fault *f) {
    uint64_t words = m->n_unigram - 2, w, parents = words;
    const klm_bitpacked *parent = NULL, *t;
    const uint8_t *u;
    int k;
    for (w = 0; w < words; w++) {
        u = m->unigram + w * 16;
        if (klm_bad_prob(klm_load_float(u))) return klm_fail(f, 1, w, "a probability no model holds");
        if (klm_bad_backoff(klm_load_float(u + 4))) return klm_fail(f, 1, w, "a back-off no model holds");
    }
    if (klm_check_pointers(m, NULL, 1, words, m->first_entries, f)) return 1;
    for (k = 0; k < m->order - 1; k++) {
        int longest = k == m->order - 2;
        t = longest ? &m->longest : &m->middle[k];
        if (!longest && klm_check_pointers(m, t, k + 2, t->entries, t->next_entries, f)) return 1;
        if (klm_check_records(m, parent, parents, t, k + 2, longest, f)) return 1;
        parent = t;
        parents = t->entries;
    }
    return 0;
}

#endif
