# Free kernels of the neural query core over the structs of _netcore.pxd: the forward
# pass of one context or a block of them, the output log-probability in each
# normalisation mode, the fallback tables, and a single query through the context
# cache.  Nothing here holds the GIL or allocates.
#
# The network (nplm/neural/network.py): x_j = emb[c_j] for the n-1 context words
# (oldest first, <null>-padded), a0 = f(sum_j C_j x_j + b0), further dense layers
# a_l = f(a_{l-1} W_l + b_l), then a softmax, class-factored or tree-factored output
# over h = a_last.  Row-major arrays throughout; BLAS sees them transposed.  The first
# layer of a full-context net may come from a table of per-(position, word) products
# (Devlin et al. 2014): T[j, w] = emb[w] C_j, so a0 is m row additions.
from libc.math cimport exp, log1p, NAN, isnan
from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t
from libc.string cimport memcpy

from nplm._kernels cimport MAX_ORDER, NState, Ret, WordId
from nplm.neural._netdefs cimport CTX_FULL, ACT_RELU, ACT_TANH, OUT_SOFTMAX, OUT_CLASS

nq_init_simd()

cdef double LOG10E = 0.43429448190325176


# ---------------------------------------------------------------- forward pass

cdef bint first_layer(const NetWeights *w, const int32_t *ctx, int B, float *X, float *A0) noexcept nogil:
    """The first layer's pre-activations of B contexts into A0 (B x r0); returns whether
    they are already activated (the table path applies ReLU while adding)."""
    cdef int b, j, i
    cdef const char *erow
    cdef float *a
    cdef const float *rows[MAX_ORDER]
    cdef int m = w.m, d = w.d, r0 = w.r0
    if w.ctx_kind == CTX_FULL:
        if w.T != NULL:
            for b in range(B):
                # The table is too big for the caches: ask for every line of the
                # m rows at once so their DRAM fetches overlap.
                for j in range(m):
                    rows[j] = w.T + (<int64_t>j * w.V_in + ctx[b * m + j]) * r0
                    for i in range(0, r0, 16):
                        __builtin_prefetch(rows[j] + i)
                # bias, the m rows and ReLU in one pass
                nq_addrows(w.b0, rows, m, r0, w.act == ACT_RELU, A0 + <int64_t>b * r0)
            return w.act != ACT_TANH
        for b in range(B):
            for j in range(m):
                nq_copyw(X + (<int64_t>b * m + j) * d, wrow(w, w.emb, ctx[b * m + j], d), d, w.half_w)
        if B == 1:
            nq_vecmat(X, m * d, w.ctxw_p, w.ld0, r0, w.b0, A0)
        else:
            gemm_rm(B, r0, m * d, X, m * d, w.ctxw, r0, A0, r0, False)
            for b in range(B):
                a = A0 + <int64_t>b * r0
                for i in range(r0):
                    a[i] += w.b0[i]
        return False
    for b in range(B):
        # as for the table: every line of the m embedding rows requested at once
        for j in range(m):
            erow = <const char *>wrow(w, w.emb, ctx[b * m + j], d)
            for i in range(0, d * wsize(w), 64):
                __builtin_prefetch(erow + i)
        a = A0 + <int64_t>b * r0
        memcpy(a, w.b0, r0 * sizeof(float))
        for j in range(m):
            nq_diag_acc(a, w.ctxw + <int64_t>j * d, wrow(w, w.emb, ctx[b * m + j], d), d, w.half_w)
    return False


cdef void hidden_block(const NetWeights *w, const int32_t *ctx, int B, float *X, float *A0, float *A1,
                       float *A2, float **H) noexcept nogil:
    """Hidden states of B contexts (B x m ids, oldest first) -> *H (B x r)."""
    cdef int b, i
    cdef int r0 = w.r0
    if not first_layer(w, ctx, B, X, A0):
        for i in range(B * r0):
            A0[i] = act(A0[i], w.act)
    H[0] = A0
    if B == 1:
        if w.n_dense >= 1:
            nq_vecmat(A0, r0, w.w1_p, w.ld1, w.h1, w.b1, A1)
            for i in range(w.h1):
                A1[i] = act(A1[i], w.act)
            H[0] = A1
        if w.n_dense >= 2:
            nq_vecmat(A1, w.h1, w.w2_p, w.ld2, w.h2, w.b2, A2)
            for i in range(w.h2):
                A2[i] = act(A2[i], w.act)
            H[0] = A2
        return
    if w.n_dense >= 1:
        gemm_rm(B, w.h1, r0, A0, r0, w.w1, w.h1, A1, w.h1, False)
        for b in range(B):
            for i in range(w.h1):
                A1[<int64_t>b * w.h1 + i] = act(A1[<int64_t>b * w.h1 + i] + w.b1[i], w.act)
        H[0] = A1
    if w.n_dense >= 2:
        gemm_rm(B, w.h2, w.h1, A1, w.h1, w.w2, w.h2, A2, w.h2, False)
        for b in range(B):
            for i in range(w.h2):
                A2[<int64_t>b * w.h2 + i] = act(A2[<int64_t>b * w.h2 + i] + w.b2[i], w.act)
        H[0] = A2


cdef float *hidden_row(const NetWeights *w, const int32_t *ctx, float *ws) noexcept nogil:
    """Hidden state of one context, computed in ``ws`` (row_scratch floats, private to
    the caller's thread); returns where in ``ws`` it is.  (A return value, not an
    out-parameter: prange makes assigned variables thread-private, not ones whose
    address is taken.)"""
    cdef float *h
    cdef int md = w.m * w.d
    hidden_block(w, ctx, 1, ws, ws + md + 16, ws + md + w.r0 + 32, ws + md + w.r0 + w.h1 + 48, &h)
    return h


# ---------------------------------------------------------------- output

cdef inline double _log_sigmoid(double x) noexcept nogil:
    if x >= 0:
        return -log1p(exp(-x))
    return x - log1p(exp(x))


cdef double softmax_logz(const NetWeights *w, const Normalisers *z, const float *h,
                         float *scores) noexcept nogil:
    """log sum_w exp(out_w[w] . h + out_b[w]) over the vocabulary.  One vector
    is too little work to wake BLAS threads for.  A ReLU state on AVX-512 goes
    through the packed panels, reading only its nonzero units' weights; otherwise
    plain dot products."""
    cdef double logz
    cdef int r = w.r
    if z.sm_panels != NULL:
        # scratch layout in `scores`: idx, val (r + 16 each), count, max, 16 sums
        nq_panel_logz_avx512(h, r, 1, r, z.sm_panels, z.sm_pbias, w.V,
                             <int32_t *>scores, scores + r + 16, <int32_t *>(scores + 2 * r + 32),
                             scores + 2 * r + 33, scores + 2 * r + 34, &logz)
        return logz
    nq_rowdotsw(w.out_w, w.r, h, w.V, w.r, w.out_b, scores, w.half_w)
    return logsumexp(scores, w.V)


cdef double log_prob(const NetWeights *w, int mode, const float *h, WordId word, double logz,
                     float *scores) noexcept nogil:
    """Natural-log p(word | h) in normalisation ``mode``; ``logz`` is the softmax
    normaliser (used by exact/fallback softmax output)."""
    cdef double s, lc, lw
    cdef int c, i, lo, hi, L, node
    if w.out_kind == OUT_SOFTMAX:
        s = wdot(w, w.out_w, word, h) + w.out_b[word]
        if mode == MODE_UNNORMALIZED:
            return s
        return s - logz
    if w.out_kind == OUT_CLASS:
        c = w.word_class[word]
        s = wdot(w, w.cls_w, c, h) + w.cls_b[c]
        i = w.word_pos[word]
        lw = wdot(w, w.out_w, i, h) + w.out_b[i]
        if mode == MODE_UNNORMALIZED:
            return s + lw
        nq_rowdotsw(w.cls_w, w.r, h, w.C, w.r, w.cls_b, scores, w.half_w)
        lc = s - logsumexp(scores, w.C)
        lo = w.class_start[c]
        hi = w.class_start[c + 1]
        nq_rowdotsw(wrow(w, w.out_w, lo, w.r), w.r, h, hi - lo, w.r, w.out_b + lo, scores, w.half_w)
        return lc + lw - logsumexp(scores, hi - lo)
    # tree: code 1 takes sigmoid(+score), code 0 sigmoid(-score)
    L = w.lengths[word]
    s = 0
    for i in range(L):
        node = w.points[<int64_t>word * w.max_len + i]
        lw = wdot(w, w.out_w, node, h) + w.out_b[node]
        s += _log_sigmoid(lw if w.codes[<int64_t>word * w.max_len + i] != 0 else -lw)
    return s


# ---------------------------------------------------------------- fallback tables

cdef float fallback_lookup(const Normalisers *z, int m, int k, const int32_t *ctx) noexcept nogil:
    """Stored log-normaliser of the k-word context ctx[m-k:], or NaN."""
    cdef uint64_t key = context_hash(ctx + m - k, k)
    cdef uint64_t nb = z.fb_buckets[k], b, _probes
    cdef const uint64_t *keys = z.fb_keys[k]
    if nb == 0:
        return NAN
    b = nplm_fastrange(key, nb)
    for _probes in range(nb):
        if keys[b] == key:
            return z.fb_vals[k][b]
        if keys[b] == 0:
            return NAN
        b += 1
        if b == nb:
            b = 0
    return NAN


# ---------------------------------------------------------------- single queries

cdef inline void _context(const NetWeights *w, const NState *s, int k, int32_t *ctx) noexcept nogil:
    """The net's input for the last k words of state s (others <null>), oldest first:
    embedding rows (through in_map where the shortlist covers the input side; the
    specials keep their ids)."""
    cdef int i
    for i in range(w.m):
        ctx[i] = NULL_ID
    for i in range(k):
        ctx[w.m - 1 - i] = <int32_t>s.words[i] if w.in_map == NULL else w.in_map[s.words[i]]


cdef int _cached_hidden(const NetWeights *w, const Normalisers *z, ContextCache *cache, const int32_t *ctx,
                        bint need_logz, float **h, double *logz) noexcept nogil:
    """Look up / compute the hidden state (and softmax normaliser) of a context.
    Caller holds the lock; *h (the same values in the cache or in the scratch)
    is valid until the next call.  Returns the cache slot."""
    cdef uint64_t key = context_hash(ctx, w.m)
    cdef int slot = <int>nplm_fastrange(key, <uint64_t>cache.slots)
    cdef float *rec = cache_record(cache, slot)
    cdef double *lz = <double *>rec
    cdef int32_t *c = <int32_t *>(rec + 2)
    cdef uint64_t *ok = <uint64_t *>(rec + cache.rec_ok)
    cdef float *H
    cdef int i
    cdef bint hit = cache.used[slot]
    if hit:
        for i in range(w.m):
            if c[i] != ctx[i]:
                hit = False
                break
    if hit:
        cache.hits += 1
    else:
        cache.misses += 1
        # the record's lines are requested for writing now, to arrive while the
        # hidden state (and a class query's products) are computed
        for i in range(0, cache.lrec, 16):
            __builtin_prefetch(rec + i, 1)
        H = hidden_row(w, ctx, cache.scratch)
        memcpy(rec + cache.rec_h, H, w.r * sizeof(float))
        memcpy(c, ctx, w.m * sizeof(int32_t))
        cache.used[slot] = 1
        lz[0] = NAN
        for i in range(cache.wzw):           # a word or two: no memset call
            ok[i] = 0
    # a new context is read from the scratch it was computed in: the record's copy
    # is cold, and loads of it would wait for its lines to arrive
    h[0] = rec + cache.rec_h if hit else H
    if need_logz and isnan(lz[0]):
        lz[0] = softmax_logz(w, z, h[0], cache.scores)
    logz[0] = lz[0]
    return slot


cdef double _class_logp_cached(const NetWeights *w, const Normalisers *z, ContextCache *cache, int slot,
                               const float *h, WordId word) noexcept nogil:
    """Exact class-factored log p(word | h) with the class scores, their normaliser and
    the word normaliser of the word's class kept in the cache slot.  A new context needs
    both products, which share one pass over h's nonzeros, and the word's output row is
    prefetched first, to arrive while they run.  (Its score is that row's dot product
    even where the block has it: hits and misses must give the same bits.)"""
    cdef float *rec = cache_record(cache, slot)
    cdef double *lz = <double *>rec
    cdef float *wz = rec + cache.rec_wz
    cdef uint64_t *ok = <uint64_t *>(rec + cache.rec_ok)
    cdef int c = w.word_class[word], i = w.word_pos[word]
    cdef int lo = w.class_start[c], hi = w.class_start[c + 1]
    cdef bint need_cls = isnan(lz[0])
    cdef bint need_wz = not ((ok[c >> 6] >> (c & 63)) & 1)
    cdef const void *blk = class_block(z, c)
    cdef const char *row = <const char *>wrow(w, w.out_w, i, w.r)
    cdef int k
    if need_wz:
        for k in range(0, w.r * wsize(w), 64):
            __builtin_prefetch(row + k)
    if need_cls and need_wz:
        nq_vecmat2(h, w.r, z.cls_t, z.ld_cls, w.C, w.cls_b, cache.cls_scores,
                   blk, z.out_t_ld[c], hi - lo, w.out_b + lo, cache.scores, z.pf_blocks, z.half_t)
    elif need_wz:                   # (a fresh slot needs both)
        nq_vecmatw(h, w.r, blk, z.out_t_ld[c], hi - lo, w.out_b + lo, cache.scores, z.half_t)
    if need_cls:
        lz[0] = logsumexp(cache.cls_scores, w.C)
    if need_wz:
        wz[c] = <float>logsumexp(cache.scores, hi - lo)
        ok[c >> 6] |= (<uint64_t>1) << (c & 63)
    return ((wdot(w, w.cls_w, c, h) + w.cls_b[c]) - lz[0]
            + (wdot(w, w.out_w, i, h) + w.out_b[i]) - wz[c])


cdef double _locked_log_prob(const NetWeights *w, const Normalisers *z, ContextCache *cache,
                             const NState *ins, WordId word, int *k) noexcept nogil:
    """Natural-log p(word | the last k[0] words of ins) through the cache (the caller
    holds its lock); in fallback mode k[0] becomes the context length used."""
    cdef int32_t ctx[MAX_ORDER]
    cdef int slot
    cdef float *h
    cdef double logz = 0, lp
    cdef float stored
    if z.mode == MODE_FALLBACK:
        # Longest stored context: drop the farthest words until one is found.
        while True:
            _context(w, ins, k[0], ctx)
            stored = fallback_lookup(z, w.m, k[0], ctx)
            if not isnan(stored) or k[0] == 0:
                break
            k[0] -= 1
        _cached_hidden(w, z, cache, ctx, False, &h, &logz)
        lp = log_prob(w, z.mode, h, word, 0.0, cache.scores)
        if not isnan(stored):
            lp -= stored
        else:
            lp -= softmax_logz(w, z, h, cache.scores)
        return lp
    _context(w, ins, k[0], ctx)
    slot = _cached_hidden(w, z, cache, ctx, z.mode == MODE_EXACT and w.out_kind == OUT_SOFTMAX, &h, &logz)
    if cache.cls_scores != NULL:
        return _class_logp_cached(w, z, cache, slot, h, word)
    return log_prob(w, z.mode, h, word, logz, cache.scores)


cdef void net_score_word(const NetWeights *w, const Normalisers *z, ContextCache *cache, const NState *ins,
                         WordId word, NState *out, Ret *ret) noexcept nogil:
    """LMCore.score_word of a neural net: log10 p(word | ins) and the successor state.
    States hold word ids; with a shortlist the word's output unit is scored and an
    out-of-shortlist word's log unigram ratio added."""
    cdef int k = ins.length, i
    cdef double lp
    if k > w.m:
        k = w.m
    if word >= <WordId>w.n_words:
        word = 0
    for i in range(k):
        if ins.words[i] >= <WordId>w.n_words:
            k = i          # a foreign state: use the valid part only
            break
    pthread_mutex_lock(&cache.lock)
    lp = _locked_log_prob(w, z, cache, ins, word if w.out_map == NULL else <WordId>w.out_map[word], &k)
    pthread_mutex_unlock(&cache.lock)
    if w.log_ratio != NULL:
        lp += w.log_ratio[word]
    # Successor state: the new word, then the context, capped at m words.
    for i in range(min(ins.length, w.m - 1), 0, -1):
        out.words[i] = ins.words[i - 1]
    out.words[0] = word
    out.length = <uint8_t>min(ins.length + 1, w.m)
    for i in range(out.length):
        out.backoff[i] = 0.0
    ret.prob = <float>(lp * LOG10E)
    ret.ngram_length = k + 1
