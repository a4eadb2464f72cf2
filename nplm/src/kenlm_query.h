/* Queries on KenLM binary files, mapped as they are (see nplm/backoff/kenlm/format.py
 * for the layout).  Every function reads the mapped tables only; none allocates.
 *
 * Scoring follows KenLM's GenericModel::FullScore (lm/model.cc) so that probabilities,
 * n-gram lengths and states come out bit for bit as kenlm's: the longest match is
 * found by walking the context one word at a time (a word's "walk"), then the
 * back-offs of the context n-grams longer than the match are added in order
 * (klm_finish).  The walk depends on the words alone, the arithmetic on the state
 * too; splitting them lets a run of words (a sentence) overlap the cache misses of
 * all its walks, which one word at a time wait for each other (klm_*_score_run).
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

/* What the walk of a word found: the n-grams ending with it that hold 0..depth
 * context words (prob[k], backoff[k]: those of the one with k context words; the
 * longest order has no back-off). */
typedef struct {
    float prob[KLM_MAX_ORDER];
    float backoff[KLM_MAX_ORDER - 1];
    int depth;
} klm_walk;

static inline int klm_min(int a, int b) { return a < b ? a : b; }

/* The result and the successor state of word w, whose walk is r, after state in
 * (in != out).  Only the part of the walk within the state's context counts: a walk
 * may go deeper, but stops short of the context's end only at a missing n-gram. */
static inline void klm_finish(int order, const klm_walk *r, uint32_t w, const klm_state *in, klm_state *out,
                              klm_ret *ret) {
    int n_ctx = klm_min(in->length, order - 1), d, top, next_use, length, i;
    float prob;
    d = klm_min(r->depth, n_ctx);                      /* the context words that count */
    top = klm_min(d, order - 2);                       /* the longest order has no back-off */
    prob = r->prob[d];
    length = d + 1;
    out->backoff[0] = r->backoff[0];
    next_use = klm_has_extension(r->backoff[0]) ? 1 : 0;
    for (i = 1; i <= top; i++) {
        out->backoff[i] = r->backoff[i];
        if (klm_has_extension(r->backoff[i])) next_use = i + 1;
    }
    out->words[0] = w;
    for (i = 1; i < next_use; i++) out->words[i] = in->words[i - 1];
    out->length = (uint8_t)next_use;
    for (i = length - 1; i < n_ctx; i++) prob += in->backoff[i];
    ret->prob = prob;
    ret->ngram_length = length;
}

/* Runs: words walked together, and the context word i (0: the most recent) of word
 * j of a run: an earlier word of the run, else one of the state's words before it. */
#define KLM_LANES 64

static inline uint32_t klm_context_word(const uint32_t *run, const klm_state *in, int j, int i) {
    return i < j ? run[j - 1 - i] : in->words[i - j];
}

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

/* The keys and first buckets of the n-grams of word j of w (context words as
 * klm_context_word) with up to avail context words, their buckets requested: they
 * follow from the words alone, so their cache misses can overlap. */
static inline void klm_probing_request(const klm_probing *m, const klm_state *in, const uint32_t *w, int j,
                                       int avail, uint64_t *key, uint64_t *bucket) {
    uint64_t node = w[j];
    int i;
    for (i = 0; i < avail; i++) {
        const klm_hash_table *t = i == m->order - 2 ? &m->longest : &m->middle[i];
        node = klm_combine(node, klm_context_word(w, in, j, i));
        key[i] = node;
        bucket[i] = node % t->buckets;
        __builtin_prefetch(t->table + bucket[i] * (i == m->order - 2 ? 12 : m->middle_stride));
    }
}

/* The walk of word w (below n_unigram) over up to n_ctx context words whose keys and
 * buckets klm_probing_request gave; returns the length of the state after it. */
static inline int klm_probing_walk(const klm_probing *m, uint32_t w, int n_ctx, const uint64_t *key,
                                   const uint64_t *bucket, klm_walk *r) {
    const uint8_t *u = m->unigram + (uint64_t)w * m->unigram_stride, *e;
    float prob = klm_load_float(u);
    int independent = klm_signbit(prob), next_use, i;
    r->prob[0] = klm_set_sign(prob);
    r->backoff[0] = klm_load_float(u + 4);
    r->depth = 0;
    next_use = klm_has_extension(r->backoff[0]) ? 1 : 0;
    for (i = 0; i < n_ctx && !independent; i++) {
        if (i == m->order - 2) {
            e = klm_probe_from(&m->longest, 12, key[i], bucket[i]);
            if (e != NULL) {
                r->prob[i + 1] = klm_load_float(e + 8);
                r->depth = i + 1;
            }
            break;
        }
        e = klm_probe_from(&m->middle[i], m->middle_stride, key[i], bucket[i]);
        if (e == NULL) break;
        prob = klm_load_float(e + 8);
        independent = klm_signbit(prob);
        r->prob[i + 1] = klm_set_sign(prob);
        r->backoff[i + 1] = klm_load_float(e + 12);
        r->depth = i + 1;
        if (klm_has_extension(r->backoff[i + 1])) next_use = i + 2;
    }
    return next_use;
}

/* The first half of a probing lookup, for a caller that overlaps several lookups
 * (the n-best rescorer's prefetch hint): every order's key and first bucket for w
 * after `in`, the buckets and the line after each requested now (a probe often runs
 * on into it).  Returns the number of context words used. */
static inline int klm_probing_keys(const klm_probing *m, const klm_state *in, uint32_t w, uint64_t *keys,
                                   uint64_t *first) {
    int n_ctx = klm_min(in->length, m->order - 1), i;
    if (w >= m->n_unigram) w = 0;
    __builtin_prefetch(m->unigram + (uint64_t)w * m->unigram_stride);
    klm_probing_request(m, in, &w, 0, n_ctx, keys, first);
    for (i = 0; i < n_ctx; i++)
        __builtin_prefetch((i == m->order - 2 ? m->longest.table + first[i] * 12
                                               : m->middle[i].table + first[i] * m->middle_stride) + 64);
    return n_ctx;
}

/* The second half: score w after `in` from klm_probing_keys(m, in, w, keys, first) =
 * n_ctx.  out may be in. */
static inline void klm_probing_probe(const klm_probing *m, const klm_state *in, uint32_t w, const uint64_t *keys,
                                     const uint64_t *first, int n_ctx, klm_state *out, klm_ret *ret) {
    klm_state copy;
    klm_walk r;
    if (in == out) { copy = *in; in = &copy; }
    if (w >= m->n_unigram) w = 0;
    klm_probing_walk(m, w, n_ctx, keys, first, &r);
    klm_finish(m->order, &r, w, in, out, ret);
}

/* One word: out may be in. */
static inline void klm_probing_score(const klm_probing *m, const klm_state *in, uint32_t w, klm_state *out,
                                     klm_ret *ret) {
    uint64_t key[KLM_MAX_ORDER - 1], bucket[KLM_MAX_ORDER - 1];
    int n_ctx = klm_min(in->length, m->order - 1);
    uint32_t v = w < m->n_unigram ? w : 0;
    klm_probing_request(m, in, &v, 0, n_ctx, key, bucket);
    klm_probing_probe(m, in, v, key, bucket, n_ctx, out, ret);
}

/* The walks of run[0..n) (n <= KLM_LANES) after state in, in order: w gets the words
 * as scored (an id beyond the unigrams is <unk>), r their walks.  The length of the
 * state before each word is known from the walk before it, so no walk goes deeper
 * than it counts; the buckets of the word KLM_AHEAD places on are requested while
 * this one is probed (as deep as its position allows). */
#define KLM_AHEAD 6

static inline void klm_probing_walks(const void *model, const klm_state *in, const uint32_t *run, int n,
                                     uint32_t *w, klm_walk *r) {
    const klm_probing *m = (const klm_probing *)model;
    uint64_t key[KLM_AHEAD + 1][KLM_MAX_ORDER - 1], bucket[KLM_AHEAD + 1][KLM_MAX_ORDER - 1];
    int j, a, length = in->length;
    for (j = 0; j < n; j++) w[j] = run[j] < m->n_unigram ? run[j] : 0;
    for (j = 0; j < n && j < KLM_AHEAD; j++)
        klm_probing_request(m, in, w, j, klm_min(j + in->length, m->order - 1), key[j], bucket[j]);
    for (j = 0; j < n; j++) {
        a = j + KLM_AHEAD;
        if (a < n)
            klm_probing_request(m, in, w, a, klm_min(a + in->length, m->order - 1), key[a % (KLM_AHEAD + 1)],
                                bucket[a % (KLM_AHEAD + 1)]);
        length = klm_probing_walk(m, w[j], klm_min(length, m->order - 1), key[j % (KLM_AHEAD + 1)],
                                  bucket[j % (KLM_AHEAD + 1)], &r[j]);
    }
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

/* The values of record at (the word found there) of a middle order: prob, backoff
 * and its child range. */
static inline void klm_trie_values(const klm_bitpacked *t, uint64_t at, float *prob, float *backoff,
                                   uint64_t *begin, uint64_t *end) {
    uint64_t bit = at * t->total_bits + t->word_bits;
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
}

/* The probability of record at of the longest order. */
static inline float klm_trie_longest_prob(const klm_bitpacked *t, uint64_t at) {
    uint64_t bit = at * t->total_bits + t->word_bits;
    if (t->prob_table != NULL) return t->prob_table[klm_read25(t->base, bit, t->prob_mask)];
    return klm_read_nonpos31(t->base, bit);
}

/* Middle lookup: found (1) with prob / backoff and the child range updated. */
static inline int klm_trie_middle(const klm_bitpacked *t, uint32_t word, uint64_t *begin, uint64_t *end,
                                  float *prob, float *backoff) {
    uint64_t at;
    if (!klm_find_word(t, *begin, *end, word, &at)) return 0;
    klm_trie_values(t, at, prob, backoff, begin, end);
    return 1;
}

/* The start of word w's walk (w below n_unigram - 1): its unigram, and its children's
 * range in order 2. */
static inline void klm_trie_unigram(const klm_trie *m, uint32_t w, klm_walk *r, uint64_t *begin, uint64_t *end) {
    const uint8_t *u = m->unigram + (uint64_t)w * 16;
    r->prob[0] = klm_load_float(u);
    r->backoff[0] = klm_load_float(u + 4);
    r->depth = 0;
    klm_unigram_range(m, w, begin, end);
}

/* One word: out may be in. */
static inline void klm_trie_score(const klm_trie *m, const klm_state *in, uint32_t w, klm_state *out,
                                  klm_ret *ret) {
    klm_state copy;
    klm_walk r;
    uint64_t begin, end, at;
    int n_ctx = klm_min(in->length, m->order - 1), i;
    if (in == out) { copy = *in; in = &copy; }
    if ((uint64_t)w + 1 >= m->n_unigram) w = 0;
    klm_trie_unigram(m, w, &r, &begin, &end);
    for (i = 0; i < n_ctx && begin < end; i++) {
        if (i == m->order - 2) {
            if (klm_find_word(&m->longest, begin, end, in->words[i], &at)) {
                r.prob[i + 1] = klm_trie_longest_prob(&m->longest, at);
                r.depth = i + 1;
            }
            break;
        }
        if (!klm_trie_middle(&m->middle[i], in->words[i], &begin, &end, &r.prob[i + 1], &r.backoff[i + 1])) break;
        r.depth = i + 1;
    }
    klm_finish(m->order, &r, w, in, out, ret);
}

/* klm_find_word for the words lane[0..count) of a run at once (key[j] among records
 * [begin[j], end[j]) for j = lane[k]), in lockstep: every round computes each pending
 * search's next pivot and requests its record, then reads them all, so that the
 * misses of all the searches overlap.  The pivots are klm_find_word's, so every
 * search reads what it would alone. */
static inline void klm_find_words(const klm_bitpacked *t, const int *lane, int count, const uint64_t *key,
                                  const uint64_t *begin, const uint64_t *end, uint64_t *at, int *found) {
    uint64_t before[KLM_LANES], after[KLM_LANES], before_v[KLM_LANES], after_v[KLM_LANES], pivot[KLM_LANES];
    int pending[KLM_LANES], n_pending = 0, still, k, j;
    for (k = 0; k < count; k++) {
        j = lane[k];
        if (key[j] >= t->max_vocab) {            /* klm_find_word's binary search */
            found[j] = klm_find_word(t, begin[j], end[j], key[j], &at[j]);
            continue;
        }
        found[j] = 0;
        before[j] = begin[j] - 1;
        after[j] = end[j];
        before_v[j] = 0;
        after_v[j] = t->max_vocab;
        if (after[j] - before[j] > 1) pending[n_pending++] = j;
    }
    while (n_pending > 0) {
        for (k = 0; k < n_pending; k++) {
            uint64_t width, off, p;
            j = pending[k];
            width = after[j] - before[j] - 1;
            off = key[j] - before_v[j];
            if (width >> 32) p = (uint64_t)(((__uint128_t)off * width) / (after_v[j] - before_v[j] + 1));
            else p = (off * width) / (after_v[j] - before_v[j] + 1);
            pivot[j] = p + before[j] + 1;
            __builtin_prefetch(t->base + ((pivot[j] * t->total_bits) >> 3));
        }
        for (k = still = 0; k < n_pending; k++) {
            uint64_t mid;
            j = pending[k];
            mid = klm_read57(t->base, pivot[j] * t->total_bits, t->word_mask);
            if (mid < key[j]) { before[j] = pivot[j]; before_v[j] = mid; }
            else if (mid > key[j]) { after[j] = pivot[j]; after_v[j] = mid; }
            else { at[j] = pivot[j]; found[j] = 1; continue; }
            if (after[j] - before[j] > 1) pending[still++] = j;
        }
        n_pending = still;
    }
}

/* Request both ends of a child range (for most n-grams, the lines its search reads). */
static inline void klm_request_range(const klm_bitpacked *t, uint64_t begin, uint64_t end) {
    __builtin_prefetch(t->base + ((begin * t->total_bits) >> 3));
    __builtin_prefetch(t->base + (((end - 1) * t->total_bits) >> 3));
}

/* The walks of run[0..n) (n <= KLM_LANES) after state in, as klm_probing_walks'.
 * Each level's searches need the child ranges the level before found, so the walks
 * go level by level, all words together.  The state before a word is not known
 * until the words before it are finished, so a walk may go deeper than it counts
 * (klm_finish cuts it), but skips a level that the state after the word before
 * cannot reach: that state holds i + 1 words only when the previous walk found i
 * context words and one of its n-grams from there on extends (the previous walk
 * going on at this level, or the back-off of its last n-gram marked as extended). */
static inline void klm_trie_walks(const void *model, const klm_state *in, const uint32_t *run, int n,
                                  uint32_t *w, klm_walk *r) {
    const klm_trie *m = (const klm_trie *)model;
    uint64_t begin[KLM_LANES], end[KLM_LANES], key[KLM_LANES], at[KLM_LANES];
    int lane[KLM_LANES], found[KLM_LANES], alive[KLM_LANES], avail[KLM_LANES], count = 0, next, i, j, k;
    for (j = 0; j < n; j++) {
        w[j] = (uint64_t)run[j] + 1 < m->n_unigram ? run[j] : 0;
        klm_trie_unigram(m, w[j], &r[j], &begin[j], &end[j]);
        avail[j] = klm_min(j + in->length, m->order - 1);
        alive[j] = begin[j] < end[j] && avail[j] > 0;
        if (alive[j]) {
            lane[count++] = j;
            klm_request_range(m->order == 2 ? &m->longest : &m->middle[0], begin[j], end[j]);
        }
    }
    for (i = 0; count > 0; i++) {
        const klm_bitpacked *t = i == m->order - 2 ? &m->longest : &m->middle[i];
        for (k = next = 0; k < count; k++) {
            j = lane[k];
            if (j > 0 && (r[j - 1].depth < i || (!alive[j - 1] && !klm_has_extension(r[j - 1].backoff[i])))) {
                alive[j] = 0;
                continue;
            }
            key[j] = klm_context_word(w, in, j, i);
            lane[next++] = j;
        }
        count = next;
        klm_find_words(t, lane, count, key, begin, end, at, found);
        for (k = next = 0; k < count; k++) {
            j = lane[k];
            alive[j] = 0;
            if (!found[j]) continue;
            r[j].depth = i + 1;
            if (i == m->order - 2) {
                r[j].prob[i + 1] = klm_trie_longest_prob(t, at[j]);
                continue;
            }
            klm_trie_values(t, at[j], &r[j].prob[i + 1], &r[j].backoff[i + 1], &begin[j], &end[j]);
            if (begin[j] < end[j] && i + 1 < avail[j]) {
                alive[j] = 1;
                lane[next++] = j;
                klm_request_range(i + 1 == m->order - 2 ? &m->longest : &m->middle[i + 1], begin[j], end[j]);
            }
        }
        count = next;
    }
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

/* ---- runs of words ------------------------------------------------------------------ */

/* Score words[0..n) from state in with walks() (klm_probing_walks or klm_trie_walks):
 * the results in rets[0..n), the state after the last word in out (which may be in). */
typedef void (*klm_walks_fn)(const void *model, const klm_state *in, const uint32_t *run, int n, uint32_t *w,
                             klm_walk *r);

static inline void klm_score_run(klm_walks_fn walks, const void *model, int order, const klm_state *in,
                                 const uint32_t *words, int n, klm_state *out, klm_ret *rets) {
    klm_walk r[KLM_LANES];
    uint32_t w[KLM_LANES];
    klm_state s[2];
    int c = 0, k, j, m;
    s[0] = *in;
    for (k = 0; k < n; k += KLM_LANES) {
        m = klm_min(n - k, KLM_LANES);
        walks(model, &s[c], words + k, m, w, r);
        for (j = 0; j < m; j++, c ^= 1) klm_finish(order, &r[j], w[j], &s[c], &s[c ^ 1], &rets[k + j]);
    }
    *out = s[c];
}

static inline void klm_probing_score_run(const klm_probing *m, const klm_state *in, const uint32_t *words, int n,
                                         klm_state *out, klm_ret *rets) {
    klm_score_run(klm_probing_walks, m, m->order, in, words, n, out, rets);
}

static inline void klm_trie_score_run(const klm_trie *m, const klm_state *in, const uint32_t *words, int n,
                                      klm_state *out, klm_ret *rets) {
    klm_score_run(klm_trie_walks, m, m->order, in, words, n, out, rets);
}

#endif
