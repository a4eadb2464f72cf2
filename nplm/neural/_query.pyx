# Neural n-gram models behind the LMCore protocol: the kenlm API (ModelBase) scores
# them exactly like back-off models.  NeuralCore owns the memory (weights, the
# copies made for speed, the context cache) and fills the structs of _netcore.pxd;
# single queries run _netcore's kernels, batches run here.
#
# Speed: the first layer of a full-context net is precomputed per (position, word)
# (Devlin et al. 2014); single queries (BaseScore, score of one sentence) go through
# a bounded, direct-mapped cache of context -> hidden state and log-normaliser;
# batches of sentences go through sgemm in blocks, or row by row through the
# zero-skipping kernels for ReLU nets.
from libc.math cimport isnan
from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t
from libc.stdlib cimport malloc, free
from libc.string cimport memcpy, memset

cdef extern from "<stdlib.h>" nogil:
    void *aligned_alloc(size_t alignment, size_t size)

from nplm._kernels cimport LMCore, NState, Ret, WordId
from nplm.neural._netcore cimport (
    BOS_ID, EOS_ID, MODE_EXACT, MODE_FALLBACK, MODE_UNNORMALIZED, NQ_PW, NULL_ID, ContextCache,
    NetWeights, Normalisers, class_block, context_hash, fallback_lookup, gemm_rm, hidden_block, hidden_row,
    log_prob, logsumexp, net_score_word, nplm_fastrange, nq_expshift, nq_has_f16c, nq_init_simd,
    nq_panel_logz_avx512, nq_rowdots, nq_simd_level, nq_vecmat2, nq_vecmatw, pthread_mutex_destroy,
    pthread_mutex_init, pthread_mutex_lock, pthread_mutex_unlock, row_scratch)

import numpy as np

from nplm.io.resources import l3_cache_bytes
from nplm.neural import _blas
cimport numpy as cnp

cnp.import_array()

from cython.parallel cimport prange
cimport openmp
from nplm.neural._netdefs cimport CTX_FULL, ACT_RELU, OUT_SOFTMAX, OUT_CLASS

nq_init_simd()
SIMD = {3: "avx512", 2: "avx2+fma"}.get(nq_simd_level(), "x86-64")
# whether the CPU converts float16 in hardware (AVX2 kernels read float16 weights then)
F16C = bool(nq_has_f16c())
# whether the kernels chosen read float16 weights: AVX-512, or AVX2 with F16C
READS_FLOAT16 = nq_simd_level() == 3 or (nq_simd_level() == 2 and F16C)

MODES = {"exact": MODE_EXACT, "unnormalized": MODE_UNNORMALIZED, "fallback": MODE_FALLBACK}


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
    return context_hash(&c[0], c.shape[0]) if c.shape[0] else context_hash(NULL, 0)


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


cdef void _rows_by_class(const NetWeights *w, const int32_t *words, int n, int32_t *cls, int32_t *st,
                         int32_t *order) noexcept nogil:
    """_by_class of rows by their word's class (cls: n ints of scratch)."""
    cdef int b
    for b in range(n):
        cls[b] = w.word_class[words[b]]
    _by_class(cls, n, w.C, st, order)


cdef int _widest_class(const NetWeights *w) noexcept:
    """Words in the largest class: the scratch a class's scores need."""
    cdef int k, widest = 0
    for k in range(w.C):
        widest = max(widest, w.class_start[k + 1] - w.class_start[k])
    return widest


cdef class NeuralCore(LMCore):
    """A neural n-gram network as an LMCore.  Built by nplm.neural.query."""
    cdef NetWeights w
    cdef Normalisers z
    cdef ContextCache cache
    cdef object _keep                    # arrays the pointers of w and z point into
    cdef dict _flat                      # the parameters by name, flattened (float32 or float16)
    cdef object _w32                     # float32 copies made for BLAS paths (half_w)
    cdef object _in_map, _out_map, _log_ratio   # a shortlist's maps (see NetWeights), or None

    def __cinit__(self):
        pthread_mutex_init(&self.cache.lock, NULL)
        self.cache.rec = NULL
        self.cache.used = NULL
        self.cache.cls_scores = NULL
        self.cache.scratch = NULL
        self.cache.scores = NULL
        self.z.sm_panels = NULL
        self.z.sm_pbias = NULL

    def __dealloc__(self):
        free(self.cache.rec)
        free(self.cache.used)
        free(self.cache.cls_scores)
        free(self.cache.scratch)
        free(self.cache.scores)
        pthread_mutex_destroy(&self.cache.lock)

    def __init__(self, dict dims, dict params, dict structs, int mode, T=None, fallback=None,
                 int cache_slots=4096, shortlist=None):
        """dims: V, m, d, r0, h1, h2, n_dense, r, C, ctx_kind, act, out_kind, max_len
        (and V_in, n_words where they differ from V).  params: float32 C-contiguous
        arrays (see nplm.neural).  fallback: list over k = 0..m of (keys uint64, vals
        float32 natural-log normalisers) or None.  shortlist: a Shortlist
        (nplm.neural.shortlist) or None: the core then takes word ids everywhere and
        maps them to the network's rows and units itself."""
        _blas.bind()                     # scipy's BLAS, before the first product
        self.w.V, self.w.m, self.w.d = dims["V"], dims["m"], dims["d"]
        self.w.V_in, self.w.n_words = dims.get("V_in", dims["V"]), dims.get("n_words", dims["V"])
        self.w.r0, self.w.h1, self.w.h2 = dims["r0"], dims["h1"], dims["h2"]
        self.w.n_dense, self.w.r, self.w.C = dims["n_dense"], dims["r"], dims["C"]
        self.w.ctx_kind, self.w.act, self.w.out_kind = dims["ctx_kind"], dims["act"], dims["out_kind"]
        self.w.max_len = dims["max_len"]
        self.order = self.w.m + 1
        self.bos_id = BOS_ID
        self.eos_id = EOS_ID
        self.z.mode = mode
        flat, sflat = self._flatten(params, structs)
        self._keep = [flat, sflat, T, fallback]
        self._bind_weights(flat, sflat, T)
        self._bind_fallback(fallback)
        if mode == MODE_FALLBACK and fallback is None:
            raise ValueError("fallback normalisation needs precomputed normaliser tables")
        self._bind_shortlist(shortlist)
        self._allocate_cache(cache_slots)
        if (self.w.out_kind == OUT_SOFTMAX and mode != MODE_UNNORMALIZED and self.w.act == ACT_RELU
                and nq_simd_level() == 3):
            self._pack_softmax_panels()

    cdef tuple _flatten(self, dict params, dict structs):
        """The parameters (float16 where half_w can read them, else float32) and the
        output structures, flattened, with at least one entry each."""
        # A float16 model's three big matrices stay float16 (memory-mapped from the file,
        # so only the rows queries touch are resident) where AVX2 (with F16C) or AVX-512
        # reads them, in a ReLU net, whose batches need no dense (BLAS) products but for
        # exact softmax without AVX-512 (a float32 copy is made then: _f32).  Elsewhere
        # they are converted at load.
        self.w.half_w = (HALF_WEIGHTS and self.w.act == ACT_RELU
                         and READS_FLOAT16
                         and all(np.asarray(params[n]).dtype == np.float16 or np.asarray(params[n]).size == 0
                                 for n in HALF_PARAMS))
        flat = {}
        for name, a in params.items():
            dtype = np.float16 if self.w.half_w and name in HALF_PARAMS else np.float32
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
        return flat, sflat

    cdef void _bind_weights(self, dict flat, dict sflat, T) except *:
        """Point the NetWeights at the flat arrays, padded copies of the dense layers, the
        first-layer table T (or None), and (exact class mode) the transposed copies."""
        cdef const float[::1] fv
        cdef const int32_t[::1] iv
        cdef const signed char[::1] cv
        self.w.emb = <const void *><Py_ssize_t>flat["emb"].ctypes.data
        fv = flat["ctx"]; self.w.ctxw = &fv[0]
        fv = flat["b0"]; self.w.b0 = &fv[0]
        fv = flat["w1"]; self.w.w1 = &fv[0]
        fv = flat["b1"]; self.w.b1 = &fv[0]
        fv = flat["w2"]; self.w.w2 = &fv[0]
        fv = flat["b2"]; self.w.b2 = &fv[0]
        # One context's dense layers stream whole weight rows: copies with rows padded
        # to 64 bytes keep every vector load inside one cache line (25% faster here).
        # (the context matrix only when no first-layer table replaces it)
        ptr, self.w.ld0 = self._padded(flat["ctx"], self.w.m * self.w.d if self.w.ctx_kind == CTX_FULL and T is None
                                       else 0, self.w.r0)
        self.w.ctxw_p = <const float *><Py_ssize_t>ptr
        ptr, self.w.ld1 = self._padded(flat["w1"], self.w.r0 if self.w.n_dense >= 1 else 0, self.w.h1)
        self.w.w1_p = <const float *><Py_ssize_t>ptr
        ptr, self.w.ld2 = self._padded(flat["w2"], self.w.h1 if self.w.n_dense >= 2 else 0, self.w.h2)
        self.w.w2_p = <const float *><Py_ssize_t>ptr
        self.w.out_w = <const void *><Py_ssize_t>flat["out_w"].ctypes.data
        fv = flat["out_b"]; self.w.out_b = &fv[0]
        self.w.cls_w = <const void *><Py_ssize_t>flat["cls_w"].ctypes.data
        fv = flat["cls_b"]; self.w.cls_b = &fv[0]
        if self.w.out_kind == OUT_CLASS and self.z.mode == MODE_EXACT:
            self._transposed_class_blocks(flat["cls_w"], flat["out_w"], sflat["class_start"])
        iv = sflat["word_class"]; self.w.word_class = &iv[0]
        iv = sflat["class_start"]; self.w.class_start = &iv[0]
        iv = sflat["word_pos"]; self.w.word_pos = &iv[0]
        iv = sflat["points"]; self.w.points = &iv[0]
        cv = sflat["codes"]; self.w.codes = &cv[0]
        iv = sflat["lengths"]; self.w.lengths = &iv[0]
        self.w.T = NULL
        if T is not None:
            fv = T.reshape(-1)
            self.w.T = &fv[0]

    cdef void _bind_shortlist(self, shortlist) except *:
        """Point the NetWeights at a shortlist's maps (NULL without one)."""
        cdef const int32_t[::1] iv
        cdef const double[::1] dv
        self.w.in_map = self.w.out_map = NULL
        self.w.log_ratio = NULL
        self._in_map = self._out_map = self._log_ratio = None
        if shortlist is None:
            if not (self.w.V == self.w.V_in == self.w.n_words):
                raise ValueError("a network with fewer units than words needs its shortlist")
            return
        out_map = np.ascontiguousarray(shortlist.out_map, dtype=np.int32)
        log_ratio = np.ascontiguousarray(shortlist.log_ratio, dtype=np.float64)
        if out_map.shape != (self.w.n_words,) or log_ratio.shape != (self.w.n_words,) or \
                np.min(out_map) < 0 or np.max(out_map) >= self.w.V:
            raise ValueError("shortlist maps do not match the network")
        self._out_map, self._log_ratio = out_map, log_ratio
        iv = out_map
        self.w.out_map = &iv[0]
        dv = log_ratio
        self.w.log_ratio = &dv[0]
        if shortlist.in_map is not None:
            in_map = np.ascontiguousarray(shortlist.in_map, dtype=np.int32)
            if in_map.shape != (self.w.n_words,) or np.min(in_map) < 0 or np.max(in_map) >= self.w.V_in:
                raise ValueError("shortlist maps do not match the network")
            self._in_map = in_map
            iv = in_map
            self.w.in_map = &iv[0]
        elif self.w.V_in != self.w.n_words:
            raise ValueError("shortlist maps do not match the network")

    cdef object _input_rows(self, ctx):
        """Contexts (N, m) of word ids, checked, as the network's input rows (int32)."""
        c = np.ascontiguousarray(ctx, dtype=np.int32)
        if c.ndim != 2 or c.shape[1] != self.w.m:
            raise ValueError(f"contexts must have {self.w.m} columns")
        if c.size and (np.min(c) < 0 or np.max(c) >= self.w.n_words):
            raise ValueError("context word id out of range")
        return c if self._in_map is None else np.ascontiguousarray(self._in_map[c])

    cdef void _bind_fallback(self, fallback) except *:
        """Point the Normalisers at the fallback tables, a list over k = 0..m of (keys,
        vals), or None."""
        cdef int k
        cdef const float[::1] fv
        cdef const uint64_t[::1] kv
        self.z.has_fallback = fallback is not None
        if fallback is not None:
            for k in range(self.w.m + 1):
                keys, vals = fallback[k]
                kv = keys
                fv = vals
                self.z.fb_keys[k] = &kv[0]
                self.z.fb_vals[k] = &fv[0]
                self.z.fb_buckets[k] = kv.shape[0]

    cdef void _allocate_cache(self, int cache_slots) except *:
        """The context cache of `cache_slots` records and its scratch (see ContextCache)."""
        cdef bint class_cache = self.w.out_kind == OUT_CLASS and self.z.mode == MODE_EXACT
        self.cache.slots = max(cache_slots, 1)
        self.cache.wzw = (self.w.C + 63) // 64 if class_cache else 0
        self.cache.rec_ok = (2 + self.w.m + 1) // 2 * 2         # after the double and the context, 8-aligned
        self.cache.rec_h = (self.cache.rec_ok + 2 * self.cache.wzw + 15) // 16 * 16   # each part whole lines
        self.cache.rec_wz = self.cache.rec_h + (self.w.r + 15) // 16 * 16
        self.cache.lrec = self.cache.rec_wz + ((self.w.C + 15) // 16 * 16 if class_cache else 0)
        self.cache.used = <uint8_t *>malloc(self.cache.slots)
        self.cache.rec = <float *>aligned_alloc(64, sizeof(float) * self.cache.slots * self.cache.lrec)
        self.cache.scratch = <float *>malloc(sizeof(float) * row_scratch(&self.w))
        # (also nq_panel_logz's scratch for one row: 2r + 34 entries)
        self.cache.scores = <float *>malloc(sizeof(float) * (max(self.w.V, self.w.C, 2 * self.w.r + 34) + 16))
        if (self.cache.used == NULL or self.cache.rec == NULL or self.cache.scratch == NULL
                or self.cache.scores == NULL):
            raise MemoryError("cannot allocate the neural query cache")
        if class_cache:
            # A decoder asks many words after one context: the record keeps the class
            # normaliser and the per-class ones with the hidden state.  (Not the class
            # scores: C floats a slot, written cold and read back, cost a new context
            # more than the dot product that recomputes the one needed.)
            self.cache.cls_scores = <float *>malloc(sizeof(float) * (self.w.C + 16))
            if self.cache.cls_scores == NULL:
                raise MemoryError("cannot allocate the class-normaliser scratch")
        memset(self.cache.used, 0, self.cache.slots)

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
        r, C = self.w.r, self.w.C
        cls_w, out_w = cls_w.reshape(C, r), out_w.reshape(-1, r)
        # (a float32 model fails on its first values: the check costs it nothing)
        self.z.half_t = HALF_COPIES and READS_FLOAT16 and all(
            _exactly_float16(a) for a in (cls_w, out_w))
        dtype = np.float16 if self.z.half_t else np.float32
        self.z.ld_cls = (C + 15) // 16 * 16
        cls_copy = self._aligned_zeros(r * self.z.ld_cls, dtype).reshape(r, self.z.ld_cls)
        cls_copy[:, :C] = cls_w.T
        self.z.cls_t = <const void *><Py_ssize_t>cls_copy.ctypes.data
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
        self.z.pf_blocks = blocks.nbytes * 2 > l3_cache_bytes()
        self.z.out_t = <const void *><Py_ssize_t>blocks.ctypes.data if blocks.size else NULL
        ov = offs
        self.z.out_t_off = &ov[0]
        lv = lds
        self.z.out_t_ld = &lv[0]

    cdef void _pack_softmax_panels(self):
        """out_w transposed into panels of NQ_PW words, (r x NQ_PW) each, and out_b
        padded to whole panels: the layout nq_panel_logz streams."""
        cdef const float[::1] fv
        cdef int V = self.w.V, r = self.w.r, pw = NQ_PW
        np_ = (V + pw - 1) // pw
        W = np.zeros((np_ * pw, r), np.float32)
        W[:V] = self._flat["out_w"].reshape(V, r)          # (float16 values convert)
        panels = self._aligned_zeros(np_ * r * pw)
        panels.reshape(np_, r, pw)[:] = W.reshape(np_, pw, r).transpose(0, 2, 1)
        bias = np.zeros(np_ * pw, np.float32)
        bias[:V] = np.asarray(<const float[:V]>self.w.out_b)
        self._keep.append(bias)
        fv = panels
        self.z.sm_panels = &fv[0]
        fv = bias
        self.z.sm_pbias = &fv[0]

    @property
    def prefetches_class_blocks(self):
        """Whether a new context's class-block rows are prefetched into L2 (exact class
        mode, when the blocks are larger than half the L3 cache)."""
        return bool(self.z.pf_blocks)

    @property
    def cache_size(self):
        """Contexts the single-query cache holds."""
        return self.cache.slots

    @property
    def half_weights(self):
        """Whether the embedding and output matrices are read as float16 (a float16
        model's ReLU net on AVX2 with F16C or AVX-512: they stay memory-mapped from
        the file)."""
        return bool(self.w.half_w)

    @property
    def half_class_copies(self):
        """Whether exact class mode reads float16 transposed copies (a float16 model's
        weights on AVX-512: the same scores from half the bytes)."""
        return bool(self.z.half_t)

    @property
    def sparse_softmax_batches(self):
        """Whether exact softmax normalisers come from the packed sparse panels."""
        return self.z.sm_panels != NULL

    def clear_cache(self):
        pthread_mutex_lock(&self.cache.lock)
        memset(self.cache.used, 0, self.cache.slots)
        pthread_mutex_unlock(&self.cache.lock)

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

    @property
    def mode(self):
        """The normalisation mode (a value of MODES)."""
        return self.z.mode

    @mode.setter
    def mode(self, int mode):
        self.z.mode = mode

    @property
    def cache_hits(self):
        """Single queries whose context was in the cache (a counter the caller may reset)."""
        return self.cache.hits

    @cache_hits.setter
    def cache_hits(self, long long n):
        self.cache.hits = n

    @property
    def cache_misses(self):
        """Single queries whose context was not."""
        return self.cache.misses

    @cache_misses.setter
    def cache_misses(self, long long n):
        self.cache.misses = n

    # ------------------------------------------------------------ the protocol

    cdef int score_word(self, const NState *ins, WordId w, NState *out, Ret *ret) except -1 nogil:
        net_score_word(&self.w, &self.z, &self.cache, ins, w, out, ret)
        return 0

    # ------------------------------------------------------------ batches

    cdef tuple _forward_scratch(self, int B):
        """Work arrays X, A0, A1, A2 of hidden_block for blocks of B contexts."""
        return (np.empty(B * self.w.m * self.w.d + 1, np.float32), np.empty(B * self.w.r0 + 1, np.float32),
                np.empty(B * max(self.w.h1, 1), np.float32), np.empty(B * max(self.w.h2, 1), np.float32))

    def hidden(self, ctx):
        """Hidden states (N, r) float32 of contexts (N, m) int32 of word ids, oldest first."""
        cdef const int32_t[:, ::1] c = self._input_rows(ctx)
        cdef int N = c.shape[0]
        out = np.empty((N, self.w.r), np.float32)
        cdef float[:, ::1] o = out
        cdef int B = 256, lo, nb
        X, A0, A1, A2 = self._forward_scratch(B)
        cdef float[::1] xv = X, a0 = A0, a1 = A1, a2 = A2
        cdef float *H
        with nogil:
            lo = 0
            while lo < N:
                nb = min(B, N - lo)
                hidden_block(&self.w, &c[lo, 0], nb, &xv[0], &a0[0], &a1[0], &a2[0], &H)
                memcpy(&o[lo, 0], H, <size_t>nb * self.w.r * sizeof(float))
                lo += B
        return out

    def log_probs(self, ctx, words, softmax_logz=None):
        """Natural-log p(word | context) per row in this core's mode (exact, or the
        unnormalised score; fallback rows need ``softmax_logz`` from the caller).
        ctx (N, m) int32 word ids oldest first, words (N,) int32.  With a shortlist the
        rows are mapped to the network's input rows and units and an out-of-shortlist
        word's log unigram ratio is added to its unit's score."""
        cdef const int32_t[:, ::1] c = np.ascontiguousarray(ctx, dtype=np.int32)
        cdef const int32_t[::1] wv = np.ascontiguousarray(words, dtype=np.int32)
        cdef int N = c.shape[0]
        if wv.shape[0] != N or (N and c.shape[1] != self.w.m):
            raise ValueError("contexts and words disagree in length")
        if N and (np.min(c) < 0 or np.max(c) >= self.w.n_words or np.min(wv) < 0
                  or np.max(wv) >= self.w.n_words):
            raise ValueError("word id out of range")
        if self._out_map is None:
            return self._unit_log_probs(c, wv, softmax_logz)
        w_np = np.asarray(wv)
        out = self._unit_log_probs(self._input_rows(np.asarray(c)), self._out_map[w_np], softmax_logz)
        out += self._log_ratio[w_np]
        return out

    def _unit_log_probs(self, const int32_t[:, ::1] c, const int32_t[::1] wv, softmax_logz):
        """log_probs over the network's input rows and output units (checked by the
        caller).  Rows go in blocks, without the GIL; how a block's hidden states and
        normalisers are computed is below."""
        # (One function: the three block strategies share one nogil loop and its per-mode scratch.)
        cdef int N = c.shape[0]
        out = np.empty(N, np.float64)
        cdef double[::1] o = out
        cdef const double[::1] given
        cdef bint have_given = softmax_logz is not None
        if have_given:
            given = np.ascontiguousarray(softmax_logz, dtype=np.float64)
        cdef bint need_z = self.w.out_kind == OUT_SOFTMAX and self.z.mode == MODE_EXACT and not have_given
        if self.w.out_kind == OUT_CLASS and self.z.mode == MODE_EXACT:
            if self.w.act == ACT_RELU and self.z.cls_t != NULL:
                return self._class_log_probs_sparse(c, wv, out)
            return self._class_log_probs(c, wv, out)
        # ReLU layers are mostly zeros: each OpenMP thread takes a share of a block and
        # computes its rows' hidden states one at a time by the zero-skipping kernels,
        # and on AVX-512 exact softmax normalisers come from sparse products over packed
        # panels (nq_panel_logz; 256 rows a thread, so each panel read serves many).
        # Dense layers (tanh, identity) go through one sgemm per block instead, and so
        # do exact normalisers without AVX-512: (B x V).
        cdef bint panels = need_z and self.z.sm_panels != NULL
        cdef bint by_row = self.w.act == ACT_RELU and (panels or not need_z)
        # Rows one at a time go in blocks of 2^16 (one OpenMP team per 128 rows cost half
        # of (a)'s unnormalised batch time), a class output's in class order, so the
        # output rows of a class's words stay cached while its rows pass.
        cdef bint by_class = by_row and self.w.out_kind == OUT_CLASS
        cdef int nt = max(1, min(openmp.omp_get_max_threads(), 64))
        cdef int B = max(512, 256 * nt) if panels else 512 if need_z else 1 << 16 if by_row else 128
        cdef int lo, nb, b, i, t, t_lo, t_hi
        cdef int32_t[::1] kv, rv, st
        if by_class:
            kv = np.empty(B, np.int32)
            rv = np.empty(B, np.int32)
            st = np.empty(self.w.C + 2, np.int32)
        cdef int r = self.w.r, V = self.w.V, nscores = max(self.w.V, self.w.C) + 16
        X, A0, A1, A2 = self._forward_scratch(1 if by_row else B)
        S = np.empty(<int64_t>(B if need_z and not panels else 1) * nscores, np.float32)
        cdef float[::1] xv = X, a0 = A0, a1 = A1, a2 = A2, sv = S
        cdef float[:, ::1] ws
        cdef int32_t[::1] pidx, pcnt
        cdef float[::1] hv, pval, pmx, psv
        cdef double[::1] pz
        if by_row:
            ws = np.empty((nt, row_scratch(&self.w) + nscores), np.float32)
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
                        _rows_by_class(&self.w, &wv[lo], nb, &kv[0], &st[0], &rv[0])
                    for t in prange(nt, schedule='static', num_threads=nt):
                        t_lo = nb * t // nt
                        t_hi = nb * (t + 1) // nt
                        for i in range(t_lo, t_hi):
                            b = rv[i] if by_class else i
                            hp = hidden_row(&self.w, &c[lo + b, 0], &ws[t, 0])
                            if panels:
                                memcpy(&hv[0] + <int64_t>b * r, hp, r * sizeof(float))
                            else:
                                logz = given[lo + b] if have_given else 0
                                o[lo + b] = log_prob(&self.w, self.z.mode, hp, wv[lo + b], logz, &ws[t, 0] + row_scratch(&self.w))
                        if panels:
                            nq_panel_logz_avx512(&hv[0] + <int64_t>t_lo * r, r, t_hi - t_lo, r,
                                                 self.z.sm_panels, self.z.sm_pbias, V,
                                                 &pidx[0] + <int64_t>t_lo * (r + 16),
                                                 &pval[0] + <int64_t>t_lo * (r + 16),
                                                 &pcnt[t_lo], &pmx[t_lo], &psv[0] + <int64_t>t_lo * 16, &pz[t_lo])
                            for b in range(t_lo, t_hi):
                                o[lo + b] = log_prob(&self.w, self.z.mode, &hv[0] + <int64_t>b * r, wv[lo + b], pz[b], NULL)
                    lo += B
                    continue
                hidden_block(&self.w, &c[lo, 0], nb, &xv[0], &a0[0], &a1[0], &a2[0], &H)
                if need_z:
                    # one product for the block's scores, then the rows' normalisers in
                    # parallel (the softmax _logp touches no scratch)
                    gemm_rm(nb, V, r, H, r, ow, r, &sv[0], V, True)
                    for b in prange(nb, schedule='static'):
                        row = &sv[0] + <int64_t>b * V
                        for i in range(V):
                            row[i] = row[i] + self.w.out_b[i]
                        logz = logsumexp(row, V)
                        o[lo + b] = log_prob(&self.w, self.z.mode, H + <int64_t>b * r, wv[lo + b], logz, NULL)
                else:
                    for b in range(nb):
                        logz = given[lo + b] if have_given else 0
                        o[lo + b] = log_prob(&self.w, self.z.mode, H + <int64_t>b * r, wv[lo + b], logz, &sv[0])
                lo += B
        return out

    def _class_log_probs_sparse(self, const int32_t[:, ::1] c, const int32_t[::1] wv, out):
        """Exact class-factored log p for a batch of a ReLU net, row by row as a single
        query computes it: each row's class scores and word block read only the
        transposed weight rows of its nonzero hidden units (nq_vecmat2); most units are
        zeros, so this reads a fraction of what dense products would.  The rows are
        taken in class order (a counting sort of up to 2^20 rows at a time) and each
        thread takes a contiguous share of them, so a class's word block stays in
        cache while its rows are scored; a row's hidden state lives in its thread's
        scratch only until its score is written."""
        cdef int N = c.shape[0], B = 1 << 20, r = self.w.r, C = self.w.C
        cdef int nt = max(1, min(openmp.omp_get_max_threads(), 64))
        cdef int lo, nb, b, i, t, cl, c_lo, width, max_width = _widest_class(&self.w)
        cdef WordId w
        cdef int hid = row_scratch(&self.w)
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
                _rows_by_class(&self.w, &wv[lo], nb, &kv[0], &st[0], &rv[0])
                for t in prange(nt, schedule='static', num_threads=nt):
                    s1 = &ws[t, 0] + hid
                    s2 = s1 + C + 16
                    for i in range(<int64_t>nb * t // nt, <int64_t>nb * (t + 1) // nt):
                        b = rv[i]
                        w = wv[lo + b]
                        cl = self.w.word_class[w]
                        c_lo = self.w.class_start[cl]
                        width = self.w.class_start[cl + 1] - c_lo
                        hp = hidden_row(&self.w, &c[lo + b, 0], &ws[t, 0])
                        nq_vecmat2(hp, r, self.z.cls_t, self.z.ld_cls, C, self.w.cls_b, s1,
                                   class_block(&self.z, cl), self.z.out_t_ld[cl], width,
                                   self.w.out_b + c_lo, s2, False, self.z.half_t)
                        o[lo + b] = ((s1[cl] - logsumexp(s1, C))
                                     + (s2[self.w.word_pos[w] - c_lo] - logsumexp(s2, width)))
                lo += B
        return out

    @property
    def samples_classes(self):
        """Whether sample_class_rows is available (exact class mode of a ReLU net)."""
        return self.z.cls_t != NULL and self.w.act == ACT_RELU

    def sample_class_rows(self, ctx, uniforms):
        """Output rows (class order, over the network's units) drawn from the exact
        class-factored distribution of each context (N, m) int32 of word ids, oldest
        first: the class by uniforms[:, 0], then the word within it by uniforms[:, 1]
        ((N, 2) float64 in [0, 1)), each by the inverse of the cumulative distribution.  The products are a single query's (the
        zero-skipping kernels); the rows are grouped by drawn class for the word step,
        so each class's block stays in cache, as in _class_log_probs_sparse."""
        if not self.samples_classes:
            raise ValueError("class sampling needs exact class mode of a ReLU net")
        cdef const int32_t[:, ::1] c = self._input_rows(ctx)
        cdef const double[:, ::1] u = np.ascontiguousarray(uniforms, dtype=np.float64)
        cdef int N = c.shape[0], r = self.w.r, C = self.w.C
        if u.shape[0] != N or u.shape[1] != 2:
            raise ValueError(f"need contexts (N, {self.w.m}) and uniforms (N, 2)")
        cdef int nt = max(1, min(openmp.omp_get_max_threads(), 64))
        cdef int b, i, t, cl, c_lo, width
        cdef int hid = row_scratch(&self.w), wide = max(C, _widest_class(&self.w)) + 16
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
                    hp = hidden_row(&self.w, &c[b, 0], &ws[t, 0])
                    memcpy(&hb[0] + <int64_t>b * r, hp, r * sizeof(float))
                    nq_vecmatw(hp, r, self.z.cls_t, self.z.ld_cls, C, self.w.cls_b, sc, self.z.half_t)
                    cls[b] = _draw(sc, C, u[b, 0], sc + wide)
            _by_class(&cls[0], N, C, &st[0], &rv[0])
            for t in prange(nt, schedule='static', num_threads=nt):
                sc = &ws[t, 0] + hid
                for i in range(<int64_t>N * t // nt, <int64_t>N * (t + 1) // nt):
                    b = rv[i]
                    cl = cls[b]
                    c_lo = self.w.class_start[cl]
                    width = self.w.class_start[cl + 1] - c_lo
                    nq_vecmatw(&hb[0] + <int64_t>b * r, r, class_block(&self.z, cl), self.z.out_t_ld[cl],
                               width, self.w.out_b + c_lo, sc, self.z.half_t)
                    o[b] = c_lo + _draw(sc, width, u[b, 1], sc + wide)
        return out

    def _class_log_probs(self, const int32_t[:, ::1] c, const int32_t[::1] wv, out):
        """Exact class-factored log p for a batch, by BLAS: one (B x C) product gives
        every row's class distribution, and the rows are grouped by their word's class
        so each class's word vectors meet all of its rows in one product (blocks of
        2048 rows: smaller ones leave most classes with too few rows for BLAS)."""
        # (One function: the class step and the word step share the block's hidden states and scratch.)
        cdef int N = c.shape[0], B = 2048, lo, nb, b, i, k, cl, n_c, width, r = self.w.r, C = self.w.C
        cdef int max_width = _widest_class(&self.w)
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
                hidden_block(&self.w, &c[lo, 0], nb, &xv[0], &a0[0], &a1[0], &a2[0], &H)
                # log p(class | h) of each row's word
                gemm_rm(nb, C, r, H, r, cw, r, &sv[0], C, True)
                for b in range(nb):
                    srow = &sv[0] + <int64_t>b * C
                    for k in range(C):
                        srow[k] += self.w.cls_b[k]
                    cl = self.w.word_class[wv[lo + b]]
                    lcv[b] = srow[cl] - logsumexp(srow, C)
                # group the rows by class, then one product per class
                _rows_by_class(&self.w, &wv[lo], nb, &kv[0], &st[0], &rv[0])
                for cl in range(C):
                    n_c = st[cl + 1] - st[cl]
                    if n_c == 0:
                        continue
                    width = self.w.class_start[cl + 1] - self.w.class_start[cl]
                    if n_c >= 4:
                        for i in range(n_c):
                            memcpy(&gv[0] + <int64_t>i * r, H + <int64_t>rv[st[cl] + i] * r, r * sizeof(float))
                        gemm_rm(n_c, width, r, &gv[0], r, ow + <int64_t>self.w.class_start[cl] * r, r,
                                &sv[0], width, True)
                        for i in range(n_c):
                            srow = &sv[0] + <int64_t>i * width
                            for k in range(width):
                                srow[k] += self.w.out_b[self.w.class_start[cl] + k]
                    else:
                        # too few rows for a BLAS call to pay: the eight-row dot kernel
                        for i in range(n_c):
                            nq_rowdots(ow + <int64_t>self.w.class_start[cl] * r, r,
                                       H + <int64_t>rv[st[cl] + i] * r, width, r,
                                       self.w.out_b + self.w.class_start[cl], &sv[0] + <int64_t>i * width)
                    for i in range(n_c):
                        b = rv[st[cl] + i]
                        srow = &sv[0] + <int64_t>i * width
                        k = self.w.word_pos[wv[lo + b]] - self.w.class_start[cl]
                        o[lo + b] = lcv[b] + srow[k] - logsumexp(srow, width)
                lo += B
        return out

    def fallback_orders(self, ctx):
        """For fallback mode: for each context (N, m) of word ids with its real-word
        count implied by leading <null>s, the longest stored order k and its normaliser
        (the tables are keyed by the network's input rows)."""
        cdef const int32_t[:, ::1] c = self._input_rows(ctx)
        cdef int N = c.shape[0], b, k, j
        ks = np.empty(N, np.int32)
        zs = np.empty(N, np.float64)
        cdef int32_t[::1] kv = ks
        cdef double[::1] zv = zs
        cdef float stored
        if not self.z.has_fallback:
            raise ValueError("no fallback tables")
        with nogil:
            for b in range(N):
                k = 0
                for j in range(self.w.m - 1, -1, -1):
                    if c[b, j] == NULL_ID:
                        break
                    k += 1
                while True:
                    stored = fallback_lookup(&self.z, self.w.m, k, &c[b, 0])
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
            o[i] = context_hash(&c[i, m - k] if k else NULL, k)
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
