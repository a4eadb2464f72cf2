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

from nplm.io.resources import l3_cache_bytes
cimport numpy as cnp

cnp.import_array()

cdef extern from "<pthread.h>" nogil:
    ctypedef struct pthread_mutex_t:
        pass
    int pthread_mutex_init(pthread_mutex_t *, void *)
    int pthread_mutex_lock(pthread_mutex_t *)
    int pthread_mutex_unlock(pthread_mutex_t *)
    int pthread_mutex_destroy(pthread_mutex_t *)

cdef extern from "neural_query.h":
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

from cython.parallel cimport prange
cimport openmp
from nplm.neural._netdefs cimport CTX_FULL, CTX_DIAGONAL, ACT_RELU, ACT_TANH, ACT_IDENTITY, OUT_SOFTMAX, OUT_CLASS, OUT_TREE

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
        h = nplm_mix(h ^ ((<uint64_t><uint32_t>ctx[i] + 1) * 0x9e3779b97f4a7c15ULL))
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
        b = nplm_fastrange(key, nb)
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
        cdef int slot = <int>nplm_fastrange(key, <uint64_t>self.cache_slots)
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
            b = nplm_fastrange(kv[i], nb)
            while tkv[b] != 0 and tkv[b] != kv[i]:
                b += 1
                if b == nb:
                    b = 0
            tkv[b] = kv[i]
            tvv[b] = vv[i]
    return tk, tv
