# Distillation kernels: the teacher's log10 p(w | h) for millions of listed n-grams
# through the LMCore protocol, so any model kind (back-off, neural, interpolated)
# serves as a teacher and no Python code runs per n-gram.
from libc.stdint cimport int32_t, int64_t
from cython.parallel cimport prange

from nplm._kernels cimport LMCore, NState, Ret, WordId, MAX_ORDER


cdef int _score_span(LMCore core, const int32_t[:, ::1] grams, float[::1] out,
                     Py_ssize_t lo, Py_ssize_t hi) except -1 nogil:
    """out[i] := log10 p(grams[i, -1] | grams[i, :-1]) for lo <= i < hi.  Rows that
    share the previous row's context reuse its state (rows come sorted)."""
    cdef int n = <int>grams.shape[1], m = n - 1, j
    cdef WordId ctx[MAX_ORDER]
    cdef NState st, tmp
    cdef Ret ret
    cdef Py_ssize_t i
    cdef bint same
    for i in range(lo, hi):
        same = i > lo
        if same:
            for j in range(m):
                if grams[i, j] != grams[i - 1, j]:
                    same = False
                    break
        if not same:
            if m == 0:
                core.null_state(&st)
            else:
                for j in range(m):            # most recent first
                    ctx[j] = <WordId>grams[i, m - 1 - j]
                core.context_state(ctx, m, &st)
        core.score_word(&st, <WordId>grams[i, m], &tmp, &ret)
        out[i] = ret.prob
    return 0


def score_rows(LMCore core, const int32_t[:, ::1] grams,   # IN (N, n) word ids, oldest first
               float[::1] out,                             # OUT (N,) log10 p(last | rest)
               int threads=1):
    """Teacher scores of n-grams: out[i] = log10 p(grams[i, n-1] | grams[i, :n-1]),
    the context given to the teacher through ``context_state`` (KenLM's GetState).
    ``threads`` > 1 splits the rows into contiguous chunks (the core must then be
    safe to call concurrently, as the back-off core is)."""
    cdef Py_ssize_t N = grams.shape[0], t, chunk
    if grams.shape[1] < 1 or grams.shape[1] > MAX_ORDER:
        raise ValueError(f"n-gram width {grams.shape[1]} outside 1..{MAX_ORDER}")
    if out.shape[0] != N:
        raise ValueError("output length differs from the number of n-grams")
    if threads < 1:
        raise ValueError("threads must be >= 1")
    if threads == 1 or N < 4096:
        with nogil:
            _score_span(core, grams, out, 0, N)
        return
    chunk = (N + threads - 1) // threads
    for t in prange(threads, nogil=True, schedule="static", num_threads=threads):
        _score_span(core, grams, out, t * chunk, min(N, (t + 1) * chunk))


def probe_groups(LMCore core,
                 const int32_t[:, ::1] ctx,        # IN (Np, n-1) contexts, oldest first, grouped
                 const int64_t[::1] ctx_off,       # IN (G+1,) group g's contexts: ctx_off[g]..ctx_off[g+1]
                 const int32_t[::1] words,         # IN candidate next words, grouped
                 const int64_t[::1] word_off,      # IN (G+1,) group g's words
                 int64_t[::1] out_ctx,             # OUT context row of each n-gram found
                 int32_t[::1] out_word,            # OUT its last word
                 float[::1] out_prob,              # OUT log10 p as matched
                 float[::1] out_bo):               # OUT the n-gram's stored back-off (-0.0: extends nothing)
    """Which (context, word) pairs are n-grams of the model (the match reaches the
    full length n): every context of a group against every word of the same group.
    Returns the number found, or -1 when the output arrays are too small."""
    cdef Py_ssize_t G = ctx_off.shape[0] - 1, g, i, k, found = 0, cap = out_word.shape[0]
    cdef int m = <int>ctx.shape[1], j
    cdef WordId buf[MAX_ORDER]
    cdef NState st, tmp
    cdef Ret ret
    if m < 1 or m >= MAX_ORDER:
        raise ValueError("context width outside 1..MAX_ORDER-1")
    if word_off.shape[0] != G + 1:
        raise ValueError("ctx_off and word_off differ in length")
    with nogil:
        for g in range(G):
            for i in range(ctx_off[g], ctx_off[g + 1]):
                for j in range(m):
                    buf[j] = <WordId>ctx[i, m - 1 - j]
                core.context_state(buf, m, &st)
                if st.length < m:
                    continue                  # the context extends nothing
                for k in range(word_off[g], word_off[g + 1]):
                    core.score_word(&st, <WordId>words[k], &tmp, &ret)
                    if ret.ngram_length == m + 1:
                        if found == cap:
                            found = -1
                            break
                        out_ctx[found] = i
                        out_word[found] = words[k]
                        out_prob[found] = ret.prob
                        out_bo[found] = tmp.backoff[m]
                        found += 1
                if found < 0:
                    break
            if found < 0:
                break
    return found
