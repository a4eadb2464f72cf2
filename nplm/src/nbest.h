#ifndef NPLM_NBEST_H
#define NPLM_NBEST_H
/* The byte work of n-best rescoring (nplm/compose/_rescore.pyx), 64 bytes at a
   time: a chunk's lines and their fields, a hypothesis's words with a key
   identifying each. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "hash.h"
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* Bit i set when q[i] is a word delimiter (KenLM's: space, \t \n \v \f \r; the test
   of is_word_delimiter in _words.pxd), for q[0:64]. */
static inline uint64_t nplm_delimiters64(const uint8_t *q) {
    uint64_t m = 0;
    int i;
#if defined(__SSE2__)
    for (i = 0; i < 4; i++) {
        __m128i v = _mm_loadu_si128((const __m128i *)(q + 16 * i));
        __m128i space = _mm_cmpeq_epi8(v, _mm_set1_epi8(' '));
        __m128i t = _mm_sub_epi8(v, _mm_set1_epi8(9));                    /* 9..13 -> 0..4 */
        __m128i ctrl = _mm_cmpeq_epi8(_mm_min_epu8(t, _mm_set1_epi8(4)), t);
        m |= (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_or_si128(space, ctrl)) << (16 * i);
    }
#else
    for (i = 0; i < 64; i++) {
        unsigned c = q[i];
        m |= (uint64_t)(c == 32 || c - 9u <= 4u) << i;
    }
#endif
    return m;
}

/* A word's identity as one 64-bit key: a word of 1..7 bytes is its bytes and its
   length (exact: no two such words share a key), a longer word its
   nplm_hash_bytes with the top byte set; then multiplied by an odd constant, a
   one-to-one map that spreads every byte over the high bits (for hash tables).
   `limit`: how far past the word the buffer may be read (one load, bytes past
   the word masked off). */
static inline uint64_t nplm_word_key(const uint8_t *s, size_t n, const uint8_t *limit) {
    uint64_t k = 0;
    if (n < 8) {
        if (s + 8 <= limit) {
            memcpy(&k, s, 8);
            k &= ~0ULL >> (64 - 8 * n);
        } else {
            memcpy(&k, s, n);
        }
        k |= (uint64_t)n << 56;
    } else {
        k = nplm_hash_bytes((const char *)s, (ptrdiff_t)n) | (0xFFULL << 56);
    }
    return k * 0x9E3779B97F4A7C15ULL;
}

/* The words of p[0:n]: word i starts at start[i], key[i] is its nplm_word_key.
   p[n:limit] may be read (not used).  Returns the number of words; the arrays
   hold n / 2 + 1 entries. */
static inline size_t nplm_words(const uint8_t *p, size_t n, const uint8_t *limit, uint64_t *key,
                                int64_t *start) {
    size_t ns = 0, ne = 0, base, end;
    uint64_t carry = 1;                     /* the byte before p counts as a delimiter */
    uint8_t tail[64];
    for (base = 0; base < n; base += 64) {
        uint64_t d, s, e;
        if (n - base >= 64) {
            d = nplm_delimiters64(p + base);
        } else if (p + base + 64 <= limit) {   /* (the bytes past n: delimiters) */
            d = nplm_delimiters64(p + base) | (~0ULL << (n - base));
        } else {
            memset(tail, ' ', 64);
            memcpy(tail, p + base, n - base);
            d = nplm_delimiters64(tail);
        }
        s = ~d & ((d << 1) | carry);       /* a word byte after a delimiter */
        e = d & ~((d << 1) | carry);       /* a delimiter after a word byte */
        carry = d >> 63;
        while (s) { start[ns++] = (int64_t)(base + (size_t)__builtin_ctzll(s)); s &= s - 1; }
        while (e) {
            end = base + (size_t)__builtin_ctzll(e);
            key[ne] = nplm_word_key(p + start[ne], end - (size_t)start[ne], limit);
            ne++;
            e &= e - 1;
        }
    }
    if (ne < ns) {                          /* a word running to p[n] when n % 64 == 0 */
        key[ne] = nplm_word_key(p + start[ne], n - (size_t)start[ne], limit);
        ne++;
    }
    return ns;
}

/* The length of the word at p[0:n] (up to its first delimiter). */
static inline size_t nplm_word_length(const uint8_t *p, size_t n) {
    size_t k = 0;
    while (k < n && !(p[k] == 32 || (unsigned)(p[k] - 9) <= 4u)) k++;
    return k;
}

/* Bit i of *a set where q[i] == ca, of *b where q[i] == cb, for q[0:64]. */
static inline void nplm_bytes_equal64(const uint8_t *q, uint8_t ca, uint8_t cb, uint64_t *a, uint64_t *b) {
    uint64_t ma = 0, mb = 0;
    int i;
#if defined(__SSE2__)
    __m128i va = _mm_set1_epi8((char)ca), vb = _mm_set1_epi8((char)cb);
    for (i = 0; i < 4; i++) {
        __m128i v = _mm_loadu_si128((const __m128i *)(q + 16 * i));
        ma |= (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_cmpeq_epi8(v, va)) << (16 * i);
        mb |= (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_cmpeq_epi8(v, vb)) << (16 * i);
    }
#else
    for (i = 0; i < 64; i++) {
        ma |= (uint64_t)(q[i] == ca) << i;
        mb |= (uint64_t)(q[i] == cb) << i;
    }
#endif
    *a = ma;
    *b = mb;
}

/* The number of lines of p[0:size] (a last line without a newline counts). */
static inline size_t nplm_count_lines(const uint8_t *p, size_t size) {
    size_t n = 0, i = 0;
#if defined(__SSE2__)
    const __m128i nl = _mm_set1_epi8('\n');
    while (i + 16 <= size) {
        __m128i acc = _mm_setzero_si128();
        size_t stop = i + 16 * 255 < size ? i + 16 * 255 : size;   /* byte counters: at most 255 */
        for (; i + 16 <= stop; i += 16)
            acc = _mm_sub_epi8(acc, _mm_cmpeq_epi8(_mm_loadu_si128((const __m128i *)(p + i)), nl));
        acc = _mm_sad_epu8(acc, _mm_setzero_si128());
        n += (size_t)_mm_cvtsi128_si32(acc) + (size_t)_mm_cvtsi128_si32(_mm_unpackhi_epi64(acc, acc));
    }
#endif
    for (; i < size; i++) n += p[i] == '\n';
    return n + (size && p[size - 1] != '\n');
}

/* For each line i of p[0:size] (lines: nplm_count_lines of them): where it ends
   (its newline, or size), its field separators, counted, and the first three of
   them: fields[4i] = end, fields[4i + 1..3] = separator starts (-1: none); count[i]
   = separators.  Separators are "|||" (moses; taken from the left, without overlap,
   as bytes.split does) or tabs.  The arrays hold one line more than p has. */
static inline void nplm_line_fields(const uint8_t *p, size_t size, int moses, int64_t *fields, int32_t *count) {
    size_t line = 0, base;
    int64_t next = 0;           /* the first position a separator may start at */
    int32_t c = 0;
    uint8_t tail[64 + 2];
    int64_t *f = fields;
    f[1] = f[2] = f[3] = -1;
    for (base = 0; base < size; base += 64) {
        const uint8_t *q = p + base;
        uint64_t nl, sep, ev;
        if (size - base < 64 + 2) {
            memset(tail, 0, sizeof tail);
            memcpy(tail, q, size - base < sizeof tail ? size - base : sizeof tail);
            q = tail;
        }
        nplm_bytes_equal64(q, '\n', moses ? '|' : '\t', &nl, &sep);
        if (moses) {
            uint64_t b64 = q[64] == '|', b65 = q[65] == '|';
            sep = sep & ((sep >> 1) | (b64 << 63)) & ((sep >> 2) | (b64 << 62) | (b65 << 63));
        }
        if (size - base < 64) {
            uint64_t keep = (1ULL << (size - base)) - 1;
            nl &= keep;
            sep &= keep;
        }
        ev = nl | sep;
        while (ev) {
            int k = __builtin_ctzll(ev);
            int64_t pos = (int64_t)base + k;
            ev &= ev - 1;
            if ((nl >> k) & 1) {
                f[0] = pos;
                count[line++] = c;
                f += 4;
                f[1] = f[2] = f[3] = -1;
                c = 0;
                next = pos + 1;
            } else if (pos >= next) {
                if (c < 3) f[1 + c] = pos;
                c++;
                next = pos + (moses ? 3 : 1);
            }
        }
    }
    if (size && p[size - 1] != '\n') {
        f[0] = (int64_t)size;
        count[line] = c;
    }
}
#endif
