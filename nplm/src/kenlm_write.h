/* Building KenLM's binary model layouts (format version 5, x86-64, little endian):
 * the probing hash tables and the bit-packed trie with optional quantisation and
 * array-compressed pointers.  The tables are laid out exactly as KenLM's
 * build_binary lays them out, so that the files are byte-identical; the comments
 * name KenLM's rule each step follows.  Inputs are validated by the Python layer. */
#ifndef NPLM_KENLM_WRITE_H
#define NPLM_KENLM_WRITE_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>

/* ---- hashing ------------------------------------------------------------ */

/* MurmurHash2, 64-bit version (MurmurHash64A, public domain): KenLM's word hash
 * with seed 0. */
static inline uint64_t kenlm_murmur64a(const void *key, size_t len, uint64_t seed) {
    const uint64_t m = 0xc6a4a7935bd1e995ULL;
    const int r = 47;
    const unsigned char *data = (const unsigned char *)key;
    const unsigned char *end = data + (len / 8) * 8;
    uint64_t h = seed ^ (len * m);
    for (; data != end; data += 8) {
        uint64_t k;
        memcpy(&k, data, 8);
        k *= m; k ^= k >> r; k *= m;
        h ^= k; h *= m;
    }
    switch (len & 7) {
        case 7: h ^= (uint64_t)data[6] << 48; /* fall through */
        case 6: h ^= (uint64_t)data[5] << 40; /* fall through */
        case 5: h ^= (uint64_t)data[4] << 32; /* fall through */
        case 4: h ^= (uint64_t)data[3] << 24; /* fall through */
        case 3: h ^= (uint64_t)data[2] << 16; /* fall through */
        case 2: h ^= (uint64_t)data[1] << 8;  /* fall through */
        case 1: h ^= (uint64_t)data[0]; h *= m;
    }
    h ^= h >> r; h *= m; h ^= h >> r;
    return h;
}

/* The key of an n-gram extended by one older word (KenLM's CombineWordHash). */
static inline uint64_t kenlm_combine(uint64_t current, uint32_t next) {
    return (current * 8978948897894561157ULL) ^ (((uint64_t)next + 1) * 17894857484156487943ULL);
}

/* ---- probing tables ------------------------------------------------------ */

typedef struct { uint64_t key; float prob; float backoff; } kenlm_mid_entry;
#pragma pack(push, 4)
typedef struct { uint64_t key; float prob; } kenlm_long_entry;
typedef struct { uint64_t key; uint32_t value; } kenlm_vocab_entry;
#pragma pack(pop)

typedef struct {
    kenlm_mid_entry *entries;
    uint64_t buckets;
    uint64_t used;
} kenlm_mid_table;

enum { KENLM_OK = 0, KENLM_FULL = 1, KENLM_NO_CONTEXT = 2 };

static inline uint32_t kenlm_f2u(float f) { uint32_t i; memcpy(&i, &f, 4); return i; }
static inline float kenlm_u2f(uint32_t i) { float f; memcpy(&f, &i, 4); return f; }
static inline float kenlm_set_sign(float f) { return kenlm_u2f(kenlm_f2u(f) | 0x80000000u); }
static inline float kenlm_unset_sign(float f) { return kenlm_u2f(kenlm_f2u(f) & 0x7fffffffu); }
/* -0.0 marks "nothing extends this n-gram"; +0.0 an extendable zero back-off. */
static inline void kenlm_set_extension(float *backoff) {
    if (kenlm_f2u(*backoff) == 0x80000000u) *backoff = 0.0f;
}

/* Linear probing from hash % buckets (b, where the caller has it); 0 is the empty key. */
static inline kenlm_mid_entry *kenlm_mid_find_at(const kenlm_mid_table *t, uint64_t key, uint64_t b) {
    for (;;) {
        kenlm_mid_entry *e = t->entries + b;
        if (e->key == key) return e;
        if (e->key == 0) return NULL;
        if (++b == t->buckets) b = 0;
    }
}

static inline kenlm_mid_entry *kenlm_mid_find(const kenlm_mid_table *t, uint64_t key) {
    return kenlm_mid_find_at(t, key, key % t->buckets);
}

/* Returns the entry for key, inserting a blank (back-off -0.0) when absent;
 * *found says which.  NULL when the table is full (KenLM's ProbingSizeException). */
static inline kenlm_mid_entry *kenlm_mid_find_or_insert_at(kenlm_mid_table *t, uint64_t key, uint64_t b,
                                                           int *found) {
    for (;;) {
        kenlm_mid_entry *e = t->entries + b;
        if (e->key == key) { *found = 1; return e; }
        if (e->key == 0) {
            if (++t->used >= t->buckets) return NULL;
            e->key = key;
            e->prob = 0.0f;
            e->backoff = -0.0f;
            *found = 0;
            return e;
        }
        if (++b == t->buckets) b = 0;
    }
}

static inline kenlm_mid_entry *kenlm_mid_find_or_insert(kenlm_mid_table *t, uint64_t key, int *found) {
    return kenlm_mid_find_or_insert_at(t, key, key % t->buckets, found);
}

static inline kenlm_mid_entry *kenlm_mid_insert_at(kenlm_mid_table *t, uint64_t key, uint64_t b) {
    if (++t->used >= t->buckets) return NULL;
    while (t->entries[b].key != 0) if (++b == t->buckets) b = 0;
    t->entries[b].key = key;
    return t->entries + b;
}

static inline int kenlm_long_insert_at(kenlm_long_entry *t, uint64_t buckets, uint64_t *used,
                                       uint64_t key, uint64_t b, float prob) {
    if (++*used >= buckets) return KENLM_FULL;
    while (t[b].key != 0) if (++b == buckets) b = 0;
    t[b].key = key;
    t[b].prob = prob;
    return KENLM_OK;
}

static inline int kenlm_vocab_insert(kenlm_vocab_entry *t, uint64_t buckets, uint64_t *used,
                                     uint64_t key, uint32_t value) {
    if (++*used >= buckets) return KENLM_FULL;
    uint64_t b = key % buckets;
    while (t[b].key != 0) if (++b == buckets) b = 0;
    t[b].key = key;
    t[b].value = value;
    return KENLM_OK;
}

/* Blank entries (suffixes missing from the model) get the probability that
 * backing off would give, and every entry between the n-gram and the suffix
 * found loses its "independent left" sign bit (KenLM's AdjustLower).  between[k]
 * points at a probability; the back-off follows it (a unigram pair or a middle
 * entry alike); between[nb-1] is the suffix found, the basis. */
static inline void kenlm_adjust_lower(float **between, int nb, int n, const uint32_t *v,
                                      float *uni, kenlm_mid_table *mids) {
    int i;
    if (nb == 1) {
        *between[0] = kenlm_unset_sign(*between[0]);
        return;
    }
    float prob = -fabsf(*between[nb - 1]);
    int basis = n - nb;
    int change = nb - 2;
    if (basis == 1) {
        float *backoff = uni + 2 * (size_t)v[1] + 1;
        kenlm_set_extension(backoff);
        prob += *backoff;
        *between[change] = prob;
        basis = 2;
        --change;
    }
    uint64_t backoff_hash = v[1];
    for (i = 2; i <= basis; ++i) backoff_hash = kenlm_combine(backoff_hash, v[i]);
    for (; basis < n - 1; ++basis, --change) {
        kenlm_mid_entry *got = kenlm_mid_find(mids + (basis - 2), backoff_hash);
        if (got) {
            kenlm_set_extension(&got->backoff);
            prob += got->backoff;
        }
        *between[change] = prob;
        backoff_hash = kenlm_combine(backoff_hash, v[basis + 1]);
    }
    for (i = 0; i < nb; ++i) *between[i] = kenlm_unset_sign(*between[i]);
}

/* The keys of row i's n-gram (keys[h]: its newest h + 2 words) and the key of its
 * context (its oldest n - 1 words); v receives the words newest first. */
static inline uint64_t kenlm_row_keys(const uint32_t *row, int n, uint32_t *v, uint64_t *keys) {
    int h;
    for (h = 0; h < n; ++h) v[h] = row[n - 1 - h];
    keys[0] = kenlm_combine(v[0], v[1]);
    for (h = 1; h < n - 1; ++h) keys[h] = kenlm_combine(keys[h - 1], v[h + 1]);
    uint64_t context = v[1];
    for (h = 2; h < n; ++h) context = kenlm_combine(context, v[h]);
    return context;
}

/* What row i's insertion needs, worked out some rows ahead: its words (newest
 * first), keys and first buckets, which are requested then.  The tables are far
 * bigger than the caches, and the insertion order (which fixes the layout) is
 * sequential, so the misses of the rows ahead overlap; the buckets are kept, so
 * that each division by a table's size is done once. */
typedef struct {
    uint32_t v[64];
    uint64_t keys[64];          /* keys[h]: the n-gram's newest h + 2 words */
    uint64_t context;           /* the key of its oldest n - 1 words */
    uint64_t at, suffix_at, context_at;    /* first buckets: the n-gram's, its suffix's, its context's */
} kenlm_row_plan;

static inline void kenlm_plan_row(const uint32_t *row, int n, int order, const float *uni,
                                  const kenlm_mid_table *mids, const kenlm_long_entry *long_table,
                                  uint64_t long_buckets, kenlm_row_plan *r) {
    uint64_t key;
    r->context = kenlm_row_keys(row, n, r->v, r->keys);
    key = r->keys[n - 2];
    if (n == order) {
        r->at = key % long_buckets;
        __builtin_prefetch(long_table + r->at, 1);
    } else {
        r->at = key % mids[n - 2].buckets;
        __builtin_prefetch(mids[n - 2].entries + r->at, 1);
    }
    if (n == 2) {
        __builtin_prefetch(uni + 2 * (size_t)r->v[0], 1);
        __builtin_prefetch(uni + 2 * (size_t)r->v[1], 1);
    } else {
        const kenlm_mid_table *lower = mids + (n - 3);
        r->suffix_at = r->keys[n - 3] % lower->buckets;
        r->context_at = r->context % lower->buckets;
        __builtin_prefetch(lower->entries + r->suffix_at, 1);
        __builtin_prefetch(lower->entries + r->context_at, 1);
    }
}

enum { KENLM_PREFETCH_AHEAD = 12 };

/* Insert the n-grams of one order (n >= 2) in the ARPA's order, as KenLM's
 * ReadNGrams does.  ids: count x n word ids, oldest first.  uni: (prob, backoff)
 * pairs by word id.  mids[k]: the table of order k + 2.  For the highest order
 * long_table is used and backoff ignored.  On error *where is the n-gram index. */
static int kenlm_probing_order(int n, int order, int64_t count, const uint32_t *ids,
                               const float *prob, const float *backoff, float *uni,
                               kenlm_mid_table *mids, kenlm_long_entry *long_table,
                               uint64_t long_buckets, uint64_t *long_used, int64_t *where) {
    kenlm_row_plan plans[KENLM_PREFETCH_AHEAD + 1];
    float *between[64];
    int64_t i;
    for (i = 0; i < count && i < KENLM_PREFETCH_AHEAD; ++i)
        kenlm_plan_row(ids + (size_t)i * n, n, order, uni, mids, long_table, long_buckets, &plans[i]);
    for (i = 0; i < count; ++i) {
        const kenlm_row_plan *r = &plans[i % (KENLM_PREFETCH_AHEAD + 1)];
        const uint32_t *v = r->v;
        if (i + KENLM_PREFETCH_AHEAD < count)
            kenlm_plan_row(ids + (size_t)(i + KENLM_PREFETCH_AHEAD) * n, n, order, uni, mids, long_table,
                           long_buckets, &plans[(i + KENLM_PREFETCH_AHEAD) % (KENLM_PREFETCH_AHEAD + 1)]);
        float p = kenlm_set_sign(prob[i]);                  /* "independent left" until shown otherwise */
        if (n == order) {
            if (kenlm_long_insert_at(long_table, long_buckets, long_used, r->keys[n - 2], r->at, p)) {
                *where = i;
                return KENLM_FULL;
            }
        } else {
            kenlm_mid_entry *e = kenlm_mid_insert_at(mids + (n - 2), r->keys[n - 2], r->at);
            if (!e) { *where = i; return KENLM_FULL; }
            float b = backoff[i];
            if (b == 0.0f) b = -0.0f;
            e->prob = p;
            e->backoff = b;
        }
        /* Find the longest suffix present, inserting blanks on the way (FindLower). */
        int nb = 0, lower;
        for (lower = n - 3; ; --lower) {
            if (lower == -1) { between[nb++] = uni + 2 * (size_t)v[0]; break; }
            int found;
            uint64_t at = lower == n - 3 ? r->suffix_at : r->keys[lower] % mids[lower].buckets;
            kenlm_mid_entry *e = kenlm_mid_find_or_insert_at(mids + lower, r->keys[lower], at, &found);
            if (!e) { *where = i; return KENLM_FULL; }
            between[nb++] = &e->prob;
            if (found) break;
        }
        kenlm_adjust_lower(between, nb, n, v, uni, mids);
        /* The context is extended by this n-gram (ActivateUnigram / ActivateLowerMiddle). */
        if (n == 2) {
            kenlm_set_extension(uni + 2 * (size_t)v[1] + 1);
        } else {
            kenlm_mid_entry *ctx = kenlm_mid_find_at(mids + (n - 3), r->context, r->context_at);
            if (!ctx) { *where = i; return KENLM_NO_CONTEXT; }
            kenlm_set_extension(&ctx->backoff);
        }
    }
    return KENLM_OK;
}

/* ---- trie ------------------------------------------------------------------ */

/* Sort the rows of an n-column table of word ids (values < bound) by their
 * columns left to right: a least-significant-digit radix sort, one stable
 * counting pass per column, moving whole records (the row and its index) so that
 * every pass reads sequentially.  out_rows (count x n) receives the sorted rows,
 * perm (count) their original indices; scratch holds 2 * count * (n + 2) values,
 * hist bound + 1. */
static void kenlm_sort_rows(const uint32_t *rows, int64_t count, int n, uint32_t bound,
                            uint32_t *out_rows, int64_t *perm, uint32_t *scratch, int64_t *hist) {
    const size_t w = (size_t)n + 2;
    uint32_t *from = scratch, *to = scratch + (size_t)count * w, *swap;
    int64_t i;
    int c;
    for (i = 0; i < count; ++i) {
        memcpy(from + (size_t)i * w, rows + (size_t)i * n, sizeof(uint32_t) * (size_t)n);
        uint64_t idx = (uint64_t)i;
        memcpy(from + (size_t)i * w + n, &idx, 8);
    }
    for (c = n - 1; c >= 0; --c) {
        memset(hist, 0, sizeof(int64_t) * ((size_t)bound + 1));
        for (i = 0; i < count; ++i) ++hist[from[(size_t)i * w + c] + 1];
        for (i = 0; i < (int64_t)bound; ++i) hist[i + 1] += hist[i];
        for (i = 0; i < count; ++i) {
            const uint32_t *rec = from + (size_t)i * w;
            memcpy(to + (size_t)(hist[rec[c]]++) * w, rec, sizeof(uint32_t) * w);
        }
        swap = from; from = to; to = swap;
    }
    for (i = 0; i < count; ++i) {
        uint64_t idx;
        memcpy(out_rows + (size_t)i * n, from + (size_t)i * w, sizeof(uint32_t) * (size_t)n);
        memcpy(&idx, from + (size_t)i * w + n, 8);
        perm[i] = (int64_t)idx;
    }
}

static inline int kenlm_cmp_rows(const uint32_t *a, const uint32_t *b, int n) {
    int k;
    for (k = 0; k < n; ++k) {
        if (a[k] != b[k]) return a[k] < b[k] ? -1 : 1;
    }
    return 0;
}

/* First index of two equal adjacent sorted rows, or -1. */
static int64_t kenlm_find_duplicate(const uint32_t *rows, int64_t count, int n) {
    int64_t i;
    for (i = 1; i < count; ++i)
        if (!kenlm_cmp_rows(rows + (size_t)(i - 1) * n, rows + (size_t)i * n, n)) return i;
    return -1;
}

/* For sorted rows `shorter` (n - 1 columns) and sorted `longer` (n columns):
 * next[i] = the first row of longer whose first n - 1 words are >= shorter[i]
 * (the start of shorter[i]'s children), next[count_s] = count_l.  Returns the
 * index of the first row of longer whose prefix is not in shorter, or -1. */
static int64_t kenlm_child_ranges(const uint32_t *shorter, int64_t count_s, const uint32_t *longer,
                                  int64_t count_l, int n, uint64_t *next) {
    int64_t i, j = 0, missing = -1;
    for (i = 0; i < count_s; ++i) {
        const uint32_t *s = shorter + (size_t)i * (n - 1);
        while (j < count_l && kenlm_cmp_rows(longer + (size_t)j * n, s, n - 1) < 0) {
            if (missing < 0) missing = j;
            ++j;
        }
        next[i] = (uint64_t)j;
        while (j < count_l && kenlm_cmp_rows(longer + (size_t)j * n, s, n - 1) == 0) ++j;
    }
    if (j < count_l && missing < 0) missing = j;
    next[count_s] = (uint64_t)count_l;
    return missing;
}

/* present[j] = whether the first n - 1 words of sorted row j of `longer` (n
 * columns) are a row of sorted `shorter` (n - 1 columns); returns how many are not. */
static int64_t kenlm_prefix_present(const uint32_t *shorter, int64_t count_s, const uint32_t *longer,
                                    int64_t count_l, int n, uint8_t *present) {
    int64_t i = 0, j, absent = 0;
    for (j = 0; j < count_l; ++j) {
        const uint32_t *l = longer + (size_t)j * n;
        int cmp = -1;
        while (i < count_s && (cmp = kenlm_cmp_rows(shorter + (size_t)i * (n - 1), l, n - 1)) < 0) ++i;
        present[j] = (i < count_s && cmp == 0);
        absent += !present[j];
    }
    return absent;
}

/* For each query row (m columns), its index among the sorted rows, or -1. */
static void kenlm_lookup_rows(const uint32_t *rows, int64_t count, int m, const uint32_t *queries,
                              int64_t nq, int64_t *out) {
    int64_t q;
    for (q = 0; q < nq; ++q) {
        const uint32_t *key = queries + (size_t)q * m;
        int64_t lo = 0, hi = count;
        while (lo < hi) {
            int64_t mid = lo + (hi - lo) / 2;
            if (kenlm_cmp_rows(rows + (size_t)mid * m, key, m) < 0) lo = mid + 1; else hi = mid;
        }
        out[q] = (lo < count && !kenlm_cmp_rows(rows + (size_t)lo * m, key, m)) ? lo : -1;
    }
}

/* Mark (+0.0 back-off) every row of sorted `rows` (m columns) that appears among
 * the sorted contexts ctx (m columns).  Returns the index in ctx of a context
 * absent from rows, or -1. */
static int64_t kenlm_mark_contexts(const uint32_t *rows, int64_t count, int m, float *backoff,
                                   const uint32_t *ctx, int64_t count_c) {
    int64_t i = 0, k;
    for (k = 0; k < count_c; ++k) {
        const uint32_t *c = ctx + (size_t)k * m;
        int cmp = -1;
        while (i < count && (cmp = kenlm_cmp_rows(rows + (size_t)i * m, c, m)) < 0) ++i;
        if (i == count || cmp != 0) return k;
        kenlm_set_extension(backoff + i);
    }
    return -1;
}

/* Bit packing, least significant bits first, into memory that starts zeroed
 * (KenLM's WriteInt57 / WriteInt25). */
static inline void kenlm_write_bits(uint8_t *base, uint64_t bit_off, uint64_t value) {
    uint64_t word;
    memcpy(&word, base + (bit_off >> 3), 8);
    word |= value << (bit_off & 7);
    memcpy(base + (bit_off >> 3), &word, 8);
}

static inline uint8_t kenlm_required_bits(uint64_t max_value) {
    uint8_t ret = 0;
    while (max_value) { ++ret; max_value >>= 1; }
    return ret;
}

/* Quantisation bins (KenLM's MakeBins over sorted values): bin i holds the
 * values [size * i / bins, size * (i + 1) / bins) and its centre is their mean,
 * summed in double from 0.0 in ascending order; an empty bin repeats the previous
 * centre (-inf for the first). */
static void kenlm_make_bins(const float *sorted, int64_t size, float *centers, uint32_t bins) {
    uint64_t start = 0, finish;
    uint32_t i;
    for (i = 0; i < bins; ++i, start = finish) {
        finish = ((uint64_t)size * (uint64_t)(i + 1)) / bins;
        if (finish == start) {
            centers[i] = i ? centers[i - 1] : -INFINITY;
        } else {
            double sum = 0.0;
            uint64_t k;
            for (k = start; k < finish; ++k) sum += sorted[k];
            centers[i] = (float)(sum / (float)(finish - start));
        }
    }
}

/* The bin of a value: the nearer of the centres around it (KenLM's Bins::Encode),
 * the first `reserved` bins excluded. */
static inline uint64_t kenlm_encode(const float *begin, uint64_t bins, float value, uint64_t reserved) {
    uint64_t lo = reserved, hi = bins;
    while (lo < hi) {                       /* lower_bound */
        uint64_t mid = lo + (hi - lo) / 2;
        if (begin[mid] < value) lo = mid + 1; else hi = mid;
    }
    if (lo == reserved) return reserved;
    if (lo == bins) return bins - 1;
    return lo - ((value - begin[lo - 1]) < (begin[lo] - value) ? 1 : 0);
}

static inline uint64_t kenlm_encode_backoff(const float *begin, uint64_t bins, float value) {
    if (value == 0.0f) return kenlm_f2u(value) == 0x80000000u ? 0 : 1;
    return kenlm_encode(begin, bins, value, 2);
}

/* One trie level.  word: the level's word of each entry; prob/backoff its
 * weights (backoff NULL for the highest order); next (count + 1 values, NULL for
 * the highest order) the children's start, of which the low inline_bits bits are
 * stored.  Unquantised: prob as 31 bits (sign dropped), back-off as 32; quantised
 * (prob_centers given): the bins' indices, back-off in the low bits. */
typedef struct {
    uint8_t word_bits, inline_bits, prob_bits, backoff_bits;
    const float *prob_centers, *backoff_centers;
} kenlm_level_layout;

static void kenlm_pack_level(uint8_t *base, int64_t count, const uint32_t *word, const float *prob,
                             const float *backoff, const uint64_t *next, const kenlm_level_layout *L) {
    int quant = L->prob_centers != NULL;
    int middle = backoff != NULL;
    uint64_t value_bits = quant ? (uint64_t)L->prob_bits + (middle ? L->backoff_bits : 0)
                                : (middle ? 63 : 31);
    uint64_t total = L->word_bits + value_bits + (middle ? L->inline_bits : 0);
    uint64_t inline_mask = (L->inline_bits >= 64) ? ~0ULL : ((1ULL << L->inline_bits) - 1);
    int64_t i;
    for (i = 0; i < count; ++i) {
        uint64_t at = (uint64_t)i * total;
        kenlm_write_bits(base, at, word[i]);
        at += L->word_bits;
        if (quant) {
            uint64_t p = kenlm_encode(L->prob_centers, 1ULL << L->prob_bits, prob[i], 0);
            if (middle) {
                uint64_t b = kenlm_encode_backoff(L->backoff_centers, 1ULL << L->backoff_bits, backoff[i]);
                kenlm_write_bits(base, at, (p << L->backoff_bits) | b);
            } else {
                kenlm_write_bits(base, at, p);
            }
        } else {
            kenlm_write_bits(base, at, kenlm_f2u(prob[i]) & 0x7fffffffu);
            if (middle) kenlm_write_bits(base, at + 31, kenlm_f2u(backoff[i]));
        }
        at += value_bits;
        if (middle) kenlm_write_bits(base, at, next[i] & inline_mask);
    }
    if (middle)  /* the end of the last entry's children, after the last entry */
        kenlm_write_bits(base, (uint64_t)count * total + total - L->inline_bits, next[count] & inline_mask);
}

#endif
