#ifndef NPLM_HASH_H
#define NPLM_HASH_H
/* The hash functions of every kernel: one mixer for hash-table keys, MurmurHash3's
   finaliser for in-memory tables, and the word and n-gram keys stored in nplm's
   back-off binaries (which fix their definitions: changing them changes files). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* MurmurHash3's 64-bit finaliser: spreads every input bit over the word. */
static inline uint64_t nplm_fmix64(uint64_t h) {
    h ^= h >> 33; h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33; h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h;
}
static inline uint64_t nplm_fastrange(uint64_t h, uint64_t n) {
    return (uint64_t)(((__uint128_t)h * n) >> 64);
}
static inline uint64_t nplm_mix(uint64_t h) {
    h ^= h >> 32; h *= 0xd6e8feb86659fd93ULL;
    h ^= h >> 32; h *= 0xd6e8feb86659fd93ULL;
    h ^= h >> 32;
    return h;
}
/* Hash of a word's UTF-8 bytes, 8 bytes at a time.  Never 0 (the empty key). */
static inline uint64_t nplm_hash_bytes(const char *s, ptrdiff_t n) {
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ ((uint64_t)n * 0xff51afd7ed558ccdULL);
    uint64_t k;
    while (n >= 8) {
        memcpy(&k, s, 8);
        h = (h ^ nplm_mix(k)) * 0xc4ceb9fe1a85ec53ULL;
        s += 8; n -= 8;
    }
    if (n > 0) {
        /* The last 1..7 bytes, little-endian and zero-padded, gathered by loads
           that stay inside s[0:n] (a byte-wise copy into a word on the stack
           stalls the load that reads it back). */
        if (n >= 4) {
            uint32_t lo, hi;
            memcpy(&lo, s, 4);
            memcpy(&hi, s + n - 4, 4);
            k = (uint64_t)lo | ((uint64_t)hi << (8 * (n - 4)));
        } else {
            k = (uint64_t)(uint8_t)s[0] | ((uint64_t)(uint8_t)s[n / 2] << (8 * (n / 2)))
                | ((uint64_t)(uint8_t)s[n - 1] << (8 * (n - 1)));
        }
        h = (h ^ nplm_mix(k ^ 0x5bd1e995ULL)) * 0xc4ceb9fe1a85ec53ULL;
    }
    h = nplm_mix(h);
    return h ? h : 1;
}
/* Extend an n-gram key by one (older) context word.  Never 0. */
static inline uint64_t nplm_combine(uint64_t h, uint32_t w) {
    h = nplm_mix((h * 0x9e3779b97f4a7c15ULL) ^ (((uint64_t)w + 1) * 0xbf58476d1ce4e5b9ULL));
    return h ? h : 1;
}
#endif
