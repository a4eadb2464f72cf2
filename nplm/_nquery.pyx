# Neural n-gram models behind the LMCore protocol: the kenlm API (ModelBase) scores
# them exactly like back-off models.
#
# The network (nplm/neural.py): x_j = emb[c_j] for the n-1 context words (oldest
# first, <null>-padded), a0 = f(sum_j C_j x_j + b0), further dense layers
# a_l = f(a_{l-1} W_l + b_l), then a softmax, class-factored or tree-factored output
# over h = a_last.  Row-major arrays throughout; BLAS sees them transposed.
#
# Speed: the first layer of a full-context net is precomputed per (position, word)
# (Devlin et al. 2014): T[j, w] = emb[w] C_j, so a0 is m row additions.  Single
# queries (BaseScore, score of one sentence) go through a bounded, direct-mapped
# cache of context -> hidden state and log-normaliser; batches of sentences go
# through sgemm in blocks.
cimport cython
from libc.math cimport exp, log, log1p, tanh, INFINITY, NAN, isnan
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdlib cimport malloc, free
from libc.string cimport memcpy, memset
from scipy.linalg.cython_blas cimport sgemm, sgemv, sdot

cdef extern from "<stdlib.h>" nogil:
    void *aligned_alloc(size_t alignment, size_t size)

from nplm._kernels cimport LMCore, NState, Ret, WordId, MAX_ORDER

import numpy as np

from nplm.memory import l3_cache_bytes
cimport numpy as cnp

cnp.import_array()

cdef extern from "<pthread.h>" nogil:
    ctypedef struct pthread_mutex_t:
        pass
    int pthread_mutex_init(pthread_mutex_t *, void *)
    int pthread_mutex_lock(pthread_mutex_t *)
    int pthread_mutex_unlock(pthread_mutex_t *)
    int pthread_mutex_destroy(pthread_mutex_t *)

cdef extern from *:
    """
    #include <stdint.h>
    #include <stdlib.h>
    #include <string.h>
    #include <math.h>
    static inline uint64_t nq_mix(uint64_t h) {
        h ^= h >> 32; h *= 0xd6e8feb86659fd93ULL;
        h ^= h >> 32; h *= 0xd6e8feb86659fd93ULL;
        h ^= h >> 32;
        return h;
    }
    static inline uint64_t nq_fastrange(uint64_t h, uint64_t n) {
        return (uint64_t)(((__uint128_t)h * n) >> 64);
    }
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
    """
    uint64_t nq_mix(uint64_t h) noexcept nogil
    uint64_t nq_fastrange(uint64_t h, uint64_t n) noexcept nogil
    void nq_vecmat(const float *x, int n_in, const float *W, int ldw, int n_out, const float *b, float *y) noexcept nogil
    void nq_vecmat2(const float *x, int n_in, const void *W1, int ld1, int n1, const float *b1, float *y1,
                    const void *W2, int ld2, int n2, const float *b2, float *y2, int prefetch, int half) noexcept nogil
    void nq_vecmatw(const float *x, int n_in, const void *W, int ldw, int n_out, const float *b, float *y,
                    int half) noexcept nogil
    float nq_dot(const float *a, const float *b, int n) noexcept nogil
    float nq_dotw(const void *a, const float *b, int n, int half) noexcept nogil
    void nq_rowdotsw(const void *W, int ldw, const float *h, int rows, int n, const float *bias, float *out,
                     int half) noexcept nogil
    void nq_diag_acc(float *a, const float *c, const void *row, int d, int half) noexcept nogil
    void nq_copyw(float *dst, const void *row, int d, int half) noexcept nogil
    void nq_rowdots(const float *W, int ldw, const float *h, int rows, int n, const float *bias, float *out) noexcept nogil
    double nq_logsumexp(const float *s, int n) noexcept nogil
    void nq_expshift(const float *s, int n, float mx, float *out) noexcept nogil
    void nq_addrows(const float *b, const float **rows, int m, int n, int relu, float *out) noexcept nogil
    void nq_init_simd() noexcept nogil
    int NQ_PW
    void nq_panel_logz_avx512(const float *H, int ldh, int n, int r, const float *P, const float *pb, int V,
                              int32_t *idx, float *val, int32_t *cnt, float *mx, float *sv, double *logz) noexcept nogil
    void __builtin_prefetch(const void *p, ...) noexcept nogil
    int nq_simd_level() noexcept nogil
    int nq_has_f16c() noexcept nogil

from cython.parallel cimport prange
cimport openmp
from nplm._netdefs cimport (CTX_FULL, CTX_DIAGONAL, ACT_RELU, ACT_TANH, ACT_IDENTITY,
                            OUT_SOFTMAX, OUT_CLASS, OUT_TREE)

cdef enum:
    # Normalisation modes.
    MODE_EXACT = 0          # full softmax / exact through class or tree factorisation
    MODE_UNNORMALIZED = 1   # self-normalised score (log-normaliser taken as 0)
    MODE_FALLBACK = 2       # stored normalisers of the longest stored context
    NULL_ID = 3             # <null>: padding of context positions with no word
    BOS_ID = 1
    EOS_ID = 2

nq_init_simd()
SIMD = {3: "avx512", 2: "avx2+fma"}.get(nq_simd_level(), "x86-64")
# whether the CPU converts float16 in hardware (AVX2 kernels read float16 weights then)
F16C = bool(nq_has_f16c())
# whether the kernels chosen read float16 weights: AVX-512, or AVX2 with F16C
READS_FLOAT16 = nq_simd_level() == 3 or (nq_simd_level() == 2 and F16C)

MODES = {"exact": MODE_EXACT, "unnormalized": MODE_UNNORMALIZED, "fallback": MODE_FALLBACK}
cdef double LOG10E = 0.43429448190325176


# Class-mode copies of a float16 model's weights in float16, and its embedding and
# output matrices kept float16 (tests turn these off to compare the kernels bit for bit).
HALF_COPIES = True
HALF_WEIGHTS = True
HALF_PARAMS = ("emb", "out_w", "cls_w")


def omp_threads(int n):
    """Set the OpenMP thread count of the batch kernels' parallel regions started
    from the calling thread (an ICV of that thread alone, so concurrent callers do
    not interfere); returns the previous count."""
    if n < 1:
        raise ValueError(f"threads must be >= 1, not {n}")
    cdef int old = openmp.omp_get_max_threads()
    openmp.omp_set_num_threads(n)
    return old


def _exactly_float16(a):
    """Whether every value of the array a (float16 or float32) is a float16 value."""
    if a.dtype == np.float16:
        return True
    flat = a.reshape(-1)
    return all(np.array_equal(part.astype(np.float16).astype(np.float32), part)
               for part in (flat[:4096], flat[4096:]))


def context_key(ctx):
    """Hash of a context (sequence of ids, oldest first) as stored in fallback tables."""
    cdef const int32_t[::1] c = np.ascontiguousarray(ctx, dtype=np.int32)
    return _ctx_hash(&c[0], c.shape[0]) if c.shape[0] else _ctx_hash(NULL, 0)


cdef inline uint64_t _ctx_hash(const int32_t *ctx, int n) noexcept nogil:
    cdef uint64_t h = 0x2545f4914f6cdd1dULL ^ <uint64_t>n
    cdef int i
    for i in range(n):
        h = nq_mix(h ^ ((<uint64_t><uint32_t>ctx[i] + 1) * 0x9e3779b97f4a7c15ULL))
    return h if h else 1


cdef inline float _act(float x, int act) noexcept nogil:
    if act == ACT_RELU:
        return x if x > 0 else 0
    if act == ACT_TANH:
        return tanh(x)
    return x


cdef inline double _log_sigmoid(double x) noexcept nogil:
    if x >= 0:
        return -log1p(exp(-x))
    return x - log1p(exp(x))


cdef inline double _logsumexp(const float *s, int n) noexcept nogil:
    return nq_logsumexp(s, n)


cdef int _draw(const float *s, int n, double u, float *tmp) noexcept nogil:
    """Index i drawn with probability exp(s[i]) / sum exp(s), u uniform in [0, 1):
    the inverse of the cumulative sum (in double) of exp(s - max)."""
    cdef float mx = s[0]
    cdef double total = 0, acc = 0, target
    cdef int i, last = 0
    for i in range(1, n):
        if s[i] > mx:
            mx = s[i]
    nq_expshift(s, n, mx, tmp)
    for i in range(n):
        total += tmp[i]
    target = u * total
    for i in range(n):
        if tmp[i] > 0:
            acc += tmp[i]
            last = i
            if acc > target:
                return i
    return last                 # u * total rounded past the sum: the last possible index


cdef void _by_class(const int32_t *cls, int n, int C, int32_t *st, int32_t *order) noexcept nogil:
    """Counting sort: order[st[k]:st[k+1]] are the indices i < n with cls[i] == k, in
    increasing order (st: C + 2 ints)."""
    cdef int i, k
    memset(st, 0, (C + 2) * sizeof(int32_t))
    for i in range(n):
        st[cls[i] + 2] += 1
    for k in range(C):
        st[k + 2] += st[k + 1]
    for i in range(n):
        order[st[cls[i] + 1]] = i
        st[cls[i] + 1] += 1


cdef inline void _gemm_rm(int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                          float *C, int ldc, bint b_transposed) noexcept nogil:
    """Row-major C[M,N] := A[M,K] op(B) with op(B) = B[K,N] or B[N,K]^T."""
    cdef float one = 1.0, zero = 0.0
    cdef char ta = b'N'
    cdef char tb = b'T' if b_transposed else b'N'
    if M <= 0 or N <= 0 or K <= 0:
        return
    sgemm(&tb, &ta, &N, &M, &K, &one, <float *>B, &ldb, <float *>A, &lda, &zero, C, &ldc)


cdef class NeuralCore(LMCore):
    """A neural n-gram network as an LMCore.  Built by nplm.neural_model."""
    cdef object _keep                    # arrays the pointers below point into
    cdef dict _flat                      # the parameters by name, flattened (float32 or float16)
    cdef public int mode
    cdef int V, m, d, r0, h1, h2, n_dense, r, C, ctx_kind, act, out_kind, max_len
    cdef const void *emb                 # emb, out_w, cls_w: float32, or float16 where
                                         # half_w (a float16 ReLU net on AVX2 or AVX-512)
    cdef const float *ctxw
    cdef const float *b0
    cdef const float *w1
    cdef const float *b1
    cdef const float *w2
    cdef const float *ctxw_p             # the same three with rows padded to 64 bytes
    cdef const float *w1_p
    cdef const float *w2_p
    cdef int ld0, ld1, ld2
    cdef const float *b2
    cdef const void *out_w
    cdef const float *out_b
    cdef const void *cls_w
    cdef bint half_w
    cdef object _w32                     # float32 copies made for BLAS paths (half_w)
    cdef const float *cls_b
    cdef const void *cls_t               # exact class mode: cls_w transposed, (r, ld_cls)
    cdef int ld_cls
    cdef const void *out_t               # and each class's block of out_w transposed,
    cdef const int64_t *out_t_off        # (r, out_t_ld[c]) at entry out_t_off[c] of out_t
    cdef const int32_t *out_t_ld
    cdef bint half_t                     # those copies hold float16 (else float32) entries
    cdef bint pf_blocks                  # prefetch a new context's block rows (see nq_vecmat2)
    cdef const float *sm_panels          # exact softmax normalisers of ReLU nets on AVX-512:
    cdef const float *sm_pbias           # out_w packed as panels (see nq_panel_logz) and
                                         # out_b padded to match; NULL otherwise
    cdef const int32_t *word_class
    cdef const int32_t *class_start
    cdef const int32_t *word_pos
    cdef const int32_t *points
    cdef const signed char *codes
    cdef const int32_t *lengths
    cdef const float *T                  # (m, V, r0) first-layer products, or NULL
    # fallback normaliser tables, order k = 0..m (k context words)
    cdef const uint64_t *fb_keys[MAX_ORDER]
    cdef const float *fb_vals[MAX_ORDER]
    cdef uint64_t fb_buckets[MAX_ORDER]
    cdef bint has_fallback
    # single-query cache: direct-mapped, slot = context hash
    cdef int cache_slots
    # The context cache: one record of `lrec` floats a slot, so that a new context's
    # writes fall on a few adjacent cache lines, not on one line in each of five
    # arrays: its log-normaliser (a double, NaN until computed),
    # then the context (m int32), then at rec_h the hidden state (r floats), and in
    # exact class mode at rec_wz the normaliser inside each class (C floats), valid
    # where the class's bit is set in the wzw words at rec_ok.
    cdef float *cache_rec
    cdef uint8_t *cache_used
    cdef int lrec, rec_ok, rec_h, rec_wz, wzw
    cdef float *cls_scores               # a new context's class scores (C + 16); their
                                         # log-normaliser is kept in the record
    cdef float *scratch                  # forward work for one context
    cdef float *scores                   # (max(V, C)) output scores
    cdef pthread_mutex_t lock
    cdef public long long cache_hits, cache_misses

    def __cinit__(self):
        pthread_mutex_init(&self.lock, NULL)
        self.cache_rec = NULL
        self.cache_used = NULL
        self.cls_scores = NULL
        self.scratch = NULL
        self.scores = NULL
        self.sm_panels = NULL
        self.sm_pbias = NULL

    def __dealloc__(self):
        free(self.cache_rec)
        free(self.cache_used)
        free(self.cls_scores)
        free(self.scratch)
        free(self.scores)
        pthread_mutex_destroy(&self.lock)

    def __init__(self, dict dims, dict params, dict structs, int mode, T=None, fallback=None,
                 int cache_slots=4096):
        """dims: V, m, d, r0, h1, h2, n_dense, r, C, ctx_kind, act, out_kind, max_len.
        params: float32 C-contiguous arrays (see nplm.neural).  fallback: list over
        k = 0..m of (keys uint64, vals float32 natural-log normalisers) or None."""
        cdef int k
        cdef const float[::1] fv
        cdef const int32_t[::1] iv
        cdef const signed char[::1] cv
        cdef const uint64_t[::1] kv
        self.V, self.m, self.d = dims["V"], dims["m"], dims["d"]
        self.r0, self.h1, self.h2 = dims["r0"], dims["h1"], dims["h2"]
        self.n_dense, self.r, self.C = dims["n_dense"], dims["r"], dims["C"]
        self.ctx_kind, self.act, self.out_kind = dims["ctx_kind"], dims["act"], dims["out_kind"]
        self.max_len = dims["max_len"]
        self.order = self.m + 1
        self.bos_id = BOS_ID
        self.eos_id = EOS_ID
        self.mode = mode
        # A float16 model's three big matrices stay float16 (memory-mapped from the file,
        # so only the rows queries touch are resident) where AVX2 (with F16C) or AVX-512
        # reads them, in a ReLU net, whose batches need no dense (BLAS) products but for
        # exact softmax without AVX-512 (a float32 copy is made then: _f32).  Elsewhere
        # they are converted at load.
        self.half_w = (HALF_WEIGHTS and self.act == ACT_RELU
                       and READS_FLOAT16
                       and all(np.asarray(params[n]).dtype == np.float16 or np.asarray(params[n]).size == 0
                               for n in HALF_PARAMS))
        flat = {}
        for name, a in params.items():
            dtype = np.float16 if self.half_w and name in HALF_PARAMS else np.float32
            a = np.ascontiguousarray(a, dtype=dtype).reshape(-1)
            if a.size == 0:
                a = np.zeros(1, dtype)
            flat[name] = a
        self._w32 = {}
        sflat = {}
        for name, a in structs.items():
            a = np.ascontiguousarray(a).reshape(-1)
            if a.size == 0:
                a = np.zeros(1, a.dtype)
            sflat[name] = a
        self._flat = flat
        self._keep = [flat, sflat, T, fallback]
        self.emb = <const void *><Py_ssize_t>flat["emb"].ctypes.data
        fv = flat["ctx"]; self.ctxw = &fv[0]
        fv = flat["b0"]; self.b0 = &fv[0]
        fv = flat["w1"]; self.w1 = &fv[0]
        fv = flat["b1"]; self.b1 = &fv[0]
        fv = flat["w2"]; self.w2 = &fv[0]
        fv = flat["b2"]; self.b2 = &fv[0]
        # One context's dense layers stream whole weight rows: copies with rows padded
        # to 64 bytes keep every vector load inside one cache line (25% faster here).
        # (the context matrix only when no first-layer table replaces it)
        ptr, self.ld0 = self._padded(flat["ctx"], self.m * self.d if self.ctx_kind == CTX_FULL and T is None
                                     else 0, self.r0)
        self.ctxw_p = <const float *><Py_ssize_t>ptr
        ptr, self.ld1 = self._padded(flat["w1"], self.r0 if self.n_dense >= 1 else 0, self.h1)
        self.w1_p = <const float *><Py_ssize_t>ptr
        ptr, self.ld2 = self._padded(flat["w2"], self.h1 if self.n_dense >= 2 else 0, self.h2)
        self.w2_p = <const float *><Py_ssize_t>ptr
        self.out_w = <const void *><Py_ssize_t>flat["out_w"].ctypes.data
        fv = flat["out_b"]; self.out_b = &fv[0]
        self.cls_w = <const void *><Py_ssize_t>flat["cls_w"].ctypes.data
        fv = flat["cls_b"]; self.cls_b = &fv[0]
        if self.out_kind == OUT_CLASS and mode == MODE_EXACT:
            self._transposed_class_blocks(flat["cls_w"], flat["out_w"], sflat["class_start"])
        iv = sflat["word_class"]; self.word_class = &iv[0]
        iv = sflat["class_start"]; self.class_start = &iv[0]
        iv = sflat["word_pos"]; self.word_pos = &iv[0]
        iv = sflat["points"]; self.points = &iv[0]
        cv = sflat["codes"]; self.codes = &cv[0]
        iv = sflat["lengths"]; self.lengths = &iv[0]
        self.T = NULL
        if T is not None:
            fv = T.reshape(-1)
            self.T = &fv[0]
        self.has_fallback = fallback is not None
        if fallback is not None:
            for k in range(self.m + 1):
                keys, vals = fallback[k]
                kv = keys
                fv = vals
                self.fb_keys[k] = &kv[0]
                self.fb_vals[k] = &fv[0]
                self.fb_buckets[k] = kv.shape[0]
        if mode == MODE_FALLBACK and fallback is None:
            raise ValueError("fallback normalisation needs precomputed normaliser tables")
        self.cache_slots = max(cache_slots, 1)
        class_cache = self.out_kind == OUT_CLASS and mode == MODE_EXACT
        self.wzw = (self.C + 63) // 64 if class_cache else 0
        self.rec_ok = (2 + self.m + 1) // 2 * 2         # after the double and the context, 8-aligned
        self.rec_h = (self.rec_ok + 2 * self.wzw + 15) // 16 * 16   # each part whole lines
        self.rec_wz = self.rec_h + (self.r + 15) // 16 * 16
        self.lrec = self.rec_wz + ((self.C + 15) // 16 * 16 if class_cache else 0)
        self.cache_used = <uint8_t *>malloc(self.cache_slots)
        self.cache_rec = <float *>aligned_alloc(64, sizeof(float) * self.cache_slots * self.lrec)
        self.scratch = <float *>malloc(sizeof(float) * self._row_scratch())
        # (also nq_panel_logz's scratch for one row: 2r + 34 entries)
        self.scores = <float *>malloc(sizeof(float) * (max(self.V, self.C, 2 * self.r + 34) + 16))
        if (self.cache_used == NULL or self.cache_rec == NULL or self.scratch == NULL
                or self.scores == NULL):
            raise MemoryError("cannot allocate the neural query cache")
        if (self.out_kind == OUT_SOFTMAX and mode != MODE_UNNORMALIZED and self.act == ACT_RELU
                and nq_simd_level() == 3):
            self._pack_softmax_panels()
        if class_cache:
            # A decoder asks many words after one context: the record keeps the class
            # normaliser and the per-class ones with the hidden state.  (Not the class
            # scores: C floats a slot, written cold and read back, cost a new context
            # more than the dot product that recomputes the one needed.)
            self.cls_scores = <float *>malloc(sizeof(float) * (self.C + 16))
            if self.cls_scores == NULL:
                raise MemoryError("cannot allocate the class-normaliser scratch")
        memset(self.cache_used, 0, self.cache_slots)

    cdef object _aligned_zeros(self, Py_ssize_t n, dtype=np.float32):
        """n zeros (float32, or a dtype of 2 or 4 bytes) on a 64-byte boundary, kept
        alive with the core."""
        cdef int per_line = 64 // np.dtype(dtype).itemsize
        raw = np.zeros(n + per_line, dtype)
        start = (-(raw.ctypes.data // raw.itemsize)) % per_line
        self._keep.append(raw)
        return raw[start:start + n]

    cdef tuple _padded(self, flat, int rows, int cols):
        """(pointer, row stride) of a 64-byte-aligned copy of a (rows, cols) matrix whose
        rows are padded to a multiple of 16 floats; the original when it has no rows."""
        cdef const float[::1] fv
        if rows <= 0 or cols <= 0:
            fv = flat
            return <Py_ssize_t>&fv[0], max(cols, 1)
        ld = (cols + 15) // 16 * 16
        padded = self._aligned_zeros(rows * ld).reshape(rows, ld)
        padded[:, :cols] = np.asarray(flat[:rows * cols]).reshape(rows, cols)
        fv = padded.reshape(-1)
        return <Py_ssize_t>&fv[0], ld

    cdef void _transposed_class_blocks(self, cls_w, out_w, class_start):
        """Transposed copies of the class matrix and of each class's word block, rows
        padded to 16 entries: a new context's normalisers then read only the rows of
        its hidden state's nonzero units (nq_vecmat2), about half of them after a ReLU,
        where row dot products read every weight.  Where both matrices hold float16
        values exactly (a float16 model) and AVX-512 or AVX2 with F16C reads them, the copies are
        float16: the same bits from half the bytes."""
        cdef const int64_t[::1] ov
        cdef const int32_t[::1] lv
        r, C = self.r, self.C
        cls_w, out_w = cls_w.reshape(C, r), out_w.reshape(-1, r)
        # (a float32 model fails on its first values: the check costs it nothing)
        self.half_t = HALF_COPIES and READS_FLOAT16 and all(
            _exactly_float16(a) for a in (cls_w, out_w))
        dtype = np.float16 if self.half_t else np.float32
        self.ld_cls = (C + 15) // 16 * 16
        cls_copy = self._aligned_zeros(r * self.ld_cls, dtype).reshape(r, self.ld_cls)
        cls_copy[:, :C] = cls_w.T
        self.cls_t = <const void *><Py_ssize_t>cls_copy.ctypes.data
        cs = np.asarray(class_start, np.int64)
        lds = ((np.diff(cs) + 15) // 16 * 16).astype(np.int32)
        offs = np.zeros(C + 1, np.int64)
        np.cumsum(lds.astype(np.int64) * r, out=offs[1:])
        blocks = self._aligned_zeros(int(offs[C]), dtype)
        for c in range(C):
            blk = blocks[offs[c]:offs[c + 1]].reshape(r, lds[c])
            blk[:, :cs[c + 1] - cs[c]] = out_w[cs[c]:cs[c + 1]].T
        self._keep.extend([offs, lds])
        # blocks that cannot stay in L3 between queries come from DRAM: worth prefetching
        self.pf_blocks = blocks.nbytes * 2 > l3_cache_bytes()
        self.out_t = <const void *><Py_ssize_t>blocks.ctypes.data if blocks.size else NULL
        ov = offs
        self.out_t_off = &ov[0]
        lv = lds
        self.out_t_ld = &lv[0]

    cdef void _pack_softmax_panels(self):
        """out_w transposed into panels of NQ_PW words, (r x NQ_PW) each, and out_b
        padded to whole panels: the layout nq_panel_logz streams."""
        cdef const float[::1] fv
        cdef int V = self.V, r = self.r, pw = NQ_PW
        np_ = (V + pw - 1) // pw
        W = np.zeros((np_ * pw, r), np.float32)
        W[:V] = self._flat["out_w"].reshape(V, r)          # (float16 values convert)
        panels = self._aligned_zeros(np_ * r * pw)
        panels.reshape(np_, r, pw)[:] = W.reshape(np_, pw, r).transpose(0, 2, 1)
        bias = np.zeros(np_ * pw, np.float32)
        bias[:V] = np.asarray(<const float[:V]>self.out_b)
        self._keep.append(bias)
        fv = panels
        self.sm_panels = &fv[0]
        fv = bias
        self.sm_pbias = &fv[0]

    @property
    def prefetches_class_blocks(self):
        """Whether a new context's class-block rows are prefetched into L2 (exact class
        mode, when the blocks are larger than half the L3 cache)."""
        return bool(self.pf_blocks)

    @property
    def cache_size(self):
        """Contexts the single-query cache holds."""
        return self.cache_slots

    @property
    def half_weights(self):
        """Whether the embedding and output matrices are read as float16 (a float16
        model's ReLU net on AVX2 with F16C or AVX-512: they stay memory-mapped from
        the file)."""
        return bool(self.half_w)

    @property
    def half_class_copies(self):
        """Whether exact class mode reads float16 transposed copies (a float16 model's
        weights on AVX-512: the same scores from half the bytes)."""
        return bool(self.half_t)

    @property
    def sparse_softmax_batches(self):
        """Whether exact softmax normalisers come from the packed sparse panels."""
        return self.sm_panels != NULL

    def clear_cache(self):
        pthread_mutex_lock(&self.lock)
        memset(self.cache_used, 0, self.cache_slots)
        pthread_mutex_unlock(&self.lock)

    # ------------------------------------------------------------ forward pass

    cdef void _hidden_block(self, const int32_t *ctx, int B, float *X, float *A0, float *A1,
                            float *A2, float **H) noexcept nogil:
        """Hidden states of B contexts (B x m ids, oldest first) -> *H (B x r)."""
        cdef int b, j, i
        cdef const char *erow
        cdef float *a
        cdef const float *rows[MAX_ORDER]
        cdef bint activated = False
        cdef int m = self.m, d = self.d, r0 = self.r0
        if self.ctx_kind == CTX_FULL:
            if self.T != NULL:
                for b in range(B):
                    # The table is too big for the caches: ask for every line of the
                    # m rows at once so their DRAM fetches overlap.
                    for j in range(m):
                        rows[j] = self.T + (<int64_t>j * self.V + ctx[b * m + j]) * r0
                        for i in range(0, r0, 16):
                            __builtin_prefetch(rows[j] + i)
                    # bias, the m rows and ReLU in one pass
                    nq_addrows(self.b0, rows, m, r0, self.act == ACT_RELU, A0 + <int64_t>b * r0)
                activated = self.act != ACT_TANH
            else:
                for b in range(B):
                    for j in range(m):
                        nq_copyw(X + (<int64_t>b * m + j) * d, self._wrow(self.emb, ctx[b * m + j], d), d,
                                 self.half_w)
                if B == 1:
                    nq_vecmat(X, m * d, self.ctxw_p, self.ld0, r0, self.b0, A0)
                else:
                    _gemm_rm(B, r0, m * d, X, m * d, self.ctxw, r0, A0, r0, False)
                    for b in range(B):
                        a = A0 + <int64_t>b * r0
                        for i in range(r0):
                            a[i] += self.b0[i]
        else:
            for b in range(B):
                # as for the table: every line of the m embedding rows requested at once
                for j in range(m):
                    erow = <const char *>self._wrow(self.emb, ctx[b * m + j], d)
                    for i in range(0, d * self._wsize(), 64):
                        __builtin_prefetch(erow + i)
                a = A0 + <int64_t>b * r0
                memcpy(a, self.b0, r0 * sizeof(float))
                for j in range(m):
                    nq_diag_acc(a, self.ctxw + <int64_t>j * d, self._wrow(self.emb, ctx[b * m + j], d), d,
                                self.half_w)
        if not activated:
            for i in range(B * r0):
                A0[i] = _act(A0[i], self.act)
        H[0] = A0
        if B == 1:
            if self.n_dense >= 1:
                nq_vecmat(A0, r0, self.w1_p, self.ld1, self.h1, self.b1, A1)
                for i in range(self.h1):
                    A1[i] = _act(A1[i], self.act)
                H[0] = A1
            if self.n_dense >= 2:
                nq_vecmat(A1, self.h1, self.w2_p, self.ld2, self.h2, self.b2, A2)
                for i in range(self.h2):
                    A2[i] = _act(A2[i], self.act)
                H[0] = A2
            return
        if self.n_dense >= 1:
            _gemm_rm(B, self.h1, r0, A0, r0, self.w1, self.h1, A1, self.h1, False)
            for b in range(B):
                for i in range(self.h1):
                    A1[<int64_t>b * self.h1 + i] = _act(A1[<int64_t>b * self.h1 + i] + self.b1[i], self.act)
            H[0] = A1
        if self.n_dense >= 2:
            _gemm_rm(B, self.h2, self.h1, A1, self.h1, self.w2, self.h2, A2, self.h2, False)
            for b in range(B):
                for i in range(self.h2):
                    A2[<int64_t>b * self.h2 + i] = _act(A2[<int64_t>b * self.h2 + i] + self.b2[i], self.act)
            H[0] = A2

    cdef inline float *_rec(self, int slot) noexcept nogil:
        """The cache record of a slot."""
        return self.cache_rec + <int64_t>slot * self.lrec

    cdef inline const void *_block(self, int c) noexcept nogil:
        """Class c's transposed word block (float32 or, half_t, float16 entries)."""
        return <const char *>self.out_t + self.out_t_off[c] * (2 if self.half_t else 4)

    cdef inline int _row_scratch(self) noexcept nogil:
        """Floats of work space _hidden_row needs."""
        return self.m * self.d + self.r0 + self.h1 + self.h2 + 64

    cdef inline float *_hidden_row(self, const int32_t *ctx, float *ws) noexcept nogil:
        """Hidden state of one context, computed in ``ws`` (_row_scratch floats, private
        to the caller's thread); returns where in ``ws`` it is.  (A return value, not an
        out-parameter: prange makes assigned variables thread-private, not ones whose
        address is taken.)"""
        cdef float *h
        cdef int md = self.m * self.d
        self._hidden_block(ctx, 1, ws, ws + md + 16, ws + md + self.r0 + 32, ws + md + self.r0 + self.h1 + 48, &h)
        return h

    cdef inline int _wsize(self) noexcept nogil:
        """Bytes an entry of emb/out_w/cls_w."""
        return 2 if self.half_w else 4

    cdef inline const void *_wrow(self, const void *base, int64_t row, int width) noexcept nogil:
        """Row `row` of a (rows, width) matrix of emb/out_w/cls_w (float16 where half_w)."""
        return <const char *>base + row * width * self._wsize()

    cdef inline double _wdot(self, const void *base, int64_t row, const float *h) noexcept nogil:
        """Row `row` of out_w or cls_w dotted with the hidden state h."""
        return nq_dotw(self._wrow(base, row, self.r), h, self.r, self.half_w)

    cdef const float *_f32(self, name) except NULL:
        """emb/out_w/cls_w as float32 for the dense (BLAS) paths: the array itself, or
        with half_w a float32 copy made on first use (those paths serve other nets; this
        keeps any path that reaches one correct)."""
        a = self._flat[name]
        if a.dtype != np.float32:
            if name not in self._w32:
                self._w32[name] = a.astype(np.float32)
            a = self._w32[name]
        return <const float *><Py_ssize_t>a.ctypes.data

    cdef double _softmax_logz(self, const float *h, float *scores) noexcept nogil:
        """log sum_w exp(out_w[w] . h + out_b[w]) over the vocabulary.  One vector
        is too little work to wake BLAS threads for.  A ReLU state on AVX-512 goes
        through the packed panels, reading only its nonzero units' weights; otherwise
        plain dot products."""
        cdef double logz
        cdef int r = self.r
        if self.sm_panels != NULL:
            # scratch layout in `scores`: idx, val (r + 16 each), count, max, 16 sums
            nq_panel_logz_avx512(h, r, 1, r, self.sm_panels, self.sm_pbias, self.V,
                                 <int32_t *>scores, scores + r + 16, <int32_t *>(scores + 2 * r + 32),
                                 scores + 2 * r + 33, scores + 2 * r + 34, &logz)
            return logz
        nq_rowdotsw(self.out_w, self.r, h, self.V, self.r, self.out_b, scores, self.half_w)
        return _logsumexp(scores, self.V)

    cdef double _logp(self, const float *h, WordId w, double logz, float *scores) noexcept nogil:
        """Natural-log p(w | h) in this core's mode; ``logz`` is the softmax
        normaliser (used by exact/fallback softmax output)."""
        cdef double s, lc, lw
        cdef int c, i, lo, hi, L, node
        if self.out_kind == OUT_SOFTMAX:
            s = self._wdot(self.out_w, w, h) + self.out_b[w]
            if self.mode == MODE_UNNORMALIZED:
                return s
            return s - logz
        if self.out_kind == OUT_CLASS:
            c = self.word_class[w]
            s = self._wdot(self.cls_w, c, h) + self.cls_b[c]
            i = self.word_pos[w]
            lw = self._wdot(self.out_w, i, h) + self.out_b[i]
            if self.mode == MODE_UNNORMALIZED:
                return s + lw
            nq_rowdotsw(self.cls_w, self.r, h, self.C, self.r, self.cls_b, scores, self.half_w)
            lc = s - _logsumexp(scores, self.C)
            lo = self.class_start[c]
            hi = self.class_start[c + 1]
            nq_rowdotsw(self._wrow(self.out_w, lo, self.r), self.r, h, hi - lo, self.r, self.out_b + lo, scores,
                        self.half_w)
            return lc + lw - _logsumexp(scores, hi - lo)
        # tree: code 1 takes sigmoid(+score), code 0 sigmoid(-score)
        L = self.lengths[w]
        s = 0
        for i in range(L):
            node = self.points[<int64_t>w * self.max_len + i]
            lw = self._wdot(self.out_w, node, h) + self.out_b[node]
            s += _log_sigmoid(lw if self.codes[<int64_t>w * self.max_len + i] != 0 else -lw)
        return s

    # ------------------------------------------------------------ fallback tables

    cdef float _fb_lookup(self, int k, const int32_t *ctx) noexcept nogil:
        """Stored log-normaliser of the k-word context ctx[m-k:], or NaN."""
        cdef uint64_t key = _ctx_hash(ctx + self.m - k, k)
        cdef uint64_t nb = self.fb_buckets[k], b, probes
        cdef const uint64_t *keys = self.fb_keys[k]
        if nb == 0:
            return NAN
        b = nq_fastrange(key, nb)
        for probes in range(nb):
            if keys[b] == key:
                return self.fb_vals[k][b]
            if keys[b] == 0:
                return NAN
            b += 1
            if b == nb:
                b = 0
        return NAN

    # ------------------------------------------------------------ the protocol

    cdef inline void _context(self, const NState *s, int k, int32_t *ctx) noexcept nogil:
        """The net's input for the last k words of state s (others <null>), oldest first."""
        cdef int i
        for i in range(self.m):
            ctx[i] = NULL_ID
        for i in range(k):
            ctx[self.m - 1 - i] = <int32_t>s.words[i]

    cdef int _cached_hidden(self, const int32_t *ctx, bint need_logz, float **h, double *logz) noexcept nogil:
        """Look up / compute the hidden state (and softmax normaliser) of a context.
        Caller holds the lock; *h (the same values in the cache or in the scratch)
        is valid until the next call.  Returns the cache slot."""
        cdef uint64_t key = _ctx_hash(ctx, self.m)
        cdef int slot = <int>nq_fastrange(key, <uint64_t>self.cache_slots)
        cdef float *rec = self._rec(slot)
        cdef double *lz = <double *>rec
        cdef int32_t *c = <int32_t *>(rec + 2)
        cdef uint64_t *ok = <uint64_t *>(rec + self.rec_ok)
        cdef float *H
        cdef int i
        cdef bint hit = self.cache_used[slot]
        if hit:
            for i in range(self.m):
                if c[i] != ctx[i]:
                    hit = False
                    break
        if hit:
            self.cache_hits += 1
        else:
            self.cache_misses += 1
            # the record's lines are requested for writing now, to arrive while the
            # hidden state (and a class query's products) are computed
            for i in range(0, self.lrec, 16):
                __builtin_prefetch(rec + i, 1)
            H = self._hidden_row(ctx, self.scratch)
            memcpy(rec + self.rec_h, H, self.r * sizeof(float))
            memcpy(c, ctx, self.m * sizeof(int32_t))
            self.cache_used[slot] = 1
            lz[0] = NAN
            for i in range(self.wzw):           # a word or two: no memset call
                ok[i] = 0
        # a new context is read from the scratch it was computed in: the record's copy
        # is cold, and loads of it would wait for its lines to arrive
        h[0] = rec + self.rec_h if hit else H
        if need_logz and isnan(lz[0]):
            lz[0] = self._softmax_logz(h[0], self.scores)
        logz[0] = lz[0]
        return slot

    cdef double _class_logp_cached(self, int slot, const float *h, WordId w) noexcept nogil:
        """Exact class-factored log p(w | h) with the class scores, their normaliser and
        the word normaliser of w's class kept in the cache slot.  A new context needs
        both products, which share one pass over h's nonzeros, and w's output row is
        prefetched first, to arrive while they run.  (w's score is that row's dot
        product even where the block has it: hits and misses must give the same bits.)"""
        cdef float *rec = self._rec(slot)
        cdef double *lz = <double *>rec
        cdef float *wz = rec + self.rec_wz
        cdef uint64_t *ok = <uint64_t *>(rec + self.rec_ok)
        cdef int c = self.word_class[w], i = self.word_pos[w]
        cdef int lo = self.class_start[c], hi = self.class_start[c + 1]
        cdef bint need_cls = isnan(lz[0])
        cdef bint need_wz = not ((ok[c >> 6] >> (c & 63)) & 1)
        cdef const void *blk = self._block(c)
        cdef const char *wrow = <const char *>self._wrow(self.out_w, i, self.r)
        cdef int k
        if need_wz:
            for k in range(0, self.r * self._wsize(), 64):
                __builtin_prefetch(wrow + k)
        if need_cls and need_wz:
            nq_vecmat2(h, self.r, self.cls_t, self.ld_cls, self.C, self.cls_b, self.cls_scores,
                       blk, self.out_t_ld[c], hi - lo, self.out_b + lo, self.scores, self.pf_blocks, self.half_t)
        elif need_wz:                   # (a fresh slot needs both)
            nq_vecmatw(h, self.r, blk, self.out_t_ld[c], hi - lo, self.out_b + lo, self.scores, self.half_t)
        if need_cls:
            lz[0] = _logsumexp(self.cls_scores, self.C)
        if need_wz:
            wz[c] = <float>_logsumexp(self.scores, hi - lo)
            ok[c >> 6] |= (<uint64_t>1) << (c & 63)
        return ((self._wdot(self.cls_w, c, h) + self.cls_b[c]) - lz[0]
                + (self._wdot(self.out_w, i, h) + self.out_b[i]) - wz[c])

    cdef int score_word(self, const NState *ins, WordId w, NState *out, Ret *ret) except -1 nogil:
        cdef int32_t ctx[MAX_ORDER]
        cdef int k = ins.length, i, slot
        cdef float *h
        cdef double logz = 0, lp
        cdef float stored
        if k > self.m:
            k = self.m
        if w >= <WordId>self.V:
            w = 0
        for i in range(k):
            if ins.words[i] >= <WordId>self.V:
                k = i          # a foreign state: use the valid part only
                break
        pthread_mutex_lock(&self.lock)
        if self.mode == MODE_FALLBACK:
            # Longest stored context: drop the farthest words until one is found.
            while True:
                self._context(ins, k, ctx)
                stored = self._fb_lookup(k, ctx)
                if not isnan(stored) or k == 0:
                    break
                k -= 1
            self._cached_hidden(ctx, False, &h, &logz)
            lp = self._logp(h, w, 0.0, self.scores)
            if not isnan(stored):
                lp -= stored
            else:
                lp -= self._softmax_logz(h, self.scores)
        else:
            self._context(ins, k, ctx)
            slot = self._cached_hidden(ctx, self.mode == MODE_EXACT and self.out_kind == OUT_SOFTMAX, &h, &logz)
            if self.cls_scores != NULL:
                lp = self._class_logp_cached(slot, h, w)
            else:
                lp = self._logp(h, w, logz, self.scores)
        pthread_mutex_unlock(&self.lock)
        # Successor state: the new word, then the context, capped at m words.
        for i in range(min(ins.length, self.m - 1), 0, -1):
            out.words[i] = ins.words[i - 1]
        out.words[0] = w
        out.length = <uint8_t>min(ins.length + 1, self.m)
        for i in range(out.length):
            out.backoff[i] = 0.0
        ret.prob = <float>(lp * LOG10E)
        ret.ngram_length = k + 1
        return 0

    # ------------------------------------------------------------ batches

    cdef tuple _forward_scratch(self, int B):
        """Work arrays X, A0, A1, A2 of _hidden_block for blocks of B contexts."""
        return (np.empty(B * self.m * self.d + 1, np.float32), np.empty(B * self.r0 + 1, np.float32),
                np.empty(B * max(self.h1, 1), np.float32), np.empty(B * max(self.h2, 1), np.float32))

    def hidden(self, ctx):
        """Hidden states (N, r) float32 of contexts (N, m) int32, oldest first."""
        cdef const int32_t[:, ::1] c = np.ascontiguousarray(ctx, dtype=np.int32)
        cdef int N = c.shape[0]
        if c.shape[1] != self.m:
            raise ValueError(f"contexts must have {self.m} columns")
        if N and (np.min(c) < 0 or np.max(c) >= self.V):
            raise ValueError("context word id out of range")
        out = np.empty((N, self.r), np.float32)
        cdef float[:, ::1] o = out
        cdef int B = 256, lo, nb
        X, A0, A1, A2 = self._forward_scratch(B)
        cdef float[::1] xv = X, a0 = A0, a1 = A1, a2 = A2
        cdef float *H
        with nogil:
            lo = 0
            while lo < N:
                nb = min(B, N - lo)
                self._hidden_block(&c[lo, 0], nb, &xv[0], &a0[0], &a1[0], &a2[0], &H)
                memcpy(&o[lo, 0], H, <size_t>nb * self.r * sizeof(float))
                lo += B
        return out

    def log_probs(self, ctx, words, softmax_logz=None):
        """Natural-log p(word | context) per row in this core's mode (exact, or the
        unnormalised score; fallback rows need ``softmax_logz`` from the caller).
        ctx (N, m) int32 oldest first, words (N,) int32.  Rows go in blocks, without
        the GIL; how a block's hidden states and normalisers are computed is below."""
        cdef const int32_t[:, ::1] c = np.ascontiguousarray(ctx, dtype=np.int32)
        cdef const int32_t[::1] wv = np.ascontiguousarray(words, dtype=np.int32)
        cdef int N = c.shape[0]
        if wv.shape[0] != N or (N and c.shape[1] != self.m):
            raise ValueError("contexts and words disagree in length")
        if N and (np.min(c) < 0 or np.max(c) >= self.V or np.min(wv) < 0 or np.max(wv) >= self.V):
            raise ValueError("word id out of range")
        out = np.empty(N, np.float64)
        cdef double[::1] o = out
        cdef const double[::1] given
        cdef bint have_given = softmax_logz is not None
        if have_given:
            given = np.ascontiguousarray(softmax_logz, dtype=np.float64)
        cdef bint need_z = self.out_kind == OUT_SOFTMAX and self.mode == MODE_EXACT and not have_given
        if self.out_kind == OUT_CLASS and self.mode == MODE_EXACT:
            if self.act == ACT_RELU and self.cls_t != NULL:
                return self._class_log_probs_sparse(c, wv, out)
            return self._class_log_probs(c, wv, out)
        # ReLU layers are mostly zeros: each OpenMP thread takes a share of a block and
        # computes its rows' hidden states one at a time by the zero-skipping kernels,
        # and on AVX-512 exact softmax normalisers come from sparse products over packed
        # panels (nq_panel_logz; 256 rows a thread, so each panel read serves many).
        # Dense layers (tanh, identity) go through one sgemm per block instead, and so
        # do exact normalisers without AVX-512: (B x V).
        cdef bint panels = need_z and self.sm_panels != NULL
        cdef bint by_row = self.act == ACT_RELU and (panels or not need_z)
        # Rows one at a time go in blocks of 2^16 (one OpenMP team per 128 rows cost half
        # of (a)'s unnormalised batch time), a class output's in class order, so the
        # output rows of a class's words stay cached while its rows pass.
        cdef bint by_class = by_row and self.out_kind == OUT_CLASS
        cdef int nt = max(1, min(openmp.omp_get_max_threads(), 64))
        cdef int B = max(512, 256 * nt) if panels else 512 if need_z else 1 << 16 if by_row else 128
        cdef int lo, nb, b, i, t, t_lo, t_hi
        cdef int32_t[::1] kv, rv, st
        if by_class:
            kv = np.empty(B, np.int32)
            rv = np.empty(B, np.int32)
            st = np.empty(self.C + 2, np.int32)
        cdef int r = self.r, V = self.V, nscores = max(self.V, self.C) + 16
        X, A0, A1, A2 = self._forward_scratch(1 if by_row else B)
        S = np.empty(<int64_t>(B if need_z and not panels else 1) * nscores, np.float32)
        cdef float[::1] xv = X, a0 = A0, a1 = A1, a2 = A2, sv = S
        cdef float[:, ::1] ws
        cdef int32_t[::1] pidx, pcnt
        cdef float[::1] hv, pval, pmx, psv
        cdef double[::1] pz
        if by_row:
            ws = np.empty((nt, self._row_scratch() + nscores), np.float32)
        if panels:
            hv = np.empty(B * r + 16, np.float32)
            pidx = np.empty(B * (r + 16), np.int32)
            pval = np.empty(B * (r + 16), np.float32)
            pcnt = np.empty(B, np.int32)
            pmx = np.empty(B, np.float32)
            psv = np.empty(B * 16, np.float32)
            pz = np.empty(B, np.float64)
        cdef float *H
        cdef float *hp
        cdef float *row
        cdef double logz
        cdef const float *ow = self._f32("out_w") if need_z and not panels else NULL
        with nogil:
            lo = 0
            while lo < N:
                nb = min(B, N - lo)
                if by_row:
                    if by_class:
                        self._rows_by_class(&wv[lo], nb, &kv[0], &st[0], &rv[0])
                    for t in prange(nt, schedule='static', num_threads=nt):
                        t_lo = nb * t // nt
                        t_hi = nb * (t + 1) // nt
                        for i in range(t_lo, t_hi):
                            b = rv[i] if by_class else i
                            hp = self._hidden_row(&c[lo + b, 0], &ws[t, 0])
                            if panels:
                                memcpy(&hv[0] + <int64_t>b * r, hp, r * sizeof(float))
                            else:
                                logz = given[lo + b] if have_given else 0
                                o[lo + b] = self._logp(hp, wv[lo + b], logz, &ws[t, 0] + self._row_scratch())
                        if panels:
                            nq_panel_logz_avx512(&hv[0] + <int64_t>t_lo * r, r, t_hi - t_lo, r,
                                                 self.sm_panels, self.sm_pbias, V,
                                                 &pidx[0] + <int64_t>t_lo * (r + 16),
                                                 &pval[0] + <int64_t>t_lo * (r + 16),
                                                 &pcnt[t_lo], &pmx[t_lo], &psv[0] + <int64_t>t_lo * 16, &pz[t_lo])
                            for b in range(t_lo, t_hi):
                                o[lo + b] = self._logp(&hv[0] + <int64_t>b * r, wv[lo + b], pz[b], NULL)
                    lo += B
                    continue
                self._hidden_block(&c[lo, 0], nb, &xv[0], &a0[0], &a1[0], &a2[0], &H)
                if need_z:
                    # one product for the block's scores, then the rows' normalisers in
                    # parallel (the softmax _logp touches no scratch)
                    _gemm_rm(nb, V, r, H, r, ow, r, &sv[0], V, True)
                    for b in prange(nb, schedule='static'):
                        row = &sv[0] + <int64_t>b * V
                        for i in range(V):
                            row[i] = row[i] + self.out_b[i]
                        logz = _logsumexp(row, V)
                        o[lo + b] = self._logp(H + <int64_t>b * r, wv[lo + b], logz, NULL)
                else:
                    for b in range(nb):
                        logz = given[lo + b] if have_given else 0
                        o[lo + b] = self._logp(H + <int64_t>b * r, wv[lo + b], logz, &sv[0])
                lo += B
        return out

    cdef void _rows_by_class(self, const int32_t *words, int n, int32_t *cls, int32_t *st,
                             int32_t *order) noexcept nogil:
        """_by_class of rows by their word's class (cls: n ints of scratch)."""
        cdef int b
        for b in range(n):
            cls[b] = self.word_class[words[b]]
        _by_class(cls, n, self.C, st, order)

    cdef int _widest_class(self) noexcept:
        """Words in the largest class: the scratch a class's scores need."""
        cdef int k, widest = 0
        for k in range(self.C):
            widest = max(widest, self.class_start[k + 1] - self.class_start[k])
        return widest

    def _class_log_probs_sparse(self, const int32_t[:, ::1] c, const int32_t[::1] wv, out):
        """Exact class-factored log p for a batch of a ReLU net, row by row as a single
        query computes it: each row's class scores and word block read only the
        transposed weight rows of its nonzero hidden units (nq_vecmat2); most units are
        zeros, so this reads a fraction of what dense products would.  The rows are
        taken in class order (a counting sort of up to 2^20 rows at a time) and each
        thread takes a contiguous share of them, so a class's word block stays in
        cache while its rows are scored; a row's hidden state lives in its thread's
        scratch only until its score is written."""
        cdef int N = c.shape[0], B = 1 << 20, r = self.r, C = self.C
        cdef int nt = max(1, min(openmp.omp_get_max_threads(), 64))
        cdef int lo, nb, b, i, t, cl, c_lo, width, max_width = self._widest_class()
        cdef WordId w
        cdef int hid = self._row_scratch()
        cdef float[:, ::1] ws = np.empty((nt, hid + C + max_width + 64), np.float32)
        cdef int32_t[::1] rv = np.empty(min(B, max(N, 1)), np.int32), st = np.empty(C + 2, np.int32)
        cdef int32_t[::1] kv = np.empty(min(B, max(N, 1)), np.int32)
        cdef double[::1] o = out
        cdef float *hp
        cdef float *s1
        cdef float *s2
        with nogil:
            lo = 0
            while lo < N:
                nb = min(B, N - lo)
                self._rows_by_class(&wv[lo], nb, &kv[0], &st[0], &rv[0])
                for t in prange(nt, schedule='static', num_threads=nt):
                    s1 = &ws[t, 0] + hid
                    s2 = s1 + C + 16
                    for i in range(<int64_t>nb * t // nt, <int64_t>nb * (t + 1) // nt):
                        b = rv[i]
                        w = wv[lo + b]
                        cl = self.word_class[w]
                        c_lo = self.class_start[cl]
                        width = self.class_start[cl + 1] - c_lo
                        hp = self._hidden_row(&c[lo + b, 0], &ws[t, 0])
                        nq_vecmat2(hp, r, self.cls_t, self.ld_cls, C, self.cls_b, s1,
                                   self._block(cl), self.out_t_ld[cl], width,
                                   self.out_b + c_lo, s2, False, self.half_t)
                        o[lo + b] = ((s1[cl] - _logsumexp(s1, C))
                                     + (s2[self.word_pos[w] - c_lo] - _logsumexp(s2, width)))
                lo += B
        return out

    @property
    def samples_classes(self):
        """Whether sample_class_rows is available (exact class mode of a ReLU net)."""
        return self.cls_t != NULL and self.act == ACT_RELU

    def sample_class_rows(self, ctx, uniforms):
        """Output rows (class order) drawn from the exact class-factored distribution of
        each context (N, m) int32 oldest first: the class by uniforms[:, 0], then the
        word within it by uniforms[:, 1] ((N, 2) float64 in [0, 1)), each by the inverse
        of the cumulative distribution.  The products are a single query's (the
        zero-skipping kernels); the rows are grouped by drawn class for the word step,
        so each class's block stays in cache, as in _class_log_probs_sparse."""
        cdef const int32_t[:, ::1] c = np.ascontiguousarray(ctx, dtype=np.int32)
        cdef const double[:, ::1] u = np.ascontiguousarray(uniforms, dtype=np.float64)
        cdef int N = c.shape[0], r = self.r, C = self.C
        if not self.samples_classes:
            raise ValueError("class sampling needs exact class mode of a ReLU net")
        if u.shape[0] != N or u.shape[1] != 2 or (N and c.shape[1] != self.m):
            raise ValueError(f"need contexts (N, {self.m}) and uniforms (N, 2)")
        if N and (np.min(ctx) < 0 or np.max(ctx) >= self.V):
            raise ValueError("context word id out of range")
        cdef int nt = max(1, min(openmp.omp_get_max_threads(), 64))
        cdef int b, i, t, cl, c_lo, width
        cdef int hid = self._row_scratch(), wide = max(C, self._widest_class()) + 16
        cdef float[:, ::1] ws = np.empty((nt, hid + 2 * wide), np.float32)
        cdef float[::1] hb = np.empty(<int64_t>max(N, 1) * r, np.float32)
        cdef int32_t[::1] cls = np.empty(max(N, 1), np.int32), rv = np.empty(max(N, 1), np.int32)
        cdef int32_t[::1] st = np.empty(C + 2, np.int32)
        out = np.empty(N, np.int32)
        cdef int32_t[::1] o = out
        cdef float *hp
        cdef float *sc
        with nogil:
            # the classes, and each row's hidden state kept for the word step
            for t in prange(nt, schedule='static', num_threads=nt):
                sc = &ws[t, 0] + hid
                for b in range(<int64_t>N * t // nt, <int64_t>N * (t + 1) // nt):
                    hp = self._hidden_row(&c[b, 0], &ws[t, 0])
                    memcpy(&hb[0] + <int64_t>b * r, hp, r * sizeof(float))
                    nq_vecmatw(hp, r, self.cls_t, self.ld_cls, C, self.cls_b, sc, self.half_t)
                    cls[b] = _draw(sc, C, u[b, 0], sc + wide)
            _by_class(&cls[0], N, C, &st[0], &rv[0])
            for t in prange(nt, schedule='static', num_threads=nt):
                sc = &ws[t, 0] + hid
                for i in range(<int64_t>N * t // nt, <int64_t>N * (t + 1) // nt):
                    b = rv[i]
                    cl = cls[b]
                    c_lo = self.class_start[cl]
                    width = self.class_start[cl + 1] - c_lo
                    nq_vecmatw(&hb[0] + <int64_t>b * r, r, self._block(cl), self.out_t_ld[cl],
                               width, self.out_b + c_lo, sc, self.half_t)
                    o[b] = c_lo + _draw(sc, width, u[b, 1], sc + wide)
        return out

    def _class_log_probs(self, const int32_t[:, ::1] c, const int32_t[::1] wv, out):
        """Exact class-factored log p for a batch, by BLAS: one (B x C) product gives
        every row's class distribution, and the rows are grouped by their word's class
        so each class's word vectors meet all of its rows in one product (blocks of
        2048 rows: smaller ones leave most classes with too few rows for BLAS)."""
        cdef int N = c.shape[0], B = 2048, lo, nb, b, i, k, cl, n_c, width, r = self.r, C = self.C
        cdef int max_width = self._widest_class()
        X, A0, A1, A2 = self._forward_scratch(B)
        S = np.empty(<int64_t>B * max(C, max_width) + 16, np.float32)
        G = np.empty(<int64_t>B * r + 16, np.float32)
        rows = np.empty(B, np.int32)
        starts = np.empty(C + 2, np.int32)
        lc = np.empty(B, np.float64)
        cdef float[::1] xv = X, a0 = A0, a1 = A1, a2 = A2, sv = S, gv = G
        cdef int32_t[::1] rv = rows, st = starts, kv = np.empty(B, np.int32)
        cdef double[::1] lcv = lc, o = out
        cdef float *H
        cdef float *srow
        cdef const float *ow = self._f32("out_w")
        cdef const float *cw = self._f32("cls_w")
        with nogil:
            lo = 0
            while lo < N:
                nb = min(B, N - lo)
                self._hidden_block(&c[lo, 0], nb, &xv[0], &a0[0], &a1[0], &a2[0], &H)
                # log p(class | h) of each row's word
                _gemm_rm(nb, C, r, H, r, cw, r, &sv[0], C, True)
                for b in range(nb):
                    srow = &sv[0] + <int64_t>b * C
                    for k in range(C):
                        srow[k] += self.cls_b[k]
                    cl = self.word_class[wv[lo + b]]
                    lcv[b] = srow[cl] - _logsumexp(srow, C)
                # group the rows by class, then one product per class
                self._rows_by_class(&wv[lo], nb, &kv[0], &st[0], &rv[0])
                for cl in range(C):
                    n_c = st[cl + 1] - st[cl]
                    if n_c == 0:
                        continue
                    width = self.class_start[cl + 1] - self.class_start[cl]
                    if n_c >= 4:
                        for i in range(n_c):
                            memcpy(&gv[0] + <int64_t>i * r, H + <int64_t>rv[st[cl] + i] * r, r * sizeof(float))
                        _gemm_rm(n_c, width, r, &gv[0], r, ow + <int64_t>self.class_start[cl] * r, r,
                                 &sv[0], width, True)
                        for i in range(n_c):
                            srow = &sv[0] + <int64_t>i * width
                            for k in range(width):
                                srow[k] += self.out_b[self.class_start[cl] + k]
                    else:
                        # too few rows for a BLAS call to pay: the eight-row dot kernel
                        for i in range(n_c):
                            nq_rowdots(ow + <int64_t>self.class_start[cl] * r, r,
                                       H + <int64_t>rv[st[cl] + i] * r, width, r,
                                       self.out_b + self.class_start[cl], &sv[0] + <int64_t>i * width)
                    for i in range(n_c):
                        b = rv[st[cl] + i]
                        srow = &sv[0] + <int64_t>i * width
                        k = self.word_pos[wv[lo + b]] - self.class_start[cl]
                        o[lo + b] = lcv[b] + srow[k] - _logsumexp(srow, width)
                lo += B
        return out

    def fallback_orders(self, ctx):
        """For fallback mode: for each context (N, m) with its real-word count
        implied by leading <null>s, the longest stored order k and its normaliser."""
        cdef const int32_t[:, ::1] c = np.ascontiguousarray(ctx, dtype=np.int32)
        cdef int N = c.shape[0], b, k, j
        ks = np.empty(N, np.int32)
        zs = np.empty(N, np.float64)
        cdef int32_t[::1] kv = ks
        cdef double[::1] zv = zs
        cdef float stored
        if not self.has_fallback:
            raise ValueError("no fallback tables")
        with nogil:
            for b in range(N):
                k = 0
                for j in range(self.m - 1, -1, -1):
                    if c[b, j] == NULL_ID:
                        break
                    k += 1
                while True:
                    stored = self._fb_lookup(k, &c[b, 0])
                    if not isnan(stored) or k == 0:
                        break
                    k -= 1
                kv[b] = k
                zv[b] = stored
        return ks, zs


def context_keys(ctx, int k):
    """Fallback-table keys of the last ``k`` columns of each context row (N, m)."""
    cdef const int32_t[:, ::1] c = np.ascontiguousarray(ctx, dtype=np.int32)
    cdef Py_ssize_t N = c.shape[0], i
    cdef int m = c.shape[1] if c.ndim == 2 else 0
    if k < 0 or k > m:
        raise ValueError(f"k={k} outside 0..{m}")
    out = np.empty(N, np.uint64)
    cdef uint64_t[::1] o = out
    with nogil:
        for i in range(N):
            o[i] = _ctx_hash(&c[i, m - k] if k else NULL, k)
    return out


def build_key_table(keys, vals, double multiplier=1.5):
    """Open-addressing arrays (keys uint64, vals float32) probed like _fb_lookup."""
    cdef const uint64_t[::1] kv = np.ascontiguousarray(keys, dtype=np.uint64)
    cdef const float[::1] vv = np.ascontiguousarray(vals, dtype=np.float32)
    cdef Py_ssize_t n = kv.shape[0], i
    cdef uint64_t nb = max(<uint64_t>(n * multiplier) + 1, <uint64_t>(n + 1)), b
    tk = np.zeros(nb, np.uint64)
    tv = np.zeros(nb, np.float32)
    cdef uint64_t[::1] tkv = tk
    cdef float[::1] tvv = tv
    with nogil:
        for i in range(n):
            b = nq_fastrange(kv[i], nb)
            while tkv[b] != 0 and tkv[b] != kv[i]:
                b += 1
                if b == nb:
                    b = 0
            tkv[b] = kv[i]
            tvv[b] = vv[i]
    return tk, tv
