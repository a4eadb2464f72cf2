# Declarations shared by the training kernels (_train.pyx) and the noise samplers
# (_noise.pyx): the fused type the kernels are instantiated for, the parameter and
# work-array slots, the Net struct an Engine fills, and the small math helpers.
from libc.math cimport exp, log
from libc.stdint cimport uint64_t, int64_t, uint32_t
from libc.string cimport memset, memcpy
from nplm.neural._blas cimport sgemm, dgemm, sdot, ddot

ctypedef fused real:
    float
    double

# Parameter slots, in the order of PARAM_NAMES (_train.pyx).
cdef enum:
    P_EMB = 0
    P_CTX = 1
    P_B0 = 2
    P_W1 = 3
    P_B1 = 4
    P_W2 = 5
    P_B2 = 6
    P_OW = 7
    P_OB = 8
    P_CW = 9
    P_CB = 10
    N_PARAMS = 11

# Work-array slots, in the order of WORK_NAMES (_train.pyx).
cdef enum:
    W_X = 0
    W_A0 = 1
    W_A1 = 2
    W_A2 = 3
    W_D0 = 4
    W_D1 = 5
    W_D2 = 6
    W_M0 = 7
    W_M1 = 8
    W_M2 = 9
    W_DX = 10
    W_S = 11
    W_S2 = 12
    W_HS = 13
    W_DHS = 14
    W_WN = 15
    W_DWN = 16
    W_LOSS = 17
    W_TMP = 18
    W_MX = 19
    W_U = 20
    N_WORK = 21


cdef struct Net:
    # V: output units (words, or a shortlist's units); V_in: embedding rows
    int V, V_in, m, d, r0, h1, h2, n_dense, r, C, n_out_rows
    int ctx_kind, act, out_kind, obj, k, max_len, nthreads, bmax
    double in_drop             # dropout rate on the input embeddings (this step)
    void* p[N_PARAMS]
    void* g[N_PARAMS]
    void* w[N_WORK]
    void* a[N_PARAMS]          # AdaGrad accumulators
    int64_t size[N_PARAMS]
    # output structures (class layout in out_w row order, Huffman paths)
    const int* word_class      # (V,)
    const int* class_start     # (C+1,)
    const int* word_pos        # (V,) row of word in out_w for class output
    const int* points          # (V, max_len)
    const signed char* codes   # (V, max_len)
    const int* lengths         # (V,)
    unsigned char* mark_emb    # (V_in,) rows of emb touched in this batch
    unsigned char* mark_out    # (n_out_rows,)
    int* order                 # (B,) examples sorted by class
    int* cls_count             # (C+1,)
    # distinct words per context position (full contexts; see group_positions)
    bint grouped               # the last forward() went through the distinct words
    int* uslot                 # (V_in,) -1, or a word's index among its position's distinct words
    int* uniq                  # (m*bmax,) distinct words, position by position
    int* ustart                # (m+1,) where each position's run starts in uniq
    int* uinv                  # (bmax*m,) example b, position j -> index in its run


# ---------------------------------------------------------------- small math helpers

cdef inline void gemm(bint ta, bint tb, int M, int N, int K, real alpha, const real* A, int lda,
                      const real* B, int ldb, real beta, real* C, int ldc) noexcept nogil:
    """Row-major C[M,N] := alpha * op(A)[M,K] op(B)[K,N] + beta * C."""
    cdef char ca = b'T' if ta else b'N'
    cdef char cb = b'T' if tb else b'N'
    if M <= 0 or N <= 0:
        return
    if K <= 0:
        # BLAS with K=0 only scales C; keep that meaning explicitly.
        if beta == 0:
            for i in range(M):
                memset(C + <int64_t>i * ldc, 0, N * sizeof(real))
        return
    if real is float:
        sgemm(&cb, &ca, &N, &M, &K, &alpha, <float*>B, &ldb, <float*>A, &lda, &beta, C, &ldc)
    else:
        dgemm(&cb, &ca, &N, &M, &K, &alpha, <double*>B, &ldb, <double*>A, &lda, &beta, C, &ldc)


cdef inline real dot(const real* a, const real* b, int n) noexcept nogil:
    """a . b (BLAS: vectorised, which a plain C reduction is not without -ffast-math)"""
    cdef int one = 1
    if real is float:
        return sdot(&n, <float*>a, &one, <float*>b, &one)
    else:
        return ddot(&n, <double*>a, &one, <double*>b, &one)


cdef inline void axpy(real alpha, const real* x, real* y, int n) noexcept nogil:
    """y := alpha * x + y"""
    cdef int i
    for i in range(n):
        y[i] = y[i] + alpha * x[i]


cdef inline double softplus(double x) noexcept nogil:
    """log(1 + exp(x)), stable for large |x|."""
    if x > 0:
        return x + log(1.0 + exp(-x))
    return log(1.0 + exp(x))


cdef inline double sigmoid(double x) noexcept nogil:
    if x >= 0:
        return 1.0 / (1.0 + exp(-x))
    cdef double e = exp(x)
    return e / (1.0 + e)


cdef inline uint64_t mix64(uint64_t z) noexcept nogil:
    """splitmix64 finaliser: a counter-based hash, so dropout masks do not depend on
    which thread draws them."""
    z = (z ^ (z >> 30)) * <uint64_t>0xbf58476d1ce4e5b9ULL
    z = (z ^ (z >> 27)) * <uint64_t>0x94d049bb133111ebULL
    return z ^ (z >> 31)


cdef inline uint64_t next_u64(uint64_t* state) noexcept nogil:
    state[0] += <uint64_t>0x9e3779b97f4a7c15ULL
    return mix64(state[0])


cdef inline double uniform01(uint64_t* state) noexcept nogil:
    return (next_u64(state) >> 11) * (1.0 / 9007199254740992.0)


cdef inline float fast_exp(float x) noexcept nogil:
    """exp(x) for float x < 88 (0 below -87), relative error ~2e-7, written without calls
    or floating-point branches so GCC vectorises loops over it (libm's exp is scalar and
    dominated softmax rows).  exp(x) = 2^n 2^f with n = round(x log2 e), |f| <= 1/2, 2^f
    by Cephes' exp2f polynomial; the underflow test is an integer compare on the bits."""
    cdef float y, n, f, p, tf, rf
    cdef uint32_t tu, ru, xu
    memcpy(&xu, &x, 4)              # bit casts through memcpy keep the vectoriser happy
    y = x * <float>1.4426950408889634
    tf = y + <float>12582912.0      # 1.5 * 2^23: the rounded y lands in the low mantissa bits
    n = tf - <float>12582912.0
    f = y - n
    p = <float>1.535336188319500e-4
    p = p * f + <float>1.339887440266574e-3
    p = p * f + <float>9.618437357674640e-3
    p = p * f + <float>5.550332471162809e-2
    p = p * f + <float>2.402264791363012e-1
    p = p * f + <float>6.931472028550421e-1
    rf = p * f + <float>1.0
    memcpy(&tu, &tf, 4)
    memcpy(&ru, &rf, 4)
    # add n to the exponent; x <= -87 (bits above those of -87.0f) flushes to 0
    ru = (ru + ((tu - <uint32_t>0x4B400000) << 23)) & (<uint32_t>0 - <uint32_t>(xu < <uint32_t>0xC2AE0000))
    memcpy(&rf, &ru, 4)
    return rf


cdef inline void exp_shift(real* s, int n, real shift) noexcept nogil:
    """s[i] := exp(s[i] - shift)"""
    cdef int i
    if real is float:
        for i in range(n):
            s[i] = fast_exp(s[i] - shift)
    else:
        for i in range(n):
            s[i] = exp(s[i] - shift)


cdef inline double row_sum(const real* s, int n) noexcept nogil:
    """sum of s[0:n] with four independent accumulators (no fast-math needed)."""
    cdef double a0 = 0, a1 = 0, a2 = 0, a3 = 0
    cdef int i = 0
    while i + 4 <= n:
        a0 += s[i]; a1 += s[i + 1]; a2 += s[i + 2]; a3 += s[i + 3]
        i += 4
    while i < n:
        a0 += s[i]
        i += 1
    return (a0 + a1) + (a2 + a3)


cdef inline real row_max(const real* s, int n) noexcept nogil:
    cdef real mx = s[0]
    cdef int i
    for i in range(1, n):
        mx = s[i] if s[i] > mx else mx
    return mx


cdef inline double log_sum_exp_destroy(real* s, int n) noexcept nogil:
    """log sum_i exp(s[i]); overwrites s with exp(s[i] - max)."""
    cdef real mx = row_max(s, n)
    exp_shift(s, n, mx)
    return mx + log(row_sum(s, n))
