/* Queries on KenLM binary files, mapped as they are (see nplm/backoff/kenlm/format.py
 * for the layout).  Every function reads the mapped tables only; none allocates.
 *
 * Scoring follows KenLM's GenericModel::FullScore (lm/model.cc) step for step so that
 * probabilities, n-gram lengths and states come out bit for bit as kenlm's: the
 * longest match is found by walking the context one word at a time, then the
 * back-offs of the context n-grams longer than the match are added in order.
 *
 * The tables come from a file that may be corrupt: every index read from the file
 * (trie child ranges, array-compression offsets) is clamped to its table, and every
 * probe loop is bounded, so a bad file gives wrong numbers, never a crash or a hang.
 */
#ifndef NPLM_KENLM_QUERY_H
#define NPLM_KENLM_QUERY_H

#include <stdint.h>
#include <string.h>

#define KLM_MAX_ORDER 16          /* nplm's MAX_ORDER (_kernels.pxd) */

/* ---- hashing ------------------------------------------------------------------- */

/* MurmurHash64A, seed 0: KenLM's word hash. */
static inline uint64_t klm_hash_word(const char *s, size_t len) {
    const uint64_t m = 0xc6a4a7935bd1e995ULL;
    uint64_t h = (uint64_t)len * m, k;
    const unsigned char *p = (const unsigned char *)s;
    size_t blocks = len / 8, i;
    for (i = 0; i < blocks; i++, p += 8) {
        memcpy(&k, p, 8);
        k *= m; k ^= k >> 47; k *= m;
        h ^= k; h *= m;
    }
    switch (len & 7) {
        case 7: h ^= (uint64_t)p[6] << 48; /* fall through */
        case 6: h ^= (uint64_t)p[5] << 40; /* fall through */
        case 5: h ^= (uint64_t)p[4] << 32; /* fall through */
        case 4: h ^= (uint64_t)p[3] << 24; /* fall through */
        case 3: h ^= (uint64_t)p[2] << 16; /* fall through */
        case 2: h ^= (uint64_t)p[1] << 8;  /* fall through */
        case 1: h ^= (uint64_t)p[0]; h *= m;
    }
    h ^= h >> 47; h *= m; h ^= h >> 47;
    return h;
}

/* KenLM's n-gram key of the probing tables: extend by one older word. */
static inline uint64_t klm_combine(uint64_t current, uint32_t next) {
    return (current * 8978948897894561157ULL) ^ (((uint64_t)next + 1) * 17894857484156487943ULL);
}

/* ---- bit packing (little-endian x86-64, as KenLM's util/bit_packing.hh) -------- */

static inline uint64_t klm_read57(const uint8_t *base, uint64_t bit, uint64_t mask) {
    uint64_t v;
    memcpy(&v, base + (bit >> 3), 8);
    return (v >> (bit & 7)) & mask;
}

static inline uint32_t klm_read25(const uint8_t *base, uint64_t bit, uint32_t mask) {
    uint32_t v;
    memcpy(&v, base + (bit >> 3), 4);
    return (v >> (bit & 7)) & mask;
}

static inline float klm_read_float32(const uint8_t *base, uint64_t bit) {
    uint64_t v;
    uint32_t i;
    float f;
    memcpy(&v, base + (bit >> 3), 8);
    i = (uint32_t)(v >> (bit & 7));
    memcpy(&f, &i, 4);
    return f;
}

/* 31 stored bits, sign bit forced on (a probability is never positive). */
static inline float klm_read_nonpos31(const uint8_t *base, uint64_t bit) {
    uint64_t v;
    uint32_t i;
    float f;
    memcpy(&v, base + (bit >> 3), 8);
    i = (uint32_t)(v >> (bit & 7)) | 0x80000000u;
    memcpy(&f, &i, 4);
    return f;
}

static inline float klm_load_float(const uint8_t *p) {
    float f;
    memcpy(&f, p, 4);
    return f;
}

static inline uint64_t klm_load_u64(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static inline int klm_signbit(float f) { uint32_t i; memcpy(&i, &f, 4); return (int)(i >> 31); }
static inline float klm_set_sign(float f) { uint32_t i; memcpy(&i, &f, 4); i |= 0x80000000u; memcpy(&f, &i, 4); return f; }
/* KenLM's HasExtension: a back-off of exactly -0.0 means "nothing extends this n-gram". */
static inline int klm_has_extension(float f) { uint32_t i; memcpy(&i, &f, 4); return i != 0x80000000u; }

/* ---- the result of one query ---------------------------------------------------- */

typedef struct {
    uint32_t words[KLM_MAX_ORDER - 1];
    float backoff[KLM_MAX_ORDER - 1];
    uint8_t length;
} klm_state;                      /* layout of nplm's NState */

typedef struct {
    float prob;
    int ngram_length;
} klm_ret;

/* ---- vocabularies ------------------------------------------------------------- */

/* Probing: {uint64 hash, uint32 id} packed entries, hash % buckets, linear probing,
 * hash 0 marks an empty bucket. */
static inline uint32_t klm_probing_vocab_index(const uint8_t *table, uint64_t buckets, uint64_t h) {
    uint64_t b = h % buckets, probes;
    for (probes = 0; probes < buckets; probes++) {
        const uint8_t *e = table + b * 12;
        uint64_t k = klm_load_u64(e);
        if (k == h) {
            uint32_t id;
            memcpy(&id, e + 8, 4);
            return id;
        }
        if (k == 0) return 0;
        if (++b == buckets) b = 0;
    }
    return 0;
}

/* Sorted: interpolation search of the hash among n sorted uint64 (ids 1..n), as
 * KenLM's BoundedSortedUniformFind with its float pivot. */
static inline uint32_t klm_sorted_vocab_index(const uint64_t *sorted, uint64_t n, uint64_t key) {
    int64_t before = -1, after = (int64_t)n;
    uint64_t before_v = 0, after_v = UINT64_MAX;
    while (after - before > 1) {
        uint64_t width = (uint64_t)(after - before - 1);
        uint64_t off = (uint64_t)((float)(key - before_v) / (float)(after_v - before_v) * (float)width);
        int64_t pivot;
        uint64_t mid;
        if (off >= width) off = width - 1;
        pivot = before + 1 + (int64_t)off;
        mid = sorted[pivot];
        if (mid < key) { before = pivot; before_v = mid; }
        else if (mid > key) { after = pivot; after_v = mid; }
        else return (uint32_t)(pivot + 1);
    }
    return 0;
}

/* ---- probing search --------------------------------------------------------------- */

typedef struct {
    const uint8_t *table;
    uint64_t buckets;
} klm_hash_table;

typedef struct {
    int order;
    uint64_t n_unigram;           /* entries of the unigram array */
    const uint8_t *unigram;
    uint32_t unigram_stride;      /* 8, or 12 with rest costs */
    uint32_t middle_stride;       /* 16, or 20 with rest costs */
    klm_hash_table middle[KLM_MAX_ORDER];
    klm_hash_table longest;       /* entries of 12 bytes */
} klm_probing;

/* The entry holding key, or NULL, probing from bucket b.  Entries start with their
 * uint64 key. */
static inline const uint8_t *klm_probe_from(const klm_hash_table *t, uint32_t stride, uint64_t key,
                                            uint64_t b) {
    uint64_t probes;
    for (probes = 0; probes < t->buckets; probes++) {
        const uint8_t *e = t->table + b * stride;
        uint64_t k = klm_load_u64(e);
        if (k == key) return e;
        if (k == 0) return NULL;
        if (++b == t->buckets) b = 0;
    }
    return NULL;
}

static inline const uint8_t *klm_probe(const klm_hash_table *t, uint32_t stride, uint64_t key) {
    return klm_probe_from(t, stride, key, key % t->buckets);
}

/* Every order's key and first bucket for scoring w after `in`: they follow from the
   words alone, so all the buckets are requested now, so that their cache misses
   overlap instead of following one another as the lookups would have them (KenLM
   probes one order at a time).  Returns the number of context words used. */
static inline int klm_probing_keys(const klm_probing *m, const klm_state *in, uint32_t w, uint64_t *keys,
                                   uint64_t *first) {
    uint64_t node;
    int n_ctx = in->length, i;
    if (w >= m->n_unigram) w = 0;
    if (n_ctx > m->order - 1) n_ctx = m->order - 1;
    __builtin_prefetch(m->unigram + (uint64_t)w * m->unigram_stride);
    node = w;
    for (i = 0; i < n_ctx; i++) {
        const klm_hash_table *t = i == m->order - 2 ? &m->longest : &m->middle[i];
        node = klm_combine(node, in->words[i]);
        keys[i] = node;
        first[i] = node % t->buckets;
        /* (a probe runs on past its first bucket, often into the next cache line) */
        __builtin_prefetch(t->table + first[i] * (i == m->order - 2 ? 12 : m->middle_stride));
        __builtin_prefetch(t->table + first[i] * (i == m->order - 2 ? 12 : m->middle_stride) + 64);
    }
    return n_ctx;
}

/* Score w after `in`, given klm_probing_keys(m, in, w, keys, first) = n_ctx. */
static inline void klm_probing_probe(const klm_probing *m, const klm_state *in, uint32_t w, const uint64_t *keys,
                                     const uint64_t *first, int n_ctx, klm_state *out, klm_ret *ret) {
    klm_state copy;
    const uint8_t *u, *e;
    float prob;
    int independent, length = 1, next_use, i;
    if (in == out) { copy = *in; in = &copy; }
    if (w >= m->n_unigram) w = 0;
    u = m->unigram + (uint64_t)w * m->unigram_stride;
    prob = klm_load_float(u);
    independent = klm_signbit(prob);
    prob = klm_set_sign(prob);
    out->backoff[0] = klm_load_float(u + 4);
    next_use = klm_has_extension(out->backoff[0]) ? 1 : 0;
    out->words[0] = w;
    for (i = 0; i < n_ctx && !independent; i++) {
        uint64_t node = keys[i];
        if (i == m->order - 2) {
            e = klm_probe_from(&m->longest, 12, node, first[i]);
            if (e != NULL) {
                prob = klm_load_float(e + 8);
                length = m->order;
            }
            break;
        }
        e = klm_probe_from(&m->middle[i], m->middle_stride, node, first[i]);
        if (e == NULL) break;
        prob = klm_load_float(e + 8);
        independent = klm_signbit(prob);
        prob = klm_set_sign(prob);
        out->backoff[i + 1] = klm_load_float(e + 12);
        length = i + 2;
        if (klm_has_extension(out->backoff[i + 1])) next_use = length;
    }
    for (i = 1; i < next_use; i++) out->words[i] = in->words[i - 1];
    out->length = (uint8_t)next_use;
    for (i = length - 1; i < n_ctx; i++) prob += in->backoff[i];
    ret->prob = prob;
    ret->ngram_length = length;
}

static inline void klm_probing_score(const klm_probing *m, const klm_state *in, uint32_t w,
                                     klm_state *out, klm_ret *ret) {
    uint64_t keys[KLM_MAX_ORDER], first[KLM_MAX_ORDER];
    int n_ctx = klm_probing_keys(m, in, w, keys, first);
    klm_probing_probe(m, in, w, keys, first, n_ctx, out, ret);
}

/* KenLM's GetState: the state after a context (most recent word first). */
static inline void klm_probing_context(const klm_probing *m, const uint32_t *words, int n, klm_state *out) {
    uint64_t node;
    uint32_t w0;
    int i, length;
    const uint8_t *e;
    if (n > m->order - 1) n = m->order - 1;
    if (n <= 0) { out->length = 0; return; }
    w0 = words[0] < m->n_unigram ? words[0] : 0;
    out->backoff[0] = klm_load_float(m->unigram + (uint64_t)w0 * m->unigram_stride + 4);
    length = klm_has_extension(out->backoff[0]) ? 1 : 0;
    node = w0;
    for (i = 1; i < n; i++) {
        node = klm_combine(node, words[i]);
        e = klm_probe(&m->middle[i - 1], m->middle_stride, node);
        if (e == NULL) break;
        out->backoff[i] = klm_load_float(e + 12);
        if (klm_has_extension(out->backoff[i])) length = i + 1;
    }
    for (i = 0; i < length; i++) out->words[i] = words[i];
    out->length = (uint8_t)length;
}

/* ---- trie search ------------------------------------------------------------------ */

typedef struct {
    const uint8_t *base;          /* the records */
    uint64_t entries;             /* records (the one after them holds the end pointer) */
    uint64_t max_vocab;           /* counts[0]: the interpolation search's upper bound */
    uint8_t word_bits, total_bits, next_bits;
    uint64_t word_mask, next_mask;
    uint8_t prob_bits, backoff_bits;       /* quantised: bits of each; else 0 */
    uint32_t prob_mask, backoff_mask;
    const float *prob_table;               /* quantised: the centres; else NULL */
    const float *backoff_table;
    const uint64_t *array;                 /* array pointer compression: the offsets; else NULL */
    uint64_t array_count;
    double array_scale;                    /* array_count / (entries + 1): where an index's offset lies */
    uint64_t next_entries;                 /* records of the next order (child indices' bound) */
} klm_bitpacked;

typedef struct {
    int order;
    uint64_t n_unigram;           /* counts[0] + 2 records; word ids below counts[0] + 1 */
    const uint8_t *unigram;       /* {float prob, float backoff, uint64 next} */
    uint64_t first_entries;       /* records of order 2 (unigram pointers' bound) */
    klm_bitpacked middle[KLM_MAX_ORDER];
    klm_bitpacked longest;
} klm_trie;

/* Interpolation search of word among records [begin, end) (KenLM's FindBitPacked with
 * its 32-bit pivot).  The pivot always lies strictly between the bounds, so even
 * unsorted (corrupt) records are read only inside the range. */
static inline int klm_find_word(const klm_bitpacked *t, uint64_t begin, uint64_t end, uint64_t key,
                                uint64_t *at) {
    uint64_t before = begin - 1, after = end;      /* before may wrap to -1: kept as offsets */
    uint64_t before_v = 0, after_v = t->max_vocab;
    if (end > begin) {
        /* request both ends of the range at once: for the short ranges of most n-grams
         * these are the lines the search will read */
        __builtin_prefetch(t->base + ((begin * t->total_bits) >> 3));
        __builtin_prefetch(t->base + (((end - 1) * t->total_bits) >> 3));
    }
    if (key >= after_v) {
        /* beyond the vocabulary bound the pivot formula breaks; plain binary search */
        uint64_t lo = begin, hi = end;
        while (lo < hi) {
            uint64_t mid_i = lo + (hi - lo) / 2;
            uint64_t mid = klm_read57(t->base, mid_i * t->total_bits, t->word_mask);
            if (mid < key) lo = mid_i + 1;
            else if (mid > key) hi = mid_i;
            else { *at = mid_i; return 1; }
        }
        return 0;
    }
    while (after - before > 1) {
        uint64_t width = after - before - 1, off = key - before_v, pivot;
        /* off < 2**32 (word ids); a product beyond 64 bits needs 128-bit arithmetic */
        if (width >> 32) pivot = (uint64_t)(((__uint128_t)off * width) / (after_v - before_v + 1));
        else pivot = (off * width) / (after_v - before_v + 1);
        pivot += before + 1;
        uint64_t mid = klm_read57(t->base, pivot * t->total_bits, t->word_mask);
        if (mid < key) { before = pivot; before_v = mid; }
        else if (mid > key) { after = pivot; after_v = mid; }
        else { *at = pivot; return 1; }
    }
    return 0;
}

static inline void klm_clamp_range(uint64_t *begin, uint64_t *end, uint64_t bound) {
    if (*end > bound) *end = bound;
    if (*begin > *end) *begin = *end;
}

/* The last i with a[i] <= key in the sorted a[0..n) (n >= 1), or 0 when there is none,
 * searched from ``guess``: gallop to bracket the answer, then bisect.  The offsets of
 * array pointer compression grow about linearly with the record index, so a guess in
 * proportion is a load or two away (KenLM bisects the whole array).  Any array, sorted
 * or not, is only read inside its bounds. */
static inline uint64_t klm_last_at_most(const uint64_t *a, uint64_t n, uint64_t key, uint64_t guess) {
    uint64_t lo, hi, step = 1;
    if (guess >= n) guess = n - 1;
    if (a[guess] <= key) {
        lo = guess;
        for (;;) {
            hi = lo + step;
            if (hi >= n) { hi = n; break; }
            if (a[hi] > key) break;
            lo = hi;
            step <<= 1;
        }
    } else {
        hi = guess;
        for (;;) {
            if (hi < step) {
                lo = 0;
                if (a[0] > key) return 0;
                break;
            }
            lo = hi - step;
            if (a[lo] <= key) break;
            hi = lo;
            step <<= 1;
        }
    }
    while (hi - lo > 1) {               /* a[lo] <= key < a[hi] (or hi == n) */
        uint64_t mid = lo + (hi - lo) / 2;
        if (a[mid] <= key) lo = mid; else hi = mid;
    }
    return lo;
}

/* The child range [begin, end) in the next order of record index (at its next field). */
static inline void klm_read_next(const klm_bitpacked *t, uint64_t index, uint64_t bit,
                                 uint64_t *begin, uint64_t *end) {
    if (t->array == NULL) {
        *begin = klm_read57(t->base, bit, t->next_mask);
        *end = klm_read57(t->base, bit + t->total_bits, t->next_mask);
    } else {
        /* the last offset <= index (found from where a uniform spread would put it),
         * and the last <= index + 1 */
        uint64_t b_it, e_it;
        b_it = klm_last_at_most(t->array, t->array_count, index, (uint64_t)((double)index * t->array_scale));
        for (e_it = b_it + 1; e_it < t->array_count && t->array[e_it] <= index + 1; e_it++) {}
        e_it--;
        *begin = (b_it << t->next_bits) | klm_read57(t->base, bit, t->next_mask);
        *end = (e_it << t->next_bits) | klm_read57(t->base, bit + t->total_bits, t->next_mask);
    }
    klm_clamp_range(begin, end, t->next_entries);
}

static inline void klm_unigram_range(const klm_trie *m, uint32_t w, uint64_t *begin, uint64_t *end) {
    *begin = klm_load_u64(m->unigram + (uint64_t)w * 16 + 8);
    *end = klm_load_u64(m->unigram + (uint64_t)(w + 1) * 16 + 8);
    klm_clamp_range(begin, end, m->first_entries);
}

/* Middle lookup: found (1) with prob / backoff and the child range updated. */
static inline int klm_trie_middle(const klm_bitpacked *t, uint32_t word, uint64_t *begin, uint64_t *end,
                                  float *prob, float *backoff) {
    uint64_t at, bit;
    if (!klm_find_word(t, *begin, *end, word, &at)) return 0;
    bit = at * t->total_bits + t->word_bits;
    if (t->prob_table != NULL) {
        *backoff = t->backoff_table[klm_read25(t->base, bit, t->backoff_mask)];
        *prob = t->prob_table[klm_read25(t->base, bit + t->backoff_bits, t->prob_mask)];
        bit += t->prob_bits + t->backoff_bits;
    } else {
        *prob = klm_read_nonpos31(t->base, bit);
        *backoff = klm_read_float32(t->base, bit + 31);
        bit += 63;
    }
    klm_read_next(t, at, bit, begin, end);
    return 1;
}

static inline int klm_trie_longest(const klm_bitpacked *t, uint32_t word, uint64_t begin, uint64_t end,
                                   float *prob) {
    uint64_t at, bit;
    if (!klm_find_word(t, begin, end, word, &at)) return 0;
    bit = at * t->total_bits + t->word_bits;
    if (t->prob_table != NULL) *prob = t->prob_table[klm_read25(t->base, bit, t->prob_mask)];
    else *prob = klm_read_nonpos31(t->base, bit);
    return 1;
}

static inline void klm_trie_score(const klm_trie *m, const klm_state *in, uint32_t w,
                                  klm_state *out, klm_ret *ret) {
    klm_state copy;
    const uint8_t *u;
    uint64_t begin, end;
    float prob, p, bo;
    int independent, length = 1, next_use, n_ctx, i;
    if (in == out) { copy = *in; in = &copy; }
    if ((uint64_t)w + 1 >= m->n_unigram) w = 0;
    u = m->unigram + (uint64_t)w * 16;
    prob = klm_load_float(u);
    out->backoff[0] = klm_load_float(u + 4);
    klm_unigram_range(m, w, &begin, &end);
    independent = begin == end;
    next_use = klm_has_extension(out->backoff[0]) ? 1 : 0;
    out->words[0] = w;
    n_ctx = in->length;
    if (n_ctx > m->order - 1) n_ctx = m->order - 1;
    for (i = 0; i < n_ctx && !independent; i++) {
        if (i == m->order - 2) {
            if (klm_trie_longest(&m->longest, in->words[i], begin, end, &p)) {
                prob = p;
                length = m->order;
            }
            break;
        }
        if (!klm_trie_middle(&m->middle[i], in->words[i], &begin, &end, &p, &bo)) break;
        independent = begin == end;
        out->backoff[i + 1] = bo;
        prob = p;
        length = i + 2;
        if (klm_has_extension(bo)) next_use = length;
    }
    for (i = 1; i < next_use; i++) out->words[i] = in->words[i - 1];
    out->length = (uint8_t)next_use;
    for (i = length - 1; i < n_ctx; i++) prob += in->backoff[i];
    ret->prob = prob;
    ret->ngram_length = length;
}

static inline void klm_trie_context(const klm_trie *m, const uint32_t *words, int n, klm_state *out) {
    uint64_t begin, end;
    uint32_t w0;
    float p, bo;
    int i, length;
    if (n > m->order - 1) n = m->order - 1;
    if (n <= 0) { out->length = 0; return; }
    w0 = (uint64_t)words[0] + 1 < m->n_unigram ? words[0] : 0;
    out->backoff[0] = klm_load_float(m->unigram + (uint64_t)w0 * 16 + 4);
    klm_unigram_range(m, w0, &begin, &end);
    length = klm_has_extension(out->backoff[0]) ? 1 : 0;
    for (i = 1; i < n; i++) {
        if (!klm_trie_middle(&m->middle[i - 1], words[i], &begin, &end, &p, &bo)) break;
        out->backoff[i] = bo;
        if (klm_has_extension(bo)) length = i + 1;
    }
    for (i = 0; i < length; i++) out->words[i] = words[i];
    out->length = (uint8_t)length;
}

#endif
