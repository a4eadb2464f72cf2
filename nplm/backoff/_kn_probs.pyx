"""The float32 arithmetic of modified Kneser-Ney estimation: interpolation weights,
back-offs and interpolated probabilities.

``unigram_probs`` and ``order_probs`` serve the in-memory estimation, where each
n-gram's context is found in the suffix trie (``_kn.link_contexts``);
``context_weights`` and ``interp_probs`` serve the partitioned one, where the
contexts' statistics are summed across parts first.  All go through the same
inline functions, so the two paths give bit-identical values, and those are
lmplz's (its order of operations, in float32).
"""
from libc.stdint cimport uint8_t, uint32_t, int32_t, uint64_t, int64_t
from libc.stdlib cimport calloc, free

from cython.parallel cimport prange

cdef enum:
    UNK = 0
    BOS = 1

cdef extern from "math.h" nogil:
    float log10f(float)


cdef inline float _log10_clamped(float x) noexcept nogil:
    """min(0, log10 x) in float like lmplz, with log10 0 written as ARPA's -99
    rather than -inf."""
    if x <= 0.0:
        return -99.0
    x = log10f(x)
    return x if x < 0.0 else 0.0


# The arithmetic below is float32 in lmplz's order of operations
# (InitialProbabilities' AddRight/MergeRight, then Interpolate), so that the
# values, and hence the printed ARPA, are bit-identical to lmplz's.

cdef inline float _gamma(uint64_t n1, uint64_t n2, uint64_t n3, uint64_t pruned, float denom,
                         const float *disc) noexcept nogil:
    cdef float g = 0.0
    g += disc[1] * <float> n1
    g += disc[2] * <float> n2
    g += disc[3] * <float> n3
    g += <float> pruned      # mass of pruned n-grams goes to the lower order
    return g / denom


cdef inline float _backoff(float g) noexcept nogil:
    return log10f(g) if g > 0 else -99.0


cdef inline float _uninterp(uint64_t a, float denom, const float *disc) noexcept nogil:
    return (<float> a - disc[a if a < 3 else 3]) / denom


def uniform_probability(uint64_t vocab):
    """lmplz's uniform base distribution: 1.0 / float(|V|), rounded to float."""
    return <float> (1.0 / <double> <float> vocab)


def unigram_probs(const uint64_t[::1] adj,      # IN (V,) adjusted counts by word id
                  const uint8_t[::1] mark,      # IN (V,) 1 = pruned (--limit_vocab_file)
                  const float[::1] disc,        # IN (4,) D0=0, D1, D2, D3+
                  bint interpolate, float uniform,
                  float[::1] prob,              # OUT (V,) probability
                  float[::1] logprob):          # OUT (V,) min(0, log10 prob)
    """Unigram probabilities (lmplz's MergeRight + Interpolate for order 1):
    p(w) = (a(w) - D(a(w))) / sum a + gamma / |V|, gamma being the discounted and
    pruned mass; without interpolation gamma goes to ``<unk>`` alone.  ``<s>`` gets
    probability 1 so scoring it costs nothing.  Returns gamma."""
    cdef Py_ssize_t v = adj.shape[0], w
    cdef uint64_t denom = 0, pruned = 0
    cdef uint64_t n[4]
    cdef float fdenom, gamma, assign, p
    n[0] = n[1] = n[2] = n[3] = 0
    with nogil:
        for w in range(v):
            denom += adj[w]
            if mark[w]:
                pruned += adj[w]
            elif adj[w] > 0:
                n[adj[w] if adj[w] < 3 else 3] += 1
        fdenom = <float> denom
        gamma = _gamma(n[1], n[2], n[3], pruned, fdenom, &disc[0])
        assign = gamma if interpolate else 0.0
        for w in range(v):
            p = _uninterp(adj[w], fdenom, &disc[0])
            if w == UNK:
                # lmplz: <unk> is a zeroton, or holds the whole mass without
                # interpolation.  nplm may also have seen it in the text.
                if adj[w] == 0:
                    p = 0.0
                if not interpolate:
                    p = p + gamma
            if w == BOS:
                p = 1.0 + 0.0 * uniform
            else:
                p = p + assign * uniform
            prob[w] = p
            logprob[w] = _log10_clamped(p)
    return gamma


cdef struct ContextSums:
    uint64_t denom          # sum of the adjusted counts of the context's extensions
    uint32_t n[3]           # kept extensions with adjusted count 1, 2, 3+


cdef struct ContextWeights:
    float denom
    float gamma


def order_probs(const uint64_t[::1] adj,        # IN (n_k,) adjusted counts
                const uint8_t[::1] mark,        # IN (n_k,) 1 = pruned
                const int32_t[::1] ctx,         # IN (n_k,) context index in order k-1
                const int32_t[::1] parent,      # IN (n_k,) suffix index in order k-1
                const float[::1] disc,          # IN (4,) this order's discounts
                const float[::1] prob_prev,     # IN (n_{k-1},) order k-1 probabilities
                bint pruning,                   # IN whether any n-gram may be marked
                int threads,                    # IN threads for the probability loop
                float[::1] prob,                # OUT (n_k,) probabilities (NaN if pruned)
                float[::1] logprob,             # OUT (n_k,) min(0, log10 prob)
                float[::1] backoff_prev,        # OUT (n_{k-1},) log10 back-off of order k-1
                float[::1] gamma_prev=None):    # OUT (n_{k-1},) optional: the back-offs themselves
    """Interpolated probabilities of order k >= 2 and the back-offs of order k-1:
    p(w|c) = (a(cw) - D(a(cw))) / sum_x a(cx) + gamma(c) p(w|c'), with
    gamma(c) = (sum over kept cx of D(a(cx)) + sum over pruned cx of a(cx)) / sum_x a(cx).
    An n-gram that is no context keeps back-off 1 (log 0)."""
    cdef bint linear = gamma_prev is not None
    cdef Py_ssize_t m = adj.shape[0], np_ = prob_prev.shape[0], i
    cdef int32_t c
    cdef uint64_t a
    cdef float p, g
    if threads < 1:
        raise ValueError("threads must be >= 1")
    cdef ContextSums *sums = <ContextSums *> calloc(np_ + 1, sizeof(ContextSums))
    cdef uint64_t *pruned = <uint64_t *> calloc(np_ + 1, sizeof(uint64_t)) if pruning else NULL
    cdef ContextWeights *cw = NULL
    if sums == NULL or (pruning and pruned == NULL):
        free(sums); free(pruned)
        raise MemoryError(f"order_probs: {np_ * 24} bytes")
    with nogil:
        for i in range(m):
            c = ctx[i]
            a = adj[i]
            sums[c].denom += a
            if pruning and mark[i]:
                pruned[c] += a
            elif a > 0:
                sums[c].n[(a if a < 3 else 3) - 1] += 1
        # The 8-byte weights overwrite the 24-byte sums in place: weight i lands on
        # bytes [8i, 8i+8), which only hold sums already converted.
        cw = <ContextWeights *> sums
        for i in range(np_):
            a = sums[i].denom
            if a:
                g = _gamma(sums[i].n[0], sums[i].n[1], sums[i].n[2],
                           pruned[i] if pruning else 0, <float> a, &disc[0])
                cw[i].denom = <float> a
                cw[i].gamma = g
                backoff_prev[i] = _backoff(g)
            else:
                cw[i].denom = 0.0
                cw[i].gamma = 0.0
                backoff_prev[i] = 0.0   # not a context
                g = 1.0
            if linear:
                gamma_prev[i] = g
        free(pruned)
        for i in prange(m, schedule="static", num_threads=threads):
            if pruning and mark[i]:
                prob[i] = 0.0 / 0.0
                logprob[i] = 0.0
                continue
            c = ctx[i]
            p = _uninterp(adj[i], cw[c].denom, &disc[0])
            p = p + cw[c].gamma * prob_prev[parent[i]]
            prob[i] = p
            logprob[i] = _log10_clamped(p)
    free(sums)


def context_weights(const uint64_t[:, ::1] sums,  # IN (c, 5) per context (see context_stats)
                    const float[::1] disc,       # IN (4,) the extensions' order's discounts
                    float[:, ::1] weights,       # OUT (c, 2) denominator as float, gamma
                    float[::1] backoff):         # OUT (c,) log10 back-offs of the contexts
    """Each context's weight and back-off from its summed statistics, as
    ``order_probs`` computes them."""
    cdef Py_ssize_t c = sums.shape[0], i
    cdef float g
    if sums.shape[1] != 5 or weights.shape[0] != c or weights.shape[1] != 2 or backoff.shape[0] != c:
        raise ValueError("context_weights: arrays of different shapes")
    with nogil:
        for i in range(c):
            if sums[i, 0]:
                g = _gamma(sums[i, 1], sums[i, 2], sums[i, 3], sums[i, 4], <float> sums[i, 0], &disc[0])
                weights[i, 0] = <float> sums[i, 0]
                weights[i, 1] = g
                backoff[i] = _backoff(g)
            else:
                weights[i, 0] = 0.0
                weights[i, 1] = 0.0
                backoff[i] = 0.0


def interp_probs(const uint64_t[::1] adj,        # IN (m,) adjusted counts
                 const uint8_t[::1] mark,        # IN (m,) 1 = pruned
                 const int64_t[::1] ctx,         # IN (m,) row of each n-gram's context weights
                 const float[:, ::1] weights,    # IN context (denominator, gamma)
                 const int32_t[::1] parent,      # IN (m,) row of the suffix in prob_prev
                 const float[::1] prob_prev,     # IN probabilities of the order below
                 const float[::1] disc,          # IN (4,) this order's discounts
                 bint pruning,
                 float[::1] prob,                # OUT (m,) probabilities (NaN if pruned)
                 float[::1] logprob):            # OUT (m,) min(0, log10 prob)
    """Interpolated probabilities p = (a - D(a)) / denom(c) + gamma(c) p(suffix),
    as ``order_probs`` computes them."""
    cdef Py_ssize_t m = adj.shape[0], i
    cdef int64_t c
    cdef float p
    if mark.shape[0] != m or ctx.shape[0] != m or parent.shape[0] != m or prob.shape[0] != m \
            or logprob.shape[0] != m or weights.shape[1] != 2:
        raise ValueError("interp_probs: arrays of different shapes")
    with nogil:
        for i in range(m):
            if pruning and mark[i]:
                prob[i] = 0.0 / 0.0
                logprob[i] = 0.0
                continue
            c = ctx[i]
            p = _uninterp(adj[i], weights[c, 0], &disc[0])
            p = p + weights[c, 1] * prob_prev[parent[i]]
            prob[i] = p
            logprob[i] = _log10_clamped(p)


def collapse(const float[::1] prob,          # IN (n_k,) probabilities of order k
             const float[::1] gamma,         # IN (n_k,) their back-offs (1 where no context)
             const float[::1] delta_prev,    # IN order k-1's deltas (unused for k = 1)
             const float[::1] gamma_prev,    # IN order k-1's back-offs (unused for k = 1)
             const int32_t[::1] suffix,      # IN (n_k,) row of each n-gram's suffix in order k-1
             const int32_t[::1] context,     # IN (n_k,) row of each n-gram's context in order k-1
             bint unigrams,                  # IN k == 1: no suffix nor context
             float[::1] delta,               # OUT (n_k,) the n-gram's delta
             float[::1] q):                  # OUT (n_k,) log10 q
    """lmplz's --collapse_values (Heafield, Koehn and Lavie 2012, "Language model rest
    costs and space-efficient storage"): one value q per n-gram that gives the same
    sentence probabilities as the probability and back-off together,
    q(w_1..w_n) = p(w_n | w_1..w_n-1) delta(w_1..w_n), where delta multiplies the
    back-offs of the n-gram's suffixes and divides by those of its context's:
    delta(w) = b(w) for a word, delta(w_1..w_n) = delta(w_2..w_n) / b(w_1..w_n-1) b(w_1..w_n).
    Float32 in lmplz's order of operations; pruned rows (NaN probability) give NaN."""
    cdef Py_ssize_t m = prob.shape[0], i
    cdef float d
    if gamma.shape[0] != m or delta.shape[0] != m or q.shape[0] != m or \
            not unigrams and (suffix.shape[0] != m or context.shape[0] != m):
        raise ValueError("collapse: arrays of different shapes")
    with nogil:
        for i in range(m):
            if unigrams:
                d = gamma[i]
            else:
                d = delta_prev[suffix[i]] / gamma_prev[context[i]]
                d = d * gamma[i]
            delta[i] = d
            q[i] = log10f(prob[i] * d)
