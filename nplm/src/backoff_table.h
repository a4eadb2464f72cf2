#ifndef NPLM_BACKOFF_TABLE_H
#define NPLM_BACKOFF_TABLE_H
#include <stdint.h>
#include <string.h>
#include "hash.h"
static inline void nplm_prefetch(const void *p) { __builtin_prefetch(p); }
static inline void nplm_prefetch_run(const void *p) {
    __builtin_prefetch(p);
    __builtin_prefetch((const char *)p + 64);
}
static inline int nplm_signbit(float f) { uint32_t i; memcpy(&i, &f, 4); return (int)(i >> 31); }
static inline float nplm_neg(float f) { uint32_t i; memcpy(&i, &f, 4); i |= 0x80000000u; memcpy(&f, &i, 4); return f; }
static inline float nplm_pos(float f) { uint32_t i; memcpy(&i, &f, 4); i &= 0x7fffffffu; memcpy(&f, &i, 4); return f; }
/* KenLM's marker: a back-off of exactly -0.0 means "nothing extends this n-gram". */
static inline int nplm_has_ext(float f) { uint32_t i; memcpy(&i, &f, 4); return i != 0x80000000u; }
static inline float nplm_no_ext(void) { return -0.0f; }
#pragma pack(push, 4)
typedef struct { uint64_t key; float prob; } nplm_long_entry;
#pragma pack(pop)
typedef struct { uint64_t key; float prob; float backoff; } nplm_mid_entry;
typedef struct { float prob; float backoff; } nplm_uni_entry;
#endif
