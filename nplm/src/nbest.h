#ifndef NPLM_NBEST_H
#define NPLM_NBEST_H
/* The byte work of n-best rescoring (nplm/compose/_rescore.pyx): splitting a
   hypothesis into words, 64 bytes at a time, with a key identifying each. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "hash.h"
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* Bit i set when q[i] is a word delimiter (KenLM's: space, \t \n \v \f \r; the test
   of is_word_delimiter in _kernels.pxd), for q[0:64]. */
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
        } else {
            memset(tail, ' ', 64);          /* (past n: delimiters) */
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
#endif
