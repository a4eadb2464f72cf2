#ifndef NPLM_NBEST_H
#define NPLM_NBEST_H
/* The byte work of n-best rescoring (nplm/compose/_rescore.pyx): splitting a
   hypothesis into words with their vocabulary hashes, 64 bytes at a time. */
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

/* nplm_hash_bytes(s, n), reading the last partial 8 bytes with one load where the
   8 bytes from there lie before `limit` (bytes past the word masked off). */
static inline uint64_t nplm_hash_word_before(const char *s, ptrdiff_t n, const char *limit) {
    uint64_t h, k;
    ptrdiff_t r = n & 7;
    if (s + (n - r) + 8 > limit) return nplm_hash_bytes(s, n);
    h = 0x9e3779b97f4a7c15ULL ^ ((uint64_t)n * 0xff51afd7ed558ccdULL);
    while (n >= 8) {
        memcpy(&k, s, 8);
        h = (h ^ nplm_mix(k)) * 0xc4ceb9fe1a85ec53ULL;
        s += 8; n -= 8;
    }
    if (n > 0) {
        memcpy(&k, s, 8);
        k &= ~0ULL >> (64 - 8 * n);
        h = (h ^ nplm_mix(k ^ 0x5bd1e995ULL)) * 0xc4ceb9fe1a85ec53ULL;
    }
    h = nplm_mix(h);
    return h ? h : 1;
}

/* The words of p[0:n]: word i is p[start[i]:start[i] + len[i]], hash[i] its
   nplm_hash_bytes.  p[n:limit] may be read (not used).  Returns the number of
   words; the arrays hold n / 2 + 1 entries. */
static inline size_t nplm_words(const uint8_t *p, size_t n, const uint8_t *limit, uint64_t *hash,
                                int64_t *start, int64_t *len) {
    size_t ns = 0, ne = 0, base, i;
    uint64_t carry = 1;                     /* the byte before p counts as a delimiter */
    uint8_t tail[64];
    for (base = 0; base < n; base += 64) {
        uint64_t d, s, e;
        if (n - base >= 64) {
            d = nplm_delimiters64(p + base);
        } else {
            memset(tail, ' ', 64);
            memcpy(tail, p + base, n - base);
            d = nplm_delimiters64(tail);
        }
        s = ~d & ((d << 1) | carry);       /* a word byte after a delimiter */
        e = d & ~((d << 1) | carry);       /* a delimiter after a word byte */
        carry = d >> 63;
        while (s) { start[ns++] = (int64_t)(base + (size_t)__builtin_ctzll(s)); s &= s - 1; }
        while (e) { len[ne++] = (int64_t)(base + (size_t)__builtin_ctzll(e)); e &= e - 1; }
    }
    if (ne < ns) len[ne++] = (int64_t)n;  /* (a block past n is all delimiters) */
    for (i = 0; i < ns; i++) {
        len[i] -= start[i];
        hash[i] = nplm_hash_word_before((const char *)p + start[i], len[i], (const char *)limit);
    }
    return ns;
}
#endif
