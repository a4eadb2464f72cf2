#ifndef NPLM_KENLM_FILTER_H
#define NPLM_KENLM_FILTER_H
/* KenLM's filter program (lm/filter) over an input held in memory: the vocabulary
   read as vocab::ReadSingle / vocab::ReadMultiple read it, the ARPA file as ReadARPA
   reads it (counts, then each order's header and exactly its count of lines, then
   \end\) or raw lines as ReadCount reads them, each n-gram tested as vocab::Single,
   vocab::Union or vocab::Multiple test it (ContextFilter: all but the last word),
   and the kept lines written as ARPAOutput / CountOutput write them: the line and a
   newline, in ARPA output after room for the input's header, with the new counts
   written over the start of that room at the end.

   Lines are read as util::FilePiece::ReadLine reads them: up to a newline, less one
   trailing carriage return; a last line without a newline is kept as it is.  An
   ARPA n-gram is the text between a line's first tab and the next (or the line's
   end); a raw n-gram the text before the first tab; its words are split at single
   spaces, empty ones skipped, and a word <...> (a tag) always passes. */
#include <ctype.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

/* ---- the vocabulary: an open-addressing set of words over the vocabulary's text,
   each with the sorted sentence numbers (lines) that hold it.  A slot holds a word's
   first 8 bytes (zero-padded, little-endian) and its length, so that most tests
   compare two integers and never the text. */
typedef struct {
    uint64_t key;              /* the word's first 8 bytes */
    uint32_t len;
    uint32_t id;               /* word index + 1; 0 empty */
} nplm_fslot;

typedef struct {
    const char *text;          /* the vocabulary's bytes (owned by the caller) */
    uint32_t *start, *len;     /* each word's place in text */
    uint32_t *post_at, *post_n;/* each word's postings: postings[post_at:post_at+post_n] */
    uint32_t *postings;
    nplm_fslot *slots;
    uint64_t mask;
    int shift;                 /* 64 - log2(slots): a hash's top bits pick the slot */
    uint32_t words, sentences;
} nplm_fvocab;

static void nplm_fvocab_free(nplm_fvocab *v) {
    free(v->start); free(v->len); free(v->post_at); free(v->post_n);
    free(v->postings); free(v->slots);
    memset(v, 0, sizeof(*v));
}

/* The first min(n, 8) bytes of s[0:n] as a little-endian word, zero-padded; ``limit``
   is the end of the readable memory (a load of 8 bytes must not pass it). */
static inline uint64_t nplm_fload(const char *s, const char *limit) {
    uint64_t x = 0;
    if (s + 8 <= limit) memcpy(&x, s, 8);
    else memcpy(&x, s, (size_t)(limit - s));
    return x;
}

static inline uint64_t nplm_fkey(const char *s, size_t n, const char *limit) {
    uint64_t x = nplm_fload(s, limit);
    return n >= 8 ? x : x & ((1ULL << (8 * n)) - 1);
}

/* Fibonacci hashing of the first 8 bytes; a longer word mixes in its last 8 (the
   bytes between go unhashed: words that differ only there share a slot's probe
   sequence, and the comparison tells them apart). */
static inline uint64_t nplm_fhash(uint64_t key, const char *s, size_t n) {
    if (n > 8) {
        uint64_t last;
        memcpy(&last, s + n - 8, 8);
        key ^= ((last << 29) | (last >> 35)) ^ (n * 0xff51afd7ed558ccdULL);
    }
    return key * 0x9e3779b97f4a7c15ULL;
}

/* Whether bytes 8 to n of a and b (both n > 8 bytes long) are equal, 8 at a time;
   the last 8 overlap the ones before. */
static inline int nplm_fsame_tail(const char *a, const char *b, size_t n) {
    uint64_t x, y;
    size_t i = 8;
    for (; i + 8 <= n; i += 8) {
        memcpy(&x, a + i, 8); memcpy(&y, b + i, 8);
        if (x != y) return 0;
    }
    if (i < n) {
        memcpy(&x, a + n - 8, 8); memcpy(&y, b + n - 8, 8);
        if (x != y) return 0;
    }
    return 1;
}

static inline int64_t nplm_fvocab_lookup(const nplm_fvocab *v, const char *w, size_t n, uint64_t key) {
    for (uint64_t i = nplm_fhash(key, w, n) >> v->shift;; i = (i + 1) & v->mask) {
        const nplm_fslot *sl = &v->slots[i];
        if (!sl->id) return -1;
        if (sl->key == key && sl->len == n &&
            (n <= 8 || nplm_fsame_tail(v->text + v->start[sl->id - 1], w, n))) return sl->id - 1;
    }
}

static inline int nplm_fspace(char c) {
    /* isspace in the C locale, as istream >> string splits words */
    return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}


/* The next word of [*ps, e) (words end at a space; empty ones are skipped): its
   length (0: none left), *ws its start, *key its first 8 bytes.  The word's end is
   found 8 bytes at a time: a byte equal to a space is a zero byte of x ^ 0x20...20,
   and the lowest byte the borrow test flags is the first zero byte. */
static inline size_t nplm_fword(const char **ps, const char *e, const char *limit, const char **ws,
                                uint64_t *key) {
    const char *s = *ps;
    while (s < e && *s == ' ') ++s;
    if (s >= e) { *ps = s; return 0; }
    size_t left = (size_t)(e - s), j;
    uint64_t x = nplm_fload(s, limit);
    uint64_t t = x ^ 0x2020202020202020ULL;
    uint64_t z = (t - 0x0101010101010101ULL) & ~t & 0x8080808080808080ULL;
    j = z ? (size_t)(__builtin_ctzll(z) >> 3) : 8;
    if (j > left) j = left;
    if (j == 8) {
        const char *w = s + 8;
        while (w < e && *w != ' ') ++w;
        j = (size_t)(w - s);
        *key = x;
    } else {
        *key = x & ((1ULL << (8 * j)) - 1);
    }
    *ws = s;
    *ps = s + j;
    return j;
}

/* Word f (key its first 8 bytes) into its slot. */
static void nplm_fvocab_place(nplm_fvocab *v, uint32_t f, uint64_t key) {
    uint64_t s = nplm_fhash(key, v->text + v->start[f], v->len[f]) >> v->shift;
    while (v->slots[s].id) s = (s + 1) & v->mask;
    v->slots[s].key = key;
    v->slots[s].len = v->len[f];
    v->slots[s].id = f + 1;
}

/* The slots made anew for the distinct words alone (eight slots a word), where the
   text's repeated words (a phrase file's) had them made larger: fewer of them to miss
   in the cache.  Out of memory, the larger ones stay. */
static void nplm_fvocab_fit(nplm_fvocab *v, const char *limit) {
    uint64_t slots = 16;
    int bits = 4;
    while (slots < 8 * (uint64_t)v->words + 2) { slots *= 2; ++bits; }
    nplm_fslot *fit = slots <= v->mask ? calloc(slots, sizeof(*fit)) : NULL;
    if (!fit) return;
    free(v->slots);
    v->slots = fit;
    v->mask = slots - 1;
    v->shift = 64 - bits;
    for (uint32_t f = 0; f < v->words; ++f) nplm_fvocab_place(v, f, nplm_fkey(v->text + v->start[f], v->len[f], limit));
}

/* Build from text[0:size]: words split at whitespace; a sentence ends at the first
   newline after one of its words (blank lines hold none).  Returns 0, or -1 out of
   memory. */
static int nplm_fvocab_build(nplm_fvocab *v, const char *text, size_t size) {
    memset(v, 0, sizeof(*v));
    v->text = text;
    size_t cap = 0, occ = 0;
    /* first pass: every occurrence (word, sentence) */
    uint32_t *os = NULL, *ol = NULL, *osent = NULL;
    uint32_t sentence = 0;
    int used = 0;
    size_t i = 0;
    while (i < size) {
        if (nplm_fspace(text[i])) {
            if (text[i] == '\n' && used) { ++sentence; used = 0; }
            ++i;
            continue;
        }
        size_t j = i;
        while (j < size && !nplm_fspace(text[j])) ++j;
        if (occ == cap) {
            cap = cap ? 2 * cap : 1024;
            uint32_t *a = realloc(os, cap * 4), *b = realloc(ol, cap * 4), *c = realloc(osent, cap * 4);
            if (a) os = a;
            if (b) ol = b;
            if (c) osent = c;
            if (!a || !b || !c) { free(os); free(ol); free(osent); return -1; }
        }
        os[occ] = (uint32_t)i; ol[occ] = (uint32_t)(j - i); osent[occ] = sentence;
        ++occ;
        used = 1;
        i = j;
    }
    v->sentences = sentence + (uint32_t)used;
    uint64_t slots = 16;
    int bits = 4;
    while (slots < 8 * (uint64_t)occ + 2) { slots *= 2; ++bits; }
    v->mask = slots - 1;
    v->shift = 64 - bits;
    size_t n = occ ? occ : 1;
    v->slots = calloc(slots, sizeof(nplm_fslot));
    v->start = malloc(n * 4); v->len = malloc(n * 4);
    v->post_at = malloc(n * 4); v->post_n = calloc(n, 4); v->postings = malloc(n * 4);
    uint32_t *last = malloc(n * 4), *word_of = malloc(n * 4);
    if (!v->slots || !v->start || !v->len || !v->post_at || !v->post_n || !v->postings ||
        !last || !word_of) {
        free(os); free(ol); free(osent); free(last); free(word_of); nplm_fvocab_free(v);
        return -1;
    }
    for (size_t k = 0; k < occ; ++k) {
        const char *w = text + os[k];
        uint64_t key = nplm_fkey(w, ol[k], text + size);
        int64_t f = nplm_fvocab_lookup(v, w, ol[k], key);
        if (f < 0) {
            f = v->words++;
            v->start[f] = os[k]; v->len[f] = ol[k];
            nplm_fvocab_place(v, (uint32_t)f, key);
            last[f] = UINT32_MAX;
        }
        word_of[k] = (uint32_t)f;
        if (last[f] != osent[k]) { last[f] = osent[k]; v->post_n[f]++; }
    }
    uint32_t at = 0;
    for (uint32_t w = 0; w < v->words; ++w) { v->post_at[w] = at; at += v->post_n[w]; v->post_n[w] = 0; last[w] = UINT32_MAX; }
    for (size_t k = 0; k < occ; ++k) {
        uint32_t f = word_of[k];
        if (last[f] != osent[k]) { last[f] = osent[k]; v->postings[v->post_at[f] + v->post_n[f]++] = osent[k]; }
    }
    free(os); free(ol); free(osent); free(last); free(word_of);
    nplm_fvocab_fit(v, text + size);
    return 0;
}

/* ---- outputs: a file descriptor behind a buffer; an ARPA output keeps its counts */
typedef struct {
    const char *s;
    size_t n;
} nplm_frange;

typedef struct {
    int fd;
    int memory;                /* keep everything in buf (a stream that cannot seek) */
    char *buf;
    size_t len, cap;
    const char *pend;          /* kept lines not yet copied: a run of the input */
    size_t pend_n;
    int ranges;                /* no bytes: the kept lines as ranges of the input (runs) */
    nplm_frange *runs;         /* runs[0:len] (cap of them); the last still grows */
    uint64_t counts[256];
    uint64_t lines;            /* lines of the current order */
    int err;                   /* errno of a failed write */
} nplm_fout;

static int nplm_fout_grow(nplm_fout *o, size_t need) {
    size_t cap = o->cap ? o->cap : 65536;
    while (cap < o->len + need) cap *= 2;
    char *b = realloc(o->buf, cap);
    if (!b) { o->err = ENOMEM; return -1; }
    o->buf = b;
    o->cap = cap;
    return 0;
}

static int nplm_fout_write(nplm_fout *o, const char *s, size_t n) {
    while (n) {
        ssize_t w = write(o->fd, s, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            o->err = errno;
            return -1;
        }
        s += w;
        n -= (size_t)w;
    }
    return 0;
}

static int nplm_fout_drain(nplm_fout *o) {
    if (nplm_fout_write(o, o->buf, o->len)) return -1;
    o->len = 0;
    return 0;
}

static inline int nplm_fout_raw(nplm_fout *o, const char *s, size_t n) {
    if (o->len + n > o->cap) {
        if (!o->memory) {
            if (o->len && nplm_fout_drain(o)) return -1;
            /* a piece larger than the buffer goes straight to the file */
            if (n >= o->cap && o->cap) return nplm_fout_write(o, s, n);
        }
        if (o->len + n > o->cap && nplm_fout_grow(o, n)) return -1;
    }
    memcpy(o->buf + o->len, s, n);
    o->len += n;
    return 0;
}

/* The pending run into the buffer (a long one straight to the file). */
static int nplm_fout_settle(nplm_fout *o) {
    if (!o->pend_n) return 0;
    size_t n = o->pend_n;
    o->pend_n = 0;
    return nplm_fout_raw(o, o->pend, n);
}

static inline int nplm_fout_put(nplm_fout *o, const char *s, size_t n) {
    if (o->pend_n && nplm_fout_settle(o)) return -1;
    return nplm_fout_raw(o, s, n);
}

static int nplm_fout_flush(nplm_fout *o) {
    if (nplm_fout_settle(o)) return -1;
    return nplm_fout_drain(o);
}

static int nplm_fout_range(nplm_fout *o, const char *s, size_t n) {
    if (o->len == o->cap) {
        size_t cap = o->cap ? 2 * o->cap : 1024;
        nplm_frange *a = realloc(o->runs, cap * sizeof(*a));
        if (!a) { o->err = ENOMEM; return -1; }
        o->runs = a;
        o->cap = cap;
    }
    o->runs[o->len].s = s;
    o->runs[o->len].n = n;
    ++o->len;
    return 0;
}

/* A kept line: its bytes and a newline.  ``nl`` says the input has a newline right
   after the line, which is then copied with it, and kept lines that follow one
   another in the input are copied as one run. */
static inline int nplm_fout_line(nplm_fout *o, const char *s, size_t n, int nl) {
    ++o->lines;
    if (o->ranges) {
        if (nl && o->len && o->runs[o->len - 1].s + o->runs[o->len - 1].n == s) {
            o->runs[o->len - 1].n += n + 1;
            return 0;
        }
        if (nplm_fout_range(o, s, nl ? n + 1 : n)) return -1;
        return nl ? 0 : nplm_fout_range(o, "\n", 1);
    }
    if (nl) {
        if (o->pend_n && o->pend + o->pend_n == s) {
            o->pend_n += n + 1;
            return 0;
        }
        if (o->pend_n && nplm_fout_settle(o)) return -1;
        o->pend = s;
        o->pend_n = n + 1;
        return 0;
    }
    if (nplm_fout_put(o, s, n)) return -1;
    return nplm_fout_raw(o, "\n", 1);
}

static size_t nplm_counts_header(char *out, const uint64_t *counts, int orders) {
    size_t n = (size_t)sprintf(out, "\n\\data\\\n");
    for (int i = 0; i < orders; ++i) n += (size_t)sprintf(out + n, "ngram %d=%llu\n", i + 1, (unsigned long long)counts[i]);
    out[n++] = '\n';
    return n;
}

#include "kenlm_filter_phrase.h"

/* ---- the pass */
/* PHRASE_UNION and PHRASE_MULTIPLE test the n-grams against f->ph (the phrase
   constraint) as UNION and MULTIPLE test them against f->v. */
enum { NPLM_F_COPY = 0, NPLM_F_SINGLE = 1, NPLM_F_UNION = 2, NPLM_F_MULTIPLE = 3, NPLM_F_PHRASE_UNION = 4,
       NPLM_F_PHRASE_MULTIPLE = 5 };
enum {
    NPLM_FE_OK = 0, NPLM_FE_WRITE, NPLM_FE_MEMORY, NPLM_FE_EOF, NPLM_FE_FIRST, NPLM_FE_COUNT_LINE,
    NPLM_FE_COUNT_ORDER, NPLM_FE_COUNT_EQUALS, NPLM_FE_BAD_COUNT, NPLM_FE_HEADER, NPLM_FE_NO_TAB,
    NPLM_FE_END, NPLM_FE_TRAILING, NPLM_FE_ORDERS
};

struct nplm_fhalf;

typedef struct {
    const char *data;
    size_t size;
    int arpa, mode, context;
    int threads;               /* 2 or more: a second thread filters chunks of the input */
    size_t chunk;              /* bytes of a chunk for it (0: a 64th of the n-gram lines) */
    size_t split_min;          /* the least input worth a second thread */
    int wait_second;           /* the first thread starts once the second has done all (tests) */
    size_t split;              /* where the first thread next looks at the chunks (SIZE_MAX: never) */
    struct nplm_fhalf *half;
    const nplm_fvocab *v;
    const nplm_fphrases *ph;
    nplm_pscratch ps;          /* the phrase test's scratch */
    nplm_fout *outs;
    uint32_t nout;
    /* scratch for union and multiple: the words' posting lists */
    const uint32_t **sets;
    uint32_t *set_n;
    uint32_t set_cap;
    /* the ARPA file's counts */
    uint64_t counts[256];
    int orders;
    int order;                 /* the order being read */
    size_t reserve;
    /* where it failed: the error, the line (from 1), its text */
    int err;
    uint64_t line_no;
    const char *err_at;
    size_t err_len;
    uint32_t err_out;
    /* read position */
    size_t pos;
} nplm_filter;

/* The next line: *s, *n, *nl (1 when a newline ends it).  Returns 0 at the end. */
static inline int nplm_fread_line(nplm_filter *f, const char **s, size_t *n, int *nl) {
    if (f->pos >= f->size) return 0;
    const char *p = f->data + f->pos;
    size_t left = f->size - f->pos;
    const char *e = memchr(p, '\n', left);
    ++f->line_no;
    if (!e) {
        *s = p; *n = left; *nl = 0;
        f->pos = f->size;
        return 1;
    }
    size_t len = (size_t)(e - p);
    f->pos += len + 1;
    *s = p;
    if (len && p[len - 1] == '\r') { *n = len - 1; *nl = 0; }
    else { *n = len; *nl = 1; }
    return 1;
}

/* The first tab or newline of p[0:end-p], 16 bytes at a time; NULL when none. */
static inline const char *nplm_ftab_nl(const char *p, const char *end) {
#ifdef __SSE2__
    const __m128i tab = _mm_set1_epi8('\t'), nl = _mm_set1_epi8('\n');
    for (; p + 16 <= end; p += 16) {
        __m128i x = _mm_loadu_si128((const __m128i *)p);
        int m = _mm_movemask_epi8(_mm_or_si128(_mm_cmpeq_epi8(x, tab), _mm_cmpeq_epi8(x, nl)));
        if (m) return p + __builtin_ctz((unsigned)m);
    }
#endif
    for (; p < end; ++p) if (*p == '\t' || *p == '\n') return p;
    return NULL;
}

/* The next line as nplm_fread_line reads it, and its ARPA n-gram found in the same
   pass (the n-gram's end is the line's where no tab follows it): *t the n-gram's
   start (NULL: the line has no tab), *e its end. */
static inline int nplm_fread_ngram(nplm_filter *f, const char **s, size_t *n, int *nl, const char **t,
                                   const char **e) {
    if (f->pos >= f->size) return 0;
    const char *p = f->data + f->pos, *end = f->data + f->size, *line_end;
    ++f->line_no;
    const char *q = nplm_ftab_nl(p, end);
    if (!q || *q == '\n') {
        *t = NULL;
        line_end = q ? q : end;
    } else {
        *t = q + 1;
        const char *r = nplm_ftab_nl(q + 1, end);
        if (!r || *r == '\n') {
            line_end = *e = r ? r : end;
        } else {
            *e = r;
            line_end = memchr(r, '\n', (size_t)(end - r));
            if (!line_end) line_end = end;
        }
    }
    *s = p;
    if (line_end == end) {
        *n = (size_t)(end - p); *nl = 0;
        f->pos = f->size;
    } else {
        size_t len = (size_t)(line_end - p);
        f->pos += len + 1;
        if (len && p[len - 1] == '\r') { *n = len - 1; *nl = 0; }
        else { *n = len; *nl = 1; }
    }
    if (*t && *e > p + *n) *e = p + *n;     /* (a carriage return stripped) */
    return 1;
}

static int nplm_white(const char *s, size_t n) {
    for (size_t i = 0; i < n; ++i) if (!isspace((unsigned char)s[i])) return 0;
    return 1;
}

static int nplm_ffail(nplm_filter *f, int err, const char *s, size_t n) {
    f->err = err; f->err_at = s; f->err_len = n;
    return -1;
}

/* Gather the posting list of every non-tag word of ngram[0:n] into f->sets; 0 when
   a word is outside the vocabulary. */
static inline int nplm_fgather(nplm_filter *f, const char *s, const char *e, uint32_t *count) {
    const nplm_fvocab *v = f->v;
    const char *limit = f->data + f->size, *w;
    uint64_t key;
    size_t n;
    uint32_t k = 0;
    while ((n = nplm_fword(&s, e, limit, &w, &key))) {
        if (!(w[0] == '<' && w[n - 1] == '>')) {
            int64_t i = nplm_fvocab_lookup(v, w, n, key);
            if (i < 0) return 0;
            if (k == f->set_cap) {
                uint32_t cap = f->set_cap ? 2 * f->set_cap : 16;
                const uint32_t **a = realloc((void *)f->sets, cap * sizeof(*a));
                if (!a) return -1;
                f->sets = a;
                uint32_t *b = realloc(f->set_n, cap * sizeof(*b));
                if (!b) return -1;
                f->set_n = b;
                f->set_cap = cap;
            }
            f->sets[k] = v->postings + v->post_at[i];
            f->set_n[k] = v->post_n[i];
            ++k;
        }
    }
    *count = k;
    return 1;
}

/* Whether every word of s[0:e-s] (space-separated) is a tag or in the vocabulary. */
static inline int nplm_fsingle(const nplm_fvocab *v, const char *s, const char *e, const char *limit) {
    /* up to 8 words at a time: their slots are fetched from memory together (the
       table outgrows the first-level cache), then tested */
    enum { BATCH = 8 };
    const char *w[BATCH];
    uint64_t key[BATCH], slot[BATCH];
    size_t n[BATCH];
    for (;;) {
        int k = 0;
        while (k < BATCH && (n[k] = nplm_fword(&s, e, limit, &w[k], &key[k]))) {
            if (w[k][0] == '<' && w[k][n[k] - 1] == '>') continue;
            slot[k] = nplm_fhash(key[k], w[k], n[k]) >> v->shift;
            __builtin_prefetch(&v->slots[slot[k]]);
            ++k;
        }
        for (int j = 0; j < k; ++j) {
            for (uint64_t i = slot[j];; i = (i + 1) & v->mask) {
                const nplm_fslot *sl = &v->slots[i];
                if (!sl->id) return 0;
                if (sl->key == key[j] && sl->len == n[j] &&
                    (n[j] <= 8 || nplm_fsame_tail(v->text + v->start[sl->id - 1], w[j], n[j]))) break;
            }
        }
        if (k < BATCH) return 1;
    }
}

/* Binary search for x in a[lo:n]; the index of the first element >= x. */
static inline uint32_t nplm_flower(const uint32_t *a, uint32_t lo, uint32_t n, uint32_t x) {
    uint32_t hi = n;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (a[mid] < x) lo = mid + 1; else hi = mid;
    }
    return lo;
}

/* The line to output o. */
static inline int nplm_fline_to(nplm_filter *f, uint32_t o, const char *line, size_t n, int nl) {
    if (!nplm_fout_line(&f->outs[o], line, n, nl)) return 0;
    f->err_out = o;
    return nplm_ffail(f, NPLM_FE_WRITE, NULL, 0);
}

/* The line to every output (an n-gram with no words to test). */
static int nplm_fline_all(nplm_filter *f, const char *line, size_t n, int nl) {
    for (uint32_t o = 0; o < f->nout; ++o) if (nplm_fline_to(f, o, line, n, nl)) return -1;
    return 0;
}

/* Union and multiple: the line to output 0, or to each sentence's, where every word
   of the n-gram is in that sentence. */
static int nplm_fline_sets(nplm_filter *f, const char *line, size_t n, int nl, const char *s, const char *e) {
    uint32_t k;
    int r = nplm_fgather(f, s, e, &k);
    if (r < 0) return nplm_ffail(f, NPLM_FE_MEMORY, NULL, 0);
    if (!r) return 0;
    if (k == 0) return nplm_fline_all(f, line, n, nl);
    /* the sentences every list holds, in order: walk the shortest list */
    uint32_t m = 0;
    for (uint32_t j = 1; j < k; ++j) if (f->set_n[j] < f->set_n[m]) m = j;
    for (uint32_t a = 0; a < f->set_n[m]; ++a) {
        uint32_t x = f->sets[m][a];
        uint32_t j;
        for (j = 0; j < k; ++j) {
            if (j == m) continue;
            uint32_t at = nplm_flower(f->sets[j], 0, f->set_n[j], x);
            if (at == f->set_n[j] || f->sets[j][at] != x) break;
        }
        if (j < k) continue;
        if (f->mode == NPLM_F_UNION) return nplm_fline_to(f, 0, line, n, nl);
        if (nplm_fline_to(f, x, line, n, nl)) return -1;
    }
    return 0;
}

/* The phrase constraint: the line to output 0 (union), or to each sentence's whose
   phrases assemble the n-gram. */
static int nplm_fline_phrase(nplm_filter *f, const char *line, size_t n, int nl, const char *s, const char *e) {
    int union_ = f->mode == NPLM_F_PHRASE_UNION;
    int64_t found = nplm_fphrase_test(f->ph, &f->ps, s, e, f->data + f->size, union_);
    if (found == -2) return nplm_ffail(f, NPLM_FE_MEMORY, NULL, 0);
    if (found == -1) return nplm_fline_all(f, line, n, nl);
    for (int64_t i = 0; i < found; ++i)
        if (nplm_fline_to(f, union_ ? 0 : f->ps.found[i], line, n, nl)) return -1;
    return 0;
}

/* Test and write one line whose n-gram is ngram[0:e-ngram]. */
static inline int nplm_fline(nplm_filter *f, const char *line, size_t n, int nl, const char *s, const char *e) {
    if (f->context) {
        /* ContextFilter: the n-gram up to its last space (none: nothing) */
        const char *p = e - 1;
        while (p > s && *p != ' ') --p;
        e = p > s ? p : s;
    }
    switch (f->mode) {
    case NPLM_F_COPY:
        break;
    case NPLM_F_SINGLE:
        if (!nplm_fsingle(f->v, s, e, f->data + f->size)) return 0;
        break;
    case NPLM_F_PHRASE_UNION:
    case NPLM_F_PHRASE_MULTIPLE:
        return nplm_fline_phrase(f, line, n, nl, s, e);
    default:
        return nplm_fline_sets(f, line, n, nl, s, e);
    }
    return nplm_fline_to(f, 0, line, n, nl);
}

static int nplm_fput_all(nplm_filter *f, const char *s, size_t n) {
    for (uint32_t o = 0; o < f->nout; ++o)
        if (nplm_fout_put(&f->outs[o], s, n)) { f->err_out = o; return nplm_ffail(f, NPLM_FE_WRITE, NULL, 0); }
    return 0;
}

/* ReadARPACounts: lines of whitespace or starting with # before \data\, then the
   count lines up to a line of whitespace. */
static int nplm_fheader(nplm_filter *f) {
    const char *s; size_t n; int nl;
    do {
        if (!nplm_fread_line(f, &s, &n, &nl)) return nplm_ffail(f, NPLM_FE_EOF, NULL, 0);
    } while (nplm_white(s, n) || (n && s[0] == '#'));
    if (!(n == 6 && memcmp(s, "\\data\\", 6) == 0)) return nplm_ffail(f, NPLM_FE_FIRST, s, n);
    f->orders = 0;
    for (;;) {
        if (!nplm_fread_line(f, &s, &n, &nl)) return nplm_ffail(f, NPLM_FE_EOF, NULL, 0);
        if (nplm_white(s, n)) break;
        if (n < 6 || memcmp(s, "ngram ", 6)) return nplm_ffail(f, NPLM_FE_COUNT_LINE, s, n);
        char tmp[64];
        size_t m = n - 6 < sizeof(tmp) - 1 ? n - 6 : sizeof(tmp) - 1;
        memcpy(tmp, s + 6, m);
        tmp[m] = 0;
        char *end;
        long order = strtol(tmp, &end, 10);
        if (end == tmp || order - 1 != f->orders) return nplm_ffail(f, NPLM_FE_COUNT_ORDER, s, n);
        if (*end != '=') return nplm_ffail(f, NPLM_FE_COUNT_EQUALS, s, n);
        ++end;
        while (*end && isspace((unsigned char)*end)) ++end;
        if (!isdigit((unsigned char)*end)) return nplm_ffail(f, NPLM_FE_BAD_COUNT, s, n);
        uint64_t c = 0;
        while (isdigit((unsigned char)*end)) c = c * 10 + (uint64_t)(*end++ - '0');
        if (f->orders == 255) return nplm_ffail(f, NPLM_FE_ORDERS, s, n);
        f->counts[f->orders++] = c;
    }
    char head[256 * 48];
    f->reserve = nplm_counts_header(head, f->counts, f->orders);
    return 0;
}
#endif
