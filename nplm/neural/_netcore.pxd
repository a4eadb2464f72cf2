# The neural query core as plain C data and free kernels (in the manner of gensim's
# word2vec_inner.pxd): NetWeights (the network, read-only), Normalisers (how a
# context's normaliser is found: exact-mode copies of the output weights, fallback
# tables) and ContextCache (the single-query cache and its scratch).  NeuralCore in
# _query.pyx owns the memory they point into; the kernels in _netcore.pyx take the
# structs and run without the GIL.
from libc.math cimport tanh
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t
from nplm.neural._blas cimport sgemm

from nplm._kernels cimport MAX_ORDER, NState, Ret, WordId
from nplm.neural._netdefs cimport ACT_RELU, ACT_TANH


cdef extern from "<pthread.h>" nogil:
    ctypedef struct pthread_mutex_t:
        pass
    int pthread_mutex_init(pthread_mutex_t *, void *)
    int pthread_mutex_lock(pthread_mutex_t *)
    int pthread_mutex_unlock(pthread_mutex_t *)
    int pthread_mutex_destroy(pthread_mutex_t *)

cdef extern from "neural_query.h":
    # Every module that includes the header has its own dispatch pointers: each calls
    # nq_init_simd() when it is imported.
    uint64_t nplm_mix(uint64_t h) noexcept nogil
    uint64_t nplm_fastrange(uint64_t h, uint64_t n) noexcept nogil
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


cdef enum:
    # Normalisation modes.
    MODE_EXACT = 0          # full softmax / exact through class or tree factorisation
    MODE_UNNORMALIZED = 1   # self-normalised score (log-normaliser taken as 0)
    MODE_FALLBACK = 2       # stored normalisers of the longest stored context
    NULL_ID = 3             # <null>: padding of context positions with no word
    BOS_ID = 1
    EOS_ID = 2


cdef struct NetWeights:
    # The network (see nplm/neural/network.py) and its output structure; read-only.
    # V: output units, V_in: embedding rows, n_words: the model's vocabulary (all
    # three equal without a shortlist, see nplm/neural/shortlist.py).
    int V, V_in, n_words, m, d, r0, h1, h2, n_dense, r, C, ctx_kind, act, out_kind, max_len
    const int32_t *in_map                # word -> embedding row, or NULL (the word's id)
    const int32_t *out_map               # word -> output unit, or NULL (the word's id)
    const double *log_ratio              # word -> ln(c(w) / c(OOS set)) (0 in the shortlist), or NULL
    bint half_w                          # emb, out_w, cls_w hold float16 (else float32):
    const void *emb                      # a float16 ReLU net on AVX2 or AVX-512
    const float *ctxw
    const float *b0
    const float *w1
    const float *b1
    const float *w2
    const float *b2
    const float *ctxw_p                  # ctxw, w1, w2 with rows padded to 64 bytes
    const float *w1_p
    const float *w2_p
    int ld0, ld1, ld2
    const void *out_w
    const float *out_b
    const void *cls_w
    const float *cls_b
    const int32_t *word_class
    const int32_t *class_start
    const int32_t *word_pos
    const int32_t *points
    const signed char *codes
    const int32_t *lengths
    const float *T                       # (m, V, r0) first-layer products, or NULL


cdef struct Normalisers:
    # How a context's normaliser is found in each mode; read-only.
    int mode
    # exact class mode: cls_w transposed, (r, ld_cls), and each class's block of out_w
    # transposed, (r, out_t_ld[c]) at entry out_t_off[c] of out_t; NULL otherwise
    const void *cls_t
    int ld_cls
    const void *out_t
    const int64_t *out_t_off
    const int32_t *out_t_ld
    bint half_t                          # those copies hold float16 (else float32) entries
    bint pf_blocks                       # prefetch a new context's block rows (see nq_vecmat2)
    # exact softmax of ReLU nets on AVX-512: out_w packed as panels (see nq_panel_logz)
    # and out_b padded to match; NULL otherwise
    const float *sm_panels
    const float *sm_pbias
    # fallback normaliser tables, order k = 0..m (k context words)
    const uint64_t *fb_keys[MAX_ORDER]
    const float *fb_vals[MAX_ORDER]
    uint64_t fb_buckets[MAX_ORDER]
    bint has_fallback


cdef struct ContextCache:
    # The single-query cache: direct-mapped, slot = context hash, one record of `lrec`
    # floats a slot, so that a new context's writes fall on a few adjacent cache lines:
    # its log-normaliser (a double, NaN until computed), then the context (m int32),
    # then at rec_h the hidden state (r floats), and in exact class mode at rec_wz the
    # normaliser inside each class (C floats), valid where the class's bit is set in the
    # wzw words at rec_ok.  `lock` guards all of it.
    int slots, lrec, rec_ok, rec_h, rec_wz, wzw
    float *rec
    uint8_t *used
    float *cls_scores                    # a new context's class scores (C + 16), or NULL
                                         # (their log-normaliser is kept in the record)
    float *scratch                       # forward work for one context
    float *scores                        # (max(V, C)) output scores
    long long hits, misses
    pthread_mutex_t lock


# ---------------------------------------------------------------- small helpers

cdef inline float act(float x, int kind) noexcept nogil:
    if kind == ACT_RELU:
        return x if x > 0 else 0
    if kind == ACT_TANH:
        return tanh(x)
    return x


cdef inline double logsumexp(const float *s, int n) noexcept nogil:
    return nq_logsumexp(s, n)


cdef inline uint64_t context_hash(const int32_t *ctx, int n) noexcept nogil:
    """Key of a context (ids, oldest first) in the fallback tables."""
    cdef uint64_t h = 0x2545f4914f6cdd1dULL ^ <uint64_t>n
    cdef int i
    for i in range(n):
        h = nplm_mix(h ^ ((<uint64_t><uint32_t>ctx[i] + 1) * 0x9e3779b97f4a7c15ULL))
    return h if h else 1


cdef inline void gemm_rm(int M, int N, int K, const float *A, int lda, const float *B, int ldb,
                         float *C, int ldc, bint b_transposed) noexcept nogil:
    """Row-major C[M,N] := A[M,K] op(B) with op(B) = B[K,N] or B[N,K]^T."""
    cdef float one = 1.0, zero = 0.0
    cdef char ta = b'N'
    cdef char tb = b'T' if b_transposed else b'N'
    if M <= 0 or N <= 0 or K <= 0:
        return
    sgemm(&tb, &ta, &N, &M, &K, &one, <float *>B, &ldb, <float *>A, &lda, &zero, C, &ldc)


cdef inline int wsize(const NetWeights *w) noexcept nogil:
    """Bytes an entry of emb/out_w/cls_w."""
    return 2 if w.half_w else 4


cdef inline const void *wrow(const NetWeights *w, const void *base, int64_t row, int width) noexcept nogil:
    """Row `row` of a (rows, width) matrix of emb/out_w/cls_w (float16 where half_w)."""
    return <const char *>base + row * width * wsize(w)


cdef inline double wdot(const NetWeights *w, const void *base, int64_t row, const float *h) noexcept nogil:
    """Row `row` of out_w or cls_w dotted with the hidden state h."""
    return nq_dotw(wrow(w, base, row, w.r), h, w.r, w.half_w)


cdef inline int row_scratch(const NetWeights *w) noexcept nogil:
    """Floats of work space hidden_row needs."""
    return w.m * w.d + w.r0 + w.h1 + w.h2 + 64


cdef inline const void *class_block(const Normalisers *z, int c) noexcept nogil:
    """Class c's transposed word block (float32 or, half_t, float16 entries)."""
    return <const char *>z.out_t + z.out_t_off[c] * (2 if z.half_t else 4)


cdef inline float *cache_record(ContextCache *cache, int slot) noexcept nogil:
    """The cache record of a slot."""
    return cache.rec + <int64_t>slot * cache.lrec


# ---------------------------------------------------------------- kernels (_netcore.pyx)

cdef void hidden_block(const NetWeights *w, const int32_t *ctx, int B, float *X, float *A0, float *A1,
                       float *A2, float **H) noexcept nogil
cdef float *hidden_row(const NetWeights *w, const int32_t *ctx, float *ws) noexcept nogil
cdef double softmax_logz(const NetWeights *w, const Normalisers *z, const float *h,
                         float *scores) noexcept nogil
cdef double log_prob(const NetWeights *w, int mode, const float *h, WordId word, double logz,
                     float *scores) noexcept nogil
cdef float fallback_lookup(const Normalisers *z, int m, int k, const int32_t *ctx) noexcept nogil
cdef void net_score_word(const NetWeights *w, const Normalisers *z, ContextCache *cache, const NState *ins,
                         WordId word, NState *out, Ret *ret) noexcept nogil
