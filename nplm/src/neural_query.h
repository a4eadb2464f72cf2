#ifndef NPLM_NEURAL_QUERY_H
#define NPLM_NEURAL_QUERY_H
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include "hash.h"
/* Kernels for one context at a time, where a BLAS call has too little work:
     nq_vecmat   y[0:n_out] = b + x[0:n_in] W  (W row-major n_in x n_out, rows ldw apart), skipping
                 the zero inputs (half of a ReLU layer's);
     nq_rowdots  out[i] = W[i] . h + bias[i] for `rows` rows of W (n wide, rows ldw apart);
     nq_dot      a . b.
   Each is compiled for AVX-512, AVX2+FMA and plain x86-64 and picked by the CPU's
   features at run time ("arch=" clones would dispatch on the CPU model and miss
   AMD processors). */
#define NQ_VECMAT_BODY \
    int i, j; \
    for (j = 0; j < n_out; j++) y[j] = b[j]; \
    for (i = 0; i < n_in; i++) { \
        const float xi = x[i]; \
        const float *row = W + (long)i * ldw; \
        if (xi == 0.0f) continue; \
        for (j = 0; j < n_out; j++) y[j] += xi * row[j]; \
    }
#define NQ_DOT_BODY \
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0; \
    int i = 0; \
    for (; i + 8 <= n; i += 8) { \
        s0 += a[i] * b[i]; s1 += a[i + 1] * b[i + 1]; \
        s2 += a[i + 2] * b[i + 2]; s3 += a[i + 3] * b[i + 3]; \
        s4 += a[i + 4] * b[i + 4]; s5 += a[i + 5] * b[i + 5]; \
        s6 += a[i + 6] * b[i + 6]; s7 += a[i + 7] * b[i + 7]; \
    } \
    for (; i < n; i++) s0 += a[i] * b[i]; \
    return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7));
static void nq_vecmat_plain(const float *x, int n_in, const float *W, int ldw, int n_out,
                            const float *b, float *__restrict__ y) { NQ_VECMAT_BODY }
static float nq_dot_plain(const float *a, const float *b, int n) { NQ_DOT_BODY }
static void nq_rowdots_plain(const float *W, int ldw, const float *h, int rows, int n,
                             const float *bias, float *out) {
    for (int i = 0; i < rows; i++) out[i] = bias[i] + nq_dot_plain(W + (long)i * ldw, h, n);
}
/* out = act(b + rows[0] + ... + rows[m-1]) over n floats: a first layer read from
   the precomputed table (relu: max(x, 0); otherwise the sum as it is). */
static void nq_addrows_plain(const float *b, const float *const *rows, int m, int n, int relu,
                             float *out) {
    for (int j = 0; j < n; j++) {
        float a = b[j];
        for (int k = 0; k < m; k++) a += rows[k][j];
        out[j] = relu && a < 0 ? 0.0f : a;
    }
}
/* out[i] = exp(s[i] - mx): the unnormalised probabilities a draw scans */
static void nq_expshift_plain(const float *s, int n, float mx, float *out) {
    for (int i = 0; i < n; i++) out[i] = expf(s[i] - mx);
}
static double nq_logsumexp_plain(const float *s, int n) {
    float mx = -INFINITY;
    double acc = 0;
    for (int i = 0; i < n; i++) if (s[i] > mx) mx = s[i];
    for (int i = 0; i < n; i++) acc += exp((double)s[i] - mx);
    return mx + log(acc);
}
#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
/* log sum exp with a vector expf (Cephes' polynomial, relative error ~2e-7, far
   inside the 1e-5 the query tests allow): libm's exp one element at a time is
   most of a class-factored query's cost.  Arguments are <= 0 after the shift by
   the maximum; below -87 they are clamped (their terms are < 1e-37 of the max). */
#define NQ_EXP_POLY(V, FMA, MUL, ADD, SET1, R, P) \
    P = SET1(1.9875691500E-4f); \
    P = FMA(P, R, SET1(1.3981999507E-3f)); \
    P = FMA(P, R, SET1(8.3334519073E-3f)); \
    P = FMA(P, R, SET1(4.1665795894E-2f)); \
    P = FMA(P, R, SET1(1.6666665459E-1f)); \
    P = FMA(P, R, SET1(5.0000001201E-1f)); \
    P = FMA(P, MUL(R, R), ADD(R, SET1(1.0f)));
__attribute__((target("avx2,fma")))
static inline __m256 nq_exp256(__m256 x) {
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x), p;
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    NQ_EXP_POLY(8, _mm256_fmadd_ps, _mm256_mul_ps, _mm256_add_ps, _mm256_set1_ps, r, p)
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}
__attribute__((target("avx2,fma")))
static double nq_logsumexp_avx2(const float *s, int n) {
    if (n < 8) return nq_logsumexp_plain(s, n);
    __m256 vm = _mm256_loadu_ps(s);
    int i = 8;
    for (; i + 8 <= n; i += 8) vm = _mm256_max_ps(vm, _mm256_loadu_ps(s + i));
    float buf[8], mx;
    _mm256_storeu_ps(buf, vm);
    mx = buf[0];
    for (int k = 1; k < 8; k++) if (buf[k] > mx) mx = buf[k];
    for (; i < n; i++) if (s[i] > mx) mx = s[i];
    const __m256 vmx = _mm256_set1_ps(mx);
    __m256 acc = _mm256_setzero_ps();
    double tail = 0;
    for (i = 0; i + 8 <= n; i += 8) acc = _mm256_add_ps(acc, nq_exp256(_mm256_sub_ps(_mm256_loadu_ps(s + i), vmx)));
    for (; i < n; i++) tail += exp((double)s[i] - mx);
    _mm256_storeu_ps(buf, acc);
    for (int k = 0; k < 8; k++) tail += buf[k];
    return mx + log(tail);
}
#define NQ_BLOCK 1024          /* inputs gathered at a time (vecmat kernels) */
/* AVX2: a block of up to 13 output vectors (104 floats: 13 accumulators, the
   broadcast input and the tail mask fill the 16 registers) stays in registers
   while the rows of W for the nonzero inputs stream past; the nonzeros are
   gathered first, without branches.  Each output is the plain loop's FMA chain
   in the same order, so the same bits, without loading and storing y for every
   input (the class products of the default model: 2-3x faster). */
#define NQ_VM8_BLOCK 13
/* AVX2 weight loads: 8 entries at p as floats, and a row's last vector (mt: the
   lanes inside the row).  Float16 rows are the class copies, padded to 16 entries
   with zeros, so their last vector is a whole load and gives the masked float32
   load's values. */
#define NQ_LT8_F32(p, mt) _mm256_maskload_ps(p, mt)
#define NQ_LT8_F16(p, mt) NQ_LD8_F16(p)
#define NQ_LD8_F32(p) _mm256_loadu_ps(p)
#define NQ_LD8_F16(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
#define NQ_VM8_CASE(NV, WT, LD8, LT8) case NV: { \
        __m256 acc[NV]; \
        const __m256i mt = _mm256_cmpgt_epi32(_mm256_set1_epi32(n_out - j0 - 8 * (NV - 1)), \
                                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)); \
        _Pragma("GCC unroll 16") for (int k = 0; k < NV - 1; k++) \
            acc[k] = _mm256_loadu_ps(src + j0 + 8 * k); \
        acc[NV - 1] = _mm256_maskload_ps(src + j0 + 8 * (NV - 1), mt); \
        for (int t = 0; t < nnz; t++) { \
            const WT *row = (const WT *)W + (long)idx[t] * ldw + j0; \
            const __m256 xv = _mm256_set1_ps(val[t]); \
            _Pragma("GCC unroll 16") for (int k = 0; k < NV - 1; k++) \
                acc[k] = _mm256_fmadd_ps(xv, LD8(row + 8 * k), acc[k]); \
            acc[NV - 1] = _mm256_fmadd_ps(xv, LT8(row + 8 * (NV - 1), mt), acc[NV - 1]); } \
        _Pragma("GCC unroll 16") for (int k = 0; k < NV - 1; k++) \
            _mm256_storeu_ps(y + j0 + 8 * k, acc[k]); \
        _mm256_maskstore_ps(y + j0 + 8 * (NV - 1), mt, acc[NV - 1]); \
        break; }
#define NQ_VM8_BODY(WT, LD8, LT8) \
    for (int j0 = 0; j0 < n_out; j0 += 8 * NQ_VM8_BLOCK) { \
        const int nv = (n_out - j0 + 7) / 8 < NQ_VM8_BLOCK ? (n_out - j0 + 7) / 8 : NQ_VM8_BLOCK; \
        switch (nv) { \
            NQ_VM8_CASE(1, WT, LD8, LT8) NQ_VM8_CASE(2, WT, LD8, LT8) NQ_VM8_CASE(3, WT, LD8, LT8) \
            NQ_VM8_CASE(4, WT, LD8, LT8) NQ_VM8_CASE(5, WT, LD8, LT8) NQ_VM8_CASE(6, WT, LD8, LT8) \
            NQ_VM8_CASE(7, WT, LD8, LT8) NQ_VM8_CASE(8, WT, LD8, LT8) NQ_VM8_CASE(9, WT, LD8, LT8) \
            NQ_VM8_CASE(10, WT, LD8, LT8) NQ_VM8_CASE(11, WT, LD8, LT8) NQ_VM8_CASE(12, WT, LD8, LT8) \
            NQ_VM8_CASE(13, WT, LD8, LT8) \
        } \
    }
/* Lane order of the nonzero lanes of each 8-bit mask, packed 4 bits a lane: AVX2
   has no compress instruction, so nq_nonzeros_avx2 permutes by this table. */
static uint32_t nq_pack8[256];
static void nq_init_pack8(void) {
    for (int mk = 0; mk < 256; mk++) {
        uint32_t code = 0;
        int k = 0;
        for (int lane = 0; lane < 8; lane++)
            if (mk >> lane & 1) code |= (uint32_t)lane << (4 * k++);
        nq_pack8[mk] = code;
    }
}
/* Indices (first + i) and values of the nonzero x[i], i < n, eight at a time,
   without branches; idx and val need 8 entries of room past n. */
__attribute__((target("avx2,fma")))
static int nq_nonzeros_avx2(const float *x, int n, int first, int *idx, float *val) {
    int nnz = 0, i = 0;
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        const int mk = _mm256_movemask_ps(_mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_NEQ_UQ));
        const __m256i perm = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)nq_pack8[mk]), shifts),
                                              _mm256_set1_epi32(15));
        _mm256_storeu_si256((__m256i *)(idx + nnz),
                            _mm256_add_epi32(_mm256_set1_epi32(first + i), _mm256_permutevar8x32_epi32(lane, perm)));
        _mm256_storeu_ps(val + nnz, _mm256_permutevar8x32_ps(v, perm));
        nnz += __builtin_popcount((unsigned)mk);
    }
    for (; i < n; i++) {
        idx[nnz] = first + i;
        val[nnz] = x[i];
        nnz += x[i] != 0.0f;
    }
    return nnz;
}
/* y = b + x W over the nonzero x, NQ_BLOCK inputs gathered at a time (one body for
   each vector width: its nonzero gather and product of gathered rows) */
#define NQ_VECMATW_BODY(NONZEROS, VECMAT_NZ) \
    int idx[NQ_BLOCK + 16]; \
    float val[NQ_BLOCK + 16]; \
    for (int i0 = 0; i0 < n_in; i0 += NQ_BLOCK) { \
        const int ni = n_in - i0 < NQ_BLOCK ? n_in - i0 : NQ_BLOCK; \
        const int nnz = NONZEROS(x + i0, ni, i0, idx, val); \
        VECMAT_NZ(idx, val, nnz, W, ldw, n_out, i0 == 0 ? b : y, y, half); \
    }
/* y = src + the rows idx[0:nnz] of W scaled by val; W float32, or (half, F16C)
   float16 with rows padded to 16 entries, which gives the float32 rows' bits */
__attribute__((target("avx2,fma")))
static void nq_vecmat_nz_avx2(const int *idx, const float *val, int nnz, const float *W, int ldw,
                              int n_out, const float *src, float *__restrict__ y) {
    NQ_VM8_BODY(float, NQ_LD8_F32, NQ_LT8_F32)
}
__attribute__((target("avx2,fma,f16c")))
static void nq_vecmat_nzh_avx2(const int *idx, const float *val, int nnz, const uint16_t *W, int ldw,
                               int n_out, const float *src, float *__restrict__ y) {
    NQ_VM8_BODY(uint16_t, NQ_LD8_F16, NQ_LT8_F16)
}
__attribute__((target("avx2,fma")))
static inline void nq_vecmat_nzw_avx2(const int *idx, const float *val, int nnz, const void *W, int ldw,
                                      int n_out, const float *src, float *__restrict__ y, int half) {
    if (half) nq_vecmat_nzh_avx2(idx, val, nnz, (const uint16_t *)W, ldw, n_out, src, y);
    else nq_vecmat_nz_avx2(idx, val, nnz, (const float *)W, ldw, n_out, src, y);
}
__attribute__((target("avx2,fma")))
static void nq_vecmatw_avx2(const float *x, int n_in, const void *W, int ldw, int n_out,
                            const float *b, float *__restrict__ y, int half) {
    NQ_VECMATW_BODY(nq_nonzeros_avx2, nq_vecmat_nzw_avx2)
}
__attribute__((target("avx2,fma")))
static void nq_vecmat_avx2(const float *x, int n_in, const float *W, int ldw, int n_out,
                           const float *b, float *__restrict__ y) {
    nq_vecmatw_avx2(x, n_in, W, ldw, n_out, b, y, 0);
}
/* Two products of one input (a class-factored normaliser's class scores and its
   word block): the nonzeros are gathered once.  With `prefetch`, the W2 rows of the
   nonzeros are first requested into L2 (prefetcht2), to arrive from DRAM while the
   W1 product runs: on Zen 4, T0 prefetches compete with that product for L1 fills
   and gained nothing, T2 ones took a 40 MB block set's query from 16.3k to 13.1k
   cycles (AVX-512; 5-8% of the default model's class call on AVX2).  For W2
   already in L3 they only cost, so the caller decides.  One body for each vector
   width: its block product, nonzero gather and product of gathered rows. */
#define NQ_VECMAT2_BODY(VECMATW, NONZEROS, VECMAT_NZ) \
    const long esize = half ? 2 : 4; \
    if (n_in > NQ_BLOCK) { \
        VECMATW(x, n_in, W1, ld1, n1, b1, y1, half); \
        VECMATW(x, n_in, W2, ld2, n2, b2, y2, half); \
        return; \
    } \
    int idx[NQ_BLOCK + 16]; \
    float val[NQ_BLOCK + 16]; \
    const int nnz = NONZEROS(x, n_in, 0, idx, val); \
    if (prefetch) \
        for (int t = 0; t < nnz; t++) { \
            const char *row = (const char *)W2 + esize * idx[t] * ld2; \
            for (long q = 0; q < esize * n2; q += 64) _mm_prefetch(row + q, _MM_HINT_T2); \
        } \
    VECMAT_NZ(idx, val, nnz, W1, ld1, n1, b1, y1, half); \
    VECMAT_NZ(idx, val, nnz, W2, ld2, n2, b2, y2, half);
__attribute__((target("avx2,fma")))
static void nq_vecmat2_avx2(const float *x, int n_in, const void *W1, int ld1, int n1, const float *b1,
                            float *__restrict__ y1, const void *W2, int ld2, int n2, const float *b2,
                            float *__restrict__ y2, int prefetch, int half) {
    NQ_VECMAT2_BODY(nq_vecmatw_avx2, nq_nonzeros_avx2, nq_vecmat_nzw_avx2)
}
/* explicit vectors: without -ffast-math the compiler keeps a float reduction
   scalar.  LD8 loads 8 weights at p as floats, SC converts one (float16 rows give
   their float32 copies' bits: the same vectors in the same order, and no FMA
   contraction of the tail, which the compiler vectorises for one and not the
   other). */
#define NQ_DOT_BODY256(LD8, SC) \
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps(); \
    int i = 0; \
    for (; i + 16 <= n; i += 16) { \
        acc0 = _mm256_fmadd_ps(LD8(a + i), _mm256_loadu_ps(b + i), acc0); \
        acc1 = _mm256_fmadd_ps(LD8(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1); \
    } \
    for (; i + 8 <= n; i += 8) \
        acc0 = _mm256_fmadd_ps(LD8(a + i), _mm256_loadu_ps(b + i), acc0); \
    acc0 = _mm256_add_ps(acc0, acc1); \
    __m128 lo = _mm256_castps256_ps128(acc0), hi = _mm256_extractf128_ps(acc0, 1); \
    lo = _mm_add_ps(lo, hi); \
    lo = _mm_hadd_ps(lo, lo); \
    lo = _mm_hadd_ps(lo, lo); \
    float s = _mm_cvtss_f32(lo); \
    for (; i < n; i++) s += SC(a[i]) * b[i]; \
    return s;
#define NQ_SC_F32(x) (x)
#define NQ_SC_F16(x) _cvtsh_ss(x)
__attribute__((target("avx2,fma"), optimize("fp-contract=off")))
static float nq_dot_avx2(const float *a, const float *b, int n) { NQ_DOT_BODY256(NQ_LD8_F32, NQ_SC_F32) }
__attribute__((target("avx2,fma,f16c"), optimize("fp-contract=off")))
static float nq_doth_avx2(const uint16_t *a, const float *b, int n) { NQ_DOT_BODY256(NQ_LD8_F16, NQ_SC_F16) }
__attribute__((target("avx2,fma")))
static void nq_rowdots_avx2(const float *W, int ldw, const float *h, int rows, int n,
                            const float *bias, float *out) {
    for (int i = 0; i < rows; i++) out[i] = bias[i] + nq_dot_avx2(W + (long)i * ldw, h, n);
}
__attribute__((target("avx2,fma,f16c")))
static void nq_rowdotsh_avx2(const uint16_t *W, int ldw, const float *h, int rows, int n,
                             const float *bias, float *out) {
    for (int i = 0; i < rows; i++) out[i] = bias[i] + nq_doth_avx2(W + (long)i * ldw, h, n);
}
/* the plain float32 loops' work over float16 rows, eight at a time (a multiply,
   then an add, as the plain loop rounds them) */
__attribute__((target("avx2,f16c"), optimize("fp-contract=off")))
static void nq_diag_acch_f16c(float *a, const float *c, const uint16_t *row, int d) {
    int i = 0;
    for (; i + 8 <= d; i += 8)
        _mm256_storeu_ps(a + i, _mm256_add_ps(_mm256_loadu_ps(a + i),
                                              _mm256_mul_ps(_mm256_loadu_ps(c + i), NQ_LD8_F16(row + i))));
    for (; i < d; i++) a[i] += c[i] * _cvtsh_ss(row[i]);
}
__attribute__((target("avx2,f16c")))
static void nq_copyh_f16c(float *dst, const uint16_t *row, int d) {
    int i = 0;
    for (; i + 8 <= d; i += 8) _mm256_storeu_ps(dst + i, NQ_LD8_F16(row + i));
    for (; i < d; i++) dst[i] = _cvtsh_ss(row[i]);
}
static int nq_has_f16c(void) { __builtin_cpu_init(); return __builtin_cpu_supports("f16c"); }

/* AVX-512.  vecmat keeps a block of up to 16 output vectors (256 floats) in
   registers while it streams the rows of W for the nonzero inputs, which it
   gathers first (nq_nonzeros). */
#define NQ_TAIL(n, j) ((__mmask16)((n) - (j) >= 16 ? 0xFFFF : ((1u << ((n) - (j))) - 1)))
/* Indices (first + i) and values of the nonzero x[i], i < n: a ReLU layer's zeros
   follow no pattern a branch predictor could learn.  Compressed in registers,
   then plain stores (a compress straight to memory is microcoded, very slow, on
   AMD Zen 4); each store writes 16 entries, so idx and val need n + 16 room. */
__attribute__((target("avx512f,fma")))
static inline int nq_nonzeros_avx512(const float *x, int n, int first, int *idx, float *val) {
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    int nnz = 0;
    for (int i = 0; i < n; i += 16) {
        const __mmask16 m = NQ_TAIL(n, i);
        const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        const __mmask16 nz = _mm512_mask_cmp_ps_mask(m, v, _mm512_setzero_ps(), _CMP_NEQ_UQ);
        _mm512_storeu_si512(idx + nnz, _mm512_maskz_compress_epi32(nz, _mm512_add_epi32(_mm512_set1_epi32(first + i), lane)));
        _mm512_storeu_ps(val + nnz, _mm512_maskz_compress_ps(nz, v));
        nnz += __builtin_popcount((unsigned)nz);
    }
    return nnz;
}
/* 16 float16 weights at p as floats; a row's last n < 16 through a zeroed buffer
   (the values a masked float32 load would give) */
#define NQ_LDH(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))
__attribute__((target("avx512f")))
static inline __m512 nq_ldh_part(const uint16_t *p, int n) {
    uint16_t buf[16] = {0};
    memcpy(buf, p, (n < 16 ? n : 16) * sizeof(uint16_t));
    return NQ_LDH(buf);
}
/* Weight loads of the row kernels: the 16 entries at p of a row with n left, as
   floats (m: the mask of those within the row) */
#define NQ_LDW_F32(p, n, m) _mm512_maskz_loadu_ps(m, p)
#define NQ_LDW_F16(p, n, m) ((n) >= 16 ? NQ_LDH(p) : nq_ldh_part(p, n))
/* only the last of the NV vectors can be partial: one mask register, not NV
   (NV masks spilled to the stack and were reloaded for every row).  WT is the
   weights' element type, LD one of the NQ_LDW loads (rows padded to 16 entries). */
#define NQ_VM_CASE(NV, WT, LD) case NV: { \
        __m512 acc[NV]; \
        const __mmask16 mt = NQ_TAIL(n_out, j0 + 16 * (NV - 1)); \
        _Pragma("GCC unroll 16") for (int k = 0; k < NV - 1; k++) \
            acc[k] = _mm512_loadu_ps(src + j0 + 16 * k); \
        acc[NV - 1] = _mm512_maskz_loadu_ps(mt, src + j0 + 16 * (NV - 1)); \
        for (int t = 0; t < nnz; t++) { \
            const WT *row = (const WT *)W + (long)idx[t] * ldw + j0; \
            const __m512 xv = _mm512_set1_ps(val[t]); \
            _Pragma("GCC unroll 16") for (int k = 0; k < NV - 1; k++) \
                acc[k] = _mm512_fmadd_ps(xv, LD(row + 16 * k, 16, 0xFFFF), acc[k]); \
            acc[NV - 1] = _mm512_fmadd_ps(xv, LD(row + 16 * (NV - 1), 16, mt), acc[NV - 1]); } \
        _Pragma("GCC unroll 16") for (int k = 0; k < NV - 1; k++) \
            _mm512_storeu_ps(y + j0 + 16 * k, acc[k]); \
        _mm512_mask_storeu_ps(y + j0 + 16 * (NV - 1), mt, acc[NV - 1]); \
        break; }
#define NQ_VM_BODY(WT, LD) \
    for (int j0 = 0; j0 < n_out; j0 += 256) { \
        const int nv = (n_out - j0 + 15) / 16 < 16 ? (n_out - j0 + 15) / 16 : 16; \
        switch (nv) { \
            NQ_VM_CASE(1, WT, LD) NQ_VM_CASE(2, WT, LD) NQ_VM_CASE(3, WT, LD) NQ_VM_CASE(4, WT, LD) \
            NQ_VM_CASE(5, WT, LD) NQ_VM_CASE(6, WT, LD) NQ_VM_CASE(7, WT, LD) NQ_VM_CASE(8, WT, LD) \
            NQ_VM_CASE(9, WT, LD) NQ_VM_CASE(10, WT, LD) NQ_VM_CASE(11, WT, LD) NQ_VM_CASE(12, WT, LD) \
            NQ_VM_CASE(13, WT, LD) NQ_VM_CASE(14, WT, LD) NQ_VM_CASE(15, WT, LD) NQ_VM_CASE(16, WT, LD) \
        } \
    }
/* y = src + the rows idx[0:nnz] of W scaled by val (src: the bias, or y itself);
   W float32, or (half) float16 with rows padded to 16 entries.  A float16 model's
   weights are exactly float16, so its products convert each weight in the register
   and give the float32 kernel's every bit from half the bytes: a class query's
   products are bound by how fast the weights arrive in L1. */
__attribute__((target("avx512f,fma")))
static void nq_vecmat_nz_avx512(const int *idx, const float *val, int nnz, const void *W, int ldw,
                                int n_out, const float *src, float *__restrict__ y, int half) {
    if (half) { NQ_VM_BODY(uint16_t, NQ_LDW_F16) }
    else { NQ_VM_BODY(float, NQ_LDW_F32) }
}
__attribute__((target("avx512f,fma")))
static void nq_vecmatw_avx512(const float *x, int n_in, const void *W, int ldw, int n_out,
                              const float *b, float *__restrict__ y, int half) {
    NQ_VECMATW_BODY(nq_nonzeros_avx512, nq_vecmat_nz_avx512)
}
__attribute__((target("avx512f,fma")))
static void nq_vecmat_avx512(const float *x, int n_in, const float *W, int ldw, int n_out,
                             const float *b, float *__restrict__ y) {
    nq_vecmatw_avx512(x, n_in, W, ldw, n_out, b, y, 0);
}
__attribute__((target("avx512f,fma")))
static void nq_vecmat2_avx512(const float *x, int n_in, const void *W1, int ld1, int n1, const float *b1,
                              float *__restrict__ y1, const void *W2, int ld2, int n2, const float *b2,
                              float *__restrict__ y2, int prefetch, int half) {
    NQ_VECMAT2_BODY(nq_vecmatw_avx512, nq_nonzeros_avx512, nq_vecmat_nz_avx512)
}
__attribute__((target("avx512f,fma")))
static inline __m512 nq_exp512(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x), p;
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    NQ_EXP_POLY(16, _mm512_fmadd_ps, _mm512_mul_ps, _mm512_add_ps, _mm512_set1_ps, r, p)
    return _mm512_scalef_ps(p, n);
}
__attribute__((target("avx512f,fma")))
static double nq_logsumexp_avx512(const float *s, int n) {
    if (n <= 0) return -INFINITY;
    __m512 vm = _mm512_set1_ps(-INFINITY);
    for (int i = 0; i < n; i += 16)
        vm = _mm512_mask_max_ps(vm, NQ_TAIL(n, i), vm, _mm512_maskz_loadu_ps(NQ_TAIL(n, i), s + i));
    const float mx = _mm512_reduce_max_ps(vm);
    if (mx == -INFINITY) return -INFINITY;
    const __m512 vmx = _mm512_set1_ps(mx);
    __m512 acc = _mm512_setzero_ps();
    for (int i = 0; i < n; i += 16) {
        const __mmask16 m = NQ_TAIL(n, i);
        acc = _mm512_mask_add_ps(acc, m, acc, nq_exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, s + i), vmx)));
    }
    return mx + log((double)_mm512_reduce_add_ps(acc));
}
__attribute__((target("avx512f,fma")))
static void nq_expshift_avx512(const float *s, int n, float mx, float *out) {
    const __m512 vmx = _mm512_set1_ps(mx);
    for (int i = 0; i < n; i += 16) {
        const __mmask16 m = NQ_TAIL(n, i);
        _mm512_mask_storeu_ps(out + i, m, nq_exp512(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, s + i), vmx)));
    }
}
__attribute__((target("avx512f,fma")))
static void nq_addrows_avx512(const float *b, const float *const *rows, int m, int n, int relu,
                              float *out) {
    const __m512 zero = _mm512_setzero_ps();
    for (int j = 0; j < n; j += 16) {
        const __mmask16 mk = NQ_TAIL(n, j);
        __m512 a = _mm512_maskz_loadu_ps(mk, b + j);
        for (int k = 0; k < m; k++) a = _mm512_add_ps(a, _mm512_maskz_loadu_ps(mk, rows[k] + j));
        if (relu) a = _mm512_max_ps(a, zero);
        _mm512_mask_storeu_ps(out + j, mk, a);
    }
}
#define NQ_DOT_BODY512(LDW) \
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps(); \
    int i = 0; \
    for (; i + 32 <= n; i += 32) { \
        acc0 = _mm512_fmadd_ps(LDW(a + i, 32, 0xFFFF), _mm512_loadu_ps(b + i), acc0); \
        acc1 = _mm512_fmadd_ps(LDW(a + i + 16, 16, 0xFFFF), _mm512_loadu_ps(b + i + 16), acc1); \
    } \
    for (; i < n; i += 16) { \
        const __mmask16 m = NQ_TAIL(n, i); \
        acc0 = _mm512_fmadd_ps(LDW(a + i, n - i, m), _mm512_maskz_loadu_ps(m, b + i), acc0); \
    } \
    return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
__attribute__((target("avx512f,fma")))
static float nq_dot_avx512(const float *a, const float *b, int n) { NQ_DOT_BODY512(NQ_LDW_F32) }
/* nq_dot_avx512 over a float16 row a, vector for vector: a float16 model's weights
   give the bits of their float32 copies */
__attribute__((target("avx512f,fma")))
static float nq_doth_avx512(const uint16_t *a, const float *b, int n) { NQ_DOT_BODY512(NQ_LDW_F16) }
/* a[0:d] += c[0:d] * row[0:d] (a diagonal context's term; a multiply, then an add,
   as the plain loop rounds them), row float32 or (half) float16 */
__attribute__((target("avx512f"), optimize("fp-contract=off")))
static void nq_diag_acc_avx512(float *a, const float *c, const void *row, int d, int half) {
    for (int i = 0; i < d; i += 16) {
        const __mmask16 m = NQ_TAIL(d, i);
        const __m512 w = half ? NQ_LDW_F16((const uint16_t *)row + i, d - i, m)
                              : NQ_LDW_F32((const float *)row + i, d - i, m);
        const __m512 x = _mm512_add_ps(_mm512_maskz_loadu_ps(m, a + i),
                                       _mm512_mul_ps(_mm512_maskz_loadu_ps(m, c + i), w));
        _mm512_mask_storeu_ps(a + i, m, x);
    }
}
/* dst[0:d] = row[0:d] as floats */
__attribute__((target("avx512f")))
static void nq_copyh_avx512(float *dst, const uint16_t *row, int d) {
    for (int i = 0; i < d; i += 16)
        _mm512_mask_storeu_ps(dst + i, NQ_TAIL(d, i), NQ_LDW_F16(row + i, d - i, 0));
}
/* Eight rows at a time: eight independent FMA chains, every load of h serves
   eight rows, and the eight sums are reduced together by one transposing hadd
   tree (10% faster than four rows for the 10k-row softmax normaliser).  WT, LDW:
   the weights' type and load (float16 rows give their float32 copies' bits). */
#define NQ_ROWDOTS_BODY512(WT, LDW, DOT) \
    int r = 0; \
    for (; r + 8 <= rows; r += 8) { \
        const WT *w0 = W + (long)r * ldw; \
        __m512 a[8]; \
        for (int k = 0; k < 8; k++) a[k] = _mm512_setzero_ps(); \
        for (int i = 0; i < n; i += 16) { \
            const __mmask16 m = NQ_TAIL(n, i); \
            const __m512 hv = _mm512_maskz_loadu_ps(m, h + i); \
            for (int k = 0; k < 8; k++) \
                a[k] = _mm512_fmadd_ps(LDW(w0 + (long)k * ldw + i, n - i, m), hv, a[k]); \
        } \
        __m256 y[8]; \
        for (int k = 0; k < 8; k++) \
            y[k] = _mm256_add_ps(_mm512_castps512_ps256(a[k]), \
                                 _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a[k]), 1))); \
        const __m256 h0 = _mm256_hadd_ps(_mm256_hadd_ps(y[0], y[1]), _mm256_hadd_ps(y[2], y[3])); \
        const __m256 h1 = _mm256_hadd_ps(_mm256_hadd_ps(y[4], y[5]), _mm256_hadd_ps(y[6], y[7])); \
        /* h0 = [rows 0-3 over lanes 0-3 | rows 0-3 over lanes 4-7]; the same for h1 */ \
        const __m256 sums = _mm256_add_ps(_mm256_permute2f128_ps(h0, h1, 0x20), \
                                          _mm256_permute2f128_ps(h0, h1, 0x31)); \
        _mm256_storeu_ps(out + r, _mm256_add_ps(sums, _mm256_loadu_ps(bias + r))); \
    } \
    for (; r < rows; r++) out[r] = bias[r] + DOT(W + (long)r * ldw, h, n);
__attribute__((target("avx512f,fma")))
static void nq_rowdots_avx512(const float *W, int ldw, const float *h, int rows, int n,
                              const float *bias, float *out) { NQ_ROWDOTS_BODY512(float, NQ_LDW_F32, nq_dot_avx512) }
__attribute__((target("avx512f,fma")))
static void nq_rowdotsh_avx512(const uint16_t *W, int ldw, const float *h, int rows, int n,
                               const float *bias, float *out) { NQ_ROWDOTS_BODY512(uint16_t, NQ_LDW_F16, nq_doth_avx512) }
/* Exact softmax log-normalisers of n rows of H (r wide, rows ldh apart), for the
   batch API.  The output matrix comes packed as panels of NQ_PW words: panel p
   holds the (r x NQ_PW) block of transposed weights, so a row's logits for the
   panel are the sum of the panel rows of its nonzero hidden units -- a ReLU
   layer's zeros are skipped, where sgemm multiplies them all.  Panels are the
   outer loop, so one panel (r x 256 bytes) stays in L1/L2 while every row passes
   through it; each row keeps a running maximum and a vector of exp sums (online
   log-sum-exp).  Scratch: idx, val (n x (r + 16), see nq_nonzeros), cnt, mx (n),
   sv (n x 16). */
#define NQ_PW 64
__attribute__((target("avx512f,fma")))
static void nq_panel_logz_avx512(const float *H, int ldh, int n, int r, const float *P,
                                 const float *pb, int V, int *idx, float *val, int *cnt,
                                 float *mx, float *sv, double *logz) {
    for (int b = 0; b < n; b++) {
        cnt[b] = nq_nonzeros_avx512(H + (long)b * ldh, r, 0, idx + (long)b * (r + 16), val + (long)b * (r + 16));
        mx[b] = -INFINITY;
        _mm512_storeu_ps(sv + (long)b * 16, _mm512_setzero_ps());
    }
    const int np = (V + NQ_PW - 1) / NQ_PW;
    for (int p = 0; p < np; p++) {
        const float *Pp = P + (long)p * r * NQ_PW;
        const float *bp = pb + (long)p * NQ_PW;
        const int j0 = p * NQ_PW;
        const __mmask16 k0 = NQ_TAIL(V, j0), k1 = j0 + 16 < V ? NQ_TAIL(V, j0 + 16) : 0,
                        k2 = j0 + 32 < V ? NQ_TAIL(V, j0 + 32) : 0, k3 = j0 + 48 < V ? NQ_TAIL(V, j0 + 48) : 0;
        for (int b = 0; b < n; b++) {
            const int *ix = idx + (long)b * (r + 16);
            const float *vx = val + (long)b * (r + 16);
            const int c = cnt[b];
            /* two interleaved sums over the units: eight independent FMA chains */
            __m512 a0 = _mm512_loadu_ps(bp), a1 = _mm512_loadu_ps(bp + 16),
                   a2 = _mm512_loadu_ps(bp + 32), a3 = _mm512_loadu_ps(bp + 48);
            __m512 e0 = _mm512_setzero_ps(), e1 = e0, e2 = e0, e3 = e0;
            int t = 0;
            for (; t + 2 <= c; t += 2) {
                const float *w0 = Pp + (long)ix[t] * NQ_PW, *w1 = Pp + (long)ix[t + 1] * NQ_PW;
                const __m512 x0 = _mm512_set1_ps(vx[t]), x1 = _mm512_set1_ps(vx[t + 1]);
                a0 = _mm512_fmadd_ps(x0, _mm512_loadu_ps(w0), a0);
                a1 = _mm512_fmadd_ps(x0, _mm512_loadu_ps(w0 + 16), a1);
                a2 = _mm512_fmadd_ps(x0, _mm512_loadu_ps(w0 + 32), a2);
                a3 = _mm512_fmadd_ps(x0, _mm512_loadu_ps(w0 + 48), a3);
                e0 = _mm512_fmadd_ps(x1, _mm512_loadu_ps(w1), e0);
                e1 = _mm512_fmadd_ps(x1, _mm512_loadu_ps(w1 + 16), e1);
                e2 = _mm512_fmadd_ps(x1, _mm512_loadu_ps(w1 + 32), e2);
                e3 = _mm512_fmadd_ps(x1, _mm512_loadu_ps(w1 + 48), e3);
            }
            if (t < c) {
                const float *w0 = Pp + (long)ix[t] * NQ_PW;
                const __m512 x0 = _mm512_set1_ps(vx[t]);
                a0 = _mm512_fmadd_ps(x0, _mm512_loadu_ps(w0), a0);
                a1 = _mm512_fmadd_ps(x0, _mm512_loadu_ps(w0 + 16), a1);
                a2 = _mm512_fmadd_ps(x0, _mm512_loadu_ps(w0 + 32), a2);
                a3 = _mm512_fmadd_ps(x0, _mm512_loadu_ps(w0 + 48), a3);
            }
            a0 = _mm512_add_ps(a0, e0); a1 = _mm512_add_ps(a1, e1);
            a2 = _mm512_add_ps(a2, e2); a3 = _mm512_add_ps(a3, e3);
            /* the last panel's lanes past V are masked out of max and sum */
            const __m512 ninf = _mm512_set1_ps(-INFINITY);
            __m512 vm = _mm512_mask_max_ps(ninf, k0, a0, a0);
            vm = _mm512_mask_max_ps(vm, k1, vm, a1);
            vm = _mm512_mask_max_ps(vm, k2, vm, a2);
            vm = _mm512_mask_max_ps(vm, k3, vm, a3);
            const float cm = _mm512_reduce_max_ps(vm);
            float M = mx[b];
            __m512 S = _mm512_loadu_ps(sv + (long)b * 16);
            if (cm > M) {
                S = _mm512_mul_ps(S, _mm512_set1_ps(expf(M - cm)));
                M = cm;
                mx[b] = M;
            }
            const __m512 vM = _mm512_set1_ps(M);
            S = _mm512_mask_add_ps(S, k0, S, nq_exp512(_mm512_sub_ps(a0, vM)));
            S = _mm512_mask_add_ps(S, k1, S, nq_exp512(_mm512_sub_ps(a1, vM)));
            S = _mm512_mask_add_ps(S, k2, S, nq_exp512(_mm512_sub_ps(a2, vM)));
            S = _mm512_mask_add_ps(S, k3, S, nq_exp512(_mm512_sub_ps(a3, vM)));
            _mm512_storeu_ps(sv + (long)b * 16, S);
        }
    }
    for (int b = 0; b < n; b++)
        logz[b] = mx[b] + log((double)_mm512_reduce_add_ps(_mm512_loadu_ps(sv + (long)b * 16)));
}
static int nq_simd_level(void) {
    static int cached = -1;
    if (cached < 0) {
        __builtin_cpu_init();
        cached = __builtin_cpu_supports("avx512f") ? 3
               : (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) ? 2 : 0;
        const char *env = getenv("NPLM_SIMD");    /* "avx2" or "none": test the other paths */
        if (env && !strcmp(env, "avx2") && cached > 2) cached = 2;
        if (env && !strcmp(env, "none")) cached = 0;
    }
    return cached;
}
#else
#define nq_vecmat_avx2 nq_vecmat_plain
#define nq_dot_avx2 nq_dot_plain
#define nq_rowdots_avx2 nq_rowdots_plain
#define nq_vecmat_avx512 nq_vecmat_plain
#define nq_vecmat2_avx512 nq_vecmat2_twice
#define nq_vecmat2_avx2 nq_vecmat2_twice
static void nq_init_pack8(void) {}
static void nq_vecmatw_avx2(const float *x, int n_in, const void *W, int ldw, int n_out,
                            const float *b, float *y, int half) { abort(); }   /* level 2 only */
/* float16 weights are read only where AVX2 or AVX-512 reads them */
static float nq_doth_avx512(const uint16_t *a, const float *b, int n) { abort(); }
static float nq_doth_avx2(const uint16_t *a, const float *b, int n) { abort(); }
static void nq_rowdotsh_avx2(const uint16_t *W, int ldw, const float *h, int rows, int n,
                             const float *bias, float *out) { abort(); }
static void nq_diag_acch_f16c(float *a, const float *c, const uint16_t *row, int d) { abort(); }
static void nq_copyh_f16c(float *dst, const uint16_t *row, int d) { abort(); }
static int nq_has_f16c(void) { return 0; }
static void nq_rowdotsh_avx512(const uint16_t *W, int ldw, const float *h, int rows, int n,
                               const float *bias, float *out) { abort(); }
static void nq_diag_acc_avx512(float *a, const float *c, const void *row, int d, int half) { abort(); }
static void nq_copyh_avx512(float *dst, const uint16_t *row, int d) { abort(); }
static void nq_vecmatw_avx512(const float *x, int n_in, const void *W, int ldw, int n_out,
                              const float *b, float *y, int half) { abort(); }   /* level 3 only */
#define nq_dot_avx512 nq_dot_plain
#define nq_rowdots_avx512 nq_rowdots_plain
#define nq_logsumexp_avx2 nq_logsumexp_plain
#define nq_addrows_avx512 nq_addrows_plain
#define nq_logsumexp_avx512 nq_logsumexp_plain
#define nq_expshift_avx512 nq_expshift_plain
static int nq_simd_level(void) { return 0; }
#define NQ_PW 64
static void nq_panel_logz_avx512(const float *H, int ldh, int n, int r, const float *P,
                                 const float *pb, int V, int *idx, float *val, int *cnt,
                                 float *mx, float *sv, double *logz) { abort(); }   /* level 3 only */
#endif
static void (*nq_vecmat_impl)(const float *, int, const float *, int, int, const float *, float *) = 0;
static void nq_vecmat2_twice(const float *x, int n_in, const void *W1, int ld1, int n1, const float *b1,
                             float *y1, const void *W2, int ld2, int n2, const float *b2, float *y2,
                             int prefetch, int half) {
    if (half) abort();      /* float16 copies exist only where AVX2 or AVX-512 reads them */
    nq_vecmat_impl(x, n_in, (const float *)W1, ld1, n1, b1, y1);
    nq_vecmat_impl(x, n_in, (const float *)W2, ld2, n2, b2, y2);
}
static void (*nq_vecmat2_impl)(const float *, int, const void *, int, int, const float *, float *,
                               const void *, int, int, const float *, float *, int, int) = 0;
static float (*nq_dot_impl)(const float *, const float *, int) = 0;
static void (*nq_rowdots_impl)(const float *, int, const float *, int, int, const float *, float *) = 0;
static double (*nq_logsumexp_impl)(const float *, int) = 0;
static void (*nq_expshift_impl)(const float *, int, float, float *) = 0;
static void (*nq_addrows_impl)(const float *, const float *const *, int, int, int, float *) = 0;
static void nq_init_simd(void) {
    int level = nq_simd_level();
    nq_addrows_impl = level == 3 ? nq_addrows_avx512 : nq_addrows_plain;
    nq_logsumexp_impl = level == 3 ? nq_logsumexp_avx512 : level == 2 ? nq_logsumexp_avx2 : nq_logsumexp_plain;
    nq_expshift_impl = level == 3 ? nq_expshift_avx512 : nq_expshift_plain;
    nq_vecmat_impl = level == 3 ? nq_vecmat_avx512 : level == 2 ? nq_vecmat_avx2 : nq_vecmat_plain;
    nq_vecmat2_impl = level == 3 ? nq_vecmat2_avx512 : level == 2 ? nq_vecmat2_avx2 : nq_vecmat2_twice;
    nq_init_pack8();
    nq_dot_impl = level == 3 ? nq_dot_avx512 : level == 2 ? nq_dot_avx2 : nq_dot_plain;
    nq_rowdots_impl = level == 3 ? nq_rowdots_avx512 : level == 2 ? nq_rowdots_avx2 : nq_rowdots_plain;
}
static inline void nq_vecmat(const float *x, int n_in, const float *W, int ldw, int n_out,
                             const float *b, float *y) { nq_vecmat_impl(x, n_in, W, ldw, n_out, b, y); }
/* the class products, over float32 or (half, AVX2 with F16C or AVX-512) float16 weights */
static inline void nq_vecmat2(const float *x, int n_in, const void *W1, int ld1, int n1, const float *b1,
                              float *y1, const void *W2, int ld2, int n2, const float *b2, float *y2,
                              int prefetch, int half) {
    nq_vecmat2_impl(x, n_in, W1, ld1, n1, b1, y1, W2, ld2, n2, b2, y2, prefetch, half);
}
static inline void nq_vecmatw(const float *x, int n_in, const void *W, int ldw, int n_out,
                              const float *b, float *y, int half) {
    if (half && nq_simd_level() == 3) nq_vecmatw_avx512(x, n_in, W, ldw, n_out, b, y, 1);
    else if (half) nq_vecmatw_avx2(x, n_in, W, ldw, n_out, b, y, 1);
    else nq_vecmat_impl(x, n_in, (const float *)W, ldw, n_out, b, y);
}
static inline float nq_dot(const float *a, const float *b, int n) { return nq_dot_impl(a, b, n); }
/* weight-row kernels over float32 or (half, AVX-512 only) float16 rows */
static inline float nq_dotw(const void *a, const float *b, int n, int half) {
    if (!half) return nq_dot_impl((const float *)a, b, n);
    return nq_simd_level() == 3 ? nq_doth_avx512((const uint16_t *)a, b, n) : nq_doth_avx2((const uint16_t *)a, b, n);
}
static inline void nq_rowdotsw(const void *W, int ldw, const float *h, int rows, int n, const float *bias,
                               float *out, int half) {
    if (!half) nq_rowdots_impl((const float *)W, ldw, h, rows, n, bias, out);
    else if (nq_simd_level() == 3) nq_rowdotsh_avx512((const uint16_t *)W, ldw, h, rows, n, bias, out);
    else nq_rowdotsh_avx2((const uint16_t *)W, ldw, h, rows, n, bias, out);
}
static inline void nq_diag_acc(float *a, const float *c, const void *row, int d, int half) {
    if (nq_simd_level() == 3) nq_diag_acc_avx512(a, c, row, d, half);
    else if (half) nq_diag_acch_f16c(a, c, (const uint16_t *)row, d);
    else for (int i = 0; i < d; i++) a[i] += c[i] * ((const float *)row)[i];
}
static inline void nq_copyw(float *dst, const void *row, int d, int half) {
    if (!half) memcpy(dst, row, d * sizeof(float));
    else if (nq_simd_level() == 3) nq_copyh_avx512(dst, (const uint16_t *)row, d);
    else nq_copyh_f16c(dst, (const uint16_t *)row, d);
}
static inline double nq_logsumexp(const float *s, int n) { return nq_logsumexp_impl(s, n); }
static inline void nq_expshift(const float *s, int n, float mx, float *out) { nq_expshift_impl(s, n, mx, out); }
static inline void nq_addrows(const float *b, const float *const *rows, int m, int n, int relu,
                              float *out) { nq_addrows_impl(b, rows, m, n, relu, out); }
static inline void nq_rowdots(const float *W, int ldw, const float *h, int rows, int n, const float *bias,
                              float *out) { nq_rowdots_impl(W, ldw, h, rows, n, bias, out); }
#endif
